/* The scalify binary as users run it: exit codes, messages, README examples. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "util.h"

static char *run(int *status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static char *run(int *status, const char *fmt, ...) {
    char cmd[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    return t_run(cmd, status);
}

/* Runs every example command in README.md (lines "    $ scalify ..." or "$ scalify"
 * inside code blocks) whose subcommand this build has (per --help). */
static void readme_examples(void) {
    size_t n;
    char *readme = t_read("README.md", &n);
    t_case("cli README.md present");
    if (!CHECK(readme != NULL)) return;
    int st;
    char *help = run(&st, "%s --help", t_scalify());
    int ran = 0;
    for (char *line = strtok(readme, "\n"); line; line = strtok(NULL, "\n")) {
        while (*line == ' ') line++;
        if (strncmp(line, "$ scalify ", 10) != 0) continue;
        char sub[64] = "";
        sscanf(line + 10, "%63s", sub);
        char needle[80];
        snprintf(needle, sizeof needle, "\n  %s ", sub);
        if (!strstr(help, needle)) continue;
        t_case("cli README example: %s", line + 2);
        char *out = run(&st, "%s %s", t_scalify(), line + 10);
        /* check reports a verdict: 0 verified, 1 mismatch or unverified; never 2 or 3. */
        if (strcmp(sub, "check") == 0) CHECK_MSG(st == 0 || st == 1, "exit %d: %.300s", st, out);
        else CHECK_MSG(st == 0, "exit %d: %.300s", st, out);
        free(out);
        ran++;
    }
    t_case("cli README examples ran");
    CHECK(ran > 0);
    free(help);
    free(readme);
}

void suite_cli(void);
void suite_cli(void) {
    const char *bin = t_scalify();
    int st;
    char *out;

    t_case("cli check warns when it finds no rules");
    {
        char cmd[2048];
        snprintf(cmd, sizeof cmd,
                 "d=$(mktemp -d) && mkdir -p $d/a/b/c && cp %s $d/a/b/c/scalify && "
                 "env -u SCALIFY_RULES $d/a/b/c/scalify check --baseline samples/tiny/tiny.baseline.hlo "
                 "--distributed samples/tiny/tiny.megatron_tp.tp4.dist.hlo "
                 "--relations samples/tiny/tiny.megatron_tp.tp4.relations.json -o $d/t.json; rc=$?; rm -rf $d; exit $rc",
                 bin);
        out = t_run(cmd, &st);
        CHECK_EQ(st, 0);
        CHECK_CONTAINS(out, "warning: no rules/ folder beside the binary");
        free(out);
        snprintf(cmd, sizeof cmd, "%s check --baseline samples/tiny/tiny.baseline.hlo --distributed "
                 "samples/tiny/tiny.megatron_tp.tp4.dist.hlo --relations samples/tiny/tiny.megatron_tp.tp4.relations.json "
                 "-o build/cli-rules.json", bin);
        out = t_run(cmd, &st);
        CHECK_MSG(!strstr(out, "warning: no rules"), "%s", out);
        free(out);
    }

    t_case("cli-1 --help lists commands and exit codes");
    out = run(&st, "%s --help", bin);
    CHECK_EQ(st, 0);
    CHECK_CONTAINS(out, "inspect FILE");
    CHECK_CONTAINS(out, "2  usage error, bad input, or an output that could not be written");
    free(out);

    t_case("cli-2 no arguments / unknown command: usage, exit 2");
    out = run(&st, "%s", bin);
    CHECK_EQ(st, 2);
    free(out);
    out = run(&st, "%s frobnicate", bin);
    CHECK_EQ(st, 2);
    CHECK_CONTAINS(out, "unknown command 'frobnicate'");
    free(out);

    t_case("cli-3 inspect summary");
    out = run(&st, "%s inspect tests/cases/variants.hlo", bin);
    CHECK_EQ(st, 0);
    CHECK_CONTAINS(out, "module        variants");
    CHECK_CONTAINS(out, "devices       4");
    CHECK_CONTAINS(out, "  0 Arg_0.1 f32[8,16]{1,0} sharding={devices=[1,4]<=[4]}");
    CHECK_CONTAINS(out, "ar = all-reduce mode=flattened-id reduction=sum replica_groups={{0,1},{2,3}}");
    CHECK_CONTAINS(out, "cp = collective-permute mode=cross-partition source_target_pairs={{0,1},{1,2},{2,3},{3,0}}");
    free(out);

    t_case("cli-4 inspect --print reads back");
    out = run(&st, "%s inspect --print tests/cases/variants.hlo > build/cli-print.hlo && %s inspect build/cli-print.hlo", bin, bin);
    CHECK_EQ(st, 0);
    CHECK_CONTAINS(out, "module        variants");
    free(out);

    t_case("cli-5 gzip input");
    out = run(&st, "gzip -c tests/cases/variants.hlo > build/cli-variants.hlo.gz && %s inspect build/cli-variants.hlo.gz", bin);
    CHECK_EQ(st, 0);
    CHECK_CONTAINS(out, "module        variants");
    free(out);

    t_case("cli-6 missing file: exit 2, names the file");
    out = run(&st, "%s inspect build/does-not-exist.hlo", bin);
    CHECK_EQ(st, 2);
    CHECK_CONTAINS(out, "build/does-not-exist.hlo: cannot open");
    free(out);

    t_case("cli-7 bad input: file:line:col, the line and a caret, exit 2");
    out = run(&st, "printf 'ENTRY e {\\n  p = f32[2] parameter(0)\\n  ROOT n = f32[2] negate(q)\\n}\\n' > build/cli-bad.hlo && %s inspect build/cli-bad.hlo", bin);
    CHECK_EQ(st, 2);
    CHECK_CONTAINS(out, "build/cli-bad.hlo:3:26: operand 'q' is not defined before its use\n");
    CHECK_CONTAINS(out, "    ROOT n = f32[2] negate(q)\n");
    CHECK_CONTAINS(out, "                           ^\n");
    free(out);

    t_case("cli-8 garbage binary input: clean error, exit 2");
    out = run(&st, "head -c 3000 /dev/urandom > build/cli-garbage.pb; printf '\\x0a\\x05' | cat - build/cli-garbage.pb > build/cli-garbage2.pb; %s inspect build/cli-garbage2.pb", bin);
    CHECK_EQ(st, 2);
    CHECK_CONTAINS(out, "build/cli-garbage2.pb:");
    free(out);

    t_case("cli-9 unknown option");
    out = run(&st, "%s inspect --frob tests/cases/variants.hlo", bin);
    CHECK_EQ(st, 2);
    free(out);

    t_case("cli-10 check: bad relations give exit 2 with a clear message");
    out = run(&st, "%s check --baseline samples/tiny/tiny.baseline.hlo --distributed samples/tiny/tiny.megatron_tp.tp4.dist.hlo "
                   "--relations tests/cases/relations/missing-param.json", bin);
    CHECK_EQ(st, 2);
    CHECK_CONTAINS(out, "tests/cases/relations/missing-param.json");
    free(out);
    out = run(&st, "%s check --baseline samples/tiny/tiny.baseline.hlo --distributed samples/tiny-moe/tiny-moe.router_grad_sp.tp4.dist.hlo "
                   "--relations samples/tiny/tiny.megatron_tp.tp4.relations.json", bin);
    CHECK_EQ(st, 2);
    CHECK_CONTAINS(out, "parameters must correspond one to one");
    free(out);
    out = run(&st, "%s check --baseline samples/tiny/tiny.baseline.hlo --distributed samples/tiny/tiny.megatron_tp.tp4.dist.hlo", bin);
    CHECK_EQ(st, 2);
    free(out);

    /* Limits of ours, said as such: a tuple parameter, a rank above the views'. */
    {
        static const char *const mods[2][2] = {
            {"build/cli-tuple.hlo", "HloModule m\n\nENTRY e {\n  t = (f32[2], f32[3]) parameter(0)\n"
                                    "  ROOT r = f32[2] get-tuple-element(t), index=0\n}\n"},
            {"build/cli-rank.hlo", "HloModule m\n\nENTRY e {\n  a = f32[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,2] parameter(0)\n"
                                   "  ROOT r = f32[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,2] negate(a)\n}\n"}};
        static const char *const want[2] = {"parameter 0 (t) is a tuple", "parameter 0 (a) has rank 18"};
        for (int k = 0; k < 2; k++) {
            FILE *f = fopen(mods[k][0], "w");
            if (!CHECK(f)) continue;
            fputs(mods[k][1], f);
            fclose(f);
            out = run(&st, "%s check --baseline %s --distributed %s --auto-relations", bin, mods[k][0], mods[k][0]);
            CHECK_EQ(st, 2);
            CHECK_CONTAINS(out, want[k]);
            free(out);
        }
    }

    t_case("cli-11 check: a verdict is the exit code");
    out = run(&st, "%s check --baseline samples/tiny-moe/tiny-moe-router-step.baseline.hlo --distributed "
                   "samples/tiny-moe/tiny-moe.router_grad_sp.tp4.dist.hlo --relations samples/tiny-moe/tiny-moe.router_grad_sp.tp4.relations.json "
                   "-o build/cli-check.json", bin);
    CHECK_EQ(st, 0);
    CHECK_CONTAINS(out, "verified");
    free(out);
    out = run(&st, "%s check --baseline samples/tiny/tiny.baseline.hlo --distributed samples/tiny/tiny.megatron_tp.tp4.bug.missing-allreduce.dist.hlo "
                   "--relations samples/tiny/tiny.megatron_tp.tp4.bug.missing-allreduce.relations.json -o build/cli-check.json", bin);
    CHECK_EQ(st, 1);
    CHECK_CONTAINS(out, "mismatch");
    free(out);

    t_case("cli-13 check --manifest: pairs checked at once give what one at a time gives");
    {
        free(run(&st, "mkdir -p build/cli-batch"));
        FILE *f = fopen("build/cli-batch/garbage.hlo", "w");
        if (CHECK(f)) {
            fputs("this is not an HLO module\n", f);
            fclose(f);
        }
        f = fopen("build/cli-batch/manifest.json", "w");
        if (CHECK(f)) {
            fputs("{\"pairs\": [\n"
                  " {\"name\": \"ok\", \"expected\": \"verified\", \"baseline\": {\"hlo\": \"../../samples/tiny/tiny.baseline.hlo\"},"
                  "  \"distributed\": {\"hlo\": \"../../samples/tiny/tiny.megatron_tp.tp4.dist.hlo\"},"
                  "  \"relations\": \"../../samples/tiny/tiny.megatron_tp.tp4.relations.json\"},\n"
                  " {\"name\": \"bad-input\", \"expected\": \"verified\", \"baseline\": {\"hlo\": \"../../samples/tiny/tiny.baseline.hlo\"},"
                  "  \"distributed\": {\"hlo\": \"garbage.hlo\"}, \"relations\": \"../../samples/tiny/tiny.megatron_tp.tp4.relations.json\"},\n"
                  " {\"name\": \"bug\", \"expected\": \"mismatch\", \"baseline\": {\"hlo\": \"../../samples/tiny/tiny.baseline.hlo\"},"
                  "  \"distributed\": {\"hlo\": \"../../samples/tiny/tiny.megatron_tp.tp4.bug.missing-allreduce.dist.hlo\"},"
                  "  \"relations\": \"../../samples/tiny/tiny.megatron_tp.tp4.bug.missing-allreduce.relations.json\"}\n]}\n",
                  f);
            fclose(f);
        }
        char *outs[2], *idx[2];
        for (int k = 0; k < 2; k++) {
            outs[k] = run(&st, "rm -rf build/cli-batch/out%d && %s check -j %d --manifest build/cli-batch/manifest.json "
                               "--out-dir build/cli-batch/out%d", k, bin, k ? 3 : 1, k);
            CHECK_MSG(st == 2, "-j %d: exit %d (a bad input in the batch)", k ? 3 : 1, st);
            char path[64];
            snprintf(path, sizeof path, "build/cli-batch/out%d/index.json", k);
            idx[k] = t_read(path, NULL);
        }
        CHECK_STR(outs[0], outs[1]);
        CHECK(idx[0] && idx[1] && strcmp(idx[0], idx[1]) == 0);
        CHECK_CONTAINS(outs[1], "build/cli-batch/garbage.hlo:1:6: expected");
        if (idx[1]) {
            CHECK_CONTAINS(idx[1], "\"name\": \"ok\",\n   \"verdict\": \"verified\"");
            CHECK_CONTAINS(idx[1], "\"name\": \"bad-input\",\n   \"verdict\": \"error\"");
            CHECK_CONTAINS(idx[1], "\"name\": \"bug\",\n   \"verdict\": \"mismatch\"");
        }
        CHECK(access("build/cli-batch/out1/ok.trace.json", F_OK) == 0);
        /* A pair of a batch reads on one thread; alone with -j 2, on two: the trace says which. */
        char *t1 = t_read("build/cli-batch/out1/ok.trace.json", NULL);
        CHECK(t1 && strstr(t1, "\"threads\": 1"));
        free(t1);
        free(run(&st, "%s check -j 2 --baseline samples/tiny/tiny.baseline.hlo --distributed samples/tiny/tiny.megatron_tp.tp4.dist.hlo "
                      "--relations samples/tiny/tiny.megatron_tp.tp4.relations.json -o build/cli-batch/alone.json", bin));
        t1 = t_read("build/cli-batch/alone.json", NULL);
        CHECK(st == 0 && t1 && strstr(t1, "\"threads\": 2"));
        free(t1);
        CHECK(access("build/cli-batch/out1/bad-input.trace.json", F_OK) != 0);
        for (int k = 0; k < 2; k++) free(outs[k]), free(idx[k]);
    }

    t_case("cli-14 check --manifest: a pair name used twice, or that cannot name a file, is refused");
    {
        FILE *f = fopen("build/cli-batch/dup.json", "w");
        if (CHECK(f)) {
            const char *pair = "{\"name\": \"%s\", \"baseline\": {\"hlo\": \"../../samples/tiny/tiny.baseline.hlo\"}, "
                               "\"distributed\": {\"hlo\": \"../../samples/tiny/tiny.megatron_tp.tp4.dist.hlo\"}, "
                               "\"relations\": \"../../samples/tiny/tiny.megatron_tp.tp4.relations.json\"}";
            fputs("{\"pairs\": [", f);
            fprintf(f, pair, "same");
            fputs(",", f);
            fprintf(f, pair, "same");
            fputs(",", f);
            fprintf(f, pair, "a/b");
            fputs("]}\n", f);
            fclose(f);
        }
        out = run(&st, "rm -rf build/cli-batch/dupout && %s check --manifest build/cli-batch/dup.json --out-dir build/cli-batch/dupout", bin);
        CHECK_EQ(st, 2);
        CHECK_CONTAINS(out, "pair 1: the name \"same\" is another pair's too");
        CHECK_CONTAINS(out, "pair 2: the name \"a/b\" cannot name a trace file");
        free(out);
        CHECK(access("build/cli-batch/dupout/same.trace.json", F_OK) == 0);
    }

    t_case("cli-12 every command answers --help with its own usage, exit 0");
    static const char *const cmds[] = {"inspect", "check", "report", "rules", "eval"};
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
        char want[64];
        snprintf(want, sizeof want, "usage: scalify %s", cmds[i]);
        out = run(&st, "%s %s --help", bin, cmds[i]);
        CHECK_EQ(st, 0);
        CHECK_CONTAINS(out, want);
        free(out);
    }

    readme_examples();
}
