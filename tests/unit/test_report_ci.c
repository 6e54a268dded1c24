/* report_ci suite: the report's outputs as CI, tickets and dashboards read
 * them, over every bundled sample (checked here as `make demo` checks them)
 * and the fixtures of tests/cases/traces:
 *   - junit.xml: a pair's suite fails exactly when `scalify check` exits
 *     non-zero on it, and every finding lands in a testcase of its suite;
 *   - page names: the same finding or pair has the same page in any report
 *     that holds its trace, whatever the other traces; SARIF links the page;
 *   - results.sarif as code scanning documents it: text locations with a
 *     startLine, fingerprints that survive a re-export, rules with help;
 *   - counts: summary.json and the pages count every finding, and say how
 *     many are listed where fewer are;
 *   - the single-file bundle: unique ids, references that resolve, valid
 *     for the Nu Html Checker (tests/vnu.sh, when Java is present);
 *   - reproduce: pair and finding pages show the check command, which run
 *     again gives the same verdict and findings;
 *   - --compare: new, fixed and unchanged findings matched by identity;
 *   - search and stamp: rows findable by kind, file and op_name; every page
 *     says what made it, from what and when;
 *   - pair pages fold runs of memo hits; subgraphs show types and views,
 *     how an unproved counterpart was located, every instruction the
 *     message names, no text over a node; source windows show every line
 *     the message names; axe-core finds no violation (tests/axe.sh). */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "escape.h"
#include "harness.h"
#include "jschema.h"
#include "report.h"
#include "hlo.h"
#include "report_names.h"
#include "trace_read.h"
#include "trace_write.h"
#include "util.h"

#define SAMPLE_TRACES "build/report-ci-traces"

typedef struct {
    trace **t;
    size_t n;
} trace_set;

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static void set_free(trace_set *s) {
    for (size_t i = 0; i < s->n; i++) trace_free(s->t[i]);
    free(s->t);
    memset(s, 0, sizeof *s);
}

static void set_add(trace_set *s, const char *path) {
    diag d;
    diag_init(&d, path);
    trace *t = trace_read_file(path, &d);
    CHECK_MSG(t != NULL, "%s: %s", path, d.out.s ? d.out.s : "");
    diag_free(&d);
    if (!t) return;
    s->t = realloc(s->t, (s->n + 1) * sizeof *s->t);
    s->t[s->n++] = t;
}

/* Every sample pair of samples/manifest.json, checked as make demo checks
 * them, then the fixtures; in name order, so failures read the same. */
static trace_set all_traces(void) {
    trace_set s = {0};
    t_case("report_ci samples checked");
    int st = 0;
    char cmd[512];
    snprintf(cmd, sizeof cmd,
             "rm -rf " SAMPLE_TRACES " && %s check --manifest samples/manifest.json --out-dir " SAMPLE_TRACES
             " --source-root . --witness >/dev/null 2>&1; echo $?",
             t_scalify());
    char *out = t_run(cmd, &st);
    int rc = out ? atoi(out) : -1;
    CHECK_MSG(rc == 0 || rc == 1, "check --manifest exited %d", rc);
    free(out);
    char **files = t_list(SAMPLE_TRACES, ".trace.json");
    size_t n = 0;
    for (size_t i = 0; files && files[i]; i++, n++) {
        set_add(&s, files[i]);
    }
    t_free_list(files);
    CHECK_MSG(n >= 60, "%zu sample traces", n);
    static const char *const fix[] = {"verified", "mismatch", "unverified", "escaping"};
    for (size_t i = 0; i < ARRAY_LEN(fix); i++) {
        char path[256];
        snprintf(path, sizeof path, "tests/cases/traces/%s.trace.json", fix[i]);
        set_add(&s, path);
    }
    return s;
}

static bool render(report_site *site, trace *const *t, size_t n) {
    report_opts o = {.title = "CI report", .single_file = false};
    diag d;
    diag_init(&d, "report");
    bool ok = report_render(site, t, n, &o, &d);
    CHECK_MSG(ok, "%s", d.out.s ? d.out.s : "");
    diag_free(&d);
    return ok;
}

static const report_file *find_file(const report_site *s, const char *name) {
    for (size_t i = 0; i < s->n; i++)
        if (strcmp(s->files[i].name, name) == 0) return &s->files[i];
    return NULL;
}

/* The integer attribute `name` of the element starting at el. */
static long attr_int(const char *el, const char *end, const char *name) {
    char key[64];
    snprintf(key, sizeof key, " %s=\"", name);
    const char *p = strstr(el, key);
    return p && p < end ? strtol(p + strlen(key), NULL, 10) : -1;
}

static void test_junit_faithful(const trace_set *s) {
    report_site site;
    if (!render(&site, s->t, s->n)) return;
    const report_file *j = find_file(&site, "junit.xml");
    t_case("report_ci junit.xml present");
    if (!CHECK(j != NULL)) goto out;
    CHECK(strstr(j->data.s, "<skipped") == NULL);
    size_t failing = 0, fail_findings = 0;
    const char *next = j->data.s;
    for (size_t p = 0; p < s->n; p++) {
        const trace *t = s->t[p];
        t_case("report_ci junit %s (%s): the suite fails exactly when check exits non-zero", t->name,
               trace_verdict_name(t->verdict));
        strbuf key;
        sb_init(&key);
        sb_puts(&key, "<testsuite name=\"");
        esc_html(&key, t->name);
        sb_puts(&key, "\" ");
        /* suites in trace order (a fixture may share a sample's name) */
        const char *a = strstr(next, "<testsuite "), *e = a ? strstr(a, "</testsuite>") : NULL;
        CHECK_MSG(a && strncmp(a, key.s, key.len) == 0, "suite %zu is not this pair's", p);
        sb_free(&key);
        if (e) next = e;
        if (!CHECK_MSG(a && e, "no testsuite")) continue;
        const char *head_end = strchr(a, '>');
        long f = attr_int(a, head_end, "failures"), er = attr_int(a, head_end, "errors");
        long tests = attr_int(a, head_end, "tests");
        /* the counts in the head are those of the body */
        size_t nf = 0, ne = 0, nc = 0;
        for (const char *q = a; (q = strstr(q, "<failure ")) && q < e; q++) nf++;
        for (const char *q = a; (q = strstr(q, "<error ")) && q < e; q++) ne++;
        for (const char *q = a; (q = strstr(q, "<testcase ")) && q < e; q++) nc++;
        CHECK_MSG(f == (long)nf && er == (long)ne && tests == (long)nc, "head says %ld/%ld/%ld, body has %zu/%zu/%zu", tests,
                  f, er, nc, nf, ne);
        bool exit_nonzero = t->verdict != VERDICT_VERIFIED;
        CHECK_MSG((f + er > 0) == exit_nonzero, "failures %ld errors %ld for a %s pair", f, er, trace_verdict_name(t->verdict));
        CHECK_MSG((er > 0) == (t->verdict == VERDICT_ERROR), "errors %ld for a %s pair", er, trace_verdict_name(t->verdict));
        failing += exit_nonzero;
        t_case("report_ci junit %s: every finding lands in a testcase", t->name);
        for (size_t i = 0; i < t->n_findings; i++) {
            strbuf id;
            sb_init(&id);
            esc_html(&id, t->findings[i].id);
            sb_printf(&id, " [%s, ", trace_kind_name(t->findings[i].kind));
            const char *q = strstr(a, id.s);
            sb_free(&id);
            CHECK_MSG(q && q < e, "%s (segment %s) is in no testcase", t->findings[i].id,
                      t->findings[i].segment ? t->findings[i].segment : "none");
            /* inside a failing case of a failing pair */
            if (q && q < e && exit_nonzero) {
                const char *open = NULL;
                for (const char *r = a; (r = strstr(r, "<testcase ")) && r < q; r++) open = r;
                bool in_fail = open && (strstr(open, "<failure ") ? strstr(open, "<failure ") < q : false);
                bool in_err = open && (strstr(open, "<error ") ? strstr(open, "<error ") < q : false);
                CHECK_MSG(in_fail || in_err, "%s is in a passing testcase of a failing pair", t->findings[i].id);
                fail_findings++;
            }
        }
    }
    printf("report_ci: junit.xml over %zu traces: %zu failing suites, %zu findings in failing testcases\n", s->n, failing,
           fail_findings);
out:
    report_site_free(&site);
}

/* The mismatch fixture changed by `edit`, read back. */
static trace *variant(void (*edit)(json_t *)) {
    json_error_t e;
    json_t *j = json_load_file("tests/cases/traces/mismatch.trace.json", 0, &e);
    if (!CHECK_MSG(j != NULL, "%s", e.text)) return NULL;
    if (edit) edit(j);
    char *txt = json_dumps(j, JSON_PRESERVE_ORDER);
    json_decref(j);
    diag d;
    diag_init(&d, "variant");
    trace *t = trace_read_buffer(txt, strlen(txt), "variant", &d);
    CHECK_MSG(t != NULL, "%s", d.out.s ? d.out.s : "");
    diag_free(&d);
    free(txt);
    return t;
}

/* Findings of no segment, or of a segment the trace does not list. */
static void no_segment(json_t *j) {
    json_t *fs = json_object_get(j, "findings");
    json_object_del(json_array_get(fs, 0), "segment");
    json_object_set_new(json_array_get(fs, 1), "segment", json_string("entry"));
    /* and the segments they would have failed in pass */
    json_t *ss = json_object_get(j, "segments");
    for (size_t i = 0; i < json_array_size(ss); i++)
        json_object_set_new(json_array_get(ss, i), "verdict", json_string("verified"));
}

/* An input check refused: no segments, no findings. */
static void refused(json_t *j) {
    json_object_set_new(j, "verdict", json_string("error"));
    json_object_set_new(j, "error", json_string("b.hlo:3:1: expected an instruction"));
    json_object_set_new(j, "segments", json_array());
    json_object_set_new(j, "findings", json_array());
    json_object_set_new(json_object_get(j, "summary"), "findings", json_object());
}

/* Unverified with every segment verified and no finding: the verdict alone. */
static void bare_unverified(json_t *j) {
    json_object_set_new(j, "verdict", json_string("unverified"));
    json_object_set_new(j, "findings", json_array());
    json_object_set_new(json_object_get(j, "summary"), "findings", json_object());
    json_t *ss = json_object_get(j, "segments");
    for (size_t i = 0; i < json_array_size(ss); i++)
        json_object_set_new(json_array_get(ss, i), "verdict", json_string("verified"));
}

static void test_junit_edges(void) {
    struct {
        const char *name;
        void (*edit)(json_t *);
        const char *want[4];
    } cases[] = {
        {"findings of no segment", no_segment,
         {"name=\"(pair)\" time=\"0.0000\">\n      <failure type=\"wrong-reduction\"",
          "name=\"entry\" time=\"0.0000\">\n      <failure type=\"constant-mismatch\"", "failures=\"2\" errors=\"0\""}},
        {"an input error", refused,
         {"tests=\"1\" failures=\"0\" errors=\"1\"", "name=\"(pair)\"",
          "<error type=\"error\" message=\"error: b.hlo:3:1: expected an instruction\""}},
        {"unverified, no finding", bare_unverified,
         {"failures=\"1\" errors=\"0\"",
          "name=\"(pair)\" time=\"0.0000\">\n      <failure type=\"unverified\" message=\"unverified: the pair&#39;s "
          "outputs were not shown equal"}},
    };
    for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
        t_case("report_ci junit: %s", cases[i].name);
        trace *t = variant(cases[i].edit);
        if (!t) continue;
        report_site site;
        if (render(&site, &t, 1)) {
            const report_file *j = find_file(&site, "junit.xml");
            for (int k = 0; j && k < 4 && cases[i].want[k]; k++) CHECK_CONTAINS(j->data.s, cases[i].want[k]);
            report_site_free(&site);
        }
        trace_free(t);
    }
}

/* (pair, finding id) → reportPage of every SARIF result, as "pair\tid\tpage\n". */
static void sarif_pages(const report_site *site, strbuf *out) {
    const report_file *f = find_file(site, "results.sarif");
    if (!CHECK(f != NULL)) return;
    json_t *j = json_loadb(f->data.s, f->data.len, 0, NULL);
    json_t *rs = json_object_get(json_array_get(json_object_get(j, "runs"), 0), "results");
    for (size_t i = 0; i < json_array_size(rs); i++) {
        json_t *pr = json_object_get(json_array_get(rs, i), "properties");
        sb_printf(out, "%s\t%s\t%s\n", json_string_value(json_object_get(pr, "pair")),
                  json_string_value(json_object_get(pr, "findingId")), json_string_value(json_object_get(pr, "reportPage")));
    }
    json_decref(j);
}

/* Page names do not depend on the other traces of a report: every second
 * sample alone, the samples in reverse, and all traces give each common
 * finding and pair the same page; SARIF links each result to its page. */
static void test_stable_names(const trace_set *s) {
    size_t ns = 0;  /* the samples: unique names, before the fixtures */
    while (ns < s->n && strncmp(s->t[ns]->source, SAMPLE_TRACES, strlen(SAMPLE_TRACES)) == 0) ns++;
    trace **sub = calloc(ns + 1, sizeof *sub), **rev = calloc(ns + 1, sizeof *rev);
    size_t nsub = 0;
    for (size_t i = 1; i < ns; i += 2) sub[nsub++] = s->t[i];
    for (size_t i = 0; i < ns; i++) rev[i] = s->t[ns - 1 - i];
    report_site full, part, back;
    bool ok = render(&full, s->t, s->n), okp = render(&part, sub, nsub), okb = render(&back, rev, ns);
    if (ok && okp && okb) {
        t_case("report_ci page names: a finding's page is named the same in any report holding its trace");
        strbuf pf, pp, pb;
        sb_init(&pf), sb_init(&pp), sb_init(&pb);
        sarif_pages(&full, &pf), sarif_pages(&part, &pp), sarif_pages(&back, &pb);
        size_t common = 0;
        for (const char *l = pp.s; l && *l; l = strchr(l, '\n') + 1) {
            size_t len = (size_t)(strchr(l, '\n') - l);
            char *line = strndup(l, len);
            CHECK_MSG(strstr(pf.s, line) != NULL, "%s: not so in the full report", line);
            CHECK_MSG(strstr(pb.s, line) != NULL, "%s: not so with the samples in reverse", line);
            const char *page = strrchr(line, '\t') + 1;
            CHECK_MSG(find_file(&part, page) && find_file(&full, page), "%s: no such page", line);
            common++;
            free(line);
        }
        CHECK_MSG(common >= 20, "%zu findings in common", common);
        printf("report_ci: %zu findings of %zu traces named alike in reports of %zu, %zu and %zu traces\n", common, nsub,
               nsub, ns, s->n);
        t_case("report_ci page names: one page per finding, one per pair, relative links");
        size_t pages = 0, findings = 0;
        for (size_t i = 0; i < full.n; i++) pages += strncmp(full.files[i].name, "finding-", 8) == 0;
        for (size_t i = 0; i < s->n; i++) findings += s->t[i]->n_findings;
        CHECK_MSG(pages == findings, "%zu finding pages for %zu findings", pages, findings);
        size_t pair_pages = 0;
        for (size_t i = 0; i < full.n; i++) pair_pages += strncmp(full.files[i].name, "pair-", 5) == 0;
        CHECK_MSG(pair_pages == s->n, "%zu pair pages for %zu traces", pair_pages, s->n);
        for (size_t i = 0; i < part.n; i++)
            if (strncmp(part.files[i].name, "pair-", 5) == 0)
                CHECK_MSG(find_file(&full, part.files[i].name) != NULL, "%s: not in the full report", part.files[i].name);
        CHECK(strstr(pf.s, "\tfinding-") != NULL && strstr(pf.s, "://") == NULL);
        sb_free(&pf), sb_free(&pp), sb_free(&pb);
    }
    if (ok) report_site_free(&full);
    if (okp) report_site_free(&part);
    if (okb) report_site_free(&back);
    free(sub);
    free(rev);
}

static json_t *sarif_of(const report_site *site) {
    const report_file *f = find_file(site, "results.sarif");
    return f ? json_loadb(f->data.s, f->data.len, 0, NULL) : NULL;
}

static const char *jstr(json_t *o, const char *path) {
    /* path: keys separated by '.', numbers index arrays */
    char buf[256];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *k = strtok(buf, "."); k && o; k = strtok(NULL, "."))
        o = json_is_array(o) ? json_array_get(o, (size_t)atoi(k)) : json_object_get(o, k);
    return json_string_value(o);
}

static json_int_t jint(json_t *o, const char *path) {
    char buf[256];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *k = strtok(buf, "."); k && o; k = strtok(NULL, "."))
        o = json_is_array(o) ? json_array_get(o, (size_t)atoi(k)) : json_object_get(o, k);
    return json_integer_value(o);
}

/* Lines of a text file; -1 when it is missing, compressed or binary. */
static long text_lines(const char *path) {
    size_t n = 0;
    char *b = t_read(path, &n);
    if (!b) return -1;
    long lines = memchr(b, 0, n) || (n >= 2 && (unsigned char)b[0] == 0x1f && (unsigned char)b[1] == 0x8b) ? -1 : 1;
    for (size_t i = 0; lines > 0 && i < n; i++) lines += b[i] == '\n';
    free(b);
    return lines;
}

/* results.sarif as GitHub code scanning documents it, on every sample: a
 * text location with a startLine in a text file for every result (the
 * source line when the trace has one), fingerprints unique and free of
 * instruction names, rules with help and a fullDescription of their own. */
static void test_sarif_scanning(const trace_set *s) {
    report_site site;
    if (!render(&site, s->t, s->n)) return;
    json_t *j = sarif_of(&site);
    t_case("report_ci sarif: valid against the SARIF 2.1.0 schema");
    json_error_t e;
    json_t *schema = json_load_file("tests/sarif/sarif-schema-2.1.0.json", 0, &e);
    if (CHECK(j && schema)) {
        strbuf errs;
        sb_init(&errs);
        int bad = jschema_validate(schema, j, &errs);
        CHECK_MSG(bad == 0, "%d violations:\n%.2000s", bad, errs.s ? errs.s : "");
        sb_free(&errs);
    }
    json_decref(schema);
    json_t *run = json_array_get(json_object_get(j, "runs"), 0);
    json_t *rules = json_object_get(json_object_get(json_object_get(run, "tool"), "driver"), "rules");
    t_case("report_ci sarif: rules carry help from templates/findings and a fullDescription of their own");
    CHECK_EQ(json_array_size(rules), KIND_COUNT);
    for (size_t k = 0; k < json_array_size(rules); k++) {
        json_t *r = json_array_get(rules, k);
        char path[256];
        snprintf(path, sizeof path, "templates/findings/%s.md", jstr(r, "id"));
        char *md = t_read(path, NULL);
        const char *help = jstr(r, "help.markdown"), *full = jstr(r, "fullDescription.text"),
                   *shrt = jstr(r, "shortDescription.text");
        CHECK_MSG(md && help && strcmp(md, help) == 0, "%s: help.markdown is not %s", jstr(r, "id"), path);
        CHECK_MSG(jstr(r, "help.text") && strlen(jstr(r, "help.text")) > 100, "%s: no help.text", jstr(r, "id"));
        CHECK_MSG(full && shrt && strcmp(full, shrt) != 0 && strlen(full) > strlen(shrt), "%s: fullDescription %s",
                  jstr(r, "id"), full ? full : "(none)");
        free(md);
    }
    json_t *results = json_object_get(run, "results");
    size_t findings = 0;
    for (size_t p = 0; p < s->n; p++) findings += s->t[p]->n_findings;
    t_case("report_ci sarif: one result per listed finding");
    CHECK_EQ(json_array_size(results), findings);
    size_t at_source = 0, at_hlo = 0, other = 0, r = 0;
    strbuf seen;
    sb_init(&seen);
    for (size_t p = 0; p < s->n; p++) {
        const trace *t = s->t[p];
        bool sample = strncmp(t->source, SAMPLE_TRACES, strlen(SAMPLE_TRACES)) == 0;
        for (size_t i = 0; i < t->n_findings; i++, r++) {
            const trace_finding *f = &t->findings[i];
            json_t *res = json_array_get(results, r);
            t_case("report_ci sarif %s %s: a text location with a startLine", t->name, f->id);
            CHECK_STR(jstr(res, "properties.findingId"), f->id);
            json_t *pl = json_object_get(json_array_get(json_object_get(res, "locations"), 0), "physicalLocation");
            const char *uri = jstr(pl, "artifactLocation.uri");
            json_int_t line = jint(pl, "region.startLine");
            if (!CHECK_MSG(uri && line >= 1, "uri %s line %lld", uri ? uri : "(none)", (long long)line)) continue;
            size_t ul = strlen(uri);
            CHECK_MSG(!(ul > 3 && strcmp(uri + ul - 3, ".pb") == 0) && !(ul > 3 && strcmp(uri + ul - 3, ".gz") == 0),
                      "%s is not a text file", uri);
            if (f->dist.file && f->dist.line > 0) {
                strbuf u;
                sb_init(&u);
                esc_uri(&u, f->dist.file);
                CHECK_MSG(strcmp(uri, u.s) == 0 && line == f->dist.line, "%s:%lld, not the source line %s:%lld", uri,
                          (long long)line, f->dist.file, (long long)f->dist.line);
                sb_free(&u);
                at_source++;
            } else if (strstr(uri, ".hlo") && ul > 4 && strcmp(uri + ul - 4, ".hlo") == 0) {
                /* the line that defines the instruction */
                size_t n = 0;
                char *b = t_read(uri, &n);
                const char *l = b;
                for (json_int_t k = 1; l && k < line; k++) l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL;
                strbuf def;
                sb_init(&def);
                sb_printf(&def, "%s = ", f->dist.instruction);
                const char *nl = l ? strchr(l, '\n') : NULL;
                const char *hit = l ? strstr(l, def.s) : NULL;
                CHECK_MSG(hit && (!nl || hit < nl), "%s:%lld does not define %s", uri, (long long)line, f->dist.instruction);
                sb_free(&def);
                free(b);
                at_hlo++;
            } else other++;
            if (sample) {
                long lines = text_lines(uri);
                CHECK_MSG(lines >= line, "%s: %ld lines, location at %lld", uri, lines, (long long)line);
            }
            t_case("report_ci sarif %s %s: fingerprints from what survives re-export", t->name, f->id);
            const char *fp = jstr(res, "partialFingerprints.scalifyFinding/v2");
            if (!CHECK(fp && strlen(fp) == 32)) continue;
            CHECK_MSG(!strstr(fp, f->dist.instruction), "fingerprint %s names the instruction", fp);
            CHECK_MSG(!(seen.s && strstr(seen.s, fp)), "fingerprint %s repeats", fp);
            sb_printf(&seen, "%s\n", fp);
        }
    }
    sb_free(&seen);
    printf("report_ci: SARIF over %zu traces: %zu results at the source line, %zu in HLO text, %zu elsewhere\n", s->n,
           at_source, at_hlo, other);
    json_decref(j);
    report_site_free(&site);
}

/* A re-export renumbers XLA's instruction names; the fingerprint and the
 * page stay. A different op_name, source line or mesh changes them. */
static void rename_instructions(json_t *j) {
    json_t *f = json_array_get(json_object_get(j, "findings"), 0);
    json_object_set_new(json_object_get(f, "distributed"), "instruction", json_string("div.9999"));
    json_object_set_new(json_object_get(f, "distributed"), "hlo", json_string("%div.9999 = f32[8]{0} divide(%a.1, %b.2)"));
    json_object_set_new(f, "id", json_string("F7"));
}
static void move_line(json_t *j) {
    json_t *f = json_array_get(json_object_get(j, "findings"), 0);
    json_object_set_new(json_object_get(f, "distributed"), "line", json_integer(113));
}
static void other_mesh(json_t *j) {
    json_object_set_new(json_object_get(j, "pair"), "mesh", json_pack("{s:i}", "model", 4));
}

static void result_keys(trace *t, char fp[64], char page[128]) {
    fp[0] = page[0] = 0;
    report_site site;
    if (!t || !render(&site, &t, 1)) return;
    json_t *j = sarif_of(&site);
    json_t *res = json_array_get(json_object_get(json_array_get(json_object_get(j, "runs"), 0), "results"), 0);
    snprintf(fp, 64, "%s", jstr(res, "partialFingerprints.scalifyFinding/v2") ? jstr(res, "partialFingerprints.scalifyFinding/v2") : "");
    snprintf(page, 128, "%s", jstr(res, "properties.reportPage") ? jstr(res, "properties.reportPage") : "");
    json_decref(j);
    report_site_free(&site);
}

/* No source line and no HLO text: the pair's source file, else the trace. */
static void no_line_no_text(json_t *j) {
    json_t *d = json_object_get(json_array_get(json_object_get(j, "findings"), 0), "distributed");
    json_object_del(d, "file"), json_object_del(d, "line"), json_object_del(d, "column");
    json_object_set_new(json_object_get(json_object_get(j, "pair"), "distributed"), "path",
                        json_string("build/no-such-dir/x.dist.hlo.pb"));
}
static void no_source_at_all(json_t *j) {
    no_line_no_text(j);
    json_t *fs = json_object_get(j, "findings");
    for (size_t i = 0; i < json_array_size(fs); i++) {
        json_t *f = json_array_get(fs, i);
        json_object_del(json_object_get(f, "distributed"), "file");
        json_object_set_new(f, "baseline", json_null());
        json_object_set_new(f, "involved", json_array());
    }
}

static void test_sarif_fallbacks(void) {
    struct {
        const char *what;
        void (*edit)(json_t *);
        const char *uri;
    } cases[] = {{"no source line, no HLO text: the pair's source file", no_line_no_text, "samples/gen/parallel.py"},
                 {"no source file known: the trace", no_source_at_all, "variant"}};
    for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
        t_case("report_ci sarif location: %s", cases[i].what);
        trace *t = variant(cases[i].edit);
        report_site site;
        if (t && render(&site, &t, 1)) {
            json_t *j = sarif_of(&site);
            json_t *pl = json_object_get(json_array_get(json_object_get(j, "runs"), 0), "results");
            pl = json_object_get(json_array_get(json_object_get(json_array_get(pl, 0), "locations"), 0), "physicalLocation");
            CHECK_STR(jstr(pl, "artifactLocation.uri"), cases[i].uri);
            CHECK(jint(pl, "region.startLine") >= 1);
            json_decref(j);
            report_site_free(&site);
        }
        trace_free(t);
    }
}

static void test_fingerprint_reexport(void) {
    char fp0[64], pg0[128], fp[64], pg[128];
    trace *t = variant(NULL);
    result_keys(t, fp0, pg0);
    trace_free(t);
    struct {
        const char *what;
        void (*edit)(json_t *);
        bool same;
    } cases[] = {{"instruction renumbered, id changed", rename_instructions, true},
                 {"source line moved", move_line, false},
                 {"another mesh axis", other_mesh, false}};
    for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
        t_case("report_ci fingerprint and page: %s", cases[i].what);
        t = variant(cases[i].edit);
        result_keys(t, fp, pg);
        trace_free(t);
        CHECK_MSG(fp0[0] && fp[0] && (strcmp(fp0, fp) == 0) == cases[i].same, "%s vs %s", fp0, fp);
        CHECK_MSG(pg0[0] && pg[0] && (strcmp(pg0, pg) == 0) == cases[i].same, "%s vs %s", pg0, pg);
    }
}

/* Counts: summary.json and every page that shows a count give the trace's
 * counts (all findings), and the number listed where it is smaller. */
static void test_counts(const trace_set *s) {
    report_site site;
    if (!render(&site, s->t, s->n)) return;
    long long total = 0, listed = 0, kind_total[KIND_COUNT] = {0};
    for (size_t p = 0; p < s->n; p++) {
        listed += (long long)s->t[p]->n_findings;
        for (int k = 0; k < KIND_COUNT; k++) total += s->t[p]->kind_counts[k], kind_total[k] += s->t[p]->kind_counts[k];
    }
    t_case("report_ci counts: summary.json totals count every finding (%lld, %lld listed)", total, listed);
    const report_file *sum = find_file(&site, "summary.json");
    json_t *j = sum ? json_loadb(sum->data.s, sum->data.len, 0, NULL) : NULL;
    if (CHECK(j != NULL)) {
        CHECK_EQ(jint(j, "totals.findings"), total);
        CHECK_EQ(jint(j, "totals.findings_listed"), listed);
        for (int k = 0; k < KIND_COUNT; k++) {
            json_t *v = json_object_get(json_object_get(j, "findings_by_kind"), trace_kind_name((trace_kind)k));
            CHECK_MSG(json_integer_value(v) == kind_total[k], "%s: %lld, the traces count %lld",
                      trace_kind_name((trace_kind)k), (long long)json_integer_value(v), kind_total[k]);
        }
        json_t *pairs = json_object_get(j, "pairs");
        for (size_t p = 0; p < s->n; p++) {
            long long pt = 0;
            for (int k = 0; k < KIND_COUNT; k++) pt += s->t[p]->kind_counts[k];
            json_t *pj = json_array_get(pairs, p);
            CHECK_MSG(json_integer_value(json_object_get(pj, "findings")) == pt &&
                          json_integer_value(json_object_get(pj, "findings_listed")) == (long long)s->t[p]->n_findings,
                      "%s: findings %lld listed %lld", s->t[p]->name, (long long)json_integer_value(json_object_get(pj, "findings")),
                      (long long)json_integer_value(json_object_get(pj, "findings_listed")));
        }
    }
    json_decref(j);
    const report_file *sf = find_file(&site, "results.sarif");
    j = sf ? json_loadb(sf->data.s, sf->data.len, 0, NULL) : NULL;
    CHECK_MSG(jint(j, "runs.0.properties.findings") == total && jint(j, "runs.0.properties.findingsListed") == listed,
              "results.sarif run properties: %lld, %lld listed", (long long)jint(j, "runs.0.properties.findings"),
              (long long)jint(j, "runs.0.properties.findingsListed"));
    json_decref(j);
    CHECK_MSG(total > listed, "the samples list all %lld findings: nothing to test", total);
    char want[128];
    t_case("report_ci counts: index.html shows %lld findings, %lld listed", total, listed);
    const report_file *idx = find_file(&site, "index.html");
    snprintf(want, sizeof want, "%lld <small>(%lld listed)</small>", total, listed);
    if (CHECK(idx)) CHECK_CONTAINS(idx->data.s, want);
    size_t pages = 0;
    for (size_t p = 0; p < s->n; p++) {
        const trace *t = s->t[p];
        long long pt = 0, kl[KIND_COUNT] = {0};
        for (size_t i = 0; i < t->n_findings; i++) kl[t->findings[i].kind]++;
        for (int k = 0; k < KIND_COUNT; k++) pt += t->kind_counts[k];
        if (pt == (long long)t->n_findings) continue;
        t_case("report_ci counts: %s shows %lld findings, %zu listed, on its pages", t->name, pt, t->n_findings);
        snprintf(want, sizeof want, "<td class=\"num\" data-v=\"%lld\">%lld <small>(%zu listed)</small></td>", pt, pt,
                 t->n_findings);
        CHECK_CONTAINS(idx->data.s, want);
        /* the pair page: the card */
        for (size_t i = 0; i < site.n; i++) {
            const char *d = site.files[i].data.s;
            bool mine = strncmp(site.files[i].name, "pair-", 5) == 0 && strstr(d, "<title>") &&
                        strstr(d, t->name) && strstr(d, t->source);
            if (!mine) continue;
            snprintf(want, sizeof want, "%lld <small>(%zu listed)</small>", pt, t->n_findings);
            CHECK_CONTAINS(d, want);
            pages++;
        }
        /* each finding page whose kind is counted beyond those listed */
        for (size_t i = 0; i < t->n_findings; i++) {
            trace_kind k = t->findings[i].kind;
            if (t->kind_counts[k] == kl[k]) continue;
            for (size_t q = 0; q < site.n; q++) {
                const char *d = site.files[q].data.s;
                if (strncmp(site.files[q].name, "finding-", 8) != 0 || !strstr(d, t->name)) continue;
                strbuf id;
                sb_init(&id);
                sb_printf(&id, "<h1>%s \xc2\xb7 ", t->findings[i].id);
                bool mine = strstr(d, id.s) && strstr(d, t->findings[i].message);
                sb_free(&id);
                if (!mine) continue;
                snprintf(want, sizeof want, "one of %lld %s findings in this pair, %lld listed", (long long)t->kind_counts[k],
                         trace_kind_name(k), kl[k]);
                CHECK_CONTAINS(d, want);
                pages++;
            }
        }
    }
    printf("report_ci: counts checked on summary.json, index.html and %zu pair and finding pages\n", pages);
    report_site_free(&site);
}

/* The id="…" values of html and whether `v` (n bytes) is one of them. */
static bool has_id(const char *html, const char *v, size_t n) {
    strbuf k;
    sb_init(&k);
    sb_puts(&k, " id=\"");
    sb_put(&k, v, n);
    sb_putc(&k, '"');
    bool yes = strstr(html, k.s) != NULL;
    sb_free(&k);
    return yes;
}

/* The single-file bundle: every id once (sections stack pages whose headings
 * and Graphviz ids repeat), every in-document reference resolves, and the
 * Nu Html Checker finds no error (when Java is present). */
static void test_bundle(const trace_set *s) {
    /* the pairs that fail (the pages with subgraphs), and the fixtures */
    trace **sub = calloc(s->n + 1, sizeof *sub);
    size_t n = 0;
    for (size_t i = 0; i < s->n; i++)
        if (s->t[i]->verdict != VERDICT_VERIFIED || strncmp(s->t[i]->source, SAMPLE_TRACES, strlen(SAMPLE_TRACES)) != 0)
            sub[n++] = s->t[i];
    report_opts o = {.title = "CI bundle", .single_file = true};
    report_site site;
    diag d;
    diag_init(&d, "bundle");
    bool ok = report_render(&site, sub, n, &o, &d);
    t_case("report_ci bundle of %zu traces renders", n);
    CHECK_MSG(ok && site.n == 1, "%s", d.out.s ? d.out.s : "");
    diag_free(&d);
    free(sub);
    if (!ok) return;
    const char *html = site.files[0].data.s;
    t_case("report_ci bundle: every id once");
    size_t ids = 0, dups = 0, refs = 0, dangling = 0;
    /* ids sorted, then neighbours compared */
    char **v = NULL;
    size_t cap = 0;
    for (const char *p = html; (p = strstr(p, " id=\"")); p++) {
        const char *a = p + 5, *e = strchr(a, '"');
        XGROW(v, cap, ids + 1);
        v[ids++] = strndup(a, (size_t)(e - a));
    }
    if (ids) qsort(v, ids, sizeof *v, cmp_str);
    for (size_t i = 1; i < ids; i++)
        if (strcmp(v[i], v[i - 1]) == 0) {
            if (dups++ < 5) CHECK_MSG(false, "id \"%s\" repeats", v[i]);
        }
    for (size_t i = 0; i < ids; i++) free(v[i]);
    free(v);
    CHECK_MSG(dups == 0, "%zu repeated ids among %zu", dups, ids);
    t_case("report_ci bundle: every in-document link and data-for names an id");
    static const char *const ref[] = {"href=\"#", "data-for=\""};
    for (size_t r = 0; r < ARRAY_LEN(ref); r++)
        for (const char *p = html; (p = strstr(p, ref[r])); p++) {
            const char *a = p + strlen(ref[r]), *e = strchr(a, '"');
            refs++;
            if (!has_id(html, a, (size_t)(e - a)) && dangling++ < 5)
                CHECK_MSG(false, "%.*s names no element", (int)(e - a), a);
        }
    CHECK_MSG(dangling == 0, "%zu of %zu references dangle", dangling, refs);
    printf("report_ci: bundle of %zu traces: %zu ids, %zu in-document references\n", n, ids, refs);
    t_case("report_ci bundle and pages: Nu Html Checker");
    FILE *f = fopen("build/report-ci-bundle.html", "wb");
    if (CHECK(f != NULL)) {
        fwrite(html, 1, site.files[0].data.len, f);
        fclose(f);
        int st = 0;
        char *out = t_run("sh tests/vnu.sh build/report-ci-bundle.html 2>&1", &st);
        printf("report_ci: %s", out ? out : "");
        CHECK_MSG(st == 0, "%s", out ? out : "");
        free(out);
    }
    report_site_free(&site);
}

/* The text of the first <div class="cmd"><pre><code>…</code> of html, with
 * the entities esc_html writes undone; NULL when there is none. */
static char *page_command(const char *html) {
    const char *a = strstr(html, "<div class=\"cmd\"><pre><code>"), *e = a ? strstr(a, "</code>") : NULL;
    if (!e) return NULL;
    a += strlen("<div class=\"cmd\"><pre><code>");
    static const char *const ent[][2] = {{"&amp;", "&"}, {"&lt;", "<"}, {"&gt;", ">"}, {"&quot;", "\""}, {"&#39;", "'"}};
    strbuf b;
    sb_init(&b);
    for (const char *p = a; p < e;) {
        size_t k = 0;
        while (k < ARRAY_LEN(ent) && strncmp(p, ent[k][0], strlen(ent[k][0])) != 0) k++;
        if (k < ARRAY_LEN(ent)) sb_puts(&b, ent[k][1]), p += strlen(ent[k][0]);
        else sb_putc(&b, *p++);
    }
    return sb_take(&b);
}

/* Every pair and finding page shows the command that checked its pair; run
 * as shown (for the pairs that fail), it gives the same verdict and the
 * same findings. A trace that does not record its command says so. */
static void test_reproduce(const trace_set *s) {
    report_site site;
    if (!render(&site, s->t, s->n)) return;
    rnames names;
    rn_build(&names, s->t, s->n);
    size_t pages = 0, rerun = 0;
    for (size_t p = 0; p < s->n; p++) {
        const trace *t = s->t[p];
        bool sample = strncmp(t->source, SAMPLE_TRACES, strlen(SAMPLE_TRACES)) == 0;
        t_case("report_ci reproduce %s: the command on its pair and finding pages", t->name);
        char file[512];
        snprintf(file, sizeof file, "pair-%s.html", names.pair[p]);
        const report_file *pf = find_file(&site, file);
        if (!CHECK_MSG(pf != NULL, "no %s", file)) continue;
        char *cmd = page_command(pf->data.s);
        if (!CHECK_MSG(cmd != NULL, "%s: no command", file)) continue;
        CHECK_MSG(strncmp(cmd, "scalify check --baseline ", 25) == 0, "%s", cmd);
        CHECK_MSG(!sample || t->n_command, "a sample trace without its command");
        if (!t->n_command) CHECK_CONTAINS(pf->data.s, "this trace does not record its command");
        pages++;
        for (size_t i = 0; i < t->n_findings; i++) {
            snprintf(file, sizeof file, "finding-%s.html", names.finding[p][i]);
            const report_file *ff = find_file(&site, file);
            char *fc = ff ? page_command(ff->data.s) : NULL;
            CHECK_MSG(fc && strcmp(fc, cmd) == 0, "%s: %s", file, fc ? fc : "no command");
            free(fc);
            pages++;
        }
        if (sample && t->verdict != VERDICT_VERIFIED) {
            t_case("report_ci reproduce %s: the command gives the verdict and findings again", t->name);
            strbuf sh;
            sb_init(&sh);
            sb_printf(&sh, "%s%s -o build/report-ci-rerun.json >/dev/null 2>&1; echo $?", t_scalify(), cmd + strlen("scalify"));
            int st = 0;
            char *out = t_run(sh.s, &st);
            int rc = out ? atoi(out) : -1;
            free(out);
            sb_free(&sh);
            CHECK_MSG(rc == (t->verdict == VERDICT_ERROR ? 2 : 1), "exit %d for a %s pair", rc, trace_verdict_name(t->verdict));
            json_t *a = json_load_file(t->source, 0, NULL), *b = json_load_file("build/report-ci-rerun.json", 0, NULL);
            CHECK_MSG(a && b && json_equal(json_object_get(a, "findings"), json_object_get(b, "findings")),
                      "the findings differ");
            CHECK_MSG(a && b && json_equal(json_object_get(a, "pair"), json_object_get(b, "pair")), "the pair differs");
            json_decref(a);
            json_decref(b);
            rerun++;
        }
        free(cmd);
    }
    printf("report_ci: the check command on %zu pages; %zu failing pairs checked again from it, same findings\n", pages,
           rerun);
    rn_free(&names);
    report_site_free(&site);
}

/* The later run of the mismatch fixture: F1 renumbered (same identity), F2
 * gone, a new finding; the verdict unchanged. */
static void later_run(json_t *j) {
    rename_instructions(j);
    json_t *fs = json_object_get(j, "findings");
    json_t *f2 = json_deep_copy(json_array_get(fs, 1));
    json_object_set_new(f2, "id", json_string("F9"));
    json_object_set_new(f2, "kind", json_string("missing-all-reduce"));
    json_object_set_new(json_object_get(f2, "distributed"), "op_name", json_string("layers.1/mlp/add"));
    json_array_remove(fs, 1);
    json_array_append_new(fs, f2);
    json_t *counts = json_object_get(json_object_get(j, "summary"), "findings");
    json_object_del(counts, "constant-mismatch");
    json_object_set_new(counts, "missing-all-reduce", json_integer(1));
}

/* --compare: the same traces compare all unchanged; a later run marks the
 * finding that appeared, the one that went and the one renumbered; pairs
 * that came and went are named. */
static void test_compare(const trace_set *s) {
    size_t ns = 0;
    while (ns < s->n && strncmp(s->t[ns]->source, SAMPLE_TRACES, strlen(SAMPLE_TRACES)) == 0) ns++;
    report_site before, now;
    t_case("report_ci compare: a report against itself");
    if (!render(&before, s->t, ns)) return;
    const report_file *sum = find_file(&before, "summary.json");
    report_opts o = {.title = "CI", .compare_text = sum->data.s, .compare_len = sum->data.len, .compare_label = "before"};
    diag d;
    diag_init(&d, "compare");
    if (CHECK(report_render(&now, s->t, ns, &o, &d))) {
        const report_file *cj = find_file(&now, "compare.json");
        json_t *j = cj ? json_loadb(cj->data.s, cj->data.len, 0, NULL) : NULL;
        size_t listed = 0;
        for (size_t i = 0; i < ns; i++) listed += s->t[i]->n_findings;
        CHECK(j && jint(j, "totals.new") == 0 && jint(j, "totals.fixed") == 0 && jint(j, "totals.unchanged") == (json_int_t)listed &&
              jint(j, "totals.verdicts_changed") == 0);
        CHECK(find_file(&now, "compare.html") != NULL);
        json_decref(j);
        report_site_free(&now);
    }
    report_site_free(&before);
    t_case("report_ci compare: new, fixed and unchanged findings, pairs new and gone");
    trace *old_t[3] = {variant(NULL), s->t[0], s->t[1]};
    trace *new_t[3] = {variant(later_run), s->t[1], s->t[2]};
    if (old_t[0] && new_t[0] && render(&before, old_t, 3)) {
        sum = find_file(&before, "summary.json");
        o.compare_text = sum->data.s, o.compare_len = sum->data.len;
        if (CHECK(report_render(&now, new_t, 3, &o, &d))) {
            const report_file *cj = find_file(&now, "compare.json"), *ch = find_file(&now, "compare.html");
            json_t *j = cj ? json_loadb(cj->data.s, cj->data.len, 0, NULL) : NULL;
            CHECK_MSG(j && jint(j, "totals.new") == 1 && jint(j, "totals.fixed") == 1 && jint(j, "totals.unchanged") == 1 &&
                          jint(j, "totals.pairs_new") == 1 && jint(j, "totals.pairs_gone") == 1,
                      "%.600s", cj ? cj->data.s : "");
            CHECK_STR(jstr(j, "pairs.0.findings.fixed.0.id"), "F2");
            CHECK_STR(jstr(j, "pairs.0.status"), "both");
            CHECK_STR(jstr(j, "pairs.2.status"), "new");
            CHECK_STR(jstr(j, "pairs.3.status"), "gone");
            const char *page = jstr(j, "pairs.0.findings.new_pages.0");
            CHECK(page && find_file(&now, page) != NULL && ch && strstr(ch->data.s, page));
            if (ch) CHECK_CONTAINS(ch->data.s, "constant 4 (%constant.52.clone");  /* the fixed one, by its message */
            const report_file *idx = find_file(&now, "index.html");
            if (idx) CHECK_CONTAINS(idx->data.s, "1 new, 1 fixed and 1 unchanged findings");
            json_decref(j);
            report_site_free(&now);
        }
        report_site_free(&before);
    }
    trace_free(old_t[0]);
    trace_free(new_t[0]);
    t_case("report_ci compare: what is not a summary.json is refused");
    o.compare_text = "{\"pairs\": []}", o.compare_len = strlen(o.compare_text);
    CHECK(!report_render(&now, s->t, 1, &o, &d));
    CHECK_CONTAINS(d.out.s, "not a scalify summary.json");
    diag_free(&d);
}

/* The index filters pairs and findings by kind, file and op_name (the
 * script matches a row's text and its data-search); every page says what
 * the report was made from and when. */
static void test_search_and_stamp(const trace_set *s) {
    setenv("SOURCE_DATE_EPOCH", "1764806400", 1);
    report_site site;
    bool ok = render(&site, s->t, s->n);
    unsetenv("SOURCE_DATE_EPOCH");
    if (!ok) return;
    rnames names;
    rn_build(&names, s->t, s->n);
    const report_file *idx = find_file(&site, "index.html");
    if (!CHECK(idx != NULL)) goto out;
    t_case("report_ci search: a pair's row can be found by its findings' kinds, files and op_names");
    size_t rows = 0;
    for (size_t p = 0; p < s->n; p++) {
        const trace *t = s->t[p];
        strbuf k;
        sb_init(&k);
        sb_printf(&k, "><td class=\"name\"><a href=\"pair-%s.html\">", names.pair[p]);
        const char *at = strstr(idx->data.s, k.s);
        sb_free(&k);
        if (!CHECK_MSG(at != NULL, "%s: no row", t->name)) continue;
        const char *row = at;
        while (row > idx->data.s && strncmp(row, "<tr ", 4) != 0) row--;
        const char *ds = strstr(row, "data-search=\""), *de = ds ? strchr(ds + 13, '"') : NULL;
        if (!CHECK_MSG(ds && ds < at && de, "%s: no data-search", t->name)) continue;
        char *terms = strndup(ds + 13, (size_t)(de - ds - 13));
        for (size_t i = 0; i < t->n_findings; i++) {
            const trace_finding *f = &t->findings[i];
            CHECK_MSG(strstr(terms, trace_kind_name(f->kind)) != NULL, "%s: %s not searchable", t->name, trace_kind_name(f->kind));
            strbuf e;
            sb_init(&e);
            if (f->dist.file) esc_html(&e, f->dist.file);
            if (e.len) CHECK_MSG(strstr(terms, e.s) != NULL, "%s: %s not searchable", t->name, e.s);
            sb_reset(&e);
            if (f->dist.op_name) esc_html(&e, f->dist.op_name);
            if (e.len) CHECK_MSG(strstr(terms, e.s) != NULL, "%s: %s not searchable", t->name, e.s);
            sb_free(&e);
        }
        free(terms);
        rows++;
    }
    t_case("report_ci search: a findings table with every listed finding, and a filter");
    const char *ft = strstr(idx->data.s, "<table id=\"findings-table\""), *fe = ft ? strstr(ft, "</table>") : NULL;
    size_t listed = 0, frows = 0;
    for (size_t p = 0; p < s->n; p++) listed += s->t[p]->n_findings;
    for (const char *q = ft; q && (q = strstr(q, "<tr data-search=")) && q < fe; q++) frows++;
    CHECK_MSG(frows == listed, "%zu rows for %zu findings", frows, listed);
    CHECK_CONTAINS(idx->data.s, "data-for=\"findings-table\"");
    t_case("report_ci stamp: every page says what made it, from what and when");
    for (size_t i = 0; i < site.n; i++) {
        if (!strstr(site.files[i].name, ".html")) continue;
        const char *foot = strstr(site.files[i].data.s, "<footer>");
        CHECK_MSG(foot && strstr(foot, "Generated by scalify ") && strstr(foot, "checked up to 2025-12-04 00:00 UTC") &&
                      strstr(foot, "(traces sha256:"),
                  "%s: %.200s", site.files[i].name, foot ? foot : "no footer");
    }
    for (size_t p = 0; p < s->n; p++)
        CHECK_MSG(strstr(idx->data.s, s->t[p]->source_sha256) != NULL, "%s: its digest is not on the index", s->t[p]->source);
    printf("report_ci: %zu pair rows and %zu finding rows searchable by kind, file and op_name\n", rows, frows);
out:
    rn_free(&names);
    report_site_free(&site);
}

/* A pair page folds each run of 3 or more consecutive memo hits into one
 * row of each table (a <details> holding their rows): every segment is
 * still on the page, the table shows a row per run. */
static void test_fold(const trace_set *s) {
    report_site site;
    if (!render(&site, s->t, s->n)) return;
    rnames names;
    rn_build(&names, s->t, s->n);
    size_t folded_pairs = 0;
    for (size_t p = 0; p < s->n; p++) {
        const trace *t = s->t[p];
        size_t runs = 0, in_runs = 0;
        for (size_t i = 0; i < t->n_segments;) {
            size_t j = i;
            while (j < t->n_segments && t->segments[j].memo_hit) j++;
            if (j - i >= 3) runs++, in_runs += j - i;
            i = j > i ? j : i + 1;
        }
        char file[512];
        snprintf(file, sizeof file, "pair-%s.html", names.pair[p]);
        const report_file *f = find_file(&site, file);
        if (!f) continue;
        size_t folds = 0;
        for (const char *q = f->data.s; (q = strstr(q, "<tr class=\"fold\">")); q++) folds++;
        if (!runs && !folds) continue;
        t_case("report_ci fold %s: %zu runs of memo hits (%zu segments) folded in both tables", t->name, runs, in_runs);
        CHECK_EQ(folds, 2 * runs);
        if (runs) CHECK_CONTAINS(f->data.s, "a run of 3 or more memo hits is one bar");
        /* the chart: one row label per bar, a run's label spans it */
        size_t bars = 0;
        const char *rows = strstr(f->data.s, "<div class=\"rows\""), *re = rows ? strstr(rows, "</div></div>") : NULL;
        for (const char *q = rows ? rows + 5 : NULL; q && (q = strstr(q, "<div>")) && q < re; q++) bars++;
        CHECK_MSG(bars == t->n_segments - in_runs + runs, "%zu bars for %zu segments in %zu runs", bars, t->n_segments, runs);
        for (size_t i = 0; i < t->n_segments; i++) {
            strbuf k;
            sb_init(&k);
            sb_puts(&k, "<td class=\"seg\">");
            esc_html(&k, t->segments[i].name);
            sb_puts(&k, "</td>");
            CHECK_MSG(strstr(f->data.s, k.s) != NULL, "segment %s is not on the page", t->segments[i].name);
            sb_free(&k);
        }
        folded_pairs++;
    }
    t_case("report_ci fold: some sample folds");
    CHECK_MSG(folded_pairs >= 5, "%zu pairs fold", folded_pairs);
    printf("report_ci: %zu pair pages fold their runs of memo hits\n", folded_pairs);
    rn_free(&names);
    report_site_free(&site);
}

typedef struct { double x0, y0, x1, y1; } box;

/* The bounding box of the numbers in an SVG path's d or a polygon's points
 * (pairs x,y) from p to the closing quote. */
static box coords_box(const char *p) {
    box b = {1e30, 1e30, -1e30, -1e30};
    const char *end = strchr(p, '"');
    int k = 0;
    while (p < end) {
        if ((*p >= '0' && *p <= '9') || *p == '-' || *p == '.') {
            char *q;
            double v = strtod(p, &q);
            if (q == p) {
                p++;
                continue;
            }
            if (k % 2 == 0) b.x0 = v < b.x0 ? v : b.x0, b.x1 = v > b.x1 ? v : b.x1;
            else b.y0 = v < b.y0 ? v : b.y0, b.y1 = v > b.y1 ? v : b.y1;
            k++;
            p = q;
        } else p++;
    }
    return b;
}

static double attr_num(const char *el, const char *name) {
    char k[32];
    snprintf(k, sizeof k, " %s=\"", name);
    const char *p = strstr(el, k);
    return p ? strtod(p + strlen(k), NULL) : 0;
}

/* Texts of the edges of one SVG (labels) that overlap a node's box (text width estimated
 * at 0.6 em a character, generous); returns how many. */
static size_t label_overlaps(const char *svg, const char *end, size_t *labels) {
    box nodes[256];
    size_t nn = 0, bad = 0;
    for (const char *g = svg; (g = strstr(g, "class=\"node ")) && g < end && nn < 256; g++) {
        const char *sh = strstr(g, " d=\""), *pl = strstr(g, " points=\""), *ge = strstr(g, "</g>");
        const char *c = sh && (!pl || sh < pl) ? sh + 4 : pl ? pl + 9 : NULL;
        if (c && c < ge) nodes[nn++] = coords_box(c);
    }
    for (const char *g = svg; (g = strstr(g, "class=\"edge ")) && g < end; g++) {
        const char *tx = strstr(g, "<text "), *ge = strstr(g, "</g>");
        if (!tx || tx > ge) continue;
        const char *gt = strchr(tx, '>'), *te = strstr(gt, "</text>");
        double fs = attr_num(tx, "font-size"), x = attr_num(tx, "x"), y = attr_num(tx, "y");
        double w = (double)(te - gt - 1) * fs * 0.6;
        if (strstr(tx, "text-anchor=\"middle\"") && strstr(tx, "text-anchor=\"middle\"") < gt) x -= w / 2;
        box l = {x, y - fs, x + w, y + fs * 0.25};
        (*labels)++;
        for (size_t i = 0; i < nn; i++)
            if (l.x0 < nodes[i].x1 && nodes[i].x0 < l.x1 && l.y0 < nodes[i].y1 && nodes[i].y0 < l.y1) bad++;
    }
    return bad;
}

/* The programs of the sample pairs, read once each. */
typedef struct {
    const char *path[256];
    hlo_module *m[256];
    size_t n;
} module_cache;

static const hlo_module *module_of(module_cache *mc, const char *path) {
    for (size_t i = 0; i < mc->n; i++)
        if (strcmp(mc->path[i], path) == 0) return mc->m[i];
    if (mc->n == 256) return NULL;
    diag d;
    diag_init(&d, path);
    hlo_module *m = hlo_read_file(path, &d);
    CHECK_MSG(m != NULL, "%s: %s", path, d.out.s ? d.out.s : "");
    diag_free(&d);
    mc->path[mc->n] = path, mc->m[mc->n++] = m;
    return m;
}

static void module_cache_free(module_cache *mc) {
    for (size_t i = 0; i < mc->n; i++)
        if (mc->m[i]) graph_free(mc->m[i]);
}

/* Whether a source window of the finding page shows line `line` of file. */
static bool window_shows(const char *page, const char *file, int64_t line) {
    static const char open[] = "<div class=\"snippet\"><div class=\"file\">";
    char row[48];
    snprintf(row, sizeof row, "<td class=\"ln\">%lld</td>", (long long)line);
    size_t n = strlen(file);
    for (const char *p = page; (p = strstr(p, open)); p++) {
        const char *f = p + strlen(open), *end = strstr(f, "</table>");
        if (!end || strncmp(f, file, n) != 0 || (f[n] != ':' && f[n] != '<')) continue;
        const char *r = strstr(f, row);
        if (r && r < end) return true;
    }
    return false;
}

/* Every line the finding's message names is inside a source window of its
 * page: the divergence's line, the lines of the instructions it names (read
 * from the programs themselves, not from the trace), and for a divergence
 * that only passes a value on (an output's copy), the line that computed
 * the value. Returns how many lines were checked. */
static size_t check_windows(module_cache *mc, const trace *t, const trace_finding *f, const char *page) {
    const hlo_module *dm = module_of(mc, t->dist.path), *bm = module_of(mc, t->base.path);
    if (!dm || !bm) return 0;
    const hlo_instr *want[16];
    size_t n = 0, len, checked = 0;
    const hlo_comp *c = NULL;
    const hlo_instr *site = tw_find_instr(dm, f->dist.instruction, strlen(f->dist.instruction), &c);
    CHECK_MSG(site != NULL, "%s is not in %s", f->dist.instruction, t->dist.path);
    if (site) want[n++] = site, want[n++] = tw_value_source(dm, c, site, NULL);
    for (const char *p = f->message, *q; n < 16 && (q = trace_next_instr_name(f->message, &p, &len));) {
        const hlo_instr *x = tw_find_instr(dm, q, len, &c);
        want[n++] = x ? x : tw_find_instr(bm, q, len, &c);
    }
    for (size_t i = 0; i < n; i++) {
        const hlo_instr *x = want[i];
        if (!x || !x->meta || !x->meta->src_file || x->meta->src_line <= 0) continue;
        t_case("report_ci source windows %s %s: %s at %s:%d shown", t->name, f->id, x->name, x->meta->src_file,
               (int)x->meta->src_line);
        CHECK(window_shows(page, x->meta->src_file, x->meta->src_line));
        checked++;
    }
    return checked;
}

/* Whether the svg draws text (escaped) as one line of a label. */
static bool svg_text(const char *svg, const char *end, const char *text, size_t n) {
    strbuf v;
    sb_init(&v);
    sb_putc(&v, '>');
    esc_html_n(&v, text, n);
    sb_puts(&v, "</text>");
    bool drawn = memmem(svg, (size_t)(end - svg), v.s, v.len) != NULL;
    sb_free(&v);
    return drawn;
}

/* check writes, on every link to an unproved counterpart, how it located it,
 * and the finding page draws that basis under the view. */
static size_t check_link_basis(const trace *t, const trace_finding *f, const report_file *pf) {
    size_t seen = 0;
    static const char *const known[] = {"same op_name scope", "same source line", "same end of op_name scope",
                                        "the first instruction of its op_name scope", "same operand position"};
    for (size_t k = 0; k < f->n_links; k++) {
        if (strcmp(f->links[k].view, "counterpart") != 0) continue;
        seen++;
        t_case("report_ci link basis %s %s", t->name, f->id);
        const char *b = f->links[k].basis;
        if (!CHECK_MSG(b != NULL, "an unproved counterpart link without basis")) continue;
        bool ok = false;
        for (size_t i = 0; i < ARRAY_LEN(known); i++) ok |= strcmp(b, known[i]) == 0;
        CHECK_MSG(ok, "unknown basis \"%s\"", b);
        char want[96];
        snprintf(want, sizeof want, ">by %s</text>", b);
        CHECK_MSG(pf && strstr(pf->data.s, want), "the page does not draw \"%s\"", want);
    }
    return seen;
}

/* Subgraphs show why: every node shows its type (a dtype mismatch shows
 * both element types), every relation's view is written (in the distributed
 * node it reaches) with the basis of an unproved counterpart, every
 * instruction the message names that either program holds is drawn (the
 * note names the others), and no edge's text is drawn over a node. */
static void test_subgraphs(const trace_set *s) {
    report_site site;
    if (!render(&site, s->t, s->n)) return;
    rnames names;
    rn_build(&names, s->t, s->n);
    module_cache mc = {0};
    size_t pictures = 0, labels = 0, typed = 0, views = 0, noted = 0, based = 0, named = 0, lines = 0, ntyped = 0;
    size_t sources = 0;
    for (size_t p = 0; p < s->n; p++)
        for (size_t i = 0; i < s->t[p]->n_findings; i++) {
            const trace *t = s->t[p];
            const trace_finding *f = &t->findings[i];
            bool sample = strncmp(t->source, SAMPLE_TRACES, strlen(SAMPLE_TRACES)) == 0;
            char file[512];
            snprintf(file, sizeof file, "finding-%s.html", names.finding[p][i]);
            const report_file *pf = find_file(&site, file);
            based += check_link_basis(t, f, pf);
            if (sample && pf) lines += check_windows(&mc, t, f, pf->data.s);
            const char *svg = pf ? strstr(pf->data.s, "<svg") : NULL, *end = svg ? strstr(svg, "</svg>") : NULL;
            if (!svg || !end) continue;
            pictures++;
            t_case("report_ci subgraph %s %s: labels clear of nodes", t->name, f->id);
            /* instructions the message names but the picture lacks are named
             * in a note: each listed one is in the message, none is drawn */
            const char *note = strstr(pf->data.s, "Named in the message but not in the subgraph the trace records: ");
            const char *ne = note ? strstr(note, "</div>") : NULL;
            if (note) {
                noted++;
                for (const char *c = note; (c = strstr(c, "<code>")) && c < ne; c++) {
                    const char *ce = strstr(c, "</code>");
                    char nm[128];
                    snprintf(nm, sizeof nm, "%.*s", (int)(ce - c - 6), c + 6);
                    CHECK_MSG(strstr(f->message, nm) != NULL, "%s is not in the message", nm);
                    for (size_t k = 0; k < f->n_nodes; k++)
                        CHECK_MSG(strcmp(f->nodes[k].label, nm) != 0, "%s is drawn", nm);
                }
            }
            size_t bad = label_overlaps(svg, end, &labels);
            CHECK_MSG(bad == 0, "%zu edge labels over a node", bad);
            for (size_t k = 0; k < f->n_links; k++)
                if (svg_text(svg, end, f->links[k].view, strlen(f->links[k].view)))
                    views++; /* a link to a node the cap left out is not drawn */
            if (sample) {
                /* every instruction the message names is drawn when a program holds it */
                const hlo_module *dm = module_of(&mc, t->dist.path), *bm = module_of(&mc, t->base.path);
                size_t len;
                for (const char *q0 = f->message, *q; dm && bm && (q = trace_next_instr_name(f->message, &q0, &len));) {
                    const hlo_comp *c;
                    bool held = tw_find_instr(dm, q, len, &c) || tw_find_instr(bm, q, len, &c);
                    t_case("report_ci subgraph %s %s: %.*s %s", t->name, f->id, (int)len, q, held ? "drawn" : "noted");
                    if (held) {
                        CHECK(svg_text(svg, end, q, len));
                        named++;
                    } else {
                        CHECK(ne && memmem(note, (size_t)(ne - note), q, len));
                    }
                }
                /* an output's copy draws the instruction that computed its value */
                const hlo_comp *sc = NULL;
                const hlo_instr *si = dm ? tw_find_instr(dm, f->dist.instruction, strlen(f->dist.instruction), &sc) : NULL;
                const hlo_instr *vs = si ? tw_value_source(dm, sc, si, NULL) : NULL;
                if (vs) {
                    t_case("report_ci subgraph %s %s: value source %s drawn", t->name, f->id, vs->name);
                    CHECK(svg_text(svg, end, vs->name, strlen(vs->name)));
                    sources++;
                }
                /* every node says its type, and the picture shows it */
                t_case("report_ci subgraph %s %s: nodes typed", t->name, f->id);
                for (size_t k = 0; k < f->n_nodes; k++) {
                    const trace_node *nd = &f->nodes[k];
                    if (nd->role == ROLE_COLLAPSED) continue;
                    if (!CHECK_MSG(nd->type != NULL, "node %s has no type", nd->label)) continue;
                    if (strlen(nd->type) <= 40 && svg_text(svg, end, nd->label, strlen(nd->label)))
                        CHECK_MSG(svg_text(svg, end, nd->type, strlen(nd->type)), "type %s of %s not drawn", nd->type,
                                  nd->label), ntyped++;
                }
            }
            if (f->kind != KIND_DTYPE_MISMATCH || !f->base.present) continue;
            t_case("report_ci subgraph %s %s: both element types shown", t->name, f->id);
            const trace_site *st[2] = {&f->dist, &f->base};
            for (int k = 0; k < 2; k++) {
                const char *eq = strstr(st[k]->hlo, " = "), *sp = eq ? strpbrk(eq + 3, "{ ") : NULL;
                if (!CHECK(eq && sp)) continue;
                CHECK_MSG(svg_text(svg, end, eq + 3, (size_t)(sp - eq - 3)), "%.*s not drawn", (int)(sp - eq - 3), eq + 3);
            }
            typed++;
        }
    t_case("report_ci subgraphs drawn");
    CHECK_MSG(pictures >= 30 && views >= 30 && typed >= 10 && named >= 30 && based >= 30 && lines >= 80 && ntyped >= 200 &&
                  sources >= 1,
              "%zu pictures, %zu views, %zu dtype pairs, %zu named drawn, %zu bases, %zu lines, %zu typed nodes, "
              "%zu value sources", pictures, views, typed, named, based, lines, ntyped, sources);
    printf("report_ci: %zu subgraphs (%zu edge labels, none over a node), %zu relation views written, %zu dtype "
           "mismatches show both types; %zu instructions the messages name drawn, %zu noted as in no program; "
           "%zu nodes show their type; %zu counterpart links say how check located them; %zu named source lines "
           "inside a window; %zu outputs' copies draw what computed their value\n",
           pictures, labels, views, typed, named, noted, ntyped, based, lines, sources);
    module_cache_free(&mc);
    rn_free(&names);
    report_site_free(&site);
}

/* axe-core finds no accessibility violation on the index, a pair page with
 * the UNVERIFIED badge and a finding page (tests/axe.sh, when Chromium is
 * present and axe-core installs). */
static void test_axe(const trace_set *s) {
    report_site site;
    if (!render(&site, s->t, s->n)) return;
    t_case("report_ci axe-core on the index, a pair and a finding page");
    system("rm -rf build/report-ci-axe && mkdir -p build/report-ci-axe");
    const char *want[3] = {"index.html", "pair-tiny-moe.expert_parallel.ep4.html", NULL};
    for (size_t i = 0; i < site.n && !want[2]; i++)
        if (strncmp(site.files[i].name, "finding-wrong-reduction-", 24) == 0) want[2] = site.files[i].name;
    strbuf cmd;
    sb_init(&cmd);
    sb_puts(&cmd, "sh tests/axe.sh");
    for (int k = 0; k < 3; k++) {
        const report_file *f = want[k] ? find_file(&site, want[k]) : NULL;
        if (!CHECK_MSG(f != NULL, "no page %s", want[k] ? want[k] : "finding")) continue;
        char path[512];
        snprintf(path, sizeof path, "build/report-ci-axe/%s", f->name);
        FILE *o = fopen(path, "wb");
        if (!CHECK(o != NULL)) continue;
        fwrite(f->data.s, 1, f->data.len, o);
        fclose(o);
        sb_printf(&cmd, " %s", path);
    }
    sb_puts(&cmd, " 2>&1");
    int st = 0;
    char *out = t_run(cmd.s, &st);
    printf("report_ci: %s", out ? out : "");
    CHECK_MSG(st == 0, "%s", out ? out : "");
    free(out);
    sb_free(&cmd);
    report_site_free(&site);
}

void suite_report_ci(void);
void suite_report_ci(void) {
    trace_set s = all_traces();
    test_junit_faithful(&s);
    test_junit_edges();
    test_stable_names(&s);
    test_sarif_scanning(&s);
    test_fingerprint_reexport();
    test_sarif_fallbacks();
    test_counts(&s);
    test_bundle(&s);
    test_reproduce(&s);
    test_compare(&s);
    test_search_and_stamp(&s);
    test_fold(&s);
    test_subgraphs(&s);
    test_axe(&s);
    set_free(&s);
}
