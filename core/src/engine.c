/*
 * engine.c - the engine registry and the common engine base: creation from a config
 * and a space, trial bookkeeping, the repeats policy, argument checks, and the event
 * log behind snapshots, the distinct observed points (groups found by a hash of their
 * internal coordinates, kept up to date per observation; output.c standardizes over
 * them), the box pool's rules (choice floors, climbs, grids), and the adoption of replayed
 * asks whose recorded point the engine no longer chooses (kb_engine_ask_recorded: the
 * engine's choice abandoned inside the engine, the trial's tell an observation of the
 * recorded point; kb_trial in internal.h), and the hyperparameter refit schedule with
 * the box dimensions the noise hides (kb__hyper_refit, drop_hidden_dims). Engine files
 * implement kb_engine_ops (internal.h) and see only already-validated calls.
 *
 * Ownership: kb_engine owns its copies of the config and the space, the trial and
 * observation arrays, fit_ls and the log; e->impl belongs to the engine's ops.
 * Invariant (UCB engines on boxes): kernel.lengthscales equals fit_ls except where a
 * dimension is hidden (KB_OFF_LENGTHSCALE).
 */
#include "internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The registry: one line per engine. */
static const kb_engine_ops *const registry[] = {
    &kb_engine_random,
    &kb_engine_bbkb,
    &kb_engine_bkb,
    &kb_engine_gp_ucb,
    &kb_engine_gp_bucb,
    &kb_engine_pi_gp_ucb,
    &kb_engine_gp_ts,
    &kb_engine_sgp_ts,
};
#define N_ENGINES (sizeof registry / sizeof registry[0])

const kb_engine_ops *kb__engine_lookup(const char *name)
{
    for (size_t i = 0; i < N_ENGINES; i++)
        if (strcmp(registry[i]->name, name) == 0)
            return registry[i];
    return NULL;
}

const char *const *kb_engine_names(void)
{
    static const char *names[N_ENGINES + 1];
    for (size_t i = 0; i < N_ENGINES; i++)
        names[i] = registry[i]->name;
    return names;
}

const kb_option_spec *kb_engine_options(const char *engine)
{
    const kb_engine_ops *ops = kb__engine_lookup(engine);
    return ops ? ops->options : NULL;
}

const char *kb_engine_summary(const char *engine)
{
    const kb_engine_ops *ops = engine ? kb__engine_lookup(engine) : NULL;
    return ops ? ops->summary : NULL;
}

int kb__grow(void **arr, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return KB_OK;
    size_t nc = *cap ? *cap : 64;
    while (nc < need)
        nc *= 2;
    void *p = realloc(*arr, nc * elem);
    if (!p)
        return KB_ENOMEM;
    *arr = p;
    *cap = nc;
    return KB_OK;
}

static int reserve_trials(kb_engine *e, size_t need)
{
    if (kb__grow((void **)&e->trials, &e->cap_trials, need, sizeof *e->trials))
        return KB_ENOMEM;
    size_t chunks = (need + KB_TRIAL_CHUNK - 1) / KB_TRIAL_CHUNK;
    if (chunks <= e->n_chunks)
        return KB_OK;
    size_t rows = KB_TRIAL_CHUNK * e->space->dim;
    double **xc = realloc(e->x_chunks, chunks * sizeof *xc);
    if (!xc)
        return KB_ENOMEM;
    e->x_chunks = xc;
    double **uc = realloc(e->u_chunks, chunks * sizeof *uc);
    if (!uc)
        return KB_ENOMEM;
    e->u_chunks = uc;
    for (; e->n_chunks < chunks; e->n_chunks++) {
        xc[e->n_chunks] = malloc(rows * sizeof(double));
        uc[e->n_chunks] = malloc(rows * sizeof(double));
        if (!xc[e->n_chunks] || !uc[e->n_chunks]) {
            free(xc[e->n_chunks]);
            free(uc[e->n_chunks]);
            return KB_ENOMEM;
        }
    }
    return KB_OK;
}

static int reserve_obs(kb_engine *e, size_t need)
{
    size_t cap = e->cap_obs, c1 = cap, c2 = cap, c3 = cap, c4 = cap;
    if (kb__grow((void **)&e->obs_u, &c1, need, e->space->dim * sizeof(double)) ||
        kb__grow((void **)&e->obs_y, &c2, need, sizeof(double)) ||
        kb__grow((void **)&e->obs_trial, &c3, need, sizeof(uint64_t)) ||
        kb__grow((void **)&e->obs_group, &c4, need, sizeof(size_t)))
        return KB_ENOMEM;
    e->cap_obs = c1;
    return KB_OK;
}

/* Whether every coordinate of a box takes finitely many values (kb_engine.pool_canon). */
static int discrete_box(const kb_space *s)
{
    if (s->finite || !s->levels)
        return 0;
    for (size_t j = 0; j < s->dim; j++)
        if (!s->levels[j])
            return 0;
    return 1;
}

static int alloc_candidate_flags(kb_engine *e)
{
    size_t n = e->space->n;
    free(e->cand_pending);
    free(e->cand_told);
    e->cand_pending = calloc(n, sizeof *e->cand_pending);
    e->cand_told = calloc(n, sizeof *e->cand_told);
    if (!e->cand_pending || !e->cand_told)
        return KB_ENOMEM;
    if (!discrete_box(e->space))
        return KB_OK;
    for (e->n_pool_heads = 64; e->n_pool_heads < 2 * n;)
        e->n_pool_heads *= 2;
    e->pool_canon = malloc(n * sizeof *e->pool_canon);
    e->pool_next = malloc(n * sizeof *e->pool_next);
    e->pool_heads = malloc(e->n_pool_heads * sizeof *e->pool_heads);
    if (!e->pool_canon || !e->pool_next || !e->pool_heads)
        return KB_ENOMEM;
    kb__pool_reset_flags(e);
    return KB_OK;
}

/* A finite set's initial design: design_n distinct candidates drawn uniformly, from a
 * stream of their own (the engine's rng is left to the engine). Why: before the first fit
 * the kernel is the unfitted default (lengthscale 1), whose largest variance is at the
 * candidates farthest from those told, so the second and third trials went to the set's
 * corners (boundary over-exploration, Siivola et al., MLSP 2018), on Branin at 2-3 times
 * random search's regret, and the first fit saw one point and two corners. Uniform draws
 * are what a box's quasi-random design is to its pool, at no extra trial. Measured (the
 * finite-set grid's problems, seeds 1-10, and eight held-out finite problems, seeds
 * 1606-1615, bbkb and gp-ucb): mean log10 regret ratio -0.046 and -0.079 (90% interval
 * [-0.133, -0.026]), worst seeds mostly better, bbkb Hartmann-6 of the grid worse (median
 * 0.172 -> 0.202; docs/BENCHMARKS.md, fifty-first session). */
static void draw_finite_design(kb_engine *e)
{
    kb_rng rng;
    kb_rng_seed(&rng, (uint64_t)kb_config_number(e->cfg, "seed") ^ 0x6b6264657369676eULL);
    for (size_t k = 0; k < e->design_n;) {
        size_t i = (size_t)kb_rng_below(&rng, e->space->n), seen = 0;
        for (size_t j = 0; j < k; j++)
            seen |= e->design_rows[j] == i;
        if (!seen)
            e->design_rows[k++] = i;
    }
}

/* Fitting settings from the config: what the user set is held fixed. The first fit waits
 * for the initial design: on boxes 2 (d + 1) quasi-random points, at most 40 (BoTorch's
 * and TuRBO's usual 2d-sized Sobol design); on finite sets 3 uniform draws. Warm-start
 * observations take design trials' places (kb__design_index): a study given results
 * already has what the design is for. */
static void setup_fitting(kb_engine *e)
{
    const kb_config *cfg = e->cfg;
    int has_lambda = 0;
    for (size_t i = 0; i < kb__config_count(cfg); i++)
        has_lambda |= strcmp(kb__config_spec(cfg, i)->name, "lambda") == 0;
    e->noise = has_lambda && kb_config_number(cfg, "lambda") > 0 ? kb_config_number(cfg, "lambda")
                                                                  : 0.01;
    e->fit_on = e->ops->fits_hyper && e->kernel.kind != KB_KERNEL_LINEAR &&
                strcmp(kb_config_string(cfg, "hyperparameters"), "fit") == 0;
    e->fit_opts = (kb_hyper_opts){
        .fix_lengthscales = kb_config_is_set(cfg, "lengthscale") ||
                            kb_config_is_set(cfg, "lengthscales"),
        .fix_variance = kb_config_is_set(cfg, "kernel_variance"),
        .fix_noise = has_lambda && kb_config_is_set(cfg, "lambda"),
    };
    size_t d = e->space->dim;
    e->design_n = !e->fit_on                    ? 0
                  : e->space->finite            ? KB_FINITE_DESIGN
                  : 2 * (d + 1) < KB_DESIGN_MAX ? 2 * (d + 1)
                                                : KB_DESIGN_MAX;
    if (e->design_n > e->space->n)
        e->design_n = e->space->n;
    e->fit_next = e->design_n > 3 ? e->design_n : 3;
    kb_rng_seed(&e->fit_rng, (uint64_t)kb_config_number(cfg, "seed") ^ 0x6b62666974ULL);
    if (e->space->finite)
        draw_finite_design(e);
}

/* The kernel compares the space's categorical coordinates by identity (kb_kernel.choices). */
static int kernel_choices(kb_engine *e, kb_error *err)
{
    const kb_space *s = e->space;
    size_t n_cat = 0;
    for (size_t j = 0; s->categorical && j < s->dim; j++)
        n_cat += s->categorical[j] != 0;
    if (!n_cat)
        return KB_OK;
    e->kernel.choices = calloc(s->dim, sizeof *e->kernel.choices);
    if (!e->kernel.choices)
        return kb__fail(err, KB_ENOMEM, NULL, "out of memory");
    for (size_t j = 0; j < s->dim; j++)
        e->kernel.choices[j] = s->categorical[j] ? s->levels[j] : 0;
    return KB_OK;
}

/* Every observation's value as the engines see it (kb__output_stats), less the prior
 * mean when `residual` (kb__model_y: what the GP part models); owned, NULL on OOM. */
static double *standardized_y(kb_engine *e, int residual)
{
    double *y = malloc((e->n_obs ? e->n_obs : 1) * sizeof *y);
    if (!y)
        return NULL;
    for (size_t i = 0; i < e->n_obs; i++)
        y[i] = residual ? kb__model_y(e, i) : kb__output_y(e, e->obs_y[i]);
    return y;
}

/* Does the noise hide box dimension j: is its whole effect on f, the variance
 * 2 s2 (1 - base(1 / l^2)) of f's change across the box's width (or between two choices),
 * below the noise variance? */
static int hidden_dim(const kb_engine *e, size_t j)
{
    const kb_kernel *k = &e->kernel;
    double l = k->lengthscales[j], slope;
    return 2.0 * k->variance * (1.0 - kb__kernel_profile(k->kind, 1.0 / (l * l), &slope)) <
           e->noise;
}

/* Box dimensions the noise hides (hidden_dim) leave the model: they get the lengthscale
 * KB_OFF_LENGTHSCALE, the fit's upper bound (hyper.c). Why: along such a dimension the
 * posterior mean barely moves and the sd grows towards the faces only because they have
 * fewer neighbours, so the UCB over the pool sent that coordinate to its end values (an
 * int to its first or last value on most asks) for no information: the boundary over-
 * exploration of Siivola, Vehtari, Vanhatalo, Gonzalez & Andersen, "Correcting boundary
 * over-exploration deficiencies in Bayesian optimization with virtual derivative sign
 * observations" (MLSP 2018). Out of the model, the coordinate keeps the pool point's
 * value (quasi-random or a step from a best point). The fit starts from its own values
 * (fit_ls), so a dimension whose effect shows later comes back. Without noise only a
 * dimension with no visible effect leaves (where it costs nothing). UCB engines only
 * (kb_engine_ops.ucb): in a Thompson sample the sd enters as a random draw, not as a
 * bonus that every ask collects at the faces, and gp-ts lost by the rule under noise
 * (docs/BENCHMARKS.md, nineteenth session). With the additive categorical term
 * (categorical_mix) the rule still reads the whole variance s2, not the joint part's (1 -
 * mix) s2: so it was measured. */
static void drop_hidden_dims(kb_engine *e)
{
    kb_kernel *k = &e->kernel;
    memcpy(e->fit_ls, k->lengthscales, k->dim * sizeof *e->fit_ls);
    for (size_t j = 0; j < k->dim; j++)
        if (hidden_dim(e, j))
            k->lengthscales[j] = KB_OFF_LENGTHSCALE;
}

/* Categorical main effects under noise (categorical_kernel = additive, the default): on a
 * box with categorical parameters the UCB engines' kernel gets an additive overlap term
 * beside the joint one (kb_kernel.additive; CoCaBO's sum of kernels: Ru, Alvi, Nguyen,
 * Osborne & Roberts, "Bayesian Optimisation over Multiple Continuous and Categorical
 * Inputs", ICML 2020, eq. 4), its share `mix` fitted with the rest (hyper.c), while the
 * noise variance is at least CAT_MIX_NOISE (standardized units; the default lambda, so the
 * first fit has it). Why: the joint kernel learns a choice's effect only near the points
 * where it was tried, so an effect smaller than the noise stays hidden; the overlap term
 * pools every row with that choice. Why not without noise: there the joint kernel resolves
 * each choice locally, and with the term on, noise-free fits drifted to joint lengthscales
 * near their lower bound (choice means plus white noise) and lost runs to a wrong choice.
 * The default (categorical_kernel = additive; joint turns it off): on seven held-out
 * mixed spaces under noise, 60 fresh seeds per function and budget, it was decided better
 * on three of six set-and-budget cells and worse on no function (docs/BENCHMARKS.md,
 * thirty-eighth session). Its known risk: where the best continuous values depend on the
 * choice, the term can read the choices' sampling (the incumbent's choice tried mostly
 * near good points) as a main effect and hold a run on a wrong choice (train_mixed, 8 x
 * 125, seeds 501-515: decided worse on 15 seeds, not on 60 fresh ones; thirty-seventh
 * session). Gating it on a choice the noise hides was worse (thirty-eighth session).
 * Decided before every fit by the noise the fit before found (the first fit: the starting
 * lambda); the term enters at mix = 0.1 and leaves at 0. A function of the call sequence,
 * so replay gives the same kernels. */
static void categorical_mix(kb_engine *e)
{
    static const double CAT_MIX_NOISE = 0.01;
    kb_kernel *k = &e->kernel;
    int on = e->ops->ucb && k->choices && /* fitted, so not the linear kernel */
             strcmp(kb_config_string(e->cfg, "categorical_kernel"), "additive") == 0 &&
             e->noise >= CAT_MIX_NOISE;
    if (on && !k->additive)
        k->mix = 0.1;
    if (!on)
        k->mix = 0.0;
    k->additive = on;
}

/* During a restore: the recorded fit made at this n_obs, applied (*rc its result), or 0
 * when there is none (records of fits made before it are passed over). */
static int recorded_fit(kb_engine *e, int *rc)
{
    while (e->fit_queue_head < e->fit_queued &&
           e->fit_queue[e->fit_queue_head].n_obs < e->n_obs)
        e->fit_queue_head++;
    if (e->fit_queue_head == e->fit_queued || e->fit_queue[e->fit_queue_head].n_obs != e->n_obs)
        return 0;
    const kb_fit_record *r = &e->fit_queue[e->fit_queue_head++];
    kb_kernel *k = &e->kernel;
    memcpy(k->lengthscales, r->lengthscales, k->dim * sizeof *k->lengthscales);
    k->variance = r->variance;
    k->mix = r->mix;
    e->noise = r->noise;
    e->prior_c = r->prior_c;
    e->fit_rng = r->rng;
    *rc = r->rc;
    return 1;
}

/* The fit just made (or applied), for the snapshot's log. Not logged when memory is
 * short: a restore then fits again. */
static void log_fit(kb_engine *e, int rc)
{
    kb_fit_record r = {e->n_obs, rc, e->kernel.variance, e->noise, e->kernel.mix,
                       e->prior_c, e->fit_rng, e->kernel.lengthscales};
    kb__log_fit(e->log, &r, e->kernel.dim, e->space->dim);
}

int kb__hyper_refit(kb_engine *e, kb_error *err)
{
    size_t n = e->n_obs;
    double *y = standardized_y(e, 1);
    if (!y)
        return kb__fail(err, KB_ENOMEM, NULL, "out of memory");
    /* Restarts from the priors while the posterior is still broad; later the previous
     * fit is a good start and one run from it suffices. */
    e->fit_opts.starts = n < 64 ? 2 : 0;
    /* On a sample of the rows, a warm-started run gains <= 1.2 nats (over 256 rows) after
     * its tenth evaluation (docs/BENCHMARKS.md, tenth session): less than the sample's
     * own noise, for a third of the cost. A run still gaining more at the cap started far
     * from an optimum and runs on (hyper.c, CAP_TAIL_GAIN). */
    e->fit_opts.max_evals = n > KB_HYPER_ROWS ? 10 : 0;
    kb_error ferr;
    if (e->fit_ls)
        memcpy(e->kernel.lengthscales, e->fit_ls, e->kernel.dim * sizeof *e->fit_ls);
    categorical_mix(e);
    kb_rows rows = {e->obs_u, y, n, e->obs_group, e->n_groups};
    int rc;
    if (!recorded_fit(e, &rc)) {
        rc = kb__hyper_fit(&e->kernel, &e->noise, &rows, &e->fit_opts, &e->fit_rng, &ferr);
        /* The interior prior mean c b(u), c re-estimated by the fitted GP after each fit
         * (kb__interior_coef, prior c ~ N(1, 1)). Why: a stationary GP's sd is largest at
         * a finite set's boundary, where candidates have neighbours on one side only, and
         * the UCB went there: after the first fit 36-57% of trials 4-30 sat on the
         * boundary (base rate 12-31%), each at 2.5-4.4x an interior trial's regret
         * (docs/BENCHMARKS.md, fifty-first session): the boundary over-exploration of
         * Siivola et al. (MLSP 2018). A quadratic prior mean, lower towards the edges, is
         * what DNGO uses (Snoek et al., "Scalable Bayesian optimization using deep neural
         * networks", ICML 2015); its height is estimated as a mean function's coefficient
         * (Rasmussen & Williams, section 2.7) so that data whose best values lie at an
         * edge pull it down. Mean log10 regret ratio, bbkb and gp-ucb at T = 300, fresh
         * seeds: -0.12 on seven held-out problems with interior optima, 0.00 on twelve
         * whose optimum was put on an edge or a corner (docs/BENCHMARKS.md, fifty-second
         * session). */
        if (rc == KB_OK && e->prior_basis)
            e->prior_c = kb__interior_coef(&e->kernel, e->noise, &rows, e->prior_c,
                                           &e->nomem);
    }
    free(y);
    if (rc != KB_ENOMEM && !e->nomem) /* a failed op's fit is not replayed */
        log_fit(e, rc);
    if (rc == KB_OK) { /* the output stats are still those the fit's y were scaled by */
        double mean, sd;
        kb__output_stats(e, &mean, &sd);
        e->fit_noise_sd = sqrt(e->noise) * sd;
        e->out_valid = 0; /* the warp's floor moved with it; the stats follow at once */
    }
    if (e->fit_ls)
        drop_hidden_dims(e);
    /* Every 20% more tells. On a finite set, past KB_HYPER_ROWS tells the next fit waits
     * for n to double: most later tells repeat arms already told, so the fit's data (one
     * row per arm, hyper.c) change little; refitting at the 20% step there moved the mean
     * log regret ratio by -0.002 / -0.004 at T = 1,500 and left the 20,000-arm runs
     * equal to 3 digits (docs/BENCHMARKS.md, forty-fifth session; before repeats were
     * merged it cost 40-50% of that benchmark's CPU, tenth session). A box's tells are
     * new points wherever its search moves; with the doubling, fits at ~257 and ~514
     * tells served the last half of a 1,000-trial run, and refitting every 20% there was
     * decided better on held-out, tuning and noisy functions (forty-fourth session). */
    size_t step = n > KB_HYPER_ROWS && e->space->finite ? n : n / 5 > 1 ? n / 5 : 1;
    e->fit_next = n + step;
    if (rc == KB_OK)
        e->n_fits++;
    if (rc == KB_ENOMEM)
        return kb__fail(err, rc, NULL, "out of memory");
    return KB_OK; /* a numerical failure keeps the previous values */
}

double kb__width(const kb_engine *e, double theory, double fitted)
{
    double w = kb_config_number(e->cfg, "width");
    if (w > 0)
        return w;
    return e->fit_on ? fitted : theory;
}

int kb__design_index(const kb_engine *e, size_t *index)
{
    if (e->n_trials + e->n_observed >= e->design_n)
        return 0;
    size_t i = e->space->finite ? e->design_rows[e->n_trials] : e->n_trials;
    if (kb__excluded(e, i))
        return 0;
    *index = i;
    return 1;
}

int kb__uniform_allowed(kb_engine *e, size_t *index)
{
    size_t allowed = 0, n = e->space->n;
    for (size_t i = 0; i < n; i++)
        allowed += !kb__excluded(e, i);
    if (allowed == 0)
        return 0;
    size_t k = (size_t)kb_rng_below(&e->rng, allowed);
    for (size_t i = 0; i < n; i++)
        if (!kb__excluded(e, i) && k-- == 0) {
            *index = i;
            break;
        }
    return 1;
}

int kb_engine_hyperparameters(const kb_engine *e, kb_hyperparameters *out)
{
    *out = (kb_hyperparameters){
        .fitting = e->fit_on,
        .fits = e->n_fits,
        .dim = e->kernel.dim,
        .lengthscales = e->kernel.lengthscales,
        .kernel_variance = e->kernel.variance,
        .noise = e->noise,
        .categorical_mix = e->kernel.additive ? e->kernel.mix : 0.0,
        .interior_prior = e->prior_basis ? e->prior_c : 0.0,
    };
    return KB_OK;
}

/* The rows a recommendation chooses among (internal coordinates, and their observation
 * indices): the observations told with a handle (observe()d points have none) whose value
 * y (as the model sees it) is within `band` of the best such value. */
static size_t told_near_best(const kb_engine *e, const double *y, double band, double *P,
                             size_t *idx)
{
    size_t d = e->space->dim, m = 0;
    double top = -INFINITY;
    for (size_t i = 0; i < e->n_obs; i++)
        if (e->obs_trial[i] && y[i] > top)
            top = y[i];
    for (size_t i = 0; i < e->n_obs; i++)
        if (e->obs_trial[i] && y[i] >= top - band) {
            memcpy(P + m * d, e->obs_u + i * d, d * sizeof *P);
            idx[m++] = i;
        }
    return m;
}

/* Among the told points whose values are within two noise sds of the best one (those the
 * noise cannot rank; noise-free only near-ties), the highest posterior mean. The band:
 * the model alone (every told point a candidate) also lost where values are exact, its
 * smoothing reordering the best points (tuning sets noise-free +0.146 against +0.098 with
 * the band; under noise 0.1 the band gains on the tuning and held-out sets,
 * docs/BENCHMARKS.md, thirty-third session). */
int kb_engine_recommend(kb_engine *e, uint64_t *handle, kb_error *err)
{
    if (!e->fit_on)
        return kb__fail(err, KB_EUNSUPPORTED, "engine",
                        "engine %s does not fit a GP model here", e->ops->name);
    size_t d = e->space->dim, n = e->n_obs;
    double *P = malloc((n ? n : 1) * d * sizeof *P), *mean = malloc((n ? n : 1) * sizeof *mean);
    size_t *idx = malloc((n ? n : 1) * sizeof *idx);
    double *y = standardized_y(e, 0), *r = standardized_y(e, 1);
    int rc = P && mean && idx && y && r ? KB_OK : KB_ENOMEM;
    int by_value = e->n_fits == 0; /* no fit yet: the told values themselves */
    double band = by_value ? INFINITY : 2.0 * sqrt(e->noise);
    size_t m = rc == KB_OK ? told_near_best(e, y, band, P, idx) : 0;
    if (rc == KB_OK && m == 0)
        rc = kb__fail(err, KB_ENOTFOUND, NULL, "no told trial yet");
    if (rc == KB_OK && !by_value) {
        kb_rows rows = {e->obs_u, r, n, e->obs_group, e->n_groups};
        rc = kb__gp_mean(&e->kernel, e->noise, &rows, P, m, mean);
        for (size_t i = 0; rc == KB_OK && i < m; i++)
            mean[i] += kb__prior_mean(e, P + i * d);
        by_value = rc == KB_ENUMERIC; /* a GP that does not factor rates nothing */
        rc = rc == KB_ENUMERIC ? KB_OK : rc;
    }
    for (size_t i = 0; rc == KB_OK && by_value && i < m; i++)
        mean[i] = y[idx[i]];
    if (rc == KB_OK) {
        size_t b = 0;
        for (size_t i = 1; i < m; i++)
            if (mean[i] > mean[b])
                b = i;
        *handle = e->obs_trial[idx[b]];
    }
    free(P);
    free(mean);
    free(idx);
    free(y);
    free(r);
    if (rc == KB_ENOMEM)
        return kb__fail(err, rc, NULL, "out of memory");
    return rc;
}

/* The interior prior mean (kb__hyper_refit says why): finite sets with fitting on,
 * prior_mean "auto" and unit input scaling (the basis is centred on the unit cube). */
static int setup_interior_prior(kb_engine *e, const kb_config *cfg, kb_scaling scaling)
{
    const kb_space *s = e->space;
    if (!e->fit_on || !s->finite || scaling != KB_SCALE_UNIT ||
        strcmp(kb_config_string(cfg, "prior_mean"), "auto") != 0)
        return KB_OK;
    e->prior_basis = malloc(s->n * sizeof *e->prior_basis);
    if (!e->prior_basis)
        return KB_ENOMEM;
    for (size_t i = 0; i < s->n; i++)
        e->prior_basis[i] = kb__interior_basis(&e->kernel, s->u + i * s->dim);
    e->prior_c = KB_INTERIOR_C;
    return KB_OK;
}

size_t kb_engine_max_dim(const char *engine)
{
    const kb_engine_ops *ops = engine ? kb__engine_lookup(engine) : NULL;
    if (!ops)
        return 0;
    return ops->max_dim ? ops->max_dim : KB_MAX_DIM;
}

/* A box's first pool drawn from the seed. The space arrives with one fixed draw (seed 0,
 * kb_space_new_box), and the engines that hand out their initial design from the first
 * pool's rows before redrawing it (every one but bbkb / bkb) gave every study the same
 * initial points whatever its seed, and so, on Hartmann-6, every gp-ucb run the same
 * basin (docs/BENCHMARKS.md, fifty-fourth session). A stream of its own ("kbpool"), so
 * that e->rng's draws, and bbkb's choices, stay as they were. */
static void seeded_first_pool(kb_engine *e)
{
    if (e->space->finite)
        return;
    kb_rng rng;
    kb_rng_seed(&rng, (uint64_t)kb_config_number(e->cfg, "seed") ^ 0x6b62706f6f6cULL);
    kb__space_refresh_pool(e->space, &rng, NULL, 0, NULL, 0);
    e->space->generation = 0;
}

kb_engine *kb_engine_create(const kb_config *cfg, const kb_space *space, kb_error *err)
{
    kb_scaling scaling;
    kb_engine *e = calloc(1, sizeof *e);
    if (!e) {
        kb__fail(err, KB_ENOMEM, NULL, "out of memory");
        return NULL;
    }
    e->ops = kb__engine_lookup(kb_config_engine(cfg));
    if (space->dim > kb_engine_max_dim(e->ops->name)) {
        kb__fail(err, KB_ERANGE, "dim", "%s serves at most %zu dimensions; this space has %zu",
                 e->ops->name, kb_engine_max_dim(e->ops->name), space->dim);
        free(e);
        return NULL;
    }
    e->cfg = kb_config_copy(cfg);
    e->space = kb__space_copy(space);
    e->log = kb__log_new();
    if (!e->cfg || !e->space || !e->log) {
        kb__fail(err, KB_ENOMEM, NULL, "out of memory");
        goto fail;
    }
    kb_scaling_parse(kb_config_string(cfg, "input_scaling"), &scaling);
    if (kb__space_apply_scaling(e->space, scaling, err))
        goto fail;
    if (!space->finite && kb_config_is_set(cfg, "pool_size") &&
        (size_t)kb_config_number(cfg, "pool_size") != space->n) {
        kb__fail(err, KB_EINVAL, "pool_size", "pool_size differs from the box's pool size");
        goto fail;
    }
    e->standardize = strcmp(kb_config_string(cfg, "output_scaling"), "none") != 0;
    const char *rep = kb_config_string(cfg, "repeats");
    e->repeats = strcmp(rep, "allow") == 0 ? 0 : strcmp(rep, "no_pending") == 0 ? 1 : 2;
    /* On a box a neighbour of a point is as informative as the point again, and a repeat
     * of an exactly known point adds nothing (BBKB's batch sum stops growing, so its epoch
     * never closes): unless set, a box pool's points are handed out once. */
    if (!space->finite && !kb_config_is_set(cfg, "repeats"))
        e->repeats = 2;
    e->repeats_auto = space->finite && !kb_config_is_set(cfg, "repeats");
    kb_rng_seed(&e->rng, (uint64_t)kb_config_number(cfg, "seed"));
    seeded_first_pool(e);
    if (kb__config_build_kernel(cfg, space->dim, &e->kernel, err) ||
        kernel_choices(e, err))
        goto fail;
    e->kernel.nomem = &e->nomem;
    if (alloc_candidate_flags(e)) {
        kb__fail(err, KB_ENOMEM, NULL, "out of memory");
        goto fail;
    }
    setup_fitting(e);
    if (e->fit_on)
        categorical_mix(e);
    if (setup_interior_prior(e, cfg, scaling)) {
        kb__fail(err, KB_ENOMEM, NULL, "out of memory");
        goto fail;
    }
    if (e->fit_on && e->ops->ucb && !space->finite && !e->fit_opts.fix_lengthscales) {
        e->fit_ls = malloc(space->dim * sizeof *e->fit_ls);
        if (!e->fit_ls) {
            kb__fail(err, KB_ENOMEM, NULL, "out of memory");
            goto fail;
        }
        memcpy(e->fit_ls, e->kernel.lengthscales, space->dim * sizeof *e->fit_ls);
    }
    /* Warping trades cumulative regret for simple regret (docs/BENCHMARKS.md, session 7):
     * a box study wants the best point found; a finite catalogue is judged by regret. */
    const char *out = kb_config_string(cfg, "output_scaling");
    e->warp = e->fit_on && (strcmp(out, "warp") == 0 ||
                            (strcmp(out, "auto") == 0 && !space->finite));
    if (e->ops->create(e, err))
        goto fail;
    return e;
fail:
    e->ops = NULL; /* impl was not built: skip destroy */
    kb_engine_free(e);
    return NULL;
}

void kb_engine_free(kb_engine *e)
{
    if (!e)
        return;
    if (e->ops && e->ops->destroy)
        e->ops->destroy(e);
    kb_config_free(e->cfg);
    kb_space_free(e->space);
    kb__kernel_release(&e->kernel);
    free(e->trials);
    for (size_t i = 0; i < e->n_chunks; i++) {
        free(e->x_chunks[i]);
        free(e->u_chunks[i]);
    }
    free(e->x_chunks);
    free(e->u_chunks);
    free(e->obs_u);
    free(e->obs_y);
    free(e->obs_trial);
    free(e->obs_group);
    free(e->groups);
    free(e->out_sorted);
    free(e->prior_basis);
    free(e->group_head);
    free(e->cand_pending);
    free(e->cand_told);
    free(e->pool_canon);
    free(e->pool_next);
    free(e->pool_heads);
    kb__log_free(e->log);
    kb__fit_queue_clear(e);
    free(e->fit_ls);
    free(e);
}

const char *kb_engine_name(const kb_engine *e) { return e->ops->name; }
size_t kb_engine_dim(const kb_engine *e) { return e->space->dim; }

/* Whether trial t's candidate index refers to the current candidate set. */
static int trial_in_current_pool(const kb_engine *e, const kb_trial *t)
{
    return t->generation == e->space->generation;
}

/* Records the hand-out of candidate `index`; fills *pt. */
static int hand_out(kb_engine *e, size_t index, kb_point *pt, kb_error *err)
{
    size_t d = e->space->dim;
    if (reserve_trials(e, e->n_trials + 1))
        return kb__fail(err, KB_ENOMEM, NULL, "out of memory");
    e->trials[e->n_trials] = (kb_trial){.index = index,
                                        .generation = e->space->generation,
                                        .state = KB_TRIAL_PENDING, .y = NAN};
    e->n_trials++;
    memcpy(kb__trial_x(e, e->n_trials), e->space->rows + index * d, d * sizeof(double));
    memcpy(kb__trial_u(e, e->n_trials), e->space->u + index * d, d * sizeof(double));
    e->n_pending++;
    e->cand_pending[kb__pool_point(e, index)]++;
    uint64_t h = e->n_trials;
    int rc = e->ops->handed ? e->ops->handed(e, h, err) : KB_OK;
    if (rc) {
        e->n_trials--;
        e->n_pending--;
        e->cand_pending[kb__pool_point(e, index)]--;
        return rc;
    }
    pt->handle = h;
    pt->index = index;
    pt->x = kb__trial_x(e, h);
    return KB_OK;
}

static int nothing_to_hand_out(const kb_engine *e); /* the pool section, below; -1: out of
                                                      * memory */

/* The engine's choice of one point, handed out into *pt unless one->status says why
 * not; the log has room for its event. */
static int ask_point(kb_engine *e, kb_point *pt, kb_ask_result *one, kb_error *err)
{
    size_t index = (size_t)-1;
    *one = (kb_ask_result){0, KB_ASK_OK, 0};
    if (kb__log_reserve(e->log, e->space->dim))
        return kb__fail(err, KB_ENOMEM, NULL, "out of memory");
    int none = nothing_to_hand_out(e);
    if (none < 0)
        return kb__fail(err, KB_ENOMEM, NULL, "out of memory");
    if (none) {
        one->status = KB_ASK_EXHAUSTED;
        return KB_OK;
    }
    int rc = e->ops->ask_one(e, &index, one, err);
    if (e->nomem) { /* this ask's, or an op's since the last ask */
        e->nomem = 0;
        if (!rc)
            return kb__fail(err, KB_ENOMEM, NULL, "out of memory");
    }
    if (rc || one->status != KB_ASK_OK)
        return rc;
    return hand_out(e, index, pt, err);
}

int kb_engine_ask(kb_engine *e, size_t n, kb_point *out, kb_ask_result *res, kb_error *err)
{
    res->n = 0;
    res->status = KB_ASK_OK;
    res->awaiting = 0;
    while (res->n < n) {
        kb_ask_result one;
        int rc = ask_point(e, &out[res->n], &one, err);
        if (rc)
            return rc;
        if (one.status != KB_ASK_OK) {
            res->status = one.status;
            res->awaiting = one.awaiting;
            break;
        }
        kb__log_ask(e->log, out[res->n].x, e->space->dim); /* cannot fail: reserved */
        res->n++;
    }
    return KB_OK;
}

/* The state the caller sees of trial t. */
static kb_trial_state shown_state(const kb_trial *t)
{
    return t->adopted ? t->shown : t->state;
}

/* The pending trial `handle` into *out; the code, filling err, when there is none. */
static int pending_trial(kb_engine *e, uint64_t handle, kb_trial **out, kb_error *err)
{
    if (handle == 0 || handle > e->n_trials)
        return kb__fail(err, KB_ENOTFOUND, "handle", "no point was handed out with handle %llu",
                        (unsigned long long)handle);
    kb_trial *t = &e->trials[handle - 1];
    if (shown_state(t) != KB_TRIAL_PENDING)
        return kb__fail(err, KB_ESTATE, "handle", "point %llu was already %s",
                        (unsigned long long)handle,
                        shown_state(t) == KB_TRIAL_TOLD ? "told" : "abandoned");
    *out = t;
    return KB_OK;
}

/* ----------------------------------------------- distinct observed points */

#define NO_GROUP ((size_t)-1)

/* Hash of a point's coordinates; -0.0 is hashed as 0.0 since they compare equal. */
static size_t coord_hash(const double *u, size_t d, size_t n_heads)
{
    uint64_t h = 0x9e3779b97f4a7c15u;
    for (size_t j = 0; j < d; j++) {
        double v = u[j] == 0.0 ? 0.0 : u[j];
        uint64_t b;
        memcpy(&b, &v, sizeof b);
        h = (h ^ b) * 0xff51afd7ed558ccdu;
        h ^= h >> 32;
    }
    return (size_t)(h & (n_heads - 1));
}

static int same_point(const double *a, const double *b, size_t d)
{
    for (size_t j = 0; j < d; j++)
        if (a[j] != b[j])
            return 0;
    return 1;
}

/* The group of the point u, or NO_GROUP. */
static size_t find_group(const kb_engine *e, const double *u)
{
    size_t d = e->space->dim;
    if (e->n_heads == 0)
        return NO_GROUP;
    size_t g = e->group_head[coord_hash(u, d, e->n_heads)];
    while (g != NO_GROUP && !same_point(e->obs_u + e->groups[g].first * d, u, d))
        g = e->groups[g].next;
    return g;
}

/* Room for one more group: the chains are rebuilt in a table twice as large once the
 * groups would outnumber the heads (amortized O(d) per new group). */
static int reserve_group(kb_engine *e)
{
    size_t need = e->n_groups + 1, d = e->space->dim;
    if (kb__grow((void **)&e->groups, &e->cap_groups, need, sizeof *e->groups) ||
        kb__grow((void **)&e->out_sorted, &e->cap_sorted, need, sizeof *e->out_sorted))
        return KB_ENOMEM;
    if (need <= e->n_heads)
        return KB_OK;
    size_t nh = e->n_heads ? 2 * e->n_heads : 64;
    size_t *heads = malloc(nh * sizeof *heads);
    if (!heads)
        return KB_ENOMEM;
    for (size_t b = 0; b < nh; b++)
        heads[b] = NO_GROUP;
    for (size_t g = 0; g < e->n_groups; g++) {
        size_t b = coord_hash(e->obs_u + e->groups[g].first * d, d, nh);
        e->groups[g].next = heads[b];
        heads[b] = g;
    }
    free(e->group_head);
    e->group_head = heads;
    e->n_heads = nh;
    return KB_OK;
}

/* Adds (add = 1) or takes away (add = 0) group gr's share of the evidence of
 * determinism, kb_engine.n_same3 and n_varied. */
static void determinism_count(kb_engine *e, const struct kb_obs_group *gr, int add)
{
    size_t same3 = !gr->varies && gr->count >= 3, varied = gr->varies != 0;
    e->n_same3 = add ? e->n_same3 + same3 : e->n_same3 - same3;
    e->n_varied = add ? e->n_varied + varied : e->n_varied - varied;
}

/* Adds observation i (already in obs_u / obs_y) to its group; undo with pop_obs. */
static int group_add(kb_engine *e, size_t i)
{
    const double *u = e->obs_u + i * e->space->dim;
    size_t g = find_group(e, u);
    if (g == NO_GROUP) {
        if (reserve_group(e))
            return KB_ENOMEM;
        g = e->n_groups++;
        size_t b = coord_hash(u, e->space->dim, e->n_heads);
        e->groups[g] = (struct kb_obs_group){i, 0, 0.0, e->group_head[b], 0};
        e->group_head[b] = g;
    }
    e->obs_group[i] = g;
    struct kb_obs_group *gr = &e->groups[g];
    determinism_count(e, gr, 0);
    e->undo_varies = gr->varies;
    gr->varies |= e->obs_y[i] != e->obs_y[gr->first];
    double n = (double)++gr->count;
    determinism_count(e, gr, 1);
    e->undo_ymean = gr->ymean;
    gr->ymean += e->obs_y[i] / n - gr->ymean / n;
    e->out_valid = 0;
    return KB_OK;
}

static int push_obs(kb_engine *e, const double *u, double y, uint64_t handle)
{
    if (reserve_obs(e, e->n_obs + 1))
        return KB_ENOMEM;
    size_t d = e->space->dim;
    memcpy(e->obs_u + e->n_obs * d, u, d * sizeof(double));
    e->obs_y[e->n_obs] = y;
    e->obs_trial[e->n_obs] = handle;
    if (group_add(e, e->n_obs))
        return KB_ENOMEM;
    e->n_obs++;
    return KB_OK;
}

/* Undoes the last push_obs. Its group was created by it if it holds it alone, and is
 * then the last group and the head of its chain. */
static void pop_obs(kb_engine *e)
{
    size_t i = e->n_obs - 1, d = e->space->dim;
    size_t g = find_group(e, e->obs_u + i * d);
    struct kb_obs_group *gr = &e->groups[g];
    determinism_count(e, gr, 0);
    if (gr->count == 1) {
        e->group_head[coord_hash(e->obs_u + i * d, d, e->n_heads)] = gr->next;
        e->n_groups--;
    } else {
        gr->count--;
        gr->ymean = e->undo_ymean;
        gr->varies = e->undo_varies;
        determinism_count(e, gr, 1);
    }
    e->n_obs--;
    e->out_valid = 0;
}

static size_t flag_row(const kb_engine *e, const kb_trial *t); /* the pool section */
static void mark_told(kb_engine *e, const double *u);

/* Marks a pending trial done; `told` chooses between tell and abandon. */
static void settle(kb_engine *e, kb_trial *t, int told, int undo)
{
    size_t i = flag_row(e, t);
    if (!undo) {
        t->state = told ? KB_TRIAL_TOLD : KB_TRIAL_ABANDONED;
        e->n_pending--;
        if (i != KB_NO_ROW) {
            e->cand_pending[i]--;
            if (told)
                e->cand_told[i] = 1;
        }
    } else {
        t->state = KB_TRIAL_PENDING;
        e->n_pending++;
        if (i != KB_NO_ROW)
            e->cand_pending[i]++;
    }
}

/* Adds the observation (u internal coordinates, y) from no trial and tells the engine;
 * undone if the engine refuses it. The log has room for the event. */
static int observe_u(kb_engine *e, const double *u, double y, kb_error *err)
{
    if (push_obs(e, u, y, 0))
        return kb__fail(err, KB_ENOMEM, NULL, "out of memory");
    int rc = e->ops->observe ? e->ops->observe(e, err) : KB_OK;
    if (rc)
        pop_obs(e);
    else
        mark_told(e, u);
    return rc;
}

/* The tell of an adopted trial: an observation of its recorded point (kb_trial). */
static int tell_adopted(kb_engine *e, kb_trial *t, uint64_t handle, double y,
                        kb_error *err)
{
    double u[e->space->dim];
    kb__space_to_internal(e->space, kb__trial_x(e, handle), u);
    int rc = observe_u(e, u, y, err);
    if (rc)
        return rc;
    t->shown = KB_TRIAL_TOLD;
    t->y = y;
    e->n_tells++;
    e->n_adopted_pending--;
    if (t->row != KB_NO_ROW) {
        e->cand_pending[t->row]--;
        e->cand_told[t->row] = 1;
    }
    kb__log_tell(e->log, handle, y); /* cannot fail: reserved by the caller */
    return KB_OK;
}

int kb_engine_tell(kb_engine *e, uint64_t handle, double y, kb_error *err)
{
    if (!isfinite(y))
        return kb__fail(err, KB_EINVAL, "value", "the value must be a finite number");
    kb_trial *t;
    int rc = pending_trial(e, handle, &t, err);
    if (rc)
        return rc;
    if (kb__log_reserve(e->log, e->space->dim))
        return kb__fail(err, KB_ENOMEM, NULL, "out of memory");
    if (t->adopted)
        return tell_adopted(e, t, handle, y, err);
    size_t row = flag_row(e, t);
    unsigned char was_told = row != KB_NO_ROW && e->cand_told[row];
    if (push_obs(e, kb__trial_u(e, handle), y, handle))
        return kb__fail(err, KB_ENOMEM, NULL, "out of memory");
    t->y = y;
    settle(e, t, 1, 0);
    e->n_tells++;
    rc = e->ops->tell ? e->ops->tell(e, handle, err) : KB_OK;
    if (rc) {
        pop_obs(e);
        e->n_tells--;
        settle(e, t, 1, 1);
        if (row != KB_NO_ROW)
            e->cand_told[row] = was_told;
        t->y = NAN;
        return rc;
    }
    kb__log_tell(e->log, handle, y); /* cannot fail: reserved above */
    return KB_OK;
}

int kb_engine_abandon(kb_engine *e, uint64_t handle, kb_error *err)
{
    kb_trial *t;
    int rc = pending_trial(e, handle, &t, err);
    if (rc)
        return rc;
    if (kb__log_reserve(e->log, e->space->dim))
        return kb__fail(err, KB_ENOMEM, NULL, "out of memory");
    e->n_abandons++;
    if (t->adopted) { /* the engine forgot it at its adoption */
        t->shown = KB_TRIAL_ABANDONED;
        e->n_adopted_pending--;
        if (t->row != KB_NO_ROW)
            e->cand_pending[t->row]--;
        kb__log_abandon(e->log, handle);
        return KB_OK;
    }
    settle(e, t, 0, 0);
    rc = e->ops->abandon ? e->ops->abandon(e, handle, err) : KB_OK;
    if (rc) {
        e->n_abandons--;
        settle(e, t, 0, 1);
        return rc;
    }
    kb__log_abandon(e->log, handle); /* cannot fail: reserved above */
    return KB_OK;
}

/* Largest scaled coordinate an observation may have. Kernels sum squared differences over
 * up to KB_MAX_DIM coordinates: beyond about 1e154 a square is infinite, inf - inf gives
 * NaN, and BBKB/BKB then failed every later ask of the study with a 500 (the observation
 * being durable, for good). 1e100 keeps every sum finite with room to spare. */
#define MAX_SCALED_COORD 1e100

/* u = x in internal coordinates, or KB_EINVAL / KB_ERANGE (field "x[j]") when x is not
 * a point an engine can model. */
static int internal_point(const kb_engine *e, const double *x, double *u, kb_error *err)
{
    size_t d = e->space->dim;
    for (size_t j = 0; j < d; j++)
        if (!isfinite(x[j])) {
            char field[KB_ERROR_FIELD_MAX];
            snprintf(field, sizeof field, "x[%zu]", j);
            return kb__fail(err, KB_EINVAL, field, "coordinate is not a finite number");
        }
    kb__space_to_internal(e->space, x, u);
    for (size_t j = 0; j < d; j++)
        if (!(fabs(u[j]) <= MAX_SCALED_COORD)) { /* NaN and infinities fail too */
            char field[KB_ERROR_FIELD_MAX];
            snprintf(field, sizeof field, "x[%zu]", j);
            return kb__fail(err, KB_ERANGE, field, "coordinate is too far outside the "
                            "candidates' range to be scaled");
        }
    return KB_OK;
}

int kb_engine_observe(kb_engine *e, const double *x, double y, kb_error *err)
{
    size_t d = e->space->dim;
    double u[d];
    int rc = internal_point(e, x, u, err);
    if (rc)
        return rc;
    if (!isfinite(y))
        return kb__fail(err, KB_EINVAL, "value", "the value must be a finite number");
    if (kb__log_reserve(e->log, d))
        return kb__fail(err, KB_ENOMEM, NULL, "out of memory");
    if ((rc = observe_u(e, u, y, err)))
        return rc;
    e->n_observed++;
    kb__log_observe(e->log, x, d, y); /* cannot fail: reserved above */
    return KB_OK;
}

/* A trial for a recorded point the engine did not hand out (it answered no point):
 * abandoned for the engines from the start, in no pool generation. */
static int bare_trial(kb_engine *e, const double *u, kb_point *pt, kb_error *err)
{
    size_t d = e->space->dim;
    if (reserve_trials(e, e->n_trials + 1))
        return kb__fail(err, KB_ENOMEM, NULL, "out of memory");
    e->trials[e->n_trials] = (kb_trial){.index = 0, .generation = UINT64_MAX,
                                        .state = KB_TRIAL_ABANDONED, .y = NAN};
    uint64_t h = ++e->n_trials;
    memcpy(kb__trial_u(e, h), u, d * sizeof(double));
    *pt = (kb_point){.handle = h, .index = 0, .x = kb__trial_x(e, h)};
    return KB_OK;
}

/* The candidate whose input coordinates are x (finite sets), else KB_NO_ROW. */
static size_t candidate_row(const kb_engine *e, const double *x)
{
    const kb_space *s = e->space;
    for (size_t i = 0; s->finite && i < s->n; i++)
        if (same_point(s->rows + i * s->dim, x, s->dim))
            return i;
    return KB_NO_ROW;
}

/* Makes pt's trial (handed out by the engine when `handed`, else created bare) the
 * adopted trial of the recorded point x, u its internal coordinates (kb_trial). */
static int adopt(kb_engine *e, int handed, const double *x, const double *u, kb_point *pt,
                 kb_error *err)
{
    int rc = handed ? KB_OK : bare_trial(e, u, pt, err);
    if (rc)
        return rc;
    kb_trial *t = &e->trials[pt->handle - 1];
    if (handed) {
        settle(e, t, 0, 0);
        if ((rc = e->ops->abandon ? e->ops->abandon(e, pt->handle, err) : KB_OK))
            return rc;
    }
    memcpy(kb__trial_x(e, pt->handle), x, e->space->dim * sizeof(double));
    t->adopted = 1;
    t->shown = KB_TRIAL_PENDING;
    t->row = candidate_row(e, x); /* pending there for the repeats policy */
    if (t->row != KB_NO_ROW)
        e->cand_pending[t->row]++;
    e->n_adopted++;
    e->n_adopted_pending++;
    return KB_OK;
}

int kb_engine_ask_recorded(kb_engine *e, const double *x, kb_point *pt, kb_error *err)
{
    size_t d = e->space->dim;
    double u[d];
    kb_ask_result one;
    int rc = x ? internal_point(e, x, u, err) : KB_OK;
    if (rc || (rc = ask_point(e, pt, &one, err)))
        return rc;
    int handed = one.status == KB_ASK_OK;
    if (!x && !handed)
        return kb__fail(err, KB_ESTATE, NULL, "the engine handed out no point where the "
                        "history has one");
    int diverged = x && (!handed || !same_point(pt->x, x, d));
    if (diverged && (rc = adopt(e, handed, x, u, pt, err)))
        return rc;
    kb__log_ask(e->log, pt->x, d); /* cannot fail: reserved by ask_point */
    return KB_OK;
}

int kb_engine_trial(const kb_engine *e, uint64_t handle, kb_point *pt, kb_trial_state *state)
{
    if (handle == 0 || handle > e->n_trials)
        return KB_ENOTFOUND;
    pt->handle = handle;
    pt->index = e->trials[handle - 1].index;
    pt->x = kb__trial_x(e, handle);
    *state = shown_state(&e->trials[handle - 1]);
    return KB_OK;
}

int kb_engine_stats(const kb_engine *e, kb_stats *out, kb_error *err)
{
    size_t size = out->size;
    if (size < KB_STATS_SIZE_MIN)
        return kb__fail(err, KB_EINVAL, "size", "kb_stats.size is %zu, at least %zu", size,
                        (size_t)KB_STATS_SIZE_MIN);
    kb_stats st = {.size = size};
    st.asks = e->n_trials;
    st.tells = e->n_tells;
    st.abandons = e->n_abandons;
    st.observed = e->n_observed;
    st.pending = e->n_pending + e->n_adopted_pending;
    st.candidates = e->space->n;
    st.adopted = e->n_adopted;
    st.deterministic = kb__looks_deterministic(e);
    /* The caller's struct may be older (shorter) or newer (longer) than this library's. */
    size_t known = size < sizeof st ? size : sizeof st;
    memcpy(out, &st, known);
    memset((unsigned char *)out + known, 0, size - known);
    return KB_OK;
}

const char *kb_engine_stat_name(const char *engine, size_t i)
{
    const kb_engine_ops *ops = engine ? kb__engine_lookup(engine) : NULL;
    if (!ops || !ops->stats)
        return NULL;
    for (size_t k = 0; ops->stats[k].name; k++)
        if (k == i)
            return ops->stats[k].name;
    return NULL;
}

static double stat_read(const kb_engine *e, const kb__stat *s)
{
    const char *field = (const char *)e->impl + s->offset;
    switch (s->type) {
    case KB__STAT_DOUBLE:
        return *(const double *)field;
    case KB__STAT_INT:
        return *(const int *)field;
    case KB__STAT_ULONG:
        return (double)*(const unsigned long *)field;
    case KB__STAT_ULLONG:
        return (double)*(const unsigned long long *)field;
    }
    return 0.0;
}

int kb_engine_stat(const kb_engine *e, const char *name, double *out, kb_error *err)
{
    *out = 0.0;
    for (const kb__stat *s = e->ops->stats; s && s->name; s++)
        if (name && strcmp(s->name, name) == 0) {
            *out = stat_read(e, s);
            return KB_OK;
        }
    return kb__fail(err, KB_ENOTFOUND, "name", "engine %s has no figure '%s'", e->ops->name,
                    name ? name : "");
}

int kb_engine_posterior(kb_engine *e, const double *X, size_t n, double *mean, double *sd,
                        kb_error *err)
{
    if (!e->ops->posterior)
        return kb__fail(err, KB_EUNSUPPORTED, "engine", "engine %s has no posterior",
                        e->ops->name);
    size_t d = e->space->dim;
    double *U = malloc((n ? n : 1) * d * sizeof *U);
    if (!U)
        return kb__fail(err, KB_ENOMEM, NULL, "out of memory");
    for (size_t i = 0; i < n; i++)
        kb__space_to_internal(e->space, X + i * d, U + i * d);
    int rc = e->ops->posterior(e, U, n, mean, sd, err);
    free(U);
    return rc;
}

/* Whether observation i takes choice l of the categorical coordinate j. */
static int takes_choice(const kb_engine *e, size_t i, size_t j, size_t l)
{
    const kb_space *s = e->space;
    return kb__category(e->obs_u[i * s->dim + j], s->levels[j]) == l;
}

/* Indices of up to `k` best observations, best first (insertion into a short list);
 * with j < dim, only those taking choice l of the categorical coordinate j. */
static size_t best_obs(const kb_engine *e, size_t k, size_t *idx, size_t j, size_t l)
{
    size_t n = 0;
    for (size_t i = 0; i < e->n_obs; i++) {
        size_t p;
        if (j < e->space->dim && !takes_choice(e, i, j, l))
            continue;
        if (n < k)
            p = n++;
        else if (e->obs_y[i] > e->obs_y[idx[k - 1]])
            p = k - 1;
        else
            continue;
        while (p > 0 && e->obs_y[idx[p - 1]] < e->obs_y[i]) {
            idx[p] = idx[p - 1];
            p--;
        }
        idx[p] = i;
    }
    return n;
}

/* Whether the repeats policy in force forbids point u (internal coordinates) for a
 * reason a pool's flags do not know: u is pending (policies no_pending and never) or
 * observed (never). */
static int point_taken(const kb_engine *e, const double *u)
{
    int policy = kb__repeats_policy(e);
    if (policy == 2 && find_group(e, u) != NO_GROUP)
        return 1;
    for (uint64_t h = 1; policy && h <= e->n_trials; h++)
        if (e->trials[h - 1].state == KB_TRIAL_PENDING &&
            same_point(kb__trial_u(e, h), u, e->space->dim))
            return 1;
    return 0;
}

/* The last rows of a new pool: the best observed points moved uphill on the UCB of the
 * fitted GP (acq.c), so that the engine's own rule can choose a point placed more
 * precisely than the pool's spacing. They are ordinary pool points from then on. A
 * refined point that did not move, or that reached a point another one reached (the
 * cube's faces stop them: a corner optimum), is the point of an observation, of a
 * pending trial or of another row; a box's flags tell neither apart from a new point,
 * so gp-ucb handed such a corner out four times in one batch and again once told. Those
 * rows keep the pool's own points. */
static void refine_pool(kb_engine *e, const double *best, size_t nb)
{
    enum { REFINED = 4 };
    kb_space *s = e->space;
    size_t k = nb < REFINED ? nb : REFINED, d = s->dim;
    if (!k || k > s->n)
        return;
    double *y = standardized_y(e, 0);
    if (!y) {
        e->nomem = 1;
        return;
    }
    double *P = s->rows + (s->n - k) * d, *Q = s->u + (s->n - k) * d;
    memcpy(P, best, k * d * sizeof *P);
    if (kb__acq_refine(&e->kernel, e->noise, e->obs_u, y, e->n_obs, KB_WIDTH_UCB, P, k) ==
        KB_ENOMEM)
        e->nomem = 1;
    kb__space_snap(s, P, k);
    for (size_t i = 0; i < k; i++) { /* Q, the internal copy, holds the pool's own points */
        int twin = point_taken(e, P + i * d);
        for (size_t j = 0; j < i && !twin; j++)
            twin = same_point(Q + j * d, P + i * d, d);
        if (twin)
            memcpy(P + i * d, Q + i * d, d * sizeof *P);
        else
            memcpy(Q + i * d, P + i * d, d * sizeof *P);
    }
    free(y);
}

/* Choice floors (option choice_floor: 2 by default in bbkb, bkb and gp-ucb, 0 in gp-bucb,
 * gp-ts and sgp-ts; see KB__CHOICE_FLOOR_OPTION). Why: the kernel's
 * lengthscales are shared by every choice, so where the best continuous values depend on
 * the choice, a choice tried a few times away from its own optimum looks worse than it is
 * everywhere, and neither the UCB nor a wider width sends trials there (svm_mixed's rbf
 * kernel, which needs the right gamma, against linear, good for any; choice_trap).
 *
 * Rule: on a box, once the initial design is told, a choice l of a categorical coordinate
 * with c choices that t observations took fewer than
 *     floor(t) = min(choice_floor x 2 sqrt(t ln c / ((e - 1) c)),  t / (2 c))
 * times is given the next epoch's whole pool: every pool point takes choice l, and the
 * local half is centered on the best observations that took it; the most starved choice
 * goes first. The first term is the number of uniform draws EXP3 makes of each arm in t
 * rounds (exploration rate gamma_s = sqrt(c ln c / ((e - 1) s)), Auer, Cesa-Bianchi, Freund
 * & Schapire, "The nonstochastic multiarmed bandit problem", SIAM J. Comput. 32(1), 2002,
 * Corollary 3.2; CoCaBO, Ru et al., ICML 2020, chooses categorical values by EXP3); the
 * second keeps a categorical's floors to half the trials. 2 was set on choice_trap and the
 * mixed tuning functions and judged on the seven held-out mixed spaces (docs/BENCHMARKS.md,
 * thirty-ninth session for bbkb, fortieth for the others). bbkb's pool lasts one epoch;
 * the other engines' pools last many asks, so they redraw the pool whenever
 * kb__starved_choice changes (kb__pool_rules): a floor holds its pool until it is met.
 *
 * No floor for a categorical the noise hides (hidden_dim; the UCB engines' drop_hidden_dims
 * leaves it out of the model, the Thompson engines keep it, so it is asked here): there a
 * choice does not look worse than it is, and floors only took trials from the search
 * (Mixed, 8 x 125: +0.52 in mean log10 simple regret on 30 seeds, where its choices' costs
 * are half a noise sd; gp-ts at 4 x 50 +0.56 without this test, +0.02 with it). None
 * either above FLOOR_MAX_CHOICES (4) choices: the floors of c choices take up to
 * (c - 1) / 2c of the trials, and with 20 choices they took half of a 200-trial run
 * (noise-free, +1.23 on 20 seeds); every categorical the rule was judged on had 2-4.
 *
 * A function of the observations, so replay gives the same pools; pending points are not
 * counted, so a floor may be overshot by one epoch's points. Returns the starved choice's
 * key (kb__starved_choice: 0 for none) and sets *fj, *fl to its coordinate and choice. */
enum { FLOOR_MAX_CHOICES = 4 };
static size_t starved_choice(const kb_engine *e, double choice_floor, size_t *fj, size_t *fl)
{
    const kb_space *s = e->space;
    if (!(choice_floor > 0.0) || !s->categorical || e->n_obs < e->design_n || e->n_obs < 2)
        return 0;
    double t = (double)e->n_obs, worst = 0.0;
    size_t key = 0;
    for (size_t j = 0; j < s->dim; j++) {
        if (!s->categorical[j] || s->levels[j] > FLOOR_MAX_CHOICES ||
            e->kernel.lengthscales[j] >= KB_OFF_LENGTHSCALE || (e->fit_on && hidden_dim(e, j)))
            continue;
        size_t taken[FLOOR_MAX_CHOICES] = {0};
        for (size_t i = 0; i < e->n_obs; i++)
            taken[kb__category(e->obs_u[i * s->dim + j], s->levels[j])]++;
        double c = (double)s->levels[j];
        double floor_t = fmin(choice_floor * 2.0 * sqrt(t * log(c) / ((M_E - 1.0) * c)),
                              t / (2.0 * c));
        for (size_t l = 0; l < s->levels[j]; l++) {
            if (floor_t - (double)taken[l] > worst) {
                worst = floor_t - (double)taken[l];
                *fj = j;
                *fl = l;
                key = 1 + j * FLOOR_MAX_CHOICES + l;
            }
        }
    }
    return key;
}

size_t kb__starved_choice(const kb_engine *e, double choice_floor)
{
    size_t j, l;
    return e->space->finite ? 0 : starved_choice(e, choice_floor, &j, &l);
}

int kb__pool_rules_due(const kb_engine *e, const kb__pool_rules *r)
{
    return kb__starved_choice(e, r->choice_floor) != r->key;
}

/* Climbs (option climb_after: 100 by default in bbkb and bkb, absent elsewhere). Why: on
 * a function with several basins a run commits to the basin that first yields a good
 * value (Hartmann-6: decided by trial ~25, docs/BENCHMARKS.md, thirty-sixth session), and
 * once that basin is resolved the UCB sends no trial to a lower-valued point of another
 * basin: the mean there is below the incumbent and the variance next to an observed point
 * is small. A run that lost the race polishes the wrong basin to the end (Hartmann-6 in
 * 20 dimensions, 1,000 trials: 9 of 20 runs at regret 0.12 for their last ~800 trials),
 * though most of them have evaluated a point of the taller basin by then. TuRBO restarts
 * a trust region that has collapsed (Eriksson et al. 2019, sec. 2); here the data stay
 * and a second climb runs beside the first.
 *
 * Rule: on a box with a noise-free fit (noise variance at most CLIMB_NOISE of the
 * standardized outputs'), once the best observation improved by at most 1e-3 x
 * min(|best|, best - median observation) over the last climb_after observations (and at
 * least 2 climb_after are in), every other pool is a climb pool: all of its points are
 * local (no quasi-random half), around the second peak of the observations: the best
 * observation farther than CLIMB_RADIUS lengthscales from every better one, if it is
 * better than the worst quarter of them. If that climb passes the incumbent, the best
 * improves and the run goes on from there; once it has run its course (climb_after / 2
 * observations since the stall began lie within CLIMB_RADIUS of the peak, and the best
 * of those within it has not improved by the stall's scale in climb_after
 * observations), the pools are the usual ones until the best improves again. The
 * scale: the median alone is set by a heavy tail of bad values (Colville-4: median -7,241
 * against a best of -4), which called a valley still being descended stalled (+0.69 in
 * mean log10 simple regret on 5 seeds); |best|, as TuRBO's own success test (1e-3
 * |f_best|), is not translation-invariant, hence the smaller of the two. The peak, after
 * Rinnooy Kan & Timmer, "Stochastic global optimization methods", Math. Programming 39,
 * 1987: part II's Multi-Level Single Linkage starts a local search only from a sample
 * point with no better one within a critical distance, and part I's clustering methods
 * keep a reduced sample of the best points (here: all but the worst quarter). The first
 * rule climbed from the best observation beyond CLIMB_RADIUS of the best one alone: in a
 * long valley, a point on the incumbent's own slope (Dixon-Price-6: 2.0 lengthscales
 * away, at -88,000 against a best of -20), so valleys paid for climbs that could only
 * lead back (Dixon-Price-6 ~2x in median simple regret; docs/BENCHMARKS.md, forty-first
 * and forty-second sessions); without the worst-quarter cut an isolated bad point is a
 * peak too, and Colville-4's climbs spiralled through ever worse ones. Without the end of
 * a spent climb, a lone peak far from a unimodal function's optimum took every other
 * pool to the end (the noise-free load benchmark: ~3x slower, its dictionary at the
 * model window on every run; forty-second session). Noise gate: under noise the best
 * observed value stalls early (a lucky draw), and climbs then took trials from the search
 * (Branin at noise 0.1, 8 x 125: +0.44 on 5 seeds). A function of the observations and
 * the pool count, so replay gives the same pools. */
enum { CLIMB_RADIUS = 2 };
#define CLIMB_NOISE 1e-4

/* An observation's value and index, for a best-first order. */
typedef struct ranked_obs {
    double y;
    size_t i;
} ranked_obs;

static int cmp_ranked_best_first(const void *a, const void *b)
{
    const ranked_obs *p = a, *q = b;
    if (p->y != q->y)
        return p->y < q->y ? 1 : -1;
    return (p->i > q->i) - (p->i < q->i); /* ties: the earlier first, as recent_gain */
}

/* The observations, best first (caller frees), or NULL when out of memory. */
static ranked_obs *ranked_new(const kb_engine *e)
{
    ranked_obs *r = malloc(e->n_obs * sizeof *r);
    for (size_t i = 0; r && i < e->n_obs; i++)
        r[i] = (ranked_obs){e->obs_y[i], i};
    if (r)
        qsort(r, e->n_obs, sizeof *r, cmp_ranked_best_first);
    return r;
}

/* The best observation's index, and in *gain how much it improved on the best before the
 * last `last` observations. */
static size_t recent_gain(const kb_engine *e, size_t last, double *gain)
{
    size_t n = e->n_obs, top = 0, early = 0;
    for (size_t i = 0; i < n; i++) {
        if (e->obs_y[i] > e->obs_y[top])
            top = i;
        if (i < n - last && e->obs_y[i] > e->obs_y[early])
            early = i;
    }
    *gain = e->obs_y[top] - e->obs_y[early];
    return top;
}

/* Squared distance of observations a and b in lengthscales, as the kernel's r^2 (a
 * categorical coordinate counts 0 or 1, its choices unordered: kb__coord_d2). */
static double scaled_dist2(const kb_engine *e, size_t a, size_t b)
{
    size_t d = e->space->dim;
    double r2 = 0.0;
    for (size_t j = 0; j < d; j++) {
        double l = e->kernel.lengthscales[j];
        r2 += kb__coord_d2(e->kernel.choices, j, e->obs_u[a * d + j], e->obs_u[b * d + j]) /
              (l * l);
    }
    return r2;
}

/* The first peak in the best-first order r after the best: an observation farther than
 * CLIMB_RADIUS from every better one (the best included), and better than the worst
 * quarter of the observations; n_obs if there is none. */
static size_t second_peak(const kb_engine *e, const ranked_obs *r)
{
    size_t n = e->n_obs;
    double low = r[n - 1 - n / 4].y;
    for (size_t k = 1; k < n && r[k].y > low; k++) {
        size_t b = k; /* from the nearest in value: in a basin or a valley, a neighbour */
        while (b > 0 && scaled_dist2(e, r[b - 1].i, r[k].i) > CLIMB_RADIUS * CLIMB_RADIUS)
            b--;
        if (b == 0)
            return r[k].i;
    }
    return n;
}

/* Whether the climb from peak c has run its course: at least climb_after / 2 of the
 * observations since `since` lie within CLIMB_RADIUS of c, and the best of all those
 * within it last improved by more than thr climb_after or more observations ago. */
static int climb_spent(const kb_engine *e, size_t c, size_t since, double thr,
                       size_t climb_after)
{
    size_t n = e->n_obs, inside = 0, last = 0;
    double best = -INFINITY;
    for (size_t i = 0; i < n; i++) {
        if (scaled_dist2(e, i, c) > CLIMB_RADIUS * CLIMB_RADIUS)
            continue;
        inside += i >= since;
        if (e->obs_y[i] > best + thr)
            last = i;
        best = fmax(best, e->obs_y[i]);
    }
    return inside >= climb_after / 2 && n - last >= climb_after;
}

/* The first observation whose running best came within thr of the best one's value: where
 * the stall began. */
static size_t stall_start(const kb_engine *e, size_t top, double thr)
{
    double run = -INFINITY;
    for (size_t i = 0; i < e->n_obs; i++) {
        run = fmax(run, e->obs_y[i]);
        if (run >= e->obs_y[top] - thr)
            return i;
    }
    return top;
}

/* The observation the next pool climbs from under the rule above, or n_obs for none.
 * The median (a sort) is needed only once the |best| test has passed. */
static size_t climb_center(kb_engine *e, size_t climb_after)
{
    size_t n = e->n_obs;
    if (!climb_after || n < 2 * climb_after || e->noise > CLIMB_NOISE ||
        e->space->generation % 2 != 1)
        return n;
    double gain;
    size_t top = recent_gain(e, climb_after, &gain);
    if (gain > 1e-3 * fabs(e->obs_y[top]))
        return n;
    ranked_obs *r = ranked_new(e);
    if (!r) {
        e->nomem = 1; /* not "no climb": the replay would draw another pool */
        return n;
    }
    double thr = 1e-3 * fmin(fabs(e->obs_y[top]), e->obs_y[top] - r[n / 2].y);
    size_t c = gain > thr ? n : second_peak(e, r);
    free(r);
    if (c < n && climb_spent(e, c, stall_start(e, top, thr), thr, climb_after))
        return n;
    return c;
}

void kb__refresh_pool(kb_engine *e, int refine, kb__pool_rules *r)
{
    if (e->space->finite)
        return;
    enum { NBEST = 8 };
    kb_space *s = e->space;
    size_t idx[NBEST], d = s->dim, fj = d, fl = 0;
    size_t starved = r ? starved_choice(e, r->choice_floor, &fj, &fl) : 0;
    size_t climb = starved || !r ? e->n_obs : climb_center(e, r->climb_after);
    int climbing = climb < e->n_obs;
    size_t nb = climbing ? 1 : best_obs(e, NBEST, idx, fj, fl);
    if (climbing)
        idx[0] = climb;
    double best[NBEST * d > 0 ? NBEST * d : 1];
    for (size_t i = 0; i < nb; i++)
        memcpy(best + i * d, e->obs_u + idx[i] * d, d * sizeof(double));
    if (r) {
        r->key = starved;
        r->floor_pools += starved != 0;
        r->climb_pools += climbing;
    }
    kb__space_refresh_pool(s, &e->rng, nb ? best : NULL, nb, e->kernel.lengthscales,
                           climbing);
    for (size_t i = 0; starved && i < s->n; i++)
        s->rows[i * d + fj] = s->u[i * d + fj] = ((double)fl + 0.5) / (double)s->levels[fj];
    if (e->fit_on && refine && nb)
        refine_pool(e, best, nb); /* from the starved choice's points: keeps the choice */
    kb__pool_reset_flags(e);
}

/* The pool row of internal point u among those chained so far, or NO_GROUP. */
static size_t pool_row_of(const kb_engine *e, const double *u)
{
    const kb_space *s = e->space;
    size_t b = coord_hash(u, s->dim, e->n_pool_heads);
    for (size_t j = e->pool_heads[b]; j != NO_GROUP; j = e->pool_next[j])
        if (same_point(s->u + j * s->dim, u, s->dim))
            return j;
    return NO_GROUP;
}

/* The first pool row with row i's internal coordinates; chains row i when that is i. */
static size_t pool_first_row(kb_engine *e, size_t i)
{
    const kb_space *s = e->space;
    const double *u = s->u + i * s->dim;
    size_t j = pool_row_of(e, u);
    if (j != NO_GROUP)
        return j;
    size_t b = coord_hash(u, s->dim, e->n_pool_heads);
    e->pool_next[i] = e->pool_heads[b];
    e->pool_heads[b] = i;
    return i;
}

/* The row whose flags count pending trial t, or KB_NO_ROW: its own (its point's) row
 * while its pool is current; on a discrete box after a redraw, the row of its point in
 * the new pool, where kb__pool_reset_flags counted it (it stayed pending, and blocked
 * its point, until the next redraw once told or abandoned). */
static size_t flag_row(const kb_engine *e, const kb_trial *t)
{
    if (trial_in_current_pool(e, t))
        return kb__pool_point(e, t->index);
    if (!e->pool_canon)
        return KB_NO_ROW;
    size_t r = pool_row_of(e, kb__trial_u(e, (uint64_t)(t - e->trials) + 1));
    return r == NO_GROUP ? KB_NO_ROW : r;
}

/* An observation at u (an observe, or the tell of an adopted trial) marks u's row of a
 * discrete box's pool told, as the next redraw would (kb__pool_reset_flags): under
 * `never` an observed point is not handed out, whatever the pool's age. */
static void mark_told(kb_engine *e, const double *u)
{
    size_t r = e->pool_canon ? pool_row_of(e, u) : NO_GROUP;
    if (r != NO_GROUP)
        e->cand_told[r] = 1;
}

/* Point u's index in a discrete box's grid of `points` (mixed radix over the levels),
 * or `points` when u is not on the grid (an observation the caller placed elsewhere). */
static size_t grid_index(const kb_space *s, const double *u, size_t points)
{
    size_t at = 0;
    for (size_t j = 0; j < s->dim; j++) {
        size_t l = kb__space_level(s, j, u[j]);
        if (u[j] != kb__space_level_pos(s, j, l))
            return points;
        at = at * s->levels[j] + l;
    }
    return at;
}

/* A discrete box's grid as points + 1 flags (owned), set for the points the repeats
 * policy excludes, pending or (policy 2) told, as kb__pool_reset_flags judges them;
 * the last flag stands for every point off the grid. NULL when the grid holds more
 * than `limit` points (*points = 0) or memory ran out (*points > 0). */
static unsigned char *grid_excluded(const kb_engine *e, int policy, size_t limit,
                                    size_t *points)
{
    const kb_space *s = e->space;
    size_t d = s->dim;
    *points = 1;
    for (size_t j = 0; j < d; j++) {
        if (s->levels[j] > limit / *points) {
            *points = 0;
            return NULL;
        }
        *points *= s->levels[j];
    }
    unsigned char *seen = calloc(*points + 1, 1);
    for (size_t g = 0; seen && policy == 2 && g < e->n_groups; g++)
        seen[grid_index(s, e->obs_u + e->groups[g].first * d, *points)] = 1;
    for (uint64_t h = 1; seen && h <= e->n_trials; h++)
        if (e->trials[h - 1].state == KB_TRIAL_PENDING)
            seen[grid_index(s, kb__trial_u(e, h), *points)] = 1;
    return seen;
}

/* Whether every point of a discrete box is excluded, when at most `could` points can be
 * (nothing_to_hand_out): a larger grid has room, O(d); O(points + trials) otherwise. */
static int grid_spent(const kb_engine *e, int policy, size_t could)
{
    size_t points, left;
    unsigned char *seen = grid_excluded(e, policy, could, &points);
    if (!seen) /* out of memory: not "not spent", the engine's search would go on */
        return points ? -1 : 0;
    for (left = 0; left < points && seen[left]; left++)
        ;
    free(seen);
    return left == points;
}

/* A discrete box's pool whose every row is excluded while the grid has room (a pool
 * smaller than the grid, drawn near its end or refined onto told points: engines
 * answered "exhausted" with points left, after changing their pool and RNG) gets the
 * points left, evenly spaced in grid order when more than the pool holds. Grids of up
 * to GRID_FILL_MAX points, or trials + observations + pool when more: beyond, more than
 * GRID_FILL_MAX - trials - observations points are left, and a draw's quasi-random half
 * misses all of them only by chance. Returns whether rows were replaced. */
#define GRID_FILL_MAX ((size_t)1 << 20)
static int pool_from_grid(kb_engine *e)
{
    kb_space *s = e->space;
    for (size_t i = 0; i < s->n; i++)
        if (!kb__excluded(e, i))
            return 0;
    size_t points, left = 0, d = s->dim; /* every row excluded: the policy is not allow */
    size_t limit = e->n_trials + e->n_observed + s->n;
    unsigned char *seen = grid_excluded(e, kb__repeats_policy(e),
                                        limit > GRID_FILL_MAX ? limit : GRID_FILL_MAX, &points);
    if (!seen && points) /* out of memory: a pool left spent is not what a replay has */
        e->nomem = 1;
    for (size_t g = 0; seen && g < points; g++)
        left += !seen[g];
    size_t rows = left < s->n ? left : s->n, row = 0;
    for (size_t g = 0, k = 0; row < rows; g++) {
        if (seen[g] || k++ != row * left / rows) /* the row-th of `rows` spaced picks */
            continue;
        for (size_t j = d, at = g; j-- > 0; at /= s->levels[j])
            s->rows[row * d + j] = kb__space_level_pos(s, j, at % s->levels[j]);
        memcpy(s->u + row * d, s->rows + row * d, d * sizeof(double));
        row++;
    }
    free(seen);
    return rows > 0;
}

void kb__pool_reset_flags(kb_engine *e)
{
    const kb_space *s = e->space;
    memset(e->cand_pending, 0, s->n * sizeof *e->cand_pending);
    memset(e->cand_told, 0, s->n * sizeof *e->cand_told);
    if (!e->pool_canon)
        return;
    for (size_t b = 0; b < e->n_pool_heads; b++)
        e->pool_heads[b] = NO_GROUP;
    for (size_t i = 0; i < s->n; i++) {
        size_t c = e->pool_canon[i] = pool_first_row(e, i);
        e->cand_told[c] |= find_group(e, s->u + i * s->dim) != NO_GROUP;
    }
    for (uint64_t h = 1; h <= e->n_trials; h++) {
        size_t r = e->trials[h - 1].state == KB_TRIAL_PENDING
                       ? pool_row_of(e, kb__trial_u(e, h)) : NO_GROUP;
        if (r != NO_GROUP)
            e->cand_pending[r]++;
    }
    if (pool_from_grid(e)) /* leaves a row allowed: this recursion ends */
        kb__pool_reset_flags(e);
}

/* Whether the repeats policy excludes every point of the space, so that an ask can
 * only answer KB_ASK_EXHAUSTED. Asked before ops->ask_one, which would otherwise draw
 * from the RNG or redraw a pool on its way to finding nothing (random, gp-ts and sgp-ts
 * did): an answer without a choice is not in the event log, so a restored engine parted
 * from the original once pending points came back (docs/BENCHMARKS.md, forty-eighth
 * session). Every excluded candidate is the row of a trial or, on a box, an observed
 * point, which bounds the exact test to studies at least as long as the space. */
static int nothing_to_hand_out(const kb_engine *e)
{
    int policy = kb__repeats_policy(e);
    const kb_space *s = e->space;
    /* how many points the policy can exclude: pending ones (adopted trials hold their
     * candidate row), and under never every trial's and observation's */
    size_t could = policy == 2 ? e->n_trials + e->n_observed
                               : e->n_pending + e->n_adopted_pending;
    if (policy == 0)
        return 0;
    if (e->pool_canon)
        return grid_spent(e, policy, could);
    if (!s->finite || s->n > could)
        return 0;
    for (size_t i = 0; i < s->n; i++)
        if (!kb__excluded(e, i))
            return 0;
    return 1;
}
