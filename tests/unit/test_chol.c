/*
 * test_chol.c - unit tests of the common Cholesky factor (core/src/chol.c), in both
 * storage orders: factor, append sequence, block appends, rank-one update and downdate against a direct
 * LAPACKE dpotrf of the same matrix; the solves against the dense reference factor
 * multiplied back (and a direct LU solve, dgesv); the jitter rule (the first rung that
 * works, the same rule on an appended row, failure past the last rung) and the growth
 * of the storage.
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
#include "kbandit.h"
#include "util/testutil.h"

enum { N = 40, D = 3 };
static const double NOISE = 0.01, TOL = 1e-10;

/* L(i, j) of f, whatever its order. */
static double at(const kb_chol *f, size_t i, size_t j)
{
    return f->colmajor ? f->L[j * f->cap + i] : f->L[i * f->cap + j];
}

/* A (n x n, row-major) = K(X, X) + noise I for n random points of [0,1]^D (seeded);
 * with dup, the last point repeats the first (singular when noise is 0). */
static void kernel_matrix(double *A, size_t n, double noise, uint64_t seed, int dup)
{
    kb_rng rng;
    kb_rng_seed(&rng, seed);
    double *X = tu_uniform_matrix(&rng, n, D, 0.0, 1.0);
    if (dup)
        memcpy(X + (n - 1) * D, X, D * sizeof *X);
    kb_kernel *k = tu_kernel(KB_KERNEL_MATERN52, D, 0.5);
    kb_kernel_matrix(k, X, n, X, n, A);
    for (size_t i = 0; i < n; i++)
        A[i * n + i] += noise;
    kb_kernel_free(k);
    free(X);
}

/* Ref (n x n, row-major lower) = dpotrf(A). */
static void reference(const double *A, size_t n, double *Ref)
{
    memcpy(Ref, A, n * n * sizeof *Ref);
    assert_int_equal(LAPACKE_dpotrf(LAPACK_ROW_MAJOR, 'L', (lapack_int)n, Ref, (lapack_int)n), 0);
}

/* f's factor (its lower triangle: what lies above is unspecified) equals Ref's to TOL,
 * relative to the largest entry. */
static void assert_factor(const kb_chol *f, const double *Ref, size_t n)
{
    assert_int_equal(f->n, n);
    double top = 0.0, err = 0.0;
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j <= i; j++) {
            top = fmax(top, fabs(Ref[i * n + j]));
            err = fmax(err, fabs(at(f, i, j) - Ref[i * n + j]));
        }
    assert_true(err <= TOL * top);
}

static void factor_matches_dpotrf(void **state)
{
    static double A[N * N], Ref[N * N];
    kernel_matrix(A, N, NOISE, 1, 0);
    reference(A, N, Ref);
    for (int cm = 0; cm < 2; cm++) {
        kb_chol f;
        kb__chol_init(&f, cm);
        assert_int_equal(kb__chol_factor(&f, A, N, N), KB_OK);
        assert_int_equal(f.cap, N); /* reserve grows to exactly what is needed */
        assert_true(f.jitter == 0.0);
        assert_factor(&f, Ref, N);
        kb_chol g, h;
        kb__chol_init(&g, cm);
        kb__chol_init(&h, !cm);
        assert_int_equal(kb__chol_copy(&g, &f), KB_OK);
        assert_factor(&g, Ref, N);
        assert_int_equal(kb__chol_copy(&h, &f), KB_EINVAL); /* orders differ */
        kb__chol_free(&g);
        kb__chol_free(&f);
    }
}

/* Rows appended one at a time give dpotrf's factor of the whole matrix. */
static void append_sequence_matches_dpotrf(void **state)
{
    static double A[N * N], Ref[N * N];
    double a[N];
    kernel_matrix(A, N, NOISE, 2, 0);
    reference(A, N, Ref);
    for (int cm = 0; cm < 2; cm++) {
        kb_chol f;
        kb__chol_init(&f, cm);
        assert_int_equal(kb__chol_factor(&f, A, 5, N), KB_OK); /* a start from scratch */
        for (size_t i = 5; i < N; i++) {
            memcpy(a, A + i * N, i * sizeof *a);
            assert_int_equal(kb__chol_append(&f, a, A[i * N + i], NULL), KB_OK);
            for (size_t j = 0; j < i; j++) /* a came back as the new row */
                assert_true(a[j] == at(&f, i, j));
        }
        assert_true(f.cap >= N && f.jitter == 0.0);
        assert_factor(&f, Ref, N);
        kb__chol_free(&f);
    }
}

/* Blocks of rows appended at once (from an empty factor, of one row, of many, into a
 * full capacity) give dpotrf's factor of the whole matrix; a block whose Schur
 * complement is singular (a repeated point, no noise) takes the ladder's first working
 * rung on its own rows, and a NaN fails with the factor kept. */
static void append_rows_match_dpotrf(void **state)
{
    static double A[N * N], Ref[N * N];
    kernel_matrix(A, N, NOISE, 6, 0);
    reference(A, N, Ref);
    const size_t cut[] = {0, 7, 8, 30, N};
    for (int cm = 0; cm < 2; cm++) {
        kb_chol f;
        kb__chol_init(&f, cm);
        for (size_t b = 0; b + 1 < sizeof cut / sizeof cut[0]; b++) {
            assert_int_equal(kb__chol_append_rows(&f, A + cut[b] * N, cut[b + 1] - cut[b], N),
                             KB_OK);
            assert_int_equal(f.n, cut[b + 1]);
        }
        assert_true(f.cap >= N && f.jitter == 0.0);
        assert_factor(&f, Ref, N);
        assert_int_equal(kb__chol_append_rows(&f, A, 0, N), KB_OK);
        assert_int_equal(f.n, N);
        kb__chol_free(&f);
    }
    /* singular: the last point repeats the first; the block holds the last 10 rows */
    static double S[N * N], Sj[N * N];
    kernel_matrix(S, N, 0.0, 7, 1);
    for (int cm = 0; cm < 2; cm++) {
        kb_chol f;
        kb__chol_init(&f, cm);
        assert_int_equal(kb__chol_factor(&f, S, N - 10, N), KB_OK);
        assert_true(f.jitter == 0.0);
        double keep = at(&f, N - 11, 0);
        S[(N - 2) * N + 1] = NAN;
        assert_int_equal(kb__chol_append_rows(&f, S + (N - 10) * N, 10, N), KB_ENUMERIC);
        assert_int_equal(f.n, N - 10);
        assert_true(at(&f, N - 11, 0) == keep);
        S[(N - 2) * N + 1] = S[1 * N + N - 2];
        assert_int_equal(kb__chol_append_rows(&f, S + (N - 10) * N, 10, N), KB_OK);
        double s = 0.0;
        for (size_t i = N - 10; i < N; i++)
            s += S[i * N + i] / 10.0;
        double j = f.jitter, rung = 1e-10 * s;
        while (rung < j * (1 - 1e-12))
            rung *= 100.0;
        assert_true(j > 0.0 && fabs(j - rung) <= 1e-12 * rung);
        memcpy(Sj, S, sizeof Sj); /* the jitter went to the new rows only */
        for (size_t i = N - 10; i < N; i++)
            Sj[i * N + i] += j;
        reference(Sj, N, Ref);
        assert_factor(&f, Ref, N);
        kb__chol_free(&f);
    }
}

/* Points appended in blocks of KB_BLOCK_ROWS (here 600 after 50: three blocks, the last
 * short) give dpotrf's factor of k(X, X) + noise I. */
static void append_points_match_dpotrf(void **state)
{
    (void)state;
    enum { M = 650 };
    kb_rng rng;
    kb_rng_seed(&rng, 8);
    double *X = tu_uniform_matrix(&rng, M, D, 0.0, 1.0);
    double *A = malloc(M * M * sizeof *A), *Ref = malloc(M * M * sizeof *Ref);
    assert_non_null(A);
    assert_non_null(Ref);
    kb_kernel *k = tu_kernel(KB_KERNEL_MATERN52, D, 0.5);
    kb_kernel_matrix(k, X, M, X, M, A);
    for (size_t i = 0; i < M; i++)
        A[i * M + i] += NOISE;
    reference(A, M, Ref);
    for (int cm = 0; cm < 2; cm++) {
        kb_chol f;
        kb__chol_init(&f, cm);
        assert_int_equal(kb__chol_factor(&f, A, 50, M), KB_OK);
        assert_int_equal(kb__chol_append_points(&f, k, X, M, NOISE), KB_OK);
        assert_factor(&f, Ref, M);
        kb__chol_free(&f);
    }
    kb_kernel_free(k);
    free(X);
    free(A);
    free(Ref);
}

/* Solves against the reference: L (or L^T) times the solution, with dpotrf's factor,
 * gives the right-hand side back; the vector, matrix and row forms (the last by the
 * inverse, kb__chol_trmm_rows, whose buffer is left without the NaNs it was given)
 * agree; A^{-1} r matches an LU solve of A (dgesv). */
static void solves_match_direct(void **state)
{
    enum { M = 7 };
    static double A[N * N], Ref[N * N], B[N * M], X[N * M], Z[M * N], Lu[N * N], inv[N * N];
    double b[N], x[N], r[N], y[N];
    lapack_int piv[N];
    kernel_matrix(A, N, NOISE, 3, 0);
    reference(A, N, Ref);
    kb_rng rng;
    kb_rng_seed(&rng, 33);
    for (size_t i = 0; i < N * M; i++)
        B[i] = kb_rng_normal(&rng);
    for (size_t i = 0; i < N; i++)
        r[i] = y[i] = kb_rng_normal(&rng);
    memcpy(Lu, A, sizeof Lu);
    assert_int_equal(LAPACKE_dgesv(LAPACK_ROW_MAJOR, N, 1, Lu, N, piv, y, 1), 0);
    for (int cm = 0; cm < 2; cm++) {
        kb_chol f;
        kb__chol_init(&f, cm);
        assert_int_equal(kb__chol_factor(&f, A, N, N), KB_OK);
        for (int trans = 0; trans < 2; trans++) {
            memcpy(X, B, sizeof X);
            kb__chol_trsm(&f, trans, X, M, M);
            for (size_t c = 0; c < M; c++) {
                for (size_t i = 0; i < N; i++) {
                    x[i] = X[i * M + c];
                    b[i] = B[i * M + c];
                }
                kb__chol_trsv(&f, trans, b);
                assert_true(tu_max_rel_err(b, x, N, 1.0) <= TOL);
                for (size_t i = 0; i < N; i++) {
                    double s = 0.0;
                    for (size_t j = 0; j < N; j++)
                        s += (trans ? (j >= i ? Ref[j * N + i] : 0.0)
                                    : (j <= i ? Ref[i * N + j] : 0.0)) * x[j];
                    assert_true(fabs(s - B[i * M + c]) <= TOL * (1.0 + fabs(B[i * M + c])));
                }
            }
        }
        for (size_t from = 0; from <= N; from += 5) { /* the tail, given the head solved */
            memcpy(X, B, sizeof X);
            kb__chol_trsm(&f, 0, X, M, M);
            memcpy(Z, B, sizeof B); /* Z: N x M here, its first `from` rows solved */
            memcpy(Z, X, from * M * sizeof *Z);
            kb__chol_trsm_tail(&f, from, Z, M, M);
            for (size_t i = 0; i < N * M; i++)
                assert_true(fabs(Z[i] - X[i]) <= TOL * (1.0 + fabs(X[i])));
        }
        for (size_t k = 0; k < M; k++) /* Z = B^T: its rows solved are L^{-1} B's columns */
            for (size_t i = 0; i < N; i++)
                Z[k * N + i] = B[i * M + k];
        for (size_t i = 0; i < N * N; i++) /* garbage, as in a reused malloc block */
            inv[i] = NAN;
        assert_int_equal(kb__chol_inverse(&f, inv), KB_OK);
        for (size_t i = 0; i < N * N; i++) /* LAPACKE's NaN checks see all of it */
            assert_true(isfinite(inv[i]));
        kb__chol_trmm_rows(&f, inv, Z, M, N);
        memcpy(X, B, sizeof X);
        kb__chol_trsm(&f, 0, X, M, M);
        for (size_t k = 0; k < M; k++)
            for (size_t i = 0; i < N; i++)
                assert_true(fabs(Z[k * N + i] - X[i * M + k]) <= TOL * (1.0 + fabs(X[i * M + k])));
        memcpy(x, r, sizeof x);
        kb__chol_solve(&f, x);
        assert_true(tu_max_rel_err(x, y, N, 1.0) <= 1e-9);
        kb__chol_free(&f);
    }
}

/* chol(A) updated by x gives chol(A + x x^T); downdated back gives chol(A). */
static void update_and_downdate_match_dpotrf(void **state)
{
    static double A[N * N], Ax[N * N], Ref[N * N], Refx[N * N];
    double x[N], v[N];
    kernel_matrix(A, N, NOISE, 4, 0);
    kb_rng rng;
    kb_rng_seed(&rng, 44);
    for (size_t i = 0; i < N; i++) /* zeros first: the rotations start at x's support */
        x[i] = i < 6 ? 0.0 : kb_rng_normal(&rng);
    memcpy(Ax, A, sizeof Ax);
    for (size_t i = 0; i < N; i++)
        for (size_t j = 0; j < N; j++)
            Ax[i * N + j] += x[i] * x[j];
    reference(A, N, Ref);
    reference(Ax, N, Refx);
    for (int cm = 0; cm < 2; cm++) {
        kb_chol f;
        kb__chol_init(&f, cm);
        assert_int_equal(kb__chol_factor(&f, A, N, N), KB_OK);
        memcpy(v, x, sizeof v);
        kb__chol_update(&f, v);
        assert_factor(&f, Refx, N);
        memcpy(v, x, sizeof v);
        assert_int_equal(kb__chol_downdate(&f, v), KB_OK);
        assert_factor(&f, Ref, N);
        /* a downdate that leaves an indefinite matrix is refused */
        for (size_t i = 0; i < N; i++)
            v[i] = i == N / 2 ? 10.0 : 0.0;
        assert_int_equal(kb__chol_downdate(&f, v), KB_ENUMERIC);
        kb__chol_free(&f);
    }
}

/* A singular matrix (a repeated point, no noise): dpotrf fails on it, the factor takes
 * the first jitter of the ladder that works, and L L^T = A + jitter I. */
static void jitter_takes_the_first_rung_that_works(void **state)
{
    static double A[N * N], Aj[N * N], Ref[N * N];
    kernel_matrix(A, N, 0.0, 5, 1);
    memcpy(Ref, A, sizeof Ref);
    assert_true(LAPACKE_dpotrf(LAPACK_ROW_MAJOR, 'L', N, Ref, N) != 0);
    double s = 0.0;
    for (size_t i = 0; i < N; i++)
        s += A[i * N + i] / N;
    for (int cm = 0; cm < 2; cm++) {
        kb_chol f;
        kb__chol_init(&f, cm);
        assert_int_equal(kb__chol_factor(&f, A, N, N), KB_OK);
        double j = f.jitter, rung = 1e-10 * s;
        while (rung < j * (1 - 1e-12))
            rung *= 100.0;
        assert_true(j > 0.0 && fabs(j - rung) <= 1e-12 * rung); /* a rung of the ladder */
        if (j > 1e-10 * s * 1.5) { /* the rung below fails */
            memcpy(Aj, A, sizeof Aj);
            for (size_t i = 0; i < N; i++)
                Aj[i * N + i] += j / 100.0;
            assert_true(LAPACKE_dpotrf(LAPACK_ROW_MAJOR, 'L', N, Aj, N) != 0);
        }
        memcpy(Aj, A, sizeof Aj);
        for (size_t i = 0; i < N; i++)
            Aj[i * N + i] += j;
        reference(Aj, N, Ref);
        assert_factor(&f, Ref, N);
        kb__chol_free(&f);
    }
}

/* An appended row with pivot^2 <= 0 gets the same ladder (on its own diagonal); past
 * the last rung, or with a NaN, the append and the factor fail and the factor stays. */
static void jitter_on_append_and_failures(void **state)
{
    double I2[4] = {1.0, 0.0, 0.0, 1.0}, a[2];
    for (int cm = 0; cm < 2; cm++) {
        kb_chol f;
        kb__chol_init(&f, cm);
        assert_int_equal(kb__chol_factor(&f, I2, 2, 2), KB_OK);
        a[0] = 1.0;
        a[1] = 0.0; /* pivot^2 = 1 - 1 = 0: the first rung, 1e-10 of the diagonal 1 */
        double schur = 0.0;
        assert_int_equal(kb__chol_append(&f, a, 1.0, &schur), KB_OK);
        assert_true(schur == (1.0 + 1e-10) - 1.0); /* the Schur complement, jitter in */
        assert_int_equal(f.n, 3);
        assert_true(fabs(f.jitter - 1e-10) <= 1e-22);
        /* (1 + 1e-10) - 1 keeps 1e-10 to the rounding of 1: 1e-6 relative */
        assert_true(fabs(kb__chol_pivot(&f, 2) - sqrt(1e-10)) <= 1e-6 * sqrt(1e-10));
        double keep = at(&f, 2, 0), b[3] = {2.0, 0.0, 0.0};
        /* pivot^2 = 1 - 4: beyond the last rung (1e-2 of the diagonal) */
        assert_int_equal(kb__chol_append(&f, b, 1.0, NULL), KB_ENUMERIC);
        assert_int_equal(f.n, 3);
        assert_true(at(&f, 2, 0) == keep);
        double Bad[4] = {1.0, 0.0, NAN, 1.0};
        assert_int_equal(kb__chol_factor(&f, Bad, 2, 2), KB_ENUMERIC);
        assert_int_equal(f.n, 0);
        kb__chol_free(&f);
        kb__chol_free(&f); /* freeing twice is harmless */
    }
}

/* LAPACKE's own allocation failures read as out of memory (the daemon retries a restore
 * that ran out of memory, and gives up on one whose data cannot be factored); a row-major
 * dpotrf of an indefinite matrix, and a bad argument, read as numerical failures. */
/* kb__tri_inverse (by halves above 32, dtrtri below) against LAPACK's dtrtri, for both
 * triangles, sizes across the recursion's cut and a leading dimension above n: the same
 * inverse to 1e-12, the other triangle untouched; a zero pivot gives info > 0. */
static void tri_inverse_matches_dtrtri(void **state)
{
    (void)state;
    size_t sizes[] = {1, 7, 32, 33, 64, 129, 300};
    kb_rng rng;
    kb_rng_seed(&rng, 41);
    for (size_t t = 0; t < sizeof sizes / sizeof sizes[0]; t++)
        for (int upper = 0; upper < 2; upper++) {
            size_t n = sizes[t], ld = n + 3;
            double *T = malloc(ld * n * sizeof *T), *R = malloc(ld * n * sizeof *R);
            assert_non_null(T);
            assert_non_null(R);
            for (size_t j = 0; j < n; j++) /* column j, row i: T[j ld + i] */
                for (size_t i = 0; i < ld; i++) {
                    int in = i < n && (upper ? i <= j : i >= j);
                    T[j * ld + i] = !in ? 7.0
                                    : i == j ? 1.0 + fabs(kb_rng_normal(&rng))
                                             : kb_rng_normal(&rng) / sqrt((double)n);
                }
            memcpy(R, T, ld * n * sizeof *R);
            assert_int_equal(kb__tri_inverse(T, n, ld, upper), 0);
            assert_int_equal(LAPACKE_dtrtri_work(LAPACK_COL_MAJOR, upper ? 'U' : 'L', 'N',
                                                 (lapack_int)n, R, (lapack_int)ld),
                             0);
            for (size_t k = 0; k < ld * n; k++)
                assert_true(fabs(T[k] - R[k]) <= 1e-12 * (1.0 + fabs(R[k])));
            for (size_t j = 0; j < n; j++)
                for (size_t i = 0; i < ld; i++)
                    if (i >= n || (upper ? i > j : i < j))
                        assert_true(T[j * ld + i] == 7.0);
            T[(n / 2) * ld + n / 2] = 0.0;
            assert_true(kb__tri_inverse(T, n, ld, upper) > 0);
            free(T);
            free(R);
        }
}

static void lapack_status_tells_memory_from_numbers(void **state)
{
    (void)state;
    assert_int_equal(kb__lapack_status(0), KB_OK);
    assert_int_equal(kb__lapack_status(LAPACK_WORK_MEMORY_ERROR), KB_ENOMEM);
    assert_int_equal(kb__lapack_status(LAPACK_TRANSPOSE_MEMORY_ERROR), KB_ENOMEM);
    double A[4] = {1.0, 2.0, 2.0, 1.0};
    int info = LAPACKE_dpotrf(LAPACK_ROW_MAJOR, 'L', 2, A, 2);
    assert_true(info > 0);
    assert_int_equal(kb__lapack_status(info), KB_ENUMERIC);
    assert_int_equal(kb__lapack_status(-4), KB_ENUMERIC);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(factor_matches_dpotrf),
        cmocka_unit_test(append_sequence_matches_dpotrf),
        cmocka_unit_test(append_rows_match_dpotrf),
        cmocka_unit_test(append_points_match_dpotrf),
        cmocka_unit_test(solves_match_direct),
        cmocka_unit_test(tri_inverse_matches_dtrtri),
        cmocka_unit_test(update_and_downdate_match_dpotrf),
        cmocka_unit_test(jitter_takes_the_first_rung_that_works),
        cmocka_unit_test(jitter_on_append_and_failures),
        cmocka_unit_test(lapack_status_tells_memory_from_numbers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
