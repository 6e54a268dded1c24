/* lift_scan — cumulative sums over a sharded dim (lift.h; DESIGN §5).
 *
 * A cumsum along a dim sharded in nb blocks of n is written per device as
 * its own block's cumsum (lift_win.c reads it as the blockwise cumsum of x
 * split into [nb, n]) plus the sum of the blocks before it: the blocks'
 * totals all-gathered (a stack, lift_coll.c gather_pieces), masked by
 * stack position < the device's block and summed over the stack. That sum
 * is, on device d, row blk(d) of the exclusive prefix sums of the stack: an
 * LV_ROW (lift.h), which a broadcast along the sharded dim spreads over the
 * device's block. Where the stack is x's block totals, the identity
 *   cumsum_N(x) = merge(cumsum_n(xb) + spread(exclusive prefix of sum_n(xb)))
 * joins that sum to the baseline's cumsum of x (lf_scan_prefix).
 */
#include "lift.h"
#include "lift_int.h"

#include "interp.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A blockwise cumulative sum (segmented_reduce_window) of x along dim. */
struct lift_scan {
    eid x, init;
    eid blocked;      /* the blocks' own scans, merged back to x's dims */
    uint32_t dim;
    int64_t nb, n;
    bool reverse;     /* from the end of each block */
    eid global;       /* the baseline's scan of x along the whole dim (EID_NONE: none) */
};

/* The totals of the nb blocks of n along dim k of x: x split there into
 * (nb, n), summed over n (init 0, `like`'s reducer, a sum), as a
 * distributed sum over the blocks writes it (lift_coll.c gather_pieces). */
static eid block_totals(lift_ctx *c, eid x, uint32_t k, int64_t nb, int64_t n, eid init, const hlo_instr *like) {
    uint32_t r;
    const int64_t *xd = eg_type_dims(c->g, eg_class_type(c->g, x), &r);
    const hlo_attr *ta = instr_attr(like, A_TO_APPLY);
    if (!ta || r + 1 > VIEW_MAX_RANK || k >= r) return EID_NONE;
    int64_t sd[VIEW_MAX_RANK], bd[VIEW_MAX_RANK], kd = k + 1;
    for (uint32_t p = 0, o = 0; p <= r; p++) sd[p] = p == k ? nb : p == k + 1 ? n : xd[o], o += p != k;
    memcpy(bd, xd, r * sizeof *bd);
    bd[k] = nb;
    int dt = eg_type_dtype(c->g, eg_class_type(c->g, x));
    eid ch[2] = {lf_mk_reshape(c, x, lf_type_of(c, dt, sd, r + 1), c->origin), init};
    hlo_attr *at = arena_alloc(c->a, 2 * sizeof *at);
    at[0] = (hlo_attr){.key = A_DIMENSIONS, .kind = K_INTS, .n = 1, .v.ints = arena_memdup(c->a, &kd, sizeof kd)};
    at[1] = *ta;
    hlo_instr g = {.name = "reduce", .opname = "reduce", .op = OP_REDUCE, .nattrs = 2, .noperands = 2, .attrs = at};
    g.shape.dtype = (uint8_t)dt;
    g.shape.rank = r;
    g.shape.dims = bd;
    return lf_node(c, c->cur, &g, ch, 2, bd, c->origin);
}

void lf_scan_noted(lift_ctx *c, const hlo_instr *in, eid x, uint32_t dim, int64_t nb, int64_t n, bool reverse, eid init,
                   eid blocked, eid global) {
    ARENA_GROW(c->a, c->scans, c->nscans, c->capscans, 4);
    c->scans[c->nscans++] = (struct lift_scan){.x = x, .init = init, .blocked = blocked, .dim = dim, .nb = nb, .n = n,
                                               .reverse = reverse, .global = global};
    /* the last (a reverse scan: first) element of each block's scan is the
     * block's total */
    uint32_t r;
    const int64_t *xd = eg_type_dims(c->g, eg_class_type(c->g, x), &r);
    int64_t sd[VIEW_MAX_RANK], md[VIEW_MAX_RANK], sl[3 * VIEW_MAX_RANK];
    if (r + 1 > VIEW_MAX_RANK) return;
    for (uint32_t p = 0, o = 0; p <= r; p++) {
        sd[p] = p == dim ? nb : p == dim + 1 ? n : xd[o];
        sl[3 * p] = 0, sl[3 * p + 1] = sd[p], sl[3 * p + 2] = 1;
        o += p != dim;
    }
    memcpy(md, xd, r * sizeof *md);
    md[dim] = nb;
    sl[3 * (dim + 1)] = reverse ? 0 : n - 1;
    sl[3 * (dim + 1) + 1] = reverse ? 1 : n;
    int dt = eg_type_dtype(c->g, eg_class_type(c->g, x));
    eid split = lf_mk_reshape(c, blocked, lf_type_of(c, dt, sd, r + 1), c->origin);
    eid last = lf_mk_reshape(c, lf_mk_slice(c, split, sl), lf_type_of(c, dt, md, r), c->origin);
    eid tot = block_totals(c, x, dim, nb, n, init, in);
    if (tot != EID_NONE) eg_union(c->g, last, tot, NULL);
}

bool lf_scan_divergence(lift_ctx *c, eid v) {
    for (uint32_t q = 0; q < c->nscans; q++) {
        const struct lift_scan *sc = &c->scans[q];
        if (eg_find(c->g, sc->blocked) != eg_find(c->g, v) || !(eg_class_origin(c->g, sc->x) & EG_BASELINE)) continue;
        c->divergence_kind = KIND_WRONG_SHARD_DIM;
        char *note = arena_alloc(c->a, 200);
        snprintf(note, 200, "a cumulative sum within each device's block of dimension %u, where the baseline's runs over the "
                 "whole dimension: the sums of the blocks %s must be added", sc->dim, sc->reverse ? "after it" : "before it");
        c->divergence_note = note;
        return true;
    }
    return false;
}

/* An exclusive prefix (suffix) sum E of a stack X along dim j, made by
 * `red` (a sum over j of X masked per device): on device d, E's slice at
 * the device's block over `axes`. */
struct lift_row {
    eid e, x, init;
    uint32_t j;
    bool suffix;
    view_dim axes;
    const hlo_instr *red;
};

/* Whether the predicate of select `sel` (of comp) is computed from iotas,
 * constants and the partition id alone and is, on every device d, position
 * < b(d) along dim j (or > b(d): *suffix) and the same along every other
 * dim, b(d) the device's block over some mesh axes (*axes) of as many
 * blocks as dim j has positions. */
static bool prefix_mask(lift_ctx *c, const hlo_comp *comp, const hlo_instr *sel, uint32_t j, bool *suffix, view_dim *axes) {
    const shape *sh = &sel->shape;
    if (sh->rank > VIEW_MAX_RANK || j >= sh->rank || sh->dims[j] < 2) return false;
    int64_t nb = sh->dims[j], inner = 1, count = 1;
    for (uint32_t k = 0; k < sh->rank; k++) count *= sh->dims[k], inner *= k > j ? sh->dims[k] : 1;
    interp_val **m = lf_device_values(c, comp, sel->operands[0]);
    if (!m) return false;
    int64_t *b = xcalloc((size_t)c->ndev, sizeof *b);
    int kind = 0;  /* 1: prefix, 2: suffix, 0: not seen yet (no device masks any) */
    bool ok = true;
    for (int64_t d = 0; d < c->ndev && ok; d++) {
        const interp_val *v = m[d];
        ok = v->dtype == DT_PRED && v->rank == sh->rank && v->n == count;
        int64_t ones = 0, first = -1, last = -1;
        for (int64_t q = 0; ok && q < nb; q++)
            if (v->i[q * inner]) ones++, last = q, first = first < 0 ? q : first;
        for (int64_t e = 0; ok && e < v->n; e++) ok = !v->i[e] == !v->i[(e / inner) % nb * inner];
        if (!ok) break;
        int k = 0;
        if (!ones) b[d] = -1;
        else if (last - first + 1 != ones) ok = false;
        else if (first == 0 && last < nb - 1) k = 1, b[d] = ones;
        else if (first > 0 && last == nb - 1) k = 2, b[d] = first - 1;
        else ok = false;
        if (k && kind && k != kind) ok = false;
        if (k) kind = k;
    }
    for (int64_t d = 0; ok && d < c->ndev; d++)
        if (b[d] < 0) b[d] = kind == 2 ? nb - 1 : 0;
    ok = ok && kind && lf_axes_of_blocks(c, b, nb, axes);
    free(b);
    lf_device_values_free(c, m);
    *suffix = kind == 2;
    return ok;
}

/* Whether instruction i of s's computation is select(m, X, 0), m a prefix
 * mask along dim *j (prefix_mask), X a term whole along j, used only by
 * sums over j alone (a stack's totals before each device's, lf_row_reduce). */
static bool masked_stack(lstate *s, uint32_t i, uint32_t *j, bool *suffix, view_dim *axes) {
    lift_ctx *c = s->c;
    const hlo_comp *comp = s->comp;
    const hlo_instr *sel = &comp->instrs[i];
    if (c->baseline_mode || sel->op != OP_SELECT || sel->noperands != 3 || comp->root == i) return false;
    const lval *x = &s->vals[sel->operands[1]], *z = &s->vals[sel->operands[2]];
    bool zero = z->kind == LV_DEV ? lf_dev_uniform(c, z) && z->dev[0] == 0
                                  : z->kind == LV_TERM && !z->v.partial && view_is_dup(&z->v) && lf_class_is_zero(c, z->cls);
    if (x->kind != LV_TERM || x->v.partial || lf_scale_of(x) != 1 || x->diff || x->zm || x->v.rank != sel->shape.rank || !zero)
        return false;
    int64_t dim = -1;
    for (uint32_t u = i + 1; u < comp->ninstrs; u++) {
        const hlo_instr *y = &comp->instrs[u];
        for (uint32_t o = 0; o < y->noperands; o++) {
            if (y->operands[o] != i) continue;
            uint32_t nd;
            const int64_t *rd = y->op == OP_REDUCE ? instr_ints(y, A_DIMENSIONS, &nd) : NULL;
            if (!rd || nd != 1 || o != 0 || y->noperands != 2 || lf_reducer(c->cur, y) != RED_SUM || (dim >= 0 && rd[0] != dim))
                return false;
            dim = rd[0];
        }
    }
    if (dim < 0 || x->v.dims[dim].naxes) return false;
    *j = (uint32_t)dim;
    return prefix_mask(c, comp, sel, *j, suffix, axes);
}

bool lf_row_select(lstate *s) {
    uint32_t j;
    bool suffix;
    view_dim axes;
    return s->in->op == OP_SELECT && masked_stack(s, (uint32_t)(s->in - s->comp->instrs), &j, &suffix, &axes);
}

bool lf_row_reduce(lstate *s, lval *out) {
    lift_ctx *c = s->c;
    const hlo_instr *in = s->in;
    uint32_t j;
    bool suffix;
    view_dim axes;
    const lval *init = &s->ops[1];
    if (in->noperands != 2 || init->kind != LV_TERM || init->v.partial || !lf_reducer_identity(c, c->cur, in, init->cls) ||
        !masked_stack(s, in->operands[0], &j, &suffix, &axes))
        return false;
    const lval *x = &s->vals[s->comp->instrs[in->operands[0]].operands[1]];
    uint32_t rank;
    const int64_t *xd = eg_type_dims(c->g, eg_class_type(c->g, x->cls), &rank);
    if (rank != x->v.rank || rank > VIEW_MAX_RANK) return false;
    /* E = the sums over windows of nb positions padded by nb on one side,
     * less the one past the end: position i sums X before (after) i */
    int64_t nb = xd[j], dims[VIEW_MAX_RANK], sl[3 * VIEW_MAX_RANK];
    win_attr w;
    for (uint32_t k = 0; k < rank; k++) {
        w.size[k] = w.stride[k] = w.ld[k] = w.rd[k] = 1;
        w.pad[2 * k] = w.pad[2 * k + 1] = 0;
        dims[k] = xd[k];
        sl[3 * k] = 0, sl[3 * k + 1] = xd[k], sl[3 * k + 2] = 1;
    }
    w.size[j] = nb;
    w.pad[2 * j + suffix] = nb;
    dims[j] = nb + 1;
    sl[3 * j] = suffix, sl[3 * j + 1] = nb + suffix;
    eid r = lf_window_node(c, in, x->cls, init->cls, &w, dims);
    if (r == EID_NONE) return false;
    lval v = term(lf_mk_slice(c, r, sl), x->v, x->assumed || init->assumed);
    v.kind = LV_ROW;
    v.vdim = (uint8_t)j;
    v.v.dims[j] = axes;
    ARENA_GROW(c->a, c->rows, c->nrows, c->caprows, 4);
    c->rows[c->nrows++] = (struct lift_row){.e = v.cls, .x = x->cls, .init = init->cls, .j = j, .suffix = suffix, .axes = axes, .red = in};
    *out = v;
    return true;
}

/* Whether every dim of row x but its slices' is whole on every device. */
static bool row_whole(const lval *x) {
    if (x->v.partial) return false;
    for (uint32_t k = 0; k < x->v.rank; k++)
        if (k != x->vdim && x->v.dims[k].naxes) return false;
    return true;
}

/* A reshape of row x's local value: E with its slices' dim first, the rest
 * reshaped alike. */
static bool row_reshape(lstate *s, const lval *x, lval *out) {
    lift_ctx *c = s->c;
    const shape *os = &s->in->shape;
    if (!row_whole(x) || os->rank + 1 > VIEW_MAX_RANK) return false;
    uint32_t rank;
    const int64_t *ed = eg_type_dims(c->g, eg_class_type(c->g, x->cls), &rank);
    int64_t dims[VIEW_MAX_RANK];
    dims[0] = ed[x->vdim];
    memcpy(dims + 1, os->dims, os->rank * sizeof *dims);
    eid e = lf_mk_moved(c, x->cls, x->vdim, 0);
    *out = *x;
    out->cls = lf_mk_reshape(c, e, lf_type_of(c, os->dtype, dims, os->rank + 1), c->origin);
    out->vdim = 0;
    out->v = view_dup(os->rank + 1);
    out->v.dims[0] = x->v.dims[x->vdim];
    return true;
}

/* Row E (slices along dim j, view axes) spread by a broadcast into dim k of
 * global dims g (rank r, g[k] = blocks · n): E's other dims go to the dims
 * of g but k in order, and every device's slice fills its block along k. */
static eid row_spread(lift_ctx *c, eid e, uint32_t j, uint32_t k, const int64_t *g, uint32_t r, int64_t n) {
    uint32_t er;
    uint32_t t = eg_class_type(c->g, e);
    const int64_t *ed = eg_type_dims(c->g, t, &er);
    if (er != r || r + 1 > VIEW_MAX_RANK || g[k] != ed[j] * n) return EID_NONE;
    int64_t big[VIEW_MAX_RANK], bd[VIEW_MAX_RANK];
    for (uint32_t q = 0, o = 0; q <= r; q++) big[q] = q == k ? ed[j] : q == k + 1 ? n : g[o], o += q != k;
    for (uint32_t q = 0; q < r; q++) bd[q] = q < k ? q : q + 1;
    eid et = lf_mk_moved(c, e, j, k);
    int dt = eg_type_dtype(c->g, t);
    eid b = eg_add(c->g, OP_BROADCAST, lf_list_attr(c, A_DIMENSIONS, bd, r), lf_type_of(c, dt, big, r + 1), &et, 1, c->origin);
    return lf_mk_reshape(c, b, lf_type_of(c, dt, g, r), c->origin);
}

/* A spread row G of global dims g (rank r), its slices over dim k in blocks
 * of n: where G is the exclusive prefix (suffix) of the totals of x's blocks
 * along k and x's blockwise cumulative sum along k was taken, the sum of
 * the two is the baseline's cumulative sum of x. */
static void scan_prefix(lift_ctx *c, eid gcls, uint32_t k, const int64_t *g, uint32_t r, int64_t n, const view_dim *axes) {
    for (uint32_t q = 0; q < c->nscans; q++) {
        const struct lift_scan *sc = &c->scans[q];
        uint32_t xr;
        const int64_t *xd = eg_type_dims(c->g, eg_class_type(c->g, sc->x), &xr);
        if (sc->dim != k || sc->n != n || xr != r || memcmp(xd, g, r * sizeof *g)) continue;
        for (uint32_t w = 0; w < c->nrows; w++) {
            const struct lift_row *rw = &c->rows[w];
            if (rw->suffix != sc->reverse || rw->axes.naxes != axes->naxes ||
                memcmp(rw->axes.axes, axes->axes, axes->naxes) || eg_find(c->g, row_spread(c, rw->e, rw->j, k, g, r, n)) !=
                eg_find(c->g, gcls))
                continue;
            /* x's block totals, as the stack holds them */
            eid tot = block_totals(c, sc->x, k, sc->nb, n, rw->init, rw->red);
            if (tot == EID_NONE || eg_find(c->g, lf_mk_moved(c, tot, k, rw->j)) != eg_find(c->g, rw->x)) continue;
            eid sum[2] = {sc->blocked, gcls};
            eg_union(c->g, eg_add(c->g, OP_ADD, 0, eg_class_type(c->g, sc->x), sum, 2, c->origin), sc->global, NULL);
        }
    }
}

/* A broadcast of row x: where it adds one dim, the row spread over it
 * (the device's block of it); where it adds none, the row itself. */
static bool row_broadcast(lstate *s, const lval *x, lval *out) {
    lift_ctx *c = s->c;
    const hlo_instr *in = s->in;
    uint32_t nbd, r = in->shape.rank;
    const int64_t *bd = instr_ints(in, A_DIMENSIONS, &nbd);
    if (!row_whole(x) || nbd + 1 != x->v.rank || r > VIEW_MAX_RANK) return false;
    bool used[VIEW_MAX_RANK] = {false};
    for (uint32_t q = 0; q < nbd; q++) {
        if (bd[q] < 0 || bd[q] >= r || (q && bd[q] <= bd[q - 1])) return false;
        used[bd[q]] = true;
    }
    if (nbd == r) {
        *out = *x;
        return true;
    }
    if (nbd + 1 != r) return false;
    uint32_t k = 0;
    while (used[k]) k++;
    uint32_t er;
    const int64_t *ed = eg_type_dims(c->g, eg_class_type(c->g, x->cls), &er);
    int64_t g[VIEW_MAX_RANK], n = in->shape.dims[k];
    memcpy(g, in->shape.dims, r * sizeof *g);
    g[k] = ed[x->vdim] * n;
    eid t = row_spread(c, x->cls, x->vdim, k, g, r, n);
    if (t == EID_NONE) return false;
    view v = view_dup(r);
    v.dims[k] = x->v.dims[x->vdim];
    *out = term(t, v, x->assumed);
    scan_prefix(c, t, k, g, r, n, &v.dims[k]);
    return true;
}

bool lf_row_instr(lstate *s, lval *out) {
    const hlo_instr *in = s->in;
    const lval *x = NULL;
    for (uint32_t o = 0; o < in->noperands; o++)
        if (s->ops[o].kind == LV_ROW) x = &s->ops[o];
    if (!x) return false;
    if (in->noperands == 1 && (in->op == OP_RESHAPE || in->op == OP_BITCAST) && row_reshape(s, x, out)) return true;
    if (in->noperands == 1 && in->op == OP_BROADCAST && row_broadcast(s, x, out)) return true;
    lf_unsupported(s->c, s->comp, in, "%s uses the sums of the blocks before each device's (a per-device slice of a "
                   "term) in a way not related yet", in->name);
    *out = unknown();
    return true;
}
