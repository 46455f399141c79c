/*
 * storage.h - the daemon's persistence interface: open + migrate, transactions, and the
 * queries the handlers and recovery need. Nothing outside storage.c knows it is SQLite,
 * so another backend (dqlite, PostgreSQL) can replace it behind the same functions.
 *
 * Threading: a store is shared by all threads; each thread gets its own connection on
 * first use (closed when the thread exits or at store_close). Transactions are per
 * thread. Callers serialize writes to one study themselves (the study mutex); writes to
 * different studies may run at once (SQLite serializes them with busy_timeout).
 *
 * Return convention: 0 ok, STORE_NOTFOUND / STORE_CONFLICT where stated, -1 on a
 * database error (logged by the store with the SQLite message).
 */
#ifndef KB_STORAGE_H
#define KB_STORAGE_H

#include <stddef.h>
#include <stdint.h>

#include "../proto/proto.h"

#define STORE_NOTFOUND 1
#define STORE_CONFLICT 2

typedef struct store store;

/* Opens (creating) the database, sets WAL + synchronous=FULL and applies pending
 * migrations, each in its own transaction. Refuses (NULL, reason in errbuf) a database
 * whose schema version is newer than this binary's. */
store *store_open(const char *path, char *errbuf, size_t errsize);
void store_close(store *s);
int store_schema_version(store *s);     /* the database's version */
int store_latest_version(void);         /* the binary's migrations */
/* PRAGMA integrity_check == "ok" (and foreign keys): 0, else -1. */
int store_integrity_check(store *s);

/* A write operation: begin .. commit (or rollback). Operations of all threads are
 * grouped into shared transactions (group commit); commit returns once the operation's
 * batch is durable, -1 if the batch failed (then nothing of it was applied). Between
 * begin and commit the thread holds the store's writer: do no slow work there. */
int store_begin(store *s);              /* durable commit (synchronous=FULL) */
/* durable = 0: the commit is atomic and survives a process crash, but not necessarily
 * a power loss until the next durable commit (SQLite WAL with synchronous=NORMAL: the
 * next FULL commit's fsync of the WAL covers every earlier frame). Used for asks,
 * heartbeats and lease expiries, never for tells, fails or observations. */
int store_begin_mode(store *s, int durable);
int store_commit(store *s);             /* returns after the commit is durable */
void store_rollback(store *s);

/* Studies. Insert: STORE_CONFLICT when the name is taken. */
int store_study_insert(store *s, const char *name, const char *config, int64_t created_ms,
                       int64_t *id);
int store_study_delete(store *s, int64_t id);
typedef int (*store_study_cb)(void *ud, int64_t id, const char *name, const char *config,
                              int64_t created_ms);
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
    const double *x;    /* observe: dim entries, else NULL */
} store_event;
int store_event_append(store *s, int64_t study_id, const store_event *ev, size_t dim);
typedef int (*store_event_cb)(void *ud, const store_event *ev);
int store_events_each(store *s, int64_t study_id, int64_t after_seq, size_t dim,
                      store_event_cb cb, void *ud);

int store_observation_insert(store *s, int64_t study_id, int64_t seq, const double *x,
                             size_t dim, double value, int64_t created_ms);

/* Engine snapshots: put keeps only the newest; latest: STORE_NOTFOUND when none,
 * *bytes owned by the caller. */
int store_snapshot_put(store *s, int64_t study_id, int64_t event_seq,
                       const unsigned char *bytes, size_t len, int64_t created_ms);
int store_snapshot_latest(store *s, int64_t study_id, unsigned char **bytes, size_t *len,
                          int64_t *event_seq);

int store_dictionary_put(store *s, int64_t study_id, uint64_t epoch, size_t dict_size,
                         uint64_t batch_size, int64_t event_seq, int64_t created_ms);
/* Number of dictionary rows of a study (tests, metrics). */
int64_t store_dictionary_count(store *s, int64_t study_id);

#endif /* KB_STORAGE_H */
