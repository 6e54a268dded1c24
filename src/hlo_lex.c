#include "hlo_lex.h"

#include <string.h>

const unsigned char lex_name_chars[256] = {
    ['a'] = 1, ['b'] = 1, ['c'] = 1, ['d'] = 1, ['e'] = 1, ['f'] = 1, ['g'] = 1, ['h'] = 1, ['i'] = 1,
    ['j'] = 1, ['k'] = 1, ['l'] = 1, ['m'] = 1, ['n'] = 1, ['o'] = 1, ['p'] = 1, ['q'] = 1, ['r'] = 1,
    ['s'] = 1, ['t'] = 1, ['u'] = 1, ['v'] = 1, ['w'] = 1, ['x'] = 1, ['y'] = 1, ['z'] = 1,
    ['A'] = 1, ['B'] = 1, ['C'] = 1, ['D'] = 1, ['E'] = 1, ['F'] = 1, ['G'] = 1, ['H'] = 1, ['I'] = 1,
    ['J'] = 1, ['K'] = 1, ['L'] = 1, ['M'] = 1, ['N'] = 1, ['O'] = 1, ['P'] = 1, ['Q'] = 1, ['R'] = 1,
    ['S'] = 1, ['T'] = 1, ['U'] = 1, ['V'] = 1, ['W'] = 1, ['X'] = 1, ['Y'] = 1, ['Z'] = 1,
    ['0'] = 1, ['1'] = 1, ['2'] = 1, ['3'] = 1, ['4'] = 1, ['5'] = 1, ['6'] = 1, ['7'] = 1, ['8'] = 1,
    ['9'] = 1, ['_'] = 1, ['.'] = 1, ['-'] = 1, ['$'] = 1,
};

void lex_init(lexer *lx, const char *src, size_t n) {
    lx->src = src;
    lx->p = src;
    lx->end = src + n;
}

/* Skips one comment at the cursor; false when there is none. An unterminated
 * block comment runs to the end of the buffer. */
static bool skip_comment(lexer *lx) {
    const char *p = lx->p;
    if (p + 1 >= lx->end || p[0] != '/') return false;
    if (p[1] == '/') {
        const char *nl = memchr(p, '\n', (size_t)(lx->end - p));
        lx->p = nl ? nl : lx->end;
        return true;
    }
    if (p[1] == '*') {
        for (p += 2; p + 1 < lx->end; p++)
            if (p[0] == '*' && p[1] == '/') {
                lx->p = p + 2;
                return true;
            }
        lx->p = lx->end;
        return true;
    }
    return false;
}

void lex_skip_slow(lexer *lx) {
    /* Fast path: most calls find a token right away. */
    const char *p = lx->p;
    for (;;) {
        while (p < lx->end && (*p == ' ' || *p == '\n' || *p == '\t' || *p == '\r')) p++;
        if (p + 1 >= lx->end || p[0] != '/' || (p[1] != '/' && p[1] != '*')) break;
        lx->p = p;
        skip_comment(lx);
        p = lx->p;
    }
    lx->p = p;
}

bool lex_skip_inline(lexer *lx) {
    for (;;) {
        while (lx->p < lx->end && (*lx->p == ' ' || *lx->p == '\t' || *lx->p == '\r')) lx->p++;
        if (lx->p < lx->end && *lx->p == '\n') return true;
        if (lx->p + 1 < lx->end && lx->p[0] == '/' && lx->p[1] == '/') return true;
        if (!skip_comment(lx)) return lx->p >= lx->end;
    }
}

bool lex_accept_word(lexer *lx, const char *w) {
    lex_skip(lx);
    size_t n = strlen(w);
    if ((size_t)(lx->end - lx->p) < n || memcmp(lx->p, w, n) != 0) return false;
    if (lx->p + n < lx->end && lex_is_name_char(lx->p[n])) return false;
    lx->p += n;
    return true;
}

bool lex_name(lexer *lx, const char **s, size_t *n) {
    lex_skip(lx);
    const char *p = lx->p;
    if (p < lx->end && *p == '%') p++;
    const char *start = p;
    if (p >= lx->end || !lex_is_name_char(*p) || *p == '-') return false;
    while (p < lx->end && lex_is_name_char(*p)) p++;
    *s = start;
    *n = (size_t)(p - start);
    lx->p = p;
    return true;
}

bool lex_int(lexer *lx, int64_t *v, bool *overflow) {
    lex_skip(lx);
    const char *p = lx->p;
    bool neg = false;
    *overflow = false;
    if (p < lx->end && (*p == '-' || *p == '+')) neg = *p++ == '-';
    if (p >= lx->end || *p < '0' || *p > '9') return false;
    uint64_t acc = 0, limit = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
    while (p < lx->end && *p >= '0' && *p <= '9') {
        uint64_t d = (uint64_t)(*p - '0');
        if (acc > (limit - d) / 10) {
            *overflow = true;
            return false;
        }
        acc = acc * 10 + d;
        p++;
    }
    *v = neg ? (int64_t)(0 - acc) : (int64_t)acc;
    lx->p = p;
    return true;
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

bool lex_string(lexer *lx, strbuf *out) {
    lex_skip(lx);
    sb_reset(out);
    const char *p = lx->p;
    if (p >= lx->end || *p != '"') return false;
    p++;
    while (p < lx->end && *p != '"') {
        const char *run = p;
        while (p < lx->end && *p != '"' && *p != '\\') p++;
        sb_put(out, run, (size_t)(p - run));
        if (p >= lx->end || *p == '"') break;
        p++; /* backslash */
        if (p >= lx->end) break;
        char c = *p++;
        switch (c) {
        case 'n': sb_putc(out, '\n'); break;
        case 't': sb_putc(out, '\t'); break;
        case 'r': sb_putc(out, '\r'); break;
        case '0': sb_putc(out, '\0'); break;
        case 'x': {
            int hi = p < lx->end ? hexval(p[0]) : -1, lo = p + 1 < lx->end ? hexval(p[1]) : -1;
            if (hi < 0) { sb_putc(out, 'x'); break; }
            if (lo < 0) { sb_putc(out, (char)hi); p++; break; }
            sb_putc(out, (char)(hi * 16 + lo));
            p += 2;
            break;
        }
        default: sb_putc(out, c); break;
        }
    }
    if (p >= lx->end) return false;  /* unterminated */
    lx->p = p + 1;
    return true;
}

/* Skips a quoted string starting at p; returns the position after it or NULL. */
static const char *skip_string(const char *p, const char *end) {
    for (p++; p < end; p++) {
        if (*p == '\\') { p++; continue; }
        if (*p == '"') return p + 1;
    }
    return NULL;
}

bool lex_raw(lexer *lx, const char **s, size_t *n) {
    lex_skip(lx);
    const char *p = lx->p, *start = p;
    long depth = 0;
    while (p < lx->end) {
        char c = *p;
        if (c == '"') {
            const char *q = skip_string(p, lx->end);
            if (!q) return false;
            p = q;
            continue;
        }
        if (c == '{' || c == '(' || c == '[') depth++;
        else if (c == '}' || c == ')' || c == ']') {
            if (depth == 0) break;
            depth--;
        } else if (depth == 0 && (c == ',' || c == '\n')) break;
        p++;
    }
    if (depth != 0) return false;
    const char *e = p;
    while (e > start && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\r')) e--;
    *s = start;
    *n = (size_t)(e - start);
    lx->p = p;
    return true;
}

bool lex_balanced(lexer *lx, const char **s, size_t *n) {
    lex_skip(lx);
    const char *p = lx->p, *start = p;
    if (p >= lx->end || (*p != '{' && *p != '(' && *p != '[')) return false;
    long depth = 0;
    while (p < lx->end) {
        char c = *p;
        if (c == '"') {
            const char *q = skip_string(p, lx->end);
            if (!q) return false;
            p = q;
            continue;
        }
        if (c == '{' || c == '(' || c == '[') depth++;
        else if (c == '}' || c == ')' || c == ']') {
            if (--depth == 0) {
                p++;
                *s = start;
                *n = (size_t)(p - start);
                lx->p = p;
                return true;
            }
        }
        p++;
    }
    return false;
}

bool lex_word(lexer *lx, const char **s, size_t *n) {
    lex_skip(lx);
    const char *p = lx->p, *start = p;
    while (p < lx->end && *p != ' ' && *p != '\n' && *p != '\t' && *p != '\r' && *p != ',' &&
           *p != '}' && *p != ')')
        p++;
    if (p == start) return false;
    *s = start;
    *n = (size_t)(p - start);
    lx->p = p;
    return true;
}
