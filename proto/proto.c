/*
 * proto.c - This file contains the error table of the REST API, the JSON request
 * parsers with field-level validation, the box <-> unit-cube mapping and the JSON
 * renderings of studies and trials.
 *
 * Validation rules shared by every parser: unknown keys are rejected (field = the key's
 * path), numbers must be finite, integers must be JSON integers, strings have bounded
 * lengths. A parser either fills its output completely and returns 0, or returns -1
 * with err filled and nothing left allocated.
 */
#include "proto.h"
#include "numfmt.h"

/* Paths are truncated on purpose when longer than API_FIELD_MAX. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wformat-truncation"
#endif

#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The largest magnitude of a new int parameter's bounds: 2^53 - 1, below which every
 * integer is a double exactly (JavaScript's MAX_SAFE_INTEGER). An int's bounds and values
 * live as doubles in the engines and the store: past it the stored bound would be another
 * number, even one below low. */
#define PROTO_INT_LIMIT 9007199254740991.0

/* ------------------------------------------------------------- errors */

static const struct {
    int status;
    const char *name;
} api_table[API__COUNT] = {
    [API_OK] = {200, "ok"},
    [API_INVALID_JSON] = {400, "invalid_json"},
    [API_INVALID] = {400, "invalid"},
    [API_UNAUTHORIZED] = {401, "unauthorized"},
    [API_NOT_FOUND] = {404, "not_found"},
    [API_METHOD_NOT_ALLOWED] = {405, "method_not_allowed"},
    [API_CONFLICT] = {409, "conflict"},
    [API_PAYLOAD_TOO_LARGE] = {413, "payload_too_large"},
    [API_UNSUPPORTED_MEDIA_TYPE] = {415, "unsupported_media_type"},
    [API_INTERNAL] = {500, "internal"},
    [API_UNAVAILABLE] = {503, "unavailable"},
};

int api_status(api_code code) { return code < API__COUNT ? api_table[code].status : 500; }

const char *api_code_name(api_code code)
{
    return code < API__COUNT ? api_table[code].name : "internal";
}

int api_fail(api_error *err, api_code code, const char *field, const char *fmt, ...)
{
    if (err) {
        err->code = code;
        err->retry_after_s = 0;
        snprintf(err->field, sizeof err->field, "%s", field ? field : "");
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->message, sizeof err->message, fmt, ap);
        va_end(ap);
    }
    return -1;
}

/* A JSON string of s, its non-ASCII bytes made '?' when s is not UTF-8 (a message quoting
 * a raw request target, or cut inside a character; jansson refuses such a string, and
 * the error answer then became a 500 "out of memory"). */
static json_t *json_text(const char *s)
{
    json_t *j = json_string(s);
    if (j || !s)
        return j;
    char ascii[API_MESSAGE_MAX];
    size_t i = 0;
    for (; s[i] && i + 1 < sizeof ascii; i++)
        ascii[i] = (unsigned char)s[i] < 0x80 ? s[i] : '?';
    ascii[i] = 0;
    return json_string(ascii);
}

json_t *api_error_json(const api_error *err)
{
    return json_pack("{s:{s:s,s:o,s:o}}", "error", "code", api_code_name(err->code),
                     "message", json_text(err->message), "field",
                     err->field[0] ? json_text(err->field) : json_null());
}

int api_fail_kb(api_error *err, const kb_error *kerr, const char *field_prefix)
{
    api_code code;
    switch (kerr->code) {
    case KB_EINVAL: case KB_ERANGE: case KB_EUNSUPPORTED: code = API_INVALID; break;
    case KB_ENOTFOUND: code = kerr->field[0] ? API_INVALID : API_NOT_FOUND; break;
    case KB_ESTATE: code = API_CONFLICT; break;
    default: code = API_INTERNAL; break;
    }
    char field[API_FIELD_MAX] = "";
    if (kerr->field[0])
        snprintf(field, sizeof field, "%s%s", field_prefix ? field_prefix : "", kerr->field);
    return api_fail(err, code, field, "%s", kerr->message);
}

/* -------------------------------------------------- validation helpers */

/* Paths are built in fixed buffers: a too-long path is truncated, never overflows. */
static void path_key(char *out, size_t size, const char *base, const char *key)
{
    snprintf(out, size, "%s%s%s", base, base[0] ? "." : "", key);
}

static void path_index(char *out, size_t size, const char *base, size_t i)
{
    snprintf(out, size, "%s[%zu]", base, i);
}

/* Rejects keys of obj not in the NULL-terminated list. */
static int check_keys(json_t *obj, const char *const *allowed, const char *path,
                      api_error *err)
{
    const char *key;
    json_t *v;
    json_object_foreach(obj, key, v) {
        int ok = 0;
        for (size_t i = 0; allowed[i] && !ok; i++)
            ok = strcmp(key, allowed[i]) == 0;
        if (!ok) {
            char p[API_FIELD_MAX];
            path_key(p, sizeof p, path, key);
            return api_fail(err, API_INVALID, p, "unknown field '%s'", key);
        }
    }
    return 0;
}

static int want_object(json_t *v, const char *path, api_error *err)
{
    return json_is_object(v) ? 0 : api_fail(err, API_INVALID, path, "must be an object");
}

static int number_of(json_t *v, const char *path, double *out, api_error *err)
{
    if (!json_is_number(v))
        return api_fail(err, API_INVALID, path, "must be a number");
    double d = json_number_value(v);
    if (!isfinite(d))
        return api_fail(err, API_INVALID, path, "must be finite");
    *out = d;
    return 0;
}

/* Optional integer member in [min, max]; *out = def when absent (required: error). */
static int get_int(json_t *obj, const char *key, const char *base, int required,
                   int64_t min, int64_t max, int64_t def, int64_t *out, api_error *err)
{
    char p[API_FIELD_MAX];
    path_key(p, sizeof p, base, key);
    json_t *v = json_object_get(obj, key);
    if (!v) {
        if (required)
            return api_fail(err, API_INVALID, p, "is required");
        *out = def;
        return 0;
    }
    if (!json_is_integer(v))
        return api_fail(err, API_INVALID, p, "must be an integer");
    json_int_t i = json_integer_value(v);
    if (i < min || i > max)
        return api_fail(err, API_INVALID, p, "must be in [%lld, %lld]", (long long)min,
                        (long long)max);
    *out = i;
    return 0;
}

size_t proto_utf8_chars(const char *s, size_t len)
{
    size_t n = 0;
    for (size_t i = 0; i < len; i++)
        n += ((unsigned char)s[i] & 0xC0) != 0x80; /* not a continuation byte */
    return n;
}

/* String member of 1..maxlen characters, copied into *out; NULL when absent and optional. */
static int get_string(json_t *obj, const char *key, const char *base, int required,
                      size_t maxlen, char **out, api_error *err)
{
    char p[API_FIELD_MAX];
    path_key(p, sizeof p, base, key);
    json_t *v = json_object_get(obj, key);
    *out = NULL;
    if (!v) {
        return required ? api_fail(err, API_INVALID, p, "is required") : 0;
    }
    if (!json_is_string(v))
        return api_fail(err, API_INVALID, p, "must be a string");
    size_t len = json_string_length(v), chars = proto_utf8_chars(json_string_value(v), len);
    if (chars < 1 || chars > maxlen)
        return api_fail(err, API_INVALID, p, "must have 1 to %zu characters", maxlen);
    if (memchr(json_string_value(v), 0, len))
        return api_fail(err, API_INVALID, p, "must not contain NUL");
    *out = strdup(json_string_value(v));
    return *out ? 0 : api_fail(err, API_INTERNAL, NULL, "out of memory");
}

/* A JSON array of `dim` finite numbers (dim 0: any length >= 1, returned in *dim). */
static int number_row(json_t *row, const char *path, double *out, size_t *dim,
                      api_error *err)
{
    if (!json_is_array(row))
        return api_fail(err, API_INVALID, path, "must be an array of numbers");
    size_t n = json_array_size(row);
    if (n == 0 && !*dim)
        return api_fail(err, API_INVALID, path, "must have at least one number");
    if (n == 0 || (*dim && n != *dim))
        return api_fail(err, API_INVALID, path, "must have %zu number%s, has %zu", *dim,
                        *dim == 1 ? "" : "s", n);
    for (size_t j = 0; j < n; j++) {
        char p[API_FIELD_MAX];
        double d;
        path_index(p, sizeof p, path, j);
        if (number_of(json_array_get(row, j), p, &d, err))
            return -1;
        if (out)
            out[j] = d;
    }
    *dim = n;
    return 0;
}

/* An array of rows, all of one dimension; *rows owned by the caller. */
static int number_matrix(json_t *arr, const char *path, double **rows, size_t *n,
                         size_t *dim, api_error *err)
{
    if (!json_is_array(arr) || json_array_size(arr) == 0)
        return api_fail(err, API_INVALID, path, "must be a non-empty array of rows");
    size_t nr = json_array_size(arr), d = 0;
    char p[API_FIELD_MAX];
    path_index(p, sizeof p, path, 0);
    if (number_row(json_array_get(arr, 0), p, NULL, &d, err))
        return -1;
    double *m = malloc(nr * d * sizeof *m);
    if (!m)
        return api_fail(err, API_INTERNAL, NULL, "out of memory");
    for (size_t i = 0; i < nr; i++) {
        path_index(p, sizeof p, path, i);
        if (number_row(json_array_get(arr, i), p, m + i * d, &d, err)) {
            free(m);
            return -1;
        }
    }
    *rows = m;
    *n = nr;
    *dim = d;
    return 0;
}

/* Set in a thread when an allocation of jansson's fails there (proto_init). jansson
 * hides such failures: the parser reports them as errors of the document (out_of_memory,
 * no error text at all when its lexer could not be set up, or a syntax error inside a
 * string token), and json_object_set_new / json_array_append_new with the NULL of a
 * failed constructor leave the key out without a word. Parsing and rendering read it to
 * answer 500 "out of memory" rather than blame the client or send a partial document. */
static _Thread_local int json_alloc_failed;

static void *json_alloc(size_t n)
{
    void *p = malloc(n);
    if (!p)
        json_alloc_failed = 1;
    return p;
}

void proto_init(void) { json_set_alloc_funcs(json_alloc, free); }

int proto_json_alloc_take(void)
{
    int failed = json_alloc_failed;
    json_alloc_failed = 0;
    return failed;
}

void proto_json_alloc_put_back(int failed)
{
    if (failed)
        json_alloc_failed = 1;
}

json_t *proto_parse_object(const char *body, size_t len, api_error *err)
{
    if (!body || len == 0) {
        api_fail(err, API_INVALID_JSON, NULL, "a JSON request body is required");
        return NULL;
    }
    json_error_t jerr;
    proto_json_alloc_take();
    json_t *doc = json_loadb(body, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!doc && (proto_json_alloc_take() || json_error_code(&jerr) == json_error_out_of_memory ||
                 !jerr.text[0])) {
        api_fail(err, API_INTERNAL, NULL, "out of memory");
        return NULL;
    }
    if (!doc) {
        api_fail(err, API_INVALID_JSON, NULL, "invalid JSON at line %d column %d: %s",
                 jerr.line, jerr.column, jerr.text);
        return NULL;
    }
    if (!json_is_object(doc)) {
        json_decref(doc);
        api_fail(err, API_INVALID, NULL, "the request body must be a JSON object");
        return NULL;
    }
    return doc;
}

/* ------------------------------------------------------------ studies */

/* The error of a value outside p's range, its bounds written exactly. */
static int out_of_range(const param_spec *p, const char *path, api_error *err)
{
    char lo[KB_DOUBLE_BUF], hi[KB_DOUBLE_BUF];
    if (p->type == PARAM_INT) /* integral doubles; new studies' within +-2^53 */
        return api_fail(err, API_INVALID, path, "must be in [%.0f, %.0f]", p->low, p->high);
    return api_fail(err, API_INVALID, path, "must be in [%s, %s]", kb_format_double(lo, p->low),
                    kb_format_double(hi, p->high));
}

static int parse_param(json_t *p, const char *path, param_spec *out, api_error *err)
{
    static const char *const num_keys[] = {"name", "type", "low", "high", "log", NULL};
    static const char *const cat_keys[] = {"name", "type", "choices", NULL};
    char fp[API_FIELD_MAX];
    if (want_object(p, path, err))
        return -1;
    json_t *type = json_object_get(p, "type");
    path_key(fp, sizeof fp, path, "type");
    const char *t = json_string_value(type);
    if (!t)
        return api_fail(err, API_INVALID, fp, "is required: float, int or categorical");
    if (strcmp(t, "float") == 0)
        out->type = PARAM_FLOAT;
    else if (strcmp(t, "int") == 0)
        out->type = PARAM_INT;
    else if (strcmp(t, "categorical") == 0)
        out->type = PARAM_CATEGORICAL;
    else
        return api_fail(err, API_INVALID, fp, "must be float, int or categorical");
    if (check_keys(p, out->type == PARAM_CATEGORICAL ? cat_keys : num_keys, path, err) ||
        get_string(p, "name", path, 1, 200, &out->name, err))
        return -1;
    if (out->type == PARAM_CATEGORICAL) {
        json_t *c = json_object_get(p, "choices");
        path_key(fp, sizeof fp, path, "choices");
        if (!json_is_array(c) || json_array_size(c) == 0 || json_array_size(c) > KB_MAX_CHOICES)
            return api_fail(err, API_INVALID, fp, "must be an array of 1 to %d choices",
                            KB_MAX_CHOICES);
        size_t i;
        json_t *v;
        json_array_foreach(c, i, v) {
            if (!json_is_string(v) && !json_is_number(v) && !json_is_boolean(v)) {
                char ip[API_FIELD_MAX];
                path_index(ip, sizeof ip, fp, i);
                return api_fail(err, API_INVALID, ip, "must be a string, number or boolean");
            }
        }
        out->choices = json_deep_copy(c);
        return 0;
    }
    char lp[API_FIELD_MAX], hp[API_FIELD_MAX];
    path_key(lp, sizeof lp, path, "low");
    path_key(hp, sizeof hp, path, "high");
    json_t *lo = json_object_get(p, "low"), *hi = json_object_get(p, "high");
    if (!lo)
        return api_fail(err, API_INVALID, lp, "is required");
    if (!hi)
        return api_fail(err, API_INVALID, hp, "is required");
    if (number_of(lo, lp, &out->low, err) || number_of(hi, hp, &out->high, err))
        return -1;
    json_t *lg = json_object_get(p, "log");
    path_key(fp, sizeof fp, path, "log");
    if (lg && !json_is_boolean(lg))
        return api_fail(err, API_INVALID, fp, "must be a boolean");
    out->log = json_is_true(lg);
    if (out->type == PARAM_INT && !json_is_integer(lo))
        return api_fail(err, API_INVALID, lp, "must be an integer");
    if (out->type == PARAM_INT && !json_is_integer(hi))
        return api_fail(err, API_INVALID, hp, "must be an integer");
    /* low == high is a one-value parameter, int or float alike: harmless (the engine sees
     * a constant coordinate), and stored int studies already had it. */
    if (out->high < out->low)
        return api_fail(err, API_INVALID, hp, "must be >= low");
    if (out->log && !(out->low > 0))
        return api_fail(err, API_INVALID, lp, "must be > 0 on a log scale");
    return 0;
}

static int parse_space(json_t *sp, study_spec *out, api_error *err)
{
    static const char *const cand_keys[] = {"type", "candidates", "candidate_set", NULL};
    static const char *const box_keys[] = {"type", "params", NULL};
    if (!sp)
        return api_fail(err, API_INVALID, "space", "is required");
    if (want_object(sp, "space", err))
        return -1;
    const char *t = json_string_value(json_object_get(sp, "type"));
    if (!t || (strcmp(t, "candidates") && strcmp(t, "box")))
        return api_fail(err, API_INVALID, "space.type", "must be candidates or box");
    if (strcmp(t, "candidates") == 0) {
        out->space = SPACE_CANDIDATES;
        if (check_keys(sp, cand_keys, "space", err))
            return -1;
        json_t *c = json_object_get(sp, "candidates"), *cs = json_object_get(sp, "candidate_set");
        if ((c != NULL) == (cs != NULL))
            return api_fail(err, API_INVALID, "space.candidates",
                            "give exactly one of candidates or candidate_set");
        if (cs)
            return get_int(sp, "candidate_set", "space", 1, 1, INT64_MAX, 0,
                           &out->candidate_set, err);
        return number_matrix(c, "space.candidates", &out->candidates, &out->rows, &out->dim,
                             err);
    }
    out->space = SPACE_BOX;
    if (check_keys(sp, box_keys, "space", err))
        return -1;
    json_t *ps = json_object_get(sp, "params");
    if (!json_is_array(ps) || json_array_size(ps) == 0 || json_array_size(ps) > 1000)
        return api_fail(err, API_INVALID, "space.params", "must be an array of 1 to 1000 params");
    out->n_params = json_array_size(ps);
    out->params = calloc(out->n_params, sizeof *out->params);
    if (!out->params)
        return api_fail(err, API_INTERNAL, NULL, "out of memory");
    for (size_t i = 0; i < out->n_params; i++) {
        char p[API_FIELD_MAX];
        path_index(p, sizeof p, "space.params", i);
        if (parse_param(json_array_get(ps, i), p, &out->params[i], err))
            return -1;
        for (size_t j = 0; j < i; j++)
            if (strcmp(out->params[j].name, out->params[i].name) == 0) {
                char np[API_FIELD_MAX];
                path_key(np, sizeof np, p, "name");
                return api_fail(err, API_INVALID, np, "duplicate param name '%s'",
                                out->params[i].name);
            }
    }
    out->dim = out->n_params;
    return 0;
}

/* engine: {"name", "settings"}; the config is built later (proto_study_spec_config). */
static int parse_engine(json_t *eng, study_spec *out, api_error *err)
{
    static const char *const keys[] = {"name", "settings", NULL};
    if (eng && (want_object(eng, "engine", err) || check_keys(eng, keys, "engine", err)))
        return -1;
    if (eng && json_object_get(eng, "name")) {
        if (get_string(eng, "name", "engine", 1, 64, &out->engine, err))
            return -1;
    } else {
        out->engine = strdup(PROTO_DEFAULT_ENGINE);
    }
    json_t *st = eng ? json_object_get(eng, "settings") : NULL;
    if (st && want_object(st, "engine.settings", err))
        return -1;
    out->settings = st ? json_deep_copy(st) : json_object();
    return out->engine && out->settings ? 0 : api_fail(err, API_INTERNAL, NULL, "out of memory");
}

/* Sets one engine.settings member on cfg by its JSON type. */
static int set_option(kb_config *cfg, const char *key, json_t *v, api_error *err)
{
    kb_error kerr = {0};
    char p[API_FIELD_MAX];
    path_key(p, sizeof p, "engine.settings", key);
    int rc;
    if (json_is_number(v)) {
        double d;
        if (number_of(v, p, &d, err))
            return -1;
        rc = kb_config_set_number(cfg, key, d, &kerr);
    } else if (json_is_string(v)) {
        rc = kb_config_set_string(cfg, key, json_string_value(v), &kerr);
    } else if (json_is_array(v) && json_array_size(v) > 0) {
        size_t d = 0;
        double *vec = malloc(json_array_size(v) * sizeof *vec);
        if (!vec)
            return api_fail(err, API_INTERNAL, NULL, "out of memory");
        if (number_row(v, p, vec, &d, err)) {
            free(vec);
            return -1;
        }
        rc = kb_config_set_vector(cfg, key, vec, d, &kerr);
        free(vec);
    } else {
        return api_fail(err, API_INVALID, p, "must be a number, string or non-empty array of numbers");
    }
    if (rc < 0) {
        snprintf(kerr.field, sizeof kerr.field, "%s", key);
        return api_fail_kb(err, &kerr, "engine.settings.");
    }
    return 0;
}

int proto_study_spec_config(study_spec *s, api_error *err)
{
    kb_error kerr = {0};
    kb_config_free(s->cfg);
    s->cfg = kb_config_new(s->engine, &kerr);
    if (!s->cfg && kerr.code != KB_ENOTFOUND) /* out of memory */
        return api_fail_kb(err, &kerr, NULL);
    if (!s->cfg) {
        const char *const *names = kb_engine_names();
        char list[API_MESSAGE_MAX / 2] = "";
        for (size_t i = 0; names[i]; i++) {
            size_t l = strlen(list);
            snprintf(list + l, sizeof list - l, "%s%s", i ? ", " : "", names[i]);
        }
        return api_fail(err, API_INVALID, "engine.name", "unknown engine '%s' (known: %s)",
                        s->engine, list);
    }
    const char *key;
    json_t *v;
    json_object_foreach(s->settings, key, v) {
        if (set_option(s->cfg, key, v, err))
            return -1;
    }
    return 0;
}

int proto_study_spec_parse(json_t *doc, study_spec *out, api_error *err)
{
    static const char *const keys[] = {"name", "direction", "space", "engine",
                                       "lease_seconds", "max_trials", NULL};
    memset(out, 0, sizeof *out);
    out->rules = PROTO_RULES;
    if (want_object(doc, "", err) || check_keys(doc, keys, "", err) ||
        get_string(doc, "name", "", 1, 200, &out->name, err))
        goto fail;
    json_t *dir = json_object_get(doc, "direction");
    if (dir) {
        const char *d = json_string_value(dir);
        if (!d || (strcmp(d, "maximize") && strcmp(d, "minimize"))) {
            api_fail(err, API_INVALID, "direction", "must be maximize or minimize");
            goto fail;
        }
        out->minimize = strcmp(d, "minimize") == 0;
    }
    json_t *mt = json_object_get(doc, "max_trials");
    if (parse_space(json_object_get(doc, "space"), out, err) ||
        get_int(doc, "lease_seconds", "", 0, 1, 604800, 600, &out->lease_seconds, err) ||
        (mt && !json_is_null(mt) &&
         get_int(doc, "max_trials", "", 0, 1, INT64_MAX, 0, &out->max_trials, err)) ||
        parse_engine(json_object_get(doc, "engine"), out, err)) /* last: needs the others valid */
        goto fail;
    return 0;
fail:
    proto_study_spec_clear(out);
    return -1;
}

int proto_study_spec_parse_stored(json_t *doc, study_spec *out, api_error *err)
{
    json_t *r = json_object_get(doc, "rules");
    json_int_t rules = r ? json_integer_value(r) : 1;
    if (r && (!json_is_integer(r) || rules < 1 || rules > PROTO_RULES)) {
        memset(out, 0, sizeof *out);
        return api_fail(err, API_INVALID, "rules", "must be an integer from 1 to %d", PROTO_RULES);
    }
    json_object_del(doc, "rules");
    if (proto_study_spec_parse(doc, out, err))
        return -1;
    out->rules = (int)rules;
    return 0;
}

typedef struct choice_ref {
    const json_t *v;
    size_t i;
} choice_ref;

/* An integer against a real by exact value: a double equal to (double)i may still differ
 * from i past 2^53 (9007199254740993 is not 9007199254740992.0). */
static int int_real_cmp(json_int_t i, double d)
{
    double di = (double)i;
    if (di != d)
        return (di > d) - (di < d);
    if (d >= 9223372036854775808.0) /* 2^63: above every int64 */
        return -1;
    json_int_t j = (json_int_t)d; /* d is integral here, within int64 */
    return (i > j) - (i < j);
}

/* JSON numbers by exact value (integers past 2^53 too). */
static int number_cmp(const json_t *a, const json_t *b)
{
    if (json_is_integer(a) && json_is_integer(b)) {
        json_int_t x = json_integer_value(a), y = json_integer_value(b);
        return (x > y) - (x < y);
    }
    if (json_is_integer(a))
        return int_real_cmp(json_integer_value(a), json_real_value(b));
    if (json_is_integer(b))
        return -int_real_cmp(json_integer_value(b), json_real_value(a));
    double x = json_real_value(a), y = json_real_value(b);
    return (x > y) - (x < y);
}

/* A total order on categorical choices in which 0 means the same choice: booleans, then
 * numbers by value (1 and 1.0 are one choice, as for JSON Schema's uniqueItems), then
 * strings by bytes. */
static int choice_value_cmp(const json_t *a, const json_t *b)
{
    int ra = json_is_boolean(a) ? 0 : json_is_number(a) ? 1 : 2;
    int rb = json_is_boolean(b) ? 0 : json_is_number(b) ? 1 : 2;
    if (ra != rb)
        return (ra > rb) - (ra < rb);
    if (ra == 0)
        return json_is_true(a) - json_is_true(b);
    if (ra == 1)
        return number_cmp(a, b);
    size_t la = json_string_length(a), lb = json_string_length(b);
    int c = memcmp(json_string_value(a), json_string_value(b), la < lb ? la : lb);
    return c ? c : (la > lb) - (la < lb);
}

/* By value, then by position: a repeat sorts right after the earlier equal choices. */
static int choice_cmp(const void *pa, const void *pb)
{
    const choice_ref *a = pa, *b = pb;
    int c = choice_value_cmp(a->v, b->v);
    return c ? c : (a->i > b->i) - (a->i < b->i);
}

/* The first position of choices that repeats an earlier choice, or SIZE_MAX. Sorting
 * keeps this O(n log n) for the 10,000 choices a param may have. */
static size_t first_repeat(const json_t *choices, int *oom)
{
    size_t n = json_array_size(choices), rep = SIZE_MAX;
    choice_ref *r = malloc((n ? n : 1) * sizeof *r);
    *oom = !r;
    if (!r)
        return rep;
    for (size_t i = 0; i < n; i++)
        r[i] = (choice_ref){json_array_get(choices, i), i};
    qsort(r, n, sizeof *r, choice_cmp);
    for (size_t i = 1; i < n; i++)
        if (choice_value_cmp(r[i - 1].v, r[i].v) == 0 && r[i].i < rep)
            rep = r[i].i;
    free(r);
    return rep;
}

/* A new int parameter's bounds within +-PROTO_INT_LIMIT (stored studies keep theirs). A
 * JSON integer past the limit reads as a double beyond it, so the doubles tell. */
static int int_bounds_check(const param_spec *p, size_t i, api_error *err)
{
    int lo_bad = fabs(p->low) > PROTO_INT_LIMIT;
    if (p->type != PARAM_INT || (!lo_bad && fabs(p->high) <= PROTO_INT_LIMIT))
        return 0;
    char fp[API_FIELD_MAX];
    snprintf(fp, sizeof fp, "space.params[%zu].%s", i, lo_bad ? "low" : "high");
    return api_fail(err, API_INVALID, fp, "must be an integer in [%.0f, %.0f]", -PROTO_INT_LIMIT,
                    PROTO_INT_LIMIT);
}

/* Engine option `name`'s spec (the engine's own first, as kb_config), or NULL. */
static const kb_option_spec *option_spec(const char *engine, const char *name)
{
    const kb_option_spec *lists[2] = {kb_engine_options(engine), kb_common_options()};
    for (int k = 0; k < 2; k++)
        for (const kb_option_spec *o = lists[k]; o && o->name; o++)
            if (strcmp(o->name, name) == 0)
                return o;
    return NULL;
}

/* The shortest lengthscale a new study may set: inputs divided by it are squared in the
 * kernel's distances (kernel.c), and below ~1e-154 a unit coordinate's square overflows,
 * every posterior NaN (a study set to 1e-160 failed every ask after its first tell). No
 * unit-cube problem needs one below 1e-12, and inputs up to 1e142 stay finite with it. */
#define PROTO_LENGTHSCALE_MIN 1e-12

/* A new study's engine settings: an integer option's JSON integer within +-2^53 (the seed
 * 2^53 + 1 read as 2^53 and passed its maximum), no subnormal number, lengthscales >=
 * PROTO_LENGTHSCALE_MIN. */
static int settings_check_new(const study_spec *s, api_error *err)
{
    const char *key;
    json_t *v;
    json_object_foreach(s->settings, key, v) {
        char p[API_FIELD_MAX];
        path_key(p, sizeof p, "engine.settings", key);
        const kb_option_spec *o = option_spec(s->engine, key);
        json_int_t iv = json_integer_value(v);
        if (o && o->type == KB_OPT_INTEGER && json_is_integer(v) &&
            (iv > ((json_int_t)1 << 53) || iv < -((json_int_t)1 << 53)))
            return api_fail(err, API_INVALID, p,
                            "must be an integer from -2^53 to 2^53 (a double holds no other "
                            "exactly)");
        for (size_t i = 0; i < (json_is_array(v) ? json_array_size(v) : 1); i++) {
            double x = json_number_value(json_is_array(v) ? json_array_get(v, i) : v);
            if (x != 0.0 && fabs(x) < DBL_MIN) /* sgp-ts's lambda 5e-324 failed every ask */
                return api_fail(err, API_INVALID, p, "'%s' must not be subnormal (0 < |x| < "
                                "2.2250738585072014e-308)", key);
        }
        int one = strcmp(key, "lengthscale") == 0, many = strcmp(key, "lengthscales") == 0;
        for (size_t i = 0; (one && i < 1) || (many && i < json_array_size(v)); i++) {
            json_t *l = one ? v : json_array_get(v, i);
            if (json_is_number(l) && json_number_value(l) < PROTO_LENGTHSCALE_MIN)
                return api_fail(err, API_INVALID, p, "'%s' must be >= 1e-12", key);
        }
    }
    return 0;
}

int proto_study_spec_check_new(const study_spec *s, api_error *err)
{
    if (settings_check_new(s, err))
        return -1;
    for (size_t i = 0; i < s->n_params; i++) {
        if (int_bounds_check(&s->params[i], i, err))
            return -1;
        if (s->params[i].type != PARAM_CATEGORICAL)
            continue;
        int oom;
        size_t j = first_repeat(s->params[i].choices, &oom);
        if (oom)
            return api_fail(err, API_INTERNAL, NULL, "out of memory");
        if (j != SIZE_MAX) {
            char fp[API_FIELD_MAX];
            snprintf(fp, sizeof fp, "space.params[%zu].choices[%zu]", i, j);
            return api_fail(err, API_INVALID, fp, "repeats an earlier choice");
        }
    }
    return 0;
}

void proto_study_spec_clear(study_spec *s)
{
    free(s->name);
    free(s->candidates);
    for (size_t i = 0; s->params && i < s->n_params; i++) {
        free(s->params[i].name);
        json_decref(s->params[i].choices);
    }
    free(s->params);
    free(s->engine);
    json_decref(s->settings);
    json_decref(s->column_names);
    kb_config_free(s->cfg);
    memset(s, 0, sizeof *s);
}

static json_t *matrix_json(const double *m, size_t n, size_t dim)
{
    json_t *a = json_array();
    for (size_t i = 0; i < n; i++) {
        json_t *row = json_array();
        for (size_t j = 0; j < dim; j++)
            json_array_append_new(row, json_real(m[i * dim + j]));
        json_array_append_new(a, row);
    }
    return a;
}

static json_t *space_json(const study_spec *s, int with_candidates)
{
    if (s->space == SPACE_BOX) {
        json_t *ps = json_array();
        for (size_t i = 0; i < s->n_params; i++) {
            const param_spec *p = &s->params[i];
            json_t *o;
            if (p->type == PARAM_CATEGORICAL)
                o = json_pack("{s:s,s:s,s:O}", "name", p->name, "type", "categorical",
                              "choices", p->choices);
            else if (p->type == PARAM_INT)
                o = json_pack("{s:s,s:s,s:I,s:I,s:b}", "name", p->name, "type", "int", "low",
                              (json_int_t)p->low, "high", (json_int_t)p->high, "log", p->log);
            else
                o = json_pack("{s:s,s:s,s:f,s:f,s:b}", "name", p->name, "type", "float",
                              "low", p->low, "high", p->high, "log", p->log);
            json_array_append_new(ps, o);
        }
        return json_pack("{s:s,s:o}", "type", "box", "params", ps);
    }
    if (s->candidate_set)
        return json_pack("{s:s,s:I,s:I,s:I}", "type", "candidates", "rows",
                         (json_int_t)s->rows, "dim", (json_int_t)s->dim, "candidate_set",
                         (json_int_t)s->candidate_set);
    if (with_candidates)
        return json_pack("{s:s,s:o}", "type", "candidates", "candidates",
                         matrix_json(s->candidates, s->rows, s->dim));
    return json_pack("{s:s,s:I,s:I}", "type", "candidates", "rows", (json_int_t)s->rows,
                     "dim", (json_int_t)s->dim);
}

json_t *proto_study_spec_json(const study_spec *s, int with_candidates)
{
    json_t *o = json_pack("{s:s,s:s,s:o,s:{s:s,s:O},s:I}", "name", s->name, "direction",
                          s->minimize ? "minimize" : "maximize", "space",
                          space_json(s, with_candidates), "engine", "name", s->engine,
                          "settings", s->settings, "lease_seconds",
                          (json_int_t)s->lease_seconds);
    json_object_set_new(o, "max_trials",
                        s->max_trials ? json_integer(s->max_trials) : json_null());
    if (with_candidates && s->candidate_set) /* stored form: rows/dim are reloaded */
        json_object_set_new(o, "space", json_pack("{s:s,s:I}", "type", "candidates",
                                                  "candidate_set",
                                                  (json_int_t)s->candidate_set));
    if (with_candidates) /* stored form */
        json_object_set_new(o, "rules", json_integer(s->rules));
    return o;
}

/* -------------------------------------------------------- trial calls */

int proto_ask_parse(json_t *doc, ask_req *out, api_error *err)
{
    static const char *const keys[] = {"worker", "count", "wait_ms", "request_id", NULL};
    memset(out, 0, sizeof *out);
    if (check_keys(doc, keys, "", err) || get_string(doc, "worker", "", 1, 200, &out->worker, err) ||
        get_string(doc, "request_id", "", 0, 200, &out->request_id, err) ||
        get_int(doc, "count", "", 0, 1, PROTO_ASK_MAX, 1, &out->count, err) ||
        get_int(doc, "wait_ms", "", 0, 0, 60000, 0, &out->wait_ms, err)) {
        proto_ask_clear(out);
        return -1;
    }
    return 0;
}

void proto_ask_clear(ask_req *r)
{
    free(r->worker);
    free(r->request_id);
    r->worker = r->request_id = NULL;
}

static int value_member(json_t *obj, const char *base, double *value, api_error *err)
{
    char p[API_FIELD_MAX];
    path_key(p, sizeof p, base, "value");
    json_t *v = json_object_get(obj, "value");
    if (!v)
        return api_fail(err, API_INVALID, p, "is required");
    return number_of(v, p, value, err);
}

int proto_tell_parse(json_t *doc, double *value, api_error *err)
{
    static const char *const keys[] = {"value", NULL};
    return check_keys(doc, keys, "", err) || value_member(doc, "", value, err) ? -1 : 0;
}

int proto_tell_batch_parse(json_t *doc, tell_item **items, size_t *n, api_error *err)
{
    static const char *const keys[] = {"results", NULL};
    static const char *const item_keys[] = {"trial_id", "value", NULL};
    if (check_keys(doc, keys, "", err))
        return -1;
    json_t *r = json_object_get(doc, "results");
    if (!json_is_array(r) || json_array_size(r) < 1 || json_array_size(r) > 10000)
        return api_fail(err, API_INVALID, "results", "must be an array of 1 to 10000 items");
    size_t nr = json_array_size(r);
    tell_item *it = calloc(nr, sizeof *it);
    if (!it)
        return api_fail(err, API_INTERNAL, NULL, "out of memory");
    for (size_t i = 0; i < nr; i++) {
        char p[API_FIELD_MAX];
        path_index(p, sizeof p, "results", i);
        json_t *o = json_array_get(r, i);
        if (want_object(o, p, err) || check_keys(o, item_keys, p, err) ||
            get_int(o, "trial_id", p, 1, 1, INT64_MAX, 0, &it[i].trial_id, err) ||
            value_member(o, p, &it[i].value, err)) {
            free(it);
            return -1;
        }
    }
    *items = it;
    *n = nr;
    return 0;
}

int proto_fail_parse(json_t *doc, char **reason, api_error *err)
{
    static const char *const keys[] = {"reason", NULL};
    *reason = NULL;
    if (!doc)
        return 0;
    return check_keys(doc, keys, "", err) || get_string(doc, "reason", "", 0, 2000, reason, err)
               ? -1 : 0;
}

int proto_heartbeat_parse(json_t *doc, api_error *err)
{
    static const char *const keys[] = {NULL};
    return doc ? check_keys(doc, keys, "", err) : 0;
}

int proto_study_patch_parse(json_t *doc, study_state *state, api_error *err)
{
    static const char *const keys[] = {"state", NULL};
    char *name;
    if (check_keys(doc, keys, "", err) || get_string(doc, "state", "", 1, 20, &name, err))
        return -1;
    int rc = proto_study_state_parse(name, state);
    free(name);
    return rc ? api_fail(err, API_INVALID, "state", "must be active, paused or completed") : 0;
}

int proto_observations_parse(json_t *doc, const study_spec *spec, double **xs,
                             double **values, size_t *n, api_error *err)
{
    static const char *const keys[] = {"observations", NULL};
    static const char *const item_keys[] = {"x", "params", "value", NULL};
    if (check_keys(doc, keys, "", err))
        return -1;
    json_t *obs = json_object_get(doc, "observations");
    if (!json_is_array(obs) || json_array_size(obs) < 1 || json_array_size(obs) > 100000)
        return api_fail(err, API_INVALID, "observations",
                        "must be an array of 1 to 100000 items");
    size_t no = json_array_size(obs), dim = spec->dim;
    double *x = malloc(no * dim * sizeof *x), *y = malloc(no * sizeof *y);
    if (!x || !y) {
        free(x);
        free(y);
        return api_fail(err, API_INTERNAL, NULL, "out of memory");
    }
    for (size_t i = 0; i < no; i++) {
        char p[API_FIELD_MAX], fp[API_FIELD_MAX];
        path_index(p, sizeof p, "observations", i);
        json_t *o = json_array_get(obs, i);
        if (want_object(o, p, err) || check_keys(o, item_keys, p, err) ||
            value_member(o, p, &y[i], err))
            goto fail;
        json_t *xv = json_object_get(o, "x"), *pv = json_object_get(o, "params");
        if ((xv != NULL) == (pv != NULL)) {
            path_key(fp, sizeof fp, p, "x");
            api_fail(err, API_INVALID, fp, "give exactly one of x or params");
            goto fail;
        }
        if (pv && spec->space != SPACE_BOX) {
            path_key(fp, sizeof fp, p, "params");
            api_fail(err, API_INVALID, fp, "params need a box space; give x");
            goto fail;
        }
        if (pv) {
            path_key(fp, sizeof fp, p, "params");
            if (proto_params_to_x(spec, pv, fp, x + i * dim, err))
                goto fail;
            continue;
        }
        size_t d = dim;
        path_key(fp, sizeof fp, p, "x");
        if (number_row(xv, fp, x + i * dim, &d, err))
            goto fail;
        for (size_t j = 0; spec->space == SPACE_BOX && j < dim; j++)
            if (x[i * dim + j] < 0 || x[i * dim + j] > 1) {
                char jp[API_FIELD_MAX];
                path_index(jp, sizeof jp, fp, j);
                api_fail(err, API_INVALID, jp, "box coordinates must be in [0, 1]");
                goto fail;
            }
    }
    *xs = x;
    *values = y;
    *n = no;
    return 0;
fail:
    free(x);
    free(y);
    return -1;
}

/* ----------------------------------------------------- candidate sets */

int proto_names_distinct(const json_t *names, const char *context, api_error *err)
{
    int oom;
    size_t rep = first_repeat(names, &oom); /* strings compare by bytes, as choices do */
    if (oom)
        return api_fail(err, API_INTERNAL, NULL, "out of memory");
    if (rep == SIZE_MAX)
        return 0;
    char p[API_FIELD_MAX];
    path_index(p, sizeof p, "names", rep);
    return api_fail(err, API_INVALID, p, "%s'%s' repeats an earlier column's name", context,
                    json_string_value(json_array_get(names, rep)));
}

static int check_names(json_t *names, size_t dim, api_error *err)
{
    if (!json_is_array(names) || json_array_size(names) != dim)
        return api_fail(err, API_INVALID, "names", "must be an array of %zu strings", dim);
    size_t i;
    json_t *v;
    json_array_foreach(names, i, v) {
        size_t chars = proto_utf8_chars(json_string_value(v), json_string_length(v));
        if (!json_is_string(v) || chars < 1 || chars > 200) {
            char p[API_FIELD_MAX];
            path_index(p, sizeof p, "names", i);
            return api_fail(err, API_INVALID, p, "must be a string of 1 to 200 characters");
        }
    }
    return proto_names_distinct(names, "", err);
}

int proto_candidates_json_parse(json_t *doc, double **rows, size_t *n, size_t *dim,
                                json_t **names, api_error *err)
{
    static const char *const keys[] = {"rows", "names", NULL};
    if (check_keys(doc, keys, "", err) ||
        number_matrix(json_object_get(doc, "rows"), "rows", rows, n, dim, err))
        return -1;
    json_t *nm = json_object_get(doc, "names");
    *names = NULL;
    if (nm && !json_is_null(nm)) {
        if (check_names(nm, *dim, err)) {
            free(*rows);
            *rows = NULL;
            return -1;
        }
        *names = json_deep_copy(nm);
    }
    return 0;
}

/* ------------------------------------------------- box <-> unit cube */

static double clamp01(double v) { return v < 0 ? 0 : v > 1 ? 1 : v; }

/* Position in [0,1] of a float/int param value on its (log) scale. */
static double unit_of(const param_spec *p, double v)
{
    if (p->high == p->low) /* a one-value range: its value is the centre */
        return 0.5;
    if (p->log) /* the core's own map: a log int's values fall on its levels bit for bit */
        return kb_log_level_pos(p->low, p->high, v);
    /* Halved operands: high - low may overflow a double (low = -1e308, high = 1e308). */
    if (p->type == PARAM_INT) /* centre of the value's bin */
        return clamp01((v / 2 - p->low / 2 + 0.25) / (p->high / 2 - p->low / 2 + 0.5));
    return clamp01((v / 2 - p->low / 2) / (p->high / 2 - p->low / 2));
}

/* v to 15 significant digits: a float param as a user would write it. Mapped to the unit
 * cube and back, an observation's 0.001 on a log scale came out as 0.0010000000000000002;
 * the change is below 1e-15 of v, which no objective tells apart, and x (what the engine
 * holds and the store replays) is untouched. */
static double round15(double v)
{
    char buf[32];
    snprintf(buf, sizeof buf, "%.15g", v);
    return strtod(buf, NULL);
}

static double value_of(const param_spec *p, double u)
{
    u = clamp01(u);
    double v;
    if (p->log)
        v = exp(log(p->low) + u * (log(p->high) - log(p->low)));
    else if (p->type == PARAM_INT) /* equal bins of width (high - low + 1) / n_values */
        v = floor(p->low + u * (p->high / 2 - p->low / 2 + 0.5) * 2);
    else /* a convex combination cannot overflow */
        v = p->low * (1 - u) + p->high * u;
    if (p->type == PARAM_INT && p->log)
        v = round(v);
    else if (p->type == PARAM_FLOAT)
        v = round15(v);
    return fmin(p->high, fmax(p->low, v));
}

void proto_box_levels(const study_spec *s, size_t *levels, unsigned char *categorical)
{
    for (size_t i = 0; i < s->n_params; i++) {
        const param_spec *p = &s->params[i];
        double n = p->type == PARAM_CATEGORICAL ? (double)json_array_size(p->choices)
                   : p->type == PARAM_INT && !p->log ? p->high - p->low + 1.0
                                                     : 0.0;
        /* one value (a one-choice categorical, an int or a float with low == high) is a
         * level of its own under rules 2: a box of such and other discrete parameters
         * holds finitely many points (it was a continuum handing out one point forever) */
        int one = s->rules >= 2 && (n == 1.0 || (p->type != PARAM_CATEGORICAL && p->high == p->low));
        levels[i] = one ? 1 : n >= 2.0 && n <= 1e15 ? (size_t)n : 0; /* beyond: a continuum */
        categorical[i] = p->type == PARAM_CATEGORICAL && levels[i] >= 2;
    }
}

double proto_log_int_low(const param_spec *p)
{
    double n = p->high - p->low + 1.0;
    if (p->type != PARAM_INT || !p->log || n < 2.0 || n > KB_MAX_LOG_LEVELS)
        return 0.0;
    for (double v = p->low; v <= p->high; v++) /* each value is found again from its place */
        if (value_of(p, unit_of(p, v)) != v)
            return 0.0;
    return p->low;
}

json_t *proto_params_from_x(const study_spec *s, const double *x)
{
    json_t *o = json_object();
    for (size_t i = 0; i < s->n_params; i++) {
        const param_spec *p = &s->params[i];
        json_t *v;
        if (p->type == PARAM_CATEGORICAL) {
            size_t k = json_array_size(p->choices);
            size_t idx = (size_t)(clamp01(x[i]) * (double)k);
            v = json_incref(json_array_get(p->choices, idx < k ? idx : k - 1));
        } else if (p->type == PARAM_INT) {
            v = json_integer((json_int_t)value_of(p, x[i]));
        } else {
            v = json_real(value_of(p, x[i]));
        }
        json_object_set_new(o, p->name, v);
    }
    return o;
}

/* The position of v among choices, or their count: the first equal one (json_equal),
 * else the first of equal value (choice_value_cmp: 1.0 for a choice 1), as a new study's
 * choices are told apart. Exact matches first: a study stored before repeats were
 * refused keeps the choice it matched. */
static size_t choice_index(const json_t *choices, const json_t *v)
{
    size_t k = json_array_size(choices), j = 0;
    while (j < k && !json_equal(json_array_get(choices, j), v))
        j++;
    if (j < k || !(json_is_string(v) || json_is_number(v) || json_is_boolean(v)))
        return j;
    for (j = 0; j < k && choice_value_cmp(json_array_get(choices, j), v); j++)
        ;
    return j;
}

int proto_params_to_x(const study_spec *s, json_t *params, const char *path, double *x,
                      api_error *err)
{
    if (want_object(params, path, err))
        return -1;
    const char *key;
    json_t *v;
    json_object_foreach(params, key, v) {
        size_t i = 0;
        while (i < s->n_params && strcmp(s->params[i].name, key))
            i++;
        if (i == s->n_params) {
            char p[API_FIELD_MAX];
            path_key(p, sizeof p, path, key);
            return api_fail(err, API_INVALID, p, "unknown param '%s'", key);
        }
    }
    for (size_t i = 0; i < s->n_params; i++) {
        const param_spec *p = &s->params[i];
        char fp[API_FIELD_MAX];
        path_key(fp, sizeof fp, path, p->name);
        v = json_object_get(params, p->name);
        if (!v)
            return api_fail(err, API_INVALID, fp, "is required");
        if (p->type == PARAM_CATEGORICAL) {
            size_t k = json_array_size(p->choices), j = choice_index(p->choices, v);
            if (j == k)
                return api_fail(err, API_INVALID, fp, "is not one of the choices");
            x[i] = ((double)j + 0.5) / (double)k;
            continue;
        }
        double d;
        if (number_of(v, fp, &d, err))
            return -1;
        if (p->type == PARAM_INT && !json_is_integer(v))
            return api_fail(err, API_INVALID, fp, "must be an integer");
        if (d < p->low || d > p->high)
            return out_of_range(p, fp, err);
        x[i] = unit_of(p, d);
    }
    return 0;
}

/* -------------------------------------------------------- renderings */

static const char *const state_names[TRIAL__STATES] = {"pending", "completed", "failed",
                                                       "expired"};
static const char *const study_state_names[STUDY__STATES] = {"active", "paused",
                                                             "completed"};

/* Index of name in names[0..n), or -1. */
static int name_index(const char *const *names, int n, const char *name)
{
    for (int i = 0; i < n; i++)
        if (strcmp(name, names[i]) == 0)
            return i;
    return -1;
}

const char *proto_trial_state_name(trial_state s) { return state_names[s]; }

int proto_trial_state_parse(const char *name, trial_state *out)
{
    int i = name_index(state_names, TRIAL__STATES, name);
    if (i >= 0)
        *out = (trial_state)i;
    return i >= 0 ? 0 : -1;
}

const char *proto_study_state_name(study_state s) { return study_state_names[s]; }

int proto_study_state_parse(const char *name, study_state *out)
{
    int i = name_index(study_state_names, STUDY__STATES, name);
    if (i >= 0)
        *out = (study_state)i;
    return i >= 0 ? 0 : -1;
}

void proto_time_format(int64_t ms, char *buf, size_t size)
{
    time_t t = (time_t)(ms / 1000);
    struct tm tm;
    gmtime_r(&t, &tm);
    char base[24];
    strftime(base, sizeof base, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(buf, size, "%s.%03dZ", base, (int)(ms % 1000));
}

static json_t *time_json(int64_t ms)
{
    if (!ms)
        return json_null();
    char b[40];
    proto_time_format(ms, b, sizeof b);
    return json_string(b);
}

json_t *proto_trial_json(const trial_rec *t, int64_t study_id, const study_spec *s)
{
    json_t *x = json_array();
    for (size_t j = 0; j < s->dim; j++)
        json_array_append_new(x, json_real(t->x[j]));
    return json_pack("{s:I,s:I,s:s,s:s,s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:o}", "id",
                     (json_int_t)t->id, "study_id", (json_int_t)study_id, "state",
                     state_names[t->state], "worker", t->worker ? t->worker : "", "x", x,
                     "candidate_index",
                     t->cand_index >= 0 ? json_integer(t->cand_index) : json_null(), "params",
                     s->space == SPACE_BOX ? proto_params_from_x(s, t->x) : json_null(),
                     "value", t->state == TRIAL_COMPLETED ? json_real(t->value) : json_null(),
                     "created_at", time_json(t->created_ms), "lease_expires_at",
                     time_json(t->lease_ms), "completed_at", time_json(t->completed_ms),
                     "reason", t->reason ? json_string(t->reason) : json_null());
}
