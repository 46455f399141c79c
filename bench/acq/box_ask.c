/*
 * box_ask.c - This file contains kb-box-ask, which measures in-process what a box
 * study's round trips cost an engine, beside the quality they reach: an engine (bbkb by
 * default, everything else at defaults) on a box of --dim floats keeps --pending trials
 * out, as --pending clients would, and tells the oldest one -sum_j (x_j - 0.3)^2 of its
 * point (bench/load/kb_load.c's objective; maximum 0), plus N(0, --noise^2) drawn from a
 * generator seeded by --seed (kb-load's KB_LOAD_NOISE), before asking again. An ask the
 * engine answers with no trial (a closed batch waiting for feedback) is counted and the
 * next trial is told. With --batch 1 it tells all --pending trials in a row instead (a
 * worker pool's batch tell, POST .../tell with many items) before asking again. Every
 * --every tells it prints one JSON line: the thread's CPU time
 * per round trip over those tells, the engine's epochs, dictionary size, draws the growth
 * cap subsampled (dict_capped), fitted noise, cumulative timers, epochs started with bounded
 * variances and the candidates those resolved exactly (kb_engine_stat), the
 * simple regret so far (of the noiseless objective at the points told) and, where the
 * engine fits them, its kernel variance and lengthscales.
 *
 *   kb-box-ask [--engine bbkb] [--dim 6] [--trials 750] [--pending 32] [--every 250]
 *              [--pool 2048] [--seed 1] [--noise 0] [--set NAME=NUMBER] [--batch 0|1]
 *
 * --set sets one numeric engine option, to compare settings on the same call sequence.
 *
 * Run with OPENBLAS_NUM_THREADS=1: CPU time of this thread is then the engine's cost.
 * Engine internals (the fitted noise) come from libkbandit.a, as in the unit tests.
 */
#include "../../core/src/internal.h"
#include "cpu_time.h"

#include <malloc.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_PENDING = 4096 };

static struct {
    const char *engine;
    size_t dim, trials, pending, every, pool, batch;
    uint64_t seed;
    double noise;    /* sd of the noise added to told values */
    const char *set; /* NAME=NUMBER, or NULL */
} opt = {"bbkb", 6, 750, 32, 250, 2048, 0, 1, 0.0, NULL};

static kb_engine *make_engine(kb_error *err)
{
    kb_space *sp = kb_space_new_box(opt.dim, opt.pool, err);
    kb_config *cfg = sp ? kb_config_new(opt.engine, err) : NULL;
    kb_engine *e = NULL;
    int rc = cfg ? kb_config_set_number(cfg, "seed", (double)opt.seed, err) : KB_EINVAL;
    if (!rc && opt.set) {
        const char *eq = strchr(opt.set, '=');
        char name[64];
        snprintf(name, sizeof name, "%.*s", (int)(eq - opt.set), opt.set);
        rc = kb_config_set_number(cfg, name, strtod(eq + 1, NULL), err);
    }
    if (!rc)
        e = kb_engine_create(cfg, sp, err);
    kb_space_free(sp);
    kb_config_free(cfg);
    return e;
}

static void report(const kb_engine *e, size_t told, double cpu_s, size_t empty, double best)
{
    double epoch, dict_size, capped, rows, embed, resparsify, fit, ask, bounded, resolved;
    /* 0 where the engine has none */
    kb_engine_stat(e, "epoch", &epoch, NULL);
    kb_engine_stat(e, "epochs_bounded", &bounded, NULL);
    kb_engine_stat(e, "bound_resolved", &resolved, NULL);
    kb_engine_stat(e, "dict_size", &dict_size, NULL);
    kb_engine_stat(e, "dict_capped", &capped, NULL);
    kb_engine_stat(e, "model_rows", &rows, NULL);
    kb_engine_stat(e, "sec_embed", &embed, NULL);
    kb_engine_stat(e, "sec_resparsify", &resparsify, NULL);
    kb_engine_stat(e, "sec_fit", &fit, NULL);
    kb_engine_stat(e, "sec_ask", &ask, NULL);
    printf("{\"bench\":\"box_ask\",\"engine\":\"%s\",\"dim\":%zu,\"pool\":%zu,\"pending\":%zu,"
           "\"seed\":%llu,\"told\":%zu,\"cpu_ms_per_round_trip\":%.3f,\"epochs\":%llu,"
           "\"dict_size\":%zu,\"dict_capped\":%zu,\"model_rows\":%zu,\"noise\":%.3g,"
           "\"sec_embed\":%.3f,\"sec_resparsify\":%.3f,\"sec_fit\":%.3f,"
           "\"sec_ask\":%.3f,\"empty_asks\":%zu,\"epochs_bounded\":%zu,"
           "\"bound_resolved\":%zu,\"simple_regret\":%.3g",
           opt.engine, opt.dim, opt.pool, opt.pending, (unsigned long long)opt.seed, told,
           cpu_s * 1e3 / (double)opt.every, (unsigned long long)epoch, (size_t)dict_size,
           (size_t)capped, (size_t)rows, e->noise, embed, resparsify, fit, ask, empty,
           (size_t)bounded, (size_t)resolved, -best);
    kb_hyperparameters h;
    if (kb_engine_hyperparameters(e, &h) == KB_OK && h.fitting) {
        printf(",\"kernel_variance\":%.3g,\"lengthscales\":[", h.kernel_variance);
        for (size_t j = 0; j < h.dim; j++)
            printf("%s%.3g", j ? "," : "", h.lengthscales[j]);
        printf("]");
    }
    printf("}\n");
    fflush(stdout); /* a run stopped by a time limit keeps the blocks it finished */
}

/* Asks until `pending` trials are out or the engine hands out none. */
static int fill(kb_engine *e, uint64_t *out, size_t *n, size_t *empty, kb_error *err)
{
    while (*n < opt.pending) {
        kb_point p;
        kb_ask_result res;
        if (kb_engine_ask(e, 1, &p, &res, err) != KB_OK)
            return -1;
        if (res.n == 0) {
            ++*empty;
            break;
        }
        out[(*n)++] = p.handle;
    }
    return 0;
}

/* Tells out[0] the objective at its point plus noise, and drops it from out. */
static int tell_oldest(kb_engine *e, uint64_t *out, size_t *n, kb_rng *noise_rng, double *best,
                       kb_error *err)
{
    kb_point q;
    kb_trial_state ts;
    kb_engine_trial(e, out[0], &q, &ts);
    double v = 0.0;
    for (size_t j = 0; j < opt.dim; j++)
        v -= (q.x[j] - 0.3) * (q.x[j] - 0.3);
    double told_v = v + (opt.noise > 0.0 ? opt.noise * kb_rng_normal(noise_rng) : 0.0);
    int failed = kb_engine_tell(e, out[0], told_v, err) != KB_OK;
    memmove(out, out + 1, --*n * sizeof *out);
    *best = v > *best ? v : *best;
    return failed;
}

/* a whole string in strtod's syntax */
static int is_number(const char *v)
{
    char *end;
    strtod(v, &end);
    return end != v && !*end;
}

/* NAME=NUMBER */
static int is_setting(const char *v)
{
    const char *eq = strchr(v, '=');
    return eq && eq != v && is_number(eq + 1);
}

static int parse(int argc, char **argv)
{
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *k = argv[i], *v = argv[i + 1];
        size_t u = strtoul(v, NULL, 10);
        if (!strcmp(k, "--engine")) opt.engine = v;
        else if (!strcmp(k, "--dim")) opt.dim = u;
        else if (!strcmp(k, "--trials")) opt.trials = u;
        else if (!strcmp(k, "--pending")) opt.pending = u;
        else if (!strcmp(k, "--every")) opt.every = u;
        else if (!strcmp(k, "--pool")) opt.pool = u;
        else if (!strcmp(k, "--batch")) opt.batch = u;
        else if (!strcmp(k, "--seed")) opt.seed = u;
        else if (!strcmp(k, "--noise") && is_number(v)) opt.noise = strtod(v, NULL);
        else if (!strcmp(k, "--set") && is_setting(v)) opt.set = v;
        else return -1;
    }
    return opt.dim && opt.dim <= KB_MAX_DIM && opt.pending && opt.pending <= MAX_PENDING &&
                   opt.every && opt.trials && opt.noise >= 0.0 ? 0 : -1;
}

int main(int argc, char **argv)
{
    if (parse(argc, argv))
        return fprintf(stderr, "usage: kb-box-ask [--engine E] [--dim D] [--trials T] "
                               "[--pending 1..%d] [--every K] [--pool N] [--seed S] "
                               "[--noise SD] [--set NAME=NUMBER] [--batch 0|1]\n",
                       MAX_PENDING), 2;
    /* the daemon's malloc settings (server/main.c, keep_freed_scratch), so that the CPU
     * per round trip here is what kbanditd pays */
    mallopt(M_MMAP_THRESHOLD, 16 << 20);
    mallopt(M_TRIM_THRESHOLD, 16 << 20);
    kb_error err = {0};
    kb_engine *e = make_engine(&err);
    uint64_t out[MAX_PENDING];
    size_t n = 0, empty = 0, told = 0;
    double best = -INFINITY, t0 = cpu_now();
    kb_rng noise_rng; /* apart from the engine's: its draws do not depend on the engine */
    kb_rng_seed(&noise_rng, opt.seed ^ 0x6e6f697365ULL);
    int failed = !e;
    while (!failed && told < opt.trials) {
        failed = fill(e, out, &n, &empty, &err) != 0;
        if (failed || n == 0)
            break;
        size_t k = opt.batch ? n : 1; /* the whole batch, or the oldest trial */
        for (size_t i = 0; !failed && i < k && told < opt.trials; i++) {
            failed = tell_oldest(e, out, &n, &noise_rng, &best, &err);
            if (!failed && ++told % opt.every == 0) {
                report(e, told, cpu_now() - t0, empty, best);
                t0 = cpu_now();
            }
        }
    }
    if (failed)
        fprintf(stderr, "kb-box-ask: %s\n", err.message);
    else if (told < opt.trials)
        fprintf(stderr, "kb-box-ask: the engine handed out nothing after %zu tells\n", told);
    kb_engine_free(e);
    return failed || told < opt.trials;
}
