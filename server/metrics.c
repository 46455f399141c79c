/*
 * metrics.c - This file contains the request counters and latency histograms, kept in
 * fixed arrays of atomics indexed by route (so recording never takes a lock), and the
 * Prometheus text rendering: those, the registry's figures, the connections evicted at
 * the cap (conn_guard.c), the body budget (bodymem.c), the standard process_* metrics
 * (read from /proc at scrape time) and kbandit_build_info.
 *
 * Invariant: every *_total is a counter that never goes down while the process lives
 * (the registry keeps the totals of deleted studies); gauges may.
 */
#include "metrics.h"

#include "bodymem.h"
#include "conn_guard.h"
#include "http.h"
#include "study.h"
#include "../proto/numfmt.h"

#include <dirent.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#define MAX_ROUTES 64
#define N_STATUS 600
static const double buckets[] = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};
#define N_BUCKETS (sizeof buckets / sizeof buckets[0])

/* Slot MAX_ROUTES - 1 counts unrouted requests. */
static atomic_uint_fast64_t by_status[MAX_ROUTES][N_STATUS];
static atomic_uint_fast64_t hist[MAX_ROUTES][N_BUCKETS + 1];
static atomic_uint_fast64_t sum_us[MAX_ROUTES];

static size_t slot(int ri)
{
    return ri >= 0 && (size_t)ri < kb_n_routes && ri < MAX_ROUTES - 1
               ? (size_t)ri : MAX_ROUTES - 1;
}

void metrics_request(int ri, int status, double seconds)
{
    size_t r = slot(ri);
    if (status < 0 || status >= N_STATUS)
        status = 0;
    atomic_fetch_add(&by_status[r][status], 1);
    size_t b = 0;
    while (b < N_BUCKETS && seconds > buckets[b])
        b++;
    atomic_fetch_add(&hist[r][b], 1);
    atomic_fetch_add(&sum_us[r], (uint_fast64_t)(seconds * 1e6));
}

static void route_label(FILE *f, size_t r)
{
    if (r == MAX_ROUTES - 1)
        fputs("method=\"\",route=\"unmatched\"", f);
    else
        fprintf(f, "method=\"%s\",route=\"%s\"", kb_routes[r].method, kb_routes[r].pattern);
}

/* ------------------------------------------------------------ process metrics */

/* Fields of /proc/self/stat used below (man 5 proc numbers them from 1). */
typedef struct proc_stat {
    unsigned long long utime, stime, starttime; /* clock ticks */
    unsigned long long vsize, rss;              /* bytes, pages */
} proc_stat;

static int read_proc_stat(proc_stat *ps)
{
    char buf[1024];
    FILE *f = fopen("/proc/self/stat", "r");
    if (!f)
        return -1;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    /* The command name (field 2) is in parentheses and may hold spaces or ')'. */
    const char *p = strrchr(buf, ')');
    if (!p)
        return -1;
    /* fields 3-13 skipped, 14 utime, 15 stime, 16-21 skipped, 22 starttime, 23 vsize, 24 rss */
    return sscanf(p + 1, "%*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %llu %llu %*s %*s %*s %*s "
                         "%*s %*s %llu %llu %llu", &ps->utime, &ps->stime, &ps->starttime,
                  &ps->vsize, &ps->rss) == 5 ? 0 : -1;
}

/* Seconds since the epoch at boot (the btime line of /proc/stat); -1 when unknown. */
static long long boot_time(void)
{
    char line[256];
    long long bt = -1;
    FILE *f = fopen("/proc/stat", "r");
    if (!f)
        return -1;
    while (bt < 0 && fgets(line, sizeof line, f))
        if (sscanf(line, "btime %lld", &bt) != 1)
            bt = -1;
    fclose(f);
    return bt;
}

/* Entries of /proc/self/fd, the directory's own descriptor not counted; -1 if unreadable. */
static long open_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    if (!d)
        return -1;
    long n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        n += e->d_name[0] != '.';
    closedir(d);
    return n - 1;
}

/* One metric without labels, its value at its shortest round-trip form. */
static void metric(FILE *f, const char *name, const char *type, const char *help, double v)
{
    char num[KB_DOUBLE_BUF];
    fprintf(f, "# HELP %s %s\n# TYPE %s %s\n%s %s\n", name, help, name, type, name,
            kb_format_double(num, v));
}

/* The process_* metrics of the Prometheus client libraries; each only when readable. */
static void render_process(FILE *f)
{
    proc_stat ps;
    long ticks = sysconf(_SC_CLK_TCK), page = sysconf(_SC_PAGESIZE);
    long long bt = boot_time();
    if (read_proc_stat(&ps) == 0 && ticks > 0 && page > 0) {
        metric(f, "process_cpu_seconds_total", "counter",
               "Total user and system CPU time spent in seconds.",
               (double)(ps.utime + ps.stime) / (double)ticks);
        metric(f, "process_resident_memory_bytes", "gauge", "Resident memory size in bytes.",
               (double)ps.rss * (double)page);
        metric(f, "process_virtual_memory_bytes", "gauge", "Virtual memory size in bytes.",
               (double)ps.vsize);
        if (bt >= 0)
            metric(f, "process_start_time_seconds", "gauge",
                   "Start time of the process since unix epoch in seconds.",
                   (double)bt + (double)ps.starttime / (double)ticks);
    }
    long fds = open_fds();
    if (fds >= 0)
        metric(f, "process_open_fds", "gauge", "Number of open file descriptors.", (double)fds);
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
        metric(f, "process_max_fds", "gauge", "Maximum number of open file descriptors.",
               (double)rl.rlim_cur);
}

/* ------------------------------------------------------------ rendering */

char *metrics_render(size_t *len)
{
    char *buf = NULL;
    FILE *f = open_memstream(&buf, len);
    if (!f)
        return NULL;
    fputs("# HELP kbandit_build_info The daemon's version (value 1).\n"
          "# TYPE kbandit_build_info gauge\n"
          "kbandit_build_info{version=\"" KB_VERSION_STRING "\"} 1\n", f);
    fputs("# HELP kbandit_http_requests_total HTTP requests by route and status.\n"
          "# TYPE kbandit_http_requests_total counter\n", f);
    for (size_t r = 0; r < MAX_ROUTES; r++)
        for (int s = 0; s < N_STATUS; s++) {
            uint64_t n = atomic_load(&by_status[r][s]);
            if (!n)
                continue;
            fputs("kbandit_http_requests_total{", f);
            route_label(f, r);
            fprintf(f, ",status=\"%d\"} %llu\n", s, (unsigned long long)n);
        }
    fputs("# HELP kbandit_http_request_duration_seconds Request latency by route.\n"
          "# TYPE kbandit_http_request_duration_seconds histogram\n", f);
    for (size_t r = 0; r < MAX_ROUTES; r++) {
        uint64_t cum = 0, total = 0;
        for (size_t b = 0; b <= N_BUCKETS; b++)
            total += atomic_load(&hist[r][b]);
        if (!total)
            continue;
        for (size_t b = 0; b <= N_BUCKETS; b++) {
            cum += atomic_load(&hist[r][b]);
            fputs("kbandit_http_request_duration_seconds_bucket{", f);
            route_label(f, r);
            if (b < N_BUCKETS)
                fprintf(f, ",le=\"%g\"} %llu\n", buckets[b], (unsigned long long)cum);
            else
                fprintf(f, ",le=\"+Inf\"} %llu\n", (unsigned long long)cum);
        }
        fputs("kbandit_http_request_duration_seconds_sum{", f);
        route_label(f, r);
        fprintf(f, "} %.6f\n", (double)atomic_load(&sum_us[r]) * 1e-6);
        fputs("kbandit_http_request_duration_seconds_count{", f);
        route_label(f, r);
        fprintf(f, "} %llu\n", (unsigned long long)total);
    }
    registry_stats st;
    registry_stats_get(&st);
    fprintf(f, "# HELP kbandit_studies Live studies.\n# TYPE kbandit_studies gauge\n"
               "kbandit_studies %zu\n", st.studies);
    size_t restored, restoring, failed;
    registry_restore_counts(&restored, &restoring, &failed);
    fprintf(f, "# HELP kbandit_studies_restore Live studies by restore state, as /healthz counts them.\n"
               "# TYPE kbandit_studies_restore gauge\n"
               "kbandit_studies_restore{state=\"restored\"} %zu\n"
               "kbandit_studies_restore{state=\"restoring\"} %zu\n"
               "kbandit_studies_restore{state=\"failed\"} %zu\n", restored, restoring, failed);
    fputs("# HELP kbandit_trials Trials by state over all studies.\n"
          "# TYPE kbandit_trials gauge\n", f);
    for (int k = 0; k < TRIAL__STATES; k++)
        fprintf(f, "kbandit_trials{state=\"%s\"} %zu\n", proto_trial_state_name((trial_state)k),
                st.trials[k]);
    fprintf(f, "# HELP kbandit_resparsifications_total Engine epochs of all studies, deleted ones included.\n"
               "# TYPE kbandit_resparsifications_total counter\n"
               "kbandit_resparsifications_total %llu\n"
               "# HELP kbandit_engine_seconds_total Time spent in engine calls, deleted studies included.\n"
               "# TYPE kbandit_engine_seconds_total counter\n"
               "kbandit_engine_seconds_total %.6f\n"
               "# HELP kbandit_store_batches_total Write batches (transactions) of the group commit.\n"
               "# TYPE kbandit_store_batches_total counter\n"
               "kbandit_store_batches_total %llu\n"
               "# HELP kbandit_store_operations_total Write operations queued for group commit.\n"
               "# TYPE kbandit_store_operations_total counter\n"
               "kbandit_store_operations_total %llu\n"
               "# HELP kbandit_store_syncs_total WAL fsyncs making durable operations durable.\n"
               "# TYPE kbandit_store_syncs_total counter\n"
               "kbandit_store_syncs_total %llu\n"
               "# HELP kbandit_store_failed_writes_total Write batches, or operations queued after one, that failed (a full disk, an I/O error).\n"
               "# TYPE kbandit_store_failed_writes_total counter\n"
               "kbandit_store_failed_writes_total %llu\n",
            (unsigned long long)st.resparsifications, st.engine_sec,
            (unsigned long long)st.store_batches, (unsigned long long)st.store_ops,
            (unsigned long long)st.store_syncs, (unsigned long long)st.store_failed);
    fprintf(f, "# HELP kbandit_replay_adopted_asks_total Replayed asks adopted at study rebuilds: the engine chose another point than the one handed out (a newer kbandit).\n"
               "# TYPE kbandit_replay_adopted_asks_total counter\n"
               "kbandit_replay_adopted_asks_total %llu\n",
            (unsigned long long)study_adopted_total());
    fprintf(f, "# HELP kbandit_connections_evicted_total Connections closed to make room at --max-connections.\n"
               "# TYPE kbandit_connections_evicted_total counter\n"
               "kbandit_connections_evicted_total %llu\n", conn_guard_evicted());
    fprintf(f, "# HELP kbandit_connections_header_timeouts_total Connections closed because their request headers took longer than --header-timeout-s.\n"
               "# TYPE kbandit_connections_header_timeouts_total counter\n"
               "kbandit_connections_header_timeouts_total %llu\n", conn_guard_header_timeouts());
    fprintf(f, "# HELP kbandit_body_memory_bytes Bytes request bodies being read or parsed hold (their estimate against --max-body-memory).\n"
               "# TYPE kbandit_body_memory_bytes gauge\n"
               "kbandit_body_memory_bytes %zu\n"
               "# HELP kbandit_body_memory_refused_total Requests answered 503 because --max-body-memory was spent.\n"
               "# TYPE kbandit_body_memory_refused_total counter\n"
               "kbandit_body_memory_refused_total %llu\n", bodymem_held(), bodymem_refused());
    render_process(f);
    fclose(f);
    return buf;
}
