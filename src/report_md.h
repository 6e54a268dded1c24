/* report_md — the short Markdown summary of a report (scalify report
 * --markdown FILE), for pull-request comments and chat.
 *
 * In order: a headline with the pair count and the verdicts' counts; a table
 * of the pairs that are not verified (verdict, findings counted, the first
 * finding); the findings — only the new ones when an earlier report is
 * compared (report_compare.h: matched by identity; every finding of a pair
 * the earlier report did not have), else those the traces list — each with its pair, kind, message, a link to its page and its
 * source file:line (at most MD_PER_PAIR of a pair); then the link to the
 * site's index. Links are
 * site_url + "/" + page name (report_names.h) or, without site_url, the page
 * names relative to the site's folder. A source location links to
 * source_url + "/" + file + "#L" + line when source_url is set (a
 * repository's blob URL), else is shown as text. At most MD_MAX_ROWS pairs and
 * findings are listed; the rest are counted ("… and N more").
 *
 * Everything from a trace goes through esc_md; the output depends only on the
 * traces, the comparison and the options, in trace order.
 */
#ifndef SCALIFY_REPORT_MD_H
#define SCALIFY_REPORT_MD_H

#include <stddef.h>

#include "report_compare.h"
#include "report_names.h"
#include "trace_read.h"
#include "util.h"

#define MD_MAX_ROWS 25
#define MD_PER_PAIR 3

typedef struct {
    const char *title;       /* NULL: "scalify report" */
    const char *site_url;    /* NULL: links relative to the site's folder */
    const char *source_url;  /* NULL: source locations as code, no link */
    const rc_diff *cmp;      /* NULL: no earlier report */
} report_md_opts;

void report_markdown(strbuf *out, trace *const *t, size_t n, const rnames *names, const report_md_opts *o);

#endif
