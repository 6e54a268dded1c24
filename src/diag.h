/* diag — the one diagnostic printer (STYLE 4).
 *
 * Every reader reports problems through a diag. A text error reads
 *     file:line:col: message
 *       the source line
 *           ^
 * and a binary (protobuf) error reads
 *     file: byte N: field a.b.c: message
 * Messages accumulate in d->out (owned by the diag, freed by diag_free) so the
 * CLI can print them and tests can look at them; d->count counts errors.
 * Lines and columns are 1-based; columns count bytes. Very long source lines
 * are shown as a window around the column, never whole.
 */
#ifndef SCALIFY_DIAG_H
#define SCALIFY_DIAG_H

#include <stddef.h>

#include "util.h"

typedef struct diag {
    const char *file;  /* borrowed: name shown in messages */
    strbuf out;        /* every message so far, newline-terminated */
    int count;         /* number of errors reported */
} diag;

void diag_init(diag *d, const char *file);
void diag_free(diag *d);

/* Error at byte offset `off` of the text src[0..n): computes line and column. */
void diag_text(diag *d, const char *src, size_t n, size_t off, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* Error at byte offset `off` of a binary file, inside field path `field`. */
void diag_binary(diag *d, size_t off, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Error at a known line and column without the source at hand:
 * "file:line:col: message" (no snippet). line 0 means no position: "file: message". */
void diag_pos(diag *d, int line, int col, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
/* Error with no position: "file: message". */
void diag_plain(diag *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Line (1-based) and column (1-based, bytes) of offset off in src. */
void diag_linecol(const char *src, size_t n, size_t off, int *line, int *col);

#endif
