/*
 * fuzz_http.c - libFuzzer target for whole HTTP requests against the in-process daemon
 * (daemon.h): libmicrohttpd's parsing, framing checks, routing, authentication, the body
 * accumulator and every handler with its study operations on a real store.
 *
 * Input: "METHOD TARGET\n" then header lines ("Name: value\n") up to an empty line, then
 * the body. The harness writes HTTP/1.1 with CRLFs and adds Host, Connection: close and
 * the bearer token (unless the input has an Authorization header). The body is framed by
 * the harness's own Content-Length, and the input's Content-Length and Transfer-Encoding
 * headers are dropped, unless the daemon must refuse the head at once (several of
 * either, both, a coding other than chunked, a NUL in a header line or a folded line):
 * a body shorter than its declared
 * length is only ever answered by closing the connection, which MHD 0.9.75 does late
 * after a half-close (when its thread next wakes), and the fuzzer would wait for that.
 * Every answer must pass fuzz_check_reply; a crash, leak, UB or hang anywhere in the
 * daemon aborts.
 */
#include "daemon.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* Length of the line at s (up to '\n' or end, a '\r' before it excluded: the harness
 * writes the CRLFs); *next gets where the next one starts. */
static size_t line_at(const char *s, const char *end, const char **next)
{
    const char *nl = memchr(s, '\n', (size_t)(end - s)), *e = nl ? nl : end;
    *next = nl ? nl + 1 : end;
    return (size_t)(e - s) - (e > s && e[-1] == '\r');
}

static int has_header(const char *h, size_t n, const char *name)
{
    size_t k = strlen(name);
    return n > k && strncasecmp(h, name, k) == 0 && h[k] == ':';
}

/* Whether the daemon refuses the request on the header lines in [p, end) (up to an empty
 * line), before reading a body: a NUL in a line (libmicrohttpd or the daemon refuses it,
 * docs/TESTING.md finding 11), a folded line (the harness writes it after its own
 * Connection: close), or framing it does not trust. */
static int refused_head(const char *p, const char *end)
{
    int lengths = 0, codings = 0, chunked = 1;
    const char *next;
    for (size_t n; p < end && (n = line_at(p, end, &next)) > 0; p = next) {
        if (memchr(p, 0, n) || *p == ' ' || *p == '\t')
            return 1;
        lengths += has_header(p, n, "Content-Length");
        if (has_header(p, n, "Transfer-Encoding")) {
            const char *v = p + 18;
            size_t vn = n - 18;
            while (vn && *v == ' ')
                v++, vn--;
            codings++;
            chunked &= vn == 7 && strncasecmp(v, "chunked", 7) == 0;
        }
    }
    return lengths > 1 || codings > 1 || (codings && (lengths || !chunked));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *p = (const char *)data, *end = p + size, *next;
    char *req = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&req, &len);
    size_t n = line_at(p, end, &next);
    fwrite(p, 1, n, f);
    fputs(" HTTP/1.1\r\nHost: fuzz\r\nConnection: close\r\n", f);
    int auth = 0, framed = refused_head(next, end);
    for (p = next; p < end && (n = line_at(p, end, &next)) > 0; p = next) {
        auth |= has_header(p, n, "Authorization");
        if (!framed && (has_header(p, n, "Content-Length") || has_header(p, n, "Transfer-Encoding")))
            continue;
        fwrite(p, 1, n, f);
        fputs("\r\n", f);
    }
    p = p < end ? next : end; /* the body follows the empty line */
    if (!auth)
        fputs("Authorization: Bearer " FUZZ_TOKEN "\r\n", f);
    if (!framed)
        fprintf(f, "Content-Length: %zu\r\n", (size_t)(end - p));
    fputs("\r\n", f);
    fwrite(p, 1, (size_t)(end - p), f);
    fclose(f);
    fuzz_reply r;
    fuzz_exchange(req, len, &r);
    fuzz_check_reply(&r);
    free(r.text);
    free(req);
    return 0;
}
