/*
 * ts.h - pieces shared by the Thompson-sampling engines gp-ts (gp_ts.c) and sgp-ts
 * (sgp_ts.c), and their test hooks. Internal: not part of kbandit.h.
 *
 * Shared here: random Fourier features of a stationary kernel (the prior part of the
 * decomposed sampling rule, seed 001 eq. 6), the argmax of a sampled function over
 * the allowed candidates, and the sample scales. Both engines follow the same refresh
 * options (model every `refresh_every` tells, box pool every `pool_refresh` tells), each
 * with its own counters in its own file.
 */
#ifndef KB_TS_H
#define KB_TS_H

#include "../src/internal.h"

/* ------------------------------------------------- random Fourier features */

/* phi_j(x) = sqrt(2 variance / M) cos(omega_j . x + b_j), j < M, with omega_j drawn
 * from the kernel's normalized spectral density and b_j ~ U[0, 2 pi), so that
 * E[phi(x) . phi(y)] = k(x, y) (Rahimi and Recht 2007). Owned arrays. */
typedef struct ts_features {
    size_t M, dim;  /* dim: of the kernel's embedding (kb__kernel_embed) */
    double amp;     /* sqrt(2 variance / M) */
    double *omega;  /* M x dim */
    double *b;      /* M */
    kb_kernel shape;/* kind, input dim and choices (borrowed from the engine's kernel, which
                     * outlives the features) when a coordinate is categorical */
} ts_features;

/* Draws M features for k from rng. Gaussian spectral density for RBF, multivariate
 * Student-t with 2 nu degrees of freedom for Matern nu; KB_EUNSUPPORTED naming the
 * field "kernel" for the linear kernel (no spectral density). On failure f is empty. */
int kb__ts_features_draw(ts_features *f, const kb_kernel *k, kb_rng *rng, size_t M,
                         kb_error *err);
void kb__ts_features_free(ts_features *f);
/* Phi (n x M, row-major) = phi(X) for X (n x input dim). One dgemm plus n M cosines
 * (and an embedding of X when a coordinate is categorical). */
void kb__ts_features_eval(const ts_features *f, const double *X, size_t n, double *Phi);

/* ----------------------------------------------------------- shared logic */

/* Index of the largest f[i] over the allowed candidates i < n (kb__excluded false; NaN
 * values rank below every number, so some allowed candidate is always chosen);
 * returns 0 and fills *best, or KB_ASK_EXHAUSTED when every candidate is excluded.
 * `idx` maps positions of f to candidate indices (NULL: identity). */
int kb__ts_argmax(const kb_engine *e, const double *f, const size_t *idx, size_t n,
                  size_t *best);

/* Scale of the sample's covariance in each engine, from the theory of its paper with a
 * practical multiplier (documented in the engines). */
double kb__ts_gp_scale(double B, double R, double lambda, double gamma, double delta,
                       double scale);
double kb__ts_sgp_scale(double B, double R, double lambda, size_t t, double scale);

/* ------------------------------------------------------------- test hooks */

/* Draws one sample of gp-ts's scaled posterior jointly at the n points U (internal
 * coordinates) with the engine's current model, through the same sampler as ask. */
int kb__gp_ts_draw(kb_engine *e, const double *U, size_t n, double *out, kb_error *err);
/* Same for sgp-ts's decomposed sample (eq. 6). With fresh_features, the prior part
 * uses M features drawn for this sample only (the engine's own features are kept), so
 * that moments over many draws average over the features as well. */
int kb__sgp_ts_draw(kb_engine *e, const double *U, size_t n, int fresh_features,
                    double *out, kb_error *err);
/* sgp-ts's current inducing points Z, *m rows of space->dim internal coordinates
 * (borrowed; valid until the next observe or ask, which may refresh the model). */
const double *kb__sgp_ts_inducing(const kb_engine *e, size_t *m);

#endif /* KB_TS_H */
