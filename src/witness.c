#include "witness.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "debug.h"
#include "interp.h"

/* Where a value comes from, in range_in's walk: other data, parameter k
 * through arithmetic, constants only, parameter k itself through ops that
 * only move or convert its elements. */
enum { FROM_OTHER = -1, FROM_K = 0, FROM_CONST = 1, FROM_K_ITSELF = 2 };
#define IS_FROM_K(f) ((f) == FROM_K || (f) == FROM_K_ITSELF)

/* The least extent along which computation ci of m picks rows with a
 * value computed from the parameters marked in from_k alone (through layout
 * ops, converts, wrap-around selects, arithmetic with constants and calls):
 * a gather's or scatter's one indexed dim, a dynamic-slice's starts, the
 * iota a one-hot compares it with; 0 when it indexes nothing. from_k holds
 * FROM_ codes per parameter. *tested: an integer literal the marked
 * parameters' own elements are compared with for (in)equality (labels !=
 * -100; the last one met), left as it is when there is none. */
static int64_t range_in(const hlo_module *m, uint32_t ci, const int *from_k, int depth, int64_t *tested) {
    const hlo_comp *c = &m->comps[ci];
    int *src = xmalloc((size_t)(c->ninstrs ? c->ninstrs : 1) * sizeof *src);
    for (uint32_t i = 0; i < c->ninstrs; i++) src[i] = FROM_OTHER;
    for (uint32_t q = 0; q < c->nparams; q++)
        if (IS_FROM_K(from_k[q]) && c->params[q] < c->ninstrs) src[c->params[q]] = from_k[q];
    int64_t range = 0;
    for (uint32_t i = 0; i < c->ninstrs; i++) {
        const hlo_instr *in = &c->instrs[i];
        int from = FROM_OTHER;
        int64_t r = 0;
        switch (in->op) {
        case OP_PARAMETER: from = src[i]; break;
        case OP_CONSTANT: case OP_IOTA: from = FROM_CONST; break;
        case OP_CONVERT: case OP_RESHAPE: case OP_BROADCAST: case OP_SLICE: case OP_COPY: case OP_BITCAST:
        case OP_TRANSPOSE: case OP_CONCATENATE: case OP_ADD: case OP_SUBTRACT: case OP_MULTIPLY: case OP_SELECT:
        case OP_CLAMP: case OP_MINIMUM: case OP_MAXIMUM: case OP_COMPARE: case OP_REMAINDER: case OP_NEGATE:
            from = FROM_CONST;
            for (uint32_t o = 0; o < in->noperands; o++) {
                int f = src[in->operands[o]];
                if (f == FROM_OTHER) from = FROM_OTHER;
                else if (IS_FROM_K(f) && from == FROM_CONST) from = FROM_K;
            }
            /* (the elements themselves, moved or converted) */
            if (in->noperands == 1 && src[in->operands[0]] == FROM_K_ITSELF && in->op != OP_NEGATE &&
                in->op != OP_COMPARE)
                from = FROM_K_ITSELF;
            break;
        case OP_CALL: {
            /* the callee, its parameters marked where the operands come from k */
            const hlo_attr *ta = instr_attr(in, A_TO_APPLY);
            bool any = false;
            int *marks = xcalloc(in->noperands + 1, sizeof *marks);
            for (uint32_t o = 0; o < in->noperands; o++) {
                marks[o] = IS_FROM_K(src[in->operands[o]]) ? src[in->operands[o]] : FROM_OTHER;
                any |= marks[o] != FROM_OTHER;
            }
            if (any && ta && ta->v.ints && ta->v.ints[0] >= 0 && ta->v.ints[0] < m->ncomps && depth < 8 &&
                m->comps[ta->v.ints[0]].nparams == in->noperands)
                r = range_in(m, (uint32_t)ta->v.ints[0], marks, depth + 1, tested);
            free(marks);
            break;
        }
        default: break;
        }
        src[i] = from;
        /* uses as indices */
        uint32_t n;
        const hlo_instr *a = in->noperands ? &c->instrs[in->operands[0]] : NULL;
        if ((in->op == OP_GATHER || in->op == OP_SCATTER) && in->noperands >= 2 && IS_FROM_K(src[in->operands[1]])) {
            /* (one indexed dim: with several, which component k feeds is not traced) */
            const int64_t *mp = instr_ints(in, in->op == OP_GATHER ? A_START_INDEX_MAP : A_SCATTER_DIMS_TO_OPERAND_DIMS, &n);
            if (n == 1 && mp[0] >= 0 && mp[0] < a->shape.rank) r = a->shape.dims[mp[0]];
        } else if (in->op == OP_DYNAMIC_SLICE && in->noperands == 1 + a->shape.rank) {
            for (uint32_t q = 0; q < a->shape.rank; q++)
                if (IS_FROM_K(src[in->operands[1 + q]])) {
                    int64_t e = a->shape.dims[q] - in->shape.dims[q] + 1;
                    if (r == 0 || e < r) r = e;
                }
        } else if (in->op == OP_COMPARE && in->noperands == 2) {
            const char *dir = instr_str(in, A_DIRECTION);
            bool eq = dir && (!strcmp(dir, "EQ") || !strcmp(dir, "NE"));
            for (uint32_t o = 0; o < 2; o++) {
                const hlo_instr *t = &c->instrs[in->operands[1 - o]];
                while ((t->op == OP_BROADCAST || t->op == OP_RESHAPE || t->op == OP_CONVERT) && t->noperands == 1)
                    t = &c->instrs[t->operands[0]];
                if (IS_FROM_K(src[in->operands[o]]) && t->op == OP_IOTA) {
                    int64_t id = instr_int(t, A_IOTA_DIMENSION, 0);
                    if (id >= 0 && id < t->shape.rank) r = t->shape.dims[id];
                }
                if (eq && src[in->operands[o]] == FROM_K_ITSELF && t->op == OP_CONSTANT && t->shape.rank == 0 &&
                    dtype_is_int(t->shape.dtype) && t->shape.dtype != DT_PRED) {
                    interp_val *v = interp_eval_instr(m, t, NULL, NULL);
                    if (v && v->i && v->n == 1) *tested = v->i[0];
                    interp_val_free(v);
                }
            }
        }
        if (r > 0 && (range == 0 || r < range)) range = r;
    }
    free(src);
    return range;
}

/* The range integer parameter k of the baseline's entry indexes (range_in). */
static int64_t index_range(const hlo_module *base, uint32_t k, int64_t *tested) {
    const hlo_comp *c = graph_entry(base);
    if (!c || k >= c->nparams) return 0;
    int *marks = xcalloc(c->nparams + 1, sizeof *marks);
    for (uint32_t q = 0; q < c->nparams; q++) marks[q] = q == k ? FROM_K_ITSELF : FROM_OTHER;
    int64_t r = range_in(base, (uint32_t)(c - base->comps), marks, 0, tested);
    free(marks);
    return r;
}

/* Whether parameter k of module m's entry is read by some instruction. */
static bool param_read(const hlo_module *m, uint32_t k) {
    const hlo_comp *c = graph_entry(m);
    if (!c || k >= c->nparams) return false;
    for (uint32_t i = 0; i < c->ninstrs; i++)
        for (uint32_t o = 0; o < c->instrs[i].noperands; o++)
            if (c->instrs[i].operands[o] == c->params[k]) return true;
    return false;
}

/* Tolerances relative to the output's scale (its largest magnitude):
 * summation order differs between the programs, so errors grow with the
 * values, not per element. Beyond TOL_DIFFERS the outputs differ (bugs in the
 * samples differ by the order of the values themselves). Within TOL_ROUNDING
 * they agree as rounding explains: every type runs unrounded in binary64, but
 * the programs' constants are values of their type (0.1f in one program, a
 * division by 10 in the other; f32(1/sqrt(8)) against a division by sqrt(8)),
 * which differ by the type's rounding — a unit in the last place of the
 * type at the output's scale. Between the two execution decides nothing (an
 * optimizer's update is small beside the parameters it changes: a wrong one
 * shows there). Beyond TOL_EXACT (binary64 rounding amplified up to ten
 * million times) a difference is no longer summation order alone: worth a
 * run on inputs whose sums are far from zero. */
enum tol { TOL_EXACT, TOL_ROUNDING, TOL_DIFFERS };

static double rel_tolerance(int dt, enum tol t) {
    /*                          TOL_EXACT TOL_ROUNDING TOL_DIFFERS */
    static const double f64[] = {1e-12, 1e-12, 1e-9}, f32[] = {1e-9, 0x1p-23, 1e-3}, f16[] = {1e-9, 0x1p-10, 0.1},
                        bf16[] = {1e-9, 0x1p-7, 0.1};
    switch (dt) {
    case DT_F64: return f64[t];
    case DT_F32: return f32[t];
    case DT_F16: return f16[t];
    case DT_BF16: return bf16[t];
    default: return 0;
    }
}

/* Part k of v: its elements, then a complex value's imaginary parts. */
static double part(const interp_val *v, int64_t k) { return k < v->n ? interp_val_get(v, k) : v->im[k - v->n]; }

static void compare(witness *w, const interp_val *want, const interp_val *got) {
    double scale = 0, worst = 0, worst_finite = 0;
    bool nan_mismatch = false, nonfinite = false;
    int64_t parts = want->im ? 2 * want->n : want->n, got_parts = got->im ? 2 * got->n : got->n;
    int dt = want->dtype == DT_C64 ? DT_F32 : want->dtype == DT_C128 ? DT_F64 : want->dtype;
    for (int64_t k = 0; k < parts; k++) {
        double a = part(want, k);
        if (isfinite(a) && fabs(a) > scale) scale = fabs(a);
        w->nan_seen |= isnan(a);
    }
    for (int64_t k = 0; k < parts && k < got_parts; k++) {
        double a = part(want, k), b = part(got, k);
        double diff = fabs(a - b);
        w->finite_seen |= isfinite(a);
        if (isnan(a) != isnan(b)) {
            diff = INFINITY;
            nan_mismatch = true;
        } else if (isnan(a) || (isinf(a) && a == b)) {
            diff = 0;
        }
        /* a non-finite value beside a finite one (or inf beside NaN) */
        if (diff > 0 && (!isfinite(a) || !isfinite(b))) nonfinite = true;
        else if (diff > worst_finite) worst_finite = diff;
        if (diff > worst) worst = diff;
        double rel = diff / (scale > 1e-30 ? scale : 1e-30);
        if (rel > w->max_rel) w->max_rel = rel;
    }
    if (worst > w->max_abs) w->max_abs = worst;
    if (worst_finite > w->max_finite) w->max_finite = worst_finite;
    bool finite_differs = parts != got_parts || worst_finite > rel_tolerance(dt, TOL_DIFFERS) * scale + 1e-6;
    if (finite_differs || (nan_mismatch && !nonfinite)) w->differs = true;
    else if (nonfinite) w->nonfinite = true;
    if (worst_finite > rel_tolerance(dt, TOL_ROUNDING) * scale + 1e-9) w->over_tight = true;
    if (worst_finite > rel_tolerance(dt, TOL_EXACT) * scale + 1e-9) w->over_exact = true;
}

/* One run on inputs drawn with seed, floats times input_scale (negative:
 * their magnitudes times its magnitude) plus shift; adds to w. */
enum { INTS_RANDOM, INTS_OFF_ZERO, INTS_OWNED, INTS_DISTINCT };

/* Replaces each value of v (in [0, range), n <= range) that an earlier
 * entry already holds by the next value not held yet; whether any was. */
static bool make_distinct(interp_val *v, int64_t range) {
    uint8_t *held = xcalloc((size_t)range + 1, 1);
    bool any = false;
    for (int64_t e = 0; e < v->n; e++) {
        int64_t x = v->i[e];
        if (x < 0 || x >= range) continue;
        if (held[x]) {
            while (held[x]) x = (x + 1) % range;
            v->i[e] = x;
            any = true;
        }
        held[x] = 1;
    }
    free(held);
    return any;
}

/* Integer input v (global dims) under view iv with the values of each block
 * in that block's share of [0, range): block b of P (the blocks of every
 * sharded dim, in mixed radix) in [b·range/P, (b+1)·range/P) — entries on
 * the device that owns the rows they index. False (v unchanged) when a block
 * would get no values. */
static bool fill_owned(interp_val *v, const view *iv, const mesh *m, int64_t range) {
    int64_t parts[INTERP_MAX_RANK], total = 1;
    for (uint32_t k = 0; k < v->rank; k++) total *= parts[k] = view_dim_parts(iv, m, k);
    if (total < 2 || range < total) return false;
    int64_t at[INTERP_MAX_RANK] = {0};
    for (int64_t e = 0; e < v->n; e++) {
        int64_t b = 0;
        for (uint32_t k = 0; k < v->rank; k++) b = b * parts[k] + at[k] / (v->dims[k] / parts[k]);
        int64_t lo = b * range / total, hi = (b + 1) * range / total;
        v->i[e] = lo + llabs(v->i[e]) % (hi - lo);
        for (uint32_t k = v->rank; k-- > 0;) {
            if (++at[k] < v->dims[k]) break;
            at[k] = 0;
        }
    }
    return true;
}

/* Whether some computation of m compares a value computed from an integer
 * parameter with one computed from the partition id (or one computed from
 * both): an ownership test, each device keeping the entries that fall in
 * its own rows (an edge list masked to its owner's destinations). */
static bool owner_test(const hlo_module *m) {
    /* flags per value, 1: from the partition id, 2: from an integer input;
     * followed into called computations (a loop body's gather of owned
     * rows) and out of them, to a fixed point */
    const hlo_comp *entry = graph_entry(m);
    uint8_t **f = xcalloc(m->ncomps + 1, sizeof *f), *pin = xcalloc(m->ncomps + 1, 1);
    for (uint32_t k = 0; k < m->ncomps; k++) f[k] = xcalloc(m->comps[k].ninstrs + 1, 1);
    bool hit = false, changed = true;
    for (int round = 0; changed && !hit && round < 64; round++) {
        changed = false;
        for (uint32_t k = 0; k < m->ncomps && !hit; k++) {
            const hlo_comp *c = &m->comps[k];
            for (uint32_t i = 0; i < c->ninstrs && !hit; i++) {
                const hlo_instr *in = &c->instrs[i];
                uint8_t from_ops = 0;
                for (uint32_t o = 0; o < in->noperands; o++) from_ops |= f[k][in->operands[o]];
                uint8_t any = from_ops;
                if (in->op == OP_PARTITION_ID) any |= 1;
                if (in->op == OP_PARAMETER) any |= c == entry ? (dtype_is_int(in->shape.dtype) ? 2 : 0) : pin[k];
                for (uint32_t a = 0; a < in->nattrs; a++) {
                    const hlo_attr *at = &in->attrs[a];
                    if (at->kind != K_COMP && at->kind != K_COMPS) continue;
                    for (uint32_t q = 0; q < (at->kind == K_COMP ? 1 : at->n); q++) {
                        int64_t cc = at->v.ints[q];
                        if (cc < 0 || (uint64_t)cc >= m->ncomps) continue;
                        if ((pin[cc] | from_ops) != pin[cc]) pin[cc] |= from_ops, changed = true;
                        if (m->comps[cc].ninstrs) any |= f[cc][m->comps[cc].root];
                    }
                }
                if (f[k][i] != any) f[k][i] = any, changed = true;
                hit = in->op == OP_COMPARE && any == 3;
            }
        }
    }
    for (uint32_t k = 0; k < m->ncomps; k++) free(f[k]);
    free(f);
    free(pin);
    return hit;
}

/* Integer inputs: random ones below int_below (INTS_RANDOM), kept off 0
 * (a length, a count, a divisor: INTS_OFF_ZERO), or those split over the
 * devices drawn within their owners' share of the range they index
 * (INTS_OWNED: parameter k where ranges[k] > 0; the others random). */
/* Whether the baseline's outputs move beyond the tolerance, and by a tenth
 * of the two programs' difference `apart` or more, when its float inputs
 * move by 1e-9 of their values: a program that amplifies rounding that much
 * on these inputs (an iterative solve of a random, ill-conditioned system,
 * saturating: chaos) differs from any other order of its sums by as much,
 * so a difference of the two programs there decides nothing; one far
 * beyond what the baseline's own sensitivity gives does. */
static bool amplifies(const hlo_module *base, const interp_config *cb, interp_val **global, uint32_t np,
                      const interp_val *bout, double apart) {
    interp_val **moved = xcalloc(np + 1, sizeof *moved);
    for (uint32_t k = 0; k < np; k++) {
        moved[k] = interp_val_slice(global[k], (int64_t[INTERP_MAX_RANK]){0}, global[k]->dims);
        for (int64_t e = 0; moved[k]->f && e < moved[k]->n; e++) moved[k]->f[e] *= 1 + 1e-9;
    }
    interp_val **args[1] = {moved}, *out = NULL;
    strbuf err;
    sb_init(&err);
    witness t = {0};
    if (interp_run(base, cb, (interp_val **const *)args, &out, &err) == INTERP_OK) {
        uint32_t n = bout->dtype == DT_TUPLE ? bout->nelems : 1;
        for (uint32_t o = 0; o < n && out->dtype == bout->dtype; o++)
            compare(&t, bout->dtype == DT_TUPLE ? bout->elems[o] : bout,
                    out->dtype == DT_TUPLE ? (o < out->nelems ? out->elems[o] : bout->elems[o]) : out);
    }
    interp_val_free(out);
    for (uint32_t k = 0; k < np; k++) interp_val_free(moved[k]);
    free(moved);
    sb_free(&err);
    return t.differs && t.max_abs >= 0.1 * apart;
}

static void run_once(const hlo_module *base, const hlo_module *dist, const relations *rel, uint64_t seed,
                     double input_scale, double shift, int64_t int_below, int ints, const int64_t *ranges,
                     const int64_t *own, const int64_t *sentinel, witness *w) {
    const hlo_comp *be = graph_entry(base);
    int64_t ndev = mesh_devices(&rel->mesh);
    interp_stats bs = {0}, ds = {0};
    interp_config cb = {.replicas = 1, .partitions = 1, .max_elements = WITNESS_MAX_ELEMENTS, .max_steps = WITNESS_MAX_STEPS,
                        .unrounded = true, .stats = &bs};
    interp_config cd = {.replicas = 1, .partitions = ndev, .max_elements = WITNESS_MAX_ELEMENTS, .max_steps = WITNESS_MAX_STEPS,
                        .unrounded = true, .stats = &ds};
    strbuf err;
    sb_init(&err);
    if (interp_check(base, &cb, &err) != INTERP_OK || interp_check(dist, &cd, &err) != INTERP_OK) {
        snprintf(w->why, sizeof w->why, "not run: %s", err.s ? err.s : "interpreter refused");
        sb_free(&err);
        return;
    }
    uint32_t np = be->nparams;
    interp_val **global = xcalloc(np + 1, sizeof *global);
    interp_val ***dargs = xcalloc((size_t)ndev, sizeof *dargs);
    interp_val *bout = NULL, **dout = xcalloc((size_t)ndev, sizeof *dout);
    interp_rng rng;
    interp_rng_seed(&rng, seed);
    bool ok = true;
    for (uint32_t k = 0; k < np && ok; k++) {
        const hlo_instr *p = &be->instrs[be->params[k]];
        global[k] = interp_val_new_input(p->shape.dtype, p->shape.rank, p->shape.dims);
        if (!global[k]) {
            snprintf(w->why, sizeof w->why, "not run: parameter %u has a type the interpreter cannot hold", k);
            ok = false;
            break;
        }
        interp_val_fill_random(global[k], &rng);
        for (int64_t e = 0; global[k]->f && e < global[k]->n; e++)
            global[k]->f[e] = (input_scale < 0 ? fabs(global[k]->f[e] * input_scale) : global[k]->f[e] * input_scale) + shift;
        for (int64_t e = 0; global[k]->im && e < global[k]->n; e++) global[k]->im[e] *= fabs(input_scale);
        int64_t below = int_below > 1 ? int_below : 16;
        bool owned = ints == INTS_OWNED && global[k]->i && global[k]->dtype != DT_PRED && own && own[k] > 0 &&
                     fill_owned(global[k], &rel->inputs[k], &rel->mesh, own[k]);
        /* (the range the baseline indexes with it, when that is known and
         * no index domain of the proof is narrower) */
        int64_t range = ranges && ranges[k] > 0 && (int_below <= 0 || ranges[k] < int_below) ? ranges[k] : int_below;
        for (int64_t e = 0; !owned && global[k]->i && global[k]->dtype != DT_PRED && e < global[k]->n; e++) {
            /* (a range past the random draws' [0, 16) drawn anew over all of
             * it: a vocabulary's later shards are read by some ids too) */
            if (ints != INTS_OFF_ZERO && range > 16) global[k]->i[e] = (int64_t)(interp_rng_next(&rng) % (uint64_t)range);
            else if (ints != INTS_OFF_ZERO && range > 0) global[k]->i[e] = llabs(global[k]->i[e]) % range;
            else if (ints == INTS_OFF_ZERO) global[k]->i[e] = 1 + llabs(global[k]->i[e]) % (below - 1);
        }
        /* a quarter of the entries the value the baseline tests them
         * against (an ignore index, -100: what random ids never hold) */
        for (int64_t e = 0; sentinel && sentinel[k] != INT64_MIN && global[k]->i && e < global[k]->n; e++)
            if ((interp_rng_next(&rng) & 3) == 0) global[k]->i[e] = sentinel[k];
        if (ints == INTS_DISTINCT && global[k]->i && global[k]->dtype != DT_PRED && ranges && ranges[k] > 0 &&
            global[k]->n <= ranges[k] && ranges[k] <= ((int64_t)1 << 24))
            w->repeats |= make_distinct(global[k], ranges[k]);
        /* integer data split over devices (each holds other entries) */
        w->sharded_ints |= global[k]->i && global[k]->dtype != DT_PRED && !view_is_dup(&rel->inputs[k]);
    }
    for (int64_t d = 0; d < ndev && ok; d++) {
        dargs[d] = xcalloc(np + 1, sizeof **dargs);
        for (uint32_t k = 0; k < np; k++) {
            int64_t off[INTERP_MAX_RANK], size[INTERP_MAX_RANK];
            view_block(&rel->inputs[k], &rel->mesh, global[k]->dims, global[k]->rank, d, off, size);
            dargs[d][k] = interp_val_slice(global[k], off, size);
        }
    }
    interp_val **bargs[1] = {global};
    bool differed = w->differs;
    /* A run that started but ran out of steps or loop iterations "did not finish". */
    int st;
    if (ok && (st = interp_run(base, &cb, (interp_val **const *)bargs, &bout, &err)) != INTERP_OK) {
        snprintf(w->why, sizeof w->why, "%s: baseline: %s", st == INTERP_EBUDGET ? "did not finish" : "not run",
                 err.s ? err.s : "?");
        ok = false;
    }
    sb_reset(&err);
    if (ok && (st = interp_run(dist, &cd, (interp_val **const *)dargs, dout, &err)) != INTERP_OK) {
        snprintf(w->why, sizeof w->why, "%s: distributed: %s", st == INTERP_EBUDGET ? "did not finish" : "not run",
                 err.s ? err.s : "?");
        ok = false;
    }
    if (ok) {
        w->runs++;
        /* Updates and reads that fall out of bounds on every device (all
         * devices together apply fewer updates, or read fewer slices in
         * bounds, than the baseline; a device's share skipped by design is
         * another device's to apply): integers without the structure the
         * distributed program is written for */
        w->out_of_bounds_more |= (ds.dropped > 0 && ds.scattered - ds.dropped < bs.scattered - bs.dropped) ||
                                 (ds.clamped > 0 && ds.gathered - ds.clamped < bs.gathered - bs.clamped);
        uint32_t nouts = bout->dtype == DT_TUPLE ? bout->nelems : 1;
        for (uint32_t o = 0; o < nouts; o++) {
            const interp_val *want = bout->dtype == DT_TUPLE ? bout->elems[o] : bout;
            for (int64_t d = 0; d < ndev; d++) {
                const interp_val *got = dout[d]->dtype == DT_TUPLE ? (o < dout[d]->nelems ? dout[d]->elems[o] : NULL) : dout[d];
                if (!got || got->rank != want->rank || o >= rel->noutputs) {
                    w->differs = true;
                    w->max_abs = w->max_rel = INFINITY;
                    continue;
                }
                int64_t off[INTERP_MAX_RANK], size[INTERP_MAX_RANK];
                view_block(&rel->outputs[o], &rel->mesh, want->dims, want->rank, d, off, size);
                bool same = true;
                for (uint32_t k = 0; k < want->rank; k++) same &= size[k] == got->dims[k];
                if (!same && rel->output_free && rel->output_free[o]) {
                    /* An output no annotation constrains, left in a sharding
                     * the checker could not name: not compared (said why). */
                    snprintf(w->why, sizeof w->why, "output %u: its sharding was chosen by the partitioner and could not be named", o);
                    w->skipped++;
                    continue;
                }
                if (!same) {
                    w->differs = true;
                    w->max_abs = w->max_rel = INFINITY;
                    continue;
                }
                interp_val *block = interp_val_slice(want, off, size);
                double before = w->max_abs;
                compare(w, block, got);
                if (dbg_on(DBG_WITNESS) && w->max_abs > before)
                    fprintf(stderr, "witness: output %u device %lld: max abs difference %g\n", o, (long long)d, w->max_abs);
                interp_val_free(block);
            }
        }
    }
    if (ok && w->differs && !differed && (bs.ties || ds.ties)) w->tied = true;
    if (ok && w->differs && !differed) {
        w->diff_scale = input_scale;
        w->diff_shift = shift;
        w->diff_seed = seed;
        w->diff_plain = ints == INTS_RANDOM && !w->flag_run;
        if (w->locate) locate_run(base, dist, rel, &cb, &cd, global, (interp_val **const *)dargs, &w->site);
    }
    if (ok && w->differs && !differed && !w->unstable && !w->tied)
        w->unstable = amplifies(base, &cb, global, np, bout, w->max_abs);
    interp_val_free(bout);
    for (int64_t d = 0; d < ndev; d++) {
        interp_val_free(dout[d]);
        for (uint32_t k = 0; dargs[d] && k < np; k++) interp_val_free(dargs[d][k]);
        free(dargs[d]);
    }
    for (uint32_t k = 0; k < np; k++) interp_val_free(global[k]);
    free(global);
    free(dargs);
    free(dout);
    sb_free(&err);
}

void witness_run(const hlo_module *base, const hlo_module *dist, const relations *rel, uint64_t seed, int64_t int_below,
                 bool locate, witness *w) {
    memset(w, 0, sizeof *w);
    w->locate = locate;
    w->seed = seed;
    /* Inputs in [-1, 1), then small ones (a power of two, exact): what is
     * negligible beside values of one (an epsilon, a normalisation) shows. */
    if (int_below >= 16) int_below = 0;  /* the default range, [0, 16), is within */
    /* integers within the range the baseline indexes with them (a
     * vocabulary, a table's rows), else [0, 16) */
    const hlo_comp *be = graph_entry(base);
    uint32_t np = be->nparams;
    int64_t *ranges = xcalloc(np + 1, sizeof *ranges), *sent = xcalloc(np + 1, sizeof *sent);
    bool any_sent = false;
    for (uint32_t k = 0; k < np; k++) {
        sent[k] = INT64_MIN;
        int dt = be->instrs[be->params[k]].shape.dtype;
        if (dtype_is_int(dt)) {
            ranges[k] = index_range(base, k, &sent[k]);
            if (dt == DT_PRED) sent[k] = INT64_MIN;
            any_sent |= sent[k] != INT64_MIN;
            if (dbg_on(DBG_WITNESS)) fprintf(stderr, "witness: integer input %u indexes a range of %lld\n", k, (long long)ranges[k]);
        }
    }
    run_once(base, dist, rel, seed, 1, 0, int_below, INTS_RANDOM, ranges, NULL, NULL, w);
    if (w->runs == 1 && !w->differs) run_once(base, dist, rel, seed + 1, 0x1p-6, 0, int_below, INTS_RANDOM, ranges, NULL, NULL, w);
    if (w->runs == 2 && !w->differs && w->nan_seen) run_once(base, dist, rel, seed + 2, -1, 0, int_below, INTS_RANDOM, ranges, NULL, NULL, w);
    /* Beyond rounding but under the tolerance: inputs in [0, 2), whose means
     * and sums are far from zero (a mean of logits, a sum of centred inputs,
     * that inputs around zero leave near zero and a wrong factor on it with it) */
    if (w->runs >= 2 && !w->differs && w->over_exact) run_once(base, dist, rel, seed + 3, 1, 1, int_below, INTS_RANDOM, ranges, NULL, NULL, w);
    /* Integers in {0, 1}: programs that read an integer input as flags or
     * cells (a Game-of-Life board, a 0/1 mask kept as int32) compute
     * nothing of interest on values up to 15 (every cell dead), so a
     * difference only shows there. Integers the baseline indexes with keep
     * their range: drawn from two values they would repeat, and programs
     * are written for distinct positions (a set of global tokens). */
    int64_t *flags = xcalloc(np + 1, sizeof *flags);
    bool any_flags = false;
    for (uint32_t k = 0; k < np; k++) {
        int dt = be->instrs[be->params[k]].shape.dtype;
        if (!dtype_is_int(dt) || dt == DT_PRED) continue;
        flags[k] = ranges[k] > 0 ? ranges[k] : 2;
        any_flags |= ranges[k] <= 0;
    }
    if (w->runs >= 2 && !w->differs && any_flags && int_below <= 0) {
        /* it can only find a difference: its figures count then, and are
         * dropped otherwise (an agreement stays the earlier runs') */
        witness before = *w;
        w->flag_run = true;
        run_once(base, dist, rel, seed + 0x100, 1, 0, 0, INTS_RANDOM, flags, NULL, NULL, w);
        w->flag_run = false;
        if (!w->differs) *w = before;
    }
    free(flags);
    /* Integers the baseline tests against a value of its own (labels !=
     * -100, an ignore index; a padding id): a quarter of them that value
     * once more, what random draws never give (a count of the kept ones
     * taken per device differs only then). Like the run on flags, it can
     * only find a difference. */
    if (w->runs >= 2 && !w->differs && any_sent) {
        witness before = *w;
        run_once(base, dist, rel, seed + 0x200, 1, 0, int_below, INTS_RANDOM, ranges, NULL, sent, w);
        if (!w->differs) *w = before;
    }
    free(sent);
    /* Index inputs that repeat a value (positions of global tokens): a
     * program may be written for distinct ones. The run that differed once
     * more, the same inputs but each repeat replaced by a value not held
     * yet: agreeing there within rounding, the difference rests on the
     * repeats, and nothing is decided. */
    if (w->differs && w->diff_plain) {
        witness before = *w;
        w->differs = w->over_tight = w->repeats = false;
        run_once(base, dist, rel, before.diff_seed, before.diff_scale, before.diff_shift, int_below, INTS_DISTINCT, ranges,
                 NULL, NULL, w);
        if (!w->repeats || w->differs || w->over_tight || w->runs == before.runs) {
            *w = before;
        } else {
            w->int_domain = true;
            snprintf(w->why, sizeof w->why, "the outputs differ on random integers that repeat values the baseline indexes "
                     "with, and agree where each such input's values are distinct (positions a program may take to be "
                     "distinct)");
        }
    }
    /* Integer inputs the distributed program reads and the baseline does not
     * (send lists, positions in a halo buffer: index maps precomputed from
     * the other inputs, which random draws do not make consistent with them) */
    for (uint32_t k = 0; w->differs && k < np; k++)
        if (dtype_is_int(be->instrs[be->params[k]].shape.dtype) && !param_read(base, k) && param_read(dist, k)) {
            w->differs = false;
            w->int_domain = true;
            snprintf(w->why, sizeof w->why, "the outputs differ on random inputs, and the distributed program reads "
                     "integer input %u, which the baseline does not: an index map precomputed from the other inputs, "
                     "which random draws do not keep consistent with them", k);
            break;
        }
    if (w->differs && w->sharded_ints && (w->out_of_bounds_more || owner_test(dist))) {
        /* Once more with the integers split over the devices drawn within
         * their owners' rows — all of them, then each alone (edges owned by
         * their source, destinations anywhere): a difference there, without
         * more out-of-bounds reads, decides (a missing sum); else nothing.
         * Also where no read fell out of bounds but the program tests the
         * integers against its own rows (owner_test): it may mask the
         * entries it does not own (clip and zero) as well as drop them. */
        uint32_t nowned = 0;
        bool oob = w->out_of_bounds_more; /* (else: masked; all owned at once only) */
        int64_t *owned = xcalloc(np + 1, sizeof *owned), *one = xcalloc(np + 1, sizeof *one);
        for (uint32_t k = 0; k < np && k < rel->ninputs; k++)
            if (!view_is_dup(&rel->inputs[k])) nowned += (owned[k] = ranges[k]) > 0;
        bool decided = false;
        witness first = *w; /* (the run that differed: where the site is placed) */
        for (uint32_t k = 0; nowned && k <= np && !decided; k++) {
            if (k < np && (owned[k] == 0 || nowned == 1 || !oob)) continue;
            const int64_t *own = owned;
            if (k < np) { /* parameter k alone */
                memset(one, 0, (np + 1) * sizeof *one);
                one[k] = owned[k];
                own = one;
            }
            w->differs = w->out_of_bounds_more = false;
            bool tight = w->over_tight;
            w->over_tight = false;
            run_once(base, dist, rel, seed + 5 + k, 1, 0, int_below, INTS_OWNED, ranges, own, NULL, w);
            /* (masked: the inputs' structure explains the difference only
             * where, given it, the outputs agree within rounding) */
            decided = (w->differs || (!oob && w->over_tight)) && !w->out_of_bounds_more;
            if (decided && !w->differs) w->differs = true;
            w->over_tight |= tight;
        }
        free(owned);
        free(one);
        if (!oob && !nowned) decided = true; /* no integers to own: the difference stands */
        if (decided && !oob) {
            /* masked: the difference stands as first seen (its run places
             * the site); the run on owned integers only confirmed it */
            int runs = w->runs;
            *w = first;
            w->runs = runs;
        }
        if (!decided) {
            w->differs = false;
            w->int_domain = true;
            snprintf(w->why, sizeof w->why, "%s", oob
                     ? "the outputs differ on random integers on which the distributed program indexes out of bounds "
                       "more than the baseline: inputs without the structure it is written for (entries on their "
                       "owner), or a wrong offset"
                     : "the outputs differ on random integers split over the devices, and agree where each device's "
                       "are drawn within its own share of the range they index: inputs without the structure the "
                       "program is written for (entries on their owner), or a wrong offset");
        }
    }
    /* Differences only beside inf or NaN: integers off 0 once more; a
     * difference of finite values there decides, anything else does not. */
    if (w->runs >= 1 && !w->differs && w->nonfinite && !w->int_domain) {
        w->nonfinite = false;
        run_once(base, dist, rel, seed + 4, 1, 0, int_below, INTS_OFF_ZERO, NULL, NULL, NULL, w);
        /* the same beside inf or NaN off 0 too: a difference in the domain */
        if (w->nonfinite) w->differs = true;
        w->nonfinite_only = !w->differs;
        if (w->nonfinite_only)
            snprintf(w->why, sizeof w->why, "the outputs differ only where one program gives inf or NaN and the other a "
                     "finite value on the random inputs (outside the domain the programs are written for, as an empty "
                     "mask's softmax); with integers off 0 they agree");
    }
    if (w->differs && w->tied) {
        w->differs = false;
        w->unstable = true;
        snprintf(w->why, sizeof w->why, "the outputs differ by up to %g, but a factorisation on the way chose between "
                 "values equal to within rounding (an LU pivot, eigenvectors of a repeated eigenvalue), which "
                 "two programs computing the same matrix may choose differently", w->max_abs);
    } else if (w->differs && w->unstable) {
        w->differs = false;
        snprintf(w->why, sizeof w->why, "the outputs differ by up to %g, but the baseline's own move beyond the "
                 "tolerance when its inputs move by 1e-9 of their values: on these inputs the programs amplify rounding",
                 w->max_abs);
    } else {
        w->unstable = false;
    }
    free(ranges);
    w->ran = w->runs > 0;
    /* outputs that are inf or NaN everywhere on both sides agree vacuously */
    if (w->ran && !w->differs && !w->finite_seen && !w->skipped) {
        w->vacuous = true;
        snprintf(w->why, sizeof w->why, "every output of the baseline is inf or NaN on every run (random inputs "
                 "outside the domain the programs are written for), so their agreement says nothing");
    }
    w->agrees = w->ran && !w->differs && !w->over_tight && !w->skipped && !w->nonfinite_only && !w->int_domain && !w->unstable &&
                !w->vacuous;
}
