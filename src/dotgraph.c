/* dotgraph — trace_finding subgraph → Graphviz → inline SVG (see dotgraph.h). */
#include "dotgraph.h"

#include <graphviz/cgraph.h>
#include <graphviz/gvc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "escape.h"

/* esc_html, and each backslash as U+29F5 (reverse solidus operator, which looks
 * the same): Graphviz expands \N, \G … in labels into node and graph names even
 * when the backslash is written as an entity. */
static void put_label(strbuf *b, const char *s, size_t n) {
    size_t run = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] != '\\') continue;
        esc_html_n(b, s + run, i - run);
        sb_puts(b, "\xe2\xa7\xb5");
        run = i + 1;
    }
    esc_html_n(b, s + run, n - run);
}

/* Cuts s to at most max bytes on a UTF-8 boundary, adding an ellipsis. */
static void put_short(strbuf *b, const char *s, size_t max) {
    size_t n = strlen(s);
    if (n <= max) {
        put_label(b, s, n);
        return;
    }
    while (max > 0 && ((unsigned char)s[max] & 0xc0) == 0x80) max--;
    put_label(b, s, max);
    sb_puts(b, "\xe2\x80\xa6");
}

static void set(void *obj, const char *k, const char *v) { agsafeset(obj, (char *)k, (char *)v, ""); }

static void set_html(graph_t *g, void *obj, const char *k, const char *markup) {
    char *h = agstrdup_html(g, (char *)markup);
    agsafeset(obj, (char *)k, h, "");
    agstrfree(g, h);
}

typedef struct {
    size_t idx;  /* into f->nodes */
    int rank;    /* 0 divergence, then hops */
} pick;

static int cmp_pick(const void *a, const void *b) {
    const pick *x = a, *y = b;
    if (x->rank != y->rank) return x->rank < y->rank ? -1 : 1;
    return x->idx < y->idx ? -1 : x->idx > y->idx;
}

static long find_node(const trace_finding *f, const char *id) {
    for (size_t i = 0; i < f->n_nodes; i++)
        if (strcmp(f->nodes[i].id, id) == 0) return (long)i;
    return -1;
}

/* Object IDs in order of creation. cgraph's default ID discipline uses the
 * address of the interned name as the ID, and subgraphs are kept ordered by ID, so
 * the two clusters came out in heap-address order: different bytes from one run to
 * the next. Here a name's ID is 2·(its index in a table), anonymous objects get
 * odd IDs from a counter: the same graph gives the same SVG. */
typedef struct {
    char **names;
    size_t n, cap;
    IDTYPE anon;
} id_state;

static void *id_open(Agraph_t *g, Agdisc_t *disc) {
    (void)g, (void)disc;
    id_state *st = xcalloc(1, sizeof *st);
    st->anon = 1;
    return st;
}

static long id_map(void *state, int objtype, char *str, IDTYPE *id, int createflag) {
    id_state *st = state;
    (void)objtype;
    if (!str) {
        *id = st->anon;
        st->anon += 2;
        return 1;
    }
    for (size_t i = 0; i < st->n; i++)
        if (strcmp(st->names[i], str) == 0) {
            *id = (IDTYPE)(2 * (i + 1));
            return 1;
        }
    if (!createflag) return 0;
    XGROW(st->names, st->cap, st->n + 1);
    st->names[st->n++] = xstrdup(str);
    *id = (IDTYPE)(2 * st->n);
    return 1;
}

static long id_alloc(void *state, int objtype, IDTYPE id) {
    (void)state, (void)objtype, (void)id;
    return 1;
}

static void id_free(void *state, int objtype, IDTYPE id) { (void)state, (void)objtype, (void)id; }

static char *id_print(void *state, int objtype, IDTYPE id) {
    id_state *st = state;
    (void)objtype;
    if (id % 2 == 0 && id / 2 >= 1 && id / 2 <= st->n) return st->names[id / 2 - 1];
    return NULL;
}

static void id_close(void *state) {
    id_state *st = state;
    for (size_t i = 0; i < st->n; i++) free(st->names[i]);
    free(st->names);
    free(st);
}

static void id_register(void *state, int objtype, void *obj) { (void)state, (void)objtype, (void)obj; }

static Agiddisc_t seq_id_disc = {id_open, id_map, id_alloc, id_free, id_print, id_close, id_register};

/* The step of the finding's path node id is, or 0. */
static int64_t path_step(const trace_finding *f, const char *id) {
    for (size_t k = 0; k < f->n_path; k++)
        if (strcmp(f->path[k].node, id) == 0) return f->path[k].step;
    return 0;
}

/* The type of an HLO instruction line "%name = f16[2,16]{1,0} op(…)" without
 * its layout ("f16[2,16]"); 0 when the line is not of that form or is a
 * tuple. */
static size_t hlo_type(const char *hlo, const char **ty) {
    const char *eq = hlo ? strstr(hlo, " = ") : NULL;
    if (!eq) return 0;
    const char *p = eq + 3, *e = p;
    if (*p == '(') return 0;
    while (*e && *e != ' ' && *e != '{') e++;
    *ty = p;
    return (size_t)(e - p);
}

/* A node's type, when the finding holds its instruction's HLO text (its
 * sites and involved instructions); 0 when unknown. */
static size_t node_type(const trace_finding *f, const trace_node *tn, const char **ty) {
    const trace_site *sites[2] = {&f->base, &f->dist};
    const trace_site *st = sites[tn->side == SIDE_DISTRIBUTED];
    if (st->present && st->instruction && strcmp(st->instruction, tn->label) == 0) return hlo_type(st->hlo, ty);
    for (size_t k = 0; k < f->n_involved; k++)
        if (f->involved[k].side == tn->side && f->involved[k].instruction &&
            strcmp(f->involved[k].instruction, tn->label) == 0)
            return hlo_type(f->involved[k].hlo, ty);
    return 0;
}

/* Whether the message names the instruction a node stands for. */
static bool named(const trace_finding *f, const trace_node *tn) {
    size_t len, n = strlen(tn->label);
    for (const char *p = f->message, *q; (q = trace_next_instr_name(f->message, &p, &len));)
        if (len == n && memcmp(q, tn->label, n) == 0) return true;
    return false;
}

/* The nodes drawn whatever their distance: those the message names and
 * their neighbours (keep[i]). */
static bool *keep_named(const trace_finding *f) {
    bool *keep = xcalloc(f->n_nodes + 1, sizeof *keep), *nm = xcalloc(f->n_nodes + 1, sizeof *nm);
    for (size_t i = 0; i < f->n_nodes; i++) keep[i] = nm[i] = f->nodes[i].role != ROLE_COLLAPSED && named(f, &f->nodes[i]);
    for (size_t i = 0; i < f->n_edges; i++) {
        long a = find_node(f, f->edges[i].from), z = find_node(f, f->edges[i].to);
        if (a >= 0 && z >= 0 && (nm[a] || nm[z])) keep[a] = keep[z] = true;
    }
    free(nm);
    return keep;
}

bool dotg_svg(strbuf *out, const trace_finding *f, size_t max_nodes, char **cut_note, diag *d) {
    *cut_note = NULL;
    size_t n = f->n_nodes;
    /* Which nodes are drawn: kept[i] = graph node or NULL. Far context folds into
     * one node per side (what the message names stays); the cap drops the
     * farthest first, what the message names last. */
    bool *keep = keep_named(f);
    pick *order = xcalloc(n + 1, sizeof *order);
    for (size_t i = 0; i < n; i++) {
        const trace_node *tn = &f->nodes[i];
        order[i].idx = i;
        order[i].rank = tn->role == ROLE_DIVERGENCE ? 0 : keep[i] ? 1 : 2 + (int)(tn->hops > 1000 ? 1000 : tn->hops);
    }
    qsort(order, n, sizeof *order, cmp_pick);
    bool *draw = xcalloc(n + 1, sizeof *draw);
    size_t far[2] = {0, 0}, dropped = 0, drawn = 0;
    if (max_nodes < 4) max_nodes = 4;
    for (size_t k = 0; k < n; k++) {
        const trace_node *tn = &f->nodes[order[k].idx];
        if (tn->role != ROLE_DIVERGENCE && tn->role != ROLE_COLLAPSED && !keep[order[k].idx] && tn->hops > DOTG_MAX_HOPS) {
            far[tn->side]++;
            continue;
        }
        if (drawn + 2 >= max_nodes) {  /* keep room for the two fold nodes */
            dropped++;
            continue;
        }
        draw[order[k].idx] = true;
        drawn++;
    }
    free(order);
    free(keep);

    /* One context per process: Graphviz 2.43's text-layout plugin caches the last
     * font name across contexts, so freeing a context and making another reads
     * freed memory. The context is reachable until exit; graphs are per picture. */
    static GVC_t *gvc;
    if (!gvc) gvc = gvContext();
    Agdisc_t disc = {&AgMemDisc, &seq_id_disc, &AgIoDisc};
    graph_t *g = agopen("subgraph", Agdirected, &disc);
    set(g, "rankdir", "TB");
    set(g, "bgcolor", "transparent");
    set(g, "fontname", "Helvetica,Arial,sans-serif");
    set(g, "fontsize", "11");
    set(g, "nodesep", "0.45");
    set(g, "ranksep", "0.4");
    set(g, "pad", "0.15");
    graph_t *cl[2];
    static const char *const cl_name[2] = {"cluster_baseline", "cluster_distributed"};
    static const char *const cl_label[2] = {"baseline", "distributed"};
    for (int s = 0; s < 2; s++) {
        cl[s] = agsubg(g, (char *)cl_name[s], 1);
        set(cl[s], "label", cl_label[s]);
        set(cl[s], "class", s ? "cluster side-distributed" : "cluster side-baseline");
        set(cl[s], "style", "rounded,dashed");
        set(cl[s], "color", "#9aa4b2");
        set(cl[s], "fontcolor", "#4b5563");
        set(cl[s], "fontsize", "12");
        set(cl[s], "margin", "12");
    }
    agattr(g, AGNODE, "shape", "box");
    agattr(g, AGNODE, "style", "rounded,filled");
    agattr(g, AGNODE, "fontname", "Helvetica,Arial,sans-serif");
    agattr(g, AGNODE, "fontsize", "10");
    agattr(g, AGNODE, "penwidth", "1");
    agattr(g, AGNODE, "fillcolor", "#ffffff");
    agattr(g, AGNODE, "color", "#6b7280");
    agattr(g, AGNODE, "fontcolor", "#111827");
    agattr(g, AGNODE, "margin", "0.08,0.04");
    agattr(g, AGEDGE, "color", "#6b7280");
    agattr(g, AGEDGE, "arrowsize", "0.6");
    agattr(g, AGEDGE, "fontname", "Helvetica,Arial,sans-serif");
    agattr(g, AGEDGE, "fontsize", "9");

    Agnode_t **gn = xcalloc(n + 1, sizeof *gn);
    strbuf b;
    sb_init(&b);
    for (size_t i = 0; i < n; i++) {
        if (!draw[i]) continue;
        const trace_node *tn = &f->nodes[i];
        char id[32];
        snprintf(id, sizeof id, "n%zu", i);
        gn[i] = agnode(cl[tn->side], id, 1);
        sb_reset(&b);
        if (tn->role == ROLE_COLLAPSED) {
            sb_puts(&b, "<I>");
            put_short(&b, tn->label, 48);
            sb_puts(&b, "</I>");
        } else {
            int64_t step = path_step(f, tn->id);
            if (step) sb_printf(&b, "<FONT COLOR=\"#b45309\"><B>[%lld]</B></FONT> ", (long long)step);
            if (tn->opcode[0]) {
                sb_puts(&b, "<B>");
                put_short(&b, tn->opcode, 32);
                sb_puts(&b, "</B>");
            }
            if (step || tn->opcode[0]) sb_puts(&b, "<BR/>");
            put_short(&b, tn->label, 40);
            const char *ty = tn->type;
            size_t tyn = ty ? strlen(ty) : node_type(f, tn, &ty);
            if (tyn) {
                char tbuf[64];
                snprintf(tbuf, sizeof tbuf, "%.*s", (int)(tyn < 48 ? tyn : 48), ty);
                sb_puts(&b, "<BR/><FONT POINT-SIZE=\"9\">");
                put_short(&b, tbuf, 40);
                sb_puts(&b, "</FONT>");
            }
            if (tn->view) { /* what lifting made of the value */
                sb_puts(&b, "<BR/><FONT POINT-SIZE=\"9\" COLOR=\"#6d28d9\">");
                put_short(&b, tn->view, 40);
                sb_puts(&b, "</FONT>");
            }
            /* the views relating this distributed value to baseline ones */
            for (size_t k = 0; tn->side == SIDE_DISTRIBUTED && k < f->n_links; k++) {
                if (strcmp(f->links[k].to, tn->id) != 0 || !f->links[k].view) continue;
                sb_puts(&b, "<BR/><FONT POINT-SIZE=\"9\" COLOR=\"#1d4ed8\">");
                put_short(&b, f->links[k].view, 32);
                sb_puts(&b, "</FONT>");
                if (f->links[k].basis) { /* how an unproved counterpart was chosen */
                    sb_puts(&b, "<BR/><FONT POINT-SIZE=\"8\" COLOR=\"#1d4ed8\">by ");
                    put_short(&b, f->links[k].basis, 48);
                    sb_puts(&b, "</FONT>");
                }
            }
        }
        set_html(g, gn[i], "label", b.s);
        sb_reset(&b);
        sb_printf(&b, "node role-%s side-%s", trace_role_name(tn->role), trace_side_name(tn->side));
        set(gn[i], "class", b.s);
        switch (tn->role) {
        case ROLE_DIVERGENCE:
            set(gn[i], "fillcolor", "#fde2e1");
            set(gn[i], "color", "#c62828");
            set(gn[i], "penwidth", "2.2");
            break;
        case ROLE_CONTEXT: set(gn[i], "fillcolor", "#f3f4f6"); break;
        case ROLE_COLLAPSED:
            set(gn[i], "style", "rounded,dashed");
            set(gn[i], "fontcolor", "#4b5563");
            break;
        default: break;
        }
    }
    Agnode_t *fold[2] = {NULL, NULL};
    for (int s = 0; s < 2; s++) {
        if (!far[s]) continue;
        fold[s] = agnode(cl[s], s ? "fold_d" : "fold_b", 1);
        sb_reset(&b);
        sb_printf(&b, "<I>%zu more beyond %d hops</I>", far[s], DOTG_MAX_HOPS);
        set_html(g, fold[s], "label", b.s);
        set(fold[s], "style", "rounded,dashed");
        set(fold[s], "fontcolor", "#4b5563");
        set(fold[s], "class", s ? "node role-collapsed side-distributed" : "node role-collapsed side-baseline");
    }
    for (size_t i = 0; i < f->n_edges; i++) {
        long a = find_node(f, f->edges[i].from), z = find_node(f, f->edges[i].to);
        if (a < 0 || z < 0) continue;
        Agnode_t *na = gn[a], *nz = gn[z];
        /* An edge from folded context comes from the fold node. */
        if (!na && f->nodes[a].hops > DOTG_MAX_HOPS) na = fold[f->nodes[a].side];
        if (!na || !nz) continue;
        Agedge_t *e = agedge(g, na, nz, NULL, 1);
        set(e, "class", "edge data");
        int64_t sa = path_step(f, f->edges[i].from), sz = path_step(f, f->edges[i].to);
        if (sa && sz && sz > sa) { /* a step of the finding's path */
            set(e, "color", "#b45309");
            set(e, "penwidth", "1.8");
            set(e, "class", "edge data path");
        }
        if (f->edges[i].steps > 1) { /* a path folded into one edge */
            char lab[48];
            snprintf(lab, sizeof lab, "%lld steps", (long long)f->edges[i].steps);
            set(e, "style", "dotted");
            set(e, "label", lab);
            set(e, "class", "edge data folded");
        }
    }
    for (size_t i = 0; i < f->n_links; i++) {
        long a = find_node(f, f->links[i].from), z = find_node(f, f->links[i].to);
        if (a < 0 || z < 0 || !gn[a] || !gn[z]) continue;
        /* drawn distributed → baseline: dot then keeps the baseline cluster on the left */
        Agedge_t *e = agedge(g, gn[z], gn[a], NULL, 1);
        set(e, "style", "dashed");
        set(e, "constraint", "false");
        set(e, "dir", "none");
        set(e, "color", "#2563eb");
        set(e, "fontcolor", "#1d4ed8");
        set(e, "class", "edge link");
        /* The view is written in the distributed node (above), not beside
         * the link: dot's xlabels land on nodes when the clusters are close,
         * and labels on links across clusters crash Graphviz 2.43. */
    }
    free(draw);
    free(gn);

    bool ok = false;
    char *data = NULL;
    unsigned int len = 0;
    if (gvLayout(gvc, g, "dot") != 0) diag_plain(d, "graphviz: layout failed for finding %s", f->id);
    else {
        if (gvRenderData(gvc, g, "svg", &data, &len) != 0 || !data)
            diag_plain(d, "graphviz: rendering failed for finding %s", f->id);
        else {
            const char *svg = memmem(data, len, "<svg", 4);
            if (!svg) diag_plain(d, "graphviz: no <svg> element in the output for finding %s", f->id);
            else {
                sb_put(out, svg, len - (size_t)(svg - data));
                ok = true;
            }
        }
        if (data) gvFreeRenderData(data);
        gvFreeLayout(gvc, g);
    }
    agclose(g);
    sb_free(&b);
    if (ok && dropped) {
        strbuf note;
        sb_init(&note);
        if (dropped) sb_printf(&note, "%zu node%s not drawn (cap of %zu nodes).", dropped, dropped == 1 ? "" : "s", max_nodes);
        *cut_note = sb_take(&note);
    }
    return ok;
}

/* Graphviz 2.43 and the font stack under it (pango, fontconfig, glib) keep
 * allocations for the life of the process and leak some per layout; none of it
 * is ours. LeakSanitizer reads this hook (when linked with it) so `make asan`
 * reports only our leaks; without a sanitizer it is an unused function. */
const char *__lsan_default_suppressions(void);
const char *__lsan_default_suppressions(void) {
    return "leak:libgvc.so\nleak:libgvplugin_\nleak:libcgraph.so\nleak:libfontconfig.so\nleak:libpango\n"
           "leak:libglib-2.0.so\nleak:libcairo.so\nleak:libharfbuzz.so\n";
}

const char *__lsan_default_options(void);
const char *__lsan_default_options(void) { return "print_suppressions=0"; }
