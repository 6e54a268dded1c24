/* lift_table — a replicated table beside a sharded operand (lift_int.h,
 * lf_tiled_table).
 *
 * An elementwise op whose operands are a value sharded along some dims and a
 * table every device computes alike from constants (an iota of the local
 * length and elementwise ops, broadcasts and unit reshapes over it: rope
 * angles, a causal mask, a one-hot's class ids) meets, globally, the table
 * tiled along those dims: device r's block of the result is the op over its
 * block and the table. That reading is exact.
 *
 * The baseline computes its table over global positions. The same chain of
 * ops at the global dims (the iota of the whole dim) is built and, when the
 * baseline has the op over the other operands and that table, compared
 * value by value with the tiling: equal (a table periodic in the block: the
 * positions within a block of block-local attention), the two constants are
 * one class; different, each device used the first block's values where the
 * baseline uses its own (an offset left out), and the op differs from the
 * baseline's wherever the other operand is non-zero — a proved difference
 * (lift_scale.c) the lifting carries to the outputs through the ops that
 * keep one. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "interp.h"
#include "lift.h"
#include "lift_int.h"

enum { CHAIN_DEPTH = 16 };

/* The dims of operand os of a reshape y to dims g of y: y only inserts or
 * removes unit dims (the non-unit dims of both, in order, the same sizes),
 * the non-unit dims taking g's sizes; false otherwise. */
static bool unit_reshape_dims(const shape *os, const shape *ys, const int64_t *g, int64_t *og) {
    uint32_t j = 0;
    for (uint32_t i = 0; i < os->rank; i++) {
        if (os->dims[i] == 1) {
            og[i] = 1;
            continue;
        }
        while (j < ys->rank && ys->dims[j] == 1) {
            if (g[j] != 1) return false;
            j++;
        }
        if (j == ys->rank || ys->dims[j] != os->dims[i]) return false;
        og[i] = g[j++];
    }
    for (; j < ys->rank; j++)
        if (ys->dims[j] != 1 || g[j] != 1) return false;
    return true;
}

/* The frame of the call whose callee is comp (lift.c pushes them), or NULL. */
static const lf_call_frame *frame_of(const lf_call_frame *f, const hlo_comp *comp) {
    return f && f->callee == comp ? f : NULL;
}

/* Instruction i of computation comp (f: the call being lifted into it, or
 * NULL), a constant-only chain, computed at dims g (its own dims: the table
 * as each device has it; wider ones: the same ops over global positions):
 * its term in *cls, its values in *val (the caller frees them). A parameter
 * of a called computation is the call's operand, read on in the caller (a
 * bounds check inside jnp.take's call of positions made from an iota).
 * False when the chain holds anything else, or is too large. */
static bool chain_at(lstate *s, const hlo_comp *comp, const lf_call_frame *f, uint32_t i, const int64_t *g, int depth,
                     eid *cls, interp_val **val) {
    lift_ctx *c = s->c;
    const hlo_instr *y = &comp->instrs[i];
    uint32_t rank = y->shape.rank;
    if (depth > CHAIN_DEPTH || y->shape.dtype == DT_TUPLE || rank > VIEW_MAX_RANK || !lf_fold_size_ok(g, rank) ||
        y->noperands > 3)
        return false;
    bool same = !rank || !memcmp(g, y->shape.dims, rank * sizeof *g);
    eid ch[3];
    interp_val *ops[3] = {NULL, NULL, NULL};
    bool ok = true;
    if (y->op == OP_PARAMETER) {
        int64_t p = instr_int(y, A_PARAMETER_NUMBER, 0);
        return f && p >= 0 && (uint64_t)p < f->call->noperands &&
               chain_at(s, f->comp, frame_of(f->up, f->comp), f->call->operands[p], g, depth + 1, cls, val);
    } else if (y->op == OP_CALL) {
        /* its callee's result, the callee's parameters its operands */
        const hlo_comp *callee = instr_callee(c->cur, y, A_TO_APPLY, 0);
        if (!callee) return false;
        lf_call_frame inner = {comp, callee, y, f};
        return callee->instrs[callee->root].shape.rank == rank &&
               chain_at(s, callee, &inner, callee->root, g, depth + 1, cls, val);
    } else if (y->op == OP_CONSTANT) {
        /* its own term, as the walk makes it (lift.c) */
        if (!same) return false;
        *val = interp_eval_instr(c->cur, y, NULL, NULL);
        if (*val) *cls = lf_node(c, c->cur, y, NULL, 0, y->shape.dims, c->origin);
        return *val != NULL;
    } else if (y->op == OP_BROADCAST && y->noperands == 1) {
        uint32_t nd;
        const int64_t *bd = instr_ints(y, A_DIMENSIONS, &nd);
        int64_t og[VIEW_MAX_RANK];
        const shape *os = &comp->instrs[y->operands[0]].shape;
        if (nd != os->rank || os->rank > VIEW_MAX_RANK) return false;
        for (uint32_t k = 0; k < nd; k++) {
            if (bd[k] < 0 || (uint64_t)bd[k] >= rank) return false;
            og[k] = g[bd[k]];
        }
        ok = chain_at(s, comp, f, y->operands[0], og, depth + 1, &ch[0], &ops[0]);
    } else if ((y->op == OP_RESHAPE || y->op == OP_BITCAST) && y->noperands == 1) {
        int64_t og[VIEW_MAX_RANK];
        const shape *os = &comp->instrs[y->operands[0]].shape;
        ok = os->rank <= VIEW_MAX_RANK && unit_reshape_dims(os, &y->shape, g, og) &&
             chain_at(s, comp, f, y->operands[0], og, depth + 1, &ch[0], &ops[0]);
    } else if (y->op == OP_IOTA) {
        ok = y->noperands == 0;
    } else if (y->op == OP_REDUCE && y->noperands == 2 && same) {
        /* at its own dims only (a reduce_and of comparisons: a bounds check) */
        const hlo_instr *x = &comp->instrs[y->operands[0]];
        ok = chain_at(s, comp, f, y->operands[0], x->shape.dims, depth + 1, &ch[0], &ops[0]) &&
             chain_at(s, comp, f, y->operands[1], NULL, depth + 1, &ch[1], &ops[1]);
    } else if (graph_op_elementwise(y->op) && y->noperands > 0) {
        for (uint32_t k = 0; k < y->noperands && ok; k++) {
            const shape *os = &comp->instrs[y->operands[k]].shape;
            /* select and clamp take scalars beside arrays: they stay scalars */
            ok = os->rank == rank ? chain_at(s, comp, f, y->operands[k], g, depth + 1, &ch[k], &ops[k])
                 : os->rank == 0 && (y->op == OP_SELECT || y->op == OP_CLAMP) &&
                       chain_at(s, comp, f, y->operands[k], NULL, depth + 1, &ch[k], &ops[k]);
        }
    } else {
        ok = false;
    }
    if (ok) {
        hlo_instr gi = *y;
        gi.shape.dims = (int64_t *)g;
        gi.shape.dynamic = NULL;
        *val = interp_eval_instr(c->cur, &gi, ops, NULL);
        ok = *val != NULL;
        if (ok) *cls = lf_node(c, c->cur, y, ch, y->noperands, g, c->origin);
    }
    for (uint32_t k = 0; k < 3; k++) interp_val_free(ops[k]);
    return ok;
}

interp_val *lf_chain_values(lstate *s, uint32_t i) {
    lift_ctx *c = s->c;
    const hlo_instr *y = &s->comp->instrs[i];
    eid cls;
    interp_val *val = NULL;
    if (y->shape.rank > VIEW_MAX_RANK) return NULL;
    /* The same term at the same local dims has the same values (a mask every
     * layer reads up through its call): read once, kept by class. */
    const lval *v = &s->vals[i];
    uint32_t key[2], hit;
    bool keyed = (v->kind == LV_TERM || v->kind == LV_PW) && v->cls != EID_NONE;
    if (keyed) {
        key[0] = eg_find(c->g, v->cls);
        key[1] = lf_type_of(c, y->shape.dtype, y->shape.dims, y->shape.rank);
        if (strmap_get(&c->chains, (const char *)key, sizeof key, &hit))
            return hit ? interp_val_ref(c->chain_vals[hit - 1]) : NULL;
    }
    if (!chain_at(s, s->comp, frame_of(c->frames, s->comp), i, y->shape.dims, 0, &cls, &val)) val = NULL;
    if (keyed) {
        hit = 0;
        if (val) {
            XGROW(c->chain_vals, c->capchain_vals, c->nchain_vals + 1);
            c->chain_vals[c->nchain_vals++] = interp_val_ref(val);
            hit = c->nchain_vals;
        }
        strmap_put(&c->chains, arena_memdup(c->a, key, sizeof key), sizeof key, hit);
    }
    return val;
}

interp_val *lf_tiled_values(const interp_val *a, const int64_t *g) {
    interp_val *t = interp_val_new(a->dtype, a->rank, g);
    if (!t) return NULL;
    for (int64_t e = 0; e < t->n; e++) {
        int64_t rem = e, src = 0, stride = 1;
        for (uint32_t d = a->rank; d-- > 0;) {
            int64_t i = rem % g[d];
            rem /= g[d];
            src += (i % a->dims[d]) * stride;
            stride *= a->dims[d];
        }
        interp_val_set(t, e, interp_val_get(a, src));
    }
    return t;
}

static bool same_values(const interp_val *a, const interp_val *b) {
    if (a->n != b->n) return false;
    for (int64_t k = 0; k < a->n; k++) {
        double x = interp_val_get(a, k), y = interp_val_get(b, k);
        if (x != y && !(isnan(x) && isnan(y))) return false;
    }
    return true;
}

/* Whether every dim of v is either whole or sharded as in want. */
static bool within(const view *v, const view *want) {
    if (v->rank != want->rank) return false;
    for (uint32_t d = 0; d < v->rank; d++)
        if (v->dims[d].naxes && !lf_same_dim(&v->dims[d], &want->dims[d])) return false;
    return true;
}

/* lf_tiled_table where the table is no chain of constants and iotas here (a
 * rotary table gathered at positions, or gathered back from every device's
 * part), or is sharded as want along some dims and whole along the others:
 * its values read off its term (global under its own view), tiled along
 * the dims want shards and it does not. Nothing is known of it over global
 * positions there, so it stands as the tiled literal alone. */
static bool tiled_by_values(lstate *s, const view *want, int table, bool assumed, lval *out) {
    lift_ctx *c = s->c;
    const hlo_instr *in = s->in;
    uint32_t n = in->noperands, rank = in->shape.rank;
    const lval *x = &s->ops[table];
    int64_t g[VIEW_MAX_RANK], gout[VIEW_MAX_RANK], own[VIEW_MAX_RANK];
    const shape *ts = &s->comp->instrs[in->operands[table]].shape;
    lf_global_dims(c, want, ts, g);
    lf_global_dims(c, &x->v, ts, own);
    lf_global_dims(c, want, &in->shape, gout);
    interp_val *kv = lf_class_values(c, x->cls), *tv = NULL;
    if (kv && kv->rank == rank && memcmp(kv->dims, own, rank * sizeof *own) == 0) tv = lf_tiled_values(kv, g);
    interp_val_free(kv);
    if (!tv) return false;
    eid ch[3];
    for (uint32_t o = 0; o < n; o++) ch[o] = (int)o == table ? lf_const_term(c, tv, c->origin) : s->ops[o].cls;
    *out = term(lf_node(c, c->cur, in, ch, n, gout, c->origin), *want, assumed);
    return true;
}

bool lf_tiled_table(lstate *s, const view *want, lval *out) {
    lift_ctx *c = s->c;
    const hlo_instr *in = s->in;
    uint32_t n = in->noperands, rank = in->shape.rank;
    if (c->baseline_mode || !graph_op_elementwise(in->op) || n < 2 || n > 3 || rank == 0 || rank > VIEW_MAX_RANK ||
        want->partial || want->rank != rank || view_is_dup(want))
        return false;
    int table = -1;
    bool assumed = false;
    for (uint32_t o = 0; o < n; o++) {
        const lval *x = &s->ops[o];
        const shape *os = &s->comp->instrs[in->operands[o]].shape;
        if (x->kind != LV_TERM || x->v.partial || lf_scale_of(x) != 1 || os->rank != rank) return false;
        if ((x->konst || lf_kval(c, x->cls)) && !lf_same_sharding(&x->v, want) && within(&x->v, want)) {
            if (table >= 0) return false;
            table = (int)o;
        } else if (!lf_same_sharding(&x->v, want)) {
            return false;
        }
        assumed |= x->assumed;
    }
    if (table < 0) return false;
    if (!view_is_dup(&s->ops[table].v)) return tiled_by_values(s, want, table, assumed, out);
    uint32_t ti = in->operands[table];
    const shape *ts = &s->comp->instrs[ti].shape;
    int64_t g[VIEW_MAX_RANK], gout[VIEW_MAX_RANK];
    lf_global_dims(c, want, ts, g);
    lf_global_dims(c, want, &in->shape, gout);
    eid lcls, gcls;
    interp_val *lv = NULL, *gv = NULL, *tv = NULL;
    const lf_call_frame *f = frame_of(c->frames, s->comp);
    bool ok = chain_at(s, s->comp, f, ti, ts->dims, 0, &lcls, &lv) && chain_at(s, s->comp, f, ti, g, 0, &gcls, &gv) && (tv = lf_tiled_values(lv, g)) != NULL;
    if (!ok) {
        interp_val_free(lv), interp_val_free(gv), interp_val_free(tv);
        return tiled_by_values(s, want, table, assumed, out);
    }
    bool equal = same_values(tv, gv);
    interp_val_free(lv), interp_val_free(gv);
    eid tcls = lf_const_term(c, tv, c->origin); /* takes tv */
    eid ch[3];
    for (uint32_t o = 0; o < n; o++) ch[o] = (int)o == table ? tcls : s->ops[o].cls;
    if (equal) eg_union(c->g, tcls, gcls, NULL); /* the same values: one constant */
    *out = term(lf_node(c, c->cur, in, ch, n, gout, c->origin), *want, assumed);
    if (equal) return true;
    /* The baseline's op over the other operands and the table over global
     * positions, if it has that op: then the two differ here. */
    ch[table] = gcls;
    eid b = eg_lookup(c->g, in->op, lf_encode_attrs(c, c->cur, in), lf_type_of(c, in->shape.dtype, gout, rank), ch, n);
    if (b == EID_NONE || !(eg_class_origin(c->g, b) & EG_BASELINE)) return true;
    strbuf w;
    sb_init(&w);
    sb_printf(&w, "%s takes a table every device computes over its own local positions (%s, the same on every device) "
                  "beside a value sharded along it, where the baseline computes it over the whole dimension: each device "
                  "uses the first block's values, an offset left out",
              in->name, s->comp->instrs[ti].name);
    lf_prove_difference(c, out, KIND_WRONG_SHARD_DIM, s->comp, in, arena_strdup(c->a, w.s), b);
    sb_free(&w);
    return true;
}
