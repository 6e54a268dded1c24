/* Round trip: text → IR → text → IR gives identical IR, and printing is stable,
 * for every file of tests/cases (tests/cases/xla: real files from XLA's
 * repository) and samples/. */
#define _XOPEN_SOURCE 700
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "hlo.h"
#include "util.h"

static char **files;
static size_t nfiles, capfiles;

static bool ends_with(const char *s, const char *suf) {
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && strcmp(s + a - b, suf) == 0;
}

static int collect(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st;
    (void)ftw;
    if (flag == FTW_F && (ends_with(path, ".hlo") || ends_with(path, ".hlo.gz") || ends_with(path, ".hlo.txt"))) {
        if (nfiles + 1 >= capfiles) files = xrealloc(files, (capfiles = capfiles ? capfiles * 2 : 64) * sizeof *files);
        files[nfiles++] = strdup(path);
    }
    return 0;
}

static int by_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Every HLO text file the tests know of, sorted; caller frees with t_free_list. */
char **t_hlo_text_files(void);
char **t_hlo_text_files(void) {
    files = NULL;
    nfiles = capfiles = 0;
    const char *roots[] = {"tests/cases", "samples"};
    for (size_t i = 0; i < ARRAY_LEN(roots); i++) nftw(roots[i], collect, 16, FTW_PHYS);
    if (files) qsort(files, nfiles, sizeof *files, by_name);
    files = xrealloc(files, (nfiles + 1) * sizeof *files);
    files[nfiles] = NULL;
    return files;
}

void suite_roundtrip(void);
void suite_roundtrip(void) {
    char **list = t_hlo_text_files();
    size_t corpus = 0, total = 0;
    for (char **f = list; *f; f++) {
        total++;
        corpus += strncmp(*f, "tests/cases/xla/", 16) == 0;
        t_case("roundtrip %s", *f);
        diag d;
        diag_init(&d, *f);
        hlo_module *a = hlo_read_file(*f, &d);
        if (!CHECK_MSG(a != NULL, "%s", d.out.s ? d.out.s : "")) {
            diag_free(&d);
            continue;
        }
        strbuf t1, t2;
        sb_init(&t1);
        sb_init(&t2);
        hlo_print(&t1, a);
        hlo_module *b = hlo_parse_text(t1.s, t1.len, "printed", &d);
        if (CHECK_MSG(b != NULL, "%s", d.out.s ? d.out.s : "")) {
            strbuf why;
            sb_init(&why);
            CHECK_MSG(graph_equal(a, b, 0, &why), "%s", why.s ? why.s : "");
            sb_free(&why);
            hlo_print(&t2, b);
            CHECK_MSG(t1.len == t2.len && memcmp(t1.s, t2.s, t1.len) == 0, "printing is not stable");
        }
        graph_free(a);
        graph_free(b);
        sb_free(&t1);
        sb_free(&t2);
        diag_free(&d);
    }
    t_case("roundtrip corpus present");
    if (corpus == 0) printf("note: tests/cases/xla not found; its files were not round-tripped\n");
    CHECK(total > 0);
    t_free_list(list);
}
