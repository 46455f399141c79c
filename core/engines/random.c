/*
 * random.c - the uniform baseline: each ask hands out a candidate drawn uniformly
 * among those the repeats policy allows. On a box it draws from the pool, which is
 * redrawn (quasi-random, no local part: nothing is learnt) after every pool_size / 2
 * hand-outs so that the cube is covered, not just one pool.
 */
#include "../src/internal.h"

#include <stdlib.h>
#include <string.h>

static const kb_option_spec random_options[] = {{NULL, 0, 0, 0, 0, 0, NULL, NULL, NULL}};

typedef struct random_state {
    size_t since_refresh;
} random_state;

static int random_create(kb_engine *e, kb_error *err)
{
    e->impl = calloc(1, sizeof(random_state));
    return e->impl ? KB_OK : kb__fail(err, KB_ENOMEM, NULL, "out of memory");
}

static void random_destroy(kb_engine *e) { free(e->impl); }

/* The pool's quasi-random redraw; the repeats flags follow it. */
static void redraw(kb_engine *e, random_state *st)
{
    kb__space_refresh_pool(e->space, &e->rng, NULL, 0, NULL, 0);
    kb__pool_reset_flags(e);
    st->since_refresh = 1;
}

/* A uniform draw among the allowed candidates into *index; 0 when none is allowed. A
 * few rejection draws handle the common case; a counted draw is exact always. */
static int draw_allowed(kb_engine *e, size_t *index)
{
    size_t n = e->space->n;
    for (int tries = 0; tries < 16; tries++) {
        size_t i = (size_t)kb_rng_below(&e->rng, n);
        if (!kb__excluded(e, i)) {
            *index = i;
            return 1;
        }
    }
    return kb__uniform_allowed(e, index);
}

/* A box whose pool is spent is redrawn (ops->ask_one's contract, internal.h). */
static int random_ask_one(kb_engine *e, size_t *index, kb_ask_result *res, kb_error *err)
{
    (void)err;
    random_state *st = e->impl;
    int box = !e->space->finite;
    if (box && ++st->since_refresh > e->space->n / 2 + 1)
        redraw(e, st);
    if (draw_allowed(e, index))
        return KB_OK;
    if (box) {
        redraw(e, st);
        if (draw_allowed(e, index))
            return KB_OK;
    }
    res->status = KB_ASK_EXHAUSTED;
    return KB_OK;
}

const kb_engine_ops kb_engine_random = {
    .name = "random",
    .summary = "uniform random baseline",
    .options = random_options,
    .create = random_create,
    .destroy = random_destroy,
    .ask_one = random_ask_one,
};
