/* lift_memo — the segment memo (DESIGN §6; contract in lift_int.h).
 *
 * Runs (segrun.h) of each side's segment computation are compared with
 * earlier representatives: a baseline run equal to one is named, not built; a
 * distributed run equal to one, with inputs related the same way, takes its
 * results from it instead of being lifted. How, in detail, below. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "debug.h"
#include "lift_int.h"
#include "segrun.h"

/* ---- segment memo (DESIGN §6) ----
 *
 * Each side has one segment computation: the one split into the most runs
 * (segrun.h) — the entry of a flat module, the body of a shard_map.
 *
 * Baseline: a run structurally equal to an earlier representative, with the
 * same inputs (views, kinds, constants), computes the same function of its
 * inputs; it is not built but named — each exported value is the e-node
 * EG_OP_APP(representative, position) over the run's input terms. Should the
 * distributed side need such a run's inner values (its own run of that scope
 * is not a memo hit), the run is built after all and every name is merged with
 * the term it names.
 *
 * Distributed: a run lifted cleanly — no finding, nothing unsupported or
 * assumed — whose every input is a baseline input of the baseline run of its
 * scope, and whose every exported value is that baseline run's exported value
 * (or an input, or constant-only), becomes a representative — by
 * construction, or once the e-graph is saturated right after it when that is
 * what it takes and later runs could reuse it (memo_record_saturated). A later run is a
 * memo hit when it is structurally equal to a representative, its inputs have
 * the same views and kinds and are the same inputs of its baseline run, and
 * its baseline run has the representative's baseline run's structure: lifting
 * it would build the same terms over its inputs, so its exported values are
 * the corresponding values of its baseline run with the representative's
 * views. Nothing is assumed: a run that is not a hit is lifted. */
struct lf_memo_side {
    const hlo_comp *comp;         /* the segment computation, or NULL */
    sr_runs runs;
    lval *vals;                   /* its values (its first walk) */
    bool walking, walked;
    /* Each side has only its own of the arrays below (the others NULL).
     * distributed representatives (ext non-NULL): slot values, the baseline run,
     * per slot the baseline slot it is (-1: compared as is), per position the
     * baseline position it is (>= 0), slot s (-2 - s) or itself (-1) */
    lval **ext;
    uint32_t *base_run;
    int32_t **slot_map, **out_map;
    uint32_t *outside;            /* values outside the baseline it computed (not exported) */
    bool *sat_failed;             /* saturating after it did not make it a representative */
    uint32_t *rep;                /* baseline: representative of each run (SR_NONE: none) */
    bool *abstract;               /* baseline: built as EG_OP_APP names, not lifted (yet) */
    /* Representatives by shape (fingerprint, length, slot count; runs of
     * another shape are never sr_equal): per shape the first, per
     * representative the next, in run order. Candidates are looked up here,
     * not searched for among all earlier runs (quadratic in the depth). */
    uint32_t *shape_of;           /* per run: its shape */
    uint32_t *shape_head, *rep_next;
    uint32_t *shape_runs;         /* per shape: its number of runs (1: it can neither hit nor be reused) */
    /* baseline: per run the next run of its scope (memo_materialise) */
    uint32_t *scope_next;
    /* distributed: per run the baseline run of its scope + 1, 0 when that
     * scope has none or several (looked up once, not per run walked) */
    uint32_t *scope_base;
    /* Baseline, once walked (lf_memo_release_base): the values the memo reads
     * kept on their own — kept[at[i] - 1] for instruction i, at[i] 0 when
     * not kept — so that vals, the whole walk's, can go; scratch (NULL until
     * memo_materialise needs it) holds the values of a run built after all.
     * Nearly every kept value is a plain term with a dup view (one device):
     * kept in 24 bytes (memo_tiny); the rare other one, AT_FULL in at[i],
     * whole in full[]. */
    struct memo_tiny *kept;
    uint32_t *at;
    lval *full;
    size_t nfull, capfull;
    lval *scratch;
    size_t scratch_len;
};

struct lift_memo {
    arena a;                      /* the runs and what is kept per run: freed at once when futile */
    lf_memo_side side[2];            /* 0 baseline, 1 distributed */
    bool futile;                  /* no two distributed runs share a shape: no hit is possible */
    strmap scope_first;           /* scope -> its first baseline run */
};

static uint64_t run_shape_key(const sr_run *x) {
    return hash_mix(hash_mix(x->fp, x->i1 - x->i0), x->nslots);
}

/* Numbers the runs' shapes (equal fingerprint, length and slot count). */
static void number_shapes(arena *a, lf_memo_side *ms) {
    uint32_t n = ms->runs.n, cap = 16, nshapes = 0;
    while (cap < 2 * n) cap *= 2;
    uint32_t *slot = xmalloc(cap * sizeof *slot); /* shape + 1, 0 empty */
    memset(slot, 0, cap * sizeof *slot);
    ms->shape_of = arena_alloc(a, (n + 1) * sizeof *ms->shape_of);
    uint32_t *first = xmalloc((n + 1) * sizeof *first); /* per shape: a run of it */
    for (uint32_t r = 0; r < n; r++) {
        const sr_run *x = &ms->runs.runs[r];
        uint32_t h = (uint32_t)run_shape_key(x) & (cap - 1);
        for (;; h = (h + 1) & (cap - 1)) {
            if (!slot[h]) {
                first[nshapes] = r;
                slot[h] = ++nshapes;
                break;
            }
            const sr_run *y = &ms->runs.runs[first[slot[h] - 1]];
            if (y->fp == x->fp && y->i1 - y->i0 == x->i1 - x->i0 && y->nslots == x->nslots) break;
        }
        ms->shape_of[r] = slot[h] - 1;
    }
    free(slot);
    free(first);
    ms->shape_runs = arena_alloc(a, (nshapes + 1) * sizeof *ms->shape_runs);
    for (uint32_t r = 0; r < n; r++) ms->shape_runs[ms->shape_of[r]]++;
    ms->shape_head = arena_alloc(a, (nshapes + 1) * sizeof *ms->shape_head);
    for (uint32_t k = 0; k < nshapes; k++) ms->shape_head[k] = SR_NONE;
    ms->rep_next = arena_alloc(a, (n + 1) * sizeof *ms->rep_next);
    for (uint32_t r = 0; r < n; r++) ms->rep_next[r] = SR_NONE;
}

/* Run r becomes a representative: into its shape's list, in run order. */
static void add_rep(lf_memo_side *ms, uint32_t r) {
    uint32_t *at = &ms->shape_head[ms->shape_of[r]];
    while (*at != SR_NONE && *at < r) at = &ms->rep_next[*at];
    if (*at == r) return;
    ms->rep_next[r] = *at;
    *at = r;
}

static const hlo_comp *segment_comp(const hlo_module *m) {
    const hlo_comp *best = graph_entry(m);
    uint32_t most = sr_count(best);
    for (uint32_t i = 0; i < m->ncomps; i++) {
        uint32_t n = m->comps[i].reducer ? 0 : sr_count(&m->comps[i]);
        if (n > most) {
            most = n;
            best = &m->comps[i];
        }
    }
    return most > 1 ? best : NULL;
}

/* No hit is possible: what was split is dropped (nothing reads it). */
static void memo_futile(lift_memo *mm) {
    mm->futile = true;
    arena_free(&mm->a);
    memset(mm->side, 0, sizeof mm->side);
}

static void memo_init(lift_ctx *c) {
    lift_memo *mm = arena_alloc(c->a, sizeof *mm);
    const hlo_module *mods[2] = {c->base, c->dist};
    c->memo = mm;
    arena *ma = &mm->a;
    arena_init(ma);
    /* The distributed side first: when no two of its runs share a shape, no
     * run can be a hit, and naming baseline runs would only cost (each is
     * built after all for its distributed run): the memo stops there and both
     * programs are lifted as with --no-memo. */
    for (int k = 1; k >= 0; k--) {
        lf_memo_side *ms = &mm->side[k];
        ms->comp = segment_comp(mods[k]);
        if (!ms->comp) {
            mm->futile |= k == 1;
            if (mm->futile) {
                memo_futile(mm);
                return;
            }
            continue;
        }
        sr_split(mods[k], ms->comp, ma, &ms->runs);
        uint32_t n = ms->runs.n + 1;
        if (k == 1) { /* representatives' bookkeeping */
            ms->ext = arena_alloc(ma, n * sizeof *ms->ext);
            ms->base_run = arena_alloc(ma, n * sizeof *ms->base_run);
            ms->slot_map = arena_alloc(ma, n * sizeof *ms->slot_map);
            ms->out_map = arena_alloc(ma, n * sizeof *ms->out_map);
            ms->outside = arena_alloc(ma, n * sizeof *ms->outside);
            ms->sat_failed = arena_alloc(ma, n * sizeof *ms->sat_failed);
        } else { /* named runs */
            ms->rep = arena_alloc(ma, n * sizeof *ms->rep);
            ms->abstract = arena_alloc(ma, n * sizeof *ms->abstract);
            for (uint32_t r = 0; r < ms->runs.n; r++) ms->rep[r] = SR_NONE;
        }
        number_shapes(ma, ms);
        if (k == 1) {
            mm->futile = true;
            for (uint32_t r = 0; r < ms->runs.n && mm->futile; r++) mm->futile = ms->shape_runs[ms->shape_of[r]] == 1;
            if (mm->futile) {
                memo_futile(mm);
                return;
            }
        }
    }
    strmap_init(&mm->scope_first);
    const sr_runs *br = &mm->side[0].runs;
    uint32_t *last = xmalloc((br->n + 1) * sizeof *last); /* per run: the last run of its scope so far */
    mm->side[0].scope_next = arena_alloc(ma, (br->n + 1) * sizeof *mm->side[0].scope_next);
    for (uint32_t r = 0; r < br->n; r++) {
        uint32_t first;
        mm->side[0].scope_next[r] = SR_NONE;
        if (strmap_get(&mm->scope_first, br->runs[r].scope, br->runs[r].nscope, &first)) {
            mm->side[0].scope_next[last[first]] = r;
            last[first] = r;
        } else {
            strmap_put(&mm->scope_first, br->runs[r].scope, br->runs[r].nscope, r);
            last[r] = r;
        }
    }
    free(last);
    /* A distributed run is compared only with the one baseline run of its
     * scope: when no run whose shape another shares has one (a training
     * step, whose every layer scope the forward and backward passes split
     * into several runs on both sides), no hit is possible either. */
    lf_memo_side *ds = &mm->side[1];
    ds->scope_base = arena_alloc(ma, (ds->runs.n + 1) * sizeof *ds->scope_base);
    mm->futile = true;
    for (uint32_t r = 0; r < ds->runs.n; r++) {
        uint32_t b = 0, first; /* the scope's baseline run + 1 when it has one only */
        if (strmap_get(&mm->scope_first, ds->runs.runs[r].scope, ds->runs.runs[r].nscope, &first) &&
            mm->side[0].scope_next[first] == SR_NONE)
            b = first + 1;
        ds->scope_base[r] = b;
        mm->futile &= ds->shape_runs[ds->shape_of[r]] == 1 || b == 0;
    }
    if (mm->futile && dbg_on(DBG_MEMO))
        fprintf(stderr, "memo: no distributed run has a baseline run of its scope to compare with: no hit is possible\n");
    if (mm->futile) memo_futile(mm);
}

/* A kept baseline value, as nearly all are: a term or unknown value with a
 * dup view, its class, rank, constant-only flag and factor, nothing else
 * (checked: the value rebuilt from these is the value byte for byte), and
 * the term its factor was put back into (corr, which baseline values keep
 * too): 24 bytes. The rare other one is kept whole (AT_FULL). */
typedef struct memo_tiny {
    eid cls, corr;
    uint8_t kind, rank, konst;
    double scale;
} memo_tiny;
#define AT_FULL 0x80000000u

static void tiny_get(const memo_tiny *t, lval *x) {
    memset(x, 0, sizeof *x);
    x->kind = t->kind;
    x->konst = t->konst;
    x->v = view_dup(t->rank);
    x->cls = t->cls;
    x->corr = t->corr;
    x->scale = t->scale;
}

/* Whether x has the tiny form; fills *t. */
static bool tiny_put(memo_tiny *t, const lval *x) {
    lval y;
    *t = (memo_tiny){.cls = x->cls, .corr = x->corr, .kind = x->kind, .rank = x->v.rank, .konst = x->konst, .scale = x->scale};
    tiny_get(t, &y);
    return memcmp(&y, x, sizeof y) == 0;
}

/* Baseline value i as the memo sees it: the walk's, or a copy of the one
 * kept (valid until the next call; zeros when not kept, which the memo
 * never asks for: see lf_memo_release_base). */
static const lval *base_val(const lf_memo_side *bs, uint32_t i) {
    static _Thread_local lval got;
    if (!bs->at) return &bs->vals[i];
    uint32_t k = bs->at[i];
    if (k & AT_FULL) return &bs->full[(k & ~AT_FULL) - 1];
    if (k) tiny_get(&bs->kept[k - 1], &got);
    else memset(&got, 0, sizeof got);
    return &got;
}

/* Replaces kept baseline value i (memo_materialise). */
static void base_set(lf_memo_side *bs, uint32_t i, const lval *x) {
    uint32_t k = bs->at[i];
    memo_tiny t;
    if (k & AT_FULL) {
        bs->full[(k & ~AT_FULL) - 1] = *x;
    } else if (k && tiny_put(&t, x)) {
        bs->kept[k - 1] = t;
    } else if (k) { /* kept whole from now on */
        XGROW(bs->full, bs->capfull, bs->nfull + 1);
        bs->full[bs->nfull++] = *x;
        bs->at[i] = AT_FULL | (uint32_t)bs->nfull;
    }
}

/* After the baseline's walk, the memo reads only some of its values: each
 * run's slots, the values it exports and its parameters (memo_hit,
 * memo_record, memo_materialise, which builds a run's other values again).
 * Those are kept on their own and vals is left to the caller. */
bool lf_memo_release_base(lift_ctx *c) {
    if (!c->memo || c->memo->futile) return true;
    lf_memo_side *bs = &c->memo->side[0];
    if (bs->comp != graph_entry(c->base)) return true; /* it reads a called computation's values */
    if (!bs->walked || !bs->vals || bs->at) return false;
    uint32_t n = bs->comp->ninstrs, nkept = 0, nfull = 0;
    uint32_t *at = xcalloc(n + 1, sizeof *at);
    for (uint32_t r = 0; r < bs->runs.n; r++) {
        const sr_run *x = &bs->runs.runs[r];
        for (uint32_t s = 0; s < x->nslots; s++) at[x->slots[s]] = 1;
        for (uint32_t i = x->i0; i < x->i1; i++)
            if (x->exported[i - x->i0] || bs->comp->instrs[i].op == OP_PARAMETER) at[i] = 1;
    }
    for (uint32_t i = 0; i < n; i++) nkept += at[i];
    bs->kept = xmalloc((size_t)(nkept + 1) * sizeof *bs->kept);
    nkept = 0;
    memo_tiny t;
    for (uint32_t i = 0; i < n; i++) {
        if (!at[i]) continue;
        if (tiny_put(&t, &bs->vals[i])) {
            bs->kept[nkept] = t;
            at[i] = ++nkept;
        } else {
            XGROW(bs->full, bs->capfull, nfull + 1);
            bs->full[nfull] = bs->vals[i];
            at[i] = AT_FULL | ++nfull;
        }
    }
    bs->nfull = nfull;
    bs->at = at;
    bs->vals = NULL;
    return true;
}

void lf_memo_free(lift_ctx *c) {
    if (c->memo) {
        lf_memo_side *bs = &c->memo->side[0];
        free(bs->kept);
        free(bs->full);
        free(bs->at);
        if (bs->scratch) munmap(bs->scratch, bs->scratch_len);
        arena_free(&c->memo->a);
        strmap_free(&c->memo->scope_first);
    }
    c->memo = NULL;
}

/* The memo side of comp when it is walked for the first time as its side's
 * segment computation; NULL otherwise. */
lf_memo_side *lf_memo_enter(lift_ctx *c, const hlo_comp *comp, lval *vals) {
    if (c->no_memo) return NULL;
    if (!c->memo) memo_init(c);
    if (c->memo->futile) return NULL;
    lf_memo_side *ms = &c->memo->side[c->baseline_mode ? 0 : 1];
    if (ms->comp != comp || ms->walked || ms->walking) return NULL;
    ms->walking = true;
    ms->vals = vals;
    return ms;
}

/* Two slot values that any run treats alike: same kind, view, flags, type,
 * the same kind of first node (canonical forms look at it) and, for values of
 * constants and device values, the same value. */
static bool same_input(lift_ctx *c, const lval *a, const lval *b, bool naming) {
    if (a->kind != b->kind) return false;
    if (a->kind == LV_DEV) return a->count == b->count && memcmp(a->dev, b->dev, a->count * c->ndev * sizeof *a->dev) == 0;
    if (a->kind != LV_TERM) return false;
    if (a->konst != b->konst || a->assumed != b->assumed || a->ambiguous != b->ambiguous ||
        a->partial_unsure != b->partial_unsure || a->merged_unit != b->merged_unit || a->guessed != b->guessed ||
        !view_equal(&a->v, &b->v) || lf_scale_of(a) != lf_scale_of(b))
        return false;
    if (a->konst) return eg_find(c->g, a->cls) == eg_find(c->g, b->cls);
    /* Naming a baseline layer needs only the same function; reusing a lifting
     * also needs the same canonical forms, which look at an input's first node. */
    return eg_class_type(c->g, a->cls) == eg_class_type(c->g, b->cls) &&
           (naming || eg_node_op(c->g, eg_class_first(c->g, a->cls)) == eg_node_op(c->g, eg_class_first(c->g, b->cls)));
}

static bool same_inputs(lift_ctx *c, const sr_run *a, const lval *avals, const sr_run *b, const lval *bvals, bool naming) {
    for (uint32_t s = 0; s < a->nslots; s++)
        if (!same_input(c, &avals[a->slots[s]], &bvals[b->slots[s]], naming)) return false;
    return true;
}

/* Why a run did not become a representative, with SCALIFY_DEBUG=memo. */
static void memo_debug(const lf_memo_side *ms, uint32_t r, const char *why) {
    const sr_run *run = &ms->runs.runs[r];
    if (dbg_on(DBG_MEMO)) fprintf(stderr, "memo: run %u (%.*s) is no representative: %s\n", r, (int)run->nscope, run->scope, why);
}

/* Baseline run r, about to be walked: when an earlier representative is
 * structurally equal and has the same inputs, r computes the same function of
 * its own inputs, so its exported values are named, not built: EG_OP_APP(q, p)
 * over r's input terms for a term, the representative's own value for a
 * constant-only term or a device value. Returns the representative (r is then
 * abstract), else SR_NONE. */
static uint32_t memo_base_hit(lift_ctx *c, lf_memo_side *ms, uint32_t r, lval *vals) {
    const sr_run *x = &ms->runs.runs[r];
    for (uint32_t q = ms->shape_head[ms->shape_of[r]]; q < r; q = ms->rep_next[q]) {
        const sr_run *y = &ms->runs.runs[q];
        if (ms->rep[q] != q || !sr_equal(c->base, ms->comp, y, ms->comp, x) || !same_inputs(c, y, ms->vals, x, vals, true)) continue;
        eid *ch = arena_alloc(c->a, (x->nslots + 1) * sizeof *ch);
        uint32_t nch = 0;
        for (uint32_t s = 0; s < x->nslots; s++)
            if (vals[x->slots[s]].kind == LV_TERM) ch[nch++] = eg_find(c->g, vals[x->slots[s]].cls);
        for (uint32_t p = 0; p < x->i1 - x->i0; p++) {
            lval *v = &vals[x->i0 + p];
            if (ms->comp->instrs[x->i0 + p].op == OP_PARAMETER) continue;
            if (!x->exported[p]) {
                *v = unknown();
                continue;
            }
            *v = vals[y->i0 + p];
            if (v->kind == LV_TERM && !v->konst) {
                int64_t attr[2] = {q, p};
                v->cls = eg_add(c->g, EG_OP_APP, eg_attr(c->g, attr, 2), eg_class_type(c->g, v->cls), ch, nch, EG_BASELINE);
            }
        }
        ms->abstract[r] = true;
        ms->rep[r] = q;
        return q;
    }
    return SR_NONE;
}

/* After baseline run r was lifted: it represents its structure when its inputs
 * and exported values are all terms (none assumed) or device values and it
 * walked no loop (loops pair in walk order). */
static void memo_base_record(lift_ctx *c, lf_memo_side *ms, uint32_t r, const lval *vals, size_t nloops_before) {
    const sr_run *x = &ms->runs.runs[r];
    if (c->nloops != nloops_before) {
        memo_debug(ms, r, "it walks a loop (baseline)");
        return;
    }
    for (uint32_t p = 0; p < x->i1 - x->i0; p++) {
        const lval *v = &vals[x->i0 + p];
        if (x->exported[p] && !(v->kind == LV_DEV || (v->kind == LV_TERM && !v->assumed))) {
            memo_debug(ms, r, "a value it exports is neither a term nor a device value (baseline)");
            return;
        }
    }
    for (uint32_t s = 0; s < x->nslots; s++) {
        const lval *v = &vals[x->slots[s]];
        if (!(v->kind == LV_DEV || (v->kind == LV_TERM && !v->assumed))) return;
    }
    ms->rep[r] = r;
    add_rep(ms, r);
}

/* Builds the abstract baseline runs of a scope for real, before a distributed
 * run of that scope is lifted (it needs the baseline's inner values), and
 * merges each named value with the term it names. */
static void memo_materialise(lift_ctx *c, const char *scope, uint32_t nscope) {
    lf_memo_side *bs = &c->memo->side[0];
    bool any = false;
    uint32_t r0;
    if (!bs->comp || !strmap_get(&c->memo->scope_first, scope, nscope, &r0)) return;
    for (uint32_t r = r0; r != SR_NONE; r = bs->scope_next[r]) {
        const sr_run *x = &bs->runs.runs[r];
        if (!bs->abstract[r]) continue;
        bs->abstract[r] = false;
        uint32_t len = x->i1 - x->i0;
        lval *named = arena_alloc(c->a, (len + 1) * sizeof *named);
        for (uint32_t p = 0; p < len; p++) named[p] = *base_val(bs, x->i0 + p);
        /* The walk's values are gone (lf_memo_release_base): the run is
         * built in scratch over its kept slots and parameters. */
        lval *vals = bs->vals;
        if (!vals) {
            if (!bs->scratch) {
                bs->scratch_len = ((size_t)bs->comp->ninstrs + 1) * sizeof *bs->scratch;
                void *p = mmap(NULL, bs->scratch_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
                if (p == MAP_FAILED) xfatal("out of memory (mapping %zu bytes)", bs->scratch_len);
                bs->scratch = p;
            }
            vals = bs->scratch;
            for (uint32_t s = 0; s < x->nslots; s++) vals[x->slots[s]] = *base_val(bs, x->slots[s]);
            for (uint32_t i = x->i0; i < x->i1; i++)
                if (bs->comp->instrs[i].op == OP_PARAMETER) vals[i] = *base_val(bs, i);
        }
        /* Called while walking the distributed program: back to it after. */
        lf_walk_side(c, true);
        c->no_account = true;
        for (uint32_t i = x->i0; i < x->i1; i++)
            if (bs->comp->instrs[i].op != OP_PARAMETER) lf_lift_one(c, bs->comp, i, vals, NULL, NULL, 0);
        c->no_account = false;
        lf_walk_side(c, false);
        for (uint32_t p = 0; p < len; p++) {
            const lval *n = &named[p], *v = &vals[x->i0 + p];
            if (x->exported[p] && n->kind == LV_TERM && v->kind == LV_TERM) eg_union(c->g, n->cls, v->cls, NULL);
            if (x->exported[p] && vals != bs->vals) base_set(bs, x->i0 + p, v);
        }
        any = true;
    }
    if (any) eg_rebuild(c->g);
}

void lf_memo_leave(lift_ctx *c, lf_memo_side *ms) {
    (void)c;
    ms->walking = false;
    ms->walked = true;
}

/* The baseline run of distributed run r's scope, or SR_NONE. */
static uint32_t base_run_of(lift_ctx *c, uint32_t r) {
    const lf_memo_side *bs = &c->memo->side[0];
    uint32_t b = c->memo->side[1].scope_base[r];
    if (!bs->walked || b == 0) return SR_NONE;
    return bs->rep[b - 1] == SR_NONE ? SR_NONE : b - 1;
}

typedef struct memo_mark {
    uint32_t nfindings, nunsupported, noutside, resynced, ndoms; /* nfindings: with pending ones */
    size_t next_loop;             /* a run with a loop is not reused: loops pair in walk order */
    uint64_t assumed;
    size_t assumptions;
    const hlo_instr *divergence;
} memo_mark;

static memo_mark memo_mark_now(const lift_ctx *c) {
    return (memo_mark){c->nfindings + c->npending, c->nunsupported, c->noutside, c->resynced, c->ndoms, c->next_loop, c->assumed,
                       c->assumptions.len, c->divergence};
}

/* Takes distributed run r's exported values from a representative when it is
 * a hit (see above); returns the representative, else SR_NONE. */
static uint32_t memo_hit(lift_ctx *c, lf_memo_side *ms, uint32_t r, lval *vals) {
    if (ms != &c->memo->side[1]) return SR_NONE;
    const sr_run *run = &ms->runs.runs[r];
    c->memo_runs++;
    uint32_t br = base_run_of(c, r);
    if (br == SR_NONE) return SR_NONE;
    const lf_memo_side *bs = &c->memo->side[0];
    const sr_run *brun = &bs->runs.runs[br];
    for (uint32_t q = ms->shape_head[ms->shape_of[r]]; q < r; q = ms->rep_next[q]) {
        const sr_run *rr = &ms->runs.runs[q];
        if (!ms->ext[q] || bs->rep[ms->base_run[q]] != bs->rep[br] || !sr_equal(c->dist, ms->comp, rr, ms->comp, run)) continue;
        bool ok = true;
        for (uint32_t s = 0; s < run->nslots && ok; s++) {
            const lval *now = &vals[run->slots[s]];
            int32_t t = ms->slot_map[q][s];
            ok = same_input(c, &ms->ext[q][s], now, false) &&
                 (t < 0 || eg_find(c->g, now->cls) == eg_find(c->g, base_val(bs, brun->slots[t])->cls));
        }
        if (!ok) continue;
        for (uint32_t p = 0; p < run->i1 - run->i0; p++) {
            lval *v = &vals[run->i0 + p];
            if (ms->comp->instrs[run->i0 + p].op == OP_PARAMETER) continue;
            if (!run->exported[p]) {
                *v = unknown();
                continue;
            }
            *v = ms->vals[rr->i0 + p];
            if (v->pid) v->pid = ++c->npids; /* this run's partial sums are values of their own */
            int32_t m = ms->out_map[q][p];
            if (m >= 0) v->cls = base_val(bs, brun->i0 + (uint32_t)m)->cls;
            else if (m <= -2) v->cls = vals[run->slots[-2 - m]].cls;
        }
        c->memo_hits++;
        return q;
    }
    return SR_NONE;
}

/* Why a distributed run did or did not become a representative. */
typedef enum memo_why {
    MEMO_RECORDED,
    MEMO_APART,    /* clean, but a term of it meets no baseline class (yet) */
    MEMO_NEVER,    /* a finding, something unsupported or assumed, no baseline run */
} memo_why;

/* After distributed run r was lifted: makes it a representative when it was
 * clean and its inputs and exported values are its baseline run's. A first
 * divergence recorded in r makes it apart, unless the e-graph was saturated
 * since (the divergent term may have met the baseline's then). */
static memo_why memo_record(lift_ctx *c, lf_memo_side *ms, uint32_t r, const lval *vals, const memo_mark *before,
                            bool saturated) {
    memo_mark now = memo_mark_now(c);
    if (now.nfindings != before->nfindings || now.nunsupported != before->nunsupported ||
        now.resynced != before->resynced || now.ndoms != before->ndoms || now.next_loop != before->next_loop ||
        now.assumed != before->assumed || now.assumptions != before->assumptions) {
        memo_debug(ms, r, "not clean (findings, unsupported or assumed values)");
        return MEMO_NEVER;
    }
    const sr_run *run = &ms->runs.runs[r];
    uint32_t br = base_run_of(c, r);
    if (br == SR_NONE) {
        memo_debug(ms, r, "no baseline run of that scope to compare with");
        return MEMO_NEVER;
    }
    if (now.divergence != before->divergence && !saturated) {
        memo_debug(ms, r, "a term of it meets no baseline class (the first divergence)");
        return MEMO_APART;
    }
    const lf_memo_side *bs = &c->memo->side[0];
    const sr_run *brun = &bs->runs.runs[br];
    int32_t *smap = arena_alloc(c->a, (run->nslots + 1) * sizeof *smap);
    for (uint32_t s = 0; s < run->nslots; s++) {
        const lval *x = &vals[run->slots[s]];
        smap[s] = -1;
        if (x->kind == LV_DEV || (x->kind == LV_TERM && x->konst)) continue;
        if (x->kind != LV_TERM || x->assumed) return MEMO_NEVER;
        for (uint32_t t = 0; t < brun->nslots && smap[s] < 0; t++) {
            const lval *y = base_val(bs, brun->slots[t]);
            if (y->kind == LV_TERM && eg_find(c->g, y->cls) == eg_find(c->g, x->cls) && lf_scale_of(y) == lf_scale_of(x))
                smap[s] = (int32_t)t;
        }
        if (smap[s] < 0) {
            memo_debug(ms, r, "an input is not an input of the baseline run");
            return MEMO_APART;
        }
    }
    uint32_t len = run->i1 - run->i0;
    int32_t *omap = arena_alloc(c->a, (len + 1) * sizeof *omap);
    for (uint32_t p = 0; p < len; p++) {
        const lval *x = &vals[run->i0 + p];
        omap[p] = -1;
        if (!run->exported[p] || x->kind == LV_DEV || (x->kind == LV_TERM && x->konst)) continue;
        if (x->kind != LV_TERM || x->assumed) return MEMO_NEVER;
        eid want = eg_find(c->g, x->cls);
        for (uint32_t q = 0; q < brun->i1 - brun->i0 && omap[p] < 0; q++) {
            const lval *y = base_val(bs, brun->i0 + q);
            if (brun->exported[q] && y->kind == LV_TERM && eg_find(c->g, y->cls) == want && lf_scale_of(y) == lf_scale_of(x))
                omap[p] = (int32_t)q;
        }
        for (uint32_t s = 0; s < run->nslots && omap[p] < 0; s++)
            if (vals[run->slots[s]].kind == LV_TERM && eg_find(c->g, vals[run->slots[s]].cls) == want &&
                lf_scale_of(&vals[run->slots[s]]) == lf_scale_of(x))
                omap[p] = -2 - (int32_t)s;
        if (omap[p] == -1) {
            memo_debug(ms, r, "an exported value is not the baseline run's");
            return MEMO_APART;
        }
    }
    lval *ext = arena_alloc(c->a, (run->nslots + 1) * sizeof *ext);
    for (uint32_t s = 0; s < run->nslots; s++) ext[s] = vals[run->slots[s]];
    ms->ext[r] = ext;
    ms->base_run[r] = br;
    ms->slot_map[r] = smap;
    ms->out_map[r] = omap;
    ms->outside[r] = now.noutside - before->noutside;
    add_rep(ms, r);
    return MEMO_RECORDED;
}

/* Whether a later run of the segment computation has run r's structure (by
 * fingerprint): only then is r worth making a representative at some cost. */
static bool memo_reusable(const lf_memo_side *ms, uint32_t r) {
    const sr_run *x = &ms->runs.runs[r];
    for (uint32_t q = r + 1; q < ms->runs.n; q++) {
        const sr_run *y = &ms->runs.runs[q];
        if (y->fp == x->fp && y->i1 - y->i0 == x->i1 - x->i0 && y->nslots == x->nslots) return true;
    }
    return false;
}

/* Distributed run r was lifted cleanly, but some of its terms meet the
 * baseline's only through rewrites (an expert-parallel layer's combine, say):
 * when later runs could reuse it, the checker saturates the e-graph now
 * (c->saturate), and if r's inputs and exported values are then its baseline
 * run's it becomes a representative, as if they had met by construction. The
 * first divergence and what r counted outside the baseline stay as lifting
 * left them, and its hits count the same: findings and segment verdicts are
 * those of checking without the memo. Saturation that does not help is not tried again for runs equal to r, and
 * at most MEMO_SAT_FAILS times in all; nor is it run more than MEMO_SAT_RUNS
 * times (each is over the whole e-graph, so a program whose every layer
 * needed its own would cost quadratically: its later layers are lifted). */
#define MEMO_SAT_FAILS 2
#define MEMO_SAT_RUNS 8
static void memo_record_saturated(lift_ctx *c, lf_memo_side *ms, uint32_t r, const lval *vals, const memo_mark *before) {
    if (!c->saturate || c->memo_sat_fails >= MEMO_SAT_FAILS || c->memo_sat_runs >= MEMO_SAT_RUNS || !memo_reusable(ms, r))
        return;
    const sr_run *run = &ms->runs.runs[r];
    for (uint32_t q = 0; q < r; q++)
        if (ms->sat_failed[q] && sr_equal(c->dist, ms->comp, &ms->runs.runs[q], ms->comp, run)) return;
    /* The lifting so far is charged to the segment; saturation's time and
     * e-nodes are the checker's to report, not lifting's. */
    if (c->acct_t > 0) lf_charge_segment(c, now_ms(), eg_node_count(c->g));
    bool ran = c->saturate(c, c->saturate_arg);
    c->memo_sat_runs += ran;
    lf_kvals_after_unions(c);
    c->acct_t = now_ms();
    c->acct_nodes = eg_node_count(c->g);
    if (ran && memo_record(c, ms, r, vals, before, true) != MEMO_RECORDED) {
        ms->sat_failed[r] = true;
        c->memo_sat_fails++;
    }
}

uint32_t lf_memo_run_at(const lf_memo_side *ms, uint32_t i) { return ms->runs.start[i]; }

/* Lifts run r of the segment computation (its parameters first), or takes it
 * from the memo; returns the instruction after it. */
uint32_t lf_memo_lift_run(lift_ctx *c, lf_memo_side *ms, uint32_t r, const hlo_comp *comp, lval *vals, const lval *args,
                          const view *inputs, uint32_t ninputs) {
    const sr_run *run = &ms->runs.runs[r];
    /* Parameters listed inside the run are its inputs: lifted first. */
    for (uint32_t j = run->i0; j < run->i1; j++)
        if (comp->instrs[j].op == OP_PARAMETER) lf_lift_one(c, comp, j, vals, args, inputs, ninputs);
    bool base = ms == &c->memo->side[0];
    /* A distributed run of a shape no other run has can neither be a hit nor
     * be reused: it is lifted without the memo's bookkeeping. */
    bool alone = !base && ms->shape_runs[ms->shape_of[r]] == 1;
    c->memo_runs += alone;
    uint32_t rep = base ? memo_base_hit(c, ms, r, vals) : alone ? SR_NONE : memo_hit(c, ms, r, vals);
    bool hit = rep != SR_NONE;
    if (!hit && !base) memo_materialise(c, run->scope, run->nscope);
    memo_mark mk = memo_mark_now(c);
    size_t nloops = c->nloops;
    for (uint32_t i = run->i0; i < run->i1; i++)
        if (comp->instrs[i].op != OP_PARAMETER) {
            if (hit) lf_account_tree(c, &comp->instrs[i]);
            else lf_lift_one(c, comp, i, vals, args, inputs, ninputs);
        }
    if (!base && c->nsegs) {
        c->segs[c->cur_seg].runs++;
        c->segs[c->cur_seg].memo_hits += hit;
        if (hit) {
            /* What the representative computed outside the baseline (terms
             * that met nothing on the way) counts here too. */
            c->segs[c->cur_seg].outside += ms->outside[rep];
            c->noutside += ms->outside[rep];
            const sr_run *rr = &ms->runs.runs[rep];
            uint32_t here = c->cur_seg;
            c->segs[here].memo_of = (int32_t)lf_segment_of(c, rr->scope, rr->nscope);
            c->cur_seg = here;
        }
    }
    if (!hit && base) memo_base_record(c, ms, r, vals, nloops);
    else if (!hit && !alone && memo_record(c, ms, r, vals, &mk, false) == MEMO_APART) memo_record_saturated(c, ms, r, vals, &mk);
    return run->i1;
}
