/* scalify report TRACE... -o DIR [--single-file FILE] [--title T] [--templates DIR] [--compare OLD] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "io.h"
#include "report.h"
#include "report_compare.h"
#include "scalify.h"
#include "template.h"
#include "trace_read.h"

const char cli_report_usage[] =
    "usage: scalify report TRACE... -o DIR [--single-file FILE] [--title T] [--templates DIR] [--compare OLD]\n"
    "  writes DIR/index.html, a page per pair and per finding, summary.json,\n"
    "  results.sarif and junit.xml; --single-file also bundles every page into FILE.\n"
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
    if (!out && !single) return free(files), usage_error("-o DIR or --single-file FILE is required");

    trace **traces = calloc(nf + 1, sizeof *traces);
    int bad = 0;
    for (size_t i = 0; i < nf; i++) {
        diag d;
        diag_init(&d, files[i]);
        traces[i] = trace_read_file(files[i], &d);
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
    free(old);
    sb_free(&old_path);
    for (size_t i = 0; i < nf; i++) trace_free(traces[i]);
    free(traces);
    free(files);
    return rc;
}
