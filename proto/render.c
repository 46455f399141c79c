/*
 * render.c - This file contains the JSON and CSV renderings of what the study layer
 * answers (server/study.h): a Study with its progress, pages of studies and trials, an
 * ask's answer, a batch tell's results and the two exports. They take C copies made
 * under a study's mutex, so they run after it is released and never block a study. And
 * the engine catalogue, read from the core's registry (constant tables, no lock).
 *
 * The shapes are those of openapi.yaml, key order included (jansson keeps insertion
 * order). Reals are printed by the JSON layer or, in CSV, at their shortest round-trip
 * form (numfmt.c); CSV strings are quoted by csv.c.
 */
#include "proto.h"

#include "csv.h"
#include "numfmt.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static json_t *cursor_json(int64_t next_cursor)
{
    char c[32];
    if (!next_cursor)
        return json_null();
    snprintf(c, sizeof c, "%lld", (long long)next_cursor);
    return json_string(c);
}

static json_t *trials_json(const trial_rec *v, size_t n, int64_t study_id, const study_spec *s)
{
    json_t *arr = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(arr, proto_trial_json(&v[i], study_id, s));
    return arr;
}

static json_t *hyperparameters_json(const study_progress *p)
{
    json_t *ls = json_array();
    for (size_t j = 0; j < p->dim; j++)
        json_array_append_new(ls, json_real(p->lengthscales[j]));
    return json_pack("{s:b,s:I,s:o,s:f,s:f,s:f,s:f}", "fitted", p->fitted, "fits",
                     (json_int_t)p->fits, "lengthscales", ls, "kernel_variance",
                     p->kernel_variance, "noise", p->noise, "categorical_mix",
                     p->categorical_mix, "interior_prior", p->interior_prior);
}

static json_t *progress_json(const study_doc *d)
{
    const study_progress *p = &d->progress;
    return json_pack("{s:{s:I,s:I,s:I,s:I},s:I,s:o,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:b,s:b,s:o}",
                     "trials", "pending",
                     (json_int_t)p->trials[TRIAL_PENDING], "completed",
                     (json_int_t)p->trials[TRIAL_COMPLETED], "failed",
                     (json_int_t)p->trials[TRIAL_FAILED], "expired",
                     (json_int_t)p->trials[TRIAL_EXPIRED], "observations",
                     (json_int_t)p->observations, "best",
                     p->best.id ? proto_trial_json(&p->best, d->id, d->spec) : json_null(),
                     "epoch", (json_int_t)p->epoch, "epoch_asks", (json_int_t)p->epoch_asks,
                     "last_batch", (json_int_t)p->last_batch, "dictionary_size",
                     (json_int_t)p->dict_size, "model_rows", (json_int_t)p->model_rows,
                     "choice_floor_pools", (json_int_t)p->choice_floor_pools,
                     "climb_pools", (json_int_t)p->climb_pools,
                     "init_phase", p->init_phase, "deterministic", p->deterministic,
                     "hyperparameters",
                     hyperparameters_json(p));
}

json_t *proto_study_json(const study_doc *d)
{
    json_t *o = proto_study_spec_json(d->spec, 0);
    char ts[40];
    proto_time_format(d->created_ms, ts, sizeof ts);
    json_object_set_new(o, "id", json_integer(d->id));
    json_object_set_new(o, "created_at", json_string(ts));
    json_object_set_new(o, "state", json_string(proto_study_state_name(d->state)));
    json_object_set_new(o, "progress", d->has_progress ? progress_json(d) : json_null());
    return o;
}

json_t *proto_study_page_json(const study_doc *docs, size_t n, int64_t next_cursor)
{
    json_t *arr = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(arr, proto_study_json(&docs[i]));
    return json_pack("{s:o,s:o}", "studies", arr, "next_cursor", cursor_json(next_cursor));
}

json_t *proto_trial_page_json(const trial_rec *v, size_t n, int64_t next_cursor,
                              int64_t study_id, const study_spec *s)
{
    return json_pack("{s:o,s:o}", "trials", trials_json(v, n, study_id, s), "next_cursor",
                     cursor_json(next_cursor));
}

void proto_ask_answer_clear(ask_answer *a)
{
    trial_recs_free(a->trials, a->n);
    a->trials = NULL;
    a->n = 0;
}

json_t *proto_ask_json(const ask_answer *a, int64_t study_id, const study_spec *s)
{
    return json_pack("{s:o,s:s,s:I,s:o}", "trials", trials_json(a->trials, a->n, study_id, s),
                     "status", a->status, "awaiting", (json_int_t)a->awaiting,
                     "retry_after_ms",
                     a->retry_after_ms ? json_integer(a->retry_after_ms) : json_null());
}

void proto_tell_outcomes_free(tell_outcome *v, size_t n)
{
    for (size_t i = 0; v && i < n; i++)
        trial_rec_clear(&v[i].trial);
    free(v);
}

json_t *proto_tell_batch_json(const tell_outcome *v, size_t n, int64_t study_id,
                              const study_spec *s)
{
    json_t *arr = json_array();
    for (size_t i = 0; i < n; i++) {
        int ok = v[i].err.code == API_OK;
        json_t *r = json_pack("{s:I,s:i}", "trial_id", (json_int_t)v[i].trial_id, "status",
                              ok ? 200 : api_status(v[i].err.code));
        if (ok) {
            json_object_set_new(r, "trial", proto_trial_json(&v[i].trial, study_id, s));
        } else {
            json_t *ej = api_error_json(&v[i].err);
            json_object_set(r, "error", json_object_get(ej, "error"));
            json_decref(ej);
        }
        json_array_append_new(arr, r);
    }
    return json_pack("{s:o}", "results", arr);
}

static json_t *observations_json(const observation_set *obs, const study_spec *s)
{
    json_t *arr = json_array();
    char ts[40];
    for (size_t i = 0; i < obs->n; i++) {
        const double *x = obs->x + i * s->dim;
        json_t *xs = json_array();
        for (size_t j = 0; j < s->dim; j++)
            json_array_append_new(xs, json_real(x[j]));
        proto_time_format(obs->created_ms[i], ts, sizeof ts);
        json_array_append_new(
            arr, json_pack("{s:o,s:o,s:f,s:s}", "x", xs, "params",
                           s->space == SPACE_BOX ? proto_params_from_x(s, x) : json_null(),
                           "value", obs->value[i], "created_at", ts));
    }
    return arr;
}

json_t *proto_export_json(const study_doc *d, const trial_rec *v, size_t n,
                          const observation_set *obs)
{
    json_t *trials = trials_json(v, n, d->id, d->spec);
    return json_pack("{s:o,s:o,s:o}", "study", proto_study_json(d), "trials", trials,
                     "observations", observations_json(obs, d->spec));
}

/* A CSV field: numbers at their shortest round-trip form, strings quoted with "" doubled. */
static void csv_put(FILE *f, json_t *v)
{
    char num[KB_DOUBLE_BUF];
    if (json_is_string(v)) {
        csv_put_string(f, json_string_value(v));
    } else if (json_is_integer(v)) {
        fprintf(f, "%lld", (long long)json_integer_value(v));
    } else if (json_is_number(v)) {
        fputs(kb_format_double(num, json_number_value(v)), f);
    } else if (json_is_boolean(v)) {
        fputs(json_is_true(v) ? "true" : "false", f);
    }
}

/* Columns after id, state, worker, value: the box's param names, a named candidate set's
 * column names, else x0, x1, ... */
static void csv_header(FILE *f, const study_spec *sp)
{
    const json_t *names = json_array_size(sp->column_names) == sp->dim ? sp->column_names : NULL;
    fputs("id,state,worker,value", f);
    for (size_t j = 0; j < sp->dim; j++) {
        fputc(',', f);
        if (sp->space == SPACE_BOX)
            csv_put_string(f, sp->params[j].name);
        else if (names)
            csv_put_string(f, json_string_value(json_array_get(names, j)));
        else
            fprintf(f, "x%zu", j);
    }
    fputc('\n', f);
}

static void csv_row(FILE *f, const study_spec *sp, const trial_rec *t)
{
    char num[KB_DOUBLE_BUF];
    fprintf(f, "%lld,%s,", (long long)t->id, proto_trial_state_name(t->state));
    if (t->worker)
        csv_put_string(f, t->worker);
    fputc(',', f);
    if (t->state == TRIAL_COMPLETED)
        fputs(kb_format_double(num, t->value), f);
    json_t *ps = sp->space == SPACE_BOX ? proto_params_from_x(sp, t->x) : NULL;
    for (size_t j = 0; j < sp->dim; j++) {
        fputc(',', f);
        if (ps)
            csv_put(f, json_object_get(ps, sp->params[j].name));
        else
            fputs(kb_format_double(num, t->x[j]), f);
    }
    json_decref(ps);
    fputc('\n', f);
}

char *proto_export_csv(const study_spec *s, const trial_rec *v, size_t n, size_t *len)
{
    char *buf = NULL;
    FILE *f = open_memstream(&buf, len);
    if (!f)
        return NULL;
    csv_header(f, s);
    for (size_t i = 0; i < n; i++)
        csv_row(f, s, &v[i]);
    if (fclose(f)) {
        free(buf);
        return NULL;
    }
    return buf;
}

/* ------------------------------------------------------------ engine catalogue */

/* A bound or default, an integer for an integer option: null when infinite or not a
 * number (JSON has neither). */
static json_t *finite_json(const kb_option_spec *o, double v)
{
    if (!isfinite(v))
        return json_null();
    return o->type == KB_OPT_INTEGER ? json_integer((json_int_t)v) : json_real(v);
}

static json_t *option_json(const kb_option_spec *o)
{
    static const char *const type_names[] = {"number", "integer", "string", "vector"};
    int numeric = o->type != KB_OPT_STRING;
    json_t *choices = json_null(), *def = json_null();
    if (o->choices) {
        choices = json_array();
        for (size_t i = 0; o->choices[i]; i++)
            json_array_append_new(choices, json_string(o->choices[i]));
    }
    if (o->type == KB_OPT_STRING && o->def_string)
        def = json_string(o->def_string);
    else if (o->type == KB_OPT_INTEGER || o->type == KB_OPT_NUMBER)
        def = finite_json(o, o->def_number);
    return json_pack("{s:s,s:s,s:o,s:o,s:o,s:b,s:o,s:s}", "name", o->name, "type",
                     type_names[o->type], "default", def, "minimum",
                     numeric ? finite_json(o, o->min) : json_null(), "maximum",
                     numeric ? finite_json(o, o->max) : json_null(), "exclusive_minimum",
                     numeric && o->min_exclusive, "choices", choices, "description",
                     o->help ? o->help : "");
}

static json_t *options_json(const kb_option_spec *specs)
{
    json_t *arr = json_array();
    for (size_t i = 0; specs && specs[i].name; i++)
        json_array_append_new(arr, option_json(&specs[i]));
    return arr;
}

json_t *proto_engines_json(void)
{
    json_t *engines = json_array();
    const char *const *names = kb_engine_names();
    for (size_t i = 0; names[i]; i++)
        json_array_append_new(
            engines, json_pack("{s:s,s:s,s:I,s:o}", "name", names[i], "summary",
                               kb_engine_summary(names[i]), "max_dim",
                               (json_int_t)kb_engine_max_dim(names[i]), "options",
                               options_json(kb_engine_options(names[i]))));
    return json_pack("{s:s,s:o,s:o}", "default", PROTO_DEFAULT_ENGINE, "common_options",
                     options_json(kb_common_options()), "engines", engines);
}
