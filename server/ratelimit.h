/*
 * ratelimit.h - a limiter of repeated log lines (issue 16 follow-up): at most one line per
 * kind of message per period, the lines dropped meanwhile counted and reported with the
 * next line of that kind. Under attack libmicrohttpd logged one line per few evicted
 * connections (about 17,000 lines in 20 s with 5,000 hostile connections).
 *
 * A kind is a pointer that stays the same for every message of that kind (libmicrohttpd's
 * format string: one per call site). Thread-safe: one mutex per limiter, held for a table
 * scan of at most RATE_LIMIT_KINDS entries.
 */
#ifndef KB_RATELIMIT_H
#define KB_RATELIMIT_H

#include <pthread.h>
#include <stddef.h>

#define RATE_LIMIT_KINDS 64

typedef struct rate_limit {
    pthread_mutex_t lock;
    double period; /* seconds between two lines of one kind */
    struct {
        const void *kind;
        double last;              /* when its last line was let through */
        unsigned long suppressed; /* lines dropped since then */
    } slot[RATE_LIMIT_KINDS];
    size_t n;
} rate_limit;

#define RATE_LIMIT_INIT(seconds) {.lock = PTHREAD_MUTEX_INITIALIZER, .period = (seconds)}

/* 1: log this line now, *suppressed set to the lines of its kind dropped since the last
 * one logged; 0: drop it (counted). now: monotonic seconds. When the table is full, a new
 * kind takes the slot of the kind logged longest ago (whose dropped count is lost). */
int rate_limit_pass(rate_limit *rl, const void *kind, double now, unsigned long *suppressed);

#endif /* KB_RATELIMIT_H */
