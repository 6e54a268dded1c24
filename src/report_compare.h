/* report_compare — this report against an earlier one (scalify report --compare).
 *
 * rc_build() reads the earlier report's summary.json (its text, as given) and
 * matches it with the traces being rendered: pairs by name, findings by their
 * identity key (report_names.h; summary.json's finding_details), so a finding
 * is "new" (only now), "fixed" (only before) or "unchanged" (both), whatever
 * its id or position. Per pair it keeps both verdicts, both wall times and
 * both finding totals (every finding the traces count, listed or not). An
 * earlier summary without finding_details (from an older scalify) compares
 * verdicts, totals and times only: has_keys is false and every finding counts
 * neither new nor fixed.
 *
 * The rc_diff borrows the traces and owns the parsed summary: rc_free() frees
 * it all. rc_json() writes compare.json (deterministic: trace order, then the
 * earlier report's pairs that are gone, in its order).
 */
#ifndef SCALIFY_REPORT_COMPARE_H
#define SCALIFY_REPORT_COMPARE_H

#include <stdbool.h>
#include <stddef.h>

#include "diag.h"
#include "report_names.h"
#include "trace_read.h"
#include "util.h"

typedef struct {
    const char *id, *kind, *page, *message;  /* borrowed from the parsed summary */
} rc_old_finding;

typedef enum { RC_BOTH, RC_NEW_PAIR, RC_GONE_PAIR } rc_status;

typedef struct {
    const char *name;
    rc_status status;
    size_t p;                      /* the trace (RC_BOTH, RC_NEW_PAIR) */
    const char *old_verdict;       /* NULL for a new pair */
    double old_wall, new_wall;     /* ms */
    long long old_total, new_total;
    size_t *new_f, n_new;          /* indexes of this trace's findings only now */
    size_t n_unchanged;
    rc_old_finding *fixed;         /* findings only before */
    size_t n_fixed;
} rc_pair;

typedef struct {
    void *json;          /* the parsed summary (json_t *) */
    const char *label;   /* what it was read from, as given */
    bool has_keys;
    rc_pair *pairs;
    size_t n;
    size_t tot_new, tot_fixed, tot_unchanged, pairs_new, pairs_gone, verdicts_changed;
} rc_diff;

/* False (with a message in d, whose file names the text) when text is not a
 * scalify summary.json. */
bool rc_build(rc_diff *r, const char *text, size_t len, const char *label, trace *const *t, size_t n,
              const rnames *names, diag *d);
void rc_free(rc_diff *r);
void rc_json(strbuf *out, const rc_diff *r, trace *const *t, const rnames *names);

#endif
