/*
 * study_write.c - This file contains what every operation on a study shares: locking it
 * (restoring it first when needed), the trial helpers, and the write path: a mutation
 * changes the engine and memory, queues its events and trial rows as one write of the
 * store (begin .. finish), releases the study's mutex and then waits for the commit
 * (study_unlock_settle), or leaves the wait to the HTTP layer (deferred waits).
 *
 * Invariant: a write is queued after the study's previous one; when one fails, memory
 * is rebuilt from the store (study_abort_txn, or the waiter of the failed ticket), so
 * memory never keeps what the disk lost. The full invariants are in study_internal.h.
 */
#include "study_internal.h"

#include "log.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Stores a snapshot of the engine at s->seq (inside the caller's transaction). */
int study_write_snapshot(study *s)
{
    unsigned char *bytes;
    size_t len;
    kb_error kerr;
    if (kb_engine_snapshot(s->engine, &bytes, &len, &kerr))
        return -1;
    int rc = store_snapshot_put(registry.cfg.db, s->id, s->seq, bytes, len, now_ms());
    free(bytes);
    if (rc == 0)
        s->snap_seq = s->seq;
    return rc;
}

/* Dictionary row on an epoch change, periodic snapshot; then the operation is queued
 * for COMMIT (s->ticket): the caller waits for it with study_unlock_settle. */
int study_finish_txn(study *s)
{
    uint64_t epoch = study_engine_count(s, "epoch");
    if (epoch != s->epoch) {
        uint64_t dict_size = study_engine_count(s, "dict_size");
        if (store_dictionary_put(registry.cfg.db, s->id, epoch, dict_size,
                                 study_engine_count(s, "last_batch"), s->seq, now_ms()))
            return -1;
        log_json(LOG_DEBUG, "resparsified",
                 json_pack("{s:I,s:I,s:I}", "study", (json_int_t)s->id, "epoch",
                           (json_int_t)epoch, "dict_size", (json_int_t)dict_size));
    }
    if (s->seq - s->snap_seq >= registry.cfg.snapshot_every && study_write_snapshot(s))
        return -1;
    uint64_t ticket;
    if (store_commit_async(registry.cfg.db, s->ticket, &ticket))
        return -1;
    s->ticket = ticket;
    if (s->writing_durable)
        s->durable = ticket;
    s->epoch = epoch;
    if (epoch > s->epoch_high)
        s->epoch_high = epoch;
    return 0;
}

/* 503: the write may succeed later (a full disk freed, an I/O error gone), the study's
 * memory was rebuilt from the store, and the client may retry (tells are exactly-once). */
static int fail_write(api_error *err)
{
    return api_fail(err, API_UNAVAILABLE, NULL,
                    "database write failed (disk full or I/O error); nothing was applied, retry");
}

/* After a failed write: roll back and rebuild memory from the store. */
int study_abort_txn(study *s, api_error *err)
{
    store_rollback(registry.cfg.db);
    study_resync(s);
    return fail_write(err);
}

/* Opens a queued write operation for s (s->mu held), which study_finish_txn queues after the
 * study's previous one. When that one already failed and nobody rebuilt the study yet,
 * memory holds changes the store lost: refuse (-1); the caller's study_abort_txn rebuilds. */
int study_begin_write(study *s, int durable)
{
    if (store_ticket_failed(registry.cfg.db, s->ticket))
        return -1;
    s->writing_durable = durable;
    return store_begin_queued(registry.cfg.db, durable);
}

/* This thread's deferred commit wait (study_defer_begin): the study and the largest
 * ticket its answers so far depend on. initial-exec: the objects are built with -fPIC,
 * but only ever linked into executables (no __tls_get_addr, no ld.so dependency). */
static _Thread_local __attribute__((tls_model("initial-exec"))) struct {
    int on;
    study *s;
    uint64_t ticket, durable;
} defer;

/* Waits for the commit of ticket and the fsync of durable (<= ticket; 0: none), s->mu
 * not held. Returns rc, or -1 with err (a 503) when the commit failed; then s is
 * rebuilt unless a later write did it. A failed durable write fails every later write
 * of the study too (each is queued `after` the previous one), so checking ticket is
 * enough. */
static int settle(study *s, uint64_t ticket, uint64_t durable, int rc, api_error *err)
{
    if (!ticket || (store_wait(registry.cfg.db, ticket, 0) == 0 &&
                    (!durable || store_wait(registry.cfg.db, durable, 1) == 0)))
        return rc;
    pthread_mutex_lock(&s->mu);
    if (!s->deleted && s->ticket == ticket)
        study_resync(s);
    pthread_mutex_unlock(&s->mu);
    return fail_write(err);
}

/* Ends an operation on s: releases s->mu, then waits for the commit of the study's
 * last write, which is the operation's own or one its answer depends on (a repeated
 * tell of a trial whose tell is in flight, a read), and unless relaxed for the fsync
 * of its last durable write; unless the wait is deferred. */
static int unlock_answer(study *s, int rc, int relaxed, api_error *err)
{
    uint64_t ticket = s->ticket, durable = relaxed ? 0 : s->durable;
    pthread_mutex_unlock(&s->mu);
    if (!defer.on)
        return settle(s, ticket, durable, rc, err);
    if (ticket && ticket >= defer.ticket) {
        if (defer.s != s) {
            atomic_fetch_add(&s->refs, 1);
            study_put(defer.s);
            defer.s = s;
        }
        defer.ticket = ticket;
    }
    if (durable > defer.durable)
        defer.durable = durable;
    return rc;
}

int study_unlock_settle(study *s, int rc, api_error *err)
{
    return unlock_answer(s, rc, 0, err);
}

/* For answers that show no state a relaxed write does not already depend on. */
int study_unlock_settle_relaxed(study *s, int rc, api_error *err)
{
    return unlock_answer(s, rc, 1, err);
}

void study_defer_begin(void)
{
    defer.on = 1;
}

int study_defer_end(study_pending *p)
{
    int wait = defer.on && defer.ticket;
    if (wait) {
        p->s = defer.s;
        p->ticket = defer.ticket;
        p->durable = defer.durable;
    } else {
        study_put(defer.s);
    }
    defer.on = 0;
    defer.s = NULL;
    defer.ticket = defer.durable = 0;
    return wait;
}

int study_pending_ready(const study_pending *p)
{
    return store_ticket_done(registry.cfg.db, p->ticket, p->durable);
}

int study_pending_failed(const study_pending *p)
{
    return store_ticket_failed(registry.cfg.db, p->ticket) ||
           (p->durable && store_ticket_failed(registry.cfg.db, p->durable));
}

int study_pending_finish(study_pending *p, api_error *err)
{
    int rc = settle(p->s, p->ticket, p->durable, 0, err);
    study_put(p->s);
    p->s = NULL;
    return rc;
}

int study_append_event(study *s, char kind, int64_t trial_id, double value, const double *x)
{
    store_event ev = {.seq = s->seq + 1, .kind = kind, .trial_id = trial_id, .value = value,
                      .x = x};
    if (store_event_append(registry.cfg.db, s->id, &ev, s->spec.dim))
        return -1;
    s->seq++;
    return 0;
}

/* Locks s and checks it is not deleted; 0 ok (locked) or -1 (unlocked, 404). */
int study_lock_undeleted(study *s, api_error *err)
{
    pthread_mutex_lock(&s->mu);
    if (!s->deleted)
        return 0;
    pthread_mutex_unlock(&s->mu);
    return api_fail(err, API_NOT_FOUND, NULL, "study %lld not found", (long long)s->id);
}

/* Locks s for an operation, restoring it first if it is not yet; 0 ok (locked) or -1
 * (unlocked: 404 deleted, 503 while its rebuild waits for a retry, 500 when its history
 * cannot be replayed). */
int study_lock_live(study *s, api_error *err)
{
    if (study_lock_undeleted(s, err))
        return -1;
    int state = study_ensure_restored(s, "request");
    if (state == RESTORED)
        return 0;
    double wait = s->retry_at - mono_sec();
    pthread_mutex_unlock(&s->mu);
    if (state == RESTORE_RETRY) {
        int secs = wait > 0 ? (int)ceil(wait) : 0;
        api_fail(err, API_UNAVAILABLE, NULL,
                 "study %lld could not be read from the database; the rebuild is retried in "
                 "%d s (see the daemon's log)", (long long)s->id, secs);
        if (err)
            err->retry_after_s = secs;
        return -1;
    }
    return api_fail(err, API_INTERNAL, NULL,
                    "study %lld cannot be restored from the database (see the daemon's log)",
                    (long long)s->id);
}

trial_rec *study_find_trial(study *s, int64_t id, api_error *err)
{
    if (id < 1 || (size_t)id > s->n_trials) {
        api_fail(err, API_NOT_FOUND, NULL, "trial %lld not found", (long long)id);
        return NULL;
    }
    return &s->trials[id - 1];
}

trial_rec *study_find_pending(study *s, int64_t id, api_error *err)
{
    trial_rec *t = study_find_trial(s, id, err);
    if (t && t->state != TRIAL_PENDING) {
        api_fail(err, API_CONFLICT, NULL, "trial %lld is %s", (long long)id,
                 proto_trial_state_name(t->state));
        return NULL;
    }
    return t;
}

int study_trial_copy(const study *s, const trial_rec *t, trial_rec *out, api_error *err)
{
    if (trial_rec_copy(out, t, s->spec.dim) == 0)
        return 0;
    memset(out, 0, sizeof *out);
    return api_fail(err, API_INTERNAL, NULL, "out of memory");
}

/* Ends a one-trial operation (s->mu held): copies t (NULL: rc is -1 with err) into
 * *out, releases s->mu and waits for the commit the answer depends on. */
int study_answer_trial(study *s, const trial_rec *t, int relaxed, trial_rec *out,
                       api_error *err)
{
    int rc = t ? study_trial_copy(s, t, out, err) : -1;
    rc = relaxed ? study_unlock_settle_relaxed(s, rc, err) : study_unlock_settle(s, rc, err);
    if (rc)
        trial_rec_clear(out);
    return rc;
}

/* Moves t to a new state, keeping counts and best in step. */
void study_set_state(study *s, trial_rec *t, trial_state st)
{
    s->counts[t->state]--;
    t->state = st;
    s->counts[st]++;
    if (st == TRIAL_COMPLETED && (!s->best || study_better(s, t->value, s->trials[s->best - 1].value)))
        s->best = t->id;
}

/* Records an applied tell or abandon (inside the transaction). */
static int record(study *s, const trial_rec *t, char kind)
{
    return study_append_event(s, kind, t->id, kind == 't' ? study_engine_value(s, t->value) : 0, NULL) ||
                   store_trial_put(registry.cfg.db, s->id, t, s->spec.dim)
               ? -1 : 0;
}

/* Makes the applied changes of trials ts[0..n) durable (s->mu held); on failure the
 * study is rebuilt from the store and -1 returned with err. */
int study_persist(study *s, trial_rec *const *ts, const char *kinds, size_t n, int durable,
                   api_error *err)
{
    if (study_begin_write(s, durable))
        return study_abort_txn(s, err);
    for (size_t i = 0; i < n; i++)
        if (record(s, ts[i], kinds[i]))
            return study_abort_txn(s, err);
    return study_finish_txn(s) ? study_abort_txn(s, err) : 0;
}

/* The engine forgets a pending trial (failed or expired); memory follows. */
int study_abandon_apply(study *s, trial_rec *t, trial_state to)
{
    kb_error kerr;
    if (kb_engine_abandon(s->engine, (uint64_t)t->id, &kerr))
        return -1;
    study_set_state(s, t, to);
    return 0;
}
