/*
 * error.c - error codes, their names, and the error-struct filler.
 *
 * Reporting an error never allocates: messages are formatted into the caller's
 * fixed-size kb_error.
 */
#include "internal.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

const char *kb_strerror(int code)
{
    switch (code) {
    case KB_OK: return "ok";
    case KB_EINVAL: return "invalid";
    case KB_ENOMEM: return "no_memory";
    case KB_ENUMERIC: return "numerical_failure";
    case KB_ESTATE: return "wrong_state";
    case KB_ENOTFOUND: return "not_found";
    case KB_ECORRUPT: return "corrupt";
    case KB_EUNSUPPORTED: return "unsupported";
    case KB_ERANGE: return "out_of_range";
    default: return "unknown";
    }
}

int kb__fail(kb_error *err, int code, const char *field, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        err->code = code;
        snprintf(err->field, sizeof err->field, "%s", field ? field : "");
        va_start(ap, fmt);
        vsnprintf(err->message, sizeof err->message, fmt, ap);
        va_end(ap);
    }
    return code;
}

double kb__now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
