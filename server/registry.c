/*
 * registry.c - This file contains the registry of live studies: the array by id under
 * an rwlock (held for lookup, insert and removal only, never while an engine runs),
 * reference counting, the listing, the restore threads that rebuild the stored studies
 * in id order after a start, open/shutdown/close and the statistics of /metrics.
 *
 * Invariants: registry.v is sorted by id and holds one reference to each live study;
 * a study leaves it only with its mutex held and its counters final, which are folded
 * into registry.retired in the same critical section, so a scrape counts each study
 * exactly once and the counters never go down. The study invariants are in
 * study_internal.h.
 */
#include "study_internal.h"

#include "log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct registry_state registry = {.lock = PTHREAD_RWLOCK_INITIALIZER,
                                  .count_lock = PTHREAD_MUTEX_INITIALIZER};

/* A live study changes restore state: from < 0 when it enters the registry, to < 0 when
 * it leaves it (s->mu held, so each study's moves are in order). */
void reg_count_restore(int from, int to)
{
    pthread_mutex_lock(&registry.count_lock);
    if (from >= 0)
        registry.by_restore[from]--;
    if (to >= 0)
        registry.by_restore[to]++;
    pthread_mutex_unlock(&registry.count_lock);
}

void registry_restore_counts(size_t *restored, size_t *restoring, size_t *failed)
{
    pthread_mutex_lock(&registry.count_lock);
    *restored = registry.by_restore[RESTORED];
    *restoring = registry.by_restore[RESTORE_PENDING] + registry.by_restore[RESTORE_RETRY];
    *failed = registry.by_restore[RESTORE_FAILED];
    pthread_mutex_unlock(&registry.count_lock);
}

void study_free(study *s)
{
    kb_engine_free(s->engine);
    for (size_t i = 0; i < s->n_trials; i++) {
        trial_rec_clear(&s->trials[i]);
    }
    free(s->trials);
    proto_study_spec_clear(&s->spec);
    free(s->stored_config);
    pthread_mutex_destroy(&s->mu);
    pthread_mutex_destroy(&s->stats_mu);
    free(s);
}

void study_put(study *s)
{
    if (s && atomic_fetch_sub(&s->refs, 1) == 1)
        study_free(s);
}

static size_t reg_find(int64_t id) /* index of the first study with id >= id */
{
    size_t lo = 0, hi = registry.n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (registry.v[mid]->id < id)
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
    pthread_rwlock_rdlock(&registry.lock);
    size_t i = reg_find(id);
    if (i < registry.n && registry.v[i]->id == id) {
        s = registry.v[i];
        atomic_fetch_add(&s->refs, 1);
    }
    pthread_rwlock_unlock(&registry.lock);
    return s;
}

int reg_insert(study *s)
{
    pthread_rwlock_wrlock(&registry.lock);
    if (registry.n == registry.cap) {
        size_t nc = registry.cap ? registry.cap * 2 : 16;
        study **v = realloc(registry.v, nc * sizeof *v);
        if (!v) {
            pthread_rwlock_unlock(&registry.lock);
            return -1;
        }
        registry.v = v;
        registry.cap = nc;
    }
    size_t i = reg_find(s->id);
    memmove(registry.v + i + 1, registry.v + i, (registry.n - i) * sizeof *registry.v);
    registry.v[i] = s;
    registry.n++;
    pthread_rwlock_unlock(&registry.lock);
    return 0;
}

/* Removes s (s->mu held, s out of service: deleted, offline or closing, so its counters
 * are final) and folds its counters into the retired totals. */
void reg_remove(study *s)
{
    pthread_rwlock_wrlock(&registry.lock);
    size_t i = reg_find(s->id);
    if (i < registry.n && registry.v[i] == s) {
        memmove(registry.v + i, registry.v + i + 1, (registry.n - i - 1) * sizeof *registry.v);
        registry.n--;
        registry.retired.resparsifications += s->epoch_high;
        registry.retired.engine_sec += s->engine_sec;
    }
    pthread_rwlock_unlock(&registry.lock);
}

/* References to every live study (caller puts each and frees the array), and when
 * retired is not NULL the retired totals at the same instant. */
study **reg_all(size_t *n, counter_totals *retired)
{
    pthread_rwlock_rdlock(&registry.lock);
    if (retired)
        *retired = registry.retired;
    study **v = malloc((registry.n ? registry.n : 1) * sizeof *v);
    *n = 0;
    if (v) {
        for (size_t i = 0; i < registry.n; i++) {
            v[i] = registry.v[i];
            atomic_fetch_add(&v[i]->refs, 1);
        }
        *n = registry.n;
    }
    pthread_rwlock_unlock(&registry.lock);
    return v;
}

/* Fast path of the name check; the UNIQUE constraint in the store is the real guard. */
int64_t reg_name_owner(const char *name)
{
    int64_t id = 0;
    pthread_rwlock_rdlock(&registry.lock);
    for (size_t i = 0; i < registry.n && !id; i++)
        if (strcmp(registry.v[i]->spec.name, name) == 0)
            id = registry.v[i]->id;
    pthread_rwlock_unlock(&registry.lock);
    return id;
}

void reg_put_all(study **v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        study_put(v[i]);
    free(v);
}

/* Feedback arrived (s->mu held): bump the version first, then wake long-polls, so a
 * waiter that read the old version is always found by the wake (see http.c). */
void study_wake(study *s)
{
    atomic_fetch_add(&s->version, 1);
    if (registry.cfg.on_feedback)
        registry.cfg.on_feedback(s->id);
}

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
            study_ensure_restored(s, "background");
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
    size_t want = registry.cfg.restore_threads < restorer.n ? registry.cfg.restore_threads : restorer.n;
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
    registry.cfg = *cfg;
    if (registry.cfg.snapshot_every <= 0)
        registry.cfg.snapshot_every = 500;
    atomic_store(&registry.closing, 0);
    restorer.t0 = mono_sec();
    if (store_studies_each(cfg->db, study_load_stored, NULL))
        return -1;
    log_json(LOG_INFO, "studies registered",
             json_pack("{s:I,s:f}", "studies", (json_int_t)registry.n, "seconds",
                       mono_sec() - restorer.t0));
    restore_start();
    return 0;
}

int registry_is_closing(void) { return atomic_load(&registry.closing); }

void registry_shutting_down(void)
{
    atomic_store(&registry.closing, 1);
    atomic_store(&restorer.stop, 1);
    size_t n;
    study **v = reg_all(&n, NULL);
    /* Without the studies' mutexes, which a busy study held for its whole operation and
     * so delayed SIGTERM's quiescing: a long-poll suspending after this wake-up is resumed
     * by http_quiesce, which follows and refuses new suspensions. */
    for (size_t i = 0; i < n; i++)
        study_wake(v[i]);
    reg_put_all(v, n);
}

uint64_t study_version(study *s) { return atomic_load(&s->version); }

void study_page_clear(study_page *p)
{
    for (size_t i = 0; i < p->n; i++) {
        study_doc_clear(&p->docs[i]);
        study_put(p->refs[i]);
    }
    free(p->docs);
    free(p->refs);
    memset(p, 0, sizeof *p);
}

/* Fills the page from v (references; the page takes those it lists, NULL in v). */
static int list_page(study **v, size_t n, int64_t after, size_t limit, const char *name,
                     int state, study_page *out, api_error *err)
{
    for (size_t i = 0; i < n; i++) {
        study *s = v[i];
        /* The name is immutable and the state atomic: both compared without the lock. The
         * state read here is the one listed, so a page never contradicts its filter (a
         * change meanwhile is listed as if made just after). */
        int st = atomic_load(&s->state);
        if (s->id <= after || (name && strcmp(s->spec.name, name)) ||
            (state >= 0 && st != state) ||
            !atomic_load(&s->spec_loaded)) /* nothing but its name to show yet */
            continue;
        /* A study not restored yet is listed without its lock, which its restore may hold
         * for seconds, and without progress (deleted meanwhile, it may still be listed, as
         * if deleted just after). */
        int locked = atomic_load(&s->restore) == RESTORED;
        if (locked)
            pthread_mutex_lock(&s->mu);
        int restored = locked && atomic_load(&s->restore) == RESTORED; /* a rebuild failed? */
        int listed = !locked || !s->deleted, rc = 0;
        if (listed && out->n == limit) { /* a further study exists: a next page */
            out->next_cursor = out->docs[out->n - 1].id;
            if (locked)
                pthread_mutex_unlock(&s->mu);
            return 0;
        }
        if (listed && (rc = study_doc_fill(s, restored, &out->docs[out->n], err)) == 0) {
            out->docs[out->n].state = (study_state)st;
            out->refs[out->n++] = s;
            v[i] = NULL;
        }
        if (locked)
            pthread_mutex_unlock(&s->mu);
        if (rc)
            return -1;
    }
    return 0;
}

int study_list(int64_t after, size_t limit, const char *name, int state, study_page *out,
               api_error *err)
{
    memset(out, 0, sizeof *out);
    size_t n;
    study **v = reg_all(&n, NULL);
    out->refs = malloc((limit ? limit : 1) * sizeof *out->refs);
    out->docs = calloc(limit ? limit : 1, sizeof *out->docs);
    int rc = out->refs && out->docs ? list_page(v, n, after, limit, name, state, out, err)
                                    : api_fail(err, API_INTERNAL, NULL, "out of memory");
    reg_put_all(v, n);
    if (rc)
        study_page_clear(out);
    return rc;
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
        study *s = v[i];
        if (atomic_load(&s->restore) != RESTORED)
            continue;
        int fresh = pthread_mutex_trylock(&s->mu) == 0; /* else: as last read */
        pthread_mutex_lock(&s->stats_mu);
        if (fresh) {
            memcpy(s->stats_counts, s->counts, sizeof s->counts); /* 0 while a rebuild waits */
            s->stats_epochs = s->epoch_high;
            s->stats_engine_sec = s->engine_sec;
            pthread_mutex_unlock(&s->mu);
        }
        for (int k = 0; k < TRIAL__STATES; k++)
            out->trials[k] += s->stats_counts[k];
        out->resparsifications += s->stats_epochs;
        out->engine_sec += s->stats_engine_sec;
        pthread_mutex_unlock(&s->stats_mu);
    }
    reg_put_all(v, n);
    store_counts(registry.cfg.db, &out->store_batches, &out->store_ops, &out->store_syncs,
                 &out->store_failed);
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
            store_wait(registry.cfg.db, s->ticket, 0) == 0) {
            if (store_begin(registry.cfg.db) || study_write_snapshot(s) || store_commit(registry.cfg.db))
                store_rollback(registry.cfg.db);
        }
        reg_remove(s);
        pthread_mutex_unlock(&s->mu);
        study_put(s); /* the registry's */
    }
    reg_put_all(v, n);
    pthread_rwlock_wrlock(&registry.lock);
    free(registry.v);
    registry.v = NULL;
    registry.n = registry.cap = 0;
    pthread_rwlock_unlock(&registry.lock);
    pthread_mutex_lock(&registry.count_lock);
    memset(registry.by_restore, 0, sizeof registry.by_restore);
    pthread_mutex_unlock(&registry.count_lock);
}
