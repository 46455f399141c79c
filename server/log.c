/*
 * log.c - This file contains the JSON line logger and the clocks used by the daemon.
 * The level is set once at start-up, before any thread starts.
 */
#include "log.h"

#include "../proto/proto.h"

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

static void emit(log_level level, const char *msg, json_t *fields)
{
    char ts[40];
    proto_time_format(now_ms(), ts, sizeof ts);
    json_t *o = json_pack("{s:s,s:s,s:s}", "ts", ts, "level", names[level], "msg", msg);
    if (fields)
        json_object_update(o, fields);
    json_decref(fields);
    char *line = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(o);
    if (!line)
        return;
    size_t n = strlen(line);
    line[n] = '\n'; /* json_dumps leaves room: we overwrite the NUL, write n + 1 bytes */
    ssize_t w = write(STDERR_FILENO, line, n + 1);
    (void)w;
    free(line);
}

void log_json(log_level level, const char *msg, json_t *fields)
{
    if (log_enabled(level))
        emit(level, msg, fields);
    else
        json_decref(fields);
}

void log_json_always(const char *msg, json_t *fields) { emit(LOG_INFO, msg, fields); }
