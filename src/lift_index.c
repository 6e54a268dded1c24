/* lift_index — index arithmetic (lift.h, LV_PW and LV_MASK): integer values
 * that are, per device, piecewise-affine functions of one integer source
 * (pwidx.h) — the offsets and masks of a vocab-parallel embedding, positions
 * of a sequence shard — and rows gathered with them, related to the baseline
 * when every index value of the domain finds its row on exactly one device.
 * Also one-hot masks of such values against a local iota (block r of the
 * global one-hot), and picks and puts: a gather and a one-hot product summed
 * that take the same elements are one class, and so are an embedding
 * lookup and a one-hot dot with the table (row picks), and a scatter-add
 * into zeros and a one-hot product that put them (lf_pick_forms).
 */
#include "debug.h"
#include "lift.h"
#include "eattr.h"
#include "lift_int.h"

#include "interp.h"

#include <stdarg.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The precondition that source values lie in [0, n) (a gathered table's rows). */
static void note_domain(lift_ctx *c, eid src, int64_t n, bool proven) {
    if (src == EID_NONE) return;
    for (uint32_t i = 0; i < c->ndoms; i++)
        if (c->doms[i].src == src && c->doms[i].size == n) {
            c->doms[i].proven |= proven;
            return;
        }
    ARENA_GROW(c->a, c->doms, c->ndoms, c->capdoms, 8);
    c->doms[c->ndoms++] = (struct lf_domain){src, n, proven};
}

static void assume_domain(lift_ctx *c, eid src, int64_t n) {
    lf_assume(c, "index values (token ids, positions) lie in [0, %lld), where they index", (long long)n);
    note_domain(c, src, n, false);
}

void lf_proven_domain(lift_ctx *c, eid src, int64_t n) { note_domain(c, src, n, true); }

/* Whether a domain of src no larger than n is proved, not assumed. */
static bool domain_proven(const lift_ctx *c, eid src, int64_t n) {
    for (uint32_t i = 0; i < c->ndoms; i++)
        if (c->doms[i].src == src && c->doms[i].size <= n && c->doms[i].proven) return true;
    return false;
}

/* The smallest domain assumed for a source, or -1. */
static int64_t domain_of(const lift_ctx *c, eid src) {
    int64_t best = -1;
    for (uint32_t i = 0; i < c->ndoms; i++)
        if (c->doms[i].src == src && (best < 0 || c->doms[i].size < best)) best = c->doms[i].size;
    return best;
}

struct lift_bmask {
    eid src, cls, hit;
    pw_fn f;         /* the one device's tags */
};

void lf_note_baseline_mask(lift_ctx *c, const lval *v) {
    if (!c->baseline_mode || v->kind != LV_MASK || v->n || !v->pw || v->carry || v->cls == EID_NONE || v->hit == EID_NONE ||
        v->src == EID_NONE || eg_class_type(c->g, v->cls) != eg_class_type(c->g, v->hit))
        return;
    ARENA_GROW(c->a, c->bmasks, c->nbmasks, c->capbmasks, 8);
    c->bmasks[c->nbmasks++] = (struct lift_bmask){v->src, v->cls, v->hit, v->pw[0]};
}

void lf_settle_domains(lift_ctx *c) {
    bool any = false;
    for (uint32_t k = 0; k < c->nbmasks; k++) {
        const struct lift_bmask *b = &c->bmasks[k];
        int64_t n = domain_of(c, b->src), tag; /* the smallest range assumed or proved */
        if (n <= 0 || !pw_constant_on(&b->f, 0, n, &tag) || tag != TAG_HIT || eg_find(c->g, b->cls) == eg_find(c->g, b->hit))
            continue;
        eg_union(c->g, b->cls, b->hit, NULL);
        any = true;
    }
    if (any) eg_rebuild(c->g);
}

static pw_fn *pw_alloc(lift_ctx *c) { return arena_alloc(c->a, (size_t)c->ndev * sizeof(pw_fn)); }

/* Operand o as per-device functions of the source, with its positions (EID_NONE
 * for a value that is the same at every position). */
static bool as_pw(lstate *s, uint32_t o, pw_fn **out, eid *pos, const view **vw, eid *src) {
    lift_ctx *c = s->c;
    const lval *x = &s->ops[o];
    *vw = NULL;  /* NULL: the same at every position, any sharding */
    *src = EID_NONE;
    if (x->kind == LV_PW) {
        *out = x->pw;
        *pos = x->pos;
        *vw = &x->v;
        *src = x->src;
        return true;
    }
    if (x->kind == LV_DEV) {
        pw_fn *f = pw_alloc(c);
        for (int64_t d = 0; d < c->ndev; d++) {
            double v0 = x->dev[d * x->count];
            for (uint32_t k = 1; k < x->count; k++)
                if (x->dev[d * x->count + k] != v0) return false;
            /* (pieces hold integers: a float constant must be one) */
            if (!(fabs(v0) <= 0x1p53) || v0 != floor(v0)) return false;
            pw_const(&f[d], (int64_t)v0);
        }
        *out = f;
        *pos = EID_NONE;
        return true;
    }
    const hlo_instr *xi = &s->comp->instrs[s->in->operands[o]];
    if (x->kind == LV_TERM && !x->assumed && !x->v.partial &&
        (dtype_is_int(xi->shape.dtype) || xi->shape.dtype == DT_PRED)) {
        /* The source itself (data, or positions from iota that a device value
         * offsets), possibly sharded (a batch split over dp): values are taken
         * position by position, so the sharding travels along. */
        pw_fn *f = pw_alloc(c);
        for (int64_t d = 0; d < c->ndev; d++) pw_shift(&f[d], 0);
        *out = f;
        *pos = x->cls;
        *vw = &x->v;
        *src = x->cls;
        return true;
    }
    return false;
}

static bool same_pos(eid *acc, eid p) {
    if (p == EID_NONE) return true;
    if (*acc == EID_NONE) {
        *acc = p;
        return true;
    }
    return *acc == p;
}

static int pw_op_of(const hlo_instr *in) {
    switch (in->op) {
    case OP_ADD: return PW_ADD;
    case OP_SUBTRACT: return PW_SUB;
    case OP_MULTIPLY: return PW_MUL;
    case OP_MINIMUM: return PW_MIN;
    case OP_MAXIMUM: return PW_MAX_OP;
    case OP_AND: return PW_AND;
    case OP_OR: return PW_OR;
    case OP_XOR: return PW_XOR;
    case OP_COMPARE: {
        const char *d = instr_str(in, A_DIRECTION);
        if (!d) return -1;
        return !strcmp(d, "EQ") ? PW_EQ : !strcmp(d, "NE") ? PW_NE : !strcmp(d, "LT") ? PW_LT
             : !strcmp(d, "LE") ? PW_LE : !strcmp(d, "GT") ? PW_GT : PW_GE;
    }
    default: return -1;
    }
}

/* Per-device functions computed as unbounded integers, made the values an
 * op of dtype dt holds for source values 0 <= t < 2^31 (ids are never
 * negative; pw_gather takes no table of more rows): a 32-bit result wraps
 * (u32: t - off for t < off, the unsigned bounds check; s32: a wrapped u32
 * converted back), an unsigned 64-bit one must not go below zero, a type
 * narrower than 32 bits could wrap inside a table's rows. Predicates are 0
 * or 1. False when f cannot be made so. */
static bool pw_as_dtype(int dt, pw_fn *f, int64_t ndev) {
    if (dt == DT_PRED) return true;
    if (!dtype_is_int(dt) || dtype_bits(dt) < 32) return false;
    if (!dtype_is_unsigned(dt) && dtype_bits(dt) > 32) return true;
    for (int64_t d = 0; d < ndev; d++) {
        if (dtype_bits(dt) == 32) {
            /* s32 wraps as u32 does, over [-2^31, 2^31) */
            int64_t sh = dtype_is_unsigned(dt) ? 0 : (int64_t)1 << 31;
            pw_fn k, g, w;
            pw_const(&k, sh);
            if (!pw_binary(PW_ADD, &f[d], &k, &g) || !pw_wrap_unsigned(&g, 32, &w)) return false;
            pw_const(&k, -sh);
            if (!pw_binary(PW_ADD, &w, &k, &f[d])) return false;
            /* Source values from 2^31 on are none (see above): the piece
             * that holds 2^31 - 1 stands for everything after it, so that
             * ops applied one after another do not pile up wraps there. */
            for (uint32_t q = 0; q < f[d].n; q++)
                if (f[d].p[q].hi == PW_POS_INF || f[d].p[q].hi > INT32_MAX) {
                    f[d].p[q].hi = PW_POS_INF;
                    f[d].n = q + 1;
                    break;
                }
            continue;
        }
        for (uint32_t k = 0; k < f[d].n; k++) {
            const pw_piece *p = &f[d].p[k];
            if (p->hi != PW_POS_INF && p->hi <= 0) continue;
            int64_t t0 = p->lo > 0 ? p->lo : 0;
            if (p->a * t0 + p->b < 0) return false;
            if (p->a < 0 && (p->hi == PW_POS_INF || p->a * (p->hi - 1) + p->b < 0)) return false;
        }
    }
    return true;
}

/* Elementwise op `in` over the operands' functions f[o][d] on device d. */
static bool pw_apply(const hlo_instr *in, pw_fn *const *f, int64_t d, pw_fn *out) {
    switch (in->op) {
    case OP_SELECT: return in->noperands == 3 && pw_select(&f[0][d], &f[1][d], &f[2][d], out);
    case OP_NOT: return pw_not(&f[0][d], out);
    case OP_NEGATE: return pw_negate(&f[0][d], out);
    case OP_CLAMP: {
        pw_fn t;
        return in->noperands == 3 && pw_binary(PW_MAX_OP, &f[1][d], &f[0][d], &t) && pw_binary(PW_MIN, &t, &f[2][d], out);
    }
    default: {
        int op = pw_op_of(in);
        return op >= 0 && in->noperands == 2 && pw_binary(op, &f[0][d], &f[1][d], out);
    }
    }
}

/* Positions after a reshape of a value sharded by *vw: only reshapes that add or
 * drop trailing unit dims keep a sharding (the common prefix is unchanged). */
static bool pos_reshape(lift_ctx *c, eid *pos, view *vw, const int64_t *in_dims, uint32_t in_rank, const int64_t *dims,
                        uint32_t rank) {
    view out = view_dup(rank);
    uint32_t common = in_rank < rank ? in_rank : rank;
    for (uint32_t d = 0; d < in_rank; d++) {
        if (!vw->dims[d].naxes) continue;
        if (d >= common || in_dims[d] != dims[d]) return false;
        for (uint32_t k = 0; k < common; k++)
            if (in_dims[k] != dims[k]) return false;
        for (uint32_t k = common; k < in_rank; k++)
            if (in_dims[k] != 1) return false;
        for (uint32_t k = common; k < rank; k++)
            if (dims[k] != 1) return false;
        out.dims[d] = vw->dims[d];
    }
    *vw = out;
    if (*pos == EID_NONE) return true;
    int64_t g[VIEW_MAX_RANK];
    for (uint32_t d = 0; d < rank; d++) g[d] = dims[d] * view_dim_parts(vw, c->mesh, d);
    int dt = eg_type_dtype(c->g, eg_class_type(c->g, *pos));
    *pos = lf_mk_reshape(c, *pos, lf_type_of(c, dt, g, rank), c->origin);
    return true;
}

static void pos_broadcast(lift_ctx *c, eid *pos, view *vw, const int64_t *bdims, uint32_t nb, const int64_t *dims,
                          uint32_t rank, const view *added) {
    view out = view_dup(rank);
    for (uint32_t k = 0; k < nb; k++) out.dims[bdims[k]] = vw->dims[k];
    /* Added dims may be sharded too (a gather's rows of a table sharded along them). */
    for (uint32_t d = 0; added && d < rank; d++)
        if (added->dims[d].naxes) out.dims[d] = added->dims[d];
    *vw = out;
    if (*pos == EID_NONE) return;
    int64_t g[VIEW_MAX_RANK];
    for (uint32_t d = 0; d < rank; d++) g[d] = dims[d] * view_dim_parts(vw, c->mesh, d);
    int dt = eg_type_dtype(c->g, eg_class_type(c->g, *pos));
    uint32_t t = lf_type_of(c, dt, g, rank);
    bool ident = nb == rank;
    for (uint32_t k = 0; k < nb && ident; k++) ident = bdims[k] == k;
    if (ident && eg_class_type(c->g, *pos) == t) return;  /* same shape, dims in order: identity */
    *pos = eg_add(c->g, OP_BROADCAST, lf_list_attr(c, A_DIMENSIONS, bdims, nb), t, pos, 1, c->origin);
}

/* Positions pos (under view *pv) broadcast along every dim that `want`
 * shards and *pv does not: the value is constant along those dims, so it
 * reads as sharded alike; pos becomes the same broadcast to the global shape
 * of that reading. Returns whether *pv now shards as want does. */
static bool pos_reshard(lift_ctx *c, eid *pos, view *pv, const view *want) {
    if (*pos == EID_NONE || pv->partial || want->rank != pv->rank) return false;
    eid n = eg_class_first(c->g, *pos);
    if (n == EID_NONE || eg_node_op(c->g, n) != OP_BROADCAST) return false;
    uint32_t nb, rank, k;
    const int64_t *bd = ea_get(c->g, eg_node_attr(c->g, n), A_DIMENSIONS, &nb);
    uint32_t t = eg_class_type(c->g, *pos);
    const int64_t *g = eg_type_dims(c->g, t, &rank);
    if (rank != pv->rank || rank > VIEW_MAX_RANK) return false;
    view w = *pv;
    int64_t nd[VIEW_MAX_RANK];
    memcpy(nd, g, rank * sizeof *nd);
    for (uint32_t d = 0; d < rank; d++) {
        if (!memcmp(&w.dims[d], &want->dims[d], sizeof w.dims[d])) continue;
        bool added = !w.dims[d].naxes;
        for (uint32_t q = 0; q < nb && added; q++) added = bd[q] != d;
        if (!added) return false;
        w.dims[d] = want->dims[d];
        nd[d] = g[d] * view_dim_parts(&w, c->mesh, d);
    }
    eid src = eg_node_children(c->g, n, &k)[0];
    *pos = eg_add(c->g, OP_BROADCAST, eg_node_attr(c->g, n), lf_type_of(c, eg_type_dtype(c->g, t), nd, rank), &src, 1,
                  c->origin);
    *pv = w;
    return true;
}

/* The 1-D iota under class x through reshapes, when x has one non-unit dim
 * and the iota runs along it: that dim and the iota's length. */
static bool iota_run(lift_ctx *c, eid x, uint32_t *dim, int64_t *len) {
    uint32_t rank, r;
    const int64_t *xd = eg_type_dims(c->g, eg_class_type(c->g, x), &rank);
    int found = -1;
    for (uint32_t d = 0; d < rank; d++)
        if (xd[d] != 1) {
            if (found >= 0) return false;
            found = (int)d;
        }
    if (found < 0) return false;
    int64_t n = xd[found];
    for (int guard = 0; guard < 8 && x != EID_NONE; guard++) {
        const eid *ch;
        if (lf_class_node(c, x, OP_IOTA, 0, &ch) != EID_NONE) {
            const int64_t *yd = eg_type_dims(c->g, eg_class_type(c->g, x), &r);
            *dim = (uint32_t)found;
            *len = n;
            return r == 1 && yd[0] == n;
        }
        x = lf_class_node(c, x, OP_RESHAPE, 1, &ch) != EID_NONE ? ch[0] : EID_NONE;
    }
    return false;
}


/* A masked value whose positions are an iota (a diagonal's rows): each
 * device holds the positions of its block, whose index values are the
 * block's; the row there on every device is the row everywhere. */
static bool mask_resolves_on_own(lift_ctx *c, const lval *m) {
    uint32_t dim;
    int64_t len;
    if (m->n || m->pos == EID_NONE || !iota_run(c, m->pos, &dim, &len) || dim >= m->v.rank) return false;
    int64_t parts = view_dim_parts(&m->v, c->mesh, dim);
    if (parts < 1 || len % parts) return false;
    for (int64_t d = 0; d < c->ndev; d++) {
        int64_t tag, lo = lf_dim_block(c, &m->v.dims[dim], d) * (len / parts);
        if (!pw_constant_on(&m->pw[d], lo, lo + len / parts, &tag) || tag != TAG_HIT) return false;
    }
    return true;
}

/* The index values a mask is read over: its own domain (the extent of the
 * table a lookup read it from), or for a mask that only tests its index
 * values (domain -1) the extent some lookup of the same source indexes,
 * already assumed; -1 when there is none (the mask then stands for no row). */
static int64_t mask_domain(const lift_ctx *c, const lval *m) { return m->domain > 0 ? m->domain : domain_of(c, m->src); }

/* A masked value as a term: every device holds the row for every index value of
 * the domain. */
bool lf_mask_resolves(const lift_ctx *c, const lval *m) {
    if (m->n) return false;  /* a sum of masked parts resolves only under an all-reduce */
    int64_t n = mask_domain(c, m);
    if (n <= 0) return false;
    for (int64_t d = 0; d < c->ndev; d++) {
        int64_t tag;
        if (!pw_constant_on(&m->pw[d], 0, n, &tag) || tag != TAG_HIT) return false;
    }
    return true;
}

/* An index value (LV_PW) or masked row (LV_MASK) as a plain term, for a use
 * that does not take index values: a row every device holds (assuming the
 * domain), or the plain term of a device-independent value. False when it is
 * neither. */
bool lf_resolved_as_term(lift_ctx *c, lval *x) {
    return (x->kind == LV_PW || (x->kind == LV_MASK && lf_mask_resolves(c, x))) && lf_index_as_term(c, x);
}

bool lf_index_as_term(lift_ctx *c, lval *x) {
    bool own = x->kind == LV_MASK && !lf_mask_resolves(c, x) && mask_resolves_on_own(c, x);
    if (x->kind == LV_MASK && (own || lf_mask_resolves(c, x))) {
        if (!x->in_domain && !own) assume_domain(c, x->src, mask_domain(c, x));
        /* Its plain term (the op over the index as written: wrapped,
         * clamped, bounds-checked) is that row over the domain. */
        if (x->cls != EID_NONE && eg_class_type(c->g, x->cls) == eg_class_type(c->g, x->hit))
            eg_union(c->g, x->cls, x->hit, NULL);
        *x = term(x->hit, x->v, false);
        return true;
    }
    if ((x->kind == LV_PW || x->kind == LV_MASK || x->kind == LV_IVEC) && x->cls != EID_NONE) {
        *x = term(x->cls, x->v, false);
        return true;
    }
    return x->kind != LV_PW && x->kind != LV_MASK && x->kind != LV_IVEC;
}

/* The group of device d over `axes`: an index that devices agreeing on
 * every mesh axis outside `axes` share, in [0, ndev). */
static int64_t group_key(const lift_ctx *c, int64_t d, uint32_t axes) {
    int64_t key = 0;
    for (uint32_t a = 0; a < c->mesh->naxes; a++)
        if (!(axes >> a & 1)) key = key * c->mesh->sizes[a] + mesh_coord(c->mesh, d, (int)a);
    return key;
}

/* Summed over the devices of each group (devices that agree on every mesh axis
 * outside `axes`), the mask is the row: for each index value of the domain
 * exactly one device of the group holds the row and the others zero. Where
 * the index values are the positions themselves (an iota along a dim the
 * mask's view shards over axes outside the sum: a diagonal's rows), a group
 * holds only its block of them, and only those values count. */
static bool mask_sums_to_row(lift_ctx *c, const lval *m, uint32_t axes) {
    int64_t n = mask_domain(c, m);
    if (n <= 0) return false;
    uint32_t dl = 0, pm = 0;
    int64_t len = 0, nl = 0;
    if (m->pos != EID_NONE && iota_run(c, m->pos, &dl, &len) && dl < m->v.rank && m->v.dims[dl].naxes) {
        for (uint32_t a = 0; a < m->v.dims[dl].naxes; a++) pm |= 1u << m->v.dims[dl].axes[a];
        nl = len / view_dim_parts(&m->v, c->mesh, dl);
        if ((pm & axes) || nl < 1) pm = 0;
    }
    int *hits = xcalloc((size_t)c->ndev, sizeof *hits);
    bool *active = xcalloc((size_t)c->ndev, sizeof *active);
    bool ok = true;
    int64_t lo = 0;
    while (ok && lo < n) {
        int64_t hi = n;
        for (int64_t d = 0; d < c->ndev; d++) {
            for (uint32_t k = 0; k < m->pw[d].n; k++)
                if (m->pw[d].p[k].lo > lo && m->pw[d].p[k].lo < hi) hi = m->pw[d].p[k].lo;
            if (pm) {
                int64_t b0 = lf_dim_block(c, &m->v.dims[dl], d) * nl, b1 = b0 + nl;
                if (b0 > lo && b0 < hi) hi = b0;
                if (b1 > lo && b1 < hi) hi = b1;
            }
        }
        memset(hits, 0, (size_t)c->ndev * sizeof *hits);
        memset(active, 0, (size_t)c->ndev * sizeof *active);
        for (int64_t d = 0; d < c->ndev && ok; d++) {
            int64_t tag, key = group_key(c, d, axes);
            if (pm) {
                int64_t b0 = lf_dim_block(c, &m->v.dims[dl], d) * nl;
                if (lo < b0 || lo >= b0 + nl) continue;  /* values the device's positions never hold */
            }
            active[key] = true;
            if (!pw_constant_on(&m->pw[d], lo, hi, &tag) || tag == TAG_JUNK) {
                ok = false;
                if (dbg_on(DBG_LIFT)) {
                    fprintf(stderr, "lift: device %lld has no row or zero on [%lld, %lld):", (long long)d, (long long)lo,
                            (long long)hi);
                    for (uint32_t k = 0; k < m->pw[d].n; k++)
                        fprintf(stderr, " [%lld,%lld)=%lldt+%lld", (long long)m->pw[d].p[k].lo, (long long)m->pw[d].p[k].hi,
                                (long long)m->pw[d].p[k].a, (long long)m->pw[d].p[k].b);
                    fprintf(stderr, "\n");
                }
            }
            else hits[key] += tag == TAG_HIT;
        }
        for (int64_t d = 0; d < c->ndev && ok; d++) {
            int64_t key = group_key(c, d, axes);
            ok = !active[key] || hits[key] == 1;
        }
        lo = hi;
    }
    free(hits);
    free(active);
    return ok;
}

/* The non-unit dims of dims[0..rank), in order; their count. */
static uint32_t nonunit_dims(const int64_t *dims, uint32_t rank, uint32_t *which) {
    uint32_t n = 0;
    for (uint32_t d = 0; d < rank; d++)
        if (dims[d] != 1) which[n++] = d;
    return n;
}

/* A row gather (the form pw_gather reads: rows of dim 0, offset dims `off`,
 * output dims bdims[k] for index dim k) whose index positions `pos` are a 1-D
 * iota broadcast along one dim and reshaped by unit dims only: position s of
 * that dim reads row s, so the result is the first n rows of the table,
 * broadcast — the term the baseline writes as a slice of a positional table.
 * EID_NONE when pos is not of that form. */
static eid gather_of_iota(lift_ctx *c, eid tab, eid pos, const int64_t *bdims, const int64_t *off, uint32_t no, int dt,
                          const int64_t *g, uint32_t rank) {
    uint32_t prank, srank, tr, k;
    const int64_t *pd = eg_type_dims(c->g, eg_class_type(c->g, pos), &prank);
    eid x = pos, n0 = eg_class_first(c->g, x);
    if (n0 != EID_NONE && eg_node_op(c->g, n0) == OP_RESHAPE) x = eg_node_children(c->g, n0, &k)[0];
    /* A broadcast of a 1-D iota along dim kd, or the 1-D iota itself (kd 0). */
    eid bn = eg_class_first(c->g, x);
    if (bn == EID_NONE || prank < 1) return EID_NONE;
    bool bc = eg_node_op(c->g, bn) == OP_BROADCAST;
    eid io = bc ? eg_node_children(c->g, bn, &k)[0] : x;
    eid in0 = eg_class_first(c->g, io);
    uint32_t nw = 3, irank;
    static const int64_t dim0[3] = {A_DIMENSIONS, 1, 0};
    const int64_t *w = bc ? eg_attr_words(c->g, eg_node_attr(c->g, bn), &nw) : dim0;
    eg_type_dims(c->g, eg_class_type(c->g, io), &irank);
    if (in0 == EID_NONE || eg_node_op(c->g, in0) != OP_IOTA || irank != 1 || nw != 3 || w[0] != A_DIMENSIONS)
        return EID_NONE;
    const int64_t *sd = eg_type_dims(c->g, eg_class_type(c->g, x), &srank);
    const int64_t *td = eg_type_dims(c->g, eg_class_type(c->g, tab), &tr);
    /* The index positions are pd without its last (index vector) dim. */
    uint32_t su[VIEW_MAX_RANK], pu[VIEW_MAX_RANK];
    if (srank > VIEW_MAX_RANK || prank > VIEW_MAX_RANK || tr != no + 1) return EID_NONE;
    uint32_t ns = nonunit_dims(sd, srank, su), np = nonunit_dims(pd, prank - 1, pu);
    int64_t kd = w[2], n = kd >= 0 && (uint32_t)kd < srank ? sd[kd] : 0;
    if (ns != np || n < 2 || n > td[0]) return EID_NONE;
    int q = -1;
    for (uint32_t j = 0; j < ns; j++) {
        if (sd[su[j]] != pd[pu[j]]) return EID_NONE;
        if (su[j] == (uint32_t)kd) q = (int)j;
    }
    if (q < 0) return EID_NONE;
    /* slice(table, [0:n] on dim 0, whole elsewhere), broadcast into the output. */
    int64_t words[2 + 3 * VIEW_MAX_RANK], sdims[VIEW_MAX_RANK], bw[2 + VIEW_MAX_RANK];
    uint32_t nwords = 0;
    words[nwords++] = A_SLICE;
    words[nwords++] = 3 * tr;
    for (uint32_t d = 0; d < tr; d++) {
        sdims[d] = d ? td[d] : n;
        words[nwords++] = 0, words[nwords++] = sdims[d], words[nwords++] = 1;
    }
    bw[0] = A_DIMENSIONS;
    bw[1] = tr;
    bw[2] = bdims[pu[q]];
    for (uint32_t j = 0; j < no; j++) {
        bw[3 + j] = off[j];
        if (bw[3 + j] <= bw[2 + j]) return EID_NONE;
    }
    eid sl = eg_add(c->g, OP_SLICE, eg_attr(c->g, words, nwords), lf_type_of(c, dt, sdims, tr), &tab, 1, c->origin);
    uint32_t t = lf_type_of(c, dt, g, rank);
    bool ident = rank == tr && eg_class_type(c->g, sl) == t;
    for (uint32_t d = 0; d < tr && ident; d++) ident = bw[2 + d] == d;
    if (ident) return sl;  /* as lf_node() does: a broadcast to the same shape, dims in order */
    return eg_add(c->g, OP_BROADCAST, eg_attr(c->g, bw, 2 + tr), t, &sl, 1, c->origin);
}

/* The row a (sum of) masked value(s) stands for when summed over `axes`, in
 * *sum, recording the index-domain assumption; false when some part does not
 * sum to its row there. A sum of masked values (token plus position
 * embedding) sums termwise. */
static bool mask_sum(lift_ctx *c, const lval *m, uint32_t axes, eid *sum) {
    if (view_axes_used(&m->v) & axes) return false;
    uint32_t nparts = m->n ? m->n : 1;
    for (uint32_t k = 0; k < nparts; k++) {
        const lval *part = m->n ? &m->elems[k] : m;
        if (part->kind != LV_MASK || !mask_sums_to_row(c, part, axes) || !lf_same_sharding(&part->v, &m->v)) return false;
    }
    *sum = EID_NONE;
    for (uint32_t k = 0; k < nparts; k++) {
        const lval *part = m->n ? &m->elems[k] : m;
        if (!part->in_domain) assume_domain(c, part->src, mask_domain(c, part));
        if (*sum == EID_NONE) {
            *sum = part->hit;
        } else {
            eid ch[2] = {*sum, part->hit};
            *sum = eg_add(c->g, OP_ADD, 0, eg_class_type(c->g, part->hit), ch, 2, c->origin);
        }
    }
    return true;
}

/* The mask summed over the devices of each group (devices that agree on
 * every mesh axis outside `axes`) where that is no row yet: per range of
 * index values, the row where exactly one device of the group holds it and
 * the others zeros, zero where all hold zeros (a diagonal's blocks summed
 * over the columns' axis, the rows' axis still to come); false where a
 * device holds anything else there or two hold the row. */
static bool mask_sum_partly(lift_ctx *c, const lval *m, uint32_t axes, lval *out) {
    int64_t n = mask_domain(c, m);
    if (m->kind != LV_MASK || m->n || n <= 0 || (view_axes_used(&m->v) & axes)) return false;
    pw_fn *f = pw_alloc(c);
    int64_t *hits = arena_alloc(c->a, (size_t)c->ndev * sizeof *hits);
    for (int64_t d = 0; d < c->ndev; d++) {
        f[d].n = 0;
        if (!pw_push(&f[d], PW_NEG_INF, 0, 0, TAG_JUNK)) return false;
    }
    for (int64_t lo = 0; lo < n;) {
        int64_t hi = n;
        for (int64_t d = 0; d < c->ndev; d++)
            for (uint32_t k = 0; k < m->pw[d].n; k++)
                if (m->pw[d].p[k].lo > lo && m->pw[d].p[k].lo < hi) hi = m->pw[d].p[k].lo;
        memset(hits, 0, (size_t)c->ndev * sizeof *hits);
        for (int64_t d = 0; d < c->ndev; d++) {
            int64_t tag;
            if (!pw_constant_on(&m->pw[d], lo, hi, &tag) || tag == TAG_JUNK) return false;
            hits[group_key(c, d, axes)] += tag == TAG_HIT;
        }
        for (int64_t d = 0; d < c->ndev; d++) {
            int64_t h = hits[group_key(c, d, axes)];
            if (h > 1 || !pw_push(&f[d], lo, hi, 0, h ? TAG_HIT : TAG_ZERO)) return false;
        }
        lo = hi;
    }
    for (int64_t d = 0; d < c->ndev; d++)
        if (!pw_push(&f[d], n, PW_POS_INF, 0, TAG_JUNK)) return false;
    *out = *m;
    out->pw = f;
    out->cls = EID_NONE;
    return true;
}

/* A masked value met by an op that does not take masks, when it sums to its
 * row over some mesh axes: that row, partial (sum) over them, which is what it
 * means (each device holds the rows of its slice, zeros elsewhere). The
 * transfer functions then judge it like any partial value: combined with a
 * complete one or used non-linearly it is a missing all-reduce. */
bool lf_mask_as_partial(lift_ctx *c, const lval *m, lval *out) {
    for (uint32_t axes = 1; axes < (1u << c->mesh->naxes); axes++) {
        eid sum;
        if (!mask_sum(c, m, axes, &sum)) continue;
        view v = m->n ? m->elems[0].v : m->v;
        v.partial = (uint8_t)axes;
        v.red = RED_SUM;
        *out = term(sum, v, false);
        return true;
    }
    return false;
}

/* The index vector of a gather whose component k0 is the term pos (the
 * source positions, dim vd of size 1), as are those flagged co, those with
 * an own term (not EID_NONE) that term, and whose others are zeros:
 * concatenate(0, ..., pos, ..., 0) along vd, at pos's global shape. */
static eid index_vector_term(lift_ctx *c, eid pos, uint32_t k0, const bool *co, const eid *own, uint32_t nv, uint32_t vd) {
    uint32_t t = eg_class_type(c->g, pos), rank;
    int dt = eg_type_dtype(c->g, t);
    const int64_t *pd = eg_type_dims(c->g, t, &rank);
    int64_t dims[VIEW_MAX_RANK];
    if (rank > VIEW_MAX_RANK || vd >= rank || nv > 64) return EID_NONE;
    memcpy(dims, pd, rank * sizeof *dims);
    interp_val *z0 = interp_val_new(dt, 0, NULL);
    if (!z0) return EID_NONE;
    interp_val_set(z0, 0, 0);
    eid zero = lf_const_term(c, z0, c->origin);
    eid zeros = eg_add(c->g, OP_BROADCAST, lf_list_attr(c, A_DIMENSIONS, NULL, 0), t, &zero, 1, c->origin);
    eid ch[64];
    for (uint32_t k = 0; k < nv; k++) ch[k] = own[k] != EID_NONE ? own[k] : k == k0 || co[k] ? pos : zeros;
    dims[vd] = nv;
    int64_t d = vd;
    return eg_add(c->g, OP_CONCATENATE, lf_list_attr(c, A_DIMENSIONS, &d, 1), lf_type_of(c, dt, dims, rank), ch, nv, c->origin);
}

/* Whether class src is an iota (or one reshaped by unit dims) whose values
 * all lie in [0, n). */
static bool iota_within(lift_ctx *c, eid src, int64_t n) {
    const eid *none;
    eid io = src == EID_NONE ? EID_NONE : lf_class_node(c, src, OP_IOTA, 0, &none);
    uint32_t along;
    int64_t len;
    if (io == EID_NONE) return src != EID_NONE && iota_run(c, src, &along, &len) && len <= n;
    uint32_t rank;
    const int64_t *dims = eg_type_dims(c->g, eg_class_type(c->g, src), &rank);
    int64_t k = ea_get_int(c->g, eg_node_attr(c->g, io), A_IOTA_DIMENSION, 0);
    return k >= 0 && k < rank && dims[k] <= n;
}

/* ---- picks and puts: x at t along dim j, by index or by one-hot ---- */

/* A pick: element t(p) of x along dim j at every position p of the other
 * dims — the row term `cls` (x's dims without j) — computed by a gather
 * (`src` the index source, `domain` x's dim j) or as the sum over j of
 * x · (t == iota). A put (its transpose, a gradient): `cls` holds x(p) at
 * t(p) along j and zeros elsewhere, computed by a scatter-add into zeros or
 * as (t == iota) · x broadcast along j. Picks (puts) of the two kinds are
 * equal where t lies in [0, domain) and the values are finite; two gathers
 * of one pick (written with batching dims, or with an arange column) where
 * t lies in [0, domain). */
typedef struct lift_pick {
    eid x, pos, cls, src;
    uint32_t j;
    bool indexed, put;
    bool rows;          /* a row pick: cls[p, r] = x[t(p), r], x's dim j = 0 the rows (an embedding lookup,
                         * or one_hot(t) · x), r x's other dims after the positions' */
    int64_t domain;
} lift_pick;

/* Notes a pick or put and makes it one class with one of the other kind of
 * the same elements (or another gather of them), assuming what makes them
 * equal. */
static void pick_note(lift_ctx *c, const lift_pick *p) {
    if (dbg_on(DBG_LIFT)) {
        strbuf b;
        sb_init(&b);
        eg_print_term(&b, c->g, p->x, 2);
        sb_puts(&b, " at ");
        eg_print_term(&b, c->g, p->pos, 3);
        fprintf(stderr, "lift: %s %s along %u of %s\n", p->indexed ? "indexed" : "one-hot", p->put ? "put" : "pick", p->j, b.s);
        sb_free(&b);
    }
    for (uint32_t k = 0; k < c->npicks; k++) {
        const lift_pick *q = &c->picks[k];
        if ((q->indexed == p->indexed && !p->indexed) || q->put != p->put || q->rows != p->rows || q->j != p->j ||
            eg_find(c->g, q->x) != eg_find(c->g, p->x) ||
            eg_find(c->g, q->pos) != eg_find(c->g, p->pos) || eg_class_type(c->g, q->cls) != eg_class_type(c->g, p->cls))
            continue;
        if (p->indexed && q->indexed) {
            /* two gathers of one pick written apart (take_along_axis's batching
             * dims, an arange column): the same rows where the index is in range */
            assume_domain(c, p->src, p->domain);
            assume_domain(c, q->src, q->domain);
        } else {
            const lift_pick *ip = p->indexed ? p : q;
            assume_domain(c, ip->src, ip->domain);
            lf_assume(c, "a one-hot product equals the gather or scatter-add it stands for: the values are finite");
        }
        eg_union(c->g, q->cls, p->cls, NULL);
        return;
    }
    ARENA_GROW(c->a, c->picks, c->npicks, c->cappicks, 8);
    c->picks[c->npicks++] = *p;
}

/* Into parts (at most max, deduplicated, *np of them): each a where class
 * t holds op(a, b) or op(b, a) (add, multiply; subtract and divide with b
 * second) of a value a of t's type and a broadcast b whose dims leave out j
 * (constant along j); and so on for the parts found, depth levels down. */
static void parts_beside_constant(lift_ctx *c, eid t, uint32_t j, int depth, eid *parts, uint32_t *np, uint32_t max) {
    for (eid n = eg_class_first(c->g, eg_find(c->g, t)); n != EID_NONE && depth > 0; n = eg_class_next(c->g, n)) {
        int op = eg_node_op(c->g, n);
        uint32_t nk;
        const eid *k = eg_node_children(c->g, n, &nk);
        if (nk != 2 || (op != OP_ADD && op != OP_SUBTRACT && op != OP_MULTIPLY && op != OP_DIVIDE)) continue;
        for (uint32_t side = 1; side < 3; side++) {
            uint32_t bside = side % 2; /* the broadcast's: second first, then first (add, multiply) */
            if (bside == 0 && (op == OP_SUBTRACT || op == OP_DIVIDE)) continue;
            eid a = k[1 - bside], b = k[bside];
            const eid *bc;
            eid bn = lf_class_node(c, b, OP_BROADCAST, 1, &bc);
            if (bn == EID_NONE || eg_class_type(c->g, a) != eg_class_type(c->g, t)) continue;
            uint32_t nd;
            const int64_t *bd = ea_get(c->g, eg_node_attr(c->g, bn), A_DIMENSIONS, &nd);
            bool along = false;
            for (uint32_t q = 0; q < nd; q++) along |= bd[q] == (int64_t)j;
            if (along) continue;
            eid pa = eg_find(c->g, a);
            bool seen = false;
            for (uint32_t q = 0; q < *np; q++) seen |= parts[q] == pa;
            if (seen || *np == max) continue;
            parts[(*np)++] = pa;
            parts_beside_constant(c, pa, j, depth - 1, parts, np, max); /* (reads only: k stays valid) */
        }
    }
}

/* Whether class x holds an iota along dim j of its type (through a broadcast
 * of a 1-D iota along j). */
static bool iota_along(lift_ctx *c, eid x, uint32_t j) {
    const eid *ch;
    eid n = lf_class_node(c, x, OP_IOTA, 0, &ch);
    if (n != EID_NONE) return ea_get_int(c->g, eg_node_attr(c->g, n), A_IOTA_DIMENSION, -1) == (int64_t)j;
    if ((n = lf_class_node(c, x, OP_BROADCAST, 1, &ch)) == EID_NONE) return false;
    uint32_t nb, dim;
    int64_t len;
    const int64_t *bd = ea_get(c->g, eg_node_attr(c->g, n), A_DIMENSIONS, &nb);
    return nb == 1 && bd[0] == (int64_t)j && iota_run(c, ch[0], &dim, &len);
}

/* The positions p when class y is broadcast(p) along dim j only (p's dims
 * in order), else EID_NONE. */
static eid broadcast_along(lift_ctx *c, eid y, uint32_t j) {
    const eid *ch;
    eid n = lf_class_node(c, y, OP_BROADCAST, 1, &ch);
    if (n == EID_NONE) return EID_NONE;
    uint32_t nb, rank;
    const int64_t *bd = ea_get(c->g, eg_node_attr(c->g, n), A_DIMENSIONS, &nb);
    eg_type_dims(c->g, eg_class_type(c->g, y), &rank);
    if (nb + 1 != rank) return EID_NONE;
    for (uint32_t k = 0; k < nb; k++)
        if (bd[k] != (int64_t)(k < j ? k : k + 1)) return EID_NONE;
    return ch[0];
}

/* Class x as convert(t == iota along j): t's positions (broadcast along j). */
static bool onehot_of(lift_ctx *c, eid x, uint32_t j, eid *pos) {
    const eid *cc, *vc;
    eid cv = lf_class_node(c, x, OP_CONVERT, 1, &vc);
    eid cmp = cv == EID_NONE ? EID_NONE : lf_class_node(c, vc[0], OP_COMPARE, 2, &cc);
    if (cmp == EID_NONE) return false;
    if (lf_node_direction(c, cmp) != 0) return false;
    for (uint32_t k = 0; k < 2; k++) {
        eid p = broadcast_along(c, cc[k], j);
        if (p == EID_NONE || !iota_along(c, cc[1 - k], j)) continue;
        *pos = p;
        return true;
    }
    return false;
}

/* Class m as convert(t == iota along j) · other, either order: t's
 * positions (broadcast along j) and the other operand. */
static bool onehot_product(lift_ctx *c, eid m, uint32_t j, eid *pos, eid *other) {
    const eid *mc;
    if (lf_class_node(c, m, OP_MULTIPLY, 2, &mc) == EID_NONE) return false;
    for (uint32_t side = 0; side < 2; side++) {
        if (eg_class_type(c->g, mc[1 - side]) != eg_class_type(c->g, mc[side])) continue;
        eid o = mc[1 - side];
        if (onehot_of(c, mc[side], j, pos)) {
            *other = o;
            return true;
        }
    }
    return false;
}

bool lf_onehot_summand(lift_ctx *c, eid m, uint32_t j) {
    eid pos, other;
    return onehot_product(c, m, j, &pos, &other);
}

/* The dims of type t without dim j, as a type of dtype dt. */
static uint32_t type_without(lift_ctx *c, uint32_t t, uint32_t j, int dt) {
    uint32_t rank;
    const int64_t *td = eg_type_dims(c->g, t, &rank);
    int64_t rd[VIEW_MAX_RANK];
    if (rank > VIEW_MAX_RANK || j >= rank) return 0;
    for (uint32_t d = 0, k = 0; d < rank; d++)
        if (d != j) rd[k++] = td[d];
    return lf_type_of(c, dt, rd, rank - 1);
}

/* Whether every pair (a[q], b[q]) is in the same order as every other. */
static bool paired_in_order(const int64_t *a, const int64_t *b, uint32_t n) {
    for (uint32_t q = 0; q < n; q++)
        for (uint32_t q2 = 0; q2 < n; q2++)
            if ((a[q] < a[q2]) != (b[q] < b[q2])) return false;
    return true;
}

bool lf_pw_identity_on(const lift_ctx *c, const lval *x, int64_t n) {
    if (x->pos == EID_NONE) return false;
    for (int64_t d = 0; d < c->ndev; d++) {
        const pw_fn *f = &x->pw[d];
        for (uint32_t k = 0; k < f->n; k++) {
            const pw_piece *p = &f->p[k];
            bool overlaps = (p->hi == PW_POS_INF || p->hi > 0) && (p->lo == PW_NEG_INF || p->lo < n);
            if (overlaps && (p->a != 1 || p->b != 0)) return false;
        }
    }
    return true;
}

/* Whether class k holds the value n at every element. */
static bool all_equal_to(lift_ctx *c, eid k, int64_t n) {
    const interp_val *kv = lf_kval(c, k);
    for (int64_t e = 0; kv && e < kv->n; e++)
        if (interp_val_get(kv, e) != (double)n) return false;
    return kv && kv->n > 0;
}

/* Index values x with jnp's wrap of negative values taken off:
 * select(t < 0, t + n, t) (through reshapes) is t over [0, n). */
static eid unwrapped(lift_ctx *c, eid x, int64_t n, int depth) {
    const eid *ch, *cc, *ac;
    if (depth > 4) return x;
    if (lf_class_node(c, x, OP_RESHAPE, 1, &ch) != EID_NONE) {
        eid r = ch[0], y = unwrapped(c, r, n, depth + 1); /* (ch moves as the e-graph grows) */
        return eg_find(c->g, y) == eg_find(c->g, r) ? x : lf_mk_reshape(c, y, eg_class_type(c->g, x), c->origin);
    }
    eid cmp, add;
    if (lf_class_node(c, x, OP_SELECT, 3, &ch) == EID_NONE || (cmp = lf_class_node(c, ch[0], OP_COMPARE, 2, &cc)) == EID_NONE ||
        (add = lf_class_node(c, ch[1], OP_ADD, 2, &ac)) == EID_NONE)
        return x;
    eid t = ch[2];
    bool lt = lf_node_direction(c, cmp) == 2;
    if (!lt || eg_find(c->g, cc[0]) != eg_find(c->g, t) || !lf_class_is_zero(c, cc[1])) return x;
    for (uint32_t o = 0; o < 2; o++)
        if (eg_find(c->g, ac[o]) == eg_find(c->g, t) && all_equal_to(c, ac[1 - o], n)) return t;
    return x;
}

/* The baseline's index values x along a dim of n (a scatter's indices, an
 * update's start) with jnp's wrap of negative values are the values
 * themselves over [0, domain) (what the other program's reading assumes):
 * one class, that domain assumed. */
static void baseline_unwrapped(lstate *s, const lval *x, int64_t n, int64_t domain) {
    lift_ctx *c = s->c;
    if (!c->baseline_mode || (x->kind != LV_TERM && x->kind != LV_PW) || x->cls == EID_NONE || domain < 1) return;
    eid t = x->kind == LV_TERM ? unwrapped(c, x->cls, n, 0) : lf_pw_identity_on(c, x, n) ? x->pos : x->cls;
    if (eg_find(c->g, t) == eg_find(c->g, x->cls) || eg_class_type(c->g, t) != eg_class_type(c->g, x->cls)) return;
    assume_domain(c, t, domain);
    eg_union(c->g, x->cls, t, NULL);
}

/* scatter-add of updates into zeros at index values t along dim j, every
 * other dim a batching dim paired in order with the indices' dims (any other
 * index dim of size 1; the index values t itself over [0, n)): a put. */
static void scatter_put(lstate *s, const lval *v) {
    lift_ctx *c = s->c;
    const hlo_instr *in = s->in, *ii = in->noperands == 3 ? &s->comp->instrs[in->operands[1]] : NULL;
    if (!ii || instr_reducer(c->cur, in) != RED_SUM) return;
    const lval *z = &s->vals[in->operands[0]], *idx = &s->vals[in->operands[1]], *u = &s->vals[in->operands[2]];
    if (z->kind != LV_TERM || (idx->kind != LV_PW && idx->kind != LV_TERM) || u->kind != LV_TERM || lf_scale_of(u) != 1 ||
        lf_scale_of(v) != 1 || !view_is_dup(&z->v) ||
        !view_is_dup(&idx->v) || !view_is_dup(&u->v) || (idx->kind == LV_PW ? idx->pos : idx->cls) == EID_NONE ||
        !lf_class_is_zero(c, z->cls))
        return;
    uint32_t nw, ni, ns, nb, nsb, tr = in->shape.rank, ir = ii->shape.rank;
    const int64_t *uwd = instr_ints(in, A_UPDATE_WINDOW_DIMS, &nw), *iwd = instr_ints(in, A_INSERTED_WINDOW_DIMS, &ni);
    const int64_t *sd = instr_ints(in, A_SCATTER_DIMS_TO_OPERAND_DIMS, &ns), *ib = instr_ints(in, A_INPUT_BATCHING_DIMS, &nb);
    const int64_t *sb = instr_ints(in, A_SCATTER_INDICES_BATCHING_DIMS, &nsb);
    int64_t ivd = instr_int(in, A_INDEX_VECTOR_DIM, 0);
    (void)uwd;
    if (nw || ni != 1 || ns != 1 || sd[0] != iwd[0] || iwd[0] < 0 || iwd[0] >= (int64_t)tr || nb + 1 != tr || nsb != nb ||
        !paired_in_order(ib, sb, nb))
        return;
    uint32_t j = (uint32_t)iwd[0];
    for (uint32_t d = 0; d < ir; d++) {
        bool batching = d == ivd;
        for (uint32_t q = 0; q < nb; q++) batching |= sb[q] == d;
        if (!batching && ii->shape.dims[d] != 1) return;
    }
    int64_t n = in->shape.dims[j];
    if (idx->kind == LV_PW && !lf_pw_identity_on(c, idx, n)) return;
    /* plain index values: t itself, or t with negative values wrapped */
    eid pos = idx->kind == LV_PW ? idx->pos : unwrapped(c, idx->cls, n, 0);
    uint32_t t = eg_class_type(c->g, v->cls);
    uint32_t pt = type_without(c, t, j, eg_type_dtype(c->g, eg_class_type(c->g, pos)));
    uint32_t ut = type_without(c, t, j, in->shape.dtype);
    if (!pt || !ut) return;
    lift_pick p = {.src = idx->kind == LV_PW ? idx->src : pos, .cls = v->cls, .j = j, .indexed = true, .put = true, .domain = n};
    p.pos = lf_mk_reshape(c, pos, pt, c->origin);
    p.x = lf_mk_reshape(c, u->cls, ut, c->origin);
    pick_note(c, &p);
}

/* Row picks: a gather of whole rows of a table x at index values t (an
 * embedding lookup, x[t]: one collapsed dim 0, every other dim taken whole
 * as trailing offset dims), and a dot of one_hot(t) (convert(t == iota),
 * the rows' dim last) with x contracting x's dim 0: both x[t(p), r]. */
static void row_pick(lstate *s, eid cls) {
    lift_ctx *c = s->c;
    const hlo_instr *in = s->in;
    const eid *ch;
    uint32_t tr, ir, n1, n2, n3, n4, n5;
    if (in->op == OP_GATHER && in->noperands == 2 && lf_class_node(c, cls, OP_GATHER, 2, &ch) != EID_NONE) {
        eid tab = ch[0], idx = ch[1];
        const int64_t *td = eg_type_dims(c->g, eg_class_type(c->g, tab), &tr);
        const int64_t *id = eg_type_dims(c->g, eg_class_type(c->g, idx), &ir);
        const int64_t *cs = instr_ints(in, A_COLLAPSED_SLICE_DIMS, &n1), *sim = instr_ints(in, A_START_INDEX_MAP, &n2);
        const int64_t *ss = instr_ints(in, A_SLICE_SIZES, &n3), *od = instr_ints(in, A_OFFSET_DIMS, &n4);
        instr_ints(in, A_OPERAND_BATCHING_DIMS, &n5);
        int64_t ivd = instr_int(in, A_INDEX_VECTOR_DIM, 0);
        uint32_t np = ivd == (int64_t)ir ? ir : ivd + 1 == (int64_t)ir && id[ivd] == 1 ? ir - 1 : UINT32_MAX;
        if (n1 != 1 || cs[0] != 0 || n2 != 1 || sim[0] != 0 || n5 || n3 != tr || tr < 1 || ss[0] != 1 || np == UINT32_MAX ||
            n4 != tr - 1 || np + tr - 1 > VIEW_MAX_RANK)
            return;
        for (uint32_t k = 1; k < tr; k++)
            if (ss[k] != td[k] || od[k - 1] != (int64_t)(np + k - 1)) return;
        int64_t pd[VIEW_MAX_RANK];
        memcpy(pd, id, np * sizeof *pd);
        eid pos = np == ir ? idx : lf_mk_reshape(c, idx, lf_type_of(c, eg_type_dtype(c->g, eg_class_type(c->g, idx)), pd, np),
                                                 c->origin);
        pos = unwrapped(c, pos, td[0], 0);
        lift_pick p = {.x = tab, .pos = pos, .cls = cls, .src = pos, .j = 0, .indexed = true, .rows = true, .domain = td[0]};
        pick_note(c, &p);
        return;
    }
    if (in->op != OP_DOT || in->noperands != 2 || lf_class_node(c, cls, OP_DOT, 2, &ch) == EID_NONE) return;
    eid lhs = ch[0], tab = ch[1];
    uint32_t lr;
    eg_type_dims(c->g, eg_class_type(c->g, lhs), &lr);
    eg_type_dims(c->g, eg_class_type(c->g, tab), &tr);
    const int64_t *lc = instr_ints(in, A_LHS_CONTRACTING_DIMS, &n1), *rc = instr_ints(in, A_RHS_CONTRACTING_DIMS, &n2);
    instr_ints(in, A_LHS_BATCH_DIMS, &n3);
    instr_ints(in, A_RHS_BATCH_DIMS, &n4);
    eid pos;
    if (lr < 1 || n1 != 1 || lc[0] != (int64_t)lr - 1 || n2 != 1 || rc[0] != 0 || n3 || n4 || !onehot_of(c, lhs, lr - 1, &pos))
        return;
    lift_pick p = {.x = tab, .pos = pos, .cls = cls, .src = EID_NONE, .j = 0, .rows = true};
    pick_note(c, &p);
}

void lf_pick_forms(lstate *s, const lval *v) {
    lift_ctx *c = s->c;
    const hlo_instr *in = s->in;
    /* (a gather's rows as index values: the rows' term is the hit) */
    if (in->op == OP_GATHER && v->kind == LV_MASK && v->hit != EID_NONE && !v->carry) row_pick(s, v->hit);
    if (v->kind != LV_TERM || v->cls == EID_NONE) return;
    if (in->op == OP_GATHER || in->op == OP_DOT) {
        row_pick(s, v->cls);
        return;
    }
    if (in->op == OP_SCATTER) {
        uint32_t nsd;
        const int64_t *sd = instr_ints(in, A_SCATTER_DIMS_TO_OPERAND_DIMS, &nsd);
        if (in->noperands == 3 && nsd == 1 && sd[0] >= 0 && sd[0] < in->shape.rank)
            baseline_unwrapped(s, &s->vals[in->operands[1]], in->shape.dims[sd[0]], in->shape.dims[sd[0]]);
        scatter_put(s, v);
        return;
    }
    if (in->op == OP_DYNAMIC_UPDATE_SLICE && in->noperands == 2 + in->shape.rank) {
        const hlo_instr *ui = &s->comp->instrs[in->operands[1]];
        for (uint32_t k = 0; k < in->shape.rank; k++)
            baseline_unwrapped(s, &s->vals[in->operands[2 + k]], in->shape.dims[k], in->shape.dims[k] - ui->shape.dims[k] + 1);
        return;
    }
    if (lf_scale_of(v) != 1 && in->shape.rank <= VIEW_MAX_RANK && dtype_is_float(in->shape.dtype)) {
        /* k · convert(t == iota), k carried beside the one-hot: a put of a splat of k */
        for (uint32_t j = 0; j < in->shape.rank; j++) {
            eid pos, one;
            if (!onehot_of(c, v->cls, j, &pos)) continue;
            interp_val *k = interp_val_new(in->shape.dtype, 0, NULL);
            k->f[0] = lf_scale_of(v);
            eid ks = lf_const_term(c, k, c->origin);
            uint32_t t = eg_class_type(c->g, v->cls), xt = type_without(c, t, j, in->shape.dtype);
            eid kb = eg_add(c->g, OP_BROADCAST, lf_list_attr(c, A_DIMENSIONS, NULL, 0), t, &ks, 1, c->origin);
            eid mch[2] = {v->cls, kb};
            one = eg_add(c->g, OP_MULTIPLY, 0, t, mch, 2, c->origin);
            lift_pick p = {.pos = pos, .cls = one, .src = EID_NONE, .j = j, .put = true};
            p.x = eg_add(c->g, OP_BROADCAST, lf_list_attr(c, A_DIMENSIONS, NULL, 0), xt, &ks, 1, c->origin);
            pick_note(c, &p);
            return;
        }
        /* (else the class itself may be a one-hot product, the factor beside it) */
    }
    if (in->op == OP_MULTIPLY) {
        /* convert(t == iota) · broadcast(x) along j: a put (the class; a
         * factor carried beside it is the sum's to place: lf_scale_plan) */
        for (uint32_t j = 0; j < in->shape.rank; j++) {
            eid pos, other, x;
            if (!onehot_product(c, v->cls, j, &pos, &other)) continue;
            if ((x = broadcast_along(c, other, j)) == EID_NONE) {
                /* the same value everywhere: its splat at the positions' shape */
                const eid *sc;
                uint32_t nb, sr;
                eid bn = lf_class_node(c, other, OP_BROADCAST, 1, &sc);
                if (bn == EID_NONE || (ea_get(c->g, eg_node_attr(c->g, bn), A_DIMENSIONS, &nb), nb) ||
                    (eg_type_dims(c->g, eg_class_type(c->g, sc[0]), &sr), sr))
                    continue;
                eid scalar = sc[0];
                uint32_t xt = type_without(c, eg_class_type(c->g, other), j, in->shape.dtype);
                x = eg_add(c->g, OP_BROADCAST, lf_list_attr(c, A_DIMENSIONS, NULL, 0), xt, &scalar, 1, c->origin);
            }
            lift_pick p = {.x = x, .pos = pos, .cls = v->cls, .src = EID_NONE, .j = j, .put = true};
            pick_note(c, &p);
            return;
        }
        return;
    }
    uint32_t nd;
    const eid *ch;
    eid r = lf_class_node(c, v->cls, OP_REDUCE, 2, &ch);
    if (in->op != OP_REDUCE || r == EID_NONE || instr_reducer(c->cur, in) != RED_SUM) return;
    const int64_t *rd = ea_get(c->g, eg_node_attr(c->g, r), A_DIMENSIONS, &nd);
    const interp_val *init = lf_kval(c, ch[1]);
    eid pos, x, m = ch[0];
    if (nd != 1 || !init || init->n != 1 || interp_val_get(init, 0) != 0 || !onehot_product(c, m, (uint32_t)rd[0], &pos, &x))
        return;
    lift_pick p = {.x = x, .pos = pos, .cls = v->cls, .src = EID_NONE, .j = (uint32_t)rd[0]};
    pick_note(c, &p);
}

/* Whether class x is an iota along one of its dims, broadcast along more
 * and reshaped by unit dims as jnp writes arange(B)[:, None] beside
 * arange(T)[None, :] (depth levels down): that dim and its extent. */
static bool iota_dim(lift_ctx *c, eid x, uint32_t *dim, int64_t *len, int depth) {
    if (iota_run(c, x, dim, len)) return true;
    if (depth <= 0) return false;
    uint32_t xr, yr, yd, nb;
    const int64_t *xd = eg_type_dims(c->g, eg_class_type(c->g, x), &xr);
    const eid *ch;
    eid bn = lf_class_node(c, x, OP_BROADCAST, 1, &ch);
    if (bn != EID_NONE) {
        const int64_t *bd = ea_get(c->g, eg_node_attr(c->g, bn), A_DIMENSIONS, &nb);
        eg_type_dims(c->g, eg_class_type(c->g, ch[0]), &yr);
        if (nb != yr || !iota_dim(c, ch[0], &yd, len, depth - 1) || yd >= nb || bd[yd] < 0 || (uint32_t)bd[yd] >= xr ||
            xd[bd[yd]] != *len)
            return false;
        *dim = (uint32_t)bd[yd];
        return true;
    }
    eid rn = lf_class_node(c, x, OP_RESHAPE, 1, &ch);
    if (rn == EID_NONE || !iota_dim(c, ch[0], &yd, len, depth - 1)) return false;
    /* a reshape by unit dims keeps the dim of that extent, the only one
     * of it among x's non-unit dims */
    const int64_t *ydims = eg_type_dims(c->g, eg_class_type(c->g, ch[0]), &yr);
    int64_t py = 1, px = 1;
    for (uint32_t k = 0; k < yr; k++) py *= ydims[k];
    for (uint32_t k = 0; k < xr; k++) px *= xd[k];
    if (px != py || *len < 2) return false;
    uint32_t found = xr;
    for (uint32_t k = 0; k < xr; k++)
        if (xd[k] != 1) {
            if (found != xr || xd[k] != *len) return false;
            found = k;
        }
    if (found == xr) return false;
    *dim = found;
    return true;
}

/* Whether index component e is each position's own index along an index
 * dim (*dl, not ivd) into table dim d (jnp.arange(B) beside the labels:
 * logits[arange(B), t]), positions and table sharded alike there: on every
 * device, at the positions it holds, the local row t - start. Such a
 * component is a batching dim written as an index component. */
static bool own_position(lift_ctx *c, const lval *tab, const hlo_instr *ti, const lval *e, uint32_t d, int64_t ivd,
                         uint32_t *dl) {
    int64_t n;
    if (e->kind != LV_PW || e->pos == EID_NONE || e->v.partial || !iota_dim(c, e->pos, dl, &n, 6) || (int64_t)*dl == ivd ||
        *dl >= e->v.rank || d >= tab->v.rank || !lf_same_dim(&e->v.dims[*dl], &tab->v.dims[d]))
        return false;
    int64_t rows = ti->shape.dims[d];
    if (n != rows * view_dim_parts(&tab->v, c->mesh, d)) return false;
    for (int64_t r = 0; r < c->ndev; r++) {
        int64_t start = lf_dim_block(c, &tab->v.dims[d], r) * rows;
        for (uint32_t k = 0; k < e->pw[r].n; k++) {
            const pw_piece *p = &e->pw[r].p[k];
            if (p->lo < start + rows && p->hi > start && (p->a != 1 || p->b != -start)) return false;
        }
    }
    return true;
}

/* gather(table, index) with the index a function of the source: the rows the
 * devices fetch, per range of index values. The forms read (XLA's gather
 * semantics): one indexed table dim j (collapsed, slice size 1) — rows of an
 * embedding, or a take_along_axis over a vocab dim; an index vector dim of
 * size 1, or implicit (index_vector_dim = rank); table
 * batching dims paired with index dims sharded alike (each device holds the
 * table rows of its own positions); every other table dim taken whole, an
 * offset dim of the result, sharded as the table is. A device holding block
 * blk of dim j (rows local rows) reads global row blk·rows + i for a local
 * index i, i clamped into [0, rows): it reads row t exactly where its index
 * is t - blk·rows and lies in range; anywhere else what it reads is junk.
 * With an index vector (LV_IVEC), one component k0 gives the row (dim j)
 * and every other one a dim the slice takes whole: its start is clamped to
 * 0 whatever the component holds. Dim j is collapsed, or kept as an offset
 * dim of size 1 (Equinox's lookup). */
static bool pw_gather(lstate *s, lval *out) {
    lift_ctx *c = s->c;
    const hlo_instr *in = s->in;
    const lval *tab = &s->ops[0];
    const lval *idx = &s->ops[1];
    if (tab->kind != LV_TERM || (idx->kind != LV_PW && idx->kind != LV_IVEC) || tab->v.partial) return false;
    const hlo_instr *ti = &s->comp->instrs[in->operands[0]], *ii = &s->comp->instrs[in->operands[1]];
    uint32_t n1, n2, nob, nsb, no, nss;
    const int64_t *coll = instr_ints(in, A_COLLAPSED_SLICE_DIMS, &n1), *sim = instr_ints(in, A_START_INDEX_MAP, &n2);
    const int64_t *off = instr_ints(in, A_OFFSET_DIMS, &no), *ss = instr_ints(in, A_SLICE_SIZES, &nss);
    const int64_t *ob = instr_ints(in, A_OPERAND_BATCHING_DIMS, &nob);
    const int64_t *sb = instr_ints(in, A_START_INDICES_BATCHING_DIMS, &nsb);
    int64_t ivd = instr_int(in, A_INDEX_VECTOR_DIM, 0);
    uint32_t tr = ti->shape.rank, ir = ii->shape.rank;
    uint32_t nv = idx->kind == LV_IVEC ? idx->n : 1;
    bool implicit = ivd == (int64_t)ir;  /* indices without an index vector dim: one start index each */
    bool kept = n1 == 0;                 /* dim j kept, as an offset dim of size 1 */
    if (n2 != nv || (kept ? 0 : n1) > nv || nob != nsb || nss != tr || tr > VIEW_MAX_RANK || ir > VIEW_MAX_RANK ||
        in->shape.rank > VIEW_MAX_RANK || ivd < 0 || ivd > (int64_t)ir || (implicit && idx->kind != LV_PW) ||
        (!implicit && ii->shape.dims[ivd] != nv) || (idx->kind == LV_IVEC && idx->vdim != ivd) || no + nob + n1 != tr ||
        no + ir - (implicit ? 0 : 1) != in->shape.rank)
        return false;
    /* The row component k0: the one of the collapsed dim (of several, the
     * one the table is sharded along), else (kept) the one whose slice is a
     * single index; every other one a dim taken whole, or another collapsed
     * dim (a diagonal's column) indexed at the same positions: co[k]. */
    uint32_t k0 = nv, rowdim = n1 ? (uint32_t)coll[0] : tr, collm = 0, ownm = 0, nown = 0, ownd[VIEW_MAX_RANK];
    bool co[VIEW_MAX_RANK] = {false};
    eid ownt[VIEW_MAX_RANK];
    if (nv > VIEW_MAX_RANK) return false;
    /* components that are a batching dim written as an index (own_position) */
    for (uint32_t k = 0; k < nv; k++) {
        ownt[k] = EID_NONE;
        if (sim[k] < 0 || sim[k] >= (int64_t)tr) return false;
        if (idx->kind == LV_IVEC && !kept && ss[sim[k]] == 1 &&
            own_position(c, tab, ti, &idx->elems[k], (uint32_t)sim[k], ivd, &ownd[k]))
            ownt[k] = idx->elems[k].pos, ownm |= 1u << sim[k], nown++;
    }
    /* only beside a row of data (a diagonal's columns are co-indexed) */
    bool data_row = false;
    for (uint32_t k = 0; k < nv && nown; k++)
        data_row |= ownt[k] == EID_NONE && idx->elems[k].kind == LV_PW && !iota_within(c, idx->elems[k].src, INT64_MAX);
    if (!data_row) {
        for (uint32_t k = 0; k < nv; k++) ownt[k] = EID_NONE;
        ownm = nown = 0;
    }
    for (uint32_t q = 0; q < n1 && ownm; q++)  /* the first collapsed dim no own component indexes */
        if (coll[q] >= 0 && coll[q] < (int64_t)tr && !(ownm >> coll[q] & 1)) {
            rowdim = (uint32_t)coll[q];
            break;
        }
    for (uint32_t q = 0; q < n1; q++) {
        if (coll[q] < 0 || coll[q] >= (int64_t)tr) return false;
        collm |= 1u << coll[q];
        if (ownm >> coll[q] & 1) continue;
        if (tab->v.dims[coll[q]].naxes) {
            /* a second sharded one: co-indexed or nothing (below) */
            if ((uint32_t)coll[q] != rowdim && tab->v.dims[rowdim].naxes) continue;
            rowdim = (uint32_t)coll[q];
        }
    }
    for (uint32_t k = 0; k < nv; k++) {
        if (ownt[k] != EID_NONE) continue;
        bool row_k = kept ? ss[sim[k]] != ti->shape.dims[sim[k]] : sim[k] == rowdim;
        if (!kept && !row_k && (collm >> sim[k] & 1)) {
            co[k] = true;
            continue;
        }
        if (!row_k) continue;
        if (k0 < nv) return false;
        k0 = k;
    }
    if (k0 == nv) return false;
    uint32_t j = (uint32_t)sim[k0];
    const lval *row = idx->kind == LV_IVEC ? &idx->elems[k0] : idx;
    if (ss[j] != 1 || row->kind != LV_PW) return false;
    for (uint32_t k = 0; k < nv; k++) {
        if (k != k0 && sim[k] == (int64_t)j) return false;
        /* its own rows: the positions sharded as the table there */
        if (ownt[k] != EID_NONE && !lf_same_dim(&row->v.dims[ownd[k]], &tab->v.dims[sim[k]])) return false;
        /* a co-indexed dim read at the row's positions (sharded: each device
         * its block, the index offset by the block's start) */
        if (co[k] && (ss[sim[k]] != 1 || idx->elems[k].kind != LV_PW ||
                      eg_find(c->g, idx->elems[k].pos) != eg_find(c->g, row->pos) ||
                      idx->elems[k].src != row->src || !lf_same_sharding(&idx->elems[k].v, &row->v)))
            return false;
    }
    /* Batching dims: sliced one position at a time, the table's sharding the
     * index's on the paired dim (the positions travel with the index). */
    for (uint32_t q = 0; q < nob; q++) {
        if (ob[q] < 0 || ob[q] >= (int64_t)tr || ob[q] == (int64_t)j || sb[q] < 0 || sb[q] >= (int64_t)ir ||
            sb[q] == ivd || ss[ob[q]] != 1 || memcmp(&tab->v.dims[ob[q]], &row->v.dims[sb[q]], sizeof tab->v.dims[0]))
            return false;
    }
    /* Other table dims are taken whole; the k-th is output dim off[k], sharded
     * as the table is along it (an FSDP embedding's hidden dim). A kept dim j
     * is an offset dim of size 1, whole on every device. */
    view offv = view_dup(in->shape.rank);
    int64_t gss[VIEW_MAX_RANK];
    uint32_t nk = 0;
    for (uint32_t d = 0; d < tr; d++) {
        gss[d] = ss[d];
        bool batching = false;
        for (uint32_t q = 0; q < nob; q++) batching |= ob[q] == (int64_t)d;
        if ((!kept && (collm >> d & 1)) || batching) continue;
        if (nk >= no || off[nk] < 0 || off[nk] >= (int64_t)in->shape.rank) return false;
        if (d == j) {
            nk++;
            continue;
        }
        if (ss[d] != ti->shape.dims[d]) return false;
        offv.dims[off[nk++]] = tab->v.dims[d];
        gss[d] = ss[d] * view_dim_parts(&tab->v, c->mesh, d);
    }
    if (!implicit && row->v.dims[ivd].naxes) return false;
    int64_t rows = ti->shape.dims[j], parts = view_dim_parts(&tab->v, c->mesh, j), domain = rows * parts;
    if (domain > INT32_MAX) return false;  /* index values are exact below 2^31 (pw_as_dtype) */
    lval v = {.kind = LV_MASK, .domain = domain, .v = view_dup(in->shape.rank), .src = row->src, .cls = EID_NONE};
    v.pw = pw_alloc(c);
    for (int64_t r = 0; r < c->ndev; r++) {
        int64_t start = lf_dim_block(c, &tab->v.dims[j], r) * rows;
        pw_fn *t = &v.pw[r];
        t->n = 0;
        const pw_fn *f = &row->pw[r];
        for (uint32_t k = 0; k < f->n; k++) {
            const pw_piece *p = &f->p[k];
            /* The device reads row start + (a·t + b); it is row t when a = 1, b = -start. */
            int64_t hlo = p->lo, hhi = p->lo;
            if (p->a == 1 && p->b == -start) {
                hlo = p->lo > start ? p->lo : start;
                hhi = p->hi < start + rows ? p->hi : start + rows;
                if (hhi < hlo) hhi = hlo;
            } else if (p->a == 0 && p->b >= 0 && p->b < rows && start + p->b >= p->lo &&
                       (p->hi == PW_POS_INF || start + p->b < p->hi)) {
                /* A constant row (after clamping) is the right one at the single
                 * index value equal to it. */
                hlo = start + p->b;
                hhi = hlo + 1;
            }
            if (!pw_push(t, p->lo, hlo, 0, TAG_JUNK) || !pw_push(t, hlo, hhi, 0, TAG_HIT) ||
                !pw_push(t, hhi > p->lo ? hhi : p->lo, p->hi, 0, TAG_JUNK))
                return false;
        }
        /* A co-indexed dim reads column t only where its index is t (minus
         * the start of the device's block of it) and lies inside the dim (the
         * gather clamps it): junk elsewhere. */
        for (uint32_t k = 0; k < nv; k++) {
            if (!co[k]) continue;
            pw_fn id, lim, eq, lo, hi, inside, ok, junk, r2;
            pw_shift(&id, -lf_dim_block(c, &tab->v.dims[sim[k]], r) * ti->shape.dims[sim[k]]);
            pw_const(&lim, ti->shape.dims[sim[k]]);
            pw_const(&junk, 0);
            if (!pw_binary(PW_EQ, &idx->elems[k].pw[r], &id, &eq) || !pw_binary(PW_GE, &id, &junk, &lo) ||
                !pw_binary(PW_LT, &id, &lim, &hi) || !pw_binary(PW_AND, &lo, &hi, &inside) ||
                !pw_binary(PW_AND, &eq, &inside, &ok))
                return false;
            pw_const(&junk, TAG_JUNK);
            if (!pw_select(&ok, t, &junk, &r2)) return false;
            *t = r2;
        }
    }
    if (row->pos == EID_NONE) return false;
    /* Output positions: the index positions without the index vector dim,
     * broadcast over the row (offset) dims; the sharding comes along. */
    int64_t bdims[VIEW_MAX_RANK], pdims[VIEW_MAX_RANK];
    uint32_t nb = 0, np = 0;
    for (uint32_t d = 0; d < in->shape.rank; d++) {
        bool is_off = false;
        for (uint32_t k = 0; k < no; k++) is_off |= off[k] == d;
        if (!is_off) bdims[nb++] = d;
    }
    for (uint32_t d = 0; d < ii->shape.rank; d++)
        if (d != ivd) pdims[np++] = ii->shape.dims[d];
    if (nb != np) return false;
    eid p0 = row->pos;
    view pv = row->v;
    int64_t idims[VIEW_MAX_RANK];  /* the row component's dims: the index vector dim 1 */
    memcpy(idims, ii->shape.dims, ir * sizeof *idims);
    if (!implicit) idims[ivd] = 1;
    if (!pos_reshape(c, &p0, &pv, idims, ii->shape.rank, pdims, np)) return false;
    v.pos = p0;
    v.v = pv;
    pos_broadcast(c, &v.pos, &v.v, bdims, nb, in->shape.dims, in->shape.rank, &offv);
    /* The row term: the same gather on the whole table, indexed by the source
     * (beside zeros for the components of dims taken whole). */
    eid ch[2] = {tab->cls, nv == 1 ? row->pos : index_vector_term(c, row->pos, k0, co, ownt, nv, (uint32_t)ivd)};
    if (ch[1] == EID_NONE) return false;
    int64_t g[VIEW_MAX_RANK];
    lf_global_dims(c, &v.v, &in->shape, g);
    v.hit = EID_NONE;
    if (nv == 1 && j == 0 && !nob && !implicit)
        v.hit = gather_of_iota(c, tab->cls, row->pos, bdims, off, no, in->shape.dtype, g, in->shape.rank);
    /* iota positions: rows [0, n) of the table, nothing to assume */
    v.in_domain = v.hit != EID_NONE || iota_within(c, row->src, domain);
    if (v.hit == EID_NONE) {
        hlo_instr gi = lf_with_ints(c, in, A_SLICE_SIZES, gss, nss);
        v.hit = lf_node(c, c->cur, &gi, ch, 2, g, c->origin);
    }
    /* take_along_axis: every other table dim a batching dim, paired in order
     * with the index's dims (any other index dim of size 1): a pick of the
     * table along j at positions p0. */
    int64_t pa[VIEW_MAX_RANK], pb[VIEW_MAX_RANK];  /* the batching pairs, own components' too */
    uint32_t npair = 0;
    for (uint32_t q = 0; q < nob && q < VIEW_MAX_RANK; q++) pa[npair] = ob[q], pb[npair++] = sb[q];
    for (uint32_t k = 0; k < nv && npair < VIEW_MAX_RANK; k++)
        if (ownt[k] != EID_NONE) pa[npair] = sim[k], pb[npair++] = ownd[k];
    bool in_order = nv == nown + 1 && npair == nob + nown && npair + 1 == tr && paired_in_order(pa, pb, npair);
    for (uint32_t d = 0; d < ir && in_order; d++) {
        bool batching = d == ivd;
        for (uint32_t q = 0; q < npair; q++) batching |= pb[q] == d;
        in_order = batching || ii->shape.dims[d] == 1;
    }
    uint32_t tt = eg_class_type(c->g, tab->cls);
    uint32_t pt = type_without(c, tt, j, eg_type_dtype(c->g, eg_class_type(c->g, p0))), ht = type_without(c, tt, j, in->shape.dtype);
    if (in_order && pt && ht) {
        lift_pick p = {.x = tab->cls, .src = row->src, .j = j, .indexed = true, .domain = domain};
        p.pos = lf_mk_reshape(c, p0, pt, c->origin);
        p.cls = lf_mk_reshape(c, v.hit, ht, c->origin);
        pick_note(c, &p);
        /* A table that is an elementwise op of a value and something
         * constant along j (log_softmax's x - lse): the same gather of that
         * value is a pick of it too, noted, so that a one-hot pick of the
         * value meets it (the rules then distribute the gather over the op) */
        eid sub[4];
        uint32_t nsub = 0;
        if (lf_class_node(c, v.hit, OP_GATHER, 2, NULL) != EID_NONE) parts_beside_constant(c, tab->cls, j, 2, sub, &nsub, 4);
        for (uint32_t k = 0; k < nsub; k++) {
            hlo_instr gi = lf_with_ints(c, in, A_SLICE_SIZES, gss, nss);
            eid pc[2] = {sub[k], ch[1]};
            lift_pick q = p;
            q.x = sub[k];
            q.cls = lf_mk_reshape(c, lf_node(c, c->cur, &gi, pc, 2, g, c->origin), ht, c->origin);
            pick_note(c, &q);
        }
    }
    /* Every row on every device and an index that does not depend on the
     * device (a bin's support value at a data-derived bin): the gather as
     * written is also a plain term, for uses that take no masks. */
    if (parts == 1 && nv == 1 && idx->kind == LV_PW && idx->cls != EID_NONE) {
        hlo_instr gi = lf_with_ints(c, in, A_SLICE_SIZES, gss, nss);
        eid wc[2] = {tab->cls, idx->cls};
        v.cls = lf_node(c, c->cur, &gi, wc, 2, g, c->origin);
    }
    *out = v;
    return true;
}

/* ---- a write at a data position into a sequence-sharded buffer ---- */

/* dynamic-update-slice(buf, u, .., t - off(r), ..) with buf sharded along
 * that dim d only (local length n) and u whole (length w along d): device r
 * writes u at global position t exactly where t - off(r) lies in [0, n - w]
 * and off(r) is its block start (a decode step's KV-cache write at the
 * token's position); elsewhere (clamped, or wrapped by jnp) it writes junk.
 * A mask whose row is the global write, over the positions [0, S - w]. */
static bool dus_at_index(lstate *s, lval *out) {
    lift_ctx *c = s->c;
    const hlo_instr *in = s->in;
    uint32_t rank = in->shape.rank;
    if (in->op != OP_DYNAMIC_UPDATE_SLICE || in->noperands != 2 + rank || rank > VIEW_MAX_RANK) return false;
    const lval *buf = &s->ops[0], *u = &s->ops[1];
    const hlo_instr *ui = &s->comp->instrs[in->operands[1]];
    if (buf->kind != LV_TERM || buf->v.partial || buf->assumed || u->kind != LV_TERM || !view_is_dup(&u->v) || u->assumed)
        return false;
    uint32_t d = rank;
    for (uint32_t k = 0; k < rank; k++) {
        const lval *st = &s->ops[2 + k];
        if (st->kind == LV_PW) {
            if (d < rank || !buf->v.dims[k].naxes) return false;
            d = k;
        } else if (buf->v.dims[k].naxes || !(st->kind == LV_DEV ? lf_dev_uniform(c, st) && st->dev[0] == 0 : lf_class_is_zero(c, st->cls))) {
            return false;
        }
    }
    const lval *t = d < rank ? &s->ops[2 + d] : NULL;
    uint32_t sr;
    if (!t || t->src == EID_NONE || (eg_type_dims(c->g, eg_class_type(c->g, t->src), &sr), sr) != 0) return false;
    int64_t n = in->shape.dims[d], w = ui->shape.dims[d], parts = view_dim_parts(&buf->v, c->mesh, d);
    if (w < 1 || w > n) return false;
    lval m = {.kind = LV_MASK, .v = buf->v, .pos = EID_NONE, .src = t->src, .domain = n * parts - w + 1, .cls = EID_NONE};
    m.pw = pw_alloc(c);
    for (int64_t r = 0; r < c->ndev; r++) {
        int64_t off = lf_dim_block(c, &buf->v.dims[d], r) * n, lo = off, hi = off + n - w + 1;
        pw_fn *f = &m.pw[r];
        f->n = 0;
        for (uint32_t q = 0; q < t->pw[r].n; q++) {
            const pw_piece *p = &t->pw[r].p[q];
            int64_t a = p->lo, b = p->hi;
            if (p->a == 1 && p->b == -off && a < hi && b > lo) {
                int64_t s0 = a > lo ? a : lo, e0 = b < hi ? b : hi;
                if (!pw_push(f, a, s0, 0, TAG_JUNK) || !pw_push(f, s0, e0, 0, TAG_HIT) || !pw_push(f, e0, b, 0, TAG_JUNK))
                    return false;
            } else if (!pw_push(f, a, b, 0, TAG_JUNK)) {
                return false;
            }
        }
    }
    /* the row: the same write into the whole buffer at t */
    eid ch[2 + VIEW_MAX_RANK];
    ch[0] = buf->cls;
    ch[1] = u->cls;
    for (uint32_t k = 0; k < rank; k++) {
        if (k == d) {
            ch[2 + k] = t->src;
            continue;
        }
        lf_uniform_dev_as_term(s, 2 + k);
        if (s->ops[2 + k].kind != LV_TERM) return false;
        ch[2 + k] = s->ops[2 + k].cls;
    }
    int64_t g[VIEW_MAX_RANK];
    lf_global_dims(c, &buf->v, &in->shape, g);
    m.hit = lf_node(c, c->cur, in, ch, 2 + rank, g, c->origin);
    *out = m;
    return true;
}

/* select(p, dus, buf) (either order), dus such a write into buf itself:
 * where p holds the device keeps its write, elsewhere its buffer, which is
 * its block of the global write wherever that lands outside the block. */
static bool dus_kept(lstate *s, lval *out) {
    lift_ctx *c = s->c;
    const hlo_instr *in = s->in;
    const lval *pr = &s->ops[0];
    if (in->noperands != 3 || pr->kind != LV_PW) return false;
    for (uint32_t k = 0; k < 2; k++) {
        const lval *m = &s->ops[1 + k], *b = &s->ops[2 - k];
        const hlo_instr *di = &s->comp->instrs[in->operands[1 + k]];
        if (m->kind != LV_MASK || m->n || b->kind != LV_TERM || di->op != OP_DYNAMIC_UPDATE_SLICE ||
            di->operands[0] != in->operands[2 - k] || di->noperands != 2 + di->shape.rank)
            continue;
        uint32_t d = di->shape.rank;
        for (uint32_t q = 0; q < di->shape.rank; q++)
            if (s->vals[di->operands[2 + q]].kind == LV_PW) d = q;
        if (d == di->shape.rank || !lf_same_sharding(&b->v, &m->v)) return false;
        int64_t n = di->shape.dims[d], w = s->comp->instrs[di->operands[1]].shape.dims[d];
        lval r = *m;
        r.pw = pw_alloc(c);
        for (int64_t dv = 0; dv < c->ndev; dv++) {
            int64_t off = lf_dim_block(c, &b->v.dims[d], dv) * n;
            pw_fn keep;
            keep.n = 0;
            if (!pw_push(&keep, PW_NEG_INF, off - w + 1, 0, TAG_HIT) || !pw_push(&keep, off - w + 1, off + n, 0, TAG_JUNK) ||
                !pw_push(&keep, off + n, PW_POS_INF, 0, TAG_HIT) ||
                !pw_select(&pr->pw[dv], k == 0 ? &m->pw[dv] : &keep, k == 0 ? &keep : &m->pw[dv], &r.pw[dv]))
                return false;
        }
        *out = r;
        return true;
    }
    return false;
}

/* select(p, x, 0) (either order) with p index arithmetic over ids from data
 * and x a plain term (a gradient's rows kept where a vocab-parallel
 * lookup's id falls in the device's block): x masked by p, the row x where
 * p holds and zero elsewhere, over the ids up to the last one some device
 * keeps. */
/* Whether class x is positions: an iota seen through layout changes,
 * converts and shifts by constants (jnp.arange(1, n + 1) over a sharded
 * dim, offset by the device's block). */
static bool position_class(lift_ctx *c, eid x) {
    for (int guard = 0; guard < 8; guard++) {
        const eid *ch;
        if (lf_class_node(c, x, OP_IOTA, 0, &ch) != EID_NONE) return true;
        eid k = EID_NONE;
        static const uint16_t through[] = {OP_CONVERT, OP_RESHAPE, OP_BROADCAST};
        for (size_t q = 0; q < ARRAY_LEN(through) && k == EID_NONE; q++)
            if (lf_class_node(c, x, through[q], 1, &ch) != EID_NONE) k = ch[0];
        if (k == EID_NONE && lf_class_node(c, x, OP_ADD, 2, &ch) != EID_NONE && (lf_kval(c, ch[0]) || lf_kval(c, ch[1])))
            k = lf_kval(c, ch[0]) ? ch[1] : ch[0];
        if (k == EID_NONE) return false;
        x = k;
    }
    return false;
}

/* Whether pr is an index predicate of ids from data (positions — an iota,
 * a padding mask's — are no rows) that may mask a plain value. */
static bool data_pred(lift_ctx *c, const lval *pr) {
    uint32_t along;
    int64_t len;
    const eid *none;
    return pr->kind == LV_PW && pr->pos != EID_NONE && !pr->v.partial && pr->src != EID_NONE && !lf_kval(c, pr->src) &&
           lf_class_node(c, pr->src, OP_IOTA, 0, &none) == EID_NONE && !iota_run(c, pr->src, &along, &len) &&
           !position_class(c, pr->src);
}

/* The plain value x where index predicate pr is `when` (1: true, 0:
 * false), zeros elsewhere, as a mask of x (HIT) and zeros. */
static bool term_where(lift_ctx *c, const lval *pr, const lval *x, int when, lval *out) {
    if (x->kind != LV_TERM || x->v.partial || x->assumed || x->cls == EID_NONE || lf_scale_of(x) != 1) return false;
    lval m = {.kind = LV_MASK, .v = pr->v, .pos = pr->pos, .hit = x->cls, .src = pr->src, .cls = EID_NONE};
    if (!lf_same_sharding(&m.v, &x->v) && !pos_reshard(c, &m.pos, &m.v, &x->v)) return false;
    if (!lf_same_sharding(&m.v, &x->v)) return false;
    m.pw = pw_alloc(c);
    pw_fn hit, zero;
    pw_const(&hit, TAG_HIT);
    pw_const(&zero, TAG_ZERO);
    int64_t domain = 0;
    for (int64_t d = 0; d < c->ndev; d++) {
        if (!pw_select(&pr->pw[d], when ? &hit : &zero, when ? &zero : &hit, &m.pw[d])) return false;
        for (uint32_t q = 0; q < m.pw[d].n; q++) {
            const pw_piece *pc = &m.pw[d].p[q];
            if (pc->a == 0 && pc->b == TAG_HIT && pc->hi == PW_POS_INF) return false;
            if (pc->a == 0 && pc->b == TAG_HIT && pc->hi > domain) domain = pc->hi;
        }
    }
    if (domain <= 0 || domain > INT32_MAX) return false;
    /* The ids the mask keeps say nothing of the ids the program sees:
     * the domain is the extent some lookup of the same source indexes
     * (mask_domain), never the union of the kept ranges (a mask keeping
     * only id 0 would assume every id is 0). */
    m.domain = -1;
    *out = m;
    return true;
}

/* select(p, x, 0) or select(p, 0, x) of a plain value x by an index
 * predicate of data (term_where). */
static bool masked_term(lstate *s, lval *out) {
    const hlo_instr *in = s->in;
    if (in->noperands != 3 || !data_pred(s->c, &s->ops[0])) return false;
    for (uint32_t k = 0; k < 2; k++) {
        if (!instr_is_zero_literal(s->comp, &s->comp->instrs[in->operands[2 - k]])) continue;
        /* a constant kept where p holds (a gradient's seed at the picked
         * ids) reads under p's sharding: it is the same on every block */
        lval saved = s->ops[1 + k];
        if (!lf_same_sharding(&s->ops[0].v, &saved.v)) lf_konst_review(s, 1 + k, &s->ops[0].v);
        bool ok = term_where(s->c, &s->ops[0], &s->ops[1 + k], k == 0, out);
        s->ops[1 + k] = saved;
        if (ok) return true;
    }
    return false;
}

/* select(p, x, y) where p is, on every device, constant over the domain
 * already assumed for its source (a take's bounds check after the gather,
 * valid token ids): the side it picks, whatever kind of value (a term, or
 * rows still in an all-to-all's layout or per-device windows). Nothing new
 * is assumed here. */
static bool select_in_domain(lstate *s, lval *out) {
    const lval *p = &s->ops[0];
    if (s->in->noperands != 3 || p->kind != LV_PW || !p->pw) return false;
    int64_t n = domain_of(s->c, p->src), k0 = -1;
    if (n <= 0) return false;
    bool proven = domain_proven(s->c, p->src, n);
    for (int64_t d = 0; d < s->c->ndev; d++) {
        int64_t k;
        if (!pw_constant_on(&p->pw[d], 0, n, &k) || (k0 >= 0 && k != k0)) return false;
        k0 = k;
        /* Under an assumed domain, a test of the domain itself (a take's
         * bounds check: changing value at -n, 0 or n, the ends of the ids
         * and of the negative ids numpy wraps), possibly of ids an ignore
         * index was mapped into the domain first (where(labels == -100, 0,
         * labels): the baseline's bounds check settles alike,
         * lf_settle_domains). A test against a value outside the domain
         * alone (labels != -100) is the program's own handling of values
         * the assumption leaves out, kept as written (the baseline keeps it
         * too). */
        const pw_fn *f = &p->pw[d];
        bool ends = false, others = false;
        for (uint32_t i = 1; i < f->n && !proven; i++) {
            const pw_piece *a = &f->p[i - 1], *b = &f->p[i];
            if (a->a == b->a && a->b == b->b) continue;
            if (b->lo == 0 || b->lo == n || b->lo == -n) ends = true;
            else others = true;
        }
        if (others && !ends) return false;
    }
    /* (the side not picked may be a fill constant where the domain is
     * proved: a take at a selection's position) */
    for (uint32_t o = 1; o < 3; o++) {
        int k = s->ops[o].kind;
        bool fill = o == (k0 ? 2u : 1u) && k == LV_DEV && proven;
        if (k != LV_TERM && k != LV_LAYOUT && k != LV_WIN && !fill) return false;
    }
    *out = s->ops[k0 ? 1 : 2];
    lf_select_union(s, out);
    return true;
}

/* ---- index vectors (LV_IVEC) ----
 * A gather index whose components sit along one dim (vdim): Equinox looks a
 * token up at concatenate(token id, 0) and GSPMD, partitioning the table's
 * rows, clamps, compares and offsets that vector by vectors of per-device
 * constants. Each component is carried as index arithmetic of its own (an
 * LV_PW at the value's shape with vdim 1) or as one number per device (an
 * LV_DEV of count 1, the same at every position); ops that keep the vector
 * work component by component, a reduction over vdim combines them, and a
 * gather reads the row from its row component (pw_gather). */
#define IVEC_MAX 8

/* One number per device. */
static lval dev_number(lift_ctx *c, const double *per) {
    lval v = {.kind = LV_DEV, .count = 1};
    v.dev = arena_alloc(c->a, (size_t)c->ndev * sizeof *v.dev);
    memcpy(v.dev, per, (size_t)c->ndev * sizeof *v.dev);
    return v;
}

/* The slice at j along dim vd of device value x (shape sh), when on every
 * device it holds one number (a scalar is that number at every j). */
static bool dev_component(lift_ctx *c, const lval *x, const shape *sh, uint32_t vd, int64_t j, lval *out) {
    if (x->kind != LV_DEV) return false;
    double *per = arena_alloc(c->a, (size_t)c->ndev * sizeof *per);
    if (sh->rank == 0 || x->count == 1) {
        for (int64_t d = 0; d < c->ndev; d++) per[d] = x->dev[d * x->count];
        *out = dev_number(c, per);
        return true;
    }
    if (vd >= sh->rank || j >= sh->dims[vd] || (int64_t)x->count != shape_elements(sh) || sh->rank > VIEW_MAX_RANK) return false;
    int64_t inner = 1;
    for (uint32_t q = vd + 1; q < sh->rank; q++) inner *= sh->dims[q];
    for (int64_t d = 0; d < c->ndev; d++) {
        bool first = true;
        for (int64_t k = 0; k < x->count; k++) {
            if (k / inner % sh->dims[vd] != j) continue;
            double v = x->dev[d * x->count + k];
            if (first) per[d] = v, first = false;
            else if (v != per[d]) return false;
        }
    }
    *out = dev_number(c, per);
    return true;
}

/* The component's function on every device (a device number: a constant). */
static const pw_fn *component_fn(lift_ctx *c, const lval *x) {
    if (x->kind == LV_PW) return x->pw;
    pw_fn *f = pw_alloc(c);
    for (int64_t d = 0; d < c->ndev; d++) pw_const(&f[d], (int64_t)x->dev[d]);
    return f;
}

/* A component computed from the components xs: a device number when none is
 * index arithmetic (its functions constant), else index arithmetic at their
 * common positions and view (false when they differ). */
static bool make_component(lift_ctx *c, const lval *const *xs, uint32_t n, pw_fn *fs, lval *out) {
    const lval *pw = NULL;
    for (uint32_t o = 0; o < n; o++) {
        if (xs[o]->kind != LV_PW) continue;
        if (pw && (pw->pos != xs[o]->pos || pw->src != xs[o]->src || !lf_same_sharding(&pw->v, &xs[o]->v))) return false;
        pw = xs[o];
    }
    if (!pw) {
        double *per = arena_alloc(c->a, (size_t)c->ndev * sizeof *per);
        for (int64_t d = 0; d < c->ndev; d++) {
            int64_t k;
            if (!pw_constant_on(&fs[d], PW_NEG_INF, PW_POS_INF, &k)) return false;
            per[d] = (double)k;
        }
        *out = dev_number(c, per);
        return true;
    }
    *out = (lval){.kind = LV_PW, .pw = fs, .pos = pw->pos, .src = pw->src, .v = pw->v, .cls = EID_NONE};
    return true;
}

/* x, index arithmetic over a local iota (a shard_map's row positions, 0 to
 * n - 1 on every device), beside g, whose positions are the global iota of
 * the same dim sharded in blocks of n: x as the same function of the global
 * position t, at t minus the device's block start (x changed; false when not
 * of that form). */
static bool local_iota_reread(lift_ctx *c, lval *x, const lval *g) {
    uint32_t dl, dg, rank;
    int64_t nl, ng;
    if (x->kind != LV_PW || !view_is_dup(&x->v) || g->kind != LV_PW || g->v.partial || x->v.rank != g->v.rank ||
        !iota_run(c, x->pos, &dl, &nl) || dl >= g->v.rank)
        return false;
    int64_t parts = view_dim_parts(&g->v, c->mesh, dl);
    eid pos = g->pos, src = g->src;
    view gv = g->v;
    if (!iota_run(c, g->pos, &dg, &ng)) {
        /* g's positions are data (token ids) sharded along the iota's dim in
         * blocks of n, nothing else sharded: the global iota of that dim
         * (jnp.arange(B) beside batch-sharded labels) */
        const int64_t *xd = eg_type_dims(c->g, eg_class_type(c->g, x->pos), &rank);
        if (rank != g->v.rank || rank > VIEW_MAX_RANK || parts < 2) return false;
        for (uint32_t k = 0; k < rank; k++)
            if (k != dl && g->v.dims[k].naxes) return false;
        int64_t dims[VIEW_MAX_RANK];
        memcpy(dims, xd, rank * sizeof *dims);
        dims[dl] = ng = nl * parts;
        int dt = eg_type_dtype(c->g, eg_class_type(c->g, x->pos));
        src = eg_add(c->g, OP_IOTA, eg_attr(c->g, NULL, 0), lf_type_of(c, dt, &ng, 1), NULL, 0, c->origin);
        pos = lf_mk_reshape(c, src, lf_type_of(c, dt, dims, rank), c->origin);
        gv = view_dup(rank);
        gv.dims[dl] = g->v.dims[dl];
        dg = dl;
    }
    if (dl != dg || parts < 2 || nl * parts != ng) return false;
    pw_fn *f = pw_alloc(c);
    for (int64_t r = 0; r < c->ndev; r++) {
        /* f(t) = x(t - start): each piece moved right by start */
        int64_t start = lf_dim_block(c, &g->v.dims[dl], r) * nl;
        f[r].n = 0;
        for (uint32_t k = 0; k < x->pw[r].n; k++) {
            const pw_piece *p = &x->pw[r].p[k];
            int64_t lo = p->lo, hi = p->hi, b;
            if ((lo != PW_NEG_INF && __builtin_add_overflow(lo, start, &lo)) ||
                (hi != PW_POS_INF && __builtin_add_overflow(hi, start, &hi)) ||
                __builtin_mul_overflow(p->a, start, &b) || __builtin_sub_overflow(p->b, b, &b) || !pw_push(&f[r], lo, hi, p->a, b))
                return false;
        }
    }
    x->pw = f;
    x->pos = pos;
    x->src = src;
    x->v = gv;
    return true;
}

/* concatenate along d of index arithmetic (size 1 along d), index vectors
 * along d and device values that hold one number per slice along d: an
 * index vector. At least one operand must be index arithmetic. */
static bool ivec_concatenate(lstate *s, lval *out) {
    lift_ctx *c = s->c;
    const hlo_instr *in = s->in;
    uint32_t nd;
    const int64_t *dd = instr_ints(in, A_DIMENSIONS, &nd);
    if (nd != 1 || dd[0] < 0 || (uint64_t)dd[0] >= in->shape.rank || !(dtype_is_int(in->shape.dtype))) return false;
    uint32_t vd = (uint32_t)dd[0], n = 0;
    bool any = false;
    for (uint32_t o = 0; o < in->noperands; o++)
        any |= s->ops[o].kind == LV_PW || (s->ops[o].kind == LV_IVEC && s->ops[o].vdim == vd);
    if (!any) return false;
    lval *el = arena_alloc(c->a, IVEC_MAX * sizeof *el);
    const view *common = NULL;
    for (uint32_t o = 0; o < in->noperands; o++) {
        const lval *x = &s->ops[o];
        const shape *sh = &s->comp->instrs[in->operands[o]].shape;
        int64_t k = sh->dims[vd];
        if (n + k > IVEC_MAX) return false;
        if (x->kind == LV_IVEC) {
            if (x->vdim != vd || x->n != k) return false;
            memcpy(el + n, x->elems, x->n * sizeof *el);
            n += x->n;
        } else if (x->kind == LV_DEV) {
            for (int64_t j = 0; j < k; j++)
                if (!dev_component(c, x, sh, vd, j, &el[n++])) return false;
        } else {
            pw_fn *f;
            eid pos, src;
            const view *vw;
            if (k != 1 || !as_pw(s, o, &f, &pos, &vw, &src) || pos == EID_NONE) return false;
            el[n++] = (lval){.kind = LV_PW, .pw = f, .pos = pos, .src = src, .v = *vw, .cls = EID_NONE};
        }
    }
    for (uint32_t j = 0; j < n; j++)
        if (el[j].kind == LV_PW && !view_is_dup(&el[j].v)) {
            lval anchor = el[j];
            for (uint32_t k = 0; k < n; k++)
                if (el[k].kind == LV_PW && view_is_dup(&el[k].v)) local_iota_reread(c, &el[k], &anchor);
            break;
        }
    for (uint32_t j = 0; j < n; j++) {
        if (el[j].kind != LV_PW) continue;
        if ((common && !lf_same_sharding(common, &el[j].v)) || el[j].v.partial || el[j].v.dims[vd].naxes) return false;
        common = &el[j].v;
    }
    *out = (lval){.kind = LV_IVEC, .elems = el, .n = n, .vdim = (uint8_t)vd, .v = common ? *common : view_dup(in->shape.rank),
                  .cls = EID_NONE};
    return true;
}

/* The piece of class x at index j of dim vd (size 1 there): the operand of
 * a concatenate along vd that is exactly that piece, else the slice. */
static eid piece_at(lift_ctx *c, eid x, uint32_t vd, int64_t j) {
    uint32_t rank, r;
    const int64_t *xd = eg_type_dims(c->g, eg_class_type(c->g, x), &rank);
    if (rank > VIEW_MAX_RANK || vd >= rank) return EID_NONE;
    for (eid nd = eg_class_first(c->g, x); nd != EID_NONE; nd = eg_class_next(c->g, nd)) {
        uint32_t nc, na;
        const eid *ch = eg_node_children(c->g, nd, &nc);
        const int64_t *dd = eg_node_op(c->g, nd) == OP_CONCATENATE ? ea_get(c->g, eg_node_attr(c->g, nd), A_DIMENSIONS, &na) : NULL;
        if (!dd || na != 1 || dd[0] != vd) continue;
        for (uint32_t k = 0, at = 0; k < nc; k++) {
            int64_t w = eg_type_dims(c->g, eg_class_type(c->g, ch[k]), &r)[vd];
            if (at == j && w == 1) return eg_find(c->g, ch[k]);
            at += (uint32_t)w;
        }
    }
    int64_t sl[3 * VIEW_MAX_RANK];
    for (uint32_t d = 0; d < rank; d++) {
        sl[3 * d] = d == vd ? j : 0;
        sl[3 * d + 1] = d == vd ? j + 1 : xd[d];
        sl[3 * d + 2] = 1;
    }
    return lf_mk_slice(c, x, sl);
}

/* Operand o (a plain integer term, or index arithmetic over its own
 * positions) as an index vector along vd: each piece along vd the same
 * function of that piece (GSPMD's (row, column) starts gathered whole,
 * then checked against per-device bounds that differ per component). */
static bool split_as_ivec(lstate *s, uint32_t o, uint32_t vd) {
    lift_ctx *c = s->c;
    lval *x = &s->ops[o];
    const shape *sh = &s->comp->instrs[s->in->operands[o]].shape;
    bool pw = x->kind == LV_PW && x->pw && x->pos != EID_NONE && eg_find(c->g, x->pos) == eg_find(c->g, x->src);
    if ((!pw && (x->kind != LV_TERM || x->assumed || !dtype_is_int(sh->dtype))) || x->v.partial || vd >= sh->rank ||
        sh->rank != x->v.rank || x->v.dims[vd].naxes || sh->dims[vd] < 2 || sh->dims[vd] > IVEC_MAX)
        return false;
    pw_fn *f = x->pw;
    if (!pw) {
        f = pw_alloc(c);
        for (int64_t d = 0; d < c->ndev; d++) pw_shift(&f[d], 0);
    }
    eid whole = pw ? x->pos : x->cls;
    lval *el = arena_alloc(c->a, (size_t)sh->dims[vd] * sizeof *el);
    for (int64_t j = 0; j < sh->dims[vd]; j++) {
        eid p = piece_at(c, whole, vd, j);
        if (p == EID_NONE) return false;
        el[j] = (lval){.kind = LV_PW, .pw = f, .pos = p, .src = p, .v = x->v, .cls = EID_NONE};
    }
    *x = (lval){.kind = LV_IVEC, .elems = el, .n = (uint32_t)sh->dims[vd], .vdim = (uint8_t)vd, .v = x->v, .cls = EID_NONE};
    return true;
}

/* An elementwise op over index vectors (along the same dim, as many
 * components) and device values that hold one number per component: the op
 * component by component. Without an index vector operand, but with a
 * device value that differs along a dim of at most IVEC_MAX: the other
 * operands split along it (split_as_ivec). */
static bool ivec_elementwise(lstate *s, lval *out) {
    lift_ctx *c = s->c;
    const hlo_instr *in = s->in;
    const lval *iv = NULL;
    if (!graph_op_elementwise(in->op) || in->noperands > 3 || !(dtype_is_int(in->shape.dtype) || in->shape.dtype == DT_PRED))
        return false;
    for (uint32_t o = 0; o < in->noperands && !iv; o++)
        if (s->ops[o].kind == LV_IVEC) iv = &s->ops[o];
    lval saved[3];
    bool split = false;
    for (uint32_t o = 0; o < in->noperands && !iv; o++) {
        const lval *k = &s->ops[o];
        const shape *ks = &s->comp->instrs[in->operands[o]].shape;
        if (k->kind != LV_DEV || k->count < 2 || ks->rank != in->shape.rank) continue;
        bool uniform = true;
        for (int64_t d = 0; d < c->ndev && uniform; d++)
            for (uint32_t e = 1; e < k->count && uniform; e++) uniform = k->dev[d * k->count + e] == k->dev[d * k->count];
        for (uint32_t vd = 0; vd < in->shape.rank && !uniform && !iv; vd++) {
            lval one;
            bool ok = in->shape.dims[vd] >= 2 && in->shape.dims[vd] <= IVEC_MAX;
            for (int64_t j = 0; ok && j < in->shape.dims[vd]; j++) ok = dev_component(c, k, ks, vd, j, &one);
            if (!ok) continue;
            memcpy(saved, s->ops, in->noperands * sizeof *saved);
            for (uint32_t q = 0; q < in->noperands && ok; q++)
                if (s->ops[q].kind != LV_DEV) {
                    ok = split_as_ivec(s, q, vd);
                    iv = &s->ops[q];
                }
            if (!ok || !iv || iv->kind != LV_IVEC) {
                memcpy(s->ops, saved, in->noperands * sizeof *saved);
                iv = NULL;
            }
            split = iv != NULL;
        }
        if (!uniform) break;
    }
    if (!iv) return false;
    if (split && !ivec_elementwise(s, out)) {
        memcpy(s->ops, saved, in->noperands * sizeof *saved);
        return false;
    }
    if (split) return true;
    lval *el = arena_alloc(c->a, iv->n * sizeof *el);
    for (uint32_t j = 0; j < iv->n; j++) {
        lval comp[3];
        const lval *xs[3];
        pw_fn *f[3];
        for (uint32_t o = 0; o < in->noperands; o++) {
            const lval *x = &s->ops[o];
            if (x->kind == LV_IVEC) {
                if (x->vdim != iv->vdim || x->n != iv->n) return false;
                comp[o] = x->elems[j];
            } else if (!dev_component(c, x, &s->comp->instrs[in->operands[o]].shape, iv->vdim, j, &comp[o])) {
                return false;
            }
            xs[o] = &comp[o];
            f[o] = (pw_fn *)component_fn(c, &comp[o]);
        }
        pw_fn *r = pw_alloc(c);
        for (int64_t d = 0; d < c->ndev; d++)
            if (!pw_apply(in, f, d, &r[d])) return false;
        if (!pw_as_dtype(in->shape.dtype, r, c->ndev)) return false;
        if (!make_component(c, xs, in->noperands, r, &el[j])) return false;
    }
    *out = *iv;
    out->elems = el;
    out->cls = EID_NONE;
    out->v = view_dup(in->shape.rank);
    const view *common = NULL;
    for (uint32_t j = 0; j < iv->n; j++) {
        if (el[j].kind != LV_PW) continue;
        if (common && !lf_same_sharding(common, &el[j].v)) return false;
        common = &el[j].v;
        out->v = *common;
    }
    return true;
}

/* reduce over the vector dim alone: init and the components combined by the
 * reducer, position by position. */
static bool ivec_reduce(lstate *s, lval *out) {
    lift_ctx *c = s->c;
    const hlo_instr *in = s->in;
    const lval *iv = &s->ops[0];
    if (in->noperands != 2 || iv->kind != LV_IVEC || s->ops[1].kind != LV_DEV || s->ops[1].count != 1) return false;
    uint32_t nd;
    const int64_t *rd = instr_ints(in, A_DIMENSIONS, &nd);
    int red = instr_reducer(c->cur, in), op;
    switch (red) {
    case RED_OR: op = PW_OR; break;
    case RED_AND: op = PW_AND; break;
    case RED_MAX: op = PW_MAX_OP; break;
    case RED_MIN: op = PW_MIN; break;
    case RED_SUM: op = dtype_is_int(in->shape.dtype) ? PW_ADD : -1; break;
    default: op = -1;
    }
    if (op < 0 || nd != 1 || rd[0] != iv->vdim) return false;
    const pw_fn *acc = component_fn(c, &s->ops[1]);
    const lval *xs[IVEC_MAX + 1];
    uint32_t nx = 0;
    xs[nx++] = &s->ops[1];
    for (uint32_t j = 0; j < iv->n; j++) {
        const pw_fn *f = component_fn(c, &iv->elems[j]);
        pw_fn *r = pw_alloc(c);
        for (int64_t d = 0; d < c->ndev; d++)
            if (!pw_binary(op, &acc[d], &f[d], &r[d])) return false;
        acc = r;
        xs[nx++] = &iv->elems[j];
    }
    lval v;
    if (!make_component(c, xs, nx, (pw_fn *)acc, &v)) return false;
    if (v.kind == LV_PW) {
        /* the positions lose the vector dim (1 in the components) */
        const hlo_instr *src = &s->comp->instrs[in->operands[0]];
        int64_t cd[VIEW_MAX_RANK];
        if (src->shape.rank > VIEW_MAX_RANK) return false;
        memcpy(cd, src->shape.dims, src->shape.rank * sizeof *cd);
        cd[iv->vdim] = 1;
        if (!pos_reshape(c, &v.pos, &v.v, cd, src->shape.rank, in->shape.dims, in->shape.rank)) return false;
    }
    *out = v;
    return true;
}

/* compare(t + c(r), local iota along dim k), either order, with c(r) =
 * -block(r)·n for the iota's local length n along k (one_hot(labels -
 * r·V/n, V/n), a vocab-parallel label mask): t + c(r) CMP i exactly when
 * t CMP i + block(r)·n, so device r holds block r along k of compare(t,
 * global iota), for every t (integers, no wrap: one affine piece of slope
 * 1). t must not vary along k (it is broadcast there). */
static bool compare_local_iota(lstate *s, lval *out) {
    lift_ctx *c = s->c;
    const hlo_instr *in = s->in;
    if (in->op != OP_COMPARE || in->noperands != 2 || in->shape.rank > VIEW_MAX_RANK) return false;
    for (uint32_t k = 0; k < 2; k++) {
        const lval *x = &s->ops[k], *io = &s->ops[1 - k];
        const hlo_instr *ii = &s->comp->instrs[in->operands[1 - k]];
        if (x->kind != LV_PW || x->pos == EID_NONE || x->v.partial || io->kind != LV_TERM || !view_is_dup(&io->v))
            continue;
        int dim = lf_iota_chain(c, s->comp, ii, NULL, NULL);
        if (dim < 0 || x->v.dims[dim].naxes) continue;
        double *off = arena_alloc(c->a, (size_t)c->ndev * sizeof *off);
        bool shift = true;
        for (int64_t d = 0; d < c->ndev && shift; d++) {
            const pw_fn *f = &x->pw[d];
            shift = f->n == 1 && f->p[0].lo == PW_NEG_INF && f->p[0].hi == PW_POS_INF && f->p[0].a == 1 &&
                    f->p[0].b != INT64_MIN;
            off[d] = shift ? -(double)f->p[0].b : 0;
        }
        int64_t base, parts;
        view_dim bax;
        uint32_t mask = shift ? lf_block_offsets(c, off, 1, in->shape.dims[dim], &base, &parts, &bax) : 0;
        if (!mask || base != 0 || (mask & view_axes_used(&x->v))) continue;
        view want = x->v, pv = x->v;
        want.dims[dim] = bax;
        eid pos = x->pos, ch[2];
        if (!pos_reshard(c, &pos, &pv, &want)) continue;
        int64_t g[VIEW_MAX_RANK];
        lf_global_dims(c, &want, &in->shape, g);
        ch[k] = pos;
        if (lf_iota_chain(c, s->comp, ii, &want, &ch[1 - k]) < 0) continue;
        *out = term(lf_node(c, c->cur, in, ch, 2, g, c->origin), want, false);
        return true;
    }
    return false;
}

/* The ops index arithmetic goes through. True when handled (*out set). */
/* The one number every element and device of operand o holds (a splat
 * constant), into *k; false when it is not one. */
static bool splat_number(lstate *s, uint32_t o, double *k) {
    const lval *x = &s->ops[o];
    const interp_val *v = x->kind == LV_TERM && !x->v.partial && lf_scale_of(x) == 1 ? lf_kval(s->c, x->cls) : NULL;
    if (lf_dev_splat(x, s->c->ndev)) {
        *k = x->dev[0];
        return true;
    }
    if (!v || v->n < 1) return false;
    *k = interp_val_get(v, 0);
    for (int64_t e = 1; e < v->n; e++)
        if (interp_val_get(v, e) != *k) return false;
    return true;
}

/* An elementwise op that keeps 0 (f(0) = 0) over one masked row and splat
 * constants: the mask of f of its row, zeros still zeros (a relu of a
 * vocab-parallel lookup before its psum). */
static bool mask_keeps_zero(lstate *s, lval *out) {
    lift_ctx *c = s->c;
    const hlo_instr *in = s->in;
    int mo = -1;
    double k = 0;
    for (uint32_t o = 0; o < in->noperands; o++) {
        if (s->ops[o].kind == LV_MASK) {
            if (mo >= 0) return false;
            mo = (int)o;
        } else if (!splat_number(s, o, &k)) {
            return false;
        }
    }
    const lval *m = mo >= 0 ? &s->ops[mo] : NULL;
    if (!m || m->n || m->carry || m->hit == EID_NONE || !graph_op_elementwise(in->op) || in->noperands > 2) return false;
    bool keeps = false;
    if (in->noperands == 1)
        keeps = in->op == OP_NEGATE || in->op == OP_TANH || in->op == OP_ABS || in->op == OP_SINE || in->op == OP_SQRT ||
                in->op == OP_COPY || (in->op == OP_CONVERT && in->shape.dtype != DT_PRED);
    else if (in->op == OP_MAXIMUM || in->op == OP_MINIMUM) keeps = k == 0;
    else if (in->op == OP_MULTIPLY) keeps = isfinite(k);
    else if (in->op == OP_DIVIDE) keeps = mo == 0 && isfinite(k) && k != 0;
    if (!keeps) return false;
    uint32_t r;
    const int64_t *hd = eg_type_dims(c->g, eg_class_type(c->g, m->hit), &r);
    int64_t dims[VIEW_MAX_RANK];
    if (r != in->shape.rank || r > VIEW_MAX_RANK) return false;
    memcpy(dims, hd, r * sizeof *dims);
    eid ch[2];
    ch[mo] = m->hit;
    if (in->noperands == 2) {
        int dt = s->comp->instrs[in->operands[1 - mo]].shape.dtype;
        interp_val *kv = lf_fold_size_ok(dims, r) ? interp_val_new(dt, r, dims) : NULL;
        if (!kv) return false;
        for (int64_t e = 0; e < kv->n; e++) interp_val_set(kv, e, k);
        ch[1 - mo] = lf_const_term(c, kv, c->origin);
    }
    *out = *m;
    out->hit = lf_node(c, c->cur, in, ch, in->noperands, dims, c->origin);
    out->cls = EID_NONE;
    return true;
}

/* ---- index predicates ANDed with a plain predicate (lval.conj) ---- */

/* x as a plain predicate a conjunct may take: data of the value's view. */
static bool plain_pred(const lift_ctx *c, const lval *x, const hlo_instr *xi, const view *v) {
    (void)c;
    return x->kind == LV_TERM && x->cls != EID_NONE && !x->assumed && !x->v.partial && xi->shape.dtype == DT_PRED &&
           lf_same_sharding(&x->v, v);
}

/* and(p, t) of an index predicate p (LV_PW of pred) and a plain predicate t
 * of the same view: p with t as its conjunct (ANDed with p's own). */
static bool conj_and(lstate *s, lval *out) {
    lift_ctx *c = s->c;
    const hlo_instr *in = s->in;
    if (in->op != OP_AND || in->noperands != 2 || in->shape.dtype != DT_PRED) return false;
    for (int k = 0; k < 2; k++) {
        const lval *p = &s->ops[k], *t = &s->ops[1 - k];
        if (p->kind != LV_PW || !plain_pred(c, t, &s->comp->instrs[in->operands[1 - k]], &p->v)) continue;
        *out = *p;
        out->cls = EID_NONE;
        out->conj = true;
        if (p->conj) {
            eid both[2] = {p->hit, t->cls};
            out->hit = eg_add(c->g, OP_AND, 0, eg_class_type(c->g, t->cls), both, 2, c->origin);
        } else {
            out->hit = t->cls;
        }
        return true;
    }
    return false;
}

/* Whether every device holds the same function (a predicate of data
 * alone: made a number, it is data, not index arithmetic). */
static bool pw_same_everywhere(const lift_ctx *c, const pw_fn *f) {
    for (int64_t d = 1; d < c->ndev; d++)
        if (f[d].n != f[0].n || memcmp(f[d].p, f[0].p, f[0].n * sizeof *f[0].p)) return false;
    return true;
}

/* Whether every piece of every device's function is 0 or 1 (a predicate,
 * or one converted to a number). */
static bool pw_is_01(const lift_ctx *c, const pw_fn *f) {
    for (int64_t d = 0; d < c->ndev; d++)
        for (uint32_t k = 0; k < f[d].n; k++)
            if (f[d].p[k].a != 0 || (f[d].p[k].b != 0 && f[d].p[k].b != 1)) return false;
    return true;
}

/* The masked row m kept only where the plain predicate conj holds too: its
 * row select(conj, row, 0) (zeros and junk stay as they are). */
static bool conj_into(lift_ctx *c, eid conj, lval *m) {
    uint32_t t = eg_class_type(c->g, m->hit), cr, hr;
    const int64_t *cd = eg_type_dims(c->g, eg_class_type(c->g, conj), &cr), *hd = eg_type_dims(c->g, t, &hr);
    if (cr != hr || memcmp(cd, hd, cr * sizeof *cd)) return false;
    eid sel[3] = {conj, m->hit, lf_splat(c, t, 0)};
    m->hit = eg_add(c->g, OP_SELECT, 0, t, sel, 3, c->origin);
    return true;
}

/* The masked row m (operand mo) kept where the index predicate p holds
 * (and its conjunct, if any), zeros elsewhere: select(p, m, 0), or m times p
 * converted to a number. */
static bool mask_where(lstate *s, const lval *p, uint32_t mo, lval *out) {
    lift_ctx *c = s->c;
    const lval *m = &s->ops[mo];
    if (m->kind != LV_MASK || m->n || m->carry || m->hit == EID_NONE || p->kind != LV_PW || !pw_is_01(c, p->pw))
        return false;
    lval r = *m;
    if (!lf_same_sharding(&r.v, &p->v)) pos_reshard(c, &r.pos, &r.v, &p->v);
    if (!same_pos(&r.pos, p->pos) || !lf_same_sharding(&r.v, &p->v)) return false;
    r.pw = pw_alloc(c);
    pw_fn zero;
    pw_const(&zero, TAG_ZERO);
    for (int64_t d = 0; d < c->ndev; d++)
        if (!pw_select(&p->pw[d], &m->pw[d], &zero, &r.pw[d])) return false;
    r.cls = EID_NONE;
    if (p->conj && !conj_into(c, p->hit, &r)) return false;
    *out = r;
    return true;
}

/* multiply(m, convert(p)) of a masked row and an index predicate made a
 * number: mask_where. */
static bool mask_times_pred(lstate *s, lval *out) {
    if (s->in->op != OP_MULTIPLY || s->in->noperands != 2) return false;
    for (uint32_t k = 0; k < 2; k++) {
        const lval *p = &s->ops[1 - k], *x = &s->ops[k];
        if (p->kind != LV_PW || !pw_is_01(s->c, p->pw)) continue;
        if (x->kind == LV_MASK && mask_where(s, p, k, out)) return true;
        /* a plain value times the predicate: the value where it holds */
        if (x->kind == LV_TERM && data_pred(s->c, p)) {
            lval q = *p;
            q.conj = false;
            if (term_where(s->c, &q, x, 1, out) && (!p->conj || conj_into(s->c, p->hit, out))) return true;
        }
    }
    return false;
}

/* An op with an index predicate that has a conjunct among its operands:
 * layout ops and converts move the conjunct alike; a select of a masked row
 * and zeros by it, or the masked row times it, is mask_where; and takes
 * more conjuncts. Anything else is not related (false: the operands' plain
 * terms are used). */
static bool conj_instr(lstate *s, lval *out) {
    lift_ctx *c = s->c;
    const hlo_instr *in = s->in;
    if (conj_and(s, out) || mask_times_pred(s, out)) return true;
    if (in->op == OP_SELECT && in->noperands == 3 && instr_is_zero_literal(s->comp, &s->comp->instrs[in->operands[2]])) {
        if (s->ops[1].kind == LV_MASK) return mask_where(s, &s->ops[0], 1, out);
        /* a plain value where p holds (masked_term), kept where the conjunct does */
        lval saved = s->ops[0];
        s->ops[0].conj = false;
        s->ops[0].hit = EID_NONE;
        bool ok = masked_term(s, out) && conj_into(c, saved.hit, out);
        s->ops[0] = saved;
        return ok;
    }
    bool shape_op = in->op == OP_RESHAPE || in->op == OP_BITCAST || in->op == OP_BROADCAST || in->op == OP_COPY ||
                    in->op == OP_CONVERT;
    if (!shape_op || in->noperands != 1) return false;
    lval saved = s->ops[0];
    s->ops[0].conj = false;
    s->ops[0].hit = EID_NONE;
    bool ok = lf_pw_instr(s, out) && out->kind == LV_PW;
    s->ops[0] = saved;
    if (!ok) return false;
    /* the conjunct stays a predicate: moved as the value is, not converted */
    eid conj = saved.hit;
    if (in->op != OP_CONVERT) {
        int64_t dims[VIEW_MAX_RANK];
        lf_global_dims(c, &out->v, &in->shape, dims);
        conj = eg_add(c->g, in->op, lf_encode_attrs(c, c->cur, in), lf_type_of(c, DT_PRED, dims, in->shape.rank), &conj, 1,
                      c->origin);
        if (in->op == OP_RESHAPE) conj = lf_mk_reshape(c, saved.hit, lf_type_of(c, DT_PRED, dims, in->shape.rank), c->origin);
    }
    out->hit = conj;
    out->conj = true;
    return true;
}

bool lf_pw_instr(lstate *s, lval *out) {
    lift_ctx *c = s->c;
    const hlo_instr *in = s->in;
    for (uint32_t o = 0; o < in->noperands; o++)
        if (s->ops[o].kind == LV_PW && s->ops[o].conj) return conj_instr(s, out);
    if (conj_and(s, out)) return true;
    if (in->op == OP_CONCATENATE && ivec_concatenate(s, out)) return true;
    if (in->op == OP_REDUCE && ivec_reduce(s, out)) return true;
    if (in->op != OP_GATHER && ivec_elementwise(s, out)) return true;
    bool any_pw = false, any_dev = false, any_src = false, any_ksrc = false, any_mask = false;
    for (uint32_t o = 0; o < in->noperands; o++) {
        const lval *x = &s->ops[o];
        any_pw |= x->kind == LV_PW;
        any_mask |= x->kind == LV_MASK;
        /* Index arithmetic on data and any device value (constants included) is
         * analysed on both sides alike, so gathers resolve the same way; values
         * that do not depend on the device keep their plain term as well. */
        any_dev |= x->kind == LV_DEV;
        /* Data only: positions computed from iota meet the baseline's slices, not
         * its gathers, so they stay plain terms, unless a device value offsets
         * them (a position-parallel lookup). */
        any_src |= x->kind == LV_TERM && !x->konst;
        any_ksrc |= x->kind == LV_TERM && x->konst;
    }
    if (in->op == OP_GATHER && (s->ops[1].kind == LV_PW || s->ops[1].kind == LV_IVEC)) return pw_gather(s, out);
    if (in->op == OP_SELECT && select_in_domain(s, out)) return true;
    if (in->op == OP_SELECT && masked_term(s, out)) return true;
    if (in->op == OP_DYNAMIC_UPDATE_SLICE && dus_at_index(s, out)) return true;
    if (in->op == OP_SELECT && dus_kept(s, out)) return true;
    if (compare_local_iota(s, out) || mask_times_pred(s, out)) return true;
    if (!any_pw && !any_mask && !(any_dev && (any_src || any_ksrc))) return false;
    int dt = in->shape.dtype;
    lval v = {.kind = LV_PW, .v = view_dup(in->shape.rank), .pos = EID_NONE, .cls = EID_NONE};
    if (any_mask) {
        if (mask_keeps_zero(s, out) || mask_times_pred(s, out)) return true;
        if (in->op == OP_ADD && s->ops[0].kind == LV_MASK && s->ops[1].kind == LV_MASK &&
            !(lf_mask_resolves(c, &s->ops[0]) && lf_mask_resolves(c, &s->ops[1]))) {
            /* Kept as a sum of masked parts; an all-reduce resolves each
             * (two rows every device holds, a token's and its position's
             * embeddings, are a sum of terms). */
            lval m = {.kind = LV_MASK, .v = view_dup(in->shape.rank), .pos = EID_NONE, .cls = EID_NONE, .src = EID_NONE, .hit = EID_NONE};
            uint32_t n = 0;
            for (int k = 0; k < 2; k++) n += s->ops[k].n ? s->ops[k].n : 1;
            m.elems = arena_alloc(c->a, n * sizeof *m.elems);
            for (int k = 0; k < 2; k++) {
                const lval *x = &s->ops[k];
                if (x->n) memcpy(m.elems + m.n, x->elems, x->n * sizeof *x->elems), m.n += x->n;
                else m.elems[m.n++] = *x;
            }
            /* the plain term of the sum, where both parts have one under one
             * view (rows looked up from tables every device holds whole, at
             * indices no device offsets: what the program writes is the
             * baseline's own bounds-checked lookups, added) */
            /* (under the view of the part sharded over more axes: the plain
             * term, index_plain_term's, re-reads the other part under it:
             * positions broadcast over a batch the token ids are sharded along) */
            m.v = __builtin_popcount(view_axes_used(&s->ops[1].v)) > __builtin_popcount(view_axes_used(&s->ops[0].v))
                      ? s->ops[1].v
                      : s->ops[0].v;
            if (s->ops[0].cls != EID_NONE && s->ops[1].cls != EID_NONE && view_equal(&s->ops[0].v, &s->ops[1].v) &&
                eg_class_type(c->g, s->ops[0].cls) == eg_class_type(c->g, s->ops[1].cls)) {
                int64_t dims[VIEW_MAX_RANK];
                m.v = s->ops[0].v;
                lf_global_dims(c, &m.v, &in->shape, dims);
                eid ch[2] = {s->ops[0].cls, s->ops[1].cls};
                m.cls = lf_node(c, c->cur, in, ch, 2, dims, c->origin);
            }
            *out = m;
            return true;
        }
        if (in->op == OP_SELECT && s->ops[0].kind == LV_PW) {
            /* select(pred, masked or zero, masked or zero): tags per range. */
            const lval *pr = &s->ops[0];
            lval m = {.kind = LV_MASK, .v = pr->v, .pos = pr->pos, .hit = EID_NONE, .domain = 0, .src = pr->src, .cls = EID_NONE};
            m.pw = pw_alloc(c);
            pw_fn *tags[2];
            for (int k = 0; k < 2; k++) {
                const lval *x = &s->ops[1 + k];
                if (x->kind == LV_MASK) {
                    if (!lf_same_sharding(&m.v, &x->v)) pos_reshard(c, &m.pos, &m.v, &x->v);
                    if (!same_pos(&m.pos, x->pos) || (m.hit != EID_NONE && m.hit != x->hit) || !lf_same_sharding(&m.v, &x->v))
                        return false;
                    m.hit = x->hit;
                    m.domain = x->domain;
                    m.in_domain = x->in_domain;
                    tags[k] = x->pw;
                } else if (x->kind == LV_TERM) {
                    tags[k] = pw_alloc(c);
                    int tag = instr_is_zero_literal(s->comp, &s->comp->instrs[in->operands[1 + k]]) ? TAG_ZERO : TAG_JUNK;
                    for (int64_t d = 0; d < c->ndev; d++) pw_const(&tags[k][d], tag);
                } else {
                    return false;
                }
            }
            for (int64_t d = 0; d < c->ndev; d++)
                if (!pw_select(&pr->pw[d], &tags[0][d], &tags[1][d], &m.pw[d])) return false;
            *out = m;
            return true;
        }
        if ((in->op == OP_ALL_REDUCE || in->op == OP_REDUCE_SCATTER) && instr_reducer(c->cur, in) == RED_SUM &&
            s->ops[0].kind == LV_MASK) {
            /* The sum over every device: exactly one holds the row, the others 0.
             * A reduce-scatter leaves block r of that sum on device r. */
            const lval *m = &s->ops[0];
            bool scatter = in->op == OP_REDUCE_SCATTER;
            int axes = lift_groups_axes(c, in, scatter);
            if (dbg_on(DBG_LIFT))
                fprintf(stderr, "lift: %s sums masks over axes %d (mask %s, %u parts)\n", in->name, axes,
                        m->n ? "sum" : "single", m->n);
            eid sum;
            if (axes <= 0) return false;
            /* (summed over some of the axes that split the hits: still a mask) */
            if (!mask_sum(c, m, (uint32_t)axes, &sum)) return !scatter && mask_sum_partly(c, m, (uint32_t)axes, out);
            if (dbg_on(DBG_LIFT)) {
                strbuf b;
                sb_init(&b);
                eg_print_term(&b, c->g, sum, 4);
                fprintf(stderr, "lift: %s is the row %s\n", in->name, b.s);
                sb_free(&b);
            }
            view rv = m->n ? m->elems[0].v : m->v;
            if (scatter) {
                uint32_t nd;
                const int64_t *dd = instr_ints(in, A_DIMENSIONS, &nd);
                if (nd != 1) return false;
                for (uint32_t a = 0; a < c->mesh->naxes; a++)
                    if ((uint32_t)axes >> a & 1) rv.dims[dd[0]].axes[rv.dims[dd[0]].naxes++] = (uint8_t)a;
            }
            *out = term(sum, rv, false);
            return true;
        }
        return false;
    }
    if (in->op == OP_RESHAPE || in->op == OP_BITCAST || in->op == OP_BROADCAST || in->op == OP_CONVERT ||
        in->op == OP_COPY) {
        if (s->ops[0].kind != LV_PW) return false;
        /* a predicate made a number (0 or 1: a mask multiplied in) keeps its values */
        int from_dt = s->comp->instrs[in->operands[0]].shape.dtype;
        bool pred_number = in->op == OP_CONVERT && from_dt == DT_PRED && dtype_is_float(dt) && !pw_same_everywhere(c, s->ops[0].pw);
        if (in->op == OP_CONVERT && !(dtype_is_int(dt) || dt == DT_PRED) && !pred_number) return false;
        /* A convert keeps the values where the new type holds them: to pred
         * only from pred (else it is x != 0). */
        int sdt = s->comp->instrs[in->operands[0]].shape.dtype;
        if (in->op == OP_CONVERT && dt == DT_PRED && sdt != DT_PRED) return false;
        const hlo_instr *src = &s->comp->instrs[in->operands[0]];
        v.pw = s->ops[0].pw;
        if (in->op == OP_CONVERT && !pred_number) {
            v.pw = pw_alloc(c);
            memcpy(v.pw, s->ops[0].pw, (size_t)c->ndev * sizeof *v.pw);
            if (!pw_as_dtype(dt, v.pw, c->ndev)) return false;
        }
        v.pos = s->ops[0].pos;
        v.v = s->ops[0].v;
        v.src = s->ops[0].src;
        if (in->op == OP_BROADCAST) {
            uint32_t nb;
            const int64_t *bd = instr_ints(in, A_DIMENSIONS, &nb);
            pos_broadcast(c, &v.pos, &v.v, bd, nb, in->shape.dims, in->shape.rank, NULL);
        } else if (in->op == OP_RESHAPE || in->op == OP_BITCAST) {
            if (!pos_reshape(c, &v.pos, &v.v, src->shape.dims, src->shape.rank, in->shape.dims, in->shape.rank))
                return false;
        }
        *out = v;
        return true;
    }
    if (in->op == OP_REDUCE && in->noperands == 2 && s->ops[0].kind == LV_PW && s->ops[1].kind == LV_DEV) {
        /* A reduction over unit dimensions only, from its identity: the value itself. */
        const hlo_instr *src = &s->comp->instrs[in->operands[0]];
        uint32_t nd;
        const int64_t *rd = instr_ints(in, A_DIMENSIONS, &nd);
        for (uint32_t k = 0; k < nd; k++)
            if (src->shape.dims[rd[k]] != 1) return false;
        int red = instr_reducer(c->cur, in);
        double init = s->ops[1].dev[0];
        bool identity = (red == RED_AND && init == 1) || ((red == RED_OR || red == RED_SUM || red == RED_XOR) && init == 0);
        if (!identity) return false;
        v.pw = s->ops[0].pw;
        v.pos = s->ops[0].pos;
        v.v = s->ops[0].v;
        v.src = s->ops[0].src;
        if (!pos_reshape(c, &v.pos, &v.v, src->shape.dims, src->shape.rank, in->shape.dims, in->shape.rank)) return false;
        *out = v;
        return true;
    }
    if (!(dtype_is_int(dt) || dt == DT_PRED) || !graph_op_elementwise(in->op)) return false;
    pw_fn *f[3];
    eid pos = EID_NONE;
    if (in->noperands > 3) return false;
    const view *common = NULL;
    eid src = EID_NONE;
    for (uint32_t o = 0; o < in->noperands; o++) {
        eid p, sr;
        const view *vw;
        if (!as_pw(s, o, &f[o], &p, &vw, &sr) || !same_pos(&pos, p) || !same_pos(&src, sr)) return false;
        if (vw && common && !lf_same_sharding(vw, common)) return false;
        if (vw) common = vw;
    }
    v.pw = pw_alloc(c);
    v.pos = pos;
    v.src = src;
    if (common) v.v = *common;
    for (int64_t d = 0; d < c->ndev; d++)
        if (!pw_apply(in, f, d, &v.pw[d])) return false;
    if (!pw_as_dtype(dt, v.pw, c->ndev)) return false;
    *out = v;
    return true;
}


