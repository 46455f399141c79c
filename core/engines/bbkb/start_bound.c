/*
 * start_bound.c - a box epoch's start without every candidate's variance: exact means,
 * cheap upper bounds on the variances, and exact variances only for the candidates whose
 * bound could put them at the top of the UCB heap (selection.c's lazy argmax).
 *
 * Why: a box redraws its 2,048-point pool at every epoch start, so the full product over
 * the new pool (kb__bbkb_candidate_posterior, 2 A m r flops) cannot be updated from the
 * last epoch's (low_rank.c), and a noise-free study, whose dictionary holds most of its
 * rows, spent about 40% of its CPU there (docs/BENCHMARKS.md, twenty-ninth session). The
 * UCB heap only ever needs exact values near its top: most candidates' mean plus any
 * plausible width stays below the values handed out.
 *
 * The bound: sigma~^2_start(x) = (k(x,x) - ||z||^2) / lambda + z^T V^{-1} z is
 * (k(x,x) - k~(x,x)) / lambda plus, over lambda, the posterior variance of a GP with the
 * Nystrom kernel k~(x, y) = z(x)^T z(y) and noise lambda given every data row of the
 * model (each row counted n_all times in V). Conditioning on fewer observations leaves a
 * larger variance, and k~ equals k between any point and a pivot of the embedding (the
 * Nystrom map interpolates there; every pivot is a data row of the model, dictionary.c).
 * So for any set T of pivots, each taken once,
 *     lambda sigma~^2_start(x) <= k(x,x) - k_T(x)^T (K_TT + lambda I)^{-1} k_T(x).
 * Two such T per candidate, the larger reduction kept: its single nearest pivot (A r
 * work over the cached kernel columns), and the BOUND_PIVOTS pivots nearest the
 * candidate of the largest mean (A p^2 flops), which is where the pool's local half and
 * the UCB's winners lie. A relative slack of BOUND_SLACK covers the rounding of both
 * sides.
 *
 * Invariants: while vs_bound[i], var_start[i] >= sigma~^2_start(x_i) and is not exact;
 * kb__bbkb_start_variance and kb__bbkb_resolve_next replace it by the exact value (then
 * vs_bound[i] = 0). border[0..n_border) is a max-heap, by their keys at its building
 * (border_key), of candidates that may still be bounded (built on first use,
 * border_valid).
 */
#include "bbkb_internal.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Pivots near the best mean whose joint conditioning bounds every candidate: at 64 a
 * noise-free 6-d study with 32 pending computes about 12% of its 2,048 candidates
 * exactly per epoch, for A p^2 = 8 Mflop; 32 or 128 here cost about the same in all
 * (kb-box-ask, docs/BENCHMARKS.md, twenty-ninth session). */
#define BOUND_PIVOTS 64

/* Bounds pay once the full product (2 A r^2 flops) is dearer than theirs (A p^2 and the
 * resolved candidates): one-worker noise-free studies of 250 trials took 8% less CPU
 * with 64 here than with 128, and no less with 32 (kb-box-ask, twenty-ninth session). */
#define BOUND_MIN_RANK 64

/* Relative slack on each bound: both sides are sums of at most A r products of numbers
 * bounded by k(x, x), so their rounding stays many orders below it. */
#define BOUND_SLACK 1e-9

int kb__bbkb_bounds_apply(const kb_engine *e, const bbkb *st)
{
    return !e->space->finite && !st->full_start && !st->local_rule && !st->init_phase &&
           st->r >= BOUND_MIN_RANK;
}

/* mu = k_S(x)^T (W w) for every candidate; *best: the candidate of the largest mean. */
static int exact_means(bbkb *st, size_t *best)
{
    size_t A = st->A, m = st->m;
    double *v = malloc(m * sizeof *v);
    if (!v)
        return KB_ENOMEM;
    cblas_dgemv(CblasRowMajor, CblasNoTrans, (int)m, (int)st->r, 1.0, st->W, (int)st->r, st->w,
                1, 0.0, v, 1);
    cblas_dgemv(CblasColMajor, CblasNoTrans, (int)A, (int)m, 1.0, st->Kc, (int)A, v, 1, 0.0,
                st->mu, 1);
    free(v);
    *best = 0;
    for (size_t i = 1; i < A; i++)
        *best = st->mu[i] > st->mu[*best] ? i : *best;
    return KB_OK;
}

/* out[i] = max(out[i], col[i]^2 inv). In blocks of 8 with restrict so that GCC -O2 (whose
 * cheap vectorizer takes only loops of a known multiple of the vector width, without
 * overlap checks) vectorizes it: scalar, this A x r loop was 4.5% of a 32-study
 * noise-free daemon. Not fmax: a call per element, never NaN here. */
static void max_scaled_squares(double *restrict out, const double *restrict col, double inv,
                               size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (size_t k = i; k < i + 8; k++) {
            double v = col[k] * col[k] * inv;
            out[k] = v > out[k] ? v : out[k];
        }
    for (; i < n; i++) {
        double v = col[i] * col[i] * inv;
        out[i] = v > out[i] ? v : out[i];
    }
}

/* red[i] = max over pivots j of k(x_i, s_j)^2 / (k(s_j, s_j) + lambda). */
static int nearest_pivot_reduction(const kb_engine *e, const bbkb *st, double *red)
{
    size_t A = st->A, r = st->r;
    double *kd = malloc(r * sizeof *kd);
    if (!kd)
        return KB_ENOMEM;
    kb_kernel_diag(&e->kernel, st->Sp, r, kd);
    memset(red, 0, A * sizeof *red);
    for (size_t j = 0; j < r; j++)
        max_scaled_squares(red, st->Kc + st->pslot[j] * A, 1.0 / (kd[j] + st->lambda), A);
    free(kd);
    return KB_OK;
}

static int by_value_desc(const void *a, const void *b)
{
    const double *x = a, *y = b;
    return x[0] < y[0] ? 1 : x[0] > y[0] ? -1 : (x[1] > y[1]) - (x[1] < y[1]);
}

/* T: the p pivots of largest k(x_best, s) into tp[0..p) (pivot indices). */
static int nearest_pivots(const bbkb *st, size_t best, size_t p, size_t *tp)
{
    size_t r = st->r;
    double *kv = malloc(2 * r * sizeof *kv);
    if (!kv)
        return KB_ENOMEM;
    for (size_t j = 0; j < r; j++) {
        kv[2 * j] = st->Kc[st->pslot[j] * st->A + best];
        kv[2 * j + 1] = (double)j;
    }
    qsort(kv, r, 2 * sizeof *kv, by_value_desc);
    for (size_t t = 0; t < p; t++)
        tp[t] = (size_t)kv[2 * t + 1];
    free(kv);
    return KB_OK;
}

/* red[i] = max(red[i], k_T(x_i)^T (K_TT + lambda I)^{-1} k_T(x_i)) for T the pivots tp:
 * ||C^{-1} k_T(x_i)||^2 with C the kb_chol factor (whose jitter, if it needs any, only
 * loosens the bound), by its inverse (OpenBLAS's dtrsm at A x 64 took 11% of a daemon
 * serving 32 noise-free studies, twenty-ninth session). B (A x p, column-major) holds
 * Kc's columns of T as they are: gathered into rows k_T(x_i), each store went to another
 * cache line (4% of that daemon, thirtieth session). */
static int joint_reduction(const kb_engine *e, const bbkb *st, const size_t *tp, size_t p,
                           double *red)
{
    size_t A = st->A, d = e->space->dim;
    double *ST = malloc(p * d * sizeof *ST), *K = malloc(p * p * sizeof *K);
    double *inv = malloc(p * p * sizeof *inv), *B = malloc(A * p * sizeof *B);
    kb_chol C;
    kb__chol_init(&C, 1);
    double *sq = calloc(A, sizeof *sq);
    int rc = ST && K && inv && B && sq ? KB_OK : KB_ENOMEM;
    for (size_t t = 0; !rc && t < p; t++) {
        memcpy(ST + t * d, st->Sp + tp[t] * d, d * sizeof *ST);
        memcpy(B + t * A, st->Kc + st->pslot[tp[t]] * A, A * sizeof *B);
    }
    if (!rc) {
        kb_kernel_matrix(&e->kernel, ST, p, ST, p, K);
        for (size_t t = 0; t < p; t++)
            K[t * p + t] += st->lambda;
        rc = kb__chol_factor(&C, K, p, p);
    }
    if (!rc)
        rc = kb__chol_inverse(&C, inv);
    if (!rc) { /* row i of B times C^{-T}: C^{-1} k_T(x_i); inv is column-major lower */
        cblas_dtrmm(CblasColMajor, CblasRight, CblasLower, CblasTrans, CblasNonUnit, (int)A,
                    (int)p, 1.0, inv, (int)p, B, (int)A);
        for (size_t t = 0; t < p; t++)
            for (size_t i = 0; i < A; i++)
                sq[i] += B[t * A + i] * B[t * A + i];
        for (size_t i = 0; i < A; i++)
            red[i] = sq[i] > red[i] ? sq[i] : red[i];
    }
    free(sq);
    kb__chol_free(&C);
    free(ST);
    free(K);
    free(inv);
    free(B);
    return rc;
}

int kb__bbkb_bound_start(const kb_engine *e)
{
    bbkb *st = e->impl;
    size_t A = st->A, best = 0, p = st->r < BOUND_PIVOTS ? st->r : BOUND_PIVOTS;
    double *red = malloc(A * sizeof *red);
    size_t *tp = malloc(p * sizeof *tp);
    int rc = red && tp ? KB_OK : KB_ENOMEM;
    if (!rc)
        rc = exact_means(st, &best);
    if (!rc)
        rc = nearest_pivot_reduction(e, st, red);
    if (!rc)
        rc = nearest_pivots(st, best, p, tp);
    if (!rc)
        rc = joint_reduction(e, st, tp, p, red);
    for (size_t i = 0; !rc && i < A; i++) {
        double k = st->kdiag[i];
        st->var_start[i] = (fmax(k - red[i], 0.0) + BOUND_SLACK * k) / st->lambda;
        st->vs_bound[i] = 1;
    }
    st->border_valid = 0;
    free(red);
    free(tp);
    return rc;
}

/* border: a max-heap of the bounded candidates by their keys now, popped in the order a
 * sort would give; an epoch resolves a few blocks of them, and a full qsort of all 2,048
 * at its first resolution was 4% of a noise-free 32-study daemon (docs/BENCHMARKS.md,
 * thirtieth session). */
static void build_order(bbkb *st)
{
    size_t n = 0;
    for (size_t i = 0; i < st->A; i++)
        if (st->vs_bound[i]) {
            st->border_key[i] = st->key[i];
            st->border[n++] = i;
        }
    for (size_t p = n / 2; p-- > 0;)
        kb__bbkb_sift_down(st->border, n, st->border_key, p);
    st->n_border = n;
    st->border_valid = 1;
}

static size_t border_pop(bbkb *st)
{
    size_t top = st->border[0];
    st->border[0] = st->border[--st->n_border];
    kb__bbkb_sift_down(st->border, st->n_border, st->border_key, 0);
    return top;
}

/* Exact sigma~^2_start for candidate i and the next bounded candidates of border, as one
 * product (kb__bbkb_zrows, kb__bbkb_row_variances); idx receives them, *n their count. */
int kb__bbkb_resolve_next(bbkb *st, size_t i, size_t *idx, size_t *n)
{
    size_t r = st->r, k = 0;
    *n = 0;
    if (!st->border_valid)
        build_order(st);
    idx[k++] = i;
    while (k < KB__RESOLVE_BLOCK && st->n_border > 0) {
        size_t j = border_pop(st);
        if (st->vs_bound[j] && j != i)
            idx[k++] = j;
    }
    double *Zr = malloc(k * r * sizeof *Zr), *res = malloc(k * sizeof *res);
    double *v = malloc(k * sizeof *v);
    int rc = Zr && res && v ? KB_OK : KB_ENOMEM;
    if (!rc)
        rc = kb__bbkb_zrows(st, idx, k);
    for (size_t j = 0; !rc && j < k; j++) {
        memcpy(Zr + j * r, kb__bbkb_zrow(st, idx[j]), r * sizeof *Zr);
        res[j] = st->resid[idx[j]];
    }
    if (!rc)
        rc = kb__bbkb_row_variances(st, Zr, res, k, v);
    for (size_t j = 0; !rc && j < k; j++) {
        st->var_start[idx[j]] = v[j];
        st->vs_bound[idx[j]] = 0;
    }
    *n = rc ? 0 : k;
    free(Zr);
    free(res);
    free(v);
    return rc;
}
