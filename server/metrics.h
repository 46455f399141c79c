/*
 * metrics.h - Prometheus metrics of the daemon: requests by route and status, latency
 * histograms by route (recorded by http.c), and gauges read from the registry at
 * scrape time (studies, trials by state, resparsifications, engine seconds).
 */
#ifndef KB_METRICS_H
#define KB_METRICS_H

#include <stddef.h>

/* route: index in kb_routes, or -1 for requests that matched no route. */
void metrics_request(int ri, int status, double seconds);
/* The text exposition format (version 0.0.4); malloc'd. */
char *metrics_render(size_t *len);

#endif /* KB_METRICS_H */
