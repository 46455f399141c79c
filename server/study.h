/*
 * study.h - live studies: the registry, and every operation the handlers perform on a
 * study (ask, tell, fail, heartbeat, observe, listings), each applied to the engine and
 * made durable in the store before it is acknowledged. The calls block until the commit
 * of the study's last write returned and (except for asks, heartbeats and expiries,
 * whose writes need no fsync) its last durable write is fsynced, unless the wait is
 * deferred (see below).
 *
 * Locking (the definitions and invariants are in study_internal.h):
 *   - the registry's rwlock protects only the array of live studies; it is held for
 *     lookup/insert/remove, never while an engine runs;
 *   - each study has its own mutex around its engine, its trials and the queueing of its
 *     DB writes, so studies never wait for each other (a resparsification stalls only its
 *     own study); the commit is waited for after the mutex is released (group commit);
 *   - a study is reference counted: study_get() returns a reference that the caller
 *     gives back with study_put(); a deleted study stays valid until its last reference.
 *
 * Results are C values (domain.h, proto.h), copied under the study's mutex and
 * rendered to JSON or CSV by the caller (proto/render.c) after it is released; they are
 * caller-owned and released by the *_clear / *_free named at each call. Operations
 * return 0, or -1 with err filled and nothing to release.
 */
#ifndef KB_STUDY_H
#define KB_STUDY_H

#include "../proto/proto.h"
#include "storage.h"

typedef struct study study;

typedef struct registry_config {
    store *db;
    /* Called (study mutex held, must not block) after feedback that may change an
     * empty ask answer: tell, fail, expiry, delete, shutdown. */
    void (*on_feedback)(int64_t study_id);
    int snapshot_every; /* events between engine snapshots */
    size_t restore_threads; /* background restore threads (0: on first use only) */
} registry_config;

/* Creates the registry with every stored study registered (its spec: it can be found,
 * listed and deleted) and starts the restore threads, which rebuild the studies in id
 * order (snapshot + replay of the events after it); an operation on a study not restored
 * yet restores it first. Returns -1 (logged) when a stored study's config cannot be
 * loaded; a study whose events do not replay exactly is logged and answers 500. */
int registry_open(const registry_config *cfg);
/* Wakes long-polls, makes new asks fail with 503 and stops the restore threads after
 * the study each is restoring. */
void registry_shutting_down(void);
/* Joins the restore threads, stores a snapshot of every restored study and frees them
 * all. */
void registry_close(void);
/* Whether registry_shutting_down was called. */
int registry_is_closing(void);
/* Live studies restored, still to restore (a rebuild waiting for its retry included),
 * and that failed to restore. */
void registry_restore_counts(size_t *restored, size_t *restoring, size_t *failed);

study *study_get(int64_t id);   /* new reference or NULL */
int64_t study_id(const study *s);
const study_spec *study_spec_of(const study *s); /* immutable: no lock needed */
void study_put(study *s);

/* POST /v1/studies: takes ownership of *spec (cleared on return). Returns a new
 * reference to the study (study_put), or NULL with err. */
study *study_create(study_spec *spec, api_error *err);
int study_delete(int64_t id, api_error *err);
/* PATCH /v1/studies/{id}: moves s to state `to`, durably, and fills *out with its
 * document after the move (study_doc_clear). Staying is a no-op; leaving completed is
 * refused (409, field "state"). Asks of a study that is not active hand out nothing;
 * everything else works in every state. */
int study_change_state(study *s, study_state to, study_doc *out, api_error *err);

/* A page of the listing: docs[i] borrows the spec of refs[i], which the page holds. */
typedef struct study_page {
    study **refs;
    study_doc *docs;
    size_t n;
    int64_t next_cursor; /* 0: no further study */
} study_page;
void study_page_clear(study_page *p);
/* The studies with ids > after, only the one of that exact name when name is not NULL,
 * only those in state `state` when it is >= 0 (a study_state); next_cursor is set only
 * when a further study matches. A study not restored yet has no progress (listing
 * restores nothing). 0, or -1 (500) out of memory. */
int study_list(int64_t after, size_t limit, const char *name, int state, study_page *out,
               api_error *err);

/* The study's document with its progress (study_doc_clear; out->spec borrows s's). */
int study_describe(study *s, study_doc *out, api_error *err);
/* One ask attempt, never blocking: out->trials are the trials handed out
 * (proto_ask_answer_clear); out->retry_after_ms > 0 when none was and feedback may still
 * change that (0 when the empty answer is final). *can_wait = 1 when
 * feedback could change that empty answer, and *version is the study's feedback version
 * the answer was computed at (for long-polls, see http.c). */
int study_ask(study *s, const ask_req *req, ask_answer *out, int *can_wait,
              uint64_t *version, api_error *err);
uint64_t study_version(study *s);
/* Replayed asks adopted by the rebuilds of this process (rebuild.c, kbandit.h's
 * kb_engine_ask_recorded): a study rebuilt twice counts its adoptions twice. */
uint64_t study_adopted_total(void);
/* Operations on one trial: *out is a copy of the trial after it (trial_rec_clear). */
int study_tell(study *s, int64_t trial_id, double value, trial_rec *out, api_error *err);
int study_fail(study *s, int64_t trial_id, const char *reason, trial_rec *out,
               api_error *err);
int study_heartbeat(study *s, int64_t trial_id, trial_rec *out, api_error *err);
int study_trial(study *s, int64_t trial_id, trial_rec *out, api_error *err);
/* The completed trial with the best value, or with by_model the one the engine's model
 * rates best (kb_engine_recommend); 404 when none completed. */
int study_best(study *s, int by_model, trial_rec *out, api_error *err);
/* One outcome per item, in order (*out: proto_tell_outcomes_free(*out, n)). */
int study_tell_batch(study *s, const tell_item *items, size_t n, tell_outcome **out,
                     api_error *err);
/* Trials with ids > after, in id order, state < 0: all states; at most limit of them
 * (*out: trial_recs_free(*out, *n)); *next_cursor is the last one's id when a further
 * trial matches, else 0. */
int study_trials(study *s, int state, int64_t after, size_t limit, trial_rec **out,
                 size_t *n, int64_t *next_cursor, api_error *err);
int study_observe(study *s, const double *xs, const double *values, size_t n,
                  api_error *err);
/* The study's document, all its trials and its warm-start observations as stored
 * (study_doc_clear, trial_recs_free, observation_set_clear). */
int study_export(study *s, study_doc *doc, trial_rec **trials, size_t *n,
                 observation_set *obs, api_error *err);

/* Deferred commit waits, so that a server thread need not block on a commit: after
 * study_defer_begin(), this thread's study calls return their answer without waiting
 * for the commit it depends on; study_defer_end() ends that mode and returns 1 with *p
 * filled when there is a commit to wait for (0: none, the answer is final). The caller
 * must not send the answer before study_pending_ready(p) (poll it, or use the store's
 * batch hook), then calls study_pending_finish(p, err): 0 when the answer stands, -1
 * when the commit failed (err filled; the study was rebuilt). It releases p. */
typedef struct study_pending {
    study *s;       /* a reference */
    uint64_t ticket;  /* to be committed */
    uint64_t durable; /* to be fsynced (0: none) */
} study_pending;
void study_defer_begin(void);
int study_defer_end(study_pending *p);
int study_pending_ready(const study_pending *p);
/* Whether p's commit failed: study_pending_finish then rebuilds the study (a replay). */
int study_pending_failed(const study_pending *p);
int study_pending_finish(study_pending *p, api_error *err);

/* Expires the leases that ended before now_ms in every study. Returns how many. */
size_t registry_sweep(int64_t now_ms);

/* Gauges (studies, trials) cover the live studies; the counters (resparsifications,
 * engine seconds) also keep what deleted studies had, so they never go down. */
typedef struct registry_stats {
    size_t studies;
    size_t trials[TRIAL__STATES];
    uint64_t resparsifications;
    double engine_sec;
    uint64_t store_batches, store_ops; /* group commit: ops per batch = ops / batches */
    uint64_t store_syncs;              /* fsyncs of the WAL for durable operations */
    uint64_t store_failed;             /* write batches (or operations queued after one)
                                          that failed: a full disk, an I/O error */
} registry_stats;
void registry_stats_get(registry_stats *out);

#endif /* KB_STUDY_H */
