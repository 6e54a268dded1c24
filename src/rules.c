#include "rules.h"

#include <dirent.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "eattr.h"
#include "ematch.h"
#include "graph.h"
#include "io.h"
#include "sha256.h"
#include "shape.h"

/* ---- the ruleset ---- */

enum { RK_REWRITE, RK_RELATION };

typedef struct rule {
    char *name, *doc, *file;
    int line, col;
    uint8_t kind;
    bool ac, both, has_match_atom, has_union_head;
    uint32_t lhs, rhs;               /* RK_REWRITE */
    uint32_t *conds, nconds;         /* (when ...) expressions */
    uint32_t *body, nbody;           /* RK_RELATION: atoms */
    uint32_t *heads, nheads;
    uint32_t *examples, nexamples;   /* term roots; relation rules: EM_LIST of atoms */
    uint32_t nvars;
    char **vnames;
    uint8_t *vkinds;
} rule;

typedef struct relation {
    char *name;
    uint32_t arity;
    uint8_t is_class[EM_REL_MAX_ARITY];
} relation;

typedef struct direction {
    uint32_t rule, lhs, rhs;
} direction;

struct rs_ruleset {
    em_prog prog;
    rule *rules;
    uint32_t nrules, caprules;
    relation *rels;
    uint32_t nrels, caprels;
    uint32_t nexamples;
};

static void rule_free(rule *r) {
    free(r->name);
    free(r->doc);
    free(r->file);
    free(r->conds);
    free(r->body);
    free(r->heads);
    free(r->examples);
    for (uint32_t i = 0; i < r->nvars; i++) free(r->vnames[i]);
    free(r->vnames);
    free(r->vkinds);
}

rs_ruleset *rs_new(void) {
    rs_ruleset *rs = xcalloc(1, sizeof *rs);
    em_prog_init(&rs->prog);
    return rs;
}

void rs_free(rs_ruleset *rs) {
    if (!rs) return;
    for (uint32_t i = 0; i < rs->nrules; i++) rule_free(&rs->rules[i]);
    free(rs->rules);
    for (uint32_t i = 0; i < rs->nrels; i++) free(rs->rels[i].name);
    free(rs->rels);
    em_prog_free(&rs->prog);
    free(rs);
}

rs_budget rs_budget_default(void) {
    rs_budget b = {.node_limit = 1000000, .iter_limit = 64, .time_limit_ms = 10000, .ac_class_limit = 16,
                   .ac_term_limit = 15, .match_limit = 100000};
    return b;
}

void rs_result_free(rs_result *r) {
    free(r->fired);
    free(r->message);
    memset(r, 0, sizeof *r);
}

uint32_t rs_rule_count(const rs_ruleset *rs) { return rs->nrules; }
const char *rs_rule_name(const rs_ruleset *rs, uint32_t i) { return i < rs->nrules ? rs->rules[i].name : NULL; }
bool rs_rule_sides(const rs_ruleset *rs, uint32_t i, const struct em_prog **prog, uint32_t *lhs, uint32_t *rhs) {
    if (i >= rs->nrules || rs->rules[i].kind != RK_REWRITE) return false;
    *prog = &rs->prog;
    *lhs = rs->rules[i].lhs;
    *rhs = rs->rules[i].both ? rs->rules[i].rhs : UINT32_MAX;
    return true;
}
int rs_rule_find(const rs_ruleset *rs, const char *name) {
    for (uint32_t i = 0; i < rs->nrules; i++)
        if (strcmp(rs->rules[i].name, name) == 0) return (int)i;
    return -1;
}
int rs_relation_find(const rs_ruleset *rs, const char *name) {
    for (uint32_t i = 0; i < rs->nrels; i++)
        if (strcmp(rs->rels[i].name, name) == 0) return (int)i;
    return -1;
}
uint32_t rs_relation_arity(const rs_ruleset *rs, int rel) { return rs->rels[rel].arity; }

rs_counts rs_get_counts(const rs_ruleset *rs) {
    rs_counts c = {0};
    for (uint32_t i = 0; i < rs->nrules; i++) {
        if (rs->rules[i].kind == RK_REWRITE) c.rewrites++;
        else c.relation_rules++;
        c.examples += rs->rules[i].nexamples;
    }
    c.relations = rs->nrels;
    c.opclasses = rs->prog.nclasses;
    return c;
}

/* ---- S-expression reader ---- */

enum { SX_LIST, SX_SYM, SX_INT, SX_STR };

typedef struct sx {
    uint8_t kind;
    uint32_t off, len;   /* source span (SYM: the symbol) */
    int64_t ival;
    uint32_t first, n;   /* LIST: rd->kids[first .. first+n) */
    char *str;           /* STR: decoded (owned by the reader) */
} sx;

typedef struct reader {
    const char *src;
    size_t n, pos;
    diag *d;
    sx *nodes;
    size_t nnodes, capnodes;
    uint32_t *kids;
    size_t nkids, capkids;
    int errors;
} reader;

static void rd_error(reader *r, size_t off, const char *msg) {
    diag_text(r->d, r->src, r->n, off, "%s", msg);
    r->errors++;
}

static void skip_ws(reader *r) {
    while (r->pos < r->n) {
        char c = r->src[r->pos];
        if (c == ';') {
            while (r->pos < r->n && r->src[r->pos] != '\n') r->pos++;
        } else if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
            r->pos++;
        } else {
            break;
        }
    }
}

static uint32_t sx_new(reader *r, uint8_t kind, size_t off) {
    XGROW(r->nodes, r->capnodes, r->nnodes + 1);
    sx *x = &r->nodes[r->nnodes];
    memset(x, 0, sizeof *x);
    x->kind = kind;
    x->off = (uint32_t)off;
    return (uint32_t)r->nnodes++;
}

/* datum -> '(' datum* ')' | string | atom ; returns UINT32_MAX on error */
static uint32_t read_datum(reader *r, int depth) {
    skip_ws(r);
    if (r->pos >= r->n) {
        rd_error(r, r->pos, "unexpected end of input");
        return UINT32_MAX;
    }
    if (depth > 2000) {
        rd_error(r, r->pos, "nesting too deep");
        return UINT32_MAX;
    }
    size_t start = r->pos;
    char c = r->src[r->pos];
    if (c == '(') {
        r->pos++;
        uint32_t tmp[16], nt = 0, *items = tmp, capi = 16;
        for (;;) {
            skip_ws(r);
            if (r->pos >= r->n) {
                rd_error(r, start, "unclosed '('");
                if (items != tmp) free(items);
                return UINT32_MAX;
            }
            if (r->src[r->pos] == ')') {
                r->pos++;
                break;
            }
            uint32_t k = read_datum(r, depth + 1);
            if (k == UINT32_MAX) {
                if (items != tmp) free(items);
                return UINT32_MAX;
            }
            if (nt == capi) {
                uint32_t *ni = xmalloc(2 * capi * sizeof *ni);
                memcpy(ni, items, nt * sizeof *ni);
                if (items != tmp) free(items);
                items = ni;
                capi *= 2;
            }
            items[nt++] = k;
        }
        uint32_t id = sx_new(r, SX_LIST, start);
        XGROW(r->kids, r->capkids, r->nkids + nt + 1);
        r->nodes[id].first = (uint32_t)r->nkids;
        r->nodes[id].n = nt;
        memcpy(r->kids + r->nkids, items, nt * sizeof *items);
        r->nkids += nt;
        r->nodes[id].len = (uint32_t)(r->pos - start);
        if (items != tmp) free(items);
        return id;
    }
    if (c == ')') {
        rd_error(r, start, "unexpected ')'");
        r->pos++;
        return UINT32_MAX;
    }
    if (c == '"') {
        strbuf b;
        sb_init(&b);
        r->pos++;
        while (r->pos < r->n && r->src[r->pos] != '"') {
            char ch = r->src[r->pos++];
            if (ch == '\\' && r->pos < r->n) {
                ch = r->src[r->pos++];
                if (ch == 'n') ch = '\n';
                else if (ch == 't') ch = '\t';
            }
            sb_putc(&b, ch);
        }
        if (r->pos >= r->n) {
            rd_error(r, start, "unterminated string");
            sb_free(&b);
            return UINT32_MAX;
        }
        r->pos++;
        uint32_t id = sx_new(r, SX_STR, start);
        r->nodes[id].len = (uint32_t)b.len;
        r->nodes[id].str = b.s ? sb_take(&b) : xstrdup("");
        return id;
    }
    while (r->pos < r->n && !strchr(" \t\r\n();\"", r->src[r->pos])) r->pos++;
    size_t len = r->pos - start;
    const char *s = r->src + start;
    size_t i = (s[0] == '-' && len > 1) ? 1 : 0;
    bool isint = len > i;
    for (size_t j = i; j < len; j++) isint &= s[j] >= '0' && s[j] <= '9';
    uint32_t id = sx_new(r, isint ? SX_INT : SX_SYM, start);
    r->nodes[id].len = (uint32_t)len;
    if (isint) r->nodes[id].ival = strtoll(s, NULL, 10);
    return id;
}

static void reader_free(reader *r) {
    for (size_t i = 0; i < r->nnodes; i++) free(r->nodes[i].str);
    free(r->nodes);
    free(r->kids);
}

/* ---- compiling rule text into patterns ---- */

enum { SIDE_LHS, SIDE_RHS, SIDE_TERM, SIDE_EXPR };

typedef struct cc {
    rs_ruleset *rs;
    reader *r;
    rule *ru;       /* the rule whose variables are being named (NULL for terms) */
    uint32_t *uses; /* occurrences per variable */
    size_t capuses;
    int errors;
} cc;

static sx *X(cc *c, uint32_t i) { return &c->r->nodes[i]; }
static uint32_t K(cc *c, uint32_t list, uint32_t i) { return c->r->kids[X(c, list)->first + i]; }
static bool sym_is(cc *c, uint32_t i, const char *s) {
    sx *x = X(c, i);
    return x->kind == SX_SYM && x->len == strlen(s) && memcmp(c->r->src + x->off, s, x->len) == 0;
}
static const char *sym_text(cc *c, uint32_t i) { return c->r->src + X(c, i)->off; }

static void cc_error(cc *c, uint32_t at, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void cc_error(cc *c, uint32_t at, const char *fmt, ...) {
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    diag_text(c->r->d, c->r->src, c->r->n, at == UINT32_MAX ? 0 : X(c, at)->off, "%s", buf);
    c->errors++;
}

static bool is_var(cc *c, uint32_t i) { return X(c, i)->kind == SX_SYM && sym_text(c, i)[0] == '?'; }

/* The variable named by symbol i; created (kind) when bind, else must exist. */
static int var_ref(cc *c, uint32_t i, uint8_t kind, bool bind) {
    rule *ru = c->ru;
    sx *x = X(c, i);
    const char *s = sym_text(c, i);
    if (!ru) {
        cc_error(c, i, "variables are not allowed in a concrete term");
        return -1;
    }
    for (uint32_t v = 0; v < ru->nvars; v++)
        if (strlen(ru->vnames[v]) == x->len && memcmp(ru->vnames[v], s, x->len) == 0) {
            if (kind != VK_NONE && ru->vkinds[v] != kind) {
                static const char *const kn[] = {"?", "class", "value", "op"};
                cc_error(c, i, "variable %.*s is a %s variable here but a %s variable elsewhere", (int)x->len, s,
                         kn[kind], kn[ru->vkinds[v]]);
                return -1;
            }
            c->uses[v]++;
            return (int)v;
        }
    if (!bind) {
        cc_error(c, i, "unbound variable %.*s", (int)x->len, s);
        return -1;
    }
    ru->vnames = xrealloc(ru->vnames, (ru->nvars + 1) * sizeof *ru->vnames);
    ru->vkinds = xrealloc(ru->vkinds, (ru->nvars + 1) * sizeof *ru->vkinds);
    XGROW(c->uses, c->capuses, ru->nvars + 1);
    ru->vnames[ru->nvars] = xstrndup(s, x->len);
    ru->vkinds[ru->nvars] = kind == VK_NONE ? VK_VALUE : kind;
    c->uses[ru->nvars] = 1;
    return (int)ru->nvars++;
}

static uint32_t pat_var(cc *c, uint32_t at, int v) {
    uint32_t p = em_pat_new(&c->rs->prog, EM_VAR, X(c, at)->off);
    c->rs->prog.pats[p].var = v < 0 ? 0 : (uint32_t)v;
    return p;
}

static void set_kids(cc *c, uint32_t p, const uint32_t *k, uint32_t n) {
    em_prog *pr = &c->rs->prog;
    XGROW(pr->kids, pr->capkids, pr->nkids + n + 1);
    pr->pats[p].kids = (uint32_t)pr->nkids;
    pr->pats[p].nkids = n;
    if (n) memcpy(pr->kids + pr->nkids, k, n * sizeof *k);
    pr->nkids += n;
}

/* A type literal: f32[4,8] or f32[] → words dtype, rank, dims. */
static bool parse_type(const char *s, size_t n, int64_t *w, uint32_t *nw) {
    const char *lb = memchr(s, '[', n);
    if (!lb || s[n - 1] != ']') return false;
    int dt = dtype_from_name(s, (size_t)(lb - s));
    if (dt == DT_INVALID) return false;
    uint32_t k = 0;
    w[0] = dt;
    const char *p = lb + 1, *end = s + n - 1;
    while (p < end && k < 62) {
        char *e;
        long long v = strtoll(p, &e, 10);
        if (e == p || v < 0) return false;
        w[2 + k++] = v;
        p = e;
        if (p < end && *p == ',') p++;
        else if (p != end) return false;
    }
    w[1] = k;
    *nw = k + 2;
    return true;
}

static uint32_t cexpr(cc *c, uint32_t i, int side);

/* Only integers (nested lists flattened)? */
static bool all_ints(cc *c, uint32_t i, int64_t *w, uint32_t *n, uint32_t cap) {
    sx *x = X(c, i);
    if (x->kind == SX_INT) {
        if (*n >= cap) return false;
        w[(*n)++] = x->ival;
        return true;
    }
    if (x->kind != SX_LIST) return false;
    for (uint32_t k = 0; k < x->n; k++)
        if (!all_ints(c, K(c, i, k), w, n, cap)) return false;
    return true;
}

/* An attribute value in a pattern: literal, ?var, or a list of ints and ?vars. */
static uint32_t cval_pattern(cc *c, uint32_t i) {
    em_prog *pr = &c->rs->prog;
    sx *x = X(c, i);
    int64_t w[256];
    uint32_t n = 0;
    if (x->kind == SX_SYM && is_var(c, i)) return pat_var(c, i, var_ref(c, i, VK_VALUE, true));
    if (x->kind == SX_LIST && all_ints(c, i, w, &n, 256)) {
        uint32_t p = em_pat_new(pr, EM_WORDS, x->off);
        pr->pats[p].words = em_words_add(pr, w, n);
        pr->pats[p].nwords = n;
        return p;
    }
    if (x->kind == SX_LIST) {
        uint32_t p = em_pat_new(pr, EM_LIST, x->off), ks[64], nk = 0;
        for (uint32_t k = 0; k < x->n && nk < 64; k++) {
            uint32_t e = K(c, i, k);
            if (X(c, e)->kind == SX_INT) {
                ks[nk] = em_pat_new(pr, EM_INT, X(c, e)->off);
                pr->pats[ks[nk++]].ival = X(c, e)->ival;
            } else if (is_var(c, e)) {
                ks[nk++] = pat_var(c, e, var_ref(c, e, VK_VALUE, true));
            } else {
                cc_error(c, e, "a pattern's list holds integers and variables only (put computations in (when ...))");
                return p;
            }
        }
        set_kids(c, p, ks, nk);
        return p;
    }
    return cexpr(c, i, SIDE_LHS);
}

/* expr -> INT | STRING | ?var | SYMBOL | TYPE | '(' ')' | '(' prim expr* ')' | '(' expr+ ')' */
static uint32_t cexpr(cc *c, uint32_t i, int side) {
    em_prog *pr = &c->rs->prog;
    sx *x = X(c, i);
    uint32_t p;
    switch (x->kind) {
    case SX_INT:
        p = em_pat_new(pr, EM_INT, x->off);
        pr->pats[p].ival = x->ival;
        return p;
    case SX_STR: {
        uint32_t need = ea_str_words(x->str, x->len, NULL, 0);
        int64_t *w = xmalloc(need * sizeof *w);
        ea_str_words(x->str, x->len, w, need);
        p = em_pat_new(pr, EM_WORDS, x->off);
        pr->pats[p].words = em_words_add(pr, w, x->len ? need : 0);
        pr->pats[p].nwords = x->len ? need : 0;
        free(w);
        return p;
    }
    case SX_SYM: {
        const char *s = sym_text(c, i);
        if (s[0] == '?') {
            if (side == SIDE_TERM) {
                cc_error(c, i, "variables are not allowed in a concrete term");
                return em_pat_new(pr, EM_INT, x->off);
            }
            return pat_var(c, i, var_ref(c, i, VK_NONE, false));
        }
        int64_t w[66];
        uint32_t nw;
        if (memchr(s, '[', x->len) && parse_type(s, x->len, w, &nw)) {
            p = em_pat_new(pr, EM_TYPE, x->off);
            pr->pats[p].words = em_words_add(pr, w, nw);
            pr->pats[p].nwords = nw;
            return p;
        }
        int64_t v;
        if (!em_symbol_value(s, x->len, &v)) cc_error(c, i, "unknown symbol '%.*s'", (int)x->len, s);
        p = em_pat_new(pr, EM_INT, x->off);
        pr->pats[p].ival = v;
        return p;
    }
    default: break;
    }
    if (x->n == 0) return em_pat_new(pr, EM_WORDS, x->off);
    uint32_t h = K(c, i, 0);
    if (X(c, h)->kind == SX_SYM && !is_var(c, h)) {
        int prim = em_prim_from_name(sym_text(c, h), X(c, h)->len);
        if (prim < 0) {
            cc_error(c, h, "unknown primitive '%.*s'", (int)X(c, h)->len, sym_text(c, h));
            return em_pat_new(pr, EM_WORDS, x->off);
        }
        int mn, mx;
        em_prim_arity(prim, &mn, &mx);
        int na = (int)x->n - 1;
        if (na < mn || (mx >= 0 && na > mx) || na > 16) {
            cc_error(c, h, "%s takes %d%s argument%s, not %d", em_prim_name(prim), mn,
                     mx < 0 ? " or more" : mx > mn ? " or more" : "", mn == 1 && mx == 1 ? "" : "s", na);
            return em_pat_new(pr, EM_WORDS, x->off);
        }
        uint32_t ks[16];
        for (int k = 0; k < na; k++) {
            uint32_t a = K(c, i, (uint32_t)k + 1);
            if (k == 0 && em_prim_takes_class(prim)) {
                if (!is_var(c, a)) {
                    cc_error(c, a, "%s takes a class variable", em_prim_name(prim));
                    ks[k] = em_pat_new(pr, EM_INT, X(c, a)->off);
                } else {
                    ks[k] = pat_var(c, a, var_ref(c, a, VK_CLASS, false));
                }
            } else {
                ks[k] = cexpr(c, a, side);
                const em_pat *kp = &pr->pats[ks[k]];
                if (kp->kind == EM_VAR && c->ru && kp->var < c->ru->nvars && c->ru->vkinds[kp->var] == VK_CLASS)
                    cc_error(c, a, "class variable %s used as a value (use (dims ...), (rank ...), ...)",
                             c->ru->vnames[kp->var]);
            }
        }
        p = em_pat_new(pr, EM_CALL, x->off);
        pr->pats[p].op = (uint16_t)prim;
        set_kids(c, p, ks, (uint32_t)na);
        return p;
    }
    uint32_t ks[256], nk = 0;
    for (uint32_t k = 0; k < x->n && nk < 256; k++) ks[nk++] = cexpr(c, K(c, i, k), side);
    p = em_pat_new(pr, EM_LIST, x->off);
    set_kids(c, p, ks, nk);
    return p;
}

static int cmp_attr(const void *a, const void *b) {
    const em_attr *x = a, *y = b;
    return (int)x->key - (int)y->key;
}

/* pattern -> ?var | '(' 'as' ?var pattern ')' | '(' 'param' INT TYPE ')'
 *          | '(' op pattern* (':key' value)* ')' | '(' '%class' ?f pattern* ')' */
static uint32_t cpat(cc *c, uint32_t i, int side) {
    em_prog *pr = &c->rs->prog;
    sx *x = X(c, i);
    if (x->kind == SX_SYM && is_var(c, i)) {
        if (side == SIDE_TERM) {
            cc_error(c, i, "variables are not allowed in a concrete term");
            return em_pat_new(pr, EM_INT, x->off);
        }
        return pat_var(c, i, var_ref(c, i, VK_CLASS, side == SIDE_LHS));
    }
    if (x->kind != SX_LIST || x->n == 0 || X(c, K(c, i, 0))->kind != SX_SYM) {
        cc_error(c, i, "expected a term: a variable or (op operands... :attribute value...)");
        return em_pat_new(pr, EM_INT, x->off);
    }
    uint32_t h = K(c, i, 0);
    const char *hs = sym_text(c, h);
    size_t hl = X(c, h)->len;
    if (sym_is(c, h, "as")) {
        if (side != SIDE_LHS || x->n != 3 || !is_var(c, K(c, i, 1))) {
            cc_error(c, i, "(as ?var pattern) is for left-hand sides");
            return em_pat_new(pr, EM_INT, x->off);
        }
        uint32_t p = em_pat_new(pr, EM_AS, x->off);
        int v = var_ref(c, K(c, i, 1), VK_CLASS, true);
        uint32_t sub = cpat(c, K(c, i, 2), side);
        pr->pats[p].var = v < 0 ? 0 : (uint32_t)v;
        set_kids(c, p, &sub, 1);
        return p;
    }
    if (sym_is(c, h, "param")) {
        int64_t w[66];
        uint32_t nw = 0;
        uint32_t p = em_pat_new(pr, EM_PARAM, x->off);
        if (side != SIDE_TERM || x->n != 3 || X(c, K(c, i, 1))->kind != SX_INT || X(c, K(c, i, 2))->kind != SX_SYM ||
            !parse_type(sym_text(c, K(c, i, 2)), X(c, K(c, i, 2))->len, w, &nw)) {
            cc_error(c, i, "expected (param NUMBER TYPE) in a concrete term, e.g. (param 0 f32[4,8])");
            return p;
        }
        pr->pats[p].ival = X(c, K(c, i, 1))->ival;
        pr->pats[p].words = em_words_add(pr, w, nw);
        pr->pats[p].nwords = nw;
        return p;
    }
    uint32_t p, first = 1;
    if (hs[0] == '%') {
        int cls = em_opclass_find(pr, hs + 1, hl - 1);
        p = em_pat_new(pr, EM_OPCLASS, x->off);
        if (cls < 0) {
            cc_error(c, h, "unknown op class '%.*s' (declare it with (opclass ...))", (int)hl - 1, hs + 1);
            return p;
        }
        if (side == SIDE_TERM || x->n < 2 || !is_var(c, K(c, i, 1))) {
            cc_error(c, i, "expected (%%class ?op operands...)");
            return p;
        }
        int v = var_ref(c, K(c, i, 1), VK_OP, side == SIDE_LHS);
        pr->pats[p].op = (uint16_t)cls;
        pr->pats[p].var = v < 0 ? 0 : (uint32_t)v;
        first = 2;
    } else {
        int op = hlo_op_from_name(hs, hl);
        p = em_pat_new(pr, EM_NODE, x->off);
        if (op == OP_UNKNOWN) {
            cc_error(c, h, "unknown op '%.*s'", (int)hl, hs);
            return p;
        }
        pr->pats[p].op = (uint16_t)op;
    }
    uint32_t ks[256], nk = 0, k = first;
    for (; k < x->n && nk < 256; k++) {
        uint32_t a = K(c, i, k);
        if (X(c, a)->kind == SX_SYM && sym_text(c, a)[0] == ':') break;
        ks[nk++] = cpat(c, a, side);
    }
    set_kids(c, p, ks, nk);
    em_attr at[64];
    uint32_t na = 0;
    for (; k < x->n; k += 2) {
        uint32_t key = K(c, i, k);
        if (X(c, key)->kind != SX_SYM || sym_text(c, key)[0] != ':') {
            cc_error(c, key, "expected ':attribute value' after the operands");
            break;
        }
        if (k + 1 >= x->n) {
            cc_error(c, key, "attribute without a value");
            break;
        }
        uint32_t val = K(c, i, k + 1);
        if (sym_is(c, key, ":type")) {
            if (side == SIDE_LHS) {
                cc_error(c, key, ":type is for right-hand sides and terms (constrain types with (when ...))");
                continue;
            }
            uint32_t e;
            if (is_var(c, val) && side == SIDE_RHS) e = pat_var(c, val, var_ref(c, val, VK_CLASS, false));
            else e = cexpr(c, val, side);
            pr->pats[p].type = e + 1;
            continue;
        }
        int akey = attr_key_from_name(sym_text(c, key) + 1, X(c, key)->len - 1);
        if (akey == A_RAW) {
            cc_error(c, key, "unknown attribute '%.*s'", (int)X(c, key)->len - 1, sym_text(c, key) + 1);
            continue;
        }
        if (pr->pats[p].kind == EM_OPCLASS) {
            cc_error(c, key, "an op-class term keeps the matched attributes: no :attribute here");
            continue;
        }
        for (uint32_t j = 0; j < na; j++)
            if (at[j].key == akey) cc_error(c, key, "attribute given twice");
        if (na < 64) {
            at[na].key = (uint16_t)akey;
            at[na++].val = side == SIDE_LHS ? cval_pattern(c, val) : cexpr(c, val, side);
        }
    }
    qsort(at, na, sizeof *at, cmp_attr);
    XGROW(pr->attrs, pr->capattrs, pr->nattrs + na + 1);
    pr->pats[p].attrs = (uint32_t)pr->nattrs;
    pr->pats[p].nattrs = na;
    memcpy(pr->attrs + pr->nattrs, at, na * sizeof *at);
    pr->nattrs += na;
    return p;
}

/* ---- top-level forms ---- */

static rule *new_rule(cc *c, uint32_t form, uint8_t kind) {
    rs_ruleset *rs = c->rs;
    size_t cap = rs->caprules;
    XGROW(rs->rules, cap, rs->nrules + 1);
    rs->caprules = (uint32_t)cap;
    rule *ru = &rs->rules[rs->nrules++];
    memset(ru, 0, sizeof *ru);
    ru->kind = kind;
    ru->file = xstrdup(c->r->d->file ? c->r->d->file : "");
    diag_linecol(c->r->src, c->r->n, X(c, form)->off, &ru->line, &ru->col);
    return ru;
}

static void push_u32(uint32_t **a, uint32_t *n, uint32_t v) {
    *a = xrealloc(*a, (*n + 1) * sizeof **a);
    (*a)[(*n)++] = v;
}

/* name and doc: (KIND NAME "doc" ...) */
static bool name_doc(cc *c, uint32_t form, char **name, char **doc) {
    sx *x = X(c, form);
    if (x->n < 3 || X(c, K(c, form, 1))->kind != SX_SYM || X(c, K(c, form, 2))->kind != SX_STR) {
        cc_error(c, form, "expected (%.*s NAME \"doc string\" ...)", (int)X(c, K(c, form, 0))->len,
                 sym_text(c, K(c, form, 0)));
        return false;
    }
    *name = xstrndup(sym_text(c, K(c, form, 1)), X(c, K(c, form, 1))->len);
    *doc = xstrdup(X(c, K(c, form, 2))->str);
    if (!**doc) cc_error(c, K(c, form, 2), "the doc string is empty");
    return true;
}

static void check_unused(cc *c, rule *ru, uint32_t form) {
    for (uint32_t v = 0; v < ru->nvars; v++)
        if (c->uses[v] < 2 && strncmp(ru->vnames[v], "?_", 2) != 0)
            cc_error(c, form, "rule %s: variable %s is bound but never used (name it ?_%s if intended)", ru->name,
                     ru->vnames[v], ru->vnames[v] + 1);
}

static bool contains_kind(const em_prog *p, uint32_t pat, uint8_t kind) {
    const em_pat *t = &p->pats[pat];
    if (t->kind == kind) return true;
    for (uint32_t i = 0; i < t->nkids; i++)
        if (contains_kind(p, p->kids[t->kids + i], kind)) return true;
    for (uint32_t i = 0; i < t->nattrs; i++)
        if (contains_kind(p, p->attrs[t->attrs + i].val, kind)) return true;
    return false;
}

/* A new rule of this kind for form, with its name and doc read and checked
 * to be unique; NULL (the rule named "?") when they do not read. */
static rule *begin_rule(cc *c, uint32_t form, uint8_t kind) {
    rule *ru = new_rule(c, form, kind);
    c->ru = ru;
    if (!name_doc(c, form, &ru->name, &ru->doc)) {
        ru->name = xstrdup("?");
        return NULL;
    }
    for (uint32_t i = 0; i + 1 < c->rs->nrules; i++)
        if (strcmp(c->rs->rules[i].name, ru->name) == 0) cc_error(c, K(c, form, 1), "rule %s defined twice", ru->name);
    return ru;
}

static void lint_example(cc *c, rule *ru, uint32_t at, uint32_t ex);

/* (rewrite NAME "doc" LHS => RHS (when E)* (ac)? (example T)+) */
static void form_rewrite(cc *c, uint32_t form) {
    rule *ru = begin_rule(c, form, RK_REWRITE);
    if (!ru) return;
    sx *x = X(c, form);
    if (x->n < 6 || !(sym_is(c, K(c, form, 4), "=>") || sym_is(c, K(c, form, 4), "<=>"))) {
        cc_error(c, form, "expected (rewrite NAME \"doc\" LHS => RHS options...)");
        return;
    }
    ru->both = sym_is(c, K(c, form, 4), "<=>");
    uint32_t lhs_at = K(c, form, 3);
    ru->lhs = cpat(c, lhs_at, SIDE_LHS);
    if (c->rs->prog.pats[ru->lhs].kind == EM_VAR) cc_error(c, lhs_at, "a left-hand side must not be a bare variable");
    uint32_t nlhs = ru->nvars, before[256];
    for (uint32_t v = 0; v < nlhs && v < 256; v++) before[v] = c->uses[v];
    ru->rhs = cpat(c, K(c, form, 5), SIDE_RHS);
    if (ru->both) {
        for (uint32_t v = 0; v < nlhs && v < 256; v++)
            if (c->uses[v] == before[v] && strncmp(ru->vnames[v], "?_", 2) != 0)
                cc_error(c, K(c, form, 5), "rule %s: %s does not appear on the right-hand side of a <=> rule", ru->name,
                         ru->vnames[v]);
        if (contains_kind(&c->rs->prog, ru->rhs, EM_CALL) || contains_kind(&c->rs->prog, ru->lhs, EM_AS))
            cc_error(c, K(c, form, 4), "a <=> rule's sides must both be patterns (no (as ...), no computed attributes)");
    }
    uint32_t examples_at[64], nex = 0;
    for (uint32_t k = 6; k < x->n; k++) {
        uint32_t o = K(c, form, k);
        if (X(c, o)->kind != SX_LIST || X(c, o)->n == 0) {
            cc_error(c, o, "expected an option: (when EXPR), (ac) or (example TERM)");
            continue;
        }
        uint32_t h = K(c, o, 0);
        if (sym_is(c, h, "when") && X(c, o)->n == 2) {
            push_u32(&ru->conds, &ru->nconds, cexpr(c, K(c, o, 1), SIDE_EXPR));
        } else if (sym_is(c, h, "ac") && X(c, o)->n == 1) {
            ru->ac = true;
        } else if (sym_is(c, h, "example") && X(c, o)->n == 2) {
            rule *keep = c->ru;
            c->ru = NULL;
            push_u32(&ru->examples, &ru->nexamples, cpat(c, K(c, o, 1), SIDE_TERM));
            c->ru = keep;
            if (nex < 64) examples_at[nex++] = o;
        } else {
            cc_error(c, o, "unknown option (expected (when EXPR), (ac) or (example TERM))");
        }
    }
    check_unused(c, ru, form);
    if (!ru->nexamples) cc_error(c, form, "rule %s has no (example ...)", ru->name);
    if (c->errors) return; /* examples are only meaningful for a well-formed rule */
    for (uint32_t e = 0; e < ru->nexamples && e < nex; e++) lint_example(c, ru, examples_at[e], ru->examples[e]);
}

/* atom -> (REL arg...) | (match ?c PATTERN) | (when EXPR)          (body)
 *       | (REL arg...) | (union ?a TERM)                           (head) */
static uint32_t catom(cc *c, uint32_t a, bool head) {
    em_prog *pr = &c->rs->prog;
    sx *x = X(c, a);
    if (x->kind != SX_LIST || x->n == 0 || X(c, K(c, a, 0))->kind != SX_SYM) {
        cc_error(c, a, "expected an atom: (relation args...), (match ?c pattern), (when expr) or (union ?a term)");
        return em_pat_new(pr, EM_INT, x->off);
    }
    uint32_t h = K(c, a, 0);
    if (!head && sym_is(c, h, "when") && x->n == 2) {
        uint32_t p = em_pat_new(pr, EM_WHEN, x->off), e = cexpr(c, K(c, a, 1), SIDE_EXPR);
        set_kids(c, p, &e, 1);
        return p;
    }
    if (!head && sym_is(c, h, "match") && x->n == 3 && is_var(c, K(c, a, 1))) {
        uint32_t p = em_pat_new(pr, EM_MATCHES, x->off), as = em_pat_new(pr, EM_AS, x->off);
        int v = var_ref(c, K(c, a, 1), VK_CLASS, true);
        uint32_t sub = cpat(c, K(c, a, 2), SIDE_LHS);
        pr->pats[as].var = pr->pats[p].var = v < 0 ? 0 : (uint32_t)v;
        set_kids(c, as, &sub, 1);
        set_kids(c, p, &as, 1);
        c->ru->has_match_atom = true;
        return p;
    }
    if (head && sym_is(c, h, "union") && x->n == 3 && is_var(c, K(c, a, 1))) {
        uint32_t p = em_pat_new(pr, EM_UNION, x->off);
        uint32_t k[2] = {pat_var(c, K(c, a, 1), var_ref(c, K(c, a, 1), VK_CLASS, false)), cpat(c, K(c, a, 2), SIDE_RHS)};
        set_kids(c, p, k, 2);
        c->ru->has_union_head = true;
        return p;
    }
    char name[128];
    snprintf(name, sizeof name, "%.*s", (int)X(c, h)->len, sym_text(c, h));
    int rel = rs_relation_find(c->rs, name);
    uint32_t p = em_pat_new(pr, EM_REL, x->off);
    if (rel < 0) {
        cc_error(c, h, "unknown relation '%s' (declare it with (relation ...))", name);
        return p;
    }
    const relation *R = &c->rs->rels[rel];
    if (x->n - 1 != R->arity) {
        cc_error(c, a, "relation %s has %u columns, not %u", name, R->arity, x->n - 1);
        return p;
    }
    pr->pats[p].op = (uint16_t)rel;
    uint32_t ks[EM_REL_MAX_ARITY];
    for (uint32_t k = 0; k < R->arity; k++) {
        uint32_t arg = K(c, a, k + 1);
        if (R->is_class[k]) {
            if (!is_var(c, arg)) {
                cc_error(c, arg, "column %u of %s holds e-classes: give a variable", k + 1, name);
                ks[k] = em_pat_new(pr, EM_INT, X(c, arg)->off);
            } else {
                ks[k] = pat_var(c, arg, var_ref(c, arg, VK_CLASS, !head));
            }
        } else if (!head) {
            if (is_var(c, arg)) ks[k] = pat_var(c, arg, var_ref(c, arg, VK_VALUE, true));
            else if (X(c, arg)->kind == SX_INT) ks[k] = cexpr(c, arg, SIDE_EXPR);
            else {
                cc_error(c, arg, "a body atom's arguments are variables or integers");
                ks[k] = em_pat_new(pr, EM_INT, X(c, arg)->off);
            }
        } else {
            ks[k] = cexpr(c, arg, SIDE_EXPR);
        }
    }
    set_kids(c, p, ks, R->arity);
    return p;
}

/* example item -> (REL arg...) with terms or integers as arguments | TERM */
static uint32_t cexample_item(cc *c, uint32_t a) {
    em_prog *pr = &c->rs->prog;
    sx *x = X(c, a);
    if (x->kind == SX_LIST && x->n > 0 && X(c, K(c, a, 0))->kind == SX_SYM) {
        char name[128];
        snprintf(name, sizeof name, "%.*s", (int)X(c, K(c, a, 0))->len, sym_text(c, K(c, a, 0)));
        int rel = rs_relation_find(c->rs, name);
        if (rel >= 0) {
            const relation *R = &c->rs->rels[rel];
            uint32_t p = em_pat_new(pr, EM_REL, x->off), ks[EM_REL_MAX_ARITY];
            if (x->n - 1 != R->arity) {
                cc_error(c, a, "relation %s has %u columns, not %u", name, R->arity, x->n - 1);
                return p;
            }
            for (uint32_t k = 0; k < R->arity; k++)
                ks[k] = R->is_class[k] ? cpat(c, K(c, a, k + 1), SIDE_TERM) : cexpr(c, K(c, a, k + 1), SIDE_TERM);
            pr->pats[p].op = (uint16_t)rel;
            set_kids(c, p, ks, R->arity);
            return p;
        }
    }
    return cpat(c, a, SIDE_TERM);
}

static void lint_relation_example(cc *c, rule *ru, uint32_t at, uint32_t ex);

/* (rule NAME "doc" (ATOM...) => (HEAD...) (example ITEM...)+) */
static void form_rule(cc *c, uint32_t form) {
    rule *ru = begin_rule(c, form, RK_RELATION);
    if (!ru) return;
    sx *x = X(c, form);
    if (x->n < 6 || X(c, K(c, form, 3))->kind != SX_LIST || !sym_is(c, K(c, form, 4), "=>") ||
        X(c, K(c, form, 5))->kind != SX_LIST) {
        cc_error(c, form, "expected (rule NAME \"doc\" (body atoms...) => (head atoms...) options...)");
        return;
    }
    uint32_t b = K(c, form, 3), hd = K(c, form, 5);
    for (uint32_t k = 0; k < X(c, b)->n; k++) push_u32(&ru->body, &ru->nbody, catom(c, K(c, b, k), false));
    for (uint32_t k = 0; k < X(c, hd)->n; k++) push_u32(&ru->heads, &ru->nheads, catom(c, K(c, hd, k), true));
    if (!ru->nheads) cc_error(c, hd, "rule %s has no head", ru->name);
    uint32_t examples_at[64], nex = 0;
    for (uint32_t k = 6; k < x->n; k++) {
        uint32_t o = K(c, form, k);
        if (X(c, o)->kind == SX_LIST && X(c, o)->n >= 2 && sym_is(c, K(c, o, 0), "example")) {
            rule *keep = c->ru;
            c->ru = NULL;
            uint32_t items[64], ni = 0;
            for (uint32_t j = 1; j < X(c, o)->n && ni < 64; j++) items[ni++] = cexample_item(c, K(c, o, j));
            c->ru = keep;
            uint32_t p = em_pat_new(&c->rs->prog, EM_LIST, X(c, o)->off);
            set_kids(c, p, items, ni);
            push_u32(&ru->examples, &ru->nexamples, p);
            if (nex < 64) examples_at[nex++] = o;
        } else {
            cc_error(c, o, "unknown option (expected (example ITEM...))");
        }
    }
    check_unused(c, ru, form);
    if (!ru->nexamples) cc_error(c, form, "rule %s has no (example ...)", ru->name);
    if (c->errors) return;
    for (uint32_t e = 0; e < ru->nexamples && e < nex; e++) lint_relation_example(c, ru, examples_at[e], ru->examples[e]);
}

/* (relation NAME "doc" class|int ...) */
static void form_relation(cc *c, uint32_t form) {
    char *name, *doc;
    if (!name_doc(c, form, &name, &doc)) return;
    free(doc);
    if (rs_relation_find(c->rs, name) >= 0) cc_error(c, K(c, form, 1), "relation %s declared twice", name);
    uint32_t arity = X(c, form)->n - 3;
    if (arity < 1 || arity > EM_REL_MAX_ARITY) {
        cc_error(c, form, "a relation has 1 to %d columns", EM_REL_MAX_ARITY);
        free(name);
        return;
    }
    relation R = {.name = name, .arity = arity};
    for (uint32_t k = 0; k < arity; k++) {
        uint32_t a = K(c, form, k + 3);
        if (sym_is(c, a, "class")) R.is_class[k] = 1;
        else if (!sym_is(c, a, "int")) cc_error(c, a, "a column is 'class' or 'int'");
    }
    size_t cap = c->rs->caprels;
    XGROW(c->rs->rels, cap, c->rs->nrels + 1);
    c->rs->caprels = (uint32_t)cap;
    c->rs->rels[c->rs->nrels++] = R;
}

/* (opclass NAME "doc" op... (custom-call "target")...) */
static void form_opclass(cc *c, uint32_t form) {
    char *name, *doc;
    if (!name_doc(c, form, &name, &doc)) return;
    free(doc);
    em_prog *pr = &c->rs->prog;
    int cls = em_opclass_add(pr, name, strlen(name));
    free(name);
    for (uint32_t k = 3; k < X(c, form)->n; k++) {
        uint32_t a = K(c, form, k);
        if (X(c, a)->kind == SX_SYM) {
            int op = hlo_op_from_name(sym_text(c, a), X(c, a)->len);
            if (op == OP_UNKNOWN) cc_error(c, a, "unknown op '%.*s'", (int)X(c, a)->len, sym_text(c, a));
            else pr->classes[cls].ops[op] = 1;
        } else if (X(c, a)->kind == SX_LIST && X(c, a)->n == 2 && sym_is(c, K(c, a, 0), "custom-call") &&
                   X(c, K(c, a, 1))->kind == SX_STR) {
            em_opclass *oc = &pr->classes[cls];
            oc->targets = xrealloc(oc->targets, (oc->ntargets + 1) * sizeof *oc->targets);
            oc->targets[oc->ntargets++] = xstrdup(X(c, K(c, a, 1))->str);
        } else {
            cc_error(c, a, "an op class member is an op name or (custom-call \"target\")");
        }
    }
}

int rs_load_text(rs_ruleset *rs, const char *name, const char *src, size_t n, diag *d) {
    const char *keep = d->file;
    int before = d->count;
    d->file = name;
    reader r = {.src = src, .n = n, .d = d};
    cc c = {.rs = rs, .r = &r};
    for (;;) {
        skip_ws(&r);
        if (r.pos >= r.n) break;
        uint32_t f = read_datum(&r, 0);
        if (f == UINT32_MAX) break;
        if (X(&c, f)->kind != SX_LIST || X(&c, f)->n == 0) {
            cc_error(&c, f, "expected (rewrite ...), (rule ...), (relation ...) or (opclass ...)");
            continue;
        }
        uint32_t h = K(&c, f, 0);
        int errs = c.errors;
        c.errors = 0;
        c.ru = NULL;
        if (sym_is(&c, h, "rewrite")) form_rewrite(&c, f);
        else if (sym_is(&c, h, "rule")) form_rule(&c, f);
        else if (sym_is(&c, h, "relation")) form_relation(&c, f);
        else if (sym_is(&c, h, "opclass")) form_opclass(&c, f);
        else cc_error(&c, h, "unknown form (expected rewrite, rule, relation or opclass)");
        c.errors += errs;
    }
    free(c.uses);
    reader_free(&r);
    d->file = keep;
    return d->count - before;
}

int rs_load_file(rs_ruleset *rs, const char *path, diag *d) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        const char *keep = d->file;
        d->file = path;
        diag_plain(d, "cannot read the file");
        d->file = keep;
        return 1;
    }
    strbuf b;
    sb_init(&b);
    char buf[65536];
    size_t got;
    while ((got = fread(buf, 1, sizeof buf, f)) > 0) sb_put(&b, buf, got);
    fclose(f);
    int e = rs_load_text(rs, path, b.s ? b.s : "", b.len, d);
    sb_free(&b);
    return e;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

char **rs_list_dir(const char *dir, size_t *n) {
    *n = 0;
    DIR *dh = dir ? opendir(dir) : NULL;
    if (!dh) return NULL;
    char **paths = xcalloc(1, sizeof *paths);
    size_t cap = 1;
    struct dirent *e;
    while ((e = readdir(dh))) {
        size_t l = strlen(e->d_name);
        if (l > 6 && strcmp(e->d_name + l - 6, ".rules") == 0) {
            XGROW(paths, cap, *n + 1);
            strbuf p;
            sb_init(&p);
            sb_printf(&p, "%s/%s", dir, e->d_name);
            paths[(*n)++] = sb_take(&p);
        }
    }
    closedir(dh);
    qsort(paths, *n, sizeof *paths, cmp_str);
    return paths;
}

size_t rs_dir_digest(const char *dir, uint8_t out[32]) {
    strbuf all;
    sb_init(&all);
    size_t n;
    char **paths = rs_list_dir(dir, &n);
    for (size_t i = 0; i < n; i++) {
        diag d;
        diag_init(&d, paths[i]);
        size_t len;
        char *txt = io_read_file(paths[i], &len, NULL, &d);
        const char *base = strrchr(paths[i], '/');
        sb_printf(&all, "%s\n", base ? base + 1 : paths[i]);
        if (txt) sb_put(&all, txt, len);
        free(txt);
        diag_free(&d);
    }
    rs_paths_free(paths, n);
    sha256(all.s ? all.s : "", all.len, out);
    sb_free(&all);
    return n;
}

void rs_paths_free(char **paths, size_t n) {
    for (size_t i = 0; i < n; i++) free(paths[i]);
    free(paths);
}

int rs_load_dir(rs_ruleset *rs, const char *dir, diag *d) {
    size_t n;
    char **paths = rs_list_dir(dir, &n);
    if (!paths) {
        const char *keep = d->file;
        d->file = dir;
        diag_plain(d, "cannot open the rules directory");
        d->file = keep;
        return 1;
    }
    int errs = 0;
    for (size_t i = 0; i < n; i++) errs += rs_load_file(rs, paths[i], d);
    rs_paths_free(paths, n);
    return errs;
}

eid rs_add_term(rs_ruleset *rs, egraph *g, const char *src, size_t n, diag *d) {
    reader r = {.src = src, .n = n, .d = d};
    cc c = {.rs = rs, .r = &r};
    uint32_t f = read_datum(&r, 0);
    eid out = EID_NONE;
    if (f != UINT32_MAX) {
        uint32_t p = cpat(&c, f, SIDE_TERM);
        if (!c.errors) {
            strbuf why;
            sb_init(&why);
            out = em_build(g, &rs->prog, p, NULL, 0, EG_BASELINE, &why);
            if (out == EID_NONE) diag_text(d, src, n, X(&c, f)->off, "the term does not type-check: %s", why.s ? why.s : "");
            sb_free(&why);
        }
    }
    free(c.uses);
    reader_free(&r);
    return out;
}

/* ---- relation facts ---- */

struct rs_db {
    em_rel *rels;
    uint32_t nrels;
};

rs_db *rs_db_new(const rs_ruleset *rs) {
    rs_db *db = xcalloc(1, sizeof *db);
    db->nrels = rs->nrels;
    db->rels = xcalloc(rs->nrels ? rs->nrels : 1, sizeof *db->rels);
    for (uint32_t i = 0; i < rs->nrels; i++) em_rel_init(&db->rels[i], rs->rels[i].name, rs->rels[i].arity, rs->rels[i].is_class);
    return db;
}

void rs_db_free(rs_db *db) {
    if (!db) return;
    for (uint32_t i = 0; i < db->nrels; i++) em_rel_free(&db->rels[i]);
    free(db->rels);
    free(db);
}

static void canon_row(const em_rel *r, egraph *g, const int64_t *row, int64_t *out) {
    for (uint32_t c = 0; c < r->arity; c++) out[c] = r->is_class[c] ? (int64_t)eg_find(g, (eid)row[c]) : row[c];
}

bool rs_db_insert(rs_db *db, egraph *g, int rel, const int64_t *row) {
    int64_t c[EM_REL_MAX_ARITY];
    canon_row(&db->rels[rel], g, row, c);
    return em_rel_insert(&db->rels[rel], c, 0);
}

bool rs_db_contains(rs_db *db, egraph *g, int rel, const int64_t *row) {
    int64_t c[EM_REL_MAX_ARITY];
    canon_row(&db->rels[rel], g, row, c);
    return em_rel_contains(&db->rels[rel], c);
}

size_t rs_db_count(const rs_db *db, int rel) { return db->rels[rel].n; }
const int64_t *rs_db_row(const rs_db *db, int rel, size_t i) { return db->rels[rel].rows + i * db->rels[rel].arity; }

/* ---- saturation ---- */

typedef struct run {
    const rs_ruleset *rs;
    egraph *g;
    rs_db *db;
    rs_budget b;
    rs_result *r;
    const bool *only;
    em_index ix;
    em_vec scratch;
    int64_t *q; /* queued matches: kind|index, root, per variable 6 words, nwords, words */
    size_t nq, capq;
    direction *dirs;
    uint32_t ndirs;
    uint64_t rule_matches;
    bool truncated, timeout;
    double t0;
    uint32_t *tsize, *tstamp; /* AC guard: term size per class, valid when tstamp == iteration */
    size_t ntsize;
    uint32_t *last;           /* per rule: epoch of its previous evaluation (semi-naive) */
    uint64_t *last_version;
    uint64_t version;         /* bumps on every e-graph change */
    uint32_t epoch;
    em_subst apply;
    uint32_t maxvars;
} run;

enum { Q_REWRITE = 0, Q_RELATION = 1 };

static void enqueue(run *u, uint32_t kind, uint32_t index, const em_subst *s) {
    size_t need = 4 + 6 * (size_t)s->nvars + s->nwords;
    XGROW(u->q, u->capq, u->nq + need);
    int64_t *w = u->q + u->nq;
    *w++ = kind;
    *w++ = index;
    *w++ = s->root;
    for (uint32_t v = 0; v < s->nvars; v++) {
        *w++ = s->cls[v];
        *w++ = s->voff[v];
        *w++ = s->vlen[v];
        *w++ = s->op[v];
        *w++ = s->oattr[v];
        *w++ = s->odt[v];
    }
    *w++ = (int64_t)s->nwords;
    if (s->nwords) memcpy(w, s->words, s->nwords * sizeof *w);
    u->nq += need;
}

/* Decodes the match at q[pos] into u->apply (nvars of the rule); returns the next position. */
static size_t dequeue(run *u, size_t pos, uint32_t nvars, uint32_t *kind, uint32_t *index) {
    const int64_t *w = u->q + pos;
    em_subst *s = &u->apply;
    *kind = (uint32_t)*w++;
    *index = (uint32_t)*w++;
    s->root = (eid)*w++;
    s->nvars = nvars;
    for (uint32_t v = 0; v < nvars; v++) {
        s->cls[v] = (eid)*w++;
        s->voff[v] = (uint32_t)*w++;
        s->vlen[v] = (uint32_t)*w++;
        s->op[v] = (uint16_t)*w++;
        s->oattr[v] = (uint32_t)*w++;
        s->odt[v] = (uint8_t)*w++;
    }
    size_t nw = (size_t)*w++;
    s->nwords = 0;
    XGROW(s->words, s->capwords, nw + 1);
    if (nw) memcpy(s->words, w, nw * sizeof *w);
    s->nwords = nw;
    return (size_t)(w + nw - u->q);
}

static bool over_time(run *u) {
    if (u->timeout) return true;
    if (now_ms() - u->t0 >= u->b.time_limit_ms) u->timeout = true;
    return u->timeout;
}

static uint32_t term_size(run *u, eid c, uint32_t depth) {
    uint32_t lim = u->b.ac_term_limit + 1;
    c = eg_find(u->g, c);
    if (depth >= lim) return lim;
    if (c < u->ntsize && u->tstamp[c] == u->r->iterations) return u->tsize[c];
    if (c < u->ntsize) {
        u->tstamp[c] = u->r->iterations;
        u->tsize[c] = lim; /* in progress: a cycle counts as too large */
    }
    eid node = eg_class_first(u->g, c);
    uint32_t n, s = 1;
    const eid *ch = eg_node_children(u->g, node, &n);
    for (uint32_t i = 0; i < n && s < lim; i++) {
        s += term_size(u, ch[i], depth + 1);
        ch = eg_node_children(u->g, node, &n);
    }
    if (s > lim) s = lim;
    if (c < u->ntsize) u->tsize[c] = s;
    return s;
}

static bool ac_ok(run *u, eid root) {
    uint32_t count = 0;
    for (eid n = eg_class_first(u->g, root); n != EID_NONE && count <= u->b.ac_class_limit; n = eg_class_next(u->g, n))
        count++;
    if (count > u->b.ac_class_limit) return false;
    return term_size(u, root, 0) <= u->b.ac_term_limit;
}

typedef struct search_ctx {
    run *u;
    const rule *ru;
    uint32_t dir;
} search_ctx;

static bool on_rewrite_match(void *ctx, em_subst *s) {
    search_ctx *sc = ctx;
    run *u = sc->u;
    if (++u->rule_matches > u->b.match_limit) {
        u->truncated = true;
        return false;
    }
    if ((u->rule_matches & 1023) == 0 && over_time(u)) return false;
    if (sc->ru->ac && !ac_ok(u, s->root)) return true;
    for (uint32_t i = 0; i < sc->ru->nconds; i++)
        if (!em_eval_true(u->g, &u->rs->prog, sc->ru->conds[i], s, &u->scratch)) return true;
    u->r->matches++;
    enqueue(u, Q_REWRITE, sc->dir, s);
    return true;
}

static void search_rewrite(run *u, uint32_t d) {
    const direction *dr = &u->dirs[d];
    const rule *ru = &u->rs->rules[dr->rule];
    const em_prog *p = &u->rs->prog;
    search_ctx sc = {u, ru, d};
    em_subst s;
    em_subst_init(&s, ru->nvars);
    u->rule_matches = 0;
    int op = em_pat_root_op(p, dr->lhs);
    uint32_t lo = op >= 0 ? u->ix.start[op] : 0, hi = op >= 0 ? u->ix.start[op + 1] : u->ix.start[EM_MAX_OP];
    for (uint32_t i = lo; i < hi; i++) {
        if (!em_match_node(u->g, p, dr->lhs, u->ix.nodes[i], &s, on_rewrite_match, &sc)) break;
    }
    em_subst_free(&s);
}

/* ---- relation rules: nested-loop join, semi-naive over relation atoms ---- */

typedef struct join_ctx {
    run *u;
    uint32_t rule, atom;
    int variant; /* -1: full evaluation; else the atom that ranges over new facts */
    uint32_t last;
    em_subst *s;
} join_ctx;

static void join(join_ctx *j, uint32_t atom);

static bool on_join_match(void *ctx, em_subst *s) {
    join_ctx *j = ctx;
    (void)s;
    join(j, j->atom);
    return !j->u->timeout;
}

static void fire_heads(join_ctx *j) {
    run *u = j->u;
    const rule *ru = &u->rs->rules[j->rule];
    const em_prog *p = &u->rs->prog;
    for (uint32_t h = 0; h < ru->nheads; h++) {
        const em_pat *t = &p->pats[ru->heads[h]];
        if (t->kind != EM_REL) continue;
        em_rel *R = &u->db->rels[t->op];
        int64_t row[EM_REL_MAX_ARITY];
        bool ok = true;
        for (uint32_t k = 0; k < R->arity && ok; k++) {
            const em_pat *a = &p->pats[p->kids[t->kids + k]];
            if (R->is_class[k]) {
                row[k] = eg_find(u->g, j->s->cls[a->var]);
            } else {
                size_t o;
                uint32_t l;
                u->scratch.n = 0;
                ok = em_eval(u->g, p, p->kids[t->kids + k], j->s, &u->scratch, &o, &l) && l == 1;
                if (ok) row[k] = u->scratch.w[o];
            }
        }
        if (ok && em_rel_insert(R, row, u->epoch)) {
            u->r->fired[j->rule]++;
            u->r->facts++;
        }
    }
    if (ru->has_union_head) {
        u->r->matches++;
        enqueue(u, Q_RELATION, j->rule, j->s);
    }
}

static void join(join_ctx *j, uint32_t atom) {
    run *u = j->u;
    const rule *ru = &u->rs->rules[j->rule];
    const em_prog *p = &u->rs->prog;
    em_subst *s = j->s;
    if (u->timeout) return;
    if (atom == ru->nbody) {
        fire_heads(j);
        return;
    }
    const em_pat *t = &p->pats[ru->body[atom]];
    switch (t->kind) {
    case EM_WHEN:
        if (em_eval_true(u->g, p, p->kids[t->kids], s, &u->scratch)) join(j, atom + 1);
        return;
    case EM_MATCHES: {
        join_ctx next = *j;
        next.atom = atom + 1;
        uint32_t as = p->kids[t->kids];
        if (s->cls[t->var] != EID_NONE) {
            em_match_class(u->g, p, as, s->cls[t->var], s, on_join_match, &next);
            return;
        }
        int op = em_pat_root_op(p, as);
        uint32_t lo = op >= 0 ? u->ix.start[op] : 0, hi = op >= 0 ? u->ix.start[op + 1] : u->ix.start[EM_MAX_OP];
        for (uint32_t i = lo; i < hi && !u->timeout; i++) em_match_node(u->g, p, as, u->ix.nodes[i], s, on_join_match, &next);
        return;
    }
    case EM_REL: {
        em_rel *R = &u->db->rels[t->op];
        size_t n = R->n;
        for (size_t r = 0; r < n; r++) {
            uint32_t st = R->stamp[r];
            if (j->variant >= 0) {
                if ((int)atom < j->variant && st >= j->last) continue;
                if ((int)atom == j->variant && st < j->last) continue;
            }
            const int64_t *row = R->rows + r * R->arity;
            uint32_t bound[EM_REL_MAX_ARITY], nb = 0;
            size_t nw = s->nwords;
            bool ok = true;
            for (uint32_t k = 0; k < R->arity && ok; k++) {
                const em_pat *a = &p->pats[p->kids[t->kids + k]];
                if (a->kind == EM_INT) {
                    ok = row[k] == a->ival;
                } else if (R->is_class[k]) {
                    if (s->cls[a->var] == EID_NONE) {
                        s->cls[a->var] = (eid)row[k];
                        bound[nb++] = a->var;
                    } else {
                        ok = eg_find(u->g, s->cls[a->var]) == (eid)row[k];
                    }
                } else if (s->vlen[a->var] == UINT32_MAX) {
                    em_subst_bind_value(s, a->var, row + k, 1);
                    bound[nb++] = a->var | 0x80000000u;
                } else {
                    ok = s->vlen[a->var] == 1 && s->words[s->voff[a->var]] == row[k];
                }
            }
            if (ok) join(j, atom + 1);
            for (uint32_t b = 0; b < nb; b++) {
                if (bound[b] & 0x80000000u) s->vlen[bound[b] & 0x7fffffffu] = UINT32_MAX;
                else s->cls[bound[b]] = EID_NONE;
            }
            s->nwords = nw;
            R = &u->db->rels[t->op]; /* heads may have grown the table */
        }
        return;
    }
    default: return;
    }
}

static void eval_relation_rule(run *u, uint32_t ri) {
    const rule *ru = &u->rs->rules[ri];
    const em_prog *p = &u->rs->prog;
    em_subst s;
    em_subst_init(&s, ru->nvars);
    join_ctx j = {.u = u, .rule = ri, .s = &s, .last = u->last[ri]};
    bool full = u->last[ri] == 0 || (ru->has_match_atom && u->last_version[ri] != u->version);
    if (full) {
        j.variant = -1;
        join(&j, 0);
    } else {
        for (uint32_t a = 0; a < ru->nbody; a++)
            if (p->pats[ru->body[a]].kind == EM_REL) {
                j.variant = (int)a;
                join(&j, 0);
            }
    }
    u->last[ri] = u->epoch;
    u->last_version[ri] = u->version;
    em_subst_free(&s);
}

static void conflict(run *u, const rule *ru, const char *what, strbuf *why) {
    if (u->r->message) return;
    strbuf m;
    sb_init(&m);
    sb_printf(&m, "rule %s (%s:%d:%d): %s: %s", ru->name, ru->file, ru->line, ru->col, what, why->s ? why->s : "");
    u->r->message = sb_take(&m);
}

/* Applies every queued match; returns false on a conflict. */
static bool apply_all(run *u) {
    const em_prog *p = &u->rs->prog;
    strbuf why;
    sb_init(&why);
    bool ok = true;
    size_t pos = 0;
    while (pos < u->nq && ok) {
        uint32_t kind = (uint32_t)u->q[pos], index = (uint32_t)u->q[pos + 1];
        uint32_t ri = kind == Q_REWRITE ? u->dirs[index].rule : index;
        const rule *ru = &u->rs->rules[ri];
        pos = dequeue(u, pos, ru->nvars, &kind, &index);
        if (eg_node_count(u->g) >= u->b.node_limit) break;
        if ((pos & 255) == 0 && over_time(u)) break;
        uint32_t nb = kind == Q_REWRITE ? 1 : ru->nheads;
        for (uint32_t h = 0; h < nb && ok; h++) {
            eid a, built;
            sb_reset(&why);
            if (kind == Q_REWRITE) {
                a = u->apply.root;
                built = em_build(u->g, p, u->dirs[index].rhs, &u->apply, eg_class_type(u->g, a), 0, &why);
            } else {
                const em_pat *t = &p->pats[ru->heads[h]];
                if (t->kind != EM_UNION) continue;
                a = u->apply.cls[p->pats[p->kids[t->kids]].var];
                built = em_build(u->g, p, p->kids[t->kids + 1], &u->apply, eg_class_type(u->g, a), 0, &why);
            }
            if (built == EID_NONE) {
                conflict(u, ru, "the right-hand side does not type-check", &why);
                ok = false;
                break;
            }
            sb_reset(&why);
            int m = eg_union(u->g, a, built, &why);
            if (m < 0) {
                conflict(u, ru, "union of different types", &why);
                ok = false;
            } else if (m > 0) {
                u->r->fired[ri]++;
                u->r->unions++;
                u->version++;
            }
        }
    }
    sb_free(&why);
    u->nq = 0;
    return ok;
}

rs_stop rs_run(const rs_ruleset *rs, egraph *g, rs_db *db, const rs_budget *b, const bool *only, rs_result *r) {
    memset(r, 0, sizeof *r);
    r->nrules = rs->nrules;
    r->fired = xcalloc(rs->nrules ? rs->nrules : 1, sizeof *r->fired);
    run u = {.rs = rs, .g = g, .db = db, .b = *b, .r = r, .only = only, .t0 = now_ms()};
    rs_db *own = NULL;
    if (!db) u.db = own = rs_db_new(rs);
    for (uint32_t i = 0; i < rs->nrules; i++) {
        const rule *ru = &rs->rules[i];
        if (ru->nvars > u.maxvars) u.maxvars = ru->nvars;
        if (ru->kind != RK_REWRITE || (only && !only[i])) continue;
        u.dirs = xrealloc(u.dirs, (u.ndirs + 2) * sizeof *u.dirs);
        u.dirs[u.ndirs++] = (direction){i, ru->lhs, ru->rhs};
        if (ru->both && rs->prog.pats[ru->rhs].kind != EM_VAR) u.dirs[u.ndirs++] = (direction){i, ru->rhs, ru->lhs};
    }
    em_subst_init(&u.apply, u.maxvars);
    u.last = xcalloc(rs->nrules + 1, sizeof *u.last);
    u.last_version = xcalloc(rs->nrules + 1, sizeof *u.last_version);
    eg_rebuild(g);
    for (uint32_t k = 0; k < u.db->nrels; k++) em_rel_canon(&u.db->rels[k], g, 0);
    for (;;) {
        if (r->iterations >= b->iter_limit) {
            r->stop = STOP_ITERATION_LIMIT;
            break;
        }
        if (over_time(&u)) {
            r->stop = STOP_TIME_LIMIT;
            break;
        }
        if (eg_node_count(g) >= b->node_limit) {
            r->stop = STOP_NODE_LIMIT;
            break;
        }
        r->iterations++;
        u.epoch = r->iterations;
        u.truncated = false;
        uint32_t nodes0 = eg_node_count(g);
        uint64_t unions0 = r->unions, facts0 = r->facts;
        em_index_build(&u.ix, g);
        size_t nn = eg_node_count(g);
        if (nn > u.ntsize) {
            u.tsize = xrealloc(u.tsize, nn * sizeof *u.tsize);
            u.tstamp = xrealloc(u.tstamp, nn * sizeof *u.tstamp);
            memset(u.tstamp + u.ntsize, 0, (nn - u.ntsize) * sizeof *u.tstamp);
            u.ntsize = nn;
        }
        for (uint32_t d = 0; d < u.ndirs && !u.timeout; d++) search_rewrite(&u, d);
        for (uint32_t i = 0; i < rs->nrules && !u.timeout; i++)
            if (rs->rules[i].kind == RK_RELATION && (!only || only[i])) eval_relation_rule(&u, i);
        bool ok = apply_all(&u);
        uint64_t repairs = eg_rebuild(g);
        if (repairs) u.version++;
        if (eg_node_count(g) != nodes0) u.version++;
        size_t canon = 0;
        for (uint32_t k = 0; k < u.db->nrels; k++) canon += em_rel_canon(&u.db->rels[k], g, u.epoch);
        if (!ok) {
            r->stop = STOP_SHAPE_CONFLICT;
            break;
        }
        if (u.timeout) {
            r->stop = STOP_TIME_LIMIT;
            break;
        }
        bool changed = eg_node_count(g) != nodes0 || r->unions != unions0 || r->facts != facts0 || canon;
        if (!changed && !u.truncated) {
            r->stop = STOP_SATURATED;
            break;
        }
    }
    r->ms = now_ms() - u.t0;
    em_index_free(&u.ix);
    free(u.scratch.w);
    free(u.q);
    free(u.dirs);
    free(u.tsize);
    free(u.tstamp);
    free(u.last);
    free(u.last_version);
    em_subst_free(&u.apply);
    rs_db_free(own);
    return r->stop;
}

/* ---- linting examples ---- */

typedef struct first_ctx {
    egraph *g;
    const em_prog *p;
    const rule *ru;
    bool matched, passed;
    em_vec scratch;
} first_ctx;

static bool on_first(void *ctx, em_subst *s) {
    first_ctx *f = ctx;
    f->matched = true;
    for (uint32_t i = 0; i < f->ru->nconds; i++)
        if (!em_eval_true(f->g, f->p, f->ru->conds[i], s, &f->scratch)) return true;
    f->passed = true;
    return false;
}

static void lint_run_one(cc *c, rule *ru, uint32_t at, egraph *g, rs_db *db) {
    bool *only = xcalloc(c->rs->nrules, sizeof *only);
    only[ru - c->rs->rules] = true;
    rs_budget b = rs_budget_default();
    b.iter_limit = 4;
    b.time_limit_ms = 2000;
    rs_result res;
    rs_run(c->rs, g, db, &b, only, &res);
    if (res.stop == STOP_SHAPE_CONFLICT) cc_error(c, at, "rule %s on its example: %s", ru->name, res.message ? res.message : "");
    else if (!res.fired[ru - c->rs->rules])
        cc_error(c, at, "rule %s does not change its example (nothing new was derived)", ru->name);
    rs_result_free(&res);
    free(only);
}

static void lint_example(cc *c, rule *ru, uint32_t at, uint32_t ex) {
    egraph *g = eg_new();
    strbuf why;
    sb_init(&why);
    const em_prog *p = &c->rs->prog;
    eid root = em_build(g, p, ex, NULL, 0, EG_BASELINE, &why);
    if (root == EID_NONE) {
        cc_error(c, at, "rule %s: the example does not type-check: %s", ru->name, why.s ? why.s : "");
    } else {
        eg_rebuild(g);
        first_ctx f = {.g = g, .p = p, .ru = ru};
        em_subst s;
        em_subst_init(&s, ru->nvars);
        s.root = root;
        em_match_class(g, p, ru->lhs, root, &s, on_first, &f);
        em_subst_free(&s);
        free(f.scratch.w);
        if (!f.matched) cc_error(c, at, "rule %s: the example does not match the left-hand side", ru->name);
        else if (!f.passed) cc_error(c, at, "rule %s: the example matches but a (when ...) condition is false", ru->name);
        else lint_run_one(c, ru, at, g, NULL);
    }
    sb_free(&why);
    eg_free(g);
}

static void lint_relation_example(cc *c, rule *ru, uint32_t at, uint32_t ex) {
    egraph *g = eg_new();
    rs_db *db = rs_db_new(c->rs);
    strbuf why;
    sb_init(&why);
    const em_prog *p = &c->rs->prog;
    bool ok = true;
    for (uint32_t i = 0; i < p->pats[ex].nkids && ok; i++) {
        uint32_t it = p->kids[p->pats[ex].kids + i];
        const em_pat *t = &p->pats[it];
        if (t->kind == EM_REL) {
            int64_t row[EM_REL_MAX_ARITY];
            const relation *R = &c->rs->rels[t->op];
            for (uint32_t k = 0; k < R->arity && ok; k++) {
                uint32_t a = p->kids[t->kids + k];
                if (R->is_class[k]) {
                    eid e = em_build(g, p, a, NULL, 0, EG_BASELINE, &why);
                    ok = e != EID_NONE;
                    row[k] = e;
                } else {
                    em_vec v = {0};
                    size_t o;
                    uint32_t l;
                    em_subst none;
                    em_subst_init(&none, 0);
                    ok = em_eval(g, p, a, &none, &v, &o, &l) && l == 1;
                    if (ok) row[k] = v.w[o];
                    em_subst_free(&none);
                    free(v.w);
                }
            }
            if (ok) rs_db_insert(db, g, t->op, row);
        } else {
            ok = em_build(g, p, it, NULL, 0, EG_BASELINE, &why) != EID_NONE;
        }
    }
    if (!ok) cc_error(c, at, "rule %s: the example does not type-check: %s", ru->name, why.s ? why.s : "");
    else lint_run_one(c, ru, at, g, db);
    sb_free(&why);
    rs_db_free(db);
    eg_free(g);
}
