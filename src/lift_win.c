/* lift_win — per-device windows (lift.h, LV_WIN): local slices of sharded
 * dims, concatenations and dynamic-slices of them, and collective-permute,
 * followed exactly per device until the pieces are the blocks of a plain view
 * again (GSPMD's rotate-half of RoPE at tp8: a local slice, a permute, a
 * concatenate, a dynamic-slice). Zeros a permute leaves at the edges are a
 * zero pad's (halo exchanges); reverse, reduce-window and convolution of
 * windows follow the pieces too (reversed device order, cumulative ops, a
 * convolution over halos, broadcasts and unit-dim reshapes), and so do
 * dynamic-update-slices that assemble a
 * buffer from a permute ring's blocks (lf_win_update: a collective matmul).
 * A window no op takes continues under a guessed view that decides no
 * finding (lf_win_assume).
 */
#include "interp.h"
#include "lift.h"
#include "lift_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>


/* The global dims of a term; its rank in *rank. */
static const int64_t *term_dims(lift_ctx *c, eid cls, uint32_t *rank) {
    return eg_type_dims(c->g, eg_class_type(c->g, cls), rank);
}

/* A new window along dim, its origin that of `like` (NULL: none yet). */
static lift_win *win_new(lift_ctx *c, const lift_win *like, uint32_t dim, int64_t len) {
    lift_win *w = arena_alloc(c->a, sizeof *w);
    w->dim = dim;
    w->len = len;
    w->from = like ? like->from : NULL;
    w->from_comp = like ? like->from_comp : NULL;
    w->idx = arena_alloc(c->a, (size_t)(c->ndev * (len ? len : 1)) * sizeof *w->idx);
    return w;
}

/* Windows hold an index per device and element along their dim: beyond this
 * many, the ops that would make one are left unrelated (said plainly). */
#define LIFT_WIN_MAX (1 << 22)

/* Window x over a term that is (a slice along the window's dim of) a zero
 * pad along that dim alone: over the pad's operand, the elements of the
 * padding zeros (idx -1), as a collective-permute leaves them (GSPMD's
 * shift of a sharded dim reads as the slice of a padded term; its pieces
 * then meet the unpadded ones in a concatenation: win_concatenate). x as it
 * is otherwise. */
static void win_unpad(lift_ctx *c, lval *x) {
    lift_win *w = x->win;
    uint32_t rank, yr;
    const int64_t *td = term_dims(c, x->cls, &rank);
    int64_t at[VIEW_MAX_RANK], step[VIEW_MAX_RANK];
    bool interior[VIEW_MAX_RANK];
    eid y;
    if (!lf_zero_pad_of(c, x->cls, rank, &y, at, step, interior)) return;
    const int64_t *yd = term_dims(c, y, &yr);
    for (uint32_t k = 0; k < rank; k++)  /* padded and sliced along the window's dim alone */
        if (interior[k] || step[k] != 1 || (k != w->dim && (at[k] != 0 || yd[k] != td[k]))) return;
    int64_t off = at[w->dim], n = yd[w->dim];
    lift_win *nw = win_new(c, w, w->dim, w->len);
    for (int64_t q = 0; q < c->ndev * w->len; q++) {
        int64_t j = w->idx[q] < 0 ? -1 : w->idx[q] + off;
        nw->idx[q] = j >= 0 && j < n ? j : -1;
    }
    x->win = nw;
    x->cls = y;
}

/* x, a term of local length len along dim d, as a window: device r holds
 * elements [block(r)·len, block(r)·len + len) of the term there. */
static bool win_of_term(lift_ctx *c, const lval *x, uint32_t d, int64_t len, lval *out) {
    if (x->kind != LV_TERM || x->v.partial || d >= x->v.rank || len < 1 || len > LIFT_WIN_MAX / c->ndev) return false;
    lift_win *w = win_new(c, NULL, d, len);
    for (int64_t r = 0; r < c->ndev; r++) {
        int64_t b = lf_dim_block(c, &x->v.dims[d], r);
        for (int64_t l = 0; l < len; l++) w->idx[r * len + l] = b * len + l;
    }
    *out = *x;
    out->kind = LV_WIN;
    out->win = w;
    out->v.dims[d] = (view_dim){0};
    return true;
}

/* slices of x along dim d, [at[b], at[b] + len) for b = 0..n-1 side by side:
 * runs that continue one another are one slice (a rotation by one block is
 * two, as jnp.roll writes it). */
static eid runs_term(lift_ctx *c, eid x, uint32_t d, const int64_t *at, int64_t n, int64_t len) {
    uint32_t rank;
    const int64_t *td = term_dims(c, x, &rank);
    eid ch[64];
    uint32_t nch = 0;
    int64_t sl[3 * VIEW_MAX_RANK];
    for (uint32_t k = 0; k < rank; k++) sl[3 * k] = 0, sl[3 * k + 1] = td[k], sl[3 * k + 2] = 1;
    for (int64_t b = 0; b < n; b++) {
        int64_t start = at[b], end = start + len;
        while (b + 1 < n && at[b + 1] == end) end += len, b++;
        if (nch == 64) return EID_NONE;
        sl[3 * d] = start;
        sl[3 * d + 1] = end;
        ch[nch++] = lf_mk_slice(c, x, sl);
    }
    return lf_mk_concat(c, ch, nch, d);
}

/* runs_term read with dim d split into (n, len), whole runs of blocks
 * along the new dim n, reshaped back (jnp.roll of the blocks written on the
 * reshaped array); EID_NONE when the blocks do not tile the dim. */
static eid split_runs_term(lift_ctx *c, eid x, uint32_t d, const int64_t *at, int64_t n, int64_t len) {
    uint32_t rank;
    const int64_t *td = term_dims(c, x, &rank);
    if (rank + 1 > VIEW_MAX_RANK || d >= rank || n * len != td[d] || n > 64) return EID_NONE;
    int64_t dims[VIEW_MAX_RANK], at2[64];
    for (uint32_t k = 0, j = 0; k < rank; k++) {
        if (k == d) dims[j++] = n, dims[j++] = len;
        else dims[j++] = td[k];
    }
    for (int64_t b = 0; b < n; b++) {
        if (at[b] % len) return EID_NONE;
        at2[b] = at[b] / len;
    }
    int dt = eg_type_dtype(c->g, eg_class_type(c->g, x));
    eid x2 = lf_mk_reshape(c, x, lf_type_of(c, dt, dims, rank + 1), c->origin);
    eid t2 = runs_term(c, x2, d, at2, n, 1);
    return t2 == EID_NONE ? EID_NONE : lf_mk_reshape(c, t2, eg_class_type(c->g, x), c->origin);
}

static lval win_settle_padded(lift_ctx *c, lval x, bool baseline_only);

/* Window x as term t (a baseline class unless any, else false) sharded
 * along the window's dim as vd says. */
static bool settled_as(lift_ctx *c, lval *x, eid t, view_dim vd, bool any) {
    if (t == EID_NONE || (!any && !(eg_class_origin(c->g, t) & EG_BASELINE))) return false;
    lval out = term(t, x->v, x->assumed);
    out.konst = x->konst;
    out.ambiguous = x->ambiguous;
    out.scale = x->scale;
    out.v.dims[x->win->dim] = vd;
    *x = out;
    return true;
}

/* Window x whose every device holds one element at o + b·st, b its block
 * over some mesh axes, o < st (the last element of each block of a cumsum
 * along a sharded dim, all-gathered): the elements taken out of the term's
 * dim split into (blocks, st), merged back, sharded over those axes; else x
 * as it is. base: each device's element. Only where an op needs a plain
 * view (lf_win_rearranged): a halo's rows stay a window; longer runs (a
 * fused weight split per device) stay windows blamed where they began. */
static lval win_strided(lift_ctx *c, lval x, const double *base) {
    const lift_win *w = x.win;
    uint32_t rank, d = w->dim;
    const int64_t *td = term_dims(c, x.cls, &rank);
    double lo_all = base[0];
    for (int64_t r = 1; r < c->ndev; r++) lo_all = base[r] < lo_all ? base[r] : lo_all;
    int64_t st = 0, lo, parts;
    for (int64_t r = 0; r < c->ndev; r++)
        if (base[r] > lo_all && (!st || (int64_t)(base[r] - lo_all) < st)) st = (int64_t)(base[r] - lo_all);
    view_dim bax;
    uint32_t mask = st > w->len && w->len == 1 ? lf_block_offsets(c, base, 1, st, &lo, &parts, &bax) : 0;
    if (!mask || (mask & view_axes_used(&x.v)) || lo < 0 || lo + w->len > st || parts * st > td[d] || rank + 1 > VIEW_MAX_RANK)
        return x;
    int64_t sl[3 * VIEW_MAX_RANK], split[VIEW_MAX_RANK], merged[VIEW_MAX_RANK];
    for (uint32_t k = 0; k < rank; k++) sl[3 * k] = 0, sl[3 * k + 1] = td[k], sl[3 * k + 2] = 1;
    sl[3 * d + 1] = parts * st;
    eid t = lf_mk_slice(c, x.cls, sl);
    for (uint32_t k = 0, q = 0; k < rank; k++) {
        merged[k] = k == d ? parts * w->len : td[k];
        if (k == d) split[q++] = parts, split[q++] = st;
        else split[q++] = td[k];
    }
    int dt = eg_type_dtype(c->g, eg_class_type(c->g, x.cls));
    t = lf_mk_reshape(c, t, lf_type_of(c, dt, split, rank + 1), c->origin);
    for (uint32_t k = 0; k <= rank; k++) sl[3 * k] = 0, sl[3 * k + 1] = split[k], sl[3 * k + 2] = 1;
    sl[3 * (d + 1)] = lo, sl[3 * (d + 1) + 1] = lo + w->len;
    t = lf_mk_reshape(c, lf_mk_slice(c, t, sl), lf_type_of(c, dt, merged, rank), c->origin);
    lval out = term(t, x.v, x.assumed);
    out.konst = x.konst;
    out.ambiguous = x.ambiguous;
    out.rearranged = !(eg_class_origin(c->g, t) & EG_BASELINE);  /* a baseline value's pieces, picked */
    out.v.dims[d] = bax;
    return out;
}

/* A window whose every device holds a run of the term that wraps around
 * its end, the runs those of the blocks of some mesh axes the view does not
 * use, all shifted back by the same k: the blocks of the term rolled by k
 * (jnp.roll along a sharded dim, as GSPMD writes it: each device's block
 * from its own piece and the one a permute brings from its neighbour; a
 * periodic halo exchange), the term written as jnp.roll writes it:
 * concatenate(slice [n-k, n), slice [0, n-k)). baseline_only: only where
 * the baseline computes that term too (settling early, before an op needs
 * a plain view: the window may yet meet others of the unrolled term). */
static bool win_rolled(lift_ctx *c, lval *x, bool baseline_only) {
    const lift_win *w = x->win;
    const mesh *m = c->mesh;
    uint32_t used = view_axes_used(&x->v), rank;
    const int64_t *td = term_dims(c, x->cls, &rank);
    int64_t n = td[w->dim];
    for (uint32_t mask = 1; mask < 1u << m->naxes; mask++) {
        if (mask & used) continue;
        view_dim vd = lf_axes_dim(c, mask);
        int64_t parts = 1, k = -1;
        for (uint32_t a = 0; a < m->naxes; a++)
            if (mask >> a & 1) parts *= m->sizes[a];
        if (parts * w->len != n) continue;
        bool ok = true;
        for (int64_t r = 0; r < c->ndev && ok; r++) {
            int64_t b = lf_dim_block(c, &vd, r), kr = ((b * w->len - w->idx[r * w->len]) % n + n) % n;
            ok = k < 0 || kr == k;
            k = kr;
            for (int64_t l = 1; l < w->len && ok; l++)  /* one run, wrapped around */
                ok = w->idx[r * w->len + l] == ((b * w->len - k + l) % n + n) % n;
        }
        if (!ok || k <= 0) continue;
        int64_t sl[3 * VIEW_MAX_RANK];
        for (uint32_t d = 0; d < rank; d++) sl[3 * d] = 0, sl[3 * d + 1] = td[d], sl[3 * d + 2] = 1;
        eid ch[2];
        sl[3 * w->dim] = n - k, sl[3 * w->dim + 1] = n;
        ch[0] = lf_mk_slice(c, x->cls, sl);
        sl[3 * w->dim] = 0, sl[3 * w->dim + 1] = n - k;
        ch[1] = lf_mk_slice(c, x->cls, sl);
        eid t = lf_mk_concat(c, ch, 2, w->dim);
        if (!baseline_only && t != EID_NONE && !(eg_class_origin(c->g, t) & EG_BASELINE) && w->from)
            lf_tentative(c, KIND_WRONG_COLLECTIVE_GROUP, w->from_comp, w->from,
                         "%s moves pieces of dimension %u between devices so that each holds its block of a roll by %lld, "
                         "which the baseline does not compute as such (rows wrapped around where it may pad)",
                         w->from->name, w->dim, (long long)k);
        return settled_as(c, x, t, vd, !baseline_only);
    }
    return false;
}

bool lf_win_rearranged(lift_ctx *c, lval *x) {
    const lift_win *w = x->win;
    const mesh *m = c->mesh;
    if (x->kind != LV_WIN || w->summed || w->len < 1) return false;
    /* Zeros a permute left: a plain view of the padded term, if any (only
     * here, where an op needs one: a later slice may yet drop them). */
    for (int64_t k = 0; k < c->ndev * w->len; k++)
        if (w->idx[k] < 0) {
            lval y = win_settle_padded(c, *x, false);
            if (y.kind != LV_TERM) return false;
            *x = y;
            return true;
        }
    uint32_t used = view_axes_used(&x->v), rank;
    const int64_t *td = term_dims(c, x->cls, &rank);
    bool wraps = false;
    for (int64_t r = 0; r < c->ndev; r++)
        for (int64_t l = 1; l < w->len; l++) {
            int64_t s0 = w->idx[r * w->len], e = w->idx[r * w->len + l];
            if (s0 < 0 || (e != s0 + l && e != s0 + l - td[w->dim])) return false;
            wraps |= e != s0 + l;
        }
    if (wraps) return win_rolled(c, x, false);
    double *base = arena_alloc(c->a, (size_t)c->ndev * sizeof *base);
    for (int64_t r = 0; r < c->ndev; r++) base[r] = (double)w->idx[r * w->len];
    lval y = win_strided(c, *x, base);
    if (y.kind == LV_TERM) {
        *x = y;
        return true;
    }
    for (uint32_t want = 1; want <= m->naxes; want++)
        for (uint32_t mask = 1; mask < 1u << m->naxes; mask++) {
            if ((mask & used) || (uint32_t)__builtin_popcount(mask) != want) continue;
            view_dim vd = lf_axes_dim(c, mask);
            int64_t parts = 1;
            for (uint32_t a = 0; a < m->naxes; a++)
                if (mask >> a & 1) parts *= m->sizes[a];
            if (parts > 64) continue;
            int64_t at[64];
            for (int64_t b = 0; b < parts; b++) at[b] = -1;
            bool ok = true;
            for (int64_t r = 0; r < c->ndev && ok; r++) {
                int64_t b = lf_dim_block(c, &vd, r), s0 = w->idx[r * w->len];
                ok = s0 + w->len <= td[w->dim] && (at[b] < 0 || at[b] == s0);
                at[b] = s0;
            }
            if (!ok) continue;
            /* Only an arrangement the baseline computes too (jnp.roll) is
             * taken: any other stays a window, reported where it began. */
            eid t = runs_term(c, x->cls, w->dim, at, parts, w->len);
            if (t != EID_NONE && !(eg_class_origin(c->g, t) & EG_BASELINE)) t = split_runs_term(c, x->cls, w->dim, at, parts, w->len);
            return settled_as(c, x, t, vd, false);
        }
    return false;
}

/* A window whose pieces are runs [lo + block(r)·len, + len) over some mesh
 * axes the view does not use (or the same run everywhere) is that slice of
 * the term, sharded over those axes; runs of the blocks wrapped around the
 * dim's end, a roll the baseline computes (win_rolled); any other window
 * stays one. */
static lval win_settle(lift_ctx *c, lval x) {
    const lift_win *w = x.win;
    uint32_t rank;
    const int64_t *td = term_dims(c, x.cls, &rank);
    double *base = arena_alloc(c->a, (size_t)c->ndev * sizeof *base);
    bool uniform = true;
    for (int64_t k = 0; k < c->ndev * w->len; k++)
        if (w->idx[k] < 0) return win_settle_padded(c, x, true);
    for (int64_t r = 0; r < c->ndev; r++) {
        int64_t b = w->idx[r * w->len];
        if (b < 0) return x;
        for (int64_t l = 1; l < w->len; l++)
            if (w->idx[r * w->len + l] != b + l) {
                /* Runs that wrap around the dim's end: the blocks of a roll
                 * the baseline computes too (a periodic halo's rows). */
                lval y = x;
                return win_rolled(c, &y, true) ? y : x;
            }
        base[r] = (double)b;
        uniform &= base[r] == base[0];
    }
    int64_t lo = (int64_t)base[0], parts = 1;
    uint32_t mask = 0;
    view_dim bax;
    if (!uniform) {
        mask = lf_block_offsets(c, base, 1, w->len, &lo, &parts, &bax);
        if (!mask || (mask & view_axes_used(&x.v))) return x;
    }
    if (lo < 0 || lo + parts * w->len > td[w->dim]) return x;
    int64_t sl[3 * VIEW_MAX_RANK];
    for (uint32_t k = 0; k < rank; k++) sl[3 * k] = 0, sl[3 * k + 1] = td[k], sl[3 * k + 2] = 1;
    sl[3 * w->dim] = lo;
    sl[3 * w->dim + 1] = lo + parts * w->len;
    lval out = term(lf_mk_slice(c, x.cls, sl), x.v, x.assumed);
    out.konst = x.konst;
    out.ambiguous = x.ambiguous;
    if (mask) out.v.dims[w->dim] = bax;
    return out;
}

/* pad(x, 0) by pad (3 words per dim: lo, hi, interior 0), built (add) or
 * only looked up (EID_NONE when the e-graph has no such node). */
static eid zero_pad_by(lift_ctx *c, eid x, const int64_t *pad, bool add) {
    uint32_t rank;
    const int64_t *xd = term_dims(c, x, &rank);
    int dt = eg_type_dtype(c->g, eg_class_type(c->g, x));
    if (rank > VIEW_MAX_RANK) return EID_NONE;
    int64_t dims[VIEW_MAX_RANK], pw[3 * VIEW_MAX_RANK];
    for (uint32_t k = 0; k < rank; k++)
        dims[k] = xd[k] + pad[3 * k] + pad[3 * k + 1], pw[3 * k] = pad[3 * k], pw[3 * k + 1] = pad[3 * k + 1], pw[3 * k + 2] = 0;
    interp_val *z = interp_val_new(dt, 0, NULL);  /* zero-filled */
    if (!z) return EID_NONE;
    eid ch[2] = {eg_find(c->g, x), eg_find(c->g, lf_const_term(c, z, c->origin))};
    hlo_attr at = {.key = A_PADDING, .kind = K_PADDING, .n = rank, .v.ints = pw};
    hlo_instr g = {.name = "pad", .opname = "pad", .op = OP_PAD, .nattrs = 1, .noperands = 2, .attrs = &at};
    g.shape.dtype = (uint8_t)dt;
    g.shape.rank = rank;
    g.shape.dims = dims;
    if (add) return lf_node(c, c->cur, &g, ch, 2, dims, c->origin);
    eid n = eg_lookup(c->g, OP_PAD, lf_encode_attrs(c, c->cur, &g), lf_type_of(c, dt, dims, rank), ch, 2);
    return n == EID_NONE ? EID_NONE : eg_find(c->g, n);
}

/* pad(x, 0) along dim d alone, lo before and hi after (zero_pad_by). */
static eid zero_pad(lift_ctx *c, eid x, uint32_t d, int64_t lo, int64_t hi, bool add) {
    int64_t pad[3 * VIEW_MAX_RANK] = {0};
    uint32_t rank;
    term_dims(c, x, &rank);
    if (d >= rank || rank > VIEW_MAX_RANK) return EID_NONE;
    pad[3 * d] = lo;
    pad[3 * d + 1] = hi;
    return zero_pad_by(c, x, pad, add);
}

eid lf_zero_pad(lift_ctx *c, eid x, uint32_t d, int64_t lo, int64_t hi) { return zero_pad(c, x, d, lo, hi, true); }

/* A zero pad of x along dim d alone that the baseline computes, by lo
 * before and hi after or a little more (a halo of one side of a pad on
 * both), the least such (its padding in *plo, *phi); EID_NONE if none. */
static eid baseline_pad(lift_ctx *c, eid x, uint32_t d, int64_t lo, int64_t hi, int64_t *plo, int64_t *phi) {
    for (int64_t more = 0; more <= 4; more++)
        for (int64_t ml = 0; ml <= more; ml++) {
            eid p = zero_pad(c, x, d, lo + ml, hi + more - ml, false);
            if (p != EID_NONE && (eg_class_origin(c->g, p) & EG_BASELINE)) {
                *plo = lo + ml, *phi = hi + more - ml;
                return p;
            }
        }
    return EID_NONE;
}

/* Runs k[r] (INT64_MIN: a device with only zeros) of a window that are
 * base + block(r)·len over mesh axes its view leaves free, the devices with
 * only zeros given theirs, which must lie wholly outside the term [0, n)
 * (the blocks of a padded term past its end); false when no axes place
 * them. */
static bool zeros_placed(lift_ctx *c, const lval *x, int64_t n, int64_t *k) {
    const lift_win *w = x->win;
    uint32_t used = view_axes_used(&x->v);
    for (uint32_t mask = 1; mask < 1u << c->mesh->naxes; mask++) {
        if (mask & used) continue;
        view_dim vd = lf_axes_dim(c, mask);
        int64_t base = INT64_MIN;
        bool ok = true;
        for (int64_t r = 0; r < c->ndev && ok; r++) {
            if (k[r] == INT64_MIN) continue;
            int64_t b = k[r] - lf_dim_block(c, &vd, r) * w->len;
            ok = base == INT64_MIN || b == base;
            base = b;
        }
        if (!ok || base == INT64_MIN) continue;
        for (int64_t r = 0; r < c->ndev && ok; r++) {
            int64_t at = base + lf_dim_block(c, &vd, r) * w->len;
            ok = k[r] != INT64_MIN || at >= n || at + w->len <= 0;
        }
        if (!ok) continue;
        for (int64_t r = 0; r < c->ndev; r++)
            if (k[r] == INT64_MIN) k[r] = base + lf_dim_block(c, &vd, r) * w->len;
        return true;
    }
    return false;
}

/* A window with zeros (idx -1: where a collective-permute delivered none)
 * whose every device holds a run of the term with the zeros exactly where
 * the run leaves the term (before its first row or past its last: the first
 * and last device of a halo exchange without wrap-around) is a window of the
 * term padded with zeros there, without zeros: in *out (the padding the
 * baseline computes preferred; with baseline_only, only that). A zero
 * anywhere else (inside the term) is no such window; a device with only
 * zeros is one only with place_zeros (zeros_placed). */
static bool win_padded(lift_ctx *c, const lval *x, bool baseline_only, bool place_zeros, lval *out) {
    const lift_win *w = x->win;
    uint32_t rank;
    const int64_t *td = term_dims(c, x->cls, &rank);
    int64_t n = td[w->dim], lo = 0, hi = 0, plo = 0, phi = 0;
    int64_t *k = arena_alloc(c->a, (size_t)c->ndev * sizeof *k);
    bool zeros_only = false;
    for (int64_t r = 0; r < c->ndev; r++) {
        const int64_t *e = w->idx + r * w->len;
        int64_t l0 = 0;
        while (l0 < w->len && e[l0] < 0) l0++;
        k[r] = l0 < w->len ? e[l0] - l0 : INT64_MIN;
        zeros_only |= l0 == w->len;
    }
    /* A device with only zeros (past the term's end: GSPMD's pad of a
     * sharded dim) is placed by its block, as the others are. */
    if (zeros_only && (!place_zeros || !zeros_placed(c, x, n, k))) return false;
    for (int64_t r = 0; r < c->ndev; r++) {
        const int64_t *e = w->idx + r * w->len;
        for (int64_t l = 0; l < w->len; l++) {
            int64_t v = k[r] + l;
            if (e[l] >= 0 ? e[l] != v : v >= 0 && v < n) return false;
            if (v < -lo) lo = -v;
            if (v - n + 1 > hi) hi = v - n + 1;
        }
    }
    eid p = baseline_pad(c, x->cls, w->dim, lo, hi, &plo, &phi);
    if (p == EID_NONE && !baseline_only) {
        p = zero_pad(c, x->cls, w->dim, plo = lo, phi = hi, true);
        /* Whole blocks of zeros the baseline never pads with: a shift
         * where it may roll (a ring's missing pair), named if it matters. */
        if (zeros_only && w->from)
            lf_tentative(c, KIND_WRONG_COLLECTIVE_GROUP, w->from_comp, w->from,
                         "%s leaves a device's whole block of dimension %u zeros (a shift by whole blocks), which the "
                         "baseline does not compute as such", w->from->name, w->dim);
    }
    if (p == EID_NONE) return false;
    lift_win *nw = win_new(c, w, w->dim, w->len);
    for (int64_t r = 0; r < c->ndev; r++)
        for (int64_t l = 0; l < w->len; l++) nw->idx[r * w->len + l] = k[r] + l + plo;
    *out = *x;
    out->cls = p;
    out->win = nw;
    return true;
}

bool lf_win_padded(lift_ctx *c, const lval *x, bool baseline_only, lval *out) {
    return win_padded(c, x, baseline_only, false, out);
}

/* x as a plain view of the zero-padded term (win_padded), or x. Where an op
 * needs a plain view (not baseline_only), devices with only zeros are placed
 * by their blocks too: before, a window with such devices may still meet a
 * select of the devices' own values (a pipeline's first stage). */
static lval win_settle_padded(lift_ctx *c, lval x, bool baseline_only) {
    lval y;
    if (!win_padded(c, &x, baseline_only, !baseline_only, &y)) return x;
    y = win_settle(c, y);
    return y.kind == LV_WIN ? x : y;
}

/* slice of a window along its dim (other dims: unsharded ones slice the term,
 * sharded ones are taken whole), or of a term with one sharded dim sliced. */
static bool win_slice_at(lstate *s, const int64_t *sl, uint32_t n, lval *out);

static bool win_slice(lstate *s, lval *out) {
    const hlo_attr *sa = instr_attr(s->in, A_SLICE);
    return sa && win_slice_at(s, sa->v.ints, sa->n, out);
}

/* dynamic-slice at offsets that are the same constants on every device (a
 * scan's microbatch i, its counter known while the loop is walked iteration
 * by iteration): the static slice at the clamped starts. */
static bool win_dynamic_slice_uniform(lstate *s, lval *out) {
    lift_ctx *c = s->c;
    const hlo_instr *in = s->in, *src = &s->comp->instrs[in->operands[0]];
    uint32_t rank = src->shape.rank;
    if (s->ops[0].kind != LV_TERM || in->noperands != 1 + rank || in->shape.rank != rank || rank > VIEW_MAX_RANK) return false;
    int64_t sl[3 * VIEW_MAX_RANK];
    for (uint32_t d = 0; d < rank; d++) {
        int64_t size = in->shape.dims[d], st;
        if (!lf_known_start(c, &s->ops[1 + d], src->shape.dims[d], size, &st)) return false;
        sl[3 * d] = st, sl[3 * d + 1] = st + size, sl[3 * d + 2] = 1;
    }
    return win_slice_at(s, sl, rank, out);
}

/* The slice sl (n triples: start, limit, stride) of s's operand 0. */
static bool win_slice_at(lstate *s, const int64_t *sl, uint32_t n, lval *out) {
    lift_ctx *c = s->c;
    const hlo_instr *in = s->in;
    const hlo_instr *src = &s->comp->instrs[in->operands[0]];
    lval x = s->ops[0];
    if (n != src->shape.rank || src->shape.rank > VIEW_MAX_RANK || in->shape.rank != n) return false;
    for (uint32_t k = 0; k < n; k++)  /* the attribute and the shapes must agree (else not read here) */
        if (sl[3 * k] < 0 || sl[3 * k + 2] < 1 || sl[3 * k + 1] > src->shape.dims[k] || sl[3 * k + 1] < sl[3 * k] ||
            (sl[3 * k + 1] - sl[3 * k] + sl[3 * k + 2] - 1) / sl[3 * k + 2] != in->shape.dims[k])
            return false;
    if (x.kind == LV_TERM) {
        int d = -1;
        for (uint32_t k = 0; k < n; k++)
            if (x.v.dims[k].naxes && (sl[3 * k] != 0 || sl[3 * k + 1] != src->shape.dims[k] || sl[3 * k + 2] != 1)) {
                if (d >= 0) return false;
                d = (int)k;
            }
        if (d < 0 || !win_of_term(c, &s->ops[0], (uint32_t)d, src->shape.dims[d], &x)) return false;
        x.win->from = in;
        x.win->from_comp = s->comp;
    }
    if (x.kind != LV_WIN || x.win->summed) return false;
    const lift_win *w = x.win;
    uint32_t rank;
    const int64_t *td = term_dims(c, x.cls, &rank);
    int64_t tsl[3 * VIEW_MAX_RANK];
    for (uint32_t k = 0; k < rank; k++) {
        bool whole = sl[3 * k] == 0 && sl[3 * k + 1] == src->shape.dims[k] && sl[3 * k + 2] == 1;
        if (x.v.dims[k].naxes && !whole) return false;
        if (k == w->dim || x.v.dims[k].naxes) tsl[3 * k] = 0, tsl[3 * k + 1] = td[k], tsl[3 * k + 2] = 1;
        else memcpy(tsl + 3 * k, sl + 3 * k, 3 * sizeof *tsl);
    }
    int64_t lo = sl[3 * w->dim], st = sl[3 * w->dim + 2], len = in->shape.dims[w->dim];
    if (lo < 0 || st < 1 || len < 1 || lo + (len - 1) * st >= w->len) return false;
    lift_win *nw = win_new(c, w, w->dim, len);
    for (int64_t r = 0; r < c->ndev; r++)
        for (int64_t l = 0; l < len; l++) nw->idx[r * len + l] = w->idx[r * w->len + lo + l * st];
    x.cls = lf_mk_slice(c, x.cls, tsl);
    x.win = nw;
    *out = win_settle(c, x);
    return true;
}

/* concatenate along dim cd where an operand is a window along cd or a term
 * sharded on cd: every operand as a window along cd, the same view elsewhere;
 * the term is the concatenation of the distinct operand terms. */
static bool win_concatenate(lstate *s, lval *out) {
    lift_ctx *c = s->c;
    const hlo_instr *in = s->in;
    uint32_t nd;
    const int64_t *dd = instr_ints(in, A_DIMENSIONS, &nd);
    if (nd != 1 || dd[0] < 0 || dd[0] >= in->shape.rank || in->noperands > 64 || in->noperands == 0) return false;
    uint32_t cd = (uint32_t)dd[0];
    for (uint32_t o = 0; o < in->noperands; o++)
        if (cd >= s->comp->instrs[in->operands[o]].shape.rank || (s->ops[o].kind == LV_WIN && !s->ops[o].win)) return false;
    bool needed = false;
    for (uint32_t o = 0; o < in->noperands; o++) {
        const lval *x = &s->ops[o];
        if (x->kind == LV_WIN && x->win->summed) return false;
        needed |= x->kind == LV_WIN || (x->kind == LV_TERM && cd < x->v.rank && x->v.dims[cd].naxes);
    }
    if (!needed) return false;
    lval ws[64];
    eid ch[64];
    int64_t off[64], total = 0;
    /* a window's term T ++ F or F ++ T along cd (win_select_device's fill), T, and where T's rows start in it */
    eid wide = EID_NONE, narrow = EID_NONE;
    int64_t narrow_at = 0;
    uint32_t nch = 0, rank = 0;
    const int64_t *td0 = NULL;
    for (uint32_t o = 0; o < in->noperands; o++) {
        const hlo_instr *xi = &s->comp->instrs[in->operands[o]];
        if (s->ops[o].kind == LV_WIN) ws[o] = s->ops[o];
        else if (!win_of_term(c, &s->ops[o], cd, xi->shape.dims[cd], &ws[o])) return false;
        if (ws[o].win->dim != cd || !view_equal(&ws[o].v, &ws[0].v)) return false;
    }
    /* a window of a padded term beside one of the term itself: the zeros
     * as zeros, one term (a shifted piece beside the unshifted ones) */
    for (uint32_t o = 0; o < in->noperands; o++) {
        lval u = ws[o];
        win_unpad(c, &u);
        for (uint32_t p = 0; p < in->noperands; p++)
            if (p != o && u.cls != ws[o].cls && eg_find(c->g, u.cls) == eg_find(c->g, ws[p].cls)) {
                ws[o] = u;
                break;
            }
    }
    /* windows of T beside one of T ++ F (F ++ T) are all of that term (T's
     * rows at their places in it): a neighbour's rows completed by a
     * boundary value after (before) them */
    for (uint32_t o = 0; o < in->noperands && wide == EID_NONE; o++) {
        const eid *kid;
        eid n = lf_class_node(c, ws[o].cls, OP_CONCATENATE, 2, &kid);
        if (n == EID_NONE || lf_node_concat_dim(c, n) != (int)cd) continue;
        eid k0 = eg_find(c->g, kid[0]), k1 = eg_find(c->g, kid[1]);
        uint32_t r0;
        int64_t len0 = term_dims(c, k0, &r0)[cd];
        for (uint32_t p = 0; p < in->noperands && wide == EID_NONE; p++) {
            eid kp = eg_find(c->g, ws[p].cls);
            if (kp == k0) wide = eg_find(c->g, ws[o].cls), narrow = k0, narrow_at = 0;
            else if (kp == k1) wide = eg_find(c->g, ws[o].cls), narrow = k1, narrow_at = len0;
        }
    }
    for (uint32_t o = 0; o < in->noperands; o++) {
        if (wide != EID_NONE && eg_find(c->g, ws[o].cls) == narrow) {
            ws[o].cls = wide;
            if (narrow_at) {
                lift_win *nw = win_new(c, ws[o].win, cd, ws[o].win->len);
                for (int64_t q = 0; q < c->ndev * nw->len; q++)
                    nw->idx[q] = ws[o].win->idx[q] < 0 ? -1 : ws[o].win->idx[q] + narrow_at;
                ws[o].win = nw;
            }
        }
        eid k = eg_find(c->g, ws[o].cls);
        uint32_t j = 0;
        while (j < nch && ch[j] != k) j++;
        if (j == nch) {
            uint32_t r;
            const int64_t *td = term_dims(c, k, &r);
            if (!td0) td0 = td, rank = r;
            if (r != rank) return false;
            for (uint32_t q = 0; q < r; q++)
                if (q != cd && td[q] != td0[q]) return false;
            ch[nch] = k;
            off[nch++] = total;
            total += td[cd];
        }
    }
    int64_t dims[VIEW_MAX_RANK];
    if (!td0 || rank > VIEW_MAX_RANK) return false;
    memcpy(dims, td0, rank * sizeof *dims);
    dims[cd] = total;
    eid t = nch == 1 ? ch[0] : lf_node(c, c->cur, in, ch, nch, dims, c->origin);
    int64_t sum = 0;
    for (uint32_t o = 0; o < in->noperands; o++) sum += ws[o].win->len;
    if (sum != in->shape.dims[cd] || sum > LIFT_WIN_MAX / c->ndev) return false;
    /* The pieces began where data first moved between devices, if it did. */
    const lift_win *like = NULL;
    for (uint32_t o = 0; o < in->noperands; o++)
        if (s->ops[o].kind == LV_WIN &&
            (!like || (!(like->from && like->from->op == OP_COLLECTIVE_PERMUTE) && s->ops[o].win->from &&
                       s->ops[o].win->from->op == OP_COLLECTIVE_PERMUTE)))
            like = s->ops[o].win;
    lift_win *w = win_new(c, like, cd, in->shape.dims[cd]);
    if (!w->from) w->from = in, w->from_comp = s->comp;
    bool assumed = false;
    for (int64_t r = 0; r < c->ndev; r++) {
        int64_t at = 0;
        for (uint32_t o = 0; o < in->noperands; o++) {
            const lift_win *x = ws[o].win;
            eid k = eg_find(c->g, ws[o].cls);
            uint32_t j = 0;
            while (ch[j] != k) j++;
            for (int64_t l = 0; l < x->len; l++) {
                int64_t e = x->idx[r * x->len + l];
                w->idx[r * w->len + at++] = e < 0 ? -1 : e + off[j];
            }
        }
    }
    for (uint32_t o = 0; o < in->noperands; o++) assumed |= ws[o].assumed;
    lval v = ws[0];
    v.cls = t;
    v.win = w;
    v.assumed = assumed;
    *out = win_settle(c, v);
    return true;
}

/* dynamic-slice of a window: per-device offsets (device values, clamped as
 * XLA clamps them) along its dim; every other dim is taken whole. */
/* A dynamic start along a dim of `full` elements for a piece of len, clamped
 * as XLA clamps it (the piece stays inside). */
static int64_t clamped_start(double at, int64_t full, int64_t len) {
    int64_t st = (int64_t)at;
    if (st > full - len) st = full - len;
    return st < 0 ? 0 : st;
}

static bool win_dynamic_slice(lstate *s, lval *out) {
    lift_ctx *c = s->c;
    const hlo_instr *in = s->in;
    const lval *x = &s->ops[0];
    if (x->kind != LV_WIN || x->win->summed) return false;
    const hlo_instr *src = &s->comp->instrs[in->operands[0]];
    const lift_win *w = x->win;
    if (in->noperands != 1 + src->shape.rank || in->shape.rank != src->shape.rank) return false;
    uint32_t ns;
    const int64_t *sizes = instr_ints(in, A_DYNAMIC_SLICE_SIZES, &ns);
    for (uint32_t k = 0; k < src->shape.rank; k++)
        if ((k != w->dim && in->shape.dims[k] != src->shape.dims[k]) || (sizes && (ns != in->shape.rank || sizes[k] != in->shape.dims[k])))
            return false;
    const lval *o = &s->ops[1 + w->dim];
    if (o->kind != LV_DEV || o->count != 1) return false;
    int64_t len = in->shape.dims[w->dim];
    if (len < 1 || len > w->len) return false;
    lift_win *nw = win_new(c, w, w->dim, len);
    for (int64_t r = 0; r < c->ndev; r++) {
        int64_t st = clamped_start(o->dev[r], w->len, len);
        for (int64_t l = 0; l < len; l++) nw->idx[r * len + l] = w->idx[r * w->len + st + l];
    }
    lval v = *x;
    v.win = nw;
    *out = win_settle(c, v);
    return true;
}

/* dynamic-update-slice(buf, u, offsets) where u is a window (or a term,
 * read as one along the dim its offsets vary along) and buf zeros or a
 * window of the same term along the same dim, every other dim written whole
 * (alike sharded on both): on every device the pieces u holds replace buf's
 * at that device's offset (clamped as XLA clamps it). A buffer assembled
 * block by block from pieces a permute ring brings (a collective matmul, an
 * all-gather written by hand) is a window until every device holds its rows
 * in order, then a plain view. */
bool lf_win_update(lstate *s, lval *out) {
    lift_ctx *c = s->c;
    const hlo_instr *in = s->in;
    uint32_t rank = in->shape.rank;
    if (c->baseline_mode || in->op != OP_DYNAMIC_UPDATE_SLICE || in->noperands != 2 + rank || rank > VIEW_MAX_RANK)
        return false;
    const lval *b = &s->ops[0], *u = &s->ops[1];
    const shape *us = &s->comp->instrs[in->operands[1]].shape;
    if (us->rank != rank || (b->kind != LV_WIN && u->kind != LV_WIN && !(b->kind == LV_TERM && lf_class_is_zero(c, b->cls))))
        return false;
    /* the dim written at per-device offsets: the window's, else the one
     * offset that is not the same on every device */
    uint32_t d = u->kind == LV_WIN ? u->win->dim : b->kind == LV_WIN ? b->win->dim : rank;
    for (uint32_t k = 0; k < rank && d == rank; k++) {
        const lval *o = &s->ops[2 + k];
        if (o->kind == LV_DEV && o->count == 1 && !lf_dev_uniform(c, o)) d = k;
    }
    if (d == rank) return false;
    for (uint32_t k = 0; k < rank; k++)
        if (k != d && us->dims[k] != in->shape.dims[k]) return false;
    const lval *o = &s->ops[2 + d];
    int64_t L = in->shape.dims[d], len = us->dims[d];
    if (o->kind != LV_DEV || o->count != 1 || len < 1 || len > L || L > LIFT_WIN_MAX / c->ndev) return false;
    lval uw;
    if (u->kind == LV_WIN) {
        if (u->win->summed || u->win->dim != d || u->win->len != len) return false;
        uw = *u;
    } else if (u->kind != LV_TERM || !win_of_term(c, u, d, len, &uw)) {
        return false;
    }
    if (uw.v.partial || uw.zm || uw.cls == EID_NONE) return false;
    const lift_win *bw = NULL;
    if (b->kind == LV_WIN) {
        bw = b->win;
        if (bw->summed || bw->dim != d || bw->len != L || !view_equal(&b->v, &uw.v) || b->zm ||
            eg_find(c->g, b->cls) != eg_find(c->g, uw.cls) || lf_scale_of(b) != lf_scale_of(&uw))
            return false;
    } else if (b->kind != LV_TERM || b->v.partial || !lf_class_is_zero(c, b->cls)) {
        return false;
    }
    lift_win *nw = win_new(c, uw.win, d, L);
    for (int64_t r = 0; r < c->ndev; r++) {
        double at = o->dev[r];
        if (at != (double)(int64_t)at) return false;
        int64_t st = clamped_start(at, L, len);
        for (int64_t l = 0; l < L; l++) nw->idx[r * L + l] = bw ? bw->idx[r * L + l] : -1;
        for (int64_t l = 0; l < len; l++) nw->idx[r * L + st + l] = uw.win->idx[r * len + l];
    }
    lval v = uw;
    v.win = nw;
    v.assumed = uw.assumed || (b->kind == LV_WIN && b->assumed);
    *out = win_settle(c, v);
    return true;
}

/* dynamic-slice of a term along its unsharded dim d at per-device offsets
 * that select no block of a view (every other dim taken whole, or at one
 * start on every device where the term holds it whole): each device's
 * piece, exactly, as a window from here — a rotation of the blocks, say, is
 * right when what follows does not care which device holds which (a sum over
 * the devices) and wrong otherwise, which only later uses can tell. */
bool lf_win_dynamic_slice_term(lstate *s, uint32_t d, lval *out) {
    lift_ctx *c = s->c;
    const hlo_instr *in = s->in;
    const lval *x = &s->ops[0];
    const hlo_instr *src = &s->comp->instrs[in->operands[0]];
    if (x->kind != LV_TERM || x->v.partial || d >= x->v.rank || x->v.dims[d].naxes || in->noperands != 1 + src->shape.rank)
        return false;
    uint32_t rank;
    const int64_t *td = term_dims(c, x->cls, &rank);
    int64_t tsl[3 * VIEW_MAX_RANK];
    bool cut = false;
    if (rank != src->shape.rank || rank > VIEW_MAX_RANK) return false;
    for (uint32_t k = 0; k < src->shape.rank; k++) {
        const lval *o = &s->ops[1 + k];
        tsl[3 * k] = 0, tsl[3 * k + 1] = td[k], tsl[3 * k + 2] = 1;
        if (k == d) {
            if (o->kind != LV_DEV || o->count != 1) return false;
        } else if (in->shape.dims[k] != src->shape.dims[k]) {
            /* the same start on every device along a dim held whole: a
             * slice of the term there */
            if (o->kind != LV_DEV || !lf_dev_uniform(c, o) || x->v.dims[k].naxes) return false;
            tsl[3 * k] = clamped_start(o->dev[0], src->shape.dims[k], in->shape.dims[k]);
            tsl[3 * k + 1] = tsl[3 * k] + in->shape.dims[k];
            cut = true;
        }
    }
    int64_t len = in->shape.dims[d], full = src->shape.dims[d];
    if (len < 1 || len > full || len > LIFT_WIN_MAX / c->ndev) return false;
    const lval *o = &s->ops[1 + d];
    lift_win *w = win_new(c, NULL, d, len);
    w->from = in;
    w->from_comp = s->comp;
    for (int64_t r = 0; r < c->ndev; r++) {
        int64_t st = clamped_start(o->dev[r], full, len);
        for (int64_t l = 0; l < len; l++) w->idx[r * len + l] = st + l;
    }
    lval v = *x;
    v.kind = LV_WIN;
    v.win = w;
    if (cut) v.cls = lf_mk_slice(c, x->cls, tsl);
    *out = win_settle(c, v);
    return true;
}

/* The source of every device under a collective-permute's pairs ({s,t}:
 * device t receives the operand of device s; -1 where no pair targets t), or
 * NULL with *bad saying why the pairs name no such map. Arena-allocated. */
int64_t *lf_permute_sources(lift_ctx *c, const hlo_instr *in, const char **bad) {
    *bad = NULL;
    if (!instr_attr(in, A_CHANNEL_ID)) {
        *bad = "replicas, not partitions (no channel_id)";
        return NULL;
    }
    const hlo_attr *pa = instr_attr(in, A_SOURCE_TARGET_PAIRS);
    arena tmp;
    arena_init(&tmp);
    hlo_groups g = {0};
    if (pa) groups_expand(pa->v.groups, &tmp, &g);
    int64_t *from = arena_alloc(c->a, (size_t)c->ndev * sizeof *from);
    bool *sent = arena_alloc(c->a, (size_t)c->ndev * sizeof *sent);
    for (int64_t r = 0; r < c->ndev; r++) from[r] = -1, sent[r] = false;
    for (uint32_t k = 0; k < g.ngroups && !*bad; k++) {
        if (g.start[k + 1] - g.start[k] != 2) {
            *bad = "a pair without two ids";
            break;
        }
        int64_t a = g.ids[g.start[k]], b = g.ids[g.start[k] + 1];
        if (a < 0 || b < 0 || a >= c->ndev || b >= c->ndev) *bad = "a device id outside the mesh";
        else if (from[b] >= 0 || sent[a]) *bad = "a device twice as source or target";
        else from[b] = a, sent[a] = true;
    }
    arena_free(&tmp);
    return *bad ? NULL : from;
}

bool lf_axes_of_blocks(const lift_ctx *c, const int64_t *b, int64_t parts, view_dim *out) {
    const mesh *m = c->mesh;
    int64_t stride[MESH_MAX_AXES], step = 1;  /* step: device id distance of one coordinate */
    uint8_t order[MESH_MAX_AXES];
    uint32_t n = 0;
    if (b[0] != 0) return false;
    for (int a = (int)m->naxes - 1; a >= 0; a--) {
        stride[a] = m->sizes[a] > 1 ? b[step] : 0;
        if (stride[a] < 0) return false;
        if (stride[a] > 0) order[n++] = (uint8_t)a;
        step *= m->sizes[a];
    }
    /* Major first: strides descending, each the product of the sizes below. */
    for (uint32_t i = 1; i < n; i++)
        for (uint32_t j = i; j > 0 && stride[order[j]] > stride[order[j - 1]]; j--) {
            uint8_t t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
    int64_t want = 1;
    for (uint32_t i = n; i-- > 0;) {
        if (stride[order[i]] != want) return false;
        want *= m->sizes[order[i]];
    }
    if (want != parts) return false;
    for (int64_t t = 0; t < c->ndev; t++) {
        int64_t e = 0;
        for (uint32_t i = 0; i < n; i++) e += mesh_coord(m, t, order[i]) * stride[order[i]];
        if (e != b[t]) return false;
    }
    *out = (view_dim){.naxes = (uint8_t)n};
    memcpy(out->axes, order, n);
    return true;
}

bool lf_permute_view(const lift_ctx *c, const view *v, const int64_t *from, view *out) {
    if (v->partial) return false;
    for (int64_t t = 0; t < c->ndev; t++)
        if (from[t] < 0) return false;
    view w = *v;
    uint32_t used = 0;
    int64_t *b = xmalloc((size_t)c->ndev * sizeof *b);
    bool ok = true;
    for (uint32_t d = 0; d < v->rank && ok; d++) {
        if (!v->dims[d].naxes) continue;
        for (int64_t t = 0; t < c->ndev; t++) b[t] = lf_dim_block(c, &v->dims[d], from[t]);
        ok = lf_axes_of_blocks(c, b, view_dim_parts(v, c->mesh, d), &w.dims[d]);
        for (uint32_t k = 0; ok && k < w.dims[d].naxes; k++) {
            ok = !(used >> w.dims[d].axes[k] & 1);
            used |= 1u << w.dims[d].axes[k];
        }
    }
    free(b);
    if (ok) *out = w;
    return ok;
}

/* collective-permute: device t receives the operand of the device s paired
 * with it ({s,t} in source_target_pairs, partition ids), or zeros when none.
 * When every device receives and the pairs carry each dim's blocks to the
 * blocks of another arrangement of mesh axes (a resharding: a transpose of
 * mesh positions), the same term under that view. Otherwise exact per device
 * as a window along the dim whose blocks move; related only when the devices
 * paired hold the same blocks of every other dim (and the value is not
 * partial). */
static lval lift_collective_permute(lstate *s) {
    lift_ctx *c = s->c;
    const hlo_instr *in = s->in;
    const lval *x = &s->ops[0];
    bool same_shape = in->noperands == 1 && in->shape.rank == s->comp->instrs[in->operands[0]].shape.rank;
    for (uint32_t k = 0; same_shape && k < in->shape.rank; k++)
        same_shape = in->shape.dims[k] == s->comp->instrs[in->operands[0]].shape.dims[k];
    if (!same_shape || (x->kind != LV_TERM && x->kind != LV_WIN) || (x->kind == LV_WIN && x->win->summed) ||
        in->shape.rank == 0 || in->shape.rank > VIEW_MAX_RANK) {
        lf_unsupported(c, s->comp, in, "no transfer function relates %s (%s) with these operand views", in->name, in->opname);
        return unknown();
    }
    const char *bad;
    int64_t *from = lf_permute_sources(c, in, &bad);
    if (!from) {
        lf_unsupported(c, s->comp, in, "the source_target_pairs of %s name %s", in->name, bad);
        return unknown();
    }
    if (x->v.partial) {
        lf_unsupported(c, s->comp, in, "%s permutes a partial value", in->name);
        return unknown();
    }
    view pv;
    if (x->kind == LV_TERM && lf_permute_view(c, &x->v, from, &pv)) {
        lval r = *x;
        r.v = pv;
        return r;
    }
    uint32_t moved = 0;
    bool all = true;
    for (int64_t t = 0; t < c->ndev; t++) {
        if (from[t] < 0) {
            all = false;
            continue;
        }
        for (uint32_t a = 0; a < c->mesh->naxes; a++)
            if (mesh_coord(c->mesh, from[t], (int)a) != mesh_coord(c->mesh, t, (int)a)) moved |= 1u << a;
    }
    int d = x->kind == LV_WIN ? (int)x->win->dim : -1;
    for (uint32_t k = 0; k < x->v.rank && x->kind == LV_TERM; k++) {
        uint32_t m = 0;
        for (uint32_t j = 0; j < x->v.dims[k].naxes; j++) m |= 1u << x->v.dims[k].axes[j];
        if (!(m & moved)) continue;
        if (d >= 0) {
            lf_unsupported(c, s->comp, in, "%s moves blocks of two dimensions at once", in->name);
            return unknown();
        }
        d = (int)k;
    }
    if (d < 0 && all) return *x;  /* only replicated axes move: every device gets what it holds */
    if (d < 0) d = 0;
    lval wv;
    if (x->kind == LV_WIN) wv = *x;
    else if (!win_of_term(c, x, (uint32_t)d, s->comp->instrs[in->operands[0]].shape.dims[d], &wv)) wv.kind = LV_UNKNOWN;
    if (wv.kind != LV_WIN || wv.win->len != in->shape.dims[wv.win->dim]) {
        lf_unsupported(c, s->comp, in, "%s: its operand's pieces are too many to follow per device, or its shape disagrees",
                    in->name);
        return unknown();
    }
    if (moved & view_axes_used(&wv.v)) {
        strbuf b;
        sb_init(&b);
        lf_axes_words(&b, c, moved & view_axes_used(&wv.v));
        lf_unsupported(c, s->comp, in, "%s moves data between devices that hold different blocks (mesh axes %s) of "
                    "another dimension", in->name, b.s);
        sb_free(&b);
        return unknown();
    }
    const lift_win *w = wv.win;
    lift_win *nw = win_new(c, NULL, w->dim, w->len);
    nw->from = in;  /* data moved here: the pieces begin again */
    nw->from_comp = s->comp;
    for (int64_t t = 0; t < c->ndev; t++)
        for (int64_t l = 0; l < w->len; l++) nw->idx[t * w->len + l] = from[t] < 0 ? -1 : w->idx[from[t] * w->len + l];
    wv.win = nw;
    return win_settle(c, wv);
}

/* ---- Row-wise computation on windows ----
 * Microbatches of a batch-sharded array (gradient accumulation, unrolled):
 * a local slice of a sharded dim is a window over the term (device r holds
 * its rows idx[r·len + l]). An op that computes row by row computes, on
 * those rows, the same rows of the op over the whole term: an elementwise op
 * whose other operands are windows with the same rows or replicated values
 * broadcast along the rows (then the same broadcast at the term's extent),
 * a dot that keeps the rows (the other operand replicated), a reduce over
 * other dims. The result is a window of the op's term, the same rows. A sum
 * over the rows (a reduce, a dot contracting both operands' rows) is a
 * summed window: device r holds Σ_l g(idx[r·len + l]), where g(i) is row i's
 * share and Σ_i g(i) over all rows is the term. Summed windows of the same g
 * (the same operands and dims summed) add up, their rows joined; when the
 * devices that differ hold every row exactly once, the value is a partial
 * sum of the term over the mesh axes they differ along. Rows a permute left
 * empty (idx -1: zeros) are not computed with here. */

static bool win_full(const lift_ctx *c, const lift_win *w) {
    if (w->summed) return false;
    for (int64_t k = 0; k < c->ndev * w->len; k++)
        if (w->idx[k] < 0) return false;
    return true;
}

static bool same_rows(const lift_ctx *c, const lift_win *a, const lift_win *b) {
    return a->len == b->len && memcmp(a->idx, b->idx, (size_t)(c->ndev * a->len) * sizeof *a->idx) == 0;
}

/* Operand o of s, a replicated value broadcast along local dim d (the
 * window's) from a replicated operand: the same broadcast at extent `ext`
 * along d, in *out. */
static bool bcast_along(lstate *s, uint32_t o, uint32_t d, int64_t ext, eid *out) {
    lift_ctx *c = s->c;
    const lval *x = &s->ops[o];
    const hlo_instr *bi = &s->comp->instrs[s->in->operands[o]];
    if (x->kind != LV_TERM || !view_is_dup(&x->v) || x->zm || bi->op != OP_BROADCAST || bi->noperands != 1 ||
        bi->shape.rank > VIEW_MAX_RANK || d >= bi->shape.rank)
        return false;
    uint32_t nd;
    const int64_t *bd = instr_ints(bi, A_DIMENSIONS, &nd);
    for (uint32_t k = 0; k < nd; k++)
        if (bd[k] == d) return false;
    const lval *src = &s->vals[bi->operands[0]];
    if (src->kind != LV_TERM || !view_is_dup(&src->v) || lf_scale_of(src) != 1) return false;
    /* The operand is that broadcast (no factor put into it since). */
    if (eg_find(c->g, lf_node(c, c->cur, bi, &src->cls, 1, bi->shape.dims, c->origin)) != eg_find(c->g, x->cls)) return false;
    int64_t dims[VIEW_MAX_RANK];
    memcpy(dims, bi->shape.dims, bi->shape.rank * sizeof *dims);
    dims[d] = ext;
    *out = lf_node(c, c->cur, bi, &src->cls, 1, dims, c->origin);
    return true;
}

/* The local dims of `in` with dim d at extent ext (d ≥ rank: none). */
static void dims_at(const hlo_instr *in, uint32_t d, int64_t ext, int64_t *dims) {
    memcpy(dims, in->shape.dims, in->shape.rank * sizeof *dims);
    if (d < in->shape.rank) dims[d] = ext;
}

/* Window w's rows as a + b·p(r, l) (b ≥ 1) for positions p given by pos:
 * pos[r·len + l] = (idx − a) / b; false when no such a, b. With pos already
 * set (not -1), they must agree with it. */
static bool affine_rows(const lift_ctx *c, const lift_win *w, int64_t *pos, int64_t *a, int64_t *b) {
    int64_t n = c->ndev * w->len, lo = INT64_MAX, g = 0;
    for (int64_t k = 0; k < n; k++) {
        if (w->idx[k] < 0) return false;
        if (w->idx[k] < lo) lo = w->idx[k];
    }
    for (int64_t k = 0; k < n; k++) { /* the stride: gcd of the distances to the least row */
        int64_t d = w->idx[k] - lo;
        while (d) {
            int64_t t = g % d;
            g = d, d = t;
        }
    }
    *a = lo, *b = g ? g : 1;
    for (int64_t k = 0; k < n; k++) {
        int64_t p = (w->idx[k] - lo) / *b;
        if (pos[k] >= 0 && pos[k] != p) return false;
        pos[k] = p;
    }
    return true;
}

/* An elementwise op over windows of the same length whose rows differ but
 * are each a + b·p of one position p per device and element (an associative
 * scan's odd and even rows, x[1::2] · x[0::2]): the op over the strided
 * slices of the terms, as a window at positions p. */
static bool strided_elementwise(lstate *s, lval *out) {
    lift_ctx *c = s->c;
    const hlo_instr *in = s->in;
    uint32_t n = in->noperands, rank = in->shape.rank, w0 = n;
    if (n > 8 || rank > VIEW_MAX_RANK) return false;
    for (uint32_t o = 0; o < n && w0 == n; o++)
        if (s->ops[o].kind == LV_WIN) w0 = o;
    if (w0 == n) return false;
    const lval *x = &s->ops[w0];
    const lift_win *w = x->win;
    if (w->summed || !view_is_dup(&x->v) || w->dim >= rank || (int64_t)w->len * c->ndev > LIFT_WIN_MAX) return false;
    /* a term sharded along the window's dim alone: the window of its blocks */
    lval ops[8];
    for (uint32_t o = 0; o < n; o++) {
        ops[o] = s->ops[o];
        view rest = ops[o].v;
        if (ops[o].kind == LV_TERM && !ops[o].v.partial && w->dim < rest.rank && rest.dims[w->dim].naxes) {
            rest.dims[w->dim] = (view_dim){0};
            if (!view_is_dup(&rest) || !win_of_term(c, &s->ops[o], w->dim, in->shape.dims[w->dim], &ops[o])) return false;
        }
    }
    int64_t *pos = arena_alloc(c->a, (size_t)(c->ndev * w->len) * sizeof *pos), a[8], b[8], N = INT64_MAX, maxp = 0;
    for (int64_t k = 0; k < c->ndev * w->len; k++) pos[k] = -1;
    for (uint32_t o = 0; o < n; o++) {
        const lval *y = &ops[o];
        if (y->kind != LV_WIN) continue;
        uint32_t yr;
        const int64_t *yd = term_dims(c, y->cls, &yr);
        if (y->win->summed || y->win->dim != w->dim || y->win->len != w->len || !view_equal(&y->v, &x->v) || y->zm ||
            yr != rank || !affine_rows(c, y->win, pos, &a[o], &b[o]))
            return false;
        int64_t len = (yd[w->dim] - a[o] - 1) / b[o] + 1; /* the strided slice's rows */
        if (len < N) N = len;
    }
    for (int64_t k = 0; k < c->ndev * w->len; k++)
        if (pos[k] > maxp) maxp = pos[k];
    if (N < 1 || maxp >= N) return false;
    eid ch[8];
    bool assumed = false;
    for (uint32_t o = 0; o < n; o++) {
        const lval *y = &ops[o];
        if (y->kind != LV_WIN) {
            if (!bcast_along(s, o, w->dim, N, &ch[o])) return false;
            continue;
        }
        uint32_t yr;
        const int64_t *yd = term_dims(c, y->cls, &yr);
        int64_t sl[3 * VIEW_MAX_RANK];
        for (uint32_t k = 0; k < rank; k++) sl[3 * k] = 0, sl[3 * k + 1] = yd[k], sl[3 * k + 2] = 1;
        /* the limit as x[a::b] writes it (the dim's end) when that gives N rows */
        int64_t end = (yd[w->dim] - a[o] + b[o] - 1) / b[o] == N ? yd[w->dim] : a[o] + (N - 1) * b[o] + 1;
        sl[3 * w->dim] = a[o], sl[3 * w->dim + 1] = end, sl[3 * w->dim + 2] = b[o];
        ch[o] = lf_mk_slice(c, y->cls, sl);
        assumed |= y->assumed;
    }
    int64_t dims[VIEW_MAX_RANK];
    dims_at(in, w->dim, N, dims);
    lift_win *nw = win_new(c, w, w->dim, w->len);
    memcpy(nw->idx, pos, (size_t)(c->ndev * w->len) * sizeof *pos);
    *out = *x;
    out->cls = lf_node(c, c->cur, in, ch, n, dims, c->origin);
    out->win = nw;
    out->assumed = assumed;
    out->konst = false;
    out->zm = NULL;
    *out = win_settle(c, *out);
    return true;
}

static bool rows_elementwise(lstate *s, lval *out) {
    lift_ctx *c = s->c;
    const hlo_instr *in = s->in;
    uint32_t n = in->noperands, w0 = n;
    if (n > 8 || in->shape.rank > VIEW_MAX_RANK) return false;
    for (uint32_t o = 0; o < n && w0 == n; o++)
        if (s->ops[o].kind == LV_WIN) w0 = o;
    if (w0 == n) return false;
    const lval *x = &s->ops[w0];
    const lift_win *w = x->win;
    uint32_t rank;
    const int64_t *td = term_dims(c, x->cls, &rank);
    if (!win_full(c, w) || !view_is_dup(&x->v) || rank != in->shape.rank || w->dim >= rank) return false;
    eid ch[8];
    bool assumed = false;
    for (uint32_t o = 0; o < n; o++) {
        const lval *y = &s->ops[o];
        if (y->kind == LV_WIN) {
            uint32_t yr;
            const int64_t *yd = term_dims(c, y->cls, &yr);
            if (y->win->summed || y->win->dim != w->dim || !same_rows(c, y->win, w) || !view_equal(&y->v, &x->v) || y->zm ||
                yr != rank || memcmp(yd, td, rank * sizeof *td) != 0)
                return false;
            ch[o] = y->cls;
            assumed |= y->assumed;
        } else if (!bcast_along(s, o, w->dim, td[w->dim], &ch[o])) {
            return false;
        }
    }
    int64_t dims[VIEW_MAX_RANK];
    dims_at(in, w->dim, td[w->dim], dims);
    *out = *x;
    out->cls = lf_node(c, c->cur, in, ch, n, dims, c->origin);
    out->assumed = assumed;
    out->konst = false;
    out->zm = NULL;
    return true;
}

/* A summed window of term t (the sum over all rows), rows as w's. */
static lval summed_of(lift_ctx *c, const lval *like, const lift_win *w, eid t, int64_t total, eid k0, eid k1,
                      uint32_t kd, uint32_t rank) {
    lift_win *nw = win_new(c, w, 0, w->len);
    memcpy(nw->idx, w->idx, (size_t)(c->ndev * w->len) * sizeof *nw->idx);
    nw->summed = true;
    nw->total = total;
    nw->key[0] = eg_find(c->g, k0);
    nw->key[1] = k1 == EID_NONE ? EID_NONE : eg_find(c->g, k1);
    nw->key_dims = kd;
    lval v = *like;
    v.kind = LV_WIN;
    v.win = nw;
    v.cls = t;
    v.v = view_dup(rank);
    v.konst = false;
    v.zm = NULL;
    return v;
}

/* The result of `in` over children ch (global dims `dims`) as a window
 * with x's rows along result dim d, every other dim replicated. */
static lval rows_at(lstate *s, const lval *x, uint32_t d, const eid *ch, uint32_t n, const int64_t *dims) {
    lift_ctx *c = s->c;
    lift_win *nw = win_new(c, x->win, d, x->win->len);
    memcpy(nw->idx, x->win->idx, (size_t)(c->ndev * nw->len) * sizeof *nw->idx);
    lval out = *x;
    out.win = nw;
    out.v = view_dup(s->in->shape.rank);
    out.cls = lf_node(c, c->cur, s->in, ch, n, dims, c->origin);
    return out;
}

/* Whether operand 1 of a reduce is its sum's 0. */
static bool zero_init(lstate *s) {
    return s->ops[1].kind == LV_TERM && lf_class_is_zero(s->c, s->ops[1].cls);
}

/* The view of a dot without batch dims whose contracted dims are whole on
 * both sides: lhs free dims in order, then rhs free dims, as its operands
 * shard them. */
static bool dot_free_view(const hlo_instr *in, const hlo_instr *ai, const hlo_instr *bi, const view *av, const view *bv,
                          const int64_t *lc, const int64_t *rc, uint32_t nc, view *out) {
    *out = view_dup(in->shape.rank);
    uint32_t q = 0;
    for (uint32_t o = 0; o < 2; o++) {
        const view *z = o ? bv : av;
        const hlo_instr *zi = o ? bi : ai;
        const int64_t *zc = o ? rc : lc;
        for (uint32_t k = 0; k < zi->shape.rank; k++) {
            bool contracted = false;
            for (uint32_t m = 0; m < nc; m++) contracted |= zc[m] == k;
            if (contracted) continue;
            if (q >= in->shape.rank) return false;
            out->dims[q++] = z->dims[k];
        }
    }
    return q == in->shape.rank;
}

static bool rows_dot(lstate *s, lval *out) {
    lift_ctx *c = s->c;
    const hlo_instr *in = s->in;
    const lval *a = &s->ops[0], *b = &s->ops[1];
    uint32_t nlb, nlc, nrb, nrc;
    const int64_t *lc = instr_ints(in, A_LHS_CONTRACTING_DIMS, &nlc), *rc = instr_ints(in, A_RHS_CONTRACTING_DIMS, &nrc);
    instr_ints(in, A_LHS_BATCH_DIMS, &nlb);
    instr_ints(in, A_RHS_BATCH_DIMS, &nrb);
    if (in->noperands != 2 || nlb || nrb || nlc != nrc || in->shape.rank > VIEW_MAX_RANK) return false;
    const hlo_instr *ai = &s->comp->instrs[in->operands[0]], *bi = &s->comp->instrs[in->operands[1]];
    /* A window contracted with a term sharded along the partner dim: the
     * term's blocks as a window too (a ring's chunk against the local block). */
    lval as_win;
    for (uint32_t o = 0; o < 2 && (a->kind == LV_WIN) != (b->kind == LV_WIN); o++) {
        const lval *w = o ? b : a, *t = o ? a : b;
        const int64_t *wc = o ? rc : lc, *tc = o ? lc : rc;
        const hlo_instr *ti = o ? ai : bi;
        if (w->kind != LV_WIN || t->kind != LV_TERM || w->win->summed) continue;
        for (uint32_t k = 0; k < nlc; k++)
            if (wc[k] == w->win->dim && tc[k] >= 0 && tc[k] < ti->shape.rank && t->v.rank == ti->shape.rank &&
                t->v.dims[tc[k]].naxes && win_of_term(c, t, (uint32_t)tc[k], ti->shape.dims[tc[k]], &as_win)) {
                if (o) a = &as_win;
                else b = &as_win;
                break;
            }
    }
    eid ch[2] = {a->cls, b->cls};
    if (a->kind == LV_WIN && b->kind == LV_WIN) {
        /* Both operands' rows contracted with each other: a sum over rows. */
        const lift_win *w = a->win;
        if (!win_full(c, w) || !win_full(c, b->win) || !same_rows(c, w, b->win) || a->v.partial || b->v.partial ||
            a->v.rank != ai->shape.rank || b->v.rank != bi->shape.rank)
            return false;
        uint32_t k = 0;
        while (k < nlc && !(lc[k] == w->dim && rc[k] == b->win->dim)) k++;
        if (k == nlc) return false;
        for (uint32_t q = 0; q < nlc; q++)
            if (a->v.dims[lc[q]].naxes || b->v.dims[rc[q]].naxes) return false;
        view rv;
        if (!dot_free_view(in, ai, bi, &a->v, &b->v, lc, rc, nlc, &rv)) return false;
        uint32_t ra, rb;
        const int64_t *ta = term_dims(c, a->cls, &ra), *tb = term_dims(c, b->cls, &rb);
        if (ta[w->dim] != tb[b->win->dim]) return false;
        int64_t total = ta[w->dim];  /* before a node may move the types' storage */
        int64_t gd[VIEW_MAX_RANK];
        lf_global_dims(c, &rv, &in->shape, gd);
        eid t = lf_node(c, c->cur, in, ch, 2, gd, c->origin);
        *out = summed_of(c, a, w, t, total, a->cls, b->cls, 1u << 31 | w->dim << 8 | b->win->dim, in->shape.rank);
        out->v = rv;
        out->assumed = a->assumed || b->assumed;
        return true;
    }
    /* One operand's rows kept (not contracted), the other a term; either
     * may be sharded along its free dims (a weight's columns), never along
     * a contracted one. */
    uint32_t side = a->kind == LV_WIN ? 0 : 1;
    const lval *x = side ? b : a, *y = side ? a : b;
    const hlo_instr *xi = side ? bi : ai;
    const int64_t *xc = side ? rc : lc;
    if (x->kind != LV_WIN || y->kind != LV_TERM || y->v.partial || y->zm || !win_full(c, x->win) || x->v.partial ||
        x->v.rank != xi->shape.rank || y->v.rank != (side ? ai : bi)->shape.rank)
        return false;
    uint32_t d = x->win->dim, pos = 0;
    for (uint32_t k = 0; k < nlc; k++)
        if (xc[k] == d || x->v.dims[xc[k]].naxes || y->v.dims[(side ? lc : rc)[k]].naxes) return false;
    /* Result dims: lhs free dims in order, then rhs free dims. */
    if (side) pos = ai->shape.rank - nlc;
    for (uint32_t k = 0; k < d; k++) {
        bool contracted = false;
        for (uint32_t q = 0; q < nlc; q++) contracted |= xc[q] == k;
        pos += !contracted;
    }
    uint32_t rank;
    const int64_t *td = term_dims(c, x->cls, &rank);
    if (pos >= in->shape.rank || xi->shape.rank != rank) return false;
    int64_t dims[VIEW_MAX_RANK];
    view rv;
    if (!dot_free_view(in, ai, bi, side ? &y->v : &x->v, side ? &x->v : &y->v, lc, rc, nlc, &rv)) return false;
    /* the term at the global extent of every sharded result dim */
    lf_global_dims(c, &rv, &in->shape, dims);
    dims[pos] = td[d];
    *out = rows_at(s, x, pos, ch, 2, dims);
    out->v = rv;
    out->assumed = a->assumed || b->assumed;
    return true;
}

/* reduce (a sum from 0) of a window: over other dims a window of the
 * reduced term; over its rows too, a summed window. */
static bool rows_reduce(lstate *s, lval *out) {
    lift_ctx *c = s->c;
    const hlo_instr *in = s->in;
    const lval *x = &s->ops[0];
    if (in->noperands != 2 || x->kind != LV_WIN || !win_full(c, x->win) || !view_is_dup(&x->v) ||
        instr_reducer(c->cur, in) != RED_SUM || in->shape.rank > VIEW_MAX_RANK)
        return false;
    if (!zero_init(s)) return false;
    uint32_t nd, rank;
    const int64_t *rd = instr_ints(in, A_DIMENSIONS, &nd);
    const int64_t *td = term_dims(c, x->cls, &rank);
    uint32_t d = x->win->dim, below = 0, mask = 0;
    bool rows = false;
    for (uint32_t k = 0; k < nd; k++) {
        if (rd[k] < 0 || rd[k] >= 32) return false;
        mask |= 1u << rd[k];
        rows |= rd[k] == d;
        below += rd[k] < d;
    }
    eid ch[2] = {x->cls, s->ops[1].cls};
    if (rows) {
        eid t = lf_node(c, c->cur, in, ch, 2, in->shape.dims, c->origin);
        *out = summed_of(c, x, x->win, t, td[d], x->cls, EID_NONE, mask, in->shape.rank);
        return true;
    }
    int64_t dims[VIEW_MAX_RANK];
    dims_at(in, d - below, td[d], dims);
    *out = rows_at(s, x, d - below, ch, 2, dims);
    return true;
}

/* The mesh axes along which a window's rows differ. */
static uint32_t win_axes(const lift_ctx *c, const lift_win *w) {
    uint32_t mask = 0;
    int64_t stride = 1;
    for (int a = (int)c->mesh->naxes - 1; a >= 0; a--) {
        for (int64_t r = 0; r < c->ndev && !(mask >> a & 1); r++) {
            int64_t r0 = r - mesh_coord(c->mesh, r, a) * stride;
            if (memcmp(w->idx + r * w->len, w->idx + r0 * w->len, (size_t)w->len * sizeof *w->idx)) mask |= 1u << a;
        }
        stride *= c->mesh->sizes[a];
    }
    return mask;
}

/* A summed window whose devices that differ hold every row exactly once: a
 * partial sum of its term over the axes they differ along. */
static lval summed_settle(lift_ctx *c, lval x) {
    const lift_win *w = x.win;
    uint32_t mask = win_axes(c, w);
    if (w->total < 1 || w->total > LIFT_WIN_MAX) return x;
    uint8_t *seen = calloc((size_t)w->total, 1);
    bool once = true;
    /* Every device summing every row once (in its own order: a ring's
     * steps): the whole sum everywhere. */
    bool each = w->len == w->total;
    for (int64_t r = 0; r < c->ndev && each; r++) {
        memset(seen, 0, (size_t)w->total);
        for (int64_t l = 0; l < w->len && each; l++) {
            int64_t e = w->idx[r * w->len + l];
            each = e >= 0 && e < w->total && !seen[e];
            if (each) seen[e] = 1;
        }
    }
    if (each) {
        free(seen);
        x.kind = LV_TERM;
        x.win = NULL;
        return x;
    }
    memset(seen, 0, (size_t)w->total);
    int64_t count = 0;
    /* Devices along the other axes hold the same rows: the group of device
     * 0 (every other coordinate 0) says it for all. */
    for (int64_t r = 0; r < c->ndev && once; r++) {
        bool in_group = true;
        for (uint32_t a = 0; a < c->mesh->naxes; a++)
            if (!(mask >> a & 1) && mesh_coord(c->mesh, r, (int)a) != 0) in_group = false;
        for (int64_t l = 0; in_group && l < w->len && once; l++) {
            int64_t e = w->idx[r * w->len + l];
            once = e >= 0 && e < w->total && !seen[e];
            if (once) seen[e] = 1, count++;
        }
    }
    free(seen);
    if (!once || count != w->total) return x;
    lval out = x;
    out.kind = LV_TERM;
    out.win = NULL;
    if (mask) out.v.partial = (uint8_t)mask, out.v.red = RED_SUM;
    return out;
}

/* A summed window through a reshape (a reduce of unit dims is one), or two
 * of the same g added. */
static bool summed_instr(lstate *s, lval *out) {
    lift_ctx *c = s->c;
    const hlo_instr *in = s->in;
    if (in->op == OP_ADD && in->noperands == 2)  /* zero + a summed window (an accumulator's first step) */
        for (int o = 0; o < 2; o++) {
            const lval *w = &s->ops[o], *z = &s->ops[1 - o];
            if (w->kind == LV_WIN && w->win->summed && z->kind == LV_TERM && !z->assumed && !z->v.partial &&
                lf_class_is_zero(c, z->cls)) {
                *out = *w;
                return true;
            }
        }
    const lval *x = &s->ops[0];
    if (x->kind != LV_WIN || !x->win->summed || in->shape.rank > VIEW_MAX_RANK) return false;
    if ((in->op == OP_RESHAPE || in->op == OP_BITCAST || in->op == OP_TRANSPOSE) && in->noperands == 1 &&
        in->shape.dtype == s->comp->instrs[in->operands[0]].shape.dtype) {
        *out = *x;
        out->cls = lf_node(c, c->cur, in, &x->cls, 1, in->shape.dims, c->origin);
        out->v = view_dup(in->shape.rank);
        return true;
    }
    if (in->op == OP_REDUCE && in->noperands == 2 && instr_reducer(c->cur, in) == RED_SUM) {
        const hlo_instr *src = &s->comp->instrs[in->operands[0]];
        uint32_t nd;
        const int64_t *rd = instr_ints(in, A_DIMENSIONS, &nd);
        for (uint32_t k = 0; k < nd; k++)
            if (rd[k] < 0 || rd[k] >= src->shape.rank || src->shape.dims[rd[k]] != 1) return false;
        if (!zero_init(s)) return false;
        eid ch[2] = {x->cls, s->ops[1].cls};
        *out = *x;
        out->cls = lf_node(c, c->cur, in, ch, 2, in->shape.dims, c->origin);
        out->v = view_dup(in->shape.rank);
        return true;
    }
    const lval *y = &s->ops[1];
    if (in->op != OP_ADD || in->noperands != 2 || y->kind != LV_WIN || !y->win->summed) return false;
    const lift_win *a = x->win, *b = y->win;
    if (a->total != b->total || a->key[0] != b->key[0] || a->key[1] != b->key[1] || a->key_dims != b->key_dims ||
        eg_find(c->g, x->cls) != eg_find(c->g, y->cls) || !view_equal(&x->v, &y->v) ||
        a->len + b->len > LIFT_WIN_MAX / c->ndev)
        return false;
    lift_win *nw = win_new(c, a, 0, a->len + b->len);
    for (int64_t r = 0; r < c->ndev; r++) {
        memcpy(nw->idx + r * nw->len, a->idx + r * a->len, (size_t)a->len * sizeof *nw->idx);
        memcpy(nw->idx + r * nw->len + a->len, b->idx + r * b->len, (size_t)b->len * sizeof *nw->idx);
    }
    nw->summed = true;
    nw->total = a->total;
    memcpy(nw->key, a->key, sizeof nw->key);
    nw->key_dims = a->key_dims;
    *out = *x;
    out->win = nw;
    out->assumed = x->assumed || y->assumed;
    *out = summed_settle(c, *out);
    return true;
}

/* transpose of a window: its rows move to the dim they land in. */
static bool rows_transpose(lstate *s, lval *out) {
    lift_ctx *c = s->c;
    const hlo_instr *in = s->in;
    const lval *x = &s->ops[0];
    uint32_t np, rank;
    const int64_t *perm = instr_ints(in, A_DIMENSIONS, &np);
    if (in->noperands != 1 || x->kind != LV_WIN || !win_full(c, x->win) || !view_is_dup(&x->v) ||
        np != in->shape.rank || in->shape.rank > VIEW_MAX_RANK)
        return false;
    const int64_t *td = term_dims(c, x->cls, &rank);
    uint32_t j = 0;
    while (j < np && perm[j] != x->win->dim) j++;
    if (j == np || rank != np) return false;
    int64_t dims[VIEW_MAX_RANK];
    dims_at(in, j, td[x->win->dim], dims);
    *out = rows_at(s, x, j, &x->cls, 1, dims);
    return true;
}

/* ---- reduce-window ----
 * A window op reduces, for each output element, the elements of a box of
 * its operand (init ⊕ the box). Along a dim no mesh axis cuts, every device
 * holds the whole extent and computes the same boxes as the baseline. Along
 * a sharded dim, a device computes the baseline's boxes exactly when no box
 * crosses a block boundary: no padding or dilation, size ≤ stride and the
 * local extent a multiple of the stride (pooling whose windows tile the
 * blocks). On a partial value: a box sum is linear (partial(sum) stays
 * partial(sum) when init is 0, which each device would add once more); a
 * box max of a partial(max) is a partial(max) (max is idempotent, so a
 * device's init or padding counts once); nothing else. */


bool lf_read_window(const hlo_instr *in, uint32_t rank, win_attr *w) {
    const hlo_attr *wa = instr_attr(in, A_WINDOW);
    if (!wa || rank > VIEW_MAX_RANK || !interp_window(wa->v.str, rank, w->size, w->stride, w->pad, w->ld, w->rd))
        return false;
    for (uint32_t d = 0; d < rank; d++)
        if (w->size[d] < 1 || w->stride[d] < 1 || w->ld[d] < 1 || w->rd[d] < 1) return false;
    return true;
}

/* Whether a reduce-window with reducer red and init operand `init` keeps a
 * value of view v (its factor `scale`) what the view says, reduced alike. */
static bool window_keeps(lstate *s, const view *v, double scale, int red) {
    bool zero = zero_init(s);
    if (v->partial) {
        if (v->red == RED_SUM) return red == RED_SUM && zero;
        if (v->red == RED_MAX || v->red == RED_MIN) return red == v->red && scale == 1;
        return false;
    }
    return scale == 1 || (red == RED_SUM && zero);
}

static bool term_reduce_window(lstate *s, lval *out) {
    lift_ctx *c = s->c;
    const hlo_instr *in = s->in;
    const lval *x = &s->ops[0], *init = &s->ops[1];
    const hlo_instr *src = &s->comp->instrs[in->operands[0]];
    uint32_t rank = in->shape.rank;
    win_attr w;
    if (x->kind != LV_TERM || x->diff || init->kind != LV_TERM || !view_is_dup(&init->v) || init->v.partial ||
        src->shape.rank != rank || x->v.rank != rank || !lf_read_window(in, rank, &w))
        return false;
    if (view_is_dup(&x->v) && !x->v.partial) return false;  /* the op itself, as for any replicated operands */
    int red = instr_reducer(c->cur, in);
    if (!window_keeps(s, &x->v, lf_scale_of(x), red)) {
        /* The max (min) of a partial sum's shares is not the max of the sum
         * (a max pool before the psum), as for a reduce (lift_reduce.c). */
        if (x->v.partial && x->v.red == RED_SUM && (red == RED_MAX || red == RED_MIN) && !x->assumed && !x->ambiguous &&
            !x->partial_unsure) {
            lf_finding(c, KIND_MISSING_ALL_REDUCE, s->comp, in, "reduce-window-%s of a value that is still partial (sum) "
                       "over a mesh axis", reducer_name(red));
            *out = unknown();
            return true;
        }
        return false;
    }
    for (uint32_t d = 0; d < rank; d++) {
        if (!x->v.dims[d].naxes) continue;
        if (w.pad[2 * d] || w.pad[2 * d + 1] || w.ld[d] != 1 || w.rd[d] != 1 || w.size[d] > w.stride[d] ||
            src->shape.dims[d] % w.stride[d] || in->shape.dims[d] != src->shape.dims[d] / w.stride[d])
            return false;
    }
    *out = lf_with_scalar(s, x, init);
    return true;
}

/* select-and-scatter (a max pool's gradient: each window's source value
 * added at the position its select picks) over an operand sharded along
 * dims whose windows stay inside the blocks, as term_reduce_window's (no
 * padding or dilation, size ≤ stride, the local extent a multiple of the
 * stride), the source sharded alike along the windows' dims: every device
 * scatters its own windows, the block of the global op. */
static bool select_and_scatter_blocks(lstate *s, lval *out) {
    lift_ctx *c = s->c;
    const hlo_instr *in = s->in;
    const lval *x = &s->ops[0], *y = &s->ops[1], *init = &s->ops[2];
    const hlo_instr *src = &s->comp->instrs[in->operands[0]], *yi = &s->comp->instrs[in->operands[1]];
    uint32_t rank = in->shape.rank;
    win_attr w;
    if (in->noperands != 3 || x->kind != LV_TERM || y->kind != LV_TERM || init->kind != LV_TERM || x->diff || y->diff ||
        x->v.partial || y->v.partial || init->v.partial || !view_is_dup(&init->v) || lf_scale_of(x) != 1 ||
        lf_scale_of(y) != 1 || src->shape.rank != rank || yi->shape.rank != rank || x->v.rank != rank ||
        y->v.rank != rank || !lf_read_window(in, rank, &w))
        return false;
    for (uint32_t d = 0; d < rank; d++) {
        if (!lf_same_dim(&x->v.dims[d], &y->v.dims[d])) return false;
        if (!x->v.dims[d].naxes) continue;
        if (w.pad[2 * d] || w.pad[2 * d + 1] || w.ld[d] != 1 || w.rd[d] != 1 || w.size[d] > w.stride[d] ||
            src->shape.dims[d] % w.stride[d] || yi->shape.dims[d] != src->shape.dims[d] / w.stride[d])
            return false;
    }
    int64_t dims[VIEW_MAX_RANK];
    lf_global_dims(c, &x->v, &in->shape, dims);
    eid ch[3] = {x->cls, y->cls, init->cls};
    *out = term(lf_node(c, c->cur, in, ch, 3, dims, c->origin), x->v, x->assumed || y->assumed || init->assumed);
    return true;
}

static bool same_window(const win_attr *a, const win_attr *b, uint32_t rank) {
    for (uint32_t d = 0; d < rank; d++)
        if (a->size[d] != b->size[d] || a->stride[d] != b->stride[d] || a->pad[2 * d] != b->pad[2 * d] ||
            a->pad[2 * d + 1] != b->pad[2 * d + 1] || a->ld[d] != b->ld[d] || a->rd[d] != b->rd[d])
            return false;
    return true;
}

/* The reduce-window over x (global dims xd, rank) with window w, init the
 * class init, as the baseline writes it when x is a pad by init's value that
 * w's padding can take instead (XLA pads a window with the init value: a
 * cumulative op is a reduce-window padded on one side); else `in` itself over
 * x. Global result dims in dims. */
static eid window_term(lstate *s, eid x, const int64_t *xd, uint32_t rank, const win_attr *w, eid init,
                       const int64_t *dims) {
    lift_ctx *c = s->c;
    eid ch[2] = {x, init};
    eid pn = lf_class_node(c, x, OP_PAD, 2, NULL);
    const hlo_attr *ta = instr_attr(s->in, A_TO_APPLY);
    if (pn != EID_NONE && ta && eg_find(c->g, eg_node_children(c->g, pn, &(uint32_t){0})[1]) == eg_find(c->g, init)) {
        uint32_t nw, pr;
        const int64_t *aw = eg_attr_words(c->g, eg_node_attr(c->g, pn), &nw);
        eid y = eg_node_children(c->g, pn, &(uint32_t){0})[0];
        const int64_t *yd = term_dims(c, y, &pr);
        bool ok = pr == rank && nw == 2 + 3 * rank && aw[0] == A_PADDING;
        win_attr f = *w;
        for (uint32_t d = 0; d < rank && ok; d++) {
            const int64_t *p = aw + 2 + 3 * d;
            ok = p[2] == 0 && p[0] >= 0 && p[1] >= 0 && yd[d] + p[0] + p[1] == xd[d] && (w->ld[d] == 1 || !(p[0] || p[1]));
            f.pad[2 * d] += p[0], f.pad[2 * d + 1] += p[1];
        }
        uint64_t red = ok ? lf_comp_digest(c, c->cur, (uint32_t)ta->v.ints[0]) : 0;
        for (uint32_t ci = 0; ok && ci < c->base->ncomps; ci++) {
            const hlo_comp *bc = &c->base->comps[ci];
            for (uint32_t i = 0; i < bc->ninstrs; i++) {
                const hlo_instr *bi = &bc->instrs[i];
                const hlo_attr *bt = instr_attr(bi, A_TO_APPLY);
                win_attr g;
                if (bi->op != OP_REDUCE_WINDOW || bi->noperands != 2 || bi->shape.rank != rank ||
                    bi->shape.dtype != s->in->shape.dtype || !bt || !lf_read_window(bi, rank, &g) ||
                    !same_window(&g, &f, rank) || lf_comp_digest(c, c->base, (uint32_t)bt->v.ints[0]) != red)
                    continue;
                eid by[2] = {y, init};
                return lf_node(c, c->base, bi, by, 2, dims, c->origin);
            }
        }
    }
    return lf_node(c, c->cur, s->in, ch, 2, dims, c->origin);
}

/* reduce-window of a window along its dim: where every device's rows are a
 * run s(r) .. s(r) + len - 1 of the term (no zeros a permute left) and the
 * boxes along the dim stay inside the piece (no padding or dilation there)
 * and start on the stride (s(r) a multiple of it), device r computes the
 * outputs s(r)/stride .. of the global reduce-window: a window of it. Every
 * other dim is whole, or sharded with boxes of one element. */
static bool rows_reduce_window(lstate *s, lval *out) {
    lift_ctx *c = s->c;
    if (s->ops[0].kind == LV_WIN) lf_uniform_dev_as_term(s, 1);  /* a constant init computed like a device value */
    const hlo_instr *in = s->in;
    const lval *x = &s->ops[0], *init = &s->ops[1];
    const hlo_instr *src = &s->comp->instrs[in->operands[0]];
    uint32_t rank = in->shape.rank, tr;
    win_attr w;
    lval xp;  /* a halo's edge zeros: rows of the zero-padded term (folded below when init is that zero) */
    if (x->kind == LV_WIN && !x->win->summed && !win_full(c, x->win) && lf_win_padded(c, x, false, &xp)) x = &xp;
    if (x->kind != LV_WIN || !win_full(c, x->win) || x->v.partial || init->kind != LV_TERM || !view_is_dup(&init->v) ||
        init->v.partial || init->assumed || lf_scale_of(x) != 1 || src->shape.rank != rank || !lf_read_window(in, rank, &w))
        return false;
    const lift_win *xw = x->win;
    uint32_t d = xw->dim;
    const int64_t *td = term_dims(c, x->cls, &tr);
    if (tr != rank || d >= rank || w.pad[2 * d] || w.pad[2 * d + 1] || w.ld[d] != 1) return false;
    int64_t dims[VIEW_MAX_RANK];
    for (uint32_t k = 0; k < rank; k++) {
        if (k == d) continue;
        if (x->v.dims[k].naxes &&
            (w.size[k] != 1 || w.stride[k] != 1 || w.pad[2 * k] || w.pad[2 * k + 1] || w.ld[k] != 1 || w.rd[k] != 1))
            return false;
        dims[k] = x->v.dims[k].naxes ? td[k] : in->shape.dims[k];
    }
    int64_t span = (w.size[d] - 1) * w.rd[d] + 1, st = w.stride[d], len = in->shape.dims[d];
    if (td[d] < span || xw->len < span || len != (xw->len - span) / st + 1 || len > LIFT_WIN_MAX / c->ndev) return false;
    dims[d] = (td[d] - span) / st + 1;
    lift_win *nw = win_new(c, xw, d, len);
    for (int64_t r = 0; r < c->ndev; r++) {
        const int64_t *e = xw->idx + r * xw->len;
        for (int64_t l = 1; l < xw->len; l++)
            if (e[l] != e[0] + l) return false;
        if (e[0] % st) return false;
        for (int64_t l = 0; l < len; l++) nw->idx[r * len + l] = e[0] / st + l;
    }
    lval v = *x;
    v.cls = window_term(s, x->cls, td, rank, &w, init->cls, dims);
    v.win = nw;
    v.assumed = x->assumed || init->assumed;
    v.konst = false;
    v.zm = NULL;
    *out = win_settle(c, v);
    return true;
}

/* The baseline's reduce-window of rank dims with window w, reducer digest
 * red, element type dt and result dims o, or NULL. */
static const hlo_instr *base_window(lift_ctx *c, int dt, uint32_t rank, const win_attr *w, uint64_t red, const int64_t *o) {
    for (uint32_t ci = 0; ci < c->base->ncomps; ci++) {
        const hlo_comp *bc = &c->base->comps[ci];
        for (uint32_t i = 0; i < bc->ninstrs; i++) {
            const hlo_instr *bi = &bc->instrs[i];
            const hlo_attr *bt = instr_attr(bi, A_TO_APPLY);
            win_attr g;
            if (bi->op == OP_REDUCE_WINDOW && bi->noperands == 2 && bi->shape.rank == rank && bi->shape.dtype == dt && bt &&
                lf_read_window(bi, rank, &g) && same_window(&g, w, rank) &&
                lf_comp_digest(c, c->base, (uint32_t)bt->v.ints[0]) == red &&
                (!o || !memcmp(bi->shape.dims, o, rank * sizeof *o)))
                return bi;
        }
    }
    return NULL;
}

/* Window w of rank dims as XLA prints it (each part after size only where
 * some dim differs from the default), in the lift arena. */
static const char *window_text(lift_ctx *c, const win_attr *w, uint32_t rank) {
    strbuf b;
    sb_init(&b);
    bool on[5] = {true, false, false, false, false};
    for (uint32_t d = 0; d < rank; d++) {
        on[1] |= w->stride[d] != 1;
        on[2] |= w->pad[2 * d] || w->pad[2 * d + 1];
        on[3] |= w->ld[d] != 1;
        on[4] |= w->rd[d] != 1;
    }
    static const char *const names[] = {"size", "stride", "pad", "lhs_dilate", "rhs_dilate"};
    sb_putc(&b, '{');
    for (int part = 0; part < 5; part++) {
        if (!on[part]) continue;
        sb_printf(&b, "%s%s=", part ? " " : "", names[part]);
        for (uint32_t d = 0; d < rank; d++) {
            const int64_t *v[] = {w->size, w->stride, NULL, w->ld, w->rd};
            if (d) sb_putc(&b, 'x');
            if (part == 2) sb_printf(&b, "%lld_%lld", (long long)w->pad[2 * d], (long long)w->pad[2 * d + 1]);
            else sb_printf(&b, "%lld", (long long)v[part][d]);
        }
    }
    sb_putc(&b, '}');
    const char *t = arena_memdup(c->a, b.s, b.len + 1);
    sb_free(&b);
    return t;
}

eid lf_window_node(lift_ctx *c, const hlo_instr *like, eid x, eid init, const win_attr *w, const int64_t *dims) {
    uint32_t rank;
    const hlo_attr *ta = instr_attr(like, A_TO_APPLY);
    int dt = eg_type_dtype(c->g, eg_class_type(c->g, x));
    eg_type_dims(c->g, eg_class_type(c->g, x), &rank);
    if (!ta || rank > VIEW_MAX_RANK) return EID_NONE;
    hlo_attr *at = arena_alloc(c->a, 2 * sizeof *at);
    at[0] = (hlo_attr){.key = A_WINDOW, .kind = K_RAW, .v.str = window_text(c, w, rank)};
    at[1] = *ta;
    hlo_instr g = {.name = "reduce-window", .opname = "reduce-window", .op = OP_REDUCE_WINDOW, .nattrs = 2, .noperands = 2,
                   .attrs = at};
    g.shape.dtype = (uint8_t)dt;
    g.shape.rank = rank;
    g.shape.dims = (int64_t *)dims;
    eid ch[2] = {x, init};
    return lf_node(c, c->cur, &g, ch, 2, dims, c->origin);
}

/* Whether window w takes one element at a time along dim k (size and
 * stride 1, no padding, no dilation). */
static bool unit_window(const win_attr *w, uint32_t k) {
    return w->size[k] == 1 && w->stride[k] == 1 && !w->pad[2 * k] && !w->pad[2 * k + 1] && w->ld[k] == 1 && w->rd[k] == 1;
}

/* A blockwise reduce-window of x along d (nb blocks of the operand's
 * length there), `blocked` merged back: noted for lf_scan_prefix when it is
 * a cumulative sum (window the whole block, padded on one side, every other
 * dim untouched) and the baseline has that sum over the whole dim. */
static void scan_noted(lstate *s, eid x, uint32_t d, const win_attr *w, eid init, eid blocked, int64_t nb, uint64_t red) {
    lift_ctx *c = s->c;
    const hlo_instr *in = s->in;
    uint32_t rank = in->shape.rank;
    int64_t n = s->comp->instrs[in->operands[0]].shape.dims[d];
    bool fwd = w->pad[2 * d] == n - 1 && !w->pad[2 * d + 1], back = !w->pad[2 * d] && w->pad[2 * d + 1] == n - 1;
    if (instr_reducer(c->cur, in) != RED_SUM || !zero_init(s) || w->size[d] != n || w->stride[d] != 1 || w->ld[d] != 1 ||
        w->rd[d] != 1 || !(fwd || back) || in->shape.dims[d] != n)
        return;
    for (uint32_t k = 0; k < rank; k++)
        if (k != d && !unit_window(w, k))
            return;
    win_attr g = *w;
    g.size[d] = nb * n;
    g.pad[2 * d] = fwd ? nb * n - 1 : 0;
    g.pad[2 * d + 1] = fwd ? 0 : nb * n - 1;
    uint32_t xr;
    const int64_t *xd = term_dims(c, x, &xr);
    const hlo_instr *bg = base_window(c, in->shape.dtype, rank, &g, red, xd);
    eid ch[2] = {x, init};
    eid gl = bg ? eg_lookup(c->g, OP_REDUCE_WINDOW, lf_encode_attrs(c, c->base, bg), lf_type_of(c, in->shape.dtype, xd, rank),
                            ch, 2)
                : EID_NONE;
    if (gl != EID_NONE) lf_scan_noted(c, in, x, d, nb, n, back, init, blocked, eg_find(c->g, gl));
}

/* reduce-window along a dim sharded in blocks of n, its windows inside each
 * device's block: per block, as a per-group cumsum over tokens a device
 * holds (an expert-parallel router's positions). Globally the term split
 * into [blocks, n] along that dim, reduced by the same window along n and
 * merged back, as the baseline writes it when it reduces groups (vmap);
 * else a term of its own (a cumsum's blocks, lift_scan.c). */
static bool segmented_reduce_window(lstate *s, lval *out) {
    lift_ctx *c = s->c;
    const hlo_instr *in = s->in;
    const lval *x = &s->ops[0], *init = &s->ops[1];
    const hlo_instr *src = &s->comp->instrs[in->operands[0]];
    const hlo_attr *ta = instr_attr(in, A_TO_APPLY);
    uint32_t rank = in->shape.rank, d = rank;
    win_attr w, g3;
    if (x->kind != LV_TERM || x->v.partial || x->assumed || lf_scale_of(x) != 1 || init->kind != LV_TERM ||
        !view_is_dup(&init->v) || init->assumed || !ta || src->shape.rank != rank || rank + 1 > VIEW_MAX_RANK ||
        !lf_read_window(in, rank, &w))
        return false;
    /* the one sharded dim the windows span (other sharded dims: windows of
     * one element, carried along as they are) */
    for (uint32_t k = 0; k < rank; k++)
        if (x->v.dims[k].naxes && !unit_window(&w, k)) {
            if (d < rank) return false;
            d = k;
        }
    if (d == rank) return false;
    int64_t n = src->shape.dims[d], m = in->shape.dims[d], parts = view_dim_parts(&x->v, c->mesh, d);
    uint32_t xr;
    const int64_t *xd = term_dims(c, x->cls, &xr);
    if (xr != rank) return false;
    /* the window over [.., blocks, n, ..]: one block at a time */
    int64_t d3[VIEW_MAX_RANK], o3[VIEW_MAX_RANK];
    for (uint32_t k = 0, q = 0; k <= rank; k++) {
        if (k == d) {
            d3[k] = parts, o3[k] = parts;
            g3.size[k] = g3.stride[k] = g3.ld[k] = g3.rd[k] = 1;
            g3.pad[2 * k] = g3.pad[2 * k + 1] = 0;
            continue;
        }
        d3[k] = q == d ? n : xd[q];
        o3[k] = q == d ? m : in->shape.dims[q];
        g3.size[k] = w.size[q], g3.stride[k] = w.stride[q], g3.ld[k] = w.ld[q], g3.rd[k] = w.rd[q];
        g3.pad[2 * k] = w.pad[2 * q], g3.pad[2 * k + 1] = w.pad[2 * q + 1];
        q++;
    }
    uint64_t red = lf_comp_digest(c, c->cur, (uint32_t)ta->v.ints[0]);
    const hlo_instr *bi = base_window(c, in->shape.dtype, rank + 1, &g3, red, o3);
    /* without such a reduce-window in the baseline, `in` over the blocks (a
     * term the baseline meets by a cumulative sum's decomposition:
     * scan_noted, lift_scan.c) */
    eid ch[2] = {lf_mk_reshape(c, x->cls, lf_type_of(c, src->shape.dtype, d3, rank + 1), c->origin), init->cls};
    eid r3 = bi ? lf_node(c, c->base, bi, ch, 2, o3, c->origin) : lf_window_node(c, in, ch[0], ch[1], &g3, o3);
    if (r3 == EID_NONE) return false;
    int64_t od[VIEW_MAX_RANK];
    lf_global_dims(c, &x->v, &in->shape, od);
    *out = term(lf_mk_reshape(c, r3, lf_type_of(c, in->shape.dtype, od, rank), c->origin), x->v, false);
    if (!bi) scan_noted(s, x->cls, d, &w, init->cls, out->cls, parts, red);
    return true;
}

/* The convolution (`in`'s attributes but the lhs window dim wd, its spatial
 * dim si) over the window's term x with kernel k: where x is a zero pad
 * along wd alone, the baseline's convolution of the unpadded value with that
 * padding taken into its window (a SAME convolution) when the baseline has
 * one; else `in` itself over x. Global result dims in dims. */
static eid conv_term(lstate *s, eid x, eid k, uint32_t wd, uint32_t si, uint32_t nsp, const win_attr *w, int64_t groups,
                     const int64_t *dims) {
    lift_ctx *c = s->c;
    eid ch[2] = {x, k};
    const eid *pk;
    eid pn = lf_class_node(c, x, OP_PAD, 2, &pk);
    const char *lab = instr_str(s->in, A_DIM_LABELS);
    uint32_t nw = 0, pr = 0;
    const int64_t *aw = pn != EID_NONE ? eg_attr_words(c->g, eg_node_attr(c->g, pn), &nw) : NULL;
    if (pn != EID_NONE) term_dims(c, pk[0], &pr);
    bool ok = aw && lab && lf_class_is_zero(c, pk[1]) && nw == 2 + 3 * pr && aw[0] == A_PADDING && wd < pr;
    for (uint32_t d = 0; ok && d < pr; d++) {
        const int64_t *p = aw + 2 + 3 * d;
        ok = p[2] == 0 && p[0] >= 0 && p[1] >= 0 && (d == wd || (p[0] == 0 && p[1] == 0));
    }
    win_attr f = *w;
    if (ok) f.pad[2 * si] += aw[2 + 3 * wd], f.pad[2 * si + 1] += aw[3 + 3 * wd];
    for (uint32_t ci = 0; ok && ci < c->base->ncomps; ci++) {
        const hlo_comp *bc = &c->base->comps[ci];
        for (uint32_t i = 0; i < bc->ninstrs; i++) {
            const hlo_instr *bi = &bc->instrs[i];
            const char *bl = instr_str(bi, A_DIM_LABELS);
            win_attr g;
            if (bi->op != OP_CONVOLUTION || bi->noperands != 2 || !bl || strcmp(bl, lab) != 0 ||
                bi->shape.dtype != s->in->shape.dtype || instr_int(bi, A_FEATURE_GROUP_COUNT, 1) != groups ||
                instr_int(bi, A_BATCH_GROUP_COUNT, 1) != 1 || !lf_read_window(bi, nsp, &g) || !same_window(&g, &f, nsp))
                continue;
            eid by[2] = {pk[0], k};
            return lf_node(c, c->base, bi, by, 2, dims, c->origin);
        }
    }
    /* `in`'s own attributes say the local group count */
    return groups == instr_int(s->in, A_FEATURE_GROUP_COUNT, 1) ? lf_node(c, c->cur, s->in, ch, 2, dims, c->origin) : EID_NONE;
}

/* x's first n rows along dim d: where x is a pad whose rows past n are
 * padding (a convolution whose last outputs no device keeps), the pad with
 * less padding at the end, also through a reshape that only inserts unit
 * dims; a slice otherwise. */
static eid trim_end(lift_ctx *c, eid x, uint32_t d, int64_t n, int depth) {
    uint32_t rank, yr, nw;
    const int64_t *xd = term_dims(c, x, &rank);
    if (rank > VIEW_MAX_RANK || d >= rank || n >= xd[d]) return eg_find(c->g, x);
    int64_t dims[VIEW_MAX_RANK], sl[3 * VIEW_MAX_RANK];
    memcpy(dims, xd, rank * sizeof *dims);
    for (uint32_t k = 0; k < rank; k++) sl[3 * k] = 0, sl[3 * k + 1] = xd[k], sl[3 * k + 2] = 1;
    sl[3 * d + 1] = n;
    int dt = eg_type_dtype(c->g, eg_class_type(c->g, x));
    const eid *ch;
    eid pn = depth < 4 ? lf_class_node(c, x, OP_PAD, 2, &ch) : EID_NONE;
    if (pn != EID_NONE) {
        const int64_t *pw = eg_attr_words(c->g, eg_node_attr(c->g, pn), &nw);
        const int64_t *yd = term_dims(c, ch[0], &yr);
        if (yr == rank && nw == 2 + 3 * rank && pw[0] == A_PADDING && pw[2 + 3 * d + 2] == 0 &&
            pw[2 + 3 * d] >= 0 && pw[2 + 3 * d] + yd[d] <= n) {
            int64_t words[3 * VIEW_MAX_RANK];
            memcpy(words, pw + 2, 3 * rank * sizeof *words);
            words[3 * d + 1] = n - pw[2 + 3 * d] - yd[d];
            dims[d] = n;
            eid kids[2] = {ch[0], ch[1]};
            hlo_attr at = {.key = A_PADDING, .kind = K_PADDING, .n = rank, .v.ints = words};
            hlo_instr g = {.name = "pad", .opname = "pad", .op = OP_PAD, .nattrs = 1, .noperands = 2, .attrs = &at};
            g.shape.dtype = (uint8_t)dt, g.shape.rank = rank, g.shape.dims = dims;
            return lf_node(c, c->cur, &g, kids, 2, dims, c->origin);
        }
    }
    eid rn = depth < 4 ? lf_class_node(c, x, OP_RESHAPE, 1, &ch) : EID_NONE;
    if (rn != EID_NONE) {
        eid y = ch[0];
        const int64_t *yd = term_dims(c, y, &yr);
        /* the operand's dims are x's without some unit dims */
        uint32_t i = 0, yd_at = UINT32_MAX;
        bool ok = yr <= VIEW_MAX_RANK;
        for (uint32_t k = 0; k < rank && ok; k++) {
            if (i < yr && yd[i] == xd[k] && (xd[k] != 1 || k == d)) {
                if (k == d) yd_at = i;
                i++;
            } else ok = xd[k] == 1;
        }
        if (ok && i == yr && yd_at != UINT32_MAX) {
            eid t = trim_end(c, y, yd_at, n, depth + 1);
            dims[d] = n;
            return lf_mk_reshape(c, t, lf_type_of(c, dt, dims, rank), c->origin);
        }
    }
    return lf_mk_slice(c, x, sl);
}

/* convolution of a window along one of its spatial dims with a kernel:
 * where device r's rows are a run of the term (zeros a permute left at the
 * edges read as the zero-padded term: a halo exchange) and the window along
 * that dim has no padding or input dilation, device r computes outputs
 * s(r)/st .. s(r)/st + len - 1 of the convolution over the term there (st
 * the stride, s(r) a multiple of it): a window of it, a block of the
 * baseline's SAME convolution once settled. The batch
 * dim keeps its view; the other spatial dims are whole; features are whole
 * with a replicated kernel (grouped or not), or, for a grouped (depthwise)
 * convolution, sharded alike on the input features and the kernel's output
 * features (each device its groups: the global group count is the local one
 * times the parts). */
static bool win_convolution(lstate *s, lval *out) {
    lift_ctx *c = s->c;
    const hlo_instr *in = s->in;
    const lval *x = &s->ops[0], *k = &s->ops[1];
    lval xp;
    if (in->noperands != 2 || x->kind != LV_WIN || x->win->summed || in->shape.rank > VIEW_MAX_RANK) return false;
    if (!win_full(c, x->win) && lf_win_padded(c, x, false, &xp)) x = &xp;
    if (!win_full(c, x->win) || x->v.partial || x->zm || lf_scale_of(x) != 1 || k->kind != LV_TERM || k->v.partial ||
        lf_scale_of(k) != 1 || k->v.rank != in->shape.rank || instr_int(in, A_BATCH_GROUP_COUNT, 1) != 1)
        return false;
    const char *lab = instr_str(in, A_DIM_LABELS), *u = lab ? strchr(lab, '_') : NULL, *ar = u ? strstr(u, "->") : NULL;
    int lb, lf, ri, ro, ob, of, ls[VIEW_MAX_RANK], rs[VIEW_MAX_RANK], os[VIEW_MAX_RANK];
    int nl = u ? lf_conv_roles(lab, (size_t)(u - lab), 'b', 'f', &lb, &lf, ls) : -1;
    int nr = ar ? lf_conv_roles(u + 1, (size_t)(ar - u - 1), 'i', 'o', &ri, &ro, rs) : -1;
    int no = ar ? lf_conv_roles(ar + 2, strlen(ar + 2), 'b', 'f', &ob, &of, os) : -1;
    if (nl < 1 || nl != nr || nl != no || (uint32_t)nl + 2 != in->shape.rank || x->v.rank != in->shape.rank) return false;
    const lift_win *w = x->win;
    int si = -1;
    for (int j = 0; j < nl; j++)
        if (ls[j] == (int)w->dim) si = j;
    win_attr wa;
    if (si < 0 || !lf_read_window(in, (uint32_t)nl, &wa) || wa.pad[2 * si] || wa.pad[2 * si + 1] || wa.stride[si] < 1 ||
        wa.ld[si] != 1 || wa.rd[si] < 1)
        return false;
    for (int j = 0; j < nl; j++)
        if (x->v.dims[ls[j]].naxes || k->v.dims[rs[j]].naxes) return false;
    int64_t groups = instr_int(in, A_FEATURE_GROUP_COUNT, 1);
    uint8_t partial = 0;
    bool split = x->v.dims[lf].naxes != 0; /* the groups spread over devices */
    if (groups == 1 && (split || k->v.dims[ri].naxes)) {
        /* input features sharded alike on both: each device's share of the sum */
        if (!lf_same_dim(&x->v.dims[lf], &k->v.dims[ri])) return false;
        for (uint32_t a = 0; a < x->v.dims[lf].naxes; a++) partial |= (uint8_t)(1u << x->v.dims[lf].axes[a]);
        split = false;
    } else if (k->v.dims[ri].naxes || (split ? !lf_same_dim(&x->v.dims[lf], &k->v.dims[ro]) : groups != 1 && k->v.dims[ro].naxes))
        return false;
    if (split) groups *= view_dim_parts(&x->v, c->mesh, (uint32_t)lf);
    uint32_t tr;
    const int64_t *td = term_dims(c, x->cls, &tr);
    /* the rows one output reads: K taps rd apart (a dilated kernel) */
    int64_t K = (wa.size[si] - 1) * wa.rd[si] + 1, st = wa.stride[si], len = in->shape.dims[os[si]];
    if (tr != in->shape.rank || w->len < K || len != (w->len - K) / st + 1 || td[w->dim] < K) return false;
    view v = view_dup(in->shape.rank);
    v.dims[ob] = x->v.dims[lb];
    v.dims[of] = k->v.dims[ro];
    if ((partial & view_axes_used(&v)) || (view_axes_used(&v) & win_axes(c, w))) return false;
    v.partial = partial;
    v.red = partial ? RED_SUM : 0;
    int64_t dims[VIEW_MAX_RANK];
    lf_global_dims(c, &v, &in->shape, dims);
    dims[os[si]] = (td[w->dim] - K) / st + 1;
    lift_win *nw = win_new(c, w, (uint32_t)os[si], len);
    for (int64_t r = 0; r < c->ndev; r++) {
        /* a run starting on a stride: output l is the term's output e0/st + l */
        const int64_t *e = w->idx + r * w->len;
        for (int64_t l = 1; l < w->len; l++)
            if (e[l] != e[0] + l) return false;
        if (e[0] % st) return false;
        for (int64_t l = 0; l < len; l++) nw->idx[r * len + l] = e[0] / st + l;
    }
    /* rows past what the last output any device keeps reads: none of its business */
    int64_t maxo = 0;
    for (int64_t r = 0; r < c->ndev; r++)
        if (w->idx[r * w->len] / st + len > maxo) maxo = w->idx[r * w->len] / st + len;
    lval y = *x;
    y.cls = conv_term(s, x->cls, k->cls, w->dim, (uint32_t)si, (uint32_t)nl, &wa, groups, dims);
    if (y.cls != EID_NONE && (maxo - 1) * st + K < td[w->dim] && !(eg_class_origin(c->g, y.cls) & EG_BASELINE)) {
        /* the convolution the baseline computes may be that of the rows read */
        eid xt = trim_end(c, x->cls, w->dim, (maxo - 1) * st + K, 0);
        int64_t tdims[VIEW_MAX_RANK];
        memcpy(tdims, dims, in->shape.rank * sizeof *tdims);
        tdims[os[si]] = maxo;
        eid t = conv_term(s, xt, k->cls, w->dim, (uint32_t)si, (uint32_t)nl, &wa, groups, tdims);
        if (t != EID_NONE && (eg_class_origin(c->g, t) & EG_BASELINE)) y.cls = t;
    }
    if (y.cls == EID_NONE) return false;
    y.win = nw;
    y.v = v;
    y.assumed = x->assumed || k->assumed;
    y.konst = false;
    y = win_settle(c, y);
    if (y.kind == LV_WIN && partial) return false;  /* a window is never partial */
    *out = y;
    return true;
}

static bool win_reduce_window(lstate *s, lval *out) {
    if (s->in->noperands != 2 || s->in->shape.dtype == DT_TUPLE) return false;
    /* index values the same on every device (a count of flags), rows every
     * device's gather resolves (embeddings of its tokens): their term */
    lval t = s->ops[0];
    if (lf_resolved_as_term(s->c, &t)) s->ops[0] = t;
    if (s->ops[0].kind == LV_TERM) lf_uniform_dev_as_term(s, 1);  /* an integer init */
    return term_reduce_window(s, out) || rows_reduce_window(s, out) || segmented_reduce_window(s, out);
}

/* The row-wise transfer functions (above); false when none applies. */
static bool win_rows(lstate *s, lval *out) {
    bool any = false;
    for (uint32_t o = 0; o < s->in->noperands; o++) any |= s->ops[o].kind == LV_WIN;
    if (!any) return false;
    if (summed_instr(s, out)) return true;
    switch (s->in->op) {
    case OP_DOT: return rows_dot(s, out);
    case OP_REDUCE: return rows_reduce(s, out);
    case OP_TRANSPOSE: return rows_transpose(s, out);
    default: return graph_op_elementwise(s->in->op) && (rows_elementwise(s, out) || strided_elementwise(s, out));
    }
}

/* A window no transfer function takes, as a fresh variable (assumed content)
 * sharded along its dim over the mesh axes its pieces vary with (a summed
 * one: partial over them), so that the ops after it still follow views; as
 * that view is guessed, it decides no finding (ambiguous, partial unsure). */
void lf_win_assume(lift_ctx *c, const hlo_instr *xi, lval *x) {
    const lift_win *w = x->win;
    uint32_t mask = win_axes(c, w);
    view v = x->v;
    if (w->summed) {
        /* A device's share of a sum: partial over the axes the shares differ along. */
        if (mask) v.partial = (uint8_t)mask, v.red = RED_SUM;
    } else {
        v.dims[w->dim] = lf_axes_dim(c, mask & ~view_axes_used(&x->v));
    }
    int64_t dims[VIEW_MAX_RANK];
    lf_global_dims(c, &v, &xi->shape, dims);
    *x = term(lf_fresh_var(c, xi->shape.dtype, dims, xi->shape.rank), v, true);
    /* That view is a guess, not a reading: no finding rests on it (a
     * device's share of a sum that later steps complete is no missing
     * all-reduce). */
    x->ambiguous = c->ambiguous_now = true;
    x->partial_unsure = v.partial != 0;
    c->partial_unsure_now |= x->partial_unsure;
}

/* A reshape that drops the window's dim when it holds one element per
 * device (xs[i] of a scan over microbatches: a dynamic-slice of one row of
 * the [microbatches, rows, ...] reshape, then a squeeze) and the next dim is
 * whole: device r's element idx[r] of the window dim with all n elements of
 * the next is the window along the merged dim (idx[r]·n + l), over the term
 * with the two dims merged. */
static bool win_squeeze(lstate *s, lval *out) {
    lift_ctx *c = s->c;
    const hlo_instr *in = s->in, *src = &s->comp->instrs[in->operands[0]];
    const lval *x = &s->ops[0];
    if (x->kind != LV_WIN || x->win->summed || x->v.partial || in->noperands != 1 || in->shape.dtype != src->shape.dtype)
        return false;
    const lift_win *w = x->win;
    uint32_t d = w->dim, rank;
    if (w->len != 1 || src->shape.rank != in->shape.rank + 1 || d + 1 >= src->shape.rank || x->v.dims[d + 1].naxes)
        return false;
    for (uint32_t k = 0; k < in->shape.rank; k++)
        if (in->shape.dims[k] != src->shape.dims[k < d ? k : k + 1]) return false;
    const int64_t *td = term_dims(c, x->cls, &rank);
    int64_t n = src->shape.dims[d + 1];
    if (rank != src->shape.rank || td[d + 1] != n || c->ndev * n > LIFT_WIN_MAX) return false;
    int64_t dims[VIEW_MAX_RANK];
    for (uint32_t k = 0; k < in->shape.rank; k++) dims[k] = k < d ? td[k] : k == d ? td[d] * n : td[k + 1];
    lift_win *nw = win_new(c, w, d, n);
    for (int64_t r = 0; r < c->ndev; r++)
        for (int64_t l = 0; l < n; l++) nw->idx[r * n + l] = w->idx[r] < 0 ? -1 : w->idx[r] * n + l;
    lval v = *x;
    v.cls = lf_mk_reshape(c, x->cls, lf_type_of(c, in->shape.dtype, dims, in->shape.rank), c->origin);
    v.v = view_dup(in->shape.rank);
    for (uint32_t k = 0; k < in->shape.rank; k++) v.v.dims[k] = x->v.dims[k < d ? k : k + 1];
    v.win = nw;
    *out = win_settle(c, v);
    return true;
}

/* Window x's rows along dim d of term t under view v (the other dims),
 * settled where they are a plain view. */
static lval win_moved(lift_ctx *c, const lval *x, uint32_t d, eid t, const view *v) {
    lift_win *nw = win_new(c, x->win, d, x->win->len);
    memcpy(nw->idx, x->win->idx, (size_t)(c->ndev * nw->len) * sizeof *nw->idx);
    lval y = *x;
    y.cls = t;
    y.v = *v;
    y.win = nw;
    return win_settle(c, y);
}

/* A reshape that only inserts or drops unit dims (expand_dims before a
 * stack, a squeeze after a one-row slice), the window's dim not among them:
 * the same window along that dim's new position, over the term reshaped
 * alike. A dropped unit dim must be whole (one element globally too). */
static bool win_unit_reshape(lstate *s, lval *out) {
    lift_ctx *c = s->c;
    const hlo_instr *in = s->in, *src = &s->comp->instrs[in->operands[0]];
    const lval *x = &s->ops[0];
    if (x->kind != LV_WIN || x->win->summed || in->noperands != 1 || in->shape.dtype != src->shape.dtype ||
        in->shape.rank > VIEW_MAX_RANK || src->shape.rank != x->v.rank)
        return false;
    /* a window that reads as a plain view here is read so (the general path) */
    lval xp = *x;
    if (lf_win_rearranged(c, &xp)) return false;
    /* zeros a permute left, read as the baseline's padding before the reshape */
    if (!win_full(c, x->win) && lf_win_padded(c, x, true, &xp)) x = &xp;
    const lift_win *w = x->win;
    uint32_t rank;
    const int64_t *td = term_dims(c, x->cls, &rank);
    if (rank != src->shape.rank || src->shape.dims[w->dim] < 2) return false;
    view v = view_dup(in->shape.rank);
    int64_t dims[VIEW_MAX_RANK];
    uint32_t i = 0, o = 0, nd = UINT32_MAX;
    for (;;) {
        while (i < rank && src->shape.dims[i] == 1) {
            if (x->v.dims[i].naxes || td[i] != 1) return false;
            i++;
        }
        while (o < in->shape.rank && in->shape.dims[o] == 1) dims[o++] = 1;
        if (i == rank || o == in->shape.rank) break;
        if (src->shape.dims[i] != in->shape.dims[o]) return false;
        if (i == w->dim) nd = o;
        v.dims[o] = x->v.dims[i];
        dims[o++] = td[i++];
    }
    if (i != rank || o != in->shape.rank || nd == UINT32_MAX) return false;
    *out = win_moved(c, x, nd, lf_mk_reshape(c, x->cls, lf_type_of(c, in->shape.dtype, dims, in->shape.rank), c->origin), &v);
    return true;
}

/* broadcast of a window: the same window along the dim its dim maps to,
 * over the broadcast of the term (the new dims whole, the others as the
 * operand's view says). */
static bool win_broadcast(lstate *s, lval *out) {
    lift_ctx *c = s->c;
    const hlo_instr *in = s->in;
    const lval *x = &s->ops[0];
    uint32_t nd, rank;
    const int64_t *bd = instr_ints(in, A_DIMENSIONS, &nd);
    if (x->kind != LV_WIN || x->win->summed || in->noperands != 1 || in->shape.rank > VIEW_MAX_RANK || nd != x->v.rank)
        return false;
    lval xp = *x;
    if (lf_win_rearranged(c, &xp)) return false;  /* a plain view here: the general path */
    const int64_t *td = term_dims(c, x->cls, &rank);
    if (rank != nd) return false;
    view v = view_dup(in->shape.rank);
    int64_t dims[VIEW_MAX_RANK];
    memcpy(dims, in->shape.dims, in->shape.rank * sizeof *dims);
    for (uint32_t k = 0; k < nd; k++) {
        if (bd[k] < 0 || (uint64_t)bd[k] >= in->shape.rank || (k && bd[k] <= bd[k - 1])) return false;
        v.dims[bd[k]] = x->v.dims[k];
        dims[bd[k]] = td[k];
    }
    *out = win_moved(c, x, (uint32_t)bd[x->win->dim], lf_node(c, c->cur, in, &x->cls, 1, dims, c->origin), &v);
    return true;
}

/* reverse where the value is a window along a reversed dim, or a term
 * sharded along one (its blocks then reverse too: block b's rows land in
 * block parts-1-b, a window until a permute brings them back): the reverse
 * of the term, device r's rows reversed and counted from the other end.
 * Every other reversed dim is whole. */
static bool win_reverse(lstate *s, lval *out) {
    lift_ctx *c = s->c;
    const hlo_instr *in = s->in;
    lval x = s->ops[0];
    uint32_t nd;
    const int64_t *rd = instr_ints(in, A_DIMENSIONS, &nd);
    if (in->noperands != 1 || (x.kind != LV_TERM && x.kind != LV_WIN) || x.v.partial || x.v.rank != in->shape.rank) return false;
    if (x.kind == LV_WIN && x.win->summed) return false;
    int sd = -1;
    for (uint32_t k = 0; k < nd; k++) {
        if (rd[k] < 0 || rd[k] >= x.v.rank) return false;
        if (!x.v.dims[rd[k]].naxes) continue;
        if (x.kind == LV_WIN || sd >= 0) return false;
        sd = (int)rd[k];
    }
    if (x.kind == LV_TERM) {
        if (sd < 0 || !win_of_term(c, &s->ops[0], (uint32_t)sd, in->shape.dims[sd], &x)) return false;
        x.win->from = in;
        x.win->from_comp = s->comp;
    }
    const lift_win *w = x.win;
    uint32_t rank;
    const int64_t *td = term_dims(c, x.cls, &rank);
    bool along = false;
    for (uint32_t k = 0; k < nd; k++) along |= rd[k] == w->dim;
    lift_win *nw = win_new(c, w, w->dim, w->len);
    for (int64_t r = 0; r < c->ndev; r++)
        for (int64_t l = 0; l < w->len; l++) {
            int64_t e = w->idx[r * w->len + (along ? w->len - 1 - l : l)];
            nw->idx[r * w->len + l] = e < 0 || !along ? e : td[w->dim] - 1 - e;
        }
    x.cls = lf_node(c, c->cur, in, &x.cls, 1, td, c->origin);
    x.win = nw;
    x.konst = false;
    x.zm = NULL;
    *out = win_settle(c, x);
    return true;
}

/* The zero pad of t by pad (3 words per dim, no interior) where t is itself
 * a zero pad of some y without interior padding: also the one pad of y by
 * both paddings summed, in the same class (zeros around zeros: jnp.pad of
 * every dim at once where a halo exchange padded the sharded dim first). */
static eid zero_pad_composed(lift_ctx *c, eid t, const int64_t *pad) {
    eid p = zero_pad_by(c, t, pad, true);
    const eid *ch;
    eid pn = p == EID_NONE ? EID_NONE : lf_class_node(c, t, OP_PAD, 2, &ch);
    if (pn == EID_NONE || !lf_class_is_zero(c, ch[1])) return p;
    uint32_t nw, rank;
    eid y = ch[0];
    eg_type_dims(c->g, eg_class_type(c->g, y), &rank);
    const int64_t *pw = eg_attr_words(c->g, eg_node_attr(c->g, pn), &nw);
    if (rank > VIEW_MAX_RANK || nw != 2 + 3 * rank || pw[0] != A_PADDING) return p;
    int64_t sum[3 * VIEW_MAX_RANK];
    for (uint32_t k = 0; k < rank; k++) {
        const int64_t *q = pw + 2 + 3 * k;
        if (q[0] < 0 || q[1] < 0 || q[2] != 0) return p;
        sum[3 * k] = q[0] + pad[3 * k], sum[3 * k + 1] = q[1] + pad[3 * k + 1], sum[3 * k + 2] = 0;
    }
    eid both = zero_pad_by(c, y, sum, true);
    if (both != EID_NONE) eg_union(c->g, p, both, NULL);
    return eg_find(c->g, p);
}

/* pad of a window with zeros (no interior padding): along its dim, each
 * device's rows with lo and hi zeros around them (idx -1, the zeros a
 * permute leaves; a partitioner's zeros past a halo), the term as it is;
 * read as a zero pad of the term where the rows settle. Along dims the
 * view leaves whole, the term padded there (after the window's zeros are
 * read as the term's own padding: a halo'd block padded on its other dims,
 * jnp.pad of every dim in the baseline). */
static bool win_pad(lstate *s, lval *out) {
    lift_ctx *c = s->c;
    const hlo_instr *in = s->in;
    lval x = s->ops[0];
    const hlo_attr *pa = instr_attr(in, A_PADDING);
    if (in->noperands == 2 && s->ops[1].kind == LV_DEV) lf_uniform_dev_as_term(s, 1); /* a zero computed like a device value */
    const lval *z = &s->ops[1];
    bool zero = z->kind == LV_TERM && lf_class_is_zero(c, z->cls);
    if (in->noperands != 2 || x.kind != LV_WIN || x.win->summed || x.v.partial || !pa || pa->n != in->shape.rank || !zero ||
        x.v.rank != pa->n)
        return false;
    const lift_win *w = x.win;
    const int64_t *p = pa->v.ints;
    int64_t other[3 * VIEW_MAX_RANK] = {0};
    bool others = false;
    for (uint32_t k = 0; k < pa->n; k++) {
        if (p[3 * k + 2] != 0 || p[3 * k] < 0 || p[3 * k + 1] < 0) return false;
        if (k == w->dim || !(p[3 * k] || p[3 * k + 1])) continue;
        if (x.v.dims[k].naxes) return false;
        other[3 * k] = p[3 * k], other[3 * k + 1] = p[3 * k + 1];
        others = true;
    }
    int64_t lo = p[3 * w->dim], len = w->len + lo + p[3 * w->dim + 1];
    if (len > LIFT_WIN_MAX / c->ndev) return false;
    lift_win *nw = win_new(c, w, w->dim, len);
    bool holes = false;
    for (int64_t r = 0; r < c->ndev; r++)
        for (int64_t l = 0; l < len; l++) {
            int64_t e = l < lo || l >= lo + w->len ? -1 : w->idx[r * w->len + l - lo];
            nw->idx[r * len + l] = e;
            holes |= e < 0;
        }
    x.win = nw;
    x.konst = false;
    x.zm = NULL;
    if (others) {
        if (holes && !lf_win_padded(c, &x, false, &x)) return false;
        eid t = zero_pad_composed(c, x.cls, other);
        if (t == EID_NONE) return false;
        x.cls = t;
    }
    *out = win_settle(c, x);
    return true;
}

/* The device groups of collective s over a window (operand 0: rows not
 * summed, complete, its other dims sharded only over axes a group does not
 * span, so that its members hold the same blocks there); false when the
 * window or the groups are not such. */
static bool win_groups(lstate *s, int64_t **ids, uint32_t **start, uint32_t *ng) {
    lift_ctx *c = s->c;
    const hlo_instr *in = s->in;
    const lval *x = &s->ops[0];
    int gaxes = x->kind == LV_WIN ? lift_groups_axes(c, in, false) : -1;
    if (in->noperands != 1 || x->kind != LV_WIN || x->win->summed || x->v.partial || gaxes < 0 ||
        (view_axes_used(&x->v) & (uint32_t)gaxes))
        return false;
    char why[160];
    return graph_device_groups(in, graph_num_replicas(c->dist), c->ndev / graph_num_replicas(c->dist), ids, start, ng, why,
                               sizeof why);
}

/* all-gather of a window along its dim: device r holds, in its group's
 * order, the rows every member of its group held (the same rows on every
 * device of a group: the whole term where they cover it, a partitioner's
 * gather of halo'd rows). */
static bool win_all_gather(lstate *s, lval *out) {
    lift_ctx *c = s->c;
    const hlo_instr *in = s->in;
    const lval *x = &s->ops[0];
    uint32_t nd;
    const int64_t *dd = instr_ints(in, A_DIMENSIONS, &nd);
    int64_t *ids = NULL;
    uint32_t *start = NULL, ng = 0;
    if (x->kind != LV_WIN || nd != 1 || dd[0] != x->win->dim || !win_groups(s, &ids, &start, &ng)) return false;
    const lift_win *w = x->win;
    int64_t size = ng ? start[1] - start[0] : 0, len = w->len * size;
    bool ok = ng > 0 && size > 0 && len <= LIFT_WIN_MAX / c->ndev && len == in->shape.dims[w->dim];
    lift_win *nw = ok ? win_new(c, w, w->dim, len) : NULL;
    int64_t covered = 0;
    for (uint32_t g = 0; ok && g < ng; g++) {
        ok = start[g + 1] - start[g] == size;
        for (uint32_t k = start[g]; ok && k < start[g + 1]; k++) {
            int64_t r = ids[k];
            ok = r >= 0 && r < c->ndev;
            covered += ok;
            for (uint32_t m = start[g]; ok && m < start[g + 1]; m++)
                memcpy(nw->idx + r * len + (int64_t)(m - start[g]) * w->len, w->idx + ids[m] * w->len,
                       (size_t)w->len * sizeof *w->idx);
        }
    }
    free(ids);
    free(start);
    if (!ok || covered != c->ndev) return false;
    lval v = *x;
    v.win = nw;
    v = win_settle(c, v);
    if (v.kind == LV_WIN && !lf_win_padded(c, &v, false, &v)) return false; /* (rows of a stride: the gather's own reading) */
    *out = v.kind == LV_WIN ? win_settle(c, v) : v;
    return out->kind != LV_WIN;
}

/* all-reduce (a sum) of a window where, in every group and at every
 * position, at most one member holds rows and the others zeros (idx -1: a
 * boundary device's slice masked in, jnp.where(me == k, x[:, -1:], 0) then
 * psum): every member then holds the one device's rows. */
static bool win_all_reduce(lstate *s, lval *out) {
    lift_ctx *c = s->c;
    const hlo_instr *in = s->in;
    const lval *x = &s->ops[0];
    int64_t *ids = NULL;
    uint32_t *start = NULL, ng = 0;
    if (x->kind != LV_WIN || x->zm || lf_reducer(c->cur, in) != RED_SUM || !win_groups(s, &ids, &start, &ng)) return false;
    const lift_win *w = x->win;
    lift_win *nw = win_new(c, w, w->dim, w->len);
    int64_t covered = 0;
    bool ok = ng > 0;
    for (uint32_t g = 0; ok && g < ng; g++)
        for (int64_t l = 0; ok && l < w->len; l++) {
            int64_t e = -1;
            for (uint32_t k = start[g]; ok && k < start[g + 1]; k++) {
                int64_t r = ids[k], v = r >= 0 && r < c->ndev ? w->idx[r * w->len + l] : -2;
                ok = v >= -1 && (v < 0 || e < 0);
                if (v >= 0) e = v;
            }
            for (uint32_t k = start[g]; ok && k < start[g + 1]; k++) nw->idx[ids[k] * w->len + l] = e;
            if (!l) covered += start[g + 1] - start[g];
        }
    free(ids);
    free(start);
    if (!ok || covered != c->ndev) return false;
    lval v = *x;
    v.win = nw;
    *out = win_settle(c, v);
    return true;
}

/* Whether views a and b agree on every dim but d. */
static bool same_view_off(const view *a, const view *b, uint32_t d) {
    view x = *a, y = *b;
    if (d >= x.rank || d >= y.rank) return false;
    x.dims[d] = y.dims[d] = (view_dim){0};
    return view_equal(&x, &y);
}

/* Whether vals[r] = a · block(r) + b, a > 0, for the blocks of some set of
 * mesh axes (each device's value then tells its place along them). */
static bool affine_blocks(const lift_ctx *c, const double *vals) {
    for (uint32_t mask = 1; mask < 1u << c->mesh->naxes; mask++) {
        view_dim vd = lf_axes_dim(c, mask);
        double a = 0, b = 0;
        bool have = false, ok = true;
        for (int64_t r = 0; r < c->ndev && ok; r++) {
            int64_t k = lf_dim_block(c, &vd, r);
            if (k == 0) ok = !have || vals[r] == b, b = vals[r], have = true;
        }
        for (int64_t r = 0; r < c->ndev && ok; r++) {
            int64_t k = lf_dim_block(c, &vd, r);
            if (k == 0) continue;
            double ak = (vals[r] - b) / (double)k;
            if (a == 0) a = ak;
            ok = ak > 0 && ak == a && ak == (double)(int64_t)ak;
        }
        if (ok && a > 0) return true;
    }
    return false;
}

/* Whether, in a select whose operand o is a fill (rows of another term)
 * and whose other operand is window w over a term of n rows along w's dim,
 * the devices' first rows run as a * block + b (a > 0) over some mesh
 * axes when the fill's rows come first and the term's after them, and do
 * not when the fill's come after the term's: the fill then goes first. pvs:
 * the predicate's value on each device (true picks operand 0). */
static bool fill_first(lift_ctx *c, interp_val *const *pvs, uint32_t o, const lift_win *w, int64_t n) {
    double *first = arena_alloc(c->a, (size_t)c->ndev * sizeof *first), *last = arena_alloc(c->a, (size_t)c->ndev * sizeof *last);
    for (int64_t r = 0; r < c->ndev; r++) {
        const interp_val *pv = pvs[r];
        if (pv->dtype != DT_PRED || pv->n < 1) return false;
        bool takes_fill = (pv->i[0] != 0) == (o == 0);
        int64_t j = w->idx[r * w->len];
        if (!takes_fill && j < 0) return false;
        first[r] = takes_fill ? 0 : (double)(j + w->len);
        last[r] = takes_fill ? (double)n : (double)j;
    }
    return affine_blocks(c, first) && !affine_blocks(c, last);
}

/* select(p, a, b) where p is the same everywhere on each device (a device's
 * choice: a partitioner's "take the neighbour's rows here") and a and b
 * are windows of one term along one dim: each device's rows from the
 * window it chose. */
static bool win_select_device(lstate *s, lval *out) {
    lift_ctx *c = s->c;
    const hlo_instr *in = s->in;
    lval ab[2];
    int fill[2] = {0, 0}; /* 1: zeros (a zero pad's), 2: rows of another term */
    if (in->noperands != 3) return false;
    for (uint32_t o = 0; o < 2; o++) {
        if (s->ops[1 + o].kind == LV_DEV && s->ops[2 - o].kind == LV_WIN) lf_uniform_dev_as_term(s, 1 + o);
        ab[o] = s->ops[1 + o];
        const lval *y = &s->ops[1 + o], *other = &s->ops[2 - o];
        if (y->kind == LV_TERM && !y->v.partial && other->kind == LV_WIN) {
            uint32_t d = other->win->dim;
            if (d >= y->v.rank) return false;
            if (eg_find(c->g, y->cls) == eg_find(c->g, other->cls)) {
                if (!win_of_term(c, y, d, in->shape.dims[d], &ab[o])) return false;
            } else {
                /* what the boundary devices take instead of a neighbour's
                 * rows: zeros are a zero pad's (jnp.where(me == 0, 0,
                 * received)); another term whole along the dim (a bootstrap
                 * value, a fill token) is rows past the term's end, read
                 * from the two side by side */
                fill[o] = lf_class_is_zero(c, y->cls) ? 1 : 2;
                /* (a fill replicated where the window's other dims are
                 * sharded, a learned BOS vector broadcast over the batch:
                 * re-read under the window's view off its dim) */
                if (fill[o] == 2 && !same_view_off(&y->v, &other->v, d) && other->v.rank == y->v.rank) {
                    view want = other->v;
                    want.dims[d] = (view_dim){0};
                    want.partial = 0;
                    if (lf_review_operand(s, 1 + o, &want)) y = &s->ops[1 + o];
                }
                if (fill[o] == 2 && (y->kind != LV_TERM || y->v.partial || y->v.dims[d].naxes ||
                                     !same_view_off(&y->v, &other->v, d) || in->shape.dims[d] != other->win->len))
                    return false;
                ab[o] = *other;
                continue;
            }
        }
        if (ab[o].kind != LV_WIN || ab[o].win->summed || ab[o].zm) return false;
    }
    if (fill[0] && fill[1]) return false;
    interp_val **pvs = lf_device_values(c, s->comp, in->operands[0]);
    if (!pvs) return false;
    int64_t past = 0, shift = 0; /* where another term's rows start; how far the term's rows move */
    for (uint32_t o = 0; o < 2; o++) {
        if (fill[o] != 2) continue;
        uint32_t rank;
        eid both[2] = {ab[o].cls, s->ops[1 + o].cls};
        int64_t n = term_dims(c, both[0], &rank)[ab[o].win->dim];
        /* The fill's rows before the term's (a previous-token shift: the
         * first block takes the fill where the others take the row before
         * their own) where the devices' rows then run as blocks, and not
         * after it; else after it (a next-token shift). */
        if (fill_first(c, pvs, o, ab[o].win, n)) {
            eid sw[2] = {both[1], both[0]};
            memcpy(both, sw, sizeof both);
            shift = in->shape.dims[ab[o].win->dim];
        } else {
            past = n;
        }
        eid t = lf_mk_concat(c, both, 2, ab[o].win->dim);
        if (t == EID_NONE) {
            lf_device_values_free(c, pvs);
            return false;
        }
        ab[0].cls = ab[1].cls = t;
    }
    const lift_win *wa = ab[0].win, *wb = ab[1].win;
    if (wa->dim != wb->dim || wa->len != wb->len || eg_find(c->g, ab[0].cls) != eg_find(c->g, ab[1].cls) ||
        !view_equal(&ab[0].v, &ab[1].v)) {
        lf_device_values_free(c, pvs);
        return false;
    }
    lift_win *nw = win_new(c, wa, wa->dim, wa->len);
    bool ok = true;
    for (int64_t r = 0; r < c->ndev && ok; r++) {
        const interp_val *pv = pvs[r];
        ok = pv->dtype == DT_PRED && pv->n > 0;
        for (int64_t e = 1; ok && e < pv->n; e++) ok = (pv->i[e] != 0) == (pv->i[0] != 0);
        uint32_t o = pv->i[0] ? 0 : 1;
        for (int64_t l = 0; ok && l < wa->len; l++) {
            int64_t j = ab[o].win->idx[r * wa->len + l];
            nw->idx[r * wa->len + l] = fill[o] == 1 ? -1 : fill[o] == 2 ? past + l : j < 0 ? -1 : j + shift;
        }
    }
    lf_device_values_free(c, pvs);
    if (!ok) return false;
    lval v = ab[fill[0] ? 1 : 0];
    v.win = nw;
    v.assumed = ab[0].assumed || ab[1].assumed;
    *out = win_settle(c, v);
    return true;
}

/* The window transfer functions, in front of the others: true when one
 * applies (*out set, possibly LV_UNKNOWN after saying why). */
bool lf_win_instr(lstate *s, lval *out) {
    lift_ctx *c = s->c;
    const hlo_instr *in = s->in;
    if (c->baseline_mode || in->noperands == 0) return false;
    switch (in->op) {
    case OP_COLLECTIVE_PERMUTE: *out = lift_collective_permute(s); return true;
    case OP_SLICE: return win_slice(s, out);
    case OP_CONCATENATE: return win_concatenate(s, out);
    case OP_DYNAMIC_SLICE: return win_dynamic_slice(s, out) || win_dynamic_slice_uniform(s, out);
    case OP_RESHAPE: case OP_BITCAST: return win_squeeze(s, out) || win_unit_reshape(s, out) || win_rows(s, out);
    case OP_REDUCE_WINDOW: return win_reduce_window(s, out);
    case OP_SELECT_AND_SCATTER: return select_and_scatter_blocks(s, out);
    case OP_REVERSE: return win_reverse(s, out);
    case OP_PAD: return win_pad(s, out);
    case OP_ALL_GATHER: return win_all_gather(s, out);
    case OP_ALL_REDUCE: return win_all_reduce(s, out) || win_rows(s, out);
    case OP_CONVOLUTION: return win_convolution(s, out);
    case OP_BROADCAST: return win_broadcast(s, out) || win_rows(s, out);
    case OP_SELECT:
        return (s->ops[1].kind == LV_WIN && lf_select_padding_zeros(s, out)) || win_select_device(s, out) || win_rows(s, out);
    case OP_DYNAMIC_UPDATE_SLICE: return (s->ops[0].kind == LV_WIN || s->ops[1].kind == LV_WIN) && lf_win_update(s, out);
    default: return win_rows(s, out);
    }
}

