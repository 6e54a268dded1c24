/* rules_validate — numeric validation of rewrite rules (DESIGN §5 Soundness,
 * `scalify rules validate [DIR]`).
 *
 * For every rewrite rule of DIR/\*.rules and each of its (example TERM)
 * instances: the term is added to a fresh e-graph, the ruleset restricted to
 * that rule is run, and every node of the root class whose term differs from
 * the example (children extracted as the smallest term of their class) is
 * converted, like the example, into a one-computation hlo_module (parameters
 * are the example's (param k TYPE) leaves, each node one instruction with its
 * attribute blob decoded back into hlo_attr). Both modules run in the
 * reference interpreter on the same random inputs (RV_SEEDS seeds,
 * interp_val_fill_random) and the outputs are compared.
 *
 * Tolerance (rv_tolerance): integers and preds exactly; floating outputs pass
 * when max|a - b| <= tol * max(1, max|a|, max|b|) with tol 1e-5 for f32, 1e-12
 * for f64, 1e-2 for bf16 and 2e-3 for f16 — rounding differences after
 * reassociation stay well inside; a wrong rule differs by O(1). NaN must meet
 * NaN at the same position.
 *
 * A rule is: "ok" (at least one instance compared, none differed), "FAIL"
 * (some instance differed: the first counterexample is kept), or "not
 * validated" with the reason (no instance could be converted or run: a constant
 * whose payload is only a digest, an op the interpreter refuses, ...). Relation
 * rules are not rewrites and are not listed. Examples are read from the rule
 * files' text (the ruleset keeps only compiled terms).
 *
 * The report owns all its strings; rv_report_free releases them.
 */
#ifndef SCALIFY_RULES_VALIDATE_H
#define SCALIFY_RULES_VALIDATE_H

#include <stdint.h>
#include <stdio.h>

#include "diag.h"

#define RV_SEEDS 5

typedef enum rv_status { RV_OK = 0, RV_NOT_VALIDATED, RV_FAIL } rv_status;

typedef struct rv_rule {
    char *name;
    char *where;          /* "file:line" of the rule */
    rv_status status;
    uint32_t instances;   /* examples compared on every seed */
    uint32_t skipped;     /* examples that could not be converted or run */
    uint32_t failures;    /* examples where some candidate differed */
    char *reason;         /* not validated / first skip: why; else NULL */
    char *counterexample; /* RV_FAIL: example, rewritten term, seed, max difference */
} rv_rule;

typedef struct rv_report {
    rv_rule *rules;
    uint32_t n;
    uint32_t ok, not_validated, failed;
} rv_report;

/* The tolerance of a floating dtype (0 for integers and preds: exact). */
double rv_tolerance(int dt);

/* Loads DIR/\*.rules and validates every rewrite rule into *out. Returns 0 when
 * the rules loaded (the report says what passed), 2 when they did not load or
 * the directory has no rule files (problems reported to d). */
int rv_validate_dir(const char *dir, rv_report *out, diag *d);

/* Prints the table and a summary line; returns the exit code: 1 when any rule
 * failed, else 0. */
int rv_print(FILE *f, const rv_report *r);
void rv_report_free(rv_report *r);

#endif
