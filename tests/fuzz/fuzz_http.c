/*
 * fuzz_http.c - libFuzzer target for whole HTTP requests against the in-process daemon
 * (daemon.h): libmicrohttpd's parsing, framing checks, routing, authentication, the body
 * accumulator and every handler with its study operations on a real store.
 *
 * Input: "METHOD TARGET\n" then header lines ("Name: value\n") up to an empty line, then
 * the body. The harness writes HTTP/1.1 with CRLFs and adds Host, Connection: close, the
 * bearer token (unless the input has an Authorization header) and the body's
 * Content-Length (unless the input frames the body itself with Content-Length or
 * Transfer-Encoding), so the fuzzer spends its time on content, not on framing the
 * daemon would just wait for. Every answer must pass fuzz_check_reply; a crash, leak,
 * UB or hang anywhere in the daemon aborts.
 */
#include "daemon.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* Length of the line at s (up to '\n' or end); *next gets where the next one starts. */
static size_t line_at(const char *s, const char *end, const char **next)
{
    const char *nl = memchr(s, '\n', (size_t)(end - s));
    *next = nl ? nl + 1 : end;
    return (size_t)((nl ? nl : end) - s);
}

static int has_header(const char *h, size_t n, const char *name)
{
    size_t k = strlen(name);
    return n > k && strncasecmp(h, name, k) == 0 && h[k] == ':';
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
    int auth = 0, framed = 0;
    for (p = next; p < end && (n = line_at(p, end, &next)) > 0; p = next) {
        auth |= has_header(p, n, "Authorization");
        framed |= has_header(p, n, "Content-Length") || has_header(p, n, "Transfer-Encoding");
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
