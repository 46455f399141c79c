/*
 * test_nomem.c - unit tests of the library under failed allocations, in the manner of
 * SQLite's malloc tests: for n = 1, 2, ... the n-th allocation of one call fails, until
 * the call succeeds. The binary is linked with --wrap=malloc,calloc,realloc (Makefile),
 * so the library's own allocations (libkbandit.a and this file) go through the wrappers
 * below; BLAS, LAPACK, NLopt and cmocka allocate unwrapped.
 *
 * What must hold: a call that fails for want of memory says so (KB_ENOMEM), so that a
 * caller can tell it from a refusal of its input (the daemon retries a restore that ran
 * out of memory and gives up on a snapshot that is corrupt); and a call that succeeds
 * gives what it gives without faults.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "kbandit.h"

/* ------------------------------------------------------------ failing allocator */

void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t size);
void *__real_realloc(void *p, size_t n);

static long countdown; /* the allocation that returns 0 fails; below 0: none fails */

static int fails(void)
{
    return countdown >= 0 && countdown-- == 0;
}

void *__wrap_malloc(size_t n) { return fails() ? NULL : __real_malloc(n); }
void *__wrap_calloc(size_t n, size_t size) { return fails() ? NULL : __real_calloc(n, size); }
void *__wrap_realloc(void *p, size_t n) { return fails() ? NULL : __real_realloc(p, n); }

/* ------------------------------------------------------------ engines */

static kb_space *test_space(int box)
{
    kb_error err;
    if (box) {
        kb_space *s = kb_space_new_box(3, 64, &err);
        size_t levels[3] = {0, 6, 3};
        unsigned char cat[3] = {0, 0, 1};
        assert_int_equal(kb_space_set_levels(s, levels, cat, &err), KB_OK);
        return s;
    }
    double rows[40 * 2];
    for (int i = 0; i < 40; i++) {
        rows[2 * i] = (i % 8) / 7.0;
        rows[2 * i + 1] = (i / 8) / 4.0;
    }
    return kb_space_new_finite(rows, 40, 2, &err);
}

/* An engine with a history: asks, tells (one left pending) and an observation; on the box,
 * past its initial design of 8, so that the replay refits the kernel and refines pools
 * (whose allocation failures must fail the restore, not change what it restores). */
static kb_engine *engine_with_history(const char *name, int box)
{
    kb_error err;
    kb_space *s = test_space(box);
    kb_config *cfg = kb_config_new(name, &err);
    assert_non_null(s);
    assert_non_null(cfg);
    kb_engine *e = kb_engine_create(cfg, s, &err);
    assert_non_null(e);
    kb_space_free(s);
    kb_config_free(cfg);
    int asks = box ? 14 : 6;
    for (int i = 0; i < asks; i++) {
        kb_point pt;
        kb_ask_result res;
        assert_int_equal(kb_engine_ask(e, 1, &pt, &res, &err), KB_OK);
        if (i < asks - 1)
            assert_int_equal(kb_engine_tell(e, pt.handle, (double)(i % 3) - 0.5 * i, &err),
                             KB_OK);
    }
    double x[3] = {0.25, 0.5, 0.5};
    assert_int_equal(kb_engine_observe(e, x, 0.3, &err), KB_OK);
    return e;
}

/* An engine's state, compared across restores bit for bit: the posterior at four points
 * (a rounding-level divergence seldom shows in a short history's choices), then the next
 * ask's outcome: how many points, the handle and the coordinates (copied: the engine
 * owns x). */
typedef struct choice {
    double mean[4], sd[4];
    size_t n;
    uint64_t handle;
    double x[3];
} choice;

static choice next_choice(kb_engine *e, size_t dim)
{
    kb_error err;
    kb_point pt;
    kb_ask_result res;
    choice c = {0};
    const double U[4 * 3] = {0.1, 0.2, 0.3, 0.7, 0.4, 0.9, 0.5, 0.5, 0.5, 0.9, 0.8, 0.1};
    double Ud[4 * 3];
    for (size_t i = 0; i < 4; i++) /* the first dim coordinates of each point */
        memcpy(Ud + i * dim, U + i * 3, dim * sizeof *Ud);
    int rc = kb_engine_posterior(e, Ud, 4, c.mean, c.sd, &err);
    assert_true(rc == KB_OK || rc == KB_EUNSUPPORTED);
    assert_int_equal(kb_engine_ask(e, 1, &pt, &res, &err), KB_OK);
    c.n = res.n;
    if (res.n) {
        c.handle = pt.handle;
        memcpy(c.x, pt.x, dim * sizeof *c.x);
    }
    return c;
}

/* For every n: the n-th allocation of kb_engine_restore fails. The restore either fails
 * with KB_ENOMEM (it was KB_ECORRUPT, "snapshot is malformed", which made the daemon give
 * up on a sound study for good) or succeeds into the engine the history built: its next
 * choice is the original's. A helper that swallowed the failure and went on differently
 * (a pool left unrefined, a kernel matrix by its fallback formula) made a restore under
 * memory pressure diverge from the run it restores (docs/TESTING.md, findings 8-10). */
static void restore_out_of_memory(const char *name, int box)
{
    kb_error err;
    kb_engine *e = engine_with_history(name, box);
    unsigned char *bytes;
    size_t len;
    assert_int_equal(kb_engine_snapshot(e, &bytes, &len, &err), KB_OK);
    size_t dim = box ? 3 : 2;
    choice want = next_choice(e, dim);
    kb_engine_free(e);
    long failed = 0;
    for (long n = 0;; n++) {
        countdown = n;
        err = (kb_error){0};
        kb_engine *r = kb_engine_restore(bytes, len, &err);
        int fired = countdown < 0;
        countdown = -1;
        if (!r) {
            if (err.code != KB_ENOMEM || !fired)
                fail_msg("%s: allocation %ld failed: code %d (%s)", name, n, err.code,
                         err.message);
            failed++;
            continue;
        }
        choice got = next_choice(r, dim);
        kb_engine_free(r);
        if (memcmp(&got, &want, sizeof got) != 0)
            fail_msg("%s: allocation %ld failed and the restore went on differently", name, n);
        if (!fired)
            break; /* past the restore's last allocation */
    }
    assert_true(failed > 1); /* some allocation was failed */
    free(bytes);
}

static void restore_gp_ucb(void **state) { (void)state; restore_out_of_memory("gp-ucb", 0); }
static void restore_gp_ucb_box(void **state) { (void)state; restore_out_of_memory("gp-ucb", 1); }
static void restore_bbkb(void **state) { (void)state; restore_out_of_memory("bbkb", 0); }
static void restore_sgp_ts(void **state) { (void)state; restore_out_of_memory("sgp-ts", 0); }
static void restore_random(void **state) { (void)state; restore_out_of_memory("random", 0); }
static void restore_box_engines(void **state)
{
    (void)state;
    const char *names[] = {"bbkb", "bkb", "gp-bucb", "gp-ts", "sgp-ts", "pi-gp-ucb"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        restore_out_of_memory(names[i], 1);
}

int main(void)
{
    countdown = -1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(restore_gp_ucb),     cmocka_unit_test(restore_gp_ucb_box),
        cmocka_unit_test(restore_bbkb),       cmocka_unit_test(restore_sgp_ts),
        cmocka_unit_test(restore_random),     cmocka_unit_test(restore_box_engines),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
