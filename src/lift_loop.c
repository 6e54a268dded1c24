/* lift_loop — while loops (lift.c walks them): induction over the carry.
 * Owns the baseline walk of a loop (lf_loop_baseline) and the distributed
 * loop related to it carry by carry (lf_loop_distributed); both are reached
 * from lf_lift_one through lf_loop_baseline / lf_loop_distributed. Also the
 * walk state a loop (or another reading tried and undone) saves and goes
 * back to: lf_loop_mark_take, lf_loop_mark_undo. */
#include "debug.h"
#include "lift.h"
#include "lift_int.h"
#include "interp.h"
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "segrun.h"

/* ---- while loops: induction over the carry (DESIGN §6) ----
 *
 * The baseline's loop is walked once with a fresh variable x_j for every carry
 * element: its body gives y_j(x) and its condition p(x); its result element j
 * is an opaque node while_j(init) (nothing is known of it but its name). The
 * distributed loop with the same position in walk order is related to it by
 * induction: each carry element k of its initial value is a baseline initial
 * element j = pi(k) under a view v_k and a constant factor s_k
 * (device-independent counters: equal values); entering the body with
 * x_pi(k) under (v_k, s_k), the body must return y_pi(k) under (v_k, s_k),
 * and the condition must be p. Then, iteration by iteration, the distributed
 * carry is the baseline carry under the views, both loops stop together, and
 * result element k is while_pi(k)(init) under (v_k, s_k). Carries are paired
 * by their initial values, not by position (the partitioner reorders them);
 * a constant one (a zero-filled buffer, a zero sum) under the view that
 * gives it the baseline element's shape (konst_carry), ties paired again by
 * what the body writes into them where the induction fails (repair_ties).
 * A baseline carry the body returns unchanged is its initial value: its
 * variable is merged with it (loop_invariants); a distributed one with no
 * counterpart enters as its value (carry_invariant). Another distributed
 * carry with no counterpart is ignored when only its own update reads it
 * (carry_feeds, result_read). A zero carry may also be a partial sum of
 * zeros (a gradient summed from per-device partial sums, all-reduced after
 * the loop): read so when a sum follows the loop (summed_after), and the
 * other reading is tried when the one taken fails in the body (loop_try, the
 * first walk undone by lf_loop_mark); failing both, a constant carry is read
 * as the first step leaves it (first_iteration_reading). A loop may carry one
 * array rather than a tuple (carry_single). */
typedef struct lift_loop {
    uint32_t n;                   /* carry elements */
    lval *init;                   /* baseline initial elements */
    const shape *shapes;          /* baseline carry element shapes */
    eid *x;                       /* the variable of each element */
    lval body;                    /* body over x (LV_TUPLE when understood) */
    eid cond;                     /* condition over x, EID_NONE when not a term */
    lval result;                  /* LV_TUPLE of while_j(init) */
    const hlo_comp *comp;         /* the baseline's loop instruction and its computation */
    const hlo_instr *in;
} lift_loop;

/* The readings of a constant carry (konst_candidates): baseline carry j[i]
 * under view v[i]; at is the one taken (n when none of them), tried how
 * many others were. */
#define KONST_ALTS 8
typedef struct konst_alts {
    uint32_t j[KONST_ALTS];
    view v[KONST_ALTS];
    uint32_t n, at, tried;
    bool held; /* the reading first taken is one of them */
} konst_alts;

/* The instruction giving element k of a tuple-valued operand, for shapes. */
static const hlo_instr *tuple_elem_instr(const hlo_comp *comp, const hlo_instr *t, uint32_t k) {
    return t->op == OP_TUPLE && k < t->noperands ? &comp->instrs[t->operands[k]] : NULL;
}

/* A loop may carry one array rather than a tuple: its body and condition
 * then take that array, and the body returns it. The carry is read as a
 * tuple of one element either way. */
static bool carry_single(const hlo_instr *in) { return in->shape.dtype != DT_TUPLE; }
static uint32_t carry_count(const hlo_instr *in) { return carry_single(in) ? 1 : in->shape.ntuple; }
static const shape *carry_shape(const hlo_instr *in, uint32_t j) {
    return carry_single(in) ? &in->shape : &in->shape.tuple[j];
}

/* Whether baseline carry j, read under view v, has the dims of a carry of
 * local shape sh (a pairing or a reading that does not is no reading). */
static bool carry_fits(lift_ctx *c, const lift_loop *L, uint32_t j, const view *v, const shape *sh) {
    if (sh->rank > VIEW_MAX_RANK || v->rank != sh->rank) return false;
    int64_t g[VIEW_MAX_RANK];
    lf_global_dims(c, v, sh, g);
    return lf_type_of(c, sh->dtype, g, sh->rank) == eg_class_type(c->g, L->x[j]);
}

/* Per instruction of body: whether its value only feeds the loop's stopping
 * test — carry elements the condition reads and the body does not (a
 * "changed" flag computed from this iteration's values). Such a value
 * partial over some axes lets each group of devices stop on its own, which
 * is the baseline's result only when the iterations past a group's stop
 * change nothing; it is judged as the condition's values are. NULL when
 * none does. */
static uint8_t *test_only_of(lift_ctx *c, const hlo_comp *body, const hlo_comp *cond) {
    const hlo_instr *root = &body->instrs[body->root];
    if (root->op != OP_TUPLE || root->noperands > 256) return NULL;
    uint8_t cread[256] = {0}, bread[256] = {0};
    bool any = false;
    for (int side = 0; side < 2; side++) {
        const hlo_comp *k = side ? body : cond;
        for (uint32_t i = 0; i < k->ninstrs; i++) {
            const hlo_instr *x = &k->instrs[i];
            if (x->op != OP_GET_TUPLE_ELEMENT || x->noperands != 1 || k->instrs[x->operands[0]].op != OP_PARAMETER) continue;
            int64_t e = instr_int(x, A_INDEX, 0);
            if (e >= 0 && e < 256) (side ? bread : cread)[e] = 1;
        }
    }
    for (uint32_t e = 0; e < root->noperands; e++) any |= cread[e] && !bread[e];
    if (!any) return NULL;
    uint32_t n = body->ninstrs;
    uint8_t *only = arena_alloc(c->a, n + 1);
    uint32_t *users = xcalloc(n + 1, sizeof *users), *bad = xcalloc(n + 1, sizeof *bad);
    memset(only, 0, n + 1);
    for (uint32_t i = 0; i < n; i++)
        for (uint32_t o = 0; o < body->instrs[i].noperands; o++) users[body->instrs[i].operands[o]]++;
    /* in dependency order, so every user of i comes after it: decided from the last */
    for (uint32_t e = 0; e < root->noperands; e++)
        if (!(cread[e] && !bread[e])) bad[root->operands[e]]++;
    for (uint32_t i = n; i-- > 0;) {
        const hlo_instr *x = &body->instrs[i];
        if (i == body->root) continue;
        only[i] = users[i] > 0 && bad[i] == 0 && x->op != OP_PARAMETER;
        if (!only[i])
            for (uint32_t o = 0; o < x->noperands; o++) bad[x->operands[o]]++;
    }
    free(users);
    free(bad);
    return only;
}

/* Body and condition of a loop over the carry args (a tuple, of one element
 * for a single-array carry). `keep`: the body's results keep their constant
 * factors (else they are put back into the terms, as at any tuple). */
static void loop_walk(lift_ctx *c, const hlo_instr *in, lval *args, lval *body, lval *cond, bool keep) {
    const hlo_module *m = c->cur;
    uint32_t b = instr_called(m, in, A_BODY), k = instr_called(m, in, A_CONDITION);
    const char *sc;
    size_t sn;
    uint32_t outer = c->loop_seg;
    const hlo_comp *outer_call = c->call_comp;
    bool single = carry_single(in);
    if (c->baseline_mode) c->loop_seg = sr_scope_top(in, &sc, &sn) ? lf_segment_of(c, sc, sn) : UINT32_MAX;
    c->loop_depth++;
    c->depth++;
    if (keep && b != SR_NONE) c->call_comp = &m->comps[b];
    lval *a = single ? args->elems : args;
    const hlo_comp *test_comp = c->test_comp;
    const uint8_t *test_only = c->test_only;
    if (b != SR_NONE && k != SR_NONE && !single) {
        c->test_comp = &m->comps[b];
        c->test_only = test_only_of(c, &m->comps[b], &m->comps[k]);
    }
    *body = b != SR_NONE ? lf_lift_comp(c, &m->comps[b], a, NULL, 0) : unknown();
    c->test_comp = test_comp;
    c->test_only = test_only;
    c->call_comp = outer_call;
    c->in_loop_cond++;
    *cond = k != SR_NONE ? lf_lift_comp(c, &m->comps[k], a, NULL, 0) : unknown();
    c->in_loop_cond--;
    c->depth--;
    c->loop_depth--;
    c->loop_seg = outer;
    if (single && body->kind != LV_UNKNOWN) {
        lval *e = arena_alloc(c->a, 2 * sizeof *e);
        e[0] = *body;
        if (!keep) lf_unscale(c, &e[0]);
        *body = (lval){.kind = LV_TUPLE, .n = 1, .elems = e};
    }
}

/* Carries the body returns unchanged keep their initial value in every
 * iteration: the variable of each is merged with that value (two of them
 * that start from the same value then are one), and so is the loop's result
 * element. A distributed loop that carries that value once, in other places,
 * or something computed from it before the loop (a loop-invariant value
 * hoisted out of the body) then meets the baseline's body. */
static void loop_invariants(lift_ctx *c, const lift_loop *L) {
    bool any = false;
    for (uint32_t j = 0; L->body.kind == LV_TUPLE && j < L->n && j < L->body.n; j++) {
        const lval *y = &L->body.elems[j], *e = &L->init[j];
        if (y->kind != LV_TERM || e->kind != LV_TERM || e->assumed || e->cls == EID_NONE ||
            eg_find(c->g, y->cls) != eg_find(c->g, L->x[j]) || eg_find(c->g, e->cls) == eg_find(c->g, L->x[j]))
            continue;
        eg_union(c->g, L->x[j], e->cls, NULL);
        any = true;
    }
    if (!any) return;
    eg_rebuild(c->g);
    lf_kvals_after_unions(c);
}

lval lf_loop_baseline(lift_ctx *c, const hlo_comp *comp, const hlo_instr *in, const lval *vals) {
    const lval *init = in->noperands == 1 ? &vals[in->operands[0]] : NULL;
    const hlo_instr *ti = in->noperands == 1 ? &comp->instrs[in->operands[0]] : NULL;
    bool single = carry_single(in);
    lval one = {.kind = LV_TUPLE, .n = 1, .elems = (lval *)init};
    if (init && single) init = &one, ti = NULL;
    if (!init || init->kind != LV_TUPLE || carry_count(in) != init->n) return unknown();
    uint32_t n = init->n;
    /* each loop in the arena (pointers to it stay valid while walks add more) */
    XGROW(c->loops, c->caploops, c->nloops + 1);
    lift_loop *L = c->loops[c->nloops++] = arena_alloc(c->a, sizeof *L);
    memset(L, 0, sizeof *L);
    L->n = n;
    L->comp = comp;
    L->in = in;
    L->shapes = single ? &in->shape : in->shape.tuple;
    L->init = arena_memdup(c->a, init->elems, (n + 1) * sizeof *init->elems);
    for (uint32_t j = 0; j < n; j++) lf_index_as_term(c, &L->init[j]);
    lval linit = {.kind = LV_TUPLE, .n = n, .elems = L->init};
    init = &linit;
    L->x = arena_alloc(c->a, (n + 1) * sizeof *L->x);
    lval *xs = arena_alloc(c->a, (n + 1) * sizeof *xs), arg = {.kind = LV_TUPLE, .n = n, .elems = xs};
    eid *ch = arena_alloc(c->a, (n + 1) * sizeof *ch);
    for (uint32_t j = 0; j < n; j++) {
        const shape *sh = carry_shape(in, j);
        int64_t k = (int64_t)(1000000 + c->fresh++);
        L->x[j] = eg_add(c->g, EG_OP_VAR, eg_attr(c->g, &k, 1), lf_type_of(c, sh->dtype, sh->dims, sh->rank), NULL, 0, EG_BASELINE);
        xs[j] = term(L->x[j], view_dup(sh->rank), false);
        const lval *e = &init->elems[j];
        const hlo_instr *ei = ti ? tuple_elem_instr(comp, ti, j) : NULL;
        ch[j] = e->kind == LV_TERM ? e->cls : e->kind == LV_DEV && ei ? lf_dev_constant(c, ei, e) : xs[j].cls;
    }
    lval cv, body;
    loop_walk(c, in, &arg, &body, &cv, false);
    L->body = body;
    for (uint32_t j = 0; L->body.kind == LV_TUPLE && j < L->body.n; j++) lf_index_as_term(c, &L->body.elems[j]);
    lf_index_as_term(c, &cv);
    L->cond = cv.kind == LV_TERM ? eg_find(c->g, cv.cls) : EID_NONE;
    loop_invariants(c, L);
    lval *rs = arena_alloc(c->a, (n + 1) * sizeof *rs);
    uint32_t b = instr_called(c->cur, in, A_BODY);
    bool merged = false;
    for (uint32_t j = 0; j < n; j++) {
        const shape *sh = carry_shape(in, j);
        int64_t attr[2] = {j, b == SR_NONE ? 0 : (int64_t)lf_comp_digest(c, c->cur, b)};
        eid r = eg_add(c->g, OP_WHILE, eg_attr(c->g, attr, 2), lf_type_of(c, sh->dtype, sh->dims, sh->rank), ch, n, EG_BASELINE);
        /* an invariant carry's result is its initial value */
        if (init->elems[j].kind == LV_TERM && eg_find(c->g, L->x[j]) == eg_find(c->g, init->elems[j].cls) &&
            eg_find(c->g, r) != eg_find(c->g, ch[j])) {
            eg_union(c->g, r, ch[j], NULL);
            merged = true;
        }
        rs[j] = term(r, view_dup(sh->rank), false);
    }
    if (merged) {
        eg_rebuild(c->g);
        lf_kvals_after_unions(c);
    }
    L->result = (lval){.kind = LV_TUPLE, .n = n, .elems = rs};
    return single ? rs[0] : L->result;
}

/* Whether element k of while loop w's result is read after it (any use of
 * the whole tuple but a get-tuple-element of another element counts). */
static bool result_read(const hlo_comp *comp, const hlo_instr *w, uint32_t k) {
    uint32_t wi = (uint32_t)(w - comp->instrs);
    for (uint32_t i = wi + 1; i < comp->ninstrs; i++) {
        const hlo_instr *u = &comp->instrs[i];
        for (uint32_t o = 0; o < u->noperands; o++)
            if (u->operands[o] == wi && (u->op != OP_GET_TUPLE_ELEMENT || instr_int(u, A_INDEX, 0) == k)) return true;
    }
    return comp->root == wi;
}

/* Whether carry element k reaches the root of a loop body or condition
 * comp other than through its own result element `own` (UINT32_MAX: the
 * root itself, a condition). Instructions are in dependency order; a use of
 * the whole carry other than a get-tuple-element counts as reading k. */
static bool carry_feeds(const hlo_comp *comp, uint32_t k, uint32_t own) {
    bool *dep = xcalloc(comp->ninstrs + 1, sizeof *dep);
    for (uint32_t i = 0; i < comp->ninstrs; i++) {
        const hlo_instr *x = &comp->instrs[i];
        for (uint32_t o = 0; o < x->noperands && !dep[i]; o++) {
            const hlo_instr *y = &comp->instrs[x->operands[o]];
            bool reads_k = y->op == OP_PARAMETER && (x->op != OP_GET_TUPLE_ELEMENT || instr_int(x, A_INDEX, 0) == k);
            dep[i] = dep[x->operands[o]] || reads_k;
        }
    }
    const hlo_instr *r = &comp->instrs[comp->root];
    bool feeds = false;
    if (own == UINT32_MAX || r->op != OP_TUPLE) feeds = dep[comp->root];
    else
        for (uint32_t j = 0; j < r->noperands; j++) feeds |= j != own && dep[r->operands[j]];
    free(dep);
    return feeds;
}

/* Whether instruction i of comp is one constant in every element (a
 * constant, or a broadcast of one, through copies): *v its value. */
static bool splat_value(const hlo_comp *comp, uint32_t i, double *v) {
    const hlo_instr *x = &comp->instrs[i];
    while ((x->op == OP_COPY || x->op == OP_BROADCAST) && x->noperands == 1) x = &comp->instrs[x->operands[0]];
    const hlo_attr *la = x->op == OP_CONSTANT ? instr_attr(x, A_LITERAL) : NULL;
    const hlo_literal *lit = la ? la->v.lit : NULL;
    if (!lit || lit->elided || lit->raw || lit->count < 1 || (!lit->f && !lit->i)) return false;
    *v = lit->f ? lit->f[0] : (double)lit->i[0];
    for (int64_t k = 1; k < lit->count; k++)
        if ((lit->f ? lit->f[k] : (double)lit->i[k]) != *v) return false;
    return true;
}

/* Whether instruction i of comp is all zeros. */
static bool zero_value(const hlo_comp *comp, uint32_t i) {
    double v;
    return splat_value(comp, i, &v) && v == 0;
}

/* The mesh axes (bitmask) over which element k of while loop w's result is
 * summed right after the loop: its one reader, through copies, converts,
 * layout ops and scalings by a constant, is an all-reduce or reduce-scatter
 * that sums over them; 0 otherwise. */
static uint32_t summed_after(lift_ctx *c, const hlo_comp *comp, const hlo_instr *w, uint32_t k) {
    uint32_t cur = (uint32_t)(w - comp->instrs);
    bool elem = false;
    for (int depth = 0; depth < 16; depth++) {
        uint32_t user = SR_NONE, nusers = 0;
        for (uint32_t i = cur + 1; i < comp->ninstrs; i++) {
            const hlo_instr *u = &comp->instrs[i];
            for (uint32_t o = 0; o < u->noperands; o++)
                if (u->operands[o] == cur && (elem || u->op != OP_GET_TUPLE_ELEMENT || instr_int(u, A_INDEX, 0) == k))
                    user = i, nusers++;
        }
        if (nusers != 1) return 0;
        const hlo_instr *u = &comp->instrs[user];
        if (!elem) {
            if (u->op != OP_GET_TUPLE_ELEMENT) return 0;
            elem = true;
        } else if ((u->op == OP_ALL_REDUCE || u->op == OP_REDUCE_SCATTER) && u->noperands == 1) {
            int axes = instr_reducer(c->cur, u) == RED_SUM ? lift_groups_axes(c, u, false) : -1;
            return axes > 0 ? (uint32_t)axes : 0;
        } else if (u->op == OP_MULTIPLY || u->op == OP_DIVIDE) {
            uint32_t other = u->operands[0] == cur ? 1 : 0;
            const hlo_instr *f = u->noperands == 2 ? &comp->instrs[u->operands[other]] : NULL;
            while (f && f->op == OP_BROADCAST && f->noperands == 1) f = &comp->instrs[f->operands[0]];
            if (!f || f->op != OP_CONSTANT || (u->op == OP_DIVIDE && other == 0)) return 0;
        } else if (u->op != OP_COPY && u->op != OP_CONVERT && u->op != OP_RESHAPE && u->op != OP_TRANSPOSE &&
                   u->op != OP_BITCAST) {
            return 0;
        }
        cur = user;
    }
    return 0;
}

/* A scalar integer constant's value. */
static bool int_constant(const hlo_instr *x, int64_t *out) {
    const hlo_attr *la = x->op == OP_CONSTANT ? instr_attr(x, A_LITERAL) : NULL;
    if (!la || la->v.lit->elided || la->v.lit->raw || !la->v.lit->i || la->v.lit->count != 1 || x->shape.rank != 0 ||
        !dtype_is_int(x->shape.dtype))
        return false;
    *out = la->v.lit->i[0];
    return true;
}

/* Whether x is element k of comp's parameter (a tuple). */
static bool carry_elem(const hlo_comp *comp, const hlo_instr *x, uint32_t *k) {
    if (x->op != OP_GET_TUPLE_ELEMENT || x->noperands != 1 || comp->instrs[x->operands[0]].op != OP_PARAMETER) return false;
    *k = (uint32_t)instr_int(x, A_INDEX, 0);
    return true;
}

/* A counted loop (a scan): carry element `k` starts at the constant `c0`,
 * the body adds the positive constant `step` to it, and the condition is
 * element k < n for a constant n: `trips` iterations. */
typedef struct loop_count {
    uint32_t k;
    int64_t c0, step, trips;
} loop_count;

/* in's count when it is a counted loop, read from the program text only;
 * false for any other loop. */
static bool loop_counted(const hlo_module *m, const hlo_comp *comp, const hlo_instr *in, loop_count *lc) {
    uint32_t bi = instr_called(m, in, A_BODY), ci = instr_called(m, in, A_CONDITION);
    if (bi == SR_NONE || ci == SR_NONE || in->noperands != 1) return false;
    const hlo_comp *body = &m->comps[bi], *cond = &m->comps[ci];
    const hlo_instr *ti = &comp->instrs[in->operands[0]], *cr = &cond->instrs[cond->root], *br = &body->instrs[body->root];
    const char *dir = cr->op == OP_COMPARE ? instr_str(cr, A_DIRECTION) : NULL;
    uint32_t k, kb;
    int64_t c0, n, st;
    if (!dir || strcmp(dir, "LT") || cr->noperands != 2 || !carry_elem(cond, &cond->instrs[cr->operands[0]], &k) ||
        !int_constant(&cond->instrs[cr->operands[1]], &n) || ti->op != OP_TUPLE || k >= ti->noperands ||
        !int_constant(&comp->instrs[ti->operands[k]], &c0) || br->op != OP_TUPLE || k >= br->noperands)
        return false;
    const hlo_instr *step = &body->instrs[br->operands[k]];
    if (step->op != OP_ADD || step->noperands != 2) return false;
    for (int o = 0; o < 2; o++)
        if (carry_elem(body, &body->instrs[step->operands[o]], &kb) && kb == k &&
            int_constant(&body->instrs[step->operands[1 - o]], &st) && st > 0 && st < INT32_MAX && n < INT32_MAX &&
            c0 > -INT32_MAX) {
            *lc = (loop_count){k, c0, st, n > c0 ? (n - c0 + st - 1) / st : 0};
            return true;
        }
    return false;
}

/* A counted loop is walked iteration by iteration when it has at most this
 * many iterations and this many body instructions to walk in all. */
enum { UNROLL_MAX_TRIPS = 64, UNROLL_MAX_INSTRS = 1 << 18 };

/* The counted loop in (n) walked iteration by iteration: its body lifted
 * once per iteration over the carry the one before returned, the counter a
 * constant in each. Exact (the trip count is the program's own), so each
 * iteration's values relate to the baseline's as straight-line code does:
 * the sum over microbatches of a gradient accumulated in a scan becomes a
 * sum of terms over row windows, which rules relate to the baseline's
 * one-piece gradient. */
static lval unrolled(lift_ctx *c, const hlo_comp *comp, const hlo_instr *in, const lval *init, const loop_count *n) {
    const hlo_module *m = c->cur;
    uint32_t bi = instr_called(m, in, A_BODY);
    const hlo_comp *body = &m->comps[bi];
    const shape *cs = &in->shape.tuple[n->k];
    if (n->trips > UNROLL_MAX_TRIPS || n->trips * (int64_t)body->ninstrs > UNROLL_MAX_INSTRS || cs->rank != 0) {
        lf_unsupported(c, comp, in, "%s: a loop of %lld iterations where the baseline has no loop: walking it iteration "
                                    "by iteration is done for at most %d iterations and %d body instructions in all",
                       in->name, (long long)n->trips, UNROLL_MAX_TRIPS, UNROLL_MAX_INSTRS);
        return unknown();
    }
    lval cur = {.kind = LV_TUPLE, .n = init->n};
    cur.elems = arena_alloc(c->a, (init->n + 1) * sizeof *cur.elems);
    memcpy(cur.elems, init->elems, init->n * sizeof *cur.elems);
    c->loop_depth++;
    c->depth++;
    /* The body's root tuple keeps its factors, as a call's does: the next
     * iteration (or the loop's reader) takes them on. */
    const hlo_comp *outer_call = c->call_comp;
    c->call_comp = body;
    for (int64_t it = 0; it <= n->trips; it++) {
        /* the counter as a small integer constant is: one value on every
         * device (index arithmetic with the device's id then stays exact) */
        lval counter = {.kind = LV_DEV, .count = 1, .konst = true};
        counter.dev = arena_alloc(c->a, (size_t)c->ndev * sizeof *counter.dev);
        for (int64_t d = 0; d < c->ndev; d++) counter.dev[d] = (double)(n->c0 + it * n->step);
        cur.elems[n->k] = counter;
        if (it == n->trips) break;
        lval r = lf_lift_comp(c, body, &cur, NULL, 0);
        if (r.kind != LV_TUPLE || r.n != init->n) {
            lf_unsupported(c, comp, in, "%s: iteration %lld of the loop body gives no tuple of %u values", in->name,
                           (long long)it, init->n);
            cur = unknown();
            break;
        }
        memcpy(cur.elems, r.elems, init->n * sizeof *cur.elems);
    }
    c->call_comp = outer_call;
    c->depth--;
    c->loop_depth--;
    return cur;
}

/* The mesh axes of a view dim (bitmask) and the number of blocks they cut. */
static uint32_t dim_axes(const lift_ctx *c, const view_dim *vd, int64_t *parts) {
    uint32_t mask = 0;
    *parts = 1;
    for (uint32_t a = 0; a < vd->naxes; a++) mask |= 1u << vd->axes[a], *parts *= c->mesh->sizes[vd->axes[a]];
    return mask;
}

/* The view that cuts each dim of the global shape g into the local shape l
 * in blocks: over the one group of axes of that ratio among `groups` (the
 * sharded dims of the loop's other initial values: how this program shards),
 * else over the one mesh axis of that ratio; false when there is no such
 * group or several (the reading would be a guess). */
static bool blocks_view(const lift_ctx *c, const shape *l, const shape *g, const view_dim *groups, uint32_t ngroups, view *w) {
    if (l->rank != g->rank || l->rank > VIEW_MAX_RANK) return false;
    *w = view_dup(l->rank);
    uint32_t used = 0;
    for (uint32_t d = 0; d < l->rank; d++) {
        if (g->dims[d] == l->dims[d]) continue;
        if (l->dims[d] <= 0 || g->dims[d] % l->dims[d]) return false;
        int64_t r = g->dims[d] / l->dims[d], parts;
        int found = -1, nfound = 0;
        for (uint32_t k = 0; k < ngroups; k++)
            if (dim_axes(c, &groups[k], &parts) && parts == r) found = (int)k, nfound++;
        view_dim vd = nfound == 1 ? groups[found] : (view_dim){0};
        for (uint32_t a = 0; !nfound && a < c->mesh->naxes; a++)
            if (c->mesh->sizes[a] == r) vd = lf_axes_dim(c, 1u << a), nfound += vd.naxes > 0 ? 1 : 0;
        uint32_t mask = dim_axes(c, &vd, &parts);
        if (nfound != 1 || !mask || (used & mask)) return false;
        used |= mask;
        w->dims[d] = vd;
    }
    return true;
}

/* The distinct sharded dims of the views of a loop's initial values. */
static uint32_t init_groups(const lval *init, uint32_t n, view_dim *out, uint32_t cap) {
    uint32_t ng = 0;
    for (uint32_t k = 0; k < n; k++) {
        const lval *e = &init[k];
        if (e->kind != LV_TERM || e->konst) continue;
        for (uint32_t d = 0; d < e->v.rank; d++) {
            const view_dim *vd = &e->v.dims[d];
            bool seen = !vd->naxes;
            for (uint32_t q = 0; q < ng && !seen; q++) seen = lf_same_dim(&out[q], vd);
            if (seen || ng == cap) continue;
            out[ng] = (view_dim){.naxes = vd->naxes};
            memcpy(out[ng++].axes, vd->axes, vd->naxes);
        }
    }
    return ng;
}

/* A carry entering as a constant the same on every device (a zero-filled
 * buffer the loop writes its per-iteration results into, a zero accumulator)
 * that no baseline element starts from as it is: read under the blocked view
 * that makes its local shape the shape of a baseline element, that constant is
 * a global constant (lf_konst_at); related to the first element not taken yet
 * that starts from it (ties paired in order). Whether this reading is the one
 * the body keeps is decided by the induction. */
/* The distinct views of sibling carries (sib[0..n)) whose local shape is l
 * and whose global shape under them is g (the value a zeros_like accumulator
 * is shaped like), at most cap of them into w; their count. */
static uint32_t sibling_views(lift_ctx *c, const lval *sib, uint32_t n, const shape *l, const shape *g, view *w,
                              uint32_t cap) {
    uint32_t found = 0;
    for (uint32_t k = 0; k < n && found < cap; k++) {
        const lval *y = &sib[k];
        if (y->kind != LV_TERM || y->assumed || y->v.rank != l->rank || l->rank > VIEW_MAX_RANK ||
            eg_class_type(c->g, y->cls) != eg_type(c->g, g->dtype, g->dims, g->rank) || view_is_dup(&y->v))
            continue;
        int64_t gd[VIEW_MAX_RANK];
        view v = y->v;
        v.partial = 0;
        v.red = 0;
        lf_global_dims(c, &v, l, gd);
        bool seen = memcmp(gd, g->dims, l->rank * sizeof *gd) != 0;
        for (uint32_t q = 0; q < found && !seen; q++) seen = view_equal(&w[q], &v);
        if (!seen) w[found++] = v;
    }
    return found;
}

/* The one view of a sibling carry that fits (sibling_views); false when none
 * or several. */
static bool sibling_view(lift_ctx *c, const lval *sib, uint32_t n, const shape *l, const shape *g, view *w) {
    view two[2];
    if (sibling_views(c, sib, n, l, g, two, 2) != 1) return false;
    *w = two[0];
    return true;
}

/* Every reading of a carry entering as a splat x of local shape l as a
 * block of a baseline carry starting as the same splat: the baseline carry
 * of l itself (dup), or of a larger shape under the blocked view that
 * gives it (blocks_view) or under each sibling's view that does
 * (sibling_views); at most KONST_ALTS, in the order of the baseline's
 * carries. Zeros are a block of zeros under each: which one the body keeps
 * is for the induction to say (next_reading). */
static void konst_candidates(lift_ctx *c, const lval *x, const shape *l, const lift_loop *L, const view_dim *groups,
                             uint32_t ngroups, const lval *sib, uint32_t nsib, konst_alts *a) {
    double sx, sb;
    a->n = 0;
    if (!lf_lval_splat(c, x, false, &sx) || isnan(sx) || l->rank > VIEW_MAX_RANK) return;
    for (uint32_t j = 0; j < L->n && a->n < KONST_ALTS; j++) {
        const shape *bs = &L->shapes[j];
        if (bs->dtype != l->dtype || bs->rank != l->rank || !lf_lval_splat(c, &L->init[j], true, &sb) || sb != sx) continue;
        view w[KONST_ALTS];
        uint32_t nw = 0;
        if (!l->rank || !memcmp(bs->dims, l->dims, l->rank * sizeof *l->dims)) w[nw++] = view_dup(l->rank);
        else if (blocks_view(c, l, bs, groups, ngroups, &w[0])) nw = 1;
        else nw = sibling_views(c, sib, nsib, l, bs, w, KONST_ALTS);
        for (uint32_t i = 0; i < nw && a->n < KONST_ALTS; i++) {
            a->j[a->n] = j;
            a->v[a->n++] = w[i];
        }
    }
}

static bool konst_carry(lift_ctx *c, const hlo_comp *comp, const lval *vals, uint32_t ei, const lift_loop *L, const bool *taken,
                        const view_dim *groups, uint32_t ngroups, const lval *sib, uint32_t nsib, uint32_t *pj, view *pw) {
    const hlo_instr *e = &comp->instrs[ei];
    const lval *x = &vals[ei];
    /* A splat (jnp.zeros of the local shape, an accumulator or a flag) is a
     * block of the baseline's splat of the same value, whatever the view:
     * the first reading of a carry not taken yet. */
    konst_alts a;
    konst_candidates(c, x, &e->shape, L, groups, ngroups, sib, nsib, &a);
    for (uint32_t i = 0; i < a.n; i++)
        if (!taken[a.j[i]]) {
            *pj = a.j[i];
            *pw = a.v[i];
            return true;
        }
    /* A replicated value broadcast along new dims (the start state of every
     * rollout of a population, jnp.broadcast_to(x0, (n_local, s))) is a
     * block of the baseline's broadcast of the same value along the same
     * dims to the whole batch, whatever the view along them: every row is
     * x0. */
    const eid *yc, *yb;
    eid bn = x->kind == LV_TERM && !x->assumed && view_is_dup(&x->v) && lf_scale_of(x) == 1
                 ? lf_class_node(c, x->cls, OP_BROADCAST, 1, &yc)
                 : EID_NONE;
    for (uint32_t j = 0; bn != EID_NONE && j < L->n; j++) {
        const shape *bs = &L->shapes[j];
        view w;
        eid bb = taken[j] || L->init[j].kind != LV_TERM || bs->dtype != e->shape.dtype || L->init[j].assumed ||
                         lf_scale_of(&L->init[j]) != 1
                     ? EID_NONE
                     : lf_class_node(c, L->init[j].cls, OP_BROADCAST, 1, &yb);
        if (bb == EID_NONE || eg_find(c->g, yb[0]) != eg_find(c->g, yc[0]) ||
            eg_node_attr(c->g, bb) != eg_node_attr(c->g, bn) ||
            !(blocks_view(c, &e->shape, bs, groups, ngroups, &w) || sibling_view(c, sib, nsib, &e->shape, bs, &w)) ||
            view_is_dup(&w))
            continue;
        *pj = j;
        *pw = w;
        return true;
    }
    if (x->kind != LV_TERM || !x->konst || x->assumed || !view_is_dup(&x->v) || lf_scale_of(x) != 1) return false;
    for (uint32_t j = 0; j < L->n; j++) {
        const shape *bs = &L->shapes[j];
        view w;
        if (taken[j] || L->init[j].kind != LV_TERM || bs->dtype != e->shape.dtype ||
            !blocks_view(c, &e->shape, bs, groups, ngroups, &w) || view_is_dup(&w))
            continue;
        eid g = lf_konst_at(c, comp, vals, ei, &w, 0);
        if (g != EID_NONE && eg_find(c->g, g) == eg_find(c->g, L->init[j].cls)) {
            *pj = j;
            *pw = w;
            return true;
        }
    }
    return false;
}

/* Whether the body of loop in returns carry element k as it takes it (its
 * root's element k is the parameter's element k; a single-array carry: the
 * root is the parameter). Such a carry holds its initial value in every
 * iteration and after the loop. */
static bool carry_invariant(const hlo_module *m, const hlo_instr *in, uint32_t k) {
    uint32_t bi = instr_called(m, in, A_BODY), kb;
    if (bi == SR_NONE) return false;
    const hlo_comp *body = &m->comps[bi];
    const hlo_instr *r = &body->instrs[body->root];
    if (carry_single(in)) return r->op == OP_PARAMETER;
    return r->op == OP_TUPLE && k < r->noperands && carry_elem(body, &body->instrs[r->operands[k]], &kb) && kb == k;
}

/* z (a body result with its factor) as the value x entered with: its term
 * with the factor beyond x's put back (false: z is no term). */
static bool as_entered(lift_ctx *c, const lval *z, const lval *x, lval *out) {
    if (z->kind != LV_TERM || z->assumed || z->cls == EID_NONE) return false;
    *out = *z;
    double r = lf_scale_of(z) / lf_scale_of(x);
    if (!isfinite(r) || r == 0) return false;
    out->scale = fabs(r - 1) <= 1e-12 ? 0 : r;
    lf_unscale(c, out);
    return true;
}

/* Equality saturation of the e-graph as it stands, for a loop's induction
 * (c->saturate, light: a few iterations and new nodes; at most LOOP_SAT_RUNS
 * times per check, each over the whole e-graph): where a carry enters as, or the body returns, a term the
 * baseline's does not hash to (the same function written another way: a
 * reshape on the other side of an elementwise op). */
#define LOOP_SAT_RUNS 2
static void loop_sat(lift_ctx *c) {
    if (!c->saturate || c->loop_sat_runs >= LOOP_SAT_RUNS) return;
    if (c->acct_t > 0) lf_charge_segment(c, now_ms(), eg_node_count(c->g));
    c->sat_light = true;
    c->loop_sat_runs += c->saturate(c, c->saturate_arg);
    c->sat_light = false;
    lf_kvals_after_unions(c);
    c->acct_t = now_ms();
    c->acct_nodes = eg_node_count(c->g);
}

/* The body's results: saturated first where the induction would fail only
 * because some, under the views they entered with, are terms of the
 * baseline's types in other classes (a try that fails otherwise is not
 * helped by it). */
static void loop_saturate(lift_ctx *c, const hlo_instr *in, const lift_loop *L, const uint32_t *pi, const lval *xs,
                          lval *body) {
    if (!c->saturate || c->loop_sat_runs >= LOOP_SAT_RUNS) return;
    bool apart = false;
    for (uint32_t k = 0; k < carry_count(in); k++) {
        if (pi[k] == SR_NONE) continue;
        lf_index_as_term(c, &body->elems[k]);
        lval zk;
        const lval *y = &L->body.elems[pi[k]];
        if (!as_entered(c, &body->elems[k], &xs[k], &zk) || y->kind != LV_TERM || !view_equal(&zk.v, &xs[k].v))
            return;
        if (eg_find(c->g, zk.cls) == eg_find(c->g, y->cls)) continue;
        if (eg_class_type(c->g, zk.cls) != eg_class_type(c->g, y->cls)) return;
        apart = true;
    }
    if (apart) loop_sat(c);
}

/* The initial values: saturated first where one is a term (not computed from
 * constants) in no class of the baseline's initial values while the
 * baseline's at its position is a term of that type. */
static void init_saturate(lift_ctx *c, const hlo_instr *in, const lift_loop *L, const lval *init) {
    bool apart = false;
    for (uint32_t k = 0; k < init->n && k < L->n && !apart && c->saturate && c->loop_sat_runs < LOOP_SAT_RUNS; k++) {
        lval ek = init->elems[k];
        lf_index_as_term(c, &ek);
        if (ek.kind == LV_LAYOUT && !lf_layout_to_term(c, &init->elems[k], carry_shape(in, k), true, &ek)) continue;
        const lval *b = &L->init[k];
        if (ek.kind != LV_TERM || ek.assumed || ek.konst || b->kind != LV_TERM || b->konst) continue;
        bool met = false;
        for (uint32_t j = 0; j < L->n && !met; j++)
            met = L->init[j].kind == LV_TERM && eg_find(c->g, L->init[j].cls) == eg_find(c->g, ek.cls);
        apart = !met && eg_class_type(c->g, ek.cls) == eg_class_type(c->g, b->cls);
    }
    if (apart) loop_sat(c);
}

/* Walks the body and condition with the carry xs (each related to baseline
 * carry pi[k] under its view and factor) and checks the induction step: the
 * body returns every carry as the baseline's body does, under the view and
 * factor it entered with, and the condition is the baseline's. failed[k]:
 * carry k is not kept; only the first failure is said. `loose`: carries whose
 * view is one reading of a constant, where another view is no finding.
 * results (when not NULL): the body's results, with their factors. */
static bool loop_try(lift_ctx *c, const hlo_comp *comp, const hlo_instr *in, const lift_loop *L, const uint32_t *pi,
                     lval *xs, const bool *loose, bool *failed, lval *results) {
    uint32_t n = carry_count(in);
    lval body, cv, arg = {.kind = LV_TUPLE, .n = n, .elems = xs};
    memset(failed, 0, n + 1);
    loop_walk(c, in, &arg, &body, &cv, true);
    if (results) *results = body;
    uint32_t bi = instr_called(c->cur, in, A_BODY);
    const hlo_comp *bc = bi != SR_NONE ? &c->cur->comps[bi] : comp;
    if (bi == SR_NONE || body.kind != LV_TUPLE || body.n != n || L->body.kind != LV_TUPLE) {
        lf_unsupported(c, comp, in, "%s: the loop body's result is not understood", in->name);
        return false;
    }
    lf_index_as_term(c, &cv);
    loop_saturate(c, in, L, pi, xs, &body);
    bool ok = true;
    for (uint32_t k = 0; k < n; k++) {
        if (pi[k] == SR_NONE) continue;
        lf_index_as_term(c, &body.elems[k]);
        lval zk;
        const lval *z = as_entered(c, &body.elems[k], &xs[k], &zk) ? &zk : &body.elems[k], *y = &L->body.elems[pi[k]];
        const hlo_instr *site = carry_single(in) ? &bc->instrs[bc->root] : tuple_elem_instr(bc, &bc->instrs[bc->root], k);
        if (!site) site = in;
        bool same = z->kind == LV_TERM && !z->assumed && y->kind == LV_TERM && eg_find(c->g, z->cls) == eg_find(c->g, y->cls);
        failed[k] = !same || !view_equal(&z->v, &xs[k].v);
        if (!failed[k] || !ok) continue;
        ok = false;
        if (!same) {
            if (dbg_on(DBG_LIFT)) {
                strbuf tz, ty;
                sb_init(&tz);
                sb_init(&ty);
                if (z->kind == LV_TERM) eg_print_term(&tz, c->g, z->cls, 6);
                if (y->kind == LV_TERM) eg_print_term(&ty, c->g, y->cls, 6);
                fprintf(stderr, "lift: loop element %u: body gives %s (kind %d), the baseline's %s\n", k, tz.s ? tz.s : "-",
                        z->kind, ty.s ? ty.s : "-");
                if (z->kind == LV_TERM && y->kind == LV_TERM) lf_debug_diff(c, y->cls, z->cls);
                sb_free(&tz);
                sb_free(&ty);
            }
            if (!c->nfindings)
                lf_unsupported(c, bc, site, "%s: the loop body does not return carry element %u as the baseline's body does "
                                            "(induction over the carry fails)", in->name, k);
        } else if (loose[k]) {
            /* the constant was read under one of its views: another reading
             * of it might be the one the body keeps */
            lf_unsupported(c, bc, site, "%s: the body returns carry element %u under another view than the one its constant "
                                        "initial value was read under", in->name, k);
        } else {
            strbuf got, want;
            sb_init(&got);
            sb_init(&want);
            view_print(&got, &z->v, c->mesh);
            view_print(&want, &xs[k].v, c->mesh);
            lf_finding(c, z->v.partial && !xs[k].v.partial ? KIND_MISSING_ALL_REDUCE : KIND_WRONG_SHARD_DIM, bc, site,
                       "@the body of %s returns carry element %u as %s but it enters as %s: the relation is not kept from one "
                       "iteration to the next", in->name, k, got.s, want.s);
            sb_free(&got);
            sb_free(&want);
        }
    }
    if (ok && !(cv.kind == LV_TERM && !cv.assumed && view_is_dup(&cv.v) && L->cond != EID_NONE &&
                eg_find(c->g, cv.cls) == eg_find(c->g, L->cond))) {
        lf_unsupported(c, comp, in, "%s: the loop condition is not the baseline's (the loops may not stop together)", in->name);
        ok = false;
    }
    return ok;
}

/* A carry that starts as one constant c in every element is the baseline's
 * constant under every view that is no partial sum (each device's block, or
 * the whole, holds c; a maximum or minimum over devices of c is c), and
 * under a partial sum too when c is 0; zeros are so times every factor as
 * well. Any of those readings may be the one the induction starts from; the
 * one the first step leaves is the likeliest to be kept: the body is walked
 * once with the carries in `which` at their initial value (c[k]) and the
 * others as xs reads them (the walk undone after), and each is read as that
 * walk leaves it, its factor relative to the one the baseline puts into the
 * same term. A reading the constant does not hold under is not taken. The
 * induction decides whether the body keeps it. False when no carry got
 * another reading. */
static bool first_iteration_reading(lift_ctx *c, const hlo_instr *in, const lift_loop *L, uint32_t *pi, const lval *init,
                                    const bool *which, const double *cval, lval *xs) {
    uint32_t n = carry_count(in);
    lval body, cv, arg = {.kind = LV_TUPLE, .n = n, .elems = arena_memdup(c->a, xs, (n + 1) * sizeof *xs)};
    for (uint32_t k = 0; k < n; k++)
        if (which[k]) arg.elems[k] = init->elems[k];
    lf_loop_mark m = lf_loop_mark_take(c);
    loop_walk(c, in, &arg, &body, &cv, true);
    /* A view the paired baseline carry's dims do not take goes to another
     * baseline carry that starts as the same constant (a zero buffer of
     * another shape: the pairing read the constant under a guessed view),
     * one no other carry keeps. */
    bool *moved = arena_alloc(c->a, n + 1), *used = arena_alloc(c->a, L->n + 1), any = false;
    memset(used, 0, L->n + 1);
    for (uint32_t k = 0; k < n; k++) {
        const lval *z = body.kind == LV_TUPLE && k < body.n ? &body.elems[k] : NULL;
        moved[k] = which[k] && pi[k] != SR_NONE && z && z->kind == LV_TERM && !z->assumed && z->cls != EID_NONE &&
                   !carry_fits(c, L, pi[k], &z->v, carry_shape(in, k));
        if (pi[k] != SR_NONE && !moved[k]) used[pi[k]] = true;
    }
    for (uint32_t k = 0; body.kind == LV_TUPLE && k < n && k < body.n; k++) {
        lval *z = &body.elems[k];
        if (!which[k] || pi[k] == SR_NONE || z->kind != LV_TERM || z->assumed || z->cls == EID_NONE) continue;
        double f = lf_scale_of(z) / lf_scale_base_factor(c, z->cls);
        if (!isfinite(f) || f == 0 || (view_equal(&z->v, &xs[k].v) && lf_scale_of(&xs[k]) == f)) continue;
        if (cval[k] != 0 && (f != 1 || (z->v.partial && z->v.red != RED_MAX && z->v.red != RED_MIN))) continue;
        uint32_t j = pi[k];
        if (moved[k]) {
            j = SR_NONE;
            for (uint32_t t = 0; t < L->n && j == SR_NONE; t++)
                if (!used[t] && L->init[t].kind == LV_TERM && lf_class_is_splat(c, L->init[t].cls, cval[k]) &&
                    carry_fits(c, L, t, &z->v, carry_shape(in, k)))
                    j = t;
            if (j == SR_NONE) continue;
            used[j] = true;
        }
        pi[k] = j;
        xs[k] = term(L->x[j], z->v, false);
        xs[k].scale = f == 1 ? 0 : f;
        any = true;
    }
    lf_loop_mark_undo(c, &m);
    return any;
}

/* Whether z (over carry variable xa) is one step of the same op as y (over
 * xb): nodes of their classes with the same op, attributes and type whose
 * children are the same classes, xa where y has xb. */
static bool same_step(lift_ctx *c, eid z, eid y, eid xa, eid xb) {
    xa = eg_find(c->g, xa), xb = eg_find(c->g, xb);
    if (eg_class_type(c->g, z) != eg_class_type(c->g, y)) return false;
    for (eid a = eg_class_first(c->g, eg_find(c->g, z)); a != EID_NONE; a = eg_class_next(c->g, a)) {
        uint32_t na, nb;
        const eid *ca = eg_node_children(c->g, a, &na);
        bool uses = false;
        for (uint32_t i = 0; i < na; i++) uses |= eg_find(c->g, ca[i]) == xa;
        if (!uses) continue;
        for (eid b = eg_class_first(c->g, eg_find(c->g, y)); b != EID_NONE; b = eg_class_next(c->g, b)) {
            const eid *cb = eg_node_children(c->g, b, &nb);
            if (eg_node_op(c->g, a) != eg_node_op(c->g, b) || eg_node_attr(c->g, a) != eg_node_attr(c->g, b) || na != nb)
                continue;
            bool same = true;
            for (uint32_t i = 0; i < na && same; i++) {
                eid p = eg_find(c->g, ca[i]), q = eg_find(c->g, cb[i]);
                same = p == q || (p == xa && q == xb);
            }
            if (same) return true;
        }
    }
    return false;
}

/* Constant carries paired in order among baseline elements that start from
 * the same constant (zero buffers of one shape, which the partitioner
 * reorders) are paired again where the body says which: a failed carry k
 * goes to the tied element j whose update is the same step as k's (the same
 * op over the same values, k's variable where j has its own). Each element
 * is taken once; false when no pairing changed. The induction then decides. */
static bool repair_ties(lift_ctx *c, const hlo_instr *in, const lift_loop *L, uint32_t n, uint32_t *pi, lval *xs,
                        const bool *failed, const bool *guessed, const lval *body) {
    bool *used = arena_alloc(c->a, L->n + 1), any = false;
    memset(used, 0, L->n + 1);
    for (uint32_t k = 0; k < n; k++)
        if (pi[k] != SR_NONE && !failed[k]) used[pi[k]] = true;
    uint32_t *np = arena_memdup(c->a, pi, (n + 1) * sizeof *pi);
    for (uint32_t k = 0; k < n; k++) {
        if (pi[k] == SR_NONE || !failed[k] || !guessed[k] || body->kind != LV_TUPLE || k >= body->n) continue;
        lval z;
        if (!as_entered(c, &body->elems[k], &xs[k], &z)) continue;
        uint32_t pick = SR_NONE;
        for (uint32_t j = 0; j < L->n && pick == SR_NONE; j++) {
            const lval *y = &L->body.elems[j], *bj = &L->init[j], *bk = &L->init[pi[k]];
            if (used[j] || y->kind != LV_TERM || bj->kind != LV_TERM || bk->kind != LV_TERM ||
                eg_find(c->g, bj->cls) != eg_find(c->g, bk->cls))
                continue;
            if (same_step(c, z.cls, y->cls, L->x[pi[k]], L->x[j]) && carry_fits(c, L, j, &xs[k].v, carry_shape(in, k)))
                pick = j;
        }
        if (pick == SR_NONE) continue;
        used[pick] = true;
        any |= pick != pi[k];
        np[k] = pick;
    }
    if (!any) return false;
    for (uint32_t k = 0; k < n; k++)
        if (np[k] != pi[k]) {
            double f = xs[k].scale;
            xs[k] = term(L->x[np[k]], xs[k].v, false);
            xs[k].scale = f;
            pi[k] = np[k];
        }
    return true;
}

/* Each failed carry k entering as a splat goes to its next reading
 * (alts[k], konst_candidates) whose baseline carry no carry that did not
 * fail keeps, nor one moved before it in this round, and whose view gives
 * that carry's dims; false when none moved. The induction then decides. */
static bool next_reading(lift_ctx *c, const hlo_instr *in, const lift_loop *L, uint32_t n, uint32_t *pi, lval *xs,
                         const bool *failed, konst_alts *alts) {
    bool *used = arena_alloc(c->a, L->n + 1), any = false;
    memset(used, 0, L->n + 1);
    for (uint32_t k = 0; k < n; k++)
        if (pi[k] != SR_NONE && !(failed[k] && alts[k].n)) used[pi[k]] = true;
    for (uint32_t k = 0; k < n; k++) {
        konst_alts *a = &alts[k];
        if (!failed[k] || !a->n || xs[k].kind != LV_TERM) continue;
        while (a->tried + (a->held ? 1 : 0) < a->n) {
            uint32_t i = a->at = a->at + 1 >= a->n ? 0 : a->at + 1;
            a->tried++;
            if (used[a->j[i]] || (a->j[i] == pi[k] && view_equal(&a->v[i], &xs[k].v)) ||
                !carry_fits(c, L, a->j[i], &a->v[i], carry_shape(in, k)))
                continue;
            pi[k] = a->j[i];
            xs[k] = term(L->x[pi[k]], a->v[i], false);
            any = true;
            break;
        }
        if (pi[k] != SR_NONE) used[pi[k]] = true;
    }
    return any;
}

/* Both loops walked iteration by iteration, where the induction fails and
 * both are counted loops of the same small trip count (read from the
 * program texts): the baseline's (its walk resumed on its side, counted
 * nowhere, its scopes' terms kept) gives its result's terms, merged with
 * while_j(init) (the loop computes exactly them), and the distributed one's
 * iterations then relate as straight-line code does. What the failed
 * induction recorded is undone first (m0). False when not that case. */
static bool unrolled_both(lift_ctx *c, const hlo_comp *comp, const hlo_instr *in, const lval *init, const lift_loop *L,
                          const lf_loop_mark *m0, lval *out) {
    loop_count nd, nb;
    if (carry_single(in) || carry_single(L->in) || !loop_counted(c->cur, comp, in, &nd) ||
        !loop_counted(c->base, L->comp, L->in, &nb) || nd.trips != nb.trips || nd.trips > UNROLL_MAX_TRIPS)
        return false;
    uint32_t bb = instr_called(c->base, L->in, A_BODY), db = instr_called(c->cur, in, A_BODY);
    if (nb.trips * (int64_t)c->base->comps[bb].ninstrs > UNROLL_MAX_INSTRS ||
        nd.trips * (int64_t)c->cur->comps[db].ninstrs > UNROLL_MAX_INSTRS || carry_shape(L->in, nb.k)->rank != 0 ||
        carry_shape(in, nd.k)->rank != 0)
        return false;
    lf_loop_mark_undo(c, m0);
    eid *scopes = c->nscopes ? arena_memdup(c->a, c->scope_cls, c->nscopes * sizeof *scopes) : NULL;
    size_t nscopes = c->nscopes;
    lval binit = {.kind = LV_TUPLE, .n = L->n, .elems = arena_memdup(c->a, L->init, (L->n + 1) * sizeof *L->init)};
    lf_walk_side(c, true);
    c->no_account = true;
    lval b = unrolled(c, L->comp, L->in, &binit, &nb);
    lf_unscale(c, &b);
    c->no_account = false;
    lf_walk_side(c, false);
    if (scopes) memcpy(c->scope_cls, scopes, nscopes * sizeof *scopes);
    bool any = false;
    for (uint32_t j = 0; b.kind == LV_TUPLE && j < b.n && j < L->n; j++) {
        const lval *y = &b.elems[j];
        eid r = L->result.elems[j].cls;
        if (y->kind != LV_TERM || y->assumed || y->cls == EID_NONE || eg_find(c->g, y->cls) == eg_find(c->g, r) ||
            eg_class_type(c->g, y->cls) != eg_class_type(c->g, r))
            continue;
        eg_union(c->g, r, y->cls, NULL);
        any = true;
    }
    if (any) {
        eg_rebuild(c->g);
        lf_kvals_after_unions(c);
    }
    *out = unrolled(c, comp, in, init, &nd);
    return true;
}

/* A carry entering as a baseline carry's initial term T with another
 * constant factor put back into it than the baseline's (a local mean's
 * cotangent, n/B where the baseline has 1/B: lf_unscale) is that baseline
 * carry times the ratio of the two; the induction (as_entered) checks that
 * the body keeps the ratio, and the loop's result carries it. The baseline
 * carry it is paired with (the same position first), or SR_NONE. */
static uint32_t scaled_carry(lift_ctx *c, const lval *e, const lift_loop *L, uint32_t k, double *ratio) {
    if (e->kind != LV_TERM || e->assumed || e->cls == EID_NONE || e->diff ||
        !dtype_is_float(eg_type_dtype(c->g, eg_class_type(c->g, e->cls))))
        return SR_NONE;
    eid te, tb;
    double se = lf_scale_split(c, e->cls, &te);
    for (uint32_t t = 0; t < L->n; t++) {
        uint32_t j = (k + t) % L->n;
        const lval *b = &L->init[j];
        if (b->kind != LV_TERM || b->assumed || b->cls == EID_NONE) continue;
        double sb = lf_scale_split(c, b->cls, &tb), r = se / sb;
        if (eg_find(c->g, te) != eg_find(c->g, tb) || !isfinite(r) || r == 0 || r == 1) continue;
        *ratio = r;
        return j;
    }
    return SR_NONE;
}

lval lf_loop_distributed(lift_ctx *c, const hlo_comp *comp, const hlo_instr *in, const lval *vals) {
    const lval *init = in->noperands == 1 ? &vals[in->operands[0]] : NULL;
    bool single = carry_single(in);
    lval one = {.kind = LV_TUPLE, .n = 1, .elems = (lval *)init};
    if (init && single) init = &one;
    if (!init || init->kind != LV_TUPLE || carry_count(in) != init->n) {
        lf_unsupported(c, comp, in, "%s: a while loop whose carry is not a tuple of known values", in->name);
        return unknown();
    }
    if (c->next_loop >= c->nloops) {
        /* No baseline loop to relate it to: the baseline computes it in one
         * piece (gradient accumulation over microbatches). A counted loop of
         * a few iterations is walked iteration by iteration instead. */
        loop_count n;
        if (!single && loop_counted(c->cur, comp, in, &n)) return unrolled(c, comp, in, init, &n);
        lf_unsupported(c, comp, in, "%s: the baseline has no while loop left to relate this one to, and it is no "
                                    "counted loop (a scan) to walk iteration by iteration", in->name);
        return unknown();
    }
    lift_loop *L = c->loops[c->next_loop++];
    uint32_t n = init->n;
    uint32_t *pi = arena_alloc(c->a, (n + 1) * sizeof *pi);
    const hlo_instr *ti = single ? NULL : &comp->instrs[in->operands[0]];
    bool tup = ti && ti->op == OP_TUPLE;
    bool *guessed = arena_alloc(c->a, n + 1), *taken = arena_alloc(c->a, L->n + 1), *inv = arena_alloc(c->a, n + 1);
    lval *xs = arena_alloc(c->a, (n + 1) * sizeof *xs);
    konst_alts *alts = arena_alloc(c->a, (n + 1) * sizeof *alts);
    memset(alts, 0, (n + 1) * sizeof *alts);
    view_dim groups[32];
    uint32_t ngroups = init_groups(init->elems, n, groups, 32);
    init_saturate(c, in, L, init);
    for (uint32_t k = 0; k < n; k++) {
        lval ek = init->elems[k];
        lf_index_as_term(c, &ek);
        /* an all-to-all result still a layout: its plain view, reshaping the term */
        if (ek.kind == LV_LAYOUT && !lf_layout_to_term(c, &init->elems[k], carry_shape(in, k), true, &ek)) ek = unknown();
        const lval *e = &ek;
        pi[k] = SR_NONE;
        for (uint32_t t = 0; t < L->n && pi[k] == SR_NONE; t++) {
            uint32_t j = (k + t) % L->n;  /* the same position first */
            const lval *b = &L->init[j];
            if (e->kind == LV_TERM && !e->assumed && b->kind == LV_TERM && eg_find(c->g, e->cls) == eg_find(c->g, b->cls))
                pi[k] = j;
            else if (e->kind == LV_DEV && b->kind == LV_DEV && t == 0 && lf_dev_uniform(c, e) && e->count == b->count &&
                     memcmp(e->dev, b->dev, e->count * sizeof *e->dev) == 0)
                pi[k] = j;
        }
        double ratio;
        if (pi[k] == SR_NONE && (pi[k] = scaled_carry(c, e, L, k, &ratio)) != SR_NONE) {
            xs[k] = term(L->x[pi[k]], e->v, false);
            xs[k].scale = ratio;
            continue;
        }
        view w;
        if (pi[k] == SR_NONE && tup && k < ti->noperands &&
            konst_carry(c, comp, vals, ti->operands[k], L, taken, groups, ngroups, init->elems, n, &pi[k], &w)) {
            guessed[k] = taken[pi[k]] = true;
            xs[k] = term(L->x[pi[k]], w, false);
            continue;
        }
        /* A carry the body returns as it takes it is its initial value in
         * every iteration (a loop-invariant value, maybe hoisted out of the
         * body and carried): when the baseline's loop starts from no such
         * value (nor from a constant it is a block of), it enters as that
         * value, paired with nothing. */
        if (pi[k] == SR_NONE && carry_invariant(c->cur, in, k)) {
            inv[k] = true;
            xs[k] = e->kind == LV_TERM ? *e : init->elems[k];
            continue;
        }
        if (pi[k] == SR_NONE && dbg_on(DBG_LIFT)) {
            strbuf tz;
            sb_init(&tz);
            if (e->kind == LV_TERM) eg_print_term(&tz, c->g, e->cls, 6);
            fprintf(stderr, "lift: loop carry %u enters as %s (kind %d, assumed %d); baseline element %u: ", k,
                    tz.s ? tz.s : "-", e->kind, e->assumed, k);
            sb_free(&tz);
            sb_init(&tz);
            if (k < L->n && L->init[k].kind == LV_TERM) eg_print_term(&tz, c->g, L->init[k].cls, 6);
            fprintf(stderr, "%s\n", tz.s ? tz.s : "-");
            sb_free(&tz);
        }
        if (pi[k] == SR_NONE) {
            /* A carry the baseline's loop has no counterpart of (an extra
             * counter, a copy) may be ignored where nothing reads it but its
             * own update: not the other carries, the condition, or the code
             * after the loop. It is then unknown (no view is made up for it). */
            uint32_t bi = instr_called(c->cur, in, A_BODY), ci = instr_called(c->cur, in, A_CONDITION);
            if (single || bi == SR_NONE || ci == SR_NONE || carry_feeds(&c->cur->comps[bi], k, k) ||
                carry_feeds(&c->cur->comps[ci], k, UINT32_MAX) || result_read(comp, in, k)) {
                if (dbg_on(DBG_LIFT) && k < L->n && L->init[k].kind == LV_TERM && init->elems[k].kind == LV_TERM) {
                    fprintf(stderr, "lift: loop carry %u enters as no baseline initial value; against the one at its position:\n", k);
                    lf_debug_diff(c, L->init[k].cls, init->elems[k].cls);
                }
                lf_unsupported(c, comp, in, "%s: carry element %u enters the loop as no value the baseline's loop starts from",
                               in->name, k);
                return unknown();
            }
            xs[k] = unknown();
            continue;
        }
        xs[k] = term(L->x[pi[k]], e->kind == LV_TERM ? e->v : view_dup(carry_shape(in, k)->rank), false);
    }
    /* A carry paired with a baseline carry is that carry under its view:
     * the view must give the baseline carry's dims. */
    for (uint32_t k = 0; k < n; k++) {
        if (xs[k].kind != LV_TERM || inv[k] || pi[k] == SR_NONE) continue;
        if (!carry_fits(c, L, pi[k], &xs[k].v, carry_shape(in, k))) {
            lf_unsupported(c, comp, in, "%s: carry element %u enters the loop under a view that does not give the dims of "
                           "the baseline's carry it starts as", in->name, k);
            return unknown();
        }
    }
    for (uint32_t k = 0; k < n && tup && k < ti->noperands; k++) guessed[k] |= vals[ti->operands[k]].konst;
    /* the other readings of each splat carry, for where the one taken fails */
    for (uint32_t k = 0; k < n && tup && k < ti->noperands; k++) {
        konst_alts *a = &alts[k];
        if (pi[k] == SR_NONE || xs[k].kind != LV_TERM || xs[k].scale != 0 || !vals[ti->operands[k]].konst) continue;
        konst_candidates(c, &init->elems[k], carry_shape(in, k), L, groups, ngroups, init->elems, n, a);
        for (a->at = 0; a->at < a->n && !a->held; a->at++)
            if (a->j[a->at] == pi[k] && view_equal(&a->v[a->at], &xs[k].v)) a->held = true;
        a->at = a->held ? a->at - 1 : a->n - 1;
    }
    /* A zero carry summed over mesh axes right after the loop (a gradient
     * accumulated from per-device partial sums, all-reduced once): zeros are a
     * partial sum of zeros, so it enters partial over those axes; the body
     * must keep it so (else unverified: another reading might be kept). */
    for (uint32_t k = 0; k < n && tup && k < ti->noperands; k++) {
        if (pi[k] == SR_NONE || xs[k].kind != LV_TERM || xs[k].v.partial || !vals[ti->operands[k]].konst ||
            !zero_value(comp, ti->operands[k]))
            continue;
        uint32_t p = summed_after(c, comp, in, k);
        if (!p || (p & view_axes_used(&xs[k].v)) || p > 0xff) continue;
        xs[k].v.partial = (uint8_t)p;
        xs[k].v.red = RED_SUM;
        guessed[k] = true;
    }
    /* A zero carry may be a partial sum of zeros or not; where the reading
     * taken fails, the other is tried (the first walk undone). */
    bool *failed = arena_alloc(c->a, n + 1);
    lf_loop_mark m0 = lf_loop_mark_take(c);
    lval got;
    bool ok = loop_try(c, comp, in, L, pi, xs, guessed, failed, &got);
    /* tied constants paired again as the body's updates say (a few rounds) */
    for (int round = 0; !ok && round < 3 && repair_ties(c, in, L, n, pi, xs, failed, guessed, &got); round++) {
        lf_loop_mark_undo(c, &m0);
        ok = loop_try(c, comp, in, L, pi, xs, guessed, failed, &got);
    }
    /* splats read as blocks of other baseline carries where they failed
     * (on copies: failing that, the readings below start from the first) */
    if (!ok) {
        lval *xr = arena_memdup(c->a, xs, (n + 1) * sizeof *xs);
        uint32_t *pr = arena_memdup(c->a, pi, (n + 1) * sizeof *pi);
        bool moved = false;
        for (int round = 0; !ok && round < KONST_ALTS - 1 && next_reading(c, in, L, n, pr, xr, failed, alts); round++) {
            lf_loop_mark_undo(c, &m0);
            ok = loop_try(c, comp, in, L, pr, xr, guessed, failed, &got);
            moved = true;
        }
        if (ok) xs = xr, memcpy(pi, pr, n * sizeof *pi);
        else if (moved) {
            lf_loop_mark_undo(c, &m0);
            ok = loop_try(c, comp, in, L, pi, xs, guessed, failed, &got);
        }
    }
    if (!ok && tup) {
        lval *alt = arena_memdup(c->a, xs, (n + 1) * sizeof *xs);
        bool *altg = arena_memdup(c->a, guessed, n + 1), flip = false, *splat = arena_alloc(c->a, n + 1);
        double *cval = arena_alloc(c->a, (n + 1) * sizeof *cval);
        for (uint32_t k = 0; k < n && k < ti->noperands; k++)
            splat[k] = failed[k] && alt[k].kind == LV_TERM && vals[ti->operands[k]].konst &&
                       splat_value(comp, ti->operands[k], &cval[k]) && !isnan(cval[k]);
        for (uint32_t k = 0; k < n && k < ti->noperands; k++) {
            if (!splat[k] || cval[k] != 0) continue;
            uint32_t p = alt[k].v.partial ? 0 : summed_after(c, comp, in, k);
            if (!alt[k].v.partial && !p) p = ((1u << c->mesh->naxes) - 1) & ~view_axes_used(&alt[k].v);
            if (!alt[k].v.partial && (!p || p > 0xff)) continue;
            alt[k].v.partial = (uint8_t)p;
            alt[k].v.red = p ? RED_SUM : 0;
            altg[k] = flip = true;
        }
        if (flip) {
            lf_loop_mark_undo(c, &m0);
            ok = loop_try(c, comp, in, L, pi, alt, altg, failed, NULL);
            if (ok) xs = alt;
        }
        /* neither: the constants as the first iteration leaves them */
        lval *first = arena_memdup(c->a, xs, (n + 1) * sizeof *xs);
        uint32_t *pf = arena_memdup(c->a, pi, (n + 1) * sizeof *pi);
        if (!ok && first_iteration_reading(c, in, L, pf, init, splat, cval, first)) {
            for (uint32_t k = 0; k < n; k++) altg[k] = guessed[k] || splat[k];
            lf_loop_mark_undo(c, &m0);
            ok = loop_try(c, comp, in, L, pf, first, altg, failed, NULL);
            if (ok) xs = first, memcpy(pi, pf, n * sizeof *pi);
            flip = true;
        }
        if (!ok && flip) {
            /* no reading holds: the first one's reasons stand */
            lf_loop_mark_undo(c, &m0);
            ok = loop_try(c, comp, in, L, pi, xs, guessed, failed, NULL);
        }
    }
    lval both;
    if (!ok && unrolled_both(c, comp, in, init, L, &m0, &both)) return both;
    lval *rs = arena_alloc(c->a, (n + 1) * sizeof *rs);
    for (uint32_t k = 0; k < n; k++) {
        const shape *sh = carry_shape(in, k);
        /* a constant's view was a reading the failed induction did not confirm */
        if (inv[k]) rs[k] = xs[k];
        else if (pi[k] == SR_NONE || (!ok && guessed[k])) rs[k] = unknown();
        else if (ok) {
            rs[k] = term(L->result.elems[pi[k]].cls, xs[k].v, false);
            rs[k].scale = xs[k].scale;
        } else {
            /* (an unknown value of the carry's global dims under its view) */
            int64_t g[VIEW_MAX_RANK];
            if (sh->rank > VIEW_MAX_RANK) {
                rs[k] = unknown();
                continue;
            }
            lf_global_dims(c, &xs[k].v, sh, g);
            rs[k] = term(lf_fresh_var(c, sh->dtype, g, sh->rank), xs[k].v, true);
        }
    }
    return single ? rs[0] : (lval){.kind = LV_TUPLE, .n = n, .elems = rs};
}

/* ---- the walk state a loop (or another reading) saves and undoes ---- */

lf_loop_mark lf_loop_mark_take(const lift_ctx *c) {
    const lift_segment *sg = c->nsegs ? &c->segs[c->cur_seg] : NULL;
    return (lf_loop_mark){c->nfindings, c->nunsupported, c->noutside, c->resynced, c->ndoms, sg ? sg->findings : 0,
                       sg ? sg->unsupported : 0, sg ? sg->divergent : 0, sg ? sg->outside : 0, c->next_loop,
                       c->assumptions.len, c->lifted, c->assumed, c->first_unsupported, c->later_unsupported,
                       c->divergence, c->first_unsupported_comp, c->later_unsupported_comp, c->divergence_comp,
                       c->unsupported_why, c->later_unsupported_why, c->divergence_note, c->divergence_cause, c->unsupported_konst,
                       c->later_unsupported_konst, c->divergence_konst, c->divergence_layout, c->divergence_resynced,
                       c->divergence_kind, c->resync_scope, c->divergence_cls};
}

void lf_loop_mark_undo(lift_ctx *c, const lf_loop_mark *m) {
    c->nfindings = m->nfindings;
    c->nunsupported = m->nunsupported;
    c->noutside = m->noutside;
    c->resynced = m->resynced;
    c->ndoms = m->ndoms;
    if (c->nsegs) {
        lift_segment *sg = &c->segs[c->cur_seg];
        sg->findings = m->seg_findings;
        sg->unsupported = m->seg_unsupported;
        sg->divergent = m->seg_divergent;
        sg->outside = m->seg_outside;
    }
    c->next_loop = m->next_loop;
    if (c->assumptions.s && m->assumptions < c->assumptions.len) {
        c->assumptions.len = m->assumptions;
        c->assumptions.s[m->assumptions] = 0;
    }
    c->lifted = m->lifted;
    c->assumed = m->assumed;
    c->first_unsupported = m->first_unsupported;
    c->later_unsupported = m->later_unsupported;
    c->divergence = m->divergence;
    c->first_unsupported_comp = m->first_unsupported_comp;
    c->later_unsupported_comp = m->later_unsupported_comp;
    c->divergence_comp = m->divergence_comp;
    c->unsupported_why = m->unsupported_why;
    c->later_unsupported_why = m->later_unsupported_why;
    c->divergence_note = m->divergence_note;
    c->divergence_cause = m->divergence_cause;
    c->unsupported_konst = m->unsupported_konst;
    c->later_unsupported_konst = m->later_unsupported_konst;
    c->divergence_konst = m->divergence_konst;
    c->divergence_layout = m->divergence_layout;
    c->divergence_resynced = m->divergence_resynced;
    c->divergence_kind = m->divergence_kind;
    c->divergence_cls = m->divergence_cls;
    c->resync_scope = m->resync_scope;
}
