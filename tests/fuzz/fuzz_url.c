/*
 * fuzz_url.c - libFuzzer target for request targets (path ids and query strings) against
 * the in-process daemon (daemon.h): percent-decoding, route matching, {id} parsing and
 * the handlers' query arguments (limit, cursor, state, format, name).
 *
 * Input: one byte choosing the method, then the target ("/v1/studies/1/trials?limit=5").
 * Besides the checks of every answer (fuzz_check_reply), a 2xx answer must come from a
 * target that an independent strict reading accepts (issue 16 item 8: a number is the
 * whole field or 400): every {id} is 1 to 18 digits, every numeric argument is digits
 * only and within the route's range, the enumerated ones are spelled exactly, and no
 * decoded NUL anywhere, and each argument the route reads is given at most once, with a
 * value. Arguments are decoded as the daemon decodes them: '+' is a space, %XX is decoded
 * except %00.
 */
#include "daemon.h"
#include "../../server/http.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct int_arg {
    const char *pattern, *key;
    unsigned long long min, max;
} int_arg;

static const int_arg int_args[] = {
    {"/v1/studies", "limit", 1, 1000},
    {"/v1/studies", "cursor", 0, INT64_MAX},
    {"/v1/studies/{study_id}/trials", "limit", 1, 10000},
    {"/v1/studies/{study_id}/trials", "cursor", 0, INT64_MAX},
};

static int hex(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                         : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* Decodes s[0..n) into out (NUL-terminated; n + 1 bytes); '+' is a space when plus. */
static void decode(const char *s, size_t n, int plus, char *out)
{
    size_t w = 0;
    for (size_t i = 0; i < n; i++) {
        int hi = s[i] == '%' && i + 2 < n ? hex(s[i + 1]) : -1;
        int lo = hi >= 0 ? hex(s[i + 2]) : -1;
        if (lo >= 0 && (hi | lo)) {
            out[w++] = (char)(hi * 16 + lo);
            i += 2;
        } else {
            out[w++] = plus && s[i] == '+' ? ' ' : s[i];
        }
    }
    out[w] = 0;
}

/* Whether the decoded path matches pattern, every {name} id being 1 to 18 digits. */
static int path_matches(const char *pattern, const char *path)
{
    while (*pattern) {
        if (*pattern == '{') {
            size_t d = strspn(path, "0123456789");
            if (d == 0 || d > 18)
                return 0;
            pattern = strchr(pattern, '}') + 1;
            path += d;
        } else if (*pattern++ != *path++) {
            return 0;
        }
    }
    return *path == 0;
}

/* The decoded value of the `key` argument of query[0..n) into out (NULL when absent);
 * -1 when it is given twice or without a value. */
static int arg_of(const char *query, size_t n, const char *key, char *out, const char **v)
{
    int times = 0;
    *v = NULL;
    for (const char *p = query, *end = query + n; p < end;) {
        const char *amp = memchr(p, '&', (size_t)(end - p)), *stop = amp ? amp : end;
        const char *eq = memchr(p, '=', (size_t)(stop - p));
        decode(p, (size_t)((eq ? eq : stop) - p), 1, out);
        if (strcmp(out, key) == 0) {
            if (++times > 1 || !eq)
                return -1;
            decode(eq + 1, (size_t)(stop - eq - 1), 1, out + n + 1);
            *v = out + n + 1;
        }
        p = stop + 1;
    }
    return 0;
}

/* Whether v is digits only (leading zeros allowed) for a value in [min, max]. */
static int digits_in(const char *v, unsigned long long min, unsigned long long max)
{
    size_t d = strspn(v, "0123456789"), z = strspn(v, "0");
    if (d == 0 || v[d] || d - z > 19)
        return 0;
    unsigned long long x = strtoull(v, NULL, 10);
    return x >= min && x <= max;
}

static int one_of(const char *v, const char *const *words)
{
    for (; *words; words++)
        if (strcmp(v, *words) == 0)
            return 1;
    return 0;
}

/* Whether the strict reading accepts the target for the route of this pattern. */
static int strict_ok(const char *pattern, const char *query, size_t qn, char *buf)
{
    static const char *const states[] = {"pending", "completed", "failed", "expired", NULL};
    static const char *const formats[] = {"json", "csv", NULL};
    const char *v;
    for (size_t i = 0; i < sizeof int_args / sizeof int_args[0]; i++)
        if (strcmp(int_args[i].pattern, pattern) == 0 &&
            (arg_of(query, qn, int_args[i].key, buf, &v) ||
             (v && !digits_in(v, int_args[i].min, int_args[i].max))))
            return 0;
    if (strcmp(pattern, "/v1/studies/{study_id}/trials") == 0 &&
        (arg_of(query, qn, "state", buf, &v) || (v && !one_of(v, states))))
        return 0;
    if (strcmp(pattern, "/v1/studies/{study_id}/export") == 0 &&
        (arg_of(query, qn, "format", buf, &v) || (v && !one_of(v, formats))))
        return 0;
    if (strcmp(pattern, "/v1/studies") == 0 &&
        (arg_of(query, qn, "name", buf, &v) || (v && (!*v || strlen(v) > 200))))
        return 0;
    return 1;
}

/* The pattern of the route the decoded path matches for this method, or NULL. */
static const char *route_pattern(const char *method, const char *path)
{
    int head = strcmp(method, "HEAD") == 0;
    for (size_t i = 0; i < kb_n_routes; i++)
        if ((strcmp(kb_routes[i].method, method) == 0 ||
             (head && strcmp(kb_routes[i].method, "GET") == 0)) &&
            path_matches(kb_routes[i].pattern, path))
            return kb_routes[i].pattern;
    return NULL;
}

static void check_strict(const char *method, const char *target, size_t n, int status)
{
    if (status < 200 || status > 299)
        return;
    const char *q = memchr(target, '?', n);
    size_t pn = q ? (size_t)(q - target) : n, qn = q ? n - pn - 1 : 0;
    char *buf = malloc(2 * (n + 1)); /* a decoded key, then a decoded value */
    decode(target, pn, 0, buf);
    const char *pattern = route_pattern(method, buf);
    if (!pattern || !strict_ok(pattern, q ? q + 1 : "", qn, buf)) {
        fprintf(stderr, "fuzz_url: %s %.*s answered %d\n", method, (int)n, target, status);
        abort();
    }
    free(buf);
}

/* Whether every byte is visible ASCII (no space, control or NUL). */
static int visible(const uint8_t *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (s[i] <= ' ' || s[i] >= 0x7f)
            return 0;
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char *const methods[] = {"GET", "HEAD", "POST", "DELETE"};
    if (size < 2 || data[1] != '/' || !visible(data + 1, size - 1))
        return 0; /* not a request target: MHD's request-line parsing is fuzz_http's */
    const char *method = methods[data[0] % 4], *target = (const char *)data + 1;
    size_t n = size - 1;
    char *req = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&req, &len);
    fprintf(f, "%s %.*s HTTP/1.1\r\nHost: fuzz\r\nConnection: close\r\nAuthorization: Bearer "
               FUZZ_TOKEN "\r\nContent-Length: 0\r\n\r\n", method, (int)n, target);
    fclose(f);
    fuzz_reply r;
    fuzz_exchange(req, len, &r);
    fuzz_check_reply(&r);
    check_strict(method, target, n, r.status);
    free(r.text);
    free(req);
    return 0;
}
