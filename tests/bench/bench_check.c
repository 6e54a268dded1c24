/* bench_check — the checker on the full-size sample pairs (make bench).
 *
 * Measures, asserts nothing. Each pair runs in a child process so its peak
 * memory is its own (wait4's ru_maxrss); wall time is measured around the
 * child, CPU time from its rusage. Writes build/bench/check.json and the
 * Markdown table tests/bench/RESULTS.md (verdict, segments, wall, CPU, peak).
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "util.h"

static int run_child(const char *name, const char *b, const char *d, const char *r, int fd) {
    check_opts o = {.name = name, .baseline = b, .distributed = d};
    if (strcmp(r, "auto") == 0) o.auto_relations = true;
    else o.relations = r;
    diag dg;
    diag_init(&dg, name);
    json_t *trace = NULL;
    int v = check_pair(&o, &trace, &dg);
    json_t *segs = trace ? json_object_get(json_object_get(trace, "summary"), "segments") : NULL;
    dprintf(fd, "%d %lld\n", v, (long long)(segs ? json_integer_value(segs) : 0));
    return 0;
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
    sb_puts(&md, "# Checker benchmark (make bench)\n\nFull-size sample pairs, one process each, on this machine.\n\n"
                 "| pair | verdict | segments | wall ms | CPU ms | peak MiB |\n|---|---|---:|---:|---:|---:|\n");
    sb_puts(&js, "[\n");
    json_t *pairs = json_object_get(m, "pairs");
    int first = 1;
    for (size_t i = 0; i < json_array_size(pairs); i++) {
        json_t *p = json_array_get(pairs, i);
        const char *name = json_string_value(json_object_get(p, "name"));
        if (!name || strncmp(name, "tiny", 4) == 0) continue;
        char b[1024], d[1024], r[1024];
        json_t *bj = json_object_get(p, "baseline"), *dj = json_object_get(p, "distributed");
        const char *bf = json_string_value(json_object_get(bj, "pb")), *df = json_string_value(json_object_get(dj, "pb"));
        const char *rv = json_string_value(json_object_get(p, "relations"));
        if (!bf || !df || !rv) continue;
        snprintf(b, sizeof b, "samples/%s", bf);
        snprintf(d, sizeof d, "samples/%s", df);
        if (strcmp(rv, "auto") == 0) snprintf(r, sizeof r, "auto");
        else snprintf(r, sizeof r, "samples/%s", rv);
        int pipefd[2];
        if (pipe(pipefd) != 0) return 3;
        double t0 = now_ms();
        pid_t pid = fork();
        if (pid == 0) {
            close(pipefd[0]);
            run_child(name, b, d, r, pipefd[1]);
            _exit(0);
        }
        close(pipefd[1]);
        char buf[64] = "";
        ssize_t got = read(pipefd[0], buf, sizeof buf - 1);
        close(pipefd[0]);
        int status;
        struct rusage ru;
        wait4(pid, &status, 0, &ru);
        double wall = now_ms() - t0;
        double cpu = (double)ru.ru_utime.tv_sec * 1e3 + ru.ru_utime.tv_usec / 1e3 + (double)ru.ru_stime.tv_sec * 1e3 +
                     ru.ru_stime.tv_usec / 1e3;
        int v = VERDICT_ERROR;
        long long segs = 0;
        if (got > 0) sscanf(buf, "%d %lld", &v, &segs);
        double peak = ru.ru_maxrss / 1024.0;
        sb_printf(&md, "| %s | %s | %lld | %.0f | %.0f | %.0f |\n", name, verdict_name(v), segs, wall, cpu, peak);
        sb_printf(&js, "%s {\"pair\": \"%s\", \"verdict\": \"%s\", \"segments\": %lld, \"wall_ms\": %.1f, \"cpu_ms\": %.1f, \"peak_mib\": %.1f}",
                  first ? "" : ",\n", name, verdict_name(v), segs, wall, cpu, peak);
        first = 0;
        printf("%-45s %-10s %4lld segments %8.0f ms wall %8.0f ms cpu %6.0f MiB\n", name, verdict_name(v), segs, wall, cpu, peak);
        fflush(stdout);
    }
    sb_puts(&js, "\n]\n");
    sb_puts(&md, "\nMemoisation of identical layers is not built yet: the time is the sum over all layers. "
                 "Verdicts are the checker's current state (see README.md, Status).\n");
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
