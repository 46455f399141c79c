/*
 * workpool.c - This file contains the request workers of workpool.h: a FIFO queue of
 * jobs, threads that take the first job whose lane has room, and the drain at shutdown.
 *
 * Invariants (pool.lock): head..tail is the queue in arrival order; busy[i] is the lane
 * of the job worker i runs, or NO_LANE; a job is taken only when fewer than lane_cap
 * workers run its lane (lane 0: always); once draining, nothing is queued and a worker
 * exits when the queue is empty.
 */
#include "workpool.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NO_LANE INT64_MIN

static struct {
    pthread_mutex_t lock;
    pthread_cond_t cv; /* a job was queued, a lane freed, or draining began */
    wp_job *head, *tail;
    int64_t *busy;
    pthread_t *threads;
    unsigned n, started, lane_cap;
    int draining;
    void (*run)(wp_job *);
} pool = {.lock = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

static unsigned running_in(int64_t lane)
{
    unsigned k = 0;
    for (unsigned i = 0; i < pool.n; i++)
        k += pool.busy[i] == lane;
    return k;
}

/* Unlinks and returns the first job whose lane has room, or NULL; pool.lock held. */
static wp_job *take(void)
{
    for (wp_job **p = &pool.head, *prev = NULL; *p; prev = *p, p = &(*p)->next) {
        wp_job *j = *p;
        if (j->lane != 0 && running_in(j->lane) >= pool.lane_cap)
            continue;
        *p = j->next;
        if (pool.tail == j)
            pool.tail = prev;
        j->next = NULL;
        return j;
    }
    return NULL;
}

static void *worker_main(void *arg)
{
    unsigned me = (unsigned)(uintptr_t)arg;
    pthread_mutex_lock(&pool.lock);
    for (;;) {
        wp_job *j = take();
        if (!j) {
            if (pool.draining && !pool.head)
                break;
            pthread_cond_wait(&pool.cv, &pool.lock);
            continue;
        }
        pool.busy[me] = j->lane;
        pthread_mutex_unlock(&pool.lock);
        pool.run(j); /* j may be freed by another thread from here on */
        pthread_mutex_lock(&pool.lock);
        pool.busy[me] = NO_LANE;
        pthread_cond_broadcast(&pool.cv); /* the lane has room again */
    }
    pthread_mutex_unlock(&pool.lock);
    return NULL;
}

int wp_start(unsigned threads, unsigned lane_cap, void (*run)(wp_job *), char *why,
             size_t why_len)
{
    pool.busy = malloc(threads * sizeof *pool.busy);
    pool.threads = malloc(threads * sizeof *pool.threads);
    if (!pool.busy || !pool.threads) {
        snprintf(why, why_len, "out of memory");
        goto fail;
    }
    pool.n = threads;
    pool.lane_cap = lane_cap;
    pool.run = run;
    pool.head = pool.tail = NULL;
    pool.draining = 0;
    for (unsigned i = 0; i < threads; i++)
        pool.busy[i] = NO_LANE;
    for (pool.started = 0; pool.started < threads; pool.started++) {
        int rc = pthread_create(&pool.threads[pool.started], NULL, worker_main,
                                (void *)(uintptr_t)pool.started);
        if (rc) {
            snprintf(why, why_len, "cannot start a request worker thread: %s", strerror(rc));
            wp_drain();
            return -1;
        }
        pthread_setname_np(pool.threads[pool.started], "kb-worker");
    }
    return 0;
fail:
    free(pool.busy);
    free(pool.threads);
    pool.busy = NULL;
    pool.threads = NULL;
    return -1;
}

int wp_push(wp_job *j)
{
    pthread_mutex_lock(&pool.lock);
    int refused = pool.draining;
    if (!refused) {
        j->next = NULL;
        if (pool.tail)
            pool.tail->next = j;
        else
            pool.head = j;
        pool.tail = j;
        pthread_cond_broadcast(&pool.cv); /* a signal could wake a worker whose lane is full */
    }
    pthread_mutex_unlock(&pool.lock);
    return refused ? -1 : 0;
}

void wp_drain(void)
{
    pthread_mutex_lock(&pool.lock);
    pool.draining = 1;
    pthread_cond_broadcast(&pool.cv);
    pthread_mutex_unlock(&pool.lock);
    for (unsigned i = 0; i < pool.started; i++)
        pthread_join(pool.threads[i], NULL);
    free(pool.busy);
    free(pool.threads);
    pool.busy = NULL;
    pool.threads = NULL;
    pool.started = pool.n = 0;
}
