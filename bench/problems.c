/*
 * problems.c - the benchmark problems of kb-bench, as a table of constructors (see
 * problems.h for the invariants every problem keeps).
 *
 *   abalone    the UCI Abalone rows (data file and protocol: docs/REFERENCES.md, the
 *              abalone protocol, seed 004 App. D.1): raw features as arms (the
 *              caller sets input_scaling=standardize), target rescaled to [0, 1];
 *   csv        any CSV file of numbers, last column the target (--data required);
 *   rkhs       f = sum_j a_j k(c_j, .) with 20 random centres c_j, a_j ~ N(0, 1), for a
 *              chosen kernel (--problem-kernel, --problem-lengthscale), on A Halton
 *              points of [0,1]^d (seed 003 section 6 builds its test functions the same way);
 *   branin, hartmann3, hartmann6, ackley
 *              the classical test functions, negated (we maximize), on A Halton points
 *              of the unit cube mapped affinely to each function's usual domain.
 * Every f is rescaled to [0, 1]. Halton points are shifted at random (Cranley-Patterson)
 * with the run's seed, so seeds give distinct instances of the synthetic problems.
 */
#include "problems.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void bench_problem_free(bench_problem *p)
{
    free(p->X);
    free(p->f);
    p->X = p->f = NULL;
}

void bench_rescale01(double *f, size_t n)
{
    double lo = INFINITY, hi = -INFINITY;
    for (size_t i = 0; i < n; i++) {
        lo = f[i] < lo ? f[i] : lo;
        hi = f[i] > hi ? f[i] : hi;
    }
    for (size_t i = 0; i < n; i++)
        f[i] = hi > lo ? (f[i] - lo) / (hi - lo) : 0.0;
}

void bench_halton(size_t A, size_t d, kb_rng *rng, double *X)
{
    static const unsigned primes[] = {2,  3,  5,  7,  11, 13, 17, 19, 23, 29, 31,
                                      37, 41, 43, 47, 53, 59, 61, 67, 71, 73, 79,
                                      83, 89, 97, 101, 103, 107, 109, 113, 127, 131};
    for (size_t j = 0; j < d; j++) {
        unsigned b = primes[j % (sizeof primes / sizeof primes[0])];
        double shift = kb_rng_uniform(rng);
        for (size_t i = 0; i < A; i++) {
            double h = 0.0, inv = 1.0 / b;
            for (size_t k = i + 1; k > 0; k /= b, inv /= b)
                h += (double)(k % b) * inv;
            h += shift;
            X[i * d + j] = h - floor(h);
        }
    }
}

static int alloc_problem(bench_problem *p, size_t A, size_t d)
{
    p->A = A;
    p->d = d;
    p->X = malloc(A * d * sizeof *p->X);
    p->f = malloc(A * sizeof *p->f);
    return p->X && p->f ? 0 : -1;
}

/* ------------------------------------------------------------- CSV data sets */

/* Reads a CSV of numbers (no header) into a rows x cols matrix. */
static double *read_csv(const char *path, size_t *rows, size_t *cols, char *msg, size_t len)
{
    FILE *fp = fopen(path, "r");
    if (!fp) {
        snprintf(msg, len, "cannot open %s", path);
        return NULL;
    }
    size_t cap = 0, n = 0, nc = 0, line = 0;
    double *M = NULL;
    char buf[4096];
    while (fgets(buf, sizeof buf, fp)) {
        line++;
        if (strspn(buf, " \t\r\n") == strlen(buf))
            continue;
        size_t c = 0;
        double vals[256];
        for (char *tok = strtok(buf, ",\r\n"); tok && c < 256; tok = strtok(NULL, ",\r\n")) {
            char *end;
            vals[c] = strtod(tok, &end);
            if (end == tok || !isfinite(vals[c])) {
                snprintf(msg, len, "%s:%zu: '%s' is not a number", path, line, tok);
                goto fail;
            }
            c++;
        }
        if (nc == 0)
            nc = c;
        if (c != nc || c < 2) {
            snprintf(msg, len, "%s:%zu: %zu columns, expected %zu (>= 2)", path, line, c, nc);
            goto fail;
        }
        if ((n + 1) * nc > cap) {
            cap = cap ? 2 * cap : 1024 * nc;
            double *p = realloc(M, cap * sizeof *M);
            if (!p)
                goto fail;
            M = p;
        }
        memcpy(M + n * nc, vals, nc * sizeof *vals);
        n++;
    }
    fclose(fp);
    if (n == 0) {
        snprintf(msg, len, "%s: no rows", path);
        free(M);
        return NULL;
    }
    *rows = n;
    *cols = nc;
    return M;
fail:
    fclose(fp);
    free(M);
    return NULL;
}

/* A CSV problem: features as arms, last column the target; --A takes a seeded random
 * subset of the rows. */
static int csv_problem(const bench_args *a, const char *path, bench_problem *p, char *msg,
                       size_t len)
{
    size_t n, nc;
    double *M = read_csv(path, &n, &nc, msg, len);
    if (!M)
        return -1;
    size_t d = nc - 1, A = a->A && a->A < n ? a->A : n;
    if (a->d && a->d != d) {
        snprintf(msg, len, "--d %zu but %s has %zu feature columns", a->d, path, d);
        free(M);
        return -1;
    }
    size_t *perm = malloc(n * sizeof *perm);
    if (!perm || alloc_problem(p, A, d)) {
        free(perm);
        free(M);
        return -1;
    }
    for (size_t i = 0; i < n; i++)
        perm[i] = i;
    if (A < n) { /* partial Fisher-Yates */
        kb_rng rng;
        kb_rng_seed(&rng, a->seed ^ 0x5eedc5a);
        for (size_t i = 0; i < A; i++) {
            size_t j = i + (size_t)kb_rng_below(&rng, n - i), t = perm[i];
            perm[i] = perm[j];
            perm[j] = t;
        }
    }
    for (size_t i = 0; i < A; i++) {
        memcpy(p->X + i * d, M + perm[i] * nc, d * sizeof *M);
        p->f[i] = M[perm[i] * nc + d];
    }
    bench_rescale01(p->f, A);
    free(perm);
    free(M);
    return 0;
}

static int make_abalone(const bench_args *a, bench_problem *p, char *msg, size_t len)
{
    char path[4096];
    if (a->data)
        snprintf(path, sizeof path, "%s", a->data);
    else
        snprintf(path, sizeof path, "%s/../shared/data/abalone.csv", a->root);
    return csv_problem(a, path, p, msg, len);
}

static int make_csv(const bench_args *a, bench_problem *p, char *msg, size_t len)
{
    if (!a->data) {
        snprintf(msg, len, "problem csv needs --data PATH");
        return -1;
    }
    return csv_problem(a, a->data, p, msg, len);
}

/* ------------------------------------------------------ synthetic functions */

typedef double (*test_fn)(const double *z, size_t d);

/* A Halton points in the unit cube; f = fn(lo + (hi - lo) x). d_fixed = 0: any d. */
static int synthetic(const bench_args *a, bench_problem *p, size_t d_fixed, size_t d_default,
                     double lo, double hi, test_fn fn, char *msg, size_t len)
{
    size_t d = a->d ? a->d : (d_fixed ? d_fixed : d_default);
    if (d_fixed && d != d_fixed) {
        snprintf(msg, len, "this problem has d = %zu", d_fixed);
        return -1;
    }
    size_t A = a->A ? a->A : 1000;
    if (alloc_problem(p, A, d))
        return -1;
    kb_rng rng;
    kb_rng_seed(&rng, a->seed ^ 0x9a17011);
    bench_halton(A, d, &rng, p->X);
    double z[64];
    if (d > 64) {
        snprintf(msg, len, "d must be at most 64");
        return -1;
    }
    for (size_t i = 0; i < A; i++) {
        for (size_t j = 0; j < d; j++)
            z[j] = lo + (hi - lo) * p->X[i * d + j];
        p->f[i] = fn(z, d);
    }
    bench_rescale01(p->f, A);
    return 0;
}

/* Branin on [-5, 10] x [0, 15]: the two ranges differ, so it takes unit-cube z. */
static double neg_branin(const double *u, size_t d)
{
    (void)d;
    double x1 = -5.0 + 15.0 * u[0], x2 = 15.0 * u[1];
    double b = 5.1 / (4 * M_PI * M_PI), c = 5 / M_PI, t = 1 / (8 * M_PI);
    double q = x2 - b * x1 * x1 + c * x1 - 6;
    return -(q * q + 10 * (1 - t) * cos(x1) + 10);
}

static double neg_hartmann(const double *x, size_t d, const double *Am, const double *P)
{
    static const double alpha[4] = {1.0, 1.2, 3.0, 3.2};
    double s = 0;
    for (int i = 0; i < 4; i++) {
        double e = 0;
        for (size_t j = 0; j < d; j++)
            e += Am[i * d + j] * (x[j] - P[i * d + j]) * (x[j] - P[i * d + j]);
        s += alpha[i] * exp(-e);
    }
    return s;
}

static double neg_hartmann3(const double *x, size_t d)
{
    static const double Am[12] = {3, 10, 30, 0.1, 10, 35, 3, 10, 30, 0.1, 10, 35};
    static const double P[12] = {0.3689, 0.1170, 0.2673, 0.4699, 0.4387, 0.7470,
                                 0.1091, 0.8732, 0.5547, 0.0381, 0.5743, 0.8828};
    return neg_hartmann(x, d, Am, P);
}

static double neg_hartmann6(const double *x, size_t d)
{
    static const double Am[24] = {10,   3,  17,   3.5, 1.7, 8,  0.05, 10, 17, 0.1, 8,  14,
                                  3,    3.5, 1.7, 10,  17,  8,  17,   8,  0.05, 10, 0.1, 14};
    static const double P[24] = {0.1312, 0.1696, 0.5569, 0.0124, 0.8283, 0.5886,
                                 0.2329, 0.4135, 0.8307, 0.3736, 0.1004, 0.9991,
                                 0.2348, 0.1451, 0.3522, 0.2883, 0.3047, 0.6650,
                                 0.4047, 0.8828, 0.8732, 0.5743, 0.1091, 0.0381};
    return neg_hartmann(x, d, Am, P);
}

static double neg_ackley(const double *x, size_t d)
{
    double s2 = 0, sc = 0;
    for (size_t j = 0; j < d; j++) {
        s2 += x[j] * x[j];
        sc += cos(2 * M_PI * x[j]);
    }
    return 20 * exp(-0.2 * sqrt(s2 / (double)d)) + exp(sc / (double)d) - 20 - M_E;
}

static int make_branin(const bench_args *a, bench_problem *p, char *msg, size_t len)
{
    return synthetic(a, p, 2, 2, 0, 1, neg_branin, msg, len);
}
static int make_hartmann3(const bench_args *a, bench_problem *p, char *msg, size_t len)
{
    return synthetic(a, p, 3, 3, 0, 1, neg_hartmann3, msg, len);
}
static int make_hartmann6(const bench_args *a, bench_problem *p, char *msg, size_t len)
{
    return synthetic(a, p, 6, 6, 0, 1, neg_hartmann6, msg, len);
}
static int make_ackley(const bench_args *a, bench_problem *p, char *msg, size_t len)
{
    return synthetic(a, p, 0, 2, -32.768, 32.768, neg_ackley, msg, len);
}

/* ------------------------------------------------------------------ RKHS */

static int make_rkhs(const bench_args *a, bench_problem *p, char *msg, size_t len)
{
    enum { M = 20 };
    size_t d = a->d ? a->d : 2, A = a->A ? a->A : 1000;
    kb_kernel_kind kind;
    if (kb_kernel_kind_parse(a->kernel ? a->kernel : "rbf", &kind)) {
        snprintf(msg, len, "unknown --problem-kernel '%s'", a->kernel);
        return -1;
    }
    kb_kernel *k = NULL;
    kb_error err;
    double *ls = malloc(d * sizeof *ls), *C = malloc(M * d * sizeof *C), coef[M];
    double *Kc = malloc(A * M * sizeof *Kc);
    int rc = -1;
    if (!ls || !C || !Kc || alloc_problem(p, A, d))
        goto done;
    for (size_t j = 0; j < d; j++)
        ls[j] = a->lengthscale > 0 ? a->lengthscale : 0.2;
    if (kb_kernel_create(kind, d, &k, &err) || kb_kernel_set_lengthscales(k, ls, &err)) {
        snprintf(msg, len, "rkhs kernel: %s", err.message);
        goto done;
    }
    kb_rng rng;
    kb_rng_seed(&rng, a->seed ^ 0x7c45);
    for (size_t i = 0; i < M * d; i++)
        C[i] = kb_rng_uniform(&rng);
    for (int j = 0; j < M; j++)
        coef[j] = kb_rng_normal(&rng);
    bench_halton(A, d, &rng, p->X);
    kb_kernel_matrix(k, p->X, A, C, M, Kc);
    for (size_t i = 0; i < A; i++) {
        p->f[i] = 0;
        for (int j = 0; j < M; j++)
            p->f[i] += coef[j] * Kc[i * M + j];
    }
    bench_rescale01(p->f, A);
    rc = 0;
done:
    kb_kernel_free(k);
    free(ls);
    free(C);
    free(Kc);
    return rc;
}

const bench_problem_entry bench_problems[] = {
    {"abalone", make_abalone, "UCI Abalone rows (default data ../shared/data/abalone.csv)"},
    {"csv", make_csv, "any numeric CSV, last column the target (--data)"},
    {"rkhs", make_rkhs, "random function in a kernel's RKHS on Halton points of [0,1]^d"},
    {"branin", make_branin, "negated Branin, d = 2"},
    {"hartmann3", make_hartmann3, "negated Hartmann-3"},
    {"hartmann6", make_hartmann6, "negated Hartmann-6"},
    {"ackley", make_ackley, "negated Ackley on [-32.768, 32.768]^d"},
    {"matern-rkhs", bench_make_matern_rkhs,
     "seed 002 Table 1: Matern-3/2 RKHS function on a 30^d grid, uniform noise, B given"},
    {NULL, NULL, NULL},
};

const bench_problem_entry *bench_problem_find(const char *name)
{
    for (const bench_problem_entry *e = bench_problems; e->name; e++)
        if (strcmp(e->name, name) == 0)
            return e;
    return NULL;
}
