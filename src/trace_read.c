/* trace_read — jansson → struct trace, checking as it copies (see trace_read.h). */
#include "trace_read.h"

#include <sys/stat.h>

#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io.h"

static const char *const role_names[] = {"divergence", "operand", "context", "collapsed"};
static const char *const side_names[] = {"baseline", "distributed"};

const char *trace_role_name(trace_role r) { return r <= ROLE_COLLAPSED ? role_names[r] : "?"; }
const char *trace_side_name(trace_side s) { return s <= SIDE_DISTRIBUTED ? side_names[s] : "?"; }

/* The reader: where we are (a JSON path for messages) and where errors go. */
typedef struct {
    trace *t;
    diag *d;
} rd;

/* Formats a JSON path for messages into buf (PATH_N bytes; long paths are cut). */
#define PATH_N 512
__attribute__((format(printf, 2, 3))) static char *at(char *buf, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, PATH_N, fmt, ap);
    va_end(ap);
    return buf;
}

static void bad(rd *r, const char *where, const char *what) { diag_plain(r->d, "%s: %s", where, what); }

static json_t *field(rd *r, json_t *obj, const char *where, const char *key, bool required) {
    json_t *v = json_is_object(obj) ? json_object_get(obj, key) : NULL;
    if (!v && required) {
        char msg[256];
        at(msg, "missing required field \"%s\"", key);
        bad(r, where, msg);
    }
    return v;
}

static const char *str_of(rd *r, json_t *v, const char *where) {
    if (!json_is_string(v)) {
        bad(r, where, "expected a string");
        return "";
    }
    return arena_strndup(&r->t->mem, json_string_value(v), json_string_length(v));
}

/* A string field; "" when missing and required (after the message), NULL when optional. */
static const char *get_str(rd *r, json_t *obj, const char *where, const char *key, bool required) {
    json_t *v = field(r, obj, where, key, required);
    if (!v || (json_is_null(v) && !required)) return required ? "" : NULL;
    char w[PATH_N];
    at(w, "%s.%s", where, key);
    return str_of(r, v, w);
}

static int64_t get_int(rd *r, json_t *obj, const char *where, const char *key, bool required, int64_t min) {
    json_t *v = field(r, obj, where, key, required);
    if (!v) return 0;
    char w[PATH_N];
    at(w, "%s.%s", where, key);
    if (!json_is_integer(v)) {
        bad(r, w, "expected an integer");
        return 0;
    }
    int64_t x = (int64_t)json_integer_value(v);
    if (x < min) {
        char msg[PATH_N];
        at(msg, "must be at least %lld", (long long)min);
        bad(r, w, msg);
    }
    return x;
}

/* A number, or one of "nan", "inf", "-inf" when nonfinite is allowed. */
static double num_of(rd *r, json_t *v, const char *w, bool nonfinite) {
    if (json_is_number(v)) return json_number_value(v);
    if (nonfinite && json_is_string(v)) {
        const char *s = json_string_value(v);
        if (strcmp(s, "nan") == 0) return NAN;
        if (strcmp(s, "inf") == 0) return INFINITY;
        if (strcmp(s, "-inf") == 0) return -INFINITY;
    }
    bad(r, w, nonfinite ? "expected a number or \"nan\", \"inf\", \"-inf\"" : "expected a number");
    return 0;
}

static double get_num(rd *r, json_t *obj, const char *where, const char *key, bool required, bool nonfinite) {
    json_t *v = field(r, obj, where, key, required);
    if (!v) return 0;
    char w[PATH_N];
    at(w, "%s.%s", where, key);
    double x = num_of(r, v, w, nonfinite);
    if (!nonfinite && x < 0) bad(r, w, "must not be negative");
    return x;
}

static bool get_bool(rd *r, json_t *obj, const char *where, const char *key) {
    json_t *v = field(r, obj, where, key, true);
    if (!v) return false;
    if (!json_is_boolean(v)) {
        char w[PATH_N];
        at(w, "%s.%s", where, key);
        bad(r, w, "expected true or false");
    }
    return json_is_true(v);
}

static int enum_of(rd *r, json_t *v, const char *w, const char *const *names, int n) {
    if (json_is_string(v))
        for (int i = 0; i < n; i++)
            if (strcmp(json_string_value(v), names[i]) == 0) return i;
    strbuf msg;
    sb_init(&msg);
    sb_puts(&msg, "expected one of");
    for (int i = 0; i < n; i++) sb_printf(&msg, "%s \"%s\"", i ? "," : "", names[i]);
    bad(r, w, msg.s);
    sb_free(&msg);
    return 0;
}

static int get_enum(rd *r, json_t *obj, const char *where, const char *key, const char *const *names, int n) {
    json_t *v = field(r, obj, where, key, true);
    if (!v) return 0;
    char w[PATH_N];
    at(w, "%s.%s", where, key);
    return enum_of(r, v, w, names, n);
}

static json_t *get_obj(rd *r, json_t *obj, const char *where, const char *key, bool required) {
    json_t *v = field(r, obj, where, key, required);
    if (v && !json_is_object(v)) {
        if (!required && json_is_null(v)) return NULL;
        char w[PATH_N];
        at(w, "%s.%s", where, key);
        bad(r, w, "expected an object");
        return NULL;
    }
    return v;
}

static json_t *get_arr(rd *r, json_t *obj, const char *where, const char *key, bool required) {
    json_t *v = field(r, obj, where, key, required);
    if (v && !json_is_array(v)) {
        char w[PATH_N];
        at(w, "%s.%s", where, key);
        bad(r, w, "expected an array");
        return NULL;
    }
    return v;
}

static void *arr_alloc(rd *r, json_t *a, size_t elem, size_t *n) {
    *n = a ? json_array_size(a) : 0;
    return *n ? arena_alloc(&r->t->mem, *n * elem) : NULL;
}

static void read_module(rd *r, json_t *pair, const char *key, trace_module *m) {
    char w[PATH_N];
    at(w, "pair.%s", key);
    json_t *o = get_obj(r, pair, "pair", key, true);
    if (!o) return;
    m->path = get_str(r, o, w, "path", true);
    m->format = (trace_format)get_enum(r, o, w, "format", trace_format_names, FORMAT_COUNT);
    m->module = get_str(r, o, w, "module", true);
    m->sha256 = get_str(r, o, w, "sha256", true);
    m->instructions = get_int(r, o, w, "instructions", true, 0);
}

static void read_range(rd *r, json_t *seg, const char *where, const char *key, int64_t *s, int64_t *e) {
    json_t *o = get_obj(r, seg, where, key, true);
    if (!o) return;
    char w[PATH_N];
    at(w, "%s.%s", where, key);
    *s = get_int(r, o, w, "start", true, 0);
    *e = get_int(r, o, w, "end", true, 0);
    if (*e < *s) bad(r, w, "end is before start");
}

static void read_segment(rd *r, json_t *o, const char *w, trace_segment *s) {
    if (!json_is_object(o)) {
        bad(r, w, "expected an object");
        return;
    }
    s->name = get_str(r, o, w, "name", true);
    s->verdict = (trace_verdict)get_enum(r, o, w, "verdict", trace_verdict_names, VERDICT_COUNT);
    read_range(r, o, w, "baseline", &s->base_start, &s->base_end);
    read_range(r, o, w, "distributed", &s->dist_start, &s->dist_end);
    s->enodes = get_int(r, o, w, "enodes", true, 0);
    s->eclasses = get_int(r, o, w, "eclasses", true, 0);
    s->iterations = get_int(r, o, w, "iterations", true, 0);
    s->rule_firings = get_int(r, o, w, "rule_firings", true, 0);
    s->stop = (trace_stop)get_enum(r, o, w, "stop_reason", trace_stop_names, STOP_COUNT);
    s->memo_hit = get_bool(r, o, w, "memo_hit");
    s->memo_of = get_str(r, o, w, "memo_of", false);
    json_t *t = get_obj(r, o, w, "timings_ms", true);
    if (t) {
        char tw[PATH_N];
        at(tw, "%s.timings_ms", w);
        s->t_build = get_num(r, t, tw, "build", true, false);
        s->t_lift = get_num(r, t, tw, "lift", true, false);
        s->t_saturate = get_num(r, t, tw, "saturate", true, false);
        s->t_check = get_num(r, t, tw, "check", true, false);
    }
    json_t *top = get_arr(r, o, w, "top_rules", false);
    s->top_rules = arr_alloc(r, top, sizeof *s->top_rules, &s->n_top_rules);
    for (size_t i = 0; i < s->n_top_rules; i++) {
        char rw[PATH_N];
        at(rw, "%s.top_rules[%zu]", w, i);
        json_t *e = json_array_get(top, i);
        s->top_rules[i].rule = get_str(r, e, rw, "rule", true);
        s->top_rules[i].count = get_int(r, e, rw, "count", true, 0);
    }
}

static void read_site(rd *r, json_t *f, const char *where, const char *key, bool required, trace_site *s) {
    json_t *o = get_obj(r, f, where, key, required);
    if (!o) return;
    char w[PATH_N];
    at(w, "%s.%s", where, key);
    s->present = true;
    s->instruction = get_str(r, o, w, "instruction", true);
    s->opcode = get_str(r, o, w, "opcode", true);
    s->hlo = get_str(r, o, w, "hlo", true);
    s->op_name = get_str(r, o, w, "op_name", false);
    s->file = get_str(r, o, w, "file", false);
    s->line = get_int(r, o, w, "line", false, 1);
    s->column = get_int(r, o, w, "column", false, 0);
}

static void read_diff(rd *r, json_t *wit, const char *where, const char *key, trace_diff *df) {
    json_t *o = get_obj(r, wit, where, key, false);
    if (!o) return;
    char w[PATH_N];
    at(w, "%s.%s", where, key);
    df->present = true;
    df->max_abs = get_num(r, o, w, "max_abs", true, true);
    df->max_rel = get_num(r, o, w, "max_rel", true, true);
}

/* Whether id (NULL: no) is the id of a node of f's subgraph. */
static bool names_node(const trace_finding *f, const char *id) {
    for (size_t j = 0; id && j < f->n_nodes; j++)
        if (strcmp(f->nodes[j].id, id) == 0) return true;
    return false;
}

static void read_subgraph(rd *r, json_t *sg, const char *where, trace_finding *f) {
    char w[PATH_N];
    f->has_subgraph = true;
    json_t *nodes = get_arr(r, sg, where, "nodes", true);
    f->nodes = arr_alloc(r, nodes, sizeof *f->nodes, &f->n_nodes);
    for (size_t i = 0; i < f->n_nodes; i++) {
        at(w, "%s.nodes[%zu]", where, i);
        json_t *o = json_array_get(nodes, i);
        trace_node *n = &f->nodes[i];
        n->id = get_str(r, o, w, "id", true);
        n->side = (trace_side)get_enum(r, o, w, "side", side_names, 2);
        n->label = get_str(r, o, w, "label", true);
        n->opcode = get_str(r, o, w, "opcode", true);
        n->type = get_str(r, o, w, "type", false);
        n->view = get_str(r, o, w, "view", false);
        n->role = (trace_role)get_enum(r, o, w, "role", role_names, 4);
        n->hops = get_int(r, o, w, "hops", true, 0);
        for (size_t j = 0; j < i; j++)
            if (strcmp(f->nodes[j].id, n->id) == 0) bad(r, w, "duplicate node id");
    }
    for (int pass = 0; pass < 2; pass++) {
        const char *key = pass ? "links" : "edges";
        json_t *a = get_arr(r, sg, where, key, true);
        size_t n;
        trace_edge *e = arr_alloc(r, a, sizeof *e, &n);
        for (size_t i = 0; i < n; i++) {
            at(w, "%s.%s[%zu]", where, key, i);
            json_t *o = json_array_get(a, i);
            e[i].from = get_str(r, o, w, "from", true);
            e[i].to = get_str(r, o, w, "to", true);
            e[i].view = pass ? get_str(r, o, w, "view", true) : NULL;
            e[i].basis = pass ? get_str(r, o, w, "basis", false) : NULL;
            e[i].steps = pass ? 1 : get_int(r, o, w, "steps", false, 1);
            if (!e[i].steps) e[i].steps = 1; /* absent */
            for (int end = 0; end < 2; end++) {
                const char *id = end ? e[i].to : e[i].from;
                if (!names_node(f, id)) bad(r, w, end ? "\"to\" names no node" : "\"from\" names no node");
            }
        }
        if (pass) f->links = e, f->n_links = n;
        else f->edges = e, f->n_edges = n;
    }
    f->truncated = get_str(r, sg, where, "truncated", false);
}

/* A finding's path: every step names a node of its subgraph. */
static void read_path(rd *r, json_t *o, const char *where, trace_finding *f) {
    char w[PATH_N];
    json_t *a = get_arr(r, o, where, "path", false);
    f->path = arr_alloc(r, a, sizeof *f->path, &f->n_path);
    for (size_t i = 0; i < f->n_path; i++) {
        at(w, "%s.path[%zu]", where, i);
        json_t *e = json_array_get(a, i);
        trace_step *s = &f->path[i];
        s->step = get_int(r, e, w, "step", true, 1);
        s->node = get_str(r, e, w, "node", true);
        s->instruction = get_str(r, e, w, "instruction", true);
        s->opcode = get_str(r, e, w, "opcode", true);
        s->view = get_str(r, e, w, "view", false);
        s->file = get_str(r, e, w, "file", false);
        s->line = get_int(r, e, w, "line", false, 1);
        if (!names_node(f, s->node)) bad(r, w, "\"node\" names no node of the subgraph");
    }
    f->path_omitted = get_int(r, o, where, "path_omitted", false, 1);
}

static void read_finding(rd *r, json_t *o, const char *w, trace_finding *f) {
    if (!json_is_object(o)) {
        bad(r, w, "expected an object");
        return;
    }
    f->id = get_str(r, o, w, "id", true);
    f->kind = (trace_kind)get_enum(r, o, w, "kind", trace_kind_names, KIND_COUNT);
    f->severity = (trace_severity)get_enum(r, o, w, "severity", trace_severity_names, SEV_COUNT);
    f->message = get_str(r, o, w, "message", true);
    f->explanation = get_str(r, o, w, "explanation", true);
    f->segment = get_str(r, o, w, "segment", false);
    read_site(r, o, w, "distributed", true, &f->dist);
    read_site(r, o, w, "baseline", false, &f->base);
    char sw[PATH_N];
    json_t *inv = get_arr(r, o, w, "involved", false);
    f->involved = arr_alloc(r, inv, sizeof *f->involved, &f->n_involved);
    for (size_t i = 0; i < f->n_involved; i++) {
        at(sw, "%s.involved[%zu]", w, i);
        json_t *e = json_array_get(inv, i);
        f->involved[i].side = (trace_side)get_enum(r, e, sw, "side", side_names, 2);
        f->involved[i].instruction = get_str(r, e, sw, "instruction", true);
        f->involved[i].hlo = get_str(r, e, sw, "hlo", true);
        f->involved[i].file = get_str(r, e, sw, "file", false);
        f->involved[i].line = get_int(r, e, sw, "line", false, 1);
    }
    json_t *sg = get_obj(r, o, w, "subgraph", false);
    if (sg) {
        at(sw, "%s.subgraph", w);
        read_subgraph(r, sg, sw, f);
    }
    read_path(r, o, w, f);
    json_t *sn = get_arr(r, o, w, "snippets", false);
    f->snippets = arr_alloc(r, sn, sizeof *f->snippets, &f->n_snippets);
    for (size_t i = 0; i < f->n_snippets; i++) {
        at(sw, "%s.snippets[%zu]", w, i);
        json_t *e = json_array_get(sn, i);
        trace_snippet *s = &f->snippets[i];
        s->file = get_str(r, e, sw, "file", true);
        s->first_line = get_int(r, e, sw, "first_line", true, 1);
        s->highlight = get_int(r, e, sw, "highlight", true, 0);
        json_t *lines = get_arr(r, e, sw, "lines", true);
        s->lines = arr_alloc(r, lines, sizeof *s->lines, &s->n_lines);
        for (size_t j = 0; j < s->n_lines; j++) {
            char lw[PATH_N];
            at(lw, "%s.lines[%zu]", sw, j);
            s->lines[j] = str_of(r, json_array_get(lines, j), lw);
        }
    }
    json_t *wit = get_obj(r, o, w, "witness", false);
    if (wit) {
        at(sw, "%s.witness", w);
        f->has_witness = true;
        f->inputs_seed = get_int(r, wit, sw, "inputs_seed", true, 0);
        f->max_abs = get_num(r, wit, sw, "max_abs", true, true);
        f->max_rel = get_num(r, wit, sw, "max_rel", true, true);
        read_diff(r, wit, sw, "at_divergence", &f->at_divergence);
        read_diff(r, wit, sw, "at_outputs", &f->at_outputs);
        f->outcome = get_str(r, wit, sw, "outcome", false);
        f->note = get_str(r, wit, sw, "note", false);
        if (f->outcome && strcmp(f->outcome, "differs") && strcmp(f->outcome, "agrees") && strcmp(f->outcome, "undecided") &&
            strcmp(f->outcome, "between"))
            bad(r, sw, "outcome must be one of differs, agrees, undecided, between");
    }
}

/* The strings of an optional array (others skipped), copied into the arena. */
static void str_array(trace *t, json_t *a, const char ***out, size_t *n) {
    if (!json_is_array(a)) return;
    *out = arena_alloc(&t->mem, (json_array_size(a) + 1) * sizeof **out);
    for (size_t i = 0; i < json_array_size(a); i++)
        if (json_is_string(json_array_get(a, i))) (*out)[(*n)++] = arena_strdup(&t->mem, json_string_value(json_array_get(a, i)));
}

static void read_root(rd *r, json_t *root) {
    trace *t = r->t;
    if (!json_is_object(root)) {
        bad(r, "(root)", "expected a JSON object");
        return;
    }
    json_t *ver = json_object_get(root, "scalify_trace");
    if (!ver) {
        bad(r, "(root)", "not a scalify trace (no \"scalify_trace\" field)");
        return;
    }
    if (!json_is_integer(ver) || json_integer_value(ver) != 1) {
        bad(r, "scalify_trace", "unsupported trace version (this build reads version 1)");
        return;
    }
    json_t *tool = get_obj(r, root, "(root)", "tool", true);
    if (tool) {
        t->tool_name = get_str(r, tool, "tool", "name", true);
        t->tool_version = get_str(r, tool, "tool", "version", true);
        t->rules_digest = get_str(r, tool, "tool", "rules_digest", true);
    }
    str_array(t, json_object_get(root, "assumptions"), &t->assumptions, &t->n_assumptions);
    json_t *pair = get_obj(r, root, "(root)", "pair", true);
    if (pair) {
        t->name = get_str(r, pair, "pair", "name", true);
        read_module(r, pair, "baseline", &t->base);
        read_module(r, pair, "distributed", &t->dist);
        t->relations_file = get_str(r, pair, "pair", "relations_file", false);
        /* optional; a reader of older traces reconstructs what it can */
        str_array(t, json_object_get(pair, "command"), &t->command, &t->n_command);
        json_t *mesh = get_obj(r, pair, "pair", "mesh", true);
        if (mesh) {
            t->n_mesh = json_object_size(mesh);
            t->mesh = arena_alloc(&t->mem, (t->n_mesh + 1) * sizeof *t->mesh);
            size_t i = 0;
            const char *k;
            json_t *v;
            json_object_foreach(mesh, k, v) {
                t->mesh[i].axis = arena_strdup(&t->mem, k);
                if (!json_is_integer(v) || json_integer_value(v) < 1) bad(r, "pair.mesh", "axis sizes must be positive integers");
                else t->mesh[i].size = (int64_t)json_integer_value(v);
                i++;
            }
        }
        json_t *rel = get_obj(r, pair, "pair", "relations", true);
        if (rel) {
            t->n_relations = json_object_size(rel);
            t->relations = arena_alloc(&t->mem, (t->n_relations + 1) * sizeof *t->relations);
            size_t i = 0;
            const char *k;
            json_t *v;
            json_object_foreach(rel, k, v) {
                t->relations[i].key = arena_strdup(&t->mem, k);
                t->relations[i].value = str_of(r, v, "pair.relations");
                i++;
            }
        }
    }
    json_t *v = field(r, root, "(root)", "verdict", true);
    if (v) t->verdict = (trace_verdict)enum_of(r, v, "verdict", trace_verdict_names, VERDICT_COUNT);
    t->error = get_str(r, root, "(root)", "error", false);
    json_t *sum = get_obj(r, root, "(root)", "summary", true);
    if (sum) {
        t->n_segments_summary = get_int(r, sum, "summary", "segments", true, 0);
        t->memo_hits = get_int(r, sum, "summary", "memo_hits", true, 0);
        t->wall_ms = get_num(r, sum, "summary", "wall_ms", true, false);
        t->setup_ms = get_num(r, sum, "summary", "setup_ms", false, false);
        t->cpu_ms = get_num(r, sum, "summary", "cpu_ms", true, false);
        t->threads = get_int(r, sum, "summary", "threads", false, 1);
        t->peak_bytes = get_int(r, sum, "summary", "peak_bytes", true, 0);
        json_t *kinds = get_obj(r, sum, "summary", "findings", true);
        const char *k;
        json_t *c;
        if (kinds) json_object_foreach(kinds, k, c) {
            int kind = -1;
            for (int i = 0; i < KIND_COUNT; i++)
                if (strcmp(k, trace_kind_names[i]) == 0) kind = i;
            char w[PATH_N];
            at(w, "summary.findings.%.200s", k);
            if (kind < 0) bad(r, w, "unknown finding kind");
            else if (!json_is_integer(c) || json_integer_value(c) < 1) bad(r, w, "expected a positive count");
            else t->kind_counts[kind] = (int64_t)json_integer_value(c);
        }
    }
    json_t *segs = get_arr(r, root, "(root)", "segments", true);
    t->segments = arr_alloc(r, segs, sizeof *t->segments, &t->n_segments);
    for (size_t i = 0; i < t->n_segments; i++) {
        char w[PATH_N];
        at(w, "segments[%zu]", i);
        read_segment(r, json_array_get(segs, i), w, &t->segments[i]);
    }
    json_t *fs = get_arr(r, root, "(root)", "findings", true);
    t->findings = arr_alloc(r, fs, sizeof *t->findings, &t->n_findings);
    for (size_t i = 0; i < t->n_findings; i++) {
        char w[PATH_N];
        at(w, "findings[%zu]", i);
        read_finding(r, json_array_get(fs, i), w, &t->findings[i]);
        for (size_t j = 0; j < i; j++)
            if (strcmp(t->findings[j].id, t->findings[i].id) == 0) bad(r, w, "duplicate finding id");
    }
}

trace *trace_read_buffer(const char *buf, size_t n, const char *name, diag *d) {
    json_error_t err;
    json_t *root = json_loadb(buf, n, JSON_REJECT_DUPLICATES, &err);
    if (!root) {
        diag_pos(d, err.line > 0 ? err.line : 0, err.column > 0 ? err.column : 0, "invalid JSON: %s", err.text);
        return NULL;
    }
    trace *t = xcalloc(1, sizeof *t);
    arena_init(&t->mem);
    t->source = arena_strdup(&t->mem, name ? name : "");
    int before = d->count;
    rd r = {t, d};
    read_root(&r, root);
    json_decref(root);
    if (d->count > before) {
        trace_free(t);
        return NULL;
    }
    return t;
}

trace *trace_read_file(const char *path, diag *d) {
    size_t n;
    uint8_t h[32];
    char *buf = io_read_file_sha256(path, &n, NULL, h, d);
    if (!buf) return NULL;
    trace *t = trace_read_buffer(buf, n, path, d);
    free(buf);
    if (t) {
        for (int i = 0; i < 32; i++) snprintf(t->source_sha256 + 2 * i, 3, "%02x", h[i]);
        struct stat st;
        if (stat(path, &st) == 0) t->source_mtime = (int64_t)st.st_mtime;
    }
    return t;
}

int64_t trace_count_findings(const trace *t, int64_t kinds[KIND_COUNT]) {
    int64_t listed[KIND_COUNT] = {0}, sum = 0;
    for (size_t i = 0; i < t->n_findings; i++) listed[t->findings[i].kind]++;
    for (int k = 0; k < KIND_COUNT; k++) {
        int64_t all = t->kind_counts[k] > listed[k] ? t->kind_counts[k] : listed[k];
        if (kinds) kinds[k] = all;
        sum += all;
    }
    return sum;
}

void trace_free(trace *t) {
    if (!t) return;
    arena_free(&t->mem);
    free(t);
}
