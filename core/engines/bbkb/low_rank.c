/*
 * low_rank.c - the epoch start of BBKB / BKB: the posterior mean and variance of every
 * candidate under the new dictionary and V. Either the full product over the cached
 * kernel columns (kb__bbkb_candidate_posterior: 2 A m r flops, Appendix C's A m^2 term
 * per resparsification), or, when few points entered or left the dictionary, a low-rank
 * update of the previous epoch's variances (low_rank_start: 2 A (m + gone) (rank + 1)
 * flops; a bordered inverse per point entering or leaving, seed 000 section 3's
 * incremental update).
 *
 * Invariants: when mstart_valid, Mstart (m_start x m_start, row-major lower triangle) is
 * start_matrix at the previous epoch start over that epoch's dictionary slots, and
 * mstart_scale its rounding scale; start_err bounds |var_start[i] - sigma~^2_start(x_i)|
 * (0 after a full product) and stays below START_ERR_LIMIT of the prior variance.
 */
#include "bbkb_internal.h"

#include <cblas.h>
#include <float.h>
#include <lapacke.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* low_rank_start's accumulated error estimate, relative to the prior variance, past which
 * the epoch start recomputes every variance: the bound is added to the heap keys, and a
 * larger one would only cost more lazy re-evaluations near the top. 1e-7 forced a full
 * recomputation every ~20 epochs on the 20,000-arm benchmark (10% of its time) while the
 * measured errors stayed near 1e-13. */
#define START_ERR_LIMIT 1e-6

/* M (m x m, row-major, lower triangle) = W (I / lambda - V^{-1}) W^T with V = L L^T, so
 * that sigma~^2(x) = k(x,x) / lambda - k_S(x)^T M k_S(x) (kb__bbkb_candidate_posterior's form).
 * *scale = max_i ||W_i||^2 / lambda + ||(W L^{-T})_i||^2 bounds the magnitude of the
 * products each entry sums, which sets its rounding error (low_rank_start). At an epoch
 * start L is still Lstart, whose inverse the model rebuild made. */
static int start_matrix(const bbkb *st, double *M, double *scale)
{
    size_t m = st->m, r = st->r;
    double *G = malloc(m * r * sizeof *G);
    if (!G)
        return KB_ENOMEM;
    memcpy(G, st->W, m * r * sizeof *G);
    kb__chol_trmm_rows(&st->Lstart, st->Lsinv, G, m, r);
    cblas_dsyrk(CblasRowMajor, CblasLower, CblasNoTrans, (int)m, (int)r, 1.0 / st->lambda,
                st->W, (int)r, 0.0, M, (int)m);
    cblas_dsyrk(CblasRowMajor, CblasLower, CblasNoTrans, (int)m, (int)r, -1.0, G, (int)r, 1.0,
                M, (int)m);
    *scale = 0.0;
    for (size_t i = 0; i < m; i++) {
        double a = cblas_ddot((int)r, st->W + i * r, 1, st->W + i * r, 1) / st->lambda +
                   cblas_ddot((int)r, G + i * r, 1, G + i * r, 1);
        *scale = a > *scale ? a : *scale;
    }
    free(G);
    return KB_OK;
}

/* H (u x k, column-major) and sign with D = H diag(sign) H^T + a remainder R, from the
 * eigenpairs of D (u x u, row-major lower triangle; destroyed) with |eigenvalue| > tol.
 * *rest bounds ||R||_2: the dropped eigenvalues, and the decomposition's rounding
 * (u eps max |eigenvalue|). Returns 1, 0 when LAPACK does not converge, -1 out of
 * memory (which must fail the epoch start, not choose the full product: its rounding
 * differs, and a replay under memory pressure would go on differently). */
static int eig_factor(double *D, size_t u, double tol, double *H, double *sign, size_t *k,
                      double *rest)
{
    double *ev = malloc(u * sizeof *ev), big = 0.0;
    int rc = ev ? kb__lapack_status(LAPACKE_dsyevd(LAPACK_ROW_MAJOR, 'V', 'L', (lapack_int)u,
                                                   D, (lapack_int)u, ev))
                : KB_ENOMEM;
    int ok = rc == KB_OK;
    *k = 0;
    for (size_t j = 0; ok && j < u; j++) {
        big = fabs(ev[j]) > big ? fabs(ev[j]) : big;
        if (fabs(ev[j]) <= tol)
            continue;
        for (size_t i = 0; i < u; i++)
            H[*k * u + i] = D[i * u + j] * sqrt(fabs(ev[j]));
        sign[(*k)++] = ev[j] > 0.0 ? 1.0 : -1.0;
    }
    *rest = 2.0 * tol + (double)u * DBL_EPSILON * big;
    free(ev);
    return rc == KB_ENOMEM ? -1 : ok;
}

/* eig_factor's result from the range of D Omega, Omega u x p fixed Gaussian (D has low
 * rank: see low_rank_start): Rayleigh-Ritz on an orthonormal basis Q of that range,
 * T = Q^T D Q = U diag(e) U^T, H = Q U |e|^{1/2} over |e| > tol. Not trusted but
 * checked: *rest = ||D - H diag(sign) H^T||_F, computed, and 0 is returned when it is
 * above 2 tol (a rank above p, or a range that Omega missed), for eig_factor to decide;
 * -1 out of memory (as eig_factor). ~6 u^2 p flops against eig_factor's ~9 u^3. D is
 * not modified. */
static int ritz_factor(const double *D, size_t u, size_t p, double tol, double *H,
                       double *sign, size_t *k, double *rest)
{
    double *Q = malloc(u * p * sizeof *Q), *F = malloc(u * p * sizeof *F);
    double *T = malloc(p * p * sizeof *T), *ev = malloc(p * sizeof *ev);
    double *R = malloc(u * u * sizeof *R), *tau = malloc(p * sizeof *tau);
    int ok = Q && F && T && ev && R && tau, nomem = !ok, rc;
    kb_rng g;
    kb_rng_seed(&g, 0x6b62616e6469ULL); /* fixed: the result is checked, not assumed */
    for (size_t i = 0; ok && i < u * p; i++)
        F[i] = kb_rng_normal(&g);
    /* D's row-major lower triangle is a column-major upper one */
    if (ok) {
        cblas_dsymm(CblasColMajor, CblasLeft, CblasUpper, (int)u, (int)p, 1.0, D, (int)u, F,
                    (int)u, 0.0, Q, (int)u);
        rc = kb__lapack_status(LAPACKE_dgeqrf(LAPACK_COL_MAJOR, (lapack_int)u, (lapack_int)p,
                                              Q, (lapack_int)u, tau));
        if (!rc)
            rc = kb__lapack_status(LAPACKE_dorgqr(LAPACK_COL_MAJOR, (lapack_int)u,
                                                  (lapack_int)p, (lapack_int)p, Q,
                                                  (lapack_int)u, tau));
        ok = rc == KB_OK;
        nomem = rc == KB_ENOMEM;
    }
    if (ok) {
        cblas_dsymm(CblasColMajor, CblasLeft, CblasUpper, (int)u, (int)p, 1.0, D, (int)u, Q,
                    (int)u, 0.0, F, (int)u);
        cblas_dgemm(CblasColMajor, CblasTrans, CblasNoTrans, (int)p, (int)p, (int)u, 1.0, Q,
                    (int)u, F, (int)u, 0.0, T, (int)p);
        rc = kb__lapack_status(LAPACKE_dsyev(LAPACK_COL_MAJOR, 'V', 'L', (lapack_int)p, T,
                                             (lapack_int)p, ev));
        ok = rc == KB_OK;
        nomem = rc == KB_ENOMEM;
    }
    *k = 0;
    for (size_t j = 0; ok && j < p; j++) {
        if (fabs(ev[j]) <= tol)
            continue;
        cblas_dgemv(CblasColMajor, CblasNoTrans, (int)u, (int)p, sqrt(fabs(ev[j])), Q, (int)u,
                    T + j * p, 1, 0.0, H + *k * u, 1);
        sign[(*k)++] = ev[j] > 0.0 ? 1.0 : -1.0;
    }
    if (ok) {
        memcpy(R, D, u * u * sizeof *R);
        for (size_t j = 0; j < *k; j++)
            cblas_dsyr(CblasColMajor, CblasUpper, (int)u, -sign[j], H + j * u, 1, R, (int)u);
        *rest = LAPACKE_dlansy(LAPACK_COL_MAJOR, 'F', 'U', (lapack_int)u, R, (lapack_int)u);
        ok = *rest <= 2.0 * tol;
    }
    free(Q);
    free(F);
    free(T);
    free(ev);
    free(R);
    free(tau);
    return nomem ? -1 : ok;
}

/* The epoch-start variances by a low-rank update of the previous epoch's. With M as in
 * start_matrix, sigma~^2_new(x) = sigma~^2_old(x) - k(x)^T (M_new - M_old) k(x) over the
 * union of both dictionaries (old slots mapped by old_to_new, departed columns in
 * Kgone). The difference D has rank at most (points handed out, abandoned or observed in
 * the epoch) + 2 per point entering or leaving the dictionary -- a bordered inverse each,
 * seed 000 section 3's incremental update -- so a factorization of it (ritz_factor,
 * sized by the last epoch's rank; else eig_factor) gives the change of all A variances
 * in 2 A (m + gone) (rank + 1) flops instead of 2 A m r (Appendix C's A m^2 per
 * resparsification). Eigenvalues at the rounding level of M's entries are dropped;
 * start_err accumulates a bound on what that and the rounding cost, and past
 * START_ERR_LIMIT of the prior variance, or when the rank is not small, the full product
 * runs instead. Selections stay exact: the heap keys add start_err and are re-evaluated
 * before use, and kb__bbkb_start_variance recomputes what the batch rule and the dictionary
 * sampling read. Sets *done. */
static int low_rank_start(bbkb *st, const double *M, double scale, int *done)
{
    size_t m = st->m, mo = st->m_start, r = st->r, u = m + st->n_gone, k = 0;
    *done = 0;
    if (!st->mstart_valid || !st->lr_ok || r == 0 || mo == 0)
        return KB_OK;
    double *D = calloc(u * u, sizeof *D), *H = malloc(u * (u + 1) * sizeof *H);
    double *sign = malloc(u * sizeof *sign), rest = 0.0;
    int rc = D && H && sign ? KB_OK : KB_ENOMEM;
    for (size_t i = 0; !rc && i < m; i++)
        memcpy(D + i * u, M + i * m, (i + 1) * sizeof *D);
    for (size_t a = 0; !rc && a < mo; a++)
        for (size_t b = 0; b <= a; b++) {
            size_t i = st->old_to_new[a], j = st->old_to_new[b];
            D[(i > j ? i : j) * u + (i > j ? j : i)] -= st->Mstart[a * mo + b];
        }
    /* The rounding level of D's eigenvalues: on the 20,000-arm benchmark the largest
     * eigenvalue due to rounding stayed ten times below tol and the smallest real one
     * 1e6 times above it. */
    double tol = (double)u * DBL_EPSILON * (scale + st->mstart_scale);
    size_t p = 2 * st->lr_rank + 8;
    /* no convergence: the full product decides instead */
    int ok = !rc && 4 * p < u ? ritz_factor(D, u, p, tol, H, sign, &k, &rest) : 0;
    if (!rc && ok == 0)
        ok = eig_factor(D, u, tol, H, sign, &k, &rest);
    if (ok < 0)
        rc = KB_ENOMEM;
    /* ||k(x)||^2 over the u columns, by |k(x, s)|^2 <= k(x, x) k(s, s) */
    double knorm = (double)u * st->kdiag_max * fmax(st->kdiag_max, st->kdict_max);
    double err = st->start_err + knorm * rest;
    if (ok > 0 && (k + 1) * u <= (r + 1) * m &&
        err <= START_ERR_LIMIT * st->kdiag_max / st->lambda) {
        memset(H + k * u, 0, u * sizeof *H);
        cblas_dgemv(CblasRowMajor, CblasNoTrans, (int)m, (int)r, 1.0, st->W, (int)r, st->w, 1,
                    0.0, H + k * u, 1);
        rc = kb__bbkb_subtract_forms(st, H, u, k, sign, st->var_start, st->mu);
        if (!rc) {
            st->start_err = err;
            st->lr_rank = k;
            st->epochs_low_rank++;
            *done = 1;
        }
    }
    free(D);
    free(H);
    free(sign);
    return rc;
}

/* var_start and mu for the new epoch: bounds on a box (start_bound.c), else low_rank_start,
 * else kb__bbkb_candidate_posterior; and Mstart for the next one on a finite set (a box
 * redraws its pool at every epoch start, which leaves Mstart unused: its m^2 r flops were
 * a tenth of a noise-free box study's CPU, docs/BENCHMARKS.md, twenty-ninth session).
 * Runs right after kb__bbkb_rebuild_model, while L is still Lstart (Lsinv its inverse). */
int kb__bbkb_epoch_start_posterior(const kb_engine *e)
{
    bbkb *st = e->impl;
    size_t m = st->m;
    double *M = NULL, scale = 0.0;
    int rc = KB_OK, done = 0;
    /* out of memory fails the epoch start: the full product's rounding differs */
    int brc = kb__bbkb_bounds_apply(e, st) ? kb__bbkb_bound_start(e) : KB_ENUMERIC;
    if (brc == KB_ENOMEM)
        return brc;
    st->bounded = brc == KB_OK;
    if (st->bounded) {
        st->mstart_valid = 0;
        st->start_err = 0.0;
        st->epochs_bounded++;
        return KB_OK;
    }
    memset(st->vs_bound, 0, st->A);
    if (!st->full_start && st->r && e->space->finite) {
        M = malloc(m * m * sizeof *M);
        rc = M ? start_matrix(st, M, &scale) : KB_ENOMEM;
        if (!rc)
            rc = low_rank_start(st, M, scale, &done);
    }
    st->mstart_valid = 0;
    if (!rc && !done) {
        rc = kb__bbkb_candidate_posterior(st, &st->Lstart, st->Lsinv, st->var_start, st->mu);
        st->start_err = 0.0;
    }
    for (size_t i = 0; !rc && e->prior_basis && i < st->A; i++)
        st->mu[i] += kb__prior_at(e, i); /* the prior mean (kb__prior_mean) */
    if (!rc && M) {
        free(st->Mstart);
        st->Mstart = M;
        st->m_start = m;
        st->mstart_scale = scale;
        st->mstart_valid = 1;
        M = NULL;
    }
    free(M);
    return rc;
}
