/* lift_zmask — zero masks: relating a dense expert dispatch (lift.h,
 * lift_zmask; DESIGN §5).
 *
 * Expert parallelism sends every (expert, token) row to the expert's device,
 * the rows the router did not pick as zeros, disp = select(w > 0, x, 0), and
 * combines out = sum_e w[t,e] · f_e(disp)[e,t]. Each f_e works row by row, so
 * where w > 0 its row is f_e(x); where w = 0 the product is 0 whatever the row
 * holds. With w >= 0 the combine is therefore sum_e w[t,e] · f_e(x)[e,t]: the
 * baseline's dense mixture. The mask is followed through the ops that keep
 * rows apart (elementwise ops, dots that do not contract a mask dim, layout
 * changes, collectives, which keep the global term) and dropped anywhere else;
 * a value that is not provably zero off the mask (exp of a masked row) only
 * keeps its agreement on the mask.
 */
#include "lift.h"
#include "lift_int.h"

#include "eattr.h"
#include "interp.h"

#include <stdio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

bool lf_class_is_zero(lift_ctx *c, eid cls) { return lf_class_is_splat(c, cls, 0); }

/* The known values of class cls, or of the operand of the broadcasts and
 * reshapes (and converts, when through_convert) it is; NULL if none. */
static const interp_val *splat_values(lift_ctx *c, eid cls, bool through_convert) {
    const interp_val *v = lf_kval(c, cls);
    for (int guard = 0; !v && guard < 8; guard++) {
        eid n = eg_class_first(c->g, cls);
        uint16_t op = n == EID_NONE ? 0 : eg_node_op(c->g, n);
        if (op != OP_BROADCAST && op != OP_RESHAPE && (op != OP_CONVERT || !through_convert)) return NULL;
        uint32_t k;
        cls = eg_node_children(c->g, n, &k)[0];
        v = lf_kval(c, cls);
    }
    return v;
}

bool lf_class_splat_value(lift_ctx *c, eid cls, double *x) {
    const interp_val *v = splat_values(c, cls, false);
    if (!v || v->n < 1) return false;
    for (int64_t k = 1; k < v->n; k++)
        if (interp_val_get(v, k) != interp_val_get(v, 0)) return false;
    for (int64_t k = 0; v->im && k < v->n; k++)
        if (v->im[k] != 0) return false;
    *x = interp_val_get(v, 0);
    return true;
}

/* A convert keeps 0 and, between float types, an infinity; from an integer
 * type no value is infinite, so no infinity is found below one. */
bool lf_class_is_splat(lift_ctx *c, eid cls, double x) {
    const interp_val *v = splat_values(c, cls, true);
    if (!v) return false;
    for (int64_t k = 0; k < v->n; k++)
        if ((v->f ? v->f[k] != x : (double)v->i[k] != x) || (v->im && v->im[k] != 0)) return false;
    return true;
}

/* Whether instruction i of comp is >= 0 everywhere: exponentials, squares,
 * absolute values, comparisons, non-negative constants, and sums, products, quotients,
 * maxima, selections, reductions (all-reduces too) and layout changes of such. seen: 0 not yet,
 * 1 yes, 2 no, 3 being decided (a cycle cannot happen in a computation). */
static bool nonneg_instr(const hlo_module *m, const hlo_comp *comp, uint32_t i, uint8_t *seen, int depth) {
    if (seen[i]) return seen[i] == 1;
    if (depth > 64) return false;
    seen[i] = 3;
    const hlo_instr *x = &comp->instrs[i];
#define NONNEG(k) (x->noperands > (k) && nonneg_instr(m, comp, x->operands[k], seen, depth + 1))
    bool ok = false;
    /* a predicate is 0 or 1 and an unsigned integer never negative, whatever
     * computed them (not, and, is-finite) */
    if (x->shape.dtype == DT_PRED || dtype_is_unsigned(x->shape.dtype)) {
        seen[i] = 1;
        return true;
    }
    switch (x->op) {
    case OP_EXP: case OP_ABS: case OP_SQRT: case OP_RSQRT: case OP_LOGISTIC: case OP_COMPARE:
        ok = true; /* a comparison's pred is 0 or 1 */
        break;
    case OP_CONSTANT: {
        const hlo_attr *la = instr_attr(x, A_LITERAL);
        ok = la && !la->v.lit->elided && !la->v.lit->raw;
        for (int64_t k = 0; ok && k < la->v.lit->count; k++) ok = la->v.lit->f ? la->v.lit->f[k] >= 0 : la->v.lit->i[k] >= 0;
        break;
    }
    case OP_MULTIPLY:
        ok = (x->noperands == 2 && x->operands[0] == x->operands[1]) || (NONNEG(0) && NONNEG(1));
        break;
    case OP_ADD: case OP_DIVIDE: case OP_MINIMUM:
        ok = NONNEG(0) && NONNEG(1);
        break;
    case OP_MAXIMUM:
        ok = NONNEG(0) || NONNEG(1);
        break;
    case OP_SELECT:
        ok = NONNEG(1) && NONNEG(2);
        break;
    case OP_BROADCAST: case OP_RESHAPE: case OP_TRANSPOSE: case OP_CONVERT: case OP_COPY: case OP_BITCAST:
    case OP_SLICE: case OP_REVERSE:
        ok = NONNEG(0);
        break;
    case OP_REDUCE: {
        int r = instr_reducer(m, x);
        ok = x->noperands == 2 && (r == RED_SUM || r == RED_PROD || r == RED_MAX || r == RED_MIN) && NONNEG(0) && NONNEG(1);
        break;
    }
    case OP_ALL_REDUCE: {
        int r = instr_reducer(m, x);
        ok = x->noperands == 1 && (r == RED_SUM || r == RED_PROD || r == RED_MAX || r == RED_MIN) && NONNEG(0);
        break;
    }
    default:
        break;
    }
#undef NONNEG
    seen[i] = ok ? 1 : 2;
    return ok;
}

bool lf_nonneg(const hlo_module *m, const hlo_comp *comp, uint32_t i) {
    uint8_t *seen = xcalloc(comp->ninstrs + 1, 1);
    bool ok = nonneg_instr(m, comp, i, seen, 0);
    free(seen);
    return ok;
}

/* The largest integer a float of dtype dt holds exactly with every integer
 * below it (2^mantissa bits); 0 for other types. */
static double exact_ints(int dt) {
    switch (dt) {
    case DT_F64: return 9007199254740992.0;
    case DT_F32: return 16777216.0;
    case DT_F16: return 2048.0;
    case DT_BF16: return 256.0;
    default: return 0;
    }
}

/* The bound of an integer type's values (|v| <= bound); 0 for other types. */
static double int_range(int dt) {
    if (dt == DT_PRED) return 1;
    if (!dtype_is_int(dt)) return 0;
    return ldexp(1, dtype_bits(dt) - (dtype_is_unsigned(dt) ? 0 : 1));
}

/* Whether instruction i of comp holds integers of magnitude at most *bound
 * everywhere, computed exactly: counts (sums of converted comparisons),
 * integer data, integral constants and iotas, and sums, products, maxima,
 * selections, reductions (all-reduces over at most ndev devices) and layout
 * changes of such; a float value counts only while its bound stays where
 * the float holds every integer. seen/memo as nonneg_instr's. */
static bool integral_instr(const hlo_module *m, const hlo_comp *comp, uint32_t i, int64_t ndev, uint8_t *seen,
                           double *memo, int depth) {
    if (seen[i]) return seen[i] == 1;
    if (depth > 64) return false;
    seen[i] = 2;
    const hlo_instr *x = &comp->instrs[i];
    int dt = x->shape.dtype;
    double b[3] = {0, 0, 0}, r = -1;
    for (uint32_t k = 0; k < x->noperands && k < 3; k++) {
        bool need = x->op != OP_SELECT || k > 0;
        if (need && !integral_instr(m, comp, x->operands[k], ndev, seen, memo, depth + 1)) {
            if (x->op == OP_CONVERT || x->op == OP_PARAMETER) break;
            return false;
        }
        b[k] = need ? memo[x->operands[k]] : 0;
    }
    switch (x->op) {
    case OP_PARAMETER: r = int_range(dt) ? int_range(dt) : -1; break;
    case OP_COMPARE: r = 1; break;
    case OP_IOTA: {
        int64_t d = instr_int(x, A_IOTA_DIMENSION, 0);
        r = d >= 0 && (uint64_t)d < x->shape.rank ? (double)x->shape.dims[d] : -1;
        break;
    }
    case OP_CONSTANT: {
        const hlo_attr *la = instr_attr(x, A_LITERAL);
        bool ok = la && !la->v.lit->elided && !la->v.lit->raw;
        r = 0;
        for (int64_t k = 0; ok && k < la->v.lit->count; k++) {
            double v = la->v.lit->f ? la->v.lit->f[k] : (double)la->v.lit->i[k];
            ok = v == floor(v);
            r = fmax(r, fabs(v));
        }
        if (!ok) r = -1;
        break;
    }
    case OP_CONVERT: {
        /* from integers, or from an integral float */
        int from = comp->instrs[x->operands[0]].shape.dtype;
        r = seen[x->operands[0]] == 1 ? memo[x->operands[0]] : int_range(from) ? int_range(from) : -1;
        break;
    }
    case OP_ADD: case OP_SUBTRACT: r = b[0] + b[1]; break;
    case OP_MULTIPLY: r = b[0] * b[1]; break;
    case OP_NEGATE: case OP_ABS: case OP_BROADCAST: case OP_RESHAPE: case OP_TRANSPOSE: case OP_COPY: case OP_BITCAST:
    case OP_SLICE: case OP_REVERSE:
        r = b[0];
        break;
    case OP_MAXIMUM: case OP_MINIMUM: r = fmax(b[0], b[1]); break;
    case OP_SELECT: r = fmax(b[1], b[2]); break;
    case OP_REDUCE: {
        int red = instr_reducer(m, x);
        uint32_t nd;
        const int64_t *rd = instr_ints(x, A_DIMENSIONS, &nd);
        const shape *xs = &comp->instrs[x->operands[0]].shape;
        double n = 1;
        for (uint32_t k = 0; k < nd; k++) n *= rd[k] >= 0 && (uint64_t)rd[k] < xs->rank ? (double)xs->dims[rd[k]] : 0;
        r = x->noperands != 2 ? -1 : red == RED_SUM ? b[0] * n + b[1] : red == RED_MAX || red == RED_MIN ? fmax(b[0], b[1]) : -1;
        break;
    }
    case OP_ALL_REDUCE: {
        int red = instr_reducer(m, x);
        r = x->noperands != 1 ? -1 : red == RED_SUM ? b[0] * (double)ndev : red == RED_MAX || red == RED_MIN ? b[0] : -1;
        break;
    }
    default: break;
    }
    double top = dtype_is_float(dt) ? exact_ints(dt) : int_range(dt);
    bool ok = r >= 0 && r <= top;
    memo[i] = r;
    seen[i] = ok ? 1 : 2;
    return ok;
}

double lf_integral_bound(const hlo_module *m, const hlo_comp *comp, uint32_t i, int64_t ndev) {
    uint8_t *seen = xcalloc(comp->ninstrs + 1, 1);
    double *memo = xcalloc(comp->ninstrs + 1, sizeof *memo);
    double r = integral_instr(m, comp, i, ndev, seen, memo, 0) ? memo[i] : -1;
    free(seen);
    free(memo);
    return r;
}

/* Whether a float value of dtype `from` whose shares (each at most `bound`
 * in magnitude, integral) are summed over `parts` devices converts to dtype
 * `to` exactly, share by share and summed alike. */
bool lf_counts_convert_exactly(int from, int to, double bound, int64_t parts) {
    double total = bound * (double)parts;
    double top = dtype_is_float(to) ? exact_ints(to) : int_range(to);
    return bound >= 0 && dtype_is_float(from) && total <= exact_ints(from) && total <= top;
}

/* The class under a chain of transposes (*base), and for each dim k of it the
 * dim of cls it lands on (map[k]). Returns base's rank. */
static uint32_t peel_transposes(lift_ctx *c, eid cls, eid *base, int8_t *map) {
    uint32_t rank;
    eg_type_dims(c->g, eg_class_type(c->g, cls), &rank);
    if (rank > VIEW_MAX_RANK) return 0;
    for (uint32_t k = 0; k < rank; k++) map[k] = (int8_t)k;
    for (int guard = 0; guard < 16; guard++) {
        eid n = eg_class_first(c->g, cls);
        if (n == EID_NONE || eg_node_op(c->g, n) != OP_TRANSPOSE) break;
        uint32_t nc, np;
        const eid *ch = eg_node_children(c->g, n, &nc);
        const int64_t *p = ea_get(c->g, eg_node_attr(c->g, n), A_DIMENSIONS, &np);
        uint32_t seen = 0;
        for (uint32_t q = 0; q < np && nc == 1 && np == rank; q++)
            seen |= p[q] >= 0 && p[q] < (int64_t)rank ? 1u << p[q] : 0;
        if (nc != 1 || np != rank || seen != (rank == 32 ? ~0u : (1u << rank) - 1)) break; /* not a permutation */
        /* transpose dim q is operand dim p[q]: operand dim p[q] lands where q did */
        int8_t inner[VIEW_MAX_RANK];
        for (uint32_t q = 0; q < rank; q++) inner[p[q]] = map[q];
        memcpy(map, inner, rank);
        cls = ch[0];
    }
    *base = eg_find(c->g, cls);
    return rank;
}

/* Class cls's node of op with n children, rebuilt over ch (same attributes and
 * type); EID_NONE when cls has no such node. */
static eid rebuild_over(lift_ctx *c, eid cls, uint16_t op, const eid *ch, uint32_t n) {
    eid nd = lf_class_node(c, cls, op, n, NULL);
    return nd == EID_NONE ? EID_NONE : eg_add(c->g, op, eg_node_attr(c->g, nd), eg_class_type(c->g, cls), ch, n, c->origin);
}

/* Whether child k of class cls's node of op (with n children) is want: the
 * operand's own class, not one the transfer function re-viewed. */
static bool child_is(lift_ctx *c, eid cls, uint16_t op, uint32_t n, uint32_t k, eid want) {
    const eid *ch;
    return lf_class_node(c, cls, op, n, &ch) != EID_NONE && eg_find(c->g, ch[k]) == eg_find(c->g, want);
}

static lift_zmask *zmask_new(lift_ctx *c, const lift_zmask *from) {
    lift_zmask *z = arena_alloc(c->a, sizeof *z);
    *z = *from;
    return z;
}

/* compare(p, 0) GT or NE (or 0 LT p): the predicate mask of a non-negative p. */
static const lift_zmask *zmask_compare(lstate *s) {
    lift_ctx *c = s->c;
    const hlo_instr *in = s->in;
    const char *dir = instr_str(in, A_DIRECTION);
    if (!dir || in->noperands != 2) return NULL;
    int side;
    if (strcmp(dir, "GT") == 0 || strcmp(dir, "NE") == 0) side = 0;
    else if (strcmp(dir, "LT") == 0) side = 1;
    else return NULL;
    const lval *p = &s->vals[in->operands[side]], *z = &s->vals[in->operands[1 - side]];
    if (p->kind != LV_TERM || z->kind != LV_TERM || p->assumed || !lf_class_is_zero(c, z->cls)) {
        if (!(strcmp(dir, "NE") == 0 && side == 0)) return NULL;
        /* NE is symmetric: 0 != p */
        p = &s->vals[in->operands[1]], z = &s->vals[in->operands[0]];
        side = 1;
        if (p->kind != LV_TERM || z->kind != LV_TERM || p->assumed || !lf_class_is_zero(c, z->cls)) return NULL;
    }
    if (!lf_nonneg(c->cur, s->comp, in->operands[side])) return NULL;
    lift_zmask z0 = {.pred = true, .full = EID_NONE};
    int8_t map[VIEW_MAX_RANK];
    z0.rank = (uint8_t)peel_transposes(c, p->cls, &z0.src, map);
    z0.made = z0.src;
    memcpy(z0.dims, map, sizeof map);
    return z0.rank ? zmask_new(c, &z0) : NULL;
}

/* The mask of a dot's result: the masked operand's mask dims must be batch or
 * free dims. NULL otherwise. */
static const lift_zmask *zmask_dot(lstate *s, const lval *v, uint32_t side) {
    lift_ctx *c = s->c;
    const hlo_instr *in = s->in;
    const lift_zmask *z = s->vals[in->operands[side]].zm;
    uint32_t nlb, nlc, nrb, nrc;
    const int64_t *lb = instr_ints(in, A_LHS_BATCH_DIMS, &nlb), *lc = instr_ints(in, A_LHS_CONTRACTING_DIMS, &nlc);
    const int64_t *rb = instr_ints(in, A_RHS_BATCH_DIMS, &nrb), *rc = instr_ints(in, A_RHS_CONTRACTING_DIMS, &nrc);
    const int64_t *bd = side ? rb : lb, *cd = side ? rc : lc;
    uint32_t nb = side ? nrb : nlb, nc = side ? nrc : nlc;
    uint32_t lrank = s->comp->instrs[in->operands[0]].shape.rank, rank = s->comp->instrs[in->operands[side]].shape.rank;
    /* output dim of each operand dim: batch dims first, then lhs free, then rhs free */
    int8_t out[VIEW_MAX_RANK];
    uint32_t next = nb + (side ? lrank - nlb - nlc : 0);
    for (uint32_t d = 0; d < rank && d < VIEW_MAX_RANK; d++) {
        out[d] = -1;
        for (uint32_t k = 0; k < nb; k++)
            if (bd[k] == d) out[d] = (int8_t)k;
        bool contracted = false;
        for (uint32_t k = 0; k < nc; k++) contracted |= cd[k] == d;
        if (out[d] < 0 && !contracted) out[d] = (int8_t)next++;
    }
    lift_zmask r = *z;
    for (uint32_t k = 0; k < z->rank; k++) {
        if (out[z->dims[k]] < 0) return NULL;
        r.dims[k] = out[z->dims[k]];
    }
    eid ch[2] = {s->vals[in->operands[0]].cls, s->vals[in->operands[1]].cls};
    if (!child_is(c, v->cls, OP_DOT, 2, side, ch[side]) || !child_is(c, v->cls, OP_DOT, 2, 1 - side, ch[1 - side])) return NULL;
    ch[side] = z->full;
    r.full = rebuild_over(c, v->cls, OP_DOT, ch, 2);
    return r.full == EID_NONE ? NULL : zmask_new(c, &r);
}

/* Where each element of class x (row-major) comes from in class made, when x
 * is made rearranged by transposes, reshapes and reverses: flat indices into
 * made (caller frees); NULL otherwise or when larger than 2^20 elements. */
static int32_t *rearrangement(lift_ctx *c, eid x, eid made, int depth) {
    x = eg_find(c->g, x);
    uint32_t rank;
    const int64_t *dims = eg_type_dims(c->g, eg_class_type(c->g, x), &rank);
    int64_t n = 1;
    for (uint32_t d = 0; d < rank; d++) n *= dims[d];
    if (n > (1 << 20) || rank > VIEW_MAX_RANK || depth > 64) return NULL;
    if (x == eg_find(c->g, made)) {
        int32_t *id = xmalloc((size_t)(n + 1) * sizeof *id);
        for (int64_t i = 0; i < n; i++) id[i] = (int32_t)i;
        return id;
    }
    for (eid nd = eg_class_first(c->g, x); nd != EID_NONE; nd = eg_class_next(c->g, nd)) {
        uint16_t op = eg_node_op(c->g, nd);
        if (op != OP_TRANSPOSE && op != OP_RESHAPE && op != OP_REVERSE) continue;
        uint32_t nc, na = 0;
        const eid *ch = eg_node_children(c->g, nd, &nc);
        int32_t *from = nc == 1 ? rearrangement(c, ch[0], made, depth + 1) : NULL;
        if (!from) continue;
        if (op == OP_RESHAPE) return from;
        const int64_t *attr = ea_get(c->g, eg_node_attr(c->g, nd), A_DIMENSIONS, &na);
        uint32_t crank;
        const int64_t *cd = eg_type_dims(c->g, eg_class_type(c->g, ch[0]), &crank);
        /* stride in the operand of each result dim, and where it starts */
        int64_t cstride[VIEW_MAX_RANK], stride[VIEW_MAX_RANK], start = 0;
        for (int64_t d = (int64_t)crank - 1, acc = 1; d >= 0; acc *= cd[d], d--) cstride[d] = acc;
        for (uint32_t q = 0; q < rank; q++) stride[q] = op == OP_TRANSPOSE && q < na ? cstride[attr[q]] : cstride[q];
        for (uint32_t k = 0; op == OP_REVERSE && k < na; k++) {
            start += (dims[attr[k]] - 1) * cstride[attr[k]];
            stride[attr[k]] = -cstride[attr[k]];
        }
        int32_t *out = xmalloc((size_t)(n + 1) * sizeof *out);
        int64_t idx[VIEW_MAX_RANK] = {0}, off = start;
        for (int64_t i = 0; i < n; i++) {
            out[i] = from[off];
            for (int64_t d = (int64_t)rank - 1; d >= 0; d--) {
                off += stride[d];
                if (++idx[d] < dims[d]) break;
                off -= stride[d] * dims[d];
                idx[d] = 0;
            }
        }
        free(from);
        return out;
    }
    return NULL;
}

/* The combine: dot(w, y) with y zero-masked by made > 0 and w a rearrangement
 * of made. When the dot pairs every mask dim of y with a dim of w and w holds,
 * at every paired position, the very element of made the mask read there, the
 * dot over the unmasked rows is the same value: it replaces v's term. When it
 * holds another one, rows were routed by one expert's weight and weighted by
 * another's: a finding at the op that moved them. */
static bool zmask_combine(lstate *s, lval *v) {
    lift_ctx *c = s->c;
    const hlo_instr *in = s->in;
    for (uint32_t side = 0; side < 2; side++) {
        const lval *y = &s->vals[in->operands[side]], *w = &s->vals[in->operands[1 - side]];
        const lift_zmask *z = y->zm;
        if (!z || z->pred || !z->zero || w->zm || w->kind != LV_TERM) continue;
        uint32_t nlb, nlc, nrb, nrc;
        const int64_t *lb = instr_ints(in, A_LHS_BATCH_DIMS, &nlb), *lc = instr_ints(in, A_LHS_CONTRACTING_DIMS, &nlc);
        const int64_t *rb = instr_ints(in, A_RHS_BATCH_DIMS, &nrb), *rc = instr_ints(in, A_RHS_CONTRACTING_DIMS, &nrc);
        const int64_t *yb = side ? rb : lb, *yc = side ? rc : lc, *wb = side ? lb : rb, *wc = side ? lc : rc;
        /* wdim[k]: the w dim paired with the y dim mask dim k reads */
        int8_t wdim[VIEW_MAX_RANK];
        bool ok = s->comp->instrs[in->operands[1 - side]].shape.rank == z->rank;
        uint32_t used = 0;
        for (uint32_t k = 0; k < z->rank && ok; k++) {
            wdim[k] = -1;
            for (uint32_t q = 0; q < nlb; q++)
                if (yb[q] == z->dims[k]) wdim[k] = (int8_t)wb[q];
            for (uint32_t q = 0; q < nlc; q++)
                if (yc[q] == z->dims[k]) wdim[k] = (int8_t)wc[q];
            ok = wdim[k] >= 0 && wdim[k] < (int8_t)z->rank && !(used & (1u << wdim[k]));
            if (ok) used |= 1u << wdim[k];
        }
        if (!ok) continue;
        int32_t *ms = rearrangement(c, z->src, z->made, 0), *ws = ms ? rearrangement(c, w->cls, z->made, 0) : NULL;
        bool same = ws != NULL;
        if (same) {
            /* walk the mask source; the paired w element has w dim wdim[k] = s[k] */
            uint32_t wr;
            const int64_t *sd = eg_type_dims(c->g, eg_class_type(c->g, z->src), &(uint32_t){0});
            const int64_t *wd = eg_type_dims(c->g, eg_class_type(c->g, w->cls), &wr);
            int64_t wstride[VIEW_MAX_RANK], idx[VIEW_MAX_RANK] = {0}, off = 0, n = 1;
            for (int64_t d = (int64_t)wr - 1, acc = 1; d >= 0; acc *= wd[d], d--) wstride[d] = acc;
            for (uint32_t k = 0; k < z->rank; k++) n *= sd[k];
            for (int64_t i = 0; i < n && same; i++) {
                same = ms[i] == ws[off];
                for (int64_t d = (int64_t)z->rank - 1; d >= 0; d--) {
                    off += wstride[wdim[d]];
                    if (++idx[d] < sd[d]) break;
                    off -= wstride[wdim[d]] * sd[d];
                    idx[d] = 0;
                }
            }
            if (!same) {
                const hlo_instr *at = z->moved ? z->moved : in;
                lf_finding(c, KIND_LAYOUT_MISMATCH, s->comp, at,
                        "%s (%s) rearranges the rows of a dispatch along its expert (mask) dimensions, and %s then weights "
                        "each row by the router weight of an expert it was not routed for: tokens reach the wrong experts",
                        at->name, at->opname, in->name);
                lf_assume(c, "the router routes some token to one of the experts whose rows were exchanged and not to "
                               "the other, as top-k routing with k below the number of experts does for almost every input");
            }
        }
        free(ms);
        free(ws);
        if (!same) continue;
        eid ch[2] = {s->vals[in->operands[0]].cls, s->vals[in->operands[1]].cls};
        if (!child_is(c, v->cls, OP_DOT, 2, 0, ch[0]) || !child_is(c, v->cls, OP_DOT, 2, 1, ch[1])) continue;
        ch[side] = z->full;
        eid r = rebuild_over(c, v->cls, OP_DOT, ch, 2);
        if (r == EID_NONE) continue;
        v->cls = r;
        v->zm = NULL;
        return true;
    }
    return false;
}

/* Whether op maps zero operands (those flagged) to zero. */
static bool keeps_zero(int op, uint32_t n, const bool *zero) {
    switch (op) {
    case OP_MULTIPLY:
        return zero[0] || zero[1];
    case OP_ADD: case OP_SUBTRACT: case OP_MAXIMUM: case OP_MINIMUM:
        return zero[0] && zero[1];
    case OP_NEGATE: case OP_CONVERT: case OP_ABS: case OP_SIGN: case OP_SINE: case OP_TAN: case OP_TANH: case OP_SQRT:
    case OP_CBRT: case OP_EXPM1: case OP_LOG1P: case OP_ERF: case OP_FLOOR: case OP_CEIL: case OP_ROUND_AFZ:
    case OP_ROUND_EVEN: case OP_REDUCE_PRECISION:
        return n == 1 && zero[0];
    case OP_SELECT:
        return n == 3 && zero[1] && zero[2];
    default:
        return false;
    }
}

/* Re-points z's source after its value is reshaped from a to b (global
 * dims) into r: the source, brought to the value's dim order, is reshaped
 * alike run by run (runs of dims with equal products): a run of mask dims
 * keeps its non-unit output dims (split or merged experts; only renumbered
 * when just unit dims come and go), a run of other dims none. A run mixing
 * mask and other dims: false. */
static bool zmask_reshape(lift_ctx *c, const lift_zmask *z, const int64_t *a, uint32_t ra, const int64_t *b, uint32_t rb,
                          lift_zmask *r) {
    if (ra > VIEW_MAX_RANK || rb > VIEW_MAX_RANK) return false;
    int8_t src_of[VIEW_MAX_RANK];
    memset(src_of, -1, sizeof src_of);
    for (uint32_t k = 0; k < z->rank; k++) src_of[z->dims[k]] = (int8_t)k;
    /* the source in value order */
    int64_t perm[VIEW_MAX_RANK], sdims[VIEW_MAX_RANK];
    uint32_t np = 0, srank;
    const int64_t *sd = eg_type_dims(c->g, eg_class_type(c->g, z->src), &srank);
    for (uint32_t d = 0; d < ra; d++)
        if (src_of[d] >= 0) perm[np] = src_of[d], sdims[np] = sd[src_of[d]], np++;
    if (np != srank) return false;
    eid aligned = z->src;
    bool ident = true;
    for (uint32_t k = 0; k < np; k++) ident &= perm[k] == k;
    if (!ident) {
        uint32_t t = lf_type_of(c, eg_type_dtype(c->g, eg_class_type(c->g, z->src)), sdims, np);
        aligned = eg_add(c->g, OP_TRANSPOSE, lf_list_attr(c, A_DIMENSIONS, perm, np), t, &z->src, 1, c->origin);
    }
    /* runs of equal products: mask-only ones carry over to the source */
    int64_t ndims[VIEW_MAX_RANK];
    int8_t nmap[VIEW_MAX_RANK];
    uint32_t nn = 0, i = 0, j = 0;
    while (i < ra || j < rb) {
        uint32_t i2, j2;
        if (!lf_reshape_run(a, ra, b, rb, i, j, &i2, &j2)) return false;
        uint32_t masks = 0, others = 0;
        for (uint32_t d = i; d < i2; d++)
            if (a[d] != 1 && src_of[d] >= 0) masks++;
            else if (a[d] != 1) others++;
        if (masks && others) return false;
        for (uint32_t q = j; q < j2 && masks; q++)
            if (b[q] != 1) {
                if (nn == VIEW_MAX_RANK) return false;
                ndims[nn] = b[q], nmap[nn++] = (int8_t)q;
            }
        i = i2, j = j2;
    }
    uint32_t t = lf_type_of(c, eg_type_dtype(c->g, eg_class_type(c->g, z->src)), ndims, nn);
    eid src = lf_mk_reshape(c, aligned, t, c->origin);
    int8_t map[VIEW_MAX_RANK];
    r->rank = (uint8_t)peel_transposes(c, src, &r->src, map);
    for (uint32_t k = 0; k < r->rank; k++) r->dims[k] = nmap[map[k]];
    return r->rank == nn;
}

/* The zero mask of v, the value lf_lift_instr gave s->in, from its operands'
 * (and the combine that drops one): lift.h, lift_zmask. */
void lf_zmask_after(lstate *s, lval *v) {
    lift_ctx *c = s->c;
    const hlo_instr *in = s->in;
    v->zm = NULL;
    if (c->baseline_mode || (v->kind != LV_TERM && v->kind != LV_LAYOUT) || v->assumed || in->noperands > 8) return;
    if (in->op == OP_COMPARE) {
        v->zm = zmask_compare(s);
        return;
    }
    const lift_zmask *z = NULL;
    uint32_t zo = 0;
    for (uint32_t o = 0; o < in->noperands; o++)
        if (s->vals[in->operands[o]].zm && !z) z = s->vals[in->operands[o]].zm, zo = o;
    if (!z) return;
    /* The same global term (layout changes, collectives, copies): the same claim. */
    if (eg_find(c->g, s->vals[in->operands[zo]].cls) == eg_find(c->g, v->cls)) {
        v->zm = z;
        return;
    }
    if (v->kind != LV_TERM) return;
    uint32_t rank;
    eg_type_dims(c->g, eg_class_type(c->g, v->cls), &rank);
    lift_zmask r = *z;
    switch (in->op) {
    case OP_TRANSPOSE: {
        uint32_t np;
        const int64_t *p = instr_ints(in, A_DIMENSIONS, &np);
        for (uint32_t k = 0; k < z->rank; k++)
            for (uint32_t q = 0; q < np; q++)
                if (p[q] == z->dims[k]) r.dims[k] = (int8_t)q;
        /* Mask dims in another order among themselves: rows move (a later
         * reshape may merge them in that order). */
        for (uint32_t k = 0; k < z->rank; k++)
            for (uint32_t q = 0; q < z->rank; q++)
                if ((z->dims[k] < z->dims[q]) != (r.dims[k] < r.dims[q])) r.moved = in;
        break;
    }
    case OP_REVERSE: {
        /* Reversing a mask dim reverses the mask's source along its dim. */
        uint32_t nr;
        const int64_t *rd = instr_ints(in, A_DIMENSIONS, &nr);
        int64_t sd[VIEW_MAX_RANK];
        uint32_t ns = 0;
        for (uint32_t q = 0; q < nr; q++)
            for (uint32_t k = 0; k < z->rank; k++)
                if (z->dims[k] == rd[q]) sd[ns++] = k;
        if (ns) {
            r.src = eg_add(c->g, OP_REVERSE, lf_list_attr(c, A_DIMENSIONS, sd, ns), eg_class_type(c->g, z->src), &z->src, 1,
                           c->origin);
            r.moved = in;
        }
        break;
    }
    case OP_BROADCAST: {
        uint32_t nb;
        const int64_t *bd = instr_ints(in, A_DIMENSIONS, &nb);
        for (uint32_t k = 0; k < z->rank; k++) r.dims[k] = (int8_t)bd[z->dims[k]];
        break;
    }
    case OP_RESHAPE: case OP_BITCAST: {
        /* Copies: adding a type (zmask_reshape may) moves the e-graph's type store. */
        uint32_t ra;
        int64_t a[VIEW_MAX_RANK], b[VIEW_MAX_RANK];
        const int64_t *ta = eg_type_dims(c->g, eg_class_type(c->g, s->vals[in->operands[0]].cls), &ra);
        if (ra > VIEW_MAX_RANK) return;
        memcpy(a, ta, ra * sizeof *a);
        const int64_t *tb = eg_type_dims(c->g, eg_class_type(c->g, v->cls), &rank);
        if (rank > VIEW_MAX_RANK) return;
        memcpy(b, tb, rank * sizeof *b);
        if (!zmask_reshape(c, z, a, ra, b, rank, &r)) return;
        if (!z->pred) r.full = lf_mk_reshape(c, z->full, eg_class_type(c->g, v->cls), c->origin);
        v->zm = zmask_new(c, &r);
        return;
    }
    case OP_DOT: {
        if (zmask_combine(s, v)) return;
        if (s->vals[in->operands[1 - zo]].zm || z->pred) return;
        v->zm = zmask_dot(s, v, zo);
        return;
    }
    default:
        break;
    }
    if (in->op == OP_TRANSPOSE || in->op == OP_BROADCAST || in->op == OP_REVERSE) {
        if (!z->pred && (r.full = rebuild_over(c, v->cls, in->op, &z->full, 1)) == EID_NONE) return;
        v->zm = zmask_new(c, &r);
        return;
    }
    if (!graph_op_elementwise(in->op) || in->op == OP_COMPARE) return;
    /* select(pred mask, x, 0): the dispatch itself. */
    if (in->op == OP_SELECT && z->pred && zo == 0) {
        if (s->vals[in->operands[1]].zm || s->vals[in->operands[2]].zm ||
            !child_is(c, v->cls, OP_SELECT, 3, 0, s->vals[in->operands[0]].cls))
            return;
        for (eid nd = eg_class_first(c->g, v->cls); nd != EID_NONE; nd = eg_class_next(c->g, nd)) {
            uint32_t m;
            const eid *ch = eg_node_children(c->g, nd, &m);
            if (eg_node_op(c->g, nd) != OP_SELECT || m != 3) continue;
            if (!lf_class_is_zero(c, ch[2])) return;
            r.pred = false;
            r.zero = true;
            r.full = eg_find(c->g, ch[1]);
            v->zm = zmask_new(c, &r);
            return;
        }
        return;
    }
    /* Elementwise over data masked alike (or unmasked): the op over the rows. */
    eid ch[8];
    bool zero[8];
    for (uint32_t o = 0; o < in->noperands; o++) {
        const lval *x = &s->vals[in->operands[o]];
        zero[o] = false;
        if (!x->zm) {
            /* the operand as the op's node has it (re-viewed broadcasts) */
            ch[o] = EID_NONE;
            continue;
        }
        if (x->zm->pred || x->zm->src != z->src || x->zm->rank != z->rank || memcmp(x->zm->dims, z->dims, z->rank) ||
            !child_is(c, v->cls, in->op, in->noperands, o, x->cls))
            return;
        ch[o] = x->zm->full;
        zero[o] = x->zm->zero;
    }
    for (eid nd = eg_class_first(c->g, v->cls); nd != EID_NONE; nd = eg_class_next(c->g, nd)) {
        uint32_t m;
        const eid *nch = eg_node_children(c->g, nd, &m);
        if (eg_node_op(c->g, nd) != in->op || m != in->noperands) continue;
        for (uint32_t o = 0; o < m; o++)
            if (ch[o] == EID_NONE) ch[o] = nch[o];
        r.full = rebuild_over(c, v->cls, in->op, ch, m);
        r.zero = keeps_zero(in->op, m, zero);
        if (r.full != EID_NONE) v->zm = zmask_new(c, &r);
        return;
    }
}

