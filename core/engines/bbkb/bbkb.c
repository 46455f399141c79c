/*
 * bbkb/bbkb.c - BBKB, batch budgeted kernelized bandits (Calandriello, Carratino, Lazaric,
 * Valko, Rosasco, ICML 2020; seed 004), and BKB (COLT 2019; seed 000) as the same
 * engine with C~ = 1.
 *
 * What is implemented (seed 004 numbering):
 *   - Nystrom embedding z(x) = K_S^{+/2} k_S(x) from the dictionary S (section 2), by
 *     a Cholesky factorization of K_S when it is well conditioned, else an
 *     eigendecomposition that drops tiny eigenvalues (kb__bbkb_build_embedding). The kernel
 *     columns k(x_i, s) of every candidate are cached per dictionary point and reused
 *     while the point stays in the dictionary (place_dictionary) or when it comes back
 *     (Kaway), and the epoch-start mean and variance of all A candidates come from one
 *     dgemm over those columns (kb__bbkb_candidate_posterior); z(x_i) itself is formed only for
 *     the candidates an epoch touches (kb__bbkb_zrow, kb__bbkb_zrows). Per
 *     resparsification: A x (new dictionary points) kernel evaluations and 2 A m r flops,
 *     Appendix C's A m^2 term;
 *     or, when few points entered or left the dictionary, 2 A m (rank + 1) flops for a
 *     low-rank update of the previous epoch's variances (low_rank_start);
 *   - the DTC posterior of eqs. (1)-(3): mu~(x) = z^T V_f^{-1} Z_f^T y over the told
 *     points, sigma~^2_t(x) = (k(x,x) - ||z||^2) / lambda + z^T V_t^{-1} z with
 *     V_t = Z_t^T Z_t + lambda I over every point selected so far, pending points being
 *     hallucinated (they enter V_t, not the mean: a hallucinated y equal to the current
 *     mean leaves the ridge solution unchanged, so "told only" IS the hallucinated mean);
 *   - Algorithm 1: UCB mu~ + alpha sigma~_t with the dictionary and the mean frozen within
 *     an epoch, rank-one Cholesky updates of V_t per hand-out, lazy re-evaluation of the
 *     UCBs (L8, appendix A.3) with a max-heap of stale upper bounds, the global batch rule
 *     of Lemma 1 (L5: the epoch closes once 1 + sum_s sigma~^2_start(x_s) > C~, the point
 *     that crosses the threshold being the last of the batch) or global-then-local
 *     (Lemma 3, appendix B.3: once the global rule fires, keep going while
 *     max_x 1 + sum_s k~_start(x, x_s)^2 / sigma~^2_start(x) <= C~), and the
 *     resparsification L11-16 with p_s = min(1, q sigma~^2_start(x_s)) where "start" is
 *     the start of the epoch that just closed, for every selected point; optionally
 *     (dictionary = coupled) with each point's coin kept across resparsifications, the
 *     incremental update seed 000 section 3 describes ("a more efficient variant"; its
 *     analysis is open there), which keeps consecutive dictionaries mostly equal; and
 *     members of the previous dictionary that the draw left out are kept, up to a
 *     fraction (retain) of the draw (retain_members: a superset is as accurate);
 *   - outputs standardized over distinct points, not per evaluation (kb__output_stats:
 *     the per-evaluation sd collapses while the run exploits one arm, which locked runs
 *     onto a mediocre arm);
 *   - alpha = C~ beta~ with beta~ of Theorem 2:
 *     2 xi sqrt(sum_s log(1 + 3 sigma~^2_{fb(s-1)}(x_s)) + log(1/delta)) + (1+sqrt2) sqrt(lambda) F,
 *     the sum running over the points with feedback, each with the variance it had at the
 *     start of its own epoch;
 *   - section 4: uncertainty-sampling initialization to parallelism P (argmax sigma~_t
 *     until max sigma~^2_start <= 1/P; such epochs need no feedback, so they resparsify
 *     without waiting), and warm start from observed data.
 *
 * Asynchronous semantics (docs/brief.md): a closed epoch answers AWAIT_FEEDBACK until
 * every pending point is told or abandoned (or, with resparsify_on_partial = f < 1, until
 * f of the epoch's points are told, the others staying hallucinated), then the next ask
 * resparsifies. A tell only stores data (the mean is frozen). An abandon removes the
 * hallucinated point from V_t (exact: V_t is refactored from its sum, epoch_factor) and
 * from the epoch's batch sum; since variances then grow, every variance is recomputed
 * before the next selection.
 */
#include "bbkb_internal.h"

#include <cblas.h>
#include <float.h>
#include <lapacke.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>


static const char *const beta_choices[] = {"theory", "scaled", "fixed", NULL};
static const char *const rule_choices[] = {"global", "local", NULL};
static const char *const dict_choices[] = {"sampled", "coupled", "all", NULL};
static const char *const start_choices[] = {"auto", "full", NULL};

#define COMMON_OPTIONS                                                                        \
    {"lambda", KB_OPT_NUMBER, 0, INFINITY, 1, 0.01, NULL, NULL,                               \
     "regularization = GP noise variance, in standardized output units (see bbkb.c)"},       \
    {"q", KB_OPT_NUMBER, 1, INFINITY, 0, 2.0, NULL, NULL,                                     \
     "oversampling: a selected point enters the dictionary with p = min(1, q sigma~^2)"},     \
    {"F", KB_OPT_NUMBER, 0, INFINITY, 0, 1.0, NULL, NULL,                                     \
     "bound on the RKHS norm of the (standardized) objective, Theorem 2"},                    \
    {"noise", KB_OPT_NUMBER, 0, INFINITY, 0, 0.1, NULL, NULL,                                 \
     "noise standard deviation xi in standardized output units, Theorem 2"},                  \
    {"delta", KB_OPT_NUMBER, 0, 1, 1, 0.01, NULL, NULL, "confidence level, Theorem 2"},       \
    {"beta", KB_OPT_STRING, 0, 0, 0, 0, "scaled", beta_choices,                               \
     "confidence width: theory (Theorem 2), scaled (beta_scale x theory), fixed "            \
     "(beta_fixed)"},                                                                         \
    {"beta_scale", KB_OPT_NUMBER, 0, INFINITY, 1, 0.5, NULL, NULL,                            \
     "multiplier of the theoretical width when beta = scaled"},                               \
    {"beta_fixed", KB_OPT_NUMBER, 0, INFINITY, 0, 1.0, NULL, NULL,                            \
     "beta~ when beta = fixed (alpha = C~ beta_fixed)"},                                      \
    {"dictionary", KB_OPT_STRING, 0, 0, 0, 0, "sampled", dict_choices,                        \
     "sampled (Algorithm 1: fresh coins at each resparsification), coupled (each point "    \
     "keeps one uniform coin u and is in while u < p: same inclusion probabilities, far "   \
     "fewer dictionary changes, so cached kernel columns are reused) or all: every "        \
     "selected point enters, which makes the model the exact GP at each epoch start "       \
     "(GP-BUCB with the Lemma 1 rule)"},                                                     \
    {"retain", KB_OPT_NUMBER, 0, INFINITY, 0, 1.0, NULL, NULL,                                \
     "members of the previous dictionary that the draw left out stay, up to retain x "      \
     "(points drawn), largest sampling probability first: a superset of the draw is as "    \
     "accurate, and fewer departures keep epoch starts cheap (0: Algorithm 1's draw)"},     \
    {"epoch_start", KB_OPT_STRING, 0, 0, 0, 0, "auto", start_choices,                          \
     "auto: when few points entered or left the dictionary, update every candidate's "      \
     "epoch-start variance by the low-rank change of the posterior (selections stay "       \
     "exact; see low_rank_start in bbkb.c); full: recompute it at every epoch start"}

static const kb_option_spec bbkb_options[] = {
    COMMON_OPTIONS,
    {"C", KB_OPT_NUMBER, 1, INFINITY, 0, 2.0, NULL, NULL,
     "batch threshold C~ of Lemma 1 (1 gives BKB: one point per epoch)"},
    {"batch_rule", KB_OPT_STRING, 0, 0, 0, 0, "global", rule_choices,
     "global (Lemma 1) or local (global, then Lemma 3's per-candidate bound)"},
    {"resparsify_on_partial", KB_OPT_NUMBER, 0, 1, 0, 1.0, NULL, NULL,
     "fraction of a closed epoch's points whose feedback starts the next epoch, the rest "
     "staying hallucinated (1: wait for all, Algorithm 1)"},
    {"parallelism", KB_OPT_INTEGER, 0, 1e9, 0, 0, NULL, NULL,
     "P: uncertainty sampling until max sigma~^2 <= 1/P (0: off), seed 004 section 4"},
    {NULL, 0, 0, 0, 0, 0, NULL, NULL, NULL},
};

static const kb_option_spec bkb_options[] = {
    COMMON_OPTIONS,
    {NULL, 0, 0, 0, 0, 0, NULL, NULL, NULL},
};

/* ------------------------------------------------------------ linear algebra */

/* ---------------------------------------------------------------- heap */

static int heap_above(const bbkb *st, size_t a, size_t b)
{
    return st->key[a] > st->key[b] || (st->key[a] == st->key[b] && a < b);
}

static void sift_down(bbkb *st, size_t p)
{
    size_t *h = st->heap, n = st->n_heap;
    for (;;) {
        size_t c = 2 * p + 1, best = p;
        if (c < n && heap_above(st, h[c], h[best]))
            best = c;
        if (c + 1 < n && heap_above(st, h[c + 1], h[best]))
            best = c + 1;
        if (best == p)
            return;
        size_t t = h[p];
        h[p] = h[best];
        h[best] = t;
        p = best;
    }
}

static void sift_up(bbkb *st, size_t p)
{
    size_t *h = st->heap;
    while (p > 0 && heap_above(st, h[p], h[(p - 1) / 2])) {
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
static void heap_rebuild(bbkb *st, int exact)
{
    for (size_t i = 0; i < st->A; i++) {
        st->heap[i] = i;
        st->key[i] = key_of(st, i);
        st->stamp[i] = exact ? st->vstamp : st->vstamp - 1;
    }
    st->n_heap = st->A;
    for (size_t p = st->A / 2; p-- > 0;)
        sift_down(st, p);
}

/* ------------------------------------------------- candidates and dictionary */

/* The candidates are new (creation, or a box space's pool refresh): no kernel column of
 * the dictionary is cached for them any more. */
static void new_pool(kb_engine *e)
{
    bbkb *st = e->impl;
    kb_kernel_diag(&e->kernel, e->space->u, st->A, st->kdiag);
    st->kdiag_max = 0.0;
    for (size_t i = 0; i < st->A; i++) {
        st->slot_of[i] = NONE;
        st->coin[i] = NAN;
        st->kdiag_max = st->kdiag[i] > st->kdiag_max ? st->kdiag[i] : st->kdiag_max;
    }
    st->mstart_valid = st->cols_valid = 0;
    st->kdict_max = 0.0;
    for (size_t i = 0; i < st->A; i++)
        st->away_of[i] = NONE;
    for (size_t j = 0; j < st->cap_away; j++)
        st->away_cand[j] = NONE;
    for (size_t j = 0; j < st->m; j++)
        st->dcand[j] = NONE;
    st->zgen++;
}

/* ----------------------------------------------------------- creation */

static void bbkb_destroy(kb_engine *e)
{
    bbkb *st = e->impl;
    if (!st)
        return;
    double *arrays[] = {st->S, st->W, st->Kc, st->kdiag, st->Z, st->resid, st->mu,
                        st->var_start, st->var, st->key, st->V, st->L, st->Lstart, st->w,
                        st->buf, st->rsum, st->trial_var, st->obs_var, st->Mstart,
                        st->Kgone, st->Kaway, st->gbuf};
    for (size_t i = 0; i < sizeof arrays / sizeof arrays[0]; i++)
        free(arrays[i]);
    free(st->dcand);
    free(st->old_to_new);
    free(st->away_cand);
    free(st->away_of);
    free(st->away_used);
    free(st->slot_of);
    free(st->coin);
    free(st->zstamp);
    free(st->stamp);
    free(st->heap);
    free(st->aside);
    free(st->epoch_h);
    free(st);
}

static int is_bkb(const kb_engine *e) { return e->ops == &kb_engine_bkb; }

static int bbkb_create(kb_engine *e, kb_error *err)
{
    const kb_config *c = e->cfg;
    bbkb *st = calloc(1, sizeof *st);
    if (!st)
        return kb__fail(err, KB_ENOMEM, NULL, "out of memory");
    e->impl = st;
    st->lambda = e->noise; /* lambda, or its fitted value (resparsify) */
    st->q = kb_config_number(c, "q");
    st->retain = kb_config_number(c, "retain");
    st->F = kb_config_number(c, "F");
    st->noise = kb_config_number(c, "noise");
    st->delta = kb_config_number(c, "delta");
    st->beta_scale = kb_config_number(c, "beta_scale");
    st->beta_fixed = kb_config_number(c, "beta_fixed");
    const char *b = kb_config_string(c, "beta");
    st->beta_mode = strcmp(b, "theory") == 0 ? 0 : strcmp(b, "scaled") == 0 ? 1 : 2;
    const char *dm = kb_config_string(c, "dictionary");
    st->dict_mode = strcmp(dm, "all") == 0       ? DICT_ALL
                    : strcmp(dm, "coupled") == 0 ? DICT_COUPLED
                                                 : DICT_SAMPLED;
    st->full_start = strcmp(kb_config_string(c, "epoch_start"), "full") == 0;
    st->C = is_bkb(e) ? 1.0 : kb_config_number(c, "C");
    st->local_rule = !is_bkb(e) && strcmp(kb_config_string(c, "batch_rule"), "local") == 0;
    st->P = is_bkb(e) ? 0.0 : kb_config_number(c, "parallelism");
    st->partial = is_bkb(e) ? 1.0 : kb_config_number(c, "resparsify_on_partial");
    if (st->delta >= 1.0) {
        bbkb_destroy(e);
        e->impl = NULL;
        return kb__fail(err, KB_ERANGE, "delta", "'delta' must be < 1");
    }
    st->A = e->space->n;
    st->init_phase = st->P > 0;
    size_t A = st->A;
    st->resid = malloc(A * sizeof(double));
    st->kdiag = malloc(A * sizeof(double));
    st->slot_of = malloc(A * sizeof *st->slot_of);
    st->coin = malloc(A * sizeof *st->coin);
    st->zstamp = calloc(A, sizeof *st->zstamp);
    st->zgen = 1;
    st->mu = malloc(A * sizeof(double));
    st->var_start = malloc(A * sizeof(double));
    st->var = malloc(A * sizeof(double));
    st->key = malloc(A * sizeof(double));
    st->rsum = malloc(A * sizeof(double));
    st->stamp = malloc(A * sizeof *st->stamp);
    st->heap = malloc(A * sizeof *st->heap);
    st->aside = malloc(A * sizeof *st->aside);
    st->away_of = malloc(A * sizeof *st->away_of);
    if (!st->resid || !st->kdiag || !st->slot_of || !st->coin || !st->zstamp || !st->mu ||
        !st->var_start || !st->var || !st->key || !st->rsum || !st->stamp || !st->heap ||
        !st->aside || !st->away_of) {
        bbkb_destroy(e);
        e->impl = NULL;
        return kb__fail(err, KB_ENOMEM, NULL, "out of memory");
    }
    new_pool(e);
    return KB_OK;
}

/* ------------------------------------------------------- resparsification */

static int add_datum(dataset *ds, const double *u, size_t cand)
{
    if (kb__grow((void **)&ds->rows, &ds->cap, ds->n + 1, sizeof *ds->rows))
        return KB_ENOMEM;
    ds->rows[ds->n++] = (datum){u, cand, 0.0, 0.0, 0.0, 0.0, 0};
    return KB_OK;
}

/* On entry ysum holds each row's average told y, on exit n_told times that average as
 * kb__output_y models it (standardized over distinct points: the standardization fixes
 * the units of the prior (k(x, x) = 1), of F (Theorem 2) and of lambda, i.e. it
 * estimates the spread of f over the domain, which repeated evaluations of one arm say
 * nothing about. Per evaluation, on abalone seed 3 the sd fell from 0.16 to 0.027 while
 * Algorithm 1 repeated one arm (f = 0.61) in ever larger batches, the standardized gaps
 * to the unexplored arms grew six-fold while the width alpha sigma~ stays in fixed
 * units, and the run never left the arm: regret ratio 0.58). */
static void standardize_rows(kb_engine *e, dataset *ds)
{
    for (size_t j = 0; j < ds->n; j++)
        ds->rows[j].ysum = ds->rows[j].n_told * kb__output_y(e, ds->rows[j].ysum);
}

/* Every non-abandoned trial and every observe, candidates of the current pool merged
 * per index (rowof maps a candidate to its row). Selections count once each. */
static int collect_data(kb_engine *e, dataset *ds, size_t *rowof)
{
    bbkb *st = e->impl;
    for (size_t i = 0; i < st->A; i++)
        rowof[i] = NONE;
    for (uint64_t h = 1; h <= e->n_trials; h++) {
        const kb_trial *t = &e->trials[h - 1];
        if (t->state == KB_TRIAL_ABANDONED)
            continue;
        size_t cand = t->generation == e->space->generation ? t->index : NONE;
        size_t row = cand != NONE ? rowof[cand] : NONE;
        if (row == NONE) {
            if (add_datum(ds, kb__trial_u(e, h), cand))
                return KB_ENOMEM;
            row = ds->n - 1;
            if (cand != NONE)
                rowof[cand] = row;
        }
        ds->rows[row].n_all += 1.0;
        if (t->state == KB_TRIAL_TOLD) {
            ds->rows[row].n_told += 1.0;
            ds->rows[row].ysum += t->y / ds->rows[row].n_told -
                                  ds->rows[row].ysum / ds->rows[row].n_told;
        }
    }
    for (size_t i = 0; i < e->n_obs; i++) {
        if (e->obs_trial[i] != 0)
            continue;
        if (add_datum(ds, e->obs_u + i * e->space->dim, NONE))
            return KB_ENOMEM;
        datum *dt = &ds->rows[ds->n - 1];
        dt->n_all = dt->n_told = 1.0;
        dt->ysum = e->obs_y[i];
    }
    standardize_rows(e, ds);
    return KB_OK;
}

/* ds->rows[].var = sigma~^2 at the start of the epoch that is closing (k(x,x)/lambda
 * before the first epoch). Candidates read it from var_start; others are embedded. */
static int closing_variances(kb_engine *e, dataset *ds)
{
    bbkb *st = e->impl;
    size_t d = e->space->dim, n = 0;
    for (size_t j = 0; j < ds->n; j++)
        if (ds->rows[j].cand != NONE && st->have_epoch)
            ds->rows[j].var = kb__bbkb_start_variance(st, ds->rows[j].cand);
        else
            n++;
    if (n == 0)
        return KB_OK;
    double *U = malloc(n * d * sizeof *U), *kd = malloc(n * sizeof *kd);
    double *Zr = malloc(n * (st->r ? st->r : 1) * sizeof *Zr), *v = malloc(n * sizeof *v);
    int rc = U && kd && Zr && v ? KB_OK : KB_ENOMEM;
    size_t k = 0;
    for (size_t j = 0; !rc && j < ds->n; j++)
        if (!(ds->rows[j].cand != NONE && st->have_epoch))
            memcpy(U + d * k++, ds->rows[j].u, d * sizeof *U);
    if (!rc) {
        kb_kernel_diag(&e->kernel, U, n, kd);
        rc = kb__bbkb_embed_rows(e, U, n, Zr);
    }
    if (!rc) {
        for (size_t i = 0; i < n && st->r; i++)
            kd[i] -= cblas_ddot((int)st->r, Zr + i * st->r, 1, Zr + i * st->r, 1);
        rc = kb__bbkb_row_variances(st, st->Lstart, Zr, kd, n, v);
    }
    k = 0;
    for (size_t j = 0; !rc && j < ds->n; j++)
        if (!(ds->rows[j].cand != NONE && st->have_epoch))
            ds->rows[j].var = v[k++];
    free(U);
    free(kd);
    free(Zr);
    free(v);
    return rc;
}

/* Algorithm 1 L11-16: marks the rows of the new dictionary. Repeated selections of one
 * candidate share a row, so each is included at most once: a row standing for n_all
 * selections enters if any of them is drawn, with p' = 1 - (1 - p)^n_all.
 * dictionary = coupled draws that decision with the candidate's own coin, kept across
 * resparsifications (seed 000 section 3, "Incremental dictionary update", which notes
 * that its analysis in the bandit setting is open): each draw still has probability p',
 * but a point stays in or out until its p' crosses its coin, so consecutive dictionaries
 * share most points and place_dictionary reuses their kernel columns. Observes and
 * points off the current pool have no coin and are drawn afresh. */
static void sample_dictionary(kb_engine *e, dataset *ds)
{
    bbkb *st = e->impl;
    for (size_t j = 0; j < ds->n; j++) {
        datum *dt = &ds->rows[j];
        double p = st->q * dt->var;
        if (st->dict_mode == DICT_ALL || p >= 1.0) {
            dt->in = 1;
        } else if (st->dict_mode == DICT_COUPLED && dt->cand != NONE) {
            if (isnan(st->coin[dt->cand]))
                st->coin[dt->cand] = kb_rng_uniform(&e->rng);
            dt->in = st->coin[dt->cand] < -expm1(dt->n_all * log1p(-p));
        } else {
            for (double s = 0; s < dt->n_all; s += 1.0)
                dt->in |= kb_rng_uniform(&e->rng) < p;
        }
    }
}

static int by_var_desc(const void *a, const void *b)
{
    const datum *x = *(const datum *const *)a, *y = *(const datum *const *)b;
    if (x->var != y->var)
        return x->var < y->var ? 1 : -1;
    return (x->cand > y->cand) - (x->cand < y->cand);
}

/* Keeps members of the current dictionary that the draw left out, up to retain x (rows
 * drawn), those with the largest sampling probability first. The draw is Algorithm 1's,
 * so the new dictionary is a superset of an Algorithm 1 dictionary: seed 000's accuracy
 * argument (App. C.2, eq. 12, Lemma 6) bounds sigma~ through the residual of the
 * projection onto the dictionary's span, which a larger span only shrinks, and the size
 * stays within (1 + retain) of Theorem 1's. What it buys: with fresh coins a quarter of
 * the dictionary left at each epoch on the 20,000-arm benchmark, every departure adding 2
 * to the rank of low_rank_start's update (docs/BENCHMARKS.md). */
static int retain_members(bbkb *st, dataset *ds)
{
    size_t drawn = 0, n = 0;
    for (size_t j = 0; j < ds->n; j++)
        drawn += ds->rows[j].in != 0;
    /* drawn == 0 first: retain may be infinite, and inf x 0 is NaN */
    size_t budget = drawn ? (size_t)fmin(st->retain * (double)drawn, (double)ds->n) : 0;
    datum **left = budget ? malloc(ds->n * sizeof *left) : NULL;
    if (budget && !left)
        return KB_ENOMEM;
    for (size_t j = 0; budget && j < ds->n; j++) {
        datum *dt = &ds->rows[j];
        if (!dt->in && dt->cand != NONE && st->slot_of[dt->cand] != NONE)
            left[n++] = dt;
    }
    if (n > budget)
        qsort(left, n, sizeof *left, by_var_desc);
    for (size_t k = 0; k < n && k < budget; k++)
        left[k]->in = 1;
    free(left);
    return KB_OK;
}

/* Kc columns of the slots fresh[0..n): k(x_i, S_slot) for every candidate, as one kernel
 * matrix of the new points against the candidates (n x A row-major: each row is a
 * column of Kc, copied whole). */
static int fill_columns(kb_engine *e, const size_t *fresh, size_t n)
{
    bbkb *st = e->impl;
    size_t d = e->space->dim, A = st->A;
    double *U = malloc((n ? n : 1) * d * sizeof *U), *K = malloc(A * (n ? n : 1) * sizeof *K);
    int rc = U && K ? KB_OK : KB_ENOMEM;
    for (size_t k = 0; !rc && k < n; k++)
        memcpy(U + k * d, st->S + fresh[k] * d, d * sizeof *U);
    if (!rc && n)
        kb_kernel_matrix(&e->kernel, U, n, e->space->u, A, K);
    for (size_t k = 0; !rc && k < n; k++)
        memcpy(st->Kc + fresh[k] * A, K + k * A, A * sizeof *K);
    free(U);
    free(K);
    return rc;
}

/* Keeps the kernel column of candidate c, leaving the dictionary, in Kaway, evicting the
 * least recently stored when full. Capacity follows the dictionary size (memory stays
 * O(A m)); out of memory only loses the cache's help. */
static void store_away(bbkb *st, size_t c, const double *col)
{
    size_t cap = st->cap_away, want = st->m > 32 ? st->m : 32, j = 0;
    if (cap < want) {
        double *K = realloc(st->Kaway, want * st->A * sizeof *K);
        size_t *ac = K ? realloc(st->away_cand, want * sizeof *ac) : NULL;
        uint64_t *au = ac ? realloc(st->away_used, want * sizeof *au) : NULL;
        st->Kaway = K ? K : st->Kaway;
        st->away_cand = ac ? ac : st->away_cand;
        st->away_used = au ? au : st->away_used;
        if (au) {
            for (size_t k = cap; k < want; k++)
                st->away_cand[k] = NONE;
            st->cap_away = cap = want;
        }
    }
    if (cap == 0)
        return;
    for (size_t k = 1; k < cap && st->away_cand[j] != NONE; k++)
        if (st->away_cand[k] == NONE || st->away_used[k] < st->away_used[j])
            j = k;
    if (st->away_cand[j] != NONE)
        st->away_of[st->away_cand[j]] = NONE;
    memcpy(st->Kaway + j * st->A, col, st->A * sizeof *col);
    st->away_cand[j] = c;
    st->away_used[j] = ++st->away_clock;
    st->away_of[c] = j;
}

/* Copies candidate c's column back from Kaway into dst, if it is there. */
static int fetch_away(bbkb *st, size_t c, double *dst)
{
    if (c == NONE || st->away_of[c] == NONE)
        return 0;
    size_t j = st->away_of[c];
    memcpy(dst, st->Kaway + j * st->A, st->A * sizeof *dst);
    st->away_cand[j] = NONE;
    st->away_of[c] = NONE;
    return 1;
}

/* Saves what low_rank_start needs of the dictionary being replaced, before
 * place_dictionary overwrites slots: the kernel columns of the points leaving it (in
 * Kgone) and, in old_to_new, where each old slot goes (its new slot, filled in by
 * place_dictionary, or m + g for the g-th point leaving); and every departed column in
 * the Kaway cache. claimed[k]: old slot k stays.
 * Sets lr_ok = 0 when there are more departures than are worth saving. */
static int save_departures(bbkb *st, const unsigned char *claimed, size_t m)
{
    size_t gone = 0;
    st->lr_ok = 1;
    for (size_t k = 0; k < st->m; k++) {
        gone += !claimed[k];
        if (!claimed[k] && st->dcand[k] != NONE)
            store_away(st, st->dcand[k], st->Kc + k * st->A);
    }
    st->lr_ok &= 2 * gone <= m; /* else the rank, >= 2 gone, makes it dearer */
    if (!st->lr_ok)
        return KB_OK;
    if (kb__grow((void **)&st->old_to_new, &st->cap_o2n, st->m, sizeof *st->old_to_new) ||
        kb__grow((void **)&st->Kgone, &st->cap_gone, gone, st->A * sizeof *st->Kgone)) {
        st->lr_ok = 0;
        return KB_ENOMEM;
    }
    st->n_gone = 0;
    for (size_t k = 0; k < st->m; k++) {
        if (claimed[k])
            continue;
        memcpy(st->Kgone + st->n_gone * st->A, st->Kc + k * st->A, st->A * sizeof *st->Kc);
        st->old_to_new[k] = m + st->n_gone++;
    }
    return KB_OK;
}

/* The slot of the current dictionary whose point and kernel column row dt can keep, or
 * NONE: a candidate's own slot, or for a point off the pool (an observe) an unclaimed
 * off-pool slot with the same coordinates, while the cached columns are of the current
 * pool (a box space's refresh replaces every candidate). */
static size_t old_slot(const bbkb *st, const datum *dt, const unsigned char *claimed, size_t d)
{
    if (dt->cand != NONE)
        return st->slot_of[dt->cand];
    for (size_t k = 0; st->cols_valid && k < st->m; k++)
        if (st->dcand[k] == NONE && !claimed[k] &&
            memcmp(st->S + k * d, dt->u, d * sizeof *dt->u) == 0)
            return k;
    return NONE;
}

/* Lays the drawn rows out as the new dictionary: a point that was already in it keeps
 * its slot and so its cached kernel column (old_slot), a candidate back from Kaway copies
 * its column, and only new points cost a column of A kernel evaluations. Fills S, dcand,
 * slot_of, Kc. */
static int place_dictionary(kb_engine *e, const dataset *ds)
{
    bbkb *st = e->impl;
    size_t d = e->space->dim, m = 0, next = 0, nfresh = 0;
    for (size_t j = 0; j < ds->n; j++)
        m += ds->rows[j].in != 0;
    size_t *slot = malloc((ds->n ? ds->n : 1) * sizeof *slot);
    size_t *olds = malloc((ds->n ? ds->n : 1) * sizeof *olds);
    size_t *fresh = malloc((m ? m : 1) * sizeof *fresh);
    unsigned char *taken = calloc(m ? m : 1, 1), *claimed = calloc(st->m ? st->m : 1, 1);
    int rc = slot && olds && fresh && taken && claimed ? KB_OK : KB_ENOMEM;
    /* Kc's columns are contiguous, so growing it keeps the cached ones. */
    if (!rc && (kb__grow((void **)&st->Kc, &st->cap_k, m, st->A * sizeof(double)) ||
                kb__grow((void **)&st->S, &st->cap_m, m, d * sizeof(double)) ||
                kb__grow((void **)&st->dcand, &st->cap_dc, m, sizeof *st->dcand)))
        rc = KB_ENOMEM;
    for (size_t j = 0; !rc && j < ds->n; j++) { /* kept in place */
        size_t old = olds[j] = ds->rows[j].in ? old_slot(st, &ds->rows[j], claimed, d) : NONE;
        slot[j] = old < m ? old : NONE;
        if (slot[j] != NONE)
            taken[old] = 1;
        if (old != NONE)
            claimed[old] = 1;
    }
    st->lr_ok = 0;
    if (!rc)
        rc = save_departures(st, claimed, m);
    for (size_t j = 0; !rc && j < ds->n; j++) { /* moved down, or new */
        size_t c = ds->rows[j].cand, old = olds[j];
        if (st->lr_ok && slot[j] != NONE)
            st->old_to_new[old] = old;
        if (!ds->rows[j].in || slot[j] != NONE)
            continue;
        while (taken[next])
            next++;
        taken[next] = 1;
        slot[j] = next;
        memcpy(st->S + next * d, ds->rows[j].u, d * sizeof(double));
        if (old == NONE && !fetch_away(st, c, st->Kc + next * st->A))
            fresh[nfresh++] = next;
        else if (old != NONE)
            memcpy(st->Kc + next * st->A, st->Kc + old * st->A, st->A * sizeof *st->Kc);
        if (st->lr_ok && old != NONE)
            st->old_to_new[old] = next;
    }
    if (!rc) {
        for (size_t k = 0; k < st->m; k++)
            if (st->dcand[k] != NONE)
                st->slot_of[st->dcand[k]] = NONE;
        for (size_t j = 0; j < ds->n; j++)
            if (ds->rows[j].in) {
                st->dcand[slot[j]] = ds->rows[j].cand;
                if (ds->rows[j].cand != NONE)
                    st->slot_of[ds->rows[j].cand] = slot[j];
            }
        st->m = m;
        rc = fill_columns(e, fresh, nfresh);
        st->cols_valid = !rc;
        for (size_t k = 0; rc && k < m; k++) /* no cached column is trusted after a failure */
            if (st->dcand[k] != NONE) {
                st->slot_of[st->dcand[k]] = NONE;
                st->dcand[k] = NONE;
            }
    }
    free(slot);
    free(olds);
    free(fresh);
    free(taken);
    free(claimed);
    return rc;
}

/* alpha = C~ beta~ (Theorem 2). The theoretical width is a worst case over every f with
 * ||f|| <= F and over-explores in practice: on the abalone protocol (data/README.md,
 * T = 2000, C~ = 2, RBF 17.5 on standardized features) beta = theory gives regret ratios
 * 0.3-0.7. The defaults beta = scaled, beta_scale = 0.5, lambda = 0.01 (a little above
 * the protocol's noise variance in standardized units, 0.087^2 = 0.0076) keep Theorem 2's
 * shape (width growing with the information gain); with the distinct-point
 * standardization (kb__output_stats) they gave ratios 0.11-0.14 on seeds 1-40, and a
 * larger second-half than first-half batch mean on seeds 1-12. At lambda = 0.01,
 * beta_scale 0.2 and 0.7 each lock onto a mediocre arm on some seeds (0.33-0.43). */
static void update_alpha(const kb_engine *e, bbkb *st)
{
    double theory = 2.0 * st->noise * sqrt(st->logdet_sum + log(1.0 / st->delta)) +
                    (1.0 + sqrt(2.0)) * sqrt(st->lambda) * st->F;
    double beta = st->beta_mode == 0 ? theory
                  : st->beta_mode == 1 ? st->beta_scale * theory
                                       : st->beta_fixed;
    /* sigma~ = sd / sqrt(lambda): the common width (a multiplier of sd) times sqrt(lambda) */
    st->alpha = sqrt(st->lambda) * kb__width(e, st->C * beta / sqrt(st->lambda), KB_WIDTH_UCB);
}

static int resparsify(kb_engine *e)
{
    bbkb *st = e->impl;
    double t0 = kb__now(), embed0 = st->sec_embed;
    dataset ds = {NULL, 0, 0};
    size_t *rowof = malloc(st->A * sizeof *rowof);
    int rc = rowof ? collect_data(e, &ds, rowof) : KB_ENOMEM;
    if (!rc)
        rc = closing_variances(e, &ds);
    if (!rc) {
        sample_dictionary(e, &ds);
        rc = retain_members(st, &ds);
    }
    int refitted = 0;
    if (!rc && kb__hyper_due(e)) { /* the kernel changes at epoch starts only */
        rc = kb__hyper_refit(e, NULL);
        st->lambda = e->noise;
        refitted = 1;
    }
    if (!rc) {
        if (!e->space->finite) {
            kb__refresh_pool(e, 0);
            new_pool(e);
            for (size_t j = 0; j < ds.n; j++)
                ds.rows[j].cand = NONE;
        } else if (refitted) {
            new_pool(e); /* same candidates, every cached kernel column stale */
        }
        double t1 = kb__now();
        rc = place_dictionary(e, &ds);
        if (!rc)
            rc = kb__bbkb_build_embedding(e);
        st->sec_embed += kb__now() - t1;
    }
    if (!rc)
        rc = kb__bbkb_rebuild_model(e, &ds);
    if (!rc)
        rc = kb__bbkb_epoch_start_posterior(st);
    free(rowof);
    if (rc) {
        free(ds.rows);
        st->have_epoch = 0; /* rebuilt from scratch at the next ask */
        return rc;
    }
    for (size_t i = 0; i < st->A; i++)
        st->var[i] = st->var_start[i] + st->start_err;
    st->empty_model = ds.n == 0;
    free(ds.rows);
    st->var_max = 0.0;
    for (size_t i = 0; i < st->A; i++)
        st->var_max = st->var_start[i] > st->var_max ? st->var_start[i] : st->var_max;
    st->init_phase = st->init_phase && st->var_max > 1.0 / st->P;
    st->init_epoch = st->init_phase;
    update_alpha(e, st);
    st->vstamp++;
    heap_rebuild(st, st->start_err == 0.0);
    st->have_epoch = 1;
    st->closed = st->dirty = st->global_fired = st->rsum_valid = 0;
    st->epoch_sum = 0.0;
    st->n_epoch = 0;
    st->epoch++;
    st->last_batch = st->epoch_asks;
    st->epoch_asks = 0;
    st->sec_resparsify += kb__now() - t0 - (st->sec_embed - embed0);
    return KB_OK;
}

/* ---------------------------------------------------------- batch rules */

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
    cblas_dtrsv(CblasColMajor, CblasLower, CblasNoTrans, CblasNonUnit, (int)r, st->Lstart,
                (int)r, v, 1);
    cblas_dtrsv(CblasColMajor, CblasLower, CblasTrans, CblasNonUnit, (int)r, st->Lstart,
                (int)r, v, 1);
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
static int add_local_term(kb_engine *e, size_t cand)
{
    bbkb *st = e->impl;
    double *col = malloc(st->A * sizeof *col);
    int rc = col ? start_covariance_column(e, cand, col) : KB_ENOMEM;
    for (size_t i = 0; !rc && i < st->A; i++)
        st->rsum[i] += col[i] * col[i];
    free(col);
    return rc;
}

/* Lemma 1, then (local rule) Lemma 3 once Lemma 1 fires. Sets st->closed. */
static int update_closed(kb_engine *e)
{
    bbkb *st = e->impl;
    st->closed = 1.0 + st->epoch_sum > st->C;
    if (!st->closed || !st->local_rule)
        return KB_OK;
    if (!st->rsum_valid) {
        memset(st->rsum, 0, st->A * sizeof *st->rsum);
        for (size_t k = 0; k < st->n_epoch; k++) {
            int rc = add_local_term(e, e->trials[st->epoch_h[k] - 1].index);
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

/* ---------------------------------------------------------------- ask */

static int uniform_pick(kb_engine *e, size_t *index)
{
    size_t allowed = 0, n = e->space->n;
    for (size_t i = 0; i < n; i++)
        allowed += !kb__excluded(e, i);
    if (allowed == 0)
        return 0;
    size_t k = (size_t)kb_rng_below(&e->rng, allowed);
    for (size_t i = 0; i < n; i++)
        if (!kb__excluded(e, i) && k-- == 0)
            *index = i;
    return 1;
}

/* Lazy argmax (Algorithm 1 L8): stale keys are upper bounds since variances only
 * shrink within an epoch, so refreshing the top until it is current gives exactly the
 * full argmax (ties to the lowest index). Excluded candidates are set aside. */
static int lazy_pick(kb_engine *e, size_t *index)
{
    bbkb *st = e->impl;
    size_t n_aside = 0;
    int found = 0;
    while (st->n_heap > 0) {
        size_t i = st->heap[0];
        if (kb__excluded(e, i)) {
            st->aside[n_aside++] = i;
            st->heap[0] = st->heap[--st->n_heap];
            sift_down(st, 0);
            continue;
        }
        if (st->stamp[i] != st->vstamp) {
            const double *z = kb__bbkb_zrow(st, i);
            st->var[i] = st->resid[i] / st->lambda + kb__bbkb_quad_form(st, st->L, z);
            st->stamp[i] = st->vstamp;
            st->key[i] = key_of(st, i);
            sift_down(st, 0);
            continue;
        }
        *index = i;
        found = 1;
        break;
    }
    while (n_aside > 0) {
        st->heap[st->n_heap++] = st->aside[--n_aside];
        sift_up(st, st->n_heap - 1);
    }
    return found;
}

static int refresh_all_variances(bbkb *st)
{
    int rc = kb__bbkb_candidate_posterior(st, st->L, st->var, NULL);
    if (rc)
        return rc;
    st->vstamp++;
    heap_rebuild(st, 1);
    st->dirty = 0;
    return KB_OK;
}

/* Tells still needed before a closed epoch may end: every pending point by default;
 * with resparsify_on_partial = f < 1, until f of the epoch's points are told (the
 * others stay hallucinated in the next epoch). */
static size_t feedback_awaited(const kb_engine *e)
{
    const bbkb *st = e->impl;
    if (st->partial >= 1.0)
        return (size_t)e->n_pending;
    size_t told = 0;
    for (size_t k = 0; k < st->n_epoch; k++)
        told += e->trials[st->epoch_h[k] - 1].state == KB_TRIAL_TOLD;
    double need = ceil(st->partial * (double)st->n_epoch) - (double)told;
    return need > 0.0 ? (size_t)need : 0;
}

static int bbkb_ask_one(kb_engine *e, size_t *index, kb_ask_result *res, kb_error *err)
{
    bbkb *st = e->impl;
    int rc = KB_OK;
    size_t awaiting = st->closed ? feedback_awaited(e) : 0;
    if (!st->have_epoch || (st->closed && (awaiting == 0 || st->init_epoch)))
        rc = resparsify(e);
    else if (st->closed) {
        res->status = KB_ASK_AWAIT_FEEDBACK;
        res->awaiting = awaiting;
        return KB_OK;
    }
    if (!rc && st->dirty)
        rc = refresh_all_variances(st);
    if (rc)
        return kb__fail(err, rc, NULL, rc == KB_ENOMEM ? "out of memory"
                                                      : "numerical failure in the posterior");
    double t0 = kb__now();
    int found = kb__design_index(e, index) ||
                (st->empty_model ? uniform_pick(e, index) : lazy_pick(e, index));
    st->sec_ask += kb__now() - t0;
    if (!found)
        res->status = KB_ASK_EXHAUSTED;
    return KB_OK;
}

/* Hallucinates the new trial: rank-one update of V and L, batch bookkeeping. */
static int bbkb_handed(kb_engine *e, uint64_t h, kb_error *err)
{
    bbkb *st = e->impl;
    double t0 = kb__now();
    size_t i = e->trials[h - 1].index, r = st->r;
    if (kb__grow((void **)&st->epoch_h, &st->cap_epoch, st->n_epoch + 1, sizeof *st->epoch_h) ||
        kb__grow((void **)&st->trial_var, &st->cap_trial, h, sizeof *st->trial_var))
        return kb__fail(err, KB_ENOMEM, NULL, "out of memory");
    if (r) {
        memcpy(st->buf, kb__bbkb_zrow(st, i), r * sizeof *st->buf);
        kb__bbkb_chol_update(st->L, r, st->buf);
        st->vstamp++;
    }
    double v0 = kb__bbkb_start_variance(st, i);
    st->trial_var[h - 1] = v0;
    st->epoch_h[st->n_epoch++] = h;
    st->epoch_sum += v0;
    st->epoch_asks++;
    /* Out of memory in the local rule closes the epoch: conservative, and the hand-out
     * itself is already consistent. */
    if (st->local_rule && st->rsum_valid && add_local_term(e, i))
        st->rsum_valid = 0;
    if (update_closed(e))
        st->closed = 1;
    st->sec_ask += kb__now() - t0;
    return KB_OK;
}

/* ------------------------------------------------------ tell / abandon / observe */

static int bbkb_tell(kb_engine *e, uint64_t h, kb_error *err)
{
    bbkb *st = e->impl;
    /* Theorem 2's log-det sum over points with feedback (the mean stays frozen). */
    st->logdet_sum += log1p(3.0 * st->trial_var[h - 1]);
    return KB_OK;
}

/* L = chol(V + sum z z^T over the epoch's hand-outs other than skip): V_t after the
 * abandon of skip, refactored rather than downdated (a downdate loses accuracy when the
 * point carried most of the information along a direction). */
static int epoch_factor(kb_engine *e, uint64_t skip, double *L)
{
    bbkb *st = e->impl;
    size_t r = st->r, n = 0;
    double *Vc = malloc(r * r * sizeof *Vc), *Zc = malloc((st->n_epoch + 1) * r * sizeof *Zc);
    int rc = Vc && Zc ? KB_OK : KB_ENOMEM;
    for (size_t k = 0; !rc && k < st->n_epoch; k++)
        if (st->epoch_h[k] != skip)
            memcpy(Zc + r * n++, kb__bbkb_zrow(st, e->trials[st->epoch_h[k] - 1].index),
                   r * sizeof *Zc);
    if (!rc) {
        memcpy(Vc, st->V, r * r * sizeof *Vc);
        if (n)
            cblas_dsyrk(CblasRowMajor, CblasLower, CblasTrans, (int)r, (int)n, 1.0, Zc, (int)r,
                        1.0, Vc, (int)r);
        rc = kb__bbkb_cholesky(r, Vc, L);
    }
    free(Vc);
    free(Zc);
    return rc;
}

static int bbkb_abandon(kb_engine *e, uint64_t h, kb_error *err)
{
    bbkb *st = e->impl;
    double t0 = kb__now();
    const kb_trial *t = &e->trials[h - 1];
    size_t r = st->r, at = NONE;
    for (size_t k = 0; k < st->n_epoch; k++)
        at = st->epoch_h[k] == h ? k : at;
    if (r) {
        /* a trial of an earlier epoch (resparsify_on_partial < 1) is in V itself */
        double *z = at == NONE ? malloc(r * sizeof *z) : NULL, *L = malloc(r * r * sizeof *L);
        int rc = L && (z || at != NONE) ? KB_OK : KB_ENOMEM;
        if (!rc && z) {
            if (t->generation == e->space->generation)
                memcpy(z, kb__bbkb_zrow(st, t->index), r * sizeof *z);
            else
                rc = kb__bbkb_embed_rows(e, kb__trial_u(e, h), 1, z);
            if (!rc)
                cblas_dsyr(CblasRowMajor, CblasLower, (int)r, -1.0, z, 1, st->V, (int)r);
        }
        if (!rc)
            rc = epoch_factor(e, h, L);
        if (rc && z)
            cblas_dsyr(CblasRowMajor, CblasLower, (int)r, 1.0, z, 1, st->V, (int)r);
        free(z);
        if (rc) {
            free(L);
            return kb__fail(err, rc, NULL, "cannot remove the point from the posterior");
        }
        free(st->L);
        st->L = L;
        st->dirty = 1;
    }
    if (at != NONE) {
        st->epoch_h[at] = st->epoch_h[--st->n_epoch];
        st->epoch_sum -= st->trial_var[h - 1];
        st->rsum_valid = 0;
        if (update_closed(e))
            st->closed = 1; /* conservative when the local sums cannot be rebuilt */
    }
    st->sec_tell += kb__now() - t0;
    return KB_OK;
}

/* Warm start: the observation joins V now (a rank-one update, variances only shrink)
 * and the data of the next resparsification; before any epoch it only waits for it. */
static int bbkb_observe(kb_engine *e, kb_error *err)
{
    bbkb *st = e->impl;
    size_t i = e->n_obs - 1, r = st->r;
    const double *u = e->obs_u + i * e->space->dim;
    if (kb__grow((void **)&st->obs_var, &st->cap_obs, e->n_obs, sizeof *st->obs_var))
        return kb__fail(err, KB_ENOMEM, NULL, "out of memory");
    double kxx;
    kb_kernel_diag(&e->kernel, u, 1, &kxx);
    double var = kxx / st->lambda;
    if (st->have_epoch && r) {
        double *z = malloc(r * sizeof *z);
        if (!z || kb__bbkb_embed_rows(e, u, 1, z)) {
            free(z);
            return kb__fail(err, KB_ENOMEM, NULL, "out of memory");
        }
        var = (kxx - cblas_ddot((int)r, z, 1, z, 1)) / st->lambda +
              kb__bbkb_quad_form(st, st->Lstart, z);
        cblas_dsyr(CblasRowMajor, CblasLower, (int)r, 1.0, z, 1, st->V, (int)r);
        kb__bbkb_chol_update(st->L, r, z);
        st->vstamp++;
        free(z);
    }
    st->obs_var[i] = var;
    st->logdet_sum += log1p(3.0 * var);
    return KB_OK;
}

/* ---------------------------------------------------------- posterior, stats */

/* Bayesian view (PREAMBLE): mean = z^T w, sd^2 = lambda sigma~^2_t, the mean in the
 * units of kb__output_stats at the start of the epoch. */
static int bbkb_posterior(kb_engine *e, const double *U, size_t n, double *mean, double *sd,
                          kb_error *err)
{
    bbkb *st = e->impl;
    size_t r = st->have_epoch ? st->r : 0;
    double *Zr = malloc((n ? n : 1) * (r ? r : 1) * sizeof *Zr);
    if (!Zr || (r && kb__bbkb_embed_rows(e, U, n, Zr))) {
        free(Zr);
        return kb__fail(err, KB_ENOMEM, NULL, "out of memory");
    }
    kb_kernel_diag(&e->kernel, U, n, sd);
    for (size_t i = 0; i < n; i++) {
        const double *z = Zr + i * r;
        mean[i] = r ? cblas_ddot((int)r, z, 1, st->w, 1) : 0.0;
        double v = sd[i] - (r ? cblas_ddot((int)r, z, 1, z, 1) : 0.0);
        v += r ? st->lambda * kb__bbkb_quad_form(st, st->L, z) : 0.0;
        sd[i] = sqrt(v > 0.0 ? v : 0.0);
    }
    free(Zr);
    return KB_OK;
}

static void bbkb_stats(const kb_engine *e, kb_stats *s)
{
    const bbkb *st = e->impl;
    s->epoch = st->epoch;
    s->epoch_asks = st->epoch_asks;
    s->last_batch = st->last_batch;
    s->dict_size = st->m;
    s->init_phase = st->init_phase;
    s->start_var_max = st->var_max;
    s->sec_embed = st->sec_embed;
    s->sec_resparsify = st->sec_resparsify;
    s->sec_ask = st->sec_ask;
    s->sec_tell = st->sec_tell;
    s->flop_l3 = st->flop_l3;
    s->epochs_low_rank = st->epochs_low_rank;
}

const kb_engine_ops kb_engine_bbkb = {
    .name = "bbkb",
    .summary = "batch budgeted kernelized bandits (seed 004, Algorithm 1)",
    .options = bbkb_options,
    .create = bbkb_create,
    .destroy = bbkb_destroy,
    .ask_one = bbkb_ask_one,
    .handed = bbkb_handed,
    .tell = bbkb_tell,
    .abandon = bbkb_abandon,
    .observe = bbkb_observe,
    .posterior = bbkb_posterior,
    .stats = bbkb_stats,
    .fits_hyper = 1,
};

const kb_engine_ops kb_engine_bkb = {
    .name = "bkb",
    .summary = "budgeted kernelized bandits (seed 000): BBKB with C~ = 1",
    .options = bkb_options,
    .create = bbkb_create,
    .destroy = bbkb_destroy,
    .ask_one = bbkb_ask_one,
    .handed = bbkb_handed,
    .tell = bbkb_tell,
    .abandon = bbkb_abandon,
    .observe = bbkb_observe,
    .posterior = bbkb_posterior,
    .stats = bbkb_stats,
    .fits_hyper = 1,
};
