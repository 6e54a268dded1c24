#include "diag.h"

#include <stdarg.h>
#include <string.h>

enum { SNIPPET_WINDOW = 100 };  /* bytes of a long line shown on each side */

void diag_init(diag *d, const char *file) {
    d->file = file ? file : "<input>";
    sb_init(&d->out);
    d->count = 0;
}

void diag_free(diag *d) { sb_free(&d->out); }

void diag_linecol(const char *src, size_t n, size_t off, int *line, int *col) {
    if (off > n) off = n;
    long l = 1;
    size_t start = 0;
    for (const char *p = src; (p = memchr(p, '\n', (size_t)(src + off - p))) != NULL; p++) {
        l++;
        start = (size_t)(p - src) + 1;
    }
    *line = l > 0x7fffffff ? 0x7fffffff : (int)l;
    size_t c = off - start + 1;
    *col = c > 0x7fffffff ? 0x7fffffff : (int)c;
}

void diag_text(diag *d, const char *src, size_t n, size_t off, const char *fmt, ...) {
    if (off > n) off = n;
    int line, col;
    diag_linecol(src, n, off, &line, &col);
    sb_printf(&d->out, "%s:%d:%d: ", d->file, line, col);
    va_list ap;
    va_start(ap, fmt);
    sb_vprintf(&d->out, fmt, ap);
    va_end(ap);
    sb_putc(&d->out, '\n');

    /* The source line, windowed around the column when it is long. */
    size_t ls = off - (size_t)(col - 1), le = off;
    while (le < n && src[le] != '\n') le++;
    size_t from = ls, to = le;
    if (off - from > SNIPPET_WINDOW) from = off - SNIPPET_WINDOW;
    if (to - off > SNIPPET_WINDOW) to = off + SNIPPET_WINDOW;
    sb_puts(&d->out, "  ");
    if (from > ls) sb_puts(&d->out, "...");
    for (size_t i = from; i < to; i++) {
        unsigned char c = (unsigned char)src[i];
        sb_putc(&d->out, c == '\t' || c == '\r' || c < 0x20 ? ' ' : (char)c);
    }
    if (to < le) sb_puts(&d->out, "...");
    sb_puts(&d->out, "\n  ");
    if (from > ls) sb_puts(&d->out, "   ");
    for (size_t i = from; i < off; i++) sb_putc(&d->out, ' ');
    sb_puts(&d->out, "^\n");
    d->count++;
}

/* The message after its location prefix: one line, one counted error. */
static void message(diag *d, const char *fmt, va_list ap) {
    sb_vprintf(&d->out, fmt, ap);
    sb_putc(&d->out, '\n');
    d->count++;
}

void diag_binary(diag *d, size_t off, const char *field, const char *fmt, ...) {
    sb_printf(&d->out, "%s: byte %zu: ", d->file, off);
    if (field && *field) sb_printf(&d->out, "field %s: ", field);
    va_list ap;
    va_start(ap, fmt);
    message(d, fmt, ap);
    va_end(ap);
}

void diag_plain(diag *d, const char *fmt, ...) {
    sb_printf(&d->out, "%s: ", d->file);
    va_list ap;
    va_start(ap, fmt);
    message(d, fmt, ap);
    va_end(ap);
}

void diag_pos(diag *d, int line, int col, const char *fmt, ...) {
    if (line > 0) sb_printf(&d->out, "%s:%d:%d: ", d->file, line, col > 0 ? col : 1);
    else sb_printf(&d->out, "%s: ", d->file);
    va_list ap;
    va_start(ap, fmt);
    message(d, fmt, ap);
    va_end(ap);
}
