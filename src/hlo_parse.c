/* hlo_parse — HLO text → graph IR. Recursive descent over hlo_lex; every
 * grammar function carries its rule. The first error stops the parse (a longjmp
 * back to hlo_parse_text, which frees everything the parser held). */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hlo.h"
#include "hlo_lex.h"

typedef struct fixup {
    uint32_t comp, instr, attr, k;
    const char *name, *at;
    size_t n;
} fixup;

typedef struct parser {
    lexer lx;
    diag *d;
    hlo_module *m;
    jmp_buf fail;
    int depth;
    strbuf str;
    strbuf extra;                /* layout and metadata extras (never nested) */
    const char *last_op_name;    /* the previous metadata op_name (arena) */
    /* Shardings and replica groups already read, by their text (keys point
     * into the input): instructions that spell one alike share it (a deep
     * program's parameters and all-reduces repeat a handful). */
    strmap shared[2];            /* SHARED_SHARDING, SHARED_GROUPS */
    void **shared_ptr;
    size_t nshared, capshared;
    /* module */
    hlo_comp *comps;
    size_t capcomps;
    strmap comp_index;
    fixup *cfix;                 /* computation references, resolved at the end */
    size_t ncfix, capcfix;
    /* current computation */
    hlo_instr *ins;
    size_t nins, capins;
    strmap instr_index;
    /* The instruction being read: its name's hash, and the name, where it
     * starts and how many instructions preceded it, until the name is put
     * in instr_index (see parse_instruction). */
    uint64_t name_hash;
    const char *pending, *pending_at;
    size_t npending;
    size_t pending_nins;
    fixup *ifix;                 /* control-predecessors, resolved per computation */
    size_t nifix, capifix;
    /* line tracking: positions are asked for in increasing order, so count
     * newlines incrementally from the last answer (linear overall) */
    const char *line_at;
    int line_no;
    /* scratch */
    uint32_t *ops;
    size_t capops;
    hlo_attr *attrs;
    size_t capattrs;
    int64_t *ints, *ints2;
    size_t capints, capints2;
    uint32_t *starts;
    size_t capstarts;
    double *vals;
    size_t capvals;
    uint32_t *params;            /* current computation: parameter k's instruction */
    size_t capparams;
    attr_cache attrs_kept;       /* see own_attrs */
} parser;

static _Noreturn void fail(parser *ps, const char *at, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static _Noreturn void fail(parser *ps, const char *at, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (!at) at = ps->lx.p;
    /* An instruction whose name was taken is reported as such, whatever
     * error comes later in its line: the name is checked when it is put,
     * not when it is read (parse_instruction). */
    uint32_t seen;
    if (ps->pending && strmap_get(&ps->instr_index, ps->pending, ps->npending, &seen) && seen < ps->pending_nins) {
        snprintf(msg, sizeof msg, "instruction '%.*s' is defined twice", (int)ps->npending, ps->pending);
        at = ps->pending_at;
    }
    ps->pending = NULL;
    diag_text(ps->d, ps->lx.src, (size_t)(ps->lx.end - ps->lx.src), (size_t)(at - ps->lx.src), "%s", msg);
    longjmp(ps->fail, 1);
}

/* Line and column of at (at never precedes an earlier query's position). */
static void position(parser *ps, const char *at, uint32_t *line, uint32_t *col) {
    if (!ps->line_at || at < ps->line_at) {
        ps->line_at = ps->lx.src;
        ps->line_no = 1;
    }
    const char *p = ps->line_at, *nl;
    while ((nl = memchr(p, '\n', (size_t)(at - p))) != NULL) {
        ps->line_no++;
        p = nl + 1;
    }
    ps->line_at = p;  /* start of at's line */
    *line = (uint32_t)ps->line_no;
    *col = (uint32_t)(at - p) + 1;
}

static const char *here(parser *ps) {
    lex_skip(&ps->lx);
    return ps->lx.p;
}

static void expect(parser *ps, char c, const char *what) {
    if (!lex_accept(&ps->lx, c)) {
        const char *p = here(ps);
        if (p >= ps->lx.end) fail(ps, p, "expected '%c' %s, found end of input", c, what);
        fail(ps, p, "expected '%c' %s", c, what);
    }
}

static void name(parser *ps, const char **s, size_t *n, const char *what) {
    if (!lex_name(&ps->lx, s, n)) fail(ps, here(ps), "expected %s", what);
}

static int64_t integer(parser *ps, const char *what) {
    int64_t v;
    bool overflow;
    const char *at = here(ps);
    if (!lex_int(&ps->lx, &v, &overflow))
        fail(ps, at, overflow ? "%s does not fit in 64 bits" : "expected %s", what);
    return v;
}

static bool boolean(parser *ps) {
    if (lex_accept_word(&ps->lx, "true")) return true;
    if (lex_accept_word(&ps->lx, "false")) return false;
    fail(ps, here(ps), "expected true or false");
}

static void nest(parser *ps) {
    if (++ps->depth > HLO_MAX_NESTING) fail(ps, here(ps), "nesting deeper than %d levels", HLO_MAX_NESTING);
}

static int64_t *copy_ints(parser *ps, const int64_t *v, size_t n) {
    return n ? arena_memdup(&ps->m->arena, v, n * sizeof *v) : NULL;
}

/* int (',' int)* appended to ps->ints from position k; returns the new count. */
static size_t int_run(parser *ps, size_t k, const char *what) {
    do {
        XGROW(ps->ints, ps->capints, k + 1);
        ps->ints[k++] = integer(ps, what);
    } while (lex_accept(&ps->lx, ','));
    return k;
}

/* Fast path for the common spelling "1,2,3" + close: non-negative decimals,
 * no spaces, no comments. Returns the position after close, or NULL to let the
 * general path (with its error messages) handle the text. */
static const char *scan_ints(parser *ps, const char *p, char close, size_t *count) {
    size_t n = 0;
    if (*p == close) {
        *count = 0;
        return p + 1;
    }
    for (;;) {
        if (*p < '0' || *p > '9') return NULL;
        uint64_t v = 0;
        do {
            v = v * 10 + (uint64_t)(*p++ - '0');
            if (v > (uint64_t)INT64_MAX / 10) return NULL;
        } while (*p >= '0' && *p <= '9');
        XGROW(ps->ints, ps->capints, n + 1);
        ps->ints[n++] = (int64_t)v;
        if (*p == close) {
            *count = n;
            return p + 1;
        }
        if (*p++ != ',') return NULL;
    }
}

/* ints -> '{' (int (',' int)*)? '}'   into ps->ints */
static size_t int_list_scratch(parser *ps) {
    expect(ps, '{', "to open a list");
    size_t n = 0;
    const char *q = scan_ints(ps, ps->lx.p, '}', &n);
    if (q) {
        ps->lx.p = q;
        return n;
    }
    if (lex_accept(&ps->lx, '}')) return 0;
    n = int_run(ps, n, "an integer");
    expect(ps, '}', "to close the list");
    return n;
}

static const int64_t *shared_ints(parser *ps, const int64_t *v, size_t n);

/* An attribute's list: one copy per distinct list (dot dimensions repeat). */
static int64_t *int_list(parser *ps, uint32_t *n) {
    size_t k = int_list_scratch(ps);
    *n = (uint32_t)k;
    return (int64_t *)shared_ints(ps, ps->ints, k);
}

/* bracket ints -> '[' (int (',' int)*)? ']' */
static int64_t *bracket_ints(parser *ps, uint32_t *n) {
    expect(ps, '[', "to open a list");
    size_t k = 0;
    if (!lex_accept(&ps->lx, ']')) {
        k = int_run(ps, k, "an integer");
        expect(ps, ']', "to close the list");
    }
    *n = (uint32_t)k;
    return copy_ints(ps, ps->ints, k);
}

/* paren ints -> '(' int (',' int)* ')'  (the cursor is on the '(') */
static int64_t *int_list_paren(parser *ps, uint32_t *n) {
    expect(ps, '(', "to open a list");
    size_t k = int_run(ps, 0, "an integer");
    expect(ps, ')', "to close the list");
    *n = (uint32_t)k;
    return copy_ints(ps, ps->ints, k);
}

/* ---- shapes ---- */

/* Shapes repeat across a module: identical dims arrays and plain layouts are
 * stored once (IR arrays are immutable, so sharing is safe). The intern pool
 * copies into 8-byte-aligned arena memory. */
static const int64_t *shared_ints(parser *ps, const int64_t *v, size_t n) {
    if (!n) return NULL;
    return (const int64_t *)graph_intern(ps->m, (const char *)v, n * sizeof *v);
}

/* layout -> '{' ints? (':' item*)? '}'   item -> T(d,..)(..)* | E(n) | S(n) | other */
static layout *parse_layout(parser *ps) {
    hlo_module *m = ps->m;
    ps->lx.p++; /* '{' */
    size_t n = 0;
    const char *q = scan_ints(ps, ps->lx.p, '}', &n);
    if (q) {
        /* A plain layout: one shared struct per distinct permutation. */
        layout plain;
        memset(&plain, 0, sizeof plain);  /* padding too: the struct is compared as bytes */
        plain.n = (uint32_t)n;
        plain.minor_to_major = (int64_t *)shared_ints(ps, ps->ints, n);
        ps->lx.p = q;
        return (layout *)graph_intern(m, (const char *)&plain, sizeof plain);
    }
    layout *l = arena_alloc(&m->arena, sizeof *l);
    n = 0;
    if (!lex_peek(&ps->lx, '}') && !lex_peek(&ps->lx, ':')) {
        n = int_run(ps, n, "a layout dimension");
    }
    l->n = (uint32_t)n;
    l->minor_to_major = copy_ints(ps, ps->ints, n);
    if (lex_accept(&ps->lx, ':')) {
        strbuf *extra = &ps->extra;
        sb_reset(extra);
        while (!lex_peek(&ps->lx, '}')) {
            const char *at = ps->lx.p;
            if (at >= ps->lx.end) {
                fail(ps, at, "unterminated layout");
            }
            if (*at == 'T' && at[1] == '(') {
                ps->lx.p++;
                while (lex_peek(&ps->lx, '(')) {
                    ps->lx.p++;
                    size_t k = 0;
                    do {
                        XGROW(ps->ints, ps->capints, k + 1);
                        if (lex_accept(&ps->lx, '*')) ps->ints[k++] = TILE_COMBINE;
                        else ps->ints[k++] = integer(ps, "a tile dimension");
                    } while (lex_accept(&ps->lx, ','));
                    expect(ps, ')', "to close a tile");
                    tile *t = arena_alloc(&m->arena, (l->ntiles + 1) * sizeof *t);
                    if (l->ntiles) memcpy(t, l->tiles, l->ntiles * sizeof *t);
                    t[l->ntiles].n = (uint32_t)k;
                    t[l->ntiles].dims = copy_ints(ps, ps->ints, k);
                    l->tiles = t;
                    l->ntiles++;
                }
            } else if ((*at == 'E' || *at == 'S') && at[1] == '(' ) {
                ps->lx.p += 2;
                int64_t v = integer(ps, "a layout number");
                expect(ps, ')', "after a layout number");
                if (*at == 'E') l->element_size_bits = v;
                else l->memory_space = v;
            } else {
                /* Other layout items (D(...), L(...), #(...), *(...), SC(...), ...)
                 * are kept as text: an item name and a balanced group. */
                const char *s = at;
                while (ps->lx.p < ps->lx.end && *ps->lx.p != '(' && *ps->lx.p != '}') ps->lx.p++;
                const char *g;
                size_t gn;
                if (!lex_balanced(&ps->lx, &g, &gn)) { fail(ps, at, "unreadable layout item");
                }
                sb_put(extra, s, (size_t)(ps->lx.p - s));
            }
        }
        if (extra->len) l->extra = graph_intern(m, extra->s, extra->len);
    }
    expect(ps, '}', "to close the layout");
    return l;
}

/* shape -> '(' (shape (',' shape)*)? ')' | type '[' (dim (',' dim)*)? ']' layout?
 * dim -> int | '<=' int | '?' */
static void parse_shape(parser *ps, shape *s) {
    hlo_module *m = ps->m;
    memset(s, 0, sizeof *s);
    const char *at = here(ps);
    if (lex_accept(&ps->lx, '(')) {
        nest(ps);
        s->dtype = DT_TUPLE;
        shape *elems = NULL;
        size_t n = 0, cap = 0;
        if (!lex_accept(&ps->lx, ')')) {
            /* Elements are parsed into a heap vector; a failure deeper down longjmps
             * past this frame, so keep the vector in the arena instead. */
            do {
                shape e;
                parse_shape(ps, &e);
                if (n == cap) {
                    size_t nc = cap ? cap * 2 : 4;
                    shape *ne = arena_alloc(&m->arena, nc * sizeof *ne);
                    if (n) memcpy(ne, elems, n * sizeof *ne);
                    elems = ne;
                    cap = nc;
                }
                elems[n++] = e;
            } while (lex_accept(&ps->lx, ','));
            expect(ps, ')', "to close the tuple shape");
        }
        s->tuple = elems;
        s->ntuple = (uint32_t)n;
        ps->depth--;
        return;
    }
    const char *tn;
    size_t tl;
    if (!lex_name(&ps->lx, &tn, &tl) || tn != at) fail(ps, at, "expected a shape");
    int dt = dtype_from_name(tn, tl);
    if (dt == DT_INVALID) fail(ps, at, "unknown element type '%.*s'", (int)(tl > 40 ? 40 : tl), tn);
    s->dtype = (uint8_t)dt;
    if (*ps->lx.p != '[') fail(ps, ps->lx.p, "expected '[' after the element type");
    ps->lx.p++;
    size_t n = 0;
    uint8_t dyn[1024];
    bool any_dyn = false;
    const char *q = scan_ints(ps, ps->lx.p, ']', &n);
    if (q && n <= ARRAY_LEN(dyn)) {
        ps->lx.p = q;
        memset(dyn, DIM_STATIC, n);
    } else if (n = 0, !lex_accept(&ps->lx, ']')) {
        do {
            if (n >= ARRAY_LEN(dyn)) fail(ps, here(ps), "more than %zu dimensions", ARRAY_LEN(dyn));
            XGROW(ps->ints, ps->capints, n + 1);
            lex_skip(&ps->lx);
            if (lex_accept(&ps->lx, '?')) {
                ps->ints[n] = 0;
                dyn[n] = DIM_UNBOUNDED;
                any_dyn = true;
            } else if (ps->lx.p[0] == '<' && ps->lx.p[1] == '=') {
                ps->lx.p += 2;
                ps->ints[n] = integer(ps, "a dimension bound");
                dyn[n] = DIM_BOUNDED;
                any_dyn = true;
            } else {
                ps->ints[n] = integer(ps, "a dimension");
                dyn[n] = DIM_STATIC;
            }
            n++;
        } while (lex_accept(&ps->lx, ','));
        expect(ps, ']', "to close the dimensions");
    }
    s->rank = (uint32_t)n;
    s->dims = (int64_t *)shared_ints(ps, ps->ints, n);
    if (any_dyn) s->dynamic = arena_memdup(&m->arena, dyn, n);
    if (*ps->lx.p == '{') s->layout = parse_layout(ps);
    char why[200];
    if (shape_check(s, why, sizeof why)) fail(ps, at, "invalid shape: %s", why);
}

/* ---- attribute values ---- */

/* A single-quoted mesh axis name. */
static const char *axis_name(parser *ps) {
    lexer *lx = &ps->lx;
    const char *at = here(ps);
    if (*lx->p != '\'') fail(ps, at, "expected a quoted axis name");
    const char *q = memchr(lx->p + 1, '\'', (size_t)(lx->end - lx->p - 1));
    if (!q) fail(ps, at, "unterminated axis name");
    const char *nm = graph_intern(ps->m, lx->p + 1, (size_t)(q - lx->p - 1));
    lx->p = q + 1;
    return nm;
}

/* mesh groups -> 'mesh' '[' axis '=' int (',' ...)* ']' (',' 'device_ids' '=' '(' ids ')')?
 *                '{' ref (',' ref)* '}'
 * ids -> '[' ints ']' ('T' '(' ints ')')? | int (',' int)*     ref -> axis (':' '(' int ')' int)? */
static void parse_mesh_groups(parser *ps, hlo_groups *g, const char *at) {
    hlo_module *m = ps->m;
    lexer *lx = &ps->lx;
    g->mesh = true;
    expect(ps, '[', "after mesh");
    const char *names[64];
    int64_t sizes[64];
    uint32_t n = 0;
    do {
        if (n == 64) fail(ps, here(ps), "more than 64 mesh axes");
        names[n] = axis_name(ps);
        expect(ps, '=', "after the axis name");
        sizes[n] = integer(ps, "an axis size");
        if (sizes[n] <= 0) fail(ps, at, "mesh axis sizes must be positive");
        n++;
    } while (lex_accept(lx, ','));
    expect(ps, ']', "to close the mesh");
    g->naxes = n;
    g->axis_names = arena_memdup(&m->arena, names, n * sizeof *names);
    g->axis_sizes = copy_ints(ps, sizes, n);
    /* ", device_ids=(...)" belongs to the value, not to the next attribute. */
    lexer save = *lx;
    if (lex_accept(lx, ',') && lex_accept_word(lx, "device_ids")) {
        expect(ps, '=', "after device_ids");
        expect(ps, '(', "to open device_ids");
        if (lex_peek(lx, '[')) {
            g->dev_reshape = bracket_ints(ps, &g->ndev_reshape);
            lex_skip(lx);
            if (lx->p[0] == 'T' && lx->p[1] == '(') {
                lx->p++;
                g->dev_perm = int_list_paren(ps, &g->ndev_perm);
            }
        } else {
            size_t k = int_run(ps, 0, "a device id");
            g->ndevice_ids = (uint32_t)k;
            g->device_ids = copy_ints(ps, ps->ints, k);
        }
        expect(ps, ')', "to close device_ids");
    } else {
        *lx = save;
    }
    expect(ps, '{', "to open the selected mesh axes");
    mesh_axis_ref refs[64];
    uint32_t k = 0;
    if (!lex_accept(lx, '}')) {
        do {
            const char *rat = here(ps);
            if (k == 64) fail(ps, rat, "too many selected axes");
            const char *nm = axis_name(ps);
            uint32_t ax = 0;
            while (ax < n && strcmp(names[ax], nm) != 0) ax++;
            if (ax == n) fail(ps, rat, "axis '%s' is not in the mesh", nm);
            refs[k] = (mesh_axis_ref){ax, 0, 0};
            if (lex_accept(lx, ':')) {
                expect(ps, '(', "to open a sub-axis");
                refs[k].pre = integer(ps, "a sub-axis offset");
                expect(ps, ')', "to close a sub-axis offset");
                refs[k].size = integer(ps, "a sub-axis size");
                if (refs[k].pre <= 0 || refs[k].size <= 0) fail(ps, rat, "invalid sub-axis");
            }
            k++;
        } while (lex_accept(lx, ','));
        expect(ps, '}', "to close the selected mesh axes");
    }
    g->nsel = k;
    g->sel = arena_memdup(&m->arena, refs, k * sizeof *refs);
}

/* groups -> '{' ('{' ints '}' (',' ...)*)? '}' | '[' G ',' S ']' '<=' '[' ints ']' ('T' '(' ints ')')?
 *         | mesh groups */
static hlo_groups *parse_groups(parser *ps, bool allow_iota) {
    hlo_module *m = ps->m;
    hlo_groups *g = arena_alloc(&m->arena, sizeof *g);
    const char *at = here(ps);
    if (allow_iota && lex_accept_word(&ps->lx, "mesh")) {
        parse_mesh_groups(ps, g, at);
        return g;
    }
    if (allow_iota && lex_peek(&ps->lx, '[')) {
        uint32_t n;
        int64_t *gs = bracket_ints(ps, &n);
        if (n != 2) fail(ps, at, "iota replica groups need [groups,size]");
        if (!(lex_accept(&ps->lx, '<') && *ps->lx.p == '=')) fail(ps, here(ps), "expected '<=' in iota replica groups");
        ps->lx.p++;
        g->iota = true;
        if (gs[0] < 0 || gs[1] < 0 || gs[0] > UINT32_MAX) fail(ps, at, "invalid iota replica group sizes");
        g->ngroups = (uint32_t)gs[0];
        g->group_size = gs[1];
        g->reshape = bracket_ints(ps, &g->nreshape);
        lex_skip(&ps->lx);
        if (ps->lx.p[0] == 'T' && ps->lx.p[1] == '(') {
            ps->lx.p++;
            g->perm = int_list_paren(ps, &g->nperm);
        }
        int64_t total = 1;
        for (uint32_t i = 0; i < g->nreshape; i++)
            if (g->reshape[i] < 0 || !mul_ok(total, g->reshape[i], &total)) fail(ps, at, "invalid iota reshape");
        int64_t want;
        if (!mul_ok(gs[0], gs[1], &want) || want != total)
            fail(ps, at, "iota replica groups [%lld,%lld] do not cover %lld devices", (long long)gs[0],
                 (long long)gs[1], (long long)total);
        if (g->nperm && g->nperm != g->nreshape) fail(ps, at, "permutation length differs from the reshape");
        for (uint32_t i = 0; i < g->nperm; i++)
            if (g->perm[i] < 0 || g->perm[i] >= g->nreshape) fail(ps, at, "invalid permutation");
        return g;
    }
    expect(ps, '{', "to open the groups");
    size_t ngroups = 0, nids = 0;
    XGROW(ps->starts, ps->capstarts, 1);
    ps->starts[0] = 0;
    if (!lex_accept(&ps->lx, '}')) {
        do {
            size_t k = int_list_scratch(ps);
            XGROW(ps->ints2, ps->capints2, nids + k + 1);
            if (k) memcpy(ps->ints2 + nids, ps->ints, k * sizeof *ps->ints);
            nids += k;
            if (nids > UINT32_MAX) fail(ps, at, "too many ids in groups");
            XGROW(ps->starts, ps->capstarts, ngroups + 2);
            ps->starts[++ngroups] = (uint32_t)nids;
        } while (lex_accept(&ps->lx, ','));
        expect(ps, '}', "to close the groups");
    }
    g->ngroups = (uint32_t)ngroups;
    g->start = arena_memdup(&m->arena, ps->starts, (ngroups + 1) * sizeof *ps->starts);
    g->ids = copy_ints(ps, ps->ints2, nids);
    return g;
}

static int last_tile_type(const char *s, size_t n) {
    static const char *const names[] = {"replicated", "maximal", "tuple", "other", "manual", "unknown", "unreduced"};
    for (int i = 0; i < (int)ARRAY_LEN(names); i++)
        if (strlen(names[i]) == n && memcmp(names[i], s, n) == 0) return i;
    return -1;
}

/* sharding -> '{' body '}'
 * body -> 'replicated' | 'manual' | 'unknown' | 'unreduced' | 'maximal' 'device=' int
 *       | 'devices=' '[' ints ']' (int (',' int)* | '<=' '[' ints ']' ('T' '(' ints ')')?)
 *         'last_tile_dim_replicate'? ('last_tile_dims=' '{' word (',' word)* '}')?
 *       | sharding (',' sharding)*                       (a tuple)
 * then an optional 'metadata=' '{' ... '}' (skipped). Anything else (Shardy's
 * mesh form) is kept whole as text. */
static bool parse_sharding_body(parser *ps, hlo_sharding *s);

/* The sharding in the balanced group g[0..gn) ('{' ... '}'), into s; a form
 * we do not model (Shardy's mesh[...] forms, anything unrecognised) is kept
 * as its text (SH_RAW), so a tuple keeps its structure around such an
 * element, as the protobuf reader gives it. */
static void sharding_group(parser *ps, const char *g, size_t gn, hlo_sharding *s) {
    lexer saved = ps->lx;
    lexer sub = ps->lx;
    sub.p = g + 1;
    sub.end = g + gn - 1;
    /* sub.end is not NUL-terminated; scanning functions stop at end. */
    ps->lx = sub;
    int depth = ps->depth;
    bool ok = parse_sharding_body(ps, s);
    if (ok) {
        lex_skip(&ps->lx);
        /* the sharding's own metadata (which op made it: sdy's reduction op of
         * an unreduced sharding) is no part of it, as the protobuf reader has it */
        const char *mg;
        size_t mn;
        if (lex_accept_word(&ps->lx, "metadata")) {
            ok = lex_accept(&ps->lx, '=') && lex_peek(&ps->lx, '{') && lex_balanced(&ps->lx, &mg, &mn);
            lex_skip(&ps->lx);
        }
        ok = ok && ps->lx.p >= sub.end;
    }
    ps->depth = depth;
    ps->lx = saved;
    if (!ok) {
        memset(s, 0, sizeof *s);
        s->type = SH_RAW;
        s->raw = graph_intern(ps->m, g + 1, gn - 2);
    }
}

static bool parse_sharding_body(parser *ps, hlo_sharding *s) {
    hlo_module *m = ps->m;
    lexer *lx = &ps->lx;
    if (lex_peek(lx, '{')) {
        s->type = SH_TUPLE;
        size_t n = 0, cap = 0;
        hlo_sharding *el = NULL;
        do {
            const char *g;
            size_t gn;
            if (!lex_peek(lx, '{') || !lex_balanced(lx, &g, &gn) || g + gn > lx->end) return false;
            if (n == cap) {
                size_t nc = cap ? cap * 2 : 4;
                hlo_sharding *ne = arena_alloc(&m->arena, nc * sizeof *ne);
                if (n) memcpy(ne, el, n * sizeof *ne);
                el = ne;
                cap = nc;
            }
            nest(ps);
            const char *after = lx->p;
            sharding_group(ps, g, gn, &el[n]);
            lx->p = after;
            ps->depth--;
            n++;
        } while (lex_accept(lx, ','));
        s->tuple = el;
        s->ntuple = (uint32_t)n;
        return true;
    }
    if (lex_accept_word(lx, "replicated")) s->type = SH_REPLICATED;
    else if (lex_accept_word(lx, "manual")) s->type = SH_MANUAL;
    else if (lex_accept_word(lx, "unknown")) s->type = SH_UNKNOWN;
    else if (lex_accept_word(lx, "unreduced")) s->type = SH_UNREDUCED;
    else if (lex_accept_word(lx, "maximal")) {
        if (!lex_accept_word(lx, "device") || !lex_accept(lx, '=')) return false;
        s->type = SH_MAXIMAL;
        int64_t dev;
        bool of;
        if (!lex_int(lx, &dev, &of)) return false;
        int64_t one = 1;
        s->tile_dims = copy_ints(ps, &one, 1);
        s->ntile = 1;
        s->devices = copy_ints(ps, &dev, 1);
        s->ndevices = 1;
    } else if (lex_accept_word(lx, "devices")) {
        s->type = SH_OTHER;
        if (!lex_accept(lx, '=') || !lex_peek(lx, '[')) return false;
        s->tile_dims = bracket_ints(ps, &s->ntile);
        lex_skip(lx);
        if (lx->p[0] == '<' && lx->p[1] == '=') {
            lx->p += 2;
            if (!lex_peek(lx, '[')) return false;
            s->reshape = bracket_ints(ps, &s->nreshape);
            lex_skip(lx);
            if (lx->p[0] == 'T' && lx->p[1] == '(') {
                lx->p += 2;
                size_t k = int_run(ps, 0, "a permutation index");
                if (!lex_accept(lx, ')')) return false;
                s->nperm = (uint32_t)k;
                s->perm = copy_ints(ps, ps->ints, k);
            }
        } else {
            size_t k = 0;
            do {
                int64_t v;
                bool of;
                if (!lex_int(lx, &v, &of)) return false;
                XGROW(ps->ints, ps->capints, k + 1);
                ps->ints[k++] = v;
            } while (lex_accept(lx, ','));
            s->ndevices = (uint32_t)k;
            s->devices = copy_ints(ps, ps->ints, k);
        }
        if (lex_accept_word(lx, "last_tile_dim_replicate")) s->replicate_last = true;
        if (lex_accept_word(lx, "last_tile_dims")) {
            if (!lex_accept(lx, '=') || !lex_accept(lx, '{')) return false;
            int types[64];
            size_t k = 0;
            do {
                const char *w;
                size_t wn;
                if (!lex_name(lx, &w, &wn) || k == ARRAY_LEN(types)) return false;
                int t = last_tile_type(w, wn);
                if (t < 0) return false;
                types[k++] = t;
            } while (lex_accept(lx, ','));
            if (!lex_accept(lx, '}')) return false;
            s->nlast = (uint32_t)k;
            s->last_tile_dims = arena_memdup(&m->arena, types, k * sizeof *types);
        }
    } else {
        return false;
    }
    return true;
}

/* The value of kind k read before from the same text, or NULL; shared_put
 * records one. Parsed values are never changed after, so instructions may
 * share them. */
enum { SHARED_SHARDING, SHARED_GROUPS };

static void *shared_get(parser *ps, int k, const char *t, size_t n) {
    uint32_t i;
    return strmap_get(&ps->shared[k], t, n, &i) ? ps->shared_ptr[i] : NULL;
}

static void shared_put(parser *ps, int k, const char *t, size_t n, void *v) {
    if (ps->nshared >= UINT32_MAX) return;
    XGROW(ps->shared_ptr, ps->capshared, ps->nshared + 1);
    ps->shared_ptr[ps->nshared] = v;
    strmap_put(&ps->shared[k], t, n, (uint32_t)ps->nshared++);
}

static hlo_sharding *parse_sharding(parser *ps) {
    hlo_module *m = ps->m;
    const char *at = here(ps);
    const char *g;
    size_t gn;
    /* Take the balanced group first: it bounds the structured parse and is the
     * text we keep when the form is not one we model. */
    if (!lex_balanced(&ps->lx, &g, &gn) || *g != '{') fail(ps, at, "expected a sharding {...}");
    const char *after = ps->lx.p;
    hlo_sharding *s = shared_get(ps, SHARED_SHARDING, g, gn);
    if (s) return s;
    s = arena_alloc(&m->arena, sizeof *s);
    sharding_group(ps, g, gn, s);
    ps->lx.p = after;
    shared_put(ps, SHARED_SHARDING, g, gn, s);
    return s;
}

/* kv -> '{' (key '=' (string | raw) (',' ...)*)? '}' */
static const char **parse_kv(parser *ps, uint32_t *n) {
    hlo_module *m = ps->m;
    expect(ps, '{', "to open the attributes");
    size_t k = 0, cap = 0;
    const char **v = NULL;
    if (!lex_accept(&ps->lx, '}')) {
        do {
            const char *key, *val;
            size_t kn, vn;
            if (lex_peek(&ps->lx, '"')) {
                if (!lex_string(&ps->lx, &ps->str)) fail(ps, here(ps), "unterminated string");
                key = graph_intern(m, ps->str.s, ps->str.len);
            } else {
                name(ps, &val, &kn, "an attribute name");
                key = graph_intern(m, val, kn);
            }
            expect(ps, '=', "after the attribute name");
            if (lex_peek(&ps->lx, '"')) {
                if (!lex_string(&ps->lx, &ps->str)) fail(ps, here(ps), "unterminated string");
                val = ps->str.s;
                vn = ps->str.len;
            } else if (!lex_raw(&ps->lx, &val, &vn)) {
                fail(ps, here(ps), "unreadable attribute value");
            }
            if (k + 2 > cap) {
                size_t nc = cap ? cap * 2 : 8;
                const char **nv = arena_alloc(&m->arena, nc * sizeof *nv);
                if (k) memcpy(nv, v, k * sizeof *nv);
                v = nv;
                cap = nc;
            }
            v[k++] = key;
            v[k++] = graph_intern(m, val ? val : "", vn);
        } while (lex_accept(&ps->lx, ','));
        expect(ps, '}', "to close the attributes");
    }
    *n = (uint32_t)(k / 2);
    return v;
}

/* metadata -> '{' (key '=' (string | int))* '}'   (its op_name into *op_name) */
static hlo_meta *parse_metadata(parser *ps, const char **op_name) {
    hlo_module *m = ps->m;
    hlo_meta meta, *md = &meta;
    memset(md, 0, sizeof *md);
    expect(ps, '{', "to open metadata");
    strbuf *extra = &ps->extra;
    sb_reset(extra);
    while (!lex_accept(&ps->lx, '}')) {
        const char *k;
        size_t kn;
        const char *at = here(ps);
        if (!lex_name(&ps->lx, &k, &kn)) {
            fail(ps, at, "expected a metadata field or '}'");
        }
        if (!lex_accept(&ps->lx, '=')) {
            fail(ps, here(ps), "expected '=' after metadata field");
        }
#define IS(w) (kn == sizeof(w) - 1 && memcmp(k, w, kn) == 0)
        const char **sfield = IS("op_type") ? &md->op_type : IS("op_name") ? op_name
                              : IS("source_file") ? &md->source_file : NULL;
        int32_t *ifield = IS("source_line") ? &md->source_line : IS("source_end_line") ? &md->source_end_line
                          : IS("source_column") ? &md->source_column
                          : IS("source_end_column") ? &md->source_end_column
                          : IS("stack_frame_id") ? &md->stack_frame_id : NULL;
#undef IS
        if (sfield) {
            if (!lex_string(&ps->lx, &ps->str)) {
                fail(ps, here(ps), "expected a string");
            }
            if (sfield == op_name) {
                *sfield = graph_copy_repeat(m, ps->str.s, ps->str.len, &ps->last_op_name);
            } else {
                *sfield = graph_intern(m, ps->str.s, ps->str.len);
            }
        } else if (ifield) {
            int64_t v;
            bool of;
            if (!lex_int(&ps->lx, &v, &of) || v < INT32_MIN || v > INT32_MAX) {
                fail(ps, here(ps), "expected a 32-bit integer");
            }
            *ifield = (int32_t)v;
        } else {
            /* Unknown field: kept verbatim, in order. */
            const char *v;
            size_t vn;
            lex_skip(&ps->lx);
            if (*ps->lx.p == '"') {
                const char *s0 = ps->lx.p;
                if (!lex_string(&ps->lx, &ps->str)) { fail(ps, s0, "unterminated string");
                }
                v = s0;
                vn = (size_t)(ps->lx.p - s0);
            } else if (*ps->lx.p == '{') {
                if (!lex_balanced(&ps->lx, &v, &vn)) { fail(ps, here(ps), "unbalanced metadata value");
                }
            } else if (!lex_word(&ps->lx, &v, &vn)) {
                fail(ps, here(ps), "expected a metadata value");
            }
            if (extra->len) sb_putc(extra, ' ');
            sb_put(extra, k, kn);
            sb_putc(extra, '=');
            sb_put(extra, v, vn);
        }
    }
    if (extra->len) md->extra = graph_intern(m, extra->s, extra->len);
    return graph_share_meta(m, md);
}

/* literal -> '{...}' | value | '{' literal (',' literal)* '}'   (flattened in order) */
static hlo_literal *parse_literal(parser *ps, const shape *sh) {
    hlo_module *m = ps->m;
    lexer *lx = &ps->lx;
    hlo_literal *lit = arena_alloc(&m->arena, sizeof *lit);
    lit->dtype = sh->dtype;
    const char *at = here(ps);
    if (sh->dtype == DT_TUPLE || dtype_is_complex(sh->dtype) || sh->dtype == DT_TOKEN ||
        sh->dtype == DT_OPAQUE) {
        const char *s;
        size_t n;
        if (!lex_raw(lx, &s, &n)) fail(ps, at, "unreadable literal");
        lit->raw = dtype_is_complex(sh->dtype) ? graph_complex_literal(m, sh->dtype, s, n) : graph_intern(m, s, n);
        lit->count = shape_elements(sh);
        return lit;
    }
    int64_t want = shape_elements(sh);
    lit->count = want;
    if (lx->p[0] == '{' ) {
        const char *q = lx->p + 1;
        while (*q == ' ') q++;
        if (q[0] == '.' && q[1] == '.' && q[2] == '.') {
            q += 3;
            while (*q == ' ') q++;
            if (*q == '}') {
                lx->p = q + 1;
                lit->elided = true;
                return lit;
            }
        }
    }
    bool is_float = dtype_is_float(sh->dtype), is_pred = sh->dtype == DT_PRED;
    bool is_unsigned = dtype_is_unsigned(sh->dtype);
    size_t n = 0;
    long depth = 0;
    for (;;) {
        lex_skip(lx);
        char c = *lx->p;
        if (lx->p >= lx->end) fail(ps, at, "unterminated literal");
        if (c == '{') { depth++; lx->p++; continue; }
        if (c == '}') {
            if (depth == 0) fail(ps, lx->p, "unbalanced '}' in literal");
            depth--;
            lx->p++;
            if (depth == 0) break;
            continue;
        }
        if (c == ',') {
            if (depth == 0) break;
            lx->p++;
            continue;
        }
        if (c == ')' && depth == 0) break;
        const char *w;
        size_t wn;
        const char *wat = lx->p;
        if (!lex_word(lx, &w, &wn)) fail(ps, wat, "expected a literal value");
        if ((int64_t)n >= want) fail(ps, wat, "literal has more than the %lld values its shape holds", (long long)want);
        char buf[128];
        if (wn >= sizeof buf) fail(ps, wat, "literal value too long");
        memcpy(buf, w, wn);
        buf[wn] = 0;
        char *endp;
        if (is_float) {
            XGROW(ps->vals, ps->capvals, n + 1);
            double v = sh->dtype == DT_F64 ? strtod(buf, &endp) : (double)strtof(buf, &endp);
            if (*endp) fail(ps, wat, "invalid %s value '%s'", dtype_name(sh->dtype), buf);
            ps->vals[n++] = dtype_round(sh->dtype, v);
        } else {
            XGROW(ps->ints, ps->capints, n + 1);
            int64_t v;
            if (is_pred && strcmp(buf, "true") == 0) v = 1;
            else if (is_pred && strcmp(buf, "false") == 0) v = 0;
            else {
                errno = 0;
                v = is_unsigned ? (int64_t)strtoull(buf, &endp, 10) : strtoll(buf, &endp, 10);
                if (*endp || errno) fail(ps, wat, "invalid %s value '%s'", dtype_name(sh->dtype), buf);
                /* as XLA's parser: a value its type cannot hold is an error */
                int bits = dtype_bits(sh->dtype);
                if (bits > 0 && bits < 64 &&
                    (is_unsigned ? v < 0 || v >= (int64_t)1 << bits : v < -((int64_t)1 << (bits - 1)) || v >= (int64_t)1 << (bits - 1)))
                    fail(ps, wat, "value %s is out of range for %s", buf, dtype_name(sh->dtype));
            }
            ps->ints[n++] = v;
        }
        if (depth == 0) break;
    }
    if ((int64_t)n != want)
        fail(ps, at, "literal has %zu values but its shape holds %lld", n, (long long)want);
    if (is_float) lit->f = arena_memdup(&m->arena, ps->vals, n * sizeof *ps->vals);
    else lit->i = copy_ints(ps, ps->ints, n);
    return lit;
}

/* padding -> (lo '_' hi ('_' interior)?) ('x' ...)* */
static int64_t *parse_padding(parser *ps, uint32_t *ndims) {
    const char *w, *at = here(ps);
    size_t wn;
    if (!lex_word(&ps->lx, &w, &wn)) fail(ps, at, "expected a padding such as 0_0x1_1");
    size_t k = 0;
    const char *p = w, *e = w + wn;
    while (p < e) {
        int64_t v[3] = {0, 0, 0};
        int parts = 0;
        for (;;) {
            char *endp;
            errno = 0;
            long long x = strtoll(p, &endp, 10);
            if (endp == p || errno || endp > e) fail(ps, at, "invalid padding '%.*s'", (int)wn, w);
            if (parts == 3) fail(ps, at, "padding has more than lo_hi_interior");
            v[parts++] = x;
            p = endp;
            if (p < e && *p == '_') { p++; continue; }
            break;
        }
        if (parts < 2) fail(ps, at, "padding needs lo_hi per dimension");
        XGROW(ps->ints, ps->capints, k + 3);
        memcpy(ps->ints + k, v, sizeof v);
        k += 3;
        if (p < e) {
            if (*p != 'x') fail(ps, at, "invalid padding '%.*s'", (int)wn, w);
            p++;
        }
    }
    *ndims = (uint32_t)(k / 3);
    return copy_ints(ps, ps->ints, k);
}

/* slices -> '{' ('[' int ':' int (':' int)? ']' (',' ...)*)? '}' */
static int64_t *parse_slices(parser *ps, uint32_t *ndims) {
    expect(ps, '{', "to open the slices");
    size_t k = 0;
    if (!lex_accept(&ps->lx, '}')) {
        do {
            expect(ps, '[', "to open a slice");
            XGROW(ps->ints, ps->capints, k + 3);
            ps->ints[k] = integer(ps, "a slice start");
            expect(ps, ':', "in a slice");
            ps->ints[k + 1] = integer(ps, "a slice limit");
            ps->ints[k + 2] = lex_accept(&ps->lx, ':') ? integer(ps, "a slice stride") : 1;
            expect(ps, ']', "to close a slice");
            k += 3;
        } while (lex_accept(&ps->lx, ','));
        expect(ps, '}', "to close the slices");
    }
    *ndims = (uint32_t)(k / 3);
    return copy_ints(ps, ps->ints, k);
}

/* The tuple indices after a name: ('#' digits)*, as in "call#0" (none: 0). */
static size_t tuple_suffix(const char *p) {
    const char *q = p;
    while (q[0] == '#' && q[1] >= '0' && q[1] <= '9') {
        q++;
        while (*q >= '0' && *q <= '9') q++;
    }
    return (size_t)(q - p);
}

static void add_fixup(parser *ps, fixup **v, size_t *n, size_t *cap, uint32_t attr, uint32_t k,
                      const char *s, size_t sn, const char *at) {
    XGROW(*v, *cap, *n + 1);
    /* The computation being parsed gets index m->ncomps when it is complete. */
    (*v)[(*n)++] = (fixup){ps->m->ncomps, (uint32_t)ps->nins, attr, k, s, at, sn};
}

/* A list of names ('{' name (',' name)* '}') or, when single is allowed, one name. */
static uint32_t parse_refs(parser *ps, uint32_t attr, bool single_ok, bool instrs) {
    fixup **v = instrs ? &ps->ifix : &ps->cfix;
    size_t *n = instrs ? &ps->nifix : &ps->ncfix, *cap = instrs ? &ps->capifix : &ps->capcfix;
    const char *s;
    size_t sn;
    if (single_ok && !lex_peek(&ps->lx, '{')) {
        const char *at = here(ps);
        name(ps, &s, &sn, "a computation name");
        add_fixup(ps, v, n, cap, attr, 0, s, sn, at);
        return 1;
    }
    expect(ps, '{', "to open a list of names");
    uint32_t k = 0;
    if (lex_accept(&ps->lx, '}')) return 0;
    do {
        const char *at = here(ps);
        name(ps, &s, &sn, instrs ? "an instruction name" : "a computation name");
        if (instrs && s + sn == ps->lx.p) { /* an element read as %t#N elsewhere */
            size_t sfx = tuple_suffix(ps->lx.p);
            ps->lx.p += sfx;
            sn += sfx;
        }
        add_fixup(ps, v, n, cap, attr, k++, s, sn, at);
    } while (lex_accept(&ps->lx, ','));
    expect(ps, '}', "to close the list of names");
    return k;
}

static void parse_attr(parser *ps, hlo_instr *in, size_t *nattrs) {
    hlo_module *m = ps->m;
    const char *k, *at = here(ps);
    size_t kn;
    name(ps, &k, &kn, "an attribute name");
    expect(ps, '=', "after the attribute name");
    if (kn == 8 && memcmp(k, "metadata", 8) == 0) {
        if (in->meta) fail(ps, at, "metadata given twice");
        in->meta = parse_metadata(ps, &in->op_name);
        return;
    }
    int key = attr_key_from_name(k, kn);
    /* a constant's value is written inside its parentheses, never as an
     * attribute (the IR would hold text where a literal belongs) */
    if (key == A_LITERAL) fail(ps, at, "'%.*s' is no attribute: a constant's value goes inside its parentheses", (int)kn, k);
    for (size_t i = 0; i < *nattrs; i++)
        if (ps->attrs[i].key == key && (key != A_RAW || (strlen(ps->attrs[i].raw_key) == kn &&
                                                          memcmp(ps->attrs[i].raw_key, k, kn) == 0)))
            fail(ps, at, "attribute '%.*s' given twice", (int)kn, k);
    XGROW(ps->attrs, ps->capattrs, *nattrs + 1);
    uint32_t ai = (uint32_t)*nattrs;
    hlo_attr *a = &ps->attrs[ai];
    memset(a, 0, sizeof *a);
    a->key = (uint16_t)key;
    a->kind = (uint16_t)attr_key_kind(key);
    (*nattrs)++;
    const char *s;
    size_t sn;
    switch (a->kind) {
    case K_INT: a->v.i = integer(ps, "an integer"); break;
    case K_BOOL: a->v.i = boolean(ps); break;
    case K_INTS: a->v.ints = int_list(ps, &a->n); break;
    case K_IDENT:
        if (!lex_word(&ps->lx, &s, &sn)) fail(ps, here(ps), "expected a value");
        a->v.str = graph_intern(m, s, sn);
        break;
    case K_IDENTS: {
        expect(ps, '{', "to open the list");
        size_t cnt = 0;
        const char *words[256];
        if (!lex_accept(&ps->lx, '}')) {
            do {
                if (cnt == ARRAY_LEN(words)) fail(ps, here(ps), "list too long");
                if (!lex_word(&ps->lx, &s, &sn)) fail(ps, here(ps), "expected a word");
                words[cnt++] = graph_intern(m, s, sn);
            } while (lex_accept(&ps->lx, ','));
            expect(ps, '}', "to close the list");
        }
        a->n = (uint32_t)cnt;
        a->v.strs = arena_memdup(&m->arena, words, cnt * sizeof *words);
        break;
    }
    case K_STRING:
        if (!lex_string(&ps->lx, &ps->str)) fail(ps, here(ps), "expected a quoted string");
        a->v.str = graph_intern(m, ps->str.s, ps->str.len);
        break;
    case K_BACKEND:
        if (lex_peek(&ps->lx, '"')) {
            if (!lex_string(&ps->lx, &ps->str)) fail(ps, here(ps), "unterminated string");
            a->v.str = graph_intern(m, ps->str.s, ps->str.len);
        } else if (lex_peek(&ps->lx, '{')) {
            if (!lex_balanced(&ps->lx, &s, &sn)) fail(ps, here(ps), "unbalanced backend_config");
            a->v.str = graph_intern(m, s, sn);
        } else {
            if (!lex_raw(&ps->lx, &s, &sn)) fail(ps, here(ps), "unreadable backend_config");
            a->v.str = graph_intern(m, s, sn);
        }
        break;
    case K_COMP:
        a->v.ints = arena_alloc(&m->arena, sizeof(int64_t));
        parse_refs(ps, ai, true, false);
        a->n = 0;
        break;
    case K_COMPS: case K_INSTRS: {
        a->n = parse_refs(ps, ai, a->key == A_CALLS, a->kind == K_INSTRS);
        a->v.ints = arena_alloc(&m->arena, (a->n ? a->n : 1) * sizeof(int64_t));
        break;
    }
    case K_SLICES: a->v.ints = parse_slices(ps, &a->n); break;
    case K_PADDING: a->v.ints = parse_padding(ps, &a->n); break;
    case K_GROUPS: case K_LISTS: {
        /* {{0,1},{2,3}} spelled alike reads alike (what allow_iota adds are
         * other forms): read once. */
        lexer peek = ps->lx;
        const char *g;
        size_t gn;
        bool braced = lex_peek(&peek, '{') && lex_balanced(&peek, &g, &gn);
        hlo_groups *grp = braced ? shared_get(ps, SHARED_GROUPS, g, gn) : NULL;
        if (grp) {
            ps->lx = peek;
            a->v.groups = grp;
            break;
        }
        a->v.groups = parse_groups(ps, a->kind == K_GROUPS);
        if (braced && ps->lx.p == peek.p) shared_put(ps, SHARED_GROUPS, g, gn, a->v.groups);
        break;
    }
    case K_SHARDING: a->v.sharding = parse_sharding(ps); break;
    case K_KV: a->v.strs = parse_kv(ps, &a->n); break;
    case K_RAW:
    default:
        if (!lex_raw(&ps->lx, &s, &sn)) fail(ps, here(ps), "unbalanced brackets in the value of '%.*s'", (int)kn, k);
        if (sn == 0) fail(ps, here(ps), "expected a value for '%.*s'", (int)kn, k);
        a->raw_key = key == A_RAW ? graph_intern(m, k, kn) : NULL;
        a->v.str = graph_intern(m, s, sn);
        break;
    }
}

/* tuple_ref -> operand_name ('#' int)+
 * XLA's printer elides a get-tuple-element of a tuple-shaped value and writes
 * its users' operand as "%t#N" (element N of %t). Each distinct reference
 * becomes one get-tuple-element named "t#N", placed before its first user (the
 * instruction being read, which moves up one slot), so the IR and everything
 * downstream see the element as the protobuf form has it. Returns its index. */
static uint32_t tuple_ref(parser *ps, uint32_t idx, const char *s, const char *oat) {
    hlo_module *m = ps->m;
    lexer *lx = &ps->lx;
    while (lx->p[0] == '#') {
        const char *iat = lx->p + 1;
        if (*iat < '0' || *iat > '9') fail(ps, iat, "expected a tuple index after '#'");
        int64_t k = 0;
        const char *q = iat;
        while (*q >= '0' && *q <= '9' && k <= 1000000) k = k * 10 + (*q++ - '0');
        if (k > 1000000) fail(ps, iat, "tuple index out of range");
        lx->p = q;
        size_t kn = (size_t)(q - s);
        uint32_t have;
        if (strmap_get(&ps->instr_index, s, kn, &have) && have < ps->nins) {
            idx = have;
            continue;
        }
        const shape *t = &ps->ins[idx].shape;
        if (t->dtype != DT_TUPLE)
            fail(ps, oat, "'%.*s' is not a tuple: it has no element %lld", (int)(iat - 1 - s), s, (long long)k);
        if ((uint64_t)k >= t->ntuple)
            fail(ps, iat, "tuple index %lld out of range: '%.*s' has %u elements", (long long)k,
                 (int)(iat - 1 - s), s, t->ntuple);
        shape el = t->tuple[k]; /* before ps->ins moves */
        XGROW(ps->ins, ps->capins, ps->nins + 2);
        ps->ins[ps->nins + 1] = ps->ins[ps->nins];
        hlo_instr *g = &ps->ins[ps->nins];
        memset(g, 0, sizeof *g);
        g->name = graph_strndup(m, s, kn);
        g->opname = graph_intern(m, "get-tuple-element", strlen("get-tuple-element"));
        g->op = OP_GET_TUPLE_ELEMENT;
        g->shape = el;
        g->noperands = 1;
        g->operands = arena_memdup(&m->arena, &idx, sizeof idx);
        g->nattrs = 1;
        g->attrs = arena_alloc(&m->arena, sizeof *g->attrs);
        g->attrs[0] = (hlo_attr){.key = A_INDEX, .kind = K_INT, .v.i = k};
        position(ps, oat, &g->line, &g->col);
        strmap_put(&ps->instr_index, g->name, kn, (uint32_t)ps->nins);
        idx = (uint32_t)ps->nins++;
    }
    return idx;
}

/* The attributes read into ps->attrs become in's: finalised now and shared
 * where they repeat (graph_share_attrs), but for lists with references the
 * end fixes up by position (computations, instructions), which stay as
 * read until then. */
static void own_attrs(parser *ps, hlo_instr *in, size_t nattrs) {
    bool refs = false;
    for (size_t k = 0; k < nattrs; k++) {
        int kind = ps->attrs[k].kind;
        refs |= kind == K_COMP || kind == K_COMPS || kind == K_INSTRS;
    }
    if (!refs) {
        graph_share_attrs(ps->m, in, ps->attrs, nattrs, &ps->attrs_kept);
        return;
    }
    in->nattrs = (uint16_t)nattrs;
    in->attrs = arena_memdup(&ps->m->arena, ps->attrs, nattrs * sizeof *ps->attrs);
}

/* instruction -> 'ROOT'? name ('#' int)* '=' shape opcode '(' operands ')' (',' attr)*
 * (a "#N" suffix names an element that hlo_print wrote out; see tuple_ref) */
static void parse_instruction(parser *ps, bool *is_root, int64_t *param_no) {
    hlo_module *m = ps->m;
    lexer *lx = &ps->lx;
    XGROW(ps->ins, ps->capins, ps->nins + 1);
    hlo_instr *in = &ps->ins[ps->nins];
    memset(in, 0, sizeof *in);
    const char *at = here(ps);
    *is_root = lex_accept_word(lx, "ROOT");
    const char *nm, *nm_at = here(ps);
    size_t nl;
    name(ps, &nm, &nl, "an instruction name");
    if (nm + nl == lx->p) {
        size_t sfx = tuple_suffix(lx->p);
        lx->p += sfx;
        nl += sfx;
    }
    position(ps, at, &in->line, &in->col);
    in->name = graph_strndup(m, nm, nl);
    /* Whether the name is taken is asked when it is put, below: its slot of
     * instr_index (a cache miss in a large computation) is fetched while the
     * rest of the line is read. An error before then is reported as the
     * taken name when it is one (fail), as if it had been checked here. */
    ps->name_hash = hash_bytes(nm, nl);
    strmap_prefetch(&ps->instr_index, ps->name_hash);
    ps->pending = nm;
    ps->npending = nl;
    ps->pending_at = nm_at;
    ps->pending_nins = ps->nins;
    expect(ps, '=', "after the instruction name");
    parse_shape(ps, &in->shape);
    const char *op, *op_at = here(ps);
    size_t opl;
    if (!lex_name(lx, &op, &opl) || *op_at == '%') fail(ps, op_at, "expected an opcode");
    in->opname = graph_intern(m, op, opl);
    in->op = (uint16_t)hlo_op_from_name(op, opl);
    expect(ps, '(', "after the opcode");
    size_t nattrs = 0, nops = 0;
    *param_no = -1;
    if (in->op == OP_CONSTANT) {
        XGROW(ps->attrs, ps->capattrs, 1);
        ps->attrs[0] = (hlo_attr){.key = A_LITERAL, .kind = K_LITERAL, .v.lit = parse_literal(ps, &in->shape)};
        nattrs = 1;
        expect(ps, ')', "after the literal");
    } else if (in->op == OP_PARAMETER) {
        const char *pat = here(ps);
        *param_no = integer(ps, "a parameter number");
        if (*param_no < 0 || *param_no > 1000000) fail(ps, pat, "parameter number out of range");
        XGROW(ps->attrs, ps->capattrs, 1);
        ps->attrs[0] = (hlo_attr){.key = A_PARAMETER_NUMBER, .kind = K_INT, .v.i = *param_no};
        nattrs = 1;
        expect(ps, ')', "after the parameter number");
    } else if (!lex_accept(lx, ')')) {
        do {
            lex_skip(lx);
            const char *oat = lx->p;
            /* An operand may carry its shape: "f32[2]{0} %x" or "(s32[], f32[]) %t". */
            const char *s;
            size_t sn;
            bool has_shape = *oat == '(';
            if (!has_shape && lex_name(lx, &s, &sn)) {
                has_shape = *lx->p == '[' && *oat != '%' && dtype_from_name(s, sn) != DT_INVALID;
                lx->p = oat;
            }
            if (has_shape) {
                shape ignored;
                parse_shape(ps, &ignored);
                oat = here(ps);
            }
            name(ps, &s, &sn, "an operand name");
            uint32_t idx;
            if (!strmap_get(&ps->instr_index, s, sn, &idx) || idx >= ps->nins)
                fail(ps, oat, "operand '%.*s' is not defined before its use", (int)(sn > 80 ? 80 : sn), s);
            if (*lx->p == '#' && s + sn == lx->p) {
                idx = tuple_ref(ps, idx, s, oat);
                in = &ps->ins[ps->nins];
            }
            XGROW(ps->ops, ps->capops, nops + 1);
            ps->ops[nops++] = idx;
        } while (lex_accept(lx, ','));
        expect(ps, ')', "to close the operand list");
    }
    ps->pending = NULL;
    if (!strmap_put_hashed(&ps->instr_index, in->name, nl, ps->name_hash, (uint32_t)ps->nins))
        fail(ps, nm_at, "instruction '%s' is defined twice", in->name);
    while (lex_accept(lx, ',')) parse_attr(ps, in, &nattrs);
    if (in->op == OP_TOPK) {
        /* XLA's parser defaults topk's largest to true (its printer always
         * writes it); in the IR absence means false, as in the protobuf. */
        bool said = false;
        for (size_t i = 0; i < nattrs; i++) said |= ps->attrs[i].key == A_LARGEST;
        if (!said) {
            XGROW(ps->attrs, ps->capattrs, nattrs + 1);
            ps->attrs[nattrs++] = (hlo_attr){.key = A_LARGEST, .kind = K_BOOL, .v.i = 1};
        }
    }
    in->noperands = (uint32_t)nops;
    in->operands = nops ? arena_memdup(&m->arena, ps->ops, nops * sizeof *ps->ops) : NULL;
    if (nattrs > UINT16_MAX) fail(ps, at, "too many attributes");
    own_attrs(ps, in, nattrs);
    ps->nins++;
}

/* (',' name '=' value)*: attributes of a computation, read and not kept (the
 * IR has no home for them; execution_thread="name" after the closing brace
 * marks a computation run off the main thread). */
static void computation_attrs(parser *ps) {
    lexer *lx = &ps->lx;
    const char *s;
    size_t sn;
    while (lex_accept(lx, ',')) {
        name(ps, &s, &sn, "a computation attribute");
        expect(ps, '=', "after the attribute name");
        if (!lex_raw(lx, &s, &sn)) fail(ps, here(ps), "unreadable attribute value");
    }
}

/* computation -> 'ENTRY'? name ('(' params ')')? ('->' shape)? (',' attr)*
 *                '{' instruction* '}' (',' attr)* */
static void parse_computation(parser *ps, bool *seen_entry) {
    hlo_module *m = ps->m;
    lexer *lx = &ps->lx;
    const char *at = here(ps);
    bool entry = lex_accept_word(lx, "ENTRY");
    if (entry && *seen_entry) fail(ps, at, "a second ENTRY computation");
    *seen_entry |= entry;
    const char *nm, *nm_at = here(ps);
    size_t nl;
    name(ps, &nm, &nl, "a computation name");
    XGROW(ps->comps, ps->capcomps, m->ncomps + 1);
    hlo_comp *c = &ps->comps[m->ncomps];
    memset(c, 0, sizeof *c);
    c->name = arena_strndup(&m->arena, nm, nl);
    c->is_entry = entry;
    position(ps, at, &c->line, &c->col);
    if (!strmap_put(&ps->comp_index, c->name, nl, m->ncomps))
        fail(ps, nm_at, "computation '%.*s' is defined twice", (int)nl, nm);
    const char *s;
    size_t sn;
    if (lex_peek(lx, '(') && !lex_balanced(lx, &s, &sn)) fail(ps, here(ps), "unbalanced parameter list");
    lex_skip(lx);
    if (lx->p[0] == '-' && lx->p[1] == '>') {
        lx->p += 2;
        shape ignored;
        parse_shape(ps, &ignored);
    }
    computation_attrs(ps);
    expect(ps, '{', "to open the computation body");
    ps->nins = 0;
    ps->nifix = 0;
    strmap_free(&ps->instr_index);
    strmap_init(&ps->instr_index);
    /* The entry is nearly all of a deep program, and usually last: its names
     * reserved at once (an instruction line is 120 to 160 bytes) rather than
     * rehashed as they come, each larger table a fresh mapping. */
    if (entry) strmap_reserve(&ps->instr_index, (size_t)(lx->end - lx->p) / 160);
    int64_t root = -1;
    size_t nparams = 0;
    while (!lex_accept(lx, '}')) {
        if (here(ps) >= lx->end) fail(ps, lx->p, "expected '}' to close computation %s, found end of input", c->name);
        bool is_root;
        int64_t pno;
        const char *iat = here(ps);
        parse_instruction(ps, &is_root, &pno);
        if (is_root) {
            if (root >= 0) fail(ps, iat, "a second ROOT instruction");
            root = (int64_t)ps->nins - 1;
        }
        if (pno >= 0) {
            if ((size_t)pno >= nparams) {
                XGROW(ps->params, ps->capparams, (size_t)pno + 1);
                for (size_t k = nparams; k <= (size_t)pno; k++) ps->params[k] = UINT32_MAX;
                nparams = (size_t)pno + 1;
            }
            if (ps->params[pno] != UINT32_MAX) fail(ps, iat, "parameter number %lld is used twice", (long long)pno);
            ps->params[pno] = (uint32_t)ps->nins - 1;
        }
    }
    computation_attrs(ps);
    for (size_t k = 0; k < nparams; k++)
        if (ps->params[k] == UINT32_MAX) fail(ps, nm_at, "computation %s has no parameter %zu", c->name, k);
    if (ps->nins == 0) fail(ps, nm_at, "computation %s has no instructions", c->name);
    c->root = root >= 0 ? (uint32_t)root : (uint32_t)ps->nins - 1;
    c->nparams = (uint32_t)nparams;
    c->params = nparams ? arena_memdup(&m->arena, ps->params, nparams * sizeof *ps->params) : NULL;
    /* control-predecessors may name any instruction of this computation. */
    for (size_t f = 0; f < ps->nifix; f++) {
        fixup *fx = &ps->ifix[f];
        uint32_t idx;
        if (!strmap_get(&ps->instr_index, fx->name, fx->n, &idx))
            fail(ps, fx->at, "unknown instruction '%.*s'", (int)(fx->n > 80 ? 80 : fx->n), fx->name);
        ps->ins[fx->instr].attrs[fx->attr].v.ints[fx->k] = idx;
    }
    /* The instruction vector becomes the computation's array without a copy. */
    c->ninstrs = (uint32_t)ps->nins;
    c->instrs = xrealloc(ps->ins, ps->nins * sizeof *ps->ins);
    arena_adopt(&m->arena, c->instrs, ps->nins * sizeof *ps->ins);
    ps->ins = NULL;
    ps->capins = 0;
    m->ncomps++;
}

/* tables -> ('FileNames' (int string)* | 'FunctionNames' (int string)*
 *          | 'FileLocations' (int '{' (key '=' int)* '}')* | 'StackFrames' (...)*)* */
static void parse_string_table(parser *ps, const char ***out, uint32_t *count) {
    hlo_module *m = ps->m;
    size_t n = 0, cap = 0;
    const char **v = NULL;
    for (;;) {
        lex_skip(&ps->lx);
        if (*ps->lx.p < '0' || *ps->lx.p > '9') break;
        const char *at = ps->lx.p;
        int64_t id = integer(ps, "a table index");
        if (id != (int64_t)n + 1) fail(ps, at, "table index %lld out of sequence (expected %zu)", (long long)id, n + 1);
        if (!lex_string(&ps->lx, &ps->str)) fail(ps, here(ps), "expected a quoted string");
        if (n == cap) {
            size_t nc = cap ? cap * 2 : 16;
            const char **nv = arena_alloc(&m->arena, nc * sizeof *nv);
            if (n) memcpy(nv, v, n * sizeof *nv);
            v = nv;
            cap = nc;
        }
        v[n++] = graph_intern(m, ps->str.s, ps->str.len);
    }
    *out = v;
    *count = (uint32_t)n;
}

static void parse_record_table(parser *ps, bool frames) {
    hlo_module *m = ps->m;
    size_t n = 0, cap = 0;
    void *v = NULL;
    size_t elem = frames ? sizeof(hlo_frame) : sizeof(hlo_file_loc);
    for (;;) {
        lex_skip(&ps->lx);
        if (*ps->lx.p < '0' || *ps->lx.p > '9') break;
        const char *at = ps->lx.p;
        int64_t id = integer(ps, "a table index");
        if (id != (int64_t)n + 1) fail(ps, at, "table index %lld out of sequence (expected %zu)", (long long)id, n + 1);
        expect(ps, '{', "to open a table entry");
        hlo_file_loc loc = {0};
        hlo_frame fr = {0};
        while (!lex_accept(&ps->lx, '}')) {
            const char *k, *kat = here(ps);
            size_t kn;
            name(ps, &k, &kn, "a field name");
            expect(ps, '=', "after the field name");
            int64_t val = integer(ps, "an integer");
            if (val < INT32_MIN || val > INT32_MAX) fail(ps, kat, "value out of range");
            int32_t x = (int32_t)val;
#define IS(w) (kn == sizeof(w) - 1 && memcmp(k, w, kn) == 0)
            if (frames && IS("file_location_id")) fr.file_location_id = x;
            /* The text printer writes parent ids one higher than the protobuf. */
            else if (frames && IS("parent_frame_id")) fr.parent_frame_id = x < 1 ? -1 : x - 1;
            else if (!frames && IS("file_name_id")) loc.file_name_id = x;
            else if (!frames && IS("function_name_id")) loc.function_name_id = x;
            else if (!frames && IS("line")) loc.line = x;
            else if (!frames && IS("end_line")) loc.end_line = x;
            else if (!frames && IS("column")) loc.column = x;
            else if (!frames && IS("end_column")) loc.end_column = x;
            else fail(ps, kat, "unknown field '%.*s'", (int)kn, k);
#undef IS
            lex_accept(&ps->lx, ',');
        }
        if (frames ? fr.file_location_id < 1 || (uint32_t)fr.file_location_id > m->nfile_locs
                   : loc.file_name_id < 1 || (uint32_t)loc.file_name_id > m->nfile_names ||
                         loc.function_name_id < 0 || (uint32_t)loc.function_name_id > m->nfunction_names)
            fail(ps, at, "table entry %lld names a missing %s", (long long)id,
                 frames ? "file location" : "file or function name");
        if (frames && fr.parent_frame_id < 0) fail(ps, at, "stack frame %lld has parent_frame_id below 1 (the first id is 1)", (long long)id);
        if (n == cap) {
            size_t nc = cap ? cap * 2 : 16;
            void *nv = arena_alloc(&m->arena, nc * elem);
            if (n) memcpy(nv, v, n * elem);
            v = nv;
            cap = nc;
        }
        memcpy((char *)v + n * elem, frames ? (void *)&fr : (void *)&loc, elem);
        n++;
    }
    for (size_t i = 0; frames && i < n; i++)
        if ((size_t)((hlo_frame *)v)[i].parent_frame_id > n)
            fail(ps, ps->lx.p, "stack frame %zu names a missing parent frame", i + 1);
    if (frames) {
        m->frames = v;
        m->nframes = (uint32_t)n;
    } else {
        m->file_locs = v;
        m->nfile_locs = (uint32_t)n;
    }
}

/* module -> ('HloModule' name (',' key '=' raw)*)? tables computation* */
static void parse_module(parser *ps) {
    hlo_module *m = ps->m;
    lexer *lx = &ps->lx;
    m->name = "unnamed";
    if (lex_accept_word(lx, "HloModule")) {
        const char *s;
        size_t sn;
        name(ps, &s, &sn, "the module name");
        m->name = graph_intern(m, s, sn);
        size_t n = 0, cap = 0;
        hlo_attr *attrs = NULL;
        while (!lex_skip_inline(lx) && *lx->p == ',') {
            lx->p++;
            const char *k, *v;
            size_t kn, vn;
            name(ps, &k, &kn, "a module attribute");
            expect(ps, '=', "after the module attribute name");
            if (!lex_raw(lx, &v, &vn)) fail(ps, here(ps), "unbalanced brackets in a module attribute");
            if (n == cap) {
                size_t nc = cap ? cap * 2 : 8;
                hlo_attr *na = arena_alloc(&m->arena, nc * sizeof *na);
                if (n) memcpy(na, attrs, n * sizeof *na);
                attrs = na;
                cap = nc;
            }
            attrs[n++] = (hlo_attr){.key = A_RAW, .kind = K_RAW, .raw_key = graph_intern(m, k, kn),
                                    .v.str = graph_intern(m, v, vn)};
        }
        m->attrs = attrs;
        m->nattrs = (uint32_t)n;
    }
    for (;;) {
        if (lex_accept_word(lx, "FileNames")) parse_string_table(ps, &m->file_names, &m->nfile_names);
        else if (lex_accept_word(lx, "FunctionNames")) parse_string_table(ps, &m->function_names, &m->nfunction_names);
        else if (lex_accept_word(lx, "FileLocations")) parse_record_table(ps, false);
        else if (lex_accept_word(lx, "StackFrames")) parse_record_table(ps, true);
        else break;
    }
    bool seen_entry = false;
    while (here(ps) < lx->end) parse_computation(ps, &seen_entry);
    if (m->ncomps == 0) fail(ps, lx->p, "no computations in the input");
    for (size_t f = 0; f < ps->ncfix; f++) {
        fixup *fx = &ps->cfix[f];
        uint32_t idx;
        if (!strmap_get(&ps->comp_index, fx->name, fx->n, &idx))
            fail(ps, fx->at, "unknown computation '%.*s'", (int)(fx->n > 80 ? 80 : fx->n), fx->name);
        ps->comps[fx->comp].instrs[fx->instr].attrs[fx->attr].v.ints[fx->k] = idx;
    }
    m->comps = arena_memdup(&m->arena, ps->comps, m->ncomps * sizeof *ps->comps);
    m->entry = m->ncomps - 1;
    for (uint32_t c = 0; c < m->ncomps; c++)
        if (m->comps[c].is_entry) m->entry = c;
    m->comps[m->entry].is_entry = true;
    for (uint32_t c = 0; c < m->ncomps; c++)
        for (uint32_t i = 0; i < m->comps[c].ninstrs; i++) graph_finalize_instr(m, &m->comps[c].instrs[i]);
}

static void parser_free(parser *ps) {
    sb_free(&ps->str);
    sb_free(&ps->extra);
    free(ps->comps);
    strmap_free(&ps->comp_index);
    free(ps->cfix);
    free(ps->ins);
    strmap_free(&ps->instr_index);
    free(ps->ifix);
    free(ps->ops);
    free(ps->attrs);
    free(ps->ints);
    free(ps->ints2);
    free(ps->starts);
    free(ps->vals);
    free(ps->params);
    strmap_free(&ps->shared[0]);
    strmap_free(&ps->shared[1]);
    free(ps->shared_ptr);
}

hlo_sharding *hlo_sharding_from_text(hlo_module *m, const char *s, size_t n) {
    hlo_sharding *out = arena_alloc(&m->arena, sizeof *out);
    char *src = xmalloc(n + 3);
    src[0] = '{';
    memcpy(src + 1, s, n);
    src[n + 1] = '}';
    src[n + 2] = 0;
    parser *ps = xcalloc(1, sizeof *ps);
    diag quiet;
    diag_init(&quiet, "");
    lex_init(&ps->lx, src, n + 2);
    ps->d = &quiet;
    ps->m = m;
    if (memchr(s, 0, n) == NULL && setjmp(ps->fail) == 0) {
        hlo_sharding *r = parse_sharding(ps);
        if (here(ps) >= ps->lx.end) out = r;
        else out->type = SH_RAW;
    } else {
        out->type = SH_RAW;
    }
    if (out->type == SH_RAW && !out->raw) out->raw = graph_intern(m, s, n);
    parser_free(ps);
    free(ps);
    diag_free(&quiet);
    free(src);
    return out;
}

hlo_module *hlo_parse_text(const char *src, size_t n, const char *path, diag *d) {
    parser *ps = xcalloc(1, sizeof *ps);
    lex_init(&ps->lx, src, n);
    ps->d = d;
    ps->m = graph_new();
    ps->m->format = "text";
    arena_expect(&ps->m->arena, n * 2);          /* a module takes about 1.9 times its text */
    strmap_reserve(&ps->m->interned, n / 4096);  /* interned strings repeat: op types, files, keys */
    ps->m->source_path = graph_intern(ps->m, path ? path : "<input>", strlen(path ? path : "<input>"));
    hlo_module *m = ps->m;
    if (memchr(src, 0, n)) {
        diag_text(d, src, n, (size_t)((const char *)memchr(src, 0, n) - src), "NUL byte in HLO text");
        graph_free(m);
        m = NULL;
    } else if (setjmp(ps->fail) == 0) {
        parse_module(ps);
        if (graph_finalize(m, d)) {
            graph_free(m);
            m = NULL;
        }
    } else {
        graph_free(m);
        m = NULL;
    }
    parser_free(ps);
    free(ps);
    return m;
}
