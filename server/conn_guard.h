/*
 * conn_guard.h - the connection cap of kbanditd (issue 16 item 4): when --max-connections
 * connections are open, a new one evicts the open connection that has waited longest
 * on its client, instead of being refused while hostile or stalled clients hold every
 * slot.
 *
 * libmicrohttpd calls conn_guard_notify (MHD_OPTION_NOTIFY_CONNECTION) when a connection
 * starts and when it closes; http.c tells the guard when bytes of a request reached the
 * access handler (progress), when the request is being handled (busy: never evicted,
 * long-polls and commit waits included) and when it was answered (done).
 */
#ifndef KB_CONN_GUARD_H
#define KB_CONN_GUARD_H

#include <microhttpd.h>

/* The cap the guard keeps; libmicrohttpd's own limit must be above it (see http.c). */
void conn_guard_init(unsigned max_connections);
void conn_guard_notify(void *cls, struct MHD_Connection *c, void **socket_context,
                       enum MHD_ConnectionNotificationCode code);
void conn_guard_progress(struct MHD_Connection *c);
void conn_guard_busy(struct MHD_Connection *c);
void conn_guard_done(struct MHD_Connection *c);
/* Connections evicted since start (a counter for /metrics). */
unsigned long long conn_guard_evicted(void);

#endif /* KB_CONN_GUARD_H */
