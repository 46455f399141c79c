/*
 * studyutil.h - helpers shared by the unit tests of the daemon's study layer.
 */
#ifndef KB_STUDYUTIL_H
#define KB_STUDYUTIL_H

#include <stdint.h>

/* Creates a study from a JSON study document through the registry (study_create) and
 * returns its id; fails the running cmocka test if the document or the creation fails. */
int64_t tu_new_study(const char *doc);

#endif
