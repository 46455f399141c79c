/*
 * csv.h - RFC 4180 CSV as kbandit writes it: one quoted field. (The reader is behind
 * proto_candidates_csv_parse in proto.h; both live in csv.c.)
 *
 * Invariant: a string written by csv_put_string reads back, through the reader, as
 * exactly the same bytes (commas, quotes, line breaks and blanks included).
 */
#ifndef KB_CSV_H
#define KB_CSV_H

#include <stdio.h>

/* Writes s as one quoted field: "..." with every " doubled. */
void csv_put_string(FILE *f, const char *s);

#endif
