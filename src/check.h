/* check — the checker's driver (DESIGN §5, §7, §8): reads a pair, builds the
 * baseline into one e-graph, lifts the distributed program, decides the verdict,
 * localises the first divergence and produces the trace (a jansson object the
 * caller owns and frees with json_decref).
 *
 * Verdicts: verified (every output's lifted term is in its baseline output's
 * class with the expected view, assuming nothing beyond the preconditions the
 * trace lists under "assumptions"), mismatch (a transfer function met a
 * concrete inconsistency: a finding), unverified (the tool could not decide;
 * the trace says why and where), error (bad input: *trace NULL, diagnostics
 * in d).
 *
 * Terms meet by hash-consing and the built-in canonical forms; when an output
 * still has not met its baseline class and o->rules_dir is set, the e-graph is
 * saturated with the rules there (the trace carries their digest and the
 * saturation figures). Segments are the top-level op_name scopes; memoisation
 * of identical segments is not built (memo_hits is always 0). What lift cannot
 * relate yet (a collective-permute's or local slice's per-device pieces that
 * are never blocks of a view again, device-dependent values mixed with data,
 * all-to-all results rearranged in unrelated ways) makes the pair unverified,
 * said plainly in the trace; so does a constant a text dump left out ({...}),
 * with a pointer to the protobuf dump. With o->witness, an undecided pair
 * whose outputs differ on random inputs becomes a mismatch "confirmed by
 * execution", localised to the first divergence, else to the first
 * instruction not related (after a region assumed equal to the baseline's,
 * when there is one); the finding kind comes from that instruction's opcode or
 * a constant-only operand.
 */
#ifndef SCALIFY_CHECK_H
#define SCALIFY_CHECK_H

#include <jansson.h>
#include <stdbool.h>

#include "diag.h"
#include "trace_enums.h"


/* The name of check_pair's return value (a trace_verdict). */
static inline const char *verdict_name(int v) { return trace_verdict_name((trace_verdict)v); }

typedef struct check_opts {
    const char *name;             /* pair name; default: the distributed file's base name */
    const char *baseline, *distributed;
    const char *relations;        /* a relations file, or NULL with auto_relations */
    bool auto_relations;
    const char *source_root;      /* snippets are read only below it; NULL: none */
    bool witness;                 /* execute both programs to confirm or refute (witness.h) */
    bool no_memo;                 /* lift every segment (no memo hits): for comparison */
    int jobs;                     /* threads (≥ 2: both modules are read at once) */
    const char *rules_dir;        /* rewrite rules to saturate with when terms do not meet; NULL: none */
    bool rules_given;             /* rules_dir came from --rules (the trace's command repeats it) */
} check_opts;

/* Runs one check. Returns the verdict; *trace gets the trace unless the verdict
 * is VERDICT_ERROR (then d holds the reasons). */
int check_pair(const check_opts *o, json_t **trace, diag *d);

#endif
