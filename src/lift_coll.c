/* lift_coll — collectives that sum or gather, and the partial sums they
 * meet (lift.c dispatches to them).
 * Owns the transfer functions of all-reduce, all-gather and reduce-scatter
 * (lf_lift_all_reduce, lf_lift_all_gather, lf_lift_reduce_scatter) and the
 * readings of values as partial sums around them: copies summed over a group
 * as a factor (held_as_partial), a select that picks a value on some devices
 * (lf_picked_on_some_devices), a value added to a partial sum before it is
 * summed (lf_copies_into_partial_sums, lf_summed_later), and the sum
 * collective that left a value partial (lf_track_short, blamed by
 * lf_short_reduction). All-to-all is lift_layout.c's. */
#include "lift.h"
#include "lift_int.h"

#include "interp.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "segrun.h"

/* ---- partial sums ---- */

/* x, complete over `axes` (neither partial nor sharded over them), read as
 * a partial sum over them: the n devices of a group each hold x, and the sum
 * of those copies is n·x, so the same term partial with its factor times n
 * (a replicated b/n is a partial sum of b). */
static void held_as_partial(lval *x, uint32_t axes, int64_t k, const hlo_instr *at) {
    x->v.partial |= (uint8_t)axes;
    x->v.red = RED_SUM;
    x->scale = lf_scale_of(x) * (double)k;
    if (x->scale == 1) x->scale = 0;
    else x->factor_at = at;
}

/* The one finite number every element of constant class x holds, into *k. */
static bool splat_class(lift_ctx *c, eid x, double *k) { return lf_class_splat_value(c, x, k) && isfinite(*k); }

static void copies_as_partial(lift_ctx *c, lval *x, uint32_t axes, const hlo_instr *at, bool as_splat) {
    int64_t n = 1;
    for (uint32_t a = 0; a < c->mesh->naxes; a++)
        if (axes >> a & 1) n *= c->mesh->sizes[a];
    /* A constant k on every device that sums and scalings carry to the psum
     * (a log-likelihood's -k_local/2·log 2π, distrax's -k of the local
     * event size): partial copies whose sum is the constant n·k, which a
     * baseline writes as such. */
    double k;
    if (as_splat && x->kind == LV_TERM && lf_scale_of(x) == 1 && !x->v.partial && x->cls != EID_NONE &&
        dtype_is_float(eg_type_dtype(c->g, eg_class_type(c->g, x->cls))) && splat_class(c, x->cls, &k)) {
        x->cls = lf_splat(c, eg_class_type(c->g, x->cls), k * (double)n);
        x->respread = true;
        x->v.partial |= (uint8_t)axes;
        x->v.red = RED_SUM;
        x->factor_at = at;
        return;
    }
    held_as_partial(x, axes, n, at);
}

/* The index of device d's group when the axes in `mask` are ignored (its
 * coordinates along the other axes, mixed radix). */
static int64_t group_of(const mesh *m, int64_t d, uint32_t mask) {
    int64_t g = 0;
    for (uint32_t a = 0; a < m->naxes; a++)
        if (!(mask >> a & 1)) g = g * m->sizes[a] + mesh_coord(m, d, (int)a);
    return g;
}

/* x on the devices where picked[d], zeros elsewhere, x complete over the
 * axes the choice varies along: on the k devices of every group along those
 * axes where x is picked, x — a partial sum of k·x (at: the op that chose).
 * False when the choice does not vary, or not the same number of devices
 * picks x in every group. */
bool lf_picked_partial(lift_ctx *c, const uint8_t *picked, const lval *x, const hlo_instr *at, lval *out) {
    if (x->kind != LV_TERM || x->v.partial || x->assumed || x->cls == EID_NONE) return false;
    const mesh *m = c->mesh;
    int64_t nd = c->ndev;
    bool ok = true;
    /* the axes along which the choice varies */
    uint32_t vary = 0;
    int64_t *seen = xmalloc((size_t)nd * sizeof *seen);
    for (uint32_t a = 0; a < m->naxes; a++) {
        for (int64_t g = 0; g < nd; g++) seen[g] = -1;
        for (int64_t d = 0; d < nd; d++) {
            int64_t g = group_of(m, d, 1u << a);
            if (seen[g] < 0) seen[g] = picked[d];
            else if (seen[g] != picked[d]) vary |= 1u << a;
        }
    }
    /* devices picked per group along those axes: the same count everywhere */
    int64_t k = -1;
    if (vary && !(vary & view_axes_used(&x->v))) {
        for (int64_t g = 0; g < nd; g++) seen[g] = 0;
        for (int64_t d = 0; d < nd; d++) seen[group_of(m, d, vary)] += picked[d];
        for (int64_t d = 0; d < nd && ok; d++) {
            int64_t n = seen[group_of(m, d, vary)];
            ok = k < 0 || n == k;
            k = n;
        }
    }
    free(seen);
    if (!ok || !vary || k <= 0 || (vary & view_axes_used(&x->v))) return false;
    *out = *x;
    held_as_partial(out, vary, k, at);
    return true;
}

/* Whether device value p holds one truth value on each device (nonzero or
 * zero at every element; with zero_one, every element 0 or 1): the devices
 * where it is true (or false, with negate) into picked. */
static bool device_choice(const lift_ctx *c, const lval *p, bool zero_one, bool negate, uint8_t *picked) {
    if (p->kind != LV_DEV || !p->dev || !p->count) return false;
    for (int64_t d = 0; d < c->ndev; d++) {
        const double *v = &p->dev[d * p->count];
        for (uint32_t k = 0; k < p->count; k++)
            if ((zero_one && v[k] != 0 && v[k] != 1) || (v[k] != 0) != (v[0] != 0)) return false;
        picked[d] = (v[0] != 0) != negate;
    }
    return true;
}

/* select(p, x, 0) or select(p, 0, x) with p a device-dependent predicate
 * that is all true or all false on each device (jnp.where(axis_index(tp)
 * == 0, b, 0): a bias added once before the psum), or x times such a 0/1
 * indicator (b * (axis_index(tp) == 0), the select it equals for finite
 * x): lf_picked_partial. False when the op is not of that form. */
bool lf_picked_on_some_devices(lstate *s, lval *out) {
    lift_ctx *c = s->c;
    const hlo_instr *in = s->in;
    uint8_t *picked = xmalloc((size_t)c->ndev);
    bool ok = false;
    if (in->op == OP_MULTIPLY && in->noperands == 2 && dtype_is_float(in->shape.dtype)) {
        for (uint32_t o = 0; o < 2 && !ok; o++)
            ok = s->ops[1 - o].kind == LV_TERM && !s->ops[1 - o].v.partial && device_choice(c, &s->ops[o], true, false, picked) &&
                 lf_picked_partial(c, picked, &s->ops[1 - o], in, out);
        if (ok) lf_assume(c, "values multiplied by a device's 0/1 indicator are finite (0 times them is 0)");
    } else if (in->op == OP_SELECT && in->noperands == 3) {
        int xo = 0;
        for (uint32_t o = 1; o < 3; o++)
            if (s->ops[o].kind == LV_TERM && lf_class_is_zero(c, s->ops[o].cls) && !s->ops[o].v.partial) xo = 3 - (int)o;
        ok = xo && device_choice(c, &s->ops[0], false, xo == 2, picked) && lf_picked_partial(c, picked, &s->ops[xo], in, out);
        /* zeros the program does not write (a loop carry's first value: a
         * pipeline stage's input before anything arrived) make the reading
         * true of these values, not the program's intent: it decides no
         * finding */
        if (ok && !instr_is_zero_literal(s->comp, &s->comp->instrs[in->operands[3 - xo]])) out->partial_unsure = true;
    }
    free(picked);
    return ok;
}

/* The sum all-reduce over (at least) the axes `partial` that in's value
 * reaches through layout ops and copies in comp (with arith, also through
 * sums and products with constants), or NULL. */
const hlo_instr *lf_summed_later(lift_ctx *c, const hlo_comp *comp, const hlo_instr *in, uint8_t partial, bool arith) {
    uint32_t at = (uint32_t)(in - comp->instrs);
    uint8_t *tracked = xcalloc(comp->ninstrs + 1, 1);
    const hlo_instr *found = NULL;
    tracked[at] = 1;
    for (uint32_t j = at + 1; j < comp->ninstrs && !found; j++) {
        const hlo_instr *y = &comp->instrs[j];
        bool uses = false;
        for (uint32_t o = 0; o < y->noperands; o++) uses |= tracked[y->operands[o]];
        if (!uses) continue;
        if (y->op == OP_ALL_REDUCE && instr_reducer(c->cur, y) == RED_SUM) {
            int axes = lift_groups_axes(c, y, false);
            if (axes > 0 && ((uint32_t)axes & partial) == partial) found = y;
        } else if (y->op == OP_RESHAPE || y->op == OP_TRANSPOSE || y->op == OP_BITCAST || y->op == OP_COPY) {
            tracked[j] = 1;
        } else if (arith && (y->op == OP_ADD || y->op == OP_SUBTRACT || y->op == OP_NEGATE ||
                   (y->op == OP_CONVERT && dtype_is_float(y->shape.dtype)) ||
                   ((y->op == OP_MULTIPLY || y->op == OP_DIVIDE) && y->noperands == 2 && tracked[y->operands[0]] &&
                    instr_is_constant(comp, y->operands[1])) ||
                   (y->op == OP_MULTIPLY && y->noperands == 2 && instr_is_constant(comp, y->operands[0])))) {
            /* sums, and products with constants: ops a sum over the devices
             * distributes over (distrax's KL adds -k per device, halves, adds,
             * then psums) */
            tracked[j] = 1;
        }
    }
    free(tracked);
    return found;
}

/* An add or subtract of partial sums over axes A and values complete over A
 * that carry a factor (a bias b/n added on every device before the sum):
 * those values read as partial sums of their n copies (copies_as_partial),
 * so that the factors say what the sum over the devices makes of them. So
 * does a partial sum over only some of the axes A, the same on the devices
 * of the others (a data term partial over dp plus a weight term partial
 * over tp, each divided by the other axis' size, then one psum over both).
 *
 * A value without a factor added so, where a sum over A follows, is counted
 * once per device (the bias before the all-reduce): it too reads as n·b, so
 * that a program which takes (n-1)·b back later still meets the baseline,
 * and the finding waits (c->pending) until the outputs are known to differ.
 * Where no sum follows, the transfer function names the missing one; zeros
 * stay as they are. */
void lf_copies_into_partial_sums(lstate *s) {
    const hlo_instr *in = s->in;
    if ((in->op != OP_ADD && in->op != OP_SUBTRACT) || in->noperands != 2 || !dtype_is_float(in->shape.dtype)) return;
    uint32_t partial = 0;
    for (uint32_t o = 0; o < in->noperands; o++) {
        const lval *x = &s->ops[o];
        if (x->kind != LV_TERM || (x->v.partial && x->v.red != RED_SUM)) return;
        partial |= x->v.partial;
    }
    if (!partial) return;
    for (uint32_t o = 0; o < in->noperands; o++)
        if (s->ops[o].v.partial && (view_axes_used(&s->ops[o].v) & partial & ~(uint32_t)s->ops[o].v.partial)) return;
    const hlo_instr *later = NULL;
    bool as_splat = false;  /* a constant summed through arithmetic: its n·k */
    lval was[2]; /* the operands as they came, for the words */
    memcpy(was, s->ops, sizeof was);
    for (uint32_t o = 0; o < in->noperands; o++) {
        lval *x = &s->ops[o];
        uint32_t extra = partial & ~(uint32_t)x->v.partial;
        if (!extra || (!x->v.partial && (view_axes_used(&x->v) & partial)) || lf_class_is_zero(s->c, x->cls)) continue;
        if (lf_scale_of(x) == 1) {
            /* a constant (a log-likelihood's per-device -k) may go through
             * sums and scalings before the psum: as copies, its n·k */
            double k;
            if (!later) later = lf_summed_later(s->c, s->comp, in, (uint8_t)partial, false);
            if (!later && x->cls != EID_NONE && splat_class(s->c, x->cls, &k))
                later = lf_summed_later(s->c, s->comp, in, (uint8_t)partial, true), as_splat = later != NULL;
            if (!later) continue;
            strbuf why;
            sb_init(&why);
            lf_describe_operands(&why, s->c, was, in->noperands);
            lf_pending(s->c, KIND_WRONG_REDUCTION, s->comp, in, "%s adds a value that is not partial%s to a partial sum (%s) "
                       "that %s then sums over the devices: it is counted once per device", in->opname,
                       x->v.partial ? " over every axis" : "", why.s, later->name);
            sb_free(&why);
        }
        copies_as_partial(s->c, x, extra, in, as_splat);
    }
}

/* A partial operand that a sum collective left partial (its replica groups
 * span only part of the axes the value is partial over): the finding belongs
 * to that collective, whose groups are wrong, rather than to the op that
 * needs the value complete. Returns whether it was reported. */
bool lf_short_reduction(lstate *s, const char *why) {
    for (uint32_t o = 0; o < s->in->noperands; o++) {
        const lval *x = &s->ops[o];
        if (!x->short_at || !x->v.partial) continue;
        strbuf ax;
        sb_init(&ax);
        lf_axes_words(&ax, s->c, x->v.partial);
        if (s->c->in_loop_cond) /* each group may stop on its own: see lift.c, the same in a loop condition */
            lf_unsupported_suspect(s->c, KIND_WRONG_COLLECTIVE_GROUP, x->short_comp, x->short_at,
                                   "%s sums over too few devices for %s, which decides when the loop stops: each group "
                                   "of devices over %s may stop on its own, which is the baseline's result only when the "
                                   "iterations past a group's stop change nothing; not related yet", x->short_at->name,
                                   s->in->name, ax.s);
        else
            lf_finding(s->c, KIND_WRONG_COLLECTIVE_GROUP, x->short_comp, x->short_at,
                       "%s sums over too few devices: the value stays partial over %s, and %s needs it complete (%s)",
                       x->short_at->name, ax.s, s->in->name, why);
        sb_free(&ax);
        return true;
    }
    return false;
}

/* Notes, after v was lifted, which sum collective left it partial. */
void lf_track_short(lstate *s, lval *v) {
    const hlo_instr *in = s->in;
    if (v->kind != LV_TERM || !v->v.partial) return;
    if ((in->op == OP_ALL_REDUCE || in->op == OP_REDUCE_SCATTER) && instr_reducer(s->c->cur, in) == RED_SUM &&
        in->noperands >= 1 && s->ops[0].kind == LV_TERM && s->ops[0].v.partial != v->v.partial) {
        v->short_at = in;
        v->short_comp = s->comp;
        return;
    }
    for (uint32_t o = 0; o < in->noperands; o++)
        if (s->ops[o].short_at && s->ops[o].v.partial == v->v.partial) {
            v->short_at = s->ops[o].short_at;
            v->short_comp = s->ops[o].short_comp;
            return;
        }
}

/* ---- all-reduce, all-gather, reduce-scatter ---- */

eid lf_sum_reduce_term(lstate *s, eid x, const int64_t *dd, uint32_t nd, const shape *rs, const int64_t *gdims,
                       const hlo_attr *ta) {
    lift_ctx *c = s->c;
    hlo_instr ri = *s->in;
    hlo_attr attrs[2] = {{.key = A_DIMENSIONS, .kind = K_INTS, .n = nd, .v.ints = arena_memdup(c->a, dd, nd * sizeof *dd)}, *ta};
    if (attrs[1].key < attrs[0].key) {
        hlo_attr t = attrs[0];
        attrs[0] = attrs[1];
        attrs[1] = t;
    }
    ri.op = OP_REDUCE;
    ri.attrs = arena_memdup(c->a, attrs, sizeof attrs);
    ri.nattrs = 2;
    ri.shape = *rs;
    int red = instr_reducer(c->cur, s->in);
    if (red != RED_SUM && (red != RED_MAX && red != RED_MIN ? true : !dtype_is_float(rs->dtype))) return EID_NONE;
    interp_val *z = interp_val_new(rs->dtype, 0, NULL);
    if (!z) return EID_NONE;
    if (red != RED_SUM) interp_val_set(z, 0, red == RED_MAX ? -INFINITY : INFINITY);
    eid ch[2] = {x, lf_const_term(c, z, c->origin)};
    return lf_node(c, c->cur, &ri, ch, 2, gdims, c->origin);
}

/* The operand x of collective s (a sum, or a max or min of floats), dim d of
 * local size > 1 sharded over axes that include all of `sharded` (the axes
 * the groups span that x is not partial over), no other dim sharded over
 * them: each device of a group holds one block, and the group reduces the
 * blocks. Re-read as the partial value (over those axes, with the
 * collective's reducer) of the global value split at d into its blocks and
 * reduced over the blocks the groups span: when they span all of dim d's
 * axes, split into (blocks, block) and dim d, of the block's size, no longer
 * sharded; when only some (groups over sub-axes of a refined mesh, a sum in
 * steps), split into one dim per axis, reduced over the summed ones and
 * merged back, dim d still sharded over the others. The blocks are in any
 * order (a sum, a max or a min does not care). A pmax over the axis that
 * shards the data is a blockwise max, not a mistake by itself: what the
 * baseline computes says whether it was meant. */
static void blocks_as_partial(lstate *s, uint32_t d, uint32_t sharded, const hlo_attr *ta) {
    lift_ctx *c = s->c;
    const hlo_instr *in = s->in;
    lval *x = &s->ops[0];
    const shape *ls = &s->comp->instrs[in->operands[0]].shape;
    const view_dim *vd = &x->v.dims[d];
    uint32_t mine = 0;
    for (uint32_t a = 0; a < vd->naxes; a++) mine |= 1u << vd->axes[a];
    for (uint32_t e = 0; e < ls->rank; e++)
        for (uint32_t a = 0; a < x->v.dims[e].naxes && e != d; a++)
            if (sharded >> x->v.dims[e].axes[a] & 1) return;
    bool all = mine == sharded;
    uint32_t nsplit = all ? 1 : vd->naxes;
    if ((mine & sharded) != sharded || ls->rank + nsplit > VIEW_MAX_RANK || in->shape.dtype != ls->dtype) return;
    int64_t gd[VIEW_MAX_RANK], sd[VIEW_MAX_RANK + 1], rd[VIEW_MAX_RANK + 1], red_dims[VIEW_MAX_RANK], md[VIEW_MAX_RANK];
    lf_global_dims(c, &x->v, ls, gd);
    int64_t n = view_dim_parts(&x->v, c->mesh, d), kept = 1;
    if (n < 2 || gd[d] != n * ls->dims[d]) return;
    /* split: dims before d, the block dims (one, or one per axis), the block, the rest */
    uint32_t k = 0, nr = 0, nred = 0;
    view_dim rest = {0};
    for (uint32_t e = 0; e < ls->rank; e++) {
        if (e == d)
            for (uint32_t j = 0; j < nsplit; j++) {
                int64_t size = all ? n : c->mesh->sizes[vd->axes[j]];
                if (all || sharded >> vd->axes[j] & 1) red_dims[nred++] = k;
                else rd[nr++] = size, kept *= size, rest.axes[rest.naxes++] = vd->axes[j];
                sd[k++] = size;
            }
        sd[k++] = e == d ? ls->dims[d] : gd[e];
        rd[nr++] = e == d ? ls->dims[d] : gd[e];
        md[e] = e == d ? kept * ls->dims[d] : gd[e];
    }
    eid split = lf_mk_reshape(c, x->cls, lf_type_of(c, ls->dtype, sd, k), c->origin);
    /* reduce(split) over the summed blocks' dims with the collective's reducer */
    shape rs = *ls;
    rs.rank = nr;
    rs.dims = arena_memdup(c->a, rd, (nr + 1) * sizeof *rd);
    eid t = lf_sum_reduce_term(s, split, red_dims, nred, &rs, rd, ta);
    if (t == EID_NONE) return;
    x->cls = all ? t : lf_mk_reshape(c, t, lf_type_of(c, ls->dtype, md, ls->rank), c->origin);
    x->v.dims[d] = rest;
    x->v.partial |= (uint8_t)sharded;
    x->v.red = (uint8_t)lf_reducer(c->cur, in);
}

/* The operand of collective s (sum, max or min), sharded over some of `axes` on dims of
 * local size 1 (whole dims: all their axes among `axes`), re-read as partial
 * over those axes: every device holds one summand of the sum over such a
 * dim, so it is a partial sum of the global term reduced over it (the dim
 * kept, of size 1). Where no device of a group holds the same block (a head
 * each), summing the group adds the heads: the sum XLA writes for a
 * reduction over a dim its shards hold one slice of. */
static void unit_blocks_as_partial(lstate *s, uint32_t axes) {
    lift_ctx *c = s->c;
    const hlo_instr *in = s->in;
    lval *x = &s->ops[0];
    const shape *ls = &s->comp->instrs[in->operands[0]].shape;
    const hlo_attr *ta = instr_attr(in, A_TO_APPLY);
    /* A value partial over axes the group does not span is summed over the
     * wrong axes, more likely than over its unit dims: that finding stands. */
    int red = lf_reducer(c->cur, in);
    if (x->kind != LV_TERM || (x->v.partial & ~axes) || (x->v.partial && x->v.red != red) || !ta || ls->rank > VIEW_MAX_RANK)
        return;
    uint32_t sharded = axes & ~(uint32_t)x->v.partial, got = 0;
    int64_t dd[VIEW_MAX_RANK], gd[VIEW_MAX_RANK], rd[VIEW_MAX_RANK], ld[VIEW_MAX_RANK];
    uint32_t nd = 0, nr = 0;
    lf_global_dims(c, &x->v, ls, gd);
    for (uint32_t d = 0; d < ls->rank; d++) {
        uint32_t mine = 0;
        for (uint32_t a = 0; a < x->v.dims[d].naxes; a++) mine |= 1u << x->v.dims[d].axes[a];
        if (!(mine & sharded)) {
            ld[nr] = ls->dims[d];
            rd[nr++] = gd[d];
            continue;
        }
        if (ls->dims[d] != 1) {
            blocks_as_partial(s, d, sharded, ta);
            return;
        }
        if (mine & ~sharded) return;
        got |= mine;
        dd[nd++] = d;
    }
    if (!nd || got != sharded) return;
    /* reduce(term, 0) over those dims with the collective's reducer */
    shape rs = *ls;
    rs.rank = nr;
    rs.dims = arena_memdup(c->a, ld, (nr + 1) * sizeof *ld);
    eid t = lf_sum_reduce_term(s, x->cls, dd, nd, &rs, rd, ta);
    if (t == EID_NONE) return;
    for (uint32_t k = 0; k < nd; k++) gd[dd[k]] = 1;
    x->cls = lf_mk_reshape(c, t, lf_type_of(c, ls->dtype, gd, ls->rank), c->origin);
    for (uint32_t k = 0; k < nd; k++) memset(&x->v.dims[dd[k]], 0, sizeof x->v.dims[dd[k]]);
    x->v.partial |= (uint8_t)sharded;
    x->v.red = (uint8_t)red;
}

/* A collective whose reducer computation is none of those recognised (sum,
 * product, max, min, and, or, xor: graph.h instr_reducer): what it
 * combines is not known, so nothing is said about it either way. */
static lval unknown_reducer(lstate *s) {
    lf_unsupported(s->c, s->comp, s->in, "%s combines with a reducer computation not recognised as a sum, product, max, "
                   "min or logical op", s->in->name);
    return unknown();
}

/* all-reduce over the mesh axes its groups span: removes `partial` over them;
 * the reduction must match the operand's. */
lval lf_lift_all_reduce(lstate *s) {
    lift_ctx *c = s->c;
    const hlo_instr *in = s->in;
    const lval *x = &s->ops[0];
    int axes = lf_collective_axes(s, false, NULL);
    int red = lf_reducer(c->cur, in);
    if (axes < 0) return unknown();
    if (red == RED_NONE) return unknown_reducer(s);
    if (x->kind != LV_TERM) {
        /* The result is the same on every device of a group, whatever it is. */
        if (x->kind == LV_UNKNOWN) {
            view v = view_dup(in->shape.rank);
            if (axes != (1 << c->mesh->naxes) - 1) return unknown();
            /* Replicated now, content unproven: assume it is what the baseline
             * computes at the end of the same op_name scope (said in the trace). */
            const char *sc;
            size_t sn;
            uint32_t idx;
            if (sr_scope_top(in, &sc, &sn) && strmap_get(&c->scope_index, sc, sn, &idx)) {
                eid b = c->scope_cls[idx];
                uint32_t t = eg_type(c->g, in->shape.dtype, in->shape.dims, in->shape.rank);
                if (b != EID_NONE && eg_class_type(c->g, b) == t) {
                    if (!c->resynced++) c->resync_scope = arena_strndup(c->a, sc, sn);
                    return term(b, v, false);
                }
            }
            return lf_assumed_known(c, in, v);
        }
        return unknown();
    }
    /* a value sharded over the axes summed (or maxed) is the reduction of
     * its blocks: a sum any time, a max or min of floats */
    if (red == RED_SUM || red == RED_MAX || red == RED_MIN) unit_blocks_as_partial(s, (uint32_t)axes);
    strbuf w;
    sb_init(&w);
    lf_axes_words(&w, c, (uint32_t)axes);
    lval result;
    if ((x->v.partial & axes) != (uint32_t)axes) {
        /* Summing values that are already complete over an axis multiplies them. */
        uint32_t extra = (uint32_t)axes & ~x->v.partial;
        bool sharded = false;
        for (uint32_t d = 0; d < x->v.rank; d++)
            for (uint32_t a = 0; a < x->v.dims[d].naxes; a++) sharded |= axes >> x->v.dims[d].axes[a] & 1;
        if (red == RED_SUM && !sharded && dtype_is_float(in->shape.dtype) && in->shape.dtype == s->comp->instrs[in->operands[0]].shape.dtype &&
            (!x->v.partial || x->v.red == RED_SUM)) {
            /* n copies summed: n times the value, a constant factor (lift_scale.c)
             * that a division may take back (a pmean of a value every device
             * already holds, over one axis of several) or that reaches an
             * output, where it is blamed on this sum. */
            result = *x;
            copies_as_partial(c, &result, extra, in, false);
            result.v.partial &= (uint8_t)~axes;
            if (!result.v.partial) result.v.red = 0;
            lval copies = result;
            result = term(copies.cls, copies.v, copies.assumed);
            result.scale = copies.scale;
            result.factor_at = copies.factor_at;
            sb_free(&w);
            return result;
        }
        if (red == RED_SUM || red == RED_PROD) {
            strbuf e;
            sb_init(&e);
            lf_axes_words(&e, c, extra);
            int64_t times = 1;
            for (uint32_t ax = 0; ax < c->mesh->naxes; ax++)
                if (extra >> ax & 1) times *= c->mesh->sizes[ax];
            if (x->v.partial & ~(uint32_t)axes) {
                /* Partial over other axes than the groups span: the wrong axis. */
                strbuf p2;
                sb_init(&p2);
                lf_axes_words(&p2, c, x->v.partial & ~(uint32_t)axes);
                if (c->in_loop_cond) /* a stopping test per group: see lf_short_reduction */
                    lf_unsupported_suspect(c, KIND_WRONG_COLLECTIVE_GROUP, s->comp, in,
                                           "%s reduces over %s a value partial over %s that decides when the loop stops: "
                                           "each group of devices may stop on its own, which is the baseline's result "
                                           "only when the iterations past a group's stop change nothing; not related yet",
                                           in->name, w.s, p2.s);
                else
                    lf_finding(c, KIND_WRONG_COLLECTIVE_GROUP, s->comp, in,
                            "%s reduces over %s, but the value is partial over %s: the all-reduce runs over the wrong mesh axis",
                            in->name, w.s, p2.s);
                sb_free(&p2);
            } else if (sharded) {
                /* Each device's block summed with the others': the sum of the
                 * blocks, a value in its own right (not related yet). */
                lf_unsupported(c, s->comp, in, "%s sums over %s a value sharded over %s: the sum of its blocks is not related yet",
                               in->name, w.s, e.s);
            } else if (c->in_loop_cond) {
                /* a count n times too large tested against zero stops the
                 * loop as the count does: not decided here */
                lf_unsupported_suspect(c, KIND_WRONG_REDUCTION, s->comp, in,
                                       "%s sums over %s a value already complete over %s (%lld times it) that decides when "
                                       "the loop stops: the same stop where it is only compared with zero; not related yet",
                                       in->name, w.s, e.s, (long long)times);
            } else {
                lf_finding(c, KIND_WRONG_REDUCTION, s->comp, in,
                        "%s sums over %s, but the value is already complete over %s: it is counted %lld times",
                        in->name, w.s, e.s, (long long)times);
            }
            sb_free(&e);
            view v = x->v;
            v.partial &= (uint8_t)~axes;
            result = lf_assumed_known(c, in, v);
            sb_free(&w);
            return result;
        }
    }
    lval apart;
    if (x->shares_apart && x->v.red == RED_SUM && red == RED_MAX && lf_scale_of(x) > 0) {
        apart = *x;
        apart.v.red = RED_MAX;
        x = &apart;
    }
    if (x->v.partial && x->v.red != red) {
        view v = x->v;
        v.partial &= (uint8_t)~axes;
        if (!v.partial) v.red = 0;
        /* A partial value reduced with another reducer than its own is
         * another value than the baseline's, but a program may use it where
         * any value the devices share does as well (a softmax's or
         * logsumexp's shift cancels, whatever reduction made it): a
         * difference proved here, which decides only where ops that keep it
         * carry it to an output (lf_scale_differ). */
        lval r = lf_assumed_known(c, in, v);
        /* Counted as assumed (what c->assumed gates, a finding that waited
         * on the outputs, stays undecided), yet no assumed view: the
         * difference travels on. Complete, it is a value every device
         * shares, any value: outputs that meet the baseline's anyway
         * (the shift cancelled) do whatever it is (c->opaque). */
        r.assumed = false;
        if (!v.partial) c->opaque++;
        strbuf m;
        sb_init(&m);
        sb_printf(&m, "%s reduces with %s over %s a value that is partial with %s: it is not the %s the baseline "
                  "computes", in->name, reducer_name(red), w.s, reducer_name(x->v.red), reducer_name(x->v.red));
        lf_prove_difference(c, &r, KIND_WRONG_REDUCTION, s->comp, in, arena_strndup(c->a, m.s, m.len), x->cls);
        if (x->v.red == RED_MAX && !v.partial) lf_shared_max_noted(c, r.cls, x->cls);
        sb_free(&m);
        sb_free(&w);
        return r;
    }
    for (uint32_t d = 0; d < x->v.rank; d++)
        for (uint32_t a = 0; a < x->v.dims[d].naxes; a++)
            if (axes >> x->v.dims[d].axes[a] & 1) {
                lf_finding(c, KIND_WRONG_COLLECTIVE_GROUP, s->comp, in, "@%s reduces over %s, along which the value is sharded (dimension %u), not partial",
                        in->name, w.s, d);
                sb_free(&w);
                return unknown();
            }
    if (in->shape.dtype != s->comp->instrs[in->operands[0]].shape.dtype) {
        lf_finding(c, KIND_DTYPE_MISMATCH, s->comp, in, "%s changes the element type", in->name);
        sb_free(&w);
        return unknown();
    }
    sb_free(&w);
    view v = x->v;
    v.partial &= (uint8_t)~axes;
    if (!v.partial) v.red = 0;
    return term(x->cls, v, x->assumed);
}

/* The operand, axes (groups in device order) and the one dimension of an
 * all-gather or reduce-scatter; false (said why) when they do not apply. */
static bool dim_collective(lstate *s, int *axes, view_dim *order, uint32_t *dim) {
    uint32_t nd;
    const int64_t *dd = instr_ints(s->in, A_DIMENSIONS, &nd);
    if (s->ops[0].kind != LV_TERM) return false;
    if ((*axes = lf_collective_axes(s, true, order)) < 0) return false;
    if (nd != 1) {
        lf_unsupported(s->c, s->comp, s->in, "%s has %u dimensions", s->in->name, nd);
        return false;
    }
    *dim = (uint32_t)dd[0];
    return true;
}

/* all-gather along dim d over `axes` of a value every device of a group holds
 * alike (not sharded along d, the axes unused by its view): the group's
 * copies side by side, the same on every device — concatenate(x, ..., x), or
 * for known values those values tiled. (GSPMD gathers a constant it
 * computed whole on every device; a program may tile a replicated value.) */
static lval gather_copies(lstate *s, uint32_t d, int axes) {
    lift_ctx *c = s->c;
    const lval *x = &s->ops[0];
    const hlo_instr *in = s->in;
    int64_t n = 1;
    for (uint32_t a = 0; a < c->mesh->naxes; a++)
        if (axes >> a & 1) n *= c->mesh->sizes[a];
    int64_t dims[VIEW_MAX_RANK];
    lf_global_dims(c, &x->v, &in->shape, dims);
    uint32_t rank = in->shape.rank, xr;
    int64_t xd[VIEW_MAX_RANK];
    const int64_t *td = eg_type_dims(c->g, eg_class_type(c->g, x->cls), &xr);
    if (xr != rank || rank > VIEW_MAX_RANK || n < 1) return unknown();
    memcpy(xd, td, rank * sizeof *xd); /* (adding a type moves the type store) */
    uint32_t t = lf_type_of(c, in->shape.dtype, dims, rank);
    const interp_val *kv = lf_kval(c, x->cls);
    if (kv && lf_fold_size_ok(dims, rank)) {
        interp_val *r = interp_val_new(kv->dtype, rank, dims);
        if (r) {
            int64_t idx[VIEW_MAX_RANK] = {0};
            for (int64_t e = 0; e < r->n; e++) {
                int64_t src = 0;
                for (uint32_t q = 0; q < rank; q++) src = src * xd[q] + (q == d ? idx[q] % xd[q] : idx[q]);
                interp_val_set(r, e, interp_val_get(kv, src));
                for (int q = (int)rank - 1; q >= 0 && ++idx[q] == dims[q]; q--) idx[q] = 0;
            }
            lval out = term(lf_const_term(c, r, c->origin), x->v, x->assumed);
            out.konst = x->konst;
            return out;
        }
    }
    if (n > 64) return unknown();
    eid ch[64];
    for (int64_t q = 0; q < n; q++) ch[q] = x->cls;
    int64_t dd = d;
    eid cat = eg_add(c->g, OP_CONCATENATE, lf_list_attr(c, A_DIMENSIONS, &dd, 1), t, ch, (uint32_t)n, c->origin);
    /* The same copies as jnp.tile writes them: x broadcast along a new dim of
     * size n just before d, the two merged. */
    if (rank < VIEW_MAX_RANK) {
        int64_t bdims[VIEW_MAX_RANK + 1], bmap[VIEW_MAX_RANK];
        for (uint32_t q = 0, o = 0; q <= rank; q++) {
            if (q == d) bdims[q] = n;
            else bmap[o] = q, bdims[q] = xd[o], o++;
        }
        eid xc = x->cls;
        eid bc = eg_add(c->g, OP_BROADCAST, lf_list_attr(c, A_DIMENSIONS, bmap, rank),
                        lf_type_of(c, in->shape.dtype, bdims, rank + 1), &xc, 1, c->origin);
        eg_union(c->g, cat, lf_mk_reshape(c, bc, t, c->origin), NULL);
        cat = eg_find(c->g, cat);
    }
    return term(cat, x->v, x->assumed);
}

/* x (the operand of s, of s's source shape) with the blocks of its dim e
 * moved into dim d as d's major part, a layout (lift.h): e is no longer
 * bound to its axes; `bound` binds d's blocks to them instead (an all-to-all:
 * device r keeps block r of d), else every device holds all of them (an
 * all-gather). False when a view's parts are unknown. */
bool lf_blocks_moved(lstate *s, const lval *x, uint32_t e, uint32_t d, bool bound, lval *out) {
    lift_ctx *c = s->c;
    const hlo_instr *src = &s->comp->instrs[s->in->operands[0]];
    uint32_t rank = src->shape.rank;
    if (rank > VIEW_MAX_RANK) return false;
    int64_t n = view_dim_parts(&x->v, c->mesh, e);
    lift_layout *L = arena_alloc(c->a, sizeof *L);
    memset(L, 0, sizeof *L);
    L->grank = L->ndims = rank;
    for (uint32_t q = 0; q < rank; q++) {
        int64_t parts = view_dim_parts(&x->v, c->mesh, q);
        if (parts < 1) return false;
        L->gdims[q] = src->shape.dims[q] * parts;
        L->split[q] = parts;
        L->bound[q] = parts > 1 && q != e ? 1 : -1;
        L->naxes[q] = q != e ? x->v.dims[q].naxes : 0;
        memcpy(L->axes[q], x->v.dims[q].axes, L->naxes[q]);
    }
    if (bound) {
        L->split[d] = n;
        L->bound[d] = 1;
        L->naxes[d] = x->v.dims[e].naxes;
        memcpy(L->axes[d], x->v.dims[e].axes, x->v.dims[e].naxes);
    }
    for (uint32_t q = 0; q < rank; q++) {
        if (q == d) L->atoms[q][L->natoms[q]++] = (layout_atom){(uint8_t)e, 0, n};
        if (L->gdims[q] / L->split[q] > 1) L->atoms[q][L->natoms[q]++] = (layout_atom){(uint8_t)q, 1, L->gdims[q] / L->split[q]};
    }
    L->from = s->in;
    L->from_comp = s->comp;
    *out = (lval){.kind = LV_LAYOUT, .cls = x->cls, .lay = L, .assumed = x->assumed};
    return true;
}

/* all-gather along dim d (not sharded) of a value whose dim e is sharded over
 * exactly the gathered axes (major first): every device ends up with the same
 * tensor, dim d holding the blocks of e as its major part — a rearrangement of
 * the global value (a layout), which reshapes and transposes may bring back
 * (jax's untiled all_gather then moveaxis), and which is wrong only if used
 * so. */
static bool gather_layout(lstate *s, uint32_t d, int axes, lval *out) {
    const lval *x = &s->ops[0];
    const hlo_instr *src = &s->comp->instrs[s->in->operands[0]];
    uint32_t rank = src->shape.rank;
    int e = -1;
    for (uint32_t q = 0; q < rank; q++) {
        const view_dim *vq = &x->v.dims[q];
        uint32_t mask = 0;
        bool ascending = true;
        for (uint32_t k = 0; k < vq->naxes; k++) {
            mask |= 1u << vq->axes[k];
            ascending &= k == 0 || vq->axes[k] > vq->axes[k - 1];
        }
        if (!(mask & (uint32_t)axes)) continue;
        if (mask != (uint32_t)axes || !ascending || e >= 0) return false;
        e = (int)q;
    }
    if (e < 0 || rank > VIEW_MAX_RANK) return false;
    return lf_blocks_moved(s, x, (uint32_t)e, d, false, out);
}

/* A value sharded along a unit dim j before the dim d an all-gather gathers
 * (d unsharded; PyTorch/XLA: token rows [1,16,64] of a batch split over
 * data, gathered along the sequence dim): read as sharded along d
 * (lf_unit_move), when j holds gathered axes. */
static bool unit_dim_regroup(lstate *s, uint32_t d, uint32_t axes, lval *out) {
    const lval *x = &s->ops[0];
    const shape *sh = &s->comp->instrs[s->in->operands[0]].shape;
    for (int64_t j = (int64_t)d - 1; j >= 0 && x->kind == LV_TERM && (uint32_t)j < x->v.rank; j--) {
        const view_dim *vj = &x->v.dims[j];
        if (!vj->naxes) continue;
        bool gathered = false;
        for (uint32_t a = 0; a < vj->naxes; a++) gathered |= axes >> vj->axes[a] & 1;
        return gathered && lf_unit_move(s->c, x, sh, (uint32_t)j, d, out);
    }
    return false;
}

/* An all-gather along dim d over one mesh axis (P devices) of a value
 * sharded by that axis along another dim k: device r's piece lands at block
 * r of d. Two forms are rearrangements of the term X:
 *   - d is a unit dim locally, k has local size n: the result holds
 *     X[.., r·n + i (k), ..] at [.., i (k), .., r (d), ..] — X with k split
 *     into [P, n], the unit d dropped and P moved to d's place (PyTorch/XLA
 *     gathers its token rows [16, 1, 64] so, into [seq, batch, hidden]);
 *   - k is a unit dim locally, d has local size m: the result holds
 *     X[.., r (k), .., i (d), ..] at [.., 0 (k), .., r·m + i (d), ..] — X
 *     with k moved just before d, then merged into it (a reshape alone when
 *     only unit dims lie between).
 * Either way the same on every device; whether it is the baseline's is for
 * the terms to say. False when neither form applies. */
static bool gather_unit_dim(lstate *s, uint32_t d, int axes, lval *out) {
    lift_ctx *c = s->c;
    const lval *x = &s->ops[0];
    const shape *sh = &s->comp->instrs[s->in->operands[0]].shape;
    uint32_t r = sh->rank;
    if (x->kind != LV_TERM || x->v.rank != r || r > VIEW_MAX_RANK || d >= r || x->v.dims[d].naxes ||
        __builtin_popcount((unsigned)axes) != 1 || (x->v.partial & (uint32_t)axes))
        return false;
    int k = -1;
    for (uint32_t q = 0; q < r; q++)
        if (x->v.dims[q].naxes == 1 && axes >> x->v.dims[q].axes[0] & 1) k = (int)q;
    if (k < 0) return false;
    int64_t g[VIEW_MAX_RANK], y[VIEW_MAX_RANK], perm[VIEW_MAX_RANK], f[VIEW_MAX_RANK];
    lf_global_dims(c, &x->v, sh, g);
    int64_t n = sh->dims[k], p = g[k] / (n ? n : 1);
    if (n < 1 || p * n != g[k]) return false;
    int dt = sh->dtype;
    eid t;
    bool ident = true;
    if (sh->dims[d] == 1) {
        /* y: the term with k split into [p, n] and the unit dim d dropped (as
         * a program writes it: reshape, then transpose); at[q]: y's dim for
         * x's dim q (for k: its n part). */
        uint32_t yr = 0, at[VIEW_MAX_RANK], pk = 0;
        for (uint32_t q = 0; q < r; q++) {
            if ((int)q == k) pk = yr, y[yr++] = p;
            if (q != d) at[q] = yr, y[yr++] = (int)q == k ? n : g[q];
        }
        for (uint32_t q = 0; q < r; q++) {
            perm[q] = q == d ? pk : at[q];
            f[q] = y[perm[q]];
            ident &= perm[q] == q;
        }
        t = lf_mk_reshape(c, x->cls, lf_type_of(c, dt, y, yr), c->origin);
        if (!ident) t = eg_add(c->g, OP_TRANSPOSE, lf_list_attr(c, A_DIMENSIONS, perm, r), lf_type_of(c, dt, f, r), &t, 1, c->origin);
    } else if (n == 1) {
        /* X's dims with k just before d (y), then k merged into d (f). */
        uint32_t np = 0;
        for (uint32_t q = 0; q < r; q++) {
            if ((int)q == k) continue;
            if (q == d) perm[np++] = k;
            perm[np++] = q;
        }
        for (uint32_t q = 0; q < r; q++) {
            y[q] = g[perm[q]];
            f[q] = (int)q == k ? 1 : q == d ? p * g[d] : g[q];
            ident &= perm[q] == q;
        }
        t = x->cls;
        if (!ident) t = eg_add(c->g, OP_TRANSPOSE, lf_list_attr(c, A_DIMENSIONS, perm, r), lf_type_of(c, dt, y, r), &t, 1, c->origin);
        t = lf_mk_reshape(c, t, lf_type_of(c, dt, f, r), c->origin);
    } else {
        return false;
    }
    view v = x->v;
    memset(&v.dims[k], 0, sizeof v.dims[k]);
    *out = term(t, v, x->assumed);
    return true;
}

/* Whether an all-gather of x along d over `axes` stacks every block of the
 * global value once (x complete, sharded over exactly those axes): its
 * elements in another order. *every: the blocks of dims other than d too, so
 * the order moves elements across dims, not only along d. */
static bool stack_of_blocks(const lval *x, uint32_t d, uint32_t axes, bool *every) {
    uint32_t along = 0;
    for (uint32_t k = 0; k < x->v.dims[d].naxes; k++) along |= 1u << x->v.dims[d].axes[k];
    *every = view_axes_used(&x->v) != along;
    return !x->v.partial && view_axes_used(&x->v) == axes;
}

/* Whether all-gather y (of comp) gathers as g does a value held as x is:
 * the same dim and axes of an operand of the same local shape and view, so
 * its elements come in g's order (a mask gathered beside the values). */
static bool same_gather(lstate *s, const hlo_instr *g, const hlo_instr *y, const lval *x) {
    const hlo_comp *comp = s->comp;
    if (y->op != OP_ALL_GATHER || y->noperands != 1 || g->noperands != 1) return false;
    uint32_t ng, ny;
    const int64_t *dg = instr_ints(g, A_DIMENSIONS, &ng), *dy = instr_ints(y, A_DIMENSIONS, &ny);
    const shape *sg = &comp->instrs[g->operands[0]].shape, *sy = &comp->instrs[y->operands[0]].shape;
    const lval *xy = &s->vals[y->operands[0]];
    if (ng != 1 || ny != 1 || dg[0] != dy[0] || sg->rank != sy->rank ||
        (sg->rank && memcmp(sg->dims, sy->dims, sg->rank * sizeof *sg->dims)) || xy->kind != LV_TERM ||
        xy->v.partial || !view_equal(&xy->v, &x->v))
        return false;
    return lift_groups_axes(s->c, y, false) == lift_groups_axes(s->c, g, false);
}

/* Whether all-gather g's result (of a value held as x), whose elements come
 * in another order than the baseline's, is used only in ways that order does
 * not change: element-by-element ops whose other operands are the same
 * everywhere that order moves elements (scalars, broadcasts that add those
 * dims) or are themselves such uses (of g, or of a gather that orders its
 * elements alike), ending in reductions over those dims. The order moves
 * elements along dim d alone, or (every_dim) across all of them (a stack of
 * blocks of several sharded dims; reshapes then keep the order's effect). */
static bool order_free(lstate *s, const hlo_instr *g, const lval *x, uint32_t d, bool every_dim) {
    const hlo_comp *comp = s->comp;
    uint32_t i = (uint32_t)(g - comp->instrs);
    uint8_t *mark = xcalloc(comp->ninstrs + 1, 1);  /* 1: carries elements in g's order */
    uint32_t first = i;
    mark[i] = 1;
    for (uint32_t j = 0; j < comp->ninstrs; j++)
        if (j != i && same_gather(s, g, &comp->instrs[j], x)) mark[j] = 1, first = j < first ? j : first;
    bool ok = comp->root != i, used = false;
    for (uint32_t j = first + 1; j < comp->ninstrs && ok; j++) {
        const hlo_instr *y = &comp->instrs[j];
        if (mark[j]) {
            ok = comp->root != j;
            continue;
        }
        bool takes = false;
        for (uint32_t o = 0; o < y->noperands; o++) takes |= mark[y->operands[o]] == 1;
        if (!takes) continue;
        used = true;
        if (y->op == OP_REDUCE && y->noperands == 2 && !mark[y->operands[1]]) {
            uint32_t nd, rank = comp->instrs[y->operands[0]].shape.rank, over = 0;
            const int64_t *rd = instr_ints(y, A_DIMENSIONS, &nd);
            for (uint32_t k = 0; rd && k < nd; k++) over += rd[k] == (int64_t)d || every_dim;
            ok = every_dim ? over == rank : over > 0;  /* its result no longer holds the elements moved */
            continue;
        }
        bool moves = every_dim && (y->op == OP_RESHAPE || y->op == OP_BITCAST) && y->noperands == 1;
        if (!moves && (!graph_op_elementwise(y->op) || y->shape.rank <= d)) {
            ok = false;
            break;
        }
        for (uint32_t o = 0; o < y->noperands && ok && !moves; o++) {
            const hlo_instr *xo = &comp->instrs[y->operands[o]];
            if (mark[y->operands[o]] == 1 || xo->shape.rank == 0) continue;
            uint32_t nb = 0;
            if (xo->op == OP_BROADCAST) instr_ints(xo, A_DIMENSIONS, &nb);
            ok = xo->op == OP_BROADCAST && (every_dim ? nb == 0 : lf_broadcast_adds(xo, d));
        }
        mark[j] = 1;
        ok &= comp->root != j;
    }
    free(mark);
    return ok && used;
}

/* all-gather s along d (a unit dim a reshape put after a reduce's kept dims)
 * over one mesh axis of a value partial over it: device k's piece is the
 * reduction of block k of the reduce's operand Y, sharded on exactly that
 * axis along the one sharded dim e it reduces (init the reducer's
 * identity). The stack is then the global Y split at e into (blocks,
 * block) reduced over the block and the other reduced dims, the blocks'
 * dim (where the kept dims before e end) moved to d. */
static bool gather_pieces(lstate *s, uint32_t d, int axes, lval *out) {
    lift_ctx *c = s->c;
    const hlo_instr *in = s->in, *r = &s->comp->instrs[in->operands[0]];
    const lval *x = &s->ops[0];
    const shape *xs = &r->shape;
    view_dim order;  /* the groups' axes, major first: the blocks' order */
    if (x->kind != LV_TERM || x->v.partial != (uint32_t)axes || lift_groups_order(c, in, &order) != axes || !order.naxes)
        return false;
    if (r->op != OP_RESHAPE && r->op != OP_BITCAST) return false;
    r = &s->comp->instrs[r->operands[0]];
    if (r->op != OP_REDUCE || r->noperands != 2 || xs->rank != r->shape.rank + 1 || xs->dims[d] != 1) return false;
    for (uint32_t k = 0, q = 0; k < xs->rank; k++)
        if (k != d && xs->dims[k] != r->shape.dims[q++]) return false;
    /* (flags counted: index values the same on every device, an integer
     * init computed as a device value: their terms) */
    lval yt = s->vals[r->operands[0]], it = s->vals[r->operands[1]];
    lf_resolved_as_term(c, &yt);
    if (it.kind == LV_DEV && lf_dev_uniform(c, &it))
        it = term(lf_dev_constant(c, &s->comp->instrs[r->operands[1]], &it), view_dup(0), false);
    const lval *y = &yt, *init = &it;
    const shape *ys = &s->comp->instrs[r->operands[0]].shape;
    if (y->kind != LV_TERM || init->kind != LV_TERM || y->v.partial || init->v.partial || lf_scale_of(y) != 1 ||
        lf_scale_of(init) != 1 || ys->rank + 1 > VIEW_MAX_RANK || !lf_reducer_identity(c, c->cur, r, init->cls))
        return false;
    uint32_t nd, kept = 0, at = 0;
    int e = -1;
    const int64_t *rd = instr_ints(r, A_DIMENSIONS, &nd);
    int64_t dd[VIEW_MAX_RANK + 1], gy[VIEW_MAX_RANK], sd[VIEW_MAX_RANK + 1];
    for (uint32_t k = 0; k < ys->rank; k++) {
        bool reduced = false;
        for (uint32_t q = 0; q < nd; q++) reduced |= rd[q] == k;
        const view_dim *vd = &y->v.dims[k];
        bool mine = vd->naxes == order.naxes && !memcmp(vd->axes, order.axes, order.naxes);
        if (!mine && (view_axes_used(&(view){.rank = 1, .dims = {*vd}}) & (uint32_t)axes)) return false;
        if (reduced && mine) {
            if (e >= 0) return false;
            e = (int)k;
            at = kept;
        } else if (reduced && vd->naxes) {
            return false;
        } else if (!reduced) {
            kept++;
        }
    }
    if (e < 0 || nd > VIEW_MAX_RANK) return false;
    lf_global_dims(c, &y->v, ys, gy);
    int64_t n = view_dim_parts(&y->v, c->mesh, (uint32_t)e);
    if (n < 2 || gy[e] != n * ys->dims[e] || xs->rank > VIEW_MAX_RANK) return false;
    for (uint32_t k = 0, q = 0; k < ys->rank; k++) {
        if (k == (uint32_t)e) sd[q++] = n;
        sd[q++] = k == (uint32_t)e ? ys->dims[e] : gy[k];
    }
    for (uint32_t q = 0; q < nd; q++) dd[q] = rd[q] < e ? rd[q] : rd[q] + 1;
    eid split = lf_mk_reshape(c, y->cls, lf_type_of(c, ys->dtype, sd, ys->rank + 1), c->origin);
    /* the kept dims sharded as the reduce's operand has them (whatever
     * reading of the unit dim the piece took), the blocks' dim whole */
    view v = {.rank = (uint8_t)xs->rank};
    for (uint32_t k = 0, q = 0; k < ys->rank; k++) {
        bool reduced = false;
        for (uint32_t j = 0; j < nd; j++) reduced |= rd[j] == k;
        if (reduced) continue;
        if (q == d) q++;
        v.dims[q++] = y->v.dims[k];
    }
    int64_t gdims[VIEW_MAX_RANK];
    lf_global_dims(c, &v, &in->shape, gdims);
    if (gdims[d] != n) return false;
    /* the same reduce over the split operand: its dims renumbered */
    hlo_instr ri = *r;
    hlo_attr *attrs = arena_alloc(c->a, (r->nattrs + 1) * sizeof *attrs);
    if (r->nattrs) memcpy(attrs, r->attrs, r->nattrs * sizeof *attrs);
    for (uint32_t k = 0; k < r->nattrs; k++)
        if (attrs[k].key == A_DIMENSIONS) attrs[k].v.ints = arena_memdup(c->a, dd, nd * sizeof *dd);
    ri.attrs = attrs;
    ri.shape = in->shape;
    eid ch[2] = {split, init->cls};
    /* the blocks' dim where the reduce leaves it (after the kept dims
     * before e), then moved to d */
    int64_t rdims[VIEW_MAX_RANK], perm[VIEW_MAX_RANK];
    for (uint32_t k = 0, q = 0; k < xs->rank; k++) {
        if (k == at) rdims[k] = n, perm[d] = k;
        else {
            if (q == d) q++;
            rdims[k] = gdims[q], perm[q] = k;
            q++;
        }
    }
    eid t = lf_mk_transpose(c, lf_node(c, c->cur, &ri, ch, 2, rdims, c->origin), perm);
    *out = term(t, v, y->assumed || init->assumed || x->assumed);
    return true;
}

/* all-gather along d: d must be sharded with the gathered axes as its minor
 * axes (block order = group order). */
lval lf_lift_all_gather(lstate *s) {
    lift_ctx *c = s->c;
    const hlo_instr *in = s->in;
    const lval *x = &s->ops[0];
    int axes;
    uint32_t d;
    view_dim order;  /* the groups' axes, major first (a tuple of axes may list them in any order) */
    if (!dim_collective(s, &axes, &order, &d)) return unknown();
    lval xu;
    uint32_t daxes = 0;
    for (uint32_t i = 0; i < x->v.dims[d].naxes; i++) daxes |= 1u << x->v.dims[d].axes[i];
    if (daxes && !(daxes & (uint32_t)axes) && s->comp->instrs[in->operands[0]].shape.dims[d] == 1 &&
        lf_unit_move_next(c, x, &s->comp->instrs[in->operands[0]].shape, d, &xu))
        /* a unit dim read as carrying other axes than the gathered ones (a
         * reshape adding it before a sharded dim: one of two readings)
         * gathered along: the other reading, the sharding on the next dim */
        x = &xu;
    view v = x->v;
    view_dim *vd = &v.dims[d];
    uint32_t k = order.naxes;
    lval xr;
    if (!vd->naxes && unit_dim_regroup(s, d, (uint32_t)axes, &xr)) {
        x = &xr;
        v = xr.v;
    }
    if (!vd->naxes && !(view_axes_used(&x->v) & (uint32_t)axes) && !x->v.partial) return gather_copies(s, d, axes);
    bool ok = vd->naxes >= k;
    for (uint32_t i = 0; ok && i < k; i++) ok = vd->axes[vd->naxes - k + i] == order.axes[i];
    lval moved;
    if (!ok && gather_unit_dim(s, d, axes, &moved)) return moved;
    if (!ok && !vd->naxes && !x->v.partial && gather_layout(s, d, axes, &moved)) return moved;
    lval xm;
    if (!ok && (x->v.partial & (uint32_t)axes) == (uint32_t)axes &&
        lf_unit_move_next(c, x, &s->comp->instrs[in->operands[0]].shape, d, &xm)) {
        /* partial values stacked along a local unit dim (expand_dims) read as
         * carrying the next dim's sharding: that reading's other form */
        x = &xm;
        v = xm.v;
    }
    if (!ok && (x->v.partial & (uint32_t)axes) == (uint32_t)axes && !vd->naxes) {
        /* The stack of the group's partial values: no value of the baseline
         * until reduced over d (lf_lift_reduce), nor a mistake by itself. */
        uint32_t i = (uint32_t)(in - s->comp->instrs);
        bool only_reduced = lf_stack_only_reduced(s->comp, c->cur, i, d, x->v.red);
        if (!only_reduced && gather_pieces(s, d, axes, &moved)) return moved;
        if (!only_reduced)
            lf_unsupported(c, s->comp, in, "%s gathers partial values (%s) side by side; the stack is related only where a reduce "
                           "over the gathered dimension completes it", in->name, reducer_name(x->v.red));
        return unknown();
    }
    if (!ok) {
        strbuf a, w;
        bool every = false;
        sb_init(&a);
        sb_init(&w);
        view_print(&a, &x->v, c->mesh);
        lf_axes_words(&w, c, (uint32_t)axes);
        /* a dim of one element locally that carries other axes: the gather
         * stacks the group's values along it, which another dim may have
         * made differ (each device's last element of a sharded dim):
         * no plain view, nor a mistake by itself */
        if (s->comp->instrs[in->operands[0]].shape.dims[d] == 1)
            lf_unsupported_suspect(c, KIND_WRONG_SHARD_DIM, s->comp, in, "%s gathers dimension %u over %s, but the value "
                                   "is %s: the stack of the group's values along it is no plain view", in->name, d, w.s, a.s);
        else if (stack_of_blocks(x, d, (uint32_t)axes, &every) &&
                 order_free(s, in, x, d, every))
            lf_unsupported_suspect(c, KIND_WRONG_SHARD_DIM, s->comp, in, "%s gathers dimension %u over %s, but the value "
                                   "is %s: its rows in another order, which only element-by-element ops and reductions "
                                   "over that dimension use (whitening statistics): not decided", in->name, d, w.s, a.s);
        else
            lf_finding(c, KIND_WRONG_SHARD_DIM, s->comp, in, "@%s gathers dimension %u over %s, but the value is %s", in->name,
                       d, w.s, a.s);
        sb_free(&a);
        sb_free(&w);
        return unknown();
    }
    vd->naxes = (uint8_t)(vd->naxes - k);
    memset(vd->axes + vd->naxes, 0, sizeof vd->axes - vd->naxes);  /* views compare bytewise */
    return term(x->cls, v, x->assumed);
}

/* reduce-scatter: partial over the axes → sharded along d over them. */
lval lf_lift_reduce_scatter(lstate *s) {
    lift_ctx *c = s->c;
    const hlo_instr *in = s->in;
    const lval *x = &s->ops[0];
    int axes;
    uint32_t dim;
    view_dim order;
    if (!dim_collective(s, &axes, &order, &dim)) return unknown();
    int red = lf_reducer(c->cur, in);
    if (red == RED_NONE) return unknown_reducer(s);
    /* a value sharded along a unit dim over the axes reduced is the
     * reduction of its blocks (as for an all-reduce: a soup of replicas
     * stacked over the devices, psum_scatter'd) */
    if (red == RED_SUM || red == RED_MAX || red == RED_MIN) unit_blocks_as_partial(s, (uint32_t)axes);
    uint32_t extra = (uint32_t)axes & ~x->v.partial;
    lval copies = *x;
    bool sharded = view_axes_used(&x->v) & extra;
    if (extra && red == RED_SUM && !sharded && !(x->v.partial & ~(uint32_t)axes) && (!x->v.partial || x->v.red == RED_SUM) &&
        dtype_is_float(in->shape.dtype)) {
        /* A sum of copies (a value every device of the group holds): n times
         * it, a factor a division may take back (psum_scatter(g) / n). */
        copies_as_partial(c, &copies, extra, in, false);
        x = &copies;
    }
    if ((x->v.partial & axes) != (uint32_t)axes || x->v.red != red) {
        if (x->v.partial & ~(uint32_t)axes) {
            /* Partial over other axes than the groups span: the wrong axis (as
             * for an all-reduce). */
            strbuf w, p2;
            sb_init(&w);
            sb_init(&p2);
            lf_axes_words(&w, c, (uint32_t)axes);
            lf_axes_words(&p2, c, x->v.partial & ~(uint32_t)axes);
            lf_finding(c, KIND_WRONG_COLLECTIVE_GROUP, s->comp, in,
                       "%s reduces over %s, but the value is partial over %s: the reduce-scatter runs over the wrong mesh axis",
                       in->name, w.s, p2.s);
            sb_free(&w);
            sb_free(&p2);
        } else if (sharded) {
            /* each device's block reduced with the others': a value in its
             * own right (as for an all-reduce: not related yet) */
            lf_unsupported(c, s->comp, in, "%s reduces over its groups a value sharded over the axes they span: the "
                           "reduction of its blocks is not related yet", in->name);
        } else {
            lf_finding(c, KIND_WRONG_REDUCTION, s->comp, in, "%s reduces a value that is not partial (%s) over its groups", in->name,
                       reducer_name(red));
        }
        return unknown();
    }
    view v = x->v;
    v.partial &= (uint8_t)~axes;
    if (!v.partial) v.red = 0;
    view_dim *vd = &v.dims[dim];
    for (uint32_t i = 0; i < order.naxes; i++) vd->axes[vd->naxes++] = order.axes[i];
    lval r = term(x->cls, v, x->assumed);
    r.scale = x->scale;  /* a sum of copies' */
    r.factor_at = x->factor_at;
    return r;
}
