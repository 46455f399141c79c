/*
 * slow_fsync.c - an LD_PRELOAD shim for benchmarks: fsync and fdatasync sleep
 * KB_FSYNC_DELAY_US microseconds (default 5000) before doing the real call, to measure
 * the daemon as if on a disk whose flush costs that much (this machine's costs ~0.7 ms).
 *   LD_PRELOAD=build/kb-slow-fsync.so build/kbanditd ...   (bench/load/run does it when
 *   KB_LOAD_FSYNC_DELAY_US is set)
 */
#include <dlfcn.h>
#include <stdlib.h>
#include <time.h>

static void delay(void)
{
    const char *e = getenv("KB_FSYNC_DELAY_US");
    long us = e ? atol(e) : 5000;
    struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
    nanosleep(&ts, NULL);
}

int fsync(int fd)
{
    int (*real)(int) = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
    delay();
    return real(fd);
}

int fdatasync(int fd)
{
    int (*real)(int) = (int (*)(int))dlsym(RTLD_NEXT, "fdatasync");
    delay();
    return real(fd);
}
