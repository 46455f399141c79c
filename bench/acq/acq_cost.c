/*
 * acq_cost.c - This file contains kb-acq-cost, which measures what the refinement of box
 * pool points on the UCB (core/src/acq.c, issue 13) costs: a gp-ucb engine on a box of
 * --dim floats observes --n points of a smooth function whose value depends on the first
 * 6 coordinates only (the usual case in tuning: most dimensions inactive), asks until
 * its hyperparameters are fitted and its pool was redrawn once, then times --reps pool
 * refreshes with refinement (kb__refresh_pool(e, 1, 0.0)) and as many without, alternately.
 * Times are CPU time of the calling thread. One JSON line: the medians, their difference
 * (the refinement's cost per refresh) and the refreshes per ask of gp-ucb at this n (one
 * per 1 + n / 16 new observations), so the cost per ask is the difference times that rate.
 *
 *   kb-acq-cost [--dim 20] [--n 1000] [--reps 21] [--seed 1]
 *
 * Engine internals (kb__refresh_pool) come from libkbandit.a, as in the unit tests.
 */
#include "../../core/src/internal.h"
#include "cpu_time.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A smooth function of x_0..x_5 with its maximum inside the cube. */
static double objective(const double *x)
{
    double v = 0.0;
    for (size_t j = 0; j < 6; j++) {
        double c = 0.2 + 0.1 * (double)j;
        v -= (1.0 + (double)j) * (x[j] - c) * (x[j] - c);
    }
    return v + 0.3 * sin(7.0 * x[0] * x[1]);
}

static kb_engine *fitted_engine(size_t dim, size_t n, uint64_t seed)
{
    kb_error err;
    kb_space *sp = kb_space_new_box(dim, 2048, &err);
    kb_config *cfg = sp ? kb_config_new("gp-ucb", &err) : NULL;
    kb_engine *e = NULL;
    if (cfg && kb_config_set_number(cfg, "seed", (double)seed, &err) == KB_OK)
        e = kb_engine_create(cfg, sp, &err);
    kb_space_free(sp);
    kb_config_free(cfg);
    if (!e) {
        fprintf(stderr, "kb-acq-cost: %s\n", err.message);
        return NULL;
    }
    kb_rng rng;
    kb_rng_seed(&rng, seed);
    double x[KB_MAX_DIM];
    for (size_t i = 0; i < n; i++) {
        for (size_t j = 0; j < dim; j++)
            x[j] = kb_rng_uniform(&rng);
        if (kb_engine_observe(e, x, objective(x), &err) != KB_OK)
            goto fail;
    }
    uint64_t generation = e->space->generation;
    while (e->space->generation == generation) { /* the initial design, then the refit */
        kb_point p;
        kb_ask_result res;
        if (kb_engine_ask(e, 1, &p, &res, &err) != KB_OK || res.n != 1 ||
            kb_engine_abandon(e, p.handle, &err) != KB_OK)
            goto fail;
    }
    return e;
fail:
    fprintf(stderr, "kb-acq-cost: %s\n", err.message);
    kb_engine_free(e);
    return NULL;
}

int main(int argc, char **argv)
{
    size_t dim = 20, n = 1000, reps = 21;
    uint64_t seed = 1;
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *k = argv[i];
        unsigned long v = strtoul(argv[i + 1], NULL, 10);
        if (!strcmp(k, "--dim")) dim = v;
        else if (!strcmp(k, "--n")) n = v;
        else if (!strcmp(k, "--reps")) reps = v;
        else if (!strcmp(k, "--seed")) seed = v;
        else return fprintf(stderr, "unknown option %s\n", k), 2;
    }
    if (dim < 6 || dim > KB_MAX_DIM || n < 1 || reps < 1)
        return fprintf(stderr, "usage: kb-acq-cost [--dim 6..%d] [--n N] [--reps R] "
                               "[--seed S]\n", KB_MAX_DIM), 2;
    kb_engine *e = fitted_engine(dim, n, seed);
    double *with = malloc(reps * sizeof *with), *without = malloc(reps * sizeof *without);
    if (!e || !with || !without)
        return 1;
    for (size_t r = 0; r < reps; r++) {
        double t0 = cpu_now();
        kb__refresh_pool(e, 1, NULL);
        double t1 = cpu_now();
        kb__refresh_pool(e, 0, NULL);
        with[r] = t1 - t0;
        without[r] = cpu_now() - t1;
    }
    double mw = median(with, reps), mo = median(without, reps);
    double per_ask = 1.0 / (1.0 + (double)n / 16.0);
    printf("{\"bench\":\"acq_cost\",\"dim\":%zu,\"n\":%zu,\"reps\":%zu,\"seed\":%llu,"
           "\"refresh_refined_cpu_ms\":%.3f,\"refresh_plain_cpu_ms\":%.3f,\"refine_cpu_ms\":%.3f,"
           "\"refreshes_per_ask\":%.4f,\"refine_cpu_ms_per_ask\":%.4f}\n",
           dim, n, reps, (unsigned long long)seed, mw * 1e3, mo * 1e3, (mw - mo) * 1e3,
           per_ask, (mw - mo) * 1e3 * per_ask);
    free(with);
    free(without);
    kb_engine_free(e);
    return 0;
}
