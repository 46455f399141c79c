/*
 * handlers.c - This file contains the route table of the REST API (the contract is
 * openapi.yaml) and one handler per route. Handlers parse with proto/, act through
 * study.h or storage.h, and answer with exactly one reply (or suspend a long-poll).
 */
#include "handlers.h"

#include "http.h"
#include "log.h"
#include "metrics.h"
#include "study.h"

#include <errno.h>
#include <microhttpd.h>
#include <stdlib.h>
#include <string.h>

static store *db; /* set once by handlers_init, before the HTTP threads start */

void handlers_init(store *s) { db = s; }

/* Answers an operation on s that gave trial *t (rc 0, cleared here) or failed. */
static int answer_trial(request *rq, study *s, int rc, trial_rec *t, const api_error *err)
{
    if (rc)
        return reply_error(rq, err);
    json_t *o = proto_trial_json(t, study_id(s), study_spec_of(s));
    trial_rec_clear(t);
    return reply_json(rq, 200, o);
}

/* Answers an operation that gave the Study document *d (rc 0, cleared here) or failed;
 * rendered after the study's lock. */
static int answer_doc(request *rq, int status, int rc, study_doc *d, const api_error *err)
{
    if (rc)
        return reply_error(rq, err);
    json_t *o = proto_study_json(d);
    study_doc_clear(d);
    return reply_json(rq, status, o);
}

/* Answers s's Study document (status 200 or 201). */
static int answer_study(request *rq, int status, study *s)
{
    api_error err;
    study_doc d;
    return answer_doc(rq, status, study_describe(s, &d, &err), &d, &err);
}

static int not_found(request *rq, const char *what)
{
    api_error err;
    api_fail(&err, API_NOT_FOUND, NULL, "%s not found", what);
    return reply_error(rq, &err);
}

/* Query argument key into *out (NULL when absent); -1 after answering 400 when it is
 * given more than once or without a value: "?limit&limit=abc" was read as no limit,
 * "?limit=5&limit=abc" as 5 (found by fuzz_url). */
static int query_arg(request *rq, const char *key, const char **out)
{
    int times = rq_arg_times(rq, key);
    *out = rq_arg(rq, key);
    if (times == 0 || (times == 1 && *out))
        return 0;
    api_error err;
    api_fail(&err, API_INVALID, key, "must be given once, with a value");
    reply_error(rq, &err);
    return -1;
}

/* A query argument that names one of two choices: *second = 0 when absent or `first`,
 * 1 when `second_name`; -1 after answering 400 for anything else. */
static int query_choice(request *rq, const char *key, const char *first,
                        const char *second_name, int *second)
{
    const char *v;
    *second = 0;
    if (query_arg(rq, key, &v))
        return -1;
    if (!v || strcmp(v, first) == 0)
        return 0;
    if (strcmp(v, second_name) == 0) {
        *second = 1;
        return 0;
    }
    api_error err;
    api_fail(&err, API_INVALID, key, "must be %s or %s", first, second_name);
    reply_error(rq, &err);
    return -1;
}

/* Integer query argument in [min, max] (def when absent; every range is non-negative);
 * -1 after answering 400. The whole value must be digits: strtoll alone also took
 * leading blanks, a '+' (limit=+5 arrives as " 5", since '+' is a space in a query) and
 * a '-' before zero (cursor=-0, found by fuzz_url). */
static int query_int(request *rq, const char *key, int64_t min, int64_t max, int64_t def,
                     int64_t *out)
{
    const char *v;
    *out = def;
    if (query_arg(rq, key, &v))
        return -1;
    if (!v)
        return 0;
    char *end;
    errno = 0;
    long long n = strtoll(v, &end, 10);
    if (*v < '0' || *v > '9' || *end || errno == ERANGE || n < min || n > max) {
        api_error err;
        api_fail(&err, API_INVALID, key, "must be an integer in [%lld, %lld]", (long long)min,
                 (long long)max);
        reply_error(rq, &err);
        return -1;
    }
    *out = n;
    return 0;
}

/* ------------------------------------------------------------ operational */

/* Answers at once, restore or not: "studies" says how far the restore after a start is. */
/* 503 once shutting down, for a load balancer still holding a kept-alive connection
 * (new connections are refused then). */
static int h_healthz(request *rq)
{
    if (registry_is_closing()) {
        api_error err;
        api_fail(&err, API_UNAVAILABLE, NULL, "shutting down");
        return reply_error(rq, &err);
    }
    size_t restored, restoring, failed;
    registry_restore_counts(&restored, &restoring, &failed);
    return reply_json(rq, 200, json_pack("{s:s,s:s,s:{s:I,s:I,s:I}}", "status", "ok", "version",
                                         KB_VERSION_STRING, "studies", "restored",
                                         (json_int_t)restored, "restoring", (json_int_t)restoring,
                                         "failed", (json_int_t)failed));
}

static int h_metrics(request *rq)
{
    size_t len;
    char *text = metrics_render(&len);
    if (!text) {
        api_error err;
        api_fail(&err, API_INTERNAL, NULL, "out of memory");
        return reply_error(rq, &err);
    }
    return reply_text(rq, 200, "text/plain; version=0.0.4", text, len);
}

/* What engines the daemon offers and every setting each accepts (createStudy's
 * engine.settings). */
static int h_engines(request *rq)
{
    return reply_json(rq, 200, proto_engines_json());
}

/* ------------------------------------------------------------ candidate sets */

static json_t *cset_json(int64_t id, size_t n, size_t dim, json_t *names)
{
    return json_pack("{s:I,s:I,s:I,s:o}", "id", (json_int_t)id, "rows", (json_int_t)n, "dim",
                     (json_int_t)dim, "names", names ? names : json_null());
}

static int h_cset_create(request *rq)
{
    api_error err = {0};
    double *rows = NULL;
    size_t n, dim, len;
    json_t *names = NULL;
    const char *body = rq_body(rq, &len);
    int rc = rq_is_csv(rq) ? proto_candidates_csv_parse(body, len, &rows, &n, &dim, &names, &err)
                           : proto_candidates_json_parse(rq_json(rq), &rows, &n, &dim, &names, &err);
    if (rc)
        return reply_error(rq, &err);
    char *names_text = names ? json_dumps(names, JSON_COMPACT) : NULL;
    int64_t id = 0;
    rc = store_candidate_set_insert(db, rows, n, dim, names_text, now_ms(), &id);
    free(rows);
    free(names_text);
    if (rc) {
        json_decref(names);
        api_fail(&err, API_INTERNAL, NULL, "database error");
        return reply_error(rq, &err);
    }
    return reply_json(rq, 201, cset_json(id, n, dim, names));
}

static int h_cset_get(request *rq)
{
    double *rows;
    size_t n, dim;
    char *names_text;
    int rc = store_candidate_set_get(db, rq_id(rq, 0), &rows, &n, &dim, &names_text);
    if (rc == STORE_NOTFOUND)
        return not_found(rq, "candidate set");
    if (rc) {
        api_error err;
        api_fail(&err, API_INTERNAL, NULL, "database error");
        return reply_error(rq, &err);
    }
    free(rows);
    json_t *names = names_text ? json_loads(names_text, 0, NULL) : NULL;
    free(names_text);
    return reply_json(rq, 200, cset_json(rq_id(rq, 0), n, dim, names));
}

/* ------------------------------------------------------------ studies */

static int h_study_create(request *rq)
{
    api_error err = {0};
    study_spec spec;
    if (proto_study_spec_parse(rq_json(rq), &spec, &err))
        return reply_error(rq, &err);
    if (proto_study_spec_check_new(&spec, &err)) {
        proto_study_spec_clear(&spec);
        return reply_error(rq, &err);
    }
    study *s = study_create(&spec, &err);
    if (!s)
        return reply_error(rq, &err);
    int rc = answer_study(rq, 201, s);
    study_put(s);
    return rc;
}

/* ?state=: one of the study states into *state (-1 when absent); -1 after answering 400. */
static int query_study_state(request *rq, int *state)
{
    const char *v;
    study_state st;
    *state = -1;
    if (query_arg(rq, "state", &v))
        return -1;
    if (!v)
        return 0;
    if (proto_study_state_parse(v, &st)) {
        api_error err;
        api_fail(&err, API_INVALID, "state", "must be active, paused or completed");
        reply_error(rq, &err);
        return -1;
    }
    *state = (int)st;
    return 0;
}

/* ?name=: a study name as POST /v1/studies accepts it (1 to 200 characters), so that a
 * mistyped filter is told apart from "no such study"; ?state= likewise. */
static int h_study_list(request *rq)
{
    int64_t limit, cursor;
    const char *name;
    int state;
    if (query_int(rq, "limit", 1, 1000, 50, &limit) ||
        query_int(rq, "cursor", 0, INT64_MAX, 0, &cursor) || query_arg(rq, "name", &name) ||
        query_study_state(rq, &state))
        return MHD_YES;
    size_t chars = name ? proto_utf8_chars(name, strlen(name)) : 0;
    if (name && (chars < 1 || chars > 200)) {
        api_error err;
        api_fail(&err, API_INVALID, "name", "must have 1 to 200 characters");
        return reply_error(rq, &err);
    }
    study_page page;
    api_error err;
    if (study_list(cursor, (size_t)limit, name, state, &page, &err))
        return reply_error(rq, &err);
    json_t *o = proto_study_page_json(page.docs, page.n, page.next_cursor);
    study_page_clear(&page);
    return reply_json(rq, 200, o);
}

/* Looks the path's study up; NULL after answering 404. */
static study *path_study(request *rq)
{
    study *s = study_get(rq_id(rq, 0));
    if (!s)
        not_found(rq, "study");
    return s;
}

static int h_study_get(request *rq)
{
    study *s = path_study(rq);
    if (!s)
        return MHD_YES;
    int rc = answer_study(rq, 200, s);
    study_put(s);
    return rc;
}

/* Answers the study after the change, as GET would. */
static int h_study_patch(request *rq)
{
    api_error err = {0};
    study_state to;
    if (proto_study_patch_parse(rq_json(rq), &to, &err))
        return reply_error(rq, &err);
    study *s = path_study(rq);
    if (!s)
        return MHD_YES;
    study_doc d;
    int rc = answer_doc(rq, 200, study_change_state(s, to, &d, &err), &d, &err);
    study_put(s);
    return rc;
}

static int h_study_delete(request *rq)
{
    api_error err;
    if (study_delete(rq_id(rq, 0), &err))
        return reply_error(rq, &err);
    return reply_empty(rq, 204);
}

/* ------------------------------------------------------------ ask (long-poll) */

typedef struct ask_state {
    ask_req req;
    int64_t deadline_ms;
} ask_state;

static void ask_state_free(void *p)
{
    ask_state *st = p;
    proto_ask_clear(&st->req);
    free(st);
}

static uint64_t version_of(void *s) { return study_version(s); }

static int h_ask(request *rq)
{
    api_error err = {0};
    ask_state *st = rq_state(rq);
    if (!st) {
        st = calloc(1, sizeof *st);
        if (!st || proto_ask_parse(rq_json(rq), &st->req, &err)) {
            if (!st)
                api_fail(&err, API_INTERNAL, NULL, "out of memory");
            free(st);
            return reply_error(rq, &err);
        }
        st->deadline_ms = now_ms() + st->req.wait_ms;
        rq_set_state(rq, st, ask_state_free);
    }
    study *s = path_study(rq);
    if (!s)
        return MHD_YES;
    int rc;
    for (;;) {
        int can_wait;
        uint64_t version;
        ask_answer a;
        if (study_ask(s, &st->req, &a, &can_wait, &version, &err)) {
            rc = reply_error(rq, &err);
            break;
        }
        json_t *o = proto_ask_json(&a, study_id(s), study_spec_of(s));
        int64_t retry_ms = a.retry_after_ms;
        proto_ask_answer_clear(&a);
        if (can_wait && now_ms() < st->deadline_ms) {
            json_decref(o);
            if (rq_suspend(rq, study_id(s), version, st->deadline_ms, version_of, s) == 0) {
                rc = MHD_YES;
                break;
            }
            continue; /* feedback arrived meanwhile: ask again */
        }
        rc = reply_json_retry(rq, 200, o, retry_ms > 0 ? (int)((retry_ms + 999) / 1000) : 0);
        break;
    }
    study_put(s);
    return rc;
}

/* ------------------------------------------------------------ trials */

static int h_tell(request *rq)
{
    api_error err = {0};
    double value;
    if (proto_tell_parse(rq_json(rq), &value, &err))
        return reply_error(rq, &err);
    study *s = path_study(rq);
    if (!s)
        return MHD_YES;
    trial_rec t;
    int rc = answer_trial(rq, s, study_tell(s, rq_id(rq, 1), value, &t, &err), &t, &err);
    study_put(s);
    return rc;
}

static int h_tell_batch(request *rq)
{
    api_error err = {0};
    tell_item *items;
    size_t n;
    if (proto_tell_batch_parse(rq_json(rq), &items, &n, &err))
        return reply_error(rq, &err);
    study *s = path_study(rq);
    int rc = MHD_YES;
    if (s) {
        tell_outcome *out;
        if (study_tell_batch(s, items, n, &out, &err)) {
            rc = reply_error(rq, &err);
        } else {
            json_t *o = proto_tell_batch_json(out, n, study_id(s), study_spec_of(s));
            proto_tell_outcomes_free(out, n);
            rc = reply_json(rq, 200, o);
        }
        study_put(s);
    }
    free(items);
    return rc;
}

static int h_fail(request *rq)
{
    api_error err = {0};
    char *reason;
    if (proto_fail_parse(rq_json(rq), &reason, &err))
        return reply_error(rq, &err);
    study *s = path_study(rq);
    int rc = MHD_YES;
    if (s) {
        trial_rec t;
        rc = answer_trial(rq, s, study_fail(s, rq_id(rq, 1), reason, &t, &err), &t, &err);
        study_put(s);
    }
    free(reason);
    return rc;
}

static int h_heartbeat(request *rq)
{
    api_error err = {0};
    if (proto_heartbeat_parse(rq_json(rq), &err))
        return reply_error(rq, &err);
    study *s = path_study(rq);
    if (!s)
        return MHD_YES;
    trial_rec t;
    int rc = answer_trial(rq, s, study_heartbeat(s, rq_id(rq, 1), &t, &err), &t, &err);
    study_put(s);
    return rc;
}

static int h_trial(request *rq)
{
    api_error err;
    study *s = path_study(rq);
    if (!s)
        return MHD_YES;
    trial_rec t;
    int rc = answer_trial(rq, s, study_trial(s, rq_id(rq, 1), &t, &err), &t, &err);
    study_put(s);
    return rc;
}

static int h_trials(request *rq)
{
    api_error err;
    int64_t limit, cursor;
    int state = -1;
    const char *sv;
    if (query_arg(rq, "state", &sv))
        return MHD_YES;
    if (sv) {
        trial_state ts;
        if (proto_trial_state_parse(sv, &ts)) {
            api_fail(&err, API_INVALID, "state", "must be pending, completed, failed or expired");
            return reply_error(rq, &err);
        }
        state = (int)ts;
    }
    if (query_int(rq, "limit", 1, 10000, 100, &limit) ||
        query_int(rq, "cursor", 0, INT64_MAX, 0, &cursor))
        return MHD_YES;
    study *s = path_study(rq);
    if (!s)
        return MHD_YES;
    trial_rec *v;
    size_t n;
    int64_t next;
    int rc;
    if (study_trials(s, state, cursor, (size_t)limit, &v, &n, &next, &err)) {
        rc = reply_error(rq, &err);
    } else {
        json_t *o = proto_trial_page_json(v, n, next, study_id(s), study_spec_of(s));
        trial_recs_free(v, n);
        rc = reply_json(rq, 200, o);
    }
    study_put(s);
    return rc;
}

static int h_best(request *rq)
{
    api_error err;
    int by_model;
    if (query_choice(rq, "by", "value", "model", &by_model))
        return MHD_YES;
    study *s = path_study(rq);
    if (!s)
        return MHD_YES;
    trial_rec t;
    int rc = answer_trial(rq, s, study_best(s, by_model, &t, &err), &t, &err);
    study_put(s);
    return rc;
}

static int h_observe(request *rq)
{
    api_error err = {0};
    study *s = path_study(rq);
    if (!s)
        return MHD_YES;
    double *xs, *ys;
    size_t n;
    int rc;
    if (proto_observations_parse(rq_json(rq), study_spec_of(s), &xs, &ys, &n, &err)) {
        rc = reply_error(rq, &err);
    } else {
        rc = study_observe(s, xs, ys, n, &err)
                 ? reply_error(rq, &err)
                 : reply_json(rq, 200, json_pack("{s:I}", "added", (json_int_t)n));
        free(xs);
        free(ys);
    }
    study_put(s);
    return rc;
}

/* Renders an export after the study's lock: JSON, or CSV when csv (trials only). */
static int reply_export(request *rq, int csv, const study_doc *d, const trial_rec *v, size_t n,
                        const observation_set *obs)
{
    if (!csv)
        return reply_json(rq, 200, proto_export_json(d, v, n, obs));
    size_t len;
    char *text = proto_export_csv(d->spec, v, n, &len);
    if (text)
        return reply_text(rq, 200, "text/csv", text, len);
    api_error err;
    api_fail(&err, API_INTERNAL, NULL, "out of memory");
    return reply_error(rq, &err);
}

static int h_export(request *rq)
{
    api_error err;
    int csv;
    if (query_choice(rq, "format", "json", "csv", &csv))
        return MHD_YES;
    study *s = path_study(rq);
    if (!s)
        return MHD_YES;
    study_doc d;
    trial_rec *v;
    size_t n;
    observation_set obs;
    int rc;
    if (study_export(s, &d, &v, &n, &obs, &err)) {
        rc = reply_error(rq, &err);
    } else {
        rc = reply_export(rq, csv, &d, v, n, &obs);
        study_doc_clear(&d);
        trial_recs_free(v, n);
        observation_set_clear(&obs);
    }
    study_put(s);
    return rc;
}

/* ------------------------------------------------------------ the table */

const route kb_routes[] = {
    {"GET", "/healthz", h_healthz, BODY_NONE, 1},
    {"GET", "/metrics", h_metrics, BODY_NONE, 1},
    {"GET", "/v1/engines", h_engines, BODY_NONE, 0},
    {"POST", "/v1/candidate-sets", h_cset_create, BODY_JSON_OR_CSV, 0},
    {"GET", "/v1/candidate-sets/{set_id}", h_cset_get, BODY_NONE, 0},
    {"POST", "/v1/studies", h_study_create, BODY_JSON, 0},
    {"GET", "/v1/studies", h_study_list, BODY_NONE, 0},
    {"GET", "/v1/studies/{study_id}", h_study_get, BODY_NONE, 0},
    {"PATCH", "/v1/studies/{study_id}", h_study_patch, BODY_JSON, 0},
    {"DELETE", "/v1/studies/{study_id}", h_study_delete, BODY_NONE, 0},
    {"POST", "/v1/studies/{study_id}/ask", h_ask, BODY_JSON, 0},
    {"POST", "/v1/studies/{study_id}/tell", h_tell_batch, BODY_JSON, 0},
    {"GET", "/v1/studies/{study_id}/trials", h_trials, BODY_NONE, 0},
    {"GET", "/v1/studies/{study_id}/trials/{trial_id}", h_trial, BODY_NONE, 0},
    {"POST", "/v1/studies/{study_id}/trials/{trial_id}/tell", h_tell, BODY_JSON, 0},
    {"POST", "/v1/studies/{study_id}/trials/{trial_id}/fail", h_fail, BODY_JSON_OPTIONAL, 0},
    {"POST", "/v1/studies/{study_id}/trials/{trial_id}/heartbeat", h_heartbeat, BODY_JSON_OPTIONAL, 0},
    {"GET", "/v1/studies/{study_id}/best", h_best, BODY_NONE, 0},
    {"POST", "/v1/studies/{study_id}/observations", h_observe, BODY_JSON, 0},
    {"GET", "/v1/studies/{study_id}/export", h_export, BODY_NONE, 0},
};
const size_t kb_n_routes = sizeof kb_routes / sizeof kb_routes[0];
