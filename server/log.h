/*
 * log.h - one-line structured JSON logs on stderr:
 *   {"ts":"2026-01-01T00:00:00.000Z","level":"info","msg":"listening","port":8080}
 * Each line is written with one write(2), so lines from different threads never mix.
 */
#ifndef KB_LOG_H
#define KB_LOG_H

#include <jansson.h>
#include <stdint.h>

typedef enum log_level { LOG_DEBUG = 0, LOG_INFO, LOG_WARN, LOG_ERROR } log_level;

int log_level_parse(const char *name, log_level *out);
void log_set_level(log_level level);
int log_enabled(log_level level);
/* Logs msg with the members of fields (stolen; may be NULL). When memory runs out while
 * the line or its fields (the caller's json_pack included) are rendered, the line is still
 * written, from the stack, with "fields":"lost: out of memory" in place of the fields. */
void log_json(log_level level, const char *msg, json_t *fields);
/* At level info whatever the configured level, and `fallback` (JSON members, e.g.
 * "\"port\":8080") in place of the fields when they are lost: the start-up "listening"
 * line, whose port clients wait for. */
void log_json_always(const char *msg, json_t *fields, const char *fallback);
/* log_json's fallback members. */
#define LOG_FIELDS_LOST "\"fields\":\"lost: out of memory\""
/* Wall-clock milliseconds since the epoch; monotonic seconds. */
int64_t now_ms(void);
double mono_sec(void);

#endif /* KB_LOG_H */
