/*
 * fuzz_csv.c - libFuzzer target for the CSV candidate-set reader (proto/csv.c), checked
 * against the table it must read. The input bytes do not form the CSV: they choose a
 * table (distinct names, finite doubles) and how to write it within the documented grammar (a
 * byte-order mark, plain or quoted fields, blanks around fields, LF or CRLF, blank lines,
 * a final record with or without its line end, numbers in %.17g, %e or %g). The reader
 * must accept the text and return exactly that table, every double bit for bit, with the
 * header's names byte for byte. (fuzz_proto feeds the reader raw bytes.)
 */
#include "../../proto/csv.h"
#include "../../proto/proto.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct bytes {
    const uint8_t *p;
    size_t n;
} bytes;

static unsigned take(bytes *b)
{
    if (!b->n)
        return 0;
    b->n--;
    return *b->p++;
}

/* A finite double from 8 input bytes (a non-finite pattern is folded to a finite one). */
static double take_double(bytes *b)
{
    uint64_t u = 0;
    for (int i = 0; i < 8; i++)
        u = u << 8 | take(b);
    double v;
    memcpy(&v, &u, sizeof v);
    return isfinite(v) ? v : (double)(int64_t)u / 3.0;
}

/* A header name of 1 to 12 bytes from a set that needs quoting now and then; the first
 * byte is a letter, so that the header never reads as a number. */
static void take_name(bytes *b, char *out)
{
    static const char set[] = "abcXYZ09_ ,\"\t\r\n.-+";
    size_t len = 1 + take(b) % 12;
    out[0] = (char)('a' + take(b) % 26);
    for (size_t i = 1; i < len; i++)
        out[i] = set[take(b) % (sizeof set - 1)];
    out[len] = 0;
}

static void put_blanks(FILE *f, unsigned how)
{
    static const char *const blanks[] = {"", "", " ", "\t", "  \t"};
    fputs(blanks[how % 5], f);
}

static void put_number(FILE *f, double v, unsigned how)
{
    char num[64];
    snprintf(num, sizeof num, how % 3 == 0 ? "%.17g" : how % 3 == 1 ? "%.16e" : "%.17G", v);
    if (how & 4) {
        fprintf(f, "\"%s\"", num);
    } else {
        fputs(num, f);
    }
}

/* A name as a field: quoted when it must be (blanks at its ends, a comma, a quote or a
 * line break) or when the input says so. */
static void put_name(FILE *f, const char *name, unsigned how)
{
    size_t len = strlen(name);
    int must = strpbrk(name, ",\"\r\n") || name[len - 1] == ' ' || name[len - 1] == '\t';
    if (must || (how & 1))
        csv_put_string(f, name);
    else
        fputs(name, f);
}

static void put_record_end(FILE *f, unsigned how)
{
    fputs(how & 1 ? "\r\n" : "\n", f);
    if (how & 2)
        fputs(how & 4 ? "\n" : " \t\r\n", f); /* a blank line */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    bytes b = {data, size};
    size_t d = 1 + take(&b) % 6, n = 1 + take(&b) % 12;
    unsigned style = take(&b);
    char names[6][16];
    double want[72];
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    fputs(style & 1 ? "\xef\xbb\xbf" : "", f);
    for (size_t j = 0; j < d && (style & 2); j++) {
        take_name(&b, names[j]);
        names[j][0] = (char)('a' + j); /* a set's column names are distinct */
        put_blanks(f, j ? take(&b) : 0); /* blanks before a header would be part of no name */
        put_name(f, names[j], take(&b));
        put_blanks(f, take(&b));
        fputs(j + 1 < d ? "," : "", f);
    }
    if (style & 2)
        put_record_end(f, take(&b));
    for (size_t i = 0; i < n * d; i++) {
        want[i] = take_double(&b);
        put_blanks(f, take(&b));
        put_number(f, want[i], take(&b));
        put_blanks(f, take(&b));
        if ((i + 1) % d)
            fputc(',', f);
        else if (i + 1 < n * d || (style & 4))
            put_record_end(f, take(&b));
    }
    fclose(f);
    double *rows = NULL;
    size_t n2 = 0, d2 = 0;
    json_t *got_names = NULL;
    api_error err;
    if (proto_candidates_csv_parse(text, len, &rows, &n2, &d2, &got_names, &err)) {
        fprintf(stderr, "fuzz_csv: refused (%s) a valid CSV:\n%s\n", err.message, text);
        abort();
    }
    int same = n2 == n && d2 == d && memcmp(rows, want, n * d * sizeof *rows) == 0 &&
               (style & 2 ? json_array_size(got_names) == d : got_names == NULL);
    for (size_t j = 0; same && j < d && (style & 2); j++)
        same = strcmp(json_string_value(json_array_get(got_names, j)), names[j]) == 0;
    if (!same) {
        fprintf(stderr, "fuzz_csv: read a different table from:\n%s\n", text);
        abort();
    }
    free(rows);
    json_decref(got_names);
    free(text);
    return 0;
}
