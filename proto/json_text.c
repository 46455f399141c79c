/*
 * json_text.c - This file contains proto_json_text(), the serializer of every JSON
 * answer of the daemon: the same text as jansson's json_dumps(v, JSON_COMPACT), at a
 * fraction of its cost (on an ask + tell round trip json_dumps was the largest single
 * cost of the daemon: a callback per token, and snprintf with a "*" precision, which
 * takes glibc's slow positional path, for every number).
 *
 * Output, as jansson's: objects in insertion order; strings escape '"', '\\' and the
 * control characters below 0x20 (\b \f \n \r \t, else \u00XX in upper case), other bytes
 * (UTF-8) pass through; integers in decimal; reals as "%.17g" (round-trip exact), with ".0"
 * added when that looks like an integer and exponents without '+' or leading zeros
 * ("1e20", "1e-7"). tests/unit/test_proto.c compares the two on varied documents.
 */
#include "proto.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct text {
    char *p;
    size_t n, cap;
    int oom;
} text;

/* Room for `more` bytes (and a NUL); 0 or -1 (oom set). */
static int reserve(text *t, size_t more)
{
    if (t->n + more + 1 <= t->cap)
        return 0;
    size_t nc = t->cap ? t->cap : 512;
    while (nc < t->n + more + 1)
        nc *= 2;
    char *np = t->oom ? NULL : realloc(t->p, nc);
    if (!np) {
        t->oom = 1;
        return -1;
    }
    t->p = np;
    t->cap = nc;
    return 0;
}

static void put(text *t, const char *s, size_t n)
{
    if (reserve(t, n) == 0) {
        memcpy(t->p + t->n, s, n);
        t->n += n;
    }
}

static void put_string(text *t, const char *s, size_t n)
{
    static const char hex[] = "0123456789ABCDEF";
    if (reserve(t, n * 6 + 2))
        return;
    char *o = t->p + t->n;
    *o++ = '"';
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c != '"' && c != '\\') {
            *o++ = (char)c;
            continue;
        }
        *o++ = '\\';
        switch (c) {
        case '"': *o++ = '"'; break;
        case '\\': *o++ = '\\'; break;
        case '\b': *o++ = 'b'; break;
        case '\f': *o++ = 'f'; break;
        case '\n': *o++ = 'n'; break;
        case '\r': *o++ = 'r'; break;
        case '\t': *o++ = 't'; break;
        default:
            memcpy(o, "u00", 3);
            o[3] = hex[c >> 4];
            o[4] = hex[c & 15];
            o += 5;
        }
    }
    *o++ = '"';
    t->n = (size_t)(o - t->p);
}

static void put_integer(text *t, json_int_t v)
{
    char b[24], *e = b + sizeof b, *p = e;
    unsigned long long u = v < 0 ? 0ull - (unsigned long long)v : (unsigned long long)v;
    do
        *--p = (char)('0' + u % 10);
    while (u /= 10);
    if (v < 0)
        *--p = '-';
    put(t, p, (size_t)(e - p));
}

static void put_real(text *t, double v)
{
    char b[40];
    int n = snprintf(b, sizeof b, "%.17g", v);
    if (n <= 0 || (size_t)n >= sizeof b - 2)
        return;
    char *e = strchr(b, 'e');
    if (!e && !strchr(b, '.')) {
        memcpy(b + n, ".0", 3);
        n += 2;
    }
    if (e) { /* "1e+20" -> "1e20", "1e-07" -> "1e-7" */
        char *d = e + 1, *s = d;
        if (*s == '-')
            d = ++s;
        else if (*s == '+')
            s++;
        while (*s == '0' && s[1])
            s++;
        memmove(d, s, strlen(s) + 1);
        n = (int)strlen(b);
    }
    put(t, b, (size_t)n);
}

static void put_value(text *t, const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT: {
        const char *k;
        json_t *m;
        int first = 1;
        put(t, "{", 1);
        json_object_foreach((json_t *)v, k, m) {
            if (!first)
                put(t, ",", 1);
            first = 0;
            put_string(t, k, strlen(k));
            put(t, ":", 1);
            put_value(t, m);
        }
        put(t, "}", 1);
        break;
    }
    case JSON_ARRAY:
        put(t, "[", 1);
        for (size_t i = 0; i < json_array_size(v); i++) {
            if (i)
                put(t, ",", 1);
            put_value(t, json_array_get(v, i));
        }
        put(t, "]", 1);
        break;
    case JSON_STRING:
        put_string(t, json_string_value(v), json_string_length(v));
        break;
    case JSON_INTEGER:
        put_integer(t, json_integer_value(v));
        break;
    case JSON_REAL:
        put_real(t, json_real_value(v));
        break;
    case JSON_TRUE:
        put(t, "true", 4);
        break;
    case JSON_FALSE:
        put(t, "false", 5);
        break;
    case JSON_NULL:
        put(t, "null", 4);
        break;
    }
}

char *proto_json_text(const json_t *v, size_t *len)
{
    text t = {0};
    put_value(&t, v);
    if (t.oom || reserve(&t, 0)) {
        free(t.p);
        return NULL;
    }
    t.p[t.n] = 0;
    *len = t.n;
    return t.p;
}
