/* lift_argmax — reduces that select: a variadic reduce of values beside
 * their positions (argmax, argmin, as JAX writes them) and the two-level
 * reduction a partitioned program makes of one over a sharded dim.
 * Owns:
 *   lf_select_kind  what a reduce's reducer computes, decided by running it
 *                   on every order of its operands (never by names)
 *   lf_select_red   the partial reduction a stack element of such a reduce
 *                   completes (lf_stack_only_reduced)
 *   lf_lift_reduce_tuple  the transfer function of a variadic reduce:
 *     - the reduced dims whole on every device: rows of the global reduce,
 *       under the kept dims' sharding, whatever the reducer;
 *     - a reduced dim sharded: each device's (value, position) is the
 *       selection among its block, so the global selection is the same
 *       selection among the devices' pairs — the pair is partial over those
 *       axes, the value partial(max|min), the position partial(arg);
 *     - the stack of a group's pairs (all-gathers of both elements along
 *       one dim) reduced over it with the same kind of reducer and the same
 *       inits: the complete pair.
 * Why the two levels are the one: the reducer (checked below) returns the
 * greater of its two pairs under one total preorder — value first (NaN
 * above everything; for argmin the order of values reversed, NaN still
 * above), then the lower position — in which two pairs that tie are equal
 * pairs. A selection by a total preorder is associative, commutative and
 * idempotent, so reducing the multiset of all elements and the init, in any
 * grouping and with the init taken more than once, gives its greatest
 * element: the baseline's. The one exception is a row with NaN in several
 * places, where JAX's reducer keeps whichever NaN it holds first; XLA
 * leaves the order of a reduction open, so the position is any of theirs in
 * the baseline too (an assumption recorded with the verdict).
 */
#include "lift.h"
#include "lift_int.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- the reducer's kind ---- */

/* Parameter number of instruction `at` of comp when it is a parameter, else -1. */
static int64_t param_no(const hlo_comp *comp, uint32_t at) {
    const hlo_instr *p = &comp->instrs[at];
    return p->op == OP_PARAMETER ? instr_int(p, A_PARAMETER_NUMBER, 0) : -1;
}

static bool cmp_is_total(const hlo_instr *in) {
    const char *t = instr_str(in, A_COMPARE_TYPE);
    if (t && strcmp(t, "TOTALORDER") == 0) return true;
    for (uint32_t k = 0; k < in->nattrs; k++)
        if (in->attrs[k].key == A_RAW) return true;  /* an attribute not read (order=TOTAL): not judged */
    return false;
}

/* Whether reducer comp only compares its values with each other and its
 * positions with each other (p0 with p2, p1 with p3, or one with itself) and
 * combines the answers and picks parameters: then what it returns is decided
 * by the order of the two values (NaN included) and of the two positions
 * alone, so running it on one case of each order decides it everywhere. */
static bool order_only(const hlo_comp *comp) {
    if (comp->nparams != 4 || comp->root >= comp->ninstrs) return false;
    const hlo_instr *root = &comp->instrs[comp->root];
    if (root->op != OP_TUPLE || root->noperands != 2) return false;
    for (uint32_t i = 0; i < comp->ninstrs; i++) {
        const hlo_instr *y = &comp->instrs[i];
        if (y->shape.dtype == DT_TUPLE ? i != comp->root : y->shape.rank != 0) return false;
        switch (y->op) {
        case OP_PARAMETER: case OP_AND: case OP_OR: case OP_NOT: case OP_XOR: case OP_SELECT: case OP_TUPLE: break;
        case OP_COMPARE: {
            if (y->noperands != 2 || cmp_is_total(y)) return false;
            int64_t a = param_no(comp, y->operands[0]), b = param_no(comp, y->operands[1]);
            if (a < 0 || b < 0 || a % 2 != b % 2) return false;
            break;
        }
        default: return false;
        }
    }
    return true;
}

/* Runs reducer comp on scalars in[4]; out[2] gets its two results. False
 * when the interpreter refuses an op. */
static bool run_reducer(const hlo_module *m, const hlo_comp *comp, const int dt[4], const double in[4], double out[2]) {
    interp_val **v = xcalloc(comp->ninstrs + 1, sizeof *v);
    bool ok = true;
    for (uint32_t i = 0; i < comp->ninstrs && ok; i++) {
        const hlo_instr *y = &comp->instrs[i];
        if (y->op == OP_TUPLE) continue;
        int64_t p = param_no(comp, i);
        if (p >= 0) {
            if (p > 3) {
                ok = false;
                break;
            }
            v[i] = interp_val_new(dt[p], 0, NULL);
            interp_val_set(v[i], 0, in[p]);
            continue;
        }
        interp_val *ops[3] = {NULL, NULL, NULL};
        for (uint32_t o = 0; o < y->noperands && o < 3; o++) ops[o] = v[y->operands[o]];
        v[i] = interp_eval_instr(m, y, ops, NULL);
        ok = v[i] != NULL;
    }
    const hlo_instr *root = &comp->instrs[comp->root];
    for (uint32_t k = 0; k < 2 && ok; k++) {
        const interp_val *r = v[root->operands[k]];
        ok = r && r->n == 1;
        if (ok) out[k] = interp_val_get(r, 0);
    }
    for (uint32_t i = 0; i < comp->ninstrs; i++) interp_val_free(v[i]);
    free(v);
    return ok;
}

static bool same_value(double a, double b) { return (isnan(a) && isnan(b)) || a == b; }

/* Which pairs the selection of `kind` may return for (a, b): bit 0 a, bit 1
 * b (both: the pairs are equal, or both values are NaN). */
static unsigned want_pick(int kind, const double a[2], const double b[2]) {
    bool na = isnan(a[0]), nb = isnan(b[0]);
    if (na || nb) return (na ? 1u : 0u) | (nb ? 2u : 0u);
    if (a[0] != b[0]) return (kind == SEL_ARGMAX) == (a[0] > b[0]) ? 1u : 2u;
    return a[1] < b[1] ? 1u : a[1] > b[1] ? 2u : 3u;
}

int lf_select_kind(const hlo_module *m, const hlo_instr *in) {
    const hlo_attr *ta = instr_attr(in, A_TO_APPLY);
    if (in->op != OP_REDUCE || in->noperands != 4 || !ta || ta->v.ints[0] >= m->ncomps) return SEL_NONE;
    const hlo_comp *comp = &m->comps[ta->v.ints[0]];
    if (!order_only(comp)) return SEL_NONE;
    int dt[4];
    for (uint32_t p = 0; p < 4; p++) dt[p] = comp->instrs[comp->params[p]].shape.dtype;
    /* values of a float or integer type (not pred: its 0 and 1 would read
     * like positions), positions of one integer type */
    if (dt[0] != dt[2] || dt[1] != dt[3] || !dtype_is_int(dt[1]) || !(dtype_is_float(dt[0]) || dtype_is_int(dt[0])))
        return SEL_NONE;
    /* One case of each order: values apart from the positions, so which
     * parameter a result is can be told from its number. */
    static const double fv[][2] = {{10, 20}, {20, 10}, {10, 10}, {NAN, 10}, {10, NAN}, {NAN, NAN}};
    static const double pv[][2] = {{0, 1}, {1, 0}, {0, 0}};
    uint32_t nv = dtype_is_float(dt[0]) ? 6 : 3;
    bool ok[3] = {false, true, true};
    for (uint32_t i = 0; i < nv; i++)
        for (uint32_t j = 0; j < 3; j++) {
            double args[4] = {fv[i][0], pv[j][0], fv[i][1], pv[j][1]}, out[2];
            double a[2] = {args[0], args[1]}, b[2] = {args[2], args[3]};
            if (!run_reducer(m, comp, dt, args, out)) return SEL_NONE;
            unsigned got = (same_value(out[0], a[0]) && out[1] == a[1] ? 1u : 0u) |
                           (same_value(out[0], b[0]) && out[1] == b[1] ? 2u : 0u);
            for (int k = SEL_ARGMAX; k <= SEL_ARGMIN; k++) ok[k] &= got && (got & want_pick(k, a, b));
        }
    return ok[SEL_ARGMAX] ? SEL_ARGMAX : ok[SEL_ARGMIN] ? SEL_ARGMIN : SEL_NONE;
}

int lf_select_red(const hlo_module *m, const hlo_instr *in, uint32_t o) {
    int k = o < 2 ? lf_select_kind(m, in) : SEL_NONE;
    if (!k) return RED_NONE;
    return o == 1 ? RED_ARG : k == SEL_ARGMAX ? RED_MAX : RED_MIN;
}

/* ---- the transfer function ---- */

/* A tuple of the elements of node (a variadic reduce over the global
 * operands), each under v with its own partial reduction red[j]. */
static lval pair_tuple(lstate *s, eid node, const view *v, const uint8_t *red, bool assumed) {
    lift_ctx *c = s->c;
    const hlo_instr *in = s->in;
    lval t = {.kind = LV_TUPLE, .n = in->shape.ntuple};
    t.elems = arena_alloc(c->a, (t.n + 1) * sizeof *t.elems);
    for (uint32_t j = 0; j < t.n; j++) {
        const shape *es = &in->shape.tuple[j];
        int64_t dims[VIEW_MAX_RANK], words[3] = {A_INDEX, 1, j};
        view w = *v;
        w.red = v->partial ? red[j] : 0;
        lf_global_dims(c, &w, es, dims);
        /* index 0 is the default, which the readers leave out (as lf_node's
         * get-tuple-element of the baseline has it) */
        eid e = eg_add(c->g, OP_GET_TUPLE_ELEMENT, eg_attr(c->g, words, j ? 3 : 0), lf_type_of(c, es->dtype, dims, es->rank),
                       &node, 1, c->origin);
        t.elems[j] = term(e, w, assumed);
    }
    return t;
}

/* The tuple class whose element j is class cls, or cls reshaped (a unit dim
 * added before a gather); EID_NONE when there is none. */
static eid element_of(lift_ctx *c, eid cls, uint32_t j) {
    const eid *ch;
    for (int hop = 0; hop < 2; hop++) {
        for (eid k = eg_class_first(c->g, eg_find(c->g, cls)); k != EID_NONE; k = eg_class_next(c->g, k)) {
            uint32_t n, nw;
            const eid *kids = eg_node_children(c->g, k, &n);
            const int64_t *w = eg_attr_words(c->g, eg_node_attr(c->g, k), &nw);
            bool at_j = j ? nw == 3 && w[0] == A_INDEX && w[2] == (int64_t)j : nw == 0;
            if (eg_node_op(c->g, k) == OP_GET_TUPLE_ELEMENT && n == 1 && at_j)
                return eg_find(c->g, kids[0]);
        }
        if (hop || lf_class_node(c, cls, OP_RESHAPE, 1, &ch) == EID_NONE) return EID_NONE;
        cls = ch[0];
    }
    return EID_NONE;
}

/* The stack of a group's (value, position) pairs — both elements of one
 * selecting reduce, partial over the axes two all-gathers along dim d
 * collect — reduced over d by a reducer of the same kind with the same
 * inits: the complete pair, on every device (false: not this form). */
static bool stacked_pairs(lstate *s, int kind, lval *out) {
    lift_ctx *c = s->c;
    const hlo_instr *in = s->in;
    uint32_t nd, d[2];
    const int64_t *rd = instr_ints(in, A_DIMENSIONS, &nd);
    int axes[2];
    const lval *x[2];
    for (uint32_t j = 0; j < 2; j++)
        if (s->ops[j].kind != LV_UNKNOWN || !lf_gathered_partials(s, in->operands[j], &axes[j], &d[j], &x[j])) return false;
    const shape *pre = &s->comp->instrs[s->comp->instrs[in->operands[0]].operands[0]].shape;
    if (!kind || x[0]->v.rank != in->shape.tuple[0].rank + 1 || axes[0] != axes[1] || d[0] != d[1] || nd != 1 || rd[0] != (int64_t)d[0] || pre->dims[d[0]] != 1 ||
        x[0]->v.partial != (uint32_t)axes[0] || x[1]->v.partial != x[0]->v.partial ||
        x[0]->v.red != (kind == SEL_ARGMAX ? RED_MAX : RED_MIN) || x[1]->v.red != RED_ARG ||
        !lf_same_sharding(&x[0]->v, &x[1]->v) || lf_scale_of(x[0]) != 1 || lf_scale_of(x[1]) != 1)
        return false;
    eid node = element_of(c, x[0]->cls, 0);
    const eid *ch;
    if (node == EID_NONE || node != element_of(c, x[1]->cls, 1) || lf_class_node(c, node, OP_REDUCE, 4, &ch) == EID_NONE)
        return false;
    for (uint32_t o = 2; o < 4; o++)
        if (s->ops[o].kind != LV_TERM || eg_find(c->g, s->ops[o].cls) != eg_find(c->g, ch[o])) return false;
    view w = view_dup(in->shape.tuple[0].rank);
    for (uint32_t k = 0, q = 0; k < x[0]->v.rank; k++)
        if (k != d[0]) w.dims[q++] = x[0]->v.dims[k];
    lval t = {.kind = LV_TUPLE, .n = 2};
    t.elems = arena_alloc(c->a, 3 * sizeof *t.elems);
    for (uint32_t j = 0; j < 2; j++) {
        const shape *es = &in->shape.tuple[j];
        int64_t gd[VIEW_MAX_RANK];
        if (es->rank != w.rank) return false;
        lf_global_dims(c, &w, es, gd);
        t.elems[j] = term(lf_mk_reshape(c, x[j]->cls, lf_type_of(c, es->dtype, gd, es->rank), c->origin), w, x[0]->assumed || x[1]->assumed);
    }
    *out = t;
    return true;
}

lval lf_lift_reduce_tuple(lstate *s) {
    lift_ctx *c = s->c;
    const hlo_instr *in = s->in;
    uint32_t n = in->noperands, k = n / 2, nd;
    /* the baseline's own reduce is its generic term (lift.c) */
    if (c->baseline_mode || n % 2 || n > 16 || in->shape.dtype != DT_TUPLE || in->shape.ntuple != k) return unknown();
    const hlo_instr *src = &s->comp->instrs[in->operands[0]];
    const int64_t *rd = instr_ints(in, A_DIMENSIONS, &nd);
    if (src->shape.rank > VIEW_MAX_RANK) return unknown();
    for (uint32_t o = k; o < n; o++) {
        lf_uniform_dev_as_term(s, o);
        const lval *init = &s->ops[o];
        if (init->kind != LV_TERM || init->v.partial || init->v.rank || lf_scale_of(init) != 1) return unknown();
    }
    int kind = k == 2 ? lf_select_kind(c->cur, in) : SEL_NONE;
    lval st;
    if (k == 2 && stacked_pairs(s, kind, &st)) return st;
    /* The operands read alike: under the view of the first that is data
     * (an iota of positions beside it is re-read under it). */
    uint32_t lead = 0;
    for (uint32_t o = 0; o < k; o++)
        if (s->ops[o].kind == LV_TERM && !s->ops[o].konst) {
            lead = o;
            break;
        }
    if (s->ops[lead].kind != LV_TERM) return unknown();
    view want = s->ops[lead].v;
    bool assumed = false;
    eid ch[16];
    for (uint32_t o = 0; o < n; o++) {
        if (o < k && !lf_same_sharding(&s->ops[o].v, &want)) lf_review_operand(s, o, &want);
        const lval *x = &s->ops[o];
        if (x->kind != LV_TERM || (o < k && (x->v.partial || !lf_same_sharding(&x->v, &want) || lf_scale_of(x) != 1)))
            return unknown();
        assumed |= x->assumed;
        ch[o] = x->cls;
    }
    view v = view_dup(in->shape.tuple[0].rank);
    uint8_t partial = 0;
    bool unsure = false;
    for (uint32_t d = 0, q = 0; d < src->shape.rank; d++) {
        bool reduced = false;
        for (uint32_t j = 0; j < nd; j++) reduced |= rd[j] == (int64_t)d;
        if (!reduced) {
            if (q >= v.rank) return unknown();
            v.dims[q++] = want.dims[d];
            continue;
        }
        for (uint32_t a = 0; a < want.dims[d].naxes; a++) partial |= (uint8_t)(1u << want.dims[d].axes[a]);
        unsure |= s->ops[lead].ambiguous && want.dims[d].naxes && src->shape.dims[d] == 1;
    }
    uint8_t red[2] = {0, 0};
    if (partial) {
        /* A reduced dim sharded: each device selects within its block, which
         * is a partial selection only for a reducer that selects. */
        if (!kind) {
            lf_unsupported(c, s->comp, in, "%s reduces a sharded dimension with a reducer of several values that is not "
                           "a selection of one (value, position) pair by value and lowest position (argmax, argmin)",
                           in->name);
            return unknown();
        }
        red[0] = kind == SEL_ARGMAX ? RED_MAX : RED_MIN;
        red[1] = RED_ARG;
        v.partial = partial;
        if (dtype_is_float(src->shape.dtype))
            lf_assume(c, "where several values of a row are NaN, the position %s returns is any of theirs (XLA applies a "
                      "reducer in no fixed order)", kind == SEL_ARGMAX ? "argmax" : "argmin");
    }
    eid node = lf_node(c, c->cur, in, ch, n, in->shape.dims, c->origin);
    lval t = pair_tuple(s, node, &v, red, assumed);
    for (uint32_t j = 0; j < t.n; j++) t.elems[j].partial_unsure = unsure && partial;
    return t;
}
