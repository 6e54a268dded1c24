#include "segrun.h"

#include <stdlib.h>
#include <string.h>

bool sr_scope_top(const hlo_instr *in, const char **s, size_t *n) {
    if (!in->nscope) return false;
    *s = in->scope;
    *n = in->nscope;
    return true;
}

/* Walks comp's runs: calls visit(i0, i1, scope) for each; returns the count. */
typedef void (*run_fn)(void *ctx, uint32_t i0, uint32_t i1, const char *s, size_t n);

static uint32_t each_run(const hlo_comp *comp, run_fn visit, void *ctx) {
    uint32_t count = 0, i0 = SR_NONE;
    const char *cur = NULL;
    size_t ncur = 0;
    for (uint32_t i = 0; i <= comp->ninstrs; i++) {
        const hlo_instr *in = i < comp->ninstrs ? &comp->instrs[i] : NULL;
        const char *s = NULL;
        size_t n = 0;
        bool scoped = in && in->op != OP_PARAMETER && sr_scope_top(in, &s, &n);
        bool ends = !in || (scoped && (i0 == SR_NONE || (s != cur && (n != ncur || memcmp(s, cur, n) != 0))));
        if (ends && i0 != SR_NONE) {
            if (visit) visit(ctx, i0, i, cur, ncur);
            count++;
            i0 = SR_NONE;
        }
        if (scoped && i0 == SR_NONE) {
            i0 = i;
            cur = s;
            ncur = n;
        }
    }
    return count;
}

uint32_t sr_count(const hlo_comp *comp) { return each_run(comp, NULL, NULL); }

typedef struct split_ctx {
    const hlo_module *m;
    uint64_t *comp_fps;           /* per computation of m, 0: not yet */
    const hlo_comp *comp;
    arena *a;
    sr_runs *out;                 /* its runs array sized beforehand (sr_count) */
    uint32_t *slot_of;            /* per instruction: slot in the current run + 1 */
    uint32_t *last_use;           /* per instruction: last reader's index */
} split_ctx;

static uint64_t comp_fp(const hlo_module *m, uint32_t ci, uint64_t *cache);

/* The fingerprint words of one instruction: what sr_equal compares, with
 * attributes reduced to their keys and small integer payloads, called
 * computations to their fingerprints. */
static uint64_t instr_fp(uint64_t h, const hlo_module *m, const hlo_instr *in, uint64_t *cache) {
    h = hash_mix(h, in->op);
    h = hash_mix(h, (uint64_t)in->shape.dtype << 8 | in->shape.rank);
    for (uint32_t d = 0; d < in->shape.rank; d++) h = hash_mix(h, (uint64_t)in->shape.dims[d]);
    h = hash_mix(h, in->nattrs);
    for (uint32_t k = 0; k < in->nattrs; k++) {
        const hlo_attr *at = &in->attrs[k];
        h = hash_mix(h, (uint64_t)at->key << 16 | at->kind);
        if (at->key == A_CHANNEL_ID) h = hash_mix(h, at->v.i != 0);
        else if (at->kind == K_INT || at->kind == K_BOOL) h = hash_mix(h, (uint64_t)at->v.i);
        else if (at->kind == K_INTS)
            for (uint32_t j = 0; j < at->n; j++) h = hash_mix(h, (uint64_t)at->v.ints[j]);
        else if (at->kind == K_COMP || at->kind == K_COMPS)
            for (uint32_t j = 0; j < at->n; j++) h = hash_mix(h, comp_fp(m, (uint32_t)at->v.ints[j], cache));
    }
    return h;
}

/* A called computation's fingerprint: its reducer kind and type when it is a
 * recognised reducer (XLA gives every reduce its own copy), else its
 * instructions with their operand indices. Cached; call graphs are acyclic
 * (graph_check). */
static uint64_t comp_fp(const hlo_module *m, uint32_t ci, uint64_t *cache) {
    if (ci >= m->ncomps) return 0;
    if (cache[ci]) return cache[ci];
    const hlo_comp *c = &m->comps[ci];
    uint64_t h = 0xca11;
    if (c->reducer) {
        h = hash_mix(hash_mix(h, c->reducer), (uint64_t)c->instrs[c->root].shape.dtype);
    } else {
        for (uint32_t i = 0; i < c->ninstrs; i++) {
            h = instr_fp(h, m, &c->instrs[i], cache);
            for (uint32_t k = 0; k < c->instrs[i].noperands; k++) h = hash_mix(h, c->instrs[i].operands[k]);
        }
        h = hash_mix(h, c->root);
    }
    return cache[ci] = h | 1;
}

static void add_run(void *ctx, uint32_t i0, uint32_t i1, const char *s, size_t n) {
    split_ctx *x = ctx;
    sr_runs *o = x->out;
    sr_run *r = &o->runs[o->n];
    o->start[i0] = o->n++;
    r->i0 = i0;
    r->i1 = i1;
    r->scope = s;
    r->nscope = (uint32_t)n;
    r->exported = arena_alloc(x->a, i1 - i0);
    uint32_t nslots = 0, cap = 8;
    uint32_t *slots = xmalloc(cap * sizeof *slots);
    uint64_t h = 0x5e9 ^ (uint64_t)(i1 - i0);
    for (uint32_t i = i0; i < i1; i++) {
        const hlo_instr *in = &x->comp->instrs[i];
        h = in->op == OP_PARAMETER ? hash_mix(h, OP_PARAMETER) : instr_fp(h, x->m, in, x->comp_fps);
        for (uint32_t k = 0; k < in->noperands; k++) {
            uint32_t op = in->operands[k];
            if (op >= i0 && op < i && x->comp->instrs[op].op != OP_PARAMETER) {
                h = hash_mix(h, (uint64_t)(i - op));
                continue;
            }
            if (!x->slot_of[op]) {
                if (nslots == cap) slots = xrealloc(slots, (cap *= 2) * sizeof *slots);
                slots[nslots++] = op;
                x->slot_of[op] = nslots;
            }
            h = hash_mix(h, (uint64_t)x->slot_of[op] << 32);
        }
        r->exported[i - i0] = x->last_use[i] >= i1 || i == x->comp->root;
        h = hash_mix(h, r->exported[i - i0]);
    }
    for (uint32_t k = 0; k < nslots; k++) x->slot_of[slots[k]] = 0;
    r->slots = arena_alloc(x->a, (nslots + 1) * sizeof *slots);
    if (nslots) memcpy(r->slots, slots, nslots * sizeof *slots);
    r->nslots = nslots;
    r->fp = h;
    free(slots);
}

void sr_split(const hlo_module *m, const hlo_comp *comp, arena *a, sr_runs *out) {
    memset(out, 0, sizeof *out);
    out->start = arena_alloc(a, (comp->ninstrs + 1) * sizeof *out->start);
    for (uint32_t i = 0; i < comp->ninstrs; i++) out->start[i] = SR_NONE;
    split_ctx x = {m, xcalloc(m->ncomps + 1, sizeof(uint64_t)), comp, a, out,
                   xcalloc(comp->ninstrs + 1, sizeof(uint32_t)), xcalloc(comp->ninstrs + 1, sizeof(uint32_t))};
    for (uint32_t i = 0; i < comp->ninstrs; i++)
        for (uint32_t k = 0; k < comp->instrs[i].noperands; k++) {
            uint32_t op = comp->instrs[i].operands[k];
            if (op < comp->ninstrs && x.last_use[op] < i) x.last_use[op] = i;
        }
    /* Counted first: an array grown in the arena would leave every smaller
     * one behind (at 200k runs, more than the runs themselves). */
    out->runs = arena_alloc(a, (sr_count(comp) + 1) * sizeof *out->runs);
    each_run(comp, add_run, &x);
    free(x.comp_fps);
    free(x.slot_of);
    free(x.last_use);
}

static bool has_elided(const hlo_instr *in) {
    for (uint32_t k = 0; k < in->nattrs; k++)
        if (in->attrs[k].kind == K_LITERAL && (in->attrs[k].v.lit->elided || in->attrs[k].v.lit->raw)) return true;
    return false;
}

static bool instr_equal(const hlo_module *m, const hlo_instr *x, const hlo_instr *y);

/* Called computations: the same one, the same reducer on the same type, or
 * equal instruction by instruction. */
static bool comp_equal(const hlo_module *m, int64_t a, int64_t b) {
    if (a == b) return true;
    if (a < 0 || b < 0 || a >= m->ncomps || b >= m->ncomps) return false;
    const hlo_comp *ca = &m->comps[a], *cb = &m->comps[b];
    if (ca->reducer || cb->reducer)
        return ca->reducer == cb->reducer && ca->instrs[ca->root].shape.dtype == cb->instrs[cb->root].shape.dtype;
    if (ca->ninstrs != cb->ninstrs || ca->root != cb->root) return false;
    for (uint32_t i = 0; i < ca->ninstrs; i++) {
        const hlo_instr *x = &ca->instrs[i], *y = &cb->instrs[i];
        if (!instr_equal(m, x, y) || (x->noperands && memcmp(x->operands, y->operands, x->noperands * sizeof *x->operands)))
            return false;
    }
    return true;
}

/* Opcode, shape, operand count and attributes (no elided constants). */
static bool instr_equal(const hlo_module *m, const hlo_instr *x, const hlo_instr *y) {
    if (x->op != y->op || x->noperands != y->noperands || x->nattrs != y->nattrs || !shape_equal(&x->shape, &y->shape) ||
        has_elided(x) || has_elided(y))
        return false;
    for (uint32_t k = 0; k < x->nattrs; k++) {
        const hlo_attr *p = &x->attrs[k], *q = &y->attrs[k];
        if (p->key == A_CHANNEL_ID && q->key == A_CHANNEL_ID) {
            /* A channel id names its collective; only whether there is one
             * (cross-partition or cross-replica) is semantics. */
            if ((p->v.i != 0) != (q->v.i != 0)) return false;
        } else if ((p->kind == K_COMP || p->kind == K_COMPS) && p->key == q->key && p->kind == q->kind && p->n == q->n) {
            for (uint32_t j = 0; j < p->n; j++)
                if (!comp_equal(m, p->v.ints[j], q->v.ints[j])) return false;
        } else if (!hlo_attr_equal(p, q)) {
            return false;
        }
    }
    return true;
}

bool sr_equal(const hlo_module *m, const hlo_comp *ca, const sr_run *a, const hlo_comp *cb, const sr_run *b) {
    if (a->fp != b->fp || a->i1 - a->i0 != b->i1 - b->i0 || a->nslots != b->nslots) return false;
    /* Slots are numbered by first use, so equal operand lists mean the same slot
     * sequence; slot k of a and slot k of b are compared by position below. */
    uint32_t sa = 0, sb = 0;
    for (uint32_t p = 0; p < a->i1 - a->i0; p++) {
        const hlo_instr *x = &ca->instrs[a->i0 + p], *y = &cb->instrs[b->i0 + p];
        if (a->exported[p] != b->exported[p]) return false;
        if (x->op == OP_PARAMETER || y->op == OP_PARAMETER) {
            /* a slot where it is read; its number is a name */
            if (x->op != y->op || !shape_equal(&x->shape, &y->shape)) return false;
            continue;
        }
        if (!instr_equal(m, x, y)) return false;
        for (uint32_t k = 0; k < x->noperands; k++) {
            uint32_t ox = x->operands[k], oy = y->operands[k];
            bool inx = ox >= a->i0 && ox < a->i0 + p && ca->instrs[ox].op != OP_PARAMETER;
            bool iny = oy >= b->i0 && oy < b->i0 + p && cb->instrs[oy].op != OP_PARAMETER;
            if (inx != iny) return false;
            if (inx) {
                if (ox - a->i0 != oy - b->i0) return false;
                continue;
            }
            /* The k-th external read: the same slot number on both sides. */
            uint32_t kx = SR_NONE, ky = SR_NONE;
            for (uint32_t s = 0; s < sa && kx == SR_NONE; s++) if (a->slots[s] == ox) kx = s;
            for (uint32_t s = 0; s < sb && ky == SR_NONE; s++) if (b->slots[s] == oy) ky = s;
            if (kx == SR_NONE) kx = sa++;
            if (ky == SR_NONE) ky = sb++;
            if (kx != ky || a->slots[kx] != ox || b->slots[ky] != oy) return false;
        }
    }
    return true;
}
