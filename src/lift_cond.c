/* lift_cond — conditionals (lax.cond, lax.switch) on both sides.
 * Owns lf_lift_conditional: each branch computation is lifted like a called
 * computation over its own operand's value, and the results are put together
 * as the choice among them, spelt the same way on both sides:
 *   pred selector:  select(p, r0, r1)           (true picks branch 0)
 *   s32 selector i: select(i == 0, r0, select(i == 1, r1, ... r(n-1)))
 * (an index outside [0, n) picks the last branch, as HLO says, and only
 * branch k is picked where i == k). HLO values are pure, so evaluating every
 * branch and picking one is the conditional's value.
 *
 * On the mesh each device runs the branch its own selector picks. When the
 * selector is the same on every device (a replicated value, or a device
 * table equal everywhere), every device runs the same branch k, so its value
 * is V_r(r_k) when every branch's result has the same view V: the choice
 * among the branches' terms under V (a partial view too: the reduction over
 * devices of one branch's pieces is that branch's term). A selector that
 * differs between devices (a device table: lax.cond on axis_index) picks a
 * branch per device (by_device): one value everywhere is that value, one
 * value on some devices and zeros on the others a partial sum of it.
 * Anything else, or branches whose results have different views, is
 * declined (unverified), never a finding: the branch not taken decides
 * nothing about the value. */
#include "lift.h"
#include "lift_int.h"

#include "interp.h"

#include <stdlib.h>
#include <string.h>

/* The branch computations of conditional `in` (true/false or a list), and
 * whether the selector is a predicate. */
static uint32_t branches_of(const hlo_instr *in, int64_t *out, uint32_t cap, bool *pred) {
    const hlo_attr *ba = instr_attr(in, A_BRANCH_COMPUTATIONS);
    if (ba) {
        *pred = false;
        if (ba->n > cap) return 0;
        memcpy(out, ba->v.ints, ba->n * sizeof *out);
        return ba->n;
    }
    const hlo_attr *t = instr_attr(in, A_TRUE_COMPUTATION), *f = instr_attr(in, A_FALSE_COMPUTATION);
    if (!t || !f || cap < 2) return 0;
    *pred = true;
    out[0] = t->v.ints[0];
    out[1] = f->v.ints[0];
    return 2;
}

/* The selector's plain term when it is the same on every device, else
 * EID_NONE. */
static eid selector_term(lift_ctx *c, const hlo_comp *comp, const hlo_instr *in, const lval *vals) {
    lval x = vals[in->operands[0]];
    const hlo_instr *xi = &comp->instrs[in->operands[0]];
    if (xi->shape.rank != 0) return EID_NONE;
    if (x.kind == LV_DEV) return lf_dev_uniform(c, &x) ? lf_dev_constant(c, xi, &x) : EID_NONE;
    if (lf_is_index(&x) && !lf_index_as_term(c, &x)) return EID_NONE;
    lf_unscale(c, &x);
    if (x.kind != LV_TERM || x.assumed || x.cls == EID_NONE || x.v.partial || !view_is_dup(&x.v)) return EID_NONE;
    return x.cls;
}

/* select(p, a, b) with a scalar predicate p over a and b of one type. */
static eid mk_select(lift_ctx *c, eid p, eid a, eid b) {
    uint32_t t = eg_class_type(c->g, a), rank;
    const int64_t *td = eg_type_dims(c->g, t, &rank);
    int64_t dims[VIEW_MAX_RANK];
    if (rank > VIEW_MAX_RANK) return EID_NONE;
    memcpy(dims, td, rank * sizeof *dims);
    eid bp = p;
    if (rank) {
        int64_t none[1] = {0}; /* dimensions={}: no dims (a pointer all the same, for the copy) */
        hlo_attr at = {.key = A_DIMENSIONS, .kind = K_INTS, .n = 0, .v.ints = none};
        hlo_instr g = {.name = "broadcast", .opname = "broadcast", .op = OP_BROADCAST, .nattrs = 1, .noperands = 1,
                       .attrs = &at};
        g.shape.dtype = DT_PRED;
        g.shape.rank = rank;
        g.shape.dims = dims;
        bp = lf_node(c, c->cur, &g, &p, 1, dims, c->origin);
    }
    hlo_instr s = {.name = "select", .opname = "select", .op = OP_SELECT, .noperands = 3};
    s.shape.dtype = (uint8_t)eg_type_dtype(c->g, t);
    s.shape.rank = rank;
    s.shape.dims = dims;
    eid ch[3] = {bp, a, b};
    return lf_node(c, c->cur, &s, ch, 3, dims, c->origin);
}

/* compare(i, k, EQ) for a scalar integer selector i. */
static eid mk_is(lift_ctx *c, eid i, int64_t k) {
    uint32_t t = eg_class_type(c->g, i);
    int dt = eg_type_dtype(c->g, t);
    interp_val *kv = interp_val_new(dt, 0, NULL);
    if (kv->f) kv->f[0] = (double)k;
    else kv->i[0] = k;
    eid kc = lf_const_term(c, kv, c->origin);
    hlo_attr at = {.key = A_DIRECTION, .kind = K_IDENT, .n = 1, .v.str = "EQ"};
    hlo_instr g = {.name = "compare", .opname = "compare", .op = OP_COMPARE, .nattrs = 1, .noperands = 2, .attrs = &at};
    g.shape.dtype = DT_PRED;
    eid ch[2] = {i, kc};
    return lf_node(c, c->cur, &g, ch, 2, NULL, c->origin);
}

/* The branch a selector value v picks: a predicate's true the first, an
 * index outside [0, n) the last (as HLO says). */
static uint32_t branch_of(double v, bool pred, uint32_t n) {
    if (pred) return v != 0 ? 0 : 1;
    return v < 0 || v >= (double)n ? n - 1 : (uint32_t)v;
}

/* Whether branch result x holds one value on every device and element (a
 * replicated splat term, or a device value the same everywhere): *v. */
static bool branch_splat(lift_ctx *c, const lval *x, double *v) {
    double k;
    if (x->kind == LV_TERM && x->cls != EID_NONE && view_is_dup(&x->v) && lf_class_splat_value(c, x->cls, &k)) {
        if (v) *v = k;
        return true;
    }
    if (!lf_dev_splat(x, c->ndev)) return false;
    if (v) *v = x->dev[0];
    return true;
}

/* The choice among the branches' results r[0..n) (terms of one view), or
 * why not (NULL: done). */
static const char *choose(lift_ctx *c, eid sel, bool pred, const lval *r, uint32_t n, lval *out) {
    if (r[0].kind == LV_TUPLE) {
        for (uint32_t k = 1; k < n; k++)
            if (r[k].kind != LV_TUPLE || r[k].n != r[0].n) return "branches return different tuples";
        out->kind = LV_TUPLE;
        out->n = r[0].n;
        out->elems = arena_alloc(c->a, (out->n + 1) * sizeof *out->elems);
        lval *e = arena_alloc(c->a, n * sizeof *e);
        for (uint32_t j = 0; j < r[0].n; j++) {
            for (uint32_t k = 0; k < n; k++) e[k] = r[k].elems[j];
            const char *why = choose(c, sel, pred, e, n, &out->elems[j]);
            if (why) return why;
        }
        return NULL;
    }
    /* A replicated splat (a skipped branch's zeros, its false flags) is the
     * same splat under any view: read under another branch's, at that
     * branch's global type (the results' local shapes are one). */
    lval *rr = NULL;
    uint32_t ref = n;
    for (uint32_t k = 0; k < n && ref == n; k++)
        if (r[k].kind == LV_TERM && r[k].cls != EID_NONE && !r[k].v.partial && !branch_splat(c, &r[k], NULL)) ref = k;
    for (uint32_t k = 0; k < n && ref < n; k++) {
        double x;
        if (k == ref || (r[k].kind == LV_TERM && view_equal(&r[k].v, &r[ref].v)) || !branch_splat(c, &r[k], &x)) continue;
        if (!rr) rr = arena_memdup(c->a, r, n * sizeof *r);
        rr[k] = term(lf_splat(c, eg_class_type(c->g, r[ref].cls), x), r[ref].v, false);
        rr[k].konst = true;
    }
    if (rr) r = rr;
    for (uint32_t k = 0; k < n; k++)
        if (r[k].kind != LV_TERM || r[k].cls == EID_NONE) return "a branch's result is no term under a view";
    for (uint32_t k = 0; k < n; k++) {
        if (!view_equal(&r[k].v, &r[0].v)) return "the branches leave their results under different views";
        if (eg_class_type(c->g, r[k].cls) != eg_class_type(c->g, r[0].cls)) return "the branches' terms differ in type";
    }
    const interp_val *sv = lf_kval(c, sel);
    eid acc;
    if (sv && sv->n == 1) {
        /* a known selector picks its branch */
        acc = r[branch_of(sv->f ? sv->f[0] : (double)sv->i[0], pred, n)].cls;
    } else if (pred) {
        acc = mk_select(c, sel, r[0].cls, r[1].cls);
    } else {
        acc = r[n - 1].cls;
        for (uint32_t k = n - 1; k-- > 0 && acc != EID_NONE;) acc = mk_select(c, mk_is(c, sel, k), r[k].cls, acc);
    }
    if (acc == EID_NONE) return "a branch's result has too many dims";
    bool assumed = false, konst = true;
    for (uint32_t k = 0; k < n; k++) assumed |= r[k].assumed, konst &= r[k].konst;
    *out = term(acc, r[0].v, assumed);
    out->konst = konst;
    out->ambiguous = r[0].ambiguous;
    return NULL;
}

/* A selector that differs between devices (lax.cond on axis_index: only
 * device 0 computes a metric, the first pipeline stage reads the input):
 * result element by element, every device's branch gives the same value,
 * or one value on some devices and zeros on the others — then the value is
 * a partial sum of it (lf_picked_partial), complete once summed over the
 * devices that vary. Anything else is declined, never a finding. */
static lval by_device(lift_ctx *c, const hlo_comp *comp, const hlo_instr *in, const lval *sel, bool pred, const lval *r,
                      uint32_t n) {
    int64_t nd = c->ndev;
    uint32_t *pick = arena_alloc(c->a, (size_t)nd * sizeof *pick);
    for (int64_t d = 0; d < nd; d++) pick[d] = branch_of(sel->dev[d], pred, n);
    bool tuple = r[0].kind == LV_TUPLE;
    uint32_t ne = tuple ? r[0].n : 1;
    for (uint32_t k = 1; k < n; k++)
        if ((r[k].kind == LV_TUPLE) != tuple || (tuple && r[k].n != ne)) goto decline;
    lval out = tuple ? (lval){.kind = LV_TUPLE, .n = ne, .elems = arena_alloc(c->a, (ne + 1) * sizeof(lval))} : unknown();
    uint8_t *picked = arena_alloc(c->a, (size_t)nd);
    for (uint32_t j = 0; j < ne; j++) {
        const lval *x = NULL;  /* the one non-zero value the devices' branches give */
        bool ok = true;
        for (int64_t d = 0; d < nd && ok; d++) {
            const lval *e = tuple ? &r[pick[d]].elems[j] : &r[pick[d]];
            bool zero = e->kind == LV_TERM && !e->v.partial && e->cls != EID_NONE && lf_class_is_zero(c, e->cls);
            picked[d] = !zero;
            if (zero) continue;
            ok = e->kind == LV_TERM && e->cls != EID_NONE &&
                 (!x || (eg_find(c->g, x->cls) == eg_find(c->g, e->cls) && view_equal(&x->v, &e->v) &&
                         lf_scale_of(x) == lf_scale_of(e)));
            if (!x) x = e;
        }
        lval v;
        bool all = true;
        for (int64_t d = 0; d < nd; d++) all &= picked[d] != 0;
        if (ok && x && all) v = *x;
        else if (!ok || !x || !lf_picked_partial(c, picked, x, in, &v)) goto decline;
        if (tuple) out.elems[j] = v;
        else out = v;
    }
    return out;
decline:
    lf_unsupported(c, comp, in,
                   "%s: its branch selector differs between devices and the branches they run give values no view "
                   "relates (each device runs its own branch)", in->name);
    return unknown();
}

lval lf_lift_conditional(lift_ctx *c, const hlo_comp *comp, const hlo_instr *in, const lval *vals) {
    const hlo_module *m = c->cur;
    int64_t br[64];
    bool pred = false;
    uint32_t n = branches_of(in, br, 64, &pred);
    if (n == 0 || in->noperands != n + 1) {
        lf_unsupported(c, comp, in, "%s: a conditional of more than 64 branches is not modelled", in->name);
        return unknown();
    }
    eid sel = selector_term(c, comp, in, vals);
    const lval *dsel = &vals[in->operands[0]];
    bool per_device = sel == EID_NONE && dsel->kind == LV_DEV && dsel->count == 1 && dsel->dev &&
                      comp->instrs[in->operands[0]].shape.rank == 0;
    if (sel == EID_NONE && !per_device) {
        lf_unsupported(c, comp, in,
                       "%s: its branch selector may differ between devices (each device would run its own branch)",
                       in->name);
        return unknown();
    }
    lval *r = arena_alloc(c->a, n * sizeof *r);
    c->depth++;
    for (uint32_t k = 0; k < n; k++) {
        lval arg = vals[in->operands[k + 1]];
        lf_scale_forget(&arg);
        r[k] = lf_lift_comp(c, &m->comps[br[k]], &arg, NULL, 0);
        lf_unscale(c, &r[k]);
        lf_scale_forget(&r[k]);
    }
    c->depth--;
    for (uint32_t k = 0; k < n; k++)
        if (r[k].kind == LV_UNKNOWN) return unknown(); /* said where the branch left it */
    if (per_device) return by_device(c, comp, in, dsel, pred, r, n);
    lval out = unknown();
    const char *why = choose(c, sel, pred, r, n, &out);
    if (why) {
        lf_unsupported(c, comp, in, "%s: %s", in->name, why);
        return unknown();
    }
    /* Branches that each give baseline values, chosen among into none (the
     * branches in another order): the first divergence is the choice. */
    bool inside = true, outside = false;
    for (uint32_t k = 0; k < n && r[k].kind == LV_TERM; k++) inside &= (eg_class_origin(c->g, r[k].cls) & EG_BASELINE) != 0;
    if (out.kind == LV_TERM) outside = !out.assumed && !(eg_class_origin(c->g, out.cls) & EG_BASELINE);
    if (!c->baseline_mode && !c->divergence && inside && outside && r[0].kind == LV_TERM) {
        c->divergence = in;
        c->divergence_cls = out.cls;
        c->divergence_comp = comp;
        if (c->nsegs) c->segs[c->cur_seg].divergent++;
    }
    return out;
}
