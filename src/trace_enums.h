/* trace_enums — the trace's closed vocabularies, each listed once.
 *
 * Every enumeration the trace carries (verdicts, finding kinds, severities,
 * stop reasons, input formats) is one X-macro here: the checker writes
 * its names (trace_write.c), the reader accepts exactly them (trace_read.c),
 * SARIF (sarif.c) and the report take titles and levels from them, the rules
 * engine's stop reasons are them, and the `enums` test suite proves that
 * docs/trace.schema.json lists the same names and that every finding kind has
 * its page templates/findings/<kind>.md. Adding an entry: one line here, the
 * schema's enum, and (for a finding kind) its page — docs/HACKING.md.
 *
 * Each X(ID, "name", ...) expands per use; the C enumerators are PREFIX_ID
 * in the order listed, with PREFIX_COUNT after the last.
 */
#ifndef SCALIFY_TRACE_ENUMS_H
#define SCALIFY_TRACE_ENUMS_H

/* clang-format off */
/* verdict: of a pair and of each segment (DESIGN §5). */
#define TRACE_VERDICTS(X) \
    X(VERIFIED, "verified") \
    X(MISMATCH, "mismatch") \
    X(UNVERIFIED, "unverified") \
    X(ERROR, "error")

/* finding kind: name, title (report headings), SARIF level of its rule, and
 * the SARIF rule's one-line shortDescription. Its explanation is the page
 * templates/findings/<name>.md. */
#define TRACE_KINDS(X) \
    X(MISSING_ALL_REDUCE, "missing-all-reduce", "Missing all-reduce", "error", \
      "A partial (per-device) value is used without the all-reduce that completes it.") \
    X(WRONG_REDUCTION, "wrong-reduction", "Wrong reduction", "error", \
      "A collective combines values with the wrong reduction (e.g. mean instead of sum).") \
    X(WRONG_COLLECTIVE_GROUP, "wrong-collective-group", "Wrong collective group", "error", \
      "A collective's replica groups do not match the mesh axis of the value.") \
    X(LAYOUT_MISMATCH, "layout-mismatch", "Layout mismatch", "error", \
      "Reshape/transpose arranges the tensor differently from the baseline.") \
    X(WRONG_SHARD_DIM, "wrong-shard-dim", "Wrong shard dimension", "error", \
      "A value is sharded, gathered or scattered along the wrong dimension.") \
    X(DTYPE_MISMATCH, "dtype-mismatch", "Dtype mismatch", "error", \
      "The distributed program computes in a different element type.") \
    X(CONSTANT_MISMATCH, "constant-mismatch", "Constant mismatch", "error", \
      "A literal differs from the baseline (often a local-shape constant).") \
    X(UNSUPPORTED_OP, "unsupported-op", "Unsupported op", "warning", \
      "No rule or transfer function covers this operation; the pair is unverified.") \
    X(BUDGET_EXCEEDED, "budget-exceeded", "Budget exceeded", "warning", \
      "Equality saturation ran out of budget; the segment is unverified.")

/* severity of a finding (SARIF levels): a mismatch's findings are errors,
 * an undecided pair's reason is a warning. */
#define TRACE_SEVERITIES(X) \
    X(ERROR, "error") \
    X(WARNING, "warning") \
    X(NOTE, "note")

/* stop reason of an equality-saturation run (rules.h rs_run, a segment's
 * stop_reason). shape-conflict: a union joined classes of different types,
 * which is a rule bug. */
#define TRACE_STOPS(X) \
    X(SATURATED, "saturated") \
    X(NODE_LIMIT, "node-limit") \
    X(TIME_LIMIT, "time-limit") \
    X(ITERATION_LIMIT, "iteration-limit") \
    X(SHAPE_CONFLICT, "shape-conflict")

/* input format of a module file, as detected by hlo_read.c (the trace's
 * pair.baseline.format). */
#define TRACE_FORMATS(X) \
    X(HLO_TEXT, "hlo-text") \
    X(HLO_PROTO, "hlo-proto")
/* clang-format on */

#define TRACE_X_VERDICT(ID, ...) VERDICT_##ID,
#define TRACE_X_KIND(ID, ...) KIND_##ID,
#define TRACE_X_STOP(ID, ...) STOP_##ID,
#define TRACE_X_FORMAT(ID, ...) FORMAT_##ID,
#define TRACE_X_SEVERITY(ID, ...) SEV_##ID,
typedef enum { TRACE_VERDICTS(TRACE_X_VERDICT) VERDICT_COUNT } trace_verdict;
typedef enum { TRACE_KINDS(TRACE_X_KIND) KIND_COUNT } trace_kind;
typedef enum { TRACE_STOPS(TRACE_X_STOP) STOP_COUNT } trace_stop;
typedef enum { TRACE_FORMATS(TRACE_X_FORMAT) FORMAT_COUNT } trace_format;
typedef enum { TRACE_SEVERITIES(TRACE_X_SEVERITY) SEV_COUNT } trace_severity;
#undef TRACE_X_VERDICT
#undef TRACE_X_KIND
#undef TRACE_X_STOP
#undef TRACE_X_FORMAT
#undef TRACE_X_SEVERITY

/* Names ("verified", "missing-all-reduce", ...): "?" out of range. */
const char *trace_verdict_name(trace_verdict v);
const char *trace_kind_name(trace_kind k);
const char *trace_kind_title(trace_kind k);   /* "Missing all-reduce" … */
const char *trace_kind_level(trace_kind k);   /* SARIF level: "error" or "warning" */
const char *trace_kind_short(trace_kind k);   /* SARIF shortDescription */
const char *trace_stop_name(trace_stop s);
const char *trace_format_name(trace_format f);
const char *trace_severity_name(trace_severity s);

/* The entry a name stands for, or -1 when it is none of them. */
int trace_verdict_of(const char *name);
int trace_kind_of(const char *name);
int trace_stop_of(const char *name);
int trace_format_of(const char *name);

/* The name tables themselves (COUNT entries each), for readers that match
 * a JSON string against them. */
extern const char *const trace_verdict_names[VERDICT_COUNT];
extern const char *const trace_kind_names[KIND_COUNT];
extern const char *const trace_stop_names[STOP_COUNT];
extern const char *const trace_format_names[FORMAT_COUNT];
extern const char *const trace_severity_names[SEV_COUNT];

#include <stddef.h>

/* The next instruction name a finding's message mentions at or after *p
 * (p within msg): a word name.N, %name.N or name.N.clone, where N is a
 * number. Returns its start (past any %) with its length in *len and moves
 * *p past it; NULL when there is none. The checker draws the instructions
 * found this way, the report names those the picture still lacks. */
const char *trace_next_instr_name(const char *msg, const char **p, size_t *len);

#endif
