/* jschema — a small JSON Schema validator for tests (draft-04 and the draft
 * 2020-12 subset our schemas use; see tests/sarif/README.md for the keywords).
 * Returns the number of violations; the first few are appended to errs as
 * "path: message" lines. */
#ifndef SCALIFY_JSCHEMA_H
#define SCALIFY_JSCHEMA_H

#include <jansson.h>

#include "util.h"

int jschema_validate(json_t *schema, json_t *doc, strbuf *errs);

#endif
