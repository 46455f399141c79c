/*
 * study_internal.h - This file contains what the files of a live study share and nothing
 * outside them sees: the study struct and its invariants, the registry's state, and the
 * private functions of registry.c, rebuild.c, study_write.c, leases.c and study.c.
 *
 * Files: registry.c (the array of live studies, lookup, reference counting, listing,
 * background restore scheduling, open/close, statistics); rebuild.c (a study's engine
 * and trials rebuilt from the store: recovery at start-up or on first use, and repair
 * after a failed commit); study_write.c (locking a study for an operation, the write
 * path every mutation shares, commit waits and their deferral); leases.c (the expiry
 * sweeper and heartbeats); study.c (the operations: create, delete, ask, tell, fail,
 * observe, reads, exports).
 *
 * Start-up (issue 16): registry_open only registers the stored studies (their specs), so
 * the daemon serves at once; their engines and trials are restored by restore threads in
 * id order, or by the first operation on a study that is not restored yet, whichever
 * takes the study's mutex first (so a study is restored exactly once, by the same
 * study_rebuild as any other time, hence with the same asks).
 *
 * Invariants, for a study s with s->mu held:
 *   - unless s->restore == RESTORED, nothing but the spec is loaded (or only its name,
 *     see stored_config): only study_lock_live (which restores), delete and shutdown
 *     touch such a study, and listings show it without progress;
 *   - s->engine is exactly the engine obtained by replaying the study's events 1..s->seq
 *     in the store, and s->trials[i] mirrors the trials row of id i + 1 (trial id ==
 *     engine handle);
 *   - a mutation changes the engine first, then queues its trial rows and events as one
 *     write operation of the store (group commit) and takes its ticket; s->mu is
 *     released before the commit, which the operation then waits for
 *     (study_unlock_settle), so the mutations of one study share an fsync instead of
 *     queueing behind each other's. Memory may thus run ahead of disk only by writes
 *     already queued, in order, and every answer waits for the commit of the study's
 *     last write (s->ticket) and for the fsync of its last durable write (s->durable)
 *     first, so nothing is acknowledged, and no state shown, before it is durable.
 *     Relaxed answers (ask, heartbeat, expiry) wait for the commit only: their own write
 *     needs no fsync, and the commit alone survives a kill of the process, so a trial is
 *     never handed out twice; they never wait for the fsync of another client's tell;
 *   - if a commit fails, the study is rebuilt from the store (which still holds the state
 *     before the failed batch): by the waiter of the failed ticket, or by the next write,
 *     which checks its predecessor's ticket before queueing (study_begin_write); if
 *     the store cannot be read then, the study stays registered in RESTORE_RETRY and
 *     the next operation after the backoff rebuilds it (never taken offline: 404 is
 *     for studies that do not exist);
 *   - values told to the engine are negated for minimize studies (engines maximize);
 *     trial values are kept in the user's direction.
 */
#ifndef KB_STUDY_INTERNAL_H
#define KB_STUDY_INTERNAL_H

#include "study.h"

#include <pthread.h>
#include <stdatomic.h>

typedef enum restore_state {
    RESTORE_PENDING = 0, /* registered from the store; engine and trials not loaded yet */
    RESTORED,            /* loaded (a study created by this process is born so) */
    RESTORE_FAILED,      /* its events did not replay exactly (logged): answers 500 */
    RESTORE_RETRY,       /* the store could not be read (logged): answers 503 until a
                            rebuild, tried again after retry_at, succeeds */
    RESTORE__STATES
} restore_state;

struct study {
    /* Immutable after creation: readable without a lock. */
    int64_t id;
    int64_t created_ms;
    study_spec spec;
    atomic_int refs;
    atomic_uint_fast64_t version; /* bumped on feedback, delete and shutdown */

    pthread_mutex_t mu; /* protects every field below */
    kb_engine *engine;
    trial_rec *trials;  /* trials[i].id == i + 1 */
    size_t n_trials, cap_trials;
    size_t first_pending; /* no pending trial below this index (sweeper hint) */
    size_t counts[TRIAL__STATES];
    int64_t best;       /* id of the best completed trial, 0 when none */
    int64_t seq;        /* last event seq written */
    int64_t snap_seq;   /* seq of the stored snapshot */
    uint64_t epoch;     /* engine epoch at the last dictionary row */
    uint64_t epoch_high; /* highest epoch seen: a rebuild to an older one does not lower it */
    uint64_t ticket;    /* store ticket of the last write (0: none since the rebuild) */
    uint64_t durable;   /* ticket of the last durable write (0: none since the rebuild) */
    int writing_durable; /* the write being recorded (begin_write .. finish_txn) */
    double engine_sec;  /* cumulated engine call time */
    int deleted;
    /* A study_state, changed under mu once its row is committed (study_change_state), so
     * it never shows what the store does not have; read without mu by listings, which
     * must not wait behind a restore. */
    atomic_int state;
    /* A restore_state, changed under mu; read without it where waiting behind a restore
     * (seconds) must be avoided: listing, sweeps, statistics; those that then take mu
     * check it again, since a failed write's rebuild can leave RESTORED for RESTORE_RETRY. */
    atomic_int restore;
    double retry_at;    /* RESTORE_RETRY: mono_sec() before which no rebuild is tried */
    double retry_wait;  /* the backoff behind retry_at (0: no rebuild failed since success) */
    /* A study whose spec could not be loaded at registration (its config or candidate set
     * unreadable for a moment: out of memory, a read error) keeps its stored config here
     * and only its name in spec; its rebuild loads the rest first. spec_loaded (read
     * without mu by listings, which leave such a study out) is 0 until then. */
    char *stored_config;
    atomic_int spec_loaded;
    /* Read and written by the lease sweeper's thread alone (sweep_study): sweeps that
     * found the study busy in a row. */
    unsigned sweep_skips;
    /* What /metrics last read of the study under mu (registry_stats_get), shown while an
     * operation holds mu: a scrape never waits for one (it held up libmicrohttpd's thread,
     * and /healthz with it, for a whole ask: review of the fifty-seventh session). */
    pthread_mutex_t stats_mu; /* protects the three fields below */
    size_t stats_counts[TRIAL__STATES];
    uint64_t stats_epochs;
    double stats_engine_sec;
};

/* The counters of /metrics that are sums over studies. */
typedef struct counter_totals {
    uint64_t resparsifications;
    double engine_sec;
} counter_totals;

struct registry_state {
    pthread_rwlock_t lock; /* protects v, n, cap and retired (not the studies themselves) */
    study **v;             /* sorted by id */
    size_t n, cap;
    /* Counters of the studies removed from v, folded in by the removal itself, so that a
     * scrape sees each study exactly once (live in its copy of v, or here) and the totals
     * never go down when a study is deleted. */
    counter_totals retired;
    registry_config cfg;   /* set once in registry_open */
    atomic_int closing;
    pthread_mutex_t count_lock;          /* protects by_restore */
    size_t by_restore[RESTORE__STATES]; /* live studies in each restore state (/healthz) */
};

extern struct registry_state registry;

/* ------------------------------------------------------------ registry.c */

/* A live study changes restore state: from < 0 when it enters the registry, to < 0 when
 * it leaves it (s->mu held, so each study's moves are in order). */
void reg_count_restore(int from, int to);
int reg_insert(study *s);
/* Removes s (s->mu held, s out of service: deleted or closing, so its counters
 * are final) and folds its counters into the retired totals. */
void reg_remove(study *s);
/* References to every live study (caller gives them back with reg_put_all), and when
 * retired is not NULL the retired totals at the same instant. */
study **reg_all(size_t *n, counter_totals *retired);
void reg_put_all(study **v, size_t n);
/* Fast path of the name check; the UNIQUE constraint in the store is the real guard. */
int64_t reg_name_owner(const char *name); /* its study id, 0: none */
void study_free(study *s);
/* Feedback arrived: bumps the version, then wakes long-polls. Callers hold s->mu, but
 * for the shutdown's wake-up (registry_shutting_down): the version is atomic and the
 * wait list has its own lock. */
void study_wake(study *s);

/* ------------------------------------------------------------ rebuild.c */

kb_engine *study_engine_new(const study_spec *sp, api_error *err);
/* Loads the rows of a candidate_set reference into the spec. */
int study_load_candidates(study_spec *sp, api_error *err);
int study_trials_reserve(study *s, size_t need);
int study_better(const study *s, double a, double b);
/* The engine's figure `name` (kb_engine_stat) as a count; 0 ("not applicable") when the
 * engine has none, as the progress shows every engine alike. */
uint64_t study_engine_count(const study *s, const char *name);
/* Rebuilds engine and trials of s from the store (s->mu held or s unpublished): 0,
 * REBUILD_RETRY or REBUILD_REJECTED (logged). */
int study_rebuild(study *s);
/* A study not yet published, taking over *spec (cleared), with one reference. */
study *study_alloc(int64_t id, int64_t created_ms, study_spec *spec);
/* store_studies_each callback: registers a stored study, restore pending. */
int study_load_stored(void *ud, int64_t id, const char *name, const char *config,
                      int64_t created_ms, const char *state);
/* study_rebuild's failures: the store could not be read (worth a retry), or the engine
 * rejected the stored history (no use retrying). */
#define REBUILD_RETRY (-1)
#define REBUILD_REJECTED (-2)
/* Restores s unless that was done, or retries a rebuild that failed to read the store
 * once its backoff passed (s->mu held); returns the restore state. */
int study_ensure_restored(study *s, const char *by);
/* Rebuilds s from the store after a failed write (s->mu held): RESTORED
 * again, or RESTORE_RETRY when the store cannot be read now. */
void study_resync(study *s);

/* ------------------------------------------------------------ study_write.c */

/* Locks s and checks it is not deleted; 0 ok (locked) or -1 (unlocked, 404). */
int study_lock_undeleted(study *s, api_error *err);
/* Locks s for an operation, restoring it first if it is not yet; 0 ok (locked) or -1
 * (unlocked: 404 deleted, 503 while its rebuild waits for a retry, 500 when its history
 * cannot be replayed). */
int study_lock_live(study *s, api_error *err);
trial_rec *study_find_trial(study *s, int64_t id, api_error *err); /* or 404 */
trial_rec *study_find_pending(study *s, int64_t id, api_error *err); /* or 404, 409 */
/* A caller-owned copy of t for an answer: 0, or -1 with err (500, out is zeroed). */
int study_trial_copy(const study *s, const trial_rec *t, trial_rec *out, api_error *err);
/* Moves t to a new state, keeping counts and best in step. */
void study_set_state(study *s, trial_rec *t, trial_state st);
/* The write path, s->mu held: begin, record (events, rows), finish (queue the commit);
 * on any failure study_abort_txn rolls back, rebuilds s and fills err (503). */
int study_begin_write(study *s, int durable);
int study_append_event(study *s, char kind, int64_t trial_id, double value, const double *x);
int study_finish_txn(study *s);
int study_abort_txn(study *s, api_error *err);
/* Records tells ('t') and abandons ('b') of trials ts[0..n) as one write. */
int study_persist(study *s, trial_rec *const *ts, const char *kinds, size_t n, int durable,
                  api_error *err);
/* The engine forgets a pending trial (failed or expired); memory follows. */
int study_abandon_apply(study *s, trial_rec *t, trial_state to);
/* Stores a snapshot of the engine at s->seq (inside the caller's transaction). */
int study_write_snapshot(study *s);
/* Ends an operation whose outcome is rc (0, or -1 with err filled): releases s->mu and
 * waits for the commit (and unless relaxed the fsync) its answer depends on, unless
 * deferred. Returns rc, or -1 with err (503) when that commit failed: the caller then
 * releases the answer it copied. */
int study_unlock_settle(study *s, int rc, api_error *err);
int study_unlock_settle_relaxed(study *s, int rc, api_error *err);
/* Ends a one-trial operation: copies t (NULL: the operation failed, err filled) into
 * *out, then study_unlock_settle(_relaxed); out is cleared when -1 is returned. */
int study_answer_trial(study *s, const trial_rec *t, int relaxed, trial_rec *out,
                       api_error *err);

static inline double study_engine_value(const study *s, double v)
{
    return s->spec.minimize ? -v : v;
}

/* ------------------------------------------------------------ study.c */

/* Fills *out with s's document (spec borrowed; s->mu held when with_progress, which
 * needs a restored study): 0, or -1 with err (out cleared). */
int study_doc_fill(study *s, int with_progress, study_doc *out, api_error *err);

#endif /* KB_STUDY_INTERNAL_H */
