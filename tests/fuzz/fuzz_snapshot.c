/*
 * fuzz_snapshot.c - libFuzzer target for kb_engine_restore, the parser of snapshot bytes.
 *
 * Any input must be either rejected with KB_ECORRUPT (or another KB_E* code) or restore
 * an engine that can be snapshotted again; nothing may crash, leak or read out of bounds.
 * The corpus in tests/fuzz/corpus/fuzz_snapshot/ holds valid snapshots as seeds.
 */
#include "kbandit.h"

#include <stdlib.h>

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
    kb_error err;
    kb_engine *e = kb_engine_restore(data, size, &err);
    if (!e)
        return 0;
    unsigned char *bytes = NULL;
    size_t len = 0;
    if (kb_engine_snapshot(e, &bytes, &len, &err) == KB_OK)
        free(bytes);
    kb_engine_free(e);
    return 0;
}
