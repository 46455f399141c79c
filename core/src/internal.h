/*
 * internal.h - what engines see of the library: the engine vtable, the common engine
 * base (trials, observations, repeats policy, statistics) and shared helpers.
 *
 * Invariants kept by the base (core/src/engine.c), which engines may rely on:
 *   - trials[h - 1] is the trial of handle h; handles are assigned in ask order;
 *   - obs_u / obs_y hold every observation in the order it arrived (tells and warm-start
 *     observes), in internal coordinates; obs_trial[i] is the handle it came from (0 for
 *     an observe); groups[] partitions them into distinct points (identical internal
 *     coordinates), each with its count and average y;
 *   - an engine's ask op chooses ONE point per call; the base loops. So ask(n) is the
 *     same as n calls of ask(1), which makes the event log (snapshot.c) and the daemon's
 *     trial history enough to rebuild any engine by replay;
 *   - ops->tell / ops->abandon / ops->observe run after the base recorded the event; if
 *     they fail, the base undoes its record, and the op must leave its own state as it
 *     was. Once an op (or ops->handed) succeeded nothing after it fails: the event log's
 *     room is reserved before the op (kb__log_reserve), so engine and log never part.
 */
#ifndef KB_INTERNAL_H
#define KB_INTERNAL_H

#include "kbandit.h"

#include <math.h>
#include <stdarg.h>

/* ------------------------------------------------------------ errors */

/* Fills err (if not NULL) and returns code. printf-style message. */
int kb__fail(kb_error *err, int code, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Monotonic clock in seconds. */
double kb__now(void);

/* Grows *arr (elem bytes each) to hold at least `need` elements: the capacity starts at
 * 64 and doubles. KB_ENOMEM leaves *arr and *cap as they were. (engine.c) */
int kb__grow(void **arr, size_t *cap, size_t need, size_t elem);

/* ---------------------------------------------------- Cholesky factors (chol.c) */

/* L L^T = A, lower triangular, n x n in the top-left corner of cap x cap storage,
 * row-major or column-major (colmajor); only the lower triangle is read or meaningful
 * (above it: unspecified). One jitter rule for
 * every way of building it (chol.c): a non-positive pivot^2 gets 1e-10, 1e-8, ..., 1e-2
 * times the mean diagonal of the rows being factored added to their diagonal; `jitter`
 * is the largest used in the current factor (0: none). L(i, j) is
 * L[i * cap + j] (row-major) or L[j * cap + i] (column-major); the diagonal is
 * L[i * (cap + 1)] in both. */
typedef struct kb_chol {
    double *L;
    size_t n, cap;
    int colmajor;
    double jitter;
} kb_chol;

/* What a LAPACKE return code means to a caller: KB_OK (0), KB_ENOMEM when LAPACKE could
 * not allocate its workspace or a transposed copy (LAPACK_WORK_MEMORY_ERROR,
 * LAPACK_TRANSPOSE_MEMORY_ERROR: the daemon retries such a restore, where a numerical
 * failure is the data's), else KB_ENUMERIC. */
int kb__lapack_status(int info);

/* The largest double below 1: the maximum of an option that must be < 1 (the catalogue
 * then states the bound the engine enforces). */
#define KB__BELOW_ONE 0x1.fffffffffffffp-1

void kb__chol_init(kb_chol *f, int colmajor);
void kb__chol_free(kb_chol *f);
/* Capacity of exactly `need` rows when it has fewer, the factor kept. KB_ENOMEM leaves f
 * as it was. */
int kb__chol_reserve(kb_chol *f, size_t need);
/* dst = src (same order; dst keeps its storage when large enough). KB_ENOMEM (dst
 * empty), KB_EINVAL when the orders differ. */
int kb__chol_copy(kb_chol *dst, const kb_chol *src);
/* f = chol(A) for the symmetric n x n A (row-major, leading dimension lda, lower
 * triangle read), with the jitter rule. KB_ENOMEM (f unchanged), KB_ENUMERIC (f empty). */
int kb__chol_factor(kb_chol *f, const double *A, size_t n, size_t lda);
/* Appends the row of a new last row/column of A: a (n entries) its off-diagonal part,
 * overwritten with l = L^{-1} a, ann its diagonal entry; the new pivot is the square
 * root of the Schur complement ann - l.l (plus the jitter, rule applied to the new row
 * only), which goes to *schur when not NULL. Doubles the capacity when full. KB_ENOMEM,
 * KB_ENUMERIC leave the factor as it was. */
int kb__chol_append(kb_chol *f, double *a, double ann, double *schur);
/* Appends k rows at once: A (k x (n + k), row-major, leading dimension lda) holds the
 * new rows of the symmetric matrix, [A21 | A22], A22's lower triangle read. L21 =
 * A21 L11^{-T} (dtrsm), L22 = chol(A22 - L21 L21^T) (dsyrk, dpotrf), the jitter rule on
 * the new rows (their mean diagonal as scale): level-3 work where k appends made k
 * level-2 solves (a warm start of 5,000 observations took 18 s in gp-ucb;
 * docs/BENCHMARKS.md, fifty-fifth session). Equal to k appends up to rounding, not bit
 * for bit.
 * Grows the capacity to at least n + k, doubling. KB_ENOMEM, KB_ENUMERIC leave the factor
 * as it was (A untouched). */
int kb__chol_append_rows(kb_chol *f, const double *A, size_t k, size_t lda);
/* Rows per block of kb__chol_append_points, bounding its scratch (KB_BLOCK_ROWS x n). */
#define KB_BLOCK_ROWS 256
/* Runs of fewer new points than this are appended row by row by the engines (as before
 * block appends existed, so that a stored study replays bit for bit; a block's rounding
 * differs), longer ones by kb__chol_append_points. */
#define KB_BLOCK_ROWS_MIN 32
/* Appends points P[f->n .. to) to f, the factor of k(P, P) + noise I over P's first f->n
 * points (P: `to` points of k->dim coordinates), in blocks of KB_BLOCK_ROWS rows
 * (kb__chol_append_rows). On a failure f covers the blocks it took. KB_ENOMEM,
 * KB_ENUMERIC. */
int kb__chol_append_points(kb_chol *f, const kb_kernel *k, const double *P, size_t to,
                           double noise);
/* Keeps the leading n x n block (n <= f->n): the factor of A's leading block. `jitter`
 * is kept unless n is 0 (it may then overstate the rows kept). */
static inline void kb__chol_truncate(kb_chol *f, size_t n)
{
    f->n = n;
    if (n == 0)
        f->jitter = 0.0;
}
/* L L^T + x x^T by Givens rotations from x's first nonzero entry; x (n) is destroyed. */
void kb__chol_update(kb_chol *f, double *x);
/* L L^T - x x^T by hyperbolic rotations; x is destroyed. KB_ENUMERIC when the result is
 * not positive definite as computed: the factor is then invalid (refactor). */
int kb__chol_downdate(kb_chol *f, double *x);
/* x (n) = L^{-1} x, or L^{-T} x with trans. */
void kb__chol_trsv(const kb_chol *f, int trans, double *x);
/* x = A^{-1} x. */
void kb__chol_solve(const kb_chol *f, double *x);
/* B (n x nrhs, row-major, leading dimension ldb) = L^{-1} B, or L^{-T} B with trans. */
void kb__chol_trsm(const kb_chol *f, int trans, double *B, size_t nrhs, size_t ldb);
/* Rows from..n-1 of L^{-1} B in place, B's rows 0..from-1 already holding L^{-1} B's:
 * B2 = L22^{-1} (B2 - L21 X1) (dgemm, dtrsm), what kb__chol_trsm gives those rows; for a
 * factor grown since the rows before `from` were solved. */
void kb__chol_trsm_tail(const kb_chol *f, size_t from, double *B, size_t nrhs, size_t ldb);
/* The n x n triangle of T (column-major, leading dimension ld; upper or lower) replaced
 * by its inverse, the other one untouched; LAPACK's info (> 0: a zero pivot). */
int kb__tri_inverse(double *T, size_t n, size_t ld, int upper);
/* inv (n x n, f's storage order, leading dimension n) = L^{-1} (kb__tri_inverse) in its
 * lower triangle, zeros above. KB_ENUMERIC, KB_ENOMEM. */
int kb__chol_inverse(const kb_chol *f, double *inv);
/* Each of the m rows z_i of Z (m x n, row-major, ldz) replaced by L^{-1} z_i, with inv
 * from kb__chol_inverse: a triangular multiplication, since OpenBLAS's dtrsm is 2-4x
 * slower than its dtrmm on such blocks of rows (512 x 100-450; docs/BENCHMARKS.md,
 * twenty-eighth session): a caller applying one factor to many rows inverts it once. */
void kb__chol_trmm_rows(const kb_chol *f, const double *inv, double *Z, size_t m, size_t ldz);
static inline double kb__chol_pivot(const kb_chol *f, size_t i)
{
    return f->L[i * (f->cap + 1)];
}

/* ------------------------------------------------------------- space */

/* Internal view of a space. For a finite set, `rows` are the input rows and `u` the
 * same rows scaled by the engine's input_scaling (column affine map
 * u = (x / norm - shift) / scale; dividing by norm = max |x| of the column first keeps
 * every intermediate finite for any finite input). For a box, rows == u == the current
 * pool in [0,1]^dim. */
struct kb_space {
    int finite;
    size_t n, dim;
    size_t pool_size;      /* box only */
    uint64_t generation;   /* box: incremented at each pool refresh */
    double *rows;          /* n x dim, input coordinates (owned) */
    double *u;             /* n x dim, internal coordinates (owned) */
    double *norm, *shift, *scale; /* dim each (owned); identity for boxes */
    size_t *levels;        /* box: NULL, or dim entries (kb_space_set_levels; owned) */
    unsigned char *categorical; /* box: NULL, or dim flags (owned) */
    /* box: NULL, or dim entries: log_low[j] > 0 when coordinate j's levels are the
     * integers log_low[j] + l (l < levels[j]) at their log positions
     * (kb_space_set_log_levels), 0 for equal bins (owned) */
    double *log_low;
};

kb_space *kb__space_copy(const kb_space *s);
/* Computes norm/shift/scale from the finite rows and fills u. */
int kb__space_apply_scaling(kb_space *s, kb_scaling how, kb_error *err);
/* Maps one input-coordinate point to internal coordinates (may give +-inf for a point far
 * outside the candidates' range; callers check). */
void kb__space_to_internal(const kb_space *s, const double *x, double *u);
/* Box only: draws a new pool. Half quasi-random (Halton, randomly shifted), half local
 * perturbations around the `nbest` rows of `best` (internal coordinates, best first) at
 * several trust-region sizes, scaled per dimension by `lengthscales` (NULL: isotropic;
 * space.c local_points); all quasi-random when nbest == 0, all local with all_local. */
void kb__space_refresh_pool(kb_space *s, kb_rng *rng, const double *best, size_t nbest,
                            const double *lengthscales, int all_local);
/* Moves each of the n rows (internal coordinates) onto the box's levels (no-op without). */
void kb__space_snap(const kb_space *s, double *rows, size_t n);
/* Coordinate j's level nearest to u (levels[j] > 0), and level l's position. */
size_t kb__space_level(const kb_space *s, size_t j, double u);
double kb__space_level_pos(const kb_space *s, size_t j, size_t l);

/* ---------------------------------------------- hyperparameters (hyper.c) */

/* The lengthscale of a box dimension left out of the model (engine.c, drop_hidden_dims):
 * the fit's upper bound: a correlation above 1 - 1e-6 across the box. */
#define KB_OFF_LENGTHSCALE 1e3

/* The output warp's spread in noise sds at least (output.c fit_warp). */
#define KB_WARP_NOISE_SDS 4.0

/* The initial design's size on a finite set: the observations the first fit waits for
 * (engine.c setup_fitting). */
#define KB_FINITE_DESIGN 3
/* The initial design's size on a box at most (engine.c setup_fitting). */
#define KB_DESIGN_MAX 40

/* The output warp's spread as a share of the initial design's at least (output.c
 * fit_warp). */
#define KB_WARP_DESIGN_SHARE 0.1

/* Distinct inputs one fit uses at most (kb_hyper_opts.max_rows 0), each with all its
 * repeats: a uniform sample beyond. */
#define KB_HYPER_ROWS 256

typedef struct kb_hyper_opts {
    int fix_lengthscales, fix_variance, fix_noise; /* held at their current values */
    size_t max_rows;  /* distinct inputs used by one fit (0: KB_HYPER_ROWS) */
    int starts;       /* random restarts drawn from the priors, besides the warm start */
    int max_evals;    /* objective evaluations per start (0: 80) */
} kb_hyper_opts;

/* Observations for the fit and the model's mean: n rows of dim internal coordinates and
 * their standardized values. Rows with equal inputs form groups: group_of[i] is row i's,
 * numbered 0..n_groups-1 in order of first occurrence (the engine's table of distinct
 * observed points, engine.c); group_of NULL: every row a group of its own. Not owned. */
typedef struct kb_rows {
    const double *U, *y;
    size_t n;
    const size_t *group_of;
    size_t n_groups;
} kb_rows;

/* MAP fit of k's lengthscales and variance and of *noise (those not fixed) to the rows,
 * warm-started from their current values; a group enters by its mean (exactly,
 * kb_row_set); draws restarts and the subset of groups (uniform, max_rows) from rng. On
 * failure they are unchanged. Stationary kernels only (KB_EUNSUPPORTED for linear). */
int kb__hyper_fit(kb_kernel *k, double *noise, const kb_rows *rows, const kb_hyper_opts *o,
                  kb_rng *rng, kb_error *err);
/* The rows with each group merged (hyper.c: exact for a GP likelihood and posterior): m
 * distinct inputs, each with its mean value and 1 / its count (its noise variance's
 * factor); at most max_rows of them: the `top` best by mean, then a uniform sample of the
 * others drawn from rng (rng unused when all fit). Owns U, y, inv_c. */
typedef struct kb_row_set {
    size_t m;                /* distinct inputs kept */
    double *U, *y, *inv_c;   /* m x d inputs, their mean values, 1 / their counts */
    double extra, ss;        /* over all inputs, kept or not: sum (c - 1), within sum of
                              * squares */
    double log_c;            /* over the kept inputs: sum log c */
} kb_row_set;
/* KB_ENOMEM (rs then holds nothing to free beyond kb__row_set_free), or KB_OK. */
int kb__row_set_init(kb_row_set *rs, const kb_rows *rows, size_t d, size_t max_rows,
                     size_t top, kb_rng *rng);
void kb__row_set_free(kb_row_set *rs);
/* Rows a GP posterior is built on when there are many (acq.c): all when n <= max_rows,
 * else the best quarter by y and a uniform sample of the others drawn from rng. Writes
 * the indices to idx (n entries of room), returns how many. */
size_t kb__pick_rows(const double *y, size_t n, size_t max_rows, kb_rng *rng, size_t *idx);

/* ------------------------------------------------ acquisition refinement (acq.c) */

/* Moves each of the m points P (m x dim, in [0,1]^dim) uphill on the UCB mean + width sd
 * of the exact GP with kernel k and noise variance `noise` on (U, y) (n rows, y
 * standardized; at most 256 rows are used, kb__pick_rows), by NLopt's bounded L-BFGS with
 * the kernel's analytic gradient, inside the unit cube. A point whose run fails stays
 * where it was. Deterministic. KB_ENOMEM, or KB_OK. */
int kb__acq_refine(const kb_kernel *k, double noise, const double *U, const double *y,
                   size_t n, double width, double *P, size_t m);
/* The mean of the GP with kernel k and noise variance `noise` on the rows, each group
 * merged (at most 256 groups: the best quarter by mean and a sample of the others), at
 * the m points P (m x dim, internal coordinates) into mean. KB_ENOMEM, KB_ENUMERIC
 * (K + noise I not positive definite), or KB_OK. Deterministic; no engine state is read
 * or drawn from. */
int kb__gp_mean(const kb_kernel *k, double noise, const kb_rows *rows, const double *P,
                size_t m, double *mean);
/* The UCB and its gradient (dim entries, when not NULL) at x of the GP above built on all
 * n rows; for tests. */
double kb__acq_ucb_at(const kb_kernel *k, double noise, const double *U, const double *y,
                      size_t n, double width, const double *x, double *grad);

/* The interior basis b(u) = 1/3 - the mean over k's ordered coordinates of (2 u_j - 1)^2
 * (0 without any): +1/3 at the unit cube's centre, -2/3 at its corners, mean 0 over it;
 * u_j clamped to [0, 1] (flat beyond the candidates' range: an observe() there is not
 * pushed ever lower by a quadratic that only stands for "away from the middle"). */
double kb__interior_basis(const kb_kernel *k, const double *u);
/* The posterior mean of c in y = c b(x) + g(x), g the GP with kernel k and noise variance
 * `noise`, under the prior c ~ N(KB_INTERIOR_C, 1) (Rasmussen & Williams 2006, section
 * 2.7: beta-bar of an explicit basis), on the rows with each group merged (at most 256
 * groups, as kb__gp_mean), whose y are the residuals y - c_now b(x). Returns c_now when
 * the GP does not factor, and also when out of memory, then setting *nomem to 1 (the
 * engine's flag: its ask fails). Deterministic. */
double kb__interior_coef(const kb_kernel *k, double noise, const kb_rows *rows, double c_now,
                         int *nomem);
#define KB_INTERIOR_C 1.0

/* log p(y | theta) (+ the log prior when with_prior) and its gradient (dim + 2 entries,
 * when grad is not NULL) at theta = (log l_1..log l_dim, log variance, log noise), for a
 * kernel of shape's kind, dim and choices (its values are not used). For tests;
 * -HUGE_VAL when the covariance is not positive definite. */
double kb__hyper_objective(const kb_kernel *shape, const kb_rows *rows, const double *theta,
                           double *grad, int with_prior);

/* ---------------------------------------------------- kernels (kernel.c) */

/* The kernel behind the public handle. Engines embed one by value (kb_engine.kernel) and
 * read its fields in their hot loops; callers outside the library only reach it through
 * kb_kernel_create and the setters, which keep: variance > 0, lengthscales[j] > 0, and
 * choices NULL or each entry 0 or >= 2. */
struct kb_kernel {
    kb_kernel_kind kind;
    size_t dim;
    double variance;       /* k(x, x) for stationary kernels */
    double *lengthscales;  /* dim entries (owned) */
    size_t *choices;       /* NULL (all ordered), or dim entries: 0 = ordered, c >= 2 =
                            * categorical with c choices (owned) */
    int additive;          /* stationary kernels with choices: k = variance ((1 - mix)
                            * base(r^2) + mix overlap), overlap the share of categorical
                            * coordinates on the same choice (kb__kernel_overlap) */
    double mix;            /* in [0, 1); read only when additive */
    int *nomem;            /* set to 1 when kb_kernel_matrix could not allocate and fell
                            * back to the pairwise formula, whose rounding differs: the
                            * owning engine's flag (engine.c), NULL for none. A copy of
                            * the struct reports to the same flag. */
};

/* Fills *k as kb_kernel_create does (variance 1, lengthscales 1, all ordered), for a
 * kernel held by value; release it with kb__kernel_release. */
int kb__kernel_init(kb_kernel *k, kb_kernel_kind kind, size_t dim, kb_error *err);
void kb__kernel_release(kb_kernel *k);

/* -------------------------------------------------------- config */

/* Engines read their options with kb_config_number / kb_config_string. */
int kb__config_build_kernel(const kb_config *cfg, size_t dim, kb_kernel *k, kb_error *err);
/* The unit-variance profile base(r^2) of a stationary kernel (not linear), r the
 * lengthscale-scaled distance, and its derivative with respect to r^2 in *dk_dr2 (when
 * not NULL): the one place the gradients of hyperparameter fitting and acquisition
 * refinement come from. Matern 1/2 reports 0 at r = 0, where it has no derivative. */
double kb__kernel_profile(kb_kernel_kind kind, double r2, double *dk_dr2);
/* kb__kernel_profile over r2[0..n): val[j] = base(r2[j]), slope[j] its derivative; on
 * x86-64 glibc through the vector exp (so within 4 ulp of the scalar form, not equal). */
void kb__kernel_profiles(kb_kernel_kind kind, const double *r2, size_t n, double *val,
                         double *slope);
/* Set (by test_base only, before any other thread runs) to make the kernel's loops take
 * their SSE2 path where the CPU has AVX2; read by every kernel matrix and profile. */
extern int kb__kernel_sse2_only;
/* out[j] = f(x[j]) for j < n (vecmath.c; x and out may be the same array): on x86-64 glibc
 * through libmvec, 4 lanes where the CPU has AVX2, else 2; elsewhere libm. Within 4 ulp
 * of libm; out[j] depends on x[j] alone. kb__vmath_lanes forces a width (2, or 4 where
 * the CPU has AVX2), for test_base, which checks both. */
typedef enum kb_vfun { KB_VLOG, KB_VCOS } kb_vfun;
void kb__vmath(kb_vfun f, const double *x, size_t n, double *out);
void kb__vmath_lanes(kb_vfun f, const double *x, size_t n, double *out, int lanes);
/* Width of a kernel's embedding: dim, plus c - 1 per categorical coordinate. */
size_t kb__kernel_embed_dim(const kb_kernel *k);
/* X (n x dim) embedded (n x kb__kernel_embed_dim, owned; NULL on OOM): ordered
 * coordinates as they are, categorical ones one-hot with height 1 / sqrt 2; `scaled`
 * divides each by its lengthscale. Squared distances of scaled rows are r^2. */
double *kb__kernel_embed(const kb_kernel *k, const double *X, size_t n, int scaled);

/* The choice a categorical coordinate u codes (kb_kernel.choices), 0..c-1. */
static inline size_t kb__category(double u, size_t c)
{
    double v = floor(u * (double)c);
    return v <= 0.0 ? 0 : v >= (double)(c - 1) ? c - 1 : (size_t)v;
}
/* Coordinate j's contribution to r^2 before the lengthscale: (a - b)^2 when ordered,
 * 0 or 1 (same or different choice) when categorical. */
static inline double kb__coord_d2(const size_t *choices, size_t j, double a, double b)
{
    if (choices && choices[j])
        return kb__category(a, choices[j]) != kb__category(b, choices[j]) ? 1.0 : 0.0;
    return (a - b) * (a - b);
}
/* The share of k's categorical coordinates on which x and y take the same choice (1 when
 * there are none): the additive term of an `additive` kernel. */
double kb__kernel_overlap(const kb_kernel *k, const double *x, const double *y);
/* For serialization: the i-th option of a config (common options first). */
size_t kb__config_count(const kb_config *cfg);
const kb_option_spec *kb__config_spec(const kb_config *cfg, size_t i);

/* --------------------------------------------------------- engine */

typedef struct kb_trial {
    size_t index;        /* candidate index at hand-out time */
    uint64_t generation; /* pool generation at hand-out time (boxes) */
    kb_trial_state state;
    double y;            /* internal units: the raw told value (engines standardize) */
    /* Adopted at a replay (kb_engine_ask_recorded): the engine's own choice, if it made
     * one, was abandoned, so `state` stays KB_TRIAL_ABANDONED for the engines (which read
     * only kb__trial_u, the engine's choice); kb__trial_x is the recorded point and
     * `shown` the state the caller sees. Its tell is an observation of that point, and
     * `row` is the candidate that point is (finite sets), for the repeats policy, or
     * KB_NO_ROW. */
    int adopted;
    kb_trial_state shown;
    size_t row;
} kb_trial;
#define KB_NO_ROW ((size_t)-1)

/* One figure an engine offers by name: a field of its state (e->impl), read where it
 * lives, so a figure cannot drift from what the engine computes. The type is taken from
 * the field by KB__STAT; a field of any other type does not compile. */
typedef enum kb__stat_type {
    KB__STAT_DOUBLE,
    KB__STAT_INT,
    KB__STAT_ULONG,
    KB__STAT_ULLONG,
} kb__stat_type;

typedef struct kb__stat {
    const char *name;     /* from the vocabulary of kbandit.h's kb_engine_stat */
    kb__stat_type type;
    size_t offset;        /* in the engine state */
} kb__stat;

/* The entry for `field` (a member designator, "mod.m" allowed) of engine state type T.
 * uint64_t and size_t are unsigned long or unsigned long long, as the platform has them. */
#define KB__STAT(name, T, field)                                                       \
    {name,                                                                             \
     _Generic(((T *)0)->field, double: KB__STAT_DOUBLE, int: KB__STAT_INT,             \
              unsigned long: KB__STAT_ULONG, unsigned long long: KB__STAT_ULLONG),     \
     offsetof(T, field)}

typedef struct kb_engine_ops {
    const char *name;
    const char *summary;
    const kb_option_spec *options; /* engine-specific; terminated by name == NULL */
    /* Largest space dimension the engine serves; 0 means KB_MAX_DIM. kb_engine_create
     * refuses a wider space (field "dim") before the engine sees it. */
    size_t max_dim;
    /* 1 when the engine calls kb__hyper_refit (hyperparameters = "fit" applies to it). */
    int fits_hyper;
    /* 1 when its acquisition is an upper confidence bound: on boxes the refit then leaves
     * the dimensions the noise hides out of the model (engine.c, drop_hidden_dims). */
    int ucb;
    /* Builds e->impl. Options are already validated one by one; check cross-field
     * constraints here. */
    int (*create)(kb_engine *e, kb_error *err);
    void (*destroy)(kb_engine *e);
    /* Chooses one candidate index of e->space into *index, or sets res->status to
     * KB_ASK_AWAIT_FEEDBACK / KB_ASK_EXHAUSTED (with res->awaiting) and returns 0
     * without choosing. Must skip candidates for which kb__excluded() is true. The base
     * records the trial after the op returns with a choice, then calls ops->handed.
     * A box is never exhausted while it has a point not yet handed out or told: an op
     * whose pool is spent redraws it (bbkb: ends the epoch) and chooses again, so only
     * a finite set or a fully told discrete box answers KB_ASK_EXHAUSTED (a batch that
     * outlived its pool under heavy noise stopped studies for good before). An answer
     * without a choice is not in the event log (snapshot.c): it must not change what
     * later calls do. The base answers KB_ASK_EXHAUSTED itself, without calling the op,
     * when the repeats policy excludes every point of the space (engine.c). */
    int (*ask_one)(kb_engine *e, size_t *index, kb_ask_result *res, kb_error *err);
    /* Called once the trial of `handle` exists (hallucinate it here). May be NULL. */
    int (*handed)(kb_engine *e, uint64_t handle, kb_error *err);
    int (*tell)(kb_engine *e, uint64_t handle, kb_error *err);
    int (*abandon)(kb_engine *e, uint64_t handle, kb_error *err);
    /* The new observation is the last row of obs_u / obs_y. It may only record that and
     * leave the work to the next op, so that a run of observes (a warm start) is taken
     * as one block (gp_ucb.c, gp_ts.c); a failure of that work fails the op doing it.
     * What the op would refuse (a cache limit: gp_ts.c) it refuses here. */
    int (*observe)(kb_engine *e, kb_error *err);
    /* U is n x dim in internal coordinates. May be NULL (no posterior). */
    int (*posterior)(kb_engine *e, const double *U, size_t n, double *mean, double *sd,
                     kb_error *err);
    /* The figures kb_engine_stat offers by name (KB__STAT entries), terminated by
     * name == NULL; NULL for none. */
    const kb__stat *stats;
} kb_engine_ops;

/* One distinct point: the observations at obs_u[first] (exact coordinate equality);
 * kept by engine.c, read by output.c's statistics. */
struct kb_obs_group {
    size_t first;  /* its first observation */
    size_t count;  /* observations at it */
    double ymean;  /* their average y (running: y / n - mean / n, no overflow) */
    size_t next;   /* next group in the hash chain, or NO_GROUP (engine.c) */
    int varies;    /* its observations hold two different values */
};

struct kb_engine {
    const kb_engine_ops *ops;
    kb_config *cfg;      /* owned copy */
    kb_space *space;     /* owned copy, scaled */
    kb_kernel kernel;    /* built from cfg for space->dim */
    kb_rng rng;          /* seeded from cfg "seed"; engines draw from it */
    void *impl;          /* engine state, owned by the engine's ops */

    kb_trial *trials;    /* n_trials, handle h at [h - 1] */
    /* Trial coordinates live in chunks of KB_TRIAL_CHUNK rows that never move, because
     * kb_point.x handed to callers must stay valid: use kb__trial_x / kb__trial_u. */
    double **x_chunks;   /* input coordinates (returned to callers) */
    double **u_chunks;   /* internal coordinates */
    size_t n_trials, cap_trials, n_chunks;

    double *obs_u;       /* n_obs x dim */
    double *obs_y;       /* n_obs, raw values as told */
    uint64_t *obs_trial; /* n_obs, handle or 0 */
    size_t *obs_group;   /* n_obs, the index in groups of each observation's point */
    size_t n_obs, cap_obs;

    /* Distinct observed points, for the output standardization (kb__output_stats) and
     * the fit's and the model's merged repeats (kb_rows):
     * observations with identical internal coordinates form one group, kept in a
     * chained hash table over obs_u (engine.c). */
    struct kb_obs_group *groups;
    size_t n_groups, cap_groups;
    size_t *group_head;  /* n_heads chain heads (a power of two, >= n_groups) */
    size_t n_heads;
    double undo_ymean;   /* the last observation's group mean before it joined */
    int undo_varies;     /* and its group's `varies` flag (engine.c) */
    /* Evidence that the objective is deterministic (kb__looks_deterministic): groups of
     * three or more observations of one value, and groups holding two values. */
    size_t n_same3, n_varied;
    int standardize;     /* output_scaling != "none" */
    int warp;            /* output_scaling == "warp" and hyperparameters fitted */
    int out_valid;       /* the out_ fields below describe the current data */
    uint64_t out_gen;    /* bumped at each recomputation of the out_ fields: a value
                          * scaled under an older one may be stale (gp_ts.c's beta) */
    double out_mean, out_sd;     /* of the (warped) group means */
    double *out_sorted;  /* n_groups group means, ascending (warp only) */
    size_t cap_sorted;
    double out_median, out_spread; /* the warp's centre and its spread (fit_warp) */
    double fit_noise_sd; /* the last fit's noise sd in y's own units (sqrt(noise) times
                          * the output sd that fit saw), 0 before the first fit; the
                          * warp's spread is at least KB_WARP_NOISE_SDS of it */

    int repeats;         /* 0 allow, 1 no_pending, 2 never */
    /* A box of int and categorical parameters only: its pool repeats points, so each
     * pool row stands for the first row of its point (pool_canon, rebuilt with every
     * pool by kb__pool_reset_flags through the chains pool_next / pool_heads), whose
     * flags below count the point's trials. NULL for every other space. */
    size_t *pool_canon, *pool_next, *pool_heads;
    size_t n_pool_heads;
    int repeats_auto;    /* finite set, repeats unset: never once the values look
                          * deterministic (kb__excluded) */
    uint32_t *cand_pending;  /* per candidate: pending trials on it */
    unsigned char *cand_told;/* per candidate: told at least once */

    uint64_t n_pending, n_tells, n_abandons, n_observed;
    /* An allocation failed in a helper that cannot report it and would otherwise go on
     * with a different result (a pool left unrefined, the interior prior's height kept, a
     * kernel matrix by its fallback, kb_kernel.nomem): the next ask fails with KB_ENOMEM
     * (ask_point, engine.c), and so does a restore (kb_engine_restore), so that a replay
     * under memory pressure never continues from a state the original run did not have
     * (the daemon rebuilds a study whose ask ran out of memory). */
    int nomem;
    uint64_t n_adopted;         /* adopted trials (kb_trial) */
    uint64_t n_adopted_pending; /* those the caller still has pending */
    struct kb_log *log;  /* event log for snapshots (snapshot.c) */

    /* Hyperparameter fitting (kb__hyper_refit): on unless hyperparameters = "fixed".
     * The next fit is due once n_obs >= fit_next, a schedule of the call sequence only,
     * so a replayed engine fits at the same points; fit_rng is the fits' own stream (the
     * engine's choices under "fixed" do not move). noise is the fitted noise variance
     * (engines that fit take their lambda from it). */
    int fit_on;
    kb_hyper_opts fit_opts;
    size_t fit_next, design_n;
    size_t design_rows[KB_FINITE_DESIGN]; /* finite sets: the design's candidates */
    uint64_t n_fits;
    kb_rng fit_rng;
    double noise;
    double *fit_ls;      /* boxes with fitted lengthscales: the fit's own values, before
                          * kb__hyper_refit drops the dimensions the noise hides from
                          * kernel.lengthscales; NULL otherwise */
    /* The fits a snapshot recorded, queued by kb_engine_restore while it replays and
     * applied by kb__hyper_refit in order (fit_queue_head: the next one); empty outside
     * a restore. Owned. */
    struct kb_fit_record *fit_queue;
    size_t fit_queued, fit_queue_head, fit_queue_cap;
    /* The interior prior mean c b(u) (kb__prior_mean): on finite sets with fitting on,
     * prior_mean "auto" and unit input scaling, prior_basis holds b at every candidate
     * and prior_c the coefficient of the last fit (KB_INTERIOR_C before it); NULL and 0
     * otherwise (a constant prior mean, the standardized outputs' 0). */
    double *prior_basis;
    double prior_c;
};

#define KB_TRIAL_CHUNK 1024

/* Coordinates of the trial with handle h (1 <= h <= n_trials). */
static inline double *kb__trial_x(const kb_engine *e, uint64_t h)
{
    size_t i = (size_t)(h - 1);
    return e->x_chunks[i / KB_TRIAL_CHUNK] + (i % KB_TRIAL_CHUNK) * e->space->dim;
}
static inline double *kb__trial_u(const kb_engine *e, uint64_t h)
{
    size_t i = (size_t)(h - 1);
    return e->u_chunks[i / KB_TRIAL_CHUNK] + (i % KB_TRIAL_CHUNK) * e->space->dim;
}

/* The row whose flags (cand_pending, cand_told) stand for candidate i's point: i itself
 * but on a discrete box (kb_engine.pool_canon). */
static inline size_t kb__pool_point(const kb_engine *e, size_t i)
{
    return e->pool_canon ? e->pool_canon[i] : i;
}

/* Whether the told values look deterministic: some point was told three times with one
 * value and no point with two different values. Exact equality is the test: repeated
 * measurements of a noisy continuous objective differ in their last bits, while a
 * simulation or a lookup returns the same double. Three, not two, so that a noisy
 * objective with coarse values (an accuracy over a small validation set) needs two
 * coincidences in a row on one point to pass for deterministic. */
static inline int kb__looks_deterministic(const kb_engine *e)
{
    return e->n_same3 > 0 && e->n_varied == 0;
}

/* The repeats policy in force: 0 allow, 1 no_pending, 2 never. On a finite set with
 * `repeats` unset, repeats are allowed until the values look deterministic, then not
 * (as "never"): a known point's value again teaches nothing, and an engine whose UCB
 * prefers a told arm to every untold one would otherwise hand out that one arm for the
 * rest of the study (a deterministic catalogue's run locked on a suboptimal row;
 * docs/BENCHMARKS.md, forty-seventh session). kb__excluded: whether it forbids handing
 * out candidate i now. */
static inline int kb__repeats_policy(const kb_engine *e)
{
    return e->repeats == 0 && e->repeats_auto && kb__looks_deterministic(e) ? 2 : e->repeats;
}

static inline int kb__excluded(const kb_engine *e, size_t i)
{
    int repeats = kb__repeats_policy(e);
    if (repeats == 0)
        return 0;
    i = kb__pool_point(e, i);
    if (e->cand_pending[i])
        return 1;
    return repeats == 2 && e->cand_told[i];
}

/* Output standardization y_std = (y - mean) / sd, over distinct points: observations
 * (tells and observes) at identical internal coordinates count once, with their average
 * y; mean and sd (n - 1) are taken over those averages. sd = 1 below two distinct points
 * or when degenerate; mean = 0, sd = 1 when output_scaling is "none". Per evaluation,
 * the sd collapses to the noise level while a run repeats one arm, which inflates the
 * standardized gaps to the other arms and locks the run onto that arm (bbkb/dictionary.c, on
 * abalone). O(distinct points) after a new observation, O(1) otherwise (cached). */
void kb__output_stats(kb_engine *e, double *mean, double *sd);
/* The value y as a GP engine models it: standardized as above, after the half-rank warp
 * when e->warp (output.c, warp_tail). Engines whose model is affine in y and that never
 * warp (pi-gp-ucb: fits_hyper = 0) may use kb__output_stats instead. */
double kb__output_y(kb_engine *e, double y);
/* The prior mean of the GP engines at internal coordinates u (at candidate i: prior_at),
 * in the units of kb__output_y: c b(u) with the interior basis b (acq.c) where
 * e->prior_basis is set, else 0 (engine.c, kb__hyper_refit, says why). An engine models
 * model_y(i) = output_y(obs_y[i]) - prior_mean(obs_u[i]) by its GP and adds the prior
 * mean back at every candidate it scores. */
double kb__prior_mean(const kb_engine *e, const double *u);
static inline double kb__prior_at(const kb_engine *e, size_t i)
{
    return e->prior_basis ? e->prior_c * e->prior_basis[i] : 0.0;
}
double kb__model_y(kb_engine *e, size_t i);

/* Whether a hyperparameter refit is due (fitting on and enough new observations). */
static inline int kb__hyper_due(const kb_engine *e)
{
    return e->fit_on && e->n_obs >= e->fit_next;
}
/* Refits e->kernel and e->noise to the observations (outputs standardized as the engines
 * see them; at most fit_opts.max_rows distinct inputs, KB_HYPER_ROWS by default, the
 * best and a sample of the rest: hyper.c) and schedules the next fit. Engines call it where their model may
 * change (before an ask, at a batch or epoch start) when kb__hyper_due(), then rebuild
 * what depends on the kernel and the noise. A failed fit keeps the previous values. */
int kb__hyper_refit(kb_engine *e, kb_error *err);
/* The exploration width an engine uses, in one meaning for every engine (the multiplier
 * of the Bayesian posterior sd in a UCB, of the sample's spread in Thompson sampling): the
 * `width` option when set; else, with fitted hyperparameters, `fitted` (KB_WIDTH_UCB for
 * UCB engines, 1 for Thompson sampling: a plain posterior sample); else the engine's
 * theoretical width `theory` (the paper's, converted to that meaning by the engine). */
double kb__width(const kb_engine *e, double theory, double fitted);
#define KB_WIDTH_UCB 2.0

/* With fitting on, the initial design (before the first fit) hands out a box pool's
 * quasi-random rows in order, on a finite set the candidates design_rows, while the
 * trials and warm-start observations together number fewer than design_n. Sets *index
 * and returns 1 while it applies. */
int kb__design_index(const kb_engine *e, size_t *index);
/* A candidate drawn uniformly among those kb__excluded allows (one draw of e->rng), in
 * *index; 0 when none is allowed (no draw). */
int kb__uniform_allowed(kb_engine *e, size_t *index);

/* The choice a floor would give the next pool to: 1 + j x 4 + l for choice l of
 * categorical coordinate j, 0 for none (finite sets, floors off, every choice at its
 * floor). Engines whose pool lasts many asks (gp-ucb, gp-bucb) redraw it when this key
 * differs from the key their pool was drawn with, so a floor holds the pool only until
 * it is met. */
size_t kb__starved_choice(const kb_engine *e, double choice_floor);

/* An engine's rules for its box pools (engine.c): the options' values (choice_floor;
 * climb_after, 0 in the engines without that option), the key of the starved choice the
 * current pool was drawn for, and the pools each rule took (the figures
 * choice_floor_pools and climb_pools). bbkb redraws its pool at every epoch; the engines
 * whose pool lasts many asks (gp-ucb, gp-bucb, gp-ts, sgp-ts) also redraw it when
 * kb__pool_rules_due. */
typedef struct kb__pool_rules {
    double choice_floor;
    size_t climb_after;
    size_t key;
    uint64_t floor_pools, climb_pools;
} kb__pool_rules;

/* Is a redraw due because a floor starts, stops or moves to another choice? */
int kb__pool_rules_due(const kb_engine *e, const kb__pool_rules *r);

/* Called by box-space engines at resparsification: refreshes the pool around the best
 * observations and resets the per-candidate repeat counters for the new pool. With
 * refine (and fitted hyperparameters), the pool's last rows are the best points moved
 * uphill on the fitted GP's UCB (acq.c): gp-ucb / gp-bucb ask for it; on the tuning
 * functions it made bbkb worse (docs/BENCHMARKS.md). Under r's rules (NULL: none) a
 * categorical choice tried less than its floor gets the whole pool (engine.c,
 * starved_choice), or else a stalled noise-free run's pool climbs from a second basin
 * (climb_center); r records the key and counts the pool. */
void kb__refresh_pool(kb_engine *e, int refine, kb__pool_rules *r);
/* After a box's pool was drawn: no candidate pending or told, except on a discrete box
 * (kb_engine.pool_canon), where a point already told starts told, and a point pending
 * from an earlier pool starts pending until the next pool (told or abandoned), so that
 * repeats = never holds for points rather than rows and a fully told discrete box is
 * exhausted. Every engine that draws a pool calls this after it. */
void kb__pool_reset_flags(kb_engine *e);

/* The choice_floor option of the engines that have choice floors (engine.c), with its
 * default: 2 where it was judged on the held-out mixed spaces and kept (bbkb, bkb,
 * gp-ucb), 0 (off) where a tuning or held-out function came out decided worse (gp-bucb,
 * gp-ts, sgp-ts; the Thompson engines do not drop a categorical the noise hides, so its
 * floors stay on there). docs/BENCHMARKS.md, fortieth session. */
#define KB__CHOICE_FLOOR_OPTION(def)                                                       \
    {"choice_floor", KB_OPT_NUMBER, 0, INFINITY, 0, def, NULL, NULL,                       \
     "box spaces with categorical parameters of 2-4 choices: a choice tried fewer than "  \
     "choice_floor x 2 sqrt(t ln c / ((e - 1) c)) times in t trials (c choices; EXP3's "  \
     "uniform draws, at most t / 2c) gets the candidate pool to itself (bbkb / bkb: the " \
     "next epoch's; the others: until it reaches that floor), unless the noise hides "     \
     "that parameter (UCB engines; core/src/engine.c, starved_choice); 0: off"}

/* ------------------------------------------------------- registry */

const kb_engine_ops *kb__engine_lookup(const char *name);

/* One line per engine; defined in each engine's file. */
extern const kb_engine_ops kb_engine_random;
extern const kb_engine_ops kb_engine_bbkb;
extern const kb_engine_ops kb_engine_bkb;
extern const kb_engine_ops kb_engine_gp_ucb;
extern const kb_engine_ops kb_engine_gp_bucb;
extern const kb_engine_ops kb_engine_gp_ts;
extern const kb_engine_ops kb_engine_sgp_ts;
extern const kb_engine_ops kb_engine_pi_gp_ucb;

/* pi-GP-UCB introspection, for tests (core/engines/pi_gp_ucb.c). Cells are numbered
 * 0..kb__pi_n_cells()-1 in the current cover; numbers change when a cell splits. */
typedef struct kb_pi_cell {
    const double *lo;   /* lower corner (d entries, borrowed) */
    double side;        /* rho_A */
    int level;          /* splits from an initial cell */
    size_t n_told;      /* |D^A|, observations with multiplicity */
    size_t n_pending;   /* hand-outs hallucinated in this cell */
    double gamma;       /* 1/2 log|I + K^A / alpha| over the cell's observations */
    double alpha;       /* the engine's regularization */
} kb_pi_cell;
size_t kb__pi_n_cells(const kb_engine *e);
size_t kb__pi_n_created(const kb_engine *e); /* cells ever created, initial ones included */
void kb__pi_cell(const kb_engine *e, size_t i, kb_pi_cell *out);
size_t kb__pi_locate(const kb_engine *e, const double *u); /* cell holding u (internal) */
/* The sd of every candidate as the next ask scores it (stale leaves refreshed, through
 * their variance caches), and the doubles those caches hold. */
int kb__pi_candidate_sd(kb_engine *e, double *sd, size_t *cache_doubles, kb_error *err);

/* gp-ucb / gp-bucb (engines/gp_ucb.c), for tests: the incrementally maintained mean and
 * variance of every candidate (brought up to date first, as the next ask would) and
 * gamma = 0.5 ln det(I + K / lambda) over the rows. */
int kb__gp_candidate_posterior(kb_engine *e, double *mean, double *var, double *gamma);

/* bbkb / bkb (engines/bbkb/bbkb.c), for tests: the current dictionary, *m rows of
 * space->dim internal coordinates in slot order (borrowed; valid until the next ask,
 * which may resparsify); NULL with *m = 0 for another engine. */
const double *kb__bbkb_dictionary(const kb_engine *e, size_t *m);
/* bbkb / bkb, for tests: W (m x *r, row-major, borrowed like kb__bbkb_dictionary's S),
 * z(x) = W^T k_S(x); its nonzero rows are the dictionary points the embedding keeps
 * (bbkb/embedding.c). NULL with *r = 0 for another engine. */
const double *kb__bbkb_embedding(const kb_engine *e, size_t *r);
/* bbkb / bkb, for tests: sigma~^2_start of every candidate as the engine keeps it for
 * its choices (space->n entries, borrowed, valid until the next ask), with *err_bound
 * its error bound (0 unless the epoch started by the low-rank update, bbkb/low_rank.c),
 * except where (*bounded)[i]: there only an upper bound (a box epoch's start,
 * bbkb/start_bound.c); NULL for another engine or before the first epoch. */
const double *kb__bbkb_start_variances(const kb_engine *e, double *err_bound,
                                       const unsigned char **bounded);
/* bbkb / bkb: sigma~^2_start of trial h's point as the epoch's model kept it for the
 * closing variances (bbkb_internal.h, row_var; read by bbkb/dictionary.c, checked by the
 * tests); NAN when it kept none. */
double kb__bbkb_kept_variance(const kb_engine *e, uint64_t h);
/* bbkb / bkb, for tests: how far the UCB heap's variances break their invariant
 * (bbkb/selection.c: var[i] >= sigma~^2_t(x_i), equal where current), relative to each
 * exact value computed afresh; 0 when they hold (or before an epoch, or while an abandon
 * awaits the refresh), NAN for another engine. */
double kb__bbkb_heap_violation(kb_engine *e);

/* ------------------------------------------------------- snapshot */

struct kb_log;
struct kb_log *kb__log_new(void);
void kb__log_free(struct kb_log *log);
/* Room for the next event of an engine of `dim` coordinates: the base calls it before an
 * op changes the engine, so that logging the op afterwards cannot fail (an op that
 * succeeded is not undone, internal.h top). KB_ENOMEM leaves the log as it was. */
int kb__log_reserve(struct kb_log *log, size_t dim);
/* An ask, with the point it handed out (format 3). */
int kb__log_ask(struct kb_log *log, const double *x, size_t dim);
int kb__log_tell(struct kb_log *log, uint64_t handle, double y);
int kb__log_abandon(struct kb_log *log, uint64_t handle);
int kb__log_observe(struct kb_log *log, const double *x, size_t dim, double y);

/* A hyperparameter fit's outcome (kb__hyper_refit): what kb__hyper_fit and
 * kb__interior_coef left in the kernel, the noise and prior_c, and fit_rng after them.
 * Snapshots record one per fit (format 5), and a restore applies each where the replay
 * fits again instead of fitting: half of a bbkb study's restore was its fits (fifty-eighth
 * session). The replay reaches each fit with the same data, so the values are the ones a
 * fit would find; a record a restore does not reach at its n_obs (another kbandit, whose
 * fits come elsewhere) is passed over and that fit is made. */
typedef struct kb_fit_record {
    uint64_t n_obs;        /* e->n_obs when it was made */
    int32_t rc;            /* kb__hyper_fit's result (a numerical failure keeps the values) */
    double variance, noise, mix, prior_c;
    kb_rng rng;            /* fit_rng after the fit */
    double *lengthscales;  /* kernel.dim values before hidden dimensions drop; owned */
} kb_fit_record;
/* Logs a fit, in room of its own: the event the current op logs next keeps the room
 * kb__log_reserve gave it. KB_ENOMEM leaves the log as it was (a restore then fits). */
int kb__log_fit(struct kb_log *log, const kb_fit_record *r, size_t kdim, size_t dim);
/* Empties e's queue of recorded fits. */
void kb__fit_queue_clear(kb_engine *e);

#endif /* KB_INTERNAL_H */
