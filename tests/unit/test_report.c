/* report suite: trace reader, site writer, SARIF/JUnit/summary goldens, escaping,
 * schemas, determinism, size limits, CSP, and the browser check.
 *
 * Goldens live in tests/cases/traces/golden/; regenerate them after an intended
 * change with   SCALIFY_UPDATE_GOLDEN=1 build/run-tests report
 * and review the diff. SCALIFY_SKIP_BROWSER=1 skips the (slow) browser check. */
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <png.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include "chart.h"
#include "escape.h"
#include "harness.h"
#include "jschema.h"
#include "report.h"
#include "sha256.h"
#include "trace_read.h"

#define TRACES "tests/cases/traces"
static const char *const fixtures[] = {"verified", "mismatch", "unverified", "escaping"};
#define N_FIX 4

static trace *load(const char *name) {
    char path[256];
    snprintf(path, sizeof path, TRACES "/%s.trace.json", name);
    diag d;
    diag_init(&d, path);
    trace *t = trace_read_file(path, &d);
    CHECK_MSG(t != NULL, "%s: %s", path, d.out.s ? d.out.s : "");
    diag_free(&d);
    return t;
}

static const report_file *find_file(const report_site *s, const char *name) {
    for (size_t i = 0; i < s->n; i++)
        if (strcmp(s->files[i].name, name) == 0) return &s->files[i];
    return NULL;
}

static bool ends_with(const char *s, const char *suf) {
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && strcmp(s + a - b, suf) == 0;
}

static void golden(const report_site *s, const char *file, const char *golden_name) {
    const report_file *f = find_file(s, file);
    CHECK_MSG(f != NULL, "no %s in the site", file);
    if (!f) return;
    char path[256];
    snprintf(path, sizeof path, TRACES "/golden/%s", golden_name);
    if (getenv("SCALIFY_UPDATE_GOLDEN")) {
        FILE *o = fopen(path, "wb");
        CHECK_MSG(o != NULL, "cannot write %s", path);
        if (o) {
            fwrite(f->data.s, 1, f->data.len, o);
            fclose(o);
        }
        return;
    }
    size_t n = 0;
    char *want = t_read(path, &n);
    CHECK_MSG(want != NULL, "missing golden %s (SCALIFY_UPDATE_GOLDEN=1 build/run-tests report)", path);
    if (want) {
        bool same = n == f->data.len && memcmp(want, f->data.s, n) == 0;
        CHECK_MSG(same, "%s differs from %s (review, then SCALIFY_UPDATE_GOLDEN=1 build/run-tests report)", file, path);
    }
    free(want);
}

static int validate_file(const char *schema_path, const char *doc, size_t n, strbuf *errs) {
    json_error_t e;
    json_t *schema = json_load_file(schema_path, 0, &e);
    json_t *d = json_loadb(doc, n, 0, &e);
    if (!schema || !d) {
        sb_printf(errs, "cannot load %s or the document: %s\n", schema_path, e.text);
        json_decref(schema);
        json_decref(d);
        return 1;
    }
    int bad = jschema_validate(schema, d, errs);
    json_decref(schema);
    json_decref(d);
    return bad;
}

/* Checks the page's CSP hashes against its one <style> and one <script>. */
static void check_csp(const char *name, const char *html) {
    const char *st = strstr(html, "<style>"), *se = st ? strstr(st, "</style>") : NULL;
    const char *sc = strstr(html, "<script>"), *sce = sc ? strstr(sc, "</script>") : NULL;
    CHECK_MSG(st && se && sc && sce, "%s: no inline style/script", name);
    if (!(st && se && sc && sce)) return;
    const char *parts[2][2] = {{st + 7, se}, {sc + 8, sce}};
    for (int i = 0; i < 2; i++) {
        uint8_t h[32];
        sha256(parts[i][0], (size_t)(parts[i][1] - parts[i][0]), h);
        strbuf want;
        sb_init(&want);
        sb_puts(&want, i ? "script-src 'sha256-" : "style-src 'sha256-");
        esc_base64(&want, h, 32);
        CHECK_MSG(strstr(html, want.s) != NULL, "%s: CSP lacks %s", name, want.s);
        sb_free(&want);
    }
    const char *second = strstr(sce, "<script");
    CHECK_MSG(second == NULL, "%s: more than one <script>", name);
    CHECK_MSG(strstr(html, " style=\"") == NULL, "%s: a style attribute (blocked by the CSP)", name);
    CHECK_MSG(strstr(html, "default-src 'none'") != NULL, "%s: CSP without default-src 'none'", name);
    static const char *const external[] = {"src=\"http", "href=\"http", "url(http", "@import", "src=\"//",
                                           "href=\"//", "xlink:href=\"http"};
    for (size_t i = 0; i < ARRAY_LEN(external); i++)
        CHECK_MSG(strstr(html, external[i]) == NULL, "%s: external reference %s", name, external[i]);
}

static void test_reader(void) {
    t_case("report-1 fixtures read");
    for (int i = 0; i < N_FIX; i++) {
        trace *t = load(fixtures[i]);
        if (!t) continue;
        CHECK(t->n_segments > 0);
        if (i == 0) {
            CHECK_EQ(t->verdict, VERDICT_VERIFIED);
            CHECK_EQ(t->n_segments, 6);
            CHECK_EQ(t->memo_hits, 2);
            CHECK_STR(t->segments[3].memo_of, "layers.0/attn");
            CHECK_STR(t->mesh[0].axis, "tp");
            CHECK_STR(t->relations[1].value, "shard(0,tp)");
            CHECK(t->setup_ms == 1.25);
        }
        if (i == 1) {
            CHECK_EQ(t->n_findings, 2);
            CHECK(t->findings[0].has_witness && !t->findings[1].has_witness);
            CHECK_EQ(t->findings[0].kind, KIND_WRONG_REDUCTION);
            CHECK_EQ(t->kind_counts[KIND_CONSTANT_MISMATCH], 1);
            CHECK_EQ(t->findings[0].snippets[0].highlight, 112);
        }
        if (i == 2) CHECK_EQ(t->segments[2].stop, STOP_NODE_LIMIT);
        if (i == 3) CHECK(t->findings[0].max_abs != t->findings[0].max_abs); /* "nan" */
        trace_free(t);
    }

    t_case("report-2 bad traces: file: message, exit 2");
    /* json, or the valid fixture with `from` replaced by `to` */
    static const struct {
        const char *name, *json, *expect, *from, *to;
    } bad[] = {
        {"syntax", "{\"scalify_trace\": 1,", "invalid JSON", NULL, NULL},
        {"notrace", "{\"hello\": 1}", "not a scalify trace", NULL, NULL},
        {"version", "{\"scalify_trace\": 2}", "unsupported trace version", NULL, NULL},
        {"missing", "{\"scalify_trace\": 1}", "missing required field \"tool\"", NULL, NULL},
        {"enum", NULL, "verdict: expected one of", "\"verdict\": \"mismatch\"", "\"verdict\": \"maybe\""},
        {"dangling", NULL, "names no node", "\"from\": \"b1\"", "\"from\": \"nope\""},
        {"path", NULL, "path[0]: \"node\" names no node of the subgraph", "\"subgraph\": {",
         "\"path\": [{\"step\": 1, \"node\": \"zz\", \"instruction\": \"dot.1\", \"opcode\": \"dot\"}], \"subgraph\": {"},
    };
    size_t vn = 0;
    char *valid = t_read(TRACES "/mismatch.trace.json", &vn);
    for (size_t i = 0; i < ARRAY_LEN(bad); i++) {
        char path[256], cmd[1024];
        snprintf(path, sizeof path, "build/report-bad-%s.json", bad[i].name);
        FILE *f = fopen(path, "wb");
        if (!f) continue;
        if (bad[i].json) fputs(bad[i].json, f);
        else if (valid) {
            strbuf b;
            sb_init(&b);
            sb_puts(&b, valid);
            char *at = strstr(b.s, bad[i].from);
            if (at) {
                fwrite(b.s, 1, (size_t)(at - b.s), f);
                fputs(bad[i].to, f);
                fputs(at + strlen(bad[i].from), f);
            }
            sb_free(&b);
        }
        fclose(f);
        snprintf(cmd, sizeof cmd, "%s report %s -o build/report-bad-site", t_scalify(), path);
        int st = 0;
        char *out = t_run(cmd, &st);
        t_case("report-2.%zu %s", i + 1, bad[i].name);
        CHECK_EQ(st, 2);
        CHECK_CONTAINS(out, path);
        CHECK_CONTAINS(out, bad[i].expect);
        free(out);
    }
    free(valid);
    t_case("report-2.9 usage");
    int st = 0;
    char *out = t_run("${SCALIFY:-build/scalify} report", &st);
    CHECK_EQ(st, 2);
    CHECK_CONTAINS(out, "usage: scalify report");
    free(out);
}

static void test_site(void) {
    trace *ts[N_FIX];
    for (int i = 0; i < N_FIX; i++) ts[i] = load(fixtures[i]);
    for (int i = 0; i < N_FIX; i++)
        if (!ts[i]) return;
    report_opts o = {.title = "Fixture report", .single_file = false};
    report_site s1, s2;
    diag d;
    diag_init(&d, "report");
    t_case("report-3 render");
    double t0 = now_ms();
    bool ok = report_render(&s1, ts, N_FIX, &o, &d);
    double t1 = now_ms();
    CHECK_MSG(ok, "%s", d.out.s ? d.out.s : "");
    if (!ok) goto out;
    printf("report: rendered %zu files from %d traces in %.1f ms\n", s1.n, N_FIX, t1 - t0);
    CHECK(find_file(&s1, "index.html") != NULL);
    CHECK(find_file(&s1, "pair-tiny.megatron_tp.tp4.html") != NULL);
    CHECK(find_file(&s1, "finding-wrong-reduction-4ef4959205f6.html") != NULL);
    CHECK_EQ(s1.n, 1 + 4 + 5 + 3);
    /* Building outside any segment has a row of its own when the trace says it. */
    const report_file *pv = find_file(&s1, "pair-tiny.megatron_tp.tp4.html");
    CHECK(pv && strstr(pv->data.s, "<td>Setup (no segment)</td><td></td><td></td><td></td><td class=\"num\">1.25"));
    const report_file *pm = find_file(&s1, "pair-tiny.megatron_tp.tp4.bug.pmean-allreduce.html");
    CHECK(pm && !strstr(pm->data.s, "Setup (no segment)"));

    t_case("report-4 golden summary.json, junit.xml, results.sarif");
    golden(&s1, "summary.json", "summary.json");
    golden(&s1, "junit.xml", "junit.xml");
    golden(&s1, "results.sarif", "results.sarif");

    t_case("report-5 determinism");
    ok = report_render(&s2, ts, N_FIX, &o, &d);
    CHECK(ok);
    if (ok) {
        CHECK_EQ(s1.n, s2.n);
        for (size_t i = 0; i < s1.n && i < s2.n; i++) {
            bool same = strcmp(s1.files[i].name, s2.files[i].name) == 0 && s1.files[i].data.len == s2.files[i].data.len &&
                        memcmp(s1.files[i].data.s, s2.files[i].data.s, s1.files[i].data.len) == 0;
            CHECK_MSG(same, "%s differs between two renders", s1.files[i].name);
        }
        report_site_free(&s2);
    }

    t_case("report-6 SARIF against the SARIF 2.1.0 schema");
    const report_file *sarif = find_file(&s1, "results.sarif");
    strbuf errs;
    sb_init(&errs);
    int bad = sarif ? validate_file("tests/sarif/sarif-schema-2.1.0.json", sarif->data.s, sarif->data.len, &errs) : 1;
    CHECK_MSG(bad == 0, "%d violations:\n%s", bad, errs.s ? errs.s : "");
    sb_reset(&errs);
    if (sarif) {
        json_t *j = json_loadb(sarif->data.s, sarif->data.len, 0, NULL);
        json_t *results = json_object_get(json_array_get(json_object_get(j, "runs"), 0), "results");
        CHECK_EQ(json_array_size(results), 5);
        json_t *r0 = json_array_get(results, 0);
        CHECK_STR(json_string_value(json_object_get(r0, "ruleId")), "wrong-reduction");
        CHECK(json_array_size(json_object_get(r0, "relatedLocations")) == 3);
        json_decref(j);
    }
    /* Cross-check with Python's jsonschema when it is installed. */
    int st = 0;
    char *py = t_run("python3 -c 'import jsonschema' 2>/dev/null && echo yes", &st);
    if (py && strstr(py, "yes")) {
        FILE *f = fopen("build/report-test.sarif", "wb");
        if (f && sarif) fwrite(sarif->data.s, 1, sarif->data.len, f);
        if (f) fclose(f);
        char *o2 = t_run("python3 -c 'import json,jsonschema,sys; jsonschema.validate(json.load(open(\"build/report-test.sarif\")),"
                         " json.load(open(\"tests/sarif/sarif-schema-2.1.0.json\"))); print(\"valid\")'", &st);
        CHECK_MSG(st == 0 && strstr(o2, "valid"), "python jsonschema: %s", o2);
        free(o2);
    } else printf("report: python3 jsonschema not available; SARIF checked with the C validator only\n");
    free(py);

    t_case("report-7 traces against docs/trace.schema.json");
    for (int i = 0; i < N_FIX; i++) {
        char path[256];
        snprintf(path, sizeof path, TRACES "/%s.trace.json", fixtures[i]);
        size_t n = 0;
        char *doc = t_read(path, &n);
        sb_reset(&errs);
        bad = doc ? validate_file("docs/trace.schema.json", doc, n, &errs) : 1;
        CHECK_MSG(bad == 0, "%s: %s", path, errs.s ? errs.s : "");
        free(doc);
    }
    {   /* and the schema rejects what the reader rejects */
        json_t *schema = json_load_file("docs/trace.schema.json", 0, NULL);
        json_t *doc = json_load_file(TRACES "/verified.trace.json", 0, NULL);
        json_object_set_new(doc, "verdict", json_string("maybe"));
        sb_reset(&errs);
        CHECK(schema && doc && jschema_validate(schema, doc, &errs) > 0);
        json_decref(schema);
        json_decref(doc);
    }

    t_case("report-8 escaping: no raw trace markup in any output");
    static const char *const hostile[] = {"<script>alert", "<img src=x", "<b>bold", "<b>not bold", "</title><script>",
                                          "</pre></code>", "</td><script>", "<u>le&", "<evil>", "<tp>", "</style>)",
                                          "<collapsed>", "x</text><script>", "--> <!--"};
    for (size_t i = 0; i < s1.n; i++) {
        const report_file *f = &s1.files[i];
        for (size_t h = 0; h < ARRAY_LEN(hostile); h++)
            CHECK_MSG(strstr(f->data.s, hostile[h]) == NULL, "%s contains raw %s", f->name, hostile[h]);
        if (ends_with(f->name, ".html")) {
            size_t scripts = 0;
            for (const char *p = f->data.s; (p = strcasestr(p, "<script")) != NULL; p++) scripts++;
            CHECK_MSG(scripts == 1, "%s: %zu <script> tags", f->name, scripts);
            check_csp(f->name, f->data.s);
        }
        if (ends_with(f->name, ".json") || ends_with(f->name, ".sarif")) {
            json_error_t e;
            json_t *j = json_loadb(f->data.s, f->data.len, 0, &e);
            CHECK_MSG(j != NULL, "%s is not JSON: %s", f->name, e.text);
            json_decref(j);
            CHECK_MSG(strchr(f->data.s, '<') == NULL, "%s has a raw <", f->name);
        }
    }
    const report_file *ef = find_file(&s1, "finding-layout-mismatch-e9438fc299c5.html");
    CHECK(ef != NULL);
    if (ef) {
        CHECK_CONTAINS(ef->data.s, "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;");
        CHECK_CONTAINS(ef->data.s, "<svg");  /* the SVG was drawn, hostile labels and all */
    }
    const report_file *ju = find_file(&s1, "junit.xml");
    if (ju) CHECK_CONTAINS(ju->data.s, "name=\"layer &quot;quoted&quot; &amp; &#39;single&#39;\"");

    t_case("report-9 size limits");
    for (size_t i = 0; i < s1.n; i++)
        CHECK_MSG(s1.files[i].data.len < 5u << 20, "%s is %zu bytes", s1.files[i].name, s1.files[i].data.len);
    {
        report_opts ob = {.title = "Fixture report", .single_file = true};
        report_site sb;
        ok = report_render(&sb, ts, N_FIX, &ob, &d);
        CHECK(ok && sb.n == 1);
        if (ok) {
            CHECK_MSG(sb.files[0].data.len < 10u << 20, "bundle is %zu bytes", sb.files[0].data.len);
            check_csp("bundle", sb.files[0].data.s);
            CHECK_CONTAINS(sb.files[0].data.s, "id=\"finding-wrong-reduction-4ef4959205f6\"");
            CHECK_CONTAINS(sb.files[0].data.s, "href=\"#pair-tiny.megatron_tp.tp4\"");
            CHECK(strstr(sb.files[0].data.s, ".html\"") == NULL);  /* every link is an anchor */
            report_site_free(&sb);
        }
    }
out:
    if (ok) report_site_free(&s1);
    sb_free(&errs);
    diag_free(&d);
    for (int i = 0; i < N_FIX; i++) trace_free(ts[i]);
}

/* A big synthetic trace: many segments, a subgraph past the node cap. */
/* Reads an edited trace document (consumed) as the report would; NULL, with
 * the reason in d, when it does not read. */
static trace *read_doc(json_t *doc, const char *name, diag *d) {
    char *text = json_dumps(doc, 0);
    json_decref(doc);
    diag_init(d, name);
    trace *t = trace_read_buffer(text, strlen(text), name, d);
    free(text);
    CHECK_MSG(t != NULL, "%s", d->out.s ? d->out.s : "");
    return t;
}

/* Reads doc (consumed) and renders it alone into *s, saying how long that
 * took; the trace (caller frees), or NULL when it does not read. */
static trace *render_doc(json_t *doc, const char *name, const char *what, report_site *s, bool *ok, diag *d) {
    trace *t = read_doc(doc, name, d);
    *ok = false;
    if (!t) return NULL;
    report_opts o = {.title = NULL, .single_file = false};
    double t0 = now_ms();
    *ok = report_render(s, &t, 1, &o, d);
    printf("report: %s rendered in %.1f ms\n", what, now_ms() - t0);
    CHECK_MSG(*ok, "%s", d->out.s ? d->out.s : "");
    return t;
}

static void test_big(void) {
    t_case("report-10 large trace: node cap, page sizes");
    json_t *doc = json_load_file(TRACES "/mismatch.trace.json", 0, NULL);
    CHECK(doc != NULL);
    if (!doc) return;
    json_t *segs = json_object_get(doc, "segments");
    json_t *proto = json_deep_copy(json_array_get(segs, 1));
    for (int i = 0; i < 400; i++) {
        json_t *s = json_deep_copy(proto);
        char name[64];
        snprintf(name, sizeof name, "layers.%d/block", i + 2);
        json_object_set_new(s, "name", json_string(name));
        json_array_append_new(segs, s);
    }
    json_decref(proto);
    json_t *sg = json_object_get(json_array_get(json_object_get(doc, "findings"), 0), "subgraph");
    json_t *nodes = json_object_get(sg, "nodes"), *edges = json_object_get(sg, "edges");
    for (int i = 0; i < 300; i++) {
        char id[32], prev[32];
        snprintf(id, sizeof id, "x%d", i);
        snprintf(prev, sizeof prev, i ? "x%d" : "d3", i - 1);
        json_array_append_new(nodes, json_pack("{s:s,s:s,s:s,s:s,s:s,s:i}", "id", id, "side", "distributed", "label",
                                               id, "opcode", "add", "role", "context", "hops", 1 + i % 3));
        json_array_append_new(edges, json_pack("{s:s,s:s}", "from", prev, "to", id));
    }
    diag d;
    report_site s;
    bool ok;
    trace *t = render_doc(doc, "big.json", "large trace (406 segments, 316-node subgraph)", &s, &ok, &d);
    if (t) {
        if (ok) {
            for (size_t i = 0; i < s.n; i++)
                CHECK_MSG(s.files[i].data.len < 5u << 20, "%s is %zu bytes", s.files[i].name, s.files[i].data.len);
            const report_file *f = NULL;
            for (size_t i = 0; i < s.n; i++)
                if (strncmp(s.files[i].name, "finding-wrong-reduction-", 24) == 0) f = &s.files[i];
            CHECK(f != NULL);
            if (f) CHECK_CONTAINS(f->data.s, "not drawn (cap of 40 nodes)");
            report_site_free(&s);
        }
        trace_free(t);
    }
    diag_free(&d);
}

/* A pair whose summary counts more findings than its trace lists says so. */
static void test_listed_findings(void) {
    t_case("report-10b findings counted beyond those listed");
    json_t *doc = json_load_file(TRACES "/mismatch.trace.json", 0, NULL);
    CHECK(doc != NULL);
    if (!doc) return;
    json_object_set_new(json_object_get(json_object_get(doc, "summary"), "findings"), "wrong-reduction", json_integer(40));
    diag d;
    trace *t = read_doc(doc, "listed.json", &d);
    report_opts o = {.title = NULL, .single_file = false};
    report_site s;
    if (t && CHECK(report_render(&s, &t, 1, &o, &d))) {
        const report_file *page = NULL;
        for (size_t i = 0; i < s.n; i++)
            if (strncmp(s.files[i].name, "pair-", 5) == 0) page = &s.files[i];
        CHECK(page != NULL);
        if (page) {
            CHECK_CONTAINS(page->data.s, "41 findings in all, 2 listed");
            CHECK_CONTAINS(page->data.s, "41 <small>(2 listed)</small>");
        }
        report_site_free(&s);
    }
    if (t) trace_free(t);
    diag_free(&d);
}

/* A report written over an earlier one removes the pages only the earlier
 * one produced and nothing else. */
static void test_stale_pages(void) {
    t_case("report-10c re-rendering removes stale pages, keeps other files");
    char cmd[2048];
    int st = 0;
    snprintf(cmd, sizeof cmd,
             "rm -rf build/report-stale && mkdir -p build/report-stale && echo mine > build/report-stale/notes.txt && "
             "%s report " TRACES "/verified.trace.json " TRACES "/mismatch.trace.json -o build/report-stale && "
             "ls build/report-stale | grep -c '^pair-' && ls build/report-stale | grep -c '^finding-' && "
             "%s report " TRACES "/verified.trace.json -o build/report-stale && "
             "ls build/report-stale | grep -c '^pair-'; ls build/report-stale | grep -c '^finding-'; "
             "cat build/report-stale/notes.txt; grep -c . build/report-stale/.scalify-files",
             t_scalify(), t_scalify());
    char *out = t_run(cmd, &st);
    /* 2 pair pages and 2 finding pages, then 1 and 0; notes.txt kept; the list
     * names the 5 files of the second report. */
    CHECK_MSG(out && strcmp(out, "2\n2\n1\n0\nmine\n5\n") == 0, "status %d: %s", st, out ? out : "");
    free(out);
}

static void test_cli_and_browser(void) {
    t_case("report-11 CLI: site + bundle, deterministic bytes");
    char cmd[2048];
    int st = 0;
    snprintf(cmd, sizeof cmd,
             "rm -rf build/report-site-a build/report-site-b && "
             "%s report " TRACES "/verified.trace.json " TRACES "/mismatch.trace.json " TRACES "/unverified.trace.json "
             TRACES "/escaping.trace.json -o build/report-site-a --single-file build/report-bundle.html --title 'Fixture report' && "
             "%s report " TRACES "/verified.trace.json " TRACES "/mismatch.trace.json " TRACES "/unverified.trace.json "
             TRACES "/escaping.trace.json -o build/report-site-b --title 'Fixture report' && "
             "diff -r build/report-site-a build/report-site-b && ls build/report-site-a | grep -c tmp",
             t_scalify(), t_scalify());
    char *out = t_run(cmd, &st);
    CHECK_MSG(st == 1 && strncmp(out, "0", 1) == 0, "status %d: %s", st, out);  /* grep -c found no temp file */
    free(out);
    size_t n = 0;
    char *bundle = t_read("build/report-bundle.html", &n);
    CHECK(bundle && n > 1000 && n < 10u << 20);
    free(bundle);

    t_case("report-12 browser (headless Chromium)");
    if (getenv("SCALIFY_SKIP_BROWSER")) {
        printf("SKIP browser test: SCALIFY_SKIP_BROWSER is set\n");
        return;
    }
    out = t_run("sh tests/browser.sh build/report-site-a build/screenshots && "
                "mkdir -p build/report-bundle && cp build/report-bundle.html build/report-bundle/bundle.html && "
                "sh tests/browser.sh build/report-bundle build/screenshots",
                &st);
    fputs(out, stdout);
    CHECK_MSG(st == 0, "browser check failed: %s", out);
    free(out);
}

/* The timing chart decoded as a browser would: its size is what the axis
 * says; each phase's bar has the phase's colour over its share of the width
 * (the axis maximum at the right edge); beyond the bar the row is clear, or
 * hatched (translucent gray) for a memo hit; the axis line is at the left. */
static void test_chart(void) {
    const double vals[3][CHART_PHASES] = {{2, 1, 0, 0}, {0, 2, 0, 2}, {0.01, 0.02, 0, 0}};
    const bool memo[3] = {false, false, true};
    strbuf png;
    sb_init(&png);
    chart_axis ax;
    diag d;
    diag_init(&d, "chart");
    CHECK(chart_png(&png, vals, memo, 3, &ax, &d));
    diag_free(&d);
    CHECK(ax.max >= 4 && ax.max < 5 && ax.n_ticks >= 2 && ax.ticks[ax.n_ticks - 1] == ax.max);
    png_image img;
    memset(&img, 0, sizeof img);
    img.version = PNG_IMAGE_VERSION;
    CHECK(png_image_begin_read_from_memory(&img, png.s, png.len));
    img.format = PNG_FORMAT_RGBA;
    unsigned char *px = xmalloc(PNG_IMAGE_SIZE(img));
    CHECK(png_image_finish_read(&img, NULL, px, 0, NULL));
    CHECK_EQ((long long)img.width, (long long)ax.width_px);
    CHECK_EQ((long long)img.height, (long long)ax.height_px);
    CHECK_EQ((long long)img.height, 3LL * CHART_ROW_PX);
    int row = CHART_ROW_PX, w = (int)img.width;
#define PX(x, y) (px + ((size_t)(y) * (size_t)w + (size_t)(x)) * 4)
    /* x at fraction f of the plot (as chart.c maps values), in row r's middle */
    int mid[3] = {row / 2, row + row / 2, 2 * row + row / 2};
#define AT(f, r) PX(2 + (int)((f) * (w - 4)), mid[r])
    const double m = ax.max;
    unsigned char *p = AT(1.0 / m, 0); /* inside build (0..2) */
    CHECK(p[0] == chart_phase_rgb[0][0] && p[1] == chart_phase_rgb[0][1] && p[2] == chart_phase_rgb[0][2] && p[3] == 255);
    p = AT(2.5 / m, 0); /* inside lift (2..3) */
    CHECK(p[0] == chart_phase_rgb[1][0] && p[1] == chart_phase_rgb[1][1] && p[3] == 255);
    p = AT(3.0 / m, 1); /* row 1: lift 0..2, check 2..4 */
    CHECK(p[0] == chart_phase_rgb[3][0] && p[1] == chart_phase_rgb[3][1] && p[2] == chart_phase_rgb[3][2]);
    /* Past row 0's bar: clear between grid lines, never hatched (no memo
     * hit); row 2, a memo hit, has a short hatched tab right after its bar
     * (0.03 ms) and is clear beyond it, not a band the width of the plot. */
    int clear = 0, stray = 0, hatch = 0, far = 0;
    int tab_end = 2 + (int)lround(0.03 / m * (w - 4)) + CHART_MEMO_TAB_PX * CHART_SCALE + 1;
    for (int x = (int)(3.2 / m * (w - 4)) + 2; x < w - 4; x++) {
        unsigned char *q = PX(x, mid[0]);
        clear += q[3] == 0;
        stray += q[3] == 90;
    }
    for (int x = 2; x < w - 4; x++) {
        unsigned char *q = PX(x, mid[2]);
        bool h = q[3] == 90 && q[0] == 0x80;
        if (x < tab_end) hatch += h;
        else far += h;
    }
    CHECK_MSG(clear > 0 && hatch > 0 && stray == 0 && far == 0, "clear %d, hatched %d, stray %d, far %d pixels", clear,
              hatch, stray, far);
    CHECK(PX(0, mid[1])[3] == 200); /* the axis line */
#undef AT
#undef PX
    free(px);
    sb_free(&png);
    /* Values no run gives (a hand-edited trace): drawn finite. */
    const double odd[2][CHART_PHASES] = {{1e308, 1e308, INFINITY, -1}, {NAN, 2, 0, 0}};
    sb_init(&png);
    diag_init(&d, "chart");
    CHECK(chart_png(&png, odd, memo, 2, &ax, &d));
    diag_free(&d);
    CHECK_MSG(isfinite(ax.max) && ax.max >= 3e12 && ax.max <= 1e13, "axis max %g", ax.max);
    sb_free(&png);
}


/* A 50,000-segment trace renders: the chart sums consecutive segments into at
 * most CHART_MAX_ROWS bars (a PNG of 50,000 rows of 24 pixels is past
 * libpng's height limit), the timing table keeps them all. */
static void test_huge_chart(void) {
    t_case("report-13 a 50,000-segment trace renders");
    json_t *doc = json_load_file(TRACES "/mismatch.trace.json", 0, NULL);
    if (!CHECK(doc != NULL)) return;
    json_t *segs = json_object_get(doc, "segments");
    json_t *proto = json_deep_copy(json_array_get(segs, 1));
    json_array_clear(segs);
    for (int i = 0; i < 50000; i++) {
        json_t *s = json_deep_copy(proto);
        char name[64];
        snprintf(name, sizeof name, "layers.%d/block", i);
        json_object_set_new(s, "name", json_string(name));
        json_array_append_new(segs, s);
    }
    json_decref(proto);
    diag d;
    report_site s;
    bool ok;
    trace *t = render_doc(doc, "huge.json", "50,000-segment trace", &s, &ok, &d);
    if (t) {
        if (ok) {
            const report_file *page = NULL;
            for (size_t i = 0; i < s.n; i++)
                if (strncmp(s.files[i].name, "pair-", 5) == 0) page = &s.files[i];
            if (CHECK(page != NULL)) {
                CHECK_CONTAINS(page->data.s, "each bar sums 100 consecutive segments (50000 in all)");
                CHECK_CONTAINS(page->data.s, "layers.0/block \xe2\x80\xa6 layers.99/block");
                CHECK_CONTAINS(page->data.s, "layers.49999/block");  /* in the table */
                CHECK_CONTAINS(page->data.s, "img{height:12000px}"); /* 500 bars of 24 CSS px */
            }
            report_site_free(&s);
        }
        trace_free(t);
    }
    diag_free(&d);
}

/* A 200,000-segment trace whose layers after the first are memo hits of it
 * renders, and its pair page folds the run: the first and last 500 rows of each
 * table, the rest counted, the totals over all. */
static void test_memo_fold(void) {
    t_case("report-14 a 200,000-segment trace of memo hits renders folded");
    json_t *doc = json_load_file(TRACES "/mismatch.trace.json", 0, NULL);
    if (!CHECK(doc != NULL)) return;
    json_t *segs = json_object_get(doc, "segments");
    json_t *proto = json_deep_copy(json_array_get(segs, 1));
    json_array_clear(segs);
    enum { N = 200000 };
    for (int i = 0; i < N; i++) {
        json_t *s = json_deep_copy(proto);
        char name[64];
        snprintf(name, sizeof name, "layers.%d/block", i);
        json_object_set_new(s, "name", json_string(name));
        json_object_set_new(s, "memo_hit", json_boolean(i > 0));
        if (i > 0) json_object_set_new(s, "memo_of", json_string("layers.0/block"));
        json_array_append_new(segs, s);
    }
    json_decref(proto);
    diag d;
    report_site s;
    bool ok;
    trace *t = render_doc(doc, "memo.json", "200,000-segment trace of memo hits", &s, &ok, &d);
    if (t) {
        if (ok) {
            const report_file *page = NULL;
            for (size_t i = 0; i < s.n; i++)
                if (strncmp(s.files[i].name, "pair-", 5) == 0) page = &s.files[i];
            if (CHECK(page != NULL)) {
                CHECK_CONTAINS(page->data.s, "199999 consecutive memo hits: layers.1/block \xe2\x80\xa6 layers.199999/block");
                CHECK_CONTAINS(page->data.s, "\xe2\x80\xa6 198999 more memo hits, not listed here");
                CHECK_CONTAINS(page->data.s, ">layers.500/block<");    /* the last listed before the gap */
                CHECK_CONTAINS(page->data.s, ">layers.199500/block<"); /* the first listed after it */
                CHECK(strstr(page->data.s, ">layers.501/block<") == NULL);
                CHECK(strstr(page->data.s, ">layers.100000/block<") == NULL);
                CHECK_CONTAINS(page->data.s, "<td>199999 hits</td>");
                CHECK_MSG(page->data.len < 5u << 20, "the pair page is %zu bytes", page->data.len);
            }
            report_site_free(&s);
        }
        trace_free(t);
    }
    diag_free(&d);
}

/* What check writes into a subgraph beyond the picture's bare structure
 * reaches the picture: a relation link's basis (how check located an
 * unproved counterpart) under its view, a node's own type, an edge that
 * folds a path with its step count. A trace without them (older traces)
 * still reads and draws none of them. */
static void test_subgraph_extras(void) {
    for (int with = 0; with < 2; with++) {
        t_case("report-16 a subgraph %s basis, node type and folded steps", with ? "draws its" : "reads and draws without");
        json_t *doc = json_load_file(TRACES "/mismatch.trace.json", 0, NULL);
        if (!CHECK(doc != NULL)) return;
        json_t *sg = json_object_get(json_array_get(json_object_get(doc, "findings"), 0), "subgraph");
        json_t *l = json_array_get(json_object_get(sg, "links"), 0), *e = json_array_get(json_object_get(sg, "edges"), 0);
        json_t *nd = json_array_get(json_object_get(sg, "nodes"), 0);
        if (!CHECK_MSG(l && e && nd, "the fixture's first finding has a link, an edge and a node")) {
            json_decref(doc);
            return;
        }
        if (with) {
            json_object_set_new(l, "basis", json_string("same source line"));
            json_object_set_new(e, "steps", json_integer(5));
            json_object_set_new(nd, "type", json_string("f16[7,3]"));
        }
        diag d;
        trace *t = read_doc(doc, "extras.json", &d); /* consumes doc */
        report_site s;
        report_opts o = {.title = NULL, .single_file = false};
        if (t && CHECK(report_render(&s, &t, 1, &o, &d))) {
            const report_file *fp = NULL;
            for (size_t i = 0; i < s.n && !fp; i++)
                if (strncmp(s.files[i].name, "finding-", 8) == 0) fp = &s.files[i];
            if (CHECK(fp != NULL)) {
                CHECK_CONTAINS(fp->data.s, "shard(2,tp)");
                const char *want[3] = {"by same source line", ">5 steps</text>", ">f16[7,3]</text>"};
                for (int k = 0; k < 3; k++)
                    CHECK_MSG(!!strstr(fp->data.s, want[k]) == with, "%s %s on the page", want[k],
                              with ? "missing" : "invented");
            }
            report_site_free(&s);
        }
        trace_free(t);
        diag_free(&d);
    }
}

/* Bidi controls and C1 controls in trace strings (an op_name, a segment, a
 * message, the pair name) reach no output raw: HTML, SVG and JUnit show them
 * as "[U+202E]", summary.json and SARIF as \u202e escapes. */
static void test_bidi(void) {
    t_case("report-14 bidi and control characters from a trace are escaped everywhere");
    json_t *doc = json_load_file(TRACES "/mismatch.trace.json", 0, NULL);
    if (!CHECK(doc != NULL)) return;
    /* U+202E RLO, U+2066 LRI, U+200F RLM, U+0085 NEL (C1) */
    const char *evil = "attn\xe2\x80\xae" "dedoc\xe2\x81\xa6x\xe2\x80\x8f\xc2\x85";
    json_object_set_new(json_array_get(json_object_get(doc, "segments"), 0), "name", json_string(evil));
    json_t *pair = json_object_get(doc, "pair");
    if (json_is_object(pair)) json_object_set_new(pair, "name", json_string(evil));
    json_t *f = json_array_get(json_object_get(doc, "findings"), 0);
    json_object_set_new(f, "segment", json_string(evil));
    json_object_set_new(f, "message", json_string(evil));
    json_object_set_new(f, "explanation", json_string(evil));
    json_t *dist = json_object_get(f, "distributed");
    json_object_set_new(dist, "hlo", json_string(evil));
    json_object_set_new(dist, "file", json_string(evil));
    json_object_set_new(dist, "op_name", json_string(evil));
    json_object_set_new(dist, "instruction", json_string(evil));
    json_t *node = json_array_get(json_object_get(json_object_get(f, "subgraph"), "nodes"), 0);
    json_object_set_new(node, "label", json_string(evil));
    diag d;
    trace *t = read_doc(doc, "bidi.json", &d);
    if (!t) return diag_free(&d);
    report_opts o = {.title = NULL, .single_file = false};
    report_site s;
    if (CHECK(report_render(&s, &t, 1, &o, &d))) {
        static const char *const raw[] = {"\xe2\x80\xae", "\xe2\x81\xa6", "\xe2\x80\x8f", "\xc2\x85"};
        for (size_t i = 0; i < s.n; i++)
            for (size_t k = 0; k < 4; k++)
                CHECK_MSG(!memmem(s.files[i].data.s, s.files[i].data.len, raw[k], strlen(raw[k])),
                          "%s holds a raw control (%zu)", s.files[i].name, k);
        const report_file *idx = find_file(&s, "index.html"), *sum = find_file(&s, "summary.json"),
                          *sarif = find_file(&s, "results.sarif"), *junit = find_file(&s, "junit.xml");
        const report_file *fp = NULL;
        for (size_t i = 0; i < s.n; i++)
            if (strncmp(s.files[i].name, "finding-", 8) == 0) fp = &s.files[i];
        if (CHECK(idx && sum && sarif && junit && fp)) {
            CHECK_CONTAINS(idx->data.s, "attn[U+202E]dedoc[U+2066]x[U+200F][U+0085]");
            CHECK_CONTAINS(fp->data.s, "attn[U+202E]dedoc");
            CHECK_CONTAINS(junit->data.s, "attn[U+202E]dedoc[U+2066]x[U+200F][U+0085]");
            CHECK_CONTAINS(sum->data.s, "attn\\u202ededoc\\u2066x\\u200f\\u0085");
            CHECK_CONTAINS(sarif->data.s, "attn\\u202ededoc\\u2066x\\u200f\\u0085");
        }
        report_site_free(&s);
    }
    trace_free(t);
    diag_free(&d);
    t_case("report-14b esc_dangerous is the one judge");
    CHECK(esc_dangerous(0x202e) && esc_dangerous(0x2066) && esc_dangerous(0x2069) && esc_dangerous(0x200e));
    CHECK(esc_dangerous(0x85) && esc_dangerous(0x1b) && esc_dangerous(0x7f) && esc_dangerous(0x202a));
    CHECK(!esc_dangerous('\n') && !esc_dangerous('a') && !esc_dangerous(0xe9) && !esc_dangerous(0x200d));
}

/* Every link of every page in dir names a file that is there, and the files
 * (but the foreign one) are exactly those .scalify-files lists. */
static void check_site_whole(const char *dir, const char *foreign) {
    char cmd[1024];
    int st = 0;
    snprintf(cmd, sizeof cmd,
             "cd %s && bad=0; for f in *.html; do for l in $(grep -o 'href=\"[^\"#]*\\.html' \"$f\" | cut -d'\"' -f2 "
             "| sort -u); do [ -f \"$l\" ] || { echo \"$f links to missing $l\"; bad=1; }; done; done; "
             "ls | grep -v '^%s$' > ../.ls-$$; sort .scalify-files | diff - ../.ls-$$ || bad=1; rm -f ../.ls-$$; "
             "ls -A | grep '^.scalify-new' && bad=1; exit $bad",
             dir, foreign);
    char *out = t_run(cmd, &st);
    CHECK_MSG(st == 0, "%s: %s", dir, out);
    free(out);
}

/* A report that cannot write every file (here: a file size limit, as a full
 * disk would) exits 2 and leaves the previous site as it was. */
static void test_report_full_disk(void) {
    t_case("report-15 a failed write leaves the previous site whole");
    char cmd[2048];
    int st = 0;
    snprintf(cmd, sizeof cmd,
             "rm -rf build/report-full && mkdir -p build/report-full && echo mine > build/report-full/notes.txt && "
             "%s report " TRACES "/verified.trace.json -o build/report-full && cp build/report-full/index.html "
             "build/report-full.index && "
             /* 72 blocks of 512 bytes: index.html (about 22 KB) fits, a finding page (40 KB) does not */
             "(trap '' XFSZ; ulimit -f 72; exec %s report " TRACES "/verified.trace.json " TRACES "/mismatch.trace.json "
             TRACES "/unverified.trace.json " TRACES "/escaping.trace.json -o build/report-full)",
             t_scalify(), t_scalify());
    char *out = t_run(cmd, &st);
    CHECK_MSG(st == 2, "exit %d: %s", st, out);
    CHECK_CONTAINS(out, "File too large");
    free(out);
    out = t_run("cmp build/report-full/index.html build/report-full.index && cat build/report-full/notes.txt", &st);
    CHECK_MSG(st == 0 && strcmp(out, "mine\n") == 0, "index.html replaced: %s", out);
    free(out);
    check_site_whole("build/report-full", "notes.txt");

    t_case("report-15b a dead report's staging folder is removed by the next one");
    out = t_run("mkdir -p build/report-full/.scalify-new-DEADxx && echo x > build/report-full/.scalify-new-DEADxx/index.html", &st);
    free(out);
    snprintf(cmd, sizeof cmd, "%s report " TRACES "/mismatch.trace.json -o build/report-full", t_scalify());
    out = t_run(cmd, &st);
    CHECK_MSG(st == 0, "exit %d: %s", st, out);
    free(out);
    CHECK(access("build/report-full/.scalify-new-DEADxx", F_OK) != 0);
    check_site_whole("build/report-full", "notes.txt");
}

/* Runs cmd through sh without waiting; its pid. */
static pid_t spawn(const char *cmd) {
    pid_t pid = fork();
    if (pid == 0) {
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    return pid;
}

/* Two reports into one folder at once: one waits for the other, and the
 * folder ends up one whole site. The test holds the folder's lock while both
 * start, so they are sure to overlap: neither may change the folder before
 * the lock is free. */
static void test_report_concurrent(void) {
    t_case("report-16 two reports into one folder at once");
    const char *dir = "build/report-conc";
    int st = 0;
    free(t_run("rm -rf build/report-conc && mkdir -p build/report-conc && echo mine > build/report-conc/notes.txt", &st));
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (!CHECK(dfd >= 0 && flock(dfd, LOCK_EX) == 0)) return;
    char a[1024], b[1024];
    snprintf(a, sizeof a, "exec %s report " TRACES "/verified.trace.json " TRACES "/mismatch.trace.json -o %s "
             ">build/report-conc.a 2>&1", t_scalify(), dir);
    snprintf(b, sizeof b, "exec %s report " TRACES "/unverified.trace.json " TRACES "/escaping.trace.json " TRACES
             "/verified.trace.json -o %s >build/report-conc.b 2>&1", t_scalify(), dir);
    pid_t pa = spawn(a), pb = spawn(b);
    /* Until both wait for the lock (in /proc/locks) or have ended, as reports
     * that ignore the lock would; at most 10 s. */
    int exited = 0, sa = -1, sb = -1;
    for (int i = 0; i < 1000; i++) {
        if (sa < 0 && waitpid(pa, &sa, WNOHANG) == pa) exited++;
        if (sb < 0 && waitpid(pb, &sb, WNOHANG) == pb) exited++;
        int waiting = 0;
        FILE *lf = fopen("/proc/locks", "r");
        char line[256];
        while (lf && fgets(line, sizeof line, lf)) {
            int pid = 0;
            const char *arrow = strstr(line, "->");
            if (arrow && sscanf(arrow + 2, " FLOCK %*s %*s %d", &pid) == 1 && (pid == pa || pid == pb)) waiting++;
        }
        if (lf) fclose(lf);
        if (exited == 2 || waiting + exited >= 2) break;
        usleep(10000);
    }
    CHECK_MSG(access("build/report-conc/index.html", F_OK) != 0, "a report wrote into the folder while it was locked");
    flock(dfd, LOCK_UN);
    close(dfd);
    if (sa < 0) waitpid(pa, &sa, 0);
    if (sb < 0) waitpid(pb, &sb, 0);
    CHECK(WIFEXITED(sa) && WEXITSTATUS(sa) == 0 && WIFEXITED(sb) && WEXITSTATUS(sb) == 0);
    check_site_whole(dir, "notes.txt");
    /* And unhindered, a few rounds of the race itself. */
    for (int r = 0; r < 5; r++) {
        pa = spawn(a), pb = spawn(b);
        waitpid(pa, &sa, 0), waitpid(pb, &sb, 0);
        CHECK(WIFEXITED(sa) && WEXITSTATUS(sa) == 0 && WIFEXITED(sb) && WEXITSTATUS(sb) == 0);
        check_site_whole(dir, "notes.txt");
    }
}

void suite_report(void);
void suite_report(void) {
    test_chart();
    test_reader();
    test_site();
    test_big();
    test_listed_findings();
    test_stale_pages();
    test_huge_chart();
    test_memo_fold();
    test_bidi();
    test_subgraph_extras();
    test_report_full_disk();
    test_report_concurrent();
    test_cli_and_browser();
}
