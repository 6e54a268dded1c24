/* scalify report TRACE|INDEX... -o DIR [--single-file FILE] [--title T] [--templates DIR] [--compare OLD]
 *                [--markdown FILE [--site-url URL] [--source-url URL]] [--merged-index FILE] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "bindex.h"
#include "cli.h"
#include "io.h"
#include "report.h"
#include "report_compare.h"
#include "report_md.h"
#include "scalify.h"
#include "template.h"
#include "trace_read.h"

const char cli_report_usage[] =
    "usage: scalify report TRACE|INDEX... [-o DIR] [--single-file FILE] [--title T] [--templates DIR]\n"
    "                      [--compare OLD] [--markdown FILE [--site-url URL] [--source-url URL]]\n"
    "                      [--merged-index FILE]\n"
    "  -o DIR (or --output DIR) writes DIR/index.html, a page per pair and per finding, summary.json,\n"
    "  results.sarif and junit.xml; --single-file also bundles every page into FILE.\n"
    "  INDEX: a batch's index.json, or the index.K-of-N.json files of every shard of a batch\n"
    "  (check --manifest --shard K/N): their traces, merged in manifest order; a shard missing or\n"
    "  given twice is an error. --merged-index FILE writes the merged index (what one unsharded\n"
    "  batch would have written beside its traces).\n"
    "  --markdown FILE: a short Markdown summary for pull-request comments and chat: the verdicts\n"
    "  counted, a table of the pairs not verified, the findings (with --compare only the new ones)\n"
    "  with links to their pages and source file:line, and the link to the site. Links are\n"
    "  relative to the site's folder unless --site-url URL gives its address; --source-url URL\n"
    "  (e.g. https://github.com/ORG/REPO/blob/COMMIT) links source locations as URL/FILE#LLINE.\n"
    "  --templates (or env SCALIFY_HOME) names the tree holding templates/ and assets/.\n"
    "  --compare OLD: an earlier report (its folder, or its summary.json): compare.html and compare.json\n"
    "  mark each finding new, fixed or unchanged (matched by identity, not id) and each pair's verdict\n"
    "  and time before and now.\n"
    "  The site is written to DIR/.scalify-new-XXXXXX first and moved into DIR, under a lock on DIR,\n"
    "  only once complete: a failed write (exit 2) leaves the previous site as it was.\n"
    "  FILE is written as check's -o writes (regular file replaced once complete, symlink followed,\n"
    "  character device or FIFO written through).\n";

static int usage_error(const char *msg) {
    if (msg) fprintf(stderr, "scalify report: %s\n", msg);
    fputs(cli_report_usage, stderr);
    return EXIT_INPUT;
}

int cli_report(int argc, char **argv) {
    const char *out = NULL, *single = NULL, *title = NULL, *compare = NULL;
    const char *markdown = NULL, *site_url = NULL, *source_url = NULL, *merged = NULL;
    const char **files = calloc((size_t)argc + 1, sizeof *files);
    size_t nf = 0;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        bool has_val = i + 1 < argc;
        if (strcmp(a, "-o") == 0 || strcmp(a, "--output") == 0) {
            if (!has_val) return free(files), usage_error("-o needs a directory");
            out = argv[++i];
        } else if (strcmp(a, "--single-file") == 0) {
            if (!has_val) return free(files), usage_error("--single-file needs a file name");
            single = argv[++i];
        } else if (strcmp(a, "--title") == 0) {
            if (!has_val) return free(files), usage_error("--title needs a value");
            title = argv[++i];
        } else if (strcmp(a, "--compare") == 0) {
            if (!has_val) return free(files), usage_error("--compare needs an earlier report's folder or summary.json");
            compare = argv[++i];
        } else if (strcmp(a, "--markdown") == 0 || strcmp(a, "--site-url") == 0 ||
                   strcmp(a, "--source-url") == 0 || strcmp(a, "--merged-index") == 0) {
            if (!has_val) {
                free(files);
                fprintf(stderr, "scalify report: %s needs a value\n", a);
                return usage_error(NULL);
            }
            const char **slot = !strcmp(a, "--markdown")     ? &markdown
                                : !strcmp(a, "--merged-index") ? &merged
                                : !strcmp(a, "--site-url")     ? &site_url
                                                               : &source_url;
            *slot = argv[++i];
        } else if (strcmp(a, "--templates") == 0) {
            if (!has_val) return free(files), usage_error("--templates needs a directory");
            tpl_set_root(argv[++i]);
        } else if (a[0] == '-' && a[1]) {
            free(files);
            fprintf(stderr, "scalify report: unknown option %s\n", a);
            return usage_error(NULL);
        } else files[nf++] = a;
    }
    if (!nf) return free(files), usage_error("no trace given");
    if (!out && !single && !markdown && !merged)
        return free(files), usage_error("-o DIR, --single-file FILE, --markdown FILE or --merged-index FILE is required");

    /* Index files stand for their traces; the others are traces. */
    int bad = 0, missing = 0; /* missing: index pairs without a trace, rendered without them */
    const char **idx = calloc(nf + 1, sizeof *idx);
    size_t ni = 0, nt = 0;
    for (size_t i = 0; i < nf; i++) {
        if (bindex_is_index(files[i])) idx[ni++] = files[i];
        else files[nt++] = files[i];
    }
    bindex ix = {0};
    if (ni) {
        diag d;
        diag_init(&d, "scalify report");
        if (!bindex_load(&ix, idx, ni, &d)) bad++;
        for (size_t k = 0; k < ix.n; k++)
            if (!ix.e[k].trace) {
                diag_plain(&d, "pair \"%s\" has no trace (its check ended in an error): left out",
                           json_string_value(json_object_get(ix.e[k].entry, "name")));
                missing++;
            }
        cli_flush_diag(&d);
    }
    if (bad || nt + ix.n == (size_t)missing) { /* said above, or nothing left to render */
        if (!bad) fprintf(stderr, "scalify report: no trace to render\n");
        free(idx), free(files), bindex_free(&ix);
        return EXIT_INPUT;
    }
    if (merged && !ni) return free(idx), free(files), usage_error("--merged-index needs index files to merge");
    const char **paths = calloc(nt + ix.n + 1, sizeof *paths);
    size_t np = 0;
    for (size_t k = 0; k < ix.n; k++)
        if (ix.e[k].trace) paths[np++] = ix.e[k].trace;
    for (size_t k = 0; k < nt; k++) paths[np++] = files[k];
    nf = np;
    trace **traces = calloc(nf + 1, sizeof *traces);
    for (size_t i = 0; i < nf; i++) {
        diag d;
        diag_init(&d, paths[i]);
        traces[i] = trace_read_file(paths[i], &d);
        if (!traces[i]) {
            if (!d.count) diag_plain(&d, "could not read the trace");
            bad++;
        }
        cli_flush_diag(&d);
    }
    /* the earlier report: its summary.json, checked before anything renders */
    char *old = NULL;
    size_t old_len = 0;
    strbuf old_path;
    sb_init(&old_path);
    if (compare) {
        struct stat st;
        sb_puts(&old_path, compare);
        if (stat(compare, &st) == 0 && S_ISDIR(st.st_mode)) sb_puts(&old_path, "/summary.json");
        diag d;
        diag_init(&d, old_path.s);
        old = io_read_file(old_path.s, &old_len, NULL, &d);
        rc_diff probe;
        if (old && rc_build(&probe, old, old_len, old_path.s, NULL, 0, NULL, &d)) rc_free(&probe);
        else bad++;
        if (!old && !d.count) diag_plain(&d, "cannot read %s", old_path.s);
        cli_flush_diag(&d);
    }
    int rc = EXIT_VERIFIED;
    if (bad) rc = EXIT_INPUT;
    for (int pass = 0; rc == EXIT_VERIFIED && pass < 2; pass++) {
        if (pass == 0 && !out) continue;
        if (pass == 1 && !single) continue;
        diag d;
        diag_init(&d, pass ? single : out);
        report_opts o = {.title = title, .single_file = pass == 1, .compare_text = old, .compare_len = old_len,
                         .compare_label = compare};
        report_site site;
        if (!report_render(&site, traces, nf, &o, &d)) rc = EXIT_INTERNAL;
        else if (pass == 0 && !report_write_dir(&site, out, &d)) rc = EXIT_INPUT;
        else if (pass == 1 && !io_write_atomic(single, site.files[0].data.s, site.files[0].data.len, &d))
            rc = EXIT_INPUT;
        report_site_free(&site);
        cli_flush_diag(&d);
    }
    /* after the site, so that they may be written into its folder */
    if (rc == EXIT_VERIFIED && merged) {
        diag d;
        diag_init(&d, merged);
        if (!bindex_write(&ix, merged, &d)) rc = EXIT_INPUT;
        cli_flush_diag(&d);
    }
    if (rc == EXIT_VERIFIED && markdown) {
        diag d;
        diag_init(&d, markdown);
        rnames names;
        rn_build(&names, traces, nf);
        rc_diff cmp;
        bool have_cmp = old && rc_build(&cmp, old, old_len, compare, traces, nf, &names, &d);
        report_md_opts mo = {.title = title, .site_url = site_url, .source_url = source_url,
                             .cmp = have_cmp ? &cmp : NULL};
        strbuf md;
        sb_init(&md);
        report_markdown(&md, traces, nf, &names, &mo);
        if (!io_write_atomic(markdown, md.s, md.len, &d)) rc = EXIT_INPUT;
        sb_free(&md);
        if (have_cmp) rc_free(&cmp);
        rn_free(&names);
        cli_flush_diag(&d);
    }
    if (missing && rc < EXIT_INPUT) rc = EXIT_INPUT;
    free(old);
    sb_free(&old_path);
    for (size_t i = 0; i < nf; i++) trace_free(traces[i]);
    free(traces);
    free(paths);
    free(idx);
    bindex_free(&ix);
    free(files);
    return rc;
}
