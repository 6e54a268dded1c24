#include "eattr.h"

#include <stdlib.h>
#include <string.h>

#include "shape.h"

static const char *const dir_names[EA_DIR_COUNT] = {"EQ", "NE", "LT", "LE", "GT", "GE"};

int ea_direction_from_name(const char *s, size_t n) {
    for (int i = 0; i < EA_DIR_COUNT; i++)
        if (n == 2 && memcmp(s, dir_names[i], 2) == 0) return i;
    return -1;
}

const char *ea_direction_name(int dir) { return dir >= 0 && dir < EA_DIR_COUNT ? dir_names[dir] : "?"; }

void ea_init(ea_builder *b) { memset(b, 0, sizeof *b); }
void ea_free(ea_builder *b) {
    free(b->w);
    ea_init(b);
}
void ea_reset(ea_builder *b) { b->n = 0; }

/* Removes key's triple if present. */
static void drop_key(ea_builder *b, int key) {
    size_t i = 0;
    while (i + 1 < b->n) {
        size_t len = 2 + (size_t)b->w[i + 1];
        if (b->w[i] == key) {
            memmove(b->w + i, b->w + i + len, (b->n - i - len) * sizeof *b->w);
            b->n -= len;
            return;
        }
        i += len;
    }
}

void ea_put(ea_builder *b, int key, const int64_t *v, uint32_t n) {
    drop_key(b, key);
    XGROW(b->w, b->cap, b->n + 2 + n);
    b->w[b->n++] = key;
    b->w[b->n++] = n;
    if (n) memcpy(b->w + b->n, v, n * sizeof *v);
    b->n += n;
}

void ea_put_int(ea_builder *b, int key, int64_t v) { ea_put(b, key, &v, 1); }

uint32_t ea_str_words(const char *s, size_t len, int64_t *out, uint32_t cap) {
    uint32_t need = 1 + (uint32_t)((len + 7) / 8);
    if (cap >= need) {
        out[0] = (int64_t)len;
        for (uint32_t i = 1; i < need; i++) {
            uint64_t w = 0;
            for (size_t j = 0; j < 8 && (i - 1) * 8 + j < len; j++)
                w |= (uint64_t)(unsigned char)s[(i - 1) * 8 + j] << (8 * j);
            out[i] = (int64_t)w;
        }
    }
    return need;
}

void ea_put_str(ea_builder *b, int key, const char *s, size_t len) {
    uint32_t need = ea_str_words(s, len, NULL, 0);
    int64_t *w = xmalloc(need * sizeof *w);
    ea_str_words(s, len, w, need);
    ea_put(b, key, len ? w : NULL, len ? need : 0);
    free(w);
}

void ea_put_literal(ea_builder *b, const hlo_literal *lit, int64_t unique) {
    if (!lit) return;
    if (lit->elided || lit->raw || (!lit->f && !lit->i && lit->count)) {
        int64_t v[3] = {lit->count, 0, unique};
        ea_put(b, A_LITERAL, v, 3);
        return;
    }
    uint64_t h = 0x9e3779b97f4a7c15ull ^ (uint64_t)lit->count;
    for (int64_t k = 0; k < lit->count; k++) {
        uint64_t bits;
        if (lit->f) {
            double x = dtype_round(lit->dtype, lit->f[k]);
            memcpy(&bits, &x, sizeof bits);
        } else {
            bits = (uint64_t)lit->i[k];
        }
        h = hash_mix(h, bits);
    }
    if (h == 0) h = 1;
    int64_t v[2] = {lit->count, (int64_t)h};
    ea_put(b, A_LITERAL, v, 2);
}

bool ea_is_default(int key, const int64_t *v, uint32_t n) {
    if (n == 0) return true;
    attr_kind k = key >= 0 && key < A_COUNT ? attr_key_kind(key) : K_INTS;
    if ((k == K_INT || k == K_BOOL || key == A_DIRECTION) && n == 1 && v[0] == 0) return true;
    return false;
}

void ea_canon(const ea_builder *b, ea_builder *out) {
    /* Triples are few (a handful per op): insertion order by key, stable. */
    size_t starts[64], nt = 0;
    for (size_t i = 0; i + 1 < b->n && nt < 64; i += 2 + (size_t)b->w[i + 1]) starts[nt++] = i;
    for (size_t i = 1; i < nt; i++)
        for (size_t j = i; j > 0 && b->w[starts[j - 1]] > b->w[starts[j]]; j--) {
            size_t t = starts[j];
            starts[j] = starts[j - 1];
            starts[j - 1] = t;
        }
    out->n = 0;
    for (size_t t = 0; t < nt; t++) {
        const int64_t *tr = b->w + starts[t];
        if (ea_is_default((int)tr[0], tr + 2, (uint32_t)tr[1])) continue;
        XGROW(out->w, out->cap, out->n + 2 + (size_t)tr[1]);
        memcpy(out->w + out->n, tr, (2 + (size_t)tr[1]) * sizeof *tr);
        out->n += 2 + (size_t)tr[1];
    }
}

uint32_t ea_intern(ea_builder *b, egraph *g) {
    ea_builder c;
    ea_init(&c);
    ea_canon(b, &c);
    uint32_t id = eg_attr(g, c.w, (uint32_t)c.n);
    ea_free(&c);
    return id;
}

const int64_t *ea_find(const int64_t *w, uint32_t n, int key, uint32_t *cnt) {
    for (uint32_t i = 0; i + 1 < n; i += 2 + (uint32_t)w[i + 1]) {
        if (w[i] == key) {
            *cnt = (uint32_t)w[i + 1];
            return w + i + 2;
        }
        if (w[i] > key) break;
    }
    *cnt = 0;
    return NULL;
}

const int64_t *ea_get(const egraph *g, uint32_t attr, int key, uint32_t *cnt) {
    uint32_t n;
    const int64_t *w = eg_attr_words(g, attr, &n);
    return ea_find(w, n, key, cnt);
}

int64_t ea_get_int(const egraph *g, uint32_t attr, int key, int64_t dflt) {
    uint32_t c;
    const int64_t *v = ea_get(g, attr, key, &c);
    return c ? v[0] : dflt;
}

size_t ea_get_str(const egraph *g, uint32_t attr, int key, char *out, size_t cap) {
    uint32_t c;
    const int64_t *v = ea_get(g, attr, key, &c);
    if (cap) out[0] = 0;
    if (!c) return 0;
    size_t len = (size_t)v[0];
    for (size_t j = 0; j < len && j + 1 < cap && 1 + j / 8 < c; j++)
        out[j] = (char)(((uint64_t)v[1 + j / 8] >> (8 * (j % 8))) & 0xff), out[j + 1] = 0;
    return len;
}

int ea_check(const int64_t *w, uint32_t n, strbuf *why) {
    int bad = 0;
    int64_t prev = -1;
    uint32_t i = 0;
    while (i < n) {
        if (i + 1 >= n || w[i + 1] < 0 || i + 2 + (uint64_t)w[i + 1] > n) {
            if (why) sb_printf(why, "truncated triple at word %u\n", i);
            return bad + 1;
        }
        if (w[i] <= prev) {
            if (why) sb_printf(why, "key %lld out of order at word %u\n", (long long)w[i], i);
            bad++;
        }
        if (ea_is_default((int)w[i], w + i + 2, (uint32_t)w[i + 1])) {
            if (why) sb_printf(why, "key %lld holds its default value\n", (long long)w[i]);
            bad++;
        }
        prev = w[i];
        i += 2 + (uint32_t)w[i + 1];
    }
    return bad;
}

void ea_print(strbuf *b, const egraph *g, uint32_t attr) {
    uint32_t n;
    const int64_t *w = eg_attr_words(g, attr, &n);
    for (uint32_t i = 0; i + 1 < n; i += 2 + (uint32_t)w[i + 1]) {
        int key = (int)w[i];
        uint32_t c = (uint32_t)w[i + 1];
        const int64_t *v = w + i + 2;
        if (i) sb_putc(b, ' ');
        sb_printf(b, "%s=", key < A_COUNT ? attr_key_name(key) : "?");
        attr_kind k = key < A_COUNT ? attr_key_kind(key) : K_INTS;
        if (key == A_DIRECTION) sb_puts(b, ea_direction_name((int)v[0]));
        else if (k == K_STRING || k == K_IDENT) {
            sb_putc(b, '"');
            for (uint32_t j = 0; j < (uint32_t)v[0] && 1 + j / 8 < c; j++)
                sb_putc(b, (char)(((uint64_t)v[1 + j / 8] >> (8 * (j % 8))) & 0xff));
            sb_putc(b, '"');
        } else if (k == K_INT || k == K_BOOL) sb_printf(b, "%lld", (long long)v[0]);
        else {
            sb_putc(b, '{');
            for (uint32_t j = 0; j < c; j++) sb_printf(b, "%s%lld", j ? "," : "", (long long)v[j]);
            sb_putc(b, '}');
        }
    }
}
