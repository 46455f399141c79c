/*
 * test_replay.c - restores across engine changes: a snapshot (format 3) records the point
 * each ask handed out, and a restore whose engine now chooses differently adopts those
 * asks (kb_engine_ask_recorded), so the model is trained on the recorded points.
 *
 * The "newer kbandit" is simulated by transplanting an engine's event log under another
 * configuration (another seed, another repeats policy): the header of a snapshot of an
 * engine with the new configuration and no events, followed by the original's events.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kbandit.h"

#define N_ROWS 40
#define DIM 2

/* N_ROWS points of the unit square on a fixed irregular pattern. */
static void square_rows(double *rows)
{
    for (size_t i = 0; i < N_ROWS; i++) {
        rows[DIM * i] = fmod(0.37 * (double)i, 1.0);
        rows[DIM * i + 1] = fmod(0.61 * (double)i + 0.13, 1.0);
    }
}

/* The finite set of square_rows. */
static kb_space *square(void)
{
    double rows[N_ROWS * DIM];
    square_rows(rows);
    kb_space *sp = kb_space_new_finite(rows, N_ROWS, DIM, NULL);
    assert_non_null(sp);
    return sp;
}

/* gp-ts with fixed hyperparameters: its choices follow the seed, its posterior only the
 * observations. */
static kb_engine *engine(const char *name, double seed, const char *repeats)
{
    kb_error err;
    kb_space *sp = square();
    kb_config *cfg = kb_config_new(name, &err);
    assert_non_null(cfg);
    assert_int_equal(kb_config_set_number(cfg, "seed", seed, &err), KB_OK);
    if (strcmp(name, "random") != 0)
        assert_int_equal(kb_config_set_string(cfg, "hyperparameters", "fixed", &err),
                         KB_OK);
    if (repeats)
        assert_int_equal(kb_config_set_string(cfg, "repeats", repeats, &err), KB_OK);
    kb_engine *e = kb_engine_create(cfg, sp, &err);
    assert_non_null(e);
    kb_config_free(cfg);
    kb_space_free(sp);
    return e;
}

static double f(const double *x) { return sin(3.0 * x[0]) + x[1] * x[1]; }

static unsigned char *snapshot(const kb_engine *e, size_t *len)
{
    unsigned char *b;
    assert_int_equal(kb_engine_snapshot(e, &b, len, NULL), KB_OK);
    return b;
}

/* The events of `from` (a snapshot of an engine configured like `fresh` but for option
 * values of the same size, so with the same header length) behind the header of
 * `fresh`, an engine with no events; the format version stays from's. */
static unsigned char *transplant(const kb_engine *fresh, const unsigned char *from,
                                 size_t from_len, size_t *len)
{
    size_t hlen;
    unsigned char *h = snapshot(fresh, &hlen);
    size_t body = from_len - (hlen - 8); /* hlen ends with n_events = 0 */
    unsigned char *b = malloc(hlen - 8 + body);
    memcpy(b, h, hlen - 8);
    memcpy(b + hlen - 8, from + (hlen - 8), body);
    memcpy(b + 8, from + 8, 4); /* from's format version */
    free(h);
    *len = hlen - 8 + body;
    return b;
}

/* The engine restored from the events of snapshot `from` under the configuration
 * (name, seed, repeats) of a "newer kbandit" (transplant). */
static kb_engine *restored_under(const unsigned char *from, size_t from_len,
                                 const char *name, double seed, const char *repeats)
{
    size_t len;
    kb_engine *other = engine(name, seed, repeats);
    unsigned char *t = transplant(other, from, from_len, &len);
    kb_engine_free(other);
    kb_engine *r = kb_engine_restore(t, len, NULL);
    free(t);
    assert_non_null(r);
    return r;
}

typedef struct history {
    double x[16][DIM], y[16];
    size_t n_told;
    uint64_t pending[4];
    size_t n_pending;
} history;

/* Asks 12 points one by one, tells 9 of them (f), leaves 3 pending. */
static void run(kb_engine *e, history *h)
{
    memset(h, 0, sizeof *h);
    for (int i = 0; i < 12; i++) {
        kb_point p;
        kb_ask_result res;
        assert_int_equal(kb_engine_ask(e, 1, &p, &res, NULL), KB_OK);
        assert_int_equal(res.n, 1);
        if (i % 4 == 3) {
            h->pending[h->n_pending++] = p.handle;
            continue;
        }
        memcpy(h->x[h->n_told], p.x, sizeof h->x[0]);
        h->y[h->n_told] = f(p.x);
        assert_int_equal(kb_engine_tell(e, p.handle, h->y[h->n_told], NULL), KB_OK);
        h->n_told++;
    }
}

/* Posterior of a and b agree at every candidate to 1e-10. */
static void same_posterior(kb_engine *a, kb_engine *b)
{
    double X[N_ROWS * DIM], ma[N_ROWS], sa[N_ROWS], mb[N_ROWS], sb[N_ROWS];
    square_rows(X);
    assert_int_equal(kb_engine_posterior(a, X, N_ROWS, ma, sa, NULL), KB_OK);
    assert_int_equal(kb_engine_posterior(b, X, N_ROWS, mb, sb, NULL), KB_OK);
    for (size_t i = 0; i < N_ROWS; i++) {
        assert_true(fabs(ma[i] - mb[i]) < 1e-10);
        assert_true(fabs(sa[i] - sb[i]) < 1e-10);
    }
}

/* A fresh engine fed kb_engine_observe of the recorded told points. */
static kb_engine *observed(const history *h, size_t n)
{
    kb_engine *e = engine("gp-ts", 1, NULL);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(kb_engine_observe(e, h->x[i], h->y[i], NULL), KB_OK);
    return e;
}

/* The restore under another seed adopts the asks that now diverge: every trial keeps
 * its handle and reports its recorded point, the model equals one trained on the
 * recorded points by observe, tells of the pending trials apply to their recorded
 * points, and restoring the restored engine's snapshot adopts the same asks again. */
static void diverging_replay_trains_on_recorded_points(void **state)
{
    (void)state;
    kb_engine *a = engine("gp-ts", 1, NULL);
    history h;
    run(a, &h);
    size_t len;
    unsigned char *b = snapshot(a, &len);
    kb_error err;
    kb_engine *r = restored_under(b, len, "gp-ts", 2, NULL);

    kb_stats st = {.size = sizeof st};
    assert_int_equal(kb_engine_stats(r, &st, NULL), KB_OK);
    assert_true(st.adopted > 0);
    assert_true(st.asks == 12 && st.tells == 9 && st.pending == 3);
    for (uint64_t hd = 1; hd <= 12; hd++) {
        kb_point pa, pr;
        kb_trial_state sa, sr;
        assert_int_equal(kb_engine_trial(a, hd, &pa, &sa), KB_OK);
        assert_int_equal(kb_engine_trial(r, hd, &pr, &sr), KB_OK);
        assert_memory_equal(pa.x, pr.x, DIM * sizeof(double));
        assert_int_equal(sa, sr);
    }
    kb_engine *o = observed(&h, h.n_told);
    same_posterior(r, o);

    /* the pending trials: told at their recorded points, by either engine */
    for (size_t i = 0; i < h.n_pending; i++) {
        kb_point p;
        kb_trial_state s;
        assert_int_equal(kb_engine_trial(a, h.pending[i], &p, &s), KB_OK);
        memcpy(h.x[h.n_told], p.x, sizeof h.x[0]);
        h.y[h.n_told] = f(p.x);
        assert_int_equal(kb_engine_tell(r, h.pending[i], h.y[h.n_told], NULL), KB_OK);
        assert_int_equal(kb_engine_tell(r, h.pending[i], 0.0, &err), KB_ESTATE);
        h.n_told++;
    }
    kb_engine_free(o);
    o = observed(&h, h.n_told);
    same_posterior(r, o);

    /* restoring r's snapshot twice: the same adoptions, the same later asks */
    size_t rlen;
    unsigned char *rb = snapshot(r, &rlen);
    kb_engine *r1 = kb_engine_restore(rb, rlen, NULL), *r2 = kb_engine_restore(rb, rlen, NULL);
    assert_non_null(r1);
    assert_non_null(r2);
    kb_stats s1 = {.size = sizeof s1}, s2 = {.size = sizeof s2};
    kb_engine_stats(r1, &s1, NULL);
    kb_engine_stats(r2, &s2, NULL);
    assert_true(s1.adopted == st.adopted && s2.adopted == st.adopted);
    same_posterior(r1, o);
    for (int i = 0; i < 5; i++) {
        kb_point p0, p1, p2;
        kb_ask_result res;
        assert_int_equal(kb_engine_ask(r, 1, &p0, &res, NULL), KB_OK);
        assert_int_equal(kb_engine_ask(r1, 1, &p1, &res, NULL), KB_OK);
        assert_int_equal(kb_engine_ask(r2, 1, &p2, &res, NULL), KB_OK);
        assert_true(p0.handle == p1.handle && p1.handle == p2.handle);
        assert_memory_equal(p0.x, p1.x, DIM * sizeof(double));
        assert_memory_equal(p1.x, p2.x, DIM * sizeof(double));
    }
    free(rb);
    free(b);
    kb_engine_free(a);
    kb_engine_free(r);
    kb_engine_free(r1);
    kb_engine_free(r2);
    kb_engine_free(o);
}

/* The engine now hands out no point (repeats "never" exhausts three candidates, where
 * "allow" gave a fourth and fifth ask): those trials are adopted as well, their tells
 * observations of the recorded points. */
static void replay_without_a_point_is_adopted(void **state)
{
    (void)state;
    kb_engine *a = engine("random", 3, "allow");
    kb_point pts[50];
    kb_ask_result res;
    assert_int_equal(kb_engine_ask(a, 50, pts, &res, NULL), KB_OK);
    assert_int_equal(res.n, 50);
    size_t len;
    unsigned char *b = snapshot(a, &len);
    kb_engine *r = restored_under(b, len, "random", 3, "never");
    kb_stats st = {.size = sizeof st};
    kb_engine_stats(r, &st, NULL);
    assert_true(st.asks == 50 && st.pending == 50 && st.adopted >= 10);
    for (uint64_t hd = 1; hd <= 50; hd++) {
        kb_point p;
        kb_trial_state s;
        assert_int_equal(kb_engine_trial(r, hd, &p, &s), KB_OK);
        assert_int_equal(s, KB_TRIAL_PENDING);
        assert_memory_equal(p.x, pts[hd - 1].x, DIM * sizeof(double));
        assert_int_equal(kb_engine_tell(r, hd, 1.0, NULL), KB_OK);
    }
    kb_engine_stats(r, &st, NULL);
    assert_true(st.tells == 50 && st.pending == 0);
    free(b);
    kb_engine_free(a);
    kb_engine_free(r);
}

/* The repeats policy holds for the recorded points on a finite set: with "never", the
 * restored engine hands out exactly the candidates never handed out before, then none. */
static void adopted_candidates_count_for_repeats(void **state)
{
    (void)state;
    kb_engine *a = engine("random", 3, "never");
    kb_point first[10];
    kb_ask_result res;
    assert_int_equal(kb_engine_ask(a, 10, first, &res, NULL), KB_OK);
    for (size_t i = 0; i < 7; i++)
        assert_int_equal(kb_engine_tell(a, first[i].handle, 1.0, NULL), KB_OK);
    size_t len;
    unsigned char *b = snapshot(a, &len);
    kb_engine *r = restored_under(b, len, "random", 4, "never");
    kb_stats st = {.size = sizeof st};
    kb_engine_stats(r, &st, NULL);
    assert_true(st.adopted > 0);
    kb_point later[N_ROWS];
    assert_int_equal(kb_engine_ask(r, N_ROWS, later, &res, NULL), KB_OK);
    assert_int_equal(res.n, N_ROWS - 10);
    assert_int_equal(res.status, KB_ASK_EXHAUSTED);
    for (size_t i = 0; i < res.n; i++)
        for (size_t j = 0; j < 10; j++)
            assert_memory_not_equal(later[i].x, first[j].x, DIM * sizeof(double));
    /* an abandoned recorded point is free again, a told one is not */
    assert_int_equal(kb_engine_abandon(r, first[9].handle, NULL), KB_OK);
    assert_int_equal(kb_engine_tell(r, first[8].handle, 0.5, NULL), KB_OK);
    kb_point again[2];
    assert_int_equal(kb_engine_ask(r, 2, again, &res, NULL), KB_OK);
    assert_int_equal(res.n, 1);
    assert_memory_equal(again[0].x, first[9].x, DIM * sizeof(double));
    free(b);
    kb_engine_free(a);
    kb_engine_free(r);
}

/* A version 2 snapshot of `e` (asks without points): its events rewritten. */
static unsigned char *as_version2(const kb_engine *e, const kb_engine *fresh, size_t *len)
{
    size_t n, hlen;
    unsigned char *b = snapshot(e, &n), *h = snapshot(fresh, &hlen);
    unsigned char *v2 = malloc(n);
    memcpy(v2, b, hlen);
    memcpy(v2 + hlen - 8, b + hlen - 8, 8); /* n_events */
    uint32_t two = 2;
    memcpy(v2 + 8, &two, 4);
    size_t in = hlen, out = hlen;
    while (in < n) {
        unsigned char kind = b[in];
        size_t size = kind == 1 ? 1 + 8 * DIM : kind == 2 ? 17 : kind == 3 ? 9 : 9 + 8 * DIM;
        size_t keep = kind == 1 ? 1 : size;
        memcpy(v2 + out, b + in, keep);
        in += size;
        out += keep;
    }
    free(b);
    free(h);
    *len = out;
    return v2;
}

/* a and r hand out the same next n points (handles and candidates). */
static void same_next_asks(kb_engine *a, kb_engine *r, int n)
{
    for (int i = 0; i < n; i++) {
        kb_point pa, pr;
        kb_ask_result res;
        assert_int_equal(kb_engine_ask(a, 1, &pa, &res, NULL), KB_OK);
        assert_int_equal(kb_engine_ask(r, 1, &pr, &res, NULL), KB_OK);
        assert_true(pa.handle == pr.handle && pa.index == pr.index);
    }
}

/* Version 2 snapshots still restore, their asks replayed as the engine chooses now: the
 * same engine goes on identically; another one adopts nothing (no point is recorded). */
static void version2_snapshots_replay_as_before(void **state)
{
    (void)state;
    kb_engine *a = engine("gp-ts", 1, NULL);
    history h;
    run(a, &h);
    kb_engine *fresh = engine("gp-ts", 1, NULL);
    size_t len;
    unsigned char *v2 = as_version2(a, fresh, &len);
    kb_engine_free(fresh);
    kb_engine *r = kb_engine_restore(v2, len, NULL);
    assert_non_null(r);
    same_posterior(r, a);
    same_next_asks(a, r, 4);
    kb_engine *o = restored_under(v2, len, "gp-ts", 2, NULL);
    kb_stats st = {.size = sizeof st};
    kb_engine_stats(o, &st, NULL);
    assert_true(st.adopted == 0 && st.asks == 12);
    free(v2);
    kb_engine_free(o);
    kb_engine_free(a);
    kb_engine_free(r);
}

/* A recorded point that is not a number is a corrupt snapshot. */
static void non_finite_recorded_point_is_corrupt(void **state)
{
    (void)state;
    kb_engine *a = engine("random", 3, NULL);
    kb_point p;
    kb_ask_result res;
    assert_int_equal(kb_engine_ask(a, 1, &p, &res, NULL), KB_OK);
    size_t len;
    unsigned char *b = snapshot(a, &len);
    double nan = NAN;
    memcpy(b + len - 8 * DIM, &nan, 8); /* the ask is the last event */
    kb_error err;
    assert_null(kb_engine_restore(b, len, &err));
    assert_int_equal(err.code, KB_ECORRUPT);
    free(b);
    kb_engine_free(a);
}

/* The offset of the last copy of needle[0..n) in hay[0..len), or len when none. */
static size_t last_copy(const unsigned char *hay, size_t len, const void *needle, size_t n)
{
    for (size_t i = len - n + 1; i-- > 0;)
        if (memcmp(hay + i, needle, n) == 0)
            return i;
    return len;
}

/* bbkb with fitted hyperparameters, 30 points told one by one. */
static kb_engine *fitted_run(void)
{
    kb_error err;
    kb_space *sp = square();
    kb_config *cfg = kb_config_new("bbkb", &err);
    assert_int_equal(kb_config_set_number(cfg, "seed", 4, &err), KB_OK);
    kb_engine *e = kb_engine_create(cfg, sp, &err);
    assert_non_null(e);
    kb_config_free(cfg);
    kb_space_free(sp);
    for (int i = 0; i < 30; i++) {
        kb_point p;
        kb_ask_result res;
        assert_int_equal(kb_engine_ask(e, 1, &p, &res, &err), KB_OK);
        assert_int_equal(res.n, 1);
        assert_int_equal(kb_engine_tell(e, p.handle, f(p.x), &err), KB_OK);
    }
    return e;
}

/* A snapshot (format 5) records each fit's outcome, and a restore applies it where the
 * replay fits again instead of fitting: a record altered in the bytes comes out in the
 * restored engine's kernel. Unaltered, the restore snapshots to the same bytes and asks
 * the same points. A fit record that cannot be (a zero lengthscale) is corrupt. */
static void recorded_fits_are_applied(void **state)
{
    (void)state;
    kb_engine *a = fitted_run();
    kb_hyperparameters hp;
    kb_engine_hyperparameters(a, &hp);
    assert_true(hp.fits >= 3 && hp.dim == DIM);
    double ls[DIM], moved[DIM];
    memcpy(ls, hp.lengthscales, sizeof ls);
    size_t len, len2;
    unsigned char *b = snapshot(a, &len);
    kb_engine *r = kb_engine_restore(b, len, NULL);
    assert_non_null(r);
    unsigned char *b2 = snapshot(r, &len2);
    assert_true(len2 == len && memcmp(b, b2, len) == 0);
    same_next_asks(a, r, 4);
    size_t at = last_copy(b, len, ls, sizeof ls); /* the last fit's lengthscales */
    assert_true(at < len);
    for (int j = 0; j < DIM; j++)
        moved[j] = 1.5 * ls[j];
    memcpy(b + at, moved, sizeof moved);
    kb_engine *m = kb_engine_restore(b, len, NULL);
    assert_non_null(m);
    kb_engine_hyperparameters(m, &hp);
    assert_memory_equal(hp.lengthscales, moved, sizeof moved);
    double zero = 0.0;
    memcpy(b + at, &zero, sizeof zero);
    kb_error err;
    assert_null(kb_engine_restore(b, len, &err));
    assert_int_equal(err.code, KB_ECORRUPT);
    free(b);
    free(b2);
    kb_engine_free(a);
    kb_engine_free(r);
    kb_engine_free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(diverging_replay_trains_on_recorded_points),
        cmocka_unit_test(replay_without_a_point_is_adopted),
        cmocka_unit_test(adopted_candidates_count_for_repeats),
        cmocka_unit_test(version2_snapshots_replay_as_before),
        cmocka_unit_test(non_finite_recorded_point_is_corrupt),
        cmocka_unit_test(recorded_fits_are_applied),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
