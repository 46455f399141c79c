/*
 * kbandit.h - the one public header of libkbandit, the Gaussian-process bandit core.
 *
 * This file contains the whole public API: error codes and the caller-owned error
 * struct, the deterministic RNG, kernels, search spaces, engine configuration, the
 * ask/tell engine interface and its statistics (kb_stats: the counters every engine has;
 * kb_engine_stat: an engine's own figures by name). The library knows nothing of HTTP
 * or SQLite.
 *
 * Conventions (see docs/ARCHITECTURE.md):
 *   - every fallible call returns 0 (KB_OK) or a negative KB_E* code and, when the
 *     caller passes a kb_error, fills it with the code, the offending field and a
 *     message; filling an error never allocates;
 *   - *_new / *_create return an owned object, *_get borrows, *_take steals;
 *     *_free(NULL) is a no-op;
 *   - engines maximize. Minimization is the caller's business (the daemon negates).
 *   - a kb_engine is not thread-safe: one thread at a time per engine (the daemon holds
 *     a per-study lock). Distinct engines may be used from distinct threads at once.
 */
#ifndef KBANDIT_H
#define KBANDIT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KB_VERSION_STRING "0.1.0" /* the one place: the Makefile and the daemon read it */

/* What libkbandit exports: it is built with -fvisibility=hidden, so everything else
 * (internal.h's kb__ functions, the engine vtables) stays inside the library. */
#if defined(__GNUC__)
#define KB_API __attribute__((visibility("default")))
#else
#define KB_API
#endif

/* ------------------------------------------------------------------ errors */

enum {
    KB_OK = 0,
    KB_EINVAL = -1,       /* invalid argument or configuration value */
    KB_ENOMEM = -2,       /* allocation failed */
    KB_ENUMERIC = -3,     /* numerical failure (not positive definite, NaN produced) */
    KB_ESTATE = -4,       /* call not valid in the current state (e.g. tell twice) */
    KB_ENOTFOUND = -5,    /* unknown engine, kernel, option or handle */
    KB_ECORRUPT = -6,     /* snapshot bytes malformed or from another version */
    KB_EUNSUPPORTED = -7, /* valid request this engine/space cannot serve */
    KB_ERANGE = -8,       /* value out of its allowed range */
};

#define KB_ERROR_FIELD_MAX 64
#define KB_ERROR_MESSAGE_MAX 256

/* Caller-owned; filled by failing calls. `field` names the offending configuration
 * option or argument ("lengthscale", "candidates[3][1]", ...), empty when none. */
typedef struct kb_error {
    int code;
    char field[KB_ERROR_FIELD_MAX];
    char message[KB_ERROR_MESSAGE_MAX];
} kb_error;

/* Stable lower-case name of a code ("invalid", "not_found", ...). Never NULL. */
KB_API const char *kb_strerror(int code);

/* --------------------------------------------------------------------- RNG */

/* xoshiro256** with a splitmix64 seeder. The whole state is these four words, so a
 * generator is serialized by copying the struct. Same seed, same calls, same outputs. */
typedef struct kb_rng {
    uint64_t s[4];
} kb_rng;

KB_API void kb_rng_seed(kb_rng *rng, uint64_t seed);
KB_API uint64_t kb_rng_u64(kb_rng *rng);
KB_API double kb_rng_uniform(kb_rng *rng);           /* in [0, 1), 53 random bits */
KB_API uint64_t kb_rng_below(kb_rng *rng, uint64_t n); /* uniform in [0, n), n > 0, unbiased */
KB_API double kb_rng_normal(kb_rng *rng);            /* standard normal */

/* ----------------------------------------------------------------- kernels */

typedef enum kb_kernel_kind {
    KB_KERNEL_RBF = 0,     /* exp(-r^2 / 2), r = ||(x - y) / l|| */
    KB_KERNEL_MATERN12,    /* exp(-r) */
    KB_KERNEL_MATERN32,    /* (1 + sqrt3 r) exp(-sqrt3 r) */
    KB_KERNEL_MATERN52,    /* (1 + sqrt5 r + 5 r^2 / 3) exp(-sqrt5 r) */
    KB_KERNEL_LINEAR,      /* x . y / l^2 (per-dimension l allowed) */
} kb_kernel_kind;

/* A kernel (opaque; owned by whoever created it): variance * base(x, y). It is created
 * with what never changes, its kind and dimension, and starts with variance 1, every
 * lengthscale 1 and every coordinate ordered; the setters change those, and a failed
 * setter leaves the kernel as it was.
 * A categorical coordinate (choices[j] = c >= 2) codes choice i as any value in the bin
 * [i / c, (i + 1) / c) and enters r^2 as 0 (same choice) or 1 / l_j^2 (different
 * choices): an exchangeable kernel, the same as a one-hot coding whose c coordinates
 * share one lengthscale, so the order of the choices does not matter. */
typedef struct kb_kernel kb_kernel;

/* *out is the new kernel, or NULL on failure: KB_EINVAL (field "kind") for a kind not in
 * kb_kernel_kind, KB_ERANGE (field "dim") unless 1 <= dim <= KB_MAX_DIM, KB_ENOMEM. */
KB_API int kb_kernel_create(kb_kernel_kind kind, size_t dim, kb_kernel **out, kb_error *err);
KB_API void kb_kernel_free(kb_kernel *k);
KB_API size_t kb_kernel_dim(const kb_kernel *k);
/* variance > 0 and finite, else KB_ERANGE (field "variance"). */
KB_API int kb_kernel_set_variance(kb_kernel *k, double variance, kb_error *err);
/* dim entries, each > 0 and finite, else KB_ERANGE (field "lengthscales[j]"). */
KB_API int kb_kernel_set_lengthscales(kb_kernel *k, const double *lengthscales,
                                      kb_error *err);
/* NULL (all ordered), or dim entries: 0 = ordered, c >= 2 = categorical with c choices;
 * KB_EINVAL (field "choices[j]") for c = 1, KB_ENOMEM. */
KB_API int kb_kernel_set_choices(kb_kernel *k, const size_t *choices, kb_error *err);

/* Parses "rbf" (alias "gaussian"), "matern12", "matern32", "matern52", "linear". */
KB_API int kb_kernel_kind_parse(const char *name, kb_kernel_kind *out);
KB_API const char *kb_kernel_kind_name(kb_kernel_kind kind);

/* out[i * m + j] = k(X[i], Y[j]) for X (n x dim) and Y (m x dim), both row-major.
 * Uses BLAS gemm for the inner products. */
KB_API void kb_kernel_matrix(const kb_kernel *k, const double *X, size_t n,
                      const double *Y, size_t m, double *out);
KB_API double kb_kernel_eval(const kb_kernel *k, const double *x, const double *y);
/* k(x, x) for each row of X. */
KB_API void kb_kernel_diag(const kb_kernel *k, const double *X, size_t n, double *out);

/* ------------------------------------------------------------ search space */

typedef struct kb_space kb_space;

typedef enum kb_scaling {
    KB_SCALE_UNIT = 0,     /* each column min-max to [0, 1] (default) */
    KB_SCALE_STANDARDIZE,  /* each column to zero mean, unit variance */
    KB_SCALE_NONE,         /* used as given */
} kb_scaling;

KB_API int kb_scaling_parse(const char *name, kb_scaling *out);

/* Size limits of a space, far above real use, so that no input can ask for an absurd
 * allocation (BLAS also indexes with int). */
#define KB_MAX_DIM 1024
#define KB_MAX_POINTS ((size_t)1 << 26) /* n * dim: 512 MiB per copy of the points */
#define KB_MAX_POOL 1000000                     /* pool size of a box */
/* pool_size x dim of a box. A box holds its pool twice (rows, u) and engines keep more
 * per pool point, so this caps a box study near 64 MiB plus its engine: 65,536 points of
 * 1,000 dimensions (within KB_MAX_POINTS) took a daemon from 229 MB to 1.17 GB RSS on
 * one ask and slowed every restore (issue 16). 2,048 points (the default) x 1,024
 * dimensions is half of it. */
#define KB_MAX_POOL_POINTS ((size_t)1 << 22)
/* Choices of one categorical coordinate: each is a coordinate of the kernel's one-hot
 * embedding, so a larger count asked random features and embeddings for absurd (and,
 * through a snapshot's levels, overflowing) allocations. */
#define KB_MAX_CHOICES 10000
/* Values of one integer coordinate: (i + 1/2) / L stays distinct in a double. */
#define KB_MAX_LEVELS ((size_t)1 << 53)
/* Most values a log-scale integer coordinate may take (kb_space_set_log_levels). */
#define KB_MAX_LOG_LEVELS 100000

/* A finite candidate set: n rows of dim numbers (row-major, copied). Rejects n == 0,
 * dim == 0, dim > KB_MAX_DIM, n * dim > KB_MAX_POINTS and non-finite entries (field
 * "candidates[i][j]"). */
KB_API kb_space *kb_space_new_finite(const double *rows, size_t n, size_t dim, kb_error *err);

/* The unit cube [0,1]^dim searched through a candidate pool of pool_size points
 * (quasi-random points plus local perturbations around the best observed points),
 * drawn again from the seed by kb_engine_create (its copy's first pool) and refreshed by
 * the engines at each resparsification. 1 <= pool_size <= KB_MAX_POOL and
 * pool_size x dim <= KB_MAX_POOL_POINTS (else KB_ERANGE, field "pool_size"). */
KB_API kb_space *kb_space_new_box(size_t dim, size_t pool_size, kb_error *err);

/* Box only: coordinates that take a few values. levels[j] = 0: continuous; L >= 1: the
 * coordinate takes the L values (i + 1/2) / L, the centres of L equal bins (an integer
 * parameter, or a categorical's choices; L = 1: a one-value parameter at 1/2), and pool
 * points are placed on them;
 * categorical[j] != 0 (with L >= 2): the values are unordered choices, compared by
 * identity in the kernel (kb_kernel_set_choices), so their order changes nothing. NULL
 * arrays mean all 0. Copies the arrays and redraws the pool. KB_EINVAL (field
 * "levels[j]") for a categorical with fewer than 2 or more than KB_MAX_CHOICES values,
 * KB_ERANGE (same field) for more than KB_MAX_LEVELS levels, KB_EUNSUPPORTED for a
 * finite set. */
KB_API int kb_space_set_levels(kb_space *space, const size_t *levels, const unsigned char *categorical,
                        kb_error *err);
/* The position in [0, 1] of a log-scale value v in [low, high] (low > 0): (log v - log
 * low) / (log high - log low), clamped; 0.5 when low == high. What a caller mapping a
 * log-scale integer parameter to the unit cube must use, so that its values fall on the
 * levels of kb_space_set_log_levels bit for bit. */
KB_API double kb_log_level_pos(double low, double high, double v);

/* Box only: coordinates that are log-scale integers. For each j with low[j] > 0 (an
 * integer >= 1), coordinate j, which kb_space_set_levels gave levels[j] = n >= 2
 * (2 <= n <= KB_MAX_LOG_LEVELS) and not categorical, takes the n integers low[j] ...
 * low[j] + n - 1 at their positions kb_log_level_pos(low[j], low[j] + n - 1, v) instead
 * of n equal bins' centres; a point between two positions belongs to the nearer (the
 * lower at a tie). low[j] = 0, or low NULL: equal bins. Redraws the pool.
 * kb_space_set_levels clears these. KB_EINVAL (field "levels[j]") when a double cannot
 * tell the positions apart (values past about 1e13) or the coordinate has no such
 * levels, KB_EUNSUPPORTED for a finite set. */
KB_API int kb_space_set_log_levels(kb_space *space, const double *low, kb_error *err);

KB_API void kb_space_free(kb_space *space);
KB_API size_t kb_space_dim(const kb_space *space);
KB_API int kb_space_is_finite(const kb_space *space);
/* Number of rows of the finite set, or the pool size of a box. */
KB_API size_t kb_space_size(const kb_space *space);

/* --------------------------------------------------------- configuration */

/* A configuration is a named engine plus a set of named options, checked against the
 * engine's option table when set: unknown names, wrong types and out-of-range values
 * are rejected with the option's name in err->field. Options common to all engines:
 *   seed (int, 0), kernel ("rbf"), lengthscale (>0, 1.0), lengthscales (vector, one per
 *   dimension; overrides lengthscale), kernel_variance (>0, 1.0),
 *   input_scaling ("unit" | "standardize" | "none"; "unit"),
 *   output_scaling ("auto" | "warp" | "standardize" | "none"; "auto": "warp" on boxes,
 *   "standardize" on finite sets; "warp": standardize, and where hyperparameters are
 *   fitted also compress the tail of the worse half of the values),
 *   repeats ("allow" | "no_pending" | "never"; "allow"),
 *   pool_size (box spaces only, >= 1; 2048),
 *   categorical_kernel ("additive" | "joint"; "additive": see README, fitted
 *   hyperparameters).
 * Engine-specific options are listed by kb_engine_options(). */
typedef struct kb_config kb_config;

typedef enum kb_option_type {
    KB_OPT_NUMBER = 0,
    KB_OPT_INTEGER,
    KB_OPT_STRING,
    KB_OPT_VECTOR,
} kb_option_type;

typedef struct kb_option_spec {
    const char *name;
    kb_option_type type;
    double min, max;          /* inclusive bounds for NUMBER/INTEGER (and VECTOR entries) */
    int min_exclusive;        /* 1 when the value must be > min */
    double def_number;        /* default for NUMBER/INTEGER */
    const char *def_string;   /* default for STRING */
    const char *const *choices; /* NULL-terminated allowed strings, or NULL */
    const char *help;
} kb_option_spec;

KB_API kb_config *kb_config_new(const char *engine, kb_error *err);
KB_API kb_config *kb_config_copy(const kb_config *cfg);
KB_API void kb_config_free(kb_config *cfg);
KB_API const char *kb_config_engine(const kb_config *cfg);
KB_API int kb_config_set_number(kb_config *cfg, const char *name, double value, kb_error *err);
KB_API int kb_config_set_string(kb_config *cfg, const char *name, const char *value, kb_error *err);
KB_API int kb_config_set_vector(kb_config *cfg, const char *name, const double *v, size_t n,
                         kb_error *err);
/* Getters return the set value or the option's default; unknown names abort in debug
 * builds (they are programming errors inside the library). */
KB_API double kb_config_number(const kb_config *cfg, const char *name);
KB_API const char *kb_config_string(const kb_config *cfg, const char *name);
/* Borrowed pointer, NULL when unset. */
KB_API const double *kb_config_vector(const kb_config *cfg, const char *name, size_t *n);
/* Whether the option was set explicitly (not defaulted). */
KB_API int kb_config_is_set(const kb_config *cfg, const char *name);

/* ---------------------------------------------------------------- engines */

typedef struct kb_engine kb_engine;

/* Names of the registered engines, NULL-terminated; and the options of one. */
KB_API const char *const *kb_engine_names(void);
/* NULL-terminated array (terminated by an entry with name == NULL); NULL if unknown. */
KB_API const kb_option_spec *kb_engine_options(const char *engine);
KB_API const kb_option_spec *kb_common_options(void);
/* One line saying what the engine is (its method and paper); NULL for an unknown engine. */
KB_API const char *kb_engine_summary(const char *engine);

/* The largest space dimension the engine serves (KB_MAX_DIM unless the engine's method
 * limits it, e.g. pi-gp-ucb's 2^d-ary cover); 0 for an unknown engine. */
KB_API size_t kb_engine_max_dim(const char *engine);

/* Creates an engine; takes ownership of neither argument (both are copied). A space wider
 * than kb_engine_max_dim() is refused with KB_ERANGE, field "dim". */
KB_API kb_engine *kb_engine_create(const kb_config *cfg, const kb_space *space, kb_error *err);
KB_API void kb_engine_free(kb_engine *e);
KB_API const char *kb_engine_name(const kb_engine *e);
KB_API size_t kb_engine_dim(const kb_engine *e);

/* One point handed out by ask. `x` points into engine-owned storage that stays valid
 * until the engine is freed; it is in the space's input coordinates (the original row
 * for a finite set, the unit cube for a box). */
typedef struct kb_point {
    uint64_t handle;   /* > 0, unique within the engine, assigned in ask order */
    size_t index;      /* row of the finite set, or of the box's current pool */
    const double *x;
} kb_point;

typedef enum kb_ask_status {
    KB_ASK_OK = 0,          /* at least one point returned */
    KB_ASK_AWAIT_FEEDBACK,  /* batch closed: tell (or abandon) pending points first */
    KB_ASK_EXHAUSTED,       /* every candidate excluded by the repeats policy */
} kb_ask_status;

typedef struct kb_ask_result {
    size_t n;               /* points written to the caller's array */
    kb_ask_status status;   /* why n may be smaller than requested */
    size_t awaiting;        /* pending points whose feedback closes the wait */
} kb_ask_result;

/* Asks for up to n points, written to out[0..res->n). Returns 0 even when no point can
 * be given now (res->status says why). */
KB_API int kb_engine_ask(kb_engine *e, size_t n, kb_point *out, kb_ask_result *res, kb_error *err);
/* Feedback for a handed-out point. KB_ENOTFOUND for an unknown handle, KB_ESTATE when
 * it was already told or abandoned, KB_EINVAL for a non-finite y. */
KB_API int kb_engine_tell(kb_engine *e, uint64_t handle, double y, kb_error *err);
/* The point's worker failed or its lease expired: forget the hallucinated observation. */
KB_API int kb_engine_abandon(kb_engine *e, uint64_t handle, kb_error *err);
/* Pre-existing data (warm start): x in input coordinates, dim entries. */
KB_API int kb_engine_observe(kb_engine *e, const double *x, double y, kb_error *err);

/* The handle's point (borrowed) and its state; KB_ENOTFOUND for unknown handles. */
typedef enum kb_trial_state { KB_TRIAL_PENDING = 0, KB_TRIAL_TOLD, KB_TRIAL_ABANDONED } kb_trial_state;
KB_API int kb_engine_trial(const kb_engine *e, uint64_t handle, kb_point *pt, kb_trial_state *state);

/* Replays one ask of a recorded history (a snapshot's, or a caller's own log): asks one
 * point like kb_engine_ask(e, 1, ...), where x (dim entries, input coordinates) is the
 * point that ask handed out when it was first made, or NULL when not recorded. When
 * the engine now chooses another point, or none (a later kbandit changed a default or
 * an algorithm), the trial is ADOPTED: the engine's own choice is abandoned inside the
 * engine, the trial keeps its handle and reports x (kb_engine_trial), a tell of it
 * becomes an observation of (x, y) and an abandon forgets it; kb_stats.adopted counts
 * such asks. So the model is trained on the points really evaluated, and the handles go
 * on as recorded. With x NULL, a point must be handed out (else KB_ESTATE) and is
 * taken as it comes. An adopted trial's pt->index (and kb_engine_trial's) is not the
 * recorded point's; on a finite set the candidate equal to x counts for the repeats
 * policy. KB_EINVAL / KB_ERANGE for an x that cannot be scaled (field "x[j]"), the
 * engine unchanged; after any other failure the engine is inconsistent: discard it
 * (restores do). */
KB_API int kb_engine_ask_recorded(kb_engine *e, const double *x, kb_point *pt,
                                  kb_error *err);

/* The counters every engine has (what engine.c's bookkeeping keeps); the figures only
 * some engines have are asked for by name with kb_engine_stat below. The struct grows at
 * its end (as SQLite's sqlite3_vfs does with iVersion): the caller sets `size` to
 * sizeof(kb_stats) as it was compiled, the library writes only those bytes, and fields
 * the library does not know (a caller built against a newer header) read 0. */
typedef struct kb_stats {
    size_t size;            /* set by the caller, >= KB_STATS_SIZE_MIN */
    uint64_t asks;          /* points handed out */
    uint64_t tells, abandons, observed, pending;
    size_t candidates;      /* size of the current candidate set or pool */
    uint64_t adopted;       /* replayed asks adopted (kb_engine_ask_recorded) */
    int deterministic;      /* the told values look deterministic (a point told three
                             * times with one value, none with two): on a finite set
                             * with `repeats` unset, told candidates are not handed out
                             * again while this holds */
} kb_stats;

/* The size of the first kb_stats of this shape: never changes as the struct grows. */
#define KB_STATS_SIZE_MIN (offsetof(kb_stats, candidates) + sizeof(size_t))

/* Fills out->size bytes of *out (out->size left as set). KB_EINVAL (field "size") when
 * out->size < KB_STATS_SIZE_MIN, *out untouched. Use: kb_stats st = {.size = sizeof st}. */
KB_API int kb_engine_stats(const kb_engine *e, kb_stats *out, kb_error *err);

/* Engine-specific figures, by name. A name means the same in every engine offering it:
 *   epoch            epochs (resparsifications, batches, model refreshes) so far
 *   epoch_asks       points handed out in the current epoch
 *   last_batch       points handed out in the previous epoch
 *   dict_size        inducing points / dictionary size (pi-gp-ucb: cells of its cover)
 *   model_rows       bbkb: data rows the current epoch's model is built on (fewer than
 *                    the told points when a box's model window applies: model_rows)
 *   choice_floor_pools  bbkb, gp-ucb, gp-bucb, gp-ts, sgp-ts: candidate pools the choice
 *                    floors gave to one choice of a categorical parameter tried less
 *                    than its floor (choice_floor)
 *   climb_pools      bbkb: candidate pools given to a climb from a second basin once a
 *                    noise-free run's best stopped improving (climb_after)
 *   init_phase       bbkb: 1 while uncertainty sampling to reach parallelism P
 *   start_var_max    bbkb: the largest sigma~^2 over the candidates at the epoch start,
 *                    which the initialization compares with 1 / P
 *   epochs_low_rank  bbkb: epochs whose start variances came from a low-rank update of
 *                    the previous ones (epoch_start = auto)
 *   sec_embed, sec_resparsify, sec_ask, sec_tell   cumulative seconds embedding
 *                    candidates, rebuilding the model, selecting points, taking feedback
 *   sec_fit          bbkb: cumulative seconds fitting hyperparameters (kb__hyper_refit),
 *                    part of sec_resparsify
 *   flop_l3          floating-point operations of the BLAS-3 products in sec_embed +
 *                    sec_resparsify (bbkb)
 * kb_engine_stat_name(engine, i) is the i-th name the engine offers, NULL past the last
 * one or for an unknown engine (the list is fixed per engine, as its options are). */
KB_API const char *kb_engine_stat_name(const char *engine, size_t i);
/* *out = the figure `name` of e now (counters exact below 2^53). A name e's engine does
 * not offer gives KB_ENOTFOUND (field "name") and *out = 0, which callers showing every
 * engine alike may read as "not applicable". */
KB_API int kb_engine_stat(const kb_engine *e, const char *name, double *out, kb_error *err);

/* Posterior mean and standard deviation (in the engine's internal units: scaled
 * inputs, standardized outputs) at n points given in input coordinates, as the engine
 * currently sees them (pending points hallucinated). For tests and diagnostics;
 * KB_EUNSUPPORTED for engines without a posterior (random). */
KB_API int kb_engine_posterior(kb_engine *e, const double *X, size_t n, double *mean,
                        double *sd, kb_error *err);

/* The kernel's hyperparameters as the engine uses them now. With hyperparameters = "fit"
 * (the default, for engines that fit), the ones not set are fitted to the data by type-II
 * MAP at points fixed by the call sequence (core/src/hyper.c); `fits` counts the fits. */
typedef struct kb_hyperparameters {
    int fitting;                /* 1 when the engine fits them */
    uint64_t fits;              /* fits so far */
    size_t dim;
    const double *lengthscales; /* dim entries, borrowed until the next engine call */
    double kernel_variance;
    double noise;               /* noise variance in standardized units (lambda) */
    double categorical_mix;     /* share of kernel_variance in the additive overlap term
                                 * over categorical parameters (UCB engines on
                                 * boxes, under noise, unless categorical_kernel =
                                 * joint); 0 off */
    double interior_prior;      /* the prior mean's height c: c (1/3 - mean_j (2 u_j -
                                 * 1)^2) in standardized units over the unit-scaled
                                 * candidates (finite sets, prior_mean = auto); 0 off */
} kb_hyperparameters;

KB_API int kb_engine_hyperparameters(const kb_engine *e, kb_hyperparameters *out);

/* The told trial the model rates best: among the observations whose told values are
 * within two fitted noise sds of the best told value, the handle of the one with the
 * highest posterior mean under the exact GP with the engine's fitted kernel and noise (on
 * at most 256 of the observations, core/src/acq.c kb__gp_mean); before the first fit (or
 * if that GP's covariance does not factor), the one with the highest told value. Under
 * noise the best told value is biased up by its own noise (the largest of many noisy
 * values is partly luck); the mean pools each point's neighbours. Observations without a
 * handle (kb_engine_observe) are not candidates.
 * KB_EUNSUPPORTED for engines that do not fit a GP (random, the linear kernel,
 * hyperparameters = "fixed"); KB_ENOTFOUND when no told observation has a handle.
 * Changes nothing the engine does next (no random stream is drawn from). */
KB_API int kb_engine_recommend(kb_engine *e, uint64_t *handle, kb_error *err);

/* Snapshot: an owned byte buffer (free with free()) from which kb_engine_restore
 * rebuilds an engine that makes exactly the choices the original would have made.
 * Format: versioned, little-endian; see core/src/snapshot.c. Asks are replayed by
 * kb_engine_ask_recorded with the point each one handed out (format 3; earlier
 * snapshots did not record it), so a restore by a kbandit whose engines choose
 * differently adopts those asks instead of pairing the told values with new points. */
KB_API int kb_engine_snapshot(const kb_engine *e, unsigned char **bytes, size_t *len,
                       kb_error *err);
KB_API kb_engine *kb_engine_restore(const unsigned char *bytes, size_t len, kb_error *err);
/* The format version of snapshot bytes (1 to KB_SNAPSHOT_VERSION), 0 when they do not
 * start like a snapshot. Formats below 3 do not record the asks' points: a caller that
 * keeps its own history (the daemon's events and trials) may prefer replaying it. */
#define KB_SNAPSHOT_VERSION 5u
KB_API uint32_t kb_snapshot_version(const unsigned char *bytes, size_t len);

#ifdef __cplusplus
}
#endif
#endif /* KBANDIT_H */
