/*
 * fault_shim.c - This file contains the fault-injection shim of the test suite, an
 * LD_PRELOAD library (build/kb-fault.so) in the manner of SQLite's test_malloc.c and
 * test6.c: the n-th call of one kind, counted from arming, fails.
 *
 *   KB_FAULT=KIND:N[:COUNT] LD_PRELOAD=build/kb-fault.so build/kbanditd ...
 *   kill -USR2 <pid>        arms it: calls are counted from here on
 *   KB_FAULT_ARM=start      arms it as main() is entered instead, so that start-up
 *                           (options, socket, database, migrations, registry, restore
 *                           threads) is swept too (SQLite's malloc tests count from the
 *                           first call the same way)
 *
 * KIND is what fails (calls N .. N+COUNT-1 after arming; COUNT defaults to 1; N = 0
 * counts without failing, to measure a workload):
 *   malloc     malloc, calloc and realloc (one counter) return NULL with ENOMEM;
 *   write      SQLite's xWrite returns SQLITE_IOERR_WRITE;
 *   full       SQLite's xWrite returns SQLITE_FULL (a full disk);
 *   sync       SQLite's xSync returns SQLITE_IOERR_FSYNC;
 *   fdatasync  fdatasync(2) returns -1 with EIO (the daemon's syncer calls it directly on
 *              the WAL file, and SQLite's unix VFS through libc as well);
 *   thread     pthread_create returns EAGAIN (a process out of threads or memory).
 * Separately, a transient failure (not counted, not armed): with KB_FAULT_FILE and
 * KB_FAULT_SQL set, every SQLite statement whose SQL contains KB_FAULT_SQL fails with
 * SQLITE_IOERR for as long as the file KB_FAULT_FILE exists (sqlite3_step interposed; the
 * daemon calls it through the PLT), which plays "database is locked" or an I/O error
 * that goes away (test_rebuild_retry.py). With KB_FAULT_STALL=1 as well, such a statement
 * waits while the file exists and then runs normally instead: a study's restore (its
 * mutex held) made as slow as a test needs (test_header_timeout.py).
 * The xWrite and xSync faults come from a VFS wrapped around SQLite's default one and
 * registered as the new default by this library's constructor, before main: the daemon
 * opens its connections through it without knowing. Nothing here is linked into
 * kbanditd; without LD_PRELOAD the daemon runs unchanged.
 *
 * The shim writes JSON lines to stderr (the daemon's log) with write(2), which neither
 * allocates nor takes a lock: {"msg":"fault armed"} when armed, {"msg":"fault injected",
 * ...} at each injected failure, and {"msg":"fault calls",...} with the count at exit.
 *
 * Invariants: until armed, every call goes straight to the real function, so start-up
 * completes (with KB_FAULT_ARM=start: the dynamic loader and the libraries'
 * constructors, which run before main and are not the daemon's code); the counter is atomic, so with several threads exactly the N-th call
 * overall fails (which thread makes it depends on scheduling). While dlsym resolves the
 * real allocator (it may itself call calloc), allocations come from a static buffer that
 * free() recognizes and ignores. Allocations inside pthread_getattr_np never fail: the
 * ASan runtime calls it as each thread starts and stops the process on a CHECK when it
 * fails (not the daemon's doing); kbanditd itself never calls it.
 */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { K_NONE, K_MALLOC, K_WRITE, K_FULL, K_SYNC, K_FDATASYNC, K_THREAD };
static const char *const kind_names[] = {"none", "malloc", "write", "full", "sync",
                                         "fdatasync", "thread"};

static int kind;
static uint64_t first, count = 1;
static atomic_int armed;
static atomic_uint_fast64_t calls;

static void say(const char *line)
{
    ssize_t n = write(STDERR_FILENO, line, strlen(line));
    (void)n;
}

static _Thread_local int exempt; /* inside pthread_getattr_np (see the header) */

/* Whether this call of kind k fails (counted only once armed). */
static int fault(int k)
{
    if (k != kind || !atomic_load(&armed) || exempt)
        return 0;
    uint64_t n = atomic_fetch_add(&calls, 1) + 1;
    if (!first || n < first || n >= first + count)
        return 0;
    char line[96];
    snprintf(line, sizeof line, "{\"msg\":\"fault injected\",\"kind\":\"%s\",\"call\":%llu}\n",
             kind_names[k], (unsigned long long)n);
    say(line);
    return 1;
}

/* ------------------------------------------------------------ allocator */

static void *(*real_malloc)(size_t);
static void *(*real_calloc)(size_t, size_t);
static void *(*real_realloc)(void *, size_t);
static void (*real_free)(void *);
static _Alignas(16) unsigned char boot[8192];
static size_t boot_used;
static int resolving;

static void resolve(void)
{
    if (real_free || resolving)
        return;
    resolving = 1;
    real_malloc = (void *(*)(size_t))dlsym(RTLD_NEXT, "malloc");
    real_calloc = (void *(*)(size_t, size_t))dlsym(RTLD_NEXT, "calloc");
    real_realloc = (void *(*)(void *, size_t))dlsym(RTLD_NEXT, "realloc");
    real_free = (void (*)(void *))dlsym(RTLD_NEXT, "free");
    resolving = 0;
}

static void *boot_alloc(size_t n)
{
    n = (n + 15) & ~(size_t)15;
    if (n > sizeof boot - boot_used)
        return NULL;
    void *p = boot + boot_used;
    boot_used += n;
    return p; /* static storage: already zero */
}

static int from_boot(const void *p)
{
    return (const unsigned char *)p >= boot && (const unsigned char *)p < boot + sizeof boot;
}

void *malloc(size_t n)
{
    resolve();
    if (!real_malloc)
        return boot_alloc(n);
    if (fault(K_MALLOC)) {
        errno = ENOMEM;
        return NULL;
    }
    return real_malloc(n);
}

void *calloc(size_t n, size_t size)
{
    resolve();
    if (!real_calloc)
        return size && n > SIZE_MAX / size ? NULL : boot_alloc(n * size);
    if (fault(K_MALLOC)) {
        errno = ENOMEM;
        return NULL;
    }
    return real_calloc(n, size);
}

void *realloc(void *p, size_t n)
{
    resolve();
    if (from_boot(p) || !real_realloc)
        return NULL; /* never happens: only dlsym allocates from boot, and frees */
    if (fault(K_MALLOC)) {
        errno = ENOMEM;
        return NULL;
    }
    return real_realloc(p, n);
}

void free(void *p)
{
    resolve();
    if (p && !from_boot(p) && real_free)
        real_free(p);
}

static int (*real_getattr_np)(pthread_t, pthread_attr_t *); /* by the constructor */

int pthread_getattr_np(pthread_t t, pthread_attr_t *attr)
{
    exempt++;
    int rc = real_getattr_np(t, attr);
    exempt--;
    return rc;
}

/* ------------------------------------------------------------ fdatasync */

static int (*real_fdatasync)(int); /* resolved by the constructor, before any thread */

int fdatasync(int fd)
{
    if (fault(K_FDATASYNC)) {
        errno = EIO;
        return -1;
    }
    return real_fdatasync(fd);
}

/* ------------------------------------------------------------ threads */

typedef void *(*thread_fn)(void *);
static int (*real_create)(pthread_t *, const pthread_attr_t *, thread_fn, void *);

int pthread_create(pthread_t *t, const pthread_attr_t *attr, thread_fn fn, void *arg)
{
    if (fault(K_THREAD))
        return EAGAIN;
    return real_create(t, attr, fn, arg);
}

/* ------------------------------------------------------------ SQLite VFS */

/* A file of the wrapped VFS: the real VFS's file follows it in the same allocation
 * (szOsFile is the sum of both). */
typedef struct {
    sqlite3_file base;
    sqlite3_file *real;
} fault_file;

static sqlite3_vfs *real_vfs;
static sqlite3_vfs fault_vfs;

#define REAL(f) (((fault_file *)(f))->real)

static int f_close(sqlite3_file *f) { return REAL(f)->pMethods->xClose(REAL(f)); }

static int f_read(sqlite3_file *f, void *buf, int n, sqlite3_int64 off)
{
    return REAL(f)->pMethods->xRead(REAL(f), buf, n, off);
}

static int f_write(sqlite3_file *f, const void *buf, int n, sqlite3_int64 off)
{
    if (fault(K_WRITE))
        return SQLITE_IOERR_WRITE;
    if (fault(K_FULL))
        return SQLITE_FULL;
    return REAL(f)->pMethods->xWrite(REAL(f), buf, n, off);
}

static int f_truncate(sqlite3_file *f, sqlite3_int64 size)
{
    return REAL(f)->pMethods->xTruncate(REAL(f), size);
}

static int f_sync(sqlite3_file *f, int flags)
{
    if (fault(K_SYNC))
        return SQLITE_IOERR_FSYNC;
    return REAL(f)->pMethods->xSync(REAL(f), flags);
}

static int f_size(sqlite3_file *f, sqlite3_int64 *size)
{
    return REAL(f)->pMethods->xFileSize(REAL(f), size);
}

static int f_lock(sqlite3_file *f, int l) { return REAL(f)->pMethods->xLock(REAL(f), l); }
static int f_unlock(sqlite3_file *f, int l) { return REAL(f)->pMethods->xUnlock(REAL(f), l); }

static int f_reserved(sqlite3_file *f, int *out)
{
    return REAL(f)->pMethods->xCheckReservedLock(REAL(f), out);
}

static int f_control(sqlite3_file *f, int op, void *arg)
{
    return REAL(f)->pMethods->xFileControl(REAL(f), op, arg);
}

static int f_sector(sqlite3_file *f) { return REAL(f)->pMethods->xSectorSize(REAL(f)); }

static int f_device(sqlite3_file *f)
{
    return REAL(f)->pMethods->xDeviceCharacteristics(REAL(f));
}

static int f_shm_map(sqlite3_file *f, int pg, int pgsz, int extend, void volatile **p)
{
    return REAL(f)->pMethods->xShmMap(REAL(f), pg, pgsz, extend, p);
}

static int f_shm_lock(sqlite3_file *f, int off, int n, int flags)
{
    return REAL(f)->pMethods->xShmLock(REAL(f), off, n, flags);
}

static void f_shm_barrier(sqlite3_file *f) { REAL(f)->pMethods->xShmBarrier(REAL(f)); }

static int f_shm_unmap(sqlite3_file *f, int del)
{
    return REAL(f)->pMethods->xShmUnmap(REAL(f), del);
}

static int f_fetch(sqlite3_file *f, sqlite3_int64 off, int n, void **p)
{
    return REAL(f)->pMethods->xFetch(REAL(f), off, n, p);
}

static int f_unfetch(sqlite3_file *f, sqlite3_int64 off, void *p)
{
    return REAL(f)->pMethods->xUnfetch(REAL(f), off, p);
}

/* Version 3, as the unix VFS's: every method exists. */
static const sqlite3_io_methods fault_io = {
    3, f_close, f_read, f_write, f_truncate, f_sync, f_size, f_lock, f_unlock, f_reserved,
    f_control, f_sector, f_device, f_shm_map, f_shm_lock, f_shm_barrier, f_shm_unmap,
    f_fetch, f_unfetch,
};

static int f_open(sqlite3_vfs *vfs, const char *name, sqlite3_file *f, int flags, int *out)
{
    fault_file *ff = (fault_file *)f;
    ff->real = (sqlite3_file *)(ff + 1);
    int rc = real_vfs->xOpen(real_vfs, name, ff->real, flags, out);
    /* SQLite calls xClose only when pMethods is set */
    ff->base.pMethods = ff->real->pMethods ? &fault_io : NULL;
    return rc;
}

static void vfs_install(void)
{
    real_vfs = sqlite3_vfs_find(NULL);
    if (!real_vfs || real_vfs->iVersion < 1 || !real_vfs->xOpen) {
        say("{\"msg\":\"fault shim: no default SQLite VFS\"}\n");
        abort();
    }
    fault_vfs = *real_vfs; /* the other methods and pAppData are the real VFS's */
    fault_vfs.pNext = NULL;
    fault_vfs.zName = "kb-fault";
    fault_vfs.szOsFile = (int)sizeof(fault_file) + real_vfs->szOsFile;
    fault_vfs.xOpen = f_open;
    if (sqlite3_vfs_register(&fault_vfs, 1) != SQLITE_OK) {
        say("{\"msg\":\"fault shim: cannot register the VFS\"}\n");
        abort();
    }
}

/* ------------------------------------------------------------ set-up */

static void arm(int sig)
{
    (void)sig;
    atomic_store(&armed, 1);
    say("{\"msg\":\"fault armed\"}\n");
}

/* ------------------------------------------------------------ arming at main */

typedef int (*main_fn)(int, char **, char **);
static main_fn real_main;

static int armed_main(int argc, char **argv, char **envp)
{
    arm(0);
    return real_main(argc, argv, envp);
}

/* glibc's entry calls main through here: with KB_FAULT_ARM=start the daemon's main is
 * wrapped so that counting starts at its first line. */
int __libc_start_main(main_fn main, int argc, char **argv, void (*init)(void),
                      void (*fini)(void), void (*rtld_fini)(void), void *stack_end)
{
    int (*real)(main_fn, int, char **, void (*)(void), void (*)(void), void (*)(void),
                void *) = dlsym(RTLD_NEXT, "__libc_start_main");
    const char *when = getenv("KB_FAULT_ARM");
    if (kind != K_NONE && when && strcmp(when, "start") == 0) {
        real_main = main;
        main = armed_main;
    }
    return real(main, argc, argv, init, fini, rtld_fini, stack_end);
}

/* KB_FAULT=KIND:N[:COUNT]; anything else stops the process at once (a test that meant
 * to inject a fault must not run without one). */
static void parse_spec(const char *spec)
{
    for (int k = K_MALLOC; k <= K_THREAD; k++) {
        size_t n = strlen(kind_names[k]);
        if (strncmp(spec, kind_names[k], n) == 0 && spec[n] == ':') {
            char *end;
            errno = 0;
            first = strtoull(spec + n + 1, &end, 10);
            if (*end == ':')
                count = strtoull(end + 1, &end, 10);
            if (!errno && !*end && end != spec + n + 1 && count > 0) {
                kind = k;
                return;
            }
        }
    }
    say("{\"msg\":\"fault shim: KB_FAULT is not KIND:N[:COUNT]\"}\n");
    _exit(2);
}

static int (*real_step)(sqlite3_stmt *); /* resolved by the constructor */

/* The switch file exists and the statement's SQL names KB_FAULT_SQL. */
static int step_faulted(sqlite3_stmt *st)
{
    const char *file = getenv("KB_FAULT_FILE"), *what = getenv("KB_FAULT_SQL");
    const char *sql = sqlite3_sql(st);
    return file && what && sql && strstr(sql, what) && access(file, F_OK) == 0;
}

int sqlite3_step(sqlite3_stmt *st)
{
    const char *stall = getenv("KB_FAULT_STALL");
    if (!stall || strcmp(stall, "1") != 0)
        return step_faulted(st) ? SQLITE_IOERR : real_step(st);
    while (step_faulted(st))
        usleep(10000);
    return real_step(st);
}

__attribute__((constructor)) static void shim_init(void)
{
    resolve();
    real_fdatasync = (int (*)(int))dlsym(RTLD_NEXT, "fdatasync");
    real_step = (int (*)(sqlite3_stmt *))dlsym(RTLD_NEXT, "sqlite3_step");
    real_create = (int (*)(pthread_t *, const pthread_attr_t *, thread_fn, void *))dlsym(
        RTLD_NEXT, "pthread_create");
    real_getattr_np = (int (*)(pthread_t, pthread_attr_t *))dlsym(RTLD_NEXT,
                                                                  "pthread_getattr_np");
    const char *spec = getenv("KB_FAULT");
    if (!spec)
        return;
    parse_spec(spec);
    vfs_install();
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = arm;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGUSR2, &sa, NULL);
}

__attribute__((destructor)) static void shim_report(void)
{
    if (kind == K_NONE)
        return;
    char line[96];
    snprintf(line, sizeof line, "{\"msg\":\"fault calls\",\"kind\":\"%s\",\"calls\":%llu}\n",
             kind_names[kind], (unsigned long long)atomic_load(&calls));
    say(line);
}
