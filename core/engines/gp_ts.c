/*
 * gp_ts.c - GP-TS, exact Gaussian-process Thompson sampling: seed 003 (Chowdhury and
 * Gopalan, "On kernelized multi-armed bandits", ICML 2017), section 3.2, Algorithm 2.
 *
 * Each ask samples f_t ~ GP(mu_{t-1}, v_t^2 k_{t-1}) jointly on a decision set D_t and
 * hands out argmax_{D_t} f_t, with the posterior of eq. 2-3 (noise variance lambda) and
 *   v_t = v_scale * (B + R / sqrt(lambda) * sqrt(2 (gamma_{t-1} + 1 + ln(2 / delta)))).
 * gamma_{t-1}, the maximum information gain, has no closed form; we use the information
 * gain of the points actually observed, 1/2 log det(I + K / lambda) (read off the
 * Cholesky diagonal), a lower bound on it and the quantity the regret proofs bound
 * (sum of posterior variances). Seed 003 states v_t for lambda = 1 + eta ~ 1; for a
 * general lambda we use R / sqrt(lambda) (kb__ts_gp_scale), as seed 001 Lemma 1 does.
 * v_scale is a practical multiplier; its default 1 keeps the theory, which on the
 * Abalone protocol (B = 1, R = 0.1, lambda = 0.01, delta = 0.1) gives a regret ratio of
 * ~ 0.11-0.12 (v_scale = 0.5: 0.11), and v_scale = 0.3 0.16 (it stalled at 0.58, a
 * local maximum, while outputs were standardized per evaluation). On short horizons with
 * a rough kernel the theory explores a lot (rkhs problem, lengthscale 0.2, T = 200:
 * 0.59-0.69 against 0.22-0.26 at v_scale = 0.3): lower v_scale there. B = 1, R = 0, v_scale = 1 gives v_t = 1, the
 * plain posterior sample.
 *
 * Decision set. When at most `subset_size` (N) candidates are allowed, D_t is all of
 * them. Otherwise D_t is a screened random subset: the ceil(N / 2) candidates with the
 * largest mu + 2 v_t sigma (where the sample is most likely to be largest: each f_t(x)
 * exceeds that value with probability 2.3%) plus floor(N / 2) drawn uniformly from the
 * rest. The paper lets D_t be any subset (Algorithm 2, footnote 7); a purely uniform
 * subset would seldom contain the incumbent on a large catalogue, so exploitation
 * would stall. The default N = 256 keeps the ask at O(n N^2) ~ 1.3e8 flops at n = 2000
 * (N = 1000 costs 16 times more per ask). The joint sample is mu_D + v_t C xi,
 * xi ~ N(0, I), with C the lower Cholesky factor of the posterior covariance on D_t
 * (kb__chol_factor: a jitter of 1e-10 .. 1e-2 times the mean diagonal is added only when
 * the factorization fails, see core/src/chol.c; if S is not finite, e.g. candidates
 * whose scaled coordinates overflowed, each point is drawn from its marginal instead).
 *
 * Model and costs (A candidates, n observations in the model, N = |D_t|):
 *   L: lower Cholesky of K + lambda I, grown by one row per observation at its tell,
 *     O(n^2), and beta = L^{-1} y with it, so the posterior is exact between asks;
 *   W = L^{-1} K_{X,A} (n x A), grown at the next ask by the rows told since, O(n A)
 *     each, in one block, from which the posterior mean and variance at every candidate
 *     are kept up to date;
 *   ask: screening O(A log A), posterior covariance on D_t by dsyrk O(n N^2), its
 *     Cholesky O(N^3), the sample O(N^2).
 * Memory is O(n A) for W: this is the exact reference engine; sgp-ts is the scalable
 * one. W is capped at KB_MAX_POINTS values (n A <= 2^26: 16000 observations on a
 * 4000-row catalogue); the tell that would pass the cap fails with KB_ERANGE.
 * The model is refreshed on tells (and observes): after every `refresh_every`-th
 * new observation (default 1: every tell, O(n^2 + n A) each), the lagging observations
 * being appended in order (an observe only records, the next op taking a run of them at
 * once: in blocks from KB_BLOCK_ROWS_MIN rows on, chol.c); output standardization (kb__output_stats, over distinct
 * points, so that repeated arms do not shrink the output scale) is recomputed at each
 * refresh. What a refresh makes due waits for the next ask (catch_up), so that a batch
 * of tells pays for it once: the hyperparameter refit (kb__hyper_due), after which L and
 * W are rebuilt from row 0, and, on a box, the pool's redraw (kb__refresh_pool) after
 * `pool_refresh` tells since the last one, or when a choice floor starts or stops
 * applying (engine.c, starved_choice: a floor holds the pool until it is met), W then
 * rebuilt in O(n^2 A). Until that ask the posterior is the exact one under the kernel
 * in use.
 *
 * Asynchrony: every ask draws a fresh sample, so concurrent asks already differ;
 * pending points are not hallucinated (the randomization of TS is what diversifies a
 * batch). Randomness comes only from e->rng, ask picks one point, so snapshot/restore
 * by replay is exact. ops->posterior is the model's exact posterior (the convention
 * of docs/ARCHITECTURE.md, Engine contract), pending points not hallucinated.
 */
#include "ts.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static const kb_option_spec gp_ts_options[] = {
    {"lambda", KB_OPT_NUMBER, 0, INFINITY, 1, 0.01, NULL, NULL,
     "noise variance of the GP model (regularization), in standardized output units; "
     "not set, fitted (hyperparameters = fit)"},
    {"B", KB_OPT_NUMBER, 0, INFINITY, 0, 1.0, NULL, NULL,
     "bound on the RKHS norm of the objective (v_t, seed 003 Algorithm 2)"},
    {"R", KB_OPT_NUMBER, 0, INFINITY, 0, 0.1, NULL, NULL,
     "sub-Gaussian constant of the noise (v_t)"},
    {"delta", KB_OPT_NUMBER, 0, 1, 1, 0.1, NULL, NULL, "confidence parameter (v_t)"},
    {"v_scale", KB_OPT_NUMBER, 0, INFINITY, 1, 1.0, NULL, NULL,
     "practical multiplier of v_t (1 = theory)"},
    {"subset_size", KB_OPT_INTEGER, 1, 8192, 0, 256, NULL, NULL,
     "size N of the decision set D_t (whole set when at most N candidates are allowed)"},
    {"refresh_every", KB_OPT_INTEGER, 1, 1e9, 0, 1, NULL, NULL,
     "refresh the model after this many new observations"},
    {"pool_refresh", KB_OPT_INTEGER, 1, 1e9, 0, 64, NULL, NULL,
     "box spaces: redraw the candidate pool at the first ask after this many tells"},
    KB__CHOICE_FLOOR_OPTION(0.0),
    {NULL, 0, 0, 0, 0, 0, NULL, NULL, NULL},
};

typedef struct gp_ts {
    double lambda, B, R, delta, v_scale;
    size_t subset_size, refresh_every, pool_refresh;
    size_t cap;     /* capacity of L, W, beta and row */
    kb_chol L;      /* K + lambda I over the L.n observations in the model (row-major) */
    double *W;      /* cap x A, row i of L^{-1} K_{X,A} */
    double *row;    /* cap: the row being appended */
    double *beta;   /* cap: L^{-1} y_std */
    size_t beta_n;     /* rows of L beta was solved over (SIZE_MAX: none, L refactored) */
    uint64_t beta_gen; /* e->out_gen the y_std of beta were scaled under */
    double *mu, *var; /* A: posterior mean and variance at every candidate */
    double log_det; /* sum log L_ii */
    size_t since_pool;
    size_t n_w;      /* rows of W (and of var's sum) computed: <= L.n (extend_w) */
    size_t n_synced; /* observations the last refresh took (sync_rows) */
    int due;         /* a refresh since the last ask: catch_up has work to check */
    size_t observed; /* n_obs at the last observe not yet synced, else 0: sync_observes */
    kb__pool_rules pool; /* choice floors (engine.c) */
    uint64_t refreshes;
    double sec_embed, sec_refresh, sec_ask;
    /* ask scratch */
    size_t *order; double *score;
} gp_ts;

/* ------------------------------------------------------------------ model */

static int reserve(gp_ts *st, size_t A, size_t need)
{
    if (need <= st->cap)
        return KB_OK;
    size_t nc = st->cap ? st->cap : 64;
    while (nc < need)
        nc *= 2;
    double *W = realloc(st->W, nc * A * sizeof *W);
    if (W)
        st->W = W;
    double *beta = W ? realloc(st->beta, nc * sizeof *beta) : NULL;
    if (beta)
        st->beta = beta;
    double *row = beta ? realloc(st->row, nc * sizeof *row) : NULL;
    if (row)
        st->row = row;
    if (!row || kb__chol_reserve(&st->L, nc))
        return KB_ENOMEM;
    st->cap = nc;
    return KB_OK;
}

/* Appends observation x (internal coordinates) to L and log_det; W and var follow at
 * the next ask (extend_w). Capacity reserved; KB_ENUMERIC (chol.c's jitter rule
 * exhausted) leaves the model as it was. */
static int append(kb_engine *e, gp_ts *st, const double *x)
{
    size_t n = st->L.n;
    double *l = st->row;
    kb_kernel_matrix(&e->kernel, e->obs_u, n, x, 1, l);
    if (kb__chol_append(&st->L, l, kb_kernel_eval(&e->kernel, x, x) + st->lambda, NULL))
        return KB_ENUMERIC;
    st->log_det += log(kb__chol_pivot(&st->L, n));
    return KB_OK;
}

/* var -= the squares of W's rows from..to-1, column by column. */
static void subtract_rows(gp_ts *st, size_t A, size_t from, size_t to)
{
    for (size_t i = from; i < to; i++)
        for (size_t j = 0; j < A; j++)
            st->var[j] -= st->W[i * A + j] * st->W[i * A + j];
}

/* W's rows and var for the factor's rows appended since W was last brought up to date,
 * as one block (a kernel matrix, a dgemm and a dtrsm: kb__chol_trsm_tail), where each
 * appended row used to make its own matrix-vector products over the pool at its tell
 * (6.7 s of a batch of 1,000 tells at d = 1,000; docs/BENCHMARKS.md, forty-ninth
 * session). */
static void extend_w(kb_engine *e, gp_ts *st)
{
    size_t A = e->space->n, from = st->n_w, n = st->L.n;
    if (from >= n)
        return;
    double t0 = kb__now();
    kb_kernel_matrix(&e->kernel, e->obs_u + from * e->space->dim, n - from, e->space->u, A,
                     st->W + from * A);
    kb__chol_trsm_tail(&st->L, from, st->W, A, A);
    subtract_rows(st, A, from, n);
    st->n_w = n;
    st->sec_embed += kb__now() - t0;
}

/* W, var from scratch for the current candidate set (after a pool redraw). */
static void rebuild_candidates(kb_engine *e, gp_ts *st)
{
    double t0 = kb__now();
    size_t A = e->space->n, n = st->L.n;
    kb_kernel_diag(&e->kernel, e->space->u, A, st->var);
    if (n) {
        kb_kernel_matrix(&e->kernel, e->obs_u, n, e->space->u, A, st->W);
        kb__chol_trsm(&st->L, 0, st->W, A, A);
        subtract_rows(st, A, 0, n);
    }
    st->n_w = n;
    st->sec_embed += kb__now() - t0;
}

/* A box's new pool (kb__refresh_pool) and W, var for it, under the current model. */
static void redraw_pool(kb_engine *e, gp_ts *st)
{
    kb__refresh_pool(e, 0, &st->pool);
    rebuild_candidates(e, st);
    st->since_pool = 0;
}

/* beta = L^{-1} y_std, what the posterior needs (O(n^2)). */
static void update_beta(kb_engine *e, gp_ts *st)
{
    size_t n = st->L.n;
    double mean, sd;
    kb__output_stats(e, &mean, &sd);
    for (size_t i = 0; i < n; i++)
        st->beta[i] = kb__model_y(e, i);
    if (n)
        kb__chol_trsv(&st->L, 0, st->beta);
    st->beta_n = n;
    st->beta_gen = e->out_gen;
}

/* mu = W^T beta, the mean at every candidate (W up to date). beta is solved again only
 * when L or the output scaling moved since the tell solved it (sync_rows): a refit, or
 * tells waiting for refresh_every. The solve it skips was done twice per sequential
 * round trip, O(n^2) each time. */
static void update_mean(kb_engine *e, gp_ts *st)
{
    size_t A = e->space->n, n = st->L.n;
    double mean, sd;
    kb__output_stats(e, &mean, &sd); /* brings out_gen up to the current data */
    if (st->beta_n != n || st->beta_gen != e->out_gen)
        update_beta(e, st);
    memset(st->mu, 0, A * sizeof *st->mu);
    if (n)
        cblas_dgemv(CblasRowMajor, CblasTrans, (int)n, (int)A, 1.0, st->W, (int)A, st->beta,
                    1, 0.0, st->mu, 1);
    for (size_t i = 0; e->prior_basis && i < A; i++)
        st->mu[i] += kb__prior_at(e, i);
}

/* Appends the observations up to `upto` (capacity reserved): row by row, or a run of
 * KB_BLOCK_ROWS_MIN and more (a warm start's observes) in blocks, level 3 where row
 * appends were level 2 (23 s for 5,000 observes; docs/BENCHMARKS.md, fifty-fifth
 * session). */
static int append_rows(kb_engine *e, gp_ts *st, size_t upto, kb_error *err)
{
    size_t n0 = st->L.n;
    int rc = KB_OK;
    if (upto - n0 >= KB_BLOCK_ROWS_MIN) {
        rc = kb__chol_append_points(&st->L, &e->kernel, e->obs_u, upto, st->lambda);
        for (size_t i = n0; i < st->L.n; i++)
            st->log_det += log(kb__chol_pivot(&st->L, i));
    }
    while (!rc && st->L.n < upto)
        rc = append(e, st, e->obs_u + st->L.n * e->space->dim);
    if (rc == KB_ENOMEM)
        return kb__fail(err, rc, NULL, "out of memory for %zu observations", upto);
    return rc ? kb__fail(err, rc, "lambda", "kernel matrix + lambda I is not positive definite")
              : KB_OK;
}

/* L, log_det, W and var over the first n observations under the current kernel and
 * lambda, from scratch: one factorization and one triangular solve over the pool
 * (BLAS-3), where appending the rows one by one made n matrix-vector products over it
 * (17 s at n = 2,000, d = 1,000; docs/BENCHMARKS.md, forty-ninth session). On a failure
 * the model is left empty and consistent (append_rows takes it up again, row by row). */
static int refactor(kb_engine *e, gp_ts *st, size_t n)
{
    size_t d = e->space->dim;
    kb__chol_truncate(&st->L, 0);
    st->n_w = 0;
    st->beta_n = SIZE_MAX;
    st->log_det = 0.0;
    kb_kernel_diag(&e->kernel, e->space->u, e->space->n, st->var);
    double *K = malloc((n ? n : 1) * n * sizeof *K);
    if (!K)
        return KB_ENOMEM;
    kb_kernel_matrix(&e->kernel, e->obs_u, n, e->obs_u, n, K);
    for (size_t i = 0; i < n; i++) /* as append: k(x, x) exactly, plus lambda */
        K[i * n + i] = kb_kernel_eval(&e->kernel, e->obs_u + i * d, e->obs_u + i * d) +
                       st->lambda;
    int rc = kb__chol_factor(&st->L, K, n, n);
    free(K);
    if (rc)
        return rc;
    for (size_t i = 0; i < n; i++)
        st->log_det += log(kb__chol_pivot(&st->L, i));
    rebuild_candidates(e, st);
    return KB_OK;
}

/* Appends the observations up to `upto` once refresh_every of them wait (a tell, or
 * sync_observes for a run of observes): L and beta follow the told values under the
 * current kernel, so the posterior is exact. W,
 * var and the candidates' mean, the kernel refit and the pool redraw that the new data
 * may make due wait for the next ask (catch_up), so that a batch of tells pays for one
 * of each instead of one per item: at d = 100, 200 tells in a row took 1.8 s when each
 * could redraw the pool (docs/BENCHMARKS.md, forty-ninth session). A tell followed by an
 * ask does the same work in the same order as when the tell did it all. */
/* W holds observations x candidates values: refused past KB_MAX_POINTS (KB_ERANGE). */
static int within_cap(const kb_engine *e, size_t n, kb_error *err)
{
    if (n <= KB_MAX_POINTS / e->space->n)
        return KB_OK;
    return kb__fail(err, KB_ERANGE, "engine",
                    "gp-ts caches observations x candidates values, above the limit of %zu "
                    "at %zu observations; use sgp-ts", KB_MAX_POINTS, n);
}

static int sync_rows(kb_engine *e, size_t upto, int lazy, kb_error *err)
{
    gp_ts *st = e->impl;
    if (upto - st->L.n < st->refresh_every)
        return KB_OK;
    double t0 = kb__now();
    int rc = within_cap(e, upto, err);
    if (rc)
        return rc;
    if (reserve(st, e->space->n, upto))
        return kb__fail(err, KB_ENOMEM, NULL, "out of memory for %zu observations", upto);
    /* Rows appended before a failure stay (they are earlier observations when
     * refresh_every > 1): beta, and at the next ask W and mu, follow whatever L holds.
     * lazy: the rows are left to the refactor of the refit catch_up is about to make
     * (appended there if the refit fails), which would throw the appends away. */
    rc = lazy ? KB_OK : append_rows(e, st, upto, err);
    if (!lazy)
        update_beta(e, st);
    st->n_synced = lazy ? upto : st->L.n;
    st->due = 1;
    if (rc)
        return rc;
    st->refreshes++;
    st->sec_refresh += kb__now() - t0;
    return KB_OK;
}

/* What the observes since the last op put off (gp_ts_observe): their rows up to the last
 * multiple of refresh_every they reached, those a sync_rows at each observe took. */
static int sync_observes(kb_engine *e, int lazy, kb_error *err)
{
    gp_ts *st = e->impl;
    size_t upto = st->observed;
    if (upto == 0)
        return KB_OK;
    upto -= (upto - st->L.n) % st->refresh_every;
    int rc = sync_rows(e, upto, lazy, err);
    if (!rc)
        st->observed = 0;
    return rc;
}

/* At the first ask after a refresh: the kernel refit when kb__hyper_due (L rebuilt from
 * row 0 under the new kernel and noise, over the rows the refresh had) and the box pool's
 * redraw when due. On a failure `due` stays and the next ask carries on. */
static int catch_up(kb_engine *e, kb_error *err)
{
    gp_ts *st = e->impl;
    int rc = sync_observes(e, kb__hyper_due(e), err);
    if (rc || !st->due)
        return rc;
    double t0 = kb__now();
    if (kb__hyper_due(e)) {
        if ((rc = kb__hyper_refit(e, err)))
            return rc;
        st->lambda = e->noise;
        if ((rc = refactor(e, st, st->n_synced)) == KB_ENOMEM)
            return kb__fail(err, rc, NULL, "out of memory for %zu observations", st->n_synced);
    }
    rc = append_rows(e, st, st->n_synced, err);
    if (rc)
        return rc;
    if (!e->space->finite &&
        (st->since_pool >= st->pool_refresh || kb__pool_rules_due(e, &st->pool)))
        redraw_pool(e, st);
    extend_w(e, st);
    update_mean(e, st);
    st->due = 0;
    st->sec_refresh += kb__now() - t0;
    return KB_OK;
}

/* ----------------------------------------------------------------- sample */

static double current_v(const kb_engine *e, const gp_ts *st)
{
    double gamma = st->log_det - 0.5 * (double)st->L.n * log(st->lambda);
    return kb__width(e, kb__ts_gp_scale(st->B, st->R, st->lambda, gamma, st->delta, st->v_scale),
                     1.0);
}

/* out = mu + v C xi, C the Cholesky factor of the N x N covariance S (lower triangle
 * read). When even the largest jitter cannot factor S (it is not finite: candidates
 * whose scaled coordinates overflowed), each point is drawn from its marginal instead,
 * so that an ask still hands out a point rather than failing the study. */
static int draw_joint(kb_rng *rng, const double *mu, const double *S, size_t N, double v,
                      double *out, kb_error *err)
{
    kb_chol C;
    kb__chol_init(&C, 0);
    int rc = kb__chol_factor(&C, S, N, N);
    if (rc == KB_ENOMEM)
        return kb__fail(err, KB_ENOMEM, NULL, "out of memory");
    for (size_t i = 0; i < N; i++)
        out[i] = kb_rng_normal(rng);
    if (rc == KB_OK)
        cblas_dtrmv(CblasRowMajor, CblasLower, CblasNoTrans, CblasNonUnit, (int)N, C.L,
                    (int)C.cap, out, 1);
    else
        for (size_t i = 0; i < N; i++)
            out[i] *= S[i * N + i] > 0 ? sqrt(S[i * N + i]) : 0.0;
    for (size_t i = 0; i < N; i++)
        out[i] = mu[i] + v * out[i];
    kb__chol_free(&C);
    return KB_OK;
}

/* Posterior covariance on the N points U given V = L^{-1} K_{X,U} (n x N, leading
 * dimension N): S = K_UU - V^T V, lower triangle. */
static void posterior_cov(const kb_engine *e, const gp_ts *st, const double *U,
                          const double *V, size_t N, double *S)
{
    kb_kernel_matrix(&e->kernel, U, N, U, N, S);
    if (st->L.n)
        cblas_dsyrk(CblasRowMajor, CblasLower, CblasTrans, (int)N, (int)st->L.n, -1.0, V,
                    (int)N, 1.0, S, (int)N);
}

static int by_score_desc(const void *a, const void *b, void *ctx)
{
    const double *s = ctx;
    size_t i = *(const size_t *)a, j = *(const size_t *)b;
    if (s[i] != s[j])
        return s[i] > s[j] ? -1 : 1;
    return i < j ? -1 : i > j;
}

/* Fills st->order[0..*N) with D_t (see the header). */
static void decision_set(kb_engine *e, gp_ts *st, double v, size_t *N)
{
    size_t A = e->space->n, allowed = 0;
    for (size_t i = 0; i < A; i++)
        if (!kb__excluded(e, i)) {
            st->order[allowed++] = i;
            st->score[i] = st->mu[i] + 2.0 * v * sqrt(st->var[i] > 0 ? st->var[i] : 0);
        }
    if (allowed <= st->subset_size) {
        *N = allowed;
        return;
    }
    qsort_r(st->order, allowed, sizeof *st->order, by_score_desc, st->score);
    size_t top = (st->subset_size + 1) / 2;
    /* Partial Fisher-Yates over the rest picks the uniform part. */
    for (size_t k = top; k < st->subset_size; k++) {
        size_t r = k + (size_t)kb_rng_below(&e->rng, allowed - k);
        size_t t = st->order[k];
        st->order[k] = st->order[r];
        st->order[r] = t;
    }
    *N = st->subset_size;
}

static int gp_ts_ask_one(kb_engine *e, size_t *index, kb_ask_result *res, kb_error *err)
{
    gp_ts *st = e->impl;
    int rc = catch_up(e, err);
    if (rc)
        return rc;
    if (kb__design_index(e, index))
        return KB_OK;
    double t0 = kb__now();
    size_t N, n = st->L.n, A = e->space->n, d = e->space->dim;
    double v = current_v(e, st);
    decision_set(e, st, v, &N);
    if (N == 0 && !e->space->finite) {
        /* A pool spent before its redraw was due (a pool smaller than pool_refresh, or
         * an ask for more points than it holds) is redrawn: ops->ask_one, internal.h. */
        redraw_pool(e, st);
        update_mean(e, st);
        decision_set(e, st, v, &N);
    }
    if (N == 0) {
        res->status = KB_ASK_EXHAUSTED;
        return KB_OK;
    }
    double *U = malloc(N * d * sizeof *U), *V = malloc((n ? n : 1) * N * sizeof *V);
    double *S = malloc(N * N * sizeof *S), *mu = malloc(N * sizeof *mu);
    double *f = malloc(N * sizeof *f);
    rc = KB_ENOMEM;
    if (!U || !V || !S || !mu || !f) {
        kb__fail(err, rc, NULL, "out of memory for a decision set of %zu", N);
        goto done;
    }
    for (size_t k = 0; k < N; k++) {
        size_t i = st->order[k];
        memcpy(U + k * d, e->space->u + i * d, d * sizeof *U);
        mu[k] = st->mu[i];
    }
    /* Row by row, W read in its own order: the column walk took a cache miss per entry,
     * 21% of a 1,500-trial study's CPU (restore profile, fifty-eighth session). */
    for (size_t r = 0; r < n; r++) {
        const double *w = st->W + r * A;
        double *vr = V + r * N;
        for (size_t k = 0; k < N; k++)
            vr[k] = w[st->order[k]];
    }
    posterior_cov(e, st, U, V, N, S);
    if ((rc = draw_joint(&e->rng, mu, S, N, v, f, err)))
        goto done;
    rc = kb__ts_argmax(e, f, st->order, N, index);
    if (rc == KB_ASK_EXHAUSTED) { /* cannot happen: D_t holds allowed points only */
        res->status = KB_ASK_EXHAUSTED;
        rc = KB_OK;
    }
done:
    free(U);
    free(V);
    free(S);
    free(mu);
    free(f);
    st->sec_ask += kb__now() - t0;
    return rc;
}

/* ------------------------------------------------------------- lifecycle */

static void gp_ts_destroy(kb_engine *e)
{
    gp_ts *st = e->impl;
    if (!st)
        return;
    kb__chol_free(&st->L);
    free(st->W);
    free(st->row);
    free(st->beta);
    free(st->mu);
    free(st->var);
    free(st->order);
    free(st->score);
    free(st);
}

static int gp_ts_create(kb_engine *e, kb_error *err)
{
    gp_ts *st = calloc(1, sizeof *st);
    if (!st)
        return kb__fail(err, KB_ENOMEM, NULL, "out of memory");
    e->impl = st;
    const kb_config *c = e->cfg;
    st->lambda = e->noise; /* lambda, or its fitted value (catch_up) */
    st->B = kb_config_number(c, "B");
    st->R = kb_config_number(c, "R");
    st->delta = kb_config_number(c, "delta");
    st->v_scale = kb_config_number(c, "v_scale");
    st->subset_size = (size_t)kb_config_number(c, "subset_size");
    st->refresh_every = (size_t)kb_config_number(c, "refresh_every");
    st->pool_refresh = (size_t)kb_config_number(c, "pool_refresh");
    st->pool.choice_floor = kb_config_number(c, "choice_floor");
    size_t A = e->space->n;
    st->mu = calloc(A, sizeof *st->mu);
    st->var = malloc(A * sizeof *st->var);
    st->order = malloc(A * sizeof *st->order);
    st->score = malloc(A * sizeof *st->score);
    if (!st->mu || !st->var || !st->order || !st->score || reserve(st, A, 1)) {
        gp_ts_destroy(e);
        e->impl = NULL;
        return kb__fail(err, KB_ENOMEM, NULL, "out of memory for %zu candidates", A);
    }
    kb_kernel_diag(&e->kernel, e->space->u, A, st->var);
    return KB_OK;
}

static int gp_ts_tell(kb_engine *e, uint64_t handle, kb_error *err)
{
    gp_ts *st = e->impl;
    int rc = sync_observes(e, 0, err);
    if (rc)
        return rc;
    st->since_pool++;
    rc = sync_rows(e, e->n_obs, 0, err);
    if (rc)
        st->since_pool--;
    return rc;
}

/* An observe only records (past the cache's limit it is refused, as a sync would): the
 * next op syncs (sync_observes), so that a run of observes (a warm start) is appended in
 * blocks. */
static int gp_ts_observe(kb_engine *e, kb_error *err)
{
    int rc = within_cap(e, e->n_obs, err); /* refused now, not at every later ask */
    if (!rc)
        ((gp_ts *)e->impl)->observed = e->n_obs;
    return rc;
}

static int gp_ts_posterior(kb_engine *e, const double *U, size_t m, double *mean, double *sd,
                           kb_error *err)
{
    gp_ts *st = e->impl;
    int rc = sync_observes(e, 0, err);
    if (rc)
        return rc;
    size_t n = st->L.n;
    double *V = malloc((n ? n : 1) * (m ? m : 1) * sizeof *V);
    if (!V)
        return kb__fail(err, KB_ENOMEM, NULL, "out of memory");
    kb_kernel_diag(&e->kernel, U, m, sd);
    kb_kernel_matrix(&e->kernel, e->obs_u, n, U, m, V);
    for (size_t k = 0; k < m; k++)
        mean[k] = 0.0;
    if (n) {
        kb__chol_trsm(&st->L, 0, V, m, m);
        cblas_dgemv(CblasRowMajor, CblasTrans, (int)n, (int)m, 1.0, V, (int)m, st->beta, 1,
                    0.0, mean, 1);
    }
    for (size_t k = 0; k < m; k++) {
        double s2 = sd[k];
        for (size_t r = 0; r < n; r++)
            s2 -= V[r * m + k] * V[r * m + k];
        sd[k] = sqrt(s2 > 0 ? s2 : 0);
    }
    free(V);
    return KB_OK;
}

int kb__gp_ts_draw(kb_engine *e, const double *U, size_t m, double *out, kb_error *err)
{
    gp_ts *st = e->impl;
    int rc = sync_observes(e, 0, err);
    if (rc)
        return rc;
    size_t n = st->L.n;
    double *V = malloc((n ? n : 1) * m * sizeof *V), *S = malloc(m * m * sizeof *S);
    double *mu = malloc(m * sizeof *mu), *sd = malloc(m * sizeof *sd);
    rc = KB_ENOMEM;
    if (!V || !S || !mu || !sd) {
        kb__fail(err, rc, NULL, "out of memory");
        goto done;
    }
    if ((rc = gp_ts_posterior(e, U, m, mu, sd, err)))
        goto done;
    kb_kernel_matrix(&e->kernel, e->obs_u, n, U, m, V);
    if (n)
        kb__chol_trsm(&st->L, 0, V, m, m);
    posterior_cov(e, st, U, V, m, S);
    rc = draw_joint(&e->rng, mu, S, m, current_v(e, st), out, err);
done:
    free(V);
    free(S);
    free(mu);
    free(sd);
    return rc;
}

/* Feedback is taken in the model refresh, so sec_resparsify and sec_tell both read it. */
static const kb__stat gp_ts_stats[] = {
    KB__STAT("epoch", gp_ts, refreshes),
    KB__STAT("sec_embed", gp_ts, sec_embed),
    KB__STAT("sec_resparsify", gp_ts, sec_refresh),
    KB__STAT("sec_ask", gp_ts, sec_ask),
    KB__STAT("sec_tell", gp_ts, sec_refresh),
    KB__STAT("choice_floor_pools", gp_ts, pool.floor_pools),
    {NULL, 0, 0},
};

const kb_engine_ops kb_engine_gp_ts = {
    .name = "gp-ts",
    .summary = "exact GP Thompson sampling (Chowdhury and Gopalan 2017, Algorithm 2)",
    .options = gp_ts_options,
    .create = gp_ts_create,
    .destroy = gp_ts_destroy,
    .ask_one = gp_ts_ask_one,
    .tell = gp_ts_tell,
    .observe = gp_ts_observe,
    .posterior = gp_ts_posterior,
    .stats = gp_ts_stats,
    .fits_hyper = 1,
};
