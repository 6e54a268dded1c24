/* Text reader: every printer variant of HLO.md read into the right IR. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "hlo.h"

static hlo_module *parse(const char *src, diag *d) {
    diag_init(d, "t.hlo");
    return hlo_parse_text(src, strlen(src), "t.hlo", d);
}

static const hlo_instr *find(const hlo_module *m, const char *name) {
    for (uint32_t c = 0; c < m->ncomps; c++)
        for (uint32_t i = 0; i < m->comps[c].ninstrs; i++)
            if (strcmp(m->comps[c].instrs[i].name, name) == 0) return &m->comps[c].instrs[i];
    return NULL;
}

static char *attr_text(const hlo_module *m, const char *name, int key) {
    const hlo_instr *in = find(m, name);
    strbuf b;
    sb_init(&b);
    const hlo_attr *a = in ? instr_attr(in, key) : NULL;
    if (a) hlo_print_attr_value(&b, m, graph_entry(m), in, a);
    else sb_puts(&b, "(absent)");
    return sb_take(&b);
}

#define CHECK_ATTR(m, name, key, want)               \
    do {                                             \
        char *got_ = attr_text(m, name, key);        \
        CHECK_STR(got_, want);                       \
        free(got_);                                  \
    } while (0)

static void expanded(const hlo_module *m, const char *name, int key, const char *want) {
    const hlo_instr *in = find(m, name);
    arena a;
    arena_init(&a);
    hlo_groups g;
    groups_expand(instr_attr(in, key)->v.groups, &a, &g);
    strbuf b;
    sb_init(&b);
    for (uint32_t i = 0; i < g.ngroups; i++) {
        sb_putc(&b, '{');
        for (uint32_t k = g.start[i]; k < g.start[i + 1]; k++) sb_printf(&b, k > g.start[i] ? ",%lld" : "%lld", (long long)g.ids[k]);
        sb_putc(&b, '}');
    }
    CHECK_STR(b.s ? b.s : "", want);
    sb_free(&b);
    arena_free(&a);
}

/* The reason a parse failed, or "(parsed)". */
static char *refused(const char *src) {
    diag d;
    hlo_module *m = parse(src, &d);
    char *r = xstrdup(m ? "(parsed)" : d.out.s ? d.out.s : "");
    graph_free(m);
    diag_free(&d);
    return r;
}

/* "%t#N" (current XLA pass dumps): element N of tuple-shaped %t, read as an
 * implicit get-tuple-element named "t#N" placed before its first user. */
static void tuple_refs(void) {
    diag d;
    t_case("text-13 %%t#N reads as get-tuple-element N of %%t");
    const char *src = "HloModule h\nENTRY e {\n"
                      "  %p = (s32[], (f32[2]{0}, pred[])) parameter(0)\n"
                      "  %c = s32[] constant(1)\n"
                      "  %a = s32[] add(%p#0, %c)\n"
                      "  %b = s32[] multiply(%p#0, %p#0)\n"
                      "  %n = f32[2]{0} negate(%p#1#0)\n"
                      "  ROOT %t = (s32[], s32[], f32[2]{0}) tuple(%a, %b, %n)\n}\n";
    hlo_module *m = parse(src, &d);
    CHECK_MSG(m != NULL, "%s", d.out.s ? d.out.s : "");
    if (m) {
        const hlo_comp *c = graph_entry(m);
        CHECK_EQ(c->ninstrs, 9);
        const hlo_instr *g0 = find(m, "p#0"), *g1 = find(m, "p#1"), *g10 = find(m, "p#1#0");
        CHECK(g0 && g1 && g10);
        if (g0 && g1 && g10) {
            CHECK_EQ(g0->op, OP_GET_TUPLE_ELEMENT);
            CHECK_STR(g0->opname, "get-tuple-element");
            CHECK_EQ(instr_int(g0, A_INDEX, 0), 0); /* index 0 is the default, not stored */
            CHECK_EQ(g0->shape.dtype, DT_S32);
            CHECK(g0->noperands == 1 && g0->operands[0] == 0);
            /* before its first user, after the instructions already read */
            CHECK(&c->instrs[2] == g0 && strcmp(c->instrs[3].name, "a") == 0);
            CHECK(g0->line == 5 && g0->col == 18);
            CHECK_EQ(instr_int(g10, A_INDEX, 0), 0);
            CHECK_EQ(g10->shape.dtype, DT_F32);
            CHECK(g10->noperands == 1 && &c->instrs[g10->operands[0]] == g1);
            CHECK(g1->shape.dtype == DT_TUPLE && instr_int(g1, A_INDEX, -1) == 1);
        }
        const hlo_instr *b = find(m, "b");
        CHECK(b && b->noperands == 2 && b->operands[0] == 2 && b->operands[1] == 2);
        CHECK_EQ(c->root, 8);
        CHECK_EQ(graph_check(m, NULL), 0);

        t_case("text-14 the printed form names the elements and reads back alike");
        strbuf a, b2;
        sb_init(&a);
        sb_init(&b2);
        hlo_print(&a, m);
        CHECK(strstr(a.s, "%p#1#0 = f32[2]{0} get-tuple-element(%p#1), index=0") != NULL);
        hlo_module *r = parse(a.s, &d);
        CHECK_MSG(r != NULL, "%s", d.out.s ? d.out.s : "");
        if (r) {
            strbuf why;
            sb_init(&why);
            CHECK_MSG(graph_equal(m, r, 0, &why), "%s", why.s ? why.s : "");
            hlo_print(&b2, r);
            CHECK_STR(a.s, b2.s);
            sb_free(&why);
        }
        graph_free(r);
        sb_free(&a);
        sb_free(&b2);
    }
    graph_free(m);
    diag_free(&d);

    t_case("text-15 bad tuple references are refused with a position");
    const char *head = "HloModule h\nENTRY e {\n  %p = (s32[], f32[]) parameter(0)\n  %x = s32[] parameter(1)\n";
    struct { const char *body, *want; } bad[] = {
        {"  ROOT %a = s32[] negate(%x#0)\n}\n", "t.hlo:5:26: 'x' is not a tuple: it has no element 0"},
        {"  ROOT %a = s32[] negate(%p#2)\n}\n", "t.hlo:5:29: tuple index 2 out of range: 'p' has 2 elements"},
        {"  ROOT %a = s32[] negate(%p#)\n}\n", "t.hlo:5:29: expected a tuple index after '#'"},
        {"  ROOT %a = s32[] negate(%p#99999999999)\n}\n", "t.hlo:5:29: tuple index out of range"},
        {"  %a = s32[] negate(%p#0)\n  %p#0 = s32[] constant(0)\n}\n", "t.hlo:6:3: instruction 'p#0' is defined twice"},
        {"  ROOT %p#0 = s32[] get-tuple-element(%p#0), index=0\n}\n", "t.hlo:5:8: instruction 'p#0' is defined twice"},
        {"  ROOT %a = s32[] negate(%x), control-predecessors={%p#1}\n}\n", "t.hlo:5:53: unknown instruction 'p#1'"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
        char src2[512];
        snprintf(src2, sizeof src2, "%s%s", head, bad[k].body);
        char *why = refused(src2);
        CHECK_MSG(strncmp(why, bad[k].want, strlen(bad[k].want)) == 0, "case %zu: %s", k, why);
        free(why);
    }
}

/* The raw text of unknown attribute key of instruction name, or NULL. */
static const char *raw_attr(const hlo_module *m, const char *name, const char *key) {
    const hlo_instr *in = find(m, name);
    for (uint32_t k = 0; in && k < in->nattrs; k++)
        if (in->attrs[k].key == A_RAW && strcmp(in->attrs[k].raw_key, key) == 0) return in->attrs[k].v.str;
    return NULL;
}

/* A control predecessor may be an element the text names as %t#N. */
static void tuple_ref_control(void) {
    t_case("text-20 control-predecessors name elements, before or after their first use");
    diag d;
    hlo_module *m = parse("HloModule h\nENTRY e {\n  %p = (f32[], f32[]) parameter(0)\n"
                          "  %a = f32[] negate(%p#0), control-predecessors={%p#1}\n"
                          "  ROOT %b = f32[] negate(%p#1), control-predecessors={%p#0}\n}\n", &d);
    CHECK_MSG(m != NULL, "%s", d.out.s ? d.out.s : "");
    if (m) {
        uint32_t n;
        const int64_t *ca = instr_ints(find(m, "a"), A_CONTROL_PREDECESSORS, &n);
        CHECK(n == 1 && ca && &graph_entry(m)->instrs[ca[0]] == find(m, "p#1"));
        const int64_t *cb = instr_ints(find(m, "b"), A_CONTROL_PREDECESSORS, &n);
        CHECK(n == 1 && cb && &graph_entry(m)->instrs[cb[0]] == find(m, "p#0"));
    }
    graph_free(m);
    diag_free(&d);
}

/* tests/cases/current_xla.hlo: what the current printer writes. */
static void current_xla(void) {
    diag d;
    diag_init(&d, "current_xla.hlo");
    t_case("text-16 current_xla.hlo parses");
    hlo_module *m = hlo_read_file("tests/cases/current_xla.hlo", &d);
    CHECK_MSG(m != NULL, "%s", d.out.s ? d.out.s : "");
    diag_free(&d);
    if (!m) return;
    t_case("text-17 elements of a while parameter and nested tuples");
    const hlo_instr *t1 = find(m, "t#1"), *n = find(m, "p0#1#0"), *l0 = find(m, "loop#0");
    CHECK(t1 && t1->op == OP_GET_TUPLE_ELEMENT && t1->shape.dtype == DT_S32);
    CHECK(n && n->op == OP_GET_TUPLE_ELEMENT && n->shape.dtype == DT_F32 && find(m, "p0#1"));
    const hlo_instr *mul = find(m, "m");
    CHECK(l0 && mul && mul->noperands == 2 && mul->operands[0] == mul->operands[1]);
    CHECK(find(m, "c#1") && find(m, "c#0") == NULL);
    CHECK_EQ(m->comps[0].reducer, RED_SUM); /* execution_thread after the brace is read past */
    t_case("text-18 shardings by mesh axes stay text, never replicated");
    CHECK_ATTR(m, "p1", A_SHARDING,
               "{mesh['a'=2,'b'=4], device_ids=([4,2]T(1,0)), [{'b':(2)2}, {'a', ?}], replicated={'b':(1)2}, "
               "unreduced=max{}, metadata={{op_name=\"foo\"}}}");
    const hlo_sharding *ps = instr_attr(find(m, "p0"), A_SHARDING)->v.sharding;
    CHECK(ps->type == SH_TUPLE && ps->ntuple == 2 && ps->tuple[0].type == SH_RAW && ps->tuple[1].type == SH_TUPLE);
    CHECK(ps->tuple[1].ntuple == 2 && ps->tuple[1].tuple[1].type == SH_RAW);
    CHECK_EQ(instr_attr(find(m, "g"), A_SHARDING)->v.sharding->type, SH_RAW);
    {
        t_case("text-18b a sharding's own metadata is no part of it (the protobuf form has none)");
        diag d2;
        hlo_module *m2 = parse("HloModule u\nENTRY e {\n  p = f32[8,8] parameter(0)\n"
                               "  ROOT d = f32[8,8] dot(p, p), lhs_contracting_dims={1}, rhs_contracting_dims={0}, "
                               "sharding={devices=[2,1,4]<=[8] last_tile_dims={unreduced} metadata={op_type=\"sdy::reduction_op\" "
                               "op_name=\"SUM\"}}\n}\n",
                               &d2);
        const hlo_instr *dd = m2 ? find(m2, "d") : NULL;
        const hlo_sharding *sh = dd ? instr_attr(dd, A_SHARDING)->v.sharding : NULL;
        CHECK(sh && sh->type == SH_OTHER && sh->nlast == 1 && sh->last_tile_dims[0] == SH_UNREDUCED);
        if (m2) CHECK_ATTR(m2, "d", A_SHARDING, "{devices=[2,1,4]<=[8] last_tile_dims={unreduced}}");
        graph_free(m2);
        diag_free(&d2);
    }
    t_case("text-19 new attributes kept as text");
    const char *ra = raw_attr(m, "v", "result_accuracy"), *og = raw_attr(m, "r", "origin");
    CHECK_STR(ra ? ra : "", "{tolerance={atol=0,rtol=0,ulps=1}}");
    CHECK_STR(og ? og : "", "{({\"w\"}, {\"i\"})}");
    CHECK(raw_attr(m, "ar", "statistics") != NULL);
    CHECK_ATTR(m, "ar", A_FRONTEND_ATTRIBUTES, "{attr_c=\"{type=\\\"s64\\\"}\", attr_d=\"a=\\\"b/c\\\"\"}");
    graph_free(m);
}

/* src parses and its first computation's reducer is want. */
static void check_reducer(const char *src, int want) {
    diag d;
    hlo_module *m = parse(src, &d);
    CHECK_MSG(m != NULL, "%s", d.out.s ? d.out.s : "");
    diag_free(&d);
    if (!m) return;
    CHECK_EQ(m->comps[0].reducer, want);
    graph_free(m);
}

/* Predicate reducers written out (PyTorch/XLA's `all` and `any`: x != false
 * and y != false combined, then a select of true/false) are read by their
 * truth table; a function of the two inputs that is no reduction (x and not
 * y) and a reducer of another type stay unrecognised. */
static void pred_reducers(void) {
    static const struct { const char *body; int want; } cases[] = {
        {"  a = pred[] and(cx, cy)\n  ROOT s = pred[] select(a, t, f)\n", RED_AND},
        {"  a = pred[] or(cx, cy)\n  ROOT s = pred[] select(a, t, f)\n", RED_OR},
        {"  a = pred[] compare(cx, cy), direction=NE\n  ROOT s = pred[] select(a, t, f)\n", RED_XOR},
        {"  n = pred[] not(cy)\n  ROOT a = pred[] and(cx, n)\n", RED_NONE},
        {"  a = pred[] and(cx, cy)\n  ROOT s = pred[] select(a, f, t)\n", RED_NONE},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        char src[1024];
        snprintf(src, sizeof src,
                 "HloModule r\n\nall {\n  x = pred[] parameter(0)\n  f = pred[] constant(false)\n  t = pred[] constant(true)\n"
                 "  cx = pred[] compare(x, f), direction=NE\n  y = pred[] parameter(1)\n"
                 "  cy = pred[] compare(y, f), direction=NE\n%s}\n\n"
                 "ENTRY e {\n  p = pred[4,3] parameter(0)\n  i = pred[] constant(true)\n"
                 "  ROOT r = pred[4] reduce(p, i), dimensions={1}, to_apply=all\n}\n",
                 cases[k].body);
        t_case("text-20 predicate reducer written out, case %zu", k);
        check_reducer(src, cases[k].want);
    }
}

/* A reducer whose root copies the combining op's scalar (JAX's psum in a
 * shard_map under jit: add, then ROOT copy(add)) is that op's reducer; a
 * copy that converts, or another instruction beside the op, is not. */
static void copied_reducers(void) {
    static const struct { const char *body; int want; } cases[] = {
        {"  a = f32[] add(x, y)\n  ROOT c = f32[] copy(a)\n", RED_SUM},
        {"  a = f32[] maximum(y, x)\n  b = f32[] copy(a)\n  ROOT c = f32[] copy(b)\n", RED_MAX},
        {"  a = f32[] add(x, y)\n  ROOT c = f32[] negate(a)\n", RED_NONE},
        {"  a = f32[] add(x, x)\n  ROOT c = f32[] copy(a)\n", RED_NONE},
        {"  a = f32[] add(x, y)\n  n = f32[] negate(a)\n  ROOT c = f32[] copy(a)\n", RED_NONE},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        char src[1024];
        snprintf(src, sizeof src,
                 "HloModule r\n\nred {\n  x = f32[] parameter(0)\n  y = f32[] parameter(1)\n%s}\n\n"
                 "ENTRY e {\n  p = f32[4,3] parameter(0)\n"
                 "  ROOT r = f32[4,3] all-reduce(p), replica_groups={}, to_apply=red\n}\n",
                 cases[k].body);
        t_case("text-21 reducer under copies, case %zu", k);
        check_reducer(src, cases[k].want);
    }
}

void suite_text(void);
void suite_text(void) {
    pred_reducers();
    copied_reducers();
    diag d;
    size_t n;
    char *src = t_read("tests/cases/variants.hlo", &n);
    t_case("text-1 variants.hlo parses");
    CHECK(src != NULL);
    if (!src) return;
    diag_init(&d, "variants.hlo");
    hlo_module *m = hlo_parse_text(src, n, "variants.hlo", &d);
    CHECK_MSG(m != NULL, "%s", d.out.s ? d.out.s : "");
    diag_free(&d);
    free(src);
    if (!m) return;

    t_case("text-2 module, header, entry");
    CHECK_STR(m->name, "variants");
    CHECK_EQ(m->ncomps, 5);
    CHECK_STR(graph_entry(m)->name, "main.99");
    CHECK_EQ(graph_num_devices(m), 4);
    CHECK_EQ(m->nattrs, 5);
    CHECK_STR(m->attrs[0].raw_key, "is_scheduled");

    t_case("text-3 reducers recognised");
    CHECK_EQ(m->comps[0].reducer, RED_SUM);
    CHECK_EQ(m->comps[1].reducer, RED_MAX);
    CHECK_EQ(m->comps[2].reducer, RED_NONE);
    CHECK_EQ(instr_reducer(m, find(m, "ar")), RED_SUM);
    CHECK_EQ(instr_reducer(m, find(m, "red")), RED_MAX);

    t_case("text-4 replica groups in every form");
    CHECK_ATTR(m, "ar", A_REPLICA_GROUPS, "{{0,1},{2,3}}");
    CHECK_ATTR(m, "ag", A_REPLICA_GROUPS, "[1,4]<=[4]");
    CHECK_ATTR(m, "rs", A_REPLICA_GROUPS, "[2,2]<=[2,2]T(1,0)");
    expanded(m, "ag", A_REPLICA_GROUPS, "{0,1,2,3}");
    expanded(m, "rs", A_REPLICA_GROUPS, "{0,2}{1,3}");
    CHECK_ATTR(m, "cp", A_SOURCE_TARGET_PAIRS, "{{0,1},{1,2},{2,3},{3,0}}");
    CHECK_EQ(instr_int(find(m, "ar"), A_USE_GLOBAL_DEVICE_IDS, 0), 1);
    CHECK_EQ(instr_int(find(m, "ar"), A_CHANNEL_ID, 0), 1);

    t_case("text-5 shardings");
    CHECK_ATTR(m, "Arg_0.1", A_SHARDING, "{devices=[1,4]<=[4]}");
    CHECK_ATTR(m, "Arg_1.2", A_SHARDING, "{replicated}");
    CHECK_ATTR(m, "init", A_SHARDING, "{{replicated}, {devices=[2,2]<=[4] last_tile_dim_replicate}}");
    CHECK_ATTR(m, "w.x", A_SHARDING, "{maximal device=0}");
    CHECK_ATTR(m, "cc", A_SHARDING, "{devices=[2,1,2]0,2,1,3 last_tile_dims={manual}}");
    const hlo_instr *cc2 = find(m, "cc2");
    CHECK(cc2 && instr_attr(cc2, A_SHARDING)->v.sharding->type == SH_RAW);
    CHECK_ATTR(m, "cc2", A_SHARDING, "{mesh['x'=2,'y'=2], [{'y'}, {}]}");
    const hlo_sharding *ts = instr_attr(find(m, "tup5"), A_SHARDING)->v.sharding;
    CHECK_EQ(ts->type, SH_TUPLE);
    CHECK_EQ(ts->ntuple, 6);
    CHECK_EQ(ts->tuple[5].type, SH_MANUAL);

    t_case("text-6 literals");
    const hlo_literal *l1 = instr_attr(find(m, "c.1"), A_LITERAL)->v.lit;
    CHECK_EQ(l1->count, 6);
    CHECK(l1->f && l1->f[1] == 2.5 && l1->f[2] == -3.0 && l1->f[4] > 1e308 && l1->f[5] != l1->f[5]);
    CHECK(l1->f && l1->f[3] == (double)1e-05f);
    CHECK(instr_attr(find(m, "c.0"), A_LITERAL)->v.lit->f[0] < -1e308);
    CHECK(instr_attr(find(m, "c.4"), A_LITERAL)->v.lit->elided);
    const hlo_literal *l3 = instr_attr(find(m, "c.3"), A_LITERAL)->v.lit;
    CHECK((uint64_t)l3->i[0] == 4294967295u);
    const hlo_literal *l2 = instr_attr(find(m, "c.2"), A_LITERAL)->v.lit;
    CHECK(l2->i[0] == 1 && l2->i[1] == 0 && l2->i[2] == 1);

    t_case("text-7 shapes and layouts");
    const hlo_instr *c4 = find(m, "c.4");
    CHECK(c4->shape.layout && c4->shape.layout->ntiles == 2 && c4->shape.layout->memory_space == 1);
    const hlo_instr *dyn = find(m, "dyn");
    CHECK(dyn->shape.dynamic && dyn->shape.dynamic[0] == DIM_BOUNDED && dyn->shape.dynamic[1] == DIM_UNBOUNDED);
    CHECK_EQ(dyn->op, OP_UNKNOWN);
    CHECK_STR(dyn->opname, "some-future-op");
    CHECK_EQ(find(m, "tup5")->noperands, 6);
    CHECK_EQ(find(m, "tup5")->shape.ntuple, 6);

    t_case("text-8 attributes of many kinds");
    CHECK_ATTR(m, "sl", A_SLICE, "{[0:128:2]}");
    CHECK_ATTR(m, "pd2", A_PADDING, "0_0x1_1");
    CHECK_ATTR(m, "pd", A_PADDING, "3_3");
    CHECK_ATTR(m, "dot", A_OPERAND_PRECISION, "{highest,highest}");
    CHECK_ATTR(m, "dot", A_FRONTEND_ATTRIBUTES, "{_xla_compute_type=\"dense\"}");
    CHECK_ATTR(m, "gather", A_SLICE_SIZES, "{1,16}");
    CHECK_EQ(instr_int(find(m, "gather"), A_INDICES_ARE_SORTED, 0), 1);
    CHECK_ATTR(m, "w", A_BACKEND_CONFIG, "{\"known_trip_count\":{\"n\":\"4\"}}");
    CHECK_ATTR(m, "cc2", A_BACKEND_CONFIG, "\"opaque \\\"string\\\"\"");
    CHECK_ATTR(m, "cc", A_CUSTOM_CALL_TARGET, "\"Sharding\"");
    CHECK_ATTR(m, "w", A_CONDITION, "%cond");
    CHECK_ATTR(m, "w", A_BODY, "%body");
    CHECK_ATTR(m, "off", A_DYNAMIC_SLICE_SIZES, "{1}");
    CHECK_ATTR(m, "lt", A_DIRECTION, "LT");
    /* Unknown attributes are kept verbatim, in order, after the known ones. */
    const hlo_instr *cc = find(m, "cc");
    CHECK(cc->nattrs >= 2 && cc->attrs[cc->nattrs - 2].key == A_RAW);
    CHECK_STR(cc->attrs[cc->nattrs - 2].raw_key, "unknown_attr");
    CHECK_STR(cc->attrs[cc->nattrs - 2].v.str, "{a={b,\"c}\"}}");
    CHECK_STR(cc->attrs[cc->nattrs - 1].v.str, "7");
    /* Defaults are absent: index=0 and the broadcast's empty dimensions. */
    CHECK(instr_attr(find(m, "i"), A_INDEX) == NULL);
    CHECK(instr_attr(find(m, "mask"), A_DIMENSIONS) == NULL);

    t_case("text-9 metadata and source locations");
    const hlo_meta *md = find(m, "ar")->meta;
    CHECK(find(m, "ar")->op_name && strcmp(find(m, "ar")->op_name, "jit(f)/layers.0/psum") == 0);
    CHECK(md && md->src_file && strcmp(md->src_file, "/src/layers.py") == 0 && md->src_line == 42);
    md = find(m, "red")->meta;
    CHECK(md && md->stack_frame_id == 2 && md->src_file && strcmp(md->src_file, "/src/layers.py") == 0);
    CHECK(md && md->src_line == 42 && md->src_col == 9);
    CHECK_EQ(m->nframes, 2);
    CHECK_EQ(m->frames[1].parent_frame_id, 1);
    CHECK_EQ(m->frames[0].parent_frame_id, 0);
    graph_free(m);

    t_case("text-10 no ENTRY, no ROOT: the last ones count");
    m = parse("c1 {\n p = f32[2] parameter(0)\n ROOT n = f32[2] negate(p)\n}\nc2 {\n a = f32[] parameter(0)\n b = f32[] abs(a)\n}\n", &d);
    CHECK(m && strcmp(graph_entry(m)->name, "c2") == 0 && graph_entry(m)->root == 1);
    CHECK(m && strcmp(m->name, "unnamed") == 0);
    graph_free(m);
    diag_free(&d);

    t_case("text-11 mesh-axes replica groups");
    m = parse("HloModule g\nr {\n a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT s = f32[] add(a, b)\n}\n"
              "ENTRY e {\n p = f32[4] parameter(0)\n"
              " x = f32[4] all-reduce(p), channel_id=1, replica_groups=mesh['a'=2,'b'=1,'c'=4], device_ids=([4,2]T(1,0)) {'a'}, use_global_device_ids=true, to_apply=r\n"
              " y = f32[4] all-reduce(p), channel_id=2, replica_groups=mesh['a'=2,'c'=4] {'c'}, to_apply=r\n"
              " lo = f32[4] all-reduce(p), channel_id=4, replica_groups=mesh['dp'=2,'tp'=4] {'tp':(2)2}, to_apply=r\n"
              " hi = f32[4] all-reduce(p), channel_id=5, replica_groups=mesh['dp'=2,'tp'=4] {'tp':(1)2}, to_apply=r\n"
              " sw = f32[4] all-to-all(p), channel_id=6, replica_groups=mesh['q'=4] {'q':(2)2,'q':(1)2}, dimensions={0}\n"
              " rv = f32[4] all-to-all(p), channel_id=7, replica_groups=mesh['q'=8] {'q':(4)2,'q':(2)2,'q':(1)2}, dimensions={0}\n"
              " ov = f32[4] all-to-all(p), channel_id=8, replica_groups=mesh['q'=8] {'q':(2)4,'q':(1)4}, dimensions={0}\n"
              " ROOT z = f32[4] all-reduce(p), channel_id=3, replica_groups=mesh['a'=8] {'a':(2)2}, to_apply=r\n}\n", &d);
    CHECK_MSG(m != NULL, "%s", d.out.s ? d.out.s : "");
    if (m) {
        CHECK_ATTR(m, "x", A_REPLICA_GROUPS, "mesh['a'=2,'b'=1,'c'=4], device_ids=([4,2]T(1,0)) {'a'}");
        CHECK_EQ(instr_int(find(m, "x"), A_USE_GLOBAL_DEVICE_IDS, 0), 1);
        /* device order: iota [4,2] transposed = 0,2,4,6,1,3,5,7 on mesh (a,b,c). */
        expanded(m, "x", A_REPLICA_GROUPS, "{0,1}{2,3}{4,5}{6,7}");
        expanded(m, "y", A_REPLICA_GROUPS, "{0,1,2,3}{4,5,6,7}");
        expanded(m, "z", A_REPLICA_GROUPS, "{0,2}{1,3}{4,6}{5,7}");
        /* Shardy's sub-axes: tp=4 is [pre, size, rest]; (2)2 its minor half, (1)2 its major one */
        expanded(m, "lo", A_REPLICA_GROUPS, "{0,1}{2,3}{4,5}{6,7}");
        expanded(m, "hi", A_REPLICA_GROUPS, "{0,2}{1,3}{4,6}{5,7}");
        /* several sub-axes of one axis, minor first: one group in bit-reversed order */
        expanded(m, "sw", A_REPLICA_GROUPS, "{0,2,1,3}");
        expanded(m, "rv", A_REPLICA_GROUPS, "{0,4,2,6,1,5,3,7}");
        /* overlapping sub-axes describe nothing: not expanded (a reader's limit, not a group) */
        CHECK(!groups_expandable(instr_attr(find(m, "ov"), A_REPLICA_GROUPS)->v.groups));
        CHECK(groups_expandable(instr_attr(find(m, "rv"), A_REPLICA_GROUPS)->v.groups));
        CHECK_EQ(graph_num_devices(m), 8);
    }
    graph_free(m);
    diag_free(&d);

    t_case("text-12 header-less corpus files and comments");
    m = parse("// RUN: tool %s\n/* block */ f {\n  %param0 = f32[2]{0} parameter(0) // trailing\n  ROOT result = f32[4]{0} all-gather(%param0),\n    replica_groups={{0,1}}, dimensions={0}\n}\n", &d);
    CHECK(m && m->ncomps == 1 && m->comps[0].instrs[1].op == OP_ALL_GATHER);
    graph_free(m);
    diag_free(&d);

    tuple_refs();
    tuple_ref_control();
    current_xla();
}
