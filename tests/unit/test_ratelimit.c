/*
 * test_ratelimit.c - unit tests of server/ratelimit.c (the limiter of repeated log lines):
 * one line per kind per period, the dropped ones counted and reported with the next line,
 * kinds independent, a full table reclaiming the kind logged longest ago, and exact counts
 * when threads hammer one kind at once.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>

#include "../../server/ratelimit.h"

static const char kind_a[] = "a", kind_b[] = "b";

static void one_line_per_period_with_the_dropped_count(void **state)
{
    (void)state;
    rate_limit rl = RATE_LIMIT_INIT(1.0);
    unsigned long dropped = 99;
    assert_int_equal(rate_limit_pass(&rl, kind_a, 100.0, &dropped), 1);
    assert_int_equal(dropped, 0);
    for (int i = 0; i < 5; i++)
        assert_int_equal(rate_limit_pass(&rl, kind_a, 100.1 + 0.1 * i, &dropped), 0);
    assert_int_equal(rate_limit_pass(&rl, kind_a, 100.999, &dropped), 0);
    assert_int_equal(rate_limit_pass(&rl, kind_a, 101.0, &dropped), 1);
    assert_int_equal(dropped, 6);
    assert_int_equal(rate_limit_pass(&rl, kind_a, 105.0, &dropped), 1);
    assert_int_equal(dropped, 0);
}

static void kinds_are_independent(void **state)
{
    (void)state;
    rate_limit rl = RATE_LIMIT_INIT(1.0);
    unsigned long dropped;
    assert_int_equal(rate_limit_pass(&rl, kind_a, 0.0, &dropped), 1);
    assert_int_equal(rate_limit_pass(&rl, kind_b, 0.0, &dropped), 1);
    assert_int_equal(rate_limit_pass(&rl, kind_a, 0.5, &dropped), 0);
    assert_int_equal(rate_limit_pass(&rl, kind_b, 1.0, &dropped), 1);
    assert_int_equal(dropped, 0);
    assert_int_equal(rate_limit_pass(&rl, kind_a, 1.0, &dropped), 1);
    assert_int_equal(dropped, 1);
}

static void full_table_reclaims_the_kind_logged_longest_ago(void **state)
{
    (void)state;
    static char kinds[RATE_LIMIT_KINDS + 1];
    rate_limit rl = RATE_LIMIT_INIT(10.0);
    unsigned long dropped;
    for (int i = 0; i < RATE_LIMIT_KINDS; i++) /* kind i logged at time i */
        assert_int_equal(rate_limit_pass(&rl, &kinds[i], (double)i, &dropped), 1);
    assert_int_equal(rate_limit_pass(&rl, &kinds[RATE_LIMIT_KINDS], 100.0, &dropped), 1);
    assert_int_equal(rl.n, RATE_LIMIT_KINDS);
    /* kind 0 lost its slot: it starts afresh; kind 1 kept its own (still limited). */
    assert_int_equal(rate_limit_pass(&rl, &kinds[1], 5.0, &dropped), 0);
    assert_int_equal(rate_limit_pass(&rl, &kinds[0], 5.0, &dropped), 1);
    assert_int_equal(dropped, 0);
}

enum { THREADS = 4, CALLS = 500000 };

static rate_limit shared = RATE_LIMIT_INIT(1.0);
static int passed[THREADS];
static pthread_barrier_t start; /* the threads overlap, so a missing lock loses counts */

static void *hammer(void *arg)
{
    int *mine = arg;
    unsigned long dropped;
    pthread_barrier_wait(&start);
    for (int i = 0; i < CALLS; i++)
        *mine += rate_limit_pass(&shared, kind_a, 7.0, &dropped);
    return NULL;
}

static void threads_count_exactly(void **state)
{
    (void)state;
    pthread_t t[THREADS];
    pthread_barrier_init(&start, NULL, THREADS);
    for (int i = 0; i < THREADS; i++)
        assert_int_equal(pthread_create(&t[i], NULL, hammer, &passed[i]), 0);
    int total = 0;
    for (int i = 0; i < THREADS; i++) {
        pthread_join(t[i], NULL);
        total += passed[i];
    }
    pthread_barrier_destroy(&start);
    assert_int_equal(total, 1);
    unsigned long dropped;
    assert_int_equal(rate_limit_pass(&shared, kind_a, 8.0, &dropped), 1);
    assert_int_equal(dropped, THREADS * CALLS - 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(one_line_per_period_with_the_dropped_count),
        cmocka_unit_test(kinds_are_independent),
        cmocka_unit_test(full_table_reclaims_the_kind_logged_longest_ago),
        cmocka_unit_test(threads_count_exactly),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
