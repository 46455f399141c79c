/*
 * pi_gp_ucb.c - pi-GP-UCB, Partitioned Improved GP-UCB (Janz, Burt, Gonzalez, "Bandit
 * optimisation of functions in the Matern kernel RKHS", AISTATS 2020; seed 002).
 *
 * This file contains the engine: a cover of [0,1]^d by hypercubes (section 3), one
 * independent GP per cover element conditioned only on the data inside it (section 2,
 * "Gaussian process regression"), the IGP-UCB width of eq. (2) per element with the
 * union-bound correction beta^A_t(delta / N~_t), N~_t = 4 (t+1)^(bd) (Lemma 6), and the
 * splitting rule rho_A^(-1/b) < |D_t^A| + 1 (section 3), b = (d+1)/(d+2nu),
 * q = d(d+1)/(d(d+2)+2nu).
 *
 * The cover. The initial cover is a regular grid of m^d cubes with m = round(T^(q/d)),
 * i.e. about T^q elements (section 5), or m = initial_divisions. A cube that splits
 * becomes an internal node of a 2^d-ary tree; the cover is the set of leaves. The paper's
 * cubes are closed and a point on a shared face lies in several of them; here every
 * point belongs to exactly ONE leaf, found by descending the tree with half-open
 * comparisons (u < mid goes low, u >= mid high; the root grid cell is floor(u m), the
 * cube's upper face at 1 included). So each observation updates one GP, and the cover's
 * leaves partition [0,1]^d. A child inherits every observation of its parent that lies
 * in it (D_t^A is "the subset of D_t^X located in A") and every pending point in it.
 * The rule is applied after every observation to the leaf receiving it, and again to the
 * new children until none satisfies it, so no leaf ever satisfies the rule (unless a
 * split ran out of memory: that leaf stays whole until its next observation).
 *
 * Each leaf's GP. Repeated inputs are common (grids, exploitation), so a leaf stores its
 * DISTINCT inputs u_j with the number c_j of observations, their sum of values and the
 * number p_j of pending hand-outs. A GP with c_j observations at u_j and noise alpha is
 * exactly the GP on the distinct inputs with averaged values and noise alpha / c_j:
 * same mean, same variance, and log|I + K/alpha| = log|K_u + alpha N^-1| + log|N|
 * - u log alpha (N = diag(c_j)), so gamma^A is exact too. Two Cholesky factors per leaf:
 *   told: rows = inputs with c_j > 0, noise alpha / c_j   -> mean (w_y, w_1) and gamma;
 *   full: rows = all inputs (c_j + p_j > 0, table order), noise alpha / (c_j + p_j)
 *                                                        -> variance.
 * Pending points are thus hallucinated in their cell: the variance counts them, the mean
 * ignores them (the same as conditioning on the current mean at those points). New inputs
 * are appended to a factor (O(n^2)); a count change is a rank-one update or downdate of
 * one diagonal entry (O(n^2)); removing an input (abandon of its only hand-out) or
 * building a child's GP is a full dpotrf. The factors are kb_chol (core/src/chol.c).
 *
 * Output: the mean uses y standardized by kb__output_stats (m and s over the distinct
 * observed points, grouped by exact coordinates as a leaf's inputs are); since they
 * change with every observation, a leaf keeps w_y = A^-1 ybar and w_1 = A^-1 1 (A the
 * told system) and mean = (k.w_y - m k.w_1) / s, so only the leaf that received data is
 * re-solved. B and
 * R are read in those units: use output_scaling = "none" for the paper's protocol.
 *
 * Choice: argmax over the candidates (finite set, or box pool) of mu^A + beta^A sigma^A
 * with A the leaf holding the candidate; per-candidate mean and variance are cached and
 * recomputed only for leaves whose data changed. t in N~_t is the index of the point
 * being chosen: observations + pending + 1. Ties go to the lowest candidate index.
 * Box pools are refreshed (kb__refresh_pool) after a split or after pool_size/4 asks.
 *
 * Options. horizon T (default 10000) fixes the initial cover and alpha = 1 + 2/T
 * (section 3; `lambda` overrides alpha, e.g. lambda = 1 as in the section 5 experiments).
 * With fitted hyperparameters (the default; `hyperparameters = fixed` gives the paper's
 * algorithm) one kernel and noise are fitted to all the data (kb__hyper_refit, at
 * observation counts fixed by the call sequence) and every leaf is rebuilt with them;
 * alpha is the fitted noise, the width the common one (kb__width), and unless horizon is
 * set the cover starts from the whole cube (initial_divisions below).
 * B, R, delta enter eq. (2). beta_scale multiplies the whole width: 1 (default) is the
 * paper's algorithm; the theoretical width (a union bound over N~_t cells, B a worst-case
 * norm) over-explores on real problems, and values around 0.1-0.5 are the usual practical
 * shrinkage (as gp-ucb's beta_scale). nu comes from the kernel: matern12/32/52 give
 * nu = 1/2, 3/2, 5/2 (the regret theorem needs nu > 1, so matern12 runs without it); an
 * unset kernel means matern32 (this engine's own `kernel` option, whose choices are the
 * three; rbf and linear are rejected when set, field "kernel"): as nu -> inf,
 * b and q -> 0 and the cover degenerates to one split of the cube, i.e. IGP-UCB.
 * Finite sets must lie in [0,1]^d after input scaling (unit or none; field
 * "candidates[i][j]"), as must warm-start observations (field "x[j]").
 * Stats: dict_size is the number of cells of the current cover; epoch stays 0 (the
 * engine hands out points one at a time, with no batches or resparsifications).
 *
 * Invariants: every pending trial and every observation is counted in exactly one leaf,
 * the one kb__pi_locate returns for its coordinates; leaf factors match their counts
 * (every input with told[j] > 0 has one told row) unless the leaf is marked broken by a
 * failed rebuild, in which case every op on it rebuilds it from the counts first
 * (gp_ready) or fails without changing them; cand_cell[i] is the leaf holding candidate
 * i of the current space.
 */
#include "../src/internal.h"

#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const matern_choices[] = {"matern12", "matern32", "matern52", NULL};

static const kb_option_spec pi_options[] = {
    {"kernel", KB_OPT_STRING, 0, 0, 0, 0, "matern32", matern_choices,
     "covariance function: a Matern kernel, whose smoothness nu builds the cover (the "
     "paper's nu = 3/2 by default)"},
    {"horizon", KB_OPT_INTEGER, 1, 1e9, 0, 10000, NULL, NULL,
     "horizon T: when set, the initial cover has about T^q cells (the paper's grid); not "
     "set with fitted hyperparameters (the default), the cover starts as the whole cube and "
     "grows by the splitting rule; with hyperparameters = fixed it also sets alpha = 1 + 2/T"},
    {"B", KB_OPT_NUMBER, 0, INFINITY, 0, 1.0, NULL, NULL,
     "bound on the RKHS norm of the objective (in the engine's output units)"},
    {"R", KB_OPT_NUMBER, 0, INFINITY, 0, 1.0, NULL, NULL,
     "sub-Gaussian constant of the noise (in the engine's output units)"},
    {"delta", KB_OPT_NUMBER, 0, KB__BELOW_ONE, 1, 0.1, NULL, NULL, "confidence level 1 - delta, 0 < delta < 1"},
    {"lambda", KB_OPT_NUMBER, 0, INFINITY, 0, 0.0, NULL, NULL,
     "GP regularization alpha; 0: the fitted noise (hyperparameters = fit), or the "
     "paper's 1 + 2/horizon (fixed)"},
    {"beta_scale", KB_OPT_NUMBER, 0, INFINITY, 0, 1.0, NULL, NULL,
     "practical multiplier of the theoretical width beta (1 = theory)"},
    {"initial_divisions", KB_OPT_INTEGER, 0, 1e6, 0, 0, NULL, NULL,
     "cells per side of the initial grid cover; 0: round(T^(q/d)) when horizon is set or "
     "hyperparameters = fixed, else 1 (the whole cube)"},
    {NULL, 0, 0, 0, 0, 0, NULL, NULL, NULL},
};

#define MAX_INITIAL_CELLS (1u << 22)

/* A split makes 2^d children, each with its own GP (section 3's dyadic refinement): at
 * d = 10 that is 1,024 cells per split, already more cells than a run of thousands of
 * trials can fill; at d = 20 a million per split, and a shift of 64 or more is undefined.
 * Wider spaces are refused at creation (issue 16: d = 64 crashed the daemon). */
#define PI_MAX_DIM 10

typedef struct leaf_gp {
    size_t n, cap;   /* distinct inputs */
    double *u;       /* n x d */
    unsigned *told, *pend;
    double *ysum;
    size_t n_told;   /* |D^A|: observations with multiplicity */
    size_t n_pend;
    kb_chol tf, ff;  /* told and full factors (row-major; zeroed = empty) */
    size_t *tpt;     /* told row r is distinct input tpt[r]; full row r is input r */
    int broken;      /* tf, ff do not match the counts (a rebuild failed): see gp_ready */
    double *w_y, *w_1; /* told system solves, tf.n each */
    uint64_t ff_resets; /* bumped by every change of ff other than appending rows */
    /* The variance cache: V = L_f^-1 k(inputs, C) for the leaf's candidates C, v_rows
     * (the full factor's leading rows) x v_cols, row-major, room for v_cap rows; valid
     * while ff_resets == v_resets and the candidates are those of assignment v_assign
     * (pi_state.assigns). A hand-out of a new input appends a row to ff, and the next
     * refresh then solves that row alone (O(rows x C)) instead of the whole
     * O(rows^2 x C) solve: one ask of 1,000 points took 22 s (a leaf of 1,000 pending
     * inputs and 2,048 candidates), docs/BENCHMARKS.md, fifty-seventh session. */
    double *V;
    size_t v_rows, v_cols, v_cap;
    uint64_t v_resets, v_assign;
} leaf_gp;

typedef struct cell {
    double side;
    int level;
    size_t child;    /* first of 2^d children; 0 for a leaf (roots are never children) */
    leaf_gp *gp;     /* leaves only */
    size_t cand_off, cand_n;
    double gamma;    /* cached gp_gamma, valid when !stale */
    int stale;       /* w, gamma and candidate caches out of date */
} cell;

typedef struct pi_state {
    size_t d, m, n_roots;
    double nu, b, q, alpha, B, R, delta, beta_scale;
    cell *cells;
    double *lo;      /* n_cells x d lower corners */
    size_t n_cells, cap_cells;
    size_t *leaves, n_leaves;
    size_t *cand_cell, *cand_order;
    double *mu_y, *mu_1, *sd, *beta;
    size_t asks_since_refresh;
    int split_since_refresh;
    uint64_t splits;
    uint64_t assigns;  /* assign_candidates calls: which candidates a variance cache is for */
    size_t v_doubles;  /* held by the leaves' variance caches, at most PI_CACHE_DOUBLES */
    double sec_ask, sec_tell;
} pi_state;

/* The variance caches' memory bound (32 MiB per study): past it a leaf's variances are
 * solved whole at each refresh, as before the cache (the same size as the one-off
 * scratch that solve needs). */
#define PI_CACHE_DOUBLES ((size_t)1 << 22)

#define NO_ROW ((size_t)-1)

/* Row of input j in the told factor, or NO_ROW. Unless the leaf is broken, every input
 * with told[j] > 0 has exactly one row (gp_rebuild and gp_add establish it), so callers
 * treat NO_ROW as KB_ESTATE. */
static size_t told_row(const leaf_gp *g, size_t j)
{
    for (size_t r = 0; r < g->tf.n; r++)
        if (g->tpt[r] == j)
            return r;
    return NO_ROW;
}

static double told_noise(const pi_state *st, const leaf_gp *g, size_t j)
{
    return st->alpha / g->told[j];
}

static double full_noise(const pi_state *st, const leaf_gp *g, size_t j)
{
    return st->alpha / (g->told[j] + g->pend[j]);
}

/* ------------------------------------------------------- leaf factors */

/* Input of factor row r: pt[r], or r when pt is NULL (the full factor). */
static size_t row_input(const size_t *pt, size_t r) { return pt ? pt[r] : r; }

/* Appends input j as the factor's last row, with the given noise on its diagonal. */
static int factor_append(kb_chol *f, const size_t *pt, const kb_kernel *k, const leaf_gp *g,
                         size_t j, double noise)
{
    size_t r = f->n, d = k->dim;
    double a[r ? r : 1];
    for (size_t s = 0; s < r; s++)
        a[s] = kb_kernel_eval(k, g->u + row_input(pt, s) * d, g->u + j * d);
    return kb__chol_append(f, a, kb_kernel_eval(k, g->u + j * d, g->u + j * d) + noise, NULL);
}

/* A + delta e_r e_r^T: rank-one update (delta > 0) or downdate (delta < 0). */
static int diag_change(kb_chol *f, size_t r, double delta)
{
    double x[f->n];
    memset(x, 0, f->n * sizeof *x);
    x[r] = sqrt(fabs(delta));
    if (delta < 0)
        return kb__chol_downdate(f, x);
    kb__chol_update(f, x);
    return KB_OK;
}

/* Factors the n rows of inputs row_input(pt, 0..n) with the given noises. */
static int factor_build(kb_chol *f, const size_t *pt, size_t n, const kb_kernel *k,
                        const leaf_gp *g, const double *noise)
{
    size_t d = k->dim;
    if (n == 0) {
        kb__chol_truncate(f, 0);
        return KB_OK;
    }
    double *P = malloc(n * d * sizeof *P), *K = malloc(n * n * sizeof *K);
    int rc = KB_ENOMEM;
    if (P && K) {
        for (size_t r = 0; r < n; r++)
            memcpy(P + r * d, g->u + row_input(pt, r) * d, d * sizeof *P);
        kb_kernel_matrix(k, P, n, P, n, K);
        for (size_t r = 0; r < n; r++)
            K[r * n + r] += noise[r];
        rc = kb__chol_factor(f, K, n, n);
    }
    free(P);
    free(K);
    return rc;
}

/* ---------------------------------------------------------- leaf GPs */

/* Drops g's variance cache (its memory back to the study's bound). */
static void cache_drop(pi_state *st, leaf_gp *g)
{
    st->v_doubles -= g->v_cap * g->v_cols;
    free(g->V);
    g->V = NULL;
    g->v_cap = g->v_cols = g->v_rows = 0;
}

static void gp_free(pi_state *st, leaf_gp *g)
{
    if (!g)
        return;
    cache_drop(st, g);
    free(g->u);
    free(g->told);
    free(g->pend);
    free(g->ysum);
    free(g->w_y);
    free(g->w_1);
    kb__chol_free(&g->tf);
    kb__chol_free(&g->ff);
    free(g->tpt);
    free(g);
}

/* Room for one more distinct input in the table and both factors. */
static int gp_reserve(leaf_gp *g, size_t d)
{
    size_t need = g->n + 1;
    if (need <= g->cap)
        return KB_OK;
    size_t nc = g->cap ? 2 * g->cap : 8;
    double *u = realloc(g->u, nc * d * sizeof *u);
    if (u)
        g->u = u;
    unsigned *t = realloc(g->told, nc * sizeof *t);
    if (t)
        g->told = t;
    unsigned *p = realloc(g->pend, nc * sizeof *p);
    if (p)
        g->pend = p;
    double *ys = realloc(g->ysum, nc * sizeof *ys);
    if (ys)
        g->ysum = ys;
    double *wy = realloc(g->w_y, nc * sizeof *wy);
    if (wy)
        g->w_y = wy;
    double *w1 = realloc(g->w_1, nc * sizeof *w1);
    if (w1)
        g->w_1 = w1;
    size_t *pt = realloc(g->tpt, nc * sizeof *pt);
    if (pt)
        g->tpt = pt;
    /* both factors have at most one row per input */
    if (!u || !t || !p || !ys || !wy || !w1 || !pt || kb__chol_reserve(&g->tf, nc) ||
        kb__chol_reserve(&g->ff, nc))
        return KB_ENOMEM;
    g->cap = nc;
    return KB_OK;
}

/* Index of the distinct input equal to u, or (size_t)-1. */
static size_t gp_find(const leaf_gp *g, const double *u, size_t d)
{
    for (size_t j = 0; j < g->n; j++)
        if (memcmp(g->u + j * d, u, d * sizeof *u) == 0)
            return j;
    return (size_t)-1;
}

/* Rebuilds both factors from the counts (told rows in table order: the told-row invariant
 * of told_row holds after it). On failure the leaf is marked broken. */
static int gp_rebuild(const pi_state *st, const kb_kernel *k, leaf_gp *g)
{
    g->broken = 1;
    g->ff_resets++;
    double noise[g->n ? g->n : 1];
    size_t nt = 0;
    for (size_t j = 0; j < g->n; j++)
        if (g->told[j]) {
            noise[nt] = told_noise(st, g, j);
            g->tpt[nt++] = j;
        }
    int rc = factor_build(&g->tf, g->tpt, nt, k, g, noise);
    if (rc)
        return rc;
    for (size_t j = 0; j < g->n; j++)
        noise[j] = full_noise(st, g, j);
    rc = factor_build(&g->ff, NULL, g->n, k, g, noise);
    g->broken = rc != KB_OK;
    return rc;
}

/* Every op that reads or changes a leaf's factors calls this first: the counts are the
 * truth and the factors their cache, so a leaf a failed rebuild left broken is rebuilt
 * from its counts, or the op fails before changing anything. Nothing indexes a factor
 * whose rows do not match the table. */
static int gp_ready(const pi_state *st, const kb_kernel *k, leaf_gp *g)
{
    return g->broken ? gp_rebuild(st, k, g) : KB_OK;
}

/* Moves factor row r from noise `from` to `to`. */
static int renoise(kb_chol *f, size_t r, double from, double to)
{
    return from == to ? KB_OK : diag_change(f, r, to - from);
}

/* renoise for the full factor's row j: a change of that row (not an append) makes the
 * variance cache stale. */
static int ff_renoise(leaf_gp *g, size_t j, double from, double to)
{
    if (from != to)
        g->ff_resets++;
    return renoise(&g->ff, j, from, to);
}

/* Adds (told, pend) to input u (new input appended if absent) and updates both factors.
 * On failure the counts are restored and the factors rebuilt from them. */
static int gp_add(const pi_state *st, const kb_kernel *k, leaf_gp *g, const double *u,
                  int dtold, int dpend, double y)
{
    size_t d = k->dim;
    int rc = gp_ready(st, k, g);
    if (rc)
        return rc;
    if (gp_reserve(g, d))
        return KB_ENOMEM;
    size_t j = gp_find(g, u, d);
    int fresh = j == (size_t)-1;
    if (fresh) {
        j = g->n++;
        memcpy(g->u + j * d, u, d * sizeof *u);
        g->told[j] = g->pend[j] = 0;
        g->ysum[j] = 0.0;
    }
    double tf_old = g->told[j] ? told_noise(st, g, j) : 0.0;
    double ff_old = fresh ? 0.0 : full_noise(st, g, j);
    g->told[j] += (unsigned)dtold;
    g->pend[j] = (unsigned)((int)g->pend[j] + dpend);
    g->ysum[j] += y;
    g->n_told += (size_t)dtold;
    g->n_pend = (size_t)((long)g->n_pend + dpend);
    rc = fresh ? factor_append(&g->ff, NULL, k, g, j, full_noise(st, g, j))
               : ff_renoise(g, j, ff_old, full_noise(st, g, j));
    if (!rc && dtold && tf_old == 0.0) {
        g->tpt[g->tf.n] = j; /* the told-row invariant for the new told input */
        rc = factor_append(&g->tf, g->tpt, k, g, j, told_noise(st, g, j));
    } else if (!rc && dtold) {
        size_t r = told_row(g, j);
        rc = r == NO_ROW ? KB_ESTATE : renoise(&g->tf, r, tf_old, told_noise(st, g, j));
    }
    if (rc && rc != KB_ESTATE) /* a downdate lost positivity to rounding: factor afresh */
        rc = gp_rebuild(st, k, g);
    if (rc) { /* the counts as they were; their factors rebuilt (or the leaf left broken) */
        g->told[j] -= (unsigned)dtold;
        g->pend[j] = (unsigned)((int)g->pend[j] - dpend);
        g->ysum[j] -= y;
        g->n_told -= (size_t)dtold;
        g->n_pend = (size_t)((long)g->n_pend - dpend);
        if (fresh)
            g->n--;
        gp_rebuild(st, k, g);
    }
    return rc;
}

/* Forgets one pending hand-out at input j (abandon). Fails only before changing anything
 * (a broken leaf that cannot be rebuilt); past that point a failed rebuild leaves the
 * leaf broken, to be rebuilt by the next op on it, and the abandon stands. */
static int gp_unpend(const pi_state *st, const kb_kernel *k, leaf_gp *g, size_t j)
{
    size_t d = k->dim;
    int rc = gp_ready(st, k, g);
    if (rc)
        return rc;
    double old = full_noise(st, g, j);
    g->pend[j]--;
    g->n_pend--;
    if (g->told[j] + g->pend[j] > 0) {
        if (ff_renoise(g, j, old, full_noise(st, g, j)))
            gp_rebuild(st, k, g);
        return KB_OK;
    }
    /* The input carries nothing any more: drop it from the table. */
    size_t tail = g->n - j - 1;
    memmove(g->u + j * d, g->u + (j + 1) * d, tail * d * sizeof *g->u);
    memmove(g->told + j, g->told + j + 1, tail * sizeof *g->told);
    memmove(g->pend + j, g->pend + j + 1, tail * sizeof *g->pend);
    memmove(g->ysum + j, g->ysum + j + 1, tail * sizeof *g->ysum);
    g->n--;
    if (tail == 0) {
        g->ff_resets++;
        kb__chol_truncate(&g->ff, g->ff.n - 1);
        return KB_OK;
    }
    gp_rebuild(st, k, g);
    return KB_OK;
}

/* w_y = A^-1 ybar and w_1 = A^-1 1 for the told system A = L L^T. */
static void gp_solve(leaf_gp *g)
{
    for (size_t r = 0; r < g->tf.n; r++) {
        size_t j = g->tpt[r];
        g->w_y[r] = g->ysum[j] / g->told[j];
        g->w_1[r] = 1.0;
    }
    kb__chol_solve(&g->tf, g->w_y);
    kb__chol_solve(&g->tf, g->w_1);
}

/* gamma = 1/2 log|I + K/alpha| over the told data, with multiplicities (see the header). */
static double gp_gamma(const pi_state *st, const leaf_gp *g)
{
    double s = 0.0;
    for (size_t r = 0; r < g->tf.n; r++)
        s += log(kb__chol_pivot(&g->tf, r)) + 0.5 * log((double)g->told[g->tpt[r]]) -
             0.5 * log(st->alpha);
    return s;
}

/* Mean parts (k.w_y, k.w_1) at the m rows of U (m x d). KB_ENOMEM. */
static int gp_mean_parts(const kb_kernel *k, const leaf_gp *g, const double *U, size_t m,
                         double *my, double *m1)
{
    size_t d = k->dim, nt = g->tf.n;
    if (nt == 0 || m == 0) {
        memset(my, 0, m * sizeof *my);
        memset(m1, 0, m * sizeof *m1);
        return KB_OK;
    }
    double *Kt = malloc(nt * m * sizeof *Kt), *Pt = malloc(nt * d * sizeof *Pt);
    int rc = KB_ENOMEM;
    if (Kt && Pt) {
        for (size_t r = 0; r < nt; r++)
            memcpy(Pt + r * d, g->u + g->tpt[r] * d, d * sizeof *Pt);
        kb_kernel_matrix(k, Pt, nt, U, m, Kt);
        cblas_dgemv(CblasRowMajor, CblasTrans, (int)nt, (int)m, 1.0, Kt, (int)m, g->w_y, 1,
                    0.0, my, 1);
        cblas_dgemv(CblasRowMajor, CblasTrans, (int)nt, (int)m, 1.0, Kt, (int)m, g->w_1, 1,
                    0.0, m1, 1);
        rc = KB_OK;
    }
    free(Kt);
    free(Pt);
    return rc;
}

/* Variances at the m rows of U, from V (ff.n x m, row-major) = L_f^-1 k(inputs, U),
 * of which the rows before `from` are already solved: the others are computed here. */
static void gp_variance(const kb_kernel *k, const leaf_gp *g, const double *U, size_t m,
                        double *V, size_t from, double *var)
{
    size_t nf = g->ff.n, d = k->dim;
    kb_kernel_diag(k, U, m, var);
    if (nf > from) {
        kb_kernel_matrix(k, g->u + from * d, nf - from, U, m, V + from * m);
        kb__chol_trsm_tail(&g->ff, from, V, m, m);
    }
    for (size_t r = 0; r < nf; r++)
        for (size_t i = 0; i < m; i++)
            var[i] -= V[r * m + i] * V[r * m + i];
    for (size_t i = 0; i < m; i++)
        var[i] = var[i] > 0.0 ? var[i] : 0.0;
}

/* Mean parts and variances at the m rows of U, solved whole (no cache). KB_ENOMEM. */
static int gp_predict(const kb_kernel *k, const leaf_gp *g, const double *U, size_t m,
                      double *my, double *m1, double *var)
{
    double *V = malloc((g->ff.n ? g->ff.n : 1) * (m ? m : 1) * sizeof *V);
    int rc = V ? gp_mean_parts(k, g, U, m, my, m1) : KB_ENOMEM;
    if (!rc)
        gp_variance(k, g, U, m, V, 0, var);
    free(V);
    return rc;
}

/* Room in g's variance cache for its full factor's rows over m candidates: 1 when the
 * study's bound leaves none (the cache dropped), KB_ENOMEM (the cache as it was). */
static int cache_room(pi_state *st, leaf_gp *g, size_t m)
{
    size_t nf = g->ff.n;
    if (nf <= g->v_cap && m == g->v_cols)
        return KB_OK;
    size_t cap = m == g->v_cols && 2 * g->v_cap > nf ? 2 * g->v_cap : nf;
    size_t others = st->v_doubles - g->v_cap * g->v_cols;
    if (cap > (PI_CACHE_DOUBLES - others) / m) {
        cache_drop(st, g);
        return 1;
    }
    double *V = realloc(g->V, cap * m * sizeof *V);
    if (!V)
        return KB_ENOMEM;
    if (m != g->v_cols)
        g->v_rows = 0;
    g->V = V;
    st->v_doubles = others + cap * m;
    g->v_cap = cap;
    g->v_cols = m;
    return KB_OK;
}

/* Variances of a leaf's m candidates U through its variance cache (leaf_gp.V): only the
 * rows appended to the full factor since the cache was filled are solved. Beyond the
 * study's bound the solve is whole, in scratch. KB_ENOMEM. */
static int leaf_variance(pi_state *st, const kb_kernel *k, leaf_gp *g, const double *U,
                         size_t m, double *var)
{
    if (g->ff.n == 0 || m == 0) {
        kb_kernel_diag(k, U, m, var);
        return KB_OK;
    }
    int valid = g->v_resets == g->ff_resets && g->v_assign == st->assigns &&
                g->v_cols == m && g->v_rows <= g->ff.n;
    size_t from = valid ? g->v_rows : 0;
    int rc = cache_room(st, g, m);
    if (rc == 1) {
        double *V = malloc(g->ff.n * m * sizeof *V);
        if (!V)
            return KB_ENOMEM;
        gp_variance(k, g, U, m, V, 0, var);
        free(V);
        return KB_OK;
    }
    if (rc)
        return rc;
    gp_variance(k, g, U, m, g->V, from, var);
    g->v_rows = g->ff.n;
    g->v_resets = g->ff_resets;
    g->v_assign = st->assigns;
    return KB_OK;
}

/* ------------------------------------------------------------- the cover */

static size_t n_children(const pi_state *st) { return (size_t)1 << st->d; }

/* The leaf holding u (internal coordinates in [0,1]^d). */
static size_t locate(const pi_state *st, const double *u)
{
    size_t id = 0, stride = 1;
    for (size_t j = 0; j < st->d; j++) {
        double c = floor(u[j] * (double)st->m);
        size_t k = c < 0 ? 0 : c >= (double)st->m ? st->m - 1 : (size_t)c;
        id += k * stride;
        stride *= st->m;
    }
    while (st->cells[id].child) {
        const cell *c = &st->cells[id];
        const double *lo = st->lo + id * st->d;
        size_t bits = 0;
        for (size_t j = 0; j < st->d; j++)
            bits |= (size_t)(u[j] >= lo[j] + 0.5 * c->side) << j;
        id = c->child + bits;
    }
    return id;
}

static int add_cells(pi_state *st, size_t n)
{
    size_t need = st->n_cells + n;
    if (need > st->cap_cells) {
        size_t nc = st->cap_cells ? st->cap_cells : 64;
        while (nc < need)
            nc *= 2;
        cell *c = realloc(st->cells, nc * sizeof *c);
        if (c)
            st->cells = c;
        double *lo = realloc(st->lo, nc * st->d * sizeof *lo);
        if (lo)
            st->lo = lo;
        size_t *lv = realloc(st->leaves, nc * sizeof *lv);
        if (lv)
            st->leaves = lv;
        double *beta = realloc(st->beta, nc * sizeof *beta);
        if (beta)
            st->beta = beta;
        if (!c || !lo || !lv || !beta)
            return KB_ENOMEM;
        st->cap_cells = nc;
    }
    while (st->n_cells < need) {
        cell *c = &st->cells[st->n_cells];
        memset(c, 0, sizeof *c);
        if (!(c->gp = calloc(1, sizeof(leaf_gp))))
            return KB_ENOMEM;
        c->stale = 1;
        st->n_cells++;
    }
    return KB_OK;
}

/* Assigns every candidate of the current space to its leaf (counting sort by leaf). */
static void assign_candidates(kb_engine *e)
{
    pi_state *st = e->impl;
    st->assigns++;
    size_t n = e->space->n, d = st->d;
    for (size_t c = 0; c < st->n_cells; c++)
        st->cells[c].cand_n = 0;
    for (size_t i = 0; i < n; i++) {
        st->cand_cell[i] = locate(st, e->space->u + i * d);
        st->cells[st->cand_cell[i]].cand_n++;
    }
    size_t off = 0;
    for (size_t c = 0; c < st->n_cells; c++) {
        st->cells[c].cand_off = off;
        off += st->cells[c].cand_n;
        st->cells[c].cand_n = 0;
    }
    for (size_t i = 0; i < n; i++) {
        cell *c = &st->cells[st->cand_cell[i]];
        st->cand_order[c->cand_off + c->cand_n++] = i;
    }
}

static int split_rule(const pi_state *st, const cell *c)
{
    return exp(-log(c->side) / st->b) < (double)c->gp->n_told + 1.0;
}

/* Removes the cells a failed split of leaf `id` added from `first` on: `id` is a leaf
 * again, its GP untouched. Returns rc. */
static int undo_split(pi_state *st, size_t id, size_t first, int rc)
{
    for (size_t c = first; c < st->n_cells; c++)
        gp_free(st, st->cells[c].gp);
    st->n_cells = first;
    st->cells[id].child = 0;
    return rc;
}

/* Splits leaf `id` into 2^d children that inherit its inputs, counts and values. Out of
 * memory (KB_ENOMEM) undoes it: the leaf stays whole with its GP. A child whose factors
 * cannot be built is left broken, rebuilt at its first use (gp_ready). */
static int split(kb_engine *e, size_t id)
{
    pi_state *st = e->impl;
    size_t d = st->d, nch = n_children(st), first = st->n_cells;
    int rc = add_cells(st, nch);
    if (rc)
        return undo_split(st, id, first, rc);
    cell *p = &st->cells[id];
    leaf_gp *g = p->gp;
    for (size_t c = 0; c < nch; c++) {
        cell *ch = &st->cells[first + c];
        ch->side = 0.5 * p->side;
        ch->level = p->level + 1;
        for (size_t j = 0; j < d; j++)
            st->lo[(first + c) * d + j] = st->lo[id * d + j] + ((c >> j) & 1) * ch->side;
    }
    p->child = first;
    for (size_t j = 0; j < g->n; j++) {
        leaf_gp *cg = st->cells[locate(st, g->u + j * d)].gp;
        if ((rc = gp_reserve(cg, d)))
            return undo_split(st, id, first, rc);
        size_t k = cg->n++;
        memcpy(cg->u + k * d, g->u + j * d, d * sizeof *g->u);
        cg->told[k] = g->told[j];
        cg->pend[k] = g->pend[j];
        cg->ysum[k] = g->ysum[j];
        cg->n_told += g->told[j];
        cg->n_pend += g->pend[j];
    }
    for (size_t c = 0; c < nch; c++)
        gp_rebuild(st, &e->kernel, st->cells[first + c].gp);
    gp_free(st, g);
    p->gp = NULL;
    for (size_t i = 0; i < st->n_leaves; i++)
        if (st->leaves[i] == id)
            st->leaves[i] = first;
    for (size_t c = 1; c < nch; c++)
        st->leaves[st->n_leaves++] = first + c;
    st->splits++;
    st->split_since_refresh = 1;
    return KB_OK;
}

/* Applies the splitting rule to leaf id and, recursively, to its children. */
static int split_while_needed(kb_engine *e, size_t id)
{
    pi_state *st = e->impl;
    if (!split_rule(st, &st->cells[id]))
        return KB_OK;
    int rc = split(e, id);
    size_t first = st->cells[id].child;
    for (size_t c = 0; c < n_children(st) && !rc; c++)
        rc = split_while_needed(e, first + c);
    return rc;
}

/* ------------------------------------------------------------- the engine */

static double kernel_nu(kb_kernel_kind kind)
{
    return kind == KB_KERNEL_MATERN12 ? 0.5 : kind == KB_KERNEL_MATERN32 ? 1.5 : 2.5;
}

/* Cross-field checks: delta < 1, finite sets inside [0,1]^d (a Matern kernel is the
 * `kernel` option's own choice list). */
static int check_config(kb_engine *e, kb_error *err)
{
    if (strcmp(kb_config_string(e->cfg, "output_scaling"), "warp") == 0)
        return kb__fail(err, KB_EINVAL, "output_scaling",
                        "pi-gp-ucb's leaf solves are affine in y: output_scaling must be "
                        "auto, standardize or none");
    if (!e->space->finite)
        return KB_OK;
    const char *scaling = kb_config_string(e->cfg, "input_scaling");
    if (strcmp(scaling, "standardize") == 0)
        return kb__fail(err, KB_EINVAL, "input_scaling",
                        "pi-gp-ucb covers [0,1]^d: input_scaling must be unit or none");
    size_t d = e->space->dim;
    for (size_t i = 0; i < e->space->n * d; i++)
        if (!(e->space->u[i] >= 0.0 && e->space->u[i] <= 1.0)) {
            char field[KB_ERROR_FIELD_MAX];
            snprintf(field, sizeof field, "candidates[%zu][%zu]", i / d, i % d);
            return kb__fail(err, KB_EINVAL, field,
                            "candidate outside [0,1]^d (pi-gp-ucb covers the unit cube)");
        }
    return KB_OK;
}

static void pi_destroy(kb_engine *e)
{
    pi_state *st = e->impl;
    if (!st)
        return;
    for (size_t c = 0; c < st->n_cells; c++)
        gp_free(st, st->cells[c].gp);
    free(st->cells);
    free(st->lo);
    free(st->leaves);
    free(st->beta);
    free(st->cand_cell);
    free(st->cand_order);
    free(st->mu_y);
    free(st->mu_1);
    free(st->sd);
    free(st);
    e->impl = NULL;
}

/* The initial grid of m^d cubes; a cover too large is the fault of `option` (the one that
 * set m). */
static int initial_cover(pi_state *st, const char *option, kb_error *err)
{
    size_t total = 1;
    for (size_t j = 0; j < st->d; j++) {
        if (total > MAX_INITIAL_CELLS / st->m)
            return kb__fail(err, KB_ERANGE, option,
                            "the initial cover would have more than %u cells; lower %s",
                            MAX_INITIAL_CELLS, option);
        total *= st->m;
    }
    if (add_cells(st, total))
        return kb__fail(err, KB_ENOMEM, NULL, "out of memory");
    st->n_roots = st->n_leaves = total;
    for (size_t id = 0; id < total; id++) {
        size_t rest = id;
        st->cells[id].side = 1.0 / (double)st->m;
        for (size_t j = 0; j < st->d; j++) {
            st->lo[id * st->d + j] = (double)(rest % st->m) / (double)st->m;
            rest /= st->m;
        }
        st->leaves[id] = id;
    }
    return KB_OK;
}

/* The paper's m = round(T^(q/d)) (section 5) is for a known horizon T; with fitted
 * hyperparameters and no horizon given the cover starts as the whole cube and grows by the
 * splitting rule alone, so that early leaves hold data (at T = 10,000 and d = 3 the
 * paper's grid has 512 cells, empty for most of a run of a few hundred trials, and the
 * engine is then close to random search: docs/BENCHMARKS.md). */
static size_t initial_divisions(const kb_engine *e, const pi_state *st, double T)
{
    if (e->fit_on && !kb_config_is_set(e->cfg, "horizon"))
        return 1;
    return (size_t)fmax(1.0, round(pow(T, st->q / (double)st->d)));
}

static int pi_create(kb_engine *e, kb_error *err)
{
    int rc = check_config(e, err);
    if (rc)
        return rc;
    pi_state *st = calloc(1, sizeof *st);
    if (!st)
        return kb__fail(err, KB_ENOMEM, NULL, "out of memory");
    e->impl = st;
    size_t d = st->d = e->space->dim, n = e->space->n;
    double T = kb_config_number(e->cfg, "horizon");
    st->nu = kernel_nu(e->kernel.kind);
    st->b = (d + 1.0) / (d + 2.0 * st->nu);
    st->q = d * (d + 1.0) / (d * (d + 2.0) + 2.0 * st->nu);
    double lambda = kb_config_number(e->cfg, "lambda");
    st->alpha = lambda > 0 ? lambda : e->fit_on ? e->noise : 1.0 + 2.0 / T;
    e->warp = 0; /* the leaves keep w_y, w_1: the mean must stay affine in y */
    st->B = kb_config_number(e->cfg, "B");
    st->R = kb_config_number(e->cfg, "R");
    st->delta = kb_config_number(e->cfg, "delta");
    st->beta_scale = kb_config_number(e->cfg, "beta_scale");
    double m = kb_config_number(e->cfg, "initial_divisions");
    st->m = m > 0 ? (size_t)m : initial_divisions(e, st, T);
    if ((rc = initial_cover(st, m > 0 ? "initial_divisions" : "horizon", err)))
        goto fail;
    st->cand_cell = malloc(n * sizeof *st->cand_cell);
    st->cand_order = malloc(n * sizeof *st->cand_order);
    st->mu_y = malloc(n * sizeof *st->mu_y);
    st->mu_1 = malloc(n * sizeof *st->mu_1);
    st->sd = malloc(n * sizeof *st->sd);
    if (!st->cand_cell || !st->cand_order || !st->mu_y || !st->mu_1 || !st->sd) {
        rc = kb__fail(err, KB_ENOMEM, NULL, "out of memory");
        goto fail;
    }
    assign_candidates(e);
    return KB_OK;
fail:
    pi_destroy(e);
    return rc;
}

/* Re-solves a stale leaf and refreshes the caches of its candidates. */
static int refresh_leaf(kb_engine *e, size_t id)
{
    pi_state *st = e->impl;
    cell *c = &st->cells[id];
    if (!c->stale)
        return KB_OK;
    int rc = gp_ready(st, &e->kernel, c->gp);
    if (rc)
        return rc;
    size_t d = st->d, m = c->cand_n;
    gp_solve(c->gp);
    double *U = malloc((m ? m : 1) * d * sizeof *U);
    double *my = malloc((m ? m : 1) * 3 * sizeof *my);
    rc = KB_ENOMEM;
    if (!U || !my)
        goto done;
    for (size_t i = 0; i < m; i++)
        memcpy(U + i * d, e->space->u + st->cand_order[c->cand_off + i] * d, d * sizeof *U);
    if ((rc = gp_mean_parts(&e->kernel, c->gp, U, m, my, my + m)) ||
        (rc = leaf_variance(st, &e->kernel, c->gp, U, m, my + 2 * m)))
        goto done;
    for (size_t i = 0; i < m; i++) {
        size_t k = st->cand_order[c->cand_off + i];
        st->mu_y[k] = my[i];
        st->mu_1[k] = my[m + i];
        st->sd[k] = sqrt(my[2 * m + i]);
    }
    c->gamma = gp_gamma(st, c->gp);
    c->stale = 0;
done:
    free(U);
    free(my);
    return rc;
}

/* Box spaces: a new pool after a split, or after pool_size / 4 asks without one, or
 * when `spent` (no pool point is allowed). */
static void maybe_refresh_pool(kb_engine *e, int spent)
{
    pi_state *st = e->impl;
    if (e->space->finite)
        return;
    size_t every = e->space->n / 4 ? e->space->n / 4 : 1;
    if (!spent && !st->split_since_refresh && st->asks_since_refresh < every)
        return;
    kb__refresh_pool(e, 0, NULL);
    assign_candidates(e);
    for (size_t i = 0; i < st->n_leaves; i++)
        st->cells[st->leaves[i]].stale = 1;
    st->split_since_refresh = 0;
    st->asks_since_refresh = 0;
}

/* beta^A_t(delta / N~_t) of eq. (2) for every leaf, t = points chosen so far + 1; with
 * fitted hyperparameters the common width instead (kb__width). */
static void leaf_widths(kb_engine *e)
{
    pi_state *st = e->impl;
    double t = (double)(e->n_obs + e->n_pending + 1);
    double log_n = log(4.0) + st->b * (double)st->d * log(t + 1.0);
    for (size_t i = 0; i < st->n_leaves; i++) {
        size_t id = st->leaves[i];
        double g = st->cells[id].gamma;
        double theory = st->beta_scale *
                        (st->B + st->R * sqrt(2.0 * (g + 1.0 + log_n - log(st->delta))));
        st->beta[id] = kb__width(e, theory, KB_WIDTH_UCB);
    }
}

/* The code of a failed leaf operation, with its message. */
static int leaf_fail(kb_error *err, int rc)
{
    return kb__fail(err, rc, NULL, "%s",
                    rc == KB_ENOMEM  ? "out of memory"
                    : rc == KB_ESTATE ? "a leaf's factor does not match its data"
                                      : "a leaf's kernel matrix is not positive definite");
}

/* A refit (kb__hyper_due) changes every leaf's kernel and noise: every leaf is marked
 * broken first, so that one whose rebuild fails (or is not reached) is rebuilt before its
 * next use rather than used with the old kernel. */
static int refit(kb_engine *e, kb_error *err)
{
    pi_state *st = e->impl;
    int rc = kb__hyper_refit(e, err);
    if (rc)
        return rc;
    if (!kb_config_is_set(e->cfg, "lambda"))
        st->alpha = e->noise;
    for (size_t i = 0; i < st->n_leaves; i++) {
        cell *c = &st->cells[st->leaves[i]];
        c->gp->broken = 1;
        c->stale = 1;
    }
    for (size_t i = 0; i < st->n_leaves; i++)
        if ((rc = gp_ready(st, &e->kernel, st->cells[st->leaves[i]].gp)))
            return leaf_fail(err, rc);
    return KB_OK;
}

/* The leaves' posteriors and widths for the current pool. */
static int score_leaves(kb_engine *e, kb_error *err)
{
    pi_state *st = e->impl;
    for (size_t i = 0; i < st->n_leaves; i++) {
        int rc = refresh_leaf(e, st->leaves[i]);
        if (rc)
            return leaf_fail(err, rc);
    }
    leaf_widths(e);
    return KB_OK;
}

/* The allowed candidate of largest UCB, or (size_t)-1 when none is allowed. */
static size_t best_ucb(kb_engine *e)
{
    pi_state *st = e->impl;
    double mean, sd;
    kb__output_stats(e, &mean, &sd);
    size_t best = (size_t)-1;
    double best_ucb = -INFINITY;
    for (size_t i = 0; i < e->space->n; i++) {
        if (kb__excluded(e, i))
            continue;
        double ucb = (st->mu_y[i] - mean * st->mu_1[i]) / sd +
                     st->beta[st->cand_cell[i]] * st->sd[i];
        if (best == (size_t)-1 || ucb > best_ucb) {
            best = i;
            best_ucb = ucb;
        }
    }
    return best;
}

static int pi_ask_one(kb_engine *e, size_t *index, kb_ask_result *res, kb_error *err)
{
    pi_state *st = e->impl;
    if (kb__design_index(e, index))
        return KB_OK;
    int rc = kb__hyper_due(e) ? refit(e, err) : KB_OK;
    if (rc)
        return rc;
    double t0 = kb__now();
    maybe_refresh_pool(e, 0);
    if ((rc = score_leaves(e, err)))
        return rc;
    size_t best = best_ucb(e);
    if (best == (size_t)-1 && !e->space->finite) { /* a spent pool is redrawn (internal.h) */
        maybe_refresh_pool(e, 1);
        if ((rc = score_leaves(e, err)))
            return rc;
        best = best_ucb(e);
    }
    st->sec_ask += kb__now() - t0;
    if (best == (size_t)-1) {
        res->status = KB_ASK_EXHAUSTED;
        return KB_OK;
    }
    *index = best;
    st->asks_since_refresh++;
    return KB_OK;
}

/* Applies (dtold, dpend, y) at u to its leaf, then the splitting rule. */
static int update_at(kb_engine *e, const double *u, int dtold, int dpend, double y,
                     kb_error *err)
{
    pi_state *st = e->impl;
    double t0 = kb__now();
    size_t id = locate(st, u);
    uint64_t splits = st->splits;
    int rc = gp_add(st, &e->kernel, st->cells[id].gp, u, dtold, dpend, y);
    if (!rc) {
        st->cells[id].stale = 1;
        /* The observation stands even when a split runs out of memory (split undoes
         * itself): the leaf stays whole, the rule applied again at its next observation.
         * Failing the op instead would leave the leaf counting an observation the base
         * has undone. The cover is then not the one a run with memory builds: nomem
         * fails the next ask and a restore (internal.h), which the daemon rebuilds. */
        if (dtold && split_while_needed(e, id))
            e->nomem = 1;
        if (st->splits != splits)
            assign_candidates(e);
    }
    st->sec_tell += kb__now() - t0;
    return rc ? leaf_fail(err, rc) : KB_OK;
}

static int pi_handed(kb_engine *e, uint64_t h, kb_error *err)
{
    return update_at(e, kb__trial_u(e, h), 0, 1, 0.0, err);
}

static int pi_tell(kb_engine *e, uint64_t h, kb_error *err)
{
    return update_at(e, kb__trial_u(e, h), 1, -1, e->obs_y[e->n_obs - 1], err);
}

static int pi_observe(kb_engine *e, kb_error *err)
{
    size_t d = e->space->dim;
    const double *u = e->obs_u + (e->n_obs - 1) * d;
    for (size_t j = 0; j < d; j++)
        if (!(u[j] >= 0.0 && u[j] <= 1.0)) {
            char field[KB_ERROR_FIELD_MAX];
            snprintf(field, sizeof field, "x[%zu]", j);
            return kb__fail(err, KB_EINVAL, field,
                            "point outside [0,1]^d after input scaling (pi-gp-ucb covers the "
                            "unit cube)");
        }
    return update_at(e, u, 1, 0, e->obs_y[e->n_obs - 1], err);
}

static int pi_abandon(kb_engine *e, uint64_t h, kb_error *err)
{
    pi_state *st = e->impl;
    const double *u = kb__trial_u(e, h);
    size_t id = locate(st, u);
    leaf_gp *g = st->cells[id].gp;
    size_t j = gp_find(g, u, st->d);
    if (j == (size_t)-1 || g->pend[j] == 0)
        return kb__fail(err, KB_ESTATE, "handle", "pending point missing from its cell");
    st->cells[id].stale = 1;
    int rc = gp_unpend(st, &e->kernel, g, j);
    return rc ? leaf_fail(err, rc) : KB_OK;
}

static int pi_posterior(kb_engine *e, const double *U, size_t n, double *mean, double *sd,
                        kb_error *err)
{
    pi_state *st = e->impl;
    double m, s;
    kb__output_stats(e, &m, &s);
    for (size_t i = 0; i < n; i++) {
        for (size_t j = 0; j < st->d; j++)
            if (!(U[i * st->d + j] >= 0.0 && U[i * st->d + j] <= 1.0))
                return kb__fail(err, KB_EINVAL, "x", "point %zu outside [0,1]^d", i);
        size_t id = locate(st, U + i * st->d);
        leaf_gp *g = st->cells[id].gp;
        int rc = gp_ready(st, &e->kernel, g);
        if (rc)
            return leaf_fail(err, rc);
        gp_solve(g);
        double my, m1, var;
        if (gp_predict(&e->kernel, g, U + i * st->d, 1, &my, &m1, &var))
            return leaf_fail(err, KB_ENOMEM);
        mean[i] = (my - m * m1) / s;
        sd[i] = sqrt(var);
    }
    return KB_OK;
}

/* dict_size = cells of the current cover; no epoch: pi-GP-UCB has no batches. */
static const kb__stat pi_stats[] = {
    KB__STAT("dict_size", pi_state, n_leaves),
    KB__STAT("sec_ask", pi_state, sec_ask),
    KB__STAT("sec_tell", pi_state, sec_tell),
    {NULL, 0, 0},
};

/* ------------------------------------------------------ test introspection */

size_t kb__pi_n_cells(const kb_engine *e) { return ((pi_state *)e->impl)->n_leaves; }
size_t kb__pi_n_created(const kb_engine *e) { return ((pi_state *)e->impl)->n_cells; }

void kb__pi_cell(const kb_engine *e, size_t i, kb_pi_cell *out)
{
    const pi_state *st = e->impl;
    size_t id = st->leaves[i];
    const cell *c = &st->cells[id];
    out->lo = st->lo + id * st->d;
    out->side = c->side;
    out->level = c->level;
    out->n_told = c->gp->n_told;
    out->n_pending = c->gp->n_pend;
    out->gamma = gp_gamma(st, c->gp);
    out->alpha = st->alpha;
}

size_t kb__pi_locate(const kb_engine *e, const double *u)
{
    const pi_state *st = e->impl;
    size_t id = locate(st, u);
    for (size_t i = 0; i < st->n_leaves; i++)
        if (st->leaves[i] == id)
            return i;
    return (size_t)-1;
}

int kb__pi_candidate_sd(kb_engine *e, double *sd, size_t *cache_doubles, kb_error *err)
{
    pi_state *st = e->impl;
    int rc = score_leaves(e, err);
    if (!rc)
        memcpy(sd, st->sd, e->space->n * sizeof *sd);
    *cache_doubles = st->v_doubles;
    return rc;
}

const kb_engine_ops kb_engine_pi_gp_ucb = {
    .name = "pi-gp-ucb",
    .summary = "partitioned IGP-UCB: independent GPs on an adaptive cover of the unit cube "
               "(Janz et al. 2020)",
    .options = pi_options,
    .max_dim = PI_MAX_DIM,
    .fits_hyper = 1,
    .ucb = 1,
    .create = pi_create,
    .destroy = pi_destroy,
    .ask_one = pi_ask_one,
    .handed = pi_handed,
    .tell = pi_tell,
    .abandon = pi_abandon,
    .observe = pi_observe,
    .posterior = pi_posterior,
    .stats = pi_stats,
};
