/* bench_scale — the scaling section of make bench: deep pairs at 1x, 10x and
 * 100x the instructions of the 405B tp8 pair, the largest training step of
 * samples/wild, and the 405B tp8 pair's check against zcat of its files.
 *
 *   bench-scale SCALIFY GEN_DEEP WILD_MANIFEST RESULTS_MD
 *
 * Measures, asserts nothing. gen-deep (tests/bench/gen_deep.c) writes each
 * deep pair into build/deep/ when it is not there yet: small layers (-s, about
 * 17 instructions over both programs, so 2083 layers are the 35.4k
 * instructions of llama3.1-405b.megatron_tp.tp8), tensor-parallel over 8, in
 * two variants: "same" (every layer alike: the memo can hit) and "unique"
 * (every layer a different width: it cannot). Each pair is checked once with
 * the memo and with --no-memo (best of 5 runs at 1x, 3 at 10x, one at 100x), by the scalify binary as users run it
 * (reading, checking and writing the trace), one child process per run: wall
 * time around it, CPU time and peak memory (ru_maxrss) from wait4. Reported
 * per instruction of the two programs, with the ratio of each size's time per
 * instruction to that at 1x, and peak memory against the uncompressed input
 * (both programs' text and the relations). BENCH_SCALE_MAX (default 100)
 * drops the larger sizes. Last, the 405B tp8 pair's check (-j 2, from its
 * gzipped protobuf dumps) against zcat of the same files. The section
 * replaces the "## Scaling" section of RESULTS_MD (bench_check writes the
 * rest first).
 */
#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "util.h"

enum { LAYERS_1X = 2083, TP = 8 };

typedef struct {
    double wall_s, cpu_s, peak_mib;
    int rc;
    char verdict[32];
    long long segs, memo_hits, instrs;
} run;

static bool exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && st.st_size > 0;
}

static double file_bytes(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 ? (double)st.st_size : 0;
}

/* The uncompressed size of a file: a .gz file's own record of it (ISIZE, the
 * size modulo 2^32, in its last four bytes), else its size. */
static double text_bytes(const char *path) {
    size_t n = strlen(path);
    if (n < 3 || strcmp(path + n - 3, ".gz") != 0) return file_bytes(path);
    FILE *f = fopen(path, "rb");
    unsigned char b[4] = {0};
    if (!f) return 0;
    if (fseek(f, -4, SEEK_END) != 0 || fread(b, 1, 4, f) != 4) b[0] = b[1] = b[2] = b[3] = 0;
    fclose(f);
    return (double)((uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24);
}

/* Runs argv (NULL-terminated) as a child with stdout to /dev/null; fills the
 * times and peak of r; returns the exit status or -1. */
static int spawn(char *const argv[], run *r) {
    fflush(stdout);
    double t0 = now_ms();
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        if (!freopen("/dev/null", "w", stdout)) _exit(127);
        execvp(argv[0], argv); /* a bare name (zcat) is looked up in PATH */
        _exit(127);
    }
    int status;
    struct rusage ru;
    if (wait4(pid, &status, 0, &ru) < 0) return -1;
    if (r) {
        r->wall_s = (now_ms() - t0) / 1e3;
        r->cpu_s = (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + (double)ru.ru_stime.tv_sec +
                   ru.ru_stime.tv_usec / 1e6;
        r->peak_mib = ru.ru_maxrss / 1024.0;
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* Verdict, segments, memo hits and the two programs' instructions from a
 * trace, read in a child process: a large trace read here would stay in this
 * process's resident memory, and a child forked later starts its ru_maxrss
 * from it. */
static void read_trace(const char *path, run *r) {
    int fd[2];
    snprintf(r->verdict, sizeof r->verdict, "error");
    if (pipe(fd) != 0) return;
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        close(fd[0]);
        json_t *t = json_load_file(path, 0, NULL);
        json_t *sum = json_object_get(t, "summary"), *pair = json_object_get(t, "pair");
        const char *v = json_string_value(json_object_get(t, "verdict"));
        dprintf(fd[1], "%s %lld %lld %lld\n", v ? v : "error", (long long)json_integer_value(json_object_get(sum, "segments")),
                (long long)json_integer_value(json_object_get(sum, "memo_hits")),
                (long long)(json_integer_value(json_object_get(json_object_get(pair, "baseline"), "instructions")) +
                            json_integer_value(json_object_get(json_object_get(pair, "distributed"), "instructions"))));
        _exit(0);
    }
    close(fd[1]);
    char buf[256] = "";
    size_t got = 0;
    for (ssize_t n; pid > 0 && got < sizeof buf - 1 && (n = read(fd[0], buf + got, sizeof buf - 1 - got)) > 0;) got += (size_t)n;
    buf[got] = 0;
    close(fd[0]);
    if (pid > 0) waitpid(pid, NULL, 0);
    char v[32];
    if (sscanf(buf, "%31s %lld %lld %lld", v, &r->segs, &r->memo_hits, &r->instrs) == 4)
        snprintf(r->verdict, sizeof r->verdict, "%s", v);
}

/* Checks a pair (rel: a relations file, or NULL for --auto-relations), memo on
 * or off, `repeat` times: the least wall and CPU time, the largest peak. */
static run check(const char *scalify, const char *b, const char *d, const char *rel, bool no_memo, const char *trace,
                 int repeat) {
    run r = {0}, best = {.wall_s = 1e300, .cpu_s = 1e300};
    char *argv[16];
    int n = 0;
    argv[n++] = (char *)scalify;
    argv[n++] = "check";
    argv[n++] = "--baseline";
    argv[n++] = (char *)b;
    argv[n++] = "--distributed";
    argv[n++] = (char *)d;
    if (rel) {
        argv[n++] = "--relations";
        argv[n++] = (char *)rel;
    } else argv[n++] = "--auto-relations";
    if (no_memo) argv[n++] = "--no-memo";
    argv[n++] = "--no-witness"; /* the rules' time: execution is bounded apart */
    argv[n++] = "-o";
    argv[n++] = (char *)trace;
    argv[n] = NULL;
    for (int k = 0; k < repeat; k++) {
        remove(trace);
        r.rc = spawn(argv, &r);
        read_trace(trace, &r);
        double peak = r.peak_mib > best.peak_mib ? r.peak_mib : best.peak_mib;
        if (r.wall_s > best.wall_s) r.wall_s = best.wall_s;
        if (r.cpu_s > best.cpu_s) r.cpu_s = best.cpu_s;
        best = r;
        best.peak_mib = peak;
    }
    return best;
}

static void row(strbuf *o, const char *name, const char *memo, double input, const run *r) {
    double us = r->instrs ? r->cpu_s * 1e6 / (double)r->instrs : 0;
    sb_printf(o, "| %s | %s | %s | %lld | %lld | %lld | %.1f | %.2f | %.2f | %.2f | %.0f | %.0f | %.2f |\n", name, memo,
              r->verdict, r->instrs, r->segs, r->memo_hits, input / (1 << 20), r->wall_s, r->cpu_s, us, r->peak_mib,
              r->instrs ? r->peak_mib * (1 << 20) / (double)r->instrs : 0, input > 0 ? r->peak_mib * (1 << 20) / input : 0);
}

/* Replaces the "## Scaling" section of path (to the next "## " or the end)
 * with sec, or appends it. */
static void write_section(const char *path, const char *sec) {
    FILE *f = fopen(path, "r");
    strbuf all;
    sb_init(&all);
    if (f) {
        char buf[65536];
        size_t n;
        while ((n = fread(buf, 1, sizeof buf, f)) > 0) sb_put(&all, buf, n);
        fclose(f);
    }
    const char *text = all.s ? all.s : "";
    const char *at = strstr(text, "\n## Scaling\n");
    strbuf out;
    sb_init(&out);
    if (at) {
        sb_put(&out, text, (size_t)(at - text) + 1);
        sb_puts(&out, sec);
        const char *next = strstr(at + 1, "\n## ");
        if (next) sb_puts(&out, next);
    } else {
        sb_puts(&out, text);
        if (all.len && text[all.len - 1] != '\n') sb_putc(&out, '\n');
        sb_puts(&out, "\n");
        sb_puts(&out, sec);
    }
    f = fopen(path, "w");
    if (f) {
        fwrite(out.s, 1, out.len, f);
        fclose(f);
    }
    sb_free(&all);
    sb_free(&out);
}

/* The least wall time of `repeat` runs of argv (stdout to /dev/null), or -1
 * when one fails. */
static double best_wall(char *const argv[], int repeat) {
    double best = -1;
    for (int k = 0; k < repeat; k++) {
        run r = {0};
        if (spawn(argv, &r) < 0) return -1; /* any verdict times as well */
        if (best < 0 || r.wall_s < best) best = r.wall_s;
    }
    return best;
}

/* The 405B tp8 pair as make bench checks it (its gzipped protobuf dumps),
 * against zcat of the same two files: how far checking is from reading. */
static void read_against_zcat(const char *scalify, strbuf *o) {
    enum { REPEAT = 15 };
    static const char dir[] = "samples/llama3.1-405b/";
    char b[256], d[256], rel[256];
    snprintf(b, sizeof b, "%sllama3.1-405b.baseline.hlo.pb.gz", dir);
    snprintf(d, sizeof d, "%sllama3.1-405b.megatron_tp.tp8.dist.hlo.pb.gz", dir);
    snprintf(rel, sizeof rel, "%sllama3.1-405b.megatron_tp.tp8.relations.json", dir);
    if (!exists(b) || !exists(d) || !exists(rel)) return;
    char *zargv[] = {"zcat", b, d, NULL};
    char *cargv[] = {(char *)scalify, "check", "--baseline", b, "--distributed", d, "--relations", rel,
                     "-j", "2", "-o", "build/deep/405b.trace.json", NULL};
    double z = best_wall(zargv, REPEAT), ck = best_wall(cargv, REPEAT);
    run r = {0};
    read_trace("build/deep/405b.trace.json", &r);
    sb_printf(o, "\nReading against checking: llama3.1-405b.megatron_tp.tp8 from its gzipped protobuf dumps (as make "
                 "bench checks it), `scalify check -j 2` (default configuration, writing the trace) against `zcat` of "
                 "the same two files, least wall time of %d runs each (target: check within 1.5× zcat).\n\n"
                 "| pair | verdict | zcat ms | check -j 2 ms | check / zcat |\n|---|---|---:|---:|---:|\n", REPEAT);
    if (z > 0 && ck > 0)
        sb_printf(o, "| llama3.1-405b.megatron_tp.tp8 | %s | %.1f | %.1f | %.2f |\n", r.verdict, z * 1e3, ck * 1e3, ck / z);
    else
        sb_printf(o, "| llama3.1-405b.megatron_tp.tp8 | %s | %s | %s | - |\n", r.verdict, z > 0 ? "ok" : "failed", ck > 0 ? "ok" : "failed");
}

static const char head[] = "| pair | memo | verdict | instructions | segments | memo hits | input MiB | wall s | CPU s | "
                           "CPU µs / instr | peak MiB | peak bytes / instr | peak / input |\n"
                           "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n";

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: bench-scale SCALIFY GEN_DEEP WILD_MANIFEST RESULTS_MD\n");
        return 2;
    }
    const char *scalify = argv[1], *gen = argv[2];
    int max = getenv("BENCH_SCALE_MAX") ? atoi(getenv("BENCH_SCALE_MAX")) : 100;
    static const int scales[] = {1, 10, 100};
    static const char *const variants[] = {"same", "unique"};
    double per_instr[3][2][2] = {{{0}}}; /* [scale][variant][memo off] CPU µs per instruction */
    strbuf o;
    sb_init(&o);
    sb_printf(&o, "## Scaling\n\nDeep pairs written by gen-deep (tests/bench/gen_deep.c) into build/deep/: small "
                  "Llama-like layers (the MLP, column- then row-sharded, one all-reduce; about 17 instructions "
                  "over both programs), %d layers per 1x (the 35.4k instructions of "
                  "llama3.1-405b.megatron_tp.tp8), tp%d; same: every layer alike (the memo can hit), unique: "
                  "every layer a different width (it cannot). The scalify binary as users run it (reading, "
                  "checking, writing the trace; default -j), memo on and --no-memo: best of 5 runs at 1x, of 3 at "
                  "10x, one run at 100x. Input: both programs' text "
                  "and the relations, uncompressed. Time per instruction is CPU time (user + system: the "
                  "machine is shared, wall time also counts waiting).\n\n",
              LAYERS_1X, TP);
    sb_puts(&o, head);
    mkdir("build", 0777);
    mkdir("build/deep", 0777);
    for (int si = 0; si < 3 && scales[si] <= max; si++)
        for (int vi = 0; vi < 2; vi++) {
            char pre[256], b[300], d[300], rel[300], trace[300], layers[32], name[64];
            snprintf(pre, sizeof pre, "build/deep/deep%dx.%s", scales[si], variants[vi]);
            snprintf(b, sizeof b, "%s.baseline.hlo", pre);
            snprintf(d, sizeof d, "%s.dist.hlo", pre);
            snprintf(rel, sizeof rel, "%s.relations.json", pre);
            snprintf(trace, sizeof trace, "%s.trace.json", pre);
            snprintf(layers, sizeof layers, "%d", LAYERS_1X * scales[si]);
            if (!exists(b) || !exists(d) || !exists(rel)) {
                char tp[8];
                snprintf(tp, sizeof tp, "%d", TP);
                char *gargv[] = {(char *)gen, "-s", layers, tp, pre, NULL, NULL};
                if (vi) memmove(&gargv[2], &gargv[1], 5 * sizeof *gargv), gargv[1] = "-u";
                if (spawn(gargv, NULL) != 0) {
                    fprintf(stderr, "bench-scale: %s could not write %s\n", gen, pre);
                    return 1;
                }
            }
            double input = file_bytes(b) + file_bytes(d) + file_bytes(rel);
            snprintf(name, sizeof name, "deep %dx %s (%s layers)", scales[si], variants[vi], layers);
            for (int off = 0; off < 2; off++) {
                fprintf(stderr, "bench-scale: %s, memo %s\n", name, off ? "off" : "on");
                run r = check(scalify, b, d, rel, off, trace, scales[si] == 1 ? 5 : scales[si] == 10 ? 3 : 1);
                row(&o, name, off ? "off" : "on", input, &r);
                per_instr[si][vi][off] = r.instrs ? r.cpu_s * 1e6 / (double)r.instrs : 0;
            }
        }
    sb_puts(&o, "\nRatios (CPU time per instruction against the same pair at 1x; memo on against --no-memo):\n\n"
                "| pair | 10x / 1x | 100x / 1x | memo on / off at 1x | at 10x | at 100x |\n|---|---:|---:|---:|---:|---:|\n");
    for (int vi = 0; vi < 2; vi++) {
        sb_printf(&o, "| deep %s |", variants[vi]);
        for (int si = 1; si < 3; si++)
            if (per_instr[si][vi][0] > 0 && per_instr[0][vi][0] > 0) sb_printf(&o, " %.2f |", per_instr[si][vi][0] / per_instr[0][vi][0]);
            else sb_puts(&o, " - |");
        for (int si = 0; si < 3; si++)
            if (per_instr[si][vi][1] > 0) sb_printf(&o, " %.2f |", per_instr[si][vi][0] / per_instr[si][vi][1]);
            else sb_puts(&o, " - |");
        sb_puts(&o, "\n");
    }
    /* The largest training step of the wild corpus: the pair named .train. with
     * the largest distributed file. */
    json_t *m = json_load_file(argv[3], 0, NULL);
    json_t *pairs = json_object_get(m, "pairs"), *best = NULL;
    char dir[512];
    snprintf(dir, sizeof dir, "%s", argv[3]);
    char *slash = strrchr(dir, '/');
    if (slash) *slash = 0;
    else snprintf(dir, sizeof dir, ".");
    double best_bytes = 0;
    char bb[1024] = "", bd[1024] = "", br[1024] = "";
    for (size_t i = 0; i < json_array_size(pairs); i++) {
        json_t *p = json_array_get(pairs, i);
        const char *n = json_string_value(json_object_get(p, "name"));
        const char *db = json_string_value(json_object_get(json_object_get(p, "distributed"), "hlo"));
        const char *bl = json_string_value(json_object_get(json_object_get(p, "baseline"), "hlo"));
        if (!n || !db || !bl || !strstr(n, ".train.")) continue;
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", dir, db);
        double by = file_bytes(path) ? text_bytes(path) : 0;
        if (!by) {
            snprintf(path, sizeof path, "%s/%s.gz", dir, db);
            by = text_bytes(path);
        }
        if (by <= best_bytes) continue;
        best_bytes = by;
        best = p;
        snprintf(bd, sizeof bd, "%s", path);
        snprintf(bb, sizeof bb, "%s/%s", dir, bl);
        if (!exists(bb)) snprintf(bb, sizeof bb, "%s/%s.gz", dir, bl);
        const char *rv = json_string_value(json_object_get(p, "relations"));
        if (rv && strcmp(rv, "auto") != 0) snprintf(br, sizeof br, "%s/%s", dir, rv);
        else br[0] = 0;
    }
    if (best) {
        const char *n = json_string_value(json_object_get(best, "name"));
        sb_printf(&o, "\nThe largest training step of samples/wild (by its distributed program's text): %s, "
                      "best of 5 runs (input MiB: uncompressed).\n\n", n);
        sb_puts(&o, head);
        double input = text_bytes(bb) + text_bytes(bd) + (br[0] ? file_bytes(br) : 0);
        for (int off = 0; off < 2; off++) {
            run r = check(scalify, bb, bd, br[0] ? br : NULL, off, "build/deep/wild-train.trace.json", 5);
            row(&o, n, off ? "off" : "on", input, &r);
        }
    }
    json_decref(m);
    read_against_zcat(scalify, &o);
    fputs(o.s, stdout);
    write_section(argv[4], o.s);
    sb_free(&o);
    return 0;
}
