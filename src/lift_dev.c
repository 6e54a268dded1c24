/* lift_dev — values that are the same function of the device everywhere
 * (lift.c lifts the rest).
 * Owns device-dependent scalars (LV_DEV: partition-id and what is computed
 * from it, all-reduces of them included, evaluated concretely on every
 * device — lf_dev_instr, constants as device tables), device tables read
 * back as constant terms (lf_dev_uniform, lf_dev_constant, lf_splat_term,
 * lf_tiled_term), and constant-only values read under a view at the global
 * shape (lf_konst_at). */
#include "lift.h"
#include "lift_int.h"

#include "interp.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DEV_ELEMS 4096

/* ---- device-dependent scalars: concrete evaluation on every device ---- */

/* Whether v is a value of integer type dt (any value for other types):
 * device values are computed without wrapping, so one outside its type's
 * range (a literal XLA would not print, an overflow) is not modelled. */
static bool fits(int dt, double v) {
    if (!dtype_is_int(dt)) return true;
    int bits = dtype_bits(dt);
    if (bits >= 64) return fabs(v) < 9007199254740992.0;
    double span = ldexp(1, bits);
    bool is_signed = dt >= DT_S8 && dt <= DT_S64;
    return is_signed ? v >= -span / 2 && v < span / 2 : v >= 0 && v < span;
}

lval lf_dev_from_literal(lift_ctx *c, const hlo_instr *in) {
    const hlo_attr *la = instr_attr(in, A_LITERAL);
    int64_t n = shape_elements(&in->shape);
    if (!la || la->v.lit->elided || la->v.lit->raw || n < 0 || n > MAX_DEV_ELEMS) return unknown();
    lval v = {.kind = LV_DEV, .count = (uint32_t)n};
    v.dev = arena_alloc(c->a, (size_t)(c->ndev * n) * sizeof *v.dev);
    for (int64_t d = 0; d < c->ndev; d++)
        for (int64_t k = 0; k < n; k++) {
            v.dev[d * n + k] = la->v.lit->f ? la->v.lit->f[k] : (double)la->v.lit->i[k];
            if (!fits(in->shape.dtype, v.dev[d * n + k])) return unknown();
        }
    return v;
}

static double dev_at(const lval *v, int64_t d, int64_t k) { return v->dev[d * v->count + (v->count == 1 ? 0 : k)]; }

static double cmp_op(const char *dir, double x, double y) {
    if (!dir) return 0;
    if (!strcmp(dir, "EQ")) return x == y;
    if (!strcmp(dir, "NE")) return x != y;
    if (!strcmp(dir, "LT")) return x < y;
    if (!strcmp(dir, "LE")) return x <= y;
    if (!strcmp(dir, "GT")) return x > y;
    return x >= y;
}

/* Evaluates an elementwise or shape op over device values; false when the op is
 * not one we evaluate. Integer semantics: truncating division, C remainder. */
static bool dev_eval(lift_ctx *c, const hlo_instr *in, const lval *ops, lval *out) {
    int64_t n = shape_elements(&in->shape);
    if (in->op == OP_BROADCAST && in->noperands == 1 && ops[0].count == 1 && n > MAX_DEV_ELEMS) {
        /* One number per device, too many positions to tabulate: kept as
         * that number (a count of 1 is the same at every position), which
         * index arithmetic reads as a per-device offset. */
        *out = ops[0];
        return true;
    }
    if (n < 0 || n > MAX_DEV_ELEMS) return false;
    lval v = {.kind = LV_DEV, .count = (uint32_t)n};
    v.dev = arena_alloc(c->a, (size_t)(c->ndev * n) * sizeof *v.dev);
    bool is_int = !dtype_is_float(in->shape.dtype);
    for (int64_t d = 0; d < c->ndev; d++)
        for (int64_t k = 0; k < n; k++) {
            double x = in->noperands > 0 ? dev_at(&ops[0], d, k) : 0, y = in->noperands > 1 ? dev_at(&ops[1], d, k) : 0, r;
            switch (in->op) {
            case OP_PARTITION_ID: r = (double)d; break;
            case OP_REPLICA_ID: r = 0; break;
            case OP_CONVERT: r = is_int ? trunc(x) : x; break;
            case OP_ADD: r = x + y; break;
            case OP_SUBTRACT: r = x - y; break;
            case OP_MULTIPLY: r = x * y; break;
            case OP_DIVIDE: r = is_int ? (y == 0 ? -1 : trunc(x / y)) : x / y; break;
            case OP_REMAINDER: r = y == 0 ? x : fmod(x, y); break;
            case OP_MAXIMUM: r = x > y ? x : y; break;
            case OP_MINIMUM: r = x < y ? x : y; break;
            case OP_NEGATE: r = -x; break;
            case OP_ABS: r = fabs(x); break;
            case OP_SIGN: r = x != x ? x : (double)((x > 0) - (x < 0)); break; /* jnp's floor_divide asks it */
            case OP_XOR: r = in->shape.dtype == DT_PRED ? (double)((x != 0) != (y != 0)) : (double)((int64_t)x ^ (int64_t)y); break;
            case OP_AND: r = (double)((int64_t)x & (int64_t)y); break;
            case OP_OR: r = (double)((int64_t)x | (int64_t)y); break;
            case OP_NOT: r = in->shape.dtype == DT_PRED ? !x : (double)~(int64_t)x; break;
            case OP_COMPARE: r = cmp_op(instr_str(in, A_DIRECTION), x, y); break;
            case OP_SELECT: r = x ? y : dev_at(&ops[2], d, k); break;
            case OP_CLAMP: { double z = dev_at(&ops[2], d, k); r = y < x ? x : y > z ? z : y; break; }
            case OP_BROADCAST: case OP_RESHAPE: case OP_BITCAST:
                if (in->op == OP_BROADCAST && ops[0].count != 1) return false;
                r = ops[0].count == 1 ? x : ops[0].dev[d * ops[0].count + k];
                if (in->op != OP_BROADCAST && ops[0].count != (uint32_t)n) return false;
                break;
            default:
                return false;
            }
            if (!fits(in->shape.dtype, r)) return false;
            v.dev[d * n + k] = r;
        }
    *out = v;
    return true;
}

/* Device values rearranged: a broadcast of a vector (its elements along the
 * result dims the broadcast names) and a concatenate (the index vector
 * [off(r), 0] of a multi-dim scatter's offsets). */
static bool dev_layout(lift_ctx *c, const hlo_comp *comp, const hlo_instr *in, const lval *ops, lval *out) {
    int64_t n = shape_elements(&in->shape);
    uint32_t rank = in->shape.rank, nd;
    if (n < 1 || n > MAX_DEV_ELEMS || rank > VIEW_MAX_RANK || in->noperands < 1) return false;
    const int64_t *dl = instr_ints(in, A_DIMENSIONS, &nd);
    if (in->op == OP_BROADCAST ? in->noperands != 1 || ops[0].count < 2 : in->op != OP_CONCATENATE || nd != 1 || dl[0] >= rank)
        return false;
    for (uint32_t o = 0; o < in->noperands; o++) {
        const shape *os = &comp->instrs[in->operands[o]].shape;
        if (ops[o].kind != LV_DEV || os->rank > VIEW_MAX_RANK || (int64_t)ops[o].count != shape_elements(os) ||
            (in->op == OP_BROADCAST && nd != os->rank))
            return false;
    }
    lval v = {.kind = LV_DEV, .count = (uint32_t)n};
    v.dev = arena_alloc(c->a, (size_t)(c->ndev * n) * sizeof *v.dev);
    for (int64_t k = 0; k < n; k++) {
        int64_t at[VIEW_MAX_RANK], rest = k;
        for (uint32_t d = rank; d-- > 0;) at[d] = rest % in->shape.dims[d], rest /= in->shape.dims[d];
        uint32_t o = 0;
        if (in->op == OP_CONCATENATE)
            while (o + 1 < in->noperands && at[dl[0]] >= comp->instrs[in->operands[o]].shape.dims[dl[0]])
                at[dl[0]] -= comp->instrs[in->operands[o++]].shape.dims[dl[0]];
        const shape *os = &comp->instrs[in->operands[o]].shape;
        int64_t src = 0;
        for (uint32_t d = 0; d < os->rank; d++) src = src * os->dims[d] + at[in->op == OP_BROADCAST ? dl[d] : d];
        for (int64_t r = 0; r < c->ndev; r++) v.dev[r * n + k] = ops[o].dev[r * ops[o].count + src];
    }
    *out = v;
    return true;
}

/* dynamic-slice of a device table by device offsets, all one-dimensional. */
static bool dev_dynamic_slice(lift_ctx *c, const hlo_instr *in, const lval *ops, lval *out) {
    if (in->shape.rank != 1 || in->noperands != 2 || ops[0].count < 1 || ops[1].count != 1) return false;
    int64_t size = in->shape.dims[0];
    lval v = {.kind = LV_DEV, .count = (uint32_t)size};
    v.dev = arena_alloc(c->a, (size_t)(c->ndev * size) * sizeof *v.dev);
    for (int64_t d = 0; d < c->ndev; d++) {
        int64_t o = (int64_t)ops[1].dev[d], lim = (int64_t)ops[0].count - size;
        if (o < 0) o = 0;
        if (o > lim) o = lim;
        for (int64_t k = 0; k < size; k++) v.dev[d * size + k] = ops[0].dev[d * ops[0].count + o + k];
    }
    *out = v;
    return true;
}

/* all-reduce of a device value: every device gets its group's reduction,
 * element by element (psum of a per-device count, pmax of a device's
 * offset). Integer results must fit the element type (no wrap modelled). */
static bool dev_all_reduce(lift_ctx *c, const hlo_instr *in, const lval *ops, lval *out) {
    int red = instr_reducer(c->cur, in);
    int64_t n = shape_elements(&in->shape), R = graph_num_replicas(c->cur), *ids = NULL;
    uint32_t *start = NULL, ng = 0;
    char why[160];
    if (in->noperands != 1 || ops[0].count != (uint32_t)n || n < 1 || R < 1 || c->ndev % R ||
        (red != RED_SUM && red != RED_MAX && red != RED_MIN && red != RED_PROD) ||
        !graph_device_groups(in, R, c->ndev / R, &ids, &start, &ng, why, sizeof why))
        return false;
    lval v = {.kind = LV_DEV, .count = (uint32_t)n};
    v.dev = arena_alloc(c->a, (size_t)(c->ndev * n) * sizeof *v.dev);
    bool ok = true;
    int64_t seen = 0;
    for (uint32_t g = 0; g < ng && ok; g++)
        for (int64_t k = 0; k < n && ok; k++) {
            double r = red == RED_SUM ? 0 : red == RED_PROD ? 1 : red == RED_MAX ? -INFINITY : INFINITY;
            for (uint32_t j = start[g]; j < start[g + 1]; j++) {
                double x = ops[0].dev[ids[j] * n + k];
                r = red == RED_SUM ? r + x : red == RED_PROD ? r * x : red == RED_MAX ? fmax(r, x) : fmin(r, x);
            }
            ok = fits(in->shape.dtype, r);
            for (uint32_t j = start[g]; j < start[g + 1]; j++) v.dev[ids[j] * n + k] = r;
        }
    for (uint32_t g = 0; g < ng; g++) seen += start[g + 1] - start[g];
    free(ids);
    free(start);
    if (!ok || seen != c->ndev) return false;
    *out = v;
    return true;
}

/* An op over device values only, evaluated on every device: a dynamic-slice
 * of a table, an all-reduce, a rearrangement, or an elementwise or shape op. */
bool lf_dev_instr(lift_ctx *c, const hlo_comp *comp, const hlo_instr *in, const lval *ops, lval *out) {
    return in->op == OP_DYNAMIC_SLICE ? dev_dynamic_slice(c, in, ops, out)
           : in->op == OP_ALL_REDUCE  ? dev_all_reduce(c, in, ops, out)
                                      : dev_layout(c, comp, in, ops, out) || dev_eval(c, in, ops, out);
}

bool lf_dev_splat(const lval *v, int64_t ndev) {
    if (v->kind != LV_DEV || !v->dev || !v->count) return false;
    for (int64_t k = 0; k < ndev * (int64_t)v->count; k++)
        if (v->dev[k] != v->dev[0]) return false;
    return true;
}

bool lf_lval_splat(lift_ctx *c, const lval *x, bool base, double *v) {
    if (lf_dev_splat(x, base ? 1 : c->ndev)) {
        *v = x->dev[0];
        return true;
    }
    return x->kind == LV_TERM && !x->assumed && lf_scale_of(x) == 1 && view_is_dup(&x->v) && x->cls != EID_NONE &&
           lf_class_splat_value(c, x->cls, v);
}

/* A splat device value as the constant of the global shape under view w: the
 * same number everywhere is every tile of it. */
lval lf_splat_term(lift_ctx *c, const hlo_instr *in, const lval *v, const view *w) {
    int64_t dims[VIEW_MAX_RANK];
    lf_global_dims(c, w, &in->shape, dims);
    interp_val *x = lf_fold_size_ok(dims, in->shape.rank) ? interp_val_new(in->shape.dtype, in->shape.rank, dims) : NULL;
    if (!x) return term(lf_fresh_var(c, in->shape.dtype, dims, in->shape.rank), *w, true);
    for (int64_t k = 0; k < x->n; k++) interp_val_set(x, k, v->dev[0]);
    lval r = term(lf_const_term(c, x, c->origin), *w, false);
    r.konst = true;
    return r;
}

/* A device value the same on every device and constant along every dim w
 * shards, as the constant of the global shape under w: its copies side by
 * side, each device's block the value itself (the literal the baseline holds
 * for it). Unknown when it is not of that form or too large to fold. */
lval lf_tiled_term(lift_ctx *c, const hlo_instr *in, const lval *v, const view *w) {
    uint32_t rank = in->shape.rank;
    int64_t dims[VIEW_MAX_RANK], n = shape_elements(&in->shape);
    if (v->kind != LV_DEV || !lf_dev_uniform(c, v) || w->partial || w->rank != rank || rank > VIEW_MAX_RANK || n != v->count)
        return unknown();
    lf_global_dims(c, w, &in->shape, dims);
    if (!lf_fold_size_ok(dims, rank)) return unknown();
    /* constant along each sharded dim: element k equals the one at index 0 there */
    int64_t stride = 1;
    for (int q = (int)rank - 1; q >= 0; stride *= in->shape.dims[q], q--) {
        if (!w->dims[q].naxes) continue;
        for (int64_t k = 0; k < n; k++)
            if (v->dev[k] != v->dev[k - (k / stride % in->shape.dims[q]) * stride]) return unknown();
    }
    interp_val *g = interp_val_new(in->shape.dtype, rank, dims);
    if (!g) return unknown();
    int64_t idx[VIEW_MAX_RANK] = {0};
    for (int64_t e = 0; e < g->n; e++) {
        int64_t src = 0;
        for (uint32_t q = 0; q < rank; q++) src = src * in->shape.dims[q] + idx[q] % in->shape.dims[q];
        interp_val_set(g, e, v->dev[src]);
        for (int q = (int)rank - 1; q >= 0 && ++idx[q] == dims[q]; q--) idx[q] = 0;
    }
    lval r = term(lf_const_term(c, g, c->origin), *w, false);
    r.konst = true;
    return r;
}

bool lf_dev_uniform(const lift_ctx *c, const lval *v) {
    for (int64_t d = 1; d < c->ndev; d++)
        if (memcmp(v->dev, v->dev + d * v->count, v->count * sizeof *v->dev)) return false;
    return true;
}

/* A device value that is the same on every device, as a baseline constant term. */
eid lf_dev_constant(lift_ctx *c, const hlo_instr *in, const lval *v) {
    /* Same e-node as a baseline constant with these values (literal digest);
     * one value everywhere is also the broadcast of that scalar, as a program
     * writes it (and lf_konst_at builds it): both nodes in one class. */
    interp_val *x = shape_elements(&in->shape) == (int64_t)v->count ? interp_val_new(in->shape.dtype, in->shape.rank, in->shape.dims)
                                                                     : NULL;
    if (x && x->n == v->count) {
        for (uint32_t k = 0; k < v->count; k++) interp_val_set(x, k, v->dev[k]);
        return lf_const_term(c, x, c->origin);
    }
    interp_val_free(x);
    if (v->count == 1 && in->shape.rank > 0) {
        /* One number at every position (a broadcast too large to tabulate):
         * the broadcast of that scalar, the class the splat constant of a
         * foldable size joins too (lf_const_term). */
        interp_val *one = interp_val_new(in->shape.dtype, 0, NULL);
        if (one) { /* (no values of complex types: the literal below) */
            interp_val_set(one, 0, v->dev[0]);
            eid sc = lf_const_term(c, one, c->origin);
            uint32_t t = lf_type_of(c, in->shape.dtype, in->shape.dims, in->shape.rank);
            return eg_add(c->g, OP_BROADCAST, lf_list_attr(c, A_DIMENSIONS, NULL, 0), t, &sc, 1, c->origin);
        }
    }
    hlo_literal lit = {.dtype = in->shape.dtype, .count = v->count};
    double *f = NULL;
    int64_t *iv = NULL;
    if (dtype_is_float(in->shape.dtype) || dtype_is_complex(in->shape.dtype)) {
        /* (complex: the real parts; a device value has no imaginary part) */
        f = arena_alloc(c->a, v->count * sizeof *f);
        for (uint32_t k = 0; k < v->count; k++)
            f[k] = dtype_is_complex(in->shape.dtype) ? v->dev[k] : dtype_round(in->shape.dtype, v->dev[k]);
        lit.f = f;
    } else {
        iv = arena_alloc(c->a, v->count * sizeof *iv);
        for (uint32_t k = 0; k < v->count; k++) iv[k] = (int64_t)v->dev[k];
        lit.i = iv;
    }
    int64_t words[3] = {A_LITERAL, 1, (int64_t)lf_literal_digest(&lit)};
    uint32_t t = lf_type_of(c, in->shape.dtype, in->shape.dims, in->shape.rank);
    return eg_add(c->g, OP_CONSTANT, eg_attr(c->g, words, 3), t, NULL, 0, c->origin);
}

/* ---- constant-only values under a view ---- */

/* The global term of value i of comp (constant-only, the same on every
 * device) read under view w: every device holding the same block stands for
 * that block tiled, which is the same computation at the global shape when
 * the value is constant along the dims w shards — a causal mask built from
 * iota, broadcast along the batch and the heads. Rebuilt op by op through
 * broadcasts (the sharded dims added there, or carried from the operand),
 * transposes, elementwise ops, reshapes that keep a sharded dim as its own
 * group, iotas along other dims and splat constants; EID_NONE otherwise. */
static eid konst_at(lift_ctx *c, const hlo_comp *comp, const lval *vals, uint32_t i, const view *w, int depth);

/* Value i's known elements (a folded constant: a scatter of constants, say)
 * tiled under view w: every device holds the same block, so the global value
 * is that block repeated along the dims w shards. EID_NONE when unknown or
 * too large to fold. */
static eid tiled_konst(lift_ctx *c, const hlo_comp *comp, uint32_t i, const lval *x, const view *w, bool index) {
    const hlo_instr *in = &comp->instrs[i];
    const interp_val *kv = x->kind == LV_TERM && x->cls != EID_NONE ? lf_kval(c, x->cls) : NULL;
    int64_t dims[VIEW_MAX_RANK];
    lf_global_dims(c, w, &in->shape, dims);
    if (!lf_fold_size_ok(dims, in->shape.rank)) return EID_NONE;
    /* index arithmetic whose values were never folded into its plain term
     * (a mask of positions): evaluated, the same on every device as its
     * view says (other tables are lift_table.c's to read) */
    interp_val **per = kv || !index ? NULL : lf_device_values(c, comp, i);
    bool same = per != NULL;
    for (int64_t r = 1; per && r < c->ndev && same; r++) {
        same = per[r]->n == per[0]->n && per[r]->dtype == per[0]->dtype;
        for (int64_t k = 0; same && k < per[0]->n; k++) same = interp_val_get(per[r], k) == interp_val_get(per[0], k);
    }
    if (same) kv = per[0];
    interp_val *t = NULL;
    if (kv && kv->n == shape_elements(&in->shape) && kv->dtype == in->shape.dtype)
        t = interp_val_new(in->shape.dtype, in->shape.rank, dims);
    if (!t) {
        lf_device_values_free(c, per);
        return EID_NONE;
    }
    int64_t idx[VIEW_MAX_RANK] = {0};
    for (int64_t k = 0; k < t->n; k++) {
        int64_t src = 0;
        for (uint32_t d = 0; d < in->shape.rank; d++) src = src * in->shape.dims[d] + idx[d] % in->shape.dims[d];
        if (t->f) t->f[k] = kv->f[src];
        else t->i[k] = kv->i[src];
        for (int d = (int)in->shape.rank - 1; d >= 0 && ++idx[d] == dims[d]; d--) idx[d] = 0;
    }
    lf_device_values_free(c, per);
    return lf_const_term(c, t, c->origin);
}

eid lf_konst_at(lift_ctx *c, const hlo_comp *comp, const lval *vals, uint32_t i, const view *w, int depth) {
    eid r = konst_at(c, comp, vals, i, w, depth);
    /* index arithmetic on constants no device offsets (a mask of
     * positions): its plain term */
    lval plain = vals[i];
    bool index = plain.kind == LV_PW && lf_plain_of_index(&plain);
    const lval *x = &plain;
    if (r != EID_NONE || x->kind != LV_TERM || !x->konst || !view_is_dup(&x->v) || w->partial ||
        comp->instrs[i].shape.rank != w->rank || comp->instrs[i].shape.rank > VIEW_MAX_RANK)
        return r;
    return tiled_konst(c, comp, i, x, w, index);
}

static eid konst_at(lift_ctx *c, const hlo_comp *comp, const lval *vals, uint32_t i, const view *w, int depth) {
    const hlo_instr *in = &comp->instrs[i];
    const lval *x = &vals[i];
    if (depth > 32 || in->shape.rank != w->rank || in->shape.rank > VIEW_MAX_RANK || w->partial) return EID_NONE;
    if (x->kind == LV_TERM && (!x->konst || !view_is_dup(&x->v))) return EID_NONE;
    /* index arithmetic on constants (a causal mask compared with an integer
     * constant) that does not depend on the device: its plain term */
    bool plain = x->kind == LV_TERM || (x->kind == LV_PW && x->cls != EID_NONE && view_is_dup(&x->v));
    if (view_is_dup(w)) return plain ? x->cls : x->kind == LV_DEV && lf_dev_uniform(c, x) ? lf_dev_constant(c, in, x) : EID_NONE;
    if (!plain && x->kind != LV_DEV) return EID_NONE;
    int64_t dims[VIEW_MAX_RANK];
    lf_global_dims(c, w, &in->shape, dims);
    eid ch[8];
    if (in->op == OP_BROADCAST && in->noperands == 1) {
        uint32_t nd;
        const int64_t *bd = instr_ints(in, A_DIMENSIONS, &nd);
        const hlo_instr *xi = &comp->instrs[in->operands[0]];
        if (nd != xi->shape.rank) return EID_NONE;
        view u = view_dup(nd);
        for (uint32_t k = 0; k < nd; k++) u.dims[k] = w->dims[bd[k]];
        if ((ch[0] = lf_konst_at(c, comp, vals, in->operands[0], &u, depth + 1)) == EID_NONE) return EID_NONE;
        return lf_node(c, c->cur, in, ch, 1, dims, c->origin);
    }
    if (in->op == OP_TRANSPOSE && in->noperands == 1) {
        /* out dim i is operand dim perm[i]: the operand read with the dims
         * w shards carried back (a causal mask broadcast over batch and
         * heads, then transposed) */
        uint32_t np;
        const int64_t *perm = instr_ints(in, A_DIMENSIONS, &np);
        if (np != in->shape.rank) return EID_NONE;
        view u = view_dup(np);
        for (uint32_t k = 0; k < np; k++) {
            if (perm[k] < 0 || perm[k] >= (int64_t)np) return EID_NONE;
            u.dims[perm[k]] = w->dims[k];
        }
        if ((ch[0] = lf_konst_at(c, comp, vals, in->operands[0], &u, depth + 1)) == EID_NONE) return EID_NONE;
        return lf_node(c, c->cur, in, ch, 1, dims, c->origin);
    }
    if (in->op == OP_IOTA) {
        if (w->dims[instr_int(in, A_IOTA_DIMENSION, 0)].naxes) return EID_NONE;
        return lf_node(c, c->cur, in, NULL, 0, dims, c->origin);
    }
    if (in->op == OP_RESHAPE && in->noperands == 1) {
        /* each sharded output dim the only non-unit dim of its group, its
         * blocks those of the group's first non-unit input dim (row-major:
         * a block of P·n rows merged from [P·m, n/m] is a block of m along
         * the major dim, jnp.tile's rows) */
        const hlo_instr *xi = &comp->instrs[in->operands[0]];
        const int64_t *a = xi->shape.dims, *b = in->shape.dims;
        uint32_t ra = xi->shape.rank, rb = in->shape.rank, p = 0, q = 0;
        /* a unit dim w shards: every device the same, so constant along it
         * (a broadcast), whatever its group */
        bool wide[VIEW_MAX_RANK], any = false;
        view w1 = *w;
        for (uint32_t d = 0; d < rb; d++) {
            wide[d] = b[d] == 1 && w->dims[d].naxes;
            if (wide[d]) any = true, w1.dims[d] = (view_dim){0};
        }
        if (any) {
            eid r = konst_at(c, comp, vals, i, &w1, depth + 1);
            return r == EID_NONE ? r : lf_mk_unit_broadcast(c, r, in->shape.dtype, dims, wide, rb);
        }
        view u = view_dup(ra);
        while (p < ra || q < rb) {
            uint32_t p2, q2;
            if (!lf_reshape_run(a, ra, b, rb, p, q, &p2, &q2)) return EID_NONE;
            for (uint32_t d = q; d < q2; d++) {
                if (!w->dims[d].naxes) continue;
                int src = -1, nonunit = 0;
                for (uint32_t e = q; e < q2; e++) nonunit += b[e] != 1;
                for (uint32_t k = p; k < p2 && src < 0; k++)
                    if (a[k] != 1) src = (int)k;
                if (nonunit != 1 || src < 0) return EID_NONE;
                u.dims[src] = w->dims[d];
            }
            if (p2 == p && q2 == q) break;
            p = p2, q = q2;
        }
        if ((ch[0] = lf_konst_at(c, comp, vals, in->operands[0], &u, depth + 1)) == EID_NONE) return EID_NONE;
        return lf_node(c, c->cur, in, ch, 1, dims, c->origin);
    }
    if (graph_op_elementwise(in->op) && in->noperands <= 8) {
        for (uint32_t o = 0; o < in->noperands; o++) {
            const hlo_instr *xi = &comp->instrs[in->operands[o]];
            view scalar = view_dup(0);
            if ((ch[o] = lf_konst_at(c, comp, vals, in->operands[o], xi->shape.rank ? w : &scalar, depth + 1)) == EID_NONE)
                return EID_NONE;
        }
        return lf_node(c, c->cur, in, ch, in->noperands, dims, c->origin);
    }
    /* a constant of one number: that number at the global shape */
    const interp_val *kv = x->kind == LV_TERM ? lf_kval(c, x->cls) : NULL;
    if (!kv || !kv->n || !lf_fold_size_ok(dims, in->shape.rank)) return EID_NONE;
    for (int64_t k = 1; k < kv->n; k++)
        if (interp_val_get(kv, k) != interp_val_get(kv, 0)) return EID_NONE;
    interp_val *g = interp_val_new(kv->dtype, in->shape.rank, dims);
    if (!g) return EID_NONE;
    for (int64_t k = 0; k < g->n; k++) interp_val_set(g, k, interp_val_get(kv, 0));
    return lf_const_term(c, g, c->origin);
}
