/*
 * ts_common.c - what the Thompson-sampling engines share (see ts.h): random Fourier
 * features, argmax over allowed candidates, scale parameters.
 *
 * Random features (Rahimi and Recht 2007; seed 001 section 3.2 and eq. 6): for a
 * stationary k(x, y) = variance * base(||(x - y) / l||), Bochner's theorem gives
 * k(x, y) = variance * E_omega[cos(omega . (x - y))] with omega drawn from the
 * normalized spectral density, and E_b[2 cos(a + b) cos(c + b)] = cos(a - c) for
 * b ~ U[0, 2 pi). The densities, in angular frequency and per-dimension scale 1 / l:
 *   RBF:       omega ~ N(0, diag(1 / l^2));
 *   Matern nu: omega ~ multivariate Student-t with 2 nu degrees of freedom and scale
 *              diag(1 / l^2), drawn as z / l * sqrt(2 nu / g), z ~ N(0, I),
 *              g ~ chi^2(2 nu) (a sum of 2 nu squared normals: 2 nu is 1, 3 or 5).
 * The linear kernel has no spectral density and is rejected.
 */
#include "ts.h"

#include <cblas.h>
#if defined __x86_64__ && defined __GLIBC__
#include <emmintrin.h>
#endif
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Degrees of freedom 2 nu of the Student-t spectral density; 0 for the Gaussian. */
static int student_dof(kb_kernel_kind kind)
{
    switch (kind) {
    case KB_KERNEL_MATERN12: return 1;
    case KB_KERNEL_MATERN32: return 3;
    case KB_KERNEL_MATERN52: return 5;
    default: return 0;
    }
}

int kb__ts_features_draw(ts_features *f, const kb_kernel *k, kb_rng *rng, size_t M,
                         kb_error *err)
{
    memset(f, 0, sizeof *f);
    if (k->kind == KB_KERNEL_LINEAR)
        return kb__fail(err, KB_EUNSUPPORTED, "kernel",
                        "the linear kernel has no spectral density for random features; "
                        "use rbf or a matern kernel");
    f->M = M;
    f->dim = kb__kernel_embed_dim(k);
    if (k->choices)
        f->shape = (kb_kernel){.kind = k->kind, .dim = k->dim, .choices = k->choices};
    f->amp = sqrt(2.0 * k->variance / (double)M);
    f->omega = malloc(M * f->dim * sizeof *f->omega);
    f->b = malloc(M * sizeof *f->b);
    if (!f->omega || !f->b) {
        kb__ts_features_free(f);
        return kb__fail(err, KB_ENOMEM, "features", "out of memory for %zu features", M);
    }
    int dof = student_dof(k->kind);
    for (size_t j = 0; j < M; j++) {
        double t = 1.0;
        if (dof) {
            double g = 0.0;
            for (int i = 0; i < dof; i++) {
                double z = kb_rng_normal(rng);
                g += z * z;
            }
            t = sqrt(dof / g);
        }
        /* the unscaled embedding's coordinates, each with its dimension's lengthscale */
        double *w = f->omega + j * f->dim;
        for (size_t i = 0; i < k->dim; i++)
            for (size_t c = k->choices && k->choices[i] ? k->choices[i] : 1; c > 0; c--)
                *w++ = kb_rng_normal(rng) * t / k->lengthscales[i];
        f->b[j] = 2.0 * M_PI * kb_rng_uniform(rng);
    }
    return KB_OK;
}

void kb__ts_features_free(ts_features *f)
{
    free(f->omega);
    free(f->b);
    f->omega = f->b = NULL;
}

/* Phi = embed(X) omega^T without building the embedding (nothing to allocate, so that
 * evaluation cannot fail): a categorical coordinate picks its choice's column, times the
 * one-hot height 1 / sqrt 2 (kb__kernel_embed). O(n M dim). */
static void embedded_products(const ts_features *f, const double *X, size_t n, double *Phi)
{
    const kb_kernel *k = &f->shape;
    for (size_t i = 0; i < n; i++)
        for (size_t m = 0; m < f->M; m++) {
            const double *w = f->omega + m * f->dim;
            double s = 0.0;
            for (size_t j = 0; j < k->dim; j++) {
                double x = X[i * k->dim + j];
                size_t c = k->choices[j];
                s += c ? w[kb__category(x, c)] / sqrt(2.0) : w[0] * x;
                w += c ? c : 1;
            }
            Phi[i * f->M + m] = s;
        }
}

/* row[j] = amp cos(row[j] + b[j]) for j < M: the features' hot loop (scalar cos was 40%
 * of sgp-ts's CPU under noise, where each model refresh evaluates the features at every
 * inducing point: docs/BENCHMARKS.md, twenty-second session). */
#if defined __x86_64__ && defined __GLIBC__
/* glibc's vector cos from libmvec, by its Vector Function ABI name (2 lanes, SSE2
 * baseline; kernel.c's _ZGVbN2v_exp says why that name and what accuracy glibc tests).
 * An odd last entry goes beside a dummy lane, so an entry does not depend on M. */
__m128d _ZGVbN2v_cos(__m128d x);

static void cos_row(double amp, const double *b, size_t M, double *row)
{
    const __m128d a = _mm_set1_pd(amp);
    for (size_t j = 0; j < M; j += 2) {
        int pair = j + 1 < M;
        __m128d x = pair ? _mm_add_pd(_mm_loadu_pd(row + j), _mm_loadu_pd(b + j))
                         : _mm_set_sd(row[j] + b[j]);
        __m128d v = _mm_mul_pd(a, _ZGVbN2v_cos(x));
        if (pair)
            _mm_storeu_pd(row + j, v);
        else
            row[j] = _mm_cvtsd_f64(v);
    }
}
#else
static void cos_row(double amp, const double *b, size_t M, double *row)
{
    for (size_t j = 0; j < M; j++)
        row[j] = amp * cos(row[j] + b[j]);
}
#endif

void kb__ts_features_eval(const ts_features *f, const double *X, size_t n, double *Phi)
{
    if (n == 0)
        return;
    size_t M = f->M;
    if (f->shape.choices)
        embedded_products(f, X, n, Phi);
    else
        cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)n, (int)M, (int)f->dim, 1.0,
                    X, (int)f->dim, f->omega, (int)f->dim, 0.0, Phi, (int)M);
    for (size_t i = 0; i < n; i++)
        cos_row(f->amp, f->b, M, Phi + i * M);
}

int kb__ts_argmax(const kb_engine *e, const double *f, const size_t *idx, size_t n,
                  size_t *best)
{
    int found = 0;
    double top = -INFINITY;
    for (size_t p = 0; p < n; p++) {
        size_t i = idx ? idx[p] : p;
        double v = isnan(f[p]) ? -INFINITY : f[p]; /* NaN ranks last, never sticks */
        if (kb__excluded(e, i) || (found && !(v > top)))
            continue;
        found = 1;
        top = v;
        *best = i;
    }
    return found ? KB_OK : KB_ASK_EXHAUSTED;
}

/* Seed 003, Algorithm 2: v_t = B + R sqrt(2 (gamma_{t-1} + 1 + ln(2 / delta))), stated
 * there for lambda = 1 + eta ~ 1. For a general lambda the self-normalized bound scales
 * the noise term by 1 / sqrt(lambda), as seed 001's Lemma 1 writes it
 * (R sqrt(2 log(1/delta) / tau)); we use R / sqrt(lambda) so that both engines read R
 * the same way. */
double kb__ts_gp_scale(double B, double R, double lambda, double gamma, double delta,
                       double scale)
{
    return scale * (B + R / sqrt(lambda) * sqrt(2.0 * (gamma + 1.0 + log(2.0 / delta))));
}

/* Seed 001, eq. 10 with the approximation-quality constants at their exact-model values
 * (a_t = 1, c_t = 0, which they approach as M and the inducing set grow, section 5.4):
 * alpha_t = 1 + B + R sqrt(2 ln(t^2) / tau), tau = lambda. */
double kb__ts_sgp_scale(double B, double R, double lambda, size_t t, double scale)
{
    double tt = (double)(t ? t : 1);
    return scale * (1.0 + B + R * sqrt(2.0 * log(tt * tt) / lambda));
}
