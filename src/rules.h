/* rules — the rule language (rules/README.md): parser, linter and the
 * equality-saturation runner (DESIGN §5).
 *
 * A ruleset is loaded from .rules files (S-expressions): rewrite rules
 * (lhs => rhs, or <=> both ways), relation rules (body atoms => head facts or
 * unions), relation and op-class declarations. Loading lints as it goes: every
 * problem is reported to the diag as file:line:col (unbound or unused
 * variables, unknown ops, attributes, primitives or relations, and every
 * rule's examples must type-check and be rewritten by the rule). A ruleset with
 * errors can still be freed but must not be run.
 *
 * rs_run saturates an e-graph within a budget (nodes, iterations, wall time)
 * and reports why it stopped plus per-rule firing counts. Order is
 * deterministic: rules in load order, matches in node-creation order, all
 * matches of an iteration found before any is applied. Rules marked (ac) —
 * associativity and commutativity — only fire on classes of at most
 * ac_class_limit nodes whose representative term has at most ac_term_limit
 * nodes, so reassociating a long sum cannot blow the graph up exponentially.
 * Relation facts live in an rs_db (one per e-graph); class columns are
 * canonicalised after each rebuild and rules are evaluated semi-naively.
 * The ruleset owns all its memory (rs_free); results own their counts
 * (rs_result_free).
 */
#ifndef SCALIFY_RULES_H
#define SCALIFY_RULES_H

#include <stdbool.h>
#include <stdint.h>

#include "diag.h"
#include "egraph.h"
#include "trace_enums.h"
#include "util.h"

typedef struct rs_ruleset rs_ruleset;
typedef struct rs_db rs_db;
struct em_prog;  /* ematch.h */

/* Why a run stopped: the trace's stop reasons (trace_enums.h; names with
 * trace_stop_name). STOP_SHAPE_CONFLICT: a union joined classes of different
 * types, a rule bug. */
typedef trace_stop rs_stop;

typedef struct rs_budget {
    uint64_t node_limit;     /* stop once the e-graph holds this many nodes */
    uint32_t iter_limit;
    double time_limit_ms;
    uint32_t ac_class_limit; /* (ac) rules skip classes with more nodes */
    uint32_t ac_term_limit;  /* (ac) rules skip classes whose term is larger */
    uint64_t match_limit;    /* matches per rule per iteration */
} rs_budget;
/* 1e6 nodes, 64 iterations, 10 s, AC limits 16 nodes / 15-node terms (sums of
 * up to 8 operands are fully reassociated), 1e5 matches per rule. */
rs_budget rs_budget_default(void);

typedef struct rs_result {
    rs_stop stop;
    uint32_t iterations;
    uint32_t nrules;
    uint64_t *fired;   /* per rule (rs_rule_name order): unions made and facts added */
    uint64_t matches, unions, facts;
    double ms;
    char *message;     /* STOP_SHAPE_CONFLICT: the two terms; else NULL */
} rs_result;
void rs_result_free(rs_result *r);

rs_ruleset *rs_new(void);
void rs_free(rs_ruleset *rs);
/* Parses and lints one file's text (name used in messages; src borrowed only
 * during the call). Returns the number of errors (also in d->count). */
int rs_load_text(rs_ruleset *rs, const char *name, const char *src, size_t n, diag *d);
/* Reads and loads a file; a read error is reported to d. */
int rs_load_file(rs_ruleset *rs, const char *path, diag *d);
/* The paths DIR/NAME of the .rules files in dir, in name order (the order
 * they load in: later files may use earlier declarations); NULL when dir
 * cannot be opened. *n gets the count; rs_paths_free releases them. */
char **rs_list_dir(const char *dir, size_t *n);
void rs_paths_free(char **paths, size_t n);
/* Loads every DIR/\*.rules in name order, one diag per file is not needed:
 * messages carry the file name. Returns the error count. */
int rs_load_dir(rs_ruleset *rs, const char *dir, diag *d);
/* SHA-256 over the .rules files of dir in load order: each file's base name,
 * a newline, then its bytes. A missing or empty dir (or NULL) digests the
 * empty set. The same files give the same digest wherever they lie; the
 * trace's tool.rules_digest and `scalify --version` print it. Returns the
 * number of files. */
size_t rs_dir_digest(const char *dir, uint8_t out[32]);

typedef struct rs_counts {
    uint32_t rewrites, relation_rules, relations, opclasses, examples;
} rs_counts;
rs_counts rs_get_counts(const rs_ruleset *rs);
uint32_t rs_rule_count(const rs_ruleset *rs);
const char *rs_rule_name(const rs_ruleset *rs, uint32_t i);
int rs_rule_find(const rs_ruleset *rs, const char *name);  /* -1 when absent */
/* The compiled sides of rewrite rule i (patterns of *prog, owned by the
 * ruleset): *lhs, and *rhs when the rule also runs right to left (<=>), else
 * UINT32_MAX. False for a relation rule or an i out of range. */
bool rs_rule_sides(const rs_ruleset *rs, uint32_t i, const struct em_prog **prog, uint32_t *lhs, uint32_t *rhs);

/* Parses one term (S-expression, the example syntax of rules/README.md) and
 * adds it to g; returns its class or EID_NONE (reported to d with its position). */
eid rs_add_term(rs_ruleset *rs, egraph *g, const char *src, size_t n, diag *d);

/* Relation facts. Relation columns are declared in the rules. */
rs_db *rs_db_new(const rs_ruleset *rs);
void rs_db_free(rs_db *db);
int rs_relation_find(const rs_ruleset *rs, const char *name);  /* -1 when absent */
uint32_t rs_relation_arity(const rs_ruleset *rs, int rel);
/* Adds a fact (class columns are canonicalised); true when new. */
bool rs_db_insert(rs_db *db, egraph *g, int rel, const int64_t *row);
bool rs_db_contains(rs_db *db, egraph *g, int rel, const int64_t *row);
size_t rs_db_count(const rs_db *db, int rel);
const int64_t *rs_db_row(const rs_db *db, int rel, size_t i);

/* Saturates g (db may be NULL when no relation is used). only: when not
 * NULL, only rules whose index has only[i] set run. Returns r->stop. */
rs_stop rs_run(const rs_ruleset *rs, egraph *g, rs_db *db, const rs_budget *b, const bool *only, rs_result *r);

#endif
