/* interp — the reference interpreter; the contract is in interp.h. */
#include "interp.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "linalg.h"

/* ------------------------------------------------------------------ values */

bool interp_dtype_ok(int dt) {
    switch (dt) {
    case DT_PRED: case DT_S8: case DT_S16: case DT_S32: case DT_S64:
    case DT_U8: case DT_U16: case DT_U32: case DT_U64:
    case DT_F16: case DT_BF16: case DT_F32: case DT_F64:
        return true;
    default: {
        /* the narrow floats with a NaN, held as doubles rounded to them */
        const minifloat *mf = dtype_minifloat(dt);
        return mf && (mf->kind == MF_IEEE || mf->kind == MF_FN || mf->kind == MF_FNUZ);
    }
    }
}

static bool isf(int dt) { return dtype_is_float(dt) && interp_dtype_ok(dt); }

/* The type of a complex type's parts (c64: f32, c128: f64); dt otherwise. */
static int part_dt(int dt) { return dt == DT_C64 ? DT_F32 : dt == DT_C128 ? DT_F64 : dt; }

/* A zero-filled array of any type a run holds: interp_val_new's and complex. */
static interp_val *val_new(int dt, uint32_t rank, const int64_t *dims) {
    bool cx = dtype_is_complex(dt);
    if ((!interp_dtype_ok(dt) && !cx) || rank > INTERP_MAX_RANK) return NULL;
    int64_t n = 1;
    for (uint32_t d = 0; d < rank; d++) {
        if (dims[d] < 0 || !mul_ok(n, dims[d], &n)) return NULL;
    }
    if (n > ((int64_t)1 << 40)) return NULL;
    interp_val *v = xcalloc(1, sizeof *v);
    v->refs = 1;
    v->dtype = dt;
    v->rank = rank;
    if (rank) memcpy(v->dims, dims, rank * sizeof *dims);
    v->n = n;
    if (isf(dt) || cx) v->f = xcalloc((size_t)(n ? n : 1), sizeof *v->f);
    else v->i = xcalloc((size_t)(n ? n : 1), sizeof *v->i);
    if (cx) v->im = xcalloc((size_t)(n ? n : 1), sizeof *v->im);
    return v;
}

interp_val *interp_val_new(int dt, uint32_t rank, const int64_t *dims) {
    return interp_dtype_ok(dt) ? val_new(dt, rank, dims) : NULL;
}

interp_val *interp_val_new_input(int dt, uint32_t rank, const int64_t *dims) {
    return interp_dtype_ok(dt) || dt == DT_C64 || dt == DT_C128 ? val_new(dt, rank, dims) : NULL;
}

interp_val *interp_val_tuple(uint32_t n, interp_val **elems) {
    interp_val *v = xcalloc(1, sizeof *v);
    v->refs = 1;
    v->dtype = DT_TUPLE;
    v->n = -1;
    v->nelems = n;
    v->elems = xcalloc(n ? n : 1, sizeof *v->elems);
    if (n) memcpy(v->elems, elems, n * sizeof *elems);
    return v;
}

interp_val *interp_val_ref(interp_val *v) {
    if (v) v->refs++;
    return v;
}

void interp_val_free(interp_val *v) {
    if (!v || --v->refs > 0) return;
    for (uint32_t k = 0; k < v->nelems; k++) interp_val_free(v->elems[k]);
    free(v->elems);
    free(v->f);
    free(v->im);
    free(v->i);
    free(v);
}

/* Integers are kept as int64 wrapped to their width; u64 keeps its bit pattern. */
static int64_t wrap(int dt, int64_t x) {
    switch (dt) {
    case DT_PRED: return x != 0;
    case DT_S8: return (int8_t)x;
    case DT_S16: return (int16_t)x;
    case DT_S32: return (int32_t)x;
    case DT_U8: return (uint8_t)x;
    case DT_U16: return (uint16_t)x;
    case DT_U32: return (uint32_t)x;
    default: return x;
    }
}

static double int_to_double(int dt, int64_t x) { return dt == DT_U64 ? (double)(uint64_t)x : (double)x; }

double interp_val_get(const interp_val *v, int64_t k) { return v->f ? v->f[k] : int_to_double(v->dtype, v->i[k]); }

/* float -> integer as XLA converts: NaN -> 0, truncation toward zero, saturating. */
static int64_t float_to_int(int dt, double x) {
    if (x != x) return 0;
    if (dt == DT_PRED) return x != 0;
    x = trunc(x);
    double lo, hi;
    if (dtype_bits(dt) <= 32 && dtype_int_limits(dt, &lo, &hi)) return (int64_t)(x < lo ? lo : x > hi ? hi : x);
    if (dt == DT_U64) {
        if (x <= 0) return 0;
        if (x >= 18446744073709551615.0) return (int64_t)UINT64_MAX;
        return (int64_t)(uint64_t)x;
    }
    if (x <= -9223372036854775808.0) return INT64_MIN;
    if (x >= 9223372036854775807.0) return INT64_MAX;
    return (int64_t)x;
}

/* Set by interp_run from its config for the run on this thread: floats
 * held as binary64 whatever their type. */
static _Thread_local bool unrounded_now;

/* x as a value of type dt holds it (unrounded runs keep floats exact). */
static double rnd(int dt, double x) {
    dt = part_dt(dt);
    return unrounded_now && dtype_is_float(dt) ? x : dtype_round(dt, x);
}

void interp_val_set(interp_val *v, int64_t k, double x) {
    if (v->f) v->f[k] = dtype_round(part_dt(v->dtype), x);
    else v->i[k] = float_to_int(v->dtype, x);
}

bool interp_val_matches(const interp_val *v, const shape *s) {
    if (!v) return false;
    if (s->dtype == DT_TUPLE) {
        if (v->dtype != DT_TUPLE || v->nelems != s->ntuple) return false;
        for (uint32_t k = 0; k < s->ntuple; k++)
            if (!interp_val_matches(v->elems[k], &s->tuple[k])) return false;
        return true;
    }
    if (v->dtype != s->dtype || v->rank != s->rank) return false;
    for (uint32_t d = 0; d < s->rank; d++)
        if (v->dims[d] != s->dims[d]) return false;
    return true;
}

void interp_val_print_type(strbuf *b, const interp_val *v) {
    if (v->dtype == DT_TUPLE) {
        sb_putc(b, '(');
        for (uint32_t k = 0; k < v->nelems; k++) {
            if (k) sb_puts(b, ", ");
            interp_val_print_type(b, v->elems[k]);
        }
        sb_putc(b, ')');
        return;
    }
    sb_printf(b, "%s[", dtype_name(v->dtype));
    for (uint32_t d = 0; d < v->rank; d++) sb_printf(b, "%s%lld", d ? "," : "", (long long)v->dims[d]);
    sb_putc(b, ']');
}

static interp_val *val_like(const interp_val *v, int dt) { return val_new(dt, v->rank, v->dims); }

static interp_val *val_shape(const shape *s) {
    if (s->dtype == DT_TUPLE) return NULL;
    return val_new(s->dtype, s->rank, s->dims);
}

static void strides_of(const int64_t *dims, uint32_t rank, int64_t *st) {
    int64_t s = 1;
    for (int d = (int)rank - 1; d >= 0; d--) {
        st[d] = s;
        s *= dims[d];
    }
}

/* Odometer: advances idx (row-major) over dims. */
static inline void next_idx(int64_t *idx, const int64_t *dims, uint32_t rank) {
    for (int d = (int)rank - 1; d >= 0; d--) {
        if (++idx[d] < dims[d]) return;
        idx[d] = 0;
    }
}

/* Copies one element between values of one type (both parts of a complex). */
static inline void copy_elem(interp_val *dst, int64_t di, const interp_val *src, int64_t si) {
    if (dst->f) dst->f[di] = src->f[si];
    else dst->i[di] = src->i[si];
    if (dst->im) dst->im[di] = src->im ? src->im[si] : 0;
}

/* The walk every data-movement op is: element k of the walked value (row-major
 * over its dims) pairs with element base + sum idx[d] * step[d] of the other.
 * gather: dst[k] = src[that], walking dst; else dst[that] = src[k], walking src. */
static void affine_copy(interp_val *dst, const interp_val *src, int64_t base, const int64_t *step, bool gather) {
    const interp_val *w = gather ? dst : src;
    int64_t idx[INTERP_MAX_RANK] = {0};
    for (int64_t k = 0; k < w->n; k++) {
        int64_t o = base;
        for (uint32_t d = 0; d < w->rank; d++) o += idx[d] * step[d];
        if (gather) copy_elem(dst, k, src, o);
        else copy_elem(dst, o, src, k);
        next_idx(idx, w->dims, w->rank);
    }
}

/* Offset of the element at start in a value of these dims (strides st). */
static int64_t offset_of(const int64_t *start, const int64_t *st, uint32_t rank) {
    int64_t o = 0;
    for (uint32_t d = 0; d < rank; d++) o += start[d] * st[d];
    return o;
}

interp_val *interp_val_slice(const interp_val *v, const int64_t *off, const int64_t *sizes) {
    interp_val *r = val_new(v->dtype, v->rank, sizes);
    if (!r) return NULL;
    int64_t st[INTERP_MAX_RANK];
    strides_of(v->dims, v->rank, st);
    affine_copy(r, v, offset_of(off, st, v->rank), st, true);
    return r;
}

/* ------------------------------------------------------------------ random */

void interp_rng_seed(interp_rng *r, uint64_t seed) { r->s = seed; }

uint64_t interp_rng_next(interp_rng *r) {
    uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void interp_val_fill_random(interp_val *v, interp_rng *r) {
    if (v->dtype == DT_TUPLE) {
        for (uint32_t k = 0; k < v->nelems; k++) interp_val_fill_random(v->elems[k], r);
        return;
    }
    /* a complex value's parts round as its part type */
    int pt = v->dtype == DT_C64 ? DT_F32 : v->dtype == DT_C128 ? DT_F64 : v->dtype;
    for (int64_t k = 0; k < v->n; k++) {
        uint64_t u = interp_rng_next(r);
        if (v->f) v->f[k] = dtype_round(pt, (double)(u >> 11) * 0x1p-52 - 1.0);
        else if (v->dtype == DT_PRED) v->i[k] = (int64_t)(u >> 63);
        else v->i[k] = (int64_t)(u >> 60);
    }
    for (int64_t k = 0; v->im && k < v->n; k++) v->im[k] = dtype_round(pt, (double)(interp_rng_next(r) >> 11) * 0x1p-52 - 1.0);
}

/* ------------------------------------------------------------------ sharding */

/* Position of device d in the sharding's tile assignment (row-major over
 * tile_dims), or -1. */
static int64_t tile_position(const hlo_sharding *sh, int64_t d) {
    int64_t total = 1;
    for (uint32_t k = 0; k < sh->ntile; k++) total *= sh->tile_dims[k];
    if (total <= 0 || total > GRAPH_MAX_DEVICES) return -1;
    if (sh->devices) {
        for (uint32_t k = 0; k < sh->ndevices; k++)
            if (sh->devices[k] == d) return k;
        return -1;
    }
    int64_t *ids = xmalloc((size_t)total * sizeof *ids);
    int64_t rp = 1;
    for (uint32_t k = 0; k < sh->nreshape; k++) rp *= sh->reshape[k];
    int64_t pos = -1;
    if (rp == total) {
        iota_tile_ids(sh->reshape, sh->nreshape, sh->perm, sh->nperm, ids);
        for (int64_t k = 0; k < total; k++)
            if (ids[k] == d) pos = k;
    }
    free(ids);
    return pos;
}

bool interp_shard_tile(const hlo_sharding *sh, uint32_t rank, const int64_t *dims, int64_t d, int64_t *off,
                       int64_t *sizes) {
    for (uint32_t k = 0; k < rank; k++) {
        off[k] = 0;
        sizes[k] = dims[k];
    }
    if (!sh || sh->type == SH_REPLICATED) return true;
    if (sh->type == SH_MAXIMAL) return true;
    if (sh->type != SH_OTHER) return false;
    uint32_t extra = sh->nlast + (sh->replicate_last ? 1 : 0);
    if (sh->ntile != rank + extra) return false;
    int64_t pos = tile_position(sh, d);
    if (pos < 0) return false;
    int64_t coord[INTERP_MAX_RANK + 8];
    if (sh->ntile > INTERP_MAX_RANK + 8) return false;
    for (int k = (int)sh->ntile - 1; k >= 0; k--) {
        coord[k] = pos % sh->tile_dims[k];
        pos /= sh->tile_dims[k];
    }
    for (uint32_t k = 0; k < rank; k++) {
        int64_t t = sh->tile_dims[k];
        int64_t per = (dims[k] + t - 1) / t;
        off[k] = coord[k] * per;
        if (off[k] > dims[k]) off[k] = dims[k];
        sizes[k] = off[k] + per > dims[k] ? dims[k] - off[k] : per;
    }
    return true;
}

bool interp_shard_global(const hlo_sharding *sh, uint32_t rank, const int64_t *local, int64_t *global) {
    for (uint32_t k = 0; k < rank; k++) global[k] = local[k];
    if (!sh || sh->type == SH_REPLICATED || sh->type == SH_MAXIMAL) return true;
    if (sh->type != SH_OTHER) return false;
    uint32_t extra = sh->nlast + (sh->replicate_last ? 1 : 0);
    if (sh->ntile != rank + extra) return false;
    for (uint32_t k = 0; k < rank; k++) global[k] = local[k] * sh->tile_dims[k];
    return true;
}

interp_val *interp_param_input(const hlo_instr *p, interp_val *v, int64_t d) {
    if (!v || p->shape.dtype == DT_TUPLE || v->dtype != p->shape.dtype) return NULL;
    if (interp_val_matches(v, &p->shape)) return interp_val_ref(v);
    const hlo_attr *sa = instr_attr(p, A_SHARDING);
    const hlo_sharding *sh = sa ? sa->v.sharding : NULL;
    int64_t global[INTERP_MAX_RANK], off[INTERP_MAX_RANK], sz[INTERP_MAX_RANK];
    if (!sh || v->rank != p->shape.rank || !interp_shard_global(sh, v->rank, p->shape.dims, global)) return NULL;
    for (uint32_t k = 0; k < v->rank; k++)
        if (global[k] != v->dims[k]) return NULL;
    if (!interp_shard_tile(sh, v->rank, v->dims, d, off, sz)) return NULL;
    for (uint32_t k = 0; k < v->rank; k++)
        if (sz[k] != p->shape.dims[k]) return NULL;
    return interp_val_slice(v, off, sz);
}

interp_val *interp_param_random(const hlo_instr *p, uint32_t k, int64_t ndev, uint64_t seed, strbuf *why) {
    if (p->shape.dtype == DT_TUPLE || !interp_dtype_ok(p->shape.dtype) || p->shape.rank > INTERP_MAX_RANK) {
        if (why) sb_puts(why, "has a type the interpreter does not hold");
        return NULL;
    }
    int64_t global[INTERP_MAX_RANK];
    const hlo_attr *sa = instr_attr(p, A_SHARDING);
    if (ndev == 1 || !sa || !interp_shard_global(sa->v.sharding, p->shape.rank, p->shape.dims, global))
        if (p->shape.rank) memcpy(global, p->shape.dims, p->shape.rank * sizeof *global); /* NULL for a scalar */
    /* The global input is the local shape times the tile assignment: within
     * the element budget before it is allocated. */
    int64_t elems = 1;
    for (uint32_t d = 0; d < p->shape.rank && elems >= 0; d++)
        if (!mul_ok(elems, global[d], &elems) || elems > INTERP_MAX_ELEMENTS) elems = -1;
    interp_val *v = elems < 0 ? NULL : interp_val_new(p->shape.dtype, p->shape.rank, global);
    if (!v) {
        if (why) sb_printf(why, "is too large (its global form holds more than %lld elements)", (long long)INTERP_MAX_ELEMENTS);
        return NULL;
    }
    interp_rng r;
    interp_rng_seed(&r, seed ^ (0x9e3779b97f4a7c15ull * (k + 1)));
    interp_val_fill_random(v, &r);
    return v;
}

/* An integer element held as a double, back as int64 (saturating: a double
 * at or beyond 2^63 has no int64, and converting it would be undefined).
 * Products then wrap in uint64, as integer dots do in XLA. */
static int64_t int_of(double v) {
    if (!(v > -9223372036854775808.0)) return INT64_MIN;
    if (!(v < 9223372036854775808.0)) return INT64_MAX;
    return (int64_t)v;
}

/* ------------------------------------------------------------------ context */

typedef union cell {
    double f;
    int64_t i;
} cell;

typedef struct comp_info {
    uint32_t *last_use;   /* per instruction: index of its last user (ninstrs: root / kept) */
    int scalar;           /* 0 unknown, 1 scalar-evaluable, 2 not */
    cell *scratch;        /* ninstrs cells for scalar evaluation */
} comp_info;

typedef struct ctx {
    const hlo_module *m;
    int64_t R, P, D;
    int64_t max_iterations, iterations;
    int64_t max_steps, steps;  /* element steps: see interp.h, Budgets */
    interp_stats stats;   /* index vectors used, skipped, clamped */
    strbuf *err;
    int status;
    comp_info *info;      /* per computation */
    arena a;              /* expanded groups */
    const interp_config *cfg;  /* observe */
} ctx;

static void *fail(ctx *x, int status, const hlo_instr *in, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static void *fail(ctx *x, int status, const hlo_instr *in, const char *fmt, ...) {
    if (x->status) return NULL;
    x->status = status;
    if (!x->err) return NULL;
    if (in) {
        sb_printf(x->err, "%s (%s", in->name, in->opname ? in->opname : hlo_op_name(in->op));
        if (in->line) sb_printf(x->err, ", line %u", in->line);
        sb_puts(x->err, "): ");
    }
    va_list ap;
    va_start(ap, fmt);
    sb_vprintf(x->err, fmt, ap);
    va_end(ap);
    return NULL;
}

static void ctx_free(ctx *x) {
    for (uint32_t c = 0; c < x->m->ncomps; c++) {
        free(x->info[c].last_use);
        free(x->info[c].scratch);
    }
    free(x->info);
    arena_free(&x->a);
}

static const comp_info *info_of(ctx *x, uint32_t ci) {
    comp_info *f = &x->info[ci];
    if (f->last_use) return f;
    const hlo_comp *c = &x->m->comps[ci];
    f->last_use = xcalloc(c->ninstrs ? c->ninstrs : 1, sizeof *f->last_use);
    for (uint32_t i = 0; i < c->ninstrs; i++) {
        f->last_use[i] = i;
        for (uint32_t k = 0; k < c->instrs[i].noperands; k++) f->last_use[c->instrs[i].operands[k]] = i;
    }
    if (c->ninstrs) f->last_use[c->root] = c->ninstrs;
    return f;
}

/* ------------------------------------------------------------------ scalar ops */

static bool unary_f(int op, double a, double *r) {
    switch (op) {
    case OP_ABS: *r = fabs(a); break;
    case OP_NEGATE: *r = -a; break;
    case OP_EXP: *r = exp(a); break;
    case OP_EXPM1: *r = expm1(a); break;
    case OP_LOG: *r = log(a); break;
    case OP_LOG1P: *r = log1p(a); break;
    case OP_SQRT: *r = sqrt(a); break;
    case OP_RSQRT: *r = 1.0 / sqrt(a); break;
    case OP_CBRT: *r = cbrt(a); break;
    case OP_TANH: *r = tanh(a); break;
    case OP_LOGISTIC: *r = 1.0 / (1.0 + exp(-a)); break;
    case OP_SINE: *r = sin(a); break;
    case OP_COSINE: *r = cos(a); break;
    case OP_TAN: *r = tan(a); break;
    case OP_FLOOR: *r = floor(a); break;
    case OP_CEIL: *r = ceil(a); break;
    case OP_ROUND_AFZ: *r = round(a); break;
    case OP_ROUND_EVEN: *r = nearbyint(a); break;
    case OP_ERF: *r = erf(a); break;
    case OP_SIGN: *r = a != a ? a : a > 0 ? 1.0 : a < 0 ? -1.0 : a; break;
    case OP_COPY: *r = a; break;
    default: return false;
    }
    return true;
}

static bool unary_i(int op, int dt, int64_t a, int64_t *r) {
    int bits = dtype_bits(dt);
    uint64_t mask = bits >= 64 ? UINT64_MAX : (((uint64_t)1 << bits) - 1);
    switch (op) {
    case OP_ABS: *r = a < 0 ? (int64_t)(0 - (uint64_t)a) : a; break;
    case OP_NEGATE: *r = (int64_t)(0 - (uint64_t)a); break;
    case OP_NOT: *r = dt == DT_PRED ? !a : ~a; break;
    case OP_SIGN: *r = dtype_is_unsigned(dt) ? a != 0 : (a > 0) - (a < 0); break;
    case OP_POPCNT: *r = __builtin_popcountll((uint64_t)a & mask); break;
    case OP_CLZ: {
        uint64_t u = (uint64_t)a & mask;
        *r = u ? __builtin_clzll(u) - (64 - bits) : bits;
        break;
    }
    case OP_COPY: *r = a; break;
    default: return false;
    }
    *r = wrap(dt, *r);
    return true;
}

static bool binary_f(int op, double a, double b, double *r) {
    switch (op) {
    case OP_ADD: *r = a + b; break;
    case OP_SUBTRACT: *r = a - b; break;
    case OP_MULTIPLY: *r = a * b; break;
    case OP_DIVIDE: *r = a / b; break;
    case OP_MAXIMUM: *r = (a != a || b != b) ? NAN : (a > b ? a : b); break;
    case OP_MINIMUM: *r = (a != a || b != b) ? NAN : (a < b ? a : b); break;
    case OP_POWER: *r = pow(a, b); break;
    case OP_REMAINDER: *r = fmod(a, b); break;
    case OP_ATAN2: *r = atan2(a, b); break;
    default: return false;
    }
    return true;
}

static int64_t ipow(int64_t a, int64_t b) {
    if (b < 0) return a == 1 ? 1 : a == -1 ? ((b & 1) ? -1 : 1) : 0;
    uint64_t r = 1, base = (uint64_t)a;
    while (b) {
        if (b & 1) r *= base;
        base *= base;
        b >>= 1;
    }
    return (int64_t)r;
}

static bool binary_i(int op, int dt, int64_t a, int64_t b, int64_t *r) {
    bool u64 = dt == DT_U64;
    int bits = dtype_bits(dt);
    uint64_t mask = bits >= 64 ? UINT64_MAX : (((uint64_t)1 << bits) - 1);
    switch (op) {
    case OP_ADD: *r = (int64_t)((uint64_t)a + (uint64_t)b); break;
    case OP_SUBTRACT: *r = (int64_t)((uint64_t)a - (uint64_t)b); break;
    case OP_MULTIPLY: *r = (int64_t)((uint64_t)a * (uint64_t)b); break;
    case OP_DIVIDE:
        if (b == 0) *r = dtype_is_unsigned(dt) ? -1 : -1;
        else if (u64) *r = (int64_t)((uint64_t)a / (uint64_t)b);
        else if (b == -1) *r = (int64_t)(0 - (uint64_t)a);
        else *r = a / b;
        break;
    case OP_REMAINDER:
        if (b == 0) *r = a;
        else if (u64) *r = (int64_t)((uint64_t)a % (uint64_t)b);
        else if (b == -1) *r = 0;
        else *r = a % b;
        break;
    case OP_MAXIMUM: *r = u64 ? ((uint64_t)a > (uint64_t)b ? a : b) : (a > b ? a : b); break;
    case OP_MINIMUM: *r = u64 ? ((uint64_t)a < (uint64_t)b ? a : b) : (a < b ? a : b); break;
    case OP_AND: *r = a & b; break;
    case OP_OR: *r = a | b; break;
    case OP_XOR: *r = a ^ b; break;
    case OP_POWER: *r = ipow(a, b); break;
    case OP_SHIFT_LEFT:
    case OP_SHIFT_RIGHT_LOGICAL:
    case OP_SHIFT_RIGHT_ARITHMETIC: {
        uint64_t ua = (uint64_t)a & mask, ub = (uint64_t)b & mask;
        int64_t sa = bits >= 64 ? a : (int64_t)(ua << (64 - bits)) >> (64 - bits);
        if (op == OP_SHIFT_LEFT) *r = ub >= (uint64_t)bits ? 0 : (int64_t)(ua << ub);
        else if (op == OP_SHIFT_RIGHT_LOGICAL) *r = ub >= (uint64_t)bits ? 0 : (int64_t)(ua >> ub);
        else *r = ub >= (uint64_t)bits ? (sa < 0 ? -1 : 0) : sa >> ub;
        break;
    }
    default: return false;
    }
    *r = wrap(dt, *r);
    return true;
}

enum { CMP_EQ, CMP_NE, CMP_LT, CMP_LE, CMP_GT, CMP_GE, CMP_BAD };

static int cmp_dir(const hlo_instr *in) {
    const char *d = instr_str(in, A_DIRECTION);
    if (!d) return CMP_BAD;
    static const char *names[] = {"EQ", "NE", "LT", "LE", "GT", "GE"};
    for (int k = 0; k < 6; k++)
        if (strcmp(d, names[k]) == 0) return k;
    return CMP_BAD;
}

/* A total-order compare: `type=TOTALORDER`, or newer XLA's `order=TOTAL`
 * (kept as a raw attribute; see hlo_pb.c). */
static bool cmp_total(const hlo_instr *in) {
    const char *t = instr_str(in, A_COMPARE_TYPE);
    if (t && strcmp(t, "TOTALORDER") == 0) return true;
    for (uint32_t k = 0; k < in->nattrs; k++) {
        const hlo_attr *a = &in->attrs[k];
        if (a->key == A_RAW && a->raw_key && strcmp(a->raw_key, "order") == 0) return a->v.str && strcmp(a->v.str, "TOTAL") == 0;
    }
    return false;
}

/* Total order key of a double (as XLA's TOTALORDER: -NaN < -inf < ... < -0 < +0 < ... < NaN). */
static int64_t total_key(double a) {
    int64_t k;
    memcpy(&k, &a, sizeof k);
    return k < 0 ? (int64_t)((uint64_t)k ^ INT64_MAX) : k;
}

/* a against b as -1, 0, 1, or 2 when unordered (a NaN under the partial order). */
static int order3(bool total, int dt, cell a, cell b) {
    if (isf(dt)) {
        if (total) {
            int64_t ka = total_key(a.f), kb = total_key(b.f);
            return ka < kb ? -1 : ka > kb;
        }
        if (a.f != a.f || b.f != b.f) return 2;
        return a.f < b.f ? -1 : a.f > b.f;
    }
    if (dt == DT_U64) return (uint64_t)a.i < (uint64_t)b.i ? -1 : (uint64_t)a.i > (uint64_t)b.i;
    return a.i < b.i ? -1 : a.i > b.i;
}

static int64_t compare_cell(int dir, bool total, int dt, cell a, cell b) {
    int c = order3(total, dt, a, b);
    switch (dir) {
    case CMP_EQ: return c == 0;
    case CMP_NE: return c != 0;
    case CMP_LT: return c == -1;
    case CMP_LE: return c == -1 || c == 0;
    case CMP_GT: return c == 1;
    case CMP_GE: return c == 1 || c == 0;
    default: return 0;
    }
}

/* A convert to an 8-bit float rounds even in an unrounded run: such a cast
 * is a quantisation the program means (fp8 scaling), and its quantum (an
 * eighth of the value or more) is far beyond the binary64 noise by which
 * two equal programs' values differ, while a wrong scale moves them across
 * many codes. */
static cell convert_cell(int from, int to, cell a) {
    cell r;
    if (isf(to)) {
        double x = isf(from) ? a.f : int_to_double(from, a.i);
        r.f = dtype_minifloat(to) ? dtype_round(to, x) : rnd(to, x);
    } else if (isf(from)) r.i = float_to_int(to, a.f);
    else r.i = wrap(to, a.i);
    return r;
}

/* f16 <-> bits (the value is already an f16 value). */
static uint16_t f16_bits(double x) {
    uint16_t s = signbit(x) ? 0x8000 : 0;
    double a = fabs(x);
    if (a != a) return 0x7e00 | s;
    if (isinf(a)) return 0x7c00 | s;
    if (a == 0) return s;
    int e;
    double m = frexp(a, &e); /* a = m·2^e, m in [0.5, 1) */
    int ex = e - 1 + 15;
    if (ex <= 0) return s | (uint16_t)nearbyint(a / 0x1p-24);
    return s | (uint16_t)(ex << 10) | (uint16_t)((int)nearbyint((m * 2 - 1) * 1024) & 0x3ff);
}

static double f16_value(uint16_t b) {
    int e = (b >> 10) & 0x1f, f = b & 0x3ff;
    double v = e == 0 ? ldexp(f, -24) : e == 31 ? (f ? NAN : INFINITY) : ldexp(1024 + f, e - 25);
    return (b & 0x8000) ? -v : v;
}

/* The bits of element a of float or integer type `from` (bf16 and f16 as
 * their 16 bits, integers their two's complement low bits). */
static uint64_t cell_bits(int from, cell a) {
    int bits = dtype_bits(from);
    uint64_t u;
    if (from == DT_F32) {
        float f = (float)a.f;
        uint32_t w;
        memcpy(&w, &f, 4);
        u = w;
    } else if (from == DT_F64) memcpy(&u, &a.f, 8);
    else if (from == DT_BF16) {
        float f = (float)a.f;
        uint32_t w;
        memcpy(&w, &f, 4);
        u = w >> 16;
    } else if (from == DT_F16) u = f16_bits(a.f);
    else u = (uint64_t)a.i & (bits >= 64 ? UINT64_MAX : (((uint64_t)1 << bits) - 1));
    return u;
}

/* The element of type `to` whose bits are u (cell_bits' inverse). */
static cell bits_cell(int to, uint64_t u) {
    int bits = dtype_bits(to);
    cell r;
    if (to == DT_F32) {
        uint32_t w = (uint32_t)u;
        float f;
        memcpy(&f, &w, 4);
        r.f = f;
    } else if (to == DT_F64) memcpy(&r.f, &u, 8);
    else if (to == DT_BF16) {
        uint32_t w = (uint32_t)u << 16;
        float f;
        memcpy(&f, &w, 4);
        r.f = f;
    } else if (to == DT_F16) r.f = f16_value((uint16_t)u);
    else {
        int64_t sv = bits >= 64 ? (int64_t)u : (int64_t)(u << (64 - bits)) >> (64 - bits);
        r.i = wrap(to, sv);
    }
    return r;
}

static bool is_unary(int op) {
    switch (op) {
    case OP_ABS: case OP_NEGATE: case OP_EXP: case OP_EXPM1: case OP_LOG: case OP_LOG1P:
    case OP_SQRT: case OP_RSQRT: case OP_CBRT: case OP_TANH: case OP_LOGISTIC: case OP_SINE:
    case OP_COSINE: case OP_TAN: case OP_FLOOR: case OP_CEIL: case OP_ROUND_AFZ: case OP_ROUND_EVEN:
    case OP_ERF: case OP_SIGN: case OP_NOT: case OP_POPCNT: case OP_CLZ: case OP_IS_FINITE:
        return true;
    default:
        return false;
    }
}

static bool is_binary(int op) {
    switch (op) {
    case OP_ADD: case OP_SUBTRACT: case OP_MULTIPLY: case OP_DIVIDE: case OP_MAXIMUM: case OP_MINIMUM:
    case OP_POWER: case OP_REMAINDER: case OP_ATAN2: case OP_AND: case OP_OR: case OP_XOR:
    case OP_SHIFT_LEFT: case OP_SHIFT_RIGHT_LOGICAL: case OP_SHIFT_RIGHT_ARITHMETIC:
        return true;
    default:
        return false;
    }
}

/* One unary op on one element of type dt giving type rdt. */
static bool unary_cell(int op, int dt, int rdt, cell a, cell *r) {
    if (op == OP_IS_FINITE) {
        r->i = isfinite(a.f) ? 1 : 0;
        return true;
    }
    if (isf(dt)) {
        if (!unary_f(op, a.f, &r->f)) return false;
        r->f = rnd(rdt, r->f);
        return true;
    }
    return unary_i(op, dt, a.i, &r->i);
}

static bool binary_cell(int op, int dt, cell a, cell b, cell *r) {
    if (isf(dt)) {
        if (!binary_f(op, a.f, b.f, &r->f)) return false;
        r->f = rnd(dt, r->f);
        return true;
    }
    if (dt == DT_PRED) {
        /* Preds combine as booleans. */
        switch (op) {
        case OP_AND: case OP_MINIMUM: case OP_MULTIPLY: r->i = a.i & b.i; return true;
        case OP_OR: case OP_MAXIMUM: case OP_ADD: r->i = a.i | b.i; return true;
        case OP_XOR: case OP_SUBTRACT: r->i = a.i ^ b.i; return true;
        default: return false;
        }
    }
    return binary_i(op, dt, a.i, b.i, &r->i);
}

static inline cell get_cell(const interp_val *v, int64_t k) {
    cell c;
    if (v->f) c.f = v->f[k];
    else c.i = v->i[k];
    return c;
}

static inline void put_cell(interp_val *v, int64_t k, cell c) {
    if (v->f) v->f[k] = c.f;
    else v->i[k] = c.i;
}

/* ------------------------------------------------------------------ scalar computations */

static int eval_comp(ctx *x, uint32_t ci, uint32_t na, const int64_t *devs, interp_val **args, interp_val **out);

static bool scalar_evaluable(const hlo_comp *c) {
    for (uint32_t i = 0; i < c->ninstrs; i++) {
        const hlo_instr *in = &c->instrs[i];
        if (in->op == OP_TUPLE && i == c->root) {
            for (uint32_t k = 0; k < in->noperands; k++)
                if (c->instrs[in->operands[k]].shape.dtype == DT_TUPLE) return false;
            continue;
        }
        if (in->shape.dtype == DT_TUPLE || in->shape.rank != 0 || !interp_dtype_ok(in->shape.dtype)) return false;
        int op = in->op;
        if (op == OP_PARAMETER || op == OP_CONSTANT || op == OP_COMPARE || op == OP_SELECT || op == OP_CONVERT ||
            op == OP_CLAMP || op == OP_COPY || op == OP_BROADCAST || op == OP_RESHAPE || is_unary(op) ||
            is_binary(op))
            continue;
        return false;
    }
    return true;
}

/* Calls computation ci on scalar arguments; results go to res (nres cells: one,
 * or one per root tuple element). dts gives the argument types. */
static bool scalar_call(ctx *x, uint32_t ci, int64_t dev, const cell *args, uint32_t nargs, cell *res,
                        uint32_t nres) {
    const hlo_comp *c = &x->m->comps[ci];
    comp_info *f = &x->info[ci];
    if (!f->scalar) {
        f->scalar = scalar_evaluable(c) ? 1 : 2;
        if (f->scalar == 1) f->scratch = xcalloc(c->ninstrs ? c->ninstrs : 1, sizeof *f->scratch);
    }
    if (nargs != c->nparams) {
        fail(x, INTERP_ERUN, NULL, "computation %s takes %u parameters, called with %u", c->name, c->nparams, nargs);
        return false;
    }
    if (f->scalar == 2) {
        /* General path: one-element values on this device. */
        interp_val **av = xcalloc(nargs ? nargs : 1, sizeof *av);
        for (uint32_t k = 0; k < nargs; k++) {
            const hlo_instr *p = &c->instrs[c->params[k]];
            av[k] = val_shape(&p->shape);
            if (!av[k] || av[k]->n != 1) {
                for (uint32_t j = 0; j <= k; j++) interp_val_free(av[j]);
                free(av);
                fail(x, INTERP_EUNSUPPORTED, p, "a non-scalar parameter in a scalar computation");
                return false;
            }
            put_cell(av[k], 0, args[k]);
        }
        interp_val *o = NULL;
        int st = eval_comp(x, ci, 1, &dev, av, &o);
        for (uint32_t k = 0; k < nargs; k++) interp_val_free(av[k]);
        free(av);
        if (st) return false;
        bool ok = true;
        if (o->dtype == DT_TUPLE) {
            if (o->nelems != nres) ok = false;
            for (uint32_t k = 0; ok && k < nres; k++) {
                if (o->elems[k]->n != 1) ok = false;
                else res[k] = get_cell(o->elems[k], 0);
            }
        } else if (nres == 1 && o->n == 1) res[0] = get_cell(o, 0);
        else ok = false;
        interp_val_free(o);
        if (!ok) fail(x, INTERP_EUNSUPPORTED, &c->instrs[c->root], "computation %s does not return %u scalars", c->name, nres);
        return ok;
    }
    cell *v = f->scratch;
    for (uint32_t i = 0; i < c->ninstrs; i++) {
        const hlo_instr *in = &c->instrs[i];
        int dt = in->shape.dtype;
        const uint32_t *o = in->operands;
        switch (in->op) {
        case OP_PARAMETER: {
            int64_t k = instr_int(in, A_PARAMETER_NUMBER, 0);
            if (k < 0 || k >= nargs) return fail(x, INTERP_ERUN, in, "parameter out of range"), false;
            v[i] = args[k];
            break;
        }
        case OP_CONSTANT: {
            const hlo_attr *a = instr_attr(in, A_LITERAL);
            const hlo_literal *l = a ? a->v.lit : NULL;
            if (!l || l->elided || l->count < 1 || (!l->f && !l->i))
                return fail(x, INTERP_EUNSUPPORTED, in, "constant without a value"), false;
            if (isf(dt)) v[i].f = l->f ? rnd(dt, l->f[0]) : (double)l->i[0];
            else v[i].i = l->i ? wrap(dt, l->i[0]) : float_to_int(dt, l->f[0]);
            break;
        }
        case OP_TUPLE: break;
        case OP_COMPARE: {
            int d = cmp_dir(in);
            if (d == CMP_BAD) return fail(x, INTERP_EUNSUPPORTED, in, "unknown comparison direction"), false;
            v[i].i = compare_cell(d, cmp_total(in), c->instrs[o[0]].shape.dtype, v[o[0]], v[o[1]]);
            break;
        }
        case OP_SELECT: v[i] = v[o[0]].i ? v[o[1]] : v[o[2]]; break;
        case OP_CONVERT: v[i] = convert_cell(c->instrs[o[0]].shape.dtype, dt, v[o[0]]); break;
        case OP_COPY: case OP_BROADCAST: case OP_RESHAPE: v[i] = v[o[0]]; break;
        case OP_CLAMP: {
            cell lo = v[o[0]], a = v[o[1]], hi = v[o[2]];
            cell t;
            binary_cell(OP_MAXIMUM, dt, a, lo, &t);
            binary_cell(OP_MINIMUM, dt, t, hi, &v[i]);
            break;
        }
        default:
            if (is_unary(in->op)) {
                if (!unary_cell(in->op, c->instrs[o[0]].shape.dtype, dt, v[o[0]], &v[i]))
                    return fail(x, INTERP_EUNSUPPORTED, in, "not defined for %s", dtype_name(dt)), false;
            } else if (!binary_cell(in->op, dt, v[o[0]], v[o[1]], &v[i]))
                return fail(x, INTERP_EUNSUPPORTED, in, "not defined for %s", dtype_name(dt)), false;
        }
    }
    const hlo_instr *root = &c->instrs[c->root];
    if (root->op == OP_TUPLE) {
        if (root->noperands != nres) return fail(x, INTERP_ERUN, root, "returns %u values, %u expected", root->noperands, nres), false;
        for (uint32_t k = 0; k < nres; k++) res[k] = v[root->operands[k]];
    } else {
        if (nres != 1) return fail(x, INTERP_ERUN, root, "returns 1 value, %u expected", nres), false;
        res[0] = v[c->root];
    }
    return true;
}

/* acc := acc ⊕ b elementwise, for a recognised reducer or any scalar
 * computation. Sum on f32/f64 is accumulated unrounded when exact_sum is set
 * (the caller rounds at the end). */
static bool combine(ctx *x, const hlo_instr *in, uint32_t ci, int64_t dev, interp_val *acc, const interp_val *b,
                    bool exact_sum) {
    int red = x->m->comps[ci].reducer;
    int dt = acc->dtype;
    if ((acc->im || b->im) && !(red == RED_SUM && acc->im && b->im))
        return fail(x, INTERP_EUNSUPPORTED, in, "a complex reduction other than a sum"), false;
    if (red == RED_SUM && acc->f) {
        bool round = !(exact_sum && (part_dt(dt) == DT_F32 || part_dt(dt) == DT_F64));
        for (int64_t k = 0; k < acc->n; k++) {
            double s = acc->f[k] + b->f[k];
            acc->f[k] = round ? rnd(dt, s) : s;
            if (acc->im) acc->im[k] = round ? rnd(dt, acc->im[k] + b->im[k]) : acc->im[k] + b->im[k];
        }
        return true;
    }
    int op = red == RED_SUM ? OP_ADD : red == RED_PROD ? OP_MULTIPLY : red == RED_MAX ? OP_MAXIMUM
           : red == RED_MIN ? OP_MINIMUM : red == RED_AND ? OP_AND : red == RED_OR ? OP_OR
           : red == RED_XOR ? OP_XOR : 0;
    if (op) {
        for (int64_t k = 0; k < acc->n; k++) {
            cell r;
            if (!binary_cell(op, dt, get_cell(acc, k), get_cell(b, k), &r))
                return fail(x, INTERP_EUNSUPPORTED, in, "reduction not defined for %s", dtype_name(dt)), false;
            put_cell(acc, k, r);
        }
        return true;
    }
    for (int64_t k = 0; k < acc->n; k++) {
        cell args[2] = {get_cell(acc, k), get_cell(b, k)}, r;
        if (!scalar_call(x, ci, dev, args, 2, &r, 1)) return false;
        put_cell(acc, k, r);
    }
    return true;
}

static void round_all(interp_val *v) {
    if (!v->f || part_dt(v->dtype) == DT_F64) return;
    for (int64_t k = 0; k < v->n; k++) v->f[k] = rnd(v->dtype, v->f[k]);
    for (int64_t k = 0; v->im && k < v->n; k++) v->im[k] = rnd(v->dtype, v->im[k]);
}

/* Copies a's elements into r (same type and element count). */
static void copy_all(interp_val *r, const interp_val *a) {
    if (a->f) memcpy(r->f, a->f, (size_t)a->n * sizeof *a->f);
    else memcpy(r->i, a->i, (size_t)a->n * sizeof *a->i);
    if (a->im) memcpy(r->im, a->im, (size_t)a->n * sizeof *a->im);
}

static interp_val *val_copy(const interp_val *v) {
    interp_val *r = val_like(v, v->dtype);
    copy_all(r, v);
    return r;
}

/* ------------------------------------------------------------------ local (per-device) ops */

static int64_t scalar_index(const interp_val *v) { return v->f ? (int64_t)v->f[0] : v->i[0]; }

/* Reads a complex literal's text, "(re, im)" per element in row-major order
 * whatever braces group them, into r; false unless it holds r->n pairs. */
static bool complex_literal(const char *p, interp_val *r) {
    int64_t k = 0;
    while ((p = strchr(p, '('))) {
        char *e;
        double re = strtod(++p, &e);
        if (e == p) return false;
        for (p = e; *p == ' '; p++) {}
        if (*p++ != ',') return false;
        double im = strtod(p, &e);
        if (e == p) return false;
        for (p = e; *p == ' '; p++) {}
        if (*p++ != ')' || k >= r->n) return false;
        r->f[k] = rnd(r->dtype, re);
        r->im[k++] = rnd(r->dtype, im);
    }
    return k == r->n;
}

static interp_val *op_constant(ctx *x, const hlo_instr *in) {
    const hlo_attr *a = instr_attr(in, A_LITERAL);
    const hlo_literal *l = a ? a->v.lit : NULL;
    if (l && !l->elided && l->raw && dtype_is_complex(in->shape.dtype)) {
        interp_val *r = val_shape(&in->shape);
        if (r && complex_literal(l->raw, r)) return r;
        interp_val_free(r);
        return fail(x, INTERP_ERUN, in, "unreadable complex literal, or not one (re, im) pair per element");
    }
    if (!l || l->elided || l->raw) return fail(x, INTERP_EUNSUPPORTED, in, "constant without values (elided or tuple)");
    interp_val *r = val_shape(&in->shape);
    if (!r) return fail(x, INTERP_EUNSUPPORTED, in, "element type %s", dtype_name(in->shape.dtype));
    if (l->count != r->n && l->count != 1) {
        int64_t n = r->n;
        interp_val_free(r);
        return fail(x, INTERP_ERUN, in, "literal has %lld values for %lld elements", (long long)l->count, (long long)n);
    }
    for (int64_t k = 0; k < r->n; k++) {
        int64_t s = l->count == 1 ? 0 : k;
        if (r->f) r->f[k] = rnd(r->dtype, l->f ? l->f[s] : (double)l->i[s]);
        else r->i[k] = l->i ? wrap(r->dtype, l->i[s]) : float_to_int(r->dtype, l->f[s]);
    }
    return r;
}

static interp_val *op_iota(ctx *x, const hlo_instr *in) {
    interp_val *r = val_shape(&in->shape);
    if (!r) return fail(x, INTERP_EUNSUPPORTED, in, "element type %s", dtype_name(in->shape.dtype));
    int64_t d = instr_int(in, A_IOTA_DIMENSION, 0);
    if (d < 0 || d >= (int64_t)r->rank) {
        interp_val_free(r);
        return fail(x, INTERP_ERUN, in, "iota_dimension out of range");
    }
    int64_t idx[INTERP_MAX_RANK] = {0};
    for (int64_t k = 0; k < r->n; k++) {
        if (r->f) r->f[k] = rnd(r->dtype, (double)idx[d]);
        else r->i[k] = wrap(r->dtype, idx[d]);
        next_idx(idx, r->dims, r->rank);
    }
    return r;
}

/* Whether v has dims (rank) — the shape an instruction declares for it. */
static bool has_dims(const interp_val *v, const int64_t *dims, uint32_t rank) {
    return v->dtype != DT_TUPLE && v->rank == rank && (rank == 0 || memcmp(v->dims, dims, rank * sizeof *dims) == 0);
}

/* The operands of an elementwise op agree with its result's dims (a pred or
 * bounds may be scalars) and its data operands share one element type: a
 * malformed program is an error, never a read past a value. */
static const char *elementwise_mismatch(const hlo_instr *in, interp_val **ops, const interp_val *r) {
    int data_dt = -1;
    for (uint32_t o = 0; o < in->noperands; o++) {
        const interp_val *v = ops[o];
        bool pred = in->op == OP_SELECT && o == 0;
        bool scalar_ok = pred || (in->op == OP_CLAMP && o != 1);
        if (!has_dims(v, r->dims, r->rank) && !(scalar_ok && v->dtype != DT_TUPLE && v->n == 1))
            return "an operand's dims differ from the result's";
        if (pred && v->dtype != DT_PRED) return "the predicate is not pred";
        if (pred || in->op == OP_CONVERT || in->op == OP_BITCAST_CONVERT) continue;
        if (data_dt >= 0 && v->dtype != data_dt) return "operands of different element types";
        data_dt = v->dtype;
    }
    if (in->op == OP_SELECT && data_dt >= 0 && data_dt != r->dtype) return "the result's element type differs from the operands'";
    if (in->op == OP_COMPARE && r->dtype != DT_PRED) return "a comparison whose result is not pred";
    return NULL;
}

static bool bitcast_ok(int dt) {
    return dt == DT_F32 || dt == DT_F64 || dt == DT_BF16 || dt == DT_F16 || (dtype_is_int(dt) && dt != DT_PRED);
}

/* bitcast-convert of a to r's type: of one width element by element; else
 * each wide element is its narrow ones along r's (a's) extra last dim,
 * least significant first (XLA on a little-endian host, numpy's view).
 * False for other types or shapes. */
static bool bitcast_val(const interp_val *a, interp_val *r) {
    int wa = dtype_bits(a->dtype), wr = dtype_bits(r->dtype);
    if (!bitcast_ok(a->dtype) || !bitcast_ok(r->dtype)) return false;
    if (wa == wr) {
        if (a->n != r->n) return false;
        for (int64_t k = 0; k < r->n; k++) put_cell(r, k, bits_cell(r->dtype, cell_bits(a->dtype, get_cell(a, k))));
        return true;
    }
    bool split = wa > wr;
    int64_t q = split ? wa / wr : wr / wa;
    const interp_val *wide = split ? a : r, *narrow = split ? r : a;
    if (narrow->rank != wide->rank + 1 || narrow->dims[narrow->rank - 1] != q || narrow->n != wide->n * q) return false;
    int nb = dtype_bits(narrow->dtype);
    uint64_t mask = nb >= 64 ? UINT64_MAX : ((uint64_t)1 << nb) - 1;
    for (int64_t k = 0; k < wide->n; k++) {
        if (split) {
            uint64_t u = cell_bits(a->dtype, get_cell(a, k));
            for (int64_t j = 0; j < q; j++) put_cell(r, k * q + j, bits_cell(r->dtype, (u >> (j * nb)) & mask));
        } else {
            uint64_t u = 0;
            for (int64_t j = 0; j < q; j++) u |= (cell_bits(a->dtype, get_cell(a, k * q + j)) & mask) << (j * nb);
            put_cell(r, k, bits_cell(r->dtype, u));
        }
    }
    return true;
}

/* The elementwise ops on complex values (interp.h), and real / imag /
 * complex on real ones: both parts in double, each rounded to the result's
 * part type. r is the result, allocated and checked by op_elementwise. */
static interp_val *op_elementwise_complex(ctx *x, const hlo_instr *in, interp_val **ops, interp_val *r) {
    int op = in->op, rdt = in->shape.dtype, dir = op == OP_COMPARE ? cmp_dir(in) : CMP_BAD;
    const interp_val *a = ops[0], *b = in->noperands > 1 ? ops[1] : NULL;
    bool binary = op == OP_ADD || op == OP_SUBTRACT || op == OP_MULTIPLY || op == OP_DIVIDE || op == OP_COMPLEX ||
                  op == OP_COMPARE;
    bool ok = in->noperands == (binary ? 2u : 1u) && (a->f || op == OP_CONVERT);
    switch (op) {
    case OP_ADD: case OP_SUBTRACT: case OP_MULTIPLY: case OP_DIVIDE: case OP_NEGATE: case OP_EXP: case OP_CONVERT:
        ok = ok && r->im; break;                      /* complex to real converts are not HLO */
    case OP_COMPLEX: ok = ok && !a->im && r->im; break;
    case OP_REAL: case OP_IMAG: case OP_ABS: ok = ok && r->f && !r->im; break;
    case OP_COMPARE: ok = ok && (dir == CMP_EQ || dir == CMP_NE); break;
    default: ok = false;
    }
    if (!ok) {
        interp_val_free(r);
        return fail(x, INTERP_EUNSUPPORTED, in, "not defined for complex values (%s to %s)", dtype_name(a->dtype),
                    dtype_name(rdt));
    }
    for (int64_t k = 0; k < r->n; k++) {
        double ar = interp_val_get(a, k), ai = a->im ? a->im[k] : 0, br = 0, bi = 0, zr, zi = 0;
        if (b) br = interp_val_get(b, k), bi = b->im ? b->im[k] : 0;
        switch (op) {
        case OP_ADD: zr = ar + br, zi = ai + bi; break;
        case OP_SUBTRACT: zr = ar - br, zi = ai - bi; break;
        case OP_MULTIPLY: zr = ar * br - ai * bi, zi = ar * bi + ai * br; break;
        case OP_DIVIDE: {
            /* Smith's division: no overflow from squaring the divisor. */
            bool wide = fabs(br) >= fabs(bi);
            double q = wide ? bi / br : br / bi, den = wide ? br + bi * q : br * q + bi;
            zr = (wide ? ar + ai * q : ar * q + ai) / den;
            zi = (wide ? ai - ar * q : ai * q - ar) / den;
            break;
        }
        case OP_NEGATE: zr = -ar, zi = -ai; break;
        case OP_ABS: zr = hypot(ar, ai); break;
        case OP_EXP: zr = exp(ar) * cos(ai), zi = exp(ar) * sin(ai); break;
        case OP_COMPLEX: zr = ar, zi = br; break;
        case OP_IMAG: zr = ai; break;
        case OP_COMPARE: r->i[k] = (ar == br && ai == bi) == (dir == CMP_EQ); continue;
        default: zr = ar, zi = ai; break;  /* convert, real */
        }
        r->f[k] = rnd(rdt, zr);
        if (r->im) r->im[k] = rnd(rdt, zi);
    }
    return r;
}

static interp_val *op_elementwise(ctx *x, const hlo_instr *in, interp_val **ops) {
    int op = in->op, rdt = in->shape.dtype;
    interp_val *a = ops[0];
    interp_val *r = val_shape(&in->shape);
    if (!r) return fail(x, INTERP_EUNSUPPORTED, in, "element type %s", dtype_name(rdt));
    const char *bad = op == OP_BITCAST_CONVERT ? NULL : elementwise_mismatch(in, ops, r);
    if (bad) {
        interp_val_free(r);
        return fail(x, INTERP_ERUN, in, "%s", bad);
    }
    if (op != OP_SELECT && (r->im || a->im || op == OP_COMPLEX || op == OP_REAL || op == OP_IMAG))
        return op_elementwise_complex(x, in, ops, r);
    if (op == OP_BITCAST_CONVERT) {
        if (bitcast_val(a, r)) return r;
        interp_val_free(r);
        return fail(x, INTERP_EUNSUPPORTED, in, "bitcast-convert from %s to %s with these shapes", dtype_name(a->dtype),
                    dtype_name(rdt));
    }
    if (op == OP_CONVERT) {
        for (int64_t k = 0; k < r->n; k++) put_cell(r, k, convert_cell(a->dtype, rdt, get_cell(a, k)));
        return r;
    }
    if (op == OP_COMPARE) {
        int d = cmp_dir(in);
        bool total = cmp_total(in);
        if (d == CMP_BAD) {
            interp_val_free(r);
            return fail(x, INTERP_EUNSUPPORTED, in, "unknown comparison direction");
        }
        for (int64_t k = 0; k < r->n; k++) r->i[k] = compare_cell(d, total, a->dtype, get_cell(a, k), get_cell(ops[1], k));
        return r;
    }
    if (op == OP_SELECT) {
        const interp_val *p = ops[0], *t = ops[1], *f = ops[2];
        for (int64_t k = 0; k < r->n; k++) {
            bool c = p->i[p->n == 1 ? 0 : k] != 0;
            copy_elem(r, k, c ? t : f, k);
        }
        return r;
    }
    if (op == OP_CLAMP) {
        const interp_val *lo = ops[0], *v = ops[1], *hi = ops[2];
        for (int64_t k = 0; k < r->n; k++) {
            cell t, o;
            binary_cell(OP_MAXIMUM, rdt, get_cell(v, k), get_cell(lo, lo->n == 1 ? 0 : k), &t);
            binary_cell(OP_MINIMUM, rdt, t, get_cell(hi, hi->n == 1 ? 0 : k), &o);
            put_cell(r, k, o);
        }
        return r;
    }
    if (is_unary(op)) {
        if (r->f && a->f && op != OP_IS_FINITE) {
            for (int64_t k = 0; k < r->n; k++) {
                double o;
                if (!unary_f(op, a->f[k], &o)) {
                    interp_val_free(r);
                    return fail(x, INTERP_EUNSUPPORTED, in, "not defined for %s", dtype_name(a->dtype));
                }
                r->f[k] = rnd(rdt, o);
            }
            return r;
        }
        for (int64_t k = 0; k < r->n; k++) {
            cell o;
            if (!unary_cell(op, a->dtype, rdt, get_cell(a, k), &o)) {
                interp_val_free(r);
                return fail(x, INTERP_EUNSUPPORTED, in, "not defined for %s", dtype_name(a->dtype));
            }
            put_cell(r, k, o);
        }
        return r;
    }
    const interp_val *b = ops[1];
    if (r->f && a->f && b->f && rdt == a->dtype) {
        for (int64_t k = 0; k < r->n; k++) {
            double o;
            if (!binary_f(op, a->f[k], b->f[k], &o)) {
                interp_val_free(r);
                return fail(x, INTERP_EUNSUPPORTED, in, "not defined for %s", dtype_name(rdt));
            }
            r->f[k] = rnd(rdt, o);
        }
        return r;
    }
    for (int64_t k = 0; k < r->n; k++) {
        cell o;
        if (!binary_cell(op, a->dtype, get_cell(a, k), get_cell(b, k), &o)) {
            interp_val_free(r);
            return fail(x, INTERP_EUNSUPPORTED, in, "not defined for %s", dtype_name(a->dtype));
        }
        put_cell(r, k, o);
    }
    return r;
}

static interp_val *op_broadcast(ctx *x, const hlo_instr *in, const interp_val *a) {
    interp_val *r = val_shape(&in->shape);
    if (!r) return fail(x, INTERP_EUNSUPPORTED, in, "element type %s", dtype_name(in->shape.dtype));
    uint32_t nd;
    const int64_t *dims = instr_ints(in, A_DIMENSIONS, &nd);
    if (nd != a->rank || a->dtype != r->dtype) {
        interp_val_free(r);
        return fail(x, INTERP_ERUN, in, "dimensions={...} has %u entries for a rank-%u operand, or the element type changes", nd,
                    a->rank);
    }
    int64_t ast[INTERP_MAX_RANK];
    strides_of(a->dims, a->rank, ast);
    /* Stride of each result dim in the operand (0 for new dims). */
    int64_t rs[INTERP_MAX_RANK] = {0};
    for (uint32_t k = 0; k < nd; k++) {
        if (dims[k] < 0 || dims[k] >= (int64_t)r->rank || r->dims[dims[k]] != a->dims[k]) {
            interp_val_free(r);
            return fail(x, INTERP_ERUN, in, "broadcast dimension out of range or of another size");
        }
        rs[dims[k]] = ast[k];
    }
    affine_copy(r, a, 0, rs, true);
    return r;
}

static interp_val *op_reshape(ctx *x, const hlo_instr *in, const interp_val *a) {
    interp_val *r = val_shape(&in->shape);
    if (!r) return fail(x, INTERP_EUNSUPPORTED, in, "element type %s", dtype_name(in->shape.dtype));
    if (r->n != a->n || r->dtype != a->dtype) {
        int64_t n = r->n;
        interp_val_free(r);
        return fail(x, INTERP_ERUN, in, "reshape of %lld elements into %lld", (long long)a->n, (long long)n);
    }
    copy_all(r, a);
    return r;
}

static interp_val *op_transpose(ctx *x, const hlo_instr *in, const interp_val *a) {
    interp_val *r = val_shape(&in->shape);
    if (!r) return fail(x, INTERP_EUNSUPPORTED, in, "element type %s", dtype_name(in->shape.dtype));
    uint32_t nd;
    const int64_t *perm = instr_ints(in, A_DIMENSIONS, &nd);
    bool ok = nd == a->rank && r->rank == a->rank && r->dtype == a->dtype;
    for (uint32_t d = 0; d < nd && ok; d++) ok = perm[d] >= 0 && perm[d] < (int64_t)a->rank && r->dims[d] == a->dims[perm[d]];
    if (!ok) {
        interp_val_free(r);
        return fail(x, INTERP_ERUN, in, "permutation does not match the operand's dims");
    }
    int64_t ast[INTERP_MAX_RANK], rs[INTERP_MAX_RANK];
    strides_of(a->dims, a->rank, ast);
    for (uint32_t d = 0; d < nd; d++) rs[d] = ast[perm[d]];
    affine_copy(r, a, 0, rs, true);
    return r;
}

static interp_val *op_reverse(ctx *x, const hlo_instr *in, const interp_val *a) {
    interp_val *r = val_copy(a);
    uint32_t nd;
    const int64_t *dims = instr_ints(in, A_DIMENSIONS, &nd);
    bool rev[INTERP_MAX_RANK] = {false};
    for (uint32_t k = 0; k < nd; k++)
        if (dims[k] >= 0 && (uint32_t)dims[k] < a->rank) rev[dims[k]] = true;
    int64_t st[INTERP_MAX_RANK], base = 0;
    strides_of(a->dims, a->rank, st);
    for (uint32_t d = 0; d < a->rank; d++)
        if (rev[d]) {
            base += (a->dims[d] - 1) * st[d];
            st[d] = -st[d];
        }
    affine_copy(r, a, base, st, true);
    (void)x;
    return r;
}

static interp_val *op_slice(ctx *x, const hlo_instr *in, const interp_val *a) {
    const hlo_attr *at = instr_attr(in, A_SLICE);
    interp_val *r = val_shape(&in->shape);
    if (!r) return fail(x, INTERP_EUNSUPPORTED, in, "element type %s", dtype_name(in->shape.dtype));
    if (!at || at->n != a->rank) {  /* n counts dimensions */
        interp_val_free(r);
        return fail(x, INTERP_ERUN, in, "slice={...} does not match the rank");
    }
    const int64_t *s = at->v.ints; /* start, limit, stride per dim */
    bool ok = r->rank == a->rank && r->dtype == a->dtype;
    for (uint32_t d = 0; d < a->rank && ok; d++) {
        int64_t lo = s[3 * d], hi = s[3 * d + 1], by = s[3 * d + 2] ? s[3 * d + 2] : 1;
        ok = lo >= 0 && lo <= hi && hi <= a->dims[d] && by > 0 && r->dims[d] == (hi - lo + by - 1) / by;
    }
    if (!ok) {
        interp_val_free(r);
        return fail(x, INTERP_ERUN, in, "slice={...} is outside the operand or disagrees with the result's dims");
    }
    int64_t st[INTERP_MAX_RANK], step[INTERP_MAX_RANK], base = 0;
    strides_of(a->dims, a->rank, st);
    for (uint32_t d = 0; d < a->rank; d++) {
        base += s[3 * d] * st[d];
        step[d] = (s[3 * d + 2] ? s[3 * d + 2] : 1) * st[d];
    }
    affine_copy(r, a, base, step, true);
    return r;
}

/* The window of big at the scalar start indices starts[0..rank) (clamped, as
 * XLA does, so that the window fits) has small's dims. Copies the window into
 * small (into_small), or small into the window. */
static void window_copy(interp_val *small, interp_val *big, interp_val *const *starts, bool into_small) {
    int64_t start[INTERP_MAX_RANK];
    for (uint32_t d = 0; d < big->rank; d++) {
        int64_t s = scalar_index(starts[d]), hi = big->dims[d] - small->dims[d];
        start[d] = s < 0 ? 0 : s > hi ? hi : s;
    }
    int64_t st[INTERP_MAX_RANK];
    strides_of(big->dims, big->rank, st);
    int64_t base = offset_of(start, st, big->rank);
    if (into_small) affine_copy(small, big, base, st, true);
    else affine_copy(big, small, base, st, false);
}

/* Whether a window of small's dims fits in big, with one scalar start index
 * per dim (starts) and the same element type. */
static bool window_fits(const interp_val *small, const interp_val *big, interp_val *const *starts) {
    if (small->dtype == DT_TUPLE || big->dtype == DT_TUPLE || small->rank != big->rank || small->dtype != big->dtype)
        return false;
    for (uint32_t d = 0; d < big->rank; d++)
        if (small->dims[d] > big->dims[d] || starts[d]->dtype == DT_TUPLE || starts[d]->n != 1) return false;
    return true;
}

static interp_val *op_dynamic_slice(ctx *x, const hlo_instr *in, interp_val **ops) {
    interp_val *a = ops[0]; /* read only */
    interp_val *r = val_shape(&in->shape);
    if (!r) return fail(x, INTERP_EUNSUPPORTED, in, "element type %s", dtype_name(in->shape.dtype));
    if (in->noperands != 1 + a->rank || !window_fits(r, a, ops + 1)) {
        interp_val_free(r);
        return fail(x, INTERP_ERUN, in, "expects one scalar start index per dimension and a window inside the operand");
    }
    window_copy(r, a, ops + 1, true);
    return r;
}

static interp_val *op_dynamic_update_slice(ctx *x, const hlo_instr *in, interp_val **ops) {
    interp_val *a = ops[0], *u = ops[1]; /* read only */
    if (in->noperands != 2 + a->rank || !window_fits(u, a, ops + 2) || !has_dims(a, in->shape.dims, in->shape.rank))
        return fail(x, INTERP_ERUN, in, "expects one scalar start index per dimension and an update inside the operand");
    interp_val *r = val_copy(a);
    window_copy(u, r, ops + 2, false);
    return r;
}

/* Concatenation of vals[0..n) along dimension dim (shapes otherwise equal). */
static interp_val *concat(interp_val *const *vals, uint32_t n, uint32_t dim) {
    int64_t dims[INTERP_MAX_RANK];
    const interp_val *a = vals[0];
    /* every part has a's type and dims, but along dim */
    for (uint32_t k = 0; k < n; k++) {
        const interp_val *v = vals[k];
        if (v->dtype != a->dtype || v->dtype == DT_TUPLE || v->rank != a->rank || dim >= a->rank) return NULL;
        for (uint32_t d = 0; d < a->rank; d++)
            if (d != dim && v->dims[d] != a->dims[d]) return NULL;
    }
    memcpy(dims, a->dims, a->rank * sizeof *dims);
    dims[dim] = 0;
    for (uint32_t k = 0; k < n; k++) dims[dim] += vals[k]->dims[dim];
    interp_val *r = val_new(a->dtype, a->rank, dims);
    if (!r) return NULL;
    int64_t outer = 1, inner = 1;
    for (uint32_t d = 0; d < dim; d++) outer *= dims[d];
    for (uint32_t d = dim + 1; d < a->rank; d++) inner *= dims[d];
    int64_t w = 0;
    for (int64_t o = 0; o < outer; o++)
        for (uint32_t k = 0; k < n; k++) {
            int64_t chunk = vals[k]->dims[dim] * inner;
            for (int64_t j = 0; j < chunk; j++) copy_elem(r, w++, vals[k], o * chunk + j);
        }
    return r;
}

static interp_val *op_concatenate(ctx *x, const hlo_instr *in, interp_val **ops) {
    uint32_t nd;
    const int64_t *dims = instr_ints(in, A_DIMENSIONS, &nd);
    if (nd != 1 || dims[0] < 0 || dims[0] >= (int64_t)ops[0]->rank)
        return fail(x, INTERP_ERUN, in, "needs one dimension");
    interp_val *r = concat(ops, in->noperands, (uint32_t)dims[0]);
    if (!r) return fail(x, INTERP_ERUN, in, "cannot concatenate");
    if (r->dtype != in->shape.dtype || !has_dims(r, in->shape.dims, in->shape.rank)) {
        interp_val_free(r);
        return fail(x, INTERP_ERUN, in, "the operands concatenate to another shape than the result's");
    }
    return r;
}

static interp_val *op_pad(ctx *x, const hlo_instr *in, interp_val **ops) {
    const interp_val *a = ops[0], *pv = ops[1];
    const hlo_attr *at = instr_attr(in, A_PADDING);
    interp_val *r = val_shape(&in->shape);
    if (!r) return fail(x, INTERP_EUNSUPPORTED, in, "element type %s", dtype_name(in->shape.dtype));
    /* padding is absent when every entry is 0 (graph.h drops defaults). */
    if ((at && at->n != a->rank) || a->dtype != r->dtype || pv->dtype != r->dtype || pv->n < 1 || a->rank != r->rank) {
        interp_val_free(r); /* padding's n counts dimensions */
        return fail(x, INTERP_ERUN, in, "padding does not match the rank, or the element types differ");
    }
    /* XLA's shape rule: low + high + n + (n - 1) · interior, interior ≥ 0. */
    for (uint32_t d = 0; d < a->rank; d++) {
        int64_t lo = at ? at->v.ints[3 * d] : 0, hi = at ? at->v.ints[3 * d + 1] : 0, interior = at ? at->v.ints[3 * d + 2] : 0;
        int64_t n = a->dims[d];
        if (interior < 0 || r->dims[d] != lo + hi + n + (n ? n - 1 : 0) * interior) {
            interp_val_free(r);
            return fail(x, INTERP_ERUN, in, "padding does not give the result's dims (dim %u)", d);
        }
    }
    for (int64_t k = 0; k < r->n; k++) copy_elem(r, k, pv, 0);
    int64_t st[INTERP_MAX_RANK], idx[INTERP_MAX_RANK] = {0};
    strides_of(r->dims, r->rank, st);
    for (int64_t k = 0; k < a->n; k++) {
        int64_t o = 0;
        bool in_range = true;
        for (uint32_t d = 0; d < a->rank; d++) {
            int64_t lo = at ? at->v.ints[3 * d] : 0, interior = at ? at->v.ints[3 * d + 2] : 0;
            int64_t p = lo + idx[d] * (interior + 1);
            if (p < 0 || p >= r->dims[d]) in_range = false;
            o += p * st[d];
        }
        if (in_range) copy_elem(r, o, a, k);
        next_idx(idx, a->dims, a->rank);
    }
    return r;
}

static bool in_list(int64_t v, const int64_t *l, uint32_t n) {
    for (uint32_t k = 0; k < n; k++)
        if (l[k] == v) return true;
    return false;
}

/* r[b][i][j] = Σ_k A[b][i][k]·Bm[b][k][j] over complex numbers held as real
 * and imaginary part arrays, accumulated in double (r is complex). */
static void dot_complex(interp_val *r, const double *A, const double *Ai, const double *Bm, const double *Bi,
                        int64_t B, int64_t M, int64_t K, int64_t N) {
    for (int64_t b = 0; b < B; b++)
        for (int64_t i = 0; i < M; i++) {
            double *re = r->f + (b * M + i) * N, *im = r->im + (b * M + i) * N;
            memset(re, 0, (size_t)N * sizeof *re);
            memset(im, 0, (size_t)N * sizeof *im);
            for (int64_t k = 0; k < K; k++) {
                double ar = A[(b * M + i) * K + k], ai = Ai[(b * M + i) * K + k];
                const double *br = Bm + (b * K + k) * N, *bi = Bi + (b * K + k) * N;
                for (int64_t j = 0; j < N; j++) {
                    re[j] += ar * br[j] - ai * bi[j];
                    im[j] += ar * bi[j] + ai * br[j];
                }
            }
        }
}

static interp_val *op_dot(ctx *x, const hlo_instr *in, const interp_val *l, const interp_val *rr) {
    uint32_t nlb, nlc, nrb, nrc;
    const int64_t *lb = instr_ints(in, A_LHS_BATCH_DIMS, &nlb), *lc = instr_ints(in, A_LHS_CONTRACTING_DIMS, &nlc);
    const int64_t *rb = instr_ints(in, A_RHS_BATCH_DIMS, &nrb), *rc = instr_ints(in, A_RHS_CONTRACTING_DIMS, &nrc);
    if (nlb != nrb || nlc != nrc) return fail(x, INTERP_ERUN, in, "batch/contracting dimension counts differ");
    interp_val *r = val_shape(&in->shape);
    if (!r) return fail(x, INTERP_EUNSUPPORTED, in, "element type %s", dtype_name(in->shape.dtype));
    /* The result is the batch dims, then lhs free, then rhs free dims; every
     * number names a distinct dim of its operand. */
    int64_t want[2 * INTERP_MAX_RANK];
    uint32_t nw = 0;
    uint64_t used[2] = {0, 0};
    bool ok = true;
    for (uint32_t k = 0; k < nlb && ok; k++) {
        ok = l->dims[lb[k]] == rr->dims[rb[k]] && !(used[0] >> lb[k] & 1) && !(used[1] >> rb[k] & 1);
        used[0] |= 1ull << lb[k], used[1] |= 1ull << rb[k];
        want[nw++] = l->dims[lb[k]];
    }
    for (uint32_t k = 0; k < nlc && ok; k++) {
        ok = !(used[0] >> lc[k] & 1) && !(used[1] >> rc[k] & 1);
        used[0] |= 1ull << lc[k], used[1] |= 1ull << rc[k];
    }
    for (int side = 0; side < 2 && ok; side++) {
        const interp_val *v = side ? rr : l;
        for (uint32_t d = 0; d < v->rank; d++)
            if (!(used[side] >> d & 1) && nw < 2 * INTERP_MAX_RANK) want[nw++] = v->dims[d];
    }
    if (!ok || nw != r->rank || (nw && memcmp(want, r->dims, nw * sizeof *want))) {
        interp_val_free(r);
        return fail(x, INTERP_ERUN, in, "result shape does not match the operands");
    }
    int64_t B = 1, K = 1, M = 1, N = 1;
    for (uint32_t k = 0; k < nlb; k++) B *= l->dims[lb[k]];
    for (uint32_t k = 0; k < nlc; k++) {
        if (l->dims[lc[k]] != rr->dims[rc[k]]) {
            interp_val_free(r);
            return fail(x, INTERP_ERUN, in, "contracting dimensions differ in size");
        }
        K *= l->dims[lc[k]];
    }
    /* the free dims' products (from the dims: a contraction of extent 0,
     * jnp.dot of two empty vectors, is zeros of the free dims' shape) */
    for (uint32_t d = 0; d < l->rank; d++)
        if (!(used[0] >> d & 1)) M *= l->dims[d];
    for (uint32_t d = 0; d < rr->rank; d++)
        if (!(used[1] >> d & 1)) N *= rr->dims[d];
    if (B * M * N != r->n || ((l->im || rr->im) && !r->im)) {
        interp_val_free(r);
        return fail(x, INTERP_ERUN, in, "result shape or type does not match the operands");
    }
    /* Gather both operands into [B][M][K] and [B][K][N] double arrays (and
     * their imaginary parts for a complex result). */
    bool cx = r->im != NULL;
    double *A = xmalloc((size_t)(B * M * K + 1) * sizeof *A), *Bm = xmalloc((size_t)(B * K * N + 1) * sizeof *Bm);
    double *Ai = cx ? xcalloc((size_t)(B * M * K + 1), sizeof *Ai) : NULL;
    double *Bi = cx ? xcalloc((size_t)(B * K * N + 1), sizeof *Bi) : NULL;
    for (int side = 0; side < 2; side++) {
        const interp_val *v = side ? rr : l;
        const int64_t *bd = side ? rb : lb, *cd = side ? rc : lc;
        int64_t idx[INTERP_MAX_RANK] = {0};
        for (int64_t e = 0; e < v->n; e++) {
            int64_t b = 0, c = 0, f = 0;
            for (uint32_t k = 0; k < nlb; k++) b = b * v->dims[bd[k]] + idx[bd[k]];
            for (uint32_t k = 0; k < nlc; k++) c = c * v->dims[cd[k]] + idx[cd[k]];
            for (uint32_t d = 0; d < v->rank; d++)
                if (!in_list(d, bd, nlb) && !in_list(d, cd, nlc)) f = f * v->dims[d] + idx[d];
            double val = interp_val_get(v, e), ival = v->im ? v->im[e] : 0;
            int64_t at = side ? (b * K + c) * N + f : (b * M + f) * K + c;
            (side ? Bm : A)[at] = val;
            if (cx) (side ? Bi : Ai)[at] = ival;
            next_idx(idx, v->dims, v->rank);
        }
    }
    if (cx) {
        dot_complex(r, A, Ai, Bm, Bi, B, M, K, N);
        free(A), free(Ai), free(Bm), free(Bi);
        round_all(r);
        return r;
    }
    bool intres = !r->f;
    for (int64_t b = 0; b < B; b++)
        for (int64_t i = 0; i < M; i++) {
            double *row = r->f ? r->f + (b * M + i) * N : NULL;
            int64_t *irow = intres ? r->i + (b * M + i) * N : NULL;
            if (row) memset(row, 0, (size_t)N * sizeof *row);
            const double *a = A + (b * M + i) * K;
            for (int64_t k = 0; k < K; k++) {
                double av = a[k];
                const double *bk = Bm + (b * K + k) * N;
                if (row)
                    for (int64_t j = 0; j < N; j++) row[j] += av * bk[j];
                else
                    for (int64_t j = 0; j < N; j++)
                        irow[j] = (int64_t)((uint64_t)irow[j] + (uint64_t)int_of(av) * (uint64_t)int_of(bk[j]));
            }
        }
    free(A);
    free(Bm);
    if (intres)
        for (int64_t k = 0; k < r->n; k++) r->i[k] = wrap(r->dtype, r->i[k]);
    else round_all(r);
    return r;
}

static interp_val *op_reduce(ctx *x, const hlo_instr *in, interp_val **ops, int64_t dev) {
    uint32_t n = in->noperands / 2, nd;
    const int64_t *rd = instr_ints(in, A_DIMENSIONS, &nd);
    const hlo_attr *ta = instr_attr(in, A_TO_APPLY);
    if (!ta || n == 0 || n * 2 != in->noperands) return fail(x, INTERP_ERUN, in, "malformed reduce");
    uint32_t ci = (uint32_t)ta->v.ints[0];
    const interp_val *a0 = ops[0];
    bool red[INTERP_MAX_RANK] = {false};
    for (uint32_t k = 0; k < nd; k++)
        if (rd[k] >= 0 && (uint32_t)rd[k] < a0->rank) red[rd[k]] = true;
    int64_t odims[INTERP_MAX_RANK];
    uint32_t orank = 0;
    for (uint32_t d = 0; d < a0->rank; d++)
        if (!red[d]) odims[orank++] = a0->dims[d];
    interp_val *outs[64];
    if (n > 64) return fail(x, INTERP_EUNSUPPORTED, in, "more than 64 reduced operands");
    /* every input has the first's dims, every init is one element */
    for (uint32_t k = 0; k < n; k++)
        if (!has_dims(ops[k], a0->dims, a0->rank) || ops[n + k]->dtype == DT_TUPLE || ops[n + k]->n != 1)
            return fail(x, INTERP_ERUN, in, "reduce inputs of different dims, or an init that is not one value");
    for (uint32_t k = 0; k < n; k++) {
        outs[k] = val_new(ops[k]->dtype == ops[n + k]->dtype ? ops[k]->dtype : ops[n + k]->dtype, orank, odims);
        if (!outs[k]) {
            for (uint32_t q = 0; q < k; q++) interp_val_free(outs[q]);
            return fail(x, INTERP_EUNSUPPORTED, in, "element type %s", dtype_name(ops[n + k]->dtype));
        }
        for (int64_t e = 0; e < outs[k]->n; e++) copy_elem(outs[k], e, ops[n + k], 0);
    }
    int64_t ost[INTERP_MAX_RANK], idx[INTERP_MAX_RANK] = {0}, ostd[INTERP_MAX_RANK] = {0};
    strides_of(odims, orank, ost);
    for (uint32_t d = 0, j = 0; d < a0->rank; d++)
        if (!red[d]) ostd[d] = ost[j++];
    int r = x->m->comps[ci].reducer;
    int dt = outs[0]->dtype;
    bool ok = true, cx = false;
    for (uint32_t k = 0; k < 2 * n; k++) cx |= ops[k]->im != NULL;
    if (cx && !(n == 1 && (r == RED_SUM || r == RED_PROD) && outs[0]->im && a0->im)) {
        for (uint32_t k = 0; k < n; k++) interp_val_free(outs[k]);
        return fail(x, INTERP_EUNSUPPORTED, in, "a complex reduce other than one sum");
    }
    if (n == 1 && r == RED_SUM && outs[0]->f && a0->f) {
        bool exact = part_dt(dt) == DT_F32 || part_dt(dt) == DT_F64;
        double *acc = outs[0]->f, *acci = outs[0]->im;
        for (int64_t e = 0; e < a0->n; e++) {
            int64_t o = 0;
            for (uint32_t d = 0; d < a0->rank; d++) o += idx[d] * ostd[d];
            acc[o] += a0->f[e];
            if (!exact) acc[o] = rnd(dt, acc[o]);
            if (acci) acci[o] += a0->im[e];
            next_idx(idx, a0->dims, a0->rank);
        }
        round_all(outs[0]);
    } else if (n == 1 && r == RED_PROD && cx) {
        /* complex products (jnp.prod of a complex array: the FFT's norm) */
        double *pr = outs[0]->f, *pi = outs[0]->im;
        for (int64_t e = 0; e < a0->n; e++) {
            int64_t o = 0;
            for (uint32_t d = 0; d < a0->rank; d++) o += idx[d] * ostd[d];
            double re = pr[o] * a0->f[e] - pi[o] * a0->im[e], im = pr[o] * a0->im[e] + pi[o] * a0->f[e];
            pr[o] = rnd(part_dt(dt), re), pi[o] = rnd(part_dt(dt), im);
            next_idx(idx, a0->dims, a0->rank);
        }
    } else if (n == 1 && r != RED_NONE && r != RED_SUM) {
        int op = r == RED_PROD ? OP_MULTIPLY : r == RED_MAX ? OP_MAXIMUM : r == RED_MIN ? OP_MINIMUM
               : r == RED_AND ? OP_AND : r == RED_OR ? OP_OR : OP_XOR;
        for (int64_t e = 0; e < a0->n && ok; e++) {
            int64_t o = 0;
            for (uint32_t d = 0; d < a0->rank; d++) o += idx[d] * ostd[d];
            cell c;
            if (!binary_cell(op, dt, get_cell(outs[0], o), get_cell(a0, e), &c)) {
                fail(x, INTERP_EUNSUPPORTED, in, "reduction not defined for %s", dtype_name(dt));
                ok = false;
            } else put_cell(outs[0], o, c);
            next_idx(idx, a0->dims, a0->rank);
        }
    } else {
        cell args[128], res[64];
        for (int64_t e = 0; e < a0->n && ok; e++) {
            int64_t o = 0;
            for (uint32_t d = 0; d < a0->rank; d++) o += idx[d] * ostd[d];
            for (uint32_t k = 0; k < n; k++) {
                args[k] = get_cell(outs[k], o);
                args[n + k] = get_cell(ops[k], e);
            }
            if (!scalar_call(x, ci, dev, args, 2 * n, res, n)) ok = false;
            else
                for (uint32_t k = 0; k < n; k++) put_cell(outs[k], o, res[k]);
            next_idx(idx, a0->dims, a0->rank);
        }
    }
    if (!ok) {
        for (uint32_t k = 0; k < n; k++) interp_val_free(outs[k]);
        return NULL;
    }
    if (in->shape.dtype == DT_TUPLE) return interp_val_tuple(n, outs);
    return outs[0];
}

/* Index vector k of the start indices at batch position G (dims of the
 * indices tensor without index_vector_dim). */
static int64_t index_at(const interp_val *ix, int64_t ivd, const int64_t *g, int64_t k) {
    int64_t st[INTERP_MAX_RANK];
    strides_of(ix->dims, ix->rank, st);
    int64_t o = 0;
    for (uint32_t d = 0, j = 0; d < ix->rank; d++) {
        if ((int64_t)d == ivd) o += k * st[d];
        else o += g[j++] * st[d];
    }
    return ix->f ? (int64_t)ix->f[o] : ix->i[o];
}

/* The index side gather and scatter share (XLA's shape rules): index vectors
 * (along index_vector_dim, or one number each when that is the indices'
 * rank) as long as the map into operand dims (start_index_map,
 * scatter_dims_to_operand_dims), and every operand or indices dim named by
 * the map, the dropped dims (collapsed_slice_dims, inserted_window_dims) and
 * the batching pairs in range. NULL when they hold. */
static const char *index_side_mismatch(bool scatter, const interp_val *a, const interp_val *ix, int64_t ivd,
                                       const int64_t *map, uint32_t nmap, const int64_t *dropped, uint32_t ndropped,
                                       const int64_t *ob, const int64_t *sb, uint32_t nb) {
    static const char *const why[2][3] = {
        {"start_index_map does not match the index vectors", "start_index_map out of range", "collapsed_slice_dims out of range"},
        {"scatter_dims_to_operand_dims does not match the index vectors", "scatter_dims_to_operand_dims out of range",
         "inserted_window_dims out of range"}};
    if (ix->dtype == DT_TUPLE || ivd < 0 || ivd > (int64_t)ix->rank) return "index_vector_dim out of range";
    if ((ivd < (int64_t)ix->rank ? ix->dims[ivd] : 1) != (int64_t)nmap) return why[scatter][0];
    for (uint32_t k = 0; k < nmap; k++)
        if (map[k] < 0 || map[k] >= (int64_t)a->rank) return why[scatter][1];
    for (uint32_t k = 0; k < ndropped; k++)
        if (dropped[k] < 0 || dropped[k] >= (int64_t)a->rank) return why[scatter][2];
    for (uint32_t k = 0; k < nb; k++)
        if (ob[k] < 0 || ob[k] >= (int64_t)a->rank || sb[k] < 0 || sb[k] >= (int64_t)ix->rank || sb[k] == ivd)
            return "batching dims out of range";
    return NULL;
}

/* Where a gather's attributes and shapes disagree (XLA's shape rules: the
 * result's batch dims are the indices' dims without index_vector_dim, its
 * offset dims the slice sizes of the operand dims left, every number in
 * range), or NULL. odim: the operand dims of the offset dims, in order. */
static const char *gather_mismatch(const hlo_instr *in, const interp_val *a, const interp_val *ix, const interp_val *r,
                                   const int64_t *odim) {
    uint32_t noff, ncol, nsim, nob, nsb, nss;
    const int64_t *off = instr_ints(in, A_OFFSET_DIMS, &noff), *col = instr_ints(in, A_COLLAPSED_SLICE_DIMS, &ncol);
    const int64_t *sim = instr_ints(in, A_START_INDEX_MAP, &nsim), *ss = instr_ints(in, A_SLICE_SIZES, &nss);
    const int64_t *ob = instr_ints(in, A_OPERAND_BATCHING_DIMS, &nob), *sb = instr_ints(in, A_START_INDICES_BATCHING_DIMS, &nsb);
    int64_t ivd = instr_int(in, A_INDEX_VECTOR_DIM, 0);
    if (a->dtype != r->dtype) return "the result's element type differs from the operand's";
    const char *side = index_side_mismatch(false, a, ix, ivd, sim, nsim, col, ncol, ob, sb, nob);
    if (side) return side;
    for (uint32_t d = 0; d < a->rank; d++)
        if (ss[d] < 0 || ss[d] > a->dims[d]) return "a slice size exceeds the operand";
    uint32_t nix = ivd < (int64_t)ix->rank ? ix->rank - 1 : ix->rank, jo = 0, jb = 0;
    if (r->rank != noff + nix) return "the result's rank is not the batch dims plus the offset dims";
    for (uint32_t d = 0; d < r->rank; d++) {
        bool is_off = false;
        for (uint32_t k = 0; k < noff; k++) is_off |= off[k] == (int64_t)d;
        if (is_off) {
            if (r->dims[d] != ss[odim[jo++]]) return "an offset dim differs from its slice size";
            continue;
        }
        if ((int64_t)jb == ivd) jb++;
        if (jb >= ix->rank || r->dims[d] != ix->dims[jb++]) return "a batch dim differs from the indices'";
    }
    return jo == noff ? NULL : "offset_dims out of order or out of range";
}

static interp_val *op_gather(ctx *x, const hlo_instr *in, const interp_val *a, const interp_val *ix) {
    uint32_t noff, ncol, nsim, nob, nsb, nss;
    const int64_t *off = instr_ints(in, A_OFFSET_DIMS, &noff), *col = instr_ints(in, A_COLLAPSED_SLICE_DIMS, &ncol);
    const int64_t *sim = instr_ints(in, A_START_INDEX_MAP, &nsim), *ss = instr_ints(in, A_SLICE_SIZES, &nss);
    const int64_t *ob = instr_ints(in, A_OPERAND_BATCHING_DIMS, &nob), *sb = instr_ints(in, A_START_INDICES_BATCHING_DIMS, &nsb);
    int64_t ivd = instr_int(in, A_INDEX_VECTOR_DIM, 0);
    interp_val *r = val_shape(&in->shape);
    if (!r) return fail(x, INTERP_EUNSUPPORTED, in, "element type %s", dtype_name(in->shape.dtype));
    if (nss != a->rank || nob != nsb) {
        interp_val_free(r);
        return fail(x, INTERP_ERUN, in, "slice_sizes does not match the operand rank");
    }
    /* Operand dims that appear in the offset dims of the result, in order. */
    int64_t odim[INTERP_MAX_RANK];
    uint32_t no = 0;
    for (uint32_t d = 0; d < a->rank; d++)
        if (!in_list(d, col, ncol) && !in_list(d, ob, nob)) odim[no++] = d;
    if (no != noff) {
        interp_val_free(r);
        return fail(x, INTERP_ERUN, in, "offset_dims does not match the slice");
    }
    const char *bad = gather_mismatch(in, a, ix, r, odim);
    /* every slice within the operand; collapsed and batching dims take one
     * element, a batching dim as long as the indices' it pairs with */
    for (uint32_t d = 0; !bad && d < a->rank; d++)
        if (ss[d] < 0 || ss[d] > a->dims[d] || ((in_list(d, col, ncol) || in_list(d, ob, nob)) && ss[d] != 1))
            bad = "a slice size does not fit its operand dim";
    for (uint32_t k = 0; !bad && k < nob; k++)
        if (ob[k] < 0 || ob[k] >= (int64_t)a->rank || sb[k] < 0 || sb[k] >= (int64_t)ix->rank || sb[k] == ivd ||
            a->dims[ob[k]] != ix->dims[sb[k]])
            bad = "a batching dim differs from the indices' it pairs with";
    if (bad) {
        interp_val_free(r);
        return fail(x, INTERP_ERUN, in, "%s", bad);
    }
    int64_t ast[INTERP_MAX_RANK], idx[INTERP_MAX_RANK] = {0};
    strides_of(a->dims, a->rank, ast);
    for (int64_t e = 0; e < r->n; e++) {
        int64_t g[INTERP_MAX_RANK], full[INTERP_MAX_RANK] = {0};
        uint32_t ng = 0, jo = 0;
        for (uint32_t d = 0; d < r->rank; d++) {
            if (in_list(d, off, noff)) full[odim[jo++]] = idx[d];
            else g[ng++] = idx[d];
        }
        int64_t o = 0;
        bool corner = true, clamped = false; /* the slice's first element: its indices counted once */
        for (uint32_t d = 0; d < a->rank; d++) corner &= full[d] == 0;
        for (uint32_t d = 0; d < a->rank; d++) {
            int64_t start = 0;
            for (uint32_t k = 0; k < nsim; k++)
                if (sim[k] == (int64_t)d) {
                    int64_t s = index_at(ix, ivd, g, k), hi = a->dims[d] - ss[d];
                    start = s < 0 ? 0 : s > hi ? hi : s;
                    clamped |= start != s;
                }
            for (uint32_t k = 0; k < nob; k++)
                if (ob[k] == (int64_t)d) {
                    /* The indices tensor's coordinate at its batching dim sb[k]: g skips ivd. */
                    int64_t pos = sb[k] - (ivd < sb[k] ? 1 : 0);
                    start = g[pos];
                }
            o += (start + full[d]) * ast[d];
        }
        x->stats.gathered += corner;
        x->stats.clamped += corner && clamped;
        copy_elem(r, e, a, o);
        next_idx(idx, r->dims, r->rank);
    }
    return r;
}

/* Where a scatter's attributes and shapes disagree (XLA's shape rules: the
 * updates' window dims are the operand dims left after inserted and batching
 * dims, no larger than them; its other dims are the indices' dims without
 * index_vector_dim; the result is the operand's shape; every number in
 * range), or NULL. wdim: the operand dims of the window dims, in order. */
static const char *scatter_mismatch(const hlo_instr *in, const interp_val *a, const interp_val *ix, const interp_val *u,
                                    const int64_t *wdim) {
    uint32_t nuw, niw, nsd, nib, nsb;
    const int64_t *uw = instr_ints(in, A_UPDATE_WINDOW_DIMS, &nuw), *iw = instr_ints(in, A_INSERTED_WINDOW_DIMS, &niw);
    const int64_t *sd = instr_ints(in, A_SCATTER_DIMS_TO_OPERAND_DIMS, &nsd);
    const int64_t *ib = instr_ints(in, A_INPUT_BATCHING_DIMS, &nib), *sb = instr_ints(in, A_SCATTER_INDICES_BATCHING_DIMS, &nsb);
    int64_t ivd = instr_int(in, A_INDEX_VECTOR_DIM, 0);
    if (a->dtype == DT_TUPLE || u->dtype != a->dtype) return "the updates' element type differs from the operand's";
    if (in->shape.dtype != a->dtype || in->shape.rank != a->rank ||
        (a->rank && memcmp(in->shape.dims, a->dims, a->rank * sizeof *a->dims) != 0))
        return "the result's shape is not the operand's";
    const char *side = index_side_mismatch(true, a, ix, ivd, sd, nsd, iw, niw, ib, sb, nib);
    if (side) return side;
    for (uint32_t k = 0; k < nuw; k++)
        if (uw[k] < 0 || uw[k] >= (int64_t)u->rank || (k && uw[k] <= uw[k - 1])) return "update_window_dims out of range or order";
    uint32_t nix = ivd < (int64_t)ix->rank ? ix->rank - 1 : ix->rank, jw = 0, jb = 0;
    if (u->rank != nuw + nix) return "the updates' rank is not the indices' batch dims plus the window dims";
    for (uint32_t d = 0; d < u->rank; d++) {
        if (in_list(d, uw, nuw)) {
            if (jw >= nuw || u->dims[d] > a->dims[wdim[jw++]]) return "an update window exceeds the operand";
            continue;
        }
        if ((int64_t)jb == ivd) jb++;
        if (jb >= ix->rank || u->dims[d] != ix->dims[jb++]) return "a scatter dim of the updates differs from the indices'";
    }
    return NULL;
}

/* Whether computation c returns its parameter k unchanged (a scatter that
 * puts its update in place). */
static bool returns_param(const hlo_comp *c, int64_t k) {
    const hlo_instr *r = c->ninstrs ? &c->instrs[c->root] : NULL;
    return r && r->op == OP_PARAMETER && instr_int(r, A_PARAMETER_NUMBER, -1) == k;
}

static interp_val *op_scatter(ctx *x, const hlo_instr *in, interp_val **ops, int64_t dev) {
    if (in->noperands != 3) return fail(x, INTERP_EUNSUPPORTED, in, "variadic scatter");
    const interp_val *a = ops[0], *ix = ops[1], *u = ops[2];
    uint32_t nuw, niw, nsd, nib, nsb;
    const int64_t *uw = instr_ints(in, A_UPDATE_WINDOW_DIMS, &nuw), *iw = instr_ints(in, A_INSERTED_WINDOW_DIMS, &niw);
    const int64_t *sd = instr_ints(in, A_SCATTER_DIMS_TO_OPERAND_DIMS, &nsd);
    const int64_t *ib = instr_ints(in, A_INPUT_BATCHING_DIMS, &nib), *sb = instr_ints(in, A_SCATTER_INDICES_BATCHING_DIMS, &nsb);
    int64_t ivd = instr_int(in, A_INDEX_VECTOR_DIM, 0);
    const hlo_attr *ta = instr_attr(in, A_TO_APPLY);
    if (!ta) return fail(x, INTERP_ERUN, in, "scatter without to_apply");
    uint32_t ci = (uint32_t)ta->v.ints[0];
    int64_t wdim[INTERP_MAX_RANK], wsize[INTERP_MAX_RANK];
    uint32_t nw = 0;
    for (uint32_t d = 0; d < a->rank; d++)
        if (!in_list(d, iw, niw) && !in_list(d, ib, nib)) wdim[nw++] = d;
    if (nw != nuw || nib != nsb) return fail(x, INTERP_ERUN, in, "update_window_dims does not match the operand");
    const char *bad = scatter_mismatch(in, a, ix, u, wdim);
    if (bad) return fail(x, INTERP_ERUN, in, "%s", bad);
    for (uint32_t k = 0; k < a->rank; k++) wsize[k] = 1;
    for (uint32_t k = 0; k < nuw; k++) wsize[wdim[k]] = u->dims[uw[k]];
    interp_val *r = val_copy(a);
    int64_t ast[INTERP_MAX_RANK], idx[INTERP_MAX_RANK] = {0};
    strides_of(a->dims, a->rank, ast);
    for (int64_t e = 0; e < u->n; e++) {
        int64_t g[INTERP_MAX_RANK], full[INTERP_MAX_RANK] = {0};
        uint32_t ng = 0, jw = 0;
        for (uint32_t d = 0; d < u->rank; d++) {
            if (in_list(d, uw, nuw)) full[wdim[jw++]] = idx[d];
            else g[ng++] = idx[d];
        }
        int64_t o = 0;
        bool ok = true;
        for (uint32_t d = 0; d < a->rank; d++) {
            int64_t start = 0;
            for (uint32_t k = 0; k < nsd; k++)
                if (sd[k] == (int64_t)d) start = index_at(ix, ivd, g, k);
            for (uint32_t k = 0; k < nib; k++)
                if (ib[k] == (int64_t)d) start = g[sb[k] - (ivd < sb[k] ? 1 : 0)];
            /* XLA skips an update whose whole window does not fit. */
            if (start < 0 || start > a->dims[d] - wsize[d]) ok = false;
            o += (start + full[d]) * ast[d];
        }
        bool corner = true; /* the window's first element: one update */
        for (uint32_t d = 0; d < a->rank; d++) corner &= full[d] == 0;
        x->stats.scattered += corner;
        x->stats.dropped += corner && !ok;
        if (ok && r->im) {
            /* complex values: a sum, or the update put in place (.at[].set) */
            if (x->m->comps[ci].reducer == RED_SUM) {
                r->f[o] = rnd(r->dtype, r->f[o] + u->f[e]);
                r->im[o] = rnd(r->dtype, r->im[o] + u->im[e]);
            } else if (returns_param(&x->m->comps[ci], 1)) {
                copy_elem(r, o, u, e);
            } else {
                interp_val_free(r);
                return fail(x, INTERP_EUNSUPPORTED, in, "a scatter combining complex values other than by a sum or by "
                            "putting the update in place");
            }
        } else if (ok) {
            cell args[2] = {get_cell(r, o), get_cell(u, e)}, res;
            int red = x->m->comps[ci].reducer;
            if (red == RED_SUM && r->f) res.f = rnd(r->dtype, args[0].f + args[1].f);
            else if (!scalar_call(x, ci, dev, args, 2, &res, 1)) {
                interp_val_free(r);
                return NULL;
            }
            put_cell(r, o, res);
        }
        next_idx(idx, u->dims, u->rank);
    }
    return r;
}

/* sort: every operand sorted along `dimension` by the comparator; stable merge
 * sort. The order is the comparator computation ci, or (ci == UINT32_MAX) the
 * total order of operand 0 itself, descending when `descending` (topk). */
typedef struct sort_ctx {
    ctx *x;
    uint32_t ci, n;
    int64_t dev;
    interp_val **ops;
    int64_t base, stride;
    bool descending;
    bool ok;
} sort_ctx;

static bool sort_less(sort_ctx *s, int64_t p, int64_t q) {
    cell args[128], r;
    if (s->ci == UINT32_MAX) {
        const interp_val *a = s->ops[0];
        int c = order3(true, a->dtype, get_cell(a, s->base + p * s->stride), get_cell(a, s->base + q * s->stride));
        return s->descending ? c > 0 : c < 0;
    }
    for (uint32_t k = 0; k < s->n; k++) {
        args[2 * k] = get_cell(s->ops[k], s->base + p * s->stride);
        args[2 * k + 1] = get_cell(s->ops[k], s->base + q * s->stride);
    }
    if (!s->ok || !scalar_call(s->x, s->ci, s->dev, args, 2 * s->n, &r, 1)) {
        s->ok = false;
        return false;
    }
    return r.i != 0;
}

static void merge_sort(sort_ctx *s, int64_t *v, int64_t *tmp, int64_t n) {
    if (n < 2) return;
    int64_t h = n / 2;
    merge_sort(s, v, tmp, h);
    merge_sort(s, v + h, tmp, n - h);
    int64_t i = 0, j = h, k = 0;
    while (i < h && j < n) tmp[k++] = sort_less(s, v[j], v[i]) ? v[j++] : v[i++];
    while (i < h) tmp[k++] = v[i++];
    while (j < n) tmp[k++] = v[j++];
    memcpy(v, tmp, (size_t)n * sizeof *v);
}

static interp_val *op_sort(ctx *x, const hlo_instr *in, interp_val **ops, int64_t dev) {
    uint32_t n = in->noperands, nd;
    const int64_t *dims = instr_ints(in, A_DIMENSIONS, &nd);
    const hlo_attr *ta = instr_attr(in, A_TO_APPLY);
    if (!ta || n == 0 || n > 64) return fail(x, INTERP_EUNSUPPORTED, in, "malformed sort");
    const interp_val *a = ops[0];
    int64_t dim = nd ? dims[0] : 0;
    if (dim < 0 || dim >= (int64_t)a->rank) return fail(x, INTERP_ERUN, in, "sort dimension out of range");
    for (uint32_t k = 1; k < n; k++)
        if (ops[k]->dtype == DT_TUPLE || ops[k]->rank != a->rank || memcmp(ops[k]->dims, a->dims, a->rank * sizeof *a->dims) != 0)
            return fail(x, INTERP_ERUN, in, "sort operand %u's shape differs from operand 0's", k);
    int64_t st[INTERP_MAX_RANK];
    strides_of(a->dims, a->rank, st);
    int64_t len = a->dims[dim];
    interp_val *outs[64];
    for (uint32_t k = 0; k < n; k++) outs[k] = val_copy(ops[k]);
    sort_ctx s = {.x = x, .ci = (uint32_t)ta->v.ints[0], .n = n, .dev = dev, .ops = ops, .stride = st[dim], .ok = true};
    int64_t *perm = xmalloc((size_t)(len + 1) * sizeof *perm), *tmp = xmalloc((size_t)(len + 1) * sizeof *tmp);
    int64_t idx[INTERP_MAX_RANK] = {0}, odims[INTERP_MAX_RANK];
    memcpy(odims, a->dims, a->rank * sizeof *odims);
    odims[dim] = 1;
    int64_t lines = len ? a->n / len : 0;
    for (int64_t l = 0; l < lines && s.ok; l++) {
        int64_t base = 0;
        for (uint32_t d = 0; d < a->rank; d++) base += idx[d] * st[d];
        s.base = base;
        for (int64_t k = 0; k < len; k++) perm[k] = k;
        merge_sort(&s, perm, tmp, len);
        for (uint32_t k = 0; k < n; k++)
            for (int64_t j = 0; j < len; j++) copy_elem(outs[k], base + j * st[dim], ops[k], base + perm[j] * st[dim]);
        next_idx(idx, odims, a->rank);
    }
    free(perm);
    free(tmp);
    if (!s.ok) {
        for (uint32_t k = 0; k < n; k++) interp_val_free(outs[k]);
        return NULL;
    }
    if (in->shape.dtype == DT_TUPLE) return interp_val_tuple(n, outs);
    return outs[0];
}

/* topk: along the last dimension, the k first elements of a stable sort by the
 * total order (descending when largest), and their indices as s32 — XLA's
 * decomposition (a stable sort of (x, iota) comparing x by GtTotalOrder or
 * LtTotalOrder, then a slice): equal values keep the lower index first, +NaN
 * ranks above +inf (and -NaN below -inf), +0 above -0. The custom call "TopK"
 * sorts the same way with its to_apply comparator instead (2 parameters: x
 * only; 4: x then the index). */
/* A raw attribute's text (the readers keep batch normalization's epsilon and
 * feature_index so), or NULL. */
static const char *raw_attr_text(const hlo_instr *in, const char *key) {
    for (uint32_t k = 0; k < in->nattrs; k++)
        if (in->attrs[k].key == A_RAW && in->attrs[k].raw_key && !strcmp(in->attrs[k].raw_key, key)) return in->attrs[k].v.str;
    return NULL;
}

/* What the batch-norm ops share: epsilon, the size nf of the feature dim
 * (feature_index of operand 0) and the number of elements after it (inner).
 * kinds has one letter per operand: 'x' as many elements as operand 0, 'f'
 * one per feature. False unless the attributes are there and in range and
 * every operand is float of its kind's size. */
static bool bn_layout(const hlo_instr *in, interp_val **ops, const char *kinds, double *eps, int64_t *nf, int64_t *inner) {
    const char *et = raw_attr_text(in, "epsilon"), *ft = raw_attr_text(in, "feature_index");
    const interp_val *v = ops[0];
    int64_t fi = ft ? strtoll(ft, NULL, 10) : -1;
    *eps = et ? strtod(et, NULL) : -1;
    if (in->noperands != strlen(kinds) || !et || !ft || fi < 0 || (uint32_t)fi >= v->rank || *eps < 0) return false;
    *nf = v->dims[fi], *inner = 1;
    for (uint32_t d = (uint32_t)fi + 1; d < v->rank; d++) *inner *= v->dims[d];
    for (uint32_t k = 0; kinds[k]; k++)
        if (!ops[k]->f || ops[k]->n != (kinds[k] == 'x' ? v->n : *nf)) return false;
    return true;
}

/* batch-norm-training(x, scale, offset): per feature f (dim feature_index),
 * mean and biased variance over every other dim; the result is the tuple
 * (scale·(x - mean)/sqrt(var + epsilon) + offset, mean, var), as XLA's
 * BatchNormExpander computes it. */
static interp_val *op_batch_norm_training(ctx *x, const hlo_instr *in, interp_val **ops) {
    interp_val *v = ops[0], *sc = ops[1], *of = ops[2];
    double eps;
    int64_t nf, inner;
    if (!bn_layout(in, ops, "xff", &eps, &nf, &inner))
        return fail(x, INTERP_ERUN, in, "batch-norm-training needs float operands, epsilon and a feature_index in range");
    int64_t per = nf ? v->n / nf : 0;
    interp_val *mean = interp_val_new(v->dtype, 1, &nf), *var = interp_val_new(v->dtype, 1, &nf), *out = val_copy(v);
    /* One pass per phase, each feature's sums in element order. */
    double *s = xcalloc((size_t)nf + 1, sizeof *s), *q = xcalloc((size_t)nf + 1, sizeof *q), *r = xcalloc((size_t)nf + 1, sizeof *r);
    for (int64_t e = 0; e < v->n; e++) s[e / inner % nf] += v->f[e];
    for (int64_t f = 0; f < nf; f++) s[f] = per ? s[f] / (double)per : 0;
    for (int64_t e = 0; e < v->n; e++) {
        double c = v->f[e] - s[e / inner % nf];
        q[e / inner % nf] += c * c;
    }
    for (int64_t f = 0; f < nf; f++) {
        double va = per ? q[f] / (double)per : 0;
        mean->f[f] = rnd(v->dtype, s[f]);
        var->f[f] = rnd(v->dtype, va);
        r[f] = 1 / sqrt(va + eps);
    }
    for (int64_t e = 0; e < v->n; e++) {
        int64_t f = e / inner % nf;
        out->f[e] = rnd(v->dtype, (v->f[e] - s[f]) * r[f] * sc->f[f] + of->f[f]);
    }
    free(s), free(q), free(r);
    interp_val *el[3] = {out, mean, var};
    return interp_val_tuple(3, el);
}

/* batch-norm-grad(x, scale, mean, var, dy): per feature, with c = x - mean,
 * r = 1/sqrt(var + epsilon) and N elements per feature, the tuple
 * (scale·r/N·(N·dy - Σdy - c·Σ(dy·c)/(var + epsilon)), Σ(dy·c)·r, Σdy), as
 * XLA's BatchNormExpander computes it. */
static interp_val *op_batch_norm_grad(ctx *x, const hlo_instr *in, interp_val **ops) {
    interp_val *v = ops[0], *sc = ops[1], *mn = ops[2], *vr = ops[3], *dy = ops[4];
    double eps;
    int64_t nf, inner;
    if (!bn_layout(in, ops, "xfffx", &eps, &nf, &inner))
        return fail(x, INTERP_ERUN, in, "batch-norm-grad needs float operands, epsilon and a feature_index in range");
    double n = nf ? (double)(v->n / nf) : 0;
    interp_val *gx = val_copy(v), *gs = interp_val_new(v->dtype, 1, &nf), *go = interp_val_new(v->dtype, 1, &nf);
    double *sdy = xcalloc((size_t)nf + 1, sizeof *sdy), *sdyc = xcalloc((size_t)nf + 1, sizeof *sdyc);
    for (int64_t e = 0; e < v->n; e++) {
        int64_t f = e / inner % nf;
        sdy[f] += dy->f[e], sdyc[f] += dy->f[e] * (v->f[e] - mn->f[f]);
    }
    for (int64_t e = 0; e < v->n; e++) {
        int64_t f = e / inner % nf;
        double ve = vr->f[f] + eps, r = 1 / sqrt(ve), c = v->f[e] - mn->f[f];
        gx->f[e] = rnd(v->dtype, sc->f[f] * r / (n ? n : 1) * (n * dy->f[e] - sdy[f] - c * sdyc[f] / ve));
    }
    for (int64_t f = 0; f < nf; f++) {
        gs->f[f] = rnd(v->dtype, sdyc[f] * (1 / sqrt(vr->f[f] + eps)));
        go->f[f] = rnd(v->dtype, sdy[f]);
    }
    free(sdy), free(sdyc);
    interp_val *el[3] = {gx, gs, go};
    return interp_val_tuple(3, el);
}

/* batch-norm-inference(x, scale, offset, mean, var): per feature f,
 * scale·(x - mean)/sqrt(var + epsilon) + offset. */
static interp_val *op_batch_norm_inference(ctx *x, const hlo_instr *in, interp_val **ops) {
    interp_val *v = ops[0], *sc = ops[1], *of = ops[2], *mn = ops[3], *vr = ops[4];
    double eps;
    int64_t nf, inner;
    if (!bn_layout(in, ops, "xffff", &eps, &nf, &inner))
        return fail(x, INTERP_ERUN, in, "batch-norm-inference needs float operands, epsilon and a feature_index in range");
    interp_val *out = val_copy(v);
    for (int64_t e = 0; e < v->n; e++) {
        int64_t f = e / inner % nf;
        out->f[e] = rnd(v->dtype, (v->f[e] - mn->f[f]) / sqrt(vr->f[f] + eps) * sc->f[f] + of->f[f]);
    }
    return out;
}

static interp_val *op_topk(ctx *x, const hlo_instr *in, interp_val *a, int64_t k, bool largest, uint32_t ci,
                           int64_t dev) {
    if (a->dtype == DT_TUPLE || a->rank == 0) return fail(x, INTERP_ERUN, in, "topk of a scalar or a tuple");
    uint32_t last = a->rank - 1;
    int64_t len = a->dims[last];
    if (k < 0 || k > len) return fail(x, INTERP_ERUN, in, "k=%lld outside 0..%lld", (long long)k, (long long)len);
    int64_t dims[INTERP_MAX_RANK];
    memcpy(dims, a->dims, a->rank * sizeof *dims);
    dims[last] = k;
    interp_val *iota = NULL;
    uint32_t n = 1;
    if (ci != UINT32_MAX) {
        const hlo_comp *cc = &x->m->comps[ci];
        n = cc->nparams / 2;
        if (n < 1 || n > 2 || cc->nparams != 2 * n)
            return fail(x, INTERP_EUNSUPPORTED, in, "a TopK comparator of %u parameters", cc->nparams);
        for (uint32_t p = 0; p < cc->nparams; p++) {
            const shape *ps = &cc->instrs[cc->params[p]].shape;
            if (ps->rank != 0 || ps->dtype != (p < 2 ? a->dtype : DT_S32))
                return fail(x, INTERP_ERUN, in, "TopK comparator parameter %u is not a scalar %s", p,
                            dtype_name(p < 2 ? a->dtype : DT_S32));
        }
        iota = val_like(a, DT_S32);
        for (int64_t e = 0; e < iota->n; e++) iota->i[e] = e % len;
    }
    interp_val *el[2] = {interp_val_new(a->dtype, a->rank, dims), interp_val_new(DT_S32, a->rank, dims)};
    interp_val *t = interp_val_tuple(2, el);
    if (!interp_val_matches(t, &in->shape)) {
        interp_val_free(t);
        interp_val_free(iota);
        return fail(x, INTERP_ERUN, in, "the result is not (values, s32 indices) with k=%lld in the last dimension", (long long)k);
    }
    interp_val *sops[2] = {a, iota};
    sort_ctx s = {.x = x, .ci = ci, .n = n, .dev = dev, .ops = sops, .stride = 1, .descending = largest, .ok = true};
    int64_t *perm = xmalloc((size_t)(len + 1) * sizeof *perm), *tmp = xmalloc((size_t)(len + 1) * sizeof *tmp);
    int64_t lines = len ? a->n / len : 0;
    for (int64_t l = 0; l < lines && s.ok; l++) {
        s.base = l * len;
        for (int64_t j = 0; j < len; j++) perm[j] = j;
        merge_sort(&s, perm, tmp, len);
        for (int64_t j = 0; j < k; j++) {
            copy_elem(el[0], l * k + j, a, s.base + perm[j]);
            el[1]->i[l * k + j] = perm[j];
        }
    }
    free(perm);
    free(tmp);
    interp_val_free(iota);
    if (!s.ok) {
        interp_val_free(t);
        return NULL;
    }
    return t;
}

static interp_val *op_reduce_window(ctx *x, const hlo_instr *in, interp_val **ops, int64_t dev);
static interp_val *op_convolution(ctx *x, const hlo_instr *in, const interp_val *a, const interp_val *k);
static interp_val *op_fft(ctx *x, const hlo_instr *in, const interp_val *a);
static interp_val *op_select_and_scatter(ctx *x, const hlo_instr *in, interp_val **ops, int64_t dev);
static interp_val *async_tuple(const shape *s, interp_val *first, interp_val *second);

/* x of float type dt rounded as XLA's reduce-precision to eb exponent and mb
 * mantissa bits: the mantissa to nearest, ties to even, when mb is below
 * dt's; when eb is below dt's, beyond the largest finite value ±inf and below
 * the smallest normal one ±0 (no subnormals). NaN and inf stay. */
static double reduce_precision(int dt, double x, int eb, int mb) {
    int se = 11, sm = 52;
    dtype_float_bits(dt, &se, &sm);
    if (!isfinite(x) || x == 0) return x;
    int e;
    if (mb < sm) {
        /* mb bits after the leading one (x = f·2^e, 1/2 <= |f| < 1); a
         * subnormal of dt keeps the top mb of its stored mantissa bits */
        frexp(x, &e);
        int emin = 2 - (1 << (se - 1));
        double unit = ldexp(1.0, (e - 1 > emin ? e - 1 : emin) - mb);
        x = nearbyint(x / unit) * unit;
    }
    if (eb < se && x != 0) {
        int bias = (1 << (eb - 1)) - 1;
        frexp(x, &e);
        if (e - 1 > bias) return copysign(INFINITY, x);
        if (e - 1 < 1 - bias) return copysign(0.0, x);
    }
    return x;
}

/* The elementwise activations frontends emit as custom calls (the `unary` op
 * class of rules/00-classes.rules; interp.h): silu(x) = x·logistic(x) and
 * gelu_tanh(x) = x/2·(1 + tanh(√(2/π)·(x + 0.044715·x³))), in double.
 * Returns false for any other target. */
static bool activation_f(const char *t, double a, double *r) {
    if (!t) return false;
    if (strcmp(t, "silu") == 0) *r = a / (1.0 + exp(-a));
    else if (strcmp(t, "gelu_tanh") == 0) *r = 0.5 * a * (1.0 + tanh(0.7978845608028654 * (a + 0.044715 * a * a * a)));
    else return false;
    return true;
}

bool interp_activation(const char *target) {
    double r;
    return activation_f(target, 0, &r);
}

/* A result of the custom call: element k of a tuple result, or the result. */
static const shape *result_part(const hlo_instr *in, uint32_t k) {
    if (in->shape.dtype != DT_TUPLE) return k == 0 ? &in->shape : NULL;
    return k < in->shape.ntuple ? &in->shape.tuple[k] : NULL;
}

/* True when s is an array of type dt whose dims are those of v's leading
 * `lead` dims followed by the `ntail` given ones. */
static bool shape_is(const shape *s, int dt, const interp_val *v, uint32_t lead, const int64_t *tail, uint32_t ntail) {
    if (!s || s->dtype != dt || s->rank != lead + ntail) return false;
    for (uint32_t d = 0; d < lead; d++)
        if (s->dims[d] != v->dims[d]) return false;
    for (uint32_t d = 0; d < ntail; d++)
        if (s->dims[lead + d] != tail[d]) return false;
    return true;
}

/* Runs a LAPACK custom call (linalg.h) on operands [batch…, rows, cols] of a
 * real floating type, matrix by matrix, with LAPACK's results: potrf (factor,
 * info), trsm (x), geqrf (a, tau), orgqr (q), getrf (lu, 1-based pivots,
 * info), syevd (eigenvectors, eigenvalues, info), gesdd (a, singular
 * values, U, Vᵀ, info); infos and pivots s32. */
static interp_val *op_lapack(ctx *x, const hlo_instr *in, interp_val **ops, int routine) {
    const char *t = instr_str(in, A_CUSTOM_CALL_TARGET);
    uint32_t want_ops = routine == LINALG_TRSM || routine == LINALG_ORGQR ? 2 : 1;
    const interp_val *a = in->noperands == want_ops ? ops[0] : NULL;
    if (!a || !a->f || a->im || a->rank < 2)
        return fail(x, INTERP_EUNSUPPORTED, in, "custom-call %s: expects %u real floating operand(s) of rank >= 2", t, want_ops);
    uint32_t lead = a->rank - 2;
    int64_t m = a->dims[lead], n = a->dims[lead + 1], k = m < n ? m : n, batch = 1, none[1] = {0};
    for (uint32_t d = 0; d < lead; d++) batch *= a->dims[d];
    const interp_val *b = want_ops == 2 ? ops[1] : NULL;
    int64_t mn[2] = {m, n}, kk[1] = {k}, nn[1] = {n};
    bool ok;
    switch (routine) {
    case LINALG_POTRF: ok = m == n && shape_is(result_part(in, 0), a->dtype, a, lead, mn, 2) &&
                        shape_is(result_part(in, 1), DT_S32, a, lead, none, 0) && in->shape.ntuple == 2; break;
    case LINALG_TRSM: ok = m == n && b->f && !b->im && b->dtype == a->dtype && b->rank == a->rank &&
                       shape_is(result_part(in, 0), b->dtype, b, b->rank, none, 0) &&
                       b->dims[lead + (instr_backend_int(in, "side", 'L') == 'L' ? 0 : 1)] == m; break;
    case LINALG_GEQRF: ok = shape_is(result_part(in, 0), a->dtype, a, lead, mn, 2) &&
                        shape_is(result_part(in, 1), a->dtype, a, lead, kk, 1) && in->shape.ntuple == 2; break;
    case LINALG_ORGQR: ok = b->f && !b->im && b->dtype == a->dtype && b->rank == lead + 1 && m >= n && b->dims[lead] <= n &&
                        shape_is(result_part(in, 0), a->dtype, a, lead, mn, 2); break;
    case LINALG_GETRF: ok = shape_is(result_part(in, 0), a->dtype, a, lead, mn, 2) && shape_is(result_part(in, 1), DT_S32, a, lead, kk, 1) &&
                        shape_is(result_part(in, 2), DT_S32, a, lead, none, 0) && in->shape.ntuple == 3; break;
    case LINALG_GESDD: {
        const shape *us = result_part(in, 2), *vs = result_part(in, 3);
        int64_t uc = us && us->rank == lead + 2 ? us->dims[lead + 1] : -1, vr = vs && vs->rank == lead + 2 ? vs->dims[lead] : -1;
        int64_t ud[2] = {m, uc}, vd[2] = {vr, n};
        ok = in->shape.ntuple == 5 && shape_is(result_part(in, 0), a->dtype, a, lead, mn, 2) &&
             shape_is(result_part(in, 1), a->dtype, a, lead, kk, 1) && (uc == k || uc == m) && (vr == k || vr == n) &&
             shape_is(us, a->dtype, a, lead, ud, 2) && shape_is(vs, a->dtype, a, lead, vd, 2) &&
             shape_is(result_part(in, 4), DT_S32, a, lead, none, 0);
        break;
    }
    case LINALG_SYEVD: ok = m == n && shape_is(result_part(in, 0), a->dtype, a, lead, mn, 2) &&
                         shape_is(result_part(in, 1), a->dtype, a, lead, nn, 1) &&
                         shape_is(result_part(in, 2), DT_S32, a, lead, none, 0) && in->shape.ntuple == 3; break;
    default: ok = false; break;
    }
    for (uint32_t d = 0; ok && b && d < lead; d++) ok = b->dims[d] == a->dims[d];
    if (!ok) return fail(x, INTERP_EUNSUPPORTED, in, "custom-call %s: operand and result shapes LAPACK does not have", t);
    /* work: n³ per matrix (Jacobi sweeps: about 20 n³) */
    int64_t big = m > n ? m : n, side = b ? b->dims[lead] * b->dims[lead + 1] : 1;
    double cost = (double)batch * (double)big * (double)big * (double)big * (routine == LINALG_SYEVD || routine == LINALG_GESDD ? 20 : 1) +
                  (double)batch * (double)big * (double)side;
    if (cost > (double)(x->max_steps - x->steps))
        return fail(x, INTERP_EBUDGET, in, "the factorisation would exceed the step budget of %lld element steps",
                    (long long)x->max_steps);
    x->steps += (int64_t)cost;
    bool lower = instr_backend_int(in, "uplo", 'L') == 'L';
    interp_val *out[5] = {0};
    for (uint32_t o = 0; o < 5 && result_part(in, o); o++) out[o] = val_shape(result_part(in, o));
    interp_val *res = out[0];
    copy_all(res, routine == LINALG_TRSM ? b : a);
    int64_t per = routine == LINALG_TRSM ? b->dims[lead] * b->dims[lead + 1] : m * n;
    int64_t *piv = xcalloc((size_t)(k + 1), sizeof *piv);
    for (int64_t q = 0; q < batch; q++) {
        double *mat = res->f + q * per;
        switch (routine) {
        case LINALG_POTRF: out[1]->i[q] = linalg_potrf(mat, n, lower); break;
        case LINALG_TRSM:
            linalg_trsm(a->f + q * m * m, mat, b->dims[lead], b->dims[lead + 1], instr_backend_int(in, "side", 'L') == 'L', lower,
                        instr_backend_int(in, "trans_x", 'N') != 'N', instr_backend_int(in, "diag", 'N') == 'U');
            break;
        case LINALG_GEQRF: linalg_geqrf(mat, m, n, out[1]->f + q * k); break;
        case LINALG_ORGQR: linalg_orgqr(mat, m, n, b->f + q * b->dims[lead], b->dims[lead]); break;
        case LINALG_GETRF:
            out[2]->i[q] = linalg_getrf(mat, m, n, piv, &x->stats.ties);
            for (int64_t j = 0; j < k; j++) out[1]->i[q * k + j] = piv[j];
            break;
        case LINALG_SYEVD: out[2]->i[q] = linalg_syevd(mat, n, lower, out[1]->f + q * n, &x->stats.ties); break;
        default: {
            int64_t uc = out[2]->dims[lead + 1], vr = out[3]->dims[lead];
            out[4]->i[q] = linalg_gesdd(mat, m, n, out[1]->f + q * k, out[2]->f + q * m * uc, uc, out[3]->f + q * vr * n, vr,
                                        &x->stats.ties);
            break;
        }
        }
    }
    free(piv);
    for (uint32_t o = 0; o < 5; o++)
        for (int64_t e = 0; out[o] && out[o]->f && e < out[o]->n; e++) out[o]->f[e] = rnd(out[o]->dtype, out[o]->f[e]);
    if (in->shape.dtype != DT_TUPLE) return res;
    return interp_val_tuple(in->shape.ntuple, out);
}

/* Evaluates a non-collective, non-control-flow instruction on one device. */
static interp_val *eval_local(ctx *x, const hlo_instr *in, interp_val **ops, int64_t dev) {
    switch (in->op) {
    case OP_CONSTANT: return op_constant(x, in);
    case OP_IOTA: return op_iota(x, in);
    case OP_PARTITION_ID:
    case OP_REPLICA_ID: {
        interp_val *r = val_shape(&in->shape);
        if (!r || r->n != 1) {
            interp_val_free(r);
            return fail(x, INTERP_EUNSUPPORTED, in, "expects a scalar integer result");
        }
        int64_t id = in->op == OP_PARTITION_ID ? dev % x->P : dev / x->P;
        put_cell(r, 0, convert_cell(DT_S64, r->dtype, (cell){.i = id}));
        return r;
    }
    case OP_BROADCAST: return op_broadcast(x, in, ops[0]);
    case OP_RESHAPE: return op_reshape(x, in, ops[0]);
    case OP_BITCAST: {
        /* Row-major reinterpretation: exact for default layouts (all the
         * unoptimised dumps we read); a layout-changing bitcast is a transpose
         * we do not model. */
        if (ops[0]->dtype != in->shape.dtype)
            return fail(x, INTERP_EUNSUPPORTED, in, "a bitcast that changes the element type");
        return op_reshape(x, in, ops[0]);
    }
    case OP_TRANSPOSE: return op_transpose(x, in, ops[0]);
    case OP_REVERSE: return op_reverse(x, in, ops[0]);
    case OP_SLICE: return op_slice(x, in, ops[0]);
    case OP_DYNAMIC_SLICE: return op_dynamic_slice(x, in, ops);
    case OP_DYNAMIC_UPDATE_SLICE: return op_dynamic_update_slice(x, in, ops);
    case OP_CONCATENATE: return op_concatenate(x, in, ops);
    case OP_PAD: return op_pad(x, in, ops);
    case OP_DOT: return op_dot(x, in, ops[0], ops[1]);
    case OP_FFT: return in->noperands == 1 ? op_fft(x, in, ops[0]) : fail(x, INTERP_ERUN, in, "operands");
    case OP_REDUCE: return op_reduce(x, in, ops, dev);
    case OP_REDUCE_WINDOW: return op_reduce_window(x, in, ops, dev);
    case OP_SELECT_AND_SCATTER:
        return in->noperands == 3 ? op_select_and_scatter(x, in, ops, dev) : fail(x, INTERP_ERUN, in, "operands");
    case OP_CONVOLUTION: return in->noperands == 2 ? op_convolution(x, in, ops[0], ops[1]) : fail(x, INTERP_ERUN, in, "operands");
    case OP_GATHER: return op_gather(x, in, ops[0], ops[1]);
    case OP_SCATTER: return op_scatter(x, in, ops, dev);
    case OP_SORT: return op_sort(x, in, ops, dev);
    case OP_BATCH_NORM_TRAINING: return op_batch_norm_training(x, in, ops);
    case OP_BATCH_NORM_GRAD: return op_batch_norm_grad(x, in, ops);
    case OP_BATCH_NORM_INFERENCE: return op_batch_norm_inference(x, in, ops);
    case OP_TOPK:
        return op_topk(x, in, ops[0], instr_int(in, A_K, 0), instr_int(in, A_LARGEST, 0) != 0, UINT32_MAX, dev);
    case OP_COPY: case OP_OPT_BARRIER: return interp_val_ref(ops[0]);
    /* The ends of asynchronous pairs: the start computed the value. */
    case OP_ALL_REDUCE_DONE: case OP_ASYNC_UPDATE: return interp_val_ref(ops[0]);
    case OP_ALL_GATHER_DONE: case OP_COLLECTIVE_PERMUTE_DONE: case OP_ASYNC_DONE: case OP_COPY_DONE: {
        int64_t k = in->op == OP_COPY_DONE ? 0 : 1;
        if (ops[0]->dtype != DT_TUPLE || ops[0]->nelems <= k) return fail(x, INTERP_EUNSUPPORTED, in, "operand is not a start's tuple");
        return interp_val_ref(ops[0]->elems[k]);
    }
    case OP_COPY_START: {
        interp_val *t = async_tuple(&in->shape, ops[0], ops[0]);
        return t ? t : fail(x, INTERP_EUNSUPPORTED, in, "copy-start with this shape");
    }
    case OP_REDUCE_PRECISION: {
        int64_t eb = instr_int(in, A_EXPONENT_BITS, 8), mb = instr_int(in, A_MANTISSA_BITS, 23);
        if (!ops[0]->f || ops[0]->im || eb < 1 || mb < 0 || eb > 11 || mb > 52)
            return fail(x, INTERP_EUNSUPPORTED, in, "reduce-precision to e%lldm%lld", (long long)eb, (long long)mb);
        interp_val *r = val_copy(ops[0]);
        for (int64_t k = 0; k < r->n && !unrounded_now; k++) r->f[k] = reduce_precision(r->dtype, r->f[k], (int)eb, (int)mb);
        return r;
    }
    case OP_TUPLE: {
        interp_val **el = xcalloc(in->noperands ? in->noperands : 1, sizeof *el);
        for (uint32_t k = 0; k < in->noperands; k++) el[k] = interp_val_ref(ops[k]);
        interp_val *t = interp_val_tuple(in->noperands, el);
        free(el);
        return t;
    }
    case OP_GET_TUPLE_ELEMENT: {
        int64_t k = instr_int(in, A_INDEX, 0);
        if (ops[0]->dtype != DT_TUPLE || k < 0 || k >= ops[0]->nelems)
            return fail(x, INTERP_ERUN, in, "tuple index %lld out of range", (long long)k);
        return interp_val_ref(ops[0]->elems[k]);
    }
    case OP_CUSTOM_CALL: {
        const char *t = instr_str(in, A_CUSTOM_CALL_TARGET);
        if (instr_is_identity_custom_call(in)) {
            if (!interp_val_matches(ops[0], &in->shape))
                return fail(x, INTERP_EUNSUPPORTED, in,
                            "custom-call %s changes the shape: a pre-partitioning module (run the partitioned one)", t);
            return interp_val_ref(ops[0]);
        }
        /* The protobuf cannot tell a custom call's to_apply from its
         * called_computations: the comparator is either, alone. */
        const hlo_attr *cmp = instr_attr(in, A_TO_APPLY), *cc = instr_attr(in, A_CALLED_COMPUTATIONS);
        if (!cmp && cc && cc->n == 1) cmp = cc;
        if (t && strcmp(t, "TopK") == 0 && in->noperands == 1 && cmp && in->shape.dtype == DT_TUPLE &&
            in->shape.ntuple == 2 && in->shape.tuple[0].rank == ops[0]->rank && ops[0]->rank > 0)
            return op_topk(x, in, ops[0], in->shape.tuple[0].dims[ops[0]->rank - 1], true, (uint32_t)cmp->v.ints[0], dev);
        int routine = linalg_routine(t);
        if (routine >= 0) return op_lapack(x, in, ops, routine);
        double v;
        if (activation_f(t, 0, &v) && in->noperands == 1 && ops[0]->f && interp_val_matches(ops[0], &in->shape)) {
            interp_val *r = val_like(ops[0], ops[0]->dtype);
            for (int64_t k = 0; k < r->n; k++) {
                activation_f(t, ops[0]->f[k], &v);
                r->f[k] = rnd(r->dtype, v);
            }
            return r;
        }
        return fail(x, INTERP_EUNSUPPORTED, in, "custom-call target \"%s\"", t ? t : "?");
    }
    default:
        break;
    }
    if (is_unary(in->op) || is_binary(in->op) || in->op == OP_CONVERT || in->op == OP_BITCAST_CONVERT ||
        in->op == OP_COMPARE || in->op == OP_SELECT || in->op == OP_CLAMP || in->op == OP_COMPLEX ||
        in->op == OP_REAL || in->op == OP_IMAG)
        return op_elementwise(x, in, ops);
    return fail(x, INTERP_EUNSUPPORTED, in, "no interpreter rule for this opcode");
}

/* ------------------------------------------------------------------ fft */

static bool pow2(int64_t n) { return n > 0 && (n & (n - 1)) == 0; }

/* Element steps of transforming `lines` lines of n points: n·log2 n for a
 * power of two, n² for the direct DFT (as a double: it may exceed int64). */
static double fft_cost(int64_t lines, int64_t n) {
    double c = (double)n;
    if (pow2(n))
        for (int64_t m = n; m > 1; m >>= 1) c += (double)n;
    else c *= (double)n;
    return (double)lines * c;
}

/* One line of n complex points (re, im) in place: Σ_j x_j·e^{∓2πi·jk/n}, the
 * sign + when inverse (unscaled). tr, ti: n doubles of scratch. */
static void fft_line(double *re, double *im, int64_t n, bool inverse, double *tr, double *ti) {
    double sign = inverse ? 2 * M_PI : -2 * M_PI;
    if (!pow2(n)) {
        for (int64_t k = 0; k < n; k++) {
            double sr = 0, si = 0;
            for (int64_t j = 0; j < n; j++) {
                double t = sign * (double)(j * k % n) / (double)n, c = cos(t), s = sin(t);
                sr += re[j] * c - im[j] * s;
                si += re[j] * s + im[j] * c;
            }
            tr[k] = sr, ti[k] = si;
        }
        memcpy(re, tr, (size_t)n * sizeof *re);
        memcpy(im, ti, (size_t)n * sizeof *im);
        return;
    }
    /* Radix 2: bit-reversed order, then butterflies of growing length. */
    for (int64_t i = 1, j = 0; i < n; i++) {
        int64_t bit = n >> 1;
        for (; j & bit; bit >>= 1) j ^= bit;
        j ^= bit;
        if (i < j) {
            double t = re[i]; re[i] = re[j]; re[j] = t;
            t = im[i]; im[i] = im[j]; im[j] = t;
        }
    }
    for (int64_t len = 2; len <= n; len <<= 1)
        for (int64_t j = 0; j < len / 2; j++) {
            double t = sign * (double)j / (double)len, wr = cos(t), wi = sin(t);
            for (int64_t i = j; i < n; i += len) {
                int64_t q = i + len / 2;
                double xr = re[q] * wr - im[q] * wi, xi = re[q] * wi + im[q] * wr;
                re[q] = re[i] - xr, im[q] = im[i] - xi;
                re[i] += xr, im[i] += xi;
            }
        }
}

/* Transforms every line along dim d of a row-major array of dims (parts re,
 * im); an inverse transform is scaled by 1/n. */
static void fft_dim(double *re, double *im, const int64_t *dims, uint32_t rank, uint32_t d, bool inverse) {
    int64_t n = dims[d], inner = 1, outer = 1;
    for (uint32_t k = 0; k < rank; k++) {
        if (k < d) outer *= dims[k];
        if (k > d) inner *= dims[k];
    }
    double *buf = xmalloc((size_t)(4 * n) * sizeof *buf), *lr = buf, *li = buf + n, *tr = buf + 2 * n, *ti = buf + 3 * n;
    for (int64_t o = 0; o < outer; o++)
        for (int64_t s = 0; s < inner; s++) {
            int64_t base = o * n * inner + s;
            for (int64_t j = 0; j < n; j++) lr[j] = re[base + j * inner], li[j] = im[base + j * inner];
            fft_line(lr, li, n, inverse, tr, ti);
            double scale = inverse ? 1.0 / (double)n : 1.0;
            for (int64_t j = 0; j < n; j++) re[base + j * inner] = lr[j] * scale, im[base + j * inner] = li[j] * scale;
        }
    free(buf);
}

enum { FFT_C2C, FFT_INV, FFT_R2C, FFT_C2R };

/* Whether fft of a to r is well formed (interp.h, FFT): the type pairs, and
 * the transformed dims against fft_length len[0..nl). */
static const char *fft_mismatch(int type, const interp_val *a, const interp_val *r, const int64_t *len, uint32_t nl) {
    bool types = type == FFT_R2C   ? a->f && !a->im && r->im && part_dt(r->dtype) == a->dtype
               : type == FFT_C2R ? a->im && r->f && !r->im && part_dt(a->dtype) == r->dtype
                                 : a->im && a->dtype == r->dtype;
    if (!types) return "operand and result types do not fit the fft_type";
    if (nl < 1 || nl > 3 || nl > a->rank || r->rank != a->rank) return "fft_length needs 1 to 3 entries, at most the rank";
    for (uint32_t d = 0; d < a->rank; d++) {
        int64_t k = (int64_t)d - (int64_t)(a->rank - nl);
        if (k < 0) {
            if (a->dims[d] != r->dims[d]) return "the batch dims of the operand and the result differ";
            continue;
        }
        int64_t n = len[k], half = n / 2 + 1;
        bool last = d + 1 == a->rank;
        if (n < 1) return "an fft_length entry below 1";
        if (a->dims[d] != (type == FFT_C2R && last ? half : n) || r->dims[d] != (type == FFT_R2C && last ? half : n))
            return "the transformed dims do not match fft_length";
    }
    return NULL;
}

/* fft (interp.h, FFT): the operand's transformed dims in double parts, each
 * dim transformed in turn; RFFT transforms the whole real array and keeps the
 * first half of the last dim, IRFFT rebuilds each last-dim line's Hermitian
 * spectrum after inverting the outer dims. */
static interp_val *op_fft(ctx *x, const hlo_instr *in, const interp_val *a) {
    const char *t = instr_str(in, A_FFT_TYPE);
    int type = !t ? -1 : strcmp(t, "FFT") == 0 ? FFT_C2C : strcmp(t, "IFFT") == 0 ? FFT_INV
             : strcmp(t, "RFFT") == 0 ? FFT_R2C : strcmp(t, "IRFFT") == 0 ? FFT_C2R : -1;
    uint32_t nl;
    const int64_t *len = instr_ints(in, A_FFT_LENGTH, &nl);
    if (type < 0) return fail(x, INTERP_ERUN, in, "fft_type %s is not FFT, IFFT, RFFT or IRFFT", t ? t : "(absent)");
    interp_val *r = val_shape(&in->shape);
    if (!r) return fail(x, INTERP_EUNSUPPORTED, in, "element type %s", dtype_name(in->shape.dtype));
    const char *bad = fft_mismatch(type, a, r, len, nl);
    if (bad) {
        interp_val_free(r);
        return fail(x, INTERP_ERUN, in, "%s", bad);
    }
    /* The work array: the operand's dims, the last one full length for IRFFT. */
    int64_t dims[INTERP_MAX_RANK], total = 1;
    memcpy(dims, a->dims, a->rank * sizeof *dims);
    uint32_t last = a->rank - 1;
    if (type == FFT_C2R) dims[last] = len[nl - 1];
    for (uint32_t d = 0; d < a->rank; d++) total *= dims[d];
    double cost = 0;
    for (uint32_t d = a->rank - nl; d < a->rank; d++) cost += fft_cost(dims[d] ? total / dims[d] : 0, dims[d]);
    if (cost > (double)(x->max_steps - x->steps)) {
        interp_val_free(r);
        return fail(x, INTERP_EBUDGET, in, "the transform would exceed the step budget of %lld element steps",
                    (long long)x->max_steps);
    }
    x->steps += (int64_t)cost;
    double *re = xcalloc((size_t)(total + 1), sizeof *re), *im = xcalloc((size_t)(total + 1), sizeof *im);
    memcpy(re, a->f, (size_t)a->n * sizeof *re);
    if (a->im) memcpy(im, a->im, (size_t)a->n * sizeof *im);
    uint32_t outer_end = type == FFT_C2R ? last : a->rank;  /* IRFFT: the last dim after */
    for (uint32_t d = a->rank - nl; d < outer_end; d++) fft_dim(re, im, a->dims, a->rank, d, type == FFT_INV || type == FFT_C2R);
    int64_t n = dims[last], h = a->dims[last], lines = n ? total / n : 0;
    if (type == FFT_C2R) {
        /* Line l of the half spectrum sits at l·h; spread it over the line
         * from the top, bins k and n-k conjugate, DC and Nyquist real. */
        for (int64_t l = lines - 1; l >= 0; l--) {
            double *lr = re + l * n, *li = im + l * n;
            memmove(lr, re + l * h, (size_t)h * sizeof *lr);
            memmove(li, im + l * h, (size_t)h * sizeof *li);
            li[0] = 0;
            if (n % 2 == 0) li[n / 2] = 0;
            for (int64_t k = h; k < n; k++) lr[k] = lr[n - k], li[k] = -li[n - k];
        }
        fft_dim(re, im, dims, a->rank, last, true);
    }
    /* The result: all of it, or the first h' = n/2+1 bins of each line (RFFT). */
    int64_t keep = r->dims[last];
    for (int64_t l = 0; l < lines; l++)
        for (int64_t k = 0; k < keep; k++) {
            r->f[l * keep + k] = rnd(r->dtype, re[l * n + k]);
            if (r->im) r->im[l * keep + k] = rnd(r->dtype, im[l * n + k]);
        }
    free(re);
    free(im);
    return r;
}

/* window={size=AxB stride=AxB pad=l_hxl_h lhs_dilate=AxB rhs_dilate=AxB} */
static bool parse_window_field(const char *w, const char *key, int64_t *out, uint32_t rank, int per) {
    const char *p = w;
    size_t kl = strlen(key);
    while ((p = strstr(p, key)) != NULL) {
        if ((p == w || p[-1] == ' ' || p[-1] == '{') && p[kl] == '=') break;
        p += kl;
    }
    if (!p) return false;
    p += kl + 1;
    for (uint32_t d = 0; d < rank; d++)
        for (int k = 0; k < per; k++) {
            char *end;
            out[d * per + k] = strtoll(p, &end, 10);
            if (end == p) return false;
            p = end;
            if (*p == 'x' || *p == '_') p++;
        }
    return true;
}

bool interp_window(const char *text, uint32_t rank, int64_t *size, int64_t *stride, int64_t *pad, int64_t *lhs_dilate,
                   int64_t *rhs_dilate) {
    for (uint32_t d = 0; d < rank; d++) stride[d] = lhs_dilate[d] = rhs_dilate[d] = 1, pad[2 * d] = pad[2 * d + 1] = 0;
    return parse_window_field(text, "size", size, rank, 1) &&
           (!strstr(text, "stride=") || parse_window_field(text, "stride", stride, rank, 1)) &&
           (!strstr(text, "pad=") || parse_window_field(text, "pad", pad, rank, 2)) &&
           (!strstr(text, "lhs_dilate=") || parse_window_field(text, "lhs_dilate", lhs_dilate, rank, 1)) &&
           (!strstr(text, "rhs_dilate=") || parse_window_field(text, "rhs_dilate", rhs_dilate, rank, 1)) &&
           !strstr(text, "reversal");
}

/* XLA's shape rule for a window along one dim: the output length of a
 * window of k elements dilated by rd over n elements dilated by ld and
 * padded by lo and hi, at stride s (0 when it does not fit); -1 when the
 * stride or a dilation is not positive, or the sizes overflow (numbers no
 * real window has). */
static int64_t window_out(int64_t n, int64_t k, int64_t s, int64_t lo, int64_t hi, int64_t ld, int64_t rd) {
    int64_t din = 0, dwin = 0, past;
    if (s < 1 || ld < 1 || rd < 1 || k < 0 || lo == INT64_MIN || (n && __builtin_mul_overflow(n - 1, ld, &din)) ||
        __builtin_add_overflow(din, n ? 1 : 0, &din) || __builtin_add_overflow(din, hi, &past) ||
        __builtin_add_overflow(past, lo, &din) || (k && __builtin_mul_overflow(k - 1, rd, &dwin)) ||
        __builtin_add_overflow(dwin, k ? 1 : 0, &dwin))
        return -1;  /* (past = din - lo bounds a window position less lo: it fits too) */
    return din >= dwin ? (din - dwin) / s + 1 : 0;
}

/* The elements of a window of sizes size[0..n), or -1 past 2^63. */
static int64_t window_elems(const int64_t *size, uint32_t n) {
    int64_t wn = 1;
    for (uint32_t d = 0; d < n; d++)
        if (size[d] < 0 || __builtin_mul_overflow(wn, size[d], &wn)) return -1;
    return wn;
}

static interp_val *op_reduce_window(ctx *x, const hlo_instr *in, interp_val **ops, int64_t dev) {
    if (in->noperands != 2 || in->shape.dtype == DT_TUPLE) return fail(x, INTERP_EUNSUPPORTED, in, "variadic reduce-window");
    const interp_val *a = ops[0];
    const hlo_attr *wa = instr_attr(in, A_WINDOW);
    const hlo_attr *ta = instr_attr(in, A_TO_APPLY);
    if (!wa || !ta) return fail(x, INTERP_ERUN, in, "reduce-window without window or to_apply");
    uint32_t R = a->rank;
    int64_t size[INTERP_MAX_RANK], stride[INTERP_MAX_RANK], pad[2 * INTERP_MAX_RANK], ld[INTERP_MAX_RANK], rd[INTERP_MAX_RANK];
    if (!parse_window_field(wa->v.str, "size", size, R, 1))
        return fail(x, INTERP_EUNSUPPORTED, in, "unreadable window %s", wa->v.str);
    for (uint32_t d = 0; d < R; d++) stride[d] = ld[d] = rd[d] = 1, pad[2 * d] = pad[2 * d + 1] = 0;
    parse_window_field(wa->v.str, "stride", stride, R, 1);
    parse_window_field(wa->v.str, "pad", pad, R, 2);
    parse_window_field(wa->v.str, "lhs_dilate", ld, R, 1);
    parse_window_field(wa->v.str, "rhs_dilate", rd, R, 1);
    interp_val *r = val_shape(&in->shape);
    if (!r || r->rank != R) {
        interp_val_free(r);
        return fail(x, INTERP_EUNSUPPORTED, in, "element type or rank");
    }
    if (ops[1]->dtype != a->dtype || ops[1]->n != 1 || r->dtype != a->dtype) {
        interp_val_free(r);
        return fail(x, INTERP_ERUN, in, "the init is not one value of the operand's element type, or the result's type differs");
    }
    /* XLA's shape rule: per dim, (dilated padded input - dilated window) / stride + 1. */
    for (uint32_t d = 0; d < R; d++) {
        if (size[d] < 1 || r->dims[d] != window_out(a->dims[d], size[d], stride[d], pad[2 * d], pad[2 * d + 1], ld[d], rd[d])) {
            interp_val_free(r);
            return fail(x, INTERP_ERUN, in, "the window does not give the result's dims (dim %u)", d);
        }
    }
    uint32_t ci = (uint32_t)ta->v.ints[0];
    int64_t st[INTERP_MAX_RANK], idx[INTERP_MAX_RANK] = {0};
    strides_of(a->dims, R, st);
    int64_t wn = window_elems(size, R);
    if (wn < 0) {
        interp_val_free(r);
        return fail(x, INTERP_EUNSUPPORTED, in, "a window of more than 2^63 elements");
    }
    for (int64_t e = 0; e < r->n; e++) {
        cell acc = get_cell(ops[1], 0);
        int64_t w[INTERP_MAX_RANK] = {0};
        for (int64_t j = 0; j < wn; j++) {
            int64_t o = 0;
            bool ok = true;
            for (uint32_t d = 0; d < R && ok; d++) {
                int64_t p = idx[d] * stride[d] + w[d] * rd[d] - pad[2 * d];
                if (p < 0 || p % ld[d]) ok = false;
                p /= ld[d];
                if (p >= a->dims[d]) ok = false;
                if (ok) o += p * st[d];  /* (p far outside may overflow it) */
            }
            if (ok) {
                cell args[2] = {acc, get_cell(a, o)};
                if (!scalar_call(x, ci, dev, args, 2, &acc, 1)) {
                    interp_val_free(r);
                    return NULL;
                }
            }
            next_idx(w, size, R);
        }
        put_cell(r, e, acc);
        next_idx(idx, r->dims, R);
    }
    return r;
}

/* dim_labels=b01f_01io->b01f: the position of each role in the three
 * shapes. lhs: batch b, feature f; rhs: input feature i, output feature o;
 * out: b, f; spatial dims by digit. False when the labels do not fit. */
typedef struct conv_dims {
    uint32_t ns;                                    /* spatial dims */
    int lb, lf, ls[INTERP_MAX_RANK];                /* lhs */
    int ri, ro, rs[INTERP_MAX_RANK];                /* rhs */
    int ob, of, os[INTERP_MAX_RANK];                /* out */
} conv_dims;

static bool conv_part(const char *p, size_t n, uint32_t rank, char a, char b, int *pa, int *pb, int *sp) {
    if (n != rank || rank < 2 || rank > INTERP_MAX_RANK) return false;
    *pa = *pb = -1;
    for (uint32_t k = 0; k + 2 < rank; k++) sp[k] = -1;
    for (uint32_t k = 0; k < n; k++) {
        if (p[k] == a && *pa < 0) *pa = (int)k;
        else if (p[k] == b && *pb < 0) *pb = (int)k;
        else if (p[k] >= '0' && p[k] <= '9' && (uint32_t)(p[k] - '0') + 2 < rank && sp[p[k] - '0'] < 0) sp[p[k] - '0'] = (int)k;
        else return false;
    }
    return true;
}

static bool conv_labels(const char *l, uint32_t rl, uint32_t rr, uint32_t ro, conv_dims *c) {
    const char *u = l ? strchr(l, '_') : NULL, *ar = u ? strstr(u, "->") : NULL;
    if (!u || !ar || rl != rr || rl != ro) return false;
    c->ns = rl - 2;
    return conv_part(l, (size_t)(u - l), rl, 'b', 'f', &c->lb, &c->lf, c->ls) &&
           conv_part(u + 1, (size_t)(ar - u - 1), rr, 'i', 'o', &c->ri, &c->ro, c->rs) &&
           conv_part(ar + 2, strlen(ar + 2), ro, 'b', 'f', &c->ob, &c->of, c->os);
}

/* convolution (XLA's semantics): out[b, o, s] = sum over the kernel
 * positions k and the input features i of o's group of
 * lhs[b', g·(C/G) + i, s·stride + k·rhs_dilate - pad_lo (÷ lhs_dilate)] ·
 * rhs[k, i, o], with G = feature_group_count (o's group g = o ÷ (O/G)) and,
 * for batch_group_count B, b' = g'·(N/B) + b with g' = o ÷ (O/B). Floats
 * only; summed in double, rounded once to the result type. */
static interp_val *op_convolution(ctx *x, const hlo_instr *in, const interp_val *a, const interp_val *k) {
    conv_dims c;
    if (!conv_labels(instr_str(in, A_DIM_LABELS), a->rank, k->rank, in->shape.rank, &c))
        return fail(x, INTERP_EUNSUPPORTED, in, "convolution dim_labels");
    interp_val *r = val_shape(&in->shape);
    if (!r || !r->f || !a->f || !k->f || r->rank != a->rank) {
        interp_val_free(r);
        return fail(x, INTERP_EUNSUPPORTED, in, "a convolution of non-float values");
    }
    uint32_t S = c.ns;
    int64_t size[INTERP_MAX_RANK], stride[INTERP_MAX_RANK], pad[2 * INTERP_MAX_RANK], ld[INTERP_MAX_RANK], rd[INTERP_MAX_RANK];
    for (uint32_t d = 0; d < S; d++) size[d] = k->dims[c.rs[d]], stride[d] = ld[d] = rd[d] = 1, pad[2 * d] = pad[2 * d + 1] = 0;
    const hlo_attr *wa = instr_attr(in, A_WINDOW);
    if (S && wa && wa->v.str) {
        int64_t ws[INTERP_MAX_RANK];
        if (parse_window_field(wa->v.str, "size", ws, S, 1))
            for (uint32_t d = 0; d < S; d++)
                if (ws[d] != size[d]) {
                    interp_val_free(r);
                    return fail(x, INTERP_ERUN, in, "the window size is not the kernel's");
                }
        parse_window_field(wa->v.str, "stride", stride, S, 1);
        parse_window_field(wa->v.str, "pad", pad, S, 2);
        parse_window_field(wa->v.str, "lhs_dilate", ld, S, 1);
        parse_window_field(wa->v.str, "rhs_dilate", rd, S, 1);
        if (strstr(wa->v.str, "rhs_reversal")) {
            interp_val_free(r);
            return fail(x, INTERP_EUNSUPPORTED, in, "window reversal");
        }
    }
    int64_t G = instr_int(in, A_FEATURE_GROUP_COUNT, 1), B = instr_int(in, A_BATCH_GROUP_COUNT, 1);
    int64_t N = a->dims[c.lb], C = a->dims[c.lf], I = k->dims[c.ri], O = k->dims[c.ro];
    bool ok = G >= 1 && B >= 1 && C == I * G && O % G == 0 && O % B == 0 && N % B == 0 && r->dims[c.ob] == N / B &&
              r->dims[c.of] == O && (G == 1 || B == 1);
    for (uint32_t d = 0; d < S && ok; d++) {
        ok = r->dims[c.os[d]] == window_out(a->dims[c.ls[d]], size[d], stride[d], pad[2 * d], pad[2 * d + 1], ld[d], rd[d]);
    }
    ok = ok && window_elems(size, S) >= 0;
    if (!ok) {
        interp_val_free(r);
        return fail(x, INTERP_ERUN, in, "the convolution's shapes do not fit its dimension numbers and groups");
    }
    /* Up to four output features at once (independent sums, each in the
     * order one alone would take: the window, then the input features). */
    int64_t sa[INTERP_MAX_RANK], sk[INTERP_MAX_RANK], so[INTERP_MAX_RANK], idx[INTERP_MAX_RANK] = {0},
        outer[INTERP_MAX_RANK];
    strides_of(a->dims, a->rank, sa);
    strides_of(k->dims, k->rank, sk);
    strides_of(r->dims, r->rank, so);
    memcpy(outer, r->dims, r->rank * sizeof *outer);
    outer[c.of] = 1;
    int64_t wn = 1, nouter = O ? r->n / O : 0, span = O / G < O / B ? O / G : O / B;
    for (uint32_t d = 0; d < S; d++) wn *= size[d];
    for (int64_t e = 0; e < nouter; e++) {
        int64_t b = idx[c.ob], at = 0;
        for (uint32_t d = 0; d < r->rank; d++) at += idx[d] * so[d];
        for (int64_t o = 0; o < O;) {
            int64_t g = o / (O / G), bb = B > 1 ? (o / (O / B)) * (N / B) + b : b;
            int64_t nq = O - o < 4 ? O - o : 4, edge = (o / span + 1) * span - o; /* one group, one batch group */
            if (nq > edge) nq = edge;
            double acc[4] = {0, 0, 0, 0};
            int64_t w[INTERP_MAX_RANK] = {0};
            for (int64_t j = 0; j < wn; j++) {
                int64_t ao = bb * sa[c.lb], ko = o * sk[c.ro];
                bool in_range = true;
                for (uint32_t d = 0; d < S && in_range; d++) {
                    int64_t p = idx[c.os[d]] * stride[d] + w[d] * rd[d] - pad[2 * d];
                    if (p < 0 || p % ld[d]) in_range = false;
                    p /= ld[d];
                    if (p >= a->dims[c.ls[d]]) in_range = false;
                    if (in_range) ao += p * sa[c.ls[d]];
                    ko += w[d] * sk[c.rs[d]];
                }
                const double *ap = a->f + ao + g * I * sa[c.lf], *kp = k->f + ko;
                int64_t sf = sa[c.lf], si = sk[c.ri], sq = sk[c.ro];
                if (in_range && nq == 4)
                    for (int64_t i = 0; i < I; i++) {
                        double av = ap[i * sf];
                        const double *kq = kp + i * si;
                        acc[0] += av * kq[0], acc[1] += av * kq[sq], acc[2] += av * kq[2 * sq], acc[3] += av * kq[3 * sq];
                    }
                else if (in_range)
                    for (int64_t i = 0; i < I; i++)
                        for (int64_t q = 0; q < nq; q++) acc[q] += ap[i * sf] * kp[i * si + q * sq];
                next_idx(w, size, S);
            }
            for (int64_t q = 0; q < nq; q++) r->f[at + (o + q) * so[c.of]] = rnd(r->dtype, acc[q]);
            o += nq;
        }
        next_idx(idx, outer, r->rank);
    }
    return r;
}

/* select-and-scatter (a max-pool's gradient): the result starts as init
 * everywhere; for each window of the operand (source's index), the select
 * computation picks one element — the first of the window kept unless
 * select(kept, next) is false, padding never picked — and the scatter
 * computation adds the source element into the result there. */
static interp_val *op_select_and_scatter(ctx *x, const hlo_instr *in, interp_val **ops, int64_t dev) {
    const interp_val *a = ops[0], *src = ops[1], *init = ops[2];
    const hlo_attr *wa = instr_attr(in, A_WINDOW), *sa = instr_attr(in, A_SELECT), *ca = instr_attr(in, A_SCATTER);
    uint32_t R = a->rank;
    if (!wa || !wa->v.str || !sa || !ca || !sa->v.ints || !ca->v.ints || sa->v.ints[0] < 0 || ca->v.ints[0] < 0 ||
        (uint64_t)sa->v.ints[0] >= x->m->ncomps || (uint64_t)ca->v.ints[0] >= x->m->ncomps)
        return fail(x, INTERP_ERUN, in, "select-and-scatter without window, select or scatter");
    int64_t size[INTERP_MAX_RANK], stride[INTERP_MAX_RANK], pad[2 * INTERP_MAX_RANK];
    if (!parse_window_field(wa->v.str, "size", size, R, 1)) return fail(x, INTERP_EUNSUPPORTED, in, "unreadable window %s", wa->v.str);
    if (strstr(wa->v.str, "dilate") || strstr(wa->v.str, "reversal"))
        return fail(x, INTERP_EUNSUPPORTED, in, "a dilated or reversed window");
    for (uint32_t d = 0; d < R; d++) stride[d] = 1, pad[2 * d] = pad[2 * d + 1] = 0;
    parse_window_field(wa->v.str, "stride", stride, R, 1);
    parse_window_field(wa->v.str, "pad", pad, R, 2);
    interp_val *r = val_shape(&in->shape);
    bool ok = r && r->rank == R && src->rank == R && init->n == 1 && r->dtype == a->dtype && src->dtype == a->dtype &&
              init->dtype == a->dtype;
    for (uint32_t d = 0; d < R && ok; d++) {
        ok = r->dims[d] == a->dims[d] && size[d] >= 1 &&
             src->dims[d] == window_out(a->dims[d], size[d], stride[d], pad[2 * d], pad[2 * d + 1], 1, 1);
    }
    ok = ok && window_elems(size, R) >= 0;
    if (!ok) {
        interp_val_free(r);
        return fail(x, INTERP_ERUN, in, "select-and-scatter shapes do not fit its window");
    }
    for (int64_t e = 0; e < r->n; e++) put_cell(r, e, get_cell(init, 0));
    uint32_t sel = (uint32_t)sa->v.ints[0], sct = (uint32_t)ca->v.ints[0];
    int64_t st[INTERP_MAX_RANK], idx[INTERP_MAX_RANK] = {0}, wn = 1;
    strides_of(a->dims, R, st);
    for (uint32_t d = 0; d < R; d++) wn *= size[d];
    for (int64_t e = 0; e < src->n; e++) {
        int64_t best = -1, w[INTERP_MAX_RANK] = {0};
        for (int64_t j = 0; j < wn; j++) {
            int64_t o = 0;
            bool inside = true;
            for (uint32_t d = 0; d < R && inside; d++) {
                int64_t p = idx[d] * stride[d] + w[d] - pad[2 * d];
                inside = p >= 0 && p < a->dims[d];
                if (inside) o += p * st[d];
            }
            next_idx(w, size, R);
            if (!inside) continue;
            cell keep = {.i = 0};
            cell args[2] = {best >= 0 ? get_cell(a, best) : get_cell(a, o), get_cell(a, o)};
            if (best >= 0 && !scalar_call(x, sel, dev, args, 2, &keep, 1)) {
                interp_val_free(r);
                return NULL;
            }
            if (best < 0 || keep.i == 0) best = o;
        }
        if (best >= 0) {
            cell args[2] = {get_cell(r, best), get_cell(src, e)}, acc;
            if (!scalar_call(x, sct, dev, args, 2, &acc, 1)) {
                interp_val_free(r);
                return NULL;
            }
            put_cell(r, best, acc);
        }
        next_idx(idx, src->dims, R);
    }
    return r;
}

/* ------------------------------------------------------------------ collectives */

/* The device groups of a collective on this run's replicas and partitions
 * (graph_device_groups); false after failing with why. */
static bool device_groups(ctx *x, const hlo_instr *in, int64_t **ids_out, uint32_t **start_out, uint32_t *ng_out) {
    char why[160];
    if (!graph_device_groups(in, x->R, x->P, ids_out, start_out, ng_out, why, sizeof why)) {
        fail(x, INTERP_ERUN, in, "%s", why);
        return false;
    }
    return true;
}

/* vals[a] for active device a; out[a] gets the result. devs lists the active devices. */
static bool eval_collective(ctx *x, const hlo_instr *in, uint32_t na, const int64_t *devs, interp_val ***opv,
                            interp_val **out) {
    int op = in->op;
    int64_t *where = xmalloc((size_t)x->D * sizeof *where);   /* device -> active index or -1 */
    for (int64_t d = 0; d < x->D; d++) where[d] = -1;
    for (uint32_t a = 0; a < na; a++) where[devs[a]] = a;
    bool ok = true;
    if (op == OP_COLLECTIVE_PERMUTE) {
        const hlo_attr *pa = instr_attr(in, A_SOURCE_TARGET_PAIRS);
        hlo_groups g = {0};
        if (pa) groups_expand(pa->v.groups, &x->a, &g);
        int mode = graph_group_mode(in);
        int64_t outer = mode == GROUPS_CROSS_PARTITION ? x->R : x->P;
        if (in->noperands != 1 || opv[0][0]->dtype == DT_TUPLE) {
            free(where);
            fail(x, INTERP_EUNSUPPORTED, in, "collective-permute with several or tuple operands");
            return false;
        }
        for (uint32_t a = 0; a < na; a++) out[a] = NULL;
        for (uint32_t k = 0; k < g.ngroups && ok; k++) {
            if (g.start[k + 1] - g.start[k] != 2) {
                fail(x, INTERP_ERUN, in, "a source_target pair without two ids");
                ok = false;
                break;
            }
            int64_t s = g.ids[g.start[k]], t = g.ids[g.start[k] + 1];
            for (int64_t o = 0; o < outer && ok; o++) {
                int64_t lim = mode == GROUPS_CROSS_PARTITION ? x->P : x->R;
                if (s < 0 || t < 0 || s >= lim || t >= lim) {
                    fail(x, INTERP_ERUN, in, "source_target pair {%lld,%lld} out of range", (long long)s, (long long)t);
                    ok = false;
                    break;
                }
                int64_t ds = mode == GROUPS_CROSS_PARTITION ? o * x->P + s : s * x->P + o;
                int64_t dt = mode == GROUPS_CROSS_PARTITION ? o * x->P + t : t * x->P + o;
                if (where[ds] < 0 || where[dt] < 0) {
                    fail(x, INTERP_ERUN, in, "device %lld or %lld is not on this control path", (long long)ds, (long long)dt);
                    ok = false;
                    break;
                }
                if (out[where[dt]]) {
                    fail(x, INTERP_ERUN, in, "device %lld receives twice", (long long)dt);
                    ok = false;
                    break;
                }
                out[where[dt]] = interp_val_ref(opv[0][where[ds]]);
            }
        }
        for (uint32_t a = 0; a < na && ok; a++)
            if (!out[a]) out[a] = val_like(opv[0][a], opv[0][a]->dtype);  /* not a target: zeros */
        free(where);
        return ok;
    }
    int64_t *ids;
    uint32_t *start, ng;
    if (!device_groups(x, in, &ids, &start, &ng)) {
        free(where);
        return false;
    }
    for (uint32_t a = 0; a < na; a++) out[a] = NULL;
    uint32_t nops = in->noperands;
    const hlo_attr *ta = instr_attr(in, A_TO_APPLY);
    uint32_t nd;
    const int64_t *dims = instr_ints(in, A_DIMENSIONS, &nd);
    int64_t dim = nd ? dims[0] : instr_int(in, A_SPLIT_DIMENSION, -1);
    for (uint32_t gi = 0; gi < ng && ok; gi++) {
        uint32_t G = start[gi + 1] - start[gi];
        const int64_t *mem = ids + start[gi];
        int64_t am[4096];
        if (G > ARRAY_LEN(am)) {
            fail(x, INTERP_EUNSUPPORTED, in, "a group of more than 4096 devices");
            ok = false;
            break;
        }
        for (uint32_t k = 0; k < G; k++) {
            if (mem[k] < 0 || mem[k] >= x->D || where[mem[k]] < 0) {
                fail(x, INTERP_ERUN, in, "device %lld of the group is not on this control path", (long long)mem[k]);
                ok = false;
                break;
            }
            am[k] = where[mem[k]];
            bool twice = false;
            for (uint32_t q = 0; q < k && !twice; q++) twice = am[q] == am[k];
            if (out[am[k]] || twice) {
                fail(x, INTERP_ERUN, in, "device %lld is in two groups", (long long)mem[k]);
                ok = false;
                break;
            }
        }
        if (!ok) break;
        /* results[k][j]: member k's result for operand j. */
        interp_val ***rv = xcalloc(G, sizeof *rv);
        for (uint32_t k = 0; k < G; k++) rv[k] = xcalloc(nops ? nops : 1, sizeof **rv);
        for (uint32_t j = 0; j < nops && ok; j++) {
            if (op == OP_ALL_REDUCE || op == OP_REDUCE_SCATTER) {
                if (!ta) {
                    fail(x, INTERP_ERUN, in, "no to_apply");
                    ok = false;
                    break;
                }
                interp_val *acc = val_copy(opv[j][am[0]]);
                for (uint32_t k = 1; k < G && ok; k++) {
                    if (opv[j][am[k]]->n != acc->n) {
                        fail(x, INTERP_ERUN, in, "operands differ in shape across devices");
                        ok = false;
                    } else ok = combine(x, in, (uint32_t)ta->v.ints[0], devs[am[0]], acc, opv[j][am[k]], true);
                }
                round_all(acc);
                if (!ok) {
                    interp_val_free(acc);
                    break;
                }
                if (op == OP_ALL_REDUCE) {
                    for (uint32_t k = 0; k < G; k++) rv[k][j] = interp_val_ref(acc);
                } else {
                    if (dim < 0 || dim >= (int64_t)acc->rank || acc->dims[dim] % G) {
                        fail(x, INTERP_ERUN, in, "scatter dimension does not split into %u", G);
                        ok = false;
                    }
                    for (uint32_t k = 0; k < G && ok; k++) {
                        int64_t off[INTERP_MAX_RANK] = {0}, sz[INTERP_MAX_RANK];
                        memcpy(sz, acc->dims, acc->rank * sizeof *sz);
                        sz[dim] /= G;
                        off[dim] = sz[dim] * k;
                        rv[k][j] = interp_val_slice(acc, off, sz);
                    }
                }
                interp_val_free(acc);
            } else if (op == OP_ALL_GATHER) {
                interp_val *parts[4096];
                for (uint32_t k = 0; k < G; k++) parts[k] = opv[j][am[k]];
                if (dim < 0 || (uint32_t)dim >= parts[0]->rank) {
                    fail(x, INTERP_ERUN, in, "all-gather dimension out of range");
                    ok = false;
                    break;
                }
                interp_val *c = concat(parts, G, (uint32_t)dim);
                if (!c) {
                    fail(x, INTERP_ERUN, in, "cannot concatenate the operands");
                    ok = false;
                    break;
                }
                for (uint32_t k = 0; k < G; k++) rv[k][j] = interp_val_ref(c);
                interp_val_free(c);
            } else if (op == OP_ALL_TO_ALL && dim >= 0) {
                /* Member k splits its operand into G chunks along dim and sends
                 * chunk t to member t; member t concatenates what it receives in
                 * member order. */
                const interp_val *v0 = opv[j][am[0]];
                if ((uint32_t)dim >= v0->rank || v0->dims[dim] % G) {
                    fail(x, INTERP_ERUN, in, "split dimension does not split into %u", G);
                    ok = false;
                    break;
                }
                for (uint32_t t = 0; t < G; t++) {
                    interp_val *parts[4096];
                    for (uint32_t k = 0; k < G; k++) {
                        const interp_val *v = opv[j][am[k]];
                        int64_t off[INTERP_MAX_RANK] = {0}, sz[INTERP_MAX_RANK];
                        memcpy(sz, v->dims, v->rank * sizeof *sz);
                        sz[dim] /= G;
                        off[dim] = sz[dim] * t;
                        parts[k] = interp_val_slice(v, off, sz);
                    }
                    rv[t][j] = concat(parts, G, (uint32_t)dim);
                    for (uint32_t k = 0; k < G; k++) interp_val_free(parts[k]);
                }
            } else if (op == OP_ALL_TO_ALL) {
                /* Tuple form: G operands; member t's element k is member k's operand t. */
                if (nops != G) {
                    fail(x, INTERP_ERUN, in, "tuple all-to-all with %u operands in a group of %u", nops, G);
                    ok = false;
                    break;
                }
                for (uint32_t k = 0; k < G; k++) rv[j][k] = interp_val_ref(opv[j][am[k]]);
            } else {
                fail(x, INTERP_EUNSUPPORTED, in, "collective not interpreted");
                ok = false;
            }
        }
        for (uint32_t k = 0; k < G; k++) {
            if (ok) {
                if (in->shape.dtype == DT_TUPLE) out[am[k]] = interp_val_tuple(nops, rv[k]);
                else {
                    out[am[k]] = rv[k][0];
                    for (uint32_t j = 1; j < nops; j++) interp_val_free(rv[k][j]);
                }
            } else
                for (uint32_t j = 0; j < nops; j++) interp_val_free(rv[k][j]);
            free(rv[k]);
        }
        free(rv);
    }
    for (uint32_t a = 0; a < na && ok; a++)
        if (!out[a]) {
            fail(x, INTERP_ERUN, in, "device %lld is in no replica group", (long long)devs[a]);
            ok = false;
        }
    if (!ok)
        for (uint32_t a = 0; a < na; a++) {
            interp_val_free(out[a]);
            out[a] = NULL;
        }
    free(ids);
    free(start);
    free(where);
    return ok;
}

/* ------------------------------------------------------------------ control flow and the driver */

static bool eval_while(ctx *x, const hlo_instr *in, uint32_t na, const int64_t *devs, interp_val **init, interp_val **out) {
    uint32_t body = instr_called(x->m, in, A_BODY), cond = instr_called(x->m, in, A_CONDITION);
    if (body >= x->m->ncomps || cond >= x->m->ncomps) return fail(x, INTERP_ERUN, in, "while without body or condition"), false;
    interp_val **state = xcalloc(na, sizeof *state);
    int64_t *act = xmalloc(na * sizeof *act);
    uint32_t *slot = xmalloc(na * sizeof *slot);  /* active index -> original index */
    for (uint32_t a = 0; a < na; a++) {
        state[a] = interp_val_ref(init[a]);
        act[a] = devs[a];
        slot[a] = a;
        out[a] = NULL;
    }
    uint32_t live = na;
    bool ok = true;
    interp_val **pv = xcalloc(na, sizeof *pv), **nv = xcalloc(na, sizeof *nv);
    while (live && ok) {
        if (++x->iterations > x->max_iterations) {
            fail(x, INTERP_EBUDGET, in, "more than %lld while iterations", (long long)x->max_iterations);
            ok = false;
            break;
        }
        if (eval_comp(x, cond, live, act, state, pv)) {
            ok = false;
            break;
        }
        uint32_t keep = 0;
        for (uint32_t a = 0; a < live; a++) {
            bool go = pv[a]->i && pv[a]->i[0];
            interp_val_free(pv[a]);
            if (go) {
                act[keep] = act[a];
                slot[keep] = slot[a];
                state[keep++] = state[a];
            } else out[slot[a]] = state[a];
        }
        live = keep;
        if (!live) break;
        if (eval_comp(x, body, live, act, state, nv)) {
            ok = false;
            break;
        }
        for (uint32_t a = 0; a < live; a++) {
            interp_val_free(state[a]);
            state[a] = nv[a];
        }
    }
    if (!ok) {
        for (uint32_t a = 0; a < live; a++) interp_val_free(state[a]);
        for (uint32_t a = 0; a < na; a++) {
            interp_val_free(out[a]);
            out[a] = NULL;
        }
    }
    free(pv);
    free(nv);
    free(state);
    free(act);
    free(slot);
    return ok;
}

static bool eval_conditional(ctx *x, const hlo_instr *in, uint32_t na, const int64_t *devs, interp_val ***opv,
                             interp_val **out) {
    uint32_t nb;
    const int64_t *branches;
    int64_t tf[2];
    const hlo_attr *ba = instr_attr(in, A_BRANCH_COMPUTATIONS);
    if (ba) {
        branches = ba->v.ints;
        nb = ba->n;
    } else {
        tf[0] = instr_called(x->m, in, A_TRUE_COMPUTATION);
        tf[1] = instr_called(x->m, in, A_FALSE_COMPUTATION);
        branches = tf;
        nb = 2;
    }
    bool pred = ba == NULL;
    if (nb == 0 || in->noperands != nb + 1) return fail(x, INTERP_ERUN, in, "%u branches for %u operands", nb, in->noperands), false;
    for (uint32_t a = 0; a < na; a++) {
        const interp_val *s = opv[0][a];
        if (!s || s->dtype == DT_TUPLE || s->n != 1 || (!s->f && !s->i))
            return fail(x, INTERP_ERUN, in, "the branch selector is no scalar"), false;
    }
    for (uint32_t b = 0; b < nb; b++)
        if (branches[b] < 0 || (uint64_t)branches[b] >= x->m->ncomps) return fail(x, INTERP_ERUN, in, "no such branch"), false;
    int64_t *sub = xmalloc(na * sizeof *sub);
    uint32_t *slot = xmalloc(na * sizeof *slot);
    interp_val **args = xcalloc(na, sizeof *args), **res = xcalloc(na, sizeof *res);
    bool ok = true;
    for (uint32_t a = 0; a < na; a++) out[a] = NULL;
    for (uint32_t b = 0; b < nb && ok; b++) {
        uint32_t ns = 0;
        for (uint32_t a = 0; a < na; a++) {
            const interp_val *s = opv[0][a];
            int64_t v = s->f ? (int64_t)s->f[0] : s->i[0];
            int64_t pick = pred ? (v ? 0 : 1) : (v < 0 || v >= (int64_t)nb ? (int64_t)nb - 1 : v);
            if (pick != (int64_t)b) continue;
            sub[ns] = devs[a];
            slot[ns] = a;
            args[ns++] = opv[b + 1][a];
        }
        if (!ns) continue;
        const hlo_comp *bc = &x->m->comps[branches[b]];
        if (bc->nparams != 1) {
            fail(x, INTERP_ERUN, in, "branch %s takes %u parameters", bc->name, bc->nparams);
            ok = false;
            break;
        }
        if (eval_comp(x, (uint32_t)branches[b], ns, sub, args, res)) ok = false;
        else
            for (uint32_t k = 0; k < ns; k++) out[slot[k]] = res[k];
    }
    if (!ok)
        for (uint32_t a = 0; a < na; a++) {
            interp_val_free(out[a]);
            out[a] = NULL;
        }
    free(sub);
    free(slot);
    free(args);
    free(res);
    return ok;
}

/* Evaluates computation ci on the na devices devs; args[a·nparams + k] is
 * parameter k of device a (borrowed). out[a] receives one reference.
 * Returns 0 or the status. */
static int64_t shape_total(const shape *s);

/* Charges one instruction to the step budget: its result's and its operands'
 * elements on every device running it. False (status set) once spent. */
static bool charge_steps(ctx *x, const hlo_comp *c, const hlo_instr *in, uint32_t na) {
    int64_t e = shape_total(&in->shape) + 1;
    for (uint32_t k = 0; k < in->noperands; k++) e += shape_total(&c->instrs[in->operands[k]].shape);
    x->steps += e * (int64_t)na;  /* e <= ~2^28 (element budget) and na <= 4096: no overflow */
    if (x->steps <= x->max_steps) return true;
    fail(x, INTERP_EBUDGET, in, "did not finish within the step budget of %lld element steps (a loop that does not end?)",
         (long long)x->max_steps);
    return false;
}

/* The tuple an asynchronous start returns: first and second as elements 0
 * and 1 (references taken), zeros for the context elements after them. NULL
 * when the shape is not such a tuple. */
static interp_val *async_tuple(const shape *s, interp_val *first, interp_val *second) {
    if (s->dtype != DT_TUPLE || s->ntuple < 2) return NULL;
    interp_val **el = xcalloc(s->ntuple, sizeof *el);
    el[0] = interp_val_ref(first), el[1] = interp_val_ref(second);
    for (uint32_t k = 2; k < s->ntuple; k++)
        if (!(el[k] = val_shape(&s->tuple[k]))) {
            for (uint32_t j = 0; j < k; j++) interp_val_free(el[j]);
            free(el);
            return NULL;
        }
    interp_val *t = interp_val_tuple(s->ntuple, el);
    free(el);
    return t;
}

/* A start of an asynchronous collective: the synchronous collective's result,
 * alone (all-reduce-start) or as element 1 after the operand. */
static void eval_collective_start(ctx *x, const hlo_instr *in, uint32_t na, const int64_t *devs, interp_val ***opv,
                                  interp_val **res) {
    hlo_instr sync = *in;
    bool paired = in->op != OP_ALL_REDUCE_START;
    sync.op = in->op == OP_ALL_REDUCE_START ? OP_ALL_REDUCE : in->op == OP_ALL_GATHER_START ? OP_ALL_GATHER : OP_COLLECTIVE_PERMUTE;
    if (paired) {
        if (in->shape.dtype != DT_TUPLE || in->shape.ntuple < 2 || in->noperands != 1) {
            fail(x, INTERP_EUNSUPPORTED, in, "asynchronous start with this shape");
            return;
        }
        sync.shape = in->shape.tuple[1];
    }
    if (!eval_collective(x, &sync, na, devs, opv, res) || !paired) return;
    for (uint32_t a = 0; a < na; a++) {
        interp_val *r = res[a];
        res[a] = async_tuple(&in->shape, opv[0][a], r);
        interp_val_free(r);
        if (!res[a]) {
            fail(x, INTERP_EUNSUPPORTED, in, "asynchronous start with this shape");
            return;
        }
    }
}

/* async-start(operands) calls=c: ((operands), c(operands), context...). */
static void eval_async_start(ctx *x, const hlo_instr *in, uint32_t na, const int64_t *devs, interp_val ***opv,
                             interp_val **res) {
    uint32_t callee = instr_called(x->m, in, A_CALLS), np = in->noperands;
    if (callee >= x->m->ncomps || x->m->comps[callee].nparams != np) {
        fail(x, INTERP_ERUN, in, "async-start without a computation taking its operands");
        return;
    }
    interp_val **cargs = xcalloc((size_t)na * np + 1, sizeof *cargs), **got = xcalloc(na, sizeof *got);
    for (uint32_t a = 0; a < na; a++)
        for (uint32_t k = 0; k < np; k++) cargs[(size_t)a * np + k] = opv[k][a];
    if (eval_comp(x, callee, na, devs, cargs, got) == 0)
        for (uint32_t a = 0; a < na && !x->status; a++) {
            interp_val **el = xcalloc(np + 1, sizeof *el);
            for (uint32_t k = 0; k < np; k++) el[k] = interp_val_ref(opv[k][a]);
            interp_val *ops = interp_val_tuple(np, el);
            free(el);
            res[a] = async_tuple(&in->shape, ops, got[a]);
            interp_val_free(ops);
            if (!res[a]) fail(x, INTERP_EUNSUPPORTED, in, "async-start with this shape");
        }
    for (uint32_t a = 0; a < na; a++) interp_val_free(got[a]);
    free(got);
    free(cargs);
}

/* Whether s is or holds a complex type. */
static bool shape_complex(const shape *s) {
    for (uint32_t k = 0; s->dtype == DT_TUPLE && k < s->ntuple; k++)
        if (shape_complex(&s->tuple[k])) return true;
    return dtype_is_complex(s->dtype);
}

/* Whether instruction i of c has a complex operand or result. */
static bool touches_complex(const hlo_comp *c, const hlo_instr *in) {
    bool cx = shape_complex(&in->shape);
    for (uint32_t k = 0; k < in->noperands && !cx; k++) cx = shape_complex(&c->instrs[in->operands[k]].shape);
    return cx;
}

/* The ops that interpret complex values (interp.h, Numbers); the elementwise
 * ones, dot, reduce and the reducing collectives check the rest themselves. */
static bool complex_op(const hlo_instr *in) {
    switch (in->op) {
    case OP_PARAMETER: case OP_CONSTANT: case OP_TUPLE: case OP_GET_TUPLE_ELEMENT: case OP_CALL: case OP_WHILE:
    case OP_CONDITIONAL: case OP_COPY: case OP_OPT_BARRIER: case OP_BROADCAST: case OP_RESHAPE: case OP_TRANSPOSE:
    case OP_REVERSE: case OP_SLICE: case OP_DYNAMIC_SLICE: case OP_DYNAMIC_UPDATE_SLICE: case OP_CONCATENATE:
    case OP_PAD: case OP_SELECT: case OP_ADD: case OP_SUBTRACT: case OP_MULTIPLY: case OP_DIVIDE: case OP_NEGATE:
    case OP_ABS: case OP_EXP: case OP_COMPARE: case OP_CONVERT: case OP_COMPLEX: case OP_REAL: case OP_IMAG:
    case OP_DOT: case OP_REDUCE: case OP_FFT: case OP_ALL_REDUCE: case OP_REDUCE_SCATTER: case OP_ALL_GATHER:
    case OP_ALL_TO_ALL: case OP_COLLECTIVE_PERMUTE: case OP_ALL_REDUCE_START: case OP_ALL_REDUCE_DONE:
    case OP_ALL_GATHER_START: case OP_ALL_GATHER_DONE: case OP_COLLECTIVE_PERMUTE_START:
    case OP_COLLECTIVE_PERMUTE_DONE: case OP_COPY_START: case OP_COPY_DONE: case OP_BITCAST: case OP_SCATTER:
        return true;
    case OP_CUSTOM_CALL: return instr_is_identity_custom_call(in);
    default: return false;
    }
}

static int eval_comp(ctx *x, uint32_t ci, uint32_t na, const int64_t *devs, interp_val **args, interp_val **out) {
    const hlo_comp *c = &x->m->comps[ci];
    const comp_info *f = info_of(x, ci);
    interp_val **vals = xcalloc((size_t)c->ninstrs * na + 1, sizeof *vals);
    interp_val ***opv = xcalloc(256, sizeof *opv);
    uint32_t opcap = 256;
    interp_val **one = xcalloc(256, sizeof *one);
    for (uint32_t i = 0; i < c->ninstrs && !x->status; i++) {
        const hlo_instr *in = &c->instrs[i];
        interp_val **res = vals + (size_t)i * na;
        if (in->noperands > opcap) {
            opcap = in->noperands;
            opv = xrealloc(opv, opcap * sizeof *opv);
            one = xrealloc(one, opcap * sizeof *one);
        }
        for (uint32_t k = 0; k < in->noperands; k++) opv[k] = vals + (size_t)in->operands[k] * na;
        if (!charge_steps(x, c, in, na)) break;
        if (touches_complex(c, in) && !complex_op(in)) {
            fail(x, INTERP_EUNSUPPORTED, in, "no interpreter rule for this opcode on complex values");
            break;
        }
        switch (in->op) {
        case OP_PARAMETER: {
            int64_t k = instr_int(in, A_PARAMETER_NUMBER, 0);
            if (k < 0 || k >= c->nparams) {
                fail(x, INTERP_ERUN, in, "parameter number out of range");
                break;
            }
            for (uint32_t a = 0; a < na; a++) res[a] = interp_val_ref(args[(size_t)a * c->nparams + k]);
            break;
        }
        case OP_ALL_REDUCE: case OP_ALL_GATHER: case OP_REDUCE_SCATTER: case OP_ALL_TO_ALL:
        case OP_COLLECTIVE_PERMUTE:
            eval_collective(x, in, na, devs, opv, res);
            break;
        case OP_ALL_REDUCE_START: case OP_ALL_GATHER_START: case OP_COLLECTIVE_PERMUTE_START:
            eval_collective_start(x, in, na, devs, opv, res);
            break;
        case OP_ASYNC_START:
            eval_async_start(x, in, na, devs, opv, res);
            break;
        case OP_CALL: {
            uint32_t callee = instr_called(x->m, in, A_TO_APPLY);
            if (callee == UINT32_MAX) callee = instr_called(x->m, in, A_CALLS);
            if (callee >= x->m->ncomps) {
                fail(x, INTERP_ERUN, in, "call without a computation");
                break;
            }
            uint32_t np = in->noperands;
            interp_val **cargs = xcalloc((size_t)na * np + 1, sizeof *cargs);
            for (uint32_t a = 0; a < na; a++)
                for (uint32_t k = 0; k < np; k++) cargs[(size_t)a * np + k] = opv[k][a];
            if (x->m->comps[callee].nparams != np) fail(x, INTERP_ERUN, in, "callee takes %u parameters", x->m->comps[callee].nparams);
            else eval_comp(x, callee, na, devs, cargs, res);
            free(cargs);
            break;
        }
        case OP_WHILE:
            if (in->noperands != 1) fail(x, INTERP_ERUN, in, "while takes one operand");
            else eval_while(x, in, na, devs, opv[0], res);
            break;
        case OP_CONDITIONAL:
            eval_conditional(x, in, na, devs, opv, res);
            break;
        default:
            if (hlo_op_is_collective(in->op) || in->op == OP_SEND || in->op == OP_RECV || in->op == OP_INFEED ||
                in->op == OP_OUTFEED || in->op == OP_RNG || in->op == OP_RNG_BIT_GENERATOR || in->op == OP_FUSION ||
                in->op == OP_MAP) {
                fail(x, INTERP_EUNSUPPORTED, in, "no interpreter rule for this opcode");
                break;
            }
            for (uint32_t a = 0; a < na && !x->status; a++) {
                for (uint32_t k = 0; k < in->noperands; k++) one[k] = opv[k][a];
                res[a] = eval_local(x, in, one, devs[a]);
            }
        }
        if (x->status) break;
        for (uint32_t a = 0; a < na; a++)
            if (!res[a] || !interp_val_matches(res[a], &in->shape)) {
                strbuf t;
                sb_init(&t);
                if (res[a]) interp_val_print_type(&t, res[a]);
                fail(x, INTERP_ERUN, in, "computed %s, the instruction's shape differs", res[a] ? t.s : "nothing");
                sb_free(&t);
                break;
            }
        if (x->status) break;
        if (x->cfg && x->cfg->observe) x->cfg->observe(x->cfg->observe_ctx, c, i, na, devs, res);
        /* Release operands whose last user this was. */
        for (uint32_t k = 0; k < in->noperands; k++) {
            uint32_t o = in->operands[k];
            if (f->last_use[o] == i && vals[(size_t)o * na]) 
                for (uint32_t a = 0; a < na; a++) {
                    interp_val_free(vals[(size_t)o * na + a]);
                    vals[(size_t)o * na + a] = NULL;
                }
        }
        if (f->last_use[i] == i && i != c->root)  /* unused */
            for (uint32_t a = 0; a < na; a++) {
                interp_val_free(res[a]);
                res[a] = NULL;
            }
    }
    if (!x->status)
        for (uint32_t a = 0; a < na; a++) out[a] = interp_val_ref(vals[(size_t)c->root * na + a]);
    for (size_t k = 0; k < (size_t)c->ninstrs * na; k++) interp_val_free(vals[k]);
    free(vals);
    free(opv);
    free(one);
    return x->status;
}

static int64_t header_int(const hlo_module *m, const char *key) {
    for (uint32_t k = 0; k < m->nattrs; k++) {
        const hlo_attr *a = &m->attrs[k];
        if (a->raw_key && strcmp(a->raw_key, key) == 0 && a->v.str) return strtoll(a->v.str, NULL, 10);
    }
    return 0;
}

void interp_devices(const hlo_module *m, int64_t *replicas, int64_t *partitions) {
    int64_t r = header_int(m, "replica_count"), p = header_int(m, "num_partitions");
    if (r <= 0) r = 1;
    if (p <= 0) {
        int64_t d = graph_num_devices(m);
        p = d % r == 0 && d / r > 0 ? d / r : 1;
    }
    *replicas = r;
    *partitions = p;
}

static int64_t shape_total(const shape *s) {
    if (s->dtype == DT_TUPLE) {
        int64_t t = 0;
        for (uint32_t k = 0; k < s->ntuple; k++) t += shape_total(&s->tuple[k]);
        return t;
    }
    int64_t n = shape_elements(s);
    return n < 0 ? 0 : n;
}

int interp_check(const hlo_module *m, const interp_config *cfg, strbuf *err) {
    int64_t R, P;
    interp_devices(m, &R, &P);
    if (cfg && cfg->replicas > 0) R = cfg->replicas;
    if (cfg && cfg->partitions > 0) P = cfg->partitions;
    int64_t D = R * P;
    int64_t budget = cfg && cfg->max_elements > 0 ? cfg->max_elements : INTERP_MAX_ELEMENTS;
    if (D <= 0 || D > 4096) {
        if (err) sb_printf(err, "%lld devices: between 1 and 4096 are simulated", (long long)D);
        return INTERP_EINPUT;
    }
    /* Budget: every instruction's elements on every device. */
    int64_t total = 0;
    for (uint32_t c = 0; c < m->ncomps; c++)
        for (uint32_t i = 0; i < m->comps[c].ninstrs; i++) {
            const hlo_instr *in = &m->comps[c].instrs[i];
            int64_t e = shape_total(&in->shape);
            if (e > budget || total + e > budget) total = budget + 1;
            else total += e;
            if (in->shape.rank > INTERP_MAX_RANK) {
                if (err) sb_printf(err, "%s: rank %u exceeds %d", in->name, in->shape.rank, INTERP_MAX_RANK);
                return INTERP_EUNSUPPORTED;
            }
        }
    if (total > budget / D) {
        if (err)
            sb_printf(err, "the module holds more than %lld elements over %lld devices (budget %lld elements)",
                      (long long)(total > budget ? budget : total * D), (long long)D, (long long)budget);
        return INTERP_EBUDGET;
    }
    if (!graph_entry(m)) {
        if (err) sb_puts(err, "the module has no entry computation");
        return INTERP_EINPUT;
    }
    return INTERP_OK;
}

interp_val *interp_eval_instr(const hlo_module *m, const hlo_instr *in, interp_val **ops, strbuf *err) {
    /* Device-independent, side-effect-free ops only: the result must not
     * depend on which device (or run) computes it. */
    switch (in->op) {
    case OP_PARTITION_ID: case OP_REPLICA_ID: case OP_RNG: case OP_RNG_BIT_GENERATOR: case OP_RNG_GET_AND_UPDATE_STATE:
    case OP_CALL: case OP_WHILE: case OP_CONDITIONAL: case OP_CUSTOM_CALL: case OP_PARAMETER: case OP_INFEED:
    case OP_OUTFEED: case OP_SEND: case OP_SEND_DONE: case OP_RECV: case OP_RECV_DONE: case OP_AFTER_ALL:
        if (err) sb_printf(err, "%s: not evaluated on its own", in->name);
        return NULL;
    default:
        break;
    }
    if (hlo_op_is_collective(in->op) || in->shape.dtype == DT_TUPLE || in->shape.rank > INTERP_MAX_RANK ||
        dtype_is_complex(in->shape.dtype)) {
        if (err) sb_printf(err, "%s: not evaluated on its own", in->name);
        return NULL;
    }
    for (uint32_t k = 0; k < in->noperands; k++)
        if (!ops[k] || ops[k]->dtype == DT_TUPLE || ops[k]->im) {
            if (err) sb_printf(err, "%s: operand %u is not an array", in->name, k);
            return NULL;
        }
    ctx x = {.m = m, .err = err, .R = 1, .P = 1, .D = 1, .max_iterations = INTERP_MAX_ITERATIONS, .max_steps = INTERP_MAX_STEPS};
    arena_init(&x.a);
    x.info = xcalloc(m->ncomps ? m->ncomps : 1, sizeof *x.info);
    interp_val *r = eval_local(&x, in, ops, 0);
    if (r && (x.status || !interp_val_matches(r, &in->shape))) {
        if (!x.status && err) sb_printf(err, "%s: result does not have the instruction's shape", in->name);
        interp_val_free(r);
        r = NULL;
    }
    ctx_free(&x);
    return r;
}

static int run_entry(const hlo_module *m, const interp_config *cfg, interp_val **const *args, interp_val **out,
                     strbuf *err);

int interp_run(const hlo_module *m, const interp_config *cfg, interp_val **const *args, interp_val **out,
               strbuf *err) {
    /* Only this run is unrounded: constant folding on this thread later is not. */
    bool was = unrounded_now;
    unrounded_now = cfg && cfg->unrounded;
    int st = run_entry(m, cfg, args, out, err);
    unrounded_now = was;
    return st;
}

static int run_entry(const hlo_module *m, const interp_config *cfg, interp_val **const *args, interp_val **out,
                     strbuf *err) {
    ctx x = {.m = m, .err = err, .cfg = cfg};
    interp_devices(m, &x.R, &x.P);
    if (cfg && cfg->replicas > 0) x.R = cfg->replicas;
    if (cfg && cfg->partitions > 0) x.P = cfg->partitions;
    x.D = x.R * x.P;
    x.max_iterations = cfg && cfg->max_iterations > 0 ? cfg->max_iterations : INTERP_MAX_ITERATIONS;
    x.max_steps = cfg && cfg->max_steps > 0 ? cfg->max_steps : INTERP_MAX_STEPS;
    if (x.D > 0 && x.D <= 4096)
        for (int64_t d = 0; d < x.D; d++) out[d] = NULL;
    int st0 = interp_check(m, cfg, err);
    if (st0) return st0;
    const hlo_comp *entry = graph_entry(m);
    if (!entry) {
        if (err) sb_puts(err, "the module has no entry computation");
        return INTERP_EINPUT;
    }
    uint32_t np = entry->nparams;
    interp_val **flat = xcalloc((size_t)x.D * np + 1, sizeof *flat);
    for (int64_t d = 0; d < x.D; d++)
        for (uint32_t k = 0; k < np; k++) {
            interp_val *v = args[d][k];
            const hlo_instr *p = &entry->instrs[entry->params[k]];
            if (!interp_val_matches(v, &p->shape)) {
                if (err) {
                    sb_printf(err, "device %lld, parameter %u (%s): expected ", (long long)d, k, p->name);
                    shape_print(err, &p->shape);
                    sb_puts(err, ", got ");
                    if (v) interp_val_print_type(err, v);
                    else sb_puts(err, "nothing");
                }
                free(flat);
                return INTERP_EINPUT;
            }
            flat[(size_t)d * np + k] = v;
        }
    arena_init(&x.a);
    x.info = xcalloc(m->ncomps ? m->ncomps : 1, sizeof *x.info);
    int64_t *devs = xmalloc((size_t)x.D * sizeof *devs);
    for (int64_t d = 0; d < x.D; d++) devs[d] = d;
    int st = eval_comp(&x, (uint32_t)(entry - m->comps), (uint32_t)x.D, devs, flat, out);
    if (cfg && cfg->stats) *cfg->stats = x.stats;
    free(devs);
    free(flat);
    ctx_free(&x);
    return st;
}
