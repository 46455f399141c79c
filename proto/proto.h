/*
 * proto.h - the REST protocol of kbanditd as C: the error table (API error code ->
 * HTTP status and stable string), request documents parsed from JSON into validated
 * structs with field-level errors, and the JSON renderings of studies and trials.
 *
 * Ownership: *_parse fill caller-owned structs whose heap members are released by the
 * matching *_clear; functions returning json_t * return a new reference. Parsers never
 * keep a reference to the input document. Field paths in errors are JSON paths
 * relative to the request body ("space.candidates[3][1]", "engine.settings.seed").
 */
#ifndef KB_PROTO_H
#define KB_PROTO_H

#include "kbandit.h"

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

/* ------------------------------------------------------------- errors */

typedef enum api_code {
    API_OK = 0,
    API_INVALID_JSON,
    API_INVALID,
    API_UNAUTHORIZED,
    API_NOT_FOUND,
    API_METHOD_NOT_ALLOWED,
    API_CONFLICT,
    API_PAYLOAD_TOO_LARGE,
    API_UNSUPPORTED_MEDIA_TYPE,
    API_INTERNAL,
    API_UNAVAILABLE,
    API__COUNT
} api_code;

#define API_FIELD_MAX 160
#define API_MESSAGE_MAX 320

/* Caller-owned, fixed size: reporting an error never allocates. field "" = none. */
typedef struct api_error {
    api_code code;
    char field[API_FIELD_MAX];
    char message[API_MESSAGE_MAX];
} api_error;

int api_status(api_code code);          /* HTTP status of a code */
const char *api_code_name(api_code code); /* stable string ("invalid_json", ...) */
/* Fills err (when not NULL) and returns -1. field may be NULL. */
int api_fail(api_error *err, api_code code, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* {"error": {"code", "message", "field"}} */
json_t *api_error_json(const api_error *err);
/* Maps a core error to an API error; field_prefix is prepended to kerr->field. */
int api_fail_kb(api_error *err, const kb_error *kerr, const char *field_prefix);

/* ------------------------------------------------------ documents */

/* Gives jansson an allocator that lets proto_parse_object tell a failed allocation from
 * a malformed body. Call once, before any thread parses. */
void proto_init(void);
/* Whether an allocation of jansson's failed in this thread since the last call (a
 * document built meanwhile may lack parts); clears it. Always 0 without proto_init. */
int proto_json_alloc_take(void);

/* Parses a JSON object body. Empty or unparsable body / invalid UTF-8 -> invalid_json;
 * a non-object -> invalid; an allocation failure -> internal (after proto_init; before,
 * only those jansson reports as such). Returns a new reference or NULL. */
json_t *proto_parse_object(const char *body, size_t len, api_error *err);

typedef enum space_kind { SPACE_CANDIDATES = 0, SPACE_BOX } space_kind;
typedef enum param_type { PARAM_FLOAT = 0, PARAM_INT, PARAM_CATEGORICAL } param_type;

typedef struct param_spec {
    char *name;
    param_type type;
    double low, high;   /* float / int */
    int log;            /* float / int: log scale */
    json_t *choices;    /* categorical: array of scalars (owned) */
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
    param_spec *params;  /* box: n_params == dim */
    size_t n_params;
    char *engine;
    json_t *settings;    /* engine.settings as given (owned object) */
    kb_config *cfg;      /* engine + settings: NULL until proto_study_spec_config */
    int64_t lease_seconds;
    int64_t max_trials;  /* 0 = unlimited */
} study_spec;

int proto_study_spec_parse(json_t *doc, study_spec *out, api_error *err);
/* The rules only a new study must pass (categorical choices are distinct; field
 * space.params[i].choices[j], the first repeat). A stored study is loaded under the
 * rules it was created with, so a database written before a rule was added still opens. */
int proto_study_spec_check_new(const study_spec *s, api_error *err);
/* Builds spec->cfg from engine name and settings: unknown engine -> field engine.name,
 * bad option -> engine.settings.<option>. Separate from parsing so that the daemon can
 * check what needs the database (name taken, candidate_set) first. */
int proto_study_spec_config(study_spec *s, api_error *err);
void proto_study_spec_clear(study_spec *s);
/* The canonical stored document: the request with defaults filled in. With
 * with_candidates = 0, inline candidates are summarised (rows, dim) as in a Study. */
json_t *proto_study_spec_json(const study_spec *s, int with_candidates);

typedef struct ask_req {
    char *worker;
    int64_t count;       /* 1..1000, default 1 */
    int64_t wait_ms;     /* 0..60000, default 0 */
} ask_req;
int proto_ask_parse(json_t *doc, ask_req *out, api_error *err);
void proto_ask_clear(ask_req *r);

int proto_tell_parse(json_t *doc, double *value, api_error *err);

typedef struct tell_item {
    int64_t trial_id;
    double value;
} tell_item;
/* {"results": [...]} with 1..10000 items; *items owned by the caller (free()). */
int proto_tell_batch_parse(json_t *doc, tell_item **items, size_t *n, api_error *err);

/* {"reason": str?}; *reason is a new string or NULL. */
int proto_fail_parse(json_t *doc, char **reason, api_error *err);
/* {} (doc may be NULL for an empty body). */
int proto_heartbeat_parse(json_t *doc, api_error *err);

/* {"observations": [{"x": [...]} | {"params": {...}}, "value": v]}; params are mapped
 * with the study's spec. xs is n x dim (owned by the caller, free()). */
int proto_observations_parse(json_t *doc, const study_spec *spec, double **xs,
                             double **values, size_t *n, api_error *err);

/* Candidate sets: JSON {"rows": [[...]], "names": [...]?} or RFC 4180 CSV text (csv.c:
 * quoted fields, an optional header of names). *names is a new JSON array or NULL; *rows
 * owned by the caller (free()). CSV errors name the line ("line 3: ..."). */
int proto_candidates_json_parse(json_t *doc, double **rows, size_t *n, size_t *dim,
                                json_t **names, api_error *err);
int proto_candidates_csv_parse(const char *text, size_t len, double **rows, size_t *n,
                               size_t *dim, json_t **names, api_error *err);

/* ------------------------------------------------- box <-> unit cube */

/* Maps unit-cube coordinates to {"name": value} (new object). */
json_t *proto_params_from_x(const study_spec *s, const double *x);
/* The box's coordinates that take few values, for kb_space_set_levels (n_params entries
 * each): a categorical's choices (unordered), an integer's values on a linear scale (the
 * bins of unit_of); 0 for floats, log-scale integers and ranges beyond 1e15 values. */
void proto_box_levels(const study_spec *s, size_t *levels, unsigned char *categorical);
/* Maps a params object to unit-cube coordinates (dim entries); field prefix in errors. */
int proto_params_to_x(const study_spec *s, json_t *params, const char *path, double *x,
                      api_error *err);

/* -------------------------------------------------------- renderings */

typedef enum trial_state {
    TRIAL_PENDING = 0,
    TRIAL_COMPLETED,
    TRIAL_FAILED,
    TRIAL_EXPIRED,
    TRIAL__STATES
} trial_state;

const char *proto_trial_state_name(trial_state s);
int proto_trial_state_parse(const char *name, trial_state *out);

typedef struct trial_rec {
    int64_t id;          /* == the engine's handle */
    trial_state state;
    char *worker;        /* owned */
    char *reason;        /* owned, NULL unless failed with a reason */
    int64_t cand_index;  /* candidates: row; box: -1 */
    double value;        /* user's direction; valid when completed */
    int64_t created_ms, lease_ms, completed_ms; /* completed_ms 0 = none */
    double *x;           /* dim entries (owned) */
} trial_rec;

json_t *proto_trial_json(const trial_rec *t, int64_t study_id, const study_spec *s);
/* RFC 3339 UTC with milliseconds into buf (>= 32 bytes). */
void proto_time_format(int64_t ms, char *buf, size_t size);

#endif /* KB_PROTO_H */
