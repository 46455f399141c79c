/*
 * kb_load.c - This file contains kb-load, the daemon load generator: N client threads,
 * each with one keep-alive HTTP/1.1 connection (plain blocking sockets), loop
 * "ask one trial, tell it" against a running kbanditd for a bounded time, and the tool
 * prints one JSON line: round trips per second and p50/p99 latency of ask and of tell.
 *
 *   kb-load --port P [--host 127.0.0.1] [--clients 32] [--studies 1] [--seconds 10]
 *           [--engine random] [--token T] [--dim 4] [--set NAME=NUMBER] [--noise 0]
 *           [--trials N] [--keep 0|1]
 *   kb-load --port P --create ROWSxDIM      time a CSV upload + study creation
 *   kb-load --port P --get PATH [--clients 32] [--seconds 10]
 *                                           GET PATH in a loop: the HTTP stack's ceiling
 *
 * Client k works on study k % studies (studies are created, and deleted at the end
 * unless --keep 1 leaves them, with their trials, for inspection):
 * boxes of `dim` floats in [0, 1]. A trial is told a smooth function of its point,
 * -sum_j (x_j - 0.3)^2, so that model-based engines fit a model with some structure (a
 * constant value makes every fit degenerate and is no workload a user sends). The line
 * reports the simple regret beside the speed (0 minus the best value told; with several
 * studies, the worst over studies of each study's best), so that a speed is read with
 * the quality it was bought at. --set puts one numeric engine setting into every study it
 * creates (e.g. --set pool_size=512), as kb-box-ask's --set does in-process; the line then
 * names it ("settings"). Study i gets "seed": i unless --set gives the seed. --noise SD adds N(0, SD^2) to every told value (each client its
 * own seeded stream), as a training run's validation score would carry: the engines then
 * fit a noise level above their floor. The simple regret stays that of the noiseless
 * function at the told points (0 minus the best of those), the usual figure for noisy
 * benchmarks. --trials N stops each client after N told trials (--seconds then only
 * caps the run): runs of two builds then do equal work, where a timed run's model grows
 * with its own speed. The line ends with the first study's epoch, dictionary size and
 * model rows at the end of the run (its progress, 0 where the engine has none, -1 when
 * the request failed) and its fitted noise variance (progress.hyperparameters.noise): a
 * model-based engine's speed depends on its model's size, which differs from run to run
 * with the noise the fit reads.
 * Any non-2xx answer or protocol error counts as an error and ends that client; the
 * exit status is 1 when there was one. A round trip's latency is measured per request
 * on the client (CLOCK_MONOTONIC), so it includes the loopback and the parsing.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static struct {
    const char *host, *token, *engine, *create, *get;
    int port, clients, studies, dim;
    int keep;      /* --keep 1: leave the studies in the daemon for inspection */
    double trials; /* told trials per client (a whole number), 0: until --seconds */
    double seconds, noise;
    char settings[96]; /* the engine's settings object: {} or {"NAME":NUMBER} */
} opt = {.host = "127.0.0.1", .engine = "random", .clients = 32, .studies = 1, .dim = 4,
         .seconds = 10, .settings = "{}"};

static double now_sec(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ------------------------------------------------------------ one connection */

typedef struct conn {
    int fd;
    char *buf;          /* response: headers + body */
    size_t cap;
    const char *body;   /* inside buf, NUL-terminated */
    int status;
} conn;

static int conn_open(conn *c)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)opt.port)};
    int one = 1;
    if (inet_pton(AF_INET, opt.host, &a.sin_addr) != 1)
        return -1;
    c->fd = socket(AF_INET, SOCK_STREAM, 0);
    if (c->fd < 0 || connect(c->fd, (struct sockaddr *)&a, sizeof a)) {
        perror("connect");
        return -1;
    }
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return 0;
}

static int send_all(int fd, const char *p, size_t n)
{
    while (n) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Sends one request and reads its response (Content-Length framing). 0 or -1. */
static int request(conn *c, const char *method, const char *path, const char *ctype,
                   const char *body, size_t blen)
{
    char head[512];
    int hl = snprintf(head, sizeof head,
                      "%s %s HTTP/1.1\r\nHost: %s\r\nContent-Type: %s\r\n"
                      "Content-Length: %zu\r\n%s%s%s\r\n",
                      method, path, opt.host, ctype, blen, opt.token ? "Authorization: Bearer " : "",
                      opt.token ? opt.token : "", opt.token ? "\r\n" : "");
    if (send_all(c->fd, head, (size_t)hl) || (blen && send_all(c->fd, body, blen)))
        return -1;
    size_t have = 0, need = 0, hdr = 0;
    for (;;) {
        if (have + 4096 >= c->cap) {
            size_t nc = c->cap ? c->cap * 2 : 65536;
            char *nb = realloc(c->buf, nc);
            if (!nb)
                return -1;
            c->buf = nb;
            c->cap = nc;
        }
        ssize_t r = recv(c->fd, c->buf + have, c->cap - have - 1, 0);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        have += (size_t)r;
        c->buf[have] = 0;
        if (!hdr) {
            char *end = strstr(c->buf, "\r\n\r\n");
            if (!end)
                continue;
            hdr = (size_t)(end - c->buf) + 4;
            char *cl = strcasestr(c->buf, "\r\ncontent-length:");
            need = hdr + (cl && cl < end ? strtoul(cl + 17, NULL, 10) : 0);
            c->status = atoi(c->buf + 9);
        }
        if (have >= need)
            break;
    }
    c->body = c->buf + hdr;
    return 0;
}

static int call(conn *c, const char *method, const char *path, const char *body)
{
    if (request(c, method, path, "application/json", body, body ? strlen(body) : 0))
        return -1;
    if (c->status / 100 != 2) {
        fprintf(stderr, "%s %s: %d %.200s\n", method, path, c->status, c->body);
        return -1;
    }
    return 0;
}

/* The first integer after key in the body, or -1. */
static long long body_int(const conn *c, const char *key)
{
    const char *p = strstr(c->body, key);
    return p ? strtoll(p + strlen(key), NULL, 10) : -1;
}

/* The first study's model at the end of the run (its progress: -1 where the engine has
 * no such figure), so that a speed is read with the model size it was measured at. */
static void study_model(conn *c, long long sid, long long out[3], double *noise)
{
    char path[64];
    snprintf(path, sizeof path, "/v1/studies/%lld", sid);
    if (call(c, "GET", path, NULL))
        return;
    out[0] = body_int(c, "\"epoch\":");
    out[1] = body_int(c, "\"dictionary_size\":");
    out[2] = body_int(c, "\"model_rows\":");
    const char *p = strstr(c->body, "\"noise\":");
    *noise = p ? strtod(p + 8, NULL) : -1.0;
}

/* The told value of the first trial in an ask's body: -sum_j (x_j - 0.3)^2 over its
 * "x" array (the daemon prints it as plain JSON numbers); NAN when there is none. */
static double trial_value(const conn *c)
{
    const char *p = strstr(c->body, "\"x\":[");
    if (!p)
        return NAN;
    p += 5;
    double v = 0.0;
    for (int j = 0; j < opt.dim; j++) {
        char *end;
        double x = strtod(p, &end);
        if (end == p)
            return NAN;
        v -= (x - 0.3) * (x - 0.3);
        p = end + 1;
    }
    return v;
}

/* ------------------------------------------------------------ load */

typedef struct lat {
    double *v;
    size_t n, cap;
} lat;

static int lat_add(lat *l, double x)
{
    if (l->n == l->cap) {
        size_t nc = l->cap ? l->cap * 2 : 4096;
        double *nv = realloc(l->v, nc * sizeof *nv);
        if (!nv)
            return -1;
        l->v = nv;
        l->cap = nc;
    }
    l->v[l->n++] = x;
    return 0;
}

typedef struct client {
    pthread_t th;
    long long study;
    double deadline;
    lat ask, tell;
    int error;
    size_t empty; /* asks answered without a trial */
    double best;  /* the largest noiseless value told (simple regret -best: the max is 0) */
    unsigned long long rng; /* xorshift64 state of this client's noise */
} client;

/* A standard normal draw (Box-Muller) from the client's xorshift64 stream. */
static double client_normal(client *k)
{
    double u[2];
    for (int i = 0; i < 2; i++) {
        k->rng ^= k->rng << 13, k->rng ^= k->rng >> 7, k->rng ^= k->rng << 17;
        u[i] = ((double)(k->rng >> 11) + 0.5) * 0x1p-53;
    }
    return sqrt(-2.0 * log(u[0])) * cos(2.0 * M_PI * u[1]);
}

/* Whether the client has told its --trials. */
static int client_done(const client *k)
{
    return opt.trials > 0 && (double)k->tell.n >= opt.trials;
}

static void *client_main(void *arg)
{
    client *k = arg;
    conn c = {0};
    char path[128];
    if (conn_open(&c)) {
        k->error = 1;
        return NULL;
    }
    while (opt.get && now_sec() < k->deadline) {
        double t0 = now_sec();
        if (call(&c, "GET", opt.get, NULL) || lat_add(&k->ask, now_sec() - t0))
            break;
    }
    while (!opt.get && now_sec() < k->deadline && !client_done(k)) {
        double t0 = now_sec();
        snprintf(path, sizeof path, "/v1/studies/%lld/ask", k->study);
        /* A long-poll: engines with closed batches (bbkb) answer no trial until the
         * batch's feedback is in; such an empty answer is counted and asked again. */
        if (call(&c, "POST", path, "{\"worker\":\"load\",\"wait_ms\":2000}"))
            break;
        double t1 = now_sec();
        long long id = body_int(&c, "\"trials\":[{\"id\":");
        if (id < 1) {
            k->empty++;
            continue;
        }
        double v = trial_value(&c);
        char body[64];
        snprintf(path, sizeof path, "/v1/studies/%lld/trials/%lld/tell", k->study, id);
        snprintf(body, sizeof body, "{\"value\":%.17g}",
                 opt.noise > 0 ? v + opt.noise * client_normal(k) : v);
        if (isnan(v) || call(&c, "POST", path, body))
            break;
        k->best = v > k->best ? v : k->best;
        double t2 = now_sec();
        if (lat_add(&k->ask, t1 - t0) || lat_add(&k->tell, t2 - t1))
            break;
    }
    k->error = now_sec() < k->deadline && !client_done(k);
    close(c.fd);
    free(c.buf);
    return NULL;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* All clients' latencies of one kind, sorted; percentiles in ms. */
static void pct(client *ks, int n, int tell, double *p50, double *p99)
{
    size_t total = 0, at = 0;
    for (int i = 0; i < n; i++)
        total += tell ? ks[i].tell.n : ks[i].ask.n;
    double *all = malloc((total ? total : 1) * sizeof *all);
    for (int i = 0; i < n && all; i++) {
        lat *l = tell ? &ks[i].tell : &ks[i].ask;
        memcpy(all + at, l->v, l->n * sizeof *all);
        at += l->n;
    }
    *p50 = *p99 = 0;
    if (all && total) {
        qsort(all, total, sizeof *all, cmp_double);
        *p50 = all[(size_t)(0.50 * (double)(total - 1))] * 1e3;
        *p99 = all[(size_t)(0.99 * (double)(total - 1))] * 1e3;
    }
    free(all);
}

/* The settings of the serial-th study: --set's, and "seed": serial unless --set names the
 * seed. The daemon draws a seed for a study created without one; numbered seeds keep the
 * engines' choices the same from run to run and build to build where timing allows. */
static void study_settings(char *out, size_t n, int serial)
{
    int empty = strcmp(opt.settings, "{}") == 0;
    if (strstr(opt.settings, "\"seed\""))
        snprintf(out, n, "%s", opt.settings);
    else
        snprintf(out, n, "{\"seed\":%d%s%s", serial, empty ? "}" : ",",
                 empty ? "" : opt.settings + 1);
}

static long long create_study(conn *c, const char *space_json, double *sec)
{
    char body[512], settings[128];
    static int serial;
    study_settings(settings, sizeof settings, serial);
    snprintf(body, sizeof body, "{\"name\":\"kb-load-%ld-%d\",\"engine\":{\"name\":\"%s\","
             "\"settings\":%s},\"space\":%s}", (long)getpid(), serial++, opt.engine,
             settings, space_json);
    double t0 = now_sec();
    if (call(c, "POST", "/v1/studies", body))
        return -1;
    if (sec)
        *sec = now_sec() - t0;
    return body_int(c, "\"id\":");
}

/* A counter from the daemon's /metrics body (0 when absent). */
static double metric(const conn *c, const char *name)
{
    char key[96];
    snprintf(key, sizeof key, "\n%s ", name);
    const char *p = strstr(c->body, key);
    return p ? strtod(p + strlen(key), NULL) : 0;
}

/* The daemon's group-commit counters: batches, operations, WAL syncs. */
static void store_counts(conn *c, double v[3])
{
    v[0] = v[1] = v[2] = 0;
    if (call(c, "GET", "/metrics", NULL))
        return;
    v[0] = metric(c, "kbandit_store_batches_total");
    v[1] = metric(c, "kbandit_store_operations_total");
    v[2] = metric(c, "kbandit_store_syncs_total");
}

/* Simple regret of the run: one study's -best, or with several the worst study's. */
static double studies_regret(const client *ks, double best)
{
    if (opt.studies == 1)
        return -best;
    double worst = 0.0;
    for (int sidx = 0; sidx < opt.studies; sidx++) {
        double b = -INFINITY;
        for (int i = sidx; i < opt.clients; i += opt.studies)
            b = ks[i].best > b ? ks[i].best : b;
        worst = -b > worst ? -b : worst;
    }
    return worst;
}

static int run_load(conn *c0)
{
    long long *sids = calloc((size_t)opt.studies, sizeof *sids);
    client *ks = calloc((size_t)opt.clients, sizeof *ks);
    char box[4096];
    int at = snprintf(box, sizeof box, "{\"type\":\"box\",\"params\":[");
    for (int j = 0; j < opt.dim; j++)
        at += snprintf(box + at, sizeof box - (size_t)at,
                       "%s{\"name\":\"x%d\",\"type\":\"float\",\"low\":0,\"high\":1}",
                       j ? "," : "", j);
    snprintf(box + at, sizeof box - (size_t)at, "]}");
    int bad = !sids || !ks;
    for (int i = 0; i < opt.studies && !bad && !opt.get; i++)
        bad = (sids[i] = create_study(c0, box, NULL)) < 1;
    if (bad) {
        free(sids);
        free(ks);
        return 1;
    }
    double m0[3], m1[3];
    store_counts(c0, m0);
    double t0 = now_sec();
    for (int i = 0; i < opt.clients; i++) {
        ks[i].study = sids[i % opt.studies];
        ks[i].deadline = t0 + opt.seconds;
        ks[i].best = -INFINITY;
        ks[i].rng = 0x9E3779B97F4A7C15ull * (unsigned long long)(i + 1);
        pthread_create(&ks[i].th, NULL, client_main, &ks[i]);
    }
    size_t rt = 0, empty = 0;
    double best = -INFINITY;
    int errors = 0;
    for (int i = 0; i < opt.clients; i++) {
        pthread_join(ks[i].th, NULL);
        rt += opt.get ? ks[i].ask.n : ks[i].tell.n;
        errors += ks[i].error;
        empty += ks[i].empty;
        best = ks[i].best > best ? ks[i].best : best;
    }
    double dt = now_sec() - t0, a50, a99, t50, t99;
    store_counts(c0, m1);
    pct(ks, opt.clients, 0, &a50, &a99);
    pct(ks, opt.clients, 1, &t50, &t99);
    long long model[3] = {-1, -1, -1}; /* study 1's epoch, dictionary size, model rows */
    double fitted_noise = -1.0;
    if (!opt.get && opt.studies > 0)
        study_model(c0, sids[0], model, &fitted_noise);
    if (opt.get) {
        printf("{\"bench\":\"daemon_get\",\"path\":\"%s\",\"clients\":%d,\"seconds\":%.2f,"
               "\"requests_per_sec\":%.0f,\"p50_ms\":%.3f,\"p99_ms\":%.3f,\"errors\":%d}\n",
               opt.get, opt.clients, dt, (double)rt / dt, a50, a99, errors);
        opt.studies = 0;
    } else
    printf("{\"bench\":\"daemon_load\",\"engine\":\"%s\",\"settings\":%s,\"clients\":%d,"
           "\"studies\":%d,\"dim\":%d,\"noise\":%g,\"seconds\":%.2f,\"round_trips\":%zu,"
           "\"round_trips_per_sec\":%.0f,"
           "\"ask_p50_ms\":%.3f,\"ask_p99_ms\":%.3f,\"tell_p50_ms\":%.3f,\"tell_p99_ms\":%.3f,"
           "\"errors\":%d,\"empty_asks\":%zu,\"ops_per_batch\":%.1f,\"tells_per_sync\":%.1f,"
           "\"simple_regret\":%.3g,\"epoch\":%lld,\"dictionary_size\":%lld,"
           "\"model_rows\":%lld,\"fitted_noise\":%.3g}\n",
           opt.engine, opt.settings, opt.clients, opt.studies, opt.dim, opt.noise, dt, rt,
           (double)rt / dt,
           a50, a99, t50, t99,
           errors, empty, m1[0] > m0[0] ? (m1[1] - m0[1]) / (m1[0] - m0[0]) : 0.0,
           m1[2] > m0[2] ? (double)rt / (m1[2] - m0[2]) : 0.0, studies_regret(ks, best),
           model[0], model[1], model[2], fitted_noise);
    char path[64];
    for (int i = 0; i < opt.studies && !opt.keep; i++) {
        snprintf(path, sizeof path, "/v1/studies/%lld", sids[i]);
        call(c0, "DELETE", path, NULL);
    }
    for (int i = 0; i < opt.clients; i++) {
        free(ks[i].ask.v);
        free(ks[i].tell.v);
    }
    free(ks);
    free(sids);
    return errors ? 1 : 0;
}

/* CSV upload of rows x dim random numbers, then a study on it: both timed. */
static int run_create(conn *c)
{
    unsigned long rows, dim;
    if (sscanf(opt.create, "%lux%lu", &rows, &dim) != 2 || !rows || !dim)
        return fprintf(stderr, "--create ROWSxDIM\n"), 2;
    char *csv = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&csv, &len);
    unsigned long long z = 88172645463325252ull;
    for (unsigned long i = 0; i < rows; i++)
        for (unsigned long j = 0; j < dim; j++) {
            z ^= z << 13, z ^= z >> 7, z ^= z << 17;
            fprintf(f, "%.17g%c", (double)(z >> 11) * 0x1p-53, j + 1 < dim ? ',' : '\n');
        }
    fclose(f);
    double t0 = now_sec(), tc;
    int rc = request(c, "POST", "/v1/candidate-sets", "text/csv", csv, len);
    double tu = now_sec() - t0;
    free(csv);
    if (rc || c->status != 201)
        return fprintf(stderr, "upload: %d %.200s\n", c->status, c->body ? c->body : ""), 1;
    char space[96];
    snprintf(space, sizeof space, "{\"type\":\"candidates\",\"candidate_set\":%lld}",
             body_int(c, "\"id\":"));
    long long sid = create_study(c, space, &tc);
    if (sid < 1)
        return 1;
    printf("{\"bench\":\"daemon_create\",\"engine\":\"%s\",\"rows\":%lu,\"dim\":%lu,"
           "\"csv_bytes\":%zu,\"upload_sec\":%.3f,\"create_sec\":%.3f}\n",
           opt.engine, rows, dim, len, tu, tc);
    char path[64];
    snprintf(path, sizeof path, "/v1/studies/%lld", sid);
    return call(c, "DELETE", path, NULL) ? 1 : 0;
}

/* --set NAME=NUMBER as the JSON object {"NAME":NUMBER}; the name is a setting's
 * identifier (lower case, digits, '_'), so it needs no escaping. 0 when malformed. */
static int parse_setting(const char *v)
{
    char name[48], tail;
    double x;
    if (sscanf(v, "%47[a-z0-9_]=%lf%c", name, &x, &tail) != 2 || !isfinite(x))
        return 0;
    snprintf(opt.settings, sizeof opt.settings, "{\"%s\":%.17g}", name, x);
    return 1;
}

/* A whole option value as a number, or NAN when it is not one ("5x", ""). */
static double number(const char *v)
{
    char *end;
    double x = strtod(v, &end);
    return end != v && *end == '\0' ? x : NAN;
}

int main(int argc, char **argv)
{
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *k = argv[i], *v = argv[i + 1];
        if (!strcmp(k, "--port")) opt.port = atoi(v);
        else if (!strcmp(k, "--host")) opt.host = v;
        else if (!strcmp(k, "--clients")) opt.clients = atoi(v);
        else if (!strcmp(k, "--studies")) opt.studies = atoi(v);
        else if (!strcmp(k, "--seconds")) opt.seconds = atof(v);
        else if (!strcmp(k, "--engine")) opt.engine = v;
        else if (!strcmp(k, "--token")) opt.token = v;
        else if (!strcmp(k, "--create")) opt.create = v;
        else if (!strcmp(k, "--get")) opt.get = v;
        else if (!strcmp(k, "--dim")) opt.dim = atoi(v);
        else if (!strcmp(k, "--set")) {
            if (!parse_setting(v))
                return fprintf(stderr, "--set wants NAME=NUMBER, got %s\n", v), 2;
        } else if (!strcmp(k, "--noise")) opt.noise = number(v);
        else if (!strcmp(k, "--trials")) opt.trials = number(v);
        else if (!strcmp(k, "--keep")) opt.keep = atoi(v);
        else return fprintf(stderr, "unknown option %s\n", k), 2;
    }
    /* --trials is a whole count: a fraction, a negative or a non-number is refused. */
    if (opt.port <= 0 || opt.clients < 1 || opt.studies < 1 || opt.seconds <= 0 ||
        opt.dim < 1 || opt.dim > 64 || !(opt.noise >= 0) || !(opt.trials >= 0) ||
        opt.trials != floor(opt.trials))
        return fprintf(stderr, "usage: kb-load --port P [--clients N] [--studies N] "
                               "[--seconds S] [--engine E] [--token T] [--dim 1..64] "
                               "[--set NAME=NUMBER] [--noise SD] [--trials N] "
                               "[--keep 0|1] [--create RxD]\n"), 2;
    conn c0 = {0};
    if (conn_open(&c0))
        return 1;
    int rc = opt.create ? run_create(&c0) : run_load(&c0);
    close(c0.fd);
    free(c0.buf);
    return rc;
}
