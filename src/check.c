#include "check.h"
#include "provenance.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "debug.h"
#include "egraph.h"
#include "hlo.h"
#include "io.h"
#include "lift.h"
#include "rules.h"
#include "view.h"
#include "trace_write.h"
#include "witness.h"

typedef check_module side;

/* Reads one module; errors go to d (named after the file by the caller). */
static bool load(side *s, const char *path, diag *d) {
    s->path = path;
    size_t n;
    bool gz;
    uint8_t h[32];
    size_t mapped;
    const char *buf = io_map_file_sha256(path, &n, &gz, h, &mapped, d);
    if (buf) {
        for (int i = 0; i < 32; i++) snprintf(s->sha256 + 2 * i, 3, "%02x", h[i]);
        s->m = hlo_read_buffer(buf, n, path, &s->format, d);
        io_unmap(buf, mapped);
    }
    return s->m != NULL;
}

/* The segment an instruction belongs to: its op_name scope, else "entry". */
static char *segment_name(const hlo_instr *in) {
    const char *s = instr_op_scope(in);
    const char *e = s ? strchr(s, '/') : NULL;
    return e ? xstrndup(s, (size_t)(e - s)) : xstrdup("entry");
}

/* Lists a finding (message is copied) and counts it. */
static check_finding *add_finding(check_result *r, size_t *cap, trace_kind kind, trace_severity sev, const char *message,
                                  const hlo_comp *comp, const hlo_instr *in) {
    XGROW(r->findings, *cap, r->nfindings + 1);
    check_finding *f = &r->findings[r->nfindings++];
    *f = (check_finding){kind, sev, xstrdup(message), segment_name(in), comp, in, false, NULL, 0, 0};
    r->kind_total[kind]++;
    return f;
}

static void findings_clear(check_result *r) {
    for (size_t i = 0; i < r->nfindings; i++)
        free(r->findings[i].message), free(r->findings[i].segment), free(r->findings[i].path);
    r->nfindings = 0;
    memset(r->kind_total, 0, sizeof r->kind_total);
}

/* A finding kind for a divergence confirmed only by execution, from what
 * diverged: its opcode (a collective or slice that places the value, a layout
 * op, a convert) or, for arithmetic, an operand computed from constants alone
 * (a scale, a table: the constant differs). */
/* Ops whose divergence is about where values sit (kind_of_divergence). */
static bool is_layout_op(int op) {
    return op == OP_RESHAPE || op == OP_TRANSPOSE || op == OP_BITCAST || op == OP_CONCATENATE || op == OP_SLICE ||
           op == OP_DOT;
}

static trace_kind kind_of_divergence(const hlo_instr *in, bool konst_operand) {
    if (is_layout_op(in->op)) return KIND_LAYOUT_MISMATCH;
    switch (in->op) {
    case OP_CONVERT: return KIND_DTYPE_MISMATCH;
    case OP_ALL_REDUCE: case OP_REDUCE_SCATTER: return KIND_WRONG_REDUCTION;
    case OP_ALL_GATHER: case OP_ALL_TO_ALL: case OP_DYNAMIC_SLICE: return KIND_WRONG_SHARD_DIM;
    case OP_COLLECTIVE_PERMUTE: return KIND_WRONG_COLLECTIVE_GROUP;
    default: break;
    }
    return konst_operand ? KIND_CONSTANT_MISMATCH : KIND_LAYOUT_MISMATCH;
}

/* A walk over (computation, instruction) pairs of a module, each visited once. */
typedef struct walk {
    const hlo_module *m;
    uint8_t **seen;               /* per computation, per instruction (lazily) */
    uint32_t (*stack)[2];
    size_t n, cap;
} walk;

static void walk_push(walk *w, uint32_t c, uint32_t i) {
    if (!w->seen[c]) w->seen[c] = xcalloc(w->m->comps[c].ninstrs + 1, 1);
    if (w->seen[c][i]) return;
    w->seen[c][i] = 1;
    if (w->n == w->cap) w->stack = xrealloc(w->stack, (w->cap = 2 * w->cap + 16) * sizeof *w->stack);
    w->stack[w->n][0] = c;
    w->stack[w->n++][1] = i;
}

static bool is_elided_constant(const hlo_instr *x) {
    const hlo_attr *lit = x->op == OP_CONSTANT ? instr_attr(x, A_LITERAL) : NULL;
    return lit && lit->v.lit->elided;
}

/* The first instruction that instruction in of computation c depends on (in
 * itself included), following calls into their callee's root and callee
 * parameters back to their call sites' operands, that is target or, with
 * target NULL, a constant whose values the dump left out ({...}); NULL when
 * none. */
static const hlo_instr *ancestor_where(const hlo_module *m, const hlo_comp *c, const hlo_instr *in, const hlo_instr *target) {
    walk w = {.m = m, .seen = xcalloc(m->ncomps + 1, sizeof *w.seen)};
    const hlo_instr *found = NULL;
    walk_push(&w, (uint32_t)(c - m->comps), (uint32_t)(in - c->instrs));
    while (w.n && !found) {
        w.n--;
        uint32_t ci = w.stack[w.n][0], ii = w.stack[w.n][1];
        const hlo_comp *xc = &m->comps[ci];
        const hlo_instr *x = &xc->instrs[ii];
        if (target ? x == target : is_elided_constant(x)) found = x;
        const hlo_attr *callee = x->op == OP_CALL ? instr_attr(x, A_TO_APPLY) : NULL;
        if (callee && callee->v.ints[0] >= 0 && (uint64_t)callee->v.ints[0] < m->ncomps)
            walk_push(&w, (uint32_t)callee->v.ints[0], m->comps[callee->v.ints[0]].root);
        for (uint32_t k = 0; x->op == OP_PARAMETER && k < xc->nparams; k++) {
            if (xc->params[k] != ii) continue;
            for (uint32_t cc = 0; cc < m->ncomps; cc++)
                for (uint32_t j = 0; j < m->comps[cc].ninstrs; j++) {
                    const hlo_instr *y = &m->comps[cc].instrs[j];
                    const hlo_attr *ta = y->op == OP_CALL ? instr_attr(y, A_TO_APPLY) : NULL;
                    if (ta && ta->v.ints[0] == (int64_t)ci && k < y->noperands) walk_push(&w, cc, y->operands[k]);
                }
        }
        for (uint32_t o = 0; o < x->noperands; o++) walk_push(&w, ci, x->operands[o]);
    }
    for (uint32_t k = 0; k < m->ncomps; k++) free(w.seen[k]);
    free(w.seen);
    free(w.stack);
    return found;
}

/* A constant the dump left out that instruction in depends on: it is equal
 * only to itself, so no term built on it can meet the other program's. */
static const hlo_instr *elided_ancestor(const hlo_module *m, const hlo_comp *c, const hlo_instr *in) {
    return ancestor_where(m, c, in, NULL);
}

typedef struct load_job {
    side *s;
    const char *path;
    diag d;
    bool ok;
} load_job;

static void *load_job_run(void *p) {
    load_job *j = p;
    j->ok = load(j->s, j->path, &j->d);
    return NULL;
}

/* The rules that fired in a saturation run, most first (at most 16; the
 * trace's top_rules). */
static check_rule_count *most_fired(const rs_ruleset *rs, const rs_result *sat, size_t *ntop) {
    check_rule_count *top = xcalloc(16, sizeof *top);
    bool *taken = xcalloc(sat->nrules + 1, sizeof *taken);
    *ntop = 0;
    for (int n = 0; n < 16; n++) {
        uint32_t best = UINT32_MAX;
        for (uint32_t r = 0; r < sat->nrules; r++)
            if (!taken[r] && sat->fired[r] && (best == UINT32_MAX || sat->fired[r] > sat->fired[best])) best = r;
        if (best == UINT32_MAX) break;
        taken[best] = true;
        top[(*ntop)++] = (check_rule_count){xstrdup(rs_rule_name(rs, best)), sat->fired[best]};
    }
    free(taken);
    return top;
}

/* Equality saturation of a pair's e-graph (DESIGN §5, §6), run by the memo
 * while lifting, for the segment it wants a representative of, and after
 * lifting when an output is still apart from the baseline's. The rules load
 * on first use (a warning when they do not); each run's figures are kept for
 * the segment it ran for. */
typedef struct sat_run {
    uint32_t seg;                 /* UINT32_MAX: the run after lifting */
    uint32_t iterations;
    rs_stop stop;
    uint64_t unions;
    double ms;
    check_rule_count *top;        /* the rules that fired most */
    size_t ntop;
} sat_run;

typedef struct saturator {
    const char *rules_dir;        /* NULL: no rules, no saturation */
    diag *d;
    rs_ruleset *rs;
    bool failed;                  /* the rules did not load */
    rs_result last;               /* the latest run's result */
    sat_run *runs;
    size_t nruns, capruns;
} saturator;

/* The e-graph's invariants (egraph.h eg_check) after every lift and
 * saturation, when built with -DSCALIFY_INVARIANTS (make asan, make ubsan) or
 * run with SCALIFY_DEBUG=invariants (then each check is said on stderr). A
 * violation is a checker defect: nothing decided on that e-graph can be
 * trusted, so it is reported and the process aborts. */
static void invariants(egraph *g, const char *after) {
    static _Thread_local int on = -1;
    if (on < 0) {
#ifdef SCALIFY_INVARIANTS
        on = 1;
#else
        on = dbg_on(DBG_INVARIANTS);
#endif
    }
    if (!on) return;
    strbuf why;
    sb_init(&why);
    int bad = eg_check(g, &why);
    if (bad) {
        fprintf(stderr, "scalify: internal error: %d e-graph invariant violation%s after %s:\n%s", bad, bad == 1 ? "" : "s",
                after, why.s ? why.s : "");
        abort();
    }
    if (dbg_on(DBG_INVARIANTS))
        fprintf(stderr, "check: e-graph invariants hold after %s (%u nodes)\n", after, eg_node_count(g));
    sb_free(&why);
}

static bool saturate(saturator *s, egraph *g, uint32_t seg, bool light) {
    if (!s->rules_dir || s->failed) return false;
    if (!s->rs) {
        diag rd;
        diag_init(&rd, s->rules_dir);
        s->rs = rs_new();
        if (rs_load_dir(s->rs, s->rules_dir, &rd) != 0) {
            diag_plain(s->d, "warning: rules in %s do not load; checking without them", s->rules_dir);
            rs_free(s->rs);
            s->rs = NULL;
            s->failed = true;
        }
        diag_free(&rd);
        if (s->failed) return false;
    }
    rs_budget b = rs_budget_default();
    b.node_limit = 4 * (uint64_t)eg_node_count(g) + 100000;
    b.time_limit_ms = 5000;
    if (light) {
        /* (a loop's induction: terms written another way by a few rewrites) */
        b.node_limit = (uint64_t)eg_node_count(g) + 20000;
        b.iter_limit = 8;
    }
    rs_db *db = rs_db_new(s->rs);
    double ts = now_ms();
    rs_result_free(&s->last);
    memset(&s->last, 0, sizeof s->last);
    rs_run(s->rs, g, db, &b, NULL, &s->last);
    if (s->last.stop == STOP_SHAPE_CONFLICT && dbg_on(DBG_LIFT))
        fprintf(stderr, "check: saturation stopped: %s\n", s->last.message ? s->last.message : "?");
    rs_db_free(db);
    eg_rebuild(g);
    invariants(g, "saturation");
    XGROW(s->runs, s->capruns, s->nruns + 1);
    sat_run *run = &s->runs[s->nruns++];
    *run = (sat_run){seg, s->last.iterations, s->last.stop, s->last.unions, now_ms() - ts, NULL, 0};
    run->top = most_fired(s->rs, &s->last, &run->ntop);
    return true;
}

static bool lift_saturate(lift_ctx *c, void *arg) { return saturate(arg, c->g, c->cur_seg, c->sat_light); }

static void saturator_free(saturator *s) {
    for (size_t i = 0; i < s->nruns; i++) {
        for (size_t k = 0; k < s->runs[i].ntop; k++) free(s->runs[i].top[k].rule);
        free(s->runs[i].top);
    }
    free(s->runs);
    rs_result_free(&s->last);
    rs_free(s->rs);
}

/* The relations file, read before it is needed: relations_read's result
 * and what it said, kept aside until pair_inputs_ok takes them. */
typedef struct early_rel {
    bool done, ok;
    relations rel;
    diag d;
} early_rel;

static void early_rel_free(early_rel *e) {
    if (!e->done) return;
    if (e->ok) relations_free(&e->rel);
    diag_free(&e->d);
    e->done = false;
}

/* Reads both modules, at once on two threads when jobs ≥ 2 (the readers share
 * no mutable state); diagnostics come out in the same order either way. The
 * baseline is read on this thread, which usually finishes first (the
 * distributed program is the larger), so it then reads the relations file
 * (which needs the baseline alone) while the other thread still parses:
 * into *er, whose messages pair_inputs_ok passes on where it would have
 * read the file itself. */
static bool load_both(const check_opts *o, side *B, side *D, early_rel *er, diag *d) {
    load_job jb = {B, o->baseline, {0}, false}, jd = {D, o->distributed, {0}, false};
    diag_init(&jb.d, o->baseline);
    diag_init(&jd.d, o->distributed);
    pthread_t t;
    bool threaded = o->jobs >= 2 && pthread_create(&t, NULL, load_job_run, &jd) == 0;
    load_job_run(&jb);
    if (threaded && jb.ok && o->relations) {
        diag_init(&er->d, o->relations);
        er->ok = relations_read(o->relations, B->m, &er->rel, &er->d);
        er->done = true;
    }
    if (threaded) pthread_join(t, NULL);
    else if (jb.ok) load_job_run(&jd);
    load_job *js[2] = {&jb, &jd};
    for (int k = 0; k < (jb.ok ? 2 : 1); k++) {
        if (js[k]->d.out.len) sb_put(&d->out, js[k]->d.out.s, js[k]->d.out.len);
        d->count += js[k]->d.count;
    }
    diag_free(&jb.d);
    diag_free(&jd.d);
    return jb.ok && jd.ok;
}

/* A value of float type dt the baseline computes nothing in (no instruction
 * of any of its computations has that type). */
static bool baseline_lacks_dtype(const hlo_module *bm, int dt) {
    for (uint32_t c = 0; c < bm->ncomps; c++)
        for (uint32_t i = 0; i < bm->comps[c].ninstrs; i++)
            if (bm->comps[c].instrs[i].shape.dtype == dt) return false;
    return true;
}

/* The first divergence rounds a value to a narrower float type, one the
 * baseline computes nothing in, and the distributed root depends on it: the
 * program computes in a lower precision than the baseline anywhere does (an
 * f32 matmul done in bf16). What converts may do exactly is left alone: an
 * operand that is, through layout ops, a constant, an iota or a convert from
 * an integer or a type no wider than the result. Findings of this kind are
 * the rules' (execution is no judge of rounding: check_run). */
static void narrowed_precision(check_result *r, size_t *cap, const lift_ctx *lc, const hlo_module *bm, const hlo_module *dm,
                               const hlo_comp *de) {
    const hlo_instr *in = lc->divergence;
    const hlo_comp *ic = lc->divergence_comp;
    if (!in || lc->divergence_layout || in->op != OP_CONVERT || in->noperands != 1) return;
    const hlo_instr *x = &ic->instrs[in->operands[0]];
    int to = in->shape.dtype, from = x->shape.dtype;
    if (!dtype_is_float(to) || !dtype_is_float(from) || dtype_bits(to) >= dtype_bits(from)) return;
    while ((x->op == OP_BROADCAST || x->op == OP_RESHAPE || x->op == OP_TRANSPOSE || x->op == OP_BITCAST || x->op == OP_COPY) &&
           x->noperands == 1)
        x = &ic->instrs[x->operands[0]];
    if (x->op == OP_CONSTANT || x->op == OP_IOTA) return;
    if (x->op == OP_CONVERT && x->noperands == 1) {
        int src = ic->instrs[x->operands[0]].shape.dtype;
        if (!dtype_is_float(src) || dtype_bits(src) <= dtype_bits(to)) return;
    }
    if (!baseline_lacks_dtype(bm, to) || !ancestor_where(dm, de, &de->instrs[de->root], in)) return;
    strbuf msg;
    sb_init(&msg);
    sb_printf(&msg, "%s rounds %s values to %s, a type the baseline computes nothing in, and the outputs depend on it: the "
              "program computes in a lower precision than the baseline", in->name, dtype_name(from), dtype_name(to));
    add_finding(r, cap, KIND_DTYPE_MISMATCH, SEV_ERROR, msg.s, ic, in);
    sb_free(&msg);
}

/* The instruction that makes output k of comp's root: through the root
 * tuple, copies, annotating custom calls and calls (a shard_map's body);
 * *at gets its computation. */
static const hlo_instr *output_producer(const hlo_module *m, const hlo_comp *comp, uint32_t k, const hlo_comp **at) {
    const hlo_instr *in = &comp->instrs[comp->root];
    if (in->op == OP_TUPLE) {
        if (k >= in->noperands) return *at = comp, in;
        in = &comp->instrs[in->operands[k]];
    }
    /* element `pick` of the tuple `in` computes, once it is one (-1: in itself) */
    int64_t pick = -1;
    for (int depth = 0; depth < 64; depth++) {
        if (pick >= 0 && in->op == OP_TUPLE) {
            if (pick >= in->noperands) break;
            in = &comp->instrs[in->operands[pick]];
            pick = -1;
        } else if (pick < 0 && in->op == OP_GET_TUPLE_ELEMENT && in->noperands == 1) {
            pick = instr_int(in, A_INDEX, 0);
            in = &comp->instrs[in->operands[0]];
        } else if (pick < 0 && (in->op == OP_COPY || in->op == OP_BITCAST || instr_is_identity_custom_call(in)) &&
                   in->noperands == 1) {
            in = &comp->instrs[in->operands[0]];
        } else if (in->op == OP_CALL && instr_attr(in, A_TO_APPLY)) {
            const hlo_attr *a = instr_attr(in, A_TO_APPLY);
            if (a->v.ints[0] < 0 || a->v.ints[0] >= m->ncomps) break;
            comp = &m->comps[a->v.ints[0]];
            in = &comp->instrs[comp->root];
        } else {
            break;
        }
    }
    *at = comp;
    return in;
}

/* An output not related to the baseline's whose local shape is not the
 * expected view's piece of the baseline output's shape (a gather along the
 * wrong dim, an all-to-all that concatenates along another): the global
 * values differ in shape, so the programs compute different functions
 * whatever the values. The first such output's reason in *why; false when
 * every shape agrees. */
static bool output_shape_differs(const hlo_comp *be, const hlo_comp *de, const relations *rel, const lval *root, uint32_t nouts,
                                 strbuf *why, trace_kind *kind, uint32_t *which) {
    const shape *bs = &be->instrs[be->root].shape, *ds = &de->instrs[de->root].shape;
    bool tuple = bs->dtype == DT_TUPLE;
    if (tuple != (ds->dtype == DT_TUPLE) || (tuple && (bs->ntuple != nouts || ds->ntuple != nouts))) return false;
    for (uint32_t k = 0; k < nouts && k < rel->noutputs; k++) {
        const shape *b = tuple ? &bs->tuple[k] : bs, *d = tuple ? &ds->tuple[k] : ds;
        const lval *v = root->kind == LV_TUPLE ? &root->elems[k] : root;
        int64_t local[VIEW_MAX_RANK];
        if (v->kind == LV_TERM && !v->assumed) continue; /* related: its view says more (below) */
        if (b->dtype == DT_TUPLE || d->dtype == DT_TUPLE || b->rank > VIEW_MAX_RANK || rel->outputs[k].rank != b->rank ||
            (rel->output_free && rel->output_free[k]))
            continue;
        bool ok = view_local_dims(&rel->outputs[k], &rel->mesh, b, local) && d->rank == b->rank &&
                  (!b->rank || !memcmp(local, d->dims, b->rank * sizeof *local));
        if (ok && d->dtype == b->dtype) continue;
        strbuf vs, bsh, dsh;
        sb_init(&vs), sb_init(&bsh), sb_init(&dsh);
        view_print(&vs, &rel->outputs[k], &rel->mesh);
        shape bl = *b, dl = *d; /* printed without layouts: they change no value */
        bl.layout = dl.layout = NULL;
        shape_print(&bsh, &bl);
        shape_print(&dsh, &dl);
        sb_printf(why, "output %u: each device holds %s, but the view %s of the baseline's %s gives %s", k, dsh.s, vs.s, bsh.s,
                  ok ? "another element type" : "another shape");
        sb_free(&vs), sb_free(&bsh), sb_free(&dsh);
        *kind = ok ? KIND_DTYPE_MISMATCH : KIND_WRONG_SHARD_DIM;
        *which = k;
        return true;
    }
    return false;
}

/* Outputs the lifting proved different from the baseline's (lift_scale.c):
 * a factor put back where the baseline puts another into the same term, or
 * a table of local positions where the baseline's runs over global ones
 * (lift_table.c), and from there only ops that keep a difference, to a value
 * whose other term (the one it would be with the baseline's factor or table)
 * is the baseline output's class while its own is not. One finding per
 * proved difference, at the op that made it. */
static void proved_differences(check_result *r, size_t *cap, lift_ctx *lc, const relations *rel, const lval *root,
                               const eid *bouts, uint32_t nbouts) {
    uint32_t nouts = root->kind == LV_TUPLE ? root->n : 1;
    bool *told = xcalloc(lc->ndiffs + 1, sizeof *told);
    for (uint32_t k = 0; k < nouts && k < nbouts && k < rel->noutputs; k++) {
        const lval *v = root->kind == LV_TUPLE ? &root->elems[k] : root;
        const view *want = rel->output_free && rel->output_free[k] ? &v->v : &rel->outputs[k];
        lift_finding m;
        if ((!v->diff || eg_find(lc->g, v->corr) != eg_find(lc->g, bouts[k])) && lift_output_multiple(lc, v, want, bouts[k], &m)) {
            /* The output itself is a multiple of the baseline's (whatever
             * factor the baseline put into other uses of the same term). */
            strbuf msg;
            sb_init(&msg);
            sb_printf(&msg, "output %u is not the baseline's: where %s makes the factor, %s, and the output is that "
                      "multiple of the baseline's, so it differs wherever the baseline's is non-zero", k, m.in->name,
                      m.message);
            add_finding(r, cap, m.kind, SEV_ERROR, msg.s, m.comp, m.in);
            sb_free(&msg);
            continue;
        }
        /* An ambiguous view is one exact reading among several (lf_unit_move:
         * the same local data read as another global term): the output's
         * value is that term whichever was taken, and the other term, the
         * baseline's output, tells the reading apart. Guessed views are
         * assumed values, never a difference. */
        if (!v->diff || v->kind != LV_TERM || v->assumed || told[v->diff]) continue;
        if (eg_find(lc->g, v->corr) != eg_find(lc->g, bouts[k]) || eg_find(lc->g, v->cls) == eg_find(lc->g, bouts[k]))
            continue;
        /* Compared through the view the output must have (or, unconstrained,
         * any plain one): a device's piece is then that view of the term. */
        if (!view_equal(&v->v, &rel->outputs[k]) && !(rel->output_free && rel->output_free[k] && !v->v.partial)) continue;
        const lift_finding *d = &lc->diffs[v->diff - 1];
        told[v->diff] = true;
        strbuf msg;
        sb_init(&msg);
        sb_printf(&msg, "output %u is not the baseline's: at %s, %s; every op from there to the output "
                  "keeps the difference (only additions, negations, conversions and layout ops follow), so the output "
                  "differs from the baseline's wherever that value is non-zero", k, d->in->name, d->message);
        add_finding(r, cap, d->kind, SEV_ERROR, msg.s, d->comp, d->in);
        sb_free(&msg);
    }
    free(told);
}

/* One segment per top-level op_name scope, each judged given its inputs:
 * verified when the pair is; a mismatch when an error finding is in it (or
 * the transfer functions found one there that execution does not
 * contradict); unverified when something in it was left unrelated. With
 * each its figures: saturation runs, rules fired, timings. */
static void judge_segments(check_result *r, trace_verdict verdict, bool contradicted, lift_ctx *lc, const saturator *sr,
                           const sat_run *final_run, double sat_ms, double t_check) {
    double sat_left = sat_ms;
    uint32_t *seg_classes = xcalloc(lc->nsegs + 1, sizeof *seg_classes);
    lift_segment_classes(lc, seg_classes);
    r->segs = xcalloc(lc->nsegs + 1, sizeof *r->segs);
    r->nsegs = lc->nsegs;
    /* The segments an error finding names (one pass, not one per segment). */
    bool *seg_error = xcalloc(lc->nsegs + 1, sizeof *seg_error);
    for (size_t k = 0; k < r->nfindings; k++) {
        const char *fs = r->findings[k].segment;
        uint32_t si;
        if (fs && r->findings[k].severity == SEV_ERROR && strmap_get(&lc->seg_index, fs, strlen(fs), &si) && si < lc->nsegs)
            seg_error[si] = true;
    }
    for (uint32_t i = 0; i < lc->nsegs; i++) {
        const lift_segment *sg = &lc->segs[i];
        check_segment *cs = &r->segs[i];
        bool has_error = seg_error[i];
        /* A verified pair proves every segment; otherwise each is judged alone. */
        cs->verdict = verdict == VERDICT_VERIFIED ? VERDICT_VERIFIED
                      : has_error || (sg->findings && !contradicted) ? VERDICT_MISMATCH
                      : (sg->unsupported || sg->divergent || sg->outside || sg->dstart == sg->dend) ? VERDICT_UNVERIFIED
                                                                                                   : VERDICT_VERIFIED;
        cs->name = xstrdup(sg->name);
        cs->bstart = sg->bstart, cs->bend = sg->bend, cs->dstart = sg->dstart, cs->dend = sg->dend;
        cs->enodes = sg->enodes;
        cs->eclasses = seg_classes[i];
        /* Saturation runs over the whole e-graph: while lifting for the segment
         * the memo wanted a representative of, after lifting for the segments
         * whose terms did not all meet the baseline's by construction (verified
         * in the end or not). A segment shows the runs it was the reason for;
         * the time of the run after lifting is counted once, on the first. */
        bool ran = final_run && (sg->outside || sg->divergent);
        uint32_t iters = ran ? final_run->iterations : 0;
        uint64_t fired = ran ? final_run->unions : 0;
        const sat_run *last = ran ? final_run : NULL;
        double own_ms = 0;
        for (size_t k = 0; k < sr->nruns; k++)
            if (sr->runs[k].seg == i) {
                iters += sr->runs[k].iterations;
                fired += sr->runs[k].unions;
                own_ms += sr->runs[k].ms;
                if (!ran) last = &sr->runs[k];
            }
        cs->iterations = iters;
        cs->stop = last ? last->stop : STOP_SATURATED;
        cs->rule_firings = fired;
        if (last && last->ntop) {
            cs->top = xcalloc(last->ntop, sizeof *cs->top);
            for (size_t k = 0; k < last->ntop; k++) cs->top[k] = (check_rule_count){xstrdup(last->top[k].rule), last->top[k].count};
            cs->ntop = last->ntop;
        }
        cs->t_build = sg->build_ms;
        cs->t_lift = sg->ms;
        /* Its time is counted once, on the first of them, so timings add up. */
        cs->t_saturate = own_ms + (ran ? sat_left : 0);
        sat_left = ran ? 0 : sat_left;
        cs->t_check = i + 1 == lc->nsegs ? t_check : 0;
        cs->memo_hit = sg->runs && sg->memo_hits == sg->runs;
        if (cs->memo_hit && sg->memo_of >= 0) cs->memo_of = xstrdup(lc->segs[sg->memo_of].name);
    }
    free(seg_classes);
    free(seg_error);
}

/* Whether the pair and its relations fit together (bad input otherwise, said
 * in d): parameters one to one, a view per parameter, the mesh the program's
 * device count, every distributed parameter the local shape of its view.
 * Reads or infers the relations into rel. */
static bool pair_inputs_ok(const check_opts *o, const side *B, const side *D, early_rel *er, relations *rel, diag *d) {
    const hlo_comp *be = graph_entry(B->m), *de = graph_entry(D->m);
    if (be->nparams != de->nparams) {
        diag_plain(d, "the baseline has %u parameters but the distributed program has %u: parameters must correspond one to one",
                   be->nparams, de->nparams);
        return false;
    }
    bool rel_ok;
    if (er->done) { /* read by load_both: what it said, as if said now */
        rel_ok = er->ok;
        if (er->ok) *rel = er->rel;
        er->ok = false; /* *rel owns it now */
        sb_put(&d->out, er->d.out.s ? er->d.out.s : "", er->d.out.len);
        d->count += er->d.count;
    } else {
        rel_ok = o->relations ? relations_read(o->relations, B->m, rel, d) : relations_auto_pair(B->m, D->m, rel, d);
    }
    if (!rel_ok) return false;
    if (rel->ninputs != be->nparams) {
        diag_plain(d, "the relations name %u inputs for %u parameters", rel->ninputs, be->nparams);
        return false;
    }
    /* A program that states no device count (a protobuf module whose program
     * needs no collective) runs on the relations' mesh: lacking a collective
     * is something to judge, not bad input. */
    if (graph_devices_stated(D->m) && mesh_devices(&rel->mesh) != graph_num_devices(D->m)) {
        diag_plain(d, "the mesh has %lld devices but the distributed program runs on %lld",
                   (long long)mesh_devices(&rel->mesh), (long long)graph_num_devices(D->m));
        return false;
    }
    /* Local parameter shapes must be the views' local shapes. */
    for (uint32_t k = 0; k < be->nparams; k++) {
        const hlo_instr *bp = &be->instrs[be->params[k]], *dp = &de->instrs[de->params[k]];
        int64_t local[VIEW_MAX_RANK];
        /* Relations describe arrays of bounded rank: limits of ours, said as such. */
        if (bp->shape.dtype == DT_TUPLE) {
            diag_plain(d, "parameter %u (%s) is a tuple; relations describe array parameters (JAX exports flatten "
                          "tuples into separate parameters)", k, bp->name);
            return false;
        }
        if (bp->shape.rank > VIEW_MAX_RANK) {
            diag_plain(d, "parameter %u (%s) has rank %u; relations describe arrays of rank at most %d", k, bp->name,
                       bp->shape.rank, VIEW_MAX_RANK);
            return false;
        }
        if (
            !view_local_dims(&rel->inputs[k], &rel->mesh, &bp->shape, local) || dp->shape.rank != bp->shape.rank ||
            (bp->shape.rank && memcmp(local, dp->shape.dims, bp->shape.rank * sizeof *local) != 0) ||
            dp->shape.dtype != bp->shape.dtype) {
            strbuf a, b;
            sb_init(&a);
            sb_init(&b);
            view_print(&a, &rel->inputs[k], &rel->mesh);
            shape_print(&b, &dp->shape);
            diag_plain(d, "parameter %u: the view %s of the baseline's %s does not give the distributed %s", k, a.s,
                       bp->name, b.s);
            sb_free(&a);
            sb_free(&b);
            return false;
        }
    }
    return true;
}

/* What the picture of each finding shows of the lifting, which ends with
 * check_run: the views of the distributed values and each finding's path. */
static void keep_provenance(check_result *r, const lift_ctx *lc, const mesh *m) {
    r->views = pv_collect(lc, m);
    for (size_t k = 0; k < r->nfindings; k++) {
        check_finding *f = &r->findings[k];
        if (f->kind == KIND_MISSING_ALL_REDUCE) pv_forget(r->views, lc->dist, f->comp, f->in);
        uint32_t path[PV_PATH_MAX];
        size_t len, n = pv_path(lc, f->comp, (uint32_t)(f->in - f->comp->instrs), path, &len);
        if (n < 2) continue;  /* no partial operand: nothing to trace back */
        f->path = xmalloc(n * sizeof *f->path);
        memcpy(f->path, path, n * sizeof *path);
        f->npath = (uint32_t)n, f->path_len = (uint32_t)len;
    }
}

/* The mesh and the input and output views of from, into to (its arrays
 * reused): a refinement saved, or put back. */
static void copy_views(relations *to, const relations *from) {
    to->mesh = from->mesh;
    to->ninputs = from->ninputs;
    to->noutputs = from->noutputs;
    to->inputs = xrealloc(to->inputs, (from->ninputs + 1) * sizeof *to->inputs);
    to->outputs = xrealloc(to->outputs, (from->noutputs + 1) * sizeof *to->outputs);
    memcpy(to->inputs, from->inputs, from->ninputs * sizeof *to->inputs);
    memcpy(to->outputs, from->outputs, from->noutputs * sizeof *to->outputs);
}

/* Whether a lift with another reading (a refined mesh, reshapes' other
 * readings) got through cleanly: nothing unrelated, no finding of any sort,
 * every output the baseline's class under its expected view. Anything less
 * and the first lift's readings stand. */
static bool alt_clean(lift_ctx *lc, const lval *root, const eid *bouts, uint32_t nbouts, const relations *rel) {
    uint32_t n = root->kind == LV_TUPLE ? root->n : 1;
    if (lc->first_unsupported || lc->nfindings || lc->npending || lc->ntentative || lc->assumed || lc->resynced ||
        n != nbouts || n != rel->noutputs)
        return false;
    for (uint32_t k = 0; k < n; k++) {
        const lval *v = root->kind == LV_TUPLE ? &root->elems[k] : root;
        if (v->kind != LV_TERM || v->assumed || eg_find(lc->g, v->cls) != eg_find(lc->g, bouts[k]) ||
            (!view_equal(&v->v, &rel->outputs[k]) && !(rel->output_free && rel->output_free[k] && !v->v.partial)))
            return false;
    }
    return true;
}

/* Everything one lift of a pair holds. */
static void lift_teardown(saturator *sr, lift_ctx *lc, arena *a, egraph *g) {
    saturator_free(sr);
    lift_done(lc);
    arena_free(a);
    eg_free(g);
}

int check_run(const check_opts *o, check_result *r, diag *d) {
    peak_rss_reset(); /* each pair of a batch reports its own peak */
    double t0 = now_ms(), c0 = cpu_ms();
    memset(r, 0, sizeof *r);
    size_t cap = 0; /* of r->findings */
    side B = {0}, D = {0};
    relations rel = {0};
    int verdict = VERDICT_ERROR;
    early_rel er = {0};
    bool inputs_ok = load_both(o, &B, &D, &er, d) && pair_inputs_ok(o, &B, &D, &er, &rel, d);
    early_rel_free(&er);
    if (!inputs_ok) goto out;
    const hlo_comp *be = graph_entry(B.m), *de = graph_entry(D.m);
    /* Refine the mesh where groups use part of an axis, declared or inferred:
     * a sum over part of an axis may be one step of a complete one (DESIGN §5);
     * a value left partial is a finding where it must be complete. */
    lift_refine_mesh(&rel, D.m);
    /* A lift that stops where another true reading might not (offsets that
     * are blocks of part of an axis, lift_ctx.refine_axis; a reshape's
     * default reading, lift_ctx.reshape_flip) is tried once more with it,
     * and kept only when that lift is clean (alt_clean); else the pair is
     * lifted a third time as at first. */
    enum { ALT_NONE, ALT_TRYING, ALT_DONE } alt = ALT_NONE;
    bool flip = false;
    relations rel0 = {0}; /* the mesh and views before a refinement */
relift:;
    egraph *g = eg_new();
    arena a;
    arena_init(&a);
    lift_ctx lc;
    for (uint32_t k = 0; k < rel.ninputs; k++) view_drop_unit_axes(&rel.inputs[k], &rel.mesh);
    for (uint32_t k = 0; k < rel.noutputs; k++) view_drop_unit_axes(&rel.outputs[k], &rel.mesh);
    lift_init(&lc, g, &a, B.m, D.m, &rel.mesh);
    lc.reshape_flip = flip;
    lc.mesh_inferred = o->relations == NULL;
    lc.no_memo = o->no_memo;
    saturator sr = {.rules_dir = o->rules_dir, .d = d};
    lc.saturate = lift_saturate;
    lc.saturate_arg = &sr;
    double t1 = now_ms();
    eid *bouts;
    uint32_t nbouts;
    lift_baseline(&lc, &bouts, &nbouts);
    double t2 = now_ms();
    lval root = lift_distributed(&lc, rel.inputs, rel.ninputs);
    bool again = false;
    if (alt == ALT_NONE && lc.first_unsupported && !lc.nfindings) {
        if (lc.refine_factor) {
            /* on a mesh whose axis is split so that they are blocks */
            copy_views(&rel0, &rel);
            again = lift_split_mesh_axis(&rel, lc.refine_axis, lc.refine_factor);
        } else if (lc.reshape_defaulted) {
            flip = again = true;
        }
        if (again) alt = ALT_TRYING;
        if (again && dbg_on(DBG_LIFT))
            fprintf(stderr, "check: lifting again %s\n", flip ? "with reshapes' other readings" : "on a refined mesh");
    }
    if (again) {
        lift_teardown(&sr, &lc, &a, g);
        goto relift;
    }
    for (uint32_t k = 0; k < (root.kind == LV_TUPLE ? root.n : 1) && k < rel.noutputs; k++) {
        lval *out = root.kind == LV_TUPLE ? &root.elems[k] : &root;
        const shape *rs = &graph_entry(D.m)->instrs[graph_entry(D.m)->root].shape;
        lift_unroll_settle(&lc, rs->dtype == DT_TUPLE && k < rs->ntuple ? &rs->tuple[k] : rs, &rel.outputs[k], out);
        if (k < nbouts && out->kind == LV_TERM && out->cls != EID_NONE && eg_find(g, out->cls) != eg_find(g, bouts[k]))
            lift_spread_at_output(&lc, out, &rel.outputs[k]);
        lift_psub_at_output(&lc, out, &rel.outputs[k], k < nbouts ? bouts[k] : EID_NONE);
    }
    double t3 = now_ms();
    eg_rebuild(g);
    invariants(g, "lifting");
    /* Equality saturation with the rules when an output's term has not met its
     * baseline class by construction: rewrites may join them. */
    const sat_run *final_run = NULL; /* the run after lifting, if any */
    if (!lc.nfindings) {
        uint32_t nouts0 = root.kind == LV_TUPLE ? root.n : 1;
        bool apart = false;
        for (uint32_t k = 0; k < nouts0 && k < nbouts; k++) {
            const lval *v = root.kind == LV_TUPLE ? &root.elems[k] : &root;
            apart |= v->kind == LV_TERM && !v->assumed && eg_find(g, v->cls) != eg_find(g, bouts[k]);
        }
        if (apart && saturate(&sr, g, UINT32_MAX, false)) final_run = &sr.runs[sr.nruns - 1];
    }
    if (alt == ALT_TRYING && !alt_clean(&lc, &root, bouts, nbouts, &rel)) {
        /* The other reading does not get through cleanly either: the
         * first lift stands (lifted again, as it was). */
        alt = ALT_DONE;
        flip = false;
        if (dbg_on(DBG_LIFT)) fprintf(stderr, "check: the other reading is not clean: lifting as at first\n");
        if (rel0.inputs) copy_views(&rel, &rel0);
        lift_teardown(&sr, &lc, &a, g);
        goto relift;
    }
    lift_debug_rediff(&lc);
    double sat_ms = final_run ? final_run->ms : 0;

    /* The same mistake repeats in every layer: the first CHECK_MAX_PER_KIND of a
     * kind are listed, the summary counts them all. */
    enum { CHECK_MAX_PER_KIND = 16 };
    for (uint32_t i = 0; i < lc.nfindings; i++) {
        lift_finding *f = &lc.findings[i];
        trace_kind k = f->kind;
        if (r->kind_total[k] < CHECK_MAX_PER_KIND) add_finding(r, &cap, k, SEV_ERROR, f->message, f->comp, f->in);
        else r->kind_total[k]++;
    }
    /* Outputs: each must be the baseline output's class with the expected view. */
    strbuf why;
    sb_init(&why);
    uint32_t nouts = root.kind == LV_TUPLE ? root.n : 1;
    bool outputs_ok = nouts == nbouts && nouts == rel.noutputs;
    bool outputs_related = outputs_ok; /* every output a term of its own (none unrelated or assumed) */
    for (uint32_t k = 0; outputs_related && k < nouts; k++) {
        const lval *v = root.kind == LV_TUPLE ? &root.elems[k] : &root;
        outputs_related = v->kind == LV_TERM && !v->assumed;
    }
    if (nouts != nbouts) sb_printf(&why, "the distributed program has %u outputs, the baseline %u", nouts, nbouts);
    trace_kind shape_kind;
    uint32_t shape_out;
    if (outputs_ok && output_shape_differs(be, de, &rel, &root, nouts, &why, &shape_kind, &shape_out)) {
        outputs_ok = false;
        const hlo_comp *pc;
        const hlo_instr *pi = output_producer(D.m, de, shape_out, &pc);
        if (!lc.nfindings) add_finding(r, &cap, shape_kind, SEV_ERROR, why.s, pc, pi);
    }
    uint32_t bad_out = 0; /* the first output not related, once outputs_ok is false below */
    for (uint32_t k = 0; outputs_ok && k < nouts; k++) {
        const lval *v = root.kind == LV_TUPLE ? &root.elems[k] : &root;
        bad_out = k;
        if (v->kind != LV_TERM) {
            strbuf words;
            sb_init(&words);
            lift_value_words(&words, v, &rel.mesh);
            sb_printf(&why, "output %u could not be related to the baseline (the program leaves it as %s)", k, words.s);
            sb_free(&words);
            outputs_ok = false;
            if (v->kind == LV_WIN) { /* per-device pieces that never settled: where they began is the reason */
                char where[64];
                snprintf(where, sizeof where, "where output %u is read", k);
                lift_win_unsettled(&lc, de, &de->instrs[de->root], v, where);
            }
        } else if (v->assumed) {
            sb_printf(&why, "output %u rests on a value that could not be related (assumed)", k);
            outputs_ok = false;
        } else if (eg_find(g, v->cls) != eg_find(g, bouts[k])) {
            sb_printf(&why, "output %u: the lifted term does not meet the baseline output's class%s", k,
                      eg_class_origin(g, v->cls) & EG_BASELINE ? " (it is another of the baseline's values)" : "");
            outputs_ok = false;
        } else if (!view_equal(&v->v, &rel.outputs[k]) && rel.output_free && rel.output_free[k] && !v->v.partial) {
            /* Unconstrained: the program's own sharding of it is the relation
             * (the trace's relations show it). */
            rel.outputs[k] = v->v;
        } else if (!view_equal(&v->v, &rel.outputs[k])) {
            strbuf got, exp;
            sb_init(&got);
            sb_init(&exp);
            view_print(&got, &v->v, &rel.mesh);
            view_print(&exp, &rel.outputs[k], &rel.mesh);
            sb_printf(&why, "output %u is %s but %s is expected", k, got.s, exp.s);
            sb_free(&got);
            sb_free(&exp);
            outputs_ok = false;
            const hlo_instr *rin = &de->instrs[de->root];
            /* still partial where a complete value is expected: the sum was never taken */
            trace_kind kind = v->v.partial && !rel.outputs[k].partial ? KIND_MISSING_ALL_REDUCE : KIND_WRONG_SHARD_DIM;
            if (!lc.nfindings) add_finding(r, &cap, kind, SEV_ERROR, why.s, de, rin);
        }
    }
    /* A finding that waited on the outputs (lf_pending): every output related,
     * nothing assumed, and they still differ, so what it names was not taken
     * back later. Anything less leaves the pair undecided. */
    if (!outputs_ok && outputs_related && lc.npending && !lc.nfindings && r->nfindings == 0 && !lc.first_unsupported &&
        !lc.assumed && !lc.resynced) {
        lift_finding *f = &lc.pending;
        if (o->witness || f->kind != KIND_WRONG_REDUCTION) {
            add_finding(r, &cap, f->kind, SEV_ERROR, f->message, f->comp, f->in);
        } else {
            /* A value counted once per device that a later difference may
             * take back (two rewards that share the bias): terms that do not
             * meet do not show that the values differ, so without execution
             * it is the reason, not a finding. */
            lc.first_unsupported = f->in;
            lc.first_unsupported_comp = f->comp;
            lc.unsupported_why = f->message;
            lc.unsupported_kind = f->kind;
        }
    }
    if (!outputs_ok && outputs_related && !lc.nfindings && r->nfindings == 0 && !lc.first_unsupported && !lc.assumed &&
        !lc.resynced)
        narrowed_precision(r, &cap, &lc, B.m, D.m, de);
    if (!outputs_ok && !lc.first_unsupported && !lc.nfindings && lc.row_max_at) {
        /* A partial max taken per device as its blocks' maxima (an online
         * softmax's running max, lf_partial_row) and an output that did not
         * meet: the reason, as the missing all-reduce it may be. */
        lc.first_unsupported = lc.row_max_at;
        lc.first_unsupported_comp = lc.row_max_comp;
        lc.unsupported_why = lc.row_max_why;
        lc.unsupported_kind = KIND_MISSING_ALL_REDUCE;
    }
    /* A divergence whose term met a baseline value once saturated (a form
     * the rules relate: a - s·x beside a + (-s)·x) is no reason: where the
     * programs part after it is not located (met_divergence names it). */
    const hlo_instr *met_divergence = NULL;
    if (!outputs_ok && lc.divergence && lc.divergence_cls != EID_NONE &&
        (eg_class_origin(g, eg_find(g, lc.divergence_cls)) & EG_BASELINE)) {
        met_divergence = lc.divergence;
        lc.divergence = NULL;
        lc.divergence_note = lc.divergence_cause = NULL;
        lc.divergence_kind = LF_NO_KIND;
    }
    bool tentative = false;
    if (!outputs_ok && (!lc.first_unsupported || lc.tentative_first) && !lc.nfindings && lc.ntentative) {
        /* A reading taken on trust (lf_tentative) and outputs that did not
         * meet: the reason, as the bug it may be (the first one, if an op
         * not related came after it). */
        lc.first_unsupported = lc.tentative.in;
        lc.first_unsupported_comp = lc.tentative.comp;
        lc.unsupported_why = lc.tentative.message;
        lc.unsupported_kind = lc.tentative.kind;
        tentative = true;
    }
    if (!lc.first_unsupported && lc.silent && ((!outputs_ok && !lc.divergence) || (outputs_ok && lc.resynced))) {
        /* Nothing said why (the outputs differ, or meet only past a region
         * taken as the baseline's): the first instruction left unknown is
         * the reason. */
        lc.first_unsupported = lc.silent;
        lc.first_unsupported_comp = lc.silent_comp;
        lc.unsupported_why = lc.silent_why;
    }
    proved_differences(r, &cap, &lc, &rel, &root, bouts, nbouts);
    if (dbg_on(DBG_LIFT))
        fprintf(stderr, "check: outputs %s (%s); divergence %s; resynced %u; memo %u of %u runs\n", outputs_ok ? "meet" : "differ",
                why.s ? why.s : "", lc.divergence ? lc.divergence->name : "none", lc.resynced, lc.memo_hits, lc.memo_runs);
    witness w = {0};
    /* Run on verified pairs too: a proof execution contradicts is a checker
     * defect, and the programs differ (below). */
    bool proved = outputs_ok && !lc.first_unsupported && lc.assumed == lc.opaque && !lc.resynced && !lc.nfindings && r->nfindings == 0;
    if (o->witness) {
        /* Unconstrained outputs are compared through the view the program
         * leaves them in, where the lifting found one. */
        for (uint32_t k = 0; rel.output_free && k < rel.noutputs && k < (root.kind == LV_TUPLE ? root.n : 1); k++) {
            const lval *v = root.kind == LV_TUPLE ? &root.elems[k] : &root;
            if (rel.output_free[k] && v->kind == LV_TERM && !v->v.partial && !v->assumed && !v->ambiguous) rel.outputs[k] = v->v;
        }
        /* Inputs within the index domains the proof assumed (a table's rows):
         * outside them it promises nothing. */
        int64_t below = 0;
        for (uint32_t k = 0; k < lc.ndoms; k++)
            if (below == 0 || lc.doms[k].size < below) below = lc.doms[k].size;
        witness_run(B.m, D.m, &rel, 1, below, r->nfindings == 0, &w);
    }
    /* A precision finding (dtype-mismatch) is about rounding and range, which
     * random inputs of magnitude one need not show; every other kind changes
     * values. */
    bool contradicted = r->nfindings > 0 && w.ran && w.agrees;
    for (size_t k = 0; contradicted && k < r->nfindings; k++) contradicted = r->findings[k].kind != KIND_DTYPE_MISMATCH;
    if (contradicted) {
        /* The rules found a bug that execution does not show: one of them is
         * wrong, and a correct program must never be called a bug. Said
         * loudly, as a checker defect, and the pair stays undecided. */
        check_finding f0 = r->findings[0];
        strbuf msg;
        sb_init(&msg);
        sb_printf(&msg, "unverified: the transfer functions report %zu finding%s (the first: %s at %s: %s), but both programs "
                  "give the same outputs on seeded random inputs within rounding (max abs difference %g, %d runs): the "
                  "rules and execution disagree — a defect of the checker to report, unless the difference lies where "
                  "random inputs do not reach (a mask, a loop's trip count) — so nothing is decided",
                  r->nfindings, r->nfindings == 1 ? "" : "s", trace_kind_name(f0.kind), f0.in->name, f0.message,
                  w.max_abs, w.runs);
        fprintf(stderr, "scalify: warning: %s: %s\n", o->name ? o->name : o->distributed, msg.s);
        /* The same site, now the reason the pair is undecided. */
        r->findings[0].message = NULL;
        findings_clear(r);
        add_finding(r, &cap, KIND_UNSUPPORTED_OP, SEV_WARNING, msg.s, f0.comp, f0.in)->witness = true;
        free(f0.message);
        verdict = VERDICT_UNVERIFIED;
        sb_free(&msg);
    } else if (r->nfindings > 0) {
        verdict = VERDICT_MISMATCH;
        r->findings[0].witness = w.ran;
        if (o->witness && !w.ran && w.why[0]) {
            /* decided by the rules alone: said, with why execution could not check it */
            char *m = r->findings[0].message;
            size_t n = strlen(m) + strlen(w.why) + 48;
            r->findings[0].message = xmalloc(n);
            snprintf(r->findings[0].message, n, "%s (not checked by execution: %s)", m, w.why);
            free(m);
        }
    } else if (proved && w.ran && w.differs) {
        /* The transfer functions related every output to the baseline's and
         * execution disagrees: the rules or the interpreter are wrong about
         * this program. Said loudly, as a checker defect; nothing is decided
         * (as for a finding execution contradicts). */
        verdict = VERDICT_UNVERIFIED;
        const hlo_instr *rin = &de->instrs[de->root];
        strbuf msg;
        sb_init(&msg);
        if (lc.assumptions.s && *lc.assumptions.s) {
            /* the proof rests on stated assumptions the random inputs need
             * not keep (indices computed from data, out of range) */
            size_t n = strcspn(lc.assumptions.s, "\n");
            sb_printf(&msg, "unverified: the transfer functions relate every output to the baseline's assuming %.*s%s, but "
                      "execution on seeded random inputs shows outputs up to %g apart (%d run%s): the inputs drawn may break "
                      "that assumption (else the checker is wrong about this program), so nothing is decided", (int)n,
                      lc.assumptions.s, lc.assumptions.s[n] && lc.assumptions.s[n + 1] ? " (and more)" : "", w.max_abs, w.runs,
                      w.runs == 1 ? "" : "s");
        } else {
            sb_printf(&msg, "unverified: the transfer functions relate every output to the baseline's, but execution on "
                      "seeded random inputs shows outputs up to %g apart (%d run%s): the checker is wrong about this program (a "
                      "defect to report), so nothing is decided", w.max_abs, w.runs, w.runs == 1 ? "" : "s");
        }
        fprintf(stderr, "scalify: warning: %s: %s\n", o->name ? o->name : o->distributed, msg.s);
        add_finding(r, &cap, KIND_UNSUPPORTED_OP, SEV_WARNING, msg.s, de, rin)->witness = true;
        sb_free(&msg);
    } else if (w.ran && w.differs) {
        /* Undecided by the rules, but the programs compute different outputs.
         * Localised to the first divergence, else to the first instruction the
         * rules could not relate after a region assumed equal to the
         * baseline's (resynchronised), else the first one overall; the kind
         * comes from what that instruction is. */
        verdict = VERDICT_MISMATCH;
        /* A divergence after a region assumed equal may be that assumption's
         * doing, or after a reading taken on trust that one's: the
         * instruction that forced it comes first then. */
        bool div = lc.divergence && !(lc.divergence_resynced && lc.first_unsupported) && !tentative;
        bool later = !lc.divergence && lc.later_unsupported;
        const hlo_comp *uc = div ? lc.divergence_comp : later ? lc.later_unsupported_comp : lc.first_unsupported_comp;
        const hlo_instr *ui = div ? lc.divergence : later ? lc.later_unsupported : lc.first_unsupported;
        bool konst_operand = div ? lc.divergence_konst : later ? lc.later_unsupported_konst : lc.unsupported_konst;
        bool named = (div && lc.divergence_kind != LF_NO_KIND) || (!div && !later && lc.unsupported_kind != LF_NO_KIND);
        trace_kind kind = div && lc.divergence_kind != LF_NO_KIND ? lc.divergence_kind
                          : !div && !later && lc.unsupported_kind != LF_NO_KIND ? lc.unsupported_kind
                          : ui ? kind_of_divergence(ui, konst_operand) : KIND_UNSUPPORTED_OP;
        /* The rules' site stands where they say what went wrong there (a kind
         * of their own, a constant operand, a layout op or a collective, a
         * region assumed equal before it); elsewhere the values place it. */
        bool weak = !ui || kind == KIND_UNSUPPORTED_OP ||
                    (!named && !konst_operand && !later && !(lc.divergence && !div) && kind == KIND_LAYOUT_MISMATCH &&
                     !is_layout_op(ui->op));
        if (!ui) /* the output not related: where its value is made */
            ui = output_producer(D.m, de, bad_out, &uc);
        strbuf msg;
        sb_init(&msg);
        if (isinf(w.max_abs) && w.max_finite > 0)
            /* overflow on random inputs (a log-sum-exp, a square root of a
             * negative moment) beside a finite difference: that one */
            sb_printf(&msg, "the outputs differ from the baseline's by up to %g where both are finite, and one gives inf or "
                      "NaN where the other does not (confirmed by execution on seeded random inputs); ", w.max_finite);
        else
            sb_printf(&msg, "the outputs differ from the baseline's by up to %g (confirmed by execution on seeded random "
                      "inputs); ", w.max_abs);
        const locate_site *ls = &w.site;
        if (ls->in && weak) { /* where execution shows the values leave the baseline's */
            /* the kind: a share used whole, a wrong factor; else the rules'
             * where they name the same instruction; else from what it is */
            bool same = ls->at == ui;
            uc = ls->comp;
            ui = ls->at;
            kind = ls->partial ? KIND_MISSING_ALL_REDUCE
                   : ls->scale ? (hlo_op_is_collective(ui->op) ? KIND_WRONG_REDUCTION : KIND_CONSTANT_MISMATCH)
                   : same      ? kind
                               : kind_of_divergence(ui, false);
            strbuf ax;
            sb_init(&ax);
            for (uint32_t x = 0, n = 0; x < rel.mesh.naxes; x++)
                if (ls->partial_axes >> x & 1) sb_printf(&ax, "%s%s", n++ ? "," : "", rel.mesh.names[x]);
            const char *red = reducer_name(ls->partial_red);
            if (ls->partial)
                sb_printf(&msg, "executed, %s holds on each device a share of a baseline value (their %s over %s is the "
                          "baseline's), and %s%s uses the share where the %s is needed: a missing all-reduce (%s) over %s",
                          ls->partial->name, red, ax.s, ls->partial == ls->in ? "the program" : ls->in->name,
                          ls->partial == ls->in ? " goes on and" : "", red, red, ax.s);
            else if (ls->scale)
                sb_printf(&msg, "executed, the first value that is none of the baseline's (in any sharding) is %s, "
                          "%.6g times the baseline's %s", ui->name, ls->scale, ls->like->name);
            else
                sb_printf(&msg, "executed, the first value that is none of the baseline's (in any sharding), computed from "
                          "values that are, is %s", ui->name);
            sb_free(&ax);
        } else if (div && lc.divergence_layout)
            sb_printf(&msg, "first divergence at %s: it rearranges baseline values into a layout no baseline value has, "
                      "and the program computes with them in that layout", ui->name);
        else if (div && lc.divergence_note)
            sb_printf(&msg, "first divergence at %s: %s%s%s", ui->name, lc.divergence_note, lc.divergence_cause ? ": " : "",
                      lc.divergence_cause ? lc.divergence_cause : "");
        else if (div) sb_printf(&msg, "first divergence at %s", ui->name);
        else if (lc.divergence)
            sb_printf(&msg, "the first instruction not related is %s (%s); the first divergence, %s, comes after the '%s' "
                      "region assumed equal to the baseline's", ui->name, lc.unsupported_why, lc.divergence->name,
                      lc.resync_scope ? lc.resync_scope : "?");
        else if (later)
            sb_printf(&msg, "the first instruction not related after the '%s' region assumed equal to the baseline's is %s (%s; "
                      "the first overall is %s)", lc.resync_scope ? lc.resync_scope : "?", ui->name, lc.later_unsupported_why,
                      lc.first_unsupported->name);
        else if (lc.first_unsupported) sb_printf(&msg, "the first instruction not related is %s (%s)", ui->name, lc.unsupported_why);
        else
            sb_printf(&msg, "the rules localise no divergence: every instruction before the output %s is related to "
                      "baseline values, yet the output meets none of the baseline's", ui->name);
        add_finding(r, &cap, kind, SEV_ERROR, msg.s, uc, ui)->witness = true;
        sb_free(&msg);
    } else if (outputs_ok && !lc.first_unsupported && lc.assumed == lc.opaque && !lc.resynced) {
        verdict = VERDICT_VERIFIED;
    } else {
        /* Undecided: the trace says where and why, as a warning-level finding. */
        verdict = VERDICT_UNVERIFIED;
        const hlo_comp *uc = lc.first_unsupported ? lc.first_unsupported_comp : lc.divergence_comp;
        const hlo_instr *ui = lc.first_unsupported ? lc.first_unsupported : lc.divergence;
        if (!ui) /* the output not related: where its value is made */
            ui = output_producer(D.m, de, bad_out, &uc);
        /* A dump that left a constant's values out ({...}: text dumps do for
         * large ones) is a reason when the divergence or an output depends on
         * one: terms built on it never meet, whatever the rules. */
        const hlo_instr *el = elided_ancestor(D.m, uc, ui), *at = ui;
        if (!el) el = elided_ancestor(D.m, de, at = &de->instrs[de->root]);
        const side *els = el ? &D : &B;
        if (!el) el = elided_ancestor(B.m, be, at = &be->instrs[be->root]);
        strbuf msg;
        sb_init(&msg);
        if (el) {
            strbuf sh;
            sb_init(&sh);
            shape_print(&sh, &el->shape);
            sb_printf(&msg, "unverified: the %s dump %s leaves out the values of %s (%s, printed as {...})", els == &D ? "distributed" : "baseline",
                      els->path, el->name, sh.s);
            if (el != at)
                sb_printf(&msg, ", on which %s%s depends", at == lc.divergence ? "the first divergence " : at == ui ? "" : "the output ",
                          at->name);
            sb_printf(&msg, ", so terms built on it cannot be compared with the %s's; the protobuf dump (.pb) carries the values: "
                      "check that instead (%s)", els == &D ? "baseline" : "distributed program",
                      lc.first_unsupported ? lc.unsupported_why : why.s);
            sb_free(&sh);
        } else if (lc.first_unsupported && outputs_ok && !lc.assumed) {
            sb_printf(&msg, "unverified: every output meets the baseline's, assuming the '%s' region (%s) computes what the "
                      "baseline's does", lc.resync_scope ? lc.resync_scope : "?", lc.unsupported_why);
        } else if (lc.first_unsupported) {
            sb_printf(&msg, "unverified: %s", lc.unsupported_why);
        } else if (met_divergence) {
            sb_printf(&msg, "unverified: %s; the first divergence found while lifting, %s, meets the baseline's value once "
                      "rewritten, and where the programs part after it is not located (the output is made at %s)",
                      why.s ? why.s : "the outputs meet only through values not proved to be the baseline's",
                      met_divergence->name, ui->name);
        } else if (!lc.divergence) {
            /* No term left the baseline's values from related operands: the
             * output is where the relation is lost, nothing before it. */
            sb_printf(&msg, "unverified: %s; no first divergence: the values the output %s is computed from are related "
                      "to the baseline's, what it makes of them is not related to the baseline output",
                      why.s ? why.s : "the outputs meet only through values not proved to be the baseline's", ui->name);
        } else {
            sb_printf(&msg, "unverified: %s; first divergence at %s, whose operands are related",
                      why.s ? why.s : "the outputs meet only through values not proved to be the baseline's", ui->name);
            /* a factor here is no finding (a later op may cancel it): its words
             * without a cause */
            if (ui == lc.divergence && lc.divergence_note) sb_printf(&msg, " (%s)", lc.divergence_note);
        }
        if (!el && !lc.first_unsupported) {
            if (final_run) /* sr.last is that run's result */
                sb_printf(&msg, " (still apart after equality saturation with %u rule%s: %u iteration%s, stopped: %s)",
                          sr.last.nrules, sr.last.nrules == 1 ? "" : "s", final_run->iterations,
                          final_run->iterations == 1 ? "" : "s", trace_stop_name(final_run->stop));
            else if (!o->rules_dir) sb_puts(&msg, " (no rewrite rules were given)");
        }
        if (w.ran && w.agrees)
            sb_printf(&msg, "; the outputs agree on seeded random inputs (max abs difference %g, %.3g of their magnitude)",
                      w.max_abs, w.max_rel);
        else if (witness_undecided(&w))
            sb_printf(&msg, "; execution decides nothing: %s", w.why);
        else if (w.ran && w.over_tight)
            sb_printf(&msg, "; on seeded random inputs the outputs differ by up to %g (%.3g of their magnitude): more than "
                      "rounding explains, less than decides a mismatch", w.max_abs, w.max_rel);
        else if (w.ran) /* not agreeing only because some outputs were not compared */
            sb_printf(&msg, "; on seeded random inputs the compared outputs agree (max abs difference %g), %u output block%s "
                      "not compared (%s)", w.max_abs, w.skipped, w.skipped == 1 ? "" : "s", w.why);
        else if (o->witness && w.why[0]) sb_printf(&msg, "; witness %s", w.why); /* why execution could not decide */
        add_finding(r, &cap, KIND_UNSUPPORTED_OP, SEV_WARNING, msg.s, uc, ui)->witness = w.ran;
        sb_free(&msg);
    }
    double t4 = now_ms();

    /* A segment is a memo hit when all its distributed runs were. */
    for (uint32_t i = 0; i < lc.nsegs; i++) r->memo_hits += lc.segs[i].runs && lc.segs[i].memo_hits == lc.segs[i].runs;
    r->threads = o->jobs >= 2 ? 2 : 1; /* that read the two programs */
    /* Building the baseline outside any segment's instructions: splitting both
     * programs into runs for the memo, the baseline's parameters. With the
     * segments' timings it adds up to the checking time. */
    double setup_ms = t2 - t1;
    for (uint32_t i = 0; i < lc.nsegs; i++) setup_ms -= lc.segs[i].build_ms;
    r->setup_ms = setup_ms > 0 ? setup_ms : 0;

    /* A finding belongs to the segment its instruction was counted to (an
     * instruction without an op_name scope: the one being walked). */
    for (size_t k = 0; k < r->nfindings; k++) {
        const char *at = lift_segment_at(&lc, r->findings[k].comp, r->findings[k].in);
        if (at && strcmp(at, r->findings[k].segment) != 0) {
            free(r->findings[k].segment);
            r->findings[k].segment = xstrdup(at);
        }
    }
    if (r->nfindings) keep_provenance(r, &lc, &rel.mesh);
    lift_values_done(&lc); /* before the segments' results are made: a lower peak */
    judge_segments(r, (trace_verdict)verdict, contradicted, &lc, &sr, final_run, sat_ms, t4 - t3 - sat_ms);
    if (lc.assumptions.len) r->assumptions = xstrdup(lc.assumptions.s);
    r->w.seed = w.seed, r->w.max_abs = w.max_abs, r->w.max_rel = w.max_rel;
    r->w.outcome = !w.ran ? NULL : w.differs ? "differs" : w.agrees ? "agrees" : witness_undecided(&w) ? "undecided" : "between";
    if (witness_undecided(&w)) snprintf(r->w.note, sizeof r->w.note, "%s", w.why);
    r->verdict = verdict;

    sb_free(&why);
    lift_teardown(&sr, &lc, &a, g);
    free(rel0.inputs);
    free(rel0.outputs);
out:;
    /* What the trace says of each module; the modules themselves only findings
     * need (their sites, snippets, subgraphs): without any they are freed
     * before the trace is written, which at 200k segments is most of the
     * memory still held. (A declaration may not follow a label before C23:
     * clang, which make fuzz uses, says so.) */
    side *both[2] = {&B, &D};
    for (int k = 0; k < 2; k++)
        if (both[k]->m) {
            both[k]->name = xstrdup(both[k]->m->name);
            both[k]->instructions = graph_instr_count(both[k]->m);
            if (verdict != VERDICT_ERROR && r->nfindings == 0) {
                graph_free(both[k]->m);
                both[k]->m = NULL;
            }
        }
    r->base = B;
    r->dist = D;
    r->rel = rel;
    r->verdict = verdict;
    r->wall_ms = now_ms() - t0;
    r->cpu_ms = cpu_ms() - c0;
    r->peak_bytes = peak_rss_bytes();
    return verdict;
}

void check_result_free(check_result *r) {
    findings_clear(r);
    pv_free(r->views);
    free(r->findings);
    for (size_t i = 0; i < r->nsegs; i++) {
        for (size_t k = 0; k < r->segs[i].ntop; k++) free(r->segs[i].top[k].rule);
        free(r->segs[i].top);
        free(r->segs[i].name);
        free(r->segs[i].memo_of);
    }
    free(r->segs);
    free(r->assumptions);
    relations_free(&r->rel);
    free(r->base.name);
    free(r->dist.name);
    graph_free(r->base.m);
    graph_free(r->dist.m);
    memset(r, 0, sizeof *r);
}

int check_pair(const check_opts *o, json_t **trace, diag *d) {
    check_result r;
    int v = check_run(o, &r, d);
    *trace = v == VERDICT_ERROR ? NULL : trace_write(o, &r);
    check_result_free(&r);
    return v;
}
