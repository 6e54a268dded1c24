/* scalify as an installed tool: make install/uninstall into a temporary
 * prefix, --version, --help and the man page covering every option the
 * argument parsers accept, report --markdown (golden), check --shard and the
 * merge of shard indexes by report, and the JAX exporter's own tests where
 * a Python with JAX is at hand.
 *
 * The Markdown goldens are tests/cases/traces/golden/summary*.md; after an
 * intended change:   SCALIFY_UPDATE_GOLDEN=1 build/run-tests tooling
 * and review the diff. */
#include <cmark.h>
#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "util.h"

#define TRACES "tests/cases/traces"
#define WORK "build/tooling"
#define PAIR                                                                                          \
    "--baseline $R/samples/tiny/tiny.baseline.hlo --distributed "                                     \
    "$R/samples/tiny/tiny.megatron_tp.tp4.bug.missing-allreduce.dist.hlo --relations "                \
    "$R/samples/tiny/tiny.megatron_tp.tp4.bug.missing-allreduce.relations.json --name tiny-bug"

static char *run(int *status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static char *run(int *status, const char *fmt, ...) {
    strbuf cmd;
    sb_init(&cmd);
    va_list ap;
    va_start(ap, fmt);
    sb_vprintf(&cmd, fmt, ap);
    va_end(ap);
    char *out = t_run(cmd.s, status);
    sb_free(&cmd);
    return out;
}

/* opt occurs in hay as a whole option: not inside a longer one. */
static bool has_option(const char *hay, const char *opt) {
    size_t n = strlen(opt);
    for (const char *p = hay; (p = strstr(p, opt)); p++) {
        bool left = p == hay || !(isalnum((unsigned char)p[-1]) || p[-1] == '-');
        bool right = !(isalnum((unsigned char)p[n]) || p[n] == '-');
        if (left && right) return true;
    }
    return false;
}

/* The options a parser compares its arguments with: every string literal
 * starting with '-' passed to strcmp in src. Appends them to v (owned). */
static size_t parser_options(const char *src, char **v, size_t max) {
    size_t n = 0;
    for (const char *p = src; (p = strstr(p, "strcmp(")) && n < max; p++) {
        const char *close = strchr(p, ')');
        const char *q = strstr(p, ", \"-");
        if (!q || !close || q > close) continue;
        q += 3;
        const char *end = strchr(q, '"');
        if (!end || end - q < 2) continue;
        char *opt = strndup(q, (size_t)(end - q));
        bool dup = false;
        for (size_t k = 0; k < n; k++) dup |= !strcmp(v[k], opt);
        if (dup) free(opt);
        else v[n++] = opt;
    }
    return n;
}

/* The man page as plain text: roff's \- is a hyphen. */
static char *man_text(void) {
    char *m = t_read("docs/scalify.1", NULL);
    if (!m) return NULL;
    char *w = m;
    for (const char *r = m; *r; r++) {
        if (r[0] == '\\' && r[1] == '-') continue;
        *w++ = *r;
    }
    *w = 0;
    return m;
}

static void help_and_man(const char *bin) {
    static const char *const files[][2] = {{"src/main.c", ""},           {"src/cli_inspect.c", "inspect"},
                                           {"src/cli_check.c", "check"},  {"src/cli_report.c", "report"},
                                           {"src/cli_rules.c", "rules"},  {"src/cli_eval.c", "eval"}};
    char *man = man_text();
    t_case("tooling-help man page present");
    if (!CHECK(man != NULL)) return;
    size_t total = 0;
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        char *src = t_read(files[i][0], NULL);
        t_case("tooling-help %s readable", files[i][0]);
        if (!CHECK(src != NULL)) continue;
        char *opts[64];
        size_t n = parser_options(src, opts, 64);
        int st;
        char *help = run(&st, "%s %s --help", bin, files[i][1]);
        t_case("tooling-help scalify %s --help", files[i][1]);
        CHECK_EQ(st, 0);
        for (size_t k = 0; k < n; k++) {
            t_case("tooling-help %s: %s", files[i][0], opts[k]);
            CHECK_MSG(has_option(help, opts[k]), "`scalify %s --help` does not mention %s", files[i][1], opts[k]);
            CHECK_MSG(has_option(man, opts[k]), "docs/scalify.1 does not mention %s", opts[k]);
            free(opts[k]);
        }
        total += n;
        /* each command has its section in the man page */
        if (*files[i][1]) {
            char sect[64];
            snprintf(sect, sizeof sect, "\n.B %s", files[i][1]);
            CHECK_MSG(strstr(man, sect) != NULL, "docs/scalify.1 has no .B %s", files[i][1]);
        }
        free(help);
        free(src);
    }
    /* the extraction itself works: the parsers accept far more than a handful */
    t_case("tooling-help options found");
    CHECK_MSG(total >= 30, "only %zu options found in the parsers", total);
    free(man);
}

static void version(const char *bin) {
    int st;
    t_case("tooling-version prints version, rules digest and data folder");
    char *a = run(&st, "%s --version", bin);
    CHECK_EQ(st, 0);
    CHECK_CONTAINS(a, "scalify 0.1.0\n");
    CHECK_CONTAINS(a, "rules: ");
    CHECK_CONTAINS(a, "/rules (");
    CHECK_CONTAINS(a, "data: ");
    char *b = run(&st, "%s -V", bin);
    CHECK_STR(a, b);
    /* the digest is what a check's trace records with the same rules */
    char *tr = run(&st, "R=$PWD; %s check " PAIR " -o " WORK "/v.trace.json >/dev/null 2>&1; "
                        "sed -n 's/.*\"rules_digest\": \"\\(sha256:[0-9a-f]*\\)\".*/\\1/p' " WORK "/v.trace.json",
                   bin);
    char *nl = strchr(tr, '\n');
    if (nl) *nl = 0;
    CHECK_MSG(strlen(tr) == 7 + 64, "no digest in the trace: %s", tr);
    CHECK_CONTAINS(a, tr);
    /* another rules folder, another digest; the same files elsewhere, the same */
    char *c = run(&st, "d=" WORK "/rules-copy; rm -rf $d; cp -r rules $d; SCALIFY_RULES=$d %s --version; "
                       "echo '# x' >> $d/arith.rules; SCALIFY_RULES=$d %s --version",
                  bin, bin);
    CHECK_CONTAINS(c, tr);
    char *second = strstr(c, "scalify 0.1.0\n");
    second = second ? strstr(second + 1, "scalify 0.1.0\n") : NULL;
    CHECK_MSG(second && !strstr(second, tr), "editing a rule did not change the digest: %s", c);
    free(a), free(b), free(c), free(tr);
}

/* The markdown of the four fixture traces, compared with its golden. */
static void golden(const char *file, const char *golden_name) {
    char path[256];
    snprintf(path, sizeof path, TRACES "/golden/%s", golden_name);
    size_t n = 0;
    char *got = t_read(file, &n);
    t_case("tooling-markdown %s", golden_name);
    if (!CHECK_MSG(got != NULL, "%s not written", file)) return;
    if (getenv("SCALIFY_UPDATE_GOLDEN")) {
        FILE *o = fopen(path, "wb");
        CHECK_MSG(o != NULL, "cannot write %s", path);
        if (o) fwrite(got, 1, n, o), fclose(o);
        free(got);
        return;
    }
    size_t wn = 0;
    char *want = t_read(path, &wn);
    CHECK_MSG(want && wn == n && !memcmp(want, got, n),
              "%s differs from %s (review, then SCALIFY_UPDATE_GOLDEN=1 build/run-tests tooling)", file, path);
    free(want);
    free(got);
}

static void markdown(const char *bin) {
    int st;
    const char *all = TRACES "/verified.trace.json " TRACES "/mismatch.trace.json " TRACES
                             "/unverified.trace.json " TRACES "/escaping.trace.json";
    char *out = run(&st, "mkdir -p " WORK " && %s report %s --markdown " WORK "/summary.md", bin, all);
    t_case("tooling-markdown alone, links relative");
    CHECK_MSG(st == 0, "exit %d: %s", st, out);
    free(out);
    golden(WORK "/summary.md", "summary.md");
    /* with a site URL and source links, against an earlier report holding
     * only two of the traces: the others' findings are new */
    out = run(&st,
              "%s report " TRACES "/verified.trace.json " TRACES "/unverified.trace.json -o " WORK "/old-site && "
              "%s report %s -o " WORK "/site --compare " WORK "/old-site --markdown " WORK "/compare.md "
              "--site-url 'https://ci.example.org/job 1/site/' --source-url https://github.com/o/r/blob/abc",
              bin, bin, all);
    t_case("tooling-markdown --compare --site-url --source-url");
    CHECK_MSG(st == 0, "exit %d: %s", st, out);
    free(out);
    golden(WORK "/compare.md", "summary-compare.md");
    char *md = t_read(WORK "/compare.md", NULL);
    char *site = t_read(WORK "/site/index.html", NULL);
    t_case("tooling-markdown links name pages the site has");
    CHECK_CONTAINS(md, "](https://ci.example.org/job%201/site/index.html)");
    size_t links = 0;
    for (const char *p = md ? md : ""; (p = strstr(p, "/site/")); p++) {
        const char *page = p + 6, *end = strchr(page, ')');
        if (!end || strncmp(end - 5, ".html", 5)) continue;
        char path[512];
        snprintf(path, sizeof path, WORK "/site/%.*s", (int)(end - page), page);
        FILE *f = fopen(path, "r");
        CHECK_MSG(f != NULL, "the summary links %s, which the site lacks", path);
        if (f) fclose(f);
        links++;
    }
    CHECK_MSG(links >= 5, "only %zu links into the site", links);
    /* nothing hostile from escaping.trace.json survives as markup */
    t_case("tooling-markdown escapes trace strings");
    CHECK(md != NULL);
    for (const char *p = md ? md : ""; *p; p++)
        if (strchr("<>&", *p)) CHECK_MSG(p > md && p[-1] == '\\', "unescaped %c in: %.60s", *p, p > md + 20 ? p - 20 : md);
    /* rendered as CommonMark with raw HTML allowed, no tag comes from a trace */
    if (md) {
        char *html = cmark_markdown_to_html(md, strlen(md), CMARK_OPT_UNSAFE);
        CHECK_MSG(!strstr(html, "<script") && !strstr(html, "</svg") && !strstr(html, "<evil"), "%s", html);
        CHECK_CONTAINS(html, "&lt;script&gt;");
        free(html);
    }
    /* deterministic: the same inputs give the same bytes */
    out = run(&st, "%s report %s --markdown " WORK "/again.md && cmp " WORK "/summary.md " WORK "/again.md", bin, all);
    t_case("tooling-markdown deterministic");
    CHECK_MSG(st == 0, "%s", out);
    free(out), free(md), free(site);
    /* an unwritable target: exit 2, nothing left behind */
    out = run(&st, "%s report %s --markdown " WORK "/no/such/dir/s.md", bin, all);
    t_case("tooling-markdown unwritable: exit 2");
    CHECK_EQ(st, 2);
    free(out);
    /* into the site's own folder, which the same call creates */
    out = run(&st, "rm -rf " WORK "/new-site && %s report %s -o " WORK "/new-site --markdown " WORK
                   "/new-site/summary.md && test -s " WORK "/new-site/index.html && cmp " WORK "/summary.md " WORK
                   "/new-site/summary.md", bin, all);
    t_case("tooling-markdown inside the site it renders");
    CHECK_MSG(st == 0, "%s", out);
    free(out);
}

static void shard(const char *bin) {
    int st;
    const char *m = "samples/manifest.json";
    char *out = run(&st, "rm -rf " WORK "/one " WORK "/sh && %s check --manifest %s --out-dir " WORK "/one -j 2 "
                         ">/dev/null 2>&1; echo rc=$?",
                    bin, m);
    t_case("tooling-shard one whole run");
    CHECK_MSG(strstr(out, "rc=1\n") != NULL, "the samples' bugs make check exit 1: %s", out);
    free(out);
    char *codes = run(&st,
                      "for k in 0 1 2; do %s check --manifest %s --out-dir " WORK "/sh --shard $k/3 -j 2 >/dev/null "
                      "2>&1; echo rc=$?; done",
                      bin, m);
    t_case("tooling-shard three shards run");
    CHECK_MSG(strstr(codes, "rc=2") == NULL && strstr(codes, "rc=3") == NULL, "%s", codes);
    /* every pair of one run is in exactly one shard */
    out = run(&st, "cat " WORK "/sh/index.*-of-3.json | grep -c '\"name\"'; grep -c '\"name\"' " WORK "/one/index.json");
    int a = -1, b = -2;
    t_case("tooling-shard pairs split without loss");
    CHECK_MSG(sscanf(out, "%d %d", &a, &b) == 2 && a == b && a > 30, "%s", out);
    free(out);
    out = run(&st, "%s report " WORK "/sh/index.2-of-3.json " WORK "/sh/index.0-of-3.json " WORK
                   "/sh/index.1-of-3.json --merged-index " WORK "/sh/index.json --markdown " WORK "/sh.md && "
                   "cmp " WORK "/one/index.json " WORK "/sh/index.json && "
                   "%s report " WORK "/one/index.json --markdown " WORK "/one.md && cmp " WORK "/one.md " WORK "/sh.md",
              bin, bin);
    t_case("tooling-shard merged index and summary equal one run's");
    CHECK_MSG(st == 0, "%s", out);
    free(out);
    out = run(&st, "%s report " WORK "/sh/index.0-of-3.json " WORK "/sh/index.2-of-3.json --markdown " WORK "/x.md",
              bin);
    t_case("tooling-shard a missing shard is an error");
    CHECK_EQ(st, 2);
    CHECK_CONTAINS(out, "shard 1/3 is missing");
    free(out);
    out = run(&st, "%s report " WORK "/sh/index.*-of-3.json " WORK "/sh/index.0-of-3.json --markdown " WORK "/x.md",
              bin);
    t_case("tooling-shard a shard given twice is an error");
    CHECK_EQ(st, 2);
    CHECK_CONTAINS(out, "given twice");
    free(out);
    out = run(&st, "%s report " WORK "/sh/index.*-of-3.json " WORK "/one/index.json --markdown " WORK "/x.md", bin);
    t_case("tooling-shard shards and a whole index do not mix");
    CHECK_EQ(st, 2);
    free(out);
    /* a pair whose check failed has no trace: the others are rendered, exit 2 */
    out = run(&st, "mkdir -p " WORK "/err && cp " TRACES "/mismatch.trace.json " WORK "/err/m.trace.json && "
                   "printf '{\"pairs\": [{\"name\": \"gone\", \"verdict\": \"error\"}, {\"name\": \"m\", "
                   "\"verdict\": \"mismatch\", \"trace\": \"m.trace.json\"}]}' > " WORK "/err/index.json && "
                   "rm -f " WORK "/err.md; %s report " WORK "/err/index.json --markdown " WORK "/err.md; "
                   "echo rc=$?; grep -c 'pmean-allreduce' " WORK "/err.md",
              bin);
    t_case("tooling-shard an index pair without a trace: the rest rendered, exit 2");
    CHECK_CONTAINS(out, "pair \"gone\" has no trace");
    CHECK_CONTAINS(out, "rc=2\n");
    CHECK_MSG(!strstr(out, "\n0\n"), "%s", out);
    free(out);
    out = run(&st, "printf '{\"pairs\": []}' > " WORK "/err/empty.json && %s report " WORK "/err/empty.json -o " WORK
                   "/err/site", bin);
    t_case("tooling-shard an empty index: nothing to render, exit 2");
    CHECK_EQ(st, 2);
    CHECK_CONTAINS(out, "no trace to render");
    free(out);
    static const char *const bad[] = {"3/3", "-1/2", "1/0", "x", "1/", "/2", "0/2x", ""};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        out = run(&st, "%s check --manifest %s --out-dir " WORK "/bad --shard '%s'", bin, m, bad[i]);
        t_case("tooling-shard --shard '%s' refused", bad[i]);
        CHECK_EQ(st, 2);
        CHECK_CONTAINS(out, "--shard needs");
        free(out);
    }
    out = run(&st, "R=$PWD; %s check " PAIR " --shard 0/2", bin);
    t_case("tooling-shard needs --manifest");
    CHECK_EQ(st, 2);
    CHECK_CONTAINS(out, "--shard needs --manifest");
    free(out);
    free(codes);
}

/* make install into a temporary prefix, used from elsewhere, moved, then
 * make uninstall: only what install put there goes. */
static void install(const char *rel_bin) {
    char *bin = realpath(rel_bin, NULL);
    t_case("tooling-install the binary under test exists");
    if (!CHECK_MSG(bin != NULL, "%s", rel_bin)) return;
    const char *slash = strrchr(bin, '/');
    char build[512];
    snprintf(build, sizeof build, "%.*s", slash ? (int)(slash - bin) : 1, slash ? bin : ".");
    int st;
    char *out = run(&st,
                    "R=$PWD; T=$(mktemp -d) && echo $T > " WORK "/install-tmp && mkdir -p $T/p/bin && "
                    "echo keep > $T/p/bin/other-tool && "
                    "make -s --no-print-directory install PREFIX=$T/p BUILD=%s >/dev/null && "
                    "find $T/p -type f | sed \"s|^$T/p/||\" | sort",
                    build);
    char *tmp = t_read(WORK "/install-tmp", NULL);
    if (tmp) tmp[strcspn(tmp, "\n")] = 0;
    t_case("tooling-install puts binary, data and man page under PREFIX");
    CHECK_MSG(st == 0, "%s", out);
    CHECK_CONTAINS(out, "bin/scalify\n");
    CHECK_CONTAINS(out, "share/man/man1/scalify.1\n");
    CHECK_CONTAINS(out, "share/scalify/rules/arith.rules\n");
    CHECK_CONTAINS(out, "share/scalify/templates/page.html\n");
    CHECK_CONTAINS(out, "share/scalify/templates/findings/missing-all-reduce.md\n");
    CHECK_CONTAINS(out, "share/scalify/assets/report.css\n");
    free(out);
    if (!tmp) return free(bin);

    /* from another folder, no checkout in sight, no environment pointing at it */
    const char *env = "env -u SCALIFY_RULES -u SCALIFY_HOME";
    out = run(&st,
              "R=$PWD; cd %s && %s p/bin/scalify --version && %s p/bin/scalify check " PAIR
              " -o inst.trace.json; echo rc=$?; %s p/bin/scalify report inst.trace.json -o site --markdown inst.md",
              tmp, env, env, env);
    t_case("tooling-install the installed binary works from elsewhere");
    CHECK_MSG(st == 0, "%s", out);
    CHECK_CONTAINS(out, "/p/share/scalify/rules (");
    CHECK_CONTAINS(out, "/p/share/scalify\n");
    CHECK_CONTAINS(out, "rc=1");
    CHECK_MSG(!strstr(out, "warning: no rules"), "%s", out);
    free(out);
    /* the same check in the tree: the same verdict, findings, rules digest, summary */
    out = run(&st,
              "R=$PWD; %s check " PAIR " -o %s/tree.trace.json 2>/dev/null; cd %s && %s report tree.trace.json --markdown tree.md; "
              "cmp tree.md inst.md && for f in tree inst; do grep -E '\"(verdict|rules_digest|kind)\"' $f.trace.json "
              "> $f.keys; done && cmp tree.keys inst.keys && test -s site/index.html && ls site | grep -c '^finding-'",
              bin, tmp, tmp, bin);
    t_case("tooling-install matches the in-tree result");
    CHECK_MSG(st == 0, "%s", out);
    CHECK_MSG(atoi(out) >= 1, "no finding page in the installed binary's site: %s", out);
    free(out);
    /* a folder that happens to be called rules/ near the binary is not its data */
    out = run(&st, "cd %s && mkdir -p p/rules && %s p/bin/scalify --version; rmdir p/rules", tmp, env);
    t_case("tooling-install a stray rules/ folder is not taken for the data");
    CHECK_CONTAINS(out, "/p/share/scalify/rules (");
    free(out);
    /* a moved tree still works: nothing about PREFIX is compiled in */
    out = run(&st, "R=$PWD; cd %s && mv p q && %s q/bin/scalify check " PAIR " -o moved.json 2>&1; echo rc=$?; mv q p",
              tmp, env);
    t_case("tooling-install the tree can be moved");
    CHECK_CONTAINS(out, "rc=1");
    CHECK_MSG(!strstr(out, "warning: no rules"), "%s", out);
    free(out);

    out = run(&st, "make -s --no-print-directory uninstall PREFIX=%s/p BUILD=%s >/dev/null && find %s/p | sed 's|^%s/||' | sort",
              tmp, build, tmp, tmp);
    t_case("tooling-uninstall removes exactly what install put there");
    CHECK_MSG(st == 0, "%s", out);
    CHECK_STR(out, "p\np/bin\np/bin/other-tool\np/share\np/share/man\np/share/man/man1\n");
    free(out);

    /* DESTDIR stages under another root; uninstall with the same pair */
    out = run(&st,
              "make -s --no-print-directory install DESTDIR=%s/stage PREFIX=/opt/scalify BUILD=%s >/dev/null && "
              "test -x %s/stage/opt/scalify/bin/scalify && test -f %s/stage/opt/scalify/share/scalify/rules/dot.rules && "
              "make -s --no-print-directory uninstall DESTDIR=%s/stage PREFIX=/opt/scalify BUILD=%s >/dev/null && "
              "find %s/stage -type f | wc -l",
              tmp, build, tmp, tmp, tmp, build, tmp);
    t_case("tooling-install DESTDIR");
    CHECK_MSG(st == 0, "%s", out);
    CHECK_EQ(atoi(out), 0);
    free(out);
    free(run(&st, "rm -rf %s", tmp));
    free(tmp);
    free(bin);
}

/* Every make and scalify line of docs/CI.md is in tests/ci_recipes.sh, which
 * runs them on the samples. */
static void ci_recipes(const char *bin) {
    char *doc = t_read("docs/CI.md", NULL), *script = t_read("tests/ci_recipes.sh", NULL);
    t_case("tooling-ci docs/CI.md and tests/ci_recipes.sh present");
    if (!CHECK(doc && script)) return free(doc), free(script);
    size_t lines = 0;
    for (char *l = strtok(doc, "\n"); l; l = strtok(NULL, "\n")) {
        while (*l == ' ') l++;
        if (!strncmp(l, "- ", 2)) l += 2;
        if (!strncmp(l, "run: ", 5)) l += 5;
        if (strncmp(l, "scalify ", 8) && strncmp(l, "make ", 5)) continue;
        t_case("tooling-ci recipe line: %.120s", l);
        CHECK_MSG(strstr(script, l) != NULL, "not run by tests/ci_recipes.sh");
        lines++;
    }
    t_case("tooling-ci recipe lines found");
    CHECK_MSG(lines >= 8, "%zu", lines);
    const char *slash = strrchr(bin, '/');
    int st;
    char *out = run(&st, "BUILD=%.*s bash tests/ci_recipes.sh", slash ? (int)(slash - bin) : 1, slash ? bin : ".");
    t_case("tooling-ci tests/ci_recipes.sh runs the recipes");
    CHECK_MSG(st == 0, "%s", out);
    CHECK_CONTAINS(out, "ci_recipes: ok");
    free(out), free(doc), free(script);
}

/* The JAX exporter (python/scalify_jax) against this binary, where a Python
 * with JAX is at hand ($JAX_PYTHON, else python3): its tests export pairs,
 * check and render them. Elsewhere skipped, and said so. */
static void jax_exporter(const char *bin) {
    const char *py = getenv("JAX_PYTHON");
    if (!py || !*py) py = "python3";
    int st;
    free(run(&st, "%s -c 'import jax' >/dev/null 2>&1", py));
    if (st != 0) {
        printf("tooling: the JAX exporter's tests skipped: %s cannot import jax (make test-jax JAX_PYTHON=..., "
               "or JAX_PYTHON=... make test)\n", py);
        return;
    }
    char *out = run(&st, "SCALIFY=%s %s -m unittest discover -s python/tests 2>&1", bin, py);
    t_case("tooling-jax the exporter's tests pass with %s", py);
    CHECK_MSG(st == 0, "%s", out);
    CHECK_CONTAINS(out, "OK");
    free(out);
}

void suite_tooling(void);
void suite_tooling(void) {
    const char *bin = t_scalify();
    int st;
    free(run(&st, "mkdir -p " WORK));
    help_and_man(bin);
    version(bin);
    markdown(bin);
    shard(bin);
    install(bin);
    ci_recipes(bin);
    jax_exporter(bin);
}
