/*
 * test_acq.c - unit tests of core/src/acq.c, the refinement of box pool points on the
 * fitted GP's UCB: the value and the gradient against an independent dense posterior
 * (tu_exact_posterior, central finite differences of it) for every kernel kbandit has
 * (RBF and the three Materns with ARD lengthscales, the same with a categorical
 * coordinate, which is checked through an explicit one-hot embedding, and the linear
 * kernel, which refinement leaves alone); refinement that stays in the unit cube, never
 * lowers the UCB and is deterministic; and, inside an engine, refined pool rows that lie
 * on the levels of integer and categorical parameters, and engines that refine which
 * replay bit for bit, from the start and from a snapshot; the model's mean (kb__gp_mean)
 * on a history of repeated arms against the dense posterior of every row; the interior
 * prior's basis at known points and its coefficient (kb__interior_coef) on the same
 * history against a direct LU solve over every row.
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

enum { N = 30, D = 3, CHOICES = 3, E = D - 1 + CHOICES };
static const double NOISE = 0.01, WIDTH = 2.0;

/* Central differences with h = 1e-6 err by about h^2 f''' + eps f / h, under 1e-9 here
 * (lengthscales >= 0.3, |u| < 10); a gradient with one term wrong errs by 1e-2 or more. */
static const double FD_STEP = 1e-6, FD_TOL = 1e-7;

static const kb_kernel_kind STATIONARY[] = {KB_KERNEL_RBF, KB_KERNEL_MATERN12,
                                            KB_KERNEL_MATERN32, KB_KERNEL_MATERN52};

/* N points; with `categorical`, coordinate D - 1 is a choice among CHOICES (bin centres). */
static void data(kb_rng *rng, int categorical, double *U, double *y)
{
    for (size_t i = 0; i < N; i++) {
        for (size_t j = 0; j < D; j++)
            U[i * D + j] = kb_rng_uniform(rng);
        if (categorical)
            U[i * D + D - 1] = ((double)kb_rng_below(rng, CHOICES) + 0.5) / CHOICES;
        y[i] = sin(5 * U[i * D]) * cos(3 * U[i * D + 1]) + U[i * D + 2];
    }
}

/* The categorical coordinate of x as CHOICES one-hot coordinates (kernel.c's embedding
 * written out here): with lengthscale sqrt(2) l on each, two different choices are
 * 2 / (2 l^2) = 1 / l^2 apart in r^2, as the categorical kernel defines them. */
static void one_hot(const double *x, double *out)
{
    memcpy(out, x, (D - 1) * sizeof *out);
    for (size_t c = 0; c < CHOICES; c++)
        out[D - 1 + c] = kb__category(x[D - 1], CHOICES) == c ? 1.0 : 0.0;
}

/* The UCB from the dense posterior of `ref` (a kernel on the reference inputs). */
static double dense_ucb(const kb_kernel *ref, const double *R, const double *y,
                        const double *x)
{
    double mean, var;
    assert_int_equal(tu_exact_posterior(ref, R, y, N, NOISE, x, 1, &mean, &var), 0);
    return mean + WIDTH * sqrt(var);
}

/* Checks kb__acq_ucb_at under kernel k against the dense posterior of `ref` on inputs R
 * (R = U for plain kernels, U one-hot embedded for the categorical one) at five points:
 * the value, the gradient against central differences of the dense UCB, and a zero
 * gradient on the categorical coordinate (a choice does not move by gradient). */
static void check_gradient(const kb_kernel *k, const kb_kernel *ref, const double *U,
                           const double *R, const double *y, int categorical, kb_rng *rng)
{
    size_t er = ref->dim;
    for (int p = 0; p < 5; p++) {
        double x[D], g[D], xr[E];
        for (size_t j = 0; j < D; j++)
            x[j] = kb_rng_uniform(rng);
        if (categorical)
            x[D - 1] = ((double)kb_rng_below(rng, CHOICES) + 0.5) / CHOICES;
        double u = kb__acq_ucb_at(k, NOISE, U, y, N, WIDTH, x, g);
        if (categorical)
            one_hot(x, xr);
        else
            memcpy(xr, x, sizeof x);
        double ud = dense_ucb(ref, R, y, xr);
        if (fabs(u - ud) > 1e-10 * (1 + fabs(ud)))
            fail_msg("kernel %d point %d: UCB %.15g, dense %.15g", k->kind, p, u, ud);
        for (size_t j = 0; j < D; j++) {
            if (categorical && j == D - 1) {
                assert_true(g[j] == 0.0);
                continue;
            }
            double xp[E], xm[E];
            memcpy(xp, xr, er * sizeof *xp);
            memcpy(xm, xr, er * sizeof *xm);
            xp[j] += FD_STEP;
            xm[j] -= FD_STEP;
            double fd = (dense_ucb(ref, R, y, xp) - dense_ucb(ref, R, y, xm)) / (2 * FD_STEP);
            if (fabs(fd - g[j]) > FD_TOL * (1 + fabs(fd)))
                fail_msg("kernel %d point %d x[%zu]: gradient %.12g, differences %.12g",
                         k->kind, p, j, g[j], fd);
        }
    }
}

static void gradient_matches_differences_for_each_stationary_kernel(void **state)
{
    (void)state;
    kb_rng rng;
    kb_rng_seed(&rng, 3);
    double U[N * D], y[N], ls[D] = {0.3, 0.6, 1.7};
    data(&rng, 0, U, y);
    for (size_t t = 0; t < sizeof STATIONARY / sizeof STATIONARY[0]; t++) {
        kb_kernel k = {.kind = STATIONARY[t], .dim = D, .variance = 1.3, .lengthscales = ls};
        check_gradient(&k, &k, U, U, y, 0, &rng);
    }
}

static void gradient_matches_differences_with_a_categorical(void **state)
{
    (void)state;
    kb_rng rng;
    kb_rng_seed(&rng, 5);
    double U[N * D], R[N * E], y[N], ls[D] = {0.3, 0.6, 0.8};
    size_t choices[D] = {0, 0, CHOICES};
    double ref_ls[E] = {ls[0], ls[1]};
    for (size_t c = 0; c < CHOICES; c++)
        ref_ls[D - 1 + c] = sqrt(2.0) * ls[D - 1];
    data(&rng, 1, U, y);
    for (size_t i = 0; i < N; i++)
        one_hot(U + i * D, R + i * E);
    for (size_t t = 0; t < sizeof STATIONARY / sizeof STATIONARY[0]; t++) {
        kb_kernel k = {.kind = STATIONARY[t], .dim = D, .variance = 1.3, .lengthscales = ls,
                       .choices = choices};
        kb_kernel ref = {.kind = STATIONARY[t], .dim = E, .variance = 1.3,
                         .lengthscales = ref_ls};
        check_gradient(&k, &ref, U, R, y, 1, &rng);
        /* no gradient on the choice, so refinement climbs the floats only */
        enum { M = 4 };
        double P[M * D], Q[M * D];
        for (size_t i = 0; i < M * D; i++)
            P[i] = i % D == D - 1 ? ((double)(i / D % CHOICES) + 0.5) / CHOICES
                                  : kb_rng_uniform(&rng);
        memcpy(Q, P, sizeof Q);
        assert_int_equal(kb__acq_refine(&k, NOISE, U, y, N, WIDTH, P, M), KB_OK);
        int moved = 0;
        for (size_t p = 0; p < M; p++) {
            assert_true(P[p * D + D - 1] == Q[p * D + D - 1]);
            moved += P[p * D] != Q[p * D] || P[p * D + 1] != Q[p * D + 1];
        }
        assert_true(moved >= 1);
    }
}

/* An additive kernel (kernel.c's overlap term beside the joint one): the value against the
 * dense posterior of the same kernel (tu_exact_posterior, through kb_kernel_matrix's
 * mix_overlap, not acq.c's per-row path), the gradient against central differences of
 * kb__acq_ucb_at itself, and none on the categorical coordinate. */
static void gradient_matches_differences_with_an_additive_categorical(void **state)
{
    (void)state;
    kb_rng rng;
    kb_rng_seed(&rng, 9);
    double U[N * D], y[N], ls[D] = {0.3, 0.6, 0.8};
    size_t choices[D] = {0, 0, CHOICES};
    data(&rng, 1, U, y);
    for (size_t t = 0; t < sizeof STATIONARY / sizeof STATIONARY[0]; t++) {
        kb_kernel k = {.kind = STATIONARY[t], .dim = D, .variance = 1.3, .lengthscales = ls,
                       .choices = choices, .additive = 1, .mix = 0.35};
        for (int p = 0; p < 5; p++) {
            double x[D], g[D], mean, var;
            for (size_t j = 0; j < D - 1; j++)
                x[j] = kb_rng_uniform(&rng);
            x[D - 1] = ((double)kb_rng_below(&rng, CHOICES) + 0.5) / CHOICES;
            double u = kb__acq_ucb_at(&k, NOISE, U, y, N, WIDTH, x, g);
            assert_int_equal(tu_exact_posterior(&k, U, y, N, NOISE, x, 1, &mean, &var), 0);
            double ud = mean + WIDTH * sqrt(var);
            if (fabs(u - ud) > 1e-10 * (1 + fabs(ud)))
                fail_msg("kernel %d point %d: UCB %.15g, dense %.15g", k.kind, p, u, ud);
            assert_true(g[D - 1] == 0.0);
            for (size_t j = 0; j < D - 1; j++) {
                double xp[D], xm[D];
                memcpy(xp, x, sizeof xp);
                memcpy(xm, x, sizeof xm);
                xp[j] += FD_STEP;
                xm[j] -= FD_STEP;
                double fd = (kb__acq_ucb_at(&k, NOISE, U, y, N, WIDTH, xp, NULL) -
                             kb__acq_ucb_at(&k, NOISE, U, y, N, WIDTH, xm, NULL)) /
                            (2 * FD_STEP);
                if (fabs(fd - g[j]) > FD_TOL * (1 + fabs(fd)))
                    fail_msg("kernel %d point %d x[%zu]: gradient %.12g, differences %.12g",
                             k.kind, p, j, g[j], fd);
            }
        }
    }
}

/* The linear kernel has no interior maximum to climb to: refinement leaves points as
 * they are (acq.c refines stationary kernels only). */
static void linear_kernel_is_not_refined(void **state)
{
    (void)state;
    kb_rng rng;
    kb_rng_seed(&rng, 6);
    double U[N * D], y[N], ls[D] = {0.5, 0.5, 0.5}, P[4 * D], Q[4 * D];
    data(&rng, 0, U, y);
    for (size_t i = 0; i < 4 * D; i++)
        P[i] = Q[i] = kb_rng_uniform(&rng);
    kb_kernel k = {.kind = KB_KERNEL_LINEAR, .dim = D, .variance = 1.0, .lengthscales = ls};
    assert_int_equal(kb__acq_refine(&k, NOISE, U, y, N, WIDTH, P, 4), KB_OK);
    assert_memory_equal(P, Q, sizeof P);
}

static void refinement_climbs_inside_the_cube(void **state)
{
    (void)state;
    kb_rng rng;
    kb_rng_seed(&rng, 8);
    double U[N * D], y[N], ls[D] = {0.2, 0.4, 0.8};
    data(&rng, 0, U, y);
    kb_kernel k = {.kind = KB_KERNEL_MATERN52, .dim = D, .variance = 1.0, .lengthscales = ls};
    enum { M = 6 };
    double P[M * D], Q[M * D], before[M];
    for (size_t i = 0; i < M * D; i++)
        P[i] = i < D ? 0.0 : i < 2 * D ? 1.0 : kb_rng_uniform(&rng); /* two corners */
    for (size_t p = 0; p < M; p++)
        before[p] = kb__acq_ucb_at(&k, NOISE, U, y, N, WIDTH, P + p * D, NULL);
    memcpy(Q, P, sizeof Q);
    assert_int_equal(kb__acq_refine(&k, NOISE, U, y, N, WIDTH, P, M), KB_OK);
    assert_int_equal(kb__acq_refine(&k, NOISE, U, y, N, WIDTH, Q, M), KB_OK);
    assert_memory_equal(P, Q, sizeof P);
    int moved = 0;
    for (size_t p = 0; p < M; p++) {
        for (size_t j = 0; j < D; j++)
            assert_true(P[p * D + j] >= 0.0 && P[p * D + j] <= 1.0);
        double after = kb__acq_ucb_at(&k, NOISE, U, y, N, WIDTH, P + p * D, NULL);
        assert_true(after >= before[p]);
        moved += after > before[p] + 1e-6;
    }
    assert_true(moved >= M / 2);
}

/* gp-ucb (fitted) on a box of a float, an integer of 5 values and a categorical of 4
 * choices: after 40 observations and the initial design's asks, an ask fits and redraws
 * the pool, whose last REFINED rows are the best observations moved on the UCB (engine.c
 * refine_pool). They must lie on the integer's and the categorical's levels, in the
 * caller's rows as in the engine's coordinates, and at least one must have moved off its
 * best observation keeping that observation's choice (else nothing was refined and the
 * check would prove nothing). Not every row: a refined point that stays on an observation
 * or lands on another row leaves the row the pool's own point, of any choice (with
 * single-threaded OpenBLAS, as the daemon runs it, the fourth row here does); that
 * refinement keeps choices is gradient_matches_differences_with_a_categorical's. */
static void refined_rows_lie_on_levels(void **state)
{
    (void)state;
    enum { OBS = 40, POOL = 64, REFINED = 4 };
    kb_error err;
    size_t levels[3] = {0, 5, 4};
    unsigned char cat[3] = {0, 0, 1};
    kb_space *sp = kb_space_new_box(3, POOL, &err);
    assert_non_null(sp);
    assert_int_equal(kb_space_set_levels(sp, levels, cat, &err), KB_OK);
    kb_config *cfg = kb_config_new("gp-ucb", &err);
    assert_int_equal(kb_config_set_number(cfg, "seed", 2, &err), KB_OK);
    kb_engine *e = kb_engine_create(cfg, sp, &err);
    assert_non_null(e);
    kb_rng drv;
    kb_rng_seed(&drv, 12);
    double X[OBS * 3], Y[OBS];
    for (size_t i = 0; i < OBS; i++) {
        double *x = X + i * 3, k = (double)kb_rng_below(&drv, 5);
        x[0] = kb_rng_uniform(&drv);
        x[1] = (k + 0.5) / 5.0;
        x[2] = ((double)kb_rng_below(&drv, 4) + 0.5) / 4.0;
        Y[i] = -(x[0] - 0.37) * (x[0] - 0.37) - 0.1 * (k - 2.3) * (k - 2.3) - x[2];
        assert_int_equal(kb_engine_observe(e, x, Y[i], &err), KB_OK);
    }
    const kb_space *s = e->space;
    uint64_t generation = s->generation;
    for (int r = 0; r < 2 * 4 + 1 && s->generation == generation; r++) {
        kb_point p; /* the initial design (2 (d + 1) points) first, then the refresh */
        kb_ask_result res;
        assert_int_equal(kb_engine_ask(e, 1, &p, &res, &err), KB_OK);
        assert_int_equal(kb_engine_abandon(e, p.handle, &err), KB_OK);
    }
    assert_true(s->generation != generation);
    size_t best[REFINED]; /* refine_pool starts from the best observations, best first */
    for (size_t r = 0; r < REFINED; r++) {
        best[r] = OBS;
        for (size_t o = 0; o < OBS; o++) {
            int taken = 0;
            for (size_t q = 0; q < r; q++)
                taken |= best[q] == o;
            if (!taken && (best[r] == OBS || Y[o] > Y[best[r]]))
                best[r] = o;
        }
    }
    int moved = 0;
    for (size_t r = 0; r < REFINED; r++) {
        const double *row = s->u + (s->n - REFINED + r) * 3, *from = X + best[r] * 3;
        for (size_t j = 1; j < 3; j++) {
            double v = row[j] * (double)levels[j] - 0.5;
            assert_true(fabs(v - round(v)) < 1e-12);
            assert_true(s->rows[(s->n - REFINED + r) * 3 + j] == row[j]);
        }
        moved += row[2] == from[2] && (row[0] != from[0] || row[1] != from[1]);
    }
    assert_true(moved >= 1);
    kb_engine_free(e);
    kb_config_free(cfg);
    kb_space_free(sp);
}

/* A 2-d box study on gp-ucb or gp-bucb (fitted, pool of 64): asks and tells of a smooth
 * function, `steps` asks; each handed-out point goes to xs (2 per ask), and *refined
 * counts those taken from a refined pool row (the last 4 of a pool: engine.c refine_pool). */
static void drive(kb_engine *e, int steps, double *xs, int *refined)
{
    kb_error err;
    for (int t = 0; t < steps; t++) {
        kb_point p;
        kb_ask_result res;
        assert_int_equal(kb_engine_ask(e, 1, &p, &res, &err), KB_OK);
        assert_int_equal(res.n, 1); /* one ask at a time: gp-bucb never waits */
        memcpy(xs + 2 * t, p.x, 2 * sizeof *xs);
        *refined += e->space->n - p.index <= 4 && e->space->generation > 0;
        double y = -(p.x[0] - 0.31) * (p.x[0] - 0.31) - 2 * (p.x[1] - 0.71) * (p.x[1] - 0.71);
        assert_int_equal(kb_engine_tell(e, p.handle, y, &err), KB_OK);
    }
}

static kb_engine *box_engine(const char *name)
{
    kb_error err;
    kb_space *sp = kb_space_new_box(2, 64, &err);
    kb_config *cfg = kb_config_new(name, &err);
    assert_int_equal(kb_config_set_number(cfg, "seed", 7, &err), KB_OK);
    kb_engine *e = kb_engine_create(cfg, sp, &err);
    assert_non_null(e);
    kb_space_free(sp);
    kb_config_free(cfg);
    return e;
}

/* With refinement on, two engines given the same calls hand out bit-identical points,
 * and so does an engine restored from a snapshot taken half-way (snapshot.c replays the
 * event log): refinement is a function of the call sequence only. Refined rows must be
 * handed out along the way, or the check would not involve refinement. */
static void refinement_is_deterministic_and_restorable(void **state)
{
    (void)state;
    enum { HALF = 40 };
    const char *engines[] = {"gp-ucb", "gp-bucb"};
    for (int en = 0; en < 2; en++) {
        kb_engine *a = box_engine(engines[en]), *b = box_engine(engines[en]);
        double xa[4 * HALF], xb[4 * HALF], xr[4 * HALF];
        int refined = 0, ignored = 0;
        drive(a, HALF, xa, &refined);
        drive(b, HALF, xb, &ignored);
        assert_memory_equal(xa, xb, 2 * HALF * sizeof *xa);
        kb_engine *r = tu_restored(b);
        drive(a, HALF, xa + 2 * HALF, &refined);
        drive(r, HALF, xr + 2 * HALF, &ignored);
        assert_memory_equal(xa + 2 * HALF, xr + 2 * HALF, 2 * HALF * sizeof *xa);
        assert_true(refined >= 5);
        kb_engine_free(a);
        kb_engine_free(b);
        kb_engine_free(r);
    }
}

/* The model's recommendation (kb__gp_mean) on a finite set's history: 30 arms told 1-25
 * times each with noise, 340 rows. Repeats are merged, so its GP is the exact posterior of
 * every row (a 256-row sample that keeps the best quarter by value was not: it kept the
 * largest draws of the most told arms). Against the dense posterior of all 340 rows. */
static void model_mean_is_the_posterior_of_every_repeated_row(void **state)
{
    (void)state;
    enum { ROWS = 340, M = 8 };
    kb_rng rng;
    kb_rng_seed(&rng, 17);
    double U[N * D], y[N], *R = malloc(ROWS * D * sizeof *R), *yr = malloc(ROWS * sizeof *yr);
    size_t of[ROWS]; /* the round c = 0 tells every arm first: arm i is group i */
    data(&rng, 0, U, y);
    size_t n = 0;
    for (size_t c = 0; c < 25; c++) /* arm i told 1 + i % 25 times, interleaved */
        for (size_t i = 0; i < N; i++)
            if (i % 25 >= c) {
                memcpy(R + n * D, U + i * D, D * sizeof *R);
                of[n] = i;
                yr[n++] = y[i] + 0.1 * kb_rng_normal(&rng);
            }
    assert_int_equal(n, ROWS);
    double P[M * D], mean[M], ref[M], var[M];
    memcpy(P, U, 4 * D * sizeof *P); /* four told arms, four new points */
    for (size_t i = 4 * D; i < M * D; i++)
        P[i] = kb_rng_uniform(&rng);
    kb_kernel *k = tu_kernel(KB_KERNEL_MATERN52, D, 1.3);
    kb_rows rows = {R, yr, ROWS, of, N};
    assert_int_equal(kb__gp_mean(k, NOISE, &rows, P, M, mean), KB_OK);
    assert_int_equal(tu_exact_posterior(k, R, yr, ROWS, NOISE, P, M, ref, var), 0);
    for (size_t i = 0; i < M; i++)
        if (fabs(mean[i] - ref[i]) > 1e-8 * (1.0 + fabs(ref[i])))
            fail_msg("point %zu: mean %.12g, dense over every row %.12g", i, mean[i], ref[i]);
    kb_kernel_free(k);
    free(R);
    free(yr);
}

/* b(u) = 1/3 - mean over the ordered coordinates of (2 u_j - 1)^2, u_j clamped to [0, 1]. */
static void interior_basis_is_high_inside_and_ignores_choices(void **state)
{
    (void)state;
    kb_kernel *k = tu_kernel(KB_KERNEL_MATERN52, D, 0.5);
    const double centre[D] = {0.5, 0.5, 0.5}, corner[D] = {0, 1, 1}, face[D] = {0.5, 1, 0.5};
    assert_true(fabs(kb__interior_basis(k, centre) - 1.0 / 3.0) < 1e-15);
    assert_true(fabs(kb__interior_basis(k, corner) + 2.0 / 3.0) < 1e-15);
    assert_true(fabs(kb__interior_basis(k, face) - (1.0 / 3.0 - 1.0 / 3.0)) < 1e-15);
    const double beyond[D] = {-3, 4, 1}; /* clamped: a corner */
    assert_true(fabs(kb__interior_basis(k, beyond) + 2.0 / 3.0) < 1e-15);
    const size_t choices[D] = {0, 0, CHOICES};
    kb_error err;
    assert_int_equal(kb_kernel_set_choices(k, choices, &err), KB_OK);
    const double on_choice[D] = {0.5, 1, 1.0 / 6.0}; /* the third coordinate a choice */
    assert_true(fabs(kb__interior_basis(k, on_choice) - (1.0 / 3.0 - 0.5)) < 1e-15);
    kb_kernel_free(k);
}

/* The interior prior's coefficient on the 340-row history of repeated arms above, whose
 * values are residuals under c_now: the posterior mean of c under c ~ N(1, 1),
 * (b^T K_y^-1 (r + c_now b) + 1) / (b^T K_y^-1 b + 1), with K_y over every row solved
 * here by LU (dgesv), not the engine's merged Cholesky. */
static void interior_coef_is_the_gls_estimate_over_every_repeated_row(void **state)
{
    (void)state;
    enum { ROWS = 340 };
    kb_rng rng;
    kb_rng_seed(&rng, 23);
    double U[N * D], y[N], *R = malloc(ROWS * D * sizeof *R), *r = malloc(ROWS * sizeof *r);
    double *K = malloc(ROWS * ROWS * sizeof *K), *B = malloc(2 * ROWS * sizeof *B);
    lapack_int *piv = malloc(ROWS * sizeof *piv);
    size_t of[ROWS], n = 0;
    const double c_now = 0.4;
    kb_kernel *k = tu_kernel(KB_KERNEL_MATERN52, D, 0.7);
    data(&rng, 0, U, y);
    for (size_t c = 0; c < 25; c++)
        for (size_t i = 0; i < N; i++)
            if (i % 25 >= c) {
                memcpy(R + n * D, U + i * D, D * sizeof *R);
                of[n] = i;
                r[n++] = y[i] + 0.1 * kb_rng_normal(&rng) -
                         c_now * kb__interior_basis(k, U + i * D);
            }
    assert_int_equal(n, ROWS);
    for (size_t i = 0; i < ROWS; i++) {
        for (size_t j = 0; j < ROWS; j++)
            K[i * ROWS + j] = kb_kernel_eval(k, R + i * D, R + j * D) + (i == j ? NOISE : 0);
        B[2 * i] = kb__interior_basis(k, R + i * D);
        B[2 * i + 1] = r[i] + c_now * B[2 * i];
    }
    double b[ROWS];
    for (size_t i = 0; i < ROWS; i++)
        b[i] = B[2 * i];
    assert_int_equal(LAPACKE_dgesv(LAPACK_ROW_MAJOR, ROWS, 2, K, ROWS, piv, B, 2), 0);
    double bKb = 0.0, bKy = 0.0;
    for (size_t i = 0; i < ROWS; i++) {
        bKb += b[i] * B[2 * i];
        bKy += b[i] * B[2 * i + 1];
    }
    double want = (bKy + KB_INTERIOR_C) / (bKb + 1.0);
    kb_rows rows = {R, r, ROWS, of, N};
    int nomem = 0;
    double got = kb__interior_coef(k, NOISE, &rows, c_now, &nomem);
    if (fabs(got - want) > 1e-8 * (1.0 + fabs(want)))
        fail_msg("coefficient %.12g, direct solve over every row %.12g", got, want);
    assert_true(fabs(want - c_now) > 0.05); /* the data moved it: the check has teeth */
    assert_int_equal(nomem, 0);
    kb_kernel_free(k);
    free(R);
    free(r);
    free(K);
    free(B);
    free(piv);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(gradient_matches_differences_for_each_stationary_kernel),
        cmocka_unit_test(gradient_matches_differences_with_a_categorical),
        cmocka_unit_test(gradient_matches_differences_with_an_additive_categorical),
        cmocka_unit_test(linear_kernel_is_not_refined),
        cmocka_unit_test(refinement_climbs_inside_the_cube),
        cmocka_unit_test(refined_rows_lie_on_levels),
        cmocka_unit_test(refinement_is_deterministic_and_restorable),
        cmocka_unit_test(model_mean_is_the_posterior_of_every_repeated_row),
        cmocka_unit_test(interior_basis_is_high_inside_and_ignores_choices),
        cmocka_unit_test(interior_coef_is_the_gls_estimate_over_every_repeated_row),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
