/* report — the HTML site for one or more traces (DESIGN §9).
 *
 * report_render() builds every output in memory as a list of (file name, bytes):
 * index.html, one pair-<name>.html per trace, one finding-<kind>-<hash>.html per
 * finding (names that do not depend on the other traces: report_names.h),
 * summary.json, results.sarif, junit.xml — or, with single_file, one bundled
 * HTML page holding all of them as sections (links become anchors).
 * report_write_dir() first writes the whole site, with its list of names
 * (.scalify-files), into a private staging folder DIR/.scalify-new-XXXXXX;
 * only when every file is there does it move them into DIR, under an
 * exclusive flock on DIR (two reports into one folder take turns), pages
 * first and index.html last, so a reader never meets a half-written page or a
 * link to a missing one, and a failed write (a full disk) leaves the previous
 * site whole. Files an earlier report listed that this one does not produce
 * are then removed (a pair dropped from the traces leaves no stale page), as
 * are the staging folders of reports that died (each live report holds a lock
 * on its own); any other file in DIR is left alone.
 *
 * Every page is self-contained (CSS, JS, SVG, PNG inline; no external request),
 * readable with JavaScript off, and carries a Content-Security-Policy whose
 * style-src/script-src are the SHA-256 hashes of this page's one <style> and one
 * <script> (computed at render time; no 'unsafe-inline'). Output depends only on
 * the traces (their files' digests and times, $SOURCE_DATE_EPOCH in place of
 * the times when set), the options and the files the traces name (HLO text
 * for SARIF locations): no clock, no hash-table order. Every page's footer
 * says what made it, from how many traces, when they were written and their
 * digest as a set; the index lists every trace file with its digest;
 * summary.json carries the digest as traces_sha256.
 */
#ifndef SCALIFY_REPORT_H
#define SCALIFY_REPORT_H

#include <stdbool.h>
#include <stddef.h>

#include "diag.h"
#include "trace_read.h"
#include "util.h"

typedef struct {
    const char *title;  /* page title; NULL: "scalify report" */
    bool single_file;   /* render one bundled page (named by the caller) */
    /* --compare: an earlier report's summary.json (borrowed text) and what it
     * was read from; NULL: no comparison. Adds compare.html and compare.json
     * (report_compare.h). */
    const char *compare_text, *compare_label;
    size_t compare_len;
} report_opts;

typedef struct {
    char *name;  /* relative file name, owned */
    strbuf data;
} report_file;

typedef struct {
    report_file *files;
    size_t n, cap;
} report_site;

void report_site_free(report_site *s);

/* Renders the site into *site (initialised here; free with report_site_free).
 * With opts->single_file, site holds exactly one file named "bundle.html".
 * Returns false (with diags) when a resource is missing or a renderer fails. */
bool report_render(report_site *site, trace *const *traces, size_t n, const report_opts *opts, diag *d);

/* Writes every file of site under dir (created if missing) as described
 * above; false (and diags) when any could not be written, dir then unchanged
 * unless moving a staged file into it failed. */
bool report_write_dir(const report_site *site, const char *dir, diag *d);

/* summary.json for the traces (also part of report_render's output). */
void report_summary_json(strbuf *out, trace *const *traces, size_t n);

#endif
