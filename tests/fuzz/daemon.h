/*
 * daemon.h - the in-process kbanditd that the HTTP-level fuzz targets (fuzz_http,
 * fuzz_url) talk to: the real store (a temporary database), registry, route table and
 * handlers behind libmicrohttpd on a loopback port, and the checks every answer must pass.
 *
 * Invariant: the daemon is started once per process (on the first exchange) with a
 * bearer token and three seeded studies (ids 1 to 3, each with a pending trial), and it
 * keeps the state fuzz inputs leave behind (studies created, trials told, deletions), as
 * a long-running daemon would.
 */
#ifndef KB_FUZZ_DAEMON_H
#define KB_FUZZ_DAEMON_H

#include <stddef.h>

#define FUZZ_TOKEN "fuzz-token-0123456789abcdef"

typedef struct fuzz_reply {
    int status;        /* 0: the connection closed without a status line */
    int head;          /* the request was a HEAD: no body expected */
    const char *ctype; /* Content-Type value (NUL-terminated in text), or NULL */
    const char *body;  /* into text, body_len bytes */
    size_t body_len;
    char *text;        /* the whole answer, NUL-terminated; free() it */
} fuzz_reply;

/* Sends the raw request bytes on a new connection, half-closes it and reads the answer
 * until it is complete or the daemon closes. Aborts when no answer ends within 8 s (a hang: the daemon's idle
 * timeout, 60 s, would only close the connection later). */
void fuzz_exchange(const char *req, size_t len, fuzz_reply *out);

/* Aborts unless the answer is well formed: a status line; a 5xx answer, and every
 * answer our handlers send with application/json, carrying a JSON document, errors
 * (>= 400) in the documented {"error":{"code","message","field"}} shape. */
void fuzz_check_reply(const fuzz_reply *r);

#endif
