/*
 * posterior.c - the DTC posterior of BBKB / BKB, seed 004 eqs. (1)-(3), over the
 * embedding z of embedding.c: mu~(x) = z^T V_f^{-1} Z_f^T y over the told points, and
 * sigma~^2_t(x) = (k(x,x) - ||z||^2) / lambda + z^T V_t^{-1} z with
 * V_t = Z_t^T Z_t + lambda I over every point selected so far, pending points being
 * hallucinated (they enter V_t, not the mean: a hallucinated y equal to the current mean
 * leaves the ridge solution unchanged, so "told only" IS the hallucinated mean).
 * kb__bbkb_rebuild_model builds V, L, Lstart and w from the data at each
 * resparsification; kb__bbkb_candidate_posterior gives the mean and variance of all A
 * candidates from one dgemm over the cached kernel columns (Appendix C's A m^2 term).
 *
 * Invariants: V is row-major with its lower triangle set; L and Lstart are column-major
 * kb_chol factors (core/src/chol.c: kb__chol_update rotates contiguous columns); buf is
 * r doubles of scratch for kb__bbkb_quad_form.
 */
#include "bbkb_internal.h"

#include <cblas.h>
#include <lapacke.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ||L^{-1} z||^2 = z^T V^{-1} z. */
double kb__bbkb_quad_form(const bbkb *st, const kb_chol *L, const double *z)
{
    if (st->r == 0)
        return 0.0;
    memcpy(st->buf, z, st->r * sizeof *z);
    kb__chol_trsv(L, 0, st->buf);
    return cblas_ddot((int)st->r, st->buf, 1, st->buf, 1);
}

/* out[i] = resid[i] / lambda + ||Lstart^{-1} z_i||^2 for the n rows of Zr (BLAS-3, by
 * the inverse: the rows' variances of a long noisy study spent a quarter of its CPU in
 * dtrsm; docs/BENCHMARKS.md, twenty-eighth session). */
int kb__bbkb_row_variances(const bbkb *st, const double *Zr, const double *resid, size_t n,
                           double *out)
{
    size_t r = st->r;
    double *T = r ? malloc(n * r * sizeof *T) : NULL;
    if (r && n && !T)
        return KB_ENOMEM;
    if (r && n) {
        memcpy(T, Zr, n * r * sizeof *T);
        kb__chol_trmm_rows(&st->Lstart, st->Lsinv, T, n, r);
    }
    for (size_t i = 0; i < n; i++)
        out[i] = resid[i] / st->lambda + (r ? cblas_ddot((int)r, T + i * r, 1, T + i * r, 1) : 0);
    free(T);
    return KB_OK;
}

int kb__bbkb_point_variances(const kb_engine *e, const double *U, const double *Zr, size_t n,
                             double *out)
{
    const bbkb *st = e->impl;
    size_t r = st->r;
    double *kd = malloc((n ? n : 1) * sizeof *kd);
    if (!kd)
        return KB_ENOMEM;
    kb_kernel_diag(&e->kernel, U, n, kd);
    for (size_t k = 0; k < n && r; k++)
        kd[k] -= cblas_ddot((int)r, Zr + k * r, 1, Zr + k * r, 1);
    int rc = kb__bbkb_row_variances(st, Zr, kd, n, out);
    free(kd);
    return rc;
}

/* sigma~^2_start(x_i), exactly: var_start[i] carries low_rank_start's error, or is a
 * bound (start_bound.c), which the exact value then replaces. */
double kb__bbkb_start_variance(bbkb *st, size_t i)
{
    if (st->start_err == 0.0 && !st->vs_bound[i])
        return st->var_start[i];
    const double *z = kb__bbkb_zrow(st, i);
    double v = st->resid[i] / st->lambda + kb__bbkb_quad_form(st, &st->Lstart, z);
    if (st->vs_bound[i]) {
        st->var_start[i] = v;
        st->vs_bound[i] = 0;
        st->bound_resolved++;
    }
    return v;
}

/* F (r x rank, column-major) with F F^T = I / lambda - V^{-1}, V = L L^T: pivoted
 * Cholesky, since the matrix is only semidefinite (no data along a direction leaves a
 * zero eigenvalue). tol 0 stops at a non-positive pivot: what is dropped is round-off.
 * V^{-1} = L^{-T} L^{-1}: L's inverse (kb__tri_inverse, or the caller's Linv from
 * kb__chol_inverse, which is the same computation), then dlauum. */
static int variance_factor(const bbkb *st, const kb_chol *L, const double *Linv, double **F,
                           size_t *rank)
{
    size_t r = st->r;
    lapack_int rk = 0, *piv = malloc(r * sizeof *piv);
    double *M = malloc(r * r * sizeof *M);
    *F = calloc(r * r, sizeof **F);
    int rc = piv && M && *F ? KB_OK : KB_ENOMEM;
    if (!rc)
        rc = kb__lapack_status(LAPACKE_dlacpy(LAPACK_COL_MAJOR, 'L', (lapack_int)r,
                                              (lapack_int)r, Linv ? Linv : L->L,
                                              (lapack_int)(Linv ? r : L->cap), M,
                                              (lapack_int)r));
    if (!rc && !Linv)
        rc = kb__lapack_status(kb__tri_inverse(M, r, r, 0));
    if (!rc)
        rc = kb__lapack_status(
            LAPACKE_dlauum(LAPACK_COL_MAJOR, 'L', (lapack_int)r, M, (lapack_int)r));
    /* V^{-1}(i, j), i >= j, is at M[j r + i] (column-major); the row-major lower triangle
     * written here occupies the other half */
    for (size_t i = 0; !rc && i < r; i++)
        for (size_t j = 0; j <= i; j++)
            M[i * r + j] = (i == j ? 1.0 / st->lambda : 0.0) - M[j * r + i];
    if (!rc) { /* dpstrf allocates its workspace (and row-major a transposed copy) */
        lapack_int info = LAPACKE_dpstrf(LAPACK_ROW_MAJOR, 'L', (lapack_int)r, M,
                                         (lapack_int)r, piv, &rk, 0.0);
        rc = info < 0 ? kb__lapack_status(info) : KB_OK;
    }
    for (size_t i = 0; !rc && i < r; i++)
        for (size_t j = 0; j <= i && j < (size_t)rk; j++)
            (*F)[j * r + (size_t)(piv[i] - 1)] = M[i * r + j];
    *rank = rc ? 0 : (size_t)rk;
    free(piv);
    free(M);
    return rc;
}

/* For every candidate i, var[i] -= sum_j sign_j (k(x_i)^T H_j)^2 over the first k
 * columns of H (column-major, leading dimension ld; sign NULL: all +1), and, when mu is
 * not NULL, mu[i] = k(x_i)^T H_k, with k(x_i) = the cached kernel columns: the m
 * dictionary slots of Kc, then the n_gone departed ones of Kgone when ld > m. dgemm over
 * blocks of ROW_BLOCK candidates, so that the product is summed while still in cache. */
#define ROW_BLOCK 1024
int kb__bbkb_subtract_forms(bbkb *st, const double *H, size_t ld, size_t k,
                            const double *sign, double *var, double *mu)
{
    size_t A = st->A, m = st->m, nc = k + (mu != NULL);
    if (nc == 0)
        return KB_OK;
    if (kb__grow((void **)&st->gbuf, &st->cap_gbuf, ROW_BLOCK * nc, sizeof *st->gbuf))
        return KB_ENOMEM;
    for (size_t i0 = 0; i0 < A; i0 += ROW_BLOCK) {
        size_t n = A - i0 < ROW_BLOCK ? A - i0 : ROW_BLOCK;
        double *G = st->gbuf;
        cblas_dgemm(CblasColMajor, CblasNoTrans, CblasNoTrans, (int)n, (int)nc, (int)m, 1.0,
                    st->Kc + i0, (int)A, H, (int)ld, 0.0, G, (int)n);
        if (ld > m)
            cblas_dgemm(CblasColMajor, CblasNoTrans, CblasNoTrans, (int)n, (int)nc,
                        (int)(ld - m), 1.0, st->Kgone + i0, (int)A, H + m, (int)ld, 1.0, G,
                        (int)n);
        for (size_t j = 0; j < k; j++) {
            const double *g = G + j * n;
            double s = sign ? sign[j] : 1.0;
            for (size_t i = 0; i < n; i++)
                var[i0 + i] -= s * g[i] * g[i];
        }
        if (mu)
            memcpy(mu + i0, G + k * n, n * sizeof *mu);
    }
    st->flop_l3 += 2.0 * (double)A * (double)ld * (double)nc;
    return KB_OK;
}

/* var[i] = sigma~^2(x_i) with V = L L^T for every candidate, and mu[i] = z(x_i)^T w when
 * mu is not NULL: eq. (3), (k - ||z||^2) / lambda + z^T V^{-1} z, is
 * k / lambda - z^T (I / lambda - V^{-1}) z = k / lambda - ||k_S(x)^T W F||^2, and
 * mu = k_S(x)^T (W w) rides along as one more column (kb__bbkb_subtract_forms). */
int kb__bbkb_candidate_posterior(bbkb *st, const kb_chol *L, const double *Linv, double *var,
                                 double *mu)
{
    size_t A = st->A, r = st->r, m = st->m, k = 0;
    for (size_t i = 0; i < A; i++)
        var[i] = st->kdiag[i] / st->lambda;
    if (r == 0) {
        if (mu)
            memset(mu, 0, A * sizeof *mu);
        return KB_OK;
    }
    double *F = NULL;
    int rc = variance_factor(st, L, Linv, &F, &k);
    double *H = rc ? NULL : malloc(m * (k + 1) * sizeof *H);
    rc = rc ? rc : H ? KB_OK : KB_ENOMEM;
    if (!rc) {
        if (k)
            cblas_dgemm(CblasColMajor, CblasTrans, CblasNoTrans, (int)m, (int)k, (int)r, 1.0,
                        st->W, (int)r, F, (int)r, 0.0, H, (int)m);
        cblas_dgemv(CblasRowMajor, CblasNoTrans, (int)m, (int)r, 1.0, st->W, (int)r, st->w, 1,
                    0.0, H + k * m, 1);
        rc = kb__bbkb_subtract_forms(st, H, m, k, NULL, var, mu);
    }
    free(F);
    free(H);
    return rc;
}

/* z of an off-pool data row that is a pivot of the embedding: its row of L11 (Lp), or
 * NULL. */
static const double *pivot_z(const bbkb *st, const datum *dt)
{
    size_t p = dt->cand == NONE && dt->slot != NONE && st->r ? st->ppos[dt->slot] : NONE;
    return p != NONE ? st->Lp + p * st->r : NULL;
}

/* R (n x r) = z of the n data rows: the candidates' through kb__bbkb_zrows (which also
 * sets their resid, even when r == 0), the pivots' from Lp, the others embedded. On a
 * noise-free box nearly every row is a pivot: embedding them took n r^2 flops (dtrmm),
 * 45% of a one-study daemon's CPU at 1,000 rows (docs/BENCHMARKS.md, thirty-first
 * session). */
static int embed_data(kb_engine *e, const datum *rows, size_t n, double *R)
{
    bbkb *st = e->impl;
    size_t r = st->r, d = e->space->dim, ng = 0;
    double *U = malloc((n ? n : 1) * d * sizeof *U);
    size_t *cand = malloc((n ? n : 1) * sizeof *cand);
    int rc = U && cand ? KB_OK : KB_ENOMEM;
    for (size_t j = 0; !rc && j < n; j++)
        if (rows[j].cand == NONE && !pivot_z(st, &rows[j]))
            memcpy(U + d * ng++, rows[j].u, d * sizeof *U);
    if (!rc) {
        for (size_t j = 0; j < n; j++)
            cand[j] = rows[j].cand;
        rc = kb__bbkb_zrows(st, cand, n);
    }
    if (!rc && r) {
        double *Zg = malloc((ng ? ng : 1) * r * sizeof *Zg);
        rc = Zg ? kb__bbkb_embed_rows(e, U, ng, Zg) : KB_ENOMEM;
        for (size_t j = 0, g = 0; !rc && j < n; j++) {
            const double *z = rows[j].cand != NONE ? kb__bbkb_zrow(st, rows[j].cand)
                                                   : pivot_z(st, &rows[j]);
            if (!z)
                z = Zg + r * g++;
            memcpy(R + j * r, z, r * sizeof *R);
        }
        free(Zg);
    }
    free(U);
    free(cand);
    return rc;
}

/* What rebuild_model makes: V, Vt (V_told), r x r each; L and Ls (Lstart), column-major
 * factors, and Lsinv = Ls^{-1}; w and buf, r. */
typedef struct model {
    double *V, *Vt, *w, *buf, *Lsinv;
    kb_chol L, Ls;
} model;

/* M += R^T diag(c) R (lower triangle) over the n rows that are not pivots (gram_pivots
 * adds those), c_j = n_told (told) or n_all of row j; Ra: n x r scratch. */
static void gram_add(const bbkb *st, const datum *rows, size_t n, const double *R, double *Ra,
                     int told, double *M)
{
    size_t r = st->r, k = 0;
    for (size_t j = 0; j < n; j++) {
        if (pivot_z(st, &rows[j]))
            continue;
        double c = sqrt(told ? rows[j].n_told : rows[j].n_all);
        for (size_t i = 0; i < r; i++)
            Ra[k * r + i] = c * R[j * r + i];
        k++;
    }
    if (k)
        cblas_dsyrk(CblasRowMajor, CblasLower, CblasTrans, (int)r, (int)k, 1.0, Ra, (int)r,
                    1.0, M, (int)r);
}

/* M += the pivot rows' part of R^T diag(c) R: their z are the rows of the triangle Lp, so
 * the sum is L11^T C L11 with C diagonal (zero at pivots no row of ds stands for), which
 * dlauum forms in r^3 / 3 flops where dsyrk over the r rows took r^3 (on a noise-free
 * box nearly every row is a pivot). Lp read column-major is L11^T, whose column p (Lp's
 * row p) is scaled by sqrt(c_p); dlauum's upper triangle of U U^T, column-major, lies
 * where M's row-major lower triangle does. */
static int gram_pivots(const bbkb *st, const dataset *ds, int told, double *M)
{
    size_t r = st->r;
    double *P = calloc(r * r, sizeof *P);
    if (!P)
        return KB_ENOMEM;
    for (size_t j = 0; j < ds->n; j++) {
        const double *z = pivot_z(st, &ds->rows[j]);
        if (!z)
            continue;
        double c = sqrt(told ? ds->rows[j].n_told : ds->rows[j].n_all);
        size_t p = (size_t)(z - st->Lp) / r;
        for (size_t i = 0; i <= p; i++)
            P[p * r + i] = c * z[i];
    }
    int rc = kb__lapack_status(
        LAPACKE_dlauum(LAPACK_COL_MAJOR, 'U', (lapack_int)r, P, (lapack_int)r));
    for (size_t a = 0; !rc && a < r; a++)
        for (size_t b = 0; b <= a; b++)
            M[a * r + b] += P[a * r + b];
    free(P);
    return rc;
}

/* Keeps z of data row j, a trial off the pool, for keep_row_variances. Rows beyond
 * KB__ZKEEP_MAX doubles are left to the closing, which embeds them again (its rounding
 * differs); without the memory, the same, and *nomem: a replay with memory would keep
 * them (internal.h, nomem). */
static void keep_z(bbkb *st, size_t j, const double *z, int *nomem)
{
    size_t n = st->n_zkeep, r = st->r;
    if ((n + 1) * r > KB__ZKEEP_MAX)
        return;
    if (kb__grow((void **)&st->zkeep, &st->cap_zkeep, (n + 1) * r, sizeof *st->zkeep) ||
        kb__grow((void **)&st->zkeep_row, &st->cap_zkeep_row, n + 1, sizeof *st->zkeep_row)) {
        *nomem = 1;
        return;
    }
    memcpy(st->zkeep + n * r, z, r * sizeof *z);
    st->zkeep_row[st->n_zkeep++] = j;
}

/* Embeds the data KB__ROWS_BLOCK rows at a time and, when r > 0, sums V = R^T diag(n_all)
 * R, V_told likewise with n_told (when some selection is still pending) and b = R^T ysum
 * into md->V, md->Vt and md->w (zeroed by the caller). */
static int embed_and_sum(kb_engine *e, const dataset *ds, int all_told, model *md)
{
    bbkb *st = e->impl;
    size_t r = st->r, rr = r ? r : 1;
    double *R = malloc(KB__ROWS_BLOCK * rr * sizeof *R);
    double *Ra = malloc(KB__ROWS_BLOCK * rr * sizeof *Ra);
    int rc = R && Ra ? KB_OK : KB_ENOMEM;
    for (size_t j0 = 0; !rc && j0 < ds->n; j0 += KB__ROWS_BLOCK) {
        const datum *rows = ds->rows + j0;
        size_t nb = ds->n - j0 < KB__ROWS_BLOCK ? ds->n - j0 : KB__ROWS_BLOCK;
        rc = embed_data(e, rows, nb, R);
        for (int told = 0; !rc && r && told < 2 - all_told; told++)
            gram_add(st, rows, nb, R, Ra, told, told ? md->Vt : md->V);
        for (size_t j = 0; !rc && r && j < nb; j++)
            cblas_daxpy((int)r, rows[j].ysum, R + j * r, 1, md->w, 1);
        for (size_t j = 0; !rc && r && j < nb; j++)
            if (rows[j].trial && rows[j].cand == NONE)
                keep_z(st, j0 + j, R + j * r, &e->nomem);
    }
    for (int told = 0; !rc && r && told < 2 - all_told; told++)
        rc = gram_pivots(st, ds, told, told ? md->Vt : md->V);
    free(R);
    free(Ra);
    return rc;
}

/* V += lambda I and V_told likewise (the same matrix when every selection has been
 * told), L = chol(V) and w = V_told^{-1} b. KB_ENUMERIC. */
static int solve_model(const bbkb *st, int all_told, model *md)
{
    size_t r = st->r;
    for (size_t k = 0; k < r; k++) {
        md->V[k * r + k] += st->lambda;
        md->Vt[k * r + k] += st->lambda;
    }
    int rc = kb__chol_factor(&md->L, md->V, r, r);
    if (rc || all_told) {
        if (!rc)
            kb__chol_solve(&md->L, md->w);
        return rc;
    }
    kb_chol Lt;
    kb__chol_init(&Lt, 0);
    rc = kb__chol_factor(&Lt, md->Vt, r, r);
    if (!rc)
        kb__chol_solve(&Lt, md->w);
    kb__chol_free(&Lt);
    return rc;
}

/* row_var from the rows embed_and_sum kept, with the new Lstart in place: the closing
 * variances of this epoch, computed now from the z at hand instead of embedding those
 * rows again at the closing (that second embedding, m kernel values and an m x r product
 * per row, was 40% of a long noisy study's resparsification time; kb-box-ask, twenty-sixth
 * session, docs/BENCHMARKS.md). A cache: without the memory for it the closing embeds
 * them, and nomem is set, as in keep_z. */
static void keep_row_variances(kb_engine *e, const dataset *ds)
{
    bbkb *st = e->impl;
    size_t d = e->space->dim, nt = e->n_trials, n = st->n_zkeep;
    double *U = malloc(KB__ROWS_BLOCK * d * sizeof *U), *v = malloc(KB__ROWS_BLOCK * sizeof *v);
    int rc = U && v ? KB_OK : KB_ENOMEM;
    if (!rc)
        rc = kb__grow((void **)&st->row_var, &st->cap_row_var, nt ? nt : 1,
                      sizeof *st->row_var);
    for (size_t h = 0; !rc && h < nt; h++)
        st->row_var[h] = NAN;
    for (size_t k0 = 0; !rc && k0 < n; k0 += KB__ROWS_BLOCK) {
        size_t nb = n - k0 < KB__ROWS_BLOCK ? n - k0 : KB__ROWS_BLOCK;
        for (size_t k = 0; k < nb; k++)
            memcpy(U + k * d, ds->rows[st->zkeep_row[k0 + k]].u, d * sizeof *U);
        rc = kb__bbkb_point_variances(e, U, st->zkeep + k0 * st->r, nb, v);
        for (size_t k = 0; !rc && k < nb; k++)
            st->row_var[ds->rows[st->zkeep_row[k0 + k]].trial - 1] = v[k];
    }
    st->n_row_var = rc == KB_OK ? nt : 0;
    st->row_var_ok = rc == KB_OK;
    if (rc)
        e->nomem = 1;
    free(U);
    free(v);
}

/* V, L, Lstart and the mean weights w from the data, embedded with the new dictionary. */
int kb__bbkb_rebuild_model(kb_engine *e, const dataset *ds)
{
    bbkb *st = e->impl;
    size_t r = st->r, rr = r ? r : 1;
    model md = {NULL, NULL, NULL, NULL, NULL, {0}, {0}};
    kb__chol_init(&md.L, 1);
    kb__chol_init(&md.Ls, 1);
    md.V = calloc(rr * rr, sizeof *md.V);
    md.Vt = calloc(rr * rr, sizeof *md.Vt);
    md.w = calloc(rr, sizeof *md.w);
    md.buf = malloc(rr * sizeof *md.buf);
    md.Lsinv = malloc(rr * rr * sizeof *md.Lsinv);
    int all_told = 1;
    for (size_t j = 0; j < ds->n; j++)
        all_told &= ds->rows[j].n_told == ds->rows[j].n_all;
    int rc = md.V && md.Vt && md.w && md.buf && md.Lsinv ? KB_OK : KB_ENOMEM;
    st->n_zkeep = 0;
    if (!rc)
        rc = embed_and_sum(e, ds, all_told, &md);
    if (!rc && r)
        rc = solve_model(st, all_told, &md);
    if (!rc)
        rc = kb__chol_copy(&md.Ls, &md.L);
    if (!rc)
        rc = kb__chol_inverse(&md.Ls, md.Lsinv);
    free(md.Vt);
    if (rc) {
        free(md.V);
        kb__chol_free(&md.L);
        kb__chol_free(&md.Ls);
        free(md.w);
        free(md.buf);
        free(md.Lsinv);
        return rc;
    }
    free(st->V);
    kb__chol_free(&st->L);
    kb__chol_free(&st->Lstart);
    free(st->w);
    free(st->buf);
    free(st->Lsinv);
    st->V = md.V;
    st->L = md.L;
    st->Lstart = md.Ls;
    st->w = md.w;
    st->buf = md.buf;
    st->Lsinv = md.Lsinv;
    keep_row_variances(e, ds);
    return KB_OK;
}
