/* lift_moment — statistics written two ways (lift.c's other_forms calls
 * lf_moment_forms and lf_lse_forms on both sides alike).
 *
 * Second moments.
 * A synchronised batch norm sums x and x² on each device and all-reduces
 * both (one collective for both moments); the baseline computes the
 * variance as the mean of squared deviations. Over the reals, with
 * S = Σ_D x, Q = Σ_D x² over N elements per output and a = 1/N,
 *   a·Q − a²·S² = a·Σ_D (x − a·S)²
 * (Σ (x − aS)² = Q − 2aS² + N·a²S² = Q − aS² when N·a = 1). Where a value
 * is the left side, written as the factors are put back (multiply by a
 * broadcast constant), it joins the right side built the same way: the
 * mean broadcast along the reduced dims as a broadcast of S times a
 * broadcast a. Only where a is the dtype's 1/N, a² the dtype's a·a, and
 * the reduce a sum from zero.
 *
 * A logsumexp's shift. log Σ_j exp(x − m) + m = log Σ_j exp(x) over the
 * reals for any finite m along the other dims; taken where m is the row's
 * max (its all-reduced max over a vocab-parallel row, jax.nn.logsumexp's
 * guarded max), finite wherever x is — any other m could be infinite.
 * Both sides' shifted forms join the unshifted one; the sum may sit under
 * an abs (a sum of exponentials is never negative).
 * So does jax.nn.log_softmax's (x − m) − log Σ exp(x − m): x − log Σ exp(x).
 *
 * Signs. A value that is never negative over the reals (an exponential, an
 * abs, a square, a sum of such from zero) compared with zero by >= is true
 * everywhere (by < false), and its abs is itself: jax.nn.logsumexp takes
 * the abs of its sum, and its derivative selects by the sum's sign.
 * where(is_finite(m), m, k) is m for finite m: that m is finite is assumed
 * (recorded) — jax.nn.logsumexp's guard against rows with no finite max.
 *
 * A softmax normalised before its dot with the values or after: dot(a /
 * broadcast(s), b) is dot(a, b) / broadcast(s) when s is broadcast only
 * along dims of a the dot keeps (batch or free), placed where the dot puts
 * them (an attention's weights divided by their sum, or its output divided,
 * as flash and ring attention do). */
#include "lift.h"
#include "lift_int.h"

#include "eattr.h"
#include "interp.h"

#include <math.h>
#include <string.h>

/* The scalar class c with x = broadcast(c) holding one known value, and
 * that value. */
static bool splat(lift_ctx *c, eid x, eid *sc, double *val) {
    const eid *ch;
    if (lf_class_node(c, x, OP_BROADCAST, 1, &ch) == EID_NONE) return false;
    uint32_t r;
    eg_type_dims(c->g, eg_class_type(c->g, ch[0]), &r);
    const interp_val *v = lf_kval(c, ch[0]);
    if (r != 0 || !v || v->n != 1 || !v->f) return false;
    *sc = ch[0];
    *val = v->f[0];
    return true;
}

/* x = multiply(y, broadcast(k)) in either order: y, the broadcast, k's
 * scalar class and value. */
static bool scaled(lift_ctx *c, eid x, eid *y, eid *bk, eid *sc, double *k) {
    for (eid n = eg_class_first(c->g, eg_find(c->g, x)); n != EID_NONE; n = eg_class_next(c->g, n)) {
        uint32_t nch;
        const eid *ch = eg_node_children(c->g, n, &nch);
        if (eg_node_op(c->g, n) != OP_MULTIPLY || nch != 2) continue;
        for (uint32_t o = 0; o < 2; o++)
            if (splat(c, ch[1 - o], sc, k)) {
                *y = ch[o], *bk = ch[1 - o];
                return true;
            }
    }
    return false;
}

/* x = divide(y, broadcast(k)), k a known non-zero scalar: y and 1/k. */
static bool divided(lift_ctx *c, eid x, eid *y, double *k) {
    const eid *ch;
    eid sc;
    double d;
    if (lf_class_node(c, x, OP_DIVIDE, 2, &ch) == EID_NONE || !splat(c, ch[1], &sc, &d) || d == 0) return false;
    *y = ch[0];
    *k = 1 / d;
    return true;
}

/* *y with known scalar factors taken off (multiplied by, divided by):
 * their product times *k. */
static void unscaled(lift_ctx *c, eid *y, double *k) {
    eid z, bk, sc;
    double f;
    for (int depth = 0; depth < 4; depth++) {
        if (scaled(c, *y, &z, &bk, &sc, &f) || divided(c, *y, &z, &f)) *y = z, *k *= f;
        else return;
    }
}

/* x = reduce(arg, zero) summing: the reduce node (NULL-safe: EID_NONE). */
static eid sum_of(lift_ctx *c, eid x, const eid **ch) {
    for (eid n = eg_class_first(c->g, eg_find(c->g, x)); n != EID_NONE; n = eg_class_next(c->g, n)) {
        uint32_t nch;
        const eid *k = eg_node_children(c->g, n, &nch);
        if (eg_node_op(c->g, n) != OP_REDUCE || nch != 2 || !lf_class_is_zero(c, k[1])) continue;
        *ch = k;
        return n;
    }
    return EID_NONE;
}

/* The value v rounded to the element type dt (f32 and f64 only). */
static bool rounded(int dt, double v, double *out) {
    if (dt == DT_F64) *out = v;
    else if (dt == DT_F32) *out = (float)v;
    else return false;
    return true;
}

void lf_moment_forms(lstate *s, const lval *v) {
    lift_ctx *c = s->c;
    const hlo_instr *in = s->in;
    if (in->op != OP_SUBTRACT || in->noperands != 2 || v->kind != LV_TERM || v->cls == EID_NONE ||
        s->ops[0].kind != LV_TERM || s->ops[1].kind != LV_TERM || s->ops[0].cls == EID_NONE || s->ops[1].cls == EID_NONE)
        return;
    /* a·Q: Q = Σ x·x */
    eid q, ka, sa, qq, kb, sb;
    double a, b;
    if (!scaled(c, s->ops[0].cls, &q, &ka, &sa, &a) || !scaled(c, s->ops[1].cls, &qq, &kb, &sb, &b)) return;
    const eid *qr, *sq, *pr, *sr;
    eid qn = sum_of(c, q, &qr);
    if (qn == EID_NONE || lf_class_node(c, qr[0], OP_MULTIPLY, 2, &sq) == EID_NONE ||
        eg_find(c->g, sq[0]) != eg_find(c->g, sq[1]))
        return;
    eid x = eg_find(c->g, sq[0]);
    /* a²·S·S: S = Σ x over the same dims */
    if (lf_class_node(c, qq, OP_MULTIPLY, 2, &pr) == EID_NONE || eg_find(c->g, pr[0]) != eg_find(c->g, pr[1])) return;
    eid sn = sum_of(c, pr[0], &sr);
    uint32_t attr = eg_node_attr(c->g, qn);
    if (sn == EID_NONE || eg_node_attr(c->g, sn) != attr || eg_find(c->g, sr[0]) != x) return;
    /* a is 1/N, b is a·a, in the element type */
    uint32_t xt = eg_class_type(c->g, x), xr, nd;
    const int64_t *xd = eg_type_dims(c->g, xt, &xr);
    const int64_t *rd = ea_get(c->g, attr, A_DIMENSIONS, &nd);
    if (!rd || xr > VIEW_MAX_RANK) return;
    double n = 1;
    for (uint32_t k = 0; k < nd; k++) {
        if (rd[k] < 0 || (uint32_t)rd[k] >= xr) return;
        n *= (double)xd[rd[k]];
    }
    int dt = eg_type_dtype(c->g, xt);
    /* in the element type (constants are held unrounded or rounded; the
     * factors are multiplied unrounded): a is 1/N, b is a² */
    double ra, rb, inv, sq_a, sq_n;
    if (!rounded(dt, a, &ra) || !rounded(dt, b, &rb) || !rounded(dt, 1 / n, &inv) || !rounded(dt, a * a, &sq_a) ||
        !rounded(dt, 1 / (n * n), &sq_n) || ra != inv || (rb != sq_a && rb != sq_n))
        return;
    /* a·Σ (x − broadcast(S)·broadcast(a))² */
    int64_t kept[VIEW_MAX_RANK];
    uint32_t nk = 0;
    for (uint32_t d = 0; d < xr; d++) {
        bool red = false;
        for (uint32_t k = 0; k < nd; k++) red |= rd[k] == d;
        if (!red) kept[nk++] = d;
    }
    eid sum = eg_find(c->g, pr[0]), zero = eg_find(c->g, qr[1]); /* children arrays move as nodes are added */
    eid bs = eg_add(c->g, OP_BROADCAST, lf_list_attr(c, A_DIMENSIONS, kept, nk), xt, &sum, 1, c->origin);
    eid ba = eg_add(c->g, OP_BROADCAST, 0, xt, &sa, 1, c->origin);
    eid mu_ch[2] = {bs, ba}, mu = eg_add(c->g, OP_MULTIPLY, 0, xt, mu_ch, 2, c->origin);
    eid dev_ch[2] = {x, mu}, dev = eg_add(c->g, OP_SUBTRACT, 0, xt, dev_ch, 2, c->origin);
    eid sq_ch[2] = {dev, dev}, sqd = eg_add(c->g, OP_MULTIPLY, 0, xt, sq_ch, 2, c->origin);
    eid red_ch[2] = {sqd, zero}, r = eg_add(c->g, OP_REDUCE, attr, eg_class_type(c->g, q), red_ch, 2, c->origin);
    eid var_ch[2] = {r, ka}, var = eg_add(c->g, OP_MULTIPLY, 0, eg_class_type(c->g, v->cls), var_ch, 2, c->origin);
    eg_union(c->g, v->cls, var, NULL);
}

/* The class s is m seen through reshapes by unit dims (squeezed, or keepdims). */
static bool same_but_unit_dims(lift_ctx *c, eid s, eid m) {
    if (eg_find(c->g, s) == eg_find(c->g, m)) return true;
    uint32_t ts = eg_class_type(c->g, s), tm = eg_class_type(c->g, m);
    if (eg_type_dtype(c->g, ts) != eg_type_dtype(c->g, tm)) return false;
    int64_t ns = 1, nm = 1;
    uint32_t rs, rm;
    const int64_t *ds = eg_type_dims(c->g, ts, &rs), *dm = eg_type_dims(c->g, tm, &rm);
    for (uint32_t k = 0; k < rs; k++) ns *= ds[k];
    for (uint32_t k = 0; k < rm; k++) nm *= dm[k];
    return ns == nm && eg_find(c->g, lf_mk_reshape(c, m, ts, c->origin)) == eg_find(c->g, s);
}

/* Whether class m (through reshapes by unit dims) is the max of some x
 * along one dim: that x and dim. */
static bool max_of(lift_ctx *c, eid m, eid *x, uint32_t *j) {
    const eid *ch;
    for (int depth = 0; depth < 4; depth++) {
        eid rn = lf_class_node(c, m, OP_REDUCE, 2, &ch);
        if (rn != EID_NONE) {
            uint32_t nd, nt;
            const int64_t *rd = ea_get(c->g, eg_node_attr(c->g, rn), A_DIMENSIONS, &nd);
            const int64_t *ta = ea_get(c->g, eg_node_attr(c->g, rn), A_TO_APPLY, &nt);
            if (nd != 1 || nt != 1 || (uint64_t)ta[0] != lf_reducer_digest(RED_MAX)) return false;
            *x = ch[0];
            *j = (uint32_t)rd[0];
            return true;
        }
        if (lf_class_node(c, m, OP_RESHAPE, 1, &ch) == EID_NONE) return false;
        m = ch[0];
    }
    return false;
}

/* A value every device shares made from the row maxima of x along dim j
 * by another reduction than a max (lf_shared_max_noted). */
struct lift_shift {
    eid m, x;
    uint32_t j;
};

void lf_shared_max_noted(lift_ctx *c, eid stat, eid maxima) {
    eid x;
    uint32_t j;
    if (!max_of(c, maxima, &x, &j)) return;
    ARENA_GROW(c->a, c->shifts, c->nshifts, c->capshifts, 4);
    c->shifts[c->nshifts++] = (struct lift_shift){.m = stat, .x = x, .j = j};
}

/* Whether class m is a shift of x's rows along dim j that is finite
 * wherever x is, so that it cancels from a softmax or a logsumexp: the
 * row's max itself (of x along j, through unit reshapes; jax.nn's), or a
 * finite constant times a statistic of the row's partial maxima every
 * device shares (a pmin, or a pmean, of the local maxima: finite where
 * every block's max is, which *assumed says is taken for granted). */
static bool finite_shift(lift_ctx *c, eid m, eid x, uint32_t j, bool *assumed) {
    eid y, bk, sc, mx;
    uint32_t mj;
    double k;
    *assumed = false;
    for (int depth = 0; depth < 6; depth++) {
        if (max_of(c, m, &mx, &mj)) return mj == j && eg_find(c->g, mx) == eg_find(c->g, x);
        for (uint32_t q = 0; q < c->nshifts; q++)
            if (eg_find(c->g, c->shifts[q].m) == eg_find(c->g, m))
                return *assumed = c->shifts[q].j == j && eg_find(c->g, c->shifts[q].x) == eg_find(c->g, x);
        const eid *ch;
        if ((scaled(c, m, &y, &bk, &sc, &k) || divided(c, m, &y, &k)) && isfinite(k)) m = y;
        else if (lf_class_node(c, m, OP_RESHAPE, 1, &ch) != EID_NONE) m = ch[0];
        else return false;
    }
    return false;
}

/* Whether class y is a value b broadcast along dim j of y alone (through
 * broadcasts and reshapes that add or drop unit dims): b's dims of size
 * above one are y's but j, in order. Sets *base to b. */
static bool along_dim(lift_ctx *c, eid y, uint32_t j, eid *base) {
    uint32_t r;
    const int64_t *yd = eg_type_dims(c->g, eg_class_type(c->g, y), &r);
    if (r > VIEW_MAX_RANK || j >= r) return false;
    int64_t src[VIEW_MAX_RANK]; /* y's dim k is dim src[k] of cur (-1: broadcast along it) */
    for (uint32_t k = 0; k < r; k++) src[k] = k;
    eid cur = y;
    const eid *ch;
    for (int depth = 0; depth < 8; depth++) {
        eid n = lf_class_node(c, cur, OP_BROADCAST, 1, &ch);
        uint32_t cr, orank;
        const int64_t *cd = eg_type_dims(c->g, eg_class_type(c->g, cur), &cr);
        if (n != EID_NONE) {
            uint32_t nb;
            const int64_t *bd = ea_get(c->g, eg_node_attr(c->g, n), A_DIMENSIONS, &nb);
            for (uint32_t k = 0; k < r; k++) {
                int64_t to = -1;
                for (uint32_t q = 0; q < nb && src[k] >= 0; q++)
                    if (bd[q] == src[k]) to = q;
                src[k] = to;
            }
            cur = ch[0];
            continue;
        }
        if (lf_class_node(c, cur, OP_RESHAPE, 1, &ch) == EID_NONE) break;
        /* only a reshape that adds or drops unit dims: the other dims pair up in order */
        const int64_t *od = eg_type_dims(c->g, eg_class_type(c->g, ch[0]), &orank);
        int64_t to[VIEW_MAX_RANK];
        uint32_t q = 0;
        if (orank > VIEW_MAX_RANK) return false;
        for (uint32_t p = 0; p < cr; p++) {
            to[p] = -1;
            if (cd[p] == 1) continue;
            while (q < orank && od[q] == 1) q++;
            if (q == orank || od[q] != cd[p]) return false;
            to[p] = q++;
        }
        while (q < orank && od[q] == 1) q++;
        if (q != orank) return false;
        for (uint32_t k = 0; k < r; k++) src[k] = src[k] < 0 ? -1 : to[src[k]];
        cur = ch[0];
    }
    uint32_t br;
    const int64_t *bd = eg_type_dims(c->g, eg_class_type(c->g, cur), &br);
    int64_t last = -1;
    uint32_t seen = 0;
    for (uint32_t k = 0; k < r; k++) {
        if (yd[k] == 1) continue;
        if (k == j) {
            if (src[k] >= 0) return false;
            continue;
        }
        if (src[k] < 0 || src[k] <= last) return false;
        last = src[k];
        seen++;
    }
    uint32_t big = 0;
    for (uint32_t q = 0; q < br; q++) big += bd[q] != 1;
    if (big != seen) return false;
    *base = cur;
    return true;
}

/* Whether class y is k·m broadcast along dim j of x alone, k a known
 * factor (1 if none), a shift of x's rows that cancels (finite_shift): m
 * and k. */
static bool row_shift(lift_ctx *c, eid y, eid x, uint32_t j, eid *m, double *k, bool *assumed) {
    *k = 1;
    unscaled(c, &y, k);
    if (!along_dim(c, y, j, m)) return false;
    unscaled(c, m, k);
    return isfinite(*k) && finite_shift(c, *m, x, j, assumed);
}

/* Class l as log(Σ_j exp(x − k·m)) (the sum possibly under an abs), m
 * broadcast along the summed dim j only, k a known factor (1 if none), k·m
 * finite (finite_shift): the shifted operand x − k·m, m, k and the
 * unshifted log(Σ_j exp(x)) (built). */
static bool shifted_lse(lift_ctx *c, eid l, eid *shifted, eid *m, double *k, eid *unshifted) {
    const eid *lc, *rc, *ec, *sc;
    if (lf_class_node(c, l, OP_LOG, 1, &lc) == EID_NONE) return false;
    eid sum = lc[0], kept = EID_NONE;
    if (lf_class_node(c, sum, OP_ABS, 1, &lc) != EID_NONE) sum = lc[0];
    eid rn = sum_of(c, sum, &rc);
    if (rn == EID_NONE && lf_class_node(c, sum, OP_RESHAPE, 1, &lc) != EID_NONE) {
        /* the sum with its reduced dim kept (keepdims: a reshape of it) */
        kept = sum;
        sum = lc[0];
        rn = sum_of(c, sum, &rc);
    }
    if (rn == EID_NONE) return false;
    uint32_t attr = eg_node_attr(c->g, rn), nd, nt;
    const int64_t *rd = ea_get(c->g, attr, A_DIMENSIONS, &nd), *ta = ea_get(c->g, attr, A_TO_APPLY, &nt);
    if (nd != 1 || nt != 1 || (uint64_t)ta[0] != lf_reducer_digest(RED_SUM)) return false;
    eid zero = rc[1], en = lf_class_node(c, rc[0], OP_EXP, 1, &ec);
    if (en == EID_NONE || lf_class_node(c, ec[0], OP_SUBTRACT, 2, &sc) == EID_NONE) return false;
    eid sh = ec[0], x = sc[0], mb;
    /* The shift cancels for a finite m only (finite_shift). */
    bool assumed;
    if (!row_shift(c, sc[1], x, (uint32_t)rd[0], &mb, k, &assumed)) return false;
    if (assumed)
        lf_assume(c, "the rows of a logsumexp's operand are finite, so that the statistic of their partial maxima "
                     "it is shifted by (a pmin or pmean of the local maxima) is finite and cancels");
    *shifted = sh;
    *m = mb;
    eid ex = eg_add(c->g, OP_EXP, eg_node_attr(c->g, en), eg_class_type(c->g, x), &x, 1, c->origin);
    eid red_ch[2] = {ex, zero};
    eid r = eg_add(c->g, OP_REDUCE, attr, eg_class_type(c->g, sum), red_ch, 2, c->origin);
    if (kept != EID_NONE) r = lf_mk_reshape(c, r, eg_class_type(c->g, kept), c->origin);
    *unshifted = eg_add(c->g, OP_LOG, 0, eg_class_type(c->g, l), &r, 1, c->origin);
    return true;
}

/* Whether class y is k·m (through unit reshapes; known factors taken off). */
static bool same_shift(lift_ctx *c, eid y, eid m, double k) {
    double f = 1;
    unscaled(c, &y, &f);
    return f == k && same_but_unit_dims(c, y, m);
}

/* Class y as log(...) itself or seen through reshapes (keepdims). */
static eid through_reshapes(lift_ctx *c, eid y) {
    const eid *ch;
    for (int k = 0; k < 4 && lf_class_node(c, y, OP_LOG, 1, &ch) == EID_NONE; k++) {
        if (lf_class_node(c, y, OP_RESHAPE, 1, &ch) == EID_NONE) break;
        y = ch[0];
    }
    return y;
}

void lf_lse_forms(lstate *s, const lval *v) {
    lift_ctx *c = s->c;
    int op = s->in->op;
    if ((op != OP_ADD && op != OP_SUBTRACT) || v->kind != LV_TERM || v->cls == EID_NONE || !dtype_is_float(s->in->shape.dtype))
        return;
    const eid *ch;
    if (lf_class_node(c, v->cls, op, 2, &ch) == EID_NONE) return;
    eid two[2] = {ch[0], ch[1]}, sh, m, un;
    double k;
    if (op == OP_ADD) {
        /* log Σ exp(x − m) + m */
        for (uint32_t side = 0; side < 2; side++)
            if (shifted_lse(c, two[side], &sh, &m, &k, &un) && same_shift(c, two[1 - side], m, k) &&
                eg_class_type(c->g, un) == eg_class_type(c->g, v->cls)) {
                eg_union(c->g, v->cls, un, NULL);
                return;
            }
        return;
    }
    /* jax.nn.log_softmax: (x − m) − log Σ exp(x − m), broadcast back along
     * the summed dim, is x − log Σ exp(x) */
    const eid *bc, *xc;
    eid bn = lf_class_node(c, two[1], OP_BROADCAST, 1, &bc);
    if (bn == EID_NONE) return;
    eid l = bc[0], ln = through_reshapes(c, l);
    if (!shifted_lse(c, ln, &sh, &m, &k, &un) || eg_find(c->g, sh) != eg_find(c->g, two[0]) ||
        lf_class_node(c, sh, OP_SUBTRACT, 2, &xc) == EID_NONE)
        return;
    eid x = xc[0], u = eg_find(c->g, ln) == eg_find(c->g, l) ? un : lf_mk_reshape(c, un, eg_class_type(c->g, l), c->origin);
    eid ub = eg_add(c->g, OP_BROADCAST, eg_node_attr(c->g, bn), eg_class_type(c->g, two[1]), &u, 1, c->origin);
    eid sub[2] = {x, ub};
    eg_union(c->g, v->cls, eg_add(c->g, OP_SUBTRACT, 0, eg_class_type(c->g, v->cls), sub, 2, c->origin), NULL);
}

void lf_softmax_forms(lstate *s, const lval *v) {
    lift_ctx *c = s->c;
    if (s->in->op != OP_DIVIDE || v->kind != LV_TERM || v->cls == EID_NONE || !dtype_is_float(s->in->shape.dtype)) return;
    const eid *dc, *ec, *sc, *rc;
    eid dn = lf_class_node(c, v->cls, OP_DIVIDE, 2, &dc);
    if (dn == EID_NONE) return;
    eid num = dc[0], en = lf_class_node(c, num, OP_EXP, 1, &ec);
    if (en == EID_NONE || lf_class_node(c, ec[0], OP_SUBTRACT, 2, &sc) == EID_NONE) return;
    eid x = sc[0], m, sum;
    double k;
    uint32_t t = eg_class_type(c->g, v->cls), r;
    eg_type_dims(c->g, t, &r);
    /* exp(x − m) / Σ_j exp(x − m), m and the sum broadcast along j alone */
    for (uint32_t j = 0; j < r; j++) {
        if (!along_dim(c, dc[1], j, &sum)) continue;
        eid rn = sum_of(c, sum, &rc);
        uint32_t attr = rn == EID_NONE ? 0 : eg_node_attr(c->g, rn), nd, nt;
        const int64_t *rd = rn == EID_NONE ? NULL : ea_get(c->g, attr, A_DIMENSIONS, &nd);
        const int64_t *ta = rn == EID_NONE ? NULL : ea_get(c->g, attr, A_TO_APPLY, &nt);
        bool assumed;
        if (!rd || nd != 1 || rd[0] != (int64_t)j || nt != 1 || (uint64_t)ta[0] != lf_reducer_digest(RED_SUM) ||
            eg_find(c->g, rc[0]) != eg_find(c->g, num) || !row_shift(c, sc[1], x, j, &m, &k, &assumed))
            continue;
        if (assumed)
            lf_assume(c, "the rows of a softmax's operand are finite, so that the statistic of their partial maxima "
                         "it is shifted by (a pmin or pmean of the local maxima) is finite and cancels");
        /* exp(x) / broadcast(Σ_j exp(x)); the sum's init is read before
         * eg_add, which may move the node array rc points into */
        eid init = rc[1];
        eid ex = eg_add(c->g, OP_EXP, eg_node_attr(c->g, en), eg_class_type(c->g, x), &x, 1, c->origin);
        eid red_ch[2] = {ex, init};
        eid red = eg_add(c->g, OP_REDUCE, attr, eg_class_type(c->g, sum), red_ch, 2, c->origin);
        int64_t bd[VIEW_MAX_RANK];
        for (uint32_t d = 0, q = 0; d < r; d++)
            if (d != j) bd[q++] = d;
        eid b = eg_add(c->g, OP_BROADCAST, lf_list_attr(c, A_DIMENSIONS, bd, r - 1), t, &red, 1, c->origin);
        eid q[2] = {ex, b};
        eg_union(c->g, v->cls, eg_add(c->g, OP_DIVIDE, eg_node_attr(c->g, dn), t, q, 2, c->origin), NULL);
        return;
    }
}

/* Whether class x is never negative over the reals, by its form. */
static bool nonneg(lift_ctx *c, eid x, int depth) {
    const eid *ch;
    if (depth > 4) return false;
    if (lf_class_node(c, x, OP_EXP, 1, &ch) != EID_NONE || lf_class_node(c, x, OP_ABS, 1, &ch) != EID_NONE) return true;
    if (lf_class_node(c, x, OP_MULTIPLY, 2, &ch) != EID_NONE && eg_find(c->g, ch[0]) == eg_find(c->g, ch[1])) return true;
    eid rn = sum_of(c, x, &ch);
    uint32_t nt;
    const int64_t *ta = rn == EID_NONE ? NULL : ea_get(c->g, eg_node_attr(c->g, rn), A_TO_APPLY, &nt);
    return ta && nt == 1 && (uint64_t)ta[0] == lf_reducer_digest(RED_SUM) && nonneg(c, ch[0], depth + 1);
}

/* Whether is_finite(g) guards x: g is x, or x times a finite constant (a
 * logit scale the scale plan put back into the max but not into x). */
static bool guarded(lift_ctx *c, eid g, eid x) {
    double k = lf_multiple_of(c, g, x);
    return k != 0 && isfinite(k);
}

/* select(x < MAX, x + 1, MAX), MAX the integer type's largest value, is
 * x + 1 for every x but MAX: optax's saturating step counter (its
 * safe_increment) where a hand-written step adds 1. Taken so under the
 * stated assumption that counters stay below their type's maximum. */
bool lf_counter_forms(lstate *s, const lval *v) {
    lift_ctx *c = s->c;
    const hlo_instr *in = s->in;
    double lo, mx, k;
    const eid *pc, *ac;
    /* (integers of at most 32 bits, exact as doubles; index values on the
     * baseline: their plain terms) */
    if (in->op != OP_SELECT || in->noperands != 3 || dtype_bits(in->shape.dtype) > 32 ||
        !dtype_int_limits(in->shape.dtype, &lo, &mx) || !(v->kind == LV_TERM || lf_is_index(v)) || v->cls == EID_NONE ||
        !lf_lval_splat(c, &s->ops[2], c->baseline_mode, &k) || k != mx)
        return false;
    for (uint32_t o = 0; o < 2; o++)
        if (!(s->ops[o].kind == LV_TERM || lf_is_index(&s->ops[o])) || s->ops[o].cls == EID_NONE || s->ops[o].v.partial)
            return false;
    eid p = s->ops[0].cls, y = s->ops[1].cls;
    eid cn = lf_class_node(c, p, OP_COMPARE, 2, &pc);
    uint32_t na;
    const int64_t *dir = cn == EID_NONE ? NULL : ea_get(c->g, eg_node_attr(c->g, cn), A_DIRECTION, &na);
    if (!dir || na != 1 || dir[0] != 2 /* LT */ || !lf_class_splat_value(c, pc[1], &k) || k != mx) return false;
    eid x = pc[0];
    if (lf_class_node(c, y, OP_ADD, 2, &ac) == EID_NONE) return false;
    uint32_t xo = eg_find(c->g, ac[0]) == eg_find(c->g, x) ? 0 : eg_find(c->g, ac[1]) == eg_find(c->g, x) ? 1 : 2;
    if (xo == 2 || !lf_class_splat_value(c, ac[1 - xo], &k) || k != 1 ||
        eg_class_type(c->g, v->cls) != eg_class_type(c->g, y))
        return false;
    lf_assume(c, "integer step counters stay below their type's maximum (optax's saturating increment is then x + 1)");
    eg_union(c->g, v->cls, y, NULL);
    return true;
}

void lf_sign_forms(lstate *s, const lval *v) {
    lift_ctx *c = s->c;
    const hlo_instr *in = s->in;
    const eid *ch;
    if (in->op == OP_SELECT && v->kind == LV_TERM && v->cls != EID_NONE && s->ops[0].kind == LV_TERM &&
        s->ops[1].kind == LV_TERM && s->ops[0].cls != EID_NONE && s->ops[1].cls != EID_NONE &&
        lf_class_node(c, s->ops[0].cls, OP_IS_FINITE, 1, &ch) != EID_NONE && guarded(c, ch[0], s->ops[1].cls) &&
        eg_class_type(c->g, v->cls) == eg_class_type(c->g, s->ops[1].cls)) {
        lf_assume(c, "values guarded by is_finite (jax.nn.logsumexp's max) are finite");
        eg_union(c->g, v->cls, s->ops[1].cls, NULL);
        return;
    }
    if (in->op == OP_ABS && v->kind == LV_TERM && v->cls != EID_NONE && s->ops[0].kind == LV_TERM &&
        s->ops[0].cls != EID_NONE && nonneg(c, s->ops[0].cls, 0) &&
        eg_class_type(c->g, v->cls) == eg_class_type(c->g, s->ops[0].cls)) {
        eg_union(c->g, v->cls, s->ops[0].cls, NULL);
        return;
    }
    const char *dir = in->op == OP_COMPARE ? instr_str(in, A_DIRECTION) : NULL;
    if (!dir || v->kind != LV_TERM || v->cls == EID_NONE || s->ops[0].kind != LV_TERM || s->ops[1].kind != LV_TERM ||
        s->ops[0].cls == EID_NONE || s->ops[1].cls == EID_NONE || !dtype_is_float(s->comp->instrs[in->operands[0]].shape.dtype))
        return;
    for (uint32_t o = 0; o < 2; o++) {
        if (!lf_class_is_zero(c, s->ops[1 - o].cls) || !nonneg(c, s->ops[o].cls, 0)) continue;
        /* x >= 0 and 0 <= x hold; x < 0 and 0 > x do not */
        const char *holds = o == 0 ? "GE" : "LE", *fails = o == 0 ? "LT" : "GT";
        if (strcmp(dir, holds) && strcmp(dir, fails)) return;
        interp_val *t = interp_val_new(DT_PRED, in->shape.rank, in->shape.dims);
        for (int64_t k = 0; k < t->n; k++) t->i[k] = !strcmp(dir, holds);
        interp_val *kv = interp_val_new(DT_PRED, in->shape.rank, in->shape.dims);
        memcpy(kv->i, t->i, (size_t)t->n * sizeof *t->i);
        eg_union(c->g, v->cls, lf_const_term(c, t, c->origin), NULL);
        lf_kval_set(c, v->cls, kv);
        return;
    }
}

void lf_dot_forms(lstate *s, const lval *v) {
    lift_ctx *c = s->c;
    const hlo_instr *in = s->in;
    if (in->op != OP_DOT || in->noperands != 2 || v->kind != LV_TERM || v->cls == EID_NONE || !dtype_is_float(in->shape.dtype))
        return;
    const eid *dc, *qc, *bc;
    eid dn = lf_class_node(c, v->cls, OP_DOT, 2, &dc);
    if (dn == EID_NONE) return;
    eid a0 = dc[0], b0 = dc[1];
    uint32_t attr = eg_node_attr(c->g, dn), nlb, nlc, nrb, nrc, nb, ra;
    if (lf_class_node(c, a0, OP_DIVIDE, 2, &qc) == EID_NONE) return;
    eid a = qc[0], bn = lf_class_node(c, qc[1], OP_BROADCAST, 1, &bc);
    if (bn == EID_NONE) return;
    eid sc = bc[0];
    const int64_t *lb = ea_get(c->g, attr, A_LHS_BATCH_DIMS, &nlb), *lc = ea_get(c->g, attr, A_LHS_CONTRACTING_DIMS, &nlc);
    ea_get(c->g, attr, A_RHS_BATCH_DIMS, &nrb);
    ea_get(c->g, attr, A_RHS_CONTRACTING_DIMS, &nrc);
    const int64_t *bd = ea_get(c->g, eg_node_attr(c->g, bn), A_DIMENSIONS, &nb);
    eg_type_dims(c->g, eg_class_type(c->g, a), &ra);
    if (ra > VIEW_MAX_RANK) return;
    /* out[k]: where the dot puts lhs dim k (batch dims first, then the free ones), -1 if contracted */
    int64_t out[VIEW_MAX_RANK], od[VIEW_MAX_RANK];
    for (uint32_t k = 0; k < ra; k++) out[k] = -2;
    for (uint32_t q = 0; q < nlb; q++) {
        if (lb[q] < 0 || lb[q] >= (int64_t)ra) return;
        out[lb[q]] = q;
    }
    for (uint32_t q = 0; q < nlc; q++) {
        if (lc[q] < 0 || lc[q] >= (int64_t)ra) return;
        out[lc[q]] = -1;
    }
    for (uint32_t k = 0, f = nlb; k < ra; k++)
        if (out[k] == -2) out[k] = f++;
    for (uint32_t q = 0; q < nb; q++) {
        if (bd[q] < 0 || bd[q] >= (int64_t)ra || out[bd[q]] < 0 || (q && out[bd[q]] <= od[q - 1])) return;
        od[q] = out[bd[q]];
    }
    uint32_t t = eg_class_type(c->g, v->cls);
    eid ch[2] = {a, b0};
    eid d = eg_add(c->g, OP_DOT, attr, t, ch, 2, c->origin);
    eid sb = eg_add(c->g, OP_BROADCAST, lf_list_attr(c, A_DIMENSIONS, od, nb), t, &sc, 1, c->origin);
    eid q2[2] = {d, sb};
    eg_union(c->g, v->cls, eg_add(c->g, OP_DIVIDE, 0, t, q2, 2, c->origin), NULL);
}
