/* check — the checker's driver (DESIGN §5, §7, §8): reads a pair, builds the
 * baseline into one e-graph, lifts the distributed program, decides the verdict
 * and localises the first divergence into a typed check_result (check_run);
 * trace_write.h turns that into the trace, and check_pair does both (a jansson
 * object the caller owns and frees with json_decref).
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
 * saturation figures). Segments are the top-level op_name scopes; a run of
 * instructions identical to one already lifted reuses its terms (lift_memo.c;
 * the trace counts memo hits; o->no_memo lifts everything). What lift cannot
 * relate yet (a collective-permute's or local slice's per-device pieces that
 * are never blocks of a view again, device-dependent values mixed with data,
 * all-to-all results rearranged in unrelated ways) makes the pair unverified,
 * said plainly in the trace; so does a constant a text dump left out ({...}),
 * with a pointer to the protobuf dump. With o->witness (the command line's
 * default; --no-witness turns it off), an undecided pair
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
#include "graph.h"
#include "trace_enums.h"
#include "view.h"


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

/* One finding as decided: what, how severe, why, and the distributed
 * instruction it is reported at. The writer (trace_write.h) adds the rest of
 * its trace entry: the baseline counterpart, operands, subgraph, snippet. */
typedef struct pv_views pv_views; /* provenance.h */

typedef struct check_finding {
    trace_kind kind;
    trace_severity severity;
    char *message;                /* owned */
    char *segment;                /* owned: the segment of `in` (its op_name's first component, or "entry") */
    const hlo_comp *comp;
    const hlo_instr *in;
    bool witness;                 /* carries the result's witness figures */
    uint32_t *path;               /* owned; provenance.h: instruction indices in comp, origin first, `in` last */
    uint32_t npath;               /* steps in path (0: none) */
    uint32_t path_len;            /* the whole chain's length (> npath when steps were left out) */
} check_finding;

typedef struct check_rule_count {
    char *rule;
    uint64_t count;
} check_rule_count;

/* One segment as judged (the trace's segments[]); times in ms. */
typedef struct check_segment {
    char *name;
    trace_verdict verdict;
    uint32_t bstart, bend, dstart, dend;
    uint64_t enodes, eclasses, rule_firings;
    uint32_t iterations;
    trace_stop stop;
    check_rule_count *top;        /* the rules that fired most in its last run, most first */
    size_t ntop;
    double t_build, t_lift, t_saturate, t_check;
    bool memo_hit;
    char *memo_of;                /* NULL unless a memo hit names its source */
} check_segment;

typedef struct check_witness {
    uint64_t seed;                /* of the inputs */
    double max_abs, max_rel;      /* largest output differences */
    const char *outcome;          /* "differs", "agrees", "undecided" (execution decides nothing), "between"
                                   * (beyond rounding, under the tolerance); NULL: not run */
    char note[256];               /* why execution decides nothing ("" otherwise) */
} check_witness;

typedef struct check_module {
    const char *path;
    hlo_module *m;                /* NULL once no finding needs it (check_run) */
    trace_format format;
    char sha256[65];
    char *name;                   /* owned: the module's name */
    uint64_t instructions;
} check_module;

/* What check_run decided, typed; trace_write() turns it into the trace. It
 * owns everything it points to (both modules too) until check_result_free. */
typedef struct check_result {
    trace_verdict verdict;
    check_module base, dist;
    relations rel;                /* as judged: unconstrained outputs get the view found */
    check_finding *findings;      /* listed, in order (ids F1, F2, … by position) */
    size_t nfindings;
    int64_t kind_total[KIND_COUNT];  /* counted per kind: the listed ones and those beyond the per-kind cap */
    check_segment *segs;
    size_t nsegs;
    uint32_t memo_hits;           /* segments all of whose runs were memo hits */
    int threads;                  /* that read the two programs */
    double wall_ms, setup_ms, cpu_ms;
    uint64_t peak_bytes;
    check_witness w;              /* execution's figures, for findings with .witness */
    char *assumptions;            /* '\n'-separated preconditions; NULL when none */
    pv_views *views;              /* distributed values' views in words; NULL without findings */
} check_result;

/* Decides one pair. Returns the verdict; r is filled unless it is
 * VERDICT_ERROR (then d holds the reasons). Free r with check_result_free
 * either way. */
int check_run(const check_opts *o, check_result *r, diag *d);
void check_result_free(check_result *r);

/* check_run, then trace_write: *trace gets the trace (a jansson object the
 * caller frees) unless the verdict is VERDICT_ERROR. */
int check_pair(const check_opts *o, json_t **trace, diag *d);

#endif
