/*
 * bodymem.h - the memory budget of request bodies (--max-body-memory): bytes held by the
 * bodies being read and by the JSON parsed from them, over all requests at once.
 *
 * Without it, each connection could buffer a body of --max-body-bytes and each request
 * worker parse one at about 24 times its size: 16 clients sending 50 MB of observations
 * at once took the daemon to 6 GB (fifty-eighth session), and a thousand connections
 * could take 64 GB. A request whose body would take memory while the budget is spent
 * is answered 503 with Retry-After (the Python client retries it), its body discarded.
 *
 * A reservation is granted while the bytes the other requests hold are below the budget,
 * whatever its size, so a body larger than the budget still goes through when it comes
 * alone: the bytes held stay below the budget plus one request's. Lock-free (one atomic
 * counter).
 */
#ifndef KB_BODYMEM_H
#define KB_BODYMEM_H

#include <stddef.h>

/* Bytes of jansson's objects per byte of JSON text, an estimate: a 50 MB array of
 * observations peaked at about 13 times its size, an array of one-digit numbers takes
 * about 28 (a 32-byte json_t, malloc's header and an array slot per two bytes). */
#define BODYMEM_JSON_FACTOR 24

/* 0: no budget. Called once, before the HTTP threads start. */
void bodymem_init(size_t budget);
/* 0: the bytes are reserved for a request that holds `own` already (give them back with
 * bodymem_give); -1: the other requests spent the budget, nothing reserved. */
int bodymem_take(size_t bytes, size_t own);
void bodymem_give(size_t bytes);
/* A request answered 503 for want of the budget (counted for bodymem_refused). */
void bodymem_note_refusal(void);
/* For /metrics: bytes reserved now, and requests refused since start. */
size_t bodymem_held(void);
unsigned long long bodymem_refused(void);
size_t bodymem_budget(void);

#endif /* KB_BODYMEM_H */
