/* inspect — a human-readable summary of a module (`scalify inspect`).
 *
 * Lists the module, its computations and instruction count, the device count,
 * the entry parameters with shapes and shardings, an opcode histogram (most
 * frequent first, ties by name) and every collective with its replica groups,
 * channel mode and reduction. Output is deterministic. Appends to out.
 */
#ifndef SCALIFY_INSPECT_H
#define SCALIFY_INSPECT_H

#include "graph.h"

void inspect_summary(strbuf *out, const hlo_module *m);
/* XLA's collective group mode of an instruction: "cross-replica",
 * "cross-partition", "cross-replica-and-partition" or "flattened-id". */
const char *inspect_channel_mode(const hlo_instr *in);

#endif
