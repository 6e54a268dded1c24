/* template — our tiny template engine for page skeletons (templates/NAME.html).
 *
 * Syntax (a Mustache subset, no loops — lists are built in C):
 *   {{name}}              the value of name, HTML-escaped (escape.h)
 *   {{{name}}}            the value, raw: markup the report wrote itself
 *   {{#name}}…{{/name}}   the inside, kept when name is set and non-empty
 *   {{^name}}…{{/name}}   the inside, kept when name is unset or empty
 * A slot naming an unknown variable is an error (a template typo must not
 * silently drop content); sections may nest.
 *
 * Resources (templates/, templates/findings/, assets/) are read at run time from
 * the resource root: tpl_set_root() (report --templates DIR), else env
 * SCALIFY_HOME, else the data root found from the running binary (home.h:
 * build/scalify and build/asan/scalify find the source tree, an installed
 * PREFIX/bin/scalify finds PREFIX/share/scalify), else the current directory.
 * Strings returned by tpl_root() are owned by the module.
 */
#ifndef SCALIFY_TEMPLATE_H
#define SCALIFY_TEMPLATE_H

#include <stdbool.h>
#include <stddef.h>

#include "diag.h"
#include "util.h"

typedef struct {
    const char *key, *val;  /* borrowed */
} tpl_var;

typedef struct {
    tpl_var *v;
    size_t n, cap;
} tpl_vars;

void tpl_vars_init(tpl_vars *vs);
void tpl_vars_free(tpl_vars *vs);  /* frees the array, not the strings */
void tpl_set(tpl_vars *vs, const char *key, const char *val);  /* overwrites */

/* Renders tpl[0..n) into out; false (with a message naming `name`) on a bad or
 * unknown slot. */
bool tpl_render(strbuf *out, const char *name, const char *tpl, size_t n, const tpl_vars *vs, diag *d);

void tpl_set_root(const char *dir);  /* NULL: back to the default search */
const char *tpl_root(void);
/* Reads <root>/rel; malloc'd, NUL-terminated (caller frees); NULL + diag when missing. */
char *tpl_load(const char *rel, size_t *len, diag *d);

#endif
