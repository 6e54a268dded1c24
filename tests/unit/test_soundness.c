/* soundness — the checker's transfer functions against execution, through
 * tfcheck (tfcheck.h: the generator of random pairs in TF_FAMILIES families and the
 * four properties every instance must keep). TF_INSTANCES instances with
 * rules/; every family must run and none may fail. A failing instance's files
 * stay in the temp dir the counterexample names (every instance's with
 * SCALIFY_SOUNDNESS_KEEP set). */
#include <stdio.h>
#include <stdlib.h>

#include "harness.h"
#include "tfcheck.h"

void suite_soundness(void);

void suite_soundness(void) {
    t_case("soundness run");
    bool keep = getenv("SCALIFY_SOUNDNESS_KEEP") != NULL;  /* keep every pair to look at */
    diag d;
    diag_init(&d, "soundness");
    tf_report r;
    int rc = tf_run(TF_INSTANCES, "rules", keep, &r, &d);
    CHECK_MSG(rc == 0, "%s", d.out.s ? d.out.s : "");
    diag_free(&d);
    uint32_t correct = 0, verified = 0, correct_verified = 0, mismatch = 0, by_execution = 0, unverified = 0, errors = 0;
    for (uint32_t f = 0; f < TF_FAMILIES; f++) {
        const tf_family *x = &r.fam[f];
        t_case("soundness family %s", tf_family_name(f));
        CHECK_EQ(x->instances, TF_INSTANCES / TF_FAMILIES);
        CHECK_MSG(x->failures == 0, "%u failing instances; the smallest: %s", x->failures,
                  x->counterexample ? x->counterexample : "?");
        CHECK(x->correct > 0 && x->correct < x->instances);  /* both kinds built */
        correct += x->correct, verified += x->verified, correct_verified += x->correct_verified;
        mismatch += x->mismatch, by_execution += x->by_execution, unverified += x->unverified, errors += x->errors;
    }
    t_case("soundness summary");
    CHECK_EQ(r.instances, TF_INSTANCES);
    CHECK_EQ(r.unsound, 0);
    printf("soundness: %u instances (%u correct, %u buggy), %u verified (%u of the correct), %u mismatch "
           "(%u found only by execution), %u unverified, %u error, %u unsound\n",
           r.instances, correct, r.instances - correct, verified, correct_verified, mismatch, by_execution, unverified,
           errors, r.unsound);
    if (r.dir) printf("soundness: %u failing instances; pairs kept in %s\n", r.failures, r.dir);
    tf_report_free(&r);
}
