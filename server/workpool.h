/*
 * workpool.h - the request workers: a fixed pool of threads that runs the handlers of
 * the authenticated routes, so that libmicrohttpd's own threads only read requests and
 * send answers. Why: a handler runs engine code for as long as it takes (a 300-point
 * gp-ucb ask took 8.3 s, an sgp-ts ask after 5,000 observations seconds), and on one of
 * libmicrohttpd's threads it held every other connection of that thread, /healthz and
 * /metrics included (healthz waited 18 s behind one busy study: ops and worker-fleet
 * reviews, fifty-seventh session).
 *
 * Jobs run in arrival order, except that at most lane_cap of them run at once per lane
 * (a study's id, or another nonzero lane the caller names; lane 0 has no cap): requests
 * for one study wait in the queue, not in a worker blocked on the study's mutex, so a
 * busy study leaves the other workers to the other studies.
 *
 * Thread safety: every function may be called from any thread. The queue and the
 * workers' lanes are protected by one mutex, held to link or unlink a job (a scan of
 * the queue up to the first job whose lane has room, and of the workers' lanes).
 */
#ifndef KB_WORKPOOL_H
#define KB_WORKPOOL_H

#include <stddef.h>
#include <stdint.h>

/* Embedded in the caller's job; the pool links it and hands it back to `run`. */
typedef struct wp_job {
    struct wp_job *next;
    int64_t lane;
} wp_job;

/* Starts `threads` workers calling run(job) for each pushed job. 0, or -1 with why. */
int wp_start(unsigned threads, unsigned lane_cap, void (*run)(wp_job *), char *why,
             size_t why_len);
/* Queues j (j->lane set by the caller). -1 once wp_drain began: j is not queued. */
int wp_push(wp_job *j);
/* Refuses new jobs, runs the queued ones, and joins the workers. */
void wp_drain(void);

#endif /* KB_WORKPOOL_H */
