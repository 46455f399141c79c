/*
 * conn_guard.c - This file contains the connection cap of kbanditd: which open connection
 * gives way when a new one arrives at --max-connections (issue 16 item 4).
 *
 * Why: libmicrohttpd refuses a new connection once its limit is reached, whoever holds
 * the slots. Idle or slowly-sending connections (slowloris) from enough addresses fill
 * every slot and starve new well-behaved clients; timeouts alone cannot help, since a
 * client sending a byte now and then is never idle. So libmicrohttpd's own limit is set
 * above the cap (http.c) and the guard keeps the cap itself: a new connection beyond it
 * evicts the connection that has waited longest on its client.
 *
 * Invariants (all under g.lock):
 *  - every started connection has one `guarded` entry (its socket context) until
 *    libmicrohttpd reports it closed; `where` says in which state it is:
 *    FRESH / SERVED: waiting for its client's bytes (request headers or body), in the
 *      list of that name, ordered by the last progress (oldest first); FRESH ones have
 *      had no request answered yet, SERVED ones at least one (kept-alive workers);
 *    BUSY: its request is being handled (long-polls and commit waits included): never
 *      evicted, in no list;
 *    EVICTED: shut down by the guard, waiting for libmicrohttpd to close it, in no list.
 *  - `live` counts the entries not EVICTED; after a start it is at most the cap unless
 *    every other connection is BUSY (then the new one itself is evicted).
 *  - Eviction is shutdown(2) of the socket: libmicrohttpd sees the end of the stream and
 *    closes the connection in its own thread. The entry is freed in the CLOSED
 *    notification, which libmicrohttpd calls before it closes the descriptor, so the
 *    guard never shuts down a descriptor number that was reused.
 *  - Victims: the oldest FRESH connection first (idle or stalled clients that never
 *    completed a request: the slowloris shape), then the oldest SERVED one.
 *
 * Header timeout: below the cap a client trickling header bytes is never idle, so it
 * kept its slot for good. A sweeper thread shuts down, the same way, every connection
 * whose request headers have not reached the handler --header-timeout-s after its
 * request began: for a FRESH connection, when it was accepted; for a SERVED one, when
 * the sweep first sees more bytes received on its socket (TCP_INFO) than at its last
 * answer (until then it is idle between requests, which the idle timeout governs). An
 * entry's `began` is 0 while no request is under way, and `headers` is set once its
 * request's headers reached the handler.
 * Only the client's delay counts: while libmicrohttpd's thread for the connection is
 * blocked (a handler waiting for a study's mutex that a long ask or restore holds), a
 * complete head sits unread in the socket. A period between two sweeps in which bytes
 * waited unread at both and the daemon read none of them (the read position, bytes
 * received minus bytes waiting, did not move) is the daemon's: `began` moves forward by
 * it. A client trickling bytes to a daemon that reads them gets no such period. (Before,
 * workers queued behind bbkb's resparsifications were cut off with their requests sent.)
 */
#include "conn_guard.h"

#include "log.h"

#include <linux/tcp.h> /* struct tcp_info with tcpi_bytes_received (glibc's lacks it) */
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <time.h>

enum { FRESH = 0, SERVED = 1, BUSY, EVICTED, KEEP /* move(): stay in the same list */ };

typedef struct guarded {
    struct guarded *prev, *next;
    int fd;
    int where;
    int headers;  /* the current request's headers reached the handler */
    double began; /* mono_sec() when its current request began; 0: none under way */
    unsigned long long rx; /* bytes received from its client by its last answer (SERVED) */
    /* at the last sweep that looked at it: bytes the daemon had read from the socket, and
     * whether more were waiting unread */
    unsigned long long consumed;
    int unread;
    /* the current request's context and what frees it (conn_guard_hold); touched only by
     * the connection's own libmicrohttpd thread, as closed() is */
    void *held;
    void (*release)(void *);
} guarded;

/* How often the sweeper looks for connections past the header timeout (seconds). */
#define SWEEP_PERIOD 0.5

static struct {
    pthread_mutex_t lock;
    guarded *head[2], *tail[2];
    unsigned live, cap;
    atomic_ullong evicted, header_timeouts;
    double header_timeout;
    double swept; /* mono_sec() of the last sweep */
    pthread_t sweeper;
    pthread_cond_t wake; /* signalled (under lock) to stop the sweeper */
    int stop;
} g = {.lock = PTHREAD_MUTEX_INITIALIZER};

void conn_guard_init(unsigned max_connections, unsigned header_timeout_s)
{
    g.cap = max_connections;
    g.header_timeout = header_timeout_s;
}

unsigned long long conn_guard_evicted(void)
{
    return atomic_load(&g.evicted);
}

unsigned long long conn_guard_header_timeouts(void)
{
    return atomic_load(&g.header_timeouts);
}

static void unlink_entry(guarded *e)
{
    if (e->where != FRESH && e->where != SERVED)
        return;
    *(e->prev ? &e->prev->next : &g.head[e->where]) = e->next;
    *(e->next ? &e->next->prev : &g.tail[e->where]) = e->prev;
    e->prev = e->next = NULL;
}

static void append(guarded *e, int list)
{
    unlink_entry(e);
    e->where = list;
    e->prev = g.tail[list];
    *(g.tail[list] ? &g.tail[list]->next : &g.head[list]) = e;
    g.tail[list] = e;
}

/* Shuts e down; *counter (evictions at the cap, or header timeouts) counts it. */
static void evict(guarded *e, atomic_ullong *counter)
{
    unlink_entry(e);
    e->where = EVICTED;
    g.live--;
    shutdown(e->fd, SHUT_RDWR);
    atomic_fetch_add(counter, 1);
}

/* The connection to give way for `arriving`: the oldest waiting one other than it. */
static guarded *victim(const guarded *arriving)
{
    for (int list = FRESH; list <= SERVED; list++)
        for (guarded *e = g.head[list]; e; e = e->next)
            if (e != arriving)
                return e;
    return NULL;
}

static void started(struct MHD_Connection *c, void **socket_context)
{
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci)
        return; /* no socket to shut down: left untracked (MHD always has one) */
    guarded *e = calloc(1, sizeof *e);
    if (!e) { /* untracked, it could never be evicted: refuse it instead */
        shutdown(ci->connect_fd, SHUT_RDWR);
        return;
    }
    e->fd = ci->connect_fd;
    e->where = BUSY; /* in no list yet */
    e->began = mono_sec();
    *socket_context = e;
    pthread_mutex_lock(&g.lock);
    append(e, FRESH);
    g.live++;
    while (g.live > g.cap) {
        guarded *v = victim(e);
        evict(v ? v : e, &g.evicted);
    }
    pthread_mutex_unlock(&g.lock);
}

static void closed(void **socket_context)
{
    guarded *e = *socket_context;
    if (!e)
        return;
    if (e->held) /* libmicrohttpd closed it without its request-completed callback */
        e->release(e->held);
    pthread_mutex_lock(&g.lock);
    unlink_entry(e);
    if (e->where != EVICTED)
        g.live--;
    pthread_mutex_unlock(&g.lock);
    free(e);
    *socket_context = NULL;
}

void conn_guard_notify(void *cls, struct MHD_Connection *c, void **socket_context,
                       enum MHD_ConnectionNotificationCode code)
{
    (void)cls;
    if (code == MHD_CONNECTION_NOTIFY_STARTED)
        started(c, socket_context);
    else
        closed(socket_context);
}

/* Bytes the kernel received on socket fd so far (0 when it cannot say: not TCP). */
static unsigned long long bytes_received(int fd)
{
    struct tcp_info ti;
    socklen_t len = sizeof ti;
    if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) ||
        len < offsetof(struct tcp_info, tcpi_bytes_received) + sizeof ti.tcpi_bytes_received)
        return 0;
    return ti.tcpi_bytes_received;
}

/* Bytes received on socket fd that the daemon has not read yet (0 when it cannot say). */
static unsigned long long bytes_waiting(int fd)
{
    int n;
    return ioctl(fd, FIONREAD, &n) == 0 && n > 0 ? (unsigned long long)n : 0;
}

static guarded *entry_of(struct MHD_Connection *c)
{
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

/* Moves c's entry, unless it was evicted: to the end of its own list (KEEP: progress,
 * only while waiting on the client), out of the lists (BUSY) or to the end of SERVED. */
static void move(struct MHD_Connection *c, int to)
{
    guarded *e = entry_of(c);
    if (!e)
        return;
    unsigned long long rx = to == SERVED ? bytes_received(e->fd) : 0; /* a syscall: unlocked */
    pthread_mutex_lock(&g.lock);
    if (to == KEEP && (e->where == FRESH || e->where == SERVED)) {
        append(e, e->where);
        e->headers = 1;
    } else if (to == BUSY && e->where != EVICTED) {
        unlink_entry(e);
        e->where = BUSY;
        e->headers = 1;
    } else if (to == SERVED && e->where != EVICTED) {
        append(e, SERVED);
        e->headers = 0;
        e->began = 0;
        e->rx = rx;
    }
    pthread_mutex_unlock(&g.lock);
}

void conn_guard_progress(struct MHD_Connection *c) { move(c, KEEP); }
void conn_guard_busy(struct MHD_Connection *c) { move(c, BUSY); }
void conn_guard_done(struct MHD_Connection *c) { move(c, SERVED); }

void conn_guard_hold(struct MHD_Connection *c, void *request, void (*release)(void *))
{
    guarded *e = entry_of(c);
    if (!e)
        return;
    if (request && e->held && e->held != request) /* its completion callback never came */
        e->release(e->held);
    e->held = request;
    e->release = release;
}

/* ------------------------------------------------------------ header timeout */

/* When e's current request began, 0 if none has, as the client's delay counts (g.lock
 * held): a SERVED connection's request begins when bytes arrive after its last answer
 * (noticed within a sweep); a period of `period` seconds in which the daemon left bytes
 * unread moves the start forward by it (see the top of this file). */
static double request_began(guarded *e, double now, double period)
{
    /* one syscall per connection and sweep unless bytes wait or a kept-alive
     * connection's next request has not begun (the sweep holds g.lock) */
    unsigned long long waiting = bytes_waiting(e->fd);
    unsigned long long received =
        waiting || (!e->began && e->where == SERVED) ? bytes_received(e->fd) : 0;
    int stalled = e->unread && waiting && received - waiting == e->consumed;
    e->unread = waiting > 0;
    e->consumed = received - waiting;
    if (!e->began && e->where == SERVED && received > e->rx)
        e->began = now;
    else if (e->began && stalled)
        e->began += period;
    return e->began;
}

static void sweep(double now)
{
    double period = now - g.swept;
    g.swept = now;
    for (int list = FRESH; list <= SERVED; list++)
        for (guarded *e = g.head[list], *next; e; e = next) {
            next = e->next;
            double began = e->headers ? 0 : request_began(e, now, period);
            if (began && now - began >= g.header_timeout)
                evict(e, &g.header_timeouts);
        }
}

static void *sweeper_main(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&g.lock);
    while (!g.stop) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        ts.tv_nsec += (long)(SWEEP_PERIOD * 1e9);
        ts.tv_sec += ts.tv_nsec / 1000000000L;
        ts.tv_nsec %= 1000000000L;
        pthread_cond_timedwait(&g.wake, &g.lock, &ts);
        if (!g.stop)
            sweep(mono_sec());
    }
    pthread_mutex_unlock(&g.lock);
    return NULL;
}

int conn_guard_start_sweeper(void)
{
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&g.wake, &ca);
    pthread_condattr_destroy(&ca);
    g.stop = 0;
    g.swept = mono_sec();
    int rc = pthread_create(&g.sweeper, NULL, sweeper_main, NULL);
    if (rc)
        pthread_cond_destroy(&g.wake);
    return rc;
}

void conn_guard_stop_sweeper(void)
{
    pthread_mutex_lock(&g.lock);
    g.stop = 1;
    pthread_cond_signal(&g.wake);
    pthread_mutex_unlock(&g.lock);
    pthread_join(g.sweeper, NULL);
    pthread_cond_destroy(&g.wake);
}
