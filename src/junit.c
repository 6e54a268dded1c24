/* junit — JUnit XML writer (see junit.h). */
#include "junit.h"

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

static void failure_body(strbuf *b, const trace *t, const trace_segment *s) {
    for (size_t i = 0; i < t->n_findings; i++) {
        const trace_finding *f = &t->findings[i];
        if (!f->segment || strcmp(f->segment, s->name) != 0) continue;
        esc_html(b, f->id);
        sb_puts(b, " [");
        esc_html(b, trace_kind_name(f->kind));
        sb_puts(b, "] ");
        esc_html(b, f->message);
        sb_puts(b, "\n  at ");
        esc_html(b, f->dist.instruction);
        if (f->dist.file) {
            sb_puts(b, " (");
            esc_html(b, f->dist.file);
            sb_printf(b, ":%lld)", (long long)f->dist.line);
        }
        sb_putc(b, '\n');
    }
}

static const trace_finding *first_finding(const trace *t, const trace_segment *s) {
    for (size_t i = 0; i < t->n_findings; i++)
        if (t->findings[i].segment && strcmp(t->findings[i].segment, s->name) == 0) return &t->findings[i];
    return NULL;
}

void junit_write(strbuf *b, trace *const *traces, size_t n) {
    size_t tests = 0, failures = 0, errors = 0, skipped = 0;
    double time = 0;
    for (size_t p = 0; p < n; p++) {
        const trace *t = traces[p];
        if (!t->n_segments) {
            tests++;
            errors += t->verdict == VERDICT_ERROR, failures += t->verdict == VERDICT_MISMATCH,
                skipped += t->verdict == VERDICT_UNVERIFIED;
        }
        for (size_t i = 0; i < t->n_segments; i++) {
            const trace_segment *s = &t->segments[i];
            tests++;
            failures += s->verdict == VERDICT_MISMATCH;
            errors += s->verdict == VERDICT_ERROR;
            skipped += s->verdict == VERDICT_UNVERIFIED;
            time += seg_seconds(s);
        }
    }
    sb_puts(b, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    sb_printf(b, "<testsuites name=\"scalify\" tests=\"%zu\" failures=\"%zu\" errors=\"%zu\" skipped=\"%zu\" time=\"%.3f\">\n",
              tests, failures, errors, skipped, time);
    for (size_t p = 0; p < n; p++) {
        const trace *t = traces[p];
        size_t f = 0, e = 0, sk = 0;
        double tt = 0;
        for (size_t i = 0; i < t->n_segments; i++) {
            f += t->segments[i].verdict == VERDICT_MISMATCH;
            e += t->segments[i].verdict == VERDICT_ERROR;
            sk += t->segments[i].verdict == VERDICT_UNVERIFIED;
            tt += seg_seconds(&t->segments[i]);
        }
        size_t cases = t->n_segments;
        if (!cases) cases = 1, e = t->verdict == VERDICT_ERROR, f = t->verdict == VERDICT_MISMATCH,
                     sk = t->verdict == VERDICT_UNVERIFIED;
        sb_puts(b, "  <testsuite");
        attr(b, "name", t->name);
        sb_printf(b, " tests=\"%zu\" failures=\"%zu\" errors=\"%zu\" skipped=\"%zu\" time=\"%.3f\">\n", cases, f, e, sk, tt);
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
        if (!t->n_segments) {
            sb_puts(b, "    <testcase");
            attr(b, "classname", t->name);
            sb_puts(b, " name=\"(pair)\" time=\"0.000\"");
            if (t->verdict == VERDICT_VERIFIED) sb_puts(b, "/>\n");
            else {
                sb_puts(b, ">\n      ");
                const char *el = t->verdict == VERDICT_ERROR ? "error" : t->verdict == VERDICT_MISMATCH ? "failure" : "skipped";
                sb_printf(b, "<%s", el);
                attr(b, "message", t->error ? t->error : trace_verdict_name(t->verdict));
                sb_puts(b, "/>\n    </testcase>\n");
            }
        }
        for (size_t i = 0; i < t->n_segments; i++) {
            const trace_segment *s = &t->segments[i];
            sb_puts(b, "    <testcase");
            attr(b, "classname", t->name);
            attr(b, "name", s->name);
            sb_printf(b, " time=\"%.4f\"", seg_seconds(s));
            if (s->verdict == VERDICT_VERIFIED) {
                sb_puts(b, "/>\n");
                continue;
            }
            sb_puts(b, ">\n");
            const trace_finding *ff = first_finding(t, s);
            if (s->verdict == VERDICT_MISMATCH || s->verdict == VERDICT_ERROR) {
                const char *el = s->verdict == VERDICT_MISMATCH ? "failure" : "error";
                sb_printf(b, "      <%s", el);
                attr(b, "type", ff ? trace_kind_name(ff->kind) : trace_verdict_name(s->verdict));
                attr(b, "message", ff ? ff->message : trace_verdict_name(s->verdict));
                sb_puts(b, ">");
                failure_body(b, t, s);
                sb_printf(b, "</%s>\n", el);
            } else {
                strbuf m;
                sb_init(&m);
                sb_printf(&m, "unverified: %s", trace_stop_name(s->stop));
                if (ff) sb_printf(&m, "; %s", ff->message);
                sb_puts(b, "      <skipped");
                attr(b, "message", m.s);
                sb_puts(b, "/>\n");
                sb_free(&m);
            }
            sb_puts(b, "    </testcase>\n");
        }
        sb_puts(b, "  </testsuite>\n");
    }
    sb_puts(b, "</testsuites>\n");
}
