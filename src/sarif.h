/* sarif — results.sarif: SARIF 2.1.0 for every finding of every trace.
 *
 * One run; the driver lists one rule per finding kind (all kinds, in enum order,
 * so ruleIndex is stable). A result points at the distributed site's source
 * location (or the distributed HLO file when the source is unknown), names the
 * instruction as a logical location, and carries the baseline counterpart as a
 * related location. No timestamps: same traces, same bytes. Output is built with
 * jansson and hardened with esc_json_harden (no raw < > & anywhere).
 */
#ifndef SCALIFY_SARIF_H
#define SCALIFY_SARIF_H

#include <stddef.h>

#include "report_names.h"
#include "trace_read.h"
#include "util.h"

/* names: the report's page names; each result links its finding's page
 * (relative URI) as a related location and property "reportPage". */
void sarif_write(strbuf *out, trace *const *traces, size_t n, const rnames *names);

#endif
