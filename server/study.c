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
#include "../proto/numfmt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

/* ------------------------------------------------------------ operations */

/* A new study without engine.settings.seed gets one drawn here, stored with its config
 * and shown with it, so that a restart replays its choices as before. Every unseeded
 * study used to run on the option's default 0: two studies of one space handed out the
 * same points, and a deterministic objective gave the same run twice, where a user
 * starting a study again expects a new one (Optuna's and Vizier's samplers seed from
 * entropy unless given a seed). */
static int draw_seed(study_spec *spec, api_error *err)
{
    if (json_object_get(spec->settings, "seed"))
        return 0;
    uint32_t v;
    if (getrandom(&v, sizeof v, GRND_NONBLOCK) != (ssize_t)sizeof v)
        v = (uint32_t)now_ms() ^ ((uint32_t)getpid() << 16); /* no entropy yet at boot */
    if (json_object_set_new(spec->settings, "seed", json_integer(v)))
        return api_fail(err, API_INTERNAL, NULL, "out of memory");
    return 0;
}

/* Held by study_create from its row's insert to its registry entry, so that a create
 * losing the name race (the store's UNIQUE name) answers 409 only once the winner is
 * listed: clients that race to get-or-create a study look it up after a 409, and found
 * nothing when the winner was between its commit and reg_insert. Creates are rare;
 * nothing else takes it. */
static pthread_mutex_t create_mu = PTHREAD_MUTEX_INITIALIZER;

/* The 409 of a name in use, with the study's id: a study whose stored config no longer
 * loads is not listed, and its id is what DELETE needs. */
static void name_taken(const char *name, api_error *err)
{
    int64_t id = reg_name_owner(name);
    if (id)
        api_fail(err, API_CONFLICT, "name", "a study named '%s' exists (id %lld)", name,
                 (long long)id);
    else /* deleted meanwhile */
        api_fail(err, API_CONFLICT, "name", "a study named '%s' exists", name);
}

study *study_create(study_spec *spec, api_error *err)
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
    int locked = 0;
    if (reg_name_owner(spec->name)) {
        name_taken(spec->name, err);
        goto fail;
    }
    if (draw_seed(spec, err) || study_load_candidates(spec, err) ||
        proto_study_spec_config(spec, err) || !(e = study_engine_new(spec, err)))
        goto fail;
    proto_json_alloc_take();
    cfg = proto_study_spec_json(spec, 1);
    text = json_dumps(cfg, JSON_COMPACT);
    /* a failed allocation may have left parts out of cfg, or out of text (jansson's dump
     * ignores a failed append in an object key): such a config must never be stored, it
     * would not load at the next start */
    if (proto_json_alloc_take()) {
        free(text);
        text = NULL;
    }
    if (!text) {
        api_fail(err, API_INTERNAL, NULL, "out of memory");
        goto fail;
    }
    pthread_mutex_lock(&create_mu);
    locked = 1;
    int rc = store_begin(registry.cfg.db);
    if (rc == 0)
        rc = store_study_insert(registry.cfg.db, spec->name, text, created, &id);
    if (rc == 0)
        rc = store_commit(registry.cfg.db);
    if (rc) {
        store_rollback(registry.cfg.db);
        if (rc == STORE_CONFLICT)
            name_taken(spec->name, err);
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
    atomic_fetch_add(&s->refs, 1); /* the caller's, taken before a delete can drop the registry's */
    if (reg_insert(s)) {
        api_fail(err, API_INTERNAL, NULL, "out of memory");
        goto fail;
    }
    pthread_mutex_unlock(&create_mu);
    reg_count_restore(-1, RESTORED);
    json_decref(cfg);
    free(text);
    log_json(LOG_INFO, "study created",
             json_pack("{s:I,s:s,s:s}", "study", (json_int_t)id, "name", s->spec.name,
                       "engine", s->spec.engine));
    return s;
fail:
    if (locked)
        pthread_mutex_unlock(&create_mu);
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

/* Stores s's new state (s->mu held) as a direct write: a rare operation whose answer
 * must be durable, like a creation or a deletion. The row is the study's own and no
 * queued write touches it, so it need not wait for them. */
static int state_write(study *s, study_state to, api_error *err)
{
    int rc = store_begin(registry.cfg.db);
    if (rc == 0)
        rc = store_study_set_state(registry.cfg.db, s->id, proto_study_state_name(to));
    if (rc == 0)
        rc = store_commit(registry.cfg.db);
    if (rc == 0)
        return 0;
    store_rollback(registry.cfg.db);
    return api_fail(err, API_INTERNAL, NULL, "database error");
}

/* Moves s to state `to` (s->mu held): checked, stored, then shown. */
static int state_move(study *s, study_state to, api_error *err)
{
    study_state from = (study_state)atomic_load(&s->state);
    if (to == from)
        return 0;
    if (from == STUDY_COMPLETED)
        return api_fail(err, API_CONFLICT, "state", "study %lld is completed, which is final",
                        (long long)s->id);
    if (state_write(s, to, err))
        return -1;
    atomic_store(&s->state, to);
    study_wake(s); /* long-polls of a paused study: resumed, or completed for good */
    log_json(LOG_INFO, "study state changed",
             json_pack("{s:I,s:s,s:s}", "study", (json_int_t)s->id, "from",
                       proto_study_state_name(from), "to", proto_study_state_name(to)));
    return 0;
}

/* Restores s first, like every operation, so that the change and its answer (which
 * shows the progress) succeed or fail together. */
int study_change_state(study *s, study_state to, study_doc *out, api_error *err)
{
    memset(out, 0, sizeof *out);
    if (study_lock_live(s, err))
        return -1;
    int rc = state_move(s, to, err);
    if (rc == 0)
        rc = study_doc_fill(s, 1, out, err);
    rc = study_unlock_settle(s, rc, err);
    if (rc)
        study_doc_clear(out);
    return rc;
}

/* Copies what a Study shows of s's progress (s->mu held, s restored). */
static int progress_copy(study *s, study_progress *p, api_error *err)
{
    kb_hyperparameters hp;
    kb_engine_hyperparameters(s->engine, &hp);
    memcpy(p->trials, s->counts, sizeof p->trials);
    p->epoch = study_engine_count(s, "epoch");
    p->epoch_asks = study_engine_count(s, "epoch_asks");
    p->last_batch = study_engine_count(s, "last_batch");
    p->dict_size = study_engine_count(s, "dict_size");
    p->model_rows = study_engine_count(s, "model_rows");
    p->choice_floor_pools = study_engine_count(s, "choice_floor_pools");
    p->climb_pools = study_engine_count(s, "climb_pools");
    p->init_phase = study_engine_count(s, "init_phase") != 0;
    kb_stats st = {.size = sizeof st};
    kb_engine_stats(s->engine, &st, NULL);
    p->deterministic = st.deterministic;
    p->observations = st.observed;
    p->fitted = hp.fitting;
    p->fits = hp.fits;
    p->kernel_variance = hp.kernel_variance;
    p->noise = hp.noise;
    p->categorical_mix = hp.categorical_mix;
    p->interior_prior = hp.interior_prior;
    p->lengthscales = malloc((hp.dim ? hp.dim : 1) * sizeof *p->lengthscales);
    if (!p->lengthscales)
        return api_fail(err, API_INTERNAL, NULL, "out of memory");
    p->dim = hp.dim;
    memcpy(p->lengthscales, hp.lengthscales, hp.dim * sizeof *p->lengthscales);
    return s->best ? study_trial_copy(s, &s->trials[s->best - 1], &p->best, err) : 0;
}

int study_doc_fill(study *s, int with_progress, study_doc *out, api_error *err)
{
    memset(out, 0, sizeof *out);
    out->id = s->id;
    out->created_ms = s->created_ms;
    out->spec = &s->spec;
    out->state = (study_state)atomic_load(&s->state);
    out->has_progress = with_progress;
    if (with_progress && progress_copy(s, &out->progress, err)) {
        study_doc_clear(out);
        return -1;
    }
    return 0;
}

int study_describe(study *s, study_doc *out, api_error *err)
{
    memset(out, 0, sizeof *out);
    if (study_lock_live(s, err))
        return -1;
    int rc = study_unlock_settle(s, study_doc_fill(s, 1, out, err), err);
    if (rc)
        study_doc_clear(out);
    return rc;
}

static const char *ask_status_name(kb_ask_status st)
{
    return st == KB_ASK_AWAIT_FEEDBACK ? "awaiting_feedback" : st == KB_ASK_EXHAUSTED ? "exhausted" : "ok";
}

/* An ask answered before the engine is asked (s->mu held): no trial, for reason `why`. */
static int hand_out_none(const study *s, kb_ask_result *res, const char **status,
                         const char *why)
{
    *status = why;
    memset(res, 0, sizeof *res);
    res->awaiting = s->counts[TRIAL_PENDING];
    return 0;
}

/* One ask attempt (s->mu held): hands out up to count points and queues their write
 * (committed, not fsynced: the caller's answer waits for the commit). Returns the number
 * handed out, or -1. */
static int ask_once(study *s, const ask_req *req, kb_ask_result *res, const char **status,
                    api_error *err)
{
    size_t count = (size_t)req->count;
    study_state state = (study_state)atomic_load(&s->state);
    if (state != STUDY_ACTIVE)
        return hand_out_none(s, res, status,
                             state == STUDY_PAUSED ? "study_paused" : "study_completed");
    if (s->spec.max_trials) {
        size_t left = s->n_trials >= (size_t)s->spec.max_trials ? 0 : (size_t)s->spec.max_trials - s->n_trials;
        if (left == 0)
            return hand_out_none(s, res, status, "max_trials_reached");
        if (count > left)
            count = left;
    }
    kb_point pts[PROTO_ASK_MAX];
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
                       .worker = req->worker, .request_id = req->request_id,
                       .cand_index = s->spec.space == SPACE_CANDIDATES ? (int64_t)pts[i].index : -1,
                       .created_ms = now, .lease_ms = now + s->spec.lease_seconds * 1000,
                       .x = (double *)pts[i].x};
        if (t.id != (int64_t)(base + i + 1) || trial_rec_copy(&s->trials[base + i], &t, s->spec.dim)) {
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

/* Whether t is a pending trial of the ask req retries (same worker and request_id). */
static int ask_retry_of(const trial_rec *t, const ask_req *req)
{
    return t->state == TRIAL_PENDING && t->request_id &&
           strcmp(t->request_id, req->request_id) == 0 && strcmp(t->worker, req->worker) == 0;
}

/* Copies trials v[0..n) for an answer (*out: trial_recs_free(*out, n)). */
static int trials_copy(const study *s, const trial_rec *v, size_t n, trial_rec **out,
                       api_error *err)
{
    *out = calloc(n ? n : 1, sizeof **out);
    if (!*out)
        return api_fail(err, API_INTERNAL, NULL, "out of memory");
    for (size_t i = 0; i < n; i++) {
        if (study_trial_copy(s, &v[i], &(*out)[i], err)) {
            trial_recs_free(*out, i);
            *out = NULL;
            return -1;
        }
    }
    return 0;
}

/* An ask retried with its request_id (s->mu held): the pending trials that ask handed
 * out to that worker, copied into out (out->n of them, 0 when none: ask anew). Why: an
 * ask whose answer was lost (a dropped connection, a daemon restart) left its trials
 * pending until their lease expired, 600 s by default, and a closed bbkb batch waited
 * for them (worker-fleet review, fifty-seventh session). Request ids are the client's,
 * one per ask; only pending trials can be the lost ones, so the scan starts at the first
 * of them. Their leases start again, as the answer's first delivery (a relaxed write, as
 * a heartbeat): after a restart they were close to expiring. */
static int retried_ask(study *s, const ask_req *req, ask_answer *out, api_error *err)
{
    size_t n = 0;
    for (size_t i = s->first_pending; i < s->n_trials; i++)
        n += ask_retry_of(&s->trials[i], req);
    if (n == 0)
        return 0;
    int64_t lease = now_ms() + s->spec.lease_seconds * 1000;
    if (study_begin_write(s, 0))
        return study_abort_txn(s, err);
    for (size_t i = s->first_pending; i < s->n_trials; i++) {
        trial_rec *t = &s->trials[i];
        if (!ask_retry_of(t, req))
            continue;
        t->lease_ms = lease;
        if (store_trial_put(registry.cfg.db, s->id, t, s->spec.dim))
            return study_abort_txn(s, err); /* memory rebuilt from the store: old leases */
    }
    if (study_finish_txn(s))
        return study_abort_txn(s, err);
    out->trials = calloc(n, sizeof *out->trials);
    if (!out->trials)
        return api_fail(err, API_INTERNAL, NULL, "out of memory");
    for (size_t i = s->first_pending; i < s->n_trials && out->n < n; i++)
        if (ask_retry_of(&s->trials[i], req) &&
            study_trial_copy(s, &s->trials[i], &out->trials[out->n++], err))
            return -1;
    out->status = "ok"; /* awaiting 0, no retry: as the first answer */
    return 0;
}

int study_ask(study *s, const ask_req *req, ask_answer *out, int *can_wait,
              uint64_t *version, api_error *err)
{
    memset(out, 0, sizeof *out);
    if (atomic_load(&registry.closing))
        return api_fail(err, API_UNAVAILABLE, NULL, "shutting down");
    if (study_lock_live(s, err))
        return -1;
    *can_wait = 0;
    int retried = req->request_id ? retried_ask(s, req, out, err) : 0;
    if (retried || out->n) {
        int rc = study_unlock_settle_relaxed(s, retried, err);
        if (rc)
            proto_ask_answer_clear(out);
        return rc;
    }
    kb_ask_result res;
    const char *status = "ok";
    *version = atomic_load(&s->version);
    size_t first = s->n_trials;
    int n = ask_once(s, req, &res, &status, err);
    if (n < 0) {
        pthread_mutex_unlock(&s->mu);
        return -1;
    }
    /* Feedback can change an empty answer only when the engine waits for it, when
     * pending trials may expire or fail and free excluded candidates, or when a paused
     * study may be resumed (study_change_state wakes its long-polls). Any other empty
     * answer is final: no retry is suggested. */
    int may_change = n == 0 && (strcmp(status, "study_paused") == 0 ||
                                ((res.status == KB_ASK_AWAIT_FEEDBACK ||
                                  (res.status == KB_ASK_EXHAUSTED && s->counts[TRIAL_PENDING])) &&
                                 strcmp(status, "max_trials_reached") != 0));
    *can_wait = may_change && req->wait_ms > 0;
    out->status = status;
    out->awaiting = res.awaiting;
    out->retry_after_ms = may_change ? 1000 : 0;
    int rc = trials_copy(s, &s->trials[first], (size_t)n, &out->trials, err);
    if (rc == 0)
        out->n = (size_t)n;
    rc = study_unlock_settle_relaxed(s, rc, err);
    if (rc)
        proto_ask_answer_clear(out);
    return rc;
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
        char told[KB_DOUBLE_BUF];
        api_fail(err, API_CONFLICT, "value", "trial %lld was already told %s",
                 (long long)id, kb_format_double(told, t->value));
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
int study_tell(study *s, int64_t trial_id, double value, trial_rec *out, api_error *err)
{
    memset(out, 0, sizeof *out);
    if (study_lock_live(s, err))
        return -1;
    int changed;
    trial_rec *t = tell_apply(s, trial_id, value, &changed, err);
    if (t && changed && study_persist(s, &t, "t", 1, 1, err))
        t = NULL;
    if (t && changed)
        study_wake(s);
    return study_answer_trial(s, t, 0, out, err);
}

/* Applies items to the engine and memory (s->mu held), one outcome each in out[]; the
 * trials told (not repeats) are listed in told[0..*nt). 0, or -1 out of memory. */
static int tell_each(study *s, const tell_item *items, size_t n, tell_outcome *out,
                     trial_rec **told, size_t *nt, api_error *err)
{
    for (size_t i = 0; i < n; i++) {
        int changed;
        out[i].trial_id = items[i].trial_id;
        trial_rec *t = tell_apply(s, items[i].trial_id, items[i].value, &changed, &out[i].err);
        if (changed)
            told[(*nt)++] = t;
        if (t && study_trial_copy(s, t, &out[i].trial, err))
            return -1;
    }
    return 0;
}

int study_tell_batch(study *s, const tell_item *items, size_t n, tell_outcome **out,
                     api_error *err)
{
    *out = NULL;
    if (study_lock_live(s, err))
        return -1;
    tell_outcome *v = calloc(n ? n : 1, sizeof *v);
    trial_rec **told = malloc((n ? n : 1) * sizeof *told);
    char *kinds = malloc(n ? n : 1);
    size_t nt = 0;
    int rc = -1;
    if (!v || !told || !kinds) {
        api_fail(err, API_INTERNAL, NULL, "out of memory");
    } else {
        memset(kinds, 't', n);
        rc = tell_each(s, items, n, v, told, &nt, err);
    }
    /* Tells applied to the engine are recorded even when an answer could not be copied. */
    if (nt && study_persist(s, told, kinds, nt, 1, err))
        rc = -1;
    else if (nt)
        study_wake(s);
    free(told);
    free(kinds);
    rc = study_unlock_settle(s, rc, err);
    if (rc)
        proto_tell_outcomes_free(v, n);
    else
        *out = v;
    return rc;
}

/* A retried fail (its first answer lost): the trial failed already, for the same reason. */
static int fail_repeated(const trial_rec *t, const char *reason)
{
    return t->state == TRIAL_FAILED &&
           (t->reason && reason ? strcmp(t->reason, reason) == 0 : t->reason == reason);
}

int study_fail(study *s, int64_t trial_id, const char *reason, trial_rec *out,
               api_error *err)
{
    memset(out, 0, sizeof *out);
    if (study_lock_live(s, err))
        return -1;
    trial_rec *t = study_find_trial(s, trial_id, err);
    if (t && fail_repeated(t, reason))
        return study_answer_trial(s, t, 0, out, err);
    t = study_find_pending(s, trial_id, err);
    if (t) {
        free(t->reason);
        t->reason = reason ? strdup(reason) : NULL;
        if (study_abandon_apply(s, t, TRIAL_FAILED)) {
            study_abort_txn(s, err);
            t = NULL;
        } else if (study_persist(s, &t, "b", 1, 1, err)) {
            t = NULL;
        } else {
            study_wake(s);
        }
    }
    return study_answer_trial(s, t, 0, out, err);
}

int study_trial(study *s, int64_t trial_id, trial_rec *out, api_error *err)
{
    memset(out, 0, sizeof *out);
    if (study_lock_live(s, err))
        return -1;
    return study_answer_trial(s, study_find_trial(s, trial_id, err), 0, out, err);
}

/* The trial the engine's model rates best (kb_engine_recommend; s->mu held, some trial
 * completed): the best value's trial where the engine has no model or no told trial to
 * rate (observations only); NULL after failing err. */
static trial_rec *model_best(study *s, api_error *err)
{
    uint64_t h = 0;
    kb_error kerr = {0};
    double t0 = mono_sec();
    int rc = kb_engine_recommend(s->engine, &h, &kerr);
    s->engine_sec += mono_sec() - t0;
    if (rc == KB_EUNSUPPORTED || rc == KB_ENOTFOUND)
        return &s->trials[s->best - 1];
    if (rc == KB_OK)
        return study_find_trial(s, (int64_t)h, err);
    api_fail_kb(err, &kerr, NULL);
    return NULL;
}

int study_best(study *s, int by_model, trial_rec *out, api_error *err)
{
    memset(out, 0, sizeof *out);
    if (study_lock_live(s, err))
        return -1;
    trial_rec *t = s->best ? &s->trials[s->best - 1] : NULL;
    if (!t)
        api_fail(err, API_NOT_FOUND, NULL, "no completed trial yet");
    else if (by_model)
        t = model_best(s, err);
    return study_answer_trial(s, t, 0, out, err);
}

/* Copies the trials of a page (s->mu held); see study_trials. */
static int trials_page(study *s, int state, int64_t after, size_t limit, trial_rec *v,
                       size_t *n, int64_t *next_cursor, api_error *err)
{
    for (size_t i = after > 0 ? (size_t)after : 0; i < s->n_trials; i++) {
        if (state >= 0 && s->trials[i].state != (trial_state)state)
            continue;
        if (*n == limit) {
            *next_cursor = v[*n - 1].id;
            break;
        }
        if (study_trial_copy(s, &s->trials[i], &v[*n], err))
            return -1;
        (*n)++;
    }
    return 0;
}

int study_trials(study *s, int state, int64_t after, size_t limit, trial_rec **out,
                 size_t *n, int64_t *next_cursor, api_error *err)
{
    *out = NULL;
    *n = 0;
    *next_cursor = 0;
    if (study_lock_live(s, err))
        return -1;
    trial_rec *v = calloc(limit ? limit : 1, sizeof *v);
    int rc = v ? trials_page(s, state, after, limit, v, n, next_cursor, err)
               : api_fail(err, API_INTERNAL, NULL, "out of memory");
    rc = study_unlock_settle(s, rc, err);
    if (rc) {
        trial_recs_free(v, *n);
        *n = 0;
        *next_cursor = 0;
    } else {
        *out = v;
    }
    return rc;
}

/* Applies and records observations (s->mu held); on failure the study is rebuilt. */
static int observe_locked(study *s, const double *xs, const double *values, size_t n,
                          api_error *err)
{
    size_t dim = s->spec.dim;
    for (size_t i = 0; i < n; i++) {
        kb_error kerr = {0};
        if (kb_engine_observe(s->engine, xs + i * dim, study_engine_value(s, values[i]), &kerr)) {
            char field[API_FIELD_MAX];
            snprintf(field, sizeof field, "observations[%zu]", i);
            study_abort_txn(s, err); /* undoes the observations applied so far */
            if (kerr.code != KB_EINVAL && kerr.code != KB_ERANGE) /* not the input's fault: */
                return api_fail_kb(err, &kerr, NULL);             /* out of memory, numbers */
            return api_fail(err, API_INVALID, field, "%s", kerr.message);
        }
    }
    int64_t now = now_ms();
    if (study_begin_write(s, 1))
        return study_abort_txn(s, err);
    for (size_t i = 0; i < n; i++) {
        const double *x = xs + i * dim;
        if (study_append_event(s, 'o', 0, study_engine_value(s, values[i]), x) ||
            store_observation_insert(registry.cfg.db, s->id, s->seq, x, dim, values[i], now))
            return study_abort_txn(s, err);
    }
    return study_finish_txn(s) ? study_abort_txn(s, err) : 0;
}

int study_observe(study *s, const double *xs, const double *values, size_t n,
                  api_error *err)
{
    if (study_lock_live(s, err))
        return -1;
    return study_unlock_settle(s, observe_locked(s, xs, values, n, err), err);
}

/* store_observations_each's callback: one more row of the set (ud), copied. */
typedef struct obs_ctx {
    observation_set *set;
    size_t dim;
} obs_ctx;

static int obs_append(void *ud, const double *x, double value, int64_t created_ms)
{
    obs_ctx *c = ud;
    observation_set *o = c->set;
    if (o->n == o->cap) {
        size_t cap = o->cap ? 2 * o->cap : 16;
        double *nx = realloc(o->x, cap * c->dim * sizeof *nx);
        if (nx)
            o->x = nx;
        double *nv = realloc(o->value, cap * sizeof *nv);
        if (nv)
            o->value = nv;
        int64_t *nt = realloc(o->created_ms, cap * sizeof *nt);
        if (nt)
            o->created_ms = nt;
        if (!nx || !nv || !nt)
            return -1;
        o->cap = cap;
    }
    memcpy(o->x + o->n * c->dim, x, c->dim * sizeof *x);
    o->value[o->n] = value;
    o->created_ms[o->n++] = created_ms;
    return 0;
}

int study_export(study *s, study_doc *doc, trial_rec **trials, size_t *n,
                 observation_set *obs, api_error *err)
{
    memset(doc, 0, sizeof *doc);
    memset(obs, 0, sizeof *obs);
    *trials = NULL;
    *n = 0;
    if (study_lock_live(s, err))
        return -1;
    int rc = study_doc_fill(s, 1, doc, err);
    if (rc == 0)
        rc = trials_copy(s, s->trials, s->n_trials, trials, err);
    if (rc == 0)
        *n = s->n_trials;
    obs_ctx oc = {obs, s->spec.dim};
    if (rc == 0 && store_observations_each(registry.cfg.db, s->id, s->spec.dim, obs_append, &oc))
        rc = api_fail(err, API_INTERNAL, NULL, "reading the study's observations failed");
    rc = study_unlock_settle(s, rc, err);
    if (rc) {
        study_doc_clear(doc);
        trial_recs_free(*trials, *n);
        observation_set_clear(obs);
        *trials = NULL;
        *n = 0;
    }
    return rc;
}
