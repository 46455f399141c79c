/*
 * blas.h - OpenBLAS as the daemon runs it: single-threaded, with kernels fit for the CPU
 * whichever way the daemon was started (make run, build/kbanditd, Docker, systemd).
 *
 * OpenBLAS chooses its kernel family once, when the library is loaded (before main),
 * from OPENBLAS_CORETYPE or its CPU model table; on CPU models it does not know (virtual
 * CPUs such as "Intel Xeon Processor") Debian's build falls back to SSE3 "Prescott"
 * kernels, several times slower. So the choice can only be changed by executing the
 * daemon again with the variable set.
 */
#ifndef KB_BLAS_H
#define KB_BLAS_H

/* When OPENBLAS_CORETYPE is unset and OpenBLAS chose kernels without AVX2 on a CPU that
 * has AVX2 and FMA, sets OPENBLAS_CORETYPE=Haswell and executes /proc/self/exe again
 * with argv (same pid; the variable being set, the new image does not do it again).
 * Returns when nothing is to be done, or when the exec failed (logged). Call it first,
 * before any thread or file is opened. */
void blas_choose_core(char **argv);

/* The rule alone: the family to force given the CPU's flags (the "flags" line of
 * /proc/cpuinfo) and OpenBLAS's own choice, or NULL to keep that choice. */
const char *blas_core_wanted(const char *cpu_flags, const char *detected);

/* Makes BLAS calls single-threaded: engines run concurrently, one per study, and their
 * results must not depend on a thread count. */
void blas_single_thread(void);

/* The kernel family OpenBLAS uses ("Haswell", "Prescott", ...). */
const char *blas_core(void);

#endif /* KB_BLAS_H */
