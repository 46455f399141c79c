/*
 * test_proto.c - unit tests of proto/: the error table, a data-driven validation table
 * (input document -> expected API code and field) over every request parser, the CSV
 * candidate parser (including a 20,000 x 8 upload), the box <-> unit-cube mapping, and
 * the shortest round-trip rendering of doubles (numfmt) in JSON and CSV.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../proto/csv.h"
#include "../../proto/numfmt.h"
#include "../../proto/proto.h"

static void error_table_is_complete(void **state)
{
    (void)state;
    static const struct { api_code c; int status; const char *name; } want[] = {
        {API_INVALID_JSON, 400, "invalid_json"}, {API_INVALID, 400, "invalid"},
        {API_UNAUTHORIZED, 401, "unauthorized"}, {API_NOT_FOUND, 404, "not_found"},
        {API_METHOD_NOT_ALLOWED, 405, "method_not_allowed"}, {API_CONFLICT, 409, "conflict"},
        {API_PAYLOAD_TOO_LARGE, 413, "payload_too_large"},
        {API_UNSUPPORTED_MEDIA_TYPE, 415, "unsupported_media_type"},
        {API_INTERNAL, 500, "internal"}, {API_UNAVAILABLE, 503, "unavailable"}};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        assert_int_equal(api_status(want[i].c), want[i].status);
        assert_string_equal(api_code_name(want[i].c), want[i].name);
    }
    api_error e;
    api_fail(&e, API_INVALID, "count", "must be %d", 3);
    json_t *j = api_error_json(&e);
    assert_string_equal(json_string_value(json_object_get(json_object_get(j, "error"), "field")), "count");
    json_decref(j);
    api_fail(&e, API_NOT_FOUND, NULL, "x");
    j = api_error_json(&e);
    assert_true(json_is_null(json_object_get(json_object_get(j, "error"), "field")));
    json_decref(j);
    /* a message quoting bytes that are not UTF-8 (a raw request target) keeps its ASCII */
    api_fail(&e, API_NOT_FOUND, "f\xff", "no route /a\xff\xfe%s", "\xc3");
    j = api_error_json(&e);
    assert_non_null(j);
    assert_string_equal(json_string_value(json_object_get(json_object_get(j, "error"), "message")),
                        "no route /a???");
    assert_string_equal(json_string_value(json_object_get(json_object_get(j, "error"), "field")), "f?");
    json_decref(j);
}

typedef enum { P_STUDY, P_PATCH, P_ASK, P_TELL, P_BATCH, P_FAIL, P_HEARTBEAT, P_OBS_BOX, P_OBS_CAND, P_CSET } parser;

typedef struct vcase {
    parser p;
    const char *body;
    api_code code;      /* API_OK: must parse */
    const char *field;  /* expected field ("" none), NULL = don't care */
} vcase;

#define BOX "{\"type\":\"box\",\"params\":[{\"name\":\"lr\",\"type\":\"float\",\"low\":1e-5,\"high\":1,\"log\":true}," \
            "{\"name\":\"n\",\"type\":\"int\",\"low\":1,\"high\":8},{\"name\":\"opt\",\"type\":\"categorical\",\"choices\":[\"a\",\"b\"]}]}"
#define CAND "{\"type\":\"candidates\",\"candidates\":[[1,2],[3,4]]}"

static const vcase cases[] = {
    /* studies */
    {P_STUDY, "{\"name\":\"s\",\"space\":" CAND "}", API_OK, NULL},
    {P_STUDY, "{\"name\":\"s\",\"space\":" BOX ",\"engine\":{\"name\":\"random\",\"settings\":{\"seed\":3}},\"max_trials\":null}", API_OK, NULL},
    {P_STUDY, "", API_INVALID_JSON, ""},
    {P_STUDY, "{\"name\": ", API_INVALID_JSON, ""},
    {P_STUDY, "[1,2]", API_INVALID, ""},
    {P_STUDY, "{\"name\":\"s\",\"space\":" CAND ",\"bogus\":1}", API_INVALID, "bogus"},
    {P_STUDY, "{\"space\":" CAND "}", API_INVALID, "name"},
    {P_STUDY, "{\"name\":\"\",\"space\":" CAND "}", API_INVALID, "name"},
    {P_STUDY, "{\"name\":7,\"space\":" CAND "}", API_INVALID, "name"},
    {P_STUDY, "{\"name\":\"s\"}", API_INVALID, "space"},
    {P_STUDY, "{\"name\":\"s\",\"direction\":\"up\",\"space\":" CAND "}", API_INVALID, "direction"},
    {P_STUDY, "{\"name\":\"s\",\"space\":{\"type\":\"candidates\",\"candidates\":[[1,2],[3]]}}", API_INVALID, "space.candidates[1]"},
    {P_STUDY, "{\"name\":\"s\",\"space\":{\"type\":\"candidates\",\"candidates\":[[1,2],[3,\"x\"]]}}", API_INVALID, "space.candidates[1][1]"},
    {P_STUDY, "{\"name\":\"s\",\"space\":{\"type\":\"candidates\",\"candidates\":[[1,1e400]]}}", API_INVALID_JSON, ""},
    {P_STUDY, "{\"name\":\"s\",\"space\":{\"type\":\"candidates\",\"candidates\":[[NaN]]}}", API_INVALID_JSON, ""},
    {P_STUDY, "{\"name\":\"s\",\"space\":{\"type\":\"candidates\",\"candidates\":[]}}", API_INVALID, "space.candidates"},
    {P_STUDY, "{\"name\":\"s\",\"space\":{\"type\":\"candidates\",\"candidates\":[[1]],\"candidate_set\":1}}", API_INVALID, "space.candidates"},
    {P_STUDY, "{\"name\":\"s\",\"space\":{\"type\":\"candidates\",\"candidate_set\":0}}", API_INVALID, "space.candidate_set"},
    {P_STUDY, "{\"name\":\"s\",\"space\":{\"type\":\"ball\"}}", API_INVALID, "space.type"},
    {P_STUDY, "{\"name\":\"s\",\"space\":{\"type\":\"box\",\"params\":[{\"name\":\"a\",\"type\":\"float\",\"low\":1,\"high\":0.5}]}}", API_INVALID, "space.params[0].high"},
    {P_STUDY, "{\"name\":\"s\",\"space\":{\"type\":\"box\",\"params\":[{\"name\":\"a\",\"type\":\"int\",\"low\":2,\"high\":1}]}}", API_INVALID, "space.params[0].high"},
    {P_STUDY, "{\"name\":\"s\",\"space\":{\"type\":\"box\",\"params\":[{\"name\":\"a\",\"type\":\"float\",\"low\":0,\"high\":1,\"log\":true}]}}", API_INVALID, "space.params[0].low"},
    {P_STUDY, "{\"name\":\"s\",\"space\":{\"type\":\"box\",\"params\":[{\"name\":\"a\",\"type\":\"int\",\"low\":0.5,\"high\":1}]}}", API_INVALID, "space.params[0].low"},
    {P_STUDY, "{\"name\":\"s\",\"space\":{\"type\":\"box\",\"params\":[{\"name\":\"a\",\"type\":\"categorical\",\"choices\":[]}]}}", API_INVALID, "space.params[0].choices"},
    {P_STUDY, "{\"name\":\"s\",\"space\":{\"type\":\"box\",\"params\":[{\"name\":\"a\",\"type\":\"categorical\",\"choices\":[\"x\"],\"low\":1}]}}", API_INVALID, "space.params[0].low"},
    {P_STUDY, "{\"name\":\"s\",\"space\":{\"type\":\"box\",\"params\":[{\"name\":\"a\",\"type\":\"int\",\"low\":0,\"high\":1},{\"name\":\"a\",\"type\":\"int\",\"low\":0,\"high\":1}]}}", API_INVALID, "space.params[1].name"},
    {P_STUDY, "{\"name\":\"s\",\"space\":" CAND ",\"lease_seconds\":0}", API_INVALID, "lease_seconds"},
    {P_STUDY, "{\"name\":\"s\",\"space\":" CAND ",\"lease_seconds\":1.5}", API_INVALID, "lease_seconds"},
    {P_STUDY, "{\"name\":\"s\",\"space\":" CAND ",\"max_trials\":0}", API_INVALID, "max_trials"},
    {P_STUDY, "{\"name\":\"s\",\"space\":" CAND ",\"engine\":{\"nme\":\"random\"}}", API_INVALID, "engine.nme"},
    {P_STUDY, "{\"name\":\"s\",\"space\":" CAND ",\"engine\":{\"name\":\"random\",\"settings\":[]}}", API_INVALID, "engine.settings"},
    {P_STUDY, "{\"name\":\"s\",\"space\":" CAND ",\"name\":\"t\"}", API_INVALID_JSON, ""},
    /* study state */
    {P_PATCH, "{\"state\":\"paused\"}", API_OK, NULL},
    {P_PATCH, "{\"state\":\"completed\"}", API_OK, NULL},
    {P_PATCH, "{}", API_INVALID, "state"},
    {P_PATCH, "{\"state\":\"Paused\"}", API_INVALID, "state"},
    {P_PATCH, "{\"state\":\"pending\"}", API_INVALID, "state"},
    {P_PATCH, "{\"state\":2}", API_INVALID, "state"},
    {P_PATCH, "{\"state\":\"active\",\"name\":\"t\"}", API_INVALID, "name"},
    /* ask */
    {P_ASK, "{\"worker\":\"w\"}", API_OK, NULL},
    {P_ASK, "{\"worker\":\"w\",\"count\":1000,\"wait_ms\":60000}", API_OK, NULL},
    {P_ASK, "{}", API_INVALID, "worker"},
    {P_ASK, "{\"worker\":\"w\",\"count\":0}", API_INVALID, "count"},
    {P_ASK, "{\"worker\":\"w\",\"count\":1001}", API_INVALID, "count"},
    {P_ASK, "{\"worker\":\"w\",\"count\":\"2\"}", API_INVALID, "count"},
    {P_ASK, "{\"worker\":\"w\",\"count\":2.0}", API_INVALID, "count"},
    {P_ASK, "{\"worker\":\"w\",\"wait_ms\":-1}", API_INVALID, "wait_ms"},
    {P_ASK, "{\"worker\":\"w\",\"extra\":true}", API_INVALID, "extra"},
    {P_ASK, "{\"worker\":\"\xff\xfe\"}", API_INVALID_JSON, ""},
    /* tell */
    {P_TELL, "{\"value\":1.5}", API_OK, NULL},
    {P_TELL, "{\"value\":-3}", API_OK, NULL},
    {P_TELL, "{}", API_INVALID, "value"},
    {P_TELL, "{\"value\":\"1\"}", API_INVALID, "value"},
    {P_TELL, "{\"value\":null}", API_INVALID, "value"},
    {P_TELL, "{\"value\":1e400}", API_INVALID_JSON, ""},
    {P_TELL, "{\"value\":Infinity}", API_INVALID_JSON, ""},
    {P_TELL, "{\"value\":1,\"v\":2}", API_INVALID, "v"},
    {P_BATCH, "{\"results\":[{\"trial_id\":1,\"value\":2}]}", API_OK, NULL},
    {P_BATCH, "{\"results\":[]}", API_INVALID, "results"},
    {P_BATCH, "{\"results\":[{\"trial_id\":1,\"value\":2},{\"trial_id\":0,\"value\":1}]}", API_INVALID, "results[1].trial_id"},
    {P_BATCH, "{\"results\":[{\"trial_id\":1}]}", API_INVALID, "results[0].value"},
    {P_BATCH, "{\"results\":[7]}", API_INVALID, "results[0]"},
    {P_FAIL, "{\"reason\":\"oom\"}", API_OK, NULL},
    {P_FAIL, "{}", API_OK, NULL},
    {P_FAIL, "{\"reason\":3}", API_INVALID, "reason"},
    {P_HEARTBEAT, "{}", API_OK, NULL},
    {P_HEARTBEAT, "{\"x\":1}", API_INVALID, "x"},
    /* observations */
    {P_OBS_CAND, "{\"observations\":[{\"x\":[1,2],\"value\":3}]}", API_OK, NULL},
    {P_OBS_CAND, "{\"observations\":[{\"x\":[1,2,3],\"value\":3}]}", API_INVALID, "observations[0].x"},
    {P_OBS_CAND, "{\"observations\":[{\"x\":[1,2]}]}", API_INVALID, "observations[0].value"},
    {P_OBS_CAND, "{\"observations\":[{\"params\":{},\"value\":1}]}", API_INVALID, "observations[0].params"},
    {P_OBS_BOX, "{\"observations\":[{\"params\":{\"lr\":0.01,\"n\":3,\"opt\":\"b\"},\"value\":1}]}", API_OK, NULL},
    {P_OBS_BOX, "{\"observations\":[{\"x\":[0,0.5,1],\"value\":1}]}", API_OK, NULL},
    {P_OBS_BOX, "{\"observations\":[{\"x\":[0,0.5,1.5],\"value\":1}]}", API_INVALID, "observations[0].x[2]"},
    {P_OBS_BOX, "{\"observations\":[{\"params\":{\"lr\":0.01,\"n\":3,\"opt\":\"c\"},\"value\":1}]}", API_INVALID, "observations[0].params.opt"},
    {P_OBS_BOX, "{\"observations\":[{\"params\":{\"lr\":0.01,\"n\":9,\"opt\":\"a\"},\"value\":1}]}", API_INVALID, "observations[0].params.n"},
    {P_OBS_BOX, "{\"observations\":[{\"params\":{\"lr\":0.01,\"opt\":\"a\"},\"value\":1}]}", API_INVALID, "observations[0].params.n"},
    {P_OBS_BOX, "{\"observations\":[{\"params\":{\"lr\":0.01,\"n\":1,\"opt\":\"a\",\"z\":1},\"value\":1}]}", API_INVALID, "observations[0].params.z"},
    {P_OBS_BOX, "{\"observations\":[{\"x\":[0,0.5,1],\"params\":{},\"value\":1}]}", API_INVALID, "observations[0].x"},
    /* candidate sets (JSON) */
    {P_CSET, "{\"rows\":[[1,2],[3,4]],\"names\":[\"a\",\"b\"]}", API_OK, NULL},
    {P_CSET, "{\"rows\":[[1,2],[3,4]],\"names\":[\"a\"]}", API_INVALID, "names"},
    {P_CSET, "{\"rows\":[[1,2],[3,true]]}", API_INVALID, "rows[1][1]"},
};

static void spec_for(parser p, study_spec *spec)
{
    const char *doc = p == P_OBS_BOX ? "{\"name\":\"s\",\"space\":" BOX "}" : "{\"name\":\"s\",\"space\":" CAND "}";
    api_error err;
    json_t *j = proto_parse_object(doc, strlen(doc), &err);
    assert_non_null(j);
    assert_int_equal(proto_study_spec_parse(j, spec, &err), 0);
    json_decref(j);
}

static int run_case(const vcase *c, api_error *err)
{
    json_t *doc = proto_parse_object(c->body, strlen(c->body), err);
    if (!doc)
        return -1;
    int rc = -1;
    switch (c->p) {
    case P_STUDY: {
        study_spec s;
        rc = proto_study_spec_parse(doc, &s, err);
        if (rc == 0)
            proto_study_spec_clear(&s);
        break;
    }
    case P_PATCH: {
        study_state st;
        rc = proto_study_patch_parse(doc, &st, err);
        break;
    }
    case P_ASK: {
        ask_req r;
        rc = proto_ask_parse(doc, &r, err);
        proto_ask_clear(&r);
        break;
    }
    case P_TELL: {
        double v;
        rc = proto_tell_parse(doc, &v, err);
        break;
    }
    case P_BATCH: {
        tell_item *it = NULL;
        size_t n;
        rc = proto_tell_batch_parse(doc, &it, &n, err);
        free(it);
        break;
    }
    case P_FAIL: {
        char *reason;
        rc = proto_fail_parse(doc, &reason, err);
        free(reason);
        break;
    }
    case P_HEARTBEAT:
        rc = proto_heartbeat_parse(doc, err);
        break;
    case P_OBS_BOX:
    case P_OBS_CAND: {
        study_spec s;
        double *x = NULL, *y = NULL;
        size_t n;
        spec_for(c->p, &s);
        rc = proto_observations_parse(doc, &s, &x, &y, &n, err);
        free(x);
        free(y);
        proto_study_spec_clear(&s);
        break;
    }
    case P_CSET: {
        double *rows = NULL;
        size_t n, d;
        json_t *names = NULL;
        rc = proto_candidates_json_parse(doc, &rows, &n, &d, &names, err);
        free(rows);
        json_decref(names);
        break;
    }
    }
    json_decref(doc);
    return rc;
}

static void validation_table(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const vcase *c = &cases[i];
        api_error err = {0};
        int rc = run_case(c, &err);
        if ((c->code == API_OK) != (rc == 0) || (rc && err.code != c->code) ||
            (rc && c->field && strcmp(err.field, c->field) != 0))
            fail_msg("case %zu (%s): rc %d code %s field '%s' (%s); want %s field '%s'", i,
                     c->body, rc, api_code_name(err.code), err.field, err.message,
                     api_code_name(c->code), c->field ? c->field : "*");
    }
}

/* Each study state's name parses back to it, and a PATCH body gives the state it names. */
static void study_states_round_trip(void **state)
{
    (void)state;
    for (int i = 0; i < STUDY__STATES; i++) {
        study_state st = STUDY__STATES;
        char body[64];
        snprintf(body, sizeof body, "{\"state\":\"%s\"}", proto_study_state_name((study_state)i));
        api_error err;
        json_t *doc = proto_parse_object(body, strlen(body), &err);
        assert_non_null(doc);
        assert_int_equal(proto_study_patch_parse(doc, &st, &err), 0);
        assert_int_equal(st, i);
        json_decref(doc);
    }
    study_state st;
    assert_int_equal(proto_study_state_parse("inactive", &st), -1);
}

static void engine_settings_are_typed(void **state)
{
    (void)state;
    static const struct { const char *settings; const char *field; } t[] = {
        {"{\"seed\":7,\"repeats\":\"never\",\"lengthscales\":[1,2]}", ""},
        {"{\"nope\":1}", "engine.settings.nope"},
        {"{\"repeats\":\"sometimes\"}", "engine.settings.repeats"},
        {"{\"seed\":\"x\"}", "engine.settings.seed"},
        {"{\"lengthscales\":[1,\"a\"]}", "engine.settings.lengthscales[1]"},
        {"{\"lengthscale\":true}", "engine.settings.lengthscale"},
        {"{\"lengthscale\":-1}", "engine.settings.lengthscale"},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        char doc[512];
        snprintf(doc, sizeof doc, "{\"name\":\"s\",\"space\":" CAND ",\"engine\":{\"name\":\"random\",\"settings\":%s}}", t[i].settings);
        api_error err = {0};
        study_spec s;
        json_t *j = proto_parse_object(doc, strlen(doc), &err);
        assert_non_null(j);
        assert_int_equal(proto_study_spec_parse(j, &s, &err), 0);
        json_decref(j);
        int rc = proto_study_spec_config(&s, &err);
        proto_study_spec_clear(&s);
        if (!t[i].field[0]) {
            assert_int_equal(rc, 0);
        } else {
            assert_int_equal(rc, -1);
            assert_int_equal(err.code, API_INVALID);
            assert_string_equal(err.field, t[i].field);
        }
    }
    /* unknown engine */
    const char *doc = "{\"name\":\"s\",\"space\":" CAND ",\"engine\":{\"name\":\"nope\"}}";
    api_error err;
    study_spec s;
    json_t *j = proto_parse_object(doc, strlen(doc), &err);
    assert_int_equal(proto_study_spec_parse(j, &s, &err), 0);
    json_decref(j);
    assert_int_equal(proto_study_spec_config(&s, &err), -1);
    assert_string_equal(err.field, "engine.name");
    proto_study_spec_clear(&s);
}

static void stored_spec_round_trips(void **state)
{
    (void)state;
    study_spec a, b;
    spec_for(P_OBS_BOX, &a);
    json_t *j = proto_study_spec_json(&a, 1), *copy = json_deep_copy(j);
    assert_int_equal(json_integer_value(json_object_get(j, "rules")), PROTO_RULES);
    api_error err;
    assert_int_equal(proto_study_spec_parse_stored(copy, &b, &err), 0);
    assert_int_equal(b.rules, PROTO_RULES);
    json_t *k = proto_study_spec_json(&b, 1);
    assert_true(json_equal(j, k));
    json_decref(copy);
    /* without "rules": a study stored before they were recorded, rules 1; a user's
     * document may not set them */
    json_object_del(j, "rules");
    proto_study_spec_clear(&b);
    assert_int_equal(proto_study_spec_parse_stored(j, &b, &err), 0);
    assert_int_equal(b.rules, 1);
    proto_study_spec_clear(&b);
    json_object_set_new(j, "rules", json_integer(2));
    assert_int_equal(proto_study_spec_parse(j, &b, &err), -1);
    assert_string_equal(err.field, "rules");
    json_decref(j);
    json_decref(k);
    proto_study_spec_clear(&a);
    proto_study_spec_clear(&b);
}

static void csv_parses_and_rejects(void **state)
{
    (void)state;
    double *rows;
    size_t n, d;
    json_t *names;
    api_error err;
    const char *ok = "a, b\r\n1,2\n3.5 , -4e-3\n\n";
    assert_int_equal(proto_candidates_csv_parse(ok, strlen(ok), &rows, &n, &d, &names, &err), 0);
    assert_int_equal(n, 2);
    assert_int_equal(d, 2);
    assert_true(rows[2] == 3.5 && rows[3] == -4e-3);
    assert_string_equal(json_string_value(json_array_get(names, 1)), "b");
    free(rows);
    json_decref(names);
    static const struct { const char *text; const char *field; } bad[] = {
        {"1,2\n3\n", "rows[1]"}, {"1,2\n3,x\n", "rows[1][1]"}, {"1,nan\n", "rows[0][1]"},
        {"1,1e400\n", "rows[0][1]"}, {"a,b\n", "rows"}, {"", "rows"}, {"1,,2\n", "rows[0][1]"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc = proto_candidates_csv_parse(bad[i].text, strlen(bad[i].text), &rows, &n, &d, &names, &err);
        assert_int_equal(rc, -1);
        assert_int_equal(err.code, API_INVALID);
        assert_string_equal(err.field, bad[i].field);
    }
}

/* Parses text that must succeed; checks the shape and returns the names (caller frees). */
static json_t *csv_ok(const char *text, size_t rows, size_t dim, double **out)
{
    size_t n, d;
    json_t *names;
    api_error err;
    int rc = proto_candidates_csv_parse(text, strlen(text), out, &n, &d, &names, &err);
    if (rc)
        fail_msg("%s: %s", text, err.message);
    assert_int_equal(n, rows);
    assert_int_equal(d, dim);
    return names;
}

static void csv_rfc4180_quotes(void **state)
{
    (void)state;
    double *rows;
    /* issue 14: "a,b" is one name; quoted names keep their blanks, quotes and line breaks */
    json_t *names = csv_ok("\"a,b\",c\r\n1,2\r\n", 1, 2, &rows);
    assert_string_equal(json_string_value(json_array_get(names, 0)), "a,b");
    assert_string_equal(json_string_value(json_array_get(names, 1)), "c");
    free(rows);
    json_decref(names);
    names = csv_ok("\"say \"\"hi\"\"\" , \" x \",\"two\r\nlines\",\"\"\"\"\n"
                   "\"1.5\", 2 ,\"3\",-0\n", 1, 4, &rows);
    assert_string_equal(json_string_value(json_array_get(names, 0)), "say \"hi\"");
    assert_string_equal(json_string_value(json_array_get(names, 1)), " x ");
    assert_string_equal(json_string_value(json_array_get(names, 2)), "two\r\nlines");
    assert_string_equal(json_string_value(json_array_get(names, 3)), "\"");
    assert_true(rows[0] == 1.5 && rows[1] == 2 && rows[2] == 3 && rows[3] == 0 && signbit(rows[3]));
    free(rows);
    json_decref(names);
    /* no final line break, a final CR, blank lines between records */
    assert_null(csv_ok("1,2\n\n  \n3,4", 2, 2, &rows));
    free(rows);
    assert_null(csv_ok("1,2\r\n3,4\r", 2, 2, &rows));
    free(rows);
}

static void csv_malformed_quotes_name_the_line(void **state)
{
    (void)state;
    static const struct { const char *text, *field, *message; } bad[] = {
        {"\"a,b,c\n1,2,3\n", "", "line 1: the quote that opens column 1 is never closed"},
        /* the header spans lines 1-2, so the open quote is on line 4 */
        {"\"x\ny\",b\n1,2\n3,\"q\n", "", "line 4: the quote that opens column 2 is never closed"},
        {"a,b\"c\n1,2\n", "", "line 1 column 2: a quote inside an unquoted field"},
        {"a,b\n1,2\n\"3\"x,4\n", "", "line 3 column 1: text after the closing quote"},
        {"a,b\n1,2\n\"3\n4\",5\n", "rows[1][0]", "line 3 column 1 is not a finite number"},
        {"\"\",b\n1,2\n", "names[0]", "line 1: header names must have 1 to 200 characters"},
        {"a,\"b\nc\",d\n1,2\n", "rows[0]", "line 3 has 2 columns, expected 3"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        double *rows = NULL;
        size_t n, d;
        json_t *names = NULL;
        api_error err;
        int rc = proto_candidates_csv_parse(bad[i].text, strlen(bad[i].text), &rows, &n, &d,
                                            &names, &err);
        assert_int_equal(rc, -1);
        assert_null(rows);
        assert_null(names);
        assert_int_equal(err.code, API_INVALID);
        assert_string_equal(err.field, bad[i].field);
        if (strncmp(err.message, bad[i].message, strlen(bad[i].message)))
            fail_msg("%s: got '%s', expected '%s...'", bad[i].text, err.message, bad[i].message);
    }
}

/* What the export writes (csv_put_string) reads back byte for byte as a header name. */
static void csv_writer_round_trips(void **state)
{
    (void)state;
    static const char *const odd[] = {"a,b", "say \"hi\"", "\"", " lead", "two\nlines",
                                      "cr\r\nlf", "plain", "ü,\"ß\""};
    size_t k = sizeof odd / sizeof odd[0];
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    for (size_t j = 0; j < k; j++) {
        fputs(j ? "," : "", f);
        csv_put_string(f, odd[j]);
    }
    fputc('\n', f);
    for (size_t j = 0; j < k; j++)
        fputs(j ? ",1" : "1", f);
    fclose(f);
    double *rows;
    json_t *names = csv_ok(text, 1, k, &rows);
    for (size_t j = 0; j < k; j++)
        assert_string_equal(json_string_value(json_array_get(names, j)), odd[j]);
    free(rows);
    json_decref(names);
    free(text);
}

static void csv_bom_and_wide_box(void **state)
{
    (void)state;
    double *rows;
    size_t n, d;
    json_t *names;
    api_error err;
    const char *bom = "\xef\xbb\xbfp,q\r\n1,2\r\n";
    assert_int_equal(proto_candidates_csv_parse(bom, strlen(bom), &rows, &n, &d, &names, &err), 0);
    assert_string_equal(json_string_value(json_array_get(names, 0)), "p");
    free(rows);
    json_decref(names);
    /* high - low overflows a double: values stay finite and in range */
    const char *doc = "{\"name\":\"w\",\"space\":{\"type\":\"box\",\"params\":["
                      "{\"name\":\"f\",\"type\":\"float\",\"low\":-1e308,\"high\":1e308},"
                      "{\"name\":\"k\",\"type\":\"int\",\"low\":-9007199254740992,\"high\":9007199254740992}]}}";
    json_t *j = proto_parse_object(doc, strlen(doc), &err);
    study_spec s;
    assert_int_equal(proto_study_spec_parse(j, &s, &err), 0);
    json_decref(j);
    for (int i = 0; i <= 10; i++) {
        double x[2] = {i / 10.0, i / 10.0}, back[2];
        json_t *p = proto_params_from_x(&s, x);
        double f = json_real_value(json_object_get(p, "f"));
        assert_true(isfinite(f) && f >= -1e308 && f <= 1e308);
        assert_non_null(json_object_get(p, "k"));
        assert_int_equal(proto_params_to_x(&s, p, "params", back, &err), 0);
        assert_true(fabs(back[0] - x[0]) < 1e-12);
        json_decref(p);
    }
    proto_study_spec_clear(&s);
}

static void csv_20000_by_8(void **state)
{
    (void)state;
    size_t cap = 20000 * 8 * 24 + 64, len = 0;
    char *text = malloc(cap);
    len += (size_t)snprintf(text, cap, "c0,c1,c2,c3,c4,c5,c6,c7\n");
    for (int i = 0; i < 20000; i++)
        for (int j = 0; j < 8; j++)
            len += (size_t)snprintf(text + len, cap - len, "%.6f%c", (i * 8 + j) * 1e-3, j == 7 ? '\n' : ',');
    double *rows;
    size_t n, d;
    json_t *names;
    api_error err;
    assert_int_equal(proto_candidates_csv_parse(text, len, &rows, &n, &d, &names, &err), 0);
    assert_int_equal(n, 20000);
    assert_int_equal(d, 8);
    assert_true(fabs(rows[19999 * 8 + 7] - (19999 * 8 + 7) * 1e-3) < 1e-9);
    free(rows);
    json_decref(names);
    free(text);
}

static void box_mapping(void **state)
{
    (void)state;
    study_spec s;
    spec_for(P_OBS_BOX, &s);
    double x[3] = {0, 0, 0};
    json_t *p = proto_params_from_x(&s, x);
    assert_true(fabs(json_real_value(json_object_get(p, "lr")) - 1e-5) < 1e-15);
    assert_int_equal(json_integer_value(json_object_get(p, "n")), 1);
    assert_string_equal(json_string_value(json_object_get(p, "opt")), "a");
    json_decref(p);
    double one[3] = {1, 1, 1};
    p = proto_params_from_x(&s, one);
    assert_true(fabs(json_real_value(json_object_get(p, "lr")) - 1) < 1e-12);
    assert_int_equal(json_integer_value(json_object_get(p, "n")), 8);
    assert_string_equal(json_string_value(json_object_get(p, "opt")), "b");
    /* params -> x -> params is the identity on the params */
    double back[3];
    api_error err;
    assert_int_equal(proto_params_to_x(&s, p, "params", back, &err), 0);
    json_t *q = proto_params_from_x(&s, back);
    assert_true(fabs(json_real_value(json_object_get(q, "lr")) - 1) < 1e-12);
    assert_int_equal(json_integer_value(json_object_get(q, "n")), 8);
    assert_string_equal(json_string_value(json_object_get(q, "opt")), "b");
    json_decref(p);
    json_decref(q);
    /* every int value has an equal bin */
    int hits[9] = {0};
    for (int i = 0; i < 8000; i++) {
        double u[3] = {0.5, (i + 0.5) / 8000.0, 0.5};
        json_t *r = proto_params_from_x(&s, u);
        hits[json_integer_value(json_object_get(r, "n"))]++;
        json_decref(r);
    }
    for (int v = 1; v <= 8; v++)
        assert_int_equal(hits[v], 1000);
    proto_study_spec_clear(&s);
}

/* low == high, int or float, linear or log: every x gives the value, the value gives a
 * finite x (no 0/0 from the zero width). */
static void one_value_ranges(void **state)
{
    (void)state;
    const char *doc = "{\"name\":\"w\",\"space\":{\"type\":\"box\",\"params\":["
                      "{\"name\":\"f\",\"type\":\"float\",\"low\":0.3,\"high\":0.3},"
                      "{\"name\":\"g\",\"type\":\"float\",\"low\":0.7,\"high\":0.7,\"log\":true},"
                      "{\"name\":\"k\",\"type\":\"int\",\"low\":5,\"high\":5},"
                      "{\"name\":\"m\",\"type\":\"int\",\"low\":3,\"high\":3,\"log\":true}]}}";
    api_error err;
    json_t *j = proto_parse_object(doc, strlen(doc), &err);
    study_spec s;
    assert_int_equal(proto_study_spec_parse(j, &s, &err), 0);
    assert_int_equal(proto_study_spec_check_new(&s, &err), 0);
    json_decref(j);
    for (int i = 0; i <= 4; i++) {
        double u = i / 4.0, x[4] = {u, u, u, u}, back[4];
        json_t *p = proto_params_from_x(&s, x);
        assert_true(json_real_value(json_object_get(p, "f")) == 0.3);
        assert_true(json_real_value(json_object_get(p, "g")) == 0.7);
        assert_int_equal(json_integer_value(json_object_get(p, "k")), 5);
        assert_int_equal(json_integer_value(json_object_get(p, "m")), 3);
        assert_int_equal(proto_params_to_x(&s, p, "params", back, &err), 0);
        for (int d = 0; d < 4; d++)
            assert_true(back[d] == 0.5);
        json_decref(p);
    }
    proto_study_spec_clear(&s);
}

/* Repeated categorical choices parse (stored studies must load) but fail the rules of
 * a new study, naming the first repeat; numbers compare by value, types never mix. */
static void repeated_choices(void **state)
{
    (void)state;
    static const struct {
        const char *choices, *field; /* NULL: distinct */
    } choice_cases[] = {
        {"[\"a\",\"b\",\"c\",\"b\",\"a\"]", "space.params[1].choices[3]"},
        {"[1,2,1.0]", "space.params[1].choices[2]"},
        {"[0.5,5e-1]", "space.params[1].choices[1]"},
        {"[false,true,false]", "space.params[1].choices[2]"},
        {"[\"ab\",\"a\",\"abc\",\"b\"]", NULL},
        {"[true,1,\"1\",\"true\",1.5,false,0,\"\"]", NULL},
    };
    for (size_t c = 0; c < sizeof choice_cases / sizeof choice_cases[0]; c++) {
        char doc[512];
        snprintf(doc, sizeof doc, "{\"name\":\"w\",\"space\":{\"type\":\"box\",\"params\":["
                 "{\"name\":\"f\",\"type\":\"float\",\"low\":0,\"high\":1},"
                 "{\"name\":\"c\",\"type\":\"categorical\",\"choices\":%s}]}}", choice_cases[c].choices);
        api_error err = {0};
        json_t *j = proto_parse_object(doc, strlen(doc), &err);
        study_spec s;
        assert_int_equal(proto_study_spec_parse(j, &s, &err), 0);
        json_decref(j);
        int rc = proto_study_spec_check_new(&s, &err);
        if (choice_cases[c].field) {
            assert_int_equal(rc, -1);
            assert_int_equal(err.code, API_INVALID);
            assert_string_equal(err.field, choice_cases[c].field);
        } else {
            assert_int_equal(rc, 0);
        }
        proto_study_spec_clear(&s);
    }
}

/* A random double over many magnitudes: uniform mantissa, exponent in [-300, 300]. */
static double random_double(unsigned *seed)
{
    double m = (double)rand_r(seed) / RAND_MAX + (double)rand_r(seed) / RAND_MAX / RAND_MAX;
    int e = rand_r(seed) % 601 - 300;
    return (rand_r(seed) & 1 ? -1 : 1) * m * pow(10.0, e);
}

/* Each rendering reads back bit-identical, and one digit fewer would not. */
static void shortest_doubles_round_trip(void **state)
{
    (void)state;
    unsigned seed = 7;
    char buf[KB_DOUBLE_BUF], shorter[320]; /* %.*g of 1e300 needs 300 bytes */
    for (int i = 0; i < 1000; i++) {
        double v = random_double(&seed);
        kb_format_double(buf, v);
        double back = strtod(buf, NULL);
        assert_memory_equal(&back, &v, sizeof v);
        int digits = 0; /* significant digits: leading zeros do not count */
        for (const char *p = buf; *p && *p != 'e'; p++)
            digits += (*p >= '1' && *p <= '9') || (*p == '0' && digits > 0);
        if (digits > 1) {
            snprintf(shorter, sizeof shorter, "%.*g", digits - 1, v);
            assert_true(strtod(shorter, NULL) != v);
        }
    }
    assert_string_equal(kb_format_double(buf, 0.93), "0.93");
    assert_string_equal(kb_format_double(buf, 1e-5), "1e-05");
    assert_string_equal(kb_format_double(buf, 0.1 + 0.2), "0.30000000000000004");
}

/* The first of %.15g, %.16g, %.17g that reads back (of %.1g ... for a subnormal): what
 * kb_format_double must print. */
static const char *reference_format(char buf[KB_DOUBLE_BUF], double v)
{
    /* a subnormal's few bits often need fewer digits: 5e-324, not 4.94065645841247e-324 */
    for (int prec = v != 0.0 && fabs(v) < DBL_MIN ? 1 : 15; prec <= 17; prec++) {
        snprintf(buf, KB_DOUBLE_BUF, "%.*g", prec, v);
        if (strtod(buf, NULL) == v)
            break;
    }
    return buf;
}

static void expect_printf_rendering(double v)
{
    char got[KB_DOUBLE_BUF], want[KB_DOUBLE_BUF];
    kb_format_double(got, v);
    reference_format(want, v);
    if (strcmp(got, want) != 0)
        fail_msg("%a: got %s, printf gives %s", v, got, want);
}

/* kb_format_double rounds the 15- and 16-digit forms from the 17-digit one: byte for byte
 * what printf prints, over random bit patterns (every exponent, subnormals included),
 * decimals as users type them, their neighbours (ties and carries), integers around
 * 10^15-10^17 and the special values. */
static void shortest_doubles_equal_printf(void **state)
{
    (void)state;
    unsigned seed = 11;
    for (int i = 0; i < 40000; i++) {
        uint64_t bits = (uint64_t)rand_r(&seed) << 42 ^ (uint64_t)rand_r(&seed) << 21 ^
                        (uint64_t)rand_r(&seed);
        double v;
        memcpy(&v, &bits, sizeof v);
        expect_printf_rendering(v);
        double typed = (double)(rand_r(&seed) % 2000001 - 1000000) *
                       pow(10.0, rand_r(&seed) % 41 - 25);
        expect_printf_rendering(typed);
        expect_printf_rendering(nextafter(typed, INFINITY));
        expect_printf_rendering(nextafter(typed, -INFINITY));
        expect_printf_rendering((double)rand_r(&seed) / RAND_MAX);
        expect_printf_rendering(1e15 * (1.0 + (double)rand_r(&seed) / RAND_MAX * 200.0));
    }
    const double special[] = {0.0, -0.0, INFINITY, -INFINITY, NAN, DBL_MAX, -DBL_MAX,
                              DBL_MIN, DBL_TRUE_MIN, 0.5, 1e-5, 1e-4, 9.9999999999999995e-5,
                              1e15, 1e16, 1e17, 9.999999999999999e22, 0.1 + 0.2,
                              123456789012345678.0, 5e-324, 1.7976931348623157e308};
    for (size_t i = 0; i < sizeof special / sizeof *special; i++)
        expect_printf_rendering(special[i]);
    char buf[KB_DOUBLE_BUF];
    assert_string_equal(kb_format_double(buf, 5e-324), "5e-324");
    assert_string_equal(kb_format_double(buf, -1e-310), "-1e-310");
}

/* kb_json_dumps reads jansson's tokens ("1.9676895245913128e16", "2.0"): each real comes
 * out as kb_format_double prints it, ".0" added where it would read as an integer. */
static void json_reals_equal_printf(void **state)
{
    (void)state;
    unsigned seed = 5;
    for (int i = 0; i < 5000; i++) {
        double v = i % 2 ? random_double(&seed)
                         : (double)(rand_r(&seed) % 20001 - 10000) * pow(10.0, i % 37 - 18);
        json_t *doc = json_pack("[f]", v);
        char *text = kb_json_dumps(doc, JSON_COMPACT);
        char want[KB_DOUBLE_BUF + 4];
        reference_format(want + 1, v);
        want[0] = '[';
        strcat(want, strpbrk(want, ".e") ? "]" : ".0]");
        if (strcmp(text, want) != 0)
            fail_msg("%a: got %s, want %s", v, text, want);
        free(text);
        json_decref(doc);
    }
}

/* Reals are shortened, integers and strings that look like numbers are untouched, and
 * reals stay reals. */
static void json_dumps_shortest(void **state)
{
    (void)state;
    json_t *doc = json_pack("{s:f,s:f,s:I,s:s,s:[f,f,f]}", "a", 0.93, "b", 2.0, "c",
                            (json_int_t)9007199254740993LL, "s", "\\\"0.93000000000000005",
                            "l", 1e-5, -1.5e300, -1.967689524591313e+16);
    char *text = kb_json_dumps(doc, JSON_COMPACT | JSON_SORT_KEYS);
    assert_string_equal(text, "{\"a\":0.93,\"b\":2.0,\"c\":9007199254740993,"
                              "\"l\":[1e-05,-1.5e+300,-1.967689524591313e+16],"
                              "\"s\":\"\\\\\\\"0.93000000000000005\"}");
    json_t *back = json_loads(text, 0, NULL);
    assert_true(json_equal(back, doc));
    free(text);
    json_decref(back);
    json_decref(doc);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(error_table_is_complete),
        cmocka_unit_test(validation_table),
        cmocka_unit_test(study_states_round_trip),
        cmocka_unit_test(engine_settings_are_typed),
        cmocka_unit_test(stored_spec_round_trips),
        cmocka_unit_test(csv_parses_and_rejects),
        cmocka_unit_test(csv_rfc4180_quotes),
        cmocka_unit_test(csv_malformed_quotes_name_the_line),
        cmocka_unit_test(csv_writer_round_trips),
        cmocka_unit_test(csv_bom_and_wide_box),
        cmocka_unit_test(csv_20000_by_8),
        cmocka_unit_test(box_mapping),
        cmocka_unit_test(one_value_ranges),
        cmocka_unit_test(repeated_choices),
        cmocka_unit_test(shortest_doubles_round_trip),
        cmocka_unit_test(shortest_doubles_equal_printf),
        cmocka_unit_test(json_reals_equal_printf),
        cmocka_unit_test(json_dumps_shortest),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
