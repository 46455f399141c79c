/*
 * http.h - the HTTP layer of kbanditd over libmicrohttpd: the route table type, the
 * per-request context handlers work with, replies, and long-poll suspension.
 *
 * A handler is called once per request, after the whole body arrived (or again after a
 * suspended request is resumed). It must answer with exactly one reply_* call or
 * suspend the request with rq_suspend, and return the reply's result.
 */
#ifndef KB_HTTP_H
#define KB_HTTP_H

#include "../proto/proto.h"

#include <stdint.h>

typedef struct request request;

typedef enum body_kind {
    BODY_NONE = 0,      /* a body is ignored */
    BODY_JSON,          /* application/json object required */
    BODY_JSON_OPTIONAL, /* empty, or an application/json object */
    BODY_JSON_OR_CSV,   /* application/json or text/csv */
} body_kind;

typedef int (*handler_fn)(request *rq);

typedef struct route {
    const char *method;
    const char *pattern; /* "{name}" segments (openapi.yaml's names) match positive
                          * integers; the pattern is the route's label in /metrics */
    handler_fn fn;
    body_kind body;
    int open;            /* 1: no authentication (healthz, metrics) */
} route;

/* Defined by handlers.c. */
extern const route kb_routes[];
extern const size_t kb_n_routes;

typedef struct http_config {
    int listen_fd;          /* bound, listening socket (taken) */
    unsigned threads;
    const char *token;      /* NULL: no authentication */
    size_t max_body;
    size_t max_body_memory; /* the body budget (bodymem.h); 0: none */
    /* Connection limits (issue 16 item 4): beyond them a new connection is closed at
     * once; a connection silent for idle_timeout_s (headers included: slowloris) is
     * closed (keep-alive workers reconnect; a long-poll's wait_ms is far below it); one
     * whose request headers are not complete header_timeout_s after the request began
     * is closed, however slowly it sends (conn_guard.c). */
    unsigned max_connections, max_connections_per_ip, idle_timeout_s, header_timeout_s;
} http_config;

/* Starts serving; 0, or -1 with why (why_len bytes) saying what failed: libmicrohttpd's
 * own message when it refused to start, or which of our threads could not be made. */
int http_start(const http_config *cfg, char *why, size_t why_len);
/* Stop accepting, answer 503 to new requests, resume every long-poll. */
void http_quiesce(void);
/* Finish in-flight requests and stop the threads. */
void http_stop(void);
/* Resumes the long-polls waiting on a study (registry on_feedback hook). */
void http_wake_study(int64_t study_id);
/* The store's batch hook: resumes the connections whose answer waited for a commit with
 * a ticket <= done and its fsync, or whose commit failed (answered with a 503 at once). */
void http_commits_done(uint64_t done, uint64_t synced);

/* ---------------------------------------------------------- handler API */

int64_t rq_id(const request *rq, int i);          /* i-th {name} id of the path */
const char *rq_arg(request *rq, const char *key); /* query argument or NULL */
/* How many times key is in the query (with a value or without: "?limit&limit=5"). */
int rq_arg_times(request *rq, const char *key);
const char *rq_body(const request *rq, size_t *len);
/* Parsed JSON body (borrowed; NULL for an empty optional body). */
json_t *rq_json(const request *rq);
int rq_is_csv(const request *rq);
/* Handler state kept across suspensions, freed with free_fn at completion. */
void *rq_state(const request *rq);
void rq_set_state(request *rq, void *state, void (*free_fn)(void *));

/* Replies take ownership of body / text. */
int reply_json(request *rq, int status, json_t *body);
int reply_json_retry(request *rq, int status, json_t *body, int retry_after_s);
int reply_error(request *rq, const api_error *err);
int reply_text(request *rq, int status, const char *content_type, char *text, size_t len);
int reply_empty(request *rq, int status);
/* Suspends until the study's version moves past `version` or deadline_ms (wall clock)
 * passes; the handler is then called again. Returns 1 without suspending when the
 * version already moved (call again now), 0 when suspended. */
int rq_suspend(request *rq, int64_t study_id, uint64_t version, int64_t deadline_ms,
               uint64_t (*current)(void *), void *ctx);

#endif /* KB_HTTP_H */
