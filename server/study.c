/*
 * study.c - This file contains the registry of live studies and the study operations.
 *
 * Layers: (1) the registry (array by id under an rwlock); (2) building a study's engine
 * and rebuilding a whole study from the store (recovery, and repair after a failed
 * commit); (3) start-up: registering the stored studies, and restoring them in the
 * background or on first use; (4) the write path shared by every mutation; (5) the
 * operations.
 *
 * Start-up (issue 16): registry_open only registers the stored studies (their specs), so
 * the daemon serves at once; their engines and trials are restored by restore threads in
 * id order, or by the first operation on a study that is not restored yet, whichever
 * takes the study's mutex first (so a study is restored exactly once, by the same
 * study_rebuild as any other time, hence with the same asks).
 *
 * Invariants, for a study s with s->mu held:
 *   - unless s->restore == RESTORED, nothing but the spec is loaded: only lock_live (which
 *     restores), delete and shutdown touch such a study, and listings show it without
 *     progress;
 *   - s->engine is exactly the engine obtained by replaying the study's events 1..s->seq
 *     in the store, and s->trials[i] mirrors the trials row of id i + 1 (trial id ==
 *     engine handle);
 *   - a mutation changes the engine first, then queues its trial rows and events as one
 *     write operation of the store (group commit) and takes its ticket; s->mu is
 *     released before the commit, which the operation then waits for (unlock_settle),
 *     so the mutations of one study share an fsync instead of queueing behind each
 *     other's. Memory may thus run ahead of disk only by writes already queued, in
 *     order, and every answer waits for the commit of the study's last write (s->ticket)
 *     and for the fsync of its last durable write (s->durable) first, so nothing is
 *     acknowledged, and no state shown, before it is durable. Relaxed answers (ask,
 *     heartbeat, expiry) wait for the commit only: their own write needs no fsync, and
 *     the commit alone survives a kill of the process, so a trial is never handed out
 *     twice; they never wait for the fsync of another client's tell;
 *   - if a commit fails, the study is rebuilt from the store (which still holds the state
 *     before the failed batch): by the waiter of the failed ticket, or by the next write,
 *     which checks its predecessor's ticket before queueing (begin_write);
 *   - values told to the engine are negated for minimize studies (engines maximize);
 *     trial values are kept in the user's direction.
 */
#include "study.h"

#include "log.h"
#include "../proto/csv.h"
#include "../proto/numfmt.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Where a study stands in its restore after a start. */
typedef enum restore_state {
    RESTORE_PENDING = 0, /* registered from the store; engine and trials not loaded yet */
    RESTORED,            /* loaded (a study created by this process is born so) */
    RESTORE_FAILED,      /* its events did not replay exactly (logged): answers 500 */
    RESTORE__STATES
} restore_state;

struct study {
    /* Immutable after creation: readable without a lock. */
    int64_t id;
    int64_t created_ms;
    study_spec spec;
    atomic_int refs;
    atomic_uint_fast64_t version; /* bumped on feedback, delete and shutdown */

    pthread_mutex_t mu; /* protects every field below */
    kb_engine *engine;
    trial_rec *trials;  /* trials[i].id == i + 1 */
    size_t n_trials, cap_trials;
    size_t first_pending; /* no pending trial below this index (sweeper hint) */
    size_t counts[TRIAL__STATES];
    int64_t best;       /* id of the best completed trial, 0 when none */
    int64_t seq;        /* last event seq written */
    int64_t snap_seq;   /* seq of the stored snapshot */
    uint64_t epoch;     /* engine epoch at the last dictionary row */
    uint64_t epoch_high; /* highest epoch seen: a rebuild to an older one does not lower it */
    uint64_t ticket;    /* store ticket of the last write (0: none since the rebuild) */
    uint64_t durable;   /* ticket of the last durable write (0: none since the rebuild) */
    int writing_durable; /* the write being recorded (begin_write .. finish_txn) */
    double engine_sec;  /* cumulated engine call time */
    int deleted;
    /* A restore_state, changed under mu; read without it where waiting behind a restore
     * (seconds) must be avoided: listing, sweeps, statistics. Once RESTORED it stays. */
    atomic_int restore;
};

/* ------------------------------------------------------------ registry */

/* The counters of /metrics that are sums over studies. */
typedef struct counter_totals {
    uint64_t resparsifications;
    double engine_sec;
} counter_totals;

static struct {
    pthread_rwlock_t lock; /* protects v, n, cap and retired (not the studies themselves) */
    study **v;             /* sorted by id */
    size_t n, cap;
    /* Counters of the studies removed from v, folded in by the removal itself, so that a
     * scrape sees each study exactly once (live in its copy of v, or here) and the totals
     * never go down when a study is deleted. */
    counter_totals retired;
    registry_config cfg;   /* set once in registry_open */
    atomic_int closing;
    pthread_mutex_t count_lock;          /* protects by_restore */
    size_t by_restore[RESTORE__STATES]; /* live studies in each restore state (/healthz) */
} reg = {.lock = PTHREAD_RWLOCK_INITIALIZER, .count_lock = PTHREAD_MUTEX_INITIALIZER};

/* A live study changes restore state: from < 0 when it enters the registry, to < 0 when
 * it leaves it (s->mu held, so each study's moves are in order). */
static void count_restore(int from, int to)
{
    pthread_mutex_lock(&reg.count_lock);
    if (from >= 0)
        reg.by_restore[from]--;
    if (to >= 0)
        reg.by_restore[to]++;
    pthread_mutex_unlock(&reg.count_lock);
}

void registry_restore_counts(size_t *restored, size_t *restoring, size_t *failed)
{
    pthread_mutex_lock(&reg.count_lock);
    *restored = reg.by_restore[RESTORED];
    *restoring = reg.by_restore[RESTORE_PENDING];
    *failed = reg.by_restore[RESTORE_FAILED];
    pthread_mutex_unlock(&reg.count_lock);
}

static void study_free(study *s)
{
    kb_engine_free(s->engine);
    for (size_t i = 0; i < s->n_trials; i++) {
        free(s->trials[i].worker);
        free(s->trials[i].reason);
        free(s->trials[i].x);
    }
    free(s->trials);
    proto_study_spec_clear(&s->spec);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

void study_put(study *s)
{
    if (s && atomic_fetch_sub(&s->refs, 1) == 1)
        study_free(s);
}

static size_t reg_find(int64_t id) /* index of the first study with id >= id */
{
    size_t lo = 0, hi = reg.n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (reg.v[mid]->id < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

int64_t study_id(const study *s) { return s->id; }
const study_spec *study_spec_of(const study *s) { return &s->spec; }

study *study_get(int64_t id)
{
    study *s = NULL;
    pthread_rwlock_rdlock(&reg.lock);
    size_t i = reg_find(id);
    if (i < reg.n && reg.v[i]->id == id) {
        s = reg.v[i];
        atomic_fetch_add(&s->refs, 1);
    }
    pthread_rwlock_unlock(&reg.lock);
    return s;
}

static int reg_insert(study *s)
{
    pthread_rwlock_wrlock(&reg.lock);
    if (reg.n == reg.cap) {
        size_t nc = reg.cap ? reg.cap * 2 : 16;
        study **v = realloc(reg.v, nc * sizeof *v);
        if (!v) {
            pthread_rwlock_unlock(&reg.lock);
            return -1;
        }
        reg.v = v;
        reg.cap = nc;
    }
    size_t i = reg_find(s->id);
    memmove(reg.v + i + 1, reg.v + i, (reg.n - i) * sizeof *reg.v);
    reg.v[i] = s;
    reg.n++;
    pthread_rwlock_unlock(&reg.lock);
    return 0;
}

/* Removes s (s->mu held, s out of service: deleted, offline or closing, so its counters
 * are final) and folds its counters into the retired totals. */
static void reg_remove(study *s)
{
    pthread_rwlock_wrlock(&reg.lock);
    size_t i = reg_find(s->id);
    if (i < reg.n && reg.v[i] == s) {
        memmove(reg.v + i, reg.v + i + 1, (reg.n - i - 1) * sizeof *reg.v);
        reg.n--;
        reg.retired.resparsifications += s->epoch_high;
        reg.retired.engine_sec += s->engine_sec;
    }
    pthread_rwlock_unlock(&reg.lock);
}

/* References to every live study (caller puts each and frees the array), and when
 * retired is not NULL the retired totals at the same instant. */
static study **reg_all(size_t *n, counter_totals *retired)
{
    pthread_rwlock_rdlock(&reg.lock);
    if (retired)
        *retired = reg.retired;
    study **v = malloc((reg.n ? reg.n : 1) * sizeof *v);
    *n = 0;
    if (v) {
        for (size_t i = 0; i < reg.n; i++) {
            v[i] = reg.v[i];
            atomic_fetch_add(&v[i]->refs, 1);
        }
        *n = reg.n;
    }
    pthread_rwlock_unlock(&reg.lock);
    return v;
}

/* Fast path of the name check; the UNIQUE constraint in the store is the real guard. */
static int name_taken(const char *name)
{
    int taken = 0;
    pthread_rwlock_rdlock(&reg.lock);
    for (size_t i = 0; i < reg.n && !taken; i++)
        taken = strcmp(reg.v[i]->spec.name, name) == 0;
    pthread_rwlock_unlock(&reg.lock);
    return taken;
}

static void put_all(study **v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        study_put(v[i]);
    free(v);
}

/* Feedback arrived (s->mu held): bump the version first, then wake long-polls, so a
 * waiter that read the old version is always found by the wake (see http.c). */
static void wake(study *s)
{
    atomic_fetch_add(&s->version, 1);
    if (reg.cfg.on_feedback)
        reg.cfg.on_feedback(s->id);
}

/* ------------------------------------------------------ engine and rebuild */

static int fail_engine(api_error *err, const kb_error *kerr)
{
    if (strcmp(kerr->field, "dim") == 0) /* the space as a whole is too wide for the engine */
        return api_fail(err, API_INVALID, "space", "%s", kerr->message);
    const char *prefix = strncmp(kerr->field, "candidates", 10) == 0 ? "space." : "engine.settings.";
    return api_fail_kb(err, kerr, prefix);
}

/* Integer and categorical parameters: pool points on their values, choices unordered. */
static int set_levels(const study_spec *sp, kb_space *space, kb_error *kerr)
{
    size_t *levels = malloc(sp->dim * sizeof *levels);
    unsigned char *cat = malloc(sp->dim);
    int rc = KB_ENOMEM;
    if (levels && cat) {
        proto_box_levels(sp, levels, cat);
        rc = kb_space_set_levels(space, levels, cat, kerr);
    } else {
        *kerr = (kb_error){.code = KB_ENOMEM, .message = "out of memory"};
    }
    free(levels);
    free(cat);
    return rc;
}

static kb_engine *engine_new(const study_spec *sp, api_error *err)
{
    kb_error kerr = {0};
    kb_space *space = sp->space == SPACE_BOX
                          ? kb_space_new_box(sp->dim, (size_t)kb_config_number(sp->cfg, "pool_size"), &kerr)
                          : kb_space_new_finite(sp->candidates, sp->rows, sp->dim, &kerr);
    if (space && sp->space == SPACE_BOX && set_levels(sp, space, &kerr)) {
        kb_space_free(space);
        space = NULL;
    }
    if (!space) {
        fail_engine(err, &kerr);
        return NULL;
    }
    kb_engine *e = kb_engine_create(sp->cfg, space, &kerr);
    kb_space_free(space);
    if (!e)
        fail_engine(err, &kerr);
    return e;
}

/* Loads the rows of a candidate_set reference into the spec. */
static int load_candidates(study_spec *sp, api_error *err)
{
    if (sp->space != SPACE_CANDIDATES || !sp->candidate_set)
        return 0;
    char *names = NULL;
    int rc = store_candidate_set_get(reg.cfg.db, sp->candidate_set, &sp->candidates, &sp->rows,
                                     &sp->dim, &names);
    free(names);
    if (rc == STORE_NOTFOUND)
        return api_fail(err, API_INVALID, "space.candidate_set", "no candidate set %lld",
                        (long long)sp->candidate_set);
    return rc ? api_fail(err, API_INTERNAL, NULL, "database error") : 0;
}

static int trials_reserve(study *s, size_t need)
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

static int better(const study *s, double a, double b)
{
    return s->spec.minimize ? a < b : a > b;
}

/* Accounts for trial t's state in counts/best/first_pending. */
static void trial_account(study *s, const trial_rec *t)
{
    s->counts[t->state]++;
    if (t->state == TRIAL_COMPLETED &&
        (!s->best || better(s, t->value, s->trials[s->best - 1].value)))
        s->best = t->id;
}

static int trial_copy(trial_rec *dst, const trial_rec *src, size_t dim)
{
    *dst = *src;
    dst->worker = strdup(src->worker ? src->worker : "");
    dst->reason = src->reason ? strdup(src->reason) : NULL;
    dst->x = malloc(dim * sizeof *dst->x);
    if (!dst->worker || (src->reason && !dst->reason) || !dst->x) {
        free(dst->worker);
        free(dst->reason);
        free(dst->x);
        return -1;
    }
    memcpy(dst->x, src->x, dim * sizeof *dst->x);
    return 0;
}

static int load_trial_cb(void *ud, const trial_rec *t)
{
    study *s = ud;
    if ((size_t)t->id != s->n_trials + 1 || trials_reserve(s, s->n_trials + 1) ||
        trial_copy(&s->trials[s->n_trials], t, s->spec.dim))
        return -1;
    s->n_trials++;
    trial_account(s, t);
    return 0;
}

typedef struct replay_ctx {
    study *s;
    kb_error kerr;
} replay_ctx;

static int replay_cb(void *ud, const store_event *ev)
{
    replay_ctx *rc = ud;
    kb_engine *e = rc->s->engine;
    int r = 0;
    if (ev->kind == 'a') {
        kb_point pt;
        kb_ask_result res;
        r = kb_engine_ask(e, 1, &pt, &res, &rc->kerr);
        if (r == 0 && (res.n != 1 || pt.handle != (uint64_t)ev->trial_id))
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
    return r;
}

/* Rebuilds engine and trials of s from the store (s->mu held or s unpublished). */
static int study_rebuild(study *s)
{
    api_error err;
    kb_engine_free(s->engine);
    s->engine = NULL;
    for (size_t i = 0; i < s->n_trials; i++) {
        free(s->trials[i].worker);
        free(s->trials[i].reason);
        free(s->trials[i].x);
    }
    s->n_trials = s->first_pending = 0;
    s->best = 0;
    s->ticket = s->durable = 0;
    memset(s->counts, 0, sizeof s->counts);
    unsigned char *snap = NULL;
    size_t len = 0;
    replay_ctx rc = {.s = s};
    int r = store_snapshot_latest(reg.cfg.db, s->id, &snap, &len, &s->snap_seq);
    if (r == 0) {
        s->engine = kb_engine_restore(snap, len, &rc.kerr);
        free(snap);
    } else if (r == STORE_NOTFOUND) {
        s->snap_seq = 0;
        s->engine = engine_new(&s->spec, &err);
    }
    s->seq = s->snap_seq;
    if (!s->engine || store_events_each(reg.cfg.db, s->id, s->snap_seq, s->spec.dim,
                                        replay_cb, &rc) ||
        store_trials_each(reg.cfg.db, s->id, s->spec.dim, load_trial_cb, s)) {
        log_json(LOG_ERROR, "study rebuild failed",
                 json_pack("{s:I,s:I,s:s}", "study", (json_int_t)s->id, "seq",
                           (json_int_t)s->seq, "error", rc.kerr.message));
        return -1;
    }
    kb_stats st;
    kb_engine_stats(s->engine, &st);
    s->epoch = st.epoch;
    if (st.epoch > s->epoch_high)
        s->epoch_high = st.epoch;
    return 0;
}

static study *study_alloc(int64_t id, int64_t created_ms, study_spec *spec)
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
    pthread_mutex_init(&s->mu, NULL);
    return s;
}

static int load_study_cb(void *ud, int64_t id, const char *name, const char *config,
                         int64_t created_ms)
{
    (void)ud;
    api_error err = {0};
    study_spec spec;
    json_t *doc = proto_parse_object(config, strlen(config), &err);
    if (!doc || proto_study_spec_parse(doc, &spec, &err)) {
        json_decref(doc);
        log_json(LOG_ERROR, "stored study config invalid",
                 json_pack("{s:I,s:s,s:s}", "study", (json_int_t)id, "field", err.field,
                           "error", err.message));
        return -1;
    }
    json_decref(doc);
    if (load_candidates(&spec, &err) || proto_study_spec_config(&spec, &err)) {
        log_json(LOG_ERROR, "stored study cannot be rebuilt",
                 json_pack("{s:I,s:s,s:s}", "study", (json_int_t)id, "field", err.field,
                           "error", err.message));
        proto_study_spec_clear(&spec);
        return -1;
    }
    study *s = study_alloc(id, created_ms, &spec);
    if (!s || reg_insert(s)) {
        if (s)
            study_free(s);
        return -1;
    }
    count_restore(-1, RESTORE_PENDING);
    return 0;
}

/* Restores s from the store unless that was done (s->mu held): by a restore thread or
 * by the first operation on s, whichever locks it first. 0 when s is restored. */
static int ensure_restored(study *s, const char *by)
{
    int state = atomic_load(&s->restore);
    if (state != RESTORE_PENDING)
        return state == RESTORED ? 0 : -1;
    double t0 = mono_sec();
    state = study_rebuild(s) ? RESTORE_FAILED : RESTORED;
    atomic_store(&s->restore, state);
    count_restore(RESTORE_PENDING, state);
    if (state != RESTORED)
        return -1;
    log_json(LOG_INFO, "study restored",
             json_pack("{s:I,s:s,s:I,s:I,s:f,s:s}", "study", (json_int_t)s->id, "name",
                       s->spec.name, "events", (json_int_t)s->seq, "snapshot_seq",
                       (json_int_t)s->snap_seq, "seconds", mono_sec() - t0, "by", by));
    return 0;
}

/* Background restore: threads take the studies registered at open in id order. */
static struct {
    study **v;            /* references to the registered studies, by id; each taken */
    size_t n;             /* one is given back by its thread. Set before the threads start */
    atomic_size_t next;   /* index of the next study to take */
    atomic_int stop;      /* shutdown: take no more */
    atomic_size_t running; /* threads not finished: the last one logs the end */
    pthread_t *threads;   /* started by registry_open, joined by registry_close */
    size_t n_threads;
    double t0;            /* mono_sec() at registry_open */
} restorer;

static void *restore_main(void *arg)
{
    (void)arg;
    size_t i;
    while (!atomic_load(&restorer.stop) &&
           (i = atomic_fetch_add(&restorer.next, 1)) < restorer.n) {
        study *s = restorer.v[i];
        restorer.v[i] = NULL;
        pthread_mutex_lock(&s->mu);
        if (!s->deleted)
            ensure_restored(s, "background");
        pthread_mutex_unlock(&s->mu);
        study_put(s);
    }
    if (atomic_fetch_sub(&restorer.running, 1) == 1) {
        size_t restored, restoring, failed;
        registry_restore_counts(&restored, &restoring, &failed);
        log_json(LOG_INFO, atomic_load(&restorer.stop) ? "restore stopped" : "studies restored",
                 json_pack("{s:I,s:I,s:I,s:f}", "restored", (json_int_t)restored, "restoring",
                           (json_int_t)restoring, "failed", (json_int_t)failed, "seconds",
                           mono_sec() - restorer.t0));
    }
    return NULL;
}

/* Starts up to cfg.restore_threads threads over the registered studies; fewer (logged)
 * when threads cannot be made: first use restores the rest. */
static void restore_start(void)
{
    restorer.v = reg_all(&restorer.n, NULL);
    atomic_store(&restorer.next, 0);
    atomic_store(&restorer.stop, 0);
    restorer.n_threads = 0;
    size_t want = reg.cfg.restore_threads < restorer.n ? reg.cfg.restore_threads : restorer.n;
    restorer.threads = want ? malloc(want * sizeof *restorer.threads) : NULL;
    if (!restorer.threads)
        want = 0;
    atomic_store(&restorer.running, want);
    for (size_t k = 0; k < want; k++) {
        if (pthread_create(&restorer.threads[k], NULL, restore_main, NULL)) {
            log_json(LOG_WARN, "fewer restore threads", json_pack("{s:I}", "threads", (json_int_t)k));
            atomic_fetch_sub(&restorer.running, want - k);
            break;
        }
        restorer.n_threads++;
    }
}

/* Stops and joins the restore threads; gives back the studies they did not take. */
static void restore_stop(void)
{
    atomic_store(&restorer.stop, 1);
    for (size_t k = 0; k < restorer.n_threads; k++)
        pthread_join(restorer.threads[k], NULL);
    for (size_t i = 0; i < restorer.n; i++)
        study_put(restorer.v[i]); /* NULL where taken */
    free(restorer.v);
    free(restorer.threads);
    restorer.v = NULL;
    restorer.threads = NULL;
    restorer.n = restorer.n_threads = 0;
}

int registry_open(const registry_config *cfg)
{
    reg.cfg = *cfg;
    if (reg.cfg.snapshot_every <= 0)
        reg.cfg.snapshot_every = 500;
    atomic_store(&reg.closing, 0);
    restorer.t0 = mono_sec();
    if (store_studies_each(cfg->db, load_study_cb, NULL))
        return -1;
    log_json(LOG_INFO, "studies registered",
             json_pack("{s:I,s:f}", "studies", (json_int_t)reg.n, "seconds",
                       mono_sec() - restorer.t0));
    restore_start();
    return 0;
}

void registry_shutting_down(void)
{
    atomic_store(&reg.closing, 1);
    atomic_store(&restorer.stop, 1);
    size_t n;
    study **v = reg_all(&n, NULL);
    for (size_t i = 0; i < n; i++) {
        pthread_mutex_lock(&v[i]->mu);
        wake(v[i]);
        pthread_mutex_unlock(&v[i]->mu);
    }
    put_all(v, n);
}

/* ------------------------------------------------------------ write path */

/* Stores a snapshot of the engine at s->seq (inside the caller's transaction). */
static int write_snapshot(study *s)
{
    unsigned char *bytes;
    size_t len;
    kb_error kerr;
    if (kb_engine_snapshot(s->engine, &bytes, &len, &kerr))
        return -1;
    int rc = store_snapshot_put(reg.cfg.db, s->id, s->seq, bytes, len, now_ms());
    free(bytes);
    if (rc == 0)
        s->snap_seq = s->seq;
    return rc;
}

/* Dictionary row on an epoch change, periodic snapshot; then the operation is queued
 * for COMMIT (s->ticket): the caller waits for it with unlock_settle. */
static int finish_txn(study *s)
{
    kb_stats st;
    kb_engine_stats(s->engine, &st);
    if (st.epoch != s->epoch) {
        if (store_dictionary_put(reg.cfg.db, s->id, st.epoch, st.dict_size, st.last_batch,
                                 s->seq, now_ms()))
            return -1;
        log_json(LOG_DEBUG, "resparsified",
                 json_pack("{s:I,s:I,s:I}", "study", (json_int_t)s->id, "epoch",
                           (json_int_t)st.epoch, "dict_size", (json_int_t)st.dict_size));
    }
    if (s->seq - s->snap_seq >= reg.cfg.snapshot_every && write_snapshot(s))
        return -1;
    uint64_t ticket;
    if (store_commit_async(reg.cfg.db, s->ticket, &ticket))
        return -1;
    s->ticket = ticket;
    if (s->writing_durable)
        s->durable = ticket;
    s->epoch = st.epoch;
    if (st.epoch > s->epoch_high)
        s->epoch_high = st.epoch;
    return 0;
}

/* Memory ran ahead of the store: rebuild it from the store (s->mu held). */
static void resync(study *s)
{
    if (study_rebuild(s)) {
        /* The study cannot be trusted any more: take it offline until a restart. */
        s->deleted = 1;
        count_restore(RESTORED, -1);
        reg_remove(s);
        study_put(s);
    }
}

/* 503: the write may succeed later (a full disk freed, an I/O error gone), the study's
 * memory was rebuilt from the store, and the client may retry (tells are exactly-once). */
static int fail_write(api_error *err)
{
    return api_fail(err, API_UNAVAILABLE, NULL,
                    "database write failed (disk full or I/O error); nothing was applied, retry");
}

/* After a failed write: roll back and rebuild memory from the store. */
static int abort_txn(study *s, api_error *err)
{
    store_rollback(reg.cfg.db);
    resync(s);
    return fail_write(err);
}

/* Opens a queued write operation for s (s->mu held), which finish_txn queues after the
 * study's previous one. When that one already failed and nobody rebuilt the study yet,
 * memory holds changes the store lost: refuse (-1); the caller's abort_txn rebuilds. */
static int begin_write(study *s, int durable)
{
    if (store_ticket_failed(reg.cfg.db, s->ticket))
        return -1;
    s->writing_durable = durable;
    return store_begin_queued(reg.cfg.db, durable);
}

/* This thread's deferred commit wait (study_defer_begin): the study and the largest
 * ticket its answers so far depend on. initial-exec: the objects are built with -fPIC,
 * but only ever linked into executables (no __tls_get_addr, no ld.so dependency). */
static _Thread_local __attribute__((tls_model("initial-exec"))) struct {
    int on;
    study *s;
    uint64_t ticket, durable;
} defer;

/* Waits for the commit of ticket and the fsync of durable (<= ticket; 0: none), s->mu
 * not held. Returns o, or NULL with err (o released) when the commit failed; then s is
 * rebuilt unless a later write did it. A failed durable write fails every later write
 * of the study too (each is queued `after` the previous one), so checking ticket is
 * enough. */
static json_t *settle(study *s, uint64_t ticket, uint64_t durable, json_t *o, api_error *err)
{
    if (!ticket || (store_wait(reg.cfg.db, ticket, 0) == 0 &&
                    (!durable || store_wait(reg.cfg.db, durable, 1) == 0)))
        return o;
    json_decref(o);
    pthread_mutex_lock(&s->mu);
    if (!s->deleted && s->ticket == ticket)
        resync(s);
    pthread_mutex_unlock(&s->mu);
    fail_write(err);
    return NULL;
}

/* Ends an operation on s: releases s->mu, then waits for the commit of the study's
 * last write, which is the operation's own or one its answer depends on (a repeated
 * tell of a trial whose tell is in flight, a read), and unless relaxed for the fsync
 * of its last durable write; unless the wait is deferred. */
static json_t *unlock_answer(study *s, json_t *o, int relaxed, api_error *err)
{
    uint64_t ticket = s->ticket, durable = relaxed ? 0 : s->durable;
    pthread_mutex_unlock(&s->mu);
    if (!defer.on)
        return settle(s, ticket, durable, o, err);
    if (ticket && ticket >= defer.ticket) {
        if (defer.s != s) {
            atomic_fetch_add(&s->refs, 1);
            study_put(defer.s);
            defer.s = s;
        }
        defer.ticket = ticket;
    }
    if (durable > defer.durable)
        defer.durable = durable;
    return o;
}

static json_t *unlock_settle(study *s, json_t *o, api_error *err)
{
    return unlock_answer(s, o, 0, err);
}

/* For answers that show no state a relaxed write does not already depend on. */
static json_t *unlock_settle_relaxed(study *s, json_t *o, api_error *err)
{
    return unlock_answer(s, o, 1, err);
}

void study_defer_begin(void)
{
    defer.on = 1;
}

int study_defer_end(study_pending *p)
{
    int wait = defer.on && defer.ticket;
    if (wait) {
        p->s = defer.s;
        p->ticket = defer.ticket;
        p->durable = defer.durable;
    } else {
        study_put(defer.s);
    }
    defer.on = 0;
    defer.s = NULL;
    defer.ticket = defer.durable = 0;
    return wait;
}

int study_pending_ready(const study_pending *p)
{
    return store_ticket_done(reg.cfg.db, p->ticket, p->durable);
}

int study_pending_finish(study_pending *p, api_error *err)
{
    json_t *o = settle(p->s, p->ticket, p->durable, json_true(), err);
    study_put(p->s);
    p->s = NULL;
    return o ? 0 : -1;
}

static int append_event(study *s, char kind, int64_t trial_id, double value, const double *x)
{
    store_event ev = {.seq = s->seq + 1, .kind = kind, .trial_id = trial_id, .value = value,
                      .x = x};
    if (store_event_append(reg.cfg.db, s->id, &ev, s->spec.dim))
        return -1;
    s->seq++;
    return 0;
}

static double engine_value(const study *s, double v) { return s->spec.minimize ? -v : v; }


/* Locks s and checks it is not deleted; 0 ok (locked) or -1 (unlocked, 404). */
static int lock_undeleted(study *s, api_error *err)
{
    pthread_mutex_lock(&s->mu);
    if (!s->deleted)
        return 0;
    pthread_mutex_unlock(&s->mu);
    return api_fail(err, API_NOT_FOUND, NULL, "study %lld not found", (long long)s->id);
}

/* Locks s for an operation, restoring it first if it is not yet; 0 ok (locked) or -1
 * (unlocked: 404 deleted, 500 when it cannot be restored). */
static int lock_live(study *s, api_error *err)
{
    if (lock_undeleted(s, err))
        return -1;
    if (ensure_restored(s, "request") == 0)
        return 0;
    pthread_mutex_unlock(&s->mu);
    return api_fail(err, API_INTERNAL, NULL,
                    "study %lld cannot be restored from the database (see the daemon's log)",
                    (long long)s->id);
}

static trial_rec *find_trial(study *s, int64_t id, api_error *err)
{
    if (id < 1 || (size_t)id > s->n_trials) {
        api_fail(err, API_NOT_FOUND, NULL, "trial %lld not found", (long long)id);
        return NULL;
    }
    return &s->trials[id - 1];
}

static json_t *trial_json(study *s, const trial_rec *t)
{
    return proto_trial_json(t, s->id, &s->spec);
}

/* Moves t to a new state, keeping counts and best in step. */
static void set_state(study *s, trial_rec *t, trial_state st)
{
    s->counts[t->state]--;
    t->state = st;
    s->counts[st]++;
    if (st == TRIAL_COMPLETED && (!s->best || better(s, t->value, s->trials[s->best - 1].value)))
        s->best = t->id;
}

/* ------------------------------------------------------------ operations */

json_t *study_create(study_spec *spec, api_error *err)
{
    if (atomic_load(&reg.closing)) {
        proto_study_spec_clear(spec);
        api_fail(err, API_UNAVAILABLE, NULL, "shutting down");
        return NULL;
    }
    json_t *cfg = NULL;
    char *text = NULL;
    kb_engine *e = NULL;
    int64_t id = 0, created = now_ms();
    study *s = NULL;
    if (name_taken(spec->name)) {
        api_fail(err, API_CONFLICT, "name", "a study named '%s' exists", spec->name);
        goto fail;
    }
    if (load_candidates(spec, err) || proto_study_spec_config(spec, err) ||
        !(e = engine_new(spec, err)))
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
    int rc = store_begin(reg.cfg.db);
    if (rc == 0)
        rc = store_study_insert(reg.cfg.db, spec->name, text, created, &id);
    if (rc == 0)
        rc = store_commit(reg.cfg.db);
    if (rc) {
        store_rollback(reg.cfg.db);
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
    count_restore(-1, RESTORED);
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
    if (lock_undeleted(s, err)) { /* a study not restored yet is deleted as it is */
        study_put(s);
        return -1;
    }
    store_wait(reg.cfg.db, s->ticket, 0); /* its queued writes first (their outcome is moot) */
    int rc = store_begin(reg.cfg.db);
    if (rc == 0)
        rc = store_study_delete(reg.cfg.db, id);
    if (rc == 0)
        rc = store_commit(reg.cfg.db);
    if (rc) {
        store_rollback(reg.cfg.db);
        pthread_mutex_unlock(&s->mu);
        study_put(s);
        return api_fail(err, API_INTERNAL, NULL, "database error");
    }
    s->deleted = 1;
    count_restore(atomic_load(&s->restore), -1);
    wake(s);
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
                     s->best ? trial_json(s, &s->trials[s->best - 1]) : json_null(), "epoch",
                     (json_int_t)st.epoch, "epoch_asks", (json_int_t)st.epoch_asks,
                     "last_batch", (json_int_t)st.last_batch, "dictionary_size",
                     (json_int_t)st.dict_size, "init_phase", st.init_phase, "hyperparameters",
                     hyperparameters_json(s->engine));
}

/* Study document without locking (spec is immutable); progress (else null) needs s->mu
 * and a restored study. */
static json_t *study_json_locked(study *s, int with_progress)
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
    if (lock_live(s, err))
        return NULL;
    json_t *o = study_json_locked(s, 1);
    return unlock_settle(s, o, err);
}

json_t *study_list(int64_t after, size_t limit, const char *name)
{
    size_t n;
    study **v = reg_all(&n, NULL);
    json_t *arr = json_array(), *next = json_null();
    size_t taken = 0;
    int64_t last = 0;
    for (size_t i = 0; i < n; i++) {
        if (v[i]->id <= after || (name && strcmp(v[i]->spec.name, name)))
            continue; /* the name is immutable: compared without the lock */
        /* A study not restored yet is listed without its lock, which its restore may hold
         * for seconds, and without progress (deleted meanwhile, it may still be listed, as
         * if deleted just after). */
        int restored = atomic_load(&v[i]->restore) == RESTORED;
        if (restored)
            pthread_mutex_lock(&v[i]->mu);
        int listed = !restored || !v[i]->deleted;
        if (listed && taken == limit) { /* a further study exists: a next page */
            if (restored)
                pthread_mutex_unlock(&v[i]->mu);
            char c[32];
            snprintf(c, sizeof c, "%lld", (long long)last);
            json_decref(next);
            next = json_string(c);
            break;
        }
        if (listed) {
            json_array_append_new(arr, study_json_locked(v[i], restored));
            taken++;
            last = v[i]->id;
        }
        if (restored)
            pthread_mutex_unlock(&v[i]->mu);
    }
    put_all(v, n);
    return json_pack("{s:o,s:o}", "studies", arr, "next_cursor", next);
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
        abort_txn(s, err);
        return api_fail_kb(err, &kerr, NULL);
    }
    *status = ask_status_name(res->status);
    if (res->n == 0)
        return 0;
    *status = "ok";
    /* Relaxed durability: a hand-out lost to a power cut only makes its tell a 404
     * and replays the engine to the state before it (see store_begin_queued). */
    if (trials_reserve(s, s->n_trials + res->n) || begin_write(s, 0))
        return abort_txn(s, err);
    int64_t now = now_ms();
    size_t base = s->n_trials;
    for (size_t i = 0; i < res->n; i++) {
        trial_rec t = {.id = (int64_t)pts[i].handle, .state = TRIAL_PENDING,
                       .worker = req->worker,
                       .cand_index = s->spec.space == SPACE_CANDIDATES ? (int64_t)pts[i].index : -1,
                       .created_ms = now, .lease_ms = now + s->spec.lease_seconds * 1000,
                       .x = (double *)pts[i].x};
        if (t.id != (int64_t)(base + i + 1) || trial_copy(&s->trials[base + i], &t, s->spec.dim)) {
            s->n_trials = base + i;
            return abort_txn(s, err);
        }
        s->n_trials = base + i + 1;
        s->counts[TRIAL_PENDING]++;
        if (append_event(s, 'a', t.id, 0, NULL) ||
            store_trial_put(reg.cfg.db, s->id, &s->trials[base + i], s->spec.dim))
            return abort_txn(s, err);
    }
    if (finish_txn(s))
        return abort_txn(s, err);
    return (int)res->n;
}

json_t *study_ask(study *s, const ask_req *req, int *can_wait, uint64_t *version,
                  int64_t *retry_after_ms, api_error *err)
{
    if (atomic_load(&reg.closing)) {
        api_fail(err, API_UNAVAILABLE, NULL, "shutting down");
        return NULL;
    }
    if (lock_live(s, err))
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
        json_array_append_new(arr, trial_json(s, &s->trials[i]));
    *retry_after_ms = n > 0 ? 0 : 1000;
    json_t *o = json_pack("{s:o,s:s,s:I,s:o}", "trials", arr, "status", status, "awaiting",
                          (json_int_t)res.awaiting, "retry_after_ms",
                          n > 0 ? json_null() : json_integer(*retry_after_ms));
    return unlock_settle_relaxed(s, o, err);
}

uint64_t study_version(study *s) { return atomic_load(&s->version); }

/* Checks a tell and applies it to the engine and to memory (s->mu held, no
 * transaction: engine work never runs inside one). *changed = 1 when applied, 0 for a
 * repeated identical tell. Returns the trial or NULL with err (404/409/400). */
static trial_rec *tell_apply(study *s, int64_t id, double value, int *changed, api_error *err)
{
    *changed = 0;
    trial_rec *t = find_trial(s, id, err);
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
    int rc = kb_engine_tell(s->engine, (uint64_t)id, engine_value(s, value), &kerr);
    s->engine_sec += mono_sec() - t0;
    if (rc) {
        api_fail_kb(err, &kerr, NULL);
        return NULL;
    }
    *changed = 1;
    t->value = value;
    t->completed_ms = now_ms();
    set_state(s, t, TRIAL_COMPLETED);
    return t;
}

/* Records an applied tell or abandon (inside the transaction). */
static int record(study *s, const trial_rec *t, char kind)
{
    return append_event(s, kind, t->id, kind == 't' ? engine_value(s, t->value) : 0, NULL) ||
                   store_trial_put(reg.cfg.db, s->id, t, s->spec.dim)
               ? -1 : 0;
}

/* Makes the applied changes of trials ts[0..n) durable (s->mu held); on failure the
 * study is rebuilt from the store and -1 returned with err. */
static int persist(study *s, trial_rec *const *ts, const char *kinds, size_t n, int durable,
                   api_error *err)
{
    if (begin_write(s, durable))
        return abort_txn(s, err);
    for (size_t i = 0; i < n; i++)
        if (record(s, ts[i], kinds[i]))
            return abort_txn(s, err);
    return finish_txn(s) ? abort_txn(s, err) : 0;
}

json_t *study_tell(study *s, int64_t trial_id, double value, api_error *err)
{
    if (lock_live(s, err))
        return NULL;
    int changed;
    trial_rec *t = tell_apply(s, trial_id, value, &changed, err);
    if (t && changed && persist(s, &t, "t", 1, 1, err))
        t = NULL;
    json_t *o = t ? trial_json(s, t) : NULL;
    if (t && changed)
        wake(s);
    return unlock_settle(s, o, err);
}

json_t *study_tell_batch(study *s, const tell_item *items, size_t n, api_error *err)
{
    if (lock_live(s, err))
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
            json_object_set_new(r, "trial", trial_json(s, t));
        } else {
            json_t *ej = api_error_json(&ie);
            json_object_set(r, "error", json_object_get(ej, "error"));
            json_decref(ej);
        }
        json_array_append_new(arr, r);
    }
    if (nt && persist(s, told, kinds, nt, 1, err))
        goto out;
    if (nt)
        wake(s);
    o = json_pack("{s:O}", "results", arr);
out:
    free(told);
    free(kinds);
    json_decref(arr);
    return unlock_settle(s, o, err);
}

/* The engine forgets a pending trial (failed or expired); memory follows. */
static int abandon_apply(study *s, trial_rec *t, trial_state to)
{
    kb_error kerr;
    if (kb_engine_abandon(s->engine, (uint64_t)t->id, &kerr))
        return -1;
    set_state(s, t, to);
    return 0;
}

json_t *study_fail(study *s, int64_t trial_id, const char *reason, api_error *err)
{
    if (lock_live(s, err))
        return NULL;
    json_t *o = NULL;
    trial_rec *t = find_trial(s, trial_id, err);
    if (t && t->state != TRIAL_PENDING) {
        api_fail(err, API_CONFLICT, NULL, "trial %lld is %s", (long long)trial_id,
                 proto_trial_state_name(t->state));
        t = NULL;
    }
    if (t) {
        free(t->reason);
        t->reason = reason ? strdup(reason) : NULL;
        if (abandon_apply(s, t, TRIAL_FAILED)) {
            abort_txn(s, err);
        } else if (persist(s, &t, "b", 1, 1, err) == 0) {
            o = trial_json(s, t);
            wake(s);
        }
    }
    return unlock_settle(s, o, err);
}

json_t *study_heartbeat(study *s, int64_t trial_id, api_error *err)
{
    if (lock_live(s, err))
        return NULL;
    json_t *o = NULL;
    trial_rec *t = find_trial(s, trial_id, err);
    if (t && t->state != TRIAL_PENDING) {
        api_fail(err, API_CONFLICT, NULL, "trial %lld is %s", (long long)trial_id,
                 proto_trial_state_name(t->state));
        t = NULL;
    }
    if (t) {
        int64_t old = t->lease_ms;
        t->lease_ms = now_ms() + s->spec.lease_seconds * 1000;
        if (begin_write(s, 0) || store_trial_put(reg.cfg.db, s->id, t, s->spec.dim) ||
            finish_txn(s)) {
            t->lease_ms = old;
            abort_txn(s, err);
        } else {
            o = trial_json(s, t);
        }
    }
    return unlock_settle_relaxed(s, o, err);
}

json_t *study_trial(study *s, int64_t trial_id, api_error *err)
{
    if (lock_live(s, err))
        return NULL;
    trial_rec *t = find_trial(s, trial_id, err);
    json_t *o = t ? trial_json(s, t) : NULL;
    return unlock_settle(s, o, err);
}

json_t *study_trials(study *s, int state, int64_t after, size_t limit, api_error *err)
{
    if (lock_live(s, err))
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
        json_array_append_new(arr, trial_json(s, &s->trials[i]));
        taken++;
    }
    return unlock_settle(s, json_pack("{s:o,s:o}", "trials", arr, "next_cursor", next), err);
}

json_t *study_best(study *s, api_error *err)
{
    if (lock_live(s, err))
        return NULL;
    json_t *o = s->best ? trial_json(s, &s->trials[s->best - 1]) : NULL;
    if (!o)
        api_fail(err, API_NOT_FOUND, NULL, "no completed trial yet");
    return unlock_settle(s, o, err);
}

json_t *study_observe(study *s, const double *xs, const double *values, size_t n,
                      api_error *err)
{
    if (lock_live(s, err))
        return NULL;
    json_t *o = NULL;
    size_t dim = s->spec.dim;
    for (size_t i = 0; i < n; i++) {
        kb_error kerr = {0};
        if (kb_engine_observe(s->engine, xs + i * dim, engine_value(s, values[i]), &kerr)) {
            char field[API_FIELD_MAX];
            snprintf(field, sizeof field, "observations[%zu]", i);
            abort_txn(s, err); /* undoes the observations applied so far */
            api_fail(err, API_INVALID, field, "%s", kerr.message);
            goto out;
        }
    }
    int64_t now = now_ms();
    if (begin_write(s, 1)) {
        abort_txn(s, err);
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        const double *x = xs + i * dim;
        if (append_event(s, 'o', 0, engine_value(s, values[i]), x) ||
            store_observation_insert(reg.cfg.db, s->id, s->seq, x, dim, values[i], now)) {
            abort_txn(s, err);
            goto out;
        }
    }
    if (finish_txn(s)) {
        abort_txn(s, err);
        goto out;
    }
    o = json_pack("{s:I}", "added", (json_int_t)n);
out:
    return unlock_settle(s, o, err);
}

json_t *study_export_json(study *s, api_error *err)
{
    if (lock_live(s, err))
        return NULL;
    json_t *arr = json_array();
    for (size_t i = 0; i < s->n_trials; i++)
        json_array_append_new(arr, trial_json(s, &s->trials[i]));
    json_t *o = json_pack("{s:o,s:o}", "study", study_json_locked(s, 1), "trials", arr);
    return unlock_settle(s, o, err);
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
    if (lock_live(s, err))
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
    if (!unlock_settle(s, json_true(), err)) {
        free(buf);
        return NULL;
    }
    return buf;
}

/* ------------------------------------------------------------ leases */

static size_t sweep_study(study *s, int64_t now)
{
    if (atomic_load(&s->restore) != RESTORED) /* nothing to expire yet; never wait for it */
        return 0;
    pthread_mutex_lock(&s->mu);
    if (s->deleted || !s->counts[TRIAL_PENDING]) {
        pthread_mutex_unlock(&s->mu);
        return 0;
    }
    while (s->first_pending < s->n_trials && s->trials[s->first_pending].state != TRIAL_PENDING)
        s->first_pending++;
    size_t n = 0, cap = 0;
    trial_rec **ts = NULL;
    char *kinds = NULL;
    api_error err;
    for (size_t i = s->first_pending; i < s->n_trials; i++) {
        trial_rec *t = &s->trials[i];
        if (t->state != TRIAL_PENDING || t->lease_ms > now)
            continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 16;
            trial_rec **nt = realloc(ts, cap * sizeof *ts);
            char *nk = realloc(kinds, cap);
            if (nt)
                ts = nt;
            if (nk)
                kinds = nk;
            if (!nt || !nk)
                break;
        }
        if (abandon_apply(s, t, TRIAL_EXPIRED)) {
            abort_txn(s, &err);
            n = 0;
            break;
        }
        kinds[n] = 'b';
        ts[n++] = t;
    }
    /* Expiry needs no fsync of its own: lost to a power cut, it simply happens again. */
    if (n && persist(s, ts, kinds, n, 0, &err))
        n = 0;
    if (n) {
        wake(s);
        log_json(LOG_INFO, "leases expired",
                 json_pack("{s:I,s:I}", "study", (json_int_t)s->id, "count", (json_int_t)n));
    }
    free(ts);
    free(kinds);
    return unlock_settle_relaxed(s, json_true(), &err) ? n : 0;
}

size_t registry_sweep(int64_t now)
{
    size_t n, total = 0;
    study **v = reg_all(&n, NULL);
    for (size_t i = 0; i < n; i++)
        total += sweep_study(v[i], now);
    put_all(v, n);
    return total;
}

void registry_stats_get(registry_stats *out)
{
    memset(out, 0, sizeof *out);
    size_t n;
    counter_totals retired;
    study **v = reg_all(&n, &retired);
    out->studies = n;
    out->resparsifications = retired.resparsifications;
    out->engine_sec = retired.engine_sec;
    /* A study deleted since reg_all is counted here: retired was copied before it was. */
    for (size_t i = 0; i < n; i++) {
        if (atomic_load(&v[i]->restore) != RESTORED)
            continue;
        pthread_mutex_lock(&v[i]->mu);
        for (int k = 0; k < TRIAL__STATES; k++)
            out->trials[k] += v[i]->counts[k];
        out->resparsifications += v[i]->epoch_high;
        out->engine_sec += v[i]->engine_sec;
        pthread_mutex_unlock(&v[i]->mu);
    }
    put_all(v, n);
    store_counts(reg.cfg.db, &out->store_batches, &out->store_ops, &out->store_syncs);
}

void registry_close(void)
{
    restore_stop();
    size_t n;
    study **v = reg_all(&n, NULL);
    for (size_t i = 0; i < n; i++) {
        study *s = v[i];
        pthread_mutex_lock(&s->mu);
        /* After the study's queued writes, unless they failed (then the store is behind
         * memory, and the next start rebuilds from the store anyway). */
        if (!s->deleted && atomic_load(&s->restore) == RESTORED && s->seq > s->snap_seq &&
            store_wait(reg.cfg.db, s->ticket, 0) == 0) {
            if (store_begin(reg.cfg.db) || write_snapshot(s) || store_commit(reg.cfg.db))
                store_rollback(reg.cfg.db);
        }
        reg_remove(s);
        pthread_mutex_unlock(&s->mu);
        study_put(s); /* the registry's */
    }
    put_all(v, n);
    pthread_rwlock_wrlock(&reg.lock);
    free(reg.v);
    reg.v = NULL;
    reg.n = reg.cap = 0;
    pthread_rwlock_unlock(&reg.lock);
    pthread_mutex_lock(&reg.count_lock);
    memset(reg.by_restore, 0, sizeof reg.by_restore);
    pthread_mutex_unlock(&reg.count_lock);
}
