/*
 * http.c - This file contains the libmicrohttpd glue: the daemon (internal thread pool,
 * epoll, suspend/resume), routing through the table in handlers.c, authentication, the
 * body accumulator, replies, per-request metrics and the long-poll wait list.
 *
 * Request lifecycle: the request context is created by the URI callback (on_uri, which
 * also refuses long or NUL-holding targets and oversized queries before MHD stores
 * them); the access handler is called once for the headers (we route, authenticate and
 * check the declared size, answering errors at once), once per body chunk (accumulated
 * up to max_body, within the body budget of bodymem.h) and once at the end, when the
 * route's handler runs: an open route's (probes) there, an authenticated route's body
 * checks and handler on a request worker (workpool.h; offload, run_job), the connection
 * suspended until its answer is kept and sent by on_access (send_answered). The request
 * context is freed in the completion callback, or, when libmicrohttpd closes the
 * connection without calling it, by the connection guard (conn_guard_hold).
 *
 * Long-polls (ask with wait_ms): instead of blocking a pool thread, which would stall
 * every other connection served by that thread, the handler suspends the connection
 * (MHD_suspend_connection) in the wait list. A study's feedback (tell, fail, expiry,
 * delete) resumes its waiters; a timer thread resumes those whose deadline passed; the
 * resumed handler simply asks again. The wait list is protected by waits.lock; see
 * rq_suspend for why no wake-up can be lost.
 *
 * Commit waits: a study call's answer may depend on a commit still in flight (group
 * commit, see study.h). Handlers run with the wait deferred (study_defer_begin), and the
 * reply layer (queue) does not send such an answer at once: it keeps the response,
 * suspends the connection in the commit list, and the store's batch hook
 * (http_commits_done, from the writer and syncer threads) resumes it when its batch
 * ended and, if the answer needs it, the fsync covering it is done; then the kept
 * response is sent, or a 500 if the commit failed. So no pool thread blocks on a commit
 * or an fsync, and a few threads serve any number of clients whose requests share them.
 */
#include "http.h"

#include "bodymem.h"
#include "conn_guard.h"
#include "log.h"
#include "metrics.h"
#include "mhd_errors.h"
#include "ratelimit.h"
#include "../proto/numfmt.h"
#include "study.h"
#include "workpool.h"

#include <malloc.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#define MAX_IDS 2
#define BODY_TRIM_BYTES (1u << 20) /* body_release */
/* Per-connection memory of MHD (headers, read and write buffers). MHD zeroes the pool
 * for every request on a kept-alive connection, so its size is paid per request: the
 * default 32 KiB cost more CPU than the rest of an ask. Bodies are streamed in chunks
 * and need no room here; 8 KiB leaves several KiB of request headers. */
#define CONN_MEMORY (8 * 1024)
/* Query arguments a request may carry, and bytes of its query (no route reads more than
 * four arguments; a 200-byte name filter takes 600 bytes percent-encoded). MHD stores
 * each argument in the connection's pool before any handler of ours runs: a few hundred
 * ("?&&&...") or one of about 8,000 bytes filled the pool, and MHD 0.9.75 then neither
 * answered nor closed the connection until the idle timeout (found by fuzz_url). See
 * on_uri. */
#define MAX_QUERY_ARGS 16
#define MAX_QUERY_BYTES 2048
/* A request target (path and query, KB_MAX_TARGET_BYTES in mhd_errors.h) longer than
 * this gets a 414 (on_uri, on_headers): no route needs more than its 2 KiB query and
 * a short path, and a capped line leaves room in CONN_MEMORY for the headers and the
 * answer. */
#define MAX_TARGET_BYTES KB_MAX_TARGET_BYTES
/* A request whose head (line, headers, libmicrohttpd's records of them) leaves less than
 * ANSWER_ROOM bytes of the connection's memory gets a 431 (on_headers): libmicrohttpd
 * builds an answer's header lines (at most ~260 bytes for ours) in that memory, and when
 * they do not fit it closes the connection without a byte; it has a retry for its own
 * error answers only. Heads from about 7,870 bytes to the ~8,100 where libmicrohttpd
 * answers 431 / 414 itself got no answer at all. A record costs HEAD_RECORD at most
 * (a struct of 7 words, allocated 16-byte aligned). */
#define ANSWER_ROOM 384
#define HEAD_RECORD 64
#define STRINGIFY(x) #x
#define DECIMAL(x) STRINGIFY(x)

struct request {
    struct MHD_Connection *conn;
    int route;               /* index in kb_routes, -1 before routing */
    int64_t ids[MAX_IDS];
    char *body;
    size_t len, cap;
    size_t reserved;         /* bytes of the body budget this request holds (bodymem.h) */
    int too_large, over_budget, csv, ready;
    const char *target_refused; /* why on_uri refused the target (answered 400, or 414
                                 * when it is too long; its query emptied), or NULL */
    const char *target;      /* the raw request target in MHD's read buffer (on_uri; read
                              * by on_headers only, while MHD holds the request line) */
    size_t target_len;       /* its bytes as MHD holds them, NULs included */
    json_t *json;
    int status;              /* of the reply, for metrics */
    double t0;
    void *state;
    void (*state_free)(void *);
    /* commit wait (commits.lock), or a worker's answer (answered): the kept answer */
    struct MHD_Response *kept;
    int kept_status;
    int answered;            /* a worker's job ended: send kept (NULL: a 500), or close the
                              * connection when job_rc is MHD_NO and nothing was kept */
    int job_rc;
    wp_job job;              /* queued for the request workers (run_job) */
    study_pending pending;
    struct request *commit_next;
    /* wait list (waits.lock) */
    int waiting;
    int64_t wait_study, wait_deadline;
    struct request *wait_next;
};

static struct {
    struct MHD_Daemon *d;
    http_config cfg;
    atomic_int quiescing; /* set once by http_quiesce; read by MHD's threads */
} srv;

static struct {
    pthread_mutex_t lock; /* protects head, stop */
    pthread_cond_t cv;    /* signals the timer thread: new waiter or stop */
    request *head;
    int stop;
    pthread_t timer;
} waits = {.lock = PTHREAD_MUTEX_INITIALIZER};

static struct {
    pthread_mutex_t lock; /* protects head, stopping */
    request *head;        /* connections suspended until their commit ended */
    int stopping;         /* http_stop began: answers wait for their commit in place */
} commits = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* The request workers (workpool.h): a thread that runs a handler for a connection
 * libmicrohttpd suspended may not queue answers or suspend it again. Its answer is kept
 * in the request and the connection resumed (run_job), unless the handler parked the
 * connection in the commit or wait list, whose wakers resume it. */
static _Thread_local __attribute__((tls_model("initial-exec"))) struct {
    int on;     /* this thread is a request worker */
    int parked; /* the current job's connection went to the commit or wait list */
} worker;

/* ------------------------------------------------------------ replies */

static int queue_error(request *rq, const api_error *err);
static int reply_code(request *rq, api_code code, const char *fmt, const char *arg);

/* A log line's fields naming the request: method and route (absent for an unrouted
 * request), and "id" / "id2", the path's ids, only for routes that have them (they were
 * printed for every route, uninitialized where the route had none). NULL on OOM, which
 * log_json takes as no fields. */
static json_t *route_fields(const request *rq)
{
    json_t *f = json_object();
    if (!f || rq->route < 0)
        return f;
    const route *r = &kb_routes[rq->route];
    json_object_set_new(f, "method", json_string(r->method));
    json_object_set_new(f, "route", json_string(r->pattern));
    const char *p = r->pattern;
    for (int i = 0; i < MAX_IDS && (p = strchr(p, '{')); i++, p++)
        json_object_set_new(f, i ? "id2" : "id", json_integer((json_int_t)rq->ids[i]));
    return f;
}

/* The answer sent when an answer cannot be allocated: made by http_start and shared by
 * reference (MHD counts them), so that sending it allocates nothing. */
static const char oom_body[] =
    "{\"error\":{\"code\":\"internal\",\"message\":\"out of memory\",\"field\":null}}";
static struct MHD_Response *oom_response;

/* Queues resp (NULL: its allocation failed) and drops the caller's reference; on a
 * request worker, keeps it for libmicrohttpd's thread (on_access). */
static int queue_now(request *rq, int status, struct MHD_Response *resp)
{
    if (worker.on) {
        rq->kept = resp;
        rq->kept_status = status;
        rq->answered = 1;
        return MHD_YES;
    }
    rq->status = resp ? status : 500;
    int rc = MHD_queue_response(rq->conn, (unsigned)rq->status, resp ? resp : oom_response);
    if (resp)
        MHD_destroy_response(resp);
    return rc;
}

/* Sends the kept answer once its commit ended, or a 500 if that commit failed. */
static int send_kept(request *rq, int status, struct MHD_Response *resp, study_pending *p)
{
    api_error err;
    if (study_pending_finish(p, &err) == 0)
        return queue_now(rq, status, resp);
    if (resp)
        MHD_destroy_response(resp);
    return queue_error(rq, &err);
}

/* The body, its JSON and their share of the body budget, freed once the request is
 * answered (queue) rather than when its connection is done with it: a client sending
 * its next large body as soon as it read the answer found the last one still held, and
 * got a 503 (review, fifty-eighth session). A long-poll keeps them (its handler runs
 * again when woken); it answers through here too. A JSON body is ~27 times its size as
 * jansson's objects, small blocks that stay in the heap once freed: one 60 MB body left
 * the daemon at 1.6 GB (ops review, fifty-seventh session). Past 1 MiB, the free pages
 * go back to the system. */
static void body_release(request *rq)
{
    json_decref(rq->json);
    rq->json = NULL;
    free(rq->body);
    rq->body = NULL;
    bodymem_give(rq->reserved);
    rq->reserved = 0;
    if (rq->cap > BODY_TRIM_BYTES)
        malloc_trim(0);
    rq->cap = 0;
}

/* Every answer goes through here: one that depends on a commit in flight is kept and
 * the connection suspended until the commit ended (see the top of this file). */
static int queue(request *rq, int status, struct MHD_Response *resp)
{
    body_release(rq);
    study_pending p;
    if (!study_defer_end(&p))
        return queue_now(rq, status, resp);
    pthread_mutex_lock(&commits.lock);
    /* checked under the lock: see http_commits_done. Once stopping, nothing may be
     * suspended any more (MHD_stop_daemon aborts on a suspended connection): a request
     * still arriving on a kept-alive connection blocks its thread until its commit ends. */
    if (commits.stopping || study_pending_ready(&p)) {
        pthread_mutex_unlock(&commits.lock);
        return send_kept(rq, status, resp, &p);
    }
    if (worker.on)
        worker.parked = 1;
    else
        MHD_suspend_connection(rq->conn);
    rq->kept = resp;
    rq->kept_status = status;
    rq->pending = p;
    rq->commit_next = commits.head;
    commits.head = rq;
    pthread_mutex_unlock(&commits.lock);
    return MHD_YES;
}

void http_commits_done(uint64_t done, uint64_t synced)
{
    pthread_mutex_lock(&commits.lock);
    for (request **p = &commits.head; *p;) {
        request *rq = *p;
        /* ready also when the commit failed: the answer is then an error, at once */
        if (rq->pending.ticket <= done && study_pending_ready(&rq->pending)) {
            *p = rq->commit_next;
            rq->commit_next = NULL;
            MHD_resume_connection(rq->conn);
        } else {
            p = &rq->commit_next;
        }
    }
    pthread_mutex_unlock(&commits.lock);
}

/* A resumed connection whose answer was kept: send it. */
static int resume_kept(request *rq)
{
    struct MHD_Response *resp = rq->kept;
    rq->kept = NULL;
    return send_kept(rq, rq->kept_status, resp, &rq->pending);
}

/* The daemon's answers are made with MHD_create_response_from_buffer_with_free_callback_cls
 * (free: the body is ours; NULL: a static body), never MHD_create_response_from_buffer,
 * which mhd_errors.c replaces for libmicrohttpd's own error answers. */
static struct MHD_Response *buffer_response(char *text, size_t len, const char *ctype)
{
    struct MHD_Response *r =
        MHD_create_response_from_buffer_with_free_callback_cls(len, text, free, text);
    if (!r) {
        free(text);
        return NULL;
    }
    /* a body without its Content-Type would be misread: no answer rather than that one */
    if (ctype && MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, ctype) != MHD_YES) {
        MHD_destroy_response(r); /* frees text */
        return NULL;
    }
    return r;
}

/* NULL when the text cannot be made whole: jansson's dump ignores a failed append in an
 * object key and goes on, so a failed allocation may leave invalid JSON. */
static struct MHD_Response *json_response(json_t *body)
{
    char *text = kb_json_dumps(body, JSON_COMPACT);
    json_decref(body);
    if (proto_json_alloc_take()) {
        free(text);
        return NULL;
    }
    return text ? buffer_response(text, strlen(text), "application/json") : NULL;
}

/* Whether body may lack parts (see proto_json_alloc_take): then it is dropped and a
 * 500 "out of memory" answered instead. */
static int reply_partial(request *rq, json_t *body, int *rc)
{
    if (!proto_json_alloc_take())
        return 0;
    json_decref(body);
    *rc = reply_code(rq, API_INTERNAL, "%s", "out of memory");
    return 1;
}

int reply_json(request *rq, int status, json_t *body)
{
    int rc;
    return reply_partial(rq, body, &rc) ? rc : queue(rq, status, json_response(body));
}

int reply_json_retry(request *rq, int status, json_t *body, int retry_after_s)
{
    int rc;
    if (reply_partial(rq, body, &rc))
        return rc;
    struct MHD_Response *r = json_response(body);
    if (r && retry_after_s > 0) {
        char v[16];
        snprintf(v, sizeof v, "%d", retry_after_s);
        MHD_add_response_header(r, MHD_HTTP_HEADER_RETRY_AFTER, v);
    }
    return queue(rq, status, r);
}

int reply_error(request *rq, const api_error *err)
{
    /* After a failed allocation of jansson's the error may be its consequence (a
     * renderer's NULL taken for "no completed trial yet") or not set at all: the
     * allocation is the cause to report. */
    api_error oom;
    if (proto_json_alloc_take()) {
        api_fail(&oom, API_INTERNAL, NULL, "out of memory");
        err = &oom;
    }
    return queue_error(rq, err);
}

static int queue_error(request *rq, const api_error *err)
{
    struct MHD_Response *r = json_response(api_error_json(err));
    if (r && err->code == API_UNAUTHORIZED)
        MHD_add_response_header(r, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
    if (r && err->code == API_UNAVAILABLE) {
        char v[16];
        snprintf(v, sizeof v, "%d", err->retry_after_s > 0 ? err->retry_after_s : 1);
        MHD_add_response_header(r, MHD_HTTP_HEADER_RETRY_AFTER, v);
    }
    if (err->code == API_INTERNAL) { /* with the route and ids, which the message may lack */
        json_t *f = route_fields(rq);
        json_object_set_new(f, "error", json_string(err->message));
        log_json(LOG_ERROR, "internal error", f);
    }
    return queue(rq, api_status(err->code), r);
}

int reply_text(request *rq, int status, const char *content_type, char *text, size_t len)
{
    return queue(rq, status, buffer_response(text, len, content_type));
}

int reply_empty(request *rq, int status)
{
    return queue(rq, status,
                 MHD_create_response_from_buffer_with_free_callback_cls(0, NULL, NULL, NULL));
}

static int reply_code(request *rq, api_code code, const char *fmt, const char *arg)
{
    api_error err;
    api_fail(&err, code, NULL, fmt, arg);
    return reply_error(rq, &err);
}

/* ------------------------------------------------------------ handler API */

int64_t rq_id(const request *rq, int i) { return rq->ids[i]; }

const char *rq_arg(request *rq, const char *key)
{
    return MHD_lookup_connection_value(rq->conn, MHD_GET_ARGUMENT_KIND, key);
}

static int values_times(struct MHD_Connection *c, enum MHD_ValueKind kind, const char *name);

int rq_arg_times(request *rq, const char *key)
{
    return values_times(rq->conn, MHD_GET_ARGUMENT_KIND, key);
}

const char *rq_body(const request *rq, size_t *len)
{
    *len = rq->len;
    return rq->body;
}

json_t *rq_json(const request *rq) { return rq->json; }
int rq_is_csv(const request *rq) { return rq->csv; }
void *rq_state(const request *rq) { return rq->state; }

void rq_set_state(request *rq, void *state, void (*free_fn)(void *))
{
    rq->state = state;
    rq->state_free = free_fn;
}

/* ------------------------------------------------------------ long-polls */

int rq_suspend(request *rq, int64_t study_id, uint64_t version, int64_t deadline_ms,
               uint64_t (*current)(void *), void *ctx)
{
    /* A waker bumps the version before taking waits.lock; we read it under the lock.
     * So either we see the new version here, or the waker finds us in the list. */
    pthread_mutex_lock(&waits.lock);
    if (atomic_load(&srv.quiescing) || waits.stop || current(ctx) != version) {
        pthread_mutex_unlock(&waits.lock);
        return 1;
    }
    if (worker.on)
        worker.parked = 1;
    else
        MHD_suspend_connection(rq->conn);
    rq->waiting = 1;
    rq->wait_study = study_id;
    rq->wait_deadline = deadline_ms;
    rq->wait_next = waits.head;
    waits.head = rq;
    pthread_cond_signal(&waits.cv);
    pthread_mutex_unlock(&waits.lock);
    return 0;
}

/* Resumes the waiters matching (all, or study_id, or deadline <= now); waits.lock held.
 * Returns the earliest deadline left (INT64_MAX when none). */
static int64_t resume_where(int all, int64_t study_id, int64_t now)
{
    int64_t next = INT64_MAX;
    for (request **p = &waits.head; *p;) {
        request *rq = *p;
        if (all || rq->wait_study == study_id || rq->wait_deadline <= now) {
            *p = rq->wait_next;
            rq->waiting = 0;
            MHD_resume_connection(rq->conn);
        } else {
            if (rq->wait_deadline < next)
                next = rq->wait_deadline;
            p = &rq->wait_next;
        }
    }
    return next;
}

void http_wake_study(int64_t study_id)
{
    pthread_mutex_lock(&waits.lock);
    resume_where(0, study_id, INT64_MIN);
    pthread_mutex_unlock(&waits.lock);
}

static void *timer_main(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&waits.lock);
    while (!waits.stop) {
        int64_t next = resume_where(0, INT64_MIN, now_ms());
        struct timespec ts;
        int64_t until = next == INT64_MAX ? now_ms() + 1000 : next;
        ts.tv_sec = (time_t)(until / 1000);
        ts.tv_nsec = (long)(until % 1000) * 1000000;
        pthread_cond_timedwait(&waits.cv, &waits.lock, &ts); /* CLOCK_REALTIME */
    }
    resume_where(1, 0, 0);
    pthread_mutex_unlock(&waits.lock);
    return NULL;
}

/* ------------------------------------------------------------ routing */

static int hex_digit(char c)
{
    return c >= '0' && c <= '9' ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* Percent-decoding of the path and query arguments in place (MHD_OPTION_UNESCAPE_CALLBACK),
 * except %00: MHD's own decoder turns it into a NUL that ends the C string, so that
 * /v1/studies/1%00/best was served as study 1 and cursor=5%00junk read as 5. Kept as the
 * three characters, it fails every route and every number check instead. */
static size_t unescape(void *cls, struct MHD_Connection *c, char *s)
{
    (void)cls;
    (void)c;
    char *w = s;
    for (const char *r = s; *r;) {
        int hi = r[0] == '%' ? hex_digit(r[1]) : -1, lo = hi >= 0 ? hex_digit(r[2]) : -1;
        if (lo >= 0 && (hi | lo) != 0) {
            *w++ = (char)(hi * 16 + lo);
            r += 3;
        } else {
            *w++ = *r++;
        }
    }
    *w = 0;
    return (size_t)(w - s);
}

/* Matches path against pattern; fills ids. 1 match, 0 no match. A "{name}" segment
 * (openapi.yaml's parameter name) matches an integer of 1 to 18 digits. */
static int match(const char *pattern, const char *path, int64_t *ids)
{
    int n = 0;
    while (*pattern && *path) {
        if (*pattern == '{') {
            const char *end = strchr(path, '/');
            size_t len = end ? (size_t)(end - path) : strlen(path);
            if (len == 0 || len > 18 || n >= MAX_IDS)
                return 0;
            int64_t v = 0;
            for (size_t i = 0; i < len; i++) {
                if (path[i] < '0' || path[i] > '9')
                    return 0;
                v = v * 10 + (path[i] - '0');
            }
            ids[n++] = v;
            pattern = strchr(pattern, '}') + 1;
            path += len;
            continue;
        }
        if (*pattern++ != *path++)
            return 0;
    }
    return *pattern == 0 && *path == 0;
}

/* The route of (method, path): its index, or -1 (404) / -2 (405, Allow in allow).
 * HEAD takes every GET route (RFC 9110 9.3.2: GET without the content); the handler
 * runs as for GET and MHD sends the status and headers, never the body. */
static int route_of(const char *method, const char *path, int64_t *ids, char *allow,
                    size_t allow_size)
{
    int path_found = 0;
    allow[0] = 0;
    for (size_t i = 0; i < kb_n_routes; i++) {
        int64_t tmp[MAX_IDS] = {0};
        if (!match(kb_routes[i].pattern, path, tmp))
            continue;
        int get = strcmp(kb_routes[i].method, "GET") == 0;
        if (strcmp(kb_routes[i].method, method) == 0 || (get && strcmp(method, "HEAD") == 0)) {
            memcpy(ids, tmp, sizeof tmp);
            return (int)i;
        }
        size_t l = strlen(allow);
        snprintf(allow + l, allow_size - l, "%s%s%s", l ? ", " : "", kb_routes[i].method,
                 get ? ", HEAD" : "");
        path_found = 1;
    }
    return path_found ? -2 : -1;
}

/* How many times header or argument `name` came (MHD_lookup_connection_value sees the
 * first only). */
typedef struct header_count {
    const char *name;
    int n;
} header_count;

static enum MHD_Result count_header(void *cls, enum MHD_ValueKind kind, const char *key,
                                    const char *value)
{
    (void)kind;
    (void)value;
    header_count *c = cls;
    c->n += strcasecmp(key, c->name) == 0;
    return MHD_YES;
}

static int values_times(struct MHD_Connection *c, enum MHD_ValueKind kind, const char *name)
{
    header_count hc = {name, 0};
    MHD_get_connection_values(c, kind, count_header, &hc);
    return hc.n;
}

static int header_times(struct MHD_Connection *c, const char *name)
{
    return values_times(c, MHD_HEADER_KIND, name);
}

/* Constant-time comparison of the bearer token (time depends on lengths only). Several
 * Authorization headers are refused: which one a proxy or MHD reads is not defined. */
static int authorized(struct MHD_Connection *c)
{
    int headers = header_times(c, MHD_HTTP_HEADER_AUTHORIZATION);
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    if (headers != 1 || !h || strncasecmp(h, "Bearer ", 7) != 0)
        return 0;
    const char *got = h + 7, *want = srv.cfg.token;
    size_t gl = strlen(got), wl = strlen(want);
    unsigned char diff = gl != wl;
    for (size_t i = 0; i < wl; i++)
        diff |= (unsigned char)(want[i] ^ (i < gl ? got[i] : 0));
    return diff == 0;
}

/* The media type of the request ("application/json"), compared case-insensitively. */
static int media_is(struct MHD_Connection *c, const char *type)
{
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_TYPE);
    if (!h)
        return 0;
    while (*h == ' ')
        h++;
    size_t n = strlen(type);
    return strncasecmp(h, type, n) == 0 && (h[n] == 0 || h[n] == ';' || h[n] == ' ');
}

/* ------------------------------------------------------------ body */

typedef enum body_result { BODY_MORE = 0, BODY_DROP } body_result;

/* Takes bytes of the body budget for rq; over it the body is dropped and a 503 answered
 * at the end (body_finish). */
static int body_reserve(request *rq, size_t bytes)
{
    if (bodymem_take(bytes, rq->reserved)) {
        rq->over_budget = 1;
        free(rq->body);
        rq->body = NULL;
        rq->cap = 0;
        bodymem_give(rq->reserved);
        rq->reserved = 0;
        return -1;
    }
    rq->reserved += bytes;
    return 0;
}

/* Appends a chunk. Over the cap the rest is discarded and a 413 answered at the end;
 * over the body budget, or for a route that reads no body, the bytes are only counted
 * (so that a body over the cap still gets its 413, not a 503 it would retry). */
static body_result body_append(request *rq, const char *data, size_t size)
{
    if (rq->too_large || rq->len + size > srv.cfg.max_body) {
        rq->too_large = 1;
        return BODY_MORE;
    }
    if (rq->over_budget || kb_routes[rq->route].body == BODY_NONE) {
        rq->len += size;
        return BODY_MORE;
    }
    if (rq->len + size + 1 > rq->cap) {
        size_t nc = rq->cap ? rq->cap : 4096;
        while (nc < rq->len + size + 1)
            nc *= 2;
        if (body_reserve(rq, nc - rq->cap))
            return BODY_MORE;
        char *b = realloc(rq->body, nc);
        if (!b)
            return BODY_DROP;
        rq->body = b;
        rq->cap = nc;
    }
    memcpy(rq->body + rq->len, data, size);
    rq->len += size;
    rq->body[rq->len] = 0;
    return BODY_MORE;
}

/* Checks media type and parses the complete body. 0: ready; else the error was
 * answered and the result is returned in *rc. */
static int body_finish(request *rq, int *rc)
{
    const route *r = &kb_routes[rq->route];
    api_error err = {0};
    if (rq->too_large) {
        api_fail(&err, API_PAYLOAD_TOO_LARGE, NULL, "the body exceeds %zu bytes", srv.cfg.max_body);
        goto answer;
    }
    if (rq->over_budget)
        goto busy;
    if (r->body == BODY_NONE)
        return 0;
    if (rq->len == 0 && r->body == BODY_JSON_OPTIONAL)
        return 0;
    if (rq->len == 0) {
        api_fail(&err, API_INVALID_JSON, NULL, "a request body is required");
        goto answer;
    }
    if (r->body == BODY_JSON_OR_CSV && media_is(rq->conn, "text/csv")) {
        rq->csv = 1;
        return 0;
    }
    if (!media_is(rq->conn, "application/json")) {
        api_fail(&err, API_UNSUPPORTED_MEDIA_TYPE, NULL, "Content-Type must be %s",
                 r->body == BODY_JSON_OR_CSV ? "application/json or text/csv" : "application/json");
        goto answer;
    }
    if (body_reserve(rq, rq->len * BODYMEM_JSON_FACTOR))
        goto busy;
    rq->json = proto_parse_object(rq->body, rq->len, &err);
    if (rq->json)
        return 0;
    goto answer;
busy:
    bodymem_note_refusal();
    api_fail(&err, API_UNAVAILABLE, NULL,
             "request bodies in memory are over --max-body-memory (%zu bytes); retry",
             bodymem_budget());
answer:
    *rc = reply_error(rq, &err);
    return -1;
}

/* ------------------------------------------------------------ MHD callbacks */

/* Why the request's framing cannot be trusted (NULL: fine): two Content-Length headers
 * (the first used to win: request smuggling behind a proxy that reads the last), a
 * Transfer-Encoding MHD does not decode (gzip waited for the idle timeout), or both
 * headers (MHD reads the chunks, a proxy may read the length: RFC 9112 6.1 allows
 * refusing it). */
static const char *bad_framing(struct MHD_Connection *c)
{
    int lengths = header_times(c, MHD_HTTP_HEADER_CONTENT_LENGTH);
    if (lengths > 1)
        return "several Content-Length headers";
    const char *te = MHD_lookup_connection_value(c, MHD_HEADER_KIND,
                                                 MHD_HTTP_HEADER_TRANSFER_ENCODING);
    if (header_times(c, MHD_HTTP_HEADER_TRANSFER_ENCODING) > 1 ||
        (te && strcasecmp(te, "chunked") != 0))
        return "Transfer-Encoding other than chunked is not supported";
    if (te && lengths)
        return "both Content-Length and Transfer-Encoding";
    return NULL;
}

/* Walk over the header lines in libmicrohttpd's read buffer (see head_hides_bytes). */
typedef struct line_walk {
    const char *start, *end; /* the head: request line to blank line */
    const char *next;        /* where the next header's name must start; NULL: none yet */
    size_t nuls;             /* NULs between the previous value and next */
    int bad;
} line_walk;

static enum MHD_Result walk_line(void *cls, enum MHD_ValueKind kind, const char *key,
                                 const char *value)
{
    (void)kind;
    line_walk *w = cls;
    const char *p = value ? value + strlen(value) : key + strlen(key);
    if ((w->next && (key != w->next || w->nuls > 2)) || p < w->start || p >= w->end) {
        w->bad = 1;
        return MHD_NO;
    }
    for (w->nuls = 0; p < w->end && *p == 0; p++)
        w->nuls++;
    w->next = p;
    return MHD_YES;
}

/* Whether a header value hides bytes after a NUL (RFC 9110 5.5 forbids NUL in a field
 * value), or a header line is folded (RFC 9112 5.2 lets a server refuse obs-fold).
 * libmicrohttpd 0.9.75 hands values over as C strings, their sizes taken by strlen, so
 * "Transfer-Encoding: chunked\0gzip" read as chunked and "Bearer <token>\0junk"
 * authenticated; no size it reports shows the rest. But it parses the head in place in
 * its read buffer, in order, replacing each line's CR and LF by NULs: after a value come
 * only those NULs (at most 2), up to the next header's name, and after the last value up
 * to the end of the head (at most 4, the blank line's included). Anything else there is
 * what a NUL hid, or a folded line's continuation, which looks the same (and which
 * libmicrohttpd mangles, appending it to the header's name). One form passes: a value
 * whose one NUL is its last byte before a bare LF looks like a CRLF ending (nothing hides
 * behind that NUL). method is the request line's start in the buffer. */
static int head_hides_bytes(struct MHD_Connection *c, const char *method)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_REQUEST_HEADER_SIZE);
    if (!ci) /* only before the head was received */
        return 0;
    line_walk w = {.start = method, .end = method + ci->header_size};
    MHD_get_connection_values(c, MHD_HEADER_KIND, walk_line, &w);
    return w.bad || (w.next && (w.next != w.end || w.nuls > 4));
}

static void request_release(void *rq);

/* Request contexts alive: requests read or being answered (http_stop waits for them). */
static atomic_int live_requests;

static request *request_new(void)
{
    request *rq = calloc(1, sizeof *rq);
    if (rq) {
        rq->t0 = mono_sec();
        rq->route = -1;
        atomic_fetch_add(&live_requests, 1);
    }
    return rq;
}

/* Whether p, a NUL in libmicrohttpd's copy of the request line, ends the target: MHD
 * put it in place of the blank before the version, calls on_uri only for a version of
 * "HTTP/1.d" (8 bytes), and replaced the line's CR and LF by NULs as well. A NUL that
 * came in the target (the line's bytes lie up to the version, so reading 9 on stays in
 * it) is followed by the target's next bytes. */
static int ends_target(const char *p)
{
    return memcmp(p + 1, "HTTP/1.", 7) == 0 && p[8] >= '0' && p[8] <= '9' && p[9] == 0;
}

/* The length of the target at uri as libmicrohttpd holds it. MHD hands it over as a C
 * string, but searches it for '?' and splits its query with its own length, so bytes
 * after a NUL in the target were a query on_uri never saw (docs/TESTING.md finding 14:
 * "\0?&&&..." filled the pool with argument records and got no answer). A target that
 * itself holds a NUL, then "HTTP/1.d" and a NUL, is read as ending there: see
 * docs/TESTING.md, "Protocol errors", Limits. */
static size_t target_length(const char *uri)
{
    const char *p = uri + strlen(uri);
    while (!ends_target(p))
        p += 1 + strlen(p + 1);
    return (size_t)(p - uri);
}

/* Why the query at q (n bytes after the '?', NULs included) is refused, or NULL. */
static const char *query_refusal(const char *q, size_t n)
{
    size_t args = 1;
    for (size_t i = 0; i < n; i++)
        args += q[i] == '&';
    return args > MAX_QUERY_ARGS  ? "more than " DECIMAL(MAX_QUERY_ARGS) " query arguments"
           : n > MAX_QUERY_BYTES ? "a query longer than " DECIMAL(MAX_QUERY_BYTES) " bytes"
                                 : NULL;
}

/* MHD_OPTION_URI_LOG_CALLBACK: creates the request context (*con_cls) from the raw
 * target, which MHD calls just before it splits the query into arguments. A target with
 * a NUL byte, of more than MAX_TARGET_BYTES, or with a query of more than MAX_QUERY_ARGS
 * arguments or MAX_QUERY_BYTES bytes has its query emptied in place (the target lies in
 * MHD's own writable read buffer, and MHD reads the query only after this returns), and
 * on_headers answers 400 (414 for the length). MHD stores each argument in the
 * connection's pool, and when the pool is full MHD 0.9.75 queues its 431 but goes on
 * reading the head (parse_initial_message_line ignores the failure): the request then
 * got no answer, and on a second error MHD closed it without calling on_completed, which
 * leaked this context. NULL (out of memory): on_access allocates the context itself. */
static void *on_uri(void *cls, const char *uri, struct MHD_Connection *conn)
{
    (void)cls;
    request *rq = request_new();
    if (rq)
        conn_guard_hold(conn, rq, request_release);
    if (!rq || !uri)
        return rq;
    size_t len = target_length(uri);
    char *query = memchr(uri, '?', len);
    rq->target = uri;
    rq->target_len = len;
    rq->target_refused =
        strlen(uri) < len       ? "the request target contains a NUL byte"
        : len > MAX_TARGET_BYTES ? KB_TARGET_TOO_LONG
        : query                  ? query_refusal(query + 1, len - (size_t)(query + 1 - uri))
                                 : NULL;
    if (rq->target_refused && query)
        query[1] = 0;
    return rq;
}

/* What a request's head takes of the connection's memory (see head_too_large). */
typedef struct head_size {
    uintptr_t target;  /* where the request target starts in MHD's read buffer, or 0 */
    size_t text;       /* the target, and each header's name and value with ": ", CRLF */
    size_t span;       /* from the target to the furthest end of a header name or value */
    size_t cookies;    /* MHD's copy of the Cookie header, which it splits into cookies */
    size_t records;    /* MHD's records: headers, cookies, query arguments */
} head_size;

static void reach(head_size *h, const char *end)
{
    uintptr_t e = (uintptr_t)end;
    if (h->target && e > h->target && e - h->target > h->span)
        h->span = e - h->target;
}

static enum MHD_Result add_value(void *cls, enum MHD_ValueKind kind, const char *key,
                                 const char *value)
{
    head_size *h = cls;
    h->records++;
    if (kind == MHD_GET_ARGUMENT_KIND) /* its text lies in the target */
        return MHD_YES;
    size_t kl = strlen(key), vl = value ? strlen(value) : 0;
    if (kind == MHD_COOKIE_KIND) {
        h->cookies += kl + vl + 4; /* "=", "; " */
        return MHD_YES;
    }
    h->text += kl + vl + 4;
    if (kind == MHD_HEADER_KIND) {
        reach(h, key + kl);
        if (value)
            reach(h, value + vl);
    }
    return MHD_YES;
}

/* Whether the request's head leaves less than ANSWER_ROOM of the connection's memory.
 * The bytes it took are those of its request line and header lines, blanks and folds
 * included, which the text alone (MHD trims values) undercounts. Names and values point
 * into MHD's read buffer after the target (a folded line's name into a copy MHD makes
 * past that buffer), so the span from the target to the furthest end of a name or value
 * measures them (the larger of span and text is taken); plus MHD's copy of the
 * cookies and a record of HEAD_RECORD bytes for each header, cookie and query argument. */
static int head_too_large(request *rq)
{
    head_size h = {.target = (uintptr_t)rq->target, .text = rq->target_len};
    MHD_get_connection_values(rq->conn, MHD_HEADER_KIND | MHD_COOKIE_KIND | MHD_GET_ARGUMENT_KIND,
                              add_value, &h);
    size_t line = 24; /* method, version, blanks, CRLFs, the blank line */
    size_t bytes = (h.span > h.text ? h.span : h.text) + line + h.cookies + h.records * HEAD_RECORD;
    return bytes > CONN_MEMORY - ANSWER_ROOM;
}

/* First call: head size, framing, route, authenticate, check the declared length. 0 to
 * go on. A head too large for an answer to fit is refused before anything runs: the
 * 431 is written to the socket directly and the connection closed (MHD_NO). */
static int on_headers(request *rq, const char *url, const char *method, int *rc)
{
    char allow[128];
    int too_long = rq->target_len > MAX_TARGET_BYTES;
    if (head_too_large(rq)) {
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(rq->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        if (ci)
            mhd_errors_send_head_too_large(ci->connect_fd, too_long);
        rq->status = too_long ? 414 : 431;
        *rc = MHD_NO;
        return -1;
    }
    if (too_long) { /* before anything else: its query was not parsed */
        api_error err;
        api_fail(&err, API_INVALID, NULL, "%s", KB_TARGET_TOO_LONG);
        *rc = queue(rq, 414, json_response(api_error_json(&err)));
        return -1;
    }
    const char *framing =
        head_hides_bytes(rq->conn, method)
            ? "a header value contains a NUL byte, or a header line is folded"
            : bad_framing(rq->conn);
    if (framing) {
        rq->route = -1;
        *rc = reply_code(rq, API_INVALID, "%s", framing);
        return -1;
    }
    if (rq->target_refused) {
        *rc = reply_code(rq, API_INVALID, "%s", rq->target_refused);
        return -1;
    }
    rq->route = route_of(method, url, rq->ids, allow, sizeof allow);
    if (rq->route == -1) {
        *rc = reply_code(rq, API_NOT_FOUND, "no route %s", url);
        return -1;
    }
    if (rq->route == -2) {
        api_error err;
        api_fail(&err, API_METHOD_NOT_ALLOWED, NULL, "method %s not allowed here", method);
        struct MHD_Response *r = json_response(api_error_json(&err));
        if (r)
            MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, allow);
        rq->route = -1;
        *rc = queue(rq, 405, r);
        return -1;
    }
    const route *r = &kb_routes[rq->route];
    if (atomic_load(&srv.quiescing) && !r->open) {
        *rc = reply_code(rq, API_UNAVAILABLE, "%s", "shutting down");
        return -1;
    }
    if (!r->open && srv.cfg.token && !authorized(rq->conn)) {
        *rc = reply_code(rq, API_UNAUTHORIZED, "%s", "missing or wrong bearer token");
        return -1;
    }
    const char *cl = MHD_lookup_connection_value(rq->conn, MHD_HEADER_KIND,
                                                 MHD_HTTP_HEADER_CONTENT_LENGTH);
    if (cl && strtoull(cl, NULL, 10) > srv.cfg.max_body) {
        rq->too_large = 1;
        *rc = reply_code(rq, API_PAYLOAD_TOO_LARGE, "%s", "the body is too large");
        return -1;
    }
    return 0;
}

/* The body's checks and the route's handler, commit waits deferred (see the top). */
static int run_request(request *rq)
{
    int rc;
    if (!rq->ready) {
        if (body_finish(rq, &rc)) {
            rq->ready = -1;
            return rc;
        }
        rq->ready = 1;
    }
    study_defer_begin();
    proto_json_alloc_take(); /* from here on, a failure concerns this request's answer */
    rc = kb_routes[rq->route].fn(rq);
    study_pending left; /* not answered (a long-poll suspended): nothing to keep */
    if (study_defer_end(&left))
        study_pending_finish(&left, &(api_error){0});
    return rc;
}

/* A request worker's job: run_request, then the connection resumed for on_access to send
 * the kept answer, unless the handler parked it (its waker resumes it, and rq may be
 * freed by then). */
static void run_job(wp_job *j)
{
    request *rq = (request *)((char *)j - offsetof(request, job));
    worker.on = 1;
    worker.parked = 0;
    int rc = rq->pending.s ? resume_kept(rq) : run_request(rq);
    if (worker.parked)
        return;
    rq->job_rc = rc;
    rq->answered = 1;
    MHD_resume_connection(rq->conn);
}

/* The lane of listings, which read every study under its mutex. */
#define LANE_LISTINGS (-1)

/* Hands rq to the request workers, its connection suspended until its job ends; a
 * study's routes in that study's lane, listings in theirs (a few of them waiting behind
 * a busy study took every worker: review of the fifty-seventh session). Once the workers
 * drained (shutdown): a 503. */
static int offload(request *rq)
{
    static const char study_path[] = "/v1/studies/{study_id}";
    const route *r = &kb_routes[rq->route];
    int of_study = strncmp(r->pattern, study_path, sizeof study_path - 1) == 0;
    int listing = strcmp(r->pattern, "/v1/studies") == 0 && strcmp(r->method, "GET") == 0;
    rq->job.lane = of_study ? rq->ids[0] : listing ? LANE_LISTINGS : 0;
    MHD_suspend_connection(rq->conn);
    if (wp_push(&rq->job) == 0)
        return MHD_YES;
    worker.on = 1; /* kept as a worker's answer: the connection is suspended */
    reply_code(rq, API_UNAVAILABLE, "%s", "shutting down");
    worker.on = 0;
    MHD_resume_connection(rq->conn);
    return MHD_YES;
}

/* Sends a worker's kept answer (on_access, the connection resumed by run_job). */
static int send_answered(request *rq)
{
    struct MHD_Response *resp = rq->kept;
    rq->kept = NULL;
    rq->answered = 0;
    if (!resp && rq->job_rc == MHD_NO)
        return MHD_NO;
    return queue_now(rq, rq->kept_status, resp);
}

static enum MHD_Result on_access(void *cls, struct MHD_Connection *conn, const char *url,
                                 const char *method, const char *version,
                                 const char *upload_data, size_t *upload_data_size,
                                 void **con_cls)
{
    (void)cls;
    (void)version;
    request *rq = *con_cls;
    int rc = MHD_YES;
    if (!rq || !rq->conn) { /* first call (the context comes from on_uri, or not yet) */
        if (!rq) {
            if (!(rq = request_new()))
                return MHD_NO;
            conn_guard_hold(conn, rq, request_release);
        }
        rq->conn = conn;
        *con_cls = rq;
        conn_guard_progress(conn);
        if (on_headers(rq, url, method, &rc)) {
            rq->ready = -1; /* answered: ignore any body */
            return (enum MHD_Result)rc;
        }
        return MHD_YES;
    }
    if (*upload_data_size) {
        conn_guard_progress(conn);
        body_result br = rq->ready ? BODY_MORE : body_append(rq, upload_data, *upload_data_size);
        *upload_data_size = 0;
        return br == BODY_DROP ? MHD_NO : MHD_YES;
    }
    if (rq->answered)
        return (enum MHD_Result)send_answered(rq);
    if (rq->ready < 0)
        return MHD_YES;
    conn_guard_busy(conn);
    /* A kept answer is sent here, unless its commit failed: that one rebuilds the study
     * first (a replay), on a worker. Open routes (probes) run here, whatever the workers
     * do; the others on a worker. */
    if (rq->pending.s && !study_pending_failed(&rq->pending))
        return (enum MHD_Result)resume_kept(rq);
    int here = !rq->pending.s && kb_routes[rq->route].open;
    return (enum MHD_Result)(here ? run_request(rq) : offload(rq));
}

/* Frees a request context: out of the wait and commit lists first, where a connection
 * closed while suspended would leave it (it cannot happen, but never dangle). */
static void request_free(request *rq)
{
    if (rq->waiting) {
        pthread_mutex_lock(&waits.lock);
        for (request **p = &waits.head; *p; p = &(*p)->wait_next)
            if (*p == rq) {
                *p = rq->wait_next;
                break;
            }
        pthread_mutex_unlock(&waits.lock);
    }
    if (rq->pending.s) {
        pthread_mutex_lock(&commits.lock);
        for (request **p = &commits.head; *p; p = &(*p)->commit_next)
            if (*p == rq) {
                *p = rq->commit_next;
                break;
            }
        pthread_mutex_unlock(&commits.lock);
        study_put(rq->pending.s);
    }
    if (rq->kept)
        MHD_destroy_response(rq->kept);
    atomic_fetch_sub(&live_requests, 1);
    if (rq->state_free)
        rq->state_free(rq->state);
    body_release(rq);
    free(rq);
}

/* conn_guard's release of a context libmicrohttpd dropped without on_completed. */
static void request_release(void *rq) { request_free(rq); }

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    (void)cls;
    conn_guard_done(conn);
    request *rq = *con_cls;
    if (!rq)
        return;
    conn_guard_hold(conn, NULL, NULL);
    if (rq->conn) { /* requests MHD refused before on_access are not counted */
        int status = rq->status ? rq->status
                                : (toe == MHD_REQUEST_TERMINATED_COMPLETED_OK ? 200 : 499);
        metrics_request(rq->route, status, mono_sec() - rq->t0);
        if (log_enabled(LOG_DEBUG)) { /* an access log for operators (--log-level debug) */
            json_t *f = route_fields(rq);
            json_object_set_new(f, "status", json_integer(status));
            json_object_set_new(f, "seconds", json_real(mono_sec() - rq->t0));
            log_json(LOG_DEBUG, "request", f);
        }
    }
    request_free(rq);
    *con_cls = NULL;
}

/* New connections are closed at once while quiescing. MHD_quiesce_daemon would take the
 * listen socket out of the workers' epoll sets instead, but on an epoll daemon with a
 * thread pool it races with MHD_epoll's own removal, and libmicrohttpd 0.9.75 panics
 * ("Failed to remove listen FD from epoll set", seen once in test_startup_faults at
 * shutdown: exit by SIGABRT). MHD_stop_daemon closes the listen socket. */
static enum MHD_Result accept_policy(void *cls, const struct sockaddr *addr, socklen_t len)
{
    (void)cls;
    (void)addr;
    (void)len;
    return atomic_load(&srv.quiescing) ? MHD_NO : MHD_YES;
}

/* msg[0..n) gets libmicrohttpd's message without its trailing newlines. */
static void format_mhd(char *msg, size_t n, const char *fmt, va_list ap)
{
    vsnprintf(msg, n, fmt, ap);
    size_t len = strlen(msg);
    while (len && msg[len - 1] == '\n')
        msg[--len] = 0;
}

/* The first message libmicrohttpd logs while MHD_start_daemon runs (`on`): its reason
 * when it refuses to start (a thread or epoll it could not make, ...), which http_start
 * hands to its caller for the fatal log line. Written by mhd_log in any thread. */
static struct {
    pthread_mutex_t lock; /* protects text */
    atomic_int on;
    char text[256];
} start_msg = {.lock = PTHREAD_MUTEX_INITIALIZER};

static void start_msg_keep(const char *fmt, va_list ap)
{
    pthread_mutex_lock(&start_msg.lock);
    if (!start_msg.text[0])
        format_mhd(start_msg.text, sizeof start_msg.text, fmt, ap);
    pthread_mutex_unlock(&start_msg.lock);
}

/* libmicrohttpd's messages, one line per kind (format string) per second at most: under
 * attack it logs a line per few evicted connections, which would flood the log. */
static rate_limit mhd_lines = RATE_LIMIT_INIT(1.0);

static void mhd_log(void *cls, const char *fmt, va_list ap)
{
    (void)cls;
    if (atomic_load(&start_msg.on)) {
        va_list copy;
        va_copy(copy, ap);
        start_msg_keep(fmt, copy);
        va_end(copy);
    }
    unsigned long suppressed;
    if (!rate_limit_pass(&mhd_lines, fmt, mono_sec(), &suppressed))
        return;
    char msg[512];
    format_mhd(msg, sizeof msg, fmt, ap);
    log_json(LOG_WARN, "microhttpd",
             json_pack("{s:s,s:I}", "detail", msg, "suppressed", (json_int_t)suppressed));
}

/* libmicrohttpd's fatal errors abort the process; say why first, in the log. */
static void mhd_panic(void *cls, const char *file, unsigned int line, const char *reason)
{
    (void)cls;
    log_json_always("microhttpd panic", json_pack("{s:s,s:i,s:s}", "file", file ? file : "",
                                                  "line", (int)line, "reason", reason ? reason : ""),
                    LOG_FIELDS_LOST);
    abort();
}

static void timer_stop(void)
{
    pthread_mutex_lock(&waits.lock);
    waits.stop = 1;
    pthread_cond_signal(&waits.cv);
    pthread_mutex_unlock(&waits.lock);
    pthread_join(waits.timer, NULL);
}

/* Beyond its limit libmicrohttpd refuses a connection whoever holds the slots, so the cap
 * is kept by conn_guard (evicting the connection that waited longest on its client), and
 * libmicrohttpd's limit is (threads + 1) times the cap: it splits its limit over the pool
 * threads, which accept unevenly, and each share must stay above the cap so that a new
 * connection reaches the guard while evicted ones are still closing. NULL: refused, why
 * says why (libmicrohttpd's message). */
static struct MHD_Daemon *mhd_start(const http_config *cfg, char *why, size_t why_len)
{
    start_msg.text[0] = 0;
    atomic_store(&start_msg.on, 1);
    struct MHD_Daemon *d = MHD_start_daemon(
        MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL_LINUX_ONLY | MHD_ALLOW_SUSPEND_RESUME |
            MHD_USE_ERROR_LOG,
        0, accept_policy, NULL, on_access, NULL, MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL,
        MHD_OPTION_LISTEN_SOCKET, cfg->listen_fd,
        MHD_OPTION_THREAD_POOL_SIZE, cfg->threads, MHD_OPTION_NOTIFY_COMPLETED, on_completed,
        NULL, MHD_OPTION_CONNECTION_TIMEOUT, cfg->idle_timeout_s,
        MHD_OPTION_NOTIFY_CONNECTION, conn_guard_notify, NULL,
        MHD_OPTION_CONNECTION_LIMIT, (cfg->threads + 1) * cfg->max_connections,
        MHD_OPTION_PER_IP_CONNECTION_LIMIT, cfg->max_connections_per_ip,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)CONN_MEMORY,
        MHD_OPTION_UNESCAPE_CALLBACK, unescape, NULL, MHD_OPTION_URI_LOG_CALLBACK, on_uri, NULL,
        MHD_OPTION_END);
    atomic_store(&start_msg.on, 0);
    if (!d) {
        pthread_mutex_lock(&start_msg.lock);
        snprintf(why, why_len, "%s",
                 start_msg.text[0] ? start_msg.text
                                   : "libmicrohttpd refused to start (no message)");
        pthread_mutex_unlock(&start_msg.lock);
    }
    return d;
}

int http_start(const http_config *cfg, char *why, size_t why_len)
{
    MHD_set_panic_func(mhd_panic, NULL);
    conn_guard_init(cfg->max_connections, cfg->header_timeout_s);
    bodymem_init(cfg->max_body_memory);
    srv.cfg = *cfg;
    atomic_store(&srv.quiescing, 0);
    waits.stop = 0;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_cond_init(&waits.cv, &ca);
    pthread_condattr_destroy(&ca);
    oom_response = MHD_create_response_from_buffer_with_free_callback_cls(
        sizeof oom_body - 1, (void *)oom_body, NULL, NULL);
    int rc;
    if (!oom_response ||
        MHD_add_response_header(oom_response, MHD_HTTP_HEADER_CONTENT_TYPE,
                                "application/json") != MHD_YES) {
        snprintf(why, why_len, "out of memory");
        goto no_timer;
    }
    if ((rc = pthread_create(&waits.timer, NULL, timer_main, NULL))) {
        snprintf(why, why_len, "cannot start the long-poll timer thread: %s",
                 strerror(rc));
        goto no_timer;
    }
    if ((rc = conn_guard_start_sweeper())) {
        snprintf(why, why_len, "cannot start the header timeout thread: %s",
                 strerror(rc));
        goto no_sweeper;
    }
    /* Twice as many workers as HTTP threads, one at a time per study (or for listings):
     * a study's operations hold its mutex, so a second worker of the study would only
     * wait for it (one study's load benchmark: 814 / 803 round trips/s with one, 788
     * with two; docs/BENCHMARKS.md, fifty-seventh session), and k busy studies take k
     * workers. With as many workers as threads and half of them per study, two busy
     * studies took every worker (review of the fifty-seventh session). */
    if (wp_start(2 * cfg->threads, 1, run_job, why, why_len))
        goto no_workers;
    if ((srv.d = mhd_start(cfg, why, why_len)))
        return 0;
    wp_drain();
no_workers:
    conn_guard_stop_sweeper();
no_sweeper:
    timer_stop();
no_timer:
    if (oom_response)
        MHD_destroy_response(oom_response);
    oom_response = NULL;
    return -1;
}

void http_quiesce(void)
{
    atomic_store(&srv.quiescing, 1); /* accept_policy closes new connections from now */
    pthread_mutex_lock(&waits.lock);
    resume_where(1, 0, 0);
    pthread_mutex_unlock(&waits.lock);
}

void http_stop(void)
{
    /* Commits end within a batch; MHD must not stop with suspended connections, and
     * after stopping is set none is added (see queue). */
    pthread_mutex_lock(&commits.lock);
    commits.stopping = 1;
    pthread_mutex_unlock(&commits.lock);
    wp_drain(); /* the requests read before quiescing are answered (asks: 503) */
    for (int i = 0; i < 10000; i++) {
        pthread_mutex_lock(&commits.lock);
        int busy = commits.head != NULL;
        pthread_mutex_unlock(&commits.lock);
        if (!busy)
            break;
        usleep(1000);
    }
    /* MHD_stop_daemon closes every connection: an answer not sent by then was lost, and
     * an ask's trial with it until its lease expired (worker-fleet review, fifty-seventh
     * session). A request still being read (a slow body) is not waited for past 3 s. */
    for (int i = 0; i < 3000 && atomic_load(&live_requests) > 0; i++)
        usleep(1000);
    timer_stop();
    conn_guard_stop_sweeper();
    MHD_stop_daemon(srv.d);
    srv.d = NULL;
    MHD_destroy_response(oom_response);
    oom_response = NULL;
    pthread_cond_destroy(&waits.cv);
}
