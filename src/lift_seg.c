/* Segments and scopes of the walk (lift_int.h): which op_name scope an
 * instruction belongs to, the segment made for each scope on first sight
 * (indexed by name), the baseline's and the distributed program's ranges of
 * every segment in flattened positions, the time and e-nodes charged to the
 * segment being walked, the last baseline class of each scope (the
 * resynchronisation points), and the classes each segment added. */
#include <stdlib.h>
#include <string.h>

#include "lift_int.h"
#include "segrun.h"

/* The segment of scope s[0..n), created on first sight. */
uint32_t lf_segment_of(lift_ctx *c, const char *s, size_t n) {
    /* Neighbours share their scope's pointer (hlo_instr.scope). */
    if (s == c->last_scope && c->last_scope_seg < c->nsegs) return c->last_scope_seg;
    c->last_scope = s;
    if (c->nsegs && c->cur_seg < c->nsegs && strncmp(c->segs[c->cur_seg].name, s, n) == 0 && c->segs[c->cur_seg].name[n] == 0)
        return c->last_scope_seg = c->cur_seg;
    uint32_t i;
    if (strmap_get(&c->seg_index, s, n, &i)) return c->last_scope_seg = i;
    if (c->nsegs == c->capsegs) {
        size_t cap = c->capsegs;
        XGROW(c->segs, cap, c->nsegs + 1);
        c->capsegs = (uint32_t)cap;
    }
    memset(&c->segs[c->nsegs], 0, sizeof c->segs[0]);
    c->segs[c->nsegs].name = arena_strndup(c->a, s, n);
    c->segs[c->nsegs].memo_of = -1;
    strmap_put(&c->seg_index, c->segs[c->nsegs].name, n, c->nsegs);
    return c->last_scope_seg = c->nsegs++;
}

void lf_record_scope(lift_ctx *c, const hlo_instr *in, eid cls) {
    const char *s;
    size_t n;
    if (!sr_scope_top(in, &s, &n)) return;
    uint32_t idx;
    if (!strmap_get(&c->scope_index, s, n, &idx)) {
        if (cls == EID_NONE) return;
        idx = (uint32_t)c->nscopes++;
        XGROW(c->scope_cls, c->capscopes, c->nscopes);
        strmap_put(&c->scope_index, arena_strndup(c->a, s, n), n, idx);
    }
    c->scope_cls[idx] = cls;
}

/* Time and e-nodes since the last switch go to the current segment; the
 * nodes it added are remembered as a span (for its class count). */
void lf_charge_segment(lift_ctx *c, double t, uint32_t nn) {
    c->segs[c->cur_seg].ms += t - c->acct_t;
    c->segs[c->cur_seg].enodes += nn - c->acct_nodes;
    if (nn > c->acct_nodes) {
        XGROW(c->spans, c->capspans, c->nspans + 1);
        c->spans[c->nspans++] = (lift_span){c->cur_seg, c->acct_nodes, nn};
    }
}

/* Building the baseline: the time since the last switch goes to the segment
 * left; `next` is the one entered (UINT32_MAX: none, the walk is over). */
void lf_charge_build(lift_ctx *c, uint32_t next) {
    double t = now_ms();
    if (c->bacct_t > 0 && c->bacct_seg < c->nsegs) c->segs[c->bacct_seg].build_ms += t - c->bacct_t;
    c->bacct_t = t;
    c->bacct_seg = next;
}

/* Position bookkeeping of one instruction about to be lifted: its flattened
 * position, the ranges of its segment on either side, and the time and
 * e-nodes since the previous instruction (charged to that one's segment). */
void lf_account(lift_ctx *c, const hlo_instr *in) {
    if (c->no_account) return;  /* a memoised baseline layer built later: counted when walked */
    if (!c->baseline_mode) c->lifted++;
    const char *sc;
    size_t sn;
    if (c->baseline_mode) {
        /* The baseline's range of each scope, in flattened positions. */
        uint32_t pos = c->built++;
        if (c->loop_depth ? c->loop_seg < c->nsegs : sr_scope_top(in, &sc, &sn)) {
            /* a loop body belongs to the loop's segment, whatever its op_names */
            uint32_t si = c->loop_depth ? c->loop_seg : lf_segment_of(c, sc, sn);  /* may grow segs: index first */
            if (c->segs[si].bstart == c->segs[si].bend) c->segs[si].bstart = pos;
            c->segs[si].bend = pos + 1;
            /* Time since the last switch goes to the segment left (instructions
             * without a scope count to the current one). */
            if (si != c->bacct_seg || c->bacct_t == 0) lf_charge_build(c, si);
        }
    } else {
        /* An instruction with an op_name scope picks the segment; others (and
         * helper bodies without scopes) count to the current one. Positions
         * are in the flattened (inlined) program. */
        uint32_t pos = (uint32_t)c->lifted - 1;
        uint32_t seg = c->cur_seg;
        if (c->loop_depth && c->nsegs) seg = c->cur_seg;  /* a loop body belongs to the loop's segment */
        else if (sr_scope_top(in, &sc, &sn)) seg = lf_segment_of(c, sc, sn);
        else if (!c->nsegs) seg = lf_segment_of(c, "entry", 5);
        if (seg != c->cur_seg || c->acct_t == 0) {
            /* Time and e-nodes since the last switch go to the segment left. */
            double t = now_ms();
            uint32_t nn = eg_node_count(c->g);
            if (c->acct_t > 0) lf_charge_segment(c, t, nn);
            c->acct_t = t;
            c->acct_nodes = nn;
            c->cur_seg = seg;
        }
        lift_segment *g = &c->segs[c->cur_seg];
        if (g->dstart == g->dend) g->dstart = pos;
        g->dend = pos + 1;
    }
}

/* account() for an instruction skipped by a memo hit and, for a call, for
 * everything the call would have inlined. */
void lf_account_tree(lift_ctx *c, const hlo_instr *in) {
    lf_account(c, in);
    const hlo_attr *ta = in->op == OP_CALL ? instr_attr(in, A_TO_APPLY) : NULL;
    if (!ta || ta->v.ints[0] >= c->cur->ncomps) return;
    const hlo_comp *callee = &c->cur->comps[ta->v.ints[0]];
    for (uint32_t i = 0; i < callee->ninstrs; i++) lf_account_tree(c, &callee->instrs[i]);
}

void lift_segment_classes(lift_ctx *c, uint32_t *out) {
    uint32_t n = eg_node_count(c->g);
    uint32_t *stamp = xcalloc(n + 1, sizeof *stamp);
    /* The spans grouped by segment, in their order within each (a counting
     * sort; a scan of every span per segment was quadratic). */
    size_t *first = xcalloc(c->nsegs + 1, sizeof *first), *order = xcalloc(c->nspans + 1, sizeof *order);
    for (size_t k = 0; k < c->nspans; k++)
        if (c->spans[k].seg < c->nsegs) first[c->spans[k].seg + 1]++;
    for (uint32_t sg = 0; sg < c->nsegs; sg++) first[sg + 1] += first[sg];
    for (size_t k = 0; k < c->nspans; k++)
        if (c->spans[k].seg < c->nsegs) order[first[c->spans[k].seg]++] = k;
    size_t k = 0;
    for (uint32_t sg = 0; sg < c->nsegs; sg++) {
        out[sg] = 0;
        for (; k < first[sg]; k++) {
            const lift_span *sp = &c->spans[order[k]];
            for (uint32_t id = sp->n0; id < sp->n1 && id < n; id++) {
                eid cls = eg_find(c->g, id);
                if (stamp[cls] != sg + 1) {
                    stamp[cls] = sg + 1;
                    out[sg]++;
                }
            }
        }
    }
    free(first);
    free(order);
    free(stamp);
}
