/*
 * handlers.h - the REST handlers (the route table kb_routes is declared in http.h).
 */
#ifndef KB_HANDLERS_H
#define KB_HANDLERS_H

#include "storage.h"

/* Gives the handlers the store (candidate sets); call before http_start. */
void handlers_init(store *s);

#endif /* KB_HANDLERS_H */
