/* Numeric rule validation (rules_validate.h, rinst.h, tfcheck.h): every rule in
 * rules/ validates on its examples and on random instances; the deliberately
 * unsound rules in tests/cases/unsound_rules/ are caught by both, each with a
 * shrunk counterexample no larger than its example; the random generator is
 * deterministic and keeps its limits; `scalify rules validate` prints the rule
 * table and one row per transfer-function family, with the documented exit
 * codes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "diag.h"
#include "harness.h"
#include "rinst.h"
#include "rules.h"
#include "rules_validate.h"
#include "scalify.h"
#include "shape.h"
#include "tfcheck.h"
#include "util.h"

static const rv_rule *find(const rv_report *r, const char *name) {
    for (uint32_t i = 0; i < r->n; i++)
        if (strcmp(r->rules[i].name, name) == 0) return &r->rules[i];
    return NULL;
}

static void test_core_rules(void) {
    t_case("rules-validate-1.1 every rule in rules/ validates on its examples and random instances");
    diag d;
    diag_init(&d, "rules");
    rv_report r;
    CHECK_EQ(rv_validate_dir("rules", &r, &d), 0);
    CHECK_MSG(d.count == 0, "%s", d.out.s ? d.out.s : "");
    diag_free(&d);
    CHECK(r.n >= 20);
    CHECK_EQ(r.failed, 0);
    CHECK_EQ(r.not_validated, 0);
    CHECK_EQ(r.ok, r.n);
    for (uint32_t i = 0; i < r.n; i++) {
        const rv_rule *x = &r.rules[i];
        CHECK_MSG(x->status == RV_OK, "%s: %s", x->name, x->counterexample ? x->counterexample : x->reason ? x->reason : "");
        CHECK_MSG(x->instances > 0 && x->skipped == 0, "%s: examples %u, skipped %u", x->name, x->instances, x->skipped);
        /* every rule's side conditions are met by enough random draws */
        CHECK_MSG(2 * x->random >= RV_RANDOM, "%s: %u random instances", x->name, x->random);
        CHECK_MSG(x->random_failures == 0 && !x->counterexample, "%s", x->name);
    }
    const rv_rule *tc = find(&r, "transpose-compose");
    CHECK(tc && tc->status == RV_OK && tc->instances == 2 && tc->random == RV_RANDOM);
    const rv_rule *silu = find(&r, "expand-silu");
    CHECK(silu && silu->status == RV_OK && silu->instances == 1);
    rv_report_free(&r);

    t_case("rules-validate-1.2 tolerances by dtype");
    CHECK(rv_tolerance(DT_F32) == 1e-5);
    CHECK(rv_tolerance(DT_S32) == 0);
    CHECK(rv_tolerance(DT_BF16) > rv_tolerance(DT_F16));
    CHECK(rv_tolerance(DT_F16) > rv_tolerance(DT_F32));
    CHECK(rv_tolerance(DT_F64) < rv_tolerance(DT_F32));
}

static void test_unsound(void) {
    t_case("rules-validate-2.1 unsound rules are caught, also by random instances, with a shrunk counterexample");
    diag d;
    diag_init(&d, "unsound");
    rv_report r;
    CHECK_EQ(rv_validate_dir("tests/cases/unsound_rules", &r, &d), 0);
    diag_free(&d);
    static const char *const bad[] = {"wrong-transpose-compose", "max-as-sum", "transpose-as-reshape"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        const rv_rule *x = find(&r, bad[i]);
        if (!CHECK_MSG(x && x->status == RV_FAIL, "%s", bad[i])) continue;
        CHECK_MSG(x->failures == 1 && x->random_failures > 0, "%s: %u example and %u random failures", bad[i],
                  x->failures, x->random_failures);
        if (!CHECK_MSG(x->counterexample != NULL, "%s", bad[i])) continue;
        CHECK_MSG(strstr(x->counterexample, "max |difference|") || strstr(x->counterexample, "shape conflict"), "%s: %s",
                  bad[i], x->counterexample);
        /* minimal-ish: shrinking never ends above the example, and here well below it */
        CHECK_MSG(x->cex_elements > 0 && x->cex_elements < x->example_elements, "%s: %llu elements, example %llu",
                  bad[i], (unsigned long long)x->cex_elements, (unsigned long long)x->example_elements);
    }
    /* the smallest failing shapes there are: two scalars; a 2x2 transpose */
    const rv_rule *mx = find(&r, "max-as-sum"), *tr = find(&r, "transpose-as-reshape");
    CHECK(mx && mx->cex_elements == 2 && strstr(mx->counterexample, "[]"));
    CHECK(tr && tr->cex_elements == 4 && strstr(tr->counterexample, "max |difference|"));
    const rv_rule *ok = find(&r, "sound-transpose-identity");
    CHECK(ok && ok->status == RV_OK && ok->random == RV_RANDOM);
    CHECK_EQ(r.failed, 3);

    t_case("rules-validate-2.2 random instances and shrinking are deterministic");
    rv_report again;
    diag_init(&d, "unsound");
    CHECK_EQ(rv_validate_dir("tests/cases/unsound_rules", &again, &d), 0);
    diag_free(&d);
    CHECK_EQ(again.n, r.n);
    for (uint32_t i = 0; i < r.n && i < again.n; i++) {
        CHECK_EQ(again.rules[i].random_failures, r.rules[i].random_failures);
        CHECK_EQ(again.rules[i].rejected, r.rules[i].rejected);
        const char *a = r.rules[i].counterexample, *b = again.rules[i].counterexample;
        CHECK_MSG((!a && !b) || (a && b && strcmp(a, b) == 0), "%s", r.rules[i].name);
    }
    rv_report_free(&again);
    rv_report_free(&r);
}

/* One rule's left side drawn under limits: deterministic, within the limits,
 * and a term the rule language accepts. */
static void test_generator(void) {
    t_case("rules-validate-3.1 random instances of a rule's left side");
    static const char src[] =
        "(rewrite dot-t \"doc\" (dot (transpose ?a :dimensions ?p) ?b :lhs_batch_dims ?lb :rhs_batch_dims ?rb\n"
        "  :lhs_contracting_dims ?lc :rhs_contracting_dims ?rc) => (dot ?a ?b :lhs_batch_dims (compose ?p ?lb)\n"
        "  :rhs_batch_dims ?rb :lhs_contracting_dims (compose ?p ?lc) :rhs_contracting_dims ?rc)\n"
        "  (when (increasing (compose ?p (complement (len ?p) (list ?lb ?lc)))))\n"
        "  (example (dot (transpose (param 0 f32[3,2]) :dimensions (1 0)) (param 1 f32[3,4])\n"
        "    :lhs_contracting_dims (1) :rhs_contracting_dims (0))))\n";
    rs_ruleset *rs = rs_new();
    diag d;
    diag_init(&d, "gen");
    CHECK_EQ(rs_load_text(rs, "gen.rules", src, strlen(src), &d), 0);
    const struct em_prog *prog;
    uint32_t lhs, rhs;
    if (!CHECK(rs_rule_sides(rs, 0, &prog, &lhs, &rhs))) goto done;
    CHECK_EQ(rhs, UINT32_MAX);
    uint32_t built = 0;
    for (uint64_t draw = 0; draw < 40; draw++) {
        ri_limits lim = {2, 3, true};
        strbuf a, b;
        sb_init(&a);
        sb_init(&b);
        interp_rng r1, r2;
        interp_rng_seed(&r1, draw);
        interp_rng_seed(&r2, draw);
        uint64_t ea = 0, eb = 0;
        bool oka = ri_generate(prog, lhs, &lim, &r1, &a, &ea), okb = ri_generate(prog, lhs, &lim, &r2, &b, &eb);
        CHECK_EQ(oka, okb);
        if (oka && okb) {
            built++;
            CHECK_STR(a.s, b.s);
            CHECK_EQ(ea, eb);
            CHECK_MSG(strncmp(a.s, "(dot (transpose (param 0 ", 25) == 0, "%s", a.s);
            /* the root type comes last: rank 2, dims at most 3 */
            const char *ty = strrchr(a.s, ':');
            int d0 = 0, d1 = 0;
            CHECK_MSG(ty && sscanf(strchr(ty, '[') ? strchr(ty, '[') : "", "[%d,%d]", &d0, &d1) == 2 &&
                          d0 >= 1 && d0 <= 3 && d1 >= 1 && d1 <= 3,
                      "%s", a.s);
            egraph *g = eg_new();
            diag td;
            diag_init(&td, "term");
            CHECK_MSG(rs_add_term(rs, g, a.s, a.len, &td) != EID_NONE, "%s: %s", a.s, td.out.s ? td.out.s : "");
            diag_free(&td);
            eg_free(g);
        }
        sb_free(&a);
        sb_free(&b);
    }
    CHECK_MSG(built >= 30, "%u of 40 draws built", built);
done:
    diag_free(&d);
    rs_free(rs);
}

/* A family row with a failure: FAIL, the counterexample, exit status 1. */
static void test_tf_print(void) {
    t_case("rules-validate-3.2 a failing transfer-function family prints its counterexample");
    tf_report r;
    memset(&r, 0, sizeof r);
    r.fam[1].instances = 3, r.fam[1].failures = 1, r.fam[1].unsound = 1;
    r.fam[1].counterexample = xstrdup("soundness-001 dot-k-bug-max mesh2 (verdict verified): UNSOUND");
    r.instances = 3, r.failures = 1, r.unsound = 1;
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!CHECK(f != NULL)) return;
    CHECK_EQ(tf_print(f, &r), 1);
    fclose(f);
    CHECK_CONTAINS(buf, "dot-k                                    3        1  FAIL (unsound)\n"
                        "    counterexample: soundness-001 dot-k-bug-max mesh2 (verdict verified): UNSOUND\n");
    char total[96];
    snprintf(total, sizeof total, "3 transfer-function instances in %d families: 1 failed, 1 unsound", TF_FAMILIES);
    CHECK_CONTAINS(buf, total);
    CHECK(strstr(buf, "eltwise") == NULL);  /* families that did not run have no row */
    free(buf);
    tf_report_free(&r);
}

static void test_cli(void) {
    t_case("rules-validate-4.1 scalify rules validate: exit codes and tables");
    int st;
    char cmd[512];
    snprintf(cmd, sizeof cmd, "%s rules validate tests/cases/unsound_rules", t_scalify());
    char *out = t_run(cmd, &st);
    CHECK_EQ(st, EXIT_MISMATCH);
    CHECK_CONTAINS(out, "rule                         examples random rejected failures  result");
    CHECK_CONTAINS(out, "unsound.rules:11: minimal counterexample (2 parameter elements): (maximum (param 0 ");
    CHECK_CONTAINS(out, "=> (add (param 0) (param 1)); seed ");
    CHECK_CONTAINS(out, "3 failed");
    free(out);
    snprintf(cmd, sizeof cmd, "%s rules validate", t_scalify());
    out = t_run(cmd, &st);
    CHECK_EQ(st, EXIT_VERIFIED);
    CHECK_CONTAINS(out, "transpose-compose");
    CHECK_CONTAINS(out, " 0 failed (");
    /* one row per transfer-function family, all passing */
    CHECK_CONTAINS(out, "transfer-function family         instances failures  result");
    for (uint32_t f = 0; f < TF_FAMILIES; f++) {
        char row[80];
        snprintf(row, sizeof row, "\n%-32s %9u %8u  ok", tf_family_name(f), (unsigned)(TF_INSTANCES / TF_FAMILIES), 0u);
        CHECK_MSG(strstr(out, row) != NULL, "no passing row for family %s", tf_family_name(f));
    }
    char total[96];
    snprintf(total, sizeof total, "%d transfer-function instances in %d families: 0 failed, 0 unsound", TF_INSTANCES,
             TF_FAMILIES);
    CHECK_CONTAINS(out, total);
    free(out);
    snprintf(cmd, sizeof cmd, "%s rules validate build/no-such-dir", t_scalify());
    out = t_run(cmd, &st);
    CHECK_EQ(st, EXIT_INPUT);
    free(out);
    snprintf(cmd, sizeof cmd, "%s rules frobnicate", t_scalify());
    out = t_run(cmd, &st);
    CHECK_EQ(st, EXIT_INPUT);
    CHECK_CONTAINS(out, "rules validate");
    free(out);
}

void suite_rules_validate(void);
void suite_rules_validate(void) {
    test_core_rules();
    test_unsound();
    test_generator();
    test_tf_print();
    test_cli();
}
