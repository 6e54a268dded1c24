#include "pwidx.h"

#include <string.h>

void pw_const(pw_fn *f, int64_t k) {
    f->n = 1;
    f->p[0] = (pw_piece){PW_NEG_INF, PW_POS_INF, 0, k};
}

void pw_shift(pw_fn *f, int64_t b) {
    f->n = 1;
    f->p[0] = (pw_piece){PW_NEG_INF, PW_POS_INF, 1, b};
}

/* Appends a piece, merging it with the previous one when they agree. */
bool pw_push(pw_fn *out, int64_t lo, int64_t hi, int64_t a, int64_t b) {
    if (lo >= hi) return true;
    if (out->n && out->p[out->n - 1].a == a && out->p[out->n - 1].b == b && out->p[out->n - 1].hi == lo) {
        out->p[out->n - 1].hi = hi;
        return true;
    }
    if (out->n == PW_MAX) return false;
    out->p[out->n++] = (pw_piece){lo, hi, a, b};
    return true;
}

/* The pieces of f and g on their common breakpoints, visited in order. */
typedef bool (*pair_fn)(int op, int64_t lo, int64_t hi, const pw_piece *x, const pw_piece *y, pw_fn *out);

static bool refine(int op, const pw_fn *f, const pw_fn *g, pw_fn *out, pair_fn fn) {
    out->n = 0;
    uint32_t i = 0, j = 0;
    int64_t lo = PW_NEG_INF;
    while (i < f->n && j < g->n) {
        int64_t hi = f->p[i].hi < g->p[j].hi ? f->p[i].hi : g->p[j].hi;
        if (!fn(op, lo, hi, &f->p[i], &g->p[j], out)) return false;
        lo = hi;
        if (f->p[i].hi == hi) i++;
        if (g->p[j].hi == hi) j++;
    }
    return true;
}

static bool add_ok(int64_t x, int64_t y, int64_t *r) { return !__builtin_add_overflow(x, y, r); }
static bool mul_ok64(int64_t x, int64_t y, int64_t *r) { return !__builtin_mul_overflow(x, y, r); }

/* The piece where d(t) = s·t + k satisfies "d OP 0", for s ∈ {-1, 0, 1}:
 * splits [lo, hi) at the threshold. */
static bool compare_piece(int op, int64_t lo, int64_t hi, int64_t s, int64_t k, pw_fn *out) {
    if (s == 0) {
        bool v = op == PW_EQ ? k == 0 : op == PW_NE ? k != 0 : op == PW_LT ? k < 0 : op == PW_LE ? k <= 0
               : op == PW_GT ? k > 0 : k >= 0;
        return pw_push(out, lo, hi, 0, v);
    }
    if (s != 1 && s != -1) return false;
    if (s == -1) {
        /* -t + k OP 0  ⇔  t + (-k) OP' 0 with OP mirrored. */
        if (k == INT64_MIN) return false;
        k = -k;
        op = op == PW_LT ? PW_GT : op == PW_LE ? PW_GE : op == PW_GT ? PW_LT : op == PW_GE ? PW_LE : op;
    }
    /* t + k OP 0  ⇔  t OP -k; c = -k is the threshold. */
    if (k == INT64_MIN) return false;
    int64_t c = -k;
    int64_t cut_lo, cut_hi;  /* where the predicate is true: [cut_lo, cut_hi) */
    switch (op) {
    case PW_LT: cut_lo = PW_NEG_INF; cut_hi = c; break;
    case PW_LE: cut_lo = PW_NEG_INF; cut_hi = c == PW_POS_INF ? c : c + 1; break;
    case PW_GT: cut_lo = c == PW_POS_INF ? c : c + 1; cut_hi = PW_POS_INF; break;
    case PW_GE: cut_lo = c; cut_hi = PW_POS_INF; break;
    case PW_EQ: cut_lo = c; cut_hi = c == PW_POS_INF ? c : c + 1; break;
    default: {  /* NE: true outside [c, c+1) */
        int64_t e = c == PW_POS_INF ? c : c + 1;
        return pw_push(out, lo, c < lo ? lo : c > hi ? hi : c, 0, 1) &&
               pw_push(out, c < lo ? lo : c > hi ? hi : c, e < lo ? lo : e > hi ? hi : e, 0, 0) &&
               pw_push(out, e < lo ? lo : e > hi ? hi : e, hi, 0, 1);
    }
    }
    int64_t a = cut_lo < lo ? lo : cut_lo > hi ? hi : cut_lo;
    int64_t b = cut_hi < lo ? lo : cut_hi > hi ? hi : cut_hi;
    return pw_push(out, lo, a, 0, 0) && pw_push(out, a, b, 0, 1) && pw_push(out, b, hi, 0, 0);
}

static bool pair_op(int op, int64_t lo, int64_t hi, const pw_piece *x, const pw_piece *y, pw_fn *out) {
    int64_t a, b;
    switch (op) {
    case PW_ADD:
        return add_ok(x->a, y->a, &a) && add_ok(x->b, y->b, &b) && pw_push(out, lo, hi, a, b);
    case PW_SUB:
        return !__builtin_sub_overflow(x->a, y->a, &a) && !__builtin_sub_overflow(x->b, y->b, &b) &&
               pw_push(out, lo, hi, a, b);
    case PW_MUL:
        if (x->a && y->a) return false;
        if (x->a == 0) return mul_ok64(x->b, y->a, &a) && mul_ok64(x->b, y->b, &b) && pw_push(out, lo, hi, a, b);
        return mul_ok64(y->b, x->a, &a) && mul_ok64(y->b, x->b, &b) && pw_push(out, lo, hi, a, b);
    case PW_AND: case PW_OR: case PW_XOR:
        if (x->a || y->a) return false;
        return pw_push(out, lo, hi, 0, op == PW_AND ? (x->b & y->b) : op == PW_OR ? (x->b | y->b) : (x->b ^ y->b));
    case PW_MIN: case PW_MAX_OP: {
        /* Split where x < y, then take the smaller (or larger) on each side. */
        pw_fn lt = {0};
        if (__builtin_sub_overflow(x->a, y->a, &a) || __builtin_sub_overflow(x->b, y->b, &b)) return false;
        if (!compare_piece(PW_LT, lo, hi, a, b, &lt)) return false;
        for (uint32_t k = 0; k < lt.n; k++) {
            bool take_x = (lt.p[k].b == 1) == (op == PW_MIN);
            const pw_piece *w = take_x ? x : y;
            if (!pw_push(out, lt.p[k].lo, lt.p[k].hi, w->a, w->b)) return false;
        }
        return true;
    }
    default:
        if (__builtin_sub_overflow(x->a, y->a, &a) || __builtin_sub_overflow(x->b, y->b, &b)) return false;
        return compare_piece(op, lo, hi, a, b, out);
    }
}

bool pw_binary(int op, const pw_fn *f, const pw_fn *g, pw_fn *out) {
    pw_fn tmp;
    if (!refine(op, f, g, &tmp, pair_op)) return false;
    *out = tmp;
    return true;
}

bool pw_select(const pw_fn *c, const pw_fn *t, const pw_fn *f, pw_fn *out) {
    /* Refine c with t, then with f, choosing by c's constant value. */
    pw_fn tmp = {0};
    uint32_t i = 0, j = 0, k = 0;
    int64_t lo = PW_NEG_INF;
    while (i < c->n && j < t->n && k < f->n) {
        int64_t hi = c->p[i].hi;
        if (t->p[j].hi < hi) hi = t->p[j].hi;
        if (f->p[k].hi < hi) hi = f->p[k].hi;
        if (c->p[i].a) return false;
        const pw_piece *w = c->p[i].b ? &t->p[j] : &f->p[k];
        if (!pw_push(&tmp, lo, hi, w->a, w->b)) return false;
        lo = hi;
        if (c->p[i].hi == hi) i++;
        if (t->p[j].hi == hi) j++;
        if (f->p[k].hi == hi) k++;
    }
    *out = tmp;
    return true;
}

bool pw_not(const pw_fn *f, pw_fn *out) {
    pw_fn tmp = {0};
    for (uint32_t i = 0; i < f->n; i++) {
        if (f->p[i].a) return false;
        if (!pw_push(&tmp, f->p[i].lo, f->p[i].hi, 0, !f->p[i].b)) return false;
    }
    *out = tmp;
    return true;
}

bool pw_negate(const pw_fn *f, pw_fn *out) {
    pw_fn tmp = {0};
    for (uint32_t i = 0; i < f->n; i++) {
        if (f->p[i].a == INT64_MIN || f->p[i].b == INT64_MIN) return false;
        if (!pw_push(&tmp, f->p[i].lo, f->p[i].hi, -f->p[i].a, -f->p[i].b)) return false;
    }
    *out = tmp;
    return true;
}

bool pw_constant_on(const pw_fn *f, int64_t lo, int64_t hi, int64_t *value) {
    bool seen = false;
    for (uint32_t i = 0; i < f->n; i++) {
        if (f->p[i].hi <= lo || f->p[i].lo >= hi) continue;
        if (f->p[i].a) return false;
        if (seen && f->p[i].b != *value) return false;
        *value = f->p[i].b;
        seen = true;
    }
    return seen;
}

/* Pushes [s, e) ∩ [lo, hi) with value a·t + b. */
static bool push_clipped(pw_fn *out, int64_t lo, int64_t hi, int64_t s, int64_t e, int64_t a, int64_t b) {
    if (s < lo) s = lo;
    if (e > hi) e = hi;
    return s >= e || pw_push(out, s, e, a, b);
}

bool pw_wrap_unsigned(const pw_fn *f, int bits, pw_fn *out) {
    if (bits < 1 || bits > 32) return false;
    const int64_t m = (int64_t)1 << bits;
    out->n = 0;
    for (uint32_t k = 0; k < f->n; k++) {
        const pw_piece *p = &f->p[k];
        if (!push_clipped(out, p->lo, p->hi, PW_NEG_INF, 0, p->a, p->b)) return false;
        int64_t lo = p->lo > 0 ? p->lo : 0, hi = p->hi;
        if (lo >= hi) continue;
        bool ok;
        if (p->a == 0) {
            /* one value: wrapped once at most */
            if (p->b < -m || p->b >= 2 * m) return false;
            ok = pw_push(out, lo, hi, 0, p->b < 0 ? p->b + m : p->b >= m ? p->b - m : p->b);
        } else if (p->a == 1) {
            /* t + b for 0 <= t < m, b in [-m, m): below 0 until -b, at least m from m - b */
            if (p->b < -m || p->b >= m) return false;
            ok = push_clipped(out, lo, hi, PW_NEG_INF, -p->b, 1, p->b + m) &&
                 push_clipped(out, lo, hi, -p->b, m - p->b, 1, p->b) &&
                 push_clipped(out, lo, hi, m - p->b, PW_POS_INF, 1, p->b - m);
        } else if (p->a == -1) {
            /* b - t for 0 <= t < m, b in [0, m): below 0 from b + 1 */
            if (p->b < 0 || p->b >= m) return false;
            ok = push_clipped(out, lo, hi, PW_NEG_INF, p->b + 1, -1, p->b) &&
                 push_clipped(out, lo, hi, p->b + 1, PW_POS_INF, -1, p->b + m);
        } else {
            return false;
        }
        if (!ok) return false;
    }
    return true;
}
