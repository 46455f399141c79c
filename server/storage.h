/*
 * storage.h - the daemon's persistence interface: open + migrate, transactions, and the
 * queries the handlers and recovery need. Nothing outside storage.c knows it is SQLite,
 * so another backend (dqlite, PostgreSQL) can replace it behind the same functions.
 *
 * Threading: a store is shared by all threads; each thread gets its own connection for
 * reads on first use (closed when the thread exits or at store_close). Write operations
 * are per thread and go through the single writer connection (see below). Callers
 * order the operations of one study themselves (the study mutex around queueing).
 *
 * Return convention: 0 ok, STORE_NOTFOUND / STORE_CONFLICT where stated, -1 on a
 * database error (logged by the store with the SQLite message).
 */
#ifndef KB_STORAGE_H
#define KB_STORAGE_H

#include <stddef.h>
#include <stdint.h>

#include "../proto/domain.h"

#define STORE_NOTFOUND 1
#define STORE_CONFLICT 2

typedef struct store store;

/* After a read of this thread's that failed: SQLite's message for it in msg, and 1 when
 * the database file is damaged (SQLITE_CORRUPT, SQLITE_NOTADB), which no retry reads. */
int store_read_error(store *s, char *msg, size_t n);

/* Opens (creating) the database, sets WAL + synchronous=FULL and applies pending
 * migrations, each in its own transaction. Refuses (NULL, reason in errbuf) a database
 * whose schema version is newer than this binary's. */
store *store_open(const char *path, char *errbuf, size_t errsize);
void store_close(store *s);
int store_schema_version(store *s);     /* the database's version */
int store_latest_version(void);         /* the binary's migrations */
/* PRAGMA integrity_check == "ok" (and foreign keys): 0, else -1. */
int store_integrity_check(store *s);

/* Write operations. All writes go through one writer connection, in one of two ways:
 *
 * Direct: store_begin .. store_commit (or store_rollback). Statements run at once
 * (results such as new ids and STORE_CONFLICT are known) with the writer held
 * exclusively, and COMMIT is the operation's own (synchronous=FULL: fsynced before it
 * returns). For rare writes.
 *
 * Queued (group commit): store_begin_queued .. store_commit_async, then store_wait.
 * The write calls in between only record their statements (they fail only for lack of
 * memory); commit_async appends the operation to the writer's queue, in order, and
 * gives its ticket; a writer thread runs everything queued in one transaction with one
 * COMMIT (synchronous=NORMAL: atomic, survives a crash of the process), while the next
 * batch queues up. A syncer thread then fsyncs the WAL for the batches that hold a
 * durable operation (one fsync covers every batch committed before it), while the
 * writer goes on committing. Tickets are ordered: a commit or sync of ticket t covers
 * every ticket before t.
 * store_wait(ticket, durable) returns once the ticket's batch ended (and, with durable,
 * once it is fsynced): 0 when it committed, -1 when it failed (nothing of the operation
 * was applied). durable = 1 at store_begin_queued asks the syncer for the fsync; an
 * operation with durable = 0 (asks, heartbeats and lease expiries, never tells, fails
 * or observations) survives a process crash but not necessarily a power loss until the
 * next sync. `after` is the ticket of an earlier operation this one was computed from
 * (0: none): if that one failed, this one fails too, unapplied. store_commit on a
 * queued operation is commit_async (after = 0) + wait (durable as the operation). */
int store_begin(store *s);
int store_begin_queued(store *s, int durable);
int store_commit(store *s);             /* returns after the commit is durable */
int store_commit_async(store *s, uint64_t after, uint64_t *ticket);
int store_wait(store *s, uint64_t ticket, int durable);
void store_rollback(store *s);
/* 1 when the batch of ticket has ended and failed (0 for ticket 0 or a pending one). */
int store_ticket_failed(store *s, uint64_t ticket);
/* 1 when the batch of ticket has ended and every ticket <= durable is fsynced, or when
 * ticket or durable failed (neither wait would block; durable 0: no sync needed). */
int store_ticket_done(store *s, uint64_t ticket, uint64_t durable);
/* Called by the writer thread after each batch ended and by the syncer after each
 * sync, with the last ended ticket and the last synced one (no store lock held; must not
 * block): lets a server resume requests waiting for them. */
void store_set_batch_hook(store *s, void (*hook)(uint64_t done, uint64_t synced));
/* Batches run by the writer thread, queued operations and WAL syncs so far (statistics). */
void store_counts(store *s, uint64_t *batches, uint64_t *ops, uint64_t *syncs,
                  uint64_t *failed);

/* Studies. Insert (direct operations only): STORE_CONFLICT when the name is taken. */
int store_study_insert(store *s, const char *name, const char *config, int64_t created_ms,
                       int64_t *id);
int store_study_delete(store *s, int64_t id);
/* state: a study_state's name (proto_study_state_name); the table refuses others. */
int store_study_set_state(store *s, int64_t id, const char *state);
typedef int (*store_study_cb)(void *ud, int64_t id, const char *name, const char *config,
                              int64_t created_ms, const char *state);
int store_studies_each(store *s, store_study_cb cb, void *ud);

/* Candidate sets (insert is its own operation: no begin/commit around it). Get:
 * STORE_NOTFOUND; *rows owned by the caller, *names (JSON text or
 * NULL) too. */
int store_candidate_set_insert(store *s, const double *rows, size_t n, size_t dim,
                               const char *names_json, int64_t created_ms, int64_t *id);
int store_candidate_set_get(store *s, int64_t id, double **rows, size_t *n, size_t *dim,
                            char **names_json);

/* Trials: insert or replace the whole row. */
int store_trial_put(store *s, int64_t study_id, const trial_rec *t, size_t dim);
typedef int (*store_trial_cb)(void *ud, const trial_rec *t); /* t borrowed */
int store_trials_each(store *s, int64_t study_id, size_t dim, store_trial_cb cb, void *ud);

/* The engine call log. kind: 'a'sk, 't'ell, 'b' abandon, 'o'bserve. */
typedef struct store_event {
    int64_t seq;
    char kind;
    int64_t trial_id;   /* 0 for observe */
    double value;       /* tell / observe */
    const double *x;    /* observe, and ask (its trial's x, as handed out; read by
                         * store_events_each only): dim entries, else NULL */
} store_event;
int store_event_append(store *s, int64_t study_id, const store_event *ev, size_t dim);
typedef int (*store_event_cb)(void *ud, const store_event *ev);
int store_events_each(store *s, int64_t study_id, int64_t after_seq, size_t dim,
                      store_event_cb cb, void *ud);

int store_observation_insert(store *s, int64_t study_id, int64_t seq, const double *x,
                             size_t dim, double value, int64_t created_ms);
/* A study's warm-start observations in the order taken: x (dim entries, borrowed for the
 * call) and the value in the user's direction. */
typedef int (*store_obs_cb)(void *ud, const double *x, double value, int64_t created_ms);
int store_observations_each(store *s, int64_t study_id, size_t dim, store_obs_cb cb,
                            void *ud);

/* Engine snapshots: put keeps only the newest; latest: STORE_NOTFOUND when none,
 * *bytes owned by the caller. */
int store_snapshot_put(store *s, int64_t study_id, int64_t event_seq,
                       const unsigned char *bytes, size_t len, int64_t created_ms);
int store_snapshot_latest(store *s, int64_t study_id, unsigned char **bytes, size_t *len,
                          int64_t *event_seq);

int store_dictionary_put(store *s, int64_t study_id, uint64_t epoch, size_t dict_size,
                         uint64_t batch_size, int64_t event_seq, int64_t created_ms);
/* Number of dictionary rows of a study (tests). */
int64_t store_dictionary_count(store *s, int64_t study_id);

#endif /* KB_STORAGE_H */
