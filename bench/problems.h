/*
 * problems.h - benchmark problems for kb-bench: a finite arm set with a known noiseless
 * objective, built by name from a table (problems.c). To add a problem, write a
 * constructor and add one line to bench_problems[] in problems.c.
 *
 * Invariants of a built problem: X is A x d (the rows handed to the engine as a finite
 * space, in the problem's input coordinates), f holds the A noiseless values to be
 * MAXIMIZED, rescaled to [0, 1] so that the default noise sd (0.01) means the same on
 * every problem; observations are f + N(0, noise^2). A problem that prescribes its own
 * noise (noise_uniform) and engine settings (settings, e.g. an RKHS norm bound B that
 * refers to f itself) keeps f unscaled: matern-rkhs (problem_matern_rkhs.c).
 */
#ifndef KB_BENCH_PROBLEMS_H
#define KB_BENCH_PROBLEMS_H

#include "kbandit.h"

#include <stddef.h>

typedef struct bench_problem {
    size_t A, d;
    double *X; /* A x d, owned */
    double *f; /* A, owned */
    /* Optional, zero by default: noise uniform on [-w, w] instead of N(0, --noise^2);
     * and space-separated key=value engine settings the problem prescribes (e.g. B, the
     * RKHS norm of f), applied before --set and only where the engine has the option. */
    double noise_uniform;
    char settings[512];
} bench_problem;

/* What a constructor may use; A or d are 0 when not given on the command line. */
typedef struct bench_args {
    const char *data;  /* --data, or NULL */
    const char *root;  /* the repository root (default data paths are relative to it) */
    size_t A, d;
    uint64_t seed;
    const char *kernel;   /* rkhs: --problem-kernel (default rbf) */
    double lengthscale;   /* rkhs: --problem-lengthscale (default 0.2) */
} bench_args;

/* Fills p or returns nonzero with a message in msg. */
typedef int (*bench_ctor)(const bench_args *a, bench_problem *p, char *msg, size_t len);

typedef struct bench_problem_entry {
    const char *name;
    bench_ctor make;
    const char *help;
} bench_problem_entry;

/* Problems defined in their own files (bench/problem_*.c). */
int bench_make_matern_rkhs(const bench_args *a, bench_problem *p, char *msg, size_t len);

extern const bench_problem_entry bench_problems[]; /* terminated by name == NULL */
const bench_problem_entry *bench_problem_find(const char *name);
void bench_problem_free(bench_problem *p);

/* Shared by constructors: A quasi-random points in [0,1]^d (Halton, randomly shifted
 * modulo 1 with rng) written to X (A x d). */
void bench_halton(size_t A, size_t d, kb_rng *rng, double *X);
/* Rescales f (n values) to [0, 1]; constant f becomes 0. */
void bench_rescale01(double *f, size_t n);

#endif
