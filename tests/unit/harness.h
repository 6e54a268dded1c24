/* harness — the in-house test harness (STYLE 11).
 *
 * A suite is a function `void suite_NAME(void)` listed in suites.h. Inside it,
 * t_case("name-1.2") names the case that the following checks belong to, so a
 * failure reads "FAIL name-1.2: file:line: expression (detail)". Every CHECK
 * counts one passed or failed check; main prints "N passed, N failed" last and
 * exits non-zero on any failure.
 *
 * Helpers for tests live here too: t_path() resolves a path relative to the
 * repository root, t_read() reads a whole file (caller frees).
 */
#ifndef SCALIFY_HARNESS_H
#define SCALIFY_HARNESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

extern int t_passed, t_failed;

void t_case(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
bool t_check(bool ok, const char *expr, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
char *t_read(const char *path, size_t *len);  /* NULL when unreadable */
/* Writes src with its first occurrence of `from` replaced by `to` (then `tail`
 * appended, when not NULL) to path; false when `from` does not occur. */
bool t_write_replaced(const char *src, const char *from, const char *to, const char *tail, const char *path);
/* Runs a shell command, captures stdout+stderr (caller frees) and its exit status. */
char *t_run(const char *cmd, int *status);
/* Files in dir whose names end with suffix, sorted; NULL-terminated, caller frees
 * with t_free_list. */
char **t_list(const char *dir, const char *suffix);
void t_free_list(char **v);
/* The scalify binary under test (env SCALIFY, default build/scalify). */
const char *t_scalify(void);

#define CHECK(c) t_check((c), #c, __FILE__, __LINE__, "%s", "")
#define CHECK_MSG(c, ...) t_check((c), #c, __FILE__, __LINE__, __VA_ARGS__)
#define CHECK_EQ(a, b)                                                                        \
    do {                                                                                      \
        long long a_ = (long long)(a), b_ = (long long)(b);                                   \
        t_check(a_ == b_, #a " == " #b, __FILE__, __LINE__, "%lld != %lld", a_, b_);          \
    } while (0)
#define CHECK_STR(a, b)                                                                       \
    do {                                                                                      \
        const char *a_ = (a), *b_ = (b);                                                      \
        t_check(a_ && b_ && strcmp(a_, b_) == 0, #a " == " #b, __FILE__, __LINE__,            \
                "\"%s\" != \"%s\"", a_ ? a_ : "(null)", b_ ? b_ : "(null)");                  \
    } while (0)
#define CHECK_CONTAINS(hay, needle)                                                           \
    do {                                                                                      \
        const char *h_ = (hay), *n_ = (needle);                                               \
        t_check(h_ && strstr(h_, n_) != NULL, #hay " contains " #needle, __FILE__, __LINE__,  \
                "\"%s\" not in \"%.400s\"", n_, h_ ? h_ : "(null)");                          \
    } while (0)

#endif
