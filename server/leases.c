/*
 * leases.c - This file contains the leases of pending trials: the sweep that expires the
 * trials whose lease passed (abandoned in the engine, recorded, long-polls woken) and
 * heartbeats, which extend a lease by the study's lease_seconds.
 *
 * Invariants: an expiry and a heartbeat are relaxed writes (committed, not fsynced: an
 * expiry lost to a power cut happens again, a lost heartbeat only shortens a lease);
 * the sweep never waits for a study being restored (such a study has no trials yet).
 */
#include "study_internal.h"

#include "log.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

int study_heartbeat(study *s, int64_t trial_id, trial_rec *out, api_error *err)
{
    memset(out, 0, sizeof *out);
    if (study_lock_live(s, err))
        return -1;
    trial_rec *t = study_find_pending(s, trial_id, err);
    if (t) {
        int64_t old = t->lease_ms;
        t->lease_ms = now_ms() + s->spec.lease_seconds * 1000;
        if (study_begin_write(s, 0) || store_trial_put(registry.cfg.db, s->id, t, s->spec.dim) ||
            study_finish_txn(s)) {
            t->lease_ms = old;
            study_abort_txn(s, err);
            t = NULL;
        }
    }
    return study_answer_trial(s, t, 1, out, err);
}

/* Sweeps that pass over a busy study before they wait for it, SWEEP_WAIT_MS at most each
 * time: SWEEP_SKIPS_MAX x the sweep period (200 ms by default, 5 s). */
#define SWEEP_SKIPS_MAX 25
#define SWEEP_WAIT_MS 50

/* Takes s->mu for a sweep: a busy study is passed over, so that its operations (a batch
 * call may hold it for minutes) do not hold up the expiries of every other study (a 1-s
 * lease expired 5.6 s late behind another study's ask: worker-fleet review, fifty-seventh
 * session). One found busy SWEEP_SKIPS_MAX sweeps in a row, whose mutex a stream of
 * operations may never leave free at the instant of a sweep, is waited for a little at
 * each sweep after that, never for a whole operation (a wait without a bound brought the
 * stall back behind a 20-s ask: review of the change). */
static int sweep_lock(study *s)
{
    int rc;
    if (s->sweep_skips < SWEEP_SKIPS_MAX) {
        rc = pthread_mutex_trylock(&s->mu);
    } else {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_nsec += SWEEP_WAIT_MS * 1000000L;
        until.tv_sec += until.tv_nsec / 1000000000L;
        until.tv_nsec %= 1000000000L;
        rc = pthread_mutex_timedlock(&s->mu, &until);
    }
    if (rc == 0) {
        s->sweep_skips = 0;
        return 0;
    }
    if (s->sweep_skips < SWEEP_SKIPS_MAX)
        s->sweep_skips++;
    return -1;
}

static size_t sweep_study(study *s, int64_t now)
{
    if (atomic_load(&s->restore) != RESTORED) /* nothing to expire yet; never wait for it */
        return 0;
    if (sweep_lock(s))
        return 0;
    if (s->deleted || atomic_load(&s->restore) != RESTORED || !s->counts[TRIAL_PENDING]) {
        pthread_mutex_unlock(&s->mu);
        return 0;
    }
    while (s->first_pending < s->n_trials && s->trials[s->first_pending].state != TRIAL_PENDING)
        s->first_pending++;
    size_t n = 0, cap = 0;
    trial_rec **ts = NULL;
    char *kinds = NULL;
    api_error err;
    for (size_t i = s->first_pending; i < s->n_trials; i++) {
        trial_rec *t = &s->trials[i];
        if (t->state != TRIAL_PENDING || t->lease_ms > now)
            continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 16;
            trial_rec **nt = realloc(ts, cap * sizeof *ts);
            char *nk = realloc(kinds, cap);
            if (nt)
                ts = nt;
            if (nk)
                kinds = nk;
            if (!nt || !nk)
                break;
        }
        if (study_abandon_apply(s, t, TRIAL_EXPIRED)) {
            study_abort_txn(s, &err);
            n = 0;
            break;
        }
        kinds[n] = 'b';
        ts[n++] = t;
    }
    /* Expiry needs no fsync of its own: lost to a power cut, it simply happens again. */
    if (n && study_persist(s, ts, kinds, n, 0, &err))
        n = 0;
    if (n) {
        study_wake(s);
        log_json(LOG_INFO, "leases expired",
                 json_pack("{s:I,s:I}", "study", (json_int_t)s->id, "count", (json_int_t)n));
    }
    free(ts);
    free(kinds);
    return study_unlock_settle_relaxed(s, 0, &err) == 0 ? n : 0;
}

size_t registry_sweep(int64_t now)
{
    size_t n, total = 0;
    study **v = reg_all(&n, NULL);
    for (size_t i = 0; i < n; i++)
        total += sweep_study(v[i], now);
    reg_put_all(v, n);
    return total;
}
