/*
 * storage.c - This file contains the SQLite implementation of storage.h: migrations
 * embedded in the binary, per-thread connections with cached prepared statements, and
 * the queries.
 *
 * Migrations: migrations/NNNN_*.sql are embedded with .incbin (listed in `migrations`
 * below: adding one is a new file plus one line). Migration i is applied when
 * PRAGMA user_version < i, in one transaction that also sets user_version = i.
 *
 * Connections: each thread opens its own connection for reads on first use (WAL,
 * synchronous=FULL, foreign_keys, busy_timeout, secure_delete off: Debian's SQLite
 * turns it on, zeroing freed cells of every REPLACE; a checkpoint every 10,000 WAL
 * pages rather than 1,000, as each one costs two fsyncs in the writer thread); writes
 * use the writer connection (see "the writer" below: direct operations, and queued ones
 * run by the writer thread). They are listed in the store under `lock` so that
 * store_close can close the ones whose threads are still alive; a thread that exits
 * closes its own through the pthread key's destructor.
 */
#include "storage.h"

#include "log.h"
#include "ratelimit.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

/* ------------------------------------------------------------ migrations */

#define EMBED(sym, file)                                                                    \
    __asm__(".section .rodata\n.global " #sym "\n" #sym ":\n.incbin \"" file "\"\n.byte 0\n" \
            ".previous\n");                                                                 \
    extern const char sym[];
EMBED(kb_migration_0001, "migrations/0001_init.sql")
EMBED(kb_migration_0002, "migrations/0002_ids_never_reused.sql")
EMBED(kb_migration_0003, "migrations/0003_study_state.sql")
EMBED(kb_migration_0004, "migrations/0004_ask_request_id.sql")

static const char *const migrations[] = {kb_migration_0001, kb_migration_0002,
                                         kb_migration_0003, kb_migration_0004};
#define N_MIGRATIONS ((int)(sizeof migrations / sizeof migrations[0]))

int store_latest_version(void) { return N_MIGRATIONS; }

/* ------------------------------------------------------------ connections */

enum {
    Q_BEGIN, Q_SYNC_FULL, Q_SYNC_NORMAL, Q_COMMIT, Q_ROLLBACK,
    Q_SAVEPOINT, Q_RELEASE, Q_ROLLBACK_TO,
    Q_STUDY_INSERT, Q_STUDY_DELETE, Q_STUDY_STATE, Q_STUDIES,
    Q_CSET_INSERT, Q_CSET_GET,
    Q_TRIAL_PUT, Q_TRIALS,
    Q_EVENT_PUT, Q_EVENTS,
    Q_OBS_PUT, Q_OBS,
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
    [Q_STUDY_STATE] = "UPDATE studies SET state = ? WHERE id = ?",
    [Q_STUDIES] = "SELECT id, name, config, created_ms, state FROM studies ORDER BY id",
    [Q_CSET_INSERT] = "INSERT INTO candidate_sets(n_rows, dim, names, data, created_ms) "
                      "VALUES(?, ?, ?, ?, ?)",
    [Q_CSET_GET] = "SELECT n_rows, dim, names, data FROM candidate_sets WHERE id = ?",
    [Q_TRIAL_PUT] = "INSERT OR REPLACE INTO trials(study_id, id, state, worker, "
                    "candidate_index, x, value, reason, created_ms, lease_ms, completed_ms, "
                    "request_id) VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
    [Q_TRIALS] = "SELECT id, state, worker, candidate_index, x, value, reason, created_ms, "
                 "lease_ms, completed_ms, request_id FROM trials WHERE study_id = ? ORDER BY id",
    [Q_EVENT_PUT] = "INSERT INTO events(study_id, seq, kind, trial_id, value, x) "
                    "VALUES(?, ?, ?, ?, ?, ?)",
    /* an ask's point is its trial's x (what the worker was given) */
    [Q_EVENTS] = "SELECT e.seq, e.kind, e.trial_id, e.value, "
                 "CASE e.kind WHEN 'ask' THEN t.x ELSE e.x END FROM events e "
                 "LEFT JOIN trials t ON e.kind = 'ask' AND t.study_id = e.study_id "
                 "AND t.id = e.trial_id "
                 "WHERE e.study_id = ? AND e.seq > ? ORDER BY e.seq",
    /* observations.value is in the user's direction, as study.c inserts it (0001's header
     * lists this table with the engine's values; its column comment is the right one) */
    [Q_OBS] = "SELECT x, value, created_ms FROM observations WHERE study_id = ? ORDER BY seq",
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
    int relaxed;         /* writer connection: synchronous=NORMAL currently set */
    int in_op;           /* OP_*: this thread's write operation (begin .. commit) */
    struct wop *rec;     /* OP_QUEUED: the operation being recorded */
} conn;

/* ------------------------------------------------------------ the writer
 *
 * All writes go through one connection, w->c, used under w->conn_lock only. Two kinds
 * of write operation:
 *   - direct (store_begin .. store_commit): holds conn_lock from BEGIN to COMMIT and runs
 *     its statements at once, so results (new ids, constraint conflicts) are known; its
 *     COMMIT is its own (synchronous=FULL). For the rare writes: studies, candidate sets,
 *     the snapshot at shutdown.
 *   - queued (store_begin_queued .. store_commit_async, store_wait): the statements and
 *     copies of their arguments are recorded, and the operation is appended to the queue
 *     with a ticket (a sequence number). The writer thread takes everything queued, runs
 *     it in one transaction committed with synchronous=NORMAL (written to the WAL, no
 *     fsync: it survives a crash of the process) and publishes `done` = the last ticket
 *     of the batch; operations queued meanwhile form the next batch.
 * Durability is a separate step, by the syncer thread: after a batch with a durable
 * operation, it takes `done` and fdatasyncs the WAL file (its own descriptor), which
 * makes every frame written so far durable, then publishes `synced` = that ticket. This
 * is what synchronous=FULL does at each COMMIT, moved out of the writer's way: the
 * writer commits the next batches while the fsync runs, so relaxed operations (asks)
 * are answered after their commit without waiting for anyone's fsync, and durable ones
 * share one fsync however many batches it covers. WAL recovery keeps a prefix of the
 * commits (frames are checksummed in a chain), so a power cut never keeps an operation
 * without the ones before it. Checkpoints (synchronous=NORMAL) fsync the WAL before
 * copying it into the database, so `synced` stays true across them. The WAL file is
 * never replaced while the writer connection is open (its SHARED lock on the database
 * keeps any other connection from deleting it). A failed fsync leaves the page cache in
 * an unknown state (Linux may drop the dirty pages): the process aborts, and a restart
 * recovers what the disk has.
 * Failure: a batch whose statements or COMMIT fail is rolled back entirely; its ticket
 * range is recorded as failed. An operation queued `after` a ticket that failed is
 * skipped (failed as well) without being applied: its caller computed it from state
 * that never reached the store. Batches end in ticket order. */
enum { OP_NONE, OP_DIRECT, OP_QUEUED };

typedef struct wval {
    enum { V_NULL, V_INT, V_REAL, V_TEXT, V_BLOB } type;
    int64_t i;
    double d;
    void *p;      /* text (NUL-terminated) or blob: owned by the recorded statement */
    size_t n;
} wval;

#define MAX_ARGS 12 /* the most any write statement takes (NARGS checks it) */
typedef struct wcall {
    int q, n;
    wval v[MAX_ARGS];
} wcall;

typedef struct wop {
    uint64_t ticket, after;
    int durable;
    wcall *calls;
    size_t n, cap;
    struct wop *next;
} wop;

#define FAILED_KEEP 64
typedef struct writer {
    conn *c;
    pthread_mutex_t conn_lock;  /* use of c: the writer thread's batch, or a direct op */
    pthread_mutex_t m;          /* protects every field below */
    pthread_cond_t queued;      /* to the writer thread: an operation was queued, or stop */
    pthread_cond_t ended;       /* to waiters: a batch ended, or a sync */
    pthread_cond_t sync_cv;     /* to the syncer thread: sync_want rose, or stop */
    wop *head, *tail;
    uint64_t last_ticket, done; /* last ticket given; last ticket of the last ended batch */
    uint64_t synced, sync_want; /* tickets <= synced are durable; the syncer's target */
    struct { uint64_t lo, hi; } failed[FAILED_KEEP]; /* last failed ticket ranges */
    uint64_t n_failed;
    uint64_t batches, syncs;    /* statistics */
    void (*hook)(uint64_t done, uint64_t synced); /* store_set_batch_hook */
    int stop, sync_stop, started, sync_started;
    int wal_fd;                 /* the WAL file, for the syncer's fdatasync */
    pthread_t th, sync_th;
} writer;

struct store {
    char *path;
    int lock_fd;          /* the database file, flock()ed for the store's life: lock_db */
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

/* Without a handle, SQLite could not allocate the connection (sqlite3_open_v2). */
/* One line per operation (`what`: the SQL text or a fixed name) per second at most, with
 * the count of those dropped since: a full disk failed every write, 3,000 lines in 3 s
 * (ops review, fifty-seventh session). */
static rate_limit db_lines = RATE_LIMIT_INIT(1.0);

static void db_log(sqlite3 *db, const char *what)
{
    unsigned long suppressed;
    if (!rate_limit_pass(&db_lines, what, mono_sec(), &suppressed))
        return;
    int os = db ? sqlite3_system_errno(db) : 0; /* "unable to open database file" says not why */
    log_json(LOG_ERROR, "database error",
             json_pack("{s:s,s:s,s:s?,s:I}", "op", what, "error",
                       db ? sqlite3_errmsg(db) : sqlite3_errstr(SQLITE_NOMEM), "reason",
                       os ? strerror(os) : NULL, "suppressed", (json_int_t)suppressed));
}

static conn *conn_raw(store *s)
{
    conn *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->owner = s;
    /* The busy timeout comes before the pragmas: they take locks too, and without it a
     * connection opened while another one held a lock (a checkpoint, WAL recovery after a
     * crash) failed at once with "database is locked", and so did the study rebuild that
     * needed it (bench/crash/run.py, cycle 73 of 100). */
    if (sqlite3_open_v2(s->path, &c->db,
                        SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
                        NULL) != SQLITE_OK ||
        sqlite3_busy_timeout(c->db, 10000) != SQLITE_OK ||
        sqlite3_exec(c->db,
                     "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL; "
                     "PRAGMA foreign_keys=ON; PRAGMA secure_delete=OFF; PRAGMA wal_autocheckpoint=10000;",
                     NULL, NULL, NULL) != SQLITE_OK) {
        db_log(c->db, "open");
        conn_free(c);
        return NULL;
    }
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

int store_read_error(store *s, char *msg, size_t n)
{
    conn *c = pthread_getspecific(s->key);
    int code = c ? sqlite3_errcode(c->db) : SQLITE_NOMEM;
    snprintf(msg, n, "%s", c ? sqlite3_errmsg(c->db) : "no connection");
    return code == SQLITE_CORRUPT || code == SQLITE_NOTADB;
}

/* Statement q of connection c, prepared once (kept for the connection's life), reset and
 * unbound; NULL (logged) if it cannot be prepared. */
static sqlite3_stmt *prepared(conn *c, int q)
{
    if (!c->st[q] &&
        sqlite3_prepare_v3(c->db, sql[q], -1, SQLITE_PREPARE_PERSISTENT, &c->st[q], NULL) !=
            SQLITE_OK) {
        db_log(c->db, sql[q]);
        return NULL;
    }
    sqlite3_reset(c->st[q]);
    sqlite3_clear_bindings(c->st[q]);
    return c->st[q];
}

static sqlite3_stmt *stmt(store *s, int q, conn **out)
{
    conn *c = get_conn(s);
    if (!c)
        return NULL;
    if (out)
        *out = c;
    return prepared(c, q);
}

/* A failed fsync leaves the page cache in an unknown state: Linux may have dropped dirty
 * pages of earlier commits, and a later fsync succeed without them, so nothing written
 * may be acknowledged any more. The process stops; a restart recovers what the disk has. */
static void fsync_failed(const char *file, const char *error)
{
    log_json(LOG_ERROR, "fsync failed: aborting (a restart recovers from the database)",
             json_pack("{s:s,s:s}", "file", file, "error", error));
    abort();
}

/* Steps a statement that returns no row; 0 ok, STORE_CONFLICT on a constraint, -1.
 * SQLite's own fsync (a direct COMMIT, a checkpoint) failing aborts, as the syncer's. */
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
    sqlite3 *db = sqlite3_db_handle(st);
    int xrc = sqlite3_extended_errcode(db);
    if (xrc == SQLITE_IOERR_FSYNC || xrc == SQLITE_IOERR_DIR_FSYNC)
        fsync_failed("database", sqlite3_errmsg(db));
    db_log(db, what);
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

/* Whether PRAGMA foreign_key_check reports any row (or cannot run). */
static int foreign_key_violations(sqlite3 *db)
{
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(db, "PRAGMA foreign_key_check", -1, &st, NULL) != SQLITE_OK)
        return 1;
    int rc = sqlite3_step(st);
    sqlite3_finalize(st);
    return rc != SQLITE_DONE;
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
    /* Foreign keys off while migrating (the pragma is a no-op inside a transaction), so
     * that rebuilding a referenced table (0002) cascades nothing; each migration must
     * leave no violation (foreign_key_check, before its COMMIT). */
    int rc = sqlite3_exec(db, "PRAGMA foreign_keys=OFF", NULL, NULL, NULL) == SQLITE_OK ? 0 : -1;
    if (rc)
        snprintf(errbuf, errsize, "cannot disable foreign keys: %s", sqlite3_errmsg(db));
    for (int i = v; rc == 0 && i < N_MIGRATIONS; i++) {
        char setv[64];
        snprintf(setv, sizeof setv, "PRAGMA user_version = %d", i + 1);
        if (sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL) != SQLITE_OK ||
            sqlite3_exec(db, migrations[i], NULL, NULL, NULL) != SQLITE_OK ||
            foreign_key_violations(db) ||
            sqlite3_exec(db, setv, NULL, NULL, NULL) != SQLITE_OK ||
            sqlite3_exec(db, "COMMIT", NULL, NULL, NULL) != SQLITE_OK) {
            snprintf(errbuf, errsize, "migration %04d failed: %s", i + 1, sqlite3_errmsg(db));
            sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
            rc = -1;
            break;
        }
        log_json(LOG_INFO, "migration applied", json_pack("{s:i}", "version", i + 1));
    }
    if (sqlite3_exec(db, "PRAGMA foreign_keys=ON", NULL, NULL, NULL) != SQLITE_OK && rc == 0) {
        snprintf(errbuf, errsize, "cannot enable foreign keys: %s", sqlite3_errmsg(db));
        rc = -1;
    }
    return rc;
}

static int writer_open(store *s, char *errbuf, size_t errsize);
static void writer_close(store *s);

/* A path SQLite would not open as a file of that name: "" (a temporary database),
 * ":memory:", or a "file:" URI (Debian's SQLite takes URIs). Studies must outlive the
 * process, and the syncer opens the WAL by the file's name. */
static int plain_path(const char *p)
{
    return p[0] && strcmp(p, ":memory:") != 0 && strncmp(p, "file:", 5) != 0;
}

/* One daemon per database: two daemons on one file took the same ids, answered tells of
 * valid trials 404 and asks 503 "database write failed" (ops review, fifty-seventh
 * session). An exclusive flock() on the database file, held until store_close: flock
 * locks are apart from the POSIX locks SQLite takes, and this descriptor is closed only
 * after every connection (closing any descriptor of a file drops the process's POSIX
 * locks on it). Taken before SQLite opens the file, so a second daemon migrates nothing.
 * Also refuses a file this process may not write, and creates a new one 0640 (less the
 * umask), not 0644: studies hold what the world need not read (SQLite gives its -wal and
 * -shm files the database file's mode). */
static int lock_db(store *s, char *errbuf, size_t errsize)
{
    s->lock_fd = open(s->path, O_RDWR | O_CREAT | O_CLOEXEC, 0640);
    if (s->lock_fd < 0)
        return snprintf(errbuf, errsize, "cannot open database %s for writing: %s", s->path,
                        strerror(errno)), -1;
    if (flock(s->lock_fd, LOCK_EX | LOCK_NB) == 0)
        return 0;
    if (errno == EWOULDBLOCK)
        return snprintf(errbuf, errsize, "database %s is in use by another kbanditd", s->path), -1;
    return snprintf(errbuf, errsize, "cannot lock database %s: %s", s->path, strerror(errno)), -1;
}

store *store_open(const char *path, char *errbuf, size_t errsize)
{
    if (!plain_path(path)) {
        snprintf(errbuf, errsize, "database path \"%s\" must name a file (not empty, "
                 ":memory: or a file: URI)", path);
        return NULL;
    }
    store *s = calloc(1, sizeof *s);
    if (!s || !(s->path = strdup(path))) {
        free(s);
        snprintf(errbuf, errsize, "out of memory");
        return NULL;
    }
    s->lock_fd = -1;
    pthread_mutex_init(&s->lock, NULL);
    pthread_key_create(&s->key, conn_release);
    if (lock_db(s, errbuf, errsize)) {
        store_close(s);
        return NULL;
    }
    conn *c = get_conn(s);
    if (!c) {
        snprintf(errbuf, errsize, "cannot open database %s (the log line before says why)", path);
        store_close(s);
        return NULL;
    }
    if (sqlite3_db_readonly(c->db, "main") == 1) {
        snprintf(errbuf, errsize, "database %s is read-only to this process", path);
        store_close(s);
        return NULL;
    }
    if (migrate(c->db, errbuf, errsize) || writer_open(s, errbuf, errsize)) {
        store_close(s);
        return NULL;
    }
    return s;
}

void store_close(store *s)
{
    if (!s)
        return;
    writer_close(s);
    pthread_setspecific(s->key, NULL);
    pthread_key_delete(s->key);
    while (s->conns) {
        conn *c = s->conns;
        s->conns = c->next;
        conn_free(c);
    }
    if (s->lock_fd >= 0)
        close(s->lock_fd);
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

/* ------------------------------------------------------------ writer: statements */

static void wop_free(wop *op)
{
    for (size_t i = 0; i < op->n; i++)
        for (int j = 0; j < op->calls[i].n; j++)
            free(op->calls[i].v[j].p);
    free(op->calls);
    free(op);
}

/* Binds v[0..n) to st (the values outlive the step). */
static void bind_all(sqlite3_stmt *st, const wval *v, int n)
{
    for (int i = 0; i < n; i++) {
        if (v[i].type == V_INT)
            sqlite3_bind_int64(st, i + 1, v[i].i);
        else if (v[i].type == V_REAL)
            sqlite3_bind_double(st, i + 1, v[i].d);
        else if (v[i].type == V_TEXT)
            sqlite3_bind_text(st, i + 1, v[i].p, -1, SQLITE_STATIC);
        else if (v[i].type == V_BLOB)
            sqlite3_bind_blob64(st, i + 1, v[i].p, v[i].n, SQLITE_STATIC);
    }
}

/* Runs statement q with v on the writer connection (conn_lock held). */
static int exec_now(store *s, int q, const wval *v, int n)
{
    sqlite3_stmt *st = prepared(s->w.c, q);
    if (!st)
        return -1;
    bind_all(st, v, n);
    return run(s, st, sql[q]);
}

/* Appends a copy of statement q with v to the operation being recorded. */
static int record(wop *op, int q, const wval *v, int n)
{
    if (op->n == op->cap) {
        size_t nc = op->cap ? op->cap * 2 : 4;
        wcall *nb = realloc(op->calls, nc * sizeof *nb);
        if (!nb)
            return -1;
        op->calls = nb;
        op->cap = nc;
    }
    wcall *c = &op->calls[op->n];
    c->q = q;
    c->n = 0;
    for (int i = 0; i < n; i++) {
        c->v[i] = v[i];
        c->v[i].p = NULL;
        c->n = i + 1;
        if (v[i].type == V_TEXT || v[i].type == V_BLOB) {
            size_t len = v[i].type == V_TEXT ? strlen(v[i].p) + 1 : v[i].n;
            if (!(c->v[i].p = malloc(len ? len : 1)))
                goto oom;
            memcpy(c->v[i].p, v[i].p, len);
        }
    }
    op->n++;
    return 0;
oom:
    for (int i = 0; i < c->n; i++)
        free(c->v[i].p);
    return -1;
}

/* A write statement of the calling thread's operation: run now (direct) or recorded
 * (queued). 0, STORE_CONFLICT (direct only) or -1. */
static int wexec(store *s, int q, const wval *v, int n)
{
    conn *me = get_conn(s);
    if (!me || me->in_op == OP_NONE) {
        log_json(LOG_ERROR, "write outside a transaction", json_pack("{s:s}", "sql", sql[q]));
        return -1;
    }
    return me->in_op == OP_QUEUED ? record(me->rec, q, v, n) : exec_now(s, q, v, n);
}

/* Runs one statement without arguments of the writer connection (conn_lock held). */
static int wrun(store *s, int q) { return exec_now(s, q, NULL, 0); }

/* Ends the writer connection's transaction (conn_lock held) unless SQLite already
 * rolled it back, as it does when COMMIT fails on an I/O error or a full disk. */
static void rollback(store *s)
{
    if (!sqlite3_get_autocommit(s->w.c->db))
        wrun(s, Q_ROLLBACK);
}

/* Sets synchronous for the next transaction of the writer connection. */
static int set_sync(store *s, int durable)
{
    conn *c = s->w.c;
    if (c->relaxed == !durable)
        return 0;
    if (wrun(s, durable ? Q_SYNC_FULL : Q_SYNC_NORMAL))
        return -1;
    c->relaxed = !durable;
    return 0;
}

/* ------------------------------------------------------------ writer: batches */

/* Whether ticket t is in a failed range (m held). Beyond the last FAILED_KEEP failures
 * the answer is conservatively yes. */
static int ticket_failed(const writer *w, uint64_t t)
{
    uint64_t kept = w->n_failed < FAILED_KEEP ? w->n_failed : FAILED_KEEP, oldest = UINT64_MAX;
    if (!t)
        return 0;
    for (uint64_t i = 0; i < kept; i++) {
        if (w->failed[i].lo <= t && t <= w->failed[i].hi)
            return 1;
        oldest = w->failed[i].lo < oldest ? w->failed[i].lo : oldest;
    }
    return w->n_failed > FAILED_KEEP && t < oldest;
}

static void fail_range(writer *w, uint64_t lo, uint64_t hi)
{
    w->failed[w->n_failed % FAILED_KEEP].lo = lo;
    w->failed[w->n_failed % FAILED_KEEP].hi = hi;
    w->n_failed++;
}

/* Runs the operations of one batch in a transaction (conn_lock held). Operations after
 * a failed ticket are skipped and recorded as failed (under m, at once, so that later
 * operations of the batch see it). 0, or -1 when the batch must be rolled back. */
static int run_batch(store *s, wop *ops)
{
    writer *w = &s->w;
    if (set_sync(s, 0) || wrun(s, Q_BEGIN))
        return -1;
    for (wop *op = ops; op; op = op->next) {
        pthread_mutex_lock(&w->m);
        int skip = op->after && ticket_failed(w, op->after);
        if (skip)
            fail_range(w, op->ticket, op->ticket);
        pthread_mutex_unlock(&w->m);
        for (size_t i = 0; !skip && i < op->n; i++)
            if (exec_now(s, op->calls[i].q, op->calls[i].v, op->calls[i].n)) {
                rollback(s);
                return -1;
            }
    }
    if (wrun(s, Q_COMMIT)) {
        rollback(s);
        return -1;
    }
    return 0;
}

/* Asks the syncer for a sync covering ticket (m held). */
static void want_sync(writer *w, uint64_t ticket)
{
    if (ticket > w->sync_want) {
        w->sync_want = ticket;
        pthread_cond_signal(&w->sync_cv);
    }
}

static void *writer_main(void *arg)
{
    store *s = arg;
    writer *w = &s->w;
    pthread_mutex_lock(&w->m);
    for (;;) {
        while (!w->head && !w->stop)
            pthread_cond_wait(&w->queued, &w->m);
        if (!w->head)
            break; /* stopping, and the queue is drained */
        wop *ops = w->head;
        uint64_t lo = ops->ticket, hi = w->tail->ticket;
        int durable = 0;
        for (wop *op = ops; op; op = op->next)
            durable |= op->durable;
        w->head = w->tail = NULL;
        pthread_mutex_unlock(&w->m);
        pthread_mutex_lock(&w->conn_lock);
        int rc = run_batch(s, ops);
        pthread_mutex_unlock(&w->conn_lock);
        pthread_mutex_lock(&w->m);
        if (rc)
            fail_range(w, lo, hi);
        w->done = hi;
        w->batches++;
        if (durable && !rc)
            want_sync(w, hi);
        void (*hook)(uint64_t, uint64_t) = w->hook;
        uint64_t synced = w->synced;
        pthread_cond_broadcast(&w->ended);
        pthread_mutex_unlock(&w->m);
        if (hook)
            hook(hi, synced);
        while (ops) {
            wop *next = ops->next;
            wop_free(ops);
            ops = next;
        }
        pthread_mutex_lock(&w->m);
    }
    pthread_mutex_unlock(&w->m);
    return NULL;
}

static void *syncer_main(void *arg)
{
    store *s = arg;
    writer *w = &s->w;
    pthread_mutex_lock(&w->m);
    for (;;) {
        while (w->sync_want <= w->synced && !w->sync_stop)
            pthread_cond_wait(&w->sync_cv, &w->m);
        if (w->sync_want <= w->synced)
            break; /* stopping, and nothing is left to sync */
        /* Everything committed by now is in the WAL file's page cache: one fdatasync
         * makes it all durable, batches committed after sync_want's included. */
        uint64_t target = w->done;
        pthread_mutex_unlock(&w->m);
        if (fdatasync(w->wal_fd))
            fsync_failed("WAL", strerror(errno));
        pthread_mutex_lock(&w->m);
        w->synced = target;
        w->syncs++;
        void (*hook)(uint64_t, uint64_t) = w->hook;
        uint64_t done = w->done;
        pthread_cond_broadcast(&w->ended);
        pthread_mutex_unlock(&w->m);
        if (hook)
            hook(done, target);
        pthread_mutex_lock(&w->m);
    }
    pthread_mutex_unlock(&w->m);
    return NULL;
}

/* Opens the WAL file for the syncer (it exists: the database was read in WAL mode) and
 * makes its directory entry durable, which SQLite does at a new WAL's first sync, and
 * with synchronous=NORMAL only at the first checkpoint. */
static int wal_open(store *s)
{
    /* SQLite's own name for it: a --db that is a symbolic link has its WAL beside the
     * link's target, not beside the link. */
    const char *wal = sqlite3_filename_wal(sqlite3_db_filename(s->w.c->db, "main"));
    char *dir = strdup(wal);
    int ok = 0;
    if (dir) {
        s->w.wal_fd = open(wal, O_RDONLY | O_CLOEXEC);
        char *slash = strrchr(dir, '/');
        const char *d = !slash ? "." : slash == dir ? "/" : (*slash = 0, dir);
        int dfd = open(d, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        ok = s->w.wal_fd >= 0 && dfd >= 0 && fsync(dfd) == 0;
        if (dfd >= 0)
            close(dfd);
    }
    if (!ok)
        log_json(LOG_ERROR, "cannot open the WAL file",
                 json_pack("{s:s,s:s}", "path", wal, "error", strerror(errno)));
    free(dir);
    return ok ? 0 : -1;
}

/* Opens the writer connection and the WAL file, and starts the writer and syncer
 * threads; on failure errbuf says which part failed. */
static int writer_open(store *s, char *errbuf, size_t errsize)
{
    writer *w = &s->w;
    w->wal_fd = -1;
    if (!(w->c = conn_raw(s)))
        return snprintf(errbuf, errsize, "cannot open the writer connection"), -1;
    pthread_mutex_init(&w->conn_lock, NULL);
    pthread_mutex_init(&w->m, NULL);
    pthread_cond_init(&w->queued, NULL);
    pthread_cond_init(&w->ended, NULL);
    pthread_cond_init(&w->sync_cv, NULL);
    if (wal_open(s))
        return snprintf(errbuf, errsize, "cannot open the WAL file"), -1;
    int e = pthread_create(&w->th, NULL, writer_main, s);
    if (e)
        return snprintf(errbuf, errsize, "cannot start the writer thread: %s", strerror(e)), -1;
    pthread_setname_np(w->th, "kb-writer");
    w->started = 1;
    if ((e = pthread_create(&w->sync_th, NULL, syncer_main, s)))
        return snprintf(errbuf, errsize, "cannot start the syncer thread: %s", strerror(e)), -1;
    pthread_setname_np(w->sync_th, "kb-syncer");
    w->sync_started = 1;
    return 0;
}

/* Drains the queue and stops the writer thread, then the syncer after its last sync. */
static void writer_close(store *s)
{
    writer *w = &s->w;
    if (w->started) {
        pthread_mutex_lock(&w->m);
        w->stop = 1;
        pthread_cond_signal(&w->queued);
        pthread_mutex_unlock(&w->m);
        pthread_join(w->th, NULL);
    }
    if (w->sync_started) {
        pthread_mutex_lock(&w->m);
        w->sync_stop = 1;
        pthread_cond_signal(&w->sync_cv);
        pthread_mutex_unlock(&w->m);
        pthread_join(w->sync_th, NULL);
    }
    if (w->wal_fd >= 0)
        close(w->wal_fd);
    if (w->c) {
        conn_free(w->c);
        pthread_mutex_destroy(&w->conn_lock);
        pthread_mutex_destroy(&w->m);
        pthread_cond_destroy(&w->queued);
        pthread_cond_destroy(&w->ended);
        pthread_cond_destroy(&w->sync_cv);
    }
}

/* ------------------------------------------------------------ writer: operations */

int store_begin(store *s)
{
    conn *me = get_conn(s);
    if (!me || me->in_op)
        return -1;
    pthread_mutex_lock(&s->w.conn_lock);
    if (set_sync(s, 1) || wrun(s, Q_BEGIN)) {
        pthread_mutex_unlock(&s->w.conn_lock);
        return -1;
    }
    me->in_op = OP_DIRECT;
    return 0;
}

int store_begin_queued(store *s, int durable)
{
    conn *me = get_conn(s);
    if (!me || me->in_op || !(me->rec = calloc(1, sizeof *me->rec)))
        return -1;
    me->rec->durable = durable;
    me->in_op = OP_QUEUED;
    return 0;
}

int store_commit_async(store *s, uint64_t after, uint64_t *ticket)
{
    writer *w = &s->w;
    conn *me = get_conn(s);
    if (!me || me->in_op != OP_QUEUED)
        return -1;
    wop *op = me->rec;
    me->rec = NULL;
    me->in_op = OP_NONE;
    op->after = after;
    pthread_mutex_lock(&w->m);
    *ticket = op->ticket = ++w->last_ticket;
    if (w->tail)
        w->tail->next = op;
    else
        w->head = op;
    w->tail = op;
    pthread_cond_signal(&w->queued);
    pthread_mutex_unlock(&w->m);
    return 0;
}

int store_wait(store *s, uint64_t ticket, int durable)
{
    writer *w = &s->w;
    pthread_mutex_lock(&w->m);
    while (w->done < ticket)
        pthread_cond_wait(&w->ended, &w->m);
    int rc = ticket_failed(w, ticket) ? -1 : 0;
    if (rc == 0 && durable) {
        want_sync(w, ticket);
        while (w->synced < ticket)
            pthread_cond_wait(&w->ended, &w->m);
    }
    pthread_mutex_unlock(&w->m);
    return rc;
}

int store_ticket_failed(store *s, uint64_t ticket)
{
    writer *w = &s->w;
    pthread_mutex_lock(&w->m);
    int rc = ticket && w->done >= ticket && ticket_failed(w, ticket);
    pthread_mutex_unlock(&w->m);
    return rc;
}

int store_ticket_done(store *s, uint64_t ticket, uint64_t durable)
{
    pthread_mutex_lock(&s->w.m);
    /* A failed ticket is never synced: its waiters are answered now, not at the next
     * successful sync (with a full disk there may be none for a long time). */
    int rc = s->w.done >= ticket &&
             (s->w.synced >= durable || ticket_failed(&s->w, ticket) ||
              (s->w.done >= durable && ticket_failed(&s->w, durable)));
    pthread_mutex_unlock(&s->w.m);
    return rc;
}

void store_set_batch_hook(store *s, void (*hook)(uint64_t done, uint64_t synced))
{
    pthread_mutex_lock(&s->w.m);
    s->w.hook = hook;
    pthread_mutex_unlock(&s->w.m);
}

int store_commit(store *s)
{
    conn *me = get_conn(s);
    if (!me || me->in_op == OP_NONE)
        return -1;
    if (me->in_op == OP_QUEUED) {
        uint64_t ticket;
        int durable = me->rec->durable;
        return store_commit_async(s, 0, &ticket) ? -1 : store_wait(s, ticket, durable);
    }
    me->in_op = OP_NONE;
    int rc = wrun(s, Q_COMMIT);
    if (rc)
        rollback(s);
    pthread_mutex_unlock(&s->w.conn_lock);
    return rc ? -1 : 0;
}

void store_rollback(store *s)
{
    conn *me = get_conn(s);
    if (!me || me->in_op == OP_NONE)
        return;
    if (me->in_op == OP_QUEUED) {
        wop_free(me->rec);
        me->rec = NULL;
    } else {
        rollback(s);
        pthread_mutex_unlock(&s->w.conn_lock);
    }
    me->in_op = OP_NONE;
}

void store_counts(store *s, uint64_t *batches, uint64_t *ops, uint64_t *syncs,
                  uint64_t *failed)
{
    pthread_mutex_lock(&s->w.m);
    *batches = s->w.batches;
    *syncs = s->w.syncs;
    *failed = s->w.n_failed;
    *ops = s->w.last_ticket;
    pthread_mutex_unlock(&s->w.m);
}

/* ------------------------------------------------------------ queries */

#define I(x) {.type = V_INT, .i = (x)}
#define R(x) {.type = V_REAL, .d = (x)}
#define T(x) {.type = (x) ? V_TEXT : V_NULL, .p = (void *)(x)}
#define B(x, len) {.type = (x) ? V_BLOB : V_NULL, .p = (void *)(x), .n = (len)}
/* The arguments of a statement, which must fit a recorded call (MAX_ARGS: a trials row
 * of 12 overran the 11 it had, found by ASan; now a compile error). */
#define NARGS(v)                                                                          \
    ((int)(sizeof v / sizeof v[0] +                                                       \
           0 * sizeof(char[sizeof v / sizeof v[0] <= MAX_ARGS ? 1 : -1])))

int store_study_insert(store *s, const char *name, const char *config, int64_t created_ms,
                       int64_t *id)
{
    conn *me = get_conn(s);
    if (!me || me->in_op != OP_DIRECT) /* the id is needed now */
        return -1;
    wval v[] = {T(name), T(config), I(created_ms)};
    int rc = exec_now(s, Q_STUDY_INSERT, v, NARGS(v));
    if (rc == 0)
        *id = sqlite3_last_insert_rowid(s->w.c->db);
    return rc;
}

int store_study_delete(store *s, int64_t id)
{
    wval v[] = {I(id)};
    return wexec(s, Q_STUDY_DELETE, v, NARGS(v));
}

int store_study_set_state(store *s, int64_t id, const char *state)
{
    wval v[] = {T(state), I(id)};
    return wexec(s, Q_STUDY_STATE, v, NARGS(v));
}

int store_studies_each(store *s, store_study_cb cb, void *ud)
{
    sqlite3_stmt *st = stmt(s, Q_STUDIES, NULL);
    if (!st)
        return -1;
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW)
        if (cb(ud, sqlite3_column_int64(st, 0), (const char *)sqlite3_column_text(st, 1),
               (const char *)sqlite3_column_text(st, 2), sqlite3_column_int64(st, 3),
               (const char *)sqlite3_column_text(st, 4))) {
            sqlite3_reset(st);
            return -1;
        }
    sqlite3_reset(st);
    return rc == SQLITE_DONE ? 0 : -1;
}

int store_candidate_set_insert(store *s, const double *rows, size_t n, size_t dim,
                               const char *names_json, int64_t created_ms, int64_t *id)
{
    if (store_begin(s))
        return -1;
    wval v[] = {I((int64_t)n), I((int64_t)dim), T(names_json),
                B(rows, n * dim * sizeof *rows), I(created_ms)};
    int rc = exec_now(s, Q_CSET_INSERT, v, NARGS(v));
    if (rc) {
        store_rollback(s);
        return rc;
    }
    *id = sqlite3_last_insert_rowid(s->w.c->db);
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
        if (*rows && (*names_json || !nm) && bytes == *n * *dim * sizeof **rows) {
            memcpy(*rows, sqlite3_column_blob(st, 3), bytes);
            ret = 0;
        } else { /* nothing for the caller to free (it did free them again: a double free) */
            free(*rows);
            free(*names_json);
            *rows = NULL;
            *names_json = NULL;
        }
    }
    sqlite3_reset(st);
    return ret;
}

int store_trial_put(store *s, int64_t study_id, const trial_rec *t, size_t dim)
{
    wval none = {.type = V_NULL};
    wval v[] = {I(study_id), I(t->id), T(proto_trial_state_name(t->state)),
                T(t->worker ? t->worker : ""), I(t->cand_index), B(t->x, dim * sizeof *t->x),
                R(t->value), T(t->reason), I(t->created_ms), I(t->lease_ms),
                I(t->completed_ms), T(t->request_id)};
    if (t->cand_index < 0)
        v[4] = none;
    if (t->state != TRIAL_COMPLETED)
        v[6] = none;
    if (!t->completed_ms)
        v[10] = none;
    return wexec(s, Q_TRIAL_PUT, v, NARGS(v));
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
        t.request_id = (char *)sqlite3_column_text(st, 10);
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
    wval none = {.type = V_NULL};
    wval v[] = {I(study_id), I(ev->seq), T(kind_name(ev->kind)), I(ev->trial_id), R(ev->value),
                B(ev->x, dim * sizeof *ev->x)};
    if (!ev->trial_id)
        v[3] = none;
    if (ev->kind != 't' && ev->kind != 'o')
        v[4] = none;
    return wexec(s, Q_EVENT_PUT, v, NARGS(v));
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
        if (ev.kind == 'o' || ev.kind == 'a') {
            /* an ask without its trial row (none is deleted alone) replays unrecorded */
            int missing = ev.kind == 'a' && sqlite3_column_type(st, 4) == SQLITE_NULL;
            if (!missing && (size_t)sqlite3_column_bytes(st, 4) != dim * sizeof(double)) {
                ret = -1;
                break;
            }
            ev.x = missing ? NULL : sqlite3_column_blob(st, 4);
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
    wval v[] = {I(study_id), I(seq), B(x, dim * sizeof *x), R(value), I(created_ms)};
    return wexec(s, Q_OBS_PUT, v, NARGS(v));
}

int store_observations_each(store *s, int64_t study_id, size_t dim, store_obs_cb cb,
                            void *ud)
{
    sqlite3_stmt *st = stmt(s, Q_OBS, NULL);
    if (!st)
        return -1;
    sqlite3_bind_int64(st, 1, study_id);
    int rc, ret = 0;
    while (ret == 0 && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        if ((size_t)sqlite3_column_bytes(st, 0) != dim * sizeof(double)) {
            ret = -1;
            break;
        }
        ret = cb(ud, sqlite3_column_blob(st, 0), sqlite3_column_double(st, 1),
                 sqlite3_column_int64(st, 2)) ? -1 : 0;
    }
    if (ret == 0 && rc != SQLITE_DONE)
        ret = -1;
    sqlite3_reset(st);
    return ret;
}

int store_snapshot_put(store *s, int64_t study_id, int64_t event_seq,
                       const unsigned char *bytes, size_t len, int64_t created_ms)
{
    wval v[] = {I(study_id), I(event_seq), B(bytes, len), I(created_ms)};
    wval prune[] = {I(study_id), I(event_seq)};
    return wexec(s, Q_SNAP_PUT, v, NARGS(v)) || wexec(s, Q_SNAP_PRUNE, prune, NARGS(prune))
               ? -1 : 0;
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
    wval v[] = {I(study_id), I((int64_t)epoch), I((int64_t)dict_size), I((int64_t)batch_size),
                I(event_seq), I(created_ms)};
    return wexec(s, Q_DICT_PUT, v, NARGS(v));
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
