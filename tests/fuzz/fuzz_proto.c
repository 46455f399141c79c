/*
 * fuzz_proto.c - libFuzzer target over every request parser of proto/. The first input
 * byte selects the parser, the rest is the request body. Parsers must never crash, leak
 * or read out of bounds, and must either succeed or fill a valid error.
 */
#include "../../proto/proto.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static void check_error(const api_error *err)
{
    if (err->code <= API_OK || err->code >= API__COUNT || !memchr(err->message, 0, sizeof err->message))
        abort();
}

static void parse_study(json_t *doc)
{
    study_spec s;
    api_error err = {0};
    if (proto_study_spec_parse(doc, &s, &err)) {
        check_error(&err);
        return;
    }
    if (proto_study_spec_config(&s, &err) == 0) {
        json_t *j = proto_study_spec_json(&s, 1);
        study_spec t;
        if (proto_study_spec_parse(j, &t, &err)) /* the stored form must parse back */
            abort();
        proto_study_spec_clear(&t);
        json_decref(j);
    }
    if (s.space == SPACE_BOX) {
        double *x = calloc(s.dim, sizeof *x);
        json_t *p = proto_params_from_x(&s, x);
        if (proto_params_to_x(&s, p, "p", x, &err))
            abort();
        json_decref(p);
        free(x);
    }
    proto_study_spec_clear(&s);
}

static void parse_json_kind(int kind, json_t *doc)
{
    api_error err = {0};
    int rc = 0;
    switch (kind) {
    case 0: parse_study(doc); return;
    case 1: { ask_req r; rc = proto_ask_parse(doc, &r, &err); proto_ask_clear(&r); break; }
    case 2: { double v; rc = proto_tell_parse(doc, &v, &err); break; }
    case 3: { tell_item *it = NULL; size_t n; rc = proto_tell_batch_parse(doc, &it, &n, &err); free(it); break; }
    case 4: { char *r = NULL; rc = proto_fail_parse(doc, &r, &err); free(r); break; }
    case 5: rc = proto_heartbeat_parse(doc, &err); break;
    case 6: {
        double *rows = NULL; size_t n, d; json_t *names = NULL;
        rc = proto_candidates_json_parse(doc, &rows, &n, &d, &names, &err);
        free(rows); json_decref(names);
        break;
    }
    default: {
        static const char box[] = "{\"name\":\"s\",\"space\":{\"type\":\"box\",\"params\":["
            "{\"name\":\"a\",\"type\":\"float\",\"low\":1e-3,\"high\":1,\"log\":true},"
            "{\"name\":\"b\",\"type\":\"int\",\"low\":1,\"high\":4},"
            "{\"name\":\"c\",\"type\":\"categorical\",\"choices\":[\"x\",1,true]}]}}";
        json_t *sd = json_loads(box, 0, NULL);
        study_spec s;
        if (proto_study_spec_parse(sd, &s, &err))
            abort();
        double *x = NULL, *y = NULL; size_t n;
        rc = proto_observations_parse(doc, &s, &x, &y, &n, &err);
        free(x); free(y);
        proto_study_spec_clear(&s);
        json_decref(sd);
    }
    }
    if (rc)
        check_error(&err);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    int kind = data[0] % 9;
    const char *body = (const char *)data + 1;
    size_t len = size - 1;
    api_error err = {0};
    if (kind == 8) {
        double *rows = NULL; size_t n, d; json_t *names = NULL;
        if (proto_candidates_csv_parse(body, len, &rows, &n, &d, &names, &err))
            check_error(&err);
        free(rows);
        json_decref(names);
        return 0;
    }
    json_t *doc = proto_parse_object(body, len, &err);
    if (!doc) {
        check_error(&err);
        return 0;
    }
    parse_json_kind(kind, doc);
    json_decref(doc);
    return 0;
}
