/*
 * csv.c - This file contains RFC 4180 CSV: the parser of candidate-set uploads
 * (proto_candidates_csv_parse) and the quoted-field writer of exports (csv_put_string).
 *
 * Accepted text: records end with LF or CRLF (the last one may be unterminated); fields
 * are separated by commas; a field is either plain (no quote inside, surrounding blanks
 * dropped) or quoted ("..." with "" for a quote, commas and line breaks allowed, blanks
 * around the quotes dropped); a UTF-8 byte-order mark and blank lines are skipped. The
 * first record is a header of names when its first field is not a number.
 *
 * Invariants: the reader works on a private copy of the text in which quoted fields are
 * unquoted in place (the unquoted text is never longer than the quoted one, so writes
 * never overtake reads), and every field is a [start, end) range of that copy. Errors
 * name the 1-based line of the text where they were found.
 */
#include "csv.h"
#include "proto.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define CSV_MAX_DIM 10000

/* ------------------------------------------------------------ writer */

void csv_put_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"')
            fputc('"', f);
        fputc(*s, f);
    }
    fputc('"', f);
}

/* ------------------------------------------------------------ reader */

typedef struct csv_reader {
    char *p, *end; /* unread part of the copy */
    size_t line;   /* 1-based line of p */
} csv_reader;

typedef struct csv_record {
    char **fs, **fe; /* field ranges; the first CSV_MAX_DIM are kept */
    size_t k;        /* number of fields (may exceed CSV_MAX_DIM) */
    size_t line;     /* line the record starts on */
    int blank;       /* a blank line: one plain field, empty */
} csv_record;

static int is_blank(char c) { return c == ' ' || c == '\t'; }

static void skip_blanks(csv_reader *r)
{
    while (r->p < r->end && is_blank(*r->p))
        r->p++;
}

/* At "\n", "\r\n", a "\r" ending the text, or the end of the text. */
static int at_record_end(const csv_reader *r)
{
    return r->p == r->end || *r->p == '\n' ||
           (*r->p == '\r' && (r->p + 1 == r->end || r->p[1] == '\n'));
}

/* A quoted field, r->p on its opening quote. */
static int read_quoted(csv_reader *r, size_t col, char **s, char **e, api_error *err)
{
    size_t open_line = r->line;
    char *w = ++r->p;
    *s = w;
    for (;;) {
        if (r->p == r->end)
            return api_fail(err, API_INVALID, NULL,
                            "line %zu: the quote that opens column %zu is never closed",
                            open_line, col);
        char c = *r->p++;
        if (c == '"') {
            if (r->p == r->end || *r->p != '"')
                break;
            r->p++; /* "" inside quotes is one quote */
        } else if (c == '\n') {
            r->line++;
        }
        *w++ = c;
    }
    *e = w;
    skip_blanks(r);
    if (!at_record_end(r) && *r->p != ',')
        return api_fail(err, API_INVALID, NULL,
                        "line %zu column %zu: text after the closing quote (a quote inside a "
                        "quoted field is written \"\")", r->line, col);
    return 0;
}

/* A plain field, leading blanks already skipped; trailing blanks are dropped. */
static int read_plain(csv_reader *r, size_t col, char **s, char **e, api_error *err)
{
    *s = r->p;
    while (!at_record_end(r) && *r->p != ',') {
        if (*r->p == '"')
            return api_fail(err, API_INVALID, NULL,
                            "line %zu column %zu: a quote inside an unquoted field (quote the "
                            "whole field and double the quote: \"a\"\"b\")", r->line, col);
        r->p++;
    }
    *e = r->p;
    while (*e > *s && is_blank((*e)[-1]))
        (*e)--;
    return 0;
}

/* Reads the next record: 0, 1 at the end of the text, -1 with err filled. */
static int read_record(csv_reader *r, csv_record *rec, api_error *err)
{
    if (r->p == r->end)
        return 1;
    int quoted = 0;
    rec->k = 0;
    rec->line = r->line;
    for (;;) {
        char *s = NULL, *e = NULL;
        size_t col = rec->k + 1;
        skip_blanks(r);
        int q = r->p < r->end && *r->p == '"';
        if (q ? read_quoted(r, col, &s, &e, err) : read_plain(r, col, &s, &e, err))
            return -1;
        quoted |= q;
        if (rec->k < CSV_MAX_DIM) {
            rec->fs[rec->k] = s;
            rec->fe[rec->k] = e;
        }
        rec->k++;
        if (r->p == r->end || *r->p != ',')
            break;
        r->p++;
    }
    if (r->p < r->end) { /* the record's end: "\n", "\r\n" or a final "\r" */
        r->p += *r->p == '\r' ? 1 : 0;
        r->p += r->p < r->end ? 1 : 0;
        r->line++;
    }
    rec->blank = rec->k == 1 && !quoted && rec->fs[0] == rec->fe[0];
    return 0;
}

/* ------------------------------------------------------------ candidate sets */

/* One field as a finite number (blanks around it allowed); 0 on success. */
static int csv_number(const char *s, const char *e, double *out)
{
    char tmp[64];
    while (s < e && is_blank(*s))
        s++;
    while (e > s && is_blank(e[-1]))
        e--;
    size_t len = (size_t)(e - s);
    if (len == 0 || len >= sizeof tmp)
        return -1;
    memcpy(tmp, s, len);
    tmp[len] = 0;
    char *endp;
    *out = strtod(tmp, &endp);
    /* endp must reach the field's end: "3\0junk" stopped strtod at the NUL and read as 3 */
    return endp != tmp + len || !isfinite(*out) ? -1 : 0;
}

/* Field j of the header record as a JSON string; NULL with err filled. */
static json_t *header_name(const csv_record *rec, size_t j, api_error *err)
{
    const char *s = rec->fs[j];
    size_t len = (size_t)(rec->fe[j] - s);
    char fp[API_FIELD_MAX];
    snprintf(fp, sizeof fp, "names[%zu]", j);
    size_t chars = proto_utf8_chars(s, len);
    const char *problem = chars == 0 || chars > 200 ? "must have 1 to 200 characters" /* as JSON */
                          : memchr(s, 0, len)   ? "must not contain NUL"
                                                : NULL;
    if (problem) {
        api_fail(err, API_INVALID, fp, "line %zu: header names %s", rec->line, problem);
        return NULL;
    }
    json_t *name = json_stringn(s, len);
    if (!name)
        api_fail(err, API_INVALID_JSON, fp, "line %zu: header is not valid UTF-8", rec->line);
    return name;
}

/* The header record as a new JSON array of names; NULL with err filled. */
static json_t *header_names(const csv_record *rec, api_error *err)
{
    json_t *names = json_array();
    if (!names) {
        api_fail(err, API_INTERNAL, NULL, "out of memory");
        return NULL;
    }
    for (size_t j = 0; j < rec->k; j++) {
        json_t *name = header_name(rec, j, err);
        if (!name) {
            json_decref(names);
            return NULL;
        }
        json_array_append_new(names, name);
    }
    return names;
}

/* Appends a data record of d fields to the matrix m (nr rows, room for *cap values). */
static int append_row(const csv_record *rec, size_t d, double **m, size_t *cap, size_t nr,
                      api_error *err)
{
    if ((nr + 1) * d > *cap) {
        size_t nc = *cap ? *cap * 2 : 1024 * d;
        double *q = realloc(*m, nc * sizeof *q);
        if (!q)
            return api_fail(err, API_INTERNAL, NULL, "out of memory");
        *m = q;
        *cap = nc;
    }
    for (size_t j = 0; j < d; j++)
        if (csv_number(rec->fs[j], rec->fe[j], &(*m)[nr * d + j])) {
            char fp[API_FIELD_MAX];
            snprintf(fp, sizeof fp, "rows[%zu][%zu]", nr, j);
            return api_fail(err, API_INVALID, fp, "line %zu column %zu is not a finite number",
                            rec->line, j + 1);
        }
    return 0;
}

/* Checks a record's width against d (0: the first record sets it). */
static int check_width(const csv_record *rec, size_t d, size_t nr, api_error *err)
{
    if (rec->k > CSV_MAX_DIM)
        return api_fail(err, API_INVALID, NULL, "line %zu: more than %d columns", rec->line,
                        CSV_MAX_DIM);
    if (d && rec->k != d) {
        char fp[API_FIELD_MAX];
        snprintf(fp, sizeof fp, "rows[%zu]", nr);
        return api_fail(err, API_INVALID, fp, "line %zu has %zu columns, expected %zu",
                        rec->line, rec->k, d);
    }
    return 0;
}

int proto_candidates_csv_parse(const char *text, size_t len, double **rows, size_t *n,
                               size_t *dim, json_t **names, api_error *err)
{
    if (len >= 3 && memcmp(text, "\xef\xbb\xbf", 3) == 0) { /* UTF-8 byte-order mark */
        text += 3;
        len -= 3;
    }
    char *copy = malloc(len + 1);
    csv_record rec = {.fs = malloc(CSV_MAX_DIM * sizeof *rec.fs),
                      .fe = malloc(CSV_MAX_DIM * sizeof *rec.fe)};
    double *m = NULL;
    size_t cap = 0, nr = 0, d = 0;
    int rc = 0;
    *names = NULL;
    if (!copy || !rec.fs || !rec.fe) {
        api_fail(err, API_INTERNAL, NULL, "out of memory");
        goto fail;
    }
    memcpy(copy, text, len);
    csv_reader r = {.p = copy, .end = copy + len, .line = 1};
    while ((rc = read_record(&r, &rec, err)) == 0) {
        if (rec.blank)
            continue;
        if (check_width(&rec, d, nr, err))
            goto fail;
        double first;
        if (!d && !*names && csv_number(rec.fs[0], rec.fe[0], &first) != 0) {
            char line[32];
            snprintf(line, sizeof line, "line %zu: ", rec.line);
            if (!(*names = header_names(&rec, err)) || proto_names_distinct(*names, line, err))
                goto fail;
        } else if (append_row(&rec, rec.k, &m, &cap, nr, err)) {
            goto fail;
        } else {
            nr++;
        }
        d = rec.k;
    }
    if (rc < 0)
        goto fail;
    if (nr == 0) {
        api_fail(err, API_INVALID, "rows", "the CSV has no data rows");
        goto fail;
    }
    free(copy);
    free(rec.fs);
    free(rec.fe);
    *rows = m;
    *n = nr;
    *dim = d;
    return 0;
fail:
    free(copy);
    free(rec.fs);
    free(rec.fe);
    free(m);
    json_decref(*names);
    *names = NULL;
    return -1;
}
