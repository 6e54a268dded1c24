/* bench_parse — HLO text and protobuf parsing throughput and peak memory (make bench).
 *
 * Measures, asserts nothing. Inputs: the largest text sample under samples/
 * (decompressed), and a synthetic module of about 200 MB shaped like a JAX dump
 * (layers of dots, elementwise ops and collectives, each with metadata); for
 * protobuf, the largest protobuf sample and the synthetic module written as
 * protobuf, each read by hlo_parse_pb and by its careful path alone
 * (hlo_parse_pb_careful: the walker, then protobuf-c).
 * Reports MB/s (parse only, file already in memory) and the memory the parsed
 * module holds (arena + pools) relative to the input size; peak RSS is printed too.
 */
#define _XOPEN_SOURCE 700
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "hlo.h"
#include "io.h"

static char best[4096], best_pb[4096];
static off_t best_size, best_pb_size;

static bool ends_with(const char *s, size_t n, const char *suffix) {
    size_t k = strlen(suffix);
    return n > k && strcmp(s + n - k, suffix) == 0;
}

static int pick(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)ftw;
    size_t n = strlen(path);
    bool text = ends_with(path, n, ".hlo") || ends_with(path, n, ".hlo.gz");
    bool pb = ends_with(path, n, ".hlo.pb") || ends_with(path, n, ".hlo.pb.gz");
    if (flag == FTW_F && text && st->st_size > best_size) {
        best_size = st->st_size;
        snprintf(best, sizeof best, "%s", path);
    }
    if (flag == FTW_F && pb && st->st_size > best_pb_size) {
        best_pb_size = st->st_size;
        snprintf(best_pb, sizeof best_pb, "%s", path);
    }
    return 0;
}

typedef hlo_module *(*parse_fn)(const char *src, size_t n, const char *path, diag *d);
static hlo_module *parse_text(const char *src, size_t n, const char *path, diag *d) {
    return hlo_parse_text(src, n, path, d);
}
static hlo_module *parse_pb(const char *src, size_t n, const char *path, diag *d) {
    return hlo_parse_pb((const uint8_t *)src, n, path, d);
}
static hlo_module *parse_pb_careful(const char *src, size_t n, const char *path, diag *d) {
    return hlo_parse_pb_careful((const uint8_t *)src, n, path, d);
}

static char *synthetic(size_t target, size_t *len) {
    strbuf b;
    sb_init(&b);
    sb_puts(&b, "HloModule synthetic, num_partitions=8\n\n%add {\n  %a = f32[] parameter(0)\n  %b = f32[] parameter(1)\n"
                "  ROOT %s = f32[] add(%a, %b)\n}\n\nENTRY %main {\n  %x.0 = bf16[16,4096]{1,0} parameter(0), sharding={replicated}\n"
                "  %w = bf16[4096,512]{1,0} parameter(1), sharding={devices=[1,8]<=[8]}\n");
    long i = 0;
    while (b.len < target) {
        sb_printf(&b,
                  "  %%dot.%ld = bf16[16,512]{1,0} dot(%%x.%ld, %%w), lhs_contracting_dims={1}, rhs_contracting_dims={0}, "
                  "metadata={op_type=\"dot_general\" op_name=\"jit(forward)/layers.%ld/attn/q_proj/dot_general\" "
                  "source_file=\"samples/gen/models.py\" source_line=%ld}\n"
                  "  %%ar.%ld = bf16[16,512]{1,0} all-reduce(%%dot.%ld), channel_id=%ld, replica_groups=[1,8]<=[8], "
                  "use_global_device_ids=true, to_apply=%%add, metadata={op_name=\"jit(forward)/layers.%ld/psum\"}\n"
                  "  %%ag.%ld = bf16[16,4096]{1,0} all-gather(%%ar.%ld), channel_id=%ld, replica_groups=[1,8]<=[8], "
                  "dimensions={1}, use_global_device_ids=true\n"
                  "  %%x.%ld = bf16[16,4096]{1,0} multiply(%%ag.%ld, %%x.%ld), metadata={op_type=\"mul\" "
                  "op_name=\"jit(forward)/layers.%ld/mlp/mul\" source_file=\"samples/gen/models.py\" source_line=%ld}\n",
                  i, i, i, 100 + i % 300, i, i, 2 * i + 1, i, i, i, 2 * i + 2, i + 1, i, i, i, 200 + i % 300);
        i++;
    }
    sb_printf(&b, "  ROOT %%out = bf16[16,4096]{1,0} copy(%%x.%ld)\n}\n", i);
    *len = b.len;
    return sb_take(&b);
}

static void measure(const char *what, parse_fn parse, const char *src, size_t n) {
    /* Warm-up parse, then the timed ones; the best of three is reported. */
    double best_ms = 1e30;
    size_t held = 0;
    uint64_t instrs = 0;
    for (int rep = 0; rep < 3; rep++) {
        diag d;
        diag_init(&d, what);
        double t0 = now_ms();
        hlo_module *m = parse(src, n, what, &d);
        double t = now_ms() - t0;
        if (!m) {
            printf("%s: parse failed:\n%s", what, d.out.s);
            diag_free(&d);
            return;
        }
        if (t < best_ms) best_ms = t;
        held = arena_used(&m->arena) + m->interned.cap * sizeof(strmap_slot);
        instrs = graph_instr_count(m);
        graph_free(m);
        diag_free(&d);
    }
    printf("| %-44s | %8.1f | %9llu | %8.1f | %6.0f | %5.2f |\n", what, n / 1e6, (unsigned long long)instrs,
           best_ms, n / 1e6 / (best_ms / 1e3), (double)held / (double)n);
}

/* Peak RSS of parsing src in a child process, relative to the text size: the
 * memory a user's `scalify inspect` needs (text buffer + module + parser). */
static void peak_ratio(const char *what, const char *src, size_t n) {
    fflush(stdout); /* or the child prints the table again */
    pid_t pid = fork();
    if (pid == 0) {
        size_t before = peak_rss_bytes();
        diag d;
        diag_init(&d, what);
        hlo_module *m = hlo_parse_text(src, n, what, &d);
        size_t after = peak_rss_bytes();
        printf("peak memory while parsing %s: %.2f × the text (%.0f MB above the %.0f MB already resident)\n", what,
               (double)(after - before + n) / (double)n, (after - before) / 1e6, before / 1e6);
        graph_free(m);
        diag_free(&d);
        fflush(stdout);
        _exit(0);
    }
    int st;
    waitpid(pid, &st, 0);
}

/* The largest protobuf sample, and the synthetic module as protobuf, each
 * through both protobuf paths. */
static void measure_pb(const char *synthetic_text, size_t n) {
    char what[4200];
    if (best_pb[0]) {
        diag d;
        diag_init(&d, best_pb);
        size_t len;
        char *buf = io_read_file(best_pb, &len, NULL, &d);
        if (buf) {
            measure(best_pb, parse_pb, buf, len);
            snprintf(what, sizeof what, "%s (careful path)", best_pb);
            measure(what, parse_pb_careful, buf, len);
        }
        free(buf);
        diag_free(&d);
    }
    diag d;
    diag_init(&d, "synthetic");
    hlo_module *m = hlo_parse_text(synthetic_text, n, "synthetic", &d);
    if (m) {
        strbuf pb;
        sb_init(&pb);
        hlo_write_pb(m, &pb);
        graph_free(m);
        measure("synthetic as protobuf", parse_pb, pb.s, pb.len);
        measure("synthetic as protobuf (careful path)", parse_pb_careful, pb.s, pb.len);
        sb_free(&pb);
    }
    diag_free(&d);
}

int main(void) {
    printf("| input | input MB | instructions | parse ms | MB/s | module bytes / input bytes |\n");
    printf("|---|---|---|---|---|---|\n");
    nftw("samples", pick, 16, FTW_PHYS);
    if (best[0]) {
        diag d;
        diag_init(&d, best);
        size_t n;
        char *src = io_read_file(best, &n, NULL, &d);
        if (src) measure(best, parse_text, src, n);
        free(src);
        diag_free(&d);
    }
    size_t n;
    char *src = synthetic(200u << 20, &n);
    measure("synthetic (JAX-like, with metadata)", parse_text, src, n);
    measure_pb(src, n);
    peak_ratio("the synthetic module", src, n);
    free(src);
    printf("\npeak RSS of this process: %.0f MB (includes the 200 MB synthetic text)\n", peak_rss_bytes() / 1e6);
    return 0;
}
