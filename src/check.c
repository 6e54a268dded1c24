#include "check.h"

#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "egraph.h"
#include "hlo.h"
#include "io.h"
#include "lift.h"
#include "scalify.h"
#include "rules.h"
#include "sha256.h"
#include "view.h"
#include "witness.h"

typedef struct side {
    const char *path;
    hlo_module *m;
    char digest[65];
    trace_format format;
} side;

/* Reads one module; errors go to d (named after the file by the caller). */
static bool load(side *s, const char *path, diag *d) {
    s->path = path;
    size_t n;
    bool gz;
    uint8_t h[32];
    char *buf = io_read_file_sha256(path, &n, &gz, h, d);
    if (buf) {
        for (int i = 0; i < 32; i++) snprintf(s->digest + 2 * i, 3, "%02x", h[i]);
        s->m = hlo_read_buffer(buf, n, path, &s->format, d);
        free(buf);
    }
    return s->m != NULL;
}

/* The source location an instruction's metadata resolves to, when it has one. */
static void put_location(json_t *o, const hlo_instr *in) {
    if (!in->meta || !in->meta->src_file) return;
    json_object_set_new(o, "file", json_string(in->meta->src_file));
    if (in->meta->src_line > 0) json_object_set_new(o, "line", json_integer(in->meta->src_line));
    if (in->meta->src_col > 0) json_object_set_new(o, "column", json_integer(in->meta->src_col));
}

static json_t *site_json(const hlo_module *m, const hlo_comp *c, const hlo_instr *in) {
    json_t *o = json_object();
    strbuf b;
    sb_init(&b);
    hlo_print_instr(&b, m, c, in);
    json_object_set_new(o, "instruction", json_string(in->name));
    json_object_set_new(o, "opcode", json_string(in->opname));
    json_object_set_new(o, "hlo", json_string(b.s));
    sb_free(&b);
    if (in->meta && in->meta->op_name) json_object_set_new(o, "op_name", json_string(in->meta->op_name));
    put_location(o, in);
    return o;
}

/* op_name without the jit(...)/ prefix GSPMD modules carry. */
static const char *scope_of(const hlo_instr *in) {
    if (!in->meta || !in->meta->op_name) return NULL;
    const char *s = in->meta->op_name;
    if (strncmp(s, "jit(", 4) == 0) {
        const char *slash = strchr(s, '/');
        if (slash) return slash + 1;
    }
    return s;
}

/* Whether a baseline shape could be the global form of a distributed local
 * one: same rank, every global dim a multiple of the local one. */
static bool shape_fits(const shape *global, const shape *local) {
    if (global->rank != local->rank) return false;
    for (uint32_t k = 0; k < global->rank; k++)
        if (local->dims[k] <= 0 || global->dims[k] % local->dims[k] != 0) return false;
    return true;
}

/* Whether one op_name scope ends the other at a component boundary and has
 * two components or more: a loop body or called function names its ops
 * relative to itself ("attn/add" in "layers/while/body/closed_call/attn/add"). */
static bool scope_tail(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    if (la < lb) {
        const char *t = a;
        a = b, b = t;
        size_t lt = la;
        la = lb, lb = lt;
    }
    return strchr(b, '/') && la > lb && a[la - lb - 1] == '/' && strcmp(a + la - lb, b) == 0;
}

/* The nearest baseline counterpart of a distributed instruction: among those
 * with its opcode, the one sharing the most of op_name scope (which names the
 * layer), source line (model code shared by both programs), the end of the
 * scope (a loop body's relative names) and a fitting shape (a scope holds
 * several adds); else the first instruction of the same scope. Ties go to the
 * first in module order. *why says which. */
static const hlo_instr *counterpart(const hlo_module *b, const hlo_instr *in, const hlo_comp **bc, const char **why) {
    const char *want = scope_of(in);
    const hlo_meta *dm = in->meta;
    const hlo_instr *best = NULL, *loose = NULL;
    const hlo_comp *best_c = NULL, *loose_c = NULL;
    int best_score = 0;
    for (uint32_t c = 0; c < b->ncomps; c++)
        for (uint32_t i = 0; i < b->comps[c].ninstrs; i++) {
            const hlo_instr *x = &b->comps[c].instrs[i];
            const hlo_meta *bm = x->meta;
            const char *s = scope_of(x);
            bool same_scope = want && s && strcmp(s, want) == 0;
            if (same_scope && !loose) {
                loose = x;
                loose_c = &b->comps[c];
            }
            if (x->op != in->op) continue;
            bool same_line = dm && bm && dm->src_file && bm->src_file && dm->src_line > 0 &&
                             dm->src_line == bm->src_line && strcmp(dm->src_file, bm->src_file) == 0;
            bool same_tail = !same_scope && want && s && scope_tail(want, s);
            if (!same_scope && !same_line && !same_tail) continue;
            int score = 8 * same_scope + 4 * same_line + 2 * same_tail + shape_fits(&x->shape, &in->shape);
            if (score > best_score) {
                best_score = score;
                best = x;
                best_c = &b->comps[c];
                *why = same_scope ? "same op_name scope" : same_line ? "same source line" : "same end of op_name scope";
            }
        }
    if (!best && loose) *why = "the first instruction of its op_name scope";
    *bc = best ? best_c : loose_c;
    return best ? best : loose;
}

/* Source lines around a site, read only when the file resolves below root. */
static json_t *snippet(const char *root, const char *file, int line) {
    if (!root || !file || line <= 0) return NULL;
    char rroot[PATH_MAX], rfile[PATH_MAX], joined[PATH_MAX * 2];
    if (!realpath(root, rroot)) return NULL;
    snprintf(joined, sizeof joined, "%s/%s", root, file);
    if (!realpath(joined, rfile)) return NULL;
    size_t rl = strlen(rroot);
    if (strncmp(rfile, rroot, rl) != 0 || (rfile[rl] != '/' && rfile[rl] != 0)) {
        fprintf(stderr, "scalify check: %s escapes --source-root %s; not read\n", file, root);
        return NULL;
    }
    FILE *f = fopen(rfile, "r");
    if (!f) return NULL;
    json_t *lines = json_array();
    char buf[4096];
    int n = 0, first = line - 3 < 1 ? 1 : line - 3;
    while (fgets(buf, sizeof buf, f) && ++n <= line + 3) {
        if (n < first) continue;
        size_t l = strlen(buf);
        while (l && (buf[l - 1] == '\n' || buf[l - 1] == '\r')) buf[--l] = 0;
        json_array_append_new(lines, json_stringn(buf, l));
    }
    fclose(f);
    json_t *o = json_object();
    json_object_set_new(o, "file", json_string(file));
    json_object_set_new(o, "first_line", json_integer(first));
    json_object_set_new(o, "lines", lines);
    json_object_set_new(o, "highlight", json_integer(line));
    return o;
}

static void add_node(json_t *nodes, const char *id, const char *which, const hlo_instr *in, const char *role, int hops) {
    json_t *n = json_object();
    json_object_set_new(n, "id", json_string(id));
    json_object_set_new(n, "side", json_string(which));
    json_object_set_new(n, "label", json_string(in->name));
    json_object_set_new(n, "opcode", json_string(in->opname));
    json_object_set_new(n, "role", json_string(role));
    json_object_set_new(n, "hops", json_integer(hops));
    json_array_append_new(nodes, n);
}

static void add_edge(json_t *edges, const char *from, const char *to) {
    json_t *e = json_object();
    json_object_set_new(e, "from", json_string(from));
    json_object_set_new(e, "to", json_string(to));
    json_array_append_new(edges, e);
}

/* The divergence and its operands on both sides, one hop of context. */
static json_t *subgraph(const hlo_comp *dc, const hlo_instr *din, const hlo_comp *bc, const hlo_instr *bin) {
    json_t *g = json_object(), *nodes = json_array(), *edges = json_array(), *links = json_array();
    char id[32];
    add_node(nodes, "d0", "distributed", din, "divergence", 0);
    for (uint32_t o = 0; o < din->noperands && o < 8; o++) {
        snprintf(id, sizeof id, "d%u", o + 1);
        add_node(nodes, id, "distributed", &dc->instrs[din->operands[o]], "operand", 1);
        add_edge(edges, id, "d0");
    }
    if (bin) {
        add_node(nodes, "b0", "baseline", bin, "operand", 0);
        for (uint32_t o = 0; o < bin->noperands && o < 8; o++) {
            snprintf(id, sizeof id, "b%u", o + 1);
            add_node(nodes, id, "baseline", &bc->instrs[bin->operands[o]], "context", 1);
            add_edge(edges, id, "b0");
        }
        json_t *l = json_object();
        json_object_set_new(l, "from", json_string("b0"));
        json_object_set_new(l, "to", json_string("d0"));
        json_object_set_new(l, "view", json_string("counterpart"));
        json_array_append_new(links, l);
    }
    json_object_set_new(g, "nodes", nodes);
    json_object_set_new(g, "edges", edges);
    json_object_set_new(g, "links", links);
    json_object_set_new(g, "truncated", din->noperands > 8 ? json_string("operands beyond 8 not shown") : json_null());
    return g;
}

/* The segment an instruction belongs to: its op_name scope, else "entry". */
static json_t *segment_name(const hlo_instr *in) {
    const char *s = scope_of(in);
    const char *e = s ? strchr(s, '/') : NULL;
    return e ? json_stringn(s, (size_t)(e - s)) : json_string("entry");
}

static json_t *finding_json(const check_opts *o, const hlo_module *B, const hlo_module *D, int idx, const char *kind,
                            const char *severity, const char *message, const hlo_comp *dc, const hlo_instr *din) {
    json_t *f = json_object();
    char id[16];
    snprintf(id, sizeof id, "F%d", idx);
    json_object_set_new(f, "id", json_string(id));
    json_object_set_new(f, "kind", json_string(kind));
    json_object_set_new(f, "severity", json_string(severity));
    json_object_set_new(f, "segment", segment_name(din));
    json_object_set_new(f, "message", json_string(message));
    const hlo_comp *bc = NULL;
    const char *why = "";
    const hlo_instr *bin = counterpart(B, din, &bc, &why);
    strbuf ex;
    sb_init(&ex);
    sb_printf(&ex, "%s (%s) in the distributed program", din->name, din->opname);
    if (bin) sb_printf(&ex, "; nearest baseline counterpart %s (%s), %s", bin->name, bin->opname, why);
    else sb_puts(&ex, "; no baseline instruction shares its op_name scope, source line or opcode and scope ending");
    json_object_set_new(f, "explanation", json_string(ex.s));
    sb_free(&ex);
    json_object_set_new(f, "distributed", site_json(D, dc, din));
    json_object_set_new(f, "baseline", bin ? site_json(B, bc, bin) : json_null());
    json_t *inv = json_array();
    for (uint32_t k = 0; k < din->noperands && k < 8; k++) {
        json_t *x = json_object();
        strbuf b;
        sb_init(&b);
        const hlo_instr *op = &dc->instrs[din->operands[k]];
        hlo_print_instr(&b, D, dc, op);
        json_object_set_new(x, "side", json_string("distributed"));
        json_object_set_new(x, "instruction", json_string(op->name));
        json_object_set_new(x, "hlo", json_string(b.s));
        put_location(x, op);
        sb_free(&b);
        json_array_append_new(inv, x);
    }
    json_object_set_new(f, "involved", inv);
    json_object_set_new(f, "subgraph", subgraph(dc, din, bc, bin));
    json_t *snips = json_array();
    if (din->meta && din->meta->src_file) {
        json_t *s = snippet(o->source_root, din->meta->src_file, din->meta->src_line);
        if (s) json_array_append_new(snips, s);
    }
    json_object_set_new(f, "snippets", snips);
    return f;
}

static json_t *num(double x) {
    if (isnan(x)) return json_string("nan");
    if (isinf(x)) return json_string(x > 0 ? "inf" : "-inf");
    return json_real(x);
}

static json_t *witness_json(const witness *w) {
    json_t *o = json_object(), *at = json_object();
    json_object_set_new(o, "inputs_seed", json_integer((json_int_t)w->seed));
    json_object_set_new(o, "max_abs", num(w->max_abs));
    json_object_set_new(o, "max_rel", num(w->max_rel));
    json_object_set_new(at, "max_abs", num(w->max_abs));
    json_object_set_new(at, "max_rel", num(w->max_rel));
    json_object_set_new(o, "at_outputs", at);
    return o;
}

/* A finding kind for a divergence confirmed only by execution, from what
 * diverged: its opcode (a collective or slice that places the value, a layout
 * op, a convert) or, for arithmetic, an operand computed from constants alone
 * (a scale, a table: the constant differs). */
static const char *kind_of_divergence(const hlo_instr *in, bool konst_operand) {
    switch (in->op) {
    case OP_RESHAPE: case OP_TRANSPOSE: case OP_BITCAST: case OP_CONCATENATE: case OP_SLICE: case OP_DOT:
        return "layout-mismatch";
    case OP_CONVERT: return "dtype-mismatch";
    case OP_ALL_REDUCE: case OP_REDUCE_SCATTER: return "wrong-reduction";
    case OP_ALL_GATHER: case OP_ALL_TO_ALL: case OP_DYNAMIC_SLICE: return "wrong-shard-dim";
    case OP_COLLECTIVE_PERMUTE: return "wrong-collective-group";
    default: break;
    }
    return konst_operand ? "constant-mismatch" : "layout-mismatch";
}

/* A walk over (computation, instruction) pairs of a module, each visited once. */
typedef struct walk {
    const hlo_module *m;
    uint8_t **seen;               /* per computation, per instruction (lazily) */
    uint32_t (*stack)[2];
    size_t n, cap;
} walk;

static void walk_push(walk *w, uint32_t c, uint32_t i) {
    if (!w->seen[c]) w->seen[c] = xcalloc(w->m->comps[c].ninstrs + 1, 1);
    if (w->seen[c][i]) return;
    w->seen[c][i] = 1;
    if (w->n == w->cap) w->stack = xrealloc(w->stack, (w->cap = 2 * w->cap + 16) * sizeof *w->stack);
    w->stack[w->n][0] = c;
    w->stack[w->n++][1] = i;
}

static bool is_elided_constant(const hlo_instr *x) {
    const hlo_attr *lit = x->op == OP_CONSTANT ? instr_attr(x, A_LITERAL) : NULL;
    return lit && lit->v.lit->elided;
}

/* The first constant whose values the dump left out ({...}) that instruction
 * in of computation c depends on, following calls into their callee's root
 * and callee parameters back to their call sites' operands; NULL when none.
 * Such a constant is equal only to itself, so no term built on it can meet
 * the other program's. */
static const hlo_instr *elided_ancestor(const hlo_module *m, const hlo_comp *c, const hlo_instr *in) {
    walk w = {.m = m, .seen = xcalloc(m->ncomps + 1, sizeof *w.seen)};
    const hlo_instr *found = NULL;
    walk_push(&w, (uint32_t)(c - m->comps), (uint32_t)(in - c->instrs));
    while (w.n && !found) {
        w.n--;
        uint32_t ci = w.stack[w.n][0], ii = w.stack[w.n][1];
        const hlo_comp *xc = &m->comps[ci];
        const hlo_instr *x = &xc->instrs[ii];
        if (is_elided_constant(x)) found = x;
        const hlo_attr *callee = x->op == OP_CALL ? instr_attr(x, A_TO_APPLY) : NULL;
        if (callee && callee->v.ints[0] >= 0 && (uint64_t)callee->v.ints[0] < m->ncomps)
            walk_push(&w, (uint32_t)callee->v.ints[0], m->comps[callee->v.ints[0]].root);
        for (uint32_t k = 0; x->op == OP_PARAMETER && k < xc->nparams; k++) {
            if (xc->params[k] != ii) continue;
            for (uint32_t cc = 0; cc < m->ncomps; cc++)
                for (uint32_t j = 0; j < m->comps[cc].ninstrs; j++) {
                    const hlo_instr *y = &m->comps[cc].instrs[j];
                    const hlo_attr *ta = y->op == OP_CALL ? instr_attr(y, A_TO_APPLY) : NULL;
                    if (ta && ta->v.ints[0] == (int64_t)ci && k < y->noperands) walk_push(&w, cc, y->operands[k]);
                }
        }
        for (uint32_t o = 0; o < x->noperands; o++) walk_push(&w, ci, x->operands[o]);
    }
    for (uint32_t k = 0; k < m->ncomps; k++) free(w.seen[k]);
    free(w.seen);
    free(w.stack);
    return found;
}

static const char *base_name(const char *p) {
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

/* sha256 over the .rules files of dir in name order (names and contents). */
static void rules_digest(const char *dir, uint8_t out[32]) {
    strbuf all;
    sb_init(&all);
    size_t n;
    char **paths = rs_list_dir(dir, &n);
    for (size_t i = 0; i < n; i++) {
        diag d;
        diag_init(&d, paths[i]);
        size_t len;
        char *txt = io_read_file(paths[i], &len, NULL, &d);
        sb_printf(&all, "%s\n", base_name(paths[i]));
        if (txt) sb_put(&all, txt, len);
        free(txt);
        diag_free(&d);
    }
    rs_paths_free(paths, n);
    sha256(all.s ? all.s : "", all.len, out);
    sb_free(&all);
}

static json_t *file_json(const side *s) {
    json_t *o = json_object();
    json_object_set_new(o, "path", json_string(s->path));
    json_object_set_new(o, "format", json_string(trace_format_name(s->format)));
    json_object_set_new(o, "module", json_string(s->m->name));
    json_object_set_new(o, "instructions", json_integer((json_int_t)graph_instr_count(s->m)));
    json_object_set_new(o, "sha256", json_string(s->digest));
    return o;
}

typedef struct load_job {
    side *s;
    const char *path;
    diag d;
    bool ok;
} load_job;

static void *load_job_run(void *p) {
    load_job *j = p;
    j->ok = load(j->s, j->path, &j->d);
    return NULL;
}

/* The rules that fired in a saturation run, most first (at most 10; the
 * trace's top_rules). */
static json_t *most_fired(const rs_ruleset *rs, const rs_result *sat) {
    json_t *top = json_array();
    bool *taken = xcalloc(sat->nrules + 1, sizeof *taken);
    for (int n = 0; n < 10; n++) {
        uint32_t best = UINT32_MAX;
        for (uint32_t r = 0; r < sat->nrules; r++)
            if (!taken[r] && sat->fired[r] && (best == UINT32_MAX || sat->fired[r] > sat->fired[best])) best = r;
        if (best == UINT32_MAX) break;
        taken[best] = true;
        json_t *e = json_object();
        json_object_set_new(e, "rule", json_string(rs_rule_name(rs, best)));
        json_object_set_new(e, "count", json_integer((json_int_t)sat->fired[best]));
        json_array_append_new(top, e);
    }
    free(taken);
    return top;
}

/* Equality saturation of a pair's e-graph (DESIGN §5, §6), run by the memo
 * while lifting, for the segment it wants a representative of, and after
 * lifting when an output is still apart from the baseline's. The rules load
 * on first use (a warning when they do not); each run's figures are kept for
 * the segment it ran for. */
typedef struct sat_run {
    uint32_t seg;                 /* UINT32_MAX: the run after lifting */
    uint32_t iterations;
    rs_stop stop;
    uint64_t unions;
    double ms;
    json_t *top;                  /* the rules that fired most */
} sat_run;

typedef struct saturator {
    const char *rules_dir;        /* NULL: no rules, no saturation */
    diag *d;
    rs_ruleset *rs;
    bool failed;                  /* the rules did not load */
    rs_result last;               /* the latest run's result */
    sat_run *runs;
    size_t nruns, capruns;
} saturator;

static bool saturate(saturator *s, egraph *g, uint32_t seg) {
    if (!s->rules_dir || s->failed) return false;
    if (!s->rs) {
        diag rd;
        diag_init(&rd, s->rules_dir);
        s->rs = rs_new();
        if (rs_load_dir(s->rs, s->rules_dir, &rd) != 0) {
            diag_plain(s->d, "warning: rules in %s do not load; checking without them", s->rules_dir);
            rs_free(s->rs);
            s->rs = NULL;
            s->failed = true;
        }
        diag_free(&rd);
        if (s->failed) return false;
    }
    rs_budget b = rs_budget_default();
    b.node_limit = 4 * (uint64_t)eg_node_count(g) + 100000;
    b.time_limit_ms = 5000;
    rs_db *db = rs_db_new(s->rs);
    double ts = now_ms();
    rs_result_free(&s->last);
    memset(&s->last, 0, sizeof s->last);
    rs_run(s->rs, g, db, &b, NULL, &s->last);
    rs_db_free(db);
    eg_rebuild(g);
    XGROW(s->runs, s->capruns, s->nruns + 1);
    s->runs[s->nruns++] = (sat_run){seg, s->last.iterations, s->last.stop, s->last.unions, now_ms() - ts,
                                    most_fired(s->rs, &s->last)};
    return true;
}

static bool lift_saturate(lift_ctx *c, void *arg) { return saturate(arg, c->g, c->cur_seg); }

static void saturator_free(saturator *s) {
    for (size_t i = 0; i < s->nruns; i++) json_decref(s->runs[i].top);
    free(s->runs);
    rs_result_free(&s->last);
    rs_free(s->rs);
}

/* Reads both modules, at once on two threads when jobs ≥ 2 (the readers share
 * no mutable state); diagnostics come out in the same order either way. */
static bool load_both(const check_opts *o, side *B, side *D, diag *d) {
    load_job jb = {B, o->baseline, {0}, false}, jd = {D, o->distributed, {0}, false};
    diag_init(&jb.d, o->baseline);
    diag_init(&jd.d, o->distributed);
    pthread_t t;
    bool threaded = o->jobs >= 2 && pthread_create(&t, NULL, load_job_run, &jd) == 0;
    load_job_run(&jb);
    if (threaded) pthread_join(t, NULL);
    else if (jb.ok) load_job_run(&jd);
    load_job *js[2] = {&jb, &jd};
    for (int k = 0; k < (jb.ok ? 2 : 1); k++) {
        if (js[k]->d.out.len) sb_put(&d->out, js[k]->d.out.s, js[k]->d.out.len);
        d->count += js[k]->d.count;
    }
    diag_free(&jb.d);
    diag_free(&jd.d);
    return jb.ok && jd.ok;
}

/* The command line that checks this pair again as it was checked (the same
 * options that shape the trace; -j and -o do not), paths as given. The
 * default rules (found beside the binary) are left to the default: the
 * trace's rules_digest says which rules were in force. */
static json_t *command_json(const check_opts *o) {
    json_t *c = json_array();
    const char *fixed[] = {"scalify", "check", "--baseline", o->baseline, "--distributed", o->distributed};
    for (size_t i = 0; i < ARRAY_LEN(fixed); i++) json_array_append_new(c, json_string(fixed[i]));
    const char *opt[][2] = {{"--relations", o->relations}, {"--source-root", o->source_root},
                            {"--rules", o->rules_given ? o->rules_dir : NULL}, {"--name", o->name}};
    for (size_t i = 0; i < ARRAY_LEN(opt); i++)
        if (opt[i][1]) json_array_append_new(c, json_string(opt[i][0])), json_array_append_new(c, json_string(opt[i][1]));
    if (!o->relations) json_array_append_new(c, json_string("--auto-relations"));
    if (o->witness) json_array_append_new(c, json_string("--witness"));
    if (o->no_memo) json_array_append_new(c, json_string("--no-memo"));
    return c;
}

/* Outputs the lifting proved different from the baseline's (lift_scale.c):
 * a factor put back where the baseline puts another into the same term, and
 * from there only ops that keep a difference, to a value whose other term
 * (the one it would be with the baseline's factor) is the baseline output's
 * class while its own is not. One finding per proved difference, at the op
 * that made the factor. */
static void proved_differences(const check_opts *o, const side *B, const side *D, lift_ctx *lc, const relations *rel,
                               const lval *root, const eid *bouts, uint32_t nbouts, json_t *findings, json_t *counts, int *nf) {
    uint32_t nouts = root->kind == LV_TUPLE ? root->n : 1;
    bool *told = xcalloc(lc->ndiffs + 1, sizeof *told);
    for (uint32_t k = 0; k < nouts && k < nbouts && k < rel->noutputs; k++) {
        const lval *v = root->kind == LV_TUPLE ? &root->elems[k] : root;
        if (!v->diff || v->kind != LV_TERM || v->assumed || v->ambiguous || told[v->diff]) continue;
        if (eg_find(lc->g, v->corr) != eg_find(lc->g, bouts[k]) || eg_find(lc->g, v->cls) == eg_find(lc->g, bouts[k]))
            continue;
        /* Compared through the view the output must have (or, unconstrained,
         * any plain one): a device's piece is then that view of the term. */
        if (!view_equal(&v->v, &rel->outputs[k]) && !(rel->output_free && rel->output_free[k] && !v->v.partial)) continue;
        const lift_finding *d = &lc->diffs[v->diff - 1];
        told[v->diff] = true;
        strbuf msg;
        sb_init(&msg);
        sb_printf(&msg, "output %u is not the baseline's: where %s makes the factor, %s; every op from there to the output "
                  "keeps the difference (only additions, negations, conversions and layout ops follow), so the output "
                  "differs from the baseline's wherever that value is non-zero", k, d->in->name, d->message);
        json_array_append_new(findings, finding_json(o, B->m, D->m, ++*nf, d->kind, "error", msg.s, d->comp, d->in));
        json_t *cnt = json_object_get(counts, d->kind);
        json_object_set_new(counts, d->kind, json_integer((cnt ? json_integer_value(cnt) : 0) + 1));
        sb_free(&msg);
    }
    free(told);
}

int check_pair(const check_opts *o, json_t **trace, diag *d) {
    peak_rss_reset(); /* each pair of a batch reports its own peak */
    double t0 = now_ms(), c0 = cpu_ms();
    *trace = NULL;
    side B = {0}, D = {0};
    relations rel = {0};
    int verdict = VERDICT_ERROR;
    if (!load_both(o, &B, &D, d)) goto out;
    const hlo_comp *be = graph_entry(B.m), *de = graph_entry(D.m);
    if (be->nparams != de->nparams) {
        diag_plain(d, "the baseline has %u parameters but the distributed program has %u: parameters must correspond one to one",
                   be->nparams, de->nparams);
        goto out;
    }
    bool rel_ok = o->relations ? relations_read(o->relations, B.m, &rel, d)
                               : relations_auto(B.m, graph_num_devices(D.m), &rel, d);
    if (!rel_ok) goto out;
    if (rel.ninputs != be->nparams) {
        diag_plain(d, "the relations name %u inputs for %u parameters", rel.ninputs, be->nparams);
        goto out;
    }
    /* A program that states no device count (a protobuf module whose program
     * needs no collective) runs on the relations' mesh: lacking a collective
     * is something to judge, not bad input. */
    if (graph_devices_stated(D.m) && mesh_devices(&rel.mesh) != graph_num_devices(D.m)) {
        diag_plain(d, "the mesh has %lld devices but the distributed program runs on %lld",
                   (long long)mesh_devices(&rel.mesh), (long long)graph_num_devices(D.m));
        goto out;
    }
    /* Local parameter shapes must be the views' local shapes. */
    for (uint32_t k = 0; k < be->nparams; k++) {
        const hlo_instr *bp = &be->instrs[be->params[k]], *dp = &de->instrs[de->params[k]];
        int64_t local[VIEW_MAX_RANK];
        /* Relations describe arrays of bounded rank: limits of ours, said as such. */
        if (bp->shape.dtype == DT_TUPLE) {
            diag_plain(d, "parameter %u (%s) is a tuple; relations describe array parameters (JAX exports flatten "
                          "tuples into separate parameters)", k, bp->name);
            goto out;
        }
        if (bp->shape.rank > VIEW_MAX_RANK) {
            diag_plain(d, "parameter %u (%s) has rank %u; relations describe arrays of rank at most %d", k, bp->name,
                       bp->shape.rank, VIEW_MAX_RANK);
            goto out;
        }
        if (
            !view_local_dims(&rel.inputs[k], &rel.mesh, &bp->shape, local) || dp->shape.rank != bp->shape.rank ||
            (bp->shape.rank && memcmp(local, dp->shape.dims, bp->shape.rank * sizeof *local) != 0) ||
            dp->shape.dtype != bp->shape.dtype) {
            strbuf a, b;
            sb_init(&a);
            sb_init(&b);
            view_print(&a, &rel.inputs[k], &rel.mesh);
            shape_print(&b, &dp->shape);
            diag_plain(d, "parameter %u: the view %s of the baseline's %s does not give the distributed %s", k, a.s,
                       bp->name, b.s);
            sb_free(&a);
            sb_free(&b);
            goto out;
        }
    }

    egraph *g = eg_new();
    arena a;
    arena_init(&a);
    lift_ctx lc;
    /* A mesh inferred from shardings is a guess: refine it where groups use part
     * of an axis. A declared mesh stays as declared (such groups are findings). */
    if (!o->relations) lift_refine_mesh(&rel, D.m);
    lift_init(&lc, g, &a, B.m, D.m, &rel.mesh);
    lc.mesh_inferred = o->relations == NULL;
    lc.no_memo = o->no_memo;
    saturator sr = {.rules_dir = o->rules_dir, .d = d};
    lc.saturate = lift_saturate;
    lc.saturate_arg = &sr;
    double t1 = now_ms();
    eid *bouts;
    uint32_t nbouts;
    lift_baseline(&lc, &bouts, &nbouts);
    double t2 = now_ms();
    lval root = lift_distributed(&lc, rel.inputs, rel.ninputs);
    double t3 = now_ms();
    eg_rebuild(g);
    /* Equality saturation with the rules when an output's term has not met its
     * baseline class by construction: rewrites may join them. */
    const sat_run *final_run = NULL; /* the run after lifting, if any */
    if (!lc.nfindings) {
        uint32_t nouts0 = root.kind == LV_TUPLE ? root.n : 1;
        bool apart = false;
        for (uint32_t k = 0; k < nouts0 && k < nbouts; k++) {
            const lval *v = root.kind == LV_TUPLE ? &root.elems[k] : &root;
            apart |= v->kind == LV_TERM && !v->assumed && eg_find(g, v->cls) != eg_find(g, bouts[k]);
        }
        if (apart && saturate(&sr, g, UINT32_MAX)) final_run = &sr.runs[sr.nruns - 1];
    }
    double sat_ms = final_run ? final_run->ms : 0;

    json_t *findings = json_array();
    json_t *counts = json_object();
    int nf = 0;
    /* The same mistake repeats in every layer: the first CHECK_MAX_PER_KIND of a
     * kind are listed, the summary counts them all. */
    enum { CHECK_MAX_PER_KIND = 16 };
    for (uint32_t i = 0; i < lc.nfindings; i++) {
        lift_finding *f = &lc.findings[i];
        json_t *cnt = json_object_get(counts, f->kind);
        json_int_t seen = cnt ? json_integer_value(cnt) : 0;
        if (seen < CHECK_MAX_PER_KIND)
            json_array_append_new(findings, finding_json(o, B.m, D.m, ++nf, f->kind, "error", f->message, f->comp, f->in));
        json_object_set_new(counts, f->kind, json_integer(seen + 1));
    }
    /* Outputs: each must be the baseline output's class with the expected view. */
    strbuf why;
    sb_init(&why);
    uint32_t nouts = root.kind == LV_TUPLE ? root.n : 1;
    bool outputs_ok = nouts == nbouts && nouts == rel.noutputs;
    if (nouts != nbouts) sb_printf(&why, "the distributed program has %u outputs, the baseline %u", nouts, nbouts);
    for (uint32_t k = 0; outputs_ok && k < nouts; k++) {
        const lval *v = root.kind == LV_TUPLE ? &root.elems[k] : &root;
        if (v->kind != LV_TERM) {
            sb_printf(&why, "output %u could not be related to the baseline", k);
            outputs_ok = false;
        } else if (v->assumed) {
            sb_printf(&why, "output %u rests on a value that could not be related (assumed)", k);
            outputs_ok = false;
        } else if (eg_find(g, v->cls) != eg_find(g, bouts[k])) {
            sb_printf(&why, "output %u: the lifted term does not meet the baseline output's class", k);
            outputs_ok = false;
        } else if (!view_equal(&v->v, &rel.outputs[k]) && rel.output_free && rel.output_free[k] && !v->v.partial) {
            /* Unconstrained: the program's own sharding of it is the relation
             * (the trace's relations show it). */
            rel.outputs[k] = v->v;
        } else if (!view_equal(&v->v, &rel.outputs[k])) {
            strbuf got, exp;
            sb_init(&got);
            sb_init(&exp);
            view_print(&got, &v->v, &rel.mesh);
            view_print(&exp, &rel.outputs[k], &rel.mesh);
            sb_printf(&why, "output %u is %s but %s is expected", k, got.s, exp.s);
            sb_free(&got);
            sb_free(&exp);
            outputs_ok = false;
            const hlo_instr *rin = &de->instrs[de->root];
            if (!lc.nfindings) {
                json_array_append_new(findings, finding_json(o, B.m, D.m, ++nf, "wrong-shard-dim", "error", why.s, de, rin));
                json_object_set_new(counts, "wrong-shard-dim", json_integer(1));
            }
        }
    }
    if (!outputs_ok && !lc.first_unsupported && !lc.divergence && lc.silent) {
        /* Nothing said why: the first instruction left unknown is the reason. */
        lc.first_unsupported = lc.silent;
        lc.first_unsupported_comp = lc.silent_comp;
        lc.unsupported_why = lc.silent_why;
    }
    proved_differences(o, &B, &D, &lc, &rel, &root, bouts, nbouts, findings, counts, &nf);
    if (getenv("SCALIFY_DEBUG_LIFT"))
        fprintf(stderr, "check: outputs %s (%s); divergence %s; resynced %u; memo %u of %u runs\n", outputs_ok ? "meet" : "differ",
                why.s ? why.s : "", lc.divergence ? lc.divergence->name : "none", lc.resynced, lc.memo_hits, lc.memo_runs);
    witness w = {0};
    /* Run on verified pairs too: a proof execution contradicts is a checker
     * defect, and the programs differ (below). */
    bool proved = outputs_ok && !lc.first_unsupported && !lc.assumed && !lc.resynced && !lc.nfindings &&
                  json_array_size(findings) == 0;
    if (o->witness) {
        /* Unconstrained outputs are compared through the view the program
         * leaves them in, where the lifting found one. */
        for (uint32_t k = 0; rel.output_free && k < rel.noutputs && k < (root.kind == LV_TUPLE ? root.n : 1); k++) {
            const lval *v = root.kind == LV_TUPLE ? &root.elems[k] : &root;
            if (rel.output_free[k] && v->kind == LV_TERM && !v->v.partial && !v->assumed && !v->ambiguous) rel.outputs[k] = v->v;
        }
        witness_run(B.m, D.m, &rel, 1, &w);
    }
    /* A precision finding (dtype-mismatch) is about rounding and range, which
     * random inputs of magnitude one need not show; every other kind changes
     * values. */
    bool contradicted = json_array_size(findings) > 0 && w.ran && w.agrees;
    for (size_t k = 0; contradicted && k < json_array_size(findings); k++)
        contradicted = strcmp(json_string_value(json_object_get(json_array_get(findings, k), "kind")), "dtype-mismatch") != 0;
    if (contradicted) {
        /* The rules found a bug that execution does not show: one of them is
         * wrong, and a correct program must never be called a bug. Said
         * loudly, as a checker defect, and the pair stays undecided. */
        json_t *f0 = json_array_get(findings, 0);
        strbuf msg;
        sb_init(&msg);
        sb_printf(&msg, "unverified: the transfer functions report %zu finding%s (the first: %s at %s: %s), but both programs "
                  "give the same outputs on seeded random inputs within rounding (max abs difference %g, %d runs): the "
                  "checker is wrong about this program (a defect to report), so nothing is decided",
                  json_array_size(findings), json_array_size(findings) == 1 ? "" : "s",
                  json_string_value(json_object_get(f0, "kind")),
                  json_string_value(json_object_get(json_object_get(f0, "distributed"), "instruction")),
                  json_string_value(json_object_get(f0, "message")), w.max_abs, w.runs);
        fprintf(stderr, "scalify: warning: %s: %s\n", o->name ? o->name : o->distributed, msg.s);
        json_t *f = json_deep_copy(f0);
        json_object_set_new(f, "id", json_string("F1"));
        json_object_set_new(f, "kind", json_string("unsupported-op"));
        json_object_set_new(f, "severity", json_string("warning"));
        json_object_set_new(f, "message", json_string(msg.s));
        json_object_set_new(f, "witness", witness_json(&w));
        json_array_clear(findings);
        json_array_append_new(findings, f);
        json_object_clear(counts);
        json_object_set_new(counts, "unsupported-op", json_integer(1));
        nf = 1;
        verdict = VERDICT_UNVERIFIED;
        sb_free(&msg);
    } else if (json_array_size(findings) > 0) {
        verdict = VERDICT_MISMATCH;
        if (w.ran) json_object_set_new(json_array_get(findings, 0), "witness", witness_json(&w));
    } else if (proved && w.ran && w.differs) {
        /* The transfer functions related every output to the baseline's and
         * execution disagrees: the rules or the interpreter are wrong about
         * this program. Said loudly, as a checker defect; nothing is decided
         * (as for a finding execution contradicts). */
        verdict = VERDICT_UNVERIFIED;
        const hlo_instr *rin = &de->instrs[de->root];
        strbuf msg;
        sb_init(&msg);
        sb_printf(&msg, "unverified: the transfer functions relate every output to the baseline's, but execution on seeded "
                  "random inputs shows outputs up to %g apart (%d run%s): the checker is wrong about this program (a defect "
                  "to report), so nothing is decided", w.max_abs, w.runs, w.runs == 1 ? "" : "s");
        fprintf(stderr, "scalify: warning: %s: %s\n", o->name ? o->name : o->distributed, msg.s);
        json_t *f = finding_json(o, B.m, D.m, ++nf, "unsupported-op", "warning", msg.s, de, rin);
        json_object_set_new(f, "witness", witness_json(&w));
        json_array_append_new(findings, f);
        json_object_set_new(counts, "unsupported-op", json_integer(1));
        sb_free(&msg);
    } else if (w.ran && w.differs) {
        /* Undecided by the rules, but the programs compute different outputs.
         * Localised to the first divergence, else to the first instruction the
         * rules could not relate after a region assumed equal to the
         * baseline's (resynchronised), else the first one overall; the kind
         * comes from what that instruction is. */
        verdict = VERDICT_MISMATCH;
        /* A divergence after a region assumed equal may be that assumption's
         * doing: the instruction that forced it comes first then. */
        bool div = lc.divergence && !(lc.divergence_resynced && lc.first_unsupported);
        bool later = !lc.divergence && lc.later_unsupported;
        const hlo_comp *uc = div ? lc.divergence_comp : later ? lc.later_unsupported_comp : lc.first_unsupported_comp;
        const hlo_instr *ui = div ? lc.divergence : later ? lc.later_unsupported : lc.first_unsupported;
        bool konst_operand = div ? lc.divergence_konst : later ? lc.later_unsupported_konst : lc.unsupported_konst;
        const char *kind = div && lc.divergence_kind ? lc.divergence_kind
                           : !div && !later && lc.unsupported_kind ? lc.unsupported_kind
                           : ui ? kind_of_divergence(ui, konst_operand) : "unsupported-op";
        if (!ui) {
            uc = de;
            ui = &de->instrs[de->root];
        }
        strbuf msg;
        sb_init(&msg);
        sb_printf(&msg, "the outputs differ from the baseline's by up to %g (confirmed by execution on seeded random inputs); ", w.max_abs);
        if (div && lc.divergence_layout)
            sb_printf(&msg, "first divergence at %s: it rearranges baseline values into a layout no baseline value has, "
                      "and the program computes with them in that layout", ui->name);
        else if (div && lc.divergence_note) sb_printf(&msg, "first divergence at %s: %s", ui->name, lc.divergence_note);
        else if (div) sb_printf(&msg, "first divergence at %s", ui->name);
        else if (lc.divergence)
            sb_printf(&msg, "the first instruction not related is %s (%s); the first divergence, %s, comes after the '%s' "
                      "region assumed equal to the baseline's", ui->name, lc.unsupported_why, lc.divergence->name,
                      lc.resync_scope ? lc.resync_scope : "?");
        else if (later)
            sb_printf(&msg, "the first instruction not related after the '%s' region assumed equal to the baseline's is %s (%s; "
                      "the first overall is %s)", lc.resync_scope ? lc.resync_scope : "?", ui->name, lc.later_unsupported_why,
                      lc.first_unsupported->name);
        else if (lc.first_unsupported) sb_printf(&msg, "the first instruction not related is %s (%s)", ui->name, lc.unsupported_why);
        else sb_printf(&msg, "no instruction diverged or was left unrelated before the output %s", ui->name);
        json_t *f = finding_json(o, B.m, D.m, ++nf, kind, "error", msg.s, uc, ui);
        json_object_set_new(f, "witness", witness_json(&w));
        json_array_append_new(findings, f);
        json_object_set_new(counts, kind, json_integer(1));
        sb_free(&msg);
    } else if (outputs_ok && !lc.first_unsupported && !lc.assumed && !lc.resynced) {
        verdict = VERDICT_VERIFIED;
    } else {
        /* Undecided: the trace says where and why, as a warning-level finding. */
        verdict = VERDICT_UNVERIFIED;
        const hlo_comp *uc = lc.first_unsupported ? lc.first_unsupported_comp : lc.divergence_comp;
        const hlo_instr *ui = lc.first_unsupported ? lc.first_unsupported : lc.divergence;
        if (!ui) {
            uc = de;
            ui = &de->instrs[de->root];
        }
        /* A dump that left a constant's values out ({...}: text dumps do for
         * large ones) is a reason when the divergence or an output depends on
         * one: terms built on it never meet, whatever the rules. */
        const hlo_instr *el = elided_ancestor(D.m, uc, ui), *at = ui;
        if (!el) el = elided_ancestor(D.m, de, at = &de->instrs[de->root]);
        const side *els = el ? &D : &B;
        if (!el) el = elided_ancestor(B.m, be, at = &be->instrs[be->root]);
        strbuf msg;
        sb_init(&msg);
        if (el) {
            strbuf sh;
            sb_init(&sh);
            shape_print(&sh, &el->shape);
            sb_printf(&msg, "unverified: the %s dump %s leaves out the values of %s (%s, printed as {...})", els == &D ? "distributed" : "baseline",
                      els->path, el->name, sh.s);
            if (el != at)
                sb_printf(&msg, ", on which %s%s depends", at == lc.divergence ? "the first divergence " : at == ui ? "" : "the output ",
                          at->name);
            sb_printf(&msg, ", so terms built on it cannot be compared with the %s's; the protobuf dump (.pb) carries the values: "
                      "check that instead (%s)", els == &D ? "baseline" : "distributed program",
                      lc.first_unsupported ? lc.unsupported_why : why.s);
            sb_free(&sh);
        } else if (lc.first_unsupported && outputs_ok && !lc.assumed) {
            sb_printf(&msg, "unverified: every output meets the baseline's, assuming the '%s' region (%s) computes what the "
                      "baseline's does", lc.resync_scope ? lc.resync_scope : "?", lc.unsupported_why);
        } else if (lc.first_unsupported) {
            sb_printf(&msg, "unverified: %s", lc.unsupported_why);
        } else {
            sb_printf(&msg, "unverified: %s; first divergence at %s, whose operands are related", why.s, ui->name);
            if (ui == lc.divergence && lc.divergence_note) sb_printf(&msg, " (%s)", lc.divergence_note);
            if (final_run) /* sr.last is that run's result */
                sb_printf(&msg, " (still apart after equality saturation with %u rule%s: %u iteration%s, stopped: %s)",
                          sr.last.nrules, sr.last.nrules == 1 ? "" : "s", final_run->iterations,
                          final_run->iterations == 1 ? "" : "s", trace_stop_name(final_run->stop));
            else if (!o->rules_dir) sb_puts(&msg, " (no rewrite rules were given)");
        }
        if (w.ran && w.agrees) sb_printf(&msg, "; the outputs agree on seeded random inputs (max abs difference %g)", w.max_abs);
        else if (w.ran && w.over_tight)
            sb_printf(&msg, "; on seeded random inputs the outputs differ by up to %g (%.3g of their magnitude): more than "
                      "rounding explains, less than decides a mismatch", w.max_abs, w.max_rel);
        else if (w.ran) /* not agreeing only because some outputs were not compared */
            sb_printf(&msg, "; on seeded random inputs the compared outputs agree (max abs difference %g), %u output block%s "
                      "not compared (%s)", w.max_abs, w.skipped, w.skipped == 1 ? "" : "s", w.why);
        else if (o->witness && w.why[0]) sb_printf(&msg, "; witness %s", w.why); /* why execution could not decide */
        json_t *f = finding_json(o, B.m, D.m, ++nf, "unsupported-op", "warning", msg.s, uc, ui);
        if (w.ran) json_object_set_new(f, "witness", witness_json(&w));
        json_array_append_new(findings, f);
        json_object_set_new(counts, "unsupported-op", json_integer(1));
        sb_free(&msg);
    }
    double t4 = now_ms();

    json_t *t = json_object();
    json_object_set_new(t, "scalify_trace", json_integer(1));
    json_t *tool = json_object();
    json_object_set_new(tool, "name", json_string("scalify"));
    json_object_set_new(tool, "version", json_string(SCALIFY_VERSION));
    /* The digest of the rule files in force (the empty set without --rules). */
    uint8_t h[32];
    char hex[72] = "sha256:";
    rules_digest(o->rules_dir, h);
    for (int i = 0; i < 32; i++) snprintf(hex + 7 + 2 * i, 3, "%02x", h[i]);
    json_object_set_new(tool, "rules_digest", json_string(hex));
    json_object_set_new(t, "tool", tool);

    json_t *pair = json_object();
    json_object_set_new(pair, "name", json_string(o->name ? o->name : base_name(o->distributed)));
    json_object_set_new(pair, "baseline", file_json(&B));
    json_object_set_new(pair, "distributed", file_json(&D));
    json_t *mj = json_object();
    for (uint32_t i = 0; i < rel.mesh.naxes; i++) json_object_set_new(mj, rel.mesh.names[i], json_integer(rel.mesh.sizes[i]));
    json_object_set_new(pair, "mesh", mj);
    json_object_set_new(pair, "relations_file", o->relations ? json_string(o->relations) : json_null());
    json_object_set_new(pair, "command", command_json(o));
    json_t *rj = json_object();
    for (uint32_t k = 0; k < rel.ninputs; k++) {
        strbuf b;
        sb_init(&b);
        view_print(&b, &rel.inputs[k], &rel.mesh);
        char key[300];
        const char *nm = rel.input_names && rel.input_names[k] ? rel.input_names[k] : NULL;
        if (nm) snprintf(key, sizeof key, "%s", nm);
        else snprintf(key, sizeof key, "parameter %u", k);
        json_object_set_new(rj, key, json_string(b.s));
        sb_free(&b);
    }
    for (uint32_t k = 0; k < rel.noutputs; k++) {
        strbuf b;
        sb_init(&b);
        view_print(&b, &rel.outputs[k], &rel.mesh);
        char key[64];
        snprintf(key, sizeof key, "output %u", k);
        json_object_set_new(rj, key, json_string(b.s));
        sb_free(&b);
    }
    json_object_set_new(pair, "relations", rj);
    json_object_set_new(t, "pair", pair);
    json_object_set_new(t, "verdict", json_string(trace_verdict_name(verdict)));

    json_t *sum = json_object();
    json_object_set_new(sum, "segments", json_integer(lc.nsegs));
    /* A segment is a memo hit when all its distributed runs were. */
    uint32_t seg_hits = 0;
    for (uint32_t i = 0; i < lc.nsegs; i++) seg_hits += lc.segs[i].runs && lc.segs[i].memo_hits == lc.segs[i].runs;
    json_object_set_new(sum, "memo_hits", json_integer(seg_hits));
    json_object_set_new(sum, "wall_ms", json_real(now_ms() - t0));
    json_object_set_new(sum, "threads", json_integer(o->jobs >= 2 ? 2 : 1)); /* that read the two programs */
    /* Building the baseline outside any segment's instructions: splitting both
     * programs into runs for the memo, the baseline's parameters. With the
     * segments' timings it adds up to the checking time. */
    double setup_ms = t2 - t1;
    for (uint32_t i = 0; i < lc.nsegs; i++) setup_ms -= lc.segs[i].build_ms;
    json_object_set_new(sum, "setup_ms", json_real(setup_ms > 0 ? setup_ms : 0));
    json_object_set_new(sum, "cpu_ms", json_real(cpu_ms() - c0));
    json_object_set_new(sum, "peak_bytes", json_integer((json_int_t)peak_rss_bytes()));
    json_object_set_new(sum, "findings", counts);
    json_object_set_new(t, "summary", sum);

    /* One segment per top-level op_name scope; each judged given its inputs. */
    json_t *segs = json_array();
    double sat_left = sat_ms;
    uint32_t *seg_classes = xcalloc(lc.nsegs + 1, sizeof *seg_classes);
    lift_segment_classes(&lc, seg_classes);
    for (uint32_t i = 0; i < lc.nsegs; i++) {
        const lift_segment *sg = &lc.segs[i];
        json_t *seg = json_object(), *r1 = json_object(), *r2 = json_object(), *tm = json_object();
        bool has_error = false;
        for (size_t k = 0; k < json_array_size(findings); k++) {
            json_t *f = json_array_get(findings, k);
            if (strcmp(json_string_value(json_object_get(f, "severity")), "error") == 0 &&
                strcmp(json_string_value(json_object_get(f, "segment")), sg->name) == 0)
                has_error = true;
        }
        /* A verified pair proves every segment; otherwise each is judged alone. */
        int sv = verdict == VERDICT_VERIFIED ? VERDICT_VERIFIED
                 : has_error || (sg->findings && !contradicted) ? VERDICT_MISMATCH
                 : (sg->unsupported || sg->divergent || sg->outside || sg->dstart == sg->dend) ? VERDICT_UNVERIFIED : VERDICT_VERIFIED;
        json_object_set_new(seg, "name", json_string(sg->name));
        json_object_set_new(seg, "verdict", json_string(trace_verdict_name(sv)));
        json_object_set_new(r1, "start", json_integer(sg->bstart));
        json_object_set_new(r1, "end", json_integer(sg->bend));
        json_object_set_new(r2, "start", json_integer(sg->dstart));
        json_object_set_new(r2, "end", json_integer(sg->dend));
        json_object_set_new(seg, "baseline", r1);
        json_object_set_new(seg, "distributed", r2);
        json_object_set_new(seg, "enodes", json_integer(sg->enodes));
        json_object_set_new(seg, "eclasses", json_integer(seg_classes[i]));
        /* Saturation runs over the whole e-graph: while lifting for the segment
         * the memo wanted a representative of, after lifting for the segments
         * whose terms did not all meet the baseline's by construction (verified
         * in the end or not). A segment shows the runs it was the reason for;
         * the time of the run after lifting is counted once, on the first. */
        bool ran = final_run && (sg->outside || sg->divergent);
        uint32_t iters = ran ? final_run->iterations : 0;
        uint64_t fired = ran ? final_run->unions : 0;
        const sat_run *last = ran ? final_run : NULL;
        double own_ms = 0;
        for (size_t k = 0; k < sr.nruns; k++)
            if (sr.runs[k].seg == i) {
                iters += sr.runs[k].iterations;
                fired += sr.runs[k].unions;
                own_ms += sr.runs[k].ms;
                if (!ran) last = &sr.runs[k];
            }
        json_object_set_new(seg, "iterations", json_integer(iters));
        json_object_set_new(seg, "stop_reason", json_string(last ? trace_stop_name(last->stop) : "saturated"));
        json_object_set_new(seg, "rule_firings", json_integer((json_int_t)fired));
        if (last && last->top && json_array_size(last->top)) json_object_set(seg, "top_rules", last->top);
        json_object_set_new(tm, "build", json_real(sg->build_ms));
        json_object_set_new(tm, "lift", json_real(sg->ms));
        /* Its time is counted once, on the first of them, so timings add up. */
        json_object_set_new(tm, "saturate", json_real(own_ms + (ran ? sat_left : 0)));
        sat_left = ran ? 0 : sat_left;
        json_object_set_new(tm, "check", json_real(i + 1 == lc.nsegs ? t4 - t3 - sat_ms : 0));
        json_object_set_new(seg, "timings_ms", tm);
        bool memo = sg->runs && sg->memo_hits == sg->runs;
        json_object_set_new(seg, "memo_hit", json_boolean(memo));
        if (memo && sg->memo_of >= 0) json_object_set_new(seg, "memo_of", json_string(lc.segs[sg->memo_of].name));
        json_array_append_new(segs, seg);
    }
    free(seg_classes);
    json_object_set_new(t, "segments", segs);
    json_object_set_new(t, "findings", findings);
    if (lc.assumptions.len) {
        json_t *as = json_array();
        for (char *line = lc.assumptions.s; line && *line;) {
            char *nl = strchr(line, '\n');
            json_array_append_new(as, json_stringn(line, nl ? (size_t)(nl - line) : strlen(line)));
            line = nl ? nl + 1 : NULL;
        }
        json_object_set_new(t, "assumptions", as);
    }
    *trace = t;

    sb_free(&why);
    saturator_free(&sr);
    lift_done(&lc);
    arena_free(&a);
    eg_free(g);
out:
    relations_free(&rel);
    graph_free(B.m);
    graph_free(D.m);
    return verdict;
}
