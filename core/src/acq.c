/*
 * acq.c - continuous refinement of the acquisition on boxes (issue 13): a point of a box's
 * candidate pool is moved uphill on the upper confidence bound
 *   u(x) = mu(x) + width sd(x)
 * of the exact GP posterior (kernel k, noise variance lambda, outputs standardized) by
 * NLopt's bounded L-BFGS inside the unit cube, as practical optimizers do after screening
 * many raw points (BoTorch's optimize_acqf: raw samples, then gradient refinement).
 *
 * Gradient, with k_x = k(x, X), a = K_y^-1 y, q = K_y^-1 k_x, s = sd(x):
 *   d mu / dx_j = sum_i a_i D_ij,   d s^2 / dx_j = -2 sum_i q_i D_ij  (k(x, x) constant),
 *   D_ij = d k(x, X_i) / dx_j = variance base'(r2) 2 (x_j - X_ij) / l_j^2,
 * so grad u = sum_i D_ij (a_i - width q_i / s): one pass over the rows per evaluation,
 * O(n^2) for the two triangular solves. base' comes from kb__kernel_profile.
 *
 * kb__gp_mean gives the same GP's mean alone (the model's recommendation, engine.c), on
 * the rows with repeated inputs merged (kb__row_set_init: one row per distinct input at
 * its mean, noise lambda / count, the exact posterior of every row), and
 * kb__interior_coef the same GP's estimate of the interior prior mean's coefficient
 * (engine.c, kb__hyper_refit).
 *
 * The GP is built once per call on at most 256 rows (kb__pick_rows, RNG seeded from n so
 * that the engine's streams do not move), in O(256^3 / 3); each run is capped at 40
 * evaluations. Stationary kernels only (the linear kernel has no use for it). A categorical
 * coordinate keeps its choice (its gradient is left at 0).
 */
#include "internal.h"

#include <cblas.h>
#include <lapacke.h>
#include <math.h>
#include <nlopt.h>
#include <stdlib.h>
#include <string.h>

enum { ACQ_MAX_ROWS = 256, ACQ_MAX_EVALS = 40 };

typedef struct acq_gp {
    const kb_kernel *k;
    double width;
    size_t n, d;
    double *X, *L, *a, *kx, *q; /* n x d, n x n (lower), n, n, n */
    double *sl;                 /* n: variance base'(r2) of the current x, D_ij's factor */
} acq_gp;

static void acq_free(acq_gp *g)
{
    free(g->X);
    free(g->L);
    free(g->a);
    free(g->kx);
    free(g->q);
    free(g->sl);
}

/* Factors K + noise C^-1 over the chosen rows (rows NULL: the first n; C^-1 = diag(inv_c),
 * each row's 1 / count when repeats were merged; I when inv_c is NULL) and solves
 * a = K_y^-1 y. */
static int acq_build(acq_gp *g, const kb_kernel *k, double noise, const double *U,
                     const double *y, const double *inv_c, const size_t *rows, size_t n,
                     double width)
{
    size_t d = k->dim;
    *g = (acq_gp){.k = k, .width = width, .n = n, .d = d};
    g->X = malloc((n ? n : 1) * d * sizeof *g->X);
    g->L = malloc((n ? n * n : 1) * sizeof *g->L);
    g->a = malloc((n ? n : 1) * sizeof *g->a);
    g->kx = malloc((n ? n : 1) * sizeof *g->kx);
    g->q = malloc((n ? n : 1) * sizeof *g->q);
    g->sl = malloc((n ? n : 1) * sizeof *g->sl);
    if (!g->X || !g->L || !g->a || !g->kx || !g->q || !g->sl)
        return KB_ENOMEM;
    for (size_t i = 0; i < n; i++) {
        size_t r = rows ? rows[i] : i;
        memcpy(g->X + i * d, U + r * d, d * sizeof *g->X);
        g->a[i] = y[r];
    }
    if (n == 0)
        return KB_OK;
    kb_kernel_matrix(k, g->X, n, g->X, n, g->L);
    for (size_t i = 0; i < n; i++)
        g->L[i * n + i] += inv_c ? noise * inv_c[rows ? rows[i] : i] : noise;
    int info = LAPACKE_dpotrf(LAPACK_ROW_MAJOR, 'L', (int)n, g->L, (int)n);
    if (info)
        return kb__lapack_status(info);
    /* row-major LAPACKE allocates transposed copies (it fails, a untouched, without
     * memory) and refuses a NaN: out of memory or a numerical failure */
    info = LAPACKE_dpotrs(LAPACK_ROW_MAJOR, 'L', (int)n, 1, g->L, (int)n, g->a, 1);
    return info ? kb__lapack_status(info) : KB_OK;
}

/* u(x) and, when grad is not NULL, its gradient. */
static double acq_eval(acq_gp *g, const double *x, double *grad)
{
    size_t n = g->n, d = g->d;
    const kb_kernel *k = g->k;
    double mu = 0.0;
    for (size_t i = 0; i < n; i++) {
        double r2 = 0.0;
        for (size_t j = 0; j < d; j++)
            r2 += kb__coord_d2(k->choices, j, x[j], g->X[i * d + j]) /
                  (k->lengthscales[j] * k->lengthscales[j]);
        double slope, base = kb__kernel_profile(k->kind, r2, &slope);
        if (k->additive) { /* the overlap term does not move with an ordered coordinate */
            g->kx[i] = k->variance * ((1.0 - k->mix) * base +
                                      k->mix * kb__kernel_overlap(k, x, g->X + i * d));
            g->sl[i] = k->variance * (1.0 - k->mix) * slope;
        } else {
            g->kx[i] = k->variance * base;
            g->sl[i] = k->variance * slope;
        }
        mu += g->a[i] * g->kx[i];
    }
    memcpy(g->q, g->kx, n * sizeof *g->q);
    double s2 = k->variance;
    if (n) {
        cblas_dtrsv(CblasRowMajor, CblasLower, CblasNoTrans, CblasNonUnit, (int)n, g->L,
                    (int)n, g->q, 1);
        s2 -= cblas_ddot((int)n, g->q, 1, g->q, 1);
        cblas_dtrsv(CblasRowMajor, CblasLower, CblasTrans, CblasNonUnit, (int)n, g->L,
                    (int)n, g->q, 1);
    }
    double s = sqrt(s2 > 1e-12 ? s2 : 1e-12);
    if (grad) {
        memset(grad, 0, d * sizeof *grad);
        for (size_t i = 0; i < n; i++) {
            double c = (g->a[i] - g->width * g->q[i] / s) * g->sl[i] * 2.0;
            for (size_t j = 0; j < d; j++) {
                double l = k->lengthscales[j];
                if (!k->choices || !k->choices[j]) /* a choice does not move by gradient */
                    grad[j] += c * (x[j] - g->X[i * d + j]) / (l * l);
            }
        }
    }
    return mu + g->width * s;
}

static double neg_ucb(unsigned d, const double *x, double *grad, void *ud)
{
    double v = acq_eval(ud, x, grad);
    for (unsigned j = 0; grad && j < d; j++)
        grad[j] = -grad[j];
    return -v;
}

static size_t choose_rows(const double *y, size_t n, size_t *rows)
{
    kb_rng rng;
    kb_rng_seed(&rng, (uint64_t)n);
    return kb__pick_rows(y, n, ACQ_MAX_ROWS, &rng, rows);
}

int kb__acq_refine(const kb_kernel *k, double noise, const double *U, const double *y,
                   size_t n, double width, double *P, size_t m)
{
    if (k->kind == KB_KERNEL_LINEAR || n == 0 || m == 0)
        return KB_OK;
    size_t d = k->dim, *rows = malloc(n * sizeof *rows);
    acq_gp g = {0};
    int rc = rows ? acq_build(&g, k, noise, U, y, NULL, rows, choose_rows(y, n, rows), width)
                  : KB_ENOMEM;
    nlopt_opt opt = rc == KB_OK ? nlopt_create(NLOPT_LD_LBFGS, (unsigned)d) : NULL;
    double *x = malloc(d * sizeof *x);
    if (rc == KB_OK && (!opt || !x))
        rc = KB_ENOMEM;
    if (rc == KB_OK) {
        nlopt_set_lower_bounds1(opt, 0.0);
        nlopt_set_upper_bounds1(opt, 1.0);
        nlopt_set_min_objective(opt, neg_ucb, &g);
        nlopt_set_maxeval(opt, ACQ_MAX_EVALS);
        nlopt_set_xtol_rel(opt, 1e-6);
    }
    for (size_t p = 0; rc == KB_OK && p < m; p++) {
        double *pt = P + p * d, f0 = -acq_eval(&g, pt, NULL), f = f0;
        memcpy(x, pt, d * sizeof *x);
        nlopt_result r = nlopt_optimize(opt, x, &f);
        if (r == NLOPT_OUT_OF_MEMORY)
            rc = KB_ENOMEM;
        else if ((r > 0 || r == NLOPT_ROUNDOFF_LIMITED) && f < f0)
            for (size_t j = 0; j < d; j++) /* NLopt keeps bounds; clamp rounding anyway */
                pt[j] = x[j] < 0.0 ? 0.0 : x[j] > 1.0 ? 1.0 : x[j];
    }
    if (opt)
        nlopt_destroy(opt);
    free(x);
    free(rows);
    acq_free(&g);
    return rc == KB_ENUMERIC ? KB_OK : rc; /* an unfactorable GP refines nothing */
}

int kb__gp_mean(const kb_kernel *k, double noise, const kb_rows *rows, const double *P,
                size_t m, double *mean)
{
    enum { BLOCK = 256 };
    /* Repeats merged (exact), then kb__pick_rows' choice over the distinct inputs: a told
     * arm's largest noise draws no longer fill the best quarter. Without repeats these are
     * choose_rows' rows in its order. */
    kb_rng rng;
    kb_rng_seed(&rng, (uint64_t)rows->n);
    kb_row_set rs;
    acq_gp g = {0};
    int rc = kb__row_set_init(&rs, rows, k->dim, ACQ_MAX_ROWS, ACQ_MAX_ROWS / 4, &rng);
    if (rc == KB_OK)
        rc = acq_build(&g, k, noise, rs.U, rs.y, rs.inv_c, NULL, rs.m, 0.0);
    double *K = rc == KB_OK ? malloc(BLOCK * (g.n ? g.n : 1) * sizeof *K) : NULL;
    if (rc == KB_OK && !K)
        rc = KB_ENOMEM;
    for (size_t p = 0; rc == KB_OK && p < m; p += BLOCK) {
        size_t b = m - p < BLOCK ? m - p : BLOCK;
        if (g.n == 0) {
            memset(mean + p, 0, b * sizeof *mean);
            continue;
        }
        kb_kernel_matrix(k, P + p * k->dim, b, g.X, g.n, K);
        cblas_dgemv(CblasRowMajor, CblasNoTrans, (int)b, (int)g.n, 1.0, K, (int)g.n, g.a, 1,
                    0.0, mean + p, 1);
    }
    free(K);
    kb__row_set_free(&rs);
    acq_free(&g);
    return rc;
}

double kb__acq_ucb_at(const kb_kernel *k, double noise, const double *U, const double *y,
                      size_t n, double width, const double *x, double *grad)
{
    acq_gp g = {0};
    double v = NAN;
    if (acq_build(&g, k, noise, U, y, NULL, NULL, n, width) == KB_OK)
        v = acq_eval(&g, x, grad);
    acq_free(&g);
    return v;
}

double kb__interior_basis(const kb_kernel *k, const double *u)
{
    double s = 0.0;
    size_t ordered = 0;
    for (size_t j = 0; j < k->dim; j++)
        if (!k->choices || !k->choices[j]) {
            double t = 2.0 * fmin(fmax(u[j], 0.0), 1.0) - 1.0;
            s += t * t;
            ordered++;
        }
    return ordered ? 1.0 / 3.0 - s / (double)ordered : 0.0;
}

/* With b the basis at the rows, r their residuals under c_now and K_y = K + noise C^-1,
 * the GLS estimate with a N(c0, 1) prior on c is
 *   (b^T K_y^-1 (r + c_now b) + c0) / (b^T K_y^-1 b + 1). */
double kb__interior_coef(const kb_kernel *k, double noise, const kb_rows *rows, double c_now,
                         int *nomem)
{
    kb_rng rng;
    kb_rng_seed(&rng, (uint64_t)rows->n);
    kb_row_set rs;
    acq_gp g = {0};
    double c = c_now;
    int rc = kb__row_set_init(&rs, rows, k->dim, ACQ_MAX_ROWS, ACQ_MAX_ROWS / 4, &rng);
    if (rc == KB_OK)
        rc = acq_build(&g, k, noise, rs.U, rs.y, rs.inv_c, NULL, rs.m, 0.0);
    double *b = rc == KB_OK ? malloc((g.n ? g.n : 1) * sizeof *b) : NULL;
    double *q = b ? malloc((g.n ? g.n : 1) * sizeof *q) : NULL;
    if (rc == KB_ENOMEM || (rc == KB_OK && !q))
        *nomem = 1;
    if (q && g.n) {
        for (size_t i = 0; i < g.n; i++)
            b[i] = q[i] = kb__interior_basis(k, g.X + i * g.d);
        /* the factor came from a dpotrf that worked: only a row-major transposed copy
         * can fail here, for want of memory */
        if (LAPACKE_dpotrs(LAPACK_ROW_MAJOR, 'L', (int)g.n, 1, g.L, (int)g.n, q, 1) == 0) {
            double bKr = cblas_ddot((int)g.n, b, 1, g.a, 1);
            double bKb = cblas_ddot((int)g.n, b, 1, q, 1);
            c = (bKr + c_now * bKb + KB_INTERIOR_C) / (bKb + 1.0);
        } else {
            *nomem = 1;
        }
    }
    free(b);
    free(q);
    kb__row_set_free(&rs);
    acq_free(&g);
    return isfinite(c) ? c : c_now;
}
