/*
 * metrics.c - This file contains the request counters and latency histograms, kept in
 * fixed arrays of atomics indexed by route (so recording never takes a lock), and the
 * Prometheus text rendering.
 */
#include "metrics.h"

#include "http.h"
#include "study.h"

#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

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

char *metrics_render(size_t *len)
{
    char *buf = NULL;
    FILE *f = open_memstream(&buf, len);
    if (!f)
        return NULL;
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
    fputs("# HELP kbandit_trials Trials by state over all studies.\n"
          "# TYPE kbandit_trials gauge\n", f);
    for (int k = 0; k < TRIAL__STATES; k++)
        fprintf(f, "kbandit_trials{state=\"%s\"} %zu\n", proto_trial_state_name((trial_state)k),
                st.trials[k]);
    fprintf(f, "# HELP kbandit_resparsifications_total Engine epochs over live studies.\n"
               "# TYPE kbandit_resparsifications_total counter\n"
               "kbandit_resparsifications_total %llu\n"
               "# HELP kbandit_engine_seconds_total Time spent in engine calls.\n"
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
               "kbandit_store_syncs_total %llu\n",
            (unsigned long long)st.resparsifications, st.engine_sec,
            (unsigned long long)st.store_batches, (unsigned long long)st.store_ops,
            (unsigned long long)st.store_syncs);
    fclose(f);
    return buf;
}
