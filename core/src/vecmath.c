/*
 * vecmath.c - log and cos over arrays, four at a time: the box pool's normal draws
 * (space.c), thousands per pool.
 *
 * On x86-64 glibc they go through libmvec (GLIBC_2.22, linked as needed through -lm), by
 * the x86-64 Vector Function ABI names: 'b' SSE2, 2 lanes (baseline x86-64; glibc picks
 * its SSE4.1 code at load time where the CPU has it), twice per four values, and 'd' AVX2,
 * 4 lanes, called only where the CPU has AVX2; 'N' unmasked, 'v' a vector argument. glibc
 * tests these to 4 ulp maximum relative error in round-to-nearest and hands special
 * values (log(1) = 0) to its scalar code (sourceware.org/glibc/wiki/libmvec). The widths
 * may differ in the last bit, so results depend on the CPU at that level, as OpenBLAS's
 * kernels already do. Elsewhere: the scalar libm functions.
 *
 * Invariant: out[j] depends on x[j] alone, not on n or j (a short last quad is padded),
 * so that an entry's value does not depend on where it sits in a row.
 */
#include "internal.h"

#include <math.h>
#include <string.h>

/* out[l] = f(x[l]) for l < 4. */
typedef void (*quad_fn)(const double *x, double *out);

#if defined __x86_64__ && defined __GLIBC__
#include <immintrin.h>

__m128d _ZGVbN2v_log(__m128d x);
__m128d _ZGVbN2v_cos(__m128d x);
__attribute__((target("avx2"))) __m256d _ZGVdN4v_log(__m256d x);
__attribute__((target("avx2"))) __m256d _ZGVdN4v_cos(__m256d x);

#define QUAD_SSE2(name, fn)                                                                 \
    static void name(const double *x, double *out)                                        \
    {                                                                                      \
        _mm_storeu_pd(out, fn(_mm_loadu_pd(x)));                                           \
        _mm_storeu_pd(out + 2, fn(_mm_loadu_pd(x + 2)));                                   \
    }
#define QUAD_AVX2(name, fn)                                                                 \
    __attribute__((target("avx2"))) static void name(const double *x, double *out)        \
    {                                                                                      \
        _mm256_storeu_pd(out, fn(_mm256_loadu_pd(x)));                                     \
    }
QUAD_SSE2(log_sse2, _ZGVbN2v_log)
QUAD_SSE2(cos_sse2, _ZGVbN2v_cos)
QUAD_AVX2(log_avx2, _ZGVdN4v_log)
QUAD_AVX2(cos_avx2, _ZGVdN4v_cos)

static quad_fn quad_of(kb_vfun f, int lanes)
{
    static const quad_fn sse2[] = {log_sse2, cos_sse2};
    static const quad_fn avx2[] = {log_avx2, cos_avx2};
    return lanes == 4 ? avx2[f] : sse2[f];
}

static int cpu_lanes(void)
{
    return __builtin_cpu_supports("avx2") ? 4 : 2;
}
#else
static void log_libm(const double *x, double *out)
{
    for (int l = 0; l < 4; l++)
        out[l] = log(x[l]);
}
static void cos_libm(const double *x, double *out)
{
    for (int l = 0; l < 4; l++)
        out[l] = cos(x[l]);
}

static quad_fn quad_of(kb_vfun f, int lanes)
{
    static const quad_fn libm[] = {log_libm, cos_libm};
    return libm[f];
}

static int cpu_lanes(void)
{
    return 1;
}
#endif

void kb__vmath_lanes(kb_vfun f, const double *x, size_t n, double *out, int lanes)
{
    quad_fn quad = quad_of(f, lanes);
    size_t j = 0;
    for (; j + 4 <= n; j += 4)
        quad(x + j, out + j);
    if (j < n) {
        double t[4] = {1.0, 1.0, 1.0, 1.0}; /* a value every function takes */
        memcpy(t, x + j, (n - j) * sizeof *t);
        quad(t, t);
        memcpy(out + j, t, (n - j) * sizeof *t);
    }
}

void kb__vmath(kb_vfun f, const double *x, size_t n, double *out)
{
    kb__vmath_lanes(f, x, n, out, cpu_lanes());
}
