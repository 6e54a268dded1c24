/* escape — HTML/XML, JSON, slug and base64 encoders (see escape.h). */
#include "escape.h"

#include <string.h>

/* Length of the valid UTF-8 sequence at s[0..n), or 0 when it is not valid
 * (overlong forms, surrogates and code points past U+10FFFF are invalid);
 * *out gets its code point. */
static size_t utf8_decode(const unsigned char *s, size_t n, uint32_t *out) {
    unsigned c = s[0];
    *out = c;
    if (c < 0x80) return 1;
    size_t len;
    unsigned cp;
    if (c >= 0xc2 && c <= 0xdf) len = 2, cp = c & 0x1f;
    else if (c >= 0xe0 && c <= 0xef) len = 3, cp = c & 0x0f;
    else if (c >= 0xf0 && c <= 0xf4) len = 4, cp = c & 0x07;
    else return 0;
    if (n < len) return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80) return 0;
        cp = (cp << 6) | (s[i] & 0x3f);
    }
    if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10ffff))) return 0;
    if (cp >= 0xd800 && cp <= 0xdfff) return 0;
    *out = cp;
    return len;
}

bool esc_dangerous(uint32_t cp) {
    if (cp == '\t' || cp == '\n' || cp == '\r') return false;
    return cp < 0x20 || (cp >= 0x7f && cp <= 0x9f)    /* C0, DEL, C1 */
           || cp == 0x061c                            /* Arabic letter mark */
           || cp == 0x200e || cp == 0x200f            /* LRM, RLM */
           || (cp >= 0x202a && cp <= 0x202e)          /* LRE RLE PDF LRO RLO */
           || (cp >= 0x2066 && cp <= 0x2069)          /* LRI RLI FSI PDI */
           || cp == 0x2028 || cp == 0x2029;           /* line, paragraph separator */
}

/* The visible stand-in for a dangerous code point in markup: "[U+202E]". */
static void mark(strbuf *b, uint32_t cp) { sb_printf(b, "[U+%04X]", (unsigned)cp); }

/* Copies the code point at p[0..n) to b as markup text: invalid UTF-8 as
 * U+FFFD, a dangerous code point as its mark. Returns the bytes consumed. */
static size_t put_text(strbuf *b, const unsigned char *p, size_t n) {
    uint32_t cp;
    size_t len = utf8_decode(p, n, &cp);
    if (len == 0) {
        sb_puts(b, "\xef\xbf\xbd");
        return 1;
    }
    if (esc_dangerous(cp)) mark(b, cp);
    else sb_put(b, (const char *)p, len);
    return len;
}

/* A JSON escape for a dangerous code point (all lie in the BMP). */
static void json_u(strbuf *b, uint32_t cp) { sb_printf(b, "\\u%04x", (unsigned)cp); }

void esc_html_n(strbuf *b, const char *s, size_t n) {
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        unsigned char c = p[i];
        switch (c) {
        case '&': sb_puts(b, "&amp;"); i++; continue;
        case '<': sb_puts(b, "&lt;"); i++; continue;
        case '>': sb_puts(b, "&gt;"); i++; continue;
        case '"': sb_puts(b, "&quot;"); i++; continue;
        case '\'': sb_puts(b, "&#39;"); i++; continue;
        default: break;
        }
        i += put_text(b, p + i, n - i);
    }
}

void esc_html(strbuf *b, const char *s) {
    if (s) esc_html_n(b, s, strlen(s));
}

void esc_json(strbuf *b, const char *s) {
    if (!s) return;
    const unsigned char *p = (const unsigned char *)s;
    size_t n = strlen(s), i = 0;
    while (i < n) {
        unsigned char c = p[i];
        switch (c) {
        case '"': sb_puts(b, "\\\""); i++; continue;
        case '\\': sb_puts(b, "\\\\"); i++; continue;
        case '\b': sb_puts(b, "\\b"); i++; continue;
        case '\f': sb_puts(b, "\\f"); i++; continue;
        case '\n': sb_puts(b, "\\n"); i++; continue;
        case '\r': sb_puts(b, "\\r"); i++; continue;
        case '\t': sb_puts(b, "\\t"); i++; continue;
        case '<': sb_puts(b, "\\u003c"); i++; continue;
        case '>': sb_puts(b, "\\u003e"); i++; continue;
        case '&': sb_puts(b, "\\u0026"); i++; continue;
        default: break;
        }
        uint32_t cp;
        size_t len = utf8_decode(p + i, n - i, &cp);
        if (len == 0) {
            sb_puts(b, "\\ufffd");
            i++;
            continue;
        }
        if (esc_dangerous(cp)) json_u(b, cp);
        else sb_put(b, s + i, len);
        i += len;
    }
}

void esc_json_harden(strbuf *b, const char *json, size_t n) {
    const unsigned char *p = (const unsigned char *)json;
    for (size_t i = 0; i < n;) {
        char c = json[i];
        if (c == '<') sb_puts(b, "\\u003c");
        else if (c == '>') sb_puts(b, "\\u003e");
        else if (c == '&') sb_puts(b, "\\u0026");
        else {
            /* Raw bytes past ASCII occur only inside strings: a dangerous
             * code point there becomes its escape. */
            uint32_t cp;
            size_t len = utf8_decode(p + i, n - i, &cp);
            if (len > 1 && esc_dangerous(cp)) json_u(b, cp);
            else sb_put(b, json + i, len ? len : 1);
            i += len ? len : 1;
            continue;
        }
        i++;
    }
}

void esc_slug(strbuf *b, const char *s, size_t max) {
    size_t start = b->len, n = 0;
    for (const char *p = s ? s : ""; *p && n < max; p++, n++) {
        char c = *p;
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
                  c == '_' || c == '-';
        if (n == 0 && c == '.') ok = false;
        sb_putc(b, ok ? c : '-');
    }
    if (b->len == start) sb_putc(b, 'x');
}

void esc_base64(strbuf *b, const void *data, size_t n) {
    static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    const unsigned char *p = data;
    size_t i = 0;
    for (; i + 3 <= n; i += 3) {
        unsigned v = (unsigned)p[i] << 16 | (unsigned)p[i + 1] << 8 | p[i + 2];
        char q[4] = {tab[v >> 18], tab[(v >> 12) & 63], tab[(v >> 6) & 63], tab[v & 63]};
        sb_put(b, q, 4);
    }
    if (n - i == 1) {
        unsigned v = (unsigned)p[i] << 16;
        char q[4] = {tab[v >> 18], tab[(v >> 12) & 63], '=', '='};
        sb_put(b, q, 4);
    } else if (n - i == 2) {
        unsigned v = (unsigned)p[i] << 16 | (unsigned)p[i + 1] << 8;
        char q[4] = {tab[v >> 18], tab[(v >> 12) & 63], tab[(v >> 6) & 63], '='};
        sb_put(b, q, 4);
    }
}

void esc_uri(strbuf *b, const char *path) {
    for (const unsigned char *p = (const unsigned char *)(path ? path : ""); *p; p++) {
        unsigned char c = *p;
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
                  c == '.' || c == '_' || c == '~' || c == '/';
        if (ok) sb_putc(b, (char)c);
        else sb_printf(b, "%%%02X", c);
    }
}

void esc_md(strbuf *b, const char *s, size_t max) {
    if (!s) return;
    const unsigned char *p = (const unsigned char *)s;
    size_t n = strlen(s), i = 0;
    while (i < n) {
        unsigned char c = p[i];
        if (max && i >= max) {
            sb_puts(b, "\xe2\x80\xa6");
            return;
        }
        if (c == '\n' || c == '\r' || c == '\t') {
            sb_putc(b, ' ');
            i++;
            continue;
        }
        if (strchr("\\`*_{}[]<>|~&!$", c)) {
            sb_putc(b, '\\');
            sb_putc(b, (char)c);
            i++;
            continue;
        }
        i += put_text(b, p + i, n - i);
    }
}
