/*
 * test_pi.c - unit tests of the pi-GP-UCB engine (core/engines/pi_gp_ucb.c, seed 002):
 * the cover's invariants on random call sequences (partition of [0,1]^d, data counted in
 * exactly one cell, the splitting rule, Lemma 6's bound on the number of cells), each
 * cell's GP against an independent dense GP on that cell's data (mean, variance with
 * pending points hallucinated, information gain gamma), determinism, snapshot/restore,
 * and rejected configurations.
 *
 * The driver keeps its own record of every observation and pending hand-out, so the
 * cell contents are recomputed here from the cell bounds alone, independently of the
 * engine's bookkeeping. A point belongs to a cell when lo <= u < lo + side in every
 * coordinate (upper face included at u = 1): the engine's documented assignment.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <lapacke.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../../core/src/internal.h"
#include "util/testutil.h"

enum { D = 2, MAXREC = 4096 };

/* What the driver knows: observations (u, y) and pending hand-outs (handle, u). */
typedef struct record {
    double obs_u[MAXREC * D], obs_y[MAXREC];
    size_t n_obs;
    uint64_t pend_h[MAXREC];
    double pend_u[MAXREC * D];
    size_t n_pend;
} record;

static int in_cell(const kb_pi_cell *c, const double *u)
{
    for (size_t j = 0; j < D; j++) {
        double hi = c->lo[j] + c->side;
        if (!(u[j] >= c->lo[j] && (u[j] < hi || (u[j] == 1.0 && hi >= 1.0))))
            return 0;
    }
    return 1;
}

/* The paper's algorithm (kernel given, nothing fitted, horizon known); with fitted != 0
 * the engine at its defaults instead (hyperparameters fitted, cover from one cell). */
static kb_engine *new_engine(kb_space *sp, const char *kv_initial, double horizon,
                             double seed, int fitted)
{
    kb_error err;
    kb_config *cfg = kb_config_new("pi-gp-ucb", &err);
    assert_non_null(cfg);
    assert_int_equal(kb_config_set_string(cfg, "input_scaling", "none", &err), KB_OK);
    assert_int_equal(kb_config_set_number(cfg, "seed", seed, &err), KB_OK);
    if (!fitted) {
        assert_int_equal(kb_config_set_string(cfg, "hyperparameters", "fixed", &err), KB_OK);
        assert_int_equal(kb_config_set_string(cfg, "kernel", "matern32", &err), KB_OK);
        assert_int_equal(kb_config_set_number(cfg, "lengthscale", 0.2, &err), KB_OK);
        assert_int_equal(kb_config_set_number(cfg, "horizon", horizon, &err), KB_OK);
    }
    if (kv_initial)
        assert_int_equal(kb_config_set_number(cfg, "initial_divisions", atof(kv_initial), &err),
                         KB_OK);
    kb_engine *e = kb_engine_create(cfg, sp, &err);
    if (!e)
        fail_msg("create: %s (%s)", err.message, err.field);
    kb_config_free(cfg);
    return e;
}

static kb_engine *make_engine(kb_space *sp, const char *kv_initial, double horizon,
                              double seed)
{
    return new_engine(sp, kv_initial, horizon, seed, 0);
}

/* One random step: ask, tell, abandon or observe (observations concentrate near a
 * corner so that cells split deeply). */
static void random_step(kb_engine *e, record *r, kb_rng *drv)
{
    kb_error err;
    double p = kb_rng_uniform(drv);
    if (p < 0.45 || (p < 0.8 && r->n_pend == 0)) {
        kb_point pt;
        kb_ask_result res;
        assert_int_equal(kb_engine_ask(e, 1, &pt, &res, &err), KB_OK);
        assert_int_equal(res.n, 1);
        r->pend_h[r->n_pend] = pt.handle;
        memcpy(r->pend_u + r->n_pend * D, pt.x, D * sizeof(double));
        r->n_pend++;
    } else if (p < 0.8) {
        size_t k = (size_t)kb_rng_below(drv, r->n_pend);
        uint64_t h = r->pend_h[k];
        if (p < 0.72) {
            double y = sin(7 * r->pend_u[k * D]) + kb_rng_normal(drv) * 0.3;
            assert_int_equal(kb_engine_tell(e, h, y, &err), KB_OK);
            memcpy(r->obs_u + r->n_obs * D, r->pend_u + k * D, D * sizeof(double));
            r->obs_y[r->n_obs++] = y;
        } else {
            assert_int_equal(kb_engine_abandon(e, h, &err), KB_OK);
        }
        r->n_pend--;
        r->pend_h[k] = r->pend_h[r->n_pend];
        memcpy(r->pend_u + k * D, r->pend_u + r->n_pend * D, D * sizeof(double));
    } else {
        double u[D];
        for (size_t j = 0; j < D; j++)
            u[j] = 0.8 * pow(kb_rng_uniform(drv), 3.0);
        double y = kb_rng_normal(drv);
        assert_int_equal(kb_engine_observe(e, u, y, &err), KB_OK);
        memcpy(r->obs_u + r->n_obs * D, u, sizeof u);
        r->obs_y[r->n_obs++] = y;
    }
}

/* b = (d+1)/(d+2nu) for Matern 3/2. */
static double b_const(void) { return (D + 1.0) / (D + 3.0); }

/* Checks every cover invariant of the current state. */
static void check_cover(kb_engine *e, const record *r, kb_rng *drv)
{
    size_t n = kb__pi_n_cells(e);
    kb_pi_cell cells[n];
    double vol = 0.0, rho0 = 0.0;
    size_t told = 0, pend = 0, n_roots = 0;
    double t = (double)r->n_obs, b = b_const();
    for (size_t i = 0; i < n; i++) {
        kb_pi_cell *c = &cells[i];
        kb__pi_cell(e, i, c);
        vol += pow(c->side, D);
        told += c->n_told;
        pend += c->n_pending;
        rho0 = ldexp(c->side, c->level); /* the initial cells' side */
        /* No cell of the cover satisfies the splitting rule. */
        assert_true(pow(c->side, -1.0 / b) >= (double)c->n_told + 1.0);
        /* Lemma 6: a split cell had side > (t+1)^-b, so its children have 2 side > it. */
        if (c->level > 0)
            assert_true(2.0 * c->side > pow(t + 1.0, -b));
        /* Each cell's counts are the recorded points inside it. */
        size_t nt = 0, np = 0;
        for (size_t k = 0; k < r->n_obs; k++)
            nt += in_cell(c, r->obs_u + k * D);
        for (size_t k = 0; k < r->n_pend; k++)
            np += in_cell(c, r->pend_u + k * D);
        assert_int_equal(nt, c->n_told);
        assert_int_equal(np, c->n_pending);
    }
    assert_true(fabs(vol - 1.0) < 1e-12);
    n_roots = (size_t)round(pow(rho0, -(double)D));
    assert_int_equal(told, r->n_obs);
    assert_int_equal(pend, r->n_pend);
    /* Disjoint up to faces: no two cells share interior. */
    for (size_t a = 0; a < n; a++)
        for (size_t c = a + 1; c < n; c++) {
            int overlap = 1;
            for (size_t j = 0; j < D; j++) {
                double lo = fmax(cells[a].lo[j], cells[c].lo[j]);
                double hi = fmin(cells[a].lo[j] + cells[a].side, cells[c].lo[j] + cells[c].side);
                overlap &= hi - lo > 1e-12; /* faces may differ by an ulp */
            }
            assert_false(overlap);
        }
    /* Random points lie in exactly one cell, the one the engine locates. */
    for (int s = 0; s < 50; s++) {
        double u[D];
        for (size_t j = 0; j < D; j++)
            u[j] = kb_rng_uniform(drv);
        size_t hits = 0, where = 0;
        for (size_t i = 0; i < n; i++)
            if (in_cell(&cells[i], u)) {
                hits++;
                where = i;
            }
        assert_int_equal(hits, 1);
        assert_int_equal(kb__pi_locate(e, u), where);
    }
    /* Lemma 6 (with the parent-side reading above): the cover lies in B_t, the cells of
     * levels 0..I_t, I_t the deepest level whose parent side exceeds (t+1)^-b. */
    size_t levels = 0;
    while (ldexp(rho0, -(int)levels) > pow(t + 1.0, -b))
        levels++;
    double bt = 0.0;
    for (size_t i = 0; i <= levels; i++)
        bt += (double)n_roots * pow(2.0, (double)(D * i));
    if (!((double)kb__pi_n_created(e) <= bt))
        fail_msg("created %zu > |B_t| %g (t %g, levels %zu, roots %zu, rho0 %g)",
                 kb__pi_n_created(e), bt, t, levels, n_roots, rho0);
    /* With A_1 = {X}, the paper's N~_t = 4 (t+1)^(bd) bounds the cover itself. */
    if (n_roots == 1)
        assert_true((double)n <= 4.0 * pow(t + 1.0, b * D));
}

static void cover_invariants_on_random_sequences(void **state)
{
    (void)state;
    const char *initial[] = {"1", NULL}; /* A_1 = {X}, and the default ~T^q grid */
    for (int v = 0; v < 2; v++) {
        kb_rng drv;
        kb_rng_seed(&drv, 100 + (uint64_t)v);
        double *cand = tu_uniform_matrix(&drv, 150, D, 0.0, 1.0);
        kb_error err;
        kb_space *sp = kb_space_new_finite(cand, 150, D, &err);
        kb_engine *e = make_engine(sp, initial[v], 400, 3);
        record *r = calloc(1, sizeof *r);
        for (int s = 0; s < 500; s++) {
            random_step(e, r, &drv);
            if (s % 25 == 24)
                check_cover(e, r, &drv);
        }
        assert_true(kb__pi_n_created(e) > kb__pi_n_cells(e)); /* splits happened */
        assert_int_equal(tu_stat(e, "dict_size"), kb__pi_n_cells(e));
        if (v == 0)
            assert_true(tu_stat(e, "dict_size") > 20); /* deep splits near the corner */
        free(r);
        kb_engine_free(e);
        kb_space_free(sp);
        free(cand);
    }
}

/* 1/2 log|I + K/alpha| over the given inputs, computed densely. */
static double dense_gamma(const kb_kernel *k, const double *X, size_t n, double alpha)
{
    if (n == 0)
        return 0.0;
    double *A = malloc(n * n * sizeof *A);
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < n; j++)
            A[i * n + j] = kb_kernel_eval(k, X + i * D, X + j * D) / alpha + (i == j);
    assert_int_equal(LAPACKE_dpotrf(LAPACK_ROW_MAJOR, 'L', (lapack_int)n, A, (lapack_int)n), 0);
    double g = 0.0;
    for (size_t i = 0; i < n; i++)
        g += log(A[i * n + i]);
    free(A);
    return g;
}

/* Drives an engine on sp and compares, at random points and at the `cand` points, the
 * engine's posterior with an exact GP on the data of the cell holding the point. */
/* The engine's posterior at u (alpha = 1 + 2/300, Matern 3/2 of lengthscale 0.2: the
 * paper's engine of make_engine) and its cell's gamma against an independent dense GP
 * on the data the driver recorded in that cell. X, y: MAXREC rows of scratch. Returns
 * whether the cell holds pending points. */
static int check_at(kb_engine *e, const record *r, const kb_kernel *k, const double *u,
                    double *X, double *y)
{
    kb_error err;
    /* y standardized as kb__output_stats does, over distinct points */
    double m, sd;
    tu_distinct_stats(r->obs_u, r->obs_y, r->n_obs, D, &m, &sd);
    kb_pi_cell c;
    kb__pi_cell(e, kb__pi_locate(e, u), &c);
    assert_true(fabs(c.alpha - (1.0 + 2.0 / 300)) < 1e-15);
    size_t n = 0;
    for (size_t i = 0; i < r->n_obs; i++)
        if (in_cell(&c, r->obs_u + i * D)) {
            memcpy(X + n * D, r->obs_u + i * D, D * sizeof *X);
            y[n++] = (r->obs_y[i] - m) / sd;
        }
    double gamma = dense_gamma(k, X, n, c.alpha);
    assert_true(fabs(c.gamma - gamma) <= 1e-9 * fmax(1.0, gamma));
    double mean_told, var_told, mean_all, var_all, em, es;
    assert_int_equal(tu_exact_posterior(k, X, y, n, c.alpha, u, 1, &mean_told, &var_told), 0);
    size_t nt = n;
    for (size_t i = 0; i < r->n_pend; i++)
        if (in_cell(&c, r->pend_u + i * D)) {
            memcpy(X + n * D, r->pend_u + i * D, D * sizeof *X);
            y[n++] = 0.0;
        }
    assert_int_equal(tu_exact_posterior(k, X, y, n, c.alpha, u, 1, &mean_all, &var_all), 0);
    assert_int_equal(kb_engine_posterior(e, u, 1, &em, &es, &err), KB_OK);
    assert_true(tu_max_rel_err(&em, &mean_told, 1, 1e-3) <= 1e-9);
    double ev = es * es;
    assert_true(tu_max_rel_err(&ev, &var_all, 1, 1e-6) <= 1e-9);
    return n > nt;
}

static void check_cell_gps(kb_space *sp, kb_rng *rng, const double *cand, size_t ncand)
{
    kb_rng drv = *rng;
    kb_engine *e = make_engine(sp, NULL, 300, 5);
    record *r = calloc(1, sizeof *r);
    kb_kernel *k = tu_kernel(KB_KERNEL_MATERN32, D, 0.2);
    double *X = malloc(MAXREC * D * sizeof *X), *y = malloc(MAXREC * sizeof *y);
    int with_pending = 0;
    for (int s = 0; s < 400; s++) {
        random_step(e, r, &drv);
        if (s % 50 != 49)
            continue;
        for (int q = 0; q < 40; q++) {
            double u[D];
            for (size_t j = 0; j < D; j++)
                u[j] = kb_rng_uniform(&drv);
            if (q % 2) /* half of the queries at candidates, where the data are */
                memcpy(u, cand + kb_rng_below(&drv, ncand) * D, sizeof u);
            with_pending += check_at(e, r, k, u, X, y);
        }
    }
    assert_true(with_pending > 0); /* the variance check saw hallucinated points */
    assert_true(kb__pi_n_created(e) > kb__pi_n_cells(e)); /* cells inherited data */
    free(X);
    free(y);
    kb_kernel_free(k);
    free(r);
    kb_engine_free(e);
}

static void cell_gp_equals_exact_gp(void **state)
{
    (void)state;
    kb_rng drv;
    kb_rng_seed(&drv, 7);
    /* Few candidates: many repeated inputs, so the deduplicated GP is exercised. */
    double *cand = tu_uniform_matrix(&drv, 30, D, 0.0, 1.0);
    kb_error err;
    kb_space *sp = kb_space_new_finite(cand, 30, D, &err);
    check_cell_gps(sp, &drv, cand, 30);
    kb_space_free(sp);
    /* A box: pool refreshes after splits, queries at arbitrary points. */
    sp = kb_space_new_box(D, 48, &err);
    check_cell_gps(sp, &drv, cand, 30);
    kb_space_free(sp);
    free(cand);
}

/* A hand-out lowers the variance at its point and leaves the mean; abandon undoes it. */
static void pending_points_are_hallucinated_in_their_cell(void **state)
{
    (void)state;
    kb_rng drv;
    kb_rng_seed(&drv, 11);
    double *cand = tu_uniform_matrix(&drv, 40, D, 0.0, 1.0);
    kb_error err;
    kb_space *sp = kb_space_new_finite(cand, 40, D, &err);
    kb_engine *e = make_engine(sp, "2", 100, 1);
    record *r = calloc(1, sizeof *r);
    for (int s = 0; s < 60; s++)
        random_step(e, r, &drv);
    double m0[40], s0[40], m1[40], s1[40];
    assert_int_equal(kb_engine_posterior(e, cand, 40, m0, s0, &err), KB_OK);
    kb_point pt;
    kb_ask_result res;
    assert_int_equal(kb_engine_ask(e, 1, &pt, &res, &err), KB_OK);
    assert_int_equal(kb_engine_posterior(e, cand, 40, m1, s1, &err), KB_OK);
    for (size_t i = 0; i < 40; i++) {
        assert_true(fabs(m1[i] - m0[i]) <= 1e-12 * fmax(1.0, fabs(m0[i])));
        assert_true(s1[i] <= s0[i] + 1e-15);
    }
    assert_true(s1[pt.index] < s0[pt.index] - 1e-6);
    /* Points of other cells are untouched: independent GPs. */
    size_t cell = kb__pi_locate(e, pt.x);
    for (size_t i = 0; i < 40; i++)
        if (kb__pi_locate(e, cand + i * D) != cell)
            assert_true(s1[i] == s0[i]);
    assert_int_equal(kb_engine_abandon(e, pt.handle, &err), KB_OK);
    assert_int_equal(kb_engine_posterior(e, cand, 40, m1, s1, &err), KB_OK);
    assert_true(tu_max_rel_err(s1, s0, 40, 1e-6) <= 1e-10);
    assert_true(tu_max_rel_err(m1, m0, 40, 1e-3) <= 1e-10);
    free(r);
    kb_engine_free(e);
    kb_space_free(sp);
    free(cand);
}

/* A leaf whose rebuild failed (here: the kernel made NaN behind the engine's back, a
 * stand-in for out of memory) keeps counts its factors no longer match. The failing op
 * must answer a code, and the next op on the leaf must rebuild it from its counts: a
 * second observation at an input already told used to look up the input's told row in
 * the emptied factor, get -1 and write out of bounds. */
static void failed_leaf_rebuild_is_never_indexed(void **state)
{
    (void)state;
    kb_rng drv;
    kb_rng_seed(&drv, 13);
    double *cand = tu_uniform_matrix(&drv, 40, D, 0.0, 1.0);
    kb_error err;
    kb_space *sp = kb_space_new_finite(cand, 40, D, &err);
    kb_engine *e = make_engine(sp, NULL, 300, 3);
    record *r = calloc(1, sizeof *r);
    kb_kernel *k = tu_kernel(KB_KERNEL_MATERN32, D, 0.2);
    double *X = malloc(MAXREC * D * sizeof *X), *y = malloc(MAXREC * sizeof *y);
    for (int s = 0; s < 30; s++)
        random_step(e, r, &drv);
    kb_point pt;
    kb_ask_result res;
    assert_int_equal(kb_engine_ask(e, 1, &pt, &res, &err), KB_OK);
    assert_int_equal(kb_engine_tell(e, pt.handle, 0.25, &err), KB_OK);
    memcpy(r->obs_u + r->n_obs * D, pt.x, D * sizeof(double));
    r->obs_y[r->n_obs++] = 0.25;
    double u0[D]; /* a new input in the same leaf */
    for (size_t j = 0; j < D; j++)
        u0[j] = pt.x[j] < 0.5 ? pt.x[j] + 1e-9 : pt.x[j] - 1e-9;
    assert_int_equal(kb__pi_locate(e, u0), kb__pi_locate(e, pt.x));
    double v = e->kernel.variance;
    e->kernel.variance = NAN;
    assert_int_equal(kb_engine_observe(e, u0, 1.0, &err), KB_ENUMERIC);
    e->kernel.variance = v;
    assert_int_equal(kb_engine_observe(e, pt.x, -0.5, &err), KB_OK);
    memcpy(r->obs_u + r->n_obs * D, pt.x, D * sizeof(double));
    r->obs_y[r->n_obs++] = -0.5;
    for (size_t i = 0; i < 40; i++)
        check_at(e, r, k, cand + i * D, X, y);
    assert_int_equal(kb_engine_ask(e, 1, &pt, &res, &err), KB_OK);
    free(X);
    free(y);
    kb_kernel_free(k);
    free(r);
    kb_engine_free(e);
    kb_space_free(sp);
    free(cand);
}

/* Asks n points one by one with deterministic feedback; returns their indices. */
static void drive(kb_engine *e, int n, size_t *idx)
{
    kb_error err;
    for (int s = 0; s < n; s++) {
        kb_point pt[2];
        kb_ask_result res;
        assert_int_equal(kb_engine_ask(e, 2, pt, &res, &err), KB_OK);
        assert_int_equal(res.n, 2);
        idx[2 * s] = pt[0].index;
        idx[2 * s + 1] = pt[1].index;
        assert_int_equal(kb_engine_tell(e, pt[0].handle, cos(9 * pt[0].x[0]) + pt[0].x[1], &err), KB_OK);
        if (s % 3 == 0)
            assert_int_equal(kb_engine_abandon(e, pt[1].handle, &err), KB_OK);
        else
            assert_int_equal(kb_engine_tell(e, pt[1].handle, sin(5 * pt[1].x[1]), &err), KB_OK);
    }
}

/* Same calls, same choices; a snapshot restores the same engine. Fitted engines too: their
 * refits happen at observation counts, so they are a function of the calls as well. */
static void deterministic_and_snapshot_restore(void **state)
{
    (void)state;
    kb_error err;
    for (int run = 0; run < 4; run++) {
        int box = run & 1, fitted = run >> 1;
        kb_rng drv;
        kb_rng_seed(&drv, 21);
        double *cand = tu_uniform_matrix(&drv, 200, D, 0.0, 1.0);
        kb_space *sp = box ? kb_space_new_box(D, 64, &err) : kb_space_new_finite(cand, 200, D, &err);
        kb_engine *a = new_engine(sp, NULL, 200, 4, fitted);
        kb_engine *b = new_engine(sp, NULL, 200, 4, fitted);
        size_t ia[160], ib[160];
        drive(a, 40, ia);
        drive(b, 40, ib);
        assert_memory_equal(ia, ib, sizeof ia / 2);
        kb_engine *r = tu_restored(a);
        drive(a, 40, ia + 80);
        drive(r, 40, ib + 80);
        assert_memory_equal(ia + 80, ib + 80, sizeof ia / 2);
        double ma[10], sa[10], mr[10], sr[10];
        assert_int_equal(kb_engine_posterior(a, cand, 10, ma, sa, &err), KB_OK);
        assert_int_equal(kb_engine_posterior(r, cand, 10, mr, sr, &err), KB_OK);
        assert_memory_equal(ma, mr, sizeof ma);
        assert_memory_equal(sa, sr, sizeof sa);
        assert_int_equal(tu_stat(a, "dict_size"), tu_stat(r, "dict_size"));
        assert_int_equal(kb__pi_n_created(a), kb__pi_n_created(r));
        kb_hyperparameters hp;
        assert_int_equal(kb_engine_hyperparameters(a, &hp), KB_OK);
        assert_int_equal(hp.fitting, fitted);
        assert_true(fitted ? hp.fits >= 3 : hp.fits == 0);
        for (int i = 0; i < 160; i++)
            assert_true(ia[i] < 200);
        kb_engine_free(a);
        kb_engine_free(b);
        kb_engine_free(r);
        kb_space_free(sp);
        free(cand);
    }
}

/* The sd each candidate is scored with (through the leaves' variance caches) against
 * kb_engine_posterior's, solved whole; *held: the doubles the caches hold. */
static void check_scored_sd(kb_engine *e, const double *cand, size_t n, size_t *held)
{
    kb_error err;
    double sd[n], m[n], s[n], var[n], want[n];
    assert_int_equal(kb__pi_candidate_sd(e, sd, held, &err), KB_OK);
    assert_int_equal(kb_engine_posterior(e, cand, n, m, s, &err), KB_OK);
    for (size_t i = 0; i < n; i++) {
        var[i] = sd[i] * sd[i];
        want[i] = s[i] * s[i];
    }
    assert_true(tu_max_rel_err(var, want, n, 1e-6) <= 1e-9);
}

/* The variance cache (pi_gp_ucb.c, leaf_gp.V) solves only the rows appended since it
 * was filled: after bursts of hand-outs in one leaf, repeats of pending candidates
 * (a row's noise changed: the cache is stale), tells, abandons, splits and (fitted)
 * refits, every candidate's scored sd equals a whole solve's. */
static void cached_variances_equal_a_whole_solve(void **state)
{
    (void)state;
    kb_error err;
    enum { NC = 60 };
    for (int fitted = 0; fitted < 2; fitted++) {
        kb_rng drv;
        kb_rng_seed(&drv, 31);
        double *cand = tu_uniform_matrix(&drv, NC, D, 0.0, 1.0);
        kb_space *sp = kb_space_new_finite(cand, NC, D, &err);
        kb_engine *e = new_engine(sp, "1", 300, 6, fitted);
        record *r = calloc(1, sizeof *r);
        size_t held, cached = 0;
        for (int round = 0; round < 30; round++) {
            for (size_t b = 1 + (size_t)kb_rng_below(&drv, 12); b > 0; b--) {
                kb_point pt;
                kb_ask_result res;
                assert_int_equal(kb_engine_ask(e, 1, &pt, &res, &err), KB_OK);
                assert_int_equal(res.n, 1);
                r->pend_h[r->n_pend] = pt.handle;
                memcpy(r->pend_u + r->n_pend++ * D, pt.x, D * sizeof(double));
            }
            check_scored_sd(e, cand, NC, &held);
            cached += held > 0;
            for (int s = 0; s < 6; s++)
                random_step(e, r, &drv);
            check_scored_sd(e, cand, NC, &held);
        }
        assert_true(cached > 0);
        free(r);
        kb_engine_free(e);
        kb_space_free(sp);
        free(cand);
    }
}

static void expect_create_fails(kb_config *cfg, const kb_space *sp, const char *field)
{
    kb_error err = {0};
    kb_engine *e = kb_engine_create(cfg, sp, &err);
    assert_null(e);
    assert_string_equal(err.field, field);
    kb_config_free(cfg);
}

static kb_config *cfg_with(const char *name, const char *sval, double nval)
{
    kb_error err;
    kb_config *cfg = kb_config_new("pi-gp-ucb", &err);
    if (sval)
        assert_int_equal(kb_config_set_string(cfg, name, sval, &err), KB_OK);
    else if (name)
        assert_int_equal(kb_config_set_number(cfg, name, nval, &err), KB_OK);
    return cfg;
}

static void bad_configurations_are_rejected(void **state)
{
    (void)state;
    kb_error err;
    double inside[4] = {0.1, 0.2, 0.9, 1.0}, outside[4] = {0.1, 0.2, 1.5, 0.3};
    kb_space *ok = kb_space_new_finite(inside, 2, D, &err);
    kb_space *out = kb_space_new_finite(outside, 2, D, &err);
    kb_config *d1 = kb_config_new("pi-gp-ucb", &err);
    assert_int_equal(kb_config_set_number(d1, "delta", 1.0, &err), KB_ERANGE); /* < 1 */
    assert_string_equal(err.field, "delta");
    kb_config_free(d1);
    expect_create_fails(cfg_with("input_scaling", "standardize", 0), ok, "input_scaling");
    expect_create_fails(cfg_with("input_scaling", "none", 0), out, "candidates[1][0]");
    kb_space *d9 = kb_space_new_box(9, 16, &err);
    expect_create_fails(cfg_with("initial_divisions", NULL, 100), d9, "initial_divisions");
    /* a cover sized by the horizon names the horizon (it named initial_divisions, unset) */
    expect_create_fails(cfg_with("horizon", NULL, 1e9), d9, "horizon");
    kb_config *cfg = kb_config_new("pi-gp-ucb", &err);
    /* a Matern kernel only (its own kernel option), matern32 unless set */
    assert_string_equal(kb_config_string(cfg, "kernel"), "matern32");
    for (int k = 0; k < 2; k++) {
        assert_int_not_equal(kb_config_set_string(cfg, "kernel", k ? "linear" : "rbf", &err),
                             KB_OK);
        assert_string_equal(err.field, "kernel");
    }
    assert_int_equal(kb_config_set_number(cfg, "horizon", 0, &err), KB_ERANGE);
    assert_string_equal(err.field, "horizon");
    assert_int_equal(kb_config_set_number(cfg, "B", -1, &err), KB_ERANGE);
    assert_string_equal(err.field, "B");
    assert_int_equal(kb_config_set_number(cfg, "R", -1, &err), KB_ERANGE);
    assert_int_equal(kb_config_set_number(cfg, "delta", 0, &err), KB_ERANGE);
    assert_int_equal(kb_config_set_number(cfg, "beta_scale", -1, &err), KB_ERANGE);
    /* Unit scaling maps any finite set into the cube; the default kernel is matern32. */
    kb_engine *e = kb_engine_create(cfg, out, &err);
    assert_non_null(e);
    double x[2] = {5.0, 0.5};
    assert_int_equal(kb_engine_observe(e, x, 1.0, &err), KB_EINVAL);
    assert_string_equal(err.field, "x[0]");
    x[0] = 0.1;
    x[1] = 0.25;
    assert_int_equal(kb_engine_observe(e, x, 1.0, &err), KB_OK);
    kb_engine_free(e);
    kb_config_free(cfg);
    kb_space_free(ok);
    kb_space_free(out);
    kb_space_free(d9);
}

/* Issue 16 item 1: a box of 64 parameters crashed the daemon (1 << d). Every width above
 * the stated limit is refused at creation; the limit itself runs through splits. */
static void dimension_limit_is_stated_and_enforced(void **state)
{
    (void)state;
    kb_error err;
    size_t lim = kb_engine_max_dim("pi-gp-ucb");
    assert_true(lim >= 2 && lim < 64);
    assert_int_equal(kb_engine_max_dim("gp-ucb"), KB_MAX_DIM);
    assert_int_equal(kb_engine_max_dim("no-such-engine"), 0);
    size_t wide[] = {lim + 1, 24, 40, 63, 64, 65};
    for (size_t i = 0; i < sizeof wide / sizeof wide[0]; i++) {
        kb_space *sp = kb_space_new_box(wide[i], 64, &err);
        assert_non_null(sp);
        kb_config *cfg = kb_config_new("pi-gp-ucb", &err);
        assert_null(kb_engine_create(cfg, sp, &err));
        assert_int_equal(err.code, KB_ERANGE);
        assert_string_equal(err.field, "dim");
        kb_config_free(cfg);
        kb_space_free(sp);
    }
    kb_space *sp = kb_space_new_box(lim, 256, &err);
    kb_engine *e = make_engine(sp, "1", 100, 3);
    for (int t = 0; t < 60; t++) {
        kb_point pt;
        kb_ask_result res;
        assert_int_equal(kb_engine_ask(e, 1, &pt, &res, &err), KB_OK);
        assert_int_equal(res.n, 1);
        assert_int_equal(kb_engine_tell(e, pt.handle, -pt.x[0] * pt.x[0], &err), KB_OK);
    }
    assert_true(kb__pi_n_cells(e) > 1); /* it split, 2^lim children at a time */
    kb_engine_free(e);
    kb_space_free(sp);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(cover_invariants_on_random_sequences),
        cmocka_unit_test(cell_gp_equals_exact_gp),
        cmocka_unit_test(pending_points_are_hallucinated_in_their_cell),
        cmocka_unit_test(failed_leaf_rebuild_is_never_indexed),
        cmocka_unit_test(cached_variances_equal_a_whole_solve),
        cmocka_unit_test(deterministic_and_snapshot_restore),
        cmocka_unit_test(bad_configurations_are_rejected),
        cmocka_unit_test(dimension_limit_is_stated_and_enforced),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
