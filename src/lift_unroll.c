/* lift_unroll — per-device terms (lift.h LV_DEVT; DESIGN §5 "Per-device
 * terms").
 *
 * Some programs compute, on each device, something no view relates to one
 * baseline value: a pipeline stage runs the device's own layer (its block of
 * one of a stacked weight, squeezed) on what the previous stage sent it; a
 * prefix over devices adds what collective-permutes brought; a select keeps a
 * value on one device only. On a small mesh the value on every device d is
 * still an exact term T_d over the baseline's inputs: the instruction's own
 * op over its operands' terms on d. Those come from the operands' values (a
 * plain view gives d's block as a slice of its term, a device value its
 * numbers on d) or, for values no view holds (a partial sum, an unrelated
 * value), from the instructions that made them, read up the graph (memoised
 * per walk, bounded). Reshapes, broadcasts, transposes and converts are read
 * up the graph first, so that a device's block of a stacked weight is the
 * slice the baseline takes of it, then squeezed as the baseline squeezes it.
 * Collectives are what they do to the devices' terms: a collective-permute
 * moves them (zeros where nothing arrives), an all-reduce folds its group's
 * with the reducer (zeros left out of sums), an all-gather concatenates them.
 *
 * Per-device terms enter only where the view transfer functions found no
 * relation for an op that reads a device's block of one of a stacked value,
 * squeezed (lf_unroll_wanted; lift.c lift_one withdraws the reason they
 * recorded), and leave as soon as they can: equal on every device, they are
 * a replicated term; at an output they settle into its view
 * (lift_unroll_settle): the devices' terms concatenated block by block along
 * the dims it shards — written, where every device applies the same
 * elementwise op, as that op over the concatenated operands (the baseline's
 * one op over the whole array), and also as the sum of the zero-padded
 * blocks (the form a gradient of slices takes). An op this module does not
 * take (loops, conditionals, tuples) leaves them unrelated, with the reason.
 * Nothing here guesses: every term is what the device computes.
 */
#include "lift.h"
#include "lift_int.h"

#include "debug.h"
#include "interp.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define UNROLL_DEPTH 128
#define UNROLL_BUDGET 4096  /* instructions one walk reads up through at most */

/* One device's value: the constant s times the term t (lift_scale.c: the
 * factors ride beside the terms and go back into them where the baseline's
 * do, so that a device's terms are the baseline's). */
typedef struct dterm {
    eid t;
    double s;
} dterm;

typedef struct uctx {
    lift_ctx *c;
    const hlo_comp *comp;
    const lval *vals;
    int64_t n;          /* devices */
    const lstate *top;  /* the instruction lifted, its operands as the walk has them */
    uint32_t budget;
    u32map memo;         /* instruction index -> 1 + index into seen (0: it has none) */
    dterm **seen;       /* the devices' values of each instruction read */
    size_t nseen, capseen;
} uctx;

static bool terms_of(uctx *u, uint32_t i, int depth, dterm *out);
static bool operand_terms(uctx *u, uint32_t o, dterm *out);

static void uctx_close(uctx *u) {
    u32map_free(&u->memo);
    free(u->seen);
}

static uint32_t type_of_shape(lift_ctx *c, const shape *sh) { return lf_type_of(c, sh->dtype, sh->dims, sh->rank); }

/* x's term with its factor put back (EID_NONE: it cannot be). */
static eid unscaled(lift_ctx *c, dterm x, uint32_t rank) {
    if (x.s == 1) return x.t;
    lval t = term(x.t, view_dup(rank), false);
    t.scale = x.s;
    lf_unscale(c, &t);
    return t.kind == LV_TERM ? t.cls : EID_NONE;
}

/* ---- the devices' values of one instruction ---- */

/* The stacked value X of which x (a plain term T under a view that shards
 * only dim 0, n blocks) holds a block of one per device, squeezed: T =
 * reshape(X) merging X's dims 0 and 1, X's dim 0 of n (the reading of a
 * squeeze of a sharded unit dim: the sharding moved to the next dim).
 * EID_NONE if it is no such value. Device d's value is then reshape(X[b]),
 * b its block: the slice the baseline takes of a stacked weight. */
static eid stacked_of(lift_ctx *c, const lval *x) {
    if (x->kind != LV_TERM || x->cls == EID_NONE || x->v.partial || !x->v.rank || !x->v.dims[0].naxes) return EID_NONE;
    for (uint32_t k = 1; k < x->v.rank; k++)
        if (x->v.dims[k].naxes) return EID_NONE;
    int64_t n = view_dim_parts(&x->v, c->mesh, 0);
    uint32_t tr, xr;
    const int64_t *td = eg_type_dims(c->g, eg_class_type(c->g, x->cls), &tr);
    const eid *ch;
    if (n < 2 || lf_class_node(c, x->cls, OP_RESHAPE, 1, &ch) == EID_NONE) return EID_NONE;
    eid X = eg_find(c->g, ch[0]);
    const int64_t *xd = eg_type_dims(c->g, eg_class_type(c->g, X), &xr);
    if (xr != tr + 1 || xd[0] != n || xd[0] * xd[1] != td[0]) return EID_NONE;
    for (uint32_t k = 1; k < tr; k++)
        if (xd[k + 1] != td[k]) return EID_NONE;
    return X;
}

/* x's blocks where x is a stacked value's blocks of one, squeezed: each
 * device's the slice of the stacked value X the baseline takes, reshaped
 * as the baseline squeezes it; false when x is no such value. */
static bool stacked_blocks(uctx *u, const lval *x, const shape *sh, dterm *out) {
    lift_ctx *c = u->c;
    eid X = stacked_of(c, x);
    if (X == EID_NONE) return false;
    uint32_t xr, r;
    const int64_t *xd = eg_type_dims(c->g, eg_class_type(c->g, X), &xr);
    const int64_t *gd = eg_type_dims(c->g, eg_class_type(c->g, x->cls), &r);
    int64_t off[VIEW_MAX_RANK], size[VIEW_MAX_RANK], sl[3 * VIEW_MAX_RANK];
    for (int64_t d = 0; d < u->n; d++) {
        view_block(&x->v, c->mesh, gd, r, d, off, size);
        int64_t b = off[0] / size[0];
        for (uint32_t k = 0; k < xr; k++) sl[3 * k] = k ? 0 : b, sl[3 * k + 1] = k ? xd[k] : b + 1, sl[3 * k + 2] = 1;
        eid blk = lf_mk_slice(c, X, sl);
        out[d] = (dterm){blk == EID_NONE ? EID_NONE : lf_mk_reshape(c, blk, type_of_shape(c, sh), c->origin), lf_scale_of(x)};
        if (out[d].t == EID_NONE) return false;
    }
    return true;
}

/* From the value's lift: its view's blocks, a device value's numbers. */
static bool from_value(uctx *u, const lval *x, const hlo_instr *in, dterm *out) {
    lift_ctx *c = u->c;
    const shape *sh = &in->shape;
    if (sh->dtype == DT_TUPLE || sh->rank > VIEW_MAX_RANK) return false;
    if (x->kind == LV_DEVT) {
        for (int64_t d = 0; d < u->n; d++) out[d] = (dterm){x->elems[d].cls, lf_scale_of(x)};
        return true;
    }
    if (x->kind == LV_DEV) {
        int64_t ne = shape_elements(sh);
        if (x->count != 1 && (int64_t)x->count != ne) return false;
        for (int64_t d = 0; d < u->n; d++) {
            lval one = *x;
            one.dev = x->dev + d * x->count;
            if ((out[d].t = lf_dev_constant(c, in, &one)) == EID_NONE) return false;
            out[d].s = 1;
        }
        return true;
    }
    if ((x->kind == LV_PW || x->kind == LV_IVEC || x->kind == LV_MASK) && x->cls != EID_NONE) {
        /* index values with a plain term: that term */
        lval t = *x;
        return lf_index_as_term(c, &t) && t.kind == LV_TERM && from_value(u, &t, in, out);
    }
    if (x->kind != LV_TERM || x->cls == EID_NONE || x->assumed || x->diff || x->zm) return false;
    /* a partial view of zeros (a zero buffer read as a share of zero): the
     * constant zeros every device holds */
    bool zero = lf_class_is_zero(c, x->cls);
    if (x->v.partial && !zero) return false;
    uint32_t r;
    const int64_t *gd = eg_type_dims(c->g, eg_class_type(c->g, x->cls), &r);
    if (r != sh->rank || x->v.rank != r) return false;
    if (stacked_blocks(u, x, sh, out)) return true;
    int64_t off[VIEW_MAX_RANK], size[VIEW_MAX_RANK], sl[3 * VIEW_MAX_RANK];
    for (int64_t d = 0; d < u->n; d++) {
        view_block(&x->v, c->mesh, gd, r, d, off, size);
        for (uint32_t k = 0; k < r; k++) {
            if (size[k] != sh->dims[k]) return false;
            sl[3 * k] = off[k], sl[3 * k + 1] = off[k] + size[k], sl[3 * k + 2] = 1;
        }
        out[d].t = zero ? lf_splat(c, type_of_shape(c, sh), 0) : lf_mk_slice(c, x->cls, sl);
        out[d].s = zero ? 1 : lf_scale_of(x);
        if (out[d].t == EID_NONE) return false;
    }
    return true;
}

/* op(a, b) at shape sh (a binary elementwise op). */
static eid binary(lift_ctx *c, int op, eid a, eid b, const shape *sh) {
    static const char *const names[] = {[OP_ADD] = "add", [OP_MULTIPLY] = "multiply", [OP_MAXIMUM] = "maximum",
                                        [OP_MINIMUM] = "minimum", [OP_AND] = "and", [OP_OR] = "or", [OP_XOR] = "xor"};
    hlo_instr g = {.name = names[op], .opname = names[op], .op = (uint16_t)op, .noperands = 2, .shape = *sh};
    eid ch[2] = {a, b};
    return lf_node(c, c->cur, &g, ch, 2, sh->dims, c->origin);
}

/* Parts p[0..k) at one factor: theirs where they share it (sums and
 * concatenations carry it), else each put back into its term. */
static double common_factor(lift_ctx *c, dterm *p, uint32_t k, uint32_t rank, bool linear) {
    /* (zeros are any factor times zeros) */
    double f = 0;
    bool same = linear;
    for (uint32_t q = 0; q < k && same; q++)
        if (!lf_class_is_zero(c, p[q].t)) same = f == 0 || p[q].s == f, f = f == 0 ? p[q].s : f;
    if (same) {
        f = f == 0 ? 1 : f;
        for (uint32_t q = 0; q < k; q++) p[q].s = f;
        return f;
    }
    for (uint32_t q = 0; q < k; q++) p[q] = (dterm){unscaled(c, p[q], rank), 1};
    return 1;
}

/* A collective over the devices' values ops (one operand). */
static bool collective(uctx *u, const hlo_instr *in, dterm *const *ops, dterm *out) {
    lift_ctx *c = u->c;
    const shape *sh = &in->shape;
    if (in->noperands != 1) return false;
    if (in->op == OP_COLLECTIVE_PERMUTE) {
        const char *bad;
        const int64_t *from = lf_permute_sources(c, in, &bad);
        if (!from) return false;
        dterm zero = {lf_splat(c, type_of_shape(c, sh), 0), 1};
        for (int64_t d = 0; d < u->n; d++) out[d] = from[d] >= 0 ? ops[0][from[d]] : zero;
        return zero.t != EID_NONE;
    }
    if (in->op != OP_ALL_REDUCE && in->op != OP_ALL_GATHER) return false;
    /* the groups as the collective lists them (graph.c): their order is an
     * all-gather's order */
    int64_t *ids = NULL, R = graph_num_replicas(c->dist);
    uint32_t *start = NULL, ng = 0;
    char why[160];
    if (R < 1 || !graph_device_groups(in, R, u->n / R, &ids, &start, &ng, why, sizeof why)) return false;
    uint32_t *group = arena_alloc(c->a, (size_t)u->n * sizeof *group);
    bool ok = true;
    for (int64_t d = 0; d < u->n; d++) group[d] = UINT32_MAX;
    for (uint32_t g = 0; g < ng; g++)
        for (uint32_t q = start[g]; q < start[g + 1]; q++)
            if (ids[q] >= 0 && ids[q] < u->n) group[ids[q]] = g;
    for (int64_t d = 0; d < u->n; d++) ok &= group[d] != UINT32_MAX;
    dterm *parts = arena_alloc(c->a, (size_t)u->n * sizeof *parts);
    eid *ts = arena_alloc(c->a, (size_t)u->n * sizeof *ts);
    int op = 0, red = RED_NONE;
    if (ok && in->op == OP_ALL_REDUCE) {
        static const int ops_of[] = {[RED_SUM] = OP_ADD, [RED_PROD] = OP_MULTIPLY, [RED_MAX] = OP_MAXIMUM,
                                     [RED_MIN] = OP_MINIMUM, [RED_AND] = OP_AND, [RED_OR] = OP_OR, [RED_XOR] = OP_XOR};
        red = instr_reducer(c->cur, in);
        ok = red > RED_NONE && red <= RED_XOR && (op = ops_of[red]) != 0;
    }
    uint32_t dim = (uint32_t)instr_int(in, A_DIMENSIONS, 0);
    for (int64_t d = 0; d < u->n && ok; d++) {
        const int64_t *m = ids + start[group[d]];
        uint32_t k = start[group[d] + 1] - start[group[d]], nz = 0;
        for (uint32_t p = 0; p < k; p++)
            if (in->op == OP_ALL_GATHER || op != OP_ADD || !lf_class_is_zero(c, ops[0][m[p]].t)) parts[nz++] = ops[0][m[p]];
        if (!nz) { /* zeros everywhere */
            out[d] = ops[0][m[0]];
            continue;
        }
        double f = common_factor(c, parts, nz, sh->rank, in->op == OP_ALL_GATHER || red == RED_SUM);
        for (uint32_t p = 0; p < nz; p++) ts[p] = parts[p].t;
        eid acc = ts[0];
        if (in->op == OP_ALL_GATHER) acc = dim < sh->rank ? lf_mk_concat(c, ts, nz, dim) : EID_NONE;
        else
            for (uint32_t p = 1; p < nz && acc != EID_NONE; p++) acc = binary(c, op, acc, ts[p], sh);
        ok = acc != EID_NONE;
        out[d] = (dterm){acc, f};
    }
    free(ids);
    free(start);
    return ok;
}

/* in over the terms ch of one device where a known predicate picks one of
 * them, or zeros make it zero or one of them (a stage's value masked off on
 * the devices that do not own it, and what that device computes from it);
 * EID_NONE otherwise. Products with zero are zero for finite values: assumed,
 * and said. */
static eid zero_rule(lift_ctx *c, const hlo_instr *in, const eid *ch) {
    /* a select on a predicate the device knows */
    if (in->op == OP_SELECT && in->noperands == 3) {
        if (lf_class_is_splat(c, ch[0], 1)) return ch[1];
        if (lf_class_is_splat(c, ch[0], 0)) return ch[2];
    }
    bool z[8] = {false}, any = false, all = true;
    for (uint32_t o = 0; o < in->noperands; o++) z[o] = lf_class_is_zero(c, ch[o]), any |= z[o], all &= z[o];
    if (!any) return EID_NONE;
    bool zero = false;
    switch (in->op) {
    case OP_ADD: return z[0] ? ch[1] : ch[0];
    case OP_SUBTRACT: if (z[1]) return ch[0]; zero = all; break;
    case OP_MULTIPLY: case OP_DOT: case OP_DIVIDE:
        zero = in->op == OP_DIVIDE ? z[0] : true;
        if (zero && !all) lf_assume(c, "values are finite where a device multiplies them by zeros it holds (per-device terms)");
        break;
    case OP_NEGATE: case OP_TRANSPOSE: case OP_RESHAPE: case OP_BITCAST: case OP_BROADCAST: case OP_SLICE: case OP_COPY:
    case OP_CONVERT: case OP_REVERSE: case OP_CONCATENATE: case OP_PAD: zero = all; break;
    case OP_DYNAMIC_SLICE: zero = z[0]; break;
    case OP_SELECT: zero = z[1] && z[2]; break;
    case OP_REDUCE: zero = all && in->noperands == 2 && instr_reducer(c->cur, in) == RED_SUM; break;
    default: break;
    }
    return zero ? lf_splat(c, type_of_shape(c, &in->shape), 0) : EID_NONE;
}

/* A dynamic-slice at offsets the device knows: the slice there (offsets
 * clamped as the op clamps them), as a baseline with static indices writes
 * it; EID_NONE otherwise. */
static eid known_slice(lift_ctx *c, const hlo_instr *in, const eid *ch) {
    uint32_t r;
    if (in->op != OP_DYNAMIC_SLICE || in->noperands < 2) return EID_NONE;
    const int64_t *xd = eg_type_dims(c->g, eg_class_type(c->g, ch[0]), &r);
    if (r > VIEW_MAX_RANK || in->noperands != r + 1 || in->shape.rank != r) return EID_NONE;
    int64_t sl[3 * VIEW_MAX_RANK];
    for (uint32_t k = 0; k < r; k++) {
        const interp_val *o = lf_kval(c, ch[k + 1]);
        if (!o || o->n != 1) return EID_NONE;
        int64_t at = (int64_t)interp_val_get(o, 0), len = in->shape.dims[k];
        at = at < 0 ? 0 : at > xd[k] - len ? xd[k] - len : at;
        sl[3 * k] = at, sl[3 * k + 1] = at + len, sl[3 * k + 2] = 1;
    }
    return lf_mk_slice(c, ch[0], sl);
}

/* in on one device, over its operands' values there: the op, its factors
 * taken as the walk takes them (lift_one: a product by a constant is a
 * factor, the scale plan of linear ops). */
static bool device_op(uctx *u, const hlo_instr *in, const dterm *x, dterm *out) {
    lift_ctx *c = u->c;
    lval ops[8];
    for (uint32_t o = 0; o < in->noperands; o++) {
        ops[o] = term(x[o].t, view_dup(u->comp->instrs[in->operands[o]].shape.rank), false);
        ops[o].scale = x[o].s == 1 ? 0 : x[o].s;
    }
    lstate st = {c, u->comp, in, ops, u->vals, NULL};
    lval r;
    if (lf_scale_take(&st, &r)) {
        *out = (dterm){r.cls, lf_scale_of(&r)};
        return r.kind == LV_TERM;
    }
    double f = lf_scale_plan(&st);
    eid ch[8];
    for (uint32_t o = 0; o < in->noperands; o++) {
        if (ops[o].kind != LV_TERM || lf_scale_of(&ops[o]) != 1) return false;
        ch[o] = ops[o].cls;
    }
    eid e = zero_rule(c, in, ch);
    if (e == EID_NONE) e = known_slice(c, in, ch);
    if (e == EID_NONE) e = lf_node(c, c->cur, in, ch, in->noperands, in->shape.dims, c->origin);
    if (e == EID_NONE) return false;
    *out = (dterm){e, lf_class_is_zero(c, e) ? 1 : f};
    return true;
}

/* The devices' values of instruction i from its operands'. */
static bool by_instr(uctx *u, uint32_t i, int depth, dterm *out) {
    lift_ctx *c = u->c;
    const hlo_instr *in = &u->comp->instrs[i];
    if (depth > UNROLL_DEPTH || !u->budget || in->shape.dtype == DT_TUPLE || in->shape.rank > VIEW_MAX_RANK ||
        in->noperands == 0 || in->noperands > 8)
        return false;
    u->budget--;
    if (in->op == OP_COPY || instr_is_identity_custom_call(in)) return terms_of(u, in->operands[0], depth + 1, out);
    switch (in->op) {
    case OP_WHILE: case OP_CALL: case OP_CONDITIONAL: case OP_TUPLE: case OP_GET_TUPLE_ELEMENT: case OP_CUSTOM_CALL:
    case OP_RNG: case OP_RNG_BIT_GENERATOR: case OP_PARAMETER:
        return false;
    default:
        break;
    }
    bool coll = in->op == OP_COLLECTIVE_PERMUTE || in->op == OP_ALL_REDUCE || in->op == OP_ALL_GATHER;
    if (hlo_op_is_collective(in->op) && !coll) return false;
    dterm *ops[8];
    for (uint32_t o = 0; o < in->noperands; o++) {
        ops[o] = arena_alloc(c->a, (size_t)u->n * sizeof **ops);
        if (!(depth == 0 && u->top ? operand_terms(u, o, ops[o]) : terms_of(u, in->operands[o], depth + 1, ops[o]))) {
            if (dbg_on(DBG_LIFT) && depth == 0)
                fprintf(stderr, "lift: %s: no per-device terms for operand %u (%s, kind %d%s)\n", in->name, o,
                        u->comp->instrs[in->operands[o]].name, u->top->ops[o].kind,
                        u->top->ops[o].kind == LV_TERM && u->top->ops[o].v.partial ? ", partial" : "");
            return false;
        }
    }
    if (coll) return collective(u, in, ops, out);
    dterm x[8];
    for (int64_t d = 0; d < u->n; d++) {
        bool same = d > 0;
        for (uint32_t o = 0; o < in->noperands; o++)
            x[o] = ops[o][d], same &= d > 0 && ops[o][d].t == ops[o][d - 1].t && ops[o][d].s == ops[o][d - 1].s;
        if (same) out[d] = out[d - 1];
        else if (!device_op(u, in, x, &out[d])) return false;
    }
    return true;
}

/* Ops that only move or retype their operand's elements: read up the graph
 * first (the baseline's slice, then its squeeze). */
static bool moves_data(int op) {
    return op == OP_RESHAPE || op == OP_BITCAST || op == OP_BROADCAST || op == OP_TRANSPOSE || op == OP_CONVERT ||
           op == OP_COPY;
}

/* Operand o of the instruction lifted (u->top): as the walk has it, with
 * the factor the scale plan left it (lift_one), or read up the graph where
 * the plan did not change its factor. */
static bool operand_terms(uctx *u, uint32_t o, dterm *out) {
    const lstate *s = u->top;
    uint32_t i = s->in->operands[o];
    const hlo_instr *oi = &u->comp->instrs[i];
    const lval *x = &s->ops[o], *was = &u->vals[i];
    bool planned = lf_scale_of(x) != lf_scale_of(was) || x->kind != was->kind;
    bool moves = moves_data(oi->op);
    if (!planned && moves && x->kind != LV_DEVT && terms_of(u, i, 1, out)) return true;
    if (from_value(u, x, oi, out)) return true;
    if (!terms_of(u, i, 1, out)) return false;
    /* the plan's copy stands for the value over the factor it took out */
    double r = lf_scale_of(x) / lf_scale_of(was);
    for (int64_t d = 0; d < u->n && planned; d++) out[d].s *= r;
    return true;
}

static bool terms_of(uctx *u, uint32_t i, int depth, dterm *out) {
    uint32_t at;
    if (u32map_get(&u->memo, i, &at)) {
        if (!at) return false;
        memcpy(out, u->seen[at - 1], (size_t)u->n * sizeof *out);
        return true;
    }
    const hlo_instr *in = &u->comp->instrs[i];
    const lval *x = &u->vals[i];
    bool moves = moves_data(in->op);
    bool ok = x->kind != LV_DEVT && moves && by_instr(u, i, depth, out);
    if (!ok) ok = from_value(u, x, in, out);
    if (!ok && x->kind != LV_DEVT && !moves) ok = by_instr(u, i, depth, out);
    if (!ok) {
        u32map_put(&u->memo, i, 0);
        return false;
    }
    dterm *keep = arena_alloc(u->c->a, (size_t)u->n * sizeof *keep);
    for (int64_t d = 0; d < u->n; d++) out[d].t = eg_find(u->c->g, out[d].t), keep[d] = out[d];
    XGROW(u->seen, u->capseen, u->nseen + 1);
    u->seen[u->nseen++] = keep;
    u32map_put(&u->memo, i, (uint32_t)u->nseen);
    return true;
}

/* ---- the value ---- */

/* Values t as one: replicated where every device holds the same, else the
 * devices' terms at one factor. */
static lval devt_value(lift_ctx *c, dterm *t, int64_t n, uint32_t rank) {
    bool same = true;
    for (int64_t d = 1; d < n && same; d++) same = eg_find(c->g, t[d].t) == eg_find(c->g, t[0].t) && t[d].s == t[0].s;
    if (same) {
        lval v = term(eg_find(c->g, t[0].t), view_dup(rank), false);
        v.scale = t[0].s == 1 ? 0 : t[0].s;
        return v;
    }
    double f = common_factor(c, t, (uint32_t)n, rank, true);
    lval v = {.kind = LV_DEVT, .n = (uint32_t)n, .cls = EID_NONE, .scale = f == 1 ? 0 : f};
    v.elems = arena_alloc(c->a, (size_t)n * sizeof *v.elems);
    for (int64_t d = 0; d < n; d++) {
        if (t[d].t == EID_NONE) return unknown();
        v.elems[d] = term(eg_find(c->g, t[d].t), view_dup(rank), false);
    }
    return v;
}

/* Whether instruction i drops a unit dim that its operand's view shards (a
 * device's block of one of a stacked value, squeezed), through copies and
 * converts. */
static bool squeezes_block(const lift_ctx *c, const hlo_comp *comp, const lval *vals, uint32_t i) {
    for (int hop = 0; hop < 4; hop++) {
        const hlo_instr *in = &comp->instrs[i];
        if ((in->op == OP_COPY || in->op == OP_CONVERT) && in->noperands == 1) {
            i = in->operands[0];
            continue;
        }
        if ((in->op != OP_RESHAPE && in->op != OP_BITCAST) || in->noperands != 1) return false;
        const hlo_instr *src = &comp->instrs[in->operands[0]];
        const lval *x = &vals[in->operands[0]];
        if (x->kind != LV_TERM || x->v.partial || src->shape.rank != x->v.rank || in->shape.rank >= src->shape.rank)
            return false;
        /* the dims kept, in order: a unit dim sharded is one the reshape drops */
        int64_t kept = 1, all = 1;
        for (uint32_t k = 0; k < in->shape.rank; k++) kept *= in->shape.dims[k];
        for (uint32_t k = 0; k < src->shape.rank; k++) all *= src->shape.dims[k];
        for (uint32_t k = 0; kept == all && k < src->shape.rank; k++)
            if (src->shape.dims[k] == 1 && x->v.dims[k].naxes && view_dim_parts(&x->v, c->mesh, k) > 1) return true;
        return false;
    }
    return false;
}

bool lf_unroll_stacked(lift_ctx *c, const lval *x) { return stacked_of(c, x) != EID_NONE; }

bool lf_unroll_wanted(const lstate *s) {
    const lift_ctx *c = s->c;
    if (c->baseline_mode || c->ndev < 2 || c->ndev > LIFT_UNROLL_MAX_DEV) return false;
    for (uint32_t o = 0; o < s->in->noperands; o++)
        if (squeezes_block(c, s->comp, s->vals, s->in->operands[o]) || stacked_of(s->c, &s->ops[o]) != EID_NONE)
            return true;
    return false;
}

bool lf_unroll_value(lift_ctx *c, const hlo_comp *comp, const lval *vals, uint32_t i, lval *out) {
    const hlo_instr *in = &comp->instrs[i];
    if (c->baseline_mode || c->ndev < 2 || c->ndev > LIFT_UNROLL_MAX_DEV || mesh_devices(c->mesh) != c->ndev ||
        in->shape.dtype == DT_TUPLE || in->shape.rank > VIEW_MAX_RANK)
        return false;
    uctx u = {.c = c, .comp = comp, .vals = vals, .n = c->ndev, .budget = UNROLL_BUDGET};
    dterm *t = arena_alloc(c->a, (size_t)u.n * sizeof *t);
    bool ok = by_instr(&u, i, 1, t);
    uctx_close(&u);
    if (!ok) return false;
    *out = devt_value(c, t, u.n, in->shape.rank);
    return out->kind != LV_UNKNOWN;
}

bool lf_unroll_instr(lstate *s, lval *out) {
    lift_ctx *c = s->c;
    const hlo_instr *in = s->in;
    if (c->baseline_mode || c->ndev < 2 || c->ndev > LIFT_UNROLL_MAX_DEV || mesh_devices(c->mesh) != c->ndev ||
        in->shape.dtype == DT_TUPLE || in->shape.rank > VIEW_MAX_RANK)
        return false;
    uctx u = {.c = c, .comp = s->comp, .vals = s->vals, .n = c->ndev, .top = s, .budget = UNROLL_BUDGET};
    dterm *t = arena_alloc(c->a, (size_t)u.n * sizeof *t);
    bool ok = by_instr(&u, (uint32_t)(in - s->comp->instrs), 0, t);
    uctx_close(&u);
    if (!ok) return false;
    *out = devt_value(c, t, u.n, in->shape.rank);
    if (dbg_on(DBG_VIEWS)) {
        strbuf w;
        sb_init(&w);
        for (int64_t d = 0; d < u.n; d++) {
            sb_printf(&w, "\n  device %lld (x%g): ", (long long)d, t[d].s);
            eg_print_term(&w, c->g, t[d].t, 3);
        }
        fprintf(stderr, "lift: %s per device:%s\n", in->name, w.s);
        sb_free(&w);
    }
    return out->kind != LV_UNKNOWN;
}

/* ---- settling into a view ---- */

/* The term that holds the parts ch[0..n) side by side along dim k: the op
 * over the operands side by side where every part is the same elementwise op,
 * one constant where every part is that constant, else their concatenation
 * (also the sum of the parts padded with zeros to the whole). */
static eid glue(lift_ctx *c, const eid *ch, uint32_t n, uint32_t k, int depth) {
    eid first = eg_find(c->g, ch[0]);
    uint32_t r;
    const int64_t *pd = eg_type_dims(c->g, eg_class_type(c->g, first), &r);
    int dt = eg_type_dtype(c->g, eg_class_type(c->g, first));
    if (k >= r || r > VIEW_MAX_RANK) return EID_NONE;
    int64_t dims[VIEW_MAX_RANK];
    memcpy(dims, pd, r * sizeof *dims);
    dims[k] = 0;
    for (uint32_t p = 0; p < n; p++) {
        uint32_t pr;
        const int64_t *qd = eg_type_dims(c->g, eg_class_type(c->g, ch[p]), &pr);
        if (pr != r || eg_type_dtype(c->g, eg_class_type(c->g, ch[p])) != dt) return EID_NONE;
        dims[k] += qd[k];
    }
    uint32_t whole = lf_type_of(c, dt, dims, r);
    bool same = true;
    for (uint32_t p = 1; p < n && same; p++) same = eg_find(c->g, ch[p]) == first;
    if (same) {
        lval x = term(first, view_dup(r), false);
        eid e = lf_scale_respread(c, &x, whole);
        if (e != EID_NONE) return e;
    }
    /* one elementwise op on every part: the op over the glued operands */
    for (eid node = eg_class_first(c->g, first); depth < 8 && node != EID_NONE; node = eg_class_next(c->g, node)) {
        uint16_t op = eg_node_op(c->g, node);
        uint32_t na;
        const eid *k0 = eg_node_children(c->g, node, &na);
        if (!graph_op_elementwise(op) || na == 0 || na > 4) continue;
        eid *kids[4];
        bool ok = true;
        for (uint32_t a = 0; a < na; a++) kids[a] = arena_alloc(c->a, n * sizeof **kids), kids[a][0] = k0[a];
        for (uint32_t p = 1; p < n && ok; p++) {
            const eid *kp = NULL;
            for (eid m = eg_class_first(c->g, eg_find(c->g, ch[p])); m != EID_NONE && !kp; m = eg_class_next(c->g, m)) {
                uint32_t nm;
                const eid *km = eg_node_children(c->g, m, &nm);
                if (eg_node_op(c->g, m) == op && nm == na && eg_node_attr(c->g, m) == eg_node_attr(c->g, node)) kp = km;
            }
            ok = kp != NULL;
            for (uint32_t a = 0; ok && a < na; a++) kids[a][p] = kp[a];
        }
        if (!ok) continue;
        eid gk[4];
        for (uint32_t a = 0; a < na && ok; a++) ok = (gk[a] = glue(c, kids[a], n, k, depth + 1)) != EID_NONE;
        if (!ok) continue;
        eid e = eg_add(c->g, op, eg_node_attr(c->g, node), whole, gk, na, c->origin);
        return eg_find(c->g, e);
    }
    eid cat = lf_mk_concat(c, ch, n, k);
    if (cat == EID_NONE || n > 16) return cat;
    /* the sum of the parts padded with zeros (a gradient of slices), added
     * up first to last and last to first (a backward pass reaches the last
     * slice first); long sums of large terms are not reassociated by the
     * rules (rules/README.md, AC guard) */
    eid *pads = arena_alloc(c->a, n * sizeof *pads);
    int64_t at = 0;
    shape sh = {.dtype = (uint8_t)dt, .rank = r, .dims = dims};
    for (uint32_t p = 0; p < n; p++) {
        uint32_t pr;
        int64_t len = eg_type_dims(c->g, eg_class_type(c->g, ch[p]), &pr)[k];
        if ((pads[p] = lf_zero_pad(c, ch[p], k, at, dims[k] - at - len)) == EID_NONE) return cat;
        at += len;
    }
    for (int dir = 0; dir < 2; dir++) {
        eid sum = pads[dir ? n - 1 : 0];
        for (uint32_t q = 1; q < n && sum != EID_NONE; q++) sum = binary(c, OP_ADD, sum, pads[dir ? n - 1 - q : q], &sh);
        if (sum != EID_NONE && eg_class_type(c->g, sum) == eg_class_type(c->g, cat)) eg_union(c->g, cat, sum, NULL);
    }
    return eg_find(c->g, cat);
}

/* The device holding block b[k] along every dim k that v shards (coordinate
 * 0 on the other axes). */
static int64_t block_device(const lift_ctx *c, const view *v, const int64_t *b) {
    const mesh *ms = c->mesh;
    int64_t coord[MESH_MAX_AXES] = {0};
    for (uint32_t k = 0; k < v->rank; k++) {
        int64_t idx = b[k];
        for (uint32_t a = v->dims[k].naxes; a-- > 0;) {
            int ax = v->dims[k].axes[a];
            coord[ax] = idx % ms->sizes[ax];
            idx /= ms->sizes[ax];
        }
    }
    int64_t d = 0;
    for (uint32_t a = 0; a < ms->naxes; a++) d = d * ms->sizes[a] + coord[a];
    return d;
}

/* The whole term of parts t under v, dims from `level` on (blocks b fixed
 * before it). */
static eid glue_view(lift_ctx *c, const eid *t, const view *v, int64_t *b, uint32_t level) {
    while (level < v->rank && !v->dims[level].naxes) level++;
    if (level >= v->rank) return t[block_device(c, v, b)];
    int64_t parts = view_dim_parts(v, c->mesh, level);
    if (parts < 1 || parts > 64) return EID_NONE;
    eid ch[64];
    for (int64_t p = 0; p < parts; p++) {
        b[level] = p;
        if ((ch[p] = glue_view(c, t, v, b, level + 1)) == EID_NONE) return EID_NONE;
    }
    b[level] = 0;
    return glue(c, ch, (uint32_t)parts, level, 0);
}

bool lift_unroll_settle(lift_ctx *c, const shape *local, const view *want, lval *x) {
    if (x->kind != LV_DEVT) return false;
    lf_unscale(c, x);
    if (x->kind != LV_DEVT) return false;
    const mesh *ms = c->mesh;
    int64_t n = x->n;
    uint32_t r = local->rank;
    eid *t = arena_alloc(c->a, (size_t)n * sizeof *t);
    for (int64_t d = 0; d < n; d++) t[d] = eg_find(c->g, x->elems[d].cls);
    /* the axes the terms vary along */
    uint32_t vary = 0;
    for (uint32_t a = 0; a < ms->naxes; a++) {
        int64_t stride = 1;
        for (uint32_t q = a + 1; q < ms->naxes; q++) stride *= ms->sizes[q];
        for (int64_t d = 0; d < n && !(vary >> a & 1); d++)
            if (t[d] != t[d - mesh_coord(ms, d, (int)a) * stride]) vary |= 1u << a;
    }
    if (want->partial || want->rank != r || (view_sharded_axes(want) & vary) != vary) {
        *x = unknown();
        return false;
    }
    view v = *want;
    int64_t b[VIEW_MAX_RANK] = {0};
    eid g = glue_view(c, t, &v, b, 0);
    if (g == EID_NONE) {
        *x = unknown();
        return false;
    }
    if (dbg_on(DBG_LIFT)) {
        strbuf w;
        sb_init(&w);
        for (int64_t d = 0; d < n; d++) {
            sb_printf(&w, "\n  device %lld: ", (long long)d);
            eg_print_term(&w, c->g, t[d], 8);
        }
        sb_puts(&w, "\n  glued: ");
        eg_print_term(&w, c->g, g, 8);
        fprintf(stderr, "lift: per-device terms settled%s\n", w.s);
        sb_free(&w);
    }
    *x = term(g, v, false);
    return true;
}
