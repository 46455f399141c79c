/*
 * embedding.c - the Nystrom embedding of BBKB / BKB (seed 004 section 2):
 * z(x) = K_S^{+/2} k_S(x) over the dictionary S, as z(x) = W^T k_S(x) with W (m x r)
 * from a Cholesky factorization of K_S when it is well conditioned (r = m), else from an
 * eigendecomposition that drops tiny eigenvalues (r <= m). z is formed lazily, only for
 * the candidates an epoch touches (kb__bbkb_zrow, kb__bbkb_zrows), from the cached
 * kernel columns Kc.
 *
 * Invariants: row i of Z and resid[i] = k(x_i, x_i) - ||z(x_i)||^2 hold for the current
 * W and candidate pool exactly when zstamp[i] == zgen; zgen changes whenever W
 * (kb__bbkb_build_embedding) or the pool (kb__bbkb_new_pool) does; kdict_max >= k(s, s)
 * over every dictionary point since the pool was drawn.
 */
#include "bbkb_internal.h"

#include <cblas.h>
#include <lapacke.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Eigenvalues of K_S below EIG_RTOL * max are dropped from K_S^{+/2}: below that, the
 * inverse square root amplifies the round-off of k_S(x) by more than 1e5, and the dropped
 * directions carry less than 1e-10 of k(x, x). The Cholesky form is used only when
 * dpocon's estimate of 1 / cond(K_S) is at least RCOND_MIN, 1e3 above that level: a margin
 * for the estimate (a lower bound on ||K_S^{-1}||_1, usually within a factor 3), so that
 * no eigenvalue would have been dropped. */
#define EIG_RTOL 1e-10
#define RCOND_MIN 1e-7

/* Zout (n x r) = embeddings of the rows of U (n x d) with the current dictionary. */
int kb__bbkb_embed_rows(const kb_engine *e, const double *U, size_t n, double *Zout)
{
    bbkb *st = e->impl;
    if (n == 0 || st->r == 0)
        return KB_OK;
    double *K = malloc(n * st->m * sizeof *K);
    if (!K)
        return KB_ENOMEM;
    kb_kernel_matrix(&e->kernel, U, n, st->S, st->m, K);
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)n, (int)st->r, (int)st->m,
                1.0, K, (int)st->m, st->W, (int)st->r, 0.0, Zout, (int)st->r);
    free(K);
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

/* kb__bbkb_zrow for every candidate of cand[0..n) (NONE entries skipped) at once: one gemm over
 * their gathered kernel rows instead of a gemv each, for kb__bbkb_rebuild_model, which embeds
 * every selected point at each resparsification. */
int kb__bbkb_zrows(bbkb *st, const size_t *cand, size_t n)
{
    size_t m = st->m, r = st->r, k = 0;
    size_t *todo = malloc((n + 1) * sizeof *todo);
    double *G = malloc((n * m + 1) * sizeof *G), *Zr = malloc((n * r + 1) * sizeof *Zr);
    int rc = todo && G && Zr ? KB_OK : KB_ENOMEM;
    for (size_t j = 0; !rc && j < n; j++)
        if (cand[j] != NONE && st->zstamp[cand[j]] != st->zgen) {
            st->zstamp[cand[j]] = st->zgen; /* also skips repeats */
            todo[k++] = cand[j];
        }
    for (size_t s = 0; s < m; s++)
        for (size_t j = 0; j < k; j++)
            G[j * m + s] = st->Kc[s * st->A + todo[j]];
    if (k && r)
        cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)k, (int)r, (int)m, 1.0, G,
                    (int)m, st->W, (int)r, 0.0, Zr, (int)r);
    for (size_t j = 0; j < k; j++) {
        const double *z = Zr + j * r;
        if (r) /* Z may be unallocated when r == 0 */
            memcpy(st->Z + todo[j] * r, z, r * sizeof *z);
        st->resid[todo[j]] = st->kdiag[todo[j]] - (r ? cblas_ddot((int)r, z, 1, z, 1) : 0.0);
    }
    free(todo);
    free(G);
    free(Zr);
    return rc;
}

/* W = L^{-T} (m x m, r = m) from K_S = L L^T when K_S is well conditioned: then K_S^+ is
 * K_S^{-1}, no eigenvalue would be dropped, and z = L^{-1} k_S is eigen_embedding's z up
 * to a rotation, which no posterior quantity sees. m^3 / 3 flops against the ~9 m^3 of an
 * eigendecomposition (2.4 ms per epoch at m = 221, a sixth of the 20,000-arm benchmark:
 * docs/BENCHMARKS.md). Returns 0, W unset, when dpocon's estimate of 1 / cond_1(K_S)
 * (cond_2 <= cond_1) is below RCOND_MIN. K (row-major, lower triangle) is destroyed. */
static int cholesky_embedding(bbkb *st, double *K)
{
    lapack_int m = (lapack_int)st->m;
    double anorm = LAPACKE_dlansy(LAPACK_ROW_MAJOR, '1', 'L', m, K, m), rcond = 0.0;
    if (LAPACKE_dpotrf(LAPACK_ROW_MAJOR, 'L', m, K, m) ||
        LAPACKE_dpocon(LAPACK_ROW_MAJOR, 'L', m, K, m, anorm, &rcond) || rcond < RCOND_MIN ||
        LAPACKE_dtrtri(LAPACK_ROW_MAJOR, 'L', 'N', m, K, m))
        return 0;
    st->r = st->m;
    for (size_t i = 0; i < st->m; i++)
        for (size_t j = 0; j < st->m; j++)
            st->W[i * st->m + j] = j >= i ? K[j * st->m + i] : 0.0;
    return 1;
}

/* W = Q_r diag(e_r^{-1/2}) from K_S = Q diag(e) Q^T, dropping the eigenvalues below
 * EIG_RTOL x the largest: the pseudo-inverse square root. K is destroyed. */
static int eigen_embedding(bbkb *st, double *K)
{
    size_t m = st->m;
    double *ev = malloc(m * sizeof *ev);
    if (!ev)
        return KB_ENOMEM;
    if (LAPACKE_dsyevd(LAPACK_ROW_MAJOR, 'V', 'L', (lapack_int)m, K, (lapack_int)m, ev)) {
        free(ev);
        return KB_ENUMERIC;
    }
    double cut = EIG_RTOL * ev[m - 1];
    size_t first = 0;
    while (first < m && !(ev[first] > cut))
        first++;
    st->r = m - first;
    for (size_t i = 0; i < m; i++)
        for (size_t j = 0; j < st->r; j++)
            st->W[i * st->r + j] = K[i * m + first + j] / sqrt(ev[first + j]);
    free(ev);
    return KB_OK;
}

/* W (m x r), z(x) = W^T k_S(x): cholesky_embedding, else eigen_embedding. */
int kb__bbkb_build_embedding(kb_engine *e)
{
    bbkb *st = e->impl;
    size_t m = st->m, d = e->space->dim;
    free(st->W);
    st->W = NULL;
    st->r = 0;
    if (m == 0)
        return KB_OK;
    double *K = malloc(m * m * sizeof *K), *Kf = malloc(m * m * sizeof *Kf);
    st->W = malloc(m * m * sizeof *st->W);
    int rc = K && Kf && st->W ? KB_OK : KB_ENOMEM;
    if (!rc) {
        /* Pairwise, not kb_kernel_matrix: its |a|^2 + |b|^2 - 2ab distances leave ~1e-16
         * on the diagonal, which Matern 1/2's sqrt turns into 1e-8 errors in K_S. */
        for (size_t i = 0; i < m; i++)
            for (size_t j = 0; j <= i; j++)
                K[i * m + j] = K[j * m + i] =
                    kb_kernel_eval(&e->kernel, st->S + i * d, st->S + j * d);
        for (size_t i = 0; i < m; i++)
            st->kdict_max = K[i * m + i] > st->kdict_max ? K[i * m + i] : st->kdict_max;
        memcpy(Kf, K, m * m * sizeof *K); /* the copy a failed Cholesky destroys */
        if (!cholesky_embedding(st, Kf))
            rc = eigen_embedding(st, K);
    }
    if (!rc && kb__grow((void **)&st->Z, &st->cap_z, st->A * st->r, sizeof *st->Z))
        rc = KB_ENOMEM;
    st->zgen++;
    free(K);
    free(Kf);
    return rc;
}
