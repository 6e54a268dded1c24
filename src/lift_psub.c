/* lift_psub — sums of some devices' shares of a partial sum (LV_PSUB), the
 * view of collectives built by hand from collective-permutes and adds (a
 * ring or butterfly all-reduce written with ppermute).
 * Owns: a collective-permute of a partial sum or of such a value
 * (lf_psub_instr), the add of two of them over the same partial sum, blocks
 * written into zeros at their place (lf_placed_block, below), the
 * reading of one as a plain view again (complete over the axes every
 * device's set covers; a partial sum of k times the value where every share
 * is counted k times in each group), and the judgement of one that no op
 * completes (lift_psub_at_output: a finding only when no choice of the shares
 * makes every device hold the sum).
 *
 * A partial sum x over the mesh axes P is, on device d, the share c_e of
 * device e = d; the sum over the devices of each P-group is the value. After
 * a collective-permute, device t holds what its source held; an add of two
 * values whose sets of shares are disjoint on every device holds their
 * union. The shares are named by the partial sum's lval.pid (given where it
 * is computed, kept through copies, tuples and loop carries), never by its
 * term: two partial sums of the same term may split it differently. Pairs that leave a P-group, shares
 * counted twice on one device, or any other op are left unrelated.
 *
 * Blocks placed: a dynamic-update-slice of each device's block of a sharded
 * value into zeros at its place is that value partial over the axes
 * (lf_placed_block; its psum is an all-gather), each device's share its
 * block; writing, at its place, a block a device does not hold yet (moved
 * there by permutes: a window of whole blocks) adds that block's share (a
 * ring all-gather).
 *
 * Chunks: a dynamic-slice of such sums at per-device offsets along one dim
 * keeps each device's chunk beside its set (lift_psub.chunk); permutes move
 * both, adds need the same chunk; whole sums of chunks that are the blocks
 * of some mesh axes are the term sharded over them (a ring
 * reduce-scatter). */
#include "lift.h"
#include "lift_int.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The instruction whose value in is, through copies in comp. */
static const hlo_instr *source_of(const hlo_comp *comp, const hlo_instr *in) {
    while ((in->op == OP_COPY || in->op == OP_OPT_BARRIER) && in->noperands == 1) in = &comp->instrs[in->operands[0]];
    return in;
}

/* Device d's position in its group along the axes P (mixed radix, major
 * first) and the group's number (its coordinates along the other axes). */
static int64_t pos_in(const mesh *m, int64_t d, uint32_t P, bool group) {
    int64_t p = 0;
    for (uint32_t a = 0; a < m->naxes; a++)
        if ((P >> a & 1) != group) p = p * m->sizes[a] + mesh_coord(m, d, (int)a);
    return p;
}

static int64_t group_size(const mesh *m, uint32_t P) {
    int64_t n = 1;
    for (uint32_t a = 0; a < m->naxes; a++)
        if (P >> a & 1) n *= m->sizes[a];
    return n;
}

/* A partial sum (sum) that can enter the view: its own share on every device. */
static bool enters(const lift_ctx *c, const lval *x) {
    return x->kind == LV_TERM && x->pid && x->v.partial && x->v.red == RED_SUM && group_size(c->mesh, x->v.partial) <= 64;
}

static lval as_psub(lift_ctx *c, const lval *x, const hlo_comp *comp, const hlo_instr *at) {
    lift_psub *p = arena_alloc(c->a, sizeof *p);
    memset(p, 0, sizeof *p);
    p->pdim = p->cdim = -1;
    p->base = *x;
    p->src = source_of(comp, at);
    p->src_comp = comp;
    p->pid = x->pid;
    p->axes = x->v.partial;
    p->sub = arena_alloc(c->a, (size_t)c->ndev * sizeof *p->sub);
    for (int64_t d = 0; d < c->ndev; d++) p->sub[d] = 1ull << pos_in(c->mesh, d, p->axes, false);
    return (lval){.kind = LV_PSUB, .cls = EID_NONE, .psub = p, .assumed = x->assumed};
}

/* The set device d holds when it holds the shares of every device of its
 * group that agrees with it on the axes P \ Q. */
static uint64_t along(const mesh *m, int64_t nd, int64_t d, uint32_t P, uint32_t Q) {
    uint64_t s = 0;
    for (int64_t e = 0; e < nd; e++)
        if (pos_in(m, e, P, true) == pos_in(m, d, P, true) && pos_in(m, e, P & ~Q, false) == pos_in(m, d, P & ~Q, false))
            s |= 1ull << pos_in(m, e, P, false);
    return s;
}

/* Chunked sets (a ring reduce-scatter): where every device holds its whole
 * group's sum of its chunk, and the chunks are the blocks of some mesh axes
 * the view leaves free, the term complete over the axes, sharded along cdim
 * over those. Otherwise v as it is. */
static lval settle_chunks(lift_ctx *c, lval v) {
    const lift_psub *p = v.psub;
    const lval *b = &p->base;
    uint32_t k = (uint32_t)p->cdim;
    int64_t parts = c->ndev, *blocks = arena_alloc(c->a, (size_t)c->ndev * sizeof *blocks);
    for (int64_t d = 0; d < c->ndev; d++) {
        if (p->sub[d] != along(c->mesh, c->ndev, d, p->axes, p->axes) || p->chunk[d] < 0) return v;
        blocks[d] = p->chunk[d];
    }
    lval r = *b;
    r.v.partial = 0;
    r.v.red = RED_NONE;
    r.assumed = v.assumed;
    r.short_at = NULL;
    view_dim vd;
    if (b->v.partial != p->axes || k >= b->v.rank || b->v.dims[k].naxes) return v;
    const int64_t *gd = NULL;
    uint32_t grank = 0;
    gd = eg_type_dims(c->g, eg_class_type(c->g, b->cls), &grank);
    if (!gd || k >= grank || p->clen <= 0 || gd[k] % p->clen) return v;
    parts = gd[k] / p->clen;
    if (!lf_axes_of_blocks(c, blocks, parts, &vd)) return v;
    uint32_t used = view_axes_used(&b->v) & ~(uint32_t)b->v.partial, mine = 0, n = 1;
    for (uint32_t j = 0; j < vd.naxes; j++) mine |= 1u << vd.axes[j], n *= (uint32_t)c->mesh->sizes[vd.axes[j]];
    if ((mine & used) || (int64_t)n != parts) return v;
    r.v.dims[k] = vd;
    return r;
}

/* A plain view where the sets say one: the partial sum itself (every device
 * its own share), or complete over the axes Q ⊆ P whose groups every device
 * holds whole (the sum over P \ Q left). */
static lval settle(lift_ctx *c, lval v) {
    const lift_psub *p = v.psub;
    const mesh *m = c->mesh;
    if (p->cdim >= 0) return settle_chunks(c, v);
    for (uint32_t Q = 0; Q <= p->axes; Q++) {
        if (Q & ~p->axes) continue;
        bool all = true;
        for (int64_t d = 0; d < c->ndev && all; d++) all = p->sub[d] == along(m, c->ndev, d, p->axes, Q);
        if (!all) continue;
        lval r = p->base;
        r.v.partial = (uint8_t)(p->axes & ~Q);
        if (!r.v.partial) r.v.red = RED_NONE;
        r.assumed = v.assumed;
        if (Q) r.short_at = NULL;
        return r;
    }
    return v;
}

/* Every share of each group counted the same number of times k over the
 * group's devices (0: not so). */
static int64_t uniform_count(const lift_ctx *c, const lift_psub *p) {
    int64_t n = group_size(c->mesh, p->axes), ng = c->ndev / n, k = -1;
    int64_t *cnt = xcalloc((size_t)(ng * n), sizeof *cnt);
    for (int64_t d = 0; d < c->ndev; d++)
        for (int64_t e = 0; e < n; e++) cnt[pos_in(c->mesh, d, p->axes, true) * n + e] += (int64_t)(p->sub[d] >> e & 1);
    for (int64_t i = 0; i < ng * n && k != 0; i++) k = k < 0 || cnt[i] == k ? cnt[i] : 0;
    free(cnt);
    return k < 0 ? 0 : k;
}

/* all-reduce of a value of sets: the shares of each group summed, each as
 * often as the sets hold it, k times in all: the partial sum's all-reduce
 * times k. False (nothing lifted) when the counts differ. */
static bool summed(lstate *s, lval *out) {
    lift_ctx *c = s->c;
    const lift_psub *p = s->ops[0].psub;
    int64_t k = p->cdim < 0 ? uniform_count(c, p) : 0;
    if (k <= 0) return false;
    lval x = p->base;
    double f = lf_scale_of(&x) * (double)k;
    x.scale = 0;
    x.assumed |= s->ops[0].assumed;
    s->ops[0] = x;
    *out = lf_lift_all_reduce(s);
    if (f == 1 || out->kind == LV_UNKNOWN) return true;
    if (out->kind != LV_TERM) {
        lf_unsupported(c, s->comp, s->in, "%s sums %lld copies of each share of %s in a way not related yet", s->in->name,
                       (long long)k, p->src->name);
        *out = unknown();
        return true;
    }
    out->scale = f * lf_scale_of(out);
    if (out->scale == 1) out->scale = 0;
    else if (k != 1) out->factor_at = s->in;
    return true;
}

static lval permute(lstate *s) {
    lift_ctx *c = s->c;
    const hlo_instr *in = s->in;
    lval x = s->ops[0];
    const hlo_instr *xi = &s->comp->instrs[in->operands[0]];
    if (x.kind == LV_TERM) x = as_psub(c, &x, s->comp, xi);
    const lift_psub *p = x.psub;
    const char *bad;
    int64_t *from = lf_permute_sources(c, in, &bad);
    if (!from) {
        lf_unsupported(c, s->comp, in, "the source_target_pairs of %s name %s", in->name, bad);
        return unknown();
    }
    for (int64_t t = 0; t < c->ndev; t++)
        if (from[t] >= 0 && pos_in(c->mesh, from[t], p->axes, true) != pos_in(c->mesh, t, p->axes, true)) {
            strbuf ax;
            sb_init(&ax);
            lf_axes_words(&ax, c, p->axes);
            lf_unsupported_suspect(c, KIND_WRONG_COLLECTIVE_GROUP, s->comp, in,
                                   "%s moves a partial sum over %s from device "
                                   "%lld to device %lld, which is not in its group",
                                   in->name, ax.s, (long long)from[t], (long long)t);
            sb_free(&ax);
            return unknown();
        }
    lift_psub *q = arena_alloc(c->a, sizeof *q);
    *q = *p;
    q->sub = arena_alloc(c->a, (size_t)c->ndev * sizeof *q->sub);
    for (int64_t t = 0; t < c->ndev; t++) q->sub[t] = from[t] < 0 ? 0 : p->sub[from[t]];
    if (p->cdim >= 0) {
        q->chunk = arena_alloc(c->a, (size_t)c->ndev * sizeof *q->chunk);
        for (int64_t t = 0; t < c->ndev; t++) q->chunk[t] = from[t] < 0 ? -1 : p->chunk[from[t]];
    }
    q->at = in;
    q->at_comp = s->comp;
    lval r = x;
    r.psub = q;
    return settle(c, r);
}

static lval add(lstate *s) {
    lift_ctx *c = s->c;
    const hlo_instr *in = s->in;
    lval x[2];
    const lift_psub *p = NULL;
    for (int o = 0; o < 2; o++)
        if (s->ops[o].kind == LV_PSUB) p = s->ops[o].psub;
    for (int o = 0; o < 2; o++) {
        x[o] = s->ops[o];
        if (x[o].kind == LV_TERM && enters(c, &x[o]) && x[o].pid == p->pid)
            x[o] = as_psub(c, &x[o], s->comp, &s->comp->instrs[in->operands[o]]);
        if (x[o].kind != LV_PSUB || x[o].psub->pid != p->pid) {
            lf_unsupported(c, s->comp, in,
                           "%s adds a sum of some devices' shares of %s to a value that is not made of "
                           "shares of it",
                           in->name, p->src->name);
            return unknown();
        }
    }
    const lift_psub *p0 = x[0].psub, *p1 = x[1].psub;
    if (p0->cdim != p1->cdim || p0->clen != p1->clen) {
        lf_unsupported(c, s->comp, in, "%s adds chunks of %s to whole sums of its shares", in->name, p->src->name);
        return unknown();
    }
    lift_psub *q = arena_alloc(c->a, sizeof *q);
    *q = *p;
    q->sub = arena_alloc(c->a, (size_t)c->ndev * sizeof *q->sub);
    if (p->cdim >= 0) q->chunk = arena_alloc(c->a, (size_t)c->ndev * sizeof *q->chunk);
    for (int64_t d = 0; d < c->ndev && p->cdim >= 0; d++) {
        q->chunk[d] = p0->sub[d] ? p0->chunk[d] : p1->chunk[d];
        if (p0->sub[d] && p1->sub[d] && p0->chunk[d] != p1->chunk[d]) {
            lf_unsupported_suspect(c, KIND_WRONG_COLLECTIVE_GROUP, s->comp, in,
                                   "%s adds chunk %lld of %s to chunk %lld on device %lld", in->name,
                                   (long long)p0->chunk[d], p->src->name, (long long)p1->chunk[d], (long long)d);
            return unknown();
        }
    }
    for (int64_t d = 0; d < c->ndev; d++) {
        uint64_t a = x[0].psub->sub[d], b = x[1].psub->sub[d];
        if (a & b) {
            lf_unsupported_suspect(c, KIND_WRONG_COLLECTIVE_GROUP, s->comp, in,
                                   "%s adds the share of %s of some device twice "
                                   "on device %lld",
                                   in->name, p->src->name, (long long)d);
            return unknown();
        }
        q->sub[d] = a | b;
    }
    q->at = in;
    q->at_comp = s->comp;
    lval r = {.kind = LV_PSUB, .cls = EID_NONE, .psub = q, .assumed = x[0].assumed || x[1].assumed};
    return settle(c, r);
}

/* ---- blocks placed into zeros ---- */

/* Device dev's block along a view dim (its combined coordinate, major first). */
static int64_t block_of(const mesh *m, const view_dim *vd, int64_t dev) {
    int64_t b = 0;
    for (uint32_t k = 0; k < vd->naxes; k++) b = b * m->sizes[vd->axes[k]] + mesh_coord(m, dev, vd->axes[k]);
    return b;
}

/* Whether offset operand o is beta(r)·len on every device r (beta NULL: 0). */
static bool offsets_at(const lift_ctx *c, const lval *o, const int64_t *beta, int64_t len) {
    if (o->kind != LV_DEV || o->count != 1) return false;
    for (int64_t r = 0; r < c->ndev; r++)
        if (o->dev[r] != (double)((beta ? beta[r] : 0) * len)) return false;
    return true;
}

/* lf_placed_block on in with operands ops; the placed dim in *pd when there
 * is one only (else -1). */
static bool placement(lift_ctx *c, const hlo_comp *comp, const hlo_instr *in, const lval *ops, lval *out, int *pd) {
    uint32_t rank = in->shape.rank;
    const lval *x = &ops[0], *u = &ops[1];
    if (in->op != OP_DYNAMIC_UPDATE_SLICE || in->noperands != 2 + rank || rank > VIEW_MAX_RANK || x->kind != LV_TERM ||
        u->kind != LV_TERM || !view_is_dup(&x->v) || x->v.partial || !lf_class_is_zero(c, x->cls) || u->v.rank != rank ||
        u->v.partial)
        return false;
    const shape *us = &comp->instrs[in->operands[1]].shape;
    lval r = *u;
    uint32_t placed = 0;
    int64_t *beta = xmalloc((size_t)c->ndev * sizeof *beta);
    bool ok = true;
    *pd = -1;
    for (uint32_t d = 0; d < rank && ok; d++) {
        const view_dim *vd = &u->v.dims[d];
        int64_t parts = vd->naxes ? view_dim_parts(&u->v, c->mesh, d) : 1;
        for (int64_t dev = 0; dev < c->ndev; dev++) beta[dev] = block_of(c->mesh, vd, dev);
        ok = parts >= 1 && us->dims[d] * parts == in->shape.dims[d] && offsets_at(c, &ops[2 + d], beta, us->dims[d]);
        if (!vd->naxes) continue;
        *pd = placed ? -2 : (int)d;
        for (uint32_t k = 0; k < vd->naxes; k++) placed |= 1u << vd->axes[k];
        r.v.dims[d].naxes = 0;
    }
    free(beta);
    if (!ok || !placed) return false;
    if (*pd < 0) *pd = -1;
    r.v.partial = (uint8_t)placed;
    r.v.red = RED_SUM;
    r.short_at = NULL;
    *out = r;
    return true;
}

/* dynamic-update-slice(zeros, u, offsets) where u is sharded and each
 * device writes its block at that block's place (offset(r) = block(r)·len
 * along every sharded dim, 0 along the others, u's dims whole there): on
 * device r, the global term with every block but r's zeroed, so their sum
 * over the axes u was sharded over is the term — a partial sum of it (a
 * psum of it is jax's all-gather written by hand). False otherwise. */
bool lf_placed_block(lstate *s, lval *out) {
    lift_ctx *c = s->c;
    int pd;
    if (c->baseline_mode || !placement(c, s->comp, s->in, s->ops, out, &pd)) return false;
    /* Along one dim, without a factor: blocks that more may join (a ring). */
    if (pd < 0 || lf_scale_of(out) != 1 || group_size(c->mesh, out->v.partial) > 64) return true;
    out->pid = ++c->npids;
    lval r = as_psub(c, out, s->comp, s->in);
    r.psub->pdim = pd;
    r.psub->plen = s->comp->instrs[s->in->operands[1]].shape.dims[pd];
    r.psub->paxes = s->ops[1].v.dims[pd];
    r.psub->at = s->in;
    r.psub->at_comp = s->comp;
    *out = r;
    return true;
}

/* The block of the placed term that u holds on every device (beta), when u
 * is that term with the other dims as the placed sum's view says: sharded
 * along pdim, or a window of whole blocks there (moved by a permute). */
static bool blocks_held(lift_ctx *c, const lift_psub *p, const lval *u, int64_t *beta) {
    const lval *b = &p->base;
    uint32_t k = (uint32_t)p->pdim;
    if ((u->kind != LV_TERM && u->kind != LV_WIN) || u->v.partial || u->cls == EID_NONE ||
        eg_find(c->g, u->cls) != eg_find(c->g, b->cls) || lf_scale_of(u) != lf_scale_of(b) || u->v.rank != b->v.rank)
        return false;
    for (uint32_t d = 0; d < b->v.rank; d++)
        if (d != k && !lf_same_dim(&u->v.dims[d], &b->v.dims[d])) return false;
    int64_t parts = 1;
    for (uint32_t j = 0; j < p->paxes.naxes; j++) parts *= c->mesh->sizes[p->paxes.axes[j]];
    if (u->kind == LV_TERM) {
        if (view_dim_parts(&u->v, c->mesh, k) != parts) return false;
        for (int64_t r = 0; r < c->ndev; r++) beta[r] = block_of(c->mesh, &u->v.dims[k], r);
        return true;
    }
    const lift_win *w = u->win;
    if (w->summed || w->dim != k || w->len != p->plen) return false;
    for (int64_t r = 0; r < c->ndev; r++) {
        int64_t first = w->idx[r * w->len];
        if (first < 0 || first % w->len || first / w->len >= parts) return false;
        for (int64_t l = 0; l < w->len; l++)
            if (w->idx[r * w->len + l] != first + l) return false;
        beta[r] = first / w->len;
    }
    return true;
}

/* dynamic-update-slice(acc, u, offsets) with acc a sum of placed blocks (or
 * the first placement itself) and u, on every device r, block beta(r) of the
 * same term written at its place: where acc does not hold that block yet
 * (zeros there), the share of the device that placed it added. false (the
 * op left to the others) when acc is no such sum. */
static bool place_more(lstate *s, lval *out) {
    lift_ctx *c = s->c;
    const hlo_instr *in = s->in;
    uint32_t rank = in->shape.rank;
    lval acc = s->ops[0];
    if (in->noperands != 2 + rank || rank > VIEW_MAX_RANK || acc.kind != LV_PSUB || acc.psub->pdim < 0 ||
        acc.psub->cdim >= 0)
        return false;
    const lift_psub *p = acc.psub;
    const shape *us = &s->comp->instrs[in->operands[1]].shape;
    int64_t *beta = arena_alloc(c->a, (size_t)c->ndev * sizeof *beta);
    bool ok = blocks_held(c, p, &s->ops[1], beta) && us->rank == rank;
    for (uint32_t d = 0; d < rank && ok; d++)
        ok = (int)d == p->pdim ? us->dims[d] == p->plen && offsets_at(c, &s->ops[2 + d], beta, p->plen)
                               : us->dims[d] == in->shape.dims[d] && offsets_at(c, &s->ops[2 + d], NULL, 1);
    if (!ok) {
        lf_unsupported(c, s->comp, in,
                       "%s writes into a sum of placed blocks of %s something that is no block of it at "
                       "its place",
                       in->name, p->src->name);
        *out = unknown();
        return true;
    }
    lift_psub *q = arena_alloc(c->a, sizeof *q);
    *q = *p;
    q->sub = arena_alloc(c->a, (size_t)c->ndev * sizeof *q->sub);
    for (int64_t r = 0; r < c->ndev; r++) {
        uint64_t bit = 0;
        for (int64_t e = 0; e < c->ndev && !bit; e++)
            if (pos_in(c->mesh, e, p->axes, true) == pos_in(c->mesh, r, p->axes, true) &&
                block_of(c->mesh, &p->paxes, e) == beta[r])
                bit = 1ull << pos_in(c->mesh, e, p->axes, false);
        if (!bit || (p->sub[r] & bit)) {
            lf_unsupported(c, s->comp, in, "%s writes block %lld of %s where device %lld already holds it", in->name,
                           (long long)beta[r], p->src->name, (long long)r);
            *out = unknown();
            return true;
        }
        q->sub[r] = p->sub[r] | bit;
    }
    q->at = in;
    q->at_comp = s->comp;
    *out = settle(c, (lval){.kind = LV_PSUB, .cls = EID_NONE, .psub = q, .assumed = acc.assumed || s->ops[1].assumed});
    return true;
}

/* dynamic-slice(x, offsets) of a partial sum x (or of sums of its shares)
 * at per-device offsets along one dim that is whole on every device,
 * chunk(r)·len there (not the same everywhere), 0 along the others: each
 * device's sums of that chunk. false (the op left to the others) when not
 * so. */
/* Whether a collective-permute or an add uses in's value (through copies):
 * chunks that go on to a ring, not an unreduced block left as it is. */
static bool moved_or_added(const hlo_comp *comp, const hlo_instr *in) {
    uint32_t at = (uint32_t)(in - comp->instrs);
    for (uint32_t j = at + 1; j < comp->ninstrs; j++) {
        const hlo_instr *y = &comp->instrs[j];
        for (uint32_t o = 0; o < y->noperands; o++) {
            if (y->operands[o] != at) continue;
            if (y->op == OP_COLLECTIVE_PERMUTE || y->op == OP_ADD) return true;
            if (y->op == OP_COPY && moved_or_added(comp, y)) return true;
        }
    }
    return false;
}

static bool chunked(lstate *s, lval *out) {
    lift_ctx *c = s->c;
    const hlo_instr *in = s->in;
    uint32_t rank = in->shape.rank;
    if (!moved_or_added(s->comp, in)) return false;
    lval x = s->ops[0];
    const shape *xs = &s->comp->instrs[in->operands[0]].shape;
    if (in->noperands != 1 + rank || rank > VIEW_MAX_RANK || xs->rank != rank) return false;
    if (x.kind == LV_PSUB && (x.psub->pdim >= 0 || x.psub->cdim >= 0)) return false;
    int k = -1;
    for (uint32_t d = 0; d < rank; d++) {
        const lval *o = &s->ops[1 + d];
        if (offsets_at(c, o, NULL, 1) && in->shape.dims[d] == xs->dims[d]) continue;
        if (k >= 0 || o->kind != LV_DEV || o->count != 1 || in->shape.dims[d] <= 0) return false;
        k = (int)d;
    }
    if (k < 0) return false;
    int64_t len = in->shape.dims[k], *ch = arena_alloc(c->a, (size_t)c->ndev * sizeof *ch);
    bool varies = false;
    for (int64_t r = 0; r < c->ndev; r++) {
        double off = s->ops[1 + k].dev[r];
        if (off < 0 || off + (double)len > (double)xs->dims[k] || fmod(off, (double)len) != 0) return false;
        ch[r] = (int64_t)(off / (double)len);
        varies |= ch[r] != ch[0];
    }
    if (!varies) return false;
    if (x.kind == LV_TERM) x = as_psub(c, &x, s->comp, &s->comp->instrs[in->operands[0]]);
    if (x.psub->base.v.dims[k].naxes) return false;
    lift_psub *q = arena_alloc(c->a, sizeof *q);
    *q = *x.psub;
    q->cdim = k;
    q->clen = len;
    q->chunk = ch;
    q->at = in;
    q->at_comp = s->comp;
    lval r = x;
    r.psub = q;
    *out = r;
    return true;
}

bool lf_psub_instr(lstate *s, lval *out) {
    lift_ctx *c = s->c;
    const hlo_instr *in = s->in;
    if (c->baseline_mode) return false;
    bool any = false;
    for (uint32_t o = 0; o < in->noperands; o++) any |= s->ops[o].kind == LV_PSUB;
    if (in->op == OP_COLLECTIVE_PERMUTE && in->noperands == 1 && (any || enters(c, &s->ops[0]))) {
        *out = permute(s);
        return true;
    }
    if (in->op == OP_DYNAMIC_UPDATE_SLICE && in->noperands >= 2 && any && place_more(s, out)) return true;
    if (in->op == OP_DYNAMIC_SLICE && in->noperands >= 1 && (any || enters(c, &s->ops[0])) && chunked(s, out)) return true;
    if (!any) return false;
    if (in->op == OP_ADD && in->noperands == 2) {
        *out = add(s);
        return true;
    }
    /* A sum over the devices takes each share as often as the sets hold it. */
    if (in->op == OP_ALL_REDUCE && in->noperands == 1 && instr_reducer(c->cur, in) == RED_SUM && summed(s, out)) return true;
    /* Sets that are the partial sum itself (blocks placed, each device its
     * own): that partial sum, for the op to take as any other. */
    bool own = true;
    for (uint32_t o = 0; o < in->noperands; o++) {
        const lift_psub *p = s->ops[o].psub;
        if (s->ops[o].kind != LV_PSUB) continue;
        for (int64_t d = 0; d < c->ndev && own; d++) own = p->sub[d] == 1ull << pos_in(c->mesh, d, p->axes, false);
        own &= p->cdim < 0;  /* (the base carries its factor on) */
    }
    for (uint32_t o = 0; o < in->noperands && own; o++)
        if (s->ops[o].kind == LV_PSUB) {
            bool assumed = s->ops[o].assumed;
            s->ops[o] = s->ops[o].psub->base;
            s->ops[o].assumed |= assumed;
        }
    if (own) return false;
    for (uint32_t o = 0; o < in->noperands; o++)
        if (s->ops[o].kind == LV_PSUB) {
            const lift_psub *p = s->ops[o].psub;
            lf_unsupported_suspect(c, KIND_MISSING_ALL_REDUCE, p->at_comp, p->at,
                                   "%s leaves some devices with the sum of only "
                                   "some devices' shares of the partial sum %s, and %s uses it in a way not related yet",
                                   p->at->name, p->src->name, in->name);
            break;
        }
    *out = unknown();
    return true;
}

/* Whether some choice of the shares (one number each, summing to 1) gives
 * every device of each group the sum 1: a linear system over the reals,
 * solved by elimination. When none does, no values of the shares make the
 * sets the complete value (but where the value is zero). */
static bool completable(const lift_ctx *c, const lift_psub *p) {
    int64_t n = group_size(c->mesh, p->axes);
    bool ok = true;
    for (int64_t g = 0; ok; g++) {
        int64_t rows = 0;
        for (int64_t d = 0; d < c->ndev; d++) rows += pos_in(c->mesh, d, p->axes, true) == g;
        if (!rows) break;
        rows++;
        double *a = xcalloc((size_t)(rows * (n + 1)), sizeof *a);
        int64_t r = 0;
        for (int64_t d = 0; d < c->ndev; d++) {
            if (pos_in(c->mesh, d, p->axes, true) != g) continue;
            for (int64_t e = 0; e < n; e++) a[r * (n + 1) + e] = (double)(p->sub[d] >> e & 1);
            a[r * (n + 1) + n] = 1;
            r++;
        }
        for (int64_t e = 0; e < n; e++) a[r * (n + 1) + e] = 1;
        a[r * (n + 1) + n] = 1;
        /* Row echelon form; inconsistent when a row reads 0 = nonzero. */
        int64_t piv = 0;
        for (int64_t col = 0; col < n && piv < rows; col++) {
            int64_t best = piv;
            for (int64_t i = piv + 1; i < rows; i++)
                if (fabs(a[i * (n + 1) + col]) > fabs(a[best * (n + 1) + col])) best = i;
            if (fabs(a[best * (n + 1) + col]) < 1e-9) continue;
            for (int64_t j = 0; j <= n; j++) {
                double t = a[piv * (n + 1) + j];
                a[piv * (n + 1) + j] = a[best * (n + 1) + j];
                a[best * (n + 1) + j] = t;
            }
            for (int64_t i = 0; i < rows; i++) {
                if (i == piv) continue;
                double f = a[i * (n + 1) + col] / a[piv * (n + 1) + col];
                for (int64_t j = 0; j <= n; j++) a[i * (n + 1) + j] -= f * a[piv * (n + 1) + j];
            }
            piv++;
        }
        for (int64_t i = piv; i < rows && ok; i++) ok = fabs(a[i * (n + 1) + n]) < 1e-9;
        free(a);
    }
    return ok;
}

void lift_psub_at_output(lift_ctx *c, lval *o, const view *want, eid bout) {
    if (o->kind != LV_PSUB) return;
    const lift_psub *p = o->psub;
    /* Expected: the partial sum's term, complete over the axes (else the
     * sets might be just what the baseline computes: a sum of some shares,
     * a prefix over the devices). Then every set must be the whole sum. */
    view whole = p->base.v;
    whole.partial &= (uint8_t)~p->axes;
    if (!whole.partial) whole.red = RED_NONE;
    bool complete = bout != EID_NONE && p->cdim < 0 && !o->assumed && !p->base.assumed && lf_scale_of(&p->base) == 1 &&
        eg_find(c->g, p->base.cls) == eg_find(c->g, bout) && view_equal(&whole, want);
    if (complete && !completable(c, p)) {
        int64_t d = 0;
        while (d + 1 < c->ndev && p->sub[d] == along(c->mesh, c->ndev, d, p->axes, p->axes)) d++;
        strbuf ax;
        sb_init(&ax);
        lf_axes_words(&ax, c, p->axes);
        if (p->pdim >= 0)
            lf_finding(c, KIND_MISSING_ALL_REDUCE, p->at_comp, p->at,
                       "%s leaves device %lld without some devices' blocks (dimension %d, placed by %s, over %s): the "
                       "value is never gathered whole",
                       p->at->name, (long long)d, p->pdim, p->src->name, ax.s);
        else
            lf_finding(c, KIND_MISSING_ALL_REDUCE, p->at_comp, p->at,
                       "%s leaves device %lld with the sum of only some devices' "
                       "shares of the partial sum %s over %s (no choice of the shares makes every device hold their "
                       "whole sum): the sum over the group is never complete",
                       p->at->name, (long long)d, p->src->name, ax.s);
        sb_free(&ax);
        return;
    }
    /* A partial sum is expected: read as one when every share is counted once. */
    if ((want->partial & p->axes) && p->cdim < 0 && uniform_count(c, p) == 1) {
        bool assumed = o->assumed;
        *o = p->base;
        o->assumed |= assumed;
        lf_unscale(c, o); /* outputs carry no factor (lift_distributed put the others back) */
        return;
    }
    lf_unsupported(c, p->at_comp, p->at,
                   "%s leaves the devices with sums of some devices' shares of the partial sum %s "
                   "that are no view of it",
                   p->at->name, p->src->name);
}
