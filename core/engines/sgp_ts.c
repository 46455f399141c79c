/*
 * sgp_ts.c - S-GP-TS, scalable Thompson sampling with a sparse variational GP: seed 001
 * (Vakili, Picheny, Artemev, "Scalable Thompson Sampling using Sparse Gaussian Process
 * Models"), sections 3-5, decomposed sampling with inducing points (eq. 6, 10).
 *
 * Model (section 3.3). Inducing points Z are a subset of the observed points, drawn as
 * in BKB (seed 000): at each model refresh every observed x_i is kept independently with
 * probability min(1, q sigma~^2(x_i)), sigma~^2 = sd^2 / lambda the ridge leverage
 * score under the previous sparse model (exact duplicates kept once, since K_ZZ must be
 * invertible). We use this rather than an approximate k-DPP because it needs only the
 * variances the model already computes (O(n m^2)), it adapts |Z| to the effective
 * dimension (about q d_eff points, BKB Thm 1) without choosing k, and it is the scheme
 * the rest of kbandit (BKB/BBKB) uses; seed 001 needs only an approximation good enough
 * that the posterior is close (its Prop. 2 via Burt et al.), which BKB's accuracy
 * guarantee gives. q(u) = N(m_u, S_u) is Titsias' closed-form optimum of the ELBO (eq. 4)
 * with tau = lambda, in the whitened form used by GPflow's SGPR:
 *   K_ZZ = Luu Luu^T,  A = Luu^{-1} K_ZX / sqrt(lambda),  I + A A^T = LB LB^T,
 *   c = LB^{-1} A y / sqrt(lambda),  m_u = Luu LB^{-T} c,  S_u = Luu (LB LB^T)^{-1} Luu^T,
 * so mu(x) = k_xZ beta with beta = Luu^{-T} LB^{-T} c, and the predictive variance is
 * k(x,x) - |Luu^{-1} k_Zx|^2 + |LB^{-1} Luu^{-1} k_Zx|^2 (section 3.3, k_t^(s)).
 *
 * Sample (eq. 6). f(x) = mu(x) + alpha_t g(x) with the pathwise (Wilson et al.) draw
 *   g(x) = phi(x)^T w + k_xZ v,   v = K_ZZ^{-1} (u_c - Phi_Z w),
 * w ~ N(0, I_M) weighting M random Fourier features of k (ts_common.c: Gaussian spectral
 * density for RBF, Student-t with 2 nu dof for Matern nu; linear rejected, field
 * "kernel"), u_c = Luu LB^{-T} xi ~ N(0, S_u), xi ~ N(0, I_m); so
 * v = Luu^{-T} (LB^{-T} xi - Luu^{-1} Phi_Z w). g has covariance k_t^(s) up to the
 * feature error, so f has mean mu and covariance alpha_t^2 k_t^(s): the paper's "scaled
 * the covariance of the sample with alpha_t^2". (Its eq. 6 as printed multiplies the
 * update term by alpha_t^2, which would also scale the mean; we keep the mean, which is
 * what its analysis, Lemma 2 and the anti-concentration step, uses.)
 *   alpha_t = alpha_scale * (1 + B + R sqrt(2 ln(t^2) / lambda))      (eq. 10)
 * with a_t = 1, c_t = 0 (their limits as the approximation improves, section 5.4).
 * alpha_scale is a practical multiplier; its default 1 keeps the theory, which on the
 * Abalone protocol (B = 1, R = 0.1, lambda = 0.01, so R / sqrt(lambda) = 1: noise of the
 * size the model assumes) gives alpha_t ~ 7 at t = 2000 and a regret ratio ~ 0.12,
 * (alpha_scale = 0.7: 0.11-0.12; 0.5: 0.12-0.13, which stalled at 0.58 on a local
 * maximum while outputs were standardized per evaluation). On a short, rough problem
 * (rkhs, lengthscale 0.2, T = 200) the default gives 0.30-0.39 and alpha_scale = 0.7
 * gives 0.24-0.29. B = R = 0 and alpha_scale = 1 give the plain posterior sample (used
 * by the tests).
 *
 * Costs (A candidates, n observations, m = |Z|, M features). Features are drawn once at
 * creation and Phi_A (A x M) is cached, so a sample costs O(A (M + m) + m M + m^2): no
 * O(A^3) or O(n^3) step. A model refresh costs O(n m^2 + m^3 + A m d + m M d) (leverage
 * scores, Titsias solve, K_AZ and Phi_Z), in stages doubling the observations covered
 * when the model covers fewer than half of them (grow_model: a warm start, and after a
 * refit, which restarts the model from the prior), at the ask after each new observation by
 * default (`refresh_every` = 1; larger values amortize it, the model lagging by up to
 * refresh_every - 1 observations). Tells and observes only record the data: a batch of
 * them pays for one refresh at the next ask, where a refresh per item took 7 s for 200
 * tells at d = 100 (docs/BENCHMARKS.md, forty-ninth session); a tell followed by an ask
 * does the same work in the same order as when the tell refreshed. Until that ask the
 * posterior is the model's as of its last refresh. Past SGP_GROWTH_FROM observations a
 * refresh also waits until they grew by a sixteenth since the last (refresh_due):
 * without noise m stays near n, and a refresh per tell cost 166 ms per round trip at
 * 1,500 trials (6-d box, 32 pending; docs/BENCHMARKS.md, twenty-second session). Up to
 * there, which covers the quality suite's budgets, nothing changes. Memory
 * O(A (M + m) + n m). On a box the pool is redrawn (kb__refresh_pool) at the first ask
 * after `pool_refresh` tells, and Phi_A recomputed, O(A M d). Keeping one feature draw for the engine's life is what makes
 * the O(A M) sample possible; the feature error (O(1 / sqrt(M)) in the prior kernel) is
 * then shared by all samples instead of averaging out (the test hook can redraw them per
 * sample to check the decomposition itself). Caches are capped at KB_MAX_POINTS values:
 * A M (create fails, field "features") and m (A + M) (a refresh fails, field "q").
 *
 * Asynchrony: one ask = one fresh sample; pending points are not hallucinated, the
 * randomization of TS diversifies concurrent asks. All randomness comes from e->rng
 * (restored if a refresh fails), so snapshot/restore by replay is exact. ops->posterior
 * is the sparse model's posterior (mean and predictive sd above); with Z = all observed
 * points it is the exact posterior. y is standardized at each refresh (kb__output_y: over
 * distinct points, so repeated arms do not shrink the scale; warped on boxes when fitted).
 *
 * Fitted hyperparameters (the default; `hyperparameters = fixed` keeps the paper's
 * setting): at a refresh when kb__hyper_due, the kernel and tau are refitted on all
 * observations (kb__hyper_refit: the exact marginal likelihood on at most max_rows of them,
 * hyper.c), the M features are drawn again for the new kernel and the model restarts from
 * the prior before Z is drawn; the sample's scale alpha_t is then the common width (kb__width, 1 for
 * Thompson sampling) instead of eq. 10's.
 */
#include "ts.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static const kb_option_spec sgp_ts_options[] = {
    {"lambda", KB_OPT_NUMBER, 0, INFINITY, 1, 0.01, NULL, NULL,
     "noise variance tau of the GP model (regularization), standardized output units; "
     "not set, fitted (hyperparameters = fit)"},
    {"features", KB_OPT_INTEGER, 1, 1e5, 0, 1000, NULL, NULL,
     "number M of random Fourier features of the prior sample"},
    {"q", KB_OPT_NUMBER, 1, 1e12, 0, 2.0, NULL, NULL,
     "oversampling of the inducing points: keep x with probability min(1, q sd^2/lambda)"},
    {"B", KB_OPT_NUMBER, 0, INFINITY, 0, 1.0, NULL, NULL,
     "bound on the RKHS norm of the objective (alpha_t, seed 001 eq. 10)"},
    {"R", KB_OPT_NUMBER, 0, INFINITY, 0, 0.1, NULL, NULL,
     "sub-Gaussian constant of the noise (alpha_t)"},
    {"alpha_scale", KB_OPT_NUMBER, 0, INFINITY, 1, 1.0, NULL, NULL,
     "practical multiplier of alpha_t (1 = theory)"},
    {"refresh_every", KB_OPT_INTEGER, 1, 1e9, 0, 1, NULL, NULL,
     "refresh the model (inducing points, q(u)) at the ask after this many new "
     "observations (past 1,024 observations, also not before they grew by a sixteenth)"},
    {"pool_refresh", KB_OPT_INTEGER, 1, 1e9, 0, 64, NULL, NULL,
     "box spaces: redraw the candidate pool at the first ask after this many tells"},
    KB__CHOICE_FLOOR_OPTION(0.0),
    {NULL, 0, 0, 0, 0, 0, NULL, NULL, NULL},
};

/* The sparse model of one refresh; replaced as a whole. */
typedef struct sgp_model {
    size_t m;
    double *Z;        /* m x dim */
    kb_chol Luu, LB;  /* m x m, row-major (a zeroed kb_chol is an empty row-major one) */
    double *beta;     /* m: mu(x) = k_xZ beta */
    double *PhiZ;     /* m x M */
    double *KAZ;      /* A x m */
    double *muA;      /* A */
} sgp_model;

typedef struct sgp_ts {
    double lambda, q, B, R, alpha_scale;
    size_t M, refresh_every, pool_refresh;
    ts_features feat;
    double *PhiA;  /* A x M */
    double *fA;    /* A: sample scratch */
    size_t n;      /* observations in the model */
    sgp_model mod;
    size_t since_pool;
    kb__pool_rules pool; /* choice floors (engine.c) */
    uint64_t refreshes;
    double sec_embed, sec_refresh, sec_ask;
} sgp_ts;

static void model_free(sgp_model *md)
{
    free(md->Z);
    kb__chol_free(&md->Luu);
    kb__chol_free(&md->LB);
    free(md->beta);
    free(md->PhiZ);
    free(md->KAZ);
    free(md->muA);
    memset(md, 0, sizeof *md);
}

/* ------------------------------------------------------ posterior pieces */

/* For n points U: P = Luu^{-1} K_ZU (m x n) and Q = LB^{-1} P; mean and var of the
 * sparse posterior (either may be NULL). */
static int predict(const kb_engine *e, const sgp_model *md, const double *U, size_t n,
                   double *mean, double *var)
{
    size_t m = md->m;
    if (var)
        kb_kernel_diag(&e->kernel, U, n, var);
    if (mean)
        memset(mean, 0, n * sizeof *mean);
    if (m == 0 || n == 0)
        return KB_OK;
    double *P = malloc(m * n * sizeof *P), *Q = malloc(m * n * sizeof *Q);
    if (!P || !Q) {
        free(P);
        free(Q);
        return KB_ENOMEM;
    }
    kb_kernel_matrix(&e->kernel, md->Z, m, U, n, P);
    if (mean)
        cblas_dgemv(CblasRowMajor, CblasTrans, (int)m, (int)n, 1.0, P, (int)n, md->beta, 1,
                    0.0, mean, 1);
    if (var) {
        kb__chol_trsm(&md->Luu, 0, P, n, n);
        memcpy(Q, P, m * n * sizeof *Q);
        kb__chol_trsm(&md->LB, 0, Q, n, n);
        for (size_t r = 0; r < m; r++)
            for (size_t k = 0; k < n; k++)
                var[k] += Q[r * n + k] * Q[r * n + k] - P[r * n + k] * P[r * n + k];
    }
    free(P);
    free(Q);
    return KB_OK;
}

/* Z: each of the first n observations kept with probability min(1, q var / lambda) under
 * the model `from`, exact duplicates once. Fills md->Z, md->m. */
static int choose_inducing(kb_engine *e, const sgp_ts *st, const sgp_model *from, size_t n,
                           sgp_model *md)
{
    size_t d = e->space->dim;
    double *var = malloc((n ? n : 1) * sizeof *var);
    md->Z = malloc((n ? n : 1) * d * sizeof *md->Z);
    if (!var || !md->Z || predict(e, from, e->obs_u, n, NULL, var)) {
        free(var);
        return KB_ENOMEM;
    }
    md->m = 0;
    for (size_t i = 0; i < n; i++) {
        const double *x = e->obs_u + i * d;
        double p = st->q * var[i] / st->lambda;
        if (kb_rng_uniform(&e->rng) >= p)
            continue;
        int dup = 0;
        for (size_t j = 0; j < md->m && !dup; j++)
            dup = memcmp(md->Z + j * d, x, d * sizeof *x) == 0;
        if (!dup)
            memcpy(md->Z + md->m++ * d, x, d * sizeof *x);
    }
    free(var);
    return KB_OK;
}

/* Titsias' optimal q(u) for Z = md->Z on the first n observations: Luu, LB, beta. */
static int fit_titsias(kb_engine *e, const sgp_ts *st, sgp_model *md, size_t n)
{
    size_t m = md->m;
    double *K = malloc(m * m * sizeof *K), *Ax = malloc(m * n * sizeof *Ax);
    double *y = malloc(n * sizeof *y);
    md->beta = malloc(m * sizeof *md->beta);
    int rc = KB_ENOMEM;
    if (!K || !Ax || !y || !md->beta)
        goto done;
    kb_kernel_matrix(&e->kernel, md->Z, m, md->Z, m, K);
    if ((rc = kb__chol_factor(&md->Luu, K, m, m)))
        goto done;
    kb_kernel_matrix(&e->kernel, md->Z, m, e->obs_u, n, Ax);
    /* dtrsm's alpha is this scaling of Ax before the solve */
    cblas_dscal((int)(m * n), 1.0 / sqrt(st->lambda), Ax, 1);
    kb__chol_trsm(&md->Luu, 0, Ax, n, n);
    for (size_t i = 0; i < m * m; i++)
        K[i] = i % (m + 1) == 0 ? 1.0 : 0.0;
    if (m && n) /* BLAS refuses a leading dimension of 0 (an empty inducing set) */
        cblas_dsyrk(CblasRowMajor, CblasLower, CblasNoTrans, (int)m, (int)n, 1.0, Ax, (int)n,
                    1.0, K, (int)m);
    if ((rc = kb__chol_factor(&md->LB, K, m, m)))
        goto done;
    for (size_t i = 0; i < n; i++)
        y[i] = kb__model_y(e, i);
    cblas_dgemv(CblasRowMajor, CblasNoTrans, (int)m, (int)n, 1.0 / sqrt(st->lambda), Ax,
                (int)n, y, 1, 0.0, md->beta, 1);
    kb__chol_trsv(&md->LB, 0, md->beta); /* c */
    kb__chol_trsv(&md->LB, 1, md->beta);
    kb__chol_trsv(&md->Luu, 1, md->beta);
done:
    free(K);
    free(Ax);
    free(y);
    return rc;
}

/* K_AZ, mu_A and Phi_Z of a fitted model for the current candidate set: allocation
 * (which may fail) apart from the filling (which may not). */
static int embed_alloc(const kb_engine *e, const sgp_ts *st, sgp_model *md)
{
    size_t A = e->space->n, m = md->m;
    md->KAZ = malloc((A * m > 0 ? A * m : 1) * sizeof *md->KAZ);
    md->muA = malloc(A * sizeof *md->muA);
    md->PhiZ = malloc((m ? m : 1) * st->M * sizeof *md->PhiZ);
    return md->KAZ && md->muA && md->PhiZ ? KB_OK : KB_ENOMEM;
}

static void embed_fill(kb_engine *e, sgp_ts *st, sgp_model *md)
{
    double t0 = kb__now();
    size_t A = e->space->n, m = md->m;
    kb_kernel_matrix(&e->kernel, e->space->u, A, md->Z, m, md->KAZ);
    memset(md->muA, 0, A * sizeof *md->muA);
    if (m)
        cblas_dgemv(CblasRowMajor, CblasNoTrans, (int)A, (int)m, 1.0, md->KAZ, (int)m,
                    md->beta, 1, 0.0, md->muA, 1);
    kb__ts_features_eval(&st->feat, md->Z, m, md->PhiZ);
    st->sec_embed += kb__now() - t0;
}

/* New kernel and noise (kb__hyper_refit): the random features are drawn again for the new
 * kernel and re-evaluated at the candidates, and the model restarts from the prior (its
 * factors belong to the old kernel: the inducing points are then drawn by prior variance);
 * the refresh that follows rebuilds it from every observation. Everything that may fail
 * comes before the first change, so that a failure leaves the model whole rather than
 * without the arrays the next ask reads. */
static int refit(kb_engine *e, sgp_ts *st, kb_error *err)
{
    int rc = kb__hyper_refit(e, err);
    if (rc)
        return rc;
    st->lambda = e->noise;
    sgp_model prior = {0};
    ts_features feat;
    if (embed_alloc(e, st, &prior)) {
        model_free(&prior);
        return kb__fail(err, KB_ENOMEM, NULL, "out of memory");
    }
    if ((rc = kb__ts_features_draw(&feat, &e->kernel, &e->rng, st->M, err))) {
        model_free(&prior);
        return rc;
    }
    kb__ts_features_free(&st->feat);
    st->feat = feat;
    kb__ts_features_eval(&st->feat, e->space->u, e->space->n, st->PhiA);
    model_free(&st->mod);
    st->mod = prior;
    embed_fill(e, st, &st->mod);
    return KB_OK;
}

/* See the header: past this many observations a refresh waits for a sixteenth more. */
#define SGP_GROWTH_FROM 1024

/* Are enough observations waiting for a refresh? */
static int refresh_due(const kb_engine *e, const sgp_ts *st)
{
    size_t waiting = e->n_obs - st->n;
    return waiting >= st->refresh_every &&
           (e->n_obs <= SGP_GROWTH_FROM || waiting >= 1 + st->n / 16);
}

/* A box's pool is due for a redraw after pool_refresh tells, or when a choice floor
 * starts or stops applying (engine.c, starved_choice: a floor holds the pool until it is
 * met). */
static int pool_due(const kb_engine *e, const sgp_ts *st)
{
    return !e->space->finite &&
           (st->since_pool >= st->pool_refresh || kb__pool_rules_due(e, &st->pool));
}

/* A new pool and the features at it; the caller embeds the model at it (embed_fill). */
static void redraw_pool(kb_engine *e, sgp_ts *st)
{
    kb__refresh_pool(e, 0, &st->pool);
    kb__ts_features_eval(&st->feat, e->space->u, e->space->n, st->PhiA);
    st->since_pool = 0;
}

/* Rows of a first stage of grow_model (see there). */
#define SGP_STAGE 256

/* md = the sparse model of every observation: Z drawn under the current model, then
 * q(u) fitted. When the current model covers fewer than half of the observations (a warm
 * start, a batch of tells, and every refresh after a refit, whose model is the prior),
 * in stages that double the observations covered from SGP_STAGE on, each stage's Z drawn
 * under the previous stage's model: BKB's rule (seed 000) applied to the data in order,
 * as its epochs would have met them. In one stage from the prior every point's variance
 * is the prior's, so every point was kept: Z was all of them, O(n^3) (9.6 s at 5,000
 * observations, 6-d box) and refused past KB_MAX_POINTS / (A + M) (about 22,000
 * observations: a warm start of 25,000 failed every ask; docs/BENCHMARKS.md, fifty-fifth
 * session). A refresh that covers more than half already is one stage, as before. */
static int grow_model(kb_engine *e, sgp_ts *st, sgp_model *md)
{
    size_t n = e->n_obs, covered = st->mod.m ? st->n : 0;
    const sgp_model *from = &st->mod;
    sgp_model prev = {0};
    int rc;
    do {
        size_t base = covered > SGP_STAGE ? covered : SGP_STAGE;
        covered = n <= 2 * base ? n : 2 * base;
        model_free(md);
        rc = choose_inducing(e, st, from, covered, md);
        if (!rc && md->m * (e->space->n + st->M) > KB_MAX_POINTS)
            rc = KB_ERANGE;
        if (!rc)
            rc = fit_titsias(e, st, md, covered);
        model_free(&prev);
        if (covered < n && !rc) { /* the next stage draws under this one */
            prev = *md;
            *md = (sgp_model){0};
            from = &prev;
        }
    } while (!rc && covered < n);
    model_free(&prev);
    return rc;
}

/* Brings the model up to date when refresh_due (refitting the hyperparameters first
 * when due). Leaves the engine (and its RNG) unchanged on a failure of the sparse model;
 * a refit stays. Past SGP_GROWTH_FROM observations a due pool does not wait for the
 * model: the current model is embedded at the new pool (a small pool_size would
 * otherwise run out of points between refreshes). */
static int maybe_refresh(kb_engine *e, kb_error *err)
{
    sgp_ts *st = e->impl;
    if (!refresh_due(e, st)) {
        if (e->n_obs > SGP_GROWTH_FROM && pool_due(e, st)) {
            redraw_pool(e, st);
            embed_fill(e, st, &st->mod);
        }
        return KB_OK;
    }
    double t0 = kb__now();
    if (kb__hyper_due(e)) {
        int rc = refit(e, st, err);
        if (rc)
            return rc;
    }
    kb_rng saved = e->rng;
    sgp_model md = {0};
    int rc = grow_model(e, st, &md);
    if (!rc)
        rc = embed_alloc(e, st, &md);
    if (rc) {
        size_t m = md.m;
        model_free(&md);
        e->rng = saved;
        if (rc == KB_ERANGE)
            return kb__fail(err, rc, "q", "%zu inducing points exceed the cache limit; "
                            "lower q", m);
        return rc == KB_ENOMEM
                   ? kb__fail(err, rc, NULL, "out of memory refreshing the sparse model")
                   : kb__fail(err, rc, "lambda",
                              "inducing-point system not positive definite; increase lambda");
    }
    /* Nothing fails from here on. */
    if (pool_due(e, st))
        redraw_pool(e, st);
    embed_fill(e, st, &md);
    model_free(&st->mod);
    st->mod = md;
    st->n = e->n_obs;
    st->refreshes++;
    st->sec_refresh += kb__now() - t0;
    return KB_OK;
}

/* ----------------------------------------------------------------- sample */

/* out (n) = mu + alpha (Phi w + K_UZ v), eq. 6 (see the header); PhiU is n x M with
 * features `f`, PhiZ the same features at Z. */
static int draw(kb_engine *e, const sgp_model *md, size_t M, const double *PhiU,
                const double *KUZ, const double *mu, const double *PhiZ, size_t n,
                double alpha, double *out)
{
    size_t m = md->m;
    double *w = malloc(M * sizeof *w), *r = malloc((m ? m : 1) * sizeof *r);
    double *s = malloc((m ? m : 1) * sizeof *s);
    if (!w || !r || !s) {
        free(w);
        free(r);
        free(s);
        return KB_ENOMEM;
    }
    for (size_t j = 0; j < M; j++)
        w[j] = kb_rng_normal(&e->rng);
    for (size_t j = 0; j < m; j++)
        s[j] = kb_rng_normal(&e->rng);
    cblas_dgemv(CblasRowMajor, CblasNoTrans, (int)n, (int)M, 1.0, PhiU, (int)M, w, 1, 0.0,
                out, 1);
    if (m) {
        cblas_dgemv(CblasRowMajor, CblasNoTrans, (int)m, (int)M, 1.0, PhiZ, (int)M, w, 1, 0.0,
                    r, 1);
        kb__chol_trsv(&md->Luu, 0, r);
        kb__chol_trsv(&md->LB, 1, s);
        cblas_daxpy((int)m, -1.0, r, 1, s, 1);
        kb__chol_trsv(&md->Luu, 1, s);
        cblas_dgemv(CblasRowMajor, CblasNoTrans, (int)n, (int)m, 1.0, KUZ, (int)m, s, 1, 1.0,
                    out, 1);
    }
    for (size_t i = 0; i < n; i++)
        out[i] = mu[i] + alpha * out[i];
    free(w);
    free(r);
    free(s);
    return KB_OK;
}

/* The sample's scale: eq. 10, or the common width with fitted hyperparameters. */
static double current_alpha(const kb_engine *e, const sgp_ts *st)
{
    return kb__width(e, kb__ts_sgp_scale(st->B, st->R, st->lambda, st->n + 1, st->alpha_scale),
                     1.0);
}

/* A sample at the pool and its argmax over the allowed candidates (KB_ASK_EXHAUSTED when
 * there is none), or KB_ENOMEM. */
static int sample_argmax(kb_engine *e, sgp_ts *st, size_t *index)
{
    int rc = draw(e, &st->mod, st->M, st->PhiA, st->mod.KAZ, st->mod.muA, st->mod.PhiZ,
                  e->space->n, current_alpha(e, st), st->fA);
    for (size_t i = 0; e->prior_basis && i < e->space->n; i++)
        st->fA[i] += kb__prior_at(e, i);
    return rc ? rc : kb__ts_argmax(e, st->fA, NULL, e->space->n, index);
}

static int sgp_ts_ask_one(kb_engine *e, size_t *index, kb_ask_result *res, kb_error *err)
{
    sgp_ts *st = e->impl;
    int rc = maybe_refresh(e, err);
    if (rc)
        return rc;
    if (kb__design_index(e, index))
        return KB_OK;
    double t0 = kb__now();
    rc = sample_argmax(e, st, index);
    if (rc == KB_ASK_EXHAUSTED && !e->space->finite) {
        /* A pool spent before its redraw was due (a pool smaller than pool_refresh, or
         * an ask for more points than it holds) is redrawn: ops->ask_one, internal.h. */
        redraw_pool(e, st);
        embed_fill(e, st, &st->mod);
        rc = sample_argmax(e, st, index);
    }
    st->sec_ask += kb__now() - t0;
    if (rc == KB_ENOMEM)
        return kb__fail(err, rc, NULL, "out of memory");
    if (rc == KB_ASK_EXHAUSTED)
        res->status = KB_ASK_EXHAUSTED;
    return KB_OK;
}

int kb__sgp_ts_draw(kb_engine *e, const double *U, size_t n, int fresh_features, double *out,
                    kb_error *err)
{
    sgp_ts *st = e->impl;
    const sgp_model *md = &st->mod;
    size_t m = md->m, M = st->M;
    ts_features tmp = {0};
    const ts_features *f = &st->feat;
    double *PhiU = malloc(n * M * sizeof *PhiU), *KUZ = malloc((n * m > 0 ? n * m : 1) * sizeof *KUZ);
    double *mu = malloc(n * sizeof *mu), *PhiZ = NULL;
    int rc = KB_ENOMEM;
    if (!PhiU || !KUZ || !mu)
        goto done;
    if (fresh_features) {
        if ((rc = kb__ts_features_draw(&tmp, &e->kernel, &e->rng, M, err)))
            goto done;
        f = &tmp;
        rc = KB_ENOMEM;
    }
    if (!(PhiZ = malloc((m ? m : 1) * M * sizeof *PhiZ)))
        goto done;
    kb__ts_features_eval(f, md->Z, m, PhiZ);
    kb__ts_features_eval(f, U, n, PhiU);
    kb_kernel_matrix(&e->kernel, U, n, md->Z, m, KUZ);
    if ((rc = predict(e, md, U, n, mu, NULL)))
        goto done;
    rc = draw(e, md, M, PhiU, KUZ, mu, PhiZ, n, current_alpha(e, st), out);
done:
    if (rc == KB_ENOMEM)
        kb__fail(err, rc, NULL, "out of memory");
    kb__ts_features_free(&tmp);
    free(PhiU);
    free(KUZ);
    free(mu);
    free(PhiZ);
    return rc;
}

const double *kb__sgp_ts_inducing(const kb_engine *e, size_t *m)
{
    const sgp_ts *st = e->impl;
    *m = st->mod.m;
    return st->mod.Z;
}

/* ------------------------------------------------------------- lifecycle */

static void sgp_ts_destroy(kb_engine *e)
{
    sgp_ts *st = e->impl;
    if (!st)
        return;
    kb__ts_features_free(&st->feat);
    model_free(&st->mod);
    free(st->PhiA);
    free(st->fA);
    free(st);
}

static int sgp_ts_create(kb_engine *e, kb_error *err)
{
    sgp_ts *st = calloc(1, sizeof *st);
    if (!st)
        return kb__fail(err, KB_ENOMEM, NULL, "out of memory");
    e->impl = st;
    const kb_config *c = e->cfg;
    st->lambda = e->noise; /* lambda, or its fitted value (refit) */
    st->M = (size_t)kb_config_number(c, "features");
    st->q = kb_config_number(c, "q");
    st->B = kb_config_number(c, "B");
    st->R = kb_config_number(c, "R");
    st->alpha_scale = kb_config_number(c, "alpha_scale");
    st->refresh_every = (size_t)kb_config_number(c, "refresh_every");
    st->pool_refresh = (size_t)kb_config_number(c, "pool_refresh");
    st->pool.choice_floor = kb_config_number(c, "choice_floor");
    size_t A = e->space->n, M = st->M;
    if (A * M > KB_MAX_POINTS) { /* (M, not st->M: st is freed first) */
        sgp_ts_destroy(e);
        e->impl = NULL;
        return kb__fail(err, KB_ERANGE, "features",
                        "%zu candidates x %zu features exceed the cache limit of %zu values",
                        A, M, KB_MAX_POINTS);
    }
    int rc = kb__ts_features_draw(&st->feat, &e->kernel, &e->rng, st->M, err);
    if (!rc) {
        st->PhiA = malloc(A * st->M * sizeof *st->PhiA);
        st->fA = malloc(A * sizeof *st->fA);
        rc = embed_alloc(e, st, &st->mod); /* the empty model: mu = 0 */
        if (!st->PhiA || !st->fA || rc)
            rc = kb__fail(err, KB_ENOMEM, "features",
                          "out of memory for %zu candidates x %zu features", A, st->M);
    }
    if (rc) {
        sgp_ts_destroy(e);
        e->impl = NULL;
        return rc;
    }
    embed_fill(e, st, &st->mod);
    double t0 = kb__now();
    kb__ts_features_eval(&st->feat, e->space->u, A, st->PhiA);
    st->sec_embed += kb__now() - t0;
    return KB_OK;
}

/* The model takes the told value at the next ask (maybe_refresh). */
static int sgp_ts_tell(kb_engine *e, uint64_t handle, kb_error *err)
{
    (void)handle;
    (void)err;
    sgp_ts *st = e->impl;
    st->since_pool++;
    return KB_OK;
}

static int sgp_ts_posterior(kb_engine *e, const double *U, size_t n, double *mean, double *sd,
                            kb_error *err)
{
    sgp_ts *st = e->impl;
    if (predict(e, &st->mod, U, n, mean, sd))
        return kb__fail(err, KB_ENOMEM, NULL, "out of memory");
    for (size_t k = 0; k < n; k++)
        sd[k] = sqrt(sd[k] > 0 ? sd[k] : 0);
    return KB_OK;
}

/* Feedback is taken in the model refresh at the next ask, which sec_resparsify and
 * sec_tell both read. */
static const kb__stat sgp_ts_stats[] = {
    KB__STAT("epoch", sgp_ts, refreshes),
    KB__STAT("dict_size", sgp_ts, mod.m),
    KB__STAT("sec_embed", sgp_ts, sec_embed),
    KB__STAT("sec_resparsify", sgp_ts, sec_refresh),
    KB__STAT("sec_ask", sgp_ts, sec_ask),
    KB__STAT("sec_tell", sgp_ts, sec_refresh),
    KB__STAT("choice_floor_pools", sgp_ts, pool.floor_pools),
    {NULL, 0, 0},
};

const kb_engine_ops kb_engine_sgp_ts = {
    .name = "sgp-ts",
    .summary = "sparse variational GP Thompson sampling with decomposed sampling "
               "(Vakili, Picheny, Artemev, S-GP-TS, eq. 6)",
    .options = sgp_ts_options,
    .fits_hyper = 1,
    .create = sgp_ts_create,
    .destroy = sgp_ts_destroy,
    .ask_one = sgp_ts_ask_one,
    .tell = sgp_ts_tell,
    .posterior = sgp_ts_posterior,
    .stats = sgp_ts_stats,
};
