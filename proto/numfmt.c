/*
 * numfmt.c - shortest round-trip rendering of doubles (see numfmt.h).
 *
 * jansson prints every real with one fixed precision (17 digits by default), so 0.93
 * comes out as 0.93000000000000005. Precision 17 always reads back; 15 or 16 digits
 * often do and are what a user typed. We try 15, 16, 17 and keep the first that strtod
 * maps back to the same bits. JSON documents are dumped by jansson and then each real
 * token (outside strings) is re-rendered into a new buffer (%g may switch between fixed
 * and exponent form, so a token can grow: 19676895245913128.0 -> 1.967689524591313e+16).
 */
#include "numfmt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *kb_format_double(char buf[KB_DOUBLE_BUF], double v)
{
    for (int prec = 15; prec <= 17; prec++) {
        snprintf(buf, KB_DOUBLE_BUF, "%.*g", prec, v);
        if (strtod(buf, NULL) == v)
            break;
    }
    return buf;
}

/* A real token is one with a fraction or an exponent; integers are left alone (they
 * may exceed a double's 53 bits). */
static int is_real_token(const char *s, size_t n)
{
    return memchr(s, '.', n) || memchr(s, 'e', n) || memchr(s, 'E', n);
}

/* Writes the number token s[0..n) to f, a real at its shortest form (kept a real). */
static void put_number(FILE *f, const char *s, size_t n)
{
    char tok[64], buf[KB_DOUBLE_BUF];
    if (!is_real_token(s, n) || n >= sizeof tok) {
        fwrite(s, 1, n, f);
        return;
    }
    memcpy(tok, s, n);
    tok[n] = '\0';
    kb_format_double(buf, strtod(tok, NULL));
    fputs(buf, f);
    if (!strpbrk(buf, ".eE"))
        fputs(".0", f);
}

/* Copies the JSON text to f, re-rendering each number token outside strings. */
static void put_json(FILE *f, const char *r)
{
    int in_string = 0;
    while (*r) {
        size_t n = 1;
        if (in_string) {
            if (*r == '\\' && r[1]) /* an escape pair never ends the string */
                n = 2;
            else if (*r == '"')
                in_string = 0;
        } else if (*r == '"') {
            in_string = 1;
        } else if (*r == '-' || (*r >= '0' && *r <= '9')) {
            n = strspn(r, "-+0123456789.eE");
            put_number(f, r, n);
            r += n;
            continue;
        }
        fwrite(r, 1, n, f);
        r += n;
    }
}

char *kb_json_dumps(const json_t *doc, size_t flags)
{
    char *text = json_dumps(doc, flags);
    if (!text)
        return NULL;
    char *out = NULL;
    size_t len;
    FILE *f = open_memstream(&out, &len);
    if (f) {
        put_json(f, text);
        if (fclose(f)) {
            free(out);
            out = NULL;
        }
    }
    free(text);
    return out;
}
