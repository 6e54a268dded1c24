/* lift_pad — padding masks (lift.c's other_forms calls lf_pad_forms on both
 * sides alike).
 *
 * GSPMD shards a dim that does not divide evenly by padding it to a
 * multiple of the device count and masking the padding before an op that
 * would read it: select(mask, y, identity) ahead of a reduce, zeros ahead of
 * a contraction. The baseline reads the unpadded elements as a slice. A
 * reduce over a value that holds the reducer's identity outside a box of
 * elements, whole along the dims kept, is the reduce over that box (the
 * identity changes no result); a dot whose operand is zero outside a box
 * that cuts only contracting dims is the dot over that box of both operands
 * (the products outside it are zeros); a slice of a reduce along dims it
 * keeps is the reduce of the slice (where the unpadded part is cut after
 * the reduce). The box is read from the mask's known
 * values (a constant-only predicate: iota compared with bounds), so nothing
 * is assumed of how it was built. Each form is added to the value's class
 * beside the one lifted. */
#include "lift.h"
#include "lift_int.h"

#include "eattr.h"
#include "interp.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Element k's index along dim `dim` of dims d[0..r) (row-major). */
static int64_t index_along(const int64_t *d, uint32_t r, uint32_t dim, int64_t k) {
    for (uint32_t j = r; j-- > dim + 1;) k /= d[j];
    return k % d[dim];
}

/* The values of class p of dims d[0..r), n elements, into out, when they
 * follow from known values and iotas alone (a mask: iota shifted by a
 * constant, compared with bounds, conjunctions, broadcasts, reshapes and
 * converts of such); false when they do not. */
static bool class_values(lift_ctx *c, eid p, const int64_t *d, uint32_t r, int64_t n, double *out, int depth) {
    const interp_val *v = lf_kval(c, p);
    if (v && v->n == n) {
        for (int64_t k = 0; k < n; k++) out[k] = interp_val_get(v, k);
        return true;
    }
    if (depth > 8) return false;
    for (eid node = eg_class_first(c->g, eg_find(c->g, p)); node != EID_NONE; node = eg_class_next(c->g, node)) {
        uint32_t nk, cr, nw;
        const eid *kp = eg_node_children(c->g, node, &nk);
        uint16_t op = eg_node_op(c->g, node);
        uint32_t attr = eg_node_attr(c->g, node);
        if (op == OP_IOTA) {
            int64_t id = ea_get_int(c->g, attr, A_IOTA_DIMENSION, 0);
            if (id < 0 || (uint32_t)id >= r) continue;
            for (int64_t k = 0; k < n; k++) out[k] = (double)index_along(d, r, (uint32_t)id, k);
            return true;
        }
        if (nk < 1 || nk > 2) continue;
        eid kids[2] = {kp[0], nk > 1 ? kp[1] : EID_NONE};  /* the children array moves as classes are read */
        const int64_t *cd = eg_type_dims(c->g, eg_class_type(c->g, kids[0]), &cr);
        int64_t cn = 1;
        for (uint32_t k = 0; k < cr; k++) cn *= cd[k];
        if (cr > VIEW_MAX_RANK || (op == OP_CONVERT || op == OP_RESHAPE || op == OP_BROADCAST) != (nk == 1)) continue;
        if (op == OP_BROADCAST) {
            const int64_t *bd = ea_get(c->g, attr, A_DIMENSIONS, &nw);
            int64_t sd[VIEW_MAX_RANK];
            memcpy(sd, cd, cr * sizeof *sd);
            double *b = xmalloc((size_t)(cn ? cn : 1) * sizeof *b);
            bool ok = nw == cr && class_values(c, kids[0], sd, cr, cn, b, depth + 1);
            for (int64_t k = 0; k < n && ok; k++) {
                int64_t e = 0;
                for (uint32_t q = 0; q < cr; q++) e = e * sd[q] + index_along(d, r, (uint32_t)bd[q], k);
                out[k] = b[e];
            }
            free(b);
            if (ok) return true;
            continue;
        }
        if (op == OP_CONVERT || op == OP_RESHAPE) {
            int64_t sd[VIEW_MAX_RANK];
            memcpy(sd, cd, cr * sizeof *sd);
            if (cn == n && class_values(c, kids[0], sd, cr, n, out, depth + 1)) return true;
            continue;
        }
        if (op != OP_ADD && op != OP_SUBTRACT && op != OP_AND && op != OP_OR && op != OP_COMPARE) continue;
        int cmp = -1;
        if (op == OP_COMPARE) {
            cmp = lf_node_direction(c, node);
            if (cmp < 0) continue;
        }
        double *b = xmalloc((size_t)(n ? n : 1) * sizeof *b);
        bool ok = cn == n && class_values(c, kids[0], d, r, n, out, depth + 1) && class_values(c, kids[1], d, r, n, b, depth + 1);
        for (int64_t k = 0; k < n && ok; k++) {
            double a = out[k], y = b[k];
            switch (op) {
            case OP_ADD: out[k] = a + y; break;
            case OP_SUBTRACT: out[k] = a - y; break;
            case OP_AND: out[k] = a != 0 && y != 0; break;
            case OP_OR: out[k] = a != 0 || y != 0; break;
            default:
                out[k] = cmp == 0 ? a == y : cmp == 1 ? a != y : cmp == 2 ? a < y : cmp == 3 ? a <= y : cmp == 4 ? a > y : a >= y;
            }
        }
        free(b);
        if (ok) return true;
    }
    return false;
}

/* The box [lo, hi) of positions where predicate class p is true, when it is
 * true exactly there (and somewhere); its rank is *rank. */
static bool mask_box(lift_ctx *c, eid p, int64_t *lo, int64_t *hi, uint32_t *rank) {
    uint32_t r;
    const int64_t *d = eg_type_dims(c->g, eg_class_type(c->g, p), &r);
    if (r > VIEW_MAX_RANK || eg_type_dtype(c->g, eg_class_type(c->g, p)) != DT_PRED || !lf_fold_size_ok(d, r)) return false;
    int64_t n = 1;
    for (uint32_t k = 0; k < r; k++) n *= d[k];
    double *t = xmalloc((size_t)(n ? n : 1) * sizeof *t);
    bool ok = class_values(c, p, d, r, n, t, 0), any = false;
    for (uint32_t k = 0; k < r; k++) lo[k] = d[k], hi[k] = 0;
    for (int64_t e = 0; e < n && ok; e++) {
        if (!t[e]) continue;
        any = true;
        for (uint32_t k = 0; k < r; k++) {
            int64_t i = index_along(d, r, k, e);
            if (i < lo[k]) lo[k] = i;
            if (i + 1 > hi[k]) hi[k] = i + 1;
        }
    }
    for (int64_t e = 0; e < n && ok && any; e++) {
        bool in = true;
        for (uint32_t k = 0; k < r; k++) {
            int64_t i = index_along(d, r, k, e);
            in &= i >= lo[k] && i < hi[k];
        }
        ok = in == t[e];
    }
    free(t);
    *rank = r;
    return ok && any;
}

/* Whether class z holds `want` everywhere (known values, through broadcasts,
 * reshapes and converts of them). */
static bool filled_with(lift_ctx *c, eid z, double want) {
    const interp_val *v = lf_kval(c, z);
    for (int guard = 0; !v && guard < 8; guard++) {
        const eid *ch;
        if (lf_class_node(c, z, OP_BROADCAST, 1, &ch) == EID_NONE && lf_class_node(c, z, OP_RESHAPE, 1, &ch) == EID_NONE &&
            lf_class_node(c, z, OP_CONVERT, 1, &ch) == EID_NONE)
            return false;
        z = ch[0];
        v = lf_kval(c, z);
    }
    if (!v || v->n < 1) return false;
    for (int64_t k = 0; k < v->n; k++)
        if (interp_val_get(v, k) != want) return false;
    return true;
}

/* x masked: select(mask, y, filler) with the mask a box and the filler
 * `want` everywhere; *y and the box. */
static bool masked(lift_ctx *c, eid x, double want, eid *y, int64_t *lo, int64_t *hi) {
    const eid *ch;
    uint32_t r;
    eid node;
    if (lf_class_node(c, x, OP_SELECT, 3, &ch) != EID_NONE) {
        if (!filled_with(c, ch[2], want) || !mask_box(c, ch[0], lo, hi, &r)) return false;
        *y = ch[1];
        return true;
    }
    /* k · select(box, y, f) with k a positive constant everywhere and f =
     * want, 0 or an infinity (k·f = want exactly): select(box, k·y, want) (a
     * constant factor put back after the mask, lift_scale.c) */
    if ((want != 0 && !isinf(want)) || (node = lf_class_node(c, x, OP_MULTIPLY, 2, &ch)) == EID_NONE) return false;
    eid two[2] = {ch[0], ch[1]}; /* (the e-graph's arrays move as masked() adds nodes) */
    ch = two;
    for (uint32_t o = 0; o < 2; o++) {
        double k = 0;
        const interp_val *kv = NULL;
        eid kc = ch[1 - o];
        for (int guard = 0; !kv && guard < 4; guard++) {
            const eid *b;
            kv = lf_kval(c, kc);
            if (!kv && lf_class_node(c, kc, OP_BROADCAST, 1, &b) != EID_NONE) kc = b[0];
            else if (!kv) break;
        }
        if (!kv || kv->n < 1) continue;
        k = interp_val_get(kv, 0);
        if (!(k > 0) || isinf(k) || !filled_with(c, ch[1 - o], k)) continue;
        eid z;
        if (!masked(c, ch[o], want, &z, lo, hi)) continue;
        eid kids[2] = {ch[0], ch[1]};
        kids[o] = z;
        *y = eg_add(c->g, OP_MULTIPLY, eg_node_attr(c->g, node), eg_class_type(c->g, x), kids, 2, c->origin);
        return true;
    }
    return false;
}

static eid box_slice(lift_ctx *c, eid x, const int64_t *lo, const int64_t *hi, int depth, bool cut);

/* slice(x, [lo, hi)) where x's class says what it is without the slice:
 * the operand of a pad the box lies inside (no interior padding; GSPMD pads
 * an uneven dim up to a multiple of the devices and the box cuts that off
 * again), a scalar's broadcast at the box's dims, or an elementwise op of
 * operands cut alike (a slice commutes with every elementwise op). EID_NONE
 * where none holds, `depth` levels deep at most. */
static eid box_cut(lift_ctx *c, eid x, const int64_t *lo, const int64_t *hi, int depth) {
    uint32_t r;
    const int64_t *xd = eg_type_dims(c->g, eg_class_type(c->g, x), &r);
    if (r > VIEW_MAX_RANK || depth > 8) return EID_NONE;
    int64_t d[VIEW_MAX_RANK], dims[VIEW_MAX_RANK];
    bool whole = true;
    memcpy(d, xd, r * sizeof *d);
    for (uint32_t k = 0; k < r; k++) {
        dims[k] = hi[k] - lo[k];
        whole &= lo[k] == 0 && hi[k] == d[k];
    }
    if (whole) return eg_find(c->g, x);
    uint32_t t = lf_type_of(c, eg_type_dtype(c->g, eg_class_type(c->g, x)), dims, r);
    const eid *ch;
    eid node;
    if ((node = lf_class_node(c, x, OP_PAD, 2, &ch)) != EID_NONE) {
        uint32_t nw, yr;
        const int64_t *pw = eg_attr_words(c->g, eg_node_attr(c->g, node), &nw);
        eid y = ch[0];
        const int64_t *yd = eg_type_dims(c->g, eg_class_type(c->g, y), &yr);
        int64_t ylo[VIEW_MAX_RANK], yhi[VIEW_MAX_RANK];
        bool inside = yr == r && nw == 2 + 3 * r && pw[0] == A_PADDING;
        for (uint32_t k = 0; k < r && inside; k++) {
            const int64_t *p = pw + 2 + 3 * k;
            ylo[k] = lo[k] - p[0], yhi[k] = hi[k] - p[0];
            inside = p[2] == 0 && ylo[k] >= 0 && yhi[k] <= yd[k];
        }
        eid z = inside ? box_cut(c, y, ylo, yhi, depth + 1) : EID_NONE;
        if (z != EID_NONE) return z;
    }
    if ((node = lf_class_node(c, x, OP_BROADCAST, 1, &ch)) != EID_NONE) {
        /* the box along the dims the operand maps to, the same broadcast */
        uint32_t sr, nb;
        eg_type_dims(c->g, eg_class_type(c->g, ch[0]), &sr);
        const int64_t *bd = ea_get(c->g, eg_node_attr(c->g, node), A_DIMENSIONS, &nb);
        int64_t slo[VIEW_MAX_RANK], shi[VIEW_MAX_RANK];
        bool ok = nb == sr && sr <= VIEW_MAX_RANK;
        for (uint32_t k = 0; k < sr && ok; k++) {
            ok = bd[k] >= 0 && bd[k] < (int64_t)r;
            if (ok) slo[k] = lo[bd[k]], shi[k] = hi[bd[k]];
        }
        eid z = !ok ? EID_NONE : sr == 0 ? ch[0] : box_slice(c, ch[0], slo, shi, depth + 1, true);
        if (z != EID_NONE) return eg_add(c->g, OP_BROADCAST, eg_node_attr(c->g, node), t, &z, 1, c->origin);
    }
    if ((node = lf_class_node(c, x, OP_IOTA, 0, NULL)) != EID_NONE) {
        /* positions along its dim from 0 again only when the box starts there */
        int64_t id = ea_get_int(c->g, eg_node_attr(c->g, node), A_IOTA_DIMENSION, 0);
        if (id >= 0 && id < (int64_t)r && lo[id] == 0) return eg_add(c->g, OP_IOTA, eg_node_attr(c->g, node), t, NULL, 0, c->origin);
    }
    for (eid n = eg_class_first(c->g, eg_find(c->g, x)); n != EID_NONE; n = eg_class_next(c->g, n)) {
        uint32_t nk;
        const eid *kp = eg_node_children(c->g, n, &nk);
        if (!graph_op_elementwise(eg_node_op(c->g, n)) || nk < 1 || nk > 3) continue;
        eid kids[3], cut[3]; /* the children array moves as the cuts add nodes */
        memcpy(kids, kp, nk * sizeof *kids);
        bool ok = true, any = false; /* some operand cut without a slice */
        for (uint32_t k = 0; k < nk && ok; k++) {
            uint32_t kr;
            const int64_t *kd = eg_type_dims(c->g, eg_class_type(c->g, kids[k]), &kr);
            if (kr == 0 && eg_node_op(c->g, n) == OP_CLAMP) {
                cut[k] = kids[k]; /* clamp's scalar bounds */
                continue;
            }
            ok = kr == r && memcmp(kd, d, r * sizeof *d) == 0;
            cut[k] = ok ? box_cut(c, kids[k], lo, hi, depth + 1) : EID_NONE;
            any |= cut[k] != EID_NONE;
            if (cut[k] == EID_NONE) cut[k] = ok ? box_slice(c, kids[k], lo, hi, depth + 1, false) : EID_NONE;
            ok = cut[k] != EID_NONE;
        }
        if (ok && any) return eg_add(c->g, eg_node_op(c->g, n), eg_node_attr(c->g, n), t, cut, nk, c->origin);
    }
    return EID_NONE;
}

/* slice(x, [lo, hi)) (x itself when the box is all of it; with `cut`, its
 * cut form where box_cut finds one; a slice node otherwise). */
static eid box_slice(lift_ctx *c, eid x, const int64_t *lo, const int64_t *hi, int depth, bool cut) {
    uint32_t r;
    const int64_t *d = eg_type_dims(c->g, eg_class_type(c->g, x), &r);
    int64_t words[2 + 3 * VIEW_MAX_RANK], dims[VIEW_MAX_RANK];
    uint32_t nw = 0;
    bool whole = true;
    words[nw++] = A_SLICE;
    words[nw++] = 3 * r;
    for (uint32_t k = 0; k < r; k++) {
        words[nw++] = lo[k], words[nw++] = hi[k], words[nw++] = 1;
        dims[k] = hi[k] - lo[k];
        whole &= lo[k] == 0 && hi[k] == d[k];
    }
    if (whole) return eg_find(c->g, x);
    if (cut) {
        eid z = box_cut(c, x, lo, hi, depth + 1);
        if (z != EID_NONE) return z;
    }
    uint32_t t = lf_type_of(c, eg_type_dtype(c->g, eg_class_type(c->g, x)), dims, r);
    return eg_add(c->g, OP_SLICE, eg_attr(c->g, words, nw), t, &x, 1, c->origin);
}

static bool member(const int64_t *l, uint32_t n, int64_t d) {
    for (uint32_t k = 0; k < n; k++)
        if (l[k] == d) return true;
    return false;
}

/* Class x's dims, copied to out (type storage moves as types are added). */
static const int64_t *dims_of(lift_ctx *c, eid x, int64_t *out) {
    uint32_t r;
    const int64_t *d = eg_type_dims(c->g, eg_class_type(c->g, x), &r);
    memcpy(out, d, (r < VIEW_MAX_RANK ? r : VIEW_MAX_RANK) * sizeof *out);
    return out;
}

/* reduce(select(box, y, identity), init) over dims D, the box whole along
 * the dims kept: reduce(slice(y, box), init). */
static eid pad_reduce(lstate *s, eid r) {
    lift_ctx *c = s->c;
    const hlo_instr *in = s->in;
    double id;
    switch (instr_reducer(c->cur, in)) {
    case RED_SUM: case RED_OR: id = 0; break;
    case RED_PROD: case RED_AND: id = 1; break;
    case RED_MAX: id = -INFINITY; break;
    case RED_MIN: id = INFINITY; break;
    default: return EID_NONE;
    }
    if (!lf_reducer_identity(c, c->cur, in, s->ops[1].cls) || in->shape.rank > VIEW_MAX_RANK) return EID_NONE;
    int64_t od[VIEW_MAX_RANK];
    eid y;
    int64_t lo[VIEW_MAX_RANK], hi[VIEW_MAX_RANK];
    if (!masked(c, s->ops[0].cls, id, &y, lo, hi)) return EID_NONE;
    uint32_t nd, rank;
    const int64_t *rd = instr_ints(in, A_DIMENSIONS, &nd);
    const int64_t *yd = eg_type_dims(c->g, eg_class_type(c->g, y), &rank);
    for (uint32_t k = 0; k < rank; k++)
        if (!member(rd, nd, k) && (lo[k] != 0 || hi[k] != yd[k])) return EID_NONE;
    eid ch[2] = {box_slice(c, y, lo, hi, 0, true), s->ops[1].cls};
    return lf_node(c, c->cur, in, ch, 2, dims_of(c, r, od), c->origin);
}

/* dot(x, w) with an operand zero outside a box that cuts only contracting
 * dims: the dot of both operands sliced to that box along those dims (an
 * operand itself masked by a box holding it is read unmasked). */
static eid pad_dot(lstate *s, eid r) {
    lift_ctx *c = s->c;
    const hlo_instr *in = s->in;
    uint32_t nc[2], nb[2];
    const int64_t *cd[2] = {instr_ints(in, A_LHS_CONTRACTING_DIMS, &nc[0]), instr_ints(in, A_RHS_CONTRACTING_DIMS, &nc[1])};
    instr_ints(in, A_LHS_BATCH_DIMS, &nb[0]);
    instr_ints(in, A_RHS_BATCH_DIMS, &nb[1]);
    if (nc[0] != nc[1] || nb[0] != nb[1] || in->shape.rank > VIEW_MAX_RANK) return EID_NONE;
    for (uint32_t o = 0; o < 2; o++) {
        eid y;
        int64_t lo[VIEW_MAX_RANK], hi[VIEW_MAX_RANK];
        if (!masked(c, s->ops[o].cls, 0, &y, lo, hi)) continue;
        uint32_t rank;
        const int64_t *yd = eg_type_dims(c->g, eg_class_type(c->g, y), &rank);
        bool cuts_free = false;
        for (uint32_t k = 0; k < rank; k++) cuts_free |= !member(cd[o], nc[o], k) && (lo[k] != 0 || hi[k] != yd[k]);
        if (cuts_free) continue;
        /* the same box on the other operand's paired contracting dims */
        uint32_t q = 1 - o, qr;
        const int64_t *qd = eg_type_dims(c->g, eg_class_type(c->g, s->ops[q].cls), &qr);
        if (qr > VIEW_MAX_RANK) return EID_NONE;
        int64_t qlo[VIEW_MAX_RANK], qhi[VIEW_MAX_RANK];
        for (uint32_t k = 0; k < qr; k++) qlo[k] = 0, qhi[k] = qd[k];
        for (uint32_t j = 0; j < nc[o]; j++) qlo[cd[q][j]] = lo[cd[o][j]], qhi[cd[q][j]] = hi[cd[o][j]];
        eid ch[2];
        ch[o] = box_slice(c, y, lo, hi, 0, true);
        eid y2;
        int64_t lo2[VIEW_MAX_RANK], hi2[VIEW_MAX_RANK];
        bool holds = masked(c, s->ops[q].cls, 0, &y2, lo2, hi2);
        for (uint32_t k = 0; k < qr && holds; k++) holds = lo2[k] <= qlo[k] && hi2[k] >= qhi[k];
        ch[q] = box_slice(c, holds ? y2 : s->ops[q].cls, qlo, qhi, 0, true);
        int64_t od[VIEW_MAX_RANK];
        return lf_node(c, c->cur, in, ch, 2, dims_of(c, r, od), c->origin);
    }
    return EID_NONE;
}

/* slice(reduce(z, init)) cutting only dims the reduce keeps: the reduce of
 * z sliced alike along those dims (a reduce computes each kept position
 * apart), where the unpadded slice is taken after the reduce. */
static eid slice_reduce(lstate *s, eid r) {
    lift_ctx *c = s->c;
    const eid *ch;
    eid node = lf_class_node(c, s->ops[0].cls, OP_REDUCE, 2, &ch);
    if (node == EID_NONE) return EID_NONE;
    /* the slice of the terms (global coordinates; the instruction's are a
     * device's) */
    const int64_t *sl = NULL;
    uint32_t ns = 0;
    for (eid n = eg_class_first(c->g, eg_find(c->g, r)); n != EID_NONE && !sl; n = eg_class_next(c->g, n)) {
        uint32_t k;
        const eid *x = eg_node_children(c->g, n, &k);
        if (eg_node_op(c->g, n) == OP_SLICE && k == 1 && eg_find(c->g, x[0]) == eg_find(c->g, s->ops[0].cls))
            sl = ea_get(c->g, eg_node_attr(c->g, n), A_SLICE, &ns);
    }
    uint32_t attr = eg_node_attr(c->g, node), nd, zr;
    const int64_t *rd = ea_get(c->g, attr, A_DIMENSIONS, &nd);
    if (!sl) return EID_NONE;
    const int64_t *zd = eg_type_dims(c->g, eg_class_type(c->g, ch[0]), &zr);
    if (zr > VIEW_MAX_RANK || zr < nd || ns != 3 * (zr - nd)) return EID_NONE;
    int64_t words[2 + 3 * VIEW_MAX_RANK], dims[VIEW_MAX_RANK];
    uint32_t nw = 0, q = 0;
    words[nw++] = A_SLICE;
    words[nw++] = 3 * zr;
    for (uint32_t k = 0; k < zr; k++) {
        int64_t st = 0, li = zd[k], sd = 1;
        if (!member(rd, nd, k)) st = sl[3 * q], li = sl[3 * q + 1], sd = sl[3 * q + 2], q++;
        if (sd < 1 || li < st) return EID_NONE;
        words[nw++] = st, words[nw++] = li, words[nw++] = sd;
        dims[k] = (li - st + sd - 1) / sd;
    }
    eid z = ch[0], init = ch[1];
    uint32_t t = lf_type_of(c, eg_type_dtype(c->g, eg_class_type(c->g, z)), dims, zr);
    eid kids[2] = {eg_add(c->g, OP_SLICE, eg_attr(c->g, words, nw), t, &z, 1, c->origin), init};
    return eg_add(c->g, OP_REDUCE, attr, eg_class_type(c->g, r), kids, 2, c->origin);
}

/* A selecting reduce (argmax, argmin: lf_select_kind) of values and
 * positions both masked to one box with the inits, whole along the dims
 * kept: the reduce over the box. An element equal to the init pair changes
 * no selection (the pair selected with itself is itself; a selection is
 * associative and commutative), so the masked ones drop out. Added to the
 * reduce's class, which v's elements read. */
static void pad_select_reduce(lstate *s, const lval *v) {
    lift_ctx *c = s->c;
    const hlo_instr *in = s->in;
    if (in->op != OP_REDUCE || in->noperands != 4 || v->kind != LV_TUPLE || v->n != 2 || v->elems[0].kind != LV_TERM ||
        lf_select_kind(c->cur, in) == SEL_NONE)
        return;
    for (uint32_t o = 0; o < 4; o++)
        if (s->ops[o].kind != LV_TERM || s->ops[o].cls == EID_NONE) return;
    const interp_val *iv[2] = {lf_kval(c, s->ops[2].cls), lf_kval(c, s->ops[3].cls)};
    if (!iv[0] || !iv[1] || iv[0]->n != 1 || iv[1]->n != 1) return;
    eid y[2];
    int64_t lo[2][VIEW_MAX_RANK], hi[2][VIEW_MAX_RANK];
    for (uint32_t o = 0; o < 2; o++)
        if (!masked(c, s->ops[o].cls, interp_val_get(iv[o], 0), &y[o], lo[o], hi[o])) return;
    uint32_t nd, rank;
    const int64_t *rd = instr_ints(in, A_DIMENSIONS, &nd);
    const int64_t *yd = eg_type_dims(c->g, eg_class_type(c->g, y[0]), &rank);
    if (rank > VIEW_MAX_RANK || memcmp(lo[0], lo[1], rank * sizeof **lo) || memcmp(hi[0], hi[1], rank * sizeof **hi)) return;
    for (uint32_t k = 0; k < rank; k++)
        if (!member(rd, nd, k) && (lo[0][k] != 0 || hi[0][k] != yd[k])) return;
    /* the reduce node v's first element reads */
    const eid *ch;
    eid g = lf_class_node(c, v->elems[0].cls, OP_GET_TUPLE_ELEMENT, 1, &ch), red;
    if (g == EID_NONE || (red = lf_class_node(c, ch[0], OP_REDUCE, 4, NULL)) == EID_NONE) return;
    eid r = ch[0], kids[4] = {box_slice(c, y[0], lo[0], hi[0], 0, true), box_slice(c, y[1], lo[0], hi[0], 0, true),
                              s->ops[2].cls, s->ops[3].cls};
    eid f = eg_add(c->g, OP_REDUCE, eg_node_attr(c->g, red), eg_class_type(c->g, r), kids, 4, c->origin);
    eg_union(c->g, r, f, NULL);
}

/* slice(x) of stride 1 (the term's, in global coordinates) where x's class
 * says what the box is without the slice (box_cut: the padding GSPMD added
 * to an uneven dim cut off again after elementwise ops). */
static eid slice_cut(lstate *s, eid r) {
    lift_ctx *c = s->c;
    eid x = s->ops[0].cls;
    for (eid n = eg_class_first(c->g, eg_find(c->g, r)); n != EID_NONE; n = eg_class_next(c->g, n)) {
        uint32_t k, ns, rank;
        const eid *ch = eg_node_children(c->g, n, &k);
        if (eg_node_op(c->g, n) != OP_SLICE || k != 1 || eg_find(c->g, ch[0]) != eg_find(c->g, x)) continue;
        const int64_t *sl = ea_get(c->g, eg_node_attr(c->g, n), A_SLICE, &ns);
        eg_type_dims(c->g, eg_class_type(c->g, x), &rank);
        int64_t lo[VIEW_MAX_RANK], hi[VIEW_MAX_RANK];
        bool ok = sl && rank <= VIEW_MAX_RANK && ns == 3 * rank;
        for (uint32_t d = 0; d < rank && ok; d++) {
            lo[d] = sl[3 * d], hi[d] = sl[3 * d + 1];
            ok = sl[3 * d + 2] == 1 && hi[d] >= lo[d];
        }
        return ok ? box_cut(c, x, lo, hi, 1) : EID_NONE;
    }
    return EID_NONE;
}

void lf_pad_forms(lstate *s, const lval *v) {
    lift_ctx *c = s->c;
    const hlo_instr *in = s->in;
    pad_select_reduce(s, v);
    if (v->kind != LV_TERM || v->cls == EID_NONE || in->noperands < 1 || in->noperands > 2) return;
    for (uint32_t o = 0; o < in->noperands; o++)
        if (s->ops[o].kind != LV_TERM || s->ops[o].cls == EID_NONE) return;
    eid f = in->op == OP_SLICE && in->noperands == 1 ? slice_reduce(s, v->cls)
            : in->noperands != 2                    ? EID_NONE
            : in->op == OP_REDUCE                   ? pad_reduce(s, v->cls)
            : in->op == OP_DOT                      ? pad_dot(s, v->cls)
                                                    : EID_NONE;
    if (f == EID_NONE && in->op == OP_SLICE && in->noperands == 1) f = slice_cut(s, v->cls);
    if (f != EID_NONE && eg_class_type(c->g, f) == eg_class_type(c->g, v->cls)) eg_union(c->g, v->cls, f, NULL);
}
