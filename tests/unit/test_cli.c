/* The scalify binary as users run it: exit codes, messages, README examples. */
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
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


#define PAIR_ARGS                                                                                  \
    "--baseline samples/tiny/tiny.baseline.hlo --distributed samples/tiny/tiny.megatron_tp.tp4.dist.hlo " \
    "--relations samples/tiny/tiny.megatron_tp.tp4.relations.json"
#define OUT "build/cli-out"

static bool is_kind(const char *path, mode_t kind) {
    struct stat st;
    return lstat(path, &st) == 0 && (st.st_mode & S_IFMT) == kind;
}

/* Children of pid, from /proc; at most max, how many in *n. */
static int children_of(pid_t pid, pid_t *out, int max) {
    int n = 0;
    DIR *dp = opendir("/proc");
    for (struct dirent *e; dp && (e = readdir(dp)) && n < max;) {
        pid_t p = (pid_t)atoi(e->d_name);
        if (p <= 0) continue;
        char path[64], buf[512];
        snprintf(path, sizeof path, "/proc/%d/stat", (int)p);
        FILE *f = fopen(path, "r");
        if (!f) continue;
        size_t got = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[got] = 0;
        const char *rp = strrchr(buf, ')'); /* the name may hold spaces */
        int ppid = 0;
        char state;
        if (rp && sscanf(rp + 1, " %c %d", &state, &ppid) == 2 && ppid == pid) out[n++] = p;
    }
    if (dp) closedir(dp);
    return n;
}

/* Outputs never lie: a lost output is an error, and -o never replaces what is
 * not a regular file. */
static void output_failures(const char *bin) {
    int st;
    char *out;
    free(run(&st, "rm -rf " OUT " && mkdir -p " OUT));

    t_case("cli-15 stdout that cannot be written: exit 2");
    out = run(&st, "%s check " PAIR_ARGS " > /dev/full", bin);
    CHECK_MSG(st == 2, "check > /dev/full: exit %d", st);
    CHECK_CONTAINS(out, "cannot write standard output: No space left on device");
    free(out);
    out = run(&st, "%s inspect samples/tiny/tiny.baseline.hlo --print > /dev/full", bin);
    CHECK_MSG(st == 2, "inspect --print > /dev/full: exit %d", st);
    free(out);
    out = run(&st, "%s --help > /dev/full", bin);
    CHECK_MSG(st == 2, "--help > /dev/full: exit %d", st);
    free(out);
    out = run(&st, "%s --version >&-", bin); /* stdout closed: what --version writes is lost */
    CHECK_MSG(st == 2, "--version with stdout closed: exit %d", st);
    free(out);

    t_case("cli-16 -o a character device: written through, never replaced");
    /* Devices of our own (the machine's /dev/full must not be put at risk). */
    free(run(&st, "mknod " OUT "/full c 1 7 && mknod " OUT "/null c 1 3"));
    if (st != 0) {
        printf("SKIP cli-16: mknod is not permitted here\n");
    } else {
        out = run(&st, "%s check " PAIR_ARGS " -o " OUT "/full", bin);
        CHECK_MSG(st == 2, "-o full: exit %d", st);
        CHECK_CONTAINS(out, "No space left on device");
        free(out);
        CHECK(is_kind(OUT "/full", S_IFCHR));
        free(run(&st, "%s check " PAIR_ARGS " -o " OUT "/null", bin));
        CHECK_EQ(st, 0);
        CHECK(is_kind(OUT "/null", S_IFCHR));
    }

    t_case("cli-17 -o a FIFO: written through to its reader");
    out = run(&st, "mkfifo " OUT "/fifo && (timeout 10 cat " OUT "/fifo > " OUT "/from-fifo 2>/dev/null &) && %s check " PAIR_ARGS
                   " -o " OUT "/fifo && sleep 0.2 && grep -c '\"scalify_trace\"' " OUT "/from-fifo", bin);
    CHECK_MSG(st == 0 && strstr(out, "\n1\n"), "exit %d: %s", st, out);
    free(out);
    CHECK(is_kind(OUT "/fifo", S_IFIFO));

    t_case("cli-18 -o a symlink: its target is replaced, the link stays");
    out = run(&st, "echo old > " OUT "/target && ln -s target " OUT "/link && ln -s nowhere " OUT "/dangling && "
                   "%s check " PAIR_ARGS " -o " OUT "/link && %s check " PAIR_ARGS " -o " OUT "/dangling && "
                   "grep -c '\"scalify_trace\"' " OUT "/target " OUT "/nowhere", bin, bin);
    CHECK_MSG(st == 0 && strstr(out, OUT "/target:1") && strstr(out, OUT "/nowhere:1"), "exit %d: %s", st, out);
    free(out);
    CHECK(is_kind(OUT "/link", S_IFLNK) && is_kind(OUT "/dangling", S_IFLNK) && is_kind(OUT "/target", S_IFREG));

    t_case("cli-18b -o /dev/fd/1: the open descriptor, as it is");
    /* /dev/fd/1, not /dev/stdout: a build that renames a temporary file over
     * the name must fail here without replacing the machine's /dev/stdout. */
    out = run(&st, "echo first > " OUT "/log && %s check " PAIR_ARGS " -o /dev/fd/1 >> " OUT "/log 2>/dev/null && "
                   "head -1 " OUT "/log && grep -c '\"scalify_trace\"' " OUT "/log", bin);
    CHECK_MSG(st == 0 && strcmp(out, "first\n1\n") == 0, "exit %d: %s", st, out);
    free(out);

    t_case("cli-19 -o: no predictable temporary name to plant a link at");
    /* exec keeps the shell's pid, so $$ is the pid scalify runs as: the name
     * a "PATH.tmp.PID" scheme would open. */
    out = run(&st, "cd " OUT " && sh -c 'ln -s victim t.json.tmp.$$ && exec %s%s check --baseline "
                   "../../samples/tiny/tiny.baseline.hlo --distributed ../../samples/tiny/tiny.megatron_tp.tp4.dist.hlo "
                   "--relations ../../samples/tiny/tiny.megatron_tp.tp4.relations.json -o t.json'",
              bin[0] == '/' ? "" : "../../", bin);
    CHECK_MSG(st == 0, "exit %d: %s", st, out);
    free(out);
    CHECK(access(OUT "/victim", F_OK) != 0);
    CHECK(is_kind(OUT "/t.json", S_IFREG)); /* lstat: not a link to the victim */

    t_case("cli-20 check --manifest: traces that cannot be written are errors");
    FILE *f = fopen(OUT "/m.json", "w");
    if (CHECK(f)) {
        fprintf(f, "{\"pairs\": [{\"name\": \"ok\", \"expected\": \"verified\", \"baseline\": {\"hlo\": "
                   "\"../../samples/tiny/tiny.baseline.hlo\"}, \"distributed\": {\"hlo\": "
                   "\"../../samples/tiny/tiny.megatron_tp.tp4.dist.hlo\"}, \"relations\": "
                   "\"../../samples/tiny/tiny.megatron_tp.tp4.relations.json\"}]}\n");
        fclose(f);
    }
    out = run(&st, "%s check --manifest " OUT "/m.json --out-dir " OUT "/m.json/sub", bin);
    CHECK_MSG(st == 2, "out-dir under a file: exit %d", st);
    CHECK_CONTAINS(out, "--out-dir " OUT "/m.json/sub: Not a directory");
    free(out);
    out = run(&st, "%s check --manifest " OUT "/m.json --out-dir " OUT "/full", bin);
    CHECK_MSG(st == 2, "out-dir a device: exit %d", st);
    free(out);
    /* 1 block of 512 bytes: index.json fits, a trace (some 4 KB) does not. */
    out = run(&st, "(trap '' XFSZ; ulimit -f 1; exec %s check --manifest " OUT "/m.json --out-dir " OUT "/small)", bin);
    CHECK_MSG(st == 2, "trace not written: exit %d: %s", st, out);
    free(out);
    char *idx = t_read(OUT "/small/index.json", NULL);
    CHECK_MSG(idx && !strstr(idx, "\"verdict\": \"verified\"") && !strstr(idx, "\"trace\"") && strstr(idx, "\"verdict\": \"error\""),
              "%s", idx ? idx : "(no index.json)");
    free(idx);
    f = fopen(OUT "/long.json", "w");
    if (CHECK(f)) {
        fputs("{\"pairs\": [{\"name\": \"", f);
        for (int i = 0; i < 300; i++) fputc('n', f);
        fputs("\", \"baseline\": {\"hlo\": \"x\"}, \"distributed\": {\"hlo\": \"y\"}, \"relations\": \"z\"}]}\n", f);
        fclose(f);
    }
    out = run(&st, "%s check --manifest " OUT "/long.json --out-dir " OUT "/long", bin);
    CHECK_MSG(st == 2, "a 300-byte name: exit %d", st);
    CHECK_CONTAINS(out, "is too long to name a trace file");
    free(out);
    idx = t_read(OUT "/long/index.json", NULL);
    CHECK(idx && !strstr(idx, "nnnn"));
    free(idx);

    t_case("cli-21 check --manifest -j 2: killing the batch kills its workers");
    /* The traces are FIFOs nobody reads: a worker blocks writing its trace
     * until it is killed. Orphans are reparented to this process (a child
     * subreaper), so their end can be seen. */
    f = fopen(OUT "/slow.json", "w");
    if (CHECK(f)) {
        fputs("{\"pairs\": [", f);
        for (int k = 0; k < 2; k++)
            fprintf(f, "%s{\"name\": \"p%d\", \"baseline\": {\"hlo\": \"../../samples/tiny/tiny.baseline.hlo\"}, "
                       "\"distributed\": {\"hlo\": \"../../samples/tiny/tiny.megatron_tp.tp4.dist.hlo\"}, "
                       "\"relations\": \"../../samples/tiny/tiny.megatron_tp.tp4.relations.json\"}",
                    k ? ", " : "", k);
        fputs("]}\n", f);
        fclose(f);
    }
    free(run(&st, "mkdir -p " OUT "/slow && mkfifo " OUT "/slow/p0.trace.json " OUT "/slow/p1.trace.json"));
    prctl(PR_SET_CHILD_SUBREAPER, 1);
    pid_t batch = fork();
    if (batch == 0) {
        int nul = open("/dev/null", O_WRONLY);
        if (nul >= 0) dup2(nul, 1), dup2(nul, 2);
        execl(bin, bin, "check", "-j", "2", "--manifest", OUT "/slow.json", "--out-dir", OUT "/slow", (char *)NULL);
        _exit(127);
    }
    pid_t workers[8];
    int nw = 0;
    for (int i = 0; i < 1000 && nw < 2; i++) { /* both started, at most 10 s */
        usleep(10000);
        nw = children_of(batch, workers, 8);
    }
    usleep(300000); /* let them reach their traces */
    CHECK_EQ(nw, 2);
    kill(batch, SIGKILL);
    waitpid(batch, &st, 0);
    for (int k = 0; k < nw; k++) {
        int ws = 0;
        pid_t got = 0;
        for (int i = 0; i < 300 && got == 0; i++) { /* at most 3 s */
            got = waitpid(workers[k], &ws, WNOHANG);
            if (got == 0) usleep(10000);
        }
        CHECK_MSG(got == workers[k] && WIFSIGNALED(ws) && WTERMSIG(ws) == SIGKILL,
                  "worker %d: %s", (int)workers[k], got == 0 ? "still running 3 s after the batch was killed" : "did not die by SIGKILL");
        if (got == 0) {
            kill(workers[k], SIGKILL);
            waitpid(workers[k], &ws, 0);
        }
    }
    prctl(PR_SET_CHILD_SUBREAPER, 0);
    CHECK(is_kind(OUT "/slow/p0.trace.json", S_IFIFO) && is_kind(OUT "/slow/p1.trace.json", S_IFIFO));

    t_case("cli-22 out of memory: exit 3 with a message");
#if defined(__SANITIZE_ADDRESS__)
    printf("SKIP cli-22: AddressSanitizer reserves more address space than the limit allows\n");
#else
    /* Checking the 405B pair needs far more than a 20 MB address space: an
     * allocation fails (a gzip trailer's claimed size no longer sizes a
     * buffer, so memory runs out where it is really needed). */
    out = run(&st, "(ulimit -v 20000; exec %s check --baseline samples/llama3.1-405b/llama3.1-405b.baseline.hlo.pb.gz "
                   "--distributed samples/llama3.1-405b/llama3.1-405b.megatron_tp.tp8.dist.hlo.pb.gz --relations "
                   "samples/llama3.1-405b/llama3.1-405b.megatron_tp.tp8.relations.json -o " OUT "/oom.json)", bin);
    CHECK_MSG(st == 3, "exit %d: %s", st, out);
    CHECK_CONTAINS(out, "out of memory");
    free(out);
#endif
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

    t_case("cli check -j N and -jN; a bad count is a usage error");
    {
        const char *forms[] = {"-j 1", "-j2", "-j", "-j0", "-j 2x"};
        for (int k = 0; k < 5; k++) {
            out = run(&st, "%s check " PAIR_ARGS " --no-witness %s -o build/cli-j.json", bin, forms[k]);
            CHECK_MSG(st == (k < 2 ? 0 : 2), "%s: exit %d: %s", forms[k], st, out);
            if (k >= 2) CHECK_CONTAINS(out, "-j needs a thread count from 1 to 1024");
            free(out);
        }
    }

    t_case("cli SCALIFY_DEBUG: switches on, an unknown word said and ignored");
    {
        out = run(&st, "SCALIFY_DEBUG=views,bogus,depth=x %s check " PAIR_ARGS " --no-witness -o build/cli-dbg.json", bin);
        CHECK_MSG(st == 0, "exit %d: %s", st, out);
        CHECK_CONTAINS(out, "SCALIFY_DEBUG: ignoring 'bogus'");
        CHECK_CONTAINS(out, "SCALIFY_DEBUG: ignoring 'depth=x'");
        CHECK_CONTAINS(out, "\nview ");
        free(out);
        out = run(&st, "%s check " PAIR_ARGS " --no-witness -o build/cli-dbg.json", bin);
        CHECK_MSG(!strstr(out, "view ") && !strstr(out, "SCALIFY_DEBUG"), "%s", out);
        free(out);
    }

    t_case("cli check executes both programs unless --no-witness");
    {
        /* a ring rotated the wrong way: no transfer function relates it, execution shows it */
        const char *pair = "--baseline samples/probe/s.ring_roll.baseline.hlo "
                           "--distributed samples/probe/s.ring_roll.sp4.bug.ring-direction.dist.hlo "
                           "--relations samples/probe/s.ring_roll.sp4.bug.ring-direction.relations.json";
        out = run(&st, "%s check %s -o build/cli-witness.json >/dev/null 2>&1; echo rc=$?; grep -m1 '\"verdict\"' "
                  "build/cli-witness.json; grep -c -- '--no-witness' build/cli-witness.json", bin, pair);
        CHECK_CONTAINS(out, "rc=1");
        CHECK_CONTAINS(out, "\"verdict\": \"mismatch\"");
        CHECK_CONTAINS(out, "\n0\n");
        free(out);
        out = run(&st, "%s check %s --no-witness -o build/cli-witness.json >/dev/null 2>&1; echo rc=$?; grep -m1 "
                  "'\"verdict\"' build/cli-witness.json; grep -c -- '--no-witness' build/cli-witness.json", bin, pair);
        CHECK_CONTAINS(out, "rc=1");
        CHECK_CONTAINS(out, "\"verdict\": \"unverified\"");
        CHECK_CONTAINS(out, "\n1\n");
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

    output_failures(bin);
    readme_examples();
}
