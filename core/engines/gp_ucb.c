/*
 * gp_ucb.c - the exact reference engines "gp-ucb" and "gp-bucb".
 *
 * gp-ucb is IGP-UCB (Chowdhury & Gopalan, ICML 2017; seed 003, Algorithm 1, eq. 2-5):
 *   x_t = argmax mu_{t-1}(x) + beta_t sigma_{t-1}(x),
 *   beta_t = B + R sqrt(2 (gamma_{t-1} + 1 + ln(1/delta))),
 * with gamma_t = 0.5 ln det(I + K_t / lambda) = 0.5 sum_s ln(1 + sigma^2_{s-1}(x_s) / lambda)
 * (the lower bound of Lemma 3 evaluated on the points actually chosen: the paper's
 * maximum information gain is not computable, this is its standard plug-in).
 * Asynchronous workers: every handed-out point enters the variance at once (its
 * observation hallucinated), the mean uses told points only. This is exactly GP-BUCB
 * with hallucinated constant feedback and no batch limit.
 *
 * gp-bucb is GP-BUCB with the adaptive batch rule (Desautels et al. 2014, as presented
 * in seed 004, Appendix A.2, Algorithm 2 and Proposition 2 (= Prop. 1 in section 2)):
 * within a batch u_t(x) = mu_fb(x) + alpha sigma_t(x) with alpha = C beta_fb; the batch
 * closes once prod_{s in batch} (1 + sigma^2_{s-1}(x_s) / lambda) > C, after which asks
 * get KB_ASK_AWAIT_FEEDBACK until every pending point is told or abandoned. The mean
 * (and beta) are recomputed only when a new batch starts. An abandoned point's factor is
 * not refunded from the product: removing a hallucinated point only moves sigma_t back
 * towards sigma_fb, so the ratio bound of Prop. 2 stays valid.
 *
 * Units follow docs/ARCHITECTURE.md (Engine contract): noise variance lambda,
 * standardized outputs, sigma^2 in the paper's frequentist normalization = Bayesian
 * sd^2 / lambda. Outputs
 * are standardized over distinct points (kb__output_stats), so that repeating one arm
 * does not shrink the output scale; every observation still enters the GP as its own
 * row.
 *
 * State and invariants (n rows = observed + told + pending points, in arrival order):
 *   X (n x d)        the rows' internal coordinates;
 *   L (L.n x L.n)    Cholesky factor (kb_chol) of K(X, X) + lambda I over X's first L.n
 *                    rows; rows past L.n are observes not yet taken (an observe only
 *                    pushes its row, so that a warm start of N points is factored in
 *                    blocks at the next op, ensure_built, not in N level-2 appends);
 *   Kc (L.n x A)     k(X_i, candidate a), one row appended per row L takes;
 *   var (A)          k(a, a) - ||L^{-1} Kc[:, a]||^2 over rows [0, n_var); rows appended
 *                    since are folded in lazily by refresh_candidates, one rank-one term
 *                    each, in the same pass over Kc as the mean (the pass over the
 *                    n x A matrix is the per-step cost, so it is made once per ask);
 *   LT (n_obs rows)  Cholesky of K + lambda I over every observation e->obs_u (told +
 *                    observed, in the base's order), so that the mean needs no pending row;
 *                    like L it lags behind a run of observes until the next op;
 *   alpha (n_alpha)  (K_T + lambda I)^{-1} y_std over obs[0..n_alpha): the mean in use;
 *   mean (A)         Kc^T alpha (scattered to rows), valid unless mean_stale.
 *   broken, told_broken: set while L (with Kc, var) or LT is not what the lines above
 *                    say, because a rebuild failed (out of memory, or no jitter made the
 *                    matrix positive definite); every op rebuilds it from X or obs_u
 *                    first (ensure_built) or fails, and nothing is computed on it.
 * Appending a row is O(n^2 + n A) through BLAS; an abandon (but of the newest row before
 * var took it: O(1)) or a box pool refresh rebuilds L, Kc and var from the remaining rows
 * (O(n^3 + n^2 A)): correctness over speed. Box
 * pools are refreshed once the observations grew by a sixteenth since the last refresh
 * (pool_due), so that a rebuild comes every n / 16 observations, amortized
 * O(16 (n^2 + n A)) per step: gp-ucb at an ask, gp-bucb at a batch start past
 * BUCB_POOL_EVERY_BATCH observations and at every batch start before. Its batches close
 * after one or two points on a noise-free objective, and a redraw at each cost 305 ms per
 * ask at 1,500 trials; the growth rule from the start lost held-out functions whose
 * incumbent moves between basins (Shekel-4 at 8 x 125: 0 of 5 seeds in the global basin
 * against 3 of 4; docs/BENCHMARKS.md, twenty-second session), so it waits until past
 * the quality suite's budgets. A pool is also redrawn when a choice floor starts or stops
 * applying (engine.c, starved_choice; choice_floor: on in gp-ucb, off by default in
 * gp-bucb, docs/BENCHMARKS.md, fortieth session).
 *
 * Timings (kb_engine_stat): sec_embed = Cholesky and kernel rows of new points; sec_ask =
 * the argmax plus the lazy mean/variance pass over Kc (most of the time); sec_tell = the
 * told-set factor; sec_resparsify = rebuilds (abandon, pool refresh) and batch starts.
 * epoch = batches for gp-bucb; gp-ucb has no epochs and offers no epoch figures.
 */
#include "../src/internal.h"

#include <cblas.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Options shared by both engines; gp-bucb adds C. */
#define GP_UCB_OPTIONS                                                                     \
    {"lambda", KB_OPT_NUMBER, 0, INFINITY, 1, 0.01, NULL, NULL,                            \
     "regularization = GP noise variance in standardized units (the paper's 1 + eta); "    \
     "not set, fitted (hyperparameters = fit)"},                                            \
    {"B", KB_OPT_NUMBER, 0, INFINITY, 0, 1.0, NULL, NULL, "bound on the RKHS norm of f"},  \
    {"R", KB_OPT_NUMBER, 0, INFINITY, 0, 1.0, NULL, NULL,                                  \
     "sub-Gaussian parameter of the noise"},                                               \
    {"delta", KB_OPT_NUMBER, 0, KB__BELOW_ONE, 1, 0.05, NULL, NULL,                                    \
     "confidence parameter, in (0, 1)"},                                                   \
    {"beta_scale", KB_OPT_NUMBER, 0, INFINITY, 1, 1.0, NULL, NULL,                         \
     "multiplies the theoretical beta_t (practical scaling, see gp_ucb.c)"}

/* Why beta_scale: the theoretical beta_t is a worst-case width; practical GP-UCB runs
 * usually shrink it (seed 004 App. D divides beta by 10 for async-TS). Measured on
 * Abalone (T = 2000, RBF lengthscale 17.5 on standardized features, lambda = 1e-3,
 * docs/BENCHMARKS.md): beta_scale 1 and 2 both reach regret ratio 0.109, while 0.5 and
 * 0.1 under-explore and can lock onto a local optimum (T = 1000, seeds 1 / 2: 0.28 / 0.58
 * and 0.42 / 0.89). So the default is 1, the paper's algorithm exactly, and the knob
 * stays for other problems. lambda defaults to 0.01: outputs are standardized, so it is
 * the noise-to-signal variance ratio (the paper's 1 + eta assumes unscaled outputs with
 * |f| <= B); on Abalone it gives 0.12 at T = 1000 (it locked at 0.58 while outputs were
 * standardized per evaluation). */
static const kb_option_spec ucb_options[] = {
    GP_UCB_OPTIONS,
    KB__CHOICE_FLOOR_OPTION(2.0),
    {NULL, 0, 0, 0, 0, 0, NULL, NULL, NULL},
};
static const kb_option_spec bucb_options[] = {
    GP_UCB_OPTIONS,
    {"C", KB_OPT_NUMBER, 1, INFINITY, 0, 2.0, NULL, NULL,
     "batch drift threshold (>= 1): a batch closes when prod (1 + sigma^2) exceeds C"},
    KB__CHOICE_FLOOR_OPTION(0.0),
    {NULL, 0, 0, 0, 0, 0, NULL, NULL, NULL},
};

#define NO_OBS SIZE_MAX

typedef struct gp_state {
    int batched;                  /* gp-bucb */
    double lambda, beta0, C;      /* beta0 = beta_scale, the rest read per use */
    size_t d, A;
    /* rows */
    size_t n, cap;
    kb_chol L;                    /* row-major, capacity cap */
    double *X, *Kc;
    uint64_t *handle;             /* 0 for an observed row */
    size_t *obs_idx;              /* row's index in e->obs_*, NO_OBS while pending */
    double logdet;                /* sum_i ln(L_ii^2 / lambda) = 2 gamma */
    double *var, *kdiag;
    /* told set: LT.n rows */
    kb_chol LT;
    double *alpha, *mean, *work;
    size_t n_alpha, cap_work;
    size_t n_var;                 /* rows folded into var */
    int broken;                   /* L, Kc, var are not a cache of X (a rebuild failed) */
    int told_broken;              /* LT is not the factor of the observations (same) */
    int told_whole;               /* LT factored whole (rebuild_told), no row appended
                                   * since: L may copy it (factor_rows) */
    int alpha_stale, mean_stale;
    /* batches (gp-bucb) and box pool refresh (gp-ucb) */
    int closed;
    double prod, alpha_ucb;
    uint64_t batches, batch_asks, last_batch;
    size_t obs_at_refresh;
    kb__pool_rules pool;          /* choice floors (engine.c) */
    double sec_embed, sec_resparsify, sec_ask, sec_tell;
} gp_state;

/* ------------------------------------------------------------ storage */

static int grow_rows(gp_state *s, size_t need)
{
    if (need <= s->cap)
        return KB_OK;
    size_t nc = s->cap ? 2 * s->cap : 64;
    while (nc < need)
        nc *= 2;
    /* The row arrays first: growing them is harmless if a later step fails. L last,
     * since its leading dimension is cap. */
    double *X = realloc(s->X, nc * s->d * sizeof *X);
    if (X)
        s->X = X;
    double *Kc = X ? realloc(s->Kc, nc * s->A * sizeof *Kc) : NULL;
    if (Kc)
        s->Kc = Kc;
    uint64_t *h = Kc ? realloc(s->handle, nc * sizeof *h) : NULL;
    if (h)
        s->handle = h;
    size_t *o = h ? realloc(s->obs_idx, nc * sizeof *o) : NULL;
    if (o)
        s->obs_idx = o;
    if (!o || kb__chol_reserve(&s->L, nc))
        return KB_ENOMEM;
    s->cap = nc;
    return KB_OK;
}

/* Scratch of at least `need` doubles. */
static double *work(gp_state *s, size_t need)
{
    if (need > s->cap_work) {
        double *w = realloc(s->work, need * sizeof *w);
        if (!w)
            return NULL;
        s->work = w;
        s->cap_work = need;
    }
    return s->work;
}

/* ------------------------------------------------------ linear algebra */

/* Appends point x to the factor F of K + lambda I over the F->n points P; *p2 (when not
 * NULL) gets the pivot^2 = k(x,x) + lambda - |L^{-1} k(P, x)|^2 (>= lambda up to
 * rounding). l: F->n doubles of scratch. KB_ENOMEM, KB_ENUMERIC. */
static int chol_new_row(const kb_engine *e, const gp_state *s, kb_chol *F, const double *P,
                        const double *x, double *l, double *p2)
{
    double kxx;
    kb_kernel_diag(&e->kernel, x, 1, &kxx);
    kb_kernel_matrix(&e->kernel, P, F->n, x, 1, l);
    return kb__chol_append(F, l, kxx + s->lambda, p2);
}

/* Brings F, the factor of K + lambda I over the first F->n points of P, up to the first
 * `to`, with the pivots' ln(pivot^2 / lambda) added to *logdet (when not NULL): runs of
 * KB_BLOCK_ROWS_MIN rows and more (a warm start's observes) as blocks, level 3 where
 * row appends were level 2 (18 s for 5,000 observes; docs/BENCHMARKS.md, fifty-fifth
 * session), shorter ones row by row (*p2, when not NULL, gets the last row's pivot^2:
 * chol_new_row). On a failure F covers the rows it took and *logdet follows. */
static int catch_up_factor(const kb_engine *e, gp_state *s, kb_chol *F, const double *P,
                           size_t to, double *logdet, double *p2)
{
    size_t n0 = F->n;
    if (to - n0 >= KB_BLOCK_ROWS_MIN) {
        int rc = kb__chol_append_points(F, &e->kernel, P, to, s->lambda);
        for (size_t i = n0; logdet && i < F->n; i++) {
            double l = kb__chol_pivot(F, i);
            *logdet += log(l * l / s->lambda);
        }
        return rc;
    }
    while (F->n < to) {
        double *l = work(s, F->n + 1), q2;
        int rc = l ? chol_new_row(e, s, F, P, P + F->n * s->d, l, &q2) : KB_ENOMEM;
        if (rc)
            return rc;
        if (logdet)
            *logdet += log(q2 / s->lambda);
        if (p2)
            *p2 = q2;
    }
    return KB_OK;
}

enum { BLK = 256 }; /* candidate columns per block in recompute_var */

/* var = kdiag - colsum((L^{-1} Kc)^2), in column blocks to bound the scratch. */
static int recompute_var(gp_state *s)
{
    size_t n = s->n, A = s->A;
    memcpy(s->var, s->kdiag, A * sizeof *s->var);
    s->n_var = n;
    if (n == 0)
        return KB_OK;
    double *V = work(s, n * BLK);
    if (!V)
        return KB_ENOMEM;
    for (size_t a0 = 0; a0 < A; a0 += BLK) {
        size_t nb = A - a0 < BLK ? A - a0 : BLK;
        for (size_t i = 0; i < n; i++)
            memcpy(V + i * nb, s->Kc + i * A + a0, nb * sizeof *V);
        kb__chol_trsm(&s->L, 0, V, nb, nb);
        for (size_t i = 0; i < n; i++)
            for (size_t j = 0; j < nb; j++)
                s->var[a0 + j] -= V[i * nb + j] * V[i * nb + j];
    }
    return KB_OK;
}

/* Whether X's rows are the observations in their order, nothing pending, and LT was
 * factored whole: then L would be the same factor of the same matrix. */
static int rows_are_observations(const kb_engine *e, const gp_state *s)
{
    if (s->n != e->n_obs || s->told_broken || !s->told_whole || s->LT.n != s->n)
        return 0;
    for (size_t i = 0; i < s->n; i++)
        if (s->obs_idx[i] != i)
            return 0;
    return 1;
}

/* F = chol(K(P, P) + lambda I) over the n points P, from scratch. The n x n matrix is
 * the call's own: kept in the scratch it held 200 MB for the study's life at 5,000
 * observations (a third of gp-ucb's memory; docs/BENCHMARKS.md, fifty-fifth session). */
static int factor_points(kb_engine *e, gp_state *s, kb_chol *F, const double *P, size_t n)
{
    double *K = malloc((n ? n : 1) * n * sizeof *K);
    if (!K)
        return KB_ENOMEM;
    kb_kernel_matrix(&e->kernel, P, n, P, n, K);
    for (size_t i = 0; i < n; i++)
        K[i * n + i] += s->lambda;
    int rc = kb__chol_factor(F, K, n, n);
    free(K);
    return rc;
}

/* L = chol(K(X, X) + lambda I): LT's copy when that is the same matrix (a sequential
 * study, or one waiting for no result: the factor is then the same bit for bit, and a
 * dpotrf of 5,000 rows is 1.4 s), else factored. */
static int factor_rows(kb_engine *e, gp_state *s)
{
    if (rows_are_observations(e, s))
        return kb__chol_copy(&s->L, &s->LT);
    return factor_points(e, s, &s->L, s->X, s->n);
}

/* Rebuilds L from X, then Kc and var for the current candidates. Everything it rebuilds
 * is a cache of X: if it fails, `broken` makes the next op retry (ensure_built). */
static int rebuild(kb_engine *e, gp_state *s)
{
    double t0 = kb__now();
    size_t n = s->n;
    s->broken = 1;
    s->A = e->space->n;
    kb_kernel_diag(&e->kernel, e->space->u, s->A, s->kdiag);
    s->logdet = 0.0;
    kb__chol_truncate(&s->L, 0);
    if (n) {
        int rc = factor_rows(e, s);
        if (rc)
            return rc;
        for (size_t i = 0; i < n; i++) {
            double lii = kb__chol_pivot(&s->L, i);
            s->logdet += log(lii * lii / s->lambda);
        }
        kb_kernel_matrix(&e->kernel, s->X, n, e->space->u, s->A, s->Kc);
    }
    s->mean_stale = 1;
    int rc = recompute_var(s);
    s->broken = rc != KB_OK;
    s->sec_resparsify += kb__now() - t0;
    return rc;
}

/* Adds a row for point u to X (L, Kc take it at catch_up_rows). */
static int push_row(gp_state *s, const double *u, uint64_t h, size_t obs)
{
    if (grow_rows(s, s->n + 1))
        return KB_ENOMEM;
    memcpy(s->X + s->n * s->d, u, s->d * sizeof *u);
    s->handle[s->n] = h;
    s->obs_idx[s->n] = obs;
    s->n++;
    return KB_OK;
}

/* Brings L up to X's rows (those a run of observes pushed, or the row just pushed) with
 * their kernel rows against the candidates (var takes them at the next
 * refresh_candidates) and their pivots in logdet. *s2 (when not NULL) gets sigma^2(x)
 * before its append for a single row x (Bayesian units). On a failure L covers the
 * rows it took and their Kc rows, logdet follows (ensure_built carries on). */
static int catch_up_rows(kb_engine *e, gp_state *s, double *s2)
{
    size_t n0 = s->L.n;
    if (n0 == s->n)
        return KB_OK;
    double t0 = kb__now(), p2 = 0.0;
    int rc = catch_up_factor(e, s, &s->L, s->X, s->n, &s->logdet, &p2);
    kb_kernel_matrix(&e->kernel, s->X + n0 * s->d, s->L.n - n0, e->space->u, s->A,
                     s->Kc + n0 * s->A);
    if (s2)
        *s2 = p2 - s->lambda;
    s->sec_embed += kb__now() - t0;
    return rc;
}

/* Appends a row for point u (a hand-out). *s2 as catch_up_rows. On failure the state is
 * unchanged. */
static int append_row(kb_engine *e, gp_state *s, const double *u, uint64_t h, double *s2)
{
    int rc = push_row(s, u, h, NO_OBS);
    if (!rc && (rc = catch_up_rows(e, s, s2)))
        s->n--;
    return rc;
}

/* Refactors the told-set factor LT over the first m observations. If it fails,
 * `told_broken` makes the next op that needs LT retry. */
static int rebuild_told(kb_engine *e, gp_state *s, size_t m)
{
    s->told_broken = 1;
    s->alpha_stale = 1;
    int rc = factor_points(e, s, &s->LT, e->obs_u, m);
    s->told_broken = rc != KB_OK;
    s->told_whole = rc == KB_OK;
    return rc;
}

/* Every op that computes on a factor calls this first, so that none computes on a factor
 * a failed rebuild left behind (L empty or of an old kernel) or one that lags the data
 * (observes only push their rows: gp_observe). A broken factor is rebuilt from scratch,
 * a lagging one caught up (catch_up_factor), LT over the first m observations (those the
 * op's state covers: a tell passes n_obs - 1, its own observation being appended after),
 * or the op fails with the code and the flags stay set. ensure_told: LT's part. */
static int ensure_told(kb_engine *e, gp_state *s, size_t m)
{
    if (s->told_broken)
        return rebuild_told(e, s, m);
    s->told_whole &= s->LT.n == m; /* appended rows round otherwise than a dpotrf */
    return catch_up_factor(e, s, &s->LT, e->obs_u, m, NULL, NULL);
}

static int ensure_built(kb_engine *e, gp_state *s, size_t m)
{
    int rc = ensure_told(e, s, m);
    if (rc)
        return rc;
    return s->broken ? rebuild(e, s) : catch_up_rows(e, s, NULL);
}

/* A scheduled hyperparameter fit (core/src/hyper.c): the new kernel and noise. Both
 * factors belong to the old kernel: marked invalid, they are rebuilt by the caller's
 * pool refresh (L) or ensure_built (see prepare_model). */
static int refit(kb_engine *e, gp_state *s)
{
    double t0 = kb__now();
    int rc = kb__hyper_refit(e, NULL);
    if (rc)
        return rc;
    s->lambda = e->noise;
    s->broken = s->told_broken = 1;
    s->sec_resparsify += kb__now() - t0;
    return KB_OK;
}

/* alpha = (K_T + lambda I)^{-1} y_std over every observation so far. */
static int refresh_alpha(kb_engine *e, gp_state *s)
{
    size_t m = s->LT.n;
    double *a = realloc(s->alpha, (m ? m : 1) * sizeof *a);
    if (!a)
        return KB_ENOMEM;
    s->alpha = a;
    for (size_t i = 0; i < m; i++)
        a[i] = kb__model_y(e, i);
    kb__chol_solve(&s->LT, a);
    s->n_alpha = m;
    s->alpha_stale = 0;
    s->mean_stale = 1;
    return KB_OK;
}

/* One pass of refresh_candidates: the mean when stale and up to BLK rows past n_var. */
static int fold_rows(gp_state *s)
{
    size_t n = s->n, A = s->A, c0 = s->mean_stale ? 1 : 0;
    size_t k = n - s->n_var < BLK ? n - s->n_var : BLK, m = c0 + k;
    if (m == 0)
        return KB_OK;
    double *B = work(s, n * m + A * m);
    if (!B)
        return KB_ENOMEM;
    double *out = B + n * m;
    /* all zero: besides the unit vectors, some OpenBLAS versions propagate NaN from
     * uninitialized y through beta = 0 */
    memset(B, 0, (n + A) * m * sizeof *B);
    for (size_t i = 0; c0 && i < n; i++)
        B[i * m] = s->obs_idx[i] < s->n_alpha ? s->alpha[s->obs_idx[i]] : 0.0;
    for (size_t j = 0; j < k; j++)
        B[(s->n_var + j) * m + c0 + j] = 1.0;
    if (k)
        kb__chol_trsm(&s->L, 1, B + c0, k, m);
    /* dgemm packs all of Kc, which costs as much as the product when m is 1 or 2 (the
     * sequential case): then one dgemv per column. */
    if (m <= 2)
        for (size_t j = 0; j < m; j++)
            cblas_dgemv(CblasRowMajor, CblasTrans, (int)n, (int)A, 1.0, s->Kc, (int)A, B + j,
                        (int)m, 0.0, out + j, (int)m);
    else
        cblas_dgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)A, (int)m, (int)n, 1.0,
                    s->Kc, (int)A, B, (int)m, 0.0, out, (int)m);
    for (size_t a = 0; a < A; a++) {
        if (c0)
            s->mean[a] = out[a * m];
        for (size_t j = c0; j < m; j++)
            s->var[a] -= out[a * m + j] * out[a * m + j];
    }
    s->mean_stale = 0;
    s->n_var += k;
    return KB_OK;
}

/* Brings mean and var up to date in one pass over Kc: B = [alpha scattered to rows |
 * rows n_var..n-1 of L^{-1}] (rows of L^{-1} from one dtrsm against unit vectors), then
 * Kc^T B gives the mean (first column, when stale) and the new rows of L^{-1} Kc, whose
 * squares each new row removes from var. More than BLK new rows (a run of observes) go
 * in passes of BLK, bounding the scratch; from A new rows on, var from scratch
 * (recompute_var, n^2 A flops) is cheaper than folding them in (n^2 k). */
static int refresh_candidates(gp_state *s)
{
    if (s->n - s->n_var >= s->A && s->n - s->n_var > BLK) {
        int rc = recompute_var(s);
        if (rc)
            return rc;
    }
    do {
        int rc = fold_rows(s);
        if (rc)
            return rc;
    } while (s->n_var < s->n);
    return KB_OK;
}

/* beta_t of seed 003 Algorithm 1 with gamma from the current rows, times beta_scale. */
static double beta_now(const kb_engine *e, const gp_state *s)
{
    double B = kb_config_number(e->cfg, "B"), R = kb_config_number(e->cfg, "R");
    double delta = kb_config_number(e->cfg, "delta");
    double gamma = 0.5 * s->logdet;
    return s->beta0 * (B + R * sqrt(2.0 * (gamma + 1.0 + log(1.0 / delta))));
}

/* ------------------------------------------------------------ engine ops */

static void gp_destroy(kb_engine *e)
{
    gp_state *s = e->impl;
    if (!s)
        return;
    free(s->X);
    kb__chol_free(&s->L);
    free(s->Kc);
    free(s->handle);
    free(s->obs_idx);
    free(s->var);
    free(s->kdiag);
    kb__chol_free(&s->LT);
    free(s->alpha);
    free(s->mean);
    free(s->work);
    free(s);
}

static int gp_create_common(kb_engine *e, int batched, kb_error *err)
{
    gp_state *s = calloc(1, sizeof *s);
    if (!s)
        return kb__fail(err, KB_ENOMEM, NULL, "out of memory");
    e->impl = s;
    s->batched = batched;
    s->lambda = e->noise; /* lambda, or its fitted value (refit) */
    s->beta0 = kb_config_number(e->cfg, "beta_scale");
    s->C = batched ? kb_config_number(e->cfg, "C") : INFINITY;
    s->pool.choice_floor = kb_config_number(e->cfg, "choice_floor");
    s->d = e->space->dim;
    s->A = e->space->n;
    s->var = malloc(s->A * sizeof *s->var);
    s->kdiag = malloc(s->A * sizeof *s->kdiag);
    s->mean = calloc(s->A, sizeof *s->mean);
    s->alpha = calloc(1, sizeof *s->alpha);
    s->closed = 1; /* the first ask opens the first batch */
    if (!s->var || !s->kdiag || !s->mean || !s->alpha || rebuild(e, s)) {
        gp_destroy(e);
        e->impl = NULL;
        return kb__fail(err, KB_ENOMEM, NULL, "out of memory");
    }
    return KB_OK;
}

static int ucb_create(kb_engine *e, kb_error *err) { return gp_create_common(e, 0, err); }
static int bucb_create(kb_engine *e, kb_error *err) { return gp_create_common(e, 1, err); }

static int fail_rc(kb_error *err, int rc)
{
    return rc == KB_ENOMEM ? kb__fail(err, rc, NULL, "out of memory")
                           : kb__fail(err, rc, "lambda",
                                      "kernel matrix + lambda I is not positive definite");
}

/* Box spaces: is a new pool due? When the observations grew by a sixteenth since the
 * last, and when a choice floor starts or stops applying (a floor holds the pool only
 * until it is met: engine.c, starved_choice). */
static int pool_due(const kb_engine *e, const gp_state *s)
{
    return !e->space->finite &&
           (e->n_obs >= s->obs_at_refresh + 1 + s->obs_at_refresh / 16 ||
            kb__pool_rules_due(e, &s->pool));
}

/* gp-bucb redraws a box's pool at every batch start up to this many observations, then
 * when pool_due (see the header). */
#define BUCB_POOL_EVERY_BATCH 1024

/* Box spaces: a new pool around the best points, and everything candidate-sized with it. */
static int refresh_pool(kb_engine *e, gp_state *s)
{
    kb__refresh_pool(e, 1, &s->pool);
    s->obs_at_refresh = e->n_obs;
    return rebuild(e, s);
}

/* The model for an ask (gp-ucb) or a batch start (gp-bucb): the refit when due, the box
 * pool's refresh when `pool` (it rebuilds L, Kc and var from scratch), then ensure_built
 * for what is left. In this order each factor is built once: the refit used to rebuild
 * both, and the pool refresh L again (two of 6 s at the first ask after 5,000 observes),
 * and a catch-up of a run of observes before either would be thrown away. */
static int prepare_model(kb_engine *e, gp_state *s, int pool)
{
    int rc = kb__hyper_due(e) ? refit(e, s) : KB_OK;
    if (!rc) /* LT first: the pool refresh's rebuild may copy it (factor_rows) */
        rc = ensure_told(e, s, e->n_obs);
    if (!rc && pool)
        rc = refresh_pool(e, s);
    return rc ? rc : ensure_built(e, s, e->n_obs);
}

/* gp-bucb: whether an ask may start a new batch, and starting it. */
static int bucb_gate(kb_engine *e, gp_state *s, kb_ask_result *res, int *wait)
{
    *wait = 0;
    if (!s->closed)
        return ensure_built(e, s, e->n_obs);
    if (e->n_pending) {
        res->status = KB_ASK_AWAIT_FEEDBACK;
        res->awaiting = e->n_pending;
        *wait = 1;
        return KB_OK;
    }
    /* the kernel is fixed within a batch (Prop. 2) */
    int rc = prepare_model(e, s, !e->space->finite && s->batches &&
                                     (e->n_obs <= BUCB_POOL_EVERY_BATCH || pool_due(e, s)));
    double t0 = kb__now();
    if (!rc)
        rc = refresh_alpha(e, s);
    if (rc)
        return rc;
    s->alpha_ucb = kb__width(e, s->C * beta_now(e, s), KB_WIDTH_UCB);
    s->last_batch = s->batch_asks;
    s->batch_asks = 0;
    s->batches++;
    s->prod = 1.0;
    s->closed = 0;
    s->sec_resparsify += kb__now() - t0;
    return KB_OK;
}

/* Brings the state up to date for an ask: the batch gate (gp-bucb) or the model
 * (prepare_model) and alpha (gp-ucb), then the pass over the candidates. *width is the UCB's multiplier of sd; *wait is set when gp-bucb awaits
 * feedback. */
static int prepare_ask(kb_engine *e, gp_state *s, kb_ask_result *res, int *wait,
                       double *width)
{
    int rc;
    *wait = 0;
    if (s->batched) {
        rc = bucb_gate(e, s, res, wait);
        *width = s->alpha_ucb;
    } else {
        rc = prepare_model(e, s, pool_due(e, s));
        if (!rc && s->alpha_stale)
            rc = refresh_alpha(e, s);
        *width = kb__width(e, beta_now(e, s), KB_WIDTH_UCB);
    }
    return rc || *wait ? rc : refresh_candidates(s);
}

/* Argmax of the UCB over the allowed candidates, SIZE_MAX when there is none; exact ties
 * broken uniformly (reservoir) so seeds matter. */
static size_t ucb_argmax(kb_engine *e, const gp_state *s, double width)
{
    size_t best = SIZE_MAX, ties = 0;
    double bu = -INFINITY;
    for (size_t a = 0; a < s->A; a++) {
        if (kb__excluded(e, a))
            continue;
        double u = s->mean[a] + kb__prior_at(e, a) + width * sqrt(s->var[a] > 0 ? s->var[a] : 0.0);
        if (best == SIZE_MAX || u > bu) {
            best = a;
            bu = u;
            ties = 1;
        } else if (u == bu && kb_rng_below(&e->rng, ++ties) == 0) {
            best = a;
        }
    }
    return best;
}

static int gp_ask_one(kb_engine *e, size_t *index, kb_ask_result *res, kb_error *err)
{
    gp_state *s = e->impl;
    if (kb__design_index(e, index))
        return KB_OK;
    double t0 = kb__now(), r0 = s->sec_resparsify, width = 0.0;
    int wait, rc = prepare_ask(e, s, res, &wait, &width);
    if (rc)
        return fail_rc(err, rc);
    if (wait)
        return KB_OK;
    size_t best = ucb_argmax(e, s, width);
    /* A pool spent before its redraw was due (a long gp-bucb batch under heavy noise, a
     * small pool_size) is redrawn: ops->ask_one, internal.h. */
    if (best == SIZE_MAX && !e->space->finite) {
        rc = refresh_pool(e, s);
        if (!rc)
            rc = refresh_candidates(s);
        if (rc)
            return fail_rc(err, rc);
        best = ucb_argmax(e, s, width);
    }
    s->sec_ask += kb__now() - t0 - (s->sec_resparsify - r0); /* rebuilds counted there */
    if (best == SIZE_MAX) {
        res->status = KB_ASK_EXHAUSTED;
        return KB_OK;
    }
    *index = best;
    return KB_OK;
}

static int gp_handed(kb_engine *e, uint64_t h, kb_error *err)
{
    gp_state *s = e->impl;
    double s2;
    int rc = ensure_built(e, s, e->n_obs);
    if (!rc)
        rc = append_row(e, s, kb__trial_u(e, h), h, &s2);
    if (rc)
        return fail_rc(err, rc);
    s->batch_asks++;
    if (s->batched) {
        s->prod *= 1.0 + s2 / s->lambda;
        if (s->prod > s->C)
            s->closed = 1;
    }
    return KB_OK;
}

static int gp_tell(kb_engine *e, uint64_t h, kb_error *err)
{
    gp_state *s = e->impl;
    double t0 = kb__now();
    int rc = ensure_built(e, s, e->n_obs - 1);
    if (!rc)
        rc = ensure_told(e, s, e->n_obs);
    if (rc)
        return fail_rc(err, rc);
    for (size_t i = 0; i < s->n; i++)
        if (s->handle[i] == h)
            s->obs_idx[i] = e->n_obs - 1;
    s->alpha_stale = 1;
    s->sec_tell += kb__now() - t0;
    return KB_OK;
}

/* An observe only pushes its row: L and LT take it at the next op (ensure_built), with
 * every observe before it, as one block. */
static int gp_observe(kb_engine *e, kb_error *err)
{
    gp_state *s = e->impl;
    if (push_row(s, e->obs_u + (e->n_obs - 1) * s->d, 0, e->n_obs - 1))
        return fail_rc(err, KB_ENOMEM);
    s->alpha_stale = 1;
    return KB_OK;
}

static int gp_abandon(kb_engine *e, uint64_t h, kb_error *err)
{
    gp_state *s = e->impl;
    size_t r = 0, d = s->d;
    while (r < s->n && s->handle[r] != h)
        r++;
    if (r == s->n)
        return KB_OK; /* cannot happen: every pending trial has a row */
    if (r + 1 == s->n && s->L.n == s->n && s->n_var <= r && !s->broken) {
        /* The newest row, not yet folded into var: dropping it leaves L, Kc and var as
         * they were before its append, in O(1). This is the abandon of a replayed ask
         * that a restore adopts (engine.c, adopt), once per adopted ask: the rebuild below
         * made restoring a long study under a newer build O(n^4). */
        double l = kb__chol_pivot(&s->L, r);
        s->logdet -= log(l * l / s->lambda);
        kb__chol_truncate(&s->L, r);
        s->n = r;
        return KB_OK;
    }
    /* The rebuild's scratch for the candidates' variances first (recompute_var), so that
     * short of memory the abandon fails before it changes anything; past this point it
     * cannot fail (the base's contract), and a rebuild that does (out of memory for its
     * factor, or numerically) leaves `broken` set for the next op. */
    if (!work(s, s->n * BLK))
        return fail_rc(err, KB_ENOMEM);
    memmove(s->X + r * d, s->X + (r + 1) * d, (s->n - r - 1) * d * sizeof *s->X);
    memmove(s->handle + r, s->handle + r + 1, (s->n - r - 1) * sizeof *s->handle);
    memmove(s->obs_idx + r, s->obs_idx + r + 1, (s->n - r - 1) * sizeof *s->obs_idx);
    s->n--;
    rebuild(e, s);
    return KB_OK;
}

static int gp_posterior(kb_engine *e, const double *U, size_t m, double *mean, double *sd,
                        kb_error *err)
{
    gp_state *s = e->impl;
    int rc = ensure_built(e, s, e->n_obs);
    if (!rc && !s->batched && s->alpha_stale)
        rc = refresh_alpha(e, s);
    if (rc)
        return fail_rc(err, rc);
    size_t n = s->n, nt = s->n_alpha;
    size_t big = (n > nt ? n : nt) * m;
    double *Kx = malloc((big ? big : 1) * sizeof *Kx);
    if (!Kx)
        return fail_rc(err, KB_ENOMEM);
    kb_kernel_diag(&e->kernel, U, m, sd);
    memset(mean, 0, m * sizeof *mean); /* see refresh_candidates on beta = 0 */
    if (nt) {
        kb_kernel_matrix(&e->kernel, e->obs_u, nt, U, m, Kx);
        cblas_dgemv(CblasRowMajor, CblasTrans, (int)nt, (int)m, 1.0, Kx, (int)m, s->alpha, 1,
                    0.0, mean, 1);
    }
    if (n) {
        kb_kernel_matrix(&e->kernel, s->X, n, U, m, Kx);
        kb__chol_trsm(&s->L, 0, Kx, m, m);
        for (size_t i = 0; i < n; i++)
            for (size_t j = 0; j < m; j++)
                sd[j] -= Kx[i * m + j] * Kx[i * m + j];
    }
    for (size_t j = 0; j < m; j++)
        sd[j] = sqrt(sd[j] > 0 ? sd[j] : 0.0);
    free(Kx);
    return KB_OK;
}

/* Epochs are gp-bucb's batches; gp-ucb has none, so it offers only these. */
#define GP_FIGURES                                                                     \
    KB__STAT("sec_embed", gp_state, sec_embed),                                        \
    KB__STAT("sec_resparsify", gp_state, sec_resparsify),                              \
    KB__STAT("sec_ask", gp_state, sec_ask), KB__STAT("sec_tell", gp_state, sec_tell), \
    KB__STAT("choice_floor_pools", gp_state, pool.floor_pools)

static const kb__stat ucb_stats[] = {GP_FIGURES, {NULL, 0, 0}};

static const kb__stat bucb_stats[] = {
    KB__STAT("epoch", gp_state, batches),
    KB__STAT("epoch_asks", gp_state, batch_asks),
    KB__STAT("last_batch", gp_state, last_batch),
    GP_FIGURES,
    {NULL, 0, 0},
};

int kb__gp_candidate_posterior(kb_engine *e, double *mean, double *var, double *gamma)
{
    if (e->ops != &kb_engine_gp_ucb && e->ops != &kb_engine_gp_bucb)
        return KB_EUNSUPPORTED;
    gp_state *s = e->impl;
    int rc = ensure_built(e, s, e->n_obs);
    if (!rc && !s->batched && s->alpha_stale)
        rc = refresh_alpha(e, s);
    if (rc || (rc = refresh_candidates(s)))
        return rc;
    memcpy(mean, s->mean, s->A * sizeof *mean);
    memcpy(var, s->var, s->A * sizeof *var);
    *gamma = 0.5 * s->logdet;
    return KB_OK;
}

const kb_engine_ops kb_engine_gp_ucb = {
    .name = "gp-ucb",
    .summary = "exact IGP-UCB (Chowdhury & Gopalan 2017), pending points hallucinated",
    .options = ucb_options,
    .create = ucb_create,
    .destroy = gp_destroy,
    .ask_one = gp_ask_one,
    .handed = gp_handed,
    .tell = gp_tell,
    .abandon = gp_abandon,
    .observe = gp_observe,
    .posterior = gp_posterior,
    .stats = ucb_stats,
    .fits_hyper = 1,
    .ucb = 1,
};

const kb_engine_ops kb_engine_gp_bucb = {
    .name = "gp-bucb",
    .summary = "exact GP-BUCB with the adaptive product batch rule (Desautels et al. 2014)",
    .options = bucb_options,
    .create = bucb_create,
    .destroy = gp_destroy,
    .ask_one = gp_ask_one,
    .handed = gp_handed,
    .tell = gp_tell,
    .abandon = gp_abandon,
    .observe = gp_observe,
    .posterior = gp_posterior,
    .stats = bucb_stats,
    .fits_hyper = 1,
    .ucb = 1,
};
