/* lift_guard — a select read under its own predicate (DESIGN §5, "A select
 * read under its own predicate").
 *
 * JAX code guards a function that is not total with two selects on one
 * predicate, the "double where": where(p, k, f(where(p, safe, x))) keeps NaN
 * out of f's gradient where p holds (optax.safe_norm in LAMB and LARS:
 * where(n <= 0, 0, norm(where(n <= 0, 1, x)))). Inside the false operand of
 * select(p, a, b) the select on p is its false operand, inside the true one
 * its true operand: a select of b's elements is only taken where p is false.
 * That holds elementwise, so an inner select counts only where it reads p at
 * the same element: p itself along a path of elementwise ops of p's shape, or
 * anywhere below when p has one element (the inner one then reads it through
 * reshapes and broadcasts: every element of its predicate is p's one value).
 * lf_guarded_select builds the select with its operands so rewritten, and
 * then reads two identities of a select whose operands name its predicate's:
 *   select(x == k, k, x) = x           (where x is k, k is x);
 *   select(x <= 0, 0, x) = x  for x >= 0 by construction (sqrt, abs, exp,
 *   x·x): where x <= 0 holds, x is 0 (or -0, NaN never compares),
 * which make the guarded norm the plain one the distributed program computes
 * from its all-reduced sum of squares. Every rewrite is exact: the class the
 * lifter keeps is the select's value. Bounded: a few dozen classes per
 * select, eight levels deep. */
#include <string.h>

#include "eattr.h"
#include "lift_int.h"

enum { GUARD_NODES = 48, GUARD_DEPTH = 8 };
enum { DIR_EQ = 0, DIR_NE = 1, DIR_LT = 2, DIR_LE = 3, DIR_GT = 4, DIR_GE = 5 };

static int64_t class_elems(lift_ctx *c, eid x) {
    uint32_t r;
    const int64_t *d = eg_type_dims(c->g, eg_class_type(c->g, x), &r);
    int64_t n = 1;
    for (uint32_t k = 0; k < r; k++) n *= d[k];
    return n;
}

/* x with reshapes and broadcasts of a one-element value stripped: every
 * element of x is that value's element. */
static eid one_value(lift_ctx *c, eid x) {
    x = eg_find(c->g, x);
    for (int hops = 0; hops < 8; hops++) {
        eid y = EID_NONE;
        for (eid k = eg_class_first(c->g, x); k != EID_NONE && y == EID_NONE; k = eg_class_next(c->g, k)) {
            uint16_t op = eg_node_op(c->g, k);
            uint32_t n;
            const eid *ch = eg_node_children(c->g, k, &n);
            if ((op == OP_RESHAPE || op == OP_BROADCAST) && n == 1 && class_elems(c, ch[0]) == 1) y = eg_find(c->g, ch[0]);
        }
        if (y == EID_NONE || y == x) break;
        x = y;
    }
    return x;
}

/* Whether one-element values a and b are equal by construction: one class,
 * one constant, or one elementwise op over operands that are. */
static bool same_one(lift_ctx *c, eid a, eid b, int depth) {
    a = one_value(c, a), b = one_value(c, b);
    if (a == b) return true;
    if (class_elems(c, a) != 1 || class_elems(c, b) != 1 ||
        eg_type_dtype(c->g, eg_class_type(c->g, a)) != eg_type_dtype(c->g, eg_class_type(c->g, b)))
        return false;
    double x, y;
    if (lf_class_splat_value(c, a, &x) && lf_class_splat_value(c, b, &y)) return x == y;
    if (depth == 0) return false;
    for (eid i = eg_class_first(c->g, a); i != EID_NONE; i = eg_class_next(c->g, i)) {
        uint16_t op = eg_node_op(c->g, i);
        if (op >= EG_OP_PARAM || !graph_op_elementwise(op)) continue;
        uint32_t ni, nj;
        const eid *ci = eg_node_children(c->g, i, &ni);
        for (eid j = eg_class_first(c->g, b); j != EID_NONE; j = eg_class_next(c->g, j)) {
            if (eg_node_op(c->g, j) != op || eg_node_attr(c->g, j) != eg_node_attr(c->g, i)) continue;
            const eid *cj = eg_node_children(c->g, j, &nj);
            bool same = ni == nj && ni > 0;
            for (uint32_t k = 0; k < ni && same; k++) same = same_one(c, ci[k], cj[k], depth - 1);
            if (same) return true;
        }
    }
    return false;
}

static bool same_dims(lift_ctx *c, eid x, eid y) {
    uint32_t rx, ry;
    const int64_t *dx = eg_type_dims(c->g, eg_class_type(c->g, x), &rx);
    const int64_t *dy = eg_type_dims(c->g, eg_class_type(c->g, y), &ry);
    return rx == ry && (!rx || !memcmp(dx, dy, rx * sizeof *dx));
}

typedef struct guard {
    lift_ctx *c;
    eid p;            /* the outer select's predicate */
    bool one;         /* p has one element */
    uint8_t origin;
    uint32_t budget;  /* classes still to visit */
    uint32_t n;       /* memo: from[i] read under truth[i] is to[i] */
    eid from[GUARD_NODES], to[GUARD_NODES];
    bool truth[GUARD_NODES];
    uint32_t nopen;   /* the classes being read, outermost first (a cycle
                       * through first nodes is read as the class itself) */
    eid open[GUARD_DEPTH + 2];
} guard;

/* Whether predicate q reads p at every element it is used at. */
static bool reads_p(guard *G, eid q) {
    q = eg_find(G->c->g, q);
    if (q == G->p) return true;
    return G->one && class_elems(G->c, one_value(G->c, q)) == 1 && same_one(G->c, q, G->p, 3);
}

/* x's value where p is truth (x itself when nothing below it reads p). */
static eid under(guard *G, eid x, bool truth, int depth) {
    lift_ctx *c = G->c;
    x = eg_find(c->g, x);
    for (uint32_t i = 0; i < G->n; i++)
        if (G->from[i] == x && G->truth[i] == truth) return G->to[i];
    for (uint32_t i = 0; i < G->nopen; i++)
        if (G->open[i] == x) return x;
    if (!G->budget || G->nopen == ARRAY_LEN(G->open)) return x;
    G->budget--;
    G->open[G->nopen++] = x;
    eid r = x;
    /* the class's first node: the term as built (a node unioned in later,
     * e.g. by an assumption, may make the class its own operand) */
    eid k = eg_class_first(c->g, x);
    uint16_t op = eg_node_op(c->g, k);
    uint32_t n;
    const eid *ch = eg_node_children(c->g, k, &n);
    if (op == OP_SELECT && n == 3 && reads_p(G, ch[0])) {
        r = under(G, ch[truth ? 1 : 2], truth, depth);
        goto done;
    }
    if (depth == 0 || n == 0 || n > 8 || op >= EG_OP_PARAM) goto done;
    /* elsewhere than at p's element: only with p's one value everywhere */
    if (!G->one && (!graph_op_elementwise(op) || !same_dims(c, x, G->p))) goto done;
    eid kids[8], was[8];
    uint32_t attr = eg_node_attr(c->g, k);
    memcpy(was, ch, n * sizeof *was); /* (eg_add below may move the nodes) */
    bool changed = false;
    for (uint32_t i = 0; i < n; i++) {
        kids[i] = under(G, was[i], truth, depth - 1);
        changed |= kids[i] != eg_find(c->g, was[i]);
    }
    if (changed)
        r = eg_add(c->g, op, attr, eg_class_type(c->g, x), kids, n, G->origin);
done:
    G->nopen--;
    if (G->n < GUARD_NODES) G->from[G->n] = x, G->truth[G->n] = truth, G->to[G->n++] = r;
    return r;
}

/* Whether x equals y elementwise by construction (one class, or one-element
 * values that are the same). */
static bool same_value(lift_ctx *c, eid x, eid y) {
    if (eg_find(c->g, x) == eg_find(c->g, y)) return true;
    double u, v;
    if (lf_class_splat_value(c, x, &u) && lf_class_splat_value(c, y, &v)) return u == v;
    return class_elems(c, x) == 1 && class_elems(c, y) == 1 && same_one(c, x, y, 3);
}

/* Whether x >= 0 (or NaN) by construction. */
static bool non_negative(lift_ctx *c, eid x) {
    for (eid k = eg_class_first(c->g, eg_find(c->g, x)); k != EID_NONE; k = eg_class_next(c->g, k)) {
        uint16_t op = eg_node_op(c->g, k);
        uint32_t n;
        const eid *ch = eg_node_children(c->g, k, &n);
        if (op == OP_SQRT || op == OP_ABS || op == OP_EXP) return true;
        if (op == OP_MULTIPLY && n == 2 && eg_find(c->g, ch[0]) == eg_find(c->g, ch[1])) return true;
    }
    return false;
}

/* select(p, a, b) = b by the identities above: p compares b with a; its
 * operands may be one-element values b and a are broadcast from. */
static bool picks_false(lift_ctx *c, eid p, eid a, eid b) {
    const eid *cc = NULL;
    p = class_elems(c, p) == 1 ? one_value(c, p) : eg_find(c->g, p);
    eid cmp = lf_class_node(c, p, OP_COMPARE, 2, &cc);
    if (cmp == EID_NONE) return false;
    int dir = (int)ea_get_int(c->g, eg_node_attr(c->g, cmp), A_DIRECTION, DIR_EQ);
    bool zero = lf_class_is_zero(c, a);
    /* x on the left: swap a mirrored order */
    eid x = cc[0], k = cc[1];
    if (!same_value(c, k, a)) {
        x = cc[1], k = cc[0];
        dir = dir == DIR_LT ? DIR_GT : dir == DIR_LE ? DIR_GE : dir == DIR_GT ? DIR_LT : dir == DIR_GE ? DIR_LE : dir;
        if (!same_value(c, k, a)) return false;
    }
    if (!same_value(c, x, b)) return false;
    return dir == DIR_EQ || (zero && (dir == DIR_LE || dir == DIR_LT) && non_negative(c, b));
}

eid lf_guarded_select(lift_ctx *c, eid p, eid a, eid b, uint32_t attr, uint32_t t, uint8_t origin) {
    if (eg_class_type(c->g, a) != t || eg_class_type(c->g, b) != t) return EID_NONE;
    guard G = {.c = c, .p = eg_find(c->g, p), .origin = origin, .budget = GUARD_NODES};
    G.one = class_elems(c, G.p) == 1;
    eid a2 = under(&G, a, true, GUARD_DEPTH), b2 = under(&G, b, false, GUARD_DEPTH);
    if (picks_false(c, p, a2, b2)) return b2;
    if (a2 == eg_find(c->g, a) && b2 == eg_find(c->g, b)) return EID_NONE;
    eid ch[3] = {G.p, a2, b2};
    return eg_add(c->g, OP_SELECT, attr, t, ch, 3, origin);
}
