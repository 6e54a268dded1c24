/* gen_deep — writes a deep Llama-like pair for the scaling benchmark
 * (make bench): a baseline program, its Megatron tensor-parallel version and
 * their relations file, every layer written out (unrolled).
 *
 *   gen-deep [-u] [-s] LAYERS TP OUT_PREFIX
 *
 * Writes OUT_PREFIX.baseline.hlo, OUT_PREFIX.dist.hlo and
 * OUT_PREFIX.relations.json. Each layer is a pre-norm block of two halves, an
 * attention-like half (query/key/value projections column-sharded, a score
 * product, a softmax, an output projection row-sharded, an all-reduce) and a
 * gated MLP (gate and up column-sharded, SiLU, down row-sharded, an
 * all-reduce), each with an RMS norm and a residual add, named layers.N in
 * op_name so the checker cuts one segment per layer. With -u every layer's
 * hidden width differs (TP * (16 + N)), so no two layers have the same
 * structure and the memo cannot hit; -s writes small layers (small_layer).  Deterministic: the output depends on the
 * arguments only. Measures nothing; bench_check runs the pairs.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { B = 4, H = 64, F0 = 16 };

typedef struct {
    FILE *f;
    long next;          /* next instruction number */
    const char *groups; /* the replica group of every device: "0,1,...,TP-1" */
} out;

/* One layer of the program on x (instruction number) of shape f32[B,H];
 * returns the number of the layer's output. tp = 1 writes the baseline;
 * params names the layer's first parameter number. */
static long layer(out *o, long x, int n, int tp, int f, long params) {
    FILE *fp = o->f;
    long i = o->next;
    int fl = f / tp; /* local width of the sharded dimension */
    char md[64];
    snprintf(md, sizeof md, "metadata={op_name=\"layers.%d/", n);
#define P(k) (params + (k))
    /* parameters: 0 attn_norm [H], 1 wq [H,f], 2 wk [H,f], 3 wv [H,f], 4 wo [f,H],
       5 mlp_norm [H], 6 w_gate [H,f], 7 w_up [H,f], 8 w_down [f,H] */
    for (int half = 0; half < 2; half++) {
        long nw = half ? P(5) : P(0);
        /* RMS norm: x * rsqrt(mean(x*x) + eps) * w */
        fprintf(fp, "  %%sq.%ld = f32[%d,%d]{1,0} multiply(%%v.%ld, %%v.%ld), %snorm/mul\"}\n", i, B, H, x, x, md);
        fprintf(fp, "  %%v.%ld = f32[%d]{0} reduce(%%sq.%ld, %%zero), dimensions={1}, to_apply=%%add_f32, %snorm/reduce_sum\"}\n", i, B, i, md);
        fprintf(fp, "  %%v.%ld = f32[%d]{0} multiply(%%v.%ld, %%inv_h), %snorm/div\"}\n", i + 1, B, i, md);
        fprintf(fp, "  %%v.%ld = f32[%d]{0} add(%%v.%ld, %%eps), %snorm/add\"}\n", i + 2, B, i + 1, md);
        fprintf(fp, "  %%v.%ld = f32[%d]{0} rsqrt(%%v.%ld), %snorm/rsqrt\"}\n", i + 3, B, i + 2, md);
        fprintf(fp, "  %%v.%ld = f32[%d,%d]{1,0} broadcast(%%v.%ld), dimensions={0}, %snorm/broadcast\"}\n", i + 4, B, H, i + 3, md);
        fprintf(fp, "  %%v.%ld = f32[%d,%d]{1,0} multiply(%%v.%ld, %%v.%ld), %snorm/mul\"}\n", i + 5, B, H, x, i + 4, md);
        fprintf(fp, "  %%v.%ld = f32[%d,%d]{1,0} broadcast(%%p.%ld), dimensions={1}, %snorm/broadcast\"}\n", i + 6, B, H, nw, md);
        fprintf(fp, "  %%v.%ld = f32[%d,%d]{1,0} multiply(%%v.%ld, %%v.%ld), %snorm/mul\"}\n", i + 7, B, H, i + 5, i + 6, md);
        long nx = i + 7, h;
        i += 8;
        if (!half) {
            /* q, k, v [B,fl]; scores q k^T [B,B]; softmax; scores v [B,fl] */
            for (int k = 0; k < 3; k++)
                fprintf(fp, "  %%v.%ld = f32[%d,%d]{1,0} dot(%%v.%ld, %%p.%ld), lhs_contracting_dims={1}, rhs_contracting_dims={0}, %sattn/dot_general\"}\n",
                        i + k, B, fl, nx, P(1 + k), md);
            long q = i, k = i + 1, v = i + 2;
            i += 3;
            fprintf(fp, "  %%v.%ld = f32[%d,%d]{1,0} dot(%%v.%ld, %%v.%ld), lhs_contracting_dims={1}, rhs_contracting_dims={1}, %sattn/dot_general\"}\n", i, B, B, q, k, md);
            if (tp > 1) /* the scores need the whole head dimension: sum the shards */
                fprintf(fp, "  %%v.%ld = f32[%d,%d]{1,0} all-reduce(%%v.%ld), channel_id=%ld, replica_groups={{%s}}, use_global_device_ids=true, to_apply=%%add_f32, %sattn/psum\"}\n",
                        i + 1, B, B, i, i, o->groups, md);
            else
                fprintf(fp, "  %%v.%ld = f32[%d,%d]{1,0} copy(%%v.%ld), %sattn/copy\"}\n", i + 1, B, B, i, md);
            fprintf(fp, "  %%v.%ld = f32[%d]{0} reduce(%%v.%ld, %%ninf), dimensions={1}, to_apply=%%max_f32, %sattn/reduce_max\"}\n", i + 2, B, i + 1, md);
            fprintf(fp, "  %%v.%ld = f32[%d,%d]{1,0} broadcast(%%v.%ld), dimensions={0}, %sattn/broadcast\"}\n", i + 3, B, B, i + 2, md);
            fprintf(fp, "  %%v.%ld = f32[%d,%d]{1,0} subtract(%%v.%ld, %%v.%ld), %sattn/sub\"}\n", i + 4, B, B, i + 1, i + 3, md);
            fprintf(fp, "  %%v.%ld = f32[%d,%d]{1,0} exponential(%%v.%ld), %sattn/exp\"}\n", i + 5, B, B, i + 4, md);
            fprintf(fp, "  %%v.%ld = f32[%d]{0} reduce(%%v.%ld, %%zero), dimensions={1}, to_apply=%%add_f32, %sattn/reduce_sum\"}\n", i + 6, B, i + 5, md);
            fprintf(fp, "  %%v.%ld = f32[%d,%d]{1,0} broadcast(%%v.%ld), dimensions={0}, %sattn/broadcast\"}\n", i + 7, B, B, i + 6, md);
            fprintf(fp, "  %%v.%ld = f32[%d,%d]{1,0} divide(%%v.%ld, %%v.%ld), %sattn/div\"}\n", i + 8, B, B, i + 5, i + 7, md);
            fprintf(fp, "  %%v.%ld = f32[%d,%d]{1,0} dot(%%v.%ld, %%v.%ld), lhs_contracting_dims={1}, rhs_contracting_dims={0}, %sattn/dot_general\"}\n", i + 9, B, fl, i + 8, v, md);
            h = i + 9;
            i += 10;
            fprintf(fp, "  %%v.%ld = f32[%d,%d]{1,0} dot(%%v.%ld, %%p.%ld), lhs_contracting_dims={1}, rhs_contracting_dims={0}, %sattn/dot_general\"}\n", i, B, H, h, P(4), md);
        } else {
            fprintf(fp, "  %%v.%ld = f32[%d,%d]{1,0} dot(%%v.%ld, %%p.%ld), lhs_contracting_dims={1}, rhs_contracting_dims={0}, %smlp/dot_general\"}\n", i, B, fl, nx, P(6), md);
            fprintf(fp, "  %%v.%ld = f32[%d,%d]{1,0} dot(%%v.%ld, %%p.%ld), lhs_contracting_dims={1}, rhs_contracting_dims={0}, %smlp/dot_general\"}\n", i + 1, B, fl, nx, P(7), md);
            fprintf(fp, "  %%v.%ld = f32[%d,%d]{1,0} logistic(%%v.%ld), %smlp/logistic\"}\n", i + 2, B, fl, i, md);
            fprintf(fp, "  %%v.%ld = f32[%d,%d]{1,0} multiply(%%v.%ld, %%v.%ld), %smlp/mul\"}\n", i + 3, B, fl, i, i + 2, md);
            fprintf(fp, "  %%v.%ld = f32[%d,%d]{1,0} multiply(%%v.%ld, %%v.%ld), %smlp/mul\"}\n", i + 4, B, fl, i + 3, i + 1, md);
            i += 5;
            fprintf(fp, "  %%v.%ld = f32[%d,%d]{1,0} dot(%%v.%ld, %%p.%ld), lhs_contracting_dims={1}, rhs_contracting_dims={0}, %smlp/dot_general\"}\n", i, B, H, i - 1, P(8), md);
        }
        long o2 = i;
        if (tp > 1) {
            fprintf(fp, "  %%v.%ld = f32[%d,%d]{1,0} all-reduce(%%v.%ld), channel_id=%ld, replica_groups={{%s}}, use_global_device_ids=true, to_apply=%%add_f32, %s%s/psum\"}\n",
                    i + 1, B, H, i, i + 1, o->groups, md, half ? "mlp" : "attn");
            o2 = i + 1;
        }
        i = o2 + 1;
        fprintf(fp, "  %%v.%ld = f32[%d,%d]{1,0} add(%%v.%ld, %%v.%ld), %sadd\"}\n", i, B, H, x, o2, md);
        x = i++;
    }
#undef P
    o->next = i;
    return x;
}

/* A small layer (-s): the MLP alone, without norm, gate or attention:
 * x + dot(silu(dot(x, w_up)), w_down), w_up column-sharded, w_down
 * row-sharded, one all-reduce; about 15 instructions over both programs. */
static long small_layer(out *o, long x, int n, int tp, int f, long params) {
    long i = o->next;
    int fl = f / tp;
    char md[64];
    snprintf(md, sizeof md, "metadata={op_name=\"layers.%d/mlp/", n);
    fprintf(o->f, "  %%v.%ld = f32[%d,%d]{1,0} dot(%%v.%ld, %%p.%ld), lhs_contracting_dims={1}, rhs_contracting_dims={0}, %sdot_general\"}\n", i, B, fl, x, params, md);
    fprintf(o->f, "  %%v.%ld = f32[%d,%d]{1,0} logistic(%%v.%ld), %slogistic\"}\n", i + 1, B, fl, i, md);
    fprintf(o->f, "  %%v.%ld = f32[%d,%d]{1,0} multiply(%%v.%ld, %%v.%ld), %smul\"}\n", i + 2, B, fl, i, i + 1, md);
    fprintf(o->f, "  %%v.%ld = f32[%d,%d]{1,0} dot(%%v.%ld, %%p.%ld), lhs_contracting_dims={1}, rhs_contracting_dims={0}, %sdot_general\"}\n", i + 3, B, H, i + 2, params + 1, md);
    long y = i + 3;
    i += 4;
    if (tp > 1) {
        fprintf(o->f, "  %%v.%ld = f32[%d,%d]{1,0} all-reduce(%%v.%ld), channel_id=%ld, replica_groups={{%s}}, use_global_device_ids=true, to_apply=%%add_f32, %spsum\"}\n",
                i, B, H, y, i, o->groups, md);
        y = i++;
    }
    fprintf(o->f, "  %%v.%ld = f32[%d,%d]{1,0} add(%%v.%ld, %%v.%ld), %sadd\"}\n", i, B, H, x, y, md);
    o->next = i + 1;
    return i;
}

/* The kind of each parameter of a layer, in layer()'s order (0 [H], 1 [H,f]
 * column-sharded, 2 [f,H] row-sharded), and of a small layer's. */
static const int full_kinds[] = {0, 1, 1, 1, 2, 0, 1, 1, 2}, small_kinds[] = {1, 2};
static const int *kinds = full_kinds;
static int nkinds = 9;

static void param_shape(char *buf, size_t n, int k, int f, int tp) {
    int fl = f / tp;
    if (kinds[k] == 0) snprintf(buf, n, "f32[%d]", H);
    else if (kinds[k] == 1) snprintf(buf, n, "f32[%d,%d]", H, fl);
    else snprintf(buf, n, "f32[%d,%d]", fl, H);
}

static int layer_width(int n, int tp, int unique) { return tp * (unique ? F0 + n : F0); }

/* tp: the device count; dist: write the distributed program (else the
 * baseline, whose sharded dimensions are tp times wider). */
static int write_program(const char *path, int layers, int tp, int dist, int unique) {
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "gen-deep: %s: %s\n", path, strerror(errno));
        return 1;
    }
    char groups[1024] = "";
    for (int d = 0; d < tp && strlen(groups) + 8 < sizeof groups; d++)
        snprintf(groups + strlen(groups), sizeof groups - strlen(groups), "%s%d", d ? "," : "", d);
    int parts = dist ? tp : 1;
    fprintf(f, "HloModule jit_deep, num_partitions=%d\n\n", parts);
    fprintf(f, "%%add_f32 (a: f32[], b: f32[]) -> f32[] {\n  %%a = f32[] parameter(0)\n  %%b = f32[] parameter(1)\n  ROOT %%s = f32[] add(%%a, %%b)\n}\n\n");
    fprintf(f, "%%max_f32 (a: f32[], b: f32[]) -> f32[] {\n  %%a = f32[] parameter(0)\n  %%b = f32[] parameter(1)\n  ROOT %%m = f32[] maximum(%%a, %%b)\n}\n\n");
    fprintf(f, "ENTRY %%main (x: f32[%d,%d]) -> f32[%d,%d] {\n", B, H, B, H);
    fprintf(f, "  %%p.0 = f32[%d,%d]{1,0} parameter(0), sharding={replicated}, metadata={op_name=\"x\"}\n", B, H);
    char shp[64];
    for (int n = 0; n < layers; n++)
        for (int k = 0; k < nkinds; k++) {
            int fw = layer_width(n, tp, unique), shard = kinds[k] - 1, pn = 1 + nkinds * n + k;
            param_shape(shp, sizeof shp, k, fw, parts);
            fprintf(f, "  %%p.%d = %s{%s} parameter(%d)", pn, shp, kinds[k] == 0 ? "0" : "1,0", pn);
            if (dist && shard == 0) fprintf(f, ", sharding={devices=[1,%d]<=[%d]}", tp, tp);
            else if (dist && shard == 1) fprintf(f, ", sharding={devices=[%d,1]<=[%d]}", tp, tp);
            else fprintf(f, ", sharding={replicated}");
            fprintf(f, ", metadata={op_name=\"layers.%d.p%d\"}\n", n, k);
        }
    fprintf(f, "  %%zero = f32[] constant(0)\n  %%ninf = f32[] constant(-inf)\n");
    fprintf(f, "  %%eps = f32[%d]{0} constant({", B);
    for (int b = 0; b < B; b++) fprintf(f, "%s1e-06", b ? ", " : "");
    fprintf(f, "})\n  %%inv_h = f32[%d]{0} constant({", B);
    for (int b = 0; b < B; b++) fprintf(f, "%s0.015625", b ? ", " : "");
    fprintf(f, "})\n  %%v.0 = f32[%d,%d]{1,0} copy(%%p.0)\n", B, H);
    out o = {f, 1, groups};
    long x = 0;
    for (int n = 0; n < layers; n++)
        x = (kinds == small_kinds ? small_layer : layer)(&o, x, n, parts, layer_width(n, tp, unique), 1 + (long)nkinds * n);
    fprintf(f, "  ROOT %%out = f32[%d,%d]{1,0} copy(%%v.%ld)\n}\n", B, H, x);
    return fclose(f) != 0;
}

static int write_relations(const char *path, int layers, int tp) {
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "gen-deep: %s: %s\n", path, strerror(errno));
        return 1;
    }
    static const char *view[3] = {"dup", "shard(1,tp)", "shard(0,tp)"};
    fprintf(f, "{\n \"scalify_relations\": 1,\n \"mesh\": {\"tp\": %d},\n \"device_order\": \"iota\",\n \"inputs\": [\n", tp);
    fprintf(f, "  {\"param\": 0, \"name\": \"x\", \"view\": \"dup\"}");
    for (int n = 0; n < layers; n++)
        for (int k = 0; k < nkinds; k++)
            fprintf(f, ",\n  {\"param\": %d, \"name\": \"layers.%d.p%d\", \"view\": \"%s\"}", 1 + nkinds * n + k, n, k, view[kinds[k]]);
    fprintf(f, "\n ],\n \"outputs\": [{\"output\": 0, \"name\": \"out\", \"view\": \"dup\"}]\n}\n");
    return fclose(f) != 0;
}

int main(int argc, char **argv) {
    int unique = 0, a = 1;
    for (; a < argc && argv[a][0] == '-' && argv[a][1]; a++) {
        if (strcmp(argv[a], "-u") == 0) unique = 1;
        else if (strcmp(argv[a], "-s") == 0) kinds = small_kinds, nkinds = 2;
        else break;
    }
    if (argc - a != 3) {
        fprintf(stderr, "usage: gen-deep [-u] [-s] LAYERS TP OUT_PREFIX\n");
        return 2;
    }
    int layers = atoi(argv[a]), tp = atoi(argv[a + 1]);
    if (layers < 1 || tp < 2 || tp > 64) {
        fprintf(stderr, "gen-deep: LAYERS >= 1 and 2 <= TP <= 64\n");
        return 2;
    }
    const char *pre = argv[a + 2];
    size_t n = strlen(pre) + 32;
    char *p = malloc(n);
    if (!p) return 3;
    int rc = 0;
    snprintf(p, n, "%s.baseline.hlo", pre);
    rc |= write_program(p, layers, tp, 0, unique);
    snprintf(p, n, "%s.dist.hlo", pre);
    rc |= write_program(p, layers, tp, 1, unique);
    snprintf(p, n, "%s.relations.json", pre);
    rc |= write_relations(p, layers, tp);
    free(p);
    return rc;
}
