/*
 * mhd_errors.c - This file contains the replacement of libmicrohttpd's own error answers
 * by the daemon's JSON error shape ({"error":{"code","message","field"}}, openapi.yaml).
 *
 * Why: libmicrohttpd 0.9.75 (Debian 12) answers by itself the requests it refuses before
 * any callback of ours runs (a request line or headers beyond the connection's memory,
 * 414 / 431; a malformed request line, header line, Content-Length or chunk, 400; a
 * Content-Length or chunk size beyond 64 bits, 413; an HTTP version it does not speak,
 * 505; a body no handler took, 500), with short static HTML bodies, and has no option to
 * replace them. Its internal transmit_error_response_len (connection.c) makes each with
 * MHD_create_response_from_buffer(len, html, MHD_RESPMEM_PERSISTENT), called through
 * the library's PLT (the function is exported and the library is not linked
 * -Bsymbolic: objdump -d shows `call MHD_create_response_from_buffer@plt`), and that is
 * its only call of the function. So the definition below, in the executable, is the one
 * it calls (ELF symbol interposition, as a malloc replacement works): it recognizes
 * those bodies (each starts "<html><head><title>") and returns a static JSON body with
 * Content-Type: application/json instead; the status stays libmicrohttpd's. Anything
 * else is handed to the library's own function (dlsym RTLD_NEXT). The daemon's own
 * answers never come here: http.c makes them with
 * MHD_create_response_from_buffer_with_free_callback_cls.
 *
 * Risk: this depends on how the library is built and calls itself, which no API
 * promises. A libmicrohttpd that calls the function directly (-Bsymbolic, an internal
 * alias) or makes its error answers with another constructor (libmicrohttpd 1.0 uses
 * MHD_create_response_from_buffer_static) sends HTML again: test_protocol_errors_are_json
 * (tests/integration/test_http_errors.py) fails then. A static link of the library
 * fails on the duplicate symbol. A body this table does not know gets the generic
 * message of the last entry.
 *
 * The file also holds the 431 (414 for a target over KB_MAX_TARGET_BYTES) that http.c
 * writes to the socket itself for a request whose head leaves no room in the
 * connection's memory for an answer's header lines (libmicrohttpd would close without
 * a byte: see ANSWER_ROOM in http.c).
 *
 * Thread safety: libmicrohttpd's threads call this concurrently; the table and bodies
 * are constant, the library's function is looked up once (pthread_once).
 */
#include "mhd_errors.h"

#include <microhttpd.h>

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#define MHD_HTML "<html><head><title>"
#define JSON_ERROR(code, message) \
    "{\"error\":{\"code\":\"" code "\",\"message\":\"" message "\",\"field\":null}}"

#define HEAD_TOO_LARGE \
    JSON_ERROR("invalid", "the request line or headers exceed the connection's memory")
#define TARGET_TOO_LONG JSON_ERROR("invalid", KB_TARGET_TOO_LONG)

/* libmicrohttpd's bodies, told apart by a phrase of their HTML (first match wins), and
 * the JSON body answered instead. NULL: an empty body and no Content-Type, for the two
 * answers libmicrohttpd 0.9.75 sends with its header block twice (its
 * parse_connection_headers queues the error, then the state machine builds the headers
 * again): the client reads the second block where the first one's Content-Length
 * promised the body, so that only an empty body leaves a well-framed answer. */
static const struct {
    const char *phrase;
    const char *json;
} known[] = {
    {"<title>Request too big<", HEAD_TOO_LARGE},
    {"wrong value for <b>Content-Length", NULL},
    {"too large value for <b>Content-Length", NULL},
    {"chunked encoding was syntactically incorrect",
     JSON_ERROR("invalid", "malformed chunked encoding")},
    {"<title>Request malformed<", JSON_ERROR("invalid", "malformed request line or header")},
    {"chunk size used in your HTTP chunked encoded request is too large",
     JSON_ERROR("payload_too_large", "a chunk size is too large")},
    {"<title>Requested HTTP version is not supported<",
     JSON_ERROR("invalid", "HTTP version not supported (HTTP/1.0 and 1.1 are)")},
    {"<title>Internal server error<",
     JSON_ERROR("internal", "the HTTP layer could not process the request")},
    {"", JSON_ERROR("invalid", "the HTTP layer refused the request")},
};

typedef struct MHD_Response *(*create_fn)(size_t, void *, enum MHD_ResponseMemoryMode);

static pthread_once_t real_once = PTHREAD_ONCE_INIT;
static create_fn real_create;

static void real_resolve(void)
{
    real_create = (create_fn)dlsym(RTLD_NEXT, "MHD_create_response_from_buffer");
}

/* The JSON answer standing for libmicrohttpd's HTML body; NULL when it cannot be
 * allocated whole (libmicrohttpd then closes the connection, as when its own fails). */
static struct MHD_Response *json_instead(const char *html, size_t len)
{
    size_t i = 0;
    while (known[i].phrase[0] && !memmem(html, len, known[i].phrase, strlen(known[i].phrase)))
        i++;
    if (!known[i].json)
        return MHD_create_response_from_buffer_with_free_callback_cls(0, NULL, NULL, NULL);
    struct MHD_Response *r = MHD_create_response_from_buffer_with_free_callback_cls(
        strlen(known[i].json), (void *)known[i].json, NULL, NULL);
    /* a body without its Content-Type would be misread (as in http.c's buffer_response) */
    if (r && MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json")
                 != MHD_YES) {
        MHD_destroy_response(r);
        return NULL;
    }
    return r;
}

struct MHD_Response *MHD_create_response_from_buffer(size_t size, void *buffer,
                                                     enum MHD_ResponseMemoryMode mode)
{
    if (mode == MHD_RESPMEM_PERSISTENT && buffer && size > sizeof MHD_HTML - 1 &&
        memcmp(buffer, MHD_HTML, sizeof MHD_HTML - 1) == 0)
        return json_instead(buffer, size);
    pthread_once(&real_once, real_resolve);
    return real_create ? real_create(size, buffer, mode) : NULL;
}

void mhd_errors_send_head_too_large(int fd, int target_too_long)
{
    const char *status = target_too_long ? "414 URI Too Long"
                                         : "431 Request Header Fields Too Large";
    const char *body = target_too_long ? TARGET_TOO_LONG : HEAD_TOO_LARGE;
    char msg[320];
    int n = snprintf(msg, sizeof msg,
                     "HTTP/1.1 %s\r\nConnection: close\r\n"
                     "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n%s",
                     status, strlen(body), body);
    /* Unanswered anyway if it fails: the socket is closed right after. Its send buffer
     * takes these few bytes at once unless the client stopped reading earlier answers;
     * never wait on the client. */
    if (n > 0 && (size_t)n < sizeof msg)
        (void)send(fd, msg, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT);
}
