/*
 * fit_cost.c - This file contains kb-fit-cost, which measures what the hyperparameter fit
 * (core/src/hyper.c) costs: on n points of a smooth function of --dim coordinates plus
 * N(0, 0.1^2) noise, the median CPU time of one evaluation of the log posterior with its
 * gradient (kb__hyper_objective: the fit's setup for those rows included, which a fit pays
 * once) over --reps calls, and of one whole warm-started fit (kb__hyper_fit, no restarts,
 * from lengthscales 0.5) over --reps / 10 + 1 fits, for each n of --n. One JSON line per n.
 *
 *   kb-fit-cost [--dim 6] [--n 64,128,256] [--reps 51] [--seed 1]
 *
 * Run with OPENBLAS_NUM_THREADS=1: CPU time of this thread is then the fit's cost.
 * Engine internals (kb__hyper_objective, kb__hyper_fit) come from libkbandit.a, as in
 * the unit tests.
 */
#include "../../core/src/internal.h"
#include "cpu_time.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Median CPU seconds of one objective evaluation with its gradient. */
static double objective_cost(const kb_kernel *k, const double *U, const double *y, size_t n,
                             int reps)
{
    size_t d = k->dim;
    double theta[d + 2], grad[d + 2], t[reps];
    for (size_t j = 0; j < d; j++)
        theta[j] = log(0.3 + 0.1 * (double)j);
    theta[d] = 0.0;
    theta[d + 1] = log(0.01);
    for (int r = 0; r < reps; r++) {
        double t0 = cpu_now();
        kb__hyper_objective(k, &(kb_rows){U, y, n, NULL, 0}, theta, grad, 1);
        t[r] = cpu_now() - t0;
    }
    return median(t, (size_t)reps);
}

/* Median CPU seconds of one warm-started fit from the same start. */
static double fit_cost(const kb_kernel *k, const double *U, const double *y, size_t n,
                       int reps)
{
    double t[reps];
    kb_hyper_opts o = {0};
    for (int r = 0; r < reps; r++) {
        kb_kernel *f = NULL;
        kb_kernel_create(k->kind, k->dim, &f, NULL);
        for (size_t j = 0; f && j < k->dim; j++)
            f->lengthscales[j] = 0.5;
        double noise = 0.01, t0 = cpu_now();
        kb_rng rng;
        kb_rng_seed(&rng, 7);
        if (f)
            kb__hyper_fit(f, &noise, &(kb_rows){U, y, n, NULL, 0}, &o, &rng, NULL);
        t[r] = cpu_now() - t0;
        kb_kernel_free(f);
    }
    return median(t, (size_t)reps);
}

int main(int argc, char **argv)
{
    size_t dim = 6;
    int reps = 51;
    uint64_t seed = 1;
    const char *ns = "64,128,256";
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--dim"))
            dim = (size_t)atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--n"))
            ns = argv[i + 1];
        else if (!strcmp(argv[i], "--reps"))
            reps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--seed"))
            seed = (uint64_t)atoll(argv[i + 1]);
        else
            break;
    }
    if (argc % 2 == 0 || dim < 1 || dim > KB_MAX_DIM || reps < 1) {
        fprintf(stderr, "usage: kb-fit-cost [--dim 6] [--n 64,128,256] [--reps 51] [--seed 1]\n");
        return 2;
    }
    kb_kernel *k = NULL;
    if (kb_kernel_create(KB_KERNEL_MATERN52, dim, &k, NULL))
        return 1;
    for (const char *p = ns; *p;) {
        char *end;
        size_t n = (size_t)strtoul(p, &end, 10);
        if (end == p || n < 2)
            break;
        p = *end == ',' ? end + 1 : end;
        double *U = malloc(n * dim * sizeof *U), *y = malloc(n * sizeof *y);
        if (!U || !y)
            return 1;
        kb_rng rng;
        kb_rng_seed(&rng, seed);
        for (size_t i = 0; i < n * dim; i++)
            U[i] = kb_rng_uniform(&rng);
        for (size_t i = 0; i < n; i++)
            y[i] = sin(5.0 * U[i * dim]) + U[i * dim + dim - 1] * U[i * dim] +
                   0.1 * kb_rng_normal(&rng);
        printf("{\"bench\":\"fit_cost\",\"dim\":%zu,\"n\":%zu,\"objective_us\":%.1f,"
               "\"fit_ms\":%.2f}\n",
               dim, n, 1e6 * objective_cost(k, U, y, n, reps),
               1e3 * fit_cost(k, U, y, n, reps / 10 + 1));
        free(U);
        free(y);
    }
    kb_kernel_free(k);
    return 0;
}
