/* rinst — see rinst.h for the contract. */
#include "rinst.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "eattr.h"
#include "graph.h"
#include "shape.h"

enum { MAX_RANK = 8, MAX_VARS = 256, MAX_WORDS = 64 };

typedef struct rtype {
    int dt;
    uint32_t rank;
    int64_t d[MAX_RANK];
} rtype;

/* A dot's layout: logical dims of each side are batch 0..nb, contracting
 * 0..nc, free 0..lf (rf); lpos/rpos give each one's operand position. */
typedef struct dotcfg {
    uint32_t nb, nc, lf, rf;
    uint32_t lpos[MAX_RANK], rpos[MAX_RANK];
    int64_t csize[MAX_RANK];
} dotcfg;

typedef struct binding {
    bool bound;
    rtype t;          /* class variables: the type of their text */
    char *text;       /* class variables: the subterm, owned */
    int64_t w[MAX_WORDS];
    uint32_t n;       /* value variables: the words */
    bool has_dot;     /* value variables bound by a dot: its layout */
    dotcfg dot;
    uint32_t choice;  /* op variables: index of the member chosen */
} binding;

typedef struct gen {
    const em_prog *p;
    const ri_limits *lim;
    interp_rng *rng;
    strbuf *out;
    uint32_t nparams;
    uint64_t elements;
    binding *v;  /* MAX_VARS */
    int64_t split[MAX_RANK], split_size;
    uint32_t split_n;
} gen;

/* ---- randomness ---- */

static int64_t rnd(gen *g, int64_t lo, int64_t hi) {
    return lo + (int64_t)(interp_rng_next(g->rng) % (uint64_t)(hi - lo + 1));
}
static bool chance(gen *g, int one_in) { return rnd(g, 1, one_in) == 1; }

static int64_t rnd_dim(gen *g) { return chance(g, 4) ? 1 : rnd(g, 1, g->lim->max_dim); }

static void shuffle(gen *g, uint32_t *a, uint32_t n) {
    for (uint32_t i = n; i > 1; i--) {
        uint32_t j = (uint32_t)rnd(g, 0, i - 1), t = a[i - 1];
        a[i - 1] = a[j];
        a[j] = t;
    }
}

static int rnd_dtype(gen *g) {
    int64_t x = rnd(g, 0, 19);
    return x < 10 ? DT_F32 : x < 13 ? DT_F64 : x < 16 ? DT_BF16 : x < 18 ? DT_F16 : DT_S32;
}

/* ---- text ---- */

static void put_type(strbuf *b, const rtype *t) {
    sb_printf(b, "%s[", dtype_name(t->dt));
    for (uint32_t i = 0; i < t->rank; i++) sb_printf(b, "%s%lld", i ? "," : "", (long long)t->d[i]);
    sb_putc(b, ']');
}

static void put_list(strbuf *b, const char *key, const int64_t *w, uint32_t n) {
    if (!n) return;  /* absent means the default, the empty list */
    sb_printf(b, " :%s (", key);
    for (uint32_t i = 0; i < n; i++) sb_printf(b, "%s%lld", i ? " " : "", (long long)w[i]);
    sb_putc(b, ')');
}

static bool same_type(const rtype *a, const rtype *b) {
    return a->dt == b->dt && a->rank == b->rank && memcmp(a->d, b->d, a->rank * sizeof *a->d) == 0;
}

/* ---- what the pattern says about an attribute ---- */

typedef struct aspec {
    bool present;             /* the pattern mentions the key */
    bool fixed;               /* its value is known: w[0..n) */
    int64_t w[MAX_WORDS];
    uint32_t n;
    int32_t len;              /* a list pattern: its length; else -1 */
    uint32_t vp;              /* the value pattern */
} aspec;

static const em_pat *kid(const gen *g, const em_pat *t, uint32_t i) { return &g->p->pats[g->p->kids[t->kids + i]]; }

static void spec(gen *g, const em_pat *t, int key, aspec *a) {
    memset(a, 0, sizeof *a);
    a->len = -1;
    a->fixed = true;  /* absent: the empty default */
    for (uint32_t i = 0; i < t->nattrs; i++) {
        const em_attr *at = &g->p->attrs[t->attrs + i];
        if (at->key != key) continue;
        a->present = true;
        a->vp = at->val;
        const em_pat *v = &g->p->pats[at->val];
        a->fixed = false;
        if (v->kind == EM_INT) {
            a->w[0] = v->ival, a->n = 1, a->fixed = true;
        } else if (v->kind == EM_WORDS && v->nwords <= MAX_WORDS) {
            memcpy(a->w, g->p->words + v->words, v->nwords * sizeof *a->w);
            a->n = v->nwords, a->fixed = true;
        } else if (v->kind == EM_VAR && v->var < MAX_VARS && g->v[v->var].bound) {
            memcpy(a->w, g->v[v->var].w, g->v[v->var].n * sizeof *a->w);
            a->n = g->v[v->var].n, a->fixed = true;
        } else if (v->kind == EM_LIST && v->nkids <= MAX_WORDS) {
            a->len = (int32_t)v->nkids;
            a->fixed = true;
            for (uint32_t k = 0; k < v->nkids && a->fixed; k++) {
                const em_pat *e = kid(g, v, k);
                if (e->kind == EM_INT) a->w[k] = e->ival;
                else if (e->kind == EM_VAR && e->var < MAX_VARS && g->v[e->var].bound && g->v[e->var].n == 1)
                    a->w[k] = g->v[e->var].w[0];
                else a->fixed = false;
            }
            if (a->fixed) a->n = v->nkids;
        }
        return;
    }
}

/* Records the value chosen for an attribute in the pattern's variables. */
static void bind(gen *g, const aspec *a, const int64_t *w, uint32_t n) {
    if (!a->present || n > MAX_WORDS) return;
    const em_pat *v = &g->p->pats[a->vp];
    if (v->kind == EM_VAR && v->var < MAX_VARS) {
        binding *b = &g->v[v->var];
        b->bound = true;
        memcpy(b->w, w, n * sizeof *w);
        b->n = n;
    } else if (v->kind == EM_LIST && v->nkids == n) {
        for (uint32_t k = 0; k < n; k++) {
            const em_pat *e = kid(g, v, k);
            if (e->kind != EM_VAR || e->var >= MAX_VARS) continue;
            g->v[e->var].bound = true;
            g->v[e->var].w[0] = w[k];
            g->v[e->var].n = 1;
        }
    }
}

/* The pattern mentions no key outside allowed (A_COUNT-terminated). */
static bool only_keys(gen *g, const em_pat *t, const int *allowed) {
    for (uint32_t i = 0; i < t->nattrs; i++) {
        bool ok = false;
        for (const int *k = allowed; *k != A_COUNT; k++) ok |= g->p->attrs[t->attrs + i].key == *k;
        if (!ok) return false;
    }
    return true;
}

/* ---- terms ---- */

static bool gen_term(gen *g, uint32_t pat, const rtype *t);

static bool is_elementwise(int op) {
    switch (op) {
    case OP_ADD: case OP_SUBTRACT: case OP_MULTIPLY: case OP_DIVIDE: case OP_MAXIMUM: case OP_MINIMUM:
    case OP_POWER: case OP_ATAN2: case OP_ABS: case OP_NEGATE: case OP_EXP: case OP_EXPM1: case OP_LOG:
    case OP_LOG1P: case OP_SQRT: case OP_RSQRT: case OP_CBRT: case OP_TANH: case OP_LOGISTIC: case OP_SINE:
    case OP_COSINE: case OP_TAN: case OP_FLOOR: case OP_CEIL: case OP_SIGN: case OP_ERF: case OP_COPY:
    case OP_ROUND_AFZ: case OP_ROUND_EVEN:
        return true;
    default:
        return false;
    }
}

/* Children kids[0..n) of pattern t with types ct[i]. */
static bool gen_kids(gen *g, const em_pat *t, const rtype *ct) {
    for (uint32_t i = 0; i < t->nkids; i++) {
        sb_putc(g->out, ' ');
        if (!gen_term(g, g->p->kids[t->kids + i], &ct[i])) return false;
    }
    return true;
}

/* (op kids... ATTRS :type T): child i of type ct[i]; attrs (" :key value"...,
 * or NULL) is freed here. */
static bool emit(gen *g, const em_pat *t, int op, const rtype *ct, strbuf *attrs, const rtype *ty) {
    sb_printf(g->out, "(%s", hlo_op_name(op));
    bool ok = gen_kids(g, t, ct);
    if (attrs && attrs->len) sb_put(g->out, attrs->s, attrs->len);
    if (attrs) sb_free(attrs);
    sb_puts(g->out, " :type ");
    put_type(g->out, ty);
    sb_putc(g->out, ')');
    return ok;
}

/* A node of one operand c whose one list attribute `key` is w[0..n): binds
 * the pattern's variables to it and emits the node. */
static bool emit_list(gen *g, const em_pat *t, int op, const rtype *c, const aspec *a, const char *key,
                      const int64_t *w, uint32_t n, const rtype *ty) {
    bind(g, a, w, n);
    strbuf at;
    sb_init(&at);
    put_list(&at, key, w, n);
    return emit(g, t, op, c, &at, ty);
}

/* (op kids... ATTRS :type T) with every child of type t (elementwise). */
static bool gen_same(gen *g, const em_pat *t, int op, const char *attrs, const rtype *ty) {
    rtype ct[MAX_RANK];
    if (t->nkids > MAX_RANK) return false;
    for (uint32_t i = 0; i < t->nkids; i++) ct[i] = *ty;
    strbuf at;
    sb_init(&at);
    sb_puts(&at, attrs);
    return emit(g, t, op, ct, &at, ty);
}

static const char *custom_target(gen *g, const em_pat *t, char *buf, size_t cap) {
    aspec a;
    spec(g, t, A_CUSTOM_CALL_TARGET, &a);
    if (!a.present || !a.fixed || a.n < 1) return NULL;
    size_t len = (size_t)a.w[0];
    if (len + 1 > cap || (len + 7) / 8 + 1 != a.n) return NULL;
    for (size_t i = 0; i < len; i++) buf[i] = (char)((uint64_t)a.w[1 + i / 8] >> (8 * (i % 8)));
    buf[len] = 0;
    return buf;
}

static bool gen_custom(gen *g, const em_pat *t, const char *target, const rtype *ty) {
    char attrs[300];
    if (strlen(target) > 256 || strchr(target, '"')) return false;
    snprintf(attrs, sizeof attrs, " :custom_call_target \"%s\"", target);
    return gen_same(g, t, OP_CUSTOM_CALL, attrs, ty);
}

/* A node of one operand whose pattern mentions no key but `key` (A_COUNT:
 * none); *a gets what it says about key. */
static bool one_operand(gen *g, const em_pat *t, int key, aspec *a) {
    const int keys[] = {key, A_COUNT};
    if (t->nkids != 1 || !only_keys(g, t, keys)) return false;
    spec(g, t, key, a);
    return true;
}

/* (%class ?f kids...): a member op of the class, the same one wherever ?f recurs. */
static bool gen_opclass(gen *g, const em_pat *t, const rtype *ty) {
    const em_opclass *k = &g->p->classes[t->op];
    uint32_t nops = 0;
    int ops[OP_COUNT];
    for (int op = 1; op < OP_COUNT; op++)
        if (k->ops[op] && is_elementwise(op)) ops[nops++] = op;
    uint32_t total = nops + k->ntargets;
    if (!total) return false;
    binding *b = t->var < MAX_VARS ? &g->v[t->var] : NULL;
    uint32_t c = b && b->bound ? b->choice : (uint32_t)rnd(g, 0, total - 1);
    if (b) b->bound = true, b->choice = c;
    if (c < nops) return gen_same(g, t, ops[c], "", ty);
    return gen_custom(g, t, k->targets[c - nops], ty);
}

/* (compare a b :direction D): pred of the operands' dims, the operands of
 * one random type; D as the pattern fixes it, else any. */
static bool gen_compare(gen *g, const em_pat *t, const rtype *ty) {
    static const int keys[] = {A_DIRECTION, A_COUNT};
    aspec a;
    if (t->nkids != 2 || ty->dt != DT_PRED || !only_keys(g, t, keys)) return false;
    spec(g, t, A_DIRECTION, &a);
    int64_t d = a.present && a.fixed ? (a.n == 1 ? a.w[0] : -1) : a.present ? rnd(g, 0, EA_DIR_COUNT - 1) : 0;
    if (d < 0 || d >= EA_DIR_COUNT) return false;
    bind(g, &a, &d, 1);
    rtype ct[2] = {*ty, *ty};
    ct[0].dt = ct[1].dt = rnd_dtype(g);
    strbuf at;
    sb_init(&at);
    sb_printf(&at, " :direction %s", ea_direction_name((int)d));
    return emit(g, t, OP_COMPARE, ct, &at, ty);
}

static bool gen_convert(gen *g, const em_pat *t, const rtype *ty) {
    aspec a;
    if (!one_operand(g, t, A_COUNT, &a)) return false;
    rtype c = *ty;
    c.dt = chance(g, 3) ? ty->dt : rnd_dtype(g);
    return emit(g, t, OP_CONVERT, &c, NULL, ty);
}

static bool gen_transpose(gen *g, const em_pat *t, const rtype *ty) {
    aspec a;
    if (!one_operand(g, t, A_DIMENSIONS, &a)) return false;
    uint32_t r = ty->rank, perm[MAX_RANK];
    if (a.fixed) {
        if (a.n != r) return false;
        uint32_t seen = 0;
        for (uint32_t i = 0; i < r; i++) {
            if (a.w[i] < 0 || a.w[i] >= (int64_t)r || (seen >> a.w[i] & 1)) return false;
            seen |= 1u << a.w[i];
            perm[i] = (uint32_t)a.w[i];
        }
    } else {
        if (a.len >= 0 && (uint32_t)a.len != r) return false;
        for (uint32_t i = 0; i < r; i++) perm[i] = i;
        if (!chance(g, 4)) shuffle(g, perm, r);
    }
    rtype c = *ty;
    int64_t w[MAX_RANK];
    for (uint32_t i = 0; i < r; i++) c.d[perm[i]] = ty->d[i], w[i] = perm[i];
    return emit_list(g, t, OP_TRANSPOSE, &c, &a, "dimensions", w, r, ty);
}

/* (reverse x :dimensions D): D as the pattern fixes it, else distinct dims
 * drawn in increasing order (of the pattern's list length, when it gives one). */
static bool gen_reverse(gen *g, const em_pat *t, const rtype *ty) {
    aspec a;
    if (!one_operand(g, t, A_DIMENSIONS, &a)) return false;
    uint32_t r = ty->rank, n = 0, seen = 0;
    int64_t w[MAX_RANK];
    if (a.fixed) {
        if (a.n > r) return false;
        for (uint32_t i = 0; i < a.n; i++) {
            if (a.w[i] < 0 || a.w[i] >= (int64_t)r || (seen >> a.w[i] & 1)) return false;
            seen |= 1u << a.w[i];
            w[n++] = a.w[i];
        }
    } else {
        for (uint32_t d = 0; d < r; d++)
            if (chance(g, 2)) w[n++] = d;
        if (a.len >= 0 && (uint32_t)a.len != n) return false;
    }
    return emit_list(g, t, OP_REVERSE, ty, &a, "dimensions", w, n, ty);
}

/* (iota :iota_dimension d): positions along one dim of the type */
static bool gen_iota(gen *g, const em_pat *t, const rtype *ty) {
    static const int keys[] = {A_IOTA_DIMENSION, A_COUNT};
    aspec a;
    if (t->nkids != 0 || !only_keys(g, t, keys) || ty->rank == 0) return false;
    spec(g, t, A_IOTA_DIMENSION, &a);
    int64_t d = a.present && a.fixed ? (a.n == 1 ? a.w[0] : -1) : rnd(g, 0, ty->rank - 1);
    if (d < 0 || d >= (int64_t)ty->rank) return false;
    bind(g, &a, &d, 1);
    strbuf at;
    sb_init(&at);
    sb_printf(&at, " :iota_dimension %lld", (long long)d);
    return emit(g, t, OP_IOTA, NULL, &at, ty);
}

static bool gen_reshape(gen *g, const em_pat *t, const rtype *ty) {
    aspec a;
    if (!one_operand(g, t, A_COUNT, &a)) return false;
    rtype c = *ty;
    if (!chance(g, 4)) {
        int64_t n = 1;
        for (uint32_t i = 0; i < ty->rank; i++) n *= ty->d[i];
        c.rank = (uint32_t)rnd(g, n > 1 ? 1 : 0, g->lim->max_rank);
        for (uint32_t i = 0; i + 1 < c.rank; i++) {
            int64_t f = 1;
            if (!chance(g, 3))
                for (int tries = 0; tries < 8 && f == 1; tries++) {
                    int64_t x = rnd(g, 1, n);
                    if (n % x == 0) f = x;
                }
            c.d[i] = f;
            n /= f;
        }
        if (c.rank) c.d[c.rank - 1] = n;
    }
    return emit(g, t, OP_RESHAPE, &c, NULL, ty);
}

static bool gen_broadcast(gen *g, const em_pat *t, const rtype *ty) {
    aspec a;
    if (!one_operand(g, t, A_DIMENSIONS, &a)) return false;
    int64_t w[MAX_RANK];
    uint32_t n = 0;
    if (a.fixed) {
        if (a.n > ty->rank) return false;
        for (uint32_t i = 0; i < a.n; i++) {
            if (a.w[i] < 0 || a.w[i] >= (int64_t)ty->rank) return false;
            w[n++] = a.w[i];
        }
    } else {
        bool all = chance(g, 4);
        for (uint32_t i = 0; i < ty->rank; i++)
            if (all || chance(g, 2)) w[n++] = i;
        if (a.len >= 0 && (uint32_t)a.len != n) return false;
    }
    rtype c = *ty;
    c.rank = n;
    for (uint32_t i = 0; i < n; i++) c.d[i] = ty->d[w[i]];
    return emit_list(g, t, OP_BROADCAST, &c, &a, "dimensions", w, n, ty);
}

static bool gen_concatenate(gen *g, const em_pat *t, const rtype *ty) {
    static const int keys[] = {A_DIMENSIONS, A_COUNT};
    uint32_t nk = t->nkids;
    if (nk < 1 || nk > MAX_RANK || !ty->rank || !only_keys(g, t, keys)) return false;
    aspec a;
    spec(g, t, A_DIMENSIONS, &a);
    int64_t d;
    if (a.fixed) {
        if (a.n != 1 || a.w[0] < 0 || a.w[0] >= (int64_t)ty->rank) return false;
        d = a.w[0];
    } else {
        d = rnd(g, 0, ty->rank - 1);
    }
    int64_t size = ty->d[d], part[MAX_RANK];
    if (size < (int64_t)nk) return false;
    if (g->split_n == nk && g->split_size == size && chance(g, 2)) {
        memcpy(part, g->split, nk * sizeof *part);
    } else {
        for (uint32_t k = 0; k < nk; k++) part[k] = 1;
        for (int64_t rest = size - nk; rest > 0; rest--) part[rnd(g, 0, nk - 1)]++;
        memcpy(g->split, part, nk * sizeof *part);
        g->split_n = nk, g->split_size = size;
    }
    rtype ct[MAX_RANK];
    for (uint32_t k = 0; k < nk; k++) ct[k] = *ty, ct[k].d[d] = part[k];
    bind(g, &a, &d, 1);
    strbuf at;
    sb_init(&at);
    sb_printf(&at, " :dimensions (%lld)", (long long)d);
    return emit(g, t, OP_CONCATENATE, ct, &at, ty);
}

static bool gen_slice(gen *g, const em_pat *t, const rtype *ty) {
    aspec a;
    if (!one_operand(g, t, A_SLICE, &a)) return false;
    uint32_t r = ty->rank;
    int64_t w[3 * MAX_RANK];
    rtype c = *ty;
    bool full = chance(g, 3);
    for (uint32_t i = 0; i < r; i++) {
        int64_t s, l, st;
        if (a.fixed) {
            if (a.n != 3 * r) return false;
            s = a.w[3 * i], l = a.w[3 * i + 1], st = a.w[3 * i + 2];
            if (st < 1 || l < s || (l - s + st - 1) / st != ty->d[i]) return false;
        } else {
            st = full || !chance(g, 4) ? 1 : 2;
            s = full ? 0 : rnd(g, 0, 2);
            l = s + (ty->d[i] - 1) * st + 1;
        }
        w[3 * i] = s, w[3 * i + 1] = l, w[3 * i + 2] = st;
        c.d[i] = l + (full || a.fixed ? 0 : rnd(g, 0, 2));
    }
    if (!a.fixed && r == 0) return false;
    return emit_list(g, t, OP_SLICE, &c, &a, "slice", w, 3 * r, ty);
}

/* Positions of one side's logical dims (batch, contracting, free): fixed
 * batch/contracting lists when the pattern gives them, the rest at random,
 * free dims in increasing position order (the output keeps operand order). */
static bool dot_positions(gen *g, const aspec *ab, const aspec *ac, uint32_t nb, uint32_t nc, uint32_t nf,
                          uint32_t *pos) {
    uint32_t rank = nb + nc + nf, used = 0, rest[MAX_RANK], nrest = 0;
    if (rank > MAX_RANK) return false;
    for (uint32_t i = 0; i < nb + nc; i++) {
        const aspec *a = i < nb ? ab : ac;
        uint32_t j = i < nb ? i : i - nb;
        pos[i] = UINT32_MAX;
        if (!a->fixed) continue;
        if (a->w[j] < 0 || a->w[j] >= (int64_t)rank || (used >> a->w[j] & 1)) return false;
        pos[i] = (uint32_t)a->w[j];
        used |= 1u << pos[i];
    }
    for (uint32_t p = 0; p < rank; p++)
        if (!(used >> p & 1)) rest[nrest++] = p;
    shuffle(g, rest, nrest);
    uint32_t k = 0;
    for (uint32_t i = 0; i < nb + nc; i++)
        if (pos[i] == UINT32_MAX) pos[i] = rest[k++];
    /* what is left goes to the free dims, ascending */
    uint32_t left[MAX_RANK], nl = 0;
    for (; k < nrest; k++) left[nl++] = rest[k];
    for (uint32_t i = 1; i < nl; i++)
        for (uint32_t j = i; j > 0 && left[j - 1] > left[j]; j--) {
            uint32_t x = left[j];
            left[j] = left[j - 1];
            left[j - 1] = x;
        }
    for (uint32_t i = 0; i < nf; i++) pos[nb + nc + i] = left[i];
    return true;
}

static bool gen_dot(gen *g, const em_pat *t, const rtype *ty) {
    static const int keys[] = {A_LHS_BATCH_DIMS, A_RHS_BATCH_DIMS, A_LHS_CONTRACTING_DIMS, A_RHS_CONTRACTING_DIMS,
                               A_COUNT};
    if (t->nkids != 2 || !only_keys(g, t, keys)) return false;
    aspec lb, rb, lc, rc;
    spec(g, t, A_LHS_BATCH_DIMS, &lb);
    spec(g, t, A_RHS_BATCH_DIMS, &rb);
    spec(g, t, A_LHS_CONTRACTING_DIMS, &lc);
    spec(g, t, A_RHS_CONTRACTING_DIMS, &rc);
    uint32_t R = ty->rank;
    dotcfg cfg;
    const em_pat *lcv = lc.present ? &g->p->pats[lc.vp] : NULL;
    binding *shared = lcv && lcv->kind == EM_VAR && lcv->var < MAX_VARS ? &g->v[lcv->var] : NULL;
    if (shared && shared->bound && shared->has_dot) {
        cfg = shared->dot;  /* the same dimension numbers as the dot that bound ?lc */
        if (cfg.nb + cfg.lf + cfg.rf != R) return false;
    } else {
        memset(&cfg, 0, sizeof cfg);
        cfg.nb = lb.fixed ? lb.n : (uint32_t)rnd(g, 0, R < 2 ? R : 2);
        if (rb.fixed && rb.n != cfg.nb) return false;
        cfg.nc = lc.fixed ? lc.n : rc.fixed ? rc.n : (uint32_t)(chance(g, 6) ? 0 : rnd(g, 1, 2));
        if ((lc.fixed && lc.n != cfg.nc) || (rc.fixed && rc.n != cfg.nc) || cfg.nb > R) return false;
        cfg.lf = (uint32_t)rnd(g, 0, R - cfg.nb);
        cfg.rf = R - cfg.nb - cfg.lf;
        for (uint32_t j = 0; j < cfg.nc; j++) cfg.csize[j] = rnd_dim(g);
        if (!dot_positions(g, &lb, &lc, cfg.nb, cfg.nc, cfg.lf, cfg.lpos) ||
            !dot_positions(g, &rb, &rc, cfg.nb, cfg.nc, cfg.rf, cfg.rpos))
            return false;
    }
    rtype c[2] = {*ty, *ty};
    c[0].rank = cfg.nb + cfg.nc + cfg.lf;
    c[1].rank = cfg.nb + cfg.nc + cfg.rf;
    int64_t w[4][MAX_RANK];
    for (uint32_t i = 0; i < cfg.nb; i++) {
        c[0].d[cfg.lpos[i]] = c[1].d[cfg.rpos[i]] = ty->d[i];
        w[0][i] = cfg.lpos[i], w[1][i] = cfg.rpos[i];
    }
    for (uint32_t j = 0; j < cfg.nc; j++) {
        c[0].d[cfg.lpos[cfg.nb + j]] = c[1].d[cfg.rpos[cfg.nb + j]] = cfg.csize[j];
        w[2][j] = cfg.lpos[cfg.nb + j], w[3][j] = cfg.rpos[cfg.nb + j];
    }
    for (uint32_t k = 0; k < cfg.lf; k++) c[0].d[cfg.lpos[cfg.nb + cfg.nc + k]] = ty->d[cfg.nb + k];
    for (uint32_t k = 0; k < cfg.rf; k++) c[1].d[cfg.rpos[cfg.nb + cfg.nc + k]] = ty->d[cfg.nb + cfg.lf + k];
    bind(g, &lb, w[0], cfg.nb);
    bind(g, &rb, w[1], cfg.nb);
    bind(g, &lc, w[2], cfg.nc);
    bind(g, &rc, w[3], cfg.nc);
    if (shared && !shared->has_dot) shared->has_dot = true, shared->dot = cfg;
    strbuf at;
    sb_init(&at);
    put_list(&at, "lhs_batch_dims", w[0], cfg.nb);
    put_list(&at, "rhs_batch_dims", w[1], cfg.nb);
    put_list(&at, "lhs_contracting_dims", w[2], cfg.nc);
    put_list(&at, "rhs_contracting_dims", w[3], cfg.nc);
    return emit(g, t, OP_DOT, c, &at, ty);
}

/* A gather of one of two forms users write, each of the result's type:
 * take_along_axis (operand of the result's rank, picked along one dim a,
 * every other dim a batch dim in place, s32 indices of the result's dims
 * and a trailing 1) or a row lookup (operand [N, trailing dims of the
 * result], rows picked by indices of the leading dims). Attributes the
 * pattern fixes must agree with the form drawn; its variables are bound to
 * the values chosen. */
static bool gen_gather(gen *g, const em_pat *t, const rtype *ty) {
    static const int keys[] = {A_OFFSET_DIMS, A_COLLAPSED_SLICE_DIMS, A_START_INDEX_MAP, A_OPERAND_BATCHING_DIMS,
                               A_START_INDICES_BATCHING_DIMS, A_INDEX_VECTOR_DIM, A_SLICE_SIZES, A_COUNT};
    static const char *names[] = {"offset_dims", "collapsed_slice_dims", "start_index_map", "operand_batching_dims",
                                  "start_indices_batching_dims", "index_vector_dim", "slice_sizes"};
    uint32_t R = ty->rank;
    if (t->nkids != 2 || !only_keys(g, t, keys) || R + 1 > MAX_RANK) return false;
    int64_t w[7][MAX_RANK];
    uint32_t n[7] = {0};
    rtype c[2] = {*ty, {DT_S32, 0, {0}}};
    if (R > 0 && chance(g, 2)) { /* take_along_axis */
        int64_t a = rnd(g, 0, R - 1);
        for (uint32_t d = 0; d < R; d++) {
            if (d != a) w[3][n[3]++] = d, w[4][n[4]++] = d;
            w[6][n[6]++] = 1;
            c[1].d[d] = ty->d[d];
        }
        c[0].d[a] = rnd_dim(g);
        w[1][n[1]++] = a, w[2][n[2]++] = a;
        w[5][n[5]++] = R;
        c[1].rank = R + 1, c[1].d[R] = 1;
    } else { /* rows of a table, looked up by the leading dims */
        uint32_t nb = (uint32_t)rnd(g, 0, R);
        c[0].rank = 1 + R - nb;
        c[0].d[0] = rnd_dim(g);
        w[6][n[6]++] = 1;
        for (uint32_t d = nb; d < R; d++) c[0].d[1 + d - nb] = ty->d[d], w[0][n[0]++] = d, w[6][n[6]++] = ty->d[d];
        for (uint32_t d = 0; d < nb; d++) c[1].d[d] = ty->d[d];
        c[1].rank = nb + 1, c[1].d[nb] = 1;
        w[1][n[1]++] = 0, w[2][n[2]++] = 0;
        w[5][n[5]++] = nb;
    }
    strbuf at;
    sb_init(&at);
    for (int k = 0; k < 7; k++) {
        aspec a;
        spec(g, t, keys[k], &a);
        bool dflt = k == 5 ? w[5][0] == 0 : n[k] == 0; /* absent: 0, the empty list */
        if ((a.fixed && !(a.present ? a.n == n[k] && !memcmp(a.w, w[k], n[k] * sizeof *a.w) : dflt)) ||
            (a.len >= 0 && (uint32_t)a.len != n[k])) {
            sb_free(&at);
            return false;
        }
        bind(g, &a, w[k], n[k]);
        if (k == 5 && !dflt) sb_printf(&at, " :%s %lld", names[k], (long long)w[5][0]);
        else if (k != 5) put_list(&at, names[k], w[k], n[k]);
    }
    return emit(g, t, OP_GATHER, c, &at, ty);
}

/* A leaf: a new parameter, or the subterm the variable already stands for. */
static bool gen_var(gen *g, uint32_t var, const rtype *ty) {
    if (var >= MAX_VARS) return false;
    binding *b = &g->v[var];
    if (b->bound) {
        if (!b->text || !same_type(&b->t, ty)) return false;
        sb_puts(g->out, b->text);
        return true;
    }
    size_t start = g->out->len;
    sb_printf(g->out, "(param %u ", g->nparams++);
    put_type(g->out, ty);
    sb_putc(g->out, ')');
    uint64_t n = 1;
    for (uint32_t i = 0; i < ty->rank; i++) n *= (uint64_t)ty->d[i];
    g->elements += n;
    b->bound = true;
    b->t = *ty;
    b->text = xstrndup(g->out->s + start, g->out->len - start);
    return true;
}

static bool gen_term(gen *g, uint32_t pat, const rtype *ty) {
    const em_pat *t = &g->p->pats[pat];
    switch (t->kind) {
    case EM_VAR: return gen_var(g, t->var, ty);
    case EM_AS: {
        if (t->var >= MAX_VARS || g->v[t->var].bound) return false;
        size_t start = g->out->len;
        if (!gen_term(g, g->p->kids[t->kids], ty)) return false;
        binding *b = &g->v[t->var];
        b->bound = true;
        b->t = *ty;
        b->text = xstrndup(g->out->s + start, g->out->len - start);
        return true;
    }
    case EM_OPCLASS: return gen_opclass(g, t, ty);
    case EM_NODE: break;
    default: return false;
    }
    if (t->type) return false;  /* a :type in a pattern: not generated */
    static const int no_keys[] = {A_COUNT};
    char buf[257];
    switch (t->op) {
    case OP_CONVERT: return gen_convert(g, t, ty);
    case OP_COMPARE: return gen_compare(g, t, ty);
    case OP_TRANSPOSE: return gen_transpose(g, t, ty);
    case OP_REVERSE: return gen_reverse(g, t, ty);
    case OP_IOTA: return gen_iota(g, t, ty);
    case OP_RESHAPE: return gen_reshape(g, t, ty);
    case OP_BROADCAST: return gen_broadcast(g, t, ty);
    case OP_CONCATENATE: return gen_concatenate(g, t, ty);
    case OP_SLICE: return gen_slice(g, t, ty);
    case OP_DOT: return gen_dot(g, t, ty);
    case OP_GATHER: return gen_gather(g, t, ty);
    case OP_CUSTOM_CALL: {
        static const int keys[] = {A_CUSTOM_CALL_TARGET, A_COUNT};
        const char *target = only_keys(g, t, keys) ? custom_target(g, t, buf, sizeof buf) : NULL;
        return target && gen_custom(g, t, target, ty);
    }
    case OP_SELECT: {
        /* a predicate of the result's dims, then two values of its type */
        if (t->nkids != 3 || !only_keys(g, t, no_keys)) return false;
        rtype ct[3] = {*ty, *ty, *ty};
        ct[0].dt = DT_PRED;
        return emit(g, t, OP_SELECT, ct, NULL, ty);
    }
    default:
        return is_elementwise(t->op) && t->nkids >= 1 && only_keys(g, t, no_keys) && gen_same(g, t, t->op, "", ty);
    }
}

bool ri_generate(const em_prog *p, uint32_t pat, const ri_limits *lim, interp_rng *rng, strbuf *out,
                 uint64_t *elements) {
    gen g = {.p = p, .lim = lim, .rng = rng, .out = out};
    g.v = xcalloc(MAX_VARS, sizeof *g.v);
    rtype root;
    memset(&root, 0, sizeof root);
    root.dt = rnd_dtype(&g);
    if (p->pats[pat].kind == EM_NODE && p->pats[pat].op == OP_COMPARE) root.dt = DT_PRED;  /* a comparison's result */
    uint32_t max_rank = lim->max_rank < MAX_RANK - 2 ? lim->max_rank : MAX_RANK - 2;
    root.rank = lim->exact_rank ? max_rank : (uint32_t)rnd(&g, 0, max_rank);
    for (uint32_t i = 0; i < root.rank; i++) root.d[i] = rnd_dim(&g);
    bool ok = gen_term(&g, pat, &root);
    for (uint32_t v = 0; v < MAX_VARS; v++) free(g.v[v].text);
    free(g.v);
    *elements = g.elements;
    return ok;
}
