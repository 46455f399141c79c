/*
 * domain.h - This file contains the daemon's domain types: a study's specification (its
 * space, parameters, engine and limits) and a trial record with its states. They are
 * shared by the protocol layer (proto.h parses and renders them), the study layer and
 * the store (storage.h), which must not depend on the JSON library: the two JSON values
 * a spec keeps as given (categorical choices, engine settings) are held through the
 * incomplete type struct json_t, so this header needs no jansson include.
 *
 * It also holds what the study layer answers with, as plain C copies made under a
 * study's mutex and rendered (proto/render.c) after it is released: a study's document
 * with its progress (study_doc) and trials (trial_rec copies).
 *
 * Ownership: every pointer member is owned by the struct that holds it, except
 * study_doc.spec (borrowed from a study the holder keeps a reference to). A study_spec is
 * released by proto_study_spec_clear (proto.h), the rest by the *_clear / *_free below,
 * which accept a zeroed struct.
 */
#ifndef KB_DOMAIN_H
#define KB_DOMAIN_H

#include "kbandit.h"

#include <stddef.h>
#include <stdint.h>

struct json_t; /* jansson's value type, opaque here */

typedef enum space_kind { SPACE_CANDIDATES = 0, SPACE_BOX } space_kind;
typedef enum param_type { PARAM_FLOAT = 0, PARAM_INT, PARAM_CATEGORICAL } param_type;

typedef struct param_spec {
    char *name;
    param_type type;
    double low, high;   /* float / int */
    int log;            /* float / int: log scale */
    struct json_t *choices; /* categorical: array of scalars (owned) */
} param_spec;

/* POST /v1/studies, and the stored configuration of a study (same document). */
typedef struct study_spec {
    char *name;
    int minimize;
    space_kind space;
    /* candidates: inline rows (owned, rows x dim) unless candidate_set > 0, in which case
     * the caller loads them and sets candidates/rows/dim. */
    double *candidates;
    size_t rows, dim;
    int64_t candidate_set;
    struct json_t *column_names; /* candidate_set > 0: the set's column names (owned array
                                  * of dim strings), NULL when it has none */
    param_spec *params;  /* box: n_params == dim */
    size_t n_params;
    char *engine;
    struct json_t *settings; /* engine.settings as given (owned object) */
    kb_config *cfg;      /* engine + settings: NULL until proto_study_spec_config */
    int64_t lease_seconds;
    int64_t max_trials;  /* 0 = unlimited */
    int rules;           /* the rules it was created under: PROTO_RULES when new (proto.h) */
} study_spec;

typedef enum trial_state {
    TRIAL_PENDING = 0,
    TRIAL_COMPLETED,
    TRIAL_FAILED,
    TRIAL_EXPIRED,
    TRIAL__STATES
} trial_state;

/* The stable names of the states ("pending", ...), as in the API and the store. */
const char *proto_trial_state_name(trial_state s);
int proto_trial_state_parse(const char *name, trial_state *out); /* 0, or -1 unknown */

typedef struct trial_rec {
    int64_t id;          /* == the engine's handle */
    trial_state state;
    char *worker;        /* owned */
    char *reason;        /* owned, NULL unless failed with a reason */
    char *request_id;    /* owned: the ask's request_id, NULL when it gave none */
    int64_t cand_index;  /* candidates: row; box: -1 */
    double value;        /* user's direction; valid when completed */
    int64_t created_ms, lease_ms, completed_ms; /* completed_ms 0 = none */
    double *x;           /* dim entries (owned) */
} trial_rec;

/* Deep copy of src (dim coordinates; a NULL worker becomes ""): 0, or -1 out of memory
 * (dst then owns nothing). */
int trial_rec_copy(trial_rec *dst, const trial_rec *src, size_t dim);
void trial_rec_clear(trial_rec *t);      /* frees the members, zeroes t */
void trial_recs_free(trial_rec *v, size_t n); /* clears each and frees the array */

/* A study's warm-start observations as exported, in the order taken: n points (x, n x dim
 * row-major), their values in the user's direction and when each was taken; cap rows
 * allocated. Owned; observation_set_clear frees them and zeroes the set. */
typedef struct observation_set {
    size_t n, cap;
    double *x, *value;
    int64_t *created_ms;
} observation_set;
void observation_set_clear(observation_set *o);

/* A study's state, set by its owner (after OSS Vizier's ACTIVE / INACTIVE / COMPLETED):
 * only asks look at it. Active hands out trials; paused hands out none until resumed;
 * completed is terminal. Trials already handed out are told, failed and heartbeated in
 * every state, so no work in flight is lost. */
typedef enum study_state {
    STUDY_ACTIVE = 0,
    STUDY_PAUSED,
    STUDY_COMPLETED,
    STUDY__STATES
} study_state;

/* The stable names ("active", "paused", "completed"), as in the API and the store. */
const char *proto_study_state_name(study_state s);
int proto_study_state_parse(const char *name, study_state *out); /* 0, or -1 unknown */

/* A study's progress at one instant (only for a restored study). */
typedef struct study_progress {
    size_t trials[TRIAL__STATES]; /* counts by state */
    uint64_t observations;        /* warm-start observations taken (kb_stats.observed) */
    trial_rec best;               /* a copy; best.id == 0 when no trial completed */
    uint64_t epoch, epoch_asks, last_batch;
    size_t dict_size;
    size_t model_rows;  /* data rows the engine's current model is built on (bbkb) */
    uint64_t choice_floor_pools; /* candidate pools a choice floor took (engine.c) */
    uint64_t climb_pools;        /* candidate pools a climb took (engine.c, bbkb / bkb) */
    int init_phase;
    int deterministic;  /* the told values look deterministic (kb_stats.deterministic) */
    /* The kernel the engine uses now (fitted unless hyperparameters = fixed). */
    int fitted;
    uint64_t fits;
    size_t dim;
    double *lengthscales;         /* dim entries (owned) */
    double kernel_variance, noise, categorical_mix, interior_prior;
} study_progress;

/* A study's document: its spec, id, creation time, state and, when has_progress,
 * progress. */
typedef struct study_doc {
    int64_t id, created_ms;
    const study_spec *spec; /* borrowed: valid while the study is referenced */
    study_state state;
    int has_progress;
    study_progress progress;
} study_doc;
void study_doc_clear(study_doc *d);

#endif /* KB_DOMAIN_H */
