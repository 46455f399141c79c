/*
 * bbkb_internal.h - what the files of the BBKB / BKB engine (core/engines/bbkb/) share:
 * the engine state and the functions one file defines for another. The engine and the
 * role of each file are described in bbkb.c. Nothing here leaves the library
 * (kb__ names, -fvisibility=hidden).
 *
 * Invariants of the state, which every file keeps:
 *   - V = lambda I + sum z z^T over every observe and every non-abandoned trial not
 *     handed out in the current epoch (epoch_h), all embedded with the current
 *     dictionary; L = chol(V_t), V_t = V + sum z z^T over epoch_h (hand-outs update only
 *     L); Lstart = L at the epoch start;
 *   - for j < m, column j of Kc is k(., S_j) over the current candidates, and slot_of and
 *     dcand are inverse maps between candidates and the slots that hold them;
 *   - |var_start[i] - sigma~^2_start(x_i)| <= start_err, a rounding estimate (0 unless
 *     low_rank_start ran; measured errors stay 1e3-1e4 times below it), except while
 *     vs_bound[i], when var_start[i] >= sigma~^2_start(x_i) only (start_bound.c);
 *   - var[i] >= the current sigma~^2 of candidate i, equal when stamp[i] == vstamp; the
 *     heap and out together hold every candidate once, keyed by its UCB (or variance
 *     during initialization) computed from var[i].
 * Memory is O(A m + T m): no A x A or T x T matrix (Kc, Z: A x m each).
 */
#ifndef KB_BBKB_INTERNAL_H
#define KB_BBKB_INTERNAL_H

#include "../../src/internal.h"

#include <stddef.h>
#include <stdint.h>

/* No slot, candidate or row. */
#define NONE ((size_t)-1)

/* The dictionary option. */
enum { DICT_SAMPLED, DICT_COUPLED, DICT_ALL };

typedef struct bbkb {
    /* configuration */
    double lambda, q, C, F, noise, delta, beta_scale, beta_fixed, partial, retain;
    int beta_mode, local_rule, dict_mode, full_start, batch_floor;
    double P;
    size_t model_rows; /* box: rows an epoch's model keeps at most (0: all; dictionary.c) */
    kb__pool_rules pool; /* box: choice floors and climbs (engine.c) */
    /* dictionary and embedding: z(x) = W^T k_S(x) */
    size_t m, r, cap_m, cap_dc;
    double *S;        /* m x d, internal coordinates, in slot order */
    size_t *dcand;    /* per slot: the candidate it is, NONE when not of the current pool */
    int cols_valid;   /* the slots' Kc columns are of the current pool (see kb__bbkb_new_pool) */
    double kdict_max; /* max k(s, s) over every dictionary point since kb__bbkb_new_pool */
    double *W;        /* m x r */
    /* The same map in pivot order, for embedding many points at once
     * (kb__bbkb_embed_rows, kb__bbkb_zrows): z(x) = Wp^T k_Sp(x) with pslot[i] the slot
     * of the i-th pivot (i < r), Sp (r x d) those points and Wp (r x r, upper
     * triangular) the rows of W at those slots. */
    double *Wp, *Sp;
    size_t *pslot;
    /* Lp (r x r, row-major, lower triangular) is the pivoted Cholesky factor L11 of
     * K_R itself: row i is z of the i-th pivot point exactly (L11^{-1} K_R e_i), what
     * the model's data rows that are pivots take instead of a kernel row and a product
     * with Wp (embedding.c); ppos[s] is slot s's pivot position, NONE when dropped. */
    double *Lp;
    size_t *ppos;
    /* candidates (A = space->n) */
    size_t A;
    double *Kc;       /* column-major A x m: Kc[j A + i] = k(x_i, S_j), room for cap_k columns */
    size_t cap_k;
    size_t *slot_of;  /* per candidate: its dictionary slot, or NONE */
    double *coin;     /* dictionary = coupled: per candidate, its uniform draw (NAN: none yet) */
    double *kdiag;    /* k(x_i, x_i) */
    double *Z;        /* A x r: row i is z(x_i) when zstamp[i] == zgen (see kb__bbkb_zrow) */
    size_t cap_z;
    double *gbuf;     /* kb__bbkb_subtract_forms' scratch */
    size_t cap_gbuf;
    uint64_t *zstamp, zgen;
    double *resid;    /* k(x,x) - ||z||^2, valid with row i of Z */
    double *mu, *var_start, *var, *key;
    double start_err; /* estimated bound on |var_start[i] - sigma~^2_start(x_i)| */
    /* a box epoch started with bounds (start_bound.c): var_start[i] only bounds
     * sigma~^2_start(x_i) from above while vs_bound[i]; border[0..n_border) a max-heap
     * of the candidates still to resolve by border_key, their keys when it was built
     * (valid: border_valid); vstamp_open the vstamp the epoch opened with (L is still
     * Lstart while equal) */
    unsigned char *vs_bound;
    size_t *border, n_border;
    double *border_key;
    int border_valid, bounded;
    uint64_t vstamp_open;
    double kdiag_max; /* max_i k(x_i, x_i) */
    /* epoch-start matrix M = W (I / lambda - V_start^{-1}) W^T, m_start x m_start over the
     * slots of that epoch's dictionary (lower triangle), and its rounding scale */
    double *Mstart, mstart_scale;
    size_t m_start;
    int mstart_valid;
    /* the last placement, for low_rank_start (lr_ok: usable): old slot k of the
     * dictionary at m_start went to slot old_to_new[k], or left it with its kernel column
     * kept as column old_to_new[k] - m of Kgone (A x n_gone, column-major) */
    int lr_ok;
    size_t *old_to_new, cap_o2n, n_gone, cap_gone;
    size_t lr_rank;   /* rank of the last low-rank update (sizes ritz_factor's try) */
    double *Kgone;
    /* kernel columns of points that left the dictionary, for when they come back (a
     * sampled dictionary redraws every point at each resparsification): column j of
     * Kaway (A x cap_away) is k(., x_{away_cand[j]}) (away_cand[j] == NONE: free),
     * away_of[i] its column for candidate i or NONE, away_used[j] when stored (LRU) */
    double *Kaway;
    size_t *away_cand, *away_of, cap_away;
    uint64_t *away_used, away_clock;
    uint64_t *stamp;
    size_t *heap, n_heap, *out, n_out; /* out: excluded candidates taken off the heap */
    /* model */
    /* r x r: V row-major (lower triangle; without the epoch's hand-outs, see the
     * invariants); L = chol(V_t) and Lstart (kb_chol) column-major, so that the
     * rank-one update of every hand-out (kb__chol_update) rotates contiguous columns */
    double *V;
    kb_chol L, Lstart;
    double *Lsinv;          /* r x r: Lstart^{-1} (kb__chol_inverse), set with Lstart */
    double *w;              /* mean weights, r */
    double *buf;            /* r scratch */
    double alpha;
    uint64_t vstamp;
    /* epoch */
    int have_epoch, empty_model, closed, init_phase, init_epoch, dirty;
    double epoch_sum, logdet_sum;
    double var_max;   /* max_i var_start[i] (within start_err of the exact value) */
    uint64_t *epoch_h;
    size_t n_epoch, cap_epoch;
    uint64_t pending_max; /* most trials pending at once after any hand-out */
    double *rsum;     /* local rule: sum_s k~_start(x, x_s)^2 per candidate */
    int rsum_valid;
    /* sigma~^2_start of the current epoch's data rows that are trials off the pool,
     * per trial handle (row_var[h - 1], NAN where not kept; n_row_var entries), valid
     * while row_var_ok: computed when the epoch's model is built, so that closing the
     * epoch does not embed those rows a second time (closing_variances). zkeep holds
     * their z (n_zkeep rows of r, at most KB__ZKEEP_MAX doubles; zkeep_row: each one's
     * row of the dataset) from embed_and_sum until then, and stays allocated from one
     * epoch to the next (grow-only scratch). */
    double *row_var, *zkeep;
    size_t *zkeep_row, n_row_var, cap_row_var, n_zkeep, cap_zkeep, cap_zkeep_row;
    int row_var_ok;
    /* per trial / observation: sigma~^2 at the start of its own epoch */
    double *trial_var, *obs_var;
    size_t cap_trial, cap_obs;
    /* statistics */
    uint64_t epoch, epoch_asks, last_batch, epochs_low_rank, epochs_bounded;
    uint64_t bound_resolved; /* candidates given exact start variances in bounded epochs */
    uint64_t dict_capped; /* resparsifications whose draw cap_growth subsampled */
    size_t rows;    /* data rows of the current epoch's model */
    double sec_embed, sec_resparsify, sec_ask, sec_tell, flop_l3;
    double sec_fit; /* the hyperparameter refits, part of sec_resparsify */
} bbkb;

/* One row of the data a resparsification rebuilds V from: a selected or observed point
 * (a candidate of the current pool when cand != NONE, aggregated over its selections). */
typedef struct datum {
    const double *u;
    size_t cand;
    uint64_t trial;       /* its (first) trial's handle; 0 for an observe */
    double n_all, n_told, ysum; /* sum of standardized told y (dictionary.c) */
    double var;           /* sigma~^2 at the start of the closing epoch (for sampling) */
    int in;               /* drawn into the new dictionary */
    size_t slot;          /* its slot in the new dictionary when in (NONE: not placed) */
} datum;

typedef struct dataset {
    datum *rows;
    size_t n, cap;
} dataset;

/* Data rows are embedded this many at a time at each resparsification (closing
 * variances, the model's Gram matrices): the scratch of a block (rows x m kernel values,
 * rows x r embeddings) stays in glibc's heap, where whole-data buffers (32 MB each at
 * 20,000 rows) were mapped afresh, page-faulted and zeroed at every epoch, a third of
 * the daemon's CPU on a long noisy study (docs/BENCHMARKS.md, twenty-second session). */
#define KB__ROWS_BLOCK 512

/* At most this many doubles (16 MB) of data rows' z are kept from an epoch's model to
 * its closing variances (bbkb.row_var); rows beyond are embedded again at the closing. */
#define KB__ZKEEP_MAX ((size_t)1 << 21)

/* A resparsification draws at most max(2 m, this) rows once there is a model
 * (dictionary.c, cap_growth). */
#define KB__DICT_STEP 512

/* ------------------------------------------------------------ embedding.c */

/* Zout (n x r) = z of the n rows of U (n x d, internal coordinates): n m kernel
 * evaluations, for points that are not candidates. KB_ENOMEM. */
int kb__bbkb_embed_rows(const kb_engine *e, const double *U, size_t n, double *Zout);
/* z(x_i) (r entries, owned by st) of candidate i, and resid[i], computed on first use in
 * the current embedding. */
const double *kb__bbkb_zrow(bbkb *st, size_t i);
/* kb__bbkb_zrow for every candidate of cand[0..n) (NONE entries skipped) as one product. */
int kb__bbkb_zrows(bbkb *st, const size_t *cand, size_t n);
/* W and r for the dictionary S[0..m) (K_S^{+/2}); Z resized, every row invalidated.
 * KB_ENOMEM, KB_ENUMERIC. */
int kb__bbkb_build_embedding(kb_engine *e);

/* ------------------------------------------------------------ posterior.c */

/* ||L^{-1} z||^2 = z^T V^{-1} z for V = L L^T (r x r); uses st->buf. */
double kb__bbkb_quad_form(const bbkb *st, const kb_chol *L, const double *z);
/* out[i] = resid[i] / lambda + ||Lstart^{-1} z_i||^2 for the n rows z_i of Zr.
 * KB_ENOMEM. */
int kb__bbkb_row_variances(const bbkb *st, const double *Zr, const double *resid, size_t n,
                           double *out);
/* out[k] = sigma~^2_start of the n points U (n x d internal coordinates) whose
 * embeddings are the rows of Zr (n x r). KB_ENOMEM. */
int kb__bbkb_point_variances(const kb_engine *e, const double *U, const double *Zr, size_t n,
                             double *out);
/* sigma~^2_start(x_i) of candidate i, exact even after low_rank_start. */
double kb__bbkb_start_variance(bbkb *st, size_t i);
/* var[i] -= sum_j sign_j (k(x_i)^T H_j)^2 over the first k columns of H (leading
 * dimension ld: the m slots of Kc, then the departed columns of Kgone when ld > m;
 * sign NULL: all +1), and mu[i] = k(x_i)^T H_k when mu is not NULL. KB_ENOMEM. */
int kb__bbkb_subtract_forms(bbkb *st, const double *H, size_t ld, size_t k,
                            const double *sign, double *var, double *mu);
/* var[i] = sigma~^2(x_i) with V = L L^T for every candidate, and mu[i] = mu~(x_i) when mu
 * is not NULL; Linv = L^{-1} from kb__chol_inverse when the caller has it, else NULL.
 * KB_ENOMEM, KB_ENUMERIC. */
int kb__bbkb_candidate_posterior(bbkb *st, const kb_chol *L, const double *Linv, double *var,
                                 double *mu);
/* V, L, Lstart and w from the data rows, embedded with the new dictionary; the state is
 * unchanged on failure (KB_ENOMEM, KB_ENUMERIC). */
int kb__bbkb_rebuild_model(kb_engine *e, const dataset *ds);

/* ------------------------------------------------------------- low_rank.c */

/* var_start and mu for the new epoch (bounds when kb__bbkb_bounds_apply, else
 * low_rank_start when it applies, else candidate_posterior; start_err, bounded and
 * vs_bound set), and Mstart for the next one on a finite set (a box redraws its pool).
 * KB_ENOMEM, KB_ENUMERIC. */
int kb__bbkb_epoch_start_posterior(const kb_engine *e);

/* ----------------------------------------------------------- start_bound.c */

/* Candidates whose exact epoch-start variances kb__bbkb_resolve_next computes at once. */
#define KB__RESOLVE_BLOCK 32

/* Does this epoch start bound the variances instead of computing them all (a box past
 * initialization with a large enough model, neither epoch_start = full nor the local
 * rule, which reads every variance)? */
int kb__bbkb_bounds_apply(const kb_engine *e, const bbkb *st);
/* mu exact and var_start >= sigma~^2_start for every candidate (vs_bound set).
 * KB_ENUMERIC: then nothing is promised and the caller runs the full product; KB_ENOMEM
 * fails the epoch start (the full product's rounding differs: a replay would diverge). */
int kb__bbkb_bound_start(const kb_engine *e);
/* Exact var_start for the bounded candidate i and the next bounded ones by key, at most
 * KB__RESOLVE_BLOCK, listed in idx[0..*n). KB_ENOMEM (then *n = 0). */
int kb__bbkb_resolve_next(bbkb *st, size_t i, size_t *idx, size_t *n);

/* ----------------------------------------------------------- dictionary.c */

/* The candidates are new (creation, or a box's pool refresh): kdiag recomputed, every
 * cached kernel column and coin dropped, every row of Z invalidated. */
void kb__bbkb_new_pool(kb_engine *e);
/* The data rows of every non-abandoned trial and observe, with rows[].in marking the
 * new dictionary (Algorithm 1 L11-16, retain); rows[].ysum is each row's average told y,
 * standardized, until kb__bbkb_residual_rows. KB_ENOMEM. */
int kb__bbkb_draw_dictionary(kb_engine *e, dataset *ds);
/* rows[].ysum to n_told times the row's residual from the prior mean (what the model
 * fits). After the epoch's refit, which moves the interior prior's height: a residual
 * taken before it kept the previous height for the whole epoch while the candidates'
 * means took the new one (newcomer review, fifty-eighth session). */
void kb__bbkb_residual_rows(kb_engine *e, dataset *ds);
/* The rows marked in as the new dictionary: S, m, dcand, slot_of, Kc (and what
 * low_rank_start needs of the old one). KB_ENOMEM; then no cached column is trusted. */
int kb__bbkb_place_dictionary(kb_engine *e, dataset *ds);

/* ------------------------------------------------------------ selection.c */

/* alpha = C~ beta~ (Theorem 2, or the beta option's form) for the coming epoch. */
void kb__bbkb_update_alpha(const kb_engine *e, bbkb *st);
/* Every candidate back in the heap, keyed from var[] (exact: var[] is the current
 * sigma~^2, else an upper bound to re-evaluate before use). */
void kb__bbkb_heap_rebuild(bbkb *st, int exact);
/* Max-heap h[0..n) of candidates by key[], ties to the lower index: h[p] sifted down. */
void kb__bbkb_sift_down(size_t *h, size_t n, const double *key, size_t p);
/* The next point of the epoch into *index; 0 when every candidate is excluded. */
int kb__bbkb_pick(kb_engine *e, size_t *index);
/* Every variance recomputed from L (after an abandon made them grow). KB_ENOMEM,
 * KB_ENUMERIC. */
int kb__bbkb_refresh_all_variances(bbkb *st);
/* rsum += k~_start(., x_cand)^2 (the local rule's sums). KB_ENOMEM. */
int kb__bbkb_add_local_term(kb_engine *e, size_t cand);
/* st->closed from Lemma 1, then (local rule) Lemma 3. KB_ENOMEM. */
int kb__bbkb_update_closed(kb_engine *e);

#endif
