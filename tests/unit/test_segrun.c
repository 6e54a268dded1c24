/* segrun and scale: runs of a computation, their slots, exported positions and
 * structural equality — what the segment memo relies on to reuse a layer. And
 * end to end: a layer changed in one place is never taken from the memo
 * (mutations of a memoised layer of a real pair are never verified), the memo
 * changes no verdict or finding, and while loops are related by induction. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "harness.h"
#include "hlo.h"
#include "segrun.h"

/* Four layers over x: layers.0 and layers.1 are the same computation of their
 * input and their own weight; layers.2 sums over other devices; layers.3 adds a
 * different constant. A parameter is listed inside layers.1 (protobuf dumps do
 * that). Channel ids differ between layers 0 and 1 (they name collectives). */
static const char *const layers_hlo =
    "HloModule m, num_partitions=4\n"
    "sum {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT s = f32[] add(a, b)\n}\n"
    "sum2 {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT s = f32[] add(a, b)\n}\n"
    "ENTRY e {\n"
    "  x = f32[4] parameter(0)\n"
    "  w0 = f32[4] parameter(1)\n"
    "  m0 = f32[4] multiply(x, w0), metadata={op_name=\"layers.0/mul\"}\n"
    "  r0 = f32[4] all-reduce(m0), channel_id=1, replica_groups={{0,1,2,3}}, use_global_device_ids=true, to_apply=sum, metadata={op_name=\"layers.0/psum\"}\n"
    "  h0 = f32[4] add(x, r0), metadata={op_name=\"layers.0/add\"}\n"
    "  w1 = f32[4] parameter(2)\n"
    "  m1 = f32[4] multiply(h0, w1), metadata={op_name=\"layers.1/mul\"}\n"
    "  r1 = f32[4] all-reduce(m1), channel_id=7, replica_groups={{0,1,2,3}}, use_global_device_ids=true, to_apply=sum2, metadata={op_name=\"layers.1/psum\"}\n"
    "  h1 = f32[4] add(h0, r1), metadata={op_name=\"layers.1/add\"}\n"
    "  w2 = f32[4] parameter(3)\n"
    "  m2 = f32[4] multiply(h1, w2), metadata={op_name=\"layers.2/mul\"}\n"
    "  r2 = f32[4] all-reduce(m2), channel_id=8, replica_groups={{0,1},{2,3}}, use_global_device_ids=true, to_apply=sum, metadata={op_name=\"layers.2/psum\"}\n"
    "  h2 = f32[4] add(h1, r2), metadata={op_name=\"layers.2/add\"}\n"
    "  c3 = f32[] constant(2), metadata={op_name=\"layers.3/c\"}\n"
    "  b3 = f32[4] broadcast(c3), dimensions={}, metadata={op_name=\"layers.3/b\"}\n"
    "  ROOT h3 = f32[4] add(h2, b3), metadata={op_name=\"layers.3/add\"}\n"
    "}\n";

static void runs_of_layers(void) {
    t_case("segrun: runs, slots and exported positions");
    diag d;
    diag_init(&d, "layers");
    hlo_module *m = hlo_parse_text(layers_hlo, strlen(layers_hlo), "layers", &d);
    if (!CHECK_MSG(m != NULL, "%s", d.out.s ? d.out.s : "")) {
        diag_free(&d);
        return;
    }
    const hlo_comp *e = graph_entry(m);
    arena a;
    arena_init(&a);
    sr_runs r;
    sr_split(m, e, &a, &r);
    CHECK_EQ(sr_count(e), 4u);
    CHECK_EQ(r.n, 4u);
    if (r.n == 4) {
        CHECK(r.runs[0].nscope == 8 && strncmp(r.runs[0].scope, "layers.0", 8) == 0);
        /* layers.1 reads h0 and its parameter w1 (listed inside it): two slots. */
        CHECK_EQ(r.runs[1].nslots, 2u);
        /* its residual h1 is read by layers.2: exported; m1, r1 are not (the
         * parameter w2 listed before layers.2 starts is in its range too). */
        const sr_run *r1 = &r.runs[1];
        uint32_t exported = 0;
        for (uint32_t p = 0; p < r1->i1 - r1->i0; p++) exported += r1->exported[p] && e->instrs[r1->i0 + p].op != OP_PARAMETER;
        CHECK_EQ(exported, 1u);
        t_case("segrun: equal layers are equal, whatever their channel ids and reducer copies");
        CHECK(r.runs[0].fp == r.runs[1].fp);
        CHECK(sr_equal(m, e, &r.runs[0], e, &r.runs[1]));
        t_case("segrun: different replica groups or a different layer are not equal");
        CHECK(!sr_equal(m, e, &r.runs[1], e, &r.runs[2]));
        CHECK(!sr_equal(m, e, &r.runs[1], e, &r.runs[3]));
        CHECK(!sr_equal(m, e, &r.runs[2], e, &r.runs[3]));
    }
    arena_free(&a);
    graph_free(m);
    diag_free(&d);

    t_case("segrun: an elided constant equals nothing, not even itself");
    static const char *const elided =
        "HloModule m\nENTRY e {\n  x = f32[4] parameter(0)\n"
        "  c0 = f32[4] constant({...}), metadata={op_name=\"layers.0/c\"}\n"
        "  a0 = f32[4] add(x, c0), metadata={op_name=\"layers.0/add\"}\n"
        "  c1 = f32[4] constant({...}), metadata={op_name=\"layers.1/c\"}\n"
        "  ROOT a1 = f32[4] add(a0, c1), metadata={op_name=\"layers.1/add\"}\n}\n";
    diag_init(&d, "elided");
    m = hlo_parse_text(elided, strlen(elided), "elided", &d);
    if (CHECK_MSG(m != NULL, "%s", d.out.s ? d.out.s : "")) {
        arena_init(&a);
        sr_split(m, graph_entry(m), &a, &r);
        CHECK_EQ(r.n, 2u);
        if (r.n == 2) {
            CHECK(!sr_equal(m, graph_entry(m), &r.runs[0], graph_entry(m), &r.runs[1]));
            CHECK(!sr_equal(m, graph_entry(m), &r.runs[0], graph_entry(m), &r.runs[0]));
        }
        arena_free(&a);
    }
    graph_free(m);
    diag_free(&d);
}

/* A real pair whose middle layers are memo hits: a change in one of them must
 * keep it from being reused and never be verified. */
static void memo_mutations(void) {
    const char *base = "samples/llama-scale/llama-scale.baseline.hlo";
    const char *dist = "samples/llama-scale/llama-scale.megatron_tp.tp8.dist.hlo";
    const char *rel = "samples/llama-scale/llama-scale.megatron_tp.tp8.relations.json";
    const char *ar = "all-reduce(%dot_general.100), channel_id=1, replica_groups={{0,1,2,3,4,5,6,7}}, use_global_device_ids=true, "
                     "to_apply=%region_19.20";
    static const struct { const char *what, *to; } muts[] = {
        {"a memoised layer's all-reduce over half the devices",
         "all-reduce(%dot_general.100), channel_id=1, replica_groups={{0,1,2,3},{4,5,6,7}}, use_global_device_ids=true, "
         "to_apply=%region_19.20"},
        {"a memoised layer's all-reduce deleted", "copy(%dot_general.100)"},
    };
    size_t n;
    char *src = t_read(dist, &n);
    t_case("memo: the unmutated pair uses the memo");
    check_opts o = {.name = "scale", .baseline = base, .distributed = dist, .relations = rel};
    diag d;
    diag_init(&d, "scale");
    json_t *trace = NULL;
    int v = check_pair(&o, &trace, &d);
    CHECK_MSG(v == VERDICT_VERIFIED, "verdict %s", verdict_name(v));
    CHECK(json_integer_value(json_object_get(json_object_get(trace, "summary"), "memo_hits")) > 0);
    json_decref(trace);
    diag_free(&d);
    for (size_t k = 0; src && k < ARRAY_LEN(muts); k++) {
        t_case("memo mutation: %s", muts[k].what);
        /* layer 2's MLP all-reduce */
        if (!CHECK_MSG(t_write_replaced(src, ar, muts[k].to, NULL, "build/memo-mutant.hlo"), "pattern not in %s", dist)) continue;
        o.distributed = "build/memo-mutant.hlo";
        diag_init(&d, "mutant");
        v = check_pair(&o, &trace, &d);
        CHECK_MSG(v == VERDICT_MISMATCH, "verdict %s", verdict_name(v));
        json_decref(trace);
        diag_free(&d);
    }
    free(src);
}

/* Property: the memo changes nothing but time. Edits of a memoised layer's
 * arithmetic (operands swapped, one binary op for another), for every binary
 * op of that layer in turn, are checked with and without the memo (with the
 * rules, as the command line does): the same verdict and findings; an edit
 * that changes the function is never verified. (Most edits are undecided:
 * the rules do not commute operands, and the pair is too big for witnesses.) */
static void memo_property(void) {
    const char *base = "samples/llama-scale/llama-scale.baseline.hlo";
    const char *dist = "samples/llama-scale/llama-scale.megatron_tp.tp8.dist.hlo";
    const char *rel = "samples/llama-scale/llama-scale.megatron_tp.tp8.relations.json";
    size_t n;
    char *src = t_read(dist, &n);
    if (!CHECK(src != NULL)) return;
    /* Candidate lines: binary arithmetic of layers.2 in the shard_map body. */
    const char *body = strstr(src, "\n%xla.sdy.inlinable_manual_computation_body");
    static const struct { const char *op, *other; bool commutes; } ops[] = {
        {" multiply(", " add(", true}, {" add(", " multiply(", true}, {" subtract(", " add(", false}, {" divide(", " multiply(", false},
    };
    int tried = 0, changed = 0, counts[4] = {0};
    for (const char *line = body; line && *line && tried < 24; line = strchr(line + 1, '\n')) {
        const char *eol = strchr(line + 1, '\n');
        if (!eol) break;
        size_t len = (size_t)(eol - line);
        char *l = xstrndup(line, len);
        if (!strstr(l, "op_name=\"layers.2/")) {
            free(l);
            continue;
        }
        for (size_t k = 0; k < ARRAY_LEN(ops); k++) {
            char *at = strstr(l, ops[k].op);
            if (!at) continue;
            char *open = strchr(at, '('), *comma = open ? strchr(open, ',') : NULL, *close = comma ? strchr(comma, ')') : NULL;
            if (!close) continue;
            for (int kind = 0; kind < 2; kind++) {
                /* kind 0: operands swapped; kind 1: the other op */
                strbuf b;
                sb_init(&b);
                sb_put(&b, src, (size_t)(line - src));
                if (kind == 0) {
                    sb_put(&b, l, (size_t)(open + 1 - l));
                    sb_put(&b, comma + 2, (size_t)(close - comma - 2));
                    sb_puts(&b, ", ");
                    sb_put(&b, open + 1, (size_t)(comma - open - 1));
                    sb_puts(&b, close);
                } else {
                    sb_put(&b, l, (size_t)(at - l));
                    sb_puts(&b, ops[k].other);
                    sb_puts(&b, at + strlen(ops[k].op));
                }
                sb_puts(&b, eol);
                FILE *f = fopen("build/memo-property.hlo", "w");
                fwrite(b.s, 1, b.len, f);
                fclose(f);
                sb_free(&b);
                t_case("memo property: %s of %.60s", kind ? "op changed" : "operands swapped", l + 2);
                check_opts o = {.name = "edit", .baseline = base, .distributed = "build/memo-property.hlo", .relations = rel, .rules_dir = "rules"};
                json_t *t1 = NULL, *t2 = NULL;
                diag d;
                diag_init(&d, "edit");
                int v1 = check_pair(&o, &t1, &d);
                o.no_memo = true;
                int v2 = check_pair(&o, &t2, &d);
                diag_free(&d);
                CHECK_MSG(v1 == v2, "verdict %s with the memo, %s without", verdict_name(v1), verdict_name(v2));
                CHECK_MSG(t1 && t2 && json_equal(json_object_get(t1, "findings"), json_object_get(t2, "findings")), "findings differ");
                bool semantic = kind == 1 || !ops[k].commutes;
                if (semantic) CHECK_MSG(v1 != VERDICT_VERIFIED, "an edit that changes the function was verified");
                changed += semantic;
                tried++;
                counts[v1 >= 0 && v1 < 4 ? v1 : VERDICT_ERROR]++;
                json_decref(t1);
                json_decref(t2);
            }
            break;
        }
        free(l);
    }
    printf("note: memo property: %d edits of a memoised layer, %d changing the function: %d verified, %d mismatch, %d unverified\n",
           tried, changed, counts[VERDICT_VERIFIED], counts[VERDICT_MISMATCH], counts[VERDICT_UNVERIFIED]);
    t_case("memo property: enough edits");
    CHECK_MSG(tried >= 12 && changed >= 6, "%d edits, %d of them changing the function", tried, changed);
    free(src);
}

/* While loops by induction, on small modules: the same loop is verified; a
 * body that computes something else, or a loop without a condition, is not
 * (and nothing crashes). */
static int check_texts(const char *base, const char *dist) {
    FILE *f = fopen("build/loop-base.hlo", "w");
    fputs(base, f);
    fclose(f);
    f = fopen("build/loop-dist.hlo", "w");
    fputs(dist, f);
    fclose(f);
    check_opts o = {.name = "loop", .baseline = "build/loop-base.hlo", .distributed = "build/loop-dist.hlo", .auto_relations = true};
    diag d;
    diag_init(&d, "loop");
    json_t *trace = NULL;
    int v = check_pair(&o, &trace, &d);
    json_decref(trace);
    diag_free(&d);
    return v;
}

static void loops(void) {
    static const char *const head =
        "HloModule m\nc {\n  p = (s32[], f32[4]) parameter(0)\n  i = s32[] get-tuple-element(p), index=0\n"
        "  n = s32[] constant(3)\n  ROOT lt = pred[] compare(i, n), direction=LT\n}\n"
        "b {\n  p = (s32[], f32[4]) parameter(0)\n  i = s32[] get-tuple-element(p), index=0\n  o = s32[] constant(1)\n"
        "  j = s32[] add(i, o)\n  x = f32[4] get-tuple-element(p), index=1\n";
    static const char *const tail =
        "  ROOT t = (s32[], f32[4]) tuple(j, y)\n}\nENTRY e {\n  x = f32[4] parameter(0)\n  z = s32[] constant(0)\n"
        "  t = (s32[], f32[4]) tuple(z, x)\n  w = (s32[], f32[4]) while(t), condition=c, body=b\n"
        "  ROOT r = f32[4] get-tuple-element(w), index=1\n}\n";
    strbuf a, b;
    sb_init(&a);
    sb_init(&b);
    sb_printf(&a, "%s  y = f32[4] add(x, x)\n%s", head, tail);
    sb_printf(&b, "%s  y = f32[4] multiply(x, x)\n%s", head, tail);
    t_case("loop: the same loop is verified by induction");
    int v = check_texts(a.s, a.s);
    CHECK_MSG(v == VERDICT_VERIFIED, "verdict %s", verdict_name(v));
    t_case("loop: a body computing something else is not verified");
    v = check_texts(a.s, b.s);
    CHECK_MSG(v != VERDICT_VERIFIED && v != VERDICT_ERROR, "verdict %s", verdict_name(v));
    t_case("loop: a loop without its condition is refused on reading, not a crash");
    static const char *const nocond =
        "HloModule m\nb {\n  p = (s32[], f32[4]) parameter(0)\n  ROOT t = (s32[], f32[4]) tuple(p)\n}\n"
        "ENTRY e {\n  x = f32[4] parameter(0)\n  c = s32[] constant(0)\n  t = (s32[], f32[4]) tuple(c, x)\n"
        "  ROOT w = (s32[], f32[4]) while(t), body=b\n}\n";
    v = check_texts(nocond, nocond);  /* graph_check: while needs condition */
    CHECK_MSG(v == VERDICT_ERROR, "verdict %s", verdict_name(v));
    sb_free(&a);
    sb_free(&b);
}

void suite_segrun(void);
void suite_segrun(void) {
    runs_of_layers();
    memo_mutations();
    memo_property();
    loops();
}
