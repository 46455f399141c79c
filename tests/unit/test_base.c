/*
 * test_base.c - unit tests of the library's common layer: RNG, kernels, configuration
 * validation, spaces, the engine base (trials, repeats policy, errors) through the
 * random engine, and snapshot/restore by replay; the hyperparameter refit schedule and the
 * box dimensions the noise hides.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kbandit.h"
#include "util/testutil.h"
#include "../../core/src/internal.h"

static void rng_is_deterministic_and_uniform(void **state)
{
    (void)state;
    kb_rng a, b;
    kb_rng_seed(&a, 42);
    kb_rng_seed(&b, 42);
    for (int i = 0; i < 1000; i++)
        assert_int_equal(kb_rng_u64(&a), kb_rng_u64(&b));
    kb_rng c = a; /* the struct is the whole state */
    assert_true(kb_rng_uniform(&a) == kb_rng_uniform(&c));

    enum { N = 200000 };
    double s = 0, s2 = 0, u = 0;
    for (int i = 0; i < N; i++) {
        double z = kb_rng_normal(&a);
        s += z;
        s2 += z * z;
        u += kb_rng_uniform(&a);
        uint64_t r = kb_rng_below(&a, 7);
        assert_true(r < 7);
    }
    /* 5-sigma bounds: mean sd 1/sqrt(N), var sd sqrt(2/N), uniform mean sd 0.29/sqrt(N). */
    assert_true(fabs(s / N) < 5 / sqrt(N));
    assert_true(fabs(s2 / N - 1) < 5 * sqrt(2.0 / N));
    assert_true(fabs(u / N - 0.5) < 5 * 0.29 / sqrt(N));
}

static void kernel_matrix_matches_pairwise(void **state)
{
    (void)state;
    kb_rng rng;
    kb_rng_seed(&rng, 1);
    kb_kernel_kind kinds[] = {KB_KERNEL_RBF, KB_KERNEL_MATERN12, KB_KERNEL_MATERN32,
                              KB_KERNEL_MATERN52, KB_KERNEL_LINEAR};
    double ls[3] = {0.7, 1.9, 0.7};
    for (size_t t = 0; t < sizeof kinds / sizeof kinds[0]; t++) {
        kb_kernel *k = tu_kernel_with(kinds[t], 3, 1.3, ls);
        double *X = tu_uniform_matrix(&rng, 17, 3, -1, 1);
        double *Y = tu_uniform_matrix(&rng, 11, 3, -1, 1);
        double K[17 * 11], R[17 * 11];
        kb_kernel_matrix(k, X, 17, Y, 11, K);
        for (size_t i = 0; i < 17; i++)
            for (size_t j = 0; j < 11; j++)
                R[i * 11 + j] = kb_kernel_eval(k, X + 3 * i, Y + 3 * j);
        assert_true(tu_max_rel_err(K, R, 17 * 11, 1e-3) < 1e-10);
        free(X);
        free(Y);
        kb_kernel_free(k);
    }
    /* An additive kernel (two categorical coordinates of 3 and 2 choices beside a float):
     * the matrix, kb_kernel_eval, and the definition (1 - mix) joint + mix overlap written
     * out from the joint kernel alone, with k(x, x) = variance. */
    size_t choices[3] = {0, 3, 2};
    for (size_t t = 0; t + 1 < sizeof kinds / sizeof kinds[0]; t++) {
        kb_kernel *k = tu_kernel_with(kinds[t], 3, 1.3, ls);
        assert_int_equal(kb_kernel_set_choices(k, choices, NULL), KB_OK);
        double *X = tu_uniform_matrix(&rng, 17, 3, 0, 1), K[17 * 17], R[17 * 17];
        kb_kernel_matrix(k, X, 17, X, 17, R); /* the joint kernel alone */
        k->additive = 1;
        k->mix = 0.3;
        kb_kernel_matrix(k, X, 17, X, 17, K);
        for (size_t i = 0; i < 17; i++)
            for (size_t j = 0; j < 17; j++) {
                const double *a = X + 3 * i, *b = X + 3 * j;
                double same = (floor(a[1] * 3) == floor(b[1] * 3)) +
                              (floor(a[2] * 2) == floor(b[2] * 2));
                double want = 0.7 * R[i * 17 + j] + 0.3 * 1.3 * same / 2.0;
                assert_true(fabs(K[i * 17 + j] - want) < 1e-12);
                assert_true(fabs(kb_kernel_eval(k, a, b) - want) < 1e-12);
            }
        for (size_t i = 0; i < 17; i++)
            assert_true(fabs(K[i * 17 + i] - 1.3) < 1e-12);
        free(X);
        kb_kernel_free(k);
    }
    /* Known values: r = 1 after scaling. */
    double x[1] = {0}, y[1] = {2};
    const struct {
        kb_kernel_kind kind;
        double value;
    } known[] = {
        {KB_KERNEL_RBF, exp(-0.5)},
        {KB_KERNEL_MATERN32, (1 + sqrt(3)) * exp(-sqrt(3))},
        {KB_KERNEL_MATERN52, (1 + sqrt(5) + 5.0 / 3) * exp(-sqrt(5))},
        {KB_KERNEL_MATERN12, exp(-1)},
    };
    for (size_t t = 0; t < sizeof known / sizeof known[0]; t++) {
        kb_kernel *k = tu_kernel(known[t].kind, 1, 2.0);
        assert_true(fabs(kb_kernel_eval(k, x, y) - known[t].value) < 1e-15);
        kb_kernel_free(k);
    }
}

/* The textbook base(r) of each stationary kind, with libm's scalar exp. */
static double textbook_base(kb_kernel_kind kind, double r)
{
    switch (kind) {
    case KB_KERNEL_RBF: return exp(-0.5 * r * r);
    case KB_KERNEL_MATERN12: return exp(-r);
    case KB_KERNEL_MATERN32: return (1 + sqrt(3) * r) * exp(-sqrt(3) * r);
    case KB_KERNEL_MATERN52: return (1 + sqrt(5) * r + 5 * r * r / 3) * exp(-sqrt(5) * r);
    default: return NAN;
    }
}

/* kb_kernel_matrix takes a row's exponentials through glibc's vector exp (4 ulp) on
 * x86-64, 4 lanes where the CPU has AVX2 and 2 otherwise (both checked): on points whose
 * scaled distances are exact (quarter grid, lengthscales 1 and 1/2) every entry is the
 * textbook formula to 1e-14 relative, for every row width, so short tails included; r = 0
 * gives the variance, r > 1000 underflows to exactly 0. */
static void kernel_matrix_is_textbook_to_rounding(void **state)
{
    (void)state;
    kb_kernel_kind kinds[] = {KB_KERNEL_RBF, KB_KERNEL_MATERN12, KB_KERNEL_MATERN32,
                              KB_KERNEL_MATERN52};
    double ls[2] = {1.0, 0.5}, X[9 * 2], Y[9 * 2], K[9 * 9];
    for (size_t i = 0; i < 9; i++) {
        X[2 * i] = 0.25 * (double)i;
        X[2 * i + 1] = 0.25 * (double)((5 * i) % 9);
        Y[2 * i] = 0.25 * (double)((2 * i) % 9); /* Y[0] = X[0], Y[2] = X[4]... */
        Y[2 * i + 1] = 0.25 * (double)((10 * i) % 9);
    }
    Y[2 * 8] = 1024.0; /* r > 1000 from every X: exp underflows */
    for (size_t t = 0; t < 2 * sizeof kinds / sizeof kinds[0]; t++) {
        kb__kernel_sse2_only = t % 2; /* both paths where the CPU has AVX2 */
        kb_kernel *k = tu_kernel_with(kinds[t / 2], 2, 1.5, ls);
        for (size_t m = 1; m <= 9; m++) {
            kb_kernel_matrix(k, X, 9, Y, m, K);
            for (size_t i = 0; i < 9; i++)
                for (size_t j = 0; j < m; j++) {
                    double dx = X[2 * i] - Y[2 * j], dy = (X[2 * i + 1] - Y[2 * j + 1]) / 0.5;
                    double want = 1.5 * textbook_base(kinds[t / 2], sqrt(dx * dx + dy * dy));
                    assert_true(fabs(K[i * m + j] - want) <= 1e-14 * want);
                }
        }
        assert_true(K[0] == 1.5 * textbook_base(kinds[t / 2], 0.0)); /* X[0] = Y[0] */
        assert_true(K[8] == 0.0);                                /* X[0], Y[8] */
        kb_kernel_free(k);
    }
    kb__kernel_sse2_only = 0;
}

/* A kernel value whose exponent is below log(DBL_MIN) is exactly 0 on every path
 * (kb_kernel_matrix at both widths, kb_kernel_eval, kb__kernel_profiles), where exp would
 * give a subnormal or 0 through its slow special case, and one above it is the exp
 * itself: nothing normal is flushed. RBF, lengthscale 1: the exponent is -r^2 / 2. */
static void kernel_flushes_exponents_below_dbl_min(void **state)
{
    (void)state;
    double arg[] = {-700.0, -708.2, -708.6, -740.0, -800.0}, ls = 1.0, x = 0.0;
    double y[5], r2[5], K[5], val[5], slope[5];
    enum { N = sizeof arg / sizeof arg[0] };
    for (size_t i = 0; i < N; i++) {
        r2[i] = -2.0 * arg[i];
        y[i] = sqrt(r2[i]);
    }
    kb_kernel *k = tu_kernel_with(KB_KERNEL_RBF, 1, 1.0, &ls);
    for (int t = 0; t < 2; t++) {
        kb__kernel_sse2_only = t;
        kb_kernel_matrix(k, &x, 1, y, N, K);
        kb__kernel_profiles(KB_KERNEL_RBF, r2, N, val, slope);
        for (size_t i = 0; i < N; i++) {
            double want = arg[i] < log(DBL_MIN) ? 0.0 : exp(arg[i]);
            double got[] = {K[i], kb_kernel_eval(k, &x, &y[i]), val[i]};
            for (size_t g = 0; g < sizeof got / sizeof got[0]; g++)
                assert_true(want == 0.0 ? got[g] == 0.0 : fabs(got[g] - want) <= 1e-10 * want);
            assert_true(want == 0.0 ? slope[i] == 0.0 : slope[i] < 0.0);
        }
    }
    kb__kernel_sse2_only = 0;
    kb_kernel_free(k);
}

/* kb__vmath at every width this CPU runs (2 lanes, and 4 where the CPU has AVX2, the only
 * place they are used): log and cos each within 4 ulp of libm (glibc's bound for
 * libmvec), a short last quad padded so that a value does not depend on how many were
 * asked for, log(1) exactly 0. */
static void vector_math_within_4_ulp_at_every_width(void **state)
{
    (void)state;
    enum { N = 9 };
    double x[N], full[N], part[N];
    int lanes[] = {2, 4};
    kb_rng rng;
    kb_rng_seed(&rng, 7);
    for (size_t t = 0; t < sizeof lanes / sizeof lanes[0]; t++) {
        if (lanes[t] == 4 && !__builtin_cpu_supports("avx2"))
            continue;
        for (int rep = 0; rep < 2000; rep++) {
            kb_vfun f = rep % 2 ? KB_VLOG : KB_VCOS;
            for (size_t j = 0; j < N; j++) {
                double u = kb_rng_uniform(&rng);
                x[j] = f == KB_VLOG ? 1.0 - u : 2.0 * M_PI * u;
            }
            if (f == KB_VLOG)
                x[rep % N] = 1.0;
            kb__vmath_lanes(f, x, N, full, lanes[t]);
            for (size_t j = 0; j < N; j++) {
                double want = f == KB_VLOG ? log(x[j]) : cos(x[j]);
                if (f == KB_VLOG && x[j] == 1.0)
                    assert_true(full[j] == 0.0);
                else
                    assert_true(fabs(full[j] - want) <= 4.0 * DBL_EPSILON * fabs(want) + 1e-300);
            }
            size_t n = 1 + (size_t)rep % N;
            kb__vmath_lanes(f, x, n, part, lanes[t]);
            assert_memory_equal(part, full, n * sizeof *part);
        }
    }
}

/* kb__kernel_profiles (the fit's values and slopes, through the vector exp, 4 lanes where
 * the CPU has AVX2 and 2 otherwise: both checked) equals kb__kernel_profile to 4 ulp of
 * exp, for every count 1..9, so short last vectors included. */
static void kernel_profiles_match_scalar_at_both_widths(void **state)
{
    (void)state;
    kb_kernel_kind kinds[] = {KB_KERNEL_RBF, KB_KERNEL_MATERN12, KB_KERNEL_MATERN32,
                              KB_KERNEL_MATERN52};
    double r2[9], val[9], slope[9];
    for (size_t i = 0; i < 9; i++)
        r2[i] = 0.37 * (double)(i * i); /* 0 and up to r = 8.6 */
    for (size_t t = 0; t < 2 * sizeof kinds / sizeof kinds[0]; t++) {
        kb__kernel_sse2_only = t % 2;
        for (size_t n = 1; n <= 9; n++) {
            kb__kernel_profiles(kinds[t / 2], r2, n, val, slope);
            for (size_t i = 0; i < n; i++) {
                double ds, v = kb__kernel_profile(kinds[t / 2], r2[i], &ds);
                assert_true(fabs(val[i] - v) <= 1e-14 * fabs(v));
                assert_true(fabs(slope[i] - ds) <= 1e-14 * fabs(ds));
            }
        }
    }
    kb__kernel_sse2_only = 0;
}

/* kb__kernel_profile (one exp for the value and the slope): the value is the textbook
 * base to 1e-15, the slope d base / d r^2 its central difference to 1e-7 away from 0
 * (where the Matern bases are not smooth in r^2; Matern 1/2's cusp is reported as 0). */
static void kernel_profile_is_textbook(void **state)
{
    (void)state;
    kb_kernel_kind kinds[] = {KB_KERNEL_RBF, KB_KERNEL_MATERN12, KB_KERNEL_MATERN32,
                              KB_KERNEL_MATERN52};
    double r2s[] = {0.0, 0.25, 1.0, 6.25, 49.0};
    for (size_t t = 0; t < sizeof kinds / sizeof kinds[0]; t++)
        for (size_t i = 0; i < sizeof r2s / sizeof r2s[0]; i++) {
            double r2 = r2s[i], slope, h = 1e-5 * (r2 > 1.0 ? r2 : 1.0);
            double v = kb__kernel_profile(kinds[t], r2, &slope);
            double want = textbook_base(kinds[t], sqrt(r2));
            assert_true(fabs(v - want) <= 1e-15 * want);
            if (r2 == 0.0) {
                assert_true(kinds[t] != KB_KERNEL_MATERN12 || slope == 0.0);
                continue;
            }
            double diff = (textbook_base(kinds[t], sqrt(r2 + h)) -
                           textbook_base(kinds[t], sqrt(r2 - h))) / (2.0 * h);
            assert_true(fabs(slope - diff) <= 1e-7 * fabs(diff) + 1e-12);
        }
}

/* Expects `rc` to be `code` with err.field equal to `field`. */
static void expect_error(int rc, const kb_error *err, int code, const char *field)
{
    assert_int_equal(rc, code);
    assert_int_equal(err->code, code);
    assert_string_equal(err->field, field);
    assert_true(strlen(err->message) > 0);
}

static void config_rejects_bad_options(void **state)
{
    (void)state;
    kb_error err;
    assert_null(kb_config_new("no-such-engine", &err));
    expect_error(err.code, &err, KB_ENOTFOUND, "engine");

    kb_config *cfg = kb_config_new("random", &err);
    assert_non_null(cfg);
    expect_error(kb_config_set_number(cfg, "lengthscale", 0.0, &err), &err, KB_ERANGE,
                 "lengthscale");
    expect_error(kb_config_set_number(cfg, "lengthscale", -1.0, &err), &err, KB_ERANGE,
                 "lengthscale");
    expect_error(kb_config_set_number(cfg, "lengthscale", NAN, &err), &err, KB_EINVAL,
                 "lengthscale");
    expect_error(kb_config_set_number(cfg, "bogus", 1.0, &err), &err, KB_ENOTFOUND, "bogus");
    expect_error(kb_config_set_string(cfg, "kernel", "cosine", &err), &err, KB_ENOTFOUND,
                 "kernel");
    expect_error(kb_config_set_string(cfg, "lengthscale", "x", &err), &err, KB_EINVAL,
                 "lengthscale");
    expect_error(kb_config_set_number(cfg, "seed", 1.5, &err), &err, KB_EINVAL, "seed");
    double bad[2] = {1.0, 0.0};
    expect_error(kb_config_set_vector(cfg, "lengthscales", bad, 2, &err), &err, KB_ERANGE,
                 "lengthscales");
    /* Failed sets leave the defaults in place. */
    assert_true(kb_config_number(cfg, "lengthscale") == 1.0);
    assert_string_equal(kb_config_string(cfg, "kernel"), "rbf");
    assert_int_equal(kb_config_set_string(cfg, "kernel", "matern52", &err), KB_OK);
    assert_string_equal(kb_config_string(cfg, "kernel"), "matern52");

    /* lengthscales must match the space's dimension. */
    double good[2] = {1.0, 2.0};
    assert_int_equal(kb_config_set_vector(cfg, "lengthscales", good, 2, &err), KB_OK);
    double rows[3] = {0, 1, 2};
    kb_space *sp = kb_space_new_finite(rows, 3, 1, &err);
    assert_null(kb_engine_create(cfg, sp, &err));
    expect_error(err.code, &err, KB_EINVAL, "lengthscales");
    kb_space_free(sp);
    kb_config_free(cfg);
}

/* kb_kernel_create starts at variance 1, lengthscales 1, all ordered; every refusal
 * names its field and leaves the kernel as it was. */
static void kernel_create_and_setters_validate(void **state)
{
    (void)state;
    kb_error err;
    kb_kernel *k = (kb_kernel *)&err; /* must be reset to NULL on failure */
    expect_error(kb_kernel_create((kb_kernel_kind)99, 2, &k, &err), &err, KB_EINVAL, "kind");
    assert_null(k);
    expect_error(kb_kernel_create(KB_KERNEL_RBF, 0, &k, &err), &err, KB_ERANGE, "dim");
    expect_error(kb_kernel_create(KB_KERNEL_RBF, KB_MAX_DIM + 1, &k, &err), &err, KB_ERANGE,
                 "dim");
    assert_null(k);
    kb_kernel_free(NULL);

    assert_int_equal(kb_kernel_create(KB_KERNEL_RBF, 2, &k, &err), KB_OK);
    assert_int_equal(kb_kernel_dim(k), 2);
    double o[2] = {0.0, 0.0}, a[2] = {0.1, 0.0}, b[2] = {0.4, 0.0}, one[2] = {1.0, 0.0};
    assert_true(kb_kernel_eval(k, o, o) == 1.0);
    assert_true(fabs(kb_kernel_eval(k, o, one) - exp(-0.5)) < 1e-15);

    double bad_v[] = {0.0, -1.0, NAN, INFINITY};
    for (size_t i = 0; i < sizeof bad_v / sizeof bad_v[0]; i++)
        expect_error(kb_kernel_set_variance(k, bad_v[i], &err), &err, KB_ERANGE, "variance");
    assert_true(kb_kernel_eval(k, o, o) == 1.0);
    double ls_zero[2] = {1.0, 0.0}, ls_nan[2] = {NAN, 1.0}, ls_inf[2] = {1.0, INFINITY};
    expect_error(kb_kernel_set_lengthscales(k, ls_zero, &err), &err, KB_ERANGE,
                 "lengthscales[1]");
    expect_error(kb_kernel_set_lengthscales(k, ls_nan, &err), &err, KB_ERANGE,
                 "lengthscales[0]");
    expect_error(kb_kernel_set_lengthscales(k, ls_inf, &err), &err, KB_ERANGE,
                 "lengthscales[1]");
    assert_true(fabs(kb_kernel_eval(k, o, one) - exp(-0.5)) < 1e-15);

    assert_int_equal(kb_kernel_set_variance(k, 2.0, &err), KB_OK);
    double ls[2] = {0.5, 3.0};
    assert_int_equal(kb_kernel_set_lengthscales(k, ls, &err), KB_OK);
    assert_true(kb_kernel_eval(k, o, o) == 2.0);
    assert_true(fabs(kb_kernel_eval(k, o, one) - 2.0 * exp(-2.0)) < 1e-15);
    /* 0.1 and 0.4 are the same choice of 2 (bin [0, 1/2)): distance 0. */
    size_t two[2] = {2, 0}, single[2] = {0, 1};
    assert_int_equal(kb_kernel_set_choices(k, two, &err), KB_OK);
    assert_true(kb_kernel_eval(k, a, b) == 2.0);
    expect_error(kb_kernel_set_choices(k, single, &err), &err, KB_EINVAL, "choices[1]");
    assert_true(kb_kernel_eval(k, a, b) == 2.0);
    assert_int_equal(kb_kernel_set_choices(k, NULL, &err), KB_OK);
    assert_true(fabs(kb_kernel_eval(k, a, b) - 2.0 * exp(-0.5 * 0.09 / 0.25)) < 1e-15);
    kb_kernel_free(k);
}

static void space_rejects_bad_candidates(void **state)
{
    (void)state;
    kb_error err;
    double rows[4] = {0, 1, NAN, 2};
    assert_null(kb_space_new_finite(rows, 0, 2, &err));
    expect_error(err.code, &err, KB_EINVAL, "candidates");
    assert_null(kb_space_new_finite(rows, 2, 2, &err));
    expect_error(err.code, &err, KB_EINVAL, "candidates[1][0]");
    rows[2] = INFINITY;
    assert_null(kb_space_new_finite(rows, 2, 2, &err));
    assert_null(kb_space_new_box(0, 10, &err));
    assert_null(kb_space_new_box(2, 0, &err));
    assert_null(kb_space_new_box(KB_MAX_DIM + 1, 10, &err));
    expect_error(err.code, &err, KB_ERANGE, "dim");
    /* pool_size x dim: 1,000 x 65,536 passed KB_MAX_POINTS and took 1 GB (issue 16). */
    assert_null(kb_space_new_box(1000, 65536, &err));
    expect_error(err.code, &err, KB_ERANGE, "pool_size");
    assert_null(kb_space_new_box(1, KB_MAX_POOL + 1, &err));
    expect_error(err.code, &err, KB_ERANGE, "pool_size");
    kb_space *box = kb_space_new_box(256, KB_MAX_POOL_POINTS / 256, &err);
    assert_non_null(box);
    kb_space_free(box);
    box = kb_space_new_box(3, 100, &err);
    assert_non_null(box);
    assert_int_equal(kb_space_size(box), 100);
    assert_false(kb_space_is_finite(box));
    /* Levels are bounded (a snapshot's choice count of ~2^63 asked random features for an
     * absurd allocation: fuzz_snapshot); a refusal keeps the levels as they were. */
    size_t lv[3] = {0, KB_MAX_CHOICES, (size_t)1 << 53};
    unsigned char cat[3] = {0, 1, 0};
    assert_int_equal(kb_space_set_levels(box, lv, cat, &err), KB_OK);
    lv[1] = KB_MAX_CHOICES + 1;
    expect_error(kb_space_set_levels(box, lv, cat, &err), &err, KB_EINVAL, "levels[1]");
    lv[1] = 3;
    lv[2] = ((size_t)1 << 53) + 1;
    expect_error(kb_space_set_levels(box, lv, cat, &err), &err, KB_ERANGE, "levels[2]");
    kb_space_free(box);
    kb_space_free(NULL);
}

static kb_engine *random_engine(size_t n, const char *repeats, uint64_t seed)
{
    kb_error err;
    double *rows = malloc(n * 2 * sizeof *rows);
    for (size_t i = 0; i < n; i++) {
        rows[2 * i] = (double)i;
        rows[2 * i + 1] = -(double)i;
    }
    kb_space *sp = kb_space_new_finite(rows, n, 2, &err);
    kb_config *cfg = kb_config_new("random", &err);
    kb_config_set_string(cfg, "repeats", repeats, &err);
    kb_config_set_number(cfg, "seed", (double)seed, &err);
    kb_engine *e = kb_engine_create(cfg, sp, &err);
    assert_non_null(e);
    kb_space_free(sp);
    kb_config_free(cfg);
    free(rows);
    return e;
}

/* The next n asks of a and b (on boxes of the same dimension) hand out the same points. */
static void next_asks_agree(kb_engine *a, kb_engine *b, int n)
{
    kb_error err;
    for (int k = 0; k < n; k++) {
        kb_point pa, pb;
        kb_ask_result res;
        assert_int_equal(kb_engine_ask(a, 1, &pa, &res, &err), KB_OK);
        assert_int_equal(kb_engine_ask(b, 1, &pb, &res, &err), KB_OK);
        assert_memory_equal(pa.x, pb.x, kb_engine_dim(a) * sizeof *pa.x);
    }
}

/* kb__output_stats against tu_distinct_stats on the told and observed inputs (distinct
 * rows map to distinct internal points), past several regrowths of the hash table,
 * with repeated arms, observes at a candidate and at -0.0; a restored engine has the
 * same statistics bit for bit. */
static void output_stats_count_distinct_points(void **state)
{
    (void)state;
    enum { N = 300, STEPS = 900 };
    kb_error err;
    kb_rng drv;
    kb_rng_seed(&drv, 8);
    kb_engine *e = random_engine(N, "allow", 4);
    double *X = malloc((STEPS + 20) * 2 * sizeof *X), *y = malloc((STEPS + 20) * sizeof *y);
    size_t n = 0;
    for (int s = 0; s < STEPS; s++) {
        kb_point p;
        kb_ask_result res;
        assert_int_equal(kb_engine_ask(e, 1, &p, &res, &err), KB_OK);
        memcpy(X + 2 * n, p.x, 2 * sizeof *X);
        y[n] = 0.01 * p.x[0] + 0.1 * kb_rng_normal(&drv);
        assert_int_equal(kb_engine_tell(e, p.handle, y[n++], &err), KB_OK);
        if (s % 50 == 0) {
            double xo[2] = {s % 100 ? -0.0 : 7.0, s % 100 ? 0.0 : -7.0};
            X[2 * n] = xo[0];
            X[2 * n + 1] = xo[1];
            y[n] = kb_rng_normal(&drv);
            assert_int_equal(kb_engine_observe(e, xo, y[n++], &err), KB_OK);
        }
        if (s % 100 == 99) {
            double m, sd, rm, rsd;
            kb__output_stats(e, &m, &sd);
            tu_distinct_stats(X, y, n, 2, &rm, &rsd);
            assert_true(fabs(m - rm) <= 1e-12 * fabs(rm) + 1e-15);
            assert_true(fabs(sd - rsd) <= 1e-12 * rsd);
        }
    }
    assert_true(e->n_groups > 128 && e->n_groups < n); /* regrown, and arms repeated */
    kb_engine *r = tu_restored(e);
    double m1, s1, m2, s2;
    kb__output_stats(e, &m1, &s1);
    kb__output_stats(r, &m2, &s2);
    assert_true(m1 == m2 && s1 == s2);
    free(X);
    free(y);
    kb_engine_free(r);
    kb_engine_free(e);
}

/* The warp's spread floor as fit_warp sets it, recomputed from the told values y[0..n) in
 * the order they arrived: KB_WARP_NOISE_SDS noise sds of the last fit, or
 * KB_WARP_DESIGN_SHARE of the spread of the first design_n values (the initial design; at
 * least three), whichever is larger. */
static double warp_floor(const kb_engine *e, const double *y, size_t n)
{
    size_t k = e->design_n < n ? e->design_n : n;
    double design = k >= 3 ? KB_WARP_DESIGN_SHARE * tu_upper_spread(y, k, NULL) : 0.0;
    return fmax(KB_WARP_NOISE_SDS * e->fit_noise_sd, design);
}

/* kb__output_y with the warp on (as engines that fit hyperparameters have it) against
 * tu_output_y, on a heavy lower tail (y = -exp(2 z)), repeated arms and observes, at every
 * observation and at probes between, below and above them; monotone in y. With a noise
 * sd set as a fit leaves it (e->fit_noise_sd), the warp's spread is floored at
 * KB_WARP_NOISE_SDS of it. */
static void check_output_warp(double fit_noise_sd)
{
    enum { N = 60, STEPS = 150 };
    kb_error err;
    kb_rng drv;
    kb_rng_seed(&drv, 12);
    kb_engine *e = random_engine(N, "allow", 5);
    e->warp = 1; /* the random engine never fits; the base's warp is tested on its own */
    e->fit_noise_sd = fit_noise_sd;
    double floor = KB_WARP_NOISE_SDS * fit_noise_sd;
    double X[(STEPS + 10) * 2], y[STEPS + 10];
    size_t n = 0;
    for (int s = 0; s < STEPS; s++) {
        kb_point p;
        kb_ask_result res;
        assert_int_equal(kb_engine_ask(e, 1, &p, &res, &err), KB_OK);
        memcpy(X + 2 * n, p.x, 2 * sizeof *X);
        y[n] = -exp(2.0 * kb_rng_normal(&drv));
        assert_int_equal(kb_engine_tell(e, p.handle, y[n++], &err), KB_OK);
        if (s % 20 == 0) {
            X[2 * n] = 0.5;
            X[2 * n + 1] = (double)s;
            y[n] = -100.0 * kb_rng_uniform(&drv);
            assert_int_equal(kb_engine_observe(e, X + 2 * n, y[n], &err), KB_OK);
            n++;
        }
        if (s < 2 || s % 37 != 36)
            continue;
        double prev = -INFINITY, lo = 0.0, hi = 0.0;
        for (size_t i = 0; i < n; i++) {
            double got = kb__output_y(e, y[i]);
            assert_true(fabs(got - tu_output_y(X, y, n, 2, 1, floor, y[i])) < 1e-9);
            lo = fmin(lo, y[i]);
            hi = fmax(hi, y[i]);
        }
        for (int k = 0; k <= 200; k++) {
            double v = lo - 10.0 + (hi - lo + 20.0) * k / 200.0;
            double got = kb__output_y(e, v);
            assert_true(fabs(got - tu_output_y(X, y, n, 2, 1, floor, v)) < 1e-9);
            assert_true(got >= prev);
            prev = got;
        }
    }
    double m, sd;
    kb__output_stats(e, &m, &sd);
    assert_true(e->out_spread > 0.0); /* the warp was active */
    assert_true(e->out_spread >= floor);
    assert_true(fabs(kb__output_y(e, 0.0) * sd + m) < 1e-12); /* upper half kept */
    kb_engine_free(e);
}

static void output_warp_matches_reference(void **state)
{
    (void)state;
    check_output_warp(0.0);
}

/* The better half of y = -exp(2 z) spreads about 1.3 above its median; a noise sd of 2
 * floors the spread at 8, so the floor is what is checked here. */
static void output_warp_spread_floored_by_noise(void **state)
{
    (void)state;
    check_output_warp(2.0);
}

/* A box with a float, an integer of 5 values and a categorical of 4 choices, on gp-ucb
 * (fitted). */
static kb_engine *levels_engine_with(const char *name, const char *categorical)
{
    kb_error err;
    size_t levels[3] = {0, 5, 4};
    unsigned char cat[3] = {0, 0, 1};
    kb_space *sp = kb_space_new_box(3, 256, &err);
    assert_non_null(sp);
    assert_int_equal(kb_space_set_levels(sp, levels, cat, &err), KB_OK);
    kb_config *cfg = kb_config_new(name, &err);
    assert_int_equal(kb_config_set_number(cfg, "seed", 4, &err), KB_OK);
    assert_int_equal(kb_config_set_string(cfg, "categorical_kernel", categorical, &err), KB_OK);
    kb_engine *e = kb_engine_create(cfg, sp, &err);
    assert_non_null(e);
    kb_space_free(sp);
    kb_config_free(cfg);
    return e;
}

/* gp-ucb on a box of a float, an integer of 5 values and a categorical of 4 choices. */
static kb_engine *levels_engine(void) { return levels_engine_with("gp-ucb", "joint"); }

/* Engine `name` at its defaults on a 3-d box with a pool of 256. */
static kb_engine *box3_engine(const char *name)
{
    kb_error err;
    kb_space *sp = kb_space_new_box(3, 256, &err);
    kb_config *cfg = kb_config_new(name, &err);
    kb_engine *e = kb_engine_create(cfg, sp, &err);
    assert_non_null(e);
    kb_space_free(sp);
    kb_config_free(cfg);
    return e;
}

/* kb_engine_recommend: among the told values within two noise sds of the best, the trial
 * with the highest posterior mean of the exact GP under the engine's fitted kernel and
 * noise (recomputed here with tu_exact_posterior on every row, y as the engine models it),
 * the highest told value before the first fit;
 * observations are never picked; asking for it leaves the engine's next choices alone;
 * engines without a fitted GP say KB_EUNSUPPORTED. */
static void recommend_is_the_best_posterior_mean(void **state)
{
    (void)state;
    enum { N = 60 };
    kb_error err;
    kb_engine *e = box3_engine("gp-ucb"), *twin = box3_engine("gp-ucb"), *r = box3_engine("random");
    uint64_t h, handles[N];
    assert_int_equal(kb_engine_recommend(e, &h, &err), KB_ENOTFOUND);
    assert_int_equal(kb_engine_recommend(r, &h, &err), KB_EUNSUPPORTED);
    double X[(N + 1) * 3], y[N + 1], obs_x[3] = {0.5, 0.5, 0.5};
    assert_int_equal(kb_engine_observe(e, obs_x, 100.0, &err), KB_OK); /* no handle */
    assert_int_equal(kb_engine_observe(twin, obs_x, 100.0, &err), KB_OK);
    memcpy(X, obs_x, sizeof obs_x);
    y[0] = 100.0;
    kb_rng drv;
    kb_rng_seed(&drv, 33);
    for (size_t i = 1; i <= N; i++) {
        kb_point p, q;
        kb_ask_result res;
        assert_int_equal(kb_engine_ask(e, 1, &p, &res, &err), KB_OK);
        assert_int_equal(kb_engine_ask(twin, 1, &q, &res, &err), KB_OK);
        assert_memory_equal(p.x, q.x, 3 * sizeof *p.x); /* recommending changed nothing */
        memcpy(X + 3 * i, p.x, 3 * sizeof *X);
        handles[i - 1] = p.handle;
        y[i] = -((p.x[0] - 0.3) * (p.x[0] - 0.3) + (p.x[1] - 0.6) * (p.x[1] - 0.6)) +
               0.05 * kb_rng_normal(&drv);
        assert_int_equal(kb_engine_tell(e, p.handle, y[i], &err), KB_OK);
        assert_int_equal(kb_engine_tell(twin, q.handle, y[i], &err), KB_OK);
        assert_int_equal(kb_engine_recommend(e, &h, &err), KB_OK);
        size_t got = 0;
        for (size_t j = 1; j <= i; j++)
            got = handles[j - 1] == h ? j : got;
        assert_true(got > 0);
        /* the rating: the told value before the first fit, then the reference mean over
         * the told values within two noise sds of the best one */
        double rating[N + 1], var[N + 1], ys[N + 1], best_y = -INFINITY;
        if (e->n_fits == 0) {
            memcpy(rating, y, (i + 1) * sizeof *y);
        } else {
            for (size_t j = 0; j <= i; j++)
                ys[j] = tu_output_y(X, y, i + 1, 3, e->warp, warp_floor(e, y, i + 1), y[j]);
            assert_int_equal(tu_exact_posterior(&e->kernel, X, ys, i + 1, e->noise, X + 3,
                                                i, rating + 1, var + 1), 0);
            for (size_t j = 1; j <= i; j++)
                best_y = fmax(best_y, ys[j]);
            for (size_t j = 1; j <= i; j++)
                if (ys[j] < best_y - 2.0 * sqrt(e->noise) * (1.0 + 1e-12))
                    rating[j] = -INFINITY;
            assert_true(ys[got] >= best_y - 2.0 * sqrt(e->noise) * (1.0 + 1e-9));
        }
        double top = rating[1];
        for (size_t j = 2; j <= i; j++)
            top = fmax(top, rating[j]);
        /* a point told twice ties with itself: equal up to rounding */
        assert_true(rating[got] >= top - 1e-9 * (1.0 + fabs(top)));
    }
    assert_true(e->n_fits > 0);
    kb_engine_free(e);
    kb_engine_free(twin);
    kb_engine_free(r);
}

/* The band of kb_engine_recommend: a told point whose own value is far below the best
 * (20 noise sds) is not recommended even where observed neighbours lift its posterior
 * mean above every other told point's. */
static void recommend_keeps_to_values_near_the_best(void **state)
{
    (void)state;
    kb_error err;
    kb_space *sp = kb_space_new_box(3, 256, &err);
    kb_config *cfg = kb_config_new("gp-ucb", &err);
    assert_int_equal(kb_config_set_number(cfg, "lambda", 0.01, &err), KB_OK);
    assert_int_equal(kb_config_set_number(cfg, "lengthscale", 0.3, &err), KB_OK);
    assert_int_equal(kb_config_set_string(cfg, "output_scaling", "standardize", &err), KB_OK);
    kb_engine *e = kb_engine_create(cfg, sp, &err);
    assert_non_null(e);
    kb_space_free(sp);
    kb_config_free(cfg);
    kb_point p[2];
    kb_ask_result res;
    assert_int_equal(kb_engine_ask(e, 2, p, &res, &err), KB_OK);
    for (int i = 0; i < 40; i++) { /* observed, no handle: the low point's neighbours */
        double x[3];
        for (int j = 0; j < 3; j++)
            x[j] = p[0].x[j] + 1e-3 * (double)(i % 5 - 2) * (j == i % 3);
        assert_int_equal(kb_engine_observe(e, x, 1.0 + 0.01 * (double)(i % 7), &err), KB_OK);
    }
    assert_int_equal(kb_engine_tell(e, p[0].handle, 0.0, &err), KB_OK);
    assert_int_equal(kb_engine_tell(e, p[1].handle, 0.5, &err), KB_OK);
    assert_int_equal(kb__hyper_refit(e, &err), KB_OK);
    double mean[2], sd[2], X[6];
    memcpy(X, p[0].x, 3 * sizeof *X);
    memcpy(X + 3, p[1].x, 3 * sizeof *X);
    assert_int_equal(kb_engine_posterior(e, X, 2, mean, sd, &err), KB_OK);
    assert_true(mean[0] > mean[1]); /* the model alone would pick the low point */
    uint64_t h;
    assert_int_equal(kb_engine_recommend(e, &h, &err), KB_OK);
    assert_int_equal(h, p[1].handle);
    kb_engine_free(e);
}

/* The refit schedule (kb__hyper_refit): every 20% more observations, with the full
 * evaluation budget while a fit sees all of them and 10 evaluations once there are more
 * than KB_HYPER_ROWS (a fit sees a sample); past that, on a finite set, the next fit waits
 * for n to double. */
static void refit_schedule(kb_engine *e, size_t after_300)
{
    kb_error err;
    kb_rng drv;
    kb_rng_seed(&drv, 5);
    const size_t at[3] = {200, KB_HYPER_ROWS, 300}, next[3] = {240, 307, after_300};
    const int evals[3] = {0, 0, 10};
    for (size_t k = 0, i = 0; k < 3; k++) {
        for (; i < at[k]; i++) {
            double x[3] = {kb_rng_uniform(&drv), kb_rng_uniform(&drv), kb_rng_uniform(&drv)};
            assert_int_equal(kb_engine_observe(e, x, sin(6.0 * x[0]) + x[1], &err), KB_OK);
        }
        assert_int_equal(kb__hyper_refit(e, &err), KB_OK);
        assert_int_equal(e->fit_next, next[k]);
        assert_int_equal(e->fit_opts.max_evals, evals[k]);
    }
    kb_engine_free(e);
}

static void refits_space_out_once_a_fit_samples(void **state)
{
    (void)state;
    /* random engines: no model that a refit would outdate; x[2] is ignored on the
     * finite set's two coordinates */
    refit_schedule(box3_engine("random"), 360);
    refit_schedule(random_engine(64, "allow", 1), 600);
}

/* The second trial of a GP engine on a line of 101 candidates (1 = hyperparameters
 * fixed). */
static size_t second_pick(const char *engine, uint64_t seed, int fixed, size_t *first,
                          size_t *third, uint64_t *fits)
{
    enum { A = 101 };
    double rows[A];
    for (size_t i = 0; i < A; i++)
        rows[i] = (double)i / (A - 1);
    kb_error err;
    kb_space *sp = kb_space_new_finite(rows, A, 1, &err);
    kb_config *cfg = kb_config_new(engine, &err);
    assert_non_null(sp);
    assert_int_equal(kb_config_set_number(cfg, "seed", (double)seed, &err), KB_OK);
    if (fixed)
        assert_int_equal(kb_config_set_string(cfg, "hyperparameters", "fixed", &err), KB_OK);
    kb_engine *e = kb_engine_create(cfg, sp, &err);
    assert_non_null(e);
    size_t idx[3];
    for (int t = 0; t < 3; t++) {
        kb_point p;
        kb_ask_result res;
        assert_int_equal(kb_engine_ask(e, 1, &p, &res, &err), KB_OK);
        assert_int_equal(res.n, 1);
        idx[t] = p.index;
        assert_int_equal(kb_engine_tell(e, p.handle, sin(9.0 * rows[p.index]), &err), KB_OK);
        /* the design's rows in order, drawn before any ask */
        assert_true(fixed ? e->design_n == 0 : idx[t] == e->design_rows[t]);
    }
    kb_hyperparameters hp;
    kb_engine_hyperparameters(e, &hp);
    *fits = hp.fits;
    *first = idx[0];
    *third = idx[2];
    kb_engine_free(e);
    kb_config_free(cfg);
    kb_space_free(sp);
    return idx[1];
}

/* A finite set with fitting on starts with KB_FINITE_DESIGN uniform draws (engine.c
 * draw_finite_design), as a box starts with its quasi-random design: the unfitted
 * kernel's largest variance is at the candidates farthest from those told, so the second
 * trial went to an end of the line on every seed (it still does with the kernel fixed).
 * Uniformly drawn, it lands on an end with probability 2 / 100. No fit comes before the
 * design is told (the first waits for 3 observations). */
static void finite_sets_start_with_uniform_draws(void **state)
{
    (void)state;
    const char *engines[] = {"bbkb", "bkb", "gp-ucb", "gp-bucb", "gp-ts", "sgp-ts"};
    enum { SEEDS = 40 };
    for (size_t k = 0; k < sizeof engines / sizeof engines[0]; k++) {
        int ends = 0;
        for (uint64_t seed = 1; seed <= SEEDS; seed++) {
            size_t first, third;
            uint64_t fits;
            size_t second = second_pick(engines[k], seed, 0, &first, &third, &fits);
            assert_true(first != second && second != third && first != third);
            assert_int_equal(fits, 0);
            ends += second == 0 || second == 100;
        }
        if (ends > 6) /* binomial(40, 0.02): P(> 6) < 1e-5 */
            fail_msg("%s: the second trial at an end on %d of %d seeds", engines[k], ends,
                     SEEDS);
    }
    for (size_t k = 0; k < 3; k++) /* the UCB engines, kernel fixed: the farthest end */
        for (uint64_t seed = 1; seed <= 5; seed++) {
            size_t first, third;
            uint64_t fits;
            size_t second = second_pick(engines[k], seed, 1, &first, &third, &fits);
            assert_int_equal(second, first < 50 ? 100 : 0);
            assert_int_equal(fits, 0);
        }
}

/* A finite grid of G x G points in the unit square and an engine on it (prior_mean
 * "auto" unless `constant`), seeded. */
enum { G = 21 };
static kb_engine *unit_grid_engine(const char *engine, uint64_t seed, int constant)
{
    double rows[G * G * 2];
    for (size_t i = 0; i < G * G; i++) {
        rows[2 * i] = (double)(i % G) / (G - 1);
        rows[2 * i + 1] = (double)(i / G) / (G - 1);
    }
    kb_error err;
    kb_space *sp = kb_space_new_finite(rows, G * G, 2, &err);
    kb_config *cfg = kb_config_new(engine, &err);
    assert_non_null(sp);
    assert_int_equal(kb_config_set_number(cfg, "seed", (double)seed, &err), KB_OK);
    if (constant)
        assert_int_equal(kb_config_set_string(cfg, "prior_mean", "constant", &err), KB_OK);
    kb_engine *e = kb_engine_create(cfg, sp, &err);
    assert_non_null(e);
    kb_config_free(cfg);
    kb_space_free(sp);
    return e;
}

/* A smooth bump with its top inside the square, at (0.35, 0.6). */
static double bump(const double *x)
{
    return -((x[0] - 0.35) * (x[0] - 0.35) + (x[1] - 0.6) * (x[1] - 0.6));
}

/* gp-ucb with the interior prior (engine.c, kb__hyper_refit) picks, after the design, the
 * candidate with the highest c b(x) + mu(x) + 2 sd(x), mu and sd the exact posterior
 * (tu_exact_posterior on every row) of the residuals y_std - c b under the engine's
 * fitted kernel and noise, c the fitted height (kb_hyperparameters.interior_prior). */
static void gp_ucb_scores_the_interior_prior_exactly(void **state)
{
    (void)state;
    enum { T = 40 };
    kb_engine *e = unit_grid_engine("gp-ucb", 5, 0);
    const double *U = e->space->u;
    double X[T * 2], y[T], ys[T], mean[G * G], var[G * G];
    unsigned char allowed[G * G];
    kb_rng drv;
    kb_rng_seed(&drv, 9);
    kb_error err;
    kb_hyperparameters hp;
    for (size_t t = 0; t < T; t++) {
        for (size_t i = 0; i < G * G; i++)
            allowed[i] = !kb__excluded(e, i);
        kb_point p;
        kb_ask_result res;
        assert_int_equal(kb_engine_ask(e, 1, &p, &res, &err), KB_OK);
        kb_engine_hyperparameters(e, &hp);
        if (t >= e->design_n && hp.fits > 0) {
            for (size_t j = 0; j < t; j++)
                ys[j] = tu_output_y(X, y, t, 2, 0, 0.0, y[j]) -
                        hp.interior_prior * kb__interior_basis(&e->kernel, X + 2 * j);
            assert_int_equal(tu_exact_posterior(&e->kernel, X, ys, t, e->noise, U, G * G,
                                                mean, var), 0);
            double top = -INFINITY, got = 0.0;
            for (size_t i = 0; i < G * G; i++) {
                double u = hp.interior_prior * kb__interior_basis(&e->kernel, U + 2 * i) +
                           mean[i] + 2.0 * sqrt(fmax(var[i], 0.0));
                top = allowed[i] ? fmax(top, u) : top;
                got = i == p.index ? u : got;
            }
            if (got < top - 1e-9 * (1.0 + fabs(top)))
                fail_msg("trial %zu: UCB %.12g at the choice, %.12g at the best", t, got, top);
        }
        memcpy(X + 2 * t, p.x, 2 * sizeof *X);
        y[t] = bump(p.x) + 0.01 * kb_rng_normal(&drv);
        assert_int_equal(kb_engine_tell(e, p.handle, y[t], &err), KB_OK);
    }
    assert_true(hp.fits > 3 && hp.interior_prior != KB_INTERIOR_C && hp.interior_prior != 0.0);
    kb_engine_free(e);
}

/* Trials 4-30 on an edge of the grid (a coordinate 0 or 1: 80 of 441 candidates) over 10
 * seeds, on the bump above. */
static int edge_trials(const char *engine, int constant, double *height)
{
    int edges = 0;
    kb_error err;
    kb_rng drv;
    kb_rng_seed(&drv, 3);
    for (uint64_t seed = 1; seed <= 10; seed++) {
        kb_engine *e = unit_grid_engine(engine, seed, constant);
        for (int t = 0; t < 30; t++) {
            kb_point p;
            kb_ask_result res;
            assert_int_equal(kb_engine_ask(e, 1, &p, &res, &err), KB_OK);
            edges += t >= 3 && (p.x[0] == 0.0 || p.x[0] == 1.0 || p.x[1] == 0.0 || p.x[1] == 1.0);
            assert_int_equal(kb_engine_tell(e, p.handle, bump(p.x) + 0.01 * kb_rng_normal(&drv),
                                            &err), KB_OK);
        }
        kb_hyperparameters hp;
        kb_engine_hyperparameters(e, &hp);
        *height = hp.interior_prior;
        kb_engine_free(e);
    }
    return edges;
}

/* Every GP engine that serves finite sets sends fewer trials to the edges with the
 * interior prior than with prior_mean = constant (whose height reads 0): measured 3-11
 * of 540 trials against 65-77 on 20 seeds; the base rate is 98. */
static void interior_prior_keeps_trials_off_the_edges(void **state)
{
    (void)state;
    const char *engines[] = {"bbkb", "bkb", "gp-ucb", "gp-bucb", "gp-ts", "sgp-ts"};
    for (size_t k = 0; k < sizeof engines / sizeof engines[0]; k++) {
        double h_auto, h_const;
        int with = edge_trials(engines[k], 0, &h_auto);
        int without = edge_trials(engines[k], 1, &h_const);
        if (!(3 * with < without && without > 20))
            fail_msg("%s: %d trials of 270 on an edge with the interior prior, %d without",
                     engines[k], with, without);
        assert_true(h_const == 0.0 && h_auto != 0.0);
    }
}

/* Warm-start observations count towards the initial design (kb__design_index): a study
 * given k of them hands out design_n - k design trials, none once k >= design_n, on a box
 * (3 floats: 8 quasi-random rows) as on a finite set (3 draws). Before, a study warm-started
 * with 100 results still spent its first 2 (d + 1) trials, up to 40, on the design. */
static void warm_starts_count_towards_the_design(void **state)
{
    (void)state;
    kb_error err;
    double rows[40 * 3];
    kb_rng drv;
    kb_rng_seed(&drv, 17);
    for (size_t i = 0; i < 40 * 3; i++)
        rows[i] = kb_rng_uniform(&drv);
    for (int finite = 0; finite < 2; finite++)
        for (size_t k = 0; k <= 10; k += 5) {
            kb_space *sp = finite ? kb_space_new_finite(rows, 40, 3, &err)
                                  : kb_space_new_box(3, 256, &err);
            kb_config *cfg = kb_config_new("gp-ucb", &err);
            kb_engine *e = kb_engine_create(cfg, sp, &err);
            assert_non_null(e);
            size_t design = finite ? KB_FINITE_DESIGN : 8;
            assert_int_equal(e->design_n, design);
            for (size_t i = 0; i < k; i++) {
                const double *x = rows + 3 * (i + 10);
                assert_int_equal(kb_engine_observe(e, x, x[0] - x[1], &err), KB_OK);
            }
            size_t from_design = 0, index;
            for (int t = 0; t < 12; t++) {
                from_design += kb__design_index(e, &index);
                kb_point p;
                kb_ask_result res;
                assert_int_equal(kb_engine_ask(e, 1, &p, &res, &err), KB_OK);
                assert_int_equal(res.n, 1);
            }
            assert_int_equal(from_design, k >= design ? 0 : design - k);
            kb_engine_free(e);
            kb_config_free(cfg);
            kb_space_free(sp);
        }
}

/* The first point engine eng hands out on a 3-d box with the given seed, into x. */
static void first_box_point(const char *eng, double seed, double x[3])
{
    kb_error err;
    kb_space *sp = kb_space_new_box(3, 256, &err);
    kb_config *cfg = kb_config_new(eng, &err);
    assert_int_equal(kb_config_set_number(cfg, "seed", seed, &err), KB_OK);
    kb_engine *e = kb_engine_create(cfg, sp, &err);
    assert_non_null(e);
    kb_point p;
    kb_ask_result res;
    assert_int_equal(kb_engine_ask(e, 1, &p, &res, &err), KB_OK);
    assert_int_equal(res.n, 1);
    memcpy(x, p.x, 3 * sizeof *x);
    kb_engine_free(e);
    kb_config_free(cfg);
    kb_space_free(sp);
}

/* A box study's initial design follows the engine's seed, in every engine: the space
 * arrives with one fixed pool, whose first rows every engine but bbkb / bkb handed out as
 * its design, the same for every seed (every gp-ucb run of Hartmann-6 then raced to one
 * basin; docs/BENCHMARKS.md, fifty-fourth session). The same seed, the same point. */
static void box_design_follows_the_seed(void **state)
{
    (void)state;
    for (const char *const *eng = kb_engine_names(); *eng; eng++) {
        double a[3], b[3], c[3];
        first_box_point(*eng, 1, a);
        first_box_point(*eng, 1, b);
        first_box_point(*eng, 2, c);
        if (memcmp(a, b, sizeof a) != 0)
            fail_msg("%s: seed 1 handed out two different first points", *eng);
        if (memcmp(a, c, sizeof a) == 0)
            fail_msg("%s: seeds 1 and 2 handed out the same first point", *eng);
    }
}

/* A fit records its noise sd in y's units (the fitted standardized noise times the sd
 * the fit's values were scaled by) and the output stats follow the new floor at once. */
static void refit_sets_noise_sd_of_the_warp(void **state)
{
    (void)state;
    kb_error err;
    kb_engine *e = box3_engine("gp-ucb");
    kb_rng drv;
    kb_rng_seed(&drv, 21);
    enum { N = 40 };
    double X[N * 3], y[N];
    for (size_t i = 0; i < N; i++) {
        for (int j = 0; j < 3; j++)
            X[3 * i + j] = kb_rng_uniform(&drv);
        y[i] = 0.3 * sin(6.0 * X[3 * i]) - 5.0 * X[3 * i + 1] * X[3 * i + 1] +
               0.5 * kb_rng_normal(&drv);
        assert_int_equal(kb_engine_observe(e, X + 3 * i, y[i], &err), KB_OK);
    }
    assert_true(e->warp);
    double m, sd;
    kb__output_stats(e, &m, &sd); /* what the fit will scale by */
    assert_int_equal(kb__hyper_refit(e, &err), KB_OK);
    assert_true(e->fit_noise_sd > 0.0);
    assert_true(fabs(e->fit_noise_sd - sqrt(e->noise) * sd) <= 1e-12 * e->fit_noise_sd);
    double floor = warp_floor(e, y, N);
    for (size_t i = 0; i < N; i++)
        assert_true(fabs(kb__output_y(e, y[i]) - tu_output_y(X, y, N, 3, 1, floor, y[i])) <
                    1e-9);
    kb_engine_free(e);
}

/* A 6-d box study whose values are mostly noise (a bowl of range ~2 plus N(0, 5^2)),
 * bbkb at its defaults, eight trials pending: after 250 tells the fitted noise must carry
 * more of the variance than the kernel. With lengthscales allowed down to 0.001 the fits
 * made the kernel white instead (lengthscales far below the rows' spacing, noise at its
 * prior's mode), and the dictionary took nearly every row: 16 ms of CPU per round trip
 * and a worse search (docs/BENCHMARKS.md, forty-sixth session). Seeds 1-3. */
static void noise_is_not_fitted_as_a_white_kernel(void **state)
{
    (void)state;
    enum { D6 = 6, PENDING = 8, TELLS = 250 };
    kb_error err;
    for (uint64_t seed = 1; seed <= 3; seed++) {
        kb_space *box = kb_space_new_box(D6, 2048, &err);
        kb_config *cfg = kb_config_new("bbkb", &err);
        assert_int_equal(kb_config_set_number(cfg, "seed", (double)seed, &err), KB_OK);
        kb_engine *e = kb_engine_create(cfg, box, &err);
        assert_non_null(e);
        kb_rng noise;
        kb_rng_seed(&noise, seed + 100);
        kb_point out[PENDING];
        size_t n = 0;
        for (int told = 0; told < TELLS; told++) {
            kb_ask_result res;
            while (n < PENDING) {
                assert_int_equal(kb_engine_ask(e, 1, &out[n], &res, &err), KB_OK);
                if (res.n == 0)
                    break;
                n++;
            }
            double v = 5.0 * kb_rng_normal(&noise);
            for (size_t j = 0; j < D6; j++)
                v -= (out[0].x[j] - 0.3) * (out[0].x[j] - 0.3);
            assert_int_equal(kb_engine_tell(e, out[0].handle, v, &err), KB_OK);
            memmove(out, out + 1, --n * sizeof *out);
        }
        kb_hyperparameters hp;
        assert_int_equal(kb_engine_hyperparameters(e, &hp), KB_OK);
        if (!(hp.noise > hp.kernel_variance))
            fail_msg("seed %llu: noise %g, kernel variance %g, lengthscales %g %g %g %g %g %g",
                     (unsigned long long)seed, hp.noise, hp.kernel_variance,
                     hp.lengthscales[0], hp.lengthscales[1], hp.lengthscales[2],
                     hp.lengthscales[3], hp.lengthscales[4], hp.lengthscales[5]);
        kb_engine_free(e);
        kb_config_free(cfg);
        kb_space_free(box);
    }
}

/* A noise-free search that has put most of its trials next to its best point: a 3-d
 * quadratic told at the 8-point design and then at 150 points within ~0.003 of its
 * optimum. The warp's spread is floored at KB_WARP_DESIGN_SHARE of the design's (the
 * cluster's own spread is below a hundredth of that floor), kb__output_y matches the
 * reference with that floor, and the worst value stays more than two floors below the
 * median: the box outside the cluster is not pressed into a few of the cluster's spreads
 * (which read a quadratic as a spike: docs/BENCHMARKS.md, forty-third session). */
static void warp_spread_floored_by_design(void **state)
{
    (void)state;
    kb_error err;
    kb_engine *e = box3_engine("gp-ucb");
    kb_rng drv;
    kb_rng_seed(&drv, 22);
    enum { N = 158 };
    double X[N * 3], y[N], worst = 0.0;
    assert_int_equal(e->design_n, 8);
    for (size_t i = 0; i < N; i++) {
        y[i] = 0.0;
        for (int j = 0; j < 3; j++) {
            double x = i < 8 ? kb_rng_uniform(&drv) : 0.3 + 0.003 * kb_rng_normal(&drv);
            X[3 * i + j] = x;
            y[i] -= (x - 0.3) * (x - 0.3);
        }
        worst = fmin(worst, y[i]);
        assert_int_equal(kb_engine_observe(e, X + 3 * i, y[i], &err), KB_OK);
    }
    assert_int_equal(kb__hyper_refit(e, &err), KB_OK);
    double floor = warp_floor(e, y, N), m, sd;
    assert_true(floor > 100.0 * KB_WARP_NOISE_SDS * e->fit_noise_sd); /* the design's binds */
    double own = tu_upper_spread(y + 8, N - 8, NULL); /* the cluster's, design-free */
    assert_true(own > 0.0 && own < floor / 100.0);
    kb__output_stats(e, &m, &sd);
    assert_true(fabs(e->out_spread - floor) <= 1e-12 * floor);
    for (size_t i = 0; i < N; i++)
        assert_true(fabs(kb__output_y(e, y[i]) - tu_output_y(X, y, N, 3, 1, floor, y[i])) <
                    1e-9);
    assert_true(e->out_median - (kb__output_y(e, worst) * sd + m) > 2.0 * floor);
    kb_engine_free(e);
}

/* Engine `name` on a 3-d box told y = sin(6 x0) + 0.02 x1 (x2 unused) plus noise of sd
 * `noise_sd` at 80 uniform points; returns it after 9 asks (abandoned), past the 8-point
 * initial design, so fitted. */
static kb_engine *fitted_on_weak_dims(const char *name, double noise_sd)
{
    kb_error err;
    kb_engine *e = box3_engine(name);
    kb_rng drv;
    kb_rng_seed(&drv, 8);
    for (int i = 0; i < 80; i++) {
        double x[3] = {kb_rng_uniform(&drv), kb_rng_uniform(&drv), kb_rng_uniform(&drv)};
        double y = sin(6.0 * x[0]) + 0.02 * x[1] + noise_sd * kb_rng_normal(&drv);
        assert_int_equal(kb_engine_observe(e, x, y, &err), KB_OK);
    }
    for (int r = 0; r < 9; r++) {
        kb_point p;
        kb_ask_result res;
        assert_int_equal(kb_engine_ask(e, 1, &p, &res, &err), KB_OK);
        assert_int_equal(kb_engine_abandon(e, p.handle, &err), KB_OK);
    }
    assert_true(e->n_fits >= 1);
    return e;
}

/* Dimensions the noise hides leave a UCB engine's model (engine.c, drop_hidden_dims): with
 * noise of sd 0.3, x1 and x2, whose whole range moves f by at most 0.02, get the
 * lengthscale 1e3; without noise x1's 0.02 is seen and kept. x0 keeps its fit either way.
 * The rule, recomputed here with the textbook RBF (the default kernel), holds for each
 * dimension's fitted value. gp-ts keeps every dimension. */
static void noise_hidden_dimensions_leave_the_model(void **state)
{
    (void)state;
    for (int noisy = 0; noisy < 2; noisy++) {
        kb_engine *e = fitted_on_weak_dims("gp-ucb", noisy ? 0.3 : 0.0);
        const kb_kernel *k = &e->kernel;
        for (size_t j = 0; j < 3; j++) {
            double l = e->fit_ls[j];
            double spread = 2.0 * k->variance * (1.0 - textbook_base(k->kind, 1.0 / l));
            int hidden = spread < e->noise;
            assert_true(k->lengthscales[j] == (hidden ? 1e3 : l));
            if (j == 0 || (j == 1 && !noisy))
                assert_false(hidden);
            if (j > 0 && noisy)
                assert_true(hidden);
        }
        assert_true(e->fit_ls[0] < 0.5); /* sin(6 x0): a short lengthscale either way */
        kb_engine_free(e);
    }
    kb_engine *t = fitted_on_weak_dims("gp-ts", 0.3); /* Thompson sampling keeps them all */
    assert_null(t->fit_ls);
    assert_true(t->kernel.lengthscales[1] < 1e3 && t->kernel.lengthscales[2] < 1e3);
    kb_engine_free(t);
}

/* The hidden dimensions come back with a restore: the replayed engine has the fit's own
 * lengthscales and the model's (1e3 where hidden), and asks the same points. */
static void hidden_dimensions_survive_a_restore(void **state)
{
    (void)state;
    kb_engine *e = fitted_on_weak_dims("gp-ucb", 0.3);
    kb_engine *r = tu_restored(e);
    assert_true(e->kernel.lengthscales[2] == 1e3);
    assert_memory_equal(r->fit_ls, e->fit_ls, 3 * sizeof *e->fit_ls);
    assert_memory_equal(r->kernel.lengthscales, e->kernel.lengthscales, 3 * sizeof(double));
    next_asks_agree(e, r, 3);
    kb_engine_free(r);
    kb_engine_free(e);
}

/* Categorical main effects under noise (engine.c, categorical_mix): with categorical_kernel
 * = additive, on a box with a categorical, the UCB engines' kernel gets the additive
 * overlap term while the fitted noise is at least 0.01, its fitted share in (0, 1)
 * reported by kb_engine_hyperparameters; on noise-free data the next fit after one that
 * found noise below 0.01 drops it, gp-ts never has it and the default (joint) leaves it
 * off; all three report 0. A
 * restored engine has the same kernel and asks the same points. */
static void categorical_term_under_noise(void **state)
{
    (void)state;
    static const double COST[4] = {0.0, 0.6, 0.3, 1.0};
    static const struct {
        const char *engine, *categorical;
        double noise_sd;
        int on;
    } cases[] = {{"gp-ucb", "additive", 0.3, 1}, {"bbkb", "additive", 0.3, 1},
                 {"gp-ucb", "additive", 0.0, 0}, {"gp-ts", "additive", 0.3, 0},
                 {"gp-ucb", "joint", 0.3, 0}};
    for (size_t t = 0; t < sizeof cases / sizeof cases[0]; t++) {
        kb_error err;
        kb_engine *e = levels_engine_with(cases[t].engine, cases[t].categorical);
        kb_rng drv;
        kb_rng_seed(&drv, 31);
        for (int i = 0; i < 80; i++) {
            double k = (double)kb_rng_below(&drv, 5), c = (double)kb_rng_below(&drv, 4);
            double x[3] = {kb_rng_uniform(&drv), (k + 0.5) / 5.0, (c + 0.5) / 4.0};
            double y = sin(5.0 * x[0]) - 0.1 * k - COST[(size_t)c] +
                       cases[t].noise_sd * kb_rng_normal(&drv);
            assert_int_equal(kb_engine_observe(e, x, y, &err), KB_OK);
        }
        for (int r = 0; r < 9; r++) { /* past the initial design: an ask fits */
            kb_point p;
            kb_ask_result res;
            assert_int_equal(kb_engine_ask(e, 1, &p, &res, &err), KB_OK);
            assert_int_equal(kb_engine_abandon(e, p.handle, &err), KB_OK);
        }
        /* the switch reads the noise of the fit before: the first fit starts at 0.01 */
        if (cases[t].noise_sd == 0.0)
            assert_int_equal(kb__hyper_refit(e, &err), KB_OK);
        kb_hyperparameters hp;
        assert_int_equal(kb_engine_hyperparameters(e, &hp), KB_OK);
        assert_true(hp.fits >= 1);
        assert_int_equal(e->kernel.additive, cases[t].on);
        if (cases[t].on) {
            assert_true(e->noise >= 0.01);
            assert_true(hp.categorical_mix > 0.0 && hp.categorical_mix < 1.0);
            assert_true(hp.categorical_mix == e->kernel.mix);
            kb_engine *r = tu_restored(e);
            assert_true(r->kernel.additive && r->kernel.mix == e->kernel.mix);
            next_asks_agree(e, r, 3);
            kb_engine_free(r);
        } else {
            assert_true(hp.categorical_mix == 0.0);
        }
        if (cases[t].noise_sd == 0.0)
            assert_true(e->noise < 0.01);
        kb_engine_free(e);
    }
}

/* Issue 12: the order of a categorical's choices changes nothing. Two engines see the same
 * observations, the second with the choices coded in another order (choice c as
 * PERM[c]); their fitted hyperparameters and posteriors agree at every point (coded each
 * way), and every pool point lies on the integer's and the categorical's values. (The
 * engines' next choices themselves differ: a pool draws choices by index.) */
static void categorical_order_does_not_matter(void **state)
{
    (void)state;
    enum { N = 40, Q = 60 };
    static const size_t PERM[4] = {2, 0, 3, 1};
    static const double COST[4] = {0.0, 1.5, 0.4, 2.2};
    kb_error err;
    kb_rng drv;
    kb_rng_seed(&drv, 21);
    kb_engine *a = levels_engine(), *b = levels_engine();
    for (size_t i = 0; i < N + Q; i++) {
        double x = kb_rng_uniform(&drv), k = (double)kb_rng_below(&drv, 5);
        size_t c = (size_t)kb_rng_below(&drv, 4);
        double xa[3] = {x, (k + 0.5) / 5.0, ((double)c + 0.5) / 4.0};
        double xb[3] = {x, xa[1], ((double)PERM[c] + 0.5) / 4.0};
        if (i >= N) { /* a query point */
            double ma, sa, mb, sb;
            assert_int_equal(kb_engine_posterior(a, xa, 1, &ma, &sa, &err), KB_OK);
            assert_int_equal(kb_engine_posterior(b, xb, 1, &mb, &sb, &err), KB_OK);
            assert_true(fabs(ma - mb) < 1e-6 && fabs(sa - sb) < 1e-6);
            continue;
        }
        double y = sin(6.0 * x) - 0.3 * (k - 2.0) * (k - 2.0) - COST[c];
        assert_int_equal(kb_engine_observe(a, xa, y, &err), KB_OK);
        assert_int_equal(kb_engine_observe(b, xb, y, &err), KB_OK);
        /* past the initial design (8 points), an ask fits and redraws the pool */
        for (int r = 0; i == N - 1 && r < 9; r++) {
            kb_point pa, pb;
            kb_ask_result res;
            assert_int_equal(kb_engine_ask(a, 1, &pa, &res, &err), KB_OK);
            assert_int_equal(kb_engine_ask(b, 1, &pb, &res, &err), KB_OK);
            /* the pools code different choices at the same index: no pending points */
            assert_int_equal(kb_engine_abandon(a, pa.handle, &err), KB_OK);
            assert_int_equal(kb_engine_abandon(b, pb.handle, &err), KB_OK);
        }
    }
    kb_hyperparameters ha, hb;
    assert_int_equal(kb_engine_hyperparameters(a, &ha), KB_OK);
    assert_int_equal(kb_engine_hyperparameters(b, &hb), KB_OK);
    assert_true(ha.fits >= 1 && ha.fits == hb.fits);
    for (size_t j = 0; j < 3; j++)
        assert_true(fabs(ha.lengthscales[j] / hb.lengthscales[j] - 1.0) < 1e-6);
    const kb_space *s = a->space;
    for (size_t i = 0; i < s->n; i++)
        for (size_t j = 1; j < 3; j++) {
            double L = j == 1 ? 5.0 : 4.0, v = s->u[i * 3 + j] * L - 0.5;
            assert_true(fabs(v - round(v)) < 1e-12);
        }
    kb_engine *r = tu_restored(a); /* the levels survive a snapshot: it goes on alike */
    next_asks_agree(a, r, 3);
    kb_engine_free(r);
    kb_engine_free(a);
    kb_engine_free(b);
}

/* bbkb on a box of two floats and a categorical of 3 choices, at its defaults but for
 * choice_floor (< 0: not set). */
static kb_engine *seeded_choice_engine(const char *engine, double choice_floor, double seed)
{
    kb_error err;
    size_t levels[3] = {0, 0, 3};
    unsigned char cat[3] = {0, 0, 1};
    kb_space *sp = kb_space_new_box(3, 256, &err);
    assert_int_equal(kb_space_set_levels(sp, levels, cat, &err), KB_OK);
    kb_config *cfg = kb_config_new(engine, &err);
    assert_int_equal(kb_config_set_number(cfg, "seed", seed, &err), KB_OK);
    if (choice_floor >= 0.0)
        assert_int_equal(kb_config_set_number(cfg, "choice_floor", choice_floor, &err), KB_OK);
    kb_engine *e = kb_engine_create(cfg, sp, &err);
    assert_non_null(e);
    kb_space_free(sp);
    kb_config_free(cfg);
    return e;
}

static kb_engine *choice_engine(const char *engine, double choice_floor)
{
    return seeded_choice_engine(engine, choice_floor, 7);
}

/* Choice c of the categorical coordinate 2 (3 choices) in internal coordinates. */
static double choice_u(size_t c) { return ((double)c + 0.5) / 3.0; }

/* How many of the pool's rows take each of the 3 choices. */
static void pool_choices(const kb_engine *e, size_t count[3])
{
    count[0] = count[1] = count[2] = 0;
    for (size_t i = 0; i < e->space->n; i++)
        count[kb__category(e->space->u[i * 3 + 2], 3)]++;
}

/* Choice floors (engine.c, starved_choice): with t observations, a choice taken fewer than
 * min(choice_floor x 2 sqrt(t ln c / ((e - 1) c)), t / 2c) times gets the whole pool, the
 * most starved first, its local half centered on its own best points; at the floor, with
 * choice_floor 0, or when the noise hides the categorical, the pool mixes the choices as
 * before. */
/* A pool drawn under a choice floor alone; the starved choice's key (0: none). */
static size_t floor_pool(kb_engine *e, double choice_floor)
{
    kb__pool_rules r = {.choice_floor = choice_floor};
    kb__refresh_pool(e, 0, &r);
    return r.key;
}

static void starved_choice_gets_the_pool(void **state)
{
    (void)state;
    kb_error err;
    kb_rng drv;
    kb_rng_seed(&drv, 5);
    kb_engine *e = choice_engine("bbkb", -1.0); /* the default, 2 */
    /* t = 60: floor min(2 x 2 sqrt(60 ln 3 / ((e - 1) 3)), 10) = 10 (the first term 14.3) */
    /* choice 0: 51 observations, the best at x0 = 0.95; choice 1: 7; choice 2: 2, both at
     * x0 = 0.1, below every value of choice 0 */
    for (size_t i = 0; i < 60; i++) {
        size_t c = i < 2 ? 2 : i < 9 ? 1 : 0;
        double x[3] = {c == 2 ? 0.1 : 0.5 + 0.45 * kb_rng_uniform(&drv), kb_rng_uniform(&drv),
                       choice_u(c)};
        assert_int_equal(kb_engine_observe(e, x, c == 2 ? -1.0 : x[0], &err), KB_OK);
    }
    size_t count[3];
    /* keys 1 + j x 4 + l: choice 2 of coordinate 2 is 11, choice 1 is 10 */
    assert_int_equal(kb__starved_choice(e, 2.0), 11);
    assert_int_equal(floor_pool(e, 2.0), 11);
    pool_choices(e, count);
    assert_int_equal(count[2], e->space->n); /* choice 2 is further below (8 against 3) */
    /* the local half is centered on choice 2's observations (x0 = 0.1), not on the best
     * one (x0 near 0.95) */
    size_t near = 0;
    for (size_t i = e->space->n / 2; i < e->space->n; i++)
        near += e->space->u[i * 3] < 0.3;
    assert_true(near > e->space->n / 4);
    assert_int_equal(kb__starved_choice(e, 0.0), 0);
    assert_int_equal(floor_pool(e, 0.0), 0); /* off */
    pool_choices(e, count);
    assert_true(count[0] > 0 && count[1] > 0 && count[2] > 0);
    double ls = e->kernel.lengthscales[2];
    e->kernel.lengthscales[2] = KB_OFF_LENGTHSCALE; /* hidden by the noise: no floor */
    assert_int_equal(floor_pool(e, 2.0), 0);
    pool_choices(e, count);
    assert_true(count[0] > 0 && count[1] > 0 && count[2] > 0);
    e->kernel.lengthscales[2] = ls;
    for (size_t k = 0; k < 8; k++) { /* choice 2 at its floor of 10: choice 1 is next */
        double x[3] = {kb_rng_uniform(&drv), kb_rng_uniform(&drv), choice_u(2)};
        assert_int_equal(kb_engine_observe(e, x, 0.0, &err), KB_OK);
    }
    /* t = 68: floor min(15.2, 11.3) = 11.3; choice 1 has 7, choice 2 has 10 */
    assert_int_equal(floor_pool(e, 2.0), 10);
    pool_choices(e, count);
    assert_int_equal(count[1], e->space->n);
    for (size_t k = 0; k < 6; k++) {
        double x[3] = {kb_rng_uniform(&drv), kb_rng_uniform(&drv), choice_u(k % 2 ? 1 : 2)};
        assert_int_equal(kb_engine_observe(e, x, 0.0, &err), KB_OK);
    }
    /* t = 74: floor 12.3; choices take 51 / 10 / 13: choice 1 still short, so it goes */
    floor_pool(e, 2.0);
    pool_choices(e, count);
    assert_int_equal(count[1], e->space->n);
    for (size_t k = 0; k < 3; k++) {
        double x[3] = {kb_rng_uniform(&drv), kb_rng_uniform(&drv), choice_u(1)};
        assert_int_equal(kb_engine_observe(e, x, 0.0, &err), KB_OK);
    }
    /* t = 77: floor 12.8; 51 / 13 / 13: none starved, the pool mixes them */
    assert_int_equal(kb__starved_choice(e, 2.0), 0);
    assert_int_equal(floor_pool(e, 2.0), 0);
    pool_choices(e, count);
    assert_true(count[0] > 0 && count[1] > 0 && count[2] > 0);
    kb_engine_free(e);
}

/* The Thompson engines keep a categorical the noise hides in their model (no
 * drop_hidden_dims), so the floors ask whether the noise hides it: with its whole effect
 * 2 s2 (1 - exp(-1 / 2 l^2)) = 0.79 (l = 1, s2 = 1) above the noise variance a starved
 * choice has a floor; with the noise variance at 1 it has none. */
static void hidden_categorical_has_no_floor(void **state)
{
    (void)state;
    kb_error err;
    kb_engine *e = choice_engine("gp-ts", 2.0);
    for (size_t i = 0; i < 60; i++) { /* 58 of choice 0, 2 of choice 2, none of choice 1 */
        double x[3] = {i / 60.0, 0.5, choice_u(i < 2 ? 2 : 0)};
        assert_int_equal(kb_engine_observe(e, x, x[0], &err), KB_OK);
    }
    for (size_t j = 0; j < 3; j++)
        e->kernel.lengthscales[j] = 1.0;
    e->kernel.variance = 1.0;
    e->noise = 0.01;
    assert_int_equal(kb__starved_choice(e, 2.0), 10); /* choice 1 (0 of 60) */
    e->noise = 1.0;
    assert_int_equal(kb__starved_choice(e, 2.0), 0);
    kb_engine_free(e);
}

/* A categorical of more than 4 choices has no floor (its floors would take up to half the
 * trials): 40 observations all of choice 0 of 5 leave the pool mixing every choice. */
static void many_choices_have_no_floor(void **state)
{
    (void)state;
    kb_error err;
    size_t levels[2] = {0, 5};
    unsigned char cat[2] = {0, 1};
    kb_space *sp = kb_space_new_box(2, 256, &err);
    assert_int_equal(kb_space_set_levels(sp, levels, cat, &err), KB_OK);
    kb_config *cfg = kb_config_new("bbkb", &err);
    kb_engine *e = kb_engine_create(cfg, sp, &err);
    assert_non_null(e);
    for (int i = 0; i < 40; i++) {
        double x[2] = {i / 40.0, 0.1};
        assert_int_equal(kb_engine_observe(e, x, x[0], &err), KB_OK);
    }
    floor_pool(e, 2.0);
    size_t seen[5] = {0};
    for (size_t i = 0; i < e->space->n; i++)
        seen[kb__category(e->space->u[i * 2 + 1], 5)]++;
    for (size_t l = 0; l < 5; l++)
        assert_true(seen[l] > 0 && seen[l] < e->space->n);
    kb_engine_free(e);
    kb_space_free(sp);
    kb_config_free(cfg);
}

/* Points of the last pool within 0.3 (each coordinate) of (cx, cy). */
static size_t pool_near(const kb_engine *e, double cx, double cy)
{
    size_t near = 0;
    for (size_t i = 0; i < e->space->n; i++)
        near += fabs(e->space->u[i * 2] - cx) < 0.3 && fabs(e->space->u[i * 2 + 1] - cy) < 0.3;
    return near;
}

/* Climb pools among two pools drawn in a row under r (climbs take the odd-numbered). */
static uint64_t climbs_in_two_pools(kb_engine *e, kb__pool_rules *r)
{
    uint64_t before = r->climb_pools;
    kb__refresh_pool(e, 0, r);
    kb__refresh_pool(e, 0, r);
    return r->climb_pools - before;
}

/* bbkb on a 2-d box of 512 candidates, told 250 noise-free observations: 0 at uniform
 * points, the best (1.0) at A = (0.8, 0.8) as the 101st, `second` at B = (0.2, 0.2) next,
 * then 148 at 0.9 within 0.01 of A; with `slope`, before A, 0.8 at (0.8, 0.55) and 0.95
 * at (0.8, 0.65): a point 2.5 lengthscales from A with a better one 1 lengthscale away,
 * as on the incumbent's own slope. Lengthscales 0.1, fitted noise 1e-6. */
static kb_engine *stalled_engine(kb_space **sp, kb_config **cfg, double second, int slope)
{
    kb_error err;
    kb_rng drv;
    kb_rng_seed(&drv, 3);
    *sp = kb_space_new_box(2, 512, &err);
    *cfg = kb_config_new("bbkb", &err);
    kb_engine *e = kb_engine_create(*cfg, *sp, &err);
    assert_non_null(e);
    for (size_t i = 0; i < 250; i++) {
        double x[2] = {kb_rng_uniform(&drv), kb_rng_uniform(&drv)}, y = 0.0;
        if (slope && (i == 98 || i == 99)) {
            x[0] = 0.8;
            x[1] = i == 98 ? 0.55 : 0.65;
            y = i == 98 ? 0.8 : 0.95;
        } else if (i == 100 || i == 101) {
            x[0] = x[1] = i == 100 ? 0.8 : 0.2;
            y = i == 100 ? 1.0 : second;
        } else if (i > 101) {
            x[0] = 0.8 + 0.01 * kb_rng_uniform(&drv);
            x[1] = 0.8 - 0.01 * kb_rng_uniform(&drv);
            y = 0.9;
        }
        assert_int_equal(kb_engine_observe(e, x, y, &err), KB_OK);
    }
    e->kernel.lengthscales[0] = e->kernel.lengthscales[1] = 0.1;
    e->noise = 1e-6;
    return e;
}

/* Climbs (engine.c, climb_center): a noise-free run whose best (A) has not improved in
 * its last 148 of 250 observations gives every other pool to a climb from B (0.5, the
 * second peak: no better point within two lengthscales): all local points around B, no
 * quasi-random half. None under noise, with climb_after 0, or once the best improved
 * within the last climb_after observations. */
static void stalled_run_climbs_a_second_basin(void **state)
{
    (void)state;
    kb_error err;
    kb_space *sp;
    kb_config *cfg;
    kb_engine *e = stalled_engine(&sp, &cfg, 0.5, 0);
    kb__pool_rules r = {.climb_after = 100};
    if (e->space->generation % 2 == 0)
        kb__refresh_pool(e, 0, &r);
    assert_int_equal(r.climb_pools, 0);
    kb__refresh_pool(e, 0, &r);
    assert_int_equal(r.climb_pools, 1);
    assert_true(pool_near(e, 0.2, 0.2) > e->space->n * 9 / 10); /* measured 499 of 512 */
    kb__refresh_pool(e, 0, &r);               /* the next pool: the usual one */
    assert_int_equal(r.climb_pools, 1);
    assert_true(pool_near(e, 0.2, 0.2) < e->space->n / 4);   /* measured 63 */
    e->noise = 1e-2;                          /* a noisy fit: no climbs */
    assert_int_equal(climbs_in_two_pools(e, &r), 0);
    e->noise = 1e-6;
    r.climb_after = 0;                        /* off */
    assert_int_equal(climbs_in_two_pools(e, &r), 0);
    r.climb_after = 160;                      /* the best is 149 observations old */
    assert_int_equal(climbs_in_two_pools(e, &r), 0);
    r.climb_after = 100;
    assert_int_equal(climbs_in_two_pools(e, &r), 1);
    double x[2] = {0.5, 0.5};                 /* a new best: no longer stalled */
    assert_int_equal(kb_engine_observe(e, x, 2.0, &err), KB_OK);
    e->kernel.lengthscales[0] = e->kernel.lengthscales[1] = 0.1;
    e->noise = 1e-6;
    assert_int_equal(climbs_in_two_pools(e, &r), 0);
    kb_engine_free(e);
    kb_space_free(sp);
    kb_config_free(cfg);
}

/* A climb starts from a peak: not from a point on the incumbent's slope, better as it is
 * than B (the slope of stalled_engine: the climb goes to B), nor from a point in the
 * worst quarter of the observations (B at -1, below the 0 of the uniform points: no
 * climb at all, where the point farther than two lengthscales alone would take one). */
static void climbs_start_from_a_peak(void **state)
{
    (void)state;
    kb_space *sp;
    kb_config *cfg;
    for (int worst = 0; worst < 2; worst++) {
        kb_engine *e = stalled_engine(&sp, &cfg, worst ? -1.0 : 0.5, !worst);
        kb__pool_rules r = {.climb_after = 100};
        if (e->space->generation % 2 == 0)
            kb__refresh_pool(e, 0, &r);
        kb__refresh_pool(e, 0, &r); /* the odd-numbered pool */
        assert_int_equal(r.climb_pools, !worst);
        if (!worst)
            assert_true(pool_near(e, 0.2, 0.2) > e->space->n * 9 / 10);
        kb_engine_free(e);
        kb_space_free(sp);
        kb_config_free(cfg);
    }
}

/* Distances in lengthscales count a categorical coordinate as the kernel does (0 or 1),
 * not by its choices' bin centres: with a categorical of 5 choices beside a float, B (0.5)
 * differs from the best (1.0) and its neighbours (0.9) only in the choice, the next one
 * up (centres 0.2 apart, 0.67 lengthscales; 1 / 0.3 by identity), so B is the second
 * peak and the odd pool climbs from it: most of its points take B's choice (measured
 * 458 of 512). The bin-centre distance made B a point on the best one's slope: no climb. */
static void climbs_count_choices_unordered(void **state)
{
    (void)state;
    kb_error err;
    kb_rng drv;
    kb_rng_seed(&drv, 5);
    size_t levels[2] = {0, 5};
    unsigned char cat[2] = {0, 1};
    kb_space *sp = kb_space_new_box(2, 512, &err);
    assert_int_equal(kb_space_set_levels(sp, levels, cat, &err), KB_OK);
    kb_config *cfg = kb_config_new("bbkb", &err);
    kb_engine *e = kb_engine_create(cfg, sp, &err);
    assert_non_null(e);
    for (size_t i = 0; i < 250; i++) {
        double x[2] = {kb_rng_uniform(&drv), kb_rng_uniform(&drv)}, y = 0.0;
        if (i >= 100) {
            x[0] = i < 102 ? 0.8 : 0.8 + 0.01 * kb_rng_uniform(&drv);
            x[1] = i == 101 ? 0.7 : 0.9;
            y = i == 100 ? 1.0 : i == 101 ? 0.5 : 0.9;
        }
        assert_int_equal(kb_engine_observe(e, x, y, &err), KB_OK);
    }
    e->kernel.lengthscales[0] = 0.1;
    e->kernel.lengthscales[1] = 0.3;
    e->noise = 1e-6;
    kb__pool_rules r = {.climb_after = 100};
    if (e->space->generation % 2 == 0)
        kb__refresh_pool(e, 0, &r);
    kb__refresh_pool(e, 0, &r);
    assert_int_equal(r.climb_pools, 1);
    size_t took = 0;
    for (size_t i = 0; i < e->space->n; i++)
        took += kb__category(e->space->u[i * 2 + 1], 5) == 3;
    assert_true(took > e->space->n * 7 / 10);
    kb_engine_free(e);
    kb_space_free(sp);
    kb_config_free(cfg);
}

/* A climb runs its course: once 60 observations since the stall lie within two
 * lengthscales of B and B's best there (0.5) is over climb_after observations old, no
 * climb; a new best near B (0.6) makes the climb go on from it. */
static void spent_climb_stops(void **state)
{
    (void)state;
    kb_error err;
    kb_space *sp;
    kb_config *cfg;
    kb_engine *e = stalled_engine(&sp, &cfg, 0.5, 0);
    for (size_t i = 0; i < 61; i++) {
        double x[2] = {0.2 + 0.001 * (double)(i % 10), 0.2 + 0.001 * (double)(i / 10)};
        assert_int_equal(kb_engine_observe(e, x, i < 60 ? 0.4 : 0.6, &err), KB_OK);
        if (i == 59) {
            e->kernel.lengthscales[0] = e->kernel.lengthscales[1] = 0.1;
            e->noise = 1e-6;
            kb__pool_rules r = {.climb_after = 100};
            assert_int_equal(climbs_in_two_pools(e, &r), 0);
        }
    }
    e->kernel.lengthscales[0] = e->kernel.lengthscales[1] = 0.1;
    e->noise = 1e-6;
    kb__pool_rules r = {.climb_after = 100};
    assert_int_equal(climbs_in_two_pools(e, &r), 1);
    kb_engine_free(e);
    kb_space_free(sp);
    kb_config_free(cfg);
}

/* End to end: bbkb at its defaults, told a noise-free function of two bumps (the lower one
 * broad, the taller one narrow), stalls and takes climb pools within 320 asks; a restored
 * engine asks the same points. */
static void climbs_end_to_end(void **state)
{
    (void)state;
    kb_error err;
    kb_space *sp = kb_space_new_box(2, 256, &err);
    kb_config *cfg = kb_config_new("bbkb", &err);
    assert_int_equal(kb_config_set_number(cfg, "seed", 7, &err), KB_OK);
    kb_engine *e = kb_engine_create(cfg, sp, &err);
    assert_non_null(e);
    for (size_t t = 0; t < 320; t++) {
        kb_point p;
        kb_ask_result res;
        assert_int_equal(kb_engine_ask(e, 1, &p, &res, &err), KB_OK);
        double a0 = p.x[0] - 0.25, a1 = p.x[1] - 0.3, b0 = p.x[0] - 0.8, b1 = p.x[1] - 0.75;
        double y = exp(-(a0 * a0 + a1 * a1) / (2.0 * 0.2 * 0.2)) +
                   1.2 * exp(-(b0 * b0 + b1 * b1) / (2.0 * 0.05 * 0.05));
        assert_int_equal(kb_engine_tell(e, p.handle, y, &err), KB_OK);
    }
    double climbs;
    assert_int_equal(kb_engine_stat(e, "climb_pools", &climbs, &err), KB_OK);
    assert_true(climbs > 0); /* measured 26 */
    kb_engine *r = tu_restored(e);
    next_asks_agree(e, r, 3);
    kb_engine_free(r);
    kb_engine_free(e);
    kb_space_free(sp);
    kb_config_free(cfg);
}

/* End to end: an engine with choice_floor `on` (-1: its default), told with noise (sd
 * 0.06) on a box where one choice is best on average and another holds the optimum in a
 * narrow well (choice_trap's shape), keeps every choice within `slack` trials of its floor
 * at each step past the design; with choice_floor 0 the two other choices fall more than
 * 10 below it (seed: the engine's). A restored engine asks the same points. */
static void floor_end_to_end(const char *engine, double on, double slack, double seed)
{
    double floors[2] = {on, 0.0};
    size_t short_of_floor[2] = {0, 0};
    for (size_t v = 0; v < 2; v++) {
        kb_error err;
        kb_engine *e = seeded_choice_engine(engine, floors[v], seed);
        size_t taken[3] = {0, 0, 0};
        kb_rng noise;
        kb_rng_seed(&noise, 3);
        for (size_t t = 0; t < 150; t++) {
            kb_point p;
            kb_ask_result res;
            assert_int_equal(kb_engine_ask(e, 1, &p, &res, &err), KB_OK);
            size_t c = kb__category(p.x[2], 3);
            double a = p.x[0] - 0.25, b = p.x[1] - 0.75;
            double y = c == 0 ? -0.2 - 0.5 * ((p.x[0] - 0.7) * (p.x[0] - 0.7) + (p.x[1] - 0.3) * (p.x[1] - 0.3))
                       : c == 1 ? -0.6 : -1.0 + exp(-(a * a + b * b) / (2.0 * 0.15 * 0.15));
            y += 0.06 * kb_rng_normal(&noise);
            assert_int_equal(kb_engine_tell(e, p.handle, y, &err), KB_OK);
            taken[c]++;
            double tt = (double)(t + 1);
            double floor_t = fmin(4.0 * sqrt(tt * log(3.0) / ((M_E - 1.0) * 3.0)), tt / 6.0);
            if (t + 1 >= 16) /* past the design and its first fit */
                for (size_t k = 0; k < 3; k++)
                    short_of_floor[v] = (size_t)fmax((double)short_of_floor[v], floor_t - (double)taken[k]);
        }
        double forced;
        assert_int_equal(kb_engine_stat(e, "choice_floor_pools", &forced, &err), KB_OK);
        assert_true(v == 0 ? forced > 0 : forced == 0);
        if (v == 0) {
            kb_engine *r = tu_restored(e);
            next_asks_agree(e, r, 3);
            kb_engine_free(r);
        }
        kb_engine_free(e);
    }
    assert_true(short_of_floor[0] <= slack);
    assert_true(short_of_floor[1] > 10);
}

/* bbkb: a floor takes one epoch's pool (measured: 2 short with the floor, 17 without). */
static void choice_floor_end_to_end(void **state)
{
    (void)state;
    floor_end_to_end("bbkb", -1.0, 3.0, 7);
}

/* gp-ucb: a floor holds the pool until it is met (gp_ucb.c, pool_due; measured: 0 short
 * with the floor, 19 without). */
static void gp_ucb_choice_floor_end_to_end(void **state)
{
    (void)state;
    floor_end_to_end("gp-ucb", -1.0, 1.0, 7);
}

/* The Thompson engines with floors on (off by default): the same rule. Measured over seeds
 * 1-8: 0 short with the floor on every seed; without it gp-ts fell 15-18 short on seeds
 * 2-5 and 8 but only 5-9 on seeds 1, 6 and 7, whose initial designs happen to keep the
 * choices near the floor for a while (sgp-ts 15-18 on seeds 2-5 and 8), so the test runs
 * on seed 5. */
static void ts_choice_floor_end_to_end(void **state)
{
    (void)state;
    floor_end_to_end("gp-ts", 2.0, 1.0, 5);
    floor_end_to_end("sgp-ts", 2.0, 1.0, 5);
}

/* Issue 15 item 2: every public function returns its own code on each error path when the
 * caller passes no kb_error (the codes were read back from err, so NULL gave the wrong one). */
static void codes_without_error_struct(void **state)
{
    (void)state;
    kb_config *cfg = kb_config_new("gp-ucb", NULL);
    assert_non_null(cfg);
    double v[2] = {1.0, -1.0};
    assert_int_equal(kb_config_set_number(cfg, "no_such_option", 1, NULL), KB_ENOTFOUND);
    assert_int_equal(kb_config_set_string(cfg, "no_such_option", "x", NULL), KB_ENOTFOUND);
    assert_int_equal(kb_config_set_vector(cfg, "no_such_option", v, 2, NULL), KB_ENOTFOUND);
    assert_int_equal(kb_config_set_number(cfg, "kernel", 1, NULL), KB_EINVAL);
    assert_int_equal(kb_config_set_string(cfg, "seed", "x", NULL), KB_EINVAL);
    assert_int_equal(kb_config_set_number(cfg, "lengthscale", -1, NULL), KB_ERANGE);
    assert_int_equal(kb_config_set_vector(cfg, "lengthscales", v, 2, NULL), KB_ERANGE);
    assert_int_equal(kb_config_set_string(cfg, "kernel", "nope", NULL), KB_ENOTFOUND);
    kb_space *box = kb_space_new_box(2, 16, NULL);
    size_t one[2] = {1, 0};
    unsigned char cat[2] = {1, 0};
    assert_int_equal(kb_space_set_levels(box, one, cat, NULL), KB_EINVAL);
    kb_kernel *k;
    double bad[2] = {1.0, 0.0};
    size_t single[2] = {1, 0};
    assert_int_equal(kb_kernel_create((kb_kernel_kind)99, 2, &k, NULL), KB_EINVAL);
    assert_int_equal(kb_kernel_create(KB_KERNEL_RBF, 0, &k, NULL), KB_ERANGE);
    assert_int_equal(kb_kernel_create(KB_KERNEL_RBF, 2, &k, NULL), KB_OK);
    assert_int_equal(kb_kernel_set_variance(k, 0.0, NULL), KB_ERANGE);
    assert_int_equal(kb_kernel_set_lengthscales(k, bad, NULL), KB_ERANGE);
    assert_int_equal(kb_kernel_set_choices(k, single, NULL), KB_EINVAL);
    kb_kernel_free(k);
    kb_engine *e = kb_engine_create(cfg, box, NULL);
    assert_non_null(e);
    double x[2] = {NAN, 0.5};
    assert_int_equal(kb_engine_tell(e, 7, 1.0, NULL), KB_ENOTFOUND);
    assert_int_equal(kb_engine_abandon(e, 7, NULL), KB_ENOTFOUND);
    assert_int_equal(kb_engine_observe(e, x, 1.0, NULL), KB_EINVAL);
    kb_point p;
    kb_ask_result res;
    assert_int_equal(kb_engine_ask(e, 1, &p, &res, NULL), KB_OK);
    assert_int_equal(kb_engine_tell(e, p.handle, INFINITY, NULL), KB_EINVAL);
    assert_int_equal(kb_engine_tell(e, p.handle, 1.0, NULL), KB_OK);
    assert_int_equal(kb_engine_tell(e, p.handle, 1.0, NULL), KB_ESTATE);
    assert_int_equal(kb_engine_abandon(e, p.handle, NULL), KB_ESTATE);
    kb_stats small = {.size = KB_STATS_SIZE_MIN - 1};
    assert_int_equal(kb_engine_stats(e, &small, NULL), KB_EINVAL);
    kb_engine_free(e);
    kb_space_free(box);
    kb_config_free(cfg);
}

/* kb_stats.size is the caller's: the library refuses a size below the first versioned
 * layout, writes exactly `size` bytes, and zeroes what a newer caller has beyond its own
 * struct. */
static void stats_follow_the_callers_size(void **state)
{
    (void)state;
    double rows[3] = {0, 1, 2};
    kb_space *sp = kb_space_new_finite(rows, 3, 1, NULL);
    kb_config *cfg = kb_config_new("random", NULL);
    kb_engine *e = kb_engine_create(cfg, sp, NULL);
    assert_non_null(e);
    kb_point p;
    kb_ask_result res;
    assert_int_equal(kb_engine_ask(e, 2, (kb_point[2]){0}, &res, NULL), KB_OK);
    assert_int_equal(kb_engine_ask(e, 1, &p, &res, NULL), KB_OK);
    assert_int_equal(kb_engine_tell(e, p.handle, 1.0, NULL), KB_OK);

    kb_error err;
    struct {
        kb_stats st;
        unsigned char beyond[16];
    } buf;
    memset(&buf, 0xab, sizeof buf);
    buf.st.size = KB_STATS_SIZE_MIN - 1;
    expect_error(kb_engine_stats(e, &buf.st, &err), &err, KB_EINVAL, "size");
    assert_true(buf.st.size == KB_STATS_SIZE_MIN - 1 && buf.st.asks == 0xababababababababULL);

    buf.st.size = sizeof buf.st;
    assert_int_equal(kb_engine_stats(e, &buf.st, &err), KB_OK);
    assert_true(buf.st.size == sizeof buf.st);
    assert_true(buf.st.asks == 3 && buf.st.tells == 1 && buf.st.pending == 2);
    assert_true(buf.st.candidates == 3);
    for (size_t i = 0; i < sizeof buf.beyond; i++)
        assert_int_equal(buf.beyond[i], 0xab);

    /* A caller built against a newer, longer kb_stats: its unknown fields read 0. */
    memset(&buf, 0xab, sizeof buf);
    buf.st.size = sizeof buf;
    assert_int_equal(kb_engine_stats(e, &buf.st, &err), KB_OK);
    assert_true(buf.st.size == sizeof buf && buf.st.asks == 3);
    for (size_t i = sizeof buf.st; i < sizeof buf; i++)
        assert_int_equal(((unsigned char *)&buf)[i], 0);
    kb_engine_free(e);
    kb_config_free(cfg);
    kb_space_free(sp);
}

/* Every engine's figures, as kb_engine_stat_name lists them: a registered engine missing
 * here fails, so a new engine states what it offers (the daemon's progress reads
 * epoch, epoch_asks, last_batch, dict_size and init_phase, 0 where absent). */
static const char *const engine_figures[][2] = {
    {"random", ""},
    {"bbkb", "epoch epoch_asks last_batch dict_size model_rows choice_floor_pools climb_pools "
             "init_phase start_var_max "
             "epochs_low_rank epochs_bounded bound_resolved dict_capped sec_embed sec_resparsify "
             "sec_fit sec_ask sec_tell flop_l3"},
    {"bkb", "epoch epoch_asks last_batch dict_size model_rows choice_floor_pools climb_pools "
            "init_phase start_var_max "
            "epochs_low_rank epochs_bounded bound_resolved dict_capped sec_embed sec_resparsify "
            "sec_fit sec_ask sec_tell flop_l3"},
    {"gp-ucb", "sec_embed sec_resparsify sec_ask sec_tell choice_floor_pools"},
    {"gp-bucb", "epoch epoch_asks last_batch sec_embed sec_resparsify sec_ask sec_tell "
                "choice_floor_pools"},
    {"pi-gp-ucb", "dict_size sec_ask sec_tell"},
    {"gp-ts", "epoch sec_embed sec_resparsify sec_ask sec_tell choice_floor_pools"},
    {"sgp-ts", "epoch dict_size sec_embed sec_resparsify sec_ask sec_tell choice_floor_pools"},
};

static const char *expected_figures(const char *engine)
{
    for (size_t i = 0; i < sizeof engine_figures / sizeof engine_figures[0]; i++)
        if (strcmp(engine_figures[i][0], engine) == 0)
            return engine_figures[i][1];
    fail_msg("engine %s is not in engine_figures", engine);
    return NULL;
}

/* An engine of each kind on a small box, after a few told points. */
static kb_engine *engine_after_a_few_points(const char *name, kb_space *box)
{
    kb_error err;
    kb_config *cfg = kb_config_new(name, &err);
    kb_engine *e = kb_engine_create(cfg, box, &err);
    kb_config_free(cfg);
    assert_non_null(e);
    for (int i = 0; i < 6; i++) {
        kb_point p;
        kb_ask_result res;
        assert_int_equal(kb_engine_ask(e, 1, &p, &res, &err), KB_OK);
        assert_int_equal(res.n, 1);
        assert_int_equal(kb_engine_tell(e, p.handle, -fabs(p.x[0] - 0.3), &err), KB_OK);
    }
    return e;
}

/* Engine-specific figures by name: each engine's list is enumerable and as stated,
 * every listed name reads, an unknown one is KB_ENOTFOUND with the field and a message
 * naming it, and *out = 0 ("not applicable") then. */
static void engine_figures_by_name(void **state)
{
    (void)state;
    kb_error err;
    kb_space *box = kb_space_new_box(2, 64, &err);
    for (const char *const *eng = kb_engine_names(); *eng; eng++) {
        char listed[512] = "";
        const char *name;
        for (size_t i = 0; (name = kb_engine_stat_name(*eng, i)); i++)
            snprintf(listed + strlen(listed), sizeof listed - strlen(listed), "%s%s",
                     i ? " " : "", name);
        assert_string_equal(listed, expected_figures(*eng));
        kb_engine *e = engine_after_a_few_points(*eng, box);
        double v;
        for (size_t i = 0; (name = kb_engine_stat_name(*eng, i)); i++) {
            assert_int_equal(kb_engine_stat(e, name, &v, &err), KB_OK);
            assert_true(isfinite(v) && v >= 0);
        }
        v = 7;
        expect_error(kb_engine_stat(e, "no_such", &v, &err), &err, KB_ENOTFOUND, "name");
        assert_non_null(strstr(err.message, "no_such"));
        assert_true(v == 0);
        expect_error(kb_engine_stat(e, NULL, &v, &err), &err, KB_ENOTFOUND, "name");
        v = 7; /* a prefix of a name ("epochs_low_rank") is no name */
        assert_int_equal(kb_engine_stat(e, "epochs", &v, NULL), KB_ENOTFOUND);
        assert_true(v == 0);
        kb_stats st = {.size = sizeof st};
        assert_int_equal(kb_engine_stats(e, &st, &err), KB_OK);
        assert_true(st.asks == 6 && st.tells == 6 && st.pending == 0);
        kb_engine_free(e);
    }
    assert_null(kb_engine_stat_name("no-such-engine", 0));
    assert_null(kb_engine_stat_name(NULL, 0));
    kb_space_free(box);
}

static void base_checks_handles_and_values(void **state)
{
    (void)state;
    kb_error err;
    kb_engine *e = random_engine(5, "allow", 3);
    kb_point pts[3];
    kb_ask_result res;
    assert_int_equal(kb_engine_ask(e, 3, pts, &res, &err), KB_OK);
    assert_int_equal(res.n, 3);
    assert_int_equal(res.status, KB_ASK_OK);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(pts[i].handle, (uint64_t)i + 1);
        assert_true(pts[i].x[0] == (double)pts[i].index); /* input coordinates */
    }
    expect_error(kb_engine_tell(e, 99, 1.0, &err), &err, KB_ENOTFOUND, "handle");
    expect_error(kb_engine_tell(e, 0, 1.0, &err), &err, KB_ENOTFOUND, "handle");
    expect_error(kb_engine_tell(e, 1, NAN, &err), &err, KB_EINVAL, "value");
    assert_int_equal(kb_engine_tell(e, 1, 0.5, &err), KB_OK);
    expect_error(kb_engine_tell(e, 1, 0.5, &err), &err, KB_ESTATE, "handle");
    assert_int_equal(kb_engine_abandon(e, 2, &err), KB_OK);
    expect_error(kb_engine_abandon(e, 2, &err), &err, KB_ESTATE, "handle");
    expect_error(kb_engine_tell(e, 2, 1.0, &err), &err, KB_ESTATE, "handle");
    double x[2] = {1, INFINITY};
    expect_error(kb_engine_observe(e, x, 1.0, &err), &err, KB_EINVAL, "x[1]");
    x[1] = 0;
    assert_int_equal(kb_engine_observe(e, x, 2.0, &err), KB_OK);
    kb_stats st = {.size = sizeof st};
    kb_engine_stats(e, &st, NULL);
    assert_int_equal(st.asks, 3);
    assert_int_equal(st.tells, 1);
    assert_int_equal(st.abandons, 1);
    assert_int_equal(st.pending, 1);
    assert_int_equal(st.observed, 1);
    double m, s;
    expect_error(kb_engine_posterior(e, x, 1, &m, &s, &err), &err, KB_EUNSUPPORTED, "engine");
    kb_point p;
    kb_trial_state ts;
    assert_int_equal(kb_engine_trial(e, 1, &p, &ts), KB_OK);
    assert_int_equal(ts, KB_TRIAL_TOLD);
    assert_int_equal(kb_engine_trial(e, 4, &p, &ts), KB_ENOTFOUND);
    kb_engine_free(e);
}

static void repeats_policy_is_enforced(void **state)
{
    (void)state;
    kb_error err;
    kb_point pts[8];
    kb_ask_result res;
    /* no_pending: 4 candidates give 4 distinct points, then nothing until one settles. */
    kb_engine *e = random_engine(4, "no_pending", 9);
    assert_int_equal(kb_engine_ask(e, 8, pts, &res, &err), KB_OK);
    assert_int_equal(res.n, 4);
    assert_int_equal(res.status, KB_ASK_EXHAUSTED);
    int seen[4] = {0};
    for (int i = 0; i < 4; i++)
        assert_int_equal(seen[pts[i].index]++, 0);
    assert_int_equal(kb_engine_tell(e, pts[2].handle, 1.0, &err), KB_OK);
    assert_int_equal(kb_engine_ask(e, 8, pts, &res, &err), KB_OK);
    assert_int_equal(res.n, 1);
    kb_engine_free(e);

    /* never: once told, a candidate is never handed out again. */
    e = random_engine(3, "never", 9);
    assert_int_equal(kb_engine_ask(e, 3, pts, &res, &err), KB_OK);
    for (int i = 0; i < 3; i++)
        assert_int_equal(kb_engine_tell(e, pts[i].handle, 1.0, &err), KB_OK);
    assert_int_equal(kb_engine_ask(e, 1, pts, &res, &err), KB_OK);
    assert_int_equal(res.n, 0);
    assert_int_equal(res.status, KB_ASK_EXHAUSTED);
    kb_engine_free(e);

    /* abandon frees the candidate under no_pending. */
    e = random_engine(1, "no_pending", 9);
    assert_int_equal(kb_engine_ask(e, 2, pts, &res, &err), KB_OK);
    assert_int_equal(res.n, 1);
    assert_int_equal(kb_engine_abandon(e, pts[0].handle, &err), KB_OK);
    assert_int_equal(kb_engine_ask(e, 1, pts, &res, &err), KB_OK);
    assert_int_equal(res.n, 1);
    kb_engine_free(e);
}

/* A finite set of 12 points on a 3 x 4 grid in [0, 1]^2 for `engine`, repeats set to
 * `repeats` (NULL: unset). */
static kb_engine *grid_engine(const char *engine, const char *repeats)
{
    kb_error err;
    double rows[24];
    for (size_t i = 0; i < 12; i++) {
        rows[2 * i] = (double)(i % 3) / 2.0;
        rows[2 * i + 1] = (double)(i / 3) / 3.0;
    }
    kb_space *sp = kb_space_new_finite(rows, 12, 2, &err);
    kb_config *cfg = kb_config_new(engine, &err);
    assert_int_equal(kb_config_set_number(cfg, "seed", 3, &err), KB_OK);
    if (repeats)
        assert_int_equal(kb_config_set_string(cfg, "repeats", repeats, &err), KB_OK);
    kb_engine *e = kb_engine_create(cfg, sp, &err);
    if (!e)
        fail_msg("%s: %s", engine, err.message);
    kb_space_free(sp);
    kb_config_free(cfg);
    return e;
}

static double grid_bowl(const double *x) { return -pow(x[0] - 0.3, 2) - pow(x[1] - 0.6, 2); }

static int looks_deterministic(const kb_engine *e)
{
    kb_stats st = {.size = sizeof st};
    assert_int_equal(kb_engine_stats(e, &st, NULL), KB_OK);
    return st.deterministic;
}

/* One sequential step: ask one point, tell it the bowl's value (plus `jitter` times the
 * step, to make the values differ). Returns the candidate, or -1 for an empty ask. */
static int grid_step(kb_engine *e, int step, double jitter, kb_ask_status *status)
{
    kb_error err;
    kb_point p;
    kb_ask_result res;
    assert_int_equal(kb_engine_ask(e, 1, &p, &res, &err), KB_OK);
    *status = res.status;
    if (res.n == 0)
        return -1;
    assert_int_equal(kb_engine_tell(e, p.handle, grid_bowl(p.x) + jitter * step, &err), KB_OK);
    return (int)p.index;
}

/* On a finite set with `repeats` unset, values that look deterministic (a candidate told
 * three times with one value, none with two) stop repeats: a told candidate is not
 * handed out again, so every engine goes on through the untold candidates to exhaustion
 * instead of handing out its incumbent for ever (the GP engines lock onto it: told, its
 * UCB is its value). The engine restored once the rule holds goes on as the original; an
 * observation of a told candidate at another value lifts the rule. A noisy objective, or
 * repeats set to "allow", keeps repeats. */
static void deterministic_values_stop_repeats(void **state)
{
    (void)state;
    enum { STEPS = 80 };
    kb_error err;
    for (const char *const *eng = kb_engine_names(); *eng; eng++) {
        kb_engine *e = grid_engine(*eng, NULL), *r = NULL;
        int told[12] = {0}, step;
        kb_ask_status status = KB_ASK_OK, status_r;
        for (step = 0; step < STEPS; step++) {
            int rule = looks_deterministic(e);
            if (rule && !r)
                r = tu_restored(e);
            int i = grid_step(e, step, 0.0, &status);
            if (r && grid_step(r, step, 0.0, &status_r) != i)
                fail_msg("%s: the restored engine parted at step %d", *eng, step);
            if (i < 0)
                break;
            if (rule && told[i])
                fail_msg("%s: candidate %d handed out again at step %d", *eng, i, step);
            told[i] = 1;
        }
        /* at most two tells per candidate before the rule, then each untold one once */
        if (step == STEPS || status != KB_ASK_EXHAUSTED || !looks_deterministic(e))
            fail_msg("%s: no exhaustion in %d steps (status %d)", *eng, step, (int)status);
        for (int i = 0; i < 12; i++)
            assert_true(told[i]);
        double x[2] = {0.5, 0.0};
        assert_int_equal(kb_engine_observe(e, x, grid_bowl(x) + 1.0, &err), KB_OK);
        assert_false(looks_deterministic(e));
        assert_true(grid_step(e, step, 0.0, &status) >= 0);
        kb_engine_free(e);
        kb_engine_free(r);
    }
    int repeated = 0, told[12] = {0};
    kb_engine *e = grid_engine("random", "allow");
    kb_ask_status status;
    for (int step = 0; step < 60; step++) {
        int i = grid_step(e, step, 0.0, &status);
        repeated += looks_deterministic(e) && told[i];
        told[i] = 1;
    }
    assert_true(repeated > 0);
    kb_engine_free(e);
    e = grid_engine("random", NULL);
    memset(told, 0, sizeof told);
    repeated = 0;
    for (int step = 0; step < 60; step++) {
        int i = grid_step(e, step, 1e-9, &status);
        repeated += told[i];
        told[i] = 1;
    }
    assert_false(looks_deterministic(e));
    assert_true(repeated > 0);
    kb_engine_free(e);
}

/* The level of coordinate value x among the L positions pos (exactly one of them), or
 * fails. */
static int level_at(const double *pos, size_t L, double x, const char *eng)
{
    for (size_t l = 0; l < L; l++)
        if (x == pos[l])
            return (int)l;
    fail_msg("%s: coordinate %.17g is on no level", eng, x);
    return -1;
}

/* Every engine on a discrete 3-d box (set up by `levels`, coordinate j's L[j] levels at
 * pos[j]), repeats unset (never on a box), two trials kept pending, a deterministic
 * objective: no point is handed out twice, every point is handed out, then asks answer
 * "exhausted". The engine restored half-way goes on as the original. */
static void check_each_point_once(int (*levels)(kb_space *, kb_error *), const size_t L[3],
                                  const double *const pos[3])
{
    enum { PENDING = 2, MAXL = 16 };
    kb_error err;
    int points = (int)(L[0] * L[1] * L[2]);
    for (const char *const *eng = kb_engine_names(); *eng; eng++) {
        kb_space *box = kb_space_new_box(3, 2048, &err);
        assert_int_equal(levels(box, &err), KB_OK);
        kb_config *cfg = kb_config_new(*eng, &err);
        assert_int_equal(kb_config_set_number(cfg, "seed", 4, &err), KB_OK);
        kb_engine *e = kb_engine_create(cfg, box, &err), *r = NULL;
        if (!e)
            fail_msg("%s: %s", *eng, err.message);
        int seen[MAXL][MAXL][MAXL] = {{{0}}}, handed = 0;
        uint64_t out[PENDING];
        size_t n = 0;
        for (int step = 0; step < 400; step++) {
            if (!r && handed == points / 2)
                r = tu_restored(e);
            kb_point p, q;
            kb_ask_result res, res_r;
            assert_int_equal(kb_engine_ask(e, 1, &p, &res, &err), KB_OK);
            if (r) {
                assert_int_equal(kb_engine_ask(r, 1, &q, &res_r, &err), KB_OK);
                assert_int_equal(res_r.n, res.n);
                if (res.n && memcmp(p.x, q.x, sizeof(double) * 3) != 0)
                    fail_msg("%s: the restored engine parted at step %d", *eng, step);
            }
            if (res.n) {
                int a = level_at(pos[0], L[0], p.x[0], *eng), b = level_at(pos[1], L[1], p.x[1], *eng),
                    c = level_at(pos[2], L[2], p.x[2], *eng);
                if (seen[a][b][c]++)
                    fail_msg("%s: point (%d, %d, %d) handed out twice", *eng, a, b, c);
                out[n++] = p.handle;
                handed++;
            } else if (n == 0) {
                assert_int_equal(res.status, KB_ASK_EXHAUSTED);
                break;
            }
            if (res.n && n < PENDING)
                continue;
            kb_trial_state ts;
            assert_int_equal(kb_engine_trial(e, out[0], &p, &ts), KB_OK);
            double y = -pow(p.x[0] - 0.6, 2) - pow(p.x[1] - 0.4, 2) + p.x[2];
            assert_int_equal(kb_engine_tell(e, out[0], y, &err), KB_OK);
            if (r)
                assert_int_equal(kb_engine_tell(r, out[0], y, &err), KB_OK);
            memmove(out, out + 1, --n * sizeof *out);
        }
        if (handed != points)
            fail_msg("%s: %d of %d points handed out", *eng, handed, points);
        kb_engine_free(e);
        kb_engine_free(r);
        kb_config_free(cfg);
        kb_space_free(box);
    }
}

static int int_int_categorical(kb_space *box, kb_error *err)
{
    const size_t levels[3] = {4, 3, 2};
    const unsigned char cat[3] = {0, 0, 1};
    return kb_space_set_levels(box, levels, cat, err);
}

/* A box of int and categorical parameters holds finitely many points (4 x 3 x 2 = 24 here,
 * at the centres (l + 0.5) / L of equal bins), and its pool of 2,048 rows repeats each of
 * them: repeats apply to points, not rows (they handed out the same points for ever,
 * across pool redraws, before). */
static void discrete_box_points_are_handed_out_once(void **state)
{
    (void)state;
    const double a[4] = {0.125, 0.375, 0.625, 0.875}, b[3] = {1.0 / 6, 0.5, 5.0 / 6},
                 c[2] = {0.25, 0.75};
    check_each_point_once(int_int_categorical, (const size_t[3]){4, 3, 2},
                          (const double *const[3]){a, b, c});
}

/* Integers 1 to 12 on a log scale: their positions log(k) / log(12), far apart at 1, 2, 3
 * and close at 11, 12. */
static double log12[12];

static int log_int_int_categorical(kb_space *box, kb_error *err)
{
    const size_t levels[3] = {12, 3, 2};
    const unsigned char cat[3] = {0, 0, 1};
    const double low[3] = {1, 0, 0};
    for (int k = 0; k < 12; k++)
        log12[k] = log(k + 1.0) / log(12.0);
    int rc = kb_space_set_levels(box, levels, cat, err);
    return rc ? rc : kb_space_set_log_levels(box, low, err);
}

/* Log-scale integer levels (12 x 3 x 2 = 72 points) are points of their own too: each is
 * handed out once, the box is exhausted after the last. Without them a log-scale integer
 * was a continuum rounded, and engines handed out 1, 2 and 30 of 1..1000 again and
 * again. */
static void log_levels_points_are_handed_out_once(void **state)
{
    (void)state;
    const double b[3] = {1.0 / 6, 0.5, 5.0 / 6}, c[2] = {0.25, 0.75};
    check_each_point_once(log_int_int_categorical, (const size_t[3]){12, 3, 2},
                          (const double *const[3]){log12, b, c});
}

/* kb_space_set_log_levels: positions kb_log_level_pos (what a caller mapping values must
 * use), refused with the levels as they were for a non-integer or categorical
 * coordinate, fewer than 2 or more than KB_MAX_LOG_LEVELS values, or values a double
 * cannot place apart; a point belongs to the nearer position, which snapping and the pool
 * follow; copies keep them, kb_space_set_levels clears them. */
static void log_levels_are_checked_and_nearest(void **state)
{
    (void)state;
    kb_error err;
    const double rows[2] = {0.0, 1.0};
    kb_space *box = kb_space_new_box(3, 512, &err), *fin = kb_space_new_finite(rows, 2, 1, &err);
    const size_t levels[3] = {0, 100, 4};
    const unsigned char cat[3] = {0, 0, 1};
    assert_int_equal(kb_space_set_levels(box, levels, cat, &err), KB_OK);
    const double half[3] = {0, 0.5, 0}, on_cat[3] = {0, 0, 1}, on_float[3] = {1, 0, 0},
                 huge[3] = {0, 1e15, 0}, ten[3] = {0, 10, 0};
    expect_error(kb_space_set_log_levels(box, half, &err), &err, KB_EINVAL, "levels[1]");
    expect_error(kb_space_set_log_levels(box, on_cat, &err), &err, KB_EINVAL, "levels[2]");
    expect_error(kb_space_set_log_levels(box, on_float, &err), &err, KB_EINVAL, "levels[0]");
    expect_error(kb_space_set_log_levels(box, huge, &err), &err, KB_EINVAL, "levels[1]");
    assert_null(box->log_low); /* refusals left the levels as they were */
    assert_int_equal(kb_space_set_log_levels(fin, ten, &err), KB_EUNSUPPORTED);
    assert_int_equal(kb_space_set_log_levels(box, ten, &err), KB_OK); /* 10 .. 109 */
    const kb_space *s = box;
    assert_true(kb__space_level_pos(s, 1, 0) == 0.0 && kb__space_level_pos(s, 1, 99) == 1.0);
    for (size_t l = 0; l < 100; l++) {
        double p = kb__space_level_pos(s, 1, l);
        assert_true(p == kb_log_level_pos(10, 109, 10.0 + (double)l));
        assert_int_equal(kb__space_level(s, 1, p), l);
        if (l > 0) { /* just past the midpoint to the level below: this level */
            double q = kb__space_level_pos(s, 1, l - 1), mid = q + (p - q) / 2;
            assert_int_equal(kb__space_level(s, 1, nextafter(mid, 2.0)), l);
            assert_int_equal(kb__space_level(s, 1, nextafter(mid, -1.0)), l - 1);
        }
    }
    double u[3] = {0.3, kb__space_level_pos(s, 1, 7) + 1e-9, 0.9};
    kb__space_snap(s, u, 1);
    assert_true(u[0] == 0.3 && u[1] == kb__space_level_pos(s, 1, 7) && u[2] == 0.875);
    for (size_t i = 0; i < kb_space_size(box); i++)
        assert_true(s->u[i * 3 + 1] == kb__space_level_pos(s, 1, kb__space_level(s, 1, s->u[i * 3 + 1])));
    kb_space *copy = kb__space_copy(box);
    assert_true(copy->log_low && copy->log_low[1] == 10.0 && copy->log_low[0] == 0.0);
    assert_int_equal(kb_space_set_levels(box, levels, cat, &err), KB_OK);
    assert_null(box->log_low);
    kb_space_free(copy);
    kb_space_free(box);
    kb_space_free(fin);
}

/* The objective of the exhaustion tests below: unit-cube coordinates of a 3-d point. */
static double exhaust_y(const double *x)
{
    return -pow(x[0] - 0.6, 2) - pow(x[1] - 0.4, 2) + x[2];
}

/* The 24 points of a 4 x 3 x 2 grid, as a finite set (kind 0) or as a box of an int, an
 * int and a categorical parameter (kind 1), under repeats = policy. */
static kb_engine *exhaust_engine(const char *engine, int kind, const char *policy, int seed)
{
    kb_error err;
    const size_t levels[3] = {4, 3, 2};
    const unsigned char cat[3] = {0, 0, 1};
    double X[24 * 3];
    for (int i = 0; i < 24; i++) {
        X[3 * i] = (i % 4 + 0.5) / 4;
        X[3 * i + 1] = ((i / 4) % 3 + 0.5) / 3;
        X[3 * i + 2] = (i / 12 + 0.5) / 2;
    }
    kb_space *sp = kind ? kb_space_new_box(3, 2048, &err) : kb_space_new_finite(X, 24, 3, &err);
    assert_non_null(sp);
    if (kind)
        assert_int_equal(kb_space_set_levels(sp, levels, cat, &err), KB_OK);
    kb_config *cfg = kb_config_new(engine, &err);
    assert_int_equal(kb_config_set_number(cfg, "seed", seed, &err), KB_OK);
    assert_int_equal(kb_config_set_string(cfg, "repeats", policy, &err), KB_OK);
    kb_engine *e = kb_engine_create(cfg, sp, &err);
    if (!e)
        fail_msg("%s: %s", engine, err.message);
    kb_config_free(cfg);
    kb_space_free(sp);
    return e;
}

/* Asks that find nothing to hand out are not in the event log, so they must not change
 * what later asks choose: random, gp-ts and sgp-ts drew from their RNG or redrew the
 * pool on their way to "exhausted", and a restored engine parted from the original
 * once abandoned points came back. */
static void exhausted_asks_change_nothing(void **state)
{
    (void)state;
    kb_error err;
    const char *const policies[2] = {"never", "no_pending"};
    for (const char *const *eng = kb_engine_names(); *eng; eng++)
        for (int kind = 0; kind < 2; kind++)
            for (int seed = 1; seed <= 3; seed++) {
                /* under no_pending told points come back: all stay pending there */
                int told = seed % 2 ? 0 : 8;
                kb_engine *e = exhaust_engine(*eng, kind, policies[seed % 2], seed);
                uint64_t h[24];
                int n = 0;
                kb_point p, q;
                kb_ask_result res, res_r;
                while (n < 24) {
                    assert_int_equal(kb_engine_ask(e, 1, &p, &res, &err), KB_OK);
                    if (!res.n)
                        break;
                    h[n++] = p.handle;
                    if (n <= told)
                        assert_int_equal(kb_engine_tell(e, p.handle, exhaust_y(p.x), &err), KB_OK);
                }
                for (int k = 0; k < 3; k++) {
                    assert_int_equal(kb_engine_ask(e, 1, &p, &res, &err), KB_OK);
                    assert_int_equal(res.n, 0);
                }
                kb_engine *r = tu_restored(e);
                for (int k = 10; k < n; k += 2) {
                    assert_int_equal(kb_engine_abandon(e, h[k], &err), KB_OK);
                    assert_int_equal(kb_engine_abandon(r, h[k], &err), KB_OK);
                }
                for (int k = 0; k < 6; k++) {
                    assert_int_equal(kb_engine_ask(e, 1, &p, &res, &err), KB_OK);
                    assert_int_equal(kb_engine_ask(r, 1, &q, &res_r, &err), KB_OK);
                    assert_int_equal(res_r.n, res.n);
                    if (res.n && memcmp(p.x, q.x, sizeof(double) * 3) != 0)
                        fail_msg("%s, %s, seed %d: the restored engine parted at ask %d", *eng,
                                 kind ? "box" : "finite set", seed, k);
                    if (res.n) {
                        assert_int_equal(kb_engine_tell(e, p.handle, exhaust_y(p.x), &err), KB_OK);
                        assert_int_equal(kb_engine_tell(r, q.handle, exhaust_y(q.x), &err), KB_OK);
                    }
                }
                kb_engine_free(e);
                kb_engine_free(r);
            }
}

/* A discrete box of more points than its pool holds: every engine hands out each of
 * the 144 points once, one ask after another, and only then answers "exhausted" (they
 * answered it early once the pool's draws missed the last points; pi-gp-ucb stopped
 * at 81 and random at fewer; with a pool of 4, gp-ucb's refined rows sat on told
 * points). */
static void discrete_box_larger_than_its_pool(void **state)
{
    (void)state;
    kb_error err;
    const size_t levels[2] = {12, 12}, pools[2] = {64, 4};
    const unsigned char cat[2] = {0, 1};
    for (const char *const *eng = kb_engine_names(); *eng; eng++)
    for (int pool = 0; pool < 2; pool++) {
        kb_space *box = kb_space_new_box(2, pools[pool], &err);
        assert_int_equal(kb_space_set_levels(box, levels, cat, &err), KB_OK);
        kb_config *cfg = kb_config_new(*eng, &err);
        assert_int_equal(kb_config_set_number(cfg, "seed", 3, &err), KB_OK);
        kb_engine *e = kb_engine_create(cfg, box, &err);
        if (!e)
            fail_msg("%s: %s", *eng, err.message);
        int seen[144] = {0};
        for (int handed = 0; handed <= 144; handed++) {
            kb_point p;
            kb_ask_result res;
            assert_int_equal(kb_engine_ask(e, 1, &p, &res, &err), KB_OK);
            if (handed == 144) {
                assert_int_equal(res.n, 0);
                assert_int_equal(res.status, KB_ASK_EXHAUSTED);
                break;
            }
            if (res.n != 1)
                fail_msg("%s, pool %zu: nothing handed out with %d of 144 points left", *eng,
                         pools[pool], 144 - handed);
            int a = (int)(p.x[0] * 12), b = (int)(p.x[1] * 12);
            if (seen[a * 12 + b]++)
                fail_msg("%s: point (%d, %d) handed out twice", *eng, a, b);
            double y = -pow(p.x[0] - 0.3, 2) + 0.1 * (b % 3);
            assert_int_equal(kb_engine_tell(e, p.handle, y, &err), KB_OK);
        }
        kb_engine_free(e);
        kb_config_free(cfg);
        kb_space_free(box);
    }
}

/* gp-ucb and gp-bucb refine a box pool's last rows uphill from the best points; on a
 * corner optimum they all stop at the corner, the told best point: each row then handed
 * that point out again, four times in one batch and again once told. */
static void refined_rows_are_not_repeats(void **state)
{
    (void)state;
    enum { MAX = 200 };
    kb_error err;
    const char *const engines[2] = {"gp-ucb", "gp-bucb"}, *const policies[2] = {"never", "no_pending"};
    for (int en = 0; en < 2; en++)
        for (int pol = 0; pol < 2; pol++) {
            kb_space *box = kb_space_new_box(3, 32, &err);
            kb_config *cfg = kb_config_new(engines[en], &err);
            assert_int_equal(kb_config_set_number(cfg, "seed", 1, &err), KB_OK);
            assert_int_equal(kb_config_set_string(cfg, "repeats", policies[pol], &err), KB_OK);
            kb_engine *e = kb_engine_create(cfg, box, &err);
            assert_non_null(e);
            double X[MAX][3], corner[3] = {0, 1, 0};
            int told[MAX], n = 0;
            assert_int_equal(kb_engine_observe(e, corner, 0.0, &err), KB_OK);
            for (int batch = 0; batch < 40; batch++) {
                kb_point p[3];
                kb_ask_result res;
                assert_int_equal(kb_engine_ask(e, 3, p, &res, &err), KB_OK);
                for (size_t k = 0; k < res.n && n < MAX; k++) {
                    for (int j = -1; j < n; j++) {
                        const double *x = j < 0 ? corner : X[j];
                        /* pending points for both policies; observed and told for never */
                        int taken = j < 0 ? pol == 0 : !told[j] || pol == 0;
                        if (taken && memcmp(x, p[k].x, sizeof X[0]) == 0)
                            fail_msg("%s, %s: batch %d repeats point %d", engines[en],
                                     policies[pol], batch, j);
                    }
                    memcpy(X[n], p[k].x, sizeof X[0]);
                    told[n++] = 0;
                }
                for (int j = 0; batch % 2 && j < n; j++) /* every other batch is told */
                    if (!told[j]) {
                        double y = -(X[j][0] * X[j][0] + pow(1 - X[j][1], 2) + X[j][2] * X[j][2]);
                        assert_int_equal(kb_engine_tell(e, (uint64_t)j + 1, y, &err), KB_OK);
                        told[j] = 1;
                    }
            }
            kb_engine_free(e);
            kb_config_free(cfg);
            kb_space_free(box);
        }
}

/* A discrete box's pool flags after a redraw: a trial pending across it is counted on
 * its point's row of the new pool, and its abandon frees that row at once (it stayed
 * pending until the next redraw); an observed point is told for `never` before any
 * redraw (engines handed observed points out until then). */
static void discrete_box_flags_follow_the_points(void **state)
{
    (void)state;
    kb_error err;
    const size_t levels[2] = {3, 2};
    for (const char *const *eng = kb_engine_names(); *eng; eng++) {
        kb_space *box = kb_space_new_box(2, 8, &err);
        assert_int_equal(kb_space_set_levels(box, levels, NULL, &err), KB_OK);
        kb_config *cfg = kb_config_new(*eng, &err);
        assert_int_equal(kb_config_set_string(cfg, "repeats", "no_pending", &err), KB_OK);
        kb_engine *e = kb_engine_create(cfg, box, &err);
        assert_non_null(e);
        kb_point p;
        kb_ask_result res;
        assert_int_equal(kb_engine_ask(e, 1, &p, &res, &err), KB_OK);
        uint64_t first = p.handle, g0 = e->space->generation;
        for (int i = 0; i < 40 && e->space->generation == g0; i++) {
            assert_int_equal(kb_engine_ask(e, 1, &p, &res, &err), KB_OK);
            if (!res.n)
                break;
            assert_int_equal(kb_engine_tell(e, p.handle, 0.1 * i, &err), KB_OK);
        }
        if (e->space->generation != g0) { /* engines that redraw within the script */
            assert_int_equal(kb_engine_abandon(e, first, &err), KB_OK);
            uint64_t flagged = 0;
            for (size_t i = 0; i < e->space->n; i++)
                flagged += e->cand_pending[i];
            if (flagged != e->n_pending)
                fail_msg("%s: %llu pending flags for %llu pending trials", *eng,
                         (unsigned long long)flagged, (unsigned long long)e->n_pending);
        }
        kb_engine_free(e);
        kb_config_free(cfg);

        cfg = kb_config_new(*eng, &err); /* repeats unset: never on a box */
        e = kb_engine_create(cfg, box, &err);
        assert_non_null(e);
        for (int a = 0; a < 3; a++)
            for (int b = 0; b < 2; b++) {
                double x[2] = {(a + 0.5) / 3, (b + 0.5) / 2};
                if (a < 2 || b < 1) /* every point but (2, 1) */
                    assert_int_equal(kb_engine_observe(e, x, -(a - 1.0) * (a - 1.0) - b, &err),
                                     KB_OK);
            }
        assert_int_equal(kb_engine_ask(e, 1, &p, &res, &err), KB_OK);
        if (res.n != 1 || p.x[0] != 2.5 / 3 || p.x[1] != 0.75)
            fail_msg("%s: the ask after the observations did not hand out the one point left",
                     *eng);
        assert_int_equal(kb_engine_tell(e, p.handle, 0.0, &err), KB_OK);
        assert_int_equal(kb_engine_ask(e, 1, &p, &res, &err), KB_OK);
        assert_int_equal(res.status, KB_ASK_EXHAUSTED);
        kb_engine_free(e);
        kb_config_free(cfg);
        kb_space_free(box);
    }
}

/* The spaces of restore_anywhere_continues_identically: 3-d, a 40-row finite set (kind
 * 0), a float box (1), the 4 x 3 x 2 grid of int, int and categorical (2), a float with
 * an int of 5 and a categorical of 3 (3). Small pools, so that they are spent and redrawn. */
static kb_space *script_space(int kind)
{
    kb_error err;
    kb_rng rng;
    kb_rng_seed(&rng, 77);
    if (kind == 0) {
        double X[40 * 3];
        for (size_t i = 0; i < 40 * 3; i++)
            X[i] = kb_rng_uniform(&rng);
        return kb_space_new_finite(X, 40, 3, &err);
    }
    kb_space *s = kb_space_new_box(3, kind == 2 ? 2048 : 128, &err);
    const size_t grid[3] = {4, 3, 2}, mixed[3] = {0, 5, 3};
    const unsigned char cat[3] = {0, 0, 1};
    if (kind >= 2)
        assert_int_equal(kb_space_set_levels(s, kind == 2 ? grid : mixed, cat, &err), KB_OK);
    return s;
}

/* One call of the script on e and, when r is not NULL, the same call on r: asks must agree
 * (handles, points, status), and so must the codes of the others. pend holds the handles
 * out (*np of them). */
static void script_step(kb_engine *e, kb_engine *r, kb_rng *drv, uint64_t *pend, size_t *np,
                        const char *what)
{
    kb_error err;
    double u = kb_rng_uniform(drv);
    if (u < 0.4 || *np == 0) {
        size_t k = 1 + (size_t)kb_rng_below(drv, 3);
        kb_point p[3], q[3];
        kb_ask_result a, b;
        assert_int_equal(kb_engine_ask(e, k, p, &a, &err), KB_OK);
        if (r) {
            assert_int_equal(kb_engine_ask(r, k, q, &b, &err), KB_OK);
            if (a.n != b.n || a.status != b.status)
                fail_msg("%s: asks answered %zu / %d and %zu / %d", what, a.n, a.status, b.n,
                         b.status);
        }
        for (size_t i = 0; i < a.n; i++) {
            if (r && (p[i].handle != q[i].handle || memcmp(p[i].x, q[i].x, 3 * sizeof(double))))
                fail_msg("%s: the restored engine handed out another point", what);
            pend[(*np)++] = p[i].handle;
        }
        return;
    }
    size_t burst = u < 0.8 ? 1 : 1 + (size_t)kb_rng_below(drv, 4);
    for (size_t b = 0; b < burst && *np; b++) {
        size_t i = (size_t)kb_rng_below(drv, *np);
        kb_point p;
        kb_trial_state ts;
        assert_int_equal(kb_engine_trial(e, pend[i], &p, &ts), KB_OK);
        double y = exhaust_y(p.x) + 0.01 * kb_rng_uniform(drv);
        y = kb_rng_uniform(drv) < 0.3 ? round(y * 10) / 10 : y; /* coarse: repeated values */
        int rc = u < 0.8 ? kb_engine_tell(e, pend[i], y, &err) : kb_engine_abandon(e, pend[i], &err);
        if (r)
            assert_int_equal(u < 0.8 ? kb_engine_tell(r, pend[i], y, &err)
                                     : kb_engine_abandon(r, pend[i], &err), rc);
        pend[i] = pend[--*np];
    }
}

/* Whatever the engine, space and repeats policy, an engine restored from a snapshot
 * taken anywhere in a random script of asks (of 1-3 points), tells (some of coarse,
 * repeating values) and abandons (some in bursts, which bring several points back at
 * once) makes the original's choices from there on. */
static void restore_anywhere_continues_identically(void **state)
{
    (void)state;
    enum { STEPS = 100 };
    const char *const policies[3] = {NULL, "never", "no_pending"};
    kb_error err;
    for (const char *const *eng = kb_engine_names(); *eng; eng++)
        for (int kind = 0; kind < 4; kind++)
            for (int pol = 0; pol < 3; pol++) {
                kb_space *sp = script_space(kind);
                kb_config *cfg = kb_config_new(*eng, &err);
                assert_int_equal(kb_config_set_number(cfg, "seed", 1 + kind + pol, &err), KB_OK);
                if (policies[pol])
                    assert_int_equal(kb_config_set_string(cfg, "repeats", policies[pol], &err),
                                     KB_OK);
                kb_engine *e = kb_engine_create(cfg, sp, &err), *r = NULL;
                if (!e)
                    fail_msg("%s: %s", *eng, err.message);
                kb_rng drv;
                kb_rng_seed(&drv, 1000 + (uint64_t)(kind * 3 + pol));
                int at = 10 + (int)kb_rng_below(&drv, STEPS - 20);
                uint64_t pend[3 * STEPS];
                size_t np = 0;
                char what[96];
                snprintf(what, sizeof what, "%s, space %d, repeats %s", *eng, kind,
                         policies[pol] ? policies[pol] : "unset");
                for (int step = 0; step < STEPS; step++) {
                    if (step == at)
                        r = tu_restored(e);
                    script_step(e, r, &drv, pend, &np, what);
                }
                kb_engine_free(e);
                kb_engine_free(r);
                kb_config_free(cfg);
                kb_space_free(sp);
            }
}

/* Runs a fixed mixed script of calls; returns the indices asked. */
static void script(kb_engine *e, int steps, size_t *out_idx, kb_rng *driver)
{
    kb_error err;
    kb_point pts[3];
    kb_ask_result res;
    for (int s = 0; s < steps; s++) {
        assert_int_equal(kb_engine_ask(e, 2, pts, &res, &err), KB_OK);
        out_idx[2 * s] = pts[0].index;
        out_idx[2 * s + 1] = pts[1].index;
        assert_int_equal(kb_engine_tell(e, pts[0].handle, kb_rng_uniform(driver), &err), KB_OK);
        if (kb_rng_uniform(driver) < 0.5)
            assert_int_equal(kb_engine_abandon(e, pts[1].handle, &err), KB_OK);
    }
}

static void snapshot_restore_continues_identically(void **state)
{
    (void)state;
    kb_error err;
    kb_rng d1, d2;
    kb_rng_seed(&d1, 5);
    kb_rng_seed(&d2, 5);
    size_t a[40], b[40], c[40];
    kb_engine *e1 = random_engine(50, "allow", 11);
    kb_engine *e2 = random_engine(50, "allow", 11);
    script(e1, 10, a, &d1);
    script(e2, 10, b, &d2);
    double xo[2] = {3, -3};
    assert_int_equal(kb_engine_observe(e1, xo, 0.7, &err), KB_OK);
    assert_int_equal(kb_engine_observe(e2, xo, 0.7, &err), KB_OK);

    unsigned char *bytes;
    size_t len;
    assert_int_equal(kb_engine_snapshot(e2, &bytes, &len, &err), KB_OK);
    kb_engine_free(e2);
    kb_engine *r = kb_engine_restore(bytes, len, &err);
    assert_non_null(r);
    kb_rng d3 = d1;
    script(e1, 10, a + 20, &d1);
    script(r, 10, c + 20, &d3);
    assert_memory_equal(a + 20, c + 20, 20 * sizeof(size_t));
    kb_stats s1 = {.size = sizeof s1}, s2 = {.size = sizeof s2};
    kb_engine_stats(e1, &s1, NULL);
    kb_engine_stats(r, &s2, NULL);
    assert_int_equal(s1.asks, s2.asks);
    assert_int_equal(s1.pending, s2.pending);

    /* Every truncation and a flipped magic byte are rejected, never crash. */
    for (size_t cut = 0; cut < len; cut += 1 + cut / 8) {
        kb_engine *t = kb_engine_restore(bytes, cut, &err);
        assert_null(t);
        assert_int_equal(err.code, KB_ECORRUPT);
    }
    bytes[0] ^= 1;
    assert_null(kb_engine_restore(bytes, len, &err));
    free(bytes);
    kb_engine_free(e1);
    kb_engine_free(r);
}

static void box_space_random_engine_stays_in_cube(void **state)
{
    (void)state;
    kb_error err;
    kb_space *box = kb_space_new_box(3, 64, &err);
    kb_config *cfg = kb_config_new("random", &err);
    kb_engine *e = kb_engine_create(cfg, box, &err);
    assert_non_null(e);
    kb_point pts[200];
    kb_ask_result res;
    assert_int_equal(kb_engine_ask(e, 200, pts, &res, &err), KB_OK);
    assert_int_equal(res.n, 200);
    int distinct_gt_pool = 0;
    for (int i = 0; i < 200; i++)
        for (int j = 0; j < 3; j++) {
            assert_true(pts[i].x[j] >= 0.0 && pts[i].x[j] <= 1.0);
            distinct_gt_pool += pts[i].x[j] != pts[0].x[j];
        }
    assert_true(distinct_gt_pool > 0);
    kb_engine_free(e);
    kb_config_free(cfg);
    kb_space_free(box);
}

/* One step of spent_box_pool_is_redrawn's script: asks of one point until `pending` are
 * out, then tells the oldest pure noise, or abandons the newest every fifth step after
 * an empty ask (*abandoned). Returns a digest of what the asks handed out and said. */
static double spent_pool_step(kb_engine *e, const char *eng, int step, uint64_t *out,
                              size_t *n, size_t pending, kb_rng *noise, int *abandoned)
{
    kb_error err;
    kb_point p;
    kb_ask_result res = {0};
    double digest = 0.0;
    while (*n < pending) {
        assert_int_equal(kb_engine_ask(e, 1, &p, &res, &err), KB_OK);
        if (res.n == 0)
            break;
        out[(*n)++] = p.handle;
        digest += (double)p.handle + p.x[0] + 2.0 * p.x[1];
    }
    if (*n < pending && (*n == 0 || res.status != KB_ASK_AWAIT_FEEDBACK))
        fail_msg("%s: at step %d, %zu pending: an ask handed out nothing (status %d)", eng,
                 step, *n, (int)res.status);
    *abandoned = *n < pending && step % 5 == 0;
    if (*abandoned) {
        assert_int_equal(kb_engine_abandon(e, out[--*n], &err), KB_OK);
        return digest + 0.5;
    }
    assert_int_equal(kb_engine_tell(e, out[0], 5.0 * kb_rng_normal(noise), &err), KB_OK);
    memmove(out, out + 1, --*n * sizeof *out);
    return digest + (double)res.status;
}

/* A box is never exhausted: once every point of an engine's pool was handed out or told
 * (a batch that outlives its pool, as bbkb's epochs and gp-bucb's batches do under heavy
 * noise, or a pool redrawn only as the data grow, as gp-ucb's), the next ask draws a
 * new pool, or waits for the batch's feedback, instead of answering "exhausted". Every
 * engine, a pool of 64, four trials kept pending, 300 steps of pure noise and abandons.
 * The asks that hand out nothing leave no trace in the event log, so the engine restored
 * past step 100, just after an empty ask and an abandon, must go on exactly as the
 * original. */
static void spent_box_pool_is_redrawn(void **state)
{
    (void)state;
    enum { PENDING = 4, STEPS = 300 };
    kb_error err;
    for (const char *const *eng = kb_engine_names(); *eng; eng++) {
        kb_space *box = kb_space_new_box(2, 64, &err);
        kb_config *cfg = kb_config_new(*eng, &err);
        assert_int_equal(kb_config_set_number(cfg, "seed", 5, &err), KB_OK);
        kb_engine *e = kb_engine_create(cfg, box, &err), *r = NULL;
        assert_non_null(e);
        kb_rng noise, noise_r;
        kb_rng_seed(&noise, 6);
        uint64_t out[PENDING], out_r[PENDING];
        size_t n = 0, n_r = 0;
        int abandoned = 0, ab_r;
        for (int step = 0; step < STEPS; step++) {
            if (!r && step > 100 && abandoned) {
                r = tu_restored(e);
                memcpy(out_r, out, sizeof out);
                n_r = n;
                noise_r = noise;
            }
            double a = spent_pool_step(e, *eng, step, out, &n, PENDING, &noise, &abandoned);
            if (r && spent_pool_step(r, *eng, step, out_r, &n_r, PENDING, &noise_r, &ab_r) != a)
                fail_msg("%s: the restored engine parted at step %d", *eng, step);
        }
        kb_engine_free(e);
        kb_engine_free(r);
        kb_config_free(cfg);
        kb_space_free(box);
    }
}

/* The pool's space-filling rows are a shifted Halton set: row i, coordinate j is the
 * radical inverse of start + i in the j-th prime base plus a uniform shift, modulo 1,
 * start and shifts drawn from the RNG in that order. Checked bit for bit against that
 * definition computed here digit by digit (space.c generates it incrementally), over
 * 300 dimensions (bases up to 1,987) and a pool of 4,096 (carries through several digits). */
static void pool_is_the_shifted_halton_set(void **state)
{
    (void)state;
    enum { DIM = 300, POOL = 4096 };
    kb_space *box = kb_space_new_box(DIM, POOL, NULL);
    assert_non_null(box);
    kb_rng rng, copy;
    kb_rng_seed(&rng, 77);
    copy = rng;
    kb__space_refresh_pool(box, &rng, NULL, 0, NULL, 0);
    uint64_t start = 1 + kb_rng_below(&copy, 1u << 20);
    unsigned b = 1;
    for (size_t j = 0; j < DIM; j++) {
        double shift = kb_rng_uniform(&copy);
        int prime;
        do { /* the next prime, by trial division */
            b++;
            prime = 1;
            for (unsigned q = 2; q * q <= b; q++)
                prime = prime && b % q;
        } while (!prime);
        for (size_t i = 0; i < POOL; i++) {
            double f = 1.0, r = 0.0;
            for (uint64_t k = start + i; k > 0; k /= b) {
                f /= b;
                r += f * (double)(k % b);
            }
            double v = r + shift;
            if (box->rows[i * DIM + j] != v - floor(v))
                fail_msg("row %zu coordinate %zu (base %u): %.17g, expected %.17g", i, j, b,
                         box->rows[i * DIM + j], v - floor(v));
        }
    }
    assert_memory_equal(box->u, box->rows, sizeof(double) * DIM * POOL);
    kb_space_free(box);
}

/* The pool's local half reflects its normal steps at the cube's faces: every coordinate
 * moves (its steps are queued and evaluated in blocks: none may be lost), none lands
 * on a face (clipping put half of Styblinski-Tang-8's asks there, BENCHMARKS tenth
 * session), and a coordinate with a wide step (relative scale 8, sd 4 L) centered near a
 * face follows the folded normal mixture P(x < a) = sum_n Phi((2n + a - c) / s) -
 * Phi((2n - a - c) / s), computed here from the definition of the levels L = 0.4 / 2^m. */
static double normal_cdf(double z)
{
    return 0.5 * erfc(-z / sqrt(2.0));
}

static void pool_local_steps_reflect_at_the_faces(void **state)
{
    (void)state;
    enum { POOL = 8190, LEVELS = 7 }; /* 8,190 steps: the last block short */
    kb_space *box = kb_space_new_box(2, POOL, NULL);
    assert_non_null(box);
    kb_rng rng;
    kb_rng_seed(&rng, 5);
    const double best[2] = {0.5, 0.02}, ls[2] = {1.0, 64.0}; /* relative scales 1/8, 8 */
    kb__space_refresh_pool(box, &rng, best, 1, ls, 0);
    size_t first = POOL / 2, below = 0;
    const double a = 0.1;
    double expected = 0.0;
    for (size_t i = first; i < POOL; i++) {
        for (size_t j = 0; j < 2; j++) {
            double v = box->rows[i * 2 + j];
            if (!(v > 0.0 && v < 1.0))
                fail_msg("local row %zu coordinate %zu at %.17g: on a face or outside", i, j, v);
            if (v == best[j]) /* d = 2 moves every coordinate: a step was lost */
                fail_msg("local row %zu coordinate %zu not moved from its center", i, j);
        }
        below += box->rows[i * 2 + 1] < a;
        double s = 4.0 * 0.4 / (double)(1u << (((i - first) / 4) % LEVELS));
        for (int n = -20; n <= 20; n++)
            expected += normal_cdf((2.0 * n + a - best[1]) / s) -
                        normal_cdf((2.0 * n - a - best[1]) / s);
    }
    double m = (double)(POOL - first), p = expected / m;
    double got = (double)below / m, tol = 5.0 * sqrt(p * (1.0 - p) / m);
    if (fabs(got - p) > tol)
        fail_msg("fraction below %.2f: %.4f, the folded normal gives %.4f (+- %.4f)", a, got,
                 p, tol);
    kb_space_free(box);
}

/* Columns spanning nearly the whole double range scale to finite internal coordinates. */
static void scaling_survives_extreme_columns(void **state)
{
    (void)state;
    kb_error err;
    double rows[6] = {-1.7e308, 1.0, 0.0, 2.0, 1.7e308, 3.0};
    kb_scaling hows[] = {KB_SCALE_UNIT, KB_SCALE_STANDARDIZE};
    for (int h = 0; h < 2; h++) {
        kb_space *sp = kb_space_new_finite(rows, 3, 2, &err);
        assert_non_null(sp);
        assert_int_equal(kb__space_apply_scaling(sp, hows[h], &err), KB_OK);
        for (int i = 0; i < 6; i++)
            assert_true(isfinite(sp->u[i]));
        if (hows[h] == KB_SCALE_UNIT) {
            assert_true(fabs(sp->u[0]) < 1e-12 && fabs(sp->u[4] - 1.0) < 1e-12);
            assert_true(fabs(sp->u[2] - 0.5) < 1e-12 && fabs(sp->u[3] - 0.5) < 1e-12);
        } else {
            assert_true(fabs(sp->u[0] + sp->u[4]) < 1e-12 && fabs(sp->u[2]) < 1e-12);
        }
        kb_space_free(sp);
    }
}

/* An observation far outside the candidates' range (scaled beyond 1e100) is refused with
 * KB_ERANGE naming the coordinate; BBKB took x = 1e160 and then failed every ask. One
 * just inside the bound is taken and the engine still asks. */
static void observe_refuses_unscalable_coordinates(void **state)
{
    (void)state;
    kb_error err;
    double rows[6] = {0.0, 1.0, 1.0, 0.0, 0.5, 0.5};
    kb_space *sp = kb_space_new_finite(rows, 3, 2, &err);
    kb_config *cfg = kb_config_new("bbkb", &err);
    assert_non_null(sp);
    assert_non_null(cfg);
    kb_engine *e = kb_engine_create(cfg, sp, &err);
    assert_non_null(e);
    double far[2] = {0.5, 1e160}, near[2] = {1e99, 0.5};
    expect_error(kb_engine_observe(e, far, 1.0, &err), &err, KB_ERANGE, "x[1]");
    assert_int_equal(kb_engine_observe(e, near, 1.0, &err), KB_OK);
    kb_point p;
    kb_ask_result res;
    assert_int_equal(kb_engine_ask(e, 1, &p, &res, &err), KB_OK);
    kb_engine_free(e);
    kb_config_free(cfg);
    kb_space_free(sp);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(rng_is_deterministic_and_uniform),
        cmocka_unit_test(kernel_matrix_matches_pairwise),
        cmocka_unit_test(kernel_matrix_is_textbook_to_rounding),
        cmocka_unit_test(vector_math_within_4_ulp_at_every_width),
        cmocka_unit_test(kernel_profiles_match_scalar_at_both_widths),
        cmocka_unit_test(kernel_flushes_exponents_below_dbl_min),
        cmocka_unit_test(kernel_profile_is_textbook),
        cmocka_unit_test(config_rejects_bad_options),
        cmocka_unit_test(kernel_create_and_setters_validate),
        cmocka_unit_test(space_rejects_bad_candidates),
        cmocka_unit_test(base_checks_handles_and_values),
        cmocka_unit_test(repeats_policy_is_enforced),
        cmocka_unit_test(deterministic_values_stop_repeats),
        cmocka_unit_test(discrete_box_points_are_handed_out_once),
        cmocka_unit_test(log_levels_points_are_handed_out_once),
        cmocka_unit_test(log_levels_are_checked_and_nearest),
        cmocka_unit_test(exhausted_asks_change_nothing),
        cmocka_unit_test(discrete_box_larger_than_its_pool),
        cmocka_unit_test(restore_anywhere_continues_identically),
        cmocka_unit_test(refined_rows_are_not_repeats),
        cmocka_unit_test(discrete_box_flags_follow_the_points),
        cmocka_unit_test(snapshot_restore_continues_identically),
        cmocka_unit_test(output_stats_count_distinct_points),
        cmocka_unit_test(output_warp_matches_reference),
        cmocka_unit_test(output_warp_spread_floored_by_noise),
        cmocka_unit_test(refit_sets_noise_sd_of_the_warp),
        cmocka_unit_test(noise_is_not_fitted_as_a_white_kernel),
        cmocka_unit_test(warp_spread_floored_by_design),
        cmocka_unit_test(categorical_order_does_not_matter),
        cmocka_unit_test(categorical_term_under_noise),
        cmocka_unit_test(starved_choice_gets_the_pool),
        cmocka_unit_test(choice_floor_end_to_end),
        cmocka_unit_test(gp_ucb_choice_floor_end_to_end),
        cmocka_unit_test(ts_choice_floor_end_to_end),
        cmocka_unit_test(hidden_categorical_has_no_floor),
        cmocka_unit_test(many_choices_have_no_floor),
        cmocka_unit_test(stalled_run_climbs_a_second_basin),
        cmocka_unit_test(climbs_start_from_a_peak),
        cmocka_unit_test(spent_climb_stops),
        cmocka_unit_test(climbs_count_choices_unordered),
        cmocka_unit_test(climbs_end_to_end),
        cmocka_unit_test(codes_without_error_struct),
        cmocka_unit_test(stats_follow_the_callers_size),
        cmocka_unit_test(engine_figures_by_name),
        cmocka_unit_test(box_space_random_engine_stays_in_cube),
        cmocka_unit_test(spent_box_pool_is_redrawn),
        cmocka_unit_test(pool_is_the_shifted_halton_set),
        cmocka_unit_test(pool_local_steps_reflect_at_the_faces),
        cmocka_unit_test(scaling_survives_extreme_columns),
        cmocka_unit_test(observe_refuses_unscalable_coordinates),
        cmocka_unit_test(refits_space_out_once_a_fit_samples),
        cmocka_unit_test(finite_sets_start_with_uniform_draws),
        cmocka_unit_test(warm_starts_count_towards_the_design),
        cmocka_unit_test(box_design_follows_the_seed),
        cmocka_unit_test(gp_ucb_scores_the_interior_prior_exactly),
        cmocka_unit_test(interior_prior_keeps_trials_off_the_edges),
        cmocka_unit_test(recommend_is_the_best_posterior_mean),
        cmocka_unit_test(recommend_keeps_to_values_near_the_best),
        cmocka_unit_test(noise_hidden_dimensions_leave_the_model),
        cmocka_unit_test(hidden_dimensions_survive_a_restore),
    };
    return cmocka_run_group_tests_name("base", tests, NULL, NULL);
}
