/* rules_validate — see rules_validate.h for the contract. */
#include "rules_validate.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "eattr.h"
#include "egraph.h"
#include "graph.h"
#include "interp.h"
#include "io.h"
#include "rinst.h"
#include "rules.h"
#include "util.h"

enum { MAX_DEPTH = 32, MAX_TERM = 512, MAX_KIDS = 16, MAX_CANDIDATES = 8 };

double rv_tolerance(int dt) {
    switch (dt) {
    case DT_F32: return 1e-5;
    case DT_F64: return 1e-12;
    case DT_BF16: return 0x1p-5;
    case DT_F16: return 0x1p-8;
    default: return 0;
    }
}

/* ---- examples, read from the rule files' text ---- */

typedef struct example {
    char *text;  /* the term, owned */
} example;

typedef struct src_rule {
    char *name, *where;
    example *ex;
    size_t nex, capex;
} src_rule;

static size_t skip_ws(const char *s, size_t n, size_t i) {
    while (i < n) {
        if (s[i] == ';')
            while (i < n && s[i] != '\n') i++;
        else if (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r')
            i++;
        else
            break;
    }
    return i;
}

/* The end (one past) of the form starting at s[i]: a list, a string or an atom. */
static size_t skip_form(const char *s, size_t n, size_t i) {
    if (i >= n) return n;
    if (s[i] == '"') {
        for (i++; i < n && s[i] != '"'; i++)
            if (s[i] == '\\') i++;
        return i < n ? i + 1 : n;
    }
    if (s[i] != '(') {
        while (i < n && !strchr(" \t\r\n();\"", s[i])) i++;
        return i;
    }
    i++;
    for (;;) {
        i = skip_ws(s, n, i);
        if (i >= n) return n;
        if (s[i] == ')') return i + 1;
        i = skip_form(s, n, i);
    }
}

static bool atom_is(const char *s, size_t n, size_t i, const char *word) {
    size_t l = strlen(word);
    return skip_form(s, n, i) == i + l && i + l <= n && memcmp(s + i, word, l) == 0;
}

static unsigned line_of(const char *s, size_t off) {
    unsigned line = 1;
    for (size_t k = 0; k < off; k++) line += s[k] == '\n';
    return line;
}

/* form -> '(' 'rewrite' NAME ... ('(' 'example' TERM ')')* ... ')' */
static void scan_file(const char *path, const char *s, size_t n, src_rule **rules, size_t *nrules, size_t *cap) {
    size_t i = skip_ws(s, n, 0);
    while (i < n) {
        size_t end = skip_form(s, n, i);
        size_t j = skip_ws(s, n, i + 1);
        if (s[i] == '(' && atom_is(s, n, j, "rewrite")) {
            j = skip_ws(s, n, skip_form(s, n, j));
            size_t ne = skip_form(s, n, j);
            XGROW(*rules, *cap, *nrules + 1);
            src_rule *r = &(*rules)[(*nrules)++];
            memset(r, 0, sizeof *r);
            r->name = xmalloc(ne - j + 1);
            memcpy(r->name, s + j, ne - j);
            r->name[ne - j] = 0;
            strbuf w;
            sb_init(&w);
            sb_printf(&w, "%s:%u", path, line_of(s, i));
            r->where = sb_take(&w);
            for (j = skip_ws(s, n, ne); j < end && s[j] != ')'; j = skip_ws(s, n, skip_form(s, n, j))) {
                size_t h = skip_ws(s, n, j + 1);
                if (s[j] != '(' || !atom_is(s, n, h, "example")) continue;
                size_t t = skip_ws(s, n, skip_form(s, n, h)), te = skip_form(s, n, t);
                XGROW(r->ex, r->capex, r->nex + 1);
                /* whitespace runs become one space: the text is shown in reports */
                strbuf b;
                sb_init(&b);
                for (size_t k = t; k < te; k++) {
                    bool ws = strchr(" \t\r\n", s[k]) != NULL;
                    if (!ws) sb_putc(&b, s[k]);
                    else if (b.len && b.s[b.len - 1] != ' ') sb_putc(&b, ' ');
                }
                r->ex[r->nex++].text = sb_take(&b);
            }
        }
        i = skip_ws(s, n, end);
    }
}

/* ---- terms: trees of e-nodes in post-order (operands before users) ---- */

typedef struct tnode {
    uint16_t op;
    uint32_t attr, type;
    uint32_t nk, k0;  /* children: kids[k0 .. k0+nk) */
} tnode;

typedef struct term {
    tnode *v;
    size_t n, cap;
    uint32_t *kids;
    size_t nk, capk;
} term;

static void term_free(term *t) {
    free(t->v);
    free(t->kids);
    memset(t, 0, sizeof *t);
}

/* Appends node's tree; each child class contributes best[class] (the class's
 * only node when best is NULL). Returns its index, -1 when too deep or large. */
static int64_t term_add(term *t, egraph *g, eid node, const eid *best, int depth) {
    if (depth > MAX_DEPTH || t->n >= MAX_TERM) return -1;
    uint32_t nk;
    const eid *ch = eg_node_children(g, node, &nk);
    if (nk > MAX_KIDS) return -1;
    uint32_t k[MAX_KIDS];
    for (uint32_t i = 0; i < nk; i++) {
        eid c = eg_find(g, ch[i]);
        eid cn = best ? best[c] : eg_class_first(g, c);
        if (cn == EID_NONE) return -1;
        int64_t ki = term_add(t, g, cn, best, depth + 1);
        if (ki < 0) return -1;
        k[i] = (uint32_t)ki;
    }
    XGROW(t->v, t->cap, t->n + 1);
    XGROW(t->kids, t->capk, t->nk + nk + 1);
    tnode *x = &t->v[t->n];
    x->op = eg_node_op(g, node);
    x->attr = eg_node_attr(g, node);
    x->type = eg_class_type(g, eg_find(g, node));
    x->nk = nk;
    x->k0 = (uint32_t)t->nk;
    memcpy(t->kids + t->nk, k, nk * sizeof *k);
    t->nk += nk;
    return (int64_t)t->n++;
}

static bool term_equal(const term *a, uint32_t i, const term *b, uint32_t j) {
    const tnode *x = &a->v[i], *y = &b->v[j];
    if (x->op != y->op || x->attr != y->attr || x->type != y->type || x->nk != y->nk) return false;
    for (uint32_t k = 0; k < x->nk; k++)
        if (!term_equal(a, a->kids[x->k0 + k], b, b->kids[y->k0 + k])) return false;
    return true;
}

static void term_print(strbuf *b, egraph *g, const term *t, uint32_t i) {
    const tnode *x = &t->v[i];
    if (x->op == EG_OP_PARAM || x->op == EG_OP_VAR) {
        uint32_t n;
        const int64_t *w = eg_attr_words(g, x->attr, &n);
        sb_printf(b, "(%s %lld)", x->op == EG_OP_PARAM ? "param" : "var", n ? (long long)w[0] : -1LL);
        return;
    }
    sb_printf(b, "(%s", x->op < OP_COUNT ? hlo_op_name(x->op) : "op?");
    for (uint32_t k = 0; k < x->nk; k++) {
        sb_putc(b, ' ');
        term_print(b, g, t, t->kids[x->k0 + k]);
    }
    size_t before = b->len;
    sb_putc(b, ' ');
    ea_print(b, g, x->attr);
    if (b->len == before + 1) b->len = before;
    sb_putc(b, ')');
}

/* The smallest term of every class (node count): best[class] is its root node. */
static eid *extract_smallest(egraph *g) {
    uint32_t n = eg_node_count(g);
    eid *best = xmalloc((n ? n : 1) * sizeof *best);
    uint64_t *cost = xmalloc((n ? n : 1) * sizeof *cost);
    for (uint32_t c = 0; c < n; c++) best[c] = EID_NONE, cost[c] = UINT64_MAX;
    for (bool changed = true; changed;) {
        changed = false;
        for (uint32_t c = 0; c < n; c++) {
            if (eg_find(g, c) != c) continue;
            for (eid nd = eg_class_first(g, c); nd != EID_NONE; nd = eg_class_next(g, nd)) {
                uint32_t nk;
                const eid *ch = eg_node_children(g, nd, &nk);
                uint64_t sum = 1;
                for (uint32_t k = 0; k < nk && sum != UINT64_MAX; k++) {
                    uint64_t cc = cost[eg_find(g, ch[k])];
                    sum = cc == UINT64_MAX ? UINT64_MAX : sum + cc;
                }
                if (sum < cost[c]) cost[c] = sum, best[c] = nd, changed = true;
            }
        }
    }
    free(cost);
    return best;
}

/* ---- terms to modules ---- */

/* The example's parameters: type of parameter k, numbered 0..n-1. */
typedef struct params {
    uint32_t type[64];
    uint32_t n;
} params;

static const char *collect_params(egraph *g, const term *t, params *p) {
    memset(p, 0, sizeof *p);
    for (size_t i = 0; i < t->n; i++) {
        const tnode *x = &t->v[i];
        if (x->op == EG_OP_VAR) return "a variable leaf (not a numbered parameter)";
        if (x->op != EG_OP_PARAM) continue;
        uint32_t n;
        const int64_t *w = eg_attr_words(g, x->attr, &n);
        int64_t k = n ? w[0] : 0;
        if (k < 0 || k >= (int64_t)ARRAY_LEN(p->type)) return "a parameter number out of range";
        if (p->type[k] && p->type[k] != x->type) return "a parameter used with two types";
        p->type[k] = x->type;
        if ((uint32_t)k + 1 > p->n) p->n = (uint32_t)k + 1;
    }
    for (uint32_t k = 0; k < p->n; k++)
        if (!p->type[k]) return "parameters not numbered 0..n-1";
    return NULL;
}

static bool set_shape(hlo_module *m, egraph *g, uint32_t type, shape *s) {
    uint32_t rank;
    const int64_t *dims = eg_type_dims(g, type, &rank);
    int dt = eg_type_dtype(g, type);
    if (!type || dt <= DT_INVALID || dt == DT_TUPLE) return false;
    memset(s, 0, sizeof *s);
    s->dtype = (uint8_t)dt;
    s->rank = rank;
    s->dims = rank ? arena_memdup(&m->arena, dims, rank * sizeof *dims) : NULL;
    return true;
}

/* Decodes a blob into in->attrs; false (why says which key) for keys with no
 * faithful decoding (a constant's digest, lists of identifiers, ...). */
static bool decode_attrs(hlo_module *m, egraph *g, uint32_t attr, hlo_instr *in, strbuf *why) {
    uint32_t nw;
    const int64_t *w = eg_attr_words(g, attr, &nw);
    uint32_t count = 0;
    for (uint32_t i = 0; i + 1 < nw; i += 2 + (uint32_t)w[i + 1]) count++;
    in->attrs = arena_alloc(&m->arena, (count + 1) * sizeof *in->attrs);
    for (uint32_t i = 0; i + 1 < nw; i += 2 + (uint32_t)w[i + 1]) {
        int key = (int)w[i];
        uint32_t n = (uint32_t)w[i + 1];
        const int64_t *v = w + i + 2;
        hlo_attr *a = &in->attrs[in->nattrs];
        memset(a, 0, sizeof *a);
        a->key = (uint16_t)key;
        a->kind = (uint16_t)attr_key_kind(key);
        switch (a->kind) {
        case K_INT: case K_BOOL: a->v.i = n ? v[0] : 0; break;
        case K_INTS: a->n = n; a->v.ints = arena_memdup(&m->arena, v, n * sizeof *v); break;
        case K_SLICES: case K_PADDING: a->n = n / 3; a->v.ints = arena_memdup(&m->arena, v, n * sizeof *v); break;
        case K_IDENT: case K_STRING:
            if (key == A_DIRECTION) {
                a->v.str = graph_intern(m, ea_direction_name((int)v[0]), strlen(ea_direction_name((int)v[0])));
            } else {
                char buf[256];
                size_t l = ea_get_str(g, attr, key, buf, sizeof buf);
                if (l >= sizeof buf) goto refuse;
                a->v.str = graph_intern(m, buf, l);
            }
            break;
        default: goto refuse;
        }
        in->nattrs++;
        continue;
    refuse:
        sb_printf(why, "attribute %s has no decoding back to HLO%s", attr_key_name(key),
                  key == A_LITERAL ? " (a constant's payload is only a digest)" : "");
        return false;
    }
    /* a comparison's direction is omitted when EQ (eattr.h); HLO names it */
    if (in->op == OP_COMPARE && !instr_attr(in, A_DIRECTION))
        in->attrs[in->nattrs++] = (hlo_attr){.key = A_DIRECTION, .kind = K_IDENT, .n = 1, .v.str = graph_intern(m, "EQ", 2)};
    return true;
}

/* The module computing term t rooted at `root`; NULL with the reason in why. */
static hlo_module *term_module(egraph *g, const term *t, uint32_t root, const params *p, strbuf *why) {
    hlo_module *m = graph_new();
    m->name = graph_intern(m, "rule_validate", 13);
    m->comps = arena_alloc(&m->arena, sizeof *m->comps);
    m->ncomps = 1;
    hlo_comp *c = &m->comps[0];
    c->name = graph_intern(m, "main", 4);
    c->is_entry = true;
    c->instrs = arena_alloc(&m->arena, (p->n + t->n) * sizeof *c->instrs);
    c->params = arena_alloc(&m->arena, (p->n ? p->n : 1) * sizeof *c->params);
    c->nparams = p->n;
    uint32_t *at = xmalloc((t->n ? t->n : 1) * sizeof *at);  /* term index -> instruction */
    char name[32];
    for (uint32_t k = 0; k < p->n; k++) {
        hlo_instr *in = &c->instrs[c->ninstrs];
        snprintf(name, sizeof name, "p%u", k);
        in->name = graph_intern(m, name, strlen(name));
        in->op = OP_PARAMETER;
        in->opname = graph_intern(m, "parameter", 9);
        set_shape(m, g, p->type[k], &in->shape);
        in->attrs = arena_alloc(&m->arena, sizeof *in->attrs);
        in->attrs[0].key = A_PARAMETER_NUMBER;
        in->attrs[0].kind = K_INT;
        in->attrs[0].v.i = k;
        in->nattrs = 1;
        graph_finalize_instr(m, in);
        c->params[k] = c->ninstrs++;
    }
    /* Only the subtree of root: t may hold other candidates before it. */
    uint8_t *used = xcalloc(t->n ? t->n : 1, 1);
    used[root] = 1;
    for (uint32_t i = root + 1; i-- > 0;)
        if (used[i])
            for (uint32_t k = 0; k < t->v[i].nk; k++) used[t->kids[t->v[i].k0 + k]] = 1;
    bool ok = true;
    for (uint32_t i = 0; i <= root && ok; i++) {
        if (!used[i]) continue;
        const tnode *x = &t->v[i];
        if (x->op == EG_OP_PARAM) {
            uint32_t n;
            const int64_t *w = eg_attr_words(g, x->attr, &n);
            int64_t k = n ? w[0] : 0;
            if (k < 0 || (uint32_t)k >= p->n || p->type[k] != x->type) {
                sb_puts(why, "the rewritten term has a parameter the example lacks");
                ok = false;
            } else {
                at[i] = c->params[k];
            }
            continue;
        }
        if (x->op >= OP_COUNT || x->op == OP_UNKNOWN) {
            sb_printf(why, "a node with no HLO opcode (%u)", x->op);
            ok = false;
            break;
        }
        hlo_instr *in = &c->instrs[c->ninstrs];
        snprintf(name, sizeof name, "i%u", i);
        in->name = graph_intern(m, name, strlen(name));
        in->op = x->op;
        in->opname = graph_intern(m, hlo_op_name(x->op), strlen(hlo_op_name(x->op)));
        if (!set_shape(m, g, x->type, &in->shape)) {
            sb_printf(why, "%s has no array type", hlo_op_name(x->op));
            ok = false;
            break;
        }
        in->noperands = x->nk;
        in->operands = arena_alloc(&m->arena, (x->nk ? x->nk : 1) * sizeof *in->operands);
        for (uint32_t k = 0; k < x->nk; k++) in->operands[k] = at[t->kids[x->k0 + k]];
        if (!decode_attrs(m, g, x->attr, in, why)) {
            ok = false;
            break;
        }
        graph_finalize_instr(m, in);
        at[i] = c->ninstrs++;
    }
    if (ok) c->root = at[root];
    free(at);
    free(used);
    diag d;
    diag_init(&d, "rule term");
    if (ok && graph_finalize(m, &d)) {
        sb_printf(why, "the term is not a valid module: %s", d.out.s ? d.out.s : "");
        ok = false;
    }
    diag_free(&d);
    if (!ok) {
        graph_free(m);
        return NULL;
    }
    return m;
}

/* ---- running and comparing ---- */

typedef enum outcome { SAME = 0, DIFFER, SKIP } outcome;

/* Compares two results; *diff gets the largest difference, *scale the
 * magnitude it is measured against. */
static outcome compare(const interp_val *a, const interp_val *b, double *diff, double *scale, strbuf *why) {
    *diff = 0, *scale = 1;
    if (a->dtype == DT_TUPLE || b->dtype == DT_TUPLE) {
        sb_puts(why, "tuple results are not compared");
        return SKIP;
    }
    if (a->dtype != b->dtype || a->rank != b->rank || a->n != b->n ||
        memcmp(a->dims, b->dims, a->rank * sizeof *a->dims) != 0) {
        *diff = INFINITY;
        return DIFFER;
    }
    double tol = rv_tolerance(a->dtype), mag = 1;
    bool nan_mismatch = false;
    for (int64_t k = 0; k < a->n; k++) {
        double x = interp_val_get(a, k), y = interp_val_get(b, k);
        if (isnan(x) || isnan(y)) {
            nan_mismatch |= isnan(x) != isnan(y);
            continue;
        }
        if (isfinite(x) && fabs(x) > mag) mag = fabs(x);
        if (isfinite(y) && fabs(y) > mag) mag = fabs(y);
        double d = x == y ? 0 : fabs(x - y);
        if (isnan(d)) d = INFINITY;  /* inf - inf of different signs */
        if (d > *diff) *diff = d;
    }
    *scale = mag;
    if (nan_mismatch) *diff = INFINITY;
    return *diff <= tol * mag ? SAME : DIFFER;
}

/* Runs both modules on seed's random inputs. */
static outcome run_pair(const hlo_module *l, const hlo_module *r, egraph *g, const params *p, uint64_t seed,
                        double *diff, double *scale, strbuf *why) {
    interp_config cfg = {.replicas = 1, .partitions = 1};
    interp_val *args[64] = {0};
    interp_rng rng;
    interp_rng_seed(&rng, seed);
    outcome res = SKIP;
    for (uint32_t k = 0; k < p->n; k++) {
        uint32_t rank;
        const int64_t *dims = eg_type_dims(g, p->type[k], &rank);
        args[k] = interp_val_new(eg_type_dtype(g, p->type[k]), rank, dims);
        if (!args[k]) {
            sb_printf(why, "the interpreter cannot hold parameter %u's type", k);
            goto done;
        }
        interp_val_fill_random(args[k], &rng);
    }
    interp_val **argv[1] = {args};
    interp_val *ol[1] = {0}, *orr[1] = {0};
    strbuf err;
    sb_init(&err);
    if (interp_run(l, &cfg, argv, ol, &err) != INTERP_OK) {
        sb_printf(why, "interpreter (example): %s", err.s ? err.s : "");
    } else if (interp_run(r, &cfg, argv, orr, &err) != INTERP_OK) {
        sb_printf(why, "interpreter (rewritten term): %s", err.s ? err.s : "");
    } else {
        res = compare(ol[0], orr[0], diff, scale, why);
    }
    sb_free(&err);
    interp_val_free(ol[0]);
    interp_val_free(orr[0]);
done:
    for (uint32_t k = 0; k < p->n; k++) interp_val_free(args[k]);
    return res;
}

/* One instance (an example or a random one): SAME when every different term
 * of the root class ran and agreed (at least one), DIFFER with the
 * counterexample in cex (also when the rule joined terms of different types:
 * a shape conflict), SKIP with the reason in why. Values come from seeds
 * seed0+1 .. seed0+RV_SEEDS; *elements gets the parameters' element count. */
static outcome validate_example(rs_ruleset *rs, const bool *only, const char *text, uint64_t seed0, strbuf *cex,
                                strbuf *why, uint64_t *elements) {
    egraph *g = eg_new();
    diag d;
    diag_init(&d, "example");
    term left = {0}, right = {0};
    eid *best = NULL;
    hlo_module *ml = NULL;
    outcome res = SKIP;
    eid root = rs_add_term(rs, g, text, strlen(text), &d);
    if (root == EID_NONE) {
        sb_printf(why, "the example does not build: %s", d.out.s ? d.out.s : "");
        goto done;
    }
    eg_rebuild(g);
    int64_t li = term_add(&left, g, eg_class_first(g, eg_find(g, root)), NULL, 0);
    params p;
    const char *bad = li < 0 ? "the example is too deep or too large" : collect_params(g, &left, &p);
    if (bad) {
        sb_puts(why, bad);
        goto done;
    }
    *elements = 0;
    for (uint32_t k = 0; k < p.n; k++) {
        uint32_t rank;
        const int64_t *dims = eg_type_dims(g, p.type[k], &rank);
        uint64_t e = 1;
        for (uint32_t i = 0; i < rank; i++) e *= (uint64_t)dims[i];
        *elements += e;
    }
    if (!(ml = term_module(g, &left, (uint32_t)li, &p, why))) goto done;
    rs_budget b = rs_budget_default();
    b.node_limit = 20000;
    b.iter_limit = 16;
    b.time_limit_ms = 2000;
    rs_result r;
    memset(&r, 0, sizeof r);
    rs_stop stop = rs_run(rs, g, NULL, &b, only, &r);
    if (stop == STOP_SHAPE_CONFLICT) {
        sb_printf(cex, "%s: the rule joins terms of different types (shape conflict: %s)", text,
                  r.message ? r.message : "");
        res = DIFFER;
    }
    rs_result_free(&r);
    if (stop == STOP_SHAPE_CONFLICT) goto done;
    best = extract_smallest(g);
    uint32_t compared = 0, tried = 0;
    for (eid nd = eg_class_first(g, eg_find(g, root)); nd != EID_NONE && tried < MAX_CANDIDATES && res != DIFFER;
         nd = eg_class_next(g, nd)) {
        right.n = right.nk = 0;
        int64_t ri = term_add(&right, g, nd, best, 0);
        if (ri < 0 || term_equal(&left, (uint32_t)li, &right, (uint32_t)ri)) continue;
        tried++;
        strbuf cwhy;
        sb_init(&cwhy);
        hlo_module *mr = term_module(g, &right, (uint32_t)ri, &p, &cwhy);
        for (uint64_t s = seed0 + 1; mr && s <= seed0 + RV_SEEDS; s++) {
            double diff, scale;
            outcome o = run_pair(ml, mr, g, &p, s, &diff, &scale, &cwhy);
            if (o == SKIP) break;
            if (o == DIFFER) {
                sb_printf(cex, "%s => ", text);
                term_print(cex, g, &right, (uint32_t)ri);
                sb_printf(cex, "; seed %llu: max |difference| %.6g (output magnitude %.6g, tolerance %g relative)",
                          (unsigned long long)s, diff, scale, rv_tolerance(eg_type_dtype(g, right.v[ri].type)));
                res = DIFFER;
                break;
            }
            if (s == seed0 + RV_SEEDS) compared++;
        }
        if (cwhy.len && !why->len) sb_puts(why, cwhy.s);
        sb_free(&cwhy);
        if (mr) graph_free(mr);
    }
    if (res != DIFFER) {
        if (compared) res = SAME;
        else if (!tried) sb_puts(why, "the rule derived no different term in the example's class");
    }
done:
    if (ml) graph_free(ml);
    free(best);
    term_free(&left);
    term_free(&right);
    diag_free(&d);
    eg_free(g);
    return res;
}

/* ---- random instances and shrinking ---- */

/* The smallest counterexample seen: fewest parameter elements, then shortest text. */
typedef struct best_cex {
    bool set;
    strbuf text;
    uint64_t elements;
} best_cex;

static void offer(best_cex *b, const strbuf *cex, uint64_t elements) {
    if (b->set && (elements > b->elements || (elements == b->elements && cex->len >= b->text.len))) return;
    sb_reset(&b->text);
    sb_put(&b->text, cex->s ? cex->s : "", cex->len);
    b->elements = elements;
    b->set = true;
}

/* One random draw of rule k (its left side, or its right side on odd draws
 * of a <=> rule) under lim: SAME / DIFFER (counterexample offered to best) /
 * SKIP (the draw did not build, the rule did not fire, or it did not run). */
static outcome random_instance(rs_ruleset *rs, const bool *only, uint32_t k, const ri_limits *lim, uint64_t draw,
                               best_cex *best) {
    const em_prog *prog;
    uint32_t lhs, rhs;
    if (!rs_rule_sides(rs, k, &prog, &lhs, &rhs)) return SKIP;
    interp_rng rng;
    interp_rng_seed(&rng, hash_bytes(rs_rule_name(rs, k), strlen(rs_rule_name(rs, k))) ^ (draw * 0x9e3779b97f4a7c15ull));
    strbuf text, cex, why;
    sb_init(&text);
    sb_init(&cex);
    sb_init(&why);
    uint64_t el = 0;
    outcome oc = SKIP;
    if (ri_generate(prog, rhs != UINT32_MAX && (draw & 1) ? rhs : lhs, lim, &rng, &text, &el))
        oc = validate_example(rs, only, text.s, 1000 * (draw + 1), &cex, &why, &el);
    if (oc == DIFFER) offer(best, &cex, el);
    sb_free(&text);
    sb_free(&cex);
    sb_free(&why);
    return oc;
}

/* RV_RANDOM instances of rule k drawn within RV_MAX_RANK / RV_MAX_DIM; when
 * any instance failed (an example included), the shrink: draws under growing
 * limits (root elements dim^rank ascending), RV_SHRINK_DRAWS per level, until
 * a level shows a failure; the smallest counterexample wins. */
static void validate_random(rs_ruleset *rs, const bool *only, uint32_t k, rv_rule *o, best_cex *best) {
    ri_limits lim = {RV_MAX_RANK, RV_MAX_DIM, false};
    for (uint64_t draw = 0; draw < RV_MAX_DRAWS && o->random < RV_RANDOM; draw++) {
        outcome oc = random_instance(rs, only, k, &lim, draw, best);
        o->random += oc != SKIP;
        o->random_failures += oc == DIFFER;
        o->rejected += oc == SKIP;
    }
    if (!best->set) return;
    typedef struct level { uint32_t rank, dim, bound; } level;
    level lv[(RV_MAX_RANK + 1) * RV_MAX_DIM];
    uint32_t nl = 0;
    for (uint32_t r = 0; r <= RV_MAX_RANK; r++)
        for (uint32_t d = 1; d <= RV_MAX_DIM; d++) {
            uint32_t b = 1;
            for (uint32_t i = 0; i < r; i++) b *= d;
            if (r == 0 && d > 1) continue;
            uint32_t at = nl++;
            for (; at > 0 && (lv[at - 1].bound > b || (lv[at - 1].bound == b && lv[at - 1].rank > r)); at--) lv[at] = lv[at - 1];
            lv[at] = (level){r, d, b};
        }
    for (uint32_t l = 0; l < nl; l++) {
        ri_limits sl = {lv[l].rank, lv[l].dim, true};
        bool failed = false;
        for (uint64_t draw = 0; draw < RV_SHRINK_DRAWS; draw++)
            failed |= random_instance(rs, only, k, &sl, 1000000 + 1000 * l + draw, best) == DIFFER;
        if (failed) break;
    }
}

/* ---- driver ---- */

int rv_validate_dir(const char *dir, rv_report *out, diag *d) {
    memset(out, 0, sizeof *out);
    size_t nn;
    char **paths = rs_list_dir(dir, &nn);
    if (!paths) {
        diag_plain(d, "cannot open directory %s", dir);
        return 2;
    }
    src_rule *rules = NULL;
    size_t nr = 0, capr = 0;
    int status = 0;
    for (size_t i = 0; i < nn; i++) {
        const char *path = paths[i];
        size_t len;
        char *text = io_read_file(path, &len, NULL, d);
        if (!text) {
            status = 2;
        } else {
            scan_file(path, text, len, &rules, &nr, &capr);
            free(text);
        }
    }
    rs_paths_free(paths, nn);
    if (!nn) {
        diag_plain(d, "no .rules files in %s", dir);
        status = 2;
    }
    rs_ruleset *rs = rs_new();
    if (!status && rs_load_dir(rs, dir, d)) status = 2;
    if (!status) {
        uint32_t nrs = rs_rule_count(rs);
        bool *only = xcalloc(nrs ? nrs : 1, sizeof *only);
        out->rules = xcalloc(nr ? nr : 1, sizeof *out->rules);
        for (size_t i = 0; i < nr; i++) {
            rv_rule *o = &out->rules[out->n++];
            o->name = xstrdup(rules[i].name);
            o->where = xstrdup(rules[i].where);
            /* a <=> rule may compile to more than one entry of the same name */
            for (uint32_t k = 0; k < nrs; k++) only[k] = strcmp(rs_rule_name(rs, k), rules[i].name) == 0;
            strbuf why;
            sb_init(&why);
            best_cex best = {0};
            sb_init(&best.text);
            for (size_t x = 0; x < rules[i].nex; x++) {
                strbuf cex;
                sb_init(&cex);
                uint64_t el = 0;
                outcome oc = validate_example(rs, only, rules[i].ex[x].text, 0, &cex, &why, &el);
                if (x == 0) o->example_elements = el;
                if (oc == SAME) o->instances++;
                else if (oc == DIFFER) o->instances++, o->failures++, offer(&best, &cex, el);
                else o->skipped++;
                sb_free(&cex);
                if (oc == DIFFER) break; /* one failing example is enough */
            }
            int k = rs_rule_find(rs, rules[i].name);
            if (k >= 0) validate_random(rs, only, (uint32_t)k, o, &best);
            if (best.set) {
                o->counterexample = sb_take(&best.text);
                o->cex_elements = best.elements;
            }
            sb_free(&best.text);
            o->status = o->failures || o->random_failures ? RV_FAIL : o->instances || o->random ? RV_OK : RV_NOT_VALIDATED;
            if (!rules[i].nex && !why.len) sb_puts(&why, "no examples");
            if (why.len) o->reason = sb_take(&why);
            sb_free(&why);
            if (o->status == RV_OK) out->ok++;
            else if (o->status == RV_FAIL) out->failed++;
            else out->not_validated++;
        }
        free(only);
    }
    rs_free(rs);
    for (size_t i = 0; i < nr; i++) {
        for (size_t x = 0; x < rules[i].nex; x++) free(rules[i].ex[x].text);
        free(rules[i].ex);
        free(rules[i].name);
        free(rules[i].where);
    }
    free(rules);
    return status;
}

int rv_print(FILE *f, const rv_report *r) {
    fprintf(f, "%-28s %8s %6s %8s %8s  %s\n", "rule", "examples", "random", "rejected", "failures", "result");
    uint32_t random = 0;
    for (uint32_t i = 0; i < r->n; i++) {
        const rv_rule *x = &r->rules[i];
        random += x->random;
        fprintf(f, "%-28s %8u %6u %8u %8u  ", x->name, x->instances, x->random, x->rejected,
                x->failures + x->random_failures);
        if (x->status == RV_OK && !x->random) fputs("ok on examples only: no random draw applied\n", f);
        else if (x->status == RV_OK && !x->skipped) fputs("ok\n", f);
        else if (x->status == RV_OK) fprintf(f, "ok; %u example%s not run: %s\n", x->skipped, x->skipped == 1 ? "" : "s", x->reason ? x->reason : "?");
        else if (x->status == RV_FAIL)
            fprintf(f, "FAIL\n    %s: minimal counterexample (%llu parameter elements): %s\n", x->where,
                    (unsigned long long)x->cex_elements, x->counterexample ? x->counterexample : "?");
        else fprintf(f, "not validated: %s\n", x->reason ? x->reason : "?");
    }
    fprintf(f, "%u rewrite rules: %u validated, %u not validated, %u failed (%u random instances; %d seeds each)\n", r->n,
            r->ok, r->not_validated, r->failed, random, RV_SEEDS);
    return r->failed ? 1 : 0;
}

void rv_report_free(rv_report *r) {
    for (uint32_t i = 0; i < r->n; i++) {
        free(r->rules[i].name);
        free(r->rules[i].where);
        free(r->rules[i].reason);
        free(r->rules[i].counterexample);
    }
    free(r->rules);
    memset(r, 0, sizeof *r);
}
