/*
 * numfmt.c - shortest round-trip rendering of doubles (see numfmt.h).
 *
 * jansson prints every real with one fixed precision (17 digits by default), so 0.93
 * comes out as 0.93000000000000005. Precision 17 always reads back; 15 or 16 digits
 * often do and are what a user typed. We keep the first of %.15g, %.16g, %.17g that
 * strtod maps back to the same bits (a subnormal: the first of %.1g ... %.17g). JSON documents are dumped by jansson and then each
 * real token (outside strings) is re-rendered into a new buffer (%g may switch between
 * fixed and exponent form, so a token can grow: 19676895245913128.0 ->
 * 1.967689524591313e+16).
 *
 * The 15- and 16-digit forms are rounded from the digits of the 17-digit one instead of
 * printed anew: %.17g is v correctly rounded, so rounding its digits again gives v's own
 * rounding except at an exact tie in them (a 5 and nothing after), where printf decides.
 * Whether such a form reads back is mostly clear from how far the rounding moved it
 * against v's ulp; strtod decides the close calls. Printing and parsing each real up to
 * three more times was a tenth of the daemon's CPU under load, and rendering JSON as a
 * whole a fifth (docs/BENCHMARKS.md, twenty-fourth session). The output is printf's, byte
 * for byte (tests/unit/test_proto.c checks it against the three printf calls).
 */
#include "numfmt.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A decimal: the significant digits d[0..n) (no trailing zero, n >= 1), the power of
 * ten of d[0], and the sign. */
typedef struct decimal {
    char d[20];
    int n, exp10, neg;
} decimal;

/* The digits of a %.17g rendering as printf or jansson writes it ("-1.25e-05",
 * "1.9676895245913128e16", "2.0"); 0 for zero or anything else. */
static int read_decimal(const char *s, decimal *x)
{
    int seen = 0, first = -1, int_digits = -1;
    x->neg = *s == '-';
    s += x->neg;
    x->n = 0;
    for (; *s && *s != 'e' && *s != 'E'; s++) {
        if (*s == '.') {
            int_digits = seen;
            continue;
        }
        if (*s < '0' || *s > '9')
            return 0;
        if (first < 0 && *s != '0')
            first = seen;
        if (first >= 0) {
            if (x->n == (int)sizeof x->d)
                return 0;
            x->d[x->n++] = *s;
        }
        seen++;
    }
    if (first < 0)
        return 0;
    if (int_digits < 0)
        int_digits = seen;
    x->exp10 = int_digits - 1 - first + (*s ? atoi(s + 1) : 0);
    while (x->n > 1 && x->d[x->n - 1] == '0')
        x->n--;
    return 1;
}

/* out = x rounded to prec digits, half up, and *moved = |out - x| in units of x's 17th
 * digit; 0 when x ends in an exact tie there, which x's own rounding may have made or
 * broken. */
static int round_decimal(const decimal *x, int prec, decimal *out, int *moved)
{
    *out = *x;
    *moved = 0;
    if (x->n <= prec)
        return 1;
    if (x->d[prec] == '5' && x->n == prec + 1)
        return 0;
    int tail = 0, unit = 1;
    for (int i = prec; i < 17; i++, unit *= 10)
        tail = 10 * tail + (i < x->n ? x->d[i] - '0' : 0);
    out->n = prec;
    *moved = tail;
    if (x->d[prec] >= '5') {
        *moved = unit - tail;
        int i = prec - 1;
        while (i >= 0 && out->d[i] == '9')
            out->d[i--] = '0';
        if (i >= 0) {
            out->d[i]++;
        } else { /* 99..9 -> 100..0 */
            out->d[0] = '1';
            out->exp10++;
        }
    }
    while (out->n > 1 && out->d[out->n - 1] == '0')
        out->n--;
    return 1;
}

/* Whether a rendering `moved` units of the 17th digit of x (x: v's %.17g digits) away
 * from x reads back as v: 1 yes, 0 no, -1 too close to call. x is within half a unit of
 * v, so the rendering is within moved +- 1/2 units of v, and it reads back when that is
 * less than half of v's ulp (a power of two, whose lower gap is half as wide, is left to
 * strtod). The margin covers the rounding of the ratio ulp / unit. */
static int reads_back_by_gap(const decimal *x, double v, int moved)
{
    int e2;
    double f = frexp(fabs(v), &e2);
    if (f == 0.5)
        return -1;
    int ulp_e2 = e2 - 53 < -1074 ? -1074 : e2 - 53;
    double half_ulp = 0.5 * exp2(ulp_e2 - (x->exp10 - 16) * 3.321928094887362);
    if (moved + 0.5 < half_ulp * (1.0 - 1e-9))
        return 1;
    if (moved - 0.5 > half_ulp * (1.0 + 1e-9))
        return 0;
    return -1;
}

/* Writes v in decimal with at least min_digits digits (no sign); returns the end. */
static char *put_int(char *p, int v, int min_digits)
{
    char t[12];
    int k = 0;
    do {
        t[k++] = (char)('0' + v % 10);
        v /= 10;
    } while (v > 0 || k < min_digits);
    while (k > 0)
        *p++ = t[--k];
    return p;
}

/* Whether x reads back as v, by strtod. */
static int reads_back(const decimal *x, double v)
{
    char s[40], *p = s;
    int e = x->exp10 - x->n + 1; /* of the last digit */
    if (x->neg)
        *p++ = '-';
    memcpy(p, x->d, (size_t)x->n);
    p += x->n;
    *p++ = 'e';
    if (e < 0)
        *p++ = '-';
    *put_int(p, abs(e), 1) = '\0';
    return strtod(s, NULL) == v;
}

/* x as %.<prec>g prints it: exponent form when exp10 < -4 or >= prec, else fixed. */
static void render_g(char buf[KB_DOUBLE_BUF], const decimal *x, int prec)
{
    char *p = buf;
    int e = x->exp10;
    if (x->neg)
        *p++ = '-';
    if (e < -4 || e >= prec) {
        *p++ = x->d[0];
        if (x->n > 1) {
            *p++ = '.';
            memcpy(p, x->d + 1, (size_t)x->n - 1);
            p += x->n - 1;
        }
        *p++ = 'e';
        *p++ = e < 0 ? '-' : '+';
        *put_int(p, abs(e), 2) = '\0';
        return;
    }
    if (e < 0) {
        *p++ = '0';
        *p++ = '.';
        for (int i = -1; i > e; i--)
            *p++ = '0';
        memcpy(p, x->d, (size_t)x->n);
        p += x->n;
    } else {
        for (int i = 0; i <= e; i++)
            *p++ = i < x->n ? x->d[i] : '0';
        if (x->n > e + 1) {
            *p++ = '.';
            memcpy(p, x->d + e + 1, (size_t)(x->n - e - 1));
            p += x->n - e - 1;
        }
    }
    *p = '\0';
}

/* The first of %.<prec>g .. %.17g that reads back, printed. */
static const char *by_printf(char buf[KB_DOUBLE_BUF], double v, int prec)
{
    for (; prec <= 17; prec++) {
        snprintf(buf, KB_DOUBLE_BUF, "%.*g", prec, v);
        if (strtod(buf, NULL) == v)
            break;
    }
    return buf;
}

/* The precision printf starts from for v: 15, or 1 for a subnormal, whose fewer bits
 * often read back from fewer digits (5e-324 came out as 4.94065645841247e-324). */
static int first_prec(double v)
{
    return v != 0.0 && fabs(v) < DBL_MIN ? 1 : 15;
}

/* kb_format_double given v's %.17g digits g17. */
static const char *shortest(char buf[KB_DOUBLE_BUF], double v, const char *g17)
{
    decimal x, r;
    int moved, ok;
    if (!isfinite(v) || first_prec(v) < 15 || !read_decimal(g17, &x))
        return by_printf(buf, v, first_prec(v));
    for (int prec = 15; prec < 17; prec++) {
        if (!round_decimal(&x, prec, &r, &moved))
            return by_printf(buf, v, prec);
        ok = reads_back_by_gap(&x, v, moved);
        if (ok == 1 || (ok < 0 && reads_back(&r, v))) {
            render_g(buf, &r, prec);
            return buf;
        }
    }
    render_g(buf, &x, 17);
    return buf;
}

const char *kb_format_double_printf(char buf[KB_DOUBLE_BUF], double v)
{
    return by_printf(buf, v, first_prec(v));
}

const char *kb_format_double(char buf[KB_DOUBLE_BUF], double v)
{
    char g17[KB_DOUBLE_BUF];
    snprintf(g17, sizeof g17, "%.17g", v);
    return shortest(buf, v, g17);
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
    shortest(buf, strtod(tok, NULL), tok); /* jansson printed it at %.17g */
    fputs(buf, f);
    if (!strpbrk(buf, ".eE"))
        fputs(".0", f);
}

/* Copies the JSON text to f, re-rendering each number token outside strings; the text
 * between them goes out a span at a time (a stream call per character was a third of
 * kb_json_dumps's CPU; docs/BENCHMARKS.md, twenty-seventh session). */
static void put_json(FILE *f, const char *r)
{
    int in_string = 0;
    while (*r) {
        size_t n = strcspn(r, in_string ? "\\\"" : "\"-0123456789");
        if (n == 0 && in_string) {
            n = *r == '\\' && r[1] ? 2 : 1; /* an escape pair never ends the string */
            in_string = *r == '\\';
        } else if (n == 0 && *r == '"') {
            n = 1;
            in_string = 1;
        } else if (n == 0) {
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
    /* the tokens must carry 17 digits (shortest) */
    char *text = json_dumps(doc, flags & ~(size_t)JSON_REAL_PRECISION(0x1F));
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
