/* sarif — SARIF 2.1.0 writer (see sarif.h). */
#include "sarif.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "escape.h"
#include "io.h"
#include "scalify.h"

static json_t *str(const char *s) { return json_string(s ? s : ""); }

static json_t *text(const char *s) {
    json_t *o = json_object();
    json_object_set_new(o, "text", str(s));
    return o;
}

static json_t *uri(const char *path) {
    strbuf b;
    sb_init(&b);
    esc_uri(&b, path);
    json_t *o = json_object();
    json_object_set_new(o, "uri", json_string(b.s ? b.s : ""));
    sb_free(&b);
    return o;
}

/* ---- text locations: source line, else the instruction's line in HLO text ---- */

/* Files read for locations, each once per report (a text file or not). */
typedef struct {
    char *path, *buf;  /* buf NULL: missing, compressed or binary */
    size_t len;
} tfile;

typedef struct {
    tfile *f;
    size_t n, cap;
} tcache;

static const tfile *tc_get(tcache *c, const char *path) {
    for (size_t i = 0; i < c->n; i++)
        if (strcmp(c->f[i].path, path) == 0) return &c->f[i];
    XGROW(c->f, c->cap, c->n + 1);
    tfile *f = &c->f[c->n++];
    memset(f, 0, sizeof *f);
    f->path = xstrdup(path);
    diag quiet;
    diag_init(&quiet, path);
    bool gz = false;
    f->buf = io_read_file(path, &f->len, &gz, &quiet);
    diag_free(&quiet);
    /* A location needs a text file a viewer can open at a line. */
    if (f->buf && (gz || memchr(f->buf, 0, f->len))) {
        free(f->buf);
        f->buf = NULL;
    }
    return f;
}

static void tc_free(tcache *c) {
    for (size_t i = 0; i < c->n; i++) free(c->f[i].path), free(c->f[i].buf);
    free(c->f);
}

/* The 1-based line defining instruction `name` in HLO text ("  %name = …",
 * "  ROOT name = …"), 0 when there is none. */
static int64_t hlo_def_line(const tfile *f, const char *name) {
    strbuf needle;
    sb_init(&needle);
    sb_printf(&needle, "%s = ", name);
    int64_t line = 0;
    const char *buf = f->buf, *end = f->buf + f->len;
    for (const char *q = buf; !line && (q = memmem(q, (size_t)(end - q), needle.s, needle.len)); q++) {
        const char *r = q;
        if (r > buf && r[-1] == '%') r--;
        if (r - buf >= 5 && memcmp(r - 5, "ROOT ", 5) == 0) r -= 5;
        while (r > buf && (r[-1] == ' ' || r[-1] == '\t')) r--;
        if (r > buf && r[-1] != '\n') continue;
        line = 1;
        for (const char *x = buf; x < q; x++) line += *x == '\n';
    }
    sb_free(&needle);
    return line;
}

/* The HLO text of a module as given: the file itself when it is text, else
 * the text form beside a protobuf (x.hlo for x.hlo.pb). */
static const tfile *hlo_text(tcache *c, const char *path) {
    const tfile *f = tc_get(c, path);
    size_t n = strlen(path);
    if (!f->buf && n > 3 && strcmp(path + n - 3, ".pb") == 0) {
        char *beside = xstrdup(path);
        beside[n - 3] = 0;
        f = tc_get(c, beside);
        free(beside);
    }
    return f->buf ? f : NULL;
}

/* The source file the trace's sites name most often (the program's own
 * file), NULL when none does. */
static const char *pair_source(const trace *t) {
    const char *best = NULL;
    size_t best_n = 0;
    for (size_t i = 0; i < t->n_findings; i++) {
        const char *cand = t->findings[i].dist.file;
        if (!cand) continue;
        size_t m = 0;
        for (size_t j = 0; j < t->n_findings; j++) {
            const trace_finding *f = &t->findings[j];
            m += f->dist.file && strcmp(f->dist.file, cand) == 0;
            m += f->base.file && strcmp(f->base.file, cand) == 0;
            for (size_t k = 0; k < f->n_involved; k++) m += f->involved[k].file && strcmp(f->involved[k].file, cand) == 0;
        }
        if (m > best_n) best = cand, best_n = m;
    }
    return best;
}

static json_t *region(int64_t line, int64_t col) {
    json_t *r = json_object();
    json_object_set_new(r, "startLine", json_integer(line > 0 ? line : 1));
    if (col > 0) json_object_set_new(r, "startColumn", json_integer(col));
    return r;
}

static json_t *phys(const char *path, int64_t line, int64_t col) {
    json_t *pl = json_object();
    json_object_set_new(pl, "artifactLocation", uri(path));
    json_object_set_new(pl, "region", region(line, col));
    return pl;
}

/* The line of the finding's id in its trace file (JSON text), else 1. */
static int64_t trace_line(tcache *c, const trace *t, const trace_finding *f) {
    const tfile *tf = tc_get(c, t->source);
    if (!tf->buf) return 1;
    strbuf needle;
    sb_init(&needle);
    sb_puts(&needle, "\"id\": \"");
    esc_json(&needle, f->id);
    sb_putc(&needle, '"');
    const char *q = memmem(tf->buf, tf->len, needle.s, needle.len);
    sb_free(&needle);
    int64_t line = 1;
    for (const char *x = tf->buf; q && x < q; x++) line += *x == '\n';
    return line;
}

/* A text location with a start line for a site of module m, and what it
 * points at (for the location's message): the site's source line; else the
 * instruction's line in the module's HLO text (beside a protobuf); else, for
 * the primary location (t, f given), the pair's source file at the line of an
 * involved instruction, or at line 1, naming the op_name; else the finding in
 * its trace file. NULL when a related location has no text to point at. */
static json_t *text_location(tcache *c, const trace_site *s, const trace_module *m, const trace *t,
                             const trace_finding *f, strbuf *what) {
    if (s->file && s->line > 0) {
        sb_printf(what, "source of %s", s->instruction);
        return phys(s->file, s->line, s->column);
    }
    const tfile *h = hlo_text(c, m->path);
    int64_t line = h ? hlo_def_line(h, s->instruction) : 0;
    if (line) {
        sb_printf(what, "%s in the HLO text (no source line in its metadata)", s->instruction);
        return phys(h->path, line, 0);
    }
    if (!t) return NULL;
    const char *src = s->file ? s->file : pair_source(t);
    if (src) {
        int64_t at = 0;
        for (size_t k = 0; k < f->n_involved && !at; k++)
            if (f->involved[k].file && strcmp(f->involved[k].file, src) == 0) at = f->involved[k].line;
        sb_printf(what, "%s (op_name %s): no source line in its metadata and no HLO text; %s", s->instruction,
                  s->op_name ? s->op_name : "unknown", at ? "the line of an instruction it uses" : "the program's source file");
        return phys(src, at, 0);
    }
    sb_printf(what, "%s: no source line, HLO text or source file known; the finding in its trace", s->instruction);
    return phys(t->source, trace_line(c, t, f), 0);
}

static json_t *logical(const trace *t, const trace_module *m, const trace_site *s) {
    json_t *ll = json_object();
    json_object_set_new(ll, "name", str(s->instruction));
    strbuf q;
    sb_init(&q);
    sb_printf(&q, "%s/%s", m->module, s->instruction);
    json_object_set_new(ll, "fullyQualifiedName", str(q.s));
    json_object_set_new(ll, "kind", json_string("instruction"));
    sb_free(&q);
    (void)t;
    json_t *a = json_array();
    json_array_append_new(a, ll);
    return a;
}

static const char *level(trace_severity s) { return s == SEV_ERROR ? "error" : s == SEV_WARNING ? "warning" : "note"; }

/* Markdown as plain text: no heading marks, emphasis or code ticks. */
static void md_plain(strbuf *b, const char *md, size_t n) {
    bool line_start = true;
    for (size_t i = 0; i < n; i++) {
        char ch = md[i];
        if (line_start && ch == '#') {
            while (i < n && md[i] == '#') i++;
            while (i < n && md[i] == ' ') i++;
            i--;
            line_start = false;
            continue;
        }
        line_start = ch == '\n';
        if (ch == '`' || (ch == '*' && i + 1 < n && md[i + 1] == '*')) {
            if (ch == '*') i++;
            continue;
        }
        sb_putc(b, ch);
    }
}

/* The first paragraph after the heading of a finding kind's Markdown, lines
 * joined: the rule's fullDescription. */
static void first_paragraph(strbuf *md_out, const char *md) {
    const char *p = md;
    while (*p == '#' || *p == '\n') {  /* heading lines and blank lines */
        const char *nl = strchr(p, '\n');
        if (*p == '\n') p++;
        else p = nl ? nl + 1 : p + strlen(p);
    }
    const char *end = strstr(p, "\n\n");
    if (!end) end = p + strlen(p);
    for (const char *q = p; q < end; q++) sb_putc(md_out, *q == '\n' ? ' ' : *q);
}

static json_t *message_md(const char *md, size_t n) {
    strbuf plain;
    sb_init(&plain);
    md_plain(&plain, md, n);
    json_t *o = json_object();
    json_object_set_new(o, "text", json_string(plain.s ? plain.s : ""));
    json_t *m = json_stringn(md, n);
    json_object_set_new(o, "markdown", m ? m : json_string(""));
    sb_free(&plain);
    return o;
}

static json_t *rule(int k, const char *md) {
    json_t *r = json_object();
    json_object_set_new(r, "id", json_string(trace_kind_name((trace_kind)k)));
    /* name: PascalCase of the kind, as SARIF suggests */
    char name[64];
    size_t j = 0;
    bool up = true;
    for (const char *p = trace_kind_name((trace_kind)k); *p && j + 1 < sizeof name; p++) {
        if (*p == '-') {
            up = true;
            continue;
        }
        name[j++] = up && *p >= 'a' && *p <= 'z' ? (char)(*p - 32) : *p;
        up = false;
    }
    name[j] = 0;
    json_object_set_new(r, "name", json_string(name));
    json_object_set_new(r, "shortDescription", text(trace_kind_short((trace_kind)k)));
    strbuf para;
    sb_init(&para);
    first_paragraph(&para, md ? md : "");
    if (para.len) json_object_set_new(r, "fullDescription", message_md(para.s, para.len));
    sb_free(&para);
    if (md) json_object_set_new(r, "help", message_md(md, strlen(md)));
    json_t *cfg = json_object();
    json_object_set_new(cfg, "level", json_string(trace_kind_level((trace_kind)k)));
    json_object_set_new(r, "defaultConfiguration", cfg);
    json_t *props = json_object();
    json_t *tags = json_array();
    json_array_append_new(tags, json_string("correctness"));
    json_array_append_new(tags, json_string("distributed"));
    json_object_set_new(props, "tags", tags);
    json_object_set_new(r, "properties", props);
    return r;
}

static json_t *related(int id, json_t *physical, const char *msg) {
    json_t *o = json_object();
    json_object_set_new(o, "id", json_integer(id));
    json_object_set_new(o, "physicalLocation", physical);
    json_object_set_new(o, "message", text(msg));
    return o;
}

static json_t *result(tcache *c, const trace *t, const trace_finding *f, const char *page, const char *key) {
    json_t *r = json_object();
    json_object_set_new(r, "ruleId", json_string(trace_kind_name(f->kind)));
    json_object_set_new(r, "ruleIndex", json_integer(f->kind));
    json_object_set_new(r, "level", json_string(level(f->severity)));
    strbuf m, what;
    sb_init(&m);
    sb_init(&what);
    sb_printf(&m, "%s: %s", t->name, f->message);
    json_object_set_new(r, "message", text(m.s));
    json_t *loc = json_object();
    json_object_set_new(loc, "physicalLocation", text_location(c, &f->dist, &t->dist, t, f, &what));
    json_object_set_new(loc, "logicalLocations", logical(t, &t->dist, &f->dist));
    json_object_set_new(loc, "message", text(what.s));
    json_t *locs = json_array();
    json_array_append_new(locs, loc);
    json_object_set_new(r, "locations", locs);
    json_t *rel = json_array();
    if (f->base.present) {
        sb_reset(&what);
        json_t *pl = text_location(c, &f->base, &t->base, NULL, NULL, &what);
        if (pl) {
            sb_reset(&m);
            sb_printf(&m, "baseline counterpart %s (%s)", f->base.instruction, f->base.opcode);
            json_t *bl = related(1, pl, m.s);
            json_object_set_new(bl, "logicalLocations", logical(t, &t->base, &f->base));
            json_array_append_new(rel, bl);
        }
    }
    /* the distributed instruction in the HLO text, when the primary location
     * is its source line */
    const tfile *h = f->dist.file && f->dist.line > 0 ? hlo_text(c, t->dist.path) : NULL;
    int64_t hl = h ? hlo_def_line(h, f->dist.instruction) : 0;
    if (hl) json_array_append_new(rel, related(2, phys(h->path, hl, 0), "the instruction in the distributed HLO text"));
    json_t *pl = json_object();
    json_object_set_new(pl, "artifactLocation", uri(page));
    json_array_append_new(rel, related(3, pl, "the finding's page in the scalify report beside this file"));
    json_object_set_new(r, "relatedLocations", rel);
    json_object_set_new(r, "partialFingerprints", json_pack("{s:s}", "scalifyFinding/v2", key));
    json_t *props = json_object();
    json_object_set_new(props, "pair", str(t->name));
    json_object_set_new(props, "findingId", str(f->id));
    json_object_set_new(props, "reportPage", str(page));
    if (f->segment) json_object_set_new(props, "segment", str(f->segment));
    if (f->dist.op_name) json_object_set_new(props, "opName", str(f->dist.op_name));
    json_object_set_new(props, "explanation", str(f->explanation));
    json_object_set_new(r, "properties", props);
    sb_free(&m);
    sb_free(&what);
    return r;
}

void sarif_write(strbuf *out, trace *const *traces, size_t n, const rnames *names, const char *const *kind_md) {
    json_t *root = json_object();
    json_object_set_new(root, "$schema", json_string("https://json.schemastore.org/sarif-2.1.0.json"));
    json_object_set_new(root, "version", json_string("2.1.0"));
    json_t *run = json_object();
    json_t *driver = json_object();
    json_object_set_new(driver, "name", json_string("scalify"));
    json_object_set_new(driver, "version", str(n ? traces[0]->tool_version : SCALIFY_VERSION));
    json_t *rules = json_array();
    for (int k = 0; k < KIND_COUNT; k++) json_array_append_new(rules, rule(k, kind_md ? kind_md[k] : NULL));
    json_object_set_new(driver, "rules", rules);
    json_t *tool = json_object();
    json_object_set_new(tool, "driver", driver);
    json_object_set_new(run, "tool", tool);
    json_t *results = json_array();
    tcache cache = {0};
    strbuf page;
    sb_init(&page);
    for (size_t p = 0; p < n; p++)
        for (size_t i = 0; i < traces[p]->n_findings; i++) {
            sb_reset(&page);
            sb_printf(&page, "finding-%s.html", names->finding[p][i]);
            json_array_append_new(results, result(&cache, traces[p], &traces[p]->findings[i], page.s, names->key[p][i]));
        }
    sb_free(&page);
    tc_free(&cache);
    json_object_set_new(run, "results", results);
    json_object_set_new(run, "columnKind", json_string("unicodeCodePoints"));
    /* results are the listed findings; the traces count more where a kind
     * repeats (summary.findings), as summary.json says too */
    long long total = 0, listed = 0;
    for (size_t p = 0; p < n; p++) total += trace_count_findings(traces[p], NULL), listed += (long long)traces[p]->n_findings;
    json_object_set_new(run, "properties", json_pack("{s:I,s:I}", "findings", (json_int_t)total, "findingsListed",
                                                     (json_int_t)listed));
    json_t *runs = json_array();
    json_array_append_new(runs, run);
    json_object_set_new(root, "runs", runs);
    char *s = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    json_decref(root);
    esc_json_harden(out, s, strlen(s));
    sb_putc(out, '\n');
    free(s);
}
