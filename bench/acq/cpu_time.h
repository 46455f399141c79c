/*
 * cpu_time.h - This file contains what the in-process cost tools of bench/acq/ share:
 * the calling thread's CPU time and the median of a sample of timings.
 */
#ifndef KB_BENCH_CPU_TIME_H
#define KB_BENCH_CPU_TIME_H

#include <stdlib.h>
#include <time.h>

/* CPU seconds of this thread: less disturbed than wall time by other processes on a
 * shared machine (run with OPENBLAS_NUM_THREADS=1 so that BLAS stays on this thread). */
static inline double cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static inline int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The median of v[0..n) (the upper one for even n); sorts v. */
static inline double median(double *v, size_t n)
{
    qsort(v, n, sizeof *v, cmp_double);
    return v[n / 2];
}

#endif
