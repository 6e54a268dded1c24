/* rules_validate — numeric validation of rewrite rules (DESIGN §5 Soundness,
 * `scalify rules validate [DIR]`).
 *
 * For every rewrite rule of DIR/\*.rules, each of its (example TERM)
 * instances and random instances: the term is added to a fresh e-graph, the ruleset restricted to
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
 * for f64, 2^-5 for bf16 and 2^-8 for f16 (four units in the last place: the
 * interpreter rounds after every op, and exp(a+b) against exp(a)·exp(b)
 * rounds three times, the sum's rounding amplified by exp) — rounding
 * differences after reassociation stay well inside; a wrong rule differs by
 * O(1). NaN must meet NaN at the same position.
 *
 * Random instances (rinst.h): RV_RANDOM of them per rule, drawn from the
 * rule's left side (odd draws from the right side of a <=> rule) with root
 * rank <= RV_MAX_RANK and dims <= RV_MAX_DIM, each validated like an example
 * on its own seeds; a draw the rule does not rewrite (a side condition false),
 * that does not build or does not run is "rejected", and drawing stops after
 * RV_MAX_DRAWS. Draw k of rule R is seeded by hash(R) and k: deterministic.
 *
 * An instance also fails when the rule joins terms of different types (a
 * shape conflict). When any instance of a rule failed, the shrink draws
 * RV_SHRINK_DRAWS instances at each level of exact root rank r and dims <= d,
 * levels in ascending d^r, and stops after the first level with a failure;
 * the counterexample kept is the failing instance with the fewest parameter
 * elements (then the shortest text) among all seen.
 *
 * A rule is: "ok" (at least one instance compared, none differed), "FAIL"
 * (some instance differed), or "not validated" with the reason (no instance
 * could be converted or run: a constant whose payload is only a digest, an op
 * the interpreter refuses, ...). Relation rules are not rewrites and are not
 * listed. Examples are read from the rule files' text (the ruleset keeps only
 * compiled terms).
 *
 * The report owns all its strings; rv_report_free releases them.
 */
#ifndef SCALIFY_RULES_VALIDATE_H
#define SCALIFY_RULES_VALIDATE_H

#include <stdint.h>
#include <stdio.h>

#include "diag.h"

#define RV_SEEDS 5
#define RV_RANDOM 64          /* random instances compared per rule */
#define RV_MAX_DRAWS 1600     /* draws per rule before giving up on RV_RANDOM */
#define RV_MAX_RANK 3         /* limits of a random instance's root type */
#define RV_MAX_DIM 4
#define RV_SHRINK_DRAWS 60    /* draws per shrink level */

typedef enum rv_status { RV_OK = 0, RV_NOT_VALIDATED, RV_FAIL } rv_status;

typedef struct rv_rule {
    char *name;
    char *where;          /* "file:line" of the rule */
    rv_status status;
    uint32_t instances;   /* examples compared on every seed (one failing example ends them) */
    uint32_t skipped;     /* examples that could not be converted or run */
    uint32_t failures;    /* examples where some candidate differed */
    uint32_t random;      /* random instances compared */
    uint32_t random_failures;
    uint32_t rejected;    /* random draws that did not build, fire or run */
    char *reason;         /* not validated / first skip: why; else NULL */
    char *counterexample; /* RV_FAIL: the smallest failing instance, rewritten term, seed, max difference */
    uint64_t cex_elements;      /* the counterexample's parameter elements */
    uint64_t example_elements;  /* the first example's parameter elements */
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

/* Prints the table (rule, examples, random, rejected, failures, result; a
 * failing rule's minimal counterexample on the next line) and a summary line;
 * returns 1 when any rule failed, else 0. */
int rv_print(FILE *f, const rv_report *r);
void rv_report_free(rv_report *r);

#endif
