/* debug — the developer's switches, one environment variable read once.
 *
 * SCALIFY_DEBUG is a comma-separated list of switches and key=value pairs
 * (docs/HACKING.md, "Debugging", says what each prints):
 *
 *   lift        why values are left unrelated, masks, loop carries, check's summary
 *   views       each distributed instruction's lifted kind, view and term
 *               (per-device terms: each device's)
 *   memo        why a run did not become a memo representative
 *   witness     each output block where execution found a larger difference
 *   invariants  e-graph invariants checked after lifting and every saturation
 *   base=NAME   with term=NAME: descend baseline instruction NAME's term and
 *   term=NAME   distributed instruction NAME's term to where they part
 *               (NAME@D: device D's term of per-device terms)
 *   depth=N     how deep the two terms are printed there (default 5)
 *
 * e.g. SCALIFY_DEBUG=lift,base=dot.3,term=dot.7 scalify check ...
 * The variable is parsed on first use (thread-safe); an unknown word is said
 * once on stderr and otherwise ignored. Debug output goes to stderr only and
 * never changes a verdict or a trace.
 */
#ifndef SCALIFY_DEBUG_H
#define SCALIFY_DEBUG_H

#include <stdbool.h>

typedef enum {
    DBG_LIFT = 1 << 0,
    DBG_VIEWS = 1 << 1,
    DBG_MEMO = 1 << 2,
    DBG_WITNESS = 1 << 3,
    DBG_INVARIANTS = 1 << 4,
} dbg_switch;

/* Whether switch s is on. */
bool dbg_on(dbg_switch s);
/* The instruction names of base= and term= (NULL when not given). */
const char *dbg_base_name(void);
const char *dbg_term_name(void);
/* depth=N, else 5. */
int dbg_depth(void);

#endif
