/*
 * numfmt_cost.c - kb-numfmt-cost: what printing a real costs (proto/numfmt.c), against
 * what it replaced, printf's first of %.15g / %.16g / %.17g that strtod reads back.
 *   kb-numfmt-cost [N]      N values (default 1,000,000): a quarter typed decimals
 *                           (k / 1000), the rest uniform in [0, 1) like box coordinates
 * Prints one JSON line: ns per value for each, after checking that both print the same.
 */
#include "../../proto/numfmt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double ns_per_value(const char *(*fmt)(char *, double), const double *v, size_t n,
                           size_t *sink)
{
    char buf[KB_DOUBLE_BUF];
    struct timespec t0, t1;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t0);
    for (size_t i = 0; i < n; i++)
        *sink += (size_t)fmt(buf, v[i])[1];
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t1);
    return ((double)(t1.tv_sec - t0.tv_sec) * 1e9 + (double)(t1.tv_nsec - t0.tv_nsec)) /
           (double)n;
}

int main(int argc, char **argv)
{
    size_t n = argc > 1 ? strtoul(argv[1], NULL, 10) : 1000000, sink = 0;
    double *v = malloc((n ? n : 1) * sizeof *v);
    if (!v || n == 0)
        return 1;
    unsigned seed = 1;
    for (size_t i = 0; i < n; i++)
        v[i] = i % 4 == 0 ? (double)(rand_r(&seed) % 1000) / 1000.0
                          : (double)rand_r(&seed) / ((double)RAND_MAX + 1.0);
    for (size_t i = 0; i < n; i++) {
        char a[KB_DOUBLE_BUF], b[KB_DOUBLE_BUF];
        if (strcmp(kb_format_double(a, v[i]), kb_format_double_printf(b, v[i])) != 0) {
            fprintf(stderr, "kb-numfmt-cost: %a prints %s, printf %s\n", v[i], a, b);
            return 1;
        }
    }
    double old_ns = ns_per_value(kb_format_double_printf, v, n, &sink);
    double new_ns = ns_per_value(kb_format_double, v, n, &sink);
    printf("{\"bench\":\"numfmt\",\"values\":%zu,\"three_printf_ns\":%.0f,"
           "\"kb_format_double_ns\":%.0f,\"sink\":%zu}\n", n, old_ns, new_ns, sink % 10);
    free(v);
    return 0;
}
