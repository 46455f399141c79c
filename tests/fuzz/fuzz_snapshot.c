/*
 * fuzz_snapshot.c - libFuzzer target for kb_engine_restore, the parser of snapshot bytes.
 *
 * Any input must be either rejected with KB_ECORRUPT (or another KB_E* code) or restore
 * an engine that can be snapshotted again; nothing may crash, leak or read out of bounds.
 * The snapshot of a restored engine is a fixpoint: it restores, and the engine restored
 * from it snapshots to the same bytes. This holds for every format: a version 1 or 2
 * input's asks are recorded with the points the engine chose at its replay, and a version
 * 3 input's adopted asks are adopted again (kb_engine_ask_recorded), so a restore never
 * depends on how often the study was restored before. Only running out of memory may
 * break the chain: a fit record is logged again where the replay applied it, and one it
 * never reached is dropped from the first restore's snapshot on. The corpus in
 * tests/fuzz/corpus/fuzz_snapshot/ holds valid snapshots (formats 2 to 5; format 4 with a
 * log-scale integer coordinate, format 5 with fit records) as seeds.
 */
#include "kbandit.h"

#include <stdlib.h>
#include <string.h>

/* The snapshot of the engine restored from bytes[0..len), in *out; 0 when none was made
 * (restore refused, or memory ran out). */
static size_t round_trip(const unsigned char *bytes, size_t len, unsigned char **out,
                         int *nomem)
{
    kb_error err;
    size_t n = 0;
    *out = NULL;
    kb_engine *e = kb_engine_restore(bytes, len, &err);
    if (!e) {
        *nomem = err.code == KB_ENOMEM;
        return 0;
    }
    if (kb_engine_snapshot(e, out, &n, &err) != KB_OK) {
        *nomem = 1;
        n = 0;
    }
    kb_engine_free(e);
    return n;
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
    unsigned char *s1, *s2;
    int nomem = 0;
    size_t n1 = round_trip(data, size, &s1, &nomem);
    if (!n1)
        return 0;
    size_t n2 = round_trip(s1, n1, &s2, &nomem);
    if (!nomem && (n2 != n1 || memcmp(s1, s2, n1) != 0))
        abort(); /* a restored engine's snapshot is not a fixpoint */
    free(s1);
    free(s2);
    return 0;
}
