/* Numeric rule validation (rules_validate.h): every rule in rules/ validates or
 * is explicitly "not validated" with a reason (at least half must really run),
 * and the deliberately unsound rules in tests/cases/unsound_rules/ are caught
 * with a counterexample, through the API and the CLI (exit 1, rule named). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "diag.h"
#include "harness.h"
#include "rules_validate.h"
#include "scalify.h"
#include "shape.h"

static const rv_rule *find(const rv_report *r, const char *name) {
    for (uint32_t i = 0; i < r->n; i++)
        if (strcmp(r->rules[i].name, name) == 0) return &r->rules[i];
    return NULL;
}

static void test_core_rules(void) {
    t_case("rules-validate-1.1 every rule in rules/ validates or says why not");
    diag d;
    diag_init(&d, "rules");
    rv_report r;
    CHECK_EQ(rv_validate_dir("rules", &r, &d), 0);
    CHECK_MSG(d.count == 0, "%s", d.out.s ? d.out.s : "");
    diag_free(&d);
    CHECK(r.n >= 20);
    CHECK_EQ(r.failed, 0);
    CHECK_EQ(r.ok + r.not_validated + r.failed, r.n);
    CHECK_MSG(2 * r.ok >= r.n, "%u of %u validated", r.ok, r.n);
    for (uint32_t i = 0; i < r.n; i++) {
        const rv_rule *x = &r.rules[i];
        CHECK_MSG(x->status != RV_FAIL, "%s: %s", x->name, x->counterexample ? x->counterexample : "");
        if (x->status == RV_NOT_VALIDATED) CHECK_MSG(x->reason && x->reason[0], "%s has no reason", x->name);
        if (x->status == RV_OK) CHECK_MSG(x->instances > 0, "%s", x->name);
    }
    const rv_rule *tc = find(&r, "transpose-compose");
    CHECK(tc && tc->status == RV_OK && tc->instances == 2);
    printf("rules validate: %u of %u rules validated, %u not validated\n", r.ok, r.n, r.not_validated);
    rv_report_free(&r);

    t_case("rules-validate-1.2 tolerances by dtype");
    CHECK(rv_tolerance(DT_F32) == 1e-5);
    CHECK(rv_tolerance(DT_S32) == 0);
    CHECK(rv_tolerance(DT_BF16) > rv_tolerance(DT_F32));
}

static void test_unsound(void) {
    t_case("rules-validate-2.1 unsound rules are caught with a counterexample");
    diag d;
    diag_init(&d, "unsound");
    rv_report r;
    CHECK_EQ(rv_validate_dir("tests/cases/unsound_rules", &r, &d), 0);
    diag_free(&d);
    static const char *const bad[] = {"wrong-transpose-compose", "max-as-sum", "transpose-as-reshape"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        const rv_rule *x = find(&r, bad[i]);
        CHECK_MSG(x && x->status == RV_FAIL, "%s", bad[i]);
        if (x) CHECK_MSG(x->failures == 1 && x->counterexample && strstr(x->counterexample, "max |difference|"),
                         "%s", bad[i]);
    }
    const rv_rule *ok = find(&r, "sound-transpose-identity");
    CHECK(ok && ok->status == RV_OK);
    CHECK_EQ(r.failed, 3);
    rv_report_free(&r);

    t_case("rules-validate-2.2 scalify rules validate: exit codes and table");
    int st;
    char cmd[512];
    snprintf(cmd, sizeof cmd, "%s rules validate tests/cases/unsound_rules", t_scalify());
    char *out = t_run(cmd, &st);
    CHECK_EQ(st, EXIT_MISMATCH);
    CHECK_CONTAINS(out, "max-as-sum");
    CHECK_CONTAINS(out, "unsound.rules:11: counterexample: (maximum (param 0 f32[4,2]) (param 1 f32[4,2])) => (add");
    CHECK_CONTAINS(out, "3 failed");
    free(out);
    snprintf(cmd, sizeof cmd, "%s rules validate", t_scalify());
    out = t_run(cmd, &st);
    CHECK_EQ(st, EXIT_VERIFIED);
    CHECK_CONTAINS(out, "transpose-compose");
    CHECK_CONTAINS(out, " 0 failed");
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
}
