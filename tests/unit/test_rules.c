/* Rules: attribute blobs, attribute-constrained matching, relation-rule
 * fixpoints, budgets and stop reasons, the linter, and the golden pairs in
 * tests/egraph/\*.test (each case: two terms that must become equal, or stay
 * apart, after saturation with rules/). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "eattr.h"
#include "egraph.h"
#include "graph.h"
#include "harness.h"
#include "rules.h"

static rs_ruleset *load(const char *text, int *errors, strbuf *msgs) {
    rs_ruleset *rs = rs_new();
    diag d;
    diag_init(&d, "test.rules");
    int e = rs_load_text(rs, "test.rules", text, strlen(text), &d);
    if (errors) *errors = e;
    if (msgs) sb_puts(msgs, d.out.s ? d.out.s : "");
    diag_free(&d);
    return rs;
}

static eid term(rs_ruleset *rs, egraph *g, const char *text) {
    diag d;
    diag_init(&d, "term");
    eid e = rs_add_term(rs, g, text, strlen(text), &d);
    if (e == EID_NONE) printf("term error: %s\n", d.out.s ? d.out.s : "");
    diag_free(&d);
    return e;
}

static uint64_t fired(const rs_ruleset *rs, const rs_result *r, const char *name) {
    int i = rs_rule_find(rs, name);
    return i >= 0 ? r->fired[i] : (uint64_t)-1;
}

static void test_eattr(void) {
    t_case("rules-1.1 attribute blobs: sorted, defaults dropped, strings round-trip");
    egraph *g = eg_new();
    ea_builder b;
    ea_init(&b);
    int64_t perm[2] = {1, 0};
    ea_put(&b, A_DIMENSIONS, perm, 2);
    ea_put_int(&b, A_INDEX, 0);          /* default: dropped */
    ea_put_int(&b, A_DIRECTION, EA_DIR_LT);
    ea_put_str(&b, A_CUSTOM_CALL_TARGET, "gelu_tanh", 9);
    ea_put(&b, A_LHS_BATCH_DIMS, NULL, 0); /* empty list: dropped */
    uint32_t a = ea_intern(&b, g);
    uint32_t n;
    const int64_t *w = eg_attr_words(g, a, &n);
    CHECK_EQ(ea_check(w, n, NULL), 0);
    CHECK_EQ(w[0], A_DIMENSIONS);
    uint32_t cnt;
    CHECK(ea_get(g, a, A_INDEX, &cnt) == NULL && cnt == 0);
    CHECK_EQ(ea_get_int(g, a, A_DIRECTION, -1), EA_DIR_LT);
    char buf[64];
    CHECK_EQ(ea_get_str(g, a, A_CUSTOM_CALL_TARGET, buf, sizeof buf), 9);
    CHECK_STR(buf, "gelu_tanh");
    ea_builder c;
    ea_init(&c);
    ea_put_str(&c, A_CUSTOM_CALL_TARGET, "gelu_tanh", 9);
    ea_put_int(&c, A_DIRECTION, EA_DIR_LT);
    ea_put(&c, A_DIMENSIONS, perm, 2);
    CHECK_EQ(ea_intern(&c, g), a); /* order of puts does not matter */
    strbuf s;
    sb_init(&s);
    ea_print(&s, g, a);
    CHECK_STR(s.s, "dimensions={1,0} direction=LT custom_call_target=\"gelu_tanh\"");
    int64_t badw[4] = {A_INDEX, 1, 0, 0};
    CHECK(ea_check(badw, 3, NULL) > 0);
    CHECK_EQ(ea_direction_from_name("GE", 2), EA_DIR_GE);
    hlo_literal lit = {.dtype = DT_F32, .count = 2};
    double vals[2] = {1.0, 2.0};
    lit.f = vals;
    ea_reset(&b);
    ea_put_literal(&b, &lit, 7);
    uint32_t l1 = ea_intern(&b, g);
    vals[1] = 3.0;
    ea_reset(&b);
    ea_put_literal(&b, &lit, 7);
    CHECK(ea_intern(&b, g) != l1);
    sb_free(&s);
    ea_free(&b);
    ea_free(&c);
    eg_free(g);
}

static const char *match_rules =
    "(rewrite t10 \"literal attribute\" (transpose ?x :dimensions (1 0)) => (negate ?x)\n"
    "  (example (transpose (param 0 f32[3,3]) :dimensions (1 0))))\n"
    "(rewrite tbind \"bound attribute, used in a condition\" (transpose ?x :dimensions ?p) => (abs ?x)\n"
    "  (when (= (nth ?p 0) 2))\n"
    "  (example (transpose (param 0 f32[3,3,3]) :dimensions (2 0 1))))\n"
    "(rewrite tsame \"the same value variable twice\" (add (transpose ?x :dimensions ?p) (transpose ?y :dimensions ?p))\n"
    "  => (transpose (add ?x ?y) :dimensions ?p)\n"
    "  (example (add (transpose (param 0 f32[2,2]) :dimensions (1 0)) (transpose (param 1 f32[2,2]) :dimensions (1 0)))))\n"
    "(rewrite cmp \"direction constant\" (compare ?x ?y :direction LT) => (compare ?y ?x :direction GT)\n"
    "  (example (compare (param 0 f32[2]) (param 1 f32[2]) :direction LT)))\n"
    "(rewrite elem \"list element binding\" (concatenate ?a ?b :dimensions (?d)) => (concatenate ?b ?a :dimensions (?d))\n"
    "  (when (= ?d 1))\n"
    "  (example (concatenate (param 0 f32[2,2]) (param 1 f32[2,2]) :dimensions (1))))\n";

static void test_matching(void) {
    int errs;
    strbuf m;
    sb_init(&m);
    rs_ruleset *rs = load(match_rules, &errs, &m);
    t_case("rules-2.1 attribute-constrained rules load");
    CHECK_MSG(errs == 0, "%s", m.s ? m.s : "");
    egraph *g = eg_new();
    eid a = term(rs, g, "(transpose (param 0 f32[3,3]) :dimensions (1 0))");
    eid b = term(rs, g, "(transpose (param 0 f32[3,3]) :dimensions (0 1))");
    eid c = term(rs, g, "(transpose (param 0 f32[3,3,3]) :dimensions (2 0 1))");
    eid d = term(rs, g, "(transpose (param 0 f32[3,3,3]) :dimensions (1 2 0))");
    eid e = term(rs, g, "(add (transpose (param 1 f32[2,2]) :dimensions (1 0)) (transpose (param 2 f32[2,2]) :dimensions (1 0)))");
    eid f = term(rs, g, "(compare (param 3 f32[2]) (param 4 f32[2]) :direction LT)");
    eid f2 = term(rs, g, "(compare (param 3 f32[2]) (param 4 f32[2]) :direction LE)");
    eid h = term(rs, g, "(concatenate (param 1 f32[2,2]) (param 2 f32[2,2]) :dimensions (0))");
    rs_budget bu = rs_budget_default();
    rs_result r;
    rs_run(rs, g, NULL, &bu, NULL, &r);
    CHECK_STR(trace_stop_name(r.stop), "saturated");
    CHECK_EQ(eg_find(g, a), eg_find(g, term(rs, g, "(negate (param 0 f32[3,3]))")));
    CHECK(eg_find(g, b) != eg_find(g, term(rs, g, "(negate (param 0 f32[3,3]))")));
    t_case("rules-2.2 bound attribute values and conditions");
    CHECK_EQ(eg_find(g, c), eg_find(g, term(rs, g, "(abs (param 0 f32[3,3,3]))")));
    CHECK(eg_find(g, d) != eg_find(g, term(rs, g, "(abs (param 0 f32[3,3,3]))")));
    t_case("rules-2.3 a value variable used twice must agree");
    CHECK_EQ(eg_find(g, e), eg_find(g, term(rs, g, "(transpose (add (param 1 f32[2,2]) (param 2 f32[2,2])) :dimensions (1 0))")));
    CHECK_EQ(fired(rs, &r, "tsame"), 1);
    t_case("rules-2.4 direction constants; other directions do not match");
    CHECK_EQ(eg_find(g, f), eg_find(g, term(rs, g, "(compare (param 4 f32[2]) (param 3 f32[2]) :direction GT)")));
    CHECK(eg_find(g, f2) != eg_find(g, f));
    t_case("rules-2.5 list element binding");
    CHECK_EQ(fired(rs, &r, "elem"), 0);
    (void)h;
    t_case("rules-2.6 an attribute the pattern does not mention blocks the match");
    egraph *g2 = eg_new();
    eid x = term(rs, g2, "(param 0 f32[3,3])");
    ea_builder eb;
    ea_init(&eb);
    int64_t perm[2] = {1, 0};
    ea_put(&eb, A_DIMENSIONS, perm, 2);
    ea_put_int(&eb, A_CHANNEL_ID, 5);
    eid tx = eg_add(g2, OP_TRANSPOSE, ea_intern(&eb, g2), eg_class_type(g2, x), &x, 1, EG_BASELINE);
    rs_result r2;
    rs_run(rs, g2, NULL, &bu, NULL, &r2);
    CHECK_EQ(fired(rs, &r2, "t10"), 0);
    CHECK(eg_find(g2, tx) != eg_find(g2, term(rs, g2, "(negate (param 0 f32[3,3]))")));
    CHECK_EQ(eg_check(g2, NULL), 0);
    ea_free(&eb);
    rs_result_free(&r2);
    eg_free(g2);
    rs_result_free(&r);
    eg_free(g);
    rs_free(rs);
    sb_free(&m);
}

static const char *rel_rules =
    "(relation edge \"a directed edge\" class class)\n"
    "(relation path \"reachability\" class class)\n"
    "(relation level \"an integer column\" class int)\n"
    "(rule path-base \"an edge is a path\" ((edge ?a ?b)) => ((path ?a ?b))\n"
    "  (example (edge (param 0 f32[]) (param 1 f32[]))))\n"
    "(rule path-step \"a path followed by an edge\" ((path ?a ?b) (edge ?b ?c)) => ((path ?a ?c))\n"
    "  (example (path (param 0 f32[]) (param 1 f32[])) (edge (param 1 f32[]) (param 2 f32[]))))\n"
    "(rule level-neg \"negation is one level up\" ((level ?x ?k) (match ?y (negate ?x))) => ((level ?y (+ ?k 1)))\n"
    "  (example (level (param 0 f32[]) 0) (negate (param 0 f32[]))))\n"
    "(rule cycle-merge \"a 2-cycle merges (a toy union head)\" ((path ?a ?b) (path ?b ?a) (when (= (rank ?a) 1))) => ((union ?a ?b))\n"
    "  (example (path (param 0 f32[2]) (param 1 f32[2])) (path (param 1 f32[2]) (param 0 f32[2]))))\n";

static void test_relations(void) {
    int errs;
    strbuf m;
    sb_init(&m);
    rs_ruleset *rs = load(rel_rules, &errs, &m);
    t_case("rules-3.1 relation rules load");
    CHECK_MSG(errs == 0, "%s", m.s ? m.s : "");
    int edge = rs_relation_find(rs, "edge"), path = rs_relation_find(rs, "path"), level = rs_relation_find(rs, "level");
    CHECK(edge >= 0 && path >= 0 && level >= 0);
    t_case("rules-3.2 transitive closure reaches its fixpoint (semi-naive)");
    egraph *g = eg_new();
    rs_db *db = rs_db_new(rs);
    enum { N = 30 };
    eid v[N];
    for (int i = 0; i < N; i++) {
        char buf[64];
        snprintf(buf, sizeof buf, "(param %d f32[])", i);
        v[i] = term(rs, g, buf);
    }
    for (int i = 0; i + 1 < N; i++) {
        int64_t row[2] = {v[i], v[i + 1]};
        rs_db_insert(db, g, edge, row);
    }
    rs_budget b = rs_budget_default();
    b.iter_limit = 100;
    rs_result r;
    rs_run(rs, g, db, &b, NULL, &r);
    CHECK_STR(trace_stop_name(r.stop), "saturated");
    CHECK_EQ(rs_db_count(db, path), N * (N - 1) / 2);
    int64_t q[2] = {v[0], v[N - 1]}, q2[2] = {v[N - 1], v[0]};
    CHECK(rs_db_contains(db, g, path, q));
    CHECK(!rs_db_contains(db, g, path, q2));
    CHECK_EQ(fired(rs, &r, "path-step"), N * (N - 1) / 2 - (N - 1));
    rs_result_free(&r);
    t_case("rules-3.3 facts are canonicalised after unions (duplicates merge)");
    eg_union(g, v[0], v[1], NULL);
    eg_rebuild(g);
    rs_run(rs, g, db, &b, NULL, &r);
    int64_t self[2] = {v[0], v[0]};
    CHECK(rs_db_contains(db, g, path, self)); /* path(0,1) became path(0,0) */
    for (size_t i = 0; i < rs_db_count(db, path); i++) {
        const int64_t *row = rs_db_row(db, path, i);
        CHECK(eg_find(g, (eid)row[0]) == (eid)row[0] && eg_find(g, (eid)row[1]) == (eid)row[1]);
    }
    CHECK(rs_db_count(db, path) < N * (N - 1) / 2);
    rs_result_free(&r);
    rs_db_free(db);
    eg_free(g);
    t_case("rules-3.4 int columns and match atoms");
    g = eg_new();
    db = rs_db_new(rs);
    eid x = term(rs, g, "(param 0 f32[4])");
    eid top = term(rs, g, "(negate (negate (negate (param 0 f32[4]))))");
    int64_t l0[2] = {x, 0};
    rs_db_insert(db, g, level, l0);
    rs_run(rs, g, db, &b, NULL, &r);
    int64_t l3[2] = {top, 3};
    CHECK(rs_db_contains(db, g, level, l3));
    CHECK_EQ(rs_db_count(db, level), 4);
    rs_result_free(&r);
    t_case("rules-3.5 union heads merge classes");
    eid p = term(rs, g, "(param 5 f32[2])"), p2 = term(rs, g, "(param 6 f32[2])");
    int64_t e1[2] = {p, p2}, e2[2] = {p2, p};
    rs_db_insert(db, g, edge, e1);
    rs_db_insert(db, g, edge, e2);
    rs_run(rs, g, db, &b, NULL, &r);
    CHECK_EQ(eg_find(g, p), eg_find(g, p2));
    CHECK_EQ(eg_check(g, NULL), 0);
    rs_result_free(&r);
    rs_db_free(db);
    eg_free(g);
    rs_free(rs);
    sb_free(&m);
}

static void sum_chain(rs_ruleset *rs, egraph *g, int n) {
    strbuf s;
    sb_init(&s);
    for (int i = 1; i < n; i++) sb_puts(&s, "(add ");
    sb_puts(&s, "(param 0 f32[8])");
    for (int i = 1; i < n; i++) sb_printf(&s, " (param %d f32[8]))", i);
    term(rs, g, s.s);
    sb_free(&s);
}

static void test_budgets(void) {
    diag d;
    diag_init(&d, "rules");
    rs_ruleset *rs = rs_new();
    int errs = rs_load_dir(rs, "rules", &d);
    t_case("rules-4.1 the core rules load cleanly");
    CHECK_MSG(errs == 0, "%s", d.out.s ? d.out.s : "");
    diag_free(&d);
    rs_budget b = rs_budget_default();
    rs_result r;

    t_case("rules-4.2 saturated");
    egraph *g = eg_new();
    term(rs, g, "(transpose (transpose (param 0 f32[4,8]) :dimensions (1 0)) :dimensions (1 0))");
    CHECK_EQ(rs_run(rs, g, NULL, &b, NULL, &r), STOP_SATURATED);
    CHECK(r.iterations >= 2);
    CHECK(fired(rs, &r, "transpose-compose") >= 1);
    CHECK_EQ(fired(rs, &r, "transpose-identity"), 1);
    rs_result_free(&r);
    eg_free(g);

    t_case("rules-4.3 node-limit");
    g = eg_new();
    sum_chain(rs, g, 40);
    b.node_limit = 200;
    b.ac_class_limit = 1000;
    b.ac_term_limit = 1000;
    CHECK_STR(trace_stop_name(rs_run(rs, g, NULL, &b, NULL, &r)), "node-limit");
    CHECK(eg_node_count(g) >= 200);
    CHECK_EQ(eg_check(g, NULL), 0);
    rs_result_free(&r);
    eg_free(g);

    t_case("rules-4.4 iteration-limit");
    b = rs_budget_default();
    b.iter_limit = 2;
    g = eg_new();
    sum_chain(rs, g, 12);
    CHECK_STR(trace_stop_name(rs_run(rs, g, NULL, &b, NULL, &r)), "iteration-limit");
    CHECK_EQ(r.iterations, 2);
    rs_result_free(&r);
    eg_free(g);

    t_case("rules-4.5 time-limit");
    b = rs_budget_default();
    b.time_limit_ms = 0;
    g = eg_new();
    sum_chain(rs, g, 12);
    CHECK_STR(trace_stop_name(rs_run(rs, g, NULL, &b, NULL, &r)), "time-limit");
    rs_result_free(&r);
    eg_free(g);

    t_case("rules-4.6 the AC guard keeps a long sum bounded and saturating");
    b = rs_budget_default();
    g = eg_new();
    sum_chain(rs, g, 200);
    rs_stop st = rs_run(rs, g, NULL, &b, NULL, &r);
    CHECK_MSG(st == STOP_SATURATED, "%s after %u iterations, %u nodes", trace_stop_name(st), r.iterations, eg_node_count(g));
    CHECK(eg_node_count(g) < 100000);
    CHECK(fired(rs, &r, "add-commute") > 0);
    rs_result_free(&r);
    eg_free(g);

    t_case("rules-4.7 deterministic: same input, same counts");
    uint64_t counts[2][64] = {{0}};
    uint32_t nodes[2];
    for (int k = 0; k < 2; k++) {
        g = eg_new();
        sum_chain(rs, g, 30);
        term(rs, g, "(dot (param 0 f32[2,8]) (concatenate (param 1 f32[8,3]) (param 2 f32[8,5]) :dimensions (1)) "
                    ":lhs_contracting_dims (1) :rhs_contracting_dims (0))");
        rs_run(rs, g, NULL, &b, NULL, &r);
        for (uint32_t i = 0; i < r.nrules && i < 64; i++) counts[k][i] = r.fired[i];
        nodes[k] = eg_node_count(g);
        rs_result_free(&r);
        eg_free(g);
    }
    CHECK_EQ(nodes[0], nodes[1]);
    CHECK(memcmp(counts[0], counts[1], sizeof counts[0]) == 0);
    rs_free(rs);

    t_case("rules-4.8 shape-conflict: an ill-typed rule stops the run loudly");
    int e2;
    rs = load("(rewrite bad \"wrong\" (transpose ?x :dimensions ?_p) => ?x (example (transpose (param 0 f32[2,3]) :dimensions (1 0))))",
              &e2, NULL);
    CHECK(e2 > 0); /* the linter already refuses it */
    g = eg_new();
    term(rs, g, "(transpose (param 0 f32[2,3]) :dimensions (1 0))");
    b = rs_budget_default();
    CHECK_STR(trace_stop_name(rs_run(rs, g, NULL, &b, NULL, &r)), "shape-conflict");
    CHECK_CONTAINS(r.message, "shape analysis conflict");
    rs_result_free(&r);
    eg_free(g);
    rs_free(rs);
}

static void test_lint(void) {
    struct {
        const char *text, *want;
    } cases[] = {
        {"(rewrite r \"d\" (negate ?x) => (add ?x ?y) (example (negate (param 0 f32[2]))))", "1:39: unbound variable ?y"},
        {"(rewrite r \"d\" (add ?x ?y) => ?x (example (add (param 0 f32[2]) (param 1 f32[2]))))", "variable ?y is bound but never used"},
        {"(rewrite r \"d\" (frob ?x) => ?x (example (negate (param 0 f32[2]))))", "unknown op 'frob'"},
        {"(rewrite r \"d\" (negate ?x) => ?x (when (frob 1)) (example (negate (param 0 f32[2]))))", "unknown primitive 'frob'"},
        {"(rewrite r \"d\" (add ?x ?y) => (add ?y ?x) (example (add (param 0 f32[2]) (param 1 f32[3]))))", "does not type-check"},
        {"(rewrite r \"d\" (negate ?x) => (abs ?x) (example (abs (param 0 f32[2]))))", "does not match the left-hand side"},
        {"(rewrite r \"d\" (negate (negate ?x)) => ?x)", "has no (example"},
        {"(rewrite r \"d\" (transpose ?x :dims (1 0)) => ?x (example (negate (param 0 f32[2]))))", "unknown attribute 'dims'"},
        {"(rewrite r \"d\" (reshape (negate ?x)) => (reshape (negate (reshape ?x))) (example (reshape (negate (param 0 f32[2,2])) :type f32[4])))",
         "must be given"},
        {"(rewrite r \"d\" (negate ?x) => (abs ?x) (example (negate (param 0 f32[2])))", "unclosed '('"},
    };
    for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
        t_case("rules-5.%zu lint: %s", i + 1, cases[i].want);
        int errs;
        strbuf m;
        sb_init(&m);
        rs_free(load(cases[i].text, &errs, &m));
        CHECK(errs > 0);
        CHECK_CONTAINS(m.s, cases[i].want);
        CHECK_CONTAINS(m.s, "test.rules:");
        sb_free(&m);
    }
    t_case("rules-5.20 scalify rules check: clean rules/ and a broken directory");
    char cmd[1024];
    int st;
    snprintf(cmd, sizeof cmd, "%s rules check %s", t_scalify(), "rules");
    char *out = t_run(cmd, &st);
    CHECK_EQ(st, 0);
    CHECK_CONTAINS(out, "layout.rules: ok:");
    free(out);
    FILE *f = fopen("build/bad-rules/x.rules", "w");
    if (!f) {
        (void)!system("mkdir -p build/bad-rules");
        f = fopen("build/bad-rules/x.rules", "w");
    }
    if (f) {
        fputs("(rewrite r \"d\"\n  (negate ?x) => (abs ?y) (example (negate (param 0 f32[2]))))\n", f);
        fclose(f);
    }
    snprintf(cmd, sizeof cmd, "%s rules check build/bad-rules", t_scalify());
    out = t_run(cmd, &st);
    CHECK_EQ(st, 2);
    CHECK_CONTAINS(out, "build/bad-rules/x.rules:2:23: unbound variable ?y");
    free(out);
}

/* A golden file: forms (equal "name" TERM TERM) and (distinct "name" TERM TERM).
 * Terms are located by paren matching; the rules parser reads each. */
static size_t skip_ws_comments(const char *s, size_t i, size_t n) {
    for (;;) {
        while (i < n && (s[i] == ' ' || s[i] == '\n' || s[i] == '\t' || s[i] == '\r')) i++;
        if (i < n && s[i] == ';') {
            while (i < n && s[i] != '\n') i++;
            continue;
        }
        return i;
    }
}

static size_t datum_end(const char *s, size_t i, size_t n) {
    if (i < n && s[i] == '"') {
        for (i++; i < n && s[i] != '"'; i++) {}
        return i < n ? i + 1 : n;
    }
    if (i < n && s[i] == '(') {
        int depth = 0;
        for (; i < n; i++) {
            if (s[i] == '"') i = datum_end(s, i, n) - 1;
            else if (s[i] == '(') depth++;
            else if (s[i] == ')' && --depth == 0) return i + 1;
        }
        return n;
    }
    while (i < n && !strchr(" \t\r\n()", s[i])) i++;
    return i;
}

static void test_golden(rs_ruleset *rs, const char *path) {
    size_t n;
    char *src = t_read(path, &n);
    if (!CHECK_MSG(src != NULL, "%s", path)) return;
    size_t i = skip_ws_comments(src, 0, n);
    int cases = 0;
    while (i < n) {
        size_t end = datum_end(src, i, n);
        size_t j = skip_ws_comments(src, i + 1, n);
        size_t kw_end = datum_end(src, j, n);
        bool equal = kw_end - j == 5 && memcmp(src + j, "equal", 5) == 0;
        size_t nm = skip_ws_comments(src, kw_end, n), nm_end = datum_end(src, nm, n);
        size_t t1 = skip_ws_comments(src, nm_end, n), t1_end = datum_end(src, t1, n);
        size_t t2 = skip_ws_comments(src, t1_end, n), t2_end = datum_end(src, t2, n);
        const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
        t_case("%s:%.*s", base, (int)(nm_end - nm - 2), src + nm + 1);
        egraph *g = eg_new();
        diag d;
        diag_init(&d, path);
        eid a = rs_add_term(rs, g, src + t1, t1_end - t1, &d);
        eid b = rs_add_term(rs, g, src + t2, t2_end - t2, &d);
        CHECK_MSG(a != EID_NONE && b != EID_NONE, "%s", d.out.s ? d.out.s : "");
        diag_free(&d);
        if (a != EID_NONE && b != EID_NONE) {
            rs_budget bu = rs_budget_default();
            rs_result r;
            rs_stop st = rs_run(rs, g, NULL, &bu, NULL, &r);
            CHECK_MSG(st != STOP_SHAPE_CONFLICT, "%s", r.message ? r.message : "");
            if (equal) CHECK_MSG(eg_find(g, a) == eg_find(g, b), "not equal after %s (%u iterations)", trace_stop_name(st), r.iterations);
            else CHECK_MSG(eg_find(g, a) != eg_find(g, b), "became equal");
            CHECK_EQ(eg_check(g, NULL), 0);
            rs_result_free(&r);
        }
        eg_free(g);
        cases++;
        (void)t2_end;
        i = skip_ws_comments(src, end, n);
    }
    t_case("%s: has cases", path);
    CHECK(cases > 0);
    free(src);
}

void suite_rules(void);
void suite_rules(void) {
    test_eattr();
    test_matching();
    test_relations();
    test_budgets();
    test_lint();
    diag d;
    diag_init(&d, "rules");
    rs_ruleset *rs = rs_new();
    rs_load_dir(rs, "rules", &d);
    diag_free(&d);
    char **files = t_list("tests/egraph", ".test");
    for (char **f = files; f && *f; f++) test_golden(rs, *f);
    t_free_list(files);
    rs_free(rs);
}
