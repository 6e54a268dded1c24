/* Pathological inputs (STYLE 13): every one gives a clean error or a valid module,
 * never a crash or a hang. Run under `make asan` too. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "egraph.h"
#include "harness.h"
#include "hlo.h"
#include "interp.h"
#include "io.h"

#include <zlib.h>

/* Parses src; true when the outcome is clean: a module that passes graph_check,
 * or no module and a "file:line:col: " diagnostic. *msg gets the diagnostics. */
static bool clean(const char *src, size_t n, bool *parsed, char **msg) {
    diag d;
    diag_init(&d, "p.hlo");
    hlo_module *m = hlo_parse_text(src, n, "p.hlo", &d);
    bool ok;
    if (m) {
        ok = graph_check(m, NULL) == 0;
    } else {
        int line, col;
        ok = d.count > 0 && d.out.s && sscanf(d.out.s, "p.hlo:%d:%d: ", &line, &col) == 2 && line > 0 && col > 0;
    }
    if (parsed) *parsed = m != NULL;
    if (msg) *msg = xstrdup(d.out.s ? d.out.s : "");
    graph_free(m);
    diag_free(&d);
    return ok;
}

static void expect_error(const char *name, const char *src, const char *needle) {
    t_case("pathological %s", name);
    bool parsed;
    char *msg;
    CHECK(clean(src, strlen(src), &parsed, &msg));
    CHECK_MSG(!parsed, "should have been refused");
    CHECK_CONTAINS(msg, needle);
    free(msg);
}

static void expect_read(const char *name, const char *src) {
    t_case("pathological %s", name);
    bool parsed;
    char *msg;
    CHECK(clean(src, strlen(src), &parsed, &msg));
    CHECK_MSG(parsed, "refused: %s", msg);
    free(msg);
}

static void truncations(const char *path) {
    size_t n;
    char *src = t_read(path, &n);
    if (!src) return;
    t_case("truncated %s at every line", path);
    int bad = 0, cuts = 0, modules = 0;
    for (size_t i = 0; i <= n; i++) {
        if (i < n && src[i] != '\n') continue;
        char saved = src[i];
        src[i] = 0;
        bool parsed;
        if (!clean(src, i, &parsed, NULL)) bad++;
        modules += parsed;
        src[i] = saved;
        cuts++;
    }
    CHECK_MSG(bad == 0, "%d of %d truncations were not clean", bad, cuts);
    CHECK(cuts > 10);
    printf("note: %s: %d truncations, %d still a valid module\n", path, cuts, modules);
    free(src);
}

static char *repeat(const char *pre, const char *unit, size_t times, const char *post) {
    strbuf b;
    sb_init(&b);
    sb_puts(&b, pre);
    for (size_t i = 0; i < times; i++) sb_puts(&b, unit);
    sb_puts(&b, post);
    return sb_take(&b);
}


/* ---- structure: what graph_check promises every later stage ---- */

static const char *const sum_comp = "r {\n a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT s = f32[] add(a, b)\n}\n";

/* Parses src, which must be accepted; NULL (and a failed check) otherwise. */
static hlo_module *parse_valid(const char *src) {
    diag d;
    diag_init(&d, "p.hlo");
    hlo_module *m = hlo_parse_text(src, strlen(src), "p.hlo", &d);
    CHECK_MSG(m != NULL, "%s", d.out.s ? d.out.s : "");
    diag_free(&d);
    return m;
}

static void expect_valid(const char *name, const char *src) {
    t_case("pathological valid %s", name);
    graph_free(parse_valid(src));
}

/* check (and with witness, check --witness) of base against dist, written to
 * build/; the verdict, and the first finding's message in *msg (caller frees). */
static int check_pair_texts(const char *base, const char *dist, bool witness, char **msg) {
    static const char *const paths[2] = {"build/path-base.hlo", "build/path-dist.hlo"};
    const char *texts[2] = {base, dist};
    for (int k = 0; k < 2; k++) {
        FILE *f = fopen(paths[k], "w");
        if (f) fputs(texts[k], f);
        if (f) fclose(f);
    }
    check_opts o = {.name = "p", .baseline = paths[0], .distributed = paths[1], .auto_relations = true, .witness = witness};
    diag d;
    diag_init(&d, "p");
    json_t *trace = NULL;
    int v = check_pair(&o, &trace, &d);
    const char *m = d.out.s ? d.out.s : "";
    json_t *fs = trace ? json_object_get(trace, "findings") : NULL;
    if (fs && json_array_size(fs)) m = json_string_value(json_object_get(json_array_get(fs, 0), "message"));
    if (msg) *msg = xstrdup(m ? m : "");
    json_decref(trace);
    diag_free(&d);
    return v;
}

/* A chain of n computations, each calling the next; the last negates. */
static char *call_chain(int n) {
    strbuf b;
    sb_init(&b);
    sb_puts(&b, "HloModule m\nc0 {\n p = f32[4] parameter(0)\n ROOT r = f32[4] negate(p)\n}\n");
    for (int i = 1; i < n; i++)
        sb_printf(&b, "c%d {\n p = f32[4] parameter(0)\n ROOT r = f32[4] call(p), to_apply=c%d\n}\n", i, i - 1);
    sb_printf(&b, "ENTRY e {\n p = f32[4] parameter(0)\n ROOT r = f32[4] call(p), to_apply=c%d\n}\n", n - 1);
    return sb_take(&b);
}

/* A while loop over f32[n] whose counter goes down from 0 while the
 * condition waits for it to reach 10: it never ends. body_op: add or multiply. */
static char *endless_loop(int n, const char *body_op) {
    strbuf b;
    sb_init(&b);
    sb_printf(&b,
              "HloModule m\ncond {\n p = (s32[], f32[%d]) parameter(0)\n i = s32[] get-tuple-element(p), index=0\n"
              " n = s32[] constant(10)\n ROOT c = pred[] compare(i, n), direction=LT\n}\n"
              "body {\n p = (s32[], f32[%d]) parameter(0)\n i = s32[] get-tuple-element(p), index=0\n"
              " x = f32[%d] get-tuple-element(p), index=1\n one = s32[] constant(1)\n j = s32[] subtract(i, one)\n"
              " y = f32[%d] %s(x, x)\n ROOT t = (s32[], f32[%d]) tuple(j, y)\n}\n"
              "ENTRY e {\n x = f32[%d] parameter(0)\n z = s32[] constant(0)\n t = (s32[], f32[%d]) tuple(z, x)\n"
              " w = (s32[], f32[%d]) while(t), condition=cond, body=body\n ROOT r = f32[%d] get-tuple-element(w), index=1\n}\n",
              n, n, n, n, body_op, n, n, n, n, n);
    return sb_take(&b);
}

static void structure(void) {
    /* Wrong arities: each crashed the interpreter or the lifter, or verified. */
    static const char *const two = "HloModule m\nENTRY e {\n p = f32[4] parameter(0)\n q = pred[4] parameter(1)\n";
    char *s;
    s = repeat(two, "", 0, " ROOT a = f32[4] add(p)\n}\n");
    expect_error("add with one operand", s, "p.hlo:5:2: e: a: add takes 2 operands, not 1");
    free(s);
    s = repeat(two, "", 0, " ROOT a = f32[4] abs()\n}\n");
    expect_error("abs with none", s, "abs takes 1 operand, not 0");
    free(s);
    s = repeat(two, "", 0, " ROOT a = f32[4] select(q, p)\n}\n");
    expect_error("select with two", s, "select takes 3 operands, not 2");
    free(s);
    /* Element-by-element ops whose operands disagree with the result's dims
     * (once read, and lifted as if the result had the operands' shape). */
    s = repeat(two, "", 0, " ROOT a = pred[2] compare(p, p), direction=EQ\n}\n");
    expect_error("compare of [4] into [2]", s,
                 "p.hlo:5:2: e: a: compare works element by element, but operand 0 has dims [4] and the result [2]");
    free(s);
    s = repeat(two, "", 0, " r = f32[4,1] reshape(p)\n ROOT a = f32[4] add(p, r)\n}\n");
    expect_error("add of [4] and [4,1]", s, "add works element by element, but operand 1 has dims [4,1] and the result [4]");
    free(s);
    s = repeat(two, "", 0, " z = f32[] constant(0)\n ROOT a = f32[4] clamp(z, p, z)\n}\n");
    expect_read("clamp between scalar bounds", s);
    free(s);
    char *add3 = repeat(two, "", 0, " ROOT a = f32[4] add(p, p, p)\n}\n");
    expect_error("add with three", add3, "add takes 2 operands, not 3");
    t_case("pathological add with three operands is not verified against itself");
    char *msg;
    CHECK_EQ(check_pair_texts(add3, add3, false, &msg), VERDICT_ERROR);
    CHECK_CONTAINS(msg, "add takes 2 operands, not 3");
    free(msg);
    t_case("pathological add with one operand under check --witness");
    s = repeat(two, "", 0, " ROOT a = f32[4] add(p)\n}\n");
    CHECK_EQ(check_pair_texts(s, add3, true, &msg), VERDICT_ERROR);
    free(msg);
    free(s);
    free(add3);
    s = repeat("ENTRY e {\n p = f32[] parameter(0)\n ROOT a = f32[] add(p", ", p", 1999999, ")\n}\n");
    expect_error("add with 2,000,000 operands", s, "add takes 2 operands, not 2000000");
    free(s);
    /* (found by make fuzz: the printer read the text as a literal) */
    expect_error("a literal as an attribute", "ENTRY e {\n p = s32[4] parameter(0)\n ROOT n = s32[4] negate(p), literal=le(x)\n}\n",
                 "p.hlo:3:29: 'literal' is no attribute: a constant's value goes inside its parentheses");
    expect_error("call without to_apply", "ENTRY e {\n p = f32[4] parameter(0)\n ROOT c = f32[4] call(p)\n}\n",
                 "p.hlo:3:2: e: c: call needs to_apply");
    expect_error("call passing too few arguments",
                 "f {\n a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT s = f32[] add(a, b)\n}\n"
                 "ENTRY e {\n p = f32[] parameter(0)\n ROOT c = f32[] call(p), to_apply=f\n}\n",
                 "to_apply=f takes 2 parameters where call passes 1");
    expect_error("while without condition",
                 "b {\n ROOT p = f32[] parameter(0)\n}\nENTRY e {\n x = f32[] parameter(0)\n ROOT w = f32[] while(x), body=b\n}\n",
                 "while needs condition");
    expect_error("reduce with an odd operand count",
                 "r {\n a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT s = f32[] add(a, b)\n}\n"
                 "ENTRY e {\n x = f32[4] parameter(0)\n z = f32[] constant(0)\n"
                 " ROOT s = f32[] reduce(x, z, z), dimensions={0}, to_apply=r\n}\n",
                 "reduce takes inputs and as many initial values, not 3 operands");
    /* (found by the mutator: a called computation swapped for an integer
     * add, which the checker took for the float sum it replaced) */
    expect_error("reduce-window of floats with an integer reducer",
                 "r {\n a = s32[] parameter(0)\n b = s32[] parameter(1)\n ROOT s = s32[] add(a, b)\n}\n"
                 "ENTRY e {\n x = f32[4] parameter(0)\n z = f32[] constant(0)\n"
                 " ROOT s = f32[4] reduce-window(x, z), window={size=2 pad=1_0}, to_apply=r\n}\n",
                 "to_apply=r computes s32 where reduce-window gives f32");
    expect_error("all-reduce of integers with a float reducer",
                 "r {\n a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT s = f32[] add(a, b)\n}\n"
                 "ENTRY e {\n x = s32[4] parameter(0)\n ROOT s = s32[4] all-reduce(x), replica_groups={}, to_apply=r\n}\n",
                 "to_apply=r computes f32 where all-reduce gives s32");
    expect_error("sort comparator with the wrong parameter count",
                 "c {\n a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT l = pred[] compare(a, b), direction=LT\n}\n"
                 "ENTRY e {\n x = f32[4] parameter(0)\n y = s32[4] parameter(1)\n"
                 " ROOT s = (f32[4], s32[4]) sort(x, y), dimensions={0}, to_apply=c\n}\n",
                 "to_apply=c takes 2 parameters where sort passes 4");
    expect_error("dynamic-slice with too few indices",
                 "ENTRY e {\n a = f32[8,4] parameter(0)\n i = s32[] parameter(1)\n"
                 " ROOT r = f32[2,4] dynamic-slice(a, i), dynamic_slice_sizes={2,4}\n}\n",
                 "dynamic-slice of a rank-2 operand takes 3 operands, not 2");
    expect_error("sort dimension 2^32",
                 "c {\n a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT l = pred[] compare(a, b), direction=LT\n}\n"
                 "ENTRY e {\n x = f32[4] parameter(0)\n ROOT s = f32[4] sort(x), dimensions={4294967296}, to_apply=c\n}\n",
                 "dimensions names dimension 4294967296, out of range");
    expect_error("iota dimension beyond the rank", "ENTRY e {\n ROOT i = s32[4] iota(), iota_dimension=1\n}\n",
                 "iota_dimension 1 of a rank-1 result");
    expect_error("get-tuple-element beyond the tuple",
                 "ENTRY e {\n p = (f32[], f32[]) parameter(0)\n ROOT g = f32[] get-tuple-element(p), index=2\n}\n",
                 "get-tuple-element index 2 of a shorter tuple");
    expect_error("conditional with a missing branch operand",
                 "b {\n ROOT p = f32[] parameter(0)\n}\nENTRY e {\n i = s32[] parameter(0)\n x = f32[] parameter(1)\n"
                 " ROOT c = f32[] conditional(i, x), branch_computations={b, b}\n}\n",
                 "conditional with 2 branches takes 3 operands, not 2");

    t_case("pathological every opcode has an operand rule");
    int lo, hi, unlisted = 0;
    for (int op = 1; op < OP_COUNT; op++)
        if (!graph_op_operands(op, &lo, &hi)) {
            unlisted++;
            printf("note: %s has no operand rule\n", hlo_op_name(op));
        }
    CHECK_EQ(unlisted, 0);
    /* Spot checks against XLA's opcode table (hlo_opcode.h arities). */
    static const struct { int op, lo, hi; } xla[] = {
        {OP_ABS, 1, 1}, {OP_ADD, 2, 2}, {OP_SELECT, 3, 3}, {OP_CLAMP, 3, 3}, {OP_BATCH_NORM_GRAD, 5, 5},
        {OP_RAGGED_ALL_TO_ALL, 6, 6}, {OP_TUPLE, 0, -1}, {OP_AFTER_ALL, 0, -1}, {OP_CUSTOM_CALL, 0, -1},
        {OP_ALL_REDUCE, 1, -1}, {OP_SORT, 1, -1}, {OP_REDUCE, 2, -1}, {OP_SCATTER, 3, -1}, {OP_WHILE, 1, 1},
        {OP_OUTFEED, 2, 2}, {OP_IOTA, 0, 0}, {OP_CALL, 0, -1}, {OP_CONDITIONAL, 2, -1}};
    for (size_t k = 0; k < ARRAY_LEN(xla); k++)
        CHECK_MSG(graph_op_operands(xla[k].op, &lo, &hi) && lo == xla[k].lo && hi == xla[k].hi, "%s: %d..%d",
                  hlo_op_name(xla[k].op), lo, hi);

    /* What XLA accepts must stay accepted: variadic forms. */
    expect_valid("all-reduce with several operands",
                 "HloModule m, num_partitions=2\nr {\n a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT s = f32[] add(a, b)\n}\n"
                 "ENTRY e {\n x = f32[4] parameter(0)\n y = f32[2] parameter(1)\n"
                 " ROOT a = (f32[4], f32[2]) all-reduce(x, y), replica_groups={{0,1}}, to_apply=r\n}\n");
    expect_valid("variadic reduce",
                 "r {\n a = f32[] parameter(0)\n b = s32[] parameter(1)\n c = f32[] parameter(2)\n d = s32[] parameter(3)\n"
                 " m = f32[] maximum(a, c)\n n = s32[] minimum(b, d)\n ROOT t = (f32[], s32[]) tuple(m, n)\n}\n"
                 "ENTRY e {\n x = f32[4] parameter(0)\n y = s32[4] parameter(1)\n z = f32[] constant(0)\n w = s32[] constant(0)\n"
                 " ROOT s = (f32[], s32[]) reduce(x, y, z, w), dimensions={0}, to_apply=r\n}\n");
    expect_valid("empty tuple, operand-less custom-call and after-all",
                 "ENTRY e {\n t = () tuple()\n c = f32[2] custom-call(), custom_call_target=\"foo\"\n a = token[] after-all()\n"
                 " ROOT r = (f32[2], token[]) tuple(c, a)\n}\n");
    expect_valid("dynamic-slice with an index vector (XLA's older form)",
                 "ENTRY e {\n a = f32[8,4] parameter(0)\n i = s32[2] parameter(1)\n"
                 " ROOT r = f32[2,4] dynamic-slice(a, i), dynamic_slice_sizes={2,4}\n}\n");
    expect_valid("conditional with true and false computations",
                 "b {\n ROOT p = f32[] parameter(0)\n}\nENTRY e {\n i = pred[] parameter(0)\n x = f32[] parameter(1)\n"
                 " ROOT c = f32[] conditional(i, x, x), true_computation=b, false_computation=b\n}\n");

    /* Device numbering. */
    s = repeat("HloModule m, num_partitions=8\n", sum_comp, 1,
               "ENTRY e {\n p = f32[4] parameter(0)\n ROOT x = f32[4] all-reduce(p), channel_id=1, use_global_device_ids=true, "
               "replica_groups=mesh['a'=4,'b'=2], device_ids=([4,2]T(100000000,0)) {'a'}, to_apply=r\n}\n");
    expect_error("mesh device order with a hostile permutation", s, "mesh device_ids order is not a permutation of the 8 devices");
    free(s);
    s = repeat("HloModule m, num_partitions=8\n", sum_comp, 1,
               "ENTRY e {\n p = f32[4] parameter(0)\n ROOT x = f32[4] all-reduce(p), channel_id=1, use_global_device_ids=true, "
               "replica_groups=mesh['a'=4,'b'=2], device_ids=(0,1,2,3,4,5,6,6) {'a'}, to_apply=r\n}\n");
    expect_error("mesh device_ids naming a device twice", s, "mesh device_ids are not a permutation of the 8 devices");
    free(s);
    s = repeat("HloModule m, num_partitions=8\n", sum_comp, 1,
               "ENTRY e {\n p = f32[4] parameter(0)\n ROOT x = f32[4] all-reduce(p), channel_id=1, use_global_device_ids=true, "
               "replica_groups=mesh['a'=4,'b'=2], device_ids=([2,4]T(1,0)) {'a'}, to_apply=r\n}\n");
    expect_valid("mesh device order, transposed", s);
    free(s);
    s = repeat("", sum_comp, 1,
               "ENTRY e {\n p = f32[4] parameter(0)\n ROOT x = f32[4] all-reduce(p), replica_groups={{0,1073741824}}, to_apply=r\n}\n");
    expect_error("replica group naming device 2^30", s, "device 1073741824 is not one of the 1048576 a module may name");
    free(s);
    expect_error("tile assignment of 2^31-1 devices on 2",
                 "HloModule m, num_partitions=2\nENTRY e {\n"
                 " ROOT p = f32[4,4] parameter(0), sharding={devices=[1,2147483647]<=[2147483647]}\n}\n",
                 "tile assignment of 2 dims holds more devices than the 2 there are");
    expect_error("tile assignment naming a device twice",
                 "HloModule m, num_partitions=4\nENTRY e {\n ROOT p = f32[4,4] parameter(0), sharding={devices=[2,2]0,1,1,3}\n}\n",
                 "tile assignment names a device twice");
    expect_error("header with 2^40 devices",
                 "HloModule m, num_partitions=1099511627776\nENTRY e {\n ROOT p = f32[4] parameter(0)\n}\n",
                 "more than 1048576 devices");
    expect_error("stack frame with parent INT_MIN",
                 "FileNames\n1 \"a.py\"\nFunctionNames\n1 \"f\"\nFileLocations\n1 {file_name_id=1 function_name_id=1 line=1}\n"
                 "StackFrames\n1 {file_location_id=1 parent_frame_id=-2147483648}\n"
                 "ENTRY e {\n ROOT p = f32[] parameter(0)\n}\n",
                 "parent_frame_id below 1");

    t_case("pathological eval of a global input of 2^37 elements");
    FILE *gf = fopen("build/path-global.hlo", "w");
    if (gf) {
        fputs("HloModule m, num_partitions=4096\nENTRY e {\n p = f32[8192,4096] parameter(0), sharding={devices=[4096,1]<=[4096]}\n"
              " ROOT n = f32[8192,4096] negate(p)\n}\n", gf);
        fclose(gf);
    }
    strbuf cmd;
    sb_init(&cmd);
    sb_printf(&cmd, "%s eval build/path-global.hlo --devices 2", t_scalify());
    int status;
    char *said = t_run(cmd.s, &status);
    CHECK_EQ(status, 2);
    CHECK_CONTAINS(said, "parameter 0 (p) is too large (its global form holds more than 134217728 elements)");
    free(said);
    sb_free(&cmd);

    /* Depth: 200 levels of calls work everywhere, 201 are refused by name. */
    t_case("pathological 200 nested calls evaluate");
    s = call_chain(GRAPH_MAX_CALL_DEPTH - 1); /* and the entry */
    hlo_module *m = parse_valid(s);
    if (m) {
        interp_val *in = interp_val_new(DT_F32, 1, (int64_t[]){4}), *out = NULL;
        interp_val_set(in, 0, 2);
        interp_val **args[1] = {&in};
        strbuf err;
        sb_init(&err);
        CHECK_MSG(interp_run(m, NULL, (interp_val **const *)args, &out, &err) == INTERP_OK, "%s", err.s ? err.s : "");
        CHECK(out && interp_val_get(out, 0) == -2);
        interp_val_free(out);
        interp_val_free(in);
        sb_free(&err);
    }
    graph_free(m);
    t_case("pathological 200 nested calls verify against themselves");
    CHECK_EQ(check_pair_texts(s, s, true, NULL), VERDICT_VERIFIED);
    free(s);
    s = call_chain(1100);
    expect_error("1,100 nested calls", s, "computation c200 starts a chain of calls 201 levels deep: more than the limit of 200");
    t_case("pathological 1,100 nested calls under check");
    CHECK_EQ(check_pair_texts(s, s, false, NULL), VERDICT_ERROR);
    free(s);
    s = call_chain(150000);
    expect_error("150,000 nested calls", s, "more than the limit of 200");
    free(s);

    /* Width: 65,536 operands (valid HLO) lift through the e-graph. */
    t_case("pathological concatenate of 65,536 operands verifies");
    s = repeat("ENTRY e {\n p = f32[1] parameter(0)\n ROOT c = f32[65536] concatenate(p", ", p", 65535, "), dimensions={0}\n}\n");
    CHECK_EQ(check_pair_texts(s, s, false, NULL), VERDICT_VERIFIED);
    free(s);
    t_case("pathological e-graph node with 100,000 children");
    egraph *g = eg_new();
    uint32_t t = eg_type(g, DT_F32, NULL, 0);
    eid leaf[2] = {eg_add(g, OP_PARAMETER, 0, t, NULL, 0, EG_BASELINE), eg_add(g, OP_IOTA, 0, t, NULL, 0, EG_BASELINE)};
    eid *kids = xmalloc(100000 * sizeof *kids);
    for (int i = 0; i < 100000; i++) kids[i] = leaf[i % 2];
    eid wide = eg_add(g, OP_TUPLE, 0, t, kids, 100000, EG_BASELINE);
    kids[99999] = leaf[0];
    eid other = eg_add(g, OP_TUPLE, 0, t, kids, 100000, EG_BASELINE);
    CHECK(wide != other);
    kids[99999] = leaf[1];
    CHECK_EQ(eg_lookup(g, OP_TUPLE, 0, t, kids, 100000), wide);
    CHECK_EQ(eg_lookup(g, OP_TUPLE, 0, t, kids, 65535), EID_NONE);
    uint32_t n;
    const eid *ch = eg_node_children(g, eg_class_first(g, wide), &n);
    CHECK_EQ(n, 100000);
    CHECK(ch[99999] == leaf[1] && ch[0] == leaf[0]);
    eg_union(g, leaf[0], leaf[1], NULL);
    eg_rebuild(g);
    CHECK_EQ(eg_find(g, wide), eg_find(g, other));
    CHECK_EQ(eg_check(g, NULL), 0);
    free(kids);
    eg_free(g);

    /* Time: a loop that never ends stops at the step budget. */
    t_case("pathological endless loop: eval stops at the step budget");
    s = endless_loop(64, "add");
    m = parse_valid(s);
    if (m) {
        interp_val *in = interp_val_new(DT_F32, 1, (int64_t[]){64}), *out = NULL;
        interp_val **args[1] = {&in};
        strbuf err;
        sb_init(&err);
        interp_config cfg = {.max_steps = 1000000};
        double t0 = now_ms();
        CHECK_EQ(interp_run(m, &cfg, (interp_val **const *)args, &out, &err), INTERP_EBUDGET);
        CHECK_CONTAINS(err.s, "did not finish within the step budget of 1000000 element steps");
        CHECK(out == NULL);
        CHECK(now_ms() - t0 < 5000);
        interp_val_free(in);
        sb_free(&err);
    }
    graph_free(m);
    free(s);
    t_case("pathological endless loop: check --witness says the witness did not finish");
    s = endless_loop(65536, "add");
    char *s2 = endless_loop(65536, "multiply");
    double t0 = now_ms();
    int v = check_pair_texts(s, s2, true, &msg);
    CHECK_EQ(v, VERDICT_UNVERIFIED);
    CHECK_CONTAINS(msg, "unverified: ");
    CHECK_CONTAINS(msg, "witness did not finish: baseline: ");
    printf("note: endless loop witness stopped in %.0f ms\n", now_ms() - t0);
    free(msg);
    free(s);
    free(s2);
}


/* A gzip bomb: 256 MiB of zeros deflate to about 250 KB; inflating it stops
 * at the budget (64 MiB here), long before the 256 MiB. */
static void gzip_bomb(void) {
    t_case("pathological gzip bomb");
    z_stream z;
    memset(&z, 0, sizeof z);
    CHECK(deflateInit2(&z, 9, Z_DEFLATED, 16 + MAX_WBITS, 9, Z_DEFAULT_STRATEGY) == Z_OK);
    size_t cap = 4 << 20, chunk = 1 << 20;
    unsigned char *out = xmalloc(cap), *zeros = xcalloc(chunk, 1);
    z.next_out = out;
    z.avail_out = (uInt)cap;
    bool ok = true;
    for (int i = 0; i < 256; i++) {
        z.next_in = zeros;
        z.avail_in = (uInt)chunk;
        ok &= deflate(&z, i == 255 ? Z_FINISH : Z_NO_FLUSH) != Z_STREAM_ERROR;
    }
    CHECK(ok);
    size_t n = cap - z.avail_out;
    deflateEnd(&z);
    CHECK(n < (1u << 20) && io_inflate_limit(n) == IO_INFLATE_FREE);
    diag d;
    diag_init(&d, "bomb.gz");
    size_t len = 0;
    double t0 = now_ms();
    char *r = io_gunzip((const char *)out, n, &len, &d);
    CHECK(r == NULL);
    CHECK_CONTAINS(d.out.s, "gzip input inflates to more than 67108864 bytes (100 times its compressed size): refused");
    printf("note: gzip bomb of %zu bytes refused in %.0f ms\n", n, now_ms() - t0);
    free(r);
    diag_free(&d);
    free(out);
    free(zeros);
}


/* The same wrong arity in a protobuf: reported at the instruction's bytes. */
static void pb_position(void) {
    t_case("pathological add with one operand in a protobuf");
    hlo_module *m = parse_valid("ENTRY e {\n p = f32[4] parameter(0)\n ROOT a = f32[4] add(p, p)\n}\n");
    if (!m) return;
    m->comps[0].instrs[1].noperands = 1;
    strbuf b;
    sb_init(&b);
    hlo_write_pb(m, &b);
    graph_free(m);
    diag d;
    diag_init(&d, "p.pb");
    m = hlo_parse_pb((const uint8_t *)b.s, b.len, "p.pb", &d);
    CHECK(m == NULL);
    unsigned long off = 0;
    CHECK_MSG(d.out.s && sscanf(d.out.s, "p.pb: byte %lu: field computations[0].instructions[1]: ", &off) == 1 && off > 0,
              "%s", d.out.s ? d.out.s : "");
    CHECK_CONTAINS(d.out.s, "e: a: add takes 2 operands, not 1");
    graph_free(m);
    diag_free(&d);
    sb_free(&b);
}

void suite_pathological(void);
void suite_pathological(void) {
    truncations("tests/cases/variants.hlo");
    /* A real JAX dump when the samples are present. */
    char **list = t_list("samples/tiny", ".dist.hlo");
    if (list[0]) truncations(list[0]);
    t_free_list(list);

    expect_error("undefined operand", "ENTRY e {\n p = f32[] parameter(0)\n ROOT n = f32[] negate(q)\n}\n",
                 "p.hlo:3:24: operand 'q' is not defined before its use");
    expect_error("later operand", "ENTRY e {\n p = f32[] parameter(0)\n a = f32[] negate(b)\n ROOT b = f32[] negate(p)\n}\n",
                 "operand 'b' is not defined before its use");
    expect_error("self operand", "ENTRY e {\n ROOT a = f32[] negate(a)\n}\n", "operand 'a' is not defined");
    expect_error("call cycle",
                 "a {\n p = f32[] parameter(0)\n ROOT c = f32[] call(p), to_apply=b\n}\n"
                 "b {\n p = f32[] parameter(0)\n ROOT c = f32[] call(p), to_apply=a\n}\n"
                 "ENTRY e {\n p = f32[] parameter(0)\n ROOT c = f32[] call(p), to_apply=a\n}\n",
                 "cycle");
    expect_error("dot dimension out of range",
                 "ENTRY e {\n x = f32[4,3] parameter(0)\n w = f32[3,4] parameter(1)\n"
                 " ROOT d = f32[4,4] dot(x, w), lhs_contracting_dims={9}, rhs_contracting_dims={0}\n}\n",
                 "lhs_contracting_dims names dimension 9, out of range");
    expect_error("transpose dimension out of range",
                 "ENTRY e {\n x = f32[4,3] parameter(0)\n ROOT t = f32[3,4] transpose(x), dimensions={1,2}\n}\n",
                 "dimensions names dimension 2, out of range");
    expect_error("transpose not a permutation",
                 "ENTRY e {\n x = f32[4,4] parameter(0)\n ROOT t = f32[4,4] transpose(x), dimensions={1,1}\n}\n",
                 "dimensions is not a permutation");
    expect_error("broadcast dimension negative",
                 "ENTRY e {\n x = f32[4] parameter(0)\n ROOT b = f32[4,3] broadcast(x), dimensions={-1}\n}\n",
                 "dimensions names dimension -1, out of range");
    expect_error("scatter window dimension out of range",
                 "add {\n x = f32[] parameter(0)\n y = f32[] parameter(1)\n ROOT s = f32[] add(x, y)\n}\n"
                 "ENTRY e {\n o = f32[4,3] parameter(0)\n i = s32[2,1] parameter(1)\n u = f32[2,3] parameter(2)\n"
                 " ROOT r = f32[4,3] scatter(o, i, u), update_window_dims={7}, inserted_window_dims={0}, "
                 "scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=add\n}\n",
                 "p.hlo:10:2: e: r: update_window_dims names dimension 7, out of range");
    expect_error("gather index_vector_dim out of range",
                 "ENTRY e {\n t = f32[8,4] parameter(0)\n i = s32[3,1] parameter(1)\n"
                 " ROOT r = f32[3,4] gather(t, i), offset_dims={1}, collapsed_slice_dims={0}, start_index_map={0}, "
                 "index_vector_dim=5, slice_sizes={1,4}\n}\n",
                 "index_vector_dim names dimension 5, out of range");
    expect_error("gather start_index_map out of range",
                 "ENTRY e {\n t = f32[8,4] parameter(0)\n i = s32[3,1] parameter(1)\n"
                 " ROOT r = f32[3,4] gather(t, i), offset_dims={1}, collapsed_slice_dims={0}, start_index_map={2}, "
                 "index_vector_dim=1, slice_sizes={1,4}\n}\n",
                 "start_index_map names dimension 2, out of range");
    expect_error("dynamic_slice_sizes disagree with the shape",  /* was a checker mutation test; now refused on reading */
                 "ENTRY e {\n a = f32[8,4] parameter(0)\n i = s32[] parameter(1)\n"
                 " ROOT r = f32[2,4] dynamic-slice(a, i, i), dynamic_slice_sizes={2,7}\n}\n",
                 "p.hlo:4:2: e: r: dynamic_slice_sizes differ from the result's dims");
    /* once a crash of the checker (endless recursion over a tuple holding itself) */
    expect_error("tuple of an array type", "ENTRY e {\n a = f32[4] parameter(0)\n t = (f32[4]) tuple(a)\n"
                 " ROOT r = f32[4] tuple(t)\n}\n",
                 "p.hlo:4:2: e: r: tuple of 1 operands must have a tuple type of 1 elements");
    /* once a crash of the reader (a mutant permuting two operands into one array) */
    expect_error("collective of two operands into one array", "ENTRY e {\n a = f32[4] parameter(0)\n"
                 " ROOT r = f32[4] collective-permute(a, a), channel_id=1, source_target_pairs={{0,1},{1,0}}\n}\n",
                 "p.hlo:3:2: e: r: collective-permute of 2 operands must give a tuple of 2 results");
    /* once a crash of the checker (a mutant broadcasting a scalar with dimensions={0}) */
    expect_error("broadcast dims not the operand's", "ENTRY e {\n a = f32[] parameter(0)\n"
                 " ROOT r = f32[4,8] broadcast(a), dimensions={0}\n}\n",
                 "p.hlo:3:2: e: r: dimensions does not map each operand dim to a result dim of its size");
    expect_error("broadcast of another size", "ENTRY e {\n a = f32[5] parameter(0)\n"
                 " ROOT r = f32[4,3] broadcast(a), dimensions={0}\n}\n",
                 "p.hlo:3:2: e: r: dimensions does not map each operand dim to a result dim of its size");
    expect_error("self call", "ENTRY e {\n p = f32[] parameter(0)\n ROOT c = f32[] call(p), to_apply=e\n}\n", "cycle");
    expect_error("unknown computation", "ENTRY e {\n p = f32[] parameter(0)\n ROOT c = f32[] call(p), to_apply=nope\n}\n",
                 "p.hlo:3:35: unknown computation 'nope'");
    expect_error("dimension 2^62", "ENTRY e {\n ROOT p = f32[4611686018427387904] parameter(0)\n}\n", "invalid shape");
    expect_error("element count overflow", "ENTRY e {\n ROOT p = f32[4294967296,4294967296] parameter(0)\n}\n",
                 "element count overflows");
    expect_error("dimension beyond int64", "ENTRY e {\n ROOT p = f32[99999999999999999999] parameter(0)\n}\n",
                 "does not fit in 64 bits");
    expect_error("negative dimension", "ENTRY e {\n ROOT p = f32[-3] parameter(0)\n}\n", "negative");
    expect_error("empty input", "", "no computations");
    expect_error("only comments", "// nothing\n/* here */\n", "no computations");
    expect_error("unknown element type", "ENTRY e {\n ROOT p = q17[2] parameter(0)\n}\n", "unknown element type 'q17'");
    expect_error("two roots", "ENTRY e {\n ROOT p = f32[] parameter(0)\n ROOT n = f32[] negate(p)\n}\n", "second ROOT");
    expect_error("two entries", "ENTRY a {\n ROOT p = f32[] parameter(0)\n}\nENTRY b {\n ROOT p = f32[] parameter(0)\n}\n",
                 "second ENTRY");
    expect_error("duplicate name", "ENTRY e {\n p = f32[] parameter(0)\n p = f32[] negate(p)\n}\n", "defined twice");
    expect_error("missing parameter", "ENTRY e {\n p = f32[] parameter(1)\n}\n", "has no parameter 0");
    expect_error("duplicate parameter", "ENTRY e {\n p = f32[] parameter(0)\n q = f32[] parameter(0)\n}\n", "used twice");
    expect_error("unterminated computation", "ENTRY e {\n p = f32[] parameter(0)\n", "found end of input");
    expect_error("unterminated string", "ENTRY e {\n p = f32[] parameter(0), metadata={op_name=\"abc\n}\n", "expected a string");
    expect_error("unterminated comment", "ENTRY e {\n p = f32[] parameter(0) /* never closed\n}\n", "end of input");
    expect_error("literal too short", "ENTRY e {\n ROOT c = f32[3] constant({1, 2})\n}\n", "has 2 values but its shape holds 3");
    expect_error("literal too long", "ENTRY e {\n ROOT c = f32[1] constant({1, 2})\n}\n", "more than the 1 values");
    expect_error("bad literal", "ENTRY e {\n ROOT c = s32[] constant(12abc)\n}\n", "invalid s32 value");
    expect_error("NUL byte", "ENTRY e {\n ROOT p = f32[] parameter(0)\0\n}\n", "");
    expect_error("bad iota groups",
                 "r {\n a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT s = f32[] add(a, b)\n}\n"
                 "ENTRY e {\n p = f32[] parameter(0)\n ROOT x = f32[] all-reduce(p), replica_groups=[2,4]<=[6], to_apply=r\n}\n",
                 "do not cover");
    expect_error("bad stack frame", "FileNames\n1 \"a.py\"\nFileLocations\n1 {file_name_id=3 function_name_id=0 line=1}\n"
                 "ENTRY e {\n ROOT p = f32[] parameter(0)\n}\n", "names a missing file");

    /* 10,000 nested braces: kept as raw text when balanced, refused when not. */
    t_case("pathological 10000 nested braces, balanced");
    char *s = repeat("ENTRY e {\n ROOT p = f32[] parameter(0), deep=", "{", 10000, "");
    char *s2 = repeat(s, "}", 10000, "\n}\n");
    bool parsed;
    CHECK(clean(s2, strlen(s2), &parsed, NULL) && parsed);
    free(s);
    free(s2);
    s = repeat("ENTRY e {\n ROOT p = f32[] parameter(0), deep=", "{", 10000, "\n}\n");
    expect_error("10000 nested braces, unbalanced", s, "unbalanced");
    free(s);
    s = repeat("ENTRY e {\n ROOT p = ", "(", 10000, "f32[]) parameter(0)\n}\n");
    expect_error("10000 nested tuple shapes", s, "nesting deeper than");
    free(s);
    s = repeat("ENTRY e {\n ROOT c = f32[] constant(", "{", 10000, "1");
    s2 = repeat(s, "}", 10000, ")\n}\n");
    t_case("pathological 10000 nested literal braces");
    CHECK(clean(s2, strlen(s2), &parsed, NULL));
    free(s);
    free(s2);
    s = repeat("ENTRY e {\n ROOT p = (f32[]) parameter(0), sharding=", "{", 5000, "replicated");
    s2 = repeat(s, "}", 5000, "\n}\n");
    expect_error("5000 nested tuple shardings", s2, "nesting deeper than");
    free(s);
    free(s2);

    /* A 100 MB single line: a huge unknown attribute, then an error at its end. */
    t_case("pathological 100 MB line");
    size_t big = 100u << 20;
    char *line = xmalloc(big + 200);
    strcpy(line, "ENTRY e {\n ROOT p = f32[] parameter(0), blob=\"");
    size_t k = strlen(line);
    memset(line + k, 'x', big);
    k += big;
    strcpy(line + k, "\", oops=\n}\n");
    double t0 = now_ms();
    char *msg;
    CHECK(clean(line, strlen(line), &parsed, &msg));
    CHECK(!parsed);
    CHECK(strlen(msg) < 1000);
    printf("note: 100 MB line refused in %.0f ms\n", now_ms() - t0);
    free(msg);
    free(line);

    structure();
    pb_position();
    gzip_bomb();
}
