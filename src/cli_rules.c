/* scalify rules check [DIR] — parse and lint every DIR/\*.rules (default: the rules check finds).
 * scalify rules validate [DIR] — check every rewrite rule numerically (rules_validate.h) and
 * property-test every transfer function of the checker with those rules (tfcheck.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "home.h"
#include "rules.h"
#include "rules_validate.h"
#include "scalify.h"
#include "tfcheck.h"

static int rules_check(const char *dir) {
    size_t n;
    char **paths = rs_list_dir(dir, &n);
    if (!paths) {
        fprintf(stderr, "scalify rules check: cannot open directory %s\n", dir);
        return EXIT_INPUT;
    }
    /* Files load in order into one ruleset: later files may use earlier
     * declarations (op classes, relations). */
    rs_ruleset *rs = rs_new();
    int errors = 0;
    rs_counts prev = {0};
    for (size_t i = 0; i < n; i++) {
        const char *path = paths[i];
        diag d;
        diag_init(&d, path);
        int errs = rs_load_file(rs, path, &d);
        rs_counts c = rs_get_counts(rs);
        if (errs) {
            cli_flush_diag(&d);
            errors += errs;
        } else {
            diag_free(&d);
            printf("%s: ok: %u rewrite rules, %u relation rules, %u relations, %u op classes, %u examples\n", path,
                   c.rewrites - prev.rewrites, c.relation_rules - prev.relation_rules, c.relations - prev.relations,
                   c.opclasses - prev.opclasses, c.examples - prev.examples);
        }
        prev = c;
    }
    rs_paths_free(paths, n);
    rs_free(rs);
    if (!n) {
        fprintf(stderr, "scalify rules check: no .rules files in %s\n", dir);
        return EXIT_INPUT;
    }
    if (errors) {
        fprintf(stderr, "%d error%s\n", errors, errors == 1 ? "" : "s");
        return EXIT_INPUT;
    }
    return EXIT_VERIFIED;
}

/* Exit 0: every rewrite rule validated or not validated with a reason, and
 * every transfer-function family (checked with the same rules) passed;
 * 1: a rule or a family failed (a counterexample is printed); 2: the rules
 * do not load. */
static int rules_validate(const char *dir) {
    diag d;
    diag_init(&d, "scalify rules validate");
    rv_report r;
    if (rv_validate_dir(dir, &r, &d)) {
        cli_flush_diag(&d);
        rv_report_free(&r);
        return EXIT_INPUT;
    }
    int rc = rv_print(stdout, &r);
    rv_report_free(&r);
    tf_report t;
    if (tf_run(TF_INSTANCES, dir, false, &t, &d)) {
        cli_flush_diag(&d);
        return EXIT_INTERNAL;
    }
    diag_free(&d);
    putchar('\n');
    rc |= tf_print(stdout, &t);
    if (t.dir) printf("failing pairs kept in %s\n", t.dir);
    tf_report_free(&t);
    return rc ? EXIT_MISMATCH : EXIT_VERIFIED;
}

const char cli_rules_usage[] =
    "usage: scalify rules check [DIR]      parse and lint every DIR/*.rules (default: the rules check finds)\n"
    "       scalify rules validate [DIR]   run every rewrite rule on its examples and random instances\n"
    "                                      in the interpreter, and every transfer-function family of\n"
    "                                      the checker (with those rules) on random program pairs\n"
    "                                      (exit 0 all sound, 1 a rule failed, 2 bad input)\n";

int cli_rules(int argc, char **argv) {
    bool check = argc >= 1 && strcmp(argv[0], "check") == 0;
    bool validate = argc >= 1 && strcmp(argv[0], "validate") == 0;
    if ((!check && !validate) || argc > 2) {
        fputs(cli_rules_usage, stderr);
        return EXIT_INPUT;
    }
    const char *dir = argc == 2 ? argv[1] : home_rules_dir();
    if (!dir) dir = "rules";
    return check ? rules_check(dir) : rules_validate(dir);
}
