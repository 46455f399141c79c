/*
 * bbkb/bbkb.c - BBKB, batch budgeted kernelized bandits (Calandriello, Carratino, Lazaric,
 * Valko, Rosasco, ICML 2020; seed 004), and BKB (COLT 2019; seed 000) as the same
 * engine with C~ = 1: the options, create / destroy, the resparsification that opens
 * each epoch, the ask / hand-out / tell / abandon / observe ops, the posterior and the
 * statistics, and the two vtables. The engine's state and the functions its files share
 * are in bbkb_internal.h.
 *
 * What is implemented (seed 004 numbering), and where:
 *   - embedding.c: the Nystrom embedding z(x) = K_S^{+/2} k_S(x) from the dictionary S
 *     (section 2), by a pivoted Cholesky factorization of K_S that keeps the points
 *     adding more than 1e-10 of k(s, s) (all of them when K_S is well conditioned): the
 *     Nystrom embedding over those; z(x_i) is formed only for the candidates an epoch
 *     touches;
 *   - dictionary.c: the resparsification L11-16 with p_s = min(1, q sigma~^2_start(x_s))
 *     where "start" is the start of the epoch that just closed, for every selected
 *     point; optionally (dictionary = coupled) with each point's coin kept across
 *     resparsifications, the incremental update seed 000 section 3 describes ("a more
 *     efficient variant"; its analysis is open there), which keeps consecutive
 *     dictionaries mostly equal; and members of the previous dictionary that the draw
 *     left out are kept, up to a fraction (retain) of the draw (a superset is as
 *     accurate); once there is a model, one resparsification takes at most max(2 m,
 *     512) points, a uniform sample of the draw (cap_growth: after a refit the closing
 *     dictionary overstates every variance). The kernel columns k(x_i, s) of every
 *     candidate are cached per dictionary point and reused while the point stays in
 *     the dictionary or when it comes back;
 *   - posterior.c: the DTC posterior of eqs. (1)-(3): mu~(x) = z^T V_f^{-1} Z_f^T y over
 *     the told points, sigma~^2_t(x) = (k(x,x) - ||z||^2) / lambda + z^T V_t^{-1} z with
 *     V_t = Z_t^T Z_t + lambda I over every point selected so far, pending points being
 *     hallucinated (they enter V_t, not the mean: a hallucinated y equal to the current
 *     mean leaves the ridge solution unchanged, so "told only" IS the hallucinated mean);
 *     the epoch-start mean and variance of all A candidates come from one dgemm over the
 *     cached columns. Per resparsification: A x (new dictionary points) kernel
 *     evaluations and 2 A m r flops, Appendix C's A m^2 term;
 *   - low_rank.c: or, when few points entered or left the dictionary, 2 A m (rank + 1)
 *     flops for a low-rank update of the previous epoch's variances;
 *   - start_bound.c: or, on a box (whose pool is new at every epoch), exact means, upper
 *     bounds on the variances from a few pivots, and exact variances only for the
 *     candidates that reach the top of the UCB heap;
 *   - selection.c: Algorithm 1's UCB mu~ + alpha sigma~_t with the dictionary and the
 *     mean frozen within an epoch, lazy re-evaluation of the UCBs (L8, appendix A.3) with
 *     a max-heap of stale upper bounds, the global batch rule of Lemma 1 (L5: the epoch
 *     closes once 1 + sum_s sigma~^2_start(x_s) > C~, the point that crosses the
 *     threshold being the last of the batch) or global-then-local (Lemma 3, appendix
 *     B.3: once the global rule fires, keep going while
 *     max_x 1 + sum_s k~_start(x, x_s)^2 / sigma~^2_start(x) <= C~); alpha = C~ beta~
 *     with beta~ of Theorem 2:
 *       2 xi sqrt(sum_s log(1 + 3 sigma~^2_{fb(s-1)}(x_s)) + log(1/delta))
 *       + (1+sqrt2) sqrt(lambda) F,
 *     the sum running over the points with feedback, each with the variance it had at
 *     the start of its own epoch (logdet_sum, kept here by tell and observe);
 *   - here: rank-one Cholesky updates of V_t per hand-out; outputs standardized over
 *     distinct points, not per evaluation (kb__output_stats: the per-evaluation sd
 *     collapses while the run exploits one arm, which locked runs onto a mediocre arm);
 *     section 4: uncertainty-sampling initialization to parallelism P (argmax sigma~_t
 *     until max sigma~^2_start <= 1/P; such epochs need no feedback, so they resparsify
 *     without waiting), and warm start from observed data.
 *
 * Asynchronous semantics (docs/ARCHITECTURE.md, BBKB with asynchronous workers): a
 * closed epoch answers AWAIT_FEEDBACK until every pending point is told or abandoned (or,
 * with resparsify_on_partial = f < 1, until f of the epoch's points are told, the others
 * staying hallucinated), then the next ask resparsifies. With batch_floor (on boxes by
 * default; selection.c) an epoch closes only once it has handed out as many points as
 * were ever pending at once, and the initial design never closes one. A tell only
 * stores data (the mean is frozen). An abandon removes the
 * hallucinated point from V_t (exact: V_t is refactored from its sum, epoch_factor) and
 * from the epoch's batch sum; since variances then grow, every variance is recomputed
 * before the next selection.
 */
#include "bbkb_internal.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char *const beta_choices[] = {"theory", "scaled", "fixed", NULL};
static const char *const rule_choices[] = {"global", "local", NULL};
static const char *const dict_choices[] = {"sampled", "coupled", "all", NULL};
static const char *const start_choices[] = {"auto", "full", NULL};
static const char *const floor_choices[] = {"auto", "pending", "none", NULL};

#define COMMON_OPTIONS                                                                        \
    {"lambda", KB_OPT_NUMBER, 0, INFINITY, 1, 0.01, NULL, NULL,                               \
     "regularization = GP noise variance, in standardized output units (see "                 \
     "bbkb/selection.c); not set, fitted (hyperparameters = fit)"},                           \
    {"q", KB_OPT_NUMBER, 1, INFINITY, 0, 2.0, NULL, NULL,                                     \
     "oversampling: a selected point enters the dictionary with p = min(1, q sigma~^2)"},     \
    {"F", KB_OPT_NUMBER, 0, INFINITY, 0, 1.0, NULL, NULL,                                     \
     "bound on the RKHS norm of the (standardized) objective, Theorem 2"},                    \
    {"noise", KB_OPT_NUMBER, 0, INFINITY, 0, 0.1, NULL, NULL,                                 \
     "noise standard deviation xi in standardized output units, Theorem 2"},                  \
    {"delta", KB_OPT_NUMBER, 0, KB__BELOW_ONE, 1, 0.01, NULL, NULL, "confidence level, Theorem 2"},       \
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
     "auto: on a finite set, when few points entered or left the dictionary, update "      \
     "every candidate's epoch-start variance by the low-rank change of the posterior "     \
     "(bbkb/low_rank.c); on a box, bound every variance and compute exactly only those "   \
     "that can reach the top of the UCB (bbkb/start_bound.c); selections stay exact "      \
     "either way; full: compute every variance at every epoch start"},                      \
    {"model_rows", KB_OPT_INTEGER, 0, 1e9, 0, 1024, NULL, NULL,                              \
     "box spaces, while the dictionary holds a quarter or more of the rows (a noise-free "  \
     "objective): an epoch's model keeps at most this many data rows, every pending one, "  \
     "the best quarter of the others by value and a seeded sample of the rest "             \
     "(bbkb/dictionary.c); 0: all rows"},                                                   \
    KB__CHOICE_FLOOR_OPTION(2.0),                                                              \
    {"climb_after", KB_OPT_INTEGER, 0, 1e9, 0, 100, NULL, NULL,                               \
     "box spaces, noise-free fits: once the best value has not improved (by 1e-3 of the "    \
     "smaller of |best| and best - median) in this many trials, every other candidate pool " \
     "climbs from the second peak of the observations (the best point with no better one " \
     "within two lengthscales, outside the worst quarter), a second basin, until that "   \
     "climb stops improving for as many trials (core/src/engine.c, climb_center); 0: off"}

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
    {"batch_floor", KB_OPT_STRING, 0, 0, 0, 0, "auto", floor_choices,
     "pending: the initial design needs no feedback, and an epoch closes by the batch "
     "rule only once it has handed out as many points as were ever pending at once "
     "(the workers seen; GP-BUCB batches inside the epoch); none: Algorithm 1's rule; "
     "auto: pending on boxes, none on finite sets"},
    {NULL, 0, 0, 0, 0, 0, NULL, NULL, NULL},
};

static const kb_option_spec bkb_options[] = {
    COMMON_OPTIONS,
    {NULL, 0, 0, 0, 0, 0, NULL, NULL, NULL},
};

/* ------------------------------------------------------------- creation */

static void bbkb_destroy(kb_engine *e)
{
    bbkb *st = e->impl;
    if (!st)
        return;
    double *arrays[] = {st->S, st->W, st->Wp, st->Lp, st->Sp, st->Kc, st->kdiag, st->Z, st->resid,
                        st->mu, st->var_start, st->var, st->key, st->V, st->w, st->buf,
                        st->rsum, st->trial_var, st->obs_var, st->Mstart, st->Kgone,
                        st->Kaway, st->gbuf, st->row_var, st->zkeep, st->Lsinv};
    for (size_t i = 0; i < sizeof arrays / sizeof arrays[0]; i++)
        free(arrays[i]);
    kb__chol_free(&st->L);
    kb__chol_free(&st->Lstart);
    free(st->dcand);
    free(st->pslot);
    free(st->ppos);
    free(st->vs_bound);
    free(st->border);
    free(st->border_key);
    free(st->old_to_new);
    free(st->away_cand);
    free(st->away_of);
    free(st->away_used);
    free(st->slot_of);
    free(st->coin);
    free(st->zstamp);
    free(st->stamp);
    free(st->heap);
    free(st->out);
    free(st->epoch_h);
    free(st->zkeep_row);
    free(st);
}

static int is_bkb(const kb_engine *e) { return e->ops == &kb_engine_bkb; }

/* The configuration fields of st from the engine's options (bkb: C~ = 1, the global
 * rule, no initialization, every point awaited). */
static void read_options(const kb_engine *e, bbkb *st)
{
    const kb_config *c = e->cfg;
    st->lambda = e->noise; /* lambda, or its fitted value (resparsify) */
    st->q = kb_config_number(c, "q");
    st->retain = kb_config_number(c, "retain");
    st->model_rows = (size_t)kb_config_number(c, "model_rows");
    st->pool.choice_floor = kb_config_number(c, "choice_floor");
    st->pool.climb_after = (size_t)kb_config_number(c, "climb_after");
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
    const char *floor = is_bkb(e) ? "none" : kb_config_string(c, "batch_floor");
    st->batch_floor = strcmp(floor, "pending") == 0 ||
                      (strcmp(floor, "auto") == 0 && !e->space->finite);
}

static int bbkb_create(kb_engine *e, kb_error *err)
{
    bbkb *st = calloc(1, sizeof *st);
    if (!st)
        return kb__fail(err, KB_ENOMEM, NULL, "out of memory");
    e->impl = st;
    kb__chol_init(&st->L, 1);
    kb__chol_init(&st->Lstart, 1);
    read_options(e, st);
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
    st->out = malloc(A * sizeof *st->out);
    st->away_of = malloc(A * sizeof *st->away_of);
    st->vs_bound = calloc(A ? A : 1, 1);
    st->border = malloc(A * sizeof *st->border);
    st->border_key = malloc(A * sizeof *st->border_key);
    if (!st->resid || !st->kdiag || !st->slot_of || !st->coin || !st->zstamp || !st->mu ||
        !st->var_start || !st->var || !st->key || !st->rsum || !st->stamp || !st->heap ||
        !st->out || !st->away_of || !st->vs_bound || !st->border || !st->border_key) {
        bbkb_destroy(e);
        e->impl = NULL;
        return kb__fail(err, KB_ENOMEM, NULL, "out of memory");
    }
    kb__bbkb_new_pool(e);
    return KB_OK;
}

/* ------------------------------------------------------- resparsification */

/* The kernel refit when due (the kernel changes at epoch starts only) and, for a box, a
 * new pool of candidates, which leaves no data row on the pool. */
static int refit_kernel(kb_engine *e, dataset *ds)
{
    bbkb *st = e->impl;
    int refitted = 0, rc = KB_OK;
    if (kb__hyper_due(e)) {
        double t0 = kb__now();
        rc = kb__hyper_refit(e, NULL);
        st->sec_fit += kb__now() - t0;
        st->lambda = e->noise;
        refitted = 1;
    }
    if (rc)
        return rc;
    if (!e->space->finite) {
        kb__refresh_pool(e, 0, &st->pool);
        kb__bbkb_new_pool(e);
        for (size_t j = 0; j < ds->n; j++)
            ds->rows[j].cand = NONE;
    } else if (refitted) {
        kb__bbkb_new_pool(e); /* same candidates, every cached kernel column stale */
    }
    return KB_OK;
}

/* The new dictionary's embedding, model and epoch-start posterior. */
static int build_model(kb_engine *e, dataset *ds)
{
    bbkb *st = e->impl;
    double t1 = kb__now();
    int rc = kb__bbkb_place_dictionary(e, ds);
    if (!rc)
        rc = kb__bbkb_build_embedding(e);
    st->sec_embed += kb__now() - t1;
    if (!rc)
        rc = kb__bbkb_rebuild_model(e, ds);
    if (!rc)
        rc = kb__bbkb_epoch_start_posterior(e);
    return rc;
}

/* The epoch's own state once its model is built (empty: no data yet). */
static void open_epoch(kb_engine *e, int empty)
{
    bbkb *st = e->impl;
    for (size_t i = 0; i < st->A; i++)
        st->var[i] = st->var_start[i] + st->start_err;
    st->empty_model = empty;
    st->var_max = 0.0;
    for (size_t i = 0; i < st->A; i++)
        st->var_max = st->var_start[i] > st->var_max ? st->var_start[i] : st->var_max;
    st->init_phase = st->init_phase && st->var_max > 1.0 / st->P;
    st->init_epoch = st->init_phase;
    kb__bbkb_update_alpha(e, st);
    st->vstamp++;
    st->vstamp_open = st->vstamp;
    kb__bbkb_heap_rebuild(st, st->start_err == 0.0 && !st->bounded);
    st->have_epoch = 1;
    st->closed = st->dirty = st->rsum_valid = 0;
    st->epoch_sum = 0.0;
    st->n_epoch = 0;
    st->epoch++;
    st->last_batch = st->epoch_asks;
    st->epoch_asks = 0;
}

/* Algorithm 1 L11-16, then the next epoch; on failure the next ask starts over. */
static int resparsify(kb_engine *e)
{
    bbkb *st = e->impl;
    double t0 = kb__now(), embed0 = st->sec_embed;
    dataset ds = {NULL, 0, 0};
    int rc = kb__bbkb_draw_dictionary(e, &ds);
    st->row_var_ok = 0; /* the closing variances are read; rebuild_model sets them anew */
    if (!rc)
        rc = refit_kernel(e, &ds);
    if (!rc) {
        kb__bbkb_residual_rows(e, &ds);
        rc = build_model(e, &ds);
    }
    if (!rc)
        open_epoch(e, ds.n == 0);
    free(ds.rows);
    if (rc) {
        st->have_epoch = 0; /* rebuilt from scratch at the next ask */
        return rc;
    }
    st->sec_resparsify += kb__now() - t0 - (st->sec_embed - embed0);
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

/* Opens an epoch when none is open or a closed one may end; sets *wait (and res) when
 * the closed epoch still awaits feedback. `spent`: the epoch's pool has no allowed point
 * left, which closes it as Lemma 1 would. */
static int ready_epoch(kb_engine *e, int spent, kb_ask_result *res, int *wait)
{
    bbkb *st = e->impl;
    int closed = st->closed || spent;
    size_t awaiting = closed ? feedback_awaited(e) : 0;
    *wait = closed && awaiting > 0 && !st->init_epoch && st->have_epoch;
    if (*wait) {
        res->status = KB_ASK_AWAIT_FEEDBACK;
        res->awaiting = awaiting;
        return KB_OK;
    }
    int rc = !st->have_epoch || closed ? resparsify(e) : KB_OK;
    return !rc && st->dirty ? kb__bbkb_refresh_all_variances(st) : rc;
}

/* A box's pool spent within one epoch (every point handed out or told: under heavy noise
 * Lemma 1's sum of start variances grows slowly, and an epoch ran past 2,048 points)
 * closes the epoch, so that the next draws a fresh pool; a finite set, or a discrete box
 * whose every point is told, is exhausted. The pool is found spent again at every ask
 * until the epoch ends (nothing is set here): an ask that hands out nothing leaves the
 * engine as it was, so the event log (snapshot.c), which records only hand-outs, still
 * replays it exactly. */
static int bbkb_ask_one(kb_engine *e, size_t *index, kb_ask_result *res, kb_error *err)
{
    bbkb *st = e->impl;
    for (int spent = 0; spent <= 1; spent++) {
        int wait, rc = ready_epoch(e, spent, res, &wait);
        if (rc)
            return kb__fail(err, rc, NULL, rc == KB_ENOMEM ? "out of memory"
                                                          : "numerical failure in the posterior");
        if (wait)
            return KB_OK;
        double t0 = kb__now();
        int found = kb__design_index(e, index) || kb__bbkb_pick(e, index);
        st->sec_ask += kb__now() - t0;
        if (found)
            return KB_OK;
        if (e->space->finite)
            break;
    }
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
        kb__chol_update(&st->L, st->buf);
        st->vstamp++;
    }
    double v0 = kb__bbkb_start_variance(st, i);
    st->trial_var[h - 1] = v0;
    st->epoch_h[st->n_epoch++] = h;
    st->epoch_sum += v0;
    st->pending_max = e->n_pending > st->pending_max ? e->n_pending : st->pending_max;
    st->epoch_asks++;
    /* Out of memory in the local rule closes the epoch: conservative, and the hand-out
     * itself is already consistent; but a run with memory would not have closed it, so
     * nomem fails the next ask and a restore (internal.h). */
    if (st->local_rule && st->rsum_valid && kb__bbkb_add_local_term(e, i))
        st->rsum_valid = 0;
    if (kb__bbkb_update_closed(e))
        st->closed = e->nomem = 1;
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
static int epoch_factor(kb_engine *e, uint64_t skip, kb_chol *L)
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
        rc = kb__chol_factor(L, Vc, r, r);
    }
    free(Vc);
    free(Zc);
    return rc;
}

static int bbkb_abandon(kb_engine *e, uint64_t h, kb_error *err)
{
    bbkb *st = e->impl;
    /* Without an epoch (a resparsification failed part-way: r, W and Z may belong to a new
     * dictionary while V and L are the old one's) there is no model to remove the point
     * from, and none may be read: the next ask rebuilds it from the trials, where this one
     * is now abandoned. */
    if (!st->have_epoch)
        return KB_OK;
    double t0 = kb__now();
    const kb_trial *t = &e->trials[h - 1];
    size_t r = st->r, at = NONE;
    for (size_t k = 0; k < st->n_epoch; k++)
        at = st->epoch_h[k] == h ? k : at;
    if (r) {
        /* a trial of an earlier epoch (resparsify_on_partial < 1) is in V itself */
        double *z = at == NONE ? malloc(r * sizeof *z) : NULL;
        kb_chol L;
        kb__chol_init(&L, 1);
        int rc = z || at != NONE ? KB_OK : KB_ENOMEM;
        if (!rc && z) {
            if (t->generation == e->space->generation)
                memcpy(z, kb__bbkb_zrow(st, t->index), r * sizeof *z);
            else
                rc = kb__bbkb_embed_rows(e, kb__trial_u(e, h), 1, z);
            if (!rc)
                cblas_dsyr(CblasRowMajor, CblasLower, (int)r, -1.0, z, 1, st->V, (int)r);
        }
        if (!rc)
            rc = epoch_factor(e, h, &L);
        if (rc && z)
            cblas_dsyr(CblasRowMajor, CblasLower, (int)r, 1.0, z, 1, st->V, (int)r);
        free(z);
        if (rc) {
            kb__chol_free(&L);
            return kb__fail(err, rc, NULL, "cannot remove the point from the posterior");
        }
        kb__chol_free(&st->L);
        st->L = L;
        st->dirty = 1;
    }
    if (at != NONE) {
        st->epoch_h[at] = st->epoch_h[--st->n_epoch];
        st->epoch_sum -= st->trial_var[h - 1];
        st->rsum_valid = 0;
        if (kb__bbkb_update_closed(e)) /* conservative when the local sums cannot be */
            st->closed = e->nomem = 1;  /* rebuilt; nomem as in bbkb_handed */
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
              kb__bbkb_quad_form(st, &st->Lstart, z);
        cblas_dsyr(CblasRowMajor, CblasLower, (int)r, 1.0, z, 1, st->V, (int)r);
        kb__chol_update(&st->L, z);
        st->vstamp++;
        free(z);
    }
    st->obs_var[i] = var;
    st->logdet_sum += log1p(3.0 * var);
    return KB_OK;
}

/* ---------------------------------------------------------- posterior, stats */

/* Bayesian view (docs/ARCHITECTURE.md, Engine contract): mean = z^T w,
 * sd^2 = lambda sigma~^2_t, the mean in the units of kb__output_stats at the start of the
 * epoch. */
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
        v += r ? st->lambda * kb__bbkb_quad_form(st, &st->L, z) : 0.0;
        sd[i] = sqrt(v > 0.0 ? v : 0.0);
    }
    free(Zr);
    return KB_OK;
}

static const kb__stat bbkb_stats[] = {
    KB__STAT("epoch", bbkb, epoch),
    KB__STAT("epoch_asks", bbkb, epoch_asks),
    KB__STAT("last_batch", bbkb, last_batch),
    KB__STAT("dict_size", bbkb, m),
    KB__STAT("model_rows", bbkb, rows),
    KB__STAT("choice_floor_pools", bbkb, pool.floor_pools),
    KB__STAT("climb_pools", bbkb, pool.climb_pools),
    KB__STAT("init_phase", bbkb, init_phase),
    KB__STAT("start_var_max", bbkb, var_max),
    KB__STAT("epochs_low_rank", bbkb, epochs_low_rank),
    KB__STAT("epochs_bounded", bbkb, epochs_bounded),
    KB__STAT("bound_resolved", bbkb, bound_resolved),
    KB__STAT("dict_capped", bbkb, dict_capped),
    KB__STAT("sec_embed", bbkb, sec_embed),
    KB__STAT("sec_resparsify", bbkb, sec_resparsify),
    KB__STAT("sec_fit", bbkb, sec_fit),
    KB__STAT("sec_ask", bbkb, sec_ask),
    KB__STAT("sec_tell", bbkb, sec_tell),
    KB__STAT("flop_l3", bbkb, flop_l3),
    {NULL, 0, 0},
};

const double *kb__bbkb_dictionary(const kb_engine *e, size_t *m)
{
    if (e->ops != &kb_engine_bbkb && e->ops != &kb_engine_bkb) {
        *m = 0;
        return NULL;
    }
    const bbkb *st = e->impl;
    *m = st->m;
    return st->S;
}

const double *kb__bbkb_embedding(const kb_engine *e, size_t *r)
{
    if (e->ops != &kb_engine_bbkb && e->ops != &kb_engine_bkb) {
        *r = 0;
        return NULL;
    }
    const bbkb *st = e->impl;
    *r = st->r;
    return st->W;
}

const double *kb__bbkb_start_variances(const kb_engine *e, double *err_bound,
                                       const unsigned char **bounded)
{
    *err_bound = 0.0;
    *bounded = NULL;
    if (e->ops != &kb_engine_bbkb && e->ops != &kb_engine_bkb)
        return NULL;
    const bbkb *st = e->impl;
    *err_bound = st->start_err;
    *bounded = st->vs_bound;
    return st->have_epoch ? st->var_start : NULL;
}

double kb__bbkb_heap_violation(kb_engine *e)
{
    if (e->ops != &kb_engine_bbkb && e->ops != &kb_engine_bkb)
        return NAN;
    bbkb *st = e->impl;
    double worst = 0.0;
    if (!st->have_epoch || st->empty_model || st->dirty)
        return worst;
    for (size_t i = 0; i < st->A; i++) {
        const double *z = kb__bbkb_zrow(st, i);
        double v = st->resid[i] / st->lambda + kb__bbkb_quad_form(st, &st->L, z);
        double gap = (st->stamp[i] == st->vstamp ? fabs(st->var[i] - v) : v - st->var[i]) /
                     fmax(v, 1e-300);
        worst = gap > worst ? gap : worst;
    }
    return worst;
}

double kb__bbkb_kept_variance(const kb_engine *e, uint64_t h)
{
    if (e->ops != &kb_engine_bbkb && e->ops != &kb_engine_bkb)
        return NAN;
    const bbkb *st = e->impl;
    if (!st->row_var_ok || h == 0 || h > st->n_row_var)
        return NAN;
    return st->row_var[h - 1];
}

const kb_engine_ops kb_engine_bbkb = {
    .name = "bbkb",
    .summary = "batch budgeted kernelized bandits, BBKB (Calandriello et al., ICML 2020, "
               "Algorithm 1): near-linear-time batch GP-UCB",
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
    .ucb = 1,
};

const kb_engine_ops kb_engine_bkb = {
    .name = "bkb",
    .summary = "budgeted kernelized bandits, BKB (Calandriello et al., COLT 2019): "
               "BBKB with C~ = 1",
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
    .ucb = 1,
};
