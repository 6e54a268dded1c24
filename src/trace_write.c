/* trace_write — check_result → jansson, key by key (see trace_write.h). */
#include "trace_write.h"
#include "provenance.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hlo.h"
#include "io.h"
#include "rules.h"
#include "scalify.h"

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
    /* A tuple element as the current text names it (call#0), which is also
     * what a protobuf's explicit get-tuple-element stands for: one name in
     * both forms of a program. */
    if (in->op == OP_GET_TUPLE_ELEMENT && in->noperands == 1 && in->operands[0] < c->ninstrs) {
        strbuf nm;
        sb_init(&nm);
        sb_printf(&nm, "%s#%lld", c->instrs[in->operands[0]].name, (long long)instr_int(in, A_INDEX, 0));
        json_object_set_new(o, "instruction", json_string(nm.s));
        sb_free(&nm);
    } else {
        json_object_set_new(o, "instruction", json_string(in->name));
    }
    json_object_set_new(o, "opcode", json_string(in->opname));
    json_object_set_new(o, "hlo", json_string(b.s));
    sb_free(&b);
    if (in->op_name) json_object_set_new(o, "op_name", json_string(in->op_name));
    put_location(o, in);
    return o;
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
    const char *want = instr_op_scope(in);
    const hlo_meta *dm = in->meta;
    const hlo_instr *best = NULL, *loose = NULL;
    const hlo_comp *best_c = NULL, *loose_c = NULL;
    int best_score = 0;
    for (uint32_t c = 0; c < b->ncomps; c++)
        for (uint32_t i = 0; i < b->comps[c].ninstrs; i++) {
            const hlo_instr *x = &b->comps[c].instrs[i];
            const hlo_meta *bm = x->meta;
            const char *s = instr_op_scope(x);
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

/* An instruction's type as HLO writes it, without layouts ("f16[2,16]"). */
static json_t *type_json(const hlo_instr *in) {
    strbuf b, t;
    sb_init(&b);
    sb_init(&t);
    shape_print(&b, &in->shape);
    int depth = 0;
    for (size_t i = 0; i < b.len; i++) {
        if (b.s[i] == '{') depth++;
        else if (b.s[i] == '}') depth--;
        else if (!depth) sb_putc(&t, b.s[i]);
    }
    json_t *j = json_string(t.s ? t.s : "");
    sb_free(&b);
    sb_free(&t);
    return j;
}

/* The subgraph being built: its nodes with the instruction each stands for,
 * so that data edges can be added between any two of them, and the data
 * paths too long to draw, each folded into one edge. */
#define SG_NODES 40
/* A named instruction at most this many steps downstream or upstream of the
 * divergence is joined to it by the instructions between (their hops stay
 * within the 3 the report draws before folding context); a longer path is
 * one edge that says how many steps it folds. */
#define SG_PATH_MAX 4
/* Paths are searched this far (steps); the hops of a named instruction no
 * path reaches. */
#define SG_FAR 256
typedef struct {
    const check_result *r;  /* for the views of distributed values */
    json_t *nodes;
    const hlo_instr *in[SG_NODES];
    const hlo_comp *comp[SG_NODES];
    bool dist[SG_NODES];
    char id[SG_NODES][16];
    size_t n;
    uint32_t next[2];       /* next id number per side */
    uint32_t fold[8][3];    /* folded paths: from node, to node, steps */
    size_t nfold;
} sg_build;

static long sg_find(const sg_build *g, bool dist, const hlo_instr *in) {
    for (size_t i = 0; i < g->n; i++)
        if (g->dist[i] == dist && g->in[i] == in) return (long)i;
    return -1;
}

/* Adds a node for in unless one stands for it; returns its index, or -1
 * when the subgraph is full. */
static long add_node(sg_build *g, bool dist, const hlo_comp *c, const hlo_instr *in, const char *role, int hops) {
    long have = sg_find(g, dist, in);
    if (have >= 0 && strcmp(role, "operand") != 0) return have;  /* operand slots repeat as the HLO does */
    if (g->n == SG_NODES) return -1;
    size_t k = g->n++;
    snprintf(g->id[k], sizeof g->id[k], "%c%u", dist ? 'd' : 'b', g->next[dist]++);
    g->in[k] = in, g->comp[k] = c, g->dist[k] = dist;
    json_t *n = json_object();
    json_object_set_new(n, "id", json_string(g->id[k]));
    json_object_set_new(n, "side", json_string(dist ? "distributed" : "baseline"));
    json_object_set_new(n, "label", json_string(in->name));
    json_object_set_new(n, "opcode", json_string(in->opname));
    json_object_set_new(n, "type", type_json(in));
    const char *vw = dist ? pv_view(g->r->views, g->r->dist.m, c, in) : NULL;
    if (vw) json_object_set_new(n, "view", json_string(vw));
    json_object_set_new(n, "role", json_string(role));
    json_object_set_new(n, "hops", json_integer(hops));
    json_array_append_new(g->nodes, n);
    return (long)k;
}

/* The shortest chain of data edges in c from instruction a down to z
 * (through users), at most SG_FAR steps. Returns its length k, and when
 * k <= SG_PATH_MAX the chain in path[0..k] (a first); -1 when there is
 * none. */
static int data_path(const hlo_comp *c, uint32_t a, uint32_t z, uint32_t *path) {
    uint32_t n = c->ninstrs;
    uint32_t *start = xcalloc((size_t)n + 1, sizeof *start), *fill = xcalloc((size_t)n + 1, sizeof *fill);
    for (uint32_t i = 0; i < n; i++)
        for (uint32_t o = 0; o < c->instrs[i].noperands; o++) start[c->instrs[i].operands[o] + 1]++;
    for (uint32_t i = 0; i < n; i++) start[i + 1] += start[i];
    uint32_t *users = xcalloc((size_t)start[n] + 1, sizeof *users);
    for (uint32_t i = 0; i < n; i++)
        for (uint32_t o = 0; o < c->instrs[i].noperands; o++) {
            uint32_t x = c->instrs[i].operands[o];
            users[start[x] + fill[x]++] = i;
        }
    int *dist = xcalloc(n, sizeof *dist);
    uint32_t *from = xcalloc(n, sizeof *from), *queue = xcalloc(n, sizeof *queue);
    for (uint32_t i = 0; i < n; i++) dist[i] = -1;
    size_t qh = 0, qt = 0;
    dist[a] = 0;
    queue[qt++] = a;
    while (qh < qt && dist[z] < 0) {
        uint32_t x = queue[qh++];
        if (dist[x] == SG_FAR) break;
        for (uint32_t k = start[x]; k < start[x + 1]; k++) {
            uint32_t y = users[k];
            if (dist[y] >= 0) continue;
            dist[y] = dist[x] + 1, from[y] = x;
            queue[qt++] = y;
        }
    }
    int k = dist[z];
    if (k >= 0 && k <= SG_PATH_MAX)
        for (uint32_t y = z, i = (uint32_t)k;; y = from[y]) {
            path[i] = y;
            if (i-- == 0) break;
        }
    free(start), free(fill), free(users), free(dist), free(from), free(queue);
    return k;
}

const hlo_instr *tw_find_instr(const hlo_module *m, const char *q, size_t len, const hlo_comp **c) {
    for (uint32_t k = 0; k < m->ncomps; k++)
        for (uint32_t i = 0; i < m->comps[k].ninstrs; i++) {
            const char *nm = m->comps[k].instrs[i].name;
            if (strncmp(nm, q, len) == 0 && nm[len] == 0) {
                *c = &m->comps[k];
                return &m->comps[k].instrs[i];
            }
        }
    return NULL;
}

/* Adds an instruction the message names (of the distributed program, else
 * of the baseline) with its operands. When data flows between it and the
 * divergence (or the baseline counterpart) within a few steps, the
 * instructions between are added too; a longer path is folded into one
 * edge. */
static void add_named(sg_build *g, const check_result *r, const char *q, size_t len) {
    const hlo_comp *c = NULL;
    bool dist = true;
    const hlo_instr *x = tw_find_instr(r->dist.m, q, len, &c);
    if (!x) dist = false, x = tw_find_instr(r->base.m, q, len, &c);
    if (!x || sg_find(g, dist, x) >= 0) return;
    long root = -1;
    for (size_t i = 0; i < g->n && root < 0; i++)
        if (g->dist[i] == dist && g->comp[i] == c) root = (long)i;  /* d0, else b0 */
    uint32_t path[SG_PATH_MAX + 1], ri = root < 0 ? 0 : (uint32_t)(g->in[root] - c->instrs), xi = (uint32_t)(x - c->instrs);
    bool down = xi > ri;  /* operands precede their users */
    int k = root < 0 ? -1 : data_path(c, down ? ri : xi, down ? xi : ri, path);
    for (int i = 1; k <= SG_PATH_MAX && i < k; i++)
        add_node(g, dist, c, &c->instrs[path[i]], "context", down ? i : k - i);
    long xn = add_node(g, dist, c, x, "context", k >= 0 ? k : SG_FAR);
    if (xn >= 0 && k > SG_PATH_MAX && g->nfold < 8) {
        uint32_t *e = g->fold[g->nfold++];
        e[0] = (uint32_t)(down ? root : xn), e[1] = (uint32_t)(down ? xn : root), e[2] = (uint32_t)k;
    }
    for (uint32_t o = 0; xn >= 0 && o < x->noperands && o < 8; o++)
        add_node(g, dist, c, &c->instrs[x->operands[o]], "context", k >= 0 ? k + 1 : SG_FAR);
}

/* The link from a located baseline counterpart (b0 for the divergence d0,
 * others for the steps of a path) to its distributed instruction. No
 * relation between the two terms is kept per instruction, so the view is
 * "counterpart" and basis says how counterpart() chose it; the distributed
 * node carries its own view. */
static json_t *counterpart_link(const char *from, const char *to, const char *basis) {
    json_t *l = json_object();
    json_object_set_new(l, "from", json_string(from));
    json_object_set_new(l, "to", json_string(to));
    json_object_set_new(l, "view", json_string("counterpart"));
    json_object_set_new(l, "basis", json_string(basis));
    return l;
}

/* The finding's path (provenance.h), origin first: each step a node of
 * the subgraph (added here, before the instructions the message names, so
 * that the cap leaves them in), with its view and source line. Steps left
 * out between the origin and the next one become a folded edge. */
static json_t *path_json(sg_build *g, const check_finding *cf, const hlo_comp *bc0, const hlo_instr *b0, json_t *links) {
    json_t *steps = json_array();
    const hlo_comp *c = cf->comp;
    /* Counterparts from the finding back: a step that is operand k of the
     * next is, where the next one's counterpart has an operand k of its
     * opcode, that operand (the structure both programs share); else the
     * counterpart() search. The last step's is the divergence's (b0). */
    const hlo_instr *cp[PV_PATH_MAX] = {0};
    const hlo_comp *cpc[PV_PATH_MAX] = {0};
    const char *cpwhy[PV_PATH_MAX] = {0};
    uint32_t last = cf->npath - 1;
    cp[last] = b0, cpc[last] = bc0;
    for (uint32_t s = last; s-- > 0;) {
        const hlo_instr *x = &c->instrs[cf->path[s]], *y = &c->instrs[cf->path[s + 1]], *by = cp[s + 1];
        for (uint32_t k = 0; by && k < y->noperands && k < by->noperands && !cp[s]; k++)
            if (y->operands[k] == cf->path[s] && cpc[s + 1]->instrs[by->operands[k]].op == x->op) {
                cp[s] = &cpc[s + 1]->instrs[by->operands[k]];
                cpc[s] = cpc[s + 1];
                cpwhy[s] = "same operand position";
            }
        if (!cp[s]) cp[s] = counterpart(g->r->base.m, x, &cpc[s], &cpwhy[s]);
    }
    long prev = -1;
    for (uint32_t s = 0; s < cf->npath; s++) {
        const hlo_instr *x = &c->instrs[cf->path[s]];
        int hops = (int)(cf->npath - 1 - s) + (s == 0 ? (int)(cf->path_len - cf->npath) : 0);
        long n = add_node(g, true, c, x, "context", hops > SG_FAR ? SG_FAR : hops);
        if (n < 0) break;
        if (s == 1 && prev >= 0 && cf->path_len > cf->npath && g->nfold < 8) {
            uint32_t *e = g->fold[g->nfold++];
            e[0] = (uint32_t)prev, e[1] = (uint32_t)n, e[2] = cf->path_len - cf->npath + 1;
        }
        prev = n;
        /* the step's baseline counterpart (the last step's, the
         * divergence's, is linked by the caller) */
        long bn = s < last && cp[s] ? add_node(g, false, cpc[s], cp[s], "context", hops > SG_FAR ? SG_FAR : hops) : -1;
        if (bn >= 0) json_array_append_new(links, counterpart_link(g->id[bn], g->id[n], cpwhy[s] ? cpwhy[s] : ""));
        json_t *o = json_object();
        json_object_set_new(o, "step", json_integer(s + 1));
        json_object_set_new(o, "node", json_string(g->id[n]));
        json_object_set_new(o, "instruction", json_string(x->name));
        json_object_set_new(o, "opcode", json_string(x->opname));
        const char *vw = pv_view(g->r->views, g->r->dist.m, c, x);
        if (vw) json_object_set_new(o, "view", json_string(vw));
        put_location(o, x);
        json_array_append_new(steps, o);
    }
    return steps;
}


/* Whether an instruction carries a value on without computing it: what an
 * exporter wraps around a program's outputs (copies, calls, tuples). */
static bool passes_on(const hlo_instr *in) {
    return in->op == OP_COPY || in->op == OP_BITCAST || in->op == OP_CALL || in->op == OP_TUPLE ||
           in->op == OP_GET_TUPLE_ELEMENT;
}

static bool same_line(const hlo_instr *a, const hlo_instr *b) {
    const hlo_meta *x = a->meta, *y = b->meta;
    return x && y && x->src_file && y->src_file && x->src_line == y->src_line && strcmp(x->src_file, y->src_file) == 0;
}

const hlo_instr *tw_value_source(const hlo_module *m, const hlo_comp *c, const hlo_instr *in, int *steps) {
    const hlo_instr *x = in;
    for (int step = 1; step <= SG_FAR && passes_on(x); step++) {
        if (x->op == OP_CALL) {
            const hlo_attr *ta = instr_attr(x, A_TO_APPLY);
            if (!ta || ta->v.ints[0] < 0 || (uint64_t)ta->v.ints[0] >= m->ncomps) return NULL;
            c = &m->comps[ta->v.ints[0]];
            x = &c->instrs[c->root];
        } else if (x->op == OP_GET_TUPLE_ELEMENT) {
            const hlo_instr *t = &c->instrs[x->operands[0]];
            int64_t k = instr_int(x, A_INDEX, 0);
            if (t->op != OP_TUPLE || k < 0 || (uint64_t)k >= t->noperands) return NULL;
            x = &c->instrs[t->operands[k]];
        } else if (x->noperands == 1) {
            x = &c->instrs[x->operands[0]];
        } else return NULL;
        if (x->meta && x->meta->src_file && x->meta->src_line > 0 && !same_line(x, in)) {
            if (steps) *steps = step;
            return x;
        }
    }
    return NULL;
}

/* The divergence and its operands on both sides, one hop of context, and
 * every instruction the message names; when the divergence only passes a
 * value on (an output's copy), the instruction that computed the value,
 * joined to it by an edge that folds the steps between. Data edges between
 * any two nodes of one computation where one is an operand of the other.
 * basis: how the baseline counterpart bin was located. */
static json_t *subgraph(const check_result *r, const check_finding *cf, const hlo_comp *bc, const hlo_instr *bin,
                        const char *basis, json_t **path) {
    const hlo_comp *dc = cf->comp;
    const hlo_instr *din = cf->in;
    json_t *g = json_object(), *edges = json_array(), *links = json_array();
    sg_build sg = {.r = r, .nodes = json_array()};
    add_node(&sg, true, dc, din, "divergence", 0);
    for (uint32_t o = 0; o < din->noperands && o < 8; o++)
        add_node(&sg, true, dc, &dc->instrs[din->operands[o]], "operand", 1);
    if (bin) {
        add_node(&sg, false, bc, bin, "operand", 0);
        for (uint32_t o = 0; o < bin->noperands && o < 8; o++)
            add_node(&sg, false, bc, &bc->instrs[bin->operands[o]], "context", 1);
        json_array_append_new(links, counterpart_link("b0", "d0", basis));
    }
    *path = cf->npath ? path_json(&sg, cf, bc, bin, links) : NULL;
    int steps = 0;
    const hlo_instr *vs = passes_on(din) ? tw_value_source(r->dist.m, dc, din, &steps) : NULL;
    if (vs && sg_find(&sg, true, vs) < 0) {
        const hlo_comp *vc = NULL;
        tw_find_instr(r->dist.m, vs->name, strlen(vs->name), &vc);
        long vn = add_node(&sg, true, vc, vs, "context", steps);
        if (vn >= 0 && steps > 1 && sg.nfold < 8) {
            uint32_t *e = sg.fold[sg.nfold++];
            e[0] = (uint32_t)vn, e[1] = 0, e[2] = (uint32_t)steps;
        }
    }
    size_t len;
    for (const char *p = cf->message, *q; (q = trace_next_instr_name(cf->message, &p, &len));) add_named(&sg, r, q, len);
    for (size_t j = 0; j < sg.n; j++)
        for (size_t i = 0; i < sg.n; i++) {
            if (i == j || sg.dist[i] != sg.dist[j] || sg.comp[i] != sg.comp[j]) continue;
            const hlo_instr *u = sg.in[j];
            bool uses = false;
            for (uint32_t o = 0; o < u->noperands && !uses; o++) uses = &sg.comp[j]->instrs[u->operands[o]] == sg.in[i];
            if (!uses) continue;
            json_t *e = json_object();
            json_object_set_new(e, "from", json_string(sg.id[i]));
            json_object_set_new(e, "to", json_string(sg.id[j]));
            json_array_append_new(edges, e);
        }
    for (size_t i = 0; i < sg.nfold; i++) {
        json_t *e = json_object();
        json_object_set_new(e, "from", json_string(sg.id[sg.fold[i][0]]));
        json_object_set_new(e, "to", json_string(sg.id[sg.fold[i][1]]));
        json_object_set_new(e, "steps", json_integer(sg.fold[i][2]));
        json_array_append_new(edges, e);
    }
    json_object_set_new(g, "nodes", sg.nodes);
    json_object_set_new(g, "edges", edges);
    json_object_set_new(g, "links", links);
    json_object_set_new(g, "truncated", din->noperands > 8 ? json_string("operands beyond 8 not shown") : json_null());
    return g;
}

/* Adds the window around x's source line unless a window shown already
 * holds it. */
static void add_window(json_t *snips, const char *root, const hlo_instr *x) {
    if (!x || !x->meta || !x->meta->src_file || x->meta->src_line <= 0) return;
    for (size_t i = 0; i < json_array_size(snips); i++) {
        json_t *w = json_array_get(snips, i);
        json_int_t first = json_integer_value(json_object_get(w, "first_line"));
        json_int_t last = first + (json_int_t)json_array_size(json_object_get(w, "lines")) - 1;
        if (strcmp(json_string_value(json_object_get(w, "file")), x->meta->src_file) == 0 && first <= x->meta->src_line &&
            x->meta->src_line <= last)
            return;
    }
    json_t *s = snippet(root, x->meta->src_file, x->meta->src_line);
    if (s) json_array_append_new(snips, s);
}

/* The source windows of a finding: around the divergence's line, then
 * around every line the message names that none shows yet: the lines of
 * the instructions it names. When the divergence only passes a value on (an
 * output's copy, whose line is the exporter's call), the line that computed
 * that value comes first. */
static json_t *snippets(const check_opts *o, const check_result *r, const check_finding *cf) {
    json_t *snips = json_array();
    if (passes_on(cf->in)) add_window(snips, o->source_root, tw_value_source(r->dist.m, cf->comp, cf->in, NULL));
    add_window(snips, o->source_root, cf->in);
    size_t len;
    for (const char *p = cf->message, *q; (q = trace_next_instr_name(cf->message, &p, &len));) {
        const hlo_comp *c;
        const hlo_instr *x = tw_find_instr(r->dist.m, q, len, &c);
        add_window(snips, o->source_root, x ? x : tw_find_instr(r->base.m, q, len, &c));
    }
    return snips;
}

static json_t *witness_json(const check_result *r);

/* Finding idx (from 1) of the trace. */
static json_t *finding_json(const check_opts *o, const check_result *r, size_t idx, const check_finding *cf) {
    const hlo_module *B = r->base.m, *D = r->dist.m;
    const hlo_comp *dc = cf->comp;
    const hlo_instr *din = cf->in;
    json_t *f = json_object();
    char id[24];
    snprintf(id, sizeof id, "F%zu", idx);
    json_object_set_new(f, "id", json_string(id));
    json_object_set_new(f, "kind", json_string(trace_kind_name(cf->kind)));
    json_object_set_new(f, "severity", json_string(trace_severity_name(cf->severity)));
    json_object_set_new(f, "segment", json_string(cf->segment));
    json_object_set_new(f, "message", json_string(cf->message));
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
    json_t *path;
    json_object_set_new(f, "subgraph", subgraph(r, cf, bc, bin, why, &path));
    if (path) json_object_set_new(f, "path", path);
    if (path && cf->path_len > cf->npath)
        json_object_set_new(f, "path_omitted", json_integer((json_int_t)(cf->path_len - cf->npath)));
    json_object_set_new(f, "snippets", snippets(o, r, cf));
    if (cf->witness) json_object_set_new(f, "witness", witness_json(r));
    return f;
}

static json_t *num(double x) {
    if (isnan(x)) return json_string("nan");
    if (isinf(x)) return json_string(x > 0 ? "inf" : "-inf");
    return json_real(x);
}

static json_t *witness_json(const check_result *r) {
    json_t *o = json_object(), *at = json_object();
    const check_witness *w = &r->w;
    json_object_set_new(o, "inputs_seed", json_integer((json_int_t)w->seed));
    json_object_set_new(o, "max_abs", num(w->max_abs));
    json_object_set_new(o, "max_rel", num(w->max_rel));
    json_object_set_new(at, "max_abs", num(w->max_abs));
    json_object_set_new(at, "max_rel", num(w->max_rel));
    json_object_set_new(o, "at_outputs", at);
    if (w->outcome) json_object_set_new(o, "outcome", json_string(w->outcome));
    if (w->note[0]) json_object_set_new(o, "note", json_string(w->note));
    return o;
}


static const char *base_name(const char *p) {
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}


static json_t *file_json(const check_module *s) {
    json_t *o = json_object();
    json_object_set_new(o, "path", json_string(s->path));
    json_object_set_new(o, "format", json_string(trace_format_name(s->format)));
    json_object_set_new(o, "module", json_string(s->name));
    json_object_set_new(o, "instructions", json_integer((json_int_t)s->instructions));
    json_object_set_new(o, "sha256", json_string(s->sha256));
    return o;
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
    if (!o->witness) json_array_append_new(c, json_string("--no-witness"));
    if (o->no_memo) json_array_append_new(c, json_string("--no-memo"));
    return c;
}


static json_t *pair_json(const check_opts *o, const check_result *r) {
    const relations *rel = &r->rel;
    json_t *pair = json_object();
    json_object_set_new(pair, "name", json_string(o->name ? o->name : base_name(o->distributed)));
    json_object_set_new(pair, "baseline", file_json(&r->base));
    json_object_set_new(pair, "distributed", file_json(&r->dist));
    json_t *mj = json_object();
    for (uint32_t i = 0; i < rel->mesh.naxes; i++) json_object_set_new(mj, rel->mesh.names[i], json_integer(rel->mesh.sizes[i]));
    json_object_set_new(pair, "mesh", mj);
    json_object_set_new(pair, "relations_file", o->relations ? json_string(o->relations) : json_null());
    json_object_set_new(pair, "command", command_json(o));
    json_t *rj = json_object(); /* filled as text (relations_text): one entry per parameter */
    json_object_set_new(pair, "relations", rj);
    return pair;
}

/* summary.findings: each kind counted, in the order its first listed finding
 * comes (every counted kind has one listed). */
static json_t *counts_json(const check_result *r) {
    json_t *counts = json_object();
    for (size_t i = 0; i < r->nfindings; i++) {
        trace_kind k = r->findings[i].kind;
        if (!json_object_get(counts, trace_kind_name(k))) json_object_set_new(counts, trace_kind_name(k), json_integer(r->kind_total[k]));
    }
    return counts;
}

/* ---- segments, written as text ----
 *
 * A 200k-segment trace holds millions of values: built as jansson objects
 * they cost more time and memory than checking the pair did. They are
 * written straight as the text jansson would dump for them (JSON_INDENT(1),
 * JSON_PRESERVE_ORDER, JSON_ENSURE_ASCII, the array at depth 1), and only
 * trace_write() reads that text back into objects. */

enum { TW_DEPTH_MAX = 8 };

typedef struct tw_text {
    strbuf *b;
    int depth;                    /* of the innermost open object or array */
    bool empty[TW_DEPTH_MAX];     /* it has no member yet */
} tw_text;

static void tw_open(tw_text *w, char c) {
    sb_putc(w->b, c);
    w->empty[++w->depth] = true;
}

static void tw_close(tw_text *w, char c) {
    if (!w->empty[w->depth--]) {
        sb_putc(w->b, '\n');
        for (int i = 0; i < w->depth; i++) sb_putc(w->b, ' ');
    }
    sb_putc(w->b, c);
}

/* The separator and indentation before a member, and its key (NULL: an
 * array element). */
static void tw_member(tw_text *w, const char *key) {
    sb_puts(w->b, w->empty[w->depth] ? "\n" : ",\n");
    w->empty[w->depth] = false;
    for (int i = 0; i < w->depth; i++) sb_putc(w->b, ' ');
    if (key) {
        sb_putc(w->b, '"');
        sb_puts(w->b, key);
        sb_put(w->b, "\": ", 3);
    }
}

/* Digits by hand: millions of them, and printf's parsing shows. */
static void tw_int(tw_text *w, const char *key, long long v) {
    char t[24], *e = t + sizeof t, *p = e;
    unsigned long long u = v < 0 ? 0ull - (unsigned long long)v : (unsigned long long)v;
    do *--p = (char)('0' + u % 10);
    while (u /= 10);
    if (v < 0) *--p = '-';
    tw_member(w, key);
    sb_put(w->b, p, (size_t)(e - p));
}

/* jansson's text for a real: %.17g, ".0" added when that reads as an
 * integer, the exponent without '+' or leading zeros. It refuses NaN and
 * infinities, and an object then has no such key. */
static void tw_real(tw_text *w, const char *key, double v) {
    if (!isfinite(v)) return;
    char t[40];
    int n = snprintf(t, sizeof t - 2, "%.17g", v);
    if (n < 0 || n >= (int)sizeof t - 2) return;
    char *e = strchr(t, 'e');
    if (!e && !strchr(t, '.')) memcpy(t + n, ".0", 3);
    if (e) {
        char *from = e + 1, *to = e + 1;
        if (*from == '-') from++, to++;
        else if (*from == '+') from++;
        while (*from == '0') from++;
        memmove(to, from, strlen(from) + 1);
    }
    tw_member(w, key);
    sb_puts(w->b, t);
}

/* Whether v is printable ASCII without a quote or backslash: its text is
 * itself between quotes. */
static bool tw_plain(const char *v, size_t *n) {
    const unsigned char *p = (const unsigned char *)v;
    while (*p >= 0x20 && *p < 0x7f && *p != '"' && *p != '\\') p++;
    *n = (size_t)((const char *)p - v);
    return !*p;
}

/* A string that is not plain as jansson dumps it (ensure_ascii, malloc'd),
 * or NULL when jansson refuses it (not UTF-8). */
static char *tw_escaped(const char *v) {
    json_t *j = json_string(v);
    char *t = j ? json_dumps(j, JSON_ENCODE_ANY | JSON_ENSURE_ASCII) : NULL;
    json_decref(j);
    return t;
}

/* A key or a string value as jansson dumps it; false when jansson refuses
 * it, and an object then has no such member. */
static bool tw_quoted(strbuf *b, const char *v) {
    size_t n;
    if (tw_plain(v, &n)) {
        sb_putc(b, '"');
        sb_put(b, v, n);
        sb_putc(b, '"');
        return true;
    }
    char *t = tw_escaped(v);
    if (t) sb_puts(b, t);
    free(t);
    return t != NULL;
}

/* A string member (see tw_quoted). */
static void tw_str(tw_text *w, const char *key, const char *v) {
    size_t n;
    if (tw_plain(v, &n)) {
        tw_member(w, key);
        sb_putc(w->b, '"');
        sb_put(w->b, v, n);
        sb_putc(w->b, '"');
        return;
    }
    char *t = tw_escaped(v);
    if (t) {
        tw_member(w, key);
        sb_puts(w->b, t);
    }
    free(t);
}

static void segment_text(tw_text *w, const check_segment *sg) {
    tw_member(w, NULL);
    tw_open(w, '{');
    tw_str(w, "name", sg->name);
    tw_str(w, "verdict", trace_verdict_name(sg->verdict));
    const char *side[2] = {"baseline", "distributed"};
    uint32_t range[2][2] = {{sg->bstart, sg->bend}, {sg->dstart, sg->dend}};
    for (int k = 0; k < 2; k++) {
        tw_member(w, side[k]);
        tw_open(w, '{');
        tw_int(w, "start", range[k][0]);
        tw_int(w, "end", range[k][1]);
        tw_close(w, '}');
    }
    tw_int(w, "enodes", (long long)sg->enodes);
    tw_int(w, "eclasses", (long long)sg->eclasses);
    tw_int(w, "iterations", sg->iterations);
    tw_str(w, "stop_reason", trace_stop_name(sg->stop));
    tw_int(w, "rule_firings", (long long)sg->rule_firings);
    if (sg->ntop) {
        tw_member(w, "top_rules");
        tw_open(w, '[');
        for (size_t k = 0; k < sg->ntop; k++) {
            tw_member(w, NULL);
            tw_open(w, '{');
            tw_str(w, "rule", sg->top[k].rule);
            tw_int(w, "count", (long long)sg->top[k].count);
            tw_close(w, '}');
        }
        tw_close(w, ']');
    }
    tw_member(w, "timings_ms");
    tw_open(w, '{');
    tw_real(w, "build", sg->t_build);
    tw_real(w, "lift", sg->t_lift);
    tw_real(w, "saturate", sg->t_saturate);
    tw_real(w, "check", sg->t_check);
    tw_close(w, '}');
    tw_member(w, "memo_hit");
    sb_puts(w->b, sg->memo_hit ? "true" : "false");
    if (sg->memo_of) tw_str(w, "memo_of", sg->memo_of);
    tw_close(w, '}');
}

/* The segments array as jansson dumps it as the value of a top-level key. */
static void segments_text(strbuf *b, const check_result *r) {
    tw_text w = {.b = b, .depth = 1};
    tw_open(&w, '[');
    for (size_t i = 0; i < r->nsegs; i++) segment_text(&w, &r->segs[i]);
    tw_close(&w, ']');
}

/* pair.relations as jansson dumps it (the object at depth 2): each input's
 * view under its parameter's name ("parameter K" without one), then each
 * output's ("output K"). A name given twice keeps its first place and its
 * last view, as setting it twice in an object would. 416k parameters at
 * deep 100x: as jansson objects they cost more than checking them. */
static void relations_text(strbuf *b, const check_result *r) {
    const relations *rel = &r->rel;
    uint32_t n = rel->ninputs + rel->noutputs, nkeys = 0, at;
    arena a;
    arena_init(&a);
    strmap index; /* quoted key -> its place */
    strmap_init(&index);
    const char **keys = xmalloc((n + 1) * sizeof *keys), **vals = xmalloc((n + 1) * sizeof *vals);
    strbuf t, v;
    sb_init(&t);
    sb_init(&v);
    for (uint32_t k = 0; k < n; k++) {
        bool in = k < rel->ninputs;
        char key[300];
        const char *nm = in && rel->input_names ? rel->input_names[k] : NULL;
        if (nm) snprintf(key, sizeof key, "%s", nm);
        else if (in) snprintf(key, sizeof key, "parameter %u", k);
        else snprintf(key, sizeof key, "output %u", k - rel->ninputs);
        v.len = 0;
        view_print(&v, in ? &rel->inputs[k] : &rel->outputs[k - rel->ninputs], &rel->mesh);
        t.len = 0;
        if (!tw_quoted(&t, key)) continue;
        size_t kn = t.len;
        if (!tw_quoted(&t, v.s ? v.s : "")) continue;
        const char *kq = arena_strndup(&a, t.s, kn), *vq = arena_strndup(&a, t.s + kn, t.len - kn);
        if (strmap_get(&index, kq, kn, &at)) {
            vals[at] = vq;
        } else {
            strmap_put(&index, kq, kn, nkeys);
            keys[nkeys] = kq;
            vals[nkeys++] = vq;
        }
    }
    tw_text w = {.b = b, .depth = 2};
    tw_open(&w, '{');
    for (uint32_t k = 0; k < nkeys; k++) {
        tw_member(&w, NULL);
        sb_puts(b, keys[k]);
        sb_put(b, ": ", 2);
        sb_puts(b, vals[k]);
    }
    tw_close(&w, '}');
    sb_free(&t);
    sb_free(&v);
    free(keys);
    free(vals);
    strmap_free(&index);
    arena_free(&a);
}

/* Everything but the segments, whose key holds an empty array. */
static json_t *trace_head(const check_opts *o, const check_result *r) {
    json_t *t = json_object();
    json_object_set_new(t, "scalify_trace", json_integer(1));
    json_t *tool = json_object();
    json_object_set_new(tool, "name", json_string("scalify"));
    json_object_set_new(tool, "version", json_string(SCALIFY_VERSION));
    /* The digest of the rule files in force (the empty set without --rules). */
    uint8_t h[32];
    char hex[72] = "sha256:";
    rs_dir_digest(o->rules_dir, h);
    for (int i = 0; i < 32; i++) snprintf(hex + 7 + 2 * i, 3, "%02x", h[i]);
    json_object_set_new(tool, "rules_digest", json_string(hex));
    json_object_set_new(t, "tool", tool);
    json_object_set_new(t, "pair", pair_json(o, r));
    json_object_set_new(t, "verdict", json_string(trace_verdict_name(r->verdict)));

    json_t *sum = json_object();
    json_object_set_new(sum, "segments", json_integer((json_int_t)r->nsegs));
    json_object_set_new(sum, "memo_hits", json_integer(r->memo_hits));
    json_object_set_new(sum, "wall_ms", json_real(r->wall_ms));
    json_object_set_new(sum, "threads", json_integer(r->threads));
    json_object_set_new(sum, "setup_ms", json_real(r->setup_ms));
    json_object_set_new(sum, "cpu_ms", json_real(r->cpu_ms));
    json_object_set_new(sum, "peak_bytes", json_integer((json_int_t)r->peak_bytes));
    json_object_set_new(sum, "findings", counts_json(r));
    json_object_set_new(t, "summary", sum);

    json_object_set_new(t, "segments", json_array());
    json_t *findings = json_array();
    for (size_t i = 0; i < r->nfindings; i++) json_array_append_new(findings, finding_json(o, r, i + 1, &r->findings[i]));
    json_object_set_new(t, "findings", findings);
    if (r->assumptions && *r->assumptions) {
        json_t *as = json_array();
        for (const char *line = r->assumptions; line && *line;) {
            const char *nl = strchr(line, '\n');
            json_array_append_new(as, json_stringn(line, nl ? (size_t)(nl - line) : strlen(line)));
            line = nl ? nl + 1 : NULL;
        }
        json_object_set_new(t, "assumptions", as);
    }
    return t;
}

json_t *trace_write(const check_opts *o, const check_result *r) {
    json_t *t = trace_head(o, r);
    strbuf rt;
    sb_init(&rt);
    relations_text(&rt, r);
    json_object_set_new(json_object_get(t, "pair"), "relations", json_loads(rt.s, 0, NULL));
    sb_free(&rt);
    if (r->nsegs) {
        strbuf b;
        sb_init(&b);
        segments_text(&b, r);
        json_object_set_new(t, "segments", json_loads(b.s, 0, NULL));
        sb_free(&b);
    }
    return t;
}

static int tw_append(const char *buf, size_t size, void *data) {
    sb_put(data, buf, size);
    return 0;
}

bool trace_write_text(const check_opts *o, const check_result *r, strbuf *out) {
    json_t *t = trace_head(o, r);
    strbuf head;
    sb_init(&head);
    bool ok = json_dump_callback(t, tw_append, &head, JSON_INDENT(1) | JSON_PRESERVE_ORDER | JSON_ENSURE_ASCII) == 0;
    json_decref(t);
    /* After a newline and one space only a top-level key can start, after
     * two one of pair's (strings carry their newlines escaped); pair comes
     * before the segments. */
    static const char rkey[] = "\n  \"relations\": {}", skey[] = "\n \"segments\": []";
    const char *rat = ok && head.s ? strstr(head.s, rkey) : NULL;
    const char *sat = rat ? strstr(rat, skey) : NULL;
    if (!sat) ok = false;
    if (ok) {
        size_t rpre = (size_t)(rat - head.s) + strlen(rkey) - 2, spre = (size_t)(sat - head.s) + strlen(skey) - 2;
        sb_put(out, head.s, rpre);
        relations_text(out, r);
        sb_put(out, head.s + rpre + 2, spre - rpre - 2);
        segments_text(out, r);
        sb_puts(out, head.s + spre + 2);
        sb_putc(out, '\n');
    }
    sb_free(&head);
    return ok;
}
