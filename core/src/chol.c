/*
 * chol.c - the one Cholesky factor every engine uses (kb_chol, internal.h): a growable
 * lower-triangular L with L L^T = A, built from scratch (LAPACKE dpotrf), grown by one
 * row (CBLAS dtrsv) or a block of rows (dtrsm, dsyrk, dpotrf), changed by a rank-one
 * update (Givens rotations, drot) or downdate (hyperbolic rotations), and the
 * triangular solves on it (dtrsv / dtrsm), or for many
 * rows at once by its inverse (kb__tri_inverse, then dtrmm); that triangular inverse
 * also serves the hyperparameter fit and BBKB's embedding.
 *
 * Storage. L is cap x cap with the factor's n x n lower triangle in its top-left corner,
 * row-major or column-major (`colmajor`). Both orders exist because the engines' hot
 * paths differ: gp-ucb, gp-ts and pi-gp-ucb append rows, which are contiguous row-major;
 * BBKB rotates one column per dictionary coordinate on every hand-out, contiguous
 * column-major. Every operation passes the order through to the same BLAS/LAPACK call,
 * so each engine, keeping the order it had, makes the calls it made before the factor
 * was shared (kb-bench runs of every engine made the same choices before and after).
 * Only the lower triangle is the factor: every call reads it alone, and what lies above
 * is unspecified (LAPACKE's row-major dpotrf writes there). kb__chol_reserve grows to exactly what it is
 * asked (an engine growing row arrays alongside passes their capacity); appending
 * doubles the capacity when full. A zeroed kb_chol is an empty row-major factor.
 *
 * The jitter rule, the same for a factorization from scratch and for an appended row:
 * a factor is accepted when every pivot^2 is positive as computed (LAPACK's own test in
 * dpotrf, and pivot^2 = a_nn - |L^{-1} a|^2 > 0 for an appended row, so that appending
 * rows one by one accepts the same matrices as factoring them at once). Otherwise the
 * rows being factored (all of them, the new one, or a new block) get j added to their
 * diagonal, j = 1e-10 s, then 100 times more per failure up to 1e-2 s, s their mean diagonal
 * entry (1 when that is not positive and finite); KB_ENUMERIC beyond. Why: the engines
 * factor K + noise I, positive definite in exact arithmetic with pivot^2 >= noise, and
 * kernel matrices without noise (sgp-ts's K_ZZ), positive semi-definite; a failure is
 * then rounding, and the smallest jitter that restores definiteness perturbs the model
 * least. 1e-10 of the diagonal is far above the rounding of a factorization (n eps
 * relative) and far below any noise the engines use (>= 1e-6 when fitted, hyper.c);
 * past 1e-2 the matrix is not a covariance up to rounding (NaN, a negative eigenvalue)
 * and failing is the honest answer. The jitter used is kept in `jitter`.
 */
#include "internal.h"

#include <cblas.h>
#include <lapacke.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* the ladder: 1e-10, 1e-8, ..., 1e-2 times the diagonal scale */
#define JITTER_FIRST 1e-10
#define JITTER_STEP 100.0
#define JITTER_TRIES 5

/* Strides of L(i, j) = L[i * rs + j * cs]. */
static size_t row_stride(const kb_chol *f) { return f->colmajor ? 1 : f->cap; }
static size_t col_stride(const kb_chol *f) { return f->colmajor ? f->cap : 1; }

static CBLAS_ORDER order(const kb_chol *f) { return f->colmajor ? CblasColMajor : CblasRowMajor; }

void kb__chol_init(kb_chol *f, int colmajor)
{
    memset(f, 0, sizeof *f);
    f->colmajor = colmajor;
}

void kb__chol_free(kb_chol *f)
{
    free(f->L);
    f->L = NULL;
    f->n = f->cap = 0;
}

/* The lower triangle of f's factor into L (f's order, leading dimension cap): row i
 * (row-major) or column i (column-major) from its start (row-major) or its diagonal
 * (column-major). */
static void copy_lower(const kb_chol *f, double *L, size_t cap)
{
    for (size_t i = 0; i < f->n; i++) {
        size_t from = f->colmajor ? i : 0, len = f->colmajor ? f->n - i : i + 1;
        memcpy(L + i * cap + from, f->L + i * f->cap + from, len * sizeof *L);
    }
}

int kb__chol_reserve(kb_chol *f, size_t need)
{
    if (need <= f->cap)
        return KB_OK;
    double *p = calloc(need * need, sizeof *p);
    if (!p)
        return KB_ENOMEM;
    copy_lower(f, p, need);
    free(f->L);
    f->L = p;
    f->cap = need;
    return KB_OK;
}

int kb__chol_copy(kb_chol *dst, const kb_chol *src)
{
    if (dst->colmajor != src->colmajor)
        return KB_EINVAL;
    kb__chol_truncate(dst, 0);
    if (kb__chol_reserve(dst, src->n))
        return KB_ENOMEM;
    /* not LAPACKE's row-major dlacpy: it transposes both matrices through copies it
     * allocates (8% of gp-bucb's first ask after 5,000 observations) */
    copy_lower(src, dst->L, dst->cap);
    dst->n = src->n;
    dst->jitter = src->jitter;
    return KB_OK;
}

/* The n x n lower triangle at dst (in f's storage and order) = A's (row-major, lda),
 * plus j on the diagonal. */
static void load(const kb_chol *f, double *dst, const double *A, size_t n, size_t lda,
                 double j)
{
    size_t rs = row_stride(f), cs = col_stride(f);
    for (size_t i = 0; i < n; i++) {
        for (size_t k = 0; k <= i; k++)
            dst[i * rs + k * cs] = A[i * lda + k];
        dst[i * rs + i * cs] += j;
    }
}

static double mean_diagonal(const double *A, size_t n, size_t lda)
{
    double s = 0.0;
    for (size_t i = 0; i < n; i++)
        s += A[i * lda + i] / (double)n;
    return s > 0.0 && isfinite(s) ? s : 1.0;
}

/* The jitter of try t of the ladder (t = 0: none), s the scale of the diagonal. */
static double jitter_at(int t, double s)
{
    double j = t ? JITTER_FIRST * s : 0.0;
    while (t-- > 1)
        j *= JITTER_STEP;
    return j;
}

int kb__chol_factor(kb_chol *f, const double *A, size_t n, size_t lda)
{
    if (kb__chol_reserve(f, n))
        return KB_ENOMEM;
    f->n = 0;
    int layout = f->colmajor ? LAPACK_COL_MAJOR : LAPACK_ROW_MAJOR;
    double s = mean_diagonal(A, n, lda);
    for (int t = 0; t <= JITTER_TRIES; t++) {
        double j = jitter_at(t, s);
        load(f, f->L, A, n, lda, j);
        int info = n ? LAPACKE_dpotrf(layout, 'L', (lapack_int)n, f->L, (lapack_int)f->cap) : 0;
        if (info == 0) {
            f->n = n;
            f->jitter = j;
            return KB_OK;
        }
        if (kb__lapack_status(info) == KB_ENOMEM) /* row-major: a transposed copy */
            return KB_ENOMEM;
    }
    return KB_ENUMERIC;
}

int kb__lapack_status(int info)
{
    if (info == LAPACK_WORK_MEMORY_ERROR || info == LAPACK_TRANSPOSE_MEMORY_ERROR)
        return KB_ENOMEM;
    return info ? KB_ENUMERIC : KB_OK;
}

int kb__chol_append(kb_chol *f, double *a, double ann, double *schur)
{
    size_t n = f->n;
    if (n + 1 > f->cap && kb__chol_reserve(f, f->cap > 4 ? 2 * f->cap : 8))
        return KB_ENOMEM;
    double l2 = 0.0;
    if (n) {
        kb__chol_trsv(f, 0, a);
        l2 = cblas_ddot((int)n, a, 1, a, 1);
    }
    double s = ann > 0.0 && isfinite(ann) ? ann : 1.0, j = 0.0, p2 = ann - l2;
    for (int t = 1; !(p2 > 0.0) && t <= JITTER_TRIES; t++) {
        j = jitter_at(t, s);
        p2 = ann + j - l2;
    }
    if (!(p2 > 0.0))
        return KB_ENUMERIC;
    f->jitter = fmax(f->jitter, j);
    if (schur)
        *schur = p2;
    cblas_dcopy((int)n, a, 1, f->L + n * row_stride(f), (int)col_stride(f));
    f->L[n * (f->cap + 1)] = sqrt(p2);
    f->n = n + 1;
    return KB_OK;
}

int kb__chol_append_rows(kb_chol *f, const double *A, size_t k, size_t lda)
{
    size_t n = f->n;
    if (k == 0)
        return KB_OK;
    if (n + k > f->cap && kb__chol_reserve(f, n + k > 2 * f->cap ? n + k : 2 * f->cap))
        return KB_ENOMEM;
    /* L21 and L22 live in f's storage, in f's order, so that every call below takes the
     * order through like kb__chol_trsm */
    size_t rs = row_stride(f), cs = col_stride(f);
    double *L21 = f->L + n * rs, *L22 = L21 + n * cs;
    for (size_t i = 0; i < k; i++)
        for (size_t j = 0; j < n; j++)
            L21[i * rs + j * cs] = A[i * lda + j];
    if (n) /* L21 = A21 L11^{-T} */
        cblas_dtrsm(order(f), CblasRight, CblasLower, CblasTrans, CblasNonUnit, (int)k, (int)n,
                    1.0, f->L, (int)f->cap, L21, (int)f->cap);
    int layout = f->colmajor ? LAPACK_COL_MAJOR : LAPACK_ROW_MAJOR;
    double s = mean_diagonal(A + n, k, lda);
    for (int t = 0; t <= JITTER_TRIES; t++) {
        double j = jitter_at(t, s);
        load(f, L22, A + n, k, lda, j);
        if (n) /* the Schur complement A22 - L21 L21^T */
            cblas_dsyrk(order(f), CblasLower, CblasNoTrans, (int)k, (int)n, -1.0, L21,
                        (int)f->cap, 1.0, L22, (int)f->cap);
        int info = LAPACKE_dpotrf(layout, 'L', (lapack_int)k, L22, (lapack_int)f->cap);
        if (info == 0) {
            f->n = n + k;
            f->jitter = fmax(f->jitter, j);
            return KB_OK;
        }
        if (kb__lapack_status(info) == KB_ENOMEM)
            return KB_ENOMEM;
    }
    return KB_ENUMERIC;
}

int kb__chol_append_points(kb_chol *f, const kb_kernel *k, const double *P, size_t to,
                           double noise)
{
    size_t d = k->dim, most = to - f->n < KB_BLOCK_ROWS ? to - f->n : KB_BLOCK_ROWS;
    double *K = malloc(most * to * sizeof *K);
    int rc = K ? KB_OK : KB_ENOMEM;
    while (!rc && f->n < to) {
        size_t n = f->n, b = to - n < most ? to - n : most, w = n + b;
        kb_kernel_matrix(k, P + n * d, b, P, w, K);
        for (size_t i = 0; i < b; i++) { /* the diagonal as the kernel's, exactly */
            kb_kernel_diag(k, P + (n + i) * d, 1, K + i * w + n + i);
            K[i * w + n + i] += noise;
        }
        rc = kb__chol_append_rows(f, K, b, w);
    }
    free(K);
    return rc;
}

/* Index of the first nonzero of x[0..n), or n: rotations before it are identities. */
static size_t first_nonzero(const double *x, size_t n)
{
    size_t k = 0;
    while (k < n && x[k] == 0.0)
        k++;
    return k;
}

void kb__chol_update(kb_chol *f, double *x)
{
    size_t n = f->n, rs = row_stride(f);
    for (size_t k = first_nonzero(x, n); k < n; k++) {
        double *lkk = f->L + k * (f->cap + 1), h = hypot(*lkk, x[k]);
        double c = *lkk / h, s = x[k] / h;
        *lkk = h;
        if (k + 1 < n)
            cblas_drot((int)(n - k - 1), lkk + rs, (int)rs, x + k + 1, 1, c, s);
    }
}

int kb__chol_downdate(kb_chol *f, double *x)
{
    size_t n = f->n, rs = row_stride(f);
    for (size_t k = first_nonzero(x, n); k < n; k++) {
        double *lkk = f->L + k * (f->cap + 1);
        double r2 = *lkk * *lkk - x[k] * x[k];
        if (!(r2 > 0.0))
            return KB_ENUMERIC;
        double r = sqrt(r2), c = r / *lkk, s = x[k] / *lkk;
        *lkk = r;
        int m = (int)(n - k - 1);
        if (m == 0)
            break;
        /* column k below the diagonal and x: [c' -s'; -s' c'] with c' = 1/c, s' = s/c */
        double *col = lkk + rs;
        cblas_daxpy(m, -s, x + k + 1, 1, col, (int)rs);
        cblas_dscal(m, 1.0 / c, col, (int)rs);
        cblas_dscal(m, c, x + k + 1, 1);
        cblas_daxpy(m, -s, col, (int)rs, x + k + 1, 1);
    }
    return KB_OK;
}

void kb__chol_trsv(const kb_chol *f, int trans, double *x)
{
    if (f->n)
        cblas_dtrsv(order(f), CblasLower, trans ? CblasTrans : CblasNoTrans, CblasNonUnit,
                    (int)f->n, f->L, (int)f->cap, x, 1);
}

void kb__chol_solve(const kb_chol *f, double *x)
{
    kb__chol_trsv(f, 0, x);
    kb__chol_trsv(f, 1, x);
}

/* A column-major L is the row-major upper triangle U = L^T: op(U) = U^T is L. */
void kb__chol_trsm(const kb_chol *f, int trans, double *B, size_t nrhs, size_t ldb)
{
    if (!f->n || !nrhs)
        return;
    int t = f->colmajor ? !trans : trans;
    cblas_dtrsm(CblasRowMajor, CblasLeft, f->colmajor ? CblasUpper : CblasLower,
                t ? CblasTrans : CblasNoTrans, CblasNonUnit, (int)f->n, (int)nrhs, 1.0, f->L,
                (int)f->cap, B, (int)ldb);
}

void kb__chol_trsm_tail(const kb_chol *f, size_t from, double *B, size_t nrhs, size_t ldb)
{
    size_t k = f->n > from ? f->n - from : 0;
    if (!k || !nrhs)
        return;
    /* Read row-major with leading dimension cap, a column-major factor is L^T: its L21
     * block is then the from x k transpose, its L22 an upper triangle (as kb__chol_trsm). */
    const double *L21 = f->L + from * row_stride(f), *L22 = L21 + from * col_stride(f);
    double *B2 = B + from * ldb;
    if (from)
        cblas_dgemm(CblasRowMajor, f->colmajor ? CblasTrans : CblasNoTrans, CblasNoTrans,
                    (int)k, (int)nrhs, (int)from, -1.0, L21, (int)f->cap, B, (int)ldb, 1.0, B2,
                    (int)ldb);
    cblas_dtrsm(CblasRowMajor, CblasLeft, f->colmajor ? CblasUpper : CblasLower,
                f->colmajor ? CblasTrans : CblasNoTrans, CblasNonUnit, (int)k, (int)nrhs, 1.0,
                L22, (int)f->cap, B2, (int)ldb);
}

/* By halves: [A, 0; B, C]^-1 = [A^-1, 0; -C^-1 B A^-1, C^-1] (upper: the transpose's
 * pattern, B <- -A^-1 B C^-1), B's update as two triangular solves (level 3), LAPACK's
 * dtrtri below 32. Why not dtrtri throughout: at these sizes OpenBLAS 0.3.21's dtrtri
 * spends most of its time in its unblocked dtrti2 (one dtrmv per column; perf: 5% of a
 * noise-free bbkb daemon, docs/BENCHMARKS.md, thirtieth session), and dpotri took 3-5x
 * dpotrf's time at n = 64-256 (1.03 ms against 0.33 at n = 256, one thread); this inverse
 * and dlauum take 0.5-0.7 of it. A zero pivot ends in dtrtri's info > 0. */
int kb__tri_inverse(double *T, size_t n, size_t ld, int upper)
{
    if (n <= 32)
        return n ? LAPACKE_dtrtri_work(LAPACK_COL_MAJOR, upper ? 'U' : 'L', 'N', (lapack_int)n,
                                       T, (lapack_int)ld)
                 : 0;
    size_t n1 = n / 2, n2 = n - n1;
    double *C = T + n1 * ld + n1, *B = upper ? T + n1 * ld : T + n1;
    /* B is rows x cols, between the triangle on its left and the one on its right */
    int rows = (int)(upper ? n1 : n2), cols = (int)(upper ? n2 : n1);
    const double *left = upper ? T : C, *right = upper ? C : T;
    CBLAS_UPLO uplo = upper ? CblasUpper : CblasLower;
    cblas_dtrsm(CblasColMajor, CblasLeft, uplo, CblasNoTrans, CblasNonUnit, rows, cols, -1.0,
                left, (int)ld, B, (int)ld);
    cblas_dtrsm(CblasColMajor, CblasRight, uplo, CblasNoTrans, CblasNonUnit, rows, cols, 1.0,
                right, (int)ld, B, (int)ld);
    int info = kb__tri_inverse(T, n1, ld, upper);
    return info ? info : kb__tri_inverse(C, n2, ld, upper);
}

/* inv is zeroed first so that it may itself go to LAPACKE, which checks a general matrix
 * for NaNs over all of it: a dlacpy from a buffer with NaN garbage above the diagonal
 * returns -5 and copies nothing. A row-major lower triangle is a column-major upper one. */
int kb__chol_inverse(const kb_chol *f, double *inv)
{
    if (!f->n)
        return KB_OK;
    int order = f->colmajor ? LAPACK_COL_MAJOR : LAPACK_ROW_MAJOR;
    memset(inv, 0, f->n * f->n * sizeof *inv);
    int info = LAPACKE_dlacpy(order, 'L', (lapack_int)f->n, (lapack_int)f->n, f->L,
                              (lapack_int)f->cap, inv, (lapack_int)f->n);
    if (info == 0)
        info = kb__tri_inverse(inv, f->n, f->n, !f->colmajor);
    return kb__lapack_status(info);
}

/* Row z <- L^{-1} z is z^T <- z^T L^{-T}: the inverse's transpose from the right. A
 * column-major inverse is, read row-major, that transpose already. */
void kb__chol_trmm_rows(const kb_chol *f, const double *inv, double *Z, size_t m, size_t ldz)
{
    if (!f->n || !m)
        return;
    cblas_dtrmm(CblasRowMajor, CblasRight, f->colmajor ? CblasUpper : CblasLower,
                f->colmajor ? CblasNoTrans : CblasTrans, CblasNonUnit, (int)m, (int)f->n, 1.0,
                inv, (int)f->n, Z, (int)ldz);
}
