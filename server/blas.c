/*
 * blas.c - This file contains the daemon's OpenBLAS set-up (see blas.h): the choice of
 * the kernel family at start-up, by executing itself again, and the thread count.
 *
 * Invariants: the daemon executes itself at most once (it does so only while
 * OPENBLAS_CORETYPE is unset, and sets it first); a family the user set, or one OpenBLAS
 * chose that has AVX2 kernels (Haswell, Zen, SkylakeX, Cooperlake, ...), is never
 * replaced. (scripts/openblas-coretype, which make exports for the tests and benchmarks,
 * cannot see OpenBLAS's choice and forces Haswell on every AVX2 + FMA CPU; on the CPUs
 * OpenBLAS does not know, both end with the Haswell kernels.)
 */
#include "blas.h"

#include "log.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

/* OpenBLAS has no portable header declaration of these. */
extern void openblas_set_num_threads(int num_threads);
extern char *openblas_get_corename(void);

void blas_single_thread(void) { openblas_set_num_threads(1); }

const char *blas_core(void) { return openblas_get_corename(); }

/* Whether the space-separated list has the word. */
static int has_word(const char *list, const char *word)
{
    size_t n = strlen(word);
    for (const char *p = list; (p = strstr(p, word)); p += n)
        if ((p == list || p[-1] == ' ' || p[-1] == '\t' || p[-1] == ':') &&
            (p[n] == 0 || p[n] == ' ' || p[n] == '\t' || p[n] == '\n'))
            return 1;
    return 0;
}

const char *blas_core_wanted(const char *cpu_flags, const char *detected)
{
    /* OpenBLAS families without AVX2 kernels, among those it falls back to. */
    static const char *const without_avx2[] = {
        "Prescott", "Core2", "Penryn", "Dunnington", "Nehalem", "Sandybridge", "Atom",
        "Nano", "Barcelona", "Bobcat", "Bulldozer", "Piledriver", "Steamroller",
        "Unknown", NULL};
    if (!cpu_flags || !detected || !has_word(cpu_flags, "avx2") || !has_word(cpu_flags, "fma"))
        return NULL;
    for (size_t i = 0; without_avx2[i]; i++)
        if (strcasecmp(detected, without_avx2[i]) == 0)
            return "Haswell";
    return NULL;
}

/* The "flags" line of /proc/cpuinfo (first CPU), or "" when unreadable. */
static void cpu_flags(char *buf, size_t size)
{
    FILE *f = fopen("/proc/cpuinfo", "r");
    buf[0] = 0;
    if (!f)
        return;
    while (fgets(buf, (int)size, f))
        if (strncmp(buf, "flags", 5) == 0)
            break;
    if (strncmp(buf, "flags", 5) != 0)
        buf[0] = 0;
    fclose(f);
}

void blas_choose_core(char **argv)
{
    const char *set = getenv("OPENBLAS_CORETYPE");
    if (set && *set)
        return;
    char flags[8192]; /* the flags line is about 1.5 kB today */
    cpu_flags(flags, sizeof flags);
    const char *detected = openblas_get_corename();
    const char *want = blas_core_wanted(flags, detected);
    if (!want)
        return;
    log_json(LOG_INFO, "executing again with OPENBLAS_CORETYPE set",
             json_pack("{s:s,s:s}", "detected", detected, "coretype", want));
    if (setenv("OPENBLAS_CORETYPE", want, 1) == 0)
        execv("/proc/self/exe", argv);
    int e = errno;
    unsetenv("OPENBLAS_CORETYPE"); /* it would claim kernels this process does not run */
    log_json(LOG_WARN, "cannot execute again: OpenBLAS keeps its own kernels",
             json_pack("{s:s,s:s}", "blas_core", detected, "reason", strerror(e)));
}
