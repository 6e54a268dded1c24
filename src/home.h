/* home — where scalify finds the files it reads at run time: rules/,
 * templates/ and assets/ (its "data root").
 *
 * Nothing is compiled in: the data is found relative to the running binary,
 * so a checkout (build/scalify, build/asan/scalify) and an installed tree
 * (PREFIX/bin/scalify with PREFIX/share/scalify, `make install`) both work from
 * any working directory, and an installed tree can be moved as a whole.
 * The data root is the first of B/../share/scalify (an installed tree), then
 * B and its ancestors up to three levels (a checkout), for the binary's
 * folder B, that holds both rules/ and templates/page.html. Returned strings
 * are owned by the module and live until exit.
 */
#ifndef SCALIFY_HOME_H
#define SCALIFY_HOME_H

/* The data root, or NULL when there is none (looked up once). */
const char *home_root(void);

/* The rules scalify uses when none are named: $SCALIFY_RULES when set, else
 * the rules/ folder of the data root; NULL when there is none. */
const char *home_rules_dir(void);

#endif
