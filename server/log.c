/*
 * log.c - This file contains the JSON line logger and the clocks used by the daemon.
 * The level is set once at start-up, before any thread starts.
 */
#include "log.h"

#include "../proto/proto.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static log_level min_level = LOG_INFO;
static const char *const names[] = {"debug", "info", "warn", "error"};

int log_level_parse(const char *name, log_level *out)
{
    for (int i = 0; i < 4; i++)
        if (strcmp(name, names[i]) == 0) {
            *out = (log_level)i;
            return 0;
        }
    return -1;
}

void log_set_level(log_level level) { min_level = level; }
int log_enabled(log_level level) { return level >= min_level; }

int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

double mono_sec(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Copies s into out as the inside of a JSON string (quotes, backslashes and control
 * characters escaped), cut to fit; never allocates. */
static void escape_into(char *out, size_t cap, const char *s)
{
    size_t n = 0;
    for (; *s && n + 7 < cap; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            n += (size_t)snprintf(out + n, cap - n, "\\%c", c);
        else if (c < 0x20)
            n += (size_t)snprintf(out + n, cap - n, "\\u%04x", c);
        else
            out[n++] = (char)c;
    }
    out[n] = 0;
}

/* The line of last resort, written from the stack: rendering it failed for want of
 * memory, and a lost line could be the only word on why the daemon stopped. */
static void emit_plain(log_level level, const char *ts, const char *msg, const char *members)
{
    char m[256], line[512];
    escape_into(m, sizeof m, msg);
    int n = snprintf(line, sizeof line, "{\"ts\":\"%s\",\"level\":\"%s\",\"msg\":\"%s\",%s}\n",
                     ts, names[level], m, members);
    if (n > 0 && (size_t)n < sizeof line) {
        ssize_t w = write(STDERR_FILENO, line, (size_t)n);
        (void)w;
    }
}

/* Renders and writes one line. jansson's allocation flag (proto_json_alloc_take) tells
 * whether the fields were lost: raised here, or by the caller's json_pack just before
 * (a NULL fields then), it is put back as found for the code that checks it later. */
static void emit(log_level level, const char *msg, json_t *fields, const char *fallback)
{
    int before = proto_json_alloc_take();
    char ts[40];
    proto_time_format(now_ms(), ts, sizeof ts);
    json_t *o = json_pack("{s:s,s:s,s:s}", "ts", ts, "level", names[level], "msg", msg);
    int lost = !o || (fields && json_object_update(o, fields)) || (before && !fields);
    json_decref(fields);
    char *line = lost ? NULL : json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(o);
    if (proto_json_alloc_take() || !line) {
        free(line);
        emit_plain(level, ts, msg, fallback);
    } else {
        size_t n = strlen(line);
        line[n] = '\n'; /* json_dumps leaves room: we overwrite the NUL, write n + 1 bytes */
        ssize_t w = write(STDERR_FILENO, line, n + 1);
        (void)w;
        free(line);
    }
    proto_json_alloc_put_back(before);
}

void log_json(log_level level, const char *msg, json_t *fields)
{
    if (log_enabled(level))
        emit(level, msg, fields, LOG_FIELDS_LOST);
    else
        json_decref(fields);
}

void log_json_always(const char *msg, json_t *fields, const char *fallback)
{
    emit(LOG_INFO, msg, fields, fallback);
}
