/* lift_term — the e-nodes both sides build (lift.c walks them).
 * Owns how an instruction becomes an e-node: its attribute blob (semantic
 * attributes only, called computations by structural digest), its type, and
 * the canonical forms both sides share (reshape chains collapsed, identity
 * broadcasts and unit reduces dropped, a reduce over a reshape that only
 * regroups the reduced dims taken over the reshape's operand, a+b and b+a
 * one term; slices of slices and of concatenations, and neighbouring
 * slices of one term in a concatenation, folded as built) — lf_node,
 * lf_mk_reshape, lf_mk_slice, lf_mk_concat, lf_fresh_var. Also constant folding: the known values of
 * constant-only classes (lf_kval, lf_kval_set), kept across unions
 * (lf_kvals_after_unions), and the constant term of known values
 * (lf_const_term). */
#include "lift.h"
#include "lift_int.h"

#include "eattr.h"
#include "interp.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- e-node construction shared by both sides ---- */


static bool semantic_key(int key) {
    switch (key) {
    case A_SHARDING: case A_FRONTEND_ATTRIBUTES: case A_BACKEND_CONFIG: case A_CHANNEL_ID:
    case A_REPLICA_GROUPS: case A_USE_GLOBAL_DEVICE_IDS: case A_OPERAND_PRECISION: case A_ALGORITHM:
    case A_CONTROL_PREDECESSORS: case A_API_VERSION: case A_CUSTOM_CALL_HAS_SIDE_EFFECT:
    case A_INDICES_ARE_SORTED: case A_UNIQUE_INDICES: case A_CONSTRAIN_LAYOUT: case A_PARAMETER_NUMBER:
        return false;
    default:
        return true;
    }
}

static uint64_t str_hash(const char *s) { return hash_bytes(s, strlen(s)); }

uint64_t lf_literal_digest(const hlo_literal *l) {
    if (l->raw) return str_hash(l->raw);
    if (l->elided) return 0x5eed;  /* unknown payload: equal only to itself */
    uint64_t h = hash_mix((uint64_t)l->dtype, (uint64_t)l->count);
    if (l->f) {
        for (int64_t k = 0; k < l->count; k++) {
            double x = l->f[k] == 0 ? 0.0 * (signbit(l->f[k]) ? -1 : 1) : l->f[k];
            uint64_t bits;
            memcpy(&bits, &x, 8);
            h = hash_mix(h, bits);
        }
    } else {
        for (int64_t k = 0; k < l->count; k++) h = hash_mix(h, (uint64_t)l->i[k]);
    }
    return h;
}

/* Attribute blob: (key, n, values...) per semantic attribute, in key order;
 * strings and computations are digested. */
uint32_t lf_encode_attrs(lift_ctx *c, const hlo_module *m, const hlo_instr *in) {
    int64_t buf[256];
    uint32_t n = 0;
    for (uint32_t i = 0; i < in->nattrs; i++) {
        const hlo_attr *a = &in->attrs[i];
        /* A custom call's backend config is its arguments (a lapack call's
         * uplo, side, transpose). */
        if (!semantic_key(a->key) && !(in->op == OP_CUSTOM_CALL && a->key == A_BACKEND_CONFIG)) continue;
        uint32_t need;
        switch (a->kind) {
        case K_INTS: case K_COMPS: need = a->n; break;
        case K_SLICES: case K_PADDING: need = 3 * a->n; break;
        case K_IDENTS: need = a->n; break;
        default: need = 1; break;
        }
        if (n + 2 + need > ARRAY_LEN(buf)) {
            /* Too long to spell out: one digest word stands for the rest. */
            buf[n++] = 9999;
            buf[n++] = 1;
            buf[n++] = (int64_t)hash_bytes(in, sizeof *in);
            break;
        }
        if (a->key == A_DIRECTION && (a->kind == K_IDENT || a->kind == K_STRING)) {
            /* eattr.h's convention, which rules match: 0..5, EQ omitted */
            int d = ea_direction_from_name(a->v.str, strlen(a->v.str));
            if (d == 0) continue;
            if (d > 0) {
                buf[n++] = A_DIRECTION, buf[n++] = 1, buf[n++] = d;
                continue;
            }
        }
        if (a->key == A_CUSTOM_CALL_TARGET && a->kind == K_STRING) {
            /* spelled out as eattr.h says, so rules over a target match */
            size_t len = strlen(a->v.str);
            uint32_t w = ea_str_words(a->v.str, len, NULL, 0);
            if (len && n + 2 + w <= ARRAY_LEN(buf)) {
                buf[n++] = A_CUSTOM_CALL_TARGET, buf[n++] = w;
                ea_str_words(a->v.str, len, buf + n, w);
                n += w;
                continue;
            }
        }
        buf[n++] = a->key == A_RAW ? (int64_t)(str_hash(a->raw_key) | 1ull << 62) : a->key;
        buf[n++] = need;
        switch (a->kind) {
        case K_INT: case K_BOOL: buf[n++] = a->v.i; break;
        case K_INTS: memcpy(buf + n, a->v.ints, need * sizeof *buf); n += need; break;
        case K_SLICES: case K_PADDING: memcpy(buf + n, a->v.ints, need * sizeof *buf); n += need; break;
        case K_IDENT: case K_STRING: case K_BACKEND: case K_RAW: buf[n++] = (int64_t)str_hash(a->v.str); break;
        case K_IDENTS:
            for (uint32_t k = 0; k < a->n; k++) buf[n++] = (int64_t)str_hash(a->v.strs[k]);
            break;
        case K_COMP: buf[n++] = (int64_t)lf_comp_digest(c, m, (uint32_t)a->v.ints[0]); break;
        case K_COMPS:
            for (uint32_t k = 0; k < a->n; k++) buf[n++] = (int64_t)lf_comp_digest(c, m, (uint32_t)a->v.ints[k]);
            break;
        case K_LITERAL: buf[n++] = (int64_t)lf_literal_digest(a->v.lit); break;
        default: buf[n++] = 0; break;
        }
    }
    return eg_attr(c->g, buf, n);
}

int lf_node_direction(lift_ctx *c, eid node) {
    uint32_t n;
    const int64_t *d = ea_get(c->g, eg_node_attr(c->g, node), A_DIRECTION, &n);
    if (!d) return 0;
    return n == 1 && d[0] >= 0 && d[0] < EA_DIR_COUNT ? (int)d[0] : -1;
}

uint64_t lf_reducer_digest(int red) { return hash_mix(0xc0de, (uint64_t)red); }

/* A structural digest of a called computation (reducers, comparators): opcodes,
 * shapes, operand positions and attributes; names do not count. */
uint64_t lf_comp_digest(lift_ctx *c, const hlo_module *m, uint32_t ci) {
    int side = m == c->base ? 0 : 1;
    if (ci >= m->ncomps) return 0;
    if (c->digests[side][ci]) return c->digests[side][ci];
    const hlo_comp *comp = &m->comps[ci];
    uint64_t h = 0xc0de;
    if (comp->reducer) {
        h = lf_reducer_digest(comp->reducer);
    } else {
        for (uint32_t i = 0; i < comp->ninstrs; i++) {
            const hlo_instr *in = &comp->instrs[i];
            h = hash_mix(h, in->op);
            h = hash_mix(h, in->shape.dtype);
            for (uint32_t d = 0; d < in->shape.rank; d++) h = hash_mix(h, (uint64_t)in->shape.dims[d]);
            for (uint32_t o = 0; o < in->noperands; o++) h = hash_mix(h, in->operands[o]);
            h = hash_mix(h, lf_encode_attrs(c, m, in));
            if (in->op == OP_PARAMETER) h = hash_mix(h, (uint64_t)instr_int(in, A_PARAMETER_NUMBER, 0));
        }
        h = hash_mix(h, comp->root);
    }
    c->digests[side][ci] = h | 1;
    return h | 1;
}

uint32_t lf_type_of(lift_ctx *c, int dt, const int64_t *dims, uint32_t rank) {
    return eg_type(c->g, dt, dims, rank);
}

/* The attribute blob holding one list attribute (absent when empty: the
 * default), as eattr.h spells it; n ≤ VIEW_MAX_RANK (lists of dims). */
uint32_t lf_list_attr(lift_ctx *c, int key, const int64_t *v, uint32_t n) {
    int64_t words[2 + VIEW_MAX_RANK];
    if (!n) return 0; /* the empty blob */
    if (n > VIEW_MAX_RANK) xfatal("lift: a type of rank %u, views hold at most %d", n, VIEW_MAX_RANK); /* callers pass dims of views */
    words[0] = key, words[1] = n;
    memcpy(words + 2, v, n * sizeof *v);
    return eg_attr(c->g, words, 2 + n);
}

/* ---- constant folding: values of constant-only terms (lift.h) ---- */

interp_val *lf_kval(lift_ctx *c, eid cls) {
    cls = eg_find(c->g, cls);
    return cls < c->capkvals ? c->kvals[cls] : NULL;
}

/* The values of class cls read off its nodes where none are recorded: a
 * broadcast, reshape, slice, transpose or convert of a class with values, a
 * few levels down (a table gathered at positions, or back from every
 * device's part, its classes built without folding); NULL when none
 * (budget: evaluations left). */
static interp_val *class_values(lift_ctx *c, eid cls, int depth, int *budget) {
    interp_val *k = lf_kval(c, cls);
    if (k) return interp_val_ref(k);
    uint32_t rank;
    const int64_t *dims = eg_type_dims(c->g, eg_class_type(c->g, cls), &rank);
    if (depth > 8 || *budget <= 0 || !lf_fold_size_ok(dims, rank)) return NULL;
    for (eid n = eg_class_first(c->g, eg_find(c->g, cls)); n != EID_NONE && *budget > 0; n = eg_class_next(c->g, n)) {
        int op = eg_node_op(c->g, n);
        uint32_t m, na = 0;
        const eid *ch = eg_node_children(c->g, n, &m);
        if (m != 1 || (op != OP_BROADCAST && op != OP_RESHAPE && op != OP_SLICE && op != OP_TRANSPOSE && op != OP_CONVERT))
            continue;
        (*budget)--;
        interp_val *cv = class_values(c, ch[0], depth + 1, budget);
        if (!cv) continue;
        int key = op == OP_SLICE ? A_SLICE : A_DIMENSIONS;
        const int64_t *w = op == OP_RESHAPE || op == OP_CONVERT ? NULL : ea_get(c->g, eg_node_attr(c->g, n), key, &na);
        hlo_attr at = {.key = (uint16_t)key, .kind = op == OP_SLICE ? K_SLICES : K_INTS,
                       .n = op == OP_SLICE ? na / 3 : na, .v.ints = (int64_t *)w};
        hlo_instr g = {.name = "fold", .opname = "fold", .op = (uint16_t)op, .noperands = 1, .nattrs = w ? 1 : 0,
                       .attrs = w ? &at : NULL};
        g.shape.dtype = (uint8_t)eg_type_dtype(c->g, eg_class_type(c->g, cls));
        g.shape.rank = rank;
        g.shape.dims = (int64_t *)dims;
        interp_val *r = interp_eval_instr(c->cur, &g, &cv, NULL);
        interp_val_free(cv);
        if (r) return r;
    }
    return NULL;
}

interp_val *lf_class_values(lift_ctx *c, eid cls) {
    int budget = 64;
    return class_values(c, cls, 0, &budget);
}

/* Records v (consumed) as the values of class cls unless they are known. */
void lf_kval_set(lift_ctx *c, eid cls, interp_val *v) {
    cls = eg_find(c->g, cls);
    if (cls >= c->capkvals) {
        size_t cap = c->capkvals ? c->capkvals : 1024;
        while (cap <= cls) cap *= 2;
        c->kvals = xrealloc(c->kvals, cap * sizeof *c->kvals);
        memset(c->kvals + c->capkvals, 0, (cap - c->capkvals) * sizeof *c->kvals);
        c->capkvals = cap;
    }
    if (c->kvals[cls]) interp_val_free(v);
    else c->kvals[cls] = v;
}

/* After unions outside lifting (saturation): values recorded under a class
 * that is no longer canonical move to its canonical class. */
void lf_kvals_after_unions(lift_ctx *c) {
    for (size_t k = 0; k < c->capkvals; k++) {
        if (!c->kvals[k]) continue;
        eid r = eg_find(c->g, (eid)k);
        if (r == k) continue;
        interp_val *v = c->kvals[k];
        c->kvals[k] = NULL;
        lf_kval_set(c, r, v);
    }
}

/* The constant term holding v's values: the same e-node as a constant
 * instruction with those values (literal digest). Consumes v. */
eid lf_const_term(lift_ctx *c, interp_val *v, uint8_t origin) {
    hlo_literal lit = {.dtype = v->dtype, .count = v->n, .f = v->f, .i = v->i};
    uint64_t h = lf_literal_digest(&lit);
    /* complex values: the imaginary parts too (two constants that differ
     * only there are different constants) */
    for (int64_t k = 0; v->im && k < v->n; k++) {
        uint64_t bits;
        double x = v->im[k] == 0 ? 0.0 : v->im[k];
        memcpy(&bits, &x, 8);
        h = hash_mix(h, bits);
    }
    int64_t words[3] = {A_LITERAL, 1, (int64_t)h};
    eid cls = eg_add(c->g, OP_CONSTANT, eg_attr(c->g, words, 3), lf_type_of(c, v->dtype, v->dims, v->rank), NULL, 0, origin);
    /* One value everywhere is also the broadcast of that scalar, as a program
     * writes it (and lf_konst_at builds it): both nodes in one class, so a
     * constant tabulated for a view meets the other side's broadcast. */
    bool splat = v->rank > 0 && v->n > 1;
    for (int64_t k = 1; k < v->n && splat; k++)
        splat = (v->f ? memcmp(&v->f[k], &v->f[0], sizeof *v->f) == 0 : v->i[k] == v->i[0]) &&
                (!v->im || memcmp(&v->im[k], &v->im[0], sizeof *v->im) == 0);
    interp_val *one = splat ? interp_val_new(v->dtype, 0, NULL) : NULL;
    if (one) {
        if (v->f) one->f[0] = v->f[0];
        else one->i[0] = v->i[0];
        if (v->im && one->im) one->im[0] = v->im[0];
    }
    lf_kval_set(c, cls, v);
    if (!one) return cls;
    eid sc = lf_const_term(c, one, origin);
    eid bc = eg_add(c->g, OP_BROADCAST, lf_list_attr(c, A_DIMENSIONS, NULL, 0), eg_class_type(c->g, cls), &sc, 1, origin);
    cls = eg_find(c->g, cls), bc = eg_find(c->g, bc);
    if (cls == bc) return cls;
    interp_val *kl = c->kvals[cls], *kb = bc < c->capkvals ? c->kvals[bc] : NULL;
    c->kvals[cls] = NULL;
    if (bc < c->capkvals) c->kvals[bc] = NULL;
    eg_union(c->g, cls, bc, NULL);
    bool merged = eg_rebuild(c->g) > 0;  /* congruent parents merged too */
    cls = eg_find(c->g, cls);
    lf_kval_set(c, cls, kl);
    if (kb) lf_kval_set(c, cls, kb);
    if (merged) lf_kvals_after_unions(c);
    return eg_find(c->g, cls);
}

/* Whether a term of this many elements (global dims) is folded. */
bool lf_fold_size_ok(const int64_t *dims, uint32_t rank) {
    int64_t n = 1;
    for (uint32_t d = 0; d < rank; d++)
        if (!mul_ok(n, dims[d], &n) || n > LIFT_FOLD_MAX) return false;
    return rank <= VIEW_MAX_RANK;
}

/* The values of op `in` (attributes as in the term, result dims `dims`) over
 * children with known values; NULL when some are unknown or the interpreter
 * does not evaluate the op on its own. */
static interp_val *fold_values(lift_ctx *c, const hlo_module *m, const hlo_instr *in, const eid *ch, uint32_t n,
                               const int64_t *dims) {
    interp_val *ops[8];
    /* (children for every operand: a caller may build the op over fewer,
     * a concatenation of some of its pieces) */
    if (n > ARRAY_LEN(ops) || n != in->noperands || in->op == OP_IOTA || in->shape.dtype == DT_TUPLE ||
        !lf_fold_size_ok(dims, in->shape.rank))
        return NULL;
    for (uint32_t k = 0; k < n; k++)
        if (!(ops[k] = lf_kval(c, ch[k]))) return NULL;
    hlo_instr g = *in;
    g.shape.dims = (int64_t *)dims;
    g.shape.dynamic = NULL;
    return interp_eval_instr(m, &g, ops, NULL);
}

/* Broadcast values of x (dims bd of the result) into result dims `dims`. */
interp_val *lf_broadcast_values(const interp_val *x, const int64_t *bd, uint32_t nb, const int64_t *dims, uint32_t rank) {
    if (!lf_fold_size_ok(dims, rank) || nb != x->rank) return NULL;
    interp_val *r = interp_val_new(x->dtype, rank, dims);
    if (!r) return NULL;
    int64_t idx[VIEW_MAX_RANK] = {0};
    for (int64_t k = 0; k < r->n; k++) {
        int64_t src = 0;
        for (uint32_t j = 0; j < nb; j++) src = src * x->dims[j] + (x->dims[j] == 1 ? 0 : idx[bd[j]]);
        if (r->f) r->f[k] = x->f[src];
        else r->i[k] = x->i[src];
        for (int d = (int)rank - 1; d >= 0 && ++idx[d] == dims[d]; d--) idx[d] = 0;
    }
    return r;
}

/* The slice triples of slice node k (rank dims), or false. */
static bool node_slice(const lift_ctx *c, eid k, uint32_t rank, int64_t *sl) {
    uint32_t nw;
    const int64_t *aw = eg_attr_words(c->g, eg_node_attr(c->g, k), &nw);
    if (eg_node_op(c->g, k) != OP_SLICE || nw != 2 + 3 * rank || aw[0] != A_SLICE || aw[1] != 3 * (int64_t)rank) return false;
    memcpy(sl, aw + 2, 3 * rank * sizeof *sl);
    return true;
}

static bool unit_strides(const int64_t *sl, uint32_t rank) {
    for (uint32_t k = 0; k < rank; k++)
        if (sl[3 * k + 2] != 1) return false;
    return true;
}

/* The concatenation dim of concatenate node k, or -1. */
int lf_node_concat_dim(const lift_ctx *c, eid k) {
    uint32_t nw;
    const int64_t *aw = eg_attr_words(c->g, eg_node_attr(c->g, k), &nw);
    return eg_node_op(c->g, k) == OP_CONCATENATE && nw == 3 && aw[0] == A_DIMENSIONS && aw[1] == 1 ? (int)aw[2] : -1;
}

/* Slicing through a class may slice the same class again where it also
 * holds a concatenation of its own pieces, through the slices and
 * concatenations the walk builds: the calls in progress are bounded (then
 * the plain slice). */
#define SLICE_NESTING_MAX 16

static eid slice_through_at(lift_ctx *c, eid x, const int64_t *sl, uint32_t rank, int depth);

static eid slice_through(lift_ctx *c, eid x, const int64_t *sl, uint32_t rank, int depth) {
    if (c->slice_depth >= SLICE_NESTING_MAX) return EID_NONE;
    c->slice_depth++;
    eid r = slice_through_at(c, x, sl, rank, depth);
    c->slice_depth--;
    return r;
}

/* A unit-stride slice of x (rank dims xd) taken from what x is built of,
 * exactly: of the operand of a slice x is (the two composed), or of the
 * one operand of a concatenation x is that holds the whole range (shifted).
 * So a stack written back row by row (a scan's residuals) folds back to
 * what the rows were sliced from as it is built. EID_NONE: neither. */
static eid slice_through_at(lift_ctx *c, eid x, const int64_t *sl, uint32_t rank, int depth) {
    if (depth > 8 || !unit_strides(sl, rank)) return EID_NONE;
    for (eid k = eg_class_first(c->g, eg_find(c->g, x)); k != EID_NONE; k = eg_class_next(c->g, k)) {
        uint32_t m;
        const eid *kids = eg_node_children(c->g, k, &m);
        int64_t in[3 * VIEW_MAX_RANK];
        if (m == 1 && node_slice(c, k, rank, in) && unit_strides(in, rank)) {
            for (uint32_t d = 0; d < rank; d++) in[3 * d + 1] = in[3 * d] + sl[3 * d + 1], in[3 * d] += sl[3 * d];
            return lf_mk_slice(c, kids[0], in);
        }
        int cd = lf_node_concat_dim(c, k);
        if (cd < 0 || (uint32_t)cd >= rank) continue;
        /* the operands the range overlaps, each sliced: one is the slice of
         * it, several the concatenation of their slices (a shift whose last
         * rows come from another term: a bootstrap value, a fill token) */
        int64_t off = 0;
        eid parts[8];
        uint32_t np = 0;
        for (uint32_t j = 0; j < m && m <= 8; j++) {
            uint32_t r2;
            const int64_t *kd = eg_type_dims(c->g, eg_class_type(c->g, kids[j]), &r2);
            int64_t len = r2 == rank ? kd[cd] : -1;
            if (len < 0) break;
            int64_t lo = sl[3 * cd] > off ? sl[3 * cd] : off, hi = sl[3 * cd + 1] < off + len ? sl[3 * cd + 1] : off + len;
            if (lo < hi) {
                int64_t sh[3 * VIEW_MAX_RANK];
                memcpy(sh, sl, 3 * rank * sizeof *sh);
                sh[3 * cd] = lo - off, sh[3 * cd + 1] = hi - off;
                if (sl[3 * cd] >= off && sl[3 * cd + 1] <= off + len) {
                    eid kj = kids[j], r = slice_through(c, kj, sh, rank, depth + 1); /* (kids move as nodes are added) */
                    return r != EID_NONE ? r : lf_mk_slice(c, kj, sh);
                }
                parts[np++] = lf_mk_slice(c, kids[j], sh);
                kids = eg_node_children(c->g, k, &m); /* (the table may have grown) */
            }
            off += len;
        }
        if (np > 1 && off >= sl[3 * cd + 1]) return lf_mk_concat(c, parts, np, (uint32_t)cd);
    }
    return EID_NONE;
}

/* slice r = slice sl of x where x is a zero pad along one dim d (no other
 * padding, none interior; sl whole elsewhere, unit strides): also the
 * concatenation of the zeros it keeps and the operand's rows, as a shift
 * is written with jnp.concatenate and zeros_like (joined to r, so that a
 * loop body's halo meets the baseline's shift before saturation). */
static void pad_slice_forms(lift_ctx *c, eid x, const int64_t *sl, uint32_t rank, eid r) {
    eid pn = lf_class_node(c, x, OP_PAD, 2, NULL);
    if (pn == EID_NONE || rank > VIEW_MAX_RANK || !unit_strides(sl, rank)) return;
    uint32_t nc, nw, yr;
    const eid *pk = eg_node_children(c->g, pn, &nc);
    eid y = pk[0];
    if (!lf_class_is_zero(c, pk[1])) return;
    const int64_t *yd = eg_type_dims(c->g, eg_class_type(c->g, y), &yr);
    const int64_t *pw = eg_attr_words(c->g, eg_node_attr(c->g, pn), &nw);
    if (yr != rank || nw != 2 + 3 * rank || pw[0] != A_PADDING) return;
    int d = -1;
    for (uint32_t k = 0; k < rank; k++) {
        const int64_t *p = pw + 2 + 3 * k;
        if (p[2] != 0 || p[0] < 0 || p[1] < 0) return;
        if (p[0] || p[1]) {
            if (d >= 0) return;
            d = (int)k;
        } else if (sl[3 * k] != 0 || sl[3 * k + 1] != yd[k]) {
            return;
        }
    }
    if (d < 0) return;
    int64_t lo = pw[2 + 3 * d], n = yd[d], s = sl[3 * d], e = sl[3 * d + 1], dims[VIEW_MAX_RANK], ysl[3 * VIEW_MAX_RANK];
    int dt = eg_type_dtype(c->g, eg_class_type(c->g, y));
    eid ch[3];
    uint32_t m = 0;
    memcpy(dims, yd, rank * sizeof *dims);
    if (s < lo) {
        dims[d] = (e < lo ? e : lo) - s;
        ch[m++] = lf_splat(c, lf_type_of(c, dt, dims, rank), 0);
    }
    int64_t a = (s > lo ? s : lo) - lo, b = (e < lo + n ? e : lo + n) - lo;
    if (b > a) {
        for (uint32_t k = 0; k < rank; k++) ysl[3 * k] = 0, ysl[3 * k + 1] = yd[k], ysl[3 * k + 2] = 1;
        ysl[3 * d] = a, ysl[3 * d + 1] = b;
        ch[m++] = lf_mk_slice(c, y, ysl);
    }
    if (e > lo + n) {
        dims[d] = e - (s > lo + n ? s : lo + n);
        ch[m++] = lf_splat(c, lf_type_of(c, dt, dims, rank), 0);
    }
    if (m) eg_union(c->g, r, lf_mk_concat(c, ch, m, (uint32_t)d), NULL);
}

eid lf_mk_slice(lift_ctx *c, eid x, const int64_t *sl) {
    uint32_t rank;
    const int64_t *xd = eg_type_dims(c->g, eg_class_type(c->g, x), &rank);
    if (rank <= VIEW_MAX_RANK) {
        bool whole = true;
        for (uint32_t k = 0; k < rank; k++) whole &= sl[3 * k] == 0 && sl[3 * k + 1] == xd[k] && sl[3 * k + 2] == 1;
        eid r = whole ? EID_NONE : slice_through(c, x, sl, rank, 0);
        if (r != EID_NONE) return r;
    }
    int64_t dims[VIEW_MAX_RANK], words[3 * VIEW_MAX_RANK];
    bool whole = true;
    for (uint32_t k = 0; k < rank; k++) {
        memcpy(words + 3 * k, sl + 3 * k, 3 * sizeof *words);
        dims[k] = (sl[3 * k + 1] - sl[3 * k] + sl[3 * k + 2] - 1) / sl[3 * k + 2];
        whole &= sl[3 * k] == 0 && sl[3 * k + 1] == xd[k] && sl[3 * k + 2] == 1;
    }
    if (whole) return eg_find(c->g, x);
    hlo_attr at = {.key = A_SLICE, .kind = K_SLICES, .n = rank, .v.ints = words};
    hlo_instr g = {.name = "slice", .opname = "slice", .op = OP_SLICE, .nattrs = 1, .noperands = 1, .attrs = &at};
    g.shape.dtype = (uint8_t)eg_type_dtype(c->g, eg_class_type(c->g, x));
    g.shape.rank = rank;
    g.shape.dims = dims;
    eid r = lf_node(c, c->cur, &g, &x, 1, dims, c->origin);
    if (c->slice_depth < SLICE_NESTING_MAX) {
        c->slice_depth++;
        pad_slice_forms(c, x, sl, rank, r);
        c->slice_depth--;
    }
    return eg_find(c->g, r);
}

/* Whether a and b (slice triples) are unit-stride slices that meet along d
 * (a's end b's start) and agree on every other dim. */
static bool slices_meet(const int64_t *a, const int64_t *b, uint32_t rank, uint32_t d) {
    if (!unit_strides(a, rank) || !unit_strides(b, rank) || a[3 * d + 1] != b[3 * d]) return false;
    for (uint32_t k = 0; k < rank; k++)
        if (k != d && (a[3 * k] != b[3 * k] || a[3 * k + 1] != b[3 * k + 1])) return false;
    return true;
}

eid lf_mk_concat(lift_ctx *c, const eid *ch, uint32_t n, uint32_t d) {
    if (n == 1) return eg_find(c->g, ch[0]);
    uint32_t rank, r2;
    const int64_t *td = eg_type_dims(c->g, eg_class_type(c->g, ch[0]), &rank);
    int64_t dims[VIEW_MAX_RANK];
    if (rank > VIEW_MAX_RANK || d >= rank) return EID_NONE;
    /* Neighbours that are slices of one term meeting along d are one slice
     * of it (the term itself when whole): a stack rebuilt from its rows. */
    if (n <= 64) {
        eid merged[64], src[64];
        int64_t sl[64][3 * VIEW_MAX_RANK];
        uint32_t m = 0;
        bool any = false;
        for (uint32_t k = 0; k < n; k++) {
            eid sn = lf_class_node(c, ch[k], OP_SLICE, 1, NULL);
            int64_t cur[3 * VIEW_MAX_RANK];
            bool is_slice = sn != EID_NONE && node_slice(c, sn, rank, cur);
            eid base = is_slice ? eg_find(c->g, eg_node_children(c->g, sn, &r2)[0]) : EID_NONE;
            if (is_slice && m && src[m - 1] == base && slices_meet(sl[m - 1], cur, rank, d)) {
                sl[m - 1][3 * d + 1] = cur[3 * d + 1];
                any = true;
                continue;
            }
            merged[m] = eg_find(c->g, ch[k]);
            src[m] = base;
            if (is_slice) memcpy(sl[m], cur, sizeof cur);
            m++;
        }
        if (any) {
            for (uint32_t k = 0; k < m; k++)
                if (src[k] != EID_NONE) merged[k] = lf_mk_slice(c, src[k], sl[k]);
            if (m == 1) return merged[0];
            ch = arena_memdup(c->a, merged, m * sizeof *merged);
            n = m;
        }
    }
    memcpy(dims, td, rank * sizeof *dims);
    dims[d] = 0;
    for (uint32_t k = 0; k < n; k++) dims[d] += eg_type_dims(c->g, eg_class_type(c->g, ch[k]), &r2)[d];
    int64_t cd = d;
    hlo_attr at_dims = {.key = A_DIMENSIONS, .kind = K_INTS, .n = 1, .v.ints = &cd};
    hlo_instr g = {.name = "concatenate", .opname = "concatenate", .op = OP_CONCATENATE, .nattrs = 1, .noperands = n,
                   .attrs = &at_dims};
    g.shape.dtype = (uint8_t)eg_type_dtype(c->g, eg_class_type(c->g, ch[0]));
    g.shape.rank = rank;
    g.shape.dims = dims;
    return lf_node(c, c->cur, &g, ch, n, dims, c->origin);
}

/* reshape(x) to type t, canonical on both sides: reshape∘reshape is one
 * reshape and a reshape to x's own shape is x (both exact for row-major data).
 * A reshape of known values is the constant of those values. */
eid lf_mk_element(lift_ctx *c, eid tuple, uint32_t j, uint32_t t) {
    /* index 0 is the default, which the readers leave out (graph.c): the
     * baseline's get-tuple-element of element 0 has no attribute */
    int64_t words[3] = {A_INDEX, 1, j};
    return eg_add(c->g, OP_GET_TUPLE_ELEMENT, eg_attr(c->g, words, j ? 3 : 0), t, &tuple, 1, c->origin);
}

eid lf_mk_transpose(lift_ctx *c, eid x, const int64_t *perm) {
    uint32_t rank, na;
    uint32_t t = eg_class_type(c->g, x);
    const int64_t *xd = eg_type_dims(c->g, t, &rank);
    if (rank > VIEW_MAX_RANK) return eg_find(c->g, x);
    int64_t dims[VIEW_MAX_RANK], p[VIEW_MAX_RANK];
    memcpy(p, perm, rank * sizeof *p);
    /* a transpose of a transpose is one transpose */
    const eid *ch;
    eid tn = lf_class_node(c, x, OP_TRANSPOSE, 1, &ch);
    const int64_t *inner = tn != EID_NONE ? ea_get(c->g, eg_node_attr(c->g, tn), A_DIMENSIONS, &na) : NULL;
    if (inner && na == rank) {
        x = ch[0];
        for (uint32_t q = 0; q < rank; q++) p[q] = inner[perm[q]];
        xd = eg_type_dims(c->g, eg_class_type(c->g, x), &rank);
    }
    bool ident = true;
    for (uint32_t q = 0; q < rank; q++) dims[q] = xd[p[q]], ident &= p[q] == q;
    perm = p;
    if (ident) return eg_find(c->g, x);
    return eg_add(c->g, OP_TRANSPOSE, lf_list_attr(c, A_DIMENSIONS, perm, rank),
                  lf_type_of(c, eg_type_dtype(c->g, t), dims, rank), &x, 1, c->origin);
}

eid lf_mk_moved(lift_ctx *c, eid x, uint32_t from, uint32_t to) {
    uint32_t rank;
    eg_type_dims(c->g, eg_class_type(c->g, x), &rank);
    int64_t perm[VIEW_MAX_RANK];
    if (rank > VIEW_MAX_RANK) return eg_find(c->g, x);
    for (uint32_t q = 0, k = 0; q < rank; q++) {
        if (q == to) {
            perm[q] = from;
            continue;
        }
        if (k == from) k++;
        perm[q] = k++;
    }
    return lf_mk_transpose(c, x, perm);
}

eid lf_mk_reshape(lift_ctx *c, eid x, uint32_t t, uint8_t origin) {
    const interp_val *xv = lf_kval(c, x);
    if (xv && eg_class_type(c->g, x) != t && eg_type_dtype(c->g, t) == xv->dtype) {
        uint32_t rank;
        const int64_t *dims = eg_type_dims(c->g, t, &rank);
        interp_val *r = lf_fold_size_ok(dims, rank) ? interp_val_new(xv->dtype, rank, dims) : NULL;
        if (r && r->n == xv->n) {
            if (r->f) memcpy(r->f, xv->f, (size_t)r->n * sizeof *r->f);
            else memcpy(r->i, xv->i, (size_t)r->n * sizeof *r->i);
            return lf_const_term(c, r, origin);
        }
        interp_val_free(r);
    }
    for (;;) {
        eid n = eg_class_first(c->g, x);
        if (n == EID_NONE || eg_node_op(c->g, n) != OP_RESHAPE) break;
        uint32_t k;
        x = eg_node_children(c->g, n, &k)[0];
    }
    if (eg_class_type(c->g, x) == t) return eg_find(c->g, x);
    return eg_add(c->g, OP_RESHAPE, 0, t, &x, 1, origin);
}

eid lf_mk_unit_broadcast(lift_ctx *c, eid x, int dt, const int64_t *g, const bool *wide, uint32_t rank) {
    int64_t keep[VIEW_MAX_RANK] = {0}, gk[VIEW_MAX_RANK] = {0};
    uint32_t n = 0;
    if (rank > VIEW_MAX_RANK) return EID_NONE;
    for (uint32_t d = 0; d < rank; d++)
        if (!wide[d]) keep[n] = d, gk[n++] = g[d];
    eid r = lf_mk_reshape(c, x, lf_type_of(c, dt, gk, n), c->origin);
    if (n == rank) return r;
    return eg_add(c->g, OP_BROADCAST, lf_list_attr(c, A_DIMENSIONS, keep, n), lf_type_of(c, dt, g, rank), &r, 1,
                  c->origin);
}

/* Whether reduce `in` over children ch (operand, init) reduces only dims of
 * size 1 from an init that is its reducer's identity (0 for sum, ±inf for
 * max/min, 1 for a product, true/false for and/or): then it is its operand
 * reshaped, on both sides alike (XLA sums a batch in one reduce or in two,
 * with a unit dim between). */
static bool unit_reduce(lift_ctx *c, const hlo_module *m, const hlo_instr *in, const eid *ch) {
    uint32_t nd, rank;
    const int64_t *rd = instr_ints(in, A_DIMENSIONS, &nd);
    const int64_t *xd = eg_type_dims(c->g, eg_class_type(c->g, ch[0]), &rank);
    for (uint32_t k = 0; k < nd; k++)
        if (rd[k] < 0 || (uint32_t)rd[k] >= rank || xd[rd[k]] != 1) return false;
    return eg_type_dtype(c->g, eg_class_type(c->g, ch[0])) == in->shape.dtype && lf_reducer_identity(c, m, in, ch[1]);
}

/* *ri: reduce `in` over dims[0..n) instead of its own. */
static void with_dims(lift_ctx *c, const hlo_instr *in, int64_t *dims, uint32_t n, hlo_instr *ri) {
    *ri = *in;
    ri->attrs = arena_memdup(c->a, in->attrs, in->nattrs * sizeof *in->attrs);
    for (uint32_t k = 0; k < in->nattrs; k++)
        if (ri->attrs[k].key == A_DIMENSIONS) ri->attrs[k].v.ints = dims, ri->attrs[k].n = n;
}

/* Reduce `in` over children ch whose operand is reshape(x) that only
 * regroups the reduced dims — they lead (or trail) the operand, and the dims
 * kept are x's trailing (leading) dims as they are: every output element then
 * reduces the same elements of x, so the reduce is the one over x's
 * corresponding dims (XLA folds [8,16,d] into [128,d] before a sum or
 * not). *ri gets that reduce's instruction, *x the operand; false
 * otherwise. The reducer must be one XLA may apply in any order. */
static bool reshape_reduce(lift_ctx *c, const hlo_module *m, const hlo_instr *in, const eid *ch, hlo_instr *ri, eid *x) {
    const eid *kids;
    if (instr_reducer(m, in) == RED_NONE || lf_class_node(c, ch[0], OP_RESHAPE, 1, &kids) == EID_NONE) return false;
    uint32_t nd, ry, rx;
    const int64_t *rd = instr_ints(in, A_DIMENSIONS, &nd);
    const int64_t *yd = eg_type_dims(c->g, eg_class_type(c->g, ch[0]), &ry);
    const int64_t *xd = eg_type_dims(c->g, eg_class_type(c->g, kids[0]), &rx);
    uint32_t kept = ry - nd;
    if (nd == 0 || nd > ry || kept >= rx || rx > VIEW_MAX_RANK) return false;
    uint64_t set = 0;
    for (uint32_t k = 0; k < nd; k++) {
        if (rd[k] < 0 || (uint32_t)rd[k] >= ry) return false;
        set |= 1ull << rd[k];
    }
    uint64_t lead = (1ull << nd) - 1, trail = lead << kept;
    if (set != lead && set != trail) return false;
    /* the kept dims: y's [nd, ry) as x's [rx - kept, rx), or y's [0, kept) as x's */
    const int64_t *yk = set == lead ? yd + nd : yd, *xk = set == lead ? xd + rx - kept : xd;
    if (kept && memcmp(yk, xk, kept * sizeof *yk)) return false;
    int64_t *dims = arena_alloc(c->a, (rx - kept) * sizeof *dims);
    for (uint32_t k = 0; k < rx - kept; k++) dims[k] = set == lead ? k : kept + k;
    with_dims(c, in, dims, rx - kept, ri);
    *x = kids[0];
    return true;
}

/* The reduce of a reduce with the same reducer (one XLA may apply in any
 * order; the same computation, both inits its identity): one reduce over
 * both sets of dims, the outer's mapped to the inner operand's (a sum taken
 * in steps — over pairs of devices, then across them — meets the sum taken
 * at once). *ri gets that reduce, *z the inner operand. */
static bool nested_reduce(lift_ctx *c, const hlo_module *m, const hlo_instr *in, const eid *ch, hlo_instr *ri, eid *z) {
    const eid *kids;
    eid inner = instr_reducer(m, in) == RED_NONE ? EID_NONE : lf_class_node(c, ch[0], OP_REDUCE, 2, &kids);
    const hlo_attr *ta = instr_attr(in, A_TO_APPLY);
    if (inner == EID_NONE || !ta || !lf_reducer_identity(c, m, in, ch[1]) || !lf_reducer_identity(c, m, in, kids[1]) ||
        eg_type_dtype(c->g, eg_class_type(c->g, kids[0])) != in->shape.dtype)
        return false;
    /* the inner reduce's dims and computation, from its attribute words
     * (key, count, values: lf_encode_attrs) */
    uint32_t nw, nin = 0, rz, nd;
    const int64_t *w = eg_attr_words(c->g, eg_node_attr(c->g, inner), &nw), *din = NULL;
    bool same_comp = false;
    for (uint32_t k = 0; k + 1 < nw && k + 2 + (uint32_t)w[k + 1] <= nw; k += 2 + (uint32_t)w[k + 1]) {
        if (w[k] == A_DIMENSIONS) din = w + k + 2, nin = (uint32_t)w[k + 1];
        if (w[k] == A_TO_APPLY && w[k + 1] == 1)
            same_comp = w[k + 2] == (int64_t)lf_comp_digest(c, m, (uint32_t)ta->v.ints[0]);
    }
    const int64_t *dout = instr_ints(in, A_DIMENSIONS, &nd);
    eg_type_dims(c->g, eg_class_type(c->g, kids[0]), &rz);
    if (!same_comp || !din || rz > 63 || nin + nd > rz) return false;
    uint64_t set = 0;
    for (uint32_t k = 0; k < nin; k++) {
        if (din[k] < 0 || din[k] >= rz) return false;
        set |= 1ull << din[k];
    }
    /* outer dim j is the j-th dim of z the inner reduce kept */
    for (uint32_t k = 0; k < nd; k++) {
        int64_t j = dout[k];
        uint32_t d = 0;
        for (; d < rz && (set >> d & 1 || j-- > 0); d++) {}
        if (j >= 0 || d >= rz) return false;
        set |= 1ull << d;
    }
    int64_t *dims = arena_alloc(c->a, (nin + nd) * sizeof *dims);
    uint32_t n = 0;
    for (uint32_t d = 0; d < rz; d++)
        if (set >> d & 1) dims[n++] = d;
    with_dims(c, in, dims, n, ri);
    *z = kids[0];
    return true;
}

/* A reduce over reshape(x) with adjacent reduced dims: the reduce over
 * reshape(x) with each run of them merged into one dim, which reduces the
 * same elements (x split [16, ...] as [4, 4, ...] or as [2, 2, 4, ...] and
 * summed over its leading blocks). The reducer must be one XLA may apply
 * in any order. */
static bool merged_reduce(lift_ctx *c, const hlo_module *m, const hlo_instr *in, const eid *ch, hlo_instr *ri, eid *y) {
    const eid *kids;
    if (instr_reducer(m, in) == RED_NONE || lf_class_node(c, ch[0], OP_RESHAPE, 1, &kids) == EID_NONE) return false;
    uint32_t nd, ry;
    const int64_t *rd = instr_ints(in, A_DIMENSIONS, &nd);
    const int64_t *yd = eg_type_dims(c->g, eg_class_type(c->g, ch[0]), &ry);
    if (ry > VIEW_MAX_RANK) return false;
    uint64_t set = 0;
    for (uint32_t k = 0; k < nd; k++) {
        if (rd[k] < 0 || (uint32_t)rd[k] >= ry) return false;
        set |= 1ull << rd[k];
    }
    if (!(set & set >> 1)) return false; /* no two reduced dims adjacent */
    int64_t md[VIEW_MAX_RANK], *dims = arena_alloc(c->a, (nd + 1) * sizeof *dims);
    uint32_t nm = 0, n = 0;
    for (uint32_t d = 0; d < ry; d++) {
        bool red = set >> d & 1, joins = red && d > 0 && (set >> (d - 1) & 1);
        if (joins) {
            md[nm - 1] *= yd[d];
            continue;
        }
        if (red) dims[n++] = nm;
        md[nm++] = yd[d];
    }
    *y = lf_mk_reshape(c, kids[0], lf_type_of(c, eg_type_dtype(c->g, eg_class_type(c->g, ch[0])), md, nm), c->origin);
    with_dims(c, in, dims, n, ri);
    return true;
}

/* Whether init (a class of known value) is the identity of reduce in's reducer. */
bool lf_reducer_identity(lift_ctx *c, const hlo_module *m, const hlo_instr *in, eid init) {
    const interp_val *iv = lf_kval(c, init);
    if (!iv || iv->n != 1) return false;
    double z = interp_val_get(iv, 0);
    switch (instr_reducer(m, in)) {
    case RED_SUM: case RED_OR: return z == 0;
    case RED_PROD: case RED_AND: return z == 1;
    case RED_MAX: return isinf(z) && z < 0;
    case RED_MIN: return isinf(z) && z > 0;
    default: return false;
    }
}

/* slice `in` of x when x is a pad (without interior padding) and the slice
 * cuts exactly its padding off: the pad's operand, whatever the padding
 * value (a halo's middle tap, slice(pad(x, 1, 1))[1:n+1]); else EID_NONE. */
static eid pad_cut_off(lift_ctx *c, const hlo_instr *in, eid x) {
    const hlo_attr *sa = instr_attr(in, A_SLICE);
    eid pn = lf_class_node(c, x, OP_PAD, 2, NULL);
    if (!sa || pn == EID_NONE) return EID_NONE;
    uint32_t nc, nw, rank;
    eid y = eg_node_children(c->g, pn, &nc)[0];
    const int64_t *yd = eg_type_dims(c->g, eg_class_type(c->g, y), &rank);
    const int64_t *pw = eg_attr_words(c->g, eg_node_attr(c->g, pn), &nw);
    if (sa->n != rank || nw != 2 + 3 * rank || pw[0] != A_PADDING) return EID_NONE;
    for (uint32_t k = 0; k < rank; k++) {
        const int64_t *p = pw + 2 + 3 * k, *sl = sa->v.ints + 3 * k;
        if (p[2] != 0 || sl[0] != p[0] || sl[1] != p[0] + yd[k] || sl[2] != 1) return EID_NONE;
    }
    return eg_find(c->g, y);
}

/* gather(x, k) with k one constant index vector (no batch positions): the
 * slice of x at the clamped starts, reshaped to drop the collapsed dims —
 * x[..., 0] as jnp indexing writes it beside a squeeze. EID_NONE otherwise. */
static eid constant_gather(lift_ctx *c, const hlo_instr *in, const eid *ch, const int64_t *dims) {
    const interp_val *k = lf_kval(c, ch[1]);
    uint32_t rank, ir, n1, n2, no, nss, nob;
    if (!k || k->f || k->rank > 1) return EID_NONE;
    const int64_t *xd = eg_type_dims(c->g, eg_class_type(c->g, ch[0]), &rank);
    eg_type_dims(c->g, eg_class_type(c->g, ch[1]), &ir);
    const int64_t *sim = instr_ints(in, A_START_INDEX_MAP, &n2), *off = instr_ints(in, A_OFFSET_DIMS, &no);
    const int64_t *ss = instr_ints(in, A_SLICE_SIZES, &nss);
    instr_ints(in, A_COLLAPSED_SLICE_DIMS, &n1);
    instr_ints(in, A_OPERAND_BATCHING_DIMS, &nob);
    int64_t ivd = instr_int(in, A_INDEX_VECTOR_DIM, 0);
    if (rank > VIEW_MAX_RANK || nss != rank || nob || ivd != 0 || k->n != (int64_t)n2 || no != in->shape.rank ||
        no + n1 != rank)
        return EID_NONE;
    for (uint32_t q = 0; q < no; q++)
        if (off[q] != (int64_t)q) return EID_NONE;
    int64_t sl[3 * VIEW_MAX_RANK];
    for (uint32_t d = 0; d < rank; d++) {
        if (ss[d] < 0 || ss[d] > xd[d]) return EID_NONE;
        sl[3 * d] = 0, sl[3 * d + 1] = ss[d], sl[3 * d + 2] = 1;
    }
    for (uint32_t q = 0; q < n2; q++) {
        if (sim[q] < 0 || sim[q] >= (int64_t)rank) return EID_NONE;
        int64_t d = sim[q], at = (int64_t)interp_val_get(k, q), hi = xd[d] - ss[d];
        at = at < 0 ? 0 : at > hi ? hi : at;
        sl[3 * d] = at, sl[3 * d + 1] = at + ss[d];
    }
    return lf_mk_reshape(c, lf_mk_slice(c, ch[0], sl), lf_type_of(c, in->shape.dtype, dims, in->shape.rank), c->origin);
}

hlo_instr lf_with_ints(lift_ctx *c, const hlo_instr *in, int key, const int64_t *ints, uint32_t n) {
    hlo_instr g = *in;
    hlo_attr *attrs = arena_alloc(c->a, (in->nattrs + 1) * sizeof *attrs); /* in's has nattrs: no more read */
    if (in->nattrs) memcpy(attrs, in->attrs, in->nattrs * sizeof *attrs);
    for (uint32_t k = 0; k < in->nattrs; k++)
        if (attrs[k].key == key && attrs[k].n == n) attrs[k].v.ints = arena_memdup(c->a, ints, n * sizeof *ints);
    g.attrs = attrs;
    return g;
}

/* The dims of class x other than its unit dims, into u (their count);
 * *at: the index among them of dim d (-1: d is a unit dim). */
static uint32_t nonunit(lift_ctx *c, eid x, uint32_t d, int64_t *u, int *at) {
    uint32_t rank, k = 0;
    const int64_t *xd = eg_type_dims(c->g, eg_class_type(c->g, x), &rank);
    *at = -1;
    for (uint32_t q = 0; q < rank && q < VIEW_MAX_RANK; q++) {
        if (q == d && xd[q] != 1) *at = (int)k;
        if (xd[q] != 1) u[k++] = xd[q];
    }
    return k;
}

/* concatenate(reshape(a_k)) along d where each reshape only regroups the
 * dims before d (those from d on the same), or only inserts or drops unit
 * dims (not d): reshape(concatenate(a_k)) along the same dim of the a_k —
 * one canonical form for both programs (GSPMD
 * concatenates halves in an all-to-all's layout and reshapes back: a
 * rotate-half's q/k). EID_NONE when the operands are not so. */
static eid concat_through_reshapes(lift_ctx *c, const hlo_instr *in, const eid *ch, uint32_t n, uint32_t t) {
    uint32_t nd;
    const int64_t *cd = instr_ints(in, A_DIMENSIONS, &nd);
    if (nd != 1 || n < 2 || n > 64 || cd[0] < 0) return EID_NONE;
    eid inner[64];
    uint32_t d2 = 0, irank = 0;
    const int64_t *i0 = NULL;
    for (uint32_t k = 0; k < n; k++) {
        const eid *kids;
        if (lf_class_node(c, ch[k], OP_RESHAPE, 1, &kids) == EID_NONE) return EID_NONE;
        inner[k] = kids[0];
        int64_t uo[VIEW_MAX_RANK], ui[VIEW_MAX_RANK];
        int ao, ai = -1;
        uint32_t no = nonunit(c, ch[k], (uint32_t)cd[0], uo, &ao), ri, ro;
        const int64_t *id = eg_type_dims(c->g, eg_class_type(c->g, inner[k]), &ri);
        const int64_t *od = eg_type_dims(c->g, eg_class_type(c->g, ch[k]), &ro);
        if (ri > VIEW_MAX_RANK || (uint32_t)cd[0] >= ro) return EID_NONE;
        /* the dims from d on the same on both sides (the reshape regroups
         * only the dims before: per block of the trailing dims, the same
         * relabelling for every operand) */
        uint32_t tail = ro - (uint32_t)cd[0];
        bool same_tail = tail <= ri && !memcmp(od + cd[0], id + (ri - tail), tail * sizeof *od);
        if (same_tail) {
            ai = (int)(ri - tail);
        } else {
            /* or only unit dims inserted or dropped, d not among them */
            uint32_t ni = 0;
            if (ao < 0) return EID_NONE;
            for (uint32_t q = 0; q < ri; q++)
                if (id[q] != 1) {
                    if ((int)ni == ao) ai = (int)q;
                    ui[ni++] = id[q];
                }
            if (no != ni || memcmp(uo, ui, no * sizeof *uo) || ai < 0) return EID_NONE;
        }
        if (!k) {
            d2 = (uint32_t)ai, irank = ri, i0 = id;
            continue;
        }
        if (ri != irank || (uint32_t)ai != d2) return EID_NONE;
        for (uint32_t q = 0; q < ri; q++)
            if (q != d2 && id[q] != i0[q]) return EID_NONE;
    }
    eid cc = lf_mk_concat(c, inner, n, d2);
    return cc == EID_NONE ? EID_NONE : lf_mk_reshape(c, cc, t, c->origin);
}

/* A dot whose operands have only batch and contracting dims, paired at the
 * same positions on both sides (einsum btd,btd->bt), batch dims in order:
 * the sum over the contracted dims of the elementwise product, the form a
 * program that writes it as jnp.sum(x * x, -1) has (lf_node builds that
 * instead of the dot). EID_NONE otherwise. */
static eid elementwise_dot(lift_ctx *c, const hlo_instr *in, const eid *ch, uint32_t t, uint8_t origin) {
    uint32_t nlb, nrb, nlc, nrc, ra, rb;
    const int64_t *lb = instr_ints(in, A_LHS_BATCH_DIMS, &nlb), *rbd = instr_ints(in, A_RHS_BATCH_DIMS, &nrb);
    const int64_t *lc = instr_ints(in, A_LHS_CONTRACTING_DIMS, &nlc), *rc = instr_ints(in, A_RHS_CONTRACTING_DIMS, &nrc);
    uint32_t ta = eg_class_type(c->g, ch[0]);
    eg_type_dims(c->g, ta, &ra);
    eg_type_dims(c->g, eg_class_type(c->g, ch[1]), &rb);
    if (nlc == 0 || nlb != nrb || nlc != nrc || ra != nlb + nlc || rb != ra || ra > VIEW_MAX_RANK ||
        eg_class_type(c->g, ch[1]) != ta || eg_type_dtype(c->g, ta) != in->shape.dtype)
        return EID_NONE;
    for (uint32_t k = 0; k < in->nattrs; k++) {
        int key = in->attrs[k].key;
        if (key != A_LHS_BATCH_DIMS && key != A_RHS_BATCH_DIMS && key != A_LHS_CONTRACTING_DIMS &&
            key != A_RHS_CONTRACTING_DIMS && semantic_key(key))
            return EID_NONE; /* a precision or an algorithm: not the plain sum */
    }
    int64_t red[VIEW_MAX_RANK];
    uint32_t nred = 0;
    for (uint32_t k = 0; k < nlb; k++)
        if (lb[k] != rbd[k] || (k && lb[k] <= lb[k - 1])) return EID_NONE;
    for (uint32_t k = 0; k < nlc; k++)
        if (lc[k] != rc[k]) return EID_NONE;
    for (int64_t d = 0; d < (int64_t)ra; d++)
        for (uint32_t k = 0; k < nlc; k++)
            if (lc[k] == d) red[nred++] = d;
    interp_val *z = interp_val_new(in->shape.dtype, 0, NULL);
    if (!z) return EID_NONE;
    eid sw[2] = {ch[1], ch[0]}, prod = eg_lookup(c->g, OP_MULTIPLY, 0, ta, sw, 2); /* a·b is b·a */
    if (prod == EID_NONE) prod = eg_add(c->g, OP_MULTIPLY, 0, ta, ch, 2, origin);
    eid rch[2] = {prod, lf_const_term(c, z, origin)};
    ea_builder b;
    ea_init(&b);
    ea_put(&b, A_DIMENSIONS, red, nred);
    ea_put_int(&b, A_TO_APPLY, (int64_t)(lf_reducer_digest(RED_SUM) | 1));
    uint32_t attr = ea_intern(&b, c->g);
    ea_free(&b);
    return eg_add(c->g, OP_REDUCE, attr, t, rch, 2, origin);
}

/* not(p) at in's shape and dims (the negation of a predicate). */
static eid mk_not(lift_ctx *c, const hlo_module *m, const hlo_instr *in, eid p, const int64_t *dims, uint8_t origin) {
    hlo_instr g = {.name = "not", .opname = "not", .op = OP_NOT, .noperands = 1};
    g.shape = in->shape;
    return lf_node(c, m, &g, &p, 1, dims, origin);
}

eid lf_node(lift_ctx *c, const hlo_module *m, const hlo_instr *in, const eid *ch, uint32_t n, const int64_t *dims,
                uint8_t origin) {
    uint32_t t = lf_type_of(c, in->shape.dtype, dims, in->shape.rank);
#ifdef SCALIFY_INVARIANTS
    /* An elementwise op's operands have its dims (clamp's bounds may be
     * scalars): a term built otherwise is a lifter defect, which saturation
     * would only meet later as a shape conflict. */
    for (uint32_t k = 0; k < n && graph_op_elementwise(in->op); k++) {
        uint32_t r;
        const int64_t *d = eg_type_dims(c->g, eg_class_type(c->g, ch[k]), &r);
        if ((r != in->shape.rank || (r && memcmp(d, dims, r * sizeof *d))) && !(in->op == OP_CLAMP && r == 0))
            xfatal("lift: %s: operand %u's term has rank %u, dim 0 %lld; the op's is rank %u, dim 0 %lld", in->name, k, r,
                   (long long)(r ? d[0] : 0), in->shape.rank, (long long)(in->shape.rank ? dims[0] : 0));
    }
#endif
    if (in->op == OP_CONCATENATE) {
        eid y = concat_through_reshapes(c, in, ch, n, t);
        if (y != EID_NONE) return y;
    }
    if (in->op == OP_RESHAPE && n == 1) return lf_mk_reshape(c, ch[0], t, origin);
    /* select(p, true, false) over booleans is p, and select(p, false, true)
     * its negation (jnp.tril of a mask of ones: where(i >= j, ones, false)) */
    if (in->op == OP_SELECT && n == 3 && in->shape.dtype == DT_PRED && eg_class_type(c->g, ch[0]) == t) {
        if (lf_class_is_splat(c, ch[1], 1) && lf_class_is_splat(c, ch[2], 0)) return eg_find(c->g, ch[0]);
        if (lf_class_is_splat(c, ch[1], 0) && lf_class_is_splat(c, ch[2], 1)) return mk_not(c, m, in, ch[0], dims, origin);
    }
    /* A boolean converted to numbers and compared with zero is the boolean
     * (> 0, != 0) or its negation (== 0, <= 0): masks combined as numbers
     * and turned back into a predicate (where(mask > 0, 0, -inf)). */
    if (in->op == OP_COMPARE && n == 2 && in->shape.dtype == DT_PRED && lf_class_is_splat(c, ch[1], 0)) {
        const eid *cc;
        eid cv = lf_class_node(c, ch[0], OP_CONVERT, 1, &cc);
        const char *dir = instr_str(in, A_DIRECTION);
        if (cv != EID_NONE && eg_class_type(c->g, cc[0]) == t && dir) {
            eid p = cc[0];
            if (!strcmp(dir, "GT") || !strcmp(dir, "NE")) return eg_find(c->g, p);
            if (!strcmp(dir, "EQ") || !strcmp(dir, "LE")) return mk_not(c, m, in, p, dims, origin);
        }
    }
    if (in->op == OP_BROADCAST && n == 1 && eg_class_type(c->g, ch[0]) == t) {
        /* A broadcast to the same shape along dims 0..r-1 in order is the identity. */
        uint32_t nd;
        const int64_t *bd = instr_ints(in, A_DIMENSIONS, &nd);
        bool ident = nd == in->shape.rank;
        for (uint32_t k = 0; k < nd && ident; k++) ident = bd[k] == k;
        if (ident) return eg_find(c->g, ch[0]);
    }
    if (in->op == OP_REDUCE && n == 2 && unit_reduce(c, m, in, ch)) return lf_mk_reshape(c, ch[0], t, origin);
    /* A dynamic slice as large as its operand starts at 0 whatever its
     * indices (they are clamped): the operand; a dynamic update as large as
     * the operand is the update (a scan over one micro-batch, which XLA
     * folds on one side only). */
    if (in->op == OP_DYNAMIC_SLICE && n >= 1 && eg_class_type(c->g, ch[0]) == t) return eg_find(c->g, ch[0]);
    if (in->op == OP_DYNAMIC_UPDATE_SLICE && n >= 2 && eg_class_type(c->g, ch[0]) == t &&
        eg_class_type(c->g, ch[1]) == t)
        return eg_find(c->g, ch[1]);
    hlo_instr ri;
    eid rch[2];
    /* (canonical forms of a reduce, a few steps deep: a reshape's reduce
     * split back and merged again would go round forever) */
    if (in->op == OP_REDUCE && n == 2 && c->reduce_forms < 8 &&
        (nested_reduce(c, m, in, ch, &ri, &rch[0]) || reshape_reduce(c, m, in, ch, &ri, &rch[0]) ||
         merged_reduce(c, m, in, ch, &ri, &rch[0]))) {
        rch[1] = ch[1];
        c->reduce_forms++;
        eid r = lf_node(c, m, &ri, rch, 2, dims, origin);
        c->reduce_forms--;
        return r;
    }
    if (in->op == OP_SLICE && n == 1) {
        eid y = pad_cut_off(c, in, ch[0]);
        if (y != EID_NONE) return y;
        /* inside one operand of a concatenation: a slice of it (a flat
         * buffer of parameters cut back into them, ravel_pytree's unravel) */
        const hlo_attr *sa = instr_attr(in, A_SLICE);
        uint32_t xr;
        const int64_t *xd = eg_type_dims(c->g, eg_class_type(c->g, ch[0]), &xr);
        bool fits = sa && sa->n == xr && xr <= VIEW_MAX_RANK;
        for (uint32_t k = 0; fits && k < xr; k++) fits = sa->v.ints[3 * k] >= 0 && sa->v.ints[3 * k + 1] <= xd[k];
        if (fits && (y = slice_through(c, ch[0], sa->v.ints, xr, 0)) != EID_NONE) return y;
    }
    if (in->op == OP_GATHER && n == 2) {
        eid y = constant_gather(c, in, ch, dims ? dims : in->shape.dims);
        if (y != EID_NONE) return y;
    }
    uint32_t attr = lf_encode_attrs(c, m, in);
    /* A term folded before (the same op over the same classes; layers repeat
     * their constants) is not evaluated again. */
    uint32_t key[12];
    bool keyed = n > 0 && n <= 8;
    if (keyed) {
        key[0] = in->op, key[1] = attr, key[2] = t, key[3] = n;
        for (uint32_t k = 0; k < n; k++) key[4 + k] = eg_find(c->g, ch[k]);
        uint32_t hit;
        if (strmap_get(&c->folds, (const char *)key, (4 + n) * sizeof *key, &hit)) return eg_find(c->g, hit);
    }
    interp_val *fv = n ? fold_values(c, m, in, ch, n, dims) : NULL;
    if (fv && in->op != OP_BROADCAST) {
        eid k = lf_const_term(c, fv, origin);
        if (keyed) strmap_put(&c->folds, arena_memdup(c->a, key, (4 + n) * sizeof *key), (4 + n) * sizeof *key, k);
        return k;
    }
    if ((in->op == OP_ADD || in->op == OP_MULTIPLY) && n == 2 && attr == 0) {
        /* a+b and a·b are b+a and b·a exactly (in floating point too): the
         * term in the other order, where there is one, is this one (the
         * rules' commutativity skips large terms). */
        eid sw[2] = {ch[1], ch[0]}, hit = eg_lookup(c->g, in->op, attr, t, sw, 2);
        if (hit != EID_NONE) return eg_find(c->g, hit);
    }
    if (in->op == OP_SELECT && n == 3) {
        /* (in place of the select, like the dot below) */
        eid r = lf_guarded_select(c, ch[0], ch[1], ch[2], attr, t, origin);
        if (r != EID_NONE) return r;
    }
    if (in->op == OP_DOT && n == 2) {
        /* (in place of the dot: a union here, before the e-graph is rebuilt,
         * would leave later terms over the dot apart from their copies) */
        eid r = elementwise_dot(c, in, ch, t, origin);
        if (r != EID_NONE) return r;
    }
    eid cls = eg_add(c->g, in->op, attr, t, ch, n, origin);
    if (fv && keyed) strmap_put(&c->folds, arena_memdup(c->a, key, (4 + n) * sizeof *key), (4 + n) * sizeof *key, cls);
    if (in->op == OP_CONSTANT && n == 0 && !lf_kval(c, cls) && lf_fold_size_ok(dims, in->shape.rank))
        fv = interp_eval_instr(m, in, NULL, NULL);
    /* A broadcast keeps its structure (the splat form both sides share); its
     * values are known all the same, and it is the literal of them as well
     * (a program that folded it holds that: a causal mask broadcast over
     * heads, passed into a call). */
    if (fv && in->op == OP_BROADCAST && n == 1) {
        eid lit = lf_const_term(c, interp_val_ref(fv), origin);
        if (eg_find(c->g, lit) != eg_find(c->g, cls)) eg_union(c->g, cls, lit, NULL);
    }
    if (fv) lf_kval_set(c, cls, fv);
    return cls;
}

eid lf_resize_constant_dims(lift_ctx *c, eid x, const bool *along, const int64_t *g, uint32_t *budget, int depth) {
    uint32_t r;
    eg_type_dims(c->g, eg_class_type(c->g, x), &r);
    int dt = eg_type_dtype(c->g, eg_class_type(c->g, x));
    if (r > VIEW_MAX_RANK || depth == 0 || !*budget) return EID_NONE;
    (*budget)--;
    uint32_t t = lf_type_of(c, dt, g, r);
    double k;
    if (lf_class_splat_value(c, x, &k)) return lf_splat(c, t, k);
    for (eid n = eg_class_first(c->g, eg_find(c->g, x)); n != EID_NONE; n = eg_class_next(c->g, n)) {
        uint16_t op = eg_node_op(c->g, n);
        uint32_t nc, attr = eg_node_attr(c->g, n);
        const eid *ch = eg_node_children(c->g, n, &nc);
        if (op == OP_IOTA && nc == 0) {
            int64_t id = ea_get_int(c->g, attr, A_IOTA_DIMENSION, 0);
            if (id >= 0 && id < r && !along[id]) return eg_add(c->g, OP_IOTA, attr, t, NULL, 0, c->origin);
            continue;
        }
        if (op == OP_BROADCAST && nc == 1) {
            /* the operand's dims that land on those dims resize too */
            uint32_t nd, cr;
            const int64_t *bd = ea_get(c->g, attr, A_DIMENSIONS, &nd);
            eg_type_dims(c->g, eg_class_type(c->g, ch[0]), &cr);
            if (!bd) nd = 0;
            if (nd != cr || nd > VIEW_MAX_RANK) continue;
            bool cwide[VIEW_MAX_RANK], any = false, ok = true;
            int64_t cg[VIEW_MAX_RANK];
            for (uint32_t q = 0; q < nd && ok; q++) {
                ok = bd[q] >= 0 && bd[q] < r;
                if (ok) cwide[q] = along[bd[q]], cg[q] = g[bd[q]], any |= cwide[q];
            }
            if (!ok) continue;
            eid y = any ? lf_resize_constant_dims(c, ch[0], cwide, cg, budget, depth - 1) : eg_find(c->g, ch[0]);
            if (y == EID_NONE) continue;
            /* adding unit dims only, in order: a reshape (the form a value
             * narrowed back to its own elements has on the other side) */
            int64_t ne = 1, ce = 1;
            bool order = true;
            for (uint32_t d = 0; d < r; d++) ne *= g[d];
            for (uint32_t q = 0; q < nd; q++) ce *= cg[q], order &= q == 0 || bd[q] > bd[q - 1];
            if (ne == ce && order) return lf_mk_reshape(c, y, t, c->origin);
            return eg_add(c->g, OP_BROADCAST, attr, t, &y, 1, c->origin);
        }
        if (graph_op_elementwise(op) && op < EG_OP_PARAM && nc >= 1 && nc <= 3) {
            eid kids[3], was[3];
            memcpy(was, ch, nc * sizeof *was); /* (eg_add may move the nodes) */
            bool ok = true;
            for (uint32_t q = 0; q < nc && ok; q++) {
                uint32_t kr;
                eg_type_dims(c->g, eg_class_type(c->g, was[q]), &kr);
                /* a select's predicate or a clamp's bounds may be scalars */
                kids[q] = kr == 0 && r > 0 ? eg_find(c->g, was[q])
                          : kr == r        ? lf_resize_constant_dims(c, was[q], along, g, budget, depth - 1)
                                           : EID_NONE;
                ok = kids[q] != EID_NONE;
            }
            if (ok) return eg_add(c->g, op, attr, t, kids, nc, c->origin);
        }
    }
    return EID_NONE;
}

eid lf_fresh_var(lift_ctx *c, int dt, const int64_t *dims, uint32_t rank) {
    int64_t k = (int64_t)(1000000 + c->fresh++);
    return eg_add(c->g, EG_OP_VAR, eg_attr(c->g, &k, 1), lf_type_of(c, dt, dims, rank), NULL, 0, EG_LIFTED);
}

eid lf_class_node(lift_ctx *c, eid cls, uint16_t op, uint32_t n, const eid **ch) {
    for (eid k = eg_class_first(c->g, eg_find(c->g, cls)); k != EID_NONE; k = eg_class_next(c->g, k)) {
        uint32_t m;
        const eid *kids = eg_node_children(c->g, k, &m);
        if (eg_node_op(c->g, k) == op && m == n) {
            if (ch) *ch = kids;
            return k;
        }
    }
    return EID_NONE;
}

bool lf_zero_pad_of(lift_ctx *c, eid x, uint32_t rank, eid *y, int64_t *at, int64_t *step, bool *interior) {
    int64_t start[VIEW_MAX_RANK] = {0};
    if (rank > VIEW_MAX_RANK) return false;
    for (uint32_t k = 0; k < rank; k++) step[k] = 1;
    const eid *ch;
    uint32_t nw, yr;
    eid n = lf_class_node(c, x, OP_SLICE, 1, &ch);
    if (n != EID_NONE) {
        const int64_t *aw = eg_attr_words(c->g, eg_node_attr(c->g, n), &nw);
        if (nw != 2 + 3 * rank || aw[0] != A_SLICE) return false;
        for (uint32_t k = 0; k < rank; k++) start[k] = aw[2 + 3 * k], step[k] = aw[2 + 3 * k + 2];
        x = ch[0];
    }
    n = lf_class_node(c, x, OP_PAD, 2, &ch);
    if (n == EID_NONE || !lf_class_is_zero(c, ch[1])) return false;
    const int64_t *pw = eg_attr_words(c->g, eg_node_attr(c->g, n), &nw);
    eg_type_dims(c->g, eg_class_type(c->g, ch[0]), &yr);
    if (yr != rank || nw != 2 + 3 * rank || pw[0] != A_PADDING) return false;
    for (uint32_t k = 0; k < rank; k++) at[k] = start[k] - pw[2 + 3 * k], interior[k] = pw[2 + 3 * k + 2] != 0;
    *y = eg_find(c->g, ch[0]);
    return true;
}
