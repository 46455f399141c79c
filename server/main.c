/*
 * main.c - This file contains kbanditd's entry point: configuration from flags and
 * KB_* environment variables, the listening socket, start-up (database, migrations,
 * registry of the studies, whose restore goes on in the background while the HTTP
 * threads serve; lease sweeper) and the orderly shutdown on SIGTERM/SIGINT (stop
 * accepting and restoring, finish in-flight requests, snapshot, close the DB).
 *
 * Threads: SIGTERM/SIGINT (and SIGHUP, logged and ignored) are blocked in every thread
 * and taken by sigwait() in main, so no handler runs in async-signal context.
 *
 * Start-up may execute the daemon once more, right after the options are parsed, to set
 * OPENBLAS_CORETYPE (blas.c); nothing is opened or started before that point.
 */
#include "blas.h"
#include "handlers.h"
#include "http.h"
#include "log.h"
#include "storage.h"
#include "study.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <malloc.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/socket.h>
#include <unistd.h>

typedef struct options {
    const char *listen, *db, *token_file, *log_level;
    long long threads, sweep_ms, max_conn, max_conn_ip, idle_s, header_s, max_body,
        max_body_mem;
    int insecure;
} options;

static void usage(FILE *f)
{
    fputs("usage: kbanditd [options]\n"
          "  --listen HOST:PORT      address to serve on (default 127.0.0.1:8080)\n"
          "  --db PATH               SQLite database (default ./kbandit.db)\n"
          "  --threads N             HTTP threads (and twice as many request workers), 1..256\n"
          "                          (default 4)\n"
          "  --token-file PATH       bearer token file (default: none, auth off on loopback)\n"
          "  --max-body-bytes N      largest request body (default 67108864)\n"
          "  --max-body-memory N     bytes all request bodies being read or parsed may\n"
          "                          hold at once (503 beyond), 0 = no cap (default\n"
          "                          1073741824)\n"
          "  --log-level LEVEL       debug|info|warn|error (default info)\n"
          "  --sweep-ms N            lease sweep period, 10..3600000 (default 200)\n"
          "  --max-connections N     open connections in all, 1..100000 (default 1000); at\n"
          "                          the cap a new one closes the one idle longest (never\n"
          "                          one whose request is being handled)\n"
          "  --max-connections-per-ip N  from one address, 0 = no cap (default 256)\n"
          "  --idle-timeout-s N      close a connection silent this long, 1..3600 (default 60)\n"
          "  --header-timeout-s N    close a connection whose request headers are not all\n"
          "                          in this long after the request began, however slowly\n"
          "                          they come, 1..3600 (default 10)\n"
          "  --insecure              allow a non-loopback listen without a token\n"
          "  --version               print the version and exit\n"
          "Each flag may also be given as KB_<FLAG> in the environment (KB_LISTEN, KB_DB,\n"
          "KB_THREADS, KB_TOKEN_FILE, KB_MAX_BODY_BYTES, KB_MAX_BODY_MEMORY, KB_LOG_LEVEL,\n"
          "KB_SWEEP_MS, KB_MAX_CONNECTIONS, KB_MAX_CONNECTIONS_PER_IP, KB_IDLE_TIMEOUT_S,\n"
          "KB_HEADER_TIMEOUT_S, KB_INSECURE=0|1|false|true); flags win. Flags are spelled\n"
          "out in full (--max-body is refused, not taken for --max-body-bytes).\n",
          f);
}

static int fatal(const char *msg, const char *detail)
{
    log_json(LOG_ERROR, msg, detail ? json_pack("{s:s}", "error", detail) : NULL);
    return 1;
}

/* fatal() with the reason from the system (strerror, gai_strerror) as its own field. */
static int fatal_because(const char *msg, const char *detail, const char *reason)
{
    log_json(LOG_ERROR, msg, json_pack("{s:s,s:s}", "error", detail, "reason", reason));
    return 1;
}

static const char *env_or(const char *name, const char *def)
{
    const char *v = getenv(name);
    return v && *v ? v : def;
}

/* A boolean KB_* variable: unset or empty is false; anything but 0/1/false/true is
 * refused (KB_INSECURE=false used to turn insecure mode on). */
static int parse_env_bool(const char *name, int *out)
{
    const char *v = env_or(name, "0");
    if (!strcmp(v, "0") || !strcmp(v, "false"))
        *out = 0;
    else if (!strcmp(v, "1") || !strcmp(v, "true"))
        *out = 1;
    else
        return -1;
    return 0;
}

/* A whole decimal number in [min, max]; strtoll's leading blanks and '+' are refused. */
static int parse_long(const char *s, long long min, long long max, long long *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (!(isdigit((unsigned char)s[0]) || s[0] == '-') || *end || errno || v < min || v > max)
        return -1;
    *out = v;
    return 0;
}

/* Whether arg ("--name" or "--name=value") names the flag name in full. */
static int spelled_out(const char *arg, const char *name)
{
    size_t n = strlen(name);
    return strncmp(arg, "--", 2) == 0 && strncmp(arg + 2, name, n) == 0 &&
           (arg[2 + n] == 0 || arg[2 + n] == '=');
}

static int parse_options(int argc, char **argv, options *o)
{
    static const struct option longopts[] = {
        {"listen", required_argument, 0, 'l'}, {"db", required_argument, 0, 'd'},
        {"threads", required_argument, 0, 't'}, {"token-file", required_argument, 0, 'k'},
        {"max-body-bytes", required_argument, 0, 'm'}, {"log-level", required_argument, 0, 'v'},
        {"max-body-memory", required_argument, 0, 'M'},
        {"sweep-ms", required_argument, 0, 's'}, {"insecure", no_argument, 0, 'i'},
        {"max-connections", required_argument, 0, 'c'},
        {"max-connections-per-ip", required_argument, 0, 'p'},
        {"idle-timeout-s", required_argument, 0, 'o'},
        {"header-timeout-s", required_argument, 0, 'H'},
        {"help", no_argument, 0, 'h'}, {"version", no_argument, 0, 'V'}, {0, 0, 0, 0}};
    const char *threads = env_or("KB_THREADS", "4"), *max_body = env_or("KB_MAX_BODY_BYTES", "67108864"),
               *sweep = env_or("KB_SWEEP_MS", "200"),
               *max_body_mem = env_or("KB_MAX_BODY_MEMORY", "1073741824");
    const char *max_conn = env_or("KB_MAX_CONNECTIONS", "1000"),
               *max_conn_ip = env_or("KB_MAX_CONNECTIONS_PER_IP", "256"),
               *idle = env_or("KB_IDLE_TIMEOUT_S", "60"),
               *header = env_or("KB_HEADER_TIMEOUT_S", "10");
    o->listen = env_or("KB_LISTEN", "127.0.0.1:8080");
    o->db = env_or("KB_DB", "./kbandit.db");
    o->token_file = env_or("KB_TOKEN_FILE", NULL);
    o->log_level = env_or("KB_LOG_LEVEL", "info");
    int env_insecure_bad = parse_env_bool("KB_INSECURE", &o->insecure);
    int c, at = optind, li = -1;
    /* "+": no reordering, so the option just read is argv[at]; getopt takes any unique
     * prefix of a flag's name, which a later flag could make ambiguous: refused. */
    while ((c = getopt_long(argc, argv, "+", longopts, &li)) != -1) {
        if (c != '?' && !spelled_out(argv[at], longopts[li].name)) {
            fprintf(stderr, "kbanditd: '%s' is not spelled out: use --%s\n", argv[at],
                    longopts[li].name);
            return -1;
        }
        at = optind;
        switch (c) {
        case 'l': o->listen = optarg; break;
        case 'd': o->db = optarg; break;
        case 't': threads = optarg; break;
        case 'k': o->token_file = optarg; break;
        case 'm': max_body = optarg; break;
        case 'M': max_body_mem = optarg; break;
        case 'v': o->log_level = optarg; break;
        case 's': sweep = optarg; break;
        case 'c': max_conn = optarg; break;
        case 'p': max_conn_ip = optarg; break;
        case 'o': idle = optarg; break;
        case 'H': header = optarg; break;
        case 'i': o->insecure = 1; break;
        case 'h': usage(stdout); exit(0);
        case 'V': puts("kbanditd " KB_VERSION_STRING); exit(0);
        default: usage(stderr); return -1;
        }
    }
    log_level lvl;
    if (optind < argc) {
        usage(stderr);
        return -1;
    }
    if (log_level_parse(o->log_level, &lvl))
        return fatal("invalid --log-level / KB_LOG_LEVEL (debug, info, warn or error)",
                     o->log_level), -1;
    log_set_level(lvl);
    if (env_insecure_bad)
        return fatal("invalid KB_INSECURE (0, 1, false or true)", getenv("KB_INSECURE")), -1;
    const struct {
        const char *flag, *text;
        long long min, max, *out;
    } numbers[] = {
        {"threads", threads, 1, 256, &o->threads},
        {"sweep-ms", sweep, 10, 3600000, &o->sweep_ms},
        {"max-connections", max_conn, 1, 100000, &o->max_conn},
        {"max-connections-per-ip", max_conn_ip, 0, 100000, &o->max_conn_ip},
        {"idle-timeout-s", idle, 1, 3600, &o->idle_s},
        {"header-timeout-s", header, 1, 3600, &o->header_s},
        {"max-body-bytes", max_body, 1024, (long long)1 << 40, &o->max_body},
        {"max-body-memory", max_body_mem, 0, (long long)1 << 50, &o->max_body_mem},
    };
    for (size_t i = 0; i < sizeof numbers / sizeof numbers[0]; i++)
        if (parse_long(numbers[i].text, numbers[i].min, numbers[i].max, numbers[i].out)) {
            char msg[96];
            snprintf(msg, sizeof msg, "invalid --%s (%lld..%lld)", numbers[i].flag,
                     numbers[i].min, numbers[i].max);
            return fatal(msg, numbers[i].text), -1;
        }
    return 0;
}

/* Token limits: shorter tokens are guessable; the longest fits one header line. */
#define TOKEN_MIN 16
#define TOKEN_MAX 4096

/* Why the open token file is unusable (NULL: fine). Writable by others: anyone may set the
 * token, refused. Readable by others: refused only with a warning, since a Docker or
 * Kubernetes secret is often mounted 0444 for a container user (README, Docker). */
static const char *token_file_problem(FILE *f, const char *path)
{
    struct stat st;
    if (fstat(fileno(f), &st) != 0)
        return "cannot stat token file";
    if (S_ISDIR(st.st_mode))
        return NULL; /* reading it fails with the system's reason (EISDIR) */
    if (st.st_mode & (S_IWGRP | S_IWOTH))
        return "token file is writable by others (chmod 600)";
    if (st.st_mode & (S_IRGRP | S_IROTH))
        log_json(LOG_WARN, "token file is readable by others (chmod 600 unless it is a mounted "
                           "secret)", json_pack("{s:s}", "path", path));
    return NULL;
}

/* Reads the token (first line, surrounding whitespace removed); NULL after logging. */
static char *read_token(const char *path)
{
    FILE *f = fopen(path, "r");
    char buf[TOKEN_MAX + 2];
    if (!f) {
        fatal_because("cannot read token file", path, strerror(errno));
        return NULL;
    }
    const char *problem = token_file_problem(f, path);
    if (problem) {
        fclose(f);
        fatal(problem, path);
        return NULL;
    }
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    int read_errno = ferror(f) ? errno : 0; /* a directory opens, then reads EISDIR */
    fclose(f);
    if (read_errno) {
        fatal_because("cannot read token file", path, strerror(read_errno));
        return NULL;
    }
    buf[n] = 0;
    char *s = buf, *e;
    while (*s == ' ' || *s == '\t' || *s == '\r' || *s == '\n')
        s++;
    for (e = s; *e && *e != '\n' && *e != '\r'; e++)
        ;
    int whole_line = *e || n < sizeof buf - 1; /* the line ended within what was read */
    while (e > s && (e[-1] == ' ' || e[-1] == '\t'))
        e--;
    *e = 0;
    if (!*s) {
        fatal("token file is empty", path);
        return NULL;
    }
    if (!whole_line || strlen(s) > TOKEN_MAX) { /* never cut silently */
        fatal("token longer than 4096 bytes", path);
        return NULL;
    }
    if (strlen(s) < TOKEN_MIN) {
        fatal("token shorter than 16 bytes", path);
        return NULL;
    }
    return strdup(s);
}

/* Binds host:port ([v6]:port allowed); *port gets the real port, *loopback whether the
 * address is a loopback one. Returns the listening fd, or -1 with *why saying why. */
static int listen_on(const char *spec, int *port, int *loopback, const char **why)
{
    char host[256];
    const char *colon = strrchr(spec, ':');
    *why = "expected HOST:PORT";
    if (!colon || colon == spec || (size_t)(colon - spec) >= sizeof host)
        return -1;
    /* getaddrinfo takes 99999 as 99999 mod 2^16 */
    size_t digits = strspn(colon + 1, "0123456789");
    if (!digits || colon[1 + digits] || digits > 5 || atol(colon + 1) > 65535) {
        *why = "the port must be a number from 0 to 65535";
        return -1;
    }
    memcpy(host, spec, (size_t)(colon - spec));
    host[colon - spec] = 0;
    char *h = host;
    if (h[0] == '[' && h[strlen(h) - 1] == ']') {
        h[strlen(h) - 1] = 0;
        h++;
    }
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV}, *ai;
    int rc = getaddrinfo(h, colon + 1, &hints, &ai);
    if (rc) {
        *why = gai_strerror(rc);
        return -1;
    }
    int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, 0), one = 1;
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) ||
        bind(fd, ai->ai_addr, ai->ai_addrlen) || listen(fd, 512)) {
        *why = strerror(errno);
        if (fd >= 0)
            close(fd);
        fd = -1;
    }
    if (ai->ai_family == AF_INET)
        *loopback = (ntohl(((struct sockaddr_in *)ai->ai_addr)->sin_addr.s_addr) >> 24) == 127;
    else
        *loopback = IN6_IS_ADDR_LOOPBACK(&((struct sockaddr_in6 *)ai->ai_addr)->sin6_addr);
    freeaddrinfo(ai);
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    if (fd >= 0 && getsockname(fd, (struct sockaddr *)&ss, &sl) == 0)
        *port = ntohs(ss.ss_family == AF_INET ? ((struct sockaddr_in *)&ss)->sin_port
                                              : ((struct sockaddr_in6 *)&ss)->sin6_port);
    return fd;
}

/* ------------------------------------------------------------ lease sweeper */

static struct {
    pthread_mutex_t lock; /* protects stop */
    pthread_cond_t cv;
    int stop;
    long period_ms;
} sweeper = {.lock = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

static void *sweeper_main(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&sweeper.lock);
    while (!sweeper.stop) {
        pthread_mutex_unlock(&sweeper.lock);
        registry_sweep(now_ms());
        pthread_mutex_lock(&sweeper.lock);
        int64_t until = now_ms() + sweeper.period_ms;
        struct timespec ts = {.tv_sec = (time_t)(until / 1000), .tv_nsec = (long)(until % 1000) * 1000000};
        if (!sweeper.stop)
            pthread_cond_timedwait(&sweeper.cv, &sweeper.lock, &ts);
    }
    pthread_mutex_unlock(&sweeper.lock);
    return NULL;
}

/* ------------------------------------------------------------ main */

/* Serving: logs the "listening" line (clients wait for its port: it is written even when
 * memory runs out for the rest) and waits for SIGTERM or SIGINT. */
static void serve(int port, const options *o, int auth, const sigset_t *sigs)
{
    char port_only[32];
    snprintf(port_only, sizeof port_only, "\"port\":%d", port);
    log_json_always("listening",
             json_pack("{s:i,s:s,s:s,s:i,s:b,s:s,s:s,s:s?}", "port", port, "listen", o->listen,
                       "db", o->db, "threads", (int)o->threads, "auth", auth, "version",
                       KB_VERSION_STRING, "blas_core", blas_core(), "openblas_coretype",
                       getenv("OPENBLAS_CORETYPE")),
             port_only);
    int sig = 0;
    /* SIGHUP (a closed terminal, `systemctl reload`, a logrotate hook) killed the daemon
     * without its orderly shutdown; it has nothing to reload (the log is stderr). */
    while (sigwait(sigs, &sig) == 0 && sig == SIGHUP)
        log_json(LOG_WARN, "SIGHUP ignored", json_pack("{s:s}", "hint", "stop with SIGTERM"));
    log_json(LOG_INFO, "shutting down", json_pack("{s:s}", "signal", sig == SIGTERM ? "SIGTERM" : "SIGINT"));
}

/* Engines allocate and free scratch of several MB at every epoch (bbkb: the data rows'
 * embeddings, V and its factors; 8 MB and more at a dictionary of 1,000). With glibc's
 * defaults such blocks are mmapped or trimmed from the heap top when freed, so every
 * epoch faults them back in zeroed pages: 21-27% of the daemon's CPU per round trip on a
 * long noise-free bbkb study (docs/BENCHMARKS.md, twenty-third session). Keeping freed
 * blocks up to 16 MB in the heap costs up to that much resident memory per malloc arena
 * (one per thread that allocates), not per study. */
static void keep_freed_scratch(void)
{
    mallopt(M_MMAP_THRESHOLD, 16 << 20);
    mallopt(M_TRIM_THRESHOLD, 16 << 20);
}

int main(int argc, char **argv)
{
    options o;
    if (parse_options(argc, argv, &o))
        return 2;
    blas_choose_core(argv);
    blas_single_thread();
    keep_freed_scratch();
    proto_init();
    signal(SIGPIPE, SIG_IGN);
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL); /* inherited by every thread started below */

    char *token = o.token_file ? read_token(o.token_file) : NULL;
    if (o.token_file && !token)
        return 1;
    int port = 0, loopback = 0;
    const char *why;
    int fd = listen_on(o.listen, &port, &loopback, &why);
    if (fd < 0) {
        free(token);
        return fatal_because("cannot listen", o.listen, why);
    }
    if (!token && !loopback && !o.insecure) {
        close(fd);
        return fatal("refusing to listen on a non-loopback address without --token-file "
                     "(use --insecure to override)", o.listen);
    }
    if (!token)
        log_json(LOG_WARN, "auth disabled", json_pack("{s:s}", "hint", "give --token-file"));

    char errbuf[512];
    store *db = store_open(o.db, errbuf, sizeof errbuf);
    if (!db) {
        close(fd);
        free(token);
        return fatal("cannot open database", errbuf);
    }
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    registry_config rc = {.db = db, .on_feedback = http_wake_study, .snapshot_every = 500,
                          .restore_threads = cpus < 1 ? 1 : cpus > 8 ? 8 : (size_t)cpus};
    if (registry_open(&rc)) {
        registry_close();
        store_close(db);
        close(fd);
        free(token);
        return fatal("cannot load the studies from the database", o.db);
    }
    handlers_init(db);
    store_set_batch_hook(db, http_commits_done); /* answers waiting for a commit */
    http_config hc = {.listen_fd = fd, .threads = (unsigned)o.threads, .token = token,
                      .max_body = (size_t)o.max_body, .max_body_memory = (size_t)o.max_body_mem,
                      .max_connections = (unsigned)o.max_conn,
                      .max_connections_per_ip = (unsigned)o.max_conn_ip,
                      .idle_timeout_s = (unsigned)o.idle_s,
                      .header_timeout_s = (unsigned)o.header_s};
    if (http_start(&hc, errbuf, sizeof errbuf)) {
        registry_close();
        store_close(db);
        close(fd);
        free(token);
        return fatal_because("cannot start the HTTP daemon", o.listen, errbuf);
    }
    sweeper.period_ms = o.sweep_ms;
    pthread_t sweep_thread;
    /* Without it leases would never expire: then the daemon stops at once, through the
     * orderly shutdown below (the HTTP threads and restores run already). */
    int sweeping = pthread_create(&sweep_thread, NULL, sweeper_main, NULL) == 0;
    if (sweeping)
        serve(port, &o, token != NULL, &sigs);
    else
        fatal("cannot start the lease sweeper thread", NULL);
    registry_shutting_down();
    http_quiesce();
    http_stop();
    pthread_mutex_lock(&sweeper.lock);
    sweeper.stop = 1;
    pthread_cond_signal(&sweeper.cv);
    pthread_mutex_unlock(&sweeper.lock);
    if (sweeping)
        pthread_join(sweep_thread, NULL);
    registry_close();
    store_close(db);
    free(token);
    log_json(LOG_INFO, "stopped", NULL);
    return sweeping ? 0 : 1;
}
