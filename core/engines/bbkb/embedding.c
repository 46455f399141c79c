/*
 * embedding.c - the Nystrom embedding of BBKB / BKB (seed 004 section 2):
 * z(x) = K_S^{+/2} k_S(x) over the dictionary S, as z(x) = W^T k_S(x) with W (m x r)
 * from a pivoted Cholesky factorization of K_S that drops the points adding directions
 * of negligible variance (r <= m; r = m when K_S is well conditioned). z is formed lazily, only for
 * the candidates an epoch touches (kb__bbkb_zrow, kb__bbkb_zrows), from the cached
 * kernel columns Kc.
 *
 * Invariants: row i of Z and resid[i] = k(x_i, x_i) - ||z(x_i)||^2 hold for the current
 * W and candidate pool exactly when zstamp[i] == zgen; zgen changes whenever W
 * (kb__bbkb_build_embedding) or the pool (kb__bbkb_new_pool) does; kdict_max >= k(s, s)
 * over every dictionary point since the pool was drawn. Wp, Sp and pslot are built with W
 * and are the same map in pivot order (W's nonzero rows, a triangle), which the many-row
 * products use.
 */
#include "bbkb_internal.h"

#include <cblas.h>
#include <lapacke.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Pivots of K_S whose remaining diagonal (the variance of k(s, .) not explained by the
 * pivots before it) falls below PIVOT_RTOL x max_s k(s, s) are dropped: those points add
 * directions that carry less than 1e-10 of k(s, s), and 1 / sqrt of such a pivot would
 * amplify the round-off of k_S(x) by more than 1e5 - the level at which the
 * eigendecomposition this replaced (until the eighteenth session) dropped eigenvalues,
 * 1e-10 of the largest. A K_S whose smallest eigenvalue is above it keeps every point:
 * the Schur complement of a principal block has no smaller eigenvalue, hence no smaller
 * diagonal. A larger tolerance (1e-8) leaves dictionary points unexplained beyond 2e-10
 * (test_bbkb's clustered_dictionary_is_dtc_over_kept_points fails). */
#define PIVOT_RTOL 1e-10

/* Zout (n x r) = embeddings of the rows of U (n x d) with the current dictionary: the
 * kernel values against the r pivot points, times the triangular Wp in place (dtrmm,
 * n r^2 flops where a product with the dense W, zero rows and zero lower triangle
 * included, took 2 n m r: embedding every data row was nearly half of a long noisy
 * study's CPU; docs/BENCHMARKS.md, twenty-eighth session). */
int kb__bbkb_embed_rows(const kb_engine *e, const double *U, size_t n, double *Zout)
{
    const bbkb *st = e->impl;
    if (n == 0 || st->r == 0)
        return KB_OK;
    kb_kernel_matrix(&e->kernel, U, n, st->Sp, st->r, Zout);
    cblas_dtrmm(CblasRowMajor, CblasRight, CblasUpper, CblasNoTrans, CblasNonUnit, (int)n,
                (int)st->r, 1.0, st->Wp, (int)st->r, Zout, (int)st->r);
    return KB_OK;
}

/* Row i of Z (and resid[i]) for the current dictionary, computed on first use: an epoch
 * needs z only for the few candidates it hands out or lazily re-evaluates. */
const double *kb__bbkb_zrow(bbkb *st, size_t i)
{
    double *z = st->Z + i * st->r;
    if (st->zstamp[i] == st->zgen)
        return z;
    if (st->r)
        cblas_dgemv(CblasRowMajor, CblasTrans, (int)st->m, (int)st->r, 1.0, st->W,
                    (int)st->r, st->Kc + i, (int)st->A, 0.0, z, 1);
    st->resid[i] = st->kdiag[i] - (st->r ? cblas_ddot((int)st->r, z, 1, z, 1) : 0.0);
    st->zstamp[i] = st->zgen;
    return z;
}

/* kb__bbkb_zrow for every candidate of cand[0..n) (NONE entries skipped) at once: their
 * kernel values at the pivots gathered and multiplied by Wp in place, instead of a gemv
 * each, for kb__bbkb_rebuild_model, which embeds every selected point at each
 * resparsification. */
int kb__bbkb_zrows(bbkb *st, const size_t *cand, size_t n)
{
    size_t r = st->r, k = 0;
    size_t *todo = malloc((n + 1) * sizeof *todo);
    double *Zr = malloc((n * r + 1) * sizeof *Zr);
    int rc = todo && Zr ? KB_OK : KB_ENOMEM;
    for (size_t j = 0; !rc && j < n; j++)
        if (cand[j] != NONE && st->zstamp[cand[j]] != st->zgen) {
            st->zstamp[cand[j]] = st->zgen; /* also skips repeats */
            todo[k++] = cand[j];
        }
    for (size_t i = 0; i < r; i++)
        for (size_t j = 0; j < k; j++)
            Zr[j * r + i] = st->Kc[st->pslot[i] * st->A + todo[j]];
    if (k && r)
        cblas_dtrmm(CblasRowMajor, CblasRight, CblasUpper, CblasNoTrans, CblasNonUnit, (int)k,
                    (int)r, 1.0, st->Wp, (int)r, Zr, (int)r);
    for (size_t j = 0; j < k; j++) {
        const double *z = Zr + j * r;
        if (r) /* Z may be unallocated when r == 0 */
            memcpy(st->Z + todo[j] * r, z, r * sizeof *z);
        st->resid[todo[j]] = st->kdiag[todo[j]] - (r ? cblas_ddot((int)r, z, 1, z, 1) : 0.0);
    }
    free(todo);
    free(Zr);
    return rc;
}

/* Lp (r x r, row-major) = L11, the first r columns of dpstrf's factor in K (column-major,
 * leading dimension m), zeros above the diagonal. */
static void keep_factor(bbkb *st, const double *K, size_t r)
{
    for (size_t i = 0; i < r; i++)
        for (size_t k = 0; k < r; k++)
            st->Lp[i * r + k] = k <= i ? K[k * st->m + i] : 0.0;
}

/* W (m x r) from the pivoted Cholesky factorization P^T K_S P = L L^T stopped at rank r
 * (LAPACK dpstrf; Harbrecht, Peters, Schneider 2012, "On the low-rank approximation by
 * the pivoted Cholesky decomposition", sec. 2): z(x) = L11^{-1} k_R(x) over the r pivot
 * points R, i.e. W = P_r L11^{-T}, zero rows for the dropped points. ||z(x)||^2 =
 * k_R(x)^T K_R^{-1} k_R(x) is the Nystrom approximation over R, which agrees with seed
 * 004 sec. 2's K_S^{+/2} up to the dropped Schur complement (every dictionary point's
 * residual below PIVOT_RTOL of the largest k(s, s)); at full rank z is K_S^{-1/2} k_S up
 * to a rotation, which no posterior quantity sees. m^3 / 3 flops against the ~9 m^3 of
 * an eigendecomposition, one path for well- and ill-conditioned K_S. K (m x m,
 * symmetric, both triangles set) is destroyed. */
static int pivoted_embedding(bbkb *st, double *K, double kmax, size_t d)
{
    lapack_int m = (lapack_int)st->m, rank = 0, *piv = malloc(st->m * sizeof *piv);
    if (!piv)
        return KB_ENOMEM;
    /* info > 0 only says rank < m; K symmetric, so either storage order reads the same.
     * dpstrf allocates its workspace: without memory it says so (kb__lapack_status). */
    int info = LAPACKE_dpstrf(LAPACK_COL_MAJOR, 'L', m, K, m, piv, &rank, PIVOT_RTOL * kmax);
    int rc = info < 0 ? kb__lapack_status(info) : KB_OK;
    if (!rc)
        keep_factor(st, K, (size_t)rank);
    if (!rc && rank)
        rc = kb__lapack_status(kb__tri_inverse(K, (size_t)rank, st->m, 0));
    size_t r = rc ? 0 : (size_t)rank;
    st->r = r;
    memset(st->W, 0, st->m * r * sizeof *st->W);
    memset(st->Wp, 0, r * r * sizeof *st->Wp);
    for (size_t s = 0; s < st->m; s++)
        st->ppos[s] = NONE;
    /* W[piv_i, j] = Wp[i, j] = (L11^{-1})(j, i), column-major at K[i m + j], j >= i */
    for (size_t i = 0; i < r; i++) {
        size_t s = st->pslot[i] = (size_t)(piv[i] - 1);
        st->ppos[s] = i;
        for (size_t j = i; j < r; j++)
            st->W[s * r + j] = st->Wp[i * r + j] = K[i * st->m + j];
        memcpy(st->Sp + i * d, st->S + s * d, d * sizeof *st->Sp);
    }
    free(piv);
    return rc;
}

/* W (m x r), z(x) = W^T k_S(x): pivoted_embedding. */
int kb__bbkb_build_embedding(kb_engine *e)
{
    bbkb *st = e->impl;
    size_t m = st->m, d = e->space->dim;
    free(st->W);
    free(st->Wp);
    free(st->Lp);
    free(st->Sp);
    free(st->pslot);
    free(st->ppos);
    st->W = st->Wp = st->Lp = st->Sp = NULL;
    st->pslot = st->ppos = NULL;
    st->r = 0;
    if (m == 0)
        return KB_OK;
    double *K = malloc(m * m * sizeof *K);
    st->W = malloc(m * m * sizeof *st->W);
    st->Wp = malloc(m * m * sizeof *st->Wp);
    st->Lp = malloc(m * m * sizeof *st->Lp);
    st->Sp = malloc(m * d * sizeof *st->Sp);
    st->pslot = malloc(m * sizeof *st->pslot);
    st->ppos = malloc(m * sizeof *st->ppos);
    int rc = K && st->W && st->Wp && st->Lp && st->Sp && st->pslot && st->ppos ? KB_OK
                                                                               : KB_ENOMEM;
    if (!rc) {
        /* Pairwise, not kb_kernel_matrix: its |a|^2 + |b|^2 - 2ab distances leave ~1e-16
         * on the diagonal, which Matern 1/2's sqrt turns into 1e-8 errors in K_S. */
        for (size_t i = 0; i < m; i++)
            for (size_t j = 0; j <= i; j++)
                K[i * m + j] = K[j * m + i] =
                    kb_kernel_eval(&e->kernel, st->S + i * d, st->S + j * d);
        double kmax = 0.0;
        for (size_t i = 0; i < m; i++)
            kmax = K[i * m + i] > kmax ? K[i * m + i] : kmax;
        st->kdict_max = kmax > st->kdict_max ? kmax : st->kdict_max;
        rc = pivoted_embedding(st, K, kmax, d);
    }
    if (!rc && kb__grow((void **)&st->Z, &st->cap_z, st->A * st->r, sizeof *st->Z))
        rc = KB_ENOMEM;
    st->zgen++;
    free(K);
    return rc;
}
