/* trace_write — the checker's typed result (check.h) into its trace
 * (docs/TRACE.md, docs/trace.schema.json); the mirror of trace_read.
 *
 * trace_write() decides nothing: every verdict, finding, kind and count comes
 * from the check_result. It adds what a reader needs around them: each
 * finding's nearest baseline counterpart (same op_name scope, source line or
 * scope ending, said as the link's basis), its operands, a subgraph (one hop
 * of operands, the instructions the message names and the short path to
 * them, every node typed) and source windows (read only below
 * o->source_root) around every line the message names, the pair's files, mesh, relations and the
 * command that checks it again, the rules' digest, and per-segment figures.
 * Keys are written in a fixed order, so the same result gives the same bytes
 * (timings aside).
 */
#ifndef SCALIFY_TRACE_WRITE_H
#define SCALIFY_TRACE_WRITE_H

#include <jansson.h>

#include "check.h"

/* The trace of r (a new jansson object the caller frees); r is not changed. */
json_t *trace_write(const check_opts *o, const check_result *r);

/* The same trace appended to out as the text a trace file holds (jansson's
 * dump with JSON_INDENT(1) | JSON_PRESERVE_ORDER | JSON_ENSURE_ASCII, then a
 * newline), without building the segments as objects; false when it could
 * not be written (out is then unchanged). */
bool trace_write_text(const check_opts *o, const check_result *r, strbuf *out);

/* The instruction of m named q[0..len) (the first in module order), with
 * its computation in *c; NULL when m has none. */
const hlo_instr *tw_find_instr(const hlo_module *m, const char *q, size_t len, const hlo_comp **c);

/* The instruction of m that computed the value in (of computation c)
 * carries on, when in only passes it on (copies, bitcasts, calls, tuples):
 * the first one along that chain with a source line other than in's, with
 * the number of data steps to it in *steps (may be NULL); NULL when there
 * is none. A finding's source windows show its line, its subgraph draws it. */
const hlo_instr *tw_value_source(const hlo_module *m, const hlo_comp *c, const hlo_instr *in, int *steps);

#endif
