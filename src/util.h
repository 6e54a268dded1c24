/* util — allocation, arenas, growable strings, hashing.
 *
 * Out of memory is not an error we recover from: every allocation goes through
 * the x* family, which prints "out of memory" and exits 3 (STYLE 5, 7).
 *
 * An arena owns every block it hands out; arena_free() releases them all at
 * once. Pointers into an arena stay valid until then (blocks never move).
 *
 * A strbuf owns its bytes; sb_take() hands them over to the caller (free()).
 * Its contents are always NUL-terminated.
 */
#ifndef SCALIFY_UTIL_H
#define SCALIFY_UTIL_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

/* Internal errors (STYLE 7, exit status 3): prints "scalify: internal error:
 * message" and ends the process with status 3, never abort(). Out of memory
 * in the x*alloc family ends here. */
void xfatal(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
void *xmalloc(size_t n);               /* never NULL; caller frees */
void *xcalloc(size_t n, size_t size);  /* zeroed; overflow-checked */
void *xrealloc(void *p, size_t n);
/* xmalloc for a large buffer filled once (an inflated input): from 2 MB on it
 * is aligned and offered for transparent huge pages, so filling it costs a
 * page fault per 2 MB, not per 4 KB. free() releases it, xrealloc grows it. */
void *xmalloc_large(size_t n);
char *xstrdup(const char *s);
char *xstrndup(const char *s, size_t n);
/* Grows *p (holding *cap elements of size elem) to at least need elements. */
void xgrow(void **p, size_t *cap, size_t need, size_t elem);
#define XGROW(p, cap, need) xgrow((void **)&(p), &(cap), (need), sizeof(*(p)))
/* A set of small integers as one byte each: sets *flags[k], growing the
 * array (*cap bytes) zero-filled as needed. */
void flag_set(uint8_t **flags, size_t *cap, size_t k);

/* ---- arena ---- */
typedef struct arena_block arena_block;
typedef struct arena {
    arena_block *head;
    char *cur, *end;
    char *zero;    /* [zero, end) of the current block is known zero */
    size_t total;  /* bytes of its blocks, for memory reports */
} arena;

void arena_init(arena *a);
void arena_free(arena *a);
/* Forgets every allocation but keeps the memory, as one block as large as all
 * of a's blocks together: an arena filled, reset and filled again to the same
 * size touches no fresh memory the second time. Pointers into a die. */
void arena_reset(arena *a);
void *arena_alloc(arena *a, size_t n);              /* 8-byte aligned, zeroed */
/* arena_alloc for memory the caller fills whole before reading it (a
 * message it initialises, bytes it copies in): not zeroed where that would
 * take a memset (memory handed out before, after arena_reset). */
void *arena_alloc_raw(arena *a, size_t n);
/* A hint that a, still empty, will hold about n bytes: its first block is made
 * that large (a mapped one from 2 MB on, at most 64 MB) instead of growing to
 * it from small ones. */
void arena_expect(arena *a, size_t n);
/* Bytes of a's blocks up to its latest allocation: total without the unused
 * tail of the current block (a large arena's last block is mapped, and its
 * untouched pages cost no memory). */
size_t arena_used(const arena *a);
char *arena_strndup(arena *a, const char *s, size_t n);
/* arena_strndup packed byte by byte, not rounded up to 8: for an arena
 * that holds nothing but such strings (anything else would be misaligned). */
char *arena_strndup_packed(arena *a, const char *s, size_t n);
char *arena_strdup(arena *a, const char *s);
/* A copy of n bytes of p in the arena (zeros when p is NULL: an empty array
 * copied with room for one more). */
void *arena_memdup(arena *a, const void *p, size_t n);
/* Room for one more element in an arena array *p of n elements of elem
 * bytes and capacity *cap: when full, a copy twice as large (first when
 * empty) replaces it (the old block stays in the arena). */
void arena_grow(arena *a, void **p, uint32_t n, uint32_t *cap, size_t elem, uint32_t first);
#define ARENA_GROW(a, p, n, cap, first) arena_grow((a), (void **)&(p), (n), &(cap), sizeof(*(p)), (first))
/* The arena takes ownership of a malloc'd block of n bytes (freed with it):
 * lets a grown vector become arena data without a copy. */
void arena_adopt(arena *a, void *p, size_t n);

/* ---- strbuf ---- */
typedef struct strbuf {
    char *s;
    size_t len, cap;
} strbuf;

void sb_init(strbuf *b);
void sb_free(strbuf *b);
void sb_reset(strbuf *b);                /* len = 0, keeps capacity */
void sb_putc(strbuf *b, char c);
void sb_put(strbuf *b, const char *s, size_t n);
void sb_puts(strbuf *b, const char *s);
void sb_printf(strbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void sb_vprintf(strbuf *b, const char *fmt, va_list ap);
/* Appends s as a C/HLO string literal body: \" \\ \n \t and \xNN escapes. */
void sb_put_escaped(strbuf *b, const char *s, size_t n);
char *sb_take(strbuf *b);                /* caller frees; b is reset */

/* ---- hashing ---- */
uint64_t hash_bytes(const void *p, size_t n);
static inline uint64_t hash_mix(uint64_t h, uint64_t v) {
    h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    return h * 0xff51afd7ed558ccdull;
}

/* String → uint32 map over borrowed keys (the caller keeps keys alive).
 * Open addressing with the hash kept per slot (probes compare hashes first and
 * rehashing never rehashes a key). Iteration order is never exposed. */
typedef struct strmap_slot {
    const char *key;  /* NULL: empty */
    uint32_t len, val;
    uint64_t hash;
} strmap_slot;

typedef struct strmap {
    strmap_slot *slots;
    size_t cap, len;
} strmap;

void strmap_init(strmap *m);
/* Sizes the table for about n keys up front (saves rehashing). */
void strmap_reserve(strmap *m, size_t n);
void strmap_free(strmap *m);
/* Returns true and sets *val when found. */
bool strmap_get(const strmap *m, const char *k, size_t n, uint32_t *val);
/* The stored key equal to k[0..n), or NULL: lets a strmap act as an intern pool. */
const char *strmap_key(const strmap *m, const char *k, size_t n);
/* Inserts or overwrites; returns true when the key was new. The key is
 * referenced, not copied: k[0..n) must stay as it is while the map lives. */
bool strmap_put(strmap *m, const char *k, size_t n, uint32_t val);
/* strmap_put with the key's hash_bytes given, and a hint that such a put (or
 * get) comes soon: its slot is fetched into the cache meanwhile. */
bool strmap_put_hashed(strmap *m, const char *k, size_t n, uint64_t h, uint32_t val);
void strmap_prefetch(const strmap *m, uint64_t h);

/* uint32 → uint32 map (keys below UINT32_MAX): open addressing, grown at
 * half full; a zeroed u32map is empty. Iteration order is never exposed. */
typedef struct u32map {
    uint32_t *keys;  /* key + 1 (0: empty) */
    uint32_t *vals;
    uint32_t cap, len;
} u32map;

void u32map_free(u32map *m);
/* Returns true and sets *val when found. */
bool u32map_get(const u32map *m, uint32_t key, uint32_t *val);
/* Inserts or overwrites. */
void u32map_put(u32map *m, uint32_t key, uint32_t val);

/* Checked 64-bit arithmetic: false on overflow. */
static inline bool mul_ok(int64_t a, int64_t b, int64_t *out) {
    return !__builtin_mul_overflow(a, b, out);
}

/* Milliseconds of wall time since an arbitrary point, milliseconds of CPU time
 * this process has used, and peak RSS in bytes since the process started or
 * since the last peak_rss_reset (which only Linux honours; elsewhere the peak
 * stays the process-lifetime one). */
double now_ms(void);
double cpu_ms(void);
size_t peak_rss_bytes(void);
void peak_rss_reset(void);

#endif
