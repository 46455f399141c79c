/*
 * test_domain.c - unit tests of proto/domain.c (deep copies and releases of trial
 * records and study documents), and a build-time check that the store's interface
 * (server/storage.h, which includes proto/domain.h) compiles without jansson: this file
 * includes nothing else of the daemon, and fails to compile if JANSSON_H got defined.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "../../server/storage.h"

#ifdef JANSSON_H
#error "server/storage.h (through proto/domain.h) must not include jansson.h"
#endif

static void trial_copy_is_deep(void **state)
{
    (void)state;
    double x[3] = {0.25, 0.5, 0.75};
    char worker[] = "w1", reason[] = "oom";
    trial_rec src = {.id = 7, .state = TRIAL_FAILED, .worker = worker, .reason = reason,
                     .cand_index = -1, .value = 1.5, .created_ms = 10, .lease_ms = 20,
                     .completed_ms = 0, .x = x};
    trial_rec dst;
    assert_int_equal(trial_rec_copy(&dst, &src, 3), 0);
    worker[0] = 'X';
    reason[0] = 'X';
    x[1] = -1;
    assert_true(dst.worker != worker && dst.reason != reason && dst.x != x);
    assert_string_equal(dst.worker, "w1");
    assert_string_equal(dst.reason, "oom");
    assert_true(dst.x[0] == 0.25 && dst.x[1] == 0.5 && dst.x[2] == 0.75);
    assert_int_equal(dst.id, 7);
    assert_int_equal(dst.state, TRIAL_FAILED);
    assert_int_equal(dst.lease_ms, 20);
    trial_rec_clear(&dst);
    assert_null(dst.worker);
    assert_null(dst.reason);
    assert_null(dst.x);
}

/* A trial without worker or reason: the copy has worker "" and no reason. */
static void trial_copy_fills_the_worker(void **state)
{
    (void)state;
    double x = 1;
    trial_rec src = {.id = 1, .x = &x}, dst;
    assert_int_equal(trial_rec_copy(&dst, &src, 1), 0);
    assert_string_equal(dst.worker, "");
    assert_null(dst.reason);
    trial_rec_clear(&dst);
}

/* Releases accept what the copies produce and zeroed structs (ASan checks the frees). */
static void releases_free_everything(void **state)
{
    (void)state;
    double x[2] = {1, 2};
    trial_rec src = {.id = 3, .worker = "w", .x = x};
    trial_rec *v = calloc(2, sizeof *v);
    assert_non_null(v);
    assert_int_equal(trial_rec_copy(&v[0], &src, 2), 0);
    trial_recs_free(v, 2); /* v[1] zeroed */
    trial_recs_free(NULL, 0);
    study_doc d = {.id = 1, .has_progress = 1};
    assert_int_equal(trial_rec_copy(&d.progress.best, &src, 2), 0);
    d.progress.lengthscales = malloc(2 * sizeof(double));
    assert_non_null(d.progress.lengthscales);
    study_doc_clear(&d);
    assert_int_equal(d.id, 0);
    assert_null(d.progress.best.x);
    assert_null(d.progress.lengthscales);
    study_doc_clear(&d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(trial_copy_is_deep),
        cmocka_unit_test(trial_copy_fills_the_worker),
        cmocka_unit_test(releases_free_everything),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
