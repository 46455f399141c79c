/*
 * test_acq.c - unit tests of core/src/acq.c, the refinement of box pool points on the
 * fitted GP's UCB: the value against a dense posterior (tu_exact_posterior), the gradient
 * against central finite differences for every stationary kernel with ARD lengthscales,
 * and refinement that stays in the unit cube, never lowers the UCB and is deterministic.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../../core/src/internal.h"
#include "util/testutil.h"

enum { N = 30, D = 3 };
static const double NOISE = 0.01, WIDTH = 2.0;

static void data(kb_rng *rng, double *U, double *y)
{
    for (size_t i = 0; i < N; i++) {
        for (size_t j = 0; j < D; j++)
            U[i * D + j] = kb_rng_uniform(rng);
        y[i] = sin(5 * U[i * D]) * cos(3 * U[i * D + 1]) + U[i * D + 2];
    }
}

static void ucb_matches_dense_and_gradient_matches_differences(void **state)
{
    (void)state;
    kb_kernel_kind kinds[] = {KB_KERNEL_RBF, KB_KERNEL_MATERN12, KB_KERNEL_MATERN32,
                              KB_KERNEL_MATERN52};
    kb_rng rng;
    kb_rng_seed(&rng, 3);
    double U[N * D], y[N], ls[D] = {0.3, 0.6, 1.7};
    data(&rng, U, y);
    for (size_t t = 0; t < sizeof kinds / sizeof kinds[0]; t++) {
        kb_kernel *k = tu_kernel_with(kinds[t], D, 1.3, ls);
        for (int p = 0; p < 5; p++) {
            double x[D], g[D], mean, var;
            for (size_t j = 0; j < D; j++)
                x[j] = kb_rng_uniform(&rng);
            double u = kb__acq_ucb_at(k, NOISE, U, y, N, WIDTH, x, g);
            assert_int_equal(tu_exact_posterior(k, U, y, N, NOISE, x, 1, &mean, &var), 0);
            assert_true(fabs(u - (mean + WIDTH * sqrt(var))) < 1e-9 * (1 + fabs(u)));
            for (size_t j = 0; j < D; j++) {
                double h = 1e-6, xp[D], xm[D];
                memcpy(xp, x, sizeof xp);
                memcpy(xm, x, sizeof xm);
                xp[j] += h;
                xm[j] -= h;
                double fd = (kb__acq_ucb_at(k, NOISE, U, y, N, WIDTH, xp, NULL) -
                             kb__acq_ucb_at(k, NOISE, U, y, N, WIDTH, xm, NULL)) / (2 * h);
                if (fabs(fd - g[j]) > 1e-5 * (1 + fabs(fd)))
                    fail_msg("kernel %zu point %d x[%zu]: gradient %.10g, differences %.10g", t,
                             p, j, g[j], fd);
            }
        }
        kb_kernel_free(k);
    }
}

static void refinement_climbs_inside_the_cube(void **state)
{
    (void)state;
    kb_rng rng;
    kb_rng_seed(&rng, 8);
    double U[N * D], y[N], ls[D] = {0.2, 0.4, 0.8};
    data(&rng, U, y);
    kb_kernel *k = tu_kernel_with(KB_KERNEL_MATERN52, D, 1.0, ls);
    enum { M = 6 };
    double P[M * D], Q[M * D], before[M];
    for (size_t i = 0; i < M * D; i++)
        P[i] = i < D ? 0.0 : i < 2 * D ? 1.0 : kb_rng_uniform(&rng); /* two corners */
    for (size_t p = 0; p < M; p++)
        before[p] = kb__acq_ucb_at(k, NOISE, U, y, N, WIDTH, P + p * D, NULL);
    memcpy(Q, P, sizeof Q);
    assert_int_equal(kb__acq_refine(k, NOISE, U, y, N, WIDTH, P, M), KB_OK);
    assert_int_equal(kb__acq_refine(k, NOISE, U, y, N, WIDTH, Q, M), KB_OK);
    assert_memory_equal(P, Q, sizeof P);
    int moved = 0;
    for (size_t p = 0; p < M; p++) {
        for (size_t j = 0; j < D; j++)
            assert_true(P[p * D + j] >= 0.0 && P[p * D + j] <= 1.0);
        double after = kb__acq_ucb_at(k, NOISE, U, y, N, WIDTH, P + p * D, NULL);
        assert_true(after >= before[p]);
        moved += after > before[p] + 1e-6;
    }
    assert_true(moved >= M / 2);
    kb_kernel_free(k);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(ucb_matches_dense_and_gradient_matches_differences),
        cmocka_unit_test(refinement_climbs_inside_the_cube),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
