/* home — where scalify finds the files it reads at run time: rules/,
 * templates/ and assets/ (its "data root").
 *
 * Nothing is compiled in: the data is found relative to the running binary,
 * so a checkout (build/scalify, build/asan/scalify) and an installed tree
 * (PREFIX/bin/scalify with PREFIX/share/scalify, `make install`) both work from
 * any working directory, and an installed tree can be moved as a whole.
 * Candidates, in order, for the binary's folder B: B and its ancestors up to
 * three levels (a checkout), then B/../share/scalify (an installed tree).
 * home_rules_dir()'s string is owned by the module and lives until exit.
 */
#ifndef SCALIFY_HOME_H
#define SCALIFY_HOME_H

#include <stdint.h>

/* The first candidate folder holding `probe` (a relative path: "rules" or
 * "templates/page.html"), or NULL. `want_dir` says whether probe must be a
 * directory (else a regular file). The caller frees the result. */
char *home_find(const char *probe, int want_dir);

/* The rules scalify uses when none are named: $SCALIFY_RULES when set, else
 * the rules/ folder of the data root; NULL when there is none. */
const char *home_rules_dir(void);

#endif
