/* collective-permute and all-gather of views and index values, on small
 * hand-written pairs (tests/cases/permute):
 *   - view: a dim sharded over a, cut again by a dynamic-slice over (b, c),
 *     permuted so that every device holds the blocks of the order (b, c, a)
 *     (a transpose of mesh positions, as GSPMD reshards between mesh axes);
 *   - idx: token ids sharded over a, shifted by a per-device offset along b,
 *     permuted from axis a to axis b, shifted back by the offset of the device
 *     they came from, all-gathered over b, and gathered from a table;
 *   - gather: the same shift all-gathered over a (the functions vary only
 *     along b, so each group holds one function), shifted back, gathered.
 * And collectives written by hand over a partial sum (tests/cases/psub):
 * rings, butterflies and an all-gather by placed blocks (partial_rings).
 * Each correct pair is verified; each variant with a wrong pairs list, offset
 * or group is never verified, and is found where the rules can prove it (a
 * wrong pairs direction leaves the output in another view) or where execution
 * shows it (with witnesses). And the mesh refinement that splits an axis for
 * such groups makes room in a full mesh by dropping an axis of size 1. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "harness.h"
#include "hlo.h"
#include "lift.h"

#define DIR "tests/cases/permute/"

typedef struct variant {
    const char *what, *from, *to;  /* from == NULL: the pair as written */
    bool witness;
    int verdict;
    const char *kind;              /* the first finding's kind, or NULL for any */
} variant;

static const char *first_kind(json_t *trace) {
    json_t *f = json_array_get(json_object_get(trace, "findings"), 0);
    return f ? json_string_value(json_object_get(f, "kind")) : NULL;
}

static void run_variants(const char *name, const char *base, const char *dist, const char *rel, const variant *vs, size_t n) {
    char *src = t_read(dist, NULL);
    if (!CHECK_MSG(src, "cannot read %s", dist)) return;
    char path[256];
    snprintf(path, sizeof path, "build/permute-%s.dist.hlo", name);
    for (size_t k = 0; k < n; k++) {
        const variant *v = &vs[k];
        t_case("permute %s: %s", name, v->what);
        if (!CHECK_MSG(t_write_replaced(src, v->from ? v->from : "HloModule", v->to ? v->to : "HloModule", NULL, path),
                       "\"%s\" not in %s", v->from, dist))
            continue;
        check_opts o = {.name = name, .baseline = base, .distributed = path, .relations = rel, .witness = v->witness,
                        .rules_dir = "rules"};
        diag dg;
        diag_init(&dg, name);
        json_t *trace = NULL;
        int got = check_pair(&o, &trace, &dg);
        CHECK_MSG(got == v->verdict, "verdict %s, expected %s (%s)", verdict_name(got), verdict_name(v->verdict),
                  dg.out.s ? dg.out.s : "");
        CHECK(got != VERDICT_VERIFIED || v->verdict == VERDICT_VERIFIED);
        if (v->kind) {
            const char *kind = first_kind(trace);
            CHECK_MSG(kind && strcmp(kind, v->kind) == 0, "first finding %s, expected %s", kind ? kind : "(none)", v->kind);
        }
        json_decref(trace);
        diag_free(&dg);
    }
    free(src);
}

static void views(void) {
    static const char pairs[] = "source_target_pairs={{0,0},{1,4},{2,1},{3,5},{4,2},{5,6},{6,3},{7,7}}";
    static const variant vs[] = {
        {"blocks of (b, c, a) after the permute", NULL, NULL, false, VERDICT_VERIFIED, NULL},
        {"pairs in the other direction: (c, a, b)", pairs,
         "source_target_pairs={{0,0},{1,2},{2,4},{3,6},{4,1},{5,3},{6,5},{7,7}}", false, VERDICT_MISMATCH, "wrong-shard-dim"},
        {"pairs swapping b and c instead: (a, c, b)", pairs,
         "source_target_pairs={{0,0},{1,2},{2,1},{3,3},{4,4},{5,6},{6,5},{7,7}}", false, VERDICT_MISMATCH, "wrong-shard-dim"},
        {"a pair dropped: device 7 receives zeros", pairs,
         "source_target_pairs={{0,0},{1,4},{2,1},{3,5},{4,2},{5,6},{6,3}}", false, VERDICT_UNVERIFIED, NULL},
        {"a pair dropped, executed", pairs, "source_target_pairs={{0,0},{1,4},{2,1},{3,5},{4,2},{5,6},{6,3}}", true,
         VERDICT_MISMATCH, NULL},
        {"offsets of (c, b): the blocks end up as (b, a, c)", "{0, 2, 4, 6, 0, 2, 4, 6}", "{0, 4, 2, 6, 0, 4, 2, 6}", false,
         VERDICT_MISMATCH, "wrong-shard-dim"},
        {"offsets selecting one block twice", "{0, 2, 4, 6, 0, 2, 4, 6}", "{0, 2, 4, 6, 0, 2, 4, 4}", false,
         VERDICT_UNVERIFIED, NULL},
        {"offsets selecting one block twice, executed", "{0, 2, 4, 6, 0, 2, 4, 6}", "{0, 2, 4, 6, 0, 2, 4, 4}", true,
         VERDICT_MISMATCH, NULL},
    };
    run_variants("view", DIR "view.base.hlo", DIR "view.dist.hlo", DIR "view.relations.json", vs, ARRAY_LEN(vs));
}

static void index_permute(void) {
    static const char pairs[] = "source_target_pairs={{0,0},{1,2},{2,1},{3,3}}";
    static const variant vs[] = {
        {"token ids moved from axis a to axis b with their offsets", NULL, NULL, false, VERDICT_VERIFIED, NULL},
        {"pairs that keep every device's ids", pairs, "source_target_pairs={{0,0},{1,1},{2,2},{3,3}}", false,
         VERDICT_UNVERIFIED, NULL},
        {"pairs that keep every device's ids, executed", pairs, "source_target_pairs={{0,0},{1,1},{2,2},{3,3}}", true,
         VERDICT_MISMATCH, NULL},
        {"pairs along b instead", pairs, "source_target_pairs={{0,1},{1,0},{2,3},{3,2}}", false, VERDICT_UNVERIFIED, NULL},
        {"pairs along b instead, executed", pairs, "source_target_pairs={{0,1},{1,0},{2,3},{3,2}}", true, VERDICT_MISMATCH,
         NULL},
        {"shifted back by the receiver's own offset", "offa = s32[4] constant({0, 0, 8, 8})",
         "offa = s32[4] constant({0, 8, 0, 8})", true, VERDICT_MISMATCH, NULL},
        {"gathered over a, where the ids now lie along b", "replica_groups={{0,1},{2,3}}", "replica_groups={{0,2},{1,3}}",
         false, VERDICT_MISMATCH, "wrong-shard-dim"},
    };
    run_variants("idx", DIR "idx.base.hlo", DIR "idx.dist.hlo", DIR "idx.relations.json", vs, ARRAY_LEN(vs));
}

static void index_gather(void) {
    static const variant vs[] = {
        {"ids shifted along b, gathered over a", NULL, NULL, false, VERDICT_VERIFIED, NULL},
        {"gathered over b, where the shift varies", "replica_groups={{0,2},{1,3}}", "replica_groups={{0,1},{2,3}}", false,
         VERDICT_UNVERIFIED, NULL},
        {"gathered over b, executed", "replica_groups={{0,2},{1,3}}", "replica_groups={{0,1},{2,3}}", true, VERDICT_MISMATCH,
         NULL},
        {"shifted back by another axis's offset", "obs8 = s32[8] broadcast(ob0)", "obs8 = s32[8] broadcast(oa0)", false,
         VERDICT_UNVERIFIED, NULL},
        {"shifted back by another axis's offset, executed", "obs8 = s32[8] broadcast(ob0)", "obs8 = s32[8] broadcast(oa0)",
         true, VERDICT_MISMATCH, NULL},
    };
    run_variants("gather", DIR "idx.base.hlo", DIR "gather.dist.hlo", DIR "idx.relations.json", vs, ARRAY_LEN(vs));
}

/* Embedding rows gathered from a vocab-sharded table with junk where a
 * device does not hold the row, moved by an all-to-all (batch gathered, the
 * embedding split over d) before the all-gathered mask zeroes the junk and
 * an all-reduce over t sums the rows: MaxText on data x tensor. */
static void mask_moved(void) {
    static const char a2a[] = "a2a = f32[2,2,2] all-to-all(gs), channel_id=1, replica_groups={{0,2},{1,3}}";
    static const char mask[] = "outall = pred[4] all-gather(outside), channel_id=2, replica_groups={{0,2},{1,3}}";
    static const variant vs[] = {
        {"rows and their mask moved alike", NULL, NULL, false, VERDICT_VERIFIED, NULL},
        {"the all-to-all over t, where the rows differ", a2a,
         "a2a = f32[2,2,2] all-to-all(gs), channel_id=1, replica_groups={{0,1},{2,3}}", false, VERDICT_UNVERIFIED, NULL},
        {"the all-to-all over t, executed", a2a, "a2a = f32[2,2,2] all-to-all(gs), channel_id=1, replica_groups={{0,1},{2,3}}",
         true, VERDICT_MISMATCH, NULL},
        {"the mask gathered over t", mask, "outall = pred[4] all-gather(outside), channel_id=2, replica_groups={{0,1},{2,3}}",
         false, VERDICT_UNVERIFIED, NULL},
        {"the mask gathered over t, executed", mask,
         "outall = pred[4] all-gather(outside), channel_id=2, replica_groups={{0,1},{2,3}}", true, VERDICT_MISMATCH, NULL},
        {"rows in the order the all-to-all left them", "dimensions={1,0,2}", "dimensions={0,1,2}", false, VERDICT_UNVERIFIED,
         NULL},
        {"the rows summed over d", "channel_id=3, replica_groups={{0,1},{2,3}}", "channel_id=3, replica_groups={{0,2},{1,3}}",
         false, VERDICT_MISMATCH, "wrong-collective-group"},
        {"offsets of another axis", "offs = s32[4] constant({0, 4, 0, 4})", "offs = s32[4] constant({0, 0, 4, 4})", true,
         VERDICT_MISMATCH, NULL},
        {"the junk kept, the rows zeroed", "select(outb, fzs, rows)", "select(outb, rows, fzs)", false, VERDICT_UNVERIFIED,
         NULL},
        {"the junk kept, executed", "select(outb, fzs, rows)", "select(outb, rows, fzs)", true, VERDICT_MISMATCH, NULL},
    };
    run_variants("mask", DIR "mask.base.hlo", DIR "mask.dist.hlo", DIR "mask.relations.json", vs, ARRAY_LEN(vs));
}

/* What keras-hub Gemma on a layout map met: embedding rows scaled by a
 * constant. The baseline's gather is a masked row every device holds, the
 * distributed one a term after its all-reduce: both take the factor alike;
 * rows scaled by 4 where the baseline scales by 8 reach the output with that
 * factor: a mismatch the rules prove (lift_scale.c). */
static void mask_factor(void) {
    static const variant vs[] = {
        {"rows times 8, squared", NULL, NULL, false, VERDICT_VERIFIED, NULL},
        {"rows times 4 on the devices", "eight = f32[] constant(8)", "eight = f32[] constant(4)", false,
         VERDICT_MISMATCH, NULL},
        {"rows times 4 on the devices, executed", "eight = f32[] constant(8)", "eight = f32[] constant(4)", true,
         VERDICT_MISMATCH, NULL},
    };
    run_variants("scaled", DIR "scaled.base.hlo", DIR "scaled.dist.hlo", DIR "mask.relations.json", vs, ARRAY_LEN(vs));
}

/* What the keras-hub Llama training step on a layout map met next: an
 * all-to-all that regroups heads ([1, 2, 4] with the 2 bound back to one
 * dim of 8) read as the baseline's own term; and an all-gather followed by
 * a dot whose batch dims are sharded alike (the gathered dim kept no trace
 * of the axes it freed). */
static void regroup(void) {
    static const variant vs[] = {
        {"heads regrouped after an all-to-all", NULL, NULL, false, VERDICT_VERIFIED, NULL},
        {"heads transposed the other way", "dimensions={0,2,1,3}", "dimensions={0,2,3,1}", false, VERDICT_UNVERIFIED, NULL},
        {"heads transposed the other way, executed", "dimensions={0,2,1,3}", "dimensions={0,2,3,1}", true, VERDICT_MISMATCH,
         NULL},
    };
    run_variants("regroup", DIR "regroup.base.hlo", DIR "regroup.dist.hlo", DIR "regroup.relations.json", vs, ARRAY_LEN(vs));
    static const variant ws[] = {
        {"a dot after an all-gather over the minor axis", NULL, NULL, false, VERDICT_VERIFIED, NULL},
        {"the all-gather over the major axis", "replica_groups={{0,1},{2,3}}", "replica_groups={{0,2},{1,3}}", false,
         VERDICT_MISMATCH, "wrong-shard-dim"},
    };
    run_variants("stale", DIR "stale.base.hlo", DIR "stale.dist.hlo", DIR "stale.relations.json", ws, ARRAY_LEN(ws));
}

/* A dynamic-slice that cuts dim 1 by the axis dim 0 is sharded over keeps a
 * diagonal of blocks, which no view says (an axis used twice); each device
 * then holds 2 columns where the output's view gives all 4: outputs of
 * another shape, a mismatch by the rules too. */
static void diagonal(void) {
    static const variant vs[] = {
        {"a diagonal of blocks", NULL, NULL, false, VERDICT_MISMATCH, "wrong-shard-dim"},
        {"a diagonal of blocks, executed", NULL, NULL, true, VERDICT_MISMATCH, NULL},
    };
    run_variants("diag", DIR "diag.base.hlo", DIR "diag.dist.hlo", DIR "diag.relations.json", vs, ARRAY_LEN(vs));
}

/* What the keras-hub layout-map pair met after its permutes: RoPE's inverse
 * frequencies, iota times 2 over 8, computed alike on both sides. Constant
 * factors are taken on neither side's constant-only values (they were taken
 * on the baseline's, which was not marked constant-only, and not on the
 * distributed program's: the terms never met). */
static void konst_factor(void) {
    static const variant vs[] = {
        {"iota·2/8 on both sides", NULL, NULL, false, VERDICT_VERIFIED, NULL},
        {"iota·2/4 on the devices", "constant(8)", "constant(4)", false, VERDICT_UNVERIFIED, NULL},
        {"iota·2/4 on the devices, executed", "constant(8)", "constant(4)", true, VERDICT_MISMATCH, NULL},
    };
    run_variants("konst", DIR "konst.base.hlo", DIR "konst.dist.hlo", DIR "konst.relations.json", vs, ARRAY_LEN(vs));
}

/* What the keras-hub layout-map training step met next: a vector sharded
 * over a, reshaped to [1,1,n] and reduced over the unit dims, then squared.
 * One reading of the reshape shards the unit dim (the reduce then makes the
 * value partial), the other the last dim (the reduce changes nothing): the
 * square of partial sums means something only in the other reading, which
 * is the baseline's (a missing all-reduce is no finding either way). */
static void unit_reduce(void) {
    static const variant vs[] = {
        {"a reduce over unit dims of one reading", NULL, NULL, false, VERDICT_VERIFIED, NULL},
        {"a reduce over unit dims of one reading, executed", NULL, NULL, true, VERDICT_VERIFIED, NULL},
        {"doubled, not squared", "multiply(z, z)", "add(z, z)", false, VERDICT_UNVERIFIED, NULL},
        {"doubled, not squared, executed", "multiply(z, z)", "add(z, z)", true, VERDICT_MISMATCH, NULL},
    };
    run_variants("unit", DIR "unit.base.hlo", DIR "unit.dist.hlo", DIR "unit.relations.json", vs, ARRAY_LEN(vs));
}

/* A Shardy mesh of MESH_MAX_AXES axes, most of size 1 (MaxText names a
 * dozen), and groups over the major half of its axis y: the refinement drops
 * an axis of size 1 (a view naming it is unsharded along it and not partial
 * over it) to split y. */
static void full_mesh(void) {
    t_case("permute mesh: a full mesh drops an axis of size 1 to split another");
    static const char dist[] =
        "HloModule dist, num_partitions=8\n\nENTRY %main {\n  %x = f32[2,4]{1,0} parameter(0)\n"
        "  ROOT %g = f32[4,4]{1,0} all-gather(%x), channel_id=1, replica_groups=[4,2]<=[2,2,2]T(0,2,1), dimensions={0}, "
        "use_global_device_ids=true\n}\n";
    diag d;
    diag_init(&d, "dist.hlo");
    hlo_module *dm = hlo_parse_text(dist, strlen(dist), "dist.hlo", &d);
    relations r = {0};
    static const char *const names[MESH_MAX_AXES] = {"u0", "u1", "x", "u2", "u3", "u4", "u5", "y"};
    r.mesh.naxes = MESH_MAX_AXES;
    for (uint32_t a = 0; a < MESH_MAX_AXES; a++) {
        snprintf(r.mesh.names[a], sizeof r.mesh.names[a], "%s", names[a]);
        r.mesh.sizes[a] = a == 2 ? 2 : a == 7 ? 4 : 1;
    }
    r.ninputs = 1;
    r.inputs = xcalloc(1, sizeof *r.inputs);
    r.inputs[0] = view_dup(2);
    r.inputs[0].dims[0] = (view_dim){.naxes = 2, .axes = {1, 2}};  /* (u1, x) */
    r.inputs[0].dims[1] = (view_dim){.naxes = 1, .axes = {7}};     /* y */
    r.inputs[0].partial = 1u << 3 | 1u << 6, r.inputs[0].red = RED_SUM;
    if (CHECK_MSG(dm, "%s", d.out.s ? d.out.s : "")) {
        CHECK(lift_refine_mesh(&r, dm));
        CHECK_EQ(r.mesh.naxes, MESH_MAX_AXES);
        CHECK_EQ(r.mesh.nunit, 1);
        CHECK_STR(r.mesh.unit[0], "u5");
        CHECK_STR(r.mesh.names[6], "y.0");
        CHECK_STR(r.mesh.names[7], "y.1");
        CHECK_EQ(mesh_devices(&r.mesh), 8);
        strbuf b;
        sb_init(&b);
        view_print(&b, &r.inputs[0], &r.mesh);
        CHECK_STR(b.s, "shard(0,(u1,x)) shard(1,(y.0,y.1)) partial(u2,sum)");
        sb_free(&b);
    }
    relations_free(&r);
    diag_free(&d);
    graph_free(dm);
}

#define PSUB "tests/cases/psub/"

/* Collectives written by hand over a partial sum p (a dot of operands
 * sharded along the contracted dim, t = 4): a ring (p plus p moved one step
 * three times), a butterfly (pairs i xor 1, then i xor 2), a psum of a
 * permuted p, an all-gather written as each block put into zeros at its
 * place and summed (lift_psub.c, lf_placed_block), and a ring all-gather
 * (each block moved on and written at its place), both also in counted
 * while loops, and a ring reduce-scatter of chunks. The correct ones are
 * verified by the rules; a ring one step short or a stage that sends p
 * itself leaves sums no shares can make whole: a missing all-reduce the
 * rules find; shares added twice or a dropped pair stay undecided without
 * execution (some shares could be zero) and are mismatches with it. */
static void partial_rings(void) {
    static const char last[] = "ROOT a3 = f32[4,4] add(a2, m3)";
    static const char step2[] = "channel_id=2, source_target_pairs={{0,1},{1,2},{2,3},{3,0}}";
    static const char step1[] = "channel_id=1, source_target_pairs={{0,1},{1,2},{2,3},{3,0}}";
    static const variant ring[] = {
        {"a ring all-reduce in three steps", NULL, NULL, false, VERDICT_VERIFIED, NULL},
        {"a ring one step short", last, "ROOT a3 = f32[4,4] copy(a2)", false, VERDICT_MISMATCH, "missing-all-reduce"},
        {"the second step sent back", step2, "channel_id=2, source_target_pairs={{1,0},{2,1},{3,2},{0,3}}", false,
         VERDICT_UNVERIFIED, NULL},
        {"the second step sent back, executed", step2, "channel_id=2, source_target_pairs={{1,0},{2,1},{3,2},{0,3}}", true,
         VERDICT_MISMATCH, NULL},
        {"a pair dropped from the first step", step1, "channel_id=1, source_target_pairs={{0,1},{1,2},{2,3}}", false,
         VERDICT_UNVERIFIED, NULL},
        {"a pair dropped, executed", step1, "channel_id=1, source_target_pairs={{0,1},{1,2},{2,3}}", true, VERDICT_MISMATCH,
         NULL},
        {"the first step's shares moved again", "collective-permute(m2)", "collective-permute(m1)", false, VERDICT_UNVERIFIED,
         NULL},
        {"the first step's shares moved again, executed", "collective-permute(m2)", "collective-permute(m1)", true,
         VERDICT_MISMATCH, NULL},
    };
    run_variants("ring", PSUB "dot.base.hlo", PSUB "ring.dist.hlo", PSUB "dot.relations.json", ring, ARRAY_LEN(ring));
    static const char stage2[] = "channel_id=2, source_target_pairs={{0,2},{1,3},{2,0},{3,1}}";
    static const variant bfly[] = {
        {"a butterfly: partners i xor 1, then i xor 2", NULL, NULL, false, VERDICT_VERIFIED, NULL},
        {"partners i xor 1, then i xor 3", stage2, "channel_id=2, source_target_pairs={{0,3},{1,2},{2,1},{3,0}}", false,
         VERDICT_VERIFIED, NULL},
        {"partners i xor 1 twice", stage2, "channel_id=2, source_target_pairs={{0,1},{1,0},{2,3},{3,2}}", false,
         VERDICT_UNVERIFIED, NULL},
        {"partners i xor 1 twice, executed", stage2, "channel_id=2, source_target_pairs={{0,1},{1,0},{2,3},{3,2}}", true,
         VERDICT_MISMATCH, NULL},
        {"the second stage sends the partial sum, not the pair sums", "collective-permute(a1)", "collective-permute(p)",
         false, VERDICT_MISMATCH, "missing-all-reduce"},
    };
    run_variants("butterfly", PSUB "dot.base.hlo", PSUB "butterfly.dist.hlo", PSUB "dot.relations.json", bfly,
                 ARRAY_LEN(bfly));
    static const char root[] = "ROOT r = f32[4,4] all-reduce(m1)";
    static const variant moved[] = {
        {"a psum of the partial sum moved one step", NULL, NULL, false, VERDICT_VERIFIED, NULL},
        {"a psum of the partial sum plus its move: twice the sum", root,
         "a1 = f32[4,4] add(p, m1)\n  ROOT r = f32[4,4] all-reduce(a1)", false, VERDICT_MISMATCH, "constant-mismatch"},
        {"the moved partial sum as the output", root, "ROOT r = f32[4,4] copy(m1)", false, VERDICT_MISMATCH,
         "missing-all-reduce"},
    };
    run_variants("moved", PSUB "dot.base.hlo", PSUB "moved.dist.hlo", PSUB "dot.relations.json", moved, ARRAY_LEN(moved));
    static const variant placed[] = {
        {"blocks put into zeros at their place, then summed", NULL, NULL, false, VERDICT_VERIFIED, NULL},
        {"blocks put one row apart", "two = s32[] constant(2)", "two = s32[] constant(1)", false, VERDICT_UNVERIFIED, NULL},
        {"blocks put one row apart, executed", "two = s32[] constant(2)", "two = s32[] constant(1)", true, VERDICT_MISMATCH,
         NULL},
        {"blocks put in reverse order", "r = s32[] convert(pid)",
         "r0 = s32[] convert(pid)\n  three = s32[] constant(3)\n  r = s32[] subtract(three, r0)", false, VERDICT_UNVERIFIED,
         NULL},
        {"blocks put in reverse order, executed", "r = s32[] convert(pid)",
         "r0 = s32[] convert(pid)\n  three = s32[] constant(3)\n  r = s32[] subtract(three, r0)", true, VERDICT_MISMATCH,
         NULL},
    };
    run_variants("placed", PSUB "placed.base.hlo", PSUB "placed.dist.hlo", PSUB "placed.relations.json", placed,
                 ARRAY_LEN(placed));
    static const char pairs1[] = "channel_id=1, source_target_pairs={{0,1},{1,2},{2,3},{3,0}}";
    static const variant gather[] = {
        {"a ring all-gather: each block moved on and written at its place", NULL, NULL, false, VERDICT_VERIFIED, NULL},
        {"a ring all-gather one step short", "ROOT y = f32[8,3] copy(acc3)", "ROOT y = f32[8,3] copy(acc2)", false,
         VERDICT_MISMATCH, "missing-all-reduce"},
        {"the first move sent the other way", pairs1, "channel_id=1, source_target_pairs={{1,0},{2,1},{3,2},{0,3}}",
         false, VERDICT_UNVERIFIED, NULL},
        {"the first move sent the other way, executed", pairs1,
         "channel_id=1, source_target_pairs={{1,0},{2,1},{3,2},{0,3}}", true, VERDICT_MISMATCH, NULL},
        {"a moved block written at the next block's place", "r1b = s32[] subtract(r1a, one)", "r1b = s32[] add(r1a, one)",
         false, VERDICT_UNVERIFIED, NULL},
        {"a moved block written at the next block's place, executed", "r1b = s32[] subtract(r1a, one)",
         "r1b = s32[] add(r1a, one)", true, VERDICT_MISMATCH, NULL},
        {"one block written twice", "dynamic-update-slice(acc1, x2, off2, z)", "dynamic-update-slice(acc1, x1, off1, z)",
         false, VERDICT_UNVERIFIED, NULL},
        {"one block written twice, executed", "dynamic-update-slice(acc1, x2, off2, z)",
         "dynamic-update-slice(acc1, x1, off1, z)", true, VERDICT_MISMATCH, NULL},
    };
    run_variants("gather", PSUB "gather.base.hlo", PSUB "gather.dist.hlo", PSUB "placed.relations.json", gather,
                 ARRAY_LEN(gather));
    /* A ring reduce-scatter: each device's chunk of p moved on and the next
     * chunk added, three times: every device ends with its own chunk whole.
     * One step short, each chunk lacks one share: right only if that share
     * is zero there, so undecided without execution. */
    static const variant rs[] = {
        {"a ring reduce-scatter of chunks", NULL, NULL, false, VERDICT_VERIFIED, NULL},
        {"a ring reduce-scatter one step short", "ROOT a3 = f32[4,2] add(m3, d3)", "ROOT a3 = f32[4,2] copy(a2)", false,
         VERDICT_UNVERIFIED, NULL},
        {"one step short, executed", "ROOT a3 = f32[4,2] add(m3, d3)", "ROOT a3 = f32[4,2] copy(a2)", true,
         VERDICT_MISMATCH, NULL},
        {"a step adding the chunk of the step before", "o2 = s32[] multiply(c2, two)", "o2 = s32[] multiply(c1, two)",
         false, VERDICT_UNVERIFIED, NULL},
        {"a step adding the chunk of the step before, executed", "o2 = s32[] multiply(c2, two)",
         "o2 = s32[] multiply(c1, two)", true, VERDICT_MISMATCH, NULL},
        {"the second move sent back", "channel_id=2, source_target_pairs={{0,1},{1,2},{2,3},{3,0}}",
         "channel_id=2, source_target_pairs={{1,0},{2,1},{3,2},{0,3}}", true, VERDICT_MISMATCH, NULL},
    };
    run_variants("rs", PSUB "rs.base.hlo", PSUB "rs.dist.hlo", PSUB "rs.relations.json", rs, ARRAY_LEN(rs));
    /* The same in a counted while loop, walked iteration by iteration. */
    static const variant ringloop[] = {
        {"a ring all-reduce in a loop of three steps", NULL, NULL, false, VERDICT_VERIFIED, NULL},
        {"the loop one step short", "three = s32[] constant(3)", "three = s32[] constant(2)", false, VERDICT_MISMATCH,
         "missing-all-reduce"},
    };
    run_variants("ringloop", PSUB "dot.base.hlo", PSUB "ringloop.dist.hlo", PSUB "dot.relations.json", ringloop,
                 ARRAY_LEN(ringloop));
    static const variant gatherloop[] = {
        {"a ring all-gather in a loop, offsets from the counter", NULL, NULL, false, VERDICT_VERIFIED, NULL},
        {"the loop one step short", "three = s32[] constant(3)", "three = s32[] constant(2)", false, VERDICT_MISMATCH,
         "missing-all-reduce"},
        {"offsets of the blocks the other way", "rb = s32[] subtract(ra, i1)", "rb = s32[] add(ra, i1)", false,
         VERDICT_UNVERIFIED, NULL},
        {"offsets of the blocks the other way, executed", "rb = s32[] subtract(ra, i1)", "rb = s32[] add(ra, i1)", true,
         VERDICT_MISMATCH, NULL},
    };
    run_variants("gatherloop", PSUB "gather.base.hlo", PSUB "gatherloop.dist.hlo", PSUB "placed.relations.json",
                 gatherloop, ARRAY_LEN(gatherloop));
}

void suite_permute(void);
/* A permute that swaps d with the major half of t (MaxText's token ids
 * moving from data to tensor) splits t on a mesh inferred from shardings; a
 * ring shift along t (halo exchange) moves no whole coordinates on any
 * split, and splits nothing. */
static void permute_split(void) {
    static const char *const pairs[2] = {"{{0,0},{1,1},{2,4},{3,5},{4,2},{5,3},{6,6},{7,7}}",
                                         "{{0,1},{1,2},{2,3},{3,0},{4,5},{5,6},{6,7},{7,4}}"};
    for (int k = 0; k < 2; k++) {
        t_case("permute mesh: %s", k ? "a ring shift splits no axis" : "a permute swapping d and half of t splits t");
        char dist[512];
        snprintf(dist, sizeof dist,
                 "HloModule dist, num_partitions=8\n\nENTRY %%main {\n  %%x = f32[2,4]{1,0} parameter(0)\n"
                 "  ROOT %%p = f32[2,4]{1,0} collective-permute(%%x), channel_id=1, source_target_pairs=%s\n}\n",
                 pairs[k]);
        diag d;
        diag_init(&d, "dist.hlo");
        hlo_module *dm = hlo_parse_text(dist, strlen(dist), "dist.hlo", &d);
        relations r = {0};
        r.mesh.naxes = 2;
        snprintf(r.mesh.names[0], sizeof r.mesh.names[0], "d");
        snprintf(r.mesh.names[1], sizeof r.mesh.names[1], "t");
        r.mesh.sizes[0] = 2, r.mesh.sizes[1] = 4;
        r.ninputs = 1;
        r.inputs = xcalloc(1, sizeof *r.inputs);
        r.inputs[0] = view_dup(2);
        r.inputs[0].dims[0] = (view_dim){.naxes = 1, .axes = {0}};
        if (CHECK_MSG(dm, "%s", d.out.s ? d.out.s : "")) {
            CHECK_EQ(lift_refine_mesh(&r, dm), k == 0);
            CHECK_EQ(r.mesh.naxes, k ? 2 : 3);
            if (k == 0) {
                CHECK_STR(r.mesh.names[1], "t.0");
                CHECK_STR(r.mesh.names[2], "t.1");
            }
        }
        relations_free(&r);
        diag_free(&d);
        graph_free(dm);
    }
}

#define CMM "tests/cases/cmatmul/"

/* Collective matmuls written by hand (lift_win.c): the rows of x moved
 * round a ring, each step's product written at the rows its block came from
 * (lf_win_update: a window until every device holds its rows in order); and
 * the contracting form, a ring of lhs blocks against the chunk of the local
 * rhs at the same rows, summed (a summed window whole on every device). A
 * step missing, at the wrong rows or against the wrong chunk decides nothing
 * by the rules (the pieces could coincide) and is a mismatch by execution;
 * the contracting form one step short is never a missing all-reduce: a
 * device's guessed share of a sum decides no finding. */
static void collective_matmuls(void) {
    static const variant ag[] = {
        {"an all-gather matmul round a ring, each product at its rows", NULL, NULL, false, VERDICT_VERIFIED, NULL},
        {"a product written at the next block's rows", "s1 = s32[] add(r, one)", "s1 = s32[] add(r, three)", false,
         VERDICT_UNVERIFIED, NULL},
        {"a product written at the next block's rows, executed", "s1 = s32[] add(r, one)", "s1 = s32[] add(r, three)",
         true, VERDICT_MISMATCH, NULL},
        {"the last step missing", "ROOT acc3 = f32[16,4] dynamic-update-slice(acc2, y3, off3, z)",
         "ROOT acc3 = f32[16,4] copy(acc2)", false, VERDICT_UNVERIFIED, NULL},
        {"the last step missing, executed", "ROOT acc3 = f32[16,4] dynamic-update-slice(acc2, y3, off3, z)",
         "ROOT acc3 = f32[16,4] copy(acc2)", true, VERDICT_MISMATCH, NULL},
        {"the first move sent the other way, executed", "channel_id=1, source_target_pairs={{0,3},{1,0},{2,1},{3,2}}",
         "channel_id=1, source_target_pairs={{0,1},{1,2},{2,3},{3,0}}", true, VERDICT_MISMATCH, NULL},
    };
    run_variants("cm-allgather", CMM "ag.base.hlo", CMM "ag.dist.hlo", CMM "ag.relations.json", ag, ARRAY_LEN(ag));
    static const variant rs[] = {
        {"lhs blocks round a ring against the local rhs chunk at their rows", NULL, NULL, false, VERDICT_VERIFIED, NULL},
        {"one step short", "ROOT acc3 = f32[8,2] add(acc2, p3)", "ROOT acc3 = f32[8,2] copy(acc2)", false,
         VERDICT_UNVERIFIED, NULL},
        {"one step short, executed", "ROOT acc3 = f32[8,2] add(acc2, p3)", "ROOT acc3 = f32[8,2] copy(acc2)", true,
         VERDICT_MISMATCH, NULL},
        {"a step against the device's own chunk again", "c1 = f32[4,2] dynamic-slice(b, off1, z)",
         "c1 = f32[4,2] dynamic-slice(b, off0, z)", false, VERDICT_UNVERIFIED, NULL},
        {"a step against the device's own chunk again, executed", "c1 = f32[4,2] dynamic-slice(b, off1, z)",
         "c1 = f32[4,2] dynamic-slice(b, off0, z)", true, VERDICT_MISMATCH, NULL},
    };
    /* A value added between the steps: the sum so far is no partial sum of
     * anything the rules know (a guessed share), so the add decides no
     * missing all-reduce; the bias (added on every device) makes it wrong,
     * which execution shows. */
    static const char mid[] = "acc2 = f32[8,2] add(acc1, p2)";
    static const char mid_bias[] = "onef = f32[] constant(1)\n  bias = f32[8,2] broadcast(onef), dimensions={}\n"
                                   "  acc1b = f32[8,2] add(acc1, bias)\n  acc2 = f32[8,2] add(acc1b, p2)";
    static const variant rsb[] = {
        {"a bias added between the steps", mid, mid_bias, false, VERDICT_UNVERIFIED, NULL},
        {"a bias added between the steps, executed", mid, mid_bias, true, VERDICT_MISMATCH, NULL},
    };
    run_variants("cm-contracting-bias", CMM "rs.base.hlo", CMM "rs.dist.hlo", CMM "rs.relations.json", rsb,
                 ARRAY_LEN(rsb));
    run_variants("cm-contracting", CMM "rs.base.hlo", CMM "rs.dist.hlo", CMM "rs.relations.json", rs, ARRAY_LEN(rs));
}

void suite_permute(void) {
    views();
    index_permute();
    index_gather();
    mask_moved();
    mask_factor();
    konst_factor();
    unit_reduce();
    regroup();
    diagonal();
    full_mesh();
    permute_split();
    partial_rings();
    collective_matmuls();
}
