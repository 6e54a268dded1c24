/* report — site renderer: index, pair and finding pages, bundle (see report.h). */
#include "report.h"

#include <cmark.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "chart.h"
#include "dotgraph.h"
#include "escape.h"
#include "io.h"
#include "junit.h"
#include "report_compare.h"
#include "report_names.h"
#include "sarif.h"
#include "scalify.h"
#include "sha256.h"
#include "template.h"

/* ---- the render context ---- */

typedef struct {
    trace *const *t;
    size_t n;
    const report_opts *o;
    const char *title;
    bool single;
    diag *d;
    bool failed;
    char *css, *js, *page;
    size_t page_len;
    char *kind_html[KIND_COUNT];
    char *kind_md[KIND_COUNT];  /* templates/findings/<kind>.md */
    rnames names;       /* page names (report_names.h) */
    rc_diff *cmp;       /* --compare: this report against an earlier one; NULL: none */
    /* every finding in report order, for prev/next */
    size_t n_all, cap_all;
    struct fref { size_t p, f; } *all;
    /* single-file accumulation */
    strbuf bundle_body, bundle_css;
    report_site *site;
} rctx;

static void add_file(report_site *s, const char *name, strbuf *data) {
    XGROW(s->files, s->cap, s->n + 1);
    s->files[s->n].name = xstrdup(name);
    s->files[s->n].data = *data;
    sb_init(data);
    s->n++;
}

void report_site_free(report_site *s) {
    for (size_t i = 0; i < s->n; i++) {
        free(s->files[i].name);
        sb_free(&s->files[i].data);
    }
    free(s->files);
    memset(s, 0, sizeof *s);
}

/* ---- links: file names in a site, anchors in a bundle ---- */

static void href_index(rctx *c, strbuf *b) { sb_puts(b, c->single ? "#index" : "index.html"); }

static void href_pair(rctx *c, strbuf *b, size_t p) {
    sb_puts(b, c->single ? "#pair-" : "pair-");
    sb_puts(b, c->names.pair[p]);
    if (!c->single) sb_puts(b, ".html");
}

static void finding_slug(rctx *c, strbuf *b, size_t p, size_t f) { sb_puts(b, c->names.finding[p][f]); }

static void href_finding(rctx *c, strbuf *b, size_t p, size_t f) {
    sb_puts(b, c->single ? "#finding-" : "finding-");
    finding_slug(c, b, p, f);
    if (!c->single) sb_puts(b, ".html");
}

/* ---- small formatting helpers (all escape what they print) ---- */

static void put(strbuf *b, const char *s) { esc_html(b, s); }

static void fmt_ms(strbuf *b, double ms) {
    if (ms >= 10000) sb_printf(b, "%.1f\xe2\x80\xaf s", ms / 1000);
    else if (ms >= 100) sb_printf(b, "%.0f", ms);
    else sb_printf(b, "%.2f", ms);
}

static void fmt_bytes(strbuf *b, int64_t n) {
    const char *u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)n;
    int i = 0;
    while (v >= 1024 && i < 4) v /= 1024, i++;
    if (i == 0) sb_printf(b, "%lld B", (long long)n);
    else sb_printf(b, "%.1f %s", v, u[i]);
}

static void fmt_int(strbuf *b, int64_t v) {
    /* thin-space grouping: 200 000 */
    char tmp[32];
    snprintf(tmp, sizeof tmp, "%lld", (long long)(v < 0 ? -v : v));
    if (v < 0) sb_putc(b, '-');
    size_t n = strlen(tmp);
    for (size_t i = 0; i < n; i++) {
        if (i && (n - i) % 3 == 0) sb_puts(b, "\xe2\x80\xaf");
        sb_putc(b, tmp[i]);
    }
}

static void fmt_num(strbuf *b, double v) {
    if (isnan(v)) sb_puts(b, "NaN");
    else if (isinf(v)) sb_puts(b, v > 0 ? "\xe2\x88\x9e" : "\xe2\x88\x92\xe2\x88\x9e");
    else if (v != 0 && (fabs(v) < 1e-3 || fabs(v) >= 1e6)) sb_printf(b, "%.3e", v);
    else sb_printf(b, "%.6g", v);
}

static double seg_total(const trace_segment *s) { return s->t_build + s->t_lift + s->t_saturate + s->t_check; }

/* Findings counted (summary.findings: every one) and listed (the trace's
 * findings array: at most the first 16 of each kind), per kind; a count
 * never below what is listed. */
typedef struct {
    int64_t total, listed;
    int64_t kind_total[KIND_COUNT], kind_listed[KIND_COUNT];
} fcount;

static void fc_add(fcount *fc, const trace *t) {
    int64_t all[KIND_COUNT];
    fc->total += trace_count_findings(t, all);
    fc->listed += (int64_t)t->n_findings;
    for (int k = 0; k < KIND_COUNT; k++) fc->kind_total[k] += all[k];
    for (size_t i = 0; i < t->n_findings; i++) fc->kind_listed[t->findings[i].kind]++;
}

/* "188", or "188 (84 listed)" when fewer are listed than counted. */
static void fmt_count(strbuf *b, int64_t total, int64_t listed) {
    sb_printf(b, "%lld", (long long)total);
    if (listed < total) sb_printf(b, " <small>(%lld listed)</small>", (long long)listed);
}

static void badge(strbuf *b, trace_verdict v) {
    sb_printf(b, "<span class=\"badge %s\">%s</span>", trace_verdict_name(v), trace_verdict_name(v));
}

static void sev_badge(strbuf *b, trace_severity s) {
    sb_printf(b, "<span class=\"badge sev-%s\">%s</span>", trace_severity_name(s), trace_severity_name(s));
}

static void mesh_str(strbuf *b, const trace *t) {
    if (!t->n_mesh) sb_puts(b, "\xe2\x80\x94");
    for (size_t i = 0; i < t->n_mesh; i++) {
        if (i) sb_puts(b, " \xc3\x97 ");
        put(b, t->mesh[i].axis);
        sb_printf(b, ":%lld", (long long)t->mesh[i].size);
    }
}

static void card(strbuf *b, const char *cls, const char *label, const char *value_html) {
    sb_printf(b, "<div class=\"card %s\"><div class=\"label\">%s</div><div class=\"value\">%s</div></div>\n", cls,
              label, value_html);
}

static void crumb_sep(strbuf *b) { sb_puts(b, "<span class=\"sep\">/</span>"); }

/* ---- the command that checks a pair again ---- */

/* One argument as a POSIX shell reads it back: bare when it is plain, else
 * in single quotes ('\'' for a quote). */
static void shell_arg(strbuf *b, const char *a) {
    bool plain = *a != 0;
    for (const char *p = a; *p && plain; p++)
        plain = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || strchr("_./:=@%+,-", *p);
    if (plain) {
        sb_puts(b, a);
        return;
    }
    sb_putc(b, '\'');
    for (const char *p = a; *p; p++) {
        if (*p == '\'') sb_puts(b, "'\\''");
        else sb_putc(b, *p);
    }
    sb_putc(b, '\'');
}

/* The pair's check command as text (unescaped); false when the trace does not
 * record it and it was rebuilt from the paths (options then unknown). */
static bool check_command(strbuf *b, const trace *t) {
    if (t->n_command) {
        for (size_t i = 0; i < t->n_command; i++) {
            if (i) sb_putc(b, ' ');
            shell_arg(b, t->command[i]);
        }
        return true;
    }
    const char *args[] = {"scalify", "check", "--baseline", t->base.path, "--distributed", t->dist.path,
                          t->relations_file ? "--relations" : "--auto-relations", t->relations_file, "--name", t->name};
    for (size_t i = 0; i < ARRAY_LEN(args); i++) {
        if (!args[i]) continue;
        if (i) sb_putc(b, ' ');
        shell_arg(b, args[i]);
    }
    return false;
}

/* A "Reproduce" section: the command and a copy button (shown by the script). */
static void reproduce(strbuf *b, const trace *t) {
    strbuf cmd;
    sb_init(&cmd);
    bool exact = check_command(&cmd, t);
    sb_puts(b, "<h2 id=\"reproduce\">Reproduce</h2>\n<p class=\"muted\">");
    sb_puts(b, exact ? "The command that checked this pair, run from the folder it ran in (paths are relative to it):"
                     : "Rebuilt from the trace's paths (this trace does not record its command, so options such as "
                       "<code>--witness</code> or <code>--source-root</code> may be missing):");
    sb_puts(b, "</p>\n<div class=\"cmd\"><pre><code>");
    put(b, cmd.s);
    sb_puts(b, "</code></pre><button type=\"button\" class=\"copy\" hidden>Copy</button></div>\n");
    sb_free(&cmd);
}

/* ---- where the report comes from ---- */

static int cmp_cstr(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* The digest of the traces as a set: SHA-256 over their files' digests,
 * sorted (argument order does not matter); "" when one was not read from a
 * file. */
static void traces_digest(char out[72], trace *const *t, size_t n) {
    out[0] = 0;
    char **v = xcalloc(n + 1, sizeof *v);
    bool all = true;
    for (size_t i = 0; i < n; i++) v[i] = t[i]->source_sha256, all &= t[i]->source_sha256[0] != 0;
    if (all && n) {
        qsort(v, n, sizeof *v, cmp_cstr);
        strbuf b;
        sb_init(&b);
        for (size_t i = 0; i < n; i++) sb_puts(&b, v[i]);
        uint8_t h[32];
        sha256(b.s, b.len, h);
        strcpy(out, "sha256:");
        for (int i = 0; i < 32; i++) snprintf(out + 7 + 2 * i, 3, "%02x", h[i]);
        sb_free(&b);
    }
    free(v);
}

/* When the checks were made: $SOURCE_DATE_EPOCH when set (reproducible
 * builds), else the newest trace file's modification time; 0: unknown. */
static int64_t checked_at(trace *const *t, size_t n) {
    const char *e = getenv("SOURCE_DATE_EPOCH");
    if (e && *e) return strtoll(e, NULL, 10);
    int64_t m = 0;
    for (size_t i = 0; i < n; i++) m = t[i]->source_mtime > m ? t[i]->source_mtime : m;
    return m;
}

static void fmt_utc(strbuf *b, int64_t when) {
    time_t tt = (time_t)when;
    struct tm tm;
    char buf[64];
    if (gmtime_r(&tt, &tm) && strftime(buf, sizeof buf, "%Y-%m-%d %H:%M UTC", &tm)) sb_puts(b, buf);
}

/* " checked up to <time>, traces sha256:<12 hex>…" (plain text, for the footer). */
static void stamp(strbuf *b, trace *const *t, size_t n) {
    int64_t when = checked_at(t, n);
    if (when > 0) {
        sb_puts(b, ", checked up to ");
        fmt_utc(b, when);
    }
    char dg[72];
    traces_digest(dg, t, n);
    if (dg[0]) sb_printf(b, " (traces %.19s\xe2\x80\xa6)", dg);
}

/* ---- page assembly: template + CSP ---- */

static void csp_hash(strbuf *b, const char *s, size_t n) {
    uint8_t h[32];
    sha256(s, n, h);
    sb_puts(b, "'sha256-");
    esc_base64(b, h, 32);
    sb_putc(b, '\'');
}

/* Whether a fragment names a page of the bundle (its section), not an
 * element within a page. */
static bool is_section_ref(const char *v, size_t n) {
    return (n == 5 && memcmp(v, "index", 5) == 0) || (n == 7 && memcmp(v, "compare", 7) == 0) ||
           (n > 5 && memcmp(v, "pair-", 5) == 0) ||
           (n > 8 && memcmp(v, "finding-", 8) == 0);
}

/* Copies a page body into the bundle with its element ids scoped to its
 * section: id="x" becomes id="<anchor>:x" (a page's headings and Graphviz's
 * node1/graph0 repeat across pages), and so do the references to them
 * (href="#x", data-for="x"); links to other pages (#pair-…, #finding-…,
 * #index, #compare) stay. A colon (valid in XML names, as SVG ids need) never occurs
 * in an anchor, so scoped ids cannot meet one.
 * Attribute values are escaped text: a quote ends them. */
static void bundle_scoped(strbuf *out, const char *anchor, const char *body, size_t n) {
    static const char *const attrs[] = {" id=\"", " data-for=\"", " href=\"#"};
    const char *p = body, *end = body + n;
    while (p < end) {
        const char *best = NULL;
        size_t which = 0;
        for (size_t i = 0; i < ARRAY_LEN(attrs); i++) {
            const char *q = memmem(p, (size_t)(end - p), attrs[i], strlen(attrs[i]));
            if (q && (!best || q < best)) best = q, which = i;
        }
        if (!best) break;
        const char *v = best + strlen(attrs[which]), *close = memchr(v, '"', (size_t)(end - v));
        if (!close) break;
        sb_put(out, p, (size_t)(v - p));
        if (!(which == 2 && is_section_ref(v, (size_t)(close - v)))) sb_printf(out, "%s:", anchor);
        sb_put(out, v, (size_t)(close - v));
        p = close;
    }
    sb_put(out, p, (size_t)(end - p));
}

/* Emits one page: a file of its own, or a section of the bundle. `anchor` is
 * the section id in a bundle; extra_css holds page-specific rules (chart
 * geometry), so that no element needs a style attribute. */
static void emit_page(rctx *c, const char *file, const char *anchor, const char *title, const char *crumbs,
                      const char *keys, strbuf *body, const char *extra_css) {
    if (c->single) {
        sb_printf(&c->bundle_body, "<section class=\"page\" id=\"%s\">\n", anchor);
        bundle_scoped(&c->bundle_body, anchor, body->s ? body->s : "", body->len);
        sb_puts(&c->bundle_body, "</section>\n");
        if (extra_css) sb_puts(&c->bundle_css, extra_css);
        return;
    }
    strbuf style, csp, out, ver;
    sb_init(&style);
    sb_init(&csp);
    sb_init(&out);
    sb_init(&ver);
    sb_puts(&style, c->css);
    if (extra_css) sb_puts(&style, extra_css);
    sb_puts(&csp, "default-src 'none'; img-src data:; style-src ");
    csp_hash(&csp, style.s, style.len);
    sb_puts(&csp, "; script-src ");
    csp_hash(&csp, c->js, strlen(c->js));
    sb_puts(&csp, "; base-uri 'none'; form-action 'none'");
    tpl_vars vs;
    tpl_vars_init(&vs);
    tpl_set(&vs, "csp", csp.s);
    tpl_set(&vs, "version", SCALIFY_VERSION);
    tpl_set(&vs, "title", title);
    tpl_set(&vs, "style", style.s);
    tpl_set(&vs, "crumbs", crumbs);
    tpl_set(&vs, "keys", keys ? keys : "");
    tpl_set(&vs, "body", body->s ? body->s : "");
    sb_printf(&ver, "Generated by scalify %s from %zu trace%s", SCALIFY_VERSION, c->n, c->n == 1 ? "" : "s");
    stamp(&ver, c->t, c->n);
    sb_puts(&ver, ". Self-contained page: no network requests.");
    tpl_set(&vs, "footer", ver.s);
    tpl_set(&vs, "script", c->js);
    if (!tpl_render(&out, "page.html", c->page, c->page_len, &vs, c->d)) c->failed = true;
    else add_file(c->site, file, &out);
    tpl_vars_free(&vs);
    sb_free(&style);
    sb_free(&csp);
    sb_free(&out);
    sb_free(&ver);
}

/* ---- index ---- */

/* What a finding can be found by besides its row's text: kind, the source
 * files and op_names of its sites and involved instructions. */
static void finding_terms(strbuf *b, const trace_finding *f) {
    const trace_site *sites[2] = {&f->dist, &f->base};
    sb_printf(b, " %s", trace_kind_name(f->kind));
    for (int i = 0; i < 2; i++) {
        if (!sites[i]->present) continue;
        if (sites[i]->file) sb_putc(b, ' '), put(b, sites[i]->file);
        if (sites[i]->op_name) sb_putc(b, ' '), put(b, sites[i]->op_name);
    }
    for (size_t k = 0; k < f->n_involved; k++)
        if (f->involved[k].file) sb_putc(b, ' '), put(b, f->involved[k].file);
}

/* Every listed finding, filterable by pair, kind, file and op_name. */
static void all_findings_table(rctx *c, strbuf *b) {
    if (!c->n_all) return;
    sb_puts(b, "<h2 id=\"findings\">Findings</h2>\n<div class=\"controls\" data-for=\"findings-table\" hidden>"
               "<input type=\"search\" placeholder=\"Filter by kind, file, op_name, pair\xe2\x80\xa6\" "
               "aria-label=\"Filter findings\"><span class=\"count\"></span></div>\n"
               "<div class=\"table-wrap\"><table id=\"findings-table\" class=\"sortable\"><thead><tr><th>Finding</th>"
               "<th>Kind</th><th>Source</th><th>op_name</th><th>Message</th></tr></thead><tbody>\n");
    for (size_t g = 0; g < c->n_all; g++) {
        size_t p = c->all[g].p, i = c->all[g].f;
        const trace_finding *f = &c->t[p]->findings[i];
        sb_puts(b, "<tr data-search=\"");
        finding_terms(b, f);
        sb_puts(b, "\"><td class=\"name\"><a href=\"");
        href_finding(c, b, p, i);
        sb_puts(b, "\">");
        put(b, c->t[p]->name);
        sb_puts(b, " \xc2\xb7 ");
        put(b, f->id);
        sb_printf(b, "</a></td><td><span class=\"tag\">%s</span></td><td><code>", trace_kind_name(f->kind));
        if (f->dist.file) {
            put(b, f->dist.file);
            if (f->dist.line > 0) sb_printf(b, ":%lld", (long long)f->dist.line);
        }
        sb_puts(b, "</code></td><td><code>");
        if (f->dist.op_name) put(b, f->dist.op_name);
        sb_puts(b, "</code></td><td>");
        put(b, f->message);
        sb_puts(b, "</td></tr>\n");
    }
    sb_puts(b, "</tbody></table></div>\n");
}

/* What the report was made from: every trace file with its digest, time and
 * checker, folded (it is long and rarely read). */
static void provenance(rctx *c, strbuf *b) {
    char dg[72];
    traces_digest(dg, c->t, c->n);
    sb_printf(b, "<h2 id=\"provenance\">Made from</h2>\n<p class=\"muted\">scalify %s rendered %zu trace%s",
              SCALIFY_VERSION, c->n, c->n == 1 ? "" : "s");
    if (dg[0]) sb_printf(b, " (their digest, as a set: <code>%s</code>)", dg);
    int64_t when = checked_at(c->t, c->n);
    if (when > 0) {
        sb_puts(b, "; the newest was written ");
        fmt_utc(b, when);
    }
    sb_puts(b, ". Each pair page lists the digests of the programs it compared.</p>\n<details><summary>Traces</summary>"
               "<div class=\"table-wrap\"><table><thead><tr><th>Trace</th><th>SHA-256</th><th>Written</th>"
               "<th>Checker</th><th>Rules</th></tr></thead><tbody>\n");
    for (size_t p = 0; p < c->n; p++) {
        const trace *t = c->t[p];
        sb_puts(b, "<tr><td><code>");
        put(b, t->source);
        sb_puts(b, "</code></td><td><code>");
        put(b, t->source_sha256[0] ? t->source_sha256 : "\xe2\x80\x94");
        sb_puts(b, "</code></td><td>");
        if (t->source_mtime > 0) fmt_utc(b, t->source_mtime);
        sb_puts(b, "</td><td>");
        put(b, t->tool_name);
        sb_putc(b, ' ');
        put(b, t->tool_version);
        sb_puts(b, "</td><td><code>");
        put(b, t->rules_digest);
        sb_puts(b, "</code></td></tr>\n");
    }
    sb_puts(b, "</tbody></table></div></details>\n");
}

static void page_index(rctx *c) {
    strbuf b, crumbs;
    sb_init(&b);
    sb_init(&crumbs);
    size_t by_v[VERDICT_COUNT] = {0}, segs = 0, memo = 0;
    fcount fc = {0};
    double wall = 0;
    for (size_t p = 0; p < c->n; p++) {
        const trace *t = c->t[p];
        by_v[t->verdict]++;
        fc_add(&fc, t);
        segs += t->n_segments;
        wall += t->wall_ms;
        for (size_t i = 0; i < t->n_segments; i++) memo += t->segments[i].memo_hit;
    }
    int64_t findings = fc.total;
    sb_puts(&crumbs, "<a href=\"");
    href_index(c, &crumbs);
    sb_puts(&crumbs, "\">Report</a>");

    sb_puts(&b, "<h1>");
    put(&b, c->title);
    sb_puts(&b, "</h1>\n<p class=\"lede\">");
    sb_printf(&b, "%zu pair%s checked: distributed programs compared with their single-device baselines.", c->n,
              c->n == 1 ? "" : "s");
    sb_puts(&b, "</p>\n<div class=\"cards\">\n");
    char v[64];
    snprintf(v, sizeof v, "%zu", c->n);
    card(&b, "", "Pairs", v);
    static const char *const vcls[VERDICT_COUNT] = {"ok", "bad", "warn", "err"};
    static const char *const vlab[VERDICT_COUNT] = {"Verified", "Mismatch", "Unverified", "Error"};
    for (int i = 0; i < VERDICT_COUNT; i++) {
        snprintf(v, sizeof v, "%zu", by_v[i]);
        card(&b, by_v[i] ? vcls[i] : "", vlab[i], v);
    }
    strbuf fv;
    sb_init(&fv);
    fmt_count(&fv, fc.total, fc.listed);
    card(&b, findings ? "bad" : "", "Findings", fv.s);
    sb_free(&fv);
    sb_puts(&b, "</div>\n");
    if (fc.listed < fc.total)
        sb_printf(&b, "<div class=\"note\">%lld findings in all, %lld listed: the checker keeps the first ones of "
                      "each kind in a pair, as the same mistake repeats (typically once per layer).</div>\n",
                  (long long)fc.total, (long long)fc.listed);

    if (c->cmp) {
        sb_puts(&b, "<div class=\"note\">Compared with <code>");
        put(&b, c->cmp->label);
        sb_printf(&b, "</code>: %zu new, %zu fixed and %zu unchanged findings; %zu verdict%s changed. <a href=\"",
                  c->cmp->tot_new, c->cmp->tot_fixed, c->cmp->tot_unchanged, c->cmp->verdicts_changed,
                  c->cmp->verdicts_changed == 1 ? "" : "s");
        sb_puts(&b, c->single ? "#compare" : "compare.html");
        sb_puts(&b, "\">The comparison</a>.</div>\n");
    }
    sb_puts(&b, "<h2 id=\"pairs\">Pairs</h2>\n");
    sb_puts(&b, "<div class=\"controls\" data-for=\"pairs-table\" hidden>"
                "<input type=\"search\" placeholder=\"Filter by pair, kind, file, op_name\xe2\x80\xa6\" aria-label=\"Filter pairs\">"
                "<select aria-label=\"Verdict\"><option value=\"\">All verdicts</option>"
                "<option value=\"verified\">Verified</option><option value=\"mismatch\">Mismatch</option>"
                "<option value=\"unverified\">Unverified</option><option value=\"error\">Error</option></select>"
                "<span class=\"count\"></span><span class=\"muted\">Keys: <kbd>j</kbd>/<kbd>k</kbd> move, "
                "<kbd>Enter</kbd> opens</span></div>\n");
    sb_puts(&b, "<div class=\"table-wrap\"><table id=\"pairs-table\" class=\"sortable nav\">\n<thead><tr>"
                "<th>Pair</th><th>Verdict</th><th>Mesh</th><th class=\"num\">Segments</th>"
                "<th class=\"num\">Memo hits</th><th class=\"num\">Findings</th><th class=\"num\">Wall ms</th>"
                "<th class=\"num\">Peak memory</th></tr></thead>\n<tbody>\n");
    int64_t peak = 0;
    for (size_t p = 0; p < c->n; p++) {
        const trace *t = c->t[p];
        size_t m = 0;
        for (size_t i = 0; i < t->n_segments; i++) m += t->segments[i].memo_hit;
        if (t->peak_bytes > peak) peak = t->peak_bytes;
        sb_printf(&b, "<tr data-verdict=\"%s\" data-search=\"", trace_verdict_name(t->verdict));
        for (size_t i = 0; i < t->n_findings; i++) finding_terms(&b, &t->findings[i]);
        sb_puts(&b, "\"><td class=\"name\"><a href=\"");
        href_pair(c, &b, p);
        sb_puts(&b, "\">");
        put(&b, t->name);
        sb_printf(&b, "</a></td><td data-v=\"%d\">", (int)t->verdict);
        badge(&b, t->verdict);
        sb_puts(&b, "</td><td>");
        mesh_str(&b, t);
        fcount pc = {0};
        fc_add(&pc, t);
        sb_printf(&b, "</td><td class=\"num\">%zu</td><td class=\"num\">%zu</td><td class=\"num\" data-v=\"%lld\">",
                  t->n_segments, m, (long long)pc.total);
        fmt_count(&b, pc.total, pc.listed);
        sb_puts(&b, "</td>");
        sb_printf(&b, "<td class=\"num\" data-v=\"%.3f\">", t->wall_ms);
        fmt_ms(&b, t->wall_ms);
        sb_printf(&b, "</td><td class=\"num\" data-v=\"%lld\">", (long long)t->peak_bytes);
        fmt_bytes(&b, t->peak_bytes);
        sb_puts(&b, "</td></tr>\n");
    }
    sb_printf(&b, "</tbody>\n<tfoot><tr><td>Total: %zu pair%s</td><td></td><td></td><td class=\"num\">%zu</td>"
                  "<td class=\"num\">%zu</td><td class=\"num\">",
              c->n, c->n == 1 ? "" : "s", segs, memo);
    fmt_count(&b, fc.total, fc.listed);
    sb_puts(&b, "</td><td class=\"num\">");
    fmt_ms(&b, wall);
    sb_puts(&b, "</td><td class=\"num\">max ");
    fmt_bytes(&b, peak);
    sb_puts(&b, "</td></tr></tfoot>\n</table></div>\n");

    sb_puts(&b, "<h2 id=\"kinds\">Findings by kind</h2>\n");
    if (!findings) sb_puts(&b, "<div class=\"panel empty\">No findings.</div>\n");
    else {
        sb_puts(&b, "<div class=\"table-wrap\"><table class=\"sortable\"><thead><tr><th>Kind</th><th>Code</th>"
                    "<th class=\"num\">Findings</th><th>Pairs</th></tr></thead><tbody>\n");
        for (int k = 0; k < KIND_COUNT; k++) {
            if (!fc.kind_total[k]) continue;
            sb_printf(&b, "<tr><td>%s</td><td><code>%s</code></td><td class=\"num\" data-v=\"%lld\">",
                      trace_kind_title((trace_kind)k), trace_kind_name((trace_kind)k), (long long)fc.kind_total[k]);
            fmt_count(&b, fc.kind_total[k], fc.kind_listed[k]);
            sb_puts(&b, "</td><td>");
            bool first = true;
            for (size_t p = 0; p < c->n; p++) {
                const trace *t = c->t[p];
                for (size_t i = 0; i < t->n_findings; i++) {
                    if ((int)t->findings[i].kind != k) continue;
                    if (!first) sb_puts(&b, ", ");
                    first = false;
                    sb_puts(&b, "<a href=\"");
                    href_finding(c, &b, p, i);
                    sb_puts(&b, "\">");
                    put(&b, t->name);
                    sb_puts(&b, " \xc2\xb7 ");
                    put(&b, t->findings[i].id);
                    sb_puts(&b, "</a>");
                }
            }
            sb_puts(&b, "</td></tr>\n");
        }
        sb_puts(&b, "</tbody></table></div>\n");
    }
    all_findings_table(c, &b);
    provenance(c, &b);
    sb_puts(&b, "<h2>Other formats</h2>\n<p class=\"muted\">");
    if (c->single)
        sb_puts(&b, "This is a single-file bundle. The full report directory also holds <code>summary.json</code>, "
                    "<code>results.sarif</code> (SARIF 2.1.0) and <code>junit.xml</code>.");
    else
        sb_puts(&b, "<a href=\"summary.json\">summary.json</a> \xc2\xb7 <a href=\"results.sarif\">results.sarif</a> "
                    "(SARIF 2.1.0) \xc2\xb7 <a href=\"junit.xml\">junit.xml</a>");
    sb_puts(&b, "</p>\n");
    emit_page(c, "index.html", "index", c->title, crumbs.s, "<kbd>j</kbd> <kbd>k</kbd> rows", &b, NULL);
    sb_free(&b);
    sb_free(&crumbs);
}

/* ---- pair page ---- */

static void module_facts(strbuf *b, const char *label, const trace_module *m) {
    sb_printf(b, "<div class=\"panel\"><div class=\"side-title\">%s</div><dl class=\"facts\">", label);
    sb_puts(b, "<dt>File</dt><dd><code>");
    put(b, m->path);
    sb_puts(b, "</code></dd><dt>Format</dt><dd>");
    put(b, trace_format_name(m->format));
    sb_puts(b, "</dd><dt>Module</dt><dd><code>");
    put(b, m->module);
    sb_puts(b, "</code></dd><dt>Instructions</dt><dd>");
    fmt_int(b, m->instructions);
    sb_puts(b, "</dd><dt>SHA-256</dt><dd><code>");
    put(b, m->sha256);
    sb_puts(b, "</code></dd></dl></div>\n");
}

static void findings_table(rctx *c, strbuf *b, size_t p) {
    const trace *t = c->t[p];
    if (!t->n_findings) {
        sb_puts(b, "<div class=\"panel empty\">No findings.</div>\n");
        return;
    }
    sb_puts(b, "<div class=\"table-wrap\"><table class=\"sortable nav\"><thead><tr><th>ID</th><th>Kind</th>"
               "<th>Severity</th><th>Segment</th><th>Message</th></tr></thead><tbody>\n");
    for (size_t i = 0; i < t->n_findings; i++) {
        const trace_finding *f = &t->findings[i];
        sb_puts(b, "<tr><td><a href=\"");
        href_finding(c, b, p, i);
        sb_puts(b, "\">");
        put(b, f->id);
        sb_printf(b, "</a></td><td><span class=\"tag\">%s</span></td><td data-v=\"%d\">", trace_kind_name(f->kind),
                  (int)f->severity);
        sev_badge(b, f->severity);
        sb_puts(b, "</td><td>");
        put(b, f->segment ? f->segment : "\xe2\x80\x94");
        sb_puts(b, "</td><td class=\"name\">");
        put(b, f->message);
        sb_puts(b, "</td></tr>\n");
    }
    sb_puts(b, "</tbody></table></div>\n");
}

/* Runs of consecutive memo hits at least this long fold into one row (a
 * 126-layer model otherwise lists 120 near-empty rows per table). */
#define FOLD_MIN 3

/* The end of the run of consecutive memo hits starting at i (i itself when
 * segment i is not one). */
static size_t memo_run(const trace *t, size_t i) {
    size_t j = i;
    while (j < t->n_segments && t->segments[j].memo_hit) j++;
    return j;
}

static void chart_section(rctx *c, strbuf *b, strbuf *css, size_t p) {
    const trace *t = c->t[p];
    size_t n = t->n_segments;
    if (!n) return;
    /* A run of FOLD_MIN or more memo hits is one bar, as in the tables; past
     * CHART_MAX_ROWS such rows a bar sums `per` consecutive ones (a memo-hit
     * bar: all of them hits), so the image stays a size a PNG and a browser
     * take; the timing table keeps every segment. */
    size_t *grp = xcalloc(n + 1, sizeof *grp), ng = 0;  /* first segment of each group */
    for (size_t i = 0, j; i < n; i = j) {
        j = memo_run(t, i);
        if (j - i < FOLD_MIN) j = i + 1;
        grp[ng++] = i;
    }
    bool folded = ng < n;
    size_t per = (ng + CHART_MAX_ROWS - 1) / CHART_MAX_ROWS, rows = (ng + per - 1) / per;
    size_t *first = xcalloc(rows + 1, sizeof *first);  /* first segment of each bar; first[rows] = n */
    for (size_t r = 0; r < rows; r++) first[r] = grp[r * per];
    first[rows] = n;
    free(grp);
    double (*vals)[CHART_PHASES] = xcalloc(rows, sizeof *vals);
    bool *memo = xcalloc(rows, sizeof *memo);
    for (size_t r = 0; r < rows; r++) {
        memo[r] = true;
        for (size_t i = first[r]; i < first[r + 1]; i++) {
            const trace_segment *s = &t->segments[i];
            double *v = vals[r];
            v[0] += s->t_build, v[1] += s->t_lift, v[2] += s->t_saturate, v[3] += s->t_check;
            memo[r] &= s->memo_hit;
        }
    }
    strbuf png;
    sb_init(&png);
    chart_axis ax;
    bool ok = chart_png(&png, (const double(*)[CHART_PHASES])vals, memo, rows, &ax, c->d);
    free(vals);
    free(memo);
    if (!ok) {
        c->failed = true;
        sb_free(&png);
        free(first);
        return;
    }
    char cls[32];
    snprintf(cls, sizeof cls, "c%02zu", p + 1);
    sb_printf(css, ".%s .plot img{height:%dpx}", cls, ax.css_height);
    for (int i = 0; i < ax.n_ticks; i++)
        sb_printf(css, ".%s .t%d{left:%.3f%%}", cls, i, 100.0 * i / (ax.n_ticks - 1));
    sb_putc(css, '\n');
    sb_printf(b, "<figure class=\"panel\"><div class=\"chart %s\"><div class=\"rows\" aria-hidden=\"true\">", cls);
    for (size_t r = 0; r < rows; r++) {
        sb_puts(b, "<div>");
        put(b, t->segments[first[r]].name);
        size_t last = first[r + 1] - 1;
        if (last > first[r]) {
            sb_puts(b, " \xe2\x80\xa6 ");
            put(b, t->segments[last].name);
        }
        sb_puts(b, "</div>");
    }
    sb_puts(b, "</div><div class=\"plot\"><img alt=\"Stacked bar chart of time per segment and phase; the same "
               "figures are in the timing table.\" src=\"data:image/png;base64,");
    esc_base64(b, png.s, png.len);
    sb_puts(b, "\"><div class=\"ticks\">");
    for (int i = 0; i < ax.n_ticks; i++) {
        sb_printf(b, "<span class=\"t%d%s\">", i, i == 0 ? " first" : i == ax.n_ticks - 1 ? " last" : "");
        fmt_num(b, ax.ticks[i]);
        sb_puts(b, "</span>");
    }
    sb_puts(b, "</div></div><div class=\"axis-title\">milliseconds</div></div>\n<figcaption class=\"legend\">");
    static const char *const phase[CHART_PHASES] = {"build", "lift", "saturate", "check"};
    for (int i = 0; i < CHART_PHASES; i++)
        sb_printf(b, "<span><span class=\"sw ph%d\"></span>%s</span>", i, phase[i]);
    sb_puts(b, "<span><span class=\"sw hatch\"></span>memo hit (proof reused)</span>");
    if (folded) sb_printf(b, "<span>a run of %d or more memo hits is one bar</span>", FOLD_MIN);
    if (per > 1)
        sb_printf(b, "<span>each bar sums %zu consecutive %s (%zu in all)</span>", per,
                  folded ? "rows of the table" : "segments", n);
    sb_puts(b, "</figcaption></figure>\n");
    sb_free(&png);
    free(first);
}

/* The heads of the segments and e-graph tables (folded runs repeat them). */
static const char seg_head[] =
    "<thead><tr><th class=\"num\">#</th><th>Segment</th><th>Verdict</th><th class=\"num\">Baseline</th>"
    "<th class=\"num\">Distributed</th><th class=\"num\">Build</th><th class=\"num\">Lift</th>"
    "<th class=\"num\">Saturate</th><th class=\"num\">Check</th><th class=\"num\">Total ms</th>"
    "<th>Memo</th></tr></thead>";
static const char eg_head[] =
    "<thead><tr><th>Segment</th><th class=\"num\">E-nodes</th><th class=\"num\">E-classes</th>"
    "<th class=\"num\">Iterations</th><th>Stop reason</th><th class=\"num\">Rule firings</th>"
    "<th>Most-fired rules</th></tr></thead>";

/* A row folding segments [i, j) into a <details> (readable without script)
 * holding a table of their own rows, under the same head. */
static void fold_open(strbuf *b, const trace *t, size_t i, size_t j, int cols, const char *head) {
    double ms = 0;
    for (size_t k = i; k < j; k++) ms += seg_total(&t->segments[k]);
    sb_printf(b, "<tr class=\"fold\"><td colspan=\"%d\"><details><summary>%zu consecutive memo hits: ", cols, j - i);
    put(b, t->segments[i].name);
    sb_puts(b, " \xe2\x80\xa6 ");
    put(b, t->segments[j - 1].name);
    sb_puts(b, " (");
    fmt_ms(b, ms);
    sb_puts(b, " ms in all)</summary><table>");
    sb_puts(b, head);
    sb_puts(b, "<tbody>\n");
}

static void fold_close(strbuf *b) { sb_puts(b, "</tbody></table></details></td></tr>\n"); }

/* One row of the segments table; adds its phases to tot (build, lift,
 * saturate, check, total). */
static void seg_time_row(strbuf *b, const trace *t, size_t i, double tot[5]) {
    const trace_segment *s = &t->segments[i];
    double ph[4] = {s->t_build, s->t_lift, s->t_saturate, s->t_check};
    sb_printf(b, "<tr%s><td class=\"num\">%zu</td><td class=\"seg\">", s->memo_hit ? " class=\"memo\"" : "", i + 1);
    put(b, s->name);
    sb_printf(b, "</td><td data-v=\"%d\">", (int)s->verdict);
    badge(b, s->verdict);
    sb_printf(b, "</td><td class=\"num\" data-v=\"%lld\">%lld\xe2\x80\x93%lld</td>", (long long)s->base_start,
              (long long)s->base_start, (long long)s->base_end);
    sb_printf(b, "<td class=\"num\" data-v=\"%lld\">%lld\xe2\x80\x93%lld</td>", (long long)s->dist_start,
              (long long)s->dist_start, (long long)s->dist_end);
    for (int k = 0; k < 4; k++) {
        sb_printf(b, "<td class=\"num\" data-v=\"%.4f\">", ph[k]);
        fmt_ms(b, ph[k]);
        sb_puts(b, "</td>");
        tot[k] += ph[k];
    }
    tot[4] += seg_total(s);
    sb_printf(b, "<td class=\"num\" data-v=\"%.4f\"><b>", seg_total(s));
    fmt_ms(b, seg_total(s));
    sb_printf(b, "</b></td><td data-v=\"%d\">", s->memo_hit);
    if (s->memo_hit) {
        sb_puts(b, "<span class=\"badge memo\">\xe2\x86\xba memo");
        if (s->memo_of) {
            sb_puts(b, " of ");
            put(b, s->memo_of);
        }
        sb_puts(b, "</span>");
    }
    sb_puts(b, "</td></tr>\n");
}

typedef struct {
    int64_t en, ec, it, fir;
    size_t stops[STOP_COUNT];
} egraph_sums;

/* One row of the e-graph table; adds to the totals. Saturation runs once
 * over the whole e-graph: each segment it ran for shows its figures, the
 * total shows them once (the largest). */
static void egraph_row(strbuf *b, const trace *t, size_t i, egraph_sums *m) {
    const trace_segment *s = &t->segments[i];
    m->en += s->enodes, m->ec += s->eclasses;
    m->it = s->iterations > m->it ? s->iterations : m->it;
    m->fir = s->rule_firings > m->fir ? s->rule_firings : m->fir;
    m->stops[s->stop]++;
    sb_puts(b, s->memo_hit ? "<tr class=\"memo\"><td class=\"seg\">" : "<tr><td class=\"seg\">");
    put(b, s->name);
    sb_printf(b, "</td><td class=\"num\" data-v=\"%lld\">", (long long)s->enodes);
    fmt_int(b, s->enodes);
    sb_printf(b, "</td><td class=\"num\" data-v=\"%lld\">", (long long)s->eclasses);
    fmt_int(b, s->eclasses);
    sb_printf(b, "</td><td class=\"num\">%lld</td><td><span class=\"tag\">%s</span></td>", (long long)s->iterations,
              s->memo_hit ? "memo" : trace_stop_name(s->stop));
    sb_printf(b, "<td class=\"num\" data-v=\"%lld\">", (long long)s->rule_firings);
    fmt_int(b, s->rule_firings);
    sb_puts(b, "</td><td>");
    for (size_t r = 0; r < s->n_top_rules && r < 3; r++) {
        if (r) sb_puts(b, ", ");
        sb_puts(b, "<code>");
        put(b, s->top_rules[r].rule);
        sb_puts(b, "</code>\xc2\xa0");
        fmt_int(b, s->top_rules[r].count);
    }
    if (!s->n_top_rules) sb_puts(b, "<span class=\"muted\">\xe2\x80\x94</span>");
    sb_puts(b, "</td></tr>\n");
}

/* One row of a table that folds (seg_time_row, egraph_row), adding to acc. */
typedef void (*fold_row_fn)(strbuf *b, const trace *t, size_t i, void *acc);
static void time_row_of(strbuf *b, const trace *t, size_t i, void *acc) { seg_time_row(b, t, i, acc); }
static void egraph_row_of(strbuf *b, const trace *t, size_t i, void *acc) { egraph_row(b, t, i, acc); }

/* The rows of a fold of segments [i, j): every one up to FOLD_LIST (any
 * model's depth), else the first and last FOLD_LIST / 2 and between them a row
 * saying how many are not listed (a 200k-layer pair's page stays small).
 * Unlisted rows still count to the totals (acc). */
#define FOLD_LIST 1000
static void fold_rows(strbuf *b, const trace *t, size_t i, size_t j, int cols, fold_row_fn row, void *acc) {
    strbuf scratch;
    sb_init(&scratch);
    for (size_t k = i; k < j; k++) {
        bool listed = j - i <= FOLD_LIST || k < i + FOLD_LIST / 2 || k >= j - FOLD_LIST / 2;
        row(listed ? b : &scratch, t, k, acc);
        sb_reset(&scratch);
        if (j - i > FOLD_LIST && k + 1 == i + FOLD_LIST / 2)
            sb_printf(b, "<tr class=\"fold-gap\"><td colspan=\"%d\">\xe2\x80\xa6 %zu more memo hits, not listed "
                         "here (the trace lists every segment)</td></tr>\n", cols, j - i - FOLD_LIST);
    }
    sb_free(&scratch);
}

static void page_pair(rctx *c, size_t p) {
    const trace *t = c->t[p];
    strbuf b, crumbs, css, file, anchor;
    sb_init(&b);
    sb_init(&crumbs);
    sb_init(&css);
    sb_init(&file);
    sb_init(&anchor);
    sb_puts(&crumbs, "<a href=\"");
    href_index(c, &crumbs);
    sb_puts(&crumbs, "\">Report</a>");
    crumb_sep(&crumbs);
    put(&crumbs, t->name);

    size_t memo = 0;
    for (size_t i = 0; i < t->n_segments; i++) memo += t->segments[i].memo_hit;
    sb_puts(&b, "<h1>");
    put(&b, t->name);
    sb_puts(&b, " ");
    badge(&b, t->verdict);
    sb_puts(&b, "</h1>\n<p class=\"lede\">Mesh ");
    mesh_str(&b, t);
    /* A pair of a batch checked beside others reads its programs on one thread. */
    if (t->threads) sb_printf(&b, " \xc2\xb7 programs read on %lld thread%s", (long long)t->threads, t->threads == 1 ? "" : "s");
    sb_puts(&b, " \xc2\xb7 trace <code>");
    put(&b, t->source);
    sb_puts(&b, "</code></p>\n");
    if (t->error) {
        sb_puts(&b, "<div class=\"note\">");
        put(&b, t->error);
        sb_puts(&b, "</div>\n");
    }
    sb_puts(&b, "<div class=\"cards\">\n");
    strbuf v;
    sb_init(&v);
    sb_printf(&v, "%zu", t->n_segments);
    card(&b, "", "Segments", v.s);
    sb_reset(&v);
    sb_printf(&v, "%zu <small>of %zu</small>", memo, t->n_segments);
    card(&b, "", "Memo hits", v.s);
    sb_reset(&v);
    fcount pc = {0};
    fc_add(&pc, t);
    int64_t all_findings = pc.total;
    fmt_count(&v, pc.total, pc.listed);
    card(&b, t->n_findings ? "bad" : "", "Findings", v.s);
    sb_reset(&v);
    fmt_ms(&v, t->wall_ms);
    sb_puts(&v, " <small>ms</small>");
    card(&b, "", "Wall time", v.s);
    sb_reset(&v);
    fmt_ms(&v, t->cpu_ms);
    sb_puts(&v, " <small>ms</small>");
    card(&b, "", "CPU time", v.s);
    sb_reset(&v);
    fmt_bytes(&v, t->peak_bytes);
    card(&b, "", "Peak memory", v.s);
    sb_puts(&b, "</div>\n");

    sb_puts(&b, "<h2 id=\"findings\">Findings</h2>\n");
    if (all_findings > (int64_t)t->n_findings) {
        sb_printf(&b, "<div class=\"note\">%lld findings in all, %zu listed: the checker keeps the first ones "
                      "of each kind, as the same mistake repeats (typically once per layer).",
                  (long long)all_findings, t->n_findings);
        for (int k = 0, first = 1; k < KIND_COUNT; k++) {
            if (pc.kind_total[k] == pc.kind_listed[k]) continue;
            sb_printf(&b, "%s<code>%s</code> %lld, %lld listed", first ? " " : "; ", trace_kind_name((trace_kind)k),
                      (long long)pc.kind_total[k], (long long)pc.kind_listed[k]);
            first = 0;
        }
        sb_puts(&b, ".</div>\n");
    }
    findings_table(c, &b, p);

    sb_puts(&b, "<h2 id=\"segments\">Segments</h2>\n<div class=\"table-wrap\"><table class=\"sortable\">");
    sb_puts(&b, seg_head);
    sb_puts(&b, "<tbody>\n");
    double tot[5] = {0};
    for (size_t i = 0, j; i < t->n_segments; i = j) {
        j = memo_run(t, i);
        if (j - i < FOLD_MIN) {
            seg_time_row(&b, t, i, tot), j = i + 1;
            continue;
        }
        fold_open(&b, t, i, j, 11, seg_head);
        fold_rows(&b, t, i, j, 11, time_row_of, tot);
        fold_close(&b);
    }
    sb_puts(&b, "</tbody><tfoot>");
    if (t->setup_ms > 0) {
        /* Building that belongs to no segment: a row of its own, in the total. */
        sb_puts(&b, "<tr><td></td><td>Setup (no segment)</td><td></td><td></td><td></td><td class=\"num\">");
        fmt_ms(&b, t->setup_ms);
        sb_puts(&b, "</td><td></td><td></td><td></td><td class=\"num\">");
        fmt_ms(&b, t->setup_ms);
        sb_puts(&b, "</td><td></td></tr>");
        tot[0] += t->setup_ms;
        tot[4] += t->setup_ms;
    }
    sb_printf(&b, "<tr><td></td><td>Total</td><td></td><td></td><td></td>");
    for (int k = 0; k < 5; k++) {
        sb_puts(&b, "<td class=\"num\">");
        fmt_ms(&b, tot[k]);
        sb_puts(&b, "</td>");
    }
    sb_printf(&b, "<td>%zu hit%s</td></tr></tfoot></table></div>\n", memo, memo == 1 ? "" : "s");
    if (t->n_segments)
        sb_printf(&b, "<div class=\"note\">Build: making the segment's baseline terms; lift: relating its distributed "
                      "instructions; saturate: the rewrite runs it was the reason for.%s Reading the programs and "
                      "writing the trace are not counted here.</div>\n",
                  t->setup_ms > 0 ? " Setup: building that belongs to no segment (splitting both programs into "
                                    "layers for the memo, the baseline's parameters); the distributed program's "
                                    "parameters count to the first segment's lift."
                                  : "");

    sb_puts(&b, "<h2 id=\"chart\">Time per segment</h2>\n");
    chart_section(c, &b, &css, p);

    /* e-graph statistics */
    sb_puts(&b, "<h2 id=\"egraph\">E-graph statistics</h2>\n<div class=\"table-wrap\"><table class=\"sortable\">");
    sb_puts(&b, eg_head);
    sb_puts(&b, "<tbody>\n");
    egraph_sums sum = {0};
    for (size_t i = 0, j; i < t->n_segments; i = j) {
        j = memo_run(t, i);
        if (j - i < FOLD_MIN) {
            egraph_row(&b, t, i, &sum), j = i + 1;
            continue;
        }
        fold_open(&b, t, i, j, 7, eg_head);
        fold_rows(&b, t, i, j, 7, egraph_row_of, &sum);
        fold_close(&b);
    }
    int64_t en = sum.en, ec = sum.ec, it = sum.it, fir = sum.fir;
    size_t *stops = sum.stops;
    sb_puts(&b, "</tbody><tfoot><tr><td>Total</td><td class=\"num\">");
    fmt_int(&b, en);
    sb_puts(&b, "</td><td class=\"num\">");
    fmt_int(&b, ec);
    sb_printf(&b, "</td><td class=\"num\">%lld</td><td>", (long long)it);
    bool first = true;
    for (int s = 0; s < STOP_COUNT; s++) {
        if (!stops[s]) continue;
        sb_printf(&b, "%s%zu %s", first ? "" : ", ", stops[s], trace_stop_name((trace_stop)s));
        first = false;
    }
    sb_puts(&b, "</td><td class=\"num\">");
    fmt_int(&b, fir);
    sb_puts(&b, "</td><td></td></tr></tfoot></table></div>\n");
    if (fir)
        sb_puts(&b, "<p class=\"muted\">Equality saturation runs once over the whole e-graph: its iterations and rule "
                    "firings appear on every segment whose terms needed it, and once in the total.</p>\n");

    /* relations */
    sb_puts(&b, "<h2 id=\"relations\">Relations used</h2>\n");
    sb_puts(&b, "<p class=\"muted\">How each baseline value relates to its distributed counterpart (views: "
                "<code>dup</code> replicated, <code>shard(d,axis)</code>, <code>partial(op,axis)</code>)");
    if (t->relations_file) {
        sb_puts(&b, "; from <code>");
        put(&b, t->relations_file);
        sb_puts(&b, "</code>");
    } else sb_puts(&b, "; from sharding annotations");
    sb_puts(&b, ".</p>\n");
    if (!t->n_relations) sb_puts(&b, "<div class=\"panel empty\">No relations recorded.</div>\n");
    else {
        sb_puts(&b, "<div class=\"table-wrap\"><table class=\"sortable\"><thead><tr><th>Value</th><th>View</th>"
                    "</tr></thead><tbody>\n");
        for (size_t i = 0; i < t->n_relations; i++) {
            sb_puts(&b, "<tr><td><code>");
            put(&b, t->relations[i].key);
            sb_puts(&b, "</code></td><td><code>");
            put(&b, t->relations[i].value);
            sb_puts(&b, "</code></td></tr>\n");
        }
        sb_puts(&b, "</tbody></table></div>\n");
    }

    if (t->n_assumptions) {
        sb_puts(&b, "<h2 id=\"assumptions\">Assumptions</h2>\n<p class=\"muted\">The verdict holds under these "
                    "preconditions on the inputs.</p>\n<ul>\n");
        for (size_t i = 0; i < t->n_assumptions; i++) {
            sb_puts(&b, "<li>");
            put(&b, t->assumptions[i]);
            sb_puts(&b, "</li>\n");
        }
        sb_puts(&b, "</ul>\n");
    }

    reproduce(&b, t);
    sb_puts(&b, "<h2 id=\"inputs\">Inputs and digests</h2>\n<div class=\"two\">\n");
    module_facts(&b, "Baseline", &t->base);
    module_facts(&b, "Distributed", &t->dist);
    sb_puts(&b, "</div>\n<div class=\"panel\"><dl class=\"facts\"><dt>Tool</dt><dd>");
    put(&b, t->tool_name);
    sb_puts(&b, " ");
    put(&b, t->tool_version);
    sb_puts(&b, "</dd><dt>Rules digest</dt><dd><code>");
    put(&b, t->rules_digest);
    sb_puts(&b, "</code></dd><dt>Mesh</dt><dd>");
    mesh_str(&b, t);
    sb_puts(&b, "</dd></dl></div>\n");

    sb_printf(&anchor, "pair-%s", c->names.pair[p]);
    sb_printf(&file, "pair-%s.html", c->names.pair[p]);
    strbuf title;
    sb_init(&title);
    sb_printf(&title, "%s \xe2\x80\x94 %s", t->name, trace_verdict_name(t->verdict));
    emit_page(c, file.s, anchor.s, title.s, crumbs.s, t->n_findings ? "<kbd>j</kbd> <kbd>k</kbd> findings" : NULL,
              &b, css.len ? css.s : NULL);
    sb_free(&title);
    sb_free(&v);
    sb_free(&b);
    sb_free(&crumbs);
    sb_free(&css);
    sb_free(&file);
    sb_free(&anchor);
}

/* ---- finding page ---- */

static void site_panel(strbuf *b, const char *label, const trace_site *s) {
    sb_printf(b, "<div class=\"panel\"><div class=\"side-title\">%s</div>", label);
    if (!s->present) {
        sb_puts(b, "<p class=\"muted\">No counterpart located.</p></div>\n");
        return;
    }
    sb_puts(b, "<dl class=\"facts\"><dt>Instruction</dt><dd><code>");
    put(b, s->instruction);
    sb_puts(b, "</code></dd><dt>Opcode</dt><dd><code>");
    put(b, s->opcode);
    sb_puts(b, "</code></dd>");
    if (s->op_name) {
        sb_puts(b, "<dt>op_name</dt><dd><code>");
        put(b, s->op_name);
        sb_puts(b, "</code></dd>");
    }
    if (s->file) {
        sb_puts(b, "<dt>Source</dt><dd><code>");
        put(b, s->file);
        if (s->line) sb_printf(b, ":%lld", (long long)s->line);
        if (s->column) sb_printf(b, ":%lld", (long long)s->column);
        sb_puts(b, "</code></dd>");
    }
    sb_puts(b, "</dl><pre class=\"hlo\"><code>");
    put(b, s->hlo);
    sb_puts(b, "</code></pre></div>\n");
}

/* A witness figure; a non-finite one is marked bad where execution decided
 * (not where it decides nothing: a NaN on inputs outside the domain). */
static void witness_fig(strbuf *b, const char *label, double v, bool decided) {
    strbuf x;
    sb_init(&x);
    fmt_num(&x, v);
    card(b, isfinite(v) || !decided ? "" : "bad", label, x.s);
    sb_free(&x);
}

/* What execution decided, in words (the trace's witness outcome). */
static const char *outcome_words(const char *o) {
    if (!o) return NULL;
    if (!strcmp(o, "differs")) return "the outputs differ beyond the tolerance of their type: a mismatch.";
    if (!strcmp(o, "agrees")) return "the outputs agree within rounding.";
    if (!strcmp(o, "between")) return "the outputs differ beyond rounding but under the tolerance: execution decides nothing.";
    return "execution decides nothing";
}

static const char *kind_html(rctx *c, trace_kind k) {
    if (c->kind_html[k]) return c->kind_html[k];
    strbuf rel;
    sb_init(&rel);
    sb_printf(&rel, "templates/findings/%s.md", trace_kind_name(k));
    size_t n = 0;
    char *md = tpl_load(rel.s, &n, c->d);
    sb_free(&rel);
    if (!md) {
        c->failed = true;
        return "";
    }
    /* Our own Markdown, still rendered in cmark's safe mode (raw HTML dropped). */
    c->kind_html[k] = cmark_markdown_to_html(md, n, CMARK_OPT_DEFAULT);
    c->kind_md[k] = md;
    return c->kind_html[k];
}

static void pager(rctx *c, strbuf *b, size_t g) {
    sb_puts(b, "<nav class=\"pager\" aria-label=\"Findings\">");
    for (int dir = 0; dir < 2; dir++) {
        bool has = dir ? g + 1 < c->n_all : g > 0;
        const char *cls = dir ? "next" : "prev";
        if (!has) {
            sb_printf(b, "<span class=\"%s\"><small>%s</small>%s</span>", cls, dir ? "Next" : "Previous",
                      dir ? "last finding" : "first finding");
            continue;
        }
        struct fref r = c->all[dir ? g + 1 : g - 1];
        sb_printf(b, "<a class=\"%s\" rel=\"%s\" href=\"", cls, cls);
        href_finding(c, b, r.p, r.f);
        sb_printf(b, "\"><small>%s (<kbd>%s</kbd>)</small>", dir ? "Next" : "Previous", dir ? "j" : "k");
        put(b, c->t[r.p]->name);
        sb_puts(b, " \xc2\xb7 ");
        put(b, c->t[r.p]->findings[r.f].id);
        sb_printf(b, " %s</a>", trace_kind_name(c->t[r.p]->findings[r.f].kind));
    }
    sb_puts(b, "</nav>\n");
}

/* The finding's path as a numbered list (the numbers are the ones the
 * subgraph's nodes carry): where the value became partial first, then each
 * instruction that carried it on, with its view and source line. */
static void path_list(strbuf *b, const trace_finding *f) {
    if (!f->n_path) return;
    sb_puts(b, "<h2 id=\"path\">Path</h2>\n<p class=\"muted\">Where the value this finding objects to took its view, "
               "and each instruction that carried it on (numbered as in the subgraph).</p>\n<ol class=\"path\">\n");
    for (size_t k = 0; k < f->n_path; k++) {
        const trace_step *s = &f->path[k];
        sb_printf(b, "<li value=\"%lld\"><code>", (long long)s->step);
        put(b, s->instruction);
        sb_puts(b, "</code> (");
        put(b, s->opcode);
        sb_puts(b, ")");
        if (s->view) {
            sb_puts(b, " is <code>");
            put(b, s->view);
            sb_puts(b, "</code>");
        }
        if (s->file) {
            sb_puts(b, " &mdash; <span class=\"loc\">");
            put(b, s->file);
            if (s->line) sb_printf(b, ":%lld", (long long)s->line);
            sb_puts(b, "</span>");
        }
        if (k == 0 && f->path_omitted)
            sb_printf(b, " <span class=\"muted\">(then %lld step%s not listed)</span>", (long long)f->path_omitted,
                      f->path_omitted == 1 ? "" : "s");
        sb_puts(b, "</li>\n");
    }
    sb_puts(b, "</ol>\n");
}

/* Whether the finding's subgraph or sites hold an instruction named n
 * (len bytes). */
static bool in_picture(const trace_finding *f, const char *n, size_t len) {
    const char *names[2] = {f->dist.instruction, f->base.present ? f->base.instruction : NULL};
    for (int i = 0; i < 2; i++)
        if (names[i] && strlen(names[i]) == len && memcmp(names[i], n, len) == 0) return true;
    for (size_t i = 0; i < f->n_nodes; i++)
        if (strlen(f->nodes[i].label) == len && memcmp(f->nodes[i].label, n, len) == 0) return true;
    return false;
}

/* A note naming the instructions the message names (name.N, %name.N) that
 * the subgraph the trace records does not hold, so a reader does not look
 * for them in the picture. */
static void unshown_names(strbuf *b, const trace_finding *f) {
    strbuf miss;
    sb_init(&miss);
    size_t n = 0, len;
    for (const char *p = f->message, *q; (q = trace_next_instr_name(f->message, &p, &len));) {
        if (in_picture(f, q, len) || (miss.s && memmem(miss.s, miss.len, q, len))) continue;
        if (n++) sb_puts(&miss, ", ");
        sb_puts(&miss, "<code>");
        esc_html_n(&miss, q, len);
        sb_puts(&miss, "</code>");
    }
    if (n)
        sb_printf(b, "<div class=\"note\">Named in the message but not in the subgraph the trace records: %s.</div>\n",
                  miss.s);
    sb_free(&miss);
}

static void page_finding(rctx *c, size_t g) {
    size_t p = c->all[g].p, fi = c->all[g].f;
    const trace *t = c->t[p];
    const trace_finding *f = &t->findings[fi];
    strbuf b, crumbs, file, anchor, title;
    sb_init(&b);
    sb_init(&crumbs);
    sb_init(&file);
    sb_init(&anchor);
    sb_init(&title);
    sb_puts(&crumbs, "<a href=\"");
    href_index(c, &crumbs);
    sb_puts(&crumbs, "\">Report</a>");
    crumb_sep(&crumbs);
    sb_puts(&crumbs, "<a href=\"");
    href_pair(c, &crumbs, p);
    sb_puts(&crumbs, "\">");
    put(&crumbs, t->name);
    sb_puts(&crumbs, "</a>");
    crumb_sep(&crumbs);
    put(&crumbs, f->id);

    sb_puts(&b, "<h1>");
    put(&b, f->id);
    sb_printf(&b, " \xc2\xb7 %s ", trace_kind_title(f->kind));
    sev_badge(&b, f->severity);
    sb_printf(&b, "</h1>\n<p class=\"lede\"><span class=\"tag\">%s</span> in pair <a href=\"", trace_kind_name(f->kind));
    href_pair(c, &b, p);
    sb_puts(&b, "\">");
    put(&b, t->name);
    sb_puts(&b, "</a>");
    if (f->segment) {
        sb_puts(&b, ", segment <code>");
        put(&b, f->segment);
        sb_puts(&b, "</code>");
    }
    sb_printf(&b, " \xc2\xb7 finding %zu of %zu listed", g + 1, c->n_all);
    fcount all = {0}, pc = {0};
    for (size_t q = 0; q < c->n; q++) fc_add(&all, c->t[q]);
    fc_add(&pc, t);
    if (all.total > all.listed) sb_printf(&b, " (%lld in all)", (long long)all.total);
    if (pc.kind_total[f->kind] > pc.kind_listed[f->kind])
        sb_printf(&b, "; one of %lld %s findings in this pair, %lld listed", (long long)pc.kind_total[f->kind],
                  trace_kind_name(f->kind), (long long)pc.kind_listed[f->kind]);
    sb_puts(&b, "</p>\n<p class=\"message\">");
    put(&b, f->message);
    sb_puts(&b, "</p>\n");
    if (f->explanation[0]) {
        sb_puts(&b, "<div class=\"words\">");
        put(&b, f->explanation);
        sb_puts(&b, "</div>\n");
    }
    sb_puts(&b, "<div class=\"two\">\n");
    site_panel(&b, "Distributed", &f->dist);
    site_panel(&b, "Baseline", &f->base);
    sb_puts(&b, "</div>\n");

    if (f->has_subgraph && f->n_nodes) {
        sb_puts(&b, "<h2 id=\"subgraph\">Subgraph</h2>\n<figure class=\"graph\">");
        strbuf svg;
        sb_init(&svg);
        char *cut = NULL;
        if (dotg_svg(&svg, f, DOTG_MAX_NODES, &cut, c->d)) {
            /* class="graph" on the <svg> lets the CSS restyle it in dark mode */
            const char *tag = strstr(svg.s, "<svg");
            sb_put(&b, svg.s, (size_t)(tag - svg.s) + 4);
            sb_puts(&b, " class=\"graph\" role=\"img\" aria-label=\"Subgraph around the divergence\"");
            sb_puts(&b, tag + 4);
        } else {
            c->failed = true;
        }
        sb_puts(&b, "<figcaption class=\"legend\"><span><span class=\"sw div\"></span>divergence</span>"
                    "<span><span class=\"sw\"></span>operand</span><span><span class=\"sw ctx\"></span>context</span>"
                    "<span><span class=\"sw link\"></span>relation link (its view in blue in the distributed node)</span>"
                    "<span class=\"muted\">dashed boxes: collapsed context</span>");
        bool folded = false;
        for (size_t i = 0; i < f->n_edges && !folded; i++) folded = f->edges[i].steps > 1;
        if (folded) sb_puts(&b, "<span class=\"muted\">dotted arrow: a data path of that many steps, not drawn</span>");
        if (f->n_path) sb_puts(&b, "<span class=\"muted\">[n] and amber arrows: the path below; violet: the value's view</span>");
        sb_puts(&b, "</figcaption></figure>\n");
        unshown_names(&b, f);
        path_list(&b, f);
        if (f->truncated) {
            sb_puts(&b, "<div class=\"note\">");
            put(&b, f->truncated);
            sb_puts(&b, "</div>\n");
        }
        if (cut) {
            sb_puts(&b, "<div class=\"note\">");
            put(&b, cut);
            sb_puts(&b, "</div>\n");
        }
        free(cut);
        sb_free(&svg);
    }
    if (f->n_snippets) {
        sb_puts(&b, "<h2 id=\"source\">Source</h2>\n");
        for (size_t i = 0; i < f->n_snippets; i++) {
            const trace_snippet *s = &f->snippets[i];
            sb_puts(&b, "<div class=\"snippet\"><div class=\"file\">");
            put(&b, s->file);
            if (s->highlight) sb_printf(&b, ":%lld", (long long)s->highlight);
            sb_puts(&b, "</div><table>");
            for (size_t j = 0; j < s->n_lines; j++) {
                long long ln = (long long)(s->first_line + (int64_t)j);
                sb_printf(&b, "<tr%s><td class=\"ln\">%lld</td><td>", ln == s->highlight ? " class=\"hl\"" : "", ln);
                put(&b, s->lines[j]);
                sb_puts(&b, "</td></tr>");
            }
            sb_puts(&b, "</table></div>\n");
        }
    }
    if (f->n_involved) {
        sb_puts(&b, "<h2 id=\"hlo\">HLO of the involved instructions</h2>\n<pre class=\"hlo\"><code>");
        for (size_t i = 0; i < f->n_involved; i++) {
            sb_printf(&b, "<span class=\"side\">%-11s </span>", trace_side_name(f->involved[i].side));
            put(&b, f->involved[i].hlo);
            if (f->involved[i].file) {
                sb_puts(&b, "<span class=\"side\">  # ");
                put(&b, f->involved[i].file);
                if (f->involved[i].line) sb_printf(&b, ":%lld", (long long)f->involved[i].line);
                sb_puts(&b, "</span>");
            }
            sb_putc(&b, '\n');
        }
        sb_puts(&b, "</code></pre>\n");
    }
    if (f->has_witness) {
        sb_puts(&b, "<h2 id=\"witness\">Witness</h2>\n<p class=\"muted\">Both programs run by the interpreter on the "
                    "same random inputs");
        sb_printf(&b, " (seed %lld)", (long long)f->inputs_seed);
        sb_puts(&b, "; differences between the baseline value and the distributed value, reassembled.</p>\n"
                    "<div class=\"witness\">\n");
        bool decided = !f->outcome || !strcmp(f->outcome, "differs");
        witness_fig(&b, "Max abs difference", f->max_abs, decided);
        witness_fig(&b, "Max rel difference", f->max_rel, decided);
        if (f->at_divergence.present) {
            witness_fig(&b, "Abs at divergence", f->at_divergence.max_abs, decided);
            witness_fig(&b, "Rel at divergence", f->at_divergence.max_rel, decided);
        }
        if (f->at_outputs.present) {
            witness_fig(&b, "Abs at outputs", f->at_outputs.max_abs, decided);
            witness_fig(&b, "Rel at outputs", f->at_outputs.max_rel, decided);
        }
        sb_puts(&b, "</div>\n");
        if (f->outcome) {
            sb_puts(&b, "<p class=\"outcome\"><strong>Execution:</strong> ");
            put(&b, outcome_words(f->outcome));
            if (f->note) {
                sb_puts(&b, ": ");
                put(&b, f->note);
                sb_putc(&b, '.');
            }
            sb_puts(&b, "</p>\n");
        }
    }
    reproduce(&b, t);
    sb_puts(&b, "<h2 id=\"about\">About this kind of finding</h2>\n<div class=\"explain\">");
    sb_puts(&b, kind_html(c, f->kind));
    sb_puts(&b, "</div>\n");
    pager(c, &b, g);

    sb_puts(&anchor, "finding-");
    finding_slug(c, &anchor, p, fi);
    sb_puts(&file, "finding-");
    finding_slug(c, &file, p, fi);
    sb_puts(&file, ".html");
    sb_printf(&title, "%s %s \xe2\x80\x94 %s", f->id, trace_kind_name(f->kind), t->name);
    emit_page(c, file.s, anchor.s, title.s, crumbs.s, "<kbd>j</kbd> next <kbd>k</kbd> previous", &b, NULL);
    sb_free(&b);
    sb_free(&crumbs);
    sb_free(&file);
    sb_free(&anchor);
    sb_free(&title);
}

/* ---- compare page ---- */

static void fmt_delta(strbuf *b, double old, double now) {
    if (old <= 0) {
        sb_puts(b, "\xe2\x80\x94");
        return;
    }
    double d = 100.0 * (now - old) / old;
    sb_printf(b, "%s%.0f\xe2\x80\xaf%%", d > 0 ? "+" : d < 0 ? "\xe2\x88\x92" : "\xc2\xb1", d < 0 ? -d : d);
}

static void page_compare(rctx *c) {
    const rc_diff *r = c->cmp;
    strbuf b, crumbs, v;
    sb_init(&b), sb_init(&crumbs), sb_init(&v);
    sb_puts(&crumbs, "<a href=\"");
    href_index(c, &crumbs);
    sb_puts(&crumbs, "\">Report</a>");
    crumb_sep(&crumbs);
    sb_puts(&crumbs, "comparison");
    sb_puts(&b, "<h1>Compared with an earlier report</h1>\n<p class=\"lede\">This report against <code>");
    put(&b, r->label);
    sb_puts(&b, "</code>: pairs matched by name, findings by their identity (kind, segment, op_name, source line, "
                "mesh axes), whatever their ids.</p>\n");
    if (!r->has_keys)
        sb_puts(&b, "<div class=\"note\">The earlier summary.json does not list its findings' identities (an older "
                    "scalify): verdicts, finding totals and times are compared, findings are not matched.</div>\n");
    sb_puts(&b, "<div class=\"cards\">\n");
    const struct { const char *label, *cls; size_t n; } cards[] = {
        {"New findings", "bad", r->tot_new},       {"Fixed findings", "ok", r->tot_fixed},
        {"Unchanged", "", r->tot_unchanged},        {"Verdicts changed", "warn", r->verdicts_changed},
        {"New pairs", "", r->pairs_new},            {"Pairs gone", "", r->pairs_gone}};
    for (size_t i = 0; i < ARRAY_LEN(cards); i++) {
        sb_reset(&v);
        sb_printf(&v, "%zu", cards[i].n);
        card(&b, cards[i].n ? cards[i].cls : "", cards[i].label, v.s);
    }
    sb_puts(&b, "</div>\n<h2 id=\"pairs\">Pairs</h2>\n<div class=\"table-wrap\"><table class=\"sortable\"><thead><tr>"
                "<th>Pair</th><th>Verdict before \xe2\x86\x92 now</th><th class=\"num\">Findings before \xe2\x86\x92 now</th>"
                "<th class=\"num\">New</th><th class=\"num\">Fixed</th><th class=\"num\">Wall ms before \xe2\x86\x92 now</th>"
                "<th class=\"num\">Change</th></tr></thead><tbody>\n");
    for (size_t i = 0; i < r->n; i++) {
        const rc_pair *rp = &r->pairs[i];
        sb_puts(&b, "<tr><td class=\"name\">");
        if (rp->status != RC_GONE_PAIR) {
            sb_puts(&b, "<a href=\"");
            href_pair(c, &b, rp->p);
            sb_puts(&b, "\">");
            put(&b, rp->name);
            sb_puts(&b, "</a>");
        } else put(&b, rp->name);
        if (rp->status == RC_NEW_PAIR) sb_puts(&b, " <span class=\"tag\">new pair</span>");
        if (rp->status == RC_GONE_PAIR) sb_puts(&b, " <span class=\"tag\">gone</span>");
        sb_puts(&b, "</td><td>");
        put(&b, rp->old_verdict ? rp->old_verdict : "\xe2\x80\x94");
        sb_puts(&b, " \xe2\x86\x92 ");
        if (rp->status == RC_GONE_PAIR) sb_puts(&b, "\xe2\x80\x94");
        else badge(&b, c->t[rp->p]->verdict);
        sb_printf(&b, "</td><td class=\"num\" data-v=\"%lld\">%lld \xe2\x86\x92 %lld</td><td class=\"num\">%zu</td>"
                      "<td class=\"num\">%zu</td><td class=\"num\" data-v=\"%.3f\">",
                  rp->new_total, rp->old_total, rp->new_total, rp->n_new, rp->n_fixed, rp->new_wall);
        if (rp->status != RC_NEW_PAIR) fmt_ms(&b, rp->old_wall);
        else sb_puts(&b, "\xe2\x80\x94");
        sb_puts(&b, " \xe2\x86\x92 ");
        if (rp->status != RC_GONE_PAIR) fmt_ms(&b, rp->new_wall);
        else sb_puts(&b, "\xe2\x80\x94");
        sb_puts(&b, "</td><td class=\"num\">");
        if (rp->status == RC_BOTH) fmt_delta(&b, rp->old_wall, rp->new_wall);
        sb_puts(&b, "</td></tr>\n");
    }
    sb_puts(&b, "</tbody></table></div>\n<p class=\"muted\">Wall times are as each check measured them; a change "
                "of a few milliseconds, or on a loaded machine, is noise.</p>\n");
    sb_printf(&b, "<h2 id=\"new\">New findings (%zu)</h2>\n", r->tot_new);
    if (!r->tot_new) sb_puts(&b, "<div class=\"panel empty\">None.</div>\n");
    else sb_puts(&b, "<ul>\n");
    for (size_t i = 0; i < r->n; i++)
        for (size_t k = 0; k < r->pairs[i].n_new; k++) {
            size_t p = r->pairs[i].p, f = r->pairs[i].new_f[k];
            sb_puts(&b, "<li><a href=\"");
            href_finding(c, &b, p, f);
            sb_puts(&b, "\">");
            put(&b, c->t[p]->name);
            sb_puts(&b, " \xc2\xb7 ");
            put(&b, c->t[p]->findings[f].id);
            sb_printf(&b, " %s</a>: ", trace_kind_name(c->t[p]->findings[f].kind));
            put(&b, c->t[p]->findings[f].message);
            sb_puts(&b, "</li>\n");
        }
    if (r->tot_new) sb_puts(&b, "</ul>\n");
    sb_printf(&b, "<h2 id=\"fixed\">Fixed findings (%zu)</h2>\n", r->tot_fixed);
    if (!r->tot_fixed) sb_puts(&b, "<div class=\"panel empty\">None.</div>\n");
    else sb_puts(&b, "<ul>\n");
    for (size_t i = 0; i < r->n; i++)
        for (size_t k = 0; k < r->pairs[i].n_fixed; k++) {
            const rc_old_finding *f = &r->pairs[i].fixed[k];
            sb_puts(&b, "<li>");
            put(&b, r->pairs[i].name);
            sb_puts(&b, " \xc2\xb7 ");
            put(&b, f->id ? f->id : "?");
            sb_puts(&b, " ");
            put(&b, f->kind ? f->kind : "");
            sb_puts(&b, ": ");
            put(&b, f->message ? f->message : "");
            if (f->page) {
                sb_puts(&b, " <span class=\"muted\">(was <code>");
                put(&b, f->page);
                sb_puts(&b, "</code>)</span>");
            }
            sb_puts(&b, "</li>\n");
        }
    if (r->tot_fixed) sb_puts(&b, "</ul>\n");
    emit_page(c, "compare.html", "compare", "Comparison", crumbs.s, NULL, &b, NULL);
    sb_free(&b), sb_free(&crumbs), sb_free(&v);
}

/* ---- summary.json ---- */

static void kinds_json(strbuf *b, const int64_t *k) {
    sb_putc(b, '{');
    bool first = true;
    for (int i = 0; i < KIND_COUNT; i++) {
        if (!k[i]) continue;
        sb_printf(b, "%s\"%s\": %lld", first ? "" : ", ", trace_kind_name((trace_kind)i), (long long)k[i]);
        first = false;
    }
    sb_putc(b, '}');
}

void report_summary_json(strbuf *b, trace *const *traces, size_t n) {
    rnames names;
    rn_build(&names, traces, n);
    size_t by_v[VERDICT_COUNT] = {0};
    fcount fc = {0};
    size_t segs = 0, memo = 0;
    for (size_t p = 0; p < n; p++) {
        by_v[traces[p]->verdict]++;
        fc_add(&fc, traces[p]);
        segs += traces[p]->n_segments;
        for (size_t i = 0; i < traces[p]->n_segments; i++) memo += traces[p]->segments[i].memo_hit;
    }
    char dg[72];
    traces_digest(dg, traces, n);
    sb_printf(b, "{\n  \"scalify_summary\": 1,\n  \"tool\": {\"name\": \"scalify\", \"version\": \"%s\"},\n",
              SCALIFY_VERSION);
    /* what it was made from: the traces' files, as a set (report.h) */
    if (dg[0]) sb_printf(b, "  \"traces_sha256\": \"%s\",\n", dg);
    sb_printf(b, "  \"totals\": {\"pairs\": %zu, \"verified\": %zu, \"mismatch\": %zu, \"unverified\": %zu, "
                 "\"error\": %zu, \"segments\": %zu, \"memo_hits\": %zu, \"findings\": %lld, \"findings_listed\": %lld},\n",
              n, by_v[0], by_v[1], by_v[2], by_v[3], segs, memo, (long long)fc.total, (long long)fc.listed);
    sb_puts(b, "  \"findings_by_kind\": ");
    kinds_json(b, fc.kind_total);
    sb_puts(b, ",\n  \"findings_listed_by_kind\": ");
    kinds_json(b, fc.kind_listed);
    sb_puts(b, ",\n  \"pairs\": [");
    for (size_t p = 0; p < n; p++) {
        const trace *t = traces[p];
        size_t m = 0;
        for (size_t i = 0; i < t->n_segments; i++) m += t->segments[i].memo_hit;
        fcount pc = {0};
        fc_add(&pc, t);
        sb_puts(b, p ? ",\n    {" : "\n    {");
        sb_puts(b, "\"name\": \"");
        esc_json(b, t->name);
        sb_printf(b, "\", \"verdict\": \"%s\", \"segments\": %zu, \"memo_hits\": %zu, \"findings\": %lld, "
                     "\"findings_listed\": %zu, ",
                  trace_verdict_name(t->verdict), t->n_segments, m, (long long)pc.total, t->n_findings);
        sb_printf(b, "\"wall_ms\": %.3f, \"peak_bytes\": %lld,\n     \"findings_by_kind\": ", t->wall_ms,
                  (long long)t->peak_bytes);
        kinds_json(b, pc.kind_total);
        sb_puts(b, ",\n     \"baseline\": {\"path\": \"");
        esc_json(b, t->base.path);
        sb_puts(b, "\", \"sha256\": \"");
        esc_json(b, t->base.sha256);
        sb_puts(b, "\"}, \"distributed\": {\"path\": \"");
        esc_json(b, t->dist.path);
        sb_puts(b, "\", \"sha256\": \"");
        esc_json(b, t->dist.sha256);
        sb_puts(b, "\"},\n     \"finding_ids\": [");
        for (size_t i = 0; i < t->n_findings; i++) {
            sb_puts(b, i ? ", \"" : "\"");
            esc_json(b, t->findings[i].id);
            sb_printf(b, "\"");
        }
        /* per listed finding: its identity key (report_names.h) and page, what
         * --compare matches runs by */
        sb_puts(b, "],\n     \"finding_details\": [");
        for (size_t i = 0; i < t->n_findings; i++) {
            const trace_finding *f = &t->findings[i];
            sb_puts(b, i ? ",\n       {\"id\": \"" : "\n       {\"id\": \"");
            esc_json(b, f->id);
            sb_printf(b, "\", \"kind\": \"%s\", \"key\": \"%s\", \"page\": \"finding-%s.html\", \"message\": \"",
                      trace_kind_name(f->kind), names.key[p][i], names.finding[p][i]);
            esc_json(b, f->message);
            sb_puts(b, "\"}");
        }
        sb_puts(b, "]}");
    }
    sb_puts(b, n ? "\n  ]\n}\n" : "]\n}\n");
    rn_free(&names);
}

/* ---- driver ---- */

static bool load_resources(rctx *c) {
    size_t n;
    c->css = tpl_load("assets/report.css", &n, c->d);
    c->js = tpl_load("assets/report.js", &n, c->d);
    c->page = tpl_load("templates/page.html", &c->page_len, c->d);
    return c->css && c->js && c->page;
}

bool report_render(report_site *site, trace *const *traces, size_t n, const report_opts *o, diag *d) {
    memset(site, 0, sizeof *site);
    rctx c;
    memset(&c, 0, sizeof c);
    c.t = traces, c.n = n, c.o = o, c.d = d, c.site = site;
    c.title = o && o->title && o->title[0] ? o->title : "scalify report";
    c.single = o && o->single_file;
    sb_init(&c.bundle_body);
    sb_init(&c.bundle_css);
    bool ok = load_resources(&c);
    if (ok) {
        /* Sections in a bundle add their rules to one style block: phase swatches
         * are shared, chart geometry is per pair (class cNN). */
        rn_build(&c.names, traces, n);
        for (size_t p = 0; p < n; p++) {
            for (size_t i = 0; i < traces[p]->n_findings; i++) {
                XGROW(c.all, c.cap_all, c.n_all + 1);
                c.all[c.n_all++] = (struct fref){p, i};
            }
        }
    }
    if (ok) {
        strbuf sw;
        sb_init(&sw);
        for (int i = 0; i < CHART_PHASES; i++)
            sb_printf(&sw, ".sw.ph%d{background:#%02x%02x%02x;border-color:transparent}", i, chart_phase_rgb[i][0],
                      chart_phase_rgb[i][1], chart_phase_rgb[i][2]);
        sb_putc(&sw, '\n');
        char *merged = xmalloc(strlen(c.css) + sw.len + 1);
        memcpy(merged, c.css, strlen(c.css));
        memcpy(merged + strlen(c.css), sw.s, sw.len + 1);
        free(c.css);
        c.css = merged;
        sb_free(&sw);
        if (o && o->compare_text) {
            c.cmp = xcalloc(1, sizeof *c.cmp);
            if (!rc_build(c.cmp, o->compare_text, o->compare_len, o->compare_label ? o->compare_label : "(old)", traces,
                          n, &c.names, d)) {
                free(c.cmp);
                c.cmp = NULL;
                c.failed = true;
            }
        }
        page_index(&c);
        if (c.cmp) page_compare(&c);
        for (size_t p = 0; p < n; p++) page_pair(&c, p);
        for (size_t g = 0; g < c.n_all; g++) page_finding(&c, g);
        ok = !c.failed;
    }
    if (ok && c.single) {
        /* One page: every section, one style block (base + all chart rules). */
        c.single = false;
        strbuf body = c.bundle_body;
        sb_init(&c.bundle_body);
        strbuf crumbs;
        sb_init(&crumbs);
        sb_puts(&crumbs, "<a href=\"#index\">Report</a><span class=\"sep\">/</span>single-file bundle");
        emit_page(&c, "bundle.html", "bundle", c.title, crumbs.s, NULL, &body, c.bundle_css.s);
        sb_free(&crumbs);
        sb_free(&body);
        ok = !c.failed;
    } else if (ok) {
        strbuf s;
        sb_init(&s);
        report_summary_json(&s, traces, n);
        add_file(site, "summary.json", &s);
        for (int k = 0; k < KIND_COUNT; k++) kind_html(&c, (trace_kind)k);
        sarif_write(&s, traces, n, &c.names, (const char *const *)c.kind_md);
        add_file(site, "results.sarif", &s);
        junit_write(&s, traces, n);
        add_file(site, "junit.xml", &s);
        if (c.cmp) {
            rc_json(&s, c.cmp, traces, &c.names);
            add_file(site, "compare.json", &s);
        }
        sb_free(&s);
        ok = !c.failed;
    }
    free(c.css);
    free(c.js);
    free(c.page);
    for (int k = 0; k < KIND_COUNT; k++) free(c.kind_html[k]), free(c.kind_md[k]);
    if (c.cmp) rc_free(c.cmp), free(c.cmp);
    if (c.names.pair) rn_free(&c.names);
    free(c.all);
    sb_free(&c.bundle_body);
    sb_free(&c.bundle_css);
    if (!ok) report_site_free(site);
    return ok;
}

#define SITE_LIST ".scalify-files"
#define SITE_STAGE ".scalify-new-"  /* + 6 random characters: a report being written */

static bool site_has(const report_site *site, const char *name, size_t len) {
    for (size_t i = 0; i < site->n; i++)
        if (strlen(site->files[i].name) == len && memcmp(site->files[i].name, name, len) == 0) return true;
    return false;
}

/* Removes the files the previous list names that site does not produce; only
 * plain names (no '/', not hidden), so a doctored list cannot reach outside. */
static void remove_stale(const report_site *site, const char *dir, const char *list, size_t len) {
    strbuf path;
    sb_init(&path);
    for (const char *p = list, *end = list + len; p < end;) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t l = nl ? (size_t)(nl - p) : (size_t)(end - p);
        if (l && p[0] != '.' && !memchr(p, '/', l) && !site_has(site, p, l)) {
            sb_reset(&path);
            sb_printf(&path, "%s/%.*s", dir, (int)l, p);
            remove(path.s);
        }
        p += l + 1;
    }
    sb_free(&path);
}

/* Removes a staging folder and what it may hold: the site's files, the list,
 * and any temporary file a failed write left. */
static void remove_stage(const char *stage) {
    DIR *dp = opendir(stage);
    strbuf path;
    sb_init(&path);
    for (struct dirent *e; dp && (e = readdir(dp));) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        sb_reset(&path);
        sb_printf(&path, "%s/%s", stage, e->d_name);
        unlink(path.s);
    }
    if (dp) closedir(dp);
    rmdir(stage);
    sb_free(&path);
}

static void lock_dir(int fd) {
    while (flock(fd, LOCK_EX) != 0 && errno == EINTR) {}
}

/* Removes the staging folders of reports that died before they finished:
 * each live report holds a lock on its own folder. Called with dir locked,
 * when no report is between making its folder and locking it. */
static void remove_abandoned(const char *dir) {
    DIR *dp = opendir(dir);
    strbuf path;
    sb_init(&path);
    for (struct dirent *e; dp && (e = readdir(dp));) {
        if (strncmp(e->d_name, SITE_STAGE, strlen(SITE_STAGE)) != 0) continue;
        sb_reset(&path);
        sb_printf(&path, "%s/%s", dir, e->d_name);
        int fd = open(path.s, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) == 0) remove_stage(path.s);
        if (fd >= 0) close(fd);
    }
    if (dp) closedir(dp);
    sb_free(&path);
}

bool report_write_dir(const report_site *site, const char *dir, diag *d) {
    if (mkdir(dir, 0777) != 0 && errno != EEXIST) {
        diag_plain(d, "cannot create directory %s: %s", dir, strerror(errno));
        return false;
    }
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0) {
        diag_plain(d, "cannot write into %s: %s", dir, strerror(errno));
        return false;
    }
    /* 1. The whole new site, list included, goes to a private staging folder
     *    in dir (same file system: renames from it are atomic). A failure here
     *    (a full disk) leaves dir as it was. */
    strbuf stage, path, names;
    sb_init(&stage);
    sb_init(&path);
    sb_init(&names);
    sb_printf(&stage, "%s/" SITE_STAGE "XXXXXX", dir);
    lock_dir(dfd);
    bool staged = mkdtemp(stage.s) != NULL, ok = staged;
    if (!ok) diag_plain(d, "cannot write into %s: %s", dir, strerror(errno));
    int sfd = staged ? open(stage.s, O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
    if (sfd >= 0) lock_dir(sfd); /* ours: not abandoned */
    flock(dfd, LOCK_UN);
    for (size_t i = 0; i < site->n && ok; i++) {
        sb_reset(&path);
        sb_printf(&path, "%s/%s", stage.s, site->files[i].name);
        ok = io_write_atomic(path.s, site->files[i].data.s ? site->files[i].data.s : "", site->files[i].data.len, d);
        sb_printf(&names, "%s\n", site->files[i].name);
    }
    if (ok) {
        sb_reset(&path);
        sb_printf(&path, "%s/" SITE_LIST, stage.s);
        ok = io_write_atomic(path.s, names.s ? names.s : "", names.len, d);
    }
    /* 2. Swapped in under a lock on dir, so that two reports into one folder
     *    never interleave: pages first, index.html last (a reader following
     *    links never meets a missing page), then the list, then what only the
     *    previous report had. */
    if (ok) {
        lock_dir(dfd);
        sb_reset(&path);
        sb_printf(&path, "%s/" SITE_LIST, dir);
        diag quiet;
        diag_init(&quiet, path.s);
        size_t len;
        char *old = io_read_file(path.s, &len, NULL, &quiet);  /* absent on a first report */
        diag_free(&quiet);
        const char **order = xcalloc(site->n + 2, sizeof *order);
        size_t m = 0;
        const char *index = NULL;
        for (size_t i = 0; i < site->n; i++) {
            if (!strcmp(site->files[i].name, "index.html")) index = site->files[i].name;
            else order[m++] = site->files[i].name;
        }
        if (index) order[m++] = index;
        order[m++] = SITE_LIST;
        for (size_t i = 0; i < m && ok; i++) {
            sb_reset(&path);
            sb_printf(&path, "%s/%s", stage.s, order[i]);
            if (renameat(AT_FDCWD, path.s, dfd, order[i]) != 0) {
                diag_plain(d, "cannot move %s into %s: %s", order[i], dir, strerror(errno));
                ok = false;
            }
        }
        free(order);
        if (ok && old) remove_stale(site, dir, old, len);
        free(old);
        remove_abandoned(dir);
        flock(dfd, LOCK_UN);
    }
    if (staged) remove_stage(stage.s);
    if (sfd >= 0) close(sfd);
    close(dfd);
    sb_free(&stage);
    sb_free(&path);
    sb_free(&names);
    return ok;
}
