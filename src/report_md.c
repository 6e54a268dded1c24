/* report_md — the Markdown summary (report_md.h). */
#include "report_md.h"

#include <string.h>

#include "escape.h"

/* A link target: the user's base URL (bytes that would end a Markdown link
 * destination percent-encoded) and a page name, or the page name alone. */
static void put_url(strbuf *b, const char *base, const char *page) {
    if (base && *base) {
        size_t n = strlen(base);
        while (n > 1 && base[n - 1] == '/') n--;
        for (size_t i = 0; i < n; i++) {
            unsigned char c = (unsigned char)base[i];
            if (c <= ' ' || c == '(' || c == ')' || c == '<' || c == '>' || c >= 0x7f) sb_printf(b, "%%%02X", c);
            else sb_putc(b, (char)c);
        }
        sb_putc(b, '/');
    }
    esc_uri(b, page);
}

static void put_page_link(strbuf *b, const char *text, const char *base, const char *prefix, const char *slug) {
    strbuf page;
    sb_init(&page);
    sb_printf(&page, "%s%s.html", prefix, slug);
    sb_putc(b, '[');
    esc_md(b, text, 0);
    sb_puts(b, "](");
    put_url(b, base, page.s);
    sb_putc(b, ')');
    sb_free(&page);
}

static void put_finding(strbuf *b, const trace *t, size_t p, size_t f, const rnames *names, const report_md_opts *o) {
    const trace_finding *x = &t->findings[f];
    sb_puts(b, "- ");
    put_page_link(b, t->name, o->site_url, "pair-", names->pair[p]);
    sb_puts(b, ": ");
    put_page_link(b, trace_kind_title(x->kind), o->site_url, "finding-", names->finding[p][f]);
    sb_printf(b, " (%s) ", trace_severity_name(x->severity));
    esc_md(b, x->message, 200);
    if (x->dist.present && x->dist.file && x->dist.line > 0) {
        strbuf loc;
        sb_init(&loc);
        sb_printf(&loc, "%s:%lld", x->dist.file, (long long)x->dist.line);
        sb_puts(b, " at ");
        if (o->source_url && *o->source_url) {
            const char *file = x->dist.file;
            while (file[0] == '.' && file[1] == '/') file += 2;
            sb_putc(b, '[');
            esc_md(b, loc.s, 0);
            sb_puts(b, "](");
            put_url(b, o->source_url, file);
            sb_printf(b, "#L%lld)", (long long)x->dist.line);
        } else esc_md(b, loc.s, 0);
        sb_free(&loc);
    }
    sb_putc(b, '\n');
}

void report_markdown(strbuf *b, trace *const *t, size_t n, const rnames *names, const report_md_opts *o) {
    size_t count[VERDICT_COUNT] = {0};
    for (size_t p = 0; p < n; p++) count[t[p]->verdict]++;
    sb_puts(b, "## ");
    esc_md(b, o->title ? o->title : "scalify report", 0);
    sb_printf(b, ": %zu pair%s", n, n == 1 ? "" : "s");
    const char *sep = " — ";
    for (int v = 0; v < VERDICT_COUNT; v++)
        if (count[v]) sb_printf(b, "%s%zu %s", sep, count[v], trace_verdict_name((trace_verdict)v)), sep = ", ";
    sb_puts(b, "\n\n");

    size_t bad = n - count[VERDICT_VERIFIED], shown = 0;
    if (bad) {
        sb_puts(b, "| pair | verdict | findings | first finding |\n|---|---|---:|---|\n");
        for (size_t p = 0; p < n && shown < MD_MAX_ROWS; p++) {
            const trace *x = t[p];
            if (x->verdict == VERDICT_VERIFIED) continue;
            shown++;
            sb_puts(b, "| ");
            put_page_link(b, x->name, o->site_url, "pair-", names->pair[p]);
            sb_printf(b, " | %s | %lld | ", trace_verdict_name(x->verdict), (long long)trace_count_findings(x, NULL));
            if (x->n_findings) {
                sb_puts(b, trace_kind_name(x->findings[0].kind));
                sb_puts(b, ": ");
                esc_md(b, x->findings[0].message, 120);
            } else if (x->error) esc_md(b, x->error, 120);
            sb_puts(b, " |\n");
        }
        if (shown < bad) sb_printf(b, "\n… and %zu more not verified (see the report)\n", bad - shown);
        sb_putc(b, '\n');
    } else if (n) sb_puts(b, "Every pair is verified.\n\n");

    /* the findings: new ones against an earlier report, else every one listed */
    bool by_new = o->cmp && o->cmp->has_keys;
    size_t total = 0;
    shown = 0;
    strbuf items;
    sb_init(&items);
    if (by_new) {
        for (size_t i = 0; i < o->cmp->n; i++) {
            const rc_pair *rp = &o->cmp->pairs[i];
            if (rp->status == RC_GONE_PAIR) continue;
            /* a pair the earlier report did not check: all its findings are new */
            bool fresh = rp->status == RC_NEW_PAIR;
            size_t nf = fresh ? t[rp->p]->n_findings : rp->n_new;
            for (size_t k = 0; k < nf; k++, total++)
                if (shown < MD_MAX_ROWS && k < MD_PER_PAIR)
                    put_finding(&items, t[rp->p], rp->p, fresh ? k : rp->new_f[k], names, o), shown++;
        }
        sb_printf(b, "### New findings: %zu (since ", total);
        esc_md(b, o->cmp->label, 0);
        sb_printf(b, ": %zu fixed, %zu unchanged", o->cmp->tot_fixed, o->cmp->tot_unchanged);
        size_t pn = o->cmp->pairs_new, pg = o->cmp->pairs_gone;
        if (pn) sb_printf(b, ", %zu pair%s not checked before", pn, pn == 1 ? "" : "s");
        if (pg) sb_printf(b, ", %zu pair%s gone", pg, pg == 1 ? "" : "s");
        sb_puts(b, ")\n\n");
    } else {
        int64_t counted = 0;
        for (size_t p = 0; p < n; p++) {
            counted += trace_count_findings(t[p], NULL);
            for (size_t f = 0; f < t[p]->n_findings; f++, total++)
                if (shown < MD_MAX_ROWS && f < MD_PER_PAIR) put_finding(&items, t[p], p, f, names, o), shown++;
        }
        sb_printf(b, "### Findings: %zu listed", total);
        if ((int64_t)total != counted) sb_printf(b, " of %lld counted", (long long)counted);
        if (o->cmp) sb_puts(b, " (the earlier report has no finding identities to compare with)");
        sb_puts(b, "\n\n");
    }
    if (items.len) sb_put(b, items.s, items.len);
    if (shown < total) sb_printf(b, "- … and %zu more in the report\n", total - shown);
    if (items.len || shown < total) sb_putc(b, '\n');
    sb_free(&items);

    sb_puts(b, "Full report: ");
    put_page_link(b, "index.html", o->site_url, "", "index");
    sb_putc(b, '\n');
}
