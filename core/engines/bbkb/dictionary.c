/*
 * dictionary.c - the dictionary of BBKB / BKB: Algorithm 1 L11-16 (seed 004). At each
 * resparsification every selected or observed point enters with p_s =
 * min(1, q sigma~^2_start(x_s)), "start" being the start of the epoch that just closed;
 * with dictionary = coupled each candidate keeps one coin across resparsifications (seed
 * 000 section 3's incremental update); members of the previous dictionary that the draw
 * left out stay up to retain x (points drawn). The drawn points are then laid out in
 * slots so that the kernel columns k(., s) over the candidates, cached per slot in Kc,
 * are reused while a point stays, copied back from the Kaway cache when it returns, and
 * computed (A kernel evaluations) only for new points; what the low-rank epoch start
 * needs of the replaced dictionary is saved (Kgone, old_to_new).
 *
 * Invariants: slot_of and dcand are inverse maps between the candidates and the slots
 * that hold them; for j < m, column j of Kc is k(., S_j) over the current candidates
 * (cols_valid: also for the off-pool slots); away_of and away_cand are inverse maps
 * between candidates and the Kaway columns that hold theirs, no candidate being in both
 * Kc and Kaway; when lr_ok, old slot k of the previous dictionary went to slot
 * old_to_new[k], or to column old_to_new[k] - m of Kgone.
 */
#include "bbkb_internal.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The candidates are new (creation, or a box space's pool refresh): no kernel column of
 * the dictionary is cached for them any more. */
void kb__bbkb_new_pool(kb_engine *e)
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

static int add_datum(dataset *ds, const double *u, size_t cand, uint64_t trial)
{
    if (kb__grow((void **)&ds->rows, &ds->cap, ds->n + 1, sizeof *ds->rows))
        return KB_ENOMEM;
    ds->rows[ds->n++] = (datum){u, cand, trial, 0.0, 0.0, 0.0, 0.0, 0, NONE};
    return KB_OK;
}

/* rows[].ysum from the average told y to that average as kb__output_y models it:
 * standardized over distinct points. Why: the standardization fixes the units of the
 * prior (k(x, x) = 1), of F (Theorem 2) and of lambda, i.e. it estimates the spread of f
 * over the domain, which repeated evaluations of one arm say nothing about. Per
 * evaluation, on abalone seed 3 the sd fell from 0.16 to 0.027 while Algorithm 1 repeated
 * one arm (f = 0.61) in ever larger batches, the standardized gaps to the unexplored arms
 * grew six-fold while the width alpha sigma~ stays in fixed units, and the run never left
 * the arm: regret ratio 0.58. Done before the epoch's refit, whose kernel and noise are
 * fitted to values in these units (the output scaling moves with the fit: kb__hyper_refit). */
static void standardize_rows(kb_engine *e, dataset *ds)
{
    for (size_t j = 0; j < ds->n; j++)
        ds->rows[j].ysum = kb__output_y(e, ds->rows[j].ysum);
}

void kb__bbkb_residual_rows(kb_engine *e, dataset *ds)
{
    for (size_t j = 0; j < ds->n; j++)
        ds->rows[j].ysum = ds->rows[j].n_told * (ds->rows[j].ysum -
                                                 kb__prior_mean(e, ds->rows[j].u));
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
            if (add_datum(ds, kb__trial_u(e, h), cand, h))
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
        if (add_datum(ds, e->obs_u + i * e->space->dim, NONE, 0))
            return KB_ENOMEM;
        datum *dt = &ds->rows[ds->n - 1];
        dt->n_all = dt->n_told = 1.0;
        dt->ysum = e->obs_y[i];
    }
    standardize_rows(e, ds);
    return KB_OK;
}

/* A box study's model window: with more than model_rows data rows while the dictionary
 * holds a quarter or more of the model's rows, the epoch's model (dictionary, embedding,
 * V and the mean) keeps every row with a pending selection (they must stay hallucinated
 * in V_t) and, of the others, kb__pick_rows' choice: the best quarter by value and a
 * uniform sample of the rest, drawn from an RNG seeded from the row count so that the
 * engine's own streams do not move; rows keep their trial order. Why: on a noise-free
 * objective nearly every told point enters the dictionary (its variance stays above
 * lambda / q: docs/BENCHMARKS.md, seventeenth and eighteenth sessions), so without a
 * window an epoch costs O(n^2 r) and an ask 96 ms at n = 3,000 (kb-box-ask, twenty-first
 * session). Under noise the dictionary stops growing (about the effective dimension:
 * 80-150 points, a tenth of the rows or less) and every row still sharpens the mean by
 * averaging, so all are kept: windowing those runs cost regret there (twenty-first
 * session). The default (1,024) keeps the quality suite's budgets (at most 1,000 trials)
 * whole: a window of 512 lost on 6 of 7 noise-free tuning functions at 8 x 125. Finite
 * spaces keep every row: there a row is one arm, and an arm left out would look
 * unexplored. The hyperparameter fit and the acquisition refinement subset their rows
 * the same way (kb__pick_rows). */
static int window_rows(kb_engine *e, dataset *ds)
{
    bbkb *st = e->impl;
    size_t n = ds->n, cap = st->model_rows, k = 0;
    if (cap == 0 || n <= cap || e->space->finite || 4 * st->m < st->rows)
        return KB_OK;
    size_t *idx = malloc(n * sizeof *idx), *rest = malloc(n * sizeof *rest);
    double *y = malloc(n * sizeof *y);
    unsigned char *keep = calloc(n, 1);
    int rc = idx && rest && y && keep ? KB_OK : KB_ENOMEM;
    for (size_t j = 0; !rc && j < n; j++) {
        const datum *dt = &ds->rows[j];
        if (dt->n_all > dt->n_told) {
            keep[j] = 1;
            k++;
        } else {
            y[j - k] = dt->ysum; /* standardized, not yet a residual sum */
            rest[j - k] = j;
        }
    }
    if (!rc && k < cap) {
        kb_rng rng;
        kb_rng_seed(&rng, (uint64_t)n);
        size_t got = kb__pick_rows(y, n - k, cap - k, &rng, idx);
        for (size_t i = 0; i < got; i++)
            keep[rest[idx[i]]] = 1;
    }
    if (!rc) {
        size_t w = 0;
        for (size_t j = 0; j < n; j++)
            if (keep[j])
                ds->rows[w++] = ds->rows[j];
        ds->n = w;
    }
    free(idx);
    free(rest);
    free(y);
    free(keep);
    return rc;
}

/* Does row j need embedding for its closing variance (not a candidate of this epoch)? */
static int embedded_row(const bbkb *st, const datum *dt)
{
    return !(dt->cand != NONE && st->have_epoch);
}

/* The closing variances of the nb rows ds->rows[idx[0..nb)], embedded at once. */
static int embedded_variances(kb_engine *e, dataset *ds, const size_t *idx, size_t nb)
{
    bbkb *st = e->impl;
    size_t d = e->space->dim, r = st->r;
    double *U = calloc(nb * d, sizeof *U);
    double *Zr = malloc(nb * (r ? r : 1) * sizeof *Zr), *v = malloc(nb * sizeof *v);
    int rc = U && Zr && v ? KB_OK : KB_ENOMEM;
    if (!rc) {
        for (size_t k = 0; k < nb; k++)
            memcpy(U + d * k, ds->rows[idx[k]].u, d * sizeof *U);
        rc = kb__bbkb_embed_rows(e, U, nb, Zr);
    }
    if (!rc)
        rc = kb__bbkb_point_variances(e, U, Zr, nb, v);
    for (size_t k = 0; !rc && k < nb; k++)
        ds->rows[idx[k]].var = v[k];
    free(U);
    free(Zr);
    free(v);
    return rc;
}

/* ds->rows[].var = sigma~^2 at the start of the epoch that is closing (k(x,x)/lambda
 * before the first epoch). Candidates read it from var_start, rows the epoch's model
 * kept from row_var (the same computation, done when the model was built); others are
 * embedded, KB__ROWS_BLOCK at a time. */
static int closing_variances(kb_engine *e, dataset *ds)
{
    bbkb *st = e->impl;
    size_t idx[KB__ROWS_BLOCK], nb = 0;
    int rc = KB_OK;
    for (size_t j = 0; !rc && j < ds->n; j++) {
        if (!embedded_row(st, &ds->rows[j])) {
            ds->rows[j].var = kb__bbkb_start_variance(st, ds->rows[j].cand);
            continue;
        }
        double kept = st->have_epoch ? kb__bbkb_kept_variance(e, ds->rows[j].trial) : NAN;
        if (!isnan(kept)) {
            ds->rows[j].var = kept;
            continue;
        }
        idx[nb++] = j;
        if (nb == KB__ROWS_BLOCK) {
            rc = embedded_variances(e, ds, idx, nb);
            nb = 0;
        }
    }
    return rc || nb == 0 ? rc : embedded_variances(e, ds, idx, nb);
}

/* Algorithm 1 L11-16: marks the rows of the new dictionary. Repeated selections of one
 * candidate share a row, so each is included at most once: a row standing for n_all
 * selections enters if any of them is drawn, with p' = 1 - (1 - p)^n_all.
 * dictionary = coupled draws that decision with the candidate's own coin, kept across
 * resparsifications (seed 000 section 3, "Incremental dictionary update", which notes
 * that its analysis in the bandit setting is open): each draw still has probability p',
 * but a point stays in or out until its p' crosses its coin, so consecutive dictionaries
 * share most points and kb__bbkb_place_dictionary reuses their kernel columns. Observes and
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

/* Caps one resparsification's growth once there is a model: when more than max(2 m,
 * KB__DICT_STEP) rows are drawn, a uniform sample of that many of them (from the
 * engine's RNG) is the new dictionary. Why: the draw's variances come from the closing
 * epoch's dictionary, and after a refit that brings dimensions back into the model
 * (drop_hidden_dims) that dictionary spans the new kernel poorly: its Nystrom residuals
 * overstate every row's variance, and on a long noisy box run all 14,793 rows entered
 * at once (kb-box-ask seed 3, twenty-sixth session: 378 ms per round trip). A uniform
 * subsample of the draw is a draw with a smaller q; the next closing, over the larger
 * dictionary, re-estimates, so the dictionary grows to what the data need by doublings.
 * dictionary = all keeps every row. */
static int cap_growth(kb_engine *e, dataset *ds)
{
    bbkb *st = e->impl;
    size_t drawn = 0, cap = 2 * st->m > KB__DICT_STEP ? 2 * st->m : KB__DICT_STEP;
    for (size_t j = 0; j < ds->n; j++)
        drawn += ds->rows[j].in != 0;
    if (!st->have_epoch || st->dict_mode == DICT_ALL || drawn <= cap)
        return KB_OK;
    size_t *idx = malloc(drawn * sizeof *idx), k = 0;
    if (!idx)
        return KB_ENOMEM;
    for (size_t j = 0; j < ds->n; j++)
        if (ds->rows[j].in) {
            idx[k++] = j;
            ds->rows[j].in = 0;
        }
    for (size_t i = 0; i < cap; i++) {
        size_t t = i + (size_t)kb_rng_below(&e->rng, drawn - i), h = idx[i];
        idx[i] = idx[t];
        idx[t] = h;
        ds->rows[idx[i]].in = 1;
    }
    free(idx);
    st->dict_capped++;
    return KB_OK;
}

/* Algorithm 1 L11-16 with the data of every selection and observe: ds gets one row per
 * point, rows[].in marking the new dictionary (sample_dictionary, retain_members,
 * cap_growth). */
int kb__bbkb_draw_dictionary(kb_engine *e, dataset *ds)
{
    bbkb *st = e->impl;
    size_t *rowof = malloc(st->A * sizeof *rowof);
    int rc = rowof ? collect_data(e, ds, rowof) : KB_ENOMEM;
    free(rowof);
    if (!rc)
        rc = window_rows(e, ds);
    if (!rc)
        st->rows = ds->n;
    if (!rc)
        rc = closing_variances(e, ds);
    if (!rc) {
        sample_dictionary(e, ds);
        rc = retain_members(st, ds);
    }
    if (!rc)
        rc = cap_growth(e, ds);
    return rc;
}

/* Kc columns of the slots fresh[0..n): k(x_i, S_slot) for every candidate, as one kernel
 * matrix of the new points against the candidates (n x A row-major: each row is a
 * column of Kc). When the slots are consecutive (always on a box, whose pool is redrawn
 * at every epoch: they are 0..m) it is written straight into Kc: a staging matrix of
 * A x n doubles, newly mapped and zeroed by dgemm at every epoch, was a fifth to two
 * fifths of a box epoch's CPU (docs/BENCHMARKS.md, eleventh session). Otherwise it is
 * staged and copied; not computed run by run, since dgemm's rounding depends on the
 * matrix's shape (d >= 8) and one matrix keeps the columns as they were. */
static int fill_columns(kb_engine *e, const size_t *fresh, size_t n)
{
    bbkb *st = e->impl;
    size_t d = e->space->dim, A = st->A;
    if (n == 0)
        return KB_OK;
    if (fresh[n - 1] - fresh[0] == n - 1) {
        kb_kernel_matrix(&e->kernel, st->S + fresh[0] * d, n, e->space->u, A,
                         st->Kc + fresh[0] * A);
        return KB_OK;
    }
    double *U = malloc(n * d * sizeof *U), *K = malloc(A * n * sizeof *K);
    int rc = U && K ? KB_OK : KB_ENOMEM;
    for (size_t k = 0; !rc && k < n; k++)
        memcpy(U + k * d, st->S + fresh[k] * d, d * sizeof *U);
    if (!rc)
        kb_kernel_matrix(&e->kernel, U, n, e->space->u, A, K);
    for (size_t k = 0; !rc && k < n; k++)
        memcpy(st->Kc + fresh[k] * A, K + k * A, A * sizeof *K);
    free(U);
    free(K);
    return rc;
}

/* Keeps the kernel column of candidate c, leaving the dictionary, in Kaway, evicting the
 * least recently stored when full. Capacity follows the dictionary size (memory stays
 * O(A m)). KB_ENOMEM when it could not grow: a column the cache then loses is computed
 * again later in a block of another shape, whose rounding differs (fill_columns), so a
 * replay would go on differently. */
static int store_away(bbkb *st, size_t c, const double *col)
{
    size_t cap = st->cap_away, want = st->m > 32 ? st->m : 32, j = 0;
    if (cap < want) {
        double *K = realloc(st->Kaway, want * st->A * sizeof *K);
        size_t *ac = K ? realloc(st->away_cand, want * sizeof *ac) : NULL;
        uint64_t *au = ac ? realloc(st->away_used, want * sizeof *au) : NULL;
        st->Kaway = K ? K : st->Kaway;
        st->away_cand = ac ? ac : st->away_cand;
        st->away_used = au ? au : st->away_used;
        if (!au)
            return KB_ENOMEM;
        for (size_t k = cap; k < want; k++)
            st->away_cand[k] = NONE;
        st->cap_away = cap = want;
    }
    for (size_t k = 1; k < cap && st->away_cand[j] != NONE; k++)
        if (st->away_cand[k] == NONE || st->away_used[k] < st->away_used[j])
            j = k;
    if (st->away_cand[j] != NONE)
        st->away_of[st->away_cand[j]] = NONE;
    memcpy(st->Kaway + j * st->A, col, st->A * sizeof *col);
    st->away_cand[j] = c;
    st->away_used[j] = ++st->away_clock;
    st->away_of[c] = j;
    return KB_OK;
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
 * kb__bbkb_place_dictionary overwrites slots: the kernel columns of the points leaving it (in
 * Kgone) and, in old_to_new, where each old slot goes (its new slot, filled in by
 * kb__bbkb_place_dictionary, or m + g for the g-th point leaving); and every departed column in
 * the Kaway cache. claimed[k]: old slot k stays.
 * Sets lr_ok = 0 when there are more departures than are worth saving. */
static int save_departures(bbkb *st, const unsigned char *claimed, size_t m)
{
    size_t gone = 0;
    st->lr_ok = 1;
    for (size_t k = 0; k < st->m; k++) {
        gone += !claimed[k];
        if (!claimed[k] && st->dcand[k] != NONE && store_away(st, st->dcand[k],
                                                              st->Kc + k * st->A))
            return KB_ENOMEM;
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

/* A placement in progress, per data row j: slot[j] its new slot and olds[j] its old one
 * (NONE: none); taken[] marks the new slots in use, claimed[] the old slots kept;
 * fresh[0..nfresh) are the new slots whose kernel column is still to compute. */
typedef struct placement {
    size_t *slot, *olds, *fresh, nfresh;
    unsigned char *taken, *claimed;
} placement;

/* Drawn rows whose point is in the current dictionary keep its slot when it is below m. */
static void keep_slots(const bbkb *st, const dataset *ds, size_t m, size_t d, placement *p)
{
    for (size_t j = 0; j < ds->n; j++) {
        size_t old = p->olds[j] = ds->rows[j].in ? old_slot(st, &ds->rows[j], p->claimed, d)
                                                 : NONE;
        p->slot[j] = old < m ? old : NONE;
        if (p->slot[j] != NONE)
            p->taken[old] = 1;
        if (old != NONE)
            p->claimed[old] = 1;
    }
}

/* The other drawn rows take the free slots in order, their kernel column moved down from
 * their old slot, back from Kaway, or left to compute (fresh); old_to_new follows when
 * lr_ok. */
static void move_slots(bbkb *st, const dataset *ds, size_t d, placement *p)
{
    size_t next = 0;
    for (size_t j = 0; j < ds->n; j++) {
        size_t c = ds->rows[j].cand, old = p->olds[j];
        if (st->lr_ok && p->slot[j] != NONE)
            st->old_to_new[old] = old;
        if (!ds->rows[j].in || p->slot[j] != NONE)
            continue;
        while (p->taken[next])
            next++;
        p->taken[next] = 1;
        p->slot[j] = next;
        memcpy(st->S + next * d, ds->rows[j].u, d * sizeof(double));
        if (old == NONE && !fetch_away(st, c, st->Kc + next * st->A))
            p->fresh[p->nfresh++] = next;
        else if (old != NONE)
            memcpy(st->Kc + next * st->A, st->Kc + old * st->A, st->A * sizeof *st->Kc);
        if (st->lr_ok && old != NONE)
            st->old_to_new[old] = next;
    }
}

/* dcand, slot_of and m of the placed dictionary, each row's slot, and the fresh kernel
 * columns; on failure no cached column is trusted. */
static int set_slots(kb_engine *e, dataset *ds, size_t m, const placement *p)
{
    bbkb *st = e->impl;
    for (size_t k = 0; k < st->m; k++)
        if (st->dcand[k] != NONE)
            st->slot_of[st->dcand[k]] = NONE;
    for (size_t j = 0; j < ds->n; j++) {
        ds->rows[j].slot = ds->rows[j].in ? p->slot[j] : NONE;
        if (ds->rows[j].in) {
            st->dcand[p->slot[j]] = ds->rows[j].cand;
            if (ds->rows[j].cand != NONE)
                st->slot_of[ds->rows[j].cand] = p->slot[j];
        }
    }
    st->m = m;
    int rc = fill_columns(e, p->fresh, p->nfresh);
    st->cols_valid = !rc;
    for (size_t k = 0; rc && k < m; k++)
        if (st->dcand[k] != NONE) {
            st->slot_of[st->dcand[k]] = NONE;
            st->dcand[k] = NONE;
        }
    return rc;
}

/* Lays the drawn rows out as the new dictionary: a point that was already in it keeps
 * its slot and so its cached kernel column (old_slot), a candidate back from Kaway copies
 * its column, and only new points cost a column of A kernel evaluations. Fills S, dcand,
 * slot_of, Kc. */
int kb__bbkb_place_dictionary(kb_engine *e, dataset *ds)
{
    bbkb *st = e->impl;
    size_t d = e->space->dim, m = 0, n = ds->n ? ds->n : 1;
    for (size_t j = 0; j < ds->n; j++)
        m += ds->rows[j].in != 0;
    placement p = {NULL, NULL, NULL, 0, NULL, NULL};
    p.slot = malloc(n * sizeof *p.slot);
    p.olds = malloc(n * sizeof *p.olds);
    p.fresh = malloc((m ? m : 1) * sizeof *p.fresh);
    p.taken = calloc(m ? m : 1, 1);
    p.claimed = calloc(st->m ? st->m : 1, 1);
    int rc = p.slot && p.olds && p.fresh && p.taken && p.claimed ? KB_OK : KB_ENOMEM;
    /* Kc's columns are contiguous, so growing it keeps the cached ones. */
    if (!rc && (kb__grow((void **)&st->Kc, &st->cap_k, m, st->A * sizeof(double)) ||
                kb__grow((void **)&st->S, &st->cap_m, m, d * sizeof(double)) ||
                kb__grow((void **)&st->dcand, &st->cap_dc, m, sizeof *st->dcand)))
        rc = KB_ENOMEM;
    if (!rc)
        keep_slots(st, ds, m, d, &p);
    st->lr_ok = 0;
    if (!rc)
        rc = save_departures(st, p.claimed, m);
    if (!rc) {
        move_slots(st, ds, d, &p);
        rc = set_slots(e, ds, m, &p);
    }
    free(p.slot);
    free(p.olds);
    free(p.fresh);
    free(p.taken);
    free(p.claimed);
    return rc;
}
