/*
 * bodymem.c - This file contains the memory budget of request bodies declared in
 * bodymem.h.
 *
 * Invariant: held is the sum of the reservations granted and not yet given back. A
 * refused reservation is added and taken back at once, so a concurrent one may see the
 * sum above its true value for that instant and be refused too: refusals err on the
 * safe side, and both clients retry.
 */
#include "bodymem.h"

#include <stdatomic.h>

static size_t budget;               /* set before the threads start, read-only after */
static atomic_size_t held;
static atomic_ullong refused;

void bodymem_init(size_t b) { budget = b; }

int bodymem_take(size_t bytes, size_t own)
{
    size_t before = atomic_fetch_add(&held, bytes);
    if (budget == 0 || before - own < budget)
        return 0;
    atomic_fetch_sub(&held, bytes);
    return -1;
}

void bodymem_note_refusal(void) { atomic_fetch_add(&refused, 1); }

void bodymem_give(size_t bytes) { atomic_fetch_sub(&held, bytes); }

size_t bodymem_held(void) { return atomic_load(&held); }

unsigned long long bodymem_refused(void) { return atomic_load(&refused); }

size_t bodymem_budget(void) { return budget; }
