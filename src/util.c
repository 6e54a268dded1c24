#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <time.h>
#include <unistd.h>

#include "scalify.h"

/* SCALIFY_MOVE_ON_GROW (make asan): every growth moves its array, the old one
 * freed (xrealloc) or poisoned (arena_grow), so a pointer into an array read
 * after the array grew (an e-graph's children after eg_add) is an ASan
 * report, not a read that happens to see the old values. */
#ifdef SCALIFY_MOVE_ON_GROW
#include <sanitizer/asan_interface.h>
#endif

/* Internal errors (out of memory among them) exit 3 (STYLE 5), not a crash:
 * _exit, since flushing stdio or running atexit handlers could need memory. */
void xfatal(const char *fmt, ...) {
    fflush(stdout);
    fputs("scalify: internal error: ", stderr);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    fflush(stderr);
    _exit(EXIT_INTERNAL);
}

static void oom(size_t n) { xfatal("out of memory (allocating %zu bytes)", n); }

void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) oom(n);
    return p;
}

void *xcalloc(size_t n, size_t size) {
    size_t total;
    if (__builtin_mul_overflow(n, size, &total)) oom(SIZE_MAX);
    void *p = calloc(total ? total : 1, 1);
    if (!p) oom(total);
    return p;
}

void *xrealloc(void *p, size_t n) {
#if defined(SCALIFY_MOVE_ON_GROW) && defined(__GLIBC__)
    if (p) {
        size_t old = malloc_usable_size(p);
        void *q = xmalloc(n);
        memcpy(q, p, old < n ? old : n);
        free(p);
        return q;
    }
#endif
    void *q = realloc(p, n ? n : 1);
    if (!q) oom(n);
    return q;
}

char *xstrdup(const char *s) { return xstrndup(s, strlen(s)); }

char *xstrndup(const char *s, size_t n) {
    char *p = xmalloc(n + 1);
    memcpy(p, s, n);
    p[n] = 0;
    return p;
}

void xgrow(void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return;
    size_t c = *cap ? *cap : 8;
    while (c < need) {
        if (c > SIZE_MAX / 2) oom(SIZE_MAX);
        c *= 2;
    }
    size_t bytes;
    if (__builtin_mul_overflow(c, elem, &bytes)) oom(SIZE_MAX);
    *p = xrealloc(*p, bytes);
    *cap = c;
}

void flag_set(uint8_t **flags, size_t *cap, size_t k) {
    if (k >= *cap) {
        size_t n = *cap ? *cap : 64;
        while (n <= k) n *= 2;
        *flags = xrealloc(*flags, n);
        memset(*flags + *cap, 0, n - *cap);
        *cap = n;
    }
    (*flags)[k] = 1;
}

/* The transparent huge page size on x86-64 (and the alignment that lets a
 * region use them). */
enum { HUGE = 2 * 1024 * 1024 };

/* How much of a region of n bytes to offer for huge pages: the huge pages it
 * fills, and the last, partly filled one only when at least half of it is
 * used. A huge page is cleared whole on its first touch, so one holding a
 * few kilobytes (a 2.1 MB inflated dump, an array just over a boundary)
 * costs a 2 MB clear where small pages would clear those kilobytes. */
static size_t huge_part(size_t n) { return (n + HUGE / 2) / HUGE * HUGE; }

void *xmalloc_large(size_t n) {
#ifdef MADV_HUGEPAGE
    if (n >= HUGE && n <= SIZE_MAX - HUGE) {
        size_t len = (n + HUGE - 1) / HUGE * HUGE; /* a multiple of the alignment, as C11 asks */
        void *p = aligned_alloc(HUGE, len);
        if (p) {
            madvise(p, huge_part(n), MADV_HUGEPAGE); /* advice: without it, small pages */
            return p;
        }
    }
#endif
    return xmalloc(n);
}

/* ---- arena ---- */

struct arena_block {
    arena_block *next;
    size_t size;   /* usable bytes; 0 for an adopted block */
    size_t mapped; /* bytes mapped by block_new (0: from malloc) */
    max_align_t data[];
};

enum { ARENA_BLOCK = 64 * 1024 };

/* A block with size usable bytes; *fresh tells whether they are known zero.
 * Blocks of at least HUGE bytes are mapped on their own, aligned to and in
 * multiples of HUGE, and offered to the kernel for transparent huge pages:
 * a large arena (a parsed module, a lifting context) then costs one page
 * fault per 2 MB instead of one per 4 KB, which on a virtual machine is a
 * good part of the time spent filling it. Fresh mappings read as zero, so
 * what is handed out from them needs no memset. */
static arena_block *block_new(size_t size, bool *fresh) {
    *fresh = false;
#if defined(MAP_ANONYMOUS) && defined(MADV_HUGEPAGE)
    if (size >= HUGE - sizeof(arena_block)) {
        size_t len = (size + sizeof(arena_block) + HUGE - 1) / HUGE * HUGE; /* 0 or less on overflow */
        char *p = len > size && len + HUGE > len
                      ? mmap(NULL, len + HUGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
                      : MAP_FAILED;
        if (p != MAP_FAILED) {
            /* Map HUGE more than needed and keep the aligned len bytes inside. */
            char *q = (char *)(((uintptr_t)p + HUGE - 1) & ~(uintptr_t)(HUGE - 1));
            if (q > p) munmap(p, (size_t)(q - p));
            if (q + len < p + len + HUGE) munmap(q + len, (size_t)(p + len + HUGE - (q + len)));
            madvise(q, huge_part(size + sizeof(arena_block)), MADV_HUGEPAGE); /* advice: without it, small pages */
            arena_block *b = (arena_block *)q;
            b->size = len - sizeof(arena_block);
            b->mapped = len;
            *fresh = true;
            return b;
        }
    }
#endif
    arena_block *b = xmalloc(sizeof(arena_block) + size);
    b->size = size;
    b->mapped = 0;
    return b;
}

static void block_free(arena_block *b) {
#ifdef SCALIFY_MOVE_ON_GROW
    ASAN_UNPOISON_MEMORY_REGION(b->data, b->size);
#endif
#ifdef MAP_ANONYMOUS
    if (b->mapped) {
        munmap(b, b->mapped);
        return;
    }
#endif
    free(b);
}

void arena_init(arena *a) { memset(a, 0, sizeof *a); }

void arena_adopt(arena *a, void *p, size_t n) {
    /* An adopted block is a zero-size arena block in front of the data: the data
     * is owned through a small header allocated here. */
    arena_block *b = xmalloc(sizeof(arena_block) + sizeof(void *));
    b->size = 0;
    b->mapped = 0;
    memcpy(b->data, &p, sizeof p);
    a->total += n + sizeof(arena_block) + sizeof(void *);
    if (a->head) {
        b->next = a->head->next;
        a->head->next = b;
    } else {
        b->next = NULL;
        a->head = b;
        a->cur = a->end = a->zero = NULL;
    }
}

void arena_free(arena *a) {
    for (arena_block *b = a->head, *next; b; b = next) {
        if (b->size == 0) {
            void *p;
            memcpy(&p, b->data, sizeof p);
            free(p);
        }
        next = b->next;
        block_free(b);
    }
    arena_init(a);
}

/* a, empty, gets one block of size bytes. */
static void first_block(arena *a, size_t size) {
    bool fresh;
    arena_block *b = block_new(size, &fresh);
    b->next = NULL;
    a->head = b;
    a->total = sizeof(arena_block) + b->size;
    a->cur = (char *)b->data;
    a->end = a->cur + b->size;
    a->zero = fresh ? a->cur : a->end;
}

void arena_reset(arena *a) {
    if (!a->head) return;
    if (a->head->next || a->head->size == 0) {
        size_t size = a->total;
        arena_free(a);
        first_block(a, size);
        return;
    }
    a->cur = (char *)a->head->data;
    a->end = a->cur + a->head->size;
    a->zero = a->end; /* used before */
#ifdef SCALIFY_MOVE_ON_GROW
    ASAN_UNPOISON_MEMORY_REGION(a->cur, a->head->size);
#endif
}

static inline void *arena_take(arena *a, size_t n, bool zero) {
    n = (n + 7) & ~(size_t)7;
    if (n == 0) n = 8;
    if ((size_t)(a->end - a->cur) < n) {
        /* Blocks grow with the arena (up to 4 HUGE), so a small arena stays small
         * and a large one is mostly huge blocks. */
        size_t grow = a->total < ARENA_BLOCK ? ARENA_BLOCK : a->total < 4 * (size_t)HUGE ? a->total : 4 * (size_t)HUGE;
        size_t size = n > grow / 4 ? n : grow;
        bool fresh;
        arena_block *b = block_new(size, &fresh);
        a->total += sizeof(arena_block) + b->size;
        if (size == n && a->head) {
            /* A big allocation gets a block of its own behind the current one,
             * so the current block's free tail is not wasted. */
            b->next = a->head->next;
            a->head->next = b;
            if (!fresh && zero) memset(b->data, 0, n);
            return b->data;
        }
        b->next = a->head;
        a->head = b;
        a->cur = (char *)b->data;
        a->end = a->cur + b->size;
        a->zero = fresh ? a->cur : a->end;
    }
    void *p = a->cur;
    a->cur += n;
    if (zero && (char *)p < a->zero) memset(p, 0, n);
    return p;
}

void *arena_alloc(arena *a, size_t n) { return arena_take(a, n, true); }
void *arena_alloc_raw(arena *a, size_t n) { return arena_take(a, n, false); }

void arena_expect(arena *a, size_t n) {
    /* Beyond 32 HUGE (64 MB) the blocks arena_alloc grows are large anyway. */
    if (!a->head && n >= ARENA_BLOCK) first_block(a, n < 32 * (size_t)HUGE ? n : 32 * (size_t)HUGE);
}

size_t arena_used(const arena *a) { return a->total - (size_t)(a->end - a->cur); }

char *arena_strndup(arena *a, const char *s, size_t n) {
    char *p = arena_alloc(a, n + 1);
    if (n) memcpy(p, s, n);
    p[n] = 0;
    return p;
}

char *arena_strndup_packed(arena *a, const char *s, size_t n) {
    char *p;
    if ((size_t)(a->end - a->cur) > n) {
        p = a->cur;
        a->cur += n + 1;
    } else {
        p = arena_take(a, n + 1, false);
    }
    if (n) memcpy(p, s, n);
    p[n] = 0;
    return p;
}

char *arena_strdup(arena *a, const char *s) { return arena_strndup(a, s, strlen(s)); }

void *arena_memdup(arena *a, const void *p, size_t n) {
    void *q = arena_alloc(a, n);
    if (n && p) memcpy(q, p, n);
    else if (n) memset(q, 0, n);
    return q;
}

void arena_grow(arena *a, void **p, uint32_t n, uint32_t *cap, size_t elem, uint32_t first) {
    if (n < *cap) return;
    uint32_t c = *cap ? 2 * *cap : first;
    void *q = arena_alloc(a, (size_t)c * elem);
    if (n) memcpy(q, *p, (size_t)n * elem);
#ifdef SCALIFY_MOVE_ON_GROW
    if (n) ASAN_POISON_MEMORY_REGION(*p, (size_t)n * elem);
#endif
    *p = q;
    *cap = c;
}

/* ---- strbuf ---- */

void sb_init(strbuf *b) { memset(b, 0, sizeof *b); }
void sb_free(strbuf *b) { free(b->s); sb_init(b); }
void sb_reset(strbuf *b) { b->len = 0; if (b->s) b->s[0] = 0; }

static void sb_reserve(strbuf *b, size_t extra) {
    if (b->len + extra + 1 > b->cap) XGROW(b->s, b->cap, b->len + extra + 1);
}

void sb_putc(strbuf *b, char c) {
    sb_reserve(b, 1);
    b->s[b->len++] = c;
    b->s[b->len] = 0;
}

void sb_put(strbuf *b, const char *s, size_t n) {
    sb_reserve(b, n);
    if (n) memcpy(b->s + b->len, s, n);
    b->len += n;
    b->s[b->len] = 0;
}

void sb_puts(strbuf *b, const char *s) { sb_put(b, s, strlen(s)); }

void sb_vprintf(strbuf *b, const char *fmt, va_list ap) {
    va_list ap2;
    va_copy(ap2, ap);
    int n = vsnprintf(NULL, 0, fmt, ap2);
    va_end(ap2);
    if (n < 0) return;
    sb_reserve(b, (size_t)n);
    vsnprintf(b->s + b->len, (size_t)n + 1, fmt, ap);
    b->len += (size_t)n;
}

void sb_printf(strbuf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    sb_vprintf(b, fmt, ap);
    va_end(ap);
}

void sb_put_escaped(strbuf *b, const char *s, size_t n) {
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        switch (c) {
        case '"': sb_put(b, "\\\"", 2); break;
        case '\\': sb_put(b, "\\\\", 2); break;
        case '\n': sb_put(b, "\\n", 2); break;
        case '\t': sb_put(b, "\\t", 2); break;
        default:
            if (c < 0x20 || c == 0x7f) sb_printf(b, "\\x%02x", c);
            else sb_putc(b, (char)c);
        }
    }
}

char *sb_take(strbuf *b) {
    char *s = b->s ? b->s : xstrdup("");
    sb_init(b);
    return s;
}

/* ---- hashing (FNV-1a over 8-byte words, then a final mix) ---- */

uint64_t hash_bytes(const void *p, size_t n) {
    const unsigned char *s = p;
    uint64_t h = 0xcbf29ce484222325ull ^ n;
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, s, 8);
        h = (h ^ w) * 0x100000001b3ull;
        h ^= h >> 29;
        s += 8;
        n -= 8;
    }
    while (n--) h = (h ^ *s++) * 0x100000001b3ull;
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    return h;
}

void u32map_free(u32map *m) {
    free(m->keys);
    free(m->vals);
    memset(m, 0, sizeof *m);
}

/* The slot of key in m: its own, or the empty one where it goes. */
static uint32_t u32map_slot(const u32map *m, uint32_t key) {
    uint32_t h = (key * 2654435761u) & (m->cap - 1);
    while (m->keys[h] && m->keys[h] != key + 1) h = (h + 1) & (m->cap - 1);
    return h;
}

bool u32map_get(const u32map *m, uint32_t key, uint32_t *val) {
    if (!m->cap) return false;
    uint32_t h = u32map_slot(m, key);
    if (!m->keys[h]) return false;
    *val = m->vals[h];
    return true;
}

void u32map_put(u32map *m, uint32_t key, uint32_t val) {
    if (2 * (m->len + 1) > m->cap) {
        u32map n = {.cap = m->cap ? 2 * m->cap : 64, .len = m->len};
        n.keys = xcalloc(n.cap, sizeof *n.keys);
        n.vals = xcalloc(n.cap, sizeof *n.vals);
        for (uint32_t q = 0; q < m->cap; q++)
            if (m->keys[q]) {
                uint32_t h = u32map_slot(&n, m->keys[q] - 1);
                n.keys[h] = m->keys[q], n.vals[h] = m->vals[q];
            }
        free(m->keys);
        free(m->vals);
        *m = n;
    }
    uint32_t h = u32map_slot(m, key);
    m->len += !m->keys[h];
    m->keys[h] = key + 1;
    m->vals[h] = val;
}

void strmap_init(strmap *m) { memset(m, 0, sizeof *m); }

void strmap_free(strmap *m) {
    free(m->slots);
    strmap_init(m);
}

static size_t strmap_find(const strmap *m, const char *k, size_t n, uint64_t h, bool *found) {
    size_t mask = m->cap - 1, i = (size_t)h & mask;
    for (;;) {
        const strmap_slot *s = &m->slots[i];
        if (!s->key) { *found = false; return i; }
        if (s->hash == h && s->len == n && memcmp(s->key, k, n) == 0) { *found = true; return i; }
        i = (i + 1) & mask;
    }
}

bool strmap_get(const strmap *m, const char *k, size_t n, uint32_t *val) {
    if (!m->cap) return false;
    bool found;
    size_t i = strmap_find(m, k, n, hash_bytes(k, n), &found);
    if (found) *val = m->slots[i].val;
    return found;
}

const char *strmap_key(const strmap *m, const char *k, size_t n) {
    if (!m->cap) return NULL;
    bool found;
    size_t i = strmap_find(m, k, n, hash_bytes(k, n), &found);
    return found ? m->slots[i].key : NULL;
}

static void strmap_rehash(strmap *m, size_t cap) {
    strmap old = *m;
    m->cap = cap;
    /* Cleared by writing, not calloc'd: a fresh mapping read before it is
     * written (lookups probe empty slots) costs a second fault per page, and
     * with another thread running, a TLB flush on each. */
    m->slots = xmalloc(cap * sizeof *m->slots);
    memset(m->slots, 0, cap * sizeof *m->slots);
    for (size_t i = 0; i < old.cap; i++) {
        if (!old.slots[i].key) continue;
        size_t j = (size_t)old.slots[i].hash & (cap - 1);
        while (m->slots[j].key) j = (j + 1) & (cap - 1);
        m->slots[j] = old.slots[i];
    }
    free(old.slots);
}

void strmap_reserve(strmap *m, size_t n) {
    size_t cap = 16;
    while (cap * 3 < n * 4 + 4) cap *= 2;
    if (cap > m->cap) strmap_rehash(m, cap);
}

bool strmap_put(strmap *m, const char *k, size_t n, uint32_t val) { return strmap_put_hashed(m, k, n, hash_bytes(k, n), val); }

void strmap_prefetch(const strmap *m, uint64_t h) {
    if (m->cap) __builtin_prefetch(&m->slots[(size_t)h & (m->cap - 1)]);
}

bool strmap_put_hashed(strmap *m, const char *k, size_t n, uint64_t h, uint32_t val) {
    if ((m->len + 1) * 4 >= m->cap * 3) strmap_rehash(m, m->cap ? m->cap * 2 : 16);
    bool found;
    size_t i = strmap_find(m, k, n, h, &found);
    if (!found) {
        m->slots[i] = (strmap_slot){k, (uint32_t)n, 0, h};
        m->len++;
    }
    m->slots[i].val = val;
    return !found;
}

double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

double cpu_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* Linux keeps the resettable high-water mark in /proc/self/status (VmHWM);
 * elsewhere the process-lifetime peak from getrusage is the best there is. */
size_t peak_rss_bytes(void) {
    FILE *f = fopen("/proc/self/status", "r");
    if (f) {
        char line[256];
        unsigned long long kb = 0;
        bool found = false;
        while (!found && fgets(line, sizeof line, f)) found = sscanf(line, "VmHWM: %llu kB", &kb) == 1;
        fclose(f);
        if (found) return (size_t)kb * 1024;
    }
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (size_t)ru.ru_maxrss * 1024;
}

void peak_rss_reset(void) {
#ifdef __GLIBC__
    malloc_trim(0); /* give freed memory back first, so it does not count again */
#endif
    FILE *f = fopen("/proc/self/clear_refs", "w");
    if (!f) return;
    fputs("5", f);
    fclose(f);
}
