/*
 * problem_matern_rkhs.c - the synthetic benchmark of seed 002 (Janz et al. 2020),
 * section 5, Table 1: f = sum_j a_j k(c_j, .) in the RKHS of a Matern-3/2 kernel of
 * lengthscale 1/5, with m = 30 d centres c_j uniform on [0,1]^d and weights a_j uniform
 * on [-1, 1]; arms = the regular grid of g^d points of [0,1]^d (g = 30, or --A = g^d);
 * observations f + uniform[-1, 1] noise. The exact RKHS norm ||f||_k = sqrt(a^T K a) is
 * handed to the engine as B, with the paper's other settings (R = 1, delta = 0.1, the
 * same kernel, alpha = lambda = 1, no input or output scaling so that B and R mean what
 * they say); a --set on the command line overrides any of them.
 *
 * f is NOT rescaled to [0, 1] (unlike the other problems): B refers to f itself, and the
 * noise is fixed by the paper. Deterministic in (d, g, seed): centres, then weights, are
 * drawn from one kb_rng in that order.
 */
#include "problems.h"

#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { CENTRES_PER_DIM = 30, GRID = 30, MAX_D = 4 };
#define LENGTHSCALE 0.2

/* Points per side of a grid of A points in d dimensions (0 when A is not a d-th power). */
static size_t grid_side(size_t A, size_t d)
{
    size_t g = (size_t)llround(pow((double)A, 1.0 / (double)d)), n = 1;
    for (size_t j = 0; j < d; j++)
        n *= g;
    return n == A && g >= 2 ? g : 0;
}

/* Grid point i: coordinate j is digit j of i in base g, over g - 1. */
static void fill_grid(size_t A, size_t d, size_t g, double *X)
{
    for (size_t i = 0; i < A; i++) {
        size_t rest = i;
        for (size_t j = 0; j < d; j++) {
            X[i * d + j] = (double)(rest % g) / (double)(g - 1);
            rest /= g;
        }
    }
}

int bench_make_matern_rkhs(const bench_args *a, bench_problem *p, char *msg, size_t len)
{
    size_t d = a->d ? a->d : 2, m = CENTRES_PER_DIM * d, g = GRID, A = 1;
    if (d > MAX_D) {
        snprintf(msg, len, "matern-rkhs supports d <= %d (a 30^d grid)", MAX_D);
        return -1;
    }
    if (a->A && !(g = grid_side(a->A, d))) {
        snprintf(msg, len, "--A must be g^d for a grid of g >= 2 points per side");
        return -1;
    }
    for (size_t j = 0; j < d; j++)
        A *= g;
    double ls[MAX_D];
    for (size_t j = 0; j < d; j++)
        ls[j] = LENGTHSCALE;
    kb_kernel *k = NULL;
    kb_error err;
    double *C = malloc(m * d * sizeof *C), *w = malloc(m * sizeof *w);
    double *K = malloc(m * m * sizeof *K), *Kw = malloc(m * sizeof *Kw);
    double *Kx = malloc(A * m * sizeof *Kx);
    p->X = malloc(A * d * sizeof *p->X);
    p->f = malloc(A * sizeof *p->f);
    int rc = -1;
    if (!C || !w || !K || !Kw || !Kx || !p->X || !p->f) {
        snprintf(msg, len, "out of memory for a %zu-point grid", A);
        goto done;
    }
    if (kb_kernel_create(KB_KERNEL_MATERN32, d, &k, &err) ||
        kb_kernel_set_lengthscales(k, ls, &err)) {
        snprintf(msg, len, "matern-rkhs kernel: %s", err.message);
        goto done;
    }
    kb_rng rng;
    kb_rng_seed(&rng, a->seed);
    for (size_t i = 0; i < m * d; i++)
        C[i] = kb_rng_uniform(&rng);
    for (size_t i = 0; i < m; i++)
        w[i] = 2.0 * kb_rng_uniform(&rng) - 1.0;
    kb_kernel_matrix(k, C, m, C, m, K);
    cblas_dgemv(CblasRowMajor, CblasNoTrans, (int)m, (int)m, 1.0, K, (int)m, w, 1, 0.0, Kw, 1);
    double norm = sqrt(fmax(0.0, cblas_ddot((int)m, w, 1, Kw, 1)));
    fill_grid(A, d, g, p->X);
    kb_kernel_matrix(k, p->X, A, C, m, Kx);
    cblas_dgemv(CblasRowMajor, CblasNoTrans, (int)A, (int)m, 1.0, Kx, (int)m, w, 1, 0.0, p->f, 1);
    p->A = A;
    p->d = d;
    p->noise_uniform = 1.0;
    snprintf(p->settings, sizeof p->settings,
             "B=%.17g R=1 delta=0.1 kernel=matern32 lengthscale=%g lambda=1 "
             "input_scaling=none output_scaling=none", norm, LENGTHSCALE);
    rc = 0;
done:
    kb_kernel_free(k);
    free(C);
    free(w);
    free(K);
    free(Kw);
    free(Kx);
    return rc;
}
