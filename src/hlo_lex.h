/* hlo_lex — character-level scanning of HLO text for the parser.
 *
 * A lexer is a cursor over a borrowed, NUL-terminated buffer src[0..n). The
 * functions below never read past n: at the end the cursor sits on the NUL. They
 * skip whitespace and comments (line comments starting with two slashes, and
 * block comments, which covers XLA's index=5 markers in long operand lists)
 * where the grammar allows them.
 *
 * Errors are raised by the parser, which owns the diag; scanning functions
 * return false (or a negative length) when the expected lexeme is absent and
 * leave the cursor where the problem is.
 */
#ifndef SCALIFY_HLO_LEX_H
#define SCALIFY_HLO_LEX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util.h"

typedef struct lexer {
    const char *src;  /* start of the buffer */
    const char *p;    /* cursor */
    const char *end;  /* src + n; *end == 0 */
} lexer;

void lex_init(lexer *lx, const char *src, size_t n);
/* Skips spaces, newlines and comments. Inline fast path: the cursor byte is
 * always readable (a NUL or a closing bracket sits at end). */
void lex_skip_slow(lexer *lx);
static inline void lex_skip(lexer *lx) {
    char c = *lx->p;
    if ((unsigned char)c > ' ' && c != '/') return;
    lex_skip_slow(lx);
}
/* Skips spaces and comments but stops at a newline (returns true there). */
bool lex_skip_inline(lexer *lx);
/* After skipping: consumes c when it is next. */
static inline bool lex_accept(lexer *lx, char c) {
    lex_skip(lx);
    if (lx->p < lx->end && *lx->p == c) {
        lx->p++;
        return true;
    }
    return false;
}
/* After skipping: true when the next bytes are the word w, not followed by a
 * name character; consumes it. */
bool lex_accept_word(lexer *lx, const char *w);
static inline bool lex_peek(lexer *lx, char c) {
    lex_skip(lx);
    return lx->p < lx->end && *lx->p == c;
}

/* A name: an optional '%', then [A-Za-z0-9_.\-$]+ not starting with '-'.
 * Sets *s and *n to the name without '%'. */
bool lex_name(lexer *lx, const char **s, size_t *n);
/* A signed decimal integer that fits int64. Returns false (cursor at the digits)
 * when absent or out of range; *overflow tells which. */
bool lex_int(lexer *lx, int64_t *v, bool *overflow);
/* A quoted string with C escapes, unescaped into out (reset first). */
bool lex_string(lexer *lx, strbuf *out);
/* A raw value: everything up to a ',' or newline at bracket depth 0, or a
 * closing bracket that was not opened here. Brackets are (), [], {}; strings
 * are respected. Returns the trimmed text as a slice of the buffer. */
bool lex_raw(lexer *lx, const char **s, size_t *n);
/* A balanced group starting at the cursor's opening bracket, returned whole
 * (brackets included). False when unbalanced. */
bool lex_balanced(lexer *lx, const char **s, size_t *n);
/* A run of non-space characters up to ',', '}' or ')' (for bare words such as
 * dim_labels=b01f_01io->b01f or padding=0_0x1_1). */
bool lex_word(lexer *lx, const char **s, size_t *n);

extern const unsigned char lex_name_chars[256];  /* 1 for [A-Za-z0-9_.\-$] */
static inline bool lex_is_name_char(char c) { return lex_name_chars[(unsigned char)c]; }

#endif
