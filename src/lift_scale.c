/* lift_scale — constant factors carried beside terms (lift.h, lval.scale).
 *
 * A training step averages: a local mean's gradient carries 1/(local batch),
 * the baseline's 1/(global batch), and the pmean that follows divides by the
 * device count. The three constants sit at different places of the two
 * programs (inside the cotangent, after the all-reduce), so the terms never
 * meet by hash-consing, and rules that move float constants through dots
 * would have to compute with them. Here the walk keeps a value that is a
 * constant times a term as (term, factor) and multiplies the factor through
 * the ops that are linear in it; where an op is not, the factor is put back
 * into the term as multiply(term, broadcast(constant)). Both programs are
 * walked by the same code (the baseline on one device), so both put factors
 * back at the same places with the same constants, and the pmean's 1/n meets
 * the local mean's n/B exactly as the baseline's 1/B.
 *
 * Over the reals every step is an identity (s·x + s·y = s·(x + y), dot is
 * bilinear, a sum over devices of s·x is s times the sum, a selection of
 * elements commutes with scaling), as the rewrite rules are. Max and min
 * commute with a positive factor only; a partial max or min value never
 * carries a negative one. Zeros take any factor, and infinities (a max's
 * -inf filler of padding) any positive one. Integer values never carry a factor (integer
 * division is no scaling). Nor does a value of a class the baseline computes
 * from constants only: the baseline's walk starts no factor on constants
 * (its divide stays a term), and the distributed value of that class may be
 * data (a device's iota plus its offset), which must keep the same form.
 */
#include <math.h>
#include <string.h>

#include "interp.h"
#include "lift_int.h"

double lf_scale_of(const lval *x) { return x->scale == 0 ? 1 : x->scale; }

static bool carries(const lval *x) {
    return x->kind == LV_TERM || x->kind == LV_LAYOUT || x->kind == LV_WIN || (x->kind == LV_ROW && x->group) ||
           x->kind == LV_DEVT;
}

/* The value every element of a constant-only float operand holds, when they
 * all hold the same finite non-zero one. */
static bool uniform_value_of(lift_ctx *c, const lval *x, bool scaled, double *out) {
    /* A device value the same on every device and element (a small constant
     * broadcast: whether it is tabulated depends on its size, so on the side). */
    if (x->kind == LV_DEV && x->dev && x->count > 0) {
        double v0 = x->dev[0];
        for (int64_t k = 1; k < c->ndev * (int64_t)x->count; k++)
            if (x->dev[k] != v0) return false;
        if (!isfinite(v0) || v0 == 0) return false;
        *out = v0;
        return true;
    }
    /* Known values are those of constant-only classes small enough to fold
     * (with scaled, times the factor carried beside them: a psum of a
     * constant count is the count times the devices); a partial one is each
     * device's share of them, no one value. */
    if (x->kind != LV_TERM || x->cls == EID_NONE || x->v.partial || (!scaled && lf_scale_of(x) != 1)) return false;
    const interp_val *v = lf_kval(c, x->cls);
    if (!v || !v->f || v->n < 1) return false;
    for (int64_t k = 1; k < v->n; k++)
        if (v->f[k] != v->f[0]) return false;
    double u = v->f[0] * lf_scale_of(x);
    if (!isfinite(u) || u == 0) return false;
    *out = u;
    return true;
}

static bool uniform_value(lift_ctx *c, const lval *x, double *out) { return uniform_value_of(c, x, false, out); }

/* multiply(x, broadcast(s)) of x's type: a factor put back into a term. */
static eid times(lift_ctx *c, eid x, double s) {
    uint32_t t = eg_class_type(c->g, x);
    interp_val *k = interp_val_new(eg_type_dtype(c->g, t), 0, NULL);
    k->f[0] = s;
    eid ch[2] = {x, lf_const_term(c, k, c->origin)};
    ch[1] = eg_add(c->g, OP_BROADCAST, 0, t, &ch[1], 1, c->origin);
    eid r = eg_add(c->g, OP_MULTIPLY, 0, t, ch, 2, c->origin);
    /* x·(-s) is -(x·s) exactly (IEEE negation flips the sign bit alone):
     * the rules then see a + (-s·x) as a - s·x (arith.rules, add-negate) */
    if (s < 0) {
        eid pos = s == -1 ? x : times(c, x, -s);
        eg_union(c->g, r, eg_add(c->g, OP_NEGATE, 0, t, &pos, 1, c->origin), NULL);
    }
    return r;
}

double lf_scale_put_back(lift_ctx *c, eid x, eid base) {
    eid b;
    double k = lf_scale_split(c, x, &b);
    return b != x && eg_find(c->g, b) == eg_find(c->g, base) ? k : 0;
}

double lf_scale_split(lift_ctx *c, eid x, eid *base) {
    const eid *ch, *k;
    *base = x;
    if (lf_class_node(c, x, OP_MULTIPLY, 2, &ch) == EID_NONE || lf_class_node(c, ch[1], OP_BROADCAST, 1, &k) == EID_NONE)
        return 1;
    const interp_val *v = lf_kval(c, k[0]);
    if (!v || !v->f || v->n != 1 || v->rank != 0 || !isfinite(v->f[0]) || v->f[0] == 0) return 1;
    *base = ch[0];
    return v->f[0];
}

/* The factor the baseline put back into term class x (1: none; the term is
 * then the baseline's own value where it has it). */
static double base_factor(lift_ctx *c, eid x) {
    eid key = eg_find(c->g, x);
    uint32_t idx;
    return strmap_get(&c->base_factors, (const char *)&key, sizeof key, &idx) ? c->base_factor[idx] : 1;
}

static void factor_words(lift_ctx *c, const lval *was, double sd, double sb, trace_kind *kind, char **note,
                         char **cause, const hlo_instr **at);
static bool factors_differ(lift_ctx *c, eid x, double r);

/* The distributed computation holding instruction in (NULL: none). */
static const hlo_comp *dist_comp_of(lift_ctx *c, const hlo_instr *in) {
    for (uint32_t k = 0; k < c->dist->ncomps; k++) {
        const hlo_comp *e = &c->dist->comps[k];
        if (in >= e->instrs && in < e->instrs + e->ninstrs) return e;
    }
    return NULL;
}

/* x (distributed, factor sd, its term a baseline value) is put back where
 * the baseline puts sb into the same term T: x is sd·T, the baseline's
 * sb·T, and with sd ≠ sb they differ wherever T is non-zero. Recorded as a
 * proved difference (lval.diff, corr = sb·T); the ops after it keep it only
 * where they provably do (lf_scale_differ). */
/* note, then ": cause" when there is one (arena): a proved difference's words. */
static char *with_cause(lift_ctx *c, const char *note, const char *cause) {
    if (!cause) return (char *)note;
    size_t n = strlen(note), k = strlen(cause);
    char *r = arena_alloc(c->a, n + k + 3);
    memcpy(r, note, n);
    memcpy(r + n, ": ", 2);
    memcpy(r + n + 2, cause, k + 1);
    return r;
}

static void mark_differ(lift_ctx *c, lval *x, double sd) {
    double sb = base_factor(c, x->cls);
    /* Known values (a constant, zeros) are no data that could differ. */
    if (x->kind != LV_TERM || x->assumed || x->zm || x->konst || lf_kval(c, x->cls) || !factors_differ(c, x->cls, sd / sb) ||
        (x->v.partial && x->v.red != RED_SUM && sb < 0))
        return;
    lift_finding d = {0};
    char *note, *cause;
    factor_words(c, x, sd, sb, &d.kind, &note, &cause, &d.in);
    if (!d.in) return;
    note = with_cause(c, note, cause);
    /* The computation holding the op to blame (its site is printed from it). */
    d.comp = dist_comp_of(c, d.in);
    if (!d.comp) return;
    lf_prove_difference(c, x, d.kind, d.comp, d.in, note, sb == 1 ? x->cls : times(c, x->cls, sb));
}

void lf_prove_difference(lift_ctx *c, lval *x, trace_kind kind, const hlo_comp *comp, const hlo_instr *in, char *message,
                         eid corr) {
    if (c->ndiffs == c->capdiffs) {
        size_t cap = c->capdiffs;
        XGROW(c->diffs, cap, c->ndiffs + 1);
        c->capdiffs = (uint32_t)cap;
    }
    c->diffs[c->ndiffs++] = (lift_finding){.kind = kind, .comp = comp, .in = in, .message = message};
    x->diff = c->ndiffs;
    x->corr = corr;
}

void lf_unscale(lift_ctx *c, lval *x) {
    if (x->kind == LV_TUPLE) {
        /* a call's result: the factors of its elements */
        for (uint32_t k = 0; k < x->n; k++) lf_unscale(c, &x->elems[k]);
        return;
    }
    double s = lf_scale_of(x);
    if (x->kind == LV_DEVT) {
        /* every device's term times the factor (a copy: elems may be shared) */
        x->scale = 0;
        if (s == 1) return;
        lval *e = arena_alloc(c->a, x->n * sizeof *e);
        for (uint32_t d = 0; d < x->n; d++) {
            e[d] = x->elems[d];
            e[d].scale = s;
            lf_unscale(c, &e[d]);
            if (e[d].kind != LV_TERM) {
                *x = unknown();
                return;
            }
        }
        x->elems = e;
        return;
    }
    if (s == 1 || !carries(x) || x->cls == EID_NONE) {
        /* A factor taken back to 1 (a sum over devices of n/B, a division)
         * where the baseline puts another into the same term differs as
         * much as any other factor would. */
        if (s == 1 && !c->baseline_mode && carries(x) && x->cls != EID_NONE && !x->diff && (x->factor_at || x->summed_at) &&
            (eg_class_origin(c->g, x->cls) & EG_BASELINE))
            mark_differ(c, x, 1);
        x->scale = 0;
        return;
    }
    if (!dtype_is_float(eg_type_dtype(c->g, eg_class_type(c->g, x->cls)))) {
        *x = unknown(); /* no factor to put into an integer term (a malformed program's types) */
        return;
    }
    bool inside = (eg_class_origin(c->g, x->cls) & EG_BASELINE) != 0;
    if (!c->baseline_mode) {
        /* the baseline's factor for the same term where the two differ only
         * by the rounding of the doubles they were computed in (√2/(√2·k)
         * against 1/k): one constant, not two a last bit apart */
        double b = base_factor(c, x->cls);
        if (b != 1 && s != b && fabs(s - b) <= 1e-12 * fabs(b)) s = b;
    }
    if (c->baseline_mode) {
        /* Remembered for blame: where the distributed program puts another
         * factor into the same term, the ratio says what differs. */
        eid key = eg_find(c->g, x->cls);
        uint32_t idx;
        if (!strmap_get(&c->base_factors, (const char *)&key, sizeof key, &idx)) {
            idx = (uint32_t)c->nbase_factors++;
            XGROW(c->base_factor, c->capbase_factors, c->nbase_factors);
            strmap_put(&c->base_factors, arena_memdup(c->a, &key, sizeof key), sizeof key, idx);
        }
        c->base_factor[idx] = s;
    } else if (x->diff) {
        x->corr = times(c, x->corr, s); /* both sides of a proved difference scale alike */
    }
    double b = c->baseline_mode || x->diff || !inside ? 1 : base_factor(c, x->cls);
    if (!c->baseline_mode && !x->diff && inside) mark_differ(c, x, s);
    eid whole = times(c, x->cls, s);
    if (b != 1 && s != b && isfinite(s / b)) {
        /* The baseline put b into this term and went on with another
         * constant: s is b times that (the same factors, placed apart: a
         * variance normalised before jnp.var's where, then scaled by
         * n/(n-1)). Both forms are the value; the one through the
         * baseline's term can meet what the baseline made of it. */
        eid staged = times(c, times(c, x->cls, b), s / b);
        eg_union(c->g, whole, staged, NULL);
    }
    x->cls = whole;
    x->scale = 0;
    /* Baseline data up to a constant factor: where such a value first meets
     * no baseline class, the factor is what differs (the divergence). */
    x->rescaled = inside;
}


bool lf_scale_like(lift_ctx *c, const lval *was, const lval *now, lval *x) {
    double s = lf_scale_of(was);
    if (lf_scale_of(x) != s || lf_scale_of(now) != 1) return false;
    if (s == 1) return true;
    if (!carries(was) || !carries(now) || was->cls == EID_NONE || now->cls == EID_NONE) return false;
    eid b = eg_find(c->g, was->cls);
    if (eg_find(c->g, now->cls) == b) {
        x->scale = 0; /* the op carries it on its result */
        return true;
    }
    if (lf_multiple_of(c, now->cls, b) != s) return false;
    lf_unscale(c, x);
    return true;
}

void lf_scale_base_konst(lift_ctx *c, const lval *v) {
    if (v->kind != LV_TERM || v->cls == EID_NONE || lf_scale_of(v) != 1) return;
    flag_set(&c->base_konst, &c->capbase_konst, eg_find(c->g, v->cls));
}

/* Whether class x is (or was when recorded) a constant-only baseline value. */
static bool base_konst(lift_ctx *c, eid x) {
    eid r = eg_find(c->g, x);
    return (x < c->capbase_konst && c->base_konst[x]) || (r < c->capbase_konst && c->base_konst[r]);
}

/* Whether x may carry factor s: a partial max or min only a positive one. */
static bool scale_fits(const lval *x, double s) { return s > 0 || !x->v.partial || x->v.red == RED_SUM; }


bool lf_scale_take(lstate *s, lval *out) {
    const hlo_instr *in = s->in;
    if ((in->op != OP_MULTIPLY && in->op != OP_DIVIDE) || in->noperands != 2 || !dtype_is_float(in->shape.dtype))
        return false;
    double k;
    for (uint32_t o = 0; o < 2; o++) {
        if (in->op == OP_DIVIDE && o == 1) break;
        /* A gathered row every device holds is its term here as at any other
         * use (the baseline's rows stay masks until used; the distributed
         * side's became terms at their all-reduce): both take the factor. */
        lval row = s->ops[o];
        if (row.kind == LV_MASK && lf_mask_resolves(s->c, &row) && uniform_value(s->c, &s->ops[1 - o], &k))
            lf_index_as_term(s->c, &row);
        const lval *x = &row;
        bool devt = x->kind == LV_DEVT; /* (no one term to ask about) */
        if (!carries(x) || x->konst ||
            (!devt && (x->cls == EID_NONE || lf_kval(s->c, x->cls) || base_konst(s->c, x->cls))) ||
            !uniform_value_of(s->c, &s->ops[1 - o], in->op == OP_DIVIDE, &k))
            continue;
        double f = lf_scale_of(x) * (in->op == OP_DIVIDE ? 1 / k : k);
        if (!isfinite(f) || f == 0 || !scale_fits(x, f)) return false;
        *out = *x;
        out->scale = f == 1 ? 0 : f;
        out->rescaled = false;
        out->factor_at = in;
        return true;
    }
    /* k / x (a mean's cotangent over a sum: d/dx of log x / b) is
     * (k / s)·(1 / x) for x = s·x', x' a term every device holds alike or
     * sharded (a reciprocal of a partial sum is no sum). */
    const lval *x = &s->ops[1];
    if (in->op != OP_DIVIDE || !carries(x) || x->kind != LV_TERM || x->v.partial || x->konst || x->cls == EID_NONE ||
        lf_kval(s->c, x->cls) || base_konst(s->c, x->cls) || !uniform_value(s->c, &s->ops[0], &k))
        return false;
    double f = k / lf_scale_of(x);
    if (!isfinite(f) || f == 0) return false;
    eid ch[2] = {lf_splat(s->c, eg_class_type(s->c->g, x->cls), 1), x->cls};
    *out = *x;
    out->cls = eg_add(s->c->g, OP_DIVIDE, 0, eg_class_type(s->c->g, x->cls), ch, 2, s->c->origin);
    out->scale = f == 1 ? 0 : f;
    out->rescaled = false;
    out->zm = NULL;
    out->diff = 0;
    out->factor_at = in;
    return true;
}

/* Whether x is all zeros: zero times any factor is zero, so it takes the
 * others' factor. */
static bool zeros(lift_ctx *c, const lval *x) {
    const interp_val *v = x->kind == LV_TERM && lf_scale_of(x) == 1 && x->cls != EID_NONE ? lf_kval(c, x->cls) : NULL;
    if (!v || !v->f) return false;
    for (int64_t k = 0; k < v->n; k++)
        if (v->f[k] != 0) return false;
    return true;
}

/* Whether x is infinite everywhere (a max's -inf filler): a positive factor
 * leaves it as it is. */
static bool infinite(lift_ctx *c, const lval *x) {
    const interp_val *v = x->kind == LV_TERM && lf_scale_of(x) == 1 && x->cls != EID_NONE ? lf_kval(c, x->cls) : NULL;
    if (!v || !v->f || v->n < 1) return false;
    for (int64_t k = 0; k < v->n; k++)
        if (!isinf(v->f[k])) return false;
    return true;
}

/* The factor every operand of ops[0..n) has, zeros aside and, for a positive
 * one, infinities (0: none common). */
static double common_factor(lift_ctx *c, const lval *ops, uint32_t n) {
    double f = 0;
    bool inf = false;
    for (uint32_t o = 0; o < n; o++) {
        if (zeros(c, &ops[o])) continue;
        if (infinite(c, &ops[o])) {
            inf = true;
            continue;
        }
        double g = lf_scale_of(&ops[o]);
        if (f != 0 && g != f) return 0;
        f = g;
    }
    return inf && f < 0 ? 0 : f;
}

/* The result factor of op `in` when its operands' factors are taken out
 * (0: they cannot be; the operands are then unscaled). */
static double result_factor(lstate *s) {
    lift_ctx *c = s->c;
    const hlo_instr *in = s->in;
    const lval *ops = s->ops;
    uint32_t n = in->noperands;
    if (in->op == OP_COMPARE && n == 2 && dtype_is_float(s->comp->instrs[in->operands[0]].shape.dtype)) {
        /* f·a against f·b (or 0, ±inf) orders as a against b for f > 0 and
         * is equal where they are for any f: no factor left on the result */
        double f = common_factor(c, ops, n);
        const char *dir = instr_str(in, A_DIRECTION);
        bool eq = dir && (strcmp(dir, "EQ") == 0 || strcmp(dir, "NE") == 0);
        return isfinite(f) && (f > 0 || (eq && f != 0)) ? 1 : 0;
    }
    if (n == 0 || !dtype_is_float(in->shape.dtype) || in->shape.dtype == DT_TUPLE) return 0;
    double s0 = lf_scale_of(&ops[0]);
    /* A root of f·x where the baseline put that f back into x before its
     * root (its jnp.var divides under a where(n - ddof > 0, ..., nan) that
     * does not carry factors): the root of the same product, to meet it. */
    bool base_put_back = !c->baseline_mode && n == 1 && ops[0].kind == LV_TERM && ops[0].cls != EID_NONE &&
                         fabs(base_factor(c, ops[0].cls) - s0) <= 1e-12 * fabs(s0);
    switch (in->op) {
    case OP_SQRT:
        return n == 1 && s0 > 0 && !base_put_back ? sqrt(s0) : 0;
    case OP_RSQRT:
        return n == 1 && s0 > 0 && !base_put_back ? 1 / sqrt(s0) : 0;
    case OP_TRANSPOSE: case OP_RESHAPE: case OP_BITCAST: case OP_BROADCAST: case OP_REVERSE: case OP_SLICE:
    case OP_DYNAMIC_SLICE: case OP_ALL_GATHER: case OP_ALL_TO_ALL: case OP_COLLECTIVE_PERMUTE:
        return n == 1 || in->op == OP_DYNAMIC_SLICE ? s0 : 0;
    case OP_CONVERT:
        return dtype_is_float(s->comp->instrs[in->operands[0]].shape.dtype) ? s0 : 0;
    case OP_NEGATE: /* the term is negate(t): -(f·t) is f·(-t) */
        return n == 1 ? s0 : 0;
    case OP_ALL_REDUCE: case OP_REDUCE_SCATTER: {
        if (n != 1) return 0;
        int red = instr_reducer(c->cur, in);
        return red == RED_SUM || ((red == RED_MAX || red == RED_MIN) && s0 > 0) ? s0 : 0;
    }
    case OP_REDUCE: case OP_REDUCE_WINDOW: {
        /* One operand and its init (a window's padding too): a sum from 0, a
         * max or min from ±inf or 0 (a cumulative sum's backward pass). */
        double init;
        if (n != 2) return 0;
        const interp_val *iv = ops[1].kind == LV_TERM ? lf_kval(c, ops[1].cls) : NULL;
        if (!iv || !iv->f || iv->n != 1) return 0;
        init = iv->f[0];
        int red = instr_reducer(c->cur, in);
        if (red == RED_SUM) return init == 0 ? s0 : 0;
        if ((red == RED_MAX || red == RED_MIN) && s0 > 0) return init == 0 || isinf(init) ? s0 : 0;
        return 0;
    }
    case OP_PAD: {
        const interp_val *pv = ops[1].kind == LV_TERM ? lf_kval(c, ops[1].cls) : NULL;
        return n == 2 && pv && pv->f && pv->n == 1 && pv->f[0] == 0 ? s0 : 0;
    }
    case OP_DOT: case OP_MULTIPLY: case OP_CONVOLUTION:
        return n == 2 ? s0 * lf_scale_of(&ops[1]) : 0;
    case OP_DYNAMIC_UPDATE_SLICE: /* f·a with f·u written in (offsets carry none) */
        for (uint32_t o = 2; o < n; o++)
            if (lf_scale_of(&ops[o]) != 1) return 0;
        return n >= 2 ? common_factor(c, ops, 2) : 0;
    case OP_DIVIDE:
        return n == 2 ? s0 / lf_scale_of(&ops[1]) : 0;
    case OP_SELECT:
        return n == 3 ? common_factor(c, ops + 1, 2) : 0;
    case OP_MAXIMUM: case OP_MINIMUM: {
        double f = common_factor(c, ops, n);
        return f > 0 ? f : 0;
    }
    case OP_ADD: case OP_SUBTRACT: case OP_CONCATENATE:
        return common_factor(c, ops, n);
    case OP_SCATTER: {
        /* a scatter-add is linear in its updates (and in the operand it adds
         * them to): f·u added into zeros, or into f·a, is f times the scatter */
        if (n != 3 || instr_reducer(c->cur, in) != RED_SUM || lf_scale_of(&ops[1]) != 1) return 0;
        double su = lf_scale_of(&ops[2]);
        return zeros(c, &ops[0]) || fabs(s0 - su) <= 1e-12 * fabs(su) ? su : 0;
    }
    default:
        return 0;
    }
}

double lf_scale_base_factor(lift_ctx *c, eid x) { return base_factor(c, x); }

/* A sum (add, subtract) of distributed operands with different factors,
 * s·A + t·B, is also f·((s/f)·A + (t/f)·B) for any f ≠ 0, and so is a
 * concatenation (a fused q/k/v gradient, q's scaled by 1/sqrt(d)): f is chosen so that
 * what stays in each term is the factor the baseline put into that same term
 * (1 where it put none), when one f does so for every operand (zeros aside).
 * The sum then meets the baseline's and carries f on (an accumulator that
 * holds n times the baseline's value, a local mean's n/B where the baseline
 * has 1/B). Over the reals an identity; 0 when there is no such f. */
static bool spread_constant(lift_ctx *c, const lval *x, double f, double *k, eid *scatter);
static eid respread_over(lift_ctx *c, eid x, double k, eid scatter, double f);

/* The rank-0 type of class x's element type. */
static uint32_t scalar_type(lift_ctx *c, eid x) {
    return lf_type_of(c, eg_type_dtype(c->g, eg_class_type(c->g, x)), NULL, 0);
}

static double guided_factor(lstate *s) {
    lift_ctx *c = s->c;
    const hlo_instr *in = s->in;
    if (c->baseline_mode || (in->op != OP_ADD && in->op != OP_SUBTRACT && in->op != OP_CONCATENATE) ||
        !dtype_is_float(in->shape.dtype))
        return 0;
    double f = 0, k;
    eid scatter;
    bool spread = false;
    for (uint32_t o = 0; o < in->noperands; o++) {
        const lval *x = &s->ops[o];
        if (zeros(c, x)) continue;
        if (spread_constant(c, x, 1, &k, &scatter)) {
            spread = true;
            continue;
        }
        if (!carries(x) || x->cls == EID_NONE) return 0;
        double g = lf_scale_of(x) / base_factor(c, x->cls);
        if (!isfinite(g) || g == 0 || (f != 0 && fabs(g - f) > 1e-9 * fabs(f))) return 0;
        f = f == 0 ? g : f;
    }
    for (uint32_t o = 0; o < in->noperands; o++)
        if (!scale_fits(&s->ops[o], f)) return 0;
    /* A constant beside them becomes f times k/f: only where the baseline
     * has that constant (else it kept the sum's form, factor put back). */
    for (uint32_t o = 0; o < in->noperands && spread && f != 0 && f != 1; o++)
        if (!zeros(c, &s->ops[o]) && spread_constant(c, &s->ops[o], f, &k, &scatter) &&
            !(eg_class_origin(c->g, scatter == EID_NONE ? lf_splat(c, scalar_type(c, s->ops[o].cls), k / f)
                                                        : respread_over(c, s->ops[o].cls, k, scatter, f)) & EG_BASELINE))
            return 0;
    return f == 1 ? 0 : f;
}

/* Whether x is a constant f·(k/f) for any f ≠ 0 — a term every element of
 * which holds k (finite, not 0) — or, for f > 0, a scatter of such a
 * constant into zeros (the gradient of a gather of a mean's -1/B: each of
 * add, replace, max and min combines k/f as f times k). *scatter: that
 * scatter's node (EID_NONE for a constant). */
static bool spread_constant(lift_ctx *c, const lval *x, double f, double *k, eid *scatter) {
    *scatter = EID_NONE;
    if (x->kind != LV_TERM || x->v.partial || x->cls == EID_NONE) return false;
    if (uniform_value(c, x, k)) return true;
    const eid *ch;
    eid n = lf_class_node(c, x->cls, OP_SCATTER, 3, &ch);
    if (n == EID_NONE || f < 0) return false;
    lval ops[2] = {{.kind = LV_TERM, .cls = ch[0]}, {.kind = LV_TERM, .cls = ch[2]}};
    if (!zeros(c, &ops[0]) || !uniform_value(c, &ops[1], k)) return false;
    *k *= lf_scale_of(x); /* a factor carried beside the scatter is the constant's too */
    *scatter = n;
    return true;
}

eid lf_splat(lift_ctx *c, uint32_t type, double k) {
    uint32_t rank;
    interp_val *v = interp_val_new(eg_type_dtype(c->g, type), 0, NULL);
    if (!v) return EID_NONE; /* (no values of complex types) */
    interp_val_set(v, 0, k);
    eid e = lf_const_term(c, v, c->origin);
    const int64_t *dims = eg_type_dims(c->g, type, &rank);
    if (!rank) return e;
    eid b = eg_add(c->g, OP_BROADCAST, lf_list_attr(c, A_DIMENSIONS, NULL, 0), type, &e, 1, c->origin);
    const interp_val *sv = lf_kval(c, e);
    interp_val *bv = sv && !lf_kval(c, b) ? lf_broadcast_values(sv, NULL, 0, dims, rank) : NULL;
    if (bv) lf_kval_set(c, b, bv);
    return b;
}

eid lf_scale_respread(lift_ctx *c, const lval *x, uint32_t type) {
    double k;
    if (x->kind != LV_TERM || x->cls == EID_NONE) return EID_NONE;
    if (uniform_value(c, x, &k)) return lf_splat(c, type, k);
    /* too large to tabulate: a broadcast of a known scalar */
    const eid *ch;
    const interp_val *sv = lf_class_node(c, x->cls, OP_BROADCAST, 1, &ch) != EID_NONE ? lf_kval(c, ch[0]) : NULL;
    return sv && sv->f && sv->n == 1 && lf_scale_of(x) == 1 ? lf_splat(c, type, sv->f[0]) : EID_NONE;
}

/* x (spread_constant with k and scatter) as f times its term: the same
 * constant, or the same scatter, of k/f. */
static eid respread_over(lift_ctx *c, eid x, double k, eid scatter, double f) {
    if (scatter == EID_NONE) return lf_splat(c, eg_class_type(c->g, x), k / f);
    uint32_t n;
    const eid *kids = eg_node_children(c->g, scatter, &n);
    eid ch[3] = {kids[0], kids[1], kids[2]}; /* copied: eg_add may move nodes */
    uint32_t attr = eg_node_attr(c->g, scatter), t = eg_class_type(c->g, x);
    ch[2] = lf_splat(c, eg_class_type(c->g, ch[2]), k / f);
    return eg_add(c->g, OP_SCATTER, attr, t, ch, 3, c->origin);
}

double lf_scale_plan(lstate *s) {
    bool any = false;
    for (uint32_t o = 0; o < s->in->noperands; o++) any |= lf_scale_of(&s->ops[o]) != 1;
    if (!any) return 1;
    double f = result_factor(s);
    if ((f == 0 || !isfinite(f)) && (f = guided_factor(s)) != 0) {
        for (uint32_t o = 0; o < s->in->noperands; o++) {
            lval *x = &s->ops[o];
            double k;
            eid scatter;
            if (zeros(s->c, x)) {
                x->scale = 0;
                continue;
            }
            if (spread_constant(s->c, x, f, &k, &scatter)) { /* k is f·(k/f) */
                x->cls = respread_over(s->c, x->cls, k, scatter, f);
                x->scale = 0;
                x->respread = true;
                continue;
            }
            double r = lf_scale_of(x) / f;
            x->scale = fabs(r - 1) <= 1e-12 ? 0 : r;
            lf_unscale(s->c, x);
        }
        return f;
    }
    bool ok = f != 0 && isfinite(f);
    for (uint32_t o = 0; o < s->in->noperands; o++) {
        if (ok && !scale_fits(&s->ops[o], f)) ok = false;
    }
    for (uint32_t o = 0; o < s->in->noperands; o++) {
        if (ok) s->ops[o].scale = 0;
        else lf_unscale(s->c, &s->ops[o]);
    }
    return ok ? f : 1;
}

void lf_scale_apply(lstate *s, lval *v, double f) {
    if (f == 1) return;
    if (v->kind == LV_PSUB) { /* the shares summed are the partial sum's, each times f */
        lval *b = &v->psub->base;
        b->scale = f * lf_scale_of(b);
        if (b->scale == 1) b->scale = 0;
        b->zm = NULL;
        return;
    }
    if (!carries(v) || (v->cls == EID_NONE && v->kind != LV_DEVT)) {
        /* Only value kinds carry a factor; what came out as something else
         * (an index analysis, a tuple) cannot say it: unrelated. */
        if (v->kind != LV_UNKNOWN) {
            lf_unsupported(s->c, s->comp, s->in, "%s takes values that are a constant times a baseline value in a way "
                           "not related yet", s->in->name);
            *v = (lval){.kind = LV_UNKNOWN};
        }
        return;
    }
    v->scale = f * lf_scale_of(v); /* times a factor the op itself made (a sum of copies) */
    v->zm = NULL; /* a zero mask speaks of the term without the factor */
}

void lf_scale_track(lstate *s, lval *v) {
    const hlo_instr *in = s->in;
    if (s->c->baseline_mode || !carries(v)) return;
    bool summed = (in->op == OP_ALL_REDUCE || in->op == OP_REDUCE_SCATTER) && instr_reducer(s->c->cur, in) == RED_SUM;
    for (uint32_t o = 0; o < in->noperands; o++) {
        const lval *x = &s->ops[o];
        if (!v->summed_at && !summed) v->summed_at = x->summed_at;
        if (!v->factor_at && lf_scale_of(v) != 1) v->factor_at = x->factor_at;
    }
    if (summed) v->summed_at = in;
}

/* Whether ratio r of two factors of the term x is a difference in exact
 * arithmetic and not the rounding of the constants it comes from: both
 * programs compute their factors from float constants (1/3 as f32, or
 * bf16, is not 1/3), so ratios within the dtype's rounding of a few
 * constants decide nothing. The factors the bugs make (mesh-axis sizes,
 * microbatch counts) are far beyond that. */
static bool factors_differ(lift_ctx *c, eid x, double r) {
    int dt = eg_type_dtype(c->g, eg_class_type(c->g, x));
    double tol = dt == DT_F32 || dt == DT_F64 ? 1e-4 : 0.05;
    return isfinite(r) && r != 0 && fabs(r - 1) > tol;
}

/* What factor sd where the baseline has sb says (a finding kind, the
 * words on the difference and those on its likely cause, NULL if none) and
 * the op to blame (NULL: none known). */
static void factor_words(lift_ctx *c, const lval *was, double sd, double sb, trace_kind *kind, char **note,
                         char **cause, const hlo_instr **at) {
    double r = sd / sb;
    const mesh *m = c->mesh;
    const char *how = NULL;
    strbuf ax;
    sb_init(&ax);
    /* Only axes the sum collective upstream reduces over can be a psum
     * taken for a pmean (a factor 2 after a psum over tp of 4 is not one,
     * whatever other axis has 2 devices). */
    int summed = was->summed_at ? lift_groups_axes(c, was->summed_at, false) : -1;
    /* n, or n² where a squared value follows (a gradient norm's square) */
    for (int pw = 1; pw <= 2 && !how; pw++)
        for (uint32_t mask = 1; mask < 1u << m->naxes && !how; mask++) {
            if (summed >= 0 && (mask & ~(uint32_t)summed)) continue;
            double n = 1;
            for (uint32_t a = 0; a < m->naxes; a++)
                if (mask >> a & 1) n *= (double)m->sizes[a];
            if (n <= 1) continue;
            n = pw == 2 ? n * n : n;
            if (fabs(r - n) <= 1e-9 * n)
                how = pw == 1 ? "a sum over %s where the baseline has a mean (psum for pmean), or a missing normalisation"
                              : "the square of a sum over %s where the baseline has a mean (psum for pmean), or of a "
                                "missing normalisation";
            else if (fabs(1 / r - n) <= 1e-9 * n)
                how = pw == 1 ? "a mean over %s where the baseline has a sum (pmean for psum), or a normalisation too many"
                              : "the square of a mean over %s where the baseline has a sum (pmean for psum), or of a "
                                "normalisation too many";
            if (how) lf_axes_words(&ax, c, mask);
        }
    strbuf w;
    sb_init(&w);
    sb_printf(&w, "it is the baseline's value times %.6g where the baseline has %.6g (%.6g times as large)", sd, sb, r);
    *kind = how ? KIND_WRONG_REDUCTION : KIND_CONSTANT_MISMATCH;
    *note = arena_strndup(c->a, w.s, w.len);
    *cause = NULL;
    if (how) {
        sb_reset(&w);
        sb_printf(&w, how, ax.s);
        *cause = arena_strndup(c->a, w.s, w.len);
    }
    *at = how && was->summed_at ? was->summed_at : was->factor_at;
    sb_free(&w);
    sb_free(&ax);
}

bool lf_factor_divergence(lift_ctx *c, const hlo_comp *comp, const lval *x, const lval *was, const hlo_instr **at) {
    if (!x->rescaled || was->kind != LV_TERM || was->cls == EID_NONE) return false;
    /* The baseline's own factor for the term: one it put back, else 1 when
     * the term itself is a baseline value. */
    double sb = base_factor(c, was->cls), sd = lf_scale_of(was), r = sd / sb;
    /* factors a rounding of their constants apart are no divergence (f32
     * 1/sqrt(8) beside a division by sqrt(8): "1 times as large") */
    if (!factors_differ(c, was->cls, r)) return false;
    factor_words(c, was, sd, sb, &c->divergence_kind, &c->divergence_note, &c->divergence_cause, at);
    /* Blame is given within the computation of the divergence (its site is
     * printed from that computation); an op elsewhere (a called one) is not. */
    if (*at && (*at < comp->instrs || *at >= comp->instrs + comp->ninstrs)) *at = NULL;
    if (!*at) c->divergence_kind = LF_NO_KIND, c->divergence_note = c->divergence_cause = NULL;
    return *at != NULL;
}

/* Whether op `in` is injective in each operand, the others fixed: an
 * elementwise add, subtract, negation or float conversion to a type as wide,
 * a layout op that keeps every element. Such an op keeps a proved difference
 * at some element (the values it gives differ there too); any other op (a
 * reduction, a product with data, a nonlinear function: a factor may cancel
 * there, as in m/sqrt(v)) ends it. */
static bool keeps_difference(const lstate *s) {
    const hlo_instr *in = s->in;
    switch (in->op) {
    case OP_ADD: case OP_SUBTRACT:
        return in->noperands == 2;
    case OP_NEGATE: case OP_RESHAPE: case OP_BITCAST: case OP_TRANSPOSE: case OP_BROADCAST: case OP_REVERSE:
        return in->noperands == 1;
    case OP_CONVERT:
        /* Only widening: rounding could hide a small difference. */
        return in->noperands == 1 && dtype_widens(s->comp->instrs[in->operands[0]].shape.dtype, in->shape.dtype);
    default:
        return false;
    }
}

void lf_scale_differ(lstate *s, lval *v, double factor, lval (*relift)(lstate *)) {
    lift_ctx *c = s->c;
    uint32_t o1 = UINT32_MAX, nmarked = 0;
    for (uint32_t o = 0; o < s->in->noperands; o++)
        if (s->ops[o].diff) o1 = o, nmarked++;
    if (!nmarked && v->diff) return; /* the op's own proof (lift_table.c) */
    uint32_t got = 0;
    eid corr = EID_NONE;
    lval *x = nmarked == 1 ? &s->ops[o1] : NULL;
    if (x && !c->baseline_mode && x->kind == LV_TERM && v->kind == LV_TERM && v->cls != EID_NONE && !v->assumed) {
        if (eg_find(c->g, v->cls) == eg_find(c->g, x->cls) && lf_scale_of(v) == lf_scale_of(x)) {
            /* The op is the identity on the global value (a collective that
             * only changes the view, a full slice): the difference stays. */
            got = x->diff, corr = x->corr;
        } else if (keeps_difference(s)) {
            /* The same op over the other term: the value it would be. */
            lval keep = *x;
            uint32_t nf = c->nfindings, nu = c->nunsupported;
            /* What that lifting reports is no part of the program's: kept
             * aside and restored. */
            const hlo_instr *fu = c->first_unsupported, *lu = c->later_unsupported;
            const hlo_comp *fuc = c->first_unsupported_comp, *luc = c->later_unsupported_comp;
            char *fw = c->unsupported_why, *lw = c->later_unsupported_why;
            bool fk = c->unsupported_konst, lk = c->later_unsupported_konst;
            lift_segment seg = c->nsegs ? c->segs[c->cur_seg] : (lift_segment){0};
            x->cls = x->corr;
            x->diff = 0;
            lval w = relift(s);
            lf_scale_apply(s, &w, factor);
            *x = keep;
            bool clean = nf == c->nfindings && nu == c->nunsupported;
            if (!clean) {
                c->nfindings = nf, c->nunsupported = nu;
                c->first_unsupported = fu, c->first_unsupported_comp = fuc, c->unsupported_why = fw, c->unsupported_konst = fk;
                c->later_unsupported = lu, c->later_unsupported_comp = luc, c->later_unsupported_why = lw;
                c->later_unsupported_konst = lk;
                if (c->nsegs) c->segs[c->cur_seg] = seg;
            }
            if (clean && w.kind == LV_TERM && w.cls != EID_NONE && !w.assumed && !w.zm && view_equal(&w.v, &v->v) &&
                lf_scale_of(&w) == lf_scale_of(v))
                got = keep.diff, corr = w.cls;
        }
    }
    v->diff = got;
    v->corr = corr;
}

void lf_scale_forget(lval *x) {
    x->diff = 0;
    for (uint32_t k = 0; x->kind == LV_TUPLE && k < x->n; k++) lf_scale_forget(&x->elems[k]);
}

/* The value every element of class x holds, folded or a broadcast scalar
 * constant (0: none known). */
static double uniform_class(lift_ctx *c, eid x) {
    double k;
    lval kv = {.kind = LV_TERM, .cls = x};
    if (uniform_value(c, &kv, &k)) return k;
    for (eid n = eg_class_first(c->g, eg_find(c->g, x)); n != EID_NONE; n = eg_class_next(c->g, n)) {
        uint32_t nch;
        const eid *ch = eg_node_children(c->g, n, &nch);
        kv.cls = nch == 1 ? ch[0] : EID_NONE;
        if (eg_node_op(c->g, n) == OP_BROADCAST && nch == 1 && uniform_value(c, &kv, &k)) return k;
    }
    return 0;
}

double lf_multiple_of(lift_ctx *c, eid x, eid b) {
    x = eg_find(c->g, x);
    b = eg_find(c->g, b);
    if (x == b) return 1;
    for (eid n = eg_class_first(c->g, x); n != EID_NONE; n = eg_class_next(c->g, n)) {
        uint32_t nch;
        const eid *ch = eg_node_children(c->g, n, &nch);
        if (eg_node_op(c->g, n) != OP_MULTIPLY || nch != 2) continue;
        for (uint32_t o = 0; o < 2; o++) {
            double k;
            if (eg_find(c->g, ch[o]) == b && (k = uniform_class(c, ch[1 - o])) != 0) return k;
        }
    }
    return 0;
}

/* r with p = a + k1·b (either order) and r = a + (k1 + sign·k2)·b; EID_NONE
 * when p is no such sum. */
static eid combine(lift_ctx *c, eid p, eid b, double k2, double sign, uint32_t type) {
    for (eid n = eg_class_first(c->g, eg_find(c->g, p)); n != EID_NONE; n = eg_class_next(c->g, n)) {
        uint32_t nch;
        const eid *ch = eg_node_children(c->g, n, &nch);
        if (eg_node_op(c->g, n) != OP_ADD || nch != 2) continue;
        for (uint32_t o = 0; o < 2; o++) {
            double k1 = lf_multiple_of(c, ch[1 - o], b);
            if (k1 == 0) continue;
            double k = k1 + sign * k2;
            eid a = eg_find(c->g, ch[o]);
            if (k == 0) return a;
            eid sum[2] = {a, k == 1 ? b : times(c, b, k)};
            return eg_add(c->g, OP_ADD, 0, type, sum, 2, c->origin);
        }
    }
    return EID_NONE;
}

void lf_scale_cancel(lstate *s, const lval *v) {
    lift_ctx *c = s->c;
    const hlo_instr *in = s->in;
    if (c->baseline_mode || (in->op != OP_ADD && in->op != OP_SUBTRACT) || in->noperands != 2 ||
        !dtype_is_float(in->shape.dtype) || v->kind != LV_TERM || v->cls == EID_NONE || lf_scale_of(v) != 1)
        return;
    const lval *p = &s->ops[0], *q = &s->ops[1];
    if (p->kind != LV_TERM || q->kind != LV_TERM || p->cls == EID_NONE || q->cls == EID_NONE ||
        lf_scale_of(p) != 1 || lf_scale_of(q) != 1)
        return;
    double sign = in->op == OP_ADD ? 1 : -1;
    uint32_t type = eg_class_type(c->g, v->cls);
    /* q is b itself, or k2·b with its factor put back */
    eid qc = eg_find(c->g, q->cls), r = combine(c, p->cls, qc, 1, sign, type);
    for (eid n = eg_class_first(c->g, qc); n != EID_NONE && r == EID_NONE; n = eg_class_next(c->g, n)) {
        uint32_t nch;
        const eid *ch = eg_node_children(c->g, n, &nch);
        if (eg_node_op(c->g, n) != OP_MULTIPLY || nch != 2) continue;
        for (uint32_t o = 0; o < 2 && r == EID_NONE; o++) {
            double k2 = uniform_class(c, ch[1 - o]);
            if (k2 != 0) r = combine(c, p->cls, eg_find(c->g, ch[o]), k2, sign, type);
        }
    }
    if (r != EID_NONE) eg_union(c->g, v->cls, r, NULL);
}

bool lift_output_multiple(lift_ctx *c, const lval *v, const view *want, eid bout, lift_finding *out) {
    /* Output v is k·B for the baseline's output B (a factor put back at the
     * output, k not 1 beyond the rounding of constants) in the view the
     * output must have: every device's piece is k times the baseline's
     * there, which differs wherever B is non-zero. A value of known
     * elements is no data that could differ. */
    if (c->baseline_mode || v->kind != LV_TERM || v->cls == EID_NONE || v->assumed || v->ambiguous || v->zm ||
        v->v.partial || !view_equal(&v->v, want) || lf_kval(c, bout) || base_konst(c, bout))
        return false;
    eid b = eg_find(c->g, bout);
    if (eg_find(c->g, v->cls) == b) return false;
    double k = lf_multiple_of(c, v->cls, b);
    if (k == 0 || !factors_differ(c, b, k)) return false;
    lift_finding d = {0};
    char *note, *cause;
    factor_words(c, v, k, 1, &d.kind, &note, &cause, &d.in);
    d.comp = d.in ? dist_comp_of(c, d.in) : NULL;
    if (!d.comp) return false;
    d.message = with_cause(c, note, cause);
    *out = d;
    return true;
}
