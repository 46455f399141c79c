/*
 * rebuild.c - This file contains how a study is built from the store: its engine from
 * the spec (space, levels, config), its candidates from a candidate set, and its whole
 * state (engine and trials) from the latest snapshot plus the replay of the events after
 * it. Used at start-up (registration, then restore in the background or on first use)
 * and after a failed commit (memory is rebuilt to what the store holds).
 *
 * Invariant: a rebuild leaves s->engine equal to the replay of events 1..s->seq, and
 * s->trials[i] holding the trials row of id i + 1; a replayed ask must return the
 * recorded handle, otherwise the rebuild fails (logged) and the study is not served.
 * A replayed ask is given its trial's x (kb_engine_ask_recorded): where the engine now
 * chooses another point (a newer kbandit), the trial is adopted at x and the rebuild
 * logs one warning with the count, so told values stay paired with the points the
 * workers evaluated. A snapshot of a format before 3 (no points) is passed over: every
 * event is replayed (events are never pruned), once, until the next snapshot.
 * A rebuild that failed because the store could not be read ("database is locked", an
 * I/O error) or memory ran out is retried by the next operation on the study, after a
 * backoff that doubles up to REBUILD_BACKOFF_MAX seconds; one whose history the engine
 * rejects is not.
 */
#include "study_internal.h"

#include "log.h"

#include <math.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fail_engine(api_error *err, const kb_error *kerr)
{
    if (strcmp(kerr->field, "dim") == 0) /* the space as a whole is too wide for the engine */
        return api_fail(err, API_INVALID, "space", "%s", kerr->message);
    const char *prefix = strncmp(kerr->field, "candidates", 10) == 0 ? "space." : "engine.settings.";
    return api_fail_kb(err, kerr, prefix);
}

/* Integer and categorical parameters: pool points on their values, choices unordered;
 * under rules 2 a log-scale integer's values at their own log positions (a continuum
 * rounded handed out one value again and again where its values lie far apart). */
static int set_levels(const study_spec *sp, kb_space *space, kb_error *kerr)
{
    size_t *levels = malloc(sp->dim * sizeof *levels);
    unsigned char *cat = malloc(sp->dim);
    double *low = calloc(sp->dim, sizeof *low);
    int rc = KB_ENOMEM, logs = 0;
    if (levels && cat && low) {
        proto_box_levels(sp, levels, cat);
        for (size_t j = 0; sp->rules >= 2 && j < sp->dim; j++)
            if ((low[j] = proto_log_int_low(&sp->params[j])) > 0) {
                levels[j] = (size_t)(sp->params[j].high - sp->params[j].low) + 1;
                logs = 1;
            }
        rc = kb_space_set_levels(space, levels, cat, kerr);
        if (rc == KB_OK && logs)
            rc = kb_space_set_log_levels(space, low, kerr);
    } else {
        *kerr = (kb_error){.code = KB_ENOMEM, .message = "out of memory"};
    }
    free(levels);
    free(cat);
    free(low);
    return rc;
}

static kb_engine *engine_build(const study_spec *sp, kb_error *kerr)
{
    kb_space *space = sp->space == SPACE_BOX
                          ? kb_space_new_box(sp->dim, (size_t)kb_config_number(sp->cfg, "pool_size"), kerr)
                          : kb_space_new_finite(sp->candidates, sp->rows, sp->dim, kerr);
    if (space && sp->space == SPACE_BOX && set_levels(sp, space, kerr)) {
        kb_space_free(space);
        space = NULL;
    }
    kb_engine *e = space ? kb_engine_create(sp->cfg, space, kerr) : NULL;
    kb_space_free(space);
    return e;
}

kb_engine *study_engine_new(const study_spec *sp, api_error *err)
{
    kb_error kerr = {0};
    kb_engine *e = engine_build(sp, &kerr);
    if (!e)
        fail_engine(err, &kerr);
    return e;
}

/* Loads the rows of a candidate_set reference into the spec. */
int study_load_candidates(study_spec *sp, api_error *err)
{
    if (sp->space != SPACE_CANDIDATES || !sp->candidate_set)
        return 0;
    char *names = NULL;
    int rc = store_candidate_set_get(registry.cfg.db, sp->candidate_set, &sp->candidates, &sp->rows,
                                     &sp->dim, &names);
    /* the store holds them as written by json_dumps: a failed load is memory's */
    int oom = rc == 0 && names && !(sp->column_names = json_loads(names, 0, NULL));
    free(names);
    if (rc == STORE_NOTFOUND)
        return api_fail(err, API_INVALID, "space.candidate_set", "no candidate set %lld",
                        (long long)sp->candidate_set);
    if (oom)
        return api_fail(err, API_INTERNAL, NULL, "out of memory");
    return rc ? api_fail(err, API_INTERNAL, NULL, "database error") : 0;
}

int study_trials_reserve(study *s, size_t need)
{
    if (need <= s->cap_trials)
        return 0;
    size_t nc = s->cap_trials ? s->cap_trials : 64;
    while (nc < need)
        nc *= 2;
    trial_rec *t = realloc(s->trials, nc * sizeof *t);
    if (!t)
        return -1;
    s->trials = t;
    s->cap_trials = nc;
    return 0;
}

int study_better(const study *s, double a, double b)
{
    return s->spec.minimize ? a < b : a > b;
}

uint64_t study_engine_count(const study *s, const char *name)
{
    double v;
    kb_engine_stat(s->engine, name, &v, NULL); /* v = 0 for a figure the engine lacks */
    return (uint64_t)v;
}

/* Accounts for trial t's state in counts/best/first_pending. */
static void trial_account(study *s, const trial_rec *t)
{
    s->counts[t->state]++;
    if (t->state == TRIAL_COMPLETED &&
        (!s->best || study_better(s, t->value, s->trials[s->best - 1].value)))
        s->best = t->id;
}

static int load_trial_cb(void *ud, const trial_rec *t)
{
    study *s = ud;
    if ((size_t)t->id != s->n_trials + 1 || study_trials_reserve(s, s->n_trials + 1) ||
        trial_rec_copy(&s->trials[s->n_trials], t, s->spec.dim))
        return -1;
    s->n_trials++;
    trial_account(s, t);
    return 0;
}

typedef struct replay_ctx {
    study *s;
    kb_error kerr;
    int rejected; /* the engine refused an event: the history, not the store, is at fault */
} replay_ctx;

/* The engine refused what the store holds. Running out of memory is no refusal: the
 * same history replays once memory is available, so such a rebuild is retried. */
static int refused(const kb_error *kerr)
{
    return kerr->code != KB_ENOMEM;
}

static int replay_cb(void *ud, const store_event *ev)
{
    replay_ctx *rc = ud;
    kb_engine *e = rc->s->engine;
    int r = 0;
    if (ev->kind == 'a') {
        kb_point pt;
        r = kb_engine_ask_recorded(e, ev->x, &pt, &rc->kerr);
        if (r == 0 && pt.handle != (uint64_t)ev->trial_id)
            r = -1, snprintf(rc->kerr.message, sizeof rc->kerr.message,
                             "replayed ask diverged at event %lld", (long long)ev->seq);
    } else if (ev->kind == 't') {
        r = kb_engine_tell(e, (uint64_t)ev->trial_id, ev->value, &rc->kerr);
    } else if (ev->kind == 'b') {
        r = kb_engine_abandon(e, (uint64_t)ev->trial_id, &rc->kerr);
    } else {
        r = kb_engine_observe(e, ev->x, ev->value, &rc->kerr);
    }
    rc->s->seq = ev->seq;
    rc->rejected = r != 0 && refused(&rc->kerr);
    return r;
}

/* Study id's spec from its stored config: parsed, its candidate set read, its engine
 * config built. 0, or -1 with err, logged: API_INTERNAL when memory or the store failed
 * (worth a retry: out of memory is no fault of the stored config), else the config is
 * invalid. */
static int spec_load(int64_t id, const char *config, study_spec *spec, api_error *err)
{
    memset(spec, 0, sizeof *spec); /* left empty on failure */
    /* A jansson allocation that failed while the spec was read may have left a part out
     * (a categorical's choices) without an error: such a spec is retried, never served.
     * The flag is put back as found for the request this restore may run in. */
    int before = proto_json_alloc_take();
    json_t *doc = proto_parse_object(config, strlen(config), err);
    int rc = !doc || proto_study_spec_parse_stored(doc, spec, err);
    if (!rc && proto_json_alloc_take()) {
        proto_study_spec_clear(spec);
        rc = api_fail(err, API_INTERNAL, NULL, "out of memory");
    }
    proto_json_alloc_put_back(before);
    if (rc) {
        json_decref(doc);
        log_json(LOG_ERROR,
                 err->code == API_INTERNAL ? "cannot read a stored study config"
                                           : "stored study config invalid",
                 json_pack("{s:I,s:s,s:s}", "study", (json_int_t)id, "field", err->field,
                           "error", err->message));
        return -1;
    }
    json_decref(doc);
    if (study_load_candidates(spec, err) || proto_study_spec_config(spec, err)) {
        log_json(LOG_ERROR, "stored study cannot be rebuilt",
                 json_pack("{s:I,s:s,s:s,s:b}", "study", (json_int_t)id, "field",
                           err->field, "error", err->message, "retried",
                           err->code == API_INTERNAL));
        proto_study_spec_clear(spec);
        return -1;
    }
    return 0;
}

_Static_assert(offsetof(study_spec, name) == 0, "spec_complete keeps the name, first");

/* Loads the spec its registration could not (s->mu held): 0, or REBUILD_RETRY /
 * REBUILD_REJECTED. The name is not written: listings and the name check read it
 * without s->mu. */
static int spec_complete(study *s)
{
    study_spec spec;
    api_error err = {0};
    if (spec_load(s->id, s->stored_config, &spec, &err))
        return err.code == API_INTERNAL ? REBUILD_RETRY : REBUILD_REJECTED;
    size_t skip = sizeof spec.name;
    memcpy((char *)&s->spec + skip, (char *)&spec + skip, sizeof spec - skip);
    free(spec.name);
    free(s->stored_config);
    s->stored_config = NULL;
    atomic_store(&s->spec_loaded, 1);
    return 0;
}

/* Asks that replayed to other points than their trials' (this kbandit's engines choose
 * differently from the one that handed them out) were adopted: the model holds the
 * trials' points, but the study no longer follows one engine's choices. Said once per
 * rebuild. */
static atomic_uint_fast64_t adopted_total;

uint64_t study_adopted_total(void)
{
    return atomic_load(&adopted_total);
}

static void warn_adopted(const study *s)
{
    kb_stats st = {.size = sizeof st};
    kb_engine_stats(s->engine, &st, NULL);
    atomic_fetch_add(&adopted_total, st.adopted);
    if (st.adopted)
        log_json(LOG_WARN, "replayed asks adopted",
                 json_pack("{s:I,s:I,s:s}", "study", (json_int_t)s->id, "adopted",
                           (json_int_t)st.adopted, "reason",
                           "the engine now chooses other points than those handed out"));
}

/* Rebuilds engine and trials of s from the store (s->mu held or s unpublished). Returns
 * 0, REBUILD_RETRY when the store could not be read or memory ran out (perhaps for a
 * moment), or
 * REBUILD_REJECTED when the engine cannot be built from what the store holds. */
int study_rebuild(study *s)
{
    int spec = s->stored_config ? spec_complete(s) : 0;
    if (spec)
        return spec;
    kb_engine_free(s->engine);
    s->engine = NULL;
    for (size_t i = 0; i < s->n_trials; i++) {
        trial_rec_clear(&s->trials[i]);
    }
    s->n_trials = s->first_pending = 0;
    s->best = 0;
    s->ticket = s->durable = 0;
    memset(s->counts, 0, sizeof s->counts);
    unsigned char *snap = NULL;
    size_t len = 0;
    replay_ctx rc = {.s = s};
    int r = store_snapshot_latest(registry.cfg.db, s->id, &snap, &len, &s->snap_seq);
    uint32_t format = r == 0 ? kb_snapshot_version(snap, len) : 0;
    if (format == 1 || format == 2) {
        /* its asks carry no points: replay every event, with the trials' points */
        free(snap);
        r = STORE_NOTFOUND;
    }
    if (r == 0) {
        s->engine = kb_engine_restore(snap, len, &rc.kerr);
        free(snap);
        if (!s->engine && rc.kerr.code != KB_ENOMEM) {
            /* A snapshot this build cannot read (damaged, or of a format it does not
             * know) is no loss: events are never pruned, so replay them all. */
            log_json(LOG_WARN, "snapshot passed over",
                     json_pack("{s:I,s:I,s:s}", "study", (json_int_t)s->id, "snapshot_seq",
                               (json_int_t)s->snap_seq, "error", rc.kerr.message));
            r = STORE_NOTFOUND;
            rc.kerr = (kb_error){0};
        }
    }
    if (r == STORE_NOTFOUND) {
        s->snap_seq = 0;
        s->engine = engine_build(&s->spec, &rc.kerr);
    } else if (r != 0) {
        snprintf(rc.kerr.message, sizeof rc.kerr.message, "snapshot unreadable");
    }
    rc.rejected = !s->engine && (r == 0 || r == STORE_NOTFOUND) && refused(&rc.kerr);
    s->seq = s->snap_seq;
    if (!s->engine || store_events_each(registry.cfg.db, s->id, s->snap_seq, s->spec.dim,
                                        replay_cb, &rc) ||
        store_trials_each(registry.cfg.db, s->id, s->spec.dim, load_trial_cb, s)) {
        /* A damaged database file stays so: no retry, the study counts as failed (it
         * stayed "restoring" and answered 503 for good: ops review, fifty-seventh
         * session). Otherwise a read error may pass (I/O, a lock). */
        char why[256] = "";
        if (!rc.rejected && store_read_error(registry.cfg.db, why, sizeof why))
            rc.rejected = 1;
        else if (!rc.rejected && rc.kerr.message[0])
            why[0] = 0; /* the engine's error says it (the connection's may be stale) */
        log_json(LOG_ERROR, "study rebuild failed",
                 json_pack("{s:I,s:I,s:s,s:s?,s:b}", "study", (json_int_t)s->id, "seq",
                           (json_int_t)s->seq, "error",
                           rc.kerr.message[0] ? rc.kerr.message : "database read failed",
                           "reason", why[0] ? why : NULL, "retried", !rc.rejected));
        return rc.rejected ? REBUILD_REJECTED : REBUILD_RETRY;
    }
    s->epoch = study_engine_count(s, "epoch");
    if (s->epoch > s->epoch_high)
        s->epoch_high = s->epoch;
    warn_adopted(s);
    return 0;
}

study *study_alloc(int64_t id, int64_t created_ms, study_spec *spec)
{
    study *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->id = id;
    s->created_ms = created_ms;
    s->spec = *spec;
    memset(spec, 0, sizeof *spec);
    atomic_init(&s->refs, 1);
    atomic_init(&s->restore, RESTORE_PENDING);
    atomic_init(&s->state, STUDY_ACTIVE);
    atomic_init(&s->spec_loaded, 1);
    pthread_mutex_init(&s->mu, NULL);
    pthread_mutex_init(&s->stats_mu, NULL);
    return s;
}

/* A study whose spec could not be loaded (err): registered with its name and, when the
 * failure may pass, its stored config for the rebuild to load (restore pending); with an
 * invalid config, failed (answers 500). NULL: out of memory. */
static study *study_alloc_unloaded(int64_t id, const char *name, const char *config,
                                   int64_t created_ms, const api_error *err)
{
    int retry = err->code == API_INTERNAL;
    study_spec spec = {.name = strdup(name)};
    study *s = spec.name ? study_alloc(id, created_ms, &spec) : NULL;
    if (!s || (retry && !(s->stored_config = strdup(config)))) {
        free(spec.name);
        if (s)
            study_free(s);
        return NULL;
    }
    atomic_store(&s->spec_loaded, 0);
    atomic_store(&s->restore, retry ? RESTORE_PENDING : RESTORE_FAILED);
    return s;
}

/* A study whose spec cannot be loaded is registered all the same (study_alloc_unloaded):
 * the daemon serves the others, and only a database it cannot read at all, or memory
 * for the study itself, stops the start-up. */
int study_load_stored(void *ud, int64_t id, const char *name, const char *config,
                      int64_t created_ms, const char *state)
{
    (void)ud;
    api_error err = {0};
    study_spec spec;
    study_state st;
    if (proto_study_state_parse(state, &st)) { /* the table's CHECK allows no other */
        log_json(LOG_ERROR, "stored study state invalid",
                 json_pack("{s:I,s:s}", "study", (json_int_t)id, "state", state));
        return -1;
    }
    study *s = spec_load(id, config, &spec, &err) == 0
                   ? study_alloc(id, created_ms, &spec)
                   : study_alloc_unloaded(id, name, config, created_ms, &err);
    if (!s) {
        proto_study_spec_clear(&spec);
        return -1;
    }
    atomic_store(&s->state, st);
    if (reg_insert(s)) {
        study_free(s);
        return -1;
    }
    reg_count_restore(-1, atomic_load(&s->restore));
    return 0;
}

/* Seconds of the first wait before a failed rebuild is retried; it doubles per failure. */
#define REBUILD_BACKOFF_MIN 1.0
#define REBUILD_BACKOFF_MAX 30.0

/* Rebuilds s (s->mu held) and moves it from state `from` to the outcome's state; a
 * rebuild the store refused is retried no sooner than the backoff allows. */
static int rebuild_into_state(study *s, int from)
{
    int r = study_rebuild(s);
    int state = r == 0 ? RESTORED : r == REBUILD_RETRY ? RESTORE_RETRY : RESTORE_FAILED;
    if (state == RESTORE_RETRY) {
        s->retry_wait = s->retry_wait ? fmin(2 * s->retry_wait, REBUILD_BACKOFF_MAX)
                                      : REBUILD_BACKOFF_MIN;
        s->retry_at = mono_sec() + s->retry_wait;
    } else {
        s->retry_wait = 0;
    }
    atomic_store(&s->restore, state);
    reg_count_restore(from, state);
    return state;
}

/* Restores s from the store unless that was done (s->mu held): by a restore thread or
 * by the first operation on s, whichever locks it first; or, when an earlier rebuild
 * could not read the store, retries it once its backoff has passed. Returns the study's
 * restore state. */
int study_ensure_restored(study *s, const char *by)
{
    int state = atomic_load(&s->restore);
    if (state == RESTORED || state == RESTORE_FAILED ||
        (state == RESTORE_RETRY && mono_sec() < s->retry_at))
        return state;
    double t0 = mono_sec();
    if (rebuild_into_state(s, state) != RESTORED)
        return atomic_load(&s->restore);
    log_json(LOG_INFO, "study restored",
             json_pack("{s:I,s:s,s:I,s:I,s:f,s:s}", "study", (json_int_t)s->id, "name",
                       s->spec.name, "events", (json_int_t)s->seq, "snapshot_seq",
                       (json_int_t)s->snap_seq, "seconds", mono_sec() - t0, "by", by));
    return RESTORED;
}

/* Memory ran ahead of the store (a write failed): rebuild it from the store (s->mu
 * held). If the store cannot be read now, the study waits for a retry. */
void study_resync(study *s)
{
    rebuild_into_state(s, atomic_load(&s->restore));
}
