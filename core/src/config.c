/*
 * config.c - engine configurations: a named engine and typed, validated options.
 *
 * Every option is declared once in a kb_option_spec table (common_options below, and
 * each engine's own table); kb_config_set_* check name, type, range and choices against
 * that table, so unknown or ill-typed options are rejected with the option's name and
 * engines read values that are already valid. Values not set take the spec's default.
 * An engine's table may declare a common option again (pi-gp-ucb's Matern-only
 * `kernel`): for that engine its entry replaces the common one, default and choices
 * included, so that the tables (and the daemon's catalogue, GET /v1/engines, read from
 * them) say what the engine accepts.
 */
#include "internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const kernel_choices[] = {"rbf", "gaussian", "matern12", "matern32",
                                             "matern52", "linear", NULL};
static const char *const input_scaling_choices[] = {"unit", "standardize", "none", NULL};
static const char *const output_scaling_choices[] = {"auto", "warp", "standardize", "none",
                                                     NULL};
static const char *const repeats_choices[] = {"allow", "no_pending", "never", NULL};
static const char *const hyper_choices[] = {"fit", "fixed", NULL};
static const char *const categorical_choices[] = {"joint", "additive", NULL};
static const char *const prior_mean_choices[] = {"auto", "constant", NULL};

static const kb_option_spec common_options[] = {
    {"seed", KB_OPT_INTEGER, 0, 9007199254740992.0, 0, 0, NULL, NULL,
     "seed of the engine's random number generator (the daemon draws one for a study "
     "created without it and stores it with the study)"},
    {"kernel", KB_OPT_STRING, 0, 0, 0, 0, "rbf", kernel_choices, "covariance function"},
    {"lengthscale", KB_OPT_NUMBER, 0, INFINITY, 1, 1.0, NULL, NULL,
     "kernel lengthscale (bandwidth), the same in every dimension; not set, the GP "
     "engines fit one per dimension (hyperparameters = fit), and this default applies "
     "only with hyperparameters = fixed (the daemon refuses below 1e-12 for a new study: "
     "below ~1e-154 the kernel's squared distances overflow)"},
    {"lengthscales", KB_OPT_VECTOR, 0, INFINITY, 1, 0, NULL, NULL,
     "one lengthscale per dimension; overrides lengthscale (set: held fixed, not fitted)"},
    {"kernel_variance", KB_OPT_NUMBER, 0, INFINITY, 1, 1.0, NULL, NULL,
     "kernel amplitude k(x, x); not set, fitted (hyperparameters = fit)"},
    {"input_scaling", KB_OPT_STRING, 0, 0, 0, 0, "unit", input_scaling_choices,
     "map of finite candidate columns before the kernel"},
    {"output_scaling", KB_OPT_STRING, 0, 0, 0, 0, "auto", output_scaling_choices,
     "standardize observed values inside the engine; warp (where hyperparameters are "
     "fitted) also compresses the worse half's tail (kb__output_y); auto: warp on boxes, "
     "standardize on finite sets"},
    {"repeats", KB_OPT_STRING, 0, 0, 0, 0, "allow", repeats_choices,
     "whether a candidate may be handed out again while pending (no_pending) or after "
     "evaluation (never); unset on a box, a pool point is handed out once (never), and over "
     "candidates repeats are allowed until the told values look deterministic (a point "
     "told three times with one value, none with two), then never"},
    {"pool_size", KB_OPT_INTEGER, 1, KB_MAX_POOL, 0, 2048, NULL, NULL,
     "candidate pool size for box spaces"},
    {"width", KB_OPT_NUMBER, 0, 1e6, 0, 0.0, NULL, NULL,
     "exploration: the multiplier of the posterior standard deviation (Bayesian units) in "
     "an upper confidence bound, or of the sample's spread in Thompson sampling; 0 = the "
     "engine's default (kb__width)"},
    {"hyperparameters", KB_OPT_STRING, 0, 0, 0, 0, "fit", hyper_choices,
     "fit: lengthscales, kernel_variance and the noise (lambda) not set are fitted to the "
     "data by type-II MAP on a schedule (core/src/hyper.c); fixed: used as set or defaulted"},
    {"categorical_kernel", KB_OPT_STRING, 0, 0, 0, 0, "additive", categorical_choices,
     "additive (the default): the UCB engines on a box add a fitted additive term over the "
     "categorical parameters while the fitted noise is at least 0.01 (engine.c, "
     "categorical_mix); joint: categorical parameters are coordinates of the one kernel"},
    {"prior_mean", KB_OPT_STRING, 0, 0, 0, 0, "auto", prior_mean_choices,
     "auto: on a finite set with fitted hyperparameters and unit input scaling, the GP's "
     "prior mean is a bowl lower towards the set's edges, its height fitted to the data "
     "(engine.c, kb__hyper_refit), against the UCB's pull to the boundary; constant: the "
     "standardized outputs' mean everywhere"},
    {NULL, 0, 0, 0, 0, 0, NULL, NULL, NULL},
};

const kb_option_spec *kb_common_options(void) { return common_options; }

typedef struct entry {
    const kb_option_spec *spec;
    int set;
    double number;
    char *string;
    double *vector;
    size_t n;
} entry;

struct kb_config {
    const kb_engine_ops *ops;
    entry *entries;
    size_t n_entries;
};

static size_t count_specs(const kb_option_spec *s)
{
    size_t n = 0;
    while (s && s[n].name)
        n++;
    return n;
}

/* Whether the table declares an option of that name. */
static int declares(const kb_option_spec *specs, const char *name)
{
    for (size_t i = 0; specs && specs[i].name; i++)
        if (strcmp(specs[i].name, name) == 0)
            return 1;
    return 0;
}

kb_config *kb_config_new(const char *engine, kb_error *err)
{
    const kb_engine_ops *ops = engine ? kb__engine_lookup(engine) : NULL;
    if (!ops) {
        kb__fail(err, KB_ENOTFOUND, "engine", "unknown engine '%s'", engine ? engine : "");
        return NULL;
    }
    size_t nc = count_specs(common_options), ne = count_specs(ops->options);
    kb_config *cfg = calloc(1, sizeof *cfg);
    entry *e = calloc(nc + ne, sizeof *e);
    if (!cfg || !e) {
        free(cfg);
        free(e);
        kb__fail(err, KB_ENOMEM, NULL, "out of memory");
        return NULL;
    }
    size_t n = 0;
    for (size_t i = 0; i < nc; i++)
        if (!declares(ops->options, common_options[i].name))
            e[n++].spec = &common_options[i];
    for (size_t i = 0; i < ne; i++)
        e[n++].spec = &ops->options[i];
    cfg->ops = ops;
    cfg->entries = e;
    cfg->n_entries = n;
    return cfg;
}

void kb_config_free(kb_config *cfg)
{
    if (!cfg)
        return;
    for (size_t i = 0; i < cfg->n_entries; i++) {
        free(cfg->entries[i].string);
        free(cfg->entries[i].vector);
    }
    free(cfg->entries);
    free(cfg);
}

kb_config *kb_config_copy(const kb_config *src)
{
    kb_config *cfg = kb_config_new(src->ops->name, NULL);
    if (!cfg)
        return NULL;
    for (size_t i = 0; i < src->n_entries; i++) {
        const entry *s = &src->entries[i];
        entry *d = &cfg->entries[i];
        d->set = s->set;
        d->number = s->number;
        d->n = s->n;
        if (s->string && !(d->string = strdup(s->string)))
            goto oom;
        if (s->vector) {
            if (!(d->vector = malloc(s->n * sizeof *d->vector)))
                goto oom;
            memcpy(d->vector, s->vector, s->n * sizeof *d->vector);
        }
    }
    return cfg;
oom:
    kb_config_free(cfg);
    return NULL;
}

const char *kb_config_engine(const kb_config *cfg) { return cfg->ops->name; }

static entry *find(const kb_config *cfg, const char *name)
{
    for (size_t i = 0; i < cfg->n_entries; i++)
        if (strcmp(cfg->entries[i].spec->name, name) == 0)
            return &cfg->entries[i];
    return NULL;
}

/* The option or an error naming it. */
/* The entry `name` of `type` into *out; the code, filling err, when there is none. */
static int find_typed(const kb_config *cfg, const char *name, kb_option_type type, entry **out,
                      kb_error *err)
{
    entry *e = find(cfg, name);
    if (!e)
        return kb__fail(err, KB_ENOTFOUND, name, "unknown option '%s' for engine %s", name,
                        cfg->ops->name);
    int numeric = type == KB_OPT_NUMBER || type == KB_OPT_INTEGER;
    int want_numeric = e->spec->type == KB_OPT_NUMBER || e->spec->type == KB_OPT_INTEGER;
    if (numeric ? !want_numeric : e->spec->type != type) {
        static const char *const tn[] = {"a number", "an integer", "a string", "an array"};
        return kb__fail(err, KB_EINVAL, name, "option '%s' must be %s", name,
                        tn[e->spec->type]);
    }
    *out = e;
    return KB_OK;
}

/* A bound as the catalogue gives it: integers whole (the seed's 9007199254740992, not
 * 9.0072e+15), others at %g. */
static const char *bound_text(char buf[32], double v)
{
    snprintf(buf, 32, v == floor(v) && fabs(v) < 1e17 ? "%.0f" : "%g", v);
    return buf;
}

static int check_range(const kb_option_spec *s, double v, kb_error *err)
{
    char b[32];
    if (!isfinite(v))
        return kb__fail(err, KB_EINVAL, s->name, "'%s' must be a finite number", s->name);
    if (s->type == KB_OPT_INTEGER && v != floor(v))
        return kb__fail(err, KB_EINVAL, s->name, "'%s' must be an integer", s->name);
    if (s->min_exclusive ? v <= s->min : v < s->min)
        return kb__fail(err, KB_ERANGE, s->name, "'%s' must be %s %s", s->name,
                        s->min_exclusive ? ">" : ">=", bound_text(b, s->min));
    if (v > s->max)
        return kb__fail(err, KB_ERANGE, s->name, "'%s' must be <= %s", s->name,
                        bound_text(b, s->max));
    return KB_OK;
}

int kb_config_set_number(kb_config *cfg, const char *name, double value, kb_error *err)
{
    entry *e;
    int rc = find_typed(cfg, name, KB_OPT_NUMBER, &e, err);
    if (rc)
        return rc;
    if ((rc = check_range(e->spec, value, err)))
        return rc;
    e->number = value;
    e->set = 1;
    return KB_OK;
}

int kb_config_set_string(kb_config *cfg, const char *name, const char *value, kb_error *err)
{
    entry *e;
    int rc = find_typed(cfg, name, KB_OPT_STRING, &e, err);
    if (rc)
        return rc;
    if (!value)
        return kb__fail(err, KB_EINVAL, name, "'%s' must be a string", name);
    if (e->spec->choices) {
        const char *const *c = e->spec->choices;
        while (*c && strcmp(*c, value) != 0)
            c++;
        if (!*c)
            return kb__fail(err, strcmp(name, "kernel") == 0 ? KB_ENOTFOUND : KB_EINVAL,
                            name, "'%s' is not a valid %s", value, name);
    }
    char *copy = strdup(value);
    if (!copy)
        return kb__fail(err, KB_ENOMEM, name, "out of memory");
    free(e->string);
    e->string = copy;
    e->set = 1;
    return KB_OK;
}

int kb_config_set_vector(kb_config *cfg, const char *name, const double *v, size_t n,
                         kb_error *err)
{
    entry *e;
    int rc = find_typed(cfg, name, KB_OPT_VECTOR, &e, err);
    if (rc)
        return rc;
    if (n == 0)
        return kb__fail(err, KB_EINVAL, name, "'%s' must not be empty", name);
    for (size_t i = 0; i < n; i++)
        if ((rc = check_range(e->spec, v[i], err)))
            return rc;
    double *copy = malloc(n * sizeof *copy);
    if (!copy)
        return kb__fail(err, KB_ENOMEM, name, "out of memory");
    memcpy(copy, v, n * sizeof *copy);
    free(e->vector);
    e->vector = copy;
    e->n = n;
    e->set = 1;
    return KB_OK;
}

double kb_config_number(const kb_config *cfg, const char *name)
{
    const entry *e = find(cfg, name);
    if (!e) {
        fprintf(stderr, "kbandit: bug: engine reads undeclared option '%s'\n", name);
        abort();
    }
    return e->set ? e->number : e->spec->def_number;
}

const char *kb_config_string(const kb_config *cfg, const char *name)
{
    const entry *e = find(cfg, name);
    if (!e) {
        fprintf(stderr, "kbandit: bug: engine reads undeclared option '%s'\n", name);
        abort();
    }
    return e->set ? e->string : e->spec->def_string;
}

const double *kb_config_vector(const kb_config *cfg, const char *name, size_t *n)
{
    const entry *e = find(cfg, name);
    *n = e && e->set ? e->n : 0;
    return e && e->set ? e->vector : NULL;
}

int kb_config_is_set(const kb_config *cfg, const char *name)
{
    const entry *e = find(cfg, name);
    return e && e->set;
}

int kb__config_build_kernel(const kb_config *cfg, size_t dim, kb_kernel *k, kb_error *err)
{
    size_t n;
    const double *ls = kb_config_vector(cfg, "lengthscales", &n);
    if (ls && n != dim)
        return kb__fail(err, KB_EINVAL, "lengthscales",
                        "lengthscales has %zu entries, the space has %zu dimensions", n, dim);
    kb_kernel_kind kind;
    kb_kernel_kind_parse(kb_config_string(cfg, "kernel"), &kind);
    int rc = kb__kernel_init(k, kind, dim, err);
    if (rc)
        return rc;
    k->variance = kb_config_number(cfg, "kernel_variance");
    for (size_t j = 0; j < dim; j++)
        k->lengthscales[j] = ls ? ls[j] : kb_config_number(cfg, "lengthscale");
    return KB_OK;
}

/* Used by snapshot.c to serialize: the i-th option's name and whether it was set. */
size_t kb__config_count(const kb_config *cfg) { return cfg->n_entries; }
const kb_option_spec *kb__config_spec(const kb_config *cfg, size_t i)
{
    return cfg->entries[i].spec;
}
