/* locate — the site where a distributed program execution shows apart from
 * its baseline first holds what the baseline never does (contract in
 * locate.h). */
#include "locate.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "debug.h"

/* Element comparisons one search may make (a few tenths of a second). */
#define LOCATE_MAX_WORK ((int64_t)1 << 27)

typedef struct node {
    const hlo_comp *c;
    uint32_t i;
    interp_val **v;        /* one per device; NULL when not kept */
    bool repeated;         /* evaluated again, or by some devices only */
    uint8_t match;         /* distributed: 0 none, 1 a baseline value in some view, 2 only as a partial sum */
    uint32_t axes;         /* match 2: the partial axes */
    uint8_t red;           /* and their reduction */
    bool in_z;             /* leads to a differing output through values that are no baseline value */
    bool feeds_z;          /* match 2 and an operand of such a value */
    double tol;            /* baseline: the tolerance comparing with v[0] (NaN: not computed yet) */
} node;

typedef struct side {
    const hlo_module *m;
    int64_t ndev;
    node *nodes;
    uint32_t n;
    size_t cap;
    uint32_t **at;         /* per computation: node + 1 of each instruction (lazily) */
    uint32_t *caller;      /* per computation: node + 1 of the call that ran it (0: none or several) */
} side;

static void drop_values(side *s, node *x) {
    for (int64_t d = 0; x->v && d < s->ndev; d++) interp_val_free(x->v[d]);
    free(x->v);
    x->v = NULL;
}

/* The computation a call runs, or NULL. */
static const hlo_comp *callee_of(const hlo_module *m, const hlo_instr *in) {
    if (in->op != OP_CALL) return NULL;
    uint32_t k = instr_called(m, in, A_TO_APPLY);
    if (k == UINT32_MAX) k = instr_called(m, in, A_CALLS);
    return k == UINT32_MAX ? NULL : &m->comps[k];
}

static void observe(void *ctx, const hlo_comp *c, uint32_t i, uint32_t na, const int64_t *devs, interp_val *const *res) {
    side *s = ctx;
    uint32_t ci = (uint32_t)(c - s->m->comps);
    if (!s->at[ci]) s->at[ci] = xcalloc(c->ninstrs + 1, sizeof **s->at);
    if (s->at[ci][i]) { /* a loop body's, a reducer's: no one value */
        node *x = &s->nodes[s->at[ci][i] - 1];
        x->repeated = true;
        drop_values(s, x);
        return;
    }
    XGROW(s->nodes, s->cap, s->n + 1);
    node *x = &s->nodes[s->n++];
    memset(x, 0, sizeof *x);
    x->c = c;
    x->i = i;
    x->tol = NAN;
    s->at[ci][i] = s->n;
    bool all = na == s->ndev;
    for (uint32_t a = 0; all && a < na; a++) all = devs[a] == a;
    if (!all) {
        x->repeated = true;
        return;
    }
    x->v = xmalloc((size_t)na * sizeof *x->v);
    for (uint32_t a = 0; a < na; a++) x->v[a] = interp_val_ref(res[a]);
    const hlo_comp *callee = callee_of(s->m, &c->instrs[i]);
    if (callee) s->caller[callee - s->m->comps] = s->caller[callee - s->m->comps] ? UINT32_MAX : s->n;
}

static void side_init(side *s, const hlo_module *m, int64_t ndev) {
    memset(s, 0, sizeof *s);
    s->m = m;
    s->ndev = ndev;
    s->at = xcalloc(m->ncomps + 1, sizeof *s->at);
    s->caller = xcalloc(m->ncomps + 1, sizeof *s->caller);
}

static void side_free(side *s) {
    for (uint32_t k = 0; k < s->n; k++) drop_values(s, &s->nodes[k]);
    free(s->nodes);
    for (uint32_t c = 0; c < s->m->ncomps; c++) free(s->at[c]);
    free(s->at);
    free(s->caller);
}

static node *node_at(const side *s, const hlo_comp *c, uint32_t i) {
    uint32_t ci = (uint32_t)(c - s->m->comps);
    return s->at[ci] && s->at[ci][i] ? &s->nodes[s->at[ci][i] - 1] : NULL;
}

static bool is_array(const interp_val *v) { return v && v->dtype != DT_TUPLE && !v->im; }

/* ---- one view of one baseline value ---- */

typedef struct probe {
    const mesh *m;
    int64_t ndev;
    const interp_val *g;        /* the baseline value */
    interp_val *const *v;       /* the devices' values */
    double tol;                 /* absolute */
    double scale;               /* compared with scale · g */
    int64_t *work;
    int64_t *grp;               /* scratch: a group's devices */
} probe;

/* Element e of a local array of dims l, inside the block at off of g. */
static int64_t global_index(const interp_val *g, const int64_t *off, const int64_t *l, int64_t e) {
    int64_t idx = 0, rest = e, stride = 1;
    for (uint32_t k = g->rank; k-- > 0;) {
        int64_t c = rest % l[k];
        rest /= l[k];
        idx += (off[k] + c) * stride;
        stride *= g->dims[k];
    }
    return idx;
}

static bool close_to(double a, double b, double tol) { return a == b || fabs(a - b) <= tol || (isnan(a) && isnan(b)); }

/* Devices d and e differ only along the axes in mask. */
static bool same_group(const mesh *m, int64_t d, int64_t e, uint32_t mask) {
    for (uint32_t a = 0; a < m->naxes; a++)
        if (!(mask >> a & 1) && mesh_coord(m, d, (int)a) != mesh_coord(m, e, (int)a)) return false;
    return true;
}

/* Whether the devices' values are p->g under w (its partial axes summed). */
static bool fits(probe *p, const view *w) {
    const interp_val *v0 = p->v[0];
    int64_t n = v0->n;
    for (int64_t d = 0; d < p->ndev; d++) {
        bool lead = true; /* the group's first device (0 on every partial axis) */
        for (uint32_t a = 0; a < p->m->naxes && lead; a++) lead = !(w->partial >> a & 1) || mesh_coord(p->m, d, (int)a) == 0;
        if (!lead) continue;
        int64_t off[INTERP_MAX_RANK], size[INTERP_MAX_RANK];
        view_block(w, p->m, p->g->dims, p->g->rank, d, off, size);
        for (uint32_t k = 0; k < p->g->rank; k++)
            if (size[k] != v0->dims[k]) return false;
        int64_t ng = 1; /* the group's devices, in device order */
        p->grp[0] = d;
        for (int64_t o = d + 1; w->partial && o < p->ndev; o++)
            if (same_group(p->m, d, o, w->partial)) p->grp[ng++] = o;
        /* charged as a whole group's reduction (the budget's unit), though
         * the first element that differs ends it */
        if (w->partial) *p->work += n * p->ndev;
        for (int64_t e = 0; e < n; e++) {
            double got = interp_val_get(p->v[p->grp[0]], e);
            for (int64_t q = 1; q < ng; q++) { /* the group's reduction */
                double x = interp_val_get(p->v[p->grp[q]], e);
                got = w->red == RED_MAX ? fmax(got, x) : w->red == RED_MIN ? fmin(got, x) : got + x;
            }
            double want = p->scale * interp_val_get(p->g, global_index(p->g, off, v0->dims, e));
            (*p->work)++;
            if (!close_to(got, want, p->tol)) return false;
        }
    }
    return true;
}

/* The factor c with the devices' values c · p->g under w (no partial axes),
 * fitted over every device; 0 when none fits. */
static double factor_of(probe *p, const view *w) {
    const interp_val *v0 = p->v[0];
    double vg = 0, gg = 0;
    for (int64_t d = 0; d < p->ndev; d++) {
        int64_t off[INTERP_MAX_RANK], size[INTERP_MAX_RANK];
        view_block(w, p->m, p->g->dims, p->g->rank, d, off, size);
        for (uint32_t k = 0; k < p->g->rank; k++)
            if (size[k] != v0->dims[k]) return 0;
        for (int64_t e = 0; e < v0->n; e++) {
            double x = interp_val_get(p->v[d], e), y = interp_val_get(p->g, global_index(p->g, off, v0->dims, e));
            vg += x * y;
            gg += y * y;
        }
        *p->work += v0->n;
    }
    if (!(gg > 0) || !isfinite(vg / gg) || vg == 0) return 0;
    probe q = *p;
    q.scale = vg / gg;
    q.tol = p->tol * fabs(q.scale);
    return fits(&q, w) ? q.scale : 0;
}

/* The absolute tolerance comparing with g: 1e-6 of its largest finite
 * magnitude (both programs run in binary64); integers exactly. */
static double tolerance(const interp_val *g) {
    double big = 0;
    for (int64_t e = 0; dtype_is_float(g->dtype) && e < g->n; e++) {
        double x = fabs(interp_val_get(g, e));
        if (isfinite(x)) big = fmax(big, x);
    }
    return dtype_is_float(g->dtype) ? 1e-6 * big + 1e-300 : 0;
}

/* ---- every view of a baseline value ---- */

typedef struct views {
    probe *p;
    int64_t ratio[INTERP_MAX_RANK];  /* blocks along each dim */
    view w;
    bool want_factor;               /* find a factor instead (no partial axes) */
    double factor;
    uint32_t found_partial;         /* the partial axes of the view that fit */
    uint8_t found_red;              /* and its reduction */
    bool found;
} views;

/* Views whose dims from k on are cut as ratio says, by axes outside used;
 * then (want_factor aside) the partial axes among the rest, none first. */
static bool each_view(views *s, uint32_t k, uint32_t used, int64_t left) {
    const mesh *m = s->p->m;
    if (*s->p->work > LOCATE_MAX_WORK) return false;
    if (k == s->w.rank) {
        if (s->want_factor) {
            s->w.partial = 0;
            s->factor = factor_of(s->p, &s->w);
            return s->found = s->factor != 0;
        }
        uint32_t rest = ((1u << m->naxes) - 1) & ~used;
        for (uint32_t sub = 0;; sub = (sub - rest) & rest) { /* every subset of rest, 0 first */
            bool unit = false;
            for (uint32_t a = 0; a < m->naxes; a++) unit |= (sub >> a & 1) && m->sizes[a] == 1;
            static const uint8_t reds[] = {RED_SUM, RED_MAX, RED_MIN};
            for (int r = 0; r < (sub ? 3 : 1) && !unit; r++) {
                s->w.partial = (uint8_t)sub;
                s->w.red = sub ? reds[r] : RED_NONE;
                if (fits(s->p, &s->w)) {
                    s->found_partial = sub;
                    s->found_red = s->w.red;
                    return s->found = true;
                }
            }
            if (sub == rest) break;
        }
        return false;
    }
    if (left == 1) { /* dim k is cut as it must be: the next one, from no axes */
        if (k + 1 < s->w.rank) s->w.dims[k + 1].naxes = 0;
        return each_view(s, k + 1, used, k + 1 < s->w.rank ? s->ratio[k + 1] : 1);
    }
    for (uint32_t a = 0; a < m->naxes; a++) {
        if ((used >> a & 1) || m->sizes[a] < 2 || left % m->sizes[a] || s->w.dims[k].naxes >= MESH_MAX_AXES) continue;
        s->w.dims[k].axes[s->w.dims[k].naxes++] = (uint8_t)a;
        bool ok = each_view(s, k, used | 1u << a, left / m->sizes[a]);
        s->w.dims[k].naxes--;
        if (ok) return true;
    }
    return false;
}

/* Whether x's values are baseline value b's (node b) under some view (factor: c times
 * them, c found in *factor); on a partial fit, its axes in *axes. */
static bool fits_some_view(probe *p, node *b, interp_val *const *v, bool want_factor, double *factor, uint32_t *axes,
                           uint8_t *red) {
    const interp_val *g = b->v[0], *v0 = v[0];
    if (g->rank != v0->rank || g->n == 0 || dtype_is_float(g->dtype) != dtype_is_float(v0->dtype)) return false;
    views s = {.p = p, .want_factor = want_factor};
    int64_t blocks = 1;
    for (uint32_t k = 0; k < g->rank; k++) {
        if (v0->dims[k] == 0 || g->dims[k] % v0->dims[k]) return false;
        s.ratio[k] = g->dims[k] / v0->dims[k];
        blocks *= s.ratio[k];
    }
    if (blocks > p->ndev) return false;
    for (int64_t d = 1; d < p->ndev; d++)
        if (v[d]->n != v0->n) return false;
    p->g = g;
    p->v = v;
    p->scale = 1;
    if (isnan(b->tol)) b->tol = tolerance(g);
    p->tol = b->tol;
    s.w = view_dup(g->rank);
    if (!each_view(&s, 0, 0, g->rank ? s.ratio[0] : 1)) return false;
    if (factor) *factor = s.factor;
    if (axes) *axes = s.found_partial;
    if (red) *red = s.found_red;
    return true;
}

/* ---- the search ---- */

static int64_t module_elements(const hlo_module *m) {
    int64_t n = 0;
    for (uint32_t c = 0; c < m->ncomps; c++)
        for (uint32_t i = 0; i < m->comps[c].ninstrs; i++) {
            int64_t e = shape_elements(&m->comps[c].instrs[i].shape);
            n += e > 0 ? e : 1;
        }
    return n;
}

/* Whether instruction i of c depends on an entry parameter (a called
 * computation's parameters are taken to). */
static bool depends(const hlo_module *m, const hlo_comp *c, uint32_t i, uint8_t **memo, int depth) {
    uint32_t ci = (uint32_t)(c - m->comps);
    if (!memo[ci]) memo[ci] = xcalloc(c->ninstrs + 1, 1);
    if (memo[ci][i]) return memo[ci][i] == 2;
    const hlo_instr *in = &c->instrs[i];
    bool dep = in->op == OP_PARAMETER;
    for (uint32_t k = 0; !dep && k < in->noperands && depth < 256; k++) dep = depends(m, c, in->operands[k], memo, depth + 1);
    memo[ci][i] = dep ? 2 : 1;
    return dep;
}

/* Adds the operands of x (a call: its body's root; a called computation's
 * parameter: its call's operand) to the stack when they are no baseline value. */
static void push_operands(side *s, const node *x, uint32_t *stack, uint32_t *n) {
    const hlo_instr *in = &x->c->instrs[x->i];
    for (uint32_t k = 0; k <= in->noperands; k++) {
        node *o = NULL;
        if (k < in->noperands) {
            o = node_at(s, x->c, in->operands[k]);
        } else if (callee_of(s->m, in)) {
            const hlo_comp *callee = callee_of(s->m, in);
            o = node_at(s, callee, callee->root);
        } else if (in->op == OP_PARAMETER && x->c != graph_entry(s->m)) {
            uint32_t call = s->caller[x->c - s->m->comps];
            const node *cn = call && call != UINT32_MAX ? &s->nodes[call - 1] : NULL;
            int64_t p = instr_int(in, A_PARAMETER_NUMBER, -1);
            const hlo_instr *ci = cn ? &cn->c->instrs[cn->i] : NULL;
            if (ci && p >= 0 && p < ci->noperands) o = node_at(s, cn->c, ci->operands[p]);
        }
        if (o && o->match == 2) o->feeds_z = true;
        if (!o || o->in_z || o->repeated || o->match) continue;
        o->in_z = true;
        stack[(*n)++] = (uint32_t)(o - s->nodes);
    }
}

static bool forwards(const hlo_instr *in) {
    return in->op == OP_COPY || in->op == OP_BITCAST || in->op == OP_GET_TUPLE_ELEMENT || in->op == OP_TUPLE ||
           in->op == OP_CALL || in->op == OP_PARAMETER || instr_is_identity_custom_call(in);
}

void locate_run(const hlo_module *base, const hlo_module *dist, const relations *rel, const interp_config *cb,
                const interp_config *cd, interp_val **bargs, interp_val **const *dargs, locate_site *out) {
    memset(out, 0, sizeof *out);
    int64_t ndev = mesh_devices(&rel->mesh);
    if (ndev < 1 || module_elements(base) + ndev * module_elements(dist) > LOCATE_MAX_ELEMENTS) return;
    side B, D;
    side_init(&B, base, 1);
    side_init(&D, dist, ndev);
    interp_config bc = *cb, dc = *cd;
    bc.observe = dc.observe = observe;
    bc.observe_ctx = &B;
    dc.observe_ctx = &D;
    bc.stats = dc.stats = NULL;
    interp_val *bout = NULL, **dout = xcalloc((size_t)ndev, sizeof *dout);
    interp_val **bargv[1] = {bargs};
    bool ran = interp_run(base, &bc, (interp_val **const *)bargv, &bout, NULL) == INTERP_OK &&
               interp_run(dist, &dc, dargs, dout, NULL) == INTERP_OK;
    int64_t work = 0;
    probe p = {.m = &rel->mesh, .ndev = ndev, .work = &work, .grp = xmalloc((size_t)ndev * sizeof(int64_t))};
    /* which distributed values are baseline values */
    for (uint32_t k = 0; ran && k < D.n && work <= LOCATE_MAX_WORK; k++) {
        node *x = &D.nodes[k];
        if (!x->v || !is_array(x->v[0])) continue;
        for (uint32_t j = 0; j < B.n && x->match != 1; j++) {
            node *b = &B.nodes[j];
            uint32_t axes = 0;
            uint8_t red = RED_NONE;
            if (!b->v || !is_array(b->v[0]) || !fits_some_view(&p, b, x->v, false, NULL, &axes, &red)) continue;
            x->match = axes ? 2 : 1;
            x->axes = axes;
            x->red = red;
        }
    }
    /* from each output that differs, back through values that are none */
    const hlo_comp *de = graph_entry(dist), *be = graph_entry(base);
    const hlo_instr *droot = &de->instrs[de->root];
    node *rn = node_at(&D, de, de->root), *brn = node_at(&B, be, be->root);
    uint32_t *stack = xmalloc((D.n + 1) * sizeof *stack), ns = 0;
    uint32_t nouts = droot->op == OP_TUPLE ? droot->noperands : 1;
    for (uint32_t o = 0; ran && rn && brn && rn->v && brn->v && o < nouts && o < rel->noutputs && work <= LOCATE_MAX_WORK; o++) {
        interp_val **got = xcalloc((size_t)ndev, sizeof *got);
        bool ok = true;
        for (int64_t d = 0; d < ndev && ok; d++) {
            got[d] = droot->op == OP_TUPLE ? (o < rn->v[d]->nelems ? rn->v[d]->elems[o] : NULL) : rn->v[d];
            ok = is_array(got[d]) && got[d]->n == got[0]->n;
        }
        const interp_val *want = brn->v[0]->dtype == DT_TUPLE ? (o < brn->v[0]->nelems ? brn->v[0]->elems[o] : NULL) : brn->v[0];
        bool same = false;
        if (ok && is_array(want) && want->rank == got[0]->rank) {
            p.g = want;
            p.v = got;
            p.scale = 1;
            p.tol = tolerance(want);
            view w = rel->outputs[o];
            same = !w.partial && fits(&p, &w);
        }
        free(got);
        if (same) continue;
        node *y = droot->op == OP_TUPLE ? node_at(&D, de, droot->operands[o]) : rn;
        if (!y || y->repeated || y->in_z) continue;
        y->feeds_z |= y->match == 2;
        y->match = 0; /* not the baseline's output where it must be */
        y->in_z = true;
        stack[ns++] = (uint32_t)(y - D.nodes);
    }
    while (ns) push_operands(&D, &D.nodes[stack[--ns]], stack, &ns);
    free(stack);
    /* The site: the first value that is none of the baseline's and leads to
     * a differing output, else (every such value only forwards one) the
     * first partial sum one takes in. */
    uint8_t **memo = xcalloc(dist->ncomps + 1, sizeof *memo);
    for (int pass = 0; pass < 2 && ran && !out->in && work <= LOCATE_MAX_WORK; pass++)
        for (uint32_t k = 0; k < D.n; k++) {
            node *x = &D.nodes[k];
            const hlo_instr *in = &x->c->instrs[x->i];
            if (!(pass ? x->feeds_z : x->in_z) || !x->v || !is_array(x->v[0]) || forwards(in) ||
                !depends(dist, x->c, x->i, memo, 0))
                continue;
            out->comp = x->c;
            out->in = in;
            if (pass) {
                out->partial = in;
                out->partial_axes = x->axes;
                out->partial_red = x->red;
            }
            break;
        }
    if (out->in && !out->partial) {
        const node *x = node_at(&D, out->comp, (uint32_t)(out->in - out->comp->instrs));
        for (uint32_t o = 0; o < out->in->noperands && !out->partial; o++) {
            const node *y = node_at(&D, x->c, out->in->operands[o]);
            if (y && y->match == 2) {
                out->partial = &x->c->instrs[out->in->operands[o]];
                out->partial_axes = y->axes;
                out->partial_red = y->red;
            }
        }
        for (uint32_t j = 0; j < B.n && !out->partial && !out->scale; j++) {
            node *b = &B.nodes[j];
            double c = 0;
            if (b->v && is_array(b->v[0]) && fits_some_view(&p, b, x->v, true, &c, NULL, NULL) && fabs(c - 1) > 1e-6) {
                out->scale = c;
                out->like = &b->c->instrs[b->i];
            }
        }
    }
    if (dbg_on(DBG_WITNESS)) {
        uint32_t nm = 0, np = 0, nz = 0;
        for (uint32_t k = 0; k < D.n; k++) nm += D.nodes[k].match == 1, np += D.nodes[k].match == 2, nz += D.nodes[k].in_z;
        fprintf(stderr, "locate: %s; %u baseline values, %u distributed (%u baseline values, %u partial sums, %u leading to "
                "a differing output); %lld comparisons; site %s\n", ran ? "ran" : "did not run", B.n, D.n, nm, np, nz,
                (long long)work, out->in ? out->in->name : "none");
        for (uint32_t k = 0; k < D.n && dbg_on(DBG_WITNESS); k++)
            fprintf(stderr, "  %s %s%s%s\n", D.nodes[k].c->instrs[D.nodes[k].i].name, D.nodes[k].repeated ? "repeated " : "",
                    D.nodes[k].match == 1 ? "baseline" : D.nodes[k].match == 2 ? "partial" : "-", D.nodes[k].in_z ? " Z" : "");
    }
    /* A share passed on (reshaped, broadcast, copied) is named where it is made. */
    for (int hops = 0; out->partial && hops < 64; hops++) {
        const node *y = node_at(&D, out->comp, (uint32_t)(out->partial - out->comp->instrs));
        const hlo_instr *from = NULL;
        for (uint32_t o = 0; y && o < out->partial->noperands; o++) {
            const node *z = node_at(&D, out->comp, out->partial->operands[o]);
            if (z && z->match == 2 && z->axes == y->axes && z->red == y->red) from = &out->comp->instrs[out->partial->operands[o]];
            else if (z && depends(dist, out->comp, out->partial->operands[o], memo, 0)) from = NULL, o = out->partial->noperands;
        }
        if (!from) break;
        out->partial = from;
    }
    if (out->in) out->at = out->partial && !forwards(out->partial) ? out->partial : out->in;
    if (work > LOCATE_MAX_WORK) memset(out, 0, sizeof *out);
    for (uint32_t c = 0; c < dist->ncomps; c++) free(memo[c]);
    free(memo);
    free(p.grp);
    interp_val_free(bout);
    for (int64_t d = 0; d < ndev; d++) interp_val_free(dout[d]);
    free(dout);
    side_free(&B);
    side_free(&D);
}
