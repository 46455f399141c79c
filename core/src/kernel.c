/*
 * kernel.c - covariance functions: Gaussian/RBF, Matern nu = 1/2, 3/2, 5/2, linear.
 *
 * Each kernel is variance * base(x, y) on inputs divided by per-dimension lengthscales.
 * Kernel matrices go through one dgemm for the inner products (stationary kernels use
 * ||a - b||^2 = ||a||^2 + ||b||^2 - 2 a.b), which is where embedding time is spent.
 * A categorical coordinate with c choices becomes c one-hot coordinates of height
 * 1 / (sqrt 2 l) there (kb__kernel_embed), so that different choices are 1 / l^2 apart in
 * r^2 as in kb_kernel_eval (kb__coord_d2).
 * The public kb_kernel is an opaque handle over the struct of internal.h: callers build it
 * with kb_kernel_create and the setters, which validate, so that the evaluation functions
 * below (and the engines, which hold one by value) read its fields without checks.
 */
#include "internal.h"

#include <cblas.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const struct {
    const char *name;
    kb_kernel_kind kind;
} kernel_names[] = {
    {"rbf", KB_KERNEL_RBF},           {"gaussian", KB_KERNEL_RBF},
    {"matern12", KB_KERNEL_MATERN12}, {"matern32", KB_KERNEL_MATERN32},
    {"matern52", KB_KERNEL_MATERN52}, {"linear", KB_KERNEL_LINEAR},
};

int kb_kernel_kind_parse(const char *name, kb_kernel_kind *out)
{
    for (size_t i = 0; i < sizeof kernel_names / sizeof kernel_names[0]; i++)
        if (strcmp(name, kernel_names[i].name) == 0) {
            *out = kernel_names[i].kind;
            return KB_OK;
        }
    return KB_ENOTFOUND;
}

const char *kb_kernel_kind_name(kb_kernel_kind kind)
{
    for (size_t i = 0; i < sizeof kernel_names / sizeof kernel_names[0]; i++)
        if (kernel_names[i].kind == kind && strcmp(kernel_names[i].name, "gaussian") != 0)
            return kernel_names[i].name;
    return "unknown";
}

/* base(r^2) for the stationary kernels. */
static double stationary(kb_kernel_kind kind, double r2)
{
    double r = sqrt(r2);
    switch (kind) {
    case KB_KERNEL_RBF: return exp(-0.5 * r2);
    case KB_KERNEL_MATERN12: return exp(-r);
    case KB_KERNEL_MATERN32: return (1.0 + sqrt(3.0) * r) * exp(-sqrt(3.0) * r);
    case KB_KERNEL_MATERN52:
        return (1.0 + sqrt(5.0) * r + 5.0 * r2 / 3.0) * exp(-sqrt(5.0) * r);
    default: return 0.0;
    }
}

double kb__kernel_profile(kb_kernel_kind kind, double r2, double *dk_dr2)
{
    /* d base / d r2 = (d base / d r) / (2 r); each closed form below is that quotient
     * simplified, finite at r = 0 except Matern 1/2 (its cusp), reported as 0 there. */
    double r = sqrt(r2), d;
    switch (kind) {
    case KB_KERNEL_RBF: d = -0.5 * exp(-0.5 * r2); break;
    case KB_KERNEL_MATERN12: d = r > 0 ? -exp(-r) / (2.0 * r) : 0.0; break;
    case KB_KERNEL_MATERN32: d = -1.5 * exp(-sqrt(3.0) * r); break;
    case KB_KERNEL_MATERN52:
        d = -(5.0 / 6.0) * (1.0 + sqrt(5.0) * r) * exp(-sqrt(5.0) * r);
        break;
    default: d = 0.0; break;
    }
    if (dk_dr2)
        *dk_dr2 = d;
    return stationary(kind, r2);
}

double kb_kernel_eval(const kb_kernel *k, const double *x, const double *y)
{
    double acc = 0.0;
    for (size_t j = 0; j < k->dim; j++) {
        double l = k->lengthscales[j];
        size_t c = k->choices ? k->choices[j] : 0;
        if (k->kind != KB_KERNEL_LINEAR)
            acc += kb__coord_d2(k->choices, j, x[j], y[j]) / (l * l);
        else if (c)
            acc += kb__category(x[j], c) == kb__category(y[j], c) ? 0.5 / (l * l) : 0.0;
        else
            acc += (x[j] / l) * (y[j] / l);
    }
    return k->variance * (k->kind == KB_KERNEL_LINEAR ? acc : stationary(k->kind, acc));
}

void kb_kernel_diag(const kb_kernel *k, const double *X, size_t n, double *out)
{
    for (size_t i = 0; i < n; i++)
        out[i] = k->kind == KB_KERNEL_LINEAR ? kb_kernel_eval(k, X + i * k->dim, X + i * k->dim)
                                             : k->variance;
}

size_t kb__kernel_embed_dim(const kb_kernel *k)
{
    size_t e = 0;
    for (size_t j = 0; j < k->dim; j++)
        e += k->choices && k->choices[j] ? k->choices[j] : 1;
    return e;
}

double *kb__kernel_embed(const kb_kernel *k, const double *X, size_t n, int scaled)
{
    size_t e = kb__kernel_embed_dim(k), d = k->dim;
    double *S = calloc(n * e > 0 ? n * e : 1, sizeof *S);
    if (!S)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        double *row = S + i * e;
        for (size_t j = 0; j < d; j++) {
            double l = scaled ? k->lengthscales[j] : 1.0;
            size_t c = k->choices ? k->choices[j] : 0;
            if (c) {
                row[kb__category(X[i * d + j], c)] = 1.0 / (sqrt(2.0) * l);
                row += c;
            } else {
                *row++ = X[i * d + j] / l;
            }
        }
    }
    return S;
}

static void sq_norms(const double *S, size_t n, size_t dim, double *out)
{
    for (size_t i = 0; i < n; i++)
        out[i] = cblas_ddot((int)dim, S + i * dim, 1, S + i * dim, 1);
}

void kb_kernel_matrix(const kb_kernel *k, const double *X, size_t n, const double *Y,
                      size_t m, double *out)
{
    if (n == 0 || m == 0)
        return;
    size_t e = kb__kernel_embed_dim(k);
    double *SX = kb__kernel_embed(k, X, n, 1);
    double *SY = kb__kernel_embed(k, Y, m, 1);
    double *nx = malloc(n * sizeof *nx), *ny = malloc(m * sizeof *ny);
    if (!SX || !SY || !nx || !ny) {
        /* Allocation failed: fall back to the pairwise formula (no extra memory). */
        for (size_t i = 0; i < n; i++)
            for (size_t j = 0; j < m; j++)
                out[i * m + j] = kb_kernel_eval(k, X + i * k->dim, Y + j * k->dim);
        goto done;
    }
    int linear = k->kind == KB_KERNEL_LINEAR;
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)n, (int)m, (int)e,
                linear ? k->variance : -2.0, SX, (int)e, SY, (int)e, 0.0, out, (int)m);
    if (!linear) {
        sq_norms(SX, n, e, nx);
        sq_norms(SY, m, e, ny);
        for (size_t i = 0; i < n; i++)
            for (size_t j = 0; j < m; j++) {
                /* Cancellation leaves ~eps (|a|^2 + |b|^2) for a == b, which Matern 1/2's
                 * sqrt(r2) would turn into a 1e-8 error: below that noise level r2 is 0. */
                double r2 = out[i * m + j] + nx[i] + ny[j];
                if (r2 < 8.0 * DBL_EPSILON * (nx[i] + ny[j]))
                    r2 = 0.0;
                out[i * m + j] = k->variance * stationary(k->kind, r2);
            }
    }
done:
    free(SX);
    free(SY);
    free(nx);
    free(ny);
}

/* ------------------------------------------------ construction and setters */

int kb__kernel_init(kb_kernel *k, kb_kernel_kind kind, size_t dim, kb_error *err)
{
    memset(k, 0, sizeof *k);
    if ((int)kind < (int)KB_KERNEL_RBF || (int)kind > (int)KB_KERNEL_LINEAR)
        return kb__fail(err, KB_EINVAL, "kind", "unknown kernel kind %d", (int)kind);
    if (dim < 1 || dim > KB_MAX_DIM)
        return kb__fail(err, KB_ERANGE, "dim", "dim is %zu, allowed 1..%d", dim, KB_MAX_DIM);
    k->lengthscales = malloc(dim * sizeof *k->lengthscales);
    if (!k->lengthscales)
        return kb__fail(err, KB_ENOMEM, NULL, "out of memory");
    k->kind = kind;
    k->dim = dim;
    k->variance = 1.0;
    for (size_t j = 0; j < dim; j++)
        k->lengthscales[j] = 1.0;
    return KB_OK;
}

void kb__kernel_release(kb_kernel *k)
{
    free(k->lengthscales);
    free(k->choices);
    k->lengthscales = NULL;
    k->choices = NULL;
}

int kb_kernel_create(kb_kernel_kind kind, size_t dim, kb_kernel **out, kb_error *err)
{
    *out = NULL;
    kb_kernel *k = malloc(sizeof *k);
    if (!k)
        return kb__fail(err, KB_ENOMEM, NULL, "out of memory");
    int rc = kb__kernel_init(k, kind, dim, err);
    if (rc) {
        free(k);
        return rc;
    }
    *out = k;
    return KB_OK;
}

void kb_kernel_free(kb_kernel *k)
{
    if (!k)
        return;
    kb__kernel_release(k);
    free(k);
}

size_t kb_kernel_dim(const kb_kernel *k) { return k->dim; }

int kb_kernel_set_variance(kb_kernel *k, double variance, kb_error *err)
{
    if (!(variance > 0.0 && isfinite(variance)))
        return kb__fail(err, KB_ERANGE, "variance", "variance must be > 0 and finite");
    k->variance = variance;
    return KB_OK;
}

int kb_kernel_set_lengthscales(kb_kernel *k, const double *lengthscales, kb_error *err)
{
    for (size_t j = 0; j < k->dim; j++)
        if (!(lengthscales[j] > 0.0 && isfinite(lengthscales[j]))) {
            char field[KB_ERROR_FIELD_MAX];
            snprintf(field, sizeof field, "lengthscales[%zu]", j);
            return kb__fail(err, KB_ERANGE, field, "a lengthscale must be > 0 and finite");
        }
    memcpy(k->lengthscales, lengthscales, k->dim * sizeof *lengthscales);
    return KB_OK;
}

int kb_kernel_set_choices(kb_kernel *k, const size_t *choices, kb_error *err)
{
    size_t *copy = NULL;
    if (choices) {
        for (size_t j = 0; j < k->dim; j++)
            if (choices[j] == 1) {
                char field[KB_ERROR_FIELD_MAX];
                snprintf(field, sizeof field, "choices[%zu]", j);
                return kb__fail(err, KB_EINVAL, field, "a categorical needs at least 2 choices");
            }
        copy = malloc(k->dim * sizeof *copy);
        if (!copy)
            return kb__fail(err, KB_ENOMEM, NULL, "out of memory");
        memcpy(copy, choices, k->dim * sizeof *copy);
    }
    free(k->choices);
    k->choices = copy;
    return KB_OK;
}
