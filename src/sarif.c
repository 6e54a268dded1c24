/* sarif — SARIF 2.1.0 writer (see sarif.h). */
#include "sarif.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "escape.h"
#include "scalify.h"

/* One line each, the rule's shortDescription; keep in step with trace_kind. */
static const char *const kind_short[KIND_COUNT] = {
    "A partial (per-device) value is used without the all-reduce that completes it.",
    "A collective combines values with the wrong reduction (e.g. mean instead of sum).",
    "A collective's replica groups do not match the mesh axis of the value.",
    "Reshape/transpose arranges the tensor differently from the baseline.",
    "A value is sharded, gathered or scattered along the wrong dimension.",
    "The distributed program computes in a different element type.",
    "A literal differs from the baseline (often a local-shape constant).",
    "No rule or transfer function covers this operation; the pair is unverified.",
    "Equality saturation ran out of budget; the segment is unverified.",
};

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

/* A physicalLocation at the site's source line, else at the HLO file itself. */
static json_t *physical(const trace_site *s, const char *hlo_path) {
    json_t *pl = json_object();
    if (s->file && s->line > 0) {
        json_object_set_new(pl, "artifactLocation", uri(s->file));
        json_t *r = json_object();
        json_object_set_new(r, "startLine", json_integer(s->line));
        if (s->column > 0) json_object_set_new(r, "startColumn", json_integer(s->column));
        json_object_set_new(pl, "region", r);
    } else json_object_set_new(pl, "artifactLocation", uri(hlo_path));
    return pl;
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

void sarif_write(strbuf *out, trace *const *traces, size_t n, const rnames *names) {
    json_t *root = json_object();
    json_object_set_new(root, "$schema", json_string("https://json.schemastore.org/sarif-2.1.0.json"));
    json_object_set_new(root, "version", json_string("2.1.0"));
    json_t *run = json_object();
    json_t *driver = json_object();
    json_object_set_new(driver, "name", json_string("scalify"));
    json_object_set_new(driver, "version", str(n ? traces[0]->tool_version : SCALIFY_VERSION));
    json_t *rules = json_array();
    for (int k = 0; k < KIND_COUNT; k++) {
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
        json_object_set_new(r, "shortDescription", text(kind_short[k]));
        json_object_set_new(r, "fullDescription", text(kind_short[k]));
        json_t *cfg = json_object();
        json_object_set_new(cfg, "level", json_string(k == KIND_BUDGET_EXCEEDED || k == KIND_UNSUPPORTED_OP ? "warning" : "error"));
        json_object_set_new(r, "defaultConfiguration", cfg);
        json_t *props = json_object();
        json_t *tags = json_array();
        json_array_append_new(tags, json_string("correctness"));
        json_array_append_new(tags, json_string("distributed"));
        json_object_set_new(props, "tags", tags);
        json_object_set_new(r, "properties", props);
        json_array_append_new(rules, r);
    }
    json_object_set_new(driver, "rules", rules);
    json_t *tool = json_object();
    json_object_set_new(tool, "driver", driver);
    json_object_set_new(run, "tool", tool);
    json_t *results = json_array();
    for (size_t p = 0; p < n; p++) {
        const trace *t = traces[p];
        for (size_t i = 0; i < t->n_findings; i++) {
            const trace_finding *f = &t->findings[i];
            json_t *r = json_object();
            json_object_set_new(r, "ruleId", json_string(trace_kind_name(f->kind)));
            json_object_set_new(r, "ruleIndex", json_integer(f->kind));
            json_object_set_new(r, "level", json_string(level(f->severity)));
            strbuf m;
            sb_init(&m);
            sb_printf(&m, "%s: %s", t->name, f->message);
            json_object_set_new(r, "message", text(m.s));
            sb_free(&m);
            json_t *loc = json_object();
            json_object_set_new(loc, "physicalLocation", physical(&f->dist, t->dist.path));
            json_object_set_new(loc, "logicalLocations", logical(t, &t->dist, &f->dist));
            json_t *locs = json_array();
            json_array_append_new(locs, loc);
            json_object_set_new(r, "locations", locs);
            json_t *rel = json_array();
            if (f->base.present) {
                json_t *bl = json_object();
                json_object_set_new(bl, "id", json_integer(1));
                json_object_set_new(bl, "physicalLocation", physical(&f->base, t->base.path));
                json_object_set_new(bl, "logicalLocations", logical(t, &t->base, &f->base));
                strbuf bm;
                sb_init(&bm);
                sb_printf(&bm, "baseline counterpart %s (%s)", f->base.instruction, f->base.opcode);
                json_object_set_new(bl, "message", text(bm.s));
                sb_free(&bm);
                json_array_append_new(rel, bl);
            }
            json_t *hl = json_object();
            json_object_set_new(hl, "id", json_integer(2));
            json_object_set_new(hl, "physicalLocation", json_pack("{s:o}", "artifactLocation", uri(t->dist.path)));
            json_object_set_new(hl, "message", text("distributed HLO module"));
            json_array_append_new(rel, hl);
            strbuf page;
            sb_init(&page);
            sb_printf(&page, "finding-%s.html", names->finding[p][i]);
            json_t *pl = json_object();
            json_object_set_new(pl, "id", json_integer(3));
            json_object_set_new(pl, "physicalLocation", json_pack("{s:o}", "artifactLocation", uri(page.s)));
            json_object_set_new(pl, "message", text("the finding's page in the scalify report beside this file"));
            json_array_append_new(rel, pl);
            json_object_set_new(r, "relatedLocations", rel);
            strbuf fp;
            sb_init(&fp);
            sb_printf(&fp, "%s/%s/%s", t->name, f->segment ? f->segment : "", f->dist.instruction);
            json_object_set_new(r, "partialFingerprints", json_pack("{s:s}", "scalifyFinding/v1", fp.s));
            sb_free(&fp);
            json_t *props = json_object();
            json_object_set_new(props, "pair", str(t->name));
            json_object_set_new(props, "findingId", str(f->id));
            json_object_set_new(props, "reportPage", str(page.s));
            sb_free(&page);
            if (f->segment) json_object_set_new(props, "segment", str(f->segment));
            json_object_set_new(props, "explanation", str(f->explanation));
            json_object_set_new(r, "properties", props);
            json_array_append_new(results, r);
        }
    }
    json_object_set_new(run, "results", results);
    json_object_set_new(run, "columnKind", json_string("unicodeCodePoints"));
    json_t *runs = json_array();
    json_array_append_new(runs, run);
    json_object_set_new(root, "runs", runs);
    char *s = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    json_decref(root);
    esc_json_harden(out, s, strlen(s));
    sb_putc(out, '\n');
    free(s);
}
