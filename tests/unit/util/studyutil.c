/*
 * studyutil.c - see studyutil.h.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "../../../server/study.h"
#include "studyutil.h"
#include "testutil.h"

int64_t tu_new_study(const char *doc)
{
    api_error err;
    study_spec spec;
    json_t *j = proto_parse_object(doc, strlen(doc), &err);
    assert_non_null(j);
    assert_int_equal(proto_study_spec_parse(j, &spec, &err), 0);
    json_decref(j);
    study *s = study_create(&spec, &err);
    assert_non_null(s);
    int64_t id = study_id(s);
    study_put(s);
    return id;
}

store *tu_store_with_study(const char *prefix, char **path, int64_t *sid)
{
    char err[256];
    *path = tu_temp_db(prefix);
    store *s = store_open(*path, err, sizeof err);
    assert_non_null(s);
    assert_int_equal(store_begin(s), 0);
    assert_int_equal(store_study_insert(s, "g", "{}", 1, sid), 0);
    assert_int_equal(store_commit(s), 0);
    return s;
}

int tu_count_trials(void *ud, const trial_rec *t)
{
    (void)t;
    (*(int *)ud)++;
    return 0;
}
