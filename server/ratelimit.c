/*
 * ratelimit.c - This file contains the limiter of repeated log lines declared in
 * ratelimit.h.
 *
 * Invariants (under rl->lock): slot[0 .. n) hold distinct kinds; a kind's `last` is the
 * time its last line was let through, and `suppressed` counts the lines dropped since.
 */
#include "ratelimit.h"

#include <math.h>

/* The slot of kind, or a free / reclaimed one set up for it (never NULL). */
static size_t slot_of(rate_limit *rl, const void *kind)
{
    size_t oldest = 0;
    for (size_t i = 0; i < rl->n; i++) {
        if (rl->slot[i].kind == kind)
            return i;
        if (rl->slot[i].last < rl->slot[oldest].last)
            oldest = i;
    }
    size_t i = rl->n < RATE_LIMIT_KINDS ? rl->n++ : oldest;
    rl->slot[i].kind = kind;
    rl->slot[i].last = -INFINITY; /* a new kind's first line always passes */
    rl->slot[i].suppressed = 0;
    return i;
}

int rate_limit_pass(rate_limit *rl, const void *kind, double now, unsigned long *suppressed)
{
    pthread_mutex_lock(&rl->lock);
    size_t i = slot_of(rl, kind);
    int pass = now - rl->slot[i].last >= rl->period;
    if (pass) {
        *suppressed = rl->slot[i].suppressed;
        rl->slot[i].suppressed = 0;
        rl->slot[i].last = now;
    } else {
        rl->slot[i].suppressed++;
    }
    pthread_mutex_unlock(&rl->lock);
    return pass;
}
