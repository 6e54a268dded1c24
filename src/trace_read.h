/* trace_read — reads a trace (docs/TRACE.md, docs/trace.schema.json) into C.
 *
 * trace_read_file() parses one trace with jansson, checks every field the report
 * needs (types, enums, required keys) and copies it into a `trace` whose every
 * string and array lives in the trace's arena: trace_free() releases it all.
 * Problems are reported through the diag as "file: message" (the JSON path of
 * the bad field is part of the message; JSON syntax errors carry line:col), and
 * the function returns NULL. Unknown keys are ignored: the schema is closed for
 * writers, the reader is lenient so an older report can read a newer trace.
 *
 * Order is kept as written (segments, findings, mesh axes, relations): the
 * report renders in trace order, so the same trace gives the same bytes.
 * Non-finite witness figures ("nan", "inf", "-inf" in JSON) become NAN/INFINITY.
 */
#ifndef SCALIFY_TRACE_READ_H
#define SCALIFY_TRACE_READ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "diag.h"
#include "trace_enums.h"
#include "util.h"

/* verdicts, finding kinds, severities, stop reasons, input formats: trace_enums.h */
typedef enum { ROLE_DIVERGENCE, ROLE_OPERAND, ROLE_CONTEXT, ROLE_COLLAPSED } trace_role;
typedef enum { SIDE_BASELINE, SIDE_DISTRIBUTED } trace_side;

const char *trace_role_name(trace_role r);
const char *trace_side_name(trace_side s);

typedef struct { const char *key; const char *value; } trace_kv;  /* relations */
typedef struct { const char *axis; int64_t size; } trace_axis;

typedef struct {
    const char *path, *module, *sha256;
    trace_format format;
    int64_t instructions;
} trace_module;

typedef struct { const char *rule; int64_t count; } trace_rule_count;

typedef struct {
    const char *name;
    trace_verdict verdict;
    int64_t base_start, base_end, dist_start, dist_end;
    int64_t enodes, eclasses, iterations, rule_firings;
    trace_stop stop;
    double t_build, t_lift, t_saturate, t_check;  /* ms */
    bool memo_hit;
    const char *memo_of;  /* NULL unless a memo hit names its source */
    trace_rule_count *top_rules;
    size_t n_top_rules;
} trace_segment;

typedef struct {
    bool present;
    const char *instruction, *opcode, *hlo, *op_name, *file;  /* op_name, file may be NULL */
    int64_t line, column;                                      /* 0 when unknown */
} trace_site;

typedef struct {
    trace_side side;
    const char *instruction, *hlo;
    const char *file;             /* source location of its metadata; NULL, 0 when none */
    int64_t line;
} trace_involved;

typedef struct {
    const char *id, *label, *opcode;
    const char *type;             /* "f16[2,16]"; NULL in traces that do not say */
    const char *view;             /* distributed: "partial(tp,sum)"; NULL when not said */
    trace_side side;
    trace_role role;
    int64_t hops;
} trace_node;
/* A data edge (view NULL; steps > 1 when it folds a path of that many data
 * edges) or a relation link (view set; basis, optional, how check located an
 * unproved counterpart). */
typedef struct {
    const char *from, *to, *view, *basis;
    int64_t steps;
} trace_edge;

/* A step of a finding's path: origin first, the finding's instruction last. */
typedef struct {
    int64_t step;
    const char *node, *instruction, *opcode;
    const char *view, *file;      /* NULL when not said */
    int64_t line;                 /* 0 when unknown */
} trace_step;

typedef struct {
    const char *file;
    int64_t first_line, highlight;
    const char **lines;
    size_t n_lines;
} trace_snippet;

typedef struct { bool present; double max_abs, max_rel; } trace_diff;

typedef struct {
    const char *id, *message, *explanation, *segment;  /* segment may be NULL */
    trace_kind kind;
    trace_severity severity;
    trace_site dist, base;
    trace_involved *involved;
    size_t n_involved;
    bool has_subgraph;
    trace_node *nodes;
    size_t n_nodes;
    trace_edge *edges, *links;
    size_t n_edges, n_links;
    const char *truncated;  /* NULL when the checker did not cut the subgraph */
    trace_step *path;       /* provenance; n_path 0 when none */
    size_t n_path;
    int64_t path_omitted;   /* steps left out between the first and the second */
    trace_snippet *snippets;
    size_t n_snippets;
    bool has_witness;
    const char *outcome, *note; /* NULL when absent */
    int64_t inputs_seed;
    double max_abs, max_rel;
    trace_diff at_divergence, at_outputs;
} trace_finding;

typedef struct trace {
    arena mem;
    const char *source;  /* path it was read from */
    char source_sha256[65];  /* of the file's bytes as stored (trace_read_file); "" from a buffer */
    int64_t source_mtime;    /* its modification time (s since the epoch); 0 from a buffer */
    const char *tool_name, *tool_version, *rules_digest;
    const char *name;
    trace_module base, dist;
    trace_axis *mesh;
    size_t n_mesh;
    const char *relations_file;  /* may be NULL */
    const char **command;        /* pair.command: check's arguments; n_command 0 when not recorded */
    size_t n_command;
    trace_kv *relations;
    size_t n_relations;
    trace_verdict verdict;
    const char *error;  /* may be NULL */
    int64_t n_segments_summary, memo_hits, peak_bytes;
    double wall_ms, cpu_ms;
    double setup_ms;                 /* building outside any segment (0 when not said) */
    int64_t threads;                 /* that read the two programs; 0: not said */
    int64_t kind_counts[KIND_COUNT];  /* summary.findings */
    trace_segment *segments;
    size_t n_segments;
    trace_finding *findings;
    size_t n_findings;
    const char **assumptions;  /* preconditions the verdict relies on */
    size_t n_assumptions;
} trace;

/* Reads and validates path; NULL (with messages in d) on any problem. */
trace *trace_read_file(const char *path, diag *d);
/* Same, from a buffer; `name` is only used for the source field. */
trace *trace_read_buffer(const char *buf, size_t n, const char *name, diag *d);
void trace_free(trace *t);

/* Findings the trace counts: per kind summary.findings, never fewer than the
 * findings array lists of that kind (an older or hand-made trace). Fills
 * kinds (may be NULL) and returns their sum. */
int64_t trace_count_findings(const trace *t, int64_t kinds[KIND_COUNT]);

#endif
