/* sarif — results.sarif: SARIF 2.1.0 for every finding of every trace.
 *
 * One run; the driver lists one rule per finding kind (all kinds, in enum order,
 * so ruleIndex is stable). Every result has a text location with a startLine,
 * as code scanning requires: the distributed site's source line; else the
 * instruction's line in the HLO text (x.hlo beside a checked x.hlo.pb); else
 * the pair's source file, naming the op_name; else the finding in its trace.
 * Never a compressed or binary file. It names the instruction as a logical
 * location, and carries the baseline counterpart, the instruction in the HLO
 * text and the report page as related locations. The HLO and trace files are
 * read at their paths in the traces (relative to where check ran). No
 * timestamps: same inputs, same bytes. Output is built with jansson and
 * hardened with esc_json_harden (no raw < > & anywhere).
 */
#ifndef SCALIFY_SARIF_H
#define SCALIFY_SARIF_H

#include <stddef.h>

#include "report_names.h"
#include "trace_read.h"
#include "util.h"

/* names: the report's page names; each result links its finding's page
 * (relative URI) as a related location and property "reportPage", and its
 * partialFingerprints are names->key (report_names.h: from what survives a
 * re-export). kind_md: per kind, templates/findings/<kind>.md (NULL: none),
 * the rule's help and, its first paragraph, the fullDescription. */
void sarif_write(strbuf *out, trace *const *traces, size_t n, const rnames *names, const char *const *kind_md);

#endif
