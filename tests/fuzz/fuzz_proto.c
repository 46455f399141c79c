/*
 * fuzz_proto.c - libFuzzer target over every request parser of proto/. The first input
 * byte selects the parser, the rest is the request body. Parsers must never crash, leak
 * or read out of bounds, and must either succeed or fill a valid error. A CSV that parses
 * must also survive a round trip through the export's writer (csv_round_trip).
 */
#include "../../proto/csv.h"
#include "../../proto/numfmt.h"
#include "../../proto/proto.h"

#include <stdint.h>
#include <stdio.h>
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
        if (proto_study_spec_parse_stored(j, &t, &err) || t.rules != s.rules)
            abort(); /* the stored form must parse back, under the same rules */
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

/* A parsed CSV written back (names quoted as the export does, numbers at their shortest)
 * must parse to the same names and the same doubles, bit for bit. */
static void csv_round_trip(const double *rows, size_t n, size_t d, json_t *names)
{
    char *text = NULL, num[KB_DOUBLE_BUF];
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    for (size_t j = 0; names && j < d; j++) {
        fputs(j ? "," : "", f);
        csv_put_string(f, json_string_value(json_array_get(names, j)));
    }
    fputs(names ? "\r\n" : "", f);
    for (size_t i = 0; i < n * d; i++)
        fprintf(f, "%s%s", kb_format_double(num, rows[i]), (i + 1) % d ? "," : "\n");
    fclose(f);
    double *back = NULL; size_t n2, d2; json_t *names2 = NULL;
    api_error err;
    if (proto_candidates_csv_parse(text, len, &back, &n2, &d2, &names2, &err) || n2 != n ||
        d2 != d || !(names ? json_equal(names, names2) : !names2) ||
        memcmp(back, rows, n * d * sizeof *rows))
        abort();
    free(back);
    json_decref(names2);
    free(text);
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
        else
            csv_round_trip(rows, n, d, names);
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
