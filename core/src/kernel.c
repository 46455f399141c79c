/*
 * kernel.c - covariance functions: Gaussian/RBF, Matern nu = 1/2, 3/2, 5/2, linear.
 *
 * Each kernel is variance * base(x, y) on inputs divided by per-dimension lengthscales.
 * Kernel matrices go through one dgemm for the inner products (stationary kernels use
 * ||a - b||^2 = ||a||^2 + ||b||^2 - 2 a.b), which is where embedding time is spent.
 * A categorical coordinate with c choices becomes c one-hot coordinates of height
 * 1 / (sqrt 2 l) there (kb__kernel_embed), so that different choices are 1 / l^2 apart in
 * r^2 as in kb_kernel_eval (kb__coord_d2). An `additive` kernel mixes in an overlap term over
 * the categorical coordinates (mix_overlap), computed apart from the dgemm.
 * The public kb_kernel is an opaque handle over the struct of internal.h: callers build it
 * with kb_kernel_create and the setters, which validate, so that the evaluation functions
 * below (and the engines, which hold one by value) read its fields without checks.
 */
#include "internal.h"

#include <cblas.h>
#if defined __x86_64__ && defined __GLIBC__
#include <immintrin.h>
#endif
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

/* Every stationary kernel here is base(r^2) = (1 + a r + b r^2 / 3) exp(-c r - h r^2),
 * evaluated in that order for each kind (zero terms add exact zeros, so each kind rounds
 * as its textbook formula), so that kb_kernel_matrix can compute a row two entries at a
 * time without branching on the kind. a and c are sqrt 3 and sqrt 5 correctly rounded.
 * Indexed by kind: the linear kernel has no shape and never reaches these functions. */
static const struct {
    double a, b, c, h;
} shape[] = {
    [KB_KERNEL_RBF] = {0.0, 0.0, 0.0, 0.5},
    [KB_KERNEL_MATERN12] = {0.0, 0.0, 1.0, 0.0},
    [KB_KERNEL_MATERN32] = {1.7320508075688772, 0.0, 1.7320508075688772, 0.0},
    [KB_KERNEL_MATERN52] = {2.2360679774997896, 5.0, 2.2360679774997896, 0.0},
};

static double exp_arg(kb_kernel_kind kind, double r2)
{
    return -(shape[kind].c * sqrt(r2)) - shape[kind].h * r2;
}

/* log(DBL_MIN): below it exp is subnormal, then 0, and every path here returns 0. Why:
 * glibc's exp and libmvec's vector exp take a slow special case there (the vector exp one
 * scalar call per such lane), which at short lengthscales is most of a kernel row: a
 * 2,048 x 200 RBF matrix at lengthscale 0.02 in 6-d took 10.5 ms instead of 1.1
 * (docs/BENCHMARKS.md, thirtieth session). A value below 2.2e-308 next to the variance
 * changes no sum. */
#define EXP_FLUSH (-708.3964185322641)

static double base_exp(double x)
{
    return x < EXP_FLUSH ? 0.0 : exp(x);
}

static double poly(kb_kernel_kind kind, double r2)
{
    return 1.0 + shape[kind].a * sqrt(r2) + shape[kind].b * r2 / 3.0;
}

/* base(r^2) for the stationary kernels (not linear). */
static double stationary(kb_kernel_kind kind, double r2)
{
    return poly(kind, r2) * base_exp(exp_arg(kind, r2));
}

/* Cancellation in |a|^2 + |b|^2 - 2 a.b leaves ~eps (|a|^2 + |b|^2) for a == b, which
 * Matern 1/2's sqrt(r2) would turn into a 1e-8 error: below that noise level r2 is 0.
 * CANCELLATION is that level over |a|^2 + |b|^2. */
#define CANCELLATION (8.0 * DBL_EPSILON)

int kb__kernel_sse2_only;

/* row[j] = variance * base(r^2) for j < m, where row[j] holds -2 a.b on entry, nx = |a|^2
 * and ny[j] = |b|^2: the kernel matrix's hot loop (a box study's kernel columns spent
 * 12-19% of the daemon's CPU in scalar exp: docs/BENCHMARKS.md, eleventh and twelfth
 * sessions). */
#if defined __x86_64__ && defined __GLIBC__
/* glibc's vector exp from libmvec (GLIBC_2.22, linked as needed through -lm), by its
 * x86-64 Vector Function ABI name: 'b' SSE2 (baseline x86-64, so no dispatch here; glibc
 * picks its SSE4.1 code at load time where the CPU has it), 'N' unmasked, 2 lanes, 'v' a
 * vector argument. glibc tests these to 4 ulp maximum relative error in round-to-nearest
 * and hands special values (underflow to 0 here) to the scalar exp
 * (sourceware.org/glibc/wiki/libmvec); the kernel's own rounding is ~1e-16 anyway. */
__m128d _ZGVbN2v_exp(__m128d x);

/* base(q) two at a time, the scalar path's operations in the same order (so only exp's
 * rounding differs from kb__kernel_profile); also r = sqrt(q) and the exponential, which
 * the slopes reuse. */
static inline __m128d base_pd(kb_kernel_kind kind, __m128d q, __m128d *r, __m128d *e)
{
    *r = _mm_sqrt_pd(q);
    __m128d x = _mm_sub_pd(_mm_sub_pd(_mm_setzero_pd(), _mm_mul_pd(_mm_set1_pd(shape[kind].c), *r)),
                           _mm_mul_pd(_mm_set1_pd(shape[kind].h), q));
    __m128d flush = _mm_cmplt_pd(x, _mm_set1_pd(EXP_FLUSH)); /* exp(0) there, then 0 */
    *e = _mm_andnot_pd(flush, _ZGVbN2v_exp(_mm_andnot_pd(flush, x)));
    __m128d a = _mm_set1_pd(shape[kind].a), b = _mm_set1_pd(shape[kind].b);
    __m128d p = _mm_add_pd(_mm_add_pd(_mm_set1_pd(1.0), _mm_mul_pd(a, *r)),
                           _mm_div_pd(_mm_mul_pd(b, q), _mm_set1_pd(3.0)));
    return _mm_mul_pd(p, *e);
}

/* Two entries at a time through base_pd; an odd last entry goes through the same vector
 * function beside a dummy lane, so an entry does not depend on its column. */
static void stationary_row(const kb_kernel *k, double nx, const double *ny, size_t m,
                           double *row)
{
    const __m128d variance = _mm_set1_pd(k->variance), na = _mm_set1_pd(nx),
                  noise = _mm_set1_pd(CANCELLATION);
    for (size_t j = 0; j < m; j += 2) {
        int pair = j + 1 < m;
        __m128d nb = pair ? _mm_loadu_pd(ny + j) : _mm_set_sd(ny[j]);
        __m128d q = _mm_add_pd(_mm_add_pd(pair ? _mm_loadu_pd(row + j) : _mm_set_sd(row[j]),
                                          na), nb);
        q = _mm_andnot_pd(_mm_cmplt_pd(q, _mm_mul_pd(noise, _mm_add_pd(na, nb))), q);
        __m128d r, e, v = _mm_mul_pd(variance, base_pd(k->kind, q, &r, &e));
        if (pair)
            _mm_storeu_pd(row + j, v);
        else
            row[j] = _mm_cvtsd_f64(v);
    }
}

/* The same loops four entries at a time in AVX2 (target attribute: chosen at run time
 * where the CPU has it), with libmvec's 4-lane exp (_ZGVdN4v_exp, the 'd' AVX2 variant,
 * equal to the 2-lane one but in the last bit on ~1 argument in 10^4): a 100 x 2,048
 * kernel matrix in 1.08-1.18 ms instead of 1.76-1.90. Whole rows run in AVX2 code: a
 * 4-lane exp called per four entries from the SSE2 loop, or blocks of exponentials between
 * separate passes, were each as slow as the SSE2 loop (docs/BENCHMARKS.md, twenty-seventh
 * session). A short last quad is padded with zeros. No FMA: the target is "avx2" alone, so
 * each operation rounds as in base_pd. */
#define AVX2 __attribute__((target("avx2")))
AVX2 __m256d _ZGVdN4v_exp(__m256d x);

AVX2 static inline __m256d base_pd4(kb_kernel_kind kind, __m256d q, __m256d *r, __m256d *e)
{
    *r = _mm256_sqrt_pd(q);
    __m256d c = _mm256_set1_pd(shape[kind].c), h = _mm256_set1_pd(shape[kind].h);
    __m256d x = _mm256_sub_pd(_mm256_sub_pd(_mm256_setzero_pd(), _mm256_mul_pd(c, *r)),
                              _mm256_mul_pd(h, q));
    __m256d flush = _mm256_cmp_pd(x, _mm256_set1_pd(EXP_FLUSH), _CMP_LT_OQ);
    *e = _mm256_andnot_pd(flush, _ZGVdN4v_exp(_mm256_andnot_pd(flush, x)));
    __m256d a = _mm256_set1_pd(shape[kind].a), b = _mm256_set1_pd(shape[kind].b);
    __m256d p = _mm256_add_pd(_mm256_add_pd(_mm256_set1_pd(1.0), _mm256_mul_pd(a, *r)),
                              _mm256_div_pd(_mm256_mul_pd(b, q), _mm256_set1_pd(3.0)));
    return _mm256_mul_pd(p, *e);
}

/* v[0..n) as a vector, n <= 4, zeros beyond. */
AVX2 static inline __m256d load_pd4(const double *v, size_t n)
{
    double t[4] = {0.0, 0.0, 0.0, 0.0};
    if (n == 4)
        return _mm256_loadu_pd(v);
    memcpy(t, v, n * sizeof *t);
    return _mm256_loadu_pd(t);
}

AVX2 static inline void store_pd4(double *v, size_t n, __m256d x)
{
    double t[4];
    if (n == 4) {
        _mm256_storeu_pd(v, x);
        return;
    }
    _mm256_storeu_pd(t, x);
    memcpy(v, t, n * sizeof *t);
}

AVX2 static void stationary_row4(const kb_kernel *k, double nx, const double *ny, size_t m,
                                 double *row)
{
    const __m256d variance = _mm256_set1_pd(k->variance), na = _mm256_set1_pd(nx),
                  noise = _mm256_set1_pd(CANCELLATION);
    for (size_t j = 0; j < m; j += 4) {
        size_t n = m - j < 4 ? m - j : 4;
        __m256d nb = load_pd4(ny + j, n);
        __m256d q = _mm256_add_pd(_mm256_add_pd(load_pd4(row + j, n), na), nb);
        q = _mm256_andnot_pd(_mm256_cmp_pd(q, _mm256_mul_pd(noise, _mm256_add_pd(na, nb)),
                                           _CMP_LT_OS),
                             q);
        __m256d r, e;
        store_pd4(row + j, n, _mm256_mul_pd(variance, base_pd4(k->kind, q, &r, &e)));
    }
}

/* The AVX2 loops where the CPU has them, unless a test asks for the SSE2 ones. */
static int use_avx2(void)
{
    return !kb__kernel_sse2_only && __builtin_cpu_supports("avx2");
}
#else
static void stationary_row(const kb_kernel *k, double nx, const double *ny, size_t m,
                           double *row)
{
    for (size_t j = 0; j < m; j++) {
        double r2 = row[j] + nx + ny[j];
        if (r2 < CANCELLATION * (nx + ny[j]))
            r2 = 0.0;
        row[j] = k->variance * stationary(k->kind, r2);
    }
}
#endif

double kb__kernel_profile(kb_kernel_kind kind, double r2, double *dk_dr2)
{
    /* d base / d r2 = (d base / d r) / (2 r); each closed form below is that quotient
     * simplified, finite at r = 0 except Matern 1/2 (its cusp), reported as 0 there. Each
     * is a multiple of the base's own exponential, so exp is taken once. */
    double r = sqrt(r2), e = base_exp(exp_arg(kind, r2)), d;
    switch (kind) {
    case KB_KERNEL_RBF: d = -0.5 * e; break;
    case KB_KERNEL_MATERN12: d = r > 0 ? -e / (2.0 * r) : 0.0; break;
    case KB_KERNEL_MATERN32: d = -1.5 * e; break;
    case KB_KERNEL_MATERN52: d = -(5.0 / 6.0) * (1.0 + sqrt(5.0) * r) * e; break;
    default: d = 0.0; break;
    }
    if (dk_dr2)
        *dk_dr2 = d;
    return poly(kind, r2) * e;
}

/* The slopes kb__kernel_profile returns, as u (1 + w r) e for every kind but Matern 1/2:
 * the same operations in the same order, so that kb__kernel_profiles differs from it only
 * in exp's rounding. */
static const struct {
    double u, w;
} slope_of[] = {
    [KB_KERNEL_RBF] = {-0.5, 0.0},
    [KB_KERNEL_MATERN32] = {-1.5, 0.0},
    [KB_KERNEL_MATERN52] = {-5.0 / 6.0, 2.2360679774997896},
};

#if defined __x86_64__ && defined __GLIBC__
/* Two pairs at a time through base_pd, as stationary_row; an odd last entry beside a
 * dummy lane. */
static void profiles_vec(kb_kernel_kind kind, const double *r2, size_t n, double *val,
                         double *slope)
{
    const __m128d u = _mm_set1_pd(slope_of[kind].u), w = _mm_set1_pd(slope_of[kind].w),
                  one = _mm_set1_pd(1.0);
    for (size_t j = 0; j < n; j += 2) {
        int pair = j + 1 < n;
        __m128d q = pair ? _mm_loadu_pd(r2 + j) : _mm_set_sd(r2[j]), r, e;
        __m128d v = base_pd(kind, q, &r, &e);
        __m128d s = _mm_mul_pd(_mm_mul_pd(u, _mm_add_pd(one, _mm_mul_pd(w, r))), e);
        if (pair) {
            _mm_storeu_pd(val + j, v);
            _mm_storeu_pd(slope + j, s);
        } else {
            val[j] = _mm_cvtsd_f64(v);
            slope[j] = _mm_cvtsd_f64(s);
        }
    }
}

AVX2 static void profiles_vec4(kb_kernel_kind kind, const double *r2, size_t n, double *val,
                               double *slope)
{
    const __m256d u = _mm256_set1_pd(slope_of[kind].u), w = _mm256_set1_pd(slope_of[kind].w),
                  one = _mm256_set1_pd(1.0);
    for (size_t j = 0; j < n; j += 4) {
        size_t c = n - j < 4 ? n - j : 4;
        __m256d r, e, v = base_pd4(kind, load_pd4(r2 + j, c), &r, &e);
        store_pd4(val + j, c, v);
        store_pd4(slope + j, c,
                  _mm256_mul_pd(_mm256_mul_pd(u, _mm256_add_pd(one, _mm256_mul_pd(w, r))), e));
    }
}
#endif

void kb__kernel_profiles(kb_kernel_kind kind, const double *r2, size_t n, double *val,
                         double *slope)
{
#if defined __x86_64__ && defined __GLIBC__
    if (kind != KB_KERNEL_MATERN12) {
        (use_avx2() ? profiles_vec4 : profiles_vec)(kind, r2, n, val, slope);
        return;
    }
#endif
    for (size_t j = 0; j < n; j++)
        val[j] = kb__kernel_profile(kind, r2[j], &slope[j]);
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
    if (k->kind == KB_KERNEL_LINEAR)
        return k->variance * acc;
    double v = stationary(k->kind, acc);
    if (k->additive)
        v = (1.0 - k->mix) * v + k->mix * kb__kernel_overlap(k, x, y);
    return k->variance * v;
}

/* The categorical coordinates of k, and (into *same) those on which x and y agree. */
static size_t categorical_agreement(const kb_kernel *k, const double *x, const double *y,
                                    size_t *same)
{
    size_t cats = 0;
    *same = 0;
    for (size_t j = 0; k->choices && j < k->dim; j++)
        if (k->choices[j]) {
            cats++;
            *same += kb__category(x[j], k->choices[j]) == kb__category(y[j], k->choices[j]);
        }
    return cats;
}

double kb__kernel_overlap(const kb_kernel *k, const double *x, const double *y)
{
    size_t same, cats = categorical_agreement(k, x, y, &same);
    return cats ? (double)same / (double)cats : 1.0;
}

/* out (n x m, variance base(r^2) on entry) mixed with the additive term: CoCaBO's sum of
 * a kernel over the categorical coordinates beside the joint one (Ru, Alvi, Nguyen,
 * Osborne & Roberts, "Bayesian Optimisation over Multiple Continuous and Categorical
 * Inputs", ICML 2020, eq. 4), here with the overlap kernel as the sum's categorical part
 * and the joint product as its other, so that k(x, x) stays `variance`. */
static void mix_overlap(const kb_kernel *k, const double *X, size_t n, const double *Y,
                        size_t m, double *out)
{
    size_t cats = 0, d = k->dim;
    for (size_t j = 0; j < d; j++)
        cats += k->choices[j] != 0;
    size_t *cx = malloc((n * cats > 0 ? n * cats : 1) * sizeof *cx);
    size_t *cy = malloc((m * cats > 0 ? m * cats : 1) * sizeof *cy);
    double a = 1.0 - k->mix, b = k->mix * k->variance / (double)(cats ? cats : 1);
    for (size_t j = 0, c = 0; cx && cy && j < d; j++) {
        if (!k->choices[j])
            continue;
        for (size_t i = 0; i < n; i++)
            cx[i * cats + c] = kb__category(X[i * d + j], k->choices[j]);
        for (size_t i = 0; i < m; i++)
            cy[i * cats + c] = kb__category(Y[i * d + j], k->choices[j]);
        c++;
    }
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < m; j++) {
            size_t same = 0;
            if (cx && cy)
                for (size_t c = 0; c < cats; c++)
                    same += cx[i * cats + c] == cy[j * cats + c];
            else /* out of memory: the same count, pairwise */
                categorical_agreement(k, X + i * d, Y + j * d, &same);
            out[i * m + j] = a * out[i * m + j] + b * (double)same;
        }
    free(cx);
    free(cy);
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

/* stationary_row for this CPU. */
typedef void (*row_fn)(const kb_kernel *, double, const double *, size_t, double *);
static row_fn row_of(void)
{
#if defined __x86_64__ && defined __GLIBC__
    return use_avx2() ? stationary_row4 : stationary_row;
#else
    return stationary_row;
#endif
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
        /* Allocation failed: fall back to the pairwise formula (no extra memory), whose
         * rounding differs; an engine's kernel reports it (kb_kernel.nomem). */
        if (k->nomem)
            *k->nomem = 1;
        for (size_t i = 0; i < n; i++)
            for (size_t j = 0; j < m; j++)
                out[i * m + j] = kb_kernel_eval(k, X + i * k->dim, Y + j * k->dim);
        goto done;
    }
    int linear = k->kind == KB_KERNEL_LINEAR;
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)n, (int)m, (int)e,
                linear ? k->variance : -2.0, SX, (int)e, SY, (int)e, 0.0, out, (int)m);
    if (!linear) {
        row_fn row = row_of();
        sq_norms(SX, n, e, nx);
        sq_norms(SY, m, e, ny);
        for (size_t i = 0; i < n; i++)
            row(k, nx[i], ny, m, out + i * m);
        if (k->additive)
            mix_overlap(k, X, n, Y, m, out);
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
