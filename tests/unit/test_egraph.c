/* E-graph core: hash-consing, congruence closure, rebuild, shape analysis. */
#include <stdio.h>
#include <string.h>

#include "egraph.h"
#include "graph.h"
#include "harness.h"
#include "hlo.h"
#include "lift.h"
#include "lift_int.h"

static eid leaf(egraph *g, uint32_t type, int64_t k) {
    uint32_t a = eg_attr(g, &k, 1);
    return eg_add(g, EG_OP_VAR, a, type, NULL, 0, EG_BASELINE);
}

static eid un(egraph *g, uint16_t op, uint32_t type, eid x) { return eg_add(g, op, 0, type, &x, 1, EG_BASELINE); }

static eid bin(egraph *g, uint16_t op, uint32_t type, eid x, eid y) {
    eid c[2] = {x, y};
    return eg_add(g, op, 0, type, c, 2, EG_BASELINE);
}

void suite_egraph(void);
void suite_egraph(void) {
    egraph *g = eg_new();
    int64_t dims[2] = {4, 8};
    uint32_t t = eg_type(g, DT_F32, dims, 2), t2 = eg_type(g, DT_F32, dims, 1);
    strbuf why;
    sb_init(&why);

    t_case("egraph-1 hash-consing");
    eid a = leaf(g, t, 1), b = leaf(g, t, 2), c = leaf(g, t, 3);
    CHECK(a != b);
    CHECK_EQ(leaf(g, t, 1), a);
    eid fa = un(g, OP_NEGATE, t, a), fb = un(g, OP_NEGATE, t, b);
    CHECK_EQ(un(g, OP_NEGATE, t, a), fa);
    CHECK(fa != fb);
    CHECK_EQ(eg_lookup(g, OP_NEGATE, 0, t, &a, 1), fa);
    CHECK_EQ(eg_lookup(g, OP_EXP, 0, t, &a, 1), EID_NONE);

    t_case("egraph-2 congruence through several levels");
    eid gfa = un(g, OP_EXP, t, fa), gfb = un(g, OP_EXP, t, fb);
    eid hga = bin(g, OP_ADD, t, gfa, c), hgb = bin(g, OP_ADD, t, gfb, c);
    CHECK(eg_find(g, hga) != eg_find(g, hgb));
    CHECK_EQ(eg_union(g, a, b, NULL), 1);
    CHECK(eg_rebuild(g) > 0);
    CHECK_EQ(eg_find(g, fa), eg_find(g, fb));
    CHECK_EQ(eg_find(g, gfa), eg_find(g, gfb));
    CHECK_EQ(eg_find(g, hga), eg_find(g, hgb));
    CHECK_MSG(eg_check(g, &why) == 0, "%s", why.s ? why.s : "");

    t_case("egraph-3 rebuild is idempotent; union of equal classes is a no-op");
    CHECK_EQ(eg_rebuild(g), 0);
    CHECK_EQ(eg_union(g, fa, fb, NULL), 0);
    eg_stats s1 = eg_get_stats(g);
    eg_rebuild(g);
    eg_stats s2 = eg_get_stats(g);
    CHECK_EQ(s1.classes, s2.classes);
    CHECK_EQ(s1.live_nodes, s2.live_nodes);

    t_case("egraph-4 shape analysis refuses merging different shapes");
    eid d = leaf(g, t2, 4);
    sb_reset(&why);
    CHECK_EQ(eg_union(g, a, d, &why), -1);
    CHECK_CONTAINS(why.s, "shape analysis conflict");
    CHECK(eg_find(g, a) != eg_find(g, d));

    t_case("egraph-5 adding after unions lands on the merged class");
    eid fresh = un(g, OP_NEGATE, t, b);
    CHECK_EQ(eg_find(g, fresh), eg_find(g, fa));
    CHECK(eg_class_origin(g, fa) & EG_BASELINE);

    t_case("egraph-6 a long chain collapses by congruence");
    egraph *h = eg_new();
    uint32_t th = eg_type(h, DT_F32, NULL, 0);
    eid x = leaf(h, th, 1), y = leaf(h, th, 2), cx = x, cy = y;
    for (int i = 0; i < 10000; i++) {
        cx = un(h, OP_NEGATE, th, cx);
        cy = un(h, OP_NEGATE, th, cy);
    }
    eg_union(h, x, y, NULL);
    eg_rebuild(h);
    CHECK_EQ(eg_find(h, cx), eg_find(h, cy));
    eg_stats hs = eg_get_stats(h);
    CHECK_EQ(hs.classes, 10001);
    sb_reset(&why);
    CHECK_MSG(eg_check(h, &why) == 0, "%s", why.s ? why.s : "");
    eg_free(h);

    t_case("egraph-7 class iteration sees every live node");
    int count = 0;
    for (eid n = eg_class_first(g, fa); n != EID_NONE; n = eg_class_next(g, n)) count++;
    CHECK_EQ(count, 1);  /* neg(a) and neg(b) became one node */
    sb_reset(&why);
    eg_print_term(&why, g, hga, 3);
    CHECK_STR(why.s, "add(exponential(negate(var1)), var3)");

    t_case("egraph-8 type and attribute words stay put as more are interned");
    {
        uint32_t r0, n0;
        const int64_t *td = eg_type_dims(g, t, &r0), *aw = eg_attr_words(g, eg_node_attr(g, a), &n0);
        for (int64_t k = 0; k < 20000; k++) {
            int64_t kd[2] = {k, 8};
            eg_type(g, DT_F32, kd, 2);
            eg_attr(g, kd, 2);
        }
        uint32_t r1, n1;
        CHECK(eg_type_dims(g, t, &r1) == td && r1 == r0 && td[0] == 4 && td[1] == 8);
        CHECK(eg_attr_words(g, eg_node_attr(g, a), &n1) == aw && n1 == 1 && aw[0] == 1);
    }

    t_case("egraph-9 a slice of a class that also holds a concatenation of its own slices ends");
    {
        /* (per-device terms glued back: x joined to concat(x[0:2], x[2:4]);
         * slicing x then slices its pieces, which are slices of x: once
         * unbounded recursion) */
        static const char text[] = "HloModule m\nENTRY e {\n  p = f32[4,2] parameter(0)\n  ROOT n = f32[4,2] negate(p)\n}\n";
        diag dg;
        diag_init(&dg, "test");
        hlo_module *m = hlo_parse_text(text, strlen(text), "test", &dg);
        CHECK(m != NULL);
        mesh ms = {.naxes = 1, .sizes = {2}};
        strcpy(ms.names[0], "x");
        egraph *eh = eg_new();
        arena ar;
        arena_init(&ar);
        lift_ctx lc;
        lift_init(&lc, eh, &ar, m, m, &ms);
        int64_t pd[2] = {4, 2}, k0 = 0;
        eid px = eg_add(eh, EG_OP_PARAM, eg_attr(eh, &k0, 1), eg_type(eh, DT_F32, pd, 2), NULL, 0, EG_BASELINE);
        int64_t q0[6] = {0, 2, 1, 0, 2, 1}, q1[6] = {2, 4, 1, 0, 2, 1}, q2[6] = {1, 3, 1, 0, 2, 1};
        eid parts[2] = {lf_mk_slice(&lc, px, q0), lf_mk_slice(&lc, px, q1)};
        int64_t cw[3] = {A_DIMENSIONS, 1, 0};
        eid cat = eg_add(eh, OP_CONCATENATE, eg_attr(eh, cw, 3), eg_class_type(eh, px), parts, 2, EG_LIFTED);
        eg_union(eh, px, cat, NULL);
        eg_rebuild(eh);
        eid mid = lf_mk_slice(&lc, px, q2);
        uint32_t r;
        const int64_t *md = eg_type_dims(eh, eg_class_type(eh, mid), &r);
        CHECK(mid != EID_NONE && r == 2 && md[0] == 2 && md[1] == 2);
        lift_done(&lc);
        arena_free(&ar);
        eg_free(eh);
        graph_free(m);
        diag_free(&dg);
    }

    sb_free(&why);
    eg_free(g);
}
