/*
 * testutil.h - helpers shared by the unit tests: random instances and independent
 * exact and sparse (Titsias / DTC) GP posteriors (dense Cholesky through LAPACKE) to
 * check engines against.
 */
#ifndef KB_TESTUTIL_H
#define KB_TESTUTIL_H

#include "kbandit.h"

#include <stddef.h>

/* n x d uniform [lo, hi) matrix, owned by the caller. */
double *tu_uniform_matrix(kb_rng *rng, size_t n, size_t d, double lo, double hi);

/* Exact GP posterior with prior k and Gaussian noise variance `noise`: for each test
 * row, mean = k_*^T (K + noise I)^{-1} y and var = k(x,x) - k_*^T (K + noise I)^{-1} k_*.
 * Returns 0 on success. Independent of the engines: plain dpotrf/dpotrs on the full
 * kernel matrix built with kb_kernel_eval (pairwise, not the gemm path). */
int tu_exact_posterior(const kb_kernel *k, const double *X, const double *y, size_t n,
                       double noise, const double *Xs, size_t m, double *mean, double *var);

/* The sparse (inducing-point) GP posterior of Titsias (2009), "Variational learning of
 * inducing variables in sparse Gaussian processes", eq. (6) with Sigma =
 * (K_mm + K_mn K_nm / noise)^{-1}: mean = K_sm Sigma K_mn y / noise and
 * cov = K_ss - K_sm K_mm^{-1} K_ms + K_sm Sigma K_ms, for inducing points Z (m rows), data
 * X, y (n rows) and test rows Xs (ns). The same predictive as DTC / projected process
 * (Quinonero-Candela and Rasmussen 2005, eq. (20b)), so it also stands for BKB / BBKB's
 * posterior (seed 004 eqs. (1)-(3), sd^2 = noise sigma~^2). mean (ns) and cov (ns x ns,
 * row-major) may each be NULL. Plain m x m Cholesky solves on kernel blocks built
 * pairwise with kb_kernel_eval, independent of the engines' whitened or embedded forms.
 * Returns 0, or -1 when K_mm or Sigma^{-1} is not positive definite. */
int tu_sparse_posterior(const kb_kernel *k, const double *Z, size_t m, const double *X,
                        const double *y, size_t n, double noise, const double *Xs, size_t ns,
                        double *mean, double *cov);

/* The output standardization of the engines (kb__output_stats), computed independently:
 * rows of X (n x d) with identical coordinates form one distinct point with the average
 * of their y; *mean and *sd are the sample mean and sd (n - 1) of those averages (mean 0
 * without rows; sd 1 below two distinct points or below 1e-12). Quadratic in n. */
void tu_distinct_stats(const double *X, const double *y, size_t n, size_t d, double *mean,
                       double *sd);

/* The median of v[0..k) (in *median when not NULL; 0 for k = 0) and the root mean square
 * of v - median over the values above it (0 when there is none): the warp's spread. */
double tu_upper_spread(const double *v, size_t k, double *median);

/* v as the engines model it (kb__output_y), computed independently: with `warp`, each
 * distinct average and v below the averages' median m are raised to
 * max(value, m + s Phi^{-1}(q)), s the root mean square of (average - m) over the averages
 * above m (raised to `floor` when positive and below it), q = (number of averages below v
 * + half of those equal + 1/2) / (k + 1), at least three averages; then standardized with
 * the mean and sd of the warped averages. */
double tu_output_y(const double *X, const double *y, size_t n, size_t d, int warp, double floor,
                   double v);

/* max_i |a_i - b_i| / max(|b_i|, floor) */
double tu_max_rel_err(const double *a, const double *b, size_t n, double floor);

/* A kernel of the given kind in d dimensions with every lengthscale l and variance 1, or
 * with the given variance and lengthscales ls (d entries); owned by the caller
 * (kb_kernel_free). Aborts when kb_kernel_create or a setter refuses: a bug of the test. */
kb_kernel *tu_kernel(kb_kernel_kind kind, size_t d, double l);
kb_kernel *tu_kernel_with(kb_kernel_kind kind, size_t d, double variance, const double *ls);

/* The engine e's snapshot restores to (kb_engine_snapshot, kb_engine_restore), owned by
 * the caller. Aborts, with the error, when either fails: the tests calling it expect both
 * to succeed. */
kb_engine *tu_restored(const kb_engine *e);

/* The figure `name` of e (kb_engine_stat). Aborts, naming it, when e's engine does not
 * offer it: a test reading a figure expects the engine to have it. */
double tu_stat(const kb_engine *e, const char *name);

/* A fresh path for a temporary SQLite database (the file does not exist yet), owned by
 * the caller; tu_remove_db deletes the database with its -wal and -shm files and frees
 * the path. */
char *tu_temp_db(const char *prefix);
void tu_remove_db(char *path);

#endif
