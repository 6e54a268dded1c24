/* bench_check — the checker on the full-size and scaling sample pairs
 * (every pair not named tiny*; make bench).
 *
 * Measures, asserts nothing. Each run of a pair is a child process so its peak
 * memory is its own (wait4's ru_maxrss); wall time is measured around the
 * child, CPU time from its rusage. Every pair runs BENCH_REPEAT times (default
 * 5) and the best wall and CPU times are kept: on a shared machine the minimum
 * is the least disturbed run. Device-count scaling: pairs named PREFIX.tpN (no
 * bug variant) with at least three values of N form a group; its members run
 * BENCH_ROUNDS more times (default 20) in turn, one run each per round, so
 * every N meets the same machine load, and the group is reported as max/min of
 * the best wall (and CPU) times across N; the target for the
 * llama-scale.megatron_tp family (tp2 ... tp64) is a ratio within 1.5.
 * Depth: 405B against 8B (Megatron tp8), also in BENCH_ROUNDS rounds that run
 * the two in turn (both meet the same load; the median of the rounds' paired
 * ratios is reported beside the ratio of minima), and 405B without the memo and
 * with one reading thread. Full-size training step: every pair of
 * samples/bigtrain/manifest.json (argv[2]; files relative to its folder), best
 * of BENCH_BIG_REPEAT runs (default 3; 0 skips them), with both programs'
 * instruction counts and the first finding's message as the verdict's reason.
 * Writes build/bench-check.json and tests/bench/RESULTS.md.
 */
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "util.h"

/* How a pair is checked: as the command line does by default (threads = the
 * core count, memo on, the rewrite rules in rules/), or with one of the first
 * two changed. */
typedef struct {
    int jobs;
    bool no_memo;
} bench_cfg;

static bench_cfg default_cfg(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return (bench_cfg){n > 0 ? (int)n : 1, false};
}

/* Checks the pair and writes "verdict segments memo_hits check_ms" to fd;
 * check_ms is the time the segments account for (building, lifting,
 * saturating, checking), i.e. the wall time without reading the programs and
 * writing the trace. */
static int run_child(const char *name, const char *b, const char *d, const char *r, bench_cfg cfg, int fd) {
    check_opts o = {.name = name, .baseline = b, .distributed = d, .jobs = cfg.jobs, .no_memo = cfg.no_memo, .rules_dir = "rules"};
    if (strcmp(r, "auto") == 0) o.auto_relations = true;
    else o.relations = r;
    diag dg;
    diag_init(&dg, name);
    json_t *trace = NULL;
    int v = check_pair(&o, &trace, &dg);
    json_t *sum = trace ? json_object_get(trace, "summary") : NULL;
    json_t *segs = json_object_get(sum, "segments"), *memo = json_object_get(sum, "memo_hits");
    double check = json_number_value(json_object_get(sum, "setup_ms")), lift = 0;
    json_t *sa = trace ? json_object_get(trace, "segments") : NULL;
    long long segs_ok = 0;
    for (size_t i = 0; i < json_array_size(sa); i++) {
        const char *sv = json_string_value(json_object_get(json_array_get(sa, i), "verdict"));
        segs_ok += sv && strcmp(sv, "verified") == 0;
        const char *key;
        json_t *val;
        json_object_foreach(json_object_get(json_array_get(sa, i), "timings_ms"), key, val) {
            check += json_number_value(val);
            if (strcmp(key, "lift") == 0) lift += json_number_value(val);
        }
    }
    json_t *pj = trace ? json_object_get(trace, "pair") : NULL;
    json_t *f0 = trace ? json_array_get(json_object_get(trace, "findings"), 0) : NULL;
    const char *why = trace ? json_string_value(json_object_get(f0, "message")) : dg.out.s;
    const char *where = json_string_value(json_object_get(json_object_get(f0, "distributed"), "op_name"));
    dprintf(fd, "%d %lld %lld %.3f %.3f %lld %lld %lld\n%s%s%s\n", v, (long long)(segs ? json_integer_value(segs) : 0),
            (long long)(memo ? json_integer_value(memo) : 0), check, lift,
            (long long)json_integer_value(json_object_get(json_object_get(pj, "baseline"), "instructions")),
            (long long)json_integer_value(json_object_get(json_object_get(pj, "distributed"), "instructions")), segs_ok, why ? why : "",
            where ? " at " : "", where ? where : "");
    return 0;
}

typedef struct {
    double wall, cpu, peak, check, lift;
    double last_wall; /* of the latest run */
    int verdict;
    long long segs, memo;
    long long instr_b, instr_d; /* instructions of the baseline and distributed programs */
    long long segs_ok;          /* segments verified */
    char why[512];              /* the first finding's message and where, or "" */
} run_result;

#define NO_RESULT ((run_result){.wall = 1e300, .cpu = 1e300, .check = 1e300, .lift = 1e300, .verdict = VERDICT_ERROR})

/* `repeat` more child runs into *out (minimum wall, CPU and check time,
 * maximum peak). Returns -1 on error. */
static int bench_pair_cfg(const char *name, const char *b, const char *d, const char *r, bench_cfg cfg, int repeat,
                          run_result *out) {
    for (int k = 0; k < repeat; k++) {
        int pipefd[2];
        if (pipe(pipefd) != 0) return -1;
        fflush(stdout);
        double t0 = now_ms();
        pid_t pid = fork();
        if (pid == 0) {
            close(pipefd[0]);
            run_child(name, b, d, r, cfg, pipefd[1]);
            _exit(0);
        }
        close(pipefd[1]);
        char buf[1024] = "";
        size_t got = 0;
        for (ssize_t n; got < sizeof buf - 1 && (n = read(pipefd[0], buf + got, sizeof buf - 1 - got)) > 0;) got += (size_t)n;
        buf[got] = 0;
        close(pipefd[0]);
        int status;
        struct rusage ru;
        wait4(pid, &status, 0, &ru);
        double wall = now_ms() - t0;
        double cpu = (double)ru.ru_utime.tv_sec * 1e3 + ru.ru_utime.tv_usec / 1e3 + (double)ru.ru_stime.tv_sec * 1e3 +
                     ru.ru_stime.tv_usec / 1e3;
        int v = VERDICT_ERROR;
        long long segs = 0, memo = 0, ib = 0, id = 0, ok = 0;
        double check = 0, lift = 0;
        if (got > 0) sscanf(buf, "%d %lld %lld %lf %lf %lld %lld %lld", &v, &segs, &memo, &check, &lift, &ib, &id, &ok);
        const char *nl = strchr(buf, '\n');
        snprintf(out->why, sizeof out->why, "%.*s", nl ? (int)strcspn(nl + 1, "\n") : 0, nl ? nl + 1 : "");
        out->instr_b = ib;
        out->instr_d = id;
        out->segs_ok = ok;
        out->verdict = v;
        out->segs = segs;
        out->memo = memo;
        if (check < out->check) out->check = check;
        if (lift < out->lift) out->lift = lift;
        if (wall < out->wall) out->wall = wall;
        out->last_wall = wall;
        if (cpu < out->cpu) out->cpu = cpu;
        if (ru.ru_maxrss / 1024.0 > out->peak) out->peak = ru.ru_maxrss / 1024.0;
    }
    return 0;
}

static int bench_pair(const char *name, const char *b, const char *d, const char *r, int repeat, run_result *out) {
    return bench_pair_cfg(name, b, d, r, default_cfg(), repeat, out);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The median of v[0..n) (sorts v). */
static double median(double *v, size_t n) {
    if (!n) return 0;
    qsort(v, n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* The index of the pair named name among the first n, or -1. */
static int find_pair(const char *const *names, size_t n, const char *name) {
    for (size_t i = 0; i < n; i++)
        if (strcmp(names[i], name) == 0) return (int)i;
    return -1;
}

/* "PREFIX.tpN" (N digits, no ".bug."): the length of PREFIX and N, else 0. */
static size_t scaling_prefix(const char *name, long *n) {
    if (strstr(name, ".bug.")) return 0;
    const char *t = strrchr(name, '.');
    if (!t || strncmp(t, ".tp", 3) != 0 || !t[3]) return 0;
    char *end;
    *n = strtol(t + 3, &end, 10);
    return *end ? 0 : (size_t)(t - name);
}

#define MAX_PAIRS 256

/* A manifest entry's baseline, distributed and relations paths (protobuf
 * dumps, relative to dir; r is "auto" or a file). Returns false when one is
 * missing. */
static bool pair_files(json_t *p, const char *dir, char b[1024], char d[1024], char r[1024]) {
    const char *bf = json_string_value(json_object_get(json_object_get(p, "baseline"), "pb"));
    const char *df = json_string_value(json_object_get(json_object_get(p, "distributed"), "pb"));
    const char *rv = json_string_value(json_object_get(p, "relations"));
    if (!bf || !df || !rv) return false;
    snprintf(b, 1024, "%s/%s", dir, bf);
    snprintf(d, 1024, "%s/%s", dir, df);
    if (strcmp(rv, "auto") == 0) snprintf(r, 1024, "auto");
    else snprintf(r, 1024, "%s/%s", dir, rv);
    return true;
}

static double file_mib(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 ? (double)st.st_size / (1024.0 * 1024.0) : 0;
}

/* The full-size training steps (every pair of the manifest at path, files
 * relative to its folder): each pair is timed `repeat` times like the others
 * and reported with its instruction counts and the checker's reason. */
static void bench_big(const char *path, int repeat, strbuf *md, strbuf *js, int *first) {
    json_error_t err;
    json_t *m = json_load_file(path, 0, &err);
    if (!m) {
        fprintf(stderr, "%s: %s (full-size training step skipped)\n", path, err.text);
        return;
    }
    char dir[1024];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash) *slash = 0;
    else snprintf(dir, sizeof dir, ".");
    sb_printf(md, "\n## Full-size training step\n\nThe pairs of %s (samples/gen/run_bigtrain.sh: a Flax Linen Llama-3.1-405B-shaped "
                  "training step, forward, loss, gradient and optax AdamW update, FSDP × TP on 64 devices, every layer "
                  "unrolled), best of %d runs (BENCH_BIG_REPEAT), one process per run, default configuration "
                  "(-j %d). Instructions: of the baseline / distributed program; files: their gzipped protobuf dumps.\n\n"
                  "| pair | verdict | instructions | files MiB | segments (verified) | memo hits | wall ms | check ms | CPU ms | peak MiB |\n"
                  "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n",
              path, repeat, default_cfg().jobs);
    json_t *pairs = json_object_get(m, "pairs");
    strbuf why;
    sb_init(&why);
    for (size_t i = 0; i < json_array_size(pairs); i++) {
        json_t *p = json_array_get(pairs, i);
        const char *name = json_string_value(json_object_get(p, "name"));
        const char *expected = json_string_value(json_object_get(p, "expected"));
        char b[1024], d[1024], r[1024];
        if (!name || !pair_files(p, dir, b, d, r)) continue;
        run_result rr = NO_RESULT;
        if (bench_pair(name, b, d, r, repeat, &rr) != 0) break;
        sb_printf(md, "| %s | %s | %lld / %lld | %.1f / %.1f | %lld (%lld) | %lld | %.0f | %.1f | %.0f | %.0f |\n", name,
                  verdict_name(rr.verdict), rr.instr_b, rr.instr_d, file_mib(b), file_mib(d), rr.segs, rr.segs_ok, rr.memo, rr.wall, rr.check, rr.cpu, rr.peak);
        /* the message starts with the verdict when it is the reason for it */
        const char *vn = verdict_name(rr.verdict), *reason = rr.why;
        size_t vl = strlen(vn);
        if (strncmp(reason, vn, vl) == 0 && strncmp(reason + vl, ": ", 2) == 0) reason += vl + 2;
        sb_printf(&why, "\n%s: expected %s, the checker says %s%s%s.\n", name, expected ? expected : "?", vn, reason[0] ? ": " : "",
                  reason);
        sb_printf(js, "%s {\"pair\": \"%s\", \"verdict\": \"%s\", \"instructions\": [%lld, %lld], \"segments\": %lld, \"segments_verified\": %lld, \"memo_hits\": %lld, "
                      "\"wall_ms\": %.1f, \"check_ms\": %.2f, \"cpu_ms\": %.1f, \"peak_mib\": %.1f}",
                  *first ? "" : ",\n", name, verdict_name(rr.verdict), rr.instr_b, rr.instr_d, rr.segs, rr.segs_ok, rr.memo, rr.wall, rr.check,
                  rr.cpu, rr.peak);
        printf("%-45s %-10s %lld/%lld instructions %8.0f ms wall %8.0f ms cpu %6.0f MiB %s\n", name, verdict_name(rr.verdict), rr.instr_b,
               rr.instr_d, rr.wall, rr.cpu, rr.peak, rr.why);
        *first = 0;
        fflush(stdout);
    }
    if (why.s) sb_puts(md, why.s);
    sb_free(&why);
    json_decref(m);
}

int main(int argc, char **argv) {
    const char *manifest = argc > 1 ? argv[1] : "samples/manifest.json";
    json_error_t err;
    json_t *m = json_load_file(manifest, 0, &err);
    if (!m) {
        fprintf(stderr, "%s: %s\n", manifest, err.text);
        return 2;
    }
    strbuf md, js;
    sb_init(&md);
    sb_init(&js);
    const char *rep_env = getenv("BENCH_REPEAT"), *rounds_env = getenv("BENCH_ROUNDS");
    int repeat = rep_env && atoi(rep_env) > 0 ? atoi(rep_env) : 5;
    int rounds = rounds_env && atoi(rounds_env) >= 0 ? atoi(rounds_env) : 20;
    sb_printf(&md,
              "# Checker benchmark (make bench)\n\nFull-size and scaling sample pairs (every pair not named tiny*), "
              "one process per run, best of %d runs (BENCH_REPEAT), on this machine.\n\n"
              "| pair | verdict | segments | memo hits | wall ms | check ms | CPU ms | peak MiB |\n|---|---|---:|---:|---:|---:|---:|---:|\n",
              repeat);
    sb_puts(&js, "[\n");
    json_t *pairs = json_object_get(m, "pairs");
    int first = 1;
    const char *names[MAX_PAIRS];
    static char files[MAX_PAIRS][3][1024];
    run_result res[MAX_PAIRS];
    size_t nres = 0;
    for (size_t i = 0; i < json_array_size(pairs); i++) {
        json_t *p = json_array_get(pairs, i);
        const char *name = json_string_value(json_object_get(p, "name"));
        if (!name || strncmp(name, "tiny", 4) == 0) continue;
        char b[1024], d[1024], r[1024];
        if (!pair_files(p, "samples", b, d, r)) continue;
        run_result rr = NO_RESULT;
        if (bench_pair(name, b, d, r, repeat, &rr) != 0) return 3;
        if (nres < MAX_PAIRS) {
            snprintf(files[nres][0], sizeof files[nres][0], "%s", b);
            snprintf(files[nres][1], sizeof files[nres][1], "%s", d);
            snprintf(files[nres][2], sizeof files[nres][2], "%s", r);
            names[nres] = name;
            res[nres++] = rr;
        }
        sb_printf(&md, "| %s | %s | %lld | %lld | %.0f | %.1f | %.0f | %.0f |\n", name, verdict_name(rr.verdict), rr.segs, rr.memo, rr.wall,
                  rr.check, rr.cpu, rr.peak);
        sb_printf(&js, "%s {\"pair\": \"%s\", \"verdict\": \"%s\", \"segments\": %lld, \"memo_hits\": %lld, \"wall_ms\": %.1f, \"check_ms\": %.2f, \"cpu_ms\": %.1f, \"peak_mib\": %.1f}",
                  first ? "" : ",\n", name, verdict_name(rr.verdict), rr.segs, rr.memo, rr.wall, rr.check, rr.cpu, rr.peak);
        first = 0;
        printf("%-45s %-10s %4lld segments %4lld memo %8.0f ms wall %8.0f ms cpu %6.0f MiB\n", name, verdict_name(rr.verdict), rr.segs, rr.memo,
               rr.wall, rr.cpu, rr.peak);
        fflush(stdout);
    }
    sb_puts(&md, "\nMemo hits: segments (layers) taken from an equal layer already related instead of being lifted. "
                 "Check ms: the time the segments account for (building the baseline's terms, lifting, saturating, "
                 "checking); the rest of the wall time is reading the two programs and writing the trace. "
                 "Verdicts are the checker's current state (see README.md, Status).\n");
    /* Depth: the deepest pair against the shallowest of one family. */
    int d8 = find_pair(names, nres, "llama3.1-8b.megatron_tp.tp8"), d405 = find_pair(names, nres, "llama3.1-405b.megatron_tp.tp8");
    if (d8 >= 0 && d405 >= 0) {
        /* As for the scaling groups: more rounds that run the two in turn, so
         * that both meet the same machine load; each round's two walls also
         * give a paired ratio, whose median is steadier than a ratio of
         * minima on a shared machine. */
        double *ratios = xcalloc((size_t)rounds + 1, sizeof *ratios), *w8 = xcalloc((size_t)rounds + 1, sizeof *w8),
               *w405 = xcalloc((size_t)rounds + 1, sizeof *w405);
        for (int rd = 0; rd < rounds; rd++) {
            for (int k = 0; k < 2; k++) {
                int j = k ? d405 : d8;
                if (bench_pair(names[j], files[j][0], files[j][1], files[j][2], 1, &res[j]) != 0) return 3;
            }
            w8[rd] = res[d8].last_wall;
            w405[rd] = res[d405].last_wall;
            ratios[rd] = w405[rd] / w8[rd];
        }
        double med_ratio = median(ratios, (size_t)rounds), med8 = median(w8, (size_t)rounds),
               med405 = median(w405, (size_t)rounds);
        free(ratios);
        free(w8);
        free(w405);
        const run_result *a = &res[d8], *z = &res[d405];
        /* Without the memo, and reading on one thread. */
        run_result nm = NO_RESULT, j1 = NO_RESULT;
        int nrep = repeat < 3 ? repeat : 3;
        if (bench_pair_cfg(names[d405], files[d405][0], files[d405][1], files[d405][2], (bench_cfg){default_cfg().jobs, true}, nrep,
                           &nm) != 0 ||
            bench_pair_cfg(names[d405], files[d405][0], files[d405][1], files[d405][2], (bench_cfg){1, false}, repeat, &j1) != 0)
            return 3;
        long long extra = z->segs - a->segs;
        sb_printf(&md, "\n## Depth\n\nLlama-3.1 405B (126 layers) against 8B (32 layers), Megatron tp8, best of the runs above and of "
                       "%d more rounds (BENCH_ROUNDS) that run the two in turn: wall %.0f / %.0f ms = %.2f× "
                       "(target: at most 3×); over those rounds, median wall %.0f / %.0f ms and median ratio of the "
                       "two runs of a round %.2f×; CPU %.0f / %.0f ms = %.2f× (the two programs are read on two threads, "
                       "so wall time hides one reading and CPU time does not); check %.1f / %.1f ms = %.2f×, of which "
                       "lifting the distributed program %.1f / %.1f ms = %.2f×. Reading the programs is linear in their "
                       "size (the 405B files are about four times the 8B ones). A memoised layer still costs its structural comparison and bookkeeping on "
                       "both sides: %.2f ms per extra layer here, against %.2f ms per layer without the memo.\n",
                  rounds, z->wall, a->wall, z->wall / a->wall, med405, med8, med_ratio, z->cpu, a->cpu,
                  a->cpu > 0 ? z->cpu / a->cpu : 0, z->check, a->check, a->check > 0 ? z->check / a->check : 0, z->lift, a->lift,
                  a->lift > 0 ? z->lift / a->lift : 0, extra > 0 ? (z->check - a->check) / (double)extra : 0,
                  z->segs > 0 ? nm.check / (double)z->segs : 0);
        sb_printf(&md, "\n| %s | verdict | memo hits | wall ms | check ms | CPU ms | peak MiB |\n|---|---|---:|---:|---:|---:|---:|\n", names[d405]);
        sb_printf(&md, "| default (-j %d) | %s | %lld | %.0f | %.1f | %.0f | %.0f |\n", default_cfg().jobs, verdict_name(z->verdict), z->memo,
                  z->wall, z->check, z->cpu, z->peak);
        sb_printf(&md, "| --no-memo (target: within 120 s) | %s | %lld | %.0f | %.1f | %.0f | %.0f |\n", verdict_name(nm.verdict), nm.memo,
                  nm.wall, nm.check, nm.cpu, nm.peak);
        sb_printf(&md, "| -j 1 (one thread reads both programs) | %s | %lld | %.0f | %.1f | %.0f | %.0f |\n", verdict_name(j1.verdict), j1.memo,
                  j1.wall, j1.check, j1.cpu, j1.peak);
        printf("depth 405B/8B: wall %.2f (median of paired rounds %.2f), check %.2f; 405B --no-memo %.0f ms, -j1 %.0f ms\n",
               z->wall / a->wall, med_ratio,
               a->check > 0 ? z->check / a->check : 0, nm.wall, j1.wall);
    }
    /* Depth with the layers under jax.lax.scan: one while loop whatever the depth. */
    int s8 = find_pair(names, nres, "llama3.1-8b-scan.megatron_tp.tp8"), s405 = find_pair(names, nres, "llama3.1-405b-scan.megatron_tp.tp8");
    if (s8 >= 0 && s405 >= 0) {
        const run_result *a = &res[s8], *z = &res[s405];
        sb_printf(&md, "\nScanned (the layers under jax.lax.scan: one HLO while loop over the stacked weights, the same size at any depth): "
                       "llama3.1-405b-scan against llama3.1-8b-scan, Megatron tp8: %s / %s, wall %.1f / %.1f ms = %.2f×, "
                       "check %.2f / %.2f ms, peak %.0f / %.0f MiB.\n",
                  verdict_name(z->verdict), verdict_name(a->verdict), z->wall, a->wall, a->wall > 0 ? z->wall / a->wall : 0, z->check, a->check,
                  z->peak, a->peak);
        printf("depth scanned 405B/8B: wall %.2f\n", a->wall > 0 ? z->wall / a->wall : 0);
    }
    /* Device-count scaling groups, in manifest order of their first member. */
    bool done[MAX_PAIRS] = {false};
    bool header = false;
    for (size_t i = 0; i < nres; i++) {
        long n0;
        size_t len = scaling_prefix(names[i], &n0);
        if (!len || done[i]) continue;
        size_t idx[MAX_PAIRS], cnt = 0;
        for (size_t j = i; j < nres; j++) {
            long nj;
            if (scaling_prefix(names[j], &nj) == len && strncmp(names[i], names[j], len) == 0) {
                idx[cnt++] = j;
                done[j] = true;
            }
        }
        if (cnt < 3) continue;
        /* members by N */
        for (size_t a = 1; a < cnt; a++)
            for (size_t c = a; c > 0; c--) {
                long x, y;
                scaling_prefix(names[idx[c - 1]], &x);
                scaling_prefix(names[idx[c]], &y);
                if (x <= y) break;
                size_t t = idx[c];
                idx[c] = idx[c - 1];
                idx[c - 1] = t;
            }
        for (int rd = 0; rd < rounds; rd++)
            for (size_t a = 0; a < cnt; a++) {
                size_t j = idx[a];
                if (bench_pair(names[j], files[j][0], files[j][1], files[j][2], 1, &res[j]) != 0) return 3;
            }
        if (!header) {
            sb_printf(&md, "\n## Device-count scaling\n\nThe same program at each tensor-parallel degree N (pairs PREFIX.tpN), best of its runs above and of "
                         "%d more rounds (BENCH_ROUNDS) that run every N in turn; ratio = slowest / fastest over N. Target for llama-scale.megatron_tp (tp2 ... tp64): within 1.5.\n\n"
                         "| family | wall ms by N | CPU ms by N | verdicts | wall max/min | CPU max/min |\n|---|---|---|---|---:|---:|\n",
                      rounds);
            header = true;
        }
        strbuf wl, cl, vl;
        sb_init(&wl);
        sb_init(&cl);
        sb_init(&vl);
        double wmin = 1e300, wmax = 0, cmin = 1e300, cmax = 0;
        for (size_t a = 0; a < cnt; a++) {
            const run_result *q = &res[idx[a]];
            long nn;
            scaling_prefix(names[idx[a]], &nn);
            sb_printf(&wl, "%s%ld: %.1f", a ? ", " : "", nn, q->wall);
            sb_printf(&cl, "%s%ld: %.1f", a ? ", " : "", nn, q->cpu);
            if (!vl.s || !strstr(vl.s, verdict_name(q->verdict))) sb_printf(&vl, "%s%s", vl.len ? ", " : "", verdict_name(q->verdict));
            if (q->wall < wmin) wmin = q->wall;
            if (q->wall > wmax) wmax = q->wall;
            if (q->cpu < cmin) cmin = q->cpu;
            if (q->cpu > cmax) cmax = q->cpu;
        }
        double wr = wmin > 0 ? wmax / wmin : 0, cr = cmin > 0 ? cmax / cmin : 0;
        sb_printf(&md, "| %.*s | %s | %s | %s | %.2f | %.2f |\n", (int)len, names[i], wl.s, cl.s, vl.s, wr, cr);
        printf("scaling %.*s (N = %s): wall max/min %.2f, CPU max/min %.2f\n", (int)len, names[i], wl.s, wr, cr);
        sb_free(&wl);
        sb_free(&cl);
        sb_free(&vl);
    }
    const char *big_env = getenv("BENCH_BIG_REPEAT");
    int big_repeat = big_env && atoi(big_env) >= 0 ? atoi(big_env) : 3;
    if (big_repeat > 0) bench_big(argc > 2 ? argv[2] : "samples/bigtrain/manifest.json", big_repeat, &md, &js, &first);
    sb_puts(&js, "\n]\n");
    FILE *f = fopen("tests/bench/RESULTS.md", "w");
    if (f) {
        fputs(md.s, f);
        fclose(f);
    }
    f = fopen("build/bench-check.json", "w");
    if (f) {
        fputs(js.s, f);
        fclose(f);
    }
    sb_free(&md);
    sb_free(&js);
    json_decref(m);
    return 0;
}
