/*
 * sqlite_fault.c - This file contains an LD_PRELOAD shim for the integration tests: it
 * makes SQLite statements fail with SQLITE_IOERR for as long as a file exists, to play a
 * transient storage failure ("database is locked", an I/O error that goes away) against
 * the real daemon, without a test hook in the daemon itself.
 *
 * Environment: KB_FAULT_FILE names the switch file (the test creates and removes it);
 * KB_FAULT_SQL is a substring of the statements to fail (e.g. "events"). Without both,
 * every statement runs normally.
 *
 * Invariant: only sqlite3_step is interposed (kbanditd calls it through the PLT); the
 * real function is found once with dlsym(RTLD_NEXT), and a failed statement is reset so
 * the connection's state is the one SQLite leaves after a failed step.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int (*real_step)(sqlite3_stmt *);
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void find_real(void)
{
    real_step = (int (*)(sqlite3_stmt *))dlsym(RTLD_NEXT, "sqlite3_step");
}

/* The switch is on and the statement's SQL names the substring under test. */
static int faulted(sqlite3_stmt *st)
{
    const char *file = getenv("KB_FAULT_FILE"), *what = getenv("KB_FAULT_SQL");
    const char *sql = sqlite3_sql(st);
    return file && what && sql && strstr(sql, what) && access(file, F_OK) == 0;
}

int sqlite3_step(sqlite3_stmt *st)
{
    pthread_once(&once, find_real);
    if (faulted(st))
        return SQLITE_IOERR;
    return real_step(st);
}
