/*
 * mhd_errors.h - the answers libmicrohttpd would send in HTML, or not at all, sent in the
 * daemon's JSON error shape instead (mhd_errors.c). Its HTML error answers are replaced
 * without any call from the daemon (the file defines MHD_create_response_from_buffer);
 * this header declares the answers http.c sends itself.
 */
#ifndef KB_MHD_ERRORS_H
#define KB_MHD_ERRORS_H

/* The longest request target (path and query) kbanditd serves; longer ones get a 414
 * (http.c on_uri), worded KB_TARGET_TOO_LONG in both answers: http.c's and the one
 * mhd_errors.c writes itself. */
#define KB_MAX_TARGET_BYTES 4096
#define KB_DECIMAL_(x) #x
#define KB_DECIMAL(x) KB_DECIMAL_(x)
#define KB_TARGET_TOO_LONG \
    "a request target longer than " KB_DECIMAL(KB_MAX_TARGET_BYTES) " bytes"

/* Sends a 431 with the JSON error on socket fd, or a 414 when target_too_long, at once
 * and best effort (nothing else may be written there: the caller knows libmicrohttpd
 * sent nothing and will close fd). */
void mhd_errors_send_head_too_large(int fd, int target_too_long);

#endif
