/* lift_group — per-device groups (lift.h LV_ROW with .group; DESIGN §5
 * "Per-device groups").
 *
 * A program may compute, on every device, a function of its own blocks
 * alone (an ensemble member, local SGD steps on the device's batch, attention
 * within its sequence block), where the baseline computes the same function
 * per group, jax.vmap over the blocks. Device d's value is then slice d of a
 * batched term E over a hidden dim (vdim) of one slice per block of mesh
 * axes P: an LV_ROW. The transfer functions here say what each op does to
 * such slices, exactly, by op semantics:
 *   - an operand sharded on one dim k over P (others whole) is the row of its
 *     term split at k into (blocks, block), the hidden dim at k; one
 *     replicated is the same on every slice (broadcast along the hidden dim
 *     where a row meets it);
 *   - an elementwise op of rows and replicated values is the op over E;
 *     transpose, reshape and broadcast move E's other dims alike (reshape and
 *     broadcast put the hidden dim first); a dot of rows is the batched dot
 *     over the hidden dim (one row and a replicated operand: the dot with the
 *     hidden dim a free dim); a reduce over other dims is the reduce of E;
 *   - an all-reduce over P is the reduce of E over the hidden dim, complete.
 * Rows enter where the plain readings say nothing true about a value:
 *   - a partial sum the program uses as it is (a nonlinear op of it) where
 *     the baseline groups the dim the sum ran over (lift.c
 *     grouped_in_baseline): the shares are the rows of the same computation
 *     done per group (lf_group_partial), rebuilt from the operands' rows;
 *   - a value sharded on two dims over the same axes (a dot of two blocks
 *     along the same axes: device d holds only block (d, d)) reduced over one
 *     of them: the diagonal blocks are the rows of the batched dot.
 * Rows are rebuilt from the instruction graph (row_of, a few levels up,
 * memoised per call): an operand whose value is plain is read as a row through
 * the ops that made it from rows or sharded values, which is the form vmap
 * writes (dot(X_groups, w), not a reshape of dot(x, w)); where that fails, by
 * splitting its sharded dim. A row meeting an op with no row form is settled:
 * its hidden dim merged as the major part of one of its dims, sharded over P
 * (lf_group_settle; a unit dim first, where the program re-inserts it), and so
 * at a computation's root.
 */
#include "lift.h"
#include "lift_int.h"

#include <stdlib.h>
#include <string.h>

enum { G_FAIL = 0, G_ROW, G_DUP };

/* Depth of the instruction graph row_of reads up through, and how many
 * instructions one walk up reads at most (a walk that would read more says
 * nothing: its rows are not the groups' a few ops up). */
#define GROUP_DEPTH 256
#define GROUP_BUDGET 2048

typedef struct gctx {
    lift_ctx *c;
    const hlo_comp *comp;
    const lval *vals;
    view_dim axes;
    u32map memo;       /* instruction index -> index into seen and res */
    lval *seen;        /* each instruction's row read (or replicated value) */
    uint8_t *res;      /* and what it is (G_ROW, G_DUP, G_FAIL) */
    size_t nseen, capseen, capres;
    uint32_t budget;   /* instructions the walk may still read up through */
} gctx;

static bool same_axes(const view_dim *a, const view_dim *b) {
    return a->naxes == b->naxes && !memcmp(a->axes, b->axes, a->naxes);
}

static int64_t axes_blocks(const lift_ctx *c, const view_dim *a) {
    int64_t n = 1;
    for (uint32_t k = 0; k < a->naxes; k++) n *= c->mesh->sizes[a->axes[k]];
    return n;
}

/* Row E, hidden dim vdim over axes; its view: E's rank, whole but there. */
static lval mk_row(lift_ctx *c, eid e, uint32_t vdim, const view_dim *axes, bool assumed) {
    lval v = {.kind = LV_ROW, .group = true, .cls = e, .vdim = (uint8_t)vdim, .assumed = assumed};
    uint32_t r;
    eg_type_dims(c->g, eg_class_type(c->g, e), &r);
    v.v = view_dup(r);
    v.v.dims[vdim] = *axes;
    return v;
}

/* A copy of in over global dims (rank r) with list attribute `key` set to
 * v (n entries) for each of the nk keys: attrs sorted and defaults dropped
 * as the readers leave them. */
static hlo_instr with_attrs(lift_ctx *c, const hlo_instr *in, const int *keys, int64_t *const *v, const uint32_t *n,
                            uint32_t nk, const int64_t *dims, uint32_t r) {
    hlo_instr g = *in;
    hlo_attr *at = arena_alloc(c->a, (in->nattrs + nk + 1) * sizeof *at);
    uint32_t w = 0;
    for (uint32_t q = 0; q < in->nattrs; q++) {
        bool replaced = false;
        for (uint32_t k = 0; k < nk; k++) replaced |= in->attrs[q].key == keys[k];
        if (!replaced) at[w++] = in->attrs[q];
    }
    for (uint32_t k = 0; k < nk; k++)
        at[w++] = (hlo_attr){.key = (uint16_t)keys[k], .kind = K_INTS, .n = n[k],
                             .v.ints = n[k] ? arena_memdup(c->a, v[k], n[k] * sizeof *v[k]) : NULL};
    g.attrs = at;
    g.nattrs = (uint16_t)w;
    graph_finalize_attrs(&g);
    g.shape.rank = r;
    g.shape.dims = arena_memdup(c->a, dims, (r ? r : 1) * sizeof *dims);
    return g;
}

/* local dim q of a row's local value as E's dim (the hidden dim at v) */
static inline int64_t edim(int64_t q, uint32_t v) { return q + (q >= v); }

/* broadcast(x) to type t along dims bd (x's dim q to bd[q]); a broadcast
 * of a broadcast composed into one (a replicated splat along a hidden dim
 * is the splat). */
static eid broadcast_to(lift_ctx *c, eid x, const int64_t *bd, uint32_t n, uint32_t t) {
    const eid *ch;
    eid b = lf_class_node(c, x, OP_BROADCAST, 1, &ch);
    int64_t cd[VIEW_MAX_RANK];
    uint32_t r;
    if (b != EID_NONE) {
        uint32_t nw;
        eid inner = ch[0];
        const int64_t *w = eg_attr_words(c->g, eg_node_attr(c->g, b), &nw);
        eg_type_dims(c->g, eg_class_type(c->g, inner), &r);
        bool ok = r <= VIEW_MAX_RANK && (nw == 0 ? r == 0 : nw == 2 + r && w[0] == A_DIMENSIONS && w[1] == r);
        for (uint32_t q = 0; ok && q < r; q++) ok = w[2 + q] >= 0 && w[2 + q] < n, cd[q] = ok ? bd[w[2 + q]] : 0;
        if (ok) x = inner, bd = cd, n = r;
    }
    /* through lf_node: known values follow (a constant predicate folds) */
    const int64_t *td = eg_type_dims(c->g, t, &r);
    int64_t dims[VIEW_MAX_RANK];
    memcpy(dims, td, r * sizeof *dims);
    hlo_attr at = {.key = A_DIMENSIONS, .kind = K_INTS, .n = n, .v.ints = n ? arena_memdup(c->a, bd, n * sizeof *bd) : NULL};
    hlo_instr g = {.name = "broadcast", .opname = "broadcast", .op = OP_BROADCAST, .nattrs = n ? 1 : 0, .noperands = 1,
                   .attrs = n ? arena_memdup(c->a, &at, sizeof at) : NULL};
    g.shape.dtype = (uint8_t)eg_type_dtype(c->g, t);
    g.shape.rank = r;
    g.shape.dims = dims;
    return lf_node(c, c->cur, &g, &x, 1, dims, c->origin);
}

/* A plain value sharded on exactly one dim k over the axes (the others whole)
 * as the row of its term split at k. */
static int split_row(gctx *g, const lval *x, lval *out) {
    lift_ctx *c = g->c;
    if (x->kind != LV_TERM || x->v.partial || x->v.rank >= VIEW_MAX_RANK) return G_FAIL;
    int k = -1;
    for (uint32_t q = 0; q < x->v.rank; q++) {
        if (!x->v.dims[q].naxes) continue;
        if (k >= 0 || !same_axes(&x->v.dims[q], &g->axes)) return G_FAIL;
        k = (int)q;
    }
    if (k < 0) return G_FAIL;
    uint32_t r;
    uint32_t t = eg_class_type(c->g, x->cls);
    const int64_t *d = eg_type_dims(c->g, t, &r);
    int64_t nb = axes_blocks(c, &g->axes), sd[VIEW_MAX_RANK];
    if (r != x->v.rank || d[k] % nb) return G_FAIL;
    for (uint32_t q = 0, o = 0; q < r; q++) {
        if (q == (uint32_t)k) sd[o++] = nb, sd[o++] = d[q] / nb;
        else sd[o++] = d[q];
    }
    eid e = lf_mk_reshape(c, x->cls, lf_type_of(c, eg_type_dtype(c->g, t), sd, r + 1), c->origin);
    *out = mk_row(c, e, (uint32_t)k, &g->axes, x->assumed);
    return G_ROW;
}

static bool row_apply(gctx *g, const hlo_instr *in, const lval *ops, const int *kinds, lval *out);

/* The rows of instruction i's value, from its operands' (G_ROW), or that
 * value replicated (G_DUP). */
static int row_of(gctx *g, uint32_t i, int depth, lval *out);

/* Element j of variadic reduce r (argmax's values and positions) over its
 * operands' rows: element j of the reduce of the rows. */
static int row_element(gctx *g, const hlo_instr *r, uint32_t j, int depth, lval *out) {
    lift_ctx *c = g->c;
    uint32_t n = r->noperands, k = n / 2, nd;
    const int64_t *rd = instr_ints(r, A_DIMENSIONS, &nd);
    if (r->op != OP_REDUCE || n % 2 || n < 4 || n > 8 || r->shape.dtype != DT_TUPLE || r->shape.ntuple != k || j >= k ||
        !rd || nd > VIEW_MAX_RANK)
        return G_FAIL;
    const shape *src = &g->comp->instrs[r->operands[0]].shape;
    lval *ops = arena_alloc(c->a, 8 * sizeof *ops);
    int kinds[8];
    int first = -1;
    for (uint32_t o = 0; o < n; o++) {
        kinds[o] = row_of(g, r->operands[o], depth + 1, &ops[o]);
        if (kinds[o] == G_FAIL || (o >= k && kinds[o] != G_DUP)) return G_FAIL;
        lf_unscale(c, &ops[o]);
        if (first < 0 && kinds[o] == G_ROW) first = (int)o;
    }
    if (first < 0 || src->rank + 1 > VIEW_MAX_RANK) return G_FAIL;
    uint32_t v = ops[first].vdim, before = 0;
    int64_t nb = axes_blocks(c, &g->axes), ed[VIEW_MAX_RANK], bd[VIEW_MAX_RANK], xd[VIEW_MAX_RANK], dims[VIEW_MAX_RANK];
    for (uint32_t q = 0; q < nd; q++) ed[q] = edim(rd[q], v), before += rd[q] < v;
    for (uint32_t q = 0; q < src->rank; q++) bd[q] = edim(q, v);
    for (uint32_t q = 0; q <= src->rank; q++) xd[q] = q == v ? nb : src->dims[q - (q > v)];
    eid ch[8];
    bool assumed = false;
    for (uint32_t o = 0; o < n; o++) {
        const shape *os = &g->comp->instrs[r->operands[o]].shape;
        assumed |= ops[o].assumed;
        if (o >= k) ch[o] = ops[o].cls;
        else if (os->rank != src->rank || (src->rank && memcmp(os->dims, src->dims, src->rank * sizeof *src->dims))) return G_FAIL;
        else if (kinds[o] == G_ROW) ch[o] = lf_mk_moved(c, ops[o].cls, ops[o].vdim, v);
        else ch[o] = broadcast_to(c, ops[o].cls, bd, src->rank, lf_type_of(c, os->dtype, xd, src->rank + 1));
    }
    static const int key = A_DIMENSIONS;
    int64_t *lists[1] = {ed};
    hlo_instr gi = with_attrs(c, r, &key, lists, &nd, 1, xd, 0);
    gi.shape = r->shape;
    eid node = lf_node(c, c->cur, &gi, ch, n, r->shape.dims, c->origin);
    const shape *es = &r->shape.tuple[j];
    uint32_t w = v - before;
    if (es->rank + 1 > VIEW_MAX_RANK) return G_FAIL;
    for (uint32_t q = 0; q <= es->rank; q++) dims[q] = q == w ? nb : es->dims[q - (q > w)];
    *out = mk_row(c, lf_mk_element(c, node, j, lf_type_of(c, es->dtype, dims, es->rank + 1)), w, &g->axes, assumed);
    return G_ROW;
}

static int row_by_instr(gctx *g, uint32_t i, int depth, lval *out) {
    const hlo_instr *in = &g->comp->instrs[i];
    if (depth >= GROUP_DEPTH || !g->budget || in->noperands == 0 || in->noperands > 8) return G_FAIL;
    g->budget--;
    if (in->op == OP_COPY || instr_is_identity_custom_call(in)) return row_of(g, in->operands[0], depth + 1, out);
    if (in->op == OP_GET_TUPLE_ELEMENT)
        return row_element(g, &g->comp->instrs[in->operands[0]], (uint32_t)instr_int(in, A_INDEX, 0), depth + 1, out);
    bool takes = graph_op_elementwise(in->op) || in->op == OP_TRANSPOSE || in->op == OP_RESHAPE || in->op == OP_BITCAST ||
                 in->op == OP_BROADCAST || in->op == OP_DOT ||
                 ((in->op == OP_REDUCE || in->op == OP_REDUCE_WINDOW) && in->noperands == 2);
    if (!takes) return G_FAIL;
    /* from the arena: the walk up is as deep as GROUP_DEPTH */
    lval *ops = arena_alloc(g->c->a, 8 * sizeof *ops);
    int kinds[8];
    bool any = false;
    for (uint32_t o = 0; o < in->noperands; o++) {
        kinds[o] = row_of(g, in->operands[o], depth + 1, &ops[o]);
        if (kinds[o] == G_FAIL) return G_FAIL;
        any |= kinds[o] == G_ROW;
    }
    if (!any) return G_FAIL;
    /* constant factors as the walk takes them (lift_scale.c): the rows
     * meet the baseline's terms where the plain values would */
    lstate st = {g->c, g->comp, in, ops, g->vals, NULL};
    const lval *same = lf_identity_operand(&st);
    if (!same) same = lf_select_known(&st);
    if (same) {
        *out = *same;
        return out->kind == LV_ROW ? G_ROW : G_FAIL;
    }
    if (lf_scale_take(&st, out)) return out->kind == LV_ROW ? G_ROW : G_FAIL;
    double f = lf_scale_plan(&st);
    if (!row_apply(g, in, ops, kinds, out)) return G_FAIL;
    lf_scale_apply(&st, out, f);
    return out->kind == LV_ROW ? G_ROW : G_FAIL;
}

/* x (the value of instruction i; read up through the instructions that
 * made it when `up`) as a row or a replicated value. */
static int row_of_value(gctx *g, const lval *xv, uint32_t i, bool up, int depth, lval *out) {
    lift_ctx *c = g->c;
    lval x = *xv;
    /* a small integer constant (an init) as its term */
    const hlo_instr *xi = &g->comp->instrs[i];
    if (x.kind == LV_DEV && lf_dev_uniform(c, &x)) x = term(lf_dev_constant(c, xi, &x), view_dup(xi->shape.rank), false);
    if (lf_scale_of(&x) != 1) lf_unscale(c, &x);
    if (x.kind == LV_ROW) {
        if (!x.group || !same_axes(&x.v.dims[x.vdim], &g->axes)) return G_FAIL;
        *out = x;
        return G_ROW;
    }
    if (x.kind != LV_TERM || x.cls == EID_NONE || x.diff || x.zm) return G_FAIL;
    if (!x.v.partial && view_is_dup(&x.v)) {
        *out = x;
        return G_DUP;
    }
    /* a partial sum: each device's share, rebuilt from the op that made it */
    if (x.v.partial) {
        uint32_t mask = 0;
        for (uint32_t k = 0; k < g->axes.naxes; k++) mask |= 1u << g->axes.axes[k];
        if (x.v.red != RED_SUM || x.v.partial != mask || view_axes_used(&x.v) != mask) return G_FAIL;
    }
    if (!up) return split_row(g, &x, out);
    lval split;
    if (row_by_instr(g, i, depth, out) != G_ROW) return split_row(g, &x, out);
    /* both exact: the split term is the program's value cut into its
     * blocks, the rebuilt one the op per group, and the baseline may write
     * either (a reshape of a flat value, vmap over the blocks) */
    if (split_row(g, &x, &split) == G_ROW && lf_scale_of(out) == 1) {
        eid r = lf_mk_moved(c, out->cls, out->vdim, split.vdim);
        if (eg_class_type(c->g, r) == eg_class_type(c->g, split.cls)) {
            eg_union(c->g, r, split.cls, NULL);
            *out = split;
            out->assumed |= x.assumed;
        }
    }
    return G_ROW;
}

static int row_of(gctx *g, uint32_t i, int depth, lval *out) {
    uint32_t at;
    if (u32map_get(&g->memo, i, &at)) {
        *out = g->seen[at];
        return g->res[at];
    }
    int r = row_of_value(g, &g->vals[i], i, true, depth, out);
    XGROW(g->seen, g->capseen, g->nseen + 1);
    XGROW(g->res, g->capres, g->nseen + 1);
    g->seen[g->nseen] = *out;
    g->res[g->nseen] = (uint8_t)r;
    u32map_put(&g->memo, i, (uint32_t)g->nseen++);
    return r;
}

static bool row_dot(gctx *g, const hlo_instr *in, const lval *ops, const int *kinds, lval *out) {
    lift_ctx *c = g->c;
    static const int keys[4] = {A_LHS_BATCH_DIMS, A_RHS_BATCH_DIMS, A_LHS_CONTRACTING_DIMS, A_RHS_CONTRACTING_DIMS};
    int64_t lb[VIEW_MAX_RANK + 1], rb[VIEW_MAX_RANK + 1], lc[VIEW_MAX_RANK], rc[VIEW_MAX_RANK];
    uint32_t nlb, nrb, nlc, nrc;
    const int64_t *p;
    p = instr_ints(in, A_LHS_BATCH_DIMS, &nlb);
    const int64_t *prb = instr_ints(in, A_RHS_BATCH_DIMS, &nrb);
    const int64_t *plc = instr_ints(in, A_LHS_CONTRACTING_DIMS, &nlc);
    const int64_t *prc = instr_ints(in, A_RHS_CONTRACTING_DIMS, &nrc);
    if (nlb != nrb || nlc != nrc || nlb + 1 > VIEW_MAX_RANK || nlc > VIEW_MAX_RANK || in->shape.rank + 1 > VIEW_MAX_RANK)
        return false;
    bool rl = kinds[0] == G_ROW, rr = kinds[1] == G_ROW;
    uint32_t vl = rl ? ops[0].vdim : 0, vr = rr ? ops[1].vdim : 0;
    uint32_t k = 0;
    if (rl && rr) lb[k] = vl, rb[k] = vr, k++;
    for (uint32_t q = 0; q < nlb; q++, k++) lb[k] = rl ? edim(p[q], vl) : p[q], rb[k] = rr ? edim(prb[q], vr) : prb[q];
    for (uint32_t q = 0; q < nlc; q++) lc[q] = rl ? edim(plc[q], vl) : plc[q], rc[q] = rr ? edim(prc[q], vr) : prc[q];
    /* the hidden dim in the result: first (a batch dim), or where it falls
     * among the free dims of the one row operand */
    uint32_t vdim = 0;
    const hlo_instr *li = &g->comp->instrs[in->operands[0]];
    if (!(rl && rr)) {
        bool left = rl;
        uint32_t v = left ? vl : vr, before = 0;
        const int64_t *bd = left ? p : prb, *cd = left ? plc : prc;
        uint32_t nb = nlb, nc = nlc;
        for (uint32_t q = 0; q < v; q++) {
            bool fixed = false;
            for (uint32_t j = 0; j < nb; j++) fixed |= bd[j] == q;
            for (uint32_t j = 0; j < nc; j++) fixed |= cd[j] == q;
            before += !fixed;
        }
        uint32_t lfree = li->shape.rank - nlb - nlc;
        vdim = nlb + (left ? before : lfree + before);
    }
    int64_t dims[VIEW_MAX_RANK];
    int64_t nbk = axes_blocks(c, &g->axes);
    for (uint32_t q = 0, o = 0; q <= in->shape.rank; q++) dims[q] = q == vdim ? nbk : in->shape.dims[o++];
    int64_t *lists[4] = {lb, rb, lc, rc};
    uint32_t ns[4] = {k, k, nlc, nrc};
    hlo_instr gi = with_attrs(c, in, keys, lists, ns, 4, dims, in->shape.rank + 1);
    eid ch[2] = {ops[0].cls, ops[1].cls};
    eid e = lf_node(c, c->cur, &gi, ch, 2, dims, c->origin);
    *out = mk_row(c, e, vdim, &g->axes, ops[0].assumed || ops[1].assumed);
    return true;
}

static bool row_apply(gctx *g, const hlo_instr *in, const lval *ops, const int *kinds, lval *out) {
    lift_ctx *c = g->c;
    const shape *sh = &in->shape;
    if (sh->dtype == DT_TUPLE || sh->rank + 1 > VIEW_MAX_RANK) return false;
    int64_t nb = axes_blocks(c, &g->axes), dims[VIEW_MAX_RANK];
    bool assumed = false;
    int first = -1;
    for (uint32_t o = 0; o < in->noperands; o++) {
        assumed |= ops[o].assumed;
        if (first < 0 && kinds[o] == G_ROW) first = (int)o;
    }
    if (first < 0) return false;
    const lval *x = &ops[first];
    if (graph_op_elementwise(in->op)) {
        uint32_t v = x->vdim, n = in->noperands;
        for (uint32_t q = 0, o = 0; q <= sh->rank; q++) dims[q] = q == v ? nb : sh->dims[o++];
        eid ch[8];
        for (uint32_t o = 0; o < n; o++) {
            const shape *os = &g->comp->instrs[in->operands[o]].shape;
            if (os->rank != sh->rank || (sh->rank && memcmp(os->dims, sh->dims, sh->rank * sizeof *sh->dims))) return false;
            if (kinds[o] == G_ROW) {
                ch[o] = lf_mk_moved(c, ops[o].cls, ops[o].vdim, v);
                continue;
            }
            int64_t bd[VIEW_MAX_RANK], ed[VIEW_MAX_RANK];
            for (uint32_t q = 0; q < sh->rank; q++) bd[q] = edim(q, v);
            for (uint32_t q = 0; q <= sh->rank; q++) ed[q] = q == v ? nb : os->dims[q - (q > v)];
            ch[o] = broadcast_to(c, ops[o].cls, bd, sh->rank, lf_type_of(c, os->dtype, ed, sh->rank + 1));
        }
        hlo_instr gi = *in;
        gi.shape.rank = sh->rank + 1;
        gi.shape.dims = dims;
        *out = mk_row(c, lf_node(c, c->cur, &gi, ch, n, dims, c->origin), v, &g->axes, assumed);
        return true;
    }
    switch (in->op) {
    case OP_TRANSPOSE: {
        uint32_t np;
        const int64_t *p = instr_ints(in, A_DIMENSIONS, &np);
        if (np != sh->rank) return false;
        int64_t perm[VIEW_MAX_RANK];
        uint32_t v = x->vdim;
        for (uint32_t q = 0, o = 0; q <= sh->rank; q++) perm[q] = q == v ? v : edim(p[o++], v);
        *out = mk_row(c, lf_mk_transpose(c, x->cls, perm), v, &g->axes, assumed);
        return true;
    }
    case OP_RESHAPE: case OP_BITCAST: {
        if (sh->dtype != g->comp->instrs[in->operands[0]].shape.dtype) return false;
        dims[0] = nb;
        memcpy(dims + 1, sh->dims, sh->rank * sizeof *dims);
        eid e0 = lf_mk_moved(c, x->cls, x->vdim, 0);
        eid e = lf_mk_reshape(c, e0, lf_type_of(c, sh->dtype, dims, sh->rank + 1), c->origin);
        *out = mk_row(c, e, 0, &g->axes, assumed);
        return true;
    }
    case OP_BROADCAST: {
        uint32_t nbd;
        const int64_t *bd = instr_ints(in, A_DIMENSIONS, &nbd);
        int64_t nd[VIEW_MAX_RANK];
        if (nbd + 1 > VIEW_MAX_RANK) return false;
        nd[0] = 0;
        for (uint32_t q = 0; q < nbd; q++) nd[q + 1] = bd[q] + 1;
        dims[0] = nb;
        memcpy(dims + 1, sh->dims, sh->rank * sizeof *dims);
        eid e0 = lf_mk_moved(c, x->cls, x->vdim, 0);
        static const int key = A_DIMENSIONS;
        int64_t *lists[1] = {nd};
        uint32_t nn = nbd + 1;
        hlo_instr gi = with_attrs(c, in, &key, lists, &nn, 1, dims, sh->rank + 1);
        *out = mk_row(c, lf_node(c, c->cur, &gi, &e0, 1, dims, c->origin), 0, &g->axes, assumed);
        return true;
    }
    case OP_DOT:
        return in->noperands == 2 && row_dot(g, in, ops, kinds, out);
    case OP_REDUCE_WINDOW: {
        /* a window of one slice along the hidden dim */
        win_attr w, we;
        uint32_t v = x->vdim;
        if (in->noperands != 2 || first != 0 || kinds[1] != G_DUP || !lf_read_window(in, sh->rank, &w)) return false;
        for (uint32_t q = 0; q <= sh->rank; q++) {
            bool hid = q == v;
            uint32_t o = hid ? 0 : q - (q > v);
            we.size[q] = hid ? 1 : w.size[o], we.stride[q] = hid ? 1 : w.stride[o];
            we.ld[q] = hid ? 1 : w.ld[o], we.rd[q] = hid ? 1 : w.rd[o];
            we.pad[2 * q] = hid ? 0 : w.pad[2 * o], we.pad[2 * q + 1] = hid ? 0 : w.pad[2 * o + 1];
            dims[q] = hid ? nb : sh->dims[o];
        }
        eid e = lf_window_node(c, in, x->cls, ops[1].cls, &we, dims);
        if (e == EID_NONE) return false;
        *out = mk_row(c, e, v, &g->axes, assumed);
        return true;
    }
    case OP_REDUCE: {
        if (in->noperands != 2 || first != 0 || kinds[1] != G_DUP) return false;
        uint32_t nd, v = x->vdim, before = 0;
        const int64_t *rd = instr_ints(in, A_DIMENSIONS, &nd);
        int64_t ed[VIEW_MAX_RANK];
        if (nd > VIEW_MAX_RANK) return false;
        for (uint32_t q = 0; q < nd; q++) ed[q] = edim(rd[q], v), before += rd[q] < v;
        uint32_t w = v - before;
        for (uint32_t q = 0, o = 0; q <= sh->rank; q++) dims[q] = q == w ? nb : sh->dims[o++];
        static const int key = A_DIMENSIONS;
        int64_t *lists[1] = {ed};
        hlo_instr gi = with_attrs(c, in, &key, lists, &nd, 1, dims, sh->rank + 1);
        eid ch[2] = {x->cls, ops[1].cls};
        eid e = lf_node(c, c->cur, &gi, ch, 2, dims, c->origin);
        /* and as written: lf_node folds a reduce over a class that also
         * holds the split of a flat value into the flat value's reduce */
        uint32_t t = eg_class_type(c->g, e);
        eg_union(c->g, e, eg_add(c->g, OP_REDUCE, lf_encode_attrs(c, c->cur, &gi), t, ch, 2, c->origin), NULL);
        *out = mk_row(c, eg_find(c->g, e), w, &g->axes, assumed);
        return true;
    }
    default:
        return false;
    }
}

static gctx gctx_open(lstate *s, const view_dim *axes) {
    return (gctx){.c = s->c, .comp = s->comp, .vals = s->vals, .axes = *axes, .budget = GROUP_BUDGET};
}

static void gctx_close(gctx *g) {
    u32map_free(&g->memo);
    free(g->seen);
    free(g->res);
}

/* The op of s over its operands read as rows over axes (the current
 * operand values first, then up through the instructions that made them). */
static bool rows_op(lstate *s, const view_dim *axes, lval *out) {
    const hlo_instr *in = s->in;
    if (in->noperands == 0 || in->noperands > 8) return false;
    const lval *picked = lf_select_known(s);
    if (picked && picked->kind == LV_ROW) {
        *out = *picked;
        return true;
    }
    gctx g = gctx_open(s, axes);
    lval ops[8];
    int kinds[8];
    bool ok = true, any = false;
    for (uint32_t o = 0; o < in->noperands && ok; o++) {
        const lval *was = &s->vals[in->operands[o]];
        /* the operand as the walk has it (a row, replicated; no instruction
         * to read up through), else rebuilt from its instruction, else split */
        kinds[o] = row_of_value(&g, &s->ops[o], in->operands[o], false, 0, &ops[o]);
        if (kinds[o] == G_FAIL || (kinds[o] == G_ROW && s->ops[o].kind != LV_ROW)) {
            lval split = ops[o];
            int ks = kinds[o];
            kinds[o] = row_by_instr(&g, in->operands[o], 0, &ops[o]);
            if (kinds[o] == G_ROW) {
                /* rows rebuilt from the instructions are the value with its
                 * factor (p); where the walk took that factor out of the
                 * operand into the op's result (lf_scale_plan), the rows
                 * without it: exactly p */
                double p = lf_scale_of(was);
                if (p != 1 && lf_scale_of(&s->ops[o]) == 1 && s->ops[o].cls == was->cls) {
                    ok = lf_scale_of(&ops[o]) == p;
                    ops[o].scale = 0;
                }
                lf_unscale(s->c, &ops[o]);
            } else {
                kinds[o] = ks;
                ops[o] = split;
            }
        }
        ok = ok && kinds[o] != G_FAIL;
        any |= kinds[o] == G_ROW;
    }
    ok = ok && any && row_apply(&g, in, ops, kinds, out);
    gctx_close(&g);
    return ok;
}

/* Axes P of a value with two dims sharded over the same axes (and nothing
 * else): true when found. */
static bool diagonal(const lval *x, view_dim *axes) {
    if (x->kind != LV_TERM || x->v.partial) return false;
    int a = -1, b = -1;
    for (uint32_t q = 0; q < x->v.rank; q++) {
        if (!x->v.dims[q].naxes) continue;
        if (a < 0) a = (int)q;
        else if (b < 0) b = (int)q;
        else return false;
    }
    if (b < 0 || !same_axes(&x->v.dims[a], &x->v.dims[b])) return false;
    *axes = x->v.dims[a];
    return true;
}

bool lf_group_settle(lift_ctx *c, const shape *local, lval *x) {
    if (x->kind != LV_ROW || !x->group) return false;
    uint32_t r = local->rank, k = r;
    for (uint32_t q = 0; q < r && k == r; q++)
        if (local->dims[q] == 1) k = q;
    if (k == r) k = x->vdim < r ? x->vdim : 0;
    if (r == 0) {
        *x = unknown();
        return false;
    }
    uint32_t er;
    uint32_t t = eg_class_type(c->g, x->cls);
    const int64_t *ed = eg_type_dims(c->g, t, &er);
    if (er != r + 1) {
        *x = unknown();
        return false;
    }
    view_dim axes = x->v.dims[x->vdim];
    int64_t dims[VIEW_MAX_RANK];
    memcpy(dims, local->dims, r * sizeof *dims);
    dims[k] *= ed[x->vdim];
    eid e = lf_mk_reshape(c, lf_mk_moved(c, x->cls, x->vdim, k), lf_type_of(c, eg_type_dtype(c->g, t), dims, r), c->origin);
    view v = view_dup(r);
    v.dims[k] = axes;
    lval p = term(e, v, x->assumed);
    p.scale = x->scale;
    p.factor_at = x->factor_at;
    *x = p;
    return true;
}

bool lf_group_instr(lstate *s, lval *out) {
    lift_ctx *c = s->c;
    const hlo_instr *in = s->in;
    if (c->baseline_mode) return false;
    const lval *row = NULL;
    for (uint32_t o = 0; o < in->noperands && !row; o++)
        if (s->ops[o].kind == LV_ROW && s->ops[o].group) row = &s->ops[o];
    view_dim axes;
    if (!row) {
        /* the diagonal blocks of a value, reduced over one of their dims */
        uint32_t nd;
        const int64_t *rd = in->op == OP_REDUCE && in->noperands == 2 ? instr_ints(in, A_DIMENSIONS, &nd) : NULL;
        if (!rd || !diagonal(&s->ops[0], &axes)) return false;
        bool hits = false;
        for (uint32_t q = 0; q < nd; q++) hits |= s->ops[0].v.dims[rd[q]].naxes != 0;
        return hits && rows_op(s, &axes, out);
    }
    axes = row->v.dims[row->vdim];
    if (in->op == OP_ALL_REDUCE && in->noperands == 1) {
        /* each group's blocks, one per device: the reduce over the hidden dim */
        uint32_t mask = 0;
        for (uint32_t k = 0; k < axes.naxes; k++) mask |= 1u << axes.axes[k];
        const hlo_attr *ta = instr_attr(in, A_TO_APPLY);
        int64_t hd = row->vdim;
        lval r = *row;
        lf_unscale(c, &r);
        if (ta && lf_collective_axes(s, false, NULL) == (int)mask) {
            eid e = lf_sum_reduce_term(s, r.cls, &hd, 1, &in->shape, in->shape.dims, ta);
            if (e != EID_NONE) {
                *out = term(e, view_dup(in->shape.rank), row->assumed);
                return true;
            }
        }
    } else if (rows_op(s, &axes, out)) {
        return true;
    }
    for (uint32_t o = 0; o < in->noperands; o++)
        if (s->ops[o].kind == LV_ROW && s->ops[o].group)
            lf_group_settle(c, &s->comp->instrs[in->operands[o]].shape, &s->ops[o]);
    return false;
}

bool lf_group_partial(lstate *s, lval *out) {
    const lval *p = NULL;
    for (uint32_t o = 0; o < s->in->noperands && !p; o++)
        if (s->ops[o].kind == LV_TERM && s->ops[o].v.partial && s->ops[o].v.red == RED_SUM) p = &s->ops[o];
    if (!p || s->c->baseline_mode) return false;
    view_dim axes = {0};
    for (uint32_t a = 0; a < s->c->mesh->naxes && axes.naxes < MESH_MAX_AXES; a++)
        if (p->v.partial >> a & 1) axes.axes[axes.naxes++] = (uint8_t)a;
    return rows_op(s, &axes, out);
}

void lf_group_forms(lstate *s, const lval *v) {
    lift_ctx *c = s->c;
    const hlo_instr *in = s->in;
    const lval *x = &s->vals[in->operands[0]];
    if (c->baseline_mode || in->op != OP_ALL_REDUCE || in->noperands != 1 || v->kind != LV_TERM || v->v.partial ||
        lf_scale_of(v) != 1 || v->cls == EID_NONE || x->kind != LV_TERM || !x->v.partial || x->v.red != RED_SUM ||
        lf_collective_axes(s, false, NULL) != (int)x->v.partial)
        return;
    const hlo_attr *ta = instr_attr(in, A_TO_APPLY);
    view_dim axes = {0};
    for (uint32_t a = 0; a < c->mesh->naxes && axes.naxes < MESH_MAX_AXES; a++)
        if (x->v.partial >> a & 1) axes.axes[axes.naxes++] = (uint8_t)a;
    if (!ta) return;
    gctx g = gctx_open(s, &axes);
    lval r;
    if (row_by_instr(&g, in->operands[0], 0, &r) == G_ROW) {
        lf_unscale(c, &r);
        int64_t hd = r.vdim;
        eid e = r.cls == EID_NONE ? EID_NONE : lf_sum_reduce_term(s, r.cls, &hd, 1, &in->shape, in->shape.dims, ta);
        if (e != EID_NONE && eg_class_type(c->g, e) == eg_class_type(c->g, v->cls)) eg_union(c->g, v->cls, e, NULL);
    }
    /* the shares a sum over dims D from the identity (a reduce of rows
     * E): the one sum over D and the hidden dim, as written (the baseline's
     * sum over every group at once; lf_node would fold it to the flat
     * value's) */
    const hlo_instr *rd = &s->comp->instrs[in->operands[0]];
    uint32_t nd;
    const int64_t *dd = rd->op == OP_REDUCE && rd->noperands == 2 ? instr_ints(rd, A_DIMENSIONS, &nd) : NULL;
    lval e, init;
    if (dd && nd < VIEW_MAX_RANK && instr_reducer(c->cur, rd) == RED_SUM && instr_reducer(c->cur, in) == RED_SUM &&
        row_of(&g, rd->operands[0], 0, &e) == G_ROW && row_of(&g, rd->operands[1], 0, &init) == G_DUP &&
        lf_reducer_identity(c, c->cur, rd, init.cls)) {
        lf_unscale(c, &e);
        int64_t ed[VIEW_MAX_RANK];
        uint32_t n = 0;
        for (uint32_t q = 0; q <= nd; q++) {
            /* D's dims in e, and the hidden dim, in order */
            int64_t d = q < nd ? edim(dd[q], e.vdim) : e.vdim;
            uint32_t at = n;
            while (at > 0 && ed[at - 1] > d) ed[at] = ed[at - 1], at--;
            ed[at] = d, n++;
        }
        static const int key = A_DIMENSIONS;
        int64_t *lists[1] = {ed};
        hlo_instr gi = with_attrs(c, rd, &key, lists, &n, 1, rd->shape.dims, rd->shape.rank);
        eid ch[2] = {e.cls, init.cls};
        eid w = eg_add(c->g, OP_REDUCE, lf_encode_attrs(c, c->cur, &gi), eg_class_type(c->g, v->cls), ch, 2, c->origin);
        if (eg_type_dtype(c->g, eg_class_type(c->g, e.cls)) == rd->shape.dtype) eg_union(c->g, v->cls, w, NULL);
    }
    gctx_close(&g);
}
