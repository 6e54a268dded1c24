/* junit — JUnit XML writer (see junit.h). */
#include "junit.h"

#include <stdlib.h>
#include <string.h>

#include "escape.h"

static double seg_seconds(const trace_segment *s) {
    return (s->t_build + s->t_lift + s->t_saturate + s->t_check) / 1000.0;
}

static void attr(strbuf *b, const char *name, const char *v) {
    sb_printf(b, " %s=\"", name);
    esc_html(b, v);
    sb_putc(b, '"');
}

static bool is_segment(const trace *t, const char *name) {
    for (size_t i = 0; name && i < t->n_segments; i++)
        if (strcmp(t->segments[i].name, name) == 0) return true;
    return false;
}

/* The testcase a finding lands in: its segment when the trace has one of that
 * name, else a case named after the segment it names ("entry"), else "(pair)". */
static const char *case_of(const trace *t, const trace_finding *f) { return f->segment ? f->segment : "(pair)"; }

static bool in_case(const trace *t, const trace_finding *f, const char *name) {
    return strcmp(case_of(t, f), name) == 0;
}

static void finding_line(strbuf *b, const trace_finding *f) {
    esc_html(b, f->id);
    sb_puts(b, " [");
    esc_html(b, trace_kind_name(f->kind));
    sb_puts(b, ", ");
    esc_html(b, trace_severity_name(f->severity));
    sb_puts(b, "] ");
    esc_html(b, f->message);
    sb_puts(b, "\n  at ");
    esc_html(b, f->dist.instruction);
    if (f->dist.file) {
        sb_puts(b, " (");
        esc_html(b, f->dist.file);
        if (f->dist.line > 0) sb_printf(b, ":%lld", (long long)f->dist.line);
        sb_putc(b, ')');
    }
    sb_putc(b, '\n');
}

/* The findings of one testcase, one block each; returns how many. */
static size_t case_findings(strbuf *b, const trace *t, const char *name) {
    size_t n = 0;
    for (size_t i = 0; i < t->n_findings; i++)
        if (in_case(t, &t->findings[i], name)) finding_line(b, &t->findings[i]), n++;
    return n;
}

static const trace_finding *first_in(const trace *t, const char *name) {
    for (size_t i = 0; i < t->n_findings; i++)
        if (in_case(t, &t->findings[i], name)) return &t->findings[i];
    return NULL;
}

/* How a testcase ends: pass, <failure> or <error>. */
typedef enum { OUT_PASS, OUT_FAILURE, OUT_ERROR } outcome;

/* One testcase's outcome. A testcase fails only when the pair does (check
 * exits non-zero exactly then): a segment of a verified pair that the trace
 * marks otherwise passes, its verdict in <system-out>; in a pair that fails, a
 * case fails when its verdict is not verified or a finding lands in it. */
static outcome case_outcome(const trace *t, trace_verdict v, bool has_findings) {
    if (t->verdict == VERDICT_VERIFIED || (v == VERDICT_VERIFIED && !has_findings)) return OUT_PASS;
    return v == VERDICT_ERROR || t->verdict == VERDICT_ERROR ? OUT_ERROR : OUT_FAILURE;
}

/* The failure message of a non-verified case: its first finding, else what
 * its verdict means; `reason` for a segment with no finding of its own. */
static void case_message(strbuf *m, const trace *t, const char *name, trace_verdict v, const trace_segment *s) {
    const trace_finding *ff = first_in(t, name);
    sb_puts(m, trace_verdict_name(v));
    if (ff) {
        sb_printf(m, ": %s [%s] %s", ff->id, trace_kind_name(ff->kind), ff->message);
        return;
    }
    if (s && s->stop != STOP_SATURATED) sb_printf(m, ": saturation stopped at the %s", trace_stop_name(s->stop));
    else if (s && v == VERDICT_UNVERIFIED) sb_puts(m, ": the segment's values were not shown equal to the baseline's");
    else if (s) sb_puts(m, ": the segment's values differ from the baseline's");
    else if (t->error) sb_printf(m, ": %s", t->error);
    else if (v == VERDICT_UNVERIFIED) sb_puts(m, ": the pair's outputs were not shown equal to the baseline's");
    else if (v == VERDICT_MISMATCH) sb_puts(m, ": the pair's outputs differ from the baseline's");
    if (s && t->n_findings && !ff)
        sb_printf(m, " (no finding located in this segment; the pair's first is %s [%s]%s%s)", t->findings[0].id,
                  trace_kind_name(t->findings[0].kind), t->findings[0].segment ? " in " : "",
                  t->findings[0].segment ? t->findings[0].segment : "");
}

/* One <testcase>: name, segment (NULL for a case of no segment), verdict. */
static void write_case(strbuf *b, const trace *t, const char *name, const trace_segment *s, trace_verdict v) {
    sb_puts(b, "    <testcase");
    attr(b, "classname", t->name);
    attr(b, "name", name);
    sb_printf(b, " time=\"%.4f\"", s ? seg_seconds(s) : 0.0);
    strbuf body;
    sb_init(&body);
    size_t nf = case_findings(&body, t, name);
    outcome o = case_outcome(t, v, nf > 0);
    if (o == OUT_PASS && !nf && v == VERDICT_VERIFIED) {
        sb_puts(b, "/>\n");
        sb_free(&body);
        return;
    }
    sb_puts(b, ">\n");
    if (o == OUT_PASS) {
        /* a verified pair: notes, or a segment verdict the pair's overrides */
        sb_puts(b, "      <system-out>");
        if (v != VERDICT_VERIFIED) sb_printf(b, "segment verdict %s; the pair is verified\n", trace_verdict_name(v));
        sb_put(b, body.s, body.len);
        sb_puts(b, "</system-out>\n");
    } else {
        const char *el = o == OUT_ERROR ? "error" : "failure";
        const trace_finding *ff = first_in(t, name);
        strbuf m;
        sb_init(&m);
        case_message(&m, t, name, v, s);
        sb_printf(b, "      <%s", el);
        attr(b, "type", ff ? trace_kind_name(ff->kind) : trace_verdict_name(v));
        attr(b, "message", m.s);
        sb_puts(b, ">");
        if (nf) sb_put(b, body.s, body.len);
        else esc_html(b, m.s);
        sb_printf(b, "</%s>\n", el);
        sb_free(&m);
    }
    sb_puts(b, "    </testcase>\n");
    sb_free(&body);
}

/* The names of the cases beyond the segments, in order of first finding:
 * findings naming no segment of the trace; then "(pair)" when the pair is not
 * verified and nothing else fails. */
typedef struct {
    const char **name;  /* borrowed from the trace; the array is owned */
    size_t n, cap;
} extra_cases;

static void extras(const trace *t, extra_cases *x) {
    memset(x, 0, sizeof *x);
    for (size_t i = 0; i < t->n_findings; i++) {
        const char *c = case_of(t, &t->findings[i]);
        if (is_segment(t, c)) continue;
        bool seen = false;
        for (size_t k = 0; k < x->n && !seen; k++) seen = strcmp(x->name[k], c) == 0;
        if (seen) continue;
        XGROW(x->name, x->cap, x->n + 1);
        x->name[x->n++] = c;
    }
}

/* Counts of one suite, as write_suite writes it. */
typedef struct {
    size_t tests, failures, errors;
    double time;
    bool pair_case;  /* a "(pair)" case carries the verdict */
} suite_counts;

static void count_suite(const trace *t, const extra_cases *x, suite_counts *c) {
    memset(c, 0, sizeof *c);
    for (size_t i = 0; i < t->n_segments; i++) {
        outcome o = case_outcome(t, t->segments[i].verdict, first_in(t, t->segments[i].name) != NULL);
        c->tests++;
        c->failures += o == OUT_FAILURE, c->errors += o == OUT_ERROR;
        c->time += seg_seconds(&t->segments[i]);
    }
    bool has_pair = false;
    for (size_t k = 0; k < x->n; k++) {
        outcome o = case_outcome(t, t->verdict, true);
        c->tests++;
        c->failures += o == OUT_FAILURE, c->errors += o == OUT_ERROR;
        has_pair |= strcmp(x->name[k], "(pair)") == 0;
    }
    outcome po = case_outcome(t, t->verdict, false);
    if (!has_pair && (!c->tests || (po != OUT_PASS && !c->failures && !c->errors))) {
        c->pair_case = true;
        c->tests++;
        c->failures += po == OUT_FAILURE, c->errors += po == OUT_ERROR;
    }
}

static void write_suite(strbuf *b, const trace *t) {
    extra_cases x;
    extras(t, &x);
    suite_counts c;
    count_suite(t, &x, &c);
    sb_puts(b, "  <testsuite");
    attr(b, "name", t->name);
    sb_printf(b, " tests=\"%zu\" failures=\"%zu\" errors=\"%zu\" skipped=\"0\" time=\"%.3f\">\n", c.tests, c.failures,
              c.errors, c.time);
    sb_puts(b, "    <properties>\n");
    const char *props[][2] = {{"verdict", trace_verdict_name(t->verdict)},
                              {"baseline", t->base.path},
                              {"distributed", t->dist.path},
                              {"baseline.sha256", t->base.sha256},
                              {"distributed.sha256", t->dist.sha256},
                              {"rules_digest", t->rules_digest}};
    for (size_t i = 0; i < ARRAY_LEN(props); i++) {
        sb_puts(b, "      <property");
        attr(b, "name", props[i][0]);
        attr(b, "value", props[i][1]);
        sb_puts(b, "/>\n");
    }
    sb_puts(b, "    </properties>\n");
    for (size_t i = 0; i < t->n_segments; i++) {
        const trace_segment *s = &t->segments[i];
        write_case(b, t, s->name, s, s->verdict);
    }
    for (size_t k = 0; k < x.n; k++) write_case(b, t, x.name[k], NULL, t->verdict);
    if (c.pair_case) write_case(b, t, "(pair)", NULL, t->verdict);
    sb_puts(b, "  </testsuite>\n");
    free(x.name);
}

void junit_write(strbuf *b, trace *const *traces, size_t n) {
    size_t tests = 0, failures = 0, errors = 0;
    double time = 0;
    for (size_t p = 0; p < n; p++) {
        extra_cases x;
        extras(traces[p], &x);
        suite_counts c;
        count_suite(traces[p], &x, &c);
        tests += c.tests, failures += c.failures, errors += c.errors, time += c.time;
        free(x.name);
    }
    sb_puts(b, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    sb_printf(b, "<testsuites name=\"scalify\" tests=\"%zu\" failures=\"%zu\" errors=\"%zu\" skipped=\"0\" time=\"%.3f\">\n",
              tests, failures, errors, time);
    for (size_t p = 0; p < n; p++) write_suite(b, traces[p]);
    sb_puts(b, "</testsuites>\n");
}
