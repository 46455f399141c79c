/*
 * test_hyper.c - unit tests of core/src/hyper.c, the type-II MAP fit of kernel
 * hyperparameters: the log marginal likelihood against an independent dense computation
 * (LU solve and LU determinant), its gradient against central finite differences for every
 * hyperparameter of every stationary kernel with ARD lengthscales, with and without a
 * categorical coordinate (indicator distance against the kernel's one-hot embedding),
 * the same with repeated inputs (merged by the fit, against every row), recovery of known ARD
 * lengthscales and noise from a GP draw, the noise from a bandit-like history that
 * repeats one arm (more rows than a fit uses), a short warm-started refit on a sample
 * against a fit from scratch, from a near start and from a far one, fixed parameters
 * held, determinism.
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

enum { D = 3 };

static void random_points(kb_rng *rng, size_t n, double *U)
{
    for (size_t i = 0; i < n * D; i++)
        U[i] = kb_rng_uniform(rng);
}

/* log N(y; 0, K + sn2 I) by LU factorization (no Cholesky), from kb_kernel_matrix. */
static double dense_log_marginal(const kb_kernel *shape, const double *theta, const double *U,
                                 const double *y, size_t n)
{
    double ls[D];
    for (size_t k = 0; k < D; k++)
        ls[k] = exp(theta[k]);
    kb_kernel *ker = tu_kernel_with(shape->kind, D, exp(theta[D]), ls);
    assert_int_equal(kb_kernel_set_choices(ker, shape->choices, NULL), KB_OK);
    ker->additive = shape->additive;
    ker->mix = shape->additive ? 1.0 / (1.0 + exp(-theta[D + 2])) : 0.0;
    double *A = malloc(n * n * sizeof *A), *b = malloc(n * sizeof *b);
    lapack_int *piv = malloc(n * sizeof *piv);
    kb_kernel_matrix(ker, U, n, U, n, A);
    kb_kernel_free(ker);
    for (size_t i = 0; i < n; i++)
        A[i * n + i] += exp(theta[D + 1]);
    memcpy(b, y, n * sizeof *b);
    assert_int_equal(LAPACKE_dgesv(LAPACK_ROW_MAJOR, (int)n, 1, A, (int)n, piv, b, 1), 0);
    double quad = 0.0, logdet = 0.0;
    for (size_t i = 0; i < n; i++) {
        quad += y[i] * b[i];
        logdet += log(fabs(A[i * n + i]));
    }
    free(A);
    free(b);
    free(piv);
    return -0.5 * quad - 0.5 * logdet - 0.5 * (double)n * log(2.0 * M_PI);
}

/* The objective's gradient (every entry of theta) against central differences. */
static void check_gradient(const kb_kernel *shape, const kb_rows *rows, const double *theta,
                           int prior)
{
    size_t nt = D + 2 + (size_t)shape->additive;
    double g[D + 3];
    kb__hyper_objective(shape, rows, theta, g, prior);
    for (size_t j = 0; j < nt; j++) {
        double h = 1e-5, tp[D + 3], tm[D + 3];
        memcpy(tp, theta, sizeof tp);
        memcpy(tm, theta, sizeof tm);
        tp[j] += h;
        tm[j] -= h;
        double fd = (kb__hyper_objective(shape, rows, tp, NULL, prior) -
                     kb__hyper_objective(shape, rows, tm, NULL, prior)) /
                    (2 * h);
        if (fabs(fd - g[j]) > 1e-5 * (1.0 + fabs(fd)))
            fail_msg("n %zu kernel %d additive %d prior %d theta[%zu]: gradient %.10g, "
                     "differences %.10g",
                     rows->n, (int)shape->kind, shape->additive, prior, j, g[j], fd);
    }
}

/* At n = 40 and 100: the inverse behind the gradient recurses by halves down to blocks of
 * 32 (hyper.c's upper_inverse), once and twice. */
static void likelihood_matches_dense_and_gradient_matches_differences(void **state)
{
    (void)state;
    enum { NMAX = 100 };
    kb_kernel_kind kinds[] = {KB_KERNEL_RBF, KB_KERNEL_MATERN12, KB_KERNEL_MATERN32,
                              KB_KERNEL_MATERN52};
    kb_rng rng;
    kb_rng_seed(&rng, 11);
    double U[NMAX * D], y[NMAX];
    random_points(&rng, NMAX, U);
    for (size_t i = 0; i < NMAX; i++)
        y[i] = sin(6 * U[i * D]) + U[i * D + 1] * U[i * D + 2] + 0.1 * kb_rng_normal(&rng);
    double theta[D + 3] = {log(0.3), log(0.7), log(1.9), log(1.3), log(0.02), log(0.3 / 0.7)};
    size_t choices[D] = {0, 0, 3}; /* the third coordinate: 3 unordered choices */
    for (size_t N = 40; N <= NMAX; N += NMAX - 40)
        for (size_t k = 0; k < 3 * sizeof kinds / sizeof kinds[0]; k++) {
            /* k % 3: ordered only, a categorical coordinate, and that with the additive
             * overlap term (theta[D + 2] = logit(mix)) */
            kb_kernel *shape = tu_kernel(kinds[k / 3], D, 1.0);
            assert_int_equal(kb_kernel_set_choices(shape, k % 3 ? choices : NULL, NULL),
                             KB_OK);
            shape->additive = k % 3 == 2;
            kb_rows rows = {U, y, N, NULL, 0};
            double v = kb__hyper_objective(shape, &rows, theta, NULL, 0);
            double ref = dense_log_marginal(shape, theta, U, y, N);
            assert_true(fabs(v - ref) <= 1e-9 * fabs(ref));
            for (int prior = 0; prior <= 1; prior++)
                check_gradient(shape, &rows, theta, prior);
            kb_kernel_free(shape);
        }
}

/* Rows that repeat an input (a finite set's arm told again) enter the objective through
 * their mean and their within sum of squares (hyper.c, row_set): the likelihood of every
 * row all the same, and its gradient, the noise's above all. 30 points told 1-6 times
 * each, the repeats interleaved (105 rows), with and without a categorical coordinate. */
static void repeated_inputs_give_the_likelihood_of_every_row(void **state)
{
    (void)state;
    enum { G = 30, NMAX = 6 * G };
    kb_rng rng;
    kb_rng_seed(&rng, 13);
    double Ug[G * D], U[NMAX * D], y[NMAX];
    size_t of[NMAX]; /* the round c = 0 tells every point first: point i is group i */
    random_points(&rng, G, Ug);
    for (size_t i = 0; i < G; i++) /* the third coordinate one of 3 choices */
        Ug[i * D + 2] = (double)(i % 3) / 3.0 + 1.0 / 6.0;
    size_t n = 0;
    for (size_t c = 0; c < 6; c++)
        for (size_t i = 0; i < G; i++) {
            if (i % 6 < c)
                continue;
            const double *u = Ug + i * D;
            memcpy(U + n * D, u, D * sizeof *U);
            of[n] = i;
            y[n++] = sin(6 * u[0]) + u[1] * u[2] + 0.1 * kb_rng_normal(&rng);
        }
    assert_int_equal(n, 105);
    kb_rows rows = {U, y, n, of, G};
    double theta[D + 3] = {log(0.3), log(0.7), log(1.9), log(1.3), log(0.02), log(0.3 / 0.7)};
    size_t choices[D] = {0, 0, 3};
    for (int k = 0; k < 3; k++) {
        kb_kernel *shape = tu_kernel(KB_KERNEL_MATERN52, D, 1.0);
        assert_int_equal(kb_kernel_set_choices(shape, k ? choices : NULL, NULL), KB_OK);
        shape->additive = k == 2;
        double v = kb__hyper_objective(shape, &rows, theta, NULL, 0);
        double ref = dense_log_marginal(shape, theta, U, y, n);
        if (!(fabs(v - ref) <= 1e-9 * fabs(ref)))
            fail_msg("kernel %d: log likelihood %.12g, dense over every row %.12g", k, v, ref);
        for (int prior = 0; prior <= 1; prior++)
            check_gradient(shape, &rows, theta, prior);
        kb_kernel_free(shape);
    }
}

/* y = f + noise with f a draw from the GP with ARD lengthscales TRUE_L, amplitude 1. */
static void gp_draw(kb_rng *rng, size_t n, const double *true_l, double noise_sd, double *U,
                    double *y)
{
    random_points(rng, n, U);
    kb_kernel *ker = tu_kernel_with(KB_KERNEL_MATERN52, D, 1.0, true_l);
    double *K = malloc(n * n * sizeof *K);
    kb_kernel_matrix(ker, U, n, U, n, K);
    kb_kernel_free(ker);
    for (size_t i = 0; i < n; i++)
        K[i * n + i] += 1e-8;
    assert_int_equal(LAPACKE_dpotrf(LAPACK_ROW_MAJOR, 'L', (int)n, K, (int)n), 0);
    double *z = malloc(n * sizeof *z);
    for (size_t i = 0; i < n; i++)
        z[i] = kb_rng_normal(rng);
    for (size_t i = 0; i < n; i++) {
        double f = 0.0;
        for (size_t j = 0; j <= i; j++)
            f += K[i * n + j] * z[j];
        y[i] = f + noise_sd * kb_rng_normal(rng);
    }
    free(K);
    free(z);
}

/* Fits the first n rows (U, y), repeated inputs grouped by group_of (NULL: none). */
static void fit(kb_kernel *k, double *noise, const double *U, const double *y, size_t n,
                const size_t *group_of, size_t n_groups, const kb_hyper_opts *o, uint64_t seed)
{
    kb_rng rng;
    kb_rng_seed(&rng, seed);
    kb_error err;
    kb_rows rows = {U, y, n, group_of, n_groups};
    if (kb__hyper_fit(k, noise, &rows, o, &rng, &err) != KB_OK)
        fail_msg("fit: %s", err.message);
}

/* n fresh rows (owned by the caller) of a GP draw as gp_draw makes them, from seed. */
static void gp_rows(uint64_t seed, size_t n, const double *true_l, double noise_sd, double **U,
                    double **y)
{
    *U = malloc(n * D * sizeof **U);
    *y = malloc(n * sizeof **y);
    kb_rng rng;
    kb_rng_seed(&rng, seed);
    gp_draw(&rng, n, true_l, noise_sd, *U, *y);
}

static void recovers_ard_lengthscales_and_noise(void **state)
{
    (void)state;
    enum { N = 500 };
    const double true_l[D] = {0.15, 0.3, 0.6}, noise_sd = 0.1;
    double *U, *y;
    gp_rows(5, N, true_l, noise_sd, &U, &y);
    double noise = 0.1;
    kb_kernel *k = tu_kernel(KB_KERNEL_MATERN52, D, 1.0);
    const double *ls = k->lengthscales; /* the fitted values, read inside the struct */
    kb_hyper_opts o = {.max_rows = N, .starts = 2, .max_evals = 200};
    fit(k, &noise, U, y, N, NULL, 0, &o, 1);
    for (size_t j = 0; j < D; j++)
        if (fabs(ls[j] - true_l[j]) > 0.25 * true_l[j])
            fail_msg("lengthscale %zu: fitted %g, true %g", j, ls[j], true_l[j]);
    double true_noise = noise_sd * noise_sd;
    if (fabs(noise - true_noise) > 0.3 * true_noise)
        fail_msg("noise: fitted %g, true %g", noise, true_noise);
    kb_kernel_free(k);
    free(U);
    free(y);
}

/* A bandit's history: a few points, then one arm (the best) told many times. The fit
 * sees max_rows of the 2,000 rows; the noise must come out as drawn. Rows picked by y
 * would keep that arm's largest noise draws beside its typical ones and read their
 * spread as noise (1.5 times the truth here). */
static void noise_recovered_from_repeats_of_one_arm(void **state)
{
    (void)state;
    enum { N0 = 100, N = 2000 };
    const double true_l[D] = {0.3, 0.3, 0.3}, noise_sd = 0.1;
    double *U = malloc(N * D * sizeof *U), *y = malloc(N * sizeof *y);
    kb_rng rng;
    kb_rng_seed(&rng, 21);
    gp_draw(&rng, N0, true_l, 0.0, U, y);
    size_t best = 0;
    for (size_t i = 1; i < N0; i++)
        best = y[i] > y[best] ? i : best;
    for (size_t i = N0; i < N; i++) {
        memcpy(U + i * D, U + best * D, D * sizeof *U);
        y[i] = y[best] + noise_sd * kb_rng_normal(&rng);
    }
    for (size_t i = 0; i < N0; i++)
        y[i] += noise_sd * kb_rng_normal(&rng);
    double noise = 0.1;
    kb_kernel *k = tu_kernel(KB_KERNEL_MATERN52, D, 1.0);
    size_t *of = malloc(N * sizeof *of); /* every repeat in the best point's group */
    for (size_t i = 0; i < N; i++)
        of[i] = i < N0 ? i : best;
    kb_hyper_opts o = {.starts = 2};
    fit(k, &noise, U, y, N, of, N0, &o, 3);
    double true_noise = noise_sd * noise_sd;
    if (fabs(noise - true_noise) > 0.3 * true_noise)
        fail_msg("noise: fitted %g, true %g", noise, true_noise);
    kb_kernel_free(k);
    free(of);
    free(U);
    free(y);
}

/* The engines' refit once n exceeds the rows a fit uses (engine.c): one run from the
 * previous fit, 10 evaluations, on a fresh uniform sample. From an earlier fit on the first
 * 100 rows it must land within 5% of a fit from scratch with restarts and the full budget
 * on the same sample (the same seed draws it), every value; 5 evaluations miss by 7-11%. */
static void warm_refit_on_a_sample_matches_multistart(void **state)
{
    (void)state;
    enum { N = 1000, EARLIER = 100 };
    const double true_l[D] = {0.15, 0.3, 0.6}, noise_sd = 0.1;
    double *U, *y;
    gp_rows(11, N, true_l, noise_sd, &U, &y);
    kb_kernel *warm = tu_kernel(KB_KERNEL_MATERN52, D, 1.0);
    kb_kernel *full = tu_kernel(KB_KERNEL_MATERN52, D, 1.0);
    double nw = 0.01, nf = 0.01;
    kb_hyper_opts first = {.starts = 2}, refit = {.max_evals = 10}, scratch = {.starts = 2};
    fit(warm, &nw, U, y, EARLIER, NULL, 0, &first, 2);
    fit(warm, &nw, U, y, N, NULL, 0, &refit, 7);
    fit(full, &nf, U, y, N, NULL, 0, &scratch, 7);
    double w[D + 2], f[D + 2];
    for (size_t j = 0; j < D; j++) {
        w[j] = warm->lengthscales[j], f[j] = full->lengthscales[j];
        if (fabs(w[j] - true_l[j]) > 0.25 * true_l[j])
            fail_msg("lengthscale %zu: warm refit %g, true %g", j, w[j], true_l[j]);
    }
    w[D] = warm->variance, f[D] = full->variance;
    w[D + 1] = nw, f[D + 1] = nf;
    for (size_t j = 0; j < D + 2; j++)
        if (fabs(w[j] / f[j] - 1.0) > 0.05)
            fail_msg("hyperparameter %zu: warm refit %g, from scratch %g", j, w[j], f[j]);
    kb_kernel_free(warm);
    kb_kernel_free(full);
    free(U);
    free(y);
}

/* The same capped refit from a start far from any optimum (lengthscales at their floor of
 * 0.025, noise at its floor: what a fit on a converged noise-free search's rows can leave
 * behind). Ten
 * evaluations stop it on its way; the run must go on to the optimum a fit from scratch
 * finds on the same rows (within 1 nat of its log posterior), not end where it was
 * stopped (hundreds of nats short, the lengthscales still a few hundredths). */
static void capped_refit_from_a_far_start_runs_on(void **state)
{
    (void)state;
    enum { N = 256 };
    const double true_l[D] = {0.15, 0.3, 0.6}, noise_sd = 0.01;
    double *U, *y;
    gp_rows(13, N, true_l, noise_sd, &U, &y);
    const double far[D] = {0.025, 0.025, 0.025};
    kb_kernel *warm = tu_kernel_with(KB_KERNEL_MATERN52, D, 1.0, far);
    kb_kernel *full = tu_kernel(KB_KERNEL_MATERN52, D, 1.0);
    double nw = 1e-6, nf = 0.01;
    kb_hyper_opts refit = {.max_evals = 10}, scratch = {.starts = 2};
    fit(warm, &nw, U, y, N, NULL, 0, &refit, 7);
    fit(full, &nf, U, y, N, NULL, 0, &scratch, 7);
    double tw[D + 2], tf[D + 2];
    for (size_t j = 0; j < D; j++)
        tw[j] = log(warm->lengthscales[j]), tf[j] = log(full->lengthscales[j]);
    tw[D] = log(warm->variance), tf[D] = log(full->variance);
    tw[D + 1] = log(nw), tf[D + 1] = log(nf);
    kb_rows rows = {U, y, N, NULL, 0};
    double pw = kb__hyper_objective(warm, &rows, tw, NULL, 1);
    double pf = kb__hyper_objective(full, &rows, tf, NULL, 1);
    if (pw < pf - 1.0)
        fail_msg("capped refit: log posterior %g, from scratch %g (lengthscale 0: %g, %g)", pw,
                 pf, warm->lengthscales[0], full->lengthscales[0]);
    kb_kernel_free(warm);
    kb_kernel_free(full);
    free(U);
    free(y);
}

static void fixed_values_held_and_fit_deterministic(void **state)
{
    (void)state;
    enum { N = 60 };
    const double true_l[D] = {0.2, 0.4, 3.0};
    double U[N * D], y[N];
    kb_rng rng;
    kb_rng_seed(&rng, 9);
    gp_draw(&rng, N, true_l, 0.05, U, y);
    double na = 0.1, nb = 0.1;
    kb_kernel *ka = tu_kernel(KB_KERNEL_MATERN52, D, 1.0);
    kb_kernel *kb = tu_kernel(KB_KERNEL_MATERN52, D, 1.0);
    const double *a = ka->lengthscales;
    kb_hyper_opts o = {.starts = 3};
    fit(ka, &na, U, y, N, NULL, 0, &o, 4);
    fit(kb, &nb, U, y, N, NULL, 0, &o, 4);
    assert_memory_equal(a, kb->lengthscales, D * sizeof *a);
    assert_true(na == nb && ka->variance == kb->variance);
    assert_true(a[0] != 1.0 && na != 0.1);
    /* The fit maximizes the posterior: no start of the optimizer found a better point. */
    double theta[D + 2] = {log(a[0]), log(a[1]), log(a[2]), log(ka->variance), log(na)};
    kb_rows rows = {U, y, N, NULL, 0};
    double best = kb__hyper_objective(ka, &rows, theta, NULL, 1);
    for (size_t j = 0; j < D + 2; j++)
        for (int s = -1; s <= 1; s += 2) {
            double t[D + 2];
            memcpy(t, theta, sizeof t);
            t[j] += s * 0.05;
            assert_true(kb__hyper_objective(ka, &rows, t, NULL, 1) <= best + 1e-6);
        }
    kb_hyper_opts hold = {.fix_lengthscales = 1, .fix_noise = 1};
    double nc = 0.01;
    kb_kernel *kc = tu_kernel(KB_KERNEL_MATERN52, D, 0.5);
    const double *c = kc->lengthscales;
    fit(kc, &nc, U, y, N, NULL, 0, &hold, 4);
    assert_true(c[0] == 0.5 && c[1] == 0.5 && c[2] == 0.5 && nc == 0.01);
    assert_true(kc->variance != 1.0);
    kb_error err;
    kb_kernel *lin = tu_kernel(KB_KERNEL_LINEAR, D, 0.5);
    assert_int_equal(kb__hyper_fit(lin, &nc, &rows, &o, &rng, &err), KB_EUNSUPPORTED);
    kb_kernel_free(ka);
    kb_kernel_free(kb);
    kb_kernel_free(kc);
    kb_kernel_free(lin);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(likelihood_matches_dense_and_gradient_matches_differences),
        cmocka_unit_test(repeated_inputs_give_the_likelihood_of_every_row),
        cmocka_unit_test(recovers_ard_lengthscales_and_noise),
        cmocka_unit_test(noise_recovered_from_repeats_of_one_arm),
        cmocka_unit_test(warm_refit_on_a_sample_matches_multistart),
        cmocka_unit_test(capped_refit_from_a_far_start_runs_on),
        cmocka_unit_test(fixed_values_held_and_fit_deterministic),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
