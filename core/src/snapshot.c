/*
 * snapshot.c - engine snapshots as an event log, and restore by replay.
 *
 * A snapshot is the engine's configuration, its search space and the ordered list of
 * successful calls that changed it (ask of one point, tell, abandon, observe). Every
 * engine is a deterministic function of these (seeded RNG, ask(n) == n x ask(1); see
 * internal.h), so replaying them rebuilds the engine exactly, whatever its internals:
 * no engine needs serialization code of its own, and a restored engine makes the same
 * choices the original would have made. Restore costs as much as the calls it replays.
 *
 * Across versions of kbandit the replay is exact only for the engine's own calls: a
 * release that changes a default or an algorithm makes a replayed ask choose another
 * point. Format 3 therefore records each ask's point, and replays it with
 * kb_engine_ask_recorded, which adopts a diverging ask (the engine's choice abandoned
 * inside the engine, the trial's later tell an observation of the recorded point,
 * engine.c): the model holds the points really evaluated, the handles go on as
 * recorded, and restoring the snapshot of a restored engine adopts the same asks again
 * (its log is the caller's call sequence, recorded points included). Formats 1 and 2
 * carry no point: their asks are taken as the current engine chooses them, which pairs
 * the told values with other points whenever the engine changed since.
 *
 * Format (all integers little-endian, doubles IEEE-754 binary64 little-endian):
 *   "KBSNAP01"  u32 version(5; 1 to 4 are read too)
 *   str engine; u32 n_options; n_options x (str name, u8 type, value)
 *     value: NUMBER/INTEGER f64 | STRING str | VECTOR u32 n, n x f64
 *   u8 finite; u64 n; u64 dim; finite: n*dim x f64 rows (input coordinates)
 *     box (version 2): u8 has_levels; has_levels: dim x (u64 levels, u8 categorical,
 *       version 4: f64 log_low, kb_space_set_log_levels, 0 for none)
 *   u64 n_events; events: u8 kind, then
 *     ASK: version 3 on: dim x f64 x (input coordinates handed out), earlier: - |
 *     TELL: u64 handle, f64 y |
 *     ABANDON: u64 handle | OBSERVE: dim x f64 x, f64 y |
 *     FIT (version 5): u64 n_obs, i32 rc, f64 variance, noise, mix, prior_c,
 *       4 x u64 fit_rng, u64 kdim, kdim x f64 lengthscales (kb_fit_record, internal.h)
 *   str := u32 length, bytes (no terminator)
 *
 * A FIT event is a hyperparameter fit's outcome, logged inside the op whose call made
 * it, so before that op's own event; a restore queues it (e->fit_queue) and the op's
 * replay applies it instead of fitting (kb__hyper_refit). Fits are the costliest part of
 * a bbkb restore (55% at 1,500 trials); nothing else depends on the records: one missing
 * (the log was short of memory) is fitted again.
 */
#include "internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "snapshot.c writes host-order numbers and assumes a little-endian host"
#endif

enum { EV_ASK = 1, EV_TELL = 2, EV_ABANDON = 3, EV_OBSERVE = 4, EV_FIT = 5 };
#define MAGIC "KBSNAP01"
#define VERSION KB_SNAPSHOT_VERSION

typedef struct buf {
    unsigned char *p;
    size_t len, cap;
    int oom;
} buf;

struct kb_log {
    buf b;
    uint64_t n_events;
};

/* Room for n more bytes. KB_ENOMEM leaves b as it was. */
static int reserve(buf *b, size_t n)
{
    if (b->len + n <= b->cap)
        return KB_OK;
    size_t nc = b->cap ? b->cap : 256;
    while (nc < b->len + n)
        nc *= 2;
    unsigned char *p = realloc(b->p, nc);
    if (!p)
        return KB_ENOMEM;
    b->p = p;
    b->cap = nc;
    return KB_OK;
}

static void put(buf *b, const void *src, size_t n)
{
    if (b->oom || n == 0) /* an empty event log has no buffer: memcpy from NULL is UB */
        return;
    if (reserve(b, n)) {
        b->oom = 1;
        return;
    }
    memcpy(b->p + b->len, src, n);
    b->len += n;
}

static void put_u8(buf *b, uint8_t v) { put(b, &v, 1); }
static void put_u32(buf *b, uint32_t v) { put(b, &v, 4); }
static void put_u64(buf *b, uint64_t v) { put(b, &v, 8); }
static void put_f64(buf *b, double v) { put(b, &v, 8); }
static void put_str(buf *b, const char *s)
{
    put_u32(b, (uint32_t)strlen(s));
    put(b, s, strlen(s));
}

struct kb_log *kb__log_new(void) { return calloc(1, sizeof(struct kb_log)); }

void kb__log_free(struct kb_log *log)
{
    if (!log)
        return;
    free(log->b.p);
    free(log);
}

/* The largest op event: OBSERVE (kind, dim coordinates, y); ASK is 8 bytes shorter,
 * TELL is 17 bytes. */
static size_t op_room(size_t dim)
{
    size_t most = 1 + 8 * dim + 8;
    return most > 17 ? most : 17;
}

int kb__log_reserve(struct kb_log *log, size_t dim)
{
    return reserve(&log->b, op_room(dim));
}

static int log_done(struct kb_log *log, size_t mark)
{
    if (log->b.oom) {
        log->b.oom = 0;
        log->b.len = mark;
        return KB_ENOMEM;
    }
    log->n_events++;
    return KB_OK;
}

int kb__log_ask(struct kb_log *log, const double *x, size_t dim)
{
    size_t mark = log->b.len;
    put_u8(&log->b, EV_ASK);
    put(&log->b, x, dim * sizeof *x);
    return log_done(log, mark);
}

int kb__log_tell(struct kb_log *log, uint64_t handle, double y)
{
    size_t mark = log->b.len;
    put_u8(&log->b, EV_TELL);
    put_u64(&log->b, handle);
    put_f64(&log->b, y);
    return log_done(log, mark);
}

int kb__log_abandon(struct kb_log *log, uint64_t handle)
{
    size_t mark = log->b.len;
    put_u8(&log->b, EV_ABANDON);
    put_u64(&log->b, handle);
    return log_done(log, mark);
}

int kb__log_fit(struct kb_log *log, const kb_fit_record *r, size_t kdim, size_t dim)
{
    size_t mark = log->b.len, bytes = 1 + 8 + 4 + 4 * 8 + 4 * 8 + 8 + kdim * 8;
    if (reserve(&log->b, bytes + op_room(dim)))
        return KB_ENOMEM;
    put_u8(&log->b, EV_FIT);
    put_u64(&log->b, r->n_obs);
    put_u32(&log->b, (uint32_t)r->rc);
    put_f64(&log->b, r->variance);
    put_f64(&log->b, r->noise);
    put_f64(&log->b, r->mix);
    put_f64(&log->b, r->prior_c);
    for (int i = 0; i < 4; i++)
        put_u64(&log->b, r->rng.s[i]);
    put_u64(&log->b, kdim);
    put(&log->b, r->lengthscales, kdim * sizeof *r->lengthscales);
    return log_done(log, mark);
}

int kb__log_observe(struct kb_log *log, const double *x, size_t dim, double y)
{
    size_t mark = log->b.len;
    put_u8(&log->b, EV_OBSERVE);
    put(&log->b, x, dim * sizeof *x);
    put_f64(&log->b, y);
    return log_done(log, mark);
}

static void put_config(buf *b, const kb_config *cfg)
{
    uint32_t n_set = 0;
    for (size_t i = 0; i < kb__config_count(cfg); i++)
        n_set += (uint32_t)kb_config_is_set(cfg, kb__config_spec(cfg, i)->name);
    put_str(b, kb_config_engine(cfg));
    put_u32(b, n_set);
    for (size_t i = 0; i < kb__config_count(cfg); i++) {
        const kb_option_spec *s = kb__config_spec(cfg, i);
        if (!kb_config_is_set(cfg, s->name))
            continue;
        put_str(b, s->name);
        put_u8(b, (uint8_t)s->type);
        if (s->type == KB_OPT_STRING) {
            put_str(b, kb_config_string(cfg, s->name));
        } else if (s->type == KB_OPT_VECTOR) {
            size_t n;
            const double *v = kb_config_vector(cfg, s->name, &n);
            put_u32(b, (uint32_t)n);
            put(b, v, n * sizeof *v);
        } else {
            put_f64(b, kb_config_number(cfg, s->name));
        }
    }
}

int kb_engine_snapshot(const kb_engine *e, unsigned char **bytes, size_t *len, kb_error *err)
{
    buf b = {0};
    const kb_space *s = e->space;
    put(&b, MAGIC, 8);
    put_u32(&b, VERSION);
    put_config(&b, e->cfg);
    put_u8(&b, (uint8_t)s->finite);
    put_u64(&b, s->n);
    put_u64(&b, s->dim);
    if (s->finite)
        put(&b, s->rows, s->n * s->dim * sizeof(double));
    else
        put_u8(&b, s->levels != NULL);
    for (size_t j = 0; !s->finite && s->levels && j < s->dim; j++) {
        put_u64(&b, s->levels[j]);
        put_u8(&b, s->categorical[j]);
        put_f64(&b, s->log_low ? s->log_low[j] : 0.0);
    }
    put_u64(&b, e->log->n_events);
    put(&b, e->log->b.p, e->log->b.len);
    if (b.oom) {
        free(b.p);
        return kb__fail(err, KB_ENOMEM, NULL, "out of memory for the snapshot");
    }
    *bytes = b.p;
    *len = b.len;
    return KB_OK;
}

/* ---------------------------------------------------------------- restore */

typedef struct reader {
    const unsigned char *p;
    size_t len, pos;
    int bad;
    int nomem; /* an allocation failed (bad is set too): not the bytes' fault */
} reader;

/* Stops reading after a failed allocation; returns p. */
static void *checked(reader *r, void *p)
{
    if (!p)
        r->bad = r->nomem = 1;
    return p;
}

static int get(reader *r, void *dst, size_t n)
{
    if (r->bad || n > r->len - r->pos) {
        r->bad = 1;
        memset(dst, 0, n);
        return -1;
    }
    memcpy(dst, r->p + r->pos, n);
    r->pos += n;
    return 0;
}

static uint8_t get_u8(reader *r) { uint8_t v; get(r, &v, 1); return v; }
static uint32_t get_u32(reader *r) { uint32_t v; get(r, &v, 4); return v; }
static uint64_t get_u64(reader *r) { uint64_t v; get(r, &v, 8); return v; }
static double get_f64(reader *r) { double v; get(r, &v, 8); return v; }

/* A NUL-terminated copy of the next string, owned by the caller; NULL if malformed. */
static char *get_str(reader *r)
{
    uint32_t n = get_u32(r);
    if (r->bad || n > r->len - r->pos) {
        r->bad = 1;
        return NULL;
    }
    char *s = checked(r, malloc((size_t)n + 1));
    if (!s)
        return NULL;
    memcpy(s, r->p + r->pos, n);
    s[n] = '\0';
    r->pos += n;
    return s;
}

static int read_option(reader *r, kb_config *cfg, kb_error *err)
{
    char *name = get_str(r);
    uint8_t type = get_u8(r);
    int rc = KB_ECORRUPT;
    if (!name || r->bad)
        goto done;
    if (type == KB_OPT_STRING) {
        char *v = get_str(r);
        rc = v ? kb_config_set_string(cfg, name, v, err) : KB_ECORRUPT;
        free(v);
    } else if (type == KB_OPT_VECTOR) {
        uint32_t n = get_u32(r);
        if (r->bad || (size_t)n * 8 > r->len - r->pos)
            goto done;
        double *v = checked(r, malloc((n ? n : 1) * sizeof *v));
        if (!v)
            goto done;
        get(r, v, n * sizeof *v);
        rc = kb_config_set_vector(cfg, name, v, n, err);
        free(v);
    } else if (type == KB_OPT_NUMBER || type == KB_OPT_INTEGER) {
        rc = kb_config_set_number(cfg, name, get_f64(r), err);
    }
done:
    free(name);
    return rc;
}

static kb_config *read_config(reader *r, kb_error *err)
{
    char *engine = get_str(r);
    kb_config *cfg = engine ? kb_config_new(engine, err) : NULL;
    free(engine);
    if (!cfg)
        return NULL;
    uint32_t n = get_u32(r);
    for (uint32_t i = 0; i < n && !r->bad; i++)
        if (read_option(r, cfg, err)) {
            kb_config_free(cfg);
            return NULL;
        }
    return cfg;
}

/* A box's levels (version 2; log-scale integers' lows from version 4), applied to s; -1
 * when malformed. */
static int read_levels(reader *r, uint32_t version, kb_space *s, kb_error *err)
{
    if (!get_u8(r))
        return r->bad ? -1 : 0;
    size_t d = s->dim, each = version >= 4 ? 17 : 9;
    if (d > (r->len - r->pos) / each)
        return -1;
    size_t *lv = checked(r, malloc(d * sizeof *lv));
    unsigned char *cat = checked(r, malloc(d));
    double *low = checked(r, calloc(d, sizeof *low));
    int rc = lv && cat && low ? 0 : -1, logs = 0;
    for (size_t j = 0; rc == 0 && j < d; j++) {
        lv[j] = (size_t)get_u64(r);
        cat[j] = get_u8(r);
        low[j] = version >= 4 ? get_f64(r) : 0.0;
        logs |= low[j] != 0.0;
    }
    if (rc == 0 && (r->bad || kb_space_set_levels(s, lv, cat, err) ||
                    (logs && kb_space_set_log_levels(s, low, err))))
        rc = -1;
    free(lv);
    free(cat);
    free(low);
    return rc;
}

static kb_space *read_space(reader *r, uint32_t version, kb_error *err)
{
    uint8_t finite = get_u8(r);
    uint64_t n = get_u64(r), dim = get_u64(r);
    if (r->bad || dim == 0 || n == 0)
        return NULL;
    if (!finite) {
        kb_space *s = kb_space_new_box(dim, n, err);
        if (s && version >= 2 && read_levels(r, version, s, err)) {
            kb_space_free(s);
            return NULL;
        }
        return s;
    }
    if (n > (r->len - r->pos) / 8 / dim)
        return NULL;
    double *rows = checked(r, malloc(n * dim * sizeof *rows)); /* bytes may be misaligned */
    if (!rows)
        return NULL;
    get(r, rows, n * dim * sizeof *rows);
    kb_space *s = kb_space_new_finite(rows, n, dim, err);
    free(rows);
    return s;
}

void kb__fit_queue_clear(kb_engine *e)
{
    for (size_t i = 0; i < e->fit_queued; i++)
        free(e->fit_queue[i].lengthscales);
    free(e->fit_queue);
    e->fit_queue = NULL;
    e->fit_queued = e->fit_queue_head = e->fit_queue_cap = 0;
}

static int positive(double v) { return isfinite(v) && v > 0.0; }

/* A FIT event's record, checked as the fit could have left it (no ENOMEM: such fits are
 * not logged), queued on e. KB_ECORRUPT, or KB_ENOMEM. */
static int queue_fit(reader *r, kb_engine *e)
{
    kb_fit_record f = {0};
    f.n_obs = get_u64(r);
    f.rc = (int32_t)get_u32(r);
    f.variance = get_f64(r);
    f.noise = get_f64(r);
    f.mix = get_f64(r);
    f.prior_c = get_f64(r);
    for (int i = 0; i < 4; i++)
        f.rng.s[i] = get_u64(r);
    uint64_t kdim = get_u64(r);
    if (r->bad || kdim != e->kernel.dim || f.rc == KB_ENOMEM || !positive(f.variance) ||
        !positive(f.noise) || !(f.mix >= 0.0 && f.mix <= 1.0) || !isfinite(f.prior_c))
        return KB_ECORRUPT;
    if (kb__grow((void **)&e->fit_queue, &e->fit_queue_cap, e->fit_queued + 1,
                 sizeof *e->fit_queue) ||
        !(f.lengthscales = malloc((kdim ? kdim : 1) * sizeof *f.lengthscales)))
        return KB_ENOMEM;
    int ok = get(r, f.lengthscales, kdim * sizeof *f.lengthscales) == 0;
    for (size_t j = 0; ok && j < kdim; j++)
        ok = positive(f.lengthscales[j]);
    if (!ok) {
        free(f.lengthscales);
        return KB_ECORRUPT;
    }
    e->fit_queue[e->fit_queued++] = f;
    return KB_OK;
}

/* One event; asks of format 3 are replayed as recorded (adopted where the engine now
 * chooses otherwise), those of earlier formats as the engine chooses now. */
static int replay_one(reader *r, uint32_t version, kb_engine *e, kb_error *err)
{
    uint8_t kind = get_u8(r);
    if (r->bad)
        return KB_ECORRUPT;
    size_t d = e->space->dim;
    double x[d];
    if (kind == EV_ASK) {
        kb_point pt;
        if (version >= 3 && get(r, x, d * sizeof(double)))
            return KB_ECORRUPT;
        return kb_engine_ask_recorded(e, version >= 3 ? x : NULL, &pt, err);
    }
    if (kind == EV_TELL) {
        uint64_t h = get_u64(r);
        double y = get_f64(r);
        return r->bad ? KB_ECORRUPT : kb_engine_tell(e, h, y, err);
    }
    if (kind == EV_ABANDON) {
        uint64_t h = get_u64(r);
        return r->bad ? KB_ECORRUPT : kb_engine_abandon(e, h, err);
    }
    if (kind == EV_OBSERVE) {
        get(r, x, d * sizeof(double));
        double y = get_f64(r);
        return r->bad ? KB_ECORRUPT : kb_engine_observe(e, x, y, err);
    }
    if (kind == EV_FIT && version >= 5) {
        int rc = queue_fit(r, e);
        return rc == KB_ENOMEM ? kb__fail(err, rc, NULL, "out of memory") : rc;
    }
    return KB_ECORRUPT;
}

uint32_t kb_snapshot_version(const unsigned char *bytes, size_t len)
{
    uint32_t v;
    if (len < 12 || memcmp(bytes, MAGIC, 8) != 0)
        return 0;
    memcpy(&v, bytes + 8, 4);
    return v >= 1 && v <= VERSION ? v : 0;
}

/* An allocation that failed is reported as KB_ENOMEM, not as a corrupt snapshot: the
 * same bytes restore once memory is available (the daemon retries such a restore, a
 * corrupt one it does not). */
kb_engine *kb_engine_restore(const unsigned char *bytes, size_t len, kb_error *err)
{
    reader r = {bytes, len, 0, 0, 0};
    kb_error inner = {0};
    char magic[8];
    kb_config *cfg = NULL;
    kb_space *space = NULL;
    kb_engine *e = NULL;
    get(&r, magic, 8);
    uint32_t version = r.bad ? 0 : get_u32(&r);
    if (r.bad || memcmp(magic, MAGIC, 8) != 0 || version < 1 || version > VERSION)
        goto corrupt;
    if (!(cfg = read_config(&r, &inner)) || !(space = read_space(&r, version, &inner)))
        goto corrupt;
    if (!(e = kb_engine_create(cfg, space, &inner)))
        goto corrupt;
    uint64_t n = get_u64(&r);
    for (uint64_t i = 0; i < n; i++)
        if (replay_one(&r, version, e, &inner))
            goto corrupt;
    if (r.bad || r.pos != r.len)
        goto corrupt;
    kb__fit_queue_clear(e);
    if (e->nomem) { /* a helper's allocation failed on the way (internal.h, nomem) */
        inner.code = KB_ENOMEM;
        goto corrupt;
    }
    kb_config_free(cfg);
    kb_space_free(space);
    return e;
corrupt:
    kb_engine_free(e);
    kb_config_free(cfg);
    kb_space_free(space);
    if (r.nomem || inner.code == KB_ENOMEM)
        kb__fail(err, KB_ENOMEM, NULL, "out of memory restoring the snapshot");
    else
        kb__fail(err, KB_ECORRUPT, "snapshot", "snapshot is malformed or inconsistent");
    return NULL;
}
