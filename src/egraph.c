#include "egraph.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph.h"
#include "shape.h"

#define EMPTY UINT32_MAX
#define TOMB (UINT32_MAX - 1)

/* An interned table of int64 blobs (attributes and types): id i (1-based) is
 * at[i][0 .. len[i]), in an arena so that it never moves: the words
 * eg_attr_words and eg_type_dims give stay valid while blobs are added. */
typedef struct blobs {
    arena mem;
    const int64_t **at;
    uint32_t *len;
    size_t n, cap;           /* entries, id 0 reserved */
    uint32_t *slots;         /* open addressing over ids */
    size_t nslots;
} blobs;

struct egraph {
    /* nodes: words[off[id]] = op | nchild << 16, then attr, type, children;
     * nchild >= NODE_WIDE is written NODE_WIDE << 16 and held in a fourth
     * header word (node_n), so no child count is too large. */
    uint32_t *words;
    size_t nwords, capwords;
    uint32_t *off, *next_in_class;
    uint8_t *dead;
    size_t nnodes, capnodes;
    /* classes, indexed by the id of the node that created them */
    uint32_t *uf, *head, *tail, *par_head, *par_tail, *type;
    uint8_t *origin;
    /* parent lists: pool entries (node, next) */
    uint32_t *pool_node, *pool_next;
    size_t npool, cappool;
    /* hash-cons over live nodes */
    uint32_t *table, *ttag; /* ttag: hash bits per slot, compared before the node */
    size_t tcap, tused;
    /* classes whose parents need repair */
    uint32_t *work;
    size_t nwork, capwork;
    blobs attrs, types;
    eg_stats st;
};

/* ---- interning ---- */

static uint64_t hash_words64(const int64_t *w, size_t n) { return hash_bytes(w, n * sizeof *w); }

static uint32_t blob_intern(blobs *b, const int64_t *w, uint32_t n) {
    if ((b->n + 1) * 2 >= b->nslots) {
        size_t ns = b->nslots ? b->nslots * 2 : 64;
        free(b->slots);
        b->slots = xmalloc(ns * sizeof *b->slots);
        memset(b->slots, 0xff, ns * sizeof *b->slots);
        b->nslots = ns;
        for (uint32_t id = 1; id <= b->n; id++) {
            size_t i = hash_words64(b->at[id], b->len[id]) & (ns - 1);
            while (b->slots[i] != EMPTY) i = (i + 1) & (ns - 1);
            b->slots[i] = id;
        }
    }
    size_t mask = b->nslots - 1, i = hash_words64(w, n) & mask;
    for (; b->slots[i] != EMPTY; i = (i + 1) & mask) {
        uint32_t id = b->slots[i];
        if (b->len[id] == n && (n == 0 || memcmp(b->at[id], w, n * sizeof *w) == 0)) return id;
    }
    uint32_t id = (uint32_t)++b->n;
    if (b->n + 1 > b->cap) {
        size_t c = b->cap;
        XGROW(b->at, c, b->n + 1);
        c = b->cap;
        XGROW(b->len, c, b->n + 1);
        b->cap = c;
    }
    b->at[id] = arena_memdup(&b->mem, w, n * sizeof *w);
    b->len[id] = n;
    b->slots[i] = id;
    return id;
}

static void blob_free(blobs *b) {
    arena_free(&b->mem);
    free(b->at);
    free(b->len);
    free(b->slots);
}

uint32_t eg_attr(egraph *g, const int64_t *words, uint32_t n) { return n ? blob_intern(&g->attrs, words, n) : 0; }

const int64_t *eg_attr_words(const egraph *g, uint32_t attr, uint32_t *n) {
    if (attr == 0 || attr > g->attrs.n) {
        *n = 0;
        return NULL;
    }
    *n = g->attrs.len[attr];
    return g->attrs.at[attr];
}

uint32_t eg_type(egraph *g, int dt, const int64_t *dims, uint32_t rank) {
    int64_t w[2 + 64];
    if (rank > 64) rank = 64;
    w[0] = dt;
    w[1] = rank;
    if (rank) memcpy(w + 2, dims, rank * sizeof *dims);
    return blob_intern(&g->types, w, rank + 2);
}

int eg_type_dtype(const egraph *g, uint32_t type) {
    return type && type <= g->types.n ? (int)g->types.at[type][0] : 0;
}

const int64_t *eg_type_dims(const egraph *g, uint32_t type, uint32_t *rank) {
    if (!type || type > g->types.n) {
        *rank = 0;
        return NULL;
    }
    const int64_t *w = g->types.at[type];
    *rank = (uint32_t)w[1];
    return w + 2;
}

/* ---- construction ---- */

egraph *eg_new(void) {
    egraph *g = xcalloc(1, sizeof *g);
    return g;
}

void eg_free(egraph *g) {
    if (!g) return;
    free(g->words);
    free(g->off);
    free(g->next_in_class);
    free(g->dead);
    free(g->uf);
    free(g->head);
    free(g->tail);
    free(g->par_head);
    free(g->par_tail);
    free(g->type);
    free(g->origin);
    free(g->pool_node);
    free(g->pool_next);
    free(g->table);
    free(g->ttag);
    free(g->work);
    blob_free(&g->attrs);
    blob_free(&g->types);
    free(g);
}

static void grow_nodes(egraph *g) {
    size_t c = g->capnodes ? g->capnodes * 2 : 1024;
#define G(arr) g->arr = xrealloc(g->arr, c * sizeof *g->arr)
    G(off); G(next_in_class); G(dead); G(uf); G(head); G(tail); G(par_head); G(par_tail); G(type); G(origin);
#undef G
    g->capnodes = c;
}

eid eg_find(egraph *g, eid c) {
    eid r = c;
    while (g->uf[r] != r) r = g->uf[r];
    while (g->uf[c] != r) {  /* path compression */
        eid next = g->uf[c];
        g->uf[c] = r;
        c = next;
    }
    return r;
}

/* Node layout helpers (see struct egraph): child count, header words, children. */
#define NODE_WIDE 0xffffu
static inline uint32_t node_n(const uint32_t *w) { return w[0] >> 16 == NODE_WIDE ? w[3] : w[0] >> 16; }
static inline uint32_t node_hdr(uint32_t n) { return n >= NODE_WIDE ? 4 : 3; }
static inline uint32_t *node_kids(uint32_t *w) { return w + node_hdr(node_n(w)); }

static uint64_t node_hash(const uint32_t *w) {
    uint32_t n = node_n(w);
    return hash_bytes(w, (node_hdr(n) + n) * sizeof *w);
}

static bool node_eq(const uint32_t *a, const uint32_t *b) {
    uint32_t n = node_n(a);
    return a[0] == b[0] && n == node_n(b) && memcmp(a + 1, b + 1, (node_hdr(n) - 1 + n) * sizeof *a) == 0;
}

/* The low 32 bits of the hash: a filter before comparing nodes, and the slot
 * index (low bits) on resize without touching the nodes. */
static uint32_t hash_tag(uint64_t h) { return (uint32_t)h; }

static void table_resize(egraph *g, size_t cap) {
    uint32_t *old = g->table, *oldtag = g->ttag;
    size_t oldcap = g->tcap;
    g->table = xmalloc(cap * sizeof *g->table);
    g->ttag = xmalloc(cap * sizeof *g->ttag);
    memset(g->table, 0xff, cap * sizeof *g->table);
    g->tcap = cap;
    g->tused = 0;
    for (size_t j = 0; j < oldcap; j++) {
        if (old[j] >= TOMB) continue;
        size_t i = oldtag[j] & (cap - 1);
        while (g->table[i] != EMPTY) i = (i + 1) & (cap - 1);
        g->table[i] = old[j];
        g->ttag[i] = oldtag[j];
        g->tused++;
    }
    free(old);
    free(oldtag);
}

/* Slot holding a node equal to w, or the first free slot (*found tells); *tag
 * gets w's hash bits for the caller to store with a new entry. */
static size_t table_find(const egraph *g, const uint32_t *w, bool *found, uint32_t *tag) {
    uint64_t h = node_hash(w);
    uint32_t t = hash_tag(h);
    size_t mask = g->tcap - 1, i = h & mask, free_slot = SIZE_MAX;
    *tag = t;
    for (;; i = (i + 1) & mask) {
        uint32_t id = g->table[i];
        if (id == EMPTY) {
            *found = false;
            return free_slot != SIZE_MAX ? free_slot : i;
        }
        if (id == TOMB) {
            if (free_slot == SIZE_MAX) free_slot = i;
            continue;
        }
        if (g->ttag[i] == t && node_eq(g->words + g->off[id], w)) {
            *found = true;
            return i;
        }
    }
}

static void table_remove(egraph *g, uint32_t node) {
    size_t mask = g->tcap - 1, i = node_hash(g->words + g->off[node]) & mask;
    for (; g->table[i] != EMPTY; i = (i + 1) & mask)
        if (g->table[i] == node) {
            g->table[i] = TOMB;
            return;
        }
}

static void add_parent(egraph *g, eid cls, uint32_t node) {
    /* One entry per (class, parent): a node naming a class many times (a
     * concatenate of 65,536 copies) would otherwise make rebuilding quadratic.
     * Entries of the node being added are the latest of every class it names. */
    if (g->par_tail[cls] != EMPTY && g->pool_node[g->par_tail[cls]] == node) return;
    if (g->npool == g->cappool) {
        size_t c = g->cappool ? g->cappool * 2 : 1024;
        g->pool_node = xrealloc(g->pool_node, c * sizeof *g->pool_node);
        g->pool_next = xrealloc(g->pool_next, c * sizeof *g->pool_next);
        g->cappool = c;
    }
    uint32_t e = (uint32_t)g->npool++;
    g->pool_node[e] = node;
    g->pool_next[e] = EMPTY;
    if (g->par_head[cls] == EMPTY) g->par_head[cls] = e;
    else g->pool_next[g->par_tail[cls]] = e;
    g->par_tail[cls] = e;
}

/* Canonical node words for a lookup, in a scratch buffer of node_hdr(n) + n words. */
static void canon_words(egraph *g, uint32_t *w, uint16_t op, uint32_t attr, uint32_t type, const eid *ch, uint32_t n) {
    w[0] = (uint32_t)op | (n >= NODE_WIDE ? NODE_WIDE : n) << 16;
    w[1] = attr;
    w[2] = type;
    if (n >= NODE_WIDE) w[3] = n;
    uint32_t *k = w + node_hdr(n);
    for (uint32_t i = 0; i < n; i++) k[i] = eg_find(g, ch[i]);
}

eid eg_lookup(egraph *g, uint16_t op, uint32_t attr, uint32_t type, const eid *ch, uint32_t n) {
    if (!g->tcap) return EID_NONE;
    uint32_t stack[64], *w = n + 4 <= 64 ? stack : xmalloc(((size_t)n + 4) * sizeof *w);
    canon_words(g, w, op, attr, type, ch, n);
    bool found;
    uint32_t tag;
    size_t i = table_find(g, w, &found, &tag);
    eid r = found ? eg_find(g, g->table[i]) : EID_NONE;
    if (w != stack) free(w);
    return r;
}

eid eg_add(egraph *g, uint16_t op, uint32_t attr, uint32_t type, const eid *ch, uint32_t n, uint8_t origin) {
    if ((g->tused + 1) * 10 >= g->tcap * 7) table_resize(g, g->tcap ? g->tcap * 2 : 1024);
    if (g->nwords + 4 + (size_t)n > UINT32_MAX) xfatal("e-graph: more than 2^32 node words (node offsets are 32 bits)");
    /* Children read from another node (eg_node_children) live in the words
     * that growing them may move: copied first. */
    eid own[16], *copy = NULL;
    uintptr_t at = (uintptr_t)ch, lo = (uintptr_t)g->words;
    if (n && at >= lo && at < lo + g->capwords * sizeof *g->words) {
        copy = n <= ARRAY_LEN(own) ? own : xmalloc(n * sizeof *copy);
        memcpy(copy, ch, n * sizeof *copy);
        ch = copy;
    }
    XGROW(g->words, g->capwords, g->nwords + 4 + n);
    uint32_t *w = g->words + g->nwords;  /* build in place; kept only when new */
    canon_words(g, w, op, attr, type, ch, n);
    if (copy != own) free(copy);
    bool found;
    uint32_t tag;
    size_t slot = table_find(g, w, &found, &tag);
    if (found) {
        eid c = eg_find(g, g->table[slot]);
        g->origin[c] |= origin;
        return c;
    }
    if (g->nnodes == g->capnodes) grow_nodes(g);
    uint32_t id = (uint32_t)g->nnodes++;
    g->off[id] = (uint32_t)g->nwords;
    g->nwords += node_hdr(n) + n;
    g->next_in_class[id] = EMPTY;
    g->dead[id] = 0;
    g->uf[id] = id;
    g->head[id] = g->tail[id] = id;
    g->par_head[id] = g->par_tail[id] = EMPTY;
    g->type[id] = type;
    g->origin[id] = origin;
    if (g->table[slot] != TOMB) g->tused++;
    g->table[slot] = id;
    g->ttag[slot] = tag;
    const uint32_t *kids = node_kids(w);
    for (uint32_t i = 0; i < n; i++) add_parent(g, kids[i], id);
    g->st.nodes++;
    return id;
}

/* ---- union and rebuild ---- */

int eg_union(egraph *g, eid a, eid b, strbuf *why) {
    a = eg_find(g, a);
    b = eg_find(g, b);
    if (a == b) return 0;
    if (g->type[a] != g->type[b]) {
        if (why) {
            sb_puts(why, "shape analysis conflict: ");
            eg_print_term(why, g, a, 3);
            sb_puts(why, " vs ");
            eg_print_term(why, g, b, 3);
        }
        return -1;
    }
    /* Keep the smaller id as the root: deterministic, and creation order holds. */
    if (b < a) {
        eid t = a;
        a = b;
        b = t;
    }
    g->uf[b] = a;
    g->next_in_class[g->tail[a]] = g->head[b];
    g->tail[a] = g->tail[b];
    if (g->par_head[b] != EMPTY) {
        if (g->par_head[a] == EMPTY) g->par_head[a] = g->par_head[b];
        else g->pool_next[g->par_tail[a]] = g->par_head[b];
        g->par_tail[a] = g->par_tail[b];
    }
    g->origin[a] |= g->origin[b];
    XGROW(g->work, g->capwork, g->nwork + 1);
    g->work[g->nwork++] = a;
    g->st.unions++;
    return 1;
}

uint64_t eg_rebuild(egraph *g) {
    uint64_t repairs = 0;
    while (g->nwork) {
        eid c = eg_find(g, g->work[--g->nwork]);
        /* Re-canonicalise every parent of c: a node whose children changed may now
         * equal another node, and then their classes merge (congruence). */
        for (uint32_t e = g->par_head[c]; e != EMPTY; e = g->pool_next[e]) {
            uint32_t p = g->pool_node[e];
            if (g->dead[p]) continue;
            uint32_t *w = g->words + g->off[p];
            uint32_t n = node_n(w), *kids = node_kids(w);
            bool stale = false;
            for (uint32_t i = 0; i < n && !stale; i++) stale = eg_find(g, kids[i]) != kids[i];
            if (!stale) continue;
            table_remove(g, p);
            for (uint32_t i = 0; i < n; i++) kids[i] = eg_find(g, kids[i]);
            bool found;
            uint32_t tag;
            size_t slot = table_find(g, w, &found, &tag);
            repairs++;
            if (found) {
                /* p duplicates an existing node: p leaves the hash-cons; classes merge. */
                g->dead[p] = 1;
                eg_union(g, g->table[slot], p, NULL);
            } else {
                if (g->table[slot] != TOMB) g->tused++;
                g->table[slot] = p;
                g->ttag[slot] = tag;
            }
        }
    }
    g->st.rebuilds++;
    g->st.repairs += repairs;
    return repairs;
}

/* ---- queries ---- */

uint32_t eg_class_type(egraph *g, eid c) { return g->type[eg_find(g, c)]; }
uint8_t eg_class_origin(egraph *g, eid c) { return g->origin[eg_find(g, c)]; }

eid eg_class_first(egraph *g, eid c) {
    eid n = g->head[eg_find(g, c)];
    while (n != EMPTY && g->dead[n]) n = g->next_in_class[n];
    return n;
}

eid eg_class_next(const egraph *g, eid node) {
    eid n = g->next_in_class[node];
    while (n != EMPTY && g->dead[n]) n = g->next_in_class[n];
    return n;
}

uint32_t eg_node_count(const egraph *g) { return (uint32_t)g->nnodes; }
bool eg_node_live(const egraph *g, eid node) { return node < g->nnodes && !g->dead[node]; }
uint16_t eg_node_op(const egraph *g, eid node) { return (uint16_t)(g->words[g->off[node]] & 0xffff); }
uint32_t eg_node_attr(const egraph *g, eid node) { return g->words[g->off[node] + 1]; }

const eid *eg_node_children(const egraph *g, eid node, uint32_t *n) {
    uint32_t *w = g->words + g->off[node];
    *n = node_n(w);
    return node_kids(w);
}

void eg_print_term(strbuf *b, egraph *g, eid c, int depth) {
    eid node = eg_class_first(g, c);
    if (node == EID_NONE) {
        sb_printf(b, "?%u", c);
        return;
    }
    uint16_t op = eg_node_op(g, node);
    if (op == EG_OP_PARAM || op == EG_OP_VAR) {
        uint32_t n;
        const int64_t *a = eg_attr_words(g, eg_node_attr(g, node), &n);
        sb_printf(b, "%s%lld", op == EG_OP_PARAM ? "param" : "var", n ? (long long)a[0] : -1LL);
        return;
    }
    sb_puts(b, op < OP_COUNT ? hlo_op_name(op) : op == EG_OP_APP ? "layer" : "op?");
    uint32_t n;
    const eid *ch = eg_node_children(g, node, &n);
    if (!n) return;
    sb_putc(b, '(');
    for (uint32_t i = 0; i < n; i++) {
        if (i) sb_puts(b, ", ");
        if (depth > 0) eg_print_term(b, g, ch[i], depth - 1);
        else sb_puts(b, "…");
    }
    sb_putc(b, ')');
}

eg_stats eg_get_stats(const egraph *g) {
    eg_stats s = g->st;
    s.nodes = g->nnodes;
    s.live_nodes = 0;
    s.classes = 0;
    for (uint32_t i = 0; i < g->nnodes; i++) {
        s.live_nodes += !g->dead[i];
        s.classes += g->uf[i] == i;
    }
    s.bytes = g->capwords * 4 + g->capnodes * (7 * 4 + 2) + g->cappool * 8 + g->tcap * 8 +
              g->attrs.mem.total + g->types.mem.total;
    return s;
}

int eg_check(egraph *g, strbuf *why) {
    int bad = 0;
    size_t live_in_table = 0;
    for (size_t i = 0; i < g->tcap; i++) live_in_table += g->table[i] < TOMB;
    for (uint32_t id = 0; id < g->nnodes; id++) {
        if (g->dead[id]) continue;
        uint32_t *w = g->words + g->off[id];
        uint32_t n = node_n(w);
        const uint32_t *kids = node_kids(w);
        for (uint32_t i = 0; i < n; i++)
            if (eg_find(g, kids[i]) != kids[i]) {
                if (why) sb_printf(why, "node %u has a non-canonical child\n", id);
                bad++;
            }
        bool found;
        uint32_t tag;
        size_t slot = table_find(g, w, &found, &tag);
        if (!found || g->table[slot] != id) {
            if (why) sb_printf(why, "node %u is not in the hash-cons (or duplicates another)\n", id);
            bad++;
        }
        if (g->type[eg_find(g, id)] != w[2]) {
            if (why) sb_printf(why, "node %u's type differs from its class's\n", id);
            bad++;
        }
    }
    size_t live = 0;
    for (uint32_t id = 0; id < g->nnodes; id++) live += !g->dead[id];
    if (live != live_in_table) {
        if (why) sb_printf(why, "hash-cons holds %zu nodes, %zu are live\n", live_in_table, live);
        bad++;
    }
    return bad;
}
