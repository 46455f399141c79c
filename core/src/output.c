/*
 * output.c - This file contains what the fitting engines model of the told values: the
 * output standardization over distinct observed points (kb__output_stats, kb__output_y),
 * the warp of its lower tail (warp_tail, fit_warp) and the interior prior mean on finite
 * sets (kb__prior_mean), with kb__model_y, the residual an engine's GP fits.
 *
 * Invariant: e->out_mean, out_sd, out_median and out_spread are those of e->groups (the
 * distinct points, engine.c) whenever e->out_valid; whatever changes the groups or the
 * fit's noise clears out_valid, and the next kb__output_stats recomputes them (out_gen
 * counts the recomputations, so engines can tell a rescaling from the values they hold).
 */
#include "internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Phi^{-1}(q) for 0 < q <= 1/2: Newton's method on Phi(x) = erfc(-x / sqrt 2) / 2 from
 * x = 0. Phi - q is increasing and convex on x <= 0, so the iterates fall monotonically
 * to the root; ~15 steps at q = 1e-5. */
static double normal_quantile_lower(double q)
{
    double x = 0.0;
    for (int i = 0; i < 200; i++) {
        double pdf = exp(-0.5 * x * x) / sqrt(2.0 * M_PI);
        double step = (0.5 * erfc(-x / sqrt(2.0)) - q) / pdf;
        x -= step;
        if (fabs(step) <= 1e-12 * (1.0 + fabs(x)))
            break;
    }
    return x;
}

/* Number of sorted values below y (strict) or, with `upto`, at most y. */
static size_t rank_of(const double *v, size_t n, double y, int upto)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (v[mid] < y || (upto && v[mid] == y))
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* Half-rank output warping, after the output warping of Vizier's default GP bandit (Song
 * et al. 2024, "The Vizier Gaussian Process Bandit Algorithm", arXiv 2408.11527): a value
 * below the median m of the group means is raised to where a normal distribution centred
 * at m, with spread s (the better half's, floored by the noise: fit_warp), puts its rank,
 *     y' = max(y, m + s Phi^{-1}(q)),  q = mid-rank of y among the n group means / (n + 1),
 * and values at or above m are kept. Monotone in y, so the best points and the order of
 * all points are unchanged; only a heavy tail of bad values is pulled in. Why: a few very
 * bad values (Styblinski-Tang's corners, 10^3 above its optimum) otherwise set the
 * standardized scale, the better half's differences look like noise, and the UCB spends
 * its trials where the variance is largest: the box's corners (median simple regret 109 on
 * Styblinski-Tang-8, 4 workers x 50 trials, against 44 with the objective log-transformed
 * by hand, docs/BENCHMARKS.md). No warp below three distinct points. */
static double warp_tail(const kb_engine *e, double y)
{
    if (!e->warp || !(y < e->out_median) || !(e->out_spread > 0.0))
        return y;
    size_t n = e->n_groups;
    size_t r = rank_of(e->out_sorted, n, y, 0) + rank_of(e->out_sorted, n, y, 1);
    double q = (double)(r + 1) / (2.0 * (double)(n + 1));
    double w = e->out_median + e->out_spread * normal_quantile_lower(q);
    return w > y ? w : y;
}

/* The median m of the ascending v[0..n) and the root mean square of v - m over the values
 * above m (0 when there is none); terms are divided by the largest distance (no overflow). */
static double upper_spread(const double *v, size_t n, double *median)
{
    double m = n % 2 ? v[n / 2] : v[n / 2 - 1] / 2.0 + v[n / 2] / 2.0;
    double big = fmax(fabs(v[n - 1] - m), 1e-300), s2 = 0.0;
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (v[i] > m) {
            s2 += ((v[i] - m) / big) * ((v[i] - m) / big);
            k++;
        }
    *median = m;
    return k ? big * sqrt(s2 / (double)k) : 0.0;
}

/* upper_spread of the first design_n observations told (the initial design: a
 * space-filling sample on a box, uniform draws on a finite set, whose warp is off unless
 * set; warm-start observations count as told), 0 below three. */
static double design_spread(const kb_engine *e)
{
    size_t k = e->design_n < e->n_obs ? e->design_n : e->n_obs;
    double v[KB_DESIGN_MAX], m;
    if (k < 3)
        return 0.0;
    memcpy(v, e->obs_y, k * sizeof *v);
    qsort(v, k, sizeof *v, cmp_double);
    return upper_spread(v, k, &m);
}

/* The warp's median m and spread s: the better half's root mean square distance above m,
 * floored twice.
 * - At least KB_WARP_NOISE_SDS noise sds of the last fit. Why: a search puts most of its
 *   trials near its best points, so under noise the better half of the told values
 *   spreads little more than the noise, and the warp squeezed the worse half (the walls
 *   of Branin's valley, 10-50 noise sds high) into a band of a few noise sds: the fit then
 *   read the function's structure as noise (Branin at noise 0.1, seeds 401-460: 26 of 60
 *   runs ended with x1's lengthscale 0.55-1.06 and a fitted noise of ~0.6). The floor
 *   keeps the worse half at least ~10 noise sds deep; noise-free fits (noise near the
 *   prior's mode, e^-5) leave it below s. 4 was chosen among 3, 4, 5 and 8 on the tuning
 *   sets and then checked on the held-out sets (docs/BENCHMARKS.md, thirty-third session).
 * - At least KB_WARP_DESIGN_SHARE of the initial design's own spread (design_spread). Why:
 *   once a noise-free search has put most of its trials within a few thousandths of its
 *   best point, the median is a value of that cluster and s its tiny spread, and the warp
 *   pressed the whole rest of the box into a few s: a quadratic looked like a spike, the
 *   fit's lengthscales fell from ~0.3 to 0.005-0.03, and BBKB's dictionary filled the
 *   model window (the load benchmark's slow mode: 3-8x the CPU per round trip, 5x the
 *   regret; docs/BENCHMARKS.md, forty-third session). The design samples the box before
 *   any search, so its spread is the function's over the box, not the search's. 0.1 was
 *   chosen among 0.03 (still the slow mode in 2 of 3 load runs), 0.1, 0.3, 0.5 (decided
 *   worse on held-out functions: the warp's pull is what lets a converged search model
 *   its basin finely), 1 and 2 (Schwefel-4 lost its global basin); no warp less strong
 *   is without cost: Goldstein-Price, whose design spreads over 10^4, ends a little less
 *   precise (regret ~3e-4 against ~1e-4). */
static void fit_warp(kb_engine *e)
{
    size_t n = e->n_groups;
    e->out_median = 0.0;
    e->out_spread = 0.0;
    if (!e->warp || n < 3)
        return;
    double *v = e->out_sorted;
    for (size_t g = 0; g < n; g++)
        v[g] = e->groups[g].ymean;
    qsort(v, n, sizeof *v, cmp_double);
    e->out_spread = upper_spread(v, n, &e->out_median);
    if (e->out_spread > 0.0)
        e->out_spread = fmax(e->out_spread, fmax(KB_WARP_NOISE_SDS * e->fit_noise_sd,
                                                 KB_WARP_DESIGN_SHARE * design_spread(e)));
}

/* Two passes over the distinct points; terms are divided by the count or by max |y| so
 * that finite y near DBL_MAX do not overflow into inf / NaN. */
void kb__output_stats(kb_engine *e, double *mean, double *sd)
{
    if (!e->out_valid) {
        fit_warp(e);
        double m = 0.0, n = 0.0, big = 0.0, s2 = 0.0, s = 1.0;
        for (size_t g = 0; e->standardize && g < e->n_groups; g++) {
            double y = warp_tail(e, e->groups[g].ymean);
            n += 1.0;
            m += y / n - m / n;
            big = fmax(big, fabs(y));
        }
        for (size_t g = 0; n > 1.0 && big > 0.0 && g < e->n_groups; g++) {
            double dev = warp_tail(e, e->groups[g].ymean) / big - m / big;
            s2 += dev * dev;
        }
        if (n > 1.0)
            s = big * sqrt(s2 / (n - 1.0));
        e->out_mean = m;
        e->out_sd = s > 1e-12 ? s : 1.0;
        e->out_valid = 1;
        e->out_gen++;
    }
    *mean = e->out_mean;
    *sd = e->out_sd;
}

double kb__output_y(kb_engine *e, double y)
{
    double mean, sd;
    kb__output_stats(e, &mean, &sd);
    /* Halved operands: y - mean overflows for values near +-DBL_MAX (told -1.7e308 and
     * 1.7e308 in turn, gp-ucb's model went NaN for good). Halving and doubling are exact,
     * so other values standardize to the same bits. */
    return (warp_tail(e, y) / 2 - mean / 2) / sd * 2;
}

double kb__prior_mean(const kb_engine *e, const double *u)
{
    return e->prior_basis ? e->prior_c * kb__interior_basis(&e->kernel, u) : 0.0;
}

double kb__model_y(kb_engine *e, size_t i)
{
    return kb__output_y(e, e->obs_y[i]) - kb__prior_mean(e, e->obs_u + i * e->space->dim);
}
