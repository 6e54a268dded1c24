/* lift_reduce — the ops that sum elements: dot, convolution and reduce
 * (lift.c dispatches to them).
 * Owns the transfer functions of dot (paired dims aligned by re-reading one
 * side, contracting dims sharded alike make a partial sum: lf_lift_dot) and
 * reduce (reduced sharded dims make the result partial; a gathered stack of
 * partial values reduced is the complete value: lf_lift_reduce), and the
 * other reading of a reduce over sharded unit dims — a sum over one element
 * is that element — which an elementwise op over such partial sums takes
 * when it is the only meaningful one (lf_elementwise_unit_partials). */
#include "lift.h"
#include "lift_int.h"

#include <stdlib.h>
#include <string.h>

/* ---- dot ---- */

/* dot: batch and free dims carry their operand's sharding; contracting dims
 * sharded alike on both sides make the result partial(sum) over those axes. */
/* Side `side` of a dot re-read with dim d sharded as `want`, the other side
 * being so: a value constant along d (a broadcast along it, constants and
 * iota not along it, elementwise ops over such: a loss's cotangent
 * broadcast over the local batch and negated) as itself, else by moving a
 * sharded unit dim. */
/* Dim d of side `side`, of local extent 1 and sharded over a prefix A of
 * want's axes (A, X), the axes X free in its view: every device along X
 * holds the same block, so device (a, x) holds block a·|X| + x of
 * jnp.repeat(side, |X|, d) (tp ranks over fewer kv heads: device r's one
 * kv head r / |X| against its query head r). Taken when the baseline
 * repeats |X| copies before a dim of the extent of d's next one. */
static bool dot_side_repeat(lstate *s, uint32_t side, uint32_t d, const view_dim *want) {
    lift_ctx *c = s->c;
    lval *x = &s->ops[side];
    const shape *xs = &s->comp->instrs[s->in->operands[side]].shape;
    uint32_t R = xs->rank;
    const view_dim *have = &x->v.dims[d];
    if (x->kind != LV_TERM || x->v.partial || d + 1 >= R || R + 1 > VIEW_MAX_RANK || xs->dims[d] != 1 ||
        !have->naxes || have->naxes >= want->naxes || memcmp(have->axes, want->axes, have->naxes))
        return false;
    int64_t Q = 1;
    uint32_t used = view_axes_used(&x->v);
    for (uint32_t k = have->naxes; k < want->naxes; k++) {
        if (used >> want->axes[k] & 1) return false;
        Q *= c->mesh->sizes[want->axes[k]];
    }
    int64_t g[VIEW_MAX_RANK], s2[VIEW_MAX_RANK], b2[VIEW_MAX_RANK], g2[VIEW_MAX_RANK];
    lf_global_dims(c, &x->v, xs, g);
    if (!lf_baseline_repeats(c, Q, g[d + 1])) return false;
    for (uint32_t k = 0, q = 0; k < R; k++) {
        b2[k] = q;
        s2[q++] = g[k];
        if (k == d) s2[q++] = Q;
        g2[k] = k == d ? g[k] * Q : g[k];
    }
    int dt = xs->dtype;
    eid y = eg_add(c->g, OP_BROADCAST, lf_list_attr(c, A_DIMENSIONS, b2, R), lf_type_of(c, dt, s2, R + 1), &x->cls, 1,
                   c->origin);
    x->cls = lf_mk_reshape(c, y, lf_type_of(c, dt, g2, R), c->origin);
    x->v.dims[d] = *want;
    return true;
}

static bool dot_side_reread(lstate *s, uint32_t side, uint32_t d, const view_dim *want) {
    if (dot_side_repeat(s, side, d, want)) return true;
    view w = s->ops[side].v;
    w.dims[d] = *want;
    w.partial = 0;
    w.red = 0;
    if (!s->ops[side].v.partial && lf_review_operand(s, side, &w) && lf_same_sharding(&s->ops[side].v, &w)) return true;
    return lf_unit_dim_reread(s, side, d, want);
}

/* Paired dims (batch or contracting) of a dot sharded alike, where re-reading
 * one side makes them so. */
/* Whether two view dims are sharded alike (bytes past naxes mean nothing). */
bool lf_same_dim(const view_dim *a, const view_dim *b) {
    return a->naxes == b->naxes && memcmp(a->axes, b->axes, a->naxes) == 0;
}

static void dot_align(lstate *s, const int64_t *ld, const int64_t *rd, uint32_t n) {
    for (uint32_t k = 0; k < n; k++) {
        view_dim a = s->ops[0].v.dims[ld[k]], b = s->ops[1].v.dims[rd[k]];
        if (lf_same_dim(&a, &b)) continue;
        /* (also a side sharded over a prefix of the other's axes: GQA's
         * repeated kv heads against the query heads) */
        if (b.naxes < a.naxes && !memcmp(a.axes, b.axes, b.naxes)) dot_side_reread(s, 1, (uint32_t)rd[k], &a);
        else if (a.naxes < b.naxes && !memcmp(a.axes, b.axes, a.naxes)) dot_side_reread(s, 0, (uint32_t)ld[k], &b);
    }
}

/* Whether a sum collective over any of `axes` (or a call, loop or branch,
 * not looked into) uses what in computes, in comp. */
static bool sum_reachable(lift_ctx *c, const hlo_comp *comp, const hlo_instr *in, uint32_t axes) {
    uint32_t at = (uint32_t)(in - comp->instrs);
    uint8_t *reach = xcalloc(comp->ninstrs + 1, 1);
    bool found = false;
    reach[at] = 1;
    for (uint32_t j = at + 1; j < comp->ninstrs && !found; j++) {
        const hlo_instr *y = &comp->instrs[j];
        for (uint32_t o = 0; o < y->noperands && !reach[j]; o++) reach[j] = reach[y->operands[o]];
        if (!reach[j]) continue;
        if (y->op == OP_WHILE || y->op == OP_CALL || y->op == OP_CONDITIONAL || y->op == OP_CUSTOM_CALL) found = true;
        if ((y->op == OP_ALL_REDUCE || y->op == OP_REDUCE_SCATTER) && instr_reducer(c->cur, y) == RED_SUM) {
            int g = lift_groups_axes(c, y, false);
            found = g < 0 || ((uint32_t)g & axes);
        }
    }
    free(reach);
    return found;
}

/* Contracting dims sharded on one side only, the other side's dim having no
 * reading with those axes: the sharded side re-read with them on one of its
 * free dims (the nearest, later first), where the one-side sharding is a
 * block of the result's free dim instead (lf_unit_dim_reread). */
static void dot_unshard_contracting(lstate *s, const int64_t *const bd[2], const int64_t *const cd[2], uint32_t nb, uint32_t nc) {
    for (uint32_t k = 0; k < nc; k++)
        for (uint32_t side = 0; side < 2; side++) {
            const view_dim *a = &s->ops[side].v.dims[cd[side][k]], *b = &s->ops[1 - side].v.dims[cd[1 - side][k]];
            if (s->ops[side].kind != LV_TERM || !a->naxes || b->naxes) continue;
            /* A sum over those axes later wants the partial reading (the other
             * side's rows the program's own, unrelated here): left alone. */
            uint32_t mask = 0;
            for (uint32_t q = 0; q < a->naxes; q++) mask |= 1u << a->axes[q];
            if (sum_reachable(s->c, s->comp, s->in, mask)) continue;
            view_dim want = *a;
            uint32_t rank = s->comp->instrs[s->in->operands[side]].shape.rank;
            bool done = false;
            for (uint32_t dist = 1; dist < rank && !done; dist++)
                for (int dir = 1; dir >= -1 && !done; dir -= 2) {
                    int64_t f = cd[side][k] + dir * (int64_t)dist;
                    bool free_dim = f >= 0 && f < (int64_t)rank;
                    for (uint32_t q = 0; q < nb && free_dim; q++) free_dim = bd[side][q] != f;
                    for (uint32_t q = 0; q < nc && free_dim; q++) free_dim = cd[side][q] != f;
                    if (free_dim) done = lf_unit_dim_reread(s, side, (uint32_t)f, &want);
                }
        }
}

/* The term of a two-operand op that sums products (dot, convolution) under
 * view v, partial(sum) over `partial`. */
static lval summed_term(lstate *s, view v, uint8_t partial) {
    const lval *l = &s->ops[0], *r = &s->ops[1];
    v.partial = partial;
    v.red = partial ? RED_SUM : 0;
    int64_t dims[VIEW_MAX_RANK];
    lf_global_dims(s->c, &v, &s->in->shape, dims);
    eid ch[2] = {l->cls, r->cls};
    return term(lf_node(s->c, s->c->cur, s->in, ch, 2, dims, s->c->origin), v, l->assumed || r->assumed);
}

/* Whether dim d of side `side` of a dot is a reshape's merge of a sharded
 * unit dim with longer dims ([b, t, 1, e] -> [b, t, e], the unit dim's axes
 * now on e). */
static bool merged_unit(const lstate *s, uint32_t side, uint32_t d) {
    const hlo_instr *y = &s->comp->instrs[s->in->operands[side]];
    if ((y->op != OP_RESHAPE && y->op != OP_BITCAST) || y->noperands != 1) return false;
    const hlo_instr *src = &s->comp->instrs[y->operands[0]];
    const lval *x = &s->vals[y->operands[0]];
    const int64_t *a = src->shape.dims, *b = y->shape.dims;
    uint32_t ra = src->shape.rank, rb = y->shape.rank, i = 0, j = 0;
    if (x->kind != LV_TERM || x->v.rank != ra || d >= rb) return false;
    while (i < ra || j < rb) {
        uint32_t i2, j2;
        if (!lf_reshape_run(a, ra, b, rb, i, j, &i2, &j2) || (i2 == i && j2 == j)) return false;
        if (d >= j && d < j2) {
            if (j2 != j + 1 || b[d] == 1) return false;
            bool unit = false, longer = false;
            for (uint32_t k = i; k < i2; k++) {
                unit |= a[k] == 1 && x->v.dims[k].naxes;
                longer |= a[k] != 1;
            }
            return unit && longer;
        }
        i = i2, j = j2;
    }
    return false;
}

lval lf_lift_dot(lstate *s) {
    lift_ctx *c = s->c;
    const hlo_instr *in = s->in;
    const lval *l = &s->ops[0], *r = &s->ops[1];
    if (l->kind != LV_TERM || r->kind != LV_TERM) return unknown();
    uint32_t nlb, nlc, nrb, nrc;
    const int64_t *lb = instr_ints(in, A_LHS_BATCH_DIMS, &nlb), *lc = instr_ints(in, A_LHS_CONTRACTING_DIMS, &nlc);
    const int64_t *rb = instr_ints(in, A_RHS_BATCH_DIMS, &nrb), *rc = instr_ints(in, A_RHS_CONTRACTING_DIMS, &nrc);
    if (nlb != nrb || nlc != nrc) return unknown();
    dot_align(s, lb, rb, nlb);
    dot_align(s, lc, rc, nlc);
    dot_unshard_contracting(s, (const int64_t *const[2]){lb, rb}, (const int64_t *const[2]){lc, rc}, nlb, nlc);
    /* Partial sums over disjoint axes, each the same over the other's
     * devices: Σa Σb la·rb = (Σa la)·(Σb rb), partial over both. */
    bool apart = l->v.partial && r->v.partial && l->v.red == RED_SUM && r->v.red == RED_SUM && !(l->v.partial & r->v.partial) &&
                 !(view_axes_used(&l->v) & r->v.partial) && !(view_axes_used(&r->v) & l->v.partial);
    if ((l->v.partial && r->v.partial && !apart) || ((l->v.partial || r->v.partial) && (l->v.red | r->v.red) != RED_SUM)) {
        if (!lf_short_reduction(s, "a dot of two partial values"))
            lf_finding(c, KIND_MISSING_ALL_REDUCE, s->comp, in, "dot of two partial values: at least one all-reduce is missing");
        return unknown();
    }
    view v = view_dup(in->shape.rank);
    uint32_t out = 0;
    uint8_t partial = l->v.partial | r->v.partial;
    /* Contracted sharded dims into which both sides' reshapes merged a
     * sharded unit dim (one head per device squeezed on both sides of q·k):
     * in another reading they are a batch of slices the devices hold, not a
     * sum (lf_lift_reduce's unsure). One side alone (a row-parallel weight's
     * genuinely sharded rows) decides. */
    bool unsure = false;
    for (uint32_t k = 0; k < nlb; k++) {
        if (!lf_same_dim(&l->v.dims[lb[k]], &r->v.dims[rb[k]])) {
            lf_unsupported(c, s->comp, in, "%s: batch dimension %u is sharded differently on its operands", in->name, k);
            return unknown();
        }
        v.dims[out++] = l->v.dims[lb[k]];
    }
    for (uint32_t k = 0; k < nlc; k++) {
        const view_dim *ld = &l->v.dims[lc[k]], *rd = &r->v.dims[rc[k]];
        if (ld->naxes != rd->naxes || memcmp(ld->axes, rd->axes, ld->naxes)) {
            /* Views after reshapes are one reading of the local program; a
             * contraction they disagree on is undecided, not yet a finding. */
            strbuf lw, rw;
            sb_init(&lw);
            sb_init(&rw);
            view_print(&lw, &l->v, c->mesh);
            view_print(&rw, &r->v, c->mesh);
            lf_unsupported(c, s->comp, in, "%s contracts dimension %lld of lhs with dimension %lld of rhs, which are sharded "
                           "differently (lhs %s, rhs %s%s)", in->name, (long long)lc[k], (long long)rc[k], lw.s, rw.s,
                           l->ambiguous || r->ambiguous ? "; one reading of a reshape that moved a sharded unit dim" : "");
            sb_free(&lw);
            sb_free(&rw);
            return unknown();
        }
        for (uint32_t a = 0; a < ld->naxes; a++) partial |= (uint8_t)(1u << ld->axes[a]);
        unsure |= ld->naxes && merged_unit(s, 0, (uint32_t)lc[k]) && merged_unit(s, 1, (uint32_t)rc[k]);
    }
    for (int side = 0; side < 2; side++) {
        const lval *x = side ? r : l;
        const int64_t *bd = side ? rb : lb, *cd = side ? rc : lc;
        uint32_t rank = s->comp->instrs[in->operands[side]].shape.rank;
        for (uint32_t d = 0; d < rank; d++) {
            bool skip = false;
            for (uint32_t k = 0; k < nlb; k++) skip |= bd[k] == d;
            for (uint32_t k = 0; k < nlc; k++) skip |= cd[k] == d;
            if (!skip) v.dims[out++] = x->v.dims[d];
        }
    }
    if (partial & view_sharded_axes(&v)) {
        /* A sum over devices that each hold another block: no view (a
         * pipeline stage's input on one device times the stages' weights). */
        lf_unsupported(c, s->comp, in, "%s would be partial over an axis one of its dimensions is also sharded over: "
                       "not related yet", in->name);
        return unknown();
    }
    lval t = summed_term(s, v, partial);
    t.partial_unsure = unsure && partial != (l->v.partial | r->v.partial);
    return t;
}

/* ---- convolution ---- */

/* The position of role a (and b) in one part of dim_labels (b01f, 01io): -1
 * when absent; spatial dims by digit into sp (their count returned, or -1
 * when the part does not read). */
int lf_conv_roles(const char *p, size_t n, char a, char b, int *pa, int *pb, int *sp) {
    int ns = 0;
    *pa = *pb = -1;
    if (n > VIEW_MAX_RANK) return -1;
    for (int k = 0; k < VIEW_MAX_RANK; k++) sp[k] = -1;
    for (size_t k = 0; k < n; k++) {
        int d = p[k] - '0';
        if (p[k] == a && *pa < 0) *pa = (int)k;
        else if (p[k] == b && *pb < 0) *pb = (int)k;
        else if (p[k] >= '0' && p[k] <= '9' && d < VIEW_MAX_RANK && sp[d] < 0) sp[d] = (int)k, ns++;
        else return -1;  /* unknown, or a role given twice */
    }
    /* the spatial dims are 0 .. ns-1, each once */
    for (int d = 0; d < ns; d++)
        if (sp[d] < 0) return -1;
    return *pa >= 0 && *pb >= 0 ? ns : -1;
}

/* convolution: linear in each operand like a dot whose batch is the lhs
 * batch dim, whose free dims are the rhs output features, and which
 * contracts the lhs features with the rhs input features (over the window:
 * spatial dims are not split). So the lhs batch sharding and the rhs
 * output-feature sharding carry over to the result's batch and feature
 * dims, and input features sharded alike on both sides make it partial(sum)
 * (a weight gradient, which JAX writes with the batch dim labelled as the
 * features). A spatial dim sharded carries over where its windows do not
 * overlap the blocks (patches); elsewhere (halo exchanges) it and feature
 * or batch groups are left unrelated. */
lval lf_lift_convolution(lstate *s) {
    lift_ctx *c = s->c;
    const hlo_instr *in = s->in;
    const lval *l = &s->ops[0], *r = &s->ops[1];
    if (in->noperands != 2 || l->kind != LV_TERM || r->kind != LV_TERM) return unknown();
    const char *lab = instr_str(in, A_DIM_LABELS), *u = lab ? strchr(lab, '_') : NULL, *ar = u ? strstr(u, "->") : NULL;
    int lb, lf, ri, ro, ob, of, ls[VIEW_MAX_RANK], rs[VIEW_MAX_RANK], os[VIEW_MAX_RANK];
    int nl = u ? lf_conv_roles(lab, (size_t)(u - lab), 'b', 'f', &lb, &lf, ls) : -1;
    int nr = ar ? lf_conv_roles(u + 1, (size_t)(ar - u - 1), 'i', 'o', &ri, &ro, rs) : -1;
    int no = ar ? lf_conv_roles(ar + 2, strlen(ar + 2), 'b', 'f', &ob, &of, os) : -1;
    if (nl < 0 || nl != nr || nl != no || (uint32_t)nl + 2 != in->shape.rank || l->v.rank != in->shape.rank ||
        r->v.rank != in->shape.rank || instr_int(in, A_FEATURE_GROUP_COUNT, 1) != 1 || instr_int(in, A_BATCH_GROUP_COUNT, 1) != 1)
        return unknown();
    if (l->v.partial && r->v.partial) {
        if (!lf_short_reduction(s, "a convolution of two partial values"))
            lf_finding(c, KIND_MISSING_ALL_REDUCE, s->comp, in, "convolution of two partial values: at least one all-reduce is missing");
        return unknown();
    }
    if ((l->v.partial | r->v.partial) && (l->v.red | r->v.red) != RED_SUM) return unknown();
    win_attr w;
    bool wread = lf_read_window(in, (uint32_t)nl, &w);
    for (int k = 0; k < nl; k++) {
        if (!l->v.dims[ls[k]].naxes && !r->v.dims[rs[k]].naxes) continue;
        /* patches: a window as wide as its stride, without padding or
         * dilation, each device's rows a whole number of windows: every
         * window lies in one device's rows, whose outputs are its block of
         * the global convolution's (a ViT patch embedding with the image's
         * height sharded) */
        int64_t loc = s->comp->instrs[in->operands[0]].shape.dims[ls[k]];
        if (r->v.dims[rs[k]].naxes || !wread || w.size[k] != w.stride[k] || w.pad[2 * k] || w.pad[2 * k + 1] || w.ld[k] != 1 ||
            w.rd[k] != 1 || loc % w.stride[k]) {
            lf_unsupported(c, s->comp, in, "%s: a spatial dimension is sharded and its windows overlap the blocks (a halo "
                           "exchange); not related yet", in->name);
            return unknown();
        }
    }
    if (r->v.dims[ri].naxes || l->v.dims[lf].naxes) {
        if (!lf_same_dim(&l->v.dims[lf], &r->v.dims[ri])) {
            lf_unsupported(c, s->comp, in, "%s contracts its input features, which are sharded differently on its operands",
                           in->name);
            return unknown();
        }
    }
    view v = view_dup(in->shape.rank);
    v.dims[ob] = l->v.dims[lb];
    v.dims[of] = r->v.dims[ro];
    uint32_t n = v.dims[ob].naxes + v.dims[of].naxes;
    for (int k = 0; k < nl; k++) v.dims[os[k]] = l->v.dims[ls[k]], n += l->v.dims[ls[k]].naxes;
    uint8_t partial = l->v.partial | r->v.partial;
    for (uint32_t a = 0; a < l->v.dims[lf].naxes; a++) partial |= (uint8_t)(1u << l->v.dims[lf].axes[a]);
    if (partial & view_axes_used(&v)) return unknown();
    {
        /* one axis cannot cut two result dims */
        if (n != (uint32_t)__builtin_popcount(view_axes_used(&v))) return unknown();
    }
    return summed_term(s, v, partial);
}

/* ---- reduce ---- */

/* reduce over sharded dims makes the result partial over those axes, with the
 * reducer as reduction; init must be the reducer's identity for that to hold. */

/* Value i of comp is an all-gather along *d over *axes of a value partial
 * over those axes (*x): each device holds the stack of the group's partial
 * values. False when it is not, or the groups do not name mesh axes. */
bool lf_gathered_partials(lstate *s, uint32_t i, int *axes, uint32_t *d, const lval **x) {
    const hlo_instr *g = &s->comp->instrs[i];
    if (g->op != OP_ALL_GATHER || g->noperands != 1) return false;
    const lval *y = &s->vals[g->operands[0]];
    uint32_t nd;
    const int64_t *dd = instr_ints(g, A_DIMENSIONS, &nd);
    if (y->kind != LV_TERM || !y->v.partial || nd != 1 || dd[0] < 0 || (uint64_t)dd[0] >= y->v.rank) return false;
    if (y->v.dims[dd[0]].naxes) {
        /* a local unit dim (expand_dims before the gather) read as carrying
         * the next dim's sharding: that reading's other form */
        lval *m = arena_alloc(s->c->a, sizeof *m);
        if (!lf_unit_move_next(s->c, y, &s->comp->instrs[g->operands[0]].shape, (uint32_t)dd[0], m)) return false;
        y = m;
    }
    int a = lift_groups_axes(s->c, g, true);
    if (a <= 0 || (y->v.partial & (uint32_t)a) != (uint32_t)a) return false;
    *axes = a;
    *d = (uint32_t)dd[0];
    *x = y;
    return true;
}

/* Whether every use of all-gather value i (gathered_partials, along d,
 * partial with reducer red) is a reduce over d with red: the stack reduced,
 * which is the complete value reduced (lf_lift_reduce); positions (arg) may
 * also be taken along d (lf_stack_pick says whether at the right place). */
bool lf_stack_only_reduced(const hlo_comp *comp, const hlo_module *m, uint32_t i, uint32_t d, int red) {
    bool used = false;
    for (uint32_t j = i + 1; j < comp->ninstrs; j++) {
        const hlo_instr *y = &comp->instrs[j];
        for (uint32_t o = 0; o < y->noperands; o++) {
            if (y->operands[o] != i) continue;
            used = true;
            uint32_t nd;
            const int64_t *rd = y->op == OP_REDUCE ? instr_ints(y, A_DIMENSIONS, &nd) : NULL;
            bool over = false;
            for (uint32_t k = 0; rd && k < nd; k++) over |= rd[k] == (int64_t)d;
            /* or one element of a selecting reduce's stacked pairs */
            bool pair = y->op == OP_REDUCE && y->noperands == 4 && lf_select_red(m, y, o) == red;
            /* or positions taken along d (at a selection among the stack of
             * the same rows' partial maxima: lf_stack_pick) */
            if (red == RED_ARG && o == 0 && lf_takes_along(y, d, comp->instrs[i].shape.rank)) continue;
            if (!over || (!pair && (o != 0 || y->noperands != 2 || instr_reducer(m, y) != red))) return false;
        }
    }
    return used && comp->root != i;
}

lval lf_lift_reduce(lstate *s) {
    lift_ctx *c = s->c;
    const hlo_instr *in = s->in;
    if (in->noperands > 2) return lf_lift_reduce_tuple(s);
    /* an integer init (a token count from 0); a device value the same on
     * every device (a bounds check of constant indices) is a constant too */
    for (uint32_t o = 0; o < in->noperands && in->noperands == 2; o++) lf_uniform_dev_as_term(s, o);
    lval row;
    if (lf_row_reduce(s, &row)) return row;
    int red = lf_reducer(c->cur, in);
    /* The stack of a group's partial values (an all-gather of them) reduced
     * over the gathered dim with their reducer: the reduction of the complete
     * value, on every device of the group (the stack's blocks are the pieces
     * the reducer combines). */
    int gaxes = 0;
    uint32_t gd;
    const lval *gx;
    uint32_t nrd;
    const int64_t *rdims = instr_ints(in, A_DIMENSIONS, &nrd);
    bool over = false;
    if (in->noperands == 2 && lf_gathered_partials(s, in->operands[0], &gaxes, &gd, &gx))
        for (uint32_t q = 0; q < nrd; q++) over |= rdims[q] == (int64_t)gd;
    /* (the stack may have a term of its own, for other uses: lift_coll.c
     * gather_pieces; this use reads it as the pieces of the complete value) */
    if (over && gx->v.red == red && !(s->ops[0].kind == LV_TERM && s->ops[0].v.partial)) {
        /* the stacked values' factor is the reduction's (a sum is linear, a
         * max or min commutes with a positive factor) */
        double k = lf_scale_of(gx);
        if (k != 1 && red != RED_SUM && !(k > 0 && (red == RED_MAX || red == RED_MIN))) return unknown();
        s->ops[0] = *gx;
        s->ops[0].scale = 0;
        lval r = lf_lift_reduce(s);
        if (r.kind == LV_TERM && (r.v.partial & (uint32_t)gaxes) == (uint32_t)gaxes) {
            r.v.partial &= (uint8_t)~gaxes;
            if (!r.v.partial) r.v.red = 0;
            r.scale = k == 1 ? 0 : k;
            r.factor_at = gx->factor_at;
            return r;
        }
        return unknown();
    }
    if (in->noperands != 2 || s->ops[0].kind != LV_TERM || s->ops[1].kind != LV_TERM) return unknown();
    const lval *x = &s->ops[0], *init = &s->ops[1];
    if (!red) return unknown();
    /* every reducer is associative and commutative: reducing shares of a
     * partial reduction with its own reducer is the partial reduction of
     * the reduced (xor of xors, product of products) */
    if (x->v.partial && x->v.red != red) {
        lf_finding(c, KIND_MISSING_ALL_REDUCE, s->comp, in, "reduce-%s of a value that is still partial (%s) over a mesh axis",
                reducer_name(red), reducer_name(x->v.red));
        return unknown();
    }
    uint32_t nd;
    const int64_t *rd = instr_ints(in, A_DIMENSIONS, &nd);
    const hlo_instr *src = &s->comp->instrs[in->operands[0]];
    view v = view_dup(in->shape.rank);
    uint8_t partial = x->v.partial;
    uint32_t out = 0;
    bool unsure = false;  /* a reduced sharded unit dim of an ambiguous reading */
    for (uint32_t d = 0; d < src->shape.rank; d++) {
        bool reduced = false;
        for (uint32_t k = 0; k < nd; k++) reduced |= rd[k] == d;
        if (!reduced) {
            v.dims[out++] = x->v.dims[d];
            continue;
        }
        for (uint32_t a = 0; a < x->v.dims[d].naxes; a++) partial |= (uint8_t)(1u << x->v.dims[d].axes[a]);
        unsure |= x->ambiguous && x->v.dims[d].naxes && src->shape.dims[d] == 1;
        /* each device's block reduced where the baseline reduces the same
         * blocks one by one (ghost batch norm: per-group statistics) may be
         * meant per device, not as a share of the whole */
        unsure |= !c->baseline_mode && x->v.dims[d].naxes &&
                  lf_baseline_cuts(c, src->shape.dims[d] * view_dim_parts(&x->v, c->mesh, d), src->shape.dims[d]);
    }
    if (partial != x->v.partial && init->v.partial) return unknown();
    v.partial = partial;
    v.red = partial ? (uint8_t)red : 0;
    int64_t dims[VIEW_MAX_RANK];
    lf_global_dims(c, &v, &in->shape, dims);
    eid ch[2] = {x->cls, init->cls};
    lval r = term(lf_node(c, c->cur, in, ch, 2, dims, c->origin), v, x->assumed || init->assumed);
    r.partial_unsure = unsure || (x->partial_unsure && x->v.partial);
    /* A sum over a sharded dim along which at most one element is non-zero
     * (a one-hot pick), of values never negative: one device's share holds
     * the element, the others' are zeros, so their max is the sum too. */
    r.shares_apart = red == RED_SUM && partial && !x->v.partial && nd == 1 && dtype_is_float(in->shape.dtype) &&
                     lf_onehot_summand(c, x->cls, (uint32_t)rd[0]) && lf_nonneg(c->cur, s->comp, in->operands[0]);
    return r;
}

/* ---- the other reading of a reduce over unit dims ---- */

/* The other reading of reduce r (value i of comp), whose partial axes all
 * come from reduced dims of local size 1 (a head per device, summed over
 * alone): a sum over one element is that element, so the local result is
 * the reduction over the other dims only, with those unit dims dropped by a
 * reshape. Each dropped dim's axes then bind the major factor of the next
 * dim kept (block sharding of the merged dim), and the term is the global
 * reduction over the other dims reshaped: never partial. False when the
 * init is not the reducer's identity, the operand is partial, or a dropped
 * dim has no kept dim after it. */
static bool reduce_unit_reading(lift_ctx *c, const hlo_comp *comp, uint32_t i, const lval *vals, lval *out) {
    const hlo_instr *r = &comp->instrs[i];
    if (r->op != OP_REDUCE || r->noperands != 2) return false;
    const lval *x = &vals[r->operands[0]], *init = &vals[r->operands[1]];
    const shape *xs = &comp->instrs[r->operands[0]].shape;
    /* A factor on the operand is one on the sum (a sum is linear). */
    if (x->kind != LV_TERM || init->kind != LV_TERM || x->v.partial || init->v.partial || lf_scale_of(init) != 1 ||
        (lf_scale_of(x) != 1 && instr_reducer(c->cur, r) != RED_SUM) || xs->rank > VIEW_MAX_RANK ||
        !lf_reducer_identity(c, c->cur, r, init->cls))
        return false;
    uint32_t nd;
    const int64_t *rd = instr_ints(r, A_DIMENSIONS, &nd);
    int64_t other[VIEW_MAX_RANK], gd1[VIEW_MAX_RANK];
    uint32_t nother = 0, r1 = 0;
    bool dropped[VIEW_MAX_RANK] = {false}, any = false;
    view w1 = view_dup(0);
    for (uint32_t d = 0; d < xs->rank; d++) {
        bool reduced = false;
        for (uint32_t k = 0; k < nd; k++) reduced |= rd[k] == d;
        if (reduced && !x->v.dims[d].naxes) {
            other[nother++] = d;
            continue;
        }
        if (reduced && xs->dims[d] != 1) return false;
        dropped[r1] = reduced;
        any |= reduced;
        w1.dims[r1] = x->v.dims[d];
        gd1[r1++] = xs->dims[d] * view_dim_parts(&x->v, c->mesh, d);
    }
    w1.rank = r1;
    if (!any) return false;
    eid t1 = x->cls;
    if (nother) {
        /* the same reduce over the other dims only */
        hlo_instr ri = *r;
        hlo_attr *attrs = arena_alloc(c->a, (r->nattrs + 1) * sizeof *attrs);
        if (r->nattrs) memcpy(attrs, r->attrs, r->nattrs * sizeof *attrs);
        for (uint32_t k = 0; k < r->nattrs; k++)
            if (attrs[k].key == A_DIMENSIONS) attrs[k].v.ints = arena_memdup(c->a, other, nother * sizeof *other), attrs[k].n = nother;
        ri.attrs = attrs;
        ri.shape.rank = r1;
        ri.shape.dims = arena_alloc(c->a, (r1 + 1) * sizeof *ri.shape.dims);
        for (uint32_t k = 0; k < r1; k++) ri.shape.dims[k] = gd1[k] / view_dim_parts(&w1, c->mesh, k);
        eid ch[2] = {x->cls, init->cls};
        t1 = lf_node(c, c->cur, &ri, ch, 2, gd1, c->origin);
    }
    view v = view_dup(r->shape.rank);
    view_dim pending = {0};
    uint32_t q = 0;
    for (uint32_t k = 0; k < r1; k++) {
        if (dropped[k]) {
            if (pending.naxes + w1.dims[k].naxes > MESH_MAX_AXES) return false;
            for (uint32_t a = 0; a < w1.dims[k].naxes; a++) pending.axes[pending.naxes++] = w1.dims[k].axes[a];
            continue;
        }
        if (q >= r->shape.rank || pending.naxes + w1.dims[k].naxes > MESH_MAX_AXES) return false;
        v.dims[q] = pending;
        for (uint32_t a = 0; a < w1.dims[k].naxes; a++) v.dims[q].axes[v.dims[q].naxes++] = w1.dims[k].axes[a];
        pending.naxes = 0;
        q++;
    }
    if (pending.naxes || q != r->shape.rank) return false;
    int64_t gd[VIEW_MAX_RANK];
    lf_global_dims(c, &v, &r->shape, gd);
    *out = term(lf_mk_reshape(c, t1, lf_type_of(c, r->shape.dtype, gd, r->shape.rank), c->origin), v, x->assumed || init->assumed);
    out->ambiguous = true;
    out->scale = x->scale;
    return true;
}

/* Operand o of s re-read through the layout ops (reshape, bitcast,
 * broadcast, transpose) since a reduce whose partial sum has the other
 * reading (reduce_unit_reading), those ops lifted again on it. Nothing a
 * transfer function says on the way counts: a reading they cannot carry is
 * no reading. Returns whether ops[o] was replaced. */
static bool unit_partial_reread(lstate *s, uint32_t o) {
    lift_ctx *c = s->c;
    const hlo_comp *comp = s->comp;
    uint32_t chain[8], at[8], n = 0, i = s->in->operands[o];
    for (;;) {
        const hlo_instr *y = &comp->instrs[i];
        const lval *yv = &s->vals[i];
        if (yv->kind != LV_TERM || !yv->v.partial) return false;
        if (y->op == OP_REDUCE) break;
        if (n == ARRAY_LEN(chain)) return false;
        /* An elementwise op (a scaling by a replicated constant) with one
         * partial operand, the chain's, and the others complete. */
        uint32_t k = 0;
        if (graph_op_elementwise(y->op) && y->noperands <= 3) {
            uint32_t np = 0;
            for (uint32_t q = 0; q < y->noperands; q++) {
                const lval *z = &s->vals[y->operands[q]];
                if (z->kind != LV_TERM) return false;
                if (z->v.partial) np++, k = q;
            }
            if (np != 1) return false;
        } else if ((y->op != OP_RESHAPE && y->op != OP_BITCAST && y->op != OP_BROADCAST && y->op != OP_TRANSPOSE) ||
                   y->noperands != 1) {
            return false;
        }
        at[n] = k;
        chain[n++] = i;
        i = y->operands[k];
    }
    lval cur;
    if (!reduce_unit_reading(c, comp, i, s->vals, &cur)) return false;
    lf_loop_mark m = lf_loop_mark_take(c);
    while (n) {
        const hlo_instr *y = &comp->instrs[chain[--n]];
        lval ops[3];
        for (uint32_t q = 0; q < y->noperands && q < 3; q++) ops[q] = q == at[n] ? cur : s->vals[y->operands[q]];
        lstate s2 = {c, comp, y, ops, s->vals, NULL};
        if (!lf_scale_take(&s2, &cur)) {
            double f = lf_scale_plan(&s2);
            cur = lf_lift_instr(&s2);
            lf_scale_apply(&s2, &cur, f);
        }
        if (cur.kind != LV_TERM || cur.assumed || cur.v.partial || c->nunsupported != m.nunsupported ||
            c->nfindings != m.nfindings || c->assumed != m.assumed) {
            lf_loop_mark_undo(c, &m);
            return false;
        }
    }
    /* The op's factors were planned on the operand as it was: this reading
     * carries the same factor and takes the same treatment. */
    if (!lf_scale_like(c, &s->vals[s->in->operands[o]], &s->ops[o], &cur)) {
        lf_loop_mark_undo(c, &m);
        return false;
    }
    cur.ambiguous = true;
    s->ops[o] = cur;
    return true;
}

/* A partial operand beside operands sharded over its partial axes, none of
 * them partial: a sum collective would make it complete, and elementwise
 * with the others it is only meaningful in its other reading, if it has
 * one whose sharding is theirs (unit_partial_reread). */
void lf_elementwise_unit_partials(lstate *s) {
    const hlo_instr *in = s->in;
    /* Partial sums combined by an op that is not a sum (g·g, Adam's second
     * moment): meaningful only in their other readings, when they all have
     * one and those agree. */
    uint32_t npart = 0, nterm = 0;
    for (uint32_t o = 0; o < in->noperands; o++) {
        nterm += s->ops[o].kind == LV_TERM;
        npart += s->ops[o].kind == LV_TERM && s->ops[o].v.partial;
    }
    if (npart >= 2 && npart == nterm && in->op != OP_ADD && in->op != OP_SUBTRACT && in->noperands <= 8) {
        lval saved[8];
        memcpy(saved, s->ops, in->noperands * sizeof *saved);
        bool ok = true;
        const view *first = NULL;
        for (uint32_t o = 0; o < in->noperands && ok; o++) {
            if (s->ops[o].kind != LV_TERM) continue;
            ok = unit_partial_reread(s, o) && (!first || lf_same_sharding(first, &s->ops[o].v));
            if (!first) first = &s->ops[o].v;
        }
        if (!ok) memcpy(s->ops, saved, in->noperands * sizeof *saved);
        return;
    }
    for (uint32_t o = 0; o < in->noperands; o++) {
        lval *x = &s->ops[o];
        if (x->kind != LV_TERM || !x->v.partial) continue;
        int peer = -1;
        bool clean = true;
        for (uint32_t p = 0; p < in->noperands; p++) {
            const lval *y = &s->ops[p];
            if (p == o || y->kind != LV_TERM) continue;
            clean &= !y->v.partial;
            if (peer < 0 && y->v.rank == x->v.rank && (view_axes_used(&y->v) & x->v.partial) == x->v.partial) peer = (int)p;
        }
        if (!clean || peer < 0) continue;
        lval saved = *x;
        if (unit_partial_reread(s, o) && !lf_same_sharding(&x->v, &s->ops[peer].v)) *x = saved;
    }
}
