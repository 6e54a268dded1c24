/* lift — the walk (see lift.h): both programs lifted instruction by
 * instruction by the same code, the baseline on one device (lift_baseline),
 * the distributed program on its mesh (lift_distributed).
 * Owns the walk itself (lf_lift_comp, lf_lift_one: parameters, calls, loops,
 * tuples and constants, then the per-opcode transfer function, constant
 * factors, zero masks and the first divergence), the per-opcode dispatch
 * (lf_lift_instr), the elementwise transfer function with the re-reading of
 * its operands under one view (lf_review_operands, unit-dim readings) and
 * what lifting records (findings, undecided uses, assumptions); segments and
 * their accounting are lift_seg.c's. Each transfer function says in a comment
 * what it relates and when it refuses; the other opcode families and the
 * helpers live in the lift_*.c files beside this one (lift_int.h). */
#include "debug.h"
#include "lift.h"
#include "lift_int.h"

#include "eattr.h"
#include "interp.h"
#include "linalg.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "segrun.h"

void lift_init(lift_ctx *c, egraph *g, arena *a, const hlo_module *base, const hlo_module *dist, const mesh *m) {
    memset(c, 0, sizeof *c);
    c->g = g;
    c->a = a;
    c->base = base;
    c->dist = dist;
    c->mesh = c->dist_mesh = m;
    c->ndev = mesh_devices(m);
    c->cur = dist;
    c->origin = EG_LIFTED;
    c->unsupported_kind = c->divergence_kind = LF_NO_KIND;
    c->digests[0] = xcalloc(base->ncomps, sizeof(uint64_t));
    c->digests[1] = xcalloc(dist->ncomps, sizeof(uint64_t));
    c->walked = xcalloc(dist->ncomps ? dist->ncomps : 1, sizeof *c->walked);
    c->seg_at = xcalloc(dist->ncomps ? dist->ncomps : 1, sizeof *c->seg_at);
    /* Besides the entry computations' values (vals_for), lifting takes about
     * 64 bytes per instruction of the two programs (the memo's runs, other
     * computations' values). */
    arena_expect(a, (size_t)(graph_instr_count(base) + graph_instr_count(dist)) * 64);
}

/* The entry computations' values (the bulk of a flat program's: one lval per
 * instruction) live in mappings of their own, [0] the baseline's and [1] the
 * distributed program's, rather than in the arena: the baseline's, once
 * nothing reads them (the memo off or futile), become the distributed walk's.
 * Pages already in use cost a memset; fresh ones the kernel's zeroing, which
 * on a virtual machine is the larger part of a deep program's time. */
enum { VALS_MAP_MIN = 1 << 22 };

static void vals_unmap(lval *p, size_t len) {
    if (p) munmap(p, len);
}

static lval *vals_for(lift_ctx *c, const hlo_comp *comp) {
    size_t bytes = (size_t)comp->ninstrs * sizeof(lval);
    int k = c->baseline_mode ? 0 : 1;
    if (c->depth != 0 || comp != graph_entry(c->cur) || bytes < VALS_MAP_MIN || c->vmap[k])
        return arena_alloc(c->a, bytes ? bytes : 1);
    long page = sysconf(_SC_PAGESIZE);
    size_t len = (bytes + (size_t)page - 1) / (size_t)page * (size_t)page;
    void *p = MAP_FAILED;
    if (k == 1 && c->vmap[0] && c->vmap_spare) {
        /* The baseline's values, read by nothing now: reused (grown when short). */
        size_t old = c->vmap_len[0];
        p = old >= len ? (void *)c->vmap[0] : mremap(c->vmap[0], old, len, MREMAP_MAYMOVE);
        if (p != MAP_FAILED) {
            memset(p, 0, old < bytes ? old : bytes);
            if (old > len) len = old;
        } else {
            vals_unmap(c->vmap[0], old);
        }
        c->vmap[0] = NULL;
        c->vmap_spare = false;
    }
    if (p == MAP_FAILED) {
        p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) return arena_alloc(c->a, bytes);
#ifdef MADV_HUGEPAGE
        madvise(p, len, MADV_HUGEPAGE); /* advice: without it, small pages */
#endif
    }
    c->vmap[k] = p;
    c->vmap_len[k] = len;
    return p;
}

void lift_values_done(lift_ctx *c) {
    for (int k = 0; k < 2; k++) {
        vals_unmap(c->vmap[k], c->vmap_len[k]);
        c->vmap[k] = NULL;
    }
    memset(c->walked, 0, (c->dist->ncomps ? c->dist->ncomps : 1) * sizeof *c->walked);
    lf_memo_free(c);
}

void lift_done(lift_ctx *c) {
    lift_values_done(c);
    free(c->base_types);
    sb_free(&c->assumptions);
    free(c->segs);
    strmap_free(&c->seg_index);
    free(c->loops);
    free(c->spans);
    strmap_free(&c->scope_index);
    free(c->scope_cls);
    free(c->findings);
    free(c->digests[0]);
    free(c->digests[1]);
    free(c->walked);
    free(c->seg_at);
    for (size_t k = 0; k < c->capkvals; k++) interp_val_free(c->kvals[k]);
    free(c->kvals);
    free(c->base_konst);
    strmap_free(&c->folds);
    strmap_free(&c->chains);
    for (uint32_t k = 0; k < c->nchain_vals; k++) interp_val_free(c->chain_vals[k]);
    free(c->chain_vals);
    strmap_free(&c->base_factors);
    free(c->base_factor);
    free(c->diffs);
}

/* ---- what lifting records: findings, undecided uses, assumptions ---- */

void lf_finding(lift_ctx *c, trace_kind kind, const hlo_comp *comp, const hlo_instr *in, const char *fmt, ...) {
    if (c->baseline_mode || c->quiet) return;  /* one device, every value replicated: nothing to find */
    char msg[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    /* A finding about where a value is sharded (not whether it is partial) needs
     * an unambiguous view: after a reshape with several true readings it is only
     * undecided. Such findings are marked with a leading '@' by their callers. */
    /* A value partial only in one reading of an ambiguous reshape (another
     * leaves it sharded) decides no finding about its use. */
    if (c->partial_unsure_now) {
        lf_unsupported(c, comp, in, "%s (with an operand partial only in one reading: of an ambiguous reshape, of "
                       "zeros the program does not write, or a reduction of each device's block that the baseline "
                       "also takes block by block, as statistics of groups)", msg + (msg[0] == '@'));
        return;
    }
    if (c->guessed_now) {
        lf_unsupported(c, comp, in, "%s (with an operand computed from a value no transfer function related, whose "
                       "view is only a guess)", msg + (msg[0] == '@'));
        return;
    }
    if (msg[0] == '@') {
        if (c->ambiguous_now) {
            lf_unsupported(c, comp, in, "%s (with one reading of an ambiguous reshape)", msg + 1);
            return;
        }
        memmove(msg, msg + 1, strlen(msg));
    }
    if (c->nfindings == c->capfindings) {
        size_t cap = c->capfindings;
        XGROW(c->findings, cap, c->nfindings + 1);
        c->capfindings = (uint32_t)cap;
    }
    c->findings[c->nfindings++] = (lift_finding){kind, comp, in, arena_strdup(c->a, msg)};
    if (c->nsegs) c->segs[c->cur_seg].findings++;
}

/* A finding's record: the message formatted into the arena. */
static lift_finding finding_v(lift_ctx *c, trace_kind kind, const hlo_comp *comp, const hlo_instr *in, const char *fmt,
                              va_list ap) {
    char msg[600];
    vsnprintf(msg, sizeof msg, fmt, ap);
    return (lift_finding){kind, comp, in, arena_strdup(c->a, msg)};
}

void lf_pending(lift_ctx *c, trace_kind kind, const hlo_comp *comp, const hlo_instr *in, const char *fmt, ...) {
    if (c->baseline_mode || c->npending++) return;  /* the first is named */
    va_list ap;
    va_start(ap, fmt);
    c->pending = finding_v(c, kind, comp, in, fmt, ap);
    va_end(ap);
}

void lf_tentative(lift_ctx *c, trace_kind kind, const hlo_comp *comp, const hlo_instr *in, const char *fmt, ...) {
    if (c->baseline_mode || c->quiet || c->ntentative++) return;  /* the first is named */
    va_list ap;
    va_start(ap, fmt);
    c->tentative = finding_v(c, kind, comp, in, fmt, ap);
    va_end(ap);
    c->tentative_first = !c->first_unsupported;
}

static void unsupported_v(lift_ctx *c, const hlo_comp *comp, const hlo_instr *in, trace_kind suspect, const char *fmt,
                          va_list ap) {
    if (c->baseline_mode || c->quiet) return;  /* the baseline falls back to its own op (lf_lift_comp) */
    char msg[600];
    vsnprintf(msg, sizeof msg, fmt, ap);
    if (dbg_on(DBG_LIFT)) fprintf(stderr, "lift: unsupported: %s\n", msg);
    c->nunsupported++;
    if (c->nsegs) c->segs[c->cur_seg].unsupported++;
    if (c->resynced && !c->later_unsupported) {
        c->later_unsupported = in;
        c->later_unsupported_comp = comp;
        c->later_unsupported_why = arena_strdup(c->a, msg);
        c->later_unsupported_konst = c->konst_operand_now;
    }
    if (c->first_unsupported) return;
    c->first_unsupported = in;
    c->first_unsupported_comp = comp;
    c->unsupported_konst = c->konst_operand_now;
    c->unsupported_why = arena_strdup(c->a, msg);
    c->unsupported_kind = suspect;
}

/* What the reasons recorded so far are, to withdraw those of a transfer
 * function whose op another relates after all (per-device terms). */
typedef struct unsupported_mark {
    uint32_t n, seg_n, ntentative, npending;
    const hlo_instr *first, *later;
    size_t assumptions;
    bool reshape_defaulted;
    int64_t refine_factor;
    uint32_t refine_axis;
} unsupported_mark;

static unsupported_mark mark_unsupported(const lift_ctx *c) {
    return (unsupported_mark){c->nunsupported, c->nsegs ? c->segs[c->cur_seg].unsupported : 0, c->ntentative, c->npending,
                              c->first_unsupported, c->later_unsupported, c->assumptions.len, c->reshape_defaulted,
                              c->refine_factor, c->refine_axis};
}

static void back_to_mark(lift_ctx *c, const unsupported_mark *m) {
    c->nunsupported = m->n;
    if (c->nsegs) c->segs[c->cur_seg].unsupported = m->seg_n;
    c->ntentative = m->ntentative;
    c->npending = m->npending;
    if (!m->first) c->first_unsupported = NULL, c->first_unsupported_comp = NULL, c->unsupported_why = NULL;
    if (!m->later) c->later_unsupported = NULL, c->later_unsupported_comp = NULL, c->later_unsupported_why = NULL;
    if (c->assumptions.s && c->assumptions.len > m->assumptions) c->assumptions.s[c->assumptions.len = m->assumptions] = 0;
    c->reshape_defaulted = m->reshape_defaulted;
    c->refine_factor = m->refine_factor;
    c->refine_axis = m->refine_axis;
}

void lf_unsupported(lift_ctx *c, const hlo_comp *comp, const hlo_instr *in, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    unsupported_v(c, comp, in, LF_NO_KIND, fmt, ap);
    va_end(ap);
}

void lf_unsupported_suspect(lift_ctx *c, trace_kind kind, const hlo_comp *comp, const hlo_instr *in, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    unsupported_v(c, comp, in, kind, fmt, ap);
    va_end(ap);
}

/* Records an assumption the verdict rests on, once (lift.h "assumptions"). */
void lf_assume(lift_ctx *c, const char *fmt, ...) {
    char line[300];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (c->assumptions.s && strstr(c->assumptions.s, line)) return;
    sb_puts(&c->assumptions, line);
    sb_putc(&c->assumptions, '\n');
}

/* ---- baseline ---- */

/* Index arithmetic (lift_index.c): values related by their functions, not
 * (or not only) by a term. */
bool lf_is_index(const lval *x) { return x->kind == LV_PW || x->kind == LV_MASK || x->kind == LV_IVEC; }

/* Switches the walk to one side: the baseline on one device with every value
 * replicated, or the distributed program on its mesh. */
void lf_walk_side(lift_ctx *c, bool baseline) {
    static const mesh one_device = {0};
    c->baseline_mode = baseline;
    c->cur = baseline ? c->base : c->dist;
    c->origin = baseline ? EG_BASELINE : EG_LIFTED;
    c->mesh = baseline ? &one_device : c->dist_mesh;
    c->ndev = mesh_devices(c->mesh);
}

bool lift_baseline(lift_ctx *c, eid **outs, uint32_t *nouts) {
    /* The baseline goes through the same walk as the distributed program, on one
     * device with every value replicated, so both sides build their terms (and
     * canonical forms) with the same code. */
    const hlo_comp *be = graph_entry(c->base);
    lf_walk_side(c, true);
    double t0 = now_ms();
    lval r = lf_lift_comp(c, be, NULL, NULL, be->nparams); /* every parameter dup */
    lf_unscale(c, &r);
    /* An index value or masked row as an output: its term, as any op that
     * does not take index values reads it (lf_index_as_term; on one device). */
    for (uint32_t k = 0; k < (r.kind == LV_TUPLE ? r.n : 1); k++)
        if (lf_is_index(r.kind == LV_TUPLE ? &r.elems[k] : &r)) lf_index_as_term(c, r.kind == LV_TUPLE ? &r.elems[k] : &r);
    lf_charge_build(c, UINT32_MAX);
    if (!c->nsegs && c->built && !c->no_account) {
        /* No op_name scope anywhere: the whole baseline is the one segment the
         * distributed program's unscoped instructions go to. */
        uint32_t si = lf_segment_of(c, "entry", 5);
        c->segs[si].bstart = 0, c->segs[si].bend = c->built;
        c->segs[si].build_ms += now_ms() - t0;
    }
    lf_walk_side(c, false);
    /* the types the baseline's values have (lf_baseline_has_type) */
    for (eid k = 0; k < eg_node_count(c->g); k++)
        if (eg_node_live(c->g, k) && (eg_class_origin(c->g, k) & EG_BASELINE))
            flag_set(&c->base_types, &c->nbase_types, eg_class_type(c->g, k));
    /* Only the memo reads the baseline's values after its walk, and it
     * keeps what it reads: the walk's become the distributed walk's. */
    c->vmap_spare = lf_memo_release_base(c);
    uint32_t n = r.kind == LV_TUPLE ? r.n : 1;
    *outs = arena_alloc(c->a, (n + 1) * sizeof **outs);
    *nouts = n;
    for (uint32_t k = 0; k < n; k++) {
        const lval *x = r.kind == LV_TUPLE ? &r.elems[k] : &r;
        (*outs)[k] = x->kind == LV_TERM ? x->cls : lf_fresh_var(c, DT_TUPLE, NULL, 0);
    }
    return true;
}

bool lf_baseline_has_type(const lift_ctx *c, uint32_t type) { return type < c->nbase_types && c->base_types[type]; }

/* ---- values ---- */

/* Global dims of a local shape under v. */
void lf_global_dims(const lift_ctx *c, const view *v, const shape *local, int64_t *out) {
    for (uint32_t d = 0; d < local->rank; d++) out[d] = local->dims[d] * (d < v->rank ? view_dim_parts(v, c->mesh, d) : 1);
}

/* An assumed replacement: the content is a fresh variable; the view is
 * known (lf_assumed_known) or only a guess (lf_assumed_term: no transfer
 * function related the op, lval.guessed). */
static lval assumed(lift_ctx *c, const hlo_instr *in, view v, bool guessed) {
    int64_t dims[VIEW_MAX_RANK];
    lf_global_dims(c, &v, &in->shape, dims);
    c->assumed++;
    lval r = term(lf_fresh_var(c, in->shape.dtype, dims, in->shape.rank), v, true);
    r.guessed = guessed;
    c->guessed_now |= guessed;
    return r;
}

lval lf_assumed_term(lift_ctx *c, const hlo_instr *in, view v) { return assumed(c, in, v, true); }

lval lf_assumed_known(lift_ctx *c, const hlo_instr *in, view v) { return assumed(c, in, v, false); }

bool lf_same_sharding(const view *a, const view *b) {
    if (a->rank != b->rank) return false;
    for (uint32_t d = 0; d < a->rank; d++)
        if (a->dims[d].naxes != b->dims[d].naxes || memcmp(a->dims[d].axes, b->dims[d].axes, a->dims[d].naxes))
            return false;
    return true;
}

/* "operand 0 is shard(1,tp), operand 1 is an index value, ..." */
void lf_describe_operands(strbuf *b, const lift_ctx *c, const lval *ops, uint32_t n) {
    static const char *const kinds[] = {[LV_UNKNOWN] = "not related", [LV_DEV] = "a device-dependent value",
                                        [LV_TUPLE] = "a tuple", [LV_PW] = "an index value", [LV_MASK] = "a mask",
                                        [LV_LAYOUT] = "a rearranged value", [LV_WIN] = "a per-device window",
                                        [LV_PSUB] = "a sum of some devices' shares",
                                        [LV_ROW] = "a per-device slice of a term",
                                        [LV_DEVT] = "a different term on each device"};
    for (uint32_t o = 0; o < n; o++) {
        sb_printf(b, "%soperand %u is ", o ? ", " : "", o);
        if (ops[o].kind == LV_TERM) view_print(b, &ops[o].v, c->mesh);
        else sb_puts(b, ops[o].kind < sizeof kinds / sizeof *kinds && kinds[ops[o].kind] ? kinds[ops[o].kind] : "?");
    }
}

/* ---- elementwise: operands re-read under one view ---- */

/* A broadcast is constant along the dimensions it adds, so it relates to any
 * sharding of those: re-view operand o (a broadcast) with the dims sharded as
 * in want. False when o is not a broadcast or a dimension it did not add
 * would have to change. */
bool lf_plain_of_index(lval *x) {
    if ((x->kind != LV_PW && x->kind != LV_MASK) || x->cls == EID_NONE || !view_is_dup(&x->v) || x->v.partial) return false;
    bool konst = x->konst;
    *x = term(x->cls, x->v, false);
    x->konst = konst;
    return true;
}

bool lf_review_broadcast(lstate *s, uint32_t o, const view *want) {
    lift_ctx *c = s->c;
    const hlo_instr *b = &s->comp->instrs[s->in->operands[o]];
    if (s->ops[o].kind != LV_TERM) return false;
    /* Not a broadcast: the operand itself, seen as the identity broadcast (its
     * unit dims may still stand for a broadcast along a sharded dim). */
    bool is_bcast = b->op == OP_BROADCAST;
    const hlo_instr *src = is_bcast ? &s->comp->instrs[b->operands[0]] : b;
    const lval *x = is_bcast ? &s->vals[b->operands[0]] : &s->ops[o];
    lval plain = *x;
    lf_plain_of_index(&plain);
    x = &plain;
    /* A partial sum broadcast (a bias added on one device only) stays one
     * along dims newly sharded over other axes. */
    if (x->kind != LV_TERM || src->shape.rank > VIEW_MAX_RANK ||
        (x->v.partial && (!is_bcast || x->v.partial != s->ops[o].v.partial || x->v.red != s->ops[o].v.red)))
        return false;
    /* Rebuilt from the broadcast's operand. Where the operand was read as a
     * partial sum of its copies (lf_copies_into_partial_sums), the factor n
     * that reading gave it goes into the new term too: carried beside it,
     * or put back into it (then the old term is its own times k). */
    const lval *own = &s->vals[s->in->operands[o]];
    bool copies = is_bcast && s->ops[o].v.partial != own->v.partial;
    double copies_k = 1;
    bool copies_put_back = false;
    if (copies) {
        if (own->v.partial || own->kind != LV_TERM || lf_scale_of(own) != lf_scale_of(x)) return false;
        if (eg_find(c->g, s->ops[o].cls) != eg_find(c->g, own->cls)) {
            copies_k = lf_scale_put_back(c, s->ops[o].cls, own->cls) * lf_scale_of(&s->ops[o]);
            copies_put_back = true;
            if (copies_k == 0) return false;
        } else {
            copies_k = lf_scale_of(&s->ops[o]);
        }
    }
    /* (not a broadcast: its unit dims stand for one, the others as it is
     * sharded; a dim sharded otherwise than want is no such reading, and
     * nor is a unit dim sharded over an axis the value is already cut by:
     * its blocks differ along that axis) */
    if (!is_bcast && !view_is_dup(&x->v)) {
        uint32_t used = view_axes_used(&x->v);
        for (uint32_t d = 0; d < x->v.rank && d < want->rank; d++) {
            if (x->v.dims[d].naxes && !lf_same_dim(&x->v.dims[d], &want->dims[d])) return false;
            for (uint32_t a = 0; !x->v.dims[d].naxes && a < want->dims[d].naxes; a++)
                if (used >> want->dims[d].axes[a] & 1) return false;
        }
    }
    uint32_t nd;
    int64_t ident[VIEW_MAX_RANK];
    const int64_t *bd;
    if (is_bcast) {
        bd = instr_ints(b, A_DIMENSIONS, &nd);
    } else {
        nd = b->shape.rank;
        for (uint32_t k = 0; k < nd; k++) ident[k] = k;
        bd = ident;
    }
    view v = s->ops[o].v;
    /* Operand dims kept: all but unit dims whose output dim must become sharded
     * (JAX's size-1 broadcasting: constant along them, so they behave as added). */
    bool keep[VIEW_MAX_RANK];
    bool dropped = false;
    for (uint32_t k = 0; k < nd; k++) keep[k] = true;
    for (uint32_t d = 0; d < b->shape.rank; d++) {
        /* Only the axes in use count (a dim whose axes were dropped may keep stale bytes). */
        if (v.dims[d].naxes == want->dims[d].naxes && memcmp(v.dims[d].axes, want->dims[d].axes, v.dims[d].naxes) == 0) continue;
        for (uint32_t a = 0; a < want->dims[d].naxes; a++)
            if (x->v.partial >> want->dims[d].axes[a] & 1) return false;
        int src_dim = -1;
        for (uint32_t k = 0; k < nd; k++)
            if (bd[k] == d) src_dim = (int)k;
        if (src_dim >= 0) {
            if (src->shape.dims[src_dim] != 1 || b->shape.dims[d] != 1 || x->v.dims[src_dim].naxes) return false;
            keep[src_dim] = false;
            dropped = true;
        }
        v.dims[d] = want->dims[d];
    }
    eid operand = x->cls;
    int64_t newdims[VIEW_MAX_RANK];
    uint32_t nn = 0;
    if (dropped) {
        /* reshape(x) without the unit dims, global shape. */
        int64_t gd[VIEW_MAX_RANK];
        uint32_t r = 0;
        for (uint32_t k = 0; k < nd; k++)
            if (keep[k]) gd[r++] = src->shape.dims[k] * view_dim_parts(&x->v, c->mesh, k);
        operand = lf_mk_reshape(c, x->cls, lf_type_of(c, src->shape.dtype, gd, r), c->origin);
    }
    for (uint32_t k = 0; k < nd; k++)
        if (keep[k]) newdims[nn++] = bd[k];
    int64_t dims[VIEW_MAX_RANK];
    for (uint32_t d = 0; d < b->shape.rank; d++) dims[d] = b->shape.dims[d] * view_dim_parts(&v, c->mesh, d);
    uint32_t t = lf_type_of(c, b->shape.dtype, dims, b->shape.rank);
    eid bc = eg_add(c->g, OP_BROADCAST, lf_list_attr(c, A_DIMENSIONS, newdims, nn), t, &operand, 1, c->origin);
    const interp_val *xv = lf_kval(c, operand);
    interp_val *bv = xv && !lf_kval(c, bc) ? lf_broadcast_values(xv, newdims, nn, dims, b->shape.rank) : NULL;
    if (bv) lf_kval_set(c, bc, bv);
    /* A factor the scale plan put back into the broadcast (it did not take
     * it out) goes back into the new term too; one it took out stays out. */
    double back = copies ? copies_k
                         : lf_scale_of(own) != 1 && eg_find(c->g, own->cls) != eg_find(c->g, s->ops[o].cls) ? lf_scale_of(own) : 1;
    const hlo_instr *factor_at = s->ops[o].factor_at;
    /* a proved difference of the operand (a bias added on too many
     * devices) stays one of the broadcast */
    eid corr = x->diff && !dropped ? eg_add(c->g, OP_BROADCAST, lf_list_attr(c, A_DIMENSIONS, newdims, nn), t, &x->corr, 1,
                                            c->origin)
                                   : EID_NONE;
    s->ops[o] = term(bc, v, x->assumed);
    if (corr != EID_NONE) s->ops[o].diff = x->diff, s->ops[o].corr = corr;
    s->ops[o].konst = x->konst;
    s->ops[o].scale = back == 1 ? 0 : back;
    if (copies) s->ops[o].factor_at = factor_at;
    if (!copies || copies_put_back) lf_unscale(c, &s->ops[o]);
    return true;
}

/* Whether reduce-precision `in` keeps every value of its type (its
 * exponent and mantissa bits at least the type's: jax.checkpoint's e8m23
 * on f32 residuals). */
static bool reduces_nothing(const hlo_instr *in) {
    int eb, mb;
    return in->op == OP_REDUCE_PRECISION && dtype_float_bits(in->shape.dtype, &eb, &mb) &&
           instr_int(in, A_EXPONENT_BITS, 0) >= eb && instr_int(in, A_MANTISSA_BITS, 0) >= mb;
}

const lval *lf_identity_operand(lstate *s) {
    const hlo_instr *in = s->in;
    if (reduces_nothing(in) && in->noperands == 1 && s->ops[0].kind != LV_UNKNOWN) return &s->ops[0];
    if (in->op == OP_ADD && in->noperands == 2)
        for (uint32_t o = 0; o < 2; o++) {  /* x + 0 (an accumulator's first step) */
            const lval *k = &s->ops[o], *x = &s->ops[1 - o];
            if (x->kind != LV_UNKNOWN && k->kind == LV_TERM && k->cls != EID_NONE && !k->v.partial &&
                s->comp->instrs[in->operands[1 - o]].shape.rank == in->shape.rank && lf_class_is_zero(s->c, k->cls))
                return x;
        }
    if ((in->op != OP_MAXIMUM && in->op != OP_MINIMUM) || in->noperands != 2 || !dtype_is_float(in->shape.dtype))
        return NULL;
    double inf = in->op == OP_MAXIMUM ? -INFINITY : INFINITY;
    for (uint32_t o = 0; o < 2; o++) {
        const lval *k = &s->ops[o], *x = &s->ops[1 - o];
        /* Known values, or a splat too large to fold: the baseline's global
         * -inf is no more folded where the distributed program's local one is. */
        if (k->kind != LV_TERM || k->cls == EID_NONE || lf_scale_of(k) != 1 || x->kind == LV_UNKNOWN ||
            s->comp->instrs[in->operands[1 - o]].shape.rank != in->shape.rank)
            continue;
        if (lf_class_is_splat(s->c, k->cls, inf)) return x;
    }
    return NULL;
}

/* Which operand of a select a predicate of known values p picks at every
 * element: 1 (all true), 2 (all false), 0 (neither, or no values). */
static uint32_t known_pick(const interp_val *p) {
    if (!p || p->dtype != DT_PRED || !p->i || p->n <= 0) return 0;
    int64_t ntrue = 0;
    for (int64_t k = 0; k < p->n; k++) ntrue += p->i[k] != 0;
    return ntrue == p->n ? 1 : ntrue == 0 ? 2 : 0;
}

const lval *lf_select_known(lstate *s) {
    lift_ctx *c = s->c;
    const hlo_instr *in = s->in;
    const lval *ops = s->ops;
    if (in->op != OP_SELECT || in->noperands != 3) return NULL;
    /* A select between a value and itself is that value, whatever picks
     * (a device-dependent predicate choosing between equal zeros). */
    if (ops[1].kind == LV_TERM && ops[2].kind == LV_TERM && eg_find(c->g, ops[1].cls) == eg_find(c->g, ops[2].cls) &&
        lf_same_sharding(&ops[1].v, &ops[2].v) && ops[1].v.partial == ops[2].v.partial &&
        lf_scale_of(&ops[1]) == lf_scale_of(&ops[2]))
        return &ops[1];
    /* A predicate known to be true (false) at every element picks the
     * second (third) operand whole (jnp.var's where(n - ddof > 0, ...) with
     * a constant ddof). */
    if ((ops[0].kind == LV_TERM || ops[0].kind == LV_MASK || ops[0].kind == LV_PW) && !ops[0].v.partial &&
        !ops[0].assumed) {
        const interp_val *p = ops[0].kind == LV_TERM ? lf_kval(c, ops[0].cls) : NULL;
        /* a mask of iotas (take_along_axis's bounds check of positions) is
         * no folded term: its values, computed from the chain of constants
         * and iotas (the same on every device). Not where the select makes
         * a constant table itself on the distributed side: a table of local
         * positions is read tiled (lift_table.c), its structure kept (the
         * baseline keeps the select's form too: lf_select_union). */
        bool table = ops[1].konst && ops[2].konst;
        interp_val *own = p || (table && !c->baseline_mode) ? NULL : lf_chain_values(s, in->operands[0]);
        uint32_t pick = known_pick(own ? own : p);
        interp_val_free(own);
        if (pick && table && !p) {
            /* the baseline's select of a table keeps its form, and is also
             * the operand it picks (a program that dropped the check) */
            lf_select_union(s, &ops[pick]);
            return NULL;
        }
        if (pick) return &ops[pick];
    }
    return NULL;
}

void lf_select_union(lstate *s, const lval *picked) {
    lift_ctx *c = s->c;
    const hlo_instr *in = s->in;
    if ((picked->kind != LV_TERM && !lf_is_index(picked)) || picked->assumed || picked->v.partial ||
        (picked->kind == LV_TERM && lf_scale_of(picked) != 1) || picked->cls == EID_NONE || picked->v.rank != in->shape.rank)
        return;
    eid ch[3];
    for (uint32_t o = 0; o < 3; o++) {
        const lval *x = &s->ops[o];
        bool index = lf_is_index(x);
        if ((x->kind != LV_TERM && !index) || x->cls == EID_NONE || x->assumed || x->v.partial ||
            (x->kind == LV_TERM && lf_scale_of(x) != 1) ||
            (s->comp->instrs[in->operands[o]].shape.rank && !lf_same_sharding(&x->v, &picked->v)))
            return;
        ch[o] = x->cls;
    }
    int64_t g[VIEW_MAX_RANK];
    lf_global_dims(c, &picked->v, &in->shape, g);
    eid sel = lf_node(c, c->cur, in, ch, 3, g, c->origin);
    if (eg_class_type(c->g, sel) == eg_class_type(c->g, picked->cls)) eg_union(c->g, sel, picked->cls, NULL);
}

static bool grouped_in_baseline(lift_ctx *c, const lval *ops, uint32_t nops);

/* Whether instruction i is comp's result or an element of it. */
static bool is_output(const hlo_comp *comp, uint32_t i) {
    const hlo_instr *r = &comp->instrs[comp->root];
    if (comp->root == i) return true;
    for (uint32_t o = 0; r->op == OP_TUPLE && o < r->noperands; o++)
        if (r->operands[o] == i) return true;
    return false;
}

/* Whether `to` is `from` with one dim of size 1 inserted. */
static bool unit_added(const shape *from, const shape *to) {
    if (to->rank != from->rank + 1) return false;
    for (uint32_t u = 0; u < to->rank; u++) {
        if (to->dims[u] != 1) continue;
        bool same = true;
        for (uint32_t q = 0; q < from->rank && same; q++) same = from->dims[q] == to->dims[q + (q >= u)];
        if (same) return true;
    }
    return false;
}
static bool baseline_splits(lift_ctx *c, int64_t len, int64_t n);

/* Whether value i of comp, a partial sum, is a sum (a reduce or a dot, a
 * few linear ops up: factors, converts, layout) over a dim sharded over the
 * axes it is partial over whose extent the baseline splits into the
 * devices' blocks somewhere (a statistic it takes per group first). */
static bool summed_in_groups(lift_ctx *c, const hlo_comp *comp, const lval *vals, uint32_t i) {
    for (int hop = 0; hop < 8; hop++) {
        const hlo_instr *r = &comp->instrs[i];
        const lval *x = &vals[i];
        if (x->kind != LV_TERM || !x->v.partial || r->noperands == 0) return false;
        uint32_t nd = 0;
        const int64_t *rd = NULL;
        if (r->op == OP_REDUCE && r->noperands == 2) rd = instr_ints(r, A_DIMENSIONS, &nd);
        if (r->op == OP_DOT && r->noperands == 2) rd = instr_ints(r, A_LHS_CONTRACTING_DIMS, &nd);
        if (rd) {
            const lval *y = &vals[r->operands[0]];
            const shape *ys = &comp->instrs[r->operands[0]].shape;
            for (uint32_t q = 0; y->kind == LV_TERM && q < nd; q++) {
                if (rd[q] < 0 || (uint64_t)rd[q] >= y->v.rank || (uint64_t)rd[q] >= ys->rank || !y->v.dims[rd[q]].naxes)
                    continue;
                int64_t parts = view_dim_parts(&y->v, c->mesh, (uint32_t)rd[q]);
                if (parts > 1 && baseline_splits(c, ys->dims[rd[q]] * parts, parts)) return true;
            }
            return false;
        }
        bool through = r->op == OP_RESHAPE || r->op == OP_BITCAST || r->op == OP_CONVERT || r->op == OP_COPY ||
                       r->op == OP_NEGATE || r->op == OP_TRANSPOSE || r->op == OP_MULTIPLY || r->op == OP_DIVIDE;
        if (!through) return false;
        uint32_t next = r->operands[0];
        if ((r->op == OP_MULTIPLY) && r->noperands == 2 && !vals[next].v.partial) next = r->operands[1];
        i = next;
    }
    return false;
}

/* Whether an operand of s is a partial sum whose dim the baseline splits
 * into the devices' blocks (grouped_in_baseline, summed_in_groups). */
static bool shares_in_groups(lstate *s) {
    for (uint32_t o = 0; o < s->in->noperands; o++) {
        const lval *x = &s->ops[o];
        if (x->kind == LV_TERM && x->v.partial && x->v.red == RED_SUM &&
            (grouped_in_baseline(s->c, x, 1) || summed_in_groups(s->c, s->comp, s->vals, s->in->operands[o])))
            return true;
    }
    return false;
}

/* Class x as a predicate converted to a number (the convert possibly under
 * broadcasts and reshapes, depth levels: m[..., None].astype(f32)
 * broadcast): that predicate, moved as the number was; else EID_NONE. */
static eid converted_pred(lift_ctx *c, eid x, int depth) {
    const eid *ch;
    eid n = lf_class_node(c, x, OP_CONVERT, 1, &ch);
    if (n != EID_NONE) return eg_type_dtype(c->g, eg_class_type(c->g, ch[0])) == DT_PRED ? ch[0] : EID_NONE;
    if (depth <= 0) return EID_NONE;
    int op = OP_BROADCAST;
    n = lf_class_node(c, x, OP_BROADCAST, 1, &ch);
    if (n == EID_NONE) op = OP_RESHAPE, n = lf_class_node(c, x, OP_RESHAPE, 1, &ch);
    if (n == EID_NONE) return EID_NONE;
    uint32_t attr = eg_node_attr(c->g, n), r;
    const int64_t *dims = eg_type_dims(c->g, eg_class_type(c->g, x), &r);
    int64_t d[VIEW_MAX_RANK];
    if (r > VIEW_MAX_RANK) return EID_NONE;
    memcpy(d, dims, r * sizeof *d);
    eid p = converted_pred(c, ch[0], depth - 1);
    if (p == EID_NONE) return EID_NONE;
    uint32_t t = lf_type_of(c, DT_PRED, d, r);
    return op == OP_RESHAPE ? lf_mk_reshape(c, p, t, c->origin) : eg_add(c->g, OP_BROADCAST, attr, t, &p, 1, c->origin);
}

/* Whether class a is convert(p) (through broadcasts and reshapes) or a
 * product with such a factor, depth levels down. */
static bool pred_factor(lift_ctx *c, eid a, eid p, int depth) {
    eid q = converted_pred(c, a, 3);
    if (q != EID_NONE && eg_find(c->g, q) == eg_find(c->g, p)) return true;
    const eid *ch;
    if (depth <= 0 || lf_class_node(c, a, OP_MULTIPLY, 2, &ch) == EID_NONE) return false;
    eid k[2] = {ch[0], ch[1]};  /* (the children array moves as classes are added) */
    return (eg_class_type(c->g, k[0]) == eg_class_type(c->g, a) && pred_factor(c, k[0], p, depth - 1)) ||
           (eg_class_type(c->g, k[1]) == eg_class_type(c->g, a) && pred_factor(c, k[1], p, depth - 1));
}

/* s's value when it is computed from constants, iotas and the partition
 * id alone and is the same on every device (query minus key positions, both
 * offset by the device's block: their difference is not): that constant,
 * replicated. */
static bool uniform_table(lstate *s, lval *out) {
    lift_ctx *c = s->c;
    const hlo_instr *in = s->in;
    if (c->baseline_mode || !lf_fold_size_ok(in->shape.dims, in->shape.rank)) return false;
    interp_val **v = lf_device_values(c, s->comp, (uint32_t)(in - s->comp->instrs));
    bool same = v != NULL;
    for (int64_t d = 1; same && d < c->ndev; d++) {
        same = v[d]->n == v[0]->n;
        for (int64_t e = 0; same && e < v[0]->n; e++) same = interp_val_get(v[d], e) == interp_val_get(v[0], e);
    }
    if (same) {
        *out = term(lf_const_term(c, interp_val_ref(v[0]), c->origin), view_dup(in->shape.rank), false);
        out->konst = true;
    }
    lf_device_values_free(c, v);
    return same;
}

/* The operands of the chain of op (an associative, commutative op) that
 * class x is, of x's type, into l (at most max; false past it): through the
 * op's nodes of classes the baseline does not hold (all: of every class),
 * x itself always. */
#define AC_MAX_LEAVES 32
static bool ac_leaves(lift_ctx *c, eid x, uint16_t op, uint32_t type, bool all, bool root, eid *l, uint32_t *n) {
    const eid *ch;
    x = eg_find(c->g, x);
    if ((root || all || !(eg_class_origin(c->g, x) & EG_BASELINE)) && eg_class_type(c->g, x) == type &&
        lf_class_node(c, x, op, 2, &ch) != EID_NONE) {
        eid a = ch[0], b = ch[1];
        return ac_leaves(c, a, op, type, all, false, l, n) && ac_leaves(c, b, op, type, all, false, l, n);
    }
    if (*n == AC_MAX_LEAVES) return false;
    l[(*n)++] = x;
    return true;
}

/* A class of the baseline that folds the n operands l with op from the
 * left, in some order (((l_i op l_j) op l_k) ...: a sum as Python's sum or
 * a loop writes it), found through the e-graph's table; EID_NONE if none. */
static eid ac_baseline_fold(lift_ctx *c, uint16_t op, uint32_t type, const eid *l, uint32_t n) {
    for (uint32_t i = 0; i < n; i++)
        for (uint32_t j = 0; j < n; j++) {
            if (i == j) continue;
            eid pair[2] = {l[i], l[j]}, p = eg_lookup(c->g, op, 0, type, pair, 2);
            if (p == EID_NONE || !(eg_class_origin(c->g, p) & EG_BASELINE)) continue;
            uint64_t used = 1ull << i | 1ull << j;
            for (uint32_t got = 2; got < n && p != EID_NONE;) {
                eid q = EID_NONE;
                for (uint32_t k = 0; k < n && q == EID_NONE; k++) {
                    if (used >> k & 1) continue;
                    for (int side = 0; side < 2 && q == EID_NONE; side++) {
                        eid e[2] = {side ? l[k] : p, side ? p : l[k]};
                        q = eg_lookup(c->g, op, 0, type, e, 2);
                        if (q != EID_NONE && !(eg_class_origin(c->g, q) & EG_BASELINE)) q = EID_NONE;
                    }
                    if (q != EID_NONE) used |= 1ull << k, got++;
                }
                p = q;
            }
            if (p != EID_NONE) return p;
        }
    return EID_NONE;
}

/* Operands of a sum l[0..n) of the form y · k for one constant k (the same
 * broadcast class) gathered into one, (Σ y) · k, where the baseline holds
 * that sum of the y's and its product with k: a residual scaled after its
 * parts were summed (x + 0.5·(a + b)) against each part scaled (x + 0.5·a
 * + 0.5·b). Returns the new count (n when nothing was gathered). */
static uint32_t ac_factor_out(lift_ctx *c, uint32_t type, eid *l, uint32_t n) {
    for (uint32_t i = 0; i < n; i++) {
        const eid *ch;
        if (lf_class_node(c, l[i], OP_MULTIPLY, 2, &ch) == EID_NONE || lf_class_node(c, ch[1], OP_BROADCAST, 1, NULL) == EID_NONE)
            continue;
        eid k = eg_find(c->g, ch[1]), ys[AC_MAX_LEAVES];
        uint32_t m = 0, at[AC_MAX_LEAVES];
        for (uint32_t j = i; j < n; j++) {
            const eid *cj;
            if (lf_class_node(c, l[j], OP_MULTIPLY, 2, &cj) != EID_NONE && eg_find(c->g, cj[1]) == k)
                at[m] = j, ys[m++] = eg_find(c->g, cj[0]);
        }
        if (m < 2) continue;
        eid z = ac_baseline_fold(c, OP_ADD, type, ys, m), zk[2] = {z, k};
        eid p = z == EID_NONE ? EID_NONE : eg_lookup(c->g, OP_MULTIPLY, 0, type, zk, 2);
        if (p == EID_NONE || !(eg_class_origin(c->g, p) & EG_BASELINE)) continue;
        uint32_t w = 0;
        for (uint32_t j = 0, q = 0; j < n; j++) {
            if (q < m && at[q] == j) {
                if (q++ == 0) l[w++] = p;
                continue;
            }
            l[w++] = l[j];
        }
        return w;
    }
    return n;
}

/* v, a chain of an associative, commutative op (add, multiply, max, min,
 * and, or) the baseline does not hold, is the baseline's chain of the same
 * operands folded in another order (a stencil's eight neighbours summed
 * rows first against columns first): joined to it. The operands are the
 * largest the baseline holds, else every one. Exact for integers and the
 * order-free ops; a float sum or product differs by rounding, as under the
 * rules' reassociation. Float sums also gather parts scaled by one
 * constant into the baseline's scaled sum of them (ac_factor_out). */
static void ac_forms(lift_ctx *c, uint16_t op, const lval *v) {
    if (v->kind != LV_TERM || v->cls == EID_NONE || (eg_class_origin(c->g, v->cls) & EG_BASELINE)) return;
    uint32_t type = eg_class_type(c->g, v->cls);
    for (int all = 0; all < 2; all++) {
        eid l[AC_MAX_LEAVES];
        uint32_t n = 0;
        if (!ac_leaves(c, v->cls, op, type, all, true, l, &n) || n < 2) continue;
        eid b = ac_baseline_fold(c, op, type, l, n);
        if (b == EID_NONE && op == OP_ADD && dtype_is_float(eg_type_dtype(c->g, type))) {
            /* parts scaled alike where the baseline scales their sum */
            uint32_t n2 = ac_factor_out(c, type, l, n);
            b = n2 == 1 ? l[0] : n2 < n ? ac_baseline_fold(c, op, type, l, n2) : EID_NONE;
        }
        if (b != EID_NONE) {
            eg_union(c->g, v->cls, b, NULL);
            return;
        }
    }
}

/* reduce(a · b) with add from zero over dims D, a and b of one type: the
 * dot of a and b contracting D, batched over the other dims in order (a
 * row-wise dot jnp.sum(q * k, -1) beside einsum("nd,nd->n")), both operand
 * orders; the result dims are the kept dims in order either way. */
static void reduce_as_dot(lstate *s, const lval *v) {
    lift_ctx *c = s->c;
    const hlo_instr *in = s->in;
    const eid *ch;
    uint32_t nd, rank;
    const int64_t *rd = instr_ints(in, A_DIMENSIONS, &nd);
    if (v->kind != LV_TERM || v->cls == EID_NONE || in->noperands != 2 || s->ops[0].kind != LV_TERM ||
        s->ops[1].kind != LV_TERM || s->ops[0].cls == EID_NONE || !dtype_is_float(in->shape.dtype) || !nd ||
        instr_reducer(c->cur, in) != RED_SUM || !lf_class_is_zero(c, s->ops[1].cls) ||
        lf_class_node(c, s->ops[0].cls, OP_MULTIPLY, 2, &ch) == EID_NONE)
        return;
    uint32_t xt = eg_class_type(c->g, s->ops[0].cls);
    eid a = eg_find(c->g, ch[0]), b = eg_find(c->g, ch[1]);
    /* (a sum of squares, every norm's, is left alone: no program writes
     * it as a dot, and each form grows the e-graph) */
    if (a == b || eg_class_type(c->g, a) != xt || eg_class_type(c->g, b) != xt) return;
    const int64_t *xd = eg_type_dims(c->g, xt, &rank);
    if (rank > VIEW_MAX_RANK) return;
    int64_t batch[VIEW_MAX_RANK], con[VIEW_MAX_RANK], dims[VIEW_MAX_RANK];
    uint32_t nb = 0, nc = 0;
    for (uint32_t d = 0; d < rank; d++) {
        bool r = false;
        for (uint32_t k = 0; k < nd; k++) r |= rd[k] == d;
        if (r) con[nc++] = d;
        else dims[nb] = xd[d], batch[nb++] = d;
    }
    if (nc != nd) return; /* a dim named twice */
    hlo_attr at[4] = {{.key = A_LHS_BATCH_DIMS, .kind = K_INTS, .n = nb, .v.ints = batch},
                      {.key = A_RHS_BATCH_DIMS, .kind = K_INTS, .n = nb, .v.ints = batch},
                      {.key = A_LHS_CONTRACTING_DIMS, .kind = K_INTS, .n = nc, .v.ints = con},
                      {.key = A_RHS_CONTRACTING_DIMS, .kind = K_INTS, .n = nc, .v.ints = con}};
    hlo_instr g = {.name = "dot", .opname = "dot", .op = OP_DOT, .nattrs = 4, .noperands = 2, .attrs = at};
    graph_finalize_attrs(&g); /* as a parsed dot holds them: sorted, empty lists dropped */
    g.shape.dtype = in->shape.dtype;
    g.shape.rank = nb;
    g.shape.dims = dims;
    for (int side = 0; side < 2; side++) {
        eid ab[2] = {side ? b : a, side ? a : b};
        eg_union(c->g, v->cls, lf_node(c, c->cur, &g, ab, 2, dims, c->origin), NULL);
    }
}

/* compare(convert(x), c) with x an integer and c a float constant holding
 * an integer the float type represents exactly, as every integer up to it
 * (|c| <= 2^significand): compare(x, c) in x's type, the same direction —
 * rounding is monotone and c exact, so the order against c is x's (a
 * warmup step counted in floats beside one counted in integers). */
static void int_compare_forms(lstate *s, const lval *v) {
    lift_ctx *c = s->c;
    const hlo_instr *in = s->in;
    if (in->op != OP_COMPARE || in->noperands != 2 || v->kind != LV_TERM || v->cls == EID_NONE) return;
    for (uint32_t o = 0; o < 2; o++) {
        const lval *x = &s->ops[o], *k = &s->ops[1 - o];
        const eid *ch;
        if (x->kind != LV_TERM || k->kind != LV_TERM || x->cls == EID_NONE || k->cls == EID_NONE ||
            lf_class_node(c, x->cls, OP_CONVERT, 1, &ch) == EID_NONE)
            continue;
        eid xi = eg_find(c->g, ch[0]);
        int it = eg_type_dtype(c->g, eg_class_type(c->g, xi)), ft = eg_type_dtype(c->g, eg_class_type(c->g, x->cls));
        const interp_val *kv = lf_kval(c, k->cls);
        int eb, mb;
        if (!dtype_is_int(it) || !dtype_float_bits(ft, &eb, &mb) || !kv || !kv->f || kv->n < 1) continue;
        int sig = mb + 1; /* every integer up to 2^sig is exact */
        double cv = kv->f[0];
        bool same = true;
        for (int64_t e = 1; e < kv->n && same; e++) same = kv->f[e] == cv;
        if (!same || cv != floor(cv) || fabs(cv) > ldexp(1, sig) || (dtype_is_unsigned(it) && cv < 0) ||
            fabs(cv) >= ldexp(1, dtype_bits(it) - 1))
            continue;
        eid kk = lf_splat(c, eg_class_type(c->g, xi), cv), cmp[2];
        cmp[o] = xi, cmp[1 - o] = kk;
        eg_union(c->g, v->cls, eg_add(c->g, OP_COMPARE, lf_encode_attrs(c, c->cur, in), eg_class_type(c->g, v->cls), cmp, 2,
                                      c->origin), NULL);
        return;
    }
}

/* Forms of the value v just lifted that the other program may write, joined
 * to v's class (exact identities, both programs walked alike):
 *   x · convert(p) with p a predicate is select(p, x, 0)  (a mask as a
 *     multiply where jax.grad of relu selects; the convert possibly under
 *     broadcasts and reshapes);
 *   x + (a + b) is (x + a) + b  (a residual over a parallel block's
 *     all-reduce; the rules reassociate small terms only);
 *   max(x, 0) > 0 is x > 0  (relu's output compared where the other
 *     program compares its input);
 *   a reduce or dot over a padded value masked to a box, and a slice of a
 *     reduce, over the box sliced (lift_pad.c);
 *   a mean of squares less a squared mean is the mean of squared
 *     deviations, a logsumexp shifted by any m is the unshifted one,
 *     x >= 0 holds for an x never negative by its form, and a softmax
 *     normalised before its dot is the dot normalised (lift_moment.c);
 *   an all-reduce of shares of a sum the baseline takes per group is also
 *     the sum of the groups' values (lift_group.c);
 *   a chain of add (multiply, max, min, and, or) is the baseline's chain of
 *     the same operands in another order (ac_forms);
 *   a sum of products over some dims is the dot contracting them
 *     (reduce_as_dot);
 *   a converted integer compared with an integral float constant is the
 *     integer compared with that integer (int_compare_forms). */
static void other_forms(lstate *s, const lval *v) {
    lift_ctx *c = s->c;
    const hlo_instr *in = s->in;
    lf_pad_forms(s, v);
    lf_moment_forms(s, v);
    lf_lse_forms(s, v);
    lf_softmax_forms(s, v);
    lf_sign_forms(s, v);
    lf_dot_forms(s, v);
    if (in->op == OP_REDUCE) reduce_as_dot(s, v);
    int_compare_forms(s, v);
    if (!c->baseline_mode && (in->op == OP_ADD || in->op == OP_MULTIPLY || in->op == OP_MAXIMUM || in->op == OP_MINIMUM ||
                              in->op == OP_AND || in->op == OP_OR))
        ac_forms(c, in->op, v);
    /* a sum of shares the baseline takes per group first: the groups'
     * values summed (lift_group.c) */
    if (in->op == OP_ALL_REDUCE && !c->baseline_mode && in->noperands == 1 && v->kind == LV_TERM && v->cls != EID_NONE &&
        !(eg_class_origin(c->g, v->cls) & EG_BASELINE) && (grouped_in_baseline(c, &s->vals[in->operands[0]], 1) || summed_in_groups(c, s->comp, s->vals, in->operands[0])))
        lf_group_forms(s, v);
    if (v->kind != LV_TERM || v->cls == EID_NONE || in->noperands != 2 || s->ops[0].kind != LV_TERM ||
        s->ops[1].kind != LV_TERM || s->ops[0].cls == EID_NONE || s->ops[1].cls == EID_NONE)
        return;
    uint32_t type = eg_class_type(c->g, v->cls);
    const eid *ch;
    if (in->op == OP_ADD && dtype_is_float(in->shape.dtype) && lf_class_node(c, s->ops[1].cls, OP_ADD, 2, &ch) != EID_NONE &&
        eg_class_type(c->g, ch[0]) == type && eg_class_type(c->g, ch[1]) == type) {
        /* x + (a + b) is (x + a) + b: a sum the other program nests the
         * other way (x + psum(a + m) + bias against x + a + (m + bias): a
         * residual over a parallel block's all-reduce), whatever the size
         * of the terms, which the rules' reassociation leaves alone */
        eid a = ch[0], b = ch[1], l[2] = {s->ops[0].cls, a};
        eid r[2] = {eg_add(c->g, OP_ADD, 0, type, l, 2, c->origin), b};
        eg_union(c->g, v->cls, eg_add(c->g, OP_ADD, 0, type, r, 2, c->origin), NULL);
    }
    if (in->op == OP_MULTIPLY && dtype_is_float(in->shape.dtype)) {
        /* a · select(p, x, 0) where a carries the factor convert(p) (a mask
         * times a weight): a · x, the select's zeros already zeros of a
         * (finite values: a masked loss weighted by its own mask) */
        for (uint32_t o = 0; o < 2; o++) {
            const eid *sc;
            if (lf_class_node(c, s->ops[1 - o].cls, OP_SELECT, 3, &sc) == EID_NONE || !lf_class_is_zero(c, sc[2]) ||
                eg_class_type(c->g, sc[1]) != type)
                continue;
            eid p = sc[0], x = sc[1];
            if (!pred_factor(c, s->ops[o].cls, p, 3)) continue;
            lf_assume(c, "values masked out by a predicate a factor also zeroes are finite");
            eid m[2] = {s->ops[o].cls, x};
            eg_union(c->g, v->cls, eg_add(c->g, OP_MULTIPLY, 0, type, m, 2, c->origin), NULL);
            break;
        }
        for (uint32_t o = 0; o < 2; o++) {
            eid pred = converted_pred(c, s->ops[1 - o].cls, 3);
            if (pred == EID_NONE) continue;
            interp_val *z = interp_val_new(in->shape.dtype, 0, NULL);
            eid zero = lf_const_term(c, z, c->origin);
            zero = eg_add(c->g, OP_BROADCAST, lf_list_attr(c, A_DIMENSIONS, NULL, 0), type, &zero, 1, c->origin);
            eid sel[3] = {pred, s->ops[o].cls, zero};
            eg_union(c->g, v->cls, eg_add(c->g, OP_SELECT, 0, type, sel, 3, c->origin), NULL);
            return;
        }
    }
    const char *dir = in->op == OP_COMPARE ? instr_str(in, A_DIRECTION) : NULL;
    if (dir && !strcmp(dir, "GT") && lf_class_is_zero(c, s->ops[1].cls) && lf_class_node(c, s->ops[0].cls, OP_MAXIMUM, 2, &ch) != EID_NONE) {
        for (uint32_t o = 0; o < 2; o++) {
            if (!lf_class_is_zero(c, ch[1 - o])) continue;
            eid cmp[2] = {ch[o], s->ops[1].cls};
            eg_union(c->g, v->cls, eg_add(c->g, OP_COMPARE, lf_encode_attrs(c, c->cur, in), type, cmp, 2, c->origin), NULL);
            return;
        }
    }
}

/* Whether the baseline holds x reshaped to type t: a reshape of x, or of
 * what x is a reshape of, or that itself when it has type t. */
static bool baseline_reshape(lift_ctx *c, eid x, uint32_t t) {
    eid f = eg_lookup(c->g, OP_RESHAPE, 0, t, &x, 1);
    if (f != EID_NONE && (eg_class_origin(c->g, f) & EG_BASELINE)) return true;
    eid r = lf_class_node(c, x, OP_RESHAPE, 1, NULL);
    if (r == EID_NONE) return false;
    uint32_t m;
    eid y = eg_find(c->g, eg_node_children(c->g, r, &m)[0]);
    if (eg_class_type(c->g, y) == t) return (eg_class_origin(c->g, y) & EG_BASELINE) != 0;
    f = eg_lookup(c->g, OP_RESHAPE, 0, t, &y, 1);
    return f != EID_NONE && (eg_class_origin(c->g, f) & EG_BASELINE);
}

/* Whether class x is, or is made (a few levels down) of, a variable the
 * lift made up (an assumed value). */
static bool has_var(lift_ctx *c, eid x, int depth) {
    for (eid k = eg_class_first(c->g, eg_find(c->g, x)); k != EID_NONE; k = eg_class_next(c->g, k)) {
        if (eg_node_op(c->g, k) == EG_OP_VAR) return true;
        uint32_t m;
        const eid *kids = eg_node_children(c->g, k, &m);
        for (uint32_t j = 0; depth > 0 && j < m; j++)
            if (has_var(c, kids[j], depth - 1)) return true;
    }
    return false;
}

static void pairs_add(lift_ctx *c, lf_pairs *p, int64_t a, int64_t b) {
    for (uint32_t q = 0; q < p->n; q++)
        if (p->v[2 * q] == a && p->v[2 * q + 1] == b) return;
    for (int w = 0; w < 2; w++) ARENA_GROW(c->a, p->v, 2 * p->n + w, p->cap, 8);
    p->v[2 * p->n] = a, p->v[2 * p->n + 1] = b;
    p->n++;
}

static bool pairs_has(const lf_pairs *p, int64_t a, int64_t b) {
    for (uint32_t q = 0; q < p->n; q++)
        if (p->v[2 * q] == a && p->v[2 * q + 1] == b) return true;
    return false;
}

/* Whether the baseline reshapes some value splitting a dim of extent len
 * into [n, len / n] (groups of the devices' blocks). */
static bool baseline_splits(lift_ctx *c, int64_t len, int64_t n) {
    if (!c->base_splits.read) {
        for (uint32_t ci = 0; ci < c->base->ncomps; ci++) {
            const hlo_comp *bc = &c->base->comps[ci];
            for (uint32_t i = 0; i < bc->ninstrs; i++) {
                const hlo_instr *r = &bc->instrs[i];
                if (r->op != OP_RESHAPE || r->noperands != 1) continue;
                const shape *in = &bc->instrs[r->operands[0]].shape;
                for (uint32_t p = 0; p < in->rank && p + 1 < r->shape.rank; p++) {
                    int64_t l = in->dims[p], k = r->shape.dims[p];
                    if (k && l % k == 0 && r->shape.dims[p + 1] == l / k) pairs_add(c, &c->base_splits, l, k);
                    if (in->dims[p] != r->shape.dims[p]) break;
                }
            }
        }
        c->base_splits.read = true;
    }
    return pairs_has(&c->base_splits, len, n);
}

bool lf_baseline_cuts(lift_ctx *c, int64_t len, int64_t size) {
    if (size < 1 || len <= size || len % size) return false;
    if (baseline_splits(c, len, len / size)) return true;
    if (!c->base_cuts.read) {
        for (uint32_t ci = 0; ci < c->base->ncomps; ci++) {
            const hlo_comp *bc = &c->base->comps[ci];
            for (uint32_t i = 0; i < bc->ninstrs; i++) {
                const hlo_instr *r = &bc->instrs[i];
                const hlo_attr *sa = instr_attr(r, A_SLICE);
                if (r->op != OP_SLICE || r->noperands != 1 || !sa) continue;
                const shape *in = &bc->instrs[r->operands[0]].shape;
                for (uint32_t d = 0; d < in->rank && d < sa->n; d++) {
                    int64_t lo = sa->v.ints[3 * d], hi = sa->v.ints[3 * d + 1], st = sa->v.ints[3 * d + 2], n = hi - lo;
                    if (st == 1 && n > 0 && n < in->dims[d] && lo % n == 0) pairs_add(c, &c->base_cuts, in->dims[d], n);
                }
            }
        }
        c->base_cuts.read = true;
    }
    return pairs_has(&c->base_cuts, len, size);
}

bool lf_baseline_repeats(lift_ctx *c, int64_t n, int64_t len) {
    if (!c->base_repeats.read) {
        for (uint32_t ci = 0; ci < c->base->ncomps; ci++) {
            const hlo_comp *bc = &c->base->comps[ci];
            for (uint32_t i = 0; i < bc->ninstrs; i++) {
                const hlo_instr *r = &bc->instrs[i];
                uint32_t nd;
                const int64_t *bd = instr_ints(r, A_DIMENSIONS, &nd);
                if (r->op != OP_BROADCAST || r->noperands != 1 || nd + 1 != r->shape.rank) continue;
                /* the one added dim j, with operand dims on both sides of it */
                uint32_t j = 0;
                while (j < nd && bd[j] == (int64_t)j) j++;
                if (j > 0 && j < nd && bd[j] == (int64_t)j + 1) pairs_add(c, &c->base_repeats, r->shape.dims[j], r->shape.dims[j + 1]);
            }
        }
        c->base_repeats.read = true;
    }
    return pairs_has(&c->base_repeats, n, len);
}

/* Whether the baseline reshapes class x to dims sd[rank] (x's with one dim
 * split), or x is an elementwise op (depth levels down) over such values:
 * the split distributes over it (x · x of a reshaped x). */
static bool split_in_baseline(lift_ctx *c, eid x, const int64_t *sd, uint32_t rank, int depth) {
    if (baseline_reshape(c, x, lf_type_of(c, eg_type_dtype(c->g, eg_class_type(c->g, x)), sd, rank))) return true;
    if (depth <= 0) return false;
    uint32_t xt = eg_class_type(c->g, x);
    for (eid k = eg_class_first(c->g, eg_find(c->g, x)); k != EID_NONE; k = eg_class_next(c->g, k)) {
        uint32_t m;
        if (!graph_op_elementwise(eg_node_op(c->g, k))) continue;
        const eid *ch = eg_node_children(c->g, k, &m);
        eid kids[4];
        if (!m || m > 4) continue;
        memcpy(kids, ch, m * sizeof *kids);
        bool all = true;
        for (uint32_t j = 0; j < m && all; j++) {
            uint32_t r1, r2;
            const int64_t *a = eg_type_dims(c->g, eg_class_type(c->g, kids[j]), &r1), *b = eg_type_dims(c->g, xt, &r2);
            all = r1 == r2 && !memcmp(a, b, r1 * sizeof *a) && split_in_baseline(c, kids[j], sd, rank, depth - 1);
        }
        if (all) return true;
    }
    return false;
}

/* Whether class x (or a term it is made of, a few levels down) is a dot or
 * reduce with an operand the baseline reshapes splitting a contracted or
 * reduced dim into [n, rest]. */
static bool grouped_term(lift_ctx *c, eid x, int64_t n, int depth) {
    if (depth > 6) return false;
    for (eid k = eg_class_first(c->g, eg_find(c->g, x)); k != EID_NONE; k = eg_class_next(c->g, k)) {
        uint16_t op = eg_node_op(c->g, k);
        uint32_t m, nw;
        /* copies: interning a type below may move the e-graph's storage */
        eid kids[8];
        int64_t aw[64];
        const eid *kp = eg_node_children(c->g, k, &m);
        const int64_t *ap = eg_attr_words(c->g, eg_node_attr(c->g, k), &nw);
        if (m > 8 || nw > 64) continue;
        if (m) memcpy(kids, kp, m * sizeof *kids);
        if (nw) memcpy(aw, ap, nw * sizeof *aw);
        for (uint32_t side = 0; (op == OP_DOT || op == OP_REDUCE) && side < (op == OP_DOT ? 2u : 1u) && side < m; side++) {
            int key = op == OP_REDUCE ? A_DIMENSIONS : side ? A_RHS_CONTRACTING_DIMS : A_LHS_CONTRACTING_DIMS;
            uint32_t rank;
            int64_t dims[VIEW_MAX_RANK];
            const int64_t *dp = eg_type_dims(c->g, eg_class_type(c->g, kids[side]), &rank);
            if (rank + 1 > VIEW_MAX_RANK) continue;
            memcpy(dims, dp, rank * sizeof *dims);
            for (uint32_t w = 0; w + 1 < nw; w += 2 + (uint32_t)aw[w + 1]) {
                if (aw[w] != key) continue;
                for (int64_t j = 0; j < aw[w + 1] && w + 2 + (uint32_t)j < nw; j++) {
                    int64_t d = aw[w + 2 + j];
                    if (d < 0 || d >= rank || dims[d] <= n || dims[d] % n) continue;
                    int64_t sd[VIEW_MAX_RANK];
                    for (uint32_t q = 0, r = 0; q < rank; q++) {
                        if (q == (uint32_t)d) sd[r++] = n, sd[r++] = dims[q] / n;
                        else sd[r++] = dims[q];
                    }
                    if (split_in_baseline(c, kids[side], sd, rank + 1, 2)) return true;
                    /* summands of unknown provenance (a value assumed past
                     * an op not related): any baseline grouping of the dim */
                    if (has_var(c, kids[side], 3) && baseline_splits(c, dims[d], n)) return true;
                }
            }
        }
        for (uint32_t j = 0; j < m; j++)
            if (grouped_term(c, kids[j], n, depth + 1)) return true;
    }
    return false;
}


/* Whether value i of comp reaches an all-reduce through ops that keep it
 * a function of itself alone (elementwise ops with constants, layout
 * changes, sums along its dims): a per-device statistic averaged or summed
 * as it is (a pmean of per-device ratios), which no merge takes back. An
 * all-gather (stacking the statistics for a merge) or an op with another
 * non-constant operand (weighting it by a count) is no such path. */
static bool averaged_later(const hlo_comp *comp, uint32_t i, int depth) {
    if (depth > 16) return false;
    for (uint32_t u = i + 1; u < comp->ninstrs; u++) {
        const hlo_instr *y = &comp->instrs[u];
        bool uses = false, others_const = true;
        for (uint32_t o = 0; o < y->noperands; o++) {
            if (y->operands[o] == i) uses = true;
            else others_const &= instr_is_constant(comp, y->operands[o]);
        }
        if (!uses) continue;
        if (y->op == OP_ALL_REDUCE) return true;
        bool keeps = y->op == OP_RESHAPE || y->op == OP_BROADCAST || y->op == OP_TRANSPOSE || y->op == OP_COPY ||
                     y->op == OP_BITCAST || y->op == OP_CONVERT || y->op == OP_REDUCE || y->op == OP_REDUCE_WINDOW ||
                     (graph_op_elementwise(y->op) && y->op != OP_SELECT);
        if (keeps && others_const && averaged_later(comp, u, depth + 1)) return true;
    }
    return false;
}

/* Value i of comp with layout ops, converts and guards by a constant
 * (max(n, 1)) taken off: the value they carry. */
static uint32_t guarded_source(const hlo_comp *comp, uint32_t i) {
    for (int depth = 0; depth < 8; depth++) {
        const hlo_instr *y = &comp->instrs[i];
        if (y->noperands == 1 && (y->op == OP_CONVERT || y->op == OP_BROADCAST || y->op == OP_RESHAPE || y->op == OP_COPY ||
                                  y->op == OP_BITCAST)) {
            i = y->operands[0];
            continue;
        }
        if ((y->op == OP_MAXIMUM || y->op == OP_MINIMUM) && y->noperands == 2) {
            bool c0 = instr_is_constant(comp, y->operands[0]), c1 = instr_is_constant(comp, y->operands[1]);
            if (c0 != c1) {
                i = y->operands[c0 ? 1 : 0];
                continue;
            }
        }
        break;
    }
    return i;
}

/* Whether instruction u of comp multiplies a statistic by the count it
 * was normalised by: n·(s / max(n, 1)), the device's sum again (0 where its
 * count is), whose sum over the devices merges means weighted by counts —
 * not a product of two sums cut short. */
static bool weighted_product(const hlo_comp *comp, uint32_t u) {
    const hlo_instr *y = &comp->instrs[u];
    if (y->op != OP_MULTIPLY || y->noperands != 2) return false;
    for (uint32_t o = 0; o < 2; o++) {
        const hlo_instr *q = &comp->instrs[guarded_source(comp, y->operands[1 - o])];
        if (q->op == OP_DIVIDE && q->noperands == 2 &&
            guarded_source(comp, q->operands[1]) == guarded_source(comp, y->operands[o]))
            return true;
    }
    return false;
}

/* Whether a partial operand (over the axes `partial`, a sum) is computed
 * from a partial max taken as its blocks' maxima (lf_after_row_max). */
/* Whether s's add of integer counts (operands never negative by their form)
 * only reaches tests against zero after a sum all-reduce over the axes
 * `partial`, through adds, integer converts and layout ops (a mixed-precision
 * step's count of non-finite gradients over replicated and sharded leaves,
 * psum'd, == 0): the count every device holds is then summed n times,
 * n·a + b, which is zero where a + b is, and nothing else of it is used.
 * (Tested before the sum, a device's own count decides: no such reading.) */
static bool counts_only_zero_tested(const lstate *s, uint8_t partial) {
    const hlo_comp *comp = s->comp;
    const hlo_instr *in = s->in;
    uint32_t at = (uint32_t)(in - comp->instrs);
    if (in->op != OP_ADD || in->noperands != 2 || !dtype_is_int(in->shape.dtype) || comp->root == at) return false;
    for (uint32_t o = 0; o < 2; o++)
        if (!lf_nonneg(s->c->cur, comp, in->operands[o])) return false;
    uint8_t *tracked = xcalloc(comp->ninstrs + 1, 1);  /* 1: derived from in's value, 2: and summed */
    bool ok = true, tested = false;
    tracked[at] = 1;
    for (uint32_t j = at + 1; j < comp->ninstrs && ok; j++) {
        const hlo_instr *y = &comp->instrs[j];
        uint8_t state = 0;
        for (uint32_t o = 0; o < y->noperands; o++)
            if (tracked[y->operands[o]] > state) state = tracked[y->operands[o]];
        if (!state) continue;
        bool nonneg = true;
        for (uint32_t o = 0; o < y->noperands && nonneg; o++)
            nonneg = tracked[y->operands[o]] || lf_nonneg(s->c->cur, comp, y->operands[o]);
        const char *dir = y->op == OP_COMPARE ? instr_str(y, A_DIRECTION) : NULL;
        int axes = y->op == OP_ALL_REDUCE && instr_reducer(s->c->cur, y) == RED_SUM ? lift_groups_axes(s->c, y, false) : 0;
        if (dir && y->noperands == 2 && tracked[y->operands[0]] == 2 && !tracked[y->operands[1]] &&
            instr_is_zero_literal(comp, &comp->instrs[y->operands[1]]) &&
            (!strcmp(dir, "EQ") || !strcmp(dir, "NE") || !strcmp(dir, "GT") || !strcmp(dir, "LE")))
            tested = true;
        else if (comp->root != j && nonneg && axes > 0 && ((uint32_t)axes & partial) == partial)
            tracked[j] = 2;
        else if (comp->root != j && nonneg &&
                 (y->op == OP_ADD || y->op == OP_RESHAPE || y->op == OP_COPY || y->op == OP_BITCAST ||
                  (y->op == OP_CONVERT && dtype_is_int(y->shape.dtype))))
            tracked[j] = state;
        else
            ok = false;
    }
    free(tracked);
    return ok && tested;
}

static bool partial_after_row_max(const lstate *s, const lval *ops, uint32_t partial) {
    for (uint32_t o = 0; o < s->in->noperands; o++)
        if (ops[o].kind == LV_TERM && (ops[o].v.partial & partial) && ops[o].v.red == RED_SUM &&
            lf_after_row_max(s, s->in->operands[o]))
            return true;
    return false;
}

/* Whether every operand is partial over exactly the axes `partial` (two of
 * them at least, or one used twice) or a constant: partial sums combined
 * with each other only. */
static bool own_statistic(lift_ctx *c, const lval *ops, uint32_t n, uint32_t partial) {
    uint32_t np = 0;
    for (uint32_t o = 0; o < n; o++) {
        if (ops[o].kind == LV_TERM && ops[o].v.partial == partial && ops[o].v.red == RED_SUM) np++;
        else if (!(ops[o].kind == LV_TERM && ops[o].konst) && !(ops[o].kind == LV_TERM && lf_kval(c, ops[o].cls))) return false;
    }
    return np >= 2;
}

/* The elementwise op after s that s's value reaches (through layout ops
 * and elementwise ops with constants: a guard as max(n, 1), a broadcast)
 * and that meets there a value already lifted as a partial sum over the
 * axes `partial` (a ratio of two of the device's own sums, sum(w·x) /
 * max(sum(w), 1), as own_statistic, one op later); 0 when there is none. */
static uint32_t meets_partial_later(const lstate *s, uint32_t partial) {
    const hlo_comp *comp = s->comp;
    uint32_t i = (uint32_t)(s->in - comp->instrs), at = 0;
    bool *reach = xcalloc(comp->ninstrs, sizeof *reach), found = false;
    reach[i] = true;
    for (uint32_t u = i + 1; u < comp->ninstrs && !found; u++) {
        const hlo_instr *y = &comp->instrs[u];
        bool moves = y->noperands == 1 && (y->op == OP_BROADCAST || y->op == OP_RESHAPE || y->op == OP_CONVERT ||
                                            y->op == OP_COPY || y->op == OP_BITCAST || y->op == OP_TRANSPOSE);
        if (!moves && (!graph_op_elementwise(y->op) || y->op == OP_SELECT)) continue;
        bool uses = false, consts = true;
        for (uint32_t o = 0; o < y->noperands; o++) {
            uint32_t x = y->operands[o];
            if (reach[x]) {
                uses = true;
                continue;
            }
            const lval *v = x < i ? &s->vals[x] : NULL;
            if (v && v->kind == LV_TERM && v->v.partial == partial && v->v.red == RED_SUM) found = true;
            else if (!(v && v->kind == LV_TERM && v->konst)) consts = false;
        }
        found &= uses;
        if (found) at = u;
        reach[u] = uses && consts;
    }
    free(reach);
    return at;
}

/* Whether the sum over devices a partial operand stands for may be one the
 * baseline never computes whole: the baseline reshapes an operand of the
 * dot or reduce that made it (or one a few ops before), splitting a dim the
 * sum runs over into [devices, block] (a vmap over per-device groups:
 * GShard's expert groups, a per-group statistic), so each device's share
 * may itself be the baseline's group value. Then using the share is no
 * evident missing all-reduce (undecided instead). */
static bool grouped_in_baseline(lift_ctx *c, const lval *ops, uint32_t nops) {
    for (uint32_t o = 0; o < nops; o++) {
        const lval *x = &ops[o];
        if (x->kind != LV_TERM || !x->v.partial || x->v.red != RED_SUM || x->cls == EID_NONE) continue;
        int64_t n = 1;
        for (uint32_t a = 0; a < c->mesh->naxes; a++)
            if (x->v.partial >> a & 1) n *= c->mesh->sizes[a];
        if (grouped_term(c, x->cls, n, 0)) return true;
    }
    return false;
}

/* The number of elements of a value of local shape sh under view v, globally. */
static int64_t global_elems(lift_ctx *c, const view *v, const shape *sh) {
    int64_t gd[VIEW_MAX_RANK], n = 1;
    if (sh->rank > VIEW_MAX_RANK) return -1;
    lf_global_dims(c, v, sh, gd);
    for (uint32_t k = 0; k < sh->rank; k++) n *= gd[k];
    return n;
}

/* Whether module m converts some value to element type dt (of nelems
 * elements; any: -1). */
static bool module_converts_to(const hlo_module *m, int dt, int64_t nelems) {
    for (uint32_t k = 0; k < m->ncomps; k++)
        for (uint32_t i = 0; i < m->comps[k].ninstrs; i++) {
            const hlo_instr *y = &m->comps[k].instrs[i];
            if (y->op == OP_CONVERT && y->shape.dtype == dt && (nelems < 0 || shape_elements(&y->shape) == nelems)) return true;
        }
    return false;
}

/* Whether module m adds values it rounded to element type dt, in dt (a sum
 * of bf16 casts of f32 values, added in bf16): then a partial sum rounded
 * to dt share by share may be what it computes, the shares being its
 * summands. */
static bool module_sums_rounded(const hlo_module *m, int dt) {
    for (uint32_t k = 0; k < m->ncomps; k++) {
        const hlo_comp *comp = &m->comps[k];
        for (uint32_t i = 0; i < comp->ninstrs; i++) {
            const hlo_instr *y = &comp->instrs[i];
            if (y->op != OP_ADD || y->shape.dtype != dt || y->noperands != 2) continue;
            for (uint32_t o = 0; o < 2; o++) {
                const hlo_instr *x = &comp->instrs[y->operands[o]];
                if (x->op == OP_CONVERT && x->noperands == 1 && comp->instrs[x->operands[0]].shape.dtype != dt)
                    return true;
            }
        }
    }
    return false;
}

/* Whether op distributes over a sum in operand k (so a partial(sum) operand
 * gives a partial(sum) result). */
static bool linear_in(lift_ctx *c, const hlo_comp *comp, const hlo_instr *in, const lval *ops, uint32_t k) {
    switch (in->op) {
    case OP_SELECT: {
        /* With a predicate the same on every device, select is linear in its
         * two values together: the other is partial alike (checked by the
         * caller) or zero, the identity of the sum. */
        if (k == 0 || in->noperands != 3 || ops[0].v.partial) return false;
        const lval *other = &ops[3 - k];
        return other->kind == LV_TERM && (other->v.partial || lf_class_is_zero(c, other->cls));
    }
    case OP_ADD: case OP_SUBTRACT:
        return true;  /* when every operand is partial alike (checked by the caller) */
    case OP_NEGATE:
        return true;
    case OP_MULTIPLY:
        /* the other complete, or partial over other axes (checked by the
         * caller: a product of sums over disjoint axes) */
        return ops[1 - k].kind == LV_TERM && !(ops[1 - k].v.partial & ops[k].v.partial);
    case OP_REAL: case OP_IMAG:
        return true;  /* real-linear */
    case OP_COMPLEX:
        return true;  /* as add: when both parts are partial alike (checked by the caller) */
    case OP_DIVIDE:
        return k == 0 && ops[1].kind == LV_TERM && ops[1].v.partial == 0;
    case OP_CONVERT: {
        /* Exact when widening (bf16/f16 → f32 → f64, f32 → c64), and for
         * the counts an integer sum holds, to f32 or wider. */
        int from = comp->instrs[in->operands[0]].shape.dtype;
        if (dtype_widens(from, in->shape.dtype) ||
            (dtype_is_int(from) && dtype_is_float(in->shape.dtype) && dtype_bits(in->shape.dtype) >= 32))
            return true;
        /* counts held in floats (a sum of one-hot rows) made integers or
         * narrower floats: exact where every share and their sum are */
        int64_t parts = 1;
        for (uint32_t a = 0; a < c->mesh->naxes; a++)
            if (ops[k].v.partial >> a & 1) parts *= c->mesh->sizes[a];
        return lf_counts_convert_exactly(from, in->shape.dtype,
                                         lf_integral_bound(c->cur, comp, in->operands[0], c->ndev), parts);
    }
    default:
        return false;
    }
}

/* Operand o, constant-only and replicated, read under want (lf_konst_at). */
bool lf_konst_review(lstate *s, uint32_t o, const view *want) {
    lval *x = &s->ops[o];
    if (x->kind != LV_TERM || !x->konst || !view_is_dup(&x->v) || x->v.rank != want->rank) return false;
    view w = *want;
    w.partial = 0;
    w.red = 0;
    eid g = lf_konst_at(s->c, s->comp, s->vals, s->in->operands[o], &w, 0);
    /* a splat whose instruction is no constant here (a loop's carry walked
     * at its initial value): the splat of the global shape */
    double k;
    if (g == EID_NONE && x->cls != EID_NONE && lf_scale_of(x) == 1 && lf_class_splat_value(s->c, x->cls, &k)) {
        const hlo_instr *xi = &s->comp->instrs[s->in->operands[o]];
        int64_t dims[VIEW_MAX_RANK];
        if (xi->shape.rank == w.rank && w.rank <= VIEW_MAX_RANK) {
            lf_global_dims(s->c, &w, &xi->shape, dims);
            g = lf_splat(s->c, lf_type_of(s->c, xi->shape.dtype, dims, w.rank), k);
        }
    }
    if (g == EID_NONE) return false;
    *x = term(g, w, false);
    x->konst = true;
    return true;
}


/* Operands whose shardings differ only in which size-1 local dim carries an
 * axis (readings of a reshape, lf_unit_dim_reread) re-read to agree with one
 * operand, the anchor. Every reading is true; the one taken is the first
 * whose op over the re-read terms is a baseline class, else the one agreeing
 * with the first operand the baseline has, else with the first sharded one. */
static void elementwise_align_units(lstate *s) {
    lift_ctx *c = s->c;
    const hlo_instr *in = s->in;
    uint32_t n = in->noperands;
    if (n < 2 || n > 8 || in->shape.rank > VIEW_MAX_RANK) return;
    lval saved[8];
    memcpy(saved, s->ops, n * sizeof *saved);
    int fallback = -1;
    for (int pass = 0; pass < 2; pass++)
        for (uint32_t a = 0; a < n && fallback < 0; a++)
            if (saved[a].kind == LV_TERM && !view_is_dup(&saved[a].v) &&
                (pass || (eg_class_origin(c->g, saved[a].cls) & EG_BASELINE)))
                fallback = (int)a;
    if (fallback < 0) return;
    int take = -1;
    for (uint32_t a = 0; a < n && take < 0; a++) {
        if (saved[a].kind != LV_TERM || view_is_dup(&saved[a].v)) continue;
        memcpy(s->ops, saved, n * sizeof *saved);
        bool moved = false, alike = true;
        for (uint32_t o = 0; o < n; o++) {
            if (o == a || s->ops[o].kind != LV_TERM || s->ops[o].v.rank != saved[a].v.rank) continue;
            for (uint32_t d = 0; d < saved[a].v.rank; d++)
                if (saved[a].v.dims[d].naxes && !s->ops[o].v.dims[d].naxes)
                    moved |= lf_unit_dim_reread(s, o, d, &saved[a].v.dims[d]);
            alike &= lf_same_sharding(&s->ops[o].v, &saved[a].v);
        }
        if (!moved || !alike) continue;
        eid ch[8];
        for (uint32_t o = 0; o < n; o++) ch[o] = s->ops[o].kind == LV_TERM ? s->ops[o].cls : EID_NONE;
        int64_t dims[VIEW_MAX_RANK];
        lf_global_dims(c, &saved[a].v, &in->shape, dims);
        eid r = EID_NONE;
        bool all = true;
        for (uint32_t o = 0; o < n; o++) all &= ch[o] != EID_NONE;
        if (all)
            r = eg_lookup(c->g, in->op, lf_encode_attrs(c, c->cur, in), lf_type_of(c, in->shape.dtype, dims, in->shape.rank), ch, n);
        if (r != EID_NONE && (eg_class_origin(c->g, r) & EG_BASELINE)) take = (int)a;
    }
    if (take >= 0) return;
    memcpy(s->ops, saved, n * sizeof *saved);
    const view *w = &saved[fallback].v;
    for (uint32_t o = 0; o < n; o++) {
        if ((int)o == fallback || s->ops[o].kind != LV_TERM || s->ops[o].v.rank != w->rank) continue;
        for (uint32_t d = 0; d < w->rank; d++)
            if (w->dims[d].naxes && !s->ops[o].v.dims[d].naxes) lf_unit_dim_reread(s, o, d, &w->dims[d]);
    }
}

/* Value i of s's computation, sharded as xv and built by elementwise ops
 * and reshapes from broadcasts that add every dim where its global dims g
 * differ from xv's (dims xv leaves whole, so the value is constant along
 * them): the same ops at dims g, the broadcasts' operands unchanged (or
 * widened alike where they keep such a dim). At most *budget instructions
 * visited (WIDEN_BUDGET from the top: a chain of a dozen ops, as a rotary
 * table's); false when not of that form. */
enum { WIDEN_BUDGET = 48 };
static bool widen_constant(lstate *s, uint32_t i, const view *xv, const int64_t *g, uint32_t *budget, eid *out);

/* widen_constant of a reshape y that only inserts or drops unit dims (the
 * other dims alike, in order): its operand z widened under its own view
 * along the dims that correspond to y's widened ones, reshaped; a unit dim
 * of y that is widened (a value constant along the heads, read under the
 * heads' sharding) is a broadcast along it. Unit dims may carry a sharding
 * on either side (readings of the reshape): only the widened dims must be
 * whole on both. */
static bool widen_reshape(lstate *s, const hlo_instr *y, const view *xv, const int64_t *g, uint32_t *budget, eid *out) {
    lift_ctx *c = s->c;
    const hlo_instr *z = &s->comp->instrs[y->operands[0]];
    const lval *zv = &s->vals[y->operands[0]];
    uint32_t ry = y->shape.rank, rz = z->shape.rank, jy = 0;
    if (rz > VIEW_MAX_RANK || ry > VIEW_MAX_RANK || zv->kind != LV_TERM || zv->v.partial || zv->v.rank != rz) return false;
    int64_t gy[VIEW_MAX_RANK], gz[VIEW_MAX_RANK], pz = 1, py = 1;
    lf_global_dims(c, xv, &y->shape, gy);
    lf_global_dims(c, &zv->v, &z->shape, gz);
    bool wide[VIEW_MAX_RANK];
    for (uint32_t d = 0; d < ry; d++) {
        wide[d] = y->shape.dims[d] == 1 && g[d] != gy[d];
        if (g[d] != gy[d] && xv->dims[d].naxes) return false;
        if (!wide[d]) py *= g[d];
    }
    for (uint32_t d = 0; d < rz; d++) {
        if (z->shape.dims[d] != 1) {
            while (jy < ry && y->shape.dims[jy] == 1) jy++;
            if (jy == ry || y->shape.dims[jy] != z->shape.dims[d]) return false;
            if (g[jy] != gy[jy]) {
                if (zv->v.dims[d].naxes) return false;
                gz[d] = g[jy];
            }
            jy++;
        }
        pz *= gz[d];
    }
    for (; jy < ry; jy++)
        if (y->shape.dims[jy] != 1) return false;
    eid ez;
    if (pz != py || !widen_constant(s, y->operands[0], &zv->v, gz, budget, &ez)) return false;
    *out = lf_mk_unit_broadcast(c, ez, y->shape.dtype, g, wide, ry);
    return *out != EID_NONE;
}

static bool widen_constant(lstate *s, uint32_t i, const view *xv, const int64_t *g, uint32_t *budget, eid *out) {
    lift_ctx *c = s->c;
    const hlo_instr *y = &s->comp->instrs[i];
    if (*budget == 0 || y->shape.rank != xv->rank) return false;
    --*budget;
    uint32_t t = lf_type_of(c, y->shape.dtype, g, y->shape.rank);
    /* A broadcast reads under xv whatever view it was given, when its
     * operand's dims are sharded as xv's dims they become. */
    if (y->op == OP_BROADCAST && y->noperands == 1) {
        uint32_t nd;
        const int64_t *bd = instr_ints(y, A_DIMENSIONS, &nd);
        lval src = s->vals[y->operands[0]];
        if (!lf_index_as_term(c, &src) || src.kind != LV_TERM || src.v.partial || src.v.rank != nd || lf_scale_of(&src) != 1)
            return false;
        int64_t gy[VIEW_MAX_RANK], gs[VIEW_MAX_RANK];
        lf_global_dims(c, xv, &y->shape, gy);
        bool kept = true; /* the operand's dims as they are (else widened too) */
        view vs = view_dup(nd);
        for (uint32_t k = 0; k < nd; k++) {
            if (bd[k] < 0 || (uint64_t)bd[k] >= y->shape.rank || src.v.dims[k].naxes != xv->dims[bd[k]].naxes ||
                memcmp(src.v.dims[k].axes, xv->dims[bd[k]].axes, src.v.dims[k].naxes))
                return false;
            kept &= g[bd[k]] == gy[bd[k]];
            vs.dims[k] = xv->dims[bd[k]];
            gs[k] = g[bd[k]];
        }
        eid x0 = src.cls;
        if (!kept && !widen_constant(s, y->operands[0], &vs, gs, budget, &x0)) return false;
        *out = eg_add(c->g, OP_BROADCAST, lf_list_attr(c, A_DIMENSIONS, bd, nd), t, &x0, 1, c->origin);
        return true;
    }
    if (y->op == OP_RESHAPE && y->noperands == 1) return widen_reshape(s, y, xv, g, budget, out);
    lval x = s->vals[i];
    if (!graph_op_elementwise(y->op) || y->noperands == 0 || y->noperands > 3 || !lf_index_as_term(c, &x) ||
        x.kind != LV_TERM || x.v.partial || !lf_same_sharding(&x.v, xv) || lf_scale_of(&x) != 1)
        return false;
    /* A value lifted as one of its operands (a select between equal values)
     * widens as that operand. */
    for (uint32_t o = 0; o < y->noperands; o++) {
        const lval *z = &s->vals[y->operands[o]];
        if (z->kind == LV_TERM && eg_find(c->g, z->cls) == eg_find(c->g, x.cls) && lf_scale_of(z) == 1 &&
            s->comp->instrs[y->operands[o]].shape.rank == y->shape.rank)
            return widen_constant(s, y->operands[o], xv, g, budget, out);
    }
    eid ch[3];
    for (uint32_t o = 0; o < y->noperands; o++) {
        const hlo_instr *z = &s->comp->instrs[y->operands[o]];
        if (z->shape.rank != y->shape.rank) return false;
        if (!widen_constant(s, y->operands[o], xv, g, budget, &ch[o])) return false;
    }
    *out = lf_node(c, c->cur, y, ch, y->noperands, g, c->origin);
    return *out != EID_NONE;
}

/* Operand o, whole along dims want shards over axes it does not use, and
 * constant along them (widen_constant: a mask from labels beside
 * vocab-sharded logits), read under want: each device's piece is every
 * block of that wider value along those dims. */
/* Operand o, one number k at every element (a constant, or the copies of
 * one read as a partial sum of n·k: lf_copies_into_partial_sums), read
 * under want: the same number at the global shape of that reading; a
 * partial reading stays one where want shards no axis it sums over. */
static bool review_splat(lstate *s, uint32_t o, const view *want) {
    lift_ctx *c = s->c;
    lval *x = &s->ops[o];
    const hlo_instr *y = &s->comp->instrs[s->in->operands[o]];
    double k;
    if (x->kind != LV_TERM || x->cls == EID_NONE || lf_scale_of(x) != 1 || want->rank != y->shape.rank ||
        x->v.rank != y->shape.rank || y->shape.rank > VIEW_MAX_RANK || !dtype_is_float(y->shape.dtype) ||
        (view_axes_used(want) & x->v.partial) || !lf_class_splat_value(c, x->cls, &k))
        return false;
    view w = *want;
    w.partial = x->v.partial;
    w.red = x->v.red;
    int64_t g[VIEW_MAX_RANK];
    lf_global_dims(c, &w, &y->shape, g);
    lval r = *x;
    r.cls = lf_splat(c, lf_type_of(c, y->shape.dtype, g, y->shape.rank), k);
    r.v = w;
    *x = r;
    return true;
}

static bool review_constant(lstate *s, uint32_t o, const view *want) {
    const lval *x = &s->ops[o];
    const hlo_instr *y = &s->comp->instrs[s->in->operands[o]];
    if (x->kind != LV_TERM || x->v.partial || want->partial || want->rank != y->shape.rank || x->v.rank != y->shape.rank ||
        y->shape.rank > VIEW_MAX_RANK)
        return false;
    uint32_t used = view_axes_used(&x->v);
    view w = x->v;
    for (uint32_t d = 0; d < y->shape.rank; d++) {
        const view_dim *a = &x->v.dims[d], *b = &want->dims[d];
        if (a->naxes == b->naxes && !memcmp(a->axes, b->axes, a->naxes)) continue;
        if (a->naxes) return false;
        view one = {.rank = 1, .dims = {*b}};
        if (view_axes_used(&one) & used) return false;
        w.dims[d] = *b;
    }
    int64_t g[VIEW_MAX_RANK];
    lf_global_dims(s->c, &w, &y->shape, g);
    eid r;
    uint32_t budget = WIDEN_BUDGET;
    if (!widen_constant(s, s->in->operands[o], &x->v, g, &budget, &r)) return false;
    s->ops[o] = term(r, w, x->assumed);
    return true;
}

/* A replicated operand whose value is known (folded: a constant carried
 * into a loop body, say) re-read as `want`: every device holds the same
 * local value, which is exactly `want`'s block of that value tiled along the
 * dims want shards. Whether the baseline computes that tiling (an iota along
 * an unsharded dim does; one along the sharded dim does not) is for the
 * terms to say: a constant meets only the constant of the same values. */
static bool review_tiled(lstate *s, uint32_t o, const view *want) {
    lift_ctx *c = s->c;
    const lval *x = &s->ops[o];
    const shape *sh = &s->comp->instrs[s->in->operands[o]].shape;
    if (x->kind != LV_TERM || x->assumed || !view_is_dup(&x->v) || want->partial || want->rank != sh->rank ||
        sh->rank > VIEW_MAX_RANK)
        return false;
    view w = *want;
    int64_t g[VIEW_MAX_RANK];
    lf_global_dims(c, &w, sh, g);
    const eid *none;
    eid io = lf_class_node(c, x->cls, OP_IOTA, 0, &none);
    if (io != EID_NONE) {
        /* An iota is not folded: it is its own tiling when want leaves its
         * iota dimension whole (the values run along that dim only). */
        uint32_t attr = eg_node_attr(c->g, io);
        int64_t k = ea_get_int(c->g, attr, A_IOTA_DIMENSION, 0);
        if (k < 0 || k >= sh->rank || w.dims[k].naxes) return false;
        bool konst = x->konst;
        s->ops[o] = term(eg_add(c->g, OP_IOTA, attr, lf_type_of(c, sh->dtype, g, sh->rank), NULL, 0, c->origin), w, false);
        s->ops[o].konst = konst;
        return true;
    }
    const interp_val *kv = lf_kval(c, x->cls);
    if (!kv || kv->n != shape_elements(sh) || kv->rank != sh->rank) return false;
    if (!lf_fold_size_ok(g, sh->rank)) return false;
    interp_val *t = lf_tiled_values(kv, g);
    if (!t) return false;
    bool konst = x->konst;
    s->ops[o] = term(lf_const_term(c, t, c->origin), w, false);
    s->ops[o].konst = konst;
    return true;
}

/* Operand o whose term is a broadcast (a node of its class, wherever the
 * value came from: a collective that moved its blocks, a reshape),
 * differing from want only along dims the broadcast adds: constant along
 * them, so every device's piece is want's block of the same broadcast at
 * want's global dims. `deep` (tried after every other reading): also a
 * broadcast of a broadcast (a few levels, through the classes of their
 * operands and of products with known scalars, whose factors ride beside
 * the term: a value broadcast over a vmapped batch, summed, scaled, then
 * broadcast again), and a term carrying a factor. */
static bool review_class_broadcast(lstate *s, uint32_t o, const view *want, bool deep) {
    lift_ctx *c = s->c;
    const lval *x = &s->ops[o];
    const shape *sh = &s->comp->instrs[s->in->operands[o]].shape;
    if (x->kind != LV_TERM || x->v.partial || want->partial || want->rank != sh->rank || sh->rank > VIEW_MAX_RANK ||
        x->zm || x->diff || (!deep && lf_scale_of(x) != 1))
        return false;
    /* map: the output dim each dim of cur's term stands for; factor: the
     * constant cur is multiplied by on the way (a factor put back) */
    int64_t map[VIEW_MAX_RANK], next[VIEW_MAX_RANK];
    uint32_t nmap = sh->rank;
    double factor = 1;
    for (uint32_t d = 0; d < sh->rank; d++) map[d] = d;
    eid cur = x->cls;
    for (int level = 0; level < (deep ? 8 : 1); level++) {
        const eid *ch;
        eid bn = lf_class_node(c, cur, OP_BROADCAST, 1, &ch);
        if (bn == EID_NONE) {
            /* times a splat of a known scalar (a factor put back into the
             * term): the factor rides beside the re-read term instead */
            eid mn = deep ? lf_class_node(c, cur, OP_MULTIPLY, 2, &ch) : EID_NONE;
            const eid *kc;
            uint32_t nk;
            if (mn == EID_NONE) return false;
            eid other = ch[0], k = lf_class_node(c, ch[1], OP_BROADCAST, 1, &kc);
            if (k == EID_NONE) return false;
            (void)eg_type_dims(c->g, eg_class_type(c->g, kc[0]), &nk);
            const interp_val *kv = nk == 0 ? lf_kval(c, kc[0]) : NULL;
            double f = kv && kv->n == 1 ? interp_val_get(kv, 0) : 0;
            if (!isfinite(f) || f == 0) return false;
            factor *= f;
            cur = other;
            continue;
        }
        eid child = ch[0];
        uint32_t nd;
        const int64_t *bd = ea_get(c->g, eg_node_attr(c->g, bn), A_DIMENSIONS, &nd);
        if (!bd) nd = 0;
        if (nd > VIEW_MAX_RANK) return false;
        for (uint32_t k = 0; k < nd; k++) {
            if (bd[k] < 0 || (uint64_t)bd[k] >= nmap) return false;
            next[k] = map[bd[k]];
        }
        bool fits = true;
        for (uint32_t d = 0; d < sh->rank && fits; d++) {
            bool same = x->v.dims[d].naxes == want->dims[d].naxes &&
                        memcmp(x->v.dims[d].axes, want->dims[d].axes, x->v.dims[d].naxes) == 0;
            bool added = true;
            for (uint32_t k = 0; k < nd; k++) added &= next[k] != (int64_t)d;
            fits = same || added;
        }
        if (!fits) {
            memcpy(map, next, nd * sizeof *map);
            nmap = nd;
            cur = child;
            continue;
        }
        int64_t g[VIEW_MAX_RANK];
        lf_global_dims(c, want, sh, g);
        uint32_t t = lf_type_of(c, sh->dtype, g, sh->rank);
        eid r = eg_add(c->g, OP_BROADCAST, lf_list_attr(c, A_DIMENSIONS, next, nd), t, &child, 1, c->origin);
        bool assumed = x->assumed, konst = x->konst;
        double scale = lf_scale_of(x) * factor;
        s->ops[o] = term(r, *want, assumed);
        s->ops[o].konst = konst;
        s->ops[o].scale = scale == 1 ? 0 : scale;
        return true;
    }
    return false;
}

/* Operand o unsharded along dims want shards, sharded as want elsewhere,
 * whose term is constant along those dims by its form: want's block of the
 * term rebuilt at want's global dims (lf_resize_reading; GSPMD's padding
 * mask of a vocab-sharded dim, built from the device's offset, beside rows
 * sharded over dp). */
static bool review_constant_along(lstate *s, uint32_t o, const view *want) {
    return lf_resize_reading(s->c, &s->ops[o], want, false, 48, 6);
}

bool lf_review_merged_broadcast(lstate *s, uint32_t o, const view *want) {
    lift_ctx *c = s->c;
    const lval *x = &s->ops[o];
    const hlo_instr *y = &s->comp->instrs[s->in->operands[o]];
    if (x->kind != LV_TERM || x->v.partial || want->partial || lf_scale_of(x) != 1 || x->zm || x->diff || x->assumed ||
        y->op != OP_RESHAPE || y->noperands != 1 || y->shape.rank > VIEW_MAX_RANK || want->rank != y->shape.rank ||
        x->v.rank != y->shape.rank)
        return false;
    const hlo_instr *b = &s->comp->instrs[y->operands[0]];
    if (b->op != OP_BROADCAST || b->noperands != 1 || b->shape.rank > VIEW_MAX_RANK) return false;
    const lval *bx = &s->vals[y->operands[0]], *cx = &s->vals[b->operands[0]];
    if (bx->kind != LV_TERM || bx->v.partial || bx->v.rank != b->shape.rank || cx->kind != LV_TERM || cx->v.partial ||
        lf_scale_of(cx) != 1 || lf_scale_of(bx) != 1 || cx->zm || cx->diff || cx->cls == EID_NONE)
        return false;
    uint32_t nd;
    const int64_t *bd = instr_ints(b, A_DIMENSIONS, &nd);
    view bv = bx->v;
    uint32_t p = 0, q = 0, changed = 0;
    while (p < b->shape.rank || q < y->shape.rank) {
        uint32_t p2, q2;
        if (!lf_reshape_run(b->shape.dims, b->shape.rank, y->shape.dims, y->shape.rank, p, q, &p2, &q2) ||
            (p2 == p && q2 == q))
            return false;
        for (uint32_t d = q; d < q2; d++) {
            if (lf_same_dim(&x->v.dims[d], &want->dims[d])) continue;
            /* [m, m+1] merged into d: m from the operand, one element per
             * device and sharded as d is now; m+1 added by the broadcast,
             * taking the rest of want's axes */
            uint32_t m = p;
            bool added = true;
            for (uint32_t k = 0; k < nd; k++) added &= bd[k] != (int64_t)(m + 1);
            const view_dim *vm = &bx->v.dims[m], *wd = &want->dims[d];
            if (q2 != q + 1 || p2 != p + 2 || !added || b->shape.dims[m] != 1 || bx->v.dims[m + 1].naxes ||
                !lf_same_dim(vm, &x->v.dims[d]) || wd->naxes <= vm->naxes || memcmp(wd->axes, vm->axes, vm->naxes))
                return false;
            bv.dims[m + 1].naxes = (uint8_t)(wd->naxes - vm->naxes);
            memcpy(bv.dims[m + 1].axes, wd->axes + vm->naxes, bv.dims[m + 1].naxes);
            changed++;
        }
        p = p2, q = q2;
    }
    if (!changed) return false;
    int64_t gb[VIEW_MAX_RANK], gy[VIEW_MAX_RANK];
    lf_global_dims(c, &bv, &b->shape, gb);
    lf_global_dims(c, want, &y->shape, gy);
    eid bc = eg_add(c->g, OP_BROADCAST, lf_list_attr(c, A_DIMENSIONS, bd, nd), lf_type_of(c, b->shape.dtype, gb, b->shape.rank),
                    &cx->cls, 1, c->origin);
    bool konst = x->konst;
    s->ops[o] = term(lf_mk_reshape(c, bc, lf_type_of(c, y->shape.dtype, gy, y->shape.rank), c->origin), *want, false);
    s->ops[o].konst = konst;
    return true;
}

/* Every operand not sharded as want that is a broadcast along the dims it
 * differs in, or constant-only and replicated, re-viewed as want: the same
 * per-device pieces, read as a global term under the others' view. */
static bool review_elementwise(lstate *s, uint32_t o, const view *want);

static bool review_dot(lstate *s, uint32_t o, const view *want);
static bool review_slice(lstate *s, uint32_t o, const view *want);
static bool review_constant_along(lstate *s, uint32_t o, const view *want);

/* A replicated constant every element of which holds one value, which the
 * scale plan changed (it took a factor out of it: lf_scale_plan), read as
 * want: that value everywhere (its instruction would give the old one). */
static bool review_respread(lstate *s, uint32_t o, const view *want) {
    const lval *x = &s->ops[o];
    const hlo_instr *y = &s->comp->instrs[s->in->operands[o]];
    if (x->kind != LV_TERM || !x->respread || !view_is_dup(&x->v) || want->partial || want->rank != y->shape.rank ||
        y->shape.rank > VIEW_MAX_RANK)
        return false;
    int64_t g[VIEW_MAX_RANK];
    view w = *want;
    lf_global_dims(s->c, &w, &y->shape, g);
    eid r = lf_scale_respread(s->c, x, lf_type_of(s->c, y->shape.dtype, g, y->shape.rank));
    if (r == EID_NONE) return false;
    s->ops[o] = term(r, w, x->assumed);
    s->ops[o].konst = s->ops[o].respread = true;
    return true;
}

static bool review_gather(lstate *s, uint32_t o, const view *want);
static bool review_dynamic_slice(lstate *s, uint32_t o, const view *want);
static bool review_scatter(lstate *s, uint32_t o, const view *want);

bool lf_review_operand(lstate *s, uint32_t o, const view *want) {
    return lf_same_sharding(&s->ops[o].v, want) || review_respread(s, o, want) || lf_review_broadcast(s, o, want) ||
           lf_konst_review(s, o, want) || (s->ops[o].v.partial && review_splat(s, o, want)) ||
           lf_review_merged_broadcast(s, o, want) ||
           review_constant(s, o, want) || review_tiled(s, o, want) || review_class_broadcast(s, o, want, false) ||
           review_elementwise(s, o, want) || review_slice(s, o, want) || review_dot(s, o, want) ||
           review_gather(s, o, want) ||
           review_dynamic_slice(s, o, want) || review_scatter(s, o, want) || review_class_broadcast(s, o, want, true) ||
           review_constant_along(s, o, want);
}

/* Operand o of s becomes op b over the re-read children ch under want (a
 * review's result), keeping whether it is computed from constants. */
static void reviewed(lstate *s, uint32_t o, const hlo_instr *b, const eid *ch, uint32_t n, const view *want,
                     bool assumed) {
    view w = *want;
    int64_t g[VIEW_MAX_RANK];
    lf_global_dims(s->c, &w, &b->shape, g);
    bool konst = s->ops[o].konst;
    s->ops[o] = term(lf_node(s->c, s->c->cur, b, ch, n, g, s->c->origin), w, assumed);
    s->ops[o].konst = konst;
}

/* Operand o, an elementwise op whose operands all re-read as want (each
 * constant along the dims it would newly shard: broadcasts, constants,
 * and such ops over them, as jax.random's counters are made: an iota of
 * the global shape times a constant plus another), re-read as want: the
 * op over the re-read operands, block by block. Rank-0 operands of select
 * and clamp stay scalars. Eight levels deep at most (an associative
 * scan's sweeps alternate slices and products of a broadcast decay). */
static bool review_elementwise(lstate *s, uint32_t o, const view *want) {
    static _Thread_local int depth;
    lift_ctx *c = s->c;
    const lval *x = &s->ops[o];
    const hlo_instr *b = &s->comp->instrs[s->in->operands[o]];
    if (depth >= 8 || x->kind != LV_TERM || x->v.partial || want->partial || lf_scale_of(x) != 1 ||
        !graph_op_elementwise(b->op) || b->noperands == 0 || b->noperands > 3 || want->rank != b->shape.rank ||
        b->shape.rank > VIEW_MAX_RANK)
        return false;
    lval sub[3];
    eid ch[3];
    bool assumed = false;
    for (uint32_t k = 0; k < b->noperands; k++) sub[k] = s->vals[b->operands[k]];
    lstate inner = {c, s->comp, b, sub, s->vals, NULL};
    depth++;
    bool ok = true;
    for (uint32_t k = 0; k < b->noperands && ok; k++) {
        const hlo_instr *bk = &s->comp->instrs[b->operands[k]];
        /* one number on every device (a splat constant): that constant */
        if (lf_dev_splat(&sub[k], c->ndev)) sub[k] = lf_splat_term(c, bk, &sub[k], bk->shape.rank ? want : &sub[k].v);
        lf_plain_of_index(&sub[k]);
        if (bk->shape.rank == 0 && (b->op == OP_SELECT || b->op == OP_CLAMP)) {
            ok = sub[k].kind == LV_TERM && view_is_dup(&sub[k].v);
        } else {
            ok = bk->shape.rank == b->shape.rank && sub[k].kind == LV_TERM && lf_review_operand(&inner, k, want) &&
                 sub[k].kind == LV_TERM && lf_same_sharding(&sub[k].v, want) && !sub[k].v.partial &&
                 lf_scale_of(&sub[k]) == 1;
        }
        if (ok) ch[k] = sub[k].cls, assumed |= sub[k].assumed;
    }
    depth--;
    if (!ok) return false;
    reviewed(s, o, b, ch, b->noperands, want, assumed);
    /* a select whose predicate is known true (false) everywhere is its
     * second (third) operand (the baseline may have folded it away: the
     * bounds check of a take at constant ids) */
    uint32_t pick = b->op == OP_SELECT && b->noperands == 3 ? known_pick(lf_kval(c, ch[0])) : 0;
    if (pick && eg_class_type(c->g, ch[pick]) == eg_class_type(c->g, s->ops[o].cls)) eg_union(c->g, s->ops[o].cls, ch[pick], NULL);
    return true;
}

/* Operand o, a slice whole (from 0, stride 1, every local element) along
 * each dim want shards otherwise than its view, whose operand re-reads as
 * want (a broadcast along those dims: an associative scan's strided slices
 * of a decay broadcast over the batch): the slice of the re-read operand,
 * whole along the dims want shards. */
static bool review_slice(lstate *s, uint32_t o, const view *want) {
    static _Thread_local int depth;
    lift_ctx *c = s->c;
    const lval *x = &s->ops[o];
    const hlo_instr *b = &s->comp->instrs[s->in->operands[o]];
    const hlo_attr *sa = instr_attr(b, A_SLICE);
    uint32_t r = b->shape.rank;
    if (depth >= 8 || b->op != OP_SLICE || b->noperands != 1 || !sa || sa->n != r || x->kind != LV_TERM ||
        x->v.partial || want->partial || lf_scale_of(x) != 1 || want->rank != r || r > VIEW_MAX_RANK)
        return false;
    const shape *src = &s->comp->instrs[b->operands[0]].shape;
    for (uint32_t d = 0; d < r; d++) {
        bool whole = sa->v.ints[3 * d] == 0 && sa->v.ints[3 * d + 1] == src->dims[d] && sa->v.ints[3 * d + 2] == 1;
        if ((want->dims[d].naxes || x->v.dims[d].naxes) && !whole) return false;
    }
    lval sub = s->vals[b->operands[0]];
    lf_plain_of_index(&sub);
    if (sub.kind != LV_TERM) return false;
    lstate inner = {c, s->comp, b, &sub, s->vals, NULL};
    depth++;
    bool ok = lf_review_operand(&inner, 0, want) && sub.kind == LV_TERM && lf_same_sharding(&sub.v, want) &&
              !sub.v.partial && lf_scale_of(&sub) == 1;
    depth--;
    if (!ok) return false;
    /* the slice over the global term: whole along the sharded dims */
    int64_t g[VIEW_MAX_RANK], sl[3 * VIEW_MAX_RANK];
    lf_global_dims(c, want, src, g);
    for (uint32_t d = 0; d < r; d++) {
        memcpy(sl + 3 * d, sa->v.ints + 3 * d, 3 * sizeof *sl);
        if (want->dims[d].naxes) sl[3 * d + 1] = g[d];
    }
    bool konst = x->konst;
    s->ops[o] = term(lf_mk_slice(c, sub.cls, sl), *want, sub.assumed);
    s->ops[o].konst = konst;
    return true;
}

/* Operand o, dot(a, b), not sharded as want only along dims the dot takes
 * from a's or b's free dims, whole there, where that side re-reads under the
 * view those dims give it (a broadcast along them: the gradient of a mean
 * over a sharded dim, broadcast back and multiplied by a weight; a zero
 * state every device holds, multiplied by a weight): the dot of the re-read
 * sides, block by block. */
static bool review_dot(lstate *s, uint32_t o, const view *want) {
    static _Thread_local int depth;
    lift_ctx *c = s->c;
    const lval *x = &s->ops[o];
    const hlo_instr *b = &s->comp->instrs[s->in->operands[o]];
    if (depth >= 4 || b->op != OP_DOT || b->noperands != 2 || x->kind != LV_TERM || x->v.partial || want->partial ||
        lf_scale_of(x) != 1 || x->zm || x->diff || want->rank != b->shape.rank || x->v.rank != b->shape.rank)
        return false;
    lval sub[2] = {s->vals[b->operands[0]], s->vals[b->operands[1]]};
    uint32_t nb[2], nc[2];
    const int64_t *bd[2] = {instr_ints(b, A_LHS_BATCH_DIMS, &nb[0]), instr_ints(b, A_RHS_BATCH_DIMS, &nb[1])};
    const int64_t *cd[2] = {instr_ints(b, A_LHS_CONTRACTING_DIMS, &nc[0]), instr_ints(b, A_RHS_CONTRACTING_DIMS, &nc[1])};
    /* the output's dims are the batch dims, lhs's free dims in order, rhs's:
     * which output dim each side's free dim is */
    bool is_free[VIEW_MAX_RANK] = {false}, changes[2] = {false, false};
    view u[2];
    uint32_t at = nb[0];
    for (uint32_t side = 0; side < 2; side++) {
        uint32_t r = s->comp->instrs[b->operands[side]].shape.rank;
        if (sub[side].kind != LV_TERM || sub[side].v.partial || sub[side].v.rank != r || r > VIEW_MAX_RANK) return false;
        u[side] = sub[side].v;
        for (uint32_t d = 0; d < r; d++) {
            bool taken = false;
            for (uint32_t q = 0; q < nb[side]; q++) taken |= bd[side][q] == d;
            for (uint32_t q = 0; q < nc[side]; q++) taken |= cd[side][q] == d;
            if (taken) continue;
            if (at >= want->rank) return false;
            is_free[at] = true;
            if (x->v.dims[at].naxes && memcmp(&want->dims[at], &x->v.dims[at], sizeof want->dims[at])) return false;
            changes[side] |= !lf_same_dim(&u[side].dims[d], &want->dims[at]);
            u[side].dims[d] = want->dims[at++];
        }
    }
    for (uint32_t k = 0; k < want->rank; k++)
        if (!is_free[k] && memcmp(&want->dims[k], &x->v.dims[k], sizeof want->dims[k])) return false;
    lstate inner = {c, s->comp, b, sub, s->vals, NULL};
    depth++;
    bool ok = true;
    for (uint32_t side = 0; side < 2 && ok; side++)
        ok = !changes[side] || (lf_review_operand(&inner, side, &u[side]) && sub[side].kind == LV_TERM &&
                                lf_same_sharding(&sub[side].v, &u[side]) && !sub[side].v.partial &&
                                lf_scale_of(&sub[side]) == 1);
    depth--;
    if (!ok) return false;
    eid ch[2] = {sub[0].cls, sub[1].cls};
    reviewed(s, o, b, ch, 2, want, sub[0].assumed || sub[1].assumed);
    return true;
}

/* Whether no mesh axis shards two dims of v (a re-read may ask for an axis
 * on a new dim while the old one still holds it: no view). */
static bool axes_once(const view *v) {
    uint32_t n = 0;
    for (uint32_t d = 0; d < v->rank; d++) n += v->dims[d].naxes;
    return n == (uint32_t)__builtin_popcount(view_axes_used(v));
}

/* Operand o, gather(table, idx) of a table every device holds whole, not
 * sharded as want only along batch dims (the dims the indices give), where
 * the indices re-read under the view those dims give them (positions
 * broadcast over the batch): the gather at the re-read indices, block by
 * block (a learned position embedding beside batch-sharded tokens). */
static bool review_gather(lstate *s, uint32_t o, const view *want) {
    static _Thread_local int depth;
    lift_ctx *c = s->c;
    const lval *x = &s->ops[o];
    const hlo_instr *b = &s->comp->instrs[s->in->operands[o]];
    if (depth >= 4 || b->op != OP_GATHER || b->noperands != 2 || x->kind != LV_TERM || x->v.partial || want->partial ||
        lf_scale_of(x) != 1 || x->zm || x->diff || want->rank != b->shape.rank || x->v.rank != b->shape.rank ||
        !axes_once(want))
        return false;
    lval sub[2] = {s->vals[b->operands[0]], s->vals[b->operands[1]]};
    lf_plain_of_index(&sub[1]);
    const hlo_instr *bi = &s->comp->instrs[b->operands[1]];
    const shape *is = &bi->shape;
    /* one index everywhere (token type ids that are all zeros): that
     * constant under any view */
    bool splat = lf_dev_splat(&sub[1], c->ndev) && is->rank <= VIEW_MAX_RANK;
    if (splat) sub[1].v = view_dup(is->rank);
    if (sub[0].kind != LV_TERM || !view_is_dup(&sub[0].v) || sub[0].v.partial || (sub[1].kind != LV_TERM && !splat) ||
        sub[1].v.partial || sub[1].v.rank != is->rank || is->rank > VIEW_MAX_RANK)
        return false;
    uint32_t no, nob;
    const int64_t *od = instr_ints(b, A_OFFSET_DIMS, &no);
    int64_t ivd = instr_int(b, A_INDEX_VECTOR_DIM, is->rank);
    instr_ints(b, A_OPERAND_BATCHING_DIMS, &nob);
    if (nob) return false; /* batch dims that pick table rows by position too: not the whole table per row */
    view iw = sub[1].v;
    bool changes = false;
    for (uint32_t d = 0, k = 0; d < b->shape.rank; d++) {
        bool offset = false;
        for (uint32_t q = 0; q < no; q++) offset |= od[q] == d;
        if (offset) {
            if (!lf_same_dim(&want->dims[d], &x->v.dims[d]) || want->dims[d].naxes) return false;
            continue;
        }
        if ((int64_t)k == ivd) k++;  /* the batch dims are the indices' other dims, in order */
        if (k >= is->rank || is->dims[k] != b->shape.dims[d]) return false;
        changes |= !lf_same_dim(&iw.dims[k], &want->dims[d]);
        iw.dims[k++] = want->dims[d];
    }
    if (!changes) return false;
    if (splat) sub[1] = lf_splat_term(c, bi, &sub[1], &iw);
    lstate inner = {c, s->comp, b, sub, s->vals, NULL};
    depth++;
    bool ok = lf_review_operand(&inner, 1, &iw) && sub[1].kind == LV_TERM && lf_same_sharding(&sub[1].v, &iw) &&
              !sub[1].v.partial && lf_scale_of(&sub[1]) == 1;
    depth--;
    if (!ok) return false;
    eid ch[2] = {sub[0].cls, sub[1].cls};
    reviewed(s, o, b, ch, 2, want, sub[0].assumed || sub[1].assumed);
    return true;
}

/* Operand o, a dynamic-slice whose lifted term is its operand's (it only
 * binds per-device blocks: a tp block of a table's columns), not sharded as
 * want only along dims it takes whole, where its operand re-reads with those
 * dims sharded: that term under want. */
static bool review_dynamic_slice(lstate *s, uint32_t o, const view *want) {
    static _Thread_local int depth;
    lift_ctx *c = s->c;
    const lval *x = &s->ops[o];
    const hlo_instr *b = &s->comp->instrs[s->in->operands[o]];
    if (depth >= 4 || b->op != OP_DYNAMIC_SLICE || b->noperands < 1 || x->kind != LV_TERM || x->v.partial ||
        want->partial || lf_scale_of(x) != 1 || x->zm || x->diff || want->rank != b->shape.rank || !axes_once(want))
        return false;
    lval sub[1] = {s->vals[b->operands[0]]};
    lf_plain_of_index(&sub[0]);
    const shape *ss = &s->comp->instrs[b->operands[0]].shape;
    if (sub[0].kind != LV_TERM || sub[0].v.partial || lf_scale_of(&sub[0]) != 1 || ss->rank != b->shape.rank ||
        eg_find(c->g, sub[0].cls) != eg_find(c->g, x->cls))
        return false;
    view uw = sub[0].v;
    bool changes = false;
    for (uint32_t d = 0; d < b->shape.rank; d++) {
        if (lf_same_dim(&want->dims[d], &x->v.dims[d])) continue;
        /* a dim taken whole, unsharded in the operand */
        if (x->v.dims[d].naxes || sub[0].v.dims[d].naxes || ss->dims[d] != b->shape.dims[d]) return false;
        uw.dims[d] = want->dims[d];
        changes = true;
    }
    if (!changes) return false;
    lstate inner = {c, s->comp, b, sub, s->vals, NULL};
    depth++;
    bool ok = lf_review_operand(&inner, 0, &uw) && sub[0].kind == LV_TERM && lf_same_sharding(&sub[0].v, &uw) &&
              !sub[0].v.partial && lf_scale_of(&sub[0]) == 1;
    depth--;
    if (!ok) return false;
    bool konst = x->konst;
    s->ops[o] = term(sub[0].cls, *want, sub[0].assumed);
    s->ops[o].v.partial = 0;
    s->ops[o].konst = konst;
    return true;
}

/* Operand o, scatter(operand, indices, updates) every device holds whole,
 * not sharded as want only along operand dims that are whole windows (the
 * updates' dim of the same size) or batching dims (the indices' and the
 * updates' dim too): each device's rows or windows are scattered alone, so
 * where the three re-read under the views those dims give them (zeros, a
 * broadcast cotangent: the gradient of a take along a batch every device
 * holds alike), the scatter of the re-read three, block by block. A factor
 * carried beside the updates went through the scatter (its term is the
 * scatter of the updates' term): the term is re-read, the factor stays. */
static bool review_scatter(lstate *s, uint32_t o, const view *want) {
    static _Thread_local int depth;
    lift_ctx *c = s->c;
    const lval *x = &s->ops[o];
    const hlo_instr *b = &s->comp->instrs[s->in->operands[o]];
    if (depth >= 4 || b->op != OP_SCATTER || b->noperands != 3 || x->kind != LV_TERM || x->v.partial || want->partial ||
        x->zm || x->diff || want->rank != b->shape.rank || x->v.rank != b->shape.rank || b->shape.dtype == DT_TUPLE ||
        !axes_once(want))
        return false;
    int64_t udim_of_idx[VIEW_MAX_RANK], udim_of_op[VIEW_MAX_RANK];
    if (!lf_scatter_dims(s->comp, b, udim_of_idx, udim_of_op)) return false;
    lval sub[3] = {s->vals[b->operands[0]], s->vals[b->operands[1]], s->vals[b->operands[2]]};
    lstate inner = {c, s->comp, b, sub, s->vals, NULL};
    const eid *kids;
    for (uint32_t k = 0; k < 3; k++) {
        lf_uniform_dev_as_term(&inner, k);
        lf_plain_of_index(&sub[k]);
        if (sub[k].kind != LV_TERM || sub[k].v.partial || (k < 2 && lf_scale_of(&sub[k]) != 1) ||
            sub[k].v.rank != s->comp->instrs[b->operands[k]].shape.rank)
            return false;
    }
    if (lf_class_node(c, x->cls, OP_SCATTER, 3, &kids) == EID_NONE) return false;
    for (uint32_t k = 0; k < 3; k++)
        if (eg_find(c->g, kids[k]) != eg_find(c->g, sub[k].cls)) return false;
    sub[2].scale = 0; /* (its factor is x's, beside the term) */
    uint32_t nib, nsb;
    const int64_t *ib = instr_ints(b, A_INPUT_BATCHING_DIMS, &nib), *sb = instr_ints(b, A_SCATTER_INDICES_BATCHING_DIMS, &nsb);
    const shape *us = &s->comp->instrs[b->operands[2]].shape;
    view u[3] = {sub[0].v, sub[1].v, sub[2].v};
    bool changes[3] = {false, false, false};
    for (uint32_t d = 0; d < b->shape.rank; d++) {
        if (lf_same_dim(&want->dims[d], &x->v.dims[d])) continue;
        if (x->v.dims[d].naxes || sub[0].v.dims[d].naxes) return false;
        int64_t ud = udim_of_op[d], id = -1;
        for (uint32_t q = 0; q < nib && q < nsb; q++)
            if (ib[q] == (int64_t)d) id = sb[q], ud = udim_of_idx[sb[q]];
        /* a window dim taken whole, or a batching dim */
        if (ud < 0 || (id < 0 && us->dims[ud] != b->shape.dims[d])) return false;
        u[0].dims[d] = u[2].dims[ud] = want->dims[d];
        changes[0] = changes[2] = true;
        if (id >= 0) u[1].dims[id] = want->dims[d], changes[1] = true;
    }
    if (!changes[0]) return false;
    depth++;
    bool ok = true;
    for (uint32_t k = 0; k < 3 && ok; k++)
        ok = !changes[k] || (lf_review_operand(&inner, k, &u[k]) && sub[k].kind == LV_TERM &&
                             lf_same_sharding(&sub[k].v, &u[k]) && !sub[k].v.partial && lf_scale_of(&sub[k]) == 1);
    depth--;
    if (!ok) return false;
    eid ch[3] = {sub[0].cls, sub[1].cls, sub[2].cls};
    lval was = *x;
    reviewed(s, o, b, ch, 3, want, sub[0].assumed || sub[1].assumed || sub[2].assumed);
    s->ops[o].scale = was.scale;
    s->ops[o].rescaled = was.rescaled;
    s->ops[o].factor_at = was.factor_at;
    return true;
}

void lf_review_operands(lstate *s, const view *want) {
    for (uint32_t o = 0; o < s->in->noperands; o++) lf_review_operand(s, o, want);
}

/* The view of lf_unit_move (*w), without building anything; false when the form
 * does not apply. */
static bool unit_moved_view(const view *v, const shape *sh, uint32_t from, uint32_t to, view *w) {
    uint32_t lo = from < to ? from : to, hi = from < to ? to : from;
    if (from == to || v->rank != sh->rank || hi >= sh->rank || sh->rank > VIEW_MAX_RANK || !v->dims[from].naxes ||
        v->dims[to].naxes)
        return false;
    for (uint32_t q = lo; q < hi; q++)
        if (sh->dims[q] != 1 || (q != from && v->dims[q].naxes)) return false;
    *w = *v;
    w->dims[to] = v->dims[from];
    memset(&w->dims[from], 0, sizeof w->dims[from]);
    return true;
}

/* x (its own local shape sh) re-read with the sharding of dim `from` moved
 * to dim `to`, where every local dim from the lower of the two up to (not
 * including) the higher is a unit dim and all but `from` are unsharded, `to`
 * included. Globally those dims are [P, 1.., n] sharded along the first (each
 * device one index) or [1, 1.., P·n] sharded along the last (each device a
 * block of n): in row-major order the same elements, so either is the other
 * reshaped. *out gets the term reshaped and the moved view; false when the
 * form does not apply. */
bool lf_unit_move(lift_ctx *c, const lval *x, const shape *sh, uint32_t from, uint32_t to, lval *out) {
    view w;
    if (x->kind != LV_TERM || !unit_moved_view(&x->v, sh, from, to, &w)) return false;
    int64_t g[VIEW_MAX_RANK];
    lf_global_dims(c, &w, sh, g);
    *out = *x;
    out->v = w;
    out->cls = lf_mk_reshape(c, x->cls, lf_type_of(c, sh->dtype, g, sh->rank), c->origin);
    return true;
}

bool lf_unit_move_next(lift_ctx *c, const lval *x, const shape *sh, uint32_t d, lval *out) {
    return x->kind == LV_TERM && x->v.rank == sh->rank && d + 1 < sh->rank && x->v.dims[d].naxes &&
           lf_unit_move(c, x, sh, d, d + 1, out);
}

/* Operand `side` of s re-read with the sharding `want` (block sharding: its
 * axes select the major factor P of a dim) moved from another dim `from` to
 * its unsharded dim `to`: the same local data is then a piece of the term
 * with that factor split off `from` and made the major factor of `to`
 * (device r's block along `to` of the new term is its block along `from` of
 * the old one). That is a reshape when it keeps the row-major order (only
 * dims of global size 1 between, and `from` of local size 1 when it comes
 * first, `to` of global size 1 when it does): a reshape that only moves
 * size-1 local dims, or splits a unit dim off a sharded one, has several
 * readings. Else a transpose between two reshapes. The reading a consumer
 * needs is taken here; it is one of several (ambiguous). Returns whether it
 * was. */
bool lf_unit_dim_reread(lstate *s, uint32_t side, uint32_t to, const view_dim *want) {
    lift_ctx *c = s->c;
    lval *x = &s->ops[side];
    const shape *ls = &s->comp->instrs[s->in->operands[side]].shape;
    if (x->kind != LV_TERM || x->v.dims[to].naxes || ls->rank + 1 > VIEW_MAX_RANK) return false;
    uint32_t rank;
    const int64_t *g = eg_type_dims(c->g, eg_class_type(c->g, x->cls), &rank);
    if (rank != ls->rank) return false;
    for (uint32_t from = 0; from < rank; from++) {
        if (from == to || memcmp(&x->v.dims[from], want, sizeof *want) || ls->dims[from] < 1 || g[from] % ls->dims[from])
            continue;
        int64_t P = g[from] / ls->dims[from], nd[VIEW_MAX_RANK];
        memcpy(nd, g, rank * sizeof *nd);
        nd[to] = P * g[to];
        nd[from] = ls->dims[from];
        bool order = from < to ? ls->dims[from] == 1 : g[to] == 1;
        for (uint32_t d = (from < to ? from : to) + 1; d < (from < to ? to : from); d++) order &= g[d] == 1;
        if (order) {
            x->cls = lf_mk_reshape(c, x->cls, lf_type_of(c, ls->dtype, nd, rank), c->origin);
        } else {
            /* split: `from` becomes (P, local) at positions from, from+1 */
            int64_t sd[VIEW_MAX_RANK], td[VIEW_MAX_RANK], perm[VIEW_MAX_RANK];
            uint32_t k = 0;
            for (uint32_t d = 0; d < rank; d++) {
                if (d == from) sd[k++] = P, sd[k++] = ls->dims[from];
                else sd[k++] = g[d];
            }
            /* P moved to just before `to` */
            k = 0;
            for (uint32_t d = 0; d < rank; d++) {
                uint32_t at = d < from ? d : d + 1;
                if (d == to) perm[k++] = from;
                perm[k++] = d == from ? from + 1 : at;
            }
            for (uint32_t q = 0; q <= rank; q++) td[q] = sd[perm[q]];
            eid y = lf_mk_reshape(c, x->cls, lf_type_of(c, ls->dtype, sd, rank + 1), c->origin);
            y = eg_add(c->g, OP_TRANSPOSE, lf_list_attr(c, A_DIMENSIONS, perm, rank + 1), lf_type_of(c, ls->dtype, td, rank + 1),
                       &y, 1, c->origin);
            x->cls = lf_mk_reshape(c, y, lf_type_of(c, ls->dtype, nd, rank), c->origin);
        }
        x->v.dims[to] = *want;
        memset(&x->v.dims[from], 0, sizeof x->v.dims[from]);
        x->ambiguous = true;
        return true;
    }
    return false;
}

/* The elementwise op s under the other reading of a sharded unit dim
 * (lf_unit_move of every operand; a broadcast operand re-viewed), when the
 * baseline already has that term and not the one of reading *v: that term,
 * with *v moved. EID_NONE otherwise (nothing is changed). Both readings are
 * true; this only picks the one that meets the baseline. */
static eid other_unit_reading(lstate *s, view *v) {
    lift_ctx *c = s->c;
    const hlo_instr *in = s->in;
    uint32_t n = in->noperands, r = in->shape.rank;
    if (c->baseline_mode || n == 0 || n > 8 || r > VIEW_MAX_RANK || v->partial) return EID_NONE;
    for (uint32_t o = 0; o < n; o++)
        if (s->ops[o].kind != LV_TERM || !lf_same_sharding(&s->ops[o].v, v) || s->comp->instrs[in->operands[o]].shape.rank != r)
            return EID_NONE;
    lval saved[8];
    memcpy(saved, s->ops, n * sizeof *saved);
    for (uint32_t from = 0; from < r; from++)
        for (uint32_t to = 0; to < r; to++) {
            lval pm = {.kind = LV_TERM};
            if (!unit_moved_view(v, &in->shape, from, to, &pm.v)) continue;
            bool ok = true;
            eid ch[8];
            for (uint32_t o = 0; o < n && ok; o++) {
                lval m;
                const hlo_instr *xi = &s->comp->instrs[in->operands[o]];
                if (xi->op == OP_BROADCAST) ok = lf_review_broadcast(s, o, &pm.v), m = s->ops[o];
                else ok = lf_unit_move(c, &saved[o], &xi->shape, from, to, &m);
                ch[o] = m.cls;
            }
            memcpy(s->ops, saved, n * sizeof *saved);
            if (!ok) continue;
            int64_t dims[VIEW_MAX_RANK];
            lf_global_dims(c, &pm.v, &in->shape, dims);
            eid mine[8];
            for (uint32_t o = 0; o < n; o++) mine[o] = saved[o].cls;
            int64_t cur[VIEW_MAX_RANK];
            lf_global_dims(c, v, &in->shape, cur);
            uint32_t attr = lf_encode_attrs(c, c->cur, in);
            eid here = eg_lookup(c->g, in->op, attr, lf_type_of(c, in->shape.dtype, cur, r), mine, n);
            eid there = eg_lookup(c->g, in->op, attr, lf_type_of(c, in->shape.dtype, dims, r), ch, n);
            if (there == EID_NONE || !(eg_class_origin(c->g, there) & EG_BASELINE)) continue;
            if (here != EID_NONE && (eg_class_origin(c->g, here) & EG_BASELINE)) return EID_NONE;
            *v = pm.v;
            return there;
        }
    return EID_NONE;
}

static lval lift_elementwise(lstate *s) {
    lift_ctx *c = s->c;
    const hlo_instr *in = s->in;
    const lval *ops = s->ops;
    view v = view_dup(in->shape.rank);
    bool first = true, assumed = false;
    uint8_t partial = 0, red = 0;
    elementwise_align_units(s);
    lf_elementwise_unit_partials(s);
    /* The sharding every operand must have: the union of the operands'. A
     * broadcast's along the dims it adds is one reading among several (it is
     * constant along them): those axes count only where no other operand
     * uses them. */
    view want = view_dup(in->shape.rank);
    for (int pass = 0; pass < 2; pass++)
        for (uint32_t o = 0; o < in->noperands; o++) {
            if (ops[o].kind != LV_TERM) return unknown();
            const hlo_instr *xi = &s->comp->instrs[in->operands[o]];
            for (uint32_t d = 0; d < in->shape.rank && d < ops[o].v.rank; d++) {
                if (lf_broadcast_adds(xi, d) != (pass == 1)) continue;
                view_dim vd = ops[o].v.dims[d];
                view one = {.rank = 1, .dims = {vd}};
                if (vd.naxes && !want.dims[d].naxes && !(pass && (view_axes_used(&want) & view_axes_used(&one))))
                    want.dims[d] = vd;
            }
        }
    lf_review_operands(s, &want);
    for (uint32_t o = 0; o < in->noperands; o++) {
        const lval *x = &ops[o];
        if (x->kind != LV_TERM) return unknown();
        assumed |= x->assumed;
        /* Scalar-broadcast operands are explicit in HLO, so shapes agree and the
         * shardings must too, except for the scalars select and clamp may take
         * (a predicate, bounds): a whole scalar on every device stands for its
         * broadcast, however the others are cut. */
        if (x->v.rank == 0 && in->shape.rank > 0 && !x->v.partial && (in->op == OP_SELECT || in->op == OP_CLAMP)) continue;
        if (first) {
            v = x->v;
            v.partial = 0;
            first = false;
        } else if (!lf_same_sharding(&v, &x->v)) {
            /* Not an inconsistency by itself: a replicated operand combined with
             * blocks of a sharded one stands for its own tiling. A table of
             * constants is read so (lift_table.c); any other such global term
             * is not the baseline's, so this stays undecided, never a
             * finding. */
            lval tiled;
            if (lf_tiled_table(s, &want, &tiled)) return tiled;
            /* blocks beside shares of a sum the baseline takes per group
             * (x minus its group's mean): the groups' rows */
            if (shares_in_groups(s) && lf_group_partial(s, &tiled)) return tiled;
            strbuf how;
            sb_init(&how);
            lf_describe_operands(&how, c, ops, in->noperands);
            lf_unsupported(c, s->comp, in, "%s combines a sharded operand with one that is not sharded alike "
                        "(operand %u; %s); tiled operands are not related yet", in->name, o, how.s);
            sb_free(&how);
            /* The union is a view only when no axis shards two dims (the
             * operands may be two readings of unit dims): else nothing is
             * known of the result, not even its view. */
            uint32_t naxes = 0;
            for (uint32_t d = 0; d < want.rank; d++) naxes += want.dims[d].naxes;
            if (naxes != (uint32_t)__builtin_popcount(view_axes_used(&want))) return unknown();
            return lf_assumed_term(c, in, want);
        }
        if (x->v.partial) {
            if (partial && (partial != x->v.partial || red != x->v.red)) {
                /* A product of sums over disjoint axes, each the same over the
                 * other's devices, is a sum over both (Σa Σb xa·yb). */
                if (in->op == OP_MULTIPLY && in->noperands == 2 && red == RED_SUM && x->v.red == RED_SUM &&
                    !(partial & x->v.partial) && !(view_axes_used(&x->v) & partial) &&
                    !(view_axes_used(&ops[0].v) & x->v.partial)) {
                    partial |= x->v.partial;
                    continue;
                }
                lf_finding(c, KIND_MISSING_ALL_REDUCE, s->comp, in, "%s combines values partial over different mesh axes", in->opname);
                return unknown();
            }
            partial = x->v.partial;
            red = x->v.red;
        }
    }
    if (partial) {
        /* A partial operand must be one the op is linear in, and for add/subtract
         * every operand must be partial the same way. A max of partial maxima
         * (or of one and a value the same on every device it is partial over)
         * is the partial max of the maxima, and so for min. */
        bool idem = (red == RED_MAX && in->op == OP_MAXIMUM) || (red == RED_MIN && in->op == OP_MINIMUM);
        /* On predicates, and is min and or is max (finiteness votes ANDed
         * on every device, then pmin'd). */
        idem |= in->shape.dtype == DT_PRED &&
                ((red == RED_MIN && in->op == OP_AND) || (red == RED_MAX && in->op == OP_OR));
        /* A convert is monotone: it commutes with a max or a min. */
        idem |= (red == RED_MAX || red == RED_MIN) && in->op == OP_CONVERT && !dtype_is_complex(in->shape.dtype) &&
                !dtype_is_complex(s->comp->instrs[in->operands[0]].shape.dtype);
        /* Whether a sum is finite is whether every share is (their min, as
         * predicates), where finite shares do not overflow when summed. */
        bool finite_test = in->op == OP_IS_FINITE && in->noperands == 1 && red == RED_SUM;
        idem |= finite_test;
        bool ok = red == RED_SUM || idem;
        /* The negation of a partial max is the partial min of the negations
         * (max_i -x_i = -min_i x_i), exact in floating point; not for
         * integers, where the negation of the least value wraps. */
        if (in->op == OP_NEGATE && (red == RED_MAX || red == RED_MIN) && dtype_is_float(in->shape.dtype)) {
            ok = true;
            red = red == RED_MAX ? RED_MIN : RED_MAX;
        }
        for (uint32_t o = 0; o < in->noperands && ok; o++) {
            if (!ops[o].v.partial) {
                /* a zero added (or made a complex part) is a partial sum of zeros */
                if ((in->op == OP_ADD || in->op == OP_SUBTRACT || in->op == OP_COMPLEX) && !lf_class_is_zero(c, ops[o].cls))
                    ok = false;
                if (idem) ok = !(view_axes_used(&ops[o].v) & partial);
                continue;
            }
            ok = idem || linear_in(c, s->comp, in, ops, o);
        }
        /* A partial integer sum of shares never negative tested against
         * zero (a count's any-hit test, c != 0 or c > 0): the sum is non-zero where
         * some share is, so the test is the partial max (an or over the
         * devices) of the shares' tests. */
        const char *dir = in->op == OP_COMPARE ? instr_str(in, A_DIRECTION) : NULL;
        bool zero_test = dir && in->noperands == 2 && ops[0].v.partial && !ops[1].v.partial && ops[1].kind == LV_TERM &&
                         dtype_is_int(s->comp->instrs[in->operands[0]].shape.dtype) && lf_class_is_zero(c, ops[1].cls);
        if (!ok && red == RED_SUM && zero_test && (!strcmp(dir, "NE") || !strcmp(dir, "GT")) &&
            lf_nonneg(c->cur, s->comp, in->operands[0])) {
            ok = true;
            red = RED_MAX;
        }
        if (!ok && red != RED_SUM) {
            /* Partial maxima combined otherwise (online softmax: a running max
             * and sums rescaled by exp of its change) are not related yet; a
             * program may well be right to, so this decides nothing. */
            strbuf why;
            sb_init(&why);
            lf_describe_operands(&why, c, ops, in->noperands);
            lf_unsupported_suspect(c, KIND_MISSING_ALL_REDUCE, s->comp, in,
                                   "%s computes with a partial %s before it is reduced (%s); such uses (an online "
                                   "softmax's running max) are not related yet", in->name, reducer_name(red), why.s);
            sb_free(&why);
            return unknown();
        }
        /* An integer narrowed, or taken at its width with the other
         * signedness, keeps its value modulo 2^bits, and wrapping sums of
         * such values do too: the convert of a partial integer sum is the
         * partial sum (in the narrow type) of the converts, exactly. */
        int from = s->comp->instrs[in->operands[0]].shape.dtype;
        if (!ok && in->op == OP_CONVERT && in->noperands == 1 && red == RED_SUM && dtype_is_int(from) &&
            dtype_is_int(in->shape.dtype) && from != DT_PRED && in->shape.dtype != DT_PRED &&
            dtype_bits(in->shape.dtype) <= dtype_bits(from))
            ok = true;
        if (!ok && in->op == OP_CONVERT && in->noperands == 1 && red == RED_SUM && dtype_is_float(in->shape.dtype) &&
            ops[0].kind == LV_TERM) {
            /* A partial sum rounded to a narrower float where the baseline
             * rounds the complete sum to that type too: rounding in another
             * place (each share, then the sum), no difference over the reals
             * the rules hold on — the baseline's converted value, partial. */
            view pv = v;
            pv.partial = partial;
            pv.red = red;
            int64_t gd[VIEW_MAX_RANK];
            if (in->shape.rank <= VIEW_MAX_RANK) {
                lf_global_dims(c, &pv, &in->shape, gd);
                eid x = eg_find(c->g, ops[0].cls);
                eid e = eg_lookup(c->g, OP_CONVERT, lf_encode_attrs(c, c->cur, in), lf_type_of(c, in->shape.dtype, gd, in->shape.rank),
                                  &x, 1);
                if (e != EID_NONE && (eg_class_origin(c->g, e) & EG_BASELINE)) return term(eg_find(c->g, e), pv, ops[0].assumed);
            }
        }
        if (!ok) {
            strbuf why;
            sb_init(&why);
            lf_describe_operands(&why, c, ops, in->noperands);
            /* a reduce-precision that rounds (one that does not is the
             * identity: lf_identity_operand) rounds each share as a convert */
            bool is_convert = in->op == OP_CONVERT || in->op == OP_REDUCE_PRECISION;
            char rounded_to[32];
            if (in->op == OP_REDUCE_PRECISION)
                snprintf(rounded_to, sizeof rounded_to, "e%lldm%lld", (long long)instr_int(in, A_EXPONENT_BITS, 0),
                         (long long)instr_int(in, A_MANTISSA_BITS, 0));
            else
                snprintf(rounded_to, sizeof rounded_to, "%s", dtype_name(in->shape.dtype));
            /* A complete value added to a partial sum that is then summed over
             * the same axes is counted once per device: the reduction is wrong,
             * not missing. */
            bool per_device = !is_convert && partial_after_row_max(s, ops, partial);
            uint32_t meets = 0;
            bool residue = false, counts = !is_convert && counts_only_zero_tested(s, partial);
            const hlo_instr *later = !per_device && (in->op == OP_ADD || in->op == OP_SUBTRACT)
                                         ? lf_summed_later(c, s->comp, in, partial, false)
                                         : NULL;
            if (counts)
                lf_unsupported(c, s->comp, in, "%s adds a count every device holds to a partial count (%s) that is "
                               "only tested against zero once summed: n·a + b is zero where a + b is (counts are never "
                               "negative), but the sum itself is not the baseline's; not related yet", in->name, why.s);
            else if (later)
                lf_finding(c, KIND_WRONG_REDUCTION, s->comp, in, "%s adds a value that is not partial to a partial sum (%s) that %s then "
                        "sums over the devices: it is counted once per device", in->opname, why.s, later->name);
            else if (!is_convert && grouped_in_baseline(c, ops, in->noperands)) {
                /* each device's share as its group's value (lift_group.c) */
                lval gv;
                if (lf_group_partial(s, &gv)) {
                    sb_free(&why);
                    return gv;
                }
                lf_unsupported(c, s->comp, in, "%s uses a partial sum before it is reduced (%s), and the baseline splits "
                               "a dim that sum runs over into the devices' blocks (a computation per group, as jax.vmap "
                               "over the blocks writes it): per-device groups are not related yet", in->name, why.s);
            }
            else if (!is_convert && lf_short_reduction(s, why.s))
                ;
            else if (is_convert && ((ops[0].assumed && module_converts_to(c->base, in->shape.dtype, -1)) ||
                                    (!(eg_class_origin(c->g, ops[0].cls) & EG_BASELINE) &&
                                     module_converts_to(c->base, in->shape.dtype, global_elems(c, &v, &in->shape))) ||
                                    module_sums_rounded(c->base, in->shape.dtype)))
                /* whether the baseline rounds that sum to this type too (rounding
                 * in another place, above) is unknown where the term is
                 * assumed and the baseline rounds some value to it, or where
                 * the term is not the baseline's yet (equal to it only after
                 * saturation) and the baseline rounds a value of the sum's
                 * size to it; or the baseline adds values rounded to this type
                 * in this type (its summands may be the shares, rounded alike) */
                lf_unsupported(c, s->comp, in, "%s converts a partial sum to %s before it is reduced (%s), a value not "
                               "related to the baseline's: whether the baseline rounds it alike is unknown", in->name,
                               rounded_to, why.s);
            else if (c->in_loop_cond)
                /* each group stops its loop on its own statistic (its rows
                 * all done): the baseline's function when the iterations a
                 * group runs past its own stop change nothing (finished rows
                 * rewrite what they hold), which the walk cannot tell */
                lf_unsupported_suspect(c, KIND_MISSING_ALL_REDUCE, s->comp, in,
                                       "%s in a loop condition uses a partial sum before it is reduced (%s): each group "
                                       "of devices may stop on its own count, which is the baseline's result only when "
                                       "the iterations past a group's stop change nothing; not related yet",
                                       in->name, why.s);
            else if (per_device)
                /* a sum of values each device shifted by its own block's
                 * max (an online softmax's local sum, whose log is the
                 * device's logsumexp that a later merge combines) */
                lf_unsupported_suspect(c, KIND_MISSING_ALL_REDUCE, s->comp, in,
                                       "%s uses a partial sum of values each device shifted by its own blocks' maxima "
                                       "(%s): a per-device statistic, which a later merge may combine; not related yet",
                                       in->name, why.s);
            else if (!is_convert && (own_statistic(c, ops, in->noperands, partial) || (meets = meets_partial_later(s, partial))) &&
                     (weighted_product(s->comp, (uint32_t)(in - s->comp->instrs)) || (meets && weighted_product(s->comp, meets)) ||
                      !averaged_later(s->comp, meets ? meets : (uint32_t)(in - s->comp->instrs), 0)))
                /* each device's own shares combined (a weighted mean of its
                 * rows, sum(w·x) / sum(w), or / max(sum(w), 1)), merged with
                 * the others' later by Chan's formula: a per-device
                 * statistic, not a sum cut short */
                lf_unsupported_suspect(c, KIND_MISSING_ALL_REDUCE, s->comp, in,
                                       "%s combines partial sums with each other (%s): each device's own statistic, "
                                       "which a later merge may combine correctly; not related yet", in->name, why.s);
            else if ((residue = !is_convert && dtype_is_int(in->shape.dtype) && (in->op == OP_AND || in->op == OP_REMAINDER) &&
                                in->noperands == 2 && !ops[1].v.partial))
                /* (Σ a) mod k is (Σ (a mod k)) mod k: right when the sum is
                 * taken modulo k again after it is reduced (a checksum's
                 * bytes, a parity bit), which the walk cannot see here; the
                 * residues, summed later, are shares of a guess */
                lf_unsupported_suspect(c, KIND_MISSING_ALL_REDUCE, s->comp, in,
                                       "%s takes a partial integer sum modulo a constant before it is reduced (%s): the "
                                       "baseline's value when the sum is taken modulo it again after; not related yet",
                                       in->name, why.s);
            else if ((residue = zero_test))
                /* the shares' signs decide whether the test of each is the
                 * test of their sum (an any-hit count), which is not known
                 * (a float's zero test, a division's guard, stays a finding);
                 * the tests, maxed later, are shares of a guess */
                lf_unsupported_suspect(c, KIND_MISSING_ALL_REDUCE, s->comp, in,
                                       "%s tests a partial sum against zero before it is reduced (%s): each share's test "
                                       "is the sum's when no share is negative, which is not known; not related yet",
                                       in->name, why.s);
            else if (in->op == OP_COMPARE && in->noperands == 2 && dtype_is_int(s->comp->instrs[in->operands[0]].shape.dtype))
                /* a count each device takes of its own rows (a bincount of
                 * its tokens' experts), compared with positions in its own
                 * rows (grouping them for a ragged dot): the device's
                 * statistic used with its own data, or a sum cut short */
                lf_unsupported_suspect(c, KIND_MISSING_ALL_REDUCE, s->comp, in,
                                       "%s compares a partial integer sum (%s), a count, before it is reduced: each "
                                       "device's own count used with its own rows (grouping its tokens) is what a program "
                                       "may mean; not related yet", in->name, why.s);
            else
                lf_finding(c, is_convert ? KIND_DTYPE_MISMATCH : KIND_MISSING_ALL_REDUCE, s->comp, in,
                        is_convert ? "%s converts a partial sum to %s before it is reduced (%s): the sum is rounded differently"
                              : "%s needs complete values but %s: a missing all-reduce",
                        in->opname, is_convert ? rounded_to : why.s, why.s);
            sb_free(&why);
            /* Go on past the finding: a convert leaves the value partial (only
             * rounded wrongly), and so does a sum that is reduced later (its
             * content is wrong); other ops leave something no longer a sum. */
            view pv = v;
            pv.partial = is_convert || later || residue || counts ? partial : 0;
            pv.red = is_convert || later || counts ? red : residue ? (zero_test ? RED_MAX : RED_SUM) : 0;
            return residue || counts ? lf_assumed_term(c, in, pv) : lf_assumed_known(c, in, pv);
        }
        if (finite_test) {
            lf_assume(c, "a sum of finite shares is finite (it does not overflow): is-finite of a partial sum is the "
                         "min over the devices of each share's");
            red = RED_MIN;
        }
        v.partial = partial;
        v.red = red;
    }
    int64_t dims[VIEW_MAX_RANK];
    eid ch[8];
    if (in->noperands > 8) return unknown();
    eid other = other_unit_reading(s, &v);
    if (other != EID_NONE) return term(other, v, assumed);
    lf_global_dims(c, &v, &in->shape, dims);
    for (uint32_t o = 0; o < in->noperands; o++) ch[o] = ops[o].cls;
    return term(lf_node(c, c->cur, in, ch, in->noperands, dims, c->origin), v, assumed);
}

/* ---- the per-opcode dispatch ---- */

/* topk along the last dim: each row's k largest (or smallest) and their
 * positions in the row. Rows are independent, so a view that leaves the last
 * dim whole (and is never partial) holds rows of the global result, values
 * and positions alike. A tuple of the two elements of the one topk node. */
static lval lift_topk(lstate *s) {
    lift_ctx *c = s->c;
    const hlo_instr *in = s->in;
    const lval *x = &s->ops[0];
    const shape *xs = &s->comp->instrs[in->operands[0]].shape;
    if (in->noperands != 1 || x->kind != LV_TERM || in->shape.dtype != DT_TUPLE || in->shape.ntuple != 2 || !xs->rank ||
        xs->rank > VIEW_MAX_RANK)
        return unknown();
    lval blocks;
    if (!x->v.partial && x->v.dims[xs->rank - 1].naxes && lf_topk_blocks(s, &blocks)) return blocks;
    if (x->v.partial || x->v.dims[xs->rank - 1].naxes) {
        lf_unsupported(c, s->comp, in, "%s takes the top values of rows that are %s", in->name,
                    x->v.partial ? "partial" : "sharded along");
        return unknown();
    }
    eid node = lf_node(c, c->cur, in, &x->cls, 1, NULL, c->origin);
    lval t = {.kind = LV_TUPLE, .n = 2};
    t.elems = arena_alloc(c->a, 3 * sizeof *t.elems);
    for (uint32_t j = 0; j < 2; j++) {
        const shape *es = &in->shape.tuple[j];
        int64_t dims[VIEW_MAX_RANK];
        if (es->rank != xs->rank) return unknown();
        lf_global_dims(c, &x->v, es, dims);
        eid e = lf_mk_element(c, node, j, lf_type_of(c, es->dtype, dims, es->rank));
        t.elems[j] = term(e, x->v, x->assumed);
    }
    lf_topk_stack(s, &t);
    return t;
}

/* sort along dim d: each line along d sorted on its own (the comparator
 * sees only the elements of that line), all operands permuted alike. Where
 * the operands are sharded alike, d whole and none partial, each device
 * sorts lines of the global operands: the result is the global sort, sharded
 * as they are. One element per operand (a tuple when several). */
static lval lift_sort(lstate *s) {
    lift_ctx *c = s->c;
    const hlo_instr *in = s->in;
    uint32_t nd;
    const int64_t *sd = instr_ints(in, A_DIMENSIONS, &nd);
    const shape *xs = &s->comp->instrs[in->operands[0]].shape;
    if (!in->noperands || in->noperands > 8 || nd != 1 || sd[0] < 0 || (uint64_t)sd[0] >= xs->rank ||
        xs->rank > VIEW_MAX_RANK || s->ops[0].kind != LV_TERM)
        return unknown();
    view want = s->ops[0].v;
    lf_review_operands(s, &want);
    bool assumed = false;
    eid ch[8];
    for (uint32_t o = 0; o < in->noperands; o++) {
        const lval *x = &s->ops[o];
        if (x->kind != LV_TERM || x->v.partial || !lf_same_sharding(&x->v, &want) || lf_scale_of(x) != 1 ||
            x->v.dims[sd[0]].naxes)
            return unknown();
        assumed |= x->assumed;
        ch[o] = x->cls;
    }
    int64_t dims[VIEW_MAX_RANK];
    if (in->shape.dtype != DT_TUPLE) {
        lf_global_dims(c, &want, &in->shape, dims);
        return term(lf_node(c, c->cur, in, ch, in->noperands, dims, c->origin), want, assumed);
    }
    if (in->shape.ntuple != in->noperands) return unknown();
    eid node = lf_node(c, c->cur, in, ch, in->noperands, NULL, c->origin);
    lval t = {.kind = LV_TUPLE, .n = in->noperands};
    t.elems = arena_alloc(c->a, (in->noperands + 1) * sizeof *t.elems);
    for (uint32_t j = 0; j < in->noperands; j++) {
        const shape *es = &in->shape.tuple[j];
        if (es->rank != xs->rank) return unknown();
        lf_global_dims(c, &want, es, dims);
        eid e = lf_mk_element(c, node, j, lf_type_of(c, es->dtype, dims, es->rank));
        t.elems[j] = term(e, want, assumed);
    }
    return t;
}

/* The leading dims along which op `in` works batch by batch (each batch
 * element's result depends on that element of every operand alone), or 0:
 * fft transforms its trailing fft_length dims, cholesky and
 * triangular_solve the trailing matrices, and a custom call says so by its
 * frontend attribute num_batch_dims (jax's linear algebra calls). */
static uint32_t batch_dims(const hlo_comp *comp, const hlo_instr *in) {
    uint32_t r = in->noperands ? comp->instrs[in->operands[0]].shape.rank : 0, n;
    switch (in->op) {
    case OP_FFT: instr_ints(in, A_FFT_LENGTH, &n); return n && n < r ? r - n : 0;
    case OP_CHOLESKY: case OP_TRIANGULAR_SOLVE: return r > 2 ? r - 2 : 0;
    case OP_CUSTOM_CALL: {
        const char *v = instr_frontend_attr(in, "num_batch_dims");
        char *end;
        long b = v ? strtol(v, &end, 10) : 0;
        return !v || *end || b < 1 || b > VIEW_MAX_RANK ? 0 : (uint32_t)b;
    }
    default: return 0;
    }
}

/* An op that works batch by batch over its leading `nb` dims (batch_dims),
 * every operand sharded alike there and nowhere else, none partial: each
 * device computes the batches it holds, so the result is the op over the
 * global operands, its leading dims sharded as theirs (each element of a
 * tuple result alike). An fft is linear besides: of a partial sum, it is
 * the partial sum of the ffts. False when the op is no such op or the views
 * differ. */
static bool lift_batched(lstate *s, lval *out) {
    lift_ctx *c = s->c;
    const hlo_instr *in = s->in;
    uint32_t nb = batch_dims(s->comp, in);
    if (!nb || !in->noperands || in->noperands > 8 || s->ops[0].kind != LV_TERM) return false;
    const shape *xs = &s->comp->instrs[in->operands[0]].shape;
    view want = s->ops[0].v;
    eid ch[8];
    bool assumed = false, sharded = false;
    for (uint32_t o = 0; o < in->noperands; o++) {
        const lval *x = &s->ops[o];
        const shape *os = &s->comp->instrs[in->operands[o]].shape;
        bool linear = in->op == OP_FFT && in->noperands == 1 && x->v.red == RED_SUM;
        if (x->kind != LV_TERM || (x->v.partial && !linear) || lf_scale_of(x) != 1 || os->rank < nb || os->rank > VIEW_MAX_RANK ||
            x->v.rank != os->rank || memcmp(os->dims, xs->dims, nb * sizeof *os->dims))
            return false;
        for (uint32_t d = 0; d < os->rank; d++) {
            if (d < nb ? memcmp(&x->v.dims[d], &want.dims[d], sizeof want.dims[d]) : x->v.dims[d].naxes != 0) return false;
            sharded |= x->v.dims[d].naxes != 0;
        }
        assumed |= x->assumed;
        ch[o] = x->cls;
    }
    if (!sharded && !want.partial) return false; /* replicated: the op itself, as any other */
    uint32_t nres = in->shape.dtype == DT_TUPLE ? in->shape.ntuple : 1;
    view rv[8];
    int64_t dims[8][VIEW_MAX_RANK];
    if (nres > 8) return false;
    for (uint32_t j = 0; j < nres; j++) {
        const shape *es = in->shape.dtype == DT_TUPLE ? &in->shape.tuple[j] : &in->shape;
        if (es->dtype == DT_TUPLE || es->rank < nb || es->rank > VIEW_MAX_RANK || memcmp(es->dims, xs->dims, nb * sizeof *es->dims))
            return false;
        rv[j] = view_dup(es->rank);
        memcpy(rv[j].dims, want.dims, nb * sizeof *want.dims);
        rv[j].partial = want.partial;
        rv[j].red = want.red;
        lf_global_dims(c, &rv[j], es, dims[j]);
    }
    if (in->shape.dtype != DT_TUPLE) {
        *out = term(lf_node(c, c->cur, in, ch, in->noperands, dims[0], c->origin), rv[0], assumed);
        return true;
    }
    eid node = lf_node(c, c->cur, in, ch, in->noperands, NULL, c->origin);
    lval t = {.kind = LV_TUPLE, .n = nres};
    t.elems = arena_alloc(c->a, (nres + 1) * sizeof *t.elems);
    for (uint32_t j = 0; j < nres; j++) {
        const shape *es = &in->shape.tuple[j];
        eid e = lf_mk_element(c, node, j, lf_type_of(c, es->dtype, dims[j], es->rank));
        t.elems[j] = term(e, rv[j], assumed);
    }
    *out = t;
    return true;
}

/* A triangular solve (the LAPACK trsm custom call, linalg.h) with its matrix
 * A complete and replicated past the batch dims: op(A)·X = B solves each
 * column of B on its own (X·op(A) = B each row), so B sharded along those
 * columns (rows) — its batch dims as A's, the solved dim whole — gives X
 * sharded alike, the same op over the global operands. The solve is linear
 * in B: B a partial sum gives X the partial sum of the solves. */
static bool lift_solve(lstate *s, lval *out) {
    const hlo_instr *in = s->in;
    if (in->op != OP_CUSTOM_CALL || linalg_routine(instr_str(in, A_CUSTOM_CALL_TARGET)) != LINALG_TRSM ||
        in->noperands != 2 || in->shape.dtype == DT_TUPLE)
        return false;
    const lval *a = &s->ops[0], *b = &s->ops[1];
    const shape *bs = &s->comp->instrs[in->operands[1]].shape;
    uint32_t r = bs->rank, nb = r - 2, solved = nb + (instr_backend_int(in, "side", 'L') == 'L' ? 0 : 1);
    if (a->kind != LV_TERM || b->kind != LV_TERM || r < 2 || r > VIEW_MAX_RANK || a->v.rank != r || b->v.rank != r ||
        a->v.partial || lf_scale_of(a) != 1 || lf_scale_of(b) != 1 || (b->v.partial && b->v.red != RED_SUM) ||
        b->v.dims[solved].naxes)
        return false;
    for (uint32_t d = 0; d < r; d++)
        if (d < nb ? memcmp(&a->v.dims[d], &b->v.dims[d], sizeof a->v.dims[d]) : a->v.dims[d].naxes != 0) return false;
    int64_t dims[VIEW_MAX_RANK];
    lf_global_dims(s->c, &b->v, &in->shape, dims);
    eid ch[2] = {a->cls, b->cls};
    *out = term(lf_node(s->c, s->c->cur, in, ch, 2, dims, s->c->origin), b->v, a->assumed || b->assumed);
    return true;
}

/* The indices block_offset_indices read as x's term stand for x - off(r)
 * only under the blocked reading: when no reading applies, the scatter's
 * indices are the per-device ones again. */
static bool scatter_views(lstate *s, lval *out) {
    lval indices = s->in->noperands == 3 ? s->ops[1] : unknown();
    if (lf_scatter_reading(s, out)) return true;
    if (s->in->noperands == 3) s->ops[1] = indices;
    return false;
}

/* A select whose predicate is known at every element: the operand it
 * picks, joined with the select's own form (lf_select_known). */
static bool known_select(lstate *s, lval *out) {
    const lval *picked = lf_select_known(s);
    if (!picked) return false;
    lf_select_union(s, picked);
    *out = *picked;
    return true;
}

lval lf_lift_instr(lstate *s) {
    lift_ctx *c = s->c;
    const hlo_instr *in = s->in;
    lval *ops = s->ops;
    lval pwv;
    /* select(p, x, x) is x, whatever p is (GSPMD writes such selects). */
    if (in->op == OP_SELECT && in->noperands == 3 && in->operands[1] == in->operands[2]) return ops[1];
    /* A predicate of positions known at every element (a bounds check of
     * positions made from an iota) picks its operand before the index
     * machinery reads it. */
    if (in->op == OP_SELECT && in->noperands == 3 && ops[0].kind == LV_PW && known_select(s, &pwv)) return pwv;
    /* per-device terms: the op on every device, else settled into a view */
    bool devt = false;
    for (uint32_t o = 0; o < in->noperands; o++) devt |= ops[o].kind == LV_DEVT;
    if (devt && lf_unroll_instr(s, &pwv)) return pwv;
    for (uint32_t o = 0; devt && o < in->noperands; o++)
        if (ops[o].kind == LV_DEVT) {
            lf_unsupported(c, s->comp, in, "%s takes values that differ from device to device in a way no view relates "
                           "(each device's own term), which it is not related with yet", in->name);
            return unknown();
        }
    if (lf_iota_block(s, &pwv)) return pwv;
    if (lf_arg_offset(s, &pwv)) return pwv;
    if (lf_owner_select(s, &pwv)) return pwv;
    if (lf_stack_pick(s, &pwv)) return pwv;
    if (lf_topk_gather(s, &pwv)) return pwv;
    if (lf_owner_test(s)) return unknown(); /* related by the select that uses it (lf_owner_select) */
    if (lf_gather_index_values(s, &pwv)) return pwv;
    if (lf_move_mask(s, &pwv)) return pwv;
    for (uint32_t o = 0; o < in->noperands; o++)
        if (ops[o].kind == LV_MASK && ops[o].carry && !lf_settle_mask(c, &s->comp->instrs[in->operands[o]].shape, &ops[o])) {
            lf_unsupported(c, s->comp, in, "%s takes masked rows an all-to-all rearranged before they are a plain view "
                           "again", in->name);
            return unknown();
        }
    /* A table an all-to-all rearranged, read at index values: its plain
     * view first, if it has one (GSPMD's gather from a sorted row). */
    if ((in->op == OP_GATHER || in->op == OP_SCATTER) && in->noperands >= 2 && ops[0].kind == LV_LAYOUT &&
        (ops[1].kind == LV_PW || ops[1].kind == LV_IVEC)) {
        lval t;
        if (lf_layout_to_term(c, &ops[0], &s->comp->instrs[in->operands[0]].shape, true, &t)) ops[0] = t;
    }
    if (lf_pw_instr(s, &pwv)) return pwv;
    if (in->noperands >= 1 && ops[0].kind == LV_LAYOUT && lf_layout_op(s, &pwv)) return pwv;
    /* A layout met by any other op: a plain view of the term reshaped, if
     * there is one (layout ops keep it a layout until the atoms line up with
     * the global dims: a reading that merges them is taken only here). */
    for (uint32_t o = 0; o < in->noperands; o++)
        if (ops[o].kind == LV_LAYOUT &&
            !lf_layout_to_term(c, &ops[o], &s->comp->instrs[in->operands[o]].shape, true, &ops[o])) {
            const lift_layout *L = ops[o].lay;
            lf_unsupported_suspect(c, KIND_WRONG_SHARD_DIM, L->from_comp, L->from, "%s rearranges the blocks of its operand "
                                   "(they are the major part of another dimension), and %s uses the result in a way not "
                                   "related yet", L->from->name, in->name);
            return unknown();
        }
    /* A masked row every device holds is that row: a term before the
     * transfer functions of per-device arrangements (a RoPE table gathered
     * at positions, then split across the head dim's shards). */
    for (uint32_t o = 0; o < in->noperands; o++)
        if (ops[o].kind == LV_MASK) lf_resolved_as_term(c, &ops[o]);
    if (lf_psub_instr(s, &pwv)) return pwv;
    if (lf_win_instr(s, &pwv)) return pwv;
    if (lf_group_instr(s, &pwv)) return pwv;
    /* a share put back into the unit dim the program squeezed, as an output
     * (per-device losses stacked on the devices' axis), where the baseline
     * groups the summed dim: the rows (inside, the partial sum's readings
     * serve: an all-gather of the shares) */
    if (!c->baseline_mode && (in->op == OP_RESHAPE || in->op == OP_BITCAST) && in->noperands == 1 &&
        ops[0].kind == LV_TERM && ops[0].v.partial && unit_added(&s->comp->instrs[in->operands[0]].shape, &in->shape) &&
        is_output(s->comp, (uint32_t)(in - s->comp->instrs)) && shares_in_groups(s) && lf_group_partial(s, &pwv))
        return pwv;
    if (lf_row_instr(s, &pwv)) return pwv;
    if (lf_row_select(s)) return unknown();  /* its sums make the value (lf_row_reduce) */
    for (uint32_t o = 0; o < in->noperands; o++)
        if (ops[o].kind == LV_WIN && !lf_win_rearranged(c, &ops[o])) {
            char where[96];
            snprintf(where, sizeof where, "where %s uses them", in->name);
            lift_win_unsettled(c, s->comp, in, &ops[o], where);
            lf_win_assume(c, &s->comp->instrs[in->operands[o]], &ops[o]);
        }
    /* A scatter whose indices are offset per device by its block (before they
     * are read as plain index values). */
    if (in->op == OP_SCATTER && in->noperands == 3 && (s->ops[1].kind == LV_PW || s->ops[1].kind == LV_IVEC) &&
        scatter_views(s, &pwv))
        return pwv;
    /* Index values met by an op that does not take them: a masked row that every
     * device holds is a term; anything else is not related here. */
    for (uint32_t o = 0; o < in->noperands; o++) {
        if (ops[o].kind == LV_MASK && dbg_on(DBG_LIFT)) {
            strbuf b;
            sb_init(&b);
            eg_print_term(&b, c->g, ops[o].hit, 4);
            fprintf(stderr, "lift: %s%s takes a masked row %s (resolves: %d)\n", c->baseline_mode ? "baseline " : "", in->name,
                    b.s, lf_mask_resolves(c, &ops[o]));
            sb_free(&b);
        }
        /* An unreduced masked row as a partial sum, only where that reading
         * decides (arithmetic, layout, collectives): a select or max of a
         * masked row is not judged here. */
        bool arith = in->op == OP_ADD || in->op == OP_SUBTRACT || in->op == OP_MULTIPLY || in->op == OP_DIVIDE ||
                     in->op == OP_NEGATE || in->op == OP_CONVERT;
        if (ops[o].kind == LV_MASK && !c->baseline_mode && ops[o].cls == EID_NONE && !lf_mask_resolves(c, &ops[o]) &&
            (arith || !graph_op_elementwise(in->op))) {
            lval pv;
            if (lf_mask_as_partial(c, &ops[o], &pv)) ops[o] = pv;
        }
        if ((ops[o].kind == LV_PW || ops[o].kind == LV_MASK || ops[o].kind == LV_IVEC) && !lf_index_as_term(c, &ops[o])) {
            lval t;
            if (uniform_table(s, &t)) return t;
            lf_unsupported(c, s->comp, in, "%s uses index arithmetic (a function of data and the device) in a way not related yet",
                        in->name);
            return unknown();
        }
    }
    /* Device-dependent values first: partition-id and what is computed from it. */
    bool any_dev = in->op == OP_PARTITION_ID || in->op == OP_REPLICA_ID, all_dev_or_const = true;
    for (uint32_t o = 0; o < in->noperands; o++) any_dev |= ops[o].kind == LV_DEV;
    /* An integer scalar known on every device (a counted loop's counter,
     * walked iteration by iteration) beside device values: one of them. */
    lval dops_stack[4], *dops = any_dev && in->noperands <= 4 ? dops_stack : NULL;
    for (uint32_t o = 0; o < in->noperands; o++) {
        const interp_val *kv = dops && ops[o].kind == LV_TERM && !ops[o].v.partial && ops[o].v.rank == 0 &&
                                       !ops[o].assumed && lf_scale_of(&ops[o]) == 1 && ops[o].cls != EID_NONE
                                   ? lf_kval(c, ops[o].cls)
                                   : NULL;
        if (dops) dops[o] = ops[o];
        if (kv && kv->n == 1 && kv->i && !kv->f) {
            dops[o] = (lval){.kind = LV_DEV, .count = 1, .konst = ops[o].konst};
            dops[o].dev = arena_alloc(c->a, (size_t)c->ndev * sizeof *dops[o].dev);
            for (int64_t d = 0; d < c->ndev; d++) dops[o].dev[d] = (double)kv->i[0];
        }
        if ((dops ? dops[o] : ops[o]).kind != LV_DEV) all_dev_or_const = false;
    }
    if (any_dev && all_dev_or_const) {
        lval r;
        if (lf_dev_instr(c, s->comp, in, dops ? dops : ops, &r)) return r;
    }
    switch (in->op) {
    case OP_BROADCAST:
        /* A device value the same everywhere, too big to tabulate: a constant. */
        lf_uniform_dev_as_term(s, 0);
        return lf_lift_broadcast(s);
    case OP_TRANSPOSE: return lf_lift_transpose(s);
    case OP_REVERSE: return lf_lift_reverse(s);
    case OP_RESHAPE: case OP_BITCAST: return lf_lift_reshape(s);
    case OP_DOT: return lf_lift_dot(s);
    case OP_CONVOLUTION: return lf_lift_convolution(s);
    case OP_REDUCE: return lf_lift_reduce(s);
    case OP_ALL_REDUCE: return lf_lift_all_reduce(s);
    case OP_ALL_GATHER: return lf_lift_all_gather(s);
    case OP_ALL_TO_ALL: return lf_lift_all_to_all(s);
    case OP_REDUCE_SCATTER: return lf_lift_reduce_scatter(s);
    case OP_DYNAMIC_SLICE:
        /* a table the same on every device (a scan's constant schedule)
         * sliced at a position that is no device value: that constant */
        lf_uniform_dev_as_term(s, 0);
        return lf_lift_dynamic_slice(s);
    case OP_DYNAMIC_UPDATE_SLICE: {
        lval r;
        if (lf_placed_block(s, &r)) return r;
        if (lf_win_update(s, &r)) return r;
        r = lf_lift_dynamic_update_slice(s);
        if (r.kind != LV_UNKNOWN) return r;
        break;
    }
    case OP_SLICE: return lf_lift_slice(s);
    case OP_CONCATENATE: return lf_lift_concatenate(s);
    case OP_PAD: {
        lval r;
        if (lf_lift_pad(s, &r)) return r;
        break;
    }
    case OP_FFT: case OP_CHOLESKY: case OP_TRIANGULAR_SOLVE: case OP_CUSTOM_CALL: {
        lval r;
        if (lift_solve(s, &r)) return r;
        if (lift_batched(s, &r)) return r;
        break;
    }
    case OP_TOPK: return lift_topk(s);
    case OP_SORT: return lift_sort(s);
    case OP_GATHER: {
        lval g;
        if (lf_gather_views(s, &g)) return g;
        break;
    }
    case OP_SCATTER: {
        lval g;
        if (scatter_views(s, &g)) return g;
        break;
    }
    default: break;
    }
    /* A bitcast-convert between types of one width keeps the dims: it works
     * element by element (random bits made floats in [1, 2)). */
    if (in->op == OP_BITCAST_CONVERT && in->noperands == 1 && ops[0].kind == LV_TERM &&
        s->comp->instrs[in->operands[0]].shape.rank == in->shape.rank &&
        (!in->shape.rank ||  /* (scalars: no dims to compare, possibly NULL) */
         !memcmp(s->comp->instrs[in->operands[0]].shape.dims, in->shape.dims, in->shape.rank * sizeof *in->shape.dims)))
        return lift_elementwise(s);
    /* An activation written as a custom call (silu, gelu_tanh) works
     * element by element, as the op it names does. */
    if (in->op == OP_CUSTOM_CALL && in->noperands == 1 && interp_activation(instr_str(in, A_CUSTOM_CALL_TARGET)) &&
        ops[0].kind == LV_TERM && s->comp->instrs[in->operands[0]].shape.rank == in->shape.rank &&
        (!in->shape.rank || !memcmp(s->comp->instrs[in->operands[0]].shape.dims, in->shape.dims,
                                    in->shape.rank * sizeof *in->shape.dims)))
        return lift_elementwise(s);
    if (graph_op_elementwise(in->op)) {
        lval once;
        if (known_select(s, &once)) return once;
        if (lf_select_padding_zeros(s, &once)) return once;
        if (lf_picked_on_some_devices(s, &once)) return once;
        /* Device operands that agree everywhere act as constants. */
        for (uint32_t o = 0; o < in->noperands; o++)
            if (ops[o].kind == LV_DEV) {
                if (!lf_dev_uniform(c, &ops[o])) {
                    /* Offsets that differ per component of an index vector
                     * are read by the scatters that take them (which say
                     * so when they cannot). */
                    if (in->op == OP_SUBTRACT && lf_only_scatter_indices(s)) return unknown();
                    lf_unsupported(c, s->comp, in, "%s mixes a device-dependent value (from partition-id) with data; "
                                                "only offsets and masks of known forms are understood", in->name);
                    return unknown();
                }
                lf_uniform_dev_as_term(s, o);
            }
        return lift_elementwise(s);
    }
    /* Any other op on replicated operands is the same op in the baseline
     * (device values the same everywhere, constant indices, are constants). */
    bool all_dup = true, assumed = false;
    for (uint32_t o = 0; o < in->noperands; o++) lf_uniform_dev_as_term(s, o);
    for (uint32_t o = 0; o < in->noperands; o++) {
        all_dup &= ops[o].kind == LV_TERM && view_is_dup(&ops[o].v);
        if (ops[o].kind == LV_TERM) assumed |= ops[o].assumed;
    }
    /* A tuple-shaped op (batch-norm-training, PyTorch/XLA's layer norm) is a
     * term of tuple type; its elements are get-tuple-elements of it, replicated
     * (as the baseline reads them). */
    if (all_dup && !hlo_op_is_collective(in->op) && in->op != OP_PARTITION_ID && in->op != OP_REPLICA_ID &&
        in->shape.rank <= VIEW_MAX_RANK) {
        eid stack[64], *ch = in->noperands <= 64 ? stack : arena_alloc(c->a, in->noperands * sizeof *ch);
        for (uint32_t o = 0; o < in->noperands; o++) ch[o] = ops[o].cls;
        return term(lf_node(c, c->cur, in, ch, in->noperands, in->shape.dims, c->origin), view_dup(in->shape.rank), assumed);
    }
    lf_unsupported(c, s->comp, in, "no transfer function relates %s (%s) with these operand views", in->name, in->opname);
    return unknown();
}

/* ---- the walk ---- */

/* The op itself over its operands' terms, replicated: device values that agree
 * everywhere become constants, anything else a fresh variable. */
static lval generic(lstate *s) {
    lift_ctx *c = s->c;
    const hlo_instr *in = s->in;
    eid stack[16], *ch = in->noperands <= 16 ? stack : arena_alloc(c->a, in->noperands * sizeof *ch);
    bool assumed = false;
    for (uint32_t o = 0; o < in->noperands; o++) {
        const lval *x = &s->ops[o];
        const hlo_instr *xi = &s->comp->instrs[in->operands[o]];
        if (x->kind == LV_TERM) {
            ch[o] = x->cls;
            assumed |= x->assumed;
        } else if (x->kind == LV_DEV && lf_dev_uniform(c, x)) {
            ch[o] = lf_dev_constant(c, xi, x);
        } else {
            ch[o] = lf_fresh_var(c, xi->shape.dtype, xi->shape.dims, xi->shape.rank);
            assumed = true;
        }
    }
    return term(lf_node(c, c->cur, in, ch, in->noperands, in->shape.dims, c->origin), view_dup(in->shape.rank), assumed);
}

/* An instruction left unknown without a word although every operand is
 * related: remembered (the first), so that when an output is left unrelated
 * and nothing else says why, check names it. Not a reason by itself: what no
 * output depends on decides nothing. */
static void unrelated(lstate *s) {
    lift_ctx *c = s->c;
    if (c->silent) return;
    for (uint32_t o = 0; o < s->in->noperands; o++)
        if (s->ops[o].kind == LV_UNKNOWN) return;  /* said where that operand was lifted */
    strbuf why;
    sb_init(&why);
    sb_printf(&why, "no transfer function relates %s (%s) with these operand views (", s->in->name, s->in->opname);
    lf_describe_operands(&why, c, s->ops, s->in->noperands);
    sb_puts(&why, ")");
    c->silent = s->in;
    c->silent_comp = s->comp;
    c->silent_why = arena_strdup(c->a, why.s);
    sb_free(&why);
}

/* Whether the scale plan took a factor out of a constant operand of s
 * (lval.respread) and the op's value v is no baseline term. */
static bool respread_missed(const lstate *s, const lval *v) {
    bool any = false;
    for (uint32_t o = 0; o < s->in->noperands; o++) any |= s->ops[o].respread;
    return any && !(v->kind == LV_TERM && v->cls != EID_NONE && (eg_class_origin(s->c->g, v->cls) & EG_BASELINE));
}

/* SCALIFY_DEBUG base=, term=: the two terms named (baseline, distributed),
 * kept for lift_debug_rediff after saturation. */
static _Thread_local eid dbg_base = EID_NONE, dbg_term = EID_NONE;

void lf_debug_diff(lift_ctx *c, eid x, eid y) {
    for (int depth = 0; depth < 64 && eg_find(c->g, x) != eg_find(c->g, y); depth++) {
        eid nx = eg_class_first(c->g, x), ny = eg_class_first(c->g, y);
        uint32_t kx, ky;
        const eid *cx = eg_node_children(c->g, nx, &kx), *cy = eg_node_children(c->g, ny, &ky);
        uint32_t ax, ay;
        eg_attr_words(c->g, eg_node_attr(c->g, nx), &ax);
        eg_attr_words(c->g, eg_node_attr(c->g, ny), &ay);
        fprintf(stderr, "diff depth %d: op %d/%d attr %u/%u (len %u/%u) type %u/%u kids %u/%u\n", depth,
                eg_node_op(c->g, nx), eg_node_op(c->g, ny), eg_node_attr(c->g, nx), eg_node_attr(c->g, ny), ax, ay,
                eg_class_type(c->g, x), eg_class_type(c->g, y), kx, ky);
        uint32_t k = 0;
        while (k < kx && k < ky && eg_find(c->g, cx[k]) == eg_find(c->g, cy[k])) k++;
        /* where they part (ops, arity, or attributes and types over the same children): both terms */
        if (kx != ky || eg_node_op(c->g, nx) != eg_node_op(c->g, ny) || k == kx) {
            strbuf b;
            sb_init(&b);
            eg_print_term(&b, c->g, x, dbg_depth());
            sb_puts(&b, "\n   distributed: ");
            eg_print_term(&b, c->g, y, dbg_depth());
            fprintf(stderr, "   baseline:    %s\n", b.s);
            sb_free(&b);
            /* constants: their first values */
            const interp_val *vx = lf_kval(c, x), *vy = lf_kval(c, y);
            for (int side = 0; side < 2; side++) {
                const interp_val *v = side ? vy : vx;
                if (!v) continue;
                fprintf(stderr, "   %s values:", side ? "distributed" : "baseline");
                for (int64_t e = 0; e < v->n && e < 4; e++) fprintf(stderr, " %.9g", interp_val_get(v, e));
                fprintf(stderr, "%s\n", v->n > 4 ? " ..." : "");
            }
            break;
        }
        x = cx[k];
        y = cy[k];
    }
}

void lift_debug_rediff(lift_ctx *c) {
    if (dbg_base == EID_NONE || dbg_term == EID_NONE) return;
    fprintf(stderr, "after saturation:\n");
    lf_debug_diff(c, dbg_base, dbg_term);
}

/* SCALIFY_DEBUG base=, term=, views: the value v just lifted for in,
 * described on stderr (HACKING.md lists them). */
static void debug_value(lift_ctx *c, const hlo_instr *in, const lval *v) {
    const char *dbgb = dbg_base_name(), *dbg = dbg_term_name();
    bool dbgv = dbg_on(DBG_VIEWS);
    if (dbgb && c->baseline_mode && strcmp(dbgb, in->name) == 0 && v->kind == LV_TERM) dbg_base = v->cls;
    if (dbg && !c->baseline_mode && dbg_base != EID_NONE && strcmp(dbg, in->name) == 0 && (v->kind == LV_TERM || v->kind == LV_ROW)) {
        dbg_term = v->cls;
        lf_debug_diff(c, dbg_base, v->cls);
    }
    /* term=NAME@D: device D's term of per-device terms */
    const char *at = dbg && !c->baseline_mode && dbg_base != EID_NONE && v->kind == LV_DEVT ? strchr(dbg, '@') : NULL;
    if (at && (size_t)(at - dbg) == strlen(in->name) && !strncmp(dbg, in->name, (size_t)(at - dbg)) &&
        atoi(at + 1) >= 0 && (uint32_t)atoi(at + 1) < v->n) {
        dbg_term = v->elems[atoi(at + 1)].cls;
        lf_debug_diff(c, dbg_base, dbg_term);
    }
    if (dbgv && !c->baseline_mode) {
        /* Every distributed value's kind, view and term (lval kinds as in lift.h). */
        strbuf b;
        sb_init(&b);
        if (v->kind == LV_TERM || (v->kind == LV_WIN && v->cls != EID_NONE) || v->kind == LV_ROW ||
            (lf_is_index(v) && v->cls != EID_NONE))
            view_print(&b, &v->v, c->mesh), sb_puts(&b, " "), eg_print_term(&b, c->g, v->cls, 3);
        else if (lf_is_index(v))
            view_print(&b, &v->v, c->mesh), sb_puts(&b, " (no plain term)");
        if (v->kind == LV_ROW) sb_printf(&b, " (slices along %u)", v->vdim);
        if ((v->kind == LV_TERM || v->kind == LV_WIN) && lf_scale_of(v) != 1) sb_printf(&b, " (times %g)", lf_scale_of(v));
        if (v->ambiguous) sb_puts(&b, " (one reading of several)");
        if (v->partial_unsure) sb_puts(&b, " (partial in one reading)");
        if (v->merged_unit) sb_puts(&b, " (a unit dim merged in one reading)");
        for (int64_t d = 0; v->kind == LV_PSUB && d < c->ndev; d++) sb_printf(&b, "%s%llx", d ? " " : "shares ", (unsigned long long)v->psub->sub[d]);
        fprintf(stderr, "view %s kind %d: %s\n", in->name, v->kind, b.s ? b.s : "");
        sb_free(&b);
    }
    if (dbg && strcmp(dbg, in->name) == 0 && (v->kind == LV_TERM || v->kind == LV_ROW)) {
        strbuf b;
        sb_init(&b);
        eg_print_term(&b, c->g, v->cls, 12);
        fprintf(stderr, "term %s%s = %s\n", c->baseline_mode ? "(baseline) " : "", in->name, b.s);
        sb_free(&b);
    }
}

/* Index values (LV_PW, LV_MASK, LV_IVEC) keep their plain term beside the
 * analysis when it means the same on every device (always on the baseline),
 * for ops that do not take index values (a collective that moves them keeps
 * theirs): v's, just lifted for s. */
/* A replicated constant of x's rank (the same value read under any view). */
static bool konst_dup(const lval *x, const view *want) {
    return x->kind == LV_TERM && x->konst && view_is_dup(&x->v) && x->v.rank == want->rank;
}

static void index_plain_term(lstate *s, lval *v) {
    lift_ctx *c = s->c;
    const hlo_comp *comp = s->comp;
    const hlo_instr *in = s->in;
    lval *ops = s->ops;
    bool indep = true;
    for (uint32_t o = 0; o < in->noperands; o++) {
        if (lf_is_index(&ops[o])) indep &= ops[o].cls != EID_NONE && view_is_dup(&ops[o].v);
        else if (ops[o].kind == LV_DEV) indep &= lf_dev_uniform(c, &ops[o]);
        else indep &= ops[o].kind == LV_TERM && view_is_dup(&ops[o].v);
    }
    /* (a gather keeps the plain term pw_gather gave it, if any: every row
     * on every device) */
    if (in->op != OP_GATHER || v->kind != LV_MASK) v->cls = EID_NONE;
    /* Elementwise index arithmetic on sharded data (token ids wrapped into
     * range, a padding mask) is the same function on every device: its
     * plain term is the op over the operands' terms, under their view. */
    /* So is a concatenate of such values (an index vector). */
    bool shaping = in->op == OP_RESHAPE || in->op == OP_BITCAST || in->op == OP_BROADCAST || in->op == OP_REDUCE;
    bool plain = !indep && !c->baseline_mode && (graph_op_elementwise(in->op) || shaping || in->op == OP_CONCATENATE) &&
                 in->noperands <= 8;
    for (uint32_t o = 0; o < in->noperands && plain; o++) {
        const lval *x = &ops[o];
        if (lf_is_index(x)) plain = x->cls != EID_NONE;
        else if (x->kind == LV_DEV) plain = lf_dev_uniform(c, x);
        else plain = x->kind == LV_TERM;
        if (plain && x->kind != LV_DEV && !shaping)
            plain = !x->v.partial && (x->v.rank == 0 || lf_same_sharding(&x->v, &v->v) || konst_dup(x, &v->v) ||
                                      (lf_is_index(x) && x->v.rank == v->v.rank));
    }
    if (plain) {
        lval saved[8];
        memcpy(saved, ops, in->noperands * sizeof *ops);
        for (uint32_t o = 0; o < in->noperands && plain; o++) {
            if (lf_is_index(&ops[o])) {
                /* an index operand's plain term under another view re-read
                 * under v's (rows at positions broadcast over the batch) */
                ops[o] = term(ops[o].cls, ops[o].v, false);
                if (!shaping && ops[o].v.rank && !lf_same_sharding(&ops[o].v, &v->v) && !konst_dup(&ops[o], &v->v))
                    plain = lf_review_operand(s, o, &v->v) && ops[o].kind == LV_TERM && !ops[o].assumed &&
                            !ops[o].v.partial && lf_same_sharding(&ops[o].v, &v->v);
            } else if (!shaping && ops[o].kind == LV_TERM && ops[o].v.rank && !lf_same_sharding(&ops[o].v, &v->v))
                plain = lf_konst_review(s, o, &v->v);
            else if (ops[o].kind == LV_DEV) {
                /* the same on every device: a constant, read under the
                 * view when it is constant along the dims it shards */
                const hlo_instr *xi = &comp->instrs[in->operands[o]];
                if (view_is_dup(&v->v) || xi->shape.rank == 0) {
                    ops[o] = term(lf_dev_constant(c, xi, &ops[o]), view_dup(xi->shape.rank), false);
                } else if (lf_dev_splat(&ops[o], c->ndev)) {
                    ops[o] = lf_splat_term(c, xi, &ops[o], &v->v);
                } else {
                    ops[o] = shaping ? unknown() : lf_tiled_term(c, xi, &ops[o], &v->v);
                    plain = ops[o].kind == LV_TERM;
                }
            }
        }
        lval t = !plain                 ? unknown()
                 : in->op == OP_BROADCAST ? lf_lift_broadcast(s)
                 : in->op == OP_REDUCE  ? lf_lift_reduce(s)
                 : shaping              ? lf_lift_reshape(s)
                 : in->op == OP_CONCATENATE ? lf_lift_concatenate(s)
                                        : lift_elementwise(s);
        if (t.kind == LV_TERM && !t.assumed && lf_same_sharding(&t.v, &v->v)) v->cls = t.cls;
        memcpy(ops, saved, in->noperands * sizeof *ops);
    }
    /* Only where every index operand has a plain term (a baseline value may
     * lack one: the op stays without a plain term then). */
    bool terms = true;
    for (uint32_t o = 0; o < in->noperands; o++) terms &= !lf_is_index(&ops[o]) || ops[o].cls != EID_NONE;
    if ((indep || c->baseline_mode) && terms) {
        lval saved_stack[16], *saved = in->noperands <= 16 ? saved_stack : arena_alloc(c->a, in->noperands * sizeof *saved);
        memcpy(saved, ops, in->noperands * sizeof *ops);
        for (uint32_t o = 0; o < in->noperands; o++)
            if (lf_is_index(&ops[o]))
                ops[o] = term(ops[o].cls, view_dup(comp->instrs[in->operands[o]].shape.rank), false);
        v->cls = generic(s).cls;
        memcpy(ops, saved, in->noperands * sizeof *ops);
    }
    lf_note_baseline_mask(c, v);
}

/* A collective of index values (an index vector gathered from the devices
 * that hold its rows) keeps a plain term: the collective of the operand's
 * plain term, where that lifts under the same view. Lifted quietly: a
 * reading that does not apply is no reason and no finding. */
static void collective_plain_term(lstate *s, lval *v) {
    lift_ctx *c = s->c;
    if (s->in->noperands != 1 || !lf_is_index(&s->ops[0]) || s->ops[0].cls == EID_NONE || c->baseline_mode) return;
    lval saved = s->ops[0];
    s->ops[0] = term(saved.cls, saved.v, false);
    bool quiet = c->quiet, amb = c->ambiguous_now, konst = c->konst_operand_now, unsure = c->partial_unsure_now,
         guessed = c->guessed_now;
    c->quiet = true;
    lval t = lf_lift_instr(s);
    c->quiet = quiet;
    c->ambiguous_now = amb, c->konst_operand_now = konst, c->partial_unsure_now = unsure, c->guessed_now = guessed;
    s->ops[0] = saved;
    if (t.kind == LV_TERM && !t.assumed && !t.v.partial && lf_same_sharding(&t.v, &v->v)) v->cls = t.cls;
}

/* Whether tuple i of comp feeds only optimization barriers whose results
 * only get-tuple-elements read (jax.checkpoint's residuals): an identity the
 * elements pass through, so they keep their constant factors, as the other
 * program's do. Computed once per computation of either module. */
static bool barrier_only(lift_ctx *c, const hlo_comp *comp, uint32_t i) {
    const hlo_module *m = comp >= c->base->comps && comp < c->base->comps + c->base->ncomps ? c->base : c->dist;
    int side = m == c->base ? 0 : 1;
    uint32_t ci = (uint32_t)(comp - m->comps);
    if (!c->barrier_only[side]) {
        c->barrier_only[side] = arena_alloc(c->a, (m->ncomps + 1) * sizeof *c->barrier_only[side]);
        memset(c->barrier_only[side], 0, (m->ncomps + 1) * sizeof *c->barrier_only[side]);
    }
    if (!c->barrier_only[side][ci]) {
        uint8_t *used = arena_alloc(c->a, comp->ninstrs + 1), *ok = arena_alloc(c->a, comp->ninstrs + 1);
        memset(used, 0, comp->ninstrs + 1);
        memset(ok, 0, comp->ninstrs + 1);
        /* bit 1: a user other than a barrier; bit 2: a barrier user; for barriers, bit 1: a user other than a gte */
        for (uint32_t k = 0; k < comp->ninstrs; k++) {
            const hlo_instr *u = &comp->instrs[k];
            for (uint32_t o = 0; o < u->noperands; o++) {
                uint32_t x = u->operands[o];
                if (comp->instrs[x].op == OP_OPT_BARRIER) used[x] |= u->op == OP_GET_TUPLE_ELEMENT ? 0 : 1;
                else used[x] |= u->op == OP_OPT_BARRIER ? 2 : 1;
            }
        }
        for (uint32_t k = 0; k < comp->ninstrs; k++) {
            const hlo_instr *u = &comp->instrs[k];
            if (u->op != OP_OPT_BARRIER || u->noperands != 1 || used[k] || k == comp->root) continue;
            uint32_t t = u->operands[0];
            if (comp->instrs[t].op == OP_TUPLE && used[t] == 2 && t != comp->root) ok[t] = 1;
        }
        /* a tuple is kept only when every barrier reading it is clean */
        for (uint32_t k = 0; k < comp->ninstrs; k++) {
            const hlo_instr *u = &comp->instrs[k];
            if (u->op == OP_OPT_BARRIER && u->noperands == 1 && (used[k] || k == comp->root)) ok[u->operands[0]] = 0;
        }
        c->barrier_only[side][ci] = ok;
    }
    return c->barrier_only[side][ci][i];
}

/* Lifts instruction i of comp into vals[i]. */
static void lift_one(lift_ctx *c, const hlo_comp *comp, uint32_t i, lval *vals, const lval *args, const view *inputs,
                     uint32_t ninputs);

/* A loop walked iteration by iteration whose carry holds per-device terms or
 * a stacked value's blocks (a pipeline's schedule): its partial carries (an
 * owner's value, zeros elsewhere) as per-device terms too, read up the
 * instructions that made them, so the stages' handoffs stay exact. */
static void devt_carries(lift_ctx *c, const hlo_comp *comp, const hlo_instr *in, lval *vals) {
    lval *t = in->noperands == 1 ? &vals[in->operands[0]] : NULL;
    const hlo_instr *ti = t ? &comp->instrs[in->operands[0]] : NULL;
    if (c->baseline_mode || !t || t->kind != LV_TUPLE || ti->op != OP_TUPLE || ti->noperands != t->n) return;
    bool stages = false;
    for (uint32_t k = 0; k < t->n && !stages; k++) stages = t->elems[k].kind == LV_DEVT || lf_unroll_stacked(c, &t->elems[k]);
    for (uint32_t k = 0; stages && k < t->n; k++) {
        lval dv;
        if (t->elems[k].kind == LV_TERM && t->elems[k].v.partial && lf_unroll_value(c, comp, vals, ti->operands[k], &dv))
            t->elems[k] = dv;
    }
}

/* Per-device terms (x, or a tuple's elements) entering a loop or a
 * conditional, which are not walked per device: unrelated, and why. */
static void devt_refused(lift_ctx *c, const hlo_comp *comp, const hlo_instr *in, lval *x) {
    if (x->kind == LV_TUPLE) {
        for (uint32_t k = 0; k < x->n; k++) devt_refused(c, comp, in, &x->elems[k]);
    } else if (x->kind == LV_DEVT) {
        *x = unknown();
        lf_unsupported(c, comp, in, "%s takes values that differ from device to device in a way no view relates (each "
                       "device's own term), which loops and conditionals are not related with yet", in->name);
    }
}

/* A baseline value computed from constants whose class holds no values
 * yet (built by a reshape or a slice that did not fold: a rotary table
 * gathered at constant positions): its values, read off its term, and the
 * literal of them joined with it, as a folded constant is. */
static void known_values(lift_ctx *c, const lval *v) {
    if (v->kind != LV_TERM || v->cls == EID_NONE || lf_scale_of(v) != 1 || lf_kval(c, v->cls)) return;
    interp_val *kv = lf_class_values(c, v->cls);
    if (!kv) return;
    eid lit = lf_const_term(c, interp_val_ref(kv), c->origin);
    if (eg_class_type(c->g, lit) == eg_class_type(c->g, v->cls) && eg_find(c->g, lit) != eg_find(c->g, v->cls))
        eg_union(c->g, v->cls, lit, NULL);
    lf_kval_set(c, v->cls, kv);
}

void lf_lift_one(lift_ctx *c, const hlo_comp *comp, uint32_t i, lval *vals, const lval *args, const view *inputs,
                 uint32_t ninputs) {
    /* a loop body's value that only decides when the loop stops is judged
     * as the condition's are */
    bool test = comp == c->test_comp && c->test_only && c->test_only[i];
    c->in_loop_cond += test;
    lift_one(c, comp, i, vals, args, inputs, ninputs);
    c->in_loop_cond -= test;
}

static void lift_one(lift_ctx *c, const hlo_comp *comp, uint32_t i, lval *vals, const lval *args, const view *inputs,
                     uint32_t ninputs) {
    const hlo_module *m = c->cur;
    const hlo_instr *in = &comp->instrs[i];
    lval *v = &vals[i];
    lf_account(c, in);
    if (in->op == OP_PARAMETER) {
        int64_t k = instr_int(in, A_PARAMETER_NUMBER, 0);
        if (args) {
            *v = args[k];
        } else if (k < ninputs) {
            /* Parameter k of either side is the baseline's parameter k. */
            const hlo_comp *be = graph_entry(c->base);
            const hlo_instr *bp = k < be->nparams ? &be->instrs[be->params[k]] : NULL;
            if (!bp) {
                *v = unknown();
                return;
            }
            uint32_t t = lf_type_of(c, bp->shape.dtype, bp->shape.dims, bp->shape.rank);
            uint8_t origin = c->baseline_mode ? EG_BASELINE : EG_DISTRIBUTED;
            /* No inputs: every parameter replicated (the baseline's walk). */
            view in_view = inputs ? inputs[k] : view_dup(bp->shape.rank);
            *v = term(eg_add(c->g, EG_OP_PARAM, eg_attr(c->g, &k, 1), t, NULL, 0, origin), in_view, false);
            if (!c->baseline_mode && v->v.partial) v->pid = ++c->npids;
        } else {
            *v = unknown();
        }
        return;
    }
    /* (a loop the baseline does not have is walked iteration by iteration:
     * lift_loop.c takes per-device terms there) */
    if (in->op == OP_CONDITIONAL || (in->op == OP_WHILE && c->next_loop < c->nloops))
        for (uint32_t o = 0; o < in->noperands; o++) devt_refused(c, comp, in, &vals[in->operands[o]]);
    else if (in->op == OP_WHILE) devt_carries(c, comp, in, vals);
    if (in->op == OP_WHILE) {
        for (uint32_t o = 0; o < in->noperands; o++) lf_unscale(c, &vals[in->operands[o]]);
        /* A proved difference (lift_scale.c) is not carried through a loop. */
        for (uint32_t o = 0; o < in->noperands; o++) lf_scale_forget(&vals[in->operands[o]]);
        *v = c->baseline_mode ? lf_loop_baseline(c, comp, in, vals) : lf_loop_distributed(c, comp, in, vals);
        if (c->baseline_mode && v->kind == LV_UNKNOWN && in->noperands == 1) {
            lval op = vals[in->operands[0]];
            lstate st = {c, comp, in, &op, vals, NULL};
            *v = generic(&st);
        }
        return;
    }
    if (in->op == OP_CALL) {
        const hlo_attr *ta = instr_attr(in, A_TO_APPLY);
        lval *cargs = arena_alloc(c->a, (in->noperands + 1) * sizeof *cargs);
        for (uint32_t o = 0; o < in->noperands; o++) cargs[o] = vals[in->operands[o]];
        c->depth++;
        const hlo_comp *outer = c->call_comp;
        c->call_comp = &m->comps[ta->v.ints[0]];
        lf_call_frame f = {comp, c->call_comp, in, c->frames};
        c->frames = &f;
        *v = lf_lift_comp(c, c->call_comp, cargs, NULL, 0);
        c->frames = f.up;
        c->call_comp = outer;
        c->depth--;
        if (c->baseline_mode && v->kind == LV_TERM) lf_record_scope(c, in, lf_scale_of(v) == 1 ? v->cls : EID_NONE);
        return;
    }
    if (in->op == OP_CONDITIONAL) {
        *v = lf_lift_conditional(c, comp, in, vals);
        if (c->baseline_mode && v->kind == LV_UNKNOWN) {
            lval *ops = arena_alloc(c->a, in->noperands * sizeof *ops);
            for (uint32_t o = 0; o < in->noperands; o++) ops[o] = vals[in->operands[o]];
            lstate st = {c, comp, in, ops, vals, NULL};
            *v = generic(&st);
        }
        if (c->baseline_mode && v->kind == LV_TERM) lf_record_scope(c, in, v->cls);
        if (!c->baseline_mode && v->kind == LV_TERM && v->v.partial) v->pid = ++c->npids; /* values of its own */
        debug_value(c, in, v);
        return;
    }
    if (in->op == OP_COPY || in->op == OP_OPT_BARRIER || instr_is_identity_custom_call(in)) {
        *v = vals[in->operands[0]];
        return;
    }
    if (in->op == OP_TUPLE) {
        v->kind = LV_TUPLE;
        v->n = in->noperands;
        v->elems = arena_alloc(c->a, (v->n + 1) * sizeof *v->elems);
        /* Tuples hold plain terms: loops, outputs and the memo read them. A
         * call's result keeps its factors for the get-tuple-elements that
         * read it (a jit(_where) returning (value, mask) is no place where
         * the flat distributed program would put them back). */
        bool keep = (comp == c->call_comp && i == comp->root) || barrier_only(c, comp, i);
        for (uint32_t o = 0; o < in->noperands; o++) {
            v->elems[o] = vals[in->operands[o]];
            lf_group_settle(c, &comp->instrs[in->operands[o]].shape, &v->elems[o]);
            if (!keep) lf_unscale(c, &v->elems[o]);
            if ((v->elems[o].kind == LV_PW || v->elems[o].kind == LV_IVEC) && v->elems[o].cls != EID_NONE)
                lf_index_as_term(c, &v->elems[o]);
        }
        return;
    }
    if (in->op == OP_GET_TUPLE_ELEMENT) {
        const lval *t = &vals[in->operands[0]];
        int64_t k = instr_int(in, A_INDEX, 0);
        *v = t->kind == LV_TUPLE && k < t->n ? t->elems[k] : unknown();
        if (t->kind == LV_TERM && view_is_dup(&t->v) && in->shape.dtype != DT_TUPLE && in->shape.rank <= VIEW_MAX_RANK)
            *v = term(lf_node(c, m, in, &t->cls, 1, in->shape.dims, c->origin), view_dup(in->shape.rank), t->assumed);
        return;
    }
    if (in->op == OP_CONSTANT) {
        /* Constants are both: a baseline-comparable term and concrete values. */
        int64_t n = shape_elements(&in->shape);
        if (n >= 0 && n <= 64 && (dtype_is_int(in->shape.dtype) || in->shape.dtype == DT_PRED)) {
            *v = lf_dev_from_literal(c, in);
            v->konst = true;
            if (v->kind == LV_DEV) return;
        }
        *v = term(lf_node(c, m, in, NULL, 0, in->shape.dims, c->origin), view_dup(in->shape.rank), false);
        v->konst = true;
        return;
    }
    lval ops_stack[8], *ops = in->noperands <= 8 ? ops_stack : arena_alloc(c->a, in->noperands * sizeof *ops);
    for (uint32_t o = 0; o < in->noperands; o++) ops[o] = vals[in->operands[o]];
    lstate s = {c, comp, in, ops, vals, NULL};
    bool amb = false, konst_op = false;
    for (uint32_t o = 0; o < in->noperands; o++) amb |= ops[o].ambiguous, konst_op |= ops[o].konst;
    c->ambiguous_now = amb;
    c->partial_unsure_now = c->guessed_now = false;
    for (uint32_t o = 0; o < in->noperands; o++)
        c->partial_unsure_now |= ops[o].partial_unsure, c->guessed_now |= ops[o].guessed;
    c->konst_operand_now = konst_op;
    double factor = 1;
    const lval *same = lf_identity_operand(&s);
    if (same) {
        *v = *same;
    } else if (!lf_scale_take(&s, v)) {
        lf_copies_into_partial_sums(&s);
        /* operands kept for a relift only where the plan may respread a
         * constant (a factor on some operand): not on the hot path */
        lval before_stack[8], *before = NULL;
        for (uint32_t o = 0; o < in->noperands && !before; o++)
            if (lf_scale_of(&ops[o]) != 1)
                before = in->noperands <= 8 ? before_stack : arena_alloc(c->a, in->noperands * sizeof *ops);
        if (before) memcpy(before, ops, in->noperands * sizeof *ops);
        factor = lf_scale_plan(&s);
        uint32_t nu = c->nunsupported, nf = c->nfindings;
        unsupported_mark mark = mark_unsupported(c);
        /* the operands as planned, kept for per-device terms where the op
         * takes them (transfer functions may change their copies) */
        lval planned_stack[8], *planned = NULL;
        if (lf_unroll_wanted(&s)) {
            planned = in->noperands <= 8 ? planned_stack : arena_alloc(c->a, in->noperands * sizeof *ops);
            memcpy(planned, ops, in->noperands * sizeof *ops);
        }
        *v = lf_lift_instr(&s);
        /* no view relates it: each device's term, where there are few devices */
        lval dv;
        lstate ps = {c, comp, in, planned, vals, NULL};
        if (planned && c->nunsupported > nu && c->nfindings == nf && !c->refine_factor && !c->reshape_defaulted &&
            lf_unroll_instr(&ps, &dv)) {
            back_to_mark(c, &mark);
            *v = dv;
            before = NULL;
        }
        if (before && respread_missed(&s, v)) {
            /* The constant taken as f·(k/f) made no baseline value: the sum
             * as written, factors put back. */
            memcpy(ops, before, in->noperands * sizeof *ops);
            for (uint32_t o = 0; o < in->noperands; o++) lf_unscale(c, &ops[o]);
            factor = 1;
            *v = lf_lift_instr(&s);
        }
        if (!c->baseline_mode && v->kind == LV_UNKNOWN && c->nunsupported == nu && c->nfindings == nf) unrelated(&s);
        if (c->baseline_mode && v->kind == LV_UNKNOWN && factor != 1) *v = generic(&s);
        lf_scale_apply(&s, v, factor);
        lf_scale_cancel(&s, v);
        other_forms(&s, v);
        lf_scale_differ(&s, v, factor, lf_lift_instr);
    }
    lf_zmask_after(&s, v);
    if (v->zm) v->diff = 0; /* a zero mask's claim is about the term alone */
    lf_scale_track(&s, v);
    if (!c->baseline_mode) lf_track_short(&s, v);
    /* A partial sum computed here is values of its own (an operand's name
     * kept only where the op is the identity on it). */
    if (!same) v->pid = !c->baseline_mode && v->kind == LV_TERM && v->v.partial ? ++c->npids : 0;
    amb |= c->ambiguous_now; /* an operand's view guessed on the way (lf_win_assume) */
    v->ambiguous |= amb;
    v->guessed |= c->guessed_now && v->kind != LV_UNKNOWN;
    c->ambiguous_now = c->konst_operand_now = c->partial_unsure_now = c->guessed_now = false;
    for (uint32_t o = 0; o < in->noperands && v->kind == LV_TERM && v->v.partial; o++) v->partial_unsure |= ops[o].partial_unsure;
    /* a reduction that made a value partial over a dim a sharded unit dim
     * was merged into in one reading among several (of index values too,
     * which lift_reduce does not see): in another the dim is the device's
     * own, not a share */
    if ((in->op == OP_REDUCE || in->op == OP_REDUCE_WINDOW) && in->noperands >= 1 && v->kind == LV_TERM &&
        vals[in->operands[0]].merged_unit && (v->v.partial & ~vals[in->operands[0]].v.partial))
        v->partial_unsure = true;
    for (uint32_t o = 0; o < in->noperands && v->kind != LV_UNKNOWN && !v->v.partial; o++)
        v->merged_unit |= vals[in->operands[o]].merged_unit;
    if (!c->baseline_mode && (v->kind == LV_TERM || v->kind == LV_LAYOUT || v->kind == LV_WIN))
        view_drop_unit_axes(&v->v, c->mesh);
    if ((v->kind == LV_PW || v->kind == LV_MASK || v->kind == LV_IVEC) && !hlo_op_is_collective(in->op))
        index_plain_term(&s, v);
    else if (lf_is_index(v)) collective_plain_term(&s, v);
    lf_counter_forms(&s, v);
    debug_value(c, in, v);
    /* From the operands' own values: a transfer function may have replaced
     * its copies (index values turned into terms) without that flag. Kept on
     * both sides, as the constant factors that depend on it are. */
    bool konst = in->op != OP_PARTITION_ID && in->op != OP_REPLICA_ID;
    for (uint32_t o = 0; o < in->noperands; o++) konst &= vals[in->operands[o]].konst;
    /* A global term made of constants and device values only (an iota
     * offset by the device's block) is constant-only, as the baseline's. */
    bool dev_konst = v->kind == LV_TERM && in->noperands > 0;
    for (uint32_t o = 0; o < in->noperands && dev_konst; o++)
        dev_konst = vals[in->operands[o]].konst || vals[in->operands[o]].kind == LV_DEV;
    konst |= dev_konst;
    v->konst = konst;
    if (c->baseline_mode) {
        /* The baseline is its own reference: what no transfer function
         * handles is simply its own op over its operands. */
        if (v->kind == LV_UNKNOWN) {
            *v = generic(&s);
            debug_value(c, in, v);
        }
        lf_pick_forms(&s, v);
        v->konst = konst;
        if (konst) known_values(c, v);
        if (v->kind == LV_TERM) lf_record_scope(c, in, lf_scale_of(v) == 1 ? v->cls : EID_NONE);
        if (konst) lf_scale_base_konst(c, v);
        return;
    }
    lf_pick_forms(&s, v);
    if (dbg_on(DBG_LIFT) && v->kind == LV_UNKNOWN) {
        bool fresh_unknown = true;
        for (uint32_t o = 0; o < in->noperands; o++) fresh_unknown &= ops[o].kind != LV_UNKNOWN;
        if (fresh_unknown) fprintf(stderr, "lift: %s (%s) unknown\n", in->name, in->opname);
    }
    /* A segment is verified only when everything it computes is a baseline
     * value (or device bookkeeping); count what is not. */
    if (c->nsegs && !konst &&
        (v->kind == LV_UNKNOWN || (v->kind == LV_TERM && (v->assumed || !(eg_class_origin(c->g, v->cls) & EG_BASELINE))))) {
        c->segs[c->cur_seg].outside++;
        c->noutside++;
    }
    /* The first divergence: a term outside the baseline whose term operands
     * are all inside it (DESIGN §7); constant-only values are not data. A
     * layout op there only rearranges baseline values (a transient layout the
     * program may undo): the divergence is the first op that computes with
     * such a rearrangement, blamed on the layout op that hands it over. */
    /* Values under a zero mask are related by it (their masks, dispatched rows
     * and what experts make of them are no baseline values): the divergence
     * is where a mask is lost, an op that takes masked rows and gives a term
     * outside the baseline. */
    if (!c->divergence && !konst && !v->zm && v->kind == LV_TERM && !v->assumed &&
        !(eg_class_origin(c->g, v->cls) & EG_BASELINE) && !lf_class_is_zero(c, v->cls)) {
        /* (zeros, whatever their factor, are the same zeros: no divergence) */
        bool inside = true;
        const hlo_instr *via = NULL;
        for (uint32_t o = 0; o < in->noperands; o++)
            if (vals[in->operands[o]].zm) {
                continue;
            } else if (lf_is_index(&vals[in->operands[o]])) {
                inside = false;  /* related by the index analysis, not as a term: no divergence to show */
            } else if (ops[o].kind == LV_TERM && !ops[o].konst && !(eg_class_origin(c->g, ops[o].cls) & EG_BASELINE)) {
                /* (a loop carry's get-tuple-element, which the text form of
                 * a current dump leaves unnamed, is never the site: its user) */
                if (ops[o].rearranged && !via)
                    via = comp->instrs[in->operands[o]].op == OP_GET_TUPLE_ELEMENT ? in : &comp->instrs[in->operands[o]];
                else if (!ops[o].rearranged && !ops[o].rescaled) inside = false;
            }
        bool moves = in->op == OP_BROADCAST || in->op == OP_TRANSPOSE || in->op == OP_RESHAPE || in->op == OP_BITCAST;
        /* a cumulative sum within each device's block of a baseline value's
         * dim (lift_scan.c; its kind and words) */
        if (!inside && !via && lf_scan_divergence(c, v->cls)) inside = true;
        if (inside && moves) {
            v->rearranged = true;
            inside = false;
        }
        if (inside) {
            c->divergence_konst = konst_op;
            for (uint32_t o = 0; o < in->noperands && !via; o++)
                if (ops[o].rescaled && lf_factor_divergence(c, comp, &ops[o], &vals[in->operands[o]], &via)) break;
            if (dbg_on(DBG_LIFT)) {
                strbuf b;
                sb_init(&b);
                eg_print_term(&b, c->g, v->cls, 6);
                fprintf(stderr, "lift: divergence %s%s%s = %s\n", via ? via->name : "", via ? ", consumed by " : "", in->name, b.s);
                sb_free(&b);
            }
            c->divergence = via ? via : in;
            c->divergence_cls = v->cls;
            if (!via && v->diff && c->diffs[v->diff - 1].in == in) {
                /* the op proved different itself (lift_table.c): what it says */
                c->divergence_kind = c->diffs[v->diff - 1].kind;
                c->divergence_note = c->diffs[v->diff - 1].message;
                c->divergence_cause = NULL;
            }
            c->divergence_layout = via != NULL && c->divergence_kind == LF_NO_KIND;
            c->divergence_resynced = c->resynced > 0;
            c->divergence_comp = comp;
            if (c->nsegs) c->segs[c->cur_seg].divergent++;
        }
    }
}

/* The mesh axis whose blocks the window's pieces are (device d holds
 * [k·len, (k+1)·len) along the dim, k its coordinate on the axis), or -1. */
static int blocks_axis(const lift_ctx *c, const lift_win *w) {
    for (uint32_t a = 0; a < c->mesh->naxes; a++) {
        bool all = w->idx != NULL;
        for (int64_t d = 0; all && d < c->ndev; d++)
            for (int64_t l = 0; all && l < w->len; l++)
                all = w->idx[d * w->len + l] == mesh_coord(c->mesh, d, a) * w->len + l;
        if (all) return (int)a;
    }
    return -1;
}

void lift_win_unsettled(lift_ctx *c, const hlo_comp *comp, const hlo_instr *in, const lval *v, const char *where) {
    /* Blamed on where the pieces began: that is what no view relates. */
    const lift_win *w = v->win;
    const hlo_instr *at = w->from ? w->from : in;
    char what[160];
    int axis;
    if (w->summed) snprintf(what, sizeof what, "slices sharded rows whose per-device sums do not cover every row once");
    else if (at->op == OP_COLLECTIVE_PERMUTE) snprintf(what, sizeof what, "moves pieces of dimension %u between devices", w->dim);
    else if (at->op == OP_SLICE) snprintf(what, sizeof what, "slices sharded dimension %u", w->dim);
    else if (at->op == OP_REVERSE) snprintf(what, sizeof what, "reverses sharded dimension %u (its blocks reverse too)", w->dim);
    else if (at->op == OP_DYNAMIC_SLICE && (axis = blocks_axis(c, w)) >= 0 && (view_axes_used(&v->v) >> axis & 1))
        snprintf(what, sizeof what, "slices dimension %u at the blocks of mesh axis %s, which shards another dimension "
                 "too (each device keeps a diagonal block)", w->dim, c->mesh->names[axis]);
    else if (at->op == OP_DYNAMIC_SLICE)
        snprintf(what, sizeof what, "slices dimension %u at per-device offsets that are no blocks of a mesh axis", w->dim);
    else snprintf(what, sizeof what, "concatenates along sharded dimension %u", w->dim);
    lf_unsupported(c, w->from ? w->from_comp : comp, at, "%s %s: the per-device pieces are no plain view %s", at->name, what, where);
}

const lval *lift_value_at(const lift_ctx *c, const hlo_comp *comp, uint32_t i) {
    if (comp < c->dist->comps || comp >= c->dist->comps + c->dist->ncomps || i >= comp->ninstrs) return NULL;
    const lval *vals = c->walked[comp - c->dist->comps];
    return vals ? &vals[i] : NULL;
}

const char *lift_segment_at(const lift_ctx *c, const hlo_comp *comp, const hlo_instr *in) {
    if (comp < c->dist->comps || comp >= c->dist->comps + c->dist->ncomps || in < comp->instrs ||
        in >= comp->instrs + comp->ninstrs)
        return NULL;
    const uint32_t *seg = c->seg_at[comp - c->dist->comps];
    uint32_t k = seg ? seg[in - comp->instrs] : UINT32_MAX;
    return k < c->nsegs ? c->segs[k].name : NULL;
}

bool lf_resize_reading(lift_ctx *c, lval *x, const view *want, bool narrow, uint32_t budget, int depth) {
    if (x->kind != LV_TERM || x->v.partial || want->partial || x->cls == EID_NONE || x->zm || x->diff ||
        view_equal(&x->v, want))
        return false;
    uint32_t rank;
    const int64_t *dims = eg_type_dims(c->g, eg_class_type(c->g, x->cls), &rank);
    if (rank != want->rank || rank != x->v.rank || rank > VIEW_MAX_RANK) return false;
    int64_t g[VIEW_MAX_RANK];
    bool resized[VIEW_MAX_RANK], any = false;
    for (uint32_t d = 0; d < rank; d++) {
        const view_dim *a = &x->v.dims[d], *b = &want->dims[d];
        int64_t parts = view_dim_parts(want, c->mesh, d), have = view_dim_parts(&x->v, c->mesh, d);
        if (parts < 1 || have < 1) return false;
        g[d] = dims[d] / have * parts;
        resized[d] = !lf_same_dim(a, b);
        if (resized[d] && !(a->naxes == 0 || (narrow && b->naxes == 0 && dims[d] == have))) return false;
        any |= resized[d];
    }
    eid w = any ? lf_resize_constant_dims(c, x->cls, resized, g, &budget, depth) : EID_NONE;
    if (w == EID_NONE) return false;
    x->cls = w;
    x->v = *want;
    return true;
}

void lift_spread_at_output(lift_ctx *c, lval *o, const view *want) {
    /* (once per output: an optimizer's update is deep) */
    if (!o->assumed) lf_resize_reading(c, o, want, true, 256, 16);
}

void lift_value_words(strbuf *b, const lval *v, const mesh *m) {
    switch (v->kind) {
    case LV_TERM: view_print(b, &v->v, m); break;
    case LV_DEV: sb_puts(b, "device-dependent"); break;
    case LV_TUPLE: sb_printf(b, "tuple of %u", v->n); break;
    case LV_PW: case LV_MASK: case LV_IVEC: sb_puts(b, "index values"); break;
    case LV_LAYOUT: case LV_WIN: sb_puts(b, "pieces rearranged"); break;
    case LV_PSUB: sb_puts(b, "some devices' shares summed"); break;
    case LV_ROW: sb_puts(b, "a per-device slice"); break;
    case LV_DEVT: sb_puts(b, "a different term on each device"); break;
    default: sb_puts(b, "unrelated"); break;
    }
}

lval lf_lift_comp(lift_ctx *c, const hlo_comp *comp, const lval *args, const view *inputs, uint32_t ninputs) {
    lval *vals = vals_for(c, comp);
    uint32_t *seg = NULL;
    if (!c->baseline_mode && c->cur == c->dist) {
        c->walked[comp - c->dist->comps] = vals;
        seg = c->seg_at[comp - c->dist->comps] = arena_alloc(c->a, (comp->ninstrs + 1) * sizeof *seg);
    }
    /* A called computation's parameters are its arguments: bound before the
     * walk, so a transfer function that looks ahead (a second stack gathered
     * alike: lift_coll.c) sees a parameter the text defines later. Its own
     * step binds the same value again. */
    for (uint32_t p = 0; args && p < comp->nparams; p++) {
        const hlo_instr *pi = &comp->instrs[comp->params[p]];
        vals[comp->params[p]] = args[instr_int(pi, A_PARAMETER_NUMBER, 0)];
    }
    lf_memo_side *ms = lf_memo_enter(c, comp, vals);
    for (uint32_t i = 0; i < comp->ninstrs;) {
        uint32_t r = ms ? lf_memo_run_at(ms, i) : SR_NONE, from = i;
        if (r == SR_NONE) lf_lift_one(c, comp, i++, vals, args, inputs, ninputs);
        else i = lf_memo_lift_run(c, ms, r, comp, vals, args, inputs, ninputs);
        for (uint32_t k = from; seg && k < i; k++) seg[k] = c->nsegs && c->cur_seg < c->nsegs ? c->cur_seg : UINT32_MAX;
    }
    if (ms) lf_memo_leave(c, ms);
    /* a computation's result is a plain view (group rows settled) */
    lf_group_settle(c, &comp->instrs[comp->root].shape, &vals[comp->root]);
    return vals[comp->root];
}

lval lift_distributed(lift_ctx *c, const view *inputs, uint32_t ninputs) {
    lval r = lf_lift_comp(c, graph_entry(c->dist), NULL, inputs, ninputs);
    lf_unscale(c, &r);
    /* A masked row as an output: the row where every device holds it, its
     * plain term where it does not depend on the device, else that row
     * partial over the axes it sums over (the output's view then
     * says an all-reduce is missing). A window: its runs in block order. A
     * layout: its plain view, when it has one. */
    const shape *rs = &graph_entry(c->dist)->instrs[graph_entry(c->dist)->root].shape;
    for (uint32_t k = 0; k < (r.kind == LV_TUPLE ? r.n : 1); k++) {
        lval *o = r.kind == LV_TUPLE ? &r.elems[k] : &r, pv;
        const shape *os = r.kind == LV_TUPLE && rs->dtype == DT_TUPLE && k < rs->ntuple ? &rs->tuple[k] : rs;
        if (o->kind == LV_LAYOUT && os->dtype != DT_TUPLE && lf_layout_to_term(c, o, os, true, &pv)) *o = pv;
        if (o->kind == LV_MASK && o->cls == EID_NONE && !lf_mask_resolves(c, o) && lf_mask_as_partial(c, o, &pv)) *o = pv;
        else if (o->kind == LV_MASK) lf_index_as_term(c, o);
        /* An index value as the root itself (no tuple to turn it into its
         * plain term, as OP_TUPLE does): its plain term, when it has one. */
        else if ((o->kind == LV_PW || o->kind == LV_IVEC) && o->cls != EID_NONE) lf_index_as_term(c, o);
        else if (o->kind == LV_WIN) lf_win_rearranged(c, o);
    }
    /* An output that is a rearrangement of baseline values diverges where it is made. */
    const hlo_comp *e = graph_entry(c->dist);
    const hlo_instr *root = &e->instrs[e->root];
    for (uint32_t k = 0; !c->divergence && k < (r.kind == LV_TUPLE ? r.n : 1); k++) {
        const lval *o = r.kind == LV_TUPLE ? &r.elems[k] : &r;
        if (o->kind == LV_TERM && o->rearranged) {
            c->divergence = r.kind == LV_TUPLE && root->op == OP_TUPLE ? &e->instrs[root->operands[k]] : root;
            c->divergence_cls = EID_NONE;
            c->divergence_comp = e;
            c->divergence_layout = true;
        }
    }
    lf_settle_domains(c);
    if (c->nsegs && c->acct_t > 0) lf_charge_segment(c, now_ms(), eg_node_count(c->g));
    return r;
}
