/*
 * test_group_commit.c - unit tests of the queued group commit (server/storage.c) and of
 * the study write path built on it (server/study_write.c): an operation queued after a failed
 * one is not applied; concurrent tells on one study, repeated from several threads, are
 * each applied and logged exactly once and survive a restart; a failed commit answers
 * an error, and the study is rebuilt to the store's state and goes on.
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

#include "../../server/log.h"
#include "../../server/storage.h"
#include "../../server/study.h"
#include "util/studyutil.h"
#include "util/testutil.h"

/* Queues one trial row of study sid after ticket `after`; returns its ticket. */
static uint64_t queue_trial(store *s, int64_t sid, int64_t id, uint64_t after)
{
    double x[1] = {0.5};
    trial_rec t = {.id = id, .state = TRIAL_PENDING, .worker = "w", .cand_index = -1, .x = x};
    uint64_t ticket = 0;
    assert_int_equal(store_begin_queued(s, 1), 0);
    assert_int_equal(store_trial_put(s, sid, &t, 1), 0);
    assert_int_equal(store_commit_async(s, after, &ticket), 0);
    return ticket;
}

static void queued_after_a_failure_is_not_applied(void **state)
{
    (void)state;
    char *path;
    int64_t sid;
    store *s = tu_store_with_study("kb-test-gc", &path, &sid);
    uint64_t bad = queue_trial(s, sid + 1, 1, 0); /* no such study: foreign key */
    assert_int_equal(store_wait(s, bad, 1), -1);
    assert_int_equal(store_ticket_failed(s, bad), 1);
    uint64_t dependent = queue_trial(s, sid, 2, bad);
    uint64_t independent = queue_trial(s, sid, 3, 0);
    uint64_t chained = queue_trial(s, sid, 4, independent);
    assert_int_equal(store_wait(s, dependent, 1), -1);
    assert_int_equal(store_wait(s, independent, 1), 0);
    assert_int_equal(store_wait(s, chained, 1), 0);
    assert_int_equal(store_ticket_failed(s, chained), 0);
    int n = 0;
    assert_int_equal(store_trials_each(s, sid, 1, tu_count_trials, &n), 0);
    assert_int_equal(n, 2); /* trials 3 and 4 */
    assert_int_equal(store_integrity_check(s), 0);
    store_close(s);
    tu_remove_db(path);
}

/* ------------------------------------------------------------ study level */

static int64_t new_study(void)
{
    return tu_new_study("{\"name\":\"c\",\"space\":{\"type\":\"box\",\"params\":[{\"name\":\"a\","
                        "\"type\":\"float\",\"low\":0,\"high\":1}]},\"engine\":{\"name\":\"random\","
                        "\"settings\":{\"seed\":3,\"pool_size\":64}}}");
}

/* Asks n trials of study sid (ids 1..n in order). */
static void ask_n(int64_t sid, int n)
{
    study *s = study_get(sid);
    assert_non_null(s);
    ask_req req = {.worker = "w", .count = n};
    api_error err;
    int can_wait;
    uint64_t version;
    ask_answer a;
    assert_int_equal(study_ask(s, &req, &a, &can_wait, &version, &err), 0);
    assert_int_equal(a.n, (size_t)n);
    proto_ask_answer_clear(&a);
    study_put(s);
}

static double value_of(int64_t id) { return (double)id * 0.25; }

typedef struct teller {
    int64_t sid;
    int k, n;
    int failures;
} teller;

/* Tells every trial 1..n, starting at a different one in each thread, so that the
 * threads' tells of a trial overlap in time; every answer must be 200 with the value. */
static void *tell_all(void *p)
{
    teller *a = p;
    study *s = study_get(a->sid);
    for (int i = 0; i < a->n; i++) {
        int64_t id = (int64_t)((i * 7 + a->k * a->n / 4) % a->n) + 1;
        api_error err;
        trial_rec t;
        if (study_tell(s, id, value_of(id), &t, &err) || t.state != TRIAL_COMPLETED ||
            t.value != value_of(id))
            a->failures++;
        trial_rec_clear(&t);
    }
    study_put(s);
    return NULL;
}

static int count_tells(void *ud, const store_event *ev)
{
    int *counts = ud;
    if (ev->kind == 't')
        counts[ev->trial_id]++;
    return 0;
}

static void concurrent_tells_are_durable_exactly_once(void **state)
{
    (void)state;
    enum { T = 6, N = 60 };
    char *path = tu_temp_db("kb-test-gc"), err[256];
    store *db = store_open(path, err, sizeof err);
    registry_config rc = {.db = db, .snapshot_every = 25};
    assert_int_equal(registry_open(&rc), 0);
    int64_t sid = new_study();
    ask_n(sid, N);
    pthread_t th[T];
    teller args[T];
    for (int k = 0; k < T; k++) {
        args[k] = (teller){.sid = sid, .k = k, .n = N};
        pthread_create(&th[k], NULL, tell_all, &args[k]);
    }
    for (int k = 0; k < T; k++) {
        pthread_join(th[k], NULL);
        assert_int_equal(args[k].failures, 0);
    }
    registry_close();
    store_close(db);
    /* After a restart: every trial completed with its value, and told once in the log. */
    db = store_open(path, err, sizeof err);
    rc.db = db;
    assert_int_equal(registry_open(&rc), 0);
    study *s = study_get(sid);
    for (int64_t id = 1; id <= N; id++) {
        api_error e;
        trial_rec t;
        assert_int_equal(study_trial(s, id, &t, &e), 0);
        assert_int_equal(t.state, TRIAL_COMPLETED);
        assert_true(t.value == value_of(id));
        trial_rec_clear(&t);
    }
    study_put(s);
    int counts[N + 1] = {0};
    assert_int_equal(store_events_each(db, sid, 0, 1, count_tells, counts), 0);
    for (int id = 1; id <= N; id++)
        assert_int_equal(counts[id], 1);
    registry_close();
    store_close(db);
    tu_remove_db(path);
}

static void sql_exec(const char *path, const char *sql)
{
    sqlite3 *c;
    assert_int_equal(sqlite3_open(path, &c), SQLITE_OK);
    sqlite3_busy_timeout(c, 10000);
    assert_int_equal(sqlite3_exec(c, sql, NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(c);
}

static const char *state_of(study *s, int64_t id)
{
    api_error e;
    trial_rec t;
    assert_int_equal(study_trial(s, id, &t, &e), 0);
    trial_state st = t.state;
    trial_rec_clear(&t);
    return proto_trial_state_name(st);
}

/* study_tell, the answer dropped: its result code. */
static int tell(study *s, int64_t id, double value, api_error *e)
{
    trial_rec t;
    int rc = study_tell(s, id, value, &t, e);
    trial_rec_clear(&t);
    return rc;
}

static void failed_commit_rebuilds_the_study(void **state)
{
    (void)state;
    char *path = tu_temp_db("kb-test-gc"), err[256];
    store *db = store_open(path, err, sizeof err);
    registry_config rc = {.db = db, .snapshot_every = 1000};
    assert_int_equal(registry_open(&rc), 0);
    int64_t sid = new_study();
    ask_n(sid, 4);
    study *s = study_get(sid);
    api_error e;
    assert_int_equal(tell(s, 1, 1.0, &e), 0);
    /* The store refuses the tell of trial 2 (a failed commit, injected). */
    sql_exec(path, "CREATE TRIGGER refuse BEFORE INSERT ON events WHEN NEW.trial_id = 2 "
                   "AND NEW.kind = 'tell' BEGIN SELECT RAISE(ABORT, 'injected'); END;");
    assert_int_equal(tell(s, 2, 2.0, &e), -1); /* 503: the write may succeed when retried */
    assert_int_equal(e.code, API_UNAVAILABLE);
    assert_string_equal(state_of(s, 2), "pending"); /* memory followed the store back */
    assert_string_equal(state_of(s, 1), "completed");
    sql_exec(path, "DROP TRIGGER refuse;");
    assert_int_equal(tell(s, 2, 2.0, &e), 0);
    assert_int_equal(tell(s, 3, 3.0, &e), 0);
    ask_n(sid, 1); /* the engine goes on from the rebuilt state */
    study_put(s);
    registry_close();
    store_close(db);
    db = store_open(path, err, sizeof err);
    rc.db = db;
    assert_int_equal(registry_open(&rc), 0); /* replays exactly, or fails */
    s = study_get(sid);
    assert_string_equal(state_of(s, 2), "completed");
    assert_string_equal(state_of(s, 4), "pending");
    assert_string_equal(state_of(s, 5), "pending");
    study_put(s);
    registry_close();
    assert_int_equal(store_integrity_check(db), 0);
    store_close(db);
    tu_remove_db(path);
}

int main(void)
{
    log_set_level(LOG_ERROR + 1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(queued_after_a_failure_is_not_applied),
        cmocka_unit_test(concurrent_tells_are_durable_exactly_once),
        cmocka_unit_test(failed_commit_rebuilds_the_study),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
