/*
 * proto.h - the REST protocol of kbanditd as C: the error table (API error code ->
 * HTTP status and stable string), request documents parsed from JSON into validated
 * structs with field-level errors, and the JSON renderings of studies and trials.
 *
 * Ownership: *_parse fill caller-owned structs whose heap members are released by the
 * matching *_clear; functions returning json_t * return a new reference. Parsers never
 * keep a reference to the input document. Field paths in errors are JSON paths
 * relative to the request body ("space.candidates[3][1]", "engine.settings.seed").
 * The domain types parsed and rendered here (study_spec, trial_rec) are in domain.h.
 */
#ifndef KB_PROTO_H
#define KB_PROTO_H

#include "domain.h"
#include "kbandit.h"

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

/* The engine of a study whose request names none. */
#define PROTO_DEFAULT_ENGINE "bbkb"

/* The rules a new study is created under, stored with it ("rules" in its stored config;
 * absent: 1) so that a stored study keeps the behaviour it was created with:
 *   1  log-scale int parameters are a continuum, rounded, and so is a one-value
 *      parameter;
 *   2  (this version) a log-scale int's values are levels of their own
 *      (proto_log_int_low), and a one-value parameter is one level (proto_box_levels). */
#define PROTO_RULES 2

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
    int retry_after_s; /* API_UNAVAILABLE: the Retry-After to send (0: the default 1 s) */
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
/* Sets the flag again when failed is non-zero (what a take read and must leave for the
 * code that checks it later, e.g. the reply layer after a log line was rendered). */
void proto_json_alloc_put_back(int failed);

/* Parses a JSON object body. Empty or unparsable body / invalid UTF-8 -> invalid_json;
 * a non-object -> invalid; an allocation failure -> internal (after proto_init; before,
 * only those jansson reports as such). Returns a new reference or NULL. */
json_t *proto_parse_object(const char *body, size_t len, api_error *err);

/* A study document: POST /v1/studies (rules PROTO_RULES). */
int proto_study_spec_parse(json_t *doc, study_spec *out, api_error *err);
/* A stored configuration (proto_study_spec_json's stored form): the same, with the
 * "rules" it was stored with (1 when absent); doc loses that member. */
int proto_study_spec_parse_stored(json_t *doc, study_spec *out, api_error *err);
/* The rules only a new study must pass (int bounds within +-(2^53 - 1), field
 * space.params[i].low / high; categorical choices are distinct, field
 * space.params[i].choices[j], the first repeat; integer engine options within +-2^53 and
 * lengthscales >= 1e-12, no subnormal number, field engine.settings.<option>). A stored study is loaded under the
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

/* The most points one ask hands out (its `count`). */
#define PROTO_ASK_MAX 1000

typedef struct ask_req {
    char *worker;
    char *request_id;    /* NULL when not given: an ask retried with it is answered again */
    int64_t count;       /* 1..PROTO_ASK_MAX, default 1 */
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
/* PATCH /v1/studies/{id}: {"state": "active" | "paused" | "completed"}. */
int proto_study_patch_parse(json_t *doc, study_state *state, api_error *err);

/* {"observations": [{"x": [...]} | {"params": {...}}, "value": v]}; params are mapped
 * with the study's spec. xs is n x dim (owned by the caller, free()). */
int proto_observations_parse(json_t *doc, const study_spec *spec, double **xs,
                             double **values, size_t *n, api_error *err);

/* The characters (code points) of UTF-8 text: what the API's length limits count, as
 * JSON Schema's maxLength does (200 characters may take up to 800 bytes). */
size_t proto_utf8_chars(const char *s, size_t len);
/* 0 when the strings of names (an array of strings) differ, else -1 with err: field
 * names[j] of the first repeat, the message after context (e.g. "line 1: "). */
int proto_names_distinct(const json_t *names, const char *context, api_error *err);
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
/* A log-scale integer's low, for kb_space_set_log_levels (its values at their log
 * positions, where unit_of puts them), when it has 2 to KB_MAX_LOG_LEVELS values that each
 * map back to themselves; 0 for other parameters and beyond (a continuum, rounded). */
double proto_log_int_low(const param_spec *p);
/* Maps a params object to unit-cube coordinates (dim entries); field prefix in errors. */
int proto_params_to_x(const study_spec *s, json_t *params, const char *path, double *x,
                      api_error *err);

/* -------------------------------------------------------- renderings */

json_t *proto_trial_json(const trial_rec *t, int64_t study_id, const study_spec *s);
/* RFC 3339 UTC with milliseconds into buf (>= 32 bytes). */
void proto_time_format(int64_t ms, char *buf, size_t size);

/* ------------------------------------ answers of the study layer (render.c) */

/* What one ask attempt handed out. */
typedef struct ask_answer {
    trial_rec *trials;      /* n copies (owned) */
    size_t n;
    const char *status;     /* static: ok, awaiting_feedback, exhausted, max_trials_reached */
    size_t awaiting;        /* pending trials whose feedback closes the wait */
    int64_t retry_after_ms; /* 0 when trials were handed out */
} ask_answer;
void proto_ask_answer_clear(ask_answer *a);
/* {"trials", "status", "awaiting", "retry_after_ms"} */
json_t *proto_ask_json(const ask_answer *a, int64_t study_id, const study_spec *s);

/* One item of a batch tell: the trial after it, or its error. */
typedef struct tell_outcome {
    int64_t trial_id;
    api_error err;   /* err.code == API_OK: told (or a repeated identical tell) */
    trial_rec trial; /* a copy (owned) when err.code == API_OK */
} tell_outcome;
void proto_tell_outcomes_free(tell_outcome *v, size_t n);
/* {"results": [{"trial_id", "status", "trial" | "error"}]} */
json_t *proto_tell_batch_json(const tell_outcome *v, size_t n, int64_t study_id,
                              const study_spec *s);

/* A Study: the spec summarised, "id", "created_at", "progress" (null without it). */
json_t *proto_study_json(const study_doc *d);
/* {"studies": [...], "next_cursor"} and {"trials": [...], "next_cursor"}: next_cursor
 * 0 renders null, else its decimal string. */
json_t *proto_study_page_json(const study_doc *docs, size_t n, int64_t next_cursor);
json_t *proto_trial_page_json(const trial_rec *v, size_t n, int64_t next_cursor,
                              int64_t study_id, const study_spec *s);
/* Exports of a study: {"study", "trials", "observations"} (each observation {"x",
 * "params" (a box's, else null), "value", "created_at"}), and CSV text of its trials
 * (malloc'd, NULL out of memory) with the columns id,state,worker,value and one per
 * coordinate (the parameter names of a box, x0.. for candidates). */
json_t *proto_export_json(const study_doc *d, const trial_rec *v, size_t n,
                          const observation_set *obs);
char *proto_export_csv(const study_spec *s, const trial_rec *v, size_t n, size_t *len);

/* The engine catalogue from the core's registry: {"default", "common_options",
 * "engines": [{"name", "summary", "max_dim", "options"}]}, each option {"name", "type",
 * "default", "minimum", "maximum", "exclusive_minimum", "choices", "description"} (null
 * where the option has none; an unbounded side is null). */
json_t *proto_engines_json(void);

#endif /* KB_PROTO_H */
