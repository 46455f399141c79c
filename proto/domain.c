/*
 * domain.c - This file contains the copy and release functions of the domain types of
 * domain.h (trial records, study documents). No JSON here: the store and the study layer
 * use them too.
 */
#include "domain.h"

#include <stdlib.h>
#include <string.h>

int trial_rec_copy(trial_rec *dst, const trial_rec *src, size_t dim)
{
    *dst = *src;
    dst->worker = strdup(src->worker ? src->worker : "");
    dst->reason = src->reason ? strdup(src->reason) : NULL;
    dst->request_id = src->request_id ? strdup(src->request_id) : NULL;
    dst->x = malloc((dim ? dim : 1) * sizeof *dst->x);
    if (!dst->worker || (src->reason && !dst->reason) ||
        (src->request_id && !dst->request_id) || !dst->x) {
        trial_rec_clear(dst);
        return -1;
    }
    memcpy(dst->x, src->x, dim * sizeof *dst->x);
    return 0;
}

void trial_rec_clear(trial_rec *t)
{
    free(t->worker);
    free(t->reason);
    free(t->request_id);
    free(t->x);
    memset(t, 0, sizeof *t);
}

void trial_recs_free(trial_rec *v, size_t n)
{
    for (size_t i = 0; v && i < n; i++)
        trial_rec_clear(&v[i]);
    free(v);
}

void observation_set_clear(observation_set *o)
{
    free(o->x);
    free(o->value);
    free(o->created_ms);
    memset(o, 0, sizeof *o);
}

void study_doc_clear(study_doc *d)
{
    trial_rec_clear(&d->progress.best);
    free(d->progress.lengthscales);
    memset(d, 0, sizeof *d);
}
