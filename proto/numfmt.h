/*
 * numfmt.h - doubles rendered as the shortest decimal that reads back to the same
 * double, in JSON documents and CSV fields.
 *
 * Invariant: for every finite v, strtod(kb_format_double(v)) == v bit for bit, and no
 * shorter %.Ng rendering (N = 15, 16; for a subnormal v any N >= 1) would read back; JSON reals stay reals (a '.' or
 * an exponent is kept, "2.0" not "2") so a reader's types do not change.
 */
#ifndef KB_NUMFMT_H
#define KB_NUMFMT_H

#include <jansson.h>
#include <stddef.h>

/* Room for any double at %.17g plus a ".0" suffix. */
#define KB_DOUBLE_BUF 32

/* Writes the shortest round-trip rendering of v into buf (KB_DOUBLE_BUF bytes). */
const char *kb_format_double(char buf[KB_DOUBLE_BUF], double v);

/* The same rendering found by printf alone (up to three %.Ng prints, each read back by
 * strtod): what kb_format_double reproduces faster; for benchmarks. */
const char *kb_format_double_printf(char buf[KB_DOUBLE_BUF], double v);

/* json_dumps with every real printed at its shortest round-trip form; free() the
 * result. NULL when json_dumps fails. */
char *kb_json_dumps(const json_t *doc, size_t flags);

#endif
