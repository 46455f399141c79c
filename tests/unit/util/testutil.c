/*
 * testutil.c - shared unit-test helpers (see testutil.h).
 */
#include "testutil.h"

#include <lapacke.h>
#include <math.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

double *tu_uniform_matrix(kb_rng *rng, size_t n, size_t d, double lo, double hi)
{
    double *m = malloc(n * d * sizeof *m);
    for (size_t i = 0; i < n * d; i++)
        m[i] = lo + (hi - lo) * kb_rng_uniform(rng);
    return m;
}

int tu_exact_posterior(const kb_kernel *k, const double *X, const double *y, size_t n,
                       double noise, const double *Xs, size_t m, double *mean, double *var)
{
    size_t d = kb_kernel_dim(k);
    double *K = malloc((n * n + 1) * sizeof *K);
    double *B = malloc((n * (m + 1) + 1) * sizeof *B); /* columns: y, k_*1..k_*m */
    int rc = -1;
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < n; j++)
            K[i * n + j] = kb_kernel_eval(k, X + i * d, X + j * d) + (i == j ? noise : 0.0);
    for (size_t i = 0; i < n; i++) {
        B[i * (m + 1)] = y[i];
        for (size_t s = 0; s < m; s++)
            B[i * (m + 1) + 1 + s] = kb_kernel_eval(k, X + i * d, Xs + s * d);
    }
    double *Bs = malloc((n * (m + 1) + 1) * sizeof *Bs);
    memcpy(Bs, B, n * (m + 1) * sizeof *B);
    if (n > 0) {
        if (LAPACKE_dpotrf(LAPACK_ROW_MAJOR, 'L', (lapack_int)n, K, (lapack_int)n))
            goto done;
        if (LAPACKE_dpotrs(LAPACK_ROW_MAJOR, 'L', (lapack_int)n, (lapack_int)(m + 1), K,
                           (lapack_int)n, Bs, (lapack_int)(m + 1)))
            goto done;
    }
    for (size_t s = 0; s < m; s++) {
        double mu = 0.0, q = 0.0;
        for (size_t i = 0; i < n; i++) {
            double ks = B[i * (m + 1) + 1 + s];
            mu += ks * Bs[i * (m + 1)];
            q += ks * Bs[i * (m + 1) + 1 + s];
        }
        mean[s] = mu;
        var[s] = kb_kernel_eval(k, Xs + s * d, Xs + s * d) - q;
    }
    rc = 0;
done:
    free(K);
    free(B);
    free(Bs);
    return rc;
}

/* K(A, B) (na x nb, row-major, owned), pairwise. */
static double *kernel_block(const kb_kernel *k, const double *A, size_t na, const double *B,
                            size_t nb)
{
    double *K = malloc((na * nb + 1) * sizeof *K);
    for (size_t i = 0; i < na; i++)
        for (size_t j = 0; j < nb; j++)
            K[i * nb + j] = kb_kernel_eval(k, A + i * kb_kernel_dim(k), B + j * kb_kernel_dim(k));
    return K;
}

int tu_sparse_posterior(const kb_kernel *k, const double *Z, size_t m, const double *X,
                        const double *y, size_t n, double noise, const double *Xs, size_t ns,
                        double *mean, double *cov)
{
    double *Kmm = kernel_block(k, Z, m, Z, m), *Kmn = kernel_block(k, Z, m, X, n);
    double *Kms = kernel_block(k, Z, m, Xs, ns), *Sinv = kernel_block(k, Z, m, Z, m);
    double *P = malloc((m * ns + 1) * sizeof *P), *G = malloc((m * (ns + 1) + 1) * sizeof *G);
    int rc = -1;
    /* Sigma^{-1} = K_mm + K_mn K_nm / noise; G = Sigma [K_ms, K_mn y / noise] */
    for (size_t a = 0; a < m; a++) {
        for (size_t b = 0; b < m; b++)
            for (size_t i = 0; i < n; i++)
                Sinv[a * m + b] += Kmn[a * n + i] * Kmn[b * n + i] / noise;
        double ky = 0.0;
        for (size_t i = 0; i < n && y; i++)
            ky += Kmn[a * n + i] * y[i] / noise;
        memcpy(G + a * (ns + 1), Kms + a * ns, ns * sizeof *G);
        G[a * (ns + 1) + ns] = ky;
    }
    memcpy(P, Kms, m * ns * sizeof *P);
    if (m && (LAPACKE_dposv(LAPACK_ROW_MAJOR, 'L', (lapack_int)m, (lapack_int)(ns + 1), Sinv,
                            (lapack_int)m, G, (lapack_int)(ns + 1)) ||
              LAPACKE_dposv(LAPACK_ROW_MAJOR, 'L', (lapack_int)m, (lapack_int)ns, Kmm,
                            (lapack_int)m, P, (lapack_int)ns)))
        goto done;
    /* P = K_mm^{-1} K_ms now: K_sm K_mm^{-1} K_ms = K_ms^T P */
    for (size_t s = 0; s < ns; s++) {
        double mu = 0.0;
        for (size_t a = 0; a < m; a++)
            mu += Kms[a * ns + s] * G[a * (ns + 1) + ns];
        if (mean)
            mean[s] = mu;
        for (size_t t = 0; t < ns && cov; t++) {
            double c = kb_kernel_eval(k, Xs + s * kb_kernel_dim(k), Xs + t * kb_kernel_dim(k));
            for (size_t a = 0; a < m; a++)
                c += Kms[a * ns + s] * (G[a * (ns + 1) + t] - P[a * ns + t]);
            cov[s * ns + t] = c;
        }
    }
    rc = 0;
done:
    free(Kmm);
    free(Kmn);
    free(Kms);
    free(Sinv);
    free(P);
    free(G);
    return rc;
}

/* Coordinate equality as == compares (0.0 == -0.0). */
static int same_row(const double *a, const double *b, size_t d)
{
    for (size_t j = 0; j < d; j++)
        if (a[j] != b[j])
            return 0;
    return 1;
}

/* The average y of each distinct row of X, in order of first occurrence; *k of them. */
static double *distinct_averages(const double *X, const double *y, size_t n, size_t d,
                                 size_t *k)
{
    double *avg = malloc((n ? n : 1) * sizeof *avg);
    *k = 0;
    for (size_t i = 0; i < n; i++) {
        size_t first = 0, cnt = 0;
        double sum = 0.0;
        while (!same_row(X + first * d, X + i * d, d))
            first++;
        if (first < i)
            continue; /* counted with its first occurrence */
        for (size_t j = i; j < n; j++)
            if (same_row(X + j * d, X + i * d, d)) {
                sum += y[j];
                cnt++;
            }
        avg[(*k)++] = sum / (double)cnt;
    }
    return avg;
}

static void mean_sd(const double *v, size_t k, double *mean, double *sd)
{
    double s = 0.0, s2 = 0.0;
    for (size_t g = 0; g < k; g++)
        s += v[g];
    *mean = k ? s / (double)k : 0.0;
    for (size_t g = 0; g < k; g++)
        s2 += (v[g] - *mean) * (v[g] - *mean);
    *sd = k > 1 ? sqrt(s2 / (double)(k - 1)) : 1.0;
    if (!(*sd > 1e-12))
        *sd = 1.0;
}

void tu_distinct_stats(const double *X, const double *y, size_t n, size_t d, double *mean,
                       double *sd)
{
    size_t k;
    double *avg = distinct_averages(X, y, n, d, &k);
    mean_sd(avg, k, mean, sd);
    free(avg);
}

/* Phi^{-1}(q) by bisection on erfc (the engine uses Newton's method). */
static double quantile_bisect(double q)
{
    double lo = -40.0, hi = 40.0;
    for (int i = 0; i < 200; i++) {
        double mid = 0.5 * (lo + hi);
        if (0.5 * erfc(-mid / sqrt(2.0)) < q)
            lo = mid;
        else
            hi = mid;
    }
    return 0.5 * (lo + hi);
}

static int cmp_dbl(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double tu_upper_spread(const double *v, size_t k, double *median)
{
    double *s = malloc((k ? k : 1) * sizeof *s), m = 0.0, s2 = 0.0;
    size_t above = 0;
    memcpy(s, v, k * sizeof *s);
    qsort(s, k, sizeof *s, cmp_dbl);
    if (k)
        m = k % 2 ? s[k / 2] : 0.5 * (s[k / 2 - 1] + s[k / 2]);
    for (size_t g = 0; g < k; g++)
        if (v[g] > m) {
            s2 += (v[g] - m) * (v[g] - m);
            above++;
        }
    free(s);
    if (median)
        *median = m;
    return above ? sqrt(s2 / (double)above) : 0.0;
}

/* The warp of v among the k averages: median by sorting a copy, ranks by counting. */
static double warp_ref(const double *avg, size_t k, double floor, double v)
{
    if (k < 3)
        return v;
    double m, below = 0.0;
    double spread = tu_upper_spread(avg, k, &m);
    for (size_t g = 0; g < k; g++)
        below += avg[g] < v ? 1.0 : avg[g] == v ? 0.5 : 0.0;
    if (spread > 0.0 && spread < floor)
        spread = floor;
    if (!(v < m) || !(spread > 0.0))
        return v;
    double w = m + spread * quantile_bisect((below + 0.5) / (double)(k + 1));
    return w > v ? w : v;
}

double tu_output_y(const double *X, const double *y, size_t n, size_t d, int warp, double floor,
                   double v)
{
    size_t k;
    double *avg = distinct_averages(X, y, n, d, &k), mean, sd;
    double *w = malloc((k ? k : 1) * sizeof *w);
    for (size_t g = 0; g < k; g++)
        w[g] = warp ? warp_ref(avg, k, floor, avg[g]) : avg[g];
    mean_sd(w, k, &mean, &sd);
    double out = ((warp ? warp_ref(avg, k, floor, v) : v) - mean) / sd;
    free(w);
    free(avg);
    return out;
}

double tu_max_rel_err(const double *a, const double *b, size_t n, double floor)
{
    double worst = 0.0;
    for (size_t i = 0; i < n; i++) {
        double den = fabs(b[i]) > floor ? fabs(b[i]) : floor;
        double e = fabs(a[i] - b[i]) / den;
        if (isnan(e))
            return NAN;
        if (e > worst)
            worst = e;
    }
    return worst;
}

kb_kernel *tu_kernel_with(kb_kernel_kind kind, size_t d, double variance, const double *ls)
{
    kb_kernel *k;
    kb_error err;
    if (kb_kernel_create(kind, d, &k, &err) || kb_kernel_set_variance(k, variance, &err) ||
        kb_kernel_set_lengthscales(k, ls, &err)) {
        fprintf(stderr, "tu_kernel: %s: %s\n", err.field, err.message);
        abort();
    }
    return k;
}

kb_kernel *tu_kernel(kb_kernel_kind kind, size_t d, double l)
{
    double *ls = malloc(d * sizeof *ls);
    if (!ls)
        abort();
    for (size_t j = 0; j < d; j++)
        ls[j] = l;
    kb_kernel *k = tu_kernel_with(kind, d, 1.0, ls);
    free(ls);
    return k;
}

kb_engine *tu_restored(const kb_engine *e)
{
    kb_error err;
    unsigned char *bytes;
    size_t len;
    kb_engine *r = NULL;
    if (kb_engine_snapshot(e, &bytes, &len, &err) == KB_OK) {
        r = kb_engine_restore(bytes, len, &err);
        free(bytes);
    }
    if (!r) {
        fprintf(stderr, "tu_restored: %s\n", err.message);
        abort();
    }
    return r;
}

double tu_stat(const kb_engine *e, const char *name)
{
    kb_error err;
    double v;
    if (kb_engine_stat(e, name, &v, &err) != KB_OK) {
        fprintf(stderr, "tu_stat: %s\n", err.message);
        abort();
    }
    return v;
}

char *tu_temp_db(const char *prefix)
{
    char *path = malloc(strlen(prefix) + 16);
    sprintf(path, "/tmp/%s-XXXXXX", prefix);
    int fd = mkstemp(path);
    if (fd < 0) {
        perror("mkstemp");
        abort();
    }
    close(fd);
    unlink(path);
    return path;
}

void tu_remove_db(char *path)
{
    char buf[512];
    unlink(path);
    snprintf(buf, sizeof buf, "%s-wal", path);
    unlink(buf);
    snprintf(buf, sizeof buf, "%s-shm", path);
    unlink(buf);
    free(path);
}
