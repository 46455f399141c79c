/*
 * selection.c - how BBKB / BKB choose points and close batches (seed 004): Algorithm 1
 * L8, the UCB mu~ + alpha sigma~_t with the mean frozen within an epoch, by lazy
 * re-evaluation (appendix A.3) over a max-heap of stale upper bounds; alpha = C~ beta~
 * with beta~ of Theorem 2; section 4's uncertainty sampling (argmax sigma~_t) during
 * the initialization epochs; and the batch rules: the global one of Lemma 1 (L5: the
 * epoch closes once 1 + sum_s sigma~^2_start(x_s) > C~) and global-then-local (Lemma 3,
 * appendix B.3: once the global rule fires, keep going while
 * max_x 1 + sum_s k~_start(x, x_s)^2 / sigma~^2_start(x) <= C~).
 *
 * Invariants: var[i] >= the current sigma~^2 of candidate i, equal when stamp[i] ==
 * vstamp (variances only shrink within an epoch, so a stale key is an upper bound); the
 * heap and out together hold every candidate once, keyed by key_of(i) (out: found
 * excluded since the last rebuild); when rsum_valid, rsum[i] = sum_s
 * k~_start(x_i, x_s)^2 over the epoch's points. A box epoch may open with bounds for
 * var_start (start_bound.c): keys from bounds are upper bounds like any stale key, and
 * the top's bound is resolved before its variance is used.
 */
#include "bbkb_internal.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* alpha = C~ beta~ (Theorem 2). The theoretical width is a worst case over every f with
 * ||f|| <= F and over-explores in practice: on the abalone protocol (docs/REFERENCES.md,
 * T = 2000, C~ = 2, RBF 17.5 on standardized features) beta = theory gives regret ratios
 * 0.3-0.7. The defaults beta = scaled, beta_scale = 0.5, lambda = 0.01 (a little above
 * the protocol's noise variance in standardized units, 0.087^2 = 0.0076) keep Theorem 2's
 * shape (width growing with the information gain); with the distinct-point
 * standardization (kb__output_stats) they gave ratios 0.11-0.14 on seeds 1-40, and a
 * larger second-half than first-half batch mean on seeds 1-12. At lambda = 0.01,
 * beta_scale 0.2 and 0.7 each lock onto a mediocre arm on some seeds (0.33-0.43). */
void kb__bbkb_update_alpha(const kb_engine *e, bbkb *st)
{
    double theory = 2.0 * st->noise * sqrt(st->logdet_sum + log(1.0 / st->delta)) +
                    (1.0 + sqrt(2.0)) * sqrt(st->lambda) * st->F;
    double beta = st->beta_mode == 0 ? theory
                  : st->beta_mode == 1 ? st->beta_scale * theory
                                       : st->beta_fixed;
    /* sigma~ = sd / sqrt(lambda): the common width (a multiplier of sd) times sqrt(lambda) */
    st->alpha = sqrt(st->lambda) * kb__width(e, st->C * beta / sqrt(st->lambda), KB_WIDTH_UCB);
}

static int heap_above(const double *key, size_t a, size_t b)
{
    return key[a] > key[b] || (key[a] == key[b] && a < b);
}

void kb__bbkb_sift_down(size_t *h, size_t n, const double *key, size_t p)
{
    for (;;) {
        size_t c = 2 * p + 1, best = p;
        if (c < n && heap_above(key, h[c], h[best]))
            best = c;
        if (c + 1 < n && heap_above(key, h[c + 1], h[best]))
            best = c + 1;
        if (best == p)
            return;
        size_t t = h[p];
        h[p] = h[best];
        h[best] = t;
        p = best;
    }
}

static void sift_down(bbkb *st, size_t p)
{
    kb__bbkb_sift_down(st->heap, st->n_heap, st->key, p);
}

static void sift_up(bbkb *st, size_t p)
{
    size_t *h = st->heap;
    while (p > 0 && heap_above(st->key, h[p], h[(p - 1) / 2])) {
        size_t t = h[p];
        h[p] = h[(p - 1) / 2];
        h[(p - 1) / 2] = t;
        p = (p - 1) / 2;
    }
}

static double key_of(const bbkb *st, size_t i)
{
    double v = st->var[i] > 0.0 ? st->var[i] : 0.0;
    return st->init_epoch ? v : st->mu[i] + st->alpha * sqrt(v);
}

/* exact: var[] is the current sigma~^2, not just an upper bound of it. */
void kb__bbkb_heap_rebuild(bbkb *st, int exact)
{
    for (size_t i = 0; i < st->A; i++) {
        st->heap[i] = i;
        st->key[i] = key_of(st, i);
        st->stamp[i] = exact ? st->vstamp : st->vstamp - 1;
    }
    st->n_heap = st->A;
    st->n_out = 0;
    for (size_t p = st->A / 2; p-- > 0;)
        sift_down(st, p);
}

/* Excluded candidates leave the heap for st->out (their keys stay stale upper bounds)
 * and come back once the repeats policy allows them again (a tell or an abandon). Put
 * back after every pick, the epoch's handed-out points were popped and pushed again at
 * each of its asks: O(k log A) per ask at the k-th hand-out of an epoch, which made the
 * sifts a seventh of a long noisy box study's CPU (docs/BENCHMARKS.md, twenty-fourth
 * session). */
static void readmit_allowed(kb_engine *e, bbkb *st)
{
    size_t k = 0;
    for (size_t j = 0; j < st->n_out; j++) {
        size_t i = st->out[j];
        if (kb__excluded(e, i)) {
            st->out[k++] = i;
            continue;
        }
        st->heap[st->n_heap++] = i;
        sift_up(st, st->n_heap - 1);
    }
    st->n_out = k;
}

/* A bounded start variance at the heap's top (start_bound.c): it and the next bounded
 * candidates by key get their exact ones, which bound their current variances more
 * tightly (exactly while L is still Lstart); their keys only fall, so the heap is
 * rebuilt in place. 0 when that could not be done for want of memory: then the caller
 * re-evaluates i by another formula, whose rounding differs, so *nomem fails the ask
 * (internal.h: a replay must not go on differently). */
static int resolve_top(bbkb *st, size_t i, int *nomem)
{
    size_t idx[KB__RESOLVE_BLOCK], n = 0;
    if (kb__bbkb_resolve_next(st, i, idx, &n) != KB_OK) {
        *nomem = 1;
        return 0;
    }
    st->bound_resolved += n;
    for (size_t k = 0; k < n; k++) {
        size_t j = idx[k];
        st->var[j] = fmin(st->var[j], st->var_start[j]);
        if (st->vstamp == st->vstamp_open)
            st->stamp[j] = st->vstamp;
        st->key[j] = key_of(st, j);
    }
    for (size_t p = st->n_heap / 2; p-- > 0;)
        sift_down(st, p);
    return 1;
}

/* Lazy argmax (Algorithm 1 L8): stale keys are upper bounds since variances only
 * shrink within an epoch, so refreshing the top until it is current gives exactly the
 * full argmax (ties to the lowest index), whatever the heap's layout. */
static int lazy_pick(kb_engine *e, size_t *index)
{
    bbkb *st = e->impl;
    readmit_allowed(e, st);
    while (st->n_heap > 0) {
        size_t i = st->heap[0];
        if (kb__excluded(e, i)) {
            st->out[st->n_out++] = i;
            st->heap[0] = st->heap[--st->n_heap];
            sift_down(st, 0);
            continue;
        }
        if (st->stamp[i] != st->vstamp && st->vs_bound[i] && resolve_top(st, i, &e->nomem))
            continue;
        if (st->stamp[i] != st->vstamp) {
            const double *z = kb__bbkb_zrow(st, i);
            st->var[i] = st->resid[i] / st->lambda + kb__bbkb_quad_form(st, &st->L, z);
            st->stamp[i] = st->vstamp;
            st->key[i] = key_of(st, i);
            sift_down(st, 0);
            continue;
        }
        *index = i;
        return 1;
    }
    return 0;
}

/* The next point of the epoch: Algorithm 1 L8's argmax (uniform while there is no
 * data). Returns 0 when every candidate is excluded. */
int kb__bbkb_pick(kb_engine *e, size_t *index)
{
    bbkb *st = e->impl;
    return st->empty_model ? kb__uniform_allowed(e, index) : lazy_pick(e, index);
}

int kb__bbkb_refresh_all_variances(bbkb *st)
{
    int rc = kb__bbkb_candidate_posterior(st, &st->L, NULL, st->var, NULL);
    if (rc)
        return rc;
    st->vstamp++;
    kb__bbkb_heap_rebuild(st, 1);
    st->dirty = 0;
    return KB_OK;
}

/* k~_start(x_i, x_j) for all candidates i: (k(x_i,x_j) - z_i.z_j)/lambda + z_i^T
 * V_start^{-1} z_j = k(x_i,x_j)/lambda + z_i^T (V_start^{-1} z_j - z_j/lambda). */
static int start_covariance_column(kb_engine *e, size_t j, double *col)
{
    bbkb *st = e->impl;
    size_t r = st->r, d = e->space->dim;
    kb_kernel_matrix(&e->kernel, e->space->u, st->A, e->space->u + j * d, 1, col);
    cblas_dscal((int)st->A, 1.0 / st->lambda, col, 1);
    if (r == 0)
        return KB_OK;
    double *v = malloc(r * sizeof *v), *a = malloc(st->m * sizeof *a);
    if (!v || !a) {
        free(v);
        free(a);
        return KB_ENOMEM;
    }
    const double *zj = kb__bbkb_zrow(st, j);
    memcpy(v, zj, r * sizeof *v);
    kb__chol_solve(&st->Lstart, v);
    cblas_daxpy((int)r, -1.0 / st->lambda, zj, 1, v, 1);
    /* z_i^T v = k_S(x_i)^T (W v) */
    cblas_dgemv(CblasRowMajor, CblasNoTrans, (int)st->m, (int)r, 1.0, st->W, (int)r, v, 1,
                0.0, a, 1);
    cblas_dgemv(CblasColMajor, CblasNoTrans, (int)st->A, (int)st->m, 1.0, st->Kc,
                (int)st->A, a, 1, 1.0, col, 1);
    free(v);
    free(a);
    return KB_OK;
}

/* rsum += k~_start(., x_j)^2 for the candidate of epoch point j. */
int kb__bbkb_add_local_term(kb_engine *e, size_t cand)
{
    bbkb *st = e->impl;
    double *col = malloc(st->A * sizeof *col);
    int rc = col ? start_covariance_column(e, cand, col) : KB_ENOMEM;
    for (size_t i = 0; !rc && i < st->A; i++)
        st->rsum[i] += col[i] * col[i];
    free(col);
    return rc;
}

/* batch_floor = pending: may the batch rule close the epoch yet? Not while initial design
 * points are left (they are fixed in advance, so waiting for the feedback of one before
 * handing out the next only idles the workers), nor before the epoch has handed out as
 * many points as were ever pending at once. With a fitted noise at its floor, sigma~^2_start
 * = sd^2 / lambda crosses C~ at the first unexplored point, so Lemma 1 alone closes
 * epochs of one point: every other worker waits and every tell costs a resparsification.
 * The floor makes the epoch a GP-BUCB batch (Desautels, Krause, Burdick 2014: pending
 * points hallucinated, here through V_t) as large as the concurrency the engine has seen
 * in its calls, which the snapshot's event log replays exactly. */
static int floor_reached(const kb_engine *e, const bbkb *st)
{
    return !st->batch_floor ||
           (e->n_trials >= e->design_n && (uint64_t)st->n_epoch >= st->pending_max);
}

/* Lemma 1 (once the floor is reached), then (local rule) Lemma 3 once Lemma 1 fires.
 * Sets st->closed. */
int kb__bbkb_update_closed(kb_engine *e)
{
    bbkb *st = e->impl;
    st->closed = 1.0 + st->epoch_sum > st->C && floor_reached(e, st);
    if (!st->closed || !st->local_rule)
        return KB_OK;
    if (!st->rsum_valid) {
        memset(st->rsum, 0, st->A * sizeof *st->rsum);
        for (size_t k = 0; k < st->n_epoch; k++) {
            int rc = kb__bbkb_add_local_term(e, e->trials[st->epoch_h[k] - 1].index);
            if (rc)
                return rc;
        }
        st->rsum_valid = 1;
    }
    double worst = 0.0;
    for (size_t i = 0; i < st->A; i++) {
        double ratio = st->var_start[i] > 0.0 ? st->rsum[i] / st->var_start[i] : 0.0;
        worst = ratio > worst ? ratio : worst;
    }
    st->closed = 1.0 + worst > st->C;
    return KB_OK;
}
