/*
 * test_ts.c - unit tests of the Thompson-sampling engines gp-ts and sgp-ts
 * (core/engines/gp_ts.c, sgp_ts.c, ts_common.c).
 *
 * Random quantities are checked statistically with fixed seeds. Every tolerance is
 * 5 standard errors of the estimate (false-alarm rate about 6e-7 per check under a
 * normal approximation, and the seeds are fixed, so the outcome is deterministic):
 *   - a mean of S samples: sd / sqrt(S);
 *   - a covariance of S Gaussian samples: sqrt((var_i var_j + cov_ij^2) / S);
 *   - a random-feature kernel estimate (mean of M i.i.d. products): the sample sd of
 *     the products / sqrt(M).
 * Exact quantities are checked against tu_exact_posterior (and a dense posterior
 * covariance written here, independently of the engines) with tight tolerances; sgp-ts
 * with fewer inducing points than data against tu_sparse_posterior (Titsias 2009) for
 * the inducing points it drew (kb__sgp_ts_inducing).
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

#include "kbandit.h"
#include "util/testutil.h"
#include "../../core/engines/ts.h"

enum { NOBS = 12, NTEST = 5, DIM = 2 };

/* Exact posterior covariance (n x n) at Xs given X (pairwise kernel, dense solve). */
static void exact_cov(const kb_kernel *k, const double *X, size_t n, double noise,
                      const double *Xs, size_t m, double *C)
{
    size_t d = kb_kernel_dim(k);
    double *K = malloc(n * n * sizeof *K), *B = malloc(n * m * sizeof *B);
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < n; j++)
            K[i * n + j] = kb_kernel_eval(k, X + i * d, X + j * d) + (i == j ? noise : 0);
    for (size_t i = 0; i < n; i++)
        for (size_t s = 0; s < m; s++)
            B[i * m + s] = kb_kernel_eval(k, X + i * d, Xs + s * d);
    assert_int_equal(LAPACKE_dpotrf(LAPACK_ROW_MAJOR, 'L', (int)n, K, (int)n), 0);
    /* L^{-1} B by forward substitution, so C = K_ss - (L^-1 B)^T (L^-1 B). */
    for (size_t s = 0; s < m; s++)
        for (size_t i = 0; i < n; i++) {
            double v = B[i * m + s];
            for (size_t j = 0; j < i; j++)
                v -= K[i * n + j] * B[j * m + s];
            B[i * m + s] = v / K[i * n + i];
        }
    for (size_t a = 0; a < m; a++)
        for (size_t b = 0; b < m; b++) {
            double v = kb_kernel_eval(k, Xs + a * d, Xs + b * d);
            for (size_t i = 0; i < n; i++)
                v -= B[i * m + a] * B[i * m + b];
            C[a * m + b] = v;
        }
    free(K);
    free(B);
}

/* An engine on a finite set of 40 random points in [0,1]^2, warm-started with n
 * observations X (returned, n x DIM) of a smooth function; raw input units, outputs
 * scaled by `out` ("none": the engine's posterior is tu_exact_posterior's). */
/* One ask, abandoned: the model takes the observations told since the last ask there
 * (the hyperparameter refit, gp-ts's pool redraw, sgp-ts's whole refresh wait for it). */
static void sync_model(kb_engine *e)
{
    kb_point p;
    kb_ask_result res;
    kb_error err;
    assert_int_equal(kb_engine_ask(e, 1, &p, &res, &err), 0);
    assert_int_equal(res.n, 1);
    assert_int_equal(kb_engine_abandon(e, p.handle, &err), 0);
}

static kb_engine *warm_engine(const char *name, const char *const *opts, const double *vals,
                              const char *out, const char *hyper, size_t n, double *X,
                              double *y)
{
    kb_error err;
    kb_rng rng;
    kb_rng_seed(&rng, 5);
    double *cand = tu_uniform_matrix(&rng, 40, DIM, 0, 1);
    kb_space *sp = kb_space_new_finite(cand, 40, DIM, &err);
    kb_config *cfg = kb_config_new(name, &err);
    assert_non_null(cfg);
    assert_int_equal(kb_config_set_string(cfg, "input_scaling", "none", &err), 0);
    assert_int_equal(kb_config_set_string(cfg, "output_scaling", out, &err), 0);
    assert_int_equal(kb_config_set_number(cfg, "lengthscale", 0.4, &err), 0);
    assert_int_equal(kb_config_set_number(cfg, "lambda", 0.05, &err), 0);
    assert_int_equal(kb_config_set_string(cfg, "hyperparameters", hyper, &err), 0);
    for (size_t i = 0; opts[i]; i++)
        assert_int_equal(kb_config_set_number(cfg, opts[i], vals[i], &err), 0);
    kb_engine *e = kb_engine_create(cfg, sp, &err);
    assert_non_null(e);
    for (size_t i = 0; i < n; i++) {
        X[i * DIM] = kb_rng_uniform(&rng);
        X[i * DIM + 1] = kb_rng_uniform(&rng);
        y[i] = sin(4 * X[i * DIM]) + cos(3 * X[i * DIM + 1]);
        assert_int_equal(kb_engine_observe(e, X + i * DIM, y[i], &err), 0);
        sync_model(e); /* the model grows with the data, as a worker loop's does */
    }
    free(cand);
    kb_config_free(cfg);
    kb_space_free(sp);
    return e;
}

/* The reference kernel: the test's lengthscale and lambda are set (held fixed); the kernel
 * variance is what the engine uses now (gp-ts and sgp-ts fit it). */
static kb_kernel *engine_kernel(const kb_engine *e)
{
    kb_hyperparameters hp;
    kb_engine_hyperparameters(e, &hp);
    assert_true(hp.noise == 0.05 && hp.lengthscales[0] == 0.4);
    kb_kernel *k = tu_kernel(KB_KERNEL_RBF, DIM, 0.4);
    assert_int_equal(kb_kernel_set_variance(k, hp.kernel_variance, NULL), KB_OK);
    return k;
}

/* Empirical mean and covariance of S samples (S x m) against mean/cov, 5 SE each. */
static void check_moments(const double *F, size_t S, size_t m, const double *mean,
                          const double *cov)
{
    double emean[NTEST] = {0}, ecov[NTEST * NTEST] = {0};
    for (size_t s = 0; s < S; s++)
        for (size_t a = 0; a < m; a++)
            emean[a] += F[s * m + a] / (double)S;
    for (size_t s = 0; s < S; s++)
        for (size_t a = 0; a < m; a++)
            for (size_t b = 0; b < m; b++)
                ecov[a * m + b] +=
                    (F[s * m + a] - emean[a]) * (F[s * m + b] - emean[b]) / (double)(S - 1);
    for (size_t a = 0; a < m; a++) {
        assert_true(fabs(emean[a] - mean[a]) < 5 * sqrt(cov[a * m + a] / (double)S));
        for (size_t b = 0; b < m; b++) {
            double c = cov[a * m + b];
            double se = sqrt((cov[a * m + a] * cov[b * m + b] + c * c) / (double)S);
            assert_true(fabs(ecov[a * m + b] - c) < 5 * se);
        }
    }
}

static void test_points(double *U)
{
    kb_rng rng;
    kb_rng_seed(&rng, 99);
    for (size_t i = 0; i < NTEST * DIM; i++)
        U[i] = kb_rng_uniform(&rng);
}

/* ------------------------------------------------------------------ tests */

static void random_features_match_kernel(void **state)
{
    (void)state;
    kb_kernel_kind kinds[] = {KB_KERNEL_RBF, KB_KERNEL_MATERN32, KB_KERNEL_MATERN12};
    enum { M = 100000, NP = 5, D = 3 };
    kb_rng rng;
    kb_rng_seed(&rng, 3);
    double *X = tu_uniform_matrix(&rng, NP, D, 0, 1);
    double *Phi = malloc((size_t)NP * M * sizeof *Phi);
    size_t choices[D] = {0, 4, 0}; /* odd t: coordinate 1 is a categorical of 4 choices */
    for (size_t a = 0; a < NP; a++)
        X[a * D + 1] = ((double)(a % 3) + 0.3) / 4.0; /* points 0, 3 and 1, 4 share one */
    for (size_t t = 0; t < 2 * sizeof kinds / sizeof kinds[0]; t++) {
        double ls[D] = {0.6, 0.6, 1.5};
        kb_kernel *k = tu_kernel_with(kinds[t / 2], D, 1.3, ls);
        assert_int_equal(kb_kernel_set_choices(k, t % 2 ? choices : NULL, NULL), KB_OK);
        ts_features f;
        assert_int_equal(kb__ts_features_draw(&f, k, &rng, M, NULL), 0);
        kb__ts_features_eval(&f, X, NP, Phi);
        for (size_t a = 0; a < NP; a++)
            for (size_t b = a; b < NP; b++) {
                double s = 0, s2 = 0;
                for (size_t j = 0; j < M; j++) {
                    double p = (double)M * Phi[a * M + j] * Phi[b * M + j];
                    s += p;
                    s2 += p * p;
                }
                double mean = s / M, sd = sqrt(s2 / M - mean * mean);
                double exact = kb_kernel_eval(k, X + a * D, X + b * D);
                assert_true(fabs(mean - exact) < 5 * sd / sqrt((double)M));
            }
        kb__ts_features_free(&f);
        kb_kernel_free(k);
    }
    kb_kernel *lin = tu_kernel(KB_KERNEL_LINEAR, D, 1.0);
    ts_features f;
    kb_error err;
    assert_int_equal(kb__ts_features_draw(&f, lin, &rng, 10, &err), KB_EUNSUPPORTED);
    assert_string_equal(err.field, "kernel");
    kb_kernel_free(lin);
    free(Phi);
    free(X);
}

/* Each feature is its definition, amp cos(omega . x + b), computed here with the scalar
 * cos: the vectorized cosine (ts_common.c, cos_row) to a few ulp, an odd last feature
 * included, also at arguments in the thousands (lengthscale 1e-3). */
static void features_are_their_definition(void **state)
{
    (void)state;
    enum { M = 7, NP = 5, D = 3 };
    kb_rng rng;
    kb_rng_seed(&rng, 17);
    double *X = tu_uniform_matrix(&rng, NP, D, 0, 1), Phi[NP * M];
    for (int t = 0; t < 2; t++) {
        double ls[D] = {t ? 1e-3 : 0.4, 0.7, 2.0};
        kb_kernel *k = tu_kernel_with(KB_KERNEL_RBF, D, 2.0, ls);
        ts_features f;
        assert_int_equal(kb__ts_features_draw(&f, k, &rng, M, NULL), 0);
        kb__ts_features_eval(&f, X, NP, Phi);
        double top = 0.0;
        for (size_t a = 0; a < NP; a++)
            for (size_t j = 0; j < M; j++) {
                double arg = f.b[j];
                for (size_t c = 0; c < D; c++)
                    arg += f.omega[j * D + c] * X[a * D + c];
                top = fmax(top, fabs(arg));
                double want = f.amp * cos(arg);
                /* the argument itself rounds differently in dgemm: ~|arg| eps */
                assert_true(fabs(Phi[a * M + j] - want) <= f.amp * 1e-15 * (8.0 + fabs(arg)));
            }
        assert_true(t == 0 || top > 1000.0);
        kb__ts_features_free(&f);
        kb_kernel_free(k);
    }
    free(X);
}

static void gp_ts_samples_have_exact_posterior(void **state)
{
    (void)state;
    /* B = 1, R = 0, v_scale = 1: v_t = 1, the plain posterior. */
    const char *const opts[] = {"B", "R", "v_scale", NULL};
    const double vals[] = {1, 0, 1};
    double X[NOBS * DIM], y[NOBS], U[NTEST * DIM], mean[NTEST], var[NTEST], cov[NTEST * NTEST];
    kb_engine *e = warm_engine("gp-ts", opts, vals, "none", "fit", NOBS, X, y);
    test_points(U);
    kb_kernel *k = engine_kernel(e);
    kb_hyperparameters hp;
    kb_engine_hyperparameters(e, &hp);
    assert_true(hp.fits > 0 && hp.kernel_variance != 1.0); /* the fitted path is covered */
    assert_int_equal(tu_exact_posterior(k, X, y, NOBS, 0.05, U, NTEST, mean, var), 0);
    exact_cov(k, X, NOBS, 0.05, U, NTEST, cov);

    double pm[NTEST], psd[NTEST], pvar[NTEST];
    kb_error err;
    assert_int_equal(kb_engine_posterior(e, U, NTEST, pm, psd, &err), 0);
    for (size_t i = 0; i < NTEST; i++)
        pvar[i] = psd[i] * psd[i];
    assert_true(tu_max_rel_err(pm, mean, NTEST, 1e-3) < 1e-8);
    assert_true(tu_max_rel_err(pvar, var, NTEST, 1e-3) < 1e-7);

    enum { S = 20000 };
    double *F = malloc(S * NTEST * sizeof *F);
    for (size_t s = 0; s < S; s++)
        assert_int_equal(kb__gp_ts_draw(e, U, NTEST, F + s * NTEST, &err), 0);
    check_moments(F, S, NTEST, mean, cov);
    free(F);
    kb_kernel_free(k);
    kb_engine_free(e);
}

/* sgp-ts's posterior at the NTEST points U against mean (relative tol_mean) and the
 * diagonal of cov (tol_var), and the moments of 4000 of its samples against mean and cov.
 * The samples use fresh features each: the sample covariance is linear in the feature
 * kernel, whose expectation is k, so the moments are unbiased for the model's posterior. */
static void check_sgp_ts(kb_engine *e, const double *U, const double *mean, const double *cov,
                         double tol_mean, double tol_var)
{
    double pm[NTEST], psd[NTEST], pvar[NTEST], var[NTEST];
    kb_error err;
    assert_int_equal(kb_engine_posterior(e, U, NTEST, pm, psd, &err), 0);
    for (size_t i = 0; i < NTEST; i++) {
        pvar[i] = psd[i] * psd[i];
        var[i] = cov[i * NTEST + i];
    }
    assert_true(tu_max_rel_err(pm, mean, NTEST, 1e-3) < tol_mean);
    assert_true(tu_max_rel_err(pvar, var, NTEST, 1e-3) < tol_var);
    enum { S = 4000 };
    double *F = malloc(S * NTEST * sizeof *F);
    for (size_t s = 0; s < S; s++)
        assert_int_equal(kb__sgp_ts_draw(e, U, NTEST, 1, F + s * NTEST, &err), 0);
    check_moments(F, S, NTEST, mean, cov);
    free(F);
}

static void sgp_ts_samples_match_exact_posterior(void **state)
{
    (void)state;
    /* q huge: every observed point is an inducing point, so the sparse posterior is the
     * exact one; B = R = 0, alpha_scale = 1: alpha_t = 1. */
    const char *const opts[] = {"q", "B", "R", "alpha_scale", "features", NULL};
    const double vals[] = {1e9, 0, 0, 1, 1000};
    double X[NOBS * DIM], y[NOBS], U[NTEST * DIM], mean[NTEST], var[NTEST], cov[NTEST * NTEST];
    kb_engine *e = warm_engine("sgp-ts", opts, vals, "none", "fit", NOBS, X, y);
    assert_int_equal(tu_stat(e, "dict_size"), NOBS);
    test_points(U);
    kb_kernel *k = engine_kernel(e);
    kb_hyperparameters hp;
    kb_engine_hyperparameters(e, &hp);
    assert_true(hp.fits > 0 && hp.kernel_variance != 1.0); /* the fitted path is covered */
    assert_int_equal(tu_exact_posterior(k, X, y, NOBS, 0.05, U, NTEST, mean, var), 0);
    exact_cov(k, X, NOBS, 0.05, U, NTEST, cov);
    check_sgp_ts(e, U, mean, cov, 1e-7, 1e-6);
    kb_kernel_free(k);
    kb_engine_free(e);
}

/* Fewer inducing points than data (q = 1, 60 observations, 23 inducing): the posterior
 * and the samples' moments (fresh features per sample, as above) are Titsias' sparse
 * posterior (2009, eq. (6); seed 001 section 3.3) for the inducing points the engine drew
 * (read back), computed densely by tu_sparse_posterior; it differs from the exact one. */
static void sgp_ts_sparse_posterior_matches_titsias(void **state)
{
    (void)state;
    enum { N = 60 };
    const char *const opts[] = {"q", "B", "R", "alpha_scale", "features", NULL};
    const double vals[] = {1, 0, 0, 1, 1000};
    double X[N * DIM], y[N], U[NTEST * DIM], mean[NTEST], cov[NTEST * NTEST];
    double emean[NTEST], evar[NTEST], var[NTEST];
    kb_engine *e = warm_engine("sgp-ts", opts, vals, "none", "fit", N, X, y);
    size_t m;
    const double *Z = kb__sgp_ts_inducing(e, &m);
    assert_true(m > 0 && m <= N / 2);
    test_points(U);
    kb_kernel *k = engine_kernel(e);
    assert_int_equal(tu_sparse_posterior(k, Z, m, X, y, N, 0.05, U, NTEST, mean, cov), 0);
    assert_int_equal(tu_exact_posterior(k, X, y, N, 0.05, U, NTEST, emean, evar), 0);
    for (size_t i = 0; i < NTEST; i++)
        var[i] = cov[i * NTEST + i];
    assert_true(tu_max_rel_err(var, evar, NTEST, 1e-3) > 1e-2); /* sparse is not exact */
    check_sgp_ts(e, U, mean, cov, 1e-7, 1e-7); /* measured 1e-9 and 4e-9 */
    kb_kernel_free(k);
    kb_engine_free(e);
}

/* A warm start of 1,500 observations in one run: sgp-ts grows its model in stages (256,
 * 512, 1,024, 1,500 observations, each Z drawn under the previous stage's model:
 * sgp_ts.c, grow_model), where one stage from the prior kept every point (the prior
 * variance over lambda = 0.05 makes every keep probability 1). The inducing set stays
 * sparse, the model is Titsias' posterior for it on all 1,500 observations, and that is
 * close to the exact GP. */
static void a_warm_start_grows_the_sparse_model_in_stages(void **state)
{
    (void)state;
    enum { N = 1500 };
    const char *const opts[] = {"q", "B", "R", "alpha_scale", "features", NULL};
    const double vals[] = {1, 0, 0, 1, 1000};
    double *X = malloc(N * DIM * sizeof *X), *y = malloc(N * sizeof *y);
    double U[NTEST * DIM], mean[NTEST], cov[NTEST * NTEST], emean[NTEST], evar[NTEST];
    kb_error err;
    kb_engine *e = warm_engine("sgp-ts", opts, vals, "none", "fixed", 0, X, y);
    kb_rng rng;
    kb_rng_seed(&rng, 23);
    for (size_t i = 0; i < N; i++) {
        X[i * DIM] = kb_rng_uniform(&rng);
        X[i * DIM + 1] = kb_rng_uniform(&rng);
        y[i] = sin(4 * X[i * DIM]) + cos(3 * X[i * DIM + 1]) + 0.2 * kb_rng_normal(&rng);
        assert_int_equal(kb_engine_observe(e, X + i * DIM, y[i], &err), 0);
    }
    sync_model(e);
    size_t m;
    const double *Z = kb__sgp_ts_inducing(e, &m);
    assert_true(m > 0 && m < N / 10);
    test_points(U);
    kb_kernel *k = engine_kernel(e);
    assert_int_equal(tu_sparse_posterior(k, Z, m, X, y, N, 0.05, U, NTEST, mean, cov), 0);
    check_sgp_ts(e, U, mean, cov, 1e-6, 1e-5); /* measured 2e-7 and 6e-7 */
    assert_int_equal(tu_exact_posterior(k, X, y, N, 0.05, U, NTEST, emean, evar), 0);
    for (size_t i = 0; i < NTEST; i++) { /* m = 34, measured: mean 0.02 sd off, sd 1.5% */
        assert_true(fabs(mean[i] - emean[i]) <= 0.1 * sqrt(evar[i]));
        assert_true(fabs(cov[i * NTEST + i] / evar[i] - 1.0) <= 0.1);
    }
    kb_kernel_free(k);
    kb_engine_free(e);
    free(X);
    free(y);
}

/* Outputs standardized over distinct points (kb__output_stats): after a repeated
 * observe and more tells than candidates (so arms repeat), the posterior is the exact GP
 * on every observation with y standardized by tu_distinct_stats, and differs from the
 * per-evaluation standardization. */
static void check_distinct_standardization(const char *name, const char *const *opts,
                                           const double *vals, double tol)
{
    enum { STEPS = 60, MAXO = NOBS + 1 + STEPS };
    double X[MAXO * DIM], y[MAXO], ys[MAXO], U[NTEST * DIM], mean[NTEST], var[NTEST];
    double pm[NTEST], psd[NTEST], m, sd;
    kb_error err;
    kb_engine *e = warm_engine(name, opts, vals, "standardize", "fit", NOBS, X, y);
    size_t n = NOBS;
    memcpy(X + n * DIM, X, DIM * sizeof *X);
    y[n] = y[0] + 0.5;
    assert_int_equal(kb_engine_observe(e, X + n * DIM, y[n], &err), 0);
    n++;
    for (int s = 0; s < STEPS; s++, n++) {
        kb_point p;
        kb_ask_result res;
        assert_int_equal(kb_engine_ask(e, 1, &p, &res, &err), 0);
        assert_int_equal(res.n, 1);
        memcpy(X + n * DIM, p.x, DIM * sizeof *X);
        y[n] = sin(4 * p.x[0]) + cos(3 * p.x[1]) + 0.01 * (s % 3 - 1);
        assert_int_equal(kb_engine_tell(e, p.handle, y[n], &err), 0);
    }
    sync_model(e);
    test_points(U);
    kb_kernel *k = engine_kernel(e);
    assert_int_equal(kb_engine_posterior(e, U, NTEST, pm, psd, &err), 0);
    tu_distinct_stats(X, y, n, DIM, &m, &sd);
    for (size_t i = 0; i < n; i++)
        ys[i] = (y[i] - m) / sd;
    assert_int_equal(tu_exact_posterior(k, X, ys, n, 0.05, U, NTEST, mean, var), 0);
    assert_true(tu_max_rel_err(pm, mean, NTEST, 1e-3) < tol);
    /* per evaluation: every row its own point */
    double pe_m = 0.0, pe_s2 = 0.0;
    for (size_t i = 0; i < n; i++)
        pe_m += y[i] / (double)n;
    for (size_t i = 0; i < n; i++)
        pe_s2 += (y[i] - pe_m) * (y[i] - pe_m);
    for (size_t i = 0; i < n; i++)
        ys[i] = (y[i] - pe_m) / sqrt(pe_s2 / (double)(n - 1));
    assert_int_equal(tu_exact_posterior(k, X, ys, n, 0.05, U, NTEST, mean, var), 0);
    assert_true(tu_max_rel_err(pm, mean, NTEST, 1e-3) > 1e-3); /* the test discriminates */
    kb_kernel_free(k);
    kb_engine_free(e);
}

static void outputs_standardized_over_distinct_points(void **state)
{
    (void)state;
    const char *const gp_opts[] = {"B", "R", "v_scale", NULL};
    const double gp_vals[] = {1, 0, 1};
    check_distinct_standardization("gp-ts", gp_opts, gp_vals, 1e-8);
    /* q huge: every distinct observed point is inducing, the sparse posterior exact */
    const char *const sgp_opts[] = {"q", "B", "R", "alpha_scale", "features", NULL};
    const double sgp_vals[] = {1e9, 0, 0, 1, 1000};
    check_distinct_standardization("sgp-ts", sgp_opts, sgp_vals, 1e-7);
}

/* ------------------------------------------------- engine-level behaviour */

static double objective(const double *x, size_t d)
{
    double s = 0;
    for (size_t j = 0; j < d; j++)
        s -= (x[j] - 0.3) * (x[j] - 0.3);
    return s;
}

/* An engine on 300 random points of [0,1]^3 (or a box with a pool of 128). `scale`
 * multiplies v_t / alpha_t (0: the default). */
static kb_engine *make(const char *name, int box, uint64_t seed, const char *kernel,
                       double scale)
{
    kb_error err;
    kb_rng rng;
    kb_rng_seed(&rng, 17);
    kb_space *sp;
    if (box) {
        sp = kb_space_new_box(3, 128, &err);
    } else {
        double *cand = tu_uniform_matrix(&rng, 300, 3, 0, 1);
        sp = kb_space_new_finite(cand, 300, 3, &err);
        free(cand);
    }
    kb_config *cfg = kb_config_new(name, &err);
    if (!box) /* the paper's bandit: the best arm is exploited by repeats, noise or not */
        kb_config_set_string(cfg, "repeats", "allow", &err);
    kb_config_set_number(cfg, "seed", (double)seed, &err);
    kb_config_set_number(cfg, "lengthscale", 0.3, &err);
    kb_config_set_string(cfg, "kernel", kernel, &err);
    kb_config_set_number(cfg, "pool_refresh", 7, &err);
    int gp = strcmp(name, "gp-ts") == 0;
    if (gp)
        kb_config_set_number(cfg, "subset_size", 50, &err); /* exercise screening */
    else
        kb_config_set_number(cfg, "features", 200, &err);
    if (scale > 0)
        kb_config_set_number(cfg, gp ? "v_scale" : "alpha_scale", scale, &err);
    kb_engine *e = kb_engine_create(cfg, sp, &err);
    kb_config_free(cfg);
    kb_space_free(sp);
    return e;
}

/* n rounds of ask(2) then tell both; indices into idx. */
static void run(kb_engine *e, size_t n, size_t *idx)
{
    kb_error err;
    for (size_t t = 0; t < n; t++) {
        kb_point p[2];
        kb_ask_result res;
        assert_int_equal(kb_engine_ask(e, 2, p, &res, &err), 0);
        assert_int_equal(res.n, 2);
        for (int i = 0; i < 2; i++) {
            idx[2 * t + i] = p[i].index;
            assert_int_equal(kb_engine_tell(e, p[i].handle, objective(p[i].x, 3), &err), 0);
        }
    }
}

static void deterministic_and_restorable(void **state)
{
    (void)state;
    const char *names[] = {"gp-ts", "sgp-ts"};
    for (int box = 0; box < 2; box++)
        for (int k = 0; k < 2; k++) {
            const char *kern = k ? "matern52" : "rbf";
            size_t a[80], b[80], c[80];
            kb_engine *e1 = make(names[k], box, 4, kern, 0), *e2 = make(names[k], box, 4, kern, 0);
            assert_non_null(e1);
            run(e1, 20, a);
            run(e2, 20, b);
            assert_memory_equal(a, b, sizeof(size_t) * 40);
            unsigned char *bytes;
            size_t len;
            kb_error err;
            assert_int_equal(kb_engine_snapshot(e2, &bytes, &len, &err), 0);
            kb_engine *r = kb_engine_restore(bytes, len, &err);
            assert_non_null(r);
            run(e1, 20, a + 40);
            run(r, 20, c + 40);
            assert_memory_equal(a + 40, c + 40, sizeof(size_t) * 40);
            /* gp-ts refreshes at every tell, sgp-ts at every ask after one (not the first) */
            assert_int_equal(tu_stat(e1, "epoch"), k ? 39 : 80);
            assert_int_equal(tu_stat(r, "epoch"), k ? 39 : 80);
            if (k) { /* sgp-ts: gp-ts has no dictionary */
                double m = tu_stat(e1, "dict_size");
                assert_true(m == tu_stat(r, "dict_size") && m > 0 && m <= 80);
            }
            /* The same engine with another seed makes other choices. */
            kb_engine *o = make(names[k], box, 5, kern, 0);
            run(o, 20, b);
            assert_true(memcmp(a, b, sizeof(size_t) * 40) != 0);
            free(bytes);
            kb_engine_free(e1);
            kb_engine_free(e2);
            kb_engine_free(r);
            kb_engine_free(o);
        }
}

/* gp-ts with refresh_every = 2, between refits: a tell waiting for its pair is in the
 * output scaling (kb__output_stats, every observation) but not in the factor. The ask
 * after a refresh solves beta again if such a tell moved the scaling since the refresh
 * solved it: the posterior is the exact GP on the rows in the factor, scaled by the
 * statistics of all observations. */
static void an_ask_rescales_beta_to_waiting_tells(void **state)
{
    (void)state;
    enum { W = 40, N = W + 3 }; /* refits at 34 and 40 tells, the next at 48 */
    const char *const opts[] = {"refresh_every", "kernel_variance", "B", "R", "v_scale", NULL};
    const double vals[] = {2, 1, 1, 0, 1};
    double X[N * DIM], y[N], ys[N], U[NTEST * DIM];
    double mean[NTEST], var[NTEST], pm[NTEST], psd[NTEST], m, sd;
    kb_error err;
    kb_hyperparameters hp;
    kb_engine *e = warm_engine("gp-ts", opts, vals, "standardize", "fit", W, X, y);
    kb_engine_hyperparameters(e, &hp);
    uint64_t fits = hp.fits;
    for (size_t i = W; i < N; i++) { /* the factor takes the first two, not the last */
        X[i * DIM] = 0.3 + 0.2 * (double)(i - W);
        X[i * DIM + 1] = 0.5;
        y[i] = i + 1 < N ? 1.0 : 6.0; /* the last far above the others: the scaling moves */
        assert_int_equal(kb_engine_observe(e, X + i * DIM, y[i], &err), 0);
    }
    sync_model(e);
    kb_engine_hyperparameters(e, &hp);
    assert_int_equal(hp.fits, fits);
    assert_int_equal(tu_stat(e, "epoch"), N / 2);
    test_points(U);
    kb_kernel *k = engine_kernel(e);
    assert_int_equal(kb_engine_posterior(e, U, NTEST, pm, psd, &err), 0);
    tu_distinct_stats(X, y, N, DIM, &m, &sd);
    for (size_t i = 0; i < N - 1; i++)
        ys[i] = (y[i] - m) / sd;
    assert_int_equal(tu_exact_posterior(k, X, ys, N - 1, 0.05, U, NTEST, mean, var), 0);
    assert_true(tu_max_rel_err(pm, mean, NTEST, 1e-3) < 1e-8);
    kb_kernel_free(k);
    kb_engine_free(e);
}

/* A run of observes (a warm start) is appended at the next op, in blocks from
 * KB_BLOCK_ROWS_MIN rows on (gp_ts.c, append_rows): the posterior is then the exact GP
 * on every observation, and a joint sample (whose spread v_t reads the information gain
 * off the factor: the theory's width, hyperparameters fixed) equals, to rounding, that of an engine which took the same
 * observations one at a time. 600 rows: blocks of 256, 256 and 88. */
static void a_run_of_observes_is_the_exact_gp(void **state)
{
    (void)state;
    enum { RUN = 600 };
    const char *const opts[] = {"kernel_variance", "R", NULL};
    const double vals[] = {1, 0.5};
    double *X = malloc(RUN * DIM * sizeof *X), *y = malloc(RUN * sizeof *y);
    double *ys = malloc(RUN * sizeof *ys), U[NTEST * DIM], mean[NTEST], var[NTEST];
    double pm[NTEST], psd[NTEST], m, sd, f_run[NTEST], f_rows[NTEST];
    kb_error err;
    kb_engine *run = warm_engine("gp-ts", opts, vals, "standardize", "fixed", 0, X, y);
    kb_engine *rows = warm_engine("gp-ts", opts, vals, "standardize", "fixed", 0, X, y);
    kb_rng rng;
    kb_rng_seed(&rng, 17);
    test_points(U);
    for (size_t i = 0; i < RUN; i++) {
        X[i * DIM] = kb_rng_uniform(&rng);
        X[i * DIM + 1] = kb_rng_uniform(&rng);
        y[i] = sin(4 * X[i * DIM]) + cos(3 * X[i * DIM + 1]) + 0.1 * kb_rng_normal(&rng);
        assert_int_equal(kb_engine_observe(run, X + i * DIM, y[i], &err), 0);
        assert_int_equal(kb_engine_observe(rows, X + i * DIM, y[i], &err), 0);
        assert_int_equal(kb_engine_posterior(rows, U, NTEST, pm, psd, &err), 0);
    }
    assert_int_equal(kb_engine_posterior(run, U, NTEST, pm, psd, &err), 0);
    kb_kernel *k = engine_kernel(run);
    tu_distinct_stats(X, y, RUN, DIM, &m, &sd);
    for (size_t i = 0; i < RUN; i++)
        ys[i] = (y[i] - m) / sd;
    assert_int_equal(tu_exact_posterior(k, X, ys, RUN, 0.05, U, NTEST, mean, var), 0);
    assert_true(tu_max_rel_err(pm, mean, NTEST, 1e-3) < 1e-8);
    for (size_t j = 0; j < NTEST; j++)
        var[j] = sqrt(var[j] > 0 ? var[j] : 0);
    assert_true(tu_max_rel_err(psd, var, NTEST, 1e-3) < 1e-8);
    assert_int_equal(kb__gp_ts_draw(run, U, NTEST, f_run, &err), 0);
    assert_int_equal(kb__gp_ts_draw(rows, U, NTEST, f_rows, &err), 0);
    assert_true(tu_max_rel_err(f_run, f_rows, NTEST, 1e-3) < 1e-6);
    kb_kernel_free(k);
    kb_engine_free(run);
    kb_engine_free(rows);
    free(X);
    free(y);
    free(ys);
}

/* gp-ts caches observations x candidates values up to KB_MAX_POINTS: on 2^18
 * candidates, 256 observations. An observe past that is refused at once with KB_ERANGE
 * (field "engine") and not kept, though observes only record their point: accepted, it
 * would have failed every later ask of the study. */
static void gp_ts_refuses_an_observe_past_its_cache(void **state)
{
    (void)state;
    enum { A = 1 << 18 };
    kb_rng rng;
    kb_rng_seed(&rng, 29);
    kb_error err;
    double *cand = tu_uniform_matrix(&rng, A, DIM, 0, 1);
    kb_space *sp = kb_space_new_finite(cand, A, DIM, &err);
    kb_config *cfg = kb_config_new("gp-ts", &err);
    assert_non_null(sp);
    assert_non_null(cfg);
    kb_engine *e = kb_engine_create(cfg, sp, &err);
    assert_non_null(e);
    size_t cap = KB_MAX_POINTS / A;
    for (size_t i = 0; i <= cap; i++) {
        int rc = kb_engine_observe(e, cand + i * DIM, (double)i, &err);
        assert_int_equal(rc, i < cap ? KB_OK : KB_ERANGE);
    }
    assert_string_equal(err.field, "engine");
    kb_stats st = {.size = sizeof st};
    kb_engine_stats(e, &st, NULL);
    assert_int_equal(st.observed, cap);
    kb_engine_free(e);
    kb_config_free(cfg);
    kb_space_free(sp);
    free(cand);
}

/* A batch of tells records the data (gp-ts also appends it to its factor): the
 * hyperparameter refit and the box pool's redraw they make due, and sgp-ts's whole
 * refresh, come once, at the next ask. */
static void batch_tells_wait_for_the_next_ask(void **state)
{
    (void)state;
    const char *names[] = {"gp-ts", "sgp-ts"};
    for (int k = 0; k < 2; k++) {
        kb_engine *e = make(names[k], 1, 3, "rbf", 0);
        size_t idx[40];
        run(e, 20, idx);
        kb_point p[30];
        kb_ask_result res;
        kb_error err;
        assert_int_equal(kb_engine_ask(e, 30, p, &res, &err), 0);
        assert_int_equal(res.n, 30);
        kb_hyperparameters hp;
        kb_engine_hyperparameters(e, &hp);
        uint64_t fits = hp.fits, gen = e->space->generation;
        double epoch = tu_stat(e, "epoch");
        for (int i = 0; i < 30; i++)
            assert_int_equal(kb_engine_tell(e, p[i].handle, objective(p[i].x, 3), &err), 0);
        kb_engine_hyperparameters(e, &hp);
        assert_int_equal(hp.fits, fits);
        assert_int_equal(e->space->generation, gen);
        assert_int_equal(tu_stat(e, "epoch"), epoch + (k ? 0 : 30));
        assert_int_equal(kb_engine_ask(e, 1, p, &res, &err), 0);
        kb_engine_hyperparameters(e, &hp);
        assert_int_equal(hp.fits, fits + 1);          /* 70 tells > 1.2 x 40: due */
        assert_int_equal(e->space->generation, gen + 1); /* 30 tells > pool_refresh = 7 */
        assert_int_equal(tu_stat(e, "epoch"), epoch + 1 + (k ? 0 : 29));
        kb_engine_free(e);
    }
}

static void finds_the_optimum_region(void **state)
{
    (void)state;
    const char *names[] = {"gp-ts", "sgp-ts"};
    for (int k = 0; k < 2; k++) {
        /* The theoretical scales (about 6 to 12 here) still explore at t = 120 on this
         * easy problem; a tenth of them exploits by then. */
        kb_engine *e = make(names[k], 0, 1, "rbf", 0.1);
        size_t idx[120];
        run(e, 60, idx);
        /* The last 20 picks average near the best of the 300 candidates. */
        kb_point pt;
        kb_trial_state ts;
        double best = -1e9, late = 0;
        for (uint64_t h = 1; h <= 120; h++) {
            assert_int_equal(kb_engine_trial(e, h, &pt, &ts), 0);
            double v = objective(pt.x, 3);
            best = v > best ? v : best;
            if (h > 100)
                late += v / 20;
        }
        assert_true(late > best - 0.05);
        kb_engine_free(e);
    }
}

static void refresh_every_and_exhaustion(void **state)
{
    (void)state;
    const char *names[] = {"gp-ts", "sgp-ts"};
    for (int k = 0; k < 2; k++) {
        kb_error err;
        double rows[6] = {0, 1, 2, 3, 4, 5};
        kb_space *sp = kb_space_new_finite(rows, 6, 1, &err);
        kb_config *cfg = kb_config_new(names[k], &err);
        assert_int_equal(kb_config_set_string(cfg, "repeats", "never", &err), 0);
        assert_int_equal(kb_config_set_number(cfg, "refresh_every", 3, &err), 0);
        kb_engine *e = kb_engine_create(cfg, sp, &err);
        kb_point p[6];
        kb_ask_result res;
        assert_int_equal(kb_engine_ask(e, 6, p, &res, &err), 0);
        assert_int_equal(res.n, 6);
        for (int i = 0; i < 6; i++)
            assert_int_equal(kb_engine_tell(e, p[i].handle, p[i].x[0], &err), 0);
        /* gp-ts refreshed after the 3rd and 6th tells; sgp-ts waits for an ask */
        assert_int_equal(tu_stat(e, "epoch"), k ? 0 : 2);
        assert_int_equal(kb_engine_ask(e, 1, p, &res, &err), 0);
        assert_int_equal(res.n, 0);
        assert_int_equal(res.status, KB_ASK_EXHAUSTED);
        assert_int_equal(tu_stat(e, "epoch"), k ? 0 : 2); /* an empty ask changes nothing */
        kb_engine_free(e);
        kb_config_free(cfg);
        kb_space_free(sp);
    }
}

/* sgp-ts refreshes its model after every observation up to 1,024 of them, then once
 * they grew by a sixteenth since the last refresh (a refresh per tell cost 166 ms per
 * round trip at 1,500 noise-free trials). Fixed hyperparameters and a large lambda keep
 * the inducing set, and so the test, small. */
static void sgp_ts_refreshes_by_growth_past_1024(void **state)
{
    (void)state;
    kb_error err;
    kb_space *box = kb_space_new_box(2, 64, &err);
    kb_config *cfg = kb_config_new("sgp-ts", &err);
    assert_int_equal(kb_config_set_string(cfg, "hyperparameters", "fixed", &err), 0);
    assert_int_equal(kb_config_set_number(cfg, "lambda", 1.0, &err), 0);
    kb_engine *e = kb_engine_create(cfg, box, &err);
    assert_non_null(e);
    kb_rng rng;
    kb_rng_seed(&rng, 6);
    while (e->n_obs < 1100) { /* an ask after each observation: refreshes come at asks */
        double x[2] = {kb_rng_uniform(&rng), kb_rng_uniform(&rng)};
        assert_int_equal(kb_engine_observe(e, x, sin(6 * x[0]) + x[1], &err), 0);
        sync_model(e);
        if (e->n_obs <= 1024)
            assert_int_equal(tu_stat(e, "epoch"), e->n_obs);
    }
    /* 1,024 refreshes, then one at 1,025 + 64 = 1,089 */
    assert_int_equal(tu_stat(e, "epoch"), 1025);
    for (int t = 0; t < 200; t++) {
        kb_point p;
        kb_ask_result res;
        assert_int_equal(kb_engine_ask(e, 1, &p, &res, &err), 0);
        assert_int_equal(res.n, 1);
        assert_int_equal(kb_engine_tell(e, p.handle, sin(6 * p.x[0]) + p.x[1], &err), 0);
    }
    /* 1,089 + 69 = 1,158, + 73 = 1,231, + 77 = 1,308 > 1,300 observations */
    assert_int_equal(tu_stat(e, "epoch"), 1027);
    kb_engine_free(e);
    kb_config_free(cfg);
    kb_space_free(box);
}

static void bad_configurations_are_rejected(void **state)
{
    (void)state;
    kb_error err;
    kb_config *g = kb_config_new("gp-ts", &err), *s = kb_config_new("sgp-ts", &err);
    assert_int_equal(kb_config_set_number(s, "features", 0, &err), KB_ERANGE);
    assert_string_equal(err.field, "features");
    assert_int_equal(kb_config_set_number(g, "subset_size", 0, &err), KB_ERANGE);
    assert_string_equal(err.field, "subset_size");
    assert_int_equal(kb_config_set_number(s, "q", 0.5, &err), KB_ERANGE);
    assert_string_equal(err.field, "q");
    assert_int_equal(kb_config_set_number(g, "lambda", 0, &err), KB_ERANGE);
    assert_string_equal(err.field, "lambda");
    assert_int_equal(kb_config_set_number(g, "refresh_every", 0, &err), KB_ERANGE);
    assert_string_equal(err.field, "refresh_every");
    assert_int_equal(kb_config_set_number(g, "features", 10, &err), KB_ENOTFOUND);
    assert_string_equal(err.field, "features");

    double rows[4] = {0, 1, 2, 3};
    kb_space *sp = kb_space_new_finite(rows, 4, 1, &err);
    assert_int_equal(kb_config_set_string(s, "kernel", "linear", &err), 0);
    assert_null(kb_engine_create(s, sp, &err));
    assert_int_equal(err.code, KB_EUNSUPPORTED);
    assert_string_equal(err.field, "kernel");
    /* The exact engine needs no spectral density. */
    assert_int_equal(kb_config_set_string(g, "kernel", "linear", &err), 0);
    kb_engine *e = kb_engine_create(g, sp, &err);
    assert_non_null(e);
    kb_engine_free(e);
    kb_space_free(sp);
    kb_config_free(g);
    kb_config_free(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(random_features_match_kernel),
        cmocka_unit_test(features_are_their_definition),
        cmocka_unit_test(gp_ts_samples_have_exact_posterior),
        cmocka_unit_test(sgp_ts_samples_match_exact_posterior),
        cmocka_unit_test(sgp_ts_sparse_posterior_matches_titsias),
        cmocka_unit_test(a_warm_start_grows_the_sparse_model_in_stages),
        cmocka_unit_test(outputs_standardized_over_distinct_points),
        cmocka_unit_test(deterministic_and_restorable),
        cmocka_unit_test(finds_the_optimum_region),
        cmocka_unit_test(refresh_every_and_exhaustion),
        cmocka_unit_test(an_ask_rescales_beta_to_waiting_tells),
        cmocka_unit_test(a_run_of_observes_is_the_exact_gp),
        cmocka_unit_test(gp_ts_refuses_an_observe_past_its_cache),
        cmocka_unit_test(batch_tells_wait_for_the_next_ask),
        cmocka_unit_test(sgp_ts_refreshes_by_growth_past_1024),
        cmocka_unit_test(bad_configurations_are_rejected),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
