/* The trace's vocabularies (trace_enums.h) against everything that lists them
 * too: the schema's enums, the finding pages, the reader. Fails when an entry
 * is added to one list only. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "tfcheck.h"
#include "trace_read.h"
#include "util.h"

/* The schema's enum at path (keys through nested objects) equals names[0..n). */
static void same_enum(json_t *schema, const char *const *path, const char *const *names, int n, const char *what) {
    json_t *v = schema;
    for (; *path; path++) v = json_object_get(v, *path);
    json_t *e = json_object_get(v, "enum");
    CHECK_MSG(json_is_array(e), "%s: the schema has no enum there", what);
    if (!json_is_array(e)) return;
    CHECK_MSG(json_array_size(e) == (size_t)n, "%s: the schema lists %zu names, trace_enums.h %d", what, json_array_size(e),
              n);
    for (int i = 0; i < n; i++) {
        bool found = false;
        for (size_t j = 0; j < json_array_size(e); j++) found |= !strcmp(json_string_value(json_array_get(e, j)), names[i]);
        CHECK_MSG(found, "%s: \"%s\" is missing from docs/trace.schema.json", what, names[i]);
    }
    for (size_t j = 0; j < json_array_size(e); j++) {
        bool found = false;
        for (int i = 0; i < n; i++) found |= !strcmp(json_string_value(json_array_get(e, j)), names[i]);
        CHECK_MSG(found, "%s: the schema's \"%s\" is not in trace_enums.h", what, json_string_value(json_array_get(e, j)));
    }
}

/* The fixture with its first `"key": "from"` replaced by `"key": "to"`, read. */
static trace *read_with(const char *src, const char *key, const char *from, const char *to, diag *d) {
    char a[128], b[128];
    snprintf(a, sizeof a, "\"%s\": \"%s\"", key, from);
    snprintf(b, sizeof b, "\"%s\": \"%s\"", key, to);
    const char *at = strstr(src, a);
    CHECK_MSG(at != NULL, "the fixture has no %s", a);
    if (!at) return NULL;
    strbuf s;
    sb_init(&s);
    sb_put(&s, src, (size_t)(at - src));
    sb_puts(&s, b);
    sb_puts(&s, at + strlen(a));
    trace *t = trace_read_buffer(s.s, s.len, "fixture", d);
    sb_free(&s);
    return t;
}

static int got_verdict(const trace *t) { return (int)t->verdict; }
static int got_kind(const trace *t) { return t->n_findings ? (int)t->findings[0].kind : -1; }
static int got_stop(const trace *t) { return t->n_segments ? (int)t->segments[0].stop : -1; }
static int got_format(const trace *t) { return (int)t->base.format; }
static int got_severity(const trace *t) { return t->n_findings ? (int)t->findings[0].severity : -1; }

/* Each of names[0..n) in place of the fixture's first `"key": "from"` reads
 * back as its own index (got says where it lands). */
static void accepts(const char *fix, const char *key, const char *from, const char *const *names, int n,
                    int (*got)(const trace *)) {
    for (int i = 0; fix && i < n; i++) {
        diag d;
        diag_init(&d, "fixture");
        trace *t = read_with(fix, key, from, names[i], &d);
        CHECK_MSG(t && got(t) == i, "%s %s: %s", key, names[i], d.out.s ? d.out.s : "");
        trace_free(t);
        diag_free(&d);
    }
}

void suite_enums(void);
void suite_enums(void) {
    t_case("enums-1 the schema lists each vocabulary as trace_enums.h does");
    json_error_t err;
    json_t *schema = json_load_file("docs/trace.schema.json", 0, &err);
    CHECK_MSG(schema != NULL, "docs/trace.schema.json: %s", err.text);
    if (schema) {
        same_enum(schema, (const char *const[]){"$defs", "verdict", NULL}, trace_verdict_names, VERDICT_COUNT, "verdict");
        same_enum(schema, (const char *const[]){"$defs", "kind", NULL}, trace_kind_names, KIND_COUNT, "kind");
        same_enum(schema, (const char *const[]){"$defs", "finding", "properties", "severity", NULL}, trace_severity_names,
                  SEV_COUNT, "severity");
        same_enum(schema, (const char *const[]){"$defs", "segment", "properties", "stop_reason", NULL}, trace_stop_names,
                  STOP_COUNT, "stop_reason");
        same_enum(schema, (const char *const[]){"$defs", "module", "properties", "format", NULL}, trace_format_names,
                  FORMAT_COUNT, "format");
    }
    json_decref(schema);

    t_case("enums-2 every finding kind has its page, every page a kind");
    for (int k = 0; k < KIND_COUNT; k++) {
        char path[256];
        snprintf(path, sizeof path, "templates/findings/%s.md", trace_kind_name((trace_kind)k));
        size_t n;
        char *md = t_read(path, &n);
        CHECK_MSG(md && n > 0, "%s is missing", path);
        free(md);
        CHECK_MSG(strcmp(trace_kind_title((trace_kind)k), "?") && trace_kind_short((trace_kind)k)[0],
                  "%s: no title or description", trace_kind_name((trace_kind)k));
        const char *level = trace_kind_level((trace_kind)k);
        CHECK_MSG(!strcmp(level, "error") || !strcmp(level, "warning"), "%s: SARIF level %s", path, level);
    }
    char **pages = t_list("templates/findings", ".md");
    for (char **p = pages; p && *p; p++) {
        const char *base = strrchr(*p, '/') ? strrchr(*p, '/') + 1 : *p;
        char name[128];
        snprintf(name, sizeof name, "%.*s", (int)(strlen(base) - 3), base);
        CHECK_MSG(trace_kind_of(name) >= 0, "%s: a page for no finding kind", *p);
    }
    t_free_list(pages);

    t_case("enums-3 the reader accepts every entry and maps it back");
    size_t n;
    char *fix = t_read("tests/cases/traces/mismatch.trace.json", &n);
    CHECK(fix != NULL);
    accepts(fix, "verdict", "mismatch", trace_verdict_names, VERDICT_COUNT, got_verdict);
    accepts(fix, "kind", "wrong-reduction", trace_kind_names, KIND_COUNT, got_kind);
    accepts(fix, "stop_reason", "saturated", trace_stop_names, STOP_COUNT, got_stop);
    accepts(fix, "format", "hlo-text", trace_format_names, FORMAT_COUNT, got_format);
    accepts(fix, "severity", "error", trace_severity_names, SEV_COUNT, got_severity);
    /* A name outside the list is bad input, said with its path. */
    diag d;
    diag_init(&d, "fixture");
    trace *t = fix ? read_with(fix, "kind", "wrong-reduction", "no-such-kind", &d) : NULL;
    CHECK_MSG(!t && d.out.s && strstr(d.out.s, "kind"), "%s", d.out.s ? d.out.s : "(accepted)");
    trace_free(t);
    diag_free(&d);
    free(fix);

    t_case("enums-4 counts README.md states are the code's");
    char *readme = t_read("README.md", &n), want[96];
    snprintf(want, sizeof want, "%d seeded random program pairs", TF_INSTANCES);
    CHECK_CONTAINS(readme, want);
    snprintf(want, sizeof want, "with relations) in %d\nfamilies", TF_FAMILIES);
    CHECK_CONTAINS(readme, want);
    free(readme);
}