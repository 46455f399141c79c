/*
 * kb_bench.c - kb-bench, the benchmark driver: runs one engine on one problem
 * (problems.c) through libkbandit in-process and prints one JSON line of results.
 *
 *   kb-bench --engine NAME [--set key=value ...] --problem P [--data PATH] [--A N]
 *            [--d D] --T N [--seed S] [--workers W] [--mode sync|async] [--noise SD]
 *            [--problem-kernel K] [--problem-lengthscale L] [--curve N] [--dump PATH]
 *
 * Simulation. sync: ask for up to W points (W = 0: as many as the engine gives before it
 * waits), evaluate them all, tell them all, repeat until T evaluations. async: W workers;
 * each evaluation lasts an Exp(1) time (seeded); a worker that finishes tells, then asks;
 * a worker that gets no point idles until the next tell. Idle time is counted in
 * worker-time units.
 *
 * Metrics: regret_ratio = cumulative regret / (T (f* - mean f)) on the noiseless f (1 is
 * uniform random), simple_regret = f* - max f over evaluated points; batches are the
 * points handed out per engine epoch (kb_engine_stat "epoch"; an engine without epochs has
 * batches of 1); ask_us_mean averages the wall time of asks that neither started an
 * epoch nor spent time in a resparsification (i.e. in-batch asks).
 * --curve N adds "curve": one entry per window of N evaluations (the last may be
 * shorter), {t: evaluations at the window's end, ask_ms: wall time of the asks that
 * handed out the window's points per point, tell_ms: wall time of its tells per tell,
 * ask_cpu_ms, tell_cpu_ms: the same in process CPU time (robust to a loaded machine),
 * regret_ratio: the window's regret ratio}. An ask call is charged to the window of
 * its first point, the k-th tell to the window of the k-th evaluation.
 * --dump PATH writes the problem (the candidates and their noiseless f, after the
 * constructor's rescaling) to PATH as CSV and runs nothing: a first line
 * "# noise_sd=SD noise_uniform=W" (the noise the run would add: N(0, SD^2), or U(-W, W)
 * when W > 0), then one row x_1..x_d,f per candidate, for peers outside the library
 * (bench/finite_peer.py) to run on the very same problem.
 * Exit status: 0, or 2 for bad arguments / configuration (the kb_error is printed).
 */
#include "problems.h"

#include <libgen.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

typedef struct opts {
    const char *engine, *problem, *mode, *dump;
    const char *sets[128];
    size_t n_sets, T, W, curve;
    uint64_t seed;
    double noise;
    bench_args pa;
} opts;

typedef struct run {
    kb_engine *e;
    const bench_problem *p;
    kb_rng noise_rng;
    double noise;
    size_t evals, told;
    double cum_regret, best_f, fstar;
    /* batches: points per epoch, in epoch order */
    uint64_t last_epoch;
    size_t *batch, n_batch, cap_batch, *batch_start;
    double dict_sum, dict_max;
    size_t dict_n;
    double ask_us_sum;
    size_t ask_us_n;
    /* --curve: window length (0: off) and per-window sums, ceil(T / window) each */
    size_t window, n_windows;
    double *w_ask_s, *w_tell_s, *w_ask_cpu, *w_tell_cpu, *w_regret;
    size_t *w_points, *w_tells, *w_dict;
} run;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* CPU seconds of the process: the run's own work, whatever else loads the machine (with
 * OPENBLAS_NUM_THREADS=1 the process has one busy thread). */
static double cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void die(const char *what, const kb_error *err)
{
    if (err)
        fprintf(stderr, "kb-bench: %s: %s (field '%s'): %s\n", what, kb_strerror(err->code),
                err->field, err->message);
    else
        fprintf(stderr, "kb-bench: %s\n", what);
    exit(2);
}

static void usage(void)
{
    fprintf(stderr,
            "usage: kb-bench --engine NAME [--set key=value ...] --problem P [--data PATH]\n"
            "       [--A N] [--d D] --T N [--seed S] [--workers W] [--mode sync|async]\n"
            "       [--noise SD] [--problem-kernel K] [--problem-lengthscale L] [--curve N]\n"
            "       [--dump PATH]\n"
            "problems:");
    for (const bench_problem_entry *p = bench_problems; p->name; p++)
        fprintf(stderr, " %s", p->name);
    fprintf(stderr, "\n");
    exit(2);
}

static size_t parse_size(const char *flag, const char *v)
{
    char *end;
    double x = strtod(v, &end);
    if (*end || x < 0 || x != floor(x)) {
        fprintf(stderr, "kb-bench: %s wants a non-negative integer, got '%s'\n", flag, v);
        exit(2);
    }
    return (size_t)x;
}

/* The repository root: the directory above the one holding this executable. */
static void repo_root(char *out, size_t len)
{
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) {
        snprintf(out, len, ".");
        return;
    }
    exe[n] = 0;
    snprintf(out, len, "%s/..", dirname(exe));
}

static void parse_args(int argc, char **argv, opts *o)
{
    static char root[PATH_MAX];
    memset(o, 0, sizeof *o);
    o->mode = "sync";
    o->W = 1;
    o->noise = 0.01;
    repo_root(root, sizeof root);
    o->pa.root = root;
    for (int i = 1; i < argc; i++) {
        const char *f = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v)
            usage();
        i++;
        if (!strcmp(f, "--engine")) o->engine = v;
        else if (!strcmp(f, "--problem")) o->problem = v;
        else if (!strcmp(f, "--data")) o->pa.data = v;
        else if (!strcmp(f, "--A")) o->pa.A = parse_size(f, v);
        else if (!strcmp(f, "--d")) o->pa.d = parse_size(f, v);
        else if (!strcmp(f, "--T")) o->T = parse_size(f, v);
        else if (!strcmp(f, "--seed")) o->seed = parse_size(f, v);
        else if (!strcmp(f, "--workers")) o->W = parse_size(f, v);
        else if (!strcmp(f, "--mode")) o->mode = v;
        else if (!strcmp(f, "--noise")) o->noise = strtod(v, NULL);
        else if (!strcmp(f, "--problem-kernel")) o->pa.kernel = v;
        else if (!strcmp(f, "--problem-lengthscale")) o->pa.lengthscale = strtod(v, NULL);
        else if (!strcmp(f, "--curve")) o->curve = parse_size(f, v);
        else if (!strcmp(f, "--dump")) o->dump = v;
        else if (!strcmp(f, "--set") && o->n_sets < 128) o->sets[o->n_sets++] = v;
        else usage();
    }
    if (!o->problem || (!o->dump && (!o->engine || !o->T)))
        usage();
    if (strcmp(o->mode, "sync") && strcmp(o->mode, "async"))
        die("--mode must be sync or async", NULL);
    if (!strcmp(o->mode, "async") && o->W == 0)
        die("--mode async needs --workers >= 1", NULL);
    if (!(o->noise >= 0))
        die("--noise must be >= 0", NULL);
    o->pa.seed = o->seed;
}

/* The option's type from the engine's and the common tables, or -1 if unknown. */
static int option_type(const char *engine, const char *name)
{
    const kb_option_spec *tabs[2] = {kb_common_options(), kb_engine_options(engine)};
    for (int t = 0; t < 2; t++)
        for (const kb_option_spec *s = tabs[t]; s && s->name; s++)
            if (!strcmp(s->name, name))
                return (int)s->type;
    return -1;
}

/* --set key=value through kb_config_set_*; unknown names reach the config so that its
 * error (field + message) is what the user sees. */
static void apply_set(kb_config *cfg, const char *engine, const char *kv)
{
    kb_error err;
    char key[128];
    const char *eq = strchr(kv, '=');
    if (!eq || (size_t)(eq - kv) >= sizeof key)
        die("--set wants key=value", NULL);
    memcpy(key, kv, (size_t)(eq - kv));
    key[eq - kv] = 0;
    const char *val = eq + 1;
    int type = option_type(engine, key), rc;
    char *end;
    if (type == KB_OPT_STRING) {
        rc = kb_config_set_string(cfg, key, val, &err);
    } else if (type == KB_OPT_VECTOR) {
        double v[256];
        size_t n = 0;
        for (const char *p = val; n < 256; p = end + 1) {
            v[n++] = strtod(p, &end);
            if (end == p || (*end && *end != ','))
                die("--set: vectors are comma-separated numbers", NULL);
            if (!*end)
                break;
        }
        rc = kb_config_set_vector(cfg, key, v, n, &err);
    } else {
        double x = strtod(val, &end);
        if (type >= 0 && (end == val || *end)) {
            rc = kb_config_set_string(cfg, key, val, &err); /* let the config explain */
        } else {
            rc = kb_config_set_number(cfg, key, x, &err);
        }
    }
    if (rc)
        die("--set", &err);
}

/* The problem's prescribed settings ("k=v k=v"), each only where the engine has k. */
static void apply_problem_settings(kb_config *cfg, const char *engine, const char *settings)
{
    char buf[sizeof ((bench_problem *)0)->settings];
    snprintf(buf, sizeof buf, "%s", settings);
    for (char *save = NULL, *kv = strtok_r(buf, " ", &save); kv; kv = strtok_r(NULL, " ", &save)) {
        char key[128];
        size_t n = strcspn(kv, "=");
        if (n >= sizeof key)
            continue;
        memcpy(key, kv, n);
        key[n] = 0;
        if (option_type(engine, key) >= 0)
            apply_set(cfg, engine, kv);
    }
}

/* ------------------------------------------------------------ bookkeeping */

/* The engine's figure `name`; 0 for one it does not have, which the output reads as
 * "not applicable" (no epochs, no dictionary, not timed). */
static double figure(const kb_engine *e, const char *name)
{
    double v;
    kb_engine_stat(e, name, &v, NULL);
    return v;
}

static void note_points(run *r, size_t npts)
{
    double dict_size = figure(r->e, "dict_size");
    uint64_t epoch = (uint64_t)figure(r->e, "epoch");
    if (dict_size) {
        r->dict_sum += dict_size;
        r->dict_n++;
        r->dict_max = dict_size > r->dict_max ? dict_size : r->dict_max;
    }
    for (size_t i = 0; i < npts; i++) {
        /* a new batch for each point of an epoch-less engine, else on epoch change */
        int fresh = r->n_batch == 0 || epoch == 0 || epoch != r->last_epoch;
        r->last_epoch = epoch;
        if (fresh) {
            if (r->n_batch == r->cap_batch) {
                r->cap_batch = r->cap_batch ? 2 * r->cap_batch : 256;
                r->batch = realloc(r->batch, r->cap_batch * sizeof *r->batch);
                r->batch_start = realloc(r->batch_start, r->cap_batch * sizeof *r->batch);
                if (!r->batch || !r->batch_start)
                    die("out of memory", NULL);
            }
            r->batch[r->n_batch] = 0;
            r->batch_start[r->n_batch++] = r->evals + i;
        }
        r->batch[r->n_batch - 1]++;
    }
}

/* The --curve window of the k-th evaluation (0-based), or -1 when there is no curve. */
static long window_of(const run *r, size_t k)
{
    if (!r->window)
        return -1;
    size_t w = k / r->window;
    return (long)(w < r->n_windows ? w : r->n_windows - 1);
}

static void curve_alloc(run *r, size_t T, size_t window)
{
    if (!window)
        return;
    r->window = window;
    r->n_windows = (T + window - 1) / window;
    r->w_ask_s = calloc(r->n_windows, sizeof *r->w_ask_s);
    r->w_tell_s = calloc(r->n_windows, sizeof *r->w_tell_s);
    r->w_ask_cpu = calloc(r->n_windows, sizeof *r->w_ask_cpu);
    r->w_tell_cpu = calloc(r->n_windows, sizeof *r->w_tell_cpu);
    r->w_regret = calloc(r->n_windows, sizeof *r->w_regret);
    r->w_points = calloc(r->n_windows, sizeof *r->w_points);
    r->w_tells = calloc(r->n_windows, sizeof *r->w_tells);
    r->w_dict = calloc(r->n_windows, sizeof *r->w_dict);
    if (!r->w_ask_s || !r->w_tell_s || !r->w_ask_cpu || !r->w_tell_cpu || !r->w_regret ||
        !r->w_points || !r->w_tells || !r->w_dict)
        die("out of memory", NULL);
}

/* One timed ask of up to n points. */
static size_t timed_ask(run *r, size_t n, kb_point *pts, kb_ask_result *res)
{
    kb_error err;
    double epoch = figure(r->e, "epoch"), resparsify = figure(r->e, "sec_resparsify");
    double t0 = now(), c0 = cpu_now();
    if (kb_engine_ask(r->e, n, pts, res, &err))
        die("ask", &err);
    double dt = now() - t0, dc = cpu_now() - c0;
    if (res->n && figure(r->e, "epoch") == epoch &&
        figure(r->e, "sec_resparsify") == resparsify) {
        r->ask_us_sum += 1e6 * dt;
        r->ask_us_n++;
    }
    note_points(r, res->n);
    long w0 = window_of(r, r->evals);
    if (w0 >= 0 && res->n) {
        r->w_ask_s[w0] += dt;
        r->w_ask_cpu[w0] += dc;
        r->w_dict[window_of(r, r->evals + res->n - 1)] = (size_t)figure(r->e, "dict_size");
    }
    for (size_t i = 0; i < res->n; i++) {
        double f = r->p->f[pts[i].index];
        r->cum_regret += r->fstar - f;
        r->best_f = f > r->best_f ? f : r->best_f;
        long w = window_of(r, r->evals + i);
        if (w >= 0) {
            r->w_regret[w] += r->fstar - f;
            r->w_points[w]++;
        }
    }
    r->evals += res->n;
    return res->n;
}

static void tell(run *r, const kb_point *pt)
{
    kb_error err;
    double w = r->p->noise_uniform;
    double eps = w > 0 ? w * (2.0 * kb_rng_uniform(&r->noise_rng) - 1.0)
                       : r->noise * kb_rng_normal(&r->noise_rng);
    double y = r->p->f[pt->index] + eps;
    double t0 = now(), c0 = cpu_now();
    if (kb_engine_tell(r->e, pt->handle, y, &err))
        die("tell", &err);
    double dt = now() - t0, dc = cpu_now() - c0;
    long win = window_of(r, r->told);
    if (win >= 0) {
        r->w_tell_s[win] += dt;
        r->w_tell_cpu[win] += dc;
        r->w_tells[win]++;
    }
    r->told++;
}

/* ------------------------------------------------------------ simulations */

static void simulate_sync(run *r, size_t T, size_t W)
{
    kb_point *pts = malloc((W ? W : T) * sizeof *pts);
    if (!pts)
        die("out of memory", NULL);
    while (r->evals < T) {
        kb_ask_result res;
        size_t want = T - r->evals;
        if (W && want > W)
            want = W;
        size_t got = timed_ask(r, want, pts, &res);
        for (size_t i = 0; i < got; i++)
            tell(r, &pts[i]);
        if (got == 0 && res.status == KB_ASK_EXHAUSTED)
            break;
        if (got == 0 && res.status == KB_ASK_AWAIT_FEEDBACK)
            die("engine waits for feedback with nothing pending", NULL);
    }
    free(pts);
}

typedef struct worker {
    int busy;
    double done_at, idle_since;
    kb_point pt;
} worker;

/* Returns the idle fraction: idle worker-time over W times the makespan. */
static double simulate_async(run *r, size_t T, size_t W, kb_rng *clock_rng)
{
    worker *w = calloc(W, sizeof *w);
    if (!w)
        die("out of memory", NULL);
    double t = 0.0, idle = 0.0;
    for (;;) {
        /* every idle worker asks (in worker order) while evaluations remain */
        for (size_t i = 0; i < W && r->evals < T; i++) {
            if (w[i].busy)
                continue;
            kb_ask_result res;
            if (timed_ask(r, 1, &w[i].pt, &res) == 0) {
                if (res.status == KB_ASK_EXHAUSTED)
                    T = r->evals; /* nothing left to hand out */
                break;      /* later idle workers would get nothing either */
            }
            idle += t - w[i].idle_since;
            w[i].busy = 1;
            w[i].done_at = t - log(1.0 - kb_rng_uniform(clock_rng));
        }
        size_t next = W;
        for (size_t i = 0; i < W; i++)
            if (w[i].busy && (next == W || w[i].done_at < w[next].done_at))
                next = i;
        if (next == W) {
            if (r->evals < T)
                die("engine waits for feedback with nothing pending", NULL);
            break;
        }
        t = w[next].done_at;
        tell(r, &w[next].pt);
        w[next].busy = 0;
        w[next].idle_since = t;
    }
    for (size_t i = 0; i < W; i++)
        idle += t - w[i].idle_since; /* idle from its last tell to the end */
    free(w);
    return t > 0 ? idle / ((double)W * t) : 0.0;
}

/* ---------------------------------------------------------------- output */

static void batch_summary(const run *r, size_t T, double *mean, double *max, double *m1,
                          double *m2)
{
    double s = 0, s1 = 0, s2 = 0;
    size_t n1 = 0, n2 = 0;
    *max = 0;
    for (size_t i = 0; i < r->n_batch; i++) {
        double b = (double)r->batch[i];
        s += b;
        *max = b > *max ? b : *max;
        if (r->batch_start[i] < T / 2) {
            s1 += b;
            n1++;
        } else {
            s2 += b;
            n2++;
        }
    }
    *mean = r->n_batch ? s / (double)r->n_batch : 0;
    *m1 = n1 ? s1 / (double)n1 : 0;
    *m2 = n2 ? s2 / (double)n2 : 0;
}

/* The --curve field (nothing without --curve); gap = f* - mean f. */
static void print_curve(const run *r, double gap)
{
    if (!r->window)
        return;
    printf(", \"curve\": [");
    for (size_t w = 0, t = 0; w < r->n_windows && r->w_points[w]; w++) {
        size_t np = r->w_points[w], nt = r->w_tells[w];
        t += np;
        double per_tell = nt ? 1e3 / (double)nt : 0.0;
        printf("%s{\"t\": %zu, \"ask_ms\": %.4g, \"tell_ms\": %.4g, \"ask_cpu_ms\": %.4g, "
               "\"tell_cpu_ms\": %.4g, \"regret_ratio\": %.4g, \"dict\": %zu}",
               w ? ", " : "", t, 1e3 * r->w_ask_s[w] / (double)np, per_tell * r->w_tell_s[w],
               1e3 * r->w_ask_cpu[w] / (double)np, per_tell * r->w_tell_cpu[w],
               gap > 0 ? r->w_regret[w] / ((double)np * gap) : 0.0, r->w_dict[w]);
    }
    printf("]");
}

/* The kernel the engine ended with (fitted unless hyperparameters = fixed). */
static void print_hyperparameters(const kb_engine *e)
{
    kb_hyperparameters hp;
    kb_engine_hyperparameters(e, &hp);
    printf(", \"hyperparameters\": {\"fitting\": %s, \"fits\": %llu, \"kernel_variance\": %.6g, "
           "\"noise\": %.6g, \"interior_prior\": %.6g, \"lengthscales\": [",
           hp.fitting ? "true" : "false", (unsigned long long)hp.fits, hp.kernel_variance,
           hp.noise, hp.interior_prior);
    for (size_t j = 0; j < hp.dim; j++)
        printf("%s%.6g", j ? ", " : "", hp.lengthscales[j]);
    printf("]}");
}

/* --dump: the problem as CSV (see the header comment). */
static int dump_problem(const bench_problem *p, double noise, const char *path)
{
    FILE *f = fopen(path, "w");
    if (!f) {
        perror(path);
        return 2;
    }
    fprintf(f, "# noise_sd=%.17g noise_uniform=%.17g\n", noise, p->noise_uniform);
    for (size_t i = 0; i < p->A; i++) {
        for (size_t j = 0; j < p->d; j++)
            fprintf(f, "%.17g,", p->X[i * p->d + j]);
        fprintf(f, "%.17g\n", p->f[i]);
    }
    if (fclose(f)) {
        perror(path);
        return 2;
    }
    return 0;
}

int main(int argc, char **argv)
{
    opts o;
    parse_args(argc, argv, &o);
    const bench_problem_entry *pe = bench_problem_find(o.problem);
    if (!pe) {
        fprintf(stderr, "kb-bench: unknown problem '%s'\n", o.problem);
        usage();
    }
    bench_problem p = {0};
    char msg[512] = "out of memory";
    if (pe->make(&o.pa, &p, msg, sizeof msg)) {
        fprintf(stderr, "kb-bench: problem %s: %s\n", o.problem, msg);
        return 2;
    }
    if (o.dump)
        return dump_problem(&p, o.noise, o.dump);
    kb_error err;
    kb_config *cfg = kb_config_new(o.engine, &err);
    if (!cfg)
        die("--engine", &err);
    if (kb_config_set_number(cfg, "seed", (double)o.seed, &err))
        die("--seed", &err);
    apply_problem_settings(cfg, o.engine, p.settings);
    for (size_t i = 0; i < o.n_sets; i++)
        apply_set(cfg, o.engine, o.sets[i]);
    kb_space *sp = kb_space_new_finite(p.X, p.A, p.d, &err);
    if (!sp)
        die("space", &err);
    run r = {0};
    r.p = &p;
    r.noise = o.noise;
    r.fstar = -INFINITY;
    r.best_f = -INFINITY;
    double fmean = 0;
    for (size_t i = 0; i < p.A; i++) {
        r.fstar = p.f[i] > r.fstar ? p.f[i] : r.fstar;
        fmean += p.f[i] / (double)p.A;
    }
    kb_rng_seed(&r.noise_rng, o.seed * 0x9e3779b97f4a7c15ULL + 1);
    kb_rng clock_rng;
    kb_rng_seed(&clock_rng, o.seed * 0x9e3779b97f4a7c15ULL + 2);

    curve_alloc(&r, o.T, o.curve);
    double t0 = now();
    r.e = kb_engine_create(cfg, sp, &err);
    if (!r.e)
        die("engine", &err);
    double idle = 0;
    if (!strcmp(o.mode, "sync"))
        simulate_sync(&r, o.T, o.W);
    else
        idle = simulate_async(&r, o.T, o.W, &clock_rng);
    double wall = now() - t0;

    double sec_embed = figure(r.e, "sec_embed");
    double sec_resparsify = figure(r.e, "sec_resparsify");
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    double bmean, bmax, b1, b2;
    batch_summary(&r, r.evals, &bmean, &bmax, &b1, &b2);
    double gap = r.fstar - fmean;
    char ask_us[32] = "null"; /* no in-batch ask at all (e.g. sync with --workers 0) */
    if (r.ask_us_n)
        snprintf(ask_us, sizeof ask_us, "%.2f", r.ask_us_sum / (double)r.ask_us_n);
    printf("{\"engine\": \"%s\", \"problem\": \"%s\", \"A\": %zu, \"d\": %zu, \"T\": %zu, "
           "\"seed\": %llu, \"workers\": %zu, \"mode\": \"%s\", \"regret_ratio\": %.6g, "
           "\"simple_regret\": %.6g, \"wall_s\": %.4f, \"sec_embed\": %.4f, "
           "\"sec_resparsify\": %.4f, \"sec_fit\": %.4f, \"sec_ask\": %.4f, \"sec_tell\": %.4f, "
           "\"batches\": %zu, \"batch_mean\": %.4g, \"batch_max\": %.0f, "
           "\"batch_mean_first_half\": %.4g, \"batch_mean_second_half\": %.4g, "
           "\"dict_mean\": %.4g, \"dict_max\": %.0f, \"idle_fraction\": %.4f, "
           "\"peak_rss_mb\": %.1f, \"ask_us_mean\": %s, \"gflops_resparsify\": %.2f, "
           "\"epochs_low_rank\": %llu, \"dict_capped\": %llu",
           o.engine, o.problem, p.A, p.d, r.evals, (unsigned long long)o.seed, o.W, o.mode,
           r.evals && gap > 0 ? r.cum_regret / ((double)r.evals * gap) : 0.0,
           r.evals ? r.fstar - r.best_f : r.fstar, wall, sec_embed, sec_resparsify,
           figure(r.e, "sec_fit"), figure(r.e, "sec_ask"), figure(r.e, "sec_tell"), r.n_batch, bmean, bmax, b1, b2,
           r.dict_n ? r.dict_sum / (double)r.dict_n : 0.0, r.dict_max, idle,
           (double)ru.ru_maxrss / 1024.0, ask_us,
           sec_embed + sec_resparsify > 0
               ? figure(r.e, "flop_l3") / (sec_embed + sec_resparsify) / 1e9 : 0.0,
           (unsigned long long)figure(r.e, "epochs_low_rank"),
           (unsigned long long)figure(r.e, "dict_capped"));
    print_hyperparameters(r.e);
    print_curve(&r, gap);
    printf("}\n");
    kb_engine_free(r.e);
    kb_space_free(sp);
    kb_config_free(cfg);
    bench_problem_free(&p);
    free(r.batch);
    free(r.batch_start);
    free(r.w_ask_s);
    free(r.w_tell_s);
    free(r.w_ask_cpu);
    free(r.w_tell_cpu);
    free(r.w_regret);
    free(r.w_points);
    free(r.w_tells);
    free(r.w_dict);
    return 0;
}
