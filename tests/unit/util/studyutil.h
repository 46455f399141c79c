/*
 * studyutil.h - helpers shared by the unit tests of the daemon's store and study layer.
 */
#ifndef KB_STUDYUTIL_H
#define KB_STUDYUTIL_H

#include <stdint.h>

#include "../../../server/storage.h"

/* Creates a study from a JSON study document through the registry (study_create) and
 * returns its id; fails the running cmocka test if the document or the creation fails. */
int64_t tu_new_study(const char *doc);

/* Opens a fresh temporary store (path from tu_temp_db(prefix), owned by the caller) with
 * one study row named "g"; *sid is its id. */
store *tu_store_with_study(const char *prefix, char **path, int64_t *sid);

/* store_trials_each callback: counts the trials into *(int *)ud. */
int tu_count_trials(void *ud, const trial_rec *t);

#endif
