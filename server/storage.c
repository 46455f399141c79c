/*
 * storage.c - This file contains the SQLite implementation of storage.h: migrations
 * embedded in the binary, per-thread connections with cached prepared statements, and
 * the queries.
 *
 * Migrations: migrations/NNNN_*.sql are embedded with .incbin (listed in `migrations`
 * below: adding one is a new file plus one line). Migration i is applied when
 * PRAGMA user_version < i, in one transaction that also sets user_version = i.
 *
 * Connections: each thread opens its own connection on first use (WAL, synchronous=FULL,
 * foreign_keys, busy_timeout). They are listed in the store under `lock` so that
 * store_close can close the ones whose threads are still alive; a thread that exits
 * closes its own through the pthread key's destructor.
 */
#include "storage.h"

#include "log.h"

#include <pthread.h>
#include <stdatomic.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------ migrations */

#define EMBED(sym, file)                                                                    \
    __asm__(".section .rodata\n.global " #sym "\n" #sym ":\n.incbin \"" file "\"\n.byte 0\n" \
            ".previous\n");                                                                 \
    extern const char sym[];
EMBED(kb_migration_0001, "migrations/0001_init.sql")

static const char *const migrations[] = {kb_migration_0001};
#define N_MIGRATIONS ((int)(sizeof migrations / sizeof migrations[0]))

int store_latest_version(void) { return N_MIGRATIONS; }

/* ------------------------------------------------------------ connections */

enum {
    Q_BEGIN, Q_SYNC_FULL, Q_SYNC_NORMAL, Q_COMMIT, Q_ROLLBACK,
    Q_SAVEPOINT, Q_RELEASE, Q_ROLLBACK_TO,
    Q_STUDY_INSERT, Q_STUDY_DELETE, Q_STUDIES,
    Q_CSET_INSERT, Q_CSET_GET,
    Q_TRIAL_PUT, Q_TRIALS,
    Q_EVENT_PUT, Q_EVENTS,
    Q_OBS_PUT,
    Q_SNAP_PUT, Q_SNAP_PRUNE, Q_SNAP_LATEST,
    Q_DICT_PUT, Q_DICT_COUNT,
    Q__COUNT
};

static const char *const sql[Q__COUNT] = {
    [Q_BEGIN] = "BEGIN IMMEDIATE",
    [Q_SYNC_FULL] = "PRAGMA synchronous=FULL",
    [Q_SYNC_NORMAL] = "PRAGMA synchronous=NORMAL",
    [Q_COMMIT] = "COMMIT",
    [Q_ROLLBACK] = "ROLLBACK",
    [Q_SAVEPOINT] = "SAVEPOINT op",
    [Q_RELEASE] = "RELEASE op",
    [Q_ROLLBACK_TO] = "ROLLBACK TO op",
    [Q_STUDY_INSERT] = "INSERT INTO studies(name, config, created_ms) VALUES(?, ?, ?)",
    [Q_STUDY_DELETE] = "DELETE FROM studies WHERE id = ?",
    [Q_STUDIES] = "SELECT id, name, config, created_ms FROM studies ORDER BY id",
    [Q_CSET_INSERT] = "INSERT INTO candidate_sets(n_rows, dim, names, data, created_ms) "
                      "VALUES(?, ?, ?, ?, ?)",
    [Q_CSET_GET] = "SELECT n_rows, dim, names, data FROM candidate_sets WHERE id = ?",
    [Q_TRIAL_PUT] = "INSERT OR REPLACE INTO trials(study_id, id, state, worker, "
                    "candidate_index, x, value, reason, created_ms, lease_ms, completed_ms) "
                    "VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
    [Q_TRIALS] = "SELECT id, state, worker, candidate_index, x, value, reason, created_ms, "
                 "lease_ms, completed_ms FROM trials WHERE study_id = ? ORDER BY id",
    [Q_EVENT_PUT] = "INSERT INTO events(study_id, seq, kind, trial_id, value, x) "
                    "VALUES(?, ?, ?, ?, ?, ?)",
    [Q_EVENTS] = "SELECT seq, kind, trial_id, value, x FROM events "
                 "WHERE study_id = ? AND seq > ? ORDER BY seq",
    [Q_OBS_PUT] = "INSERT INTO observations(study_id, seq, x, value, created_ms) "
                  "VALUES(?, ?, ?, ?, ?)",
    [Q_SNAP_PUT] = "INSERT OR REPLACE INTO snapshots(study_id, event_seq, bytes, created_ms) "
                   "VALUES(?, ?, ?, ?)",
    [Q_SNAP_PRUNE] = "DELETE FROM snapshots WHERE study_id = ? AND event_seq < ?",
    [Q_SNAP_LATEST] = "SELECT bytes, event_seq FROM snapshots WHERE study_id = ? "
                      "ORDER BY event_seq DESC LIMIT 1",
    [Q_DICT_PUT] = "INSERT OR REPLACE INTO dictionaries(study_id, epoch, dict_size, "
                   "batch_size, event_seq, created_ms) VALUES(?, ?, ?, ?, ?, ?)",
    [Q_DICT_COUNT] = "SELECT count(*) FROM dictionaries WHERE study_id = ?",
};

typedef struct conn {
    sqlite3 *db;
    sqlite3_stmt *st[Q__COUNT];
    struct conn *next;
    store *owner;
    int relaxed;         /* synchronous=NORMAL currently set */
    int in_op;           /* this thread holds the writer (between begin and commit) */
} conn;

/* Group commit. All writes go through one connection; an operation (begin .. commit)
 * holds `m` while it runs its statements inside a SAVEPOINT of the open batch
 * transaction, then waits for the batch's COMMIT. The last operation of a batch (no
 * other one arriving or waiting to enter) becomes the leader: it runs COMMIT with `m`
 * released, while operations arriving meanwhile wait for the next batch. One fsync
 * thus covers every operation that arrived during the previous one. */
typedef struct writer {
    pthread_mutex_t m;       /* protects every field below and the use of c */
    pthread_cond_t cv;       /* broadcast when a batch ends or an operation leaves */
    conn *c;
    atomic_int arriving;     /* threads about to lock m in begin (read without m) */
    int entering;            /* operations waiting in begin for a commit to end */
    int in_txn, full;        /* a batch is open; it commits with synchronous=FULL */
    int committing;          /* the leader is in COMMIT, m released */
    uint64_t batch, done;    /* id of the open/last batch; last ended batch */
    uint64_t failed;         /* bit (id % 64) set when batch id failed */
} writer;

struct store {
    char *path;
    pthread_key_t key;
    pthread_mutex_t lock; /* protects `conns` */
    conn *conns;
    writer w;
};

static void conn_free(conn *c)
{
    for (int i = 0; i < Q__COUNT; i++)
        sqlite3_finalize(c->st[i]);
    sqlite3_close(c->db);
    free(c);
}

static void conn_unlist(store *s, conn *c)
{
    pthread_mutex_lock(&s->lock);
    for (conn **p = &s->conns; *p; p = &(*p)->next)
        if (*p == c) {
            *p = c->next;
            break;
        }
    pthread_mutex_unlock(&s->lock);
}

/* pthread key destructor: the thread is exiting. */
static void conn_release(void *p)
{
    conn *c = p;
    conn_unlist(c->owner, c);
    conn_free(c);
}

static void db_log(sqlite3 *db, const char *what)
{
    log_json(LOG_ERROR, "database error",
             json_pack("{s:s,s:s}", "op", what, "error", db ? sqlite3_errmsg(db) : "open"));
}

static conn *conn_raw(store *s)
{
    conn *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->owner = s;
    if (sqlite3_open_v2(s->path, &c->db,
                        SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
                        NULL) != SQLITE_OK ||
        sqlite3_exec(c->db,
                     "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL; "
                     "PRAGMA foreign_keys=ON;",
                     NULL, NULL, NULL) != SQLITE_OK) {
        db_log(c->db, "open");
        conn_free(c);
        return NULL;
    }
    sqlite3_busy_timeout(c->db, 10000);
    return c;
}

static conn *conn_open(store *s)
{
    conn *c = conn_raw(s);
    if (!c)
        return NULL;
    pthread_mutex_lock(&s->lock);
    c->next = s->conns;
    s->conns = c;
    pthread_mutex_unlock(&s->lock);
    pthread_setspecific(s->key, c);
    return c;
}

static conn *get_conn(store *s)
{
    conn *c = pthread_getspecific(s->key);
    return c ? c : conn_open(s);
}

/* The thread's prepared statement q, reset and unbound; NULL on error. */
static sqlite3_stmt *stmt(store *s, int q, conn **out)
{
    conn *c = get_conn(s);
    if (!c)
        return NULL;
    if (!c->st[q] &&
        sqlite3_prepare_v3(c->db, sql[q], -1, SQLITE_PREPARE_PERSISTENT, &c->st[q], NULL) !=
            SQLITE_OK) {
        db_log(c->db, sql[q]);
        return NULL;
    }
    sqlite3_reset(c->st[q]);
    sqlite3_clear_bindings(c->st[q]);
    if (out)
        *out = c;
    return c->st[q];
}

/* A write statement: on the writer connection, only inside begin .. commit. */
static sqlite3_stmt *wstmt(store *s, int q, conn **out)
{
    conn *me = get_conn(s), *c = s->w.c;
    if (!me || !me->in_op) {
        log_json(LOG_ERROR, "write outside a transaction", json_pack("{s:s}", "sql", sql[q]));
        return NULL;
    }
    if (!c->st[q] &&
        sqlite3_prepare_v3(c->db, sql[q], -1, SQLITE_PREPARE_PERSISTENT, &c->st[q], NULL) !=
            SQLITE_OK) {
        db_log(c->db, sql[q]);
        return NULL;
    }
    sqlite3_reset(c->st[q]);
    sqlite3_clear_bindings(c->st[q]);
    if (out)
        *out = c;
    return c->st[q];
}

/* Steps a statement that returns no row; 0 ok, STORE_CONFLICT on a constraint, -1. */
static int run(store *s, sqlite3_stmt *st, const char *what)
{
    if (!st)
        return -1;
    int rc = sqlite3_step(st);
    sqlite3_reset(st);
    if (rc == SQLITE_DONE)
        return 0;
    if ((rc & 0xff) == SQLITE_CONSTRAINT)
        return STORE_CONFLICT;
    db_log(sqlite3_db_handle(st), what);
    return -1;
}

/* ------------------------------------------------------------ open / migrate */

static int user_version(sqlite3 *db)
{
    sqlite3_stmt *st;
    int v = -1;
    if (sqlite3_prepare_v2(db, "PRAGMA user_version", -1, &st, NULL) == SQLITE_OK &&
        sqlite3_step(st) == SQLITE_ROW)
        v = sqlite3_column_int(st, 0);
    sqlite3_finalize(st);
    return v;
}

static int migrate(sqlite3 *db, char *errbuf, size_t errsize)
{
    int v = user_version(db);
    if (v < 0) {
        snprintf(errbuf, errsize, "cannot read schema version: %s", sqlite3_errmsg(db));
        return -1;
    }
    if (v > N_MIGRATIONS) {
        snprintf(errbuf, errsize,
                 "database schema version %d is newer than this binary's (%d): refusing to start",
                 v, N_MIGRATIONS);
        return -1;
    }
    for (int i = v; i < N_MIGRATIONS; i++) {
        char setv[64];
        snprintf(setv, sizeof setv, "PRAGMA user_version = %d", i + 1);
        if (sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL) != SQLITE_OK ||
            sqlite3_exec(db, migrations[i], NULL, NULL, NULL) != SQLITE_OK ||
            sqlite3_exec(db, setv, NULL, NULL, NULL) != SQLITE_OK ||
            sqlite3_exec(db, "COMMIT", NULL, NULL, NULL) != SQLITE_OK) {
            snprintf(errbuf, errsize, "migration %04d failed: %s", i + 1, sqlite3_errmsg(db));
            sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
            return -1;
        }
        log_json(LOG_INFO, "migration applied", json_pack("{s:i}", "version", i + 1));
    }
    return 0;
}

static int writer_open(store *s);

store *store_open(const char *path, char *errbuf, size_t errsize)
{
    store *s = calloc(1, sizeof *s);
    if (!s || !(s->path = strdup(path))) {
        free(s);
        snprintf(errbuf, errsize, "out of memory");
        return NULL;
    }
    pthread_mutex_init(&s->lock, NULL);
    pthread_key_create(&s->key, conn_release);
    conn *c = get_conn(s);
    if (!c) {
        snprintf(errbuf, errsize, "cannot open database %s", path);
        store_close(s);
        return NULL;
    }
    if (migrate(c->db, errbuf, errsize) || writer_open(s)) {
        if (!errbuf[0])
            snprintf(errbuf, errsize, "cannot open the writer connection");
        store_close(s);
        return NULL;
    }
    return s;
}

void store_close(store *s)
{
    if (!s)
        return;
    pthread_setspecific(s->key, NULL);
    pthread_key_delete(s->key);
    while (s->conns) {
        conn *c = s->conns;
        s->conns = c->next;
        conn_free(c);
    }
    if (s->w.c) {
        conn_free(s->w.c);
        pthread_mutex_destroy(&s->w.m);
        pthread_cond_destroy(&s->w.cv);
    }
    pthread_mutex_destroy(&s->lock);
    free(s->path);
    free(s);
}

int store_schema_version(store *s)
{
    conn *c = get_conn(s);
    return c ? user_version(c->db) : -1;
}

int store_integrity_check(store *s)
{
    conn *c = get_conn(s);
    sqlite3_stmt *st;
    int ok = 0;
    if (!c || sqlite3_prepare_v2(c->db, "PRAGMA integrity_check", -1, &st, NULL) != SQLITE_OK)
        return -1;
    if (sqlite3_step(st) == SQLITE_ROW)
        ok = strcmp((const char *)sqlite3_column_text(st, 0), "ok") == 0;
    sqlite3_finalize(st);
    if (ok && sqlite3_prepare_v2(c->db, "PRAGMA foreign_key_check", -1, &st, NULL) == SQLITE_OK) {
        ok = sqlite3_step(st) == SQLITE_DONE;
        sqlite3_finalize(st);
    }
    return ok ? 0 : -1;
}

static int writer_open(store *s)
{
    writer *w = &s->w;
    if (!(w->c = conn_raw(s)))
        return -1;
    pthread_mutex_init(&w->m, NULL);
    pthread_cond_init(&w->cv, NULL);
    atomic_init(&w->arriving, 0);
    return 0;
}

/* Runs one statement of the writer connection (m held). */
static int wrun(store *s, int q, const char *what)
{
    conn *c = s->w.c;
    if (!c->st[q] &&
        sqlite3_prepare_v3(c->db, sql[q], -1, SQLITE_PREPARE_PERSISTENT, &c->st[q], NULL) !=
            SQLITE_OK) {
        db_log(c->db, sql[q]);
        return -1;
    }
    return run(s, c->st[q], what);
}

/* Commits the open batch as its leader (m held on entry and exit). */
static void lead(store *s)
{
    writer *w = &s->w;
    uint64_t b = w->batch;
    w->committing = 1;
    pthread_mutex_unlock(&w->m);
    int rc = wrun(s, Q_COMMIT, "commit");
    if (rc)
        wrun(s, Q_ROLLBACK, "rollback");
    pthread_mutex_lock(&w->m);
    if (rc)
        w->failed |= (uint64_t)1 << (b % 64);
    w->done = b;
    w->in_txn = 0;
    w->committing = 0;
    pthread_cond_broadcast(&w->cv);
}

int store_begin_mode(store *s, int durable)
{
    writer *w = &s->w;
    conn *me = get_conn(s);
    if (!me || me->in_op)
        return -1;
    atomic_fetch_add(&w->arriving, 1);
    pthread_mutex_lock(&w->m);
    atomic_fetch_sub(&w->arriving, 1);
    for (;;) {
        if (w->committing) {
            w->entering++;
            pthread_cond_wait(&w->cv, &w->m);
            w->entering--;
        } else if (w->in_txn && durable && !w->full) {
            lead(s); /* a durable operation cannot join a relaxed batch: end it */
        } else {
            break;
        }
    }
    if (!w->in_txn) {
        if (w->c->relaxed == durable) { /* only settable outside a transaction */
            if (wrun(s, durable ? Q_SYNC_FULL : Q_SYNC_NORMAL, "synchronous"))
                goto fail;
            w->c->relaxed = !durable;
        }
        if (wrun(s, Q_BEGIN, "begin"))
            goto fail;
        w->in_txn = 1;
        w->full = durable;
        w->batch++;
        w->failed &= ~((uint64_t)1 << (w->batch % 64));
    }
    if (wrun(s, Q_SAVEPOINT, "savepoint"))
        goto fail;
    me->in_op = 1;
    return 0; /* m stays held until commit or rollback */
fail:
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->m);
    return -1;
}

int store_begin(store *s) { return store_begin_mode(s, 1); }

int store_commit(store *s)
{
    writer *w = &s->w;
    conn *me = get_conn(s);
    if (!me || !me->in_op)
        return -1;
    if (wrun(s, Q_RELEASE, "release")) {
        store_rollback(s);
        return -1;
    }
    me->in_op = 0;
    uint64_t b = w->batch;
    while (w->done < b) {
        if (!w->committing && w->in_txn && w->batch == b && w->entering == 0 &&
            atomic_load(&w->arriving) == 0)
            lead(s);
        else
            pthread_cond_wait(&w->cv, &w->m);
    }
    int rc = (w->failed >> (b % 64)) & 1 ? -1 : 0;
    pthread_mutex_unlock(&w->m);
    return rc;
}

void store_rollback(store *s)
{
    writer *w = &s->w;
    conn *me = get_conn(s);
    if (!me || !me->in_op)
        return;
    wrun(s, Q_ROLLBACK_TO, "rollback to");
    wrun(s, Q_RELEASE, "release");
    me->in_op = 0;
    pthread_cond_broadcast(&w->cv); /* a waiting operation may now lead */
    pthread_mutex_unlock(&w->m);
}

/* ------------------------------------------------------------ queries */

static int64_t last_id(conn *c) { return sqlite3_last_insert_rowid(c->db); }

int store_study_insert(store *s, const char *name, const char *config, int64_t created_ms,
                       int64_t *id)
{
    conn *c;
    sqlite3_stmt *st = wstmt(s, Q_STUDY_INSERT, &c);
    if (!st)
        return -1;
    sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, config, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 3, created_ms);
    int rc = run(s, st, "study insert");
    if (rc == 0)
        *id = last_id(c);
    return rc;
}

int store_study_delete(store *s, int64_t id)
{
    sqlite3_stmt *st = wstmt(s, Q_STUDY_DELETE, NULL);
    if (!st)
        return -1;
    sqlite3_bind_int64(st, 1, id);
    return run(s, st, "study delete");
}

int store_studies_each(store *s, store_study_cb cb, void *ud)
{
    sqlite3_stmt *st = stmt(s, Q_STUDIES, NULL);
    if (!st)
        return -1;
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW)
        if (cb(ud, sqlite3_column_int64(st, 0), (const char *)sqlite3_column_text(st, 1),
               (const char *)sqlite3_column_text(st, 2), sqlite3_column_int64(st, 3))) {
            sqlite3_reset(st);
            return -1;
        }
    sqlite3_reset(st);
    return rc == SQLITE_DONE ? 0 : -1;
}

int store_candidate_set_insert(store *s, const double *rows, size_t n, size_t dim,
                               const char *names_json, int64_t created_ms, int64_t *id)
{
    conn *c;
    if (store_begin(s))
        return -1;
    sqlite3_stmt *st = wstmt(s, Q_CSET_INSERT, &c);
    if (!st) {
        store_rollback(s);
        return -1;
    }
    sqlite3_bind_int64(st, 1, (int64_t)n);
    sqlite3_bind_int64(st, 2, (int64_t)dim);
    if (names_json)
        sqlite3_bind_text(st, 3, names_json, -1, SQLITE_STATIC);
    sqlite3_bind_blob64(st, 4, rows, n * dim * sizeof *rows, SQLITE_STATIC);
    sqlite3_bind_int64(st, 5, created_ms);
    int rc = run(s, st, "candidate set insert");
    if (rc == 0)
        *id = last_id(c);
    if (rc) {
        store_rollback(s);
        return rc;
    }
    return store_commit(s);
}

int store_candidate_set_get(store *s, int64_t id, double **rows, size_t *n, size_t *dim,
                            char **names_json)
{
    sqlite3_stmt *st = stmt(s, Q_CSET_GET, NULL);
    if (!st)
        return -1;
    sqlite3_bind_int64(st, 1, id);
    int rc = sqlite3_step(st), ret = -1;
    if (rc == SQLITE_DONE) {
        ret = STORE_NOTFOUND;
    } else if (rc == SQLITE_ROW) {
        *n = (size_t)sqlite3_column_int64(st, 0);
        *dim = (size_t)sqlite3_column_int64(st, 1);
        const char *nm = (const char *)sqlite3_column_text(st, 2);
        size_t bytes = (size_t)sqlite3_column_bytes(st, 3);
        *names_json = nm ? strdup(nm) : NULL;
        *rows = malloc(bytes ? bytes : 1);
        if (*rows && bytes == *n * *dim * sizeof **rows) {
            memcpy(*rows, sqlite3_column_blob(st, 3), bytes);
            ret = 0;
        } else {
            free(*rows);
            free(*names_json);
        }
    }
    sqlite3_reset(st);
    return ret;
}

static void bind_x(sqlite3_stmt *st, int i, const double *x, size_t dim)
{
    if (x)
        sqlite3_bind_blob64(st, i, x, dim * sizeof *x, SQLITE_STATIC);
}

int store_trial_put(store *s, int64_t study_id, const trial_rec *t, size_t dim)
{
    sqlite3_stmt *st = wstmt(s, Q_TRIAL_PUT, NULL);
    if (!st)
        return -1;
    sqlite3_bind_int64(st, 1, study_id);
    sqlite3_bind_int64(st, 2, t->id);
    sqlite3_bind_text(st, 3, proto_trial_state_name(t->state), -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 4, t->worker ? t->worker : "", -1, SQLITE_STATIC);
    if (t->cand_index >= 0)
        sqlite3_bind_int64(st, 5, t->cand_index);
    bind_x(st, 6, t->x, dim);
    if (t->state == TRIAL_COMPLETED)
        sqlite3_bind_double(st, 7, t->value);
    if (t->reason)
        sqlite3_bind_text(st, 8, t->reason, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 9, t->created_ms);
    sqlite3_bind_int64(st, 10, t->lease_ms);
    if (t->completed_ms)
        sqlite3_bind_int64(st, 11, t->completed_ms);
    return run(s, st, "trial put");
}

int store_trials_each(store *s, int64_t study_id, size_t dim, store_trial_cb cb, void *ud)
{
    sqlite3_stmt *st = stmt(s, Q_TRIALS, NULL);
    if (!st)
        return -1;
    sqlite3_bind_int64(st, 1, study_id);
    int rc, ret = 0;
    while (ret == 0 && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        trial_rec t = {0};
        t.id = sqlite3_column_int64(st, 0);
        if (proto_trial_state_parse((const char *)sqlite3_column_text(st, 1), &t.state) ||
            (size_t)sqlite3_column_bytes(st, 4) != dim * sizeof(double)) {
            ret = -1;
            break;
        }
        t.worker = (char *)sqlite3_column_text(st, 2);
        t.cand_index = sqlite3_column_type(st, 3) == SQLITE_NULL ? -1 : sqlite3_column_int64(st, 3);
        t.x = (double *)sqlite3_column_blob(st, 4); /* copied by the callback */
        t.value = sqlite3_column_double(st, 5);
        t.reason = (char *)sqlite3_column_text(st, 6);
        t.created_ms = sqlite3_column_int64(st, 7);
        t.lease_ms = sqlite3_column_int64(st, 8);
        t.completed_ms = sqlite3_column_int64(st, 9);
        ret = cb(ud, &t) ? -1 : 0;
    }
    if (ret == 0 && rc != SQLITE_DONE)
        ret = -1;
    sqlite3_reset(st);
    return ret;
}

static const char *kind_name(char k)
{
    return k == 'a' ? "ask" : k == 't' ? "tell" : k == 'b' ? "abandon" : "observe";
}

int store_event_append(store *s, int64_t study_id, const store_event *ev, size_t dim)
{
    sqlite3_stmt *st = wstmt(s, Q_EVENT_PUT, NULL);
    if (!st)
        return -1;
    sqlite3_bind_int64(st, 1, study_id);
    sqlite3_bind_int64(st, 2, ev->seq);
    sqlite3_bind_text(st, 3, kind_name(ev->kind), -1, SQLITE_STATIC);
    if (ev->trial_id)
        sqlite3_bind_int64(st, 4, ev->trial_id);
    if (ev->kind == 't' || ev->kind == 'o')
        sqlite3_bind_double(st, 5, ev->value);
    bind_x(st, 6, ev->x, dim);
    return run(s, st, "event append");
}

int store_events_each(store *s, int64_t study_id, int64_t after_seq, size_t dim,
                      store_event_cb cb, void *ud)
{
    sqlite3_stmt *st = stmt(s, Q_EVENTS, NULL);
    if (!st)
        return -1;
    sqlite3_bind_int64(st, 1, study_id);
    sqlite3_bind_int64(st, 2, after_seq);
    int rc, ret = 0;
    while (ret == 0 && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        store_event ev = {0};
        const char *k = (const char *)sqlite3_column_text(st, 1);
        ev.seq = sqlite3_column_int64(st, 0);
        ev.kind = strcmp(k, "abandon") == 0 ? 'b' : k[0];
        ev.trial_id = sqlite3_column_int64(st, 2);
        ev.value = sqlite3_column_double(st, 3);
        if (ev.kind == 'o') {
            if ((size_t)sqlite3_column_bytes(st, 4) != dim * sizeof(double)) {
                ret = -1;
                break;
            }
            ev.x = sqlite3_column_blob(st, 4);
        }
        ret = cb(ud, &ev) ? -1 : 0;
    }
    if (ret == 0 && rc != SQLITE_DONE)
        ret = -1;
    sqlite3_reset(st);
    return ret;
}

int store_observation_insert(store *s, int64_t study_id, int64_t seq, const double *x,
                             size_t dim, double value, int64_t created_ms)
{
    sqlite3_stmt *st = wstmt(s, Q_OBS_PUT, NULL);
    if (!st)
        return -1;
    sqlite3_bind_int64(st, 1, study_id);
    sqlite3_bind_int64(st, 2, seq);
    bind_x(st, 3, x, dim);
    sqlite3_bind_double(st, 4, value);
    sqlite3_bind_int64(st, 5, created_ms);
    return run(s, st, "observation insert");
}

int store_snapshot_put(store *s, int64_t study_id, int64_t event_seq,
                       const unsigned char *bytes, size_t len, int64_t created_ms)
{
    sqlite3_stmt *st = wstmt(s, Q_SNAP_PUT, NULL);
    if (!st)
        return -1;
    sqlite3_bind_int64(st, 1, study_id);
    sqlite3_bind_int64(st, 2, event_seq);
    sqlite3_bind_blob64(st, 3, bytes, len, SQLITE_STATIC);
    sqlite3_bind_int64(st, 4, created_ms);
    if (run(s, st, "snapshot put"))
        return -1;
    st = wstmt(s, Q_SNAP_PRUNE, NULL);
    if (!st)
        return -1;
    sqlite3_bind_int64(st, 1, study_id);
    sqlite3_bind_int64(st, 2, event_seq);
    return run(s, st, "snapshot prune");
}

int store_snapshot_latest(store *s, int64_t study_id, unsigned char **bytes, size_t *len,
                          int64_t *event_seq)
{
    sqlite3_stmt *st = stmt(s, Q_SNAP_LATEST, NULL);
    if (!st)
        return -1;
    sqlite3_bind_int64(st, 1, study_id);
    int rc = sqlite3_step(st), ret = -1;
    if (rc == SQLITE_DONE) {
        ret = STORE_NOTFOUND;
    } else if (rc == SQLITE_ROW) {
        *len = (size_t)sqlite3_column_bytes(st, 0);
        *event_seq = sqlite3_column_int64(st, 1);
        *bytes = malloc(*len ? *len : 1);
        if (*bytes) {
            memcpy(*bytes, sqlite3_column_blob(st, 0), *len);
            ret = 0;
        }
    }
    sqlite3_reset(st);
    return ret;
}

int store_dictionary_put(store *s, int64_t study_id, uint64_t epoch, size_t dict_size,
                         uint64_t batch_size, int64_t event_seq, int64_t created_ms)
{
    sqlite3_stmt *st = wstmt(s, Q_DICT_PUT, NULL);
    if (!st)
        return -1;
    sqlite3_bind_int64(st, 1, study_id);
    sqlite3_bind_int64(st, 2, (int64_t)epoch);
    sqlite3_bind_int64(st, 3, (int64_t)dict_size);
    sqlite3_bind_int64(st, 4, (int64_t)batch_size);
    sqlite3_bind_int64(st, 5, event_seq);
    sqlite3_bind_int64(st, 6, created_ms);
    return run(s, st, "dictionary put");
}

int64_t store_dictionary_count(store *s, int64_t study_id)
{
    sqlite3_stmt *st = stmt(s, Q_DICT_COUNT, NULL);
    if (!st)
        return -1;
    sqlite3_bind_int64(st, 1, study_id);
    int64_t n = sqlite3_step(st) == SQLITE_ROW ? sqlite3_column_int64(st, 0) : -1;
    sqlite3_reset(st);
    return n;
}
