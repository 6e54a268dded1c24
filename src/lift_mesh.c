/* lift_mesh — the mesh as collectives see it (lift.c lifts them).
 * Owns reading replica groups as mesh axes (lift_groups_axes,
 * lf_collective_axes, which says why when they name none), refining the mesh
 * into sub-axes where groups use part of an axis (lift_refine_mesh, before
 * lifting), and the mesh-coordinate helpers the transfer functions share:
 * axis words for messages (lf_axes_words), the view dim of a set of axes
 * (lf_axes_dim) and per-device offsets read as blocks of axes
 * (lf_block_offsets). */
#include "lift.h"
#include "lift_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- replica groups → mesh axes ---- */

static int groups_axes_on(const mesh *ms, int64_t replicas, const hlo_instr *in, bool ordered, view_dim *order, char *why,
                          size_t nwhy);

int lift_groups_axes(const lift_ctx *c, const hlo_instr *in, bool ordered) {
    char why[160];
    int axes = groups_axes_on(c->mesh, graph_num_replicas(c->dist), in, ordered, NULL, why, sizeof why);
    return axes >= 0 ? axes : -1;
}

int lift_groups_order(const lift_ctx *c, const hlo_instr *in, view_dim *order) {
    char why[160];
    int axes = groups_axes_on(c->mesh, graph_num_replicas(c->dist), in, true, order, why, sizeof why);
    return axes >= 0 ? axes : -1;
}

/* Whether order lists the axes of mask but those of size 1 in mesh order. */
static bool mesh_ordered(const mesh *ms, const view_dim *order, uint32_t mask) {
    uint32_t k = 0;
    for (uint32_t a = 0; a < ms->naxes; a++)
        if (mask >> a & 1 && ms->sizes[a] > 1 && (k >= order->naxes || order->axes[k++] != a)) return false;
    return k == order->naxes;
}

/* The axes of mask but those of size 1, major first, in the order in which
 * the position of every device within its group (pos, n devices) is its
 * row-major index over them, into *out; false when there is none. */
static bool group_order(const mesh *ms, uint32_t mask, const int64_t *pos, int64_t n, view_dim *out) {
    int64_t stride[MESH_MAX_AXES], step = 1;
    uint32_t na = 0;
    *out = (view_dim){0};
    for (int a = (int)ms->naxes - 1; a >= 0; a--) {
        /* device 0 with coordinate a one higher: device `step` (ids are row-major) */
        if (mask >> a & 1 && ms->sizes[a] > 1) {
            if (step >= n) return false;
            stride[a] = pos[step] - pos[0];
            out->axes[na++] = (uint8_t)a;
        }
        step *= ms->sizes[a];
    }
    out->naxes = (uint8_t)na;
    for (uint32_t i = 1; i < na; i++) /* major first: strides descending */
        for (uint32_t j = i; j > 0 && stride[out->axes[j]] > stride[out->axes[j - 1]]; j--) {
            uint8_t t = out->axes[j];
            out->axes[j] = out->axes[j - 1];
            out->axes[j - 1] = t;
        }
    int64_t want = 1;
    for (uint32_t i = na; i-- > 0;) {
        if (stride[out->axes[i]] != want) return false;
        want *= ms->sizes[out->axes[i]];
    }
    for (int64_t d = 0; d < n; d++) {
        int64_t p = 0;
        for (uint32_t i = 0; i < na; i++) p += mesh_coord(ms, d, out->axes[i]) * stride[out->axes[i]];
        if (p != pos[d]) return false;
    }
    return true;
}

/* The mesh axes (bitmask) instruction in's replica groups run over; -1 when they match
 * none, -2 when they name no devices, -3 when they are written in a form
 * groups_expand cannot expand. */
static int groups_axes_on(const mesh *ms, int64_t replicas, const hlo_instr *in, bool ordered, view_dim *order, char *why,
                          size_t nwhy) {
    int64_t n = mesh_devices(ms), *ids = NULL;
    uint32_t *start = NULL, ng = 0;
    if (replicas < 1 || n % replicas) return -1;
    const hlo_attr *ga = instr_attr(in, A_REPLICA_GROUPS);
    if (ga && !groups_expandable(ga->v.groups)) return -3;
    if (!graph_device_groups(in, replicas, n / replicas, &ids, &start, &ng, why, nwhy)) return -2;
    /* Group number and position of every device under the instruction. */
    int64_t *grp = xmalloc((size_t)n * sizeof *grp), *pos = xmalloc((size_t)n * sizeof *pos);
    bool ok = true;
    for (int64_t d = 0; d < n; d++) grp[d] = -1;
    for (uint32_t k = 0; k < ng && ok; k++)
        for (uint32_t j = start[k]; j < start[k + 1]; j++) {
            int64_t d = ids[j];
            if (d < 0 || d >= n || grp[d] >= 0) { ok = false; break; }
            grp[d] = k;
            pos[d] = j - start[k];
        }
    for (int64_t d = 0; d < n && ok; d++) ok = grp[d] >= 0;
    free(ids);
    free(start);
    int found = -1;
    int64_t *kgrp = xmalloc((size_t)n * sizeof *kgrp), *gkey = xmalloc((size_t)n * sizeof *gkey);
    for (uint32_t mask = 0; ok && mask < (1u << ms->naxes) && found < 0; mask++) {
        /* Devices agree on the axes outside mask ⇔ same group; ordered, the
         * position is the row-major index over the mask axes, in mesh order
         * or (order given) in the order the groups list them. */
        bool match = true;
        for (int64_t k = 0; k < n; k++) kgrp[k] = gkey[k] = -1;
        for (int64_t d = 0; d < n && match; d++) {
            /* same key (coordinates off the mask) <=> same group: one group per key, one key per group */
            int64_t key = 0;
            for (uint32_t a = 0; a < ms->naxes; a++)
                if (!(mask >> a & 1)) key = key * ms->sizes[a] + mesh_coord(ms, d, (int)a);
            if (kgrp[key] < 0 && gkey[grp[d]] < 0) kgrp[key] = grp[d], gkey[grp[d]] = key;
            match = kgrp[key] == grp[d] && gkey[grp[d]] == key;
        }
        view_dim o;
        if (match && ordered) match = group_order(ms, mask, pos, n, &o) && (order || mesh_ordered(ms, &o, mask));
        if (match) {
            found = (int)mask;
            if (order) *order = o;
        }
    }
    free(grp);
    free(pos);
    free(kgrp);
    free(gkey);
    return found;
}

/* ---- sub-axes: a mesh axis split where replica groups use part of it ---- */

/* Splits axis a of m into (a.0: size/f, a.1: f), a.1 inserted right after a:
 * device ids are unchanged (row-major). */
static void split_mesh_axis(mesh *m, uint32_t a, int64_t f) {
    for (uint32_t k = m->naxes; k > a + 1; k--) {
        memcpy(m->names[k], m->names[k - 1], sizeof m->names[k]);
        m->sizes[k] = m->sizes[k - 1];
    }
    m->naxes++;
    m->sizes[a] /= f;
    m->sizes[a + 1] = f;
    char base[32];
    snprintf(base, sizeof base, "%s", m->names[a]);
    snprintf(m->names[a], sizeof m->names[a], "%.28s.0", base);
    snprintf(m->names[a + 1], sizeof m->names[a + 1], "%.28s.1", base);
}

/* The views after that split: a use of axis a becomes (a.0, a.1), the same
 * blocks (a = a.0·f + a.1); later axes shift by one. */
static void split_view_axis(view *vs, uint32_t nv, uint32_t a) {
    for (uint32_t i = 0; i < nv; i++) {
        view *v = &vs[i];
        for (uint32_t d = 0; d < v->rank; d++) {
            view_dim nd = {0};
            for (uint32_t k = 0; k < v->dims[d].naxes; k++) {
                uint8_t x = v->dims[d].axes[k];
                nd.axes[nd.naxes++] = (uint8_t)(x > a ? x + 1 : x);
                if (x == a) nd.axes[nd.naxes++] = (uint8_t)(a + 1);
            }
            v->dims[d] = nd;
        }
        uint32_t p = v->partial, lo = p & ((1u << (a + 1)) - 1), hi = p >> (a + 1);
        v->partial = (uint8_t)(lo | hi << (a + 2) | (p >> a & 1) << (a + 1));
    }
}

/* Moves unit axis a (size 1: it splits nothing) of m to its unit names, to
 * make room for a split: a view that names it is unsharded along it and not
 * partial over it (a sum over one device is the value); later axes shift
 * down by one. False when the unit names are full. */
static bool drop_unit_axis(mesh *m, view *vs, uint32_t nv, view *ws, uint32_t nw, uint32_t a) {
    if (m->sizes[a] != 1 || m->nunit == ARRAY_LEN(m->unit)) return false;
    memcpy(m->unit[m->nunit++], m->names[a], sizeof m->names[a]);
    for (uint32_t k = a; k + 1 < m->naxes; k++) {
        memcpy(m->names[k], m->names[k + 1], sizeof m->names[k]);
        m->sizes[k] = m->sizes[k + 1];
    }
    m->naxes--;
    for (uint32_t i = 0; i < nv + nw; i++) {
        view *v = i < nv ? &vs[i] : &ws[i - nv];
        for (uint32_t d = 0; d < v->rank; d++) {
            view_dim nd = {0};
            for (uint32_t k = 0; k < v->dims[d].naxes; k++) {
                uint8_t x = v->dims[d].axes[k];
                if (x != a) nd.axes[nd.naxes++] = (uint8_t)(x > a ? x - 1 : x);
            }
            v->dims[d] = nd;
        }
        uint32_t p = v->partial;
        v->partial = (uint8_t)((p & ((1u << a) - 1)) | (p >> (a + 1)) << a);
    }
    return true;
}

/* Whether groups must follow device order (gather/scatter/all-to-all blocks);
 * -1 for ops without mesh-axis groups. */
static int collective_order(int op) {
    switch (op) {
    case OP_ALL_REDUCE: return 0;
    case OP_ALL_GATHER: case OP_REDUCE_SCATTER: case OP_ALL_TO_ALL: return 1;
    default: return -1;
    }
}

/* Whether a collective-permute's pairs (partition ids, one replica) move
 * whole mesh coordinates: every axis a of a source is one axis of its target
 * of the same size (mesh positions transposed, as GSPMD reshards between
 * axes). Pairs that name no such map are left to the lifting to judge. */
static bool permute_on(const mesh *m, const hlo_instr *in) {
    const hlo_attr *pa = instr_attr(in, A_SOURCE_TARGET_PAIRS);
    int64_t n = mesh_devices(m);
    if (!pa || !instr_attr(in, A_CHANNEL_ID)) return true;
    arena tmp;
    arena_init(&tmp);
    hlo_groups g = {0};
    groups_expand(pa->v.groups, &tmp, &g);
    int64_t *from = xmalloc((size_t)n * sizeof *from);
    bool ok = true, named = true;
    for (int64_t t = 0; t < n; t++) from[t] = -1;
    for (uint32_t k = 0; k < g.ngroups && named; k++) {
        named = g.start[k + 1] - g.start[k] == 2;
        int64_t a = named ? g.ids[g.start[k]] : -1, b = named ? g.ids[g.start[k] + 1] : -1;
        named = named && a >= 0 && b >= 0 && a < n && b < n;
        if (named) from[b] = a;
    }
    for (uint32_t a = 0; a < m->naxes && ok && named; a++) {
        bool found = false;
        for (uint32_t b = 0; b < m->naxes && !found; b++) {
            found = m->sizes[b] == m->sizes[a];
            for (int64_t t = 0; t < n && found; t++)
                found = from[t] < 0 || mesh_coord(m, from[t], (int)a) == mesh_coord(m, t, (int)b);
        }
        ok = found;
    }
    free(from);
    arena_free(&tmp);
    return ok || !named;
}

/* Whether collective in's groups (or pairs) map onto mesh axes of m; true
 * for other ops. */
static bool maps_on(const mesh *m, int64_t replicas, const hlo_instr *in) {
    char why[160];
    int ord = collective_order(in->op);
    view_dim o;
    if (ord >= 0) return !instr_attr(in, A_REPLICA_GROUPS) || groups_axes_on(m, replicas, in, ord, &o, why, sizeof why) >= 0;
    return in->op != OP_COLLECTIVE_PERMUTE || replicas != 1 || permute_on(m, in);
}

bool lift_refine_mesh(relations *rel, const hlo_module *dist) {
    bool changed = false;
    int64_t replicas = graph_num_replicas(dist);
    for (uint32_t ci = 0; ci < dist->ncomps; ci++)
        for (uint32_t i = 0; i < dist->comps[ci].ninstrs; i++) {
            const hlo_instr *in = &dist->comps[ci].instrs[i];
            if (maps_on(&rel->mesh, replicas, in)) continue;
            bool done = false;
            /* A full mesh makes room by dropping an axis of size 1. */
            for (uint32_t a = rel->mesh.naxes; a-- > 0 && rel->mesh.naxes == MESH_MAX_AXES;)
                if (drop_unit_axis(&rel->mesh, rel->inputs, rel->ninputs, rel->outputs, rel->noutputs, a)) changed = true;
            for (uint32_t a = 0; a < rel->mesh.naxes && !done && rel->mesh.naxes < MESH_MAX_AXES; a++)
                for (int64_t f = 2; f < rel->mesh.sizes[a] && !done; f++) {
                    mesh t = rel->mesh;
                    if (t.sizes[a] % f) continue;
                    split_mesh_axis(&t, a, f);
                    if (!maps_on(&t, replicas, in)) continue;
                    rel->mesh = t;
                    split_view_axis(rel->inputs, rel->ninputs, a);
                    split_view_axis(rel->outputs, rel->noutputs, a);
                    done = changed = true;
                }
        }
    return changed;
}

bool lift_split_mesh_axis(relations *rel, uint32_t a, int64_t f) {
    if (a >= rel->mesh.naxes || f < 2 || f >= rel->mesh.sizes[a] || rel->mesh.sizes[a] % f) return false;
    /* A full mesh makes room by dropping an axis of size 1 (never a: it is
     * larger than f). */
    for (uint32_t u = rel->mesh.naxes; u-- > 0 && rel->mesh.naxes == MESH_MAX_AXES;)
        if (drop_unit_axis(&rel->mesh, rel->inputs, rel->ninputs, rel->outputs, rel->noutputs, u) && u < a) a--;
    if (rel->mesh.naxes == MESH_MAX_AXES) return false;
    split_mesh_axis(&rel->mesh, a, f);
    split_view_axis(rel->inputs, rel->ninputs, a);
    split_view_axis(rel->outputs, rel->noutputs, a);
    return true;
}

/* ---- mesh coordinates for the transfer functions ---- */

void lf_axes_words(strbuf *b, const lift_ctx *c, uint32_t mask) {
    bool first = true;
    for (uint32_t a = 0; a < c->mesh->naxes; a++)
        if (mask >> a & 1) {
            sb_printf(b, "%s%s", first ? "" : ",", c->mesh->names[a]);
            first = false;
        }
    if (first) sb_puts(b, "no axis");
}

/* The mesh axes a collective's groups span, or -1 after saying why: a finding
 * on a declared mesh, undecided on a mesh inferred from shardings. */
int lf_collective_axes(lstate *s, bool ordered, view_dim *order) {
    lift_ctx *c = s->c;
    int64_t R = graph_num_replicas(c->dist), D = mesh_devices(c->mesh);
    char why[160];
    view_dim o;
    int axes = groups_axes_on(c->mesh, R, s->in, ordered, &o, why, sizeof why);
    if (axes >= 0 && ordered && !order && !mesh_ordered(c->mesh, &o, (uint32_t)axes)) {
        /* groups over a tuple of axes listed out of mesh order, for an op
         * that takes them only in mesh order */
        strbuf w;
        sb_init(&w);
        lf_axes_words(&w, c, (uint32_t)axes);
        lf_unsupported(c, s->comp, s->in, "the replica groups of %s run over %s in another order than the mesh's: not related "
                       "yet for this op", s->in->name, w.s);
        sb_free(&w);
        return -1;
    }
    if (axes >= 0 && order) *order = o;
    if (axes >= 0) return axes;
    if (axes == -3) {
        lf_unsupported(c, s->comp, s->in, "the replica groups of %s are written in a form this reader does not expand",
                       s->in->name);
        return -1;
    }
    if (axes == -2) {
        /* Groups that name no devices at all, as XLA reads them for the group mode. */
        static const char *const named[] = {"replicas (no channel_id)", "partitions", ("replicas, each across every partition "
                                            "(a channel_id without use_global_device_ids)"), "devices"};
        lf_finding(c, KIND_WRONG_COLLECTIVE_GROUP, s->comp, s->in, "the replica groups of %s name %s: %s (%lld replica%s, %lld "
                   "partition%s)", s->in->name, named[graph_group_mode(s->in)], why, (long long)R, R == 1 ? "" : "s",
                   (long long)(D / R), D / R == 1 ? "" : "s");
        return -1;
    }
    /* (groups that match no mesh axes are wrong whatever reading the
     * operand has: no partial reading decides this one) */
    bool unsure = c->partial_unsure_now;
    c->partial_unsure_now = false;
    if (c->mesh_inferred)
        lf_unsupported(c, s->comp, s->in, "the replica groups of %s match no axis of the mesh inferred from the shardings",
                    s->in->name);
    else
        lf_finding(c, KIND_WRONG_COLLECTIVE_GROUP, s->comp, s->in, "the replica groups of %s match no set of mesh axes%s",
                s->in->name, ordered ? " (in device order)" : "");
    c->partial_unsure_now = unsure;
    return -1;
}

/* The mesh axes (bitmask, ≥ 1) whose combined block index r gives every
 * device's value as base + index·size (values per device: vals[d·count]);
 * 0 when none. *parts is the number of blocks. */
uint32_t lf_block_offsets(const lift_ctx *c, const double *vals, uint32_t count, int64_t size, int64_t *base,
                          int64_t *parts, view_dim *axes) {
    for (uint32_t mask = 1; mask < (1u << c->mesh->naxes); mask++) {
        int64_t p = 1;
        for (uint32_t a = 0; a < c->mesh->naxes; a++)
            if (mask >> a & 1) p *= c->mesh->sizes[a];
        bool match = true;
        int64_t b = (int64_t)vals[0];
        for (int64_t r = 0; r < c->ndev && match; r++) {
            int64_t idx = 0;
            for (uint32_t a = 0; a < c->mesh->naxes; a++)
                if (mask >> a & 1) idx = idx * c->mesh->sizes[a] + mesh_coord(c->mesh, r, (int)a);
            match = (int64_t)vals[r * count] == b + idx * size;
        }
        if (match) {
            *base = b;
            *parts = p;
            *axes = lf_axes_dim(c, mask);
            return mask;
        }
    }
    /* the axes in another order than the mesh's (a tuple of axes listed so) */
    int64_t b0 = (int64_t)vals[0], *blk = xmalloc((size_t)c->ndev * sizeof *blk), nb = 1;
    bool ok = size > 0;
    for (int64_t r = 0; r < c->ndev && ok; r++) {
        int64_t o = (int64_t)vals[r * count] - b0;
        ok = (double)(int64_t)vals[r * count] == vals[r * count] && o >= 0 && o % size == 0;
        blk[r] = ok ? o / size : 0;
        if (blk[r] + 1 > nb) nb = blk[r] + 1;
    }
    ok = ok && nb > 1 && lf_axes_of_blocks(c, blk, nb, axes);
    free(blk);
    if (!ok) return 0;
    uint32_t mask = 0;
    for (uint32_t k = 0; k < axes->naxes; k++) mask |= 1u << axes->axes[k];
    *base = b0;
    *parts = nb;
    return mask;
}

int64_t lf_dim_block(const lift_ctx *c, const view_dim *vd, int64_t r) {
    int64_t b = 0;
    for (uint32_t k = 0; k < vd->naxes; k++) b = b * c->mesh->sizes[vd->axes[k]] + mesh_coord(c->mesh, r, vd->axes[k]);
    return b;
}

view_dim lf_axes_dim(const lift_ctx *c, uint32_t mask) {
    view_dim vd = {0};
    for (uint32_t a = 0; a < c->mesh->naxes; a++)
        if (mask >> a & 1) vd.axes[vd.naxes++] = (uint8_t)a;
    return vd;
}
