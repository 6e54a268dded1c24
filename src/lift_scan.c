/* lift_scan — values held one slice per device (LV_ROW; lift.h; DESIGN §5):
 * cumulative sums over a sharded dim, and an online softmax's maxima.
 *
 * A cumsum along a dim sharded in nb blocks of n is written per device as
 * its own block's cumsum (lift_win.c reads it as the blockwise cumsum of x
 * split into [nb, n]) plus the sum of the blocks before it: the blocks'
 * totals all-gathered (a stack, lift_coll.c gather_pieces), masked by
 * stack position < the device's block and summed over the stack. That sum
 * is, on device d, row blk(d) of the exclusive prefix sums of the stack: an
 * LV_ROW, which an op meeting it with a term sharded along a dim it was
 * broadcast along spreads over the device's block. Where the stack is x's
 * block totals, the identity
 *   cumsum_N(x) = merge(cumsum_n(xb) + spread(exclusive prefix of sum_n(xb)))
 * joins that sum to the baseline's cumsum of x (scan_prefix).
 *
 * A partial max a reduce made over a sharded dim, used as what it is on
 * each device (exp(S − m)), is the row of its blocks' maxima
 * (lf_partial_row); elementwise ops with values every device holds keep
 * rows rows, and a partial sum of exp(S − m) rescaled by exp(m − M) is the
 * partial sum of exp(S − M) (row_rescale): flash attention's combination.
 */
#include "lift.h"
#include "lift_int.h"

#include "eattr.h"
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

/* x with dim k split into (nb, n), reduced over dims rd (x's numbering;
 * k among them stands for its n part) by `like`'s reducer from init: the
 * reduction over each of the nb blocks, whose dim sits where the n part's
 * reduced dims leave it (lift_coll.c gather_pieces stacks such blocks). */
static eid blockwise_reduce(lift_ctx *c, eid x, uint32_t k, int64_t nb, int64_t n, const int64_t *rd, uint32_t nrd,
                            eid init, const hlo_instr *like) {
    uint32_t r;
    const int64_t *xd = eg_type_dims(c->g, eg_class_type(c->g, x), &r);
    const hlo_attr *ta = instr_attr(like, A_TO_APPLY);
    if (!ta || r + 1 > VIEW_MAX_RANK || k >= r || nrd > r) return EID_NONE;
    int64_t sd[VIEW_MAX_RANK], bd[VIEW_MAX_RANK], kd[VIEW_MAX_RANK];
    bool red[VIEW_MAX_RANK + 1] = {false};
    for (uint32_t q = 0; q < nrd; q++) {
        if (rd[q] < 0 || rd[q] >= (int64_t)r) return EID_NONE;
        red[rd[q] < (int64_t)k ? rd[q] : rd[q] + 1] = true;
    }
    uint32_t nb_out = 0, nk = 0;
    for (uint32_t p = 0, o = 0; p <= r; p++) {
        sd[p] = p == k ? nb : p == k + 1 ? n : xd[o];
        o += p != k;
        if (red[p]) kd[nk++] = p;
        else bd[nb_out++] = sd[p];
    }
    int dt = eg_type_dtype(c->g, eg_class_type(c->g, x));
    eid ch[2] = {lf_mk_reshape(c, x, lf_type_of(c, dt, sd, r + 1), c->origin), init};
    hlo_attr *at = arena_alloc(c->a, 2 * sizeof *at);
    at[0] = (hlo_attr){.key = A_DIMENSIONS, .kind = K_INTS, .n = nk, .v.ints = arena_memdup(c->a, kd, nk * sizeof *kd)};
    at[1] = *ta;
    hlo_instr g = {.name = "reduce", .opname = "reduce", .op = OP_REDUCE, .nattrs = 2, .noperands = 2, .attrs = at};
    g.shape.dtype = (uint8_t)dt;
    g.shape.rank = nb_out;
    g.shape.dims = bd;
    return lf_node(c, c->cur, &g, ch, 2, bd, c->origin);
}

/* The totals of the nb blocks of n along dim k of x: x split there into
 * (nb, n), summed over n (init 0, `like`'s reducer, a sum). */
static eid block_totals(lift_ctx *c, eid x, uint32_t k, int64_t nb, int64_t n, eid init, const hlo_instr *like) {
    int64_t kd = k;
    return blockwise_reduce(c, x, k, nb, n, &kd, 1, init, like);
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
        c->divergence_cause = NULL;
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

/* Row x's local value reshaped to os: E with its slices' dim first, the
 * rest reshaped alike. */
static bool row_reshape(lift_ctx *c, const lval *x, const shape *os, lval *out) {
    if (!row_whole(x) || os->rank + 1 > VIEW_MAX_RANK) return false;
    uint32_t rank;
    const int64_t *ed = eg_type_dims(c->g, eg_class_type(c->g, x->cls), &rank);
    int64_t dims[VIEW_MAX_RANK];
    dims[0] = ed[x->vdim];
    memcpy(dims + 1, os->dims, os->rank * sizeof *dims);
    eid e = lf_mk_moved(c, x->cls, x->vdim, 0);
    view_dim ax = x->v.dims[x->vdim];
    *out = *x;  /* out may be x */
    out->cls = lf_mk_reshape(c, e, lf_type_of(c, os->dtype, dims, os->rank + 1), c->origin);
    out->vdim = 0;
    out->v = view_dup(os->rank + 1);
    out->v.dims[0] = ax;
    return true;
}

bool lf_partial_row(lstate *s, uint32_t o, lval *out) {
    lift_ctx *c = s->c;
    const hlo_comp *comp = s->comp;
    const lval *p = &s->ops[o];
    if (c->baseline_mode || p->kind != LV_TERM || !p->v.partial || (p->v.red != RED_MAX && p->v.red != RED_MIN) ||
        p->assumed || lf_scale_of(p) != 1 || p->diff || p->zm)
        return false;
    /* the reduce that made it, through reshapes and copies */
    uint32_t i = s->in->operands[o], chain[8], nch = 0;
    for (const hlo_instr *y = &comp->instrs[i];
         (y->op == OP_RESHAPE || y->op == OP_BITCAST || y->op == OP_COPY) && y->noperands == 1 && nch < 8;
         y = &comp->instrs[i])
        chain[nch++] = i, i = y->operands[0];
    const hlo_instr *r = &comp->instrs[i];
    if (r->op != OP_REDUCE || r->noperands != 2 || lf_reducer(c->cur, r) != p->v.red) return false;
    const lval *x = &s->vals[r->operands[0]], *init = &s->vals[r->operands[1]];
    if (x->kind != LV_TERM || x->v.partial || x->assumed || lf_scale_of(x) != 1 || x->diff || x->zm || init->kind != LV_TERM ||
        init->v.partial || init->cls == EID_NONE || x->v.rank != comp->instrs[r->operands[0]].shape.rank)
        return false;
    uint32_t nrd;
    const int64_t *rd = instr_ints(r, A_DIMENSIONS, &nrd);
    int64_t k = -1;
    bool reduced[VIEW_MAX_RANK] = {false};
    for (uint32_t q = 0; q < nrd; q++) {
        if (rd[q] < 0 || rd[q] >= x->v.rank) return false;
        reduced[rd[q]] = true;
        if (!x->v.dims[rd[q]].naxes) continue;
        if (k >= 0) return false;
        k = rd[q];
    }
    if (k < 0) return false;
    uint32_t mask = 0;
    int64_t nb = 1;
    for (uint32_t a = 0; a < x->v.dims[k].naxes; a++) mask |= 1u << x->v.dims[k].axes[a], nb *= c->mesh->sizes[x->v.dims[k].axes[a]];
    if (mask != p->v.partial) return false;
    eid e = blockwise_reduce(c, x->cls, (uint32_t)k, nb, comp->instrs[r->operands[0]].shape.dims[k], rd, nrd, init->cls, r);
    if (e == EID_NONE) return false;
    /* E: x's dims but the reduced ones, the blocks' dim where k was */
    view v = {0};
    uint32_t vdim = 0;
    for (uint32_t d = 0; d < x->v.rank; d++) {
        if (d == (uint32_t)k) vdim = v.rank, v.dims[v.rank++] = x->v.dims[d];
        else if (!reduced[d]) v.dims[v.rank++] = x->v.dims[d];
    }
    lval row = term(e, v, false);
    row.kind = LV_ROW;
    row.vdim = (uint8_t)vdim;
    row.from_max = true;
    while (nch-- > 0)
        if (!row_reshape(c, &row, &comp->instrs[chain[nch]].shape, &row)) return false;
    if (!c->row_max_at) {
        strbuf why;
        sb_init(&why);
        view_print(&why, &p->v, c->mesh);
        c->row_max_at = s->in;
        c->row_max_comp = comp;
        char *m = arena_alloc(c->a, 300);
        snprintf(m, 300, "%s uses a partial %s before it is reduced (%s), taken as its blocks' %s, one per device; the "
                 "outputs built on them do not meet the baseline's", s->in->name, p->v.red == RED_MAX ? "max" : "min", why.s,
                 p->v.red == RED_MAX ? "maxima" : "minima");
        c->row_max_why = m;
        sb_free(&why);
    }
    *out = row;
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

/* A broadcast of row x: E broadcast alike, its slices' dim first (a
 * broadcast along a dim every device holds whole); an op that meets it
 * with a value sharded along an added dim takes it spread over that dim
 * instead (row_spread_at). */
static bool row_broadcast(lstate *s, const lval *x, lval *out) {
    lift_ctx *c = s->c;
    const hlo_instr *in = s->in;
    uint32_t nbd, r = in->shape.rank;
    const int64_t *bd = instr_ints(in, A_DIMENSIONS, &nbd);
    if (!row_whole(x) || nbd + 1 != x->v.rank || r + 1 > VIEW_MAX_RANK) return false;
    for (uint32_t q = 0; q < nbd; q++)
        if (bd[q] < 0 || bd[q] >= r || (q && bd[q] <= bd[q - 1])) return false;
    if (nbd == r) {
        *out = *x;
        return true;
    }
    uint32_t er;
    const int64_t *ed = eg_type_dims(c->g, eg_class_type(c->g, x->cls), &er);
    int64_t dims[VIEW_MAX_RANK], b2[VIEW_MAX_RANK];
    dims[0] = ed[x->vdim];
    memcpy(dims + 1, in->shape.dims, r * sizeof *dims);
    b2[0] = 0;
    for (uint32_t q = 0; q < nbd; q++) b2[q + 1] = bd[q] + 1;
    eid e = lf_mk_moved(c, x->cls, x->vdim, 0);
    *out = *x;
    out->cls = eg_add(c->g, OP_BROADCAST, lf_list_attr(c, A_DIMENSIONS, b2, nbd + 1),
                      lf_type_of(c, in->shape.dtype, dims, r + 1), &e, 1, c->origin);
    out->vdim = 0;
    out->v = view_dup(r + 1);
    out->v.dims[0] = x->v.dims[x->vdim];
    return true;
}

/* Row x (operand o) met by y, a term sharded along dim k alone over the
 * axes of x's slices: where x's E was broadcast along k, x spread over it
 * (each device's slice filling its block of k), a term sharded as y is. */
static bool row_spread_at(lstate *s, uint32_t o, const lval *y, lval *out) {
    lift_ctx *c = s->c;
    const lval *x = &s->ops[o];
    const shape *ls = &s->comp->instrs[s->in->operands[o]].shape;
    uint32_t r = ls->rank, er, yr, nb;
    int64_t k = -1;
    if (!row_whole(x) || y->kind != LV_TERM || y->v.partial || y->v.rank != r || r + 1 > VIEW_MAX_RANK) return false;
    for (uint32_t d = 0; d < r; d++) {
        if (!y->v.dims[d].naxes) continue;
        if (k >= 0) return false;
        k = d;
    }
    const view_dim *ax = &x->v.dims[x->vdim];
    if (k < 0 || y->v.dims[k].naxes != ax->naxes || memcmp(y->v.dims[k].axes, ax->axes, ax->naxes)) return false;
    const int64_t *g = eg_type_dims(c->g, eg_class_type(c->g, y->cls), &yr);
    const eid *ch;
    eid bn = lf_class_node(c, x->cls, OP_BROADCAST, 1, &ch);
    if (bn == EID_NONE || yr != r) return false;
    const int64_t *bd = ea_get(c->g, eg_node_attr(c->g, bn), A_DIMENSIONS, &nb);
    uint32_t tk = (uint32_t)k + ((uint32_t)k >= x->vdim), hid = x->vdim;
    /* E without dim tk: its broadcast from E0 along the other added dims */
    int64_t b1[VIEW_MAX_RANK], d1[VIEW_MAX_RANK];
    const int64_t *ed = eg_type_dims(c->g, eg_class_type(c->g, x->cls), &er);
    for (uint32_t q = 0; q < nb; q++) {
        if (bd[q] == tk) return false;
        b1[q] = bd[q] - (bd[q] > tk);
    }
    for (uint32_t d = 0, q = 0; d < er; d++)
        if (d != tk) d1[q++] = ed[d];
    uint32_t t1 = lf_type_of(c, eg_type_dtype(c->g, eg_class_type(c->g, x->cls)), d1, er - 1);
    eid e0 = ch[0]; /* before eg_add, which may move the nodes */
    eid e1 = nb == er - 1 ? e0 : eg_add(c->g, OP_BROADCAST, lf_list_attr(c, A_DIMENSIONS, b1, nb), t1, &e0, 1, c->origin);
    eid t = row_spread(c, e1, hid - (hid > tk), (uint32_t)k, g, r, ls->dims[k]);
    if (t == EID_NONE) return false;
    view v = view_dup(r);
    v.dims[k] = *ax;
    *out = term(t, v, x->assumed);
    scan_prefix(c, t, (uint32_t)k, g, r, ls->dims[k], &v.dims[k]);
    return true;
}

/* An elementwise op of rows (slices along the same dim over the same
 * axes) and values every device holds whole: a row, the op of the rows'
 * E and the others broadcast along the slices' dim. */
static bool row_elementwise(lstate *s, lval *out) {
    lift_ctx *c = s->c;
    const hlo_instr *in = s->in;
    const lval *x = NULL;
    eid ch[8];
    if (in->noperands > 8 || in->shape.rank + 1 > VIEW_MAX_RANK) return false;
    for (uint32_t o = 0; o < in->noperands; o++) {
        const lval *y = &s->ops[o];
        if (y->kind == LV_ROW && !x) x = y;
        if (y->kind == LV_ROW && (!row_whole(y) || y->vdim != x->vdim || y->v.rank != x->v.rank ||
                                  memcmp(&y->v.dims[y->vdim], &x->v.dims[x->vdim], sizeof x->v.dims[0])))
            return false;
        if (y->kind != LV_ROW && (y->kind != LV_TERM || y->cls == EID_NONE || y->v.partial || !view_is_dup(&y->v) ||
                                  lf_scale_of(y) != 1 || y->diff || y->zm))
            return false;
    }
    uint32_t er;
    const int64_t *ed = eg_type_dims(c->g, eg_class_type(c->g, x->cls), &er);
    int64_t dims[VIEW_MAX_RANK], bd[VIEW_MAX_RANK];
    memcpy(dims, ed, er * sizeof *dims);
    for (uint32_t d = 0, q = 0; d < er; d++)
        if (d != x->vdim) bd[q++] = d;
    bool assumed = false;
    for (uint32_t o = 0; o < in->noperands; o++) {
        const lval *y = &s->ops[o];
        assumed |= y->assumed;
        if (y->kind == LV_ROW) {
            ch[o] = y->cls;
            continue;
        }
        const shape *ys = &s->comp->instrs[in->operands[o]].shape;
        if (ys->rank + 1 != er) return false;
        ch[o] = eg_add(c->g, OP_BROADCAST, lf_list_attr(c, A_DIMENSIONS, bd, er - 1), lf_type_of(c, ys->dtype, dims, er), &y->cls,
                       1, c->origin);
    }
    /* (the op over E's dims: the rows' dim too) */
    hlo_instr ri = *in;
    ri.shape.rank = er;
    ri.shape.dims = dims;
    *out = *x;
    out->assumed = assumed;
    out->cls = lf_node(c, c->cur, &ri, ch, in->noperands, dims, c->origin);
    return out->cls != EID_NONE;
}

/* Instruction i of comp followed back through copies, broadcasts and
 * reshapes that add or drop unit dims, to the first other op (returned):
 * src[k], for each dim k of i, the dim of that op it shows (-1: a dim
 * broadcast along, or a unit dim). */
static uint32_t layout_source(const hlo_comp *comp, uint32_t i, int64_t *src) {
    for (uint32_t k = 0; k < comp->instrs[i].shape.rank; k++) src[k] = k;
    for (int depth = 0; depth < 16; depth++) {
        const hlo_instr *y = &comp->instrs[i];
        if (y->noperands != 1) break;
        const shape *os = &comp->instrs[y->operands[0]].shape;
        int64_t to[VIEW_MAX_RANK];
        if (y->op == OP_BROADCAST) {
            uint32_t nb;
            const int64_t *bd = instr_ints(y, A_DIMENSIONS, &nb);
            for (uint32_t q = 0; q < y->shape.rank; q++) to[q] = -1;
            for (uint32_t q = 0; q < nb; q++)
                if (bd[q] >= 0 && bd[q] < y->shape.rank) to[bd[q]] = q;
        } else if (y->op == OP_RESHAPE || y->op == OP_BITCAST) {
            uint32_t q = 0;
            for (uint32_t p = 0; p < y->shape.rank; p++) {
                to[p] = -1;
                if (y->shape.dims[p] == 1) continue;
                while (q < os->rank && os->dims[q] == 1) q++;
                if (q == os->rank || os->dims[q] != y->shape.dims[p]) return i;
                to[p] = q++;
            }
            while (q < os->rank && os->dims[q] == 1) q++;
            if (q != os->rank) return i;
        } else if (y->op == OP_COPY) {
            for (uint32_t q = 0; q < y->shape.rank; q++) to[q] = q;
        } else {
            break;
        }
        for (uint32_t k = 0; k < comp->instrs[i].shape.rank; k++)
            if (src[k] >= 0) src[k] = to[src[k]];
        i = y->operands[0];
    }
    return i;
}

/* Where contraction or sum L (a dot, or a reduce) puts dim d of its operand
 * p: the result's dim, or -1 when it contracts or reduces it (lhs_rank: the
 * rank of a dot's lhs). */
static int64_t kept_at(const hlo_instr *L, uint32_t p, uint32_t d, uint32_t lhs_rank) {
    uint32_t n;
    if (L->op == OP_REDUCE) {
        const int64_t *rd = instr_ints(L, A_DIMENSIONS, &n);
        int64_t at = d;
        for (uint32_t q = 0; q < n; q++) {
            if (rd[q] == d) return -1;
            at -= rd[q] < d;
        }
        return at;
    }
    uint32_t nb, nc, nlf = 0;
    const int64_t *b = instr_ints(L, p ? A_RHS_BATCH_DIMS : A_LHS_BATCH_DIMS, &nb);
    const int64_t *cd = instr_ints(L, p ? A_RHS_CONTRACTING_DIMS : A_LHS_CONTRACTING_DIMS, &nc);
    for (uint32_t q = 0; q < nb; q++)
        if (b[q] == d) return q;
    for (uint32_t q = 0; q < nc; q++)
        if (cd[q] == d) return -1;
    int64_t at = nb;
    if (p) { /* after the lhs's free dims */
        uint32_t lb, lc;
        instr_ints(L, A_LHS_BATCH_DIMS, &lb);
        instr_ints(L, A_LHS_CONTRACTING_DIMS, &lc);
        nlf = lhs_rank - lb - lc;
        at += nlf;
    }
    for (uint32_t e = 0; e < d; e++) {
        bool skip = false;
        for (uint32_t q = 0; q < nb; q++) skip |= b[q] == e;
        for (uint32_t q = 0; q < nc; q++) skip |= cd[q] == e;
        at += !skip;
    }
    return at;
}

/* multiply(A, R) (A operand ia): A a partial sum over the axes of row R's
 * slices that a contraction or sum L made of x = exp(S − G(m)), or x
 * itself (rescaled before it is contracted) — m a
 * partial max, G broadcasts and unit reshapes — and R = H(exp(m − M)), M
 * the all-reduced max of m, H the same rows placed where L puts them. On
 * each device R·L(x) = L(G(exp(m − M))·exp(S − G(m))) = L(exp(S − G(M))):
 * the online softmax's rescaling (flash attention across devices), whose
 * sum over the devices is L over the whole of exp(S − G(M)). */
static bool row_rescale(lstate *s, uint32_t ia, lval *out) {
    lift_ctx *c = s->c;
    const hlo_comp *comp = s->comp;
    const hlo_instr *in = s->in;
    const lval *a = &s->ops[ia], *row = &s->ops[1 - ia];
    uint32_t r = in->shape.rank, mask = 0;
    if (in->op != OP_MULTIPLY || in->noperands != 2 || !row->from_max || a->kind != LV_TERM || a->assumed ||
        lf_scale_of(a) != 1 || a->diff || a->zm || a->cls == EID_NONE || r > VIEW_MAX_RANK)
        return false;
    const view_dim *ax = &row->v.dims[row->vdim];
    for (uint32_t q = 0; q < ax->naxes; q++) mask |= 1u << ax->axes[q];
    int64_t asrc[VIEW_MAX_RANK], hsrc[VIEW_MAX_RANK], msrc[VIEW_MAX_RANK], gsrc[VIEW_MAX_RANK];
    uint32_t li = layout_source(comp, in->operands[ia], asrc);
    const hlo_instr *L = &comp->instrs[li], *ec = &comp->instrs[layout_source(comp, in->operands[1 - ia], hsrc)];
    /* direct: A is x itself (the rescaled probabilities, contracted later) */
    bool direct = L->op == OP_EXP && li == in->operands[ia];
    if (direct ? a->v.partial != 0 : a->v.partial != mask || a->v.red != RED_SUM) return false;
    for (uint32_t d = 0; d < a->v.rank && !direct; d++)
        if (a->v.dims[d].naxes) return false;
    if (ec->op != OP_EXP || ec->noperands != 1 ||
        (!direct && L->op != OP_DOT && (L->op != OP_REDUCE || lf_reducer(c->cur, L) != RED_SUM)))
        return false;
    const hlo_instr *sub = &comp->instrs[ec->operands[0]];
    if (sub->op != OP_SUBTRACT || sub->shape.rank > VIEW_MAX_RANK) return false;
    const lval *m = &s->vals[sub->operands[0]], *M = &s->vals[sub->operands[1]];
    if (m->kind != LV_TERM || m->v.partial != mask || m->v.red != RED_MAX || M->kind != LV_TERM || M->v.partial ||
        !view_is_dup(&M->v) || M->cls == EID_NONE || eg_find(c->g, M->cls) != eg_find(c->g, m->cls))
        return false;
    uint32_t mi = layout_source(comp, sub->operands[0], msrc);
    const shape *ms = &comp->instrs[mi].shape;
    for (uint32_t k = 0; k < r; k++) hsrc[k] = hsrc[k] < 0 ? -1 : msrc[hsrc[k]];
    const lval *lv = &s->vals[li];
    const hlo_instr *lhs = &comp->instrs[L->operands[0]];
    for (uint32_t p = 0; p < (L->op == OP_DOT ? 2u : 1u); p++) {
        uint32_t xi = direct ? li : L->operands[p];
        const hlo_instr *X = &comp->instrs[xi], *xs = X->op == OP_EXP ? &comp->instrs[X->operands[0]] : NULL;
        if (!xs || xs->op != OP_SUBTRACT || X->shape.rank > VIEW_MAX_RANK ||
            layout_source(comp, xs->operands[1], gsrc) != mi)
            continue;
        const lval *S = &s->vals[xs->operands[0]], *xv = &s->vals[xi];
        if (S->kind != LV_TERM || S->v.partial || S->cls == EID_NONE || xv->kind != LV_TERM || xv->cls == EID_NONE) continue;
        /* each of m's dims of more than one: the dim of x G puts it on, and
         * the dim of the product H puts it on, the same dim of L's result */
        int64_t nu[VIEW_MAX_RANK], bd[VIEW_MAX_RANK], md[VIEW_MAX_RANK];
        uint32_t nnu = 0;
        bool ok = true;
        for (uint32_t t = 0; t < ms->rank && ok; t++) {
            if (ms->dims[t] == 1) continue;
            int64_t xd = -1, od = -1;
            for (uint32_t d = 0; d < X->shape.rank; d++)
                if (gsrc[d] == t) ok &= xd < 0, xd = d;
            for (uint32_t k = 0; k < r; k++)
                if (hsrc[k] == t) ok &= od < 0, od = k;
            int64_t kept = xd < 0 ? -1 : direct ? xd : kept_at(L, p, (uint32_t)xd, lhs->shape.rank);
            ok = ok && xd >= 0 && od >= 0 && kept >= 0 && asrc[od] == kept;
            nu[nnu] = xd;
            md[nnu++] = ms->dims[t];
        }
        for (uint32_t q = 1; q < nnu && ok; q++) ok = nu[q] > nu[q - 1];
        if (!ok) continue;
        /* exp(S − G(M)): M with m's own dims where m is a reduce of a value
         * of x's shape and G puts its dims where the reduce took them from
         * (a softmax's keepdims max: as the baseline broadcasts it), else
         * with m's dims of more than one */
        uint32_t st = eg_class_type(c->g, S->cls), nbd = nnu;
        int dt = eg_type_dtype(c->g, st);
        memcpy(bd, nu, nnu * sizeof *bd);
        const hlo_instr *mr = &comp->instrs[mi];
        if (mr->op == OP_REDUCE && shape_equal(&comp->instrs[mr->operands[0]].shape, &X->shape)) {
            int64_t kb[VIEW_MAX_RANK];
            uint32_t nk = 0, q = 0;
            for (uint32_t d = 0; d < X->shape.rank; d++)
                if (kept_at(mr, 0, d, 0) >= 0) kb[nk++] = d;
            bool same = nk == ms->rank;
            for (uint32_t t = 0; t < ms->rank && same; t++)
                if (ms->dims[t] != 1) same = kb[t] == nu[q++];
            if (same) {
                memcpy(bd, kb, nk * sizeof *bd), nbd = nk;
                memcpy(md, ms->dims, nk * sizeof *md);
            }
        }
        eid m0 = lf_mk_reshape(c, M->cls, lf_type_of(c, dt, md, nbd), c->origin);
        eid mb = eg_add(c->g, OP_BROADCAST, lf_list_attr(c, A_DIMENSIONS, bd, nbd), st, &m0, 1, c->origin);
        const eid *xc, *lc = NULL;
        eid en = lf_class_node(c, xv->cls, OP_EXP, 1, &xc);
        eid ln = direct ? EID_NONE
                        : lv->kind == LV_TERM && lv->cls != EID_NONE ? lf_class_node(c, lv->cls, L->op, L->noperands, &lc)
                                                                     : EID_NONE;
        if (en == EID_NONE || (!direct && (ln == EID_NONE || eg_find(c->g, lc[p]) != eg_find(c->g, xv->cls)))) continue;
        /* L's operands before eg_add, which may move the nodes */
        eid nch[2] = {direct ? EID_NONE : lc[0], !direct && L->noperands > 1 ? lc[1] : EID_NONE};
        eid sd[2] = {S->cls, mb};
        eid d = eg_add(c->g, OP_SUBTRACT, 0, st, sd, 2, c->origin);
        eid e = eg_add(c->g, OP_EXP, eg_node_attr(c->g, en), eg_class_type(c->g, xv->cls), &d, 1, c->origin);
        if (direct) {
            *out = term(e, a->v, S->assumed || xv->assumed);
            return true;
        }
        nch[p] = e;
        eid lt = eg_add(c->g, L->op, eg_node_attr(c->g, ln), eg_class_type(c->g, lv->cls), nch, L->noperands, c->origin);
        *out = term(lf_mk_reshape(c, lt, eg_class_type(c->g, a->cls), c->origin), a->v, S->assumed || xv->assumed);
        return true;
    }
    return false;
}

bool lf_after_row_max(const lstate *s, uint32_t i) {
    if (!s->c->row_max_at) return false;
    const hlo_comp *comp = s->comp;
    uint32_t stack[64], n = 0, seen = 0;
    stack[n++] = i;
    while (n && seen < 512) {
        uint32_t j = stack[--n];
        seen++;
        const lval *v = &s->vals[j];
        if (v->kind == LV_ROW && v->from_max) return true;
        const hlo_instr *y = &comp->instrs[j];
        for (uint32_t o = 0; o < y->noperands && n < 64; o++)
            if (y->operands[o] < j) stack[n++] = y->operands[o];
    }
    return false;
}

/* Whether op (of a partial max operand) is one whose partial-max reading
 * lift.c does not take: it needs the blocks' maxima, one per device. */
static bool needs_row(const hlo_instr *in) {
    switch (in->op) {
    case OP_MAXIMUM: case OP_MINIMUM: case OP_CONVERT: case OP_NEGATE: case OP_RESHAPE: case OP_BITCAST: case OP_COPY:
    case OP_COMPARE: case OP_SELECT:
        return false;
    default:
        return in->op == OP_BROADCAST || graph_op_elementwise(in->op);
    }
}

/* The op that took the partial max behind row operand o (from_max) as its
 * blocks' maxima: followed back through the ops that kept it a row. */
static const hlo_instr *row_origin(const lstate *s, uint32_t o) {
    const hlo_comp *comp = s->comp;
    const hlo_instr *y = s->in;
    for (int depth = 0; depth < 64; depth++) {
        const hlo_instr *next = NULL;
        for (uint32_t q = 0; q < y->noperands && !next; q++) {
            const lval *v = &s->vals[y->operands[q]];
            if (y == s->in && q != o) continue;
            if (v->kind == LV_ROW && v->from_max) next = &comp->instrs[y->operands[q]];
            else if (v->kind == LV_TERM && v->v.partial && v->v.red != RED_SUM) return y;
        }
        if (!next) return y;
        y = next;
    }
    return y;
}

bool lf_row_instr(lstate *s, lval *out) {
    lift_ctx *c = s->c;
    const hlo_instr *in = s->in;
    if (!c->baseline_mode && needs_row(in))
        for (uint32_t o = 0; o < in->noperands; o++) {
            lval row;
            if (s->ops[o].kind == LV_TERM && s->ops[o].v.partial && s->ops[o].v.red != RED_SUM && lf_partial_row(s, o, &row))
                s->ops[o] = row;
        }
    const lval *x = NULL;
    uint32_t xo = 0;
    for (uint32_t o = 0; o < in->noperands; o++)
        if (s->ops[o].kind == LV_ROW) x = &s->ops[o], xo = o;
    if (!x) return false;
    if (in->noperands == 1 && (in->op == OP_RESHAPE || in->op == OP_BITCAST) && row_reshape(c, x, &in->shape, out)) return true;
    if (in->noperands == 1 && in->op == OP_BROADCAST && row_broadcast(s, x, out)) return true;
    if (graph_op_elementwise(in->op)) {
        if (in->noperands == 2 && row_rescale(s, 1 - xo, out)) return true;
        if (row_elementwise(s, out)) return true;
        /* rows beside a term sharded along a dim they were broadcast
         * along: spread there, the op lifted as any other */
        const lval *y = NULL;
        for (uint32_t o = 0; o < in->noperands; o++)
            if (s->ops[o].kind == LV_TERM && !view_is_dup(&s->ops[o].v)) y = &s->ops[o];
        bool spread = y != NULL;
        for (uint32_t o = 0; o < in->noperands && spread; o++)
            if (s->ops[o].kind == LV_ROW) spread = row_spread_at(s, o, y, &s->ops[o]);
        if (spread) return false;
    }
    if (x->from_max) {
        const hlo_instr *at = row_origin(s, xo);
        /* a loop carry's element read (a get-tuple-element, which a text
         * dump may leave unnamed): the op that uses it instead */
        if (at->op == OP_GET_TUPLE_ELEMENT) at = in;
        lf_unsupported_suspect(c, KIND_MISSING_ALL_REDUCE, s->comp, at, "%s uses a partial max before it is reduced, "
                               "taken as its blocks' maxima, one per device, and %s uses those in a way not related yet",
                               at->name, in->name);
    }
    else
        lf_unsupported(c, s->comp, in, "%s uses the sums of the blocks before each device's (a per-device slice of a "
                       "term) in a way not related yet", in->name);
    *out = unknown();
    return true;
}
