/*
 * space.c - search spaces: finite candidate sets and unit-cube boxes with a candidate
 * pool.
 *
 * A space holds its points twice: `rows` in the caller's input coordinates (what asks
 * return) and `u` in the engine's internal coordinates (what kernels see). For finite
 * sets `u` is the column-wise affine map of kb_scaling; for boxes both are the pool,
 * already in [0,1]^dim. The pool is refreshed by kb__space_refresh_pool, which bumps
 * `generation` so trials can tell which pool their index refers to. A box's coordinates
 * may take only a few values (`levels`): the centres of equal bins (integer parameters,
 * and categorical ones, whose values are unordered), or a log-scale integer's values at
 * their log positions (`log_low`, kb_space_set_log_levels); every pool point lies on
 * them, and a point belongs to the nearest (kb__space_level).
 */
#include "internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int kb_scaling_parse(const char *name, kb_scaling *out)
{
    if (strcmp(name, "unit") == 0)
        *out = KB_SCALE_UNIT;
    else if (strcmp(name, "standardize") == 0)
        *out = KB_SCALE_STANDARDIZE;
    else if (strcmp(name, "none") == 0)
        *out = KB_SCALE_NONE;
    else
        return KB_ENOTFOUND;
    return KB_OK;
}

static kb_space *space_alloc(int finite, size_t n, size_t dim)
{
    kb_space *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->finite = finite;
    s->n = n;
    s->dim = dim;
    s->rows = malloc(n * dim * sizeof *s->rows);
    s->u = malloc(n * dim * sizeof *s->u);
    s->norm = malloc(dim * sizeof *s->norm);
    s->shift = calloc(dim, sizeof *s->shift);
    s->scale = malloc(dim * sizeof *s->scale);
    if (!s->rows || !s->u || !s->norm || !s->shift || !s->scale) {
        kb_space_free(s);
        return NULL;
    }
    for (size_t j = 0; j < dim; j++)
        s->norm[j] = s->scale[j] = 1.0;
    return s;
}

kb_space *kb_space_new_finite(const double *rows, size_t n, size_t dim, kb_error *err)
{
    if (n == 0) {
        kb__fail(err, KB_EINVAL, "candidates", "the candidate set is empty");
        return NULL;
    }
    if (dim == 0) {
        kb__fail(err, KB_EINVAL, "candidates", "candidates have no dimensions");
        return NULL;
    }
    if (dim > KB_MAX_DIM || n > KB_MAX_POINTS / dim) {
        kb__fail(err, KB_ERANGE, "candidates", "%zu x %zu candidates exceed the limits "
                 "(dim <= %d, rows x dim <= %zu)", n, dim, KB_MAX_DIM, KB_MAX_POINTS);
        return NULL;
    }
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < dim; j++)
            if (!isfinite(rows[i * dim + j])) {
                char field[KB_ERROR_FIELD_MAX];
                snprintf(field, sizeof field, "candidates[%zu][%zu]", i, j);
                kb__fail(err, KB_EINVAL, field, "candidate value is not a finite number");
                return NULL;
            }
    kb_space *s = space_alloc(1, n, dim);
    if (!s) {
        kb__fail(err, KB_ENOMEM, "candidates", "out of memory for %zu x %zu candidates", n, dim);
        return NULL;
    }
    memcpy(s->rows, rows, n * dim * sizeof *rows);
    memcpy(s->u, rows, n * dim * sizeof *rows);
    return s;
}

kb_space *kb_space_new_box(size_t dim, size_t pool_size, kb_error *err)
{
    if (dim == 0) {
        kb__fail(err, KB_EINVAL, "dim", "a box needs at least one dimension");
        return NULL;
    }
    if (pool_size == 0) {
        kb__fail(err, KB_EINVAL, "pool_size", "the candidate pool must not be empty");
        return NULL;
    }
    if (dim > KB_MAX_DIM) {
        kb__fail(err, KB_ERANGE, "dim", "a box of %zu dimensions exceeds the limit of %d",
                 dim, KB_MAX_DIM);
        return NULL;
    }
    if (pool_size > KB_MAX_POOL || pool_size > KB_MAX_POOL_POINTS / dim) {
        kb__fail(err, KB_ERANGE, "pool_size",
                 "a pool of %zu points in %zu dimensions exceeds the limits (pool_size <= %d, "
                 "pool_size x dim <= %zu)", pool_size, dim, KB_MAX_POOL, KB_MAX_POOL_POINTS);
        return NULL;
    }
    kb_space *s = space_alloc(0, pool_size, dim);
    if (!s) {
        kb__fail(err, KB_ENOMEM, "pool_size", "out of memory for a pool of %zu", pool_size);
        return NULL;
    }
    s->pool_size = pool_size;
    kb_rng rng;
    kb_rng_seed(&rng, 0);
    kb__space_refresh_pool(s, &rng, NULL, 0, NULL, 0);
    s->generation = 0;
    return s;
}

void kb_space_free(kb_space *s)
{
    if (!s)
        return;
    free(s->rows);
    free(s->u);
    free(s->norm);
    free(s->shift);
    free(s->scale);
    free(s->levels);
    free(s->categorical);
    free(s->log_low);
    free(s);
}

size_t kb_space_dim(const kb_space *s) { return s->dim; }
int kb_space_is_finite(const kb_space *s) { return s->finite; }
size_t kb_space_size(const kb_space *s) { return s->n; }

kb_space *kb__space_copy(const kb_space *src)
{
    kb_space *s = space_alloc(src->finite, src->n, src->dim);
    if (!s)
        return NULL;
    s->pool_size = src->pool_size;
    s->generation = src->generation;
    memcpy(s->rows, src->rows, src->n * src->dim * sizeof *s->rows);
    memcpy(s->u, src->u, src->n * src->dim * sizeof *s->u);
    memcpy(s->norm, src->norm, src->dim * sizeof *s->norm);
    memcpy(s->shift, src->shift, src->dim * sizeof *s->shift);
    memcpy(s->scale, src->scale, src->dim * sizeof *s->scale);
    if (src->levels) {
        s->levels = malloc(src->dim * sizeof *s->levels);
        s->categorical = malloc(src->dim);
        if (!s->levels || !s->categorical) {
            kb_space_free(s);
            return NULL;
        }
        memcpy(s->levels, src->levels, src->dim * sizeof *s->levels);
        memcpy(s->categorical, src->categorical, src->dim);
    }
    if (src->log_low && !(s->log_low = malloc(src->dim * sizeof *s->log_low))) {
        kb_space_free(s);
        return NULL;
    }
    if (src->log_low)
        memcpy(s->log_low, src->log_low, src->dim * sizeof *s->log_low);
    return s;
}

/* A new pool on the levels just set, as a new space's (seed 0, generation 0). */
static void redraw_on_levels(kb_space *s)
{
    kb_rng rng;
    kb_rng_seed(&rng, 0);
    kb__space_refresh_pool(s, &rng, NULL, 0, NULL, 0);
    s->generation = 0;
}

int kb_space_set_levels(kb_space *s, const size_t *levels, const unsigned char *categorical,
                        kb_error *err)
{
    if (s->finite)
        return kb__fail(err, KB_EUNSUPPORTED, "levels", "levels are for boxes");
    for (size_t j = 0; j < s->dim; j++) {
        int cat = categorical && categorical[j];
        size_t L = levels ? levels[j] : 0;
        if ((cat && L >= 2 && L <= KB_MAX_CHOICES) || (!cat && L <= KB_MAX_LEVELS))
            continue;
        char field[KB_ERROR_FIELD_MAX];
        snprintf(field, sizeof field, "levels[%zu]", j);
        return cat ? kb__fail(err, KB_EINVAL, field, "a categorical needs 2 to %d choices",
                              KB_MAX_CHOICES)
                   : kb__fail(err, KB_ERANGE, field, "at most 2^53 levels");
    }
    size_t *lv = calloc(s->dim, sizeof *lv);
    unsigned char *cat = calloc(s->dim, 1);
    if (!lv || !cat) {
        free(lv);
        free(cat);
        return kb__fail(err, KB_ENOMEM, NULL, "out of memory");
    }
    for (size_t j = 0; j < s->dim; j++) {
        lv[j] = levels ? levels[j] : 0;
        cat[j] = categorical && categorical[j];
    }
    free(s->levels);
    free(s->categorical);
    free(s->log_low);
    s->log_low = NULL;
    s->levels = lv;
    s->categorical = cat;
    redraw_on_levels(s);
    return KB_OK;
}

double kb_log_level_pos(double low, double high, double v)
{
    if (high == low)
        return 0.5;
    double u = (log(v) - log(low)) / (log(high) - log(low));
    return u < 0 ? 0 : u > 1 ? 1 : u;
}

/* Coordinate j's highest log-scale integer (log_low[j] > 0). */
static double log_high(const kb_space *s, size_t j)
{
    return s->log_low[j] + (double)(s->levels[j] - 1);
}

static double log_pos(const kb_space *s, size_t j, size_t l)
{
    return kb_log_level_pos(s->log_low[j], log_high(s, j), s->log_low[j] + (double)l);
}

/* The level of a log-scale coordinate nearest to u (the lower at a tie): the integer the
 * inverse map rounds to, then the nearer neighbour while one is (the distance to the
 * increasing positions has one minimum). */
static size_t log_level(const kb_space *s, size_t j, double u)
{
    double lo = s->log_low[j], n = (double)s->levels[j];
    double v = exp(log(lo) + u * (log(log_high(s, j)) - log(lo))) - lo;
    size_t l = v <= 0 ? 0 : v >= n - 1 ? (size_t)n - 1 : (size_t)round(v);
    while (l > 0 && fabs(u - log_pos(s, j, l - 1)) <= fabs(u - log_pos(s, j, l)))
        l--;
    while ((double)l + 1 < n && fabs(u - log_pos(s, j, l + 1)) < fabs(u - log_pos(s, j, l)))
        l++;
    return l;
}

size_t kb__space_level(const kb_space *s, size_t j, double u)
{
    return s->log_low && s->log_low[j] > 0 ? log_level(s, j, u) : kb__category(u, s->levels[j]);
}

double kb__space_level_pos(const kb_space *s, size_t j, size_t l)
{
    return s->log_low && s->log_low[j] > 0 ? log_pos(s, j, l)
                                           : ((double)l + 0.5) / (double)s->levels[j];
}

/* Whether coordinate j (levels set, not categorical) can take the integers from low at
 * log positions a double tells apart: increasing, each found again from its position. */
static int log_levels_ok(kb_space *s, size_t j, double low)
{
    size_t n = s->levels ? s->levels[j] : 0;
    if (!(low >= 1.0 && low == floor(low) && low + (double)n <= 9007199254740992.0) || n < 2 ||
        n > KB_MAX_LOG_LEVELS || s->categorical[j])
        return 0;
    double keep = s->log_low[j];
    s->log_low[j] = low;
    int ok = 1;
    for (size_t l = 0; ok && l < n; l++)
        ok = (l == 0 || log_pos(s, j, l) > log_pos(s, j, l - 1)) &&
             log_level(s, j, log_pos(s, j, l)) == l;
    s->log_low[j] = keep;
    return ok;
}

int kb_space_set_log_levels(kb_space *s, const double *low, kb_error *err)
{
    if (s->finite)
        return kb__fail(err, KB_EUNSUPPORTED, "levels", "levels are for boxes");
    double *lows = calloc(s->dim, sizeof *lows);
    if (!lows)
        return kb__fail(err, KB_ENOMEM, NULL, "out of memory");
    double *keep = s->log_low;
    s->log_low = lows; /* log_levels_ok reads positions through it */
    for (size_t j = 0; low && j < s->dim; j++) {
        if (low[j] == 0.0)
            continue;
        if (!log_levels_ok(s, j, low[j])) {
            s->log_low = keep;
            free(lows);
            char field[KB_ERROR_FIELD_MAX];
            snprintf(field, sizeof field, "levels[%zu]", j);
            return kb__fail(err, KB_EINVAL, field,
                            "log levels need an ordered coordinate of 2 to %d levels from an "
                            "integer >= 1 whose positions a double tells apart",
                            KB_MAX_LOG_LEVELS);
        }
        lows[j] = low[j];
    }
    free(keep);
    redraw_on_levels(s);
    return KB_OK;
}

void kb__space_snap(const kb_space *s, double *rows, size_t n)
{
    for (size_t j = 0; s->levels && j < s->dim; j++) {
        for (size_t i = 0; s->levels[j] && i < n; i++)
            rows[i * s->dim + j] = kb__space_level_pos(s, j, kb__space_level(s, j, rows[i * s->dim + j]));
    }
}

/* Column j's norm, shift and scale for the chosen scaling; constant columns keep scale 1.
 * Statistics are taken on x / norm, so sums and squares cannot overflow. */
static void column_map(const kb_space *s, size_t j, kb_scaling how, double *norm,
                       double *shift, double *scale)
{
    double c = 0.0;
    for (size_t i = 0; i < s->n; i++)
        c = fmax(c, fabs(s->rows[i * s->dim + j]));
    *norm = how == KB_SCALE_NONE || c == 0.0 ? 1.0 : c;
    double lo = INFINITY, hi = -INFINITY, sum = 0.0, sum2 = 0.0;
    for (size_t i = 0; i < s->n; i++) {
        double v = s->rows[i * s->dim + j] / *norm;
        lo = v < lo ? v : lo;
        hi = v > hi ? v : hi;
        sum += v;
    }
    double mean = sum / (double)s->n;
    for (size_t i = 0; i < s->n; i++) {
        double t = s->rows[i * s->dim + j] / *norm - mean;
        sum2 += t * t;
    }
    double sd = sqrt(sum2 / (double)s->n);
    *shift = 0.0;
    *scale = 1.0;
    if (how == KB_SCALE_UNIT) {
        *shift = lo;
        *scale = hi > lo ? hi - lo : 1.0;
    } else if (how == KB_SCALE_STANDARDIZE) {
        *shift = mean;
        *scale = sd > 0.0 ? sd : 1.0;
    }
}

int kb__space_apply_scaling(kb_space *s, kb_scaling how, kb_error *err)
{
    (void)err;
    if (!s->finite)
        return KB_OK; /* boxes live in the unit cube already */
    for (size_t j = 0; j < s->dim; j++)
        column_map(s, j, how, &s->norm[j], &s->shift[j], &s->scale[j]);
    for (size_t i = 0; i < s->n; i++)
        kb__space_to_internal(s, s->rows + i * s->dim, s->u + i * s->dim);
    return KB_OK;
}

void kb__space_to_internal(const kb_space *s, const double *x, double *u)
{
    for (size_t j = 0; j < s->dim; j++)
        u[j] = (x[j] / s->norm[j] - s->shift[j]) / s->scale[j];
}

/* Coordinate j of rows 0..n-1 of a pool: the radical inverses (van der Corput, base b) of
 * start, start + 1, ..., shifted by `shift` modulo 1: a Halton column. The index's digits
 * are kept and incremented with carries instead of being divided out for every point,
 * and b^-(k+1) is tabled: the same floating-point operations in the same order as
 *   f = 1; r = 0; while (i) { f /= b; r += f * (i % b); i /= b; }
 * so the pool is bit for bit what that loop gave (checked in tests/unit/test_base.c),
 * without its 3 divisions per digit (a pool redraw at every bbkb epoch spent most of its
 * time in them). */
static void halton_column(kb_space *s, size_t j, uint64_t start, size_t n, unsigned b,
                          double shift)
{
    enum { MAX_DIGITS = 64 }; /* base >= 2 digits of a uint64_t */
    unsigned digit[MAX_DIGITS];
    double f[MAX_DIGITS];
    size_t nd = 0;
    for (uint64_t i = start; i > 0; i /= b)
        digit[nd++] = (unsigned)(i % b);
    f[0] = 1.0 / b;
    for (size_t k = 1; k < MAX_DIGITS; k++)
        f[k] = f[k - 1] / b;
    for (size_t i = 0; i < n; i++) {
        double r = 0.0;
        for (size_t k = 0; k < nd; k++)
            r += f[k] * (double)digit[k];
        double v = r + shift;
        s->rows[i * s->dim + j] = v - floor(v);
        size_t k = 0; /* the next index: add one, carrying */
        while (k < nd && digit[k] == b - 1)
            digit[k++] = 0;
        if (k == nd)
            digit[nd++] = 1;
        else
            digit[k]++;
    }
}

/* The smallest prime above p: the Halton bases 2, 3, 5, ... one dimension after another
 * (finding the j-th prime from scratch for every dimension cost O(d^2.5) per redraw). */
static unsigned next_prime(unsigned p)
{
    for (p++;; p++) {
        unsigned q = 2;
        while (q * q <= p && p % q)
            q++;
        if (q * q > p)
            return p;
    }
}

/* Relative per-dimension scales: lengthscales divided by their geometric mean (TuRBO's
 * weights, Eriksson et al. 2019, sec. 2), clipped to [1/8, 8] so that a dimension the fit
 * switched off (huge lengthscale) is still moved now and then; all 1 without lengthscales.
 * A dimension out of the model (KB_OFF_LENGTHSCALE, engine.c) counts in the mean too and so
 * shrinks the others' steps: a mean over the modelled dimensions only was neutral on the
 * tuning sets and lost Inactive-10 under noise (docs/BENCHMARKS.md, nineteenth session). */
static void relative_scales(const double *ls, size_t d, double *w)
{
    double lg = 0.0;
    for (size_t j = 0; ls && j < d; j++)
        lg += log(ls[j]) / (double)d;
    for (size_t j = 0; j < d; j++)
        w[j] = ls ? fmin(8.0, fmax(0.125, exp(log(ls[j]) - lg))) : 1.0;
}

/* Folds a coordinate back into [0, 1] by reflecting it at the faces as often as needed
 * (the triangle wave of period 2). Clipping put every step that left the cube exactly on
 * a face: with relative scales up to 8 the step's sd reaches 1.6, and half of the asks on
 * Styblinski-Tang-8 had a coordinate on a face, where that function is worst (BENCHMARKS,
 * tenth session). Reflection keeps the step's density inside the cube with no point mass. */
static double reflect_unit(double v)
{
    double r = fmod(fabs(v), 2.0);
    return r > 1.0 ? 2.0 - r : r;
}

/* The normal steps of local_points, drawn in the order of the calls but evaluated a block
 * at a time: Box-Muller's log and cos, one value per call (kb_rng_normal), were half of a
 * box pool's redraw (docs/BENCHMARKS.md, twenty-seventh session). Step k moves
 * rows[pos[k]] by scale[k] sqrt(-2 log u1[k]) cos(2 pi u2[k]), kb_rng_normal's formula. */
enum { STEPS = 256 };
typedef struct steps {
    size_t n, pos[STEPS];
    double scale[STEPS], u1[STEPS], u2[STEPS];
} steps;

static void apply_steps(double *rows, steps *st)
{
    double lg[STEPS], c[STEPS];
    for (size_t k = 0; k < st->n; k++)
        c[k] = 2.0 * M_PI * st->u2[k];
    kb__vmath(KB_VLOG, st->u1, st->n, lg);
    kb__vmath(KB_VCOS, c, st->n, c);
    for (size_t k = 0; k < st->n; k++)
        rows[st->pos[k]] = reflect_unit(rows[st->pos[k]] +
                                        st->scale[k] * (sqrt(-2.0 * lg[k]) * c[k]));
    st->n = 0;
}

/* Queues a normal step of sd `scale` for rows[pos], drawing its two uniforms now. */
static void queue_step(double *rows, steps *st, kb_rng *rng, size_t pos, double scale)
{
    st->pos[st->n] = pos;
    st->scale[st->n] = scale;
    st->u1[st->n] = 1.0 - kb_rng_uniform(rng); /* (0, 1] */
    st->u2[st->n] = kb_rng_uniform(rng);
    if (++st->n == STEPS)
        apply_steps(rows, st);
}

/* The local half of a pool, around the best points, as a trust region at several sizes
 * at once (TuRBO grows and shrinks one base length L on successes and failures; a pool
 * redrawn from the data alone, with no state to replay, instead spreads its points over
 * L = 0.4, 0.2, ..., 0.4 / 2^6): point k perturbs its center by N(0, (L w_j / 2)^2) in
 * each dimension, each dimension with probability min(1, 20 / d) (TuRBO's rule for large
 * d; at least one), reflected at the cube's faces. Three points in four are centered on
 * the best observation, the fourth cycles over the next best. A categorical coordinate
 * picked for a move takes a uniformly drawn choice with probability L / 0.8 (a
 * Hamming-distance trust region that shrinks with L, as CASMOPOLITAN's, Wan et al. 2021):
 * its choices have no order for a normal step to follow. */
static void local_points(kb_space *s, kb_rng *rng, size_t first, const double *best,
                         size_t nbest, const double *w)
{
    enum { LEVELS = 7 };
    size_t d = s->dim;
    double p_dim = d > 20 ? 20.0 / (double)d : 1.0;
    steps st = {.n = 0};
    for (size_t i = first; i < s->n; i++) {
        size_t k = i - first;
        const double *c = best + (k % 4 == 3 && nbest > 1 ? 1 + (k / 4) % (nbest - 1) : 0) * d;
        double L = 0.4 / (double)(1u << ((k / 4) % LEVELS));
        double *x = s->rows + i * d;
        size_t forced = (size_t)kb_rng_below(rng, d);
        for (size_t j = 0; j < d; j++) {
            /* a library user may tell a box point outside the cube: its clipped copy */
            double v = c[j] < 0.0 ? 0.0 : c[j] > 1.0 ? 1.0 : c[j];
            int move = j == forced || kb_rng_uniform(rng) < p_dim;
            int cat = s->categorical && s->categorical[j];
            if (move && cat && kb_rng_uniform(rng) < L / 0.8)
                v = ((double)kb_rng_below(rng, s->levels[j]) + 0.5) / (double)s->levels[j];
            x[j] = v;
            if (move && !cat)
                queue_step(s->rows, &st, rng, i * d + j, 0.5 * L * w[j]);
        }
    }
    apply_steps(s->rows, &st);
}

void kb__space_refresh_pool(kb_space *s, kb_rng *rng, const double *best, size_t nbest,
                            const double *lengthscales, int all_local)
{
    size_t n_local = nbest ? (all_local ? s->n : s->n / 2) : 0;
    size_t n_qmc = s->n - n_local;
    /* Cranley-Patterson rotation: a random shift per dimension, modulo 1, makes each
     * refresh a fresh low-discrepancy set. A random start index skips correlations. */
    uint64_t start = 1 + kb_rng_below(rng, 1u << 20);
    unsigned b = 1;
    for (size_t j = 0; j < s->dim; j++) {
        double shift = kb_rng_uniform(rng);
        b = next_prime(b);
        halton_column(s, j, start, n_qmc, b, shift);
    }
    if (n_local) {
        double w[s->dim];
        relative_scales(lengthscales, s->dim, w);
        local_points(s, rng, n_qmc, best, nbest, w);
    }
    kb__space_snap(s, s->rows, s->n);
    memcpy(s->u, s->rows, s->n * s->dim * sizeof *s->u);
    s->generation++;
}
