/*
 * rng.c - the deterministic random number generator: xoshiro256** seeded by splitmix64
 * (Blackman and Vigna, "Scrambled linear pseudorandom number generators", 2021).
 *
 * The state is the four words of kb_rng and nothing else: the normal sampler keeps no
 * cached second value, so copying the struct captures the generator completely.
 */
#include "internal.h"

#include <math.h>

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static inline uint64_t rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

void kb_rng_seed(kb_rng *rng, uint64_t seed)
{
    uint64_t x = seed;
    for (int i = 0; i < 4; i++)
        rng->s[i] = splitmix64(&x);
}

uint64_t kb_rng_u64(kb_rng *rng)
{
    uint64_t *s = rng->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

double kb_rng_uniform(kb_rng *rng)
{
    return (double)(kb_rng_u64(rng) >> 11) * 0x1.0p-53;
}

uint64_t kb_rng_below(kb_rng *rng, uint64_t n)
{
    /* Rejection on the top of the range removes modulo bias. */
    uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    uint64_t r;
    do
        r = kb_rng_u64(rng);
    while (r >= limit);
    return r % n;
}

double kb_rng_normal(kb_rng *rng)
{
    /* Box-Muller, one value per call so the state stays four words. */
    double u1 = 1.0 - kb_rng_uniform(rng); /* (0, 1] */
    double u2 = kb_rng_uniform(rng);
    return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}
