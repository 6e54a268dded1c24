/* lift_argmax — reduces that select: a variadic reduce of values beside
 * their positions (argmax, argmin, as JAX writes them) and the two-level
 * reduction a partitioned program makes of one over a sharded dim.
 * Owns:
 *   lf_select_kind  what a reduce's reducer computes, decided by running it
 *                   on every order of its operands (never by names)
 *   lf_select_red   the partial reduction a stack element of such a reduce
 *                   completes (lf_stack_only_reduced)
 *   lf_arg_offset   add(positions local to a block, the block's offset)
 *   lf_lift_reduce_tuple  the transfer function of a variadic reduce:
 *     - the reduced dims whole on every device: rows of the global reduce,
 *       under the kept dims' sharding, whatever the reducer;
 *     - a reduced dim sharded: each device's (value, position) is the
 *       selection among its block, so the global selection is the same
 *       selection among the devices' pairs — the pair is partial over those
 *       axes, the value partial(max|min), the position partial(arg);
 *     - the stack of a group's pairs (all-gathers of both elements along
 *       one dim) reduced over it with the same kind of reducer and the same
 *       inits: the complete pair.
 *   lf_owner_test / lf_owner_select  eq(a partial max, its complete
 *     value) (or share >= max) says which devices hold a row's max; select(it, the local
 *     pair's positions with the block's offset, the greatest position) is
 *     partial(min): the min over the devices is the least position of the
 *     row's max, the baseline's tie rule (other fills: not related).
 *   Positions that are an iota of each device's own block (shard_map code:
 *   a local argmax) are the global positions less the block's offset: the
 *   value element is partial as above, the position element owes the
 *   offset until an add of exactly the blocks' offsets pays it
 *   (lf_arg_offset); gathered and selected among without it, the position
 *   is one within the winning block (each block's own selection, selected
 *   among: lifted as such), a finding when the outputs then differ.
 * Why the two levels are the one: the reducer (checked below) returns the
 * greater of its two pairs under one total preorder — value first (NaN
 * above everything; for argmin the order of values reversed, NaN still
 * above), then the lower position — in which two pairs that tie are equal
 * pairs. A selection by a total preorder is associative, commutative and
 * idempotent, so reducing the multiset of all elements and the init, in any
 * grouping and with the init taken more than once, gives its greatest
 * element: the baseline's. The one exception is a row with NaN in several
 * places, where JAX's reducer keeps whichever NaN it holds first; XLA
 * leaves the order of a reduction open, so the position is any of theirs in
 * the baseline too (an assumption recorded with the verdict).
 */
#include "lift.h"
#include "lift_int.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- the reducer's kind ---- */

/* Parameter number of instruction `at` of comp when it is a parameter, else -1. */
static int64_t param_no(const hlo_comp *comp, uint32_t at) {
    const hlo_instr *p = &comp->instrs[at];
    return p->op == OP_PARAMETER ? instr_int(p, A_PARAMETER_NUMBER, 0) : -1;
}

static bool cmp_is_total(const hlo_instr *in) {
    const char *t = instr_str(in, A_COMPARE_TYPE);
    if (t && strcmp(t, "TOTALORDER") == 0) return true;
    for (uint32_t k = 0; k < in->nattrs; k++)
        if (in->attrs[k].key == A_RAW) return true; /* an attribute not read (order=TOTAL): not judged */
    return false;
}

/* Whether reducer comp only compares its values with each other and its
 * positions with each other (p0 with p2, p1 with p3, or one with itself) and
 * combines the answers and picks parameters: then what it returns is decided
 * by the order of the two values (NaN included) and of the two positions
 * alone, so running it on one case of each order decides it everywhere. */
static bool order_only(const hlo_comp *comp) {
    if (comp->nparams != 4 || comp->root >= comp->ninstrs) return false;
    const hlo_instr *root = &comp->instrs[comp->root];
    if (root->op != OP_TUPLE || root->noperands != 2) return false;
    for (uint32_t i = 0; i < comp->ninstrs; i++) {
        const hlo_instr *y = &comp->instrs[i];
        if (y->shape.dtype == DT_TUPLE ? i != comp->root : y->shape.rank != 0) return false;
        switch (y->op) {
        case OP_PARAMETER:
        case OP_AND:
        case OP_OR:
        case OP_NOT:
        case OP_XOR:
        case OP_SELECT:
        case OP_TUPLE: break;
        case OP_COMPARE: {
            if (y->noperands != 2 || cmp_is_total(y)) return false;
            int64_t a = param_no(comp, y->operands[0]), b = param_no(comp, y->operands[1]);
            if (a < 0 || b < 0 || a % 2 != b % 2) return false;
            break;
        }
        default: return false;
        }
    }
    return true;
}

/* Runs reducer comp on scalars in[4]; out[2] gets its two results. False
 * when the interpreter refuses an op. */
static bool run_reducer(const hlo_module *m, const hlo_comp *comp, const int dt[4], const double in[4], double out[2]) {
    interp_val **v = xcalloc(comp->ninstrs + 1, sizeof *v);
    bool ok = true;
    for (uint32_t i = 0; i < comp->ninstrs && ok; i++) {
        const hlo_instr *y = &comp->instrs[i];
        if (y->op == OP_TUPLE) continue;
        int64_t p = param_no(comp, i);
        if (p >= 0) {
            if (p > 3) {
                ok = false;
                break;
            }
            v[i] = interp_val_new(dt[p], 0, NULL);
            interp_val_set(v[i], 0, in[p]);
            continue;
        }
        interp_val *ops[3] = {NULL, NULL, NULL};
        for (uint32_t o = 0; o < y->noperands && o < 3; o++) ops[o] = v[y->operands[o]];
        v[i] = interp_eval_instr(m, y, ops, NULL);
        ok = v[i] != NULL;
    }
    const hlo_instr *root = &comp->instrs[comp->root];
    for (uint32_t k = 0; k < 2 && ok; k++) {
        const interp_val *r = v[root->operands[k]];
        ok = r && r->n == 1;
        if (ok) out[k] = interp_val_get(r, 0);
    }
    for (uint32_t i = 0; i < comp->ninstrs; i++) interp_val_free(v[i]);
    free(v);
    return ok;
}

static bool same_value(double a, double b) { return (isnan(a) && isnan(b)) || a == b; }

/* Which pairs the selection of `kind` may return for (a, b): bit 0 a, bit 1
 * b (both: the pairs are equal, or both values are NaN). */
static unsigned want_pick(int kind, const double a[2], const double b[2]) {
    bool na = isnan(a[0]), nb = isnan(b[0]);
    if (na || nb) return (na ? 1u : 0u) | (nb ? 2u : 0u);
    if (a[0] != b[0]) return (kind == SEL_ARGMAX) == (a[0] > b[0]) ? 1u : 2u;
    return a[1] < b[1] ? 1u : a[1] > b[1] ? 2u : 3u;
}

int lf_select_kind(const hlo_module *m, const hlo_instr *in) {
    const hlo_attr *ta = instr_attr(in, A_TO_APPLY);
    if (in->op != OP_REDUCE || in->noperands != 4 || !ta || ta->v.ints[0] >= m->ncomps) return SEL_NONE;
    const hlo_comp *comp = &m->comps[ta->v.ints[0]];
    if (!order_only(comp)) return SEL_NONE;
    int dt[4];
    for (uint32_t p = 0; p < 4; p++) dt[p] = comp->instrs[comp->params[p]].shape.dtype;
    /* values of a float or integer type (not pred: its 0 and 1 would read
     * like positions), positions of one integer type */
    if (dt[0] != dt[2] || dt[1] != dt[3] || !dtype_is_int(dt[1]) || !(dtype_is_float(dt[0]) || dtype_is_int(dt[0])))
        return SEL_NONE;
    /* One case of each order: values apart from the positions, so which
     * parameter a result is can be told from its number. */
    static const double fv[][2] = {{10, 20}, {20, 10}, {10, 10}, {NAN, 10}, {10, NAN}, {NAN, NAN}};
    static const double pv[][2] = {{0, 1}, {1, 0}, {0, 0}};
    uint32_t nv = dtype_is_float(dt[0]) ? 6 : 3;
    bool ok[3] = {false, true, true};
    for (uint32_t i = 0; i < nv; i++)
        for (uint32_t j = 0; j < 3; j++) {
            double args[4] = {fv[i][0], pv[j][0], fv[i][1], pv[j][1]}, out[2];
            double a[2] = {args[0], args[1]}, b[2] = {args[2], args[3]};
            if (!run_reducer(m, comp, dt, args, out)) return SEL_NONE;
            unsigned got = (same_value(out[0], a[0]) && out[1] == a[1] ? 1u : 0u) |
                (same_value(out[0], b[0]) && out[1] == b[1] ? 2u : 0u);
            for (int k = SEL_ARGMAX; k <= SEL_ARGMIN; k++) ok[k] &= got && (got & want_pick(k, a, b));
        }
    return ok[SEL_ARGMAX] ? SEL_ARGMAX : ok[SEL_ARGMIN] ? SEL_ARGMIN : SEL_NONE;
}

int lf_select_red(const hlo_module *m, const hlo_instr *in, uint32_t o) {
    int k = o < 2 ? lf_select_kind(m, in) : SEL_NONE;
    if (!k) return RED_NONE;
    return o == 1 ? RED_ARG : k == SEL_ARGMAX ? RED_MAX : RED_MIN;
}

/* ---- the transfer function ---- */

static bool pairs_of(lstate *s, int kind, eid *node, view *v, int *sharded, view_dim *axes, bool *owed, bool *unsure);

/* A tuple of the elements of node (a variadic reduce over the global
 * operands), each under v with its own partial reduction red[j]. */
static lval pair_tuple(lstate *s, eid node, const view *v, const uint8_t *red, bool assumed) {
    lift_ctx *c = s->c;
    const hlo_instr *in = s->in;
    lval t = {.kind = LV_TUPLE, .n = in->shape.ntuple};
    t.elems = arena_alloc(c->a, (t.n + 1) * sizeof *t.elems);
    for (uint32_t j = 0; j < t.n; j++) {
        const shape *es = &in->shape.tuple[j];
        int64_t dims[VIEW_MAX_RANK];
        view w = *v;
        w.red = v->partial ? red[j] : 0;
        lf_global_dims(c, &w, es, dims);
        eid e = lf_mk_element(c, node, j, lf_type_of(c, es->dtype, dims, es->rank));
        t.elems[j] = term(e, w, assumed);
    }
    return t;
}

/* The tuple class whose element j is class cls, or cls reshaped (a unit dim
 * added before a gather); EID_NONE when there is none. */
static eid element_of(lift_ctx *c, eid cls, uint32_t j) {
    const eid *ch;
    for (int hop = 0; hop < 2; hop++) {
        for (eid k = eg_class_first(c->g, eg_find(c->g, cls)); k != EID_NONE; k = eg_class_next(c->g, k)) {
            uint32_t n, nw;
            const eid *kids = eg_node_children(c->g, k, &n);
            const int64_t *w = eg_attr_words(c->g, eg_node_attr(c->g, k), &nw);
            bool at_j = j ? nw == 3 && w[0] == A_INDEX && w[2] == (int64_t)j : nw == 0;
            if (eg_node_op(c->g, k) == OP_GET_TUPLE_ELEMENT && n == 1 && at_j) return eg_find(c->g, kids[0]);
        }
        if (hop || lf_class_node(c, cls, OP_RESHAPE, 1, &ch) == EID_NONE) return EID_NONE;
        cls = ch[0];
    }
    return EID_NONE;
}

/* The selecting reduce whose position element value i of comp is (a
 * get-tuple-element 1 of it, through reshapes when `reshaped`), lifted with
 * its positions local to each device's block (owed, its value element
 * still a partial term); NULL otherwise. */
static const hlo_instr *owing_reduce(lstate *s, uint32_t i, bool reshaped) {
    const hlo_comp *comp = s->comp;
    const hlo_instr *y = &comp->instrs[i];
    while (reshaped && (y->op == OP_RESHAPE || y->op == OP_BITCAST || y->op == OP_COPY) && y->noperands == 1)
        y = &comp->instrs[y->operands[0]];
    if (y->op != OP_GET_TUPLE_ELEMENT || y->noperands != 1 || instr_int(y, A_INDEX, 0) != 1) return NULL;
    const hlo_instr *r = &comp->instrs[y->operands[0]];
    const lval *t = &s->vals[y->operands[0]];
    if (r->op != OP_REDUCE || r->noperands != 4 || t->kind != LV_TUPLE || t->n != 2 || t->elems[1].kind != LV_UNKNOWN ||
        t->elems[0].kind != LV_TERM || !t->elems[0].v.partial)
        return NULL;
    return r;
}

/* The pieces of selecting reduce r, lifted before with its positions owed
 * (pairs_of over its operands' values again: the same classes); *pos its
 * position element as it would be with the blocks' offsets added. */
static bool owed_pairs(lstate *s, const hlo_instr *r, eid *node, int *d, view_dim *axes, lval *pos) {
    lift_ctx *c = s->c;
    lval ops[4];
    for (uint32_t o = 0; o < 4; o++) ops[o] = s->vals[r->operands[o]];
    lstate s2 = {c, s->comp, r, ops, s->vals, NULL};
    for (uint32_t o = 2; o < 4; o++) lf_uniform_dev_as_term(&s2, o);
    int kind = lf_select_kind(c->cur, r);
    view v;
    bool owed, unsure;
    if (!kind || !pairs_of(&s2, kind, node, &v, d, axes, &owed, &unsure) || !owed || *d < 0 || !v.partial) return false;
    uint8_t red[2] = {kind == SEL_ARGMAX ? RED_MAX : RED_MIN, RED_ARG};
    lval t = pair_tuple(&s2, *node, &v, red, s->vals[r->operands[0]].assumed);
    *pos = t.elems[1];
    pos->partial_unsure = unsure;
    return true;
}

bool lf_arg_offset(lstate *s, lval *out) {
    lift_ctx *c = s->c;
    const hlo_instr *in = s->in;
    if (c->baseline_mode || in->op != OP_ADD || in->noperands != 2) return false;
    for (uint32_t k = 0; k < 2; k++) {
        const hlo_instr *r = owing_reduce(s, in->operands[k], false);
        const lval *o = &s->ops[1 - k];
        if (!r || o->kind != LV_DEV || lf_dev_uniform(c, o)) continue;
        for (int64_t dv = 0; dv < c->ndev; dv++)
            for (uint32_t e = 1; e < o->count; e++)
                if (o->dev[dv * o->count + e] != o->dev[dv * o->count]) return false;
        eid node;
        int d;
        view_dim axes;
        lval pos;
        if (!owed_pairs(s, r, &node, &d, &axes, &pos)) return false;
        int64_t n = s->comp->instrs[r->operands[0]].shape.dims[d], base, parts;
        view_dim got;
        uint32_t mask = lf_block_offsets(c, o->dev, o->count, n, &base, &parts, &got);
        if (!mask || base != 0 || !lf_same_dim(&got, &axes)) return false;
        *out = pos;
        return true;
    }
    return false;
}

/* The tuple node of reduce r over children ch with its dimensions {dim}. */
static eid reduce_over(lift_ctx *c, const hlo_instr *r, int64_t dim, const eid *ch) {
    hlo_instr ri = *r;
    hlo_attr *attrs = arena_alloc(c->a, (r->nattrs + 1) * sizeof *attrs);
    if (r->nattrs) memcpy(attrs, r->attrs, r->nattrs * sizeof *attrs);
    for (uint32_t k = 0; k < r->nattrs; k++)
        if (attrs[k].key == A_DIMENSIONS) attrs[k].v.ints = arena_memdup(c->a, &dim, sizeof dim), attrs[k].n = 1;
    ri.attrs = attrs;
    return lf_node(c, c->cur, &ri, ch, r->noperands, r->shape.dims, c->origin);
}

/* Element j of tuple node t, of dtype dt and dims gd[rank]. */
static eid element(lift_ctx *c, eid t, uint32_t j, int dt, const int64_t *gd, uint32_t rank) {
    return lf_mk_element(c, t, j, lf_type_of(c, dt, gd, rank));
}

/* Operand 1 of selecting reduce s an all-gather of positions local to each
 * device's block (owing_reduce), beside the stack of their values (x0, the
 * same pairs, gathered along gd over ga): what the program computes is
 * every block's pair — the selection among the block with positions 0..n-1
 * (x reshaped with the dim split into [blocks, n]) — selected among by s.
 * The value is the global pair's; the position one within the winning
 * block, where the baseline's is one in the whole dim: lifted as what it
 * is (*out), with a finding once the outputs then differ (lf_pending: a
 * baseline may want the position within the block). */
static bool local_stack(lstate *s, int kind, const lval *x0, int ga, uint32_t gd, lval *out) {
    lift_ctx *c = s->c;
    const hlo_instr *in = s->in;
    uint32_t nd;
    const int64_t *rd = instr_ints(in, A_DIMENSIONS, &nd);
    const hlo_instr *g = &s->comp->instrs[in->operands[1]];
    const hlo_instr *r = g->op == OP_ALL_GATHER && g->noperands == 1 ? owing_reduce(s, g->operands[0], true) : NULL;
    const shape *pre = &s->comp->instrs[s->comp->instrs[in->operands[0]].operands[0]].shape;
    eid node;
    int d;
    view_dim axes;
    lval pos;
    const eid *ch;
    if (!r || nd != 1 || rd[0] != (int64_t)gd || x0->v.partial != (uint32_t)ga ||
        x0->v.rank != in->shape.tuple[0].rank + 1 || x0->v.red != (kind == SEL_ARGMAX ? RED_MAX : RED_MIN) ||
        pre->dims[gd] != 1 || lf_scale_of(x0) != 1 || x0->partial_unsure || lift_groups_axes(c, g, true) != ga ||
        !owed_pairs(s, r, &node, &d, &axes, &pos) || element_of(c, x0->cls, 0) != eg_find(c->g, node) ||
        lf_class_node(c, node, OP_REDUCE, 4, &ch) == EID_NONE)
        return false;
    uint32_t ng;
    const int64_t *gdims = instr_ints(g, A_DIMENSIONS, &ng);
    if (ng != 1 || gdims[0] != (int64_t)gd || s->comp->instrs[g->operands[0]].shape.dims[gd] != 1) return false;
    /* blocks in the stack's order: the dim's axes major first in mesh order */
    for (uint32_t a = 1; a < axes.naxes; a++)
        if (axes.axes[a - 1] >= axes.axes[a]) return false;
    for (uint32_t o = 2; o < 4; o++)
        if (s->ops[o].kind != LV_TERM || s->ops[o].v.partial) return false;
    /* x with dim d split into [blocks, n]; positions 0..n-1 along n (the
     * e-graph's arrays move as it grows: copied first) */
    eid kid[4] = {ch[0], ch[1], ch[2], ch[3]};
    uint32_t xr;
    const int64_t *xt = eg_type_dims(c->g, eg_class_type(c->g, kid[0]), &xr);
    int64_t n = s->comp->instrs[r->operands[0]].shape.dims[d], sp[VIEW_MAX_RANK + 1], bl[VIEW_MAX_RANK], xg[VIEW_MAX_RANK];
    if (xr >= VIEW_MAX_RANK || n <= 0 || xt[d] % n) return false;
    memcpy(xg, xt, xr * sizeof *xg);
    for (uint32_t k = 0, q = 0; k < xr; k++) {
        if (k == (uint32_t)d) sp[q++] = xg[k] / n;
        sp[q++] = k == (uint32_t)d ? n : xg[k];
    }
    const shape *es0 = &in->shape.tuple[0], *es1 = &in->shape.tuple[1];
    eid xs =
        lf_mk_reshape(c, kid[0], lf_type_of(c, eg_type_dtype(c->g, eg_class_type(c->g, kid[0])), sp, xr + 1), c->origin);
    int64_t iw[3] = {A_IOTA_DIMENSION, 1, d + 1};
    eid io = eg_add(c->g, OP_IOTA, eg_attr(c->g, iw, 3), lf_type_of(c, es1->dtype, sp, xr + 1), NULL, 0, c->origin);
    eid k1[4] = {xs, io, kid[2], kid[3]};
    eid blocks = reduce_over(c, r, d + 1, k1);
    for (uint32_t k = 0, q = 0; k <= xr; k++)
        if (k != (uint32_t)d + 1) bl[q++] = sp[k];
    eid k2[4] = {element(c, blocks, 0, es0->dtype, bl, xr), element(c, blocks, 1, es1->dtype, bl, xr), s->ops[2].cls,
                 s->ops[3].cls};
    eid sel = reduce_over(c, in, d, k2);
    int64_t kept[VIEW_MAX_RANK];
    for (uint32_t k = 0, q = 0; k < xr; k++)
        if (k != (uint32_t)d) kept[q++] = xg[k];
    view w = view_dup(es0->rank);
    for (uint32_t k = 0, q = 0; k < x0->v.rank; k++)
        if (k != gd) w.dims[q++] = x0->v.dims[k];
    lval t = {.kind = LV_TUPLE, .n = 2};
    t.elems = arena_alloc(c->a, 3 * sizeof *t.elems);
    for (uint32_t j = 0; j < 2; j++) {
        const shape *es = j ? es1 : es0;
        int64_t gdm[VIEW_MAX_RANK];
        if (es->rank != w.rank) return false;
        lf_global_dims(c, &w, es, gdm);
        uint32_t ty = lf_type_of(c, es->dtype, gdm, es->rank);
        eid e = j ? lf_mk_reshape(c, element(c, sel, 1, es->dtype, kept, xr - 1), ty, c->origin)
                  : lf_mk_reshape(c, x0->cls, ty, c->origin);
        t.elems[j] = term(e, w, x0->assumed || pos.assumed || s->ops[2].assumed || s->ops[3].assumed);
    }
    lf_pending(c, KIND_WRONG_SHARD_DIM, s->comp, in,
               "%s selects among positions that %s gathers from %s, whose positions are an iota of each device's own "
               "block of dimension %d without the block's offset: the position it returns lies within one block, not "
               "in the whole dimension",
               in->name, g->name, r->name, d);
    *out = t;
    return true;
}

/* The stack of a group's (value, position) pairs — both elements of one
 * selecting reduce, partial over the axes two all-gathers along dim d
 * collect — reduced over d by a reducer of the same kind with the same
 * inits: the complete pair, on every device (false: not this form). */
static bool stacked_pairs(lstate *s, int kind, lval *out) {
    lift_ctx *c = s->c;
    const hlo_instr *in = s->in;
    uint32_t nd, d[2];
    const int64_t *rd = instr_ints(in, A_DIMENSIONS, &nd);
    int axes[2];
    const lval *x[2];
    if (s->ops[0].kind != LV_UNKNOWN || !lf_gathered_partials(s, in->operands[0], &axes[0], &d[0], &x[0])) return false;
    if (s->ops[1].kind == LV_UNKNOWN && kind && local_stack(s, kind, x[0], axes[0], d[0], out)) return true;
    if (s->ops[1].kind != LV_UNKNOWN || !lf_gathered_partials(s, in->operands[1], &axes[1], &d[1], &x[1])) return false;
    const shape *pre = &s->comp->instrs[s->comp->instrs[in->operands[0]].operands[0]].shape;
    if (!kind || x[0]->v.rank != in->shape.tuple[0].rank + 1 || axes[0] != axes[1] || d[0] != d[1] || nd != 1 ||
        rd[0] != (int64_t)d[0] || pre->dims[d[0]] != 1 || x[0]->v.partial != (uint32_t)axes[0] ||
        x[1]->v.partial != x[0]->v.partial || x[0]->v.red != (kind == SEL_ARGMAX ? RED_MAX : RED_MIN) ||
        x[1]->v.red != RED_ARG || x[0]->partial_unsure || x[1]->partial_unsure || !lf_same_sharding(&x[0]->v, &x[1]->v) ||
        lf_scale_of(x[0]) != 1 || lf_scale_of(x[1]) != 1)
        return false;
    eid node = element_of(c, x[0]->cls, 0);
    const eid *ch;
    if (node == EID_NONE || node != element_of(c, x[1]->cls, 1) || lf_class_node(c, node, OP_REDUCE, 4, &ch) == EID_NONE)
        return false;
    for (uint32_t o = 2; o < 4; o++)
        if (s->ops[o].kind != LV_TERM || eg_find(c->g, s->ops[o].cls) != eg_find(c->g, ch[o])) return false;
    view w = view_dup(in->shape.tuple[0].rank);
    for (uint32_t k = 0, q = 0; k < x[0]->v.rank; k++)
        if (k != d[0]) w.dims[q++] = x[0]->v.dims[k];
    lval t = {.kind = LV_TUPLE, .n = 2};
    t.elems = arena_alloc(c->a, 3 * sizeof *t.elems);
    for (uint32_t j = 0; j < 2; j++) {
        const shape *es = &in->shape.tuple[j];
        int64_t gd[VIEW_MAX_RANK];
        if (es->rank != w.rank) return false;
        lf_global_dims(c, &w, es, gd);
        t.elems[j] = term(lf_mk_reshape(c, x[j]->cls, lf_type_of(c, es->dtype, gd, es->rank), c->origin), w,
                          x[0]->assumed || x[1]->assumed);
    }
    *out = t;
    return true;
}

/* ---- the winner of a stack of partial maxima ----
 * Greedy sampling over vocab-parallel logits gathers each device's max (a
 * partial max: the stack of the blocks' maxima) and selects among the stack
 * with positions 0..blocks-1: the value is the row's max, the position J
 * the first block that holds it. Each block's own position of its max (the
 * positions of an argmax of the same rows with the blocks' offsets, gathered
 * alike) taken at J is the first position of the row's max: the baseline's
 * argmax (lf_stack_pick). J is lifted as what it is — the selection among
 * the blocks' maxima — and as index values in [0, blocks), proved, so that
 * take_along_axis's wrap and bounds check settle. */
struct lift_winner {
    eid j;         /* element 1 of the selection among the blocks: the source of the index values */
    eid x, init;   /* the rows selected among (global term) and the max reduction's init */
    int64_t dim;   /* the dim of x the blocks split */
    int64_t nb;    /* blocks */
    int kind;      /* SEL_ARGMAX or SEL_ARGMIN */
    uint32_t axes; /* the mesh axes the blocks run over */
    view xv;       /* x's view (how the blocks are laid over the devices) */
    view w;        /* J's view */
    /* top_k (lf_topk_blocks): the blocks' own top k, their values and
     * positions within each block as laid over the devices (vals, pos),
     * k values each; for J the global result's positions (res) */
    bool topk;
    eid vals, pos, res;
    int64_t k, n;
    const hlo_instr *op;
};

static const int64_t *node_attr(lift_ctx *c, eid k, int64_t key, uint32_t *n);
static const hlo_instr *pair_reduce(lstate *s, eid node, const lval **val);
typedef struct lift_winner lift_winner;
static bool topk_pick(lstate *s, const lift_winner *wn, lval *out);

static const lift_winner *winner_of(const lift_ctx *c, eid j) {
    for (uint32_t k = 0; k < c->nwinners; k++)
        if (c->winners[k].j == j) return &c->winners[k];
    return NULL;
}

/* The blocks' top k whose values (as laid over the devices) are class v. */
static const lift_winner *blocks_of(lift_ctx *c, eid v) {
    for (uint32_t k = 0; k < c->nwinners; k++)
        if (c->winners[k].topk && c->winners[k].j == EID_NONE && eg_find(c->g, c->winners[k].vals) == eg_find(c->g, v))
            return &c->winners[k];
    return NULL;
}

static void winner_note(lift_ctx *c, const lift_winner *w) {
    if (w->j != EID_NONE && winner_of(c, w->j)) return;
    ARENA_GROW(c->a, c->winners, c->nwinners, c->capwinners, 4);
    c->winners[c->nwinners++] = *w;
}

/* Whether instruction i of comp is an iota along dim d of its shape (its
 * own iota_dimension, or a rank-1 iota broadcast along d). */
static bool iota_along(const hlo_comp *comp, uint32_t i, uint32_t d) {
    const hlo_instr *p = &comp->instrs[i];
    if (p->op == OP_IOTA) return instr_int(p, A_IOTA_DIMENSION, 0) == (int64_t)d;
    uint32_t nb;
    const int64_t *bd = p->op == OP_BROADCAST && p->noperands == 1 ? instr_ints(p, A_DIMENSIONS, &nb) : NULL;
    const hlo_instr *io = bd ? &comp->instrs[p->operands[0]] : NULL;
    return io && io->op == OP_IOTA && io->shape.rank == 1 && nb == 1 && bd[0] == (int64_t)d;
}

/* Selecting reduce s over the stack of a group's partial max (min) values,
 * gathered along its dim with positions iota along it (the first block that
 * holds the row's greatest value): the row's max and J (above). */
static bool stack_winner(lstate *s, int kind, lval *out) {
    lift_ctx *c = s->c;
    const hlo_instr *in = s->in;
    const hlo_comp *comp = s->comp;
    uint32_t nd, gd;
    int ga;
    const lval *m;
    const int64_t *rd = instr_ints(in, A_DIMENSIONS, &nd);
    if (!kind || s->ops[0].kind != LV_UNKNOWN || !lf_gathered_partials(s, in->operands[0], &ga, &gd, &m)) return false;
    const hlo_instr *g = &comp->instrs[in->operands[0]];
    const shape *pre = &comp->instrs[g->operands[0]].shape;
    int red = kind == SEL_ARGMAX ? RED_MAX : RED_MIN;
    if (nd != 1 || rd[0] != (int64_t)gd || m->v.red != red || m->v.partial != (uint32_t)ga || m->partial_unsure ||
        lf_scale_of(m) != 1 || m->diff || m->zm || pre->dims[gd] != 1 || m->v.rank != in->shape.tuple[0].rank + 1 ||
        s->ops[1].kind != LV_TERM || !iota_along(comp, in->operands[1], gd) || s->ops[2].kind != LV_TERM ||
        s->ops[3].kind != LV_TERM || !lf_class_is_zero(c, s->ops[3].cls))
        return false;
    /* the reduce that made the partial values (through shape-keeping ops) */
    const hlo_instr *r = &comp->instrs[g->operands[0]];
    while ((r->op == OP_RESHAPE || r->op == OP_BITCAST || r->op == OP_COPY) && r->noperands == 1)
        r = &comp->instrs[r->operands[0]];
    uint32_t nr;
    const int64_t *rdims = r->op == OP_REDUCE && r->noperands == 2 ? instr_ints(r, A_DIMENSIONS, &nr) : NULL;
    if (!rdims || nr != 1 || instr_reducer(c->cur, r) != red) return false;
    const lval *xv = &s->vals[r->operands[0]], *iv = &s->vals[r->operands[1]];
    int64_t dr = rdims[0];
    const shape *xs = &comp->instrs[r->operands[0]].shape;
    if (xv->kind != LV_TERM || xv->v.partial || lf_scale_of(xv) != 1 || xv->diff || xv->zm || iv->kind != LV_TERM ||
        eg_find(c->g, iv->cls) != eg_find(c->g, s->ops[2].cls) || xs->rank >= VIEW_MAX_RANK || dr < 0 ||
        dr >= (int64_t)xs->rank)
        return false;
    /* the stack's order is the blocks' order: the dim's axes are the
     * group's, major first in mesh order */
    const view_dim *vd = &xv->v.dims[dr];
    uint32_t mask = 0;
    for (uint32_t a = 0; a < vd->naxes; a++) {
        if (a && vd->axes[a - 1] >= vd->axes[a]) return false;
        mask |= 1u << vd->axes[a];
    }
    uint32_t xr;
    const int64_t *xt = eg_type_dims(c->g, eg_class_type(c->g, xv->cls), &xr);
    int64_t n = xs->dims[dr];
    if (mask != (uint32_t)ga || xr != xs->rank || n <= 0 || xt[dr] % n || xt[dr] / n != g->shape.dims[gd]) return false;
    int64_t nb = xt[dr] / n, sp[VIEW_MAX_RANK + 1], bm[VIEW_MAX_RANK], kept[VIEW_MAX_RANK];
    for (uint32_t k = 0, q = 0, e = 0; k < xr; k++) {
        if (k == (uint32_t)dr) sp[q++] = nb;
        sp[q++] = k == (uint32_t)dr ? n : xt[k];
        bm[k] = k == (uint32_t)dr ? nb : xt[k];
        if (k != (uint32_t)dr) kept[e++] = xt[k];
    }
    int xdt = eg_type_dtype(c->g, eg_class_type(c->g, xv->cls));
    const shape *es0 = &in->shape.tuple[0], *es1 = &in->shape.tuple[1];
    /* the blocks' maxima (x with dim dr split into [blocks, n], reduced
     * over n: the e-graph's arrays move as it grows, so classes are copied) */
    eid x = xv->cls, init0 = s->ops[2].cls, init1 = s->ops[3].cls;
    eid k1[2] = {lf_mk_reshape(c, x, lf_type_of(c, xdt, sp, xr + 1), c->origin), init0};
    hlo_instr ri = *r;
    hlo_attr *attrs = arena_alloc(c->a, (r->nattrs + 1) * sizeof *attrs);
    if (r->nattrs) memcpy(attrs, r->attrs, r->nattrs * sizeof *attrs);
    int64_t inner = dr + 1;
    for (uint32_t k = 0; k < r->nattrs; k++)
        if (attrs[k].key == A_DIMENSIONS) attrs[k].v.ints = arena_memdup(c->a, &inner, sizeof inner), attrs[k].n = 1;
    ri.attrs = attrs;
    eid blocks = lf_node(c, c->cur, &ri, k1, 2, bm, c->origin);
    int64_t iw[3] = {A_IOTA_DIMENSION, 1, dr};
    eid io = eg_add(c->g, OP_IOTA, eg_attr(c->g, iw, dr ? 3 : 0), lf_type_of(c, es1->dtype, bm, xr), NULL, 0, c->origin);
    eid k2[4] = {blocks, io, init0, init1};
    eid sel = reduce_over(c, in, dr, k2);
    eid j = element(c, sel, 1, es1->dtype, kept, xr - 1);
    view w = view_dup(es0->rank);
    for (uint32_t k = 0, q = 0; k < m->v.rank; k++)
        if (k != gd) w.dims[q++] = m->v.dims[k];
    int64_t gdm[VIEW_MAX_RANK];
    lf_global_dims(c, &w, es1, gdm);
    if (es0->rank != xr - 1 || memcmp(gdm, kept, (xr - 1) * sizeof *gdm)) return false;
    bool assumed = m->assumed || xv->assumed || s->ops[2].assumed || s->ops[3].assumed;
    lval t = {.kind = LV_TUPLE, .n = 2};
    t.elems = arena_alloc(c->a, 3 * sizeof *t.elems);
    t.elems[0] = term(lf_mk_reshape(c, m->cls, lf_type_of(c, es0->dtype, gdm, es0->rank), c->origin), w, assumed);
    pw_fn *f = arena_alloc(c->a, (size_t)c->ndev * sizeof *f);
    for (int64_t d = 0; d < c->ndev; d++) {
        pw_shift(&f[d], 0);
    }
    t.elems[1] = (lval){.kind = LV_PW, .pw = f, .pos = j, .src = j, .v = w, .cls = EID_NONE, .assumed = assumed};
    lf_proven_domain(c, j, nb);
    lift_winner wn = {.j = j, .x = x, .init = init0, .dim = dr, .nb = nb, .kind = kind, .axes = (uint32_t)ga,
                      .xv = xv->v, .w = w};
    winner_note(c, &wn);
    *out = t;
    return true;
}

bool lf_takes_along(const hlo_instr *g, uint32_t d, uint32_t rank) {
    uint32_t no, nc, ns, nob, nib, nsz;
    const int64_t *od = instr_ints(g, A_OFFSET_DIMS, &no), *cd = instr_ints(g, A_COLLAPSED_SLICE_DIMS, &nc);
    const int64_t *sm = instr_ints(g, A_START_INDEX_MAP, &ns), *ob = instr_ints(g, A_OPERAND_BATCHING_DIMS, &nob);
    const int64_t *ib = instr_ints(g, A_START_INDICES_BATCHING_DIMS, &nib), *sz = instr_ints(g, A_SLICE_SIZES, &nsz);
    (void)od;
    if (g->op != OP_GATHER || g->noperands != 2 || no || nc != 1 || cd[0] != (int64_t)d || ns != 1 || sm[0] != (int64_t)d ||
        nob + 1 != rank || nib != nob || nsz != rank || instr_int(g, A_INDEX_VECTOR_DIM, 0) != (int64_t)rank)
        return false;
    for (uint32_t k = 0, q = 0; k < rank; k++) {
        if (sz[k] != 1) return false;
        if (k == d) continue;
        if (ob[q] != (int64_t)k || ib[q] != (int64_t)k) return false;
        q++;
    }
    return true;
}

/* The stack gathered along *gd over *ga by all-gather i: of positions of a
 * selection with the blocks' offsets (*p), or (*owed) of positions local to
 * each device's block, which *p then holds as they would be with the
 * offsets, *n the block's size. */
static bool position_stack(lstate *s, uint32_t i, int *ga, uint32_t *gd, lval *p, bool *owed, int64_t *n) {
    const lval *q;
    *owed = false;
    if (lf_gathered_partials(s, i, ga, gd, &q)) {
        *p = *q;
        return true;
    }
    const hlo_comp *comp = s->comp;
    const hlo_instr *g = &comp->instrs[i];
    uint32_t ng;
    const int64_t *gdims = g->op == OP_ALL_GATHER && g->noperands == 1 ? instr_ints(g, A_DIMENSIONS, &ng) : NULL;
    const hlo_instr *r = gdims && ng == 1 ? owing_reduce(s, g->operands[0], true) : NULL;
    eid node;
    int d;
    view_dim axes;
    if (!r || gdims[0] < 0 || (uint64_t)gdims[0] >= g->shape.rank || comp->instrs[g->operands[0]].shape.dims[gdims[0]] != 1 ||
        (*ga = lift_groups_axes(s->c, g, true)) <= 0 || !owed_pairs(s, r, &node, &d, &axes, p) || d < 0)
        return false;
    /* p is the positions' value before the reshape to the gathered shape */
    int64_t gdm[VIEW_MAX_RANK];
    const shape *pre = &comp->instrs[g->operands[0]].shape;
    view v = view_dup(pre->rank);
    for (uint32_t k = 0, q2 = 0; k < pre->rank; k++)
        if (k != (uint32_t)gdims[0]) v.dims[k] = p->v.dims[q2++];
    v.partial = p->v.partial;
    v.red = p->v.red;
    lf_global_dims(s->c, &v, pre, gdm);
    p->cls = lf_mk_reshape(s->c, p->cls, lf_type_of(s->c, pre->dtype, gdm, pre->rank), s->c->origin);
    p->v = v;
    *gd = (uint32_t)gdims[0];
    *owed = true;
    *n = comp->instrs[r->operands[0]].shape.dims[d];
    return true;
}

bool lf_stack_pick(lstate *s, lval *out) {
    lift_ctx *c = s->c;
    const hlo_instr *in = s->in;
    int ga;
    uint32_t gd;
    lval p;
    bool owed;
    int64_t n = 0;
    const lval *ix = &s->ops[1];
    if (c->baseline_mode || in->op != OP_GATHER || in->noperands != 2 || ix->kind != LV_PW) return false;
    const lift_winner *wn = winner_of(c, ix->src);
    if (wn && wn->topk) return topk_pick(s, wn, out);
    if (s->ops[0].kind != LV_UNKNOWN || !position_stack(s, in->operands[0], &ga, &gd, &p, &owed, &n)) return false;
    const shape *st = &s->comp->instrs[in->operands[0]].shape;
    if (!wn || p.v.red != RED_ARG || p.partial_unsure || lf_scale_of(&p) != 1 || p.diff || p.zm ||
        p.v.partial != wn->axes || (uint32_t)ga != wn->axes || !lf_takes_along(in, gd, st->rank) ||
        in->shape.rank != st->rank || !lf_pw_identity_on(c, ix, wn->nb) || st->dims[gd] != wn->nb)
        return false;
    for (uint32_t k = 0; k < st->rank; k++)
        if (in->shape.dims[k] != (k == gd ? 1 : st->dims[k])) return false;
    /* the positions are those of a selection of the same kind among the
     * same rows over the same dim from the same init, laid over the devices
     * as the blocks are */
    eid node = element_of(c, p.cls, 1);
    const lval *val;
    const hlo_instr *r = node == EID_NONE ? NULL : pair_reduce(s, node, &val);
    const eid *nk;
    uint32_t na;
    const int64_t *nd = r ? node_attr(c, lf_class_node(c, node, OP_REDUCE, 4, &nk), A_DIMENSIONS, &na) : NULL;
    if (!nd || na != 1 || nd[0] != wn->dim || lf_select_kind(c->cur, r) != wn->kind ||
        eg_find(c->g, nk[0]) != eg_find(c->g, wn->x) || eg_find(c->g, nk[2]) != eg_find(c->g, wn->init) ||
        s->vals[r->operands[0]].kind != LV_TERM || !lf_same_sharding(&s->vals[r->operands[0]].v, &wn->xv))
        return false;
    view stack = view_dup(wn->w.rank);
    for (uint32_t k = 0, q = 0; k < p.v.rank; k++)
        if (k != gd) stack.dims[q++] = p.v.dims[k];
    if (!lf_same_sharding(&stack, &wn->w)) return false;
    view v = view_dup(in->shape.rank);
    for (uint32_t k = 0, q = 0; k < in->shape.rank; k++)
        if (k != gd) v.dims[k] = wn->w.dims[q++];
    int64_t gdm[VIEW_MAX_RANK];
    lf_global_dims(c, &v, &in->shape, gdm);
    uint32_t ty = lf_type_of(c, in->shape.dtype, gdm, in->shape.rank);
    eid got = lf_mk_reshape(c, p.cls, ty, c->origin);
    if (owed) {
        /* positions within each block, taken at the first block that holds
         * the row's value: the global position less that block's offset */
        interp_val *k = lf_fold_size_ok(gdm, in->shape.rank) ? interp_val_new(in->shape.dtype, in->shape.rank, gdm) : NULL;
        if (!k) return false;
        for (int64_t e = 0; e < k->n; e++) interp_val_set(k, e, (double)n);
        eid jr = lf_mk_reshape(c, wn->j, ty, c->origin), kc = lf_const_term(c, k, c->origin);
        eid off = eg_add(c->g, OP_MULTIPLY, 0, ty, (eid[]){jr, kc}, 2, c->origin);
        got = eg_add(c->g, OP_SUBTRACT, 0, ty, (eid[]){got, off}, 2, c->origin);
        lf_pending(c, KIND_WRONG_SHARD_DIM, s->comp, in,
                   "%s takes, at the first block that holds the row's %s, positions that %s computes within each "
                   "device's own block of dimension %lld without the block's offset: the position it returns lies "
                   "within one block, not in the whole dimension",
                   in->name, wn->kind == SEL_ARGMAX ? "max" : "min", r->name, (long long)wn->dim);
    }
    *out = term(got, v, p.assumed || ix->assumed);
    return true;
}

/* ---- top k over a sharded dim ----
 * Each device's top_k of rows sharded along the last dim is the top k of its
 * block: x split into [blocks, n], top_k along n (values and positions within
 * the block), laid over the devices as the dim was (lf_topk_blocks). Gathered
 * and selected among by a top_k of no more values, the values are the rows'
 * top values (every block holds at most k of them), and the positions J
 * within the stack pick, from the stack of the blocks' positions with their
 * offsets, the rows' top positions: equal values keep the order of their
 * blocks, which is the order of their positions (lf_topk_stack, and
 * lf_stack_pick for the take). */

static bool topk_largest(const hlo_instr *in) { return instr_int(in, A_LARGEST, 1) != 0; }

bool lf_topk_blocks(lstate *s, lval *out) {
    lift_ctx *c = s->c;
    const hlo_instr *in = s->in;
    const lval *x = &s->ops[0];
    const shape *xs = &s->comp->instrs[in->operands[0]].shape;
    uint32_t L = xs->rank - 1;
    const view_dim *vd = &x->v.dims[L];
    if (c->baseline_mode || x->kind != LV_TERM || x->v.partial || lf_scale_of(x) != 1 || x->diff || x->zm ||
        xs->rank >= VIEW_MAX_RANK || in->shape.ntuple != 2 || in->shape.tuple[0].rank != xs->rank)
        return false;
    uint32_t mask = 0;
    for (uint32_t a = 0; a < vd->naxes; a++) {
        if (a && vd->axes[a - 1] >= vd->axes[a]) return false;
        mask |= 1u << vd->axes[a];
    }
    uint32_t xr;
    const int64_t *xt = eg_type_dims(c->g, eg_class_type(c->g, x->cls), &xr);
    int64_t n = xs->dims[L], k = in->shape.tuple[0].dims[L];
    if (!mask || xr != xs->rank || n <= 0 || k <= 0 || k > n || xt[L] % n) return false;
    int64_t nb = xt[L] / n, sp[VIEW_MAX_RANK + 1], bk[VIEW_MAX_RANK + 1], gl[VIEW_MAX_RANK];
    for (uint32_t q = 0; q < L; q++) sp[q] = bk[q] = gl[q] = xt[q];
    sp[L] = bk[L] = nb, sp[L + 1] = n, bk[L + 1] = k, gl[L] = nb * k;
    int xdt = eg_type_dtype(c->g, eg_class_type(c->g, x->cls));
    eid xb = lf_mk_reshape(c, x->cls, lf_type_of(c, xdt, sp, xr + 1), c->origin);
    eid node = lf_node(c, c->cur, in, &xb, 1, NULL, c->origin);
    lval t = {.kind = LV_TUPLE, .n = 2};
    t.elems = arena_alloc(c->a, 3 * sizeof *t.elems);
    eid el[2];
    for (uint32_t j = 0; j < 2; j++) {
        int dt = in->shape.tuple[j].dtype;
        eid e = lf_mk_element(c, node, j, lf_type_of(c, dt, bk, xr + 1));
        el[j] = lf_mk_reshape(c, e, lf_type_of(c, dt, gl, xr), c->origin);
        t.elems[j] = term(el[j], x->v, x->assumed);
    }
    lift_winner wn = {.j = EID_NONE, .x = x->cls, .dim = L, .nb = nb, .axes = mask, .xv = x->v, .topk = true,
                      .vals = el[0], .pos = el[1], .k = k, .n = n, .op = in};
    winner_note(c, &wn);
    *out = t;
    return true;
}

bool lf_topk_stack(lstate *s, lval *t) {
    lift_ctx *c = s->c;
    const hlo_instr *in = s->in;
    const lval *x = &s->ops[0];
    if (c->baseline_mode || t->kind != LV_TUPLE || t->n != 2 || t->elems[0].kind != LV_TERM || x->kind != LV_TERM ||
        x->v.partial || lf_scale_of(x) != 1 || x->diff || x->zm)
        return false;
    const lift_winner *b = blocks_of(c, x->cls);
    const shape *es = &in->shape.tuple[0];
    uint32_t L = es->rank - 1;
    if (!b || topk_largest(b->op) != topk_largest(in) || es->dims[L] > b->k || es->rank != b->xv.rank ||
        x->v.dims[L].naxes)
        return false;
    /* the rows' top values and positions, as the baseline's top_k of x */
    int64_t gd[VIEW_MAX_RANK];
    uint32_t xr;
    const int64_t *xt = eg_type_dims(c->g, eg_class_type(c->g, b->x), &xr);
    memcpy(gd, xt, xr * sizeof *gd);
    gd[L] = es->dims[L];
    eid bx = b->x;
    eid g = lf_node(c, c->cur, in, &bx, 1, NULL, c->origin);
    eid g0 = lf_mk_element(c, g, 0, lf_type_of(c, es->dtype, gd, es->rank));
    eid g1 = lf_mk_element(c, g, 1, lf_type_of(c, in->shape.tuple[1].dtype, gd, es->rank));
    eg_union(c->g, t->elems[0].cls, g0, NULL);
    if (dtype_is_float(es->dtype))
        lf_assume(c, "the rows top_k selects from hold no NaN (their order among other values is XLA's)");
    /* J: positions within the stack, in [0, blocks * k) */
    eid j = t->elems[1].kind == LV_TERM ? t->elems[1].cls : EID_NONE;
    if (j == EID_NONE) return false;
    pw_fn *f = arena_alloc(c->a, (size_t)c->ndev * sizeof *f);
    for (int64_t d = 0; d < c->ndev; d++) pw_shift(&f[d], 0);
    view w = t->elems[1].v;
    t->elems[1] = (lval){.kind = LV_PW, .pw = f, .pos = j, .src = j, .v = w, .cls = EID_NONE, .assumed = t->elems[1].assumed};
    lf_proven_domain(c, j, b->nb * b->k);
    lift_winner wn = *b;
    wn.j = j;
    wn.res = g1;
    wn.w = w;
    winner_note(c, &wn);
    return true;
}

/* Whether index values x are, on every device d, t + off[d] for t in [0, n). */
static bool shifted_on(const lift_ctx *c, const lval *x, int64_t n, const int64_t *off) {
    for (int64_t d = 0; d < c->ndev; d++) {
        const pw_fn *f = &x->pw[d];
        for (uint32_t k = 0; k < f->n; k++) {
            const pw_piece *p = &f->p[k];
            bool overlaps = (p->hi == PW_POS_INF || p->hi > 0) && (p->lo == PW_NEG_INF || p->lo < n);
            if (overlaps && (p->a != 1 || p->b != off[d])) return false;
        }
    }
    return true;
}

/* The blocks' positions with their offsets, side by side along the dim:
 * position i of the stack holds block i / k's, offset by that block's start
 * in x (i / k · n), the blocks in the order of the dim's axes. */
static eid offsets_added(lift_ctx *c, const lift_winner *b) {
    uint32_t r;
    const int64_t *pd = eg_type_dims(c->g, eg_class_type(c->g, b->pos), &r);
    int64_t dims[VIEW_MAX_RANK];
    memcpy(dims, pd, r * sizeof *dims);
    uint32_t ty = eg_class_type(c->g, b->pos);
    int dt = eg_type_dtype(c->g, ty);
    interp_val *k = lf_fold_size_ok(dims, r) ? interp_val_new(dt, r, dims) : NULL;
    if (!k) return EID_NONE;
    int64_t len = dims[r - 1];
    for (int64_t e = 0; e < k->n; e++) interp_val_set(k, e, (double)((e % len) / b->k * b->n));
    eid pos = b->pos, kc = lf_const_term(c, k, c->origin);
    return eg_add(c->g, OP_ADD, 0, ty, (eid[]){pos, kc}, 2, c->origin);
}

bool lf_topk_gather(lstate *s, lval *out) {
    lift_ctx *c = s->c;
    const hlo_instr *in = s->in;
    const lval *p = &s->ops[0];
    if (c->baseline_mode || in->op != OP_ALL_GATHER || in->noperands != 1 || p->kind != LV_PW || p->src == EID_NONE)
        return false;
    const lift_winner *b = NULL;
    for (uint32_t q = 0; q < c->nwinners && !b; q++)
        if (c->winners[q].topk && c->winners[q].j == EID_NONE && eg_find(c->g, c->winners[q].pos) == eg_find(c->g, p->src))
            b = &c->winners[q];
    uint32_t L = b ? b->xv.rank - 1 : 0, ng;
    const int64_t *gdims = b ? instr_ints(in, A_DIMENSIONS, &ng) : NULL;
    if (!gdims || ng != 1 || gdims[0] != (int64_t)L || in->shape.rank != b->xv.rank ||
        lift_groups_axes(c, in, true) != (int)b->axes || in->shape.dims[L] != b->nb * b->k ||
        !lf_same_sharding(&p->v, &b->xv))
        return false;
    int64_t *off = arena_alloc(c->a, (size_t)c->ndev * sizeof *off);
    for (int64_t d = 0; d < c->ndev; d++) off[d] = lf_dim_block(c, &b->xv.dims[L], d) * b->n;
    eid g = shifted_on(c, p, b->n, off) ? offsets_added(c, b) : EID_NONE;
    if (g == EID_NONE) return false;
    view v = b->xv;
    memset(&v.dims[L], 0, sizeof v.dims[L]);
    *out = term(g, v, p->assumed);
    return true;
}

/* The take of a top_k's positions J from the stack of the blocks' positions
 * (all-gathered along the dim, tiled): with their offsets, the rows' top
 * positions; without them, each position within its block (a pending
 * wrong-shard-dim: the global position modulo the block's size). */
static bool topk_pick(lstate *s, const lift_winner *wn, lval *out) {
    lift_ctx *c = s->c;
    const hlo_instr *in = s->in;
    const lval *ix = &s->ops[1], *st = &s->ops[0];
    uint32_t L = wn->xv.rank - 1;
    const lift_winner *b = blocks_of(c, wn->vals);
    if (!b || st->kind != LV_TERM || st->v.partial || lf_scale_of(st) != 1 || st->diff || st->zm ||
        st->v.dims[L].naxes || !lf_takes_along(in, L, in->shape.rank) || !lf_pw_identity_on(c, ix, wn->nb * wn->k))
        return false;
    uint32_t rr;
    const int64_t *rd = eg_type_dims(c->g, eg_class_type(c->g, wn->res), &rr);
    int64_t gdm[VIEW_MAX_RANK];
    if (in->shape.rank != rr || wn->w.rank != rr) return false;
    lf_global_dims(c, &wn->w, &in->shape, gdm);
    if (memcmp(gdm, rd, rr * sizeof *rd)) return false;
    uint32_t ty = lf_type_of(c, in->shape.dtype, gdm, rr);
    eid got = lf_mk_reshape(c, wn->res, ty, c->origin);
    eid sc = eg_find(c->g, st->cls);
    if (sc == eg_find(c->g, b->pos)) {
        interp_val *k = lf_fold_size_ok(gdm, rr) ? interp_val_new(in->shape.dtype, rr, gdm) : NULL;
        if (!k) return false;
        for (int64_t e = 0; e < k->n; e++) interp_val_set(k, e, (double)wn->n);
        eid kc = lf_const_term(c, k, c->origin);
        got = eg_add(c->g, OP_REMAINDER, 0, ty, (eid[]){got, kc}, 2, c->origin);
        lf_pending(c, KIND_WRONG_SHARD_DIM, s->comp, in,
                   "%s takes the top positions from positions that %s computes within each device's own block of "
                   "dimension %u without the block's offset: each position it returns lies within one block, not "
                   "in the whole dimension",
                   in->name, b->op->name, L);
    } else if (sc != eg_find(c->g, offsets_added(c, b)))
        return false;
    *out = term(got, wn->w, st->assumed || ix->assumed);
    return true;
}

/* Operand 1 of selecting reduce s, an iota of each device's own block along
 * the dim d it reduces (iota_dimension d, or a rank-1 iota broadcast along
 * d), while the values are sharded along d as `want` says: the positions
 * local to the block, which are the global iota's block minus the block's
 * offset. *g gets the global iota, built as the local one. */
static bool local_positions(lstate *s, const view *want, uint32_t d, eid *g) {
    lift_ctx *c = s->c;
    const hlo_instr *p = &s->comp->instrs[s->in->operands[1]];
    const lval *x = &s->ops[1];
    if (x->kind != LV_TERM || !view_is_dup(&x->v) || !want->dims[d].naxes || p->shape.rank != want->rank ||
        p->shape.rank > VIEW_MAX_RANK)
        return false;
    const hlo_instr *io = p->op == OP_BROADCAST && p->noperands == 1 ? &s->comp->instrs[p->operands[0]] : p;
    uint32_t nb;
    const int64_t *bd = p != io ? instr_ints(p, A_DIMENSIONS, &nb) : NULL;
    bool along = io->op == OP_IOTA &&
        (p == io ? instr_int(io, A_IOTA_DIMENSION, 0) == (int64_t)d : io->shape.rank == 1 && nb == 1 && bd[0] == (int64_t)d);
    if (!along) return false;
    int64_t parts = view_dim_parts(want, c->mesh, d), gi[1] = {io->shape.dims[0] * parts}, gp[VIEW_MAX_RANK];
    lf_global_dims(c, want, &p->shape, gp);
    eid t = lf_node(c, c->cur, io, NULL, 0, p == io ? gp : gi, c->origin);
    *g = p == io ? t : lf_node(c, c->cur, p, &t, 1, gp, c->origin);
    return true;
}

/* What a variadic reduce is, in pieces: the global reduce (*node) and the
 * view of its elements (*v, partial over the axes of a sharded reduced dim,
 * *sharded the one such dim or -1, *axes how it is sharded); *owed when its positions are local to
 * each device's block (the position element is then the global one minus
 * the block's offset, lf_arg_offset). *unsure as for lf_lift_reduce. False
 * when it is none of the forms in the file's head (said when worth it). */
static bool pairs_of(lstate *s, int kind, eid *node, view *v, int *sharded, view_dim *axes, bool *owed, bool *unsure) {
    lift_ctx *c = s->c;
    const hlo_instr *in = s->in;
    uint32_t n = in->noperands, k = n / 2, nd;
    const hlo_instr *src = &s->comp->instrs[in->operands[0]];
    const int64_t *rd = instr_ints(in, A_DIMENSIONS, &nd);
    *owed = *unsure = false;
    *sharded = -1;
    /* The operands read alike: under the view of the first that is data
     * (an iota of positions beside it is re-read under it). */
    uint32_t lead = 0;
    for (uint32_t o = 0; o < k; o++)
        if (s->ops[o].kind == LV_TERM && !s->ops[o].konst) {
            lead = o;
            break;
        }
    if (s->ops[lead].kind != LV_TERM) return false;
    view want = s->ops[lead].v;
    eid ch[16];
    for (uint32_t o = 0; o < n; o++) {
        /* (first: an iota of one element per block is also a constant,
         * which the re-reading would take) */
        if (o == 1 && kind && nd == 1 && rd[0] >= 0 && (uint64_t)rd[0] < want.rank &&
            !lf_same_sharding(&s->ops[o].v, &want) && local_positions(s, &want, (uint32_t)rd[0], &ch[1])) {
            *owed = true;
            continue;
        }
        if (o < k && !lf_same_sharding(&s->ops[o].v, &want)) lf_review_operand(s, o, &want);
        const lval *x = &s->ops[o];
        if (x->kind != LV_TERM || (o < k && (x->v.partial || !lf_same_sharding(&x->v, &want) || lf_scale_of(x) != 1)))
            return false;
        ch[o] = x->cls;
    }
    *v = view_dup(in->shape.tuple[0].rank);
    uint8_t partial = 0;
    for (uint32_t d = 0, q = 0; d < src->shape.rank; d++) {
        bool reduced = false;
        for (uint32_t j = 0; j < nd; j++) reduced |= rd[j] == (int64_t)d;
        if (!reduced) {
            if (q >= v->rank) return false;
            v->dims[q++] = want.dims[d];
            continue;
        }
        if (!want.dims[d].naxes) continue;
        for (uint32_t a = 0; a < want.dims[d].naxes; a++) partial |= (uint8_t)(1u << want.dims[d].axes[a]);
        *sharded = *sharded == -1 ? (int)d : -2;
        *axes = want.dims[d];
        *unsure |= s->ops[lead].ambiguous && src->shape.dims[d] == 1;
    }
    if (partial && !kind) {
        /* A reduced dim sharded: each device selects within its block,
         * which is a partial selection only for a reducer that selects. */
        lf_unsupported(c, s->comp, in,
                       "%s reduces a sharded dimension with a reducer of several values that is not "
                       "a selection of one (value, position) pair by value and lowest position (argmax, argmin)",
                       in->name);
        return false;
    }
    if (*owed && *sharded < 0) return false;
    v->partial = partial;
    *node = lf_node(c, c->cur, in, ch, n, in->shape.dims, c->origin);
    *unsure = *unsure && partial;
    return true;
}

lval lf_lift_reduce_tuple(lstate *s) {
    lift_ctx *c = s->c;
    const hlo_instr *in = s->in;
    uint32_t n = in->noperands, k = n / 2;
    /* the baseline's own reduce is its generic term (lift.c) */
    if (c->baseline_mode || n % 2 || n > 16 || in->shape.dtype != DT_TUPLE || in->shape.ntuple != k) return unknown();
    const hlo_instr *src = &s->comp->instrs[in->operands[0]];
    if (src->shape.rank > VIEW_MAX_RANK) return unknown();
    for (uint32_t o = k; o < n; o++) {
        lf_uniform_dev_as_term(s, o);
        const lval *init = &s->ops[o];
        if (init->kind != LV_TERM || init->v.partial || init->v.rank || lf_scale_of(init) != 1) return unknown();
    }
    int kind = k == 2 ? lf_select_kind(c->cur, in) : SEL_NONE;
    lval st;
    if (k == 2 && (stacked_pairs(s, kind, &st) || stack_winner(s, kind, &st))) return st;
    /* a stack of partial values not completed here: said (its all-gather
     * left that to this reduce) */
    int ga;
    uint32_t gd;
    const lval *gx;
    for (uint32_t o = 0; o < k; o++)
        if (s->ops[o].kind == LV_UNKNOWN && lf_gathered_partials(s, in->operands[o], &ga, &gd, &gx)) {
            lf_unsupported(c, s->comp, in,
                           "%s reduces a stack of partial values (%s) that is not the stack of one selecting "
                           "reduce's pairs, gathered alike and selected among by the same kind of reducer from the same "
                           "inits",
                           in->name, reducer_name(gx->v.red));
            return unknown();
        }
    eid node;
    view v;
    int sharded;
    view_dim axes;
    bool owed, unsure;
    if (!pairs_of(s, kind, &node, &v, &sharded, &axes, &owed, &unsure)) return unknown();
    uint8_t red[2] = {0, 0};
    if (v.partial) {
        red[0] = kind == SEL_ARGMAX ? RED_MAX : RED_MIN;
        red[1] = RED_ARG;
        if (dtype_is_float(src->shape.dtype))
            lf_assume(c,
                      "where several values of a row are NaN, the position %s returns is any of theirs (XLA applies a "
                      "reducer in no fixed order)",
                      kind == SEL_ARGMAX ? "argmax" : "argmin");
    }
    bool assumed = false;
    for (uint32_t o = 0; o < n; o++) assumed |= s->ops[o].kind == LV_TERM && s->ops[o].assumed;
    lval t = pair_tuple(s, node, &v, red, assumed);
    for (uint32_t j = 0; j < t.n; j++) t.elems[j].partial_unsure = unsure;
    /* positions local to the block: not the pair's position until the
     * block's offset is added (lf_arg_offset) */
    if (owed) t.elems[1] = unknown();
    return t;
}

/* ---- the devices that hold a row's selected value ---- */

/* The words of attribute key in the attributes of e-node k, *n of them;
 * NULL when absent. */
static const int64_t *node_attr(lift_ctx *c, eid k, int64_t key, uint32_t *n) {
    uint32_t nw;
    const int64_t *w = eg_attr_words(c->g, eg_node_attr(c->g, k), &nw);
    for (uint32_t j = 0; j + 1 < nw && j + 2 + (uint32_t)w[j + 1] <= nw; j += 2 + (uint32_t)w[j + 1])
        if (w[j] == key) {
            *n = (uint32_t)w[j + 1];
            return w + j + 2;
        }
    *n = 0;
    return NULL;
}

/* Whether compare cmp is eq(m, M) — or m >= M for a max, m <= M for a min,
 * which hold where they are equal only — m a partial max (or min) and M the
 * same term complete (not partial, sharded alike). On each device it says
 * whether that device's share is the complete value: whether its block holds
 * the row's greatest (least) value. *part: m's value. */
static bool owner_test(lstate *s, const hlo_instr *cmp, const lval **part) {
    lift_ctx *c = s->c;
    const char *dir = cmp->op == OP_COMPARE ? instr_str(cmp, A_DIRECTION) : NULL;
    if (c->baseline_mode || cmp->noperands != 2 || !dir) return false;
    const lval *a = &s->vals[cmp->operands[0]], *b = &s->vals[cmp->operands[1]];
    if (a->kind != LV_TERM || b->kind != LV_TERM) return false;
    bool swapped = !a->v.partial;
    if (swapped) {
        const lval *t = a;
        a = b;
        b = t;
    }
    if (!a->v.partial || b->v.partial || (a->v.red != RED_MAX && a->v.red != RED_MIN)) return false;
    /* a device's share of a max is at most the max: share >= max holds
     * where they are equal only (and <= for a min) */
    bool ge = strcmp(dir, swapped ? "LE" : "GE") == 0, le = strcmp(dir, swapped ? "GE" : "LE") == 0;
    if (strcmp(dir, "EQ") != 0 && !(a->v.red == RED_MAX && ge) && !(a->v.red == RED_MIN && le)) return false;
    if (lf_scale_of(a) != 1 || lf_scale_of(b) != 1 || a->diff || b->diff || a->zm || b->zm) return false;
    if (eg_find(c->g, a->cls) != eg_find(c->g, b->cls) || !lf_same_sharding(&a->v, &b->v) ||
        (view_axes_used(&b->v) & a->v.partial))
        return false;
    *part = a;
    return true;
}

bool lf_owner_test(lstate *s) {
    const lval *m;
    return owner_test(s, s->in, &m);
}

/* The selecting reduce of comp whose global pair is tuple class node, and
 * its lifted value; NULL when none. */
static const hlo_instr *pair_reduce(lstate *s, eid node, const lval **val) {
    lift_ctx *c = s->c;
    for (uint32_t i = 0; i < s->comp->ninstrs; i++) {
        const hlo_instr *r = &s->comp->instrs[i];
        const lval *t = &s->vals[i];
        if (r->op != OP_REDUCE || r->noperands != 4 || t->kind != LV_TUPLE || t->n != 2 || t->elems[0].kind != LV_TERM)
            continue;
        if (element_of(c, t->elems[0].cls, 0) != eg_find(c->g, node)) continue;
        *val = &t->elems[0];
        return r;
    }
    return NULL;
}

/* Whether class m is the greatest (least) value of the rows pair node
 * selects among: its value element, or a reduce of the same operand over
 * the same dims from the same init (the reducer is the max (min) the view
 * of m, partial(max|min), says it is). */
static bool same_rows(lift_ctx *c, eid m, eid node, eid value) {
    if (eg_find(c->g, m) == eg_find(c->g, value)) return true;
    const eid *nk, *mk;
    eid n = lf_class_node(c, node, OP_REDUCE, 4, &nk);
    if (n == EID_NONE) return false;
    for (eid k = eg_class_first(c->g, eg_find(c->g, m)); k != EID_NONE; k = eg_class_next(c->g, k)) {
        uint32_t nc, a, b;
        mk = eg_node_children(c->g, k, &nc);
        if (eg_node_op(c->g, k) != OP_REDUCE || nc != 2 || eg_find(c->g, mk[0]) != eg_find(c->g, nk[0]) ||
            eg_find(c->g, mk[1]) != eg_find(c->g, nk[2]))
            continue;
        const int64_t *da = node_attr(c, k, A_DIMENSIONS, &a), *db = node_attr(c, n, A_DIMENSIONS, &b);
        if (a == b && (!a || memcmp(da, db, a * sizeof *da) == 0)) return true;
    }
    return false;
}

/* The greatest value a position of dtype dt holds; false for others (a
 * position type). */
static bool position_top(int dt, double *top) {
    double lo;
    return (dt == DT_S32 || dt == DT_U32 || dt == DT_S64) && dtype_int_limits(dt, &lo, top);
}

bool lf_owner_select(lstate *s, lval *out) {
    lift_ctx *c = s->c;
    const hlo_instr *in = s->in;
    const lval *m, *p = &s->ops[1], *f = &s->ops[2], *val = NULL;
    if (c->baseline_mode || in->op != OP_SELECT || in->noperands != 3 ||
        !owner_test(s, &s->comp->instrs[in->operands[0]], &m))
        return false;
    bool ok = p->kind == LV_TERM && p->v.red == RED_ARG && p->v.partial == m->v.partial && lf_same_sharding(&p->v, &m->v) &&
              lf_scale_of(p) == 1 && !p->diff && !p->zm;
    eid node = ok ? element_of(c, p->cls, 1) : EID_NONE;
    const hlo_instr *r = node == EID_NONE ? NULL : pair_reduce(s, node, &val);
    int kind = r ? lf_select_kind(c->cur, r) : SEL_NONE;
    if (kind != (m->v.red == RED_MAX ? SEL_ARGMAX : SEL_ARGMIN) || !val || !same_rows(c, m->cls, node, val->cls)) {
        lf_unsupported(c, s->comp, in,
                       "%s keeps, on the devices that hold the row's %s, values other than the positions (with the "
                       "block's offset) of a selection among the same rows (a device's id, electing one holder): "
                       "not related yet",
                       in->name, reducer_name(m->v.red));
        *out = unknown();
        return true;
    }
    /* a fill past every position of the row (INT_MAX, or a sentinel as
     * 2**30 no smaller than the reduced dim's global extent) */
    double top;
    int64_t extent = -1;
    uint32_t nrd;
    const int64_t *rd = instr_ints(r, A_DIMENSIONS, &nrd);
    if (nrd == 1 && r->noperands == 4) {
        extent = s->comp->instrs[r->operands[0]].shape.dims[rd[0]];
        for (uint32_t a = 0; a < c->mesh->naxes; a++)
            if (m->v.partial >> a & 1) extent *= c->mesh->sizes[a];
    }
    bool fill_top = f->kind == LV_DEV && lf_dev_uniform(c, f) && f->count && position_top(in->shape.dtype, &top);
    for (uint32_t e = 0; fill_top && e < f->count; e++) fill_top = f->dev[e] == top || (extent > 0 && f->dev[e] >= extent);
    if (!fill_top) {
        /* Ties: the baseline's position is the least of the tied ones; a
         * device's own is its block's least. The least over the holders is
         * taken by a min of the positions with the greatest position
         * elsewhere; a sum or a max of them is another position where the
         * row's value is in several blocks. */
        lf_unsupported(c, s->comp, in,
                       "%s keeps the positions of the devices that hold the row's %s and puts something other than "
                       "the greatest position elsewhere; only a min over such values is the baseline's position "
                       "(the least of tied ones), others are not related",
                       in->name, reducer_name(m->v.red));
        *out = unknown();
        return true;
    }
    /* Each device holds its pair's position where its value is the row's,
     * the greatest position elsewhere: the min over the devices is the
     * least position of the row's value, the baseline's. Where a row holds
     * NaN, the max is NaN and equal to nothing: no device holds it. */
    if (dtype_is_float(s->comp->instrs[r->operands[0]].shape.dtype))
        lf_assume(c, "no row holds NaN where a device tests whether it holds the row's %s (NaN equals nothing)",
                  reducer_name(m->v.red));
    *out = *p;
    out->v.red = RED_MIN;
    out->assumed = p->assumed || m->assumed;
    out->partial_unsure = p->partial_unsure || m->partial_unsure;
    return true;
}
