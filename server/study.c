/*
 * study.c - This file contains the study operations the handlers perform: create,
 * delete, ask, tell (one or a batch), fail, observe, the reads (study, trial, trials,
 * best) and the exports. Each locks the study (study_lock_live), applies the operation
 * to the engine and memory, queues its write, and answers after the commit it depends on
 * (study_write.c).
 *
 * Invariants: see study_internal.h. Values are told to the engine in its direction
 * (study_engine_value) and kept in the user's in the trials.
 */
#include "study_internal.h"

#include "log.h"
#include "../proto/csv.h"
#include "../proto/numfmt.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------ operations */

json_t *study_create(study_spec *spec, api_error *err)
{
    if (atomic_load(&registry.closing)) {
        proto_study_spec_clear(spec);
        api_fail(err, API_UNAVAILABLE, NULL, "shutting down");
        return NULL;
    }
    json_t *cfg = NULL;
    char *text = NULL;
    kb_engine *e = NULL;
    int64_t id = 0, created = now_ms();
    study *s = NULL;
    if (reg_name_taken(spec->name)) {
        api_fail(err, API_CONFLICT, "name", "a study named '%s' exists", spec->name);
        goto fail;
    }
    if (study_load_candidates(spec, err) || proto_study_spec_config(spec, err) ||
        !(e = study_engine_new(spec, err)))
        goto fail;
    cfg = proto_study_spec_json(spec, 1);
    text = json_dumps(cfg, JSON_COMPACT);
    if (!text) {
        api_fail(err, API_INTERNAL, NULL, "out of memory");
        goto fail;
    }
    int rc = store_begin(registry.cfg.db);
    if (rc == 0)
        rc = store_study_insert(registry.cfg.db, spec->name, text, created, &id);
    if (rc == 0)
        rc = store_commit(registry.cfg.db);
    if (rc) {
        store_rollback(registry.cfg.db);
        if (rc == STORE_CONFLICT)
            api_fail(err, API_CONFLICT, "name", "a study named '%s' exists", spec->name);
        else
            api_fail(err, API_INTERNAL, NULL, "database error");
        goto fail;
    }
    s = study_alloc(id, created, spec);
    if (!s) {
        api_fail(err, API_INTERNAL, NULL, "out of memory");
        goto fail;
    }
    s->engine = e; /* complete before it is visible */
    e = NULL;
    atomic_store(&s->restore, RESTORED);
    if (reg_insert(s)) {
        api_fail(err, API_INTERNAL, NULL, "out of memory");
        goto fail;
    }
    reg_count_restore(-1, RESTORED);
    json_decref(cfg);
    free(text);
    log_json(LOG_INFO, "study created",
             json_pack("{s:I,s:s,s:s}", "study", (json_int_t)id, "name", s->spec.name,
                       "engine", s->spec.engine));
    return study_json(s, err);
fail:
    kb_engine_free(e);
    json_decref(cfg);
    free(text);
    if (s)
        study_free(s);
    proto_study_spec_clear(spec);
    return NULL;
}

int study_delete(int64_t id, api_error *err)
{
    study *s = study_get(id);
    if (!s)
        return api_fail(err, API_NOT_FOUND, NULL, "study %lld not found", (long long)id);
    if (study_lock_undeleted(s, err)) { /* a study not restored yet is deleted as it is */
        study_put(s);
        return -1;
    }
    store_wait(registry.cfg.db, s->ticket, 0); /* its queued writes first (their outcome is moot) */
    int rc = store_begin(registry.cfg.db);
    if (rc == 0)
        rc = store_study_delete(registry.cfg.db, id);
    if (rc == 0)
        rc = store_commit(registry.cfg.db);
    if (rc) {
        store_rollback(registry.cfg.db);
        pthread_mutex_unlock(&s->mu);
        study_put(s);
        return api_fail(err, API_INTERNAL, NULL, "database error");
    }
    s->deleted = 1;
    reg_count_restore(atomic_load(&s->restore), -1);
    study_wake(s);
    reg_remove(s);
    pthread_mutex_unlock(&s->mu);
    study_put(s); /* the registry's reference */
    study_put(s);
    log_json(LOG_INFO, "study deleted", json_pack("{s:I}", "study", (json_int_t)id));
    return 0;
}

/* The kernel the engine uses now (fitted unless hyperparameters = fixed). */
static json_t *hyperparameters_json(const kb_engine *e)
{
    kb_hyperparameters hp;
    kb_engine_hyperparameters(e, &hp);
    json_t *ls = json_array();
    for (size_t j = 0; j < hp.dim; j++)
        json_array_append_new(ls, json_real(hp.lengthscales[j]));
    return json_pack("{s:b,s:I,s:o,s:f,s:f}", "fitted", hp.fitting, "fits",
                     (json_int_t)hp.fits, "lengthscales", ls, "kernel_variance",
                     hp.kernel_variance, "noise", hp.noise);
}

static json_t *progress_json(study *s)
{
    kb_stats st;
    kb_engine_stats(s->engine, &st);
    return json_pack("{s:{s:I,s:I,s:I,s:I},s:o,s:I,s:I,s:I,s:I,s:b,s:o}", "trials", "pending",
                     (json_int_t)s->counts[TRIAL_PENDING], "completed",
                     (json_int_t)s->counts[TRIAL_COMPLETED], "failed",
                     (json_int_t)s->counts[TRIAL_FAILED], "expired",
                     (json_int_t)s->counts[TRIAL_EXPIRED], "best",
                     s->best ? study_trial_json(s, &s->trials[s->best - 1]) : json_null(), "epoch",
                     (json_int_t)st.epoch, "epoch_asks", (json_int_t)st.epoch_asks,
                     "last_batch", (json_int_t)st.last_batch, "dictionary_size",
                     (json_int_t)st.dict_size, "init_phase", st.init_phase, "hyperparameters",
                     hyperparameters_json(s->engine));
}

/* Study document without locking (spec is immutable); progress (else null) needs s->mu
 * and a restored study. */
json_t *study_json_locked(study *s, int with_progress)
{
    json_t *o = proto_study_spec_json(&s->spec, 0);
    char ts[40];
    proto_time_format(s->created_ms, ts, sizeof ts);
    json_object_set_new(o, "id", json_integer(s->id));
    json_object_set_new(o, "created_at", json_string(ts));
    json_object_set_new(o, "progress", with_progress ? progress_json(s) : json_null());
    return o;
}

json_t *study_json(study *s, api_error *err)
{
    if (study_lock_live(s, err))
        return NULL;
    json_t *o = study_json_locked(s, 1);
    return study_unlock_settle(s, o, err);
}

static const char *ask_status_name(kb_ask_status st)
{
    return st == KB_ASK_AWAIT_FEEDBACK ? "awaiting_feedback" : st == KB_ASK_EXHAUSTED ? "exhausted" : "ok";
}

/* One ask attempt (s->mu held): hands out up to count points and makes them durable.
 * Returns the number handed out, or -1. */
static int ask_once(study *s, const ask_req *req, kb_ask_result *res, const char **status,
                    api_error *err)
{
    size_t count = (size_t)req->count;
    if (s->spec.max_trials) {
        size_t left = s->n_trials >= (size_t)s->spec.max_trials ? 0 : (size_t)s->spec.max_trials - s->n_trials;
        if (left == 0) {
            *status = "max_trials_reached";
            memset(res, 0, sizeof *res);
            res->awaiting = s->counts[TRIAL_PENDING];
            return 0;
        }
        if (count > left)
            count = left;
    }
    kb_point pts[1000];
    kb_error kerr = {0};
    double t0 = mono_sec();
    int rc = kb_engine_ask(s->engine, count, pts, res, &kerr);
    s->engine_sec += mono_sec() - t0;
    if (rc) {
        /* The base validates before changing anything; a failing engine op may have
         * handed out some points already, so resynchronize with the store. */
        study_abort_txn(s, err);
        return api_fail_kb(err, &kerr, NULL);
    }
    *status = ask_status_name(res->status);
    if (res->n == 0)
        return 0;
    *status = "ok";
    /* Relaxed durability: a hand-out lost to a power cut only makes its tell a 404
     * and replays the engine to the state before it (see store_begin_queued). */
    if (study_trials_reserve(s, s->n_trials + res->n) || study_begin_write(s, 0))
        return study_abort_txn(s, err);
    int64_t now = now_ms();
    size_t base = s->n_trials;
    for (size_t i = 0; i < res->n; i++) {
        trial_rec t = {.id = (int64_t)pts[i].handle, .state = TRIAL_PENDING,
                       .worker = req->worker,
                       .cand_index = s->spec.space == SPACE_CANDIDATES ? (int64_t)pts[i].index : -1,
                       .created_ms = now, .lease_ms = now + s->spec.lease_seconds * 1000,
                       .x = (double *)pts[i].x};
        if (t.id != (int64_t)(base + i + 1) || study_trial_copy(&s->trials[base + i], &t, s->spec.dim)) {
            s->n_trials = base + i;
            return study_abort_txn(s, err);
        }
        s->n_trials = base + i + 1;
        s->counts[TRIAL_PENDING]++;
        if (study_append_event(s, 'a', t.id, 0, NULL) ||
            store_trial_put(registry.cfg.db, s->id, &s->trials[base + i], s->spec.dim))
            return study_abort_txn(s, err);
    }
    if (study_finish_txn(s))
        return study_abort_txn(s, err);
    return (int)res->n;
}

json_t *study_ask(study *s, const ask_req *req, int *can_wait, uint64_t *version,
                  int64_t *retry_after_ms, api_error *err)
{
    if (atomic_load(&registry.closing)) {
        api_fail(err, API_UNAVAILABLE, NULL, "shutting down");
        return NULL;
    }
    if (study_lock_live(s, err))
        return NULL;
    kb_ask_result res;
    const char *status = "ok";
    *version = atomic_load(&s->version);
    size_t first = s->n_trials;
    int n = ask_once(s, req, &res, &status, err);
    if (n < 0) {
        pthread_mutex_unlock(&s->mu);
        return NULL;
    }
    /* Feedback can change an empty answer only when the engine waits for it, or when
     * pending trials may expire or fail and free excluded candidates. */
    *can_wait = n == 0 && req->wait_ms > 0 &&
                (res.status == KB_ASK_AWAIT_FEEDBACK ||
                 (res.status == KB_ASK_EXHAUSTED && s->counts[TRIAL_PENDING])) &&
                strcmp(status, "max_trials_reached") != 0;
    json_t *arr = json_array();
    for (size_t i = first; i < first + (size_t)n; i++)
        json_array_append_new(arr, study_trial_json(s, &s->trials[i]));
    *retry_after_ms = n > 0 ? 0 : 1000;
    json_t *o = json_pack("{s:o,s:s,s:I,s:o}", "trials", arr, "status", status, "awaiting",
                          (json_int_t)res.awaiting, "retry_after_ms",
                          n > 0 ? json_null() : json_integer(*retry_after_ms));
    return study_unlock_settle_relaxed(s, o, err);
}

/* Checks a tell and applies it to the engine and to memory (s->mu held, no
 * transaction: engine work never runs inside one). *changed = 1 when applied, 0 for a
 * repeated identical tell. Returns the trial or NULL with err (404/409/400). */
static trial_rec *tell_apply(study *s, int64_t id, double value, int *changed, api_error *err)
{
    *changed = 0;
    trial_rec *t = study_find_trial(s, id, err);
    if (!t)
        return NULL;
    if (t->state == TRIAL_COMPLETED) {
        if (t->value == value)
            return t;
        api_fail(err, API_CONFLICT, "value", "trial %lld was already told %.17g",
                 (long long)id, t->value);
        return NULL;
    }
    if (t->state != TRIAL_PENDING) {
        api_fail(err, API_CONFLICT, NULL, "trial %lld is %s", (long long)id,
                 proto_trial_state_name(t->state));
        return NULL;
    }
    kb_error kerr = {0};
    double t0 = mono_sec();
    int rc = kb_engine_tell(s->engine, (uint64_t)id, study_engine_value(s, value), &kerr);
    s->engine_sec += mono_sec() - t0;
    if (rc) {
        api_fail_kb(err, &kerr, NULL);
        return NULL;
    }
    *changed = 1;
    t->value = value;
    t->completed_ms = now_ms();
    study_set_state(s, t, TRIAL_COMPLETED);
    return t;
}
json_t *study_tell(study *s, int64_t trial_id, double value, api_error *err)
{
    if (study_lock_live(s, err))
        return NULL;
    int changed;
    trial_rec *t = tell_apply(s, trial_id, value, &changed, err);
    if (t && changed && study_persist(s, &t, "t", 1, 1, err))
        t = NULL;
    json_t *o = t ? study_trial_json(s, t) : NULL;
    if (t && changed)
        study_wake(s);
    return study_unlock_settle(s, o, err);
}

json_t *study_tell_batch(study *s, const tell_item *items, size_t n, api_error *err)
{
    if (study_lock_live(s, err))
        return NULL;
    json_t *arr = json_array(), *o = NULL;
    trial_rec **told = malloc(n * sizeof *told);
    char *kinds = malloc(n);
    size_t nt = 0;
    if (!told || !kinds) {
        api_fail(err, API_INTERNAL, NULL, "out of memory");
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        api_error ie = {0};
        int changed;
        trial_rec *t = tell_apply(s, items[i].trial_id, items[i].value, &changed, &ie);
        if (changed) {
            kinds[nt] = 't';
            told[nt++] = t;
        }
        json_t *r = json_pack("{s:I,s:i}", "trial_id", (json_int_t)items[i].trial_id, "status",
                              t ? 200 : api_status(ie.code));
        if (t) {
            json_object_set_new(r, "trial", study_trial_json(s, t));
        } else {
            json_t *ej = api_error_json(&ie);
            json_object_set(r, "error", json_object_get(ej, "error"));
            json_decref(ej);
        }
        json_array_append_new(arr, r);
    }
    if (nt && study_persist(s, told, kinds, nt, 1, err))
        goto out;
    if (nt)
        study_wake(s);
    o = json_pack("{s:O}", "results", arr);
out:
    free(told);
    free(kinds);
    json_decref(arr);
    return study_unlock_settle(s, o, err);
}

json_t *study_fail(study *s, int64_t trial_id, const char *reason, api_error *err)
{
    if (study_lock_live(s, err))
        return NULL;
    json_t *o = NULL;
    trial_rec *t = study_find_pending(s, trial_id, err);
    if (t) {
        free(t->reason);
        t->reason = reason ? strdup(reason) : NULL;
        if (study_abandon_apply(s, t, TRIAL_FAILED)) {
            study_abort_txn(s, err);
        } else if (study_persist(s, &t, "b", 1, 1, err) == 0) {
            o = study_trial_json(s, t);
            study_wake(s);
        }
    }
    return study_unlock_settle(s, o, err);
}

json_t *study_trial(study *s, int64_t trial_id, api_error *err)
{
    if (study_lock_live(s, err))
        return NULL;
    trial_rec *t = study_find_trial(s, trial_id, err);
    json_t *o = t ? study_trial_json(s, t) : NULL;
    return study_unlock_settle(s, o, err);
}

json_t *study_trials(study *s, int state, int64_t after, size_t limit, api_error *err)
{
    if (study_lock_live(s, err))
        return NULL;
    json_t *arr = json_array(), *next = json_null();
    size_t taken = 0;
    for (size_t i = after > 0 ? (size_t)after : 0; i < s->n_trials; i++) {
        if (state >= 0 && s->trials[i].state != (trial_state)state)
            continue;
        if (taken == limit) {
            char c[32];
            snprintf(c, sizeof c, "%lld", (long long)json_integer_value(
                json_object_get(json_array_get(arr, taken - 1), "id")));
            json_decref(next);
            next = json_string(c);
            break;
        }
        json_array_append_new(arr, study_trial_json(s, &s->trials[i]));
        taken++;
    }
    return study_unlock_settle(s, json_pack("{s:o,s:o}", "trials", arr, "next_cursor", next), err);
}

json_t *study_best(study *s, api_error *err)
{
    if (study_lock_live(s, err))
        return NULL;
    json_t *o = s->best ? study_trial_json(s, &s->trials[s->best - 1]) : NULL;
    if (!o)
        api_fail(err, API_NOT_FOUND, NULL, "no completed trial yet");
    return study_unlock_settle(s, o, err);
}

json_t *study_observe(study *s, const double *xs, const double *values, size_t n,
                      api_error *err)
{
    if (study_lock_live(s, err))
        return NULL;
    json_t *o = NULL;
    size_t dim = s->spec.dim;
    for (size_t i = 0; i < n; i++) {
        kb_error kerr = {0};
        if (kb_engine_observe(s->engine, xs + i * dim, study_engine_value(s, values[i]), &kerr)) {
            char field[API_FIELD_MAX];
            snprintf(field, sizeof field, "observations[%zu]", i);
            study_abort_txn(s, err); /* undoes the observations applied so far */
            api_fail(err, API_INVALID, field, "%s", kerr.message);
            goto out;
        }
    }
    int64_t now = now_ms();
    if (study_begin_write(s, 1)) {
        study_abort_txn(s, err);
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        const double *x = xs + i * dim;
        if (study_append_event(s, 'o', 0, study_engine_value(s, values[i]), x) ||
            store_observation_insert(registry.cfg.db, s->id, s->seq, x, dim, values[i], now)) {
            study_abort_txn(s, err);
            goto out;
        }
    }
    if (study_finish_txn(s)) {
        study_abort_txn(s, err);
        goto out;
    }
    o = json_pack("{s:I}", "added", (json_int_t)n);
out:
    return study_unlock_settle(s, o, err);
}

json_t *study_export_json(study *s, api_error *err)
{
    if (study_lock_live(s, err))
        return NULL;
    json_t *arr = json_array();
    for (size_t i = 0; i < s->n_trials; i++)
        json_array_append_new(arr, study_trial_json(s, &s->trials[i]));
    json_t *o = json_pack("{s:o,s:o}", "study", study_json_locked(s, 1), "trials", arr);
    return study_unlock_settle(s, o, err);
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

char *study_export_csv(study *s, size_t *len, api_error *err)
{
    if (study_lock_live(s, err))
        return NULL;
    char *buf = NULL;
    FILE *f = open_memstream(&buf, len);
    if (!f) {
        pthread_mutex_unlock(&s->mu);
        api_fail(err, API_INTERNAL, NULL, "out of memory");
        return NULL;
    }
    const study_spec *sp = &s->spec;
    char num[KB_DOUBLE_BUF];
    fputs("id,state,worker,value", f);
    for (size_t j = 0; j < sp->dim; j++) {
        if (sp->space == SPACE_BOX) {
            fputc(',', f);
            csv_put_string(f, sp->params[j].name);
        } else {
            fprintf(f, ",x%zu", j);
        }
    }
    fputc('\n', f);
    for (size_t i = 0; i < s->n_trials; i++) {
        const trial_rec *t = &s->trials[i];
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
    fclose(f);
    if (!study_unlock_settle(s, json_true(), err)) {
        free(buf);
        return NULL;
    }
    return buf;
}

