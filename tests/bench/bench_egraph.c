/* bench_egraph — e-graph and saturation benchmarks (measure, never assert):
 * insertion throughput, saturation of a long sum chain under reassociation,
 * transpose chains, a transformer layer's worth of terms, rebuild time versus
 * the number of merges, and memory per e-node. Run from the repository root
 * (reads rules/). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "eattr.h"
#include "egraph.h"
#include "graph.h"
#include "rules.h"
#include "shape.h"

static void bench_insert(void) {
    enum { N = 4000000 };
    egraph *g = eg_new();
    int64_t dims[2] = {128, 128};
    uint32_t t = eg_type(g, DT_F32, dims, 2);
    eid leaves[64];
    for (int64_t k = 0; k < 64; k++) leaves[k] = eg_add(g, EG_OP_PARAM, eg_attr(g, &k, 1), t, NULL, 0, EG_BASELINE);
    /* Operands as in HLO graphs: the previous node and one from the last 4096. */
    double t0 = now_ms();
    eid prev = leaves[0];
    uint64_t x = 88172645463325252ull;
    for (int i = 0; i < N; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        uint32_t back = (uint32_t)(x % 4096) + 1, id = (uint32_t)i + 64;
        eid ch[2] = {prev, back < id ? id - back : leaves[x % 64]};
        prev = eg_add(g, (x >> 20) & 1 ? OP_ADD : OP_MULTIPLY, 0, t, ch, 2, EG_BASELINE);
    }
    double ms = now_ms() - t0;
    eg_stats s = eg_get_stats(g);
    printf("insert: %d binary e-nodes (operands from the last 4096) in %.1f ms: %.2f M insertions/s; "
           "%.1f bytes per e-node, peak RSS %.1f MB\n",
           N, ms, N / ms / 1e3, (double)s.bytes / s.nodes, peak_rss_bytes() / 1e6);
    eg_free(g);
    g = eg_new();
    t = eg_type(g, DT_F32, dims, 2);
    for (int64_t k = 0; k < 64; k++) leaves[k] = eg_add(g, EG_OP_PARAM, eg_attr(g, &k, 1), t, NULL, 0, EG_BASELINE);
    prev = leaves[0];
    t0 = now_ms();
    for (int i = 0; i < N; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        eid ch[2] = {prev, (eid)(x % (uint64_t)(i + 64))};
        prev = eg_add(g, (x >> 20) & 1 ? OP_ADD : OP_MULTIPLY, 0, t, ch, 2, EG_BASELINE);
    }
    ms = now_ms() - t0;
    printf("insert: %d binary e-nodes (operands anywhere: cache-hostile) in %.1f ms: %.2f M insertions/s\n", N, ms,
           N / ms / 1e3);
    t0 = now_ms();
    for (int i = 0; i < N; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        eid ch[2] = {leaves[x % 64], leaves[(x >> 6) % 64]};
        eg_add(g, OP_ADD, 0, t, ch, 2, EG_BASELINE);
    }
    ms = now_ms() - t0;
    printf("insert: %d hash-cons hits/adds of small terms in %.1f ms: %.2f M/s\n", N, ms, N / ms / 1e3);
    eg_free(g);
}

static void bench_rebuild(void) {
    for (int merges = 1000; merges <= 100000; merges *= 10) {
        egraph *g = eg_new();
        uint32_t t = eg_type(g, DT_F32, NULL, 0);
        enum { W = 200000 };
        eid *leaf = malloc(W * sizeof *leaf), *top = malloc(W * sizeof *top);
        for (int64_t k = 0; k < W; k++) {
            leaf[k] = eg_add(g, EG_OP_PARAM, eg_attr(g, &k, 1), t, NULL, 0, 0);
            eid c = leaf[k];
            for (int d = 0; d < 3; d++) c = eg_add(g, OP_NEGATE, 0, t, &c, 1, 0);
            top[k] = c;
        }
        double t0 = now_ms();
        for (int i = 0; i < merges; i++) eg_union(g, leaf[2 * i % W], leaf[(2 * i + 1) % W], NULL);
        uint64_t rep = eg_rebuild(g);
        double ms = now_ms() - t0;
        printf("rebuild: %6d merges over %d nodes: %.2f ms (%llu repairs)\n", merges, (int)eg_node_count(g), ms,
               (unsigned long long)rep);
        free(leaf);
        free(top);
        eg_free(g);
    }
}

static void saturate(rs_ruleset *rs, const char *name, egraph *g) {
    rs_budget b = rs_budget_default();
    rs_result r;
    uint32_t n0 = eg_node_count(g);
    rs_run(rs, g, NULL, &b, NULL, &r);
    printf("saturate %-28s %s after %u iterations: %u → %u nodes, %llu matches, %llu unions, %.1f ms\n", name,
           trace_stop_name(r.stop), r.iterations, n0, eg_node_count(g), (unsigned long long)r.matches,
           (unsigned long long)r.unions, r.ms);
    rs_result_free(&r);
}

static void add_text(rs_ruleset *rs, egraph *g, strbuf *s) {
    diag d;
    diag_init(&d, "bench");
    if (rs_add_term(rs, g, s->s, s->len, &d) == EID_NONE) fprintf(stderr, "%s", d.out.s);
    diag_free(&d);
    sb_reset(s);
}

int main(void) {
    bench_insert();
    bench_rebuild();
    diag d;
    diag_init(&d, "rules");
    rs_ruleset *rs = rs_new();
    if (rs_load_dir(rs, "rules", &d)) {
        fprintf(stderr, "%s", d.out.s);
        return 1;
    }
    diag_free(&d);
    strbuf s;
    sb_init(&s);

    for (int n = 100; n <= 1000; n *= 10) {
        egraph *g = eg_new();
        int64_t dims[1] = {64};
        uint32_t t = eg_type(g, DT_F32, dims, 1);
        int64_t k = 0;
        eid acc = eg_add(g, EG_OP_PARAM, eg_attr(g, &k, 1), t, NULL, 0, EG_BASELINE);
        for (k = 1; k < n; k++) {
            eid ch[2] = {acc, eg_add(g, EG_OP_PARAM, eg_attr(g, &k, 1), t, NULL, 0, EG_BASELINE)};
            acc = eg_add(g, OP_ADD, 0, t, ch, 2, EG_BASELINE);
        }
        char name[64];
        snprintf(name, sizeof name, "sum chain of %d:", n);
        saturate(rs, name, g);
        eg_free(g);
    }

    egraph *g = eg_new();
    for (int c = 0; c < 200; c++) {
        for (int i = 0; i < 50; i++) sb_puts(&s, "(transpose ");
        sb_printf(&s, "(param %d f32[2,3,4])", c);
        for (int i = 0; i < 50; i++) sb_puts(&s, i % 2 ? " :dimensions (1 2 0))" : " :dimensions (0 2 1))");
        add_text(rs, g, &s);
    }
    saturate(rs, "200 transpose chains of 50:", g);
    eg_free(g);

    /* A transformer layer's worth: fused QKV and gate/up projections against
     * their split forms, attention-score transposes, residual sums, converts. */
    g = eg_new();
    for (int layer = 0; layer < 32; layer++) {
        int p = layer * 10;
        const char *x = "(param %d bf16[16,256])";
        sb_printf(&s, "(add (param %d f32[16,256]) (convert (dot ", p);
        sb_printf(&s, x, p + 1);
        sb_printf(&s, " (concatenate (param %d bf16[256,128]) (param %d bf16[256,64]) (param %d bf16[256,64]) :dimensions (1))"
                      " :lhs_contracting_dims (1) :rhs_contracting_dims (0)) :type f32[16,256]))", p + 2, p + 3, p + 4);
        add_text(rs, g, &s);
        for (int k = 0; k < 3; k++) {
            sb_printf(&s, "(dot ");
            sb_printf(&s, x, p + 1);
            sb_printf(&s, " (param %d bf16[256,%d]) :lhs_contracting_dims (1) :rhs_contracting_dims (0))", p + 2 + k,
                      k ? 64 : 128);
            add_text(rs, g, &s);
        }
        sb_printf(&s, "(transpose (transpose (dot (param %d f32[8,16,32]) (param %d f32[8,16,32]) :lhs_batch_dims (0)"
                      " :rhs_batch_dims (0) :lhs_contracting_dims (2) :rhs_contracting_dims (2)) :dimensions (0 2 1))"
                      " :dimensions (0 2 1))", p + 5, p + 6);
        add_text(rs, g, &s);
        sb_printf(&s, "(convert (convert (add (add (param %d f32[16,256]) (param %d f32[16,256])) (param %d f32[16,256]))"
                      " :type f64[16,256]) :type f32[16,256])", p + 7, p + 8, p + 9);
        add_text(rs, g, &s);
    }
    saturate(rs, "32 transformer layers:", g);
    eg_stats st = eg_get_stats(g);
    printf("memory: %.1f bytes per e-node after saturation (%llu nodes, %zu bytes)\n", (double)st.bytes / st.nodes,
           (unsigned long long)st.nodes, st.bytes);
    eg_free(g);
    sb_free(&s);
    rs_free(rs);
    return 0;
}
