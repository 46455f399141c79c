/*
 * test_blas.c - unit tests of the daemon's rule for OpenBLAS kernels (server/blas.c):
 * Haswell is forced only on an AVX2 + FMA CPU where OpenBLAS chose kernels without
 * AVX2, never over a family with AVX2 kernels, and flags match as whole words.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "../../server/blas.h"

static const char *const AVX2_FMA = "flags\t\t: fpu vme sse sse2 avx fma avx2 bmi2\n";

static void falls_back_to_haswell(void **state)
{
    (void)state;
    assert_string_equal(blas_core_wanted(AVX2_FMA, "Prescott"), "Haswell");
    assert_string_equal(blas_core_wanted(AVX2_FMA, "SANDYBRIDGE"), "Haswell");
    assert_string_equal(blas_core_wanted("flags: avx2 fma", "Nehalem"), "Haswell");
}

static void keeps_avx2_families(void **state)
{
    (void)state;
    static const char *const good[] = {"Haswell", "Zen", "SkylakeX", "Cooperlake",
                                       "SapphireRapids", "SomeFutureCore"};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++)
        assert_null(blas_core_wanted(AVX2_FMA, good[i]));
}

static void needs_both_flags_as_words(void **state)
{
    (void)state;
    assert_null(blas_core_wanted("flags: sse avx2\n", "Prescott"));      /* no fma */
    assert_null(blas_core_wanted("flags: sse fma\n", "Prescott"));       /* no avx2 */
    assert_null(blas_core_wanted("flags: fma4 avx2x\n", "Prescott"));    /* prefixes only */
    assert_null(blas_core_wanted("flags: xfma avx512f\n", "Prescott"));
    assert_null(blas_core_wanted("", "Prescott"));
    assert_null(blas_core_wanted(NULL, "Prescott"));
    assert_null(blas_core_wanted(AVX2_FMA, NULL));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(falls_back_to_haswell),
        cmocka_unit_test(keeps_avx2_families),
        cmocka_unit_test(needs_both_flags_as_words),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
