/* The reference interpreter: unit tests of single ops and collectives on small
 * hand-written modules, then the cross-check against XLA: every pair of
 * samples/manifest.json that stores seeded inputs and JAX's output ("io") runs
 *   - the baseline on 1 device with the stored inputs, compared with out.0;
 *   - the distributed program on its N devices, each input cut to the device's
 *     piece by the pair's relations file (shard_map pairs) — the device's
 *     expected output is the same view of out.0.
 * GSPMD pairs of a config whose inputs match its shard_map io file (same
 * parameters) are run too, cut by the baseline's sharding annotations.
 *
 * Tolerance by output dtype, |ours - jax| <= atol + rtol·|jax|:
 *   f32 1e-4 + 1e-4·|x|; bf16 2^-4 + 2^-6·|x| (a few bf16 ulps); f16 1e-2 + 2^-9·|x|.
 * Bug variants must differ from the baseline's output by what JAX measured
 * (manifest numerics.max_abs_diff, within the same tolerance), or have a
 * different output shape when the manifest says so.
 */
#include <dirent.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "hlo.h"
#include "interp.h"
#include "linalg.h"
#include "stf.h"

/* ---------------------------------------------------------------- helpers */

static hlo_module *parse(const char *text) {
    diag d;
    diag_init(&d, "test");
    hlo_module *m = hlo_parse_text(text, strlen(text), "test", &d);
    if (!m) printf("parse error: %s\n", d.out.s);
    diag_free(&d);
    return m;
}

/* Runs text on R×P devices; parameter k of device d is filled by fill(d, k, v)
 * (NULL: no parameters). Returns the status; out[d] set on success. */
typedef void (*fill_fn)(int64_t d, uint32_t k, interp_val *v);

static int run(const char *text, int64_t R, int64_t P, fill_fn fill, interp_val **out, strbuf *err) {
    hlo_module *m = parse(text);
    if (!m) return -1;
    const hlo_comp *e = graph_entry(m);
    int64_t D = R * P;
    interp_val ***args = calloc((size_t)D, sizeof *args);
    for (int64_t d = 0; d < D; d++) {
        args[d] = calloc(e->nparams + 1, sizeof **args);
        for (uint32_t k = 0; k < e->nparams; k++) {
            const shape *s = &e->instrs[e->params[k]].shape;
            args[d][k] = interp_val_new(s->dtype, s->rank, s->dims);
            if (fill) fill(d, k, args[d][k]);
        }
    }
    interp_config cfg = {.replicas = R, .partitions = P};
    int st = interp_run(m, &cfg, (interp_val **const *)args, out, err);
    for (int64_t d = 0; d < D; d++) {
        for (uint32_t k = 0; k < e->nparams; k++) interp_val_free(args[d][k]);
        free(args[d]);
    }
    free(args);
    graph_free(m);
    return st;
}

/* Runs text on R×P devices and expects an interpreter error saying needle. */
static void expect_run_error(const char *text, int64_t R, int64_t P, fill_fn fill, const char *needle) {
    interp_val *out[8] = {0};
    strbuf err;
    sb_init(&err);
    CHECK_EQ(run(text, R, P, fill, out, &err), INTERP_ERUN);
    CHECK_CONTAINS(err.s, needle);
    sb_free(&err);
    for (int d = 0; d < 8; d++) interp_val_free(out[d]);
}

/* Runs and checks device d's array result against want[n]. */
static void expect(const char *name, const char *text, int64_t R, int64_t P, fill_fn fill, int64_t dev,
                   const double *want, int64_t n) {
    t_case("%s", name);
    interp_val *out[64] = {0};
    strbuf err;
    sb_init(&err);
    int st = run(text, R, P, fill, out, &err);
    if (CHECK_MSG(st == 0, "status %d: %s", st, err.s ? err.s : "")) {
        interp_val *v = out[dev];
        if (v->dtype == DT_TUPLE) v = v->elems[0];
        if (CHECK_MSG(v->n == n, "%lld elements, %lld expected", (long long)v->n, (long long)n))
            for (int64_t k = 0; k < n; k++)
                CHECK_MSG(interp_val_get(v, k) == want[k], "element %lld: %.9g != %.9g", (long long)k,
                          interp_val_get(v, k), want[k]);
    }
    for (int64_t d = 0; d < R * P; d++) interp_val_free(out[d]);
    sb_free(&err);
}

static void fill_iota(int64_t d, uint32_t k, interp_val *v) {
    for (int64_t e = 0; e < v->n; e++) interp_val_set(v, e, (double)(100 * d + 10 * k + e));
}

static void fill_dev(int64_t d, uint32_t k, interp_val *v) {
    for (int64_t e = 0; e < v->n; e++) interp_val_set(v, e, (double)(10 * d + e));
}

/* ---------------------------------------------------------------- op tests */

static void test_dot(void) {
    /* lhs[b,i,k] = 100·0 + 10·0 + e, rhs likewise with 10 added: batch dim 0. */
    const char *t = "HloModule m\nENTRY e {\n"
                    "  a = f32[2,2,3] parameter(0)\n  b = f32[2,3,2] parameter(1)\n"
                    "  ROOT d = f32[2,2,2] dot(a, b), lhs_batch_dims={0}, lhs_contracting_dims={2}, "
                    "rhs_batch_dims={0}, rhs_contracting_dims={1}\n}\n";
    double want[8];
    for (int b = 0; b < 2; b++)
        for (int i = 0; i < 2; i++)
            for (int j = 0; j < 2; j++) {
                double s = 0;
                for (int k = 0; k < 3; k++) s += (double)(b * 6 + i * 3 + k) * (double)(10 + b * 6 + k * 2 + j);
                want[(b * 2 + i) * 2 + j] = s;
            }
    expect("interp dot-1.1 batch dims", t, 1, 1, fill_iota, 0, want, 8);
    /* Contracting the leading dims of both sides: [3,2]·[3,4] -> [2,4]. */
    const char *t2 = "HloModule m\nENTRY e {\n"
                     "  a = f32[3,2] parameter(0)\n  b = f32[3,4] parameter(1)\n"
                     "  ROOT d = f32[2,4] dot(a, b), lhs_contracting_dims={0}, rhs_contracting_dims={0}\n}\n";
    double w2[8];
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 4; j++) {
            double s = 0;
            for (int k = 0; k < 3; k++) s += (double)(k * 2 + i) * (double)(10 + k * 4 + j);
            w2[i * 4 + j] = s;
        }
    expect("interp dot-1.2 leading contracting dims", t2, 1, 1, fill_iota, 0, w2, 8);
    /* A contraction of extent 0 (jnp.dot of two empty vectors, a hand-written
     * Cholesky's first step): zeros of the free dims. */
    const char *t3 = "HloModule m\nENTRY e {\n"
                     "  a = f32[0] constant({})\n  b = f32[2,0] constant({ {}, {} })\n"
                     "  ROOT d = f32[2] dot(b, a), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n}\n";
    double w3[2] = {0, 0};
    expect("interp dot-1.3 empty contraction", t3, 1, 1, fill_iota, 0, w3, 2);
}

static void test_gather_scatter(void) {
    const char *t = "HloModule m\nENTRY e {\n"
                    "  a = f32[4,3] parameter(0)\n"
                    "  i = s32[3,1] constant({{2},{0},{7}})\n"
                    "  ROOT g = f32[3,3] gather(a, i), offset_dims={1}, collapsed_slice_dims={0}, "
                    "start_index_map={0}, index_vector_dim=1, slice_sizes={1,3}\n}\n";
    /* Row 7 clamps to the last row, 3. */
    double want[9] = {6, 7, 8, 0, 1, 2, 9, 10, 11};
    expect("interp gather-1.1 embedding rows, clamped", t, 1, 1, fill_iota, 0, want, 9);
    const char *t3 = "HloModule m\nadd { x = f32[] parameter(0)\n y = f32[] parameter(1)\n ROOT s = f32[] add(x, y) }\n"
                     "ENTRY e {\n"
                     "  z = f32[4] constant({0, 0, 0, 0})\n"
                     "  i = s32[4,1] constant({{1},{1},{3},{9}})\n"
                     "  u = f32[4] constant({1, 2, 3, 4})\n"
                     "  ROOT s = f32[4] scatter(z, i, u), update_window_dims={}, inserted_window_dims={0}, "
                     "scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=add\n}\n";
    /* Index 9 is out of bounds: skipped. */
    double w3[4] = {0, 3, 0, 3};
    expect("interp scatter-1.1 add, out-of-bounds skipped", t3, 1, 1, NULL, 0, w3, 4);
}

static void test_structural(void) {
    const char *t = "HloModule m\nENTRY e {\n"
                    "  a = f32[3] parameter(0)\n  z = f32[] constant(-1)\n"
                    "  ROOT p = f32[6] pad(a, z), padding=-1_2_1\n}\n";
    /* a = 0,1,2 interior 1: 0,-1,1,-1,2 ; low -1 drops the first: -1,1,-1,2 ; high 2 */
    double want[6] = {-1, 1, -1, 2, -1, -1};
    expect("interp pad-1.1 negative low, interior", t, 1, 1, fill_iota, 0, want, 6);
    const char *t2 = "HloModule m\nENTRY e {\n"
                     "  a = f32[8] parameter(0)\n  p = u32[] partition-id()\n  c = u32[] constant(2)\n"
                     "  o = u32[] multiply(p, c)\n"
                     "  ROOT s = f32[2] dynamic-slice(a, o), dynamic_slice_sizes={2}\n}\n";
    double w2[2] = {300 + 6, 300 + 7};
    expect("interp dynamic-slice-1.1 offset from partition-id", t2, 1, 4, fill_iota, 3, w2, 2);
    /* Starts past the end clamp so that the window fits (4 -> 3 in f32[5]). */
    const char *t2b = "HloModule m\nENTRY e {\n"
                      "  a = f32[5] parameter(0)\n  i = s32[] constant(4)\n"
                      "  ROOT s = f32[2] dynamic-slice(a, i), dynamic_slice_sizes={2}\n}\n";
    double w2b[2] = {3, 4};
    expect("interp dynamic-slice-1.2 start clamped", t2b, 1, 1, fill_iota, 0, w2b, 2);
    const char *t2c = "HloModule m\nENTRY e {\n"
                      "  a = f32[5] parameter(0)\n  u = f32[2] constant({9, 8})\n  i = s32[] constant(4)\n"
                      "  ROOT s = f32[5] dynamic-update-slice(a, u, i)\n}\n";
    double w2c[5] = {0, 1, 2, 9, 8};
    expect("interp dynamic-update-slice-1.1 start clamped", t2c, 1, 1, fill_iota, 0, w2c, 5);
    const char *t3 = "HloModule m\nlt { a = f32[] parameter(0)\n b = f32[] parameter(1)\n"
                     " ROOT c = pred[] compare(a, b), direction=LT }\n"
                     "ENTRY e {\n  a = f32[5] constant({3, 1, 4, 1, 5})\n"
                     "  ROOT s = f32[5] sort(a), dimensions={0}, to_apply=lt\n}\n";
    double w3[5] = {1, 1, 3, 4, 5};
    expect("interp sort-1.1 ascending", t3, 1, 1, NULL, 0, w3, 5);
    const char *t4 = "HloModule m\nENTRY e {\n"
                     "  a = f32[2,3] parameter(0)\n"
                     "  t = f32[3,2] transpose(a), dimensions={1,0}\n"
                     "  b = f32[3,2,2] broadcast(t), dimensions={0,1}\n"
                     "  ROOT r = f32[12] reshape(b)\n}\n";
    double w4[12] = {0, 0, 3, 3, 1, 1, 4, 4, 2, 2, 5, 5};
    expect("interp transpose-broadcast-reshape-1.1", t4, 1, 1, fill_iota, 0, w4, 12);
    const char *t5 = "HloModule m\nENTRY e {\n"
                     "  a = s32[4] constant({-8, 7, 1, -1})\n  s = s32[4] constant({1, 2, 31, 40})\n"
                     "  l = s32[4] shift-right-logical(a, s)\n  r = s32[4] shift-right-arithmetic(a, s)\n"
                     "  x = s32[4] shift-left(a, s)\n  y = s32[4] xor(l, r)\n"
                     "  ROOT o = s32[12] concatenate(l, r, x), dimensions={0}\n}\n";
    double w5[12] = {2147483644, 1, 0, 0, -4, 1, 0, -1, -16, 28, -2147483648.0, 0};
    expect("interp shifts-1.1 logical, arithmetic, left, oversized", t5, 1, 1, NULL, 0, w5, 12);
    /* The activation custom calls of the rules' unary class, f64 so the
     * expected values are exact in double. */
    const char *t6 = "HloModule m\nENTRY e {\n  a = f64[3] constant({0, 1, -2})\n"
                     "  s = f64[3] custom-call(a), custom_call_target=\"silu\"\n"
                     "  g = f64[3] custom-call(a), custom_call_target=\"gelu_tanh\"\n"
                     "  ROOT o = f64[6] concatenate(s, g), dimensions={0}\n}\n";
    double w6[6] = {0, 1 / (1 + exp(-1.0)), -2 / (1 + exp(2.0)), 0,
                    0.5 * (1 + tanh(0.7978845608028654 * 1.044715)),
                    -(1 + tanh(0.7978845608028654 * (-2 - 0.044715 * 8)))};
    expect("interp custom-call-1.1 silu and gelu_tanh", t6, 1, 1, NULL, 0, w6, 6);
}

static void test_reduce(void) {
    /* Non-associative to_apply: a·2 + b, folded left in order. */
    const char *t = "HloModule m\nf { a = f32[] parameter(0)\n b = f32[] parameter(1)\n two = f32[] constant(2)\n"
                    " m = f32[] multiply(a, two)\n ROOT s = f32[] add(m, b) }\n"
                    "ENTRY e {\n  x = f32[2,3] parameter(0)\n  z = f32[] constant(0)\n"
                    "  ROOT r = f32[2] reduce(x, z), dimensions={1}, to_apply=f\n}\n";
    double want[2] = {((0 * 2 + 0) * 2 + 1) * 2 + 2, ((0 * 2 + 3) * 2 + 4) * 2 + 5};
    expect("interp reduce-1.1 non-trivial to_apply, order", t, 1, 1, fill_iota, 0, want, 2);
    /* Variadic argmax: ties go to the lower index. */
    const char *t2 = "HloModule m\n"
                     "amax { av = f32[] parameter(0)\n ai = s32[] parameter(1)\n bv = f32[] parameter(2)\n bi = s32[] parameter(3)\n"
                     " gt = pred[] compare(av, bv), direction=GT\n eq = pred[] compare(av, bv), direction=EQ\n"
                     " lt = pred[] compare(ai, bi), direction=LT\n tie = pred[] and(eq, lt)\n keep = pred[] or(gt, tie)\n"
                     " v = f32[] select(keep, av, bv)\n i = s32[] select(keep, ai, bi)\n ROOT t = (f32[], s32[]) tuple(v, i) }\n"
                     "ENTRY e {\n  x = f32[5] constant({3, 9, 2, 9, 1})\n  i = s32[5] iota(), iota_dimension=0\n"
                     "  m = f32[] constant(-inf)\n  z = s32[] constant(0)\n"
                     "  r = (f32[], s32[]) reduce(x, i, m, z), dimensions={0}, to_apply=amax\n"
                     "  ROOT g = s32[] get-tuple-element(r), index=1\n}\n";
    double w2[1] = {1};
    expect("interp reduce-1.2 variadic argmax", t2, 1, 1, NULL, 0, w2, 1);
    /* Padding of ±2^62 around a 2x4 operand: the one window lies in the
     * padding; its positions times the row stride would overflow (UBSan). */
    const char *t3 = "HloModule m\nadd { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT s = f32[] add(a, b) }\n"
                     "ENTRY e {\n  x = f32[2,4] parameter(0)\n  z = f32[] constant(7)\n"
                     "  ROOT r = f32[1,1] reduce-window(x, z), window={size=2x4 pad=-4611686018427387904_4611686018427387904x0_0}, "
                     "to_apply=add\n}\n";
    double w3[1] = {7};
    expect("interp reduce-1.3 a window wholly in huge padding is the init", t3, 1, 1, fill_iota, 0, w3, 1);
}

/* convolution by hand-computed cases: XLA's convolution is a
 * cross-correlation (the kernel is not flipped), padding and dilations per
 * the window, feature and batch groups per the counts. */
static void test_convolution(void) {
    static const struct {
        const char *name, *lhs, *rhs, *out, *attrs;
        double want[8];
        int64_t n;
    } cases[] = {
        {"interp conv-1.1 padded 1-D", "f32[1,4,1] constant({{{1},{2},{3},{4}}})", "f32[3,1,1] constant({{{1}},{{0}},{{-1}}})",
         "f32[1,4,1]", "window={size=3 pad=1_1}, dim_labels=b0f_0io->b0f", {-2, -2, -2, 3}, 4},
        {"interp conv-1.2 stride 2", "f32[1,4,1] constant({{{1},{2},{3},{4}}})", "f32[3,1,1] constant({{{1}},{{0}},{{-1}}})",
         "f32[1,2,1]", "window={size=3 stride=2 pad=1_1}, dim_labels=b0f_0io->b0f", {-2, -2}, 2},
        {"interp conv-1.3 feature groups (depthwise)", "f32[1,2,2] constant({{{1,10},{2,20}}})", "f32[1,1,2] constant({{{3,5}}})",
         "f32[1,2,2]", "window={size=1}, dim_labels=b0f_0io->b0f, feature_group_count=2", {3, 50, 6, 100}, 4},
        {"interp conv-1.4 batch groups (a weight gradient)", "f32[2,1,1] constant({{{2}},{{7}}})", "f32[1,1,2] constant({{{1,1}}})",
         "f32[1,1,2]", "window={size=1}, dim_labels=b0f_0io->b0f, batch_group_count=2", {2, 7}, 2},
        {"interp conv-1.5 lhs dilation", "f32[1,2,1] constant({{{1},{2}}})", "f32[1,1,1] constant({{{1}}})", "f32[1,3,1]",
         "window={size=1 lhs_dilate=2}, dim_labels=b0f_0io->b0f", {1, 0, 2}, 3},
        {"interp conv-1.6 rhs dilation", "f32[1,4,1] constant({{{1},{2},{3},{4}}})", "f32[2,1,1] constant({{{1}},{{1}}})",
         "f32[1,2,1]", "window={size=2 rhs_dilate=2}, dim_labels=b0f_0io->b0f", {4, 6}, 2},
        {"interp conv-1.7 feature-major labels, two input features", "f32[1,2,3] constant({{{1,2,3},{10,20,30}}})",
         "f32[1,2,1] constant({{{1},{2}}})", "f32[1,1,3]", "window={size=1}, dim_labels=bf0_0io->bf0", {21, 42, 63}, 3},
    };
    for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
        char text[1024];
        snprintf(text, sizeof text,
                 "HloModule m\nENTRY e {\n  a = %s\n  k = %s\n  ROOT c = %s convolution(a, k), %s\n}\n", cases[i].lhs,
                 cases[i].rhs, cases[i].out, cases[i].attrs);
        expect(cases[i].name, text, 1, 1, NULL, 0, cases[i].want, cases[i].n);
    }
}

/* select-and-scatter as a max-pool's gradient: GE keeps the first of equal
 * maxima; overlapping windows add into the same element. */
static void test_select_and_scatter(void) {
    static const struct {
        const char *name, *operand, *source, *window;
        double want[4];
        int64_t n;
    } cases[] = {
        {"interp select-and-scatter-1.1 max-pool gradient", "{1, 3, 2, 5}", "f32[2] constant({10, 20})", "size=2 stride=2",
         {0, 10, 0, 20}, 4},
        {"interp select-and-scatter-1.2 overlapping windows add", "{1, 3, 2, 0}", "f32[3] constant({1, 1, 1})", "size=2",
         {0, 2, 1, 0}, 4},
        {"interp select-and-scatter-1.3 ties keep the first", "{2, 2, 2, 2}", "f32[2] constant({4, 6})", "size=2 stride=2",
         {4, 0, 6, 0}, 4},
        {"interp select-and-scatter-1.4 padding is never selected", "{-1, -2, -3, -4}", "f32[3] constant({4, 6, 8})",
         "size=2 stride=2 pad=1_1", {4, 6, 0, 8}, 4},
    };
    for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
        char text[1024];
        snprintf(text, sizeof text,
                 "HloModule m\nge { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT c = pred[] compare(a, b), direction=GE }\n"
                 "add { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT s = f32[] add(a, b) }\n"
                 "ENTRY e {\n  x = f32[4] constant(%s)\n  g = %s\n  z = f32[] constant(0)\n"
                 "  ROOT r = f32[4] select-and-scatter(x, g, z), window={%s}, select=ge, scatter=add\n}\n",
                 cases[i].operand, cases[i].source, cases[i].window);
        expect(cases[i].name, text, 1, 1, NULL, 0, cases[i].want, cases[i].n);
    }
}

static void test_bf16(void) {
    const char *t = "HloModule m\nENTRY e {\n"
                    "  a = bf16[3] constant({1, 1, 3})\n  b = bf16[3] constant({0.00390625, 0.01171875, 0.0078125})\n"
                    "  ROOT s = bf16[3] add(a, b)\n}\n";
    /* 1 + 2^-8 is a tie -> 1 (even); 1 + 3·2^-8 -> 1 + 2^-6; 3 + 2^-7 -> 3 (ulp 2^-6). */
    double want[3] = {1, 1.015625, 3};
    expect("interp bf16-1.1 add rounds to nearest even", t, 1, 1, NULL, 0, want, 3);
    const char *t2 = "HloModule m\nadd { x = bf16[] parameter(0)\n y = bf16[] parameter(1)\n ROOT s = bf16[] add(x, y) }\n"
                     "ENTRY e {\n  a = bf16[5] constant({256, 1, 1, 1, 1})\n  z = bf16[] constant(0)\n"
                     "  ROOT r = bf16[] reduce(a, z), dimensions={0}, to_apply=add\n}\n";
    /* Every partial sum is rounded: 256 + 1 = 257 ties to 256, forever. */
    double w2[1] = {256};
    expect("interp bf16-1.2 reduce rounds every step", t2, 1, 1, NULL, 0, w2, 1);
    const char *t3 = "HloModule m\nENTRY e {\n  a = f32[2] constant({1.00390625, 70000})\n"
                     "  b = bf16[2] convert(a)\n  h = f16[2] convert(a)\n  c = f32[2] convert(b)\n  d = f32[2] convert(h)\n"
                     "  ROOT o = f32[4] concatenate(c, d), dimensions={0}\n}\n";
    double w3[4] = {1, 70144, 1.00390625, INFINITY};
    expect("interp bf16-1.3 convert f32 -> bf16/f16", t3, 1, 1, NULL, 0, w3, 4);
    /* reduce-precision: e8m7 rounds f32's mantissa as bf16 (ties to even,
     * its exponent range kept); e5m2 rounds to 2 bits and then overflows
     * past 57344 to inf and flushes below 2^-14 to zero; e8m23 is f32. */
    const char *t4 = "HloModule m\nENTRY e {\n  x = f32[4] constant({1.00390625, 1.01171875, 70000, 3e-39})\n"
                     "  a = f32[4] reduce-precision(x), exponent_bits=8, mantissa_bits=7\n"
                     "  b = f32[4] reduce-precision(x), exponent_bits=5, mantissa_bits=2\n"
                     "  c = f32[4] reduce-precision(x), exponent_bits=8, mantissa_bits=23\n"
                     "  ROOT o = f32[12] concatenate(a, b, c), dimensions={0}\n}\n";
    double tiny = dtype_round(DT_F32, 3e-39);
    double w4[12] = {1, 1.015625, 70144, dtype_round(DT_BF16, tiny), 1, 1, INFINITY, 0, 1.00390625, 1.01171875, 70000, tiny};
    expect("interp bf16-1.4 reduce-precision e8m7, e5m2, e8m23", t4, 1, 1, NULL, 0, w4, 12);
    /* bitcast-convert across widths: a u32 is its bytes least significant
     * first (numpy's view), and back; f32 1.0 is 0x3f800000 as two u16 */
    const char *t5 = "HloModule m\nENTRY e {\n  w = u32[2] constant({258, 4294967295})\n"
                     "  b = u8[2,4] bitcast-convert(w)\n  bb = u8[8] reshape(b)\n  f = f32[1] constant({1})\n"
                     "  h = u16[1,2] bitcast-convert(f)\n  hh = u16[2] reshape(h)\n  back = u32[2] bitcast-convert(b)\n"
                     "  hb = u32[2] convert(hh)\n  ROOT o = u32[4] concatenate(back, hb), dimensions={0}\n}\n";
    double w5[4] = {258, 4294967295.0, 0, 0x3f80};
    expect("interp bitcast-1.1 across widths, little end first", t5, 1, 1, NULL, 0, w5, 4);
}

static void test_control(void) {
    const char *t = "HloModule m\n"
                    "cond { p = (s32[], s32[]) parameter(0)\n i = s32[] get-tuple-element(p), index=0\n"
                    " n = s32[] constant(10)\n ROOT c = pred[] compare(i, n), direction=LT }\n"
                    "body { p = (s32[], s32[]) parameter(0)\n i = s32[] get-tuple-element(p), index=0\n"
                    " s = s32[] get-tuple-element(p), index=1\n one = s32[] constant(1)\n j = s32[] add(i, one)\n"
                    " t = s32[] add(s, i)\n ROOT r = (s32[], s32[]) tuple(j, t) }\n"
                    "ENTRY e {\n  z = s32[] constant(0)\n  t = (s32[], s32[]) tuple(z, z)\n"
                    "  w = (s32[], s32[]) while(t), condition=cond, body=body\n"
                    "  ROOT s = s32[] get-tuple-element(w), index=1\n}\n";
    double want[1] = {45};
    expect("interp while-1.1 sum 0..9", t, 1, 1, NULL, 0, want, 1);
    /* Branch on partition-id: device 0 negates, the others double. */
    const char *t2 = "HloModule m\n"
                     "neg { p = f32[2] parameter(0)\n ROOT n = f32[2] negate(p) }\n"
                     "dbl { p = f32[2] parameter(0)\n ROOT n = f32[2] add(p, p) }\n"
                     "ENTRY e {\n  a = f32[2] parameter(0)\n  pid = u32[] partition-id()\n  z = u32[] constant(0)\n"
                     "  c = pred[] compare(pid, z), direction=EQ\n"
                     "  ROOT r = f32[2] conditional(c, a, a), true_computation=neg, false_computation=dbl\n}\n";
    double w0[2] = {0, -1}, w1[2] = {200, 202};
    expect("interp conditional-1.1 device 0", t2, 1, 2, fill_iota, 0, w0, 2);
    expect("interp conditional-1.2 device 1", t2, 1, 2, fill_iota, 1, w1, 2);
    const char *t3 = "HloModule m\nsq { p = f32[2] parameter(0)\n ROOT n = f32[2] multiply(p, p) }\n"
                     "ENTRY e {\n  a = f32[2] parameter(0)\n  ROOT r = f32[2] call(a), to_apply=sq\n}\n";
    double w3[2] = {0, 1};
    expect("interp call-1.1", t3, 1, 1, fill_iota, 0, w3, 2);
}

/* One all-reduce header, four devices: operand = device id. */
#define AR_HEAD "HloModule m\nadd { x = f32[] parameter(0)\n y = f32[] parameter(1)\n ROOT s = f32[] add(x, y) }\n"

static void test_collectives(void) {
    const char *ar = AR_HEAD "ENTRY e {\n  a = f32[1] parameter(0)\n"
                             "  ROOT r = f32[1] all-reduce(a), channel_id=1, replica_groups=%s, use_global_device_ids=true, to_apply=add\n}\n";
    char t[1024];
    double w;
    snprintf(t, sizeof t, ar, "{{0,1},{2,3}}");
    w = 0 + 10 + 0;
    expect("interp all-reduce-1.1 list groups, device 1", t, 1, 4, fill_dev, 1, &w, 1);
    w = 20 + 30;
    expect("interp all-reduce-1.2 list groups, device 3", t, 1, 4, fill_dev, 3, &w, 1);
    snprintf(t, sizeof t, ar, "[2,2]<=[2,2]T(1,0)");
    w = 10 + 30;
    expect("interp all-reduce-1.3 iota groups {0,2},{1,3}", t, 1, 4, fill_dev, 1, &w, 1);
    snprintf(t, sizeof t, ar, "mesh['a'=2,'b'=2] {'a'}");
    w = 0 + 20;
    expect("interp all-reduce-1.4 mesh groups over 'a'", t, 1, 4, fill_dev, 2, &w, 1);
    snprintf(t, sizeof t, ar, "mesh['a'=2,'b'=2] {'b'}");
    w = 20 + 30;
    expect("interp all-reduce-1.5 mesh groups over 'b'", t, 1, 4, fill_dev, 2, &w, 1);
    /* Modes on 2 replicas × 2 partitions: device d = r·2 + p holds 10·d. */
    const char *cr = AR_HEAD "ENTRY e {\n  a = f32[1] parameter(0)\n"
                             "  ROOT r = f32[1] all-reduce(a), replica_groups={{0,1}}, to_apply=add\n}\n";
    w = 10 + 30;  /* cross-replica: devices 1 and 3 (partition 1) */
    expect("interp all-reduce-2.1 cross-replica", cr, 2, 2, fill_dev, 1, &w, 1);
    const char *crp = AR_HEAD "ENTRY e {\n  a = f32[1] parameter(0)\n"
                              "  ROOT r = f32[1] all-reduce(a), channel_id=3, replica_groups={{0},{1}}, to_apply=add\n}\n";
    w = 20 + 30;  /* cross-replica-and-partition: replica 1, all partitions */
    expect("interp all-reduce-2.2 cross-replica-and-partition", crp, 2, 2, fill_dev, 3, &w, 1);
    const char *a2a = "HloModule m\nENTRY e {\n  a = f32[2] parameter(0)\n"
                      "  ROOT r = f32[2] all-to-all(a), channel_id=1, replica_groups={{0,1}}, dimensions={0}\n}\n";
    double w2[2] = {21, 31};  /* cross-partition: replica 1's devices 2, 3; device 3 gets chunk 1 of each */
    expect("interp all-to-all-2.3 cross-partition", a2a, 2, 2, fill_dev, 3, w2, 2);
    /* all-gather, reduce-scatter, all-to-all, collective-permute on 4 partitions. */
    const char *ag = "HloModule m\nENTRY e {\n  a = f32[1,2] parameter(0)\n"
                     "  ROOT r = f32[2,2] all-gather(a), channel_id=1, replica_groups={{3,1},{0,2}}, dimensions={0}, use_global_device_ids=true\n}\n";
    double w3[4] = {30, 31, 10, 11};
    expect("interp all-gather-1.1 group order", ag, 1, 4, fill_dev, 1, w3, 4);
    const char *rs = AR_HEAD "ENTRY e {\n  a = f32[4] parameter(0)\n"
                             "  ROOT r = f32[1] reduce-scatter(a), channel_id=1, replica_groups=[1,4]<=[4], dimensions={0}, use_global_device_ids=true, to_apply=add\n}\n";
    w = 60 + 4 * 2;
    expect("interp reduce-scatter-1.1", rs, 1, 4, fill_dev, 2, &w, 1);
    const char *aa = "HloModule m\nENTRY e {\n  a = f32[4] parameter(0)\n"
                     "  ROOT r = f32[4] all-to-all(a), channel_id=1, replica_groups={{0,1,2,3}}, dimensions={0}\n}\n";
    double w4[4] = {2, 12, 22, 32};
    expect("interp all-to-all-1.1 split dimension", aa, 1, 4, fill_dev, 2, w4, 4);
    const char *at = "HloModule m\nENTRY e {\n  a = f32[1] parameter(0)\n  b = f32[1] parameter(1)\n"
                     "  ROOT r = (f32[1], f32[1]) all-to-all(a, b), replica_groups={{0,1}}\n}\n";
    t_case("interp all-to-all-1.2 tuple form");
    {
        interp_val *out[2] = {0};
        int st = run(at, 2, 1, fill_iota, out, NULL);
        /* device 1 receives device 0's operand 1 (10) and its own operand 1 (110). */
        if (CHECK(st == 0) && CHECK(out[1]->dtype == DT_TUPLE)) {
            CHECK(interp_val_get(out[1]->elems[0], 0) == 10);
            CHECK(interp_val_get(out[1]->elems[1], 0) == 110);
        }
        interp_val_free(out[0]);
        interp_val_free(out[1]);
    }
    const char *cp = "HloModule m\nENTRY e {\n  a = f32[2] parameter(0)\n"
                     "  ROOT r = f32[2] collective-permute(a), channel_id=1, source_target_pairs={{0,1},{1,2},{2,3}}\n}\n";
    double w5[2] = {10, 11}, w6[2] = {0, 0};
    expect("interp collective-permute-1.1 target", cp, 1, 4, fill_dev, 2, w5, 2);
    expect("interp collective-permute-1.2 no source: zeros", cp, 1, 4, fill_dev, 0, w6, 2);
    /* Refusals. */
    t_case("interp refuse-1.1 budget");
    {
        const char *big = "HloModule m\nENTRY e {\n  z = f32[] constant(0)\n"
                          "  ROOT b = f32[100000,20000] broadcast(z), dimensions={}\n}\n";
        interp_val *out[1] = {0};
        strbuf err;
        sb_init(&err);
        CHECK_EQ(run(big, 1, 1, NULL, out, &err), INTERP_EBUDGET);
        CHECK_CONTAINS(err.s, "budget");
        sb_free(&err);
    }
    t_case("interp refuse-1.2 collective in divergent control flow");
    {
        const char *div = AR_HEAD "br { p = f32[1] parameter(0)\n"
                                  " ROOT r = f32[1] all-reduce(p), channel_id=1, replica_groups={{0,1}}, use_global_device_ids=true, to_apply=add }\n"
                                  "id { p = f32[1] parameter(0)\n ROOT c = f32[1] copy(p) }\n"
                                  "ENTRY e {\n  a = f32[1] parameter(0)\n  pid = u32[] partition-id()\n  z = u32[] constant(0)\n"
                                  "  c = pred[] compare(pid, z), direction=EQ\n"
                                  "  ROOT r = f32[1] conditional(c, a, a), true_computation=br, false_computation=id\n}\n";
        expect_run_error(div, 1, 2, fill_dev, "control path");
    }
}

/* interp_eval_instr: one instruction over given operand values (constant
 * folding in lift), and its refusals. */
/* ---------------------------------------------------------------- topk and total-order sorts */

/* v against want[n]: equal values with the same sign (so -0 is not +0), NaN
 * matching a NaN of the same sign. */
static void check_elems(const char *what, const interp_val *v, const double *want, int64_t n) {
    if (!CHECK_MSG(v && v->n == n, "%s: %lld elements, %lld expected", what, v ? (long long)v->n : -1LL, (long long)n)) return;
    for (int64_t k = 0; k < n; k++) {
        double g = interp_val_get(v, k), w = want[k];
        bool same = ((g != g && w != w) || g == w) && signbit(g) == signbit(w);
        CHECK_MSG(same, "%s element %lld: %.9g != %.9g", what, (long long)k, g, w);
    }
}

/* Runs text (no parameters) on one device, from its text form and from its
 * protobuf form, and checks elements 0 and 1 of the tuple result against
 * v0[n0] and v1[n1] (check_elems). */
static void expect_pair(const char *name, const char *text, const double *v0, int64_t n0, const double *v1, int64_t n1) {
    hlo_module *m = parse(text);
    strbuf pb;
    sb_init(&pb);
    if (m) hlo_write_pb(m, &pb);
    for (int form = 0; form < 2 && m; form++) {
        t_case("%s (%s)", name, form ? "protobuf" : "text");
        hlo_module *mm = m;
        if (form) {
            diag d;
            diag_init(&d, "test.pb");
            mm = hlo_parse_pb((const uint8_t *)pb.s, pb.len, "test.pb", &d);
            diag_free(&d);
            if (!CHECK(mm != NULL)) break;
        }
        interp_val *out[1] = {0};
        strbuf err;
        sb_init(&err);
        interp_config cfg = {.replicas = 1, .partitions = 1};
        int st = interp_run(mm, &cfg, (interp_val **const *)(interp_val **[]){NULL}, out, &err);
        if (CHECK_MSG(st == 0, "status %d: %s", st, err.s ? err.s : "") &&
            CHECK_MSG(out[0]->dtype == DT_TUPLE && out[0]->nelems >= 2, "result is not a pair")) {
            check_elems("values", out[0]->elems[0], v0, n0);
            check_elems("indices", out[0]->elems[1], v1, n1);
        }
        interp_val_free(out[0]);
        sb_free(&err);
        if (form) graph_free(mm);
    }
    sb_free(&pb);
    graph_free(m);
}

/* XLA's topk: a stable sort of the last dimension by the total order, the k
 * first kept; equal values keep the lower index first, +NaN above +inf, +0
 * above -0 (largest=true), the mirror image for largest=false. */
static void test_topk(void) {
    static const struct {
        const char *name, *type, *input, *attrs;
        double vals[10];
        double idx[10];
        int n;
    } cases[] = {
        {"ties keep the lower index", "f32[5]", "{3, 1, 3, 2, 3}", "k=3, largest=true", {3, 3, 3}, {0, 2, 4}, 3},
        {"largest=false", "f32[5]", "{3, 1, 3, 1, 2}", "k=2, largest=false", {1, 1}, {1, 3}, 2},
        {"largest by default (text form)", "f32[4]", "{1, 4, 2, 4}", "k=2", {4, 4}, {1, 3}, 2},
        {"k = n orders -0 below +0", "f32[5]", "{0.5, -1, 2, -0, 0}", "k=5, largest=true", {2, 0.5, 0, -0.0, -1}, {2, 0, 4, 3, 1}, 5},
        {"k = n smallest first", "f32[5]", "{0.5, -1, 2, -0, 0}", "k=5, largest=false", {-1, -0.0, 0, 0.5, 2}, {1, 3, 4, 0, 2}, 5},
        {"NaN ranks above inf", "f32[5]", "{1, nan, inf, -inf, nan}", "k=3, largest=true", {NAN, NAN, INFINITY}, {1, 4, 2}, 3},
        {"NaN ranks last for smallest", "f32[5]", "{1, nan, inf, -inf, nan}", "k=4, largest=false",
         {-INFINITY, 1, INFINITY, NAN}, {3, 0, 2, 1}, 4},
        {"per row of a batch", "f32[2,3]", "{{1, 2, 3}, {6, 5, 4}}", "k=2, largest=true", {3, 2, 6, 5}, {2, 1, 0, 1}, 4},
        {"integers", "s32[6]", "{-5, 7, 7, 0, -5, 9}", "k=4, largest=false", {-5, -5, 0, 7}, {0, 4, 3, 1}, 4},
        {"bf16 ties after rounding", "bf16[3]", "{1, 1.001, 0.5}", "k=2, largest=true", {1, 1}, {0, 1}, 2},
        {"k = 0", "f32[3]", "{1, 2, 3}", "k=0, largest=true", {0}, {0}, 0},
    };
    for (size_t c = 0; c < ARRAY_LEN(cases); c++) {
        char text[1024], vt[64], it[64], name[160];
        /* Result types: the input's with the last dimension k. */
        const char *close = strrchr(cases[c].type, ']');
        const char *lastdim = close;
        while (lastdim > cases[c].type && lastdim[-1] != ',' && lastdim[-1] != '[') lastdim--;
        int64_t k = (int64_t)strtoll(strstr(cases[c].attrs, "k=") + 2, NULL, 10);
        snprintf(vt, sizeof vt, "%.*s%lld]", (int)(lastdim - cases[c].type), cases[c].type, (long long)k);
        snprintf(it, sizeof it, "s32%.*s%lld]", (int)(lastdim - strchr(cases[c].type, '[')), strchr(cases[c].type, '['), (long long)k);
        snprintf(text, sizeof text,
                 "HloModule m\n\nENTRY e {\n  x = %s constant(%s)\n  ROOT t = (%s, %s) topk(x), %s\n}\n",
                 cases[c].type, cases[c].input, vt, it, cases[c].attrs);
        snprintf(name, sizeof name, "interp topk-1.%zu %s", c + 1, cases[c].name);
        expect_pair(name, text, cases[c].vals, cases[c].n, cases[c].idx, cases[c].n);
    }
    /* largest survives printing: absent in the IR means false, absent in
     * the text true (XLA's parser), so the printer always writes it. */
    for (int lg = 0; lg < 2; lg++) {
        t_case("interp topk-1.12 largest=%s prints and reads back", lg ? "true" : "false");
        char text[256];
        snprintf(text, sizeof text, "HloModule m\nENTRY e {\n  x = f32[3] parameter(0)\n"
                 "  ROOT t = (f32[1], s32[1]) topk(x), k=1, largest=%s\n}\n", lg ? "true" : "false");
        hlo_module *a = parse(text);
        strbuf pr;
        sb_init(&pr);
        if (a) hlo_print(&pr, a);
        hlo_module *b = a ? parse(pr.s) : NULL;
        if (CHECK(a && b)) {
            CHECK_EQ(instr_int(&graph_entry(b)->instrs[graph_entry(b)->root], A_LARGEST, 0), lg);
            CHECK(graph_equal(a, b, GEQ_IGNORE_HEADER, NULL));
        }
        sb_free(&pr);
        graph_free(a);
        graph_free(b);
    }
    /* The older custom call: its comparator orders the values (and, with four
     * parameters, may look at the indices). */
    const char *cc = "HloModule m\n\ngt {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n"
                     "  ROOT c = pred[] compare(a, b), direction=GT\n}\n\n"
                     "gt4 {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  i = s32[] parameter(2)\n"
                     "  j = s32[] parameter(3)\n  ROOT c = pred[] compare(i, j), direction=GT\n}\n\n"
                     "ENTRY e {\n  x = f32[5] constant({3, 1, 3, 2, 3})\n"
                     "  ROOT t = (f32[2], s32[2]) custom-call(x), custom_call_target=\"%s\", to_apply=%s\n}\n";
    char text[1024];
    snprintf(text, sizeof text, cc, "TopK", "gt");
    expect_pair("interp topk-2.1 custom-call TopK, value comparator", text, (double[]){3, 3}, 2, (double[]){0, 2}, 2);
    snprintf(text, sizeof text, cc, "TopK", "gt4");
    expect_pair("interp topk-2.2 custom-call TopK, index comparator", text, (double[]){3, 2}, 2, (double[]){4, 3}, 2);
    /* Malformed: k beyond the dimension, a result that is not the pair. */
    t_case("interp topk-3.1 k beyond the last dimension");
    expect_run_error("HloModule m\nENTRY e {\n  x = f32[3] parameter(0)\n  ROOT t = (f32[4], s32[4]) topk(x), k=4, largest=true\n}\n",
                     1, 1, NULL, "outside 0..3");
    t_case("interp topk-3.2 indices not s32");
    expect_run_error("HloModule m\nENTRY e {\n  x = f32[3] parameter(0)\n  ROOT t = (f32[2], s64[2]) topk(x), k=2, largest=true\n}\n",
                     1, 1, NULL, "s32 indices");
    t_case("interp topk-3.3 TopK comparator of another element type");
    expect_run_error("HloModule m\n\ngt {\n  a = s32[] parameter(0)\n  b = s32[] parameter(1)\n"
                     "  ROOT c = pred[] compare(a, b), direction=GT\n}\n\nENTRY e {\n  x = f32[3] parameter(0)\n"
                     "  ROOT t = (f32[2], s32[2]) custom-call(x), custom_call_target=\"TopK\", to_apply=gt\n}\n",
                     1, 1, NULL, "is not a scalar f32");
    /* A sort whose comparator compares by the total order (newer XLA's
     * order=TOTAL, older type=TOTALORDER): -inf < -0 < +0 < 1 < NaN. */
    const char *srt = "HloModule m\n\nlt {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  i = s32[] parameter(2)\n"
                      "  j = s32[] parameter(3)\n  ROOT c = pred[] compare(a, b), direction=LT, %s\n}\n\n"
                      "ENTRY e {\n  x = f32[5] constant({nan, 1, 0, -0, -inf})\n  i = s32[5] iota(), iota_dimension=0\n"
                      "  ROOT s = (f32[5], s32[5]) sort(x, i), dimensions={0}, is_stable=true, to_apply=lt\n}\n";
    snprintf(text, sizeof text, srt, "order=TOTAL");
    expect_pair("interp sort-total-1.1 order=TOTAL", text, (double[]){-INFINITY, -0.0, 0, 1, NAN}, 5, (double[]){4, 3, 2, 1, 0}, 5);
    snprintf(text, sizeof text, srt, "type=TOTALORDER");
    expect_pair("interp sort-total-1.2 type=TOTALORDER", text, (double[]){-INFINITY, -0.0, 0, 1, NAN}, 5, (double[]){4, 3, 2, 1, 0}, 5);
    /* The partial order: -0 and +0 tie (stable: input order kept). NaN is
     * unordered, so where it lands is the merge's business: not checked. */
    const char *srt2 = "HloModule m\n\nlt {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  i = s32[] parameter(2)\n"
                       "  j = s32[] parameter(3)\n  ROOT c = pred[] compare(a, b), direction=LT\n}\n\n"
                       "ENTRY e {\n  x = f32[4] constant({1, 0, -0, -inf})\n  i = s32[4] iota(), iota_dimension=0\n"
                       "  ROOT s = (f32[4], s32[4]) sort(x, i), dimensions={0}, is_stable=true, to_apply=lt\n}\n";
    expect_pair("interp sort-total-1.3 partial order keeps equal zeros stable", srt2, (double[]){-INFINITY, 0, -0.0, 1}, 4,
                (double[]){3, 1, 2, 0}, 4);
}

/* A case JAX computed (tests/cases/interp/NAME.{hlo,hlo.pb,io.stf}): runs the
 * module, read from its text form (form 0) and from its protobuf form (1), on
 * one device with the io file's in.<k> as parameters. Returns the tuple
 * result (caller frees), NULL after a failed check. */
static interp_val *run_jax_case(const char *name, int form, const stf_file *io) {
    char file[256];
    snprintf(file, sizeof file, "tests/cases/interp/%s.%s", name, form ? "hlo.pb" : "hlo");
    t_case("interp %s %s", name, form ? "protobuf" : "text");
    diag d;
    diag_init(&d, file);
    hlo_module *m = hlo_read_file(file, &d);
    diag_free(&d);
    if (!CHECK(m != NULL)) return NULL;
    const hlo_comp *e = graph_entry(m);
    interp_val **args = calloc(e->nparams + 1, sizeof *args);
    bool have = true;
    for (uint32_t k = 0; k < e->nparams; k++)
        have &= CHECK_MSG((args[k] = interp_val_ref(stf_find_input(io, k))) != NULL, "no in.%u", k);
    interp_val *out[1] = {0};
    strbuf err;
    sb_init(&err);
    interp_config cfg = {.replicas = 1, .partitions = 1};
    int st = have ? interp_run(m, &cfg, (interp_val **const *)&args, out, &err) : -1;
    if (!CHECK_MSG(st == INTERP_OK, "status %d: %s", st, err.s ? err.s : "") || !CHECK(out[0]->dtype == DT_TUPLE)) {
        interp_val_free(out[0]);
        out[0] = NULL;
    }
    for (uint32_t k = 0; k < e->nparams; k++) interp_val_free(args[k]);
    free(args);
    sb_free(&err);
    graph_free(m);
    return out[0];
}

static bool read_jax_io(const char *name, stf_file *io) {
    char file[256];
    snprintf(file, sizeof file, "tests/cases/interp/%s.io.stf", name);
    diag d;
    diag_init(&d, file);
    bool ok = stf_read(file, io, &d);
    diag_free(&d);
    t_case("interp %s io", name);
    return CHECK(ok);
}

/* jax.lax.top_k as XLA's CPU backend computed it (tests/cases/interp/jax-topk.*,
 * samples/gen/topk_case.py): ties, NaNs of both signs, infinities, signed
 * zeros, s32, bf16, another axis; every output must match bit for bit (NaN
 * matching NaN of the same sign), in text and protobuf form. */
static void test_jax_topk(void) {
    stf_file io;
    if (!read_jax_io("jax-topk", &io)) return;
    for (int form = 0; form < 2; form++) {
        interp_val *res = run_jax_case("jax-topk", form, &io);
        if (!res) continue;
        int compared = 0;
        for (uint32_t k = 0; k < res->nelems; k++) {
            char name[32];
            snprintf(name, sizeof name, "out.%u", k);
            interp_val *want = stf_find(&io, name);
            if (!CHECK_MSG(want != NULL, "no %s", name)) continue;
            interp_val *got = res->elems[k];
            CHECK_MSG(got->dtype == want->dtype, "%s: element type differs", name);
            if (want->f) check_elems(name, got, want->f, want->n);
            else if (CHECK_MSG(got->n == want->n, "%s: element count differs", name))
                for (int64_t i = 0; i < want->n; i++)
                    CHECK_MSG(interp_val_get(got, i) == interp_val_get(want, i), "%s element %lld", name, (long long)i);
            compared++;
        }
        CHECK_EQ(compared, 12);
        interp_val_free(res);
    }
    stf_free(&io);
}

/* Signs LAPACK leaves free, fixed: each column c of the m×ncol matrix u
 * (row-major) multiplied by the
 * sign that makes its entry of largest magnitude positive, and row c of the
 * r×n matrix vt (when not NULL) by the same sign (a singular pair). */
static void fix_signs(double *u, int64_t m, int64_t ncol, double *vt, int64_t r, int64_t n) {
    for (int64_t c = 0; c < ncol; c++) {
        int64_t big = 0;
        for (int64_t i = 1; i < m; i++)
            if (fabs(u[i * ncol + c]) > fabs(u[big * ncol + c])) big = i;
        if (u[big * ncol + c] >= 0) continue;
        for (int64_t i = 0; i < m; i++) u[i * ncol + c] = -u[i * ncol + c];
        for (int64_t j = 0; vt && c < r && j < n; j++) vt[c * n + j] = -vt[c * n + j];
    }
}

/* JAX's linear algebra on XLA's CPU backend (its LAPACK custom calls; tests/
 * cases/interp/jax-linalg.*, samples/gen/linalg_case.py): Cholesky (lower,
 * upper, batched, not positive definite: NaN), the 16 triangular solves, QR
 * reduced / complete / wide, LU with pivots and permutation (also singular),
 * eigh, solve and inverse, SVD (square full, tall and wide reduced, values
 * of a singular matrix) and a pseudo-inverse. Floats within 1e-5 of each output's largest
 * magnitude (LAPACK rounds in f32 along the way, the interpreter once), NaN
 * where JAX has NaN; integers exact; eigenvectors and singular pairs up to
 * the sign LAPACK leaves free (fix_signs on both sides). */
static void test_jax_linalg(void) {
    /* eigenvectors; the (U, Vᵀ) outputs of the SVDs */
    enum { EIGVEC = 33, NOUT = 47 };
    static const int svd_u[] = {36, 39, 42};
    stf_file io;
    if (!read_jax_io("jax-linalg", &io)) return;
    for (int form = 0; form < 2; form++) {
        interp_val *res = run_jax_case("jax-linalg", form, &io);
        if (!res || !CHECK_MSG(res->nelems == NOUT, "%u outputs", res->nelems)) {
            interp_val_free(res);
            continue;
        }
        /* copies with the free signs fixed alike on both sides */
        double *want[NOUT] = {0}, *got[NOUT] = {0};
        bool fine = true;
        for (uint32_t k = 0; k < NOUT; k++) {
            char name[32];
            snprintf(name, sizeof name, "out.%u", k);
            const interp_val *w = stf_find(&io, name), *g = res->elems[k];
            fine &= CHECK_MSG(w && g->dtype == w->dtype && g->n == w->n && g->rank == w->rank, "%s: missing or of another type", name);
            if (!fine) break;
            want[k] = calloc((size_t)w->n + 1, sizeof(double));
            got[k] = calloc((size_t)w->n + 1, sizeof(double));
            for (int64_t i = 0; i < w->n; i++) {
                want[k][i] = interp_val_get(w, i);
                got[k][i] = interp_val_get(g, i);
            }
        }
        for (int side = 0; fine && side < 2; side++) {
            double **v = side ? got : want;
            const interp_val *e = res->elems[EIGVEC];
            fix_signs(v[EIGVEC], e->dims[0], e->dims[1], NULL, 0, 0);
            for (size_t q = 0; q < ARRAY_LEN(svd_u); q++) {
                const interp_val *u = res->elems[svd_u[q]], *vt = res->elems[svd_u[q] + 2];
                fix_signs(v[svd_u[q]], u->dims[0], u->dims[1], v[svd_u[q] + 2], vt->dims[0], vt->dims[1]);
            }
        }
        for (uint32_t k = 0; fine && k < NOUT; k++) {
            const interp_val *w = res->elems[k];
            double scale = 0, worst = 0;
            bool nan_same = true;
            for (int64_t i = 0; i < w->n; i++) {
                if (isfinite(want[k][i])) scale = fmax(scale, fabs(want[k][i]));
                nan_same &= isnan(want[k][i]) == isnan(got[k][i]);
                if (!isnan(want[k][i]) && !isnan(got[k][i])) worst = fmax(worst, fabs(want[k][i] - got[k][i]));
            }
            CHECK_MSG(nan_same, "out.%u: NaN where JAX has none, or none where it has", k);
            if (w->f) CHECK_MSG(worst <= 1e-5 * fmax(scale, 1e-30), "out.%u: differs by %g (largest magnitude %g)", k, worst, scale);
            else CHECK_MSG(worst == 0, "out.%u: integers differ", k);
        }
        for (uint32_t k = 0; k < NOUT; k++) {
            free(want[k]);
            free(got[k]);
        }
        interp_val_free(res);
    }
    stf_free(&io);
}

/* linalg.h directly: reconstruction, info and the ties it counts. */
static void test_linalg(void) {
    t_case("interp linalg-1.1 eigh reconstructs, ascending, orthonormal, no tie");
    double a[16] = {4, 1, -2, 0.5, 1, 3, 0, 1, -2, 0, 5, -1, 0.5, 1, -1, 2}, v[16], w[4];
    memcpy(v, a, sizeof v);
    int64_t ties = 0;
    CHECK_EQ(linalg_syevd(v, 4, true, w, &ties), 0);
    CHECK_EQ(ties, 0);
    double worst = 0;
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++) {
            double r = 0, o = 0;
            for (int k = 0; k < 4; k++) {
                r += v[i * 4 + k] * w[k] * v[j * 4 + k];
                o += v[k * 4 + i] * v[k * 4 + j];
            }
            worst = fmax(worst, fmax(fabs(r - a[i * 4 + j]), fabs(o - (i == j))));
        }
    CHECK_MSG(worst < 1e-12, "off by %g", worst);
    CHECK(w[0] <= w[1] && w[1] <= w[2] && w[2] <= w[3]);
    t_case("interp linalg-1.2 a repeated eigenvalue is a tie");
    double id[9] = {2, 0, 0, 0, 2, 0, 0, 0, 1}, w3[3];
    ties = 0;
    CHECK_EQ(linalg_syevd(id, 3, false, w3, &ties), 0);
    CHECK(ties > 0);
    CHECK(w3[0] == 1 && w3[2] == 2);
    t_case("interp linalg-2.1 lu: a pivot between equal magnitudes is a tie");
    double lu[4] = {1, 2, -1, 3};
    int64_t piv[2];
    ties = 0;
    CHECK_EQ(linalg_getrf(lu, 2, 2, piv, &ties), 0);
    CHECK(ties == 1 && piv[0] == 1 && piv[1] == 2);
    t_case("interp linalg-2.2 lu: distinct pivots no tie, a zero pivot its info");
    double lu2[9] = {1, 2, 3, 2, 4, 6, 0, 1, 1};
    ties = 0;
    CHECK_EQ(linalg_getrf(lu2, 3, 3, piv, &ties), 3);
    CHECK_EQ(ties, 0);
    t_case("interp linalg-3.1 cholesky: the first minor not positive definite");
    double c[4] = {1, 2, 2, 1};
    CHECK_EQ(linalg_potrf(c, 2, true), 2);
    CHECK(c[1] == 2);  /* the upper triangle untouched */
    t_case("interp linalg-4.1 qr: Q from fewer reflectors than columns");
    double q[6] = {3, 1, 4, 1, 0, 2}, tau[2];
    linalg_geqrf(q, 3, 2, tau);
    double r00 = q[0];
    linalg_orgqr(q, 3, 2, tau, 1);  /* H(0) alone: its first column is the input's, normalised */
    CHECK(fabs(q[0] * r00 - 3) < 1e-12 && fabs(q[2] * r00 - 4) < 1e-12 && fabs(q[4]) < 1e-12);
    CHECK(fabs(q[0] * q[1] + q[2] * q[3] + q[4] * q[5]) < 1e-12);
}

static void test_eval_instr(void) {
    const char *text = "HloModule m\nadd { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT s = f32[] add(a, b) }\n"
                       "ENTRY e {\n  c = f32[4] constant({0, 0.5, 1, 2})\n  k = f32[] constant(2)\n"
                       "  kb = f32[4] broadcast(k), dimensions={}\n  m = f32[4] multiply(c, kb)\n"
                       "  cs = f32[4] cosine(m)\n  z = f32[] constant(0)\n  s = f32[] reduce(m, z), dimensions={0}, to_apply=add\n"
                       "  p = u32[] partition-id()\n  ROOT t = f32[8] concatenate(cs, cs), dimensions={0}\n}\n";
    hlo_module *m = parse(text);
    t_case("interp eval-instr-1.1 fold a chain");
    if (!CHECK(m != NULL)) return;
    const hlo_comp *e = graph_entry(m);
    interp_val *v[16] = {0};
    for (uint32_t i = 0; i < e->ninstrs && i < 16; i++) {
        const hlo_instr *in = &e->instrs[i];
        interp_val *ops[4] = {0};
        for (uint32_t k = 0; k < in->noperands && k < 4; k++) ops[k] = v[in->operands[k]];
        strbuf err;
        sb_init(&err);
        v[i] = interp_eval_instr(m, in, ops, &err);
        if (in->op == OP_PARTITION_ID) {
            t_case("interp eval-instr-1.2 partition-id is refused");
            CHECK(v[i] == NULL);
            CHECK_CONTAINS(err.s, "not evaluated on its own");
        } else {
            CHECK_MSG(v[i] != NULL, "%s: %s", in->name, err.s ? err.s : "");
        }
        sb_free(&err);
    }
    const interp_val *t = v[e->root], *s = NULL;
    for (uint32_t i = 0; i < e->ninstrs; i++)
        if (e->instrs[i].op == OP_REDUCE) s = v[i];
    t_case("interp eval-instr-1.3 values");
    if (CHECK(t && s && t->n == 8)) {
        CHECK(s->f[0] == 7);
        for (int k = 0; k < 8; k++) {
            double want = (double)(float)cos((double)((float[]){0, 1, 2, 4})[k % 4]);
            CHECK_MSG(t->f[k] == want, "element %d: %.9g, want %.9g", k, t->f[k], want);
        }
    }
    for (uint32_t i = 0; i < e->ninstrs && i < 16; i++) interp_val_free(v[i]);
    graph_free(m);
}

/* ---------------------------------------------------------------- cross-check with XLA */

typedef struct tol {
    double atol, rtol;
} tol;

static tol tol_of(int dt) {
    if (dt == DT_BF16) return (tol){0.0625, 1.0 / 64};
    if (dt == DT_F16) return (tol){1e-2, 1.0 / 512};
    return (tol){1e-4, 1e-4};
}

/* max_rel is max |ours - jax| over max |jax|: the error relative to the
 * output's scale (elementwise ratios explode near zero). */
typedef struct errstat {
    double max_abs, max_rel, max_ref, worst_excess;  /* worst_excess > 0: out of tolerance */
} errstat;

static void compare_into(errstat *e, const interp_val *got, const interp_val *want, tol t) {
    for (int64_t k = 0; k < want->n; k++) {
        double g = interp_val_get(got, k), w = interp_val_get(want, k), d = fabs(g - w);
        if (g != g || w != w) d = (g != g && w != w) ? 0 : INFINITY;
        if (d > e->max_abs) e->max_abs = d;
        if (fabs(w) > e->max_ref) e->max_ref = fabs(w);
        e->max_rel = e->max_ref > 0 ? e->max_abs / e->max_ref : e->max_abs;
        double ex = d - (t.atol + t.rtol * fabs(w));
        if (ex > e->worst_excess) e->worst_excess = ex;
    }
}

/* A view (relations file): "dup" or terms "shard(dim,axis)" / "shard(dim,(a,b))". */
typedef struct view {
    int npartial, partial[8];   /* partial(AXIS,sum): summed over these axes */
    int nterms;
    int dim[INTERP_MAX_RANK];
    int naxes[INTERP_MAX_RANK];
    int axis[INTERP_MAX_RANK][4];
} view;

typedef struct mesh {
    int n;
    char names[8][32];
    int64_t size[8];
} mesh;

static int mesh_axis(const mesh *m, const char *s, size_t n) {
    for (int k = 0; k < m->n; k++)
        if (strlen(m->names[k]) == n && strncmp(m->names[k], s, n) == 0) return k;
    return -1;
}

static bool parse_view(const char *s, const mesh *m, view *v) {
    memset(v, 0, sizeof *v);
    while (*s == ' ') s++;
    if (strcmp(s, "dup") == 0) return true;
    while (*s) {
        int dim, used;
        if (strncmp(s, "partial(", 8) == 0) {
            s += 8;
            size_t n = strcspn(s, ",)");
            int a = mesh_axis(m, s, n);
            if (a < 0 || v->npartial >= 8 || strncmp(s + n, ",sum)", 5) != 0) return false;
            v->partial[v->npartial++] = a;
            s += n + 5;
            while (*s == ' ') s++;
            continue;
        }
        if (sscanf(s, "shard(%d,%n", &dim, &used) != 1 || v->nterms >= INTERP_MAX_RANK) return false;
        s += used;
        int t = v->nterms++;
        v->dim[t] = dim;
        bool paren = *s == '(';
        if (paren) s++;
        for (;;) {
            size_t n = strcspn(s, ",)");
            int a = mesh_axis(m, s, n);
            if (a < 0 || v->naxes[t] >= 4) return false;
            v->axis[t][v->naxes[t]++] = a;
            s += n;
            if (*s == ',' && paren) {
                s++;
                continue;
            }
            break;
        }
        if (paren && *s++ != ')') return false;
        if (*s++ != ')') return false;
        while (*s == ' ') s++;
    }
    return true;
}

/* Device d's piece of global g under view v (mesh coordinates row-major, "iota" order). */
static interp_val *view_local(const interp_val *g, const view *v, const mesh *m, int64_t d) {
    int64_t coord[8], rem = d;
    for (int k = m->n - 1; k >= 0; k--) {
        coord[k] = rem % m->size[k];
        rem /= m->size[k];
    }
    int64_t off[INTERP_MAX_RANK] = {0}, sz[INTERP_MAX_RANK];
    memcpy(sz, g->dims, g->rank * sizeof *sz);
    for (int t = 0; t < v->nterms; t++) {
        int dim = v->dim[t];
        if (dim < 0 || (uint32_t)dim >= g->rank) return NULL;
        int64_t shards = 1, idx = 0;
        for (int a = 0; a < v->naxes[t]; a++) {
            shards *= m->size[v->axis[t][a]];
            idx = idx * m->size[v->axis[t][a]] + coord[v->axis[t][a]];
        }
        if (g->dims[dim] % shards) return NULL;
        sz[dim] = g->dims[dim] / shards;
        off[dim] = idx * sz[dim];
    }
    interp_val *r = interp_val_slice(g, off, sz);
    for (int k = 0; r && k < v->npartial; k++)
        if (coord[v->partial[k]] != 0)
            for (int64_t e = 0; e < r->n; e++) interp_val_set(r, e, 0);
    return r;
}

/* True when device d is the first holder of its piece (the copy JAX reads back). */
static bool first_holder(const view *v, const mesh *m, int64_t d) {
    int64_t coord[8], rem = d;
    for (int k = m->n - 1; k >= 0; k--) {
        coord[k] = rem % m->size[k];
        rem /= m->size[k];
    }
    for (int k = 0; k < m->n; k++) {
        bool bound = false;
        for (int t = 0; t < v->nterms; t++)
            for (int a = 0; a < v->naxes[t]; a++)
                if (v->axis[t][a] == k) bound = true;
        if (!bound && coord[k] != 0) return false;
    }
    return true;
}

/* The corpus folder being read (a manifest's paths are relative to it). */
static const char *corpus_dir = "samples";

static char *sample_path(const char *rel) {
    size_t n = strlen(rel) + strlen(corpus_dir) + 2;
    char *p = malloc(n);
    snprintf(p, n, "%s/%s", corpus_dir, rel);
    return p;
}

/* True when every file a pair names exists: samples/gen/run.sh rewrites the
 * corpus in place, so a listed file may be missing for a while (noted, not failed;
 * the manifest's own consistency is the samples suite's business). */
static bool pair_files_present(json_t *pair, bool verbose) {
    const char *keys[] = {"io", "relations"};
    const char *rels[4] = {json_string_value(json_object_get(json_object_get(pair, "baseline"), "hlo")),
                           json_string_value(json_object_get(json_object_get(pair, "distributed"), "hlo")),
                           json_string_value(json_object_get(pair, keys[0])),
                           json_string_value(json_object_get(pair, keys[1]))};
    for (int k = 0; k < 4; k++) {
        if (!rels[k] || strcmp(rels[k], "auto") == 0) continue;
        char *p = sample_path(rels[k]);
        FILE *f = fopen(p, "rb");
        free(p);
        if (!f) {
            if (verbose) printf("  %-52s skipped: samples/%s missing\n", json_string_value(json_object_get(pair, "name")), rels[k]);
            return false;
        }
        fclose(f);
    }
    return true;
}

static hlo_module *read_module(const char *rel) {
    char *p = sample_path(rel);
    diag d;
    diag_init(&d, p);
    hlo_module *m = hlo_read_file(p, &d);
    if (!m) printf("  %s: %s\n", p, d.out.s ? d.out.s : "unreadable");
    diag_free(&d);
    free(p);
    return m;
}

/* Runs m on D devices with args[d][k]; returns outputs (array root or element 0 of a tuple root). */
static interp_val **run_module(const hlo_module *m, int64_t D, interp_val ***args, strbuf *err) {
    int64_t R, P;
    interp_devices(m, &R, &P);
    interp_config cfg = {.replicas = 1, .partitions = D};
    interp_val **out = calloc((size_t)D, sizeof *out);
    if (interp_run(m, &cfg, (interp_val **const *)args, out, err) != INTERP_OK) {
        free(out);
        return NULL;
    }
    for (int64_t d = 0; d < D; d++)
        if (out[d]->dtype == DT_TUPLE && out[d]->nelems == 1) {
            interp_val *e = interp_val_ref(out[d]->elems[0]);
            interp_val_free(out[d]);
            out[d] = e;
        }
    return out;
}

static void free_args(interp_val ***args, int64_t D, uint32_t np) {
    for (int64_t d = 0; d < D; d++) {
        for (uint32_t k = 0; k < np; k++) interp_val_free(args[d][k]);
        free(args[d]);
    }
    free(args);
}

static void free_outs(interp_val **out, int64_t D) {
    if (!out) return;
    for (int64_t d = 0; d < D; d++) interp_val_free(out[d]);
    free(out);
}

/* Baseline: 1 device, stored inputs, compared with out.0. */
static void check_baseline(const char *name, const char *rel, const stf_file *io) {
    t_case("interp xla %s baseline", name);
    hlo_module *m = read_module(rel);
    if (!CHECK(m != NULL)) return;
    const hlo_comp *e = graph_entry(m);
    interp_val ***args = calloc(1, sizeof *args);
    args[0] = calloc(e->nparams + 1, sizeof **args);
    bool ok = true;
    for (uint32_t k = 0; k < e->nparams && ok; k++) {
        args[0][k] = interp_val_ref(stf_find_input(io, k));
        ok = CHECK_MSG(args[0][k] && interp_val_matches(args[0][k], &e->instrs[e->params[k]].shape),
                       "parameter %u: no stored input of its shape", k);
    }
    interp_val *want = stf_find(io, "out.0");
    strbuf err;
    sb_init(&err);
    interp_val **out = ok && CHECK(want != NULL) ? run_module(m, 1, args, &err) : NULL;
    if (ok && want && CHECK_MSG(out != NULL, "%s", err.s ? err.s : "")) {
        errstat es = {0};
        if (CHECK_MSG(interp_val_matches(out[0], &(shape){.dtype = (uint8_t)want->dtype, .rank = want->rank, .dims = want->dims}),
                      "output shape differs from JAX's")) {
            compare_into(&es, out[0], want, tol_of(want->dtype));
            CHECK_MSG(es.worst_excess <= 0, "max abs %.3g rel %.3g beyond tolerance", es.max_abs, es.max_rel);
            printf("  %-52s baseline  max abs %.3g  rel %.3g\n", name, es.max_abs, es.max_rel);
        }
    }
    free_outs(out, 1);
    free_args(args, 1, e->nparams);
    sb_free(&err);
    graph_free(m);
}

static bool read_mesh(json_t *jm, mesh *ms) {
    memset(ms, 0, sizeof *ms);
    const char *key;
    json_t *val;
    json_object_foreach(jm, key, val) {
        if (ms->n >= 8 || !json_is_integer(val)) return false;
        snprintf(ms->names[ms->n], sizeof ms->names[0], "%s", key);
        ms->size[ms->n++] = json_integer_value(val);
    }
    return ms->n > 0;
}

/* Distributed program of a shard_map pair, inputs cut by the relations file. */
static void check_smap(json_t *pair, const stf_file *io) {
    const char *name = json_string_value(json_object_get(pair, "name"));
    const char *rel = json_string_value(json_object_get(json_object_get(pair, "distributed"), "hlo"));
    const char *relf = json_string_value(json_object_get(pair, "relations"));
    bool bug = json_object_get(pair, "bug") != NULL;
    json_t *jdiff = json_object_get(json_object_get(pair, "numerics"), "max_abs_diff");
    t_case("interp xla %s distributed", name);
    char *rp = sample_path(relf);
    json_error_t je;
    json_t *rj = json_load_file(rp, JSON_PRESERVE_ORDER, &je);
    free(rp);
    mesh ms;
    if (!CHECK_MSG(rj && read_mesh(json_object_get(rj, "mesh"), &ms), "relations %s unreadable", relf)) {
        json_decref(rj);
        return;
    }
    int64_t D = 1;
    for (int k = 0; k < ms.n; k++) D *= ms.size[k];
    hlo_module *m = read_module(rel);
    if (!CHECK(m != NULL)) {
        json_decref(rj);
        return;
    }
    const hlo_comp *e = graph_entry(m);
    interp_val ***args = calloc((size_t)D, sizeof *args);
    for (int64_t d = 0; d < D; d++) args[d] = calloc(e->nparams + 1, sizeof **args);
    bool ok = true;
    json_t *ins = json_object_get(rj, "inputs");
    for (uint32_t k = 0; k < e->nparams && ok; k++) {
        json_t *ji = json_array_get(ins, k);
        view v;
        interp_val *g = stf_find_input(io, k);
        ok = CHECK_MSG(g && ji && parse_view(json_string_value(json_object_get(ji, "view")), &ms, &v),
                       "input %u: no stored tensor or unreadable view", k);
        for (int64_t d = 0; d < D && ok; d++) {
            args[d][k] = view_local(g, &v, &ms, d);
            ok = CHECK_MSG(args[d][k] && interp_val_matches(args[d][k], &e->instrs[e->params[k]].shape),
                           "input %u: the view's piece does not have the parameter's shape", k);
        }
    }
    view ov;
    json_t *jo = json_object_get(json_array_get(json_object_get(rj, "outputs"), 0), "view");
    ok = ok && CHECK_MSG(jo && parse_view(json_string_value(jo), &ms, &ov), "output view unreadable");
    if (ok && ov.npartial) {
        printf("  %-52s skipped: partial output view\n", name);
        ok = false;
    }
    interp_val *want = stf_find(io, "out.0");
    strbuf err;
    sb_init(&err);
    interp_val **out = ok && want ? run_module(m, D, args, &err) : NULL;
    if (ok && want && CHECK_MSG(out != NULL, "%s", err.s ? err.s : "")) {
        errstat all = {0}, first = {0};
        bool shape_ok = true;
        for (int64_t d = 0; d < D && shape_ok; d++) {
            interp_val *exp = view_local(want, &ov, &ms, d);
            shape_ok = exp && out[d]->dtype == exp->dtype && out[d]->n == exp->n && out[d]->rank == exp->rank &&
                       memcmp(out[d]->dims, exp->dims, exp->rank * sizeof *exp->dims) == 0;
            if (shape_ok) {
                compare_into(&all, out[d], exp, tol_of(want->dtype));
                if (first_holder(&ov, &ms, d)) compare_into(&first, out[d], exp, tol_of(want->dtype));
            }
            interp_val_free(exp);
        }
        if (!bug) {
            if (CHECK_MSG(shape_ok, "output shape differs from the view of JAX's output"))
                CHECK_MSG(all.worst_excess <= 0, "max abs %.3g rel %.3g beyond tolerance", all.max_abs, all.max_rel);
            printf("  %-52s %lld dev  max abs %.3g  rel %.3g\n", name, (long long)D, all.max_abs, all.max_rel);
        } else if (json_is_number(jdiff)) {
            /* JAX measured |dist - baseline| on the copy it reads back. */
            double jd = json_number_value(jdiff);
            tol t = tol_of(want->dtype);
            if (CHECK_MSG(shape_ok, "output shape differs"))
                CHECK_MSG(fabs(first.max_abs - jd) <= t.atol + t.rtol * jd, "bug variant: max |diff| %.6g, JAX measured %.6g",
                          first.max_abs, jd);
            printf("  %-52s %lld dev  bug: max |diff| %.6g (JAX %.6g)\n", name, (long long)D, first.max_abs, jd);
        } else {
            CHECK_MSG(!shape_ok, "bug variant: JAX saw a different output shape, we did not");
            printf("  %-52s %lld dev  bug: output shape differs (as in JAX)\n", name, (long long)D);
        }
    }
    free_outs(out, D);
    free_args(args, D, e->nparams);
    sb_free(&err);
    graph_free(m);
    json_decref(rj);
}

/* A GSPMD pair run with the inputs of a shard_map io file of the same config
 * (same parameters): the baseline on 1 device, then the distributed program on
 * the mesh's devices, inputs cut by the baseline's parameter shardings, output
 * compared with its root sharding's tile. */
static bool check_gspmd(json_t *pair, const stf_file *io) {
    const char *name = json_string_value(json_object_get(pair, "name"));
    const char *brel = json_string_value(json_object_get(json_object_get(pair, "baseline"), "hlo"));
    const char *drel = json_string_value(json_object_get(json_object_get(pair, "distributed"), "hlo"));
    hlo_module *b = read_module(brel);
    if (!b) return false;
    const hlo_comp *be = graph_entry(b);
    for (uint32_t k = 0; k < be->nparams; k++) {
        interp_val *g = stf_find_input(io, k);
        if (!g || !interp_val_matches(g, &be->instrs[be->params[k]].shape)) {
            graph_free(b);
            return false;  /* another function: nothing to compare with */
        }
    }
    check_baseline(name, brel, io);
    t_case("interp xla %s distributed", name);
    hlo_module *m = read_module(drel);
    if (!CHECK(m != NULL)) {
        graph_free(b);
        return true;
    }
    int64_t R, P;
    interp_devices(m, &R, &P);
    int64_t D = R * P;
    const hlo_comp *e = graph_entry(m);
    interp_val ***args = calloc((size_t)D, sizeof *args);
    for (int64_t d = 0; d < D; d++) args[d] = calloc(e->nparams + 1, sizeof **args);
    bool ok = CHECK(e->nparams == be->nparams);
    for (uint32_t k = 0; k < e->nparams && ok; k++)
        for (int64_t d = 0; d < D && ok; d++) {
            args[d][k] = interp_param_input(&e->instrs[e->params[k]], stf_find_input(io, k), d);
            ok = CHECK_MSG(args[d][k] != NULL, "parameter %u: no tile for device %lld", k, (long long)d);
        }
    const hlo_instr *broot = &be->instrs[be->root];
    const hlo_attr *sa = instr_attr(broot, A_SHARDING);
    interp_val *want = stf_find(io, "out.0");
    strbuf err;
    sb_init(&err);
    interp_val **out = ok && want ? run_module(m, D, args, &err) : NULL;
    if (ok && want && CHECK_MSG(out != NULL, "%s", err.s ? err.s : "")) {
        errstat all = {0};
        for (int64_t d = 0; d < D; d++) {
            int64_t off[INTERP_MAX_RANK], sz[INTERP_MAX_RANK];
            bool tiled = interp_shard_tile(sa ? sa->v.sharding : NULL, want->rank, want->dims, d, off, sz);
            interp_val *exp = tiled ? interp_val_slice(want, off, sz) : NULL;
            if (CHECK_MSG(exp && exp->n == out[d]->n, "device %lld: output is not the root sharding's tile", (long long)d))
                compare_into(&all, out[d], exp, tol_of(want->dtype));
            interp_val_free(exp);
        }
        CHECK_MSG(all.worst_excess <= 0, "max abs %.3g rel %.3g beyond tolerance", all.max_abs, all.max_rel);
        printf("  %-52s %lld dev  max abs %.3g  rel %.3g\n", name, (long long)D, all.max_abs, all.max_rel);
    }
    free_outs(out, D);
    free_args(args, D, e->nparams);
    sb_free(&err);
    graph_free(m);
    graph_free(b);
    return true;
}

static void test_samples(const char *dir) {
    json_error_t je;
    corpus_dir = dir;
    char mp[256];
    snprintf(mp, sizeof mp, "%s/manifest.json", dir);
    json_t *man = json_load_file(mp, 0, &je);
    t_case("interp xla manifest %s", mp);
    if (!CHECK_MSG(man != NULL, "%s: %s", mp, je.text)) return;
    json_t *pairs = json_object_get(man, "pairs");
    size_t i;
    json_t *p;
    /* Baselines with io files, once each. */
    char done[64][256];
    int ndone = 0;
    json_array_foreach(pairs, i, p) {
        const char *io = json_string_value(json_object_get(p, "io"));
        const char *brel = json_string_value(json_object_get(json_object_get(p, "baseline"), "hlo"));
        if (!io || !brel || !pair_files_present(p, true)) continue;
        char *iop = sample_path(io);
        stf_file f;
        diag d;
        diag_init(&d, iop);
        bool ok = stf_read(iop, &f, &d);
        diag_free(&d);
        free(iop);
        t_case("interp xla %s io", json_string_value(json_object_get(p, "name")));
        if (!CHECK_MSG(ok, "%s unreadable", io)) continue;
        bool seen = false;
        for (int k = 0; k < ndone; k++)
            if (strcmp(done[k], brel) == 0) seen = true;
        if (!seen && ndone < 64) {
            snprintf(done[ndone++], sizeof done[0], "%s", brel);
            check_baseline(brel, brel, &f);
        }
        if (strcmp(json_string_value(json_object_get(p, "kind")), "shard_map") == 0) check_smap(p, &f);
        stf_free(&f);
    }
    /* GSPMD pairs: inputs of the config's first io file, when they fit. */
    json_array_foreach(pairs, i, p) {
        const char *kind = json_string_value(json_object_get(p, "kind"));
        const char *cfg = json_string_value(json_object_get(p, "config"));
        if (!kind || strcmp(kind, "gspmd") != 0 || !cfg || !pair_files_present(p, true)) continue;
        size_t j;
        json_t *q;
        const char *tried[16];
        int ntried = 0;
        bool ran = false;
        json_array_foreach(pairs, j, q) {
            const char *qc = json_string_value(json_object_get(q, "config"));
            const char *io = json_string_value(json_object_get(q, "io"));
            if (ran || !qc || !io || strcmp(qc, cfg) != 0 || !pair_files_present(q, false)) continue;
            bool seen = false;
            for (int k = 0; k < ntried; k++)
                if (strcmp(tried[k], io) == 0) seen = true;
            if (seen || ntried == 16) continue;
            tried[ntried++] = io;
            char *iop = sample_path(io);
            stf_file f;
            diag d;
            diag_init(&d, iop);
            bool ok = stf_read(iop, &f, &d);
            diag_free(&d);
            free(iop);
            if (!ok) continue;
            ran = check_gspmd(p, &f);
            stf_free(&f);
        }
    }
    json_decref(man);
}

/* Opcode names (custom calls as "custom-call:TARGET"), a small sorted set. */
typedef struct opset {
    char **v;
    size_t n, cap;
} opset;

static void opset_add(opset *s, const char *name) {
    size_t lo = 0, hi = s->n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        int c = strcmp(s->v[mid], name);
        if (c == 0) return;
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    XGROW(s->v, s->cap, s->n + 1);
    memmove(s->v + lo + 1, s->v + lo, (s->n - lo) * sizeof *s->v);
    s->v[lo] = strdup(name);
    s->n++;
}

static bool opset_has(const opset *s, const char *name) {
    for (size_t k = 0; k < s->n; k++)
        if (strcmp(s->v[k], name) == 0) return true;
    return false;
}

static void opset_free(opset *s) {
    for (size_t k = 0; k < s->n; k++) free(s->v[k]);
    free(s->v);
}

static void module_ops(const hlo_module *m, opset *s) {
    for (uint32_t c = 0; c < m->ncomps; c++)
        for (uint32_t i = 0; i < m->comps[c].ninstrs; i++) {
            const hlo_instr *in = &m->comps[c].instrs[i];
            char name[160];
            const char *t = in->op == OP_CUSTOM_CALL ? instr_str(in, A_CUSTOM_CALL_TARGET) : NULL;
            snprintf(name, sizeof name, "%s%s%s", hlo_op_name(in->op), t ? ":" : "", t ? t : "");
            opset_add(s, name);
        }
}

/* Runs m as `scalify eval --seed 1` does; INTERP_OK or the status, why in err. */
static int eval_seeded(const hlo_module *m, strbuf *err) {
    int64_t R, P;
    interp_devices(m, &R, &P);
    interp_config cfg = {.replicas = R, .partitions = P};
    int st = interp_check(m, &cfg, err);
    if (st != INTERP_OK) return st;
    int64_t D = R * P;
    const hlo_comp *e = graph_entry(m);
    interp_val ***args = calloc((size_t)D, sizeof *args);
    for (int64_t d = 0; d < D; d++) args[d] = calloc(e->nparams + 1, sizeof **args);
    for (uint32_t k = 0; k < e->nparams && st == INTERP_OK; k++) {
        const hlo_instr *p = &e->instrs[e->params[k]];
        interp_val *g = interp_param_random(p, k, D, 1, err);
        for (int64_t d = 0; d < D && g && st == INTERP_OK; d++)
            if (!(args[d][k] = interp_param_input(p, g, d))) st = INTERP_EINPUT;
        if (!g) st = INTERP_EINPUT;
        interp_val_free(g);
    }
    interp_val **out = calloc((size_t)D, sizeof *out);
    if (st == INTERP_OK) st = interp_run(m, &cfg, (interp_val **const *)args, out, err);
    free_outs(out, D);
    free_args(args, D, e->nparams);
    return st;
}

typedef struct corpus_tally {
    opset ran, refused, seen;
    int nran, nsame, nbudget, nmissing;
} corpus_tally;

/* Reads and runs one module file. With prev (the text form of the same
 * program), a module whose IR equals it on the same devices counts as run
 * (the interpreter sees the same thing); *keep, when given, receives the
 * module instead of its being freed. */
static void eval_file(const char *path, hlo_module **prev, hlo_module **keep, corpus_tally *t) {
    if (opset_has(&t->seen, path)) return;
    opset_add(&t->seen, path);
    FILE *fp = fopen(path, "rb");
    if (!fp) {
        printf("  %-60s skipped: missing\n", path);
        t->nmissing++;
        return;
    }
    fclose(fp);
    t_case("interp corpus-eval %s", path);
    diag d;
    diag_init(&d, path);
    hlo_module *m = hlo_read_file(path, &d);
    CHECK_MSG(m != NULL, "unreadable: %s", d.out.s ? d.out.s : "");
    diag_free(&d);
    if (!m) return;
    int64_t R, P, R2 = 0, P2 = 0;
    interp_devices(m, &R, &P);
    if (prev && *prev) interp_devices(*prev, &R2, &P2);
    if (prev && *prev && R == R2 && P == P2 && graph_equal(m, *prev, GEQ_IGNORE_HEADER, NULL)) {
        t->nsame++;
        graph_free(m);
        return;
    }
    strbuf err;
    sb_init(&err);
    int st = eval_seeded(m, &err);
    if (st == INTERP_EBUDGET && err.s && strstr(err.s, "the module holds more than")) {
        t->nbudget++;
        module_ops(m, &t->refused);
    } else if (CHECK_MSG(st == INTERP_OK, "status %d: %s", st, err.s ? err.s : "")) {
        t->nran++;
        module_ops(m, &t->ran);
    }
    sb_free(&err);
    if (keep) *keep = m;
    else graph_free(m);
}

/* Every module of every corpus (baselines and distributed programs, text and
 * protobuf forms) and the hand-written tests/cases/interp/ *.hlo run under
 * the interpreter with seeded inputs (as `scalify eval --seed 1`), or are
 * refused before running for the element budget (the full-size models:
 * their weights alone exceed it). A refused module must hold no opcode or
 * custom-call target that no module that ran holds, so the refusal hides no
 * missing rule. */
static void test_corpus_eval(const char *const *dirs, size_t ndirs) {
    corpus_tally t = {0};
    double t0 = now_ms();
    for (size_t c = 0; c < ndirs; c++) {
        char mp[256];
        snprintf(mp, sizeof mp, "%s/manifest.json", dirs[c]);
        json_error_t je;
        json_t *man = json_load_file(mp, 0, &je);
        t_case("interp corpus-eval %s", mp);
        if (!CHECK_MSG(man != NULL, "%s: %s", mp, je.text)) continue;
        size_t i;
        json_t *p;
        json_array_foreach(json_object_get(man, "pairs"), i, p) {
            static const char *sides[] = {"baseline", "distributed"}, *forms[] = {"hlo", "pb"};
            for (int sd = 0; sd < 2; sd++) {
                hlo_module *text_form = NULL;
                for (int f = 0; f < 2; f++) {
                    const char *rel = json_string_value(json_object_get(json_object_get(p, sides[sd]), forms[f]));
                    if (!rel) continue;
                    char path[512];
                    snprintf(path, sizeof path, "%s/%s", dirs[c], rel);
                    eval_file(path, f == 1 ? &text_form : NULL, f == 0 ? &text_form : NULL, &t);
                }
                graph_free(text_form);
            }
        }
        json_decref(man);
    }
    DIR *dir = opendir("tests/cases/interp");
    t_case("interp corpus-eval tests/cases/interp");
    if (CHECK(dir != NULL)) {
        struct dirent *de;
        char *names[64];
        size_t n = 0;
        while ((de = readdir(dir)) != NULL && n < ARRAY_LEN(names)) {
            size_t l = strlen(de->d_name);
            if (l > 4 && strcmp(de->d_name + l - 4, ".hlo") == 0) names[n++] = strdup(de->d_name);
        }
        closedir(dir);
        CHECK(n > 0);
        for (size_t k = 0; k < n; k++) {
            char path[512];
            snprintf(path, sizeof path, "tests/cases/interp/%s", names[k]);
            eval_file(path, NULL, NULL, &t);
            free(names[k]);
        }
    }
    t_case("interp corpus-eval: refused modules hold only ops that ran elsewhere");
    for (size_t k = 0; k < t.refused.n; k++) CHECK_MSG(opset_has(&t.ran, t.refused.v[k]), "%s never ran", t.refused.v[k]);
    CHECK(t.nran > 0);
    printf("  corpus eval: %d modules ran, %d protobuf forms equal to their text form, %d refused over the element "
           "budget, %d missing; %zu distinct ops ran (%.1f s)\n  ",
           t.nran, t.nsame, t.nbudget, t.nmissing, t.ran.n, (now_ms() - t0) / 1e3);
    for (size_t k = 0; k < t.ran.n; k++) printf("%s%s", t.ran.v[k], k + 1 < t.ran.n ? " " : "\n");
    opset_free(&t.ran);
    opset_free(&t.refused);
    opset_free(&t.seen);
}

static void test_stf(void) {
    t_case("interp stf-1.1 round trip");
    int64_t dims[2] = {2, 3};
    interp_val *v[3] = {interp_val_new(DT_BF16, 2, dims), interp_val_new(DT_F16, 2, dims), interp_val_new(DT_S32, 2, dims)};
    interp_rng r;
    interp_rng_seed(&r, 7);
    for (int k = 0; k < 3; k++) interp_val_fill_random(v[k], &r);
    const char *names[3] = {"a", "b", "c"};
    strbuf b;
    sb_init(&b);
    CHECK(stf_write(&b, names, v, 3));
    stf_file f;
    diag d;
    diag_init(&d, "mem");
    if (CHECK(stf_parse((const uint8_t *)b.s, b.len, &f, &d)) && CHECK(f.n == 3)) {
        for (int k = 0; k < 3; k++)
            for (int64_t e = 0; e < 6; e++) CHECK(interp_val_get(f.vals[k], e) == interp_val_get(v[k], e));
        stf_free(&f);
    }
    /* Every truncation is refused cleanly. */
    for (size_t n = 0; n + 1 < b.len; n += 3) {
        stf_file g;
        if (stf_parse((const uint8_t *)b.s, n, &g, &d)) {
            CHECK_MSG(false, "truncated at %zu accepted", n);
            stf_free(&g);
        }
    }
    diag_free(&d);
    sb_free(&b);
    for (int k = 0; k < 3; k++) interp_val_free(v[k]);
}

static void test_cli_eval(void) {
    const char *bin = t_scalify();
    char cmd[1024];
    int st;
    t_case("interp eval-1.1 seeded run, 4 devices, deterministic");
    const char *f = "build/interp-eval.hlo";
    FILE *o = fopen(f, "w");
    if (!CHECK(o != NULL)) return;
    fputs(AR_HEAD "ENTRY e {\n  a = f32[4] parameter(0), sharding={devices=[4]<=[4]}\n"
                  "  ROOT r = f32[16] all-gather(a), channel_id=1, replica_groups={{0,1,2,3}}, dimensions={0}, "
                  "use_global_device_ids=true\n}\n",
          o);
    fclose(o);
    snprintf(cmd, sizeof cmd, "%s eval %s --devices 4 --seed 5 --outputs build/interp-eval.stf", bin, f);
    char *a = t_run(cmd, &st);
    CHECK_EQ(st, 0);
    CHECK_CONTAINS(a, "out.0 device 3: f32[16]");
    char *b = t_run(cmd, &st);
    CHECK_STR(a, b);
    /* The global parameter is drawn once and cut into tiles: every device gathers the same array. */
    char *c0 = strstr(a, "checksum="), *c3 = a ? strstr(a, "device 3") : NULL;
    CHECK(c0 && c3 && strncmp(c0, strstr(c3, "checksum="), 25) == 0);
    free(b);
    free(a);
    t_case("interp eval-1.2 outputs read back as inputs are refused by name, exit 2");
    snprintf(cmd, sizeof cmd, "%s eval %s --devices 4 --inputs build/interp-eval.stf", bin, f);
    a = t_run(cmd, &st);
    CHECK_EQ(st, 2);
    CHECK_CONTAINS(a, "no tensor in.0");
    free(a);
    t_case("interp eval-1.3 missing file and bad option, exit 2");
    snprintf(cmd, sizeof cmd, "%s eval build/does-not-exist.hlo", bin);
    a = t_run(cmd, &st);
    CHECK_EQ(st, 2);
    free(a);
    snprintf(cmd, sizeof cmd, "%s eval %s --devices 0", bin, f);
    a = t_run(cmd, &st);
    CHECK_EQ(st, 2);
    free(a);
}

/* Programs whose declared shapes disagree with their operands (a mutated
 * dump): an error from the interpreter, never a read past a value. */
/* fft and the complex ops around it, against numpy: the expected values were
 * computed once with numpy.fft in complex128 (numpy 2, tests/unit has no
 * Python) from the same inputs — multiples of 1/8, exact in f32, given as
 * constants since entry parameters cannot be complex. Results are rounded to
 * f32 (c64) or kept in f64 (c128): within 1e-6 of the largest |value|. The
 * IRFFT inputs that are not Hermitian check pocketfft's reading (numpy's
 * irfft/irfftn): the imaginary parts of the DC and Nyquist bins are ignored,
 * the outer dims inverted first. */
static void test_fft(void) {
    static const struct {
        const char *name, *body;
        int n, cx;            /* elements; whether want interleaves re, im */
        double want[96];
    } cases[] = {
        {"fft c64[2,8]",
         "  x = c64[2,8] constant({{(-1.5, 1.0), (-1.5, 1.875), (1.25, 2.0), (0.0, 0.5), (0.375, 1.5), (0.375, -0.5), (0.875, -1.5), (-2.0, 0.0)}, {(0.0, -0.25), (-1.5, 0.625), (-0.375, 2.0), (1.75, -0.875), (0.25, 1.5), (-1.75, -1.5), (0.125, -0.625), (-1.5, 1.25)}})\n"
         "  ROOT r = c64[2,8] fft(x), fft_type=FFT, fft_length={8}\n"
         ,
         16, 1, {-2.125, 4.875, 0.91789321881345243, 0.36243686707645817, -2.375, 1.125, -0.60202922699080386, -1.5392135623730951, 4.125, 1.125, 2.3321067811865475, -2.1124368670764584, -4.125, 2.875, -10.147970773009195, 1.2892135623730951, -3, 2.125, 0.25367965644035717, -0.71966991411008929, -0.75, 3.375, -0.75367965644035717, -7.730077554195744, 3, 3.125, 4.4963203435596428, -1.7803300858899107, 1.75, -3.625, -4.9963203435596428, 3.230077554195744}},
        {"ifft c64[2,8]",
         "  x = c64[2,8] constant({{(-1.5, 1.0), (-1.5, 1.875), (1.25, 2.0), (0.0, 0.5), (0.375, 1.5), (0.375, -0.5), (0.875, -1.5), (-2.0, 0.0)}, {(0.0, -0.25), (-1.5, 0.625), (-0.375, 2.0), (1.75, -0.875), (0.25, 1.5), (-1.75, -1.5), (0.125, -0.625), (-1.5, 1.25)}})\n"
         "  ROOT r = c64[2,8] fft(x), fft_type=IFFT, fft_length={8}\n"
         ,
         16, 1, {-0.265625, 0.609375, -1.2684963466261494, 0.16115169529663689, -0.515625, 0.359375, 0.29151334764831843, -0.2640546083845573, 0.515625, 0.140625, -0.075253653373850482, -0.19240169529663689, -0.296875, 0.140625, 0.11473665235168155, 0.045304608384557271, -0.375, 0.265625, -0.62454004294495535, 0.40375969427446801, 0.21875, -0.453125, 0.56204004294495535, -0.22254126073623884, 0.375, 0.390625, -0.094209957055044646, -0.96625969427446801, -0.09375, 0.421875, 0.031709957055044646, -0.089958739263761162}},
        {"fft c64[3,6] (length 6)",
         "  x = c64[3,6] constant({{(-1.0, 1.75), (0.75, 0.375), (-0.125, 0.875), (0.0, -1.125), (1.875, 0.375), (1.25, 1.25)}, {(1.375, 1.625), (0.25, 1.5), (2.0, 1.875), (2.0, -1.5), (-1.5, 1.125), (-1.25, -0.125)}, {(-0.75, 0.75), (0.25, -0.875), (1.375, -2.0), (-0.125, -1.75), (2.0, 2.0), (-0.625, 1.625)}})\n"
         "  ROOT r = c64[3,6] fft(x), fft_type=FFT, fft_length={6}\n"
         ,
         18, 1, {2.75, 3.5, -1.1997595264191645, 5.2275635094610964, -4.0657849302036029, -2.111538105676658, -1.25, 2.5, -1.6842150697963969, 0.48653810567665801, -0.5502404735808355, 0.89743649053890351, 2.875, 4.5, 0.68181033398804169, -2.0176270189221928, 4.3827722283113841, -0.33044919243112281, 0.87499999999999978, 4.75, 2.8672277716886163, -3.7945508075688772, -3.4318103339880413, 6.6426270189221928, 2.125, -0.25, -8.1291651245988508, 2.6584936490538906, -1.075961894323342, -2.674038105676658, 3.1249999999999996, 1.75, -3.674038105676658, -0.075961894323341994, 3.1291651245988512, 3.0915063509461094}},
        {"ifft c64[3,6] (length 6)",
         "  x = c64[3,6] constant({{(-1.0, 1.75), (0.75, 0.375), (-0.125, 0.875), (0.0, -1.125), (1.875, 0.375), (1.25, 1.25)}, {(1.375, 1.625), (0.25, 1.5), (2.0, 1.875), (2.0, -1.5), (-1.5, 1.125), (-1.25, -0.125)}, {(-0.75, 0.75), (0.25, -0.875), (1.375, -2.0), (-0.125, -1.75), (2.0, 2.0), (-0.625, 1.625)}})\n"
         "  ROOT r = c64[3,6] fft(x), fft_type=IFFT, fft_length={6}\n"
         ,
         18, 1, {0.45833333333333331, 0.58333333333333326, -0.091706745596805916, 0.1495727484231506, -0.2807025116327328, 0.081089684279442992, -0.20833333333333331, 0.41666666666666663, -0.67763082170060041, -0.35192301761277633, -0.19995992106986074, 0.87126058491018266, 0.47916666666666663, 0.75, -0.57196838899800695, 1.1071045031536988, 0.47787129528143601, -0.63242513459481287, 0.14583333333333329, 0.79166666666666663, 0.73046203805189736, -0.055074865405187134, 0.11363505566467365, -0.33627116982036542, 0.35416666666666663, -0.041666666666666664, 0.52152752076647513, 0.51525105849101827, -0.61233968427944296, -0.012660315720556998, 0.52083333333333326, 0.29166666666666663, -0.17932698238722367, -0.44567301761277633, -1.3548608540998084, 0.44308227484231499}},
        {"2-d fft c64[2,4,6]",
         "  x = c64[2,4,6] constant({{{(-0.75, -0.75), (-0.25, -1.75), (-1.125, 1.125), (-1.5, -1.375), (1.5, 0.0), (0.75, -2.0)}, {(-1.75, -2.0), (-1.25, 1.375), (0.25, -2.0), (1.625, -0.125), (2.0, -0.25), (-1.125, -1.5)}, {(0.5, 0.625), (-1.875, 1.0), (-1.375, 2.0), (-1.25, -1.25), (-0.25, 1.75), (-0.625, -1.75)}, {(0.875, -1.5), (-0.125, 0.375), (-0.625, 1.5), (1.625, 1.625), (0.5, 1.0), (0.875, -2.0)}}, {{(1.0, -0.375), (-0.625, 1.25), (1.625, 0.125), (-2.0, -1.25), (-0.75, 0.75), (-1.375, -1.625)}, {(-2.0, 0.875), (2.0, -2.0), (-1.75, -0.625), (-0.125, -0.875), (1.375, 1.875), (0.75, 0.875)}, {(1.5, 0.625), (-1.875, 0.0), (0.0, -0.875), (-1.875, 1.5), (-1.25, 1.875), (1.375, -1.125)}, {(-1.75, -1.0), (0.375, -0.75), (-2.0, -0.125), (-0.75, -1.0), (1.75, -0.375), (-0.75, 2.0)}}})\n"
         "  ROOT r = c64[2,4,6] fft(x), fft_type=FFT, fft_length={4,6}\n"
         ,
         48, 1, {-3.375, -5.875, 3.3779627566946733, 0.47275403784438597, 7.786456405748563, -7.0020825622994254, 2.8749999999999996, 8.875, -6.286456405748563, -1.3729174377005746, -11.127962756694671, -16.847754037844382, -2, -3.75, 2.2512023679041784, 6.535576211353316, -8.8468738434491385, -0.33461431702997313, -7, -3.7499999999999996, -0.40312615655086204, 7.4596143170299731, 5.4987976320958207, 1.3394237886466849, -9.125, 1.125, 8.4497595264191645, 5.5445508075688767, -7.7218738434491385, -1.4709936490538906, 3.6250000000000004, 14.875, 0.72187384344913808, -1.9040063509461094, 7.8002404735808346, 2.0804491924311233, 9, -10.5, -6.0657849302036029, -7.2455127018922187, -4.9987976320958225, -0.071474596215561625, 3, 1.9999999999999996, -1.7512023679041779, -1.8035254037844384, -3.6842150697963962, -6.3794872981077804, -7.125, -0.25, -2.3411841774371798, 2.6728357377724805, -1.9733983848622456, -4.8313293868263703, 2.6250000000000009, 5.75, -8.9016016151377535, 0.58132938682637114, 10.216184177437178, -3.1728357377724801, 1.375, -6.5, 0.2063293868263707, -0.51105715851498701, 1.4832531754730551, -7.7006397208144133, 9.125, 4.9999999999999991, 1.2667468245269449, 1.8256397208144124, -5.2063293868263703, 3.386057158514987, -1.375, 2, 14.048715932167729, -7.9963928962874675, 14.872273090682715, 16.065140583185745, 14.375, 1, -3.7472730906827154, -10.565140583185745, -0.67371593216772752, 1.7463928962874671, -1.375, 0.25, 2.1303674925030287, -3.9907032302755088, -4.0077722283113841, -5.4040063509461103, -2.625, -3.2499999999999991, -2.4922277716886159, -4.9709936490538906, -5.8803674925030283, 9.865703230275507}},
        {"2-d ifft c64[2,4,6]",
         "  x = c64[2,4,6] constant({{{(-0.75, -0.75), (-0.25, -1.75), (-1.125, 1.125), (-1.5, -1.375), (1.5, 0.0), (0.75, -2.0)}, {(-1.75, -2.0), (-1.25, 1.375), (0.25, -2.0), (1.625, -0.125), (2.0, -0.25), (-1.125, -1.5)}, {(0.5, 0.625), (-1.875, 1.0), (-1.375, 2.0), (-1.25, -1.25), (-0.25, 1.75), (-0.625, -1.75)}, {(0.875, -1.5), (-0.125, 0.375), (-0.625, 1.5), (1.625, 1.625), (0.5, 1.0), (0.875, -2.0)}}, {{(1.0, -0.375), (-0.625, 1.25), (1.625, 0.125), (-2.0, -1.25), (-0.75, 0.75), (-1.375, -1.625)}, {(-2.0, 0.875), (2.0, -2.0), (-1.75, -0.625), (-0.125, -0.875), (1.375, 1.875), (0.75, 0.875)}, {(1.5, 0.625), (-1.875, 0.0), (0.0, -0.875), (-1.875, 1.5), (-1.25, 1.875), (1.375, -1.125)}, {(-1.75, -1.0), (0.375, -0.75), (-2.0, -0.125), (-0.75, -1.0), (1.75, -0.375), (-0.75, 2.0)}}})\n"
         "  ROOT r = c64[2,4,6] fft(x), fft_type=IFFT, fft_length={4,6}\n"
         ,
         48, 1, {-0.14062500000000006, -0.24479166666666669, -0.46366511486227802, -0.7019897515768494, -0.26193568357285679, -0.057204893237523938, 0.11979166666666663, 0.36979166666666663, 0.32443568357285679, -0.29175344009580939, 0.14074844819561139, 0.019698084910182739, 0.375, -0.4375, -0.15350896124151653, -0.26581197075449087, -0.072966765329340738, -0.075146891824351608, 0.12499999999999994, 0.08333333333333337, -0.20828323467065923, -0.0029781081756484196, -0.25274103875848342, -0.30189636257884245, -0.38020833333333331, 0.046875000000000014, 0.32501001973253474, 0.086685383017963413, 0.030078076810380744, -0.079333597956087895, 0.15104166666666669, 0.61979166666666663, -0.3217447434770474, -0.061291402043912105, 0.35207331360079852, 0.23102295031536993, -0.083333333333333315, -0.15625000000000003, 0.22911656800399255, 0.055809324526945148, -0.016796923189619249, 0.31081726320958225, -0.29166666666666663, -0.15624999999999994, -0.3686197434770474, -0.013942263209582195, 0.093800098662674053, 0.2723156754730548, -0.29687499999999994, -0.010416666666666664, 0.42567434072654908, -0.13220148907385335, -0.37090006729740643, 0.024222057784432122, 0.10937500000000008, 0.23958333333333331, -0.082224932702593567, -0.20130539111776544, -0.097549340726549139, 0.11136815574052, -0.057291666666666664, 0.010416666666666657, -0.24501531218762612, 0.41107096792814618, -0.10384282382035899, -0.20712473537724546, -0.109375, -0.13541666666666663, -0.16699050951297431, -0.2251669312894212, 0.088765312187626164, -0.16627930126147955, -0.057291666666666671, 0.083333333333333315, -0.028071497173655313, 0.072766370678644471, -0.15613637877844644, -0.44021419096607262, 0.59895833333333326, 0.041666666666666616, 0.61967804544511307, 0.66938085763273925, 0.58536316384032205, -0.33318303734531107, 0.057291666666666664, -0.27083333333333326, -0.21693039111776541, 0.14108571493812444, 0.052781117688622689, 0.07606832170060053, 0.38020833333333326, 0.20833333333333331, 0.061802215644710584, -0.32085998836726715, 0.0085970577844321355, -0.021294048271457755}},
        {"3-d fft c64[2,3,4]",
         "  x = c64[2,3,4] constant({{{(-0.5, -1.75), (1.875, 0.625), (0.0, 1.75), (-0.625, 0.75)}, {(1.75, 1.625), (-0.25, 1.125), (1.125, 0.25), (-0.75, 1.75)}, {(2.0, -0.125), (1.0, -1.5), (1.5, 0.25), (-1.875, 0.5)}}, {{(-1.625, -1.375), (-1.75, -1.5), (0.125, 0.625), (-0.375, -0.25)}, {(2.0, -0.125), (-1.0, 1.125), (-1.375, 0.75), (1.375, 1.625)}, {(-0.875, -1.375), (1.0, 1.125), (-0.875, 0.125), (0.25, -1.875)}}})\n"
         "  ROOT r = c64[2,3,4] fft(x), fft_type=FFT, fft_length={2,3,4}\n"
         ,
         24, 1, {2.125, 4.125, 0.75, -9.75, 4.375, -2.875, 3.75, -4, 4.1512794416288248, -4.399519052838329, 1.0074500548024536, -6.2532849302036029, -7.122595264191645, -1.5065698604072062, -5.8938293868263703, -9.4338928962874675, -14.901279441628825, -3.100480947161671, -12.632450054802455, -3.8717150697963967, -0.62740473580835543, 3.2565698604072062, -0.48117061317362952, 0.30889289628746752, 8.375, 6.375, -5, -7, 8.625, 0.375, 3, 10.75, 2.5915063509461103, 4.573557158514987, 6.3872595264191645, -5.9697912811497131, -8.3080127018922187, -0.50240473580835543, 0.31129763209582251, 5.223956405748563, 2.1584936490538897, 0.67644284148501299, 5.7377404735808355, -3.1552087188502873, -7.4419872981077813, -6.997595264191645, -2.9362976320958225, -8.848956405748563}},
        {"rfft f32[3,10]",
         "  x = f32[3,10] constant({{-1.75, -0.625, 0.625, -1.375, 0.125, 2.0, -1.5, -1.5, 1.875, -1.0}, {1.5, -0.625, 1.0, -1.75, 0.5, 1.5, -0.625, 0.5, -1.125, -1.375}, {-2.0, 0.0, 0.125, -1.75, -1.125, 0.5, -0.5, -1.125, -2.0, -1.875}})\n"
         "  ROOT r = c64[3,6] fft(x), fft_type=RFFT, fft_length={10}\n"
         ,
         18, 1, {-3.125, 0, -2.2912879038283944, -0.10563192375289854, -0.37366961023423695, 1.9970253672710923, -8.021212096171606, -2.5633714414193394, 2.5611696102342374, -0.57297114454024445, 1.875, 0, -0.5, 0, -1.1692627457812104, -0.9832152835114929, 3.4557372542187892, -2.2149142851688879, -0.33073725421878919, -1.856704124589972, 4.2942627457812108, 4.3812917284009743, 3, 0, -9.75, 0, -2.3932372542187896, -2.1613163398083213, 1.2612712429686845, -3.9940507345421854, -3.2317627457812104, -0.30714276693023246, -0.13627124296868454, 1.1459422890804891, -1.25, 0}},
        {"irfft(rfft) f32[3,10] round trip",
         "  x = f32[3,10] constant({{-1.75, -0.625, 0.625, -1.375, 0.125, 2.0, -1.5, -1.5, 1.875, -1.0}, {1.5, -0.625, 1.0, -1.75, 0.5, 1.5, -0.625, 0.5, -1.125, -1.375}, {-2.0, 0.0, 0.125, -1.75, -1.125, 0.5, -0.5, -1.125, -2.0, -1.875}})\n"
         "  f = c64[3,6] fft(x), fft_type=RFFT, fft_length={10}\n"
         "  ROOT r = f32[3,10] fft(f), fft_type=IRFFT, fft_length={10}\n"
         ,
         30, 0, {-1.75, -0.625, 0.625, -1.375, 0.125, 2, -1.5, -1.5, 1.875, -1, 1.5, -0.625, 1, -1.75, 0.5, 1.5, -0.625, 0.5, -1.125, -1.375, -2, 0, 0.125, -1.75, -1.125, 0.5, -0.5, -1.125, -2, -1.875}},
        {"irfft c64[2,6] not Hermitian (DC, Nyquist imaginary parts)",
         "  x = c64[2,6] constant({{(0.625, -1.625), (-1.625, -1.5), (1.375, -1.125), (0.25, -0.75), (-1.0, 1.625), (0.625, -0.375)}, {(-1.375, -1.625), (-0.75, 1.75), (0.0, 0.25), (0.625, -1.625), (-1.5, -1.75), (-0.625, -1.75)}})\n"
         "  ROOT r = f32[2,10] fft(x), fft_type=IRFFT, fft_length={10}\n"
         ,
         20, 0, {-0.075000000000000011, 0.31035326174086553, 0.33832977138770115, -0.38759758195455102, 0.94620098917936457, 0.35000000000000003, 0.35412790125804611, 0.10079418307956159, -0.93865866182511182, -0.37354986286587605, -0.52500000000000002, 0.26926596684054094, -1.3263438027818797, -0.18186636923980382, 0.14788128877154622, -0.34999999999999998, 0.25748825475964343, 0.14141551952105638, 0.44597425925069017, -0.25381511712179355}},
        {"irfft c64[2,3] odd length 5",
         "  x = c64[2,3] constant({{(1.75, -0.375), (0.25, 0.875), (0.75, 1.375)}, {(1.875, -1.75), (-0.375, 1.0), (1.625, 1.25)}})\n"
         "  ROOT r = f32[2,5] fft(x), fft_type=IRFFT, fft_length={5}\n"
         ,
         10, 0, {0.75, -0.5179550683391535, 0.67915964453495836, 0.044447153215020664, 0.79434827058917445, 0.875, -0.87152882816425592, 0.93762775273054544, 0.45679943826937053, 0.47710163716434001}},
        {"2-d rfft f32[2,4,6]",
         "  x = f32[2,4,6] constant({{{1.875, 0.75, 0.0, -1.5, 1.125, -0.125}, {1.25, -1.875, -0.625, 1.25, 0.5, 0.875}, {0.375, 1.25, 1.375, 1.125, 0.625, -1.0}, {-1.75, 1.25, -0.625, -1.0, -2.0, -1.5}}, {{-1.875, -0.5, -0.875, 0.0, 0.25, -0.875}, {0.125, 0.375, 0.75, 0.375, -1.875, -1.125}, {1.25, 0.5, -0.875, -0.625, 1.75, 1.0}, {-0.5, -0.875, -1.5, 1.25, 0.5, -0.375}}})\n"
         "  ROOT r = c64[2,4,4] fft(x), fft_type=RFFT, fft_length={4,6}\n"
         ,
         32, 1, {1.625, 0, 1.5000000000000002, -2.5980762113533165, 1.6249999999999998, -2.8145825622994254, 2.625, 0, -1.625, -7, 11.678203230275509, 3.6895825622994254, 1.7230762113533162, -4.8080127018922187, 2.875, -4, 10.125, 0, 1.5000000000000002, -2.1650635094610968, -1.8750000000000002, -3.247595264191645, 7.125, 0, -1.625, 7, -2.1782032302755088, 1.9395825622994254, -3.473076211353316, 3.9419872981077808, 2.875, 4, -3.75, 0, -1.9999999999999998, 1.9485571585149866, 1.8750000000000002, -3.4641016151377544, -2, 0, -6.875, -0.125, -10.174918300071905, -3.8693103339880413, 1.9608166849341513, 0.9787658773652741, -2.375, -0.875, 2, 0, 1.8749999999999998, 4.7631397208144133, -4.75, -2.8145825622994263, 2.25, 0, -6.875, 0.125, 1.2999183000719059, -0.24431033398804192, -2.5858166849341515, 0.10376587736527454, -2.375, 0.875}},
        {"2-d irfft(rfft) f32[2,4,6] round trip",
         "  x = f32[2,4,6] constant({{{1.875, 0.75, 0.0, -1.5, 1.125, -0.125}, {1.25, -1.875, -0.625, 1.25, 0.5, 0.875}, {0.375, 1.25, 1.375, 1.125, 0.625, -1.0}, {-1.75, 1.25, -0.625, -1.0, -2.0, -1.5}}, {{-1.875, -0.5, -0.875, 0.0, 0.25, -0.875}, {0.125, 0.375, 0.75, 0.375, -1.875, -1.125}, {1.25, 0.5, -0.875, -0.625, 1.75, 1.0}, {-0.5, -0.875, -1.5, 1.25, 0.5, -0.375}}})\n"
         "  f = c64[2,4,4] fft(x), fft_type=RFFT, fft_length={4,6}\n"
         "  ROOT r = f32[2,4,6] fft(f), fft_type=IRFFT, fft_length={4,6}\n"
         ,
         48, 0, {1.875, 0.75, 0, -1.5, 1.125, -0.125, 1.25, -1.875, -0.625, 1.25, 0.5, 0.875, 0.375, 1.25, 1.375, 1.125, 0.625, -1, -1.75, 1.25, -0.625, -1, -2, -1.5, -1.875, -0.5, -0.875, 0, 0.25, -0.875, 0.125, 0.375, 0.75, 0.375, -1.875, -1.125, 1.25, 0.5, -0.875, -0.625, 1.75, 1, -0.5, -0.875, -1.5, 1.25, 0.5, -0.375}},
        {"2-d irfft c64[2,4,4] not Hermitian",
         "  x = c64[2,4,4] constant({{{(0.75, -0.5), (0.25, 0.625), (0.125, 1.5), (0.75, -0.625)}, {(1.125, 0.0), (0.125, 1.0), (-0.375, -1.25), (-1.0, -0.5)}, {(-0.875, -1.25), (2.0, -1.375), (-1.25, 0.75), (-1.625, 1.5)}, {(0.5, -1.5), (-0.75, 0.75), (-1.625, 0.75), (0.25, 1.0)}}, {{(1.0, 0.875), (-2.0, 0.25), (0.0, -1.625), (-1.375, 1.125)}, {(0.25, -1.25), (1.25, -0.25), (1.25, 1.875), (1.125, 0.25)}, {(-0.875, -0.875), (0.625, -1.75), (0.625, -1.0), (1.625, 0.25)}, {(0.75, 1.5), (1.0, 1.25), (-1.625, -1.125), (-0.875, 0.875)}}})\n"
         "  ROOT r = f32[2,4,6] fft(x), fft_type=IRFFT, fft_length={4,6}\n"
         ,
         48, 0, {-0.13020833333333331, 0.12966084496606614, 0.11141825440319408, -0.265625, 0.0031650789301392495, 0.52658915503393378, 0.28125, -0.73203115362076154, 0.046227314307384679, 0.29166666666666663, 0.17252268569261531, -0.028385513045905086, 0.234375, -0.0024171959121757993, 0.1445111141556919, -0.234375, -0.61326111415569184, 0.033667195912175776, -0.010416666666666666, 0.012186176886227158, 0.13793405990419061, 0.16666666666666663, 0.37248260676247602, 0.10239715644710617, 0.16145833333333331, 0.22348419449900347, -0.078398744183633587, -0.026041666666666657, 0.12006541085030026, -0.1193175278323368, -0.30208333333333331, 0.071073806914168869, 0.29166666666666663, 0.08333333333333337, 0.29166666666666663, 0.72059285975249776, -0.25520833333333331, 0.19482493726946473, 0.00976898097405135, 0.34895833333333331, 0.13606435235928196, -0.65315827060279796, -0.33333333333333331, -0.029954628614769364, -0.49346944748902521, 0.65625, 0.26430278082235859, -0.28254537138523056}},
        {"rfft f64[12] to c128",
         "  x = f64[12] constant({0.625, 1.25, 0.0, 0.0, -0.375, 1.625, 0.125, -1.625, 0.0, 1.5, 1.375, -0.5})\n"
         "  ROOT r = c128[7] fft(x), fft_type=RFFT, fft_length={12}\n"
         ,
         7, 1, {4, 0, 2.024519052838329, 0.5155444566227676, -0.87499999999999989, 2.1650635094610964, -1.25, -6.5, 1.375, 0.43301270189221919, 0.725480947161671, -2.5155444566227674, -0.5, 0}},
        {"complex multiply, divide, exp, abs",
         "  u = c64[5] constant({(1.625, -0.125), (-1.625, -0.5), (1.0, -0.25), (0.5, -1.0), (-2.0, 1.5)})\n"
         "  v = c64[5] constant({(1.375, -0.375), (-1.5, -0.875), (1.125, 0.125), (0.5, -1.5), (-1.25, 0.0)})\n"
         "  m = c64[5] multiply(u, v)\n"
         "  d = c64[5] divide(m, v)\n"
         "  e = c64[5] exponential(u)\n"
         "  s = c64[5] add(d, e)\n"
         "  a = f32[5] abs(s)\n"
         "  re = f32[5] real(s)\n"
         "  im = f32[5] imag(s)\n"
         "  t = f32[5] add(re, im)\n"
         "  ROOT r = f32[5] multiply(a, t)\n"
         ,
         5, 0, {39.607890286179689, -3.211388087900414, 10.164658615718119, -2.7533808850482453, -0.91553620840205319}},
        {"complex(), convert, dot, reduce sum",
         "  p = f32[2,3] constant({{-1.625, -1.5, 1.5}, {0.0, -0.875, 1.5}})\n"
         "  q = f32[2,3] constant({{-0.625, -1.375, 1.625}, {-2.0, 1.875, -1.75}})\n"
         "  z = c64[2,3] complex(p, q)\n"
         "  w = c64[3,4] constant({{(1.25, 1.25), (-0.125, -0.375), (-1.5, -1.875), (2.0, -1.25)}, {(-0.25, 1.5), (-1.875, 0.875), (0.875, 1.625), (2.0, 0.125)}, {(-1.375, -1.5), (0.125, -0.875), (1.75, -0.875), (-1.625, -1.0)}})\n"
         "  d = c64[2,4] dot(z, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
         "  k = c64[] constant((0, 0))\n"
         "  s = c64[2] reduce(d, k), dimensions={1}, to_apply=add\n"
         "  one = f32[2] constant({1, -2})\n"
         "  c = c64[2] convert(one)\n"
         "  ROOT r = c64[2] multiply(s, c)\n"
         ,
         2, 1, {5.71875, -12.78125, 44.03125, 19.71875}},
        /* scatter on complex values: a sum, or the update put in place (an FNO's kept modes) */
        {"scatter-add c64[4]",
         "  x = c64[4] constant({(1, 1), (2, 2), (3, 3), (4, 4)})\n  i = s32[2,1] constant({{1}, {3}})\n"
         "  u = c64[2] constant({(0.5, -1), (1, 0.25)})\n"
         "  ROOT r = c64[4] scatter(x, i, u), update_window_dims={}, inserted_window_dims={0}, "
         "scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=add\n",
         4, 1, {1, 1, 2.5, 1, 3, 3, 5, 4.25}},
        {"scatter-set c64[4]",
         "  x = c64[4] constant({(1, 1), (2, 2), (3, 3), (4, 4)})\n  i = s32[2,1] constant({{1}, {3}})\n"
         "  u = c64[2] constant({(0.5, -1), (1, 0.25)})\n"
         "  ROOT r = c64[4] scatter(x, i, u), update_window_dims={}, inserted_window_dims={0}, "
         "scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=set\n",
         4, 1, {1, 1, 0.5, -1, 3, 3, 1, 0.25}},
        /* a complex product (jnp.prod of complex values: an FFT norm's
         * factor); once refused, which left AFNO pairs unexecuted */
        {"reduce product c64[3]",
         "  x = c64[3] constant({(1, 1), (2, -1), (0.5, 2)})\n  k = c64[] constant((1, 0))\n"
         "  ROOT r = c64[] reduce(x, k), dimensions={0}, to_apply=mul\n",
         1, 1, {-0.5, 6.5}},
    };
    for (size_t c = 0; c < ARRAY_LEN(cases); c++) {
        t_case("interp fft-1.%zu %s", c + 1, cases[c].name);
        strbuf text, err;
        sb_init(&text);
        sb_init(&err);
        sb_printf(&text, "HloModule m\n\nadd {\n  a = c64[] parameter(0)\n  b = c64[] parameter(1)\n"
                         "  ROOT s = c64[] add(a, b)\n}\n\nset {\n  a = c64[] parameter(0)\n  ROOT b = c64[] parameter(1)\n}\n\n"
                         "mul {\n  a = c64[] parameter(0)\n  b = c64[] parameter(1)\n  ROOT m = c64[] multiply(a, b)\n}\n\n"
                         "ENTRY e {\n%s}\n", cases[c].body);
        interp_val *out[1] = {NULL};
        int st = run(text.s, 1, 1, NULL, out, &err);
        if (CHECK_MSG(st == 0, "status %d: %s", st, err.s ? err.s : "") &&
            CHECK_MSG(out[0]->n == cases[c].n && !out[0]->im == !cases[c].cx, "%lld elements, complex %d",
                      (long long)out[0]->n, out[0]->im != NULL)) {
            const double *w = cases[c].want;
            int parts = cases[c].cx ? 2 : 1;
            double scale = 0;
            for (int k = 0; k < parts * cases[c].n; k++) scale = fmax(scale, fabs(w[k]));
            for (int k = 0; k < cases[c].n; k++) {
                double re = out[0]->f[k], im = out[0]->im ? out[0]->im[k] : 0;
                double wr = w[parts * k], wi = parts == 2 ? w[2 * k + 1] : 0;
                CHECK_MSG(fabs(re - wr) <= 1e-6 * scale && fabs(im - wi) <= 1e-6 * scale,
                          "element %d: (%.9g, %.9g) != (%.9g, %.9g)", k, re, im, wr, wi);
            }
        }
        interp_val_free(out[0]);
        sb_free(&text);
        sb_free(&err);
    }
    /* Complex values only where an op interprets both parts. */
    t_case("interp fft-2.1 a complex sine is refused");
    {
        interp_val *out[1] = {NULL};
        strbuf err;
        sb_init(&err);
        const char *text = "HloModule m\nENTRY e {\n  x = c64[2] constant({(1, 2), (3, 4)})\n  ROOT r = c64[2] sine(x)\n}\n";
        CHECK_EQ(run(text, 1, 1, NULL, out, &err), INTERP_EUNSUPPORTED);
        CHECK_CONTAINS(err.s, "on complex values");
        sb_reset(&err);
        t_case("interp fft-2.2 a complex to real convert is refused");
        text = "HloModule m\nENTRY e {\n  x = c64[2] constant({(1, 2), (3, 4)})\n  ROOT r = f32[2] convert(x)\n}\n";
        CHECK_EQ(run(text, 1, 1, NULL, out, &err), INTERP_EUNSUPPORTED);
        CHECK_CONTAINS(err.s, "not defined for complex values");
        sb_free(&err);
    }
    /* Across devices: a complex sum all-reduce and all-gather keep both parts
     * (device d holds 10·d + e; the imaginary parts are twice the real). */
    const char *coll = "HloModule m, num_partitions=2\n\naddc {\n  a = c64[] parameter(0)\n  b = c64[] parameter(1)\n"
                       "  ROOT s = c64[] add(a, b)\n}\n\nENTRY e {\n  p = f32[2] parameter(0)\n  two = f32[2] add(p, p)\n"
                       "  z = c64[2] complex(p, two)\n  ar = c64[2] all-reduce(z), channel_id=1, replica_groups={{0,1}}, "
                       "use_global_device_ids=true, to_apply=addc\n  ag = c64[4] all-gather(ar), channel_id=2, "
                       "replica_groups={{0,1}}, dimensions={0}, use_global_device_ids=true\n  ROOT r = f32[4] imag(ag)\n}\n";
    static const double wcoll[4] = {20, 24, 20, 24};
    expect("interp fft-2.3 complex all-reduce and all-gather", coll, 1, 2, fill_dev, 1, wcoll, 4);
    t_case("interp fft-2.4 constant folding refuses complex values");
    {
        hlo_module *m = parse("HloModule m\nENTRY e {\n  x = f32[4] parameter(0)\n"
                              "  ROOT r = c64[3] fft(x), fft_type=RFFT, fft_length={4}\n}\n");
        interp_val *x = interp_val_new(DT_F32, 1, (int64_t[]){4});
        const hlo_comp *e = graph_entry(m);
        CHECK(interp_eval_instr(m, &e->instrs[e->root], &x, NULL) == NULL);
        CHECK(interp_val_new(DT_C64, 1, (int64_t[]){4}) == NULL);
        interp_val_free(x);
        graph_free(m);
    }
    t_case("interp fft-2.5 complex entry parameters (program inputs)");
    {
        /* imag((a+bi)²) = 2ab: both random parts reach the program */
        hlo_module *m = parse("HloModule m\nENTRY e {\n  z = c64[4] parameter(0)\n  c = c64[4] multiply(z, z)\n"
                              "  ROOT r = f32[4] imag(c)\n}\n");
        interp_val *z = interp_val_new_input(DT_C64, 1, (int64_t[]){4});
        CHECK(z && z->f && z->im);
        interp_rng r;
        interp_rng_seed(&r, 7);
        if (z) interp_val_fill_random(z, &r);
        bool im_set = false;
        for (int64_t k = 0; z && k < 4; k++) im_set |= z->im[k] != 0 && fabs(z->im[k]) < 1 && (float)z->im[k] == z->im[k];
        CHECK_MSG(im_set, "no imaginary part drawn in [-1, 1) as f32");
        interp_val *args[1] = {z}, *out = NULL;
        interp_val **argv[1] = {args};
        CHECK_EQ(interp_run(m, &(interp_config){0}, (interp_val **const *)argv, &out, NULL), INTERP_OK);
        for (int64_t k = 0; out && z && k < 4; k++) /* imag(z²) = 2ab, rounded to f32 */
            CHECK_MSG(fabs(out->f[k] - 2 * z->f[k] * z->im[k]) < 1e-6, "element %lld: %g", (long long)k, out->f[k]);
        interp_val_free(out);
        interp_val_free(z);
        graph_free(m);
    }
}

static void test_malformed(void) {
    static const struct {
        const char *what, *body, *needle;
    } cases[] = {
        /* (operands of other dims than an elementwise result: refused by
         * the readers now, test_pathological) */
        {"elementwise types", "  a = f32[4] parameter(0)\n  b = s32[4] parameter(1)\n  ROOT r = f32[4] add(a, b)\n",
         "element types"},
        {"transpose dims", "  a = f32[4,3] parameter(0)\n  ROOT r = f32[4,3] transpose(a), dimensions={1,0}\n", "permutation"},
        {"slice bounds", "  a = f32[4] parameter(0)\n  ROOT r = f32[6] slice(a), slice={[0:6]}\n", "outside the operand"},
        {"dot result", "  a = f32[2,3] parameter(0)\n  b = f32[3,5] parameter(1)\n"
                       "  ROOT r = f32[5,2] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n",
         "result shape"},
        {"dot batch sizes", "  a = f32[2,3] parameter(0)\n  b = f32[4,3] parameter(1)\n"
                            "  ROOT r = f32[2] dot(a, b), lhs_batch_dims={0}, lhs_contracting_dims={1}, rhs_batch_dims={0}, "
                            "rhs_contracting_dims={1}\n",
         "result shape"},
        {"gather batch dims", "  t = f32[8,4] parameter(0)\n  i = s32[3,1] parameter(1)\n"
                              "  ROOT r = f32[5,4] gather(t, i), offset_dims={1}, collapsed_slice_dims={0}, start_index_map={0}, "
                              "index_vector_dim=1, slice_sizes={1,4}\n",
         "batch dim"},
        {"gather slice size", "  t = f32[8,4] parameter(0)\n  i = s32[3,1] parameter(1)\n"
                              "  ROOT r = f32[3,6] gather(t, i), offset_dims={1}, collapsed_slice_dims={0}, start_index_map={0}, "
                              "index_vector_dim=1, slice_sizes={1,6}\n",
         "a slice size"},
        {"gather batching size", "  t = f32[3,4] parameter(0)\n  i = s32[5,1] parameter(1)\n"
                                 "  ROOT r = f32[5] gather(t, i), offset_dims={}, collapsed_slice_dims={1}, start_index_map={1}, "
                                 "operand_batching_dims={0}, start_indices_batching_dims={0}, index_vector_dim=1, "
                                 "slice_sizes={1,1}\n",
         "batching dim differs"},
        {"reshape count", "  a = f32[2,3] parameter(0)\n  ROOT r = f32[0,3] reshape(a)\n", "reshape of 6 elements into 0"},
        {"concatenate dims", "  a = f32[2,3] parameter(0)\n  b = f32[2,4] parameter(1)\n"
                             "  ROOT r = f32[4,3] concatenate(a, b), dimensions={0}\n",
         "cannot concatenate"},
        {"pad value type", "  a = f32[2] parameter(0)\n  v = s32[] parameter(1)\n  ROOT r = f32[4] pad(a, v), padding=1_1\n",
         "element types differ"},
        {"select result type", "  p = pred[2] parameter(0)\n  a = s32[2] parameter(1)\n  b = s32[2] parameter(2)\n"
                               "  ROOT r = f32[2] select(p, a, b)\n",
         "element type differs"},
        {"compare result", "  a = f32[2] parameter(0)\n  b = f32[2] parameter(1)\n  ROOT r = f32[2] compare(a, b), direction=LT\n",
         "result is not pred"},
        {"reduce init", "  a = f32[4,2] parameter(0)\n  i = f32[2] parameter(1)\n"
                        "  ROOT r = f32[2] reduce(a, i), dimensions={0}, to_apply=add\n",
         "not one value"},
        {"broadcast type", "  a = s32[2] parameter(0)\n  ROOT r = f32[2,3] broadcast(a), dimensions={0}\n", "element type changes"},
        {"dynamic-slice window", "  a = f32[4] parameter(0)\n  i = s32[] parameter(1)\n"
                                 "  ROOT r = f32[6] dynamic-slice(a, i), dynamic_slice_sizes={6}\n",
         "window inside the operand"},
        {"dynamic-update-slice update", "  a = f32[4] parameter(0)\n  u = f32[5] parameter(1)\n  i = s32[] parameter(2)\n"
                                        "  ROOT r = f32[4] dynamic-update-slice(a, u, i)\n",
         "update inside the operand"},
#define SCATTER(up, uwd, sdims) \
    "  o = f32[4,3] parameter(0)\n  i = s32[2,1] parameter(1)\n  u = f32[" up "] parameter(2)\n" \
    "  ROOT r = f32[4,3] scatter(o, i, u), update_window_dims={" uwd "}, inserted_window_dims={0}, " \
    "scatter_dims_to_operand_dims={" sdims "}, index_vector_dim=1, to_apply=add\n"
        {"scatter more updates than indices", SCATTER("50,3", "1", "0"), "differs from the indices'"},
        {"scatter window dims out of order",
         "  o = f32[4,3] parameter(0)\n  i = s32[2,1] parameter(1)\n  u = f32[2,4,3] parameter(2)\n"
         "  ROOT r = f32[4,3] scatter(o, i, u), update_window_dims={2,1}, inserted_window_dims={}, "
         "scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=add\n",
         "update_window_dims out of range or order"},
        {"scatter index vector", SCATTER("2,3", "1", "0,1,0,1"), "does not match the index vectors"},
        {"scatter window larger than the operand", SCATTER("2,5", "1", "0"), "exceeds the operand"},
#undef SCATTER
        {"reduce-window larger than the operand", "  a = f32[4] parameter(0)\n  z = f32[] constant(0)\n"
                                                  "  ROOT r = f32[2] reduce-window(a, z), window={size=9}, to_apply=add\n",
         "does not give the result's dims"},
        {"reduce-window dilation 0", "  a = f32[4] parameter(0)\n  z = f32[] constant(0)\n"
                                     "  ROOT r = f32[3] reduce-window(a, z), window={size=2 lhs_dilate=0}, to_apply=add\n",
         "does not give the result's dims"},
        /* (found by the mutator: the padded size overflowed, UBSan) */
        {"reduce-window padding past 2^63", "  a = f32[4] parameter(0)\n  z = f32[] constant(0)\n"
                                            "  ROOT r = f32[2] reduce-window(a, z), window={size=1 pad=0_9223372036854775807}, "
                                            "to_apply=add\n",
         "does not give the result's dims"},
        {"convolution padding past 2^63", "  a = f32[1,4,1] parameter(0)\n  k = f32[1,1,1] parameter(1)\n"
                                          "  ROOT r = f32[1,2,1] convolution(a, k), window={size=1 pad=0_9223372036854775807}, "
                                          "dim_labels=b0f_0io->b0f\n",
         "do not fit"},
        {"reduce-window init", "  a = f32[4] parameter(0)\n  z = f32[2] parameter(1)\n"
                               "  ROOT r = f32[3] reduce-window(a, z), window={size=2}, to_apply=add\n",
         "not one value"},
        {"pad interior", "  a = f32[4] parameter(0)\n  z = f32[] constant(0)\n  ROOT r = f32[1] pad(a, z), padding=0_0_-1\n",
         "does not give the result's dims"},
        {"pad result", "  a = f32[4] parameter(0)\n  z = f32[] constant(0)\n  ROOT r = f32[9] pad(a, z), padding=1_1\n",
         "does not give the result's dims"},
        {"fft type", "  a = c64[4] constant({(1, 0), (2, 0), (3, 0), (4, 0)})\n"
                     "  ROOT r = c64[4] fft(a), fft_type=DCT, fft_length={4}\n", "not FFT, IFFT, RFFT or IRFFT"},
        {"fft length", "  a = c64[4] constant({(1, 0), (2, 0), (3, 0), (4, 0)})\n"
                       "  ROOT r = c64[4] fft(a), fft_type=FFT, fft_length={8}\n", "do not match fft_length"},
        {"fft without length", "  a = c64[4] constant({(1, 0), (2, 0), (3, 0), (4, 0)})\n"
                               "  ROOT r = c64[4] fft(a), fft_type=FFT\n", "1 to 3 entries"},
        {"fft of four dims", "  a = c64[1,1,1,1] constant({{{{(1, 0)}}}})\n"
                             "  ROOT r = c64[1,1,1,1] fft(a), fft_type=FFT, fft_length={1,1,1,1}\n", "1 to 3 entries"},
        {"fft zero length", "  a = f32[0] constant({})\n  ROOT r = c64[1] fft(a), fft_type=RFFT, fft_length={0}\n",
         "below 1"},
        {"rfft of complex", "  a = c64[4] constant({(1, 0), (2, 0), (3, 0), (4, 0)})\n"
                            "  ROOT r = c64[3] fft(a), fft_type=RFFT, fft_length={4}\n", "do not fit the fft_type"},
        {"rfft result dims", "  a = f32[4] parameter(0)\n  ROOT r = c64[4] fft(a), fft_type=RFFT, fft_length={4}\n",
         "do not match fft_length"},
        {"irfft operand dims", "  a = c64[4] constant({(1, 0), (2, 0), (3, 0), (4, 0)})\n"
                               "  ROOT r = f32[4] fft(a), fft_type=IRFFT, fft_length={4}\n", "do not match fft_length"},
        {"irfft to c64", "  a = c64[3] constant({(1, 0), (2, 0), (3, 0)})\n"
                         "  ROOT r = c64[4] fft(a), fft_type=IRFFT, fft_length={4}\n", "do not fit the fft_type"},
        {"complex literal count", "  ROOT a = c64[3] constant({(1, 0), (2, 0)})\n", "one (re, im) pair per element"},
        {"sort operand shapes", "  k = f32[4] parameter(0)\n  v = f32[2] parameter(1)\n"
                                "  ROOT r = (f32[4], f32[2]) sort(k, v), dimensions={0}, to_apply=lt\n",
         "shape differs"},
    };
    t_case("interp malformed: a device twice in one replica group");
    {
        const char *text = "HloModule m, num_partitions=4\n\nadd {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n"
                           "  ROOT s = f32[] add(a, b)\n}\n\nENTRY e {\n  p = f32[2] parameter(0)\n"
                           "  ROOT r = f32[2] all-reduce(p), channel_id=1, replica_groups={{0,1},{3,3}}, "
                           "use_global_device_ids=true, to_apply=add\n}\n";
        expect_run_error(text, 1, 4, NULL, "is in two groups");
    }
    for (size_t k = 0; k < ARRAY_LEN(cases); k++) {
        t_case("interp malformed: %s", cases[k].what);
        char text[1024];
        snprintf(text, sizeof text,
                 "HloModule m\n\nadd {\n  x = f32[] parameter(0)\n  y = f32[] parameter(1)\n  ROOT s = f32[] add(x, y)\n}\n\n"
                 "lt {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  c = f32[] parameter(2)\n  d = f32[] parameter(3)\n"
                 "  ROOT l = pred[] compare(a, b), direction=LT\n}\n\n"
                 "ENTRY e {\n%s}\n",
                 cases[k].body);
        expect_run_error(text, 1, 1, NULL, cases[k].needle);
    }
}

/* Batch normalization as XLA expands it, on values worked out by hand:
 * x = [[1,2],[3,4]], features along dim 1: feature 0 holds {1,3} (mean 2,
 * variance 1), feature 1 {2,4} (mean 3, variance 1); with scale (1,2), offset
 * (0,1), epsilon 0 the result is [[-1,-1],[1,3]]; the gradient of sum(y·dy)
 * for dy = [[1,0],[0,0]] is what the expansion gives (checked below). */
static void bn_fill(int64_t d, uint32_t k, interp_val *v) {
    (void)d;
    static const double xs[4] = {1, 2, 3, 4}, sc[2] = {1, 2}, of[2] = {0, 1}, dy[4] = {1, 0, 0, 0};
    const double *src = k == 0 ? xs : k == 1 ? sc : k == 2 ? of : dy;
    for (int64_t e = 0; e < v->n; e++) v->f[e] = src[e];
}

static void bn_grad_fill(int64_t d, uint32_t k, interp_val *v) {
    (void)d;
    static const double xs[4] = {1, 2, 3, 4}, sc[2] = {1, 2}, mn[2] = {2, 3}, va[2] = {1, 1}, dy[4] = {1, 0, 0, 0};
    const double *src[5] = {xs, sc, mn, va, dy};
    for (int64_t e = 0; e < v->n; e++) v->f[e] = src[k][e];
}

static void test_batch_norm(void) {
    t_case("interp batch-norm-training by hand");
    const char *tr = "HloModule bn\nENTRY e {\n  x = f32[2,2] parameter(0)\n  s = f32[2] parameter(1)\n  o = f32[2] parameter(2)\n"
                     "  ROOT b = (f32[2,2], f32[2], f32[2]) batch-norm-training(x, s, o), epsilon=0, feature_index=1\n}\n";
    interp_val *out = NULL;
    strbuf err;
    sb_init(&err);
    if (CHECK_MSG(run(tr, 1, 1, bn_fill, &out, &err) == INTERP_OK, "%s", err.s ? err.s : "") && out->nelems == 3) {
        static const double want[4] = {-1, -1, 1, 3};
        for (int k = 0; k < 4; k++) CHECK_MSG(fabs(out->elems[0]->f[k] - want[k]) < 1e-6, "y[%d] = %g", k, out->elems[0]->f[k]);
        CHECK(out->elems[1]->f[0] == 2 && out->elems[1]->f[1] == 3 && out->elems[2]->f[0] == 1 && out->elems[2]->f[1] == 1);
    }
    interp_val_free(out);
    t_case("interp batch-norm-grad by hand");
    /* feature 0: c = (-1, 1), r = 1, N = 2, dy = (1, 0): Σdy = 1, Σdy·c = -1;
     * dx = 1·1/2·(2·dy - 1 - c·(-1)) = (1/2)(2-1-1, 0-1+1) = (0, 0); dscale = -1,
     * doffset = 1. Feature 1: dy = 0 everywhere, all zero. */
    const char *gr = "HloModule bg\nENTRY e {\n  x = f32[2,2] parameter(0)\n  s = f32[2] parameter(1)\n  m = f32[2] parameter(2)\n"
                     "  v = f32[2] parameter(3)\n  dy = f32[2,2] parameter(4)\n"
                     "  ROOT g = (f32[2,2], f32[2], f32[2]) batch-norm-grad(x, s, m, v, dy), epsilon=0, feature_index=1\n}\n";
    out = NULL;
    sb_reset(&err);
    if (CHECK_MSG(run(gr, 1, 1, bn_grad_fill, &out, &err) == INTERP_OK, "%s", err.s ? err.s : "") && out->nelems == 3) {
        for (int k = 0; k < 4; k++) CHECK_MSG(fabs(out->elems[0]->f[k]) < 1e-6, "dx[%d] = %g", k, out->elems[0]->f[k]);
        CHECK(out->elems[1]->f[0] == -1 && out->elems[1]->f[1] == 0 && out->elems[2]->f[0] == 1 && out->elems[2]->f[1] == 0);
    }
    interp_val_free(out);
    sb_free(&err);
}

/* x = [[1,2],[3,4]], features along dim 1, scale (1,2), offset (0,1), mean
 * (2,3), var (3,3), epsilon 1 so sqrt(var + epsilon) = 2: feature 0 gives
 * (1-2)/2 = -0.5 and (3-2)/2 = 0.5; feature 1 gives (2-3)/2·2+1 = 0 and
 * (4-3)/2·2+1 = 2. */
static void bn_inf_fill(int64_t d, uint32_t k, interp_val *v) {
    (void)d;
    static const double xs[4] = {1, 2, 3, 4}, sc[2] = {1, 2}, of[2] = {0, 1}, mn[2] = {2, 3}, va[2] = {3, 3};
    const double *src[5] = {xs, sc, of, mn, va};
    for (int64_t e = 0; e < v->n; e++) v->f[e] = src[k][e];
}

static void test_batch_norm_inference(void) {
    static const double want[4] = {-0.5, 0, 0.5, 2};
    expect("interp batch-norm-inference by hand",
           "HloModule bi\nENTRY e {\n  x = f32[2,2] parameter(0)\n  s = f32[2] parameter(1)\n  o = f32[2] parameter(2)\n"
           "  m = f32[2] parameter(3)\n  v = f32[2] parameter(4)\n"
           "  ROOT b = f32[2,2] batch-norm-inference(x, s, o, m, v), epsilon=1, feature_index=1\n}\n",
           1, 1, bn_inf_fill, 0, want, 4);
}

/* Asynchronous pairs compute what their synchronous forms do; device d holds
 * 10·d + e (fill_dev). */
static void test_async_pairs(void) {
    double w = 10 + 30;
    expect("interp all-reduce-start/done", AR_HEAD "ENTRY e {\n  a = f32[1] parameter(0)\n"
           "  s = f32[1] all-reduce-start(a), channel_id=1, replica_groups={{1,3},{0,2}}, use_global_device_ids=true, "
           "to_apply=add\n  ROOT r = f32[1] all-reduce-done(s)\n}\n", 1, 4, fill_dev, 1, &w, 1);
    /* Device 1 receives device 0's value 0 + e. */
    double w2[2] = {0, 1};
    expect("interp collective-permute-start/done", "HloModule m\nENTRY e {\n  a = f32[2] parameter(0)\n"
           "  s = (f32[2], f32[2], u32[], u32[]) collective-permute-start(a), channel_id=1, source_target_pairs={{0,1},{1,0}}\n"
           "  ROOT r = f32[2] collective-permute-done(s)\n}\n", 1, 2, fill_dev, 1, w2, 2);
    double w3[4] = {0, 1, 10, 11};
    expect("interp all-gather-start/done", "HloModule m\nENTRY e {\n  a = f32[2] parameter(0)\n"
           "  s = (f32[2], f32[4]) all-gather-start(a), channel_id=1, replica_groups={{0,1}}, dimensions={0}, "
           "use_global_device_ids=true\n  ROOT r = f32[4] all-gather-done(s)\n}\n", 1, 2, fill_dev, 1, w3, 4);
    /* The wrapped computation doubles its operand: device 1 holds 10, 11. */
    double w4[2] = {20, 22};
    expect("interp async-start/update/done", "HloModule m\ntwice {\n  p = f32[2] parameter(0)\n"
           "  ROOT d = f32[2] add(p, p)\n}\nENTRY e {\n  a = f32[2] parameter(0)\n"
           "  s = ((f32[2]), f32[2], s32[]) async-start(a), calls=twice\n"
           "  u = ((f32[2]), f32[2], s32[]) async-update(s)\n  ROOT r = f32[2] async-done(u)\n}\n", 1, 2, fill_dev, 1, w4,
           2);
    double w5[2] = {10, 11};
    expect("interp copy-start/done", "HloModule m\nENTRY e {\n  a = f32[2] parameter(0)\n"
           "  s = (f32[2], f32[2], u32[]) copy-start(a)\n  ROOT r = f32[2] copy-done(s)\n}\n", 1, 2, fill_dev, 1, w5, 2);
}


void suite_interp(void);
void suite_interp(void) {
    test_batch_norm();
    test_batch_norm_inference();
    test_async_pairs();
    test_cli_eval();
    test_malformed();
    test_fft();
    test_dot();
    test_gather_scatter();
    test_structural();
    test_reduce();
    test_convolution();
    test_select_and_scatter();
    test_bf16();
    test_control();
    test_collectives();
    test_eval_instr();
    test_topk();
    test_jax_topk();
    test_jax_linalg();
    test_linalg();
    test_stf();
    /* Every corpus: JAX's outputs where stored, then every module runs. */
    static const char *corpora[] = {"samples", "samples/train", "samples/wild"};
    for (size_t k = 0; k < ARRAY_LEN(corpora); k++) test_samples(corpora[k]);
    test_corpus_eval(corpora, ARRAY_LEN(corpora));
    corpus_dir = "samples";
}
