/* lift_shape — ops that move or cut elements without computing (lift.c
 * dispatches to them).
 * Owns the transfer functions of broadcast, reverse, transpose, reshape and
 * bitcast (with the readings a reshape of unit dims has: the one the
 * baseline computes is taken), slice, concatenate, dynamic-slice (offsets
 * the same everywhere, or per-device blocks of mesh axes) and
 * dynamic-update-slice. Per-device windows a slice leaves are
 * lift_win.c's; all-to-all layouts lift_layout.c's. */
#include "lift.h"
#include "lift_int.h"

#include "eattr.h"
#include "interp.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- broadcast, reverse, transpose ---- */

bool lf_broadcast_adds(const hlo_instr *b, uint32_t d) {
    if (b->op != OP_BROADCAST || d >= b->shape.rank) return false;
    uint32_t nd;
    const int64_t *bd = instr_ints(b, A_DIMENSIONS, &nd);
    for (uint32_t k = 0; k < nd; k++)
        if (bd[k] == (int64_t)d) return false;
    return true;
}

/* A broadcast is constant along the dims it adds, so an added dim of local
 * size 1 may as well be read as sharded over mesh axes the view leaves free
 * (GSPMD's grouped-query heads at tp8: one kv head repeated, one copy per
 * device). Of those true readings, take one whose term the baseline has
 * (its repeat of the kv heads); v is left alone when none is. Longer added
 * dims are left alone: a term such as broadcast(iota) the baseline has at
 * many sizes (positions over the global batch, a causal mask) says too
 * little about which axes the program meant. */

static void broadcast_sharded_reading(lift_ctx *c, const hlo_instr *in, const lval *x, const int64_t *bd, uint32_t nd,
                                      view *v) {
    uint32_t used = view_axes_used(v);
    uint32_t all = (1u << c->mesh->naxes) - 1;
    if (v->partial || lf_kval(c, x->cls) || (used & all) == all) return;
    uint32_t attr = 0;
    for (uint32_t d = 0; d < in->shape.rank; d++) {
        bool added = true;
        for (uint32_t k = 0; k < nd; k++) added &= bd[k] != d;
        if (!added || in->shape.dims[d] != 1) continue;
        if (!attr) attr = lf_encode_attrs(c, c->cur, in);
        for (uint32_t mask = 1; mask <= all; mask++) {
            if (mask & used) continue;
            view w = *v;
            w.dims[d] = lf_axes_dim(c, mask);
            int64_t dims[VIEW_MAX_RANK];
            lf_global_dims(c, &w, &in->shape, dims);
            eid r = eg_lookup(c->g, OP_BROADCAST, attr, lf_type_of(c, in->shape.dtype, dims, in->shape.rank), &x->cls, 1);
            if (r != EID_NONE && (eg_class_origin(c->g, r) & EG_BASELINE)) {
                *v = w;
                return;
            }
        }
    }
}

/* Whether the broadcast's operand is a reshape dropping a unit dim right
 * before its dim d that the unit dim's sharding went into (one kv head per
 * device, its head dim dropped). */
static bool dropped_sharded_unit(const lstate *s, uint32_t d) {
    const hlo_instr *xi = &s->comp->instrs[s->in->operands[0]];
    if ((xi->op != OP_RESHAPE && xi->op != OP_BITCAST) || xi->noperands != 1) return false;
    uint32_t yo = xi->operands[0];
    const shape *ys = &s->comp->instrs[yo].shape, *xs = &xi->shape;
    const lval *y = &s->vals[yo], *x = &s->ops[0];
    if (ys->rank != xs->rank + 1 || d >= xs->rank || ys->dims[d] != 1 || y->kind != LV_TERM || !y->v.dims[d].naxes ||
        y->v.dims[d].naxes != x->v.dims[d].naxes || memcmp(y->v.dims[d].axes, x->v.dims[d].axes, y->v.dims[d].naxes))
        return false;
    for (uint32_t k = 0; k < xs->rank; k++)
        if (xs->dims[k] != ys->dims[k < d ? k : k + 1]) return false;
    return true;
}

/* A broadcast adding a dim of n copies right before a sharded dim d of the
 * operand (local extent l, P blocks): device r holds n copies of its block r
 * — block r of jnp.repeat of the operand's dim d split into [P, l], along
 * the P blocks (jnp.broadcast_to of one kv head per device, which XLA
 * writes as a reshape dropping the sharded unit dim, then this broadcast:
 * taken only after such a reshape).
 * Taken when the baseline repeats n copies before a dim of extent l: the
 * global term reshape(broadcast(reshape(x, [.., P, l, ..]), [.., P, n, l,
 * ..]), [.., P·n, l, ..]), the merged dim sharded as d was. Where several
 * devices share a block (tp ranks over fewer kv heads: d over tp's major
 * sub-axis), the copies are as well the devices' blocks of n·Q copies, Q
 * the size of mesh axes the operand leaves free (tp's minor sub-axis): the
 * merged dim is then sharded over d's axes then those, when the baseline
 * repeats n·Q copies (all copies alike, any block of them is the same). */
static bool broadcast_repeat_reading(lstate *s, const int64_t *bd, uint32_t nd, lval *out) {
    lift_ctx *c = s->c;
    const hlo_instr *in = s->in;
    const lval *x = &s->ops[0];
    uint32_t R = in->shape.rank, rx = nd;
    if (x->v.partial || R + 1 > VIEW_MAX_RANK || rx + 1 > VIEW_MAX_RANK) return false;
    uint32_t all = (1u << c->mesh->naxes) - 1, freeax = all & ~view_axes_used(&x->v);
    for (uint32_t d = 0; d < nd; d++) {
        uint32_t j = (uint32_t)bd[d] - 1;
        if (bd[d] < 1 || !x->v.dims[d].naxes || (d > 0 && bd[d - 1] == (int64_t)j)) continue;
        int64_t n0 = in->shape.dims[j], l = in->shape.dims[j + 1], P = view_dim_parts(&x->v, c->mesh, d);
        if (n0 < 2 || P < 2 || !dropped_sharded_unit(s, d)) continue;
        /* the free axes the copies spread over (none first) */
        uint32_t mask = 0;
        int64_t n = n0;
        for (mask = 0; mask <= freeax; mask++) {
            if (mask & ~freeax) continue;
            n = n0;
            for (uint32_t a = 0; a < c->mesh->naxes; a++)
                if (mask >> a & 1) n *= c->mesh->sizes[a];
            if (x->v.dims[d].naxes + (uint32_t)__builtin_popcount(mask) <= MESH_MAX_AXES && lf_baseline_repeats(c, n, l))
                break;
        }
        if (mask > freeax) continue;
        /* x's global dims with d split into [P, l] */
        int64_t gx[VIEW_MAX_RANK], s1[VIEW_MAX_RANK], s2[VIEW_MAX_RANK], b2[VIEW_MAX_RANK];
        const shape *xs = &s->comp->instrs[in->operands[0]].shape;
        lf_global_dims(c, &x->v, xs, gx);
        for (uint32_t k = 0, q = 0; k < rx; k++) {
            if (k == d) {
                s1[q] = P, b2[q++] = j;
                s1[q] = l, b2[q++] = j + 2;
            } else {
                s1[q] = gx[k], b2[q++] = bd[k] < (int64_t)j ? bd[k] : bd[k] + 1;
            }
        }
        view v = view_dup(R);
        for (uint32_t k = 0; k < nd; k++)
            if (k != d) v.dims[bd[k]] = x->v.dims[k];
        v.dims[j] = x->v.dims[d];
        for (uint32_t a = 0; a < c->mesh->naxes; a++)
            if (mask >> a & 1) v.dims[j].axes[v.dims[j].naxes++] = (uint8_t)a;
        int64_t g[VIEW_MAX_RANK];
        lf_global_dims(c, &v, &in->shape, g);
        for (uint32_t q = 0; q < R + 1; q++) s2[q] = q < j ? g[q] : q == j ? P : q == j + 1 ? n : g[q - 1];
        if (g[j] != P * n) continue;
        int dt = in->shape.dtype;
        eid y = lf_mk_reshape(c, x->cls, lf_type_of(c, dt, s1, rx + 1), c->origin);
        y = eg_add(c->g, OP_BROADCAST, lf_list_attr(c, A_DIMENSIONS, b2, rx + 1), lf_type_of(c, dt, s2, R + 1), &y, 1,
                   c->origin);
        *out = term(lf_mk_reshape(c, y, lf_type_of(c, dt, g, R), c->origin), v, x->assumed);
        return true;
    }
    return false;
}

lval lf_lift_broadcast(lstate *s) {
    lift_ctx *c = s->c;
    const hlo_instr *in = s->in;
    const lval *x = &s->ops[0];
    if (x->kind != LV_TERM) return unknown();
    uint32_t nd;
    const int64_t *bd = instr_ints(in, A_DIMENSIONS, &nd);
    view v = view_dup(in->shape.rank);
    for (uint32_t k = 0; k < nd; k++) v.dims[bd[k]] = x->v.dims[k];
    v.partial = x->v.partial;
    v.red = x->v.red;
    if (v.partial && v.red != RED_SUM) {
        strbuf why;
        sb_init(&why);
        view_print(&why, &x->v, c->mesh);
        lf_unsupported_suspect(c, KIND_MISSING_ALL_REDUCE, s->comp, in, "%s broadcasts a partial %s before it is reduced (%s); "
                               "such uses (an online softmax's running max) are not related yet", in->name,
                               reducer_name(v.red), why.s);
        sb_free(&why);
        return unknown();
    }
    lval rep;
    if (!c->baseline_mode && broadcast_repeat_reading(s, bd, nd, &rep)) return rep;
    if (!c->baseline_mode) broadcast_sharded_reading(c, in, x, bd, nd, &v);
    int64_t dims[VIEW_MAX_RANK];
    lf_global_dims(c, &v, &in->shape, dims);
    return term(lf_node(c, c->cur, in, &x->cls, 1, dims, c->origin), v, x->assumed);
}

/* reverse along dims that are not sharded: the reverse of the global term. */
lval lf_lift_reverse(lstate *s) {
    lift_ctx *c = s->c;
    const hlo_instr *in = s->in;
    const lval *x = &s->ops[0];
    if (x->kind != LV_TERM) return unknown();
    uint32_t nd;
    const int64_t *rd = instr_ints(in, A_DIMENSIONS, &nd);
    for (uint32_t k = 0; k < nd; k++)
        if (rd[k] < 0 || rd[k] >= x->v.rank || x->v.dims[rd[k]].naxes) {
            lf_unsupported(c, s->comp, in, "%s reverses a sharded dimension (the order of its blocks reverses too)", in->name);
            return unknown();
        }
    int64_t dims[VIEW_MAX_RANK];
    lf_global_dims(c, &x->v, &in->shape, dims);
    return term(lf_node(c, c->cur, in, &x->cls, 1, dims, c->origin), x->v, x->assumed);
}

lval lf_lift_transpose(lstate *s) {
    lift_ctx *c = s->c;
    const hlo_instr *in = s->in;
    const lval *x = &s->ops[0];
    if (x->kind != LV_TERM) return unknown();
    uint32_t np;
    const int64_t *perm = instr_ints(in, A_DIMENSIONS, &np);
    view v = x->v;
    v.rank = (uint8_t)in->shape.rank;
    for (uint32_t k = 0; k < np; k++) v.dims[k] = x->v.dims[perm[k]];
    int64_t dims[VIEW_MAX_RANK];
    lf_global_dims(c, &v, &in->shape, dims);
    return term(lf_node(c, c->cur, in, &x->cls, 1, dims, c->origin), v, x->assumed);
}

/* ---- reshape ---- */

/* Whether reshape(x) to in's local shape under view v (global dims) is a term
 * the baseline already has: of two true readings of a reshape, the one the
 * baseline computes is the useful one. Mirrors mk_reshape without adding. */
static bool reshape_meets_baseline(lift_ctx *c, eid x, const hlo_instr *in, const view *v) {
    int64_t dims[VIEW_MAX_RANK];
    lf_global_dims(c, v, &in->shape, dims);
    uint32_t t = lf_type_of(c, in->shape.dtype, dims, in->shape.rank);
    if (lf_kval(c, x)) return false;
    for (;;) {
        eid n = eg_class_first(c->g, x);
        if (n == EID_NONE || eg_node_op(c->g, n) != OP_RESHAPE) break;
        uint32_t k;
        x = eg_node_children(c->g, n, &k)[0];
    }
    eid r = eg_class_type(c->g, x) == t ? eg_find(c->g, x) : eg_lookup(c->g, OP_RESHAPE, 0, t, &x, 1);
    return r != EID_NONE && (eg_class_origin(c->g, r) & EG_BASELINE);
}

/* The next run of a reshape from dims a to dims b starting at a[i], b[j]:
 * [i, *i2) and [j, *j2) with equal products (false when the shapes disagree). */
bool lf_reshape_run(const int64_t *a, uint32_t ra, const int64_t *b, uint32_t rb, uint32_t i, uint32_t j, uint32_t *i2,
                        uint32_t *j2) {
    int64_t pa = 1, pb = 1;
    *i2 = i, *j2 = j;
    if (*i2 < ra) pa *= a[(*i2)++];
    if (*j2 < rb) pb *= b[(*j2)++];
    while (pa != pb) {
        if (pa < pb && *i2 < ra) pa *= a[(*i2)++];
        else if (*j2 < rb) pb *= b[(*j2)++];
        else return false;
    }
    return true;
}

/* A group of a reshape whose sharded input axes land on unit output dims
 * [out, outb) followed by the non-unit dim outb. */
typedef struct reshape_group {
    view_dim axes;
    uint32_t out, outb;
} reshape_group;

/* Another true reading of such a group: its axes (major first) spread over the
 * unit dims and then dim outb in order, each taking a run (possibly empty):
 * the flattened group still selects the same blocks, since only unit dims
 * precede a sharded one. One group at a time (the others as in v), the first
 * whose term the baseline has; false when none. */
static bool reshape_split_reading(lift_ctx *c, const lval *x, const hlo_instr *in, const view *v, const reshape_group *ag,
                                  uint32_t nag, view *out) {
    for (uint32_t gi = 0; gi < nag; gi++) {
        const reshape_group *g = &ag[gi];
        const view_dim *sd = &g->axes;
        uint32_t m = g->outb - g->out + 1, n = sd->naxes, cnt[8] = {0};
        if (m > ARRAY_LEN(cnt)) continue;
        /* Every composition of n into m runs, as an odometer over cnt. */
        for (;;) {
            uint32_t sum = 0;
            for (uint32_t q = 0; q < m; q++) sum += cnt[q];
            if (sum == n) {
                view w = *v;
                uint32_t next = 0;
                for (uint32_t q = 0; q < m; q++) {
                    view_dim *d = &w.dims[g->out + q];
                    d->naxes = 0;
                    for (uint32_t t = 0; t < cnt[q]; t++) d->axes[d->naxes++] = sd->axes[next++];
                }
                if (reshape_meets_baseline(c, x->cls, in, &w)) {
                    *out = w;
                    return true;
                }
            }
            uint32_t q = 0;
            while (q < m && ++cnt[q] > n) cnt[q++] = 0;
            if (q == m) break;
        }
    }
    return false;
}

/* reshape: groups of local dims with equal products map onto each other; a
 * sharded input dimension must be the major dimension of its group (unit dims
 * before it aside, sharded or not), and then the major output dimension of
 * the group carries the sharding, the axes of several such dims major first
 * (block sharding of a product splits its major factor). When that is a unit
 * dim followed by others, the first non-unit one may carry it instead, or the
 * axes may spread over the unit dims and it: all are true readings, and the
 * one whose term the baseline already has is taken (the unit dim by
 * default). Anything else needs a layout view. */
/* A reshape that moves the one sharded unit dim across non-unit dims to the
 * output's one unit dim ([6, 1, 8] -> [1, 6, 8] where the 1 is a vmapped
 * ensemble sharded over its axis; [2, 1, 8, 8] -> [2, 8, 1, 8] where the 1 is
 * the heads over tp and the 2 the batch over dp; XLA writes the transpose of
 * a unit dim as a reshape): locally a relabelling, globally a transpose of
 * the sharded unit dim to where the unit dim lands. The non-unit dims keep
 * their order, shardings and blocks. */
static bool unit_dim_moved_to(lstate *s, uint32_t k, uint32_t jo, lval *out);

/* The shape a reshape's operand value has (lstate.from). */
static const shape *reshape_from(const lstate *s) {
    return s->from ? s->from : &s->comp->instrs[s->in->operands[0]].shape;
}

/* The one dim of local size 1 that x's view shards, or src's rank when
 * there is none or there are several. */
static uint32_t sharded_unit_dim(const lval *x, const shape *src) {
    uint32_t k = src->rank;
    for (uint32_t d = 0; d < src->rank; d++)
        if (x->v.dims[d].naxes && src->dims[d] == 1) {
            if (k < src->rank) return src->rank;
            k = d;
        }
    return k;
}

/* The dims of `dims` other than unit dims, in order (k: their sizes, idx:
 * where they are); *at: how many of them come before dim mark. */
static uint32_t nonunit_dims(const int64_t *dims, uint32_t rank, uint32_t mark, uint32_t *at, int64_t *k, uint32_t *idx) {
    uint32_t n = 0;
    for (uint32_t d = 0; d < rank; d++) {
        if (d == mark) *at = n;
        if (dims[d] != 1) idx[n] = d, k[n++] = dims[d];
    }
    return n;
}

/* The global dims of x's term with its unit dims dropped and the sharded
 * one (parts devices) kept at position na among the n non-unit local dims
 * ka at ia: the shape the term is reshaped to before the device's index
 * moves. False when a view dim has no parts. */
static bool device_index_dims(lift_ctx *c, const lval *x, const int64_t *ka, const uint32_t *ia, uint32_t n,
                              uint32_t na, int64_t parts, int64_t *g1) {
    for (uint32_t q = 0, t = 0; q <= n; q++) {
        if (q == na) {
            g1[q] = parts;
            continue;
        }
        int64_t pt = view_dim_parts(&x->v, c->mesh, ia[t]);
        if (pt < 1) return false;
        g1[q] = ka[t++] * pt;
    }
    return true;
}

static bool unit_dim_moved(lstate *s, lval *out) {
    lift_ctx *c = s->c;
    const hlo_instr *in = s->in;
    const shape *src = reshape_from(s);
    const lval *x = &s->ops[0];
    const int64_t *b = in->shape.dims;
    uint32_t ra = src->rank, rb = in->shape.rank, k, nunits = 0;
    if (ra > VIEW_MAX_RANK || rb > VIEW_MAX_RANK || (k = sharded_unit_dim(x, src)) == ra) return false;
    for (uint32_t d = 0; d < rb; d++) nunits += b[d] == 1;
    /* Several unit output dims ([16, 16, 1] -> [1, 1, 16, 16]: a window's
     * batch beside one head per device): the one whose term the baseline
     * has, if any (else the reshape's other readings). */
    for (uint32_t jo = 0; jo < rb; jo++) {
        lval t;
        if (b[jo] != 1 || !unit_dim_moved_to(s, k, jo, &t)) continue;
        if (nunits == 1 || (eg_class_origin(c->g, t.cls) & EG_BASELINE)) {
            *out = t;
            out->ambiguous = nunits > 1;
            return true;
        }
    }
    return false;
}

/* unit_dim_moved with the sharded unit input dim k landing on unit output
 * dim jo (the other unit dims unsharded, of global size 1). */
static bool unit_dim_moved_to(lstate *s, uint32_t k, uint32_t jo, lval *out) {
    lift_ctx *c = s->c;
    const hlo_instr *in = s->in;
    const shape *src = reshape_from(s);
    const lval *x = &s->ops[0];
    const int64_t *a = src->dims, *b = in->shape.dims;
    uint32_t ra = src->rank, rb = in->shape.rank, na = 0, nb = 0;
    /* the non-unit dims alike, in order (ia, ib: where they are); where the
     * sharded unit dim sits among them */
    int64_t ka[VIEW_MAX_RANK], kb[VIEW_MAX_RANK];
    uint32_t ia[VIEW_MAX_RANK], ib[VIEW_MAX_RANK];
    uint32_t nka = nonunit_dims(a, ra, k, &na, ka, ia), nkb = nonunit_dims(b, rb, jo, &nb, kb, ib);
    if (nka != nkb || memcmp(ka, kb, nka * sizeof *ka) || na == nb) return false;
    int64_t parts = view_dim_parts(&x->v, c->mesh, k), g1[VIEW_MAX_RANK], perm[VIEW_MAX_RANK];
    uint32_t n = nka + 1;
    /* the global term with the unsharded unit dims dropped, the sharded one at na */
    if (!device_index_dims(c, x, ka, ia, nka, na, parts, g1)) return false;
    /* output order: the non-unit dims with the sharded one at nb */
    for (uint32_t q = 0, t = 0; q < n; q++) {
        uint32_t from = q == nb ? na : (t < na ? t : t + 1);
        if (q != nb) t++;
        perm[q] = from;
    }
    int dt = in->shape.dtype;
    eid y = lf_mk_reshape(c, x->cls, lf_type_of(c, dt, g1, n), c->origin);
    y = lf_mk_transpose(c, y, perm);
    view v = view_dup(rb);
    v.dims[jo] = x->v.dims[k];
    for (uint32_t t = 0; t < nka; t++) v.dims[ib[t]] = x->v.dims[ia[t]];
    v.partial = x->v.partial;
    v.red = x->v.red;
    int64_t dims[VIEW_MAX_RANK];
    lf_global_dims(c, &v, &in->shape, dims);
    *out = term(lf_mk_reshape(c, y, lf_type_of(c, dt, dims, rb), c->origin), v, x->assumed);
    return true;
}

/* A reshape that drops a sharded unit dim and keeps the non-unit dims in
 * order ([b, kv, s, g, d] -> [b, s, g, d] with one kv head per device, the
 * gradient of a grouped-query attention under Ulysses): locally a
 * relabelling; globally the device's index may be the major part of any
 * kept dim (the unit dim transposed next to it and merged), and every such
 * reading is true. The default puts it on the next dim of its group; where
 * the baseline has no value of that global type, the first reading whose
 * type it has (the heads [b, s, kv·g, d]) is taken. dflt: the default
 * reading's global dims; *several: the form applies with more than one
 * kept dim (the default is then one reading of several: a sum over its dim
 * may be a device's own, not a share: a bag of ids per table and device). */
static bool unit_dim_joined(lstate *s, const int64_t *dflt, bool *several, lval *out) {
    lift_ctx *c = s->c;
    const hlo_instr *in = s->in;
    const shape *src = reshape_from(s);
    const lval *x = &s->ops[0];
    const int64_t *a = src->dims, *b = in->shape.dims;
    uint32_t ra = src->rank, rb = in->shape.rank, k, na = 0, nb = 0;
    int dt = in->shape.dtype;
    *several = false;
    if (ra > VIEW_MAX_RANK || rb > VIEW_MAX_RANK || (k = sharded_unit_dim(x, src)) == ra) return false;
    /* the non-unit dims alike in order (ia, ib: where), sharded or not (the
     * sharded unit dim the only unit dim sharded: sharded_unit_dim) */
    int64_t ka[VIEW_MAX_RANK], kb[VIEW_MAX_RANK];
    uint32_t ia[VIEW_MAX_RANK], ib[VIEW_MAX_RANK];
    uint32_t nka = nonunit_dims(a, ra, k, &na, ka, ia), nkb = nonunit_dims(b, rb, rb, &nb, kb, ib);
    if (nka != nkb || nka == 0 || memcmp(ka, kb, nka * sizeof *ka)) return false;
    *several = nka > 1;
    if (lf_baseline_has_type(c, lf_type_of(c, dt, dflt, rb))) return false;
    int64_t parts = view_dim_parts(&x->v, c->mesh, k), g1[VIEW_MAX_RANK], perm[VIEW_MAX_RANK], gout[VIEW_MAX_RANK];
    /* the global term with the unit dims dropped, the device's index at na */
    if (!device_index_dims(c, x, ka, ia, nka, na, parts, g1)) return false;
    for (uint32_t t = 0; t < nka; t++) {
        const view_dim *own = &x->v.dims[ia[t]], *unit = &x->v.dims[k];
        if (own->naxes + unit->naxes > MESH_MAX_AXES) continue;
        for (uint32_t d = 0; d < rb; d++) gout[d] = 1;
        for (uint32_t j = 0; j < nka; j++) gout[ib[j]] = ka[j] * view_dim_parts(&x->v, c->mesh, ia[j]) * (j == t ? parts : 1);
        if (!memcmp(gout, dflt, rb * sizeof *gout) || !lf_baseline_has_type(c, lf_type_of(c, dt, gout, rb))) continue;
        /* the kept dims in order, the device's index just before dim t */
        for (uint32_t q = 0, j = 0; q <= nka; q++) {
            if (q == t) {
                perm[q] = na;
            } else {
                perm[q] = j < na ? j : j + 1;
                j++;
            }
        }
        eid y = lf_mk_reshape(c, x->cls, lf_type_of(c, dt, g1, nka + 1), c->origin);
        y = lf_mk_transpose(c, y, perm);
        view v = view_dup(rb);
        for (uint32_t j = 0; j < nka; j++) v.dims[ib[j]] = x->v.dims[ia[j]];
        /* the device's index is the major part of dim t: its axes first */
        view_dim *to = &v.dims[ib[t]];
        memmove(to->axes + unit->naxes, to->axes, to->naxes);
        memcpy(to->axes, unit->axes, unit->naxes);
        to->naxes = (uint8_t)(to->naxes + unit->naxes);
        v.partial = x->v.partial;
        v.red = x->v.red;
        *out = term(lf_mk_reshape(c, y, lf_type_of(c, dt, gout, rb), c->origin), v, x->assumed);
        out->ambiguous = true;
        return true;
    }
    return false;
}

/* Whether x only relabels its operand's elements in row-major order: a
 * reshape, a bitcast, a copy, a broadcast to the operand's own dims. */
static bool order_keeping(const hlo_comp *comp, const hlo_instr *x) {
    if (x->noperands != 1) return false;
    if (x->op == OP_RESHAPE || x->op == OP_BITCAST || x->op == OP_COPY) return true;
    if (x->op != OP_BROADCAST) return false;
    const shape *a = &comp->instrs[x->operands[0]].shape;
    uint32_t nd;
    const int64_t *bd = instr_ints(x, A_DIMENSIONS, &nd);
    if (nd != a->rank || a->rank != x->shape.rank) return false;
    for (uint32_t d = 0; d < nd; d++)
        if (bd[d] != (int64_t)d || a->dims[d] != x->shape.dims[d]) return false;
    return true;
}

/* s's reshape read as one reshape of the first value before it that is
 * more than a relabelling of its elements, where that value is a plain
 * term (the instruction stays s's: only the operand and its shape change). */
static bool reshape_chain(lstate *s, lval *out) {
    if (s->from) return false;
    const hlo_instr *src = &s->comp->instrs[s->in->operands[0]];
    if (!order_keeping(s->comp, src)) return false;
    uint32_t at = src->operands[0];
    for (int hops = 0; hops < 8 && order_keeping(s->comp, &s->comp->instrs[at]); hops++)
        at = s->comp->instrs[at].operands[0];
    const lval *z = &s->vals[at];
    if (z->kind != LV_TERM || s->comp->instrs[at].shape.rank == 0) return false;
    lval zv = *z;
    lstate t = *s;
    t.ops = &zv;
    t.from = &s->comp->instrs[at].shape;
    lval r = lf_lift_reshape(&t);
    if (r.kind != LV_TERM || r.assumed || r.guessed) return false;
    *out = r;
    return true;
}

lval lf_lift_reshape(lstate *s) {
    lift_ctx *c = s->c;
    const hlo_instr *in = s->in;
    const lval *x = &s->ops[0];
    if (x->kind != LV_TERM) return unknown();
    lval moved;
    if (unit_dim_moved(s, &moved)) return moved;
    const shape *src = reshape_from(s);
    const int64_t *a = src->dims, *b = in->shape.dims;
    uint32_t ra = src->rank, rb = in->shape.rank;
    view v = view_dup(rb);
    v.partial = x->v.partial;
    v.red = x->v.red;
    /* vb: the other reading, where a sharding that lands on a unit major dim
     * goes to the first non-unit dim of its group instead. */
    view vb = v;
    /* vc: the reading where sharded unit dims leading a group join the
     * previous group instead when that one is a single unit output dim
     * ([.., 1, 1, 8] → [.., 1, 8] with both units sharded: the heads merge). */
    view vc = v;
    bool amb = x->ambiguous, two = false, three = false;
    reshape_group ag[4];
    uint32_t nag = 0;
    uint32_t i = 0, j = 0;
    int prev_unit = -1;
    while (i < ra || j < rb) {
        uint32_t i2, j2;
        if (!lf_reshape_run(a, ra, b, rb, i, j, &i2, &j2)) return unknown();
        /* Sharded dims of the group: each must have only unit dims before it
         * in the group (they hold no data); their axes, major first, then go
         * to the major dim of the output group (unit dims included: locally
         * [.., 8] → [.., 1, 8] is heads 4 × 8 → 4 heads sharded). */
        bool any = false;
        for (uint32_t k = i; k < i2; k++) {
            if (!x->v.dims[k].naxes) continue;
            bool units_before = true;
            for (uint32_t q = i; q < k; q++) units_before &= a[q] == 1;
            if (j == j2 && j > 0 && b[j - 1] == 1 && v.dims[j - 1].naxes + x->v.dims[k].naxes <= MESH_MAX_AXES &&
                vb.dims[j - 1].naxes == v.dims[j - 1].naxes && vc.dims[j - 1].naxes == v.dims[j - 1].naxes) {
                /* Trailing unit dims with no output dim of their own (their
                 * product is 1): they join the unit output dim before them,
                 * whose global size is then the product of their blocks. */
                for (uint32_t t = 0; t < x->v.dims[k].naxes; t++) {
                    uint8_t ax = x->v.dims[k].axes[t];
                    v.dims[j - 1].axes[v.dims[j - 1].naxes++] = ax;
                    vb.dims[j - 1].axes[vb.dims[j - 1].naxes++] = ax;
                    vc.dims[j - 1].axes[vc.dims[j - 1].naxes++] = ax;
                }
                continue;
            }
            if (!units_before || j == j2 || v.dims[j].naxes + x->v.dims[k].naxes > MESH_MAX_AXES) {
                /* A chain of reshapes (and identity broadcasts) is one
                 * reshape of the value before it: read that way where this
                 * reading of the last fails ([1, 4] -> [4, 1] -> [4] with
                 * the unit dim sharded: the moved unit dim merges minor,
                 * the whole chain major) */
                lval once;
                if (reshape_chain(s, &once)) return once;
                lf_unsupported(c, s->comp, in, "reshape %s moves a sharded dimension inside a merged group (needs a layout view)",
                            in->name);
                view pv = v;
                return lf_assumed_term(c, in, pv);
            }
            for (uint32_t t = 0; t < x->v.dims[k].naxes; t++) v.dims[j].axes[v.dims[j].naxes++] = x->v.dims[k].axes[t];
            view_dim *to = prev_unit >= 0 && units_before && a[k] == 1 && k + 1 < i2 ? &vc.dims[prev_unit] : &vc.dims[j];
            if (to->naxes + x->v.dims[k].naxes > MESH_MAX_AXES) to = &vc.dims[j];  /* (axes are distinct: never) */
            if (to != &vc.dims[j]) three = amb = true;
            for (uint32_t t = 0; t < x->v.dims[k].naxes; t++) to->axes[to->naxes++] = x->v.dims[k].axes[t];
            any = true;
        }
        if (any) {
            /* A unit major dim with more dims after it in the group could take
             * only part of the sharding: one reading among several. */
            uint32_t out = j, outb = j;
            if (b[out] == 1 && out + 1 < j2) {
                amb = true;
                while (outb < j2 && b[outb] == 1) outb++;
                if (outb < j2) {
                    two = true;
                    if (nag < ARRAY_LEN(ag)) ag[nag++] = (reshape_group){v.dims[out], out, outb};
                } else {
                    outb = out;
                }
            }
            vb.dims[outb] = v.dims[out];
        }
        int64_t pa = 1;
        for (uint32_t q = i; q < i2; q++) pa *= a[q];
        prev_unit = pa == 1 && j2 == j + 1 ? (int)j : -1;
        i = i2;
        j = j2;
        if (i2 == i && j2 == j && i >= ra && j >= rb) break;
    }
    int64_t dims[VIEW_MAX_RANK];
    if (two && !reshape_meets_baseline(c, x->cls, in, &v)) {
        view w;
        if (reshape_meets_baseline(c, x->cls, in, &vb)) {
            v = vb;
        } else if (reshape_split_reading(c, x, in, &v, ag, nag, &w)) {
            v = w;
        } else if (!c->baseline_mode) {
            /* neither reading the baseline's: the one whose global shape
             * only the other reading lacks among the baseline's values (a
             * unit dim added where the baseline adds it too, then reduced
             * away), else the unit dim, or the other on a second lift
             * (lift_ctx.reshape_flip) */
            int64_t gv[VIEW_MAX_RANK], gb[VIEW_MAX_RANK];
            lf_global_dims(c, &v, &in->shape, gv);
            lf_global_dims(c, &vb, &in->shape, gb);
            bool hv = lf_baseline_has_type(c, lf_type_of(c, in->shape.dtype, gv, rb)),
                 hb = lf_baseline_has_type(c, lf_type_of(c, in->shape.dtype, gb, rb));
            if (hb && !hv) {
                v = vb;
            } else {
                c->reshape_defaulted = true;
                if (c->reshape_flip) v = vb;
            }
        }
    }
    if (three && !reshape_meets_baseline(c, x->cls, in, &v) && reshape_meets_baseline(c, x->cls, in, &vc)) v = vc;
    /* A sharding on a unit output dim may as well sit on a neighbouring unit
     * dim, or spread over a run of them, major axes first (only unit dims
     * between: the row-major order is the same, a transpose of unit dims
     * written as a reshape; GQA's [.., heads, d] -> [.., kv, group, d] with
     * one head per device): the reading the baseline has, when it has one. */
    for (uint32_t jj = 0; jj < rb && !reshape_meets_baseline(c, x->cls, in, &v); jj++) {
        if (!v.dims[jj].naxes || b[jj] != 1) continue;
        uint32_t lo = jj, hi = jj;
        while (lo > 0 && b[lo - 1] == 1 && !v.dims[lo - 1].naxes) lo--;
        while (hi + 1 < rb && b[hi + 1] == 1 && !v.dims[hi + 1].naxes) hi++;
        if (lo == hi) continue;
        reshape_group g = {v.dims[jj], lo, hi};
        view base = v, w;
        memset(&base.dims[jj], 0, sizeof base.dims[jj]);
        if (reshape_split_reading(c, x, in, &base, &g, 1, &w)) {
            v = w;
            amb = true;
            break;
        }
    }
    lf_global_dims(c, &v, &in->shape, dims);
    lval joined;
    bool several;
    if (unit_dim_joined(s, dims, &several, &joined)) return joined;
    lval r = term(lf_node(c, c->cur, in, &x->cls, 1, dims, c->origin), v, x->assumed);
    r.ambiguous = amb;
    r.merged_unit = several;
    return r;
}

/* ---- pad ---- */

/* pad(x, v) along dims no mesh axis cuts: every device pads its block alike,
 * the block of the global pad. A partial value stays partial where the pad
 * value is what the reduction leaves alone: 0 for a sum (every device adds
 * its own padding: any other value counts once per device), any value for a
 * max or min (v reduced with itself is v). A factor on x carries over only
 * with 0 padding. */
bool lf_lift_pad(lstate *s, lval *out) {
    lift_ctx *c = s->c;
    const hlo_instr *in = s->in;
    if (in->noperands == 2) lf_uniform_dev_as_term(s, 1);  /* a constant computed like a device value */
    const lval *x = &s->ops[0], *pv = &s->ops[1];
    const hlo_attr *pa = instr_attr(in, A_PADDING);
    uint32_t rank = in->shape.rank;
    if (in->noperands != 2 || !pa || pa->n != rank || x->kind != LV_TERM || x->diff || x->v.rank != rank ||
        pv->kind != LV_TERM || !view_is_dup(&pv->v) || pv->v.partial || (view_is_dup(&x->v) && !x->v.partial))
        return false;
    for (uint32_t d = 0; d < rank; d++)
        if (x->v.dims[d].naxes && (pa->v.ints[3 * d] || pa->v.ints[3 * d + 1] || pa->v.ints[3 * d + 2])) return false;
    bool zero = lf_class_is_zero(c, pv->cls);
    if (!zero && lf_scale_of(x) != 1) return false;
    if (x->v.partial && !(x->v.red == RED_SUM ? zero : x->v.red == RED_MAX || x->v.red == RED_MIN)) return false;
    *out = lf_with_scalar(s, x, pv);
    return true;
}

/* Whether global element i (rank coordinates) of class x is a zero of a
 * zero pad: x is pad(y, 0), or a slice of one, and i lands in the padding. */
static bool in_zero_padding(lift_ctx *c, eid x, const int64_t *i, uint32_t rank) {
    int64_t at[VIEW_MAX_RANK], step[VIEW_MAX_RANK];
    bool interior[VIEW_MAX_RANK];
    eid y;
    if (!lf_zero_pad_of(c, x, rank, &y, at, step, interior)) return false;
    uint32_t yr;
    const int64_t *yd = eg_type_dims(c->g, eg_class_type(c->g, y), &yr);
    for (uint32_t k = 0; k < rank; k++) {
        int64_t q = at[k] + i[k] * step[k];
        if (!interior[k] && (q < 0 || q >= yd[k])) return true;
    }
    return false;
}

/* The value of instruction i of comp on device r when it is computed from
 * constants, iotas and the partition id alone (memo[i] caches it, tried[i]
 * says it was tried; NULL otherwise or when too big to fold). */
static interp_val *device_value(lift_ctx *c, const hlo_comp *comp, uint32_t i, int64_t r, interp_val **memo, bool *tried,
                                int depth) {
    const hlo_instr *in = &comp->instrs[i];
    if (tried[i] || depth > 32) return memo[i];
    tried[i] = true;
    if (in->noperands > 8 || !lf_fold_size_ok(in->shape.dims, in->shape.rank)) return NULL;
    if (in->op == OP_PARTITION_ID) {
        interp_val *v = interp_val_new(in->shape.dtype, 0, NULL);
        if (v) interp_val_set(v, 0, (double)r);
        return memo[i] = v;
    }
    interp_val *ops[8];
    for (uint32_t k = 0; k < in->noperands; k++)
        if (!(ops[k] = device_value(c, comp, in->operands[k], r, memo, tried, depth + 1))) return NULL;
    return memo[i] = interp_eval_instr(c->cur, in, ops, NULL);
}

interp_val **lf_device_values(lift_ctx *c, const hlo_comp *comp, uint32_t i) {
    size_t n = comp->ninstrs ? comp->ninstrs : 1;
    interp_val **memo = xcalloc(n, sizeof *memo), **out = xcalloc((size_t)c->ndev, sizeof *out);
    bool *tried = xcalloc(n, sizeof *tried), ok = true;
    for (int64_t r = 0; r < c->ndev && ok; r++) {
        memset(memo, 0, n * sizeof *memo);
        memset(tried, 0, n * sizeof *tried);
        out[r] = interp_val_ref(device_value(c, comp, i, r, memo, tried, 0));
        ok = out[r] != NULL && out[r]->n * c->ndev <= ((int64_t)1 << 20);
        for (uint32_t k = 0; k < comp->ninstrs; k++) interp_val_free(memo[k]);
    }
    free(memo);
    free(tried);
    if (!ok) {
        lf_device_values_free(c, out);
        return NULL;
    }
    return out;
}

void lf_device_values_free(lift_ctx *c, interp_val **v) {
    for (int64_t r = 0; v && r < c->ndev; r++) interp_val_free(v[r]);
    free(v);
}

/* select(p, x, 0) where p is computed from the partition id, iotas and
 * constants (GSPMD masking the rows of a halo that fall outside the array)
 * and x is zero on every device wherever p is false, being there the zero
 * padding of a pad: x itself. */
bool lf_select_padding_zeros(lstate *s, lval *out) {
    lift_ctx *c = s->c;
    const hlo_instr *in = s->in;
    if (in->op != OP_SELECT || in->noperands != 3) return false;
    const lval *x = &s->ops[1], *z = &s->ops[2];
    lval xw;  /* a halo's window (zeros a permute left) as rows of the padded term */
    if (x->kind == LV_WIN && !x->win->summed && lf_win_padded(c, x, false, &xw)) x = &xw;
    const lift_win *w = x->kind == LV_WIN ? x->win : NULL;
    if ((x->kind != LV_TERM && !w) || x->v.partial || x->assumed || lf_scale_of(x) != 1 || in->shape.rank > VIEW_MAX_RANK)
        return false;
    if (z->kind == LV_DEV) lf_uniform_dev_as_term(s, 2);  /* zeros computed like a device value */
    if (z->kind != LV_TERM || z->v.partial || !view_is_dup(&z->v) || !lf_class_is_zero(c, z->cls)) return false;
    eid sn = lf_class_node(c, x->cls, OP_SLICE, 1, NULL);
    uint32_t nc;
    bool holes = false; /* a window's zeros (idx -1, where a permute delivered none) */
    for (int64_t k = 0; w && k < c->ndev * w->len && !holes; k++) holes = w->idx[k] < 0;
    if (!holes &&
        lf_class_node(c, sn == EID_NONE ? x->cls : eg_node_children(c->g, sn, &nc)[0], OP_PAD, 2, NULL) == EID_NONE)
        return false;  /* no pad to have zeros (before evaluating p) */
    uint32_t rank = in->shape.rank, xr;
    eg_type_dims(c->g, eg_class_type(c->g, x->cls), &xr);
    if (xr != rank || x->v.rank != rank || in->shape.dtype == DT_TUPLE) return false;
    interp_val **pvs = lf_device_values(c, s->comp, in->operands[0]);
    bool ok = pvs != NULL;
    for (int64_t r = 0; r < c->ndev && ok; r++) {
        const interp_val *pv = pvs[r];
        ok = pv->dtype == DT_PRED && pv->rank == rank;
        int64_t j[VIEW_MAX_RANK] = {0}, g[VIEW_MAX_RANK], blk[VIEW_MAX_RANK];
        for (uint32_t k = 0; ok && k < rank; k++) {
            const view_dim *vd = &x->v.dims[k];
            blk[k] = 0;
            for (uint32_t a = 0; a < vd->naxes; a++) blk[k] = blk[k] * c->mesh->sizes[vd->axes[a]] + mesh_coord(c->mesh, r, vd->axes[a]);
        }
        for (int64_t e = 0; ok && e < pv->n; e++) {
            bool hole = false;
            for (uint32_t k = 0; k < rank; k++) {
                g[k] = w && k == w->dim ? w->idx[r * w->len + j[k]] : blk[k] * in->shape.dims[k] + j[k];
                hole |= w && k == w->dim && g[k] < 0;
            }
            ok = pv->i[e] || hole || in_zero_padding(c, x->cls, g, rank);
            for (uint32_t k = rank; k-- > 0;)
                if (++j[k] < in->shape.dims[k]) break;
                else j[k] = 0;
        }
    }
    lf_device_values_free(c, pvs);
    if (!ok) return false;
    *out = *x;
    return true;
}

lval lf_with_scalar(lstate *s, const lval *x, const lval *k) {
    lift_ctx *c = s->c;
    int64_t dims[VIEW_MAX_RANK];
    lf_global_dims(c, &x->v, &s->in->shape, dims);
    eid ch[2] = {x->cls, k->cls};
    lval out = *x;
    out.cls = lf_node(c, c->cur, s->in, ch, 2, dims, c->origin);
    out.assumed = x->assumed || k->assumed;
    out.konst = x->konst && k->konst;
    out.zm = NULL;
    return out;
}

/* ---- slices, dynamic slices, concatenation ---- */

/* Whether offset(r) = base + block(r)·size where block(r) is the major or the
 * minor part of one mesh axis's coordinate split in two (k consecutive or
 * strided ranks share a block); the split that makes it one sub-axis's
 * blocks (lift_split_mesh_axis's axis and factor) into *axis, *f. */
static bool part_axis_blocks(const lift_ctx *c, const double *vals, uint32_t count, int64_t size, uint32_t *axis,
                             int64_t *f) {
    for (uint32_t a = 0; a < c->mesh->naxes; a++) {
        int64_t n = c->mesh->sizes[a];
        for (int64_t k = 2; k < n; k++) {
            if (n % k) continue;
            for (int minor = 0; minor < 2; minor++) {
                bool match = true;
                int64_t b = (int64_t)vals[0];
                for (int64_t r = 0; r < c->ndev && match; r++) {
                    int64_t x = mesh_coord(c->mesh, r, (int)a), idx = minor ? x % (n / k) : x / k;
                    match = (int64_t)vals[r * count] == b + idx * size;
                }
                if (match) {
                    *axis = a;
                    *f = minor ? n / k : k;
                    return true;
                }
            }
        }
    }
    return false;
}

/* Asks the caller to lift again on a mesh whose axis is split so that
 * these offsets are one sub-axis's blocks (the first such request wins). */
static bool ask_refine(lift_ctx *c, const double *vals, uint32_t count, int64_t size) {
    uint32_t a;
    int64_t f;
    if (!part_axis_blocks(c, vals, count, size, &a, &f)) return false;
    if (!c->refine_factor && !c->baseline_mode) {
        c->refine_axis = a;
        c->refine_factor = f;
    }
    return true;
}

/* dynamic-update-slice(x, u, offsets) with offsets the same on every device
 * (constants, replicated values such as a loop counter): where u is viewed as
 * x is and covers every dim x is sharded along whole (the offset there is
 * clamped to 0, locally and globally), each device writes its block of u into
 * its block of x at the same place: the global update, under x's view (a scan
 * stacking per-layer values into a buffer). Which positions take u does not
 * depend on the device, so a partial pair (the same axes and reduction) stays
 * partial. */
bool lf_known_start(lift_ctx *c, const lval *o, int64_t whole, int64_t size, int64_t *start) {
    const interp_val *kv = o->kind == LV_TERM && view_is_dup(&o->v) ? lf_kval(c, o->cls) : NULL;
    double off;
    if (kv && kv->n == 1) off = interp_val_get(kv, 0);
    else if (o->kind == LV_DEV && lf_dev_uniform(c, o)) off = o->dev[0];
    else return false;
    /* clamped as XLA clamps, in double first: no start beyond int64 */
    double hi = (double)(whole - size);
    *start = !(off > 0) || hi < 0 ? 0 : off >= hi ? whole - size : (int64_t)off;
    return true;
}

/* dynamic-update-slice at offsets known as numbers that replaces a run of
 * one dim d (every other dim whole): the buffer's elements before it, the
 * update, the buffer's after it, concatenated along d — the form the other
 * program's concatenate of a scan's stacked results meets (slices of a
 * concatenation fold by rule). The update itself when it covers the buffer;
 * EID_NONE when the offsets are not known or several dims are cut. dims: the
 * result's global dims. */
static eid update_as_concat(lstate *s, const int64_t *dims) {
    lift_ctx *c = s->c;
    const hlo_instr *in = s->in, *ui = &s->comp->instrs[in->operands[1]];
    uint32_t rank = in->shape.rank;
    int cut = -1;
    int64_t at = 0;
    for (uint32_t d = 0; d < rank; d++) {
        int64_t st;
        if (!lf_known_start(c, &s->ops[2 + d], dims[d], ui->shape.dims[d], &st)) return EID_NONE;
        if (ui->shape.dims[d] == in->shape.dims[d]) continue;
        if (cut >= 0 || s->ops[0].v.dims[d].naxes) return EID_NONE;
        cut = (int)d;
        at = st;
    }
    if (cut < 0) return eg_find(c->g, s->ops[1].cls);
    int64_t sl[3 * VIEW_MAX_RANK], len = ui->shape.dims[cut];
    for (uint32_t d = 0; d < rank; d++) sl[3 * d] = 0, sl[3 * d + 1] = dims[d], sl[3 * d + 2] = 1;
    eid ch[3];
    uint32_t n = 0;
    if (at > 0) {
        sl[3 * cut + 1] = at;
        ch[n++] = lf_mk_slice(c, s->ops[0].cls, sl);
    }
    ch[n++] = s->ops[1].cls;
    if (at + len < dims[cut]) {
        sl[3 * cut] = at + len;
        sl[3 * cut + 1] = dims[cut];
        ch[n++] = lf_mk_slice(c, s->ops[0].cls, sl);
    }
    return lf_mk_concat(c, ch, n, (uint32_t)cut);
}

lval lf_lift_dynamic_update_slice(lstate *s) {
    lift_ctx *c = s->c;
    const hlo_instr *in = s->in;
    const lval *x = &s->ops[0], *u = &s->ops[1];
    uint32_t rank = in->shape.rank;
    /* A replicated buffer (zeros a scan stacks its results into) under the
     * update's view: the same pieces on every device. */
    if (x->kind == LV_TERM && u->kind == LV_TERM && view_is_dup(&x->v) && !u->v.partial && x->v.rank == u->v.rank)
        lf_review_operand(s, 0, &u->v);
    /* An update whose reshape has several readings (a unit dim split off a
     * sharded one): the one that shards it as the buffer. */
    for (uint32_t d = 0; d < rank && x->kind == LV_TERM && u->kind == LV_TERM && d < x->v.rank && d < u->v.rank; d++)
        if (x->v.dims[d].naxes && !u->v.dims[d].naxes) lf_unit_dim_reread(s, 1, d, &x->v.dims[d]);
    if (x->kind != LV_TERM || u->kind != LV_TERM || in->noperands != 2 + rank || rank > VIEW_MAX_RANK ||
        x->v.rank != rank || u->v.rank != rank)
        return unknown();
    /* A constant base the same on every device is a partial value of itself
     * where the reduction leaves it so: zeros for a sum (a partial sum written
     * into zeros), any constant for a max or min. */
    view xv = x->v;
    if (!xv.partial && u->v.partial && view_is_dup(&xv) && lf_kval(c, x->cls) &&
        (u->v.red == RED_SUM ? lf_class_is_zero(c, x->cls) : u->v.red == RED_MAX || u->v.red == RED_MIN)) {
        xv.partial = u->v.partial;
        xv.red = u->v.red;
    }
    if (xv.partial != u->v.partial || (xv.partial && xv.red != u->v.red) || !lf_same_sharding(&xv, &u->v)) return unknown();
    const hlo_instr *ui = &s->comp->instrs[in->operands[1]];
    for (uint32_t d = 0; d < rank; d++)
        if (x->v.dims[d].naxes && ui->shape.dims[d] != in->shape.dims[d]) return unknown();
    eid ch[VIEW_MAX_RANK + 2];
    ch[0] = x->cls;
    ch[1] = u->cls;
    bool assumed = x->assumed || u->assumed;
    for (uint32_t d = 0; d < rank; d++) {
        const lval *o = &s->ops[2 + d];
        if (o->kind == LV_TERM && view_is_dup(&o->v)) ch[2 + d] = o->cls, assumed |= o->assumed;
        else if (o->kind == LV_DEV && lf_dev_uniform(c, o)) ch[2 + d] = lf_dev_constant(c, &s->comp->instrs[in->operands[2 + d]], o);
        else return unknown();
    }
    int64_t dims[VIEW_MAX_RANK];
    lf_global_dims(c, &xv, &in->shape, dims);
    eid known = update_as_concat(s, dims);
    if (known != EID_NONE) return term(known, xv, assumed);
    return term(lf_node(c, c->cur, in, ch, rank + 2, dims, c->origin), xv, assumed);
}

/* A dynamic-slice in which each device keeps its own block of a sum not yet
 * reduced: a reduce-scatter without the reduction, unless the other devices'
 * summands vanish in that block (which nothing here shows). */
static lval unreduced_blocks(lstate *s) {
    strbuf why;
    sb_init(&why);
    view_print(&why, &s->ops[0].v, s->c->mesh);
    lf_unsupported_suspect(s->c, KIND_MISSING_ALL_REDUCE, s->comp, s->in, "%s takes each device's own block of a value that is "
                           "still a partial sum (%s): a reduce-scatter without its reduction unless the other devices' "
                           "summands vanish there", s->in->name, why.s);
    sb_free(&why);
    return unknown();
}

/* dynamic-slice whose offsets are device tables: offset(r) = coord·size binds
 * the dimension to the axes; the same offset everywhere is an ordinary slice. */
/* dynamic-slice of a replicated term that repeats one piece along dim d (a
 * concatenation of copies of one class: jax's all_gather of a replicated
 * value), at per-device offsets along d that are whole multiples of the
 * piece's length (each clamped into range as XLA does), the slice that
 * length, every other dim taken whole from 0: the piece on every device. */
static bool repeated_piece(lstate *s, lval *out) {
    lift_ctx *c = s->c;
    const hlo_instr *in = s->in, *src = &s->comp->instrs[in->operands[0]];
    const lval *x = &s->ops[0];
    uint32_t rank = in->shape.rank;
    if (x->kind != LV_TERM || !view_is_dup(&x->v) || lf_scale_of(x) != 1 || x->zm || x->diff) return false;
    int d = -1;
    for (uint32_t k = 0; k < rank; k++) {
        const lval *o = &s->ops[1 + k];
        if (o->kind != LV_DEV || o->count != 1) return false;
        if (lf_dev_uniform(c, o) && o->dev[0] == 0 && in->shape.dims[k] == src->shape.dims[k]) continue;
        if (d >= 0) return false;
        d = (int)k;
    }
    if (d < 0) return false;
    int64_t len = in->shape.dims[d], whole = src->shape.dims[d];
    for (eid k = eg_class_first(c->g, eg_find(c->g, x->cls)); k != EID_NONE; k = eg_class_next(c->g, k)) {
        uint32_t n, nd;
        const eid *ch = eg_node_children(c->g, k, &n);
        if (eg_node_op(c->g, k) != OP_CONCATENATE || n < 2) continue;
        const int64_t *cd = ea_get(c->g, eg_node_attr(c->g, k), A_DIMENSIONS, &nd);
        if (!cd || nd != 1 || cd[0] != d) continue;
        eid piece = eg_find(c->g, ch[0]);
        bool same = true;
        for (uint32_t j = 1; j < n && same; j++) same = eg_find(c->g, ch[j]) == piece;
        uint32_t prank;
        const int64_t *pd = eg_type_dims(c->g, eg_class_type(c->g, piece), &prank);
        if (!same || prank != rank || pd[d] != len || (int64_t)n * len != whole) continue;
        const lval *o = &s->ops[1 + d];
        for (int64_t r = 0; r < c->ndev && same; r++) {
            double off = fmin(fmax(o->dev[r], 0), (double)(whole - len));
            same = fmod(off, (double)len) == 0;
        }
        if (!same) continue;
        *out = term(piece, view_dup(rank), x->assumed);
        out->konst = x->konst;
        return true;
    }
    return false;
}

/* Offsets into a dim sharded as vd (local extent L) that take, on device r
 * of block b, the global rows [base + b·size, base + (b+1)·size) inside its
 * own block [b·L, (b+1)·L): block b of the global window [base, base +
 * P·size) (GSPMD splitting a fused projection's columns, sharded over tp,
 * into its parts). The window into *lo, *hi. */
static bool block_of_window(const lift_ctx *c, const view_dim *vd, const lval *o, int64_t L, int64_t size, int64_t *lo,
                            int64_t *hi) {
    int64_t P = 1, base = 0;
    for (uint32_t k = 0; k < vd->naxes; k++) P *= c->mesh->sizes[vd->axes[k]];
    for (int64_t r = 0; r < c->ndev; r++) {
        double off = o->dev[r * o->count];
        if (off < 0 || off + (double)size > (double)L || off != floor(off)) return false;
        int64_t b = lf_dim_block(c, vd, r), at = b * L + (int64_t)off - b * size;
        if (r && at != base) return false;
        base = at;
    }
    if (base < 0 || base + P * size > P * L) return false;
    *lo = base;
    *hi = base + P * size;
    return true;
}

lval lf_lift_dynamic_slice(lstate *s) {
    lift_ctx *c = s->c;
    const hlo_instr *in = s->in;
    const lval *x = &s->ops[0];
    uint32_t rank = in->shape.rank;
    if (x->kind != LV_TERM || in->noperands != 1 + rank) return unknown(); /* not the index-vector form */
    view v = x->v;
    /* Offsets the same on every device — constants, or replicated values such
     * as a loop counter — slice the global tensor at the same place; a sharded
     * dimension must be taken whole (its offset is then clamped to 0). */
    bool all_uniform = true, assumed = x->assumed;
    for (uint32_t d = 0; d < rank; d++) {
        const lval *o = &s->ops[1 + d];
        if (o->kind == LV_TERM && view_is_dup(&o->v)) {
            assumed |= o->assumed;
            continue;
        }
        if (o->kind != LV_DEV) return unknown();
        all_uniform &= lf_dev_uniform(c, o);
    }
    if (all_uniform) {
        int64_t dims[VIEW_MAX_RANK];
        lf_global_dims(c, &v, &in->shape, dims);
        for (uint32_t d = 0; d < rank; d++)
            if (x->v.dims[d].naxes && in->shape.dims[d] != s->comp->instrs[in->operands[0]].shape.dims[d]) return unknown();
        /* Offsets known as numbers: the static slice at the clamped starts,
         * the term a slice instruction of the other program gives. */
        int64_t sl[3 * VIEW_MAX_RANK], st;
        bool known = rank <= VIEW_MAX_RANK;
        for (uint32_t d = 0; d < rank && known; d++) {
            int64_t whole = x->v.dims[d].naxes ? dims[d] : s->comp->instrs[in->operands[0]].shape.dims[d];
            known = lf_known_start(c, &s->ops[1 + d], whole, dims[d], &st);
            sl[3 * d] = st, sl[3 * d + 1] = st + dims[d], sl[3 * d + 2] = 1;
        }
        if (known) return term(lf_mk_slice(c, x->cls, sl), v, assumed);
        eid ch[VIEW_MAX_RANK + 1];
        ch[0] = x->cls;
        for (uint32_t d = 0; d < rank; d++)
            ch[1 + d] = s->ops[1 + d].kind == LV_TERM ? s->ops[1 + d].cls
                                                       : lf_dev_constant(c, &s->comp->instrs[in->operands[1 + d]], &s->ops[1 + d]);
        /* The term slices the global tensor: its sizes are the global ones. */
        hlo_instr g = lf_with_ints(c, in, A_DYNAMIC_SLICE_SIZES, dims, rank);
        return term(lf_node(c, c->cur, &g, ch, rank + 1, dims, c->origin), v, assumed);
    }
    for (uint32_t d = 0; d < rank; d++)
        if (s->ops[1 + d].kind != LV_DEV) return unknown();
    lval rep;
    if (repeated_piece(s, &rep)) return rep;
    const hlo_instr *src = &s->comp->instrs[in->operands[0]];
    /* Block windows: [lo, hi) of each dim the blocks tile (the whole dim when
     * not windowed), in global coordinates. */
    int64_t wlo[VIEW_MAX_RANK], whi[VIEW_MAX_RANK];
    bool windowed = false;
    if (rank > VIEW_MAX_RANK) return unknown();
    for (uint32_t d = 0; d < rank; d++) wlo[d] = 0, whi[d] = src->shape.dims[d] * view_dim_parts(&x->v, c->mesh, d);
    for (uint32_t d = 0; d < rank; d++) {
        const lval *o = &s->ops[1 + d];
        /* A dim taken whole: any start is clamped to 0 (GSPMD passes the
         * block offset of a dim the operand already holds only its block of). */
        if (in->shape.dims[d] == src->shape.dims[d]) continue;
        if (lf_dev_uniform(c, o)) {
            if (o->dev[0] != 0) return unknown();
            continue;
        }
        int64_t size = in->shape.dims[d];
        if (x->v.dims[d].naxes) {
            /* A sharded dim cut again into blocks over further axes: block j of
             * the device's block i is block i·p + j over both (major first). */
            int64_t p = src->shape.dims[d] / size, *b = arena_alloc(c->a, (size_t)c->ndev * sizeof *b);
            bool ok = size >= 1 && p * size == src->shape.dims[d];
            for (int64_t r = 0; r < c->ndev && ok; r++) {
                double off = o->dev[r * o->count];
                ok = off >= 0 && fmod(off, (double)size) == 0;
                b[r] = ok ? (int64_t)off / size : 0;
            }
            view_dim extra;
            ok = ok && lf_axes_of_blocks(c, b, p, &extra) && v.dims[d].naxes + extra.naxes <= MESH_MAX_AXES;
            for (uint32_t k = 0; ok && k < extra.naxes; k++) ok = !((view_axes_used(&v) | x->v.partial) >> extra.axes[k] & 1);
            if (!ok && block_of_window(c, &x->v.dims[d], o, src->shape.dims[d], size, &wlo[d], &whi[d])) {
                windowed = true;
                continue;
            }
            if (!ok) {
                lf_unsupported(c, s->comp, in, "%s slices sharded dimension %u at per-device offsets that cut its blocks "
                               "into no blocks of further mesh axes", in->name, d);
                return unknown();
            }
            for (uint32_t k = 0; k < extra.naxes; k++) v.dims[d].axes[v.dims[d].naxes++] = extra.axes[k];
            continue;
        }
        bool bound = false;
        /* offset(r) = base + block(r)·size: block r of the window [base, base + parts·size). */
        int64_t base, p;
        view_dim bax;
        uint32_t mask = lf_block_offsets(c, o->dev, o->count, size, &base, &p, &bax);
        if (mask & x->v.partial) return unreduced_blocks(s);
        if (mask & view_axes_used(&v)) {
            /* Blocks of two dims chosen by one axis: a diagonal, no view;
             * followed exactly as a window where it can be (a collective
             * matmul's chunk of the local weight, by the ring's step). */
            lval w;
            if (lf_win_dynamic_slice_term(s, d, &w)) return w;
            lf_unsupported(c, s->comp, in, "%s slices dimension %u by a mesh axis another dimension is sharded over",
                           in->name, d);
            return unknown();
        }
        if (mask && base >= 0 && base + p * size <= src->shape.dims[d]) {
            /* Block r of the window [base, base + p·size): block r of a slice. */
            v.dims[d] = bax;
            wlo[d] = base;
            whi[d] = base + p * size;
            windowed |= base != 0 || p * size != src->shape.dims[d];
            bound = true;
        }
        if (!bound && c->mesh_inferred) {
            /* Followed per partition id as a window (a cumulative op's
             * shifted pieces), which no mesh axis needs to name; blocks of
             * part of an axis ask for a finer mesh too. */
            ask_refine(c, o->dev, o->count, size);
            lval w;
            if (lf_win_dynamic_slice_term(s, d, &w)) return w;
            lf_unsupported(c, s->comp, in, "%s slices at offsets that select no block of the mesh inferred from the shardings", in->name);
            return unknown();
        }
        if (!bound && ask_refine(c, o->dev, o->count, size)) {
            /* Several devices take the same block (tensor parallelism over more
             * ranks than kv heads): a view over part of a mesh axis, which the
             * views cannot say yet. Right or wrong, it is not decided here. */
            lf_unsupported(c, s->comp, in, "%s slices dimension %u in blocks that several devices share (a block per group of "
                           "ranks along a mesh axis, as when tensor parallelism exceeds the kv heads); views over part of "
                           "an axis are not related yet", in->name, d);
            return unknown();
        }
        if (!bound) {
            /* Which device holds which piece matters only to later uses:
             * followed exactly as a window where it can be, else undecided. */
            lval w;
            if (lf_win_dynamic_slice_term(s, d, &w)) return w;
            strbuf t;
            sb_init(&t);
            for (int64_t r = 0; r < c->ndev && r < 8; r++) sb_printf(&t, "%s%lld", r ? ", " : "", (long long)o->dev[r]);
            lf_unsupported_suspect(c, KIND_WRONG_SHARD_DIM, s->comp, in,
                                   "%s slices dimension %u at per-device offsets {%s%s}, which select no mesh-axis block of "
                                   "size %lld", in->name, d, t.s, c->ndev > 8 ? ", ..." : "", (long long)size);
            sb_free(&t);
            return unknown();
        }
    }
    /* A value still partial over axes the offsets do not depend on (each
     * bound axis was checked against them above): every device of a
     * reduction group takes the same block of its summand, and the block of
     * the sum is the sum of the blocks. The view keeps the partial. */
    if (windowed) {
        /* (through lf_mk_slice: a slice of constants is folded, as the
         * baseline's is) */
        int64_t sl[3 * VIEW_MAX_RANK];
        for (uint32_t d = 0; d < rank; d++) sl[3 * d] = wlo[d], sl[3 * d + 1] = whi[d], sl[3 * d + 2] = 1;
        return term(lf_mk_slice(c, x->cls, sl), v, x->assumed);
    }
    return term(x->cls, v, x->assumed);
}

/* slice: sharded dimensions must be taken whole (their global slice is whole
 * too); unsharded ones slice alike. */
lval lf_lift_slice(lstate *s) {
    lift_ctx *c = s->c;
    const hlo_instr *in = s->in;
    const lval *x = &s->ops[0];
    if (x->kind != LV_TERM) return unknown();
    const hlo_attr *sa = instr_attr(in, A_SLICE);
    const hlo_instr *src = &s->comp->instrs[in->operands[0]];
    if (!sa || sa->n != src->shape.rank) return unknown();
    hlo_instr g = *in;
    hlo_attr *attrs = arena_memdup(c->a, in->attrs, in->nattrs * sizeof *attrs);
    int64_t *sl = arena_memdup(c->a, sa->v.ints, 3 * sa->n * sizeof *sl);
    for (uint32_t d = 0; d < sa->n; d++) {
        if (!x->v.dims[d].naxes) continue;
        if (sl[3 * d] != 0 || sl[3 * d + 1] != src->shape.dims[d] || sl[3 * d + 2] != 1) {
            lf_unsupported(c, s->comp, in, "%s slices a sharded dimension (%u)", in->name, d);
            return lf_assumed_term(c, in, x->v);
        }
        sl[3 * d + 1] = src->shape.dims[d] * view_dim_parts(&x->v, c->mesh, d);
    }
    for (uint32_t k = 0; k < in->nattrs; k++)
        if (attrs[k].key == A_SLICE) attrs[k].v.ints = sl;
    g.attrs = attrs;
    int64_t dims[VIEW_MAX_RANK];
    lf_global_dims(c, &x->v, &in->shape, dims);
    return term(lf_node(c, c->cur, &g, &x->cls, 1, dims, c->origin), x->v, x->assumed);
}

/* concatenate along an unsharded dimension of operands sharded alike. Slicing
 * a dim other than the concatenated one commutes with the concatenation, so
 * the pieces concatenate to the piece of the global concatenation. An operand
 * that is the same on every device piece (a broadcast along the dims the
 * others shard, a constant-only value: the constant half of an embedding's
 * gather index beside the token ids) is first read under the others' view;
 * an operand really sharded otherwise stays unrelated. */
lval lf_lift_concatenate(lstate *s) {
    lift_ctx *c = s->c;
    const hlo_instr *in = s->in;
    uint32_t nd;
    const int64_t *dd = instr_ints(in, A_DIMENSIONS, &nd);
    if (nd != 1 || dd[0] < 0 || (uint64_t)dd[0] >= in->shape.rank) return unknown();
    /* Operands stacked along a local unit dim that one reading of their
     * expand_dims gave the next dim's sharding (jnp.stack of row-sharded
     * values): that reading's other form, the sharding on the next dim. */
    uint32_t cd = (uint32_t)dd[0];
    for (uint32_t o = 0; o < in->noperands; o++) {
        lval moved;
        if (lf_unit_move_next(c, &s->ops[o], &s->comp->instrs[in->operands[o]].shape, cd, &moved)) s->ops[o] = moved;
    }
    view want = view_dup(in->shape.rank);
    for (uint32_t o = 0; o < in->noperands; o++) {
        const lval *x = &s->ops[o];
        if (x->kind != LV_TERM || x->v.rank != in->shape.rank) continue;
        for (uint32_t d = 0; d < in->shape.rank; d++)
            if (d != (uint32_t)dd[0] && x->v.dims[d].naxes && !want.dims[d].naxes) want.dims[d] = x->v.dims[d];
    }
    /* Device values the same on every device are constants: one number is
     * every piece of itself at the global shape, others are replicated. */
    for (uint32_t o = 0; o < in->noperands; o++) {
        lval *x = &s->ops[o];
        if (x->kind != LV_DEV || !lf_dev_uniform(c, x)) continue;
        const hlo_instr *xi = &s->comp->instrs[in->operands[o]];
        lval t = lf_dev_splat(x, c->ndev) ? lf_splat_term(c, xi, x, &want) : lf_tiled_term(c, xi, x, &want);
        if (t.kind == LV_TERM) *x = t;
        else lf_uniform_dev_as_term(s, o);
    }
    lf_review_operands(s, &want);
    /* Zeros beside partial sums (the padding of a flat gradient buffer
     * before its reduce-scatter): zero on every device is a share of zero
     * under any sum, max or min. */
    const lval *part = NULL;
    for (uint32_t o = 0; o < in->noperands && !part; o++)
        if (s->ops[o].kind == LV_TERM && s->ops[o].v.partial) part = &s->ops[o];
    for (uint32_t o = 0; part && o < in->noperands; o++) {
        lval *x = &s->ops[o];
        if (x->kind == LV_TERM && !x->v.partial && !x->assumed && lf_same_sharding(&x->v, &part->v) &&
            (part->v.red == RED_SUM || part->v.red == RED_MAX || part->v.red == RED_MIN) && lf_class_is_zero(c, x->cls))
            x->v.partial = part->v.partial, x->v.red = part->v.red;
    }
    eid stack[64], *ch = in->noperands <= 64 ? stack : arena_alloc(c->a, in->noperands * sizeof *ch);
    bool assumed = false;
    for (uint32_t o = 0; o < in->noperands; o++) {
        const lval *x = &s->ops[o];
        /* Partial operands alike (the same axes, the same reduction): a
         * concatenation only places elements, so the reduction commutes. */
        if (x->kind != LV_TERM || x->v.partial != s->ops[0].v.partial || (x->v.partial && x->v.red != s->ops[0].v.red) ||
            !lf_same_sharding(&x->v, &s->ops[0].v) || x->v.dims[dd[0]].naxes) {
            lf_unsupported(c, s->comp, in, "%s concatenates operands that are not sharded alike off the concatenated dimension", in->name);
            return unknown();
        }
        ch[o] = x->cls;
        assumed |= x->assumed;
    }
    view v = s->ops[0].v;
    int64_t dims[VIEW_MAX_RANK];
    lf_global_dims(c, &v, &in->shape, dims);
    return term(lf_node(c, c->cur, in, ch, in->noperands, dims, c->origin), v, assumed);
}
