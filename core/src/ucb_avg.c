/*
 * ucb_avg.c - the UCB integrated over the kernel hyperparameters' posterior (Snoek,
 * Larochelle & Adams, "Practical Bayesian Optimization of Machine Learning Algorithms",
 * NIPS 2012, sec. 3.2: the acquisition averaged over posterior samples of theta instead
 * of evaluated at one point estimate), for UCB:
 *   u(x) = 1/K sum_k (mu_k(x) + width sd_k(x)),
 * each (mu_k, sd_k) the exact GP posterior with sample k's lengthscales, variance and
 * noise. Why: while observations are few the MAP kernel is unreliable (one fit on a
 * handful of points sets the lengthscales for the next steps, and a run's regret at
 * T = 300 is decided there, docs/BENCHMARKS.md, eighth session); the average hedges over
 * the kernels the data still allow. Used only while there are samples (engine.c,
 * draw_hyper_samples: below 10 d observations), so the dense O(m^3) factors per sample
 * stay small. Each sample factors with dpotrf and no jitter, as hyper.c does: a sample
 * whose matrix is not positive definite is left out of the average.
 */
#include "internal.h"

#include <cblas.h>
#include <lapacke.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct avg_work {
    double *L;    /* max(m, nr)^2: one factor at a time */
    double *KC;   /* max(m, nr) x A: kernel rows against the points */
    double *a;    /* m: K_y^-1 y */
    double *mean; /* A */
    double *var;  /* A */
} avg_work;

static void avg_free(avg_work *w)
{
    free(w->L);
    free(w->KC);
    free(w->a);
    free(w->mean);
    free(w->var);
}

static int avg_init(avg_work *w, size_t m, size_t nr, size_t A)
{
    size_t big = (m > nr ? m : nr) + 1;
    *w = (avg_work){0};
    w->L = malloc(big * big * sizeof *w->L);
    w->KC = malloc(big * A * sizeof *w->KC);
    w->a = malloc((m + 1) * sizeof *w->a);
    w->mean = malloc(A * sizeof *w->mean);
    w->var = malloc(A * sizeof *w->var);
    return w->L && w->KC && w->a && w->mean && w->var ? KB_OK : KB_ENOMEM;
}

/* Lower Cholesky factor of K(P, P) + noise I into L (row-major n x n); 0 or LAPACK's
 * nonzero info. */
static int factor(const kb_kernel *k, double noise, const double *P, size_t n, double *L)
{
    kb_kernel_matrix(k, P, n, P, n, L);
    for (size_t i = 0; i < n; i++)
        L[i * n + i] += noise;
    return n ? LAPACKE_dpotrf(LAPACK_ROW_MAJOR, 'L', (int)n, L, (int)n) : 0;
}

/* One sample's posterior at the A points: w->mean from the m observations, w->var from
 * the nr rows. Nonzero when a factor does not exist. */
static int sample_posterior(avg_work *w, const kb_kernel *k, double noise, const double *R,
                            size_t nr, const double *U, const double *y, size_t m,
                            const double *C, size_t A)
{
    memset(w->mean, 0, A * sizeof *w->mean);
    if (m) {
        if (factor(k, noise, U, m, w->L))
            return 1;
        memcpy(w->a, y, m * sizeof *w->a);
        cblas_dtrsv(CblasRowMajor, CblasLower, CblasNoTrans, CblasNonUnit, (int)m, w->L,
                    (int)m, w->a, 1);
        cblas_dtrsv(CblasRowMajor, CblasLower, CblasTrans, CblasNonUnit, (int)m, w->L,
                    (int)m, w->a, 1);
        kb_kernel_matrix(k, U, m, C, A, w->KC);
        cblas_dgemv(CblasRowMajor, CblasTrans, (int)m, (int)A, 1.0, w->KC, (int)A, w->a, 1,
                    0.0, w->mean, 1);
    }
    kb_kernel_diag(k, C, A, w->var);
    if (!nr)
        return 0;
    if (factor(k, noise, R, nr, w->L))
        return 1;
    kb_kernel_matrix(k, R, nr, C, A, w->KC);
    cblas_dtrsm(CblasRowMajor, CblasLeft, CblasLower, CblasNoTrans, CblasNonUnit, (int)nr,
                (int)A, 1.0, w->L, (int)nr, w->KC, (int)A);
    for (size_t i = 0; i < nr; i++)
        for (size_t a = 0; a < A; a++)
            w->var[a] -= w->KC[i * A + a] * w->KC[i * A + a];
    return 0;
}

int kb__ucb_average(const kb_kernel *shape, const double *thetas, size_t count,
                    const double *R, size_t nr, const double *U, const double *y, size_t m,
                    const double *C, size_t A, double width, double *ucb)
{
    size_t d = shape->dim, used = 0;
    double ls[d > 0 ? d : 1];
    kb_kernel k = *shape;
    k.lengthscales = ls;
    avg_work w;
    int rc = avg_init(&w, m, nr, A);
    if (rc == KB_OK)
        memset(ucb, 0, A * sizeof *ucb);
    for (size_t s = 0; rc == KB_OK && s < count; s++) {
        const double *th = thetas + s * (d + 2);
        for (size_t j = 0; j < d; j++)
            ls[j] = exp(th[j]);
        k.variance = exp(th[d]);
        if (sample_posterior(&w, &k, exp(th[d + 1]), R, nr, U, y, m, C, A))
            continue;
        for (size_t a = 0; a < A; a++)
            ucb[a] += w.mean[a] + width * sqrt(w.var[a] > 0 ? w.var[a] : 0.0);
        used++;
    }
    for (size_t a = 0; rc == KB_OK && a < A; a++)
        ucb[a] /= (double)(used ? used : 1);
    avg_free(&w);
    return rc == KB_OK && !used ? KB_ENUMERIC : rc;
}
