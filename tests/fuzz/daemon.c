/*
 * daemon.c - This file contains the in-process kbanditd of the HTTP-level fuzz targets
 * (see daemon.h): start-up as server/main.c does it (store, registry, handlers, batch
 * hook, HTTP threads) on a database in a fresh temporary directory, the seeded studies,
 * one request per loopback connection, and the checks of the answers.
 *
 * The database lives in /dev/shm when there is one: every tell waits for an fsync, and a
 * disk would make those the fuzzer's bottleneck. The directory is removed at exit.
 */
#include "daemon.h"

#include "../../server/blas.h"
#include "../../server/handlers.h"
#include "../../server/http.h"
#include "../../server/log.h"
#include "../../server/study.h"

#include <arpa/inet.h>
#include <errno.h>
#include <jansson.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define REPLY_TIMEOUT_MS 8000 /* under the run's -timeout=10; far under the idle timeout */

static struct {
    int port;
    char dir[64], db[96];
} fz;

static void remove_db(void)
{
    static const char *const suffixes[] = {"", "-wal", "-shm"};
    char path[128];
    for (size_t i = 0; i < 3; i++) {
        snprintf(path, sizeof path, "%s%s", fz.db, suffixes[i]);
        unlink(path);
    }
    rmdir(fz.dir);
}

static int listen_loopback(void)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof a;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) || listen(fd, 128) ||
        getsockname(fd, (struct sockaddr *)&a, &al))
        abort();
    fz.port = ntohs(a.sin_port);
    return fd;
}

/* One request of the seeding; it must get `want`. */
static void seed(const char *method, const char *path, const char *body, int want)
{
    char *req = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&req, &len);
    fprintf(f, "%s %s HTTP/1.1\r\nHost: fuzz\r\nConnection: close\r\nAuthorization: Bearer "
               FUZZ_TOKEN "\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n\r\n%s",
            method, path, strlen(body), body);
    fclose(f);
    fuzz_reply r;
    fuzz_exchange(req, len, &r);
    free(req);
    if (r.status != want) {
        fprintf(stderr, "fuzz daemon: seeding %s %s got %d: %s\n", method, path, r.status,
                r.body ? r.body : "");
        abort();
    }
    free(r.text);
}

/* Studies 1 (random on a mixed box), 2 (random on candidates) and 3 (gp-ucb on a box),
 * each with trial 1 pending, and candidate set 1. */
static void seed_studies(void)
{
    static const char box[] = "{\"type\":\"box\",\"params\":["
        "{\"name\":\"a\",\"type\":\"float\",\"low\":1e-3,\"high\":1,\"log\":true},"
        "{\"name\":\"b\",\"type\":\"int\",\"low\":1,\"high\":4},"
        "{\"name\":\"c\",\"type\":\"categorical\",\"choices\":[\"x\",1,true]}]}";
    char body[1024];
    snprintf(body, sizeof body, "{\"name\":\"box\",\"space\":%s,\"engine\":{\"name\":\"random\"}}", box);
    seed("POST", "/v1/studies", body, 201);
    seed("POST", "/v1/studies", "{\"name\":\"cands\",\"space\":{\"type\":\"candidates\","
         "\"candidates\":[[0,1],[1,0],[0.5,0.5],[0.2,0.9]]},\"engine\":{\"name\":\"random\"}}", 201);
    seed("POST", "/v1/studies", "{\"name\":\"gp\",\"space\":{\"type\":\"box\",\"params\":["
         "{\"name\":\"x\",\"type\":\"float\",\"low\":-1,\"high\":1}]},\"engine\":{\"name\":\"gp-ucb\"}}", 201);
    for (int id = 1; id <= 3; id++) {
        char path[64];
        snprintf(path, sizeof path, "/v1/studies/%d/ask", id);
        seed("POST", path, "{\"worker\":\"w\"}", 200);
    }
    seed("POST", "/v1/candidate-sets", "{\"rows\":[[1,2],[3,4]]}", 201);
}

/* Starts the daemon once, as main() does. */
static void start(void)
{
    if (fz.port)
        return;
    const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    snprintf(fz.dir, sizeof fz.dir, "%s/kb-fuzz-XXXXXX", base);
    if (!mkdtemp(fz.dir))
        abort();
    snprintf(fz.db, sizeof fz.db, "%s/kb.db", fz.dir);
    atexit(remove_db);
    blas_single_thread();
    log_set_level(LOG_ERROR); /* info lines per study would drown the fuzzer's output */
    char errbuf[256];
    store *db = store_open(fz.db, errbuf, sizeof errbuf);
    registry_config rc = {.db = db, .on_feedback = http_wake_study, .snapshot_every = 500,
                          .restore_threads = 1};
    if (!db || registry_open(&rc))
        abort();
    handlers_init(db);
    store_set_batch_hook(db, http_commits_done);
    http_config hc = {.listen_fd = listen_loopback(), .threads = 2, .token = FUZZ_TOKEN,
                      .max_body = 1 << 20, .max_connections = 256,
                      .max_connections_per_ip = 0, .idle_timeout_s = 60};
    char why[256];
    if (http_start(&hc, why, sizeof why)) {
        fprintf(stderr, "fuzz daemon: cannot start the HTTP daemon: %s\n", why);
        abort();
    }
    seed_studies();
}

/* Whether buf[0..len) holds a whole answer: its head and, unless the request was a HEAD
 * or the status has no body (204, 304), the Content-Length bytes that follow (the daemon
 * sends no other framing). */
static int reply_complete(const char *buf, size_t len, int head)
{
    const char *end = memmem(buf, len, "\r\n\r\n", 4);
    if (!end)
        return 0;
    int status = 0;
    sscanf(buf, "HTTP/1.%*1[01] %3d", &status);
    head |= status == 204 || status == 304;
    size_t body = len - (size_t)(end + 4 - buf);
    for (const char *h = buf; h && h < end; h = memmem(h, (size_t)(end - h), "\r\n", 2)) {
        h += h == buf ? 0 : 2;
        if (strncasecmp(h, "Content-Length:", 15) == 0)
            return head || body >= strtoull(h + 15, NULL, 10);
    }
    return head;
}

/* Reads until the answer is complete or the peer closes; aborts on a hang. A complete
 * answer does not wait for the close: MHD closes a half-closed keep-alive connection
 * (the input may turn "Connection: close" into a folded header) only when its thread
 * next wakes. */
/* libFuzzer's -timeout arms a SIGALRM timer, so every blocking call here can return EINTR
 * without anything being wrong with the daemon (it once read as "no answer within 8 s").
 * wait_for: 1 when fd is ready for `events` within ms milliseconds, retrying after signals. */
static int wait_for(int fd, short events, int ms)
{
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int left = ms;;) {
        struct pollfd p = {.fd = fd, .events = events};
        int r = poll(&p, 1, left);
        if (r >= 0 || errno != EINTR)
            return r == 1;
        clock_gettime(CLOCK_MONOTONIC, &t);
        left = ms - (int)((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000);
        if (left <= 0)
            return 0;
    }
}

/* A connect interrupted by a signal goes on in the background: wait for it and read its
 * outcome instead of calling connect again. */
static int connect_fully(int fd, const struct sockaddr_in *a)
{
    if (connect(fd, (const struct sockaddr *)a, sizeof *a) == 0)
        return 0;
    if (errno != EINTR || !wait_for(fd, POLLOUT, REPLY_TIMEOUT_MS))
        return -1;
    int err = 0;
    socklen_t n = sizeof err;
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &n) || err) {
        errno = err ? err : errno;
        return -1;
    }
    return 0;
}

static char *read_all(int fd, int head, size_t *len)
{
    size_t cap = 4096;
    char *buf = malloc(cap);
    *len = 0;
    for (;;) {
        if (!wait_for(fd, POLLIN, REPLY_TIMEOUT_MS)) {
            /* Tell a slow answer from none before failing (run with -timeout above 60 s
             * to see which it was). */
            int late = wait_for(fd, POLLIN, 50000);
            fprintf(stderr, "fuzz daemon: no answer within %d ms (%s)\n", REPLY_TIMEOUT_MS,
                    late ? "something came within 58 s" : "nothing within 58 s either");
            abort();
        }
        if (*len + 2048 > cap)
            buf = realloc(buf, cap *= 2);
        ssize_t n;
        do
            n = read(fd, buf + *len, cap - *len - 1);
        while (n < 0 && errno == EINTR);
        if (n <= 0)
            break; /* closed (a reset counts as closed: MHD drops some connections) */
        *len += (size_t)n;
        if (reply_complete(buf, *len, head))
            break;
    }
    buf[*len] = 0;
    return buf;
}

/* Fills status, Content-Type and body from the text of the answer. The body ends at its
 * Content-Length: a second answer can arrive in the same read (the input may fold
 * "Connection: close" away, or end the head early with a line starting with NUL, so
 * the rest is a second, pipelined request). */
static void parse_reply(fuzz_reply *r, size_t len)
{
    char *t = r->text, *end = strstr(t, "\r\n\r\n");
    if (!end || sscanf(t, "HTTP/1.%*1[01] %3d ", &r->status) != 1)
        return;
    *end = 0;
    r->body = end + 4;
    r->body_len = len - (size_t)(r->body - t);
    for (char *line = strstr(t, "\r\n"); line; line = strstr(line, "\r\n")) {
        *line = 0;
        line += 2;
        if (strncasecmp(line, "Content-Type:", 13) == 0)
            r->ctype = line + 13 + strspn(line + 13, " "); /* ends where the next line began */
        else if (strncasecmp(line, "Content-Length:", 15) == 0 &&
                 strtoull(line + 15, NULL, 10) < r->body_len)
            r->body_len = strtoull(line + 15, NULL, 10);
    }
}

void fuzz_exchange(const char *req, size_t len, fuzz_reply *out)
{
    start();
    memset(out, 0, sizeof *out);
    out->head = len >= 5 && memcmp(req, "HEAD ", 5) == 0;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)fz.port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    /* The client half-closes first, so its side would keep TIME_WAIT and thousands of
     * exchanges a second would run out of local ports: close with a reset instead. */
    struct linger reset = {.l_onoff = 1, .l_linger = 0};
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_LINGER, &reset, sizeof reset) ||
        connect_fully(fd, &a)) {
        perror("fuzz daemon: connect");
        abort();
    }
    /* The daemon may answer and close before reading everything: a short write is fine. */
    for (size_t off = 0; off < len;) {
        ssize_t n = send(fd, req + off, len - off, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        off += (size_t)n;
    }
    shutdown(fd, SHUT_WR);
    size_t got;
    out->text = read_all(fd, out->head, &got);
    close(fd);
    parse_reply(out, got);
}

/* The documented error shape: {"error":{"code":str,"message":str,"field":str|null}}. */
static int is_error_doc(const json_t *doc)
{
    const json_t *e = json_object_get(doc, "error"), *field = json_object_get(e, "field");
    return json_is_string(json_object_get(e, "code")) &&
           json_is_string(json_object_get(e, "message")) &&
           (json_is_string(field) || json_is_null(field));
}

void fuzz_check_reply(const fuzz_reply *r)
{
    if (r->status == 0)
        return; /* dropped without an answer: MHD does so for requests it cannot parse */
    int is_json = r->ctype && strncmp(r->ctype, "application/json", 16) == 0;
    if (r->status < 100 || r->status > 599 || (r->status >= 500 && !is_json)) {
        fprintf(stderr, "fuzz daemon: bad answer %d: %.*s\n", r->status, (int)r->body_len,
                r->body ? r->body : "");
        abort();
    }
    if (!is_json || r->head || r->status == 204)
        return;
    json_t *doc = json_loadb(r->body, r->body_len, 0, NULL);
    if (!doc || (r->status >= 400 && !is_error_doc(doc))) {
        fprintf(stderr, "fuzz daemon: bad JSON answer %d: %.*s\n", r->status, (int)r->body_len,
                r->body);
        abort();
    }
    json_decref(doc);
}
