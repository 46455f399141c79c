/*
 * test_storage.c - unit tests of server/storage.c and of recovery in server/rebuild.c:
 * migrations on a fresh database and on older ones, refusal of a newer schema, integrity,
 * the queries' round trips (the study state's included), and a restored study making
 * exactly the choices an uninterrupted one makes (snapshot + event replay).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../server/storage.h"
#include "../../server/log.h"
#include "../../server/study.h"
#include "util/studyutil.h"
#include "util/testutil.h"

static void migrations_apply_once(void **state)
{
    (void)state;
    char *path = tu_temp_db("kb-test-storage"), err[256];
    store *s = store_open(path, err, sizeof err);
    assert_non_null(s);
    assert_int_equal(store_schema_version(s), store_latest_version());
    assert_int_equal(store_integrity_check(s), 0);
    store_close(s);
    s = store_open(path, err, sizeof err); /* again: nothing to apply */
    assert_non_null(s);
    assert_int_equal(store_schema_version(s), store_latest_version());
    store_close(s);
    tu_remove_db(path);
}

static void newer_schema_is_refused(void **state)
{
    (void)state;
    char *path = tu_temp_db("kb-test-storage"), err[256] = "";
    sqlite3 *db;
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    char sql[64];
    snprintf(sql, sizeof sql, "PRAGMA user_version = %d", store_latest_version() + 1);
    assert_int_equal(sqlite3_exec(db, sql, NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(db);
    assert_null(store_open(path, err, sizeof err));
    assert_non_null(strstr(err, "newer"));
    tu_remove_db(path);
}

static void *commit_later(void *db)
{
    usleep(300 * 1000);
    sqlite3_exec(db, "COMMIT", NULL, NULL, NULL);
    return NULL;
}

/* A connection opened while another holds the database a moment waits for it: the busy
 * timeout is set before the connection's pragmas, which read the database (a restore
 * thread's connection, opened during a WAL recovery, failed with "database is locked"
 * and its study was marked failed). */
static void open_waits_for_a_held_database(void **state)
{
    (void)state;
    char *path = tu_temp_db("kb-test-storage"), err[256] = "";
    sqlite3 *db;
    pthread_t th;
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db, "CREATE TABLE held(a); BEGIN EXCLUSIVE; "
                                      "INSERT INTO held VALUES(1);", NULL, NULL, NULL),
                     SQLITE_OK);
    assert_int_equal(pthread_create(&th, NULL, commit_later, db), 0);
    store *s = store_open(path, err, sizeof err);
    pthread_join(th, NULL);
    sqlite3_close(db);
    assert_non_null(s);
    store_close(s);
    tu_remove_db(path);
}

static int64_t insert_study(store *s, const char *name)
{
    int64_t id = 0;
    assert_int_equal(store_begin(s), 0);
    assert_int_equal(store_study_insert(s, name, "{}", 1, &id), 0);
    assert_int_equal(store_commit(s), 0);
    return id;
}

static void delete_study(store *s, int64_t id)
{
    assert_int_equal(store_begin(s), 0);
    assert_int_equal(store_study_delete(s, id), 0);
    assert_int_equal(store_commit(s), 0);
}

/* Issue 16 item 2: a deleted study's id, and so its (study, trial) pairs, never come back,
 * across restarts too. */
static void deleted_ids_are_not_reused(void **state)
{
    (void)state;
    char *path = tu_temp_db("kb-test-storage"), err[256];
    store *s = store_open(path, err, sizeof err);
    assert_non_null(s);
    int64_t a = insert_study(s, "a"), b = insert_study(s, "b");
    delete_study(s, b);
    int64_t c = insert_study(s, "c");
    assert_true(c > b && a < b);
    delete_study(s, c);
    store_close(s);
    s = store_open(path, err, sizeof err);
    assert_non_null(s);
    assert_true(insert_study(s, "d") > c);
    store_close(s);
    tu_remove_db(path);
}

/* A database of schema 1 with data is migrated in place: rows and their trials kept, the
 * largest existing id not handed out again. */
static void migration_keeps_rows_and_their_trials(void **state)
{
    (void)state;
    char *path = tu_temp_db("kb-test-storage");
    sqlite3 *db;
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    extern const char kb_migration_0001[];
    assert_int_equal(sqlite3_exec(db, kb_migration_0001, NULL, NULL, NULL), SQLITE_OK);
    assert_int_equal(
        sqlite3_exec(db,
                     "PRAGMA user_version = 1;"
                     "INSERT INTO studies VALUES(7, 'old', '{}', 1);"
                     "INSERT INTO trials(study_id, id, state, worker, x, created_ms, lease_ms)"
                     " VALUES(7, 1, 'pending', 'w', x'0000000000000000', 1, 1);",
                     NULL, NULL, NULL),
        SQLITE_OK);
    sqlite3_close(db);
    char err[256] = "";
    store *s = store_open(path, err, sizeof err);
    assert_non_null(s);
    int n = 0;
    assert_int_equal(store_trials_each(s, 7, 1, tu_count_trials, &n), 0);
    assert_int_equal(n, 1);
    delete_study(s, 7);
    assert_int_equal(insert_study(s, "new"), 8);
    assert_int_equal(store_integrity_check(s), 0);
    store_close(s);
    tu_remove_db(path);
}

/* Collects the state of every stored study into a string ("7:active,8:paused,"). */
static int collect_state(void *ud, int64_t id, const char *name, const char *config,
                         int64_t created_ms, const char *state)
{
    char *out = ud;
    snprintf(out + strlen(out), 256 - strlen(out), "%lld:%s,", (long long)id, state);
    return 0;
}

/* A database of schema 2 gets the study state (migration 0003): its studies are active,
 * a state set is read back, and the table refuses a state that does not exist. */
static void migration_makes_studies_active_and_states_round_trip(void **state)
{
    (void)state;
    char *path = tu_temp_db("kb-test-storage");
    sqlite3 *db;
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    extern const char kb_migration_0001[], kb_migration_0002[];
    assert_int_equal(sqlite3_exec(db, kb_migration_0001, NULL, NULL, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db, kb_migration_0002, NULL, NULL, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db,
                                  "PRAGMA user_version = 2;"
                                  "INSERT INTO studies VALUES(7, 'old', '{}', 1);",
                                  NULL, NULL, NULL),
                     SQLITE_OK);
    sqlite3_close(db);
    char err[256] = "", got[256] = "";
    store *s = store_open(path, err, sizeof err);
    assert_non_null(s);
    assert_int_equal(store_schema_version(s), store_latest_version());
    int64_t id = insert_study(s, "new");
    assert_int_equal(store_begin(s), 0);
    assert_int_equal(store_study_set_state(s, id, "paused"), 0);
    assert_int_equal(store_commit(s), 0);
    assert_int_equal(store_begin(s), 0);
    assert_int_not_equal(store_study_set_state(s, 7, "done"), 0);
    store_rollback(s);
    assert_int_equal(store_studies_each(s, collect_state, got), 0);
    assert_string_equal(got, "7:active,8:paused,");
    assert_int_equal(store_integrity_check(s), 0);
    store_close(s);
    tu_remove_db(path);
}

static int count_trial(void *ud, const trial_rec *t)
{
    int *n = ud;
    assert_int_equal(t->id, *n + 1);
    assert_string_equal(t->worker, "w");
    if (t->id == 2) /* the ask's request_id (migration 0004) round trips; NULL stays NULL */
        assert_string_equal(t->request_id, "req-2");
    else
        assert_null(t->request_id);
    (*n)++;
    return 0;
}

static int count_event(void *ud, const store_event *ev)
{
    int *n = ud;
    (*n)++;
    if (ev->kind == 'o')
        assert_true(ev->x[1] == 2.5);
    return 0;
}

static void queries_round_trip(void **state)
{
    (void)state;
    char *path = tu_temp_db("kb-test-storage"), err[256];
    store *s = store_open(path, err, sizeof err);
    assert_non_null(s);
    int64_t id, id2;
    assert_int_equal(store_begin(s), 0);
    assert_int_equal(store_study_insert(s, "a", "{}", 1, &id), 0);
    assert_int_equal(store_study_insert(s, "a", "{}", 1, &id2), STORE_CONFLICT);
    double x[2] = {1, 2.5};
    for (int i = 1; i <= 3; i++) {
        trial_rec t = {.id = i, .state = TRIAL_PENDING, .worker = "w", .cand_index = -1,
                       .created_ms = 5, .lease_ms = 6, .x = x,
                       .request_id = i == 2 ? "req-2" : NULL};
        assert_int_equal(store_trial_put(s, id, &t, 2), 0);
        store_event ev = {.seq = i, .kind = 'a', .trial_id = i};
        assert_int_equal(store_event_append(s, id, &ev, 2), 0);
    }
    store_event ob = {.seq = 4, .kind = 'o', .value = 1.0, .x = x};
    assert_int_equal(store_event_append(s, id, &ob, 2), 0);
    unsigned char snap1[3] = {1, 2, 3}, snap2[2] = {9, 9};
    assert_int_equal(store_snapshot_put(s, id, 2, snap1, 3, 7), 0);
    assert_int_equal(store_snapshot_put(s, id, 4, snap2, 2, 8), 0);
    assert_int_equal(store_dictionary_put(s, id, 1, 10, 3, 4, 9), 0);
    assert_int_equal(store_commit(s), 0);

    int n = 0;
    assert_int_equal(store_trials_each(s, id, 2, count_trial, &n), 0);
    assert_int_equal(n, 3);
    n = 0;
    assert_int_equal(store_events_each(s, id, 1, 2, count_event, &n), 0);
    assert_int_equal(n, 3);
    unsigned char *bytes;
    size_t len;
    int64_t seq;
    assert_int_equal(store_snapshot_latest(s, id, &bytes, &len, &seq), 0);
    assert_int_equal(seq, 4);
    assert_int_equal(len, 2);
    free(bytes);
    assert_int_equal(store_dictionary_count(s, id), 1);

    int64_t cs;
    double rows[6] = {1, 2, 3, 4, 5, 6}, *back;
    size_t nr, dim;
    char *names;
    assert_int_equal(store_candidate_set_insert(s, rows, 3, 2, "[\"a\",\"b\"]", 1, &cs), 0);
    assert_int_equal(store_candidate_set_get(s, cs, &back, &nr, &dim, &names), 0);
    assert_int_equal(nr, 3);
    assert_int_equal(dim, 2);
    assert_memory_equal(back, rows, sizeof rows);
    assert_string_equal(names, "[\"a\",\"b\"]");
    free(back);
    free(names);
    assert_int_equal(store_candidate_set_get(s, cs + 1, &back, &nr, &dim, &names), STORE_NOTFOUND);

    /* a rolled back transaction leaves nothing */
    assert_int_equal(store_begin(s), 0);
    assert_int_equal(store_study_insert(s, "b", "{}", 1, &id2), 0);
    store_rollback(s);
    assert_int_equal(store_begin(s), 0);
    assert_int_equal(store_study_insert(s, "b", "{}", 1, &id2), 0);
    assert_int_equal(store_study_delete(s, id), 0); /* cascades */
    assert_int_equal(store_commit(s), 0);
    n = 0;
    assert_int_equal(store_trials_each(s, id, 2, count_trial, &n), 0);
    assert_int_equal(n, 0);
    assert_int_equal(store_integrity_check(s), 0);
    store_close(s);
    tu_remove_db(path);
}

typedef struct gc_arg {
    store *s;
    int64_t study;
    int thread, n;
} gc_arg;

/* A candidate set that cannot be read (here its blob disagrees with its row count; the
 * same path as an allocation that failed) leaves the caller nothing to free: the
 * restore of a study on it freed the dangling pointers again (a double free under a
 * failed malloc at start-up, found by test_startup_faults under ASan). */
static void unreadable_candidate_set_leaves_nothing(void **state)
{
    (void)state;
    char *path = tu_temp_db("kb-test-storage"), err[256];
    store *s = store_open(path, err, sizeof err);
    assert_non_null(s);
    int64_t cs;
    double rows[4] = {1, 2, 3, 4}, *back;
    size_t nr, dim;
    char *names;
    assert_int_equal(store_candidate_set_insert(s, rows, 2, 2, "[\"a\",\"b\"]", 1, &cs), 0);
    sqlite3 *db;
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db, "UPDATE candidate_sets SET n_rows = 3", NULL, NULL, NULL),
                     SQLITE_OK);
    sqlite3_close(db);
    assert_int_equal(store_candidate_set_get(s, cs, &back, &nr, &dim, &names), -1);
    assert_null(back);
    assert_null(names);
    store_close(s);
    tu_remove_db(path);
}

static void *gc_worker(void *p)
{
    gc_arg *a = p;
    double x[1] = {0.5};
    for (int i = 0; i < a->n; i++) {
        trial_rec t = {.id = a->thread * 100000 + i + 1, .state = TRIAL_PENDING, .worker = "w",
                       .cand_index = -1, .x = x};
        if (store_begin_queued(a->s, i % 3 != 0))
            return (void *)1;
        if (i % 7 == 3) { /* an operation that gives up must not disturb the others */
            store_trial_put(a->s, a->study, &t, 1);
            store_rollback(a->s);
            continue;
        }
        if (store_trial_put(a->s, a->study, &t, 1) || store_commit(a->s))
            return (void *)1;
    }
    return NULL;
}

static void group_commit_under_concurrency(void **state)
{
    (void)state;
    char *path;
    int64_t id;
    store *s = tu_store_with_study("kb-test-storage", &path, &id);
    enum { T = 6, N = 140 };
    pthread_t th[T];
    gc_arg args[T];
    for (int i = 0; i < T; i++) {
        args[i] = (gc_arg){.s = s, .study = id, .thread = i, .n = N};
        pthread_create(&th[i], NULL, gc_worker, &args[i]);
    }
    for (int i = 0; i < T; i++) {
        void *rc;
        pthread_join(th[i], &rc);
        assert_null(rc);
    }
    int n = 0;
    assert_int_equal(store_trials_each(s, id, 1, tu_count_trials, &n), 0);
    assert_int_equal(n, T * (N - N / 7)); /* i % 7 == 3 rolled back: 20 of 140 */
    assert_int_equal(store_integrity_check(s), 0);
    store_close(s);
    tu_remove_db(path);
}

/* Drives a study: asks and tells in a fixed pattern; returns the x of every trial. */
static void drive(int64_t sid, int rounds, double *xs_out, int *n_out)
{
    study *s = study_get(sid);
    assert_non_null(s);
    for (int r = 0; r < rounds; r++) {
        ask_req req = {.worker = "w", .count = 3, .wait_ms = 0};
        api_error err;
        int can_wait;
        uint64_t version;
        ask_answer a;
        assert_int_equal(study_ask(s, &req, &a, &can_wait, &version, &err), 0);
        for (size_t i = 0; i < a.n; i++) {
            int64_t tid = a.trials[i].id;
            xs_out[(*n_out)++] = a.trials[i].x[0];
            trial_rec res = {0};
            if (i == 1)
                assert_int_equal(study_fail(s, tid, "boom", &res, &err), 0);
            else if (i == 0) /* the third is left pending */
                assert_int_equal(study_tell(s, tid, (double)tid * 0.5, &res, &err), 0);
            trial_rec_clear(&res);
        }
        proto_ask_answer_clear(&a);
    }
    study_put(s);
}

static int64_t new_study(void)
{
    return tu_new_study("{\"name\":\"r\",\"space\":{\"type\":\"box\",\"params\":[{\"name\":\"a\",\"type\":\"float\",\"low\":0,\"high\":1},"
                        "{\"name\":\"b\",\"type\":\"int\",\"low\":1,\"high\":5}]},\"engine\":{\"name\":\"random\",\"settings\":{\"seed\":11,\"pool_size\":64}}}");
}

static void restored_study_continues_identically(void **state)
{
    (void)state;
    double a[400], b[400];
    int na = 0, nb = 0;
    char err[256];
    /* Control: 60 rounds without restart. */
    char *p1 = tu_temp_db("kb-test-storage");
    store *s = store_open(p1, err, sizeof err);
    registry_config rc = {.db = s, .snapshot_every = 50};
    assert_int_equal(registry_open(&rc), 0);
    int64_t id = new_study();
    drive(id, 60, a, &na);
    registry_close();
    store_close(s);
    /* Same, restarting after 25 and 40 rounds (snapshots every 50 events in between). */
    char *p2 = tu_temp_db("kb-test-storage");
    s = store_open(p2, err, sizeof err);
    rc.db = s;
    assert_int_equal(registry_open(&rc), 0);
    id = new_study();
    drive(id, 25, b, &nb);
    registry_close();
    store_close(s);
    s = store_open(p2, err, sizeof err);
    rc.db = s;
    rc.snapshot_every = 7;
    assert_int_equal(registry_open(&rc), 0);
    drive(id, 15, b, &nb);
    registry_close(); /* clean: stores a snapshot */
    store_close(s);
    s = store_open(p2, err, sizeof err);
    rc.db = s;
    assert_int_equal(registry_open(&rc), 0);
    drive(id, 20, b, &nb);
    study *st = study_get(id);
    api_error e;
    study_doc d;
    assert_int_equal(study_describe(st, &d, &e), 0);
    assert_int_equal(d.progress.trials[TRIAL_PENDING], 60);
    assert_int_equal(d.progress.trials[TRIAL_FAILED], 60);
    study_doc_clear(&d);
    study_put(st);
    registry_close();
    assert_int_equal(store_integrity_check(s), 0);
    store_close(s);
    assert_int_equal(na, nb);
    assert_memory_equal(a, b, (size_t)na * sizeof *a);
    tu_remove_db(p1);
    tu_remove_db(p2);
}

int main(void)
{
    log_set_level(LOG_WARN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(migrations_apply_once),
        cmocka_unit_test(newer_schema_is_refused),
        cmocka_unit_test(open_waits_for_a_held_database),
        cmocka_unit_test(deleted_ids_are_not_reused),
        cmocka_unit_test(migration_keeps_rows_and_their_trials),
        cmocka_unit_test(migration_makes_studies_active_and_states_round_trip),
        cmocka_unit_test(queries_round_trip),
        cmocka_unit_test(unreadable_candidate_set_leaves_nothing),
        cmocka_unit_test(group_commit_under_concurrency),
        cmocka_unit_test(restored_study_continues_identically),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
