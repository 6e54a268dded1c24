/* lift_layout — all-to-all and the layouts it leaves (atomic factors):
 * a value whose dims are split, moved and merged over mesh axes, carried as
 * a layout until it reads back as a viewed term; and the gather/scatter
 * readings that go with it. The walk (lift.c) reaches these through lf_.
 */
#include "eattr.h"
#include "lift.h"
#include "lift_int.h"
#include "interp.h"
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "segrun.h"

/* ---- all-to-all and the layouts it leaves (atomic factors) ---- */

/* Back to a plain view when the local dims, read in order, are the free atoms
 * of the global term in its row-major order and every bound atom stands just
 * before the free atoms of one local dim (it is that dim's major part: blocked
 * sharding). The term is then the global term reshaped so that each local dim,
 * with the bound atoms before it, is one global dim. Where a bound atom could
 * go to a local dim of size 1 or to the next one, it goes to the size-1 dim
 * when its global dim has no free atom (a dim bound whole keeps its own
 * place); either reading is exact, this one keeps the global dims apart.
 * Without `reshaped`, only when the local dims are the global dims (no
 * reshape of the term). */
static bool layout_reading(lift_ctx *c, const lval *x, const shape *local, bool reshaped, bool units_take, lval *out) {
    const lift_layout *L = x->lay;
    if (local->rank != L->ndims || L->ndims > VIEW_MAX_RANK || L->grank > VIEW_MAX_RANK) return false;
    layout_atom ga[2 * VIEW_MAX_RANK];
    bool gbound[2 * VIEW_MAX_RANK];
    uint32_t ng = 0;
    for (uint32_t g = 0; g < L->grank; g++) {
        if (L->split[g] > 1) {
            gbound[ng] = L->bound[g] >= 0;
            ga[ng++] = (layout_atom){(uint8_t)g, 0, L->split[g]};
        }
        int64_t minor = L->gdims[g] / L->split[g];
        if (minor > 1) {
            gbound[ng] = false;
            ga[ng++] = (layout_atom){(uint8_t)g, 1, minor};
        }
    }
    view v = view_dup(L->ndims);
    int64_t gd[VIEW_MAX_RANK];
    uint32_t p = 0;
    for (uint32_t k = 0; k < L->ndims; k++) {
        int64_t size = 1;
        int first = -1;
        while (p < ng && gbound[p] && (units_take || L->natoms[k] != 0)) {
            if (L->natoms[k] == 0 && first >= 0 && ga[p].gdim != first) break;
            if (L->natoms[k] == 0 && first < 0) {
                /* A size-1 local dim takes a bound atom only of a dim bound whole. */
                bool whole = !(p + 1 < ng && !gbound[p + 1] && ga[p + 1].gdim == ga[p].gdim);
                if (!whole) break;
            }
            first = ga[p].gdim;
            view_dim *vd = &v.dims[k];
            if (vd->naxes + L->naxes[ga[p].gdim] > MESH_MAX_AXES) return false;
            memcpy(vd->axes + vd->naxes, L->axes[ga[p].gdim], L->naxes[ga[p].gdim]);
            vd->naxes = (uint8_t)(vd->naxes + L->naxes[ga[p].gdim]);
            size *= ga[p++].size;
        }
        int64_t prod = 1;
        for (uint32_t j = 0; j < L->natoms[k]; j++) {
            const layout_atom *a = &L->atoms[k][j];
            if (p >= ng || gbound[p] || ga[p].gdim != a->gdim || ga[p].part != a->part || ga[p].size != a->size) return false;
            prod *= ga[p++].size;
        }
        if (prod != local->dims[k]) return false;
        gd[k] = size * prod;
    }
    if (p != ng) return false;
    bool same = L->ndims == L->grank;
    for (uint32_t k = 0; k < L->ndims && same; k++) same = gd[k] == L->gdims[k];
    if (!same && !reshaped) return false;
    eid cls = same ? x->cls : lf_mk_reshape(c, x->cls, lf_type_of(c, local->dtype, gd, L->ndims), c->origin);
    *out = term(cls, v, x->assumed);
    return true;
}

/* The layout as a plain view. A bound atom of a dim bound whole may go to a
 * size-1 local dim before it or be the major part of the next local dim:
 * both readings are exact; the size-1 dim takes it (keeping global dims
 * apart) unless only the other reading's term is one the baseline has (an
 * all-to-all that regroups heads: [1, 2·4] back to one dim of 8). */
bool lf_layout_to_term(lift_ctx *c, const lval *x, const shape *local, bool reshaped, lval *out) {
    lval a, b;
    bool ok = layout_reading(c, x, local, reshaped, true, &a);
    if (ok && (eg_class_origin(c->g, a.cls) & EG_BASELINE)) {
        *out = a;
        return true;
    }
    if (reshaped && layout_reading(c, x, local, reshaped, false, &b) && (eg_class_origin(c->g, b.cls) & EG_BASELINE) &&
        (!ok || !view_equal(&a.v, &b.v))) {
        *out = b;
        out->ambiguous = true;
        return true;
    }
    if (ok) *out = a;
    return ok;
}

/* The all-to-all of a dim e sharded over more axes than the exchanged ones:
 * e's axes (major first) hold the exchanged axes as one run (ascending when
 * several: the group's member order). Block b of e is then the mixed-radix
 * number of the device's coordinates on e's axes, so the term is read with e
 * split into one global dim per axis (its size) and the minor block: the
 * dims of the other axes stay bound to them, those of the exchanged axes move
 * to the major part of dim cd, whose major part (one chunk per member) is
 * bound to the exchanged axes. A layout over that reshaped term (global rank
 * rank + naxes(e)); it reads back as a plain view where later reshapes and
 * transposes put the moved blocks back beside e's minor block. */
static bool blocks_moved_within(lstate *s, const lval *x, uint32_t e, uint32_t cd, uint32_t axes, lval *out) {
    lift_ctx *c = s->c;
    const hlo_instr *src = &s->comp->instrs[s->in->operands[0]];
    uint32_t rank = src->shape.rank, k = x->v.dims[e].naxes;
    if (rank + k > VIEW_MAX_RANK) return false;
    int64_t n = 1;
    for (uint32_t m = 0; m < k; m++)
        if (axes & (1u << x->v.dims[e].axes[m])) n *= c->mesh->sizes[x->v.dims[e].axes[m]];
    if (n < 2 || src->shape.dims[cd] % n) return false;
    lift_layout *L = arena_alloc(c->a, sizeof *L);
    memset(L, 0, sizeof *L);
    L->grank = rank + k;
    L->ndims = rank;
    for (uint32_t q = 0, g = 0; q < rank; q++) {
        int64_t parts = view_dim_parts(&x->v, c->mesh, q);
        if (parts < 1) return false;
        if (q != e) {
            L->gdims[g] = src->shape.dims[q] * parts;
            L->split[g] = parts;
            L->bound[g] = parts > 1 ? 1 : -1;
            L->naxes[g] = x->v.dims[q].naxes;
            memcpy(L->axes[g], x->v.dims[q].axes, L->naxes[g]);
            if (q == cd) {
                /* one chunk per member, bound to the exchanged axes: within
                 * the block of cd's own axes when cd is sharded too (block
                 * number: cd's coordinates, then the member's, major first) */
                L->split[g] = parts * n;
                L->bound[g] = 1;
                if (L->naxes[g] + (uint32_t)__builtin_popcount(axes) > MESH_MAX_AXES) return false;
                for (uint32_t m = 0; m < k; m++)
                    if (axes & (1u << x->v.dims[e].axes[m])) L->axes[g][L->naxes[g]++] = x->v.dims[e].axes[m];
                for (uint32_t m = 0, ge = e < cd ? e : e + k; m < k; m++)
                    if (axes & (1u << x->v.dims[e].axes[m]))
                        L->atoms[q][L->natoms[q]++] = (layout_atom){(uint8_t)(ge + m), 0, c->mesh->sizes[x->v.dims[e].axes[m]]};
            }
            if (L->gdims[g] / L->split[g] > 1) L->atoms[q][L->natoms[q]++] = (layout_atom){(uint8_t)g, 1, L->gdims[g] / L->split[g]};
            g++;
            continue;
        }
        for (uint32_t m = 0; m < k; m++, g++) {
            int ax = x->v.dims[e].axes[m];
            L->gdims[g] = L->split[g] = c->mesh->sizes[ax];
            L->bound[g] = axes & (1u << ax) ? -1 : 1;  /* an exchanged axis's blocks move to cd */
            L->naxes[g] = L->bound[g] > 0;
            L->axes[g][0] = (uint8_t)ax;
        }
        L->gdims[g] = src->shape.dims[q];
        L->split[g] = 1;
        L->bound[g] = -1;
        if (L->gdims[g] > 1) L->atoms[q][L->natoms[q]++] = (layout_atom){(uint8_t)g, 1, L->gdims[g]};
        g++;
    }
    for (uint32_t q = 0; q < rank; q++)
        if (L->natoms[q] > 4) return false;
    int64_t gd[VIEW_MAX_RANK];
    memcpy(gd, L->gdims, L->grank * sizeof *gd);
    L->from = s->in;
    L->from_comp = s->comp;
    eid t = lf_mk_reshape(c, x->cls, lf_type_of(c, src->shape.dtype, gd, L->grank), c->origin);
    *out = (lval){.kind = LV_LAYOUT, .cls = t, .lay = L, .assumed = x->assumed};
    return true;
}

/* Whether the axes of mask `axes` are one run of e's axes (ascending when
 * several), e's other axes outside it. */
static bool exchanged_run(const view_dim *vd, uint32_t axes) {
    int first = -1, last = -1, prev = -1;
    for (uint32_t m = 0; m < vd->naxes; m++) {
        if (!(axes & (1u << vd->axes[m]))) continue;
        if (first < 0) first = (int)m;
        else if (vd->axes[m] < prev) return false;
        prev = vd->axes[m];
        last = (int)m;
    }
    uint32_t seen = 0;
    for (int m = first; m >= 0 && m <= last; m++) seen |= 1u << vd->axes[m];
    return first >= 0 && seen == axes;
}

/* all-to-all whose split and concat dim cd is x's dim sharded over exactly
 * the group's axes (n devices, in group order): device j gets chunk j of
 * every device's block, in device order. Dim cd of the global value read as
 * [n, n, rows] (block, chunk, row) becomes [n (chunk), n (block), rows]: a
 * transpose of the two, the view unchanged (a strided shuffle of the batch:
 * x.reshape(n, n, -1).swapaxes(0, 1) in the baseline). */
static bool chunks_transposed(lstate *s, const lval *x, uint32_t cd, lval *out) {
    lift_ctx *c = s->c;
    uint32_t rank;
    const int64_t *gd = eg_type_dims(c->g, eg_class_type(c->g, x->cls), &rank);
    int64_t n = view_dim_parts(&x->v, c->mesh, cd);
    if (rank != s->in->shape.rank || rank + 2 > VIEW_MAX_RANK || n < 2 || gd[cd] % (n * n)) return false;
    int64_t rows = gd[cd] / (n * n), split[VIEW_MAX_RANK], perm[VIEW_MAX_RANK];
    uint32_t k = 0;
    for (uint32_t d = 0; d < rank; d++) {
        if (d != cd) {
            split[k++] = gd[d];
            continue;
        }
        split[k++] = n;
        split[k++] = n;
        if (rows > 1) split[k++] = rows; /* (no unit dim: the baseline's reshape has none) */
    }
    for (uint32_t d = 0; d < k; d++) perm[d] = d;
    perm[cd] = cd + 1;
    perm[cd + 1] = cd;
    int dt = eg_type_dtype(c->g, eg_class_type(c->g, x->cls));
    eid t = lf_mk_reshape(c, x->cls, lf_type_of(c, dt, split, k), c->origin);
    t = lf_mk_transpose(c, t, perm);
    t = lf_mk_reshape(c, t, eg_class_type(c->g, x->cls), c->origin);
    *out = term(t, x->v, x->assumed);
    return true;
}

/* all-to-all(x) dimensions={c}: chunk j of dim c goes to device j. With x's dim
 * e sharded in blocks over the group's axes and dim c whole, device r ends up
 * with every block of e (as the major part of dim c) and block r of c. When e
 * is sharded over further axes too, blocks_moved_within. */
lval lf_lift_all_to_all(lstate *s) {
    lift_ctx *c = s->c;
    const hlo_instr *in = s->in;
    const lval *x = &s->ops[0];
    uint32_t nd;
    const int64_t *dd = instr_ints(in, A_DIMENSIONS, &nd);
    if (x->kind != LV_TERM || x->v.partial || nd != 1 || in->noperands != 1) return unknown();
    int axes = lf_collective_axes(s, true, NULL);
    if (axes < 0) return unknown();
    uint32_t cd = (uint32_t)dd[0], rank = in->shape.rank;
    int e = -1;
    bool within = false, cd_bound = false;
    for (uint32_t d = 0; d < rank; d++) {
        if (!x->v.dims[d].naxes) continue;
        uint32_t mask = 0;
        for (uint32_t k = 0; k < x->v.dims[d].naxes; k++) mask |= 1u << x->v.dims[d].axes[k];
        /* Dims sharded on other axes stay bound as they are; the exchanged
         * dim too, its chunks then cut within its blocks. */
        if (!(mask & (uint32_t)axes)) {
            cd_bound |= d == cd;
            continue;
        }
        bool run = d != cd && (mask & (uint32_t)axes) == (uint32_t)axes && exchanged_run(&x->v.dims[d], (uint32_t)axes);
        if ((mask != (uint32_t)axes && !run) || e >= 0) {
            lf_unsupported(c, s->comp, in, "%s: operand sharded on axes the all-to-all does not exchange", in->name);
            return unknown();
        }
        e = (int)d;
        within = mask != (uint32_t)axes;
    }
    /* members take chunks in device order: e's exchanged axes one ascending run */
    if ((within || cd_bound) && e >= 0 && (uint32_t)e != cd && exchanged_run(&x->v.dims[e], (uint32_t)axes)) {
        lval r;
        if (blocks_moved_within(s, x, (uint32_t)e, cd, (uint32_t)axes, &r)) return r;
        lf_unsupported(c, s->comp, in, "%s: operand sharded on axes the all-to-all does not exchange", in->name);
        return unknown();
    }
    lval r;
    if (e >= 0 && (uint32_t)e == cd && !within && exchanged_run(&x->v.dims[e], (uint32_t)axes) &&
        chunks_transposed(s, x, cd, &r))
        return r;
    if (e < 0) {
        lf_unsupported(c, s->comp, in, "%s exchanges a dimension that is not sharded over its groups", in->name);
        return unknown();
    }
    if ((uint32_t)e == cd) {
        lf_unsupported(c, s->comp, in, "%s splits and concatenates dimension %u, which is sharded over its groups: "
                       "related only when the devices' blocks hold a multiple of the group's size of rows", in->name, cd);
        return unknown();
    }
    int64_t n = view_dim_parts(&x->v, c->mesh, (uint32_t)e);
    const hlo_instr *src = &s->comp->instrs[in->operands[0]];
    if (src->shape.dims[cd] % n) return unknown();
    return lf_blocks_moved(s, x, (uint32_t)e, cd, true, &r) ? r : unknown();
}

/* reshape / transpose of a layout: regroup or permute the atoms. */
bool lf_layout_op(lstate *s, lval *out) {
    lift_ctx *c = s->c;
    const hlo_instr *in = s->in;
    const lval *x = &s->ops[0];
    lift_layout *L = arena_memdup(c->a, x->lay, sizeof *x->lay);
    if (in->op == OP_TRANSPOSE) {
        uint32_t np;
        const int64_t *perm = instr_ints(in, A_DIMENSIONS, &np);
        if (np != L->ndims) return false;
        lift_layout t = *L;
        for (uint32_t k = 0; k < np; k++) {
            t.natoms[k] = L->natoms[perm[k]];
            memcpy(t.atoms[k], L->atoms[perm[k]], sizeof t.atoms[k]);
        }
        *L = t;
    } else if (in->op == OP_RESHAPE || in->op == OP_BITCAST) {
        layout_atom flat[LAYOUT_MAX_ATOMS];
        uint32_t nf = 0;
        for (uint32_t d = 0; d < L->ndims; d++)
            for (uint32_t k = 0; k < L->natoms[d]; k++) {
                if (nf == LAYOUT_MAX_ATOMS) return false;
                flat[nf++] = L->atoms[d][k];
            }
        uint32_t next = 0;
        if (in->shape.rank > VIEW_MAX_RANK) return false;
        L->ndims = in->shape.rank;
        for (uint32_t d = 0; d < in->shape.rank; d++) {
            int64_t want = in->shape.dims[d], prod = 1;
            L->natoms[d] = 0;
            while (prod < want && next < nf) {
                if (L->natoms[d] == 4) return false;
                L->atoms[d][L->natoms[d]++] = flat[next];
                prod *= flat[next++].size;
            }
            if (prod != want) return false;  /* an atom would be split */
        }
        if (next != nf) return false;
    } else {
        return false;
    }
    lval v = {.kind = LV_LAYOUT, .cls = x->cls, .lay = L, .assumed = x->assumed};
    if (!lf_layout_to_term(c, &v, &in->shape, false, out)) *out = v;
    return true;
}


/* The dim of `to` that dim d of `from` is, where `to` is `from` with unit dims
 * inserted or removed (the non-unit dims in the same order, same sizes); -1
 * when it is no such reshape or d is a unit dim. */
static int unit_reshape_dim(const shape *from, const shape *to, uint32_t d) {
    if (from->dims[d] == 1) return -1;
    uint32_t j = 0;
    int at = -1;
    for (uint32_t i = 0; i < from->rank; i++) {
        if (from->dims[i] == 1) continue;
        while (j < to->rank && to->dims[j] == 1) j++;
        if (j == to->rank || to->dims[j] != from->dims[i]) return -1;
        if (i == d) at = (int)j;
        j++;
    }
    while (j < to->rank && to->dims[j] == 1) j++;
    return j == to->rank ? at : -1;
}

/* Instruction x as an iota seen through converts, copies, broadcasts,
 * reshapes by unit dims (jnp.arange(n)[None, :], broadcast against a batch)
 * and integer shifts by a constant (jnp.arange(1, n + 1)):
 * the dim of x its values run along, or -1. With g non-NULL, *g becomes the
 * same chain at the global dims of the view gv of x (which shards the
 * iota's dim, and may shard dims the chain broadcasts along): read under
 * gv, block r along the iota's dim is what a device whose local values are
 * offset by r·n holds. */
/* Operand k of x is a splat constant (a broadcast scalar literal). */
static bool splat_operand(const hlo_comp *comp, const hlo_instr *x, uint32_t k) {
    const hlo_instr *b = &comp->instrs[x->operands[k]];
    uint32_t nd;
    instr_ints(b, A_DIMENSIONS, &nd);
    return b->op == OP_BROADCAST && nd == 0 && comp->instrs[b->operands[0]].op == OP_CONSTANT &&
           comp->instrs[b->operands[0]].shape.rank == 0;
}

/* The operand a chain follows through x (a layout change, or a shift by a
 * splat constant, which a block offset added later commutes with), or -1. */
static int chain_operand(const hlo_comp *comp, const hlo_instr *x) {
    if (x->op == OP_CONVERT || x->op == OP_COPY || x->op == OP_RESHAPE || x->op == OP_BROADCAST) return 0;
    if ((x->op == OP_ADD || x->op == OP_SUBTRACT) && x->noperands == 2 && dtype_is_int(x->shape.dtype)) {
        if (splat_operand(comp, x, 1)) return 0;
        if (x->op == OP_ADD && splat_operand(comp, x, 0)) return 1;
    }
    return -1;
}

int lf_iota_chain(lift_ctx *c, const hlo_comp *comp, const hlo_instr *x, const view *gv, eid *g) {
    const hlo_instr *chain[8], *xi = x;
    uint32_t nchain = 0;
    for (int k; (k = chain_operand(comp, xi)) >= 0 && nchain < 8;) {
        chain[nchain++] = xi;
        xi = &comp->instrs[xi->operands[k]];
    }
    if (xi->op != OP_IOTA || xi->shape.rank > VIEW_MAX_RANK || x->shape.rank > VIEW_MAX_RANK) return -1;
    /* parts[q][d]: the blocks gv cuts dim d of chain[q] (chain[nchain]: the
     * iota) into, followed back from x through the chain: a broadcast's
     * operand dim i is its dim bd[i], a unit reshape pairs the other dims
     * in order; dims made by a broadcast or of size 1 are whole. */
    int64_t parts[9][VIEW_MAX_RANK];
    for (uint32_t d = 0; d < x->shape.rank; d++) parts[0][d] = gv ? view_dim_parts(gv, c->mesh, d) : 1;
    for (uint32_t q = 0; q < nchain; q++) {
        const hlo_instr *ci = chain[q];
        const shape *from = q + 1 < nchain ? &chain[q + 1]->shape : &xi->shape;
        if (from->rank > VIEW_MAX_RANK || ci->shape.rank > VIEW_MAX_RANK) return -1;
        for (uint32_t d = 0; d < from->rank; d++) parts[q + 1][d] = 1;
        if (ci->op == OP_BROADCAST) {
            uint32_t nb;
            const int64_t *bd = instr_ints(ci, A_DIMENSIONS, &nb);
            if (nb != from->rank) return -1;
            for (uint32_t d = 0; d < nb; d++) {
                if (bd[d] < 0 || bd[d] >= ci->shape.rank) return -1;
                parts[q + 1][d] = parts[q][bd[d]];
            }
        } else if (ci->op == OP_RESHAPE) {
            for (uint32_t d = 0, j = 0; d < from->rank; d++) {
                if (from->dims[d] == 1) continue;
                while (j < ci->shape.rank && ci->shape.dims[j] == 1) j++;
                if (j < ci->shape.rank && ci->shape.dims[j] == from->dims[d]) parts[q + 1][d] = parts[q][j++];
                else j = ci->shape.rank;  /* no unit reshape: the dims after stay whole */
            }
            /* a sharded dim that found no place: no chain at global dims */
            int64_t pin = 1, pout = 1;
            for (uint32_t d = 0; d < from->rank; d++) pin *= parts[q + 1][d];
            for (uint32_t d = 0; d < ci->shape.rank; d++) pout *= parts[q][d];
            if (pin != pout) return -1;
        } else {
            memcpy(parts[q + 1], parts[q], from->rank * sizeof **parts);
        }
    }
    int dim = (int)instr_int(xi, A_IOTA_DIMENSION, 0);
    eid t = EID_NONE;
    int64_t cg[VIEW_MAX_RANK];
    if (g) {
        for (uint32_t d = 0; d < xi->shape.rank; d++) cg[d] = xi->shape.dims[d] * parts[nchain][d];
        t = lf_node(c, c->cur, xi, NULL, 0, cg, c->origin);
    }
    const shape *at = &xi->shape;
    for (uint32_t q = nchain; q-- > 0 && dim >= 0;) {
        const hlo_instr *ci = chain[q];
        if (ci->op == OP_RESHAPE) {
            dim = unit_reshape_dim(at, &ci->shape, (uint32_t)dim);
        } else if (ci->op == OP_BROADCAST) {
            uint32_t nb;
            const int64_t *bd = instr_ints(ci, A_DIMENSIONS, &nb);
            if ((uint32_t)dim >= nb || bd[dim] < 0 || bd[dim] >= ci->shape.rank) return -1;
            dim = (int)bd[dim];
        }
        at = &ci->shape;
        if (!g || dim < 0 || ci->op == OP_COPY) continue;
        for (uint32_t d = 0; d < ci->shape.rank; d++) cg[d] = ci->shape.dims[d] * parts[q][d];
        if (ci->noperands == 2) {
            /* the splat at the chain's global dims */
            int k = chain_operand(comp, ci);
            const hlo_instr *b = &comp->instrs[ci->operands[1 - k]], *k0 = &comp->instrs[b->operands[0]];
            eid ch[2], sc = lf_node(c, c->cur, k0, NULL, 0, NULL, c->origin);
            ch[k] = t;
            ch[1 - k] = lf_node(c, c->cur, b, &sc, 1, cg, c->origin);
            t = lf_node(c, c->cur, ci, ch, 2, cg, c->origin);
            continue;
        }
        t = lf_node(c, c->cur, ci, &t, 1, cg, c->origin);
    }
    if (g) *g = t;
    return dim;
}

/* add(iota, offset(r)) with offset(r) = block(r)·n along the iota's dim of local
 * length n: block r of the global iota (positions of a sequence shard). The
 * iota may be converted, reshaped and broadcast on the way (jnp.arange(n)[None]). */
bool lf_iota_block(lstate *s, lval *out) {
    lift_ctx *c = s->c;
    const hlo_instr *in = s->in;
    if (in->op != OP_ADD || in->noperands != 2) return false;
    for (int k = 0; k < 2; k++) {
        const lval *x = &s->ops[k], *o = &s->ops[1 - k];
        const hlo_instr *xi = &s->comp->instrs[in->operands[k]];
        /* (an iota shifted by a constant may have been read as index values) */
        if (!(x->kind == LV_PW || (x->kind == LV_TERM && view_is_dup(&x->v))) || o->kind != LV_DEV || lf_dev_uniform(c, o))
            continue;
        int dim = lf_iota_chain(c, s->comp, xi, NULL, NULL);
        if (dim < 0) continue;
        for (int64_t d = 0; d < c->ndev; d++)
            for (uint32_t e = 1; e < o->count; e++)
                if (o->dev[d * o->count + e] != o->dev[d * o->count]) return false;
        int64_t n = in->shape.dims[dim], base, parts;
        view_dim bax;
        uint32_t mask = lf_block_offsets(c, o->dev, o->count, n, &base, &parts, &bax);
        if (!mask || base != 0) return false;
        view v = view_dup(in->shape.rank);
        v.dims[dim] = bax;
        eid t;
        if (lf_iota_chain(c, s->comp, xi, &v, &t) < 0) return false;
        *out = term(t, v, false);
        return true;
    }
    return false;
}

static bool member(const int64_t *v, uint32_t n, int64_t x) {
    for (uint32_t k = 0; k < n; k++)
        if (v[k] == x) return true;
    return false;
}

/* gather(table, indices) where the table is sharded only along dims it keeps
 * whole (offset dims of full slice size) and the indices only along their
 * batch dims: every device gathers its rows of its tile, which is the global
 * gather viewed with those shardings on the matching output dims (an
 * embedding under FSDP: tokens gathered, the hidden dim sharded). */
/* Operand o as a term when it is a device value the same on every device
 * (a constant index, a count): that constant, replicated. */
static void uniform_dev_term(lift_ctx *c, const hlo_instr *xi, lval *x) {
    if (x->kind != LV_DEV || !lf_dev_uniform(c, x)) return;
    bool konst = x->konst;
    *x = term(lf_dev_constant(c, xi, x), view_dup(xi->shape.rank), false);
    x->konst = konst;
}

void lf_uniform_dev_as_term(lstate *s, uint32_t o) {
    uniform_dev_term(s->c, &s->comp->instrs[s->in->operands[o]], &s->ops[o]);
}

static bool gather_views(lstate *s, lval *out) {
    lift_ctx *c = s->c;
    const hlo_instr *in = s->in;
    if (in->noperands == 2) lf_uniform_dev_as_term(s, 1);
    const lval *t = &s->ops[0], *ix = &s->ops[1];
    /* A partial table: gather picks elements, so the gather of each device's
     * part, at indices every device of a group holds alike, is the part of
     * the gather (partial over the same axes, with the same reducer). */
    if (in->noperands != 2 || t->kind != LV_TERM || ix->kind != LV_TERM || ix->v.partial ||
        (t->v.partial && (view_axes_used(&ix->v) & t->v.partial)) || view_is_dup(&t->v) + view_is_dup(&ix->v) == 2 ||
        in->shape.rank > VIEW_MAX_RANK)
        return false;
    uint32_t noff, ncol, nmap, nob, nsb, nss;
    const int64_t *off = instr_ints(in, A_OFFSET_DIMS, &noff), *col = instr_ints(in, A_COLLAPSED_SLICE_DIMS, &ncol);
    const int64_t *map = instr_ints(in, A_START_INDEX_MAP, &nmap);
    const int64_t *ob = instr_ints(in, A_OPERAND_BATCHING_DIMS, &nob);
    const int64_t *sb = instr_ints(in, A_START_INDICES_BATCHING_DIMS, &nsb);
    const int64_t *ss = instr_ints(in, A_SLICE_SIZES, &nss);
    int64_t ivd = instr_int(in, A_INDEX_VECTOR_DIM, 0);
    const hlo_instr *ti = &s->comp->instrs[in->operands[0]], *ii = &s->comp->instrs[in->operands[1]];
    if (nob != nsb || nss != ti->shape.rank || ti->shape.rank > VIEW_MAX_RANK || ii->shape.rank > VIEW_MAX_RANK) return false;
    view v = view_dup(in->shape.rank);
    /* Batching dims (take_along_axis): the table's and the indices' sharded
     * alike; the result takes the indices' (below). Their axes are shared. */
    uint32_t shared = 0;
    for (uint32_t q = 0; q < nob; q++) {
        const view_dim *a = &t->v.dims[ob[q]], *b = &ix->v.dims[sb[q]];
        if (memcmp(a, b, sizeof *a)) return false;
        for (uint32_t x = 0; x < a->naxes; x++) shared |= 1u << a->axes[x];
    }
    /* Table dims: the k-th kept one (neither collapsed nor batching) is output dim off[k]. */
    uint32_t k = 0;
    int64_t sizes[VIEW_MAX_RANK];
    for (uint32_t d = 0; d < ti->shape.rank; d++) {
        sizes[d] = ss[d];
        bool kept = !member(col, ncol, d) && !member(ob, nob, d);
        if (member(ob, nob, d)) continue;
        if (t->v.dims[d].naxes) {
            if (!kept || member(map, nmap, d) || ss[d] != ti->shape.dims[d] || k >= noff) return false;
            v.dims[off[k]] = t->v.dims[d];
            sizes[d] = ss[d] * view_dim_parts(&t->v, c->mesh, d);
        }
        if (kept) k++;
    }
    /* Index dims but the index vector dim are the output's other dims, in order. */
    uint32_t o = 0;
    for (uint32_t d = 0; d < ii->shape.rank; d++) {
        if ((int64_t)d == ivd) {
            if (ix->v.dims[d].naxes) return false;
            continue;
        }
        while (o < in->shape.rank && member(off, noff, o)) o++;
        if (o >= in->shape.rank) return false;
        if (ix->v.dims[d].naxes) {
            if (v.dims[o].naxes) return false;
            v.dims[o] = ix->v.dims[d];
        }
        o++;
    }
    if (view_axes_used(&t->v) & view_axes_used(&ix->v) & ~shared) return false;
    v.partial = t->v.partial;
    v.red = t->v.red;
    int64_t dims[VIEW_MAX_RANK];
    lf_global_dims(c, &v, &in->shape, dims);
    hlo_instr g = lf_with_ints(c, in, A_SLICE_SIZES, sizes, nss);
    eid ch[2] = {t->cls, ix->cls};
    *out = term(lf_node(c, c->cur, &g, ch, 2, dims, c->origin), v, t->assumed || ix->assumed);
    return true;
}

/* fn over s, else once more for each local unit dim of operand o whose
 * sharding one reading of an expand_dims put there: the other reading, the
 * same elements with the next dim sharded (a take_along_axis over
 * [1, B, V] with the batch sharded, and its scatter-add gradient). */
static bool unit_readings(lstate *s, uint32_t o, bool (*fn)(lstate *, lval *), lval *out) {
    if (fn(s, out)) return true;
    if (o >= s->in->noperands) return false;
    const shape *sh = &s->comp->instrs[s->in->operands[o]].shape;
    for (uint32_t d = 0; d + 1 < sh->rank; d++) {
        lval moved, keep = s->ops[o];
        if (sh->dims[d] != 1 || !lf_unit_move_next(s->c, &s->ops[o], sh, d, &moved)) continue;
        s->ops[o] = moved;
        if (fn(s, out)) return true;
        s->ops[o] = keep;
    }
    return false;
}

bool lf_gather_views(lstate *s, lval *out) {
    return s->in->noperands == 2 ? unit_readings(s, 0, gather_views, out) : gather_views(s, out);
}

/* Whether devices d and e hold the same index function. */
static bool same_pw(const pw_fn *f, const pw_fn *g) {
    return f->n == g->n && memcmp(f->p, g->p, f->n * sizeof *f->p) == 0;
}

/* Whether every group of collective in (all-gather, all-to-all) holds one
 * function: devices that differ only on its axes hold the same. A
 * collective-permute passes (it moves the functions with the values). */
static bool pw_uniform_over(lift_ctx *c, const pw_fn *pw, const hlo_instr *in) {
    if (in->op == OP_COLLECTIVE_PERMUTE) return true;
    int axes = lift_groups_axes(c, in, true);
    if (axes < 0) return false;
    for (int64_t d = 0; d < c->ndev; d++) {
        int64_t d0 = d, stride = 1;  /* d with its coordinates on the group's axes zeroed */
        for (int a = (int)c->mesh->naxes - 1; a >= 0; a--) {
            if (axes >> a & 1) d0 -= mesh_coord(c->mesh, d, a) * stride;
            stride *= c->mesh->sizes[a];
        }
        if (!same_pw(&pw[d], &pw[d0])) return false;
    }
    return true;
}


/* A mask whose rows and positions are carried as layouts, met by an op that
 * does not rearrange: both as plain views (merging atoms, as for any layout
 * such an op meets), when they agree. */
bool lf_settle_mask(lift_ctx *c, const shape *local, lval *m) {
    lval t[2];
    for (int k = 0; k < 2; k++) {
        shape sh = *local;  /* the positions keep their own element type */
        sh.dtype = (uint8_t)eg_type_dtype(c->g, eg_class_type(c->g, m->carry[k].cls));
        if (m->carry[k].kind != LV_LAYOUT || !lf_layout_to_term(c, &m->carry[k], &sh, true, &t[k]) || t[k].kind != LV_TERM ||
            t[k].assumed || eg_type_dtype(c->g, eg_class_type(c->g, t[k].cls)) != sh.dtype)
            return false;
    }
    if (!view_equal(&t[0].v, &t[1].v) || t[0].v.partial) return false;
    m->carry = NULL;
    m->v = t[0].v;
    m->hit = t[0].cls;
    m->pos = t[1].cls;
    return true;
}

/* A masked row (LV_MASK: per device, a function of the index value at each
 * position says whether the element is the row, zero or junk) is elementwise
 * in its rows and its positions: an op that only moves elements — a layout
 * op, or a collective whose groups hold one function — moves both alike,
 * and the functions stay. GSPMD gathers embedding rows with junk on the
 * devices that do not hold them and moves them by an all-to-all before it
 * masks the junk. Between an all-to-all and the ops that make its result a
 * plain view, rows and positions are carried as layouts. */
bool lf_move_mask(lstate *s, lval *out) {
    lift_ctx *c = s->c;
    const hlo_instr *in = s->in;
    if (in->noperands != 1) return false;
    lval x = s->ops[0];
    bool collective = in->op == OP_ALL_TO_ALL || in->op == OP_ALL_GATHER || in->op == OP_COLLECTIVE_PERMUTE;
    bool rearranges = in->op == OP_RESHAPE || in->op == OP_BITCAST || in->op == OP_TRANSPOSE || in->op == OP_COPY;
    if (c->baseline_mode || (!collective && !rearranges) || in->noperands != 1 || x.kind != LV_MASK || x.n || !x.pw ||
        (!x.carry && (x.hit == EID_NONE || x.pos == EID_NONE)) || (!x.carry && lf_mask_resolves(c, &x)))
        return false;
    pw_fn *pw = x.pw;
    if (in->op == OP_COLLECTIVE_PERMUTE) {
        const char *bad;
        const int64_t *from = lf_permute_sources(c, in, &bad);
        if (!from) return false;
        pw = arena_alloc(c->a, (size_t)c->ndev * sizeof *pw);
        for (int64_t t = 0; t < c->ndev; t++) {
            if (from[t] < 0) return false;
            pw[t] = x.pw[from[t]];
        }
    } else if (collective && !pw_uniform_over(c, x.pw, in)) {
        return false;
    }
    lval moved[2];
    for (int k = 0; k < 2; k++) {
        /* The op as it would move a value of the carrier's element type. */
        s->ops[0] = x.carry ? x.carry[k] : term(k ? x.pos : x.hit, x.v, false);
        hlo_instr g = *in;
        g.shape.dtype = (uint8_t)eg_type_dtype(c->g, eg_class_type(c->g, s->ops[0].cls));
        s->in = &g;
        moved[k] = lf_lift_instr(s);
        s->in = in;
        if ((moved[k].kind == LV_TERM || moved[k].kind == LV_LAYOUT) &&
            eg_type_dtype(c->g, eg_class_type(c->g, moved[k].cls)) != g.shape.dtype)
            moved[k].kind = LV_UNKNOWN;
    }
    s->ops[0] = x;
    if (moved[0].kind != moved[1].kind || (moved[0].kind != LV_TERM && moved[0].kind != LV_LAYOUT)) return false;
    *out = x;
    out->pw = pw;
    out->cls = EID_NONE;
    if (moved[0].kind == LV_TERM) {
        if (!view_equal(&moved[0].v, &moved[1].v) || moved[0].v.partial || moved[0].assumed || moved[1].assumed) return false;
        out->carry = NULL;
        out->v = moved[0].v;
        out->hit = moved[0].cls;
        out->pos = moved[1].cls;
        return true;
    }
    out->carry = arena_memdup(c->a, moved, sizeof moved);
    return true;
}

/* An all-gather or a collective-permute of index values (per device, a
 * function of the source at positions pos under view v) moves the positions
 * as data and the functions with them. Device t of an all-gather concatenates
 * the windows of its group: one function of the gathered positions when every
 * device of the group holds the same function (token ids wrapped into range;
 * bounds that vary only along other axes). Device t of a permute holds what
 * its source s held: s's function of the positions under the view the permute
 * leaves them in (GSPMD moving token ids from one mesh axis to another). */
static bool gather_index_vector(lstate *s, lval *out);

bool lf_gather_index_values(lstate *s, lval *out) {
    lift_ctx *c = s->c;
    if (s->in->noperands != 1) return false;
    lval x = s->ops[0];
    if (s->in->op == OP_ALL_GATHER && x.kind == LV_IVEC) return gather_index_vector(s, out);
    bool permute = s->in->op == OP_COLLECTIVE_PERMUTE;
    if ((s->in->op != OP_ALL_GATHER && !permute) || s->in->noperands != 1 || x.kind != LV_PW || !x.pw ||
        x.pos == EID_NONE)
        return false;
    if (permute) {
        const char *bad;
        const int64_t *from = lf_permute_sources(c, s->in, &bad);
        view pv;
        if (!from || !lf_permute_view(c, &x.v, from, &pv)) return false;
        pw_fn *f = arena_alloc(c->a, (size_t)c->ndev * sizeof *f);
        for (int64_t t = 0; t < c->ndev; t++) f[t] = x.pw[from[t]];
        *out = x;
        out->v = pv;
        out->pw = f;
        return true;
    }
    if (!pw_uniform_over(c, x.pw, s->in)) return false;
    s->ops[0] = term(x.pos, x.v, false);
    lval g = lf_lift_all_gather(s);
    lval k = unknown();
    if (g.kind == LV_TERM && x.cls != EID_NONE) {
        s->ops[0] = term(x.cls, x.v, false);
        k = lf_lift_all_gather(s);
    }
    s->ops[0] = x;
    if (g.kind != LV_TERM) return false;
    *out = x;
    out->v = g.v;
    out->pos = g.cls;
    out->cls = k.kind == LV_TERM && view_equal(&k.v, &g.v) ? k.cls : EID_NONE;
    return true;
}

/* An index vector all-gathered along a dim other than its vector dim
 * (GSPMD gathering the (row, column) starts of a diagonal): component by
 * component, each index arithmetic gathered as above (its positions
 * gathered, its function the same on every device of a group) or a device
 * number the same on every device of a group. */
static bool gather_index_vector(lstate *s, lval *out) {
    lift_ctx *c = s->c;
    lval x = s->ops[0];
    uint32_t nd;
    const int64_t *dd = instr_ints(s->in, A_DIMENSIONS, &nd);
    int axes = lift_groups_axes(c, s->in, true);
    if (nd != 1 || dd[0] == x.vdim || axes <= 0) return false;
    lval *el = arena_alloc(c->a, (x.n + 1) * sizeof *el);
    const view *common = NULL;
    bool ok = true;
    for (uint32_t j = 0; j < x.n && ok; j++) {
        el[j] = x.elems[j];
        if (el[j].kind == LV_DEV) {
            for (int64_t d = 0; d < c->ndev && ok; d++) {
                int64_t d0 = d, stride = 1;  /* d with its coordinates on the group's axes zeroed */
                for (int a = (int)c->mesh->naxes - 1; a >= 0; a--) {
                    if (axes >> a & 1) d0 -= mesh_coord(c->mesh, d, a) * stride;
                    stride *= c->mesh->sizes[a];
                }
                ok = el[j].dev[d] == el[j].dev[d0];
            }
            continue;
        }
        /* A component sharded along the gathered dim over the group's axes
         * (its minor ones): only its view and positions change. */
        const view_dim *vd = &el[j].v.dims[dd[0]];
        uint32_t k = (uint32_t)__builtin_popcount((unsigned)axes);
        ok = el[j].kind == LV_PW && el[j].pw && el[j].pos != EID_NONE && vd->naxes >= k && pw_uniform_over(c, el[j].pw, s->in);
        for (uint32_t i = 0; ok && i < k; i++) ok = axes >> vd->axes[vd->naxes - k + i] & 1;  /* its minor axes gathered */
        if (!ok) break;
        s->ops[0] = term(el[j].pos, el[j].v, false);
        lval g = lf_lift_all_gather(s);
        ok = g.kind == LV_TERM && !g.assumed && (!common || lf_same_sharding(common, &g.v));
        if (!ok) break;
        el[j].v = g.v;
        el[j].pos = g.cls;
        el[j].cls = EID_NONE;
        common = &el[j].v;
    }
    s->ops[0] = x;
    if (!ok || !common) return false;
    *out = x;
    out->elems = el;
    out->v = *common;
    out->cls = EID_NONE;
    return true;
}

/* A splat constant (broadcast of a scalar) re-viewed under w: the same
 * broadcast to the global shape of that view. */
static bool splat_review(lstate *s, uint32_t o, const view *w) {
    lval *x = &s->ops[o];
    const hlo_instr *xi = &s->comp->instrs[s->in->operands[o]];
    if (x->kind != LV_TERM || x->v.partial || w->rank != xi->shape.rank || lf_scale_of(x) != 1) return false;
    const interp_val *kv = lf_kval(s->c, x->cls);
    /* A class that holds a broadcast of a scalar, whatever op gave it here
     * (select(p, z, z) of a zero table): that broadcast, which is the form
     * both sides share (a folded literal would not meet it). */
    for (eid n = eg_class_first(s->c->g, x->cls); n != EID_NONE; n = eg_class_next(s->c->g, n)) {
        uint32_t nk, rk;
        const eid *ch = eg_node_children(s->c->g, n, &nk);
        if (eg_node_op(s->c->g, n) != OP_BROADCAST || nk != 1) continue;
        eg_type_dims(s->c->g, eg_class_type(s->c->g, ch[0]), &rk);
        if (rk) continue;
        int64_t dims[VIEW_MAX_RANK];
        lf_global_dims(s->c, w, &xi->shape, dims);
        bool konst = x->konst;
        eid b = eg_add(s->c->g, OP_BROADCAST, eg_node_attr(s->c->g, n), lf_type_of(s->c, xi->shape.dtype, dims, xi->shape.rank),
                       ch, 1, s->c->origin);
        if (kv && kv->n && !lf_kval(s->c, b) && lf_fold_size_ok(dims, xi->shape.rank)) {
            interp_val *g = interp_val_new(kv->dtype, xi->shape.rank, dims);
            for (int64_t k = 0; g && k < g->n; k++) interp_val_set(g, k, interp_val_get(kv, 0));
            if (g) lf_kval_set(s->c, b, g);
        }
        *x = term(b, *w, false);
        x->konst = konst;
        return true;
    }
    if (kv && (xi->op != OP_BROADCAST || s->comp->instrs[xi->operands[0]].shape.rank != 0)) {
        /* a folded constant holding one number: that number at the global shape */
        for (int64_t k = 1; k < kv->n; k++)
            if (interp_val_get(kv, k) != interp_val_get(kv, 0)) return false;
        int64_t dims[VIEW_MAX_RANK];
        lf_global_dims(s->c, w, &xi->shape, dims);
        interp_val *g = lf_fold_size_ok(dims, xi->shape.rank) && kv->n ? interp_val_new(kv->dtype, xi->shape.rank, dims) : NULL;
        if (!g) return false;
        for (int64_t k = 0; k < g->n; k++) interp_val_set(g, k, interp_val_get(kv, 0));
        *x = term(lf_const_term(s->c, g, s->c->origin), *w, false);
        x->konst = true;
        return true;
    }
    if (xi->op != OP_BROADCAST || xi->noperands != 1 || s->comp->instrs[xi->operands[0]].shape.rank != 0) return false;
    const lval *k = &s->vals[xi->operands[0]];
    eid scalar;
    if (k->kind == LV_TERM && lf_kval(s->c, k->cls)) scalar = k->cls;
    else if (k->kind == LV_DEV && lf_dev_uniform(s->c, k)) scalar = lf_dev_constant(s->c, &s->comp->instrs[xi->operands[0]], k);
    else return false;
    int64_t dims[VIEW_MAX_RANK];
    lf_global_dims(s->c, w, &xi->shape, dims);
    bool konst = x->konst;
    *x = term(lf_node(s->c, s->c->cur, xi, &scalar, 1, dims, s->c->origin), *w, false);
    x->konst = konst;
    return true;
}

/* Whether s's value is used only as the indices of scatters (and is not
 * the computation's result). */
bool lf_only_scatter_indices(const lstate *s) {
    uint32_t i = (uint32_t)(s->in - s->comp->instrs), uses = 0;
    if (i == s->comp->root) return false;
    for (uint32_t j = i + 1; j < s->comp->ninstrs; j++) {
        const hlo_instr *u = &s->comp->instrs[j];
        for (uint32_t o = 0; o < u->noperands; o++) {
            if (u->operands[o] != i) continue;
            if (u->op != OP_SCATTER || o != 1 || u->noperands != 3) return false;
            uses++;
        }
    }
    return uses > 0;
}

/* Whether the updates' mask u reads, at every update position, the index
 * value the scatter's index x holds there: the same source, its positions
 * the index's broadcast along the update window dims. */
static bool mask_reads_index(lift_ctx *c, const lval *u, const lval *x, const hlo_instr *in) {
    uint32_t nuw, nb, ru;
    const int64_t *uw = instr_ints(in, A_UPDATE_WINDOW_DIMS, &nuw);
    if (u->src == EID_NONE || eg_find(c->g, u->src) != eg_find(c->g, x->src) || u->pos == EID_NONE) return false;
    eg_type_dims(c->g, eg_class_type(c->g, u->pos), &ru);
    eid pm = u->pos;
    if (nuw) {
        const eid *ch;
        eid bn = lf_class_node(c, u->pos, OP_BROADCAST, 1, &ch);
        if (bn == EID_NONE) return false;
        const int64_t *bd = ea_get(c->g, eg_node_attr(c->g, bn), A_DIMENSIONS, &nb);
        if (nb + nuw != ru) return false;
        for (uint32_t d = 0, q = 0; d < ru; d++) {
            bool window = false;
            for (uint32_t w = 0; w < nuw; w++) window |= uw[w] == (int64_t)d;
            if (!window && (q >= nb || bd[q++] != (int64_t)d)) return false;
        }
        pm = ch[0];
    }
    return eg_find(c->g, lf_mk_reshape(c, x->pos, eg_class_type(c->g, pm), c->origin)) == eg_find(c->g, pm);
}

/* f, per device, as t - off wherever it lands in [0, rows): its pieces of
 * slope 1 are t - off, every constant one is outside the rows (a scatter
 * drops it: a vocab-parallel gradient's where(loc < 0, rows, loc)) or right
 * at one t and over updates that the mask `zero` (if given) zeroes
 * everywhere else on it (clip(loc) beside updates masked by the block):
 * that off. */
/* Whether the mask `zero` is zero over [lo, hi) (true when it is empty). */
static bool zero_on(const pw_fn *zero, int64_t lo, int64_t hi) {
    int64_t tag;
    return lo >= hi || (zero && pw_constant_on(zero, lo, hi, &tag) && tag == TAG_ZERO);
}

static bool offset_or_dropped(const pw_fn *f, const pw_fn *zero, int64_t rows, double *off) {
    bool have = false;
    int64_t b = 0;
    for (uint32_t k = 0; k < f->n; k++) {
        const pw_piece *q = &f->p[k];
        if (q->a == 0) continue;
        if (q->a != 1 || (have && q->b != b)) return false;
        have = true;
        b = q->b;
    }
    if (!have || b == INT64_MIN) return false;
    /* A constant row v adds its updates there for every t of its piece: right
     * only at t0 = v + off (clip's edge), so elsewhere the index must be out
     * of range (dropped) or the updates zero. */
    for (uint32_t k = 0; k < f->n; k++) {
        const pw_piece *q = &f->p[k];
        if (q->a != 0 || q->b < 0 || q->b >= rows) continue;
        int64_t t0;
        if (__builtin_sub_overflow(q->b, b, &t0)) return false;
        bool inside = t0 >= q->lo && (q->hi == PW_POS_INF || t0 < q->hi);
        if (!inside ? !zero_on(zero, q->lo, q->hi) : !zero_on(zero, q->lo, t0) || !zero_on(zero, t0 + 1, q->hi))
            return false;
    }
    /* and every t of the block [off, off + rows) lands on its row t - off */
    int64_t lo = -b, hi;
    if (__builtin_add_overflow(lo, rows, &hi)) return false;
    for (uint32_t k = 0; k < f->n; k++) {
        const pw_piece *q = &f->p[k];
        int64_t s0 = q->lo > lo ? q->lo : lo, e0 = q->hi < hi ? q->hi : hi;
        if (s0 >= e0 || q->a == 1) continue;
        if (e0 - s0 != 1 || q->b != s0 - lo) return false;
    }
    *off = (double)lo;
    return true;
}

/* x - off gathered by all-gather gi (along a dim other than the index
 * vector dim ivd): off the same on every device of a group, x (a term)
 * sharded along the gathered dim over exactly the groups' axes; x becomes
 * the gathered term (the dim whole). */
static bool gathered_offsets(lift_ctx *c, const hlo_instr *gi, int64_t ivd, const lval *off, lval *x) {
    int axes = lift_groups_axes(c, gi, true);
    uint32_t nd;
    const int64_t *dd = instr_ints(gi, A_DIMENSIONS, &nd);
    int64_t gd = nd == 1 ? dd[0] : -1;
    if (axes <= 0 || gd == ivd || x->kind != LV_TERM || x->v.partial || gd < 0 || gd >= (int64_t)x->v.rank) return false;
    view_dim want = lf_axes_dim(c, (uint32_t)axes);
    if (!lf_same_dim(&x->v.dims[gd], &want)) return false;
    for (int64_t r = 0; r < c->ndev; r++) {
        /* the device of r's group with coordinate 0 along the gathered axes */
        int64_t r0 = 0, stride = 1;
        for (int a = (int)c->mesh->naxes - 1; a >= 0; a--) {
            if (!(axes >> a & 1)) r0 += mesh_coord(c->mesh, r, a) * stride;
            stride *= c->mesh->sizes[a];
        }
        for (uint32_t e = 0; e < off->count; e++)
            if (off->dev[r * off->count + e] != off->dev[r0 * off->count + e]) return false;
    }
    x->v.dims[gd] = (view_dim){0};
    return true;
}

/* Scatter s's indices (operand 1) are x - off(r), x the same function of
 * data on every device under a plain view (a batch split over dp travels
 * along) and off(r) = block(r)·size in one component of the index vector
 * (0 in the others), size the operand's local length along the operand dim
 * *bk that component indexes: either the indices are subtract(x, off) (x's
 * own term: wrapping of negative ids inside it is fine), or, with one
 * component, their index values are on every device exactly t - off(r) for
 * the source t at their positions (a subtract before reshapes). The indices
 * become x's term under x's view, and *dim the axes of the blocks. */
static bool block_offset_indices(lstate *s, int64_t *bk, view_dim *dim) {
    lift_ctx *c = s->c;
    const hlo_instr *in = s->in, *ii = &s->comp->instrs[in->operands[1]];
    uint32_t nsd;
    const int64_t *sd = instr_ints(in, A_SCATTER_DIMS_TO_OPERAND_DIMS, &nsd);
    int64_t ivd = instr_int(in, A_INDEX_VECTOR_DIM, 0);
    if (!nsd || ivd < 0 || ivd > ii->shape.rank || (ivd == ii->shape.rank ? nsd != 1 : ii->shape.dims[ivd] != nsd)) return false;
    /* per[r·nsd + j]: device r's offset in component j */
    double *per = arena_alloc(c->a, (size_t)c->ndev * nsd * sizeof *per);
    lval x = {0};
    /* all-gather(x - off) with off the same over the gather's groups (GSPMD
     * gathers the batch of offset ids over fsdp after the subtract): the
     * gathered x - off */
    const hlo_instr *si = ii, *gi = NULL;
    if (ii->op == OP_ALL_GATHER && ii->noperands == 1 && s->comp->instrs[ii->operands[0]].op == OP_SUBTRACT)
        gi = ii, si = &s->comp->instrs[ii->operands[0]];
    int64_t n = shape_elements(&si->shape), stride = 1;
    for (uint32_t d = (uint32_t)ivd + 1; d < si->shape.rank; d++) stride *= si->shape.dims[d];
    const lval *off = si->op == OP_SUBTRACT && si->noperands == 2 ? &s->vals[si->operands[1]] : NULL;
    if (off && off->kind == LV_DEV && n > 0 && ((int64_t)off->count == n || off->count == 1) && !lf_dev_uniform(c, off)) {
        x = s->vals[si->operands[0]];
        if (lf_is_index(&x) && !lf_index_as_term(c, &x)) return false;
        /* a constant position (.at[:, -1].set on a sharded dim): that constant */
        uniform_dev_term(c, &s->comp->instrs[si->operands[0]], &x);
        if (gi && !gathered_offsets(c, gi, ivd, off, &x)) return false;
        bool *seen = arena_alloc(c->a, nsd * sizeof *seen);
        for (int64_t r = 0; r < c->ndev; r++) {
            memset(seen, 0, nsd * sizeof *seen);
            /* one number per device (a count of 1): the same in every component */
            for (uint32_t j = 0; j < nsd && off->count == 1; j++) per[r * nsd + j] = off->dev[r], seen[j] = true;
            for (uint32_t e = 0; e < off->count && off->count > 1; e++) {
                uint32_t j = (uint32_t)((e / stride) % nsd);
                double v = off->dev[r * off->count + e];
                if (!seen[j]) per[r * nsd + j] = v, seen[j] = true;
                else if (per[r * nsd + j] != v) return false;
            }
        }
    } else {
        const lval *p = &s->ops[1];
        if (nsd != 1 || p->kind != LV_PW || !p->pw || p->pos == EID_NONE) return false;
        int64_t rows = s->comp->instrs[in->operands[0]].shape.dims[sd[0]];
        const lval *u = &s->ops[2];
        bool masked = u->kind == LV_MASK && !u->n && u->pw && mask_reads_index(c, u, p, in);
        for (int64_t r = 0; r < c->ndev; r++)
            if (!offset_or_dropped(&p->pw[r], masked ? &u->pw[r] : NULL, rows, &per[r])) return false;
        x = term(p->pos, p->v, false);
    }
    if (x.kind != LV_TERM || x.v.partial || x.v.rank != ii->shape.rank) return false;
    /* one component offset per device, the others 0 everywhere */
    int64_t j0 = -1;
    for (uint32_t j = 0; j < nsd; j++) {
        bool zero = true;
        for (int64_t r = 0; r < c->ndev; r++) zero &= per[r * nsd + j] == 0;
        if (zero) continue;
        if (j0 >= 0) return false;
        j0 = j;
    }
    const hlo_instr *oi = &s->comp->instrs[in->operands[0]];
    if (j0 < 0 || sd[j0] < 0 || sd[j0] >= oi->shape.rank) return false;
    double *pj = arena_alloc(c->a, (size_t)c->ndev * sizeof *pj);
    for (int64_t r = 0; r < c->ndev; r++) pj[r] = per[r * nsd + j0];
    int64_t base, parts;
    view_dim bax;
    uint32_t mask = lf_block_offsets(c, pj, 1, oi->shape.dims[sd[j0]], &base, &parts, &bax);
    if (!mask || base != 0) return false;
    /* x at the indices' shape */
    int64_t g[VIEW_MAX_RANK];
    lf_global_dims(c, &x.v, &ii->shape, g);
    if (eg_class_type(c->g, x.cls) != lf_type_of(c, ii->shape.dtype, g, ii->shape.rank)) return false;
    *bk = sd[j0];
    *dim = bax;
    s->ops[1] = term(x.cls, x.v, x.assumed);
    return true;
}

/* Updates masked to the rows whose index falls in the device's block along
 * operand dim bk (tag HIT there, zero elsewhere: offset_or_dropped checked
 * the rows the index reaches otherwise): each device adds exactly the
 * update rows of its block, so the updates read as their plain term. */
static bool masked_rows_are_blocks(lstate *s, int64_t bk, const view_dim *bdim) {
    lift_ctx *c = s->c;
    lval *u = &s->ops[2];
    int64_t rows = s->comp->instrs[s->in->operands[0]].shape.dims[bk], tag;
    for (int64_t r = 0; r < c->ndev; r++) {
        int64_t lo = lf_dim_block(c, bdim, r) * rows;
        if (!pw_constant_on(&u->pw[r], lo, lo + rows, &tag) || tag != TAG_HIT) return false;
    }
    *u = term(u->hit, u->v, false);
    return true;
}

/* scatter(operand, indices, updates) with a sum or any reducer, two readings:
 * - aligned: every device scatters into its own block (the operand sharded
 *   only along batching dims and whole windows, the indices and updates
 *   alike along the matching dims): the global scatter under the operand's
 *   view;
 * - partial: the operand is zero and replicated, the indices and updates
 *   sharded alike along their scatter dims (each device adds its rows, an
 *   embedding's gradient under data parallelism) or the updates partial
 *   sums, and the reducer a sum: the global scatter-add, partial (sum) over
 *   those axes; with an idempotent reducer (max, min, and, or) the operand
 *   may be any replicated value: partial (max, ...) over those axes.
 * Splat constants take whatever view the others need. */
bool lf_scatter_dims(const hlo_comp *comp, const hlo_instr *in, int64_t *udim_of_idx, int64_t *udim_of_op) {
    if (in->noperands != 3) return false;
    const hlo_instr *oi = &comp->instrs[in->operands[0]], *ii = &comp->instrs[in->operands[1]],
                    *ui = &comp->instrs[in->operands[2]];
    uint32_t nuw, niw, nib, nsb;
    const int64_t *uw = instr_ints(in, A_UPDATE_WINDOW_DIMS, &nuw), *iw = instr_ints(in, A_INSERTED_WINDOW_DIMS, &niw);
    const int64_t *ib = instr_ints(in, A_INPUT_BATCHING_DIMS, &nib);
    instr_ints(in, A_SCATTER_INDICES_BATCHING_DIMS, &nsb);
    int64_t ivd = instr_int(in, A_INDEX_VECTOR_DIM, 0);
    uint32_t ro = oi->shape.rank, ri = ii->shape.rank, ru = ui->shape.rank, u = 0, w = 0;
    if (ro > VIEW_MAX_RANK || ri > VIEW_MAX_RANK || ru > VIEW_MAX_RANK || nib != nsb) return false;
    for (uint32_t d = 0; d < ri; d++) {
        udim_of_idx[d] = -1;
        if ((int64_t)d == ivd) continue;
        while (u < ru && member(uw, nuw, u)) u++;
        if (u >= ru) return false;
        udim_of_idx[d] = u++;
    }
    for (uint32_t d = 0; d < ro; d++) {
        udim_of_op[d] = -1;
        if (member(iw, niw, d) || member(ib, nib, d)) continue;
        if (w >= nuw || uw[w] < 0 || uw[w] >= ru) return false;
        udim_of_op[d] = uw[w++];
    }
    return true;
}

static bool scatter_reading(lstate *s, lval *out) {
    lift_ctx *c = s->c;
    const hlo_instr *in = s->in;
    if (in->noperands != 3 || in->shape.dtype == DT_TUPLE || in->shape.rank > VIEW_MAX_RANK) return false;
    view_dim bdim = {0};
    int64_t bk = -1;
    bool blocked = block_offset_indices(s, &bk, &bdim);
    if (blocked && s->ops[2].kind == LV_MASK && !masked_rows_are_blocks(s, bk, &bdim)) return false;
    for (uint32_t o = 0; o < 3; o++) {
        lf_uniform_dev_as_term(s, o);
        /* indices that do not depend on the device (positions from an
         * iota): their plain term */
        if (o == 1 && s->ops[o].kind == LV_PW) lf_plain_of_index(&s->ops[o]);
        /* index values that are the same function of their source on every
         * device (labels sharded with the batch): their plain term under
         * their view, the positions the global scatter takes */
        if (o == 1 && (s->ops[o].kind == LV_PW || s->ops[o].kind == LV_IVEC) && s->ops[o].cls != EID_NONE &&
            !s->ops[o].v.partial)
            s->ops[o] = term(s->ops[o].cls, s->ops[o].v, s->ops[o].assumed);
        if (s->ops[o].kind != LV_TERM) return false;
    }
    const hlo_instr *ii = &s->comp->instrs[in->operands[1]], *ui = &s->comp->instrs[in->operands[2]];
    uint32_t niw, nib, nsb;
    const int64_t *iw = instr_ints(in, A_INSERTED_WINDOW_DIMS, &niw);
    const int64_t *ib = instr_ints(in, A_INPUT_BATCHING_DIMS, &nib), *sb = instr_ints(in, A_SCATTER_INDICES_BATCHING_DIMS, &nsb);
    int64_t ivd = instr_int(in, A_INDEX_VECTOR_DIM, 0);
    uint32_t ro = in->shape.rank, ri = ii->shape.rank, ru = ui->shape.rank;
    const hlo_instr *oi = &s->comp->instrs[in->operands[0]];
    int64_t udim_of_idx[VIEW_MAX_RANK], udim_of_op[VIEW_MAX_RANK];
    if (!lf_scatter_dims(s->comp, in, udim_of_idx, udim_of_op)) return false;
    /* The views the three must have, from the sharded ones. */
    view vo = view_dup(ro), vi = view_dup(ri), vu = view_dup(ru);
    /* Indices offset per device by its block of the operand along the one
     * scatter dim (GSPMD's vocab-parallel scatter: index - r·size): every
     * device adds the rows that fall in its block and drops the others (a
     * scatter skips indices out of bounds), which is the global scatter with
     * that dim sharded; the indices are the source's term. */
    if (blocked) {
        /* A window of one element along the blocked dim: a wider one could
         * straddle two blocks, dropped by both devices but not globally. The
         * operand is a splat or already split in those blocks (a table
         * updated in place). */
        int64_t wd = udim_of_op[bk];
        const view_dim *od = &s->ops[0].v.dims[bk];
        if ((od->naxes && memcmp(od, &bdim, sizeof bdim)) || member(ib, nib, bk) ||
            (!member(iw, niw, bk) && (wd < 0 || ui->shape.dims[wd] != 1)))
            return false;
        vo.dims[bk] = bdim;
    }
    /* Constant indices (positions, the same for every row of a batch the
     * updates shard) read under the updates' sharding of their dims. */
    view xw = s->ops[1].v;
    bool rewant = false;
    for (uint32_t d = 0; d < ri; d++)
        if ((int64_t)d != ivd && udim_of_idx[d] >= 0 && !xw.dims[d].naxes && s->ops[2].v.dims[udim_of_idx[d]].naxes)
            xw.dims[d] = s->ops[2].v.dims[udim_of_idx[d]], rewant = true;
    if (rewant && s->ops[1].konst) lf_konst_review(s, 1, &xw);
    const lval *o = &s->ops[0], *x = &s->ops[1], *y = &s->ops[2];
    if (o->v.partial || x->v.partial || (y->v.partial && y->v.red != RED_SUM)) return false;
    bool zero_operand = false;
    const interp_val *ov = lf_kval(c, o->cls);
    if (ov) {
        zero_operand = true;
        for (int64_t k = 0; k < ov->n && zero_operand; k++) zero_operand = interp_val_get(ov, k) == 0;
    }
    uint8_t partial = 0;
    for (uint32_t d = 0; d < ri; d++) {
        const view_dim *xd = &x->v.dims[d];
        if (!xd->naxes) continue;
        if ((int64_t)d == ivd || udim_of_idx[d] < 0) return false;
        vi.dims[d] = *xd;
        vu.dims[udim_of_idx[d]] = *xd;
        int64_t k = -1;
        for (uint32_t q = 0; q < nsb; q++)
            if (sb[q] == d) k = ib[q];
        if (k >= 0) vo.dims[k] = *xd;
        else for (uint32_t a = 0; a < xd->naxes; a++) partial |= (uint8_t)(1u << xd->axes[a]);
    }
    for (uint32_t d = 0; d < ro; d++) {
        const view_dim *od = &o->v.dims[d];
        if (blocked && d == bk) continue;  /* taken above */
        if (udim_of_op[d] >= 0) {
            /* a window dim sharded in the operand or the updates: whole
             * windows of the local block (the window starts at 0 or is
             * dropped alike on both sides) */
            const view_dim *wd = od->naxes ? od : &y->v.dims[udim_of_op[d]];
            if (!wd->naxes) continue;
            if (ui->shape.dims[udim_of_op[d]] != oi->shape.dims[d] || (vo.dims[d].naxes && memcmp(&vo.dims[d], wd, sizeof *wd)))
                return false;
            vo.dims[d] = *wd;
            vu.dims[udim_of_op[d]] = *wd;
        } else if (od->naxes && memcmp(&vo.dims[d], od, sizeof *od)) {
            return false;
        }
    }
    /* every mesh axis bound once */
    uint32_t nbound = 0;
    for (uint32_t d = 0; d < ro; d++) nbound += vo.dims[d].naxes;
    if (nbound != (uint32_t)__builtin_popcount(view_axes_used(&vo))) return false;
    /* Updates that are partial sums: a scatter-add into zeros is linear in
     * them, so the result is partial over the same axes. */
    vu.partial = y->v.partial;
    vu.red = y->v.partial ? RED_SUM : 0;
    partial |= y->v.partial;
    /* The reducer of the partial result: a sum into zeros, or an idempotent
     * reducer (max, min, and, or) into any operand every device holds alike:
     * each device's result is the operand combined with its rows, and
     * combining those over the devices counts the operand once or many
     * times, the same for max (a segment max over edges sharded by source). */
    int red = instr_reducer(c->cur, in);
    bool idem = red == RED_MAX || red == RED_MIN || red == RED_AND || red == RED_OR;
    if (partial && (partial & view_axes_used(&vo))) return false;
    if (partial && !(red == RED_SUM && zero_operand) && !(idem && !y->v.partial)) return false;
    const view *want[3] = {&vo, &vi, &vu};
    for (uint32_t k = 0; k < 3; k++)
        if (!view_equal(&s->ops[k].v, want[k]) && !splat_review(s, k, want[k]) &&
            !(k != 1 && !want[k]->partial && lf_review_operand(s, k, want[k]) && view_equal(&s->ops[k].v, want[k])))
            return false;
    view v = vo;
    v.partial = partial;
    v.red = partial ? (uint8_t)red : 0;
    int64_t dims[VIEW_MAX_RANK];
    lf_global_dims(c, &v, &in->shape, dims);
    eid ch[3] = {s->ops[0].cls, s->ops[1].cls, s->ops[2].cls};
    *out = term(lf_node(c, c->cur, in, ch, 3, dims, c->origin), v, o->assumed || x->assumed || y->assumed);
    return true;
}

bool lf_scatter_reading(lstate *s, lval *out) {
    return s->in->noperands == 3 ? unit_readings(s, 2, scatter_reading, out) : scatter_reading(s, out);
}

