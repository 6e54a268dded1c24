/* report_names — the names of a report's pages, stable across re-renders.
 *
 * A page's name depends only on what it shows, never on the position of its
 * trace among the report's arguments, so a link into a report (a ticket, a PR
 * comment, a SARIF result) survives re-rendering with other traces:
 *   pair page     pair-<name>.html: the pair's name when it is a safe file name
 *                 of at most 60 characters, else its slug and 8 hex digits of
 *                 the name's SHA-256;
 *   finding page  finding-<kind>-<12 hex>.html: the SHA-256 of the finding's
 *                 identity (rn_identity) — as scan-build's report-<hash>.html.
 * A finding's identity is what survives a re-export of the same programs: the
 * pair's name, the kind, the segment (an op_name scope), the distributed
 * site's opcode, op_name and source file:line:column, and the mesh axes' names
 * — never XLA instruction names (convert_element_type.908), which renumber on
 * every export, nor the finding's id or position. Findings of one pair with
 * equal identities are told apart by their order ("#2", "#3"), a pair named
 * twice among the traces by its occurrence ("@2").
 *
 * rn_build() fills every name; the strings are owned by the rnames and freed
 * by rn_free().
 */
#ifndef SCALIFY_REPORT_NAMES_H
#define SCALIFY_REPORT_NAMES_H

#include <stddef.h>

#include "trace_read.h"
#include "util.h"

typedef struct {
    size_t n;            /* traces */
    char **pair;         /* per trace: "<slug>", the page pair-<slug>.html */
    size_t *n_findings;  /* per trace */
    char ***finding;     /* per trace, per finding: "<kind>-<12 hex>", the page finding-<…>.html */
    char ***key;         /* per trace, per finding: 32 hex digits of the identity's SHA-256 */
} rnames;

void rn_build(rnames *r, trace *const *t, size_t n);
void rn_free(rnames *r);

/* Appends finding f's identity (without the "#k"/"@k" that tells equal ones
 * apart) to b: fields joined by U+001F. */
void rn_identity(strbuf *b, const trace *t, const trace_finding *f);

#endif
