/*
 * conn_guard.h - the connection cap of kbanditd (issue 16 item 4): when --max-connections
 * connections are open, a new one evicts the open connection that has waited longest
 * on its client, instead of being refused while hostile or stalled clients hold every
 * slot.
 *
 * libmicrohttpd calls conn_guard_notify (MHD_OPTION_NOTIFY_CONNECTION) when a connection
 * starts and when it closes; http.c tells the guard when bytes of a request reached the
 * access handler (progress), when the request is being handled (busy: never evicted,
 * long-polls and commit waits included) and when it was answered (done). A sweeper
 * thread closes connections whose request headers take longer than --header-timeout-s.
 */
#ifndef KB_CONN_GUARD_H
#define KB_CONN_GUARD_H

#include <microhttpd.h>

/* The cap the guard keeps (libmicrohttpd's own limit must be above it, see http.c) and
 * the time a request's headers may take since the request began. */
void conn_guard_init(unsigned max_connections, unsigned header_timeout_s);
/* The thread that closes connections past the header timeout; 0, or pthread_create's
 * error number (not started). */
int conn_guard_start_sweeper(void);
void conn_guard_stop_sweeper(void);
void conn_guard_notify(void *cls, struct MHD_Connection *c, void **socket_context,
                       enum MHD_ConnectionNotificationCode code);
void conn_guard_progress(struct MHD_Connection *c);
void conn_guard_busy(struct MHD_Connection *c);
void conn_guard_done(struct MHD_Connection *c);
/* The context of c's current request (NULL: none), which release frees if c closes, or
 * another is held, before it is let go with NULL. libmicrohttpd 0.9.75 closes a
 * connection without the request-completed callback when a second error comes after
 * the first (transmit_error_response_len sets the state to closed directly), which
 * leaked the context on_uri had made (docs/TESTING.md finding 14). Called only from c's
 * own thread. */
void conn_guard_hold(struct MHD_Connection *c, void *request, void (*release)(void *));
/* Connections evicted since start (a counter for /metrics). */
unsigned long long conn_guard_evicted(void);
/* Connections closed by the header timeout since start (a counter for /metrics). */
unsigned long long conn_guard_header_timeouts(void);

#endif /* KB_CONN_GUARD_H */
