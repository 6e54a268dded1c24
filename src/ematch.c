#include "ematch.h"

#include <stdlib.h>
#include <string.h>

#include "eattr.h"
#include "shape.h"

/* ---- program store ---- */

void em_prog_init(em_prog *p) { memset(p, 0, sizeof *p); }

void em_prog_free(em_prog *p) {
    free(p->pats);
    free(p->kids);
    free(p->attrs);
    free(p->words);
    for (uint32_t i = 0; i < p->nclasses; i++) {
        free(p->classes[i].name);
        for (uint32_t j = 0; j < p->classes[i].ntargets; j++) free(p->classes[i].targets[j]);
        free(p->classes[i].targets);
    }
    free(p->classes);
    em_prog_init(p);
}

uint32_t em_pat_new(em_prog *p, uint8_t kind, uint32_t off) {
    XGROW(p->pats, p->cappats, p->npats + 1);
    em_pat *t = &p->pats[p->npats];
    memset(t, 0, sizeof *t);
    t->kind = kind;
    t->off = off;
    return (uint32_t)p->npats++;
}

uint32_t em_words_add(em_prog *p, const int64_t *w, uint32_t n) {
    XGROW(p->words, p->capwords, p->nwords + n + 1);
    uint32_t at = (uint32_t)p->nwords;
    if (n) memcpy(p->words + at, w, n * sizeof *w);
    p->nwords += n;
    return at;
}

int em_opclass_find(const em_prog *p, const char *s, size_t n) {
    for (uint32_t i = 0; i < p->nclasses; i++)
        if (strlen(p->classes[i].name) == n && memcmp(p->classes[i].name, s, n) == 0) return (int)i;
    return -1;
}

int em_opclass_add(em_prog *p, const char *s, size_t n) {
    int c = em_opclass_find(p, s, n);
    if (c >= 0) return c;
    uint32_t cap = p->capclasses;
    size_t capz = cap;
    XGROW(p->classes, capz, p->nclasses + 1);
    p->capclasses = (uint32_t)capz;
    em_opclass *k = &p->classes[p->nclasses];
    memset(k, 0, sizeof *k);
    k->name = xstrndup(s, n);
    return (int)p->nclasses++;
}

bool em_opclass_has(const em_prog *p, int cls, const egraph *g, uint16_t op, uint32_t attr) {
    const em_opclass *k = &p->classes[cls];
    if (op < EM_MAX_OP && k->ops[op]) return true;
    if (op != OP_CUSTOM_CALL || !k->ntargets) return false;
    char buf[256];
    size_t len = ea_get_str(g, attr, A_CUSTOM_CALL_TARGET, buf, sizeof buf);
    for (uint32_t i = 0; i < k->ntargets; i++)
        if (strlen(k->targets[i]) == len && memcmp(k->targets[i], buf, len) == 0) return true;
    return false;
}

/* ---- substitutions ---- */

void em_subst_init(em_subst *s, uint32_t nvars) {
    memset(s, 0, sizeof *s);
    s->nvars = nvars;
    uint32_t m = nvars ? nvars : 1;
    s->cls = xmalloc(m * sizeof *s->cls);
    s->voff = xmalloc(m * sizeof *s->voff);
    s->vlen = xmalloc(m * sizeof *s->vlen);
    s->op = xmalloc(m * sizeof *s->op);
    s->oattr = xmalloc(m * sizeof *s->oattr);
    s->odt = xmalloc(m * sizeof *s->odt);
    em_subst_clear(s);
}

void em_subst_free(em_subst *s) {
    free(s->cls);
    free(s->voff);
    free(s->vlen);
    free(s->op);
    free(s->oattr);
    free(s->odt);
    free(s->words);
    memset(s, 0, sizeof *s);
}

void em_subst_clear(em_subst *s) {
    for (uint32_t i = 0; i < s->nvars; i++) {
        s->cls[i] = EID_NONE;
        s->vlen[i] = UINT32_MAX;
        s->voff[i] = 0;
        s->op[i] = 0;
        s->oattr[i] = 0;
        s->odt[i] = 0;
    }
    s->nwords = 0;
    s->root = EID_NONE;
}

void em_subst_bind_value(em_subst *s, uint32_t v, const int64_t *w, uint32_t n) {
    XGROW(s->words, s->capwords, s->nwords + n + 1);
    if (n) memcpy(s->words + s->nwords, w, n * sizeof *w);
    s->voff[v] = (uint32_t)s->nwords;
    s->vlen[v] = n;
    s->nwords += n;
}

/* ---- matching ---- */

typedef struct goal {
    uint32_t pat;
    eid cls;
} goal;

typedef struct mstate {
    egraph *g;
    const em_prog *p;
    em_subst *s;
    em_match_cb cb;
    void *ctx;
    goal *goals;
    size_t ng, capg;
    uint32_t *trail; /* value variables bound, in order */
    size_t nt, capt;
    bool stop;
} mstate;

static void solve(mstate *m);

static void push_goal(mstate *m, uint32_t pat, eid c) {
    XGROW(m->goals, m->capg, m->ng + 1);
    m->goals[m->ng].pat = pat;
    m->goals[m->ng].cls = c;
    m->ng++;
}

static void bind_value(mstate *m, uint32_t v, const int64_t *w, uint32_t n) {
    em_subst_bind_value(m->s, v, w, n);
    XGROW(m->trail, m->capt, m->nt + 1);
    m->trail[m->nt++] = v;
}

static void undo_values(mstate *m, size_t nt, size_t nwords) {
    while (m->nt > nt) m->s->vlen[m->trail[--m->nt]] = UINT32_MAX;
    m->s->nwords = nwords;
}

static bool value_eq(const em_subst *s, uint32_t v, const int64_t *w, uint32_t n) {
    return s->vlen[v] == n && (n == 0 || memcmp(s->words + s->voff[v], w, n * sizeof *w) == 0);
}

/* A value pattern against the words w[0..n). */
static bool vmatch(mstate *m, uint32_t vp, const int64_t *w, uint32_t n) {
    const em_pat *t = &m->p->pats[vp];
    switch (t->kind) {
    case EM_INT: return n == 1 && w[0] == t->ival;
    case EM_WORDS: return n == t->nwords && (n == 0 || memcmp(m->p->words + t->words, w, n * sizeof *w) == 0);
    case EM_VAR:
        if (m->s->vlen[t->var] != UINT32_MAX) return value_eq(m->s, t->var, w, n);
        bind_value(m, t->var, w, n);
        return true;
    case EM_LIST:
        if (n != t->nkids) return false;
        for (uint32_t i = 0; i < n; i++) {
            const em_pat *e = &m->p->pats[m->p->kids[t->kids + i]];
            if (e->kind == EM_INT) {
                if (w[i] != e->ival) return false;
            } else if (e->kind == EM_VAR) {
                if (m->s->vlen[e->var] != UINT32_MAX) {
                    if (!value_eq(m->s, e->var, w + i, 1)) return false;
                } else {
                    bind_value(m, e->var, w + i, 1);
                }
            } else {
                return false;
            }
        }
        return true;
    default: return false;
    }
}

static const int64_t zero_word = 0;

static bool default_words(int key, const int64_t **w, uint32_t *n) {
    attr_kind k = attr_key_kind(key);
    if (k == K_INT || k == K_BOOL || key == A_DIRECTION) {
        *w = &zero_word;
        *n = 1;
    } else {
        *w = NULL;
        *n = 0;
    }
    return true;
}

/* Every key of the node must be mentioned; unmentioned pattern keys match their
 * default. Binds value variables (undone by the caller). */
static bool attrs_match(mstate *m, const em_pat *t, uint32_t attr) {
    uint32_t n;
    const int64_t *w = eg_attr_words(m->g, attr, &n);
    const em_attr *pa = m->p->attrs + t->attrs;
    uint32_t i = 0, j = 0;
    while (j + 1 < n || i < t->nattrs) {
        int64_t nk = j + 1 < n ? w[j] : INT64_MAX;
        if (i < t->nattrs && pa[i].key < nk) {
            const int64_t *dw;
            uint32_t dn;
            default_words(pa[i].key, &dw, &dn);
            if (!vmatch(m, pa[i].val, dw, dn)) return false;
            i++;
        } else if (i < t->nattrs && pa[i].key == nk) {
            if (!vmatch(m, pa[i].val, w + j + 2, (uint32_t)w[j + 1])) return false;
            i++;
            j += 2 + (uint32_t)w[j + 1];
        } else {
            return false; /* the node has an attribute the pattern does not mention */
        }
    }
    return true;
}

static void try_node(mstate *m, uint32_t pat, eid node) {
    const em_pat *t = &m->p->pats[pat];
    uint16_t op = eg_node_op(m->g, node);
    uint32_t attr = eg_node_attr(m->g, node);
    if (t->kind == EM_NODE) {
        if (op != t->op) return;
    } else if (!em_opclass_has(m->p, t->op, m->g, op, attr)) {
        return;
    }
    uint32_t n;
    const eid *ch = eg_node_children(m->g, node, &n);
    if (n != t->nkids) return;
    size_t nt = m->nt, nw = m->s->nwords;
    bool bound_op = false;
    if (t->kind == EM_NODE) {
        if (!attrs_match(m, t, attr)) goto out;
    } else {
        em_subst *s = m->s;
        if (s->op[t->var]) {
            if (s->op[t->var] != op || s->oattr[t->var] != attr ||
                s->odt[t->var] != eg_type_dtype(m->g, eg_class_type(m->g, node)))
                goto out;
        } else {
            s->op[t->var] = op;
            s->oattr[t->var] = attr;
            s->odt[t->var] = (uint8_t)eg_type_dtype(m->g, eg_class_type(m->g, node));
            bound_op = true;
        }
    }
    size_t base = m->ng;
    /* children are read again after the callback: the e-graph does not change
     * while matching, so ch stays valid */
    for (uint32_t i = n; i-- > 0;) push_goal(m, m->p->kids[t->kids + i], ch[i]);
    solve(m);
    m->ng = base;
    if (bound_op) m->s->op[t->var] = 0;
out:
    undo_values(m, nt, nw);
}

static void solve(mstate *m) {
    if (m->stop) return;
    if (m->ng == 0) {
        if (!m->cb(m->ctx, m->s)) m->stop = true;
        return;
    }
    goal gl = m->goals[--m->ng];
    size_t base = m->ng;
    const em_pat *t = &m->p->pats[gl.pat];
    eid c = eg_find(m->g, gl.cls);
    switch (t->kind) {
    case EM_VAR:
    case EM_AS: {
        eid b = m->s->cls[t->var];
        if (b != EID_NONE && eg_find(m->g, b) != c) break;
        if (b == EID_NONE) m->s->cls[t->var] = c;
        if (t->kind == EM_AS) push_goal(m, m->p->kids[t->kids], c);
        solve(m);
        m->ng = base;
        if (b == EID_NONE) m->s->cls[t->var] = EID_NONE;
        break;
    }
    case EM_NODE:
    case EM_OPCLASS:
        for (eid n = eg_class_first(m->g, c); n != EID_NONE && !m->stop; n = eg_class_next(m->g, n)) {
            try_node(m, gl.pat, n);
            m->ng = base;
        }
        break;
    default: break;
    }
    m->ng = base;
    XGROW(m->goals, m->capg, m->ng + 1);
    m->goals[m->ng++] = gl;
}

static void mstate_init(mstate *m, egraph *g, const em_prog *p, em_subst *s, em_match_cb cb, void *ctx) {
    memset(m, 0, sizeof *m);
    m->g = g;
    m->p = p;
    m->s = s;
    m->cb = cb;
    m->ctx = ctx;
}

static void mstate_free(mstate *m) {
    free(m->goals);
    free(m->trail);
}

bool em_match_class(egraph *g, const em_prog *p, uint32_t pat, eid c, em_subst *s, em_match_cb cb, void *ctx) {
    mstate m;
    mstate_init(&m, g, p, s, cb, ctx);
    push_goal(&m, pat, c);
    solve(&m);
    bool stop = m.stop;
    mstate_free(&m);
    return !stop;
}

bool em_match_node(egraph *g, const em_prog *p, uint32_t pat, eid node, em_subst *s, em_match_cb cb, void *ctx) {
    mstate m;
    mstate_init(&m, g, p, s, cb, ctx);
    eid root = eg_find(g, node);
    s->root = root;
    uint32_t bound[16];
    int nb = 0;
    bool ok = true;
    while (p->pats[pat].kind == EM_AS) {
        const em_pat *t = &p->pats[pat];
        eid b = s->cls[t->var];
        if (b != EID_NONE && eg_find(g, b) != root) {
            ok = false;
            break;
        }
        if (b == EID_NONE && nb < 16) {
            s->cls[t->var] = root;
            bound[nb++] = t->var;
        }
        pat = p->kids[t->kids];
    }
    uint8_t k = p->pats[pat].kind;
    if (ok && (k == EM_NODE || k == EM_OPCLASS)) try_node(&m, pat, node);
    for (int i = 0; i < nb; i++) s->cls[bound[i]] = EID_NONE;
    bool stop = m.stop;
    mstate_free(&m);
    return !stop;
}

int em_pat_root_op(const em_prog *p, uint32_t pat) {
    const em_pat *t = &p->pats[pat];
    while (t->kind == EM_AS) t = &p->pats[p->kids[t->kids]];
    return t->kind == EM_NODE ? t->op : -1;
}

void em_index_build(em_index *ix, const egraph *g) {
    uint32_t n = eg_node_count(g);
    memset(ix->start, 0, sizeof ix->start);
    for (eid i = 0; i < n; i++) {
        if (!eg_node_live(g, i)) continue;
        uint16_t op = eg_node_op(g, i);
        if (op < EM_MAX_OP) ix->start[op + 1]++;
    }
    for (int o = 0; o < EM_MAX_OP; o++) ix->start[o + 1] += ix->start[o];
    XGROW(ix->nodes, ix->cap, (size_t)ix->start[EM_MAX_OP] + 1);
    uint32_t fill[EM_MAX_OP];
    memcpy(fill, ix->start, sizeof fill);
    for (eid i = 0; i < n; i++) {
        if (!eg_node_live(g, i)) continue;
        uint16_t op = eg_node_op(g, i);
        if (op < EM_MAX_OP) ix->nodes[fill[op]++] = i;
    }
}

void em_index_free(em_index *ix) {
    free(ix->nodes);
    ix->nodes = NULL;
    ix->cap = 0;
}

/* ---- expressions ---- */

/* Keep in step with rules/README.md "Primitives". */
enum {
    P_ADD, P_SUB, P_MUL, P_DIV, P_MOD, P_MIN, P_MAX, P_EQ, P_NE, P_LT, P_LE, P_GT, P_GE, P_AND, P_OR, P_NOT,
    P_LIST, P_LEN, P_NTH, P_RANGE, P_ZEROS, P_SET_NTH, P_TAKE, P_DROP, P_SUM, P_PRODUCT, P_MEMBER, P_INDEX_OF,
    P_COMPOSE, P_INVERSE, P_IS_IDENTITY, P_IS_PERM, P_INCREASING, P_ARGSORT, P_COMPLEMENT, P_SQUEEZE_PERM,
    P_FULL_SLICE, P_SLICE_BOX, P_SLICE_SHIFT, P_SLICE_STARTS, P_SLICE_LIMITS, P_SLICE_STRIDES,
    P_RANK, P_DIMS, P_DIM, P_DTYPE, P_ELEMENTS, P_EXACT_CONVERT, P_IS_FLOAT, P_TYPE, P_COUNT
};

static const struct prim {
    const char *name;
    int min, max;
    bool cls; /* first argument is a class variable */
} prims[P_COUNT] = {
    [P_ADD] = {"+", 1, -1, 0}, [P_SUB] = {"-", 1, -1, 0}, [P_MUL] = {"*", 1, -1, 0},
    [P_DIV] = {"/", 2, 2, 0}, [P_MOD] = {"mod", 2, 2, 0}, [P_MIN] = {"min", 1, -1, 0},
    [P_MAX] = {"max", 1, -1, 0}, [P_EQ] = {"=", 2, 2, 0}, [P_NE] = {"!=", 2, 2, 0},
    [P_LT] = {"<", 2, 2, 0}, [P_LE] = {"<=", 2, 2, 0}, [P_GT] = {">", 2, 2, 0}, [P_GE] = {">=", 2, 2, 0},
    [P_AND] = {"and", 1, -1, 0}, [P_OR] = {"or", 1, -1, 0}, [P_NOT] = {"not", 1, 1, 0},
    [P_LIST] = {"list", 0, -1, 0}, [P_LEN] = {"len", 1, 1, 0}, [P_NTH] = {"nth", 2, 2, 0},
    [P_RANGE] = {"range", 1, 1, 0}, [P_ZEROS] = {"zeros", 1, 1, 0}, [P_SET_NTH] = {"set-nth", 3, 3, 0},
    [P_TAKE] = {"take", 2, 2, 0}, [P_DROP] = {"drop", 2, 2, 0}, [P_SUM] = {"sum", 1, 1, 0},
    [P_PRODUCT] = {"product", 1, 1, 0}, [P_MEMBER] = {"member", 2, 2, 0},
    [P_INDEX_OF] = {"index-of", 2, 2, 0},
    [P_COMPOSE] = {"compose", 2, 2, 0}, [P_INVERSE] = {"inverse", 1, 1, 0},
    [P_IS_IDENTITY] = {"is-identity", 1, 1, 0}, [P_IS_PERM] = {"is-perm", 1, 1, 0},
    [P_INCREASING] = {"increasing", 1, 1, 0}, [P_ARGSORT] = {"argsort", 1, 1, 0},
    [P_COMPLEMENT] = {"complement", 2, 2, 0},
    [P_SQUEEZE_PERM] = {"squeeze-perm", 2, 2, 0}, [P_FULL_SLICE] = {"full-slice", 1, 1, 0},
    [P_SLICE_BOX] = {"slice-box", 2, 2, 0}, [P_SLICE_SHIFT] = {"slice-shift", 3, 3, 0},
    [P_SLICE_STARTS] = {"slice-starts", 1, 1, 0}, [P_SLICE_LIMITS] = {"slice-limits", 1, 1, 0},
    [P_SLICE_STRIDES] = {"slice-strides", 1, 1, 0},
    [P_RANK] = {"rank", 1, 1, 1}, [P_DIMS] = {"dims", 1, 1, 1}, [P_DIM] = {"dim", 2, 2, 1},
    [P_DTYPE] = {"dtype", 1, 1, 1}, [P_ELEMENTS] = {"elements", 1, 1, 1},
    [P_EXACT_CONVERT] = {"exact-convert", 2, 2, 0}, [P_IS_FLOAT] = {"is-float", 1, 1, 0},
    [P_TYPE] = {"type", 2, 2, 0},
};

int em_prim_from_name(const char *s, size_t n) {
    for (int i = 0; i < P_COUNT; i++)
        if (strlen(prims[i].name) == n && memcmp(prims[i].name, s, n) == 0) return i;
    return -1;
}
const char *em_prim_name(int prim) { return prim >= 0 && prim < P_COUNT ? prims[prim].name : "?"; }
void em_prim_arity(int prim, int *min, int *max) {
    *min = prims[prim].min;
    *max = prims[prim].max;
}
bool em_prim_takes_class(int prim) { return prim >= 0 && prim < P_COUNT && prims[prim].cls; }

bool em_symbol_value(const char *s, size_t n, int64_t *v) {
    int d = ea_direction_from_name(s, n);
    if (d >= 0) {
        *v = d;
        return true;
    }
    if (n == 4 && memcmp(s, "true", 4) == 0) return *v = 1, true;
    if (n == 5 && memcmp(s, "false", 5) == 0) return *v = 0, true;
    int dt = dtype_from_name(s, n);
    if (dt != DT_INVALID) {
        *v = dt;
        return true;
    }
    return false;
}

/* Every A value is exactly representable in B (so A→B→A is the identity and
 * A→B→C equals A→C). Integers are exact in a float when they fit its significand. */
static bool exact_convert(int a, int b) {
    if (a == b) return true;
    int sig_b = b == DT_F64 ? 53 : b == DT_F32 ? 24 : b == DT_F16 ? 11 : b == DT_BF16 ? 8 : 0;
    if (a == DT_PRED) return b != DT_INVALID && dtype_bits(b) > 0;
    if (dtype_is_float(a)) {
        if (!dtype_is_float(b)) return false;
        /* f16 ⊂ f32 ⊂ f64, bf16 ⊂ f32 ⊂ f64 */
        if (a == DT_F16 || a == DT_BF16) return b == DT_F32 || b == DT_F64;
        if (a == DT_F32) return b == DT_F64;
        return false;
    }
    if (!dtype_is_int(a)) return false;
    int ba = dtype_bits(a);
    bool ua = dtype_is_unsigned(a);
    if (dtype_is_int(b)) {
        int bb = dtype_bits(b);
        bool ub = dtype_is_unsigned(b);
        if (ua == ub) return bb >= ba;
        return ua && !ub && bb > ba; /* unsigned into a wider signed */
    }
    if (sig_b) return (ua ? ba : ba - 1) <= sig_b;
    return false;
}

typedef struct val {
    size_t off;
    uint32_t len;
} val;

#define W(v, i) (out->w[(v).off + (i)])

static bool scalar(const em_vec *out, val v, int64_t *x) {
    if (v.len != 1) return false;
    *x = out->w[v.off];
    return true;
}

static size_t vec_push(em_vec *out, int64_t x) {
    XGROW(out->w, out->cap, out->n + 1);
    out->w[out->n] = x;
    return out->n++;
}

static bool class_type_of(egraph *g, const em_prog *p, uint32_t e, const em_subst *s, uint32_t *type) {
    const em_pat *t = &p->pats[e];
    if (t->kind != EM_VAR || !s || t->var >= s->nvars || s->cls[t->var] == EID_NONE) return false;
    *type = eg_class_type(g, s->cls[t->var]);
    return true;
}

static bool eval_call(egraph *g, const em_prog *p, const em_pat *t, const em_subst *s, em_vec *out, size_t *roff,
                      uint32_t *rlen) {
    int prim = t->op;
    uint32_t na = t->nkids;
    val a[16] = {{0, 0}};
    if (na > 16) return false;
    if (prims[prim].cls) {
        uint32_t type;
        if (!class_type_of(g, p, p->kids[t->kids], s, &type)) return false;
        uint32_t rank;
        const int64_t *d = eg_type_dims(g, type, &rank);
        size_t start = out->n;
        switch (prim) {
        case P_RANK: vec_push(out, rank); break;
        case P_DTYPE: vec_push(out, eg_type_dtype(g, type)); break;
        case P_DIMS:
            for (uint32_t i = 0; i < rank; i++) vec_push(out, d[i]);
            break;
        case P_ELEMENTS: {
            int64_t e = 1;
            for (uint32_t i = 0; i < rank; i++)
                if (!mul_ok(e, d[i], &e)) return false;
            vec_push(out, e);
            break;
        }
        case P_DIM: {
            size_t o;
            uint32_t l;
            if (!em_eval(g, p, p->kids[t->kids + 1], s, out, &o, &l) || l != 1) return false;
            int64_t i = out->w[o];
            if (i < 0 || i >= rank) return false;
            out->n = start;
            vec_push(out, d[i]);
            break;
        }
        }
        *roff = start;
        *rlen = (uint32_t)(out->n - start);
        return true;
    }
    for (uint32_t i = 0; i < na; i++) {
        size_t o;
        uint32_t l;
        if (!em_eval(g, p, p->kids[t->kids + i], s, out, &o, &l)) return false;
        a[i].off = o;
        a[i].len = l;
    }
    size_t start = out->n;
    int64_t x, y, z;
    switch (prim) {
    case P_ADD: case P_SUB: case P_MUL: case P_MIN: case P_MAX: {
        if (!scalar(out, a[0], &x)) return false;
        if (prim == P_SUB && na == 1) x = -x;
        for (uint32_t i = 1; i < na; i++) {
            if (!scalar(out, a[i], &y)) return false;
            bool ok = true;
            if (prim == P_ADD) ok = !__builtin_add_overflow(x, y, &x);
            else if (prim == P_SUB) ok = !__builtin_sub_overflow(x, y, &x);
            else if (prim == P_MUL) ok = mul_ok(x, y, &x);
            else if (prim == P_MIN) x = y < x ? y : x;
            else x = y > x ? y : x;
            if (!ok) return false;
        }
        vec_push(out, x);
        break;
    }
    case P_DIV: case P_MOD:
        if (!scalar(out, a[0], &x) || !scalar(out, a[1], &y) || y == 0) return false;
        z = x / y;
        if ((x % y != 0) && ((x < 0) != (y < 0))) z--; /* floor */
        vec_push(out, prim == P_DIV ? z : x - z * y);
        break;
    case P_EQ: case P_NE: {
        bool eq = a[0].len == a[1].len;
        for (uint32_t i = 0; eq && i < a[0].len; i++) eq = W(a[0], i) == W(a[1], i);
        vec_push(out, prim == P_EQ ? eq : !eq);
        break;
    }
    case P_LT: case P_LE: case P_GT: case P_GE:
        if (!scalar(out, a[0], &x) || !scalar(out, a[1], &y)) return false;
        vec_push(out, prim == P_LT ? x < y : prim == P_LE ? x <= y : prim == P_GT ? x > y : x >= y);
        break;
    case P_AND: case P_OR: {
        bool r = prim == P_AND;
        for (uint32_t i = 0; i < na; i++) {
            bool b = a[i].len && W(a[i], 0) != 0;
            r = prim == P_AND ? r && b : r || b;
        }
        vec_push(out, r);
        break;
    }
    case P_NOT: vec_push(out, !(a[0].len && W(a[0], 0) != 0)); break;
    case P_LIST:
        for (uint32_t i = 0; i < na; i++)
            for (uint32_t j = 0; j < a[i].len; j++) vec_push(out, W(a[i], j));
        break;
    case P_LEN: vec_push(out, a[0].len); break;
    case P_NTH:
        if (!scalar(out, a[1], &x) || x < 0 || x >= a[0].len) return false;
        vec_push(out, W(a[0], x));
        break;
    case P_RANGE: case P_ZEROS:
        if (!scalar(out, a[0], &x) || x < 0 || x > 4096) return false;
        for (int64_t i = 0; i < x; i++) vec_push(out, prim == P_RANGE ? i : 0);
        break;
    case P_SET_NTH:
        if (!scalar(out, a[1], &x) || !scalar(out, a[2], &y) || x < 0 || x >= a[0].len) return false;
        for (uint32_t i = 0; i < a[0].len; i++) vec_push(out, i == x ? y : W(a[0], i));
        break;
    case P_TAKE: case P_DROP:
        if (!scalar(out, a[1], &x) || x < 0 || x > a[0].len) return false;
        for (uint32_t i = prim == P_TAKE ? 0 : (uint32_t)x; i < (prim == P_TAKE ? (uint32_t)x : a[0].len); i++)
            vec_push(out, W(a[0], i));
        break;
    case P_SUM: case P_PRODUCT: {
        x = prim == P_SUM ? 0 : 1;
        for (uint32_t i = 0; i < a[0].len; i++)
            if (prim == P_SUM ? __builtin_add_overflow(x, W(a[0], i), &x) : !mul_ok(x, W(a[0], i), &x)) return false;
        vec_push(out, x);
        break;
    }
    case P_MEMBER: {
        if (!scalar(out, a[1], &x)) return false;
        bool in = false;
        for (uint32_t i = 0; i < a[0].len; i++) in |= W(a[0], i) == x;
        vec_push(out, in);
        break;
    }
    case P_INDEX_OF: {
        if (!scalar(out, a[1], &x)) return false;
        uint32_t i = 0;
        while (i < a[0].len && W(a[0], i) != x) i++;
        if (i == a[0].len) return false;
        vec_push(out, i);
        break;
    }
    case P_COMPOSE: /* r[i] = p[q[i]] */
        for (uint32_t i = 0; i < a[1].len; i++) {
            x = W(a[1], i);
            if (x < 0 || x >= a[0].len) return false;
            vec_push(out, W(a[0], x));
        }
        break;
    case P_IS_PERM: case P_INVERSE: case P_IS_IDENTITY: {
        uint32_t n = a[0].len;
        bool perm = n <= 4096, ident = true;
        uint8_t seen[4096];
        if (perm) memset(seen, 0, n);
        for (uint32_t i = 0; perm && i < n; i++) {
            x = W(a[0], i);
            if (x < 0 || x >= n || seen[x]) perm = false;
            else seen[x] = 1;
            ident &= x == i;
        }
        if (prim == P_IS_PERM) vec_push(out, perm);
        else if (prim == P_IS_IDENTITY) vec_push(out, perm && ident);
        else {
            if (!perm) return false;
            for (uint32_t i = 0; i < n; i++) vec_push(out, 0);
            for (uint32_t i = 0; i < n; i++) out->w[start + W(a[0], i)] = i;
        }
        break;
    }
    case P_INCREASING: {
        bool inc = true;
        for (uint32_t i = 1; i < a[0].len; i++) inc &= W(a[0], i - 1) < W(a[0], i);
        vec_push(out, inc);
        break;
    }
    case P_ARGSORT: { /* the positions in ascending order of their values (stable) */
        uint32_t n = a[0].len;
        if (n > 4096) return false;
        for (uint32_t i = 0; i < n; i++) vec_push(out, i);
        for (uint32_t i = 1; i < n; i++) /* insertion sort: dimension lists are short */
            for (uint32_t j = i; j > 0 && W(a[0], out->w[start + j]) < W(a[0], out->w[start + j - 1]); j--) {
                int64_t sw = out->w[start + j];
                out->w[start + j] = out->w[start + j - 1];
                out->w[start + j - 1] = sw;
            }
        break;
    }
    case P_COMPLEMENT: /* sorted [0, n) minus the list */
        if (!scalar(out, a[0], &x) || x < 0 || x > 4096) return false;
        for (int64_t i = 0; i < x; i++) {
            bool in = false;
            for (uint32_t j = 0; j < a[1].len; j++) in |= W(a[1], j) == i;
            if (!in) vec_push(out, i);
        }
        break;
    case P_SQUEEZE_PERM: { /* the permutation restricted to dims of size != 1, renumbered */
        uint32_t n = a[0].len;
        if (a[1].len != n) return false;
        for (uint32_t i = 0; i < n; i++) {
            x = W(a[0], i);
            if (x < 0 || x >= n) return false;
            if (W(a[1], x) == 1) continue;
            int64_t rank = 0;
            for (int64_t j = 0; j < x; j++) rank += W(a[1], j) != 1;
            vec_push(out, rank);
        }
        break;
    }
    case P_FULL_SLICE:
        for (uint32_t i = 0; i < a[0].len; i++) {
            vec_push(out, 0);
            vec_push(out, W(a[0], i));
            vec_push(out, 1);
        }
        break;
    case P_SLICE_BOX: /* starts, sizes → [s, s + size, 1] per dim */
        if (a[0].len != a[1].len) return false;
        for (uint32_t i = 0; i < a[0].len; i++) {
            vec_push(out, W(a[0], i));
            vec_push(out, W(a[0], i) + W(a[1], i));
            vec_push(out, 1);
        }
        break;
    case P_SLICE_SHIFT: /* subtract k from start and limit of dim d */
        if (!scalar(out, a[1], &x) || !scalar(out, a[2], &y) || a[0].len % 3 || x < 0 || 3 * x >= a[0].len)
            return false;
        for (uint32_t i = 0; i < a[0].len; i++) vec_push(out, W(a[0], i) - ((i / 3 == x && i % 3 < 2) ? y : 0));
        break;
    case P_SLICE_STARTS: case P_SLICE_LIMITS: case P_SLICE_STRIDES:
        if (a[0].len % 3) return false;
        for (uint32_t i = (uint32_t)(prim - P_SLICE_STARTS); i < a[0].len; i += 3) vec_push(out, W(a[0], i));
        break;
    case P_EXACT_CONVERT:
        if (!scalar(out, a[0], &x) || !scalar(out, a[1], &y)) return false;
        vec_push(out, exact_convert((int)x, (int)y));
        break;
    case P_IS_FLOAT:
        if (!scalar(out, a[0], &x)) return false;
        vec_push(out, dtype_is_float((int)x));
        break;
    case P_TYPE: /* dtype, dims → the words of a type: dtype, rank, dims */
        if (!scalar(out, a[0], &x)) return false;
        vec_push(out, x);
        vec_push(out, a[1].len);
        for (uint32_t i = 0; i < a[1].len; i++) vec_push(out, W(a[1], i));
        break;
    default: return false;
    }
    /* results are appended after the arguments; move them down over the args */
    size_t len = out->n - start, base = na ? a[0].off : start;
    if (na && base < start) {
        memmove(out->w + base, out->w + start, len * sizeof *out->w);
        out->n = base + len;
        start = base;
    }
    *roff = start;
    *rlen = (uint32_t)len;
    return true;
}

bool em_eval(egraph *g, const em_prog *p, uint32_t e, const em_subst *s, em_vec *out, size_t *off, uint32_t *len) {
    const em_pat *t = &p->pats[e];
    size_t start = out->n;
    switch (t->kind) {
    case EM_INT: vec_push(out, t->ival); break;
    case EM_WORDS: case EM_TYPE:
        for (uint32_t i = 0; i < t->nwords; i++) vec_push(out, p->words[t->words + i]);
        break;
    case EM_VAR:
        if (!s || t->var >= s->nvars || s->vlen[t->var] == UINT32_MAX) return false;
        for (uint32_t i = 0; i < s->vlen[t->var]; i++) vec_push(out, s->words[s->voff[t->var] + i]);
        break;
    case EM_LIST:
        for (uint32_t i = 0; i < t->nkids; i++) {
            size_t o;
            uint32_t l;
            if (!em_eval(g, p, p->kids[t->kids + i], s, out, &o, &l)) return false;
        }
        break;
    case EM_CALL: return eval_call(g, p, t, s, out, off, len);
    default: return false;
    }
    *off = start;
    *len = (uint32_t)(out->n - start);
    return true;
}

bool em_eval_true(egraph *g, const em_prog *p, uint32_t e, const em_subst *s, em_vec *scratch) {
    size_t o;
    uint32_t l;
    scratch->n = 0;
    return em_eval(g, p, e, s, scratch, &o, &l) && l > 0 && scratch->w[o] != 0;
}

/* ---- shapes ---- */

static bool is_unary_elementwise(int op) {
    switch (op) {
    case OP_ABS: case OP_NEGATE: case OP_EXP: case OP_EXPM1: case OP_LOG: case OP_LOG1P: case OP_SQRT:
    case OP_RSQRT: case OP_CBRT: case OP_TANH: case OP_LOGISTIC: case OP_SINE: case OP_COSINE: case OP_TAN:
    case OP_FLOOR: case OP_CEIL: case OP_SIGN: case OP_NOT: case OP_ERF: case OP_ROUND_AFZ:
    case OP_ROUND_EVEN: case OP_COPY: case OP_POPCNT: case OP_CLZ: case OP_REAL: case OP_IMAG:
        return true;
    default: return false;
    }
}

static bool is_binary_elementwise(int op) {
    switch (op) {
    case OP_ADD: case OP_SUBTRACT: case OP_MULTIPLY: case OP_DIVIDE: case OP_MAXIMUM: case OP_MINIMUM:
    case OP_POWER: case OP_REMAINDER: case OP_AND: case OP_OR: case OP_XOR: case OP_ATAN2:
    case OP_SHIFT_LEFT: case OP_SHIFT_RIGHT_ARITHMETIC: case OP_SHIFT_RIGHT_LOGICAL:
        return true;
    default: return false;
    }
}

static void type_str(strbuf *b, const egraph *g, uint32_t t) {
    uint32_t r;
    const int64_t *d = eg_type_dims(g, t, &r);
    sb_printf(b, "%s[", t ? dtype_name(eg_type_dtype(g, t)) : "untyped");
    for (uint32_t i = 0; i < r; i++) sb_printf(b, "%s%lld", i ? "," : "", (long long)d[i]);
    sb_putc(b, ']');
}

static uint32_t fail(strbuf *why, const char *op, const char *msg) {
    if (why) sb_printf(why, "%s: %s", op, msg);
    return 0;
}

static bool dims_eq(const int64_t *a, uint32_t ra, const int64_t *b, uint32_t rb) {
    return ra == rb && (ra == 0 || memcmp(a, b, ra * sizeof *a) == 0);
}

/* The result of the type check: declared when given (after checking that it
 * equals the inferred type), else the inferred type. */
static uint32_t settle(egraph *g, const char *name, uint32_t inferred, uint32_t declared, strbuf *why) {
    if (!declared || declared == inferred) return inferred;
    if (why) {
        sb_printf(why, "%s: declared type ", name);
        type_str(why, g, declared);
        sb_puts(why, " but the operands give ");
        type_str(why, g, inferred);
    }
    return 0;
}

uint32_t em_infer_type(egraph *g, uint16_t op, uint32_t attr, const uint32_t *ct, uint32_t n, uint32_t declared,
                       strbuf *why) {
    const char *name = op < OP_COUNT ? hlo_op_name(op) : op == EG_OP_PARAM ? "param" : "op";
    for (uint32_t i = 0; i < n; i++)
        if (!ct[i]) return fail(why, name, "an operand is untyped");
    uint32_t r0 = 0, r1 = 0;
    const int64_t *d0 = n ? eg_type_dims(g, ct[0], &r0) : NULL;
    const int64_t *d1 = n > 1 ? eg_type_dims(g, ct[1], &r1) : NULL;
    int dt0 = n ? eg_type_dtype(g, ct[0]) : 0;
    uint32_t cnt;
    const int64_t *v;
    int64_t dims[64];
    if (is_unary_elementwise(op)) {
        if (n != 1) return fail(why, name, "takes one operand");
        return settle(g, name, ct[0], declared, why);
    }
    if (is_binary_elementwise(op)) {
        if (n != 2) return fail(why, name, "takes two operands");
        if (ct[0] != ct[1]) return fail(why, name, "operand types differ");
        return settle(g, name, ct[0], declared, why);
    }
    switch (op) {
    case OP_COMPARE:
        if (n != 2 || ct[0] != ct[1]) return fail(why, name, "needs two operands of one type");
        return settle(g, name, eg_type(g, DT_PRED, d0, r0), declared, why);
    case OP_SELECT:
        if (n != 3 || ct[1] != ct[2] || eg_type_dtype(g, ct[0]) != DT_PRED ||
            (r0 && !dims_eq(d0, r0, d1, r1)))
            return fail(why, name, "needs pred[dims] (or pred[]) and two operands of one type");
        return settle(g, name, ct[1], declared, why);
    case OP_CONVERT: case OP_BITCAST_CONVERT: case OP_REDUCE_PRECISION: {
        if (n != 1) return fail(why, name, "takes one operand");
        if (!declared) return fail(why, name, "the target type must be given (:type)");
        uint32_t rd;
        const int64_t *dd = eg_type_dims(g, declared, &rd);
        if (op != OP_BITCAST_CONVERT && !dims_eq(dd, rd, d0, r0)) return fail(why, name, "changes the dimensions");
        if (op == OP_REDUCE_PRECISION && declared != ct[0]) return fail(why, name, "changes the type");
        return declared;
    }
    case OP_TRANSPOSE: {
        if (n != 1) return fail(why, name, "takes one operand");
        v = ea_get(g, attr, A_DIMENSIONS, &cnt);
        if (cnt != r0) return fail(why, name, "permutation length differs from the rank");
        uint8_t seen[64] = {0};
        for (uint32_t i = 0; i < cnt; i++) {
            if (v[i] < 0 || v[i] >= r0 || r0 > 64 || seen[v[i]]) return fail(why, name, "dimensions is not a permutation");
            seen[v[i]] = 1;
            dims[i] = d0[v[i]];
        }
        return settle(g, name, eg_type(g, dt0, dims, r0), declared, why);
    }
    case OP_REVERSE: {
        if (n != 1) return fail(why, name, "takes one operand");
        v = ea_get(g, attr, A_DIMENSIONS, &cnt);
        uint64_t seen = 0;
        for (uint32_t i = 0; i < cnt; i++) {
            if (v[i] < 0 || v[i] >= r0 || r0 > 64 || (seen >> v[i] & 1)) return fail(why, name, "dimensions are not distinct dims");
            seen |= 1ull << v[i];
        }
        return settle(g, name, ct[0], declared, why);
    }
    case OP_RESHAPE: {
        if (n != 1) return fail(why, name, "takes one operand");
        if (!declared) return fail(why, name, "the result type must be given (:type)");
        uint32_t rd;
        const int64_t *dd = eg_type_dims(g, declared, &rd);
        int64_t e0 = 1, e1 = 1;
        for (uint32_t i = 0; i < r0; i++) e0 *= d0[i];
        for (uint32_t i = 0; i < rd; i++) e1 *= dd[i];
        if (e0 != e1 || eg_type_dtype(g, declared) != dt0) return fail(why, name, "element count or dtype differs");
        return declared;
    }
    case OP_BROADCAST: {
        if (n != 1) return fail(why, name, "takes one operand");
        if (!declared) return fail(why, name, "the result type must be given (:type)");
        uint32_t rd;
        const int64_t *dd = eg_type_dims(g, declared, &rd);
        v = ea_get(g, attr, A_DIMENSIONS, &cnt);
        if (cnt != r0 || eg_type_dtype(g, declared) != dt0) return fail(why, name, "dimensions must map every operand dim");
        for (uint32_t i = 0; i < cnt; i++)
            if (v[i] < 0 || v[i] >= rd || dd[v[i]] != d0[i] || (i && v[i] <= v[i - 1]))
                return fail(why, name, "dimensions do not match the result shape");
        return declared;
    }
    case OP_DOT: {
        if (n != 2) return fail(why, name, "takes two operands");
        uint32_t nlb, nrb, nlc, nrc;
        const int64_t *lb = ea_get(g, attr, A_LHS_BATCH_DIMS, &nlb), *rb = ea_get(g, attr, A_RHS_BATCH_DIMS, &nrb);
        const int64_t *lc = ea_get(g, attr, A_LHS_CONTRACTING_DIMS, &nlc);
        const int64_t *rc = ea_get(g, attr, A_RHS_CONTRACTING_DIMS, &nrc);
        if (nlb != nrb || nlc != nrc) return fail(why, name, "batch or contracting lists differ in length");
        uint8_t usedl[64] = {0}, usedr[64] = {0};
        if (r0 > 64 || r1 > 64) return fail(why, name, "rank too large");
        uint32_t k = 0;
        for (uint32_t i = 0; i < nlb; i++) {
            if (lb[i] < 0 || lb[i] >= r0 || rb[i] < 0 || rb[i] >= r1 || d0[lb[i]] != d1[rb[i]] || usedl[lb[i]] ||
                usedr[rb[i]])
                return fail(why, name, "batch dimensions do not match");
            usedl[lb[i]] = usedr[rb[i]] = 1;
            dims[k++] = d0[lb[i]];
        }
        for (uint32_t i = 0; i < nlc; i++) {
            if (lc[i] < 0 || lc[i] >= r0 || rc[i] < 0 || rc[i] >= r1 || d0[lc[i]] != d1[rc[i]] || usedl[lc[i]] ||
                usedr[rc[i]])
                return fail(why, name, "contracting dimensions do not match");
            usedl[lc[i]] = usedr[rc[i]] = 1;
        }
        for (uint32_t i = 0; i < r0; i++)
            if (!usedl[i]) dims[k++] = d0[i];
        for (uint32_t i = 0; i < r1; i++)
            if (!usedr[i]) dims[k++] = d1[i];
        int dt = declared ? eg_type_dtype(g, declared) : dt0;
        return settle(g, name, eg_type(g, dt, dims, k), declared, why);
    }
    case OP_CONCATENATE: {
        if (n < 1) return fail(why, name, "needs operands");
        v = ea_get(g, attr, A_DIMENSIONS, &cnt);
        int64_t d = cnt ? v[0] : 0;
        if (cnt > 1 || d < 0 || d >= r0 || r0 > 64) return fail(why, name, "bad concatenate dimension");
        memcpy(dims, d0, r0 * sizeof *dims);
        for (uint32_t i = 1; i < n; i++) {
            uint32_t ri;
            const int64_t *di = eg_type_dims(g, ct[i], &ri);
            if (ri != r0 || eg_type_dtype(g, ct[i]) != dt0) return fail(why, name, "operands differ in rank or dtype");
            for (uint32_t j = 0; j < r0; j++)
                if (j != d && di[j] != d0[j]) return fail(why, name, "operands differ outside the concatenated dimension");
            dims[d] += di[d];
        }
        return settle(g, name, eg_type(g, dt0, dims, r0), declared, why);
    }
    case OP_SLICE: {
        if (n != 1) return fail(why, name, "takes one operand");
        v = ea_get(g, attr, A_SLICE, &cnt);
        if (cnt != 3 * r0 || r0 > 64) return fail(why, name, "slice needs start:limit:stride per dimension");
        for (uint32_t i = 0; i < r0; i++) {
            int64_t s = v[3 * i], l = v[3 * i + 1], st = v[3 * i + 2];
            if (s < 0 || l < s || l > d0[i] || st < 1) return fail(why, name, "slice out of range");
            dims[i] = (l - s + st - 1) / st;
        }
        return settle(g, name, eg_type(g, dt0, dims, r0), declared, why);
    }
    default:
        if (!declared) return fail(why, name, "cannot infer the result type (give :type)");
        return declared;
    }
}

/* ---- building ---- */

static uint32_t type_from_words(egraph *g, const int64_t *w, uint32_t n) {
    if (n < 2 || w[1] < 0 || (uint64_t)w[1] + 2 != n || w[0] <= 0 || w[0] >= DT_COUNT) return 0;
    return eg_type(g, (int)w[0], w + 2, (uint32_t)w[1]);
}

static uint32_t eval_type(egraph *g, const em_prog *p, uint32_t e, const em_subst *s) {
    uint32_t t;
    if (class_type_of(g, p, e, s, &t)) return t;
    em_vec v = {0};
    size_t o;
    uint32_t l;
    t = em_eval(g, p, e, s, &v, &o, &l) ? type_from_words(g, v.w ? v.w + o : NULL, l) : 0;
    free(v.w);
    return t;
}

static eid build(egraph *g, const em_prog *p, uint32_t pat, const em_subst *s, uint32_t root_type, int dot_dt,
                 uint8_t origin, strbuf *why);

eid em_build(egraph *g, const em_prog *p, uint32_t pat, const em_subst *s, uint32_t root_type, uint8_t origin,
             strbuf *why) {
    return build(g, p, pat, s, root_type, root_type ? eg_type_dtype(g, root_type) : 0, origin, why);
}

/* dot_dt: the element type of the matched class, which an inner dot without
 * :type takes (a dot's output type is not implied by its operands: bf16
 * operands, f32 result). */
static eid build(egraph *g, const em_prog *p, uint32_t pat, const em_subst *s, uint32_t root_type, int dot_dt,
                 uint8_t origin, strbuf *why) {
    const em_pat *t = &p->pats[pat];
    switch (t->kind) {
    case EM_VAR:
        if (!s || t->var >= s->nvars || s->cls[t->var] == EID_NONE) {
            if (why) sb_puts(why, "unbound class variable");
            return EID_NONE;
        }
        return eg_find(g, s->cls[t->var]);
    case EM_PARAM: {
        uint32_t ty = type_from_words(g, p->words + t->words, t->nwords);
        if (root_type && root_type != ty) {
            if (why) sb_puts(why, "param: type differs from the expected one");
            return EID_NONE;
        }
        int64_t k = t->ival;
        return eg_add(g, EG_OP_PARAM, eg_attr(g, &k, 1), ty, NULL, 0, origin);
    }
    case EM_NODE:
    case EM_OPCLASS: {
        uint32_t n = t->nkids;
        eid kbuf[16], *kids = n <= 16 ? kbuf : xmalloc(n * sizeof *kids);
        uint32_t tbuf[16], *ct = n <= 16 ? tbuf : xmalloc(n * sizeof *ct);
        eid r = EID_NONE;
        for (uint32_t i = 0; i < n; i++) {
            kids[i] = build(g, p, p->kids[t->kids + i], s, 0, dot_dt, origin, why);
            if (kids[i] == EID_NONE) goto done;
            ct[i] = eg_class_type(g, kids[i]);
        }
        uint16_t op;
        uint32_t attr = 0, declared = 0;
        if (t->type) {
            declared = eval_type(g, p, t->type - 1, s);
            if (!declared) {
                if (why) sb_puts(why, ":type does not evaluate to a type");
                goto done;
            }
        }
        if (root_type) {
            if (declared && declared != root_type) {
                if (why) sb_puts(why, ":type differs from the matched term's type");
                goto done;
            }
            declared = root_type;
        }
        if (t->kind == EM_OPCLASS) {
            if (!s || !s->op[t->var]) {
                if (why) sb_puts(why, "unbound op variable");
                goto done;
            }
            op = s->op[t->var];
            attr = s->oattr[t->var];
            if (!declared && n) {
                uint32_t rank;
                const int64_t *d = eg_type_dims(g, ct[0], &rank);
                declared = eg_type(g, s->odt[t->var], d, rank);
            }
        } else {
            op = t->op;
            ea_builder b;
            ea_init(&b);
            em_vec v = {0};
            bool ok = true;
            for (uint32_t i = 0; i < t->nattrs && ok; i++) {
                size_t o;
                uint32_t l;
                v.n = 0;
                ok = em_eval(g, p, p->attrs[t->attrs + i].val, s, &v, &o, &l);
                if (ok) ea_put(&b, p->attrs[t->attrs + i].key, l ? v.w + o : NULL, l);
            }
            free(v.w);
            if (ok) attr = ea_intern(&b, g);
            ea_free(&b);
            if (!ok) {
                if (why) sb_printf(why, "%s: an attribute expression failed", hlo_op_name(op));
                goto done;
            }
        }
        uint32_t ty = em_infer_type(g, op, attr, ct, n, declared, why);
        if (ty && op == OP_DOT && !declared && dot_dt && dtype_is_float(dot_dt) && dtype_is_float(eg_type_dtype(g, ty))) {
            uint32_t rank;
            const int64_t *d = eg_type_dims(g, ty, &rank);
            ty = eg_type(g, dot_dt, d, rank);
        }
        if (ty) r = eg_add(g, op, attr, ty, kids, n, origin);
    done:
        if (kids != kbuf) free(kids);
        if (ct != tbuf) free(ct);
        return r;
    }
    default:
        if (why) sb_puts(why, "not a term");
        return EID_NONE;
    }
}

/* ---- relation tables ---- */

void em_rel_init(em_rel *r, const char *name, uint32_t arity, const uint8_t *is_class) {
    memset(r, 0, sizeof *r);
    r->name = xstrdup(name);
    r->arity = arity > EM_REL_MAX_ARITY ? EM_REL_MAX_ARITY : arity;
    if (is_class) memcpy(r->is_class, is_class, r->arity);
}

void em_rel_free(em_rel *r) {
    free(r->name);
    free(r->rows);
    free(r->stamp);
    free(r->slots);
    memset(r, 0, sizeof *r);
}

static uint64_t row_hash(const int64_t *row, uint32_t a) { return hash_bytes(row, a * sizeof *row); }

static void rel_rehash(em_rel *r, size_t ns) {
    free(r->slots);
    r->slots = xmalloc(ns * sizeof *r->slots);
    memset(r->slots, 0xff, ns * sizeof *r->slots);
    r->nslots = ns;
    for (size_t i = 0; i < r->n; i++) {
        size_t h = row_hash(r->rows + i * r->arity, r->arity) & (ns - 1);
        while (r->slots[h] != UINT32_MAX) h = (h + 1) & (ns - 1);
        r->slots[h] = (uint32_t)i;
    }
}

static size_t rel_slot(const em_rel *r, const int64_t *row, bool *found) {
    size_t mask = r->nslots - 1, h = row_hash(row, r->arity) & mask;
    for (; r->slots[h] != UINT32_MAX; h = (h + 1) & mask)
        if (memcmp(r->rows + (size_t)r->slots[h] * r->arity, row, r->arity * sizeof *row) == 0) {
            *found = true;
            return h;
        }
    *found = false;
    return h;
}

bool em_rel_contains(const em_rel *r, const int64_t *row) {
    if (!r->nslots) return false;
    bool found;
    rel_slot(r, row, &found);
    return found;
}

bool em_rel_insert(em_rel *r, const int64_t *row, uint32_t stamp) {
    if ((r->n + 1) * 2 >= r->nslots) rel_rehash(r, r->nslots ? r->nslots * 2 : 64);
    bool found;
    size_t h = rel_slot(r, row, &found);
    if (found) return false;
    if (r->n + 1 > r->cap) {
        size_t c = r->cap ? r->cap * 2 : 64;
        r->rows = xrealloc(r->rows, c * (r->arity ? r->arity : 1) * sizeof *r->rows);
        r->stamp = xrealloc(r->stamp, c * sizeof *r->stamp);
        r->cap = c;
    }
    memcpy(r->rows + r->n * r->arity, row, r->arity * sizeof *row);
    r->stamp[r->n] = stamp;
    r->slots[h] = (uint32_t)r->n++;
    return true;
}

size_t em_rel_canon(em_rel *r, egraph *g, uint32_t stamp) {
    size_t changed = 0, out = 0;
    for (size_t i = 0; i < r->n; i++) {
        int64_t *row = r->rows + i * r->arity;
        bool ch = false;
        for (uint32_t c = 0; c < r->arity; c++)
            if (r->is_class[c]) {
                int64_t f = eg_find(g, (eid)row[c]);
                ch |= f != row[c];
                row[c] = f;
            }
        changed += ch;
        if (out != i) memmove(r->rows + out * r->arity, row, r->arity * sizeof *row);
        r->stamp[out] = ch ? stamp : r->stamp[i];
        out++;
    }
    if (!changed) return 0;
    /* dedupe: keep the first of equal rows */
    size_t n = r->n;
    r->n = 0;
    memset(r->slots, 0xff, r->nslots * sizeof *r->slots);
    for (size_t i = 0; i < n; i++) {
        const int64_t *row = r->rows + i * r->arity;
        bool found;
        size_t h = rel_slot(r, row, &found);
        if (found) continue;
        if (r->n != i) {
            memmove(r->rows + r->n * r->arity, row, r->arity * sizeof *row);
            r->stamp[r->n] = r->stamp[i];
        }
        r->slots[h] = (uint32_t)r->n++;
    }
    return changed;
}
