#include "shape.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* Indexed by PrimitiveType number; must stay in step with enum dtype. */
static const struct {
    const char *name;
    int bits;
} dtypes[DT_COUNT] = {
    [DT_INVALID] = {"invalid", 0},
    [DT_PRED] = {"pred", 8},       [DT_S8] = {"s8", 8},
    [DT_S16] = {"s16", 16},        [DT_S32] = {"s32", 32},
    [DT_S64] = {"s64", 64},        [DT_U8] = {"u8", 8},
    [DT_U16] = {"u16", 16},        [DT_U32] = {"u32", 32},
    [DT_U64] = {"u64", 64},        [DT_F16] = {"f16", 16},
    [DT_F32] = {"f32", 32},        [DT_F64] = {"f64", 64},
    [DT_TUPLE] = {"tuple", 0},     [DT_OPAQUE] = {"opaque", 0},
    [DT_C64] = {"c64", 64},        [DT_BF16] = {"bf16", 16},
    [DT_TOKEN] = {"token", 0},     [DT_C128] = {"c128", 128},
    [DT_F8E5M2] = {"f8e5m2", 8},   [DT_F8E4M3FN] = {"f8e4m3fn", 8},
    [DT_S4] = {"s4", 4},           [DT_U4] = {"u4", 4},
    [DT_F8E4M3B11FNUZ] = {"f8e4m3b11fnuz", 8},
    [DT_F8E5M2FNUZ] = {"f8e5m2fnuz", 8},
    [DT_F8E4M3FNUZ] = {"f8e4m3fnuz", 8},
    [DT_S2] = {"s2", 2},           [DT_U2] = {"u2", 2},
    [DT_F8E4M3] = {"f8e4m3", 8},   [DT_F8E3M4] = {"f8e3m4", 8},
    [DT_S1] = {"s1", 1},           [DT_U1] = {"u1", 1},
    [DT_F4E2M1FN] = {"f4e2m1fn", 4}, [DT_F8E8M0FNU] = {"f8e8m0fnu", 8},
};

const char *dtype_name(int dt) {
    return dt > 0 && dt < DT_COUNT ? dtypes[dt].name : "?";
}

int dtype_from_name(const char *s, size_t n) {
    /* Hot in the parser: filter on length and first letter before comparing. */
    if (n < 2 || n > 13) return DT_INVALID;
    for (int i = 1; i < DT_COUNT; i++) {
        const char *name = dtypes[i].name;
        if (name[0] == s[0] && name[1] == s[1] && i != DT_TUPLE && strncmp(name, s, n) == 0 && name[n] == 0)
            return i;
    }
    return DT_INVALID;
}

int dtype_bits(int dt) { return dt > 0 && dt < DT_COUNT ? dtypes[dt].bits : 0; }

bool dtype_int_limits(int dt, double *lo, double *hi) {
    if (!dtype_is_int(dt)) return false;
    int b = dtype_bits(dt);
    *lo = dtype_is_unsigned(dt) ? 0 : -ldexp(1, b - 1);
    *hi = dtype_is_unsigned(dt) ? ldexp(1, b) - 1 : ldexp(1, b - 1) - 1;
    return true;
}

bool dtype_widens(int from, int to) {
    if (from == to) return dtype_is_float(from) || dtype_is_complex(from);
    switch (to) {
    case DT_F32: return dtype_is_float(from) && dtype_bits(from) < 32;
    case DT_F64: return dtype_is_float(from);
    case DT_C64: return from == DT_F32 || dtype_widens(from, DT_F32);
    case DT_C128: return from == DT_C64 || dtype_is_float(from);
    default: return false;
    }
}

bool dtype_is_float(int dt) {
    switch (dt) {
    case DT_F16: case DT_F32: case DT_F64: case DT_BF16:
    case DT_F8E5M2: case DT_F8E4M3FN: case DT_F8E4M3B11FNUZ: case DT_F8E5M2FNUZ:
    case DT_F8E4M3FNUZ: case DT_F8E4M3: case DT_F8E3M4: case DT_F4E2M1FN:
    case DT_F8E8M0FNU:
        return true;
    default:
        return false;
    }
}

bool dtype_is_unsigned(int dt) {
    return dt == DT_U8 || dt == DT_U16 || dt == DT_U32 || dt == DT_U64 || dt == DT_U4 ||
           dt == DT_U2 || dt == DT_U1;
}

bool dtype_is_int(int dt) {
    return dtype_is_unsigned(dt) || dt == DT_S8 || dt == DT_S16 || dt == DT_S32 ||
           dt == DT_S64 || dt == DT_S4 || dt == DT_S2 || dt == DT_S1;
}

bool dtype_is_complex(int dt) { return dt == DT_C64 || dt == DT_C128; }

static float bits_to_f32(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static uint32_t f32_to_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

static const minifloat minifloats[] = {
    {DT_F8E5M2, 5, 2, 15, MF_IEEE},        {DT_F8E4M3, 4, 3, 7, MF_IEEE},
    {DT_F8E3M4, 3, 4, 3, MF_IEEE},         {DT_F8E4M3FN, 4, 3, 7, MF_FN},
    {DT_F8E4M3B11FNUZ, 4, 3, 11, MF_FNUZ}, {DT_F8E5M2FNUZ, 5, 2, 16, MF_FNUZ},
    {DT_F8E4M3FNUZ, 4, 3, 8, MF_FNUZ},     {DT_F4E2M1FN, 2, 1, 1, MF_FINITE},
    {DT_F8E8M0FNU, 8, 0, 127, MF_E8M0},
};

bool dtype_float_bits(int dt, int *ebits, int *mbits) {
    static const int eb[DT_COUNT] = {[DT_F16] = 5, [DT_BF16] = 8, [DT_F32] = 8, [DT_F64] = 11};
    static const int mb[DT_COUNT] = {[DT_F16] = 10, [DT_BF16] = 7, [DT_F32] = 23, [DT_F64] = 52};
    const minifloat *f = dtype_minifloat(dt);
    if (f) *ebits = f->ebits, *mbits = f->mbits;
    else if (dt > 0 && dt < DT_COUNT && eb[dt]) *ebits = eb[dt], *mbits = mb[dt];
    return f || (dt > 0 && dt < DT_COUNT && eb[dt]);
}

const minifloat *dtype_minifloat(int dt) {
    for (size_t i = 0; i < sizeof minifloats / sizeof *minifloats; i++)
        if (minifloats[i].dt == dt) return &minifloats[i];
    return NULL;
}

/* x rounded to a narrow format with a NaN (IEEE, FN, FNUZ): the quantum of
 * x's binade (subnormals share the smallest normal's), ties to even, then
 * overflow to infinity or NaN. */
static double minifloat_round(const minifloat *f, double x) {
    if (x != x) return x;
    if (x == 0) return f->kind == MF_FNUZ ? 0.0 : x;
    double a = fabs(x);
    int e, emin = 1 - f->bias, top = (1 << f->ebits) - 1;
    frexp(a, &e);
    double q = ldexp(1.0, (e - 1 < emin ? emin : e - 1) - f->mbits);
    double r = nearbyint(a / q) * q;
    double m = f->kind == MF_IEEE ? ldexp(2.0 - ldexp(1.0, -f->mbits), top - 1 - f->bias)
             : f->kind == MF_FN   ? ldexp(2.0 - ldexp(2.0, -f->mbits), top - f->bias)
                                  : ldexp(2.0 - ldexp(1.0, -f->mbits), top - f->bias);
    if (r > m) return f->kind == MF_IEEE ? copysign(INFINITY, x) : NAN;
    if (r == 0 && f->kind == MF_FNUZ) return 0.0;
    return copysign(r, x);
}

double dtype_round(int dt, double x) {
    const minifloat *mf = dtype_minifloat(dt);
    if (mf && (mf->kind == MF_IEEE || mf->kind == MF_FN || mf->kind == MF_FNUZ)) return minifloat_round(mf, x);
    if (dt == DT_F32) return (double)(float)x;
    if (dt == DT_BF16) {
        float f = (float)x;
        if (f != f) return x;
        uint32_t u = f32_to_bits(f);
        u += 0x7fff + ((u >> 16) & 1);
        return (double)bits_to_f32(u & 0xffff0000u);
    }
    if (dt == DT_F16) {
        if (x != x || x == 0) return x;
        double a = fabs(x);
        if (a >= 65520.0) return x < 0 ? -INFINITY : INFINITY;
        /* Quantum of f16 at a's binade (subnormals below 2^-14 share 2^-24). */
        int e;
        frexp(a, &e);
        double q = ldexp(1.0, (e - 1 < -14 ? -14 : e - 1) - 10);
        return copysign(nearbyint(a / q) * q, x);
    }
    return x;
}

int64_t shape_elements(const shape *s) {
    if (s->dtype == DT_TUPLE || s->dtype == DT_TOKEN) return -1;
    int64_t n = 1;
    for (uint32_t i = 0; i < s->rank; i++)
        if (!mul_ok(n, s->dims[i], &n)) return -1;
    return n;
}

static bool ints_equal(const int64_t *a, uint32_t na, const int64_t *b, uint32_t nb) {
    return na == nb && (na == 0 || memcmp(a, b, na * sizeof *a) == 0);
}

static bool layout_equal(const layout *a, const layout *b) {
    if (!a || !b) return a == b;
    if (!ints_equal(a->minor_to_major, a->n, b->minor_to_major, b->n)) return false;
    if (a->ntiles != b->ntiles || a->element_size_bits != b->element_size_bits ||
        a->memory_space != b->memory_space)
        return false;
    for (uint32_t i = 0; i < a->ntiles; i++)
        if (!ints_equal(a->tiles[i].dims, a->tiles[i].n, b->tiles[i].dims, b->tiles[i].n))
            return false;
    if (!a->extra || !b->extra) return a->extra == b->extra;
    return strcmp(a->extra, b->extra) == 0;
}

bool shape_same_array(const shape *a, const shape *b) {
    if (a->dtype != b->dtype) return false;
    if (a->dtype == DT_TUPLE) {
        if (a->ntuple != b->ntuple) return false;
        for (uint32_t i = 0; i < a->ntuple; i++)
            if (!shape_same_array(&a->tuple[i], &b->tuple[i])) return false;
        return true;
    }
    return ints_equal(a->dims, a->rank, b->dims, b->rank);
}

bool shape_equal(const shape *a, const shape *b) {
    if (a->dtype != b->dtype) return false;
    if (a->dtype == DT_TUPLE) {
        if (a->ntuple != b->ntuple) return false;
        for (uint32_t i = 0; i < a->ntuple; i++)
            if (!shape_equal(&a->tuple[i], &b->tuple[i])) return false;
        return true;
    }
    if (!ints_equal(a->dims, a->rank, b->dims, b->rank)) return false;
    for (uint32_t i = 0; i < a->rank; i++) {
        int da = a->dynamic ? a->dynamic[i] : DIM_STATIC;
        int db = b->dynamic ? b->dynamic[i] : DIM_STATIC;
        if (da != db) return false;
    }
    return layout_equal(a->layout, b->layout);
}

static void print_ints(strbuf *b, const int64_t *v, uint32_t n) {
    for (uint32_t i = 0; i < n; i++) sb_printf(b, i ? ",%lld" : "%lld", (long long)v[i]);
}

static void layout_print(strbuf *b, const layout *l) {
    sb_putc(b, '{');
    print_ints(b, l->minor_to_major, l->n);
    bool any = l->ntiles || l->element_size_bits || l->memory_space || l->extra;
    if (any) sb_putc(b, ':');
    for (uint32_t t = 0; t < l->ntiles; t++) {
        sb_puts(b, t ? "(" : "T(");
        for (uint32_t i = 0; i < l->tiles[t].n; i++) {
            if (i) sb_putc(b, ',');
            if (l->tiles[t].dims[i] == TILE_COMBINE) sb_putc(b, '*');
            else sb_printf(b, "%lld", (long long)l->tiles[t].dims[i]);
        }
        sb_putc(b, ')');
    }
    if (l->extra) sb_puts(b, l->extra);
    if (l->element_size_bits) sb_printf(b, "E(%lld)", (long long)l->element_size_bits);
    if (l->memory_space) sb_printf(b, "S(%lld)", (long long)l->memory_space);
    sb_putc(b, '}');
}

void shape_print(strbuf *b, const shape *s) {
    if (s->dtype == DT_TUPLE) {
        sb_putc(b, '(');
        for (uint32_t i = 0; i < s->ntuple; i++) {
            if (i) sb_puts(b, ", ");
            shape_print(b, &s->tuple[i]);
        }
        sb_putc(b, ')');
        return;
    }
    sb_puts(b, dtype_name(s->dtype));
    sb_putc(b, '[');
    for (uint32_t i = 0; i < s->rank; i++) {
        if (i) sb_putc(b, ',');
        int dyn = s->dynamic ? s->dynamic[i] : DIM_STATIC;
        if (dyn == DIM_UNBOUNDED) sb_putc(b, '?');
        else sb_printf(b, dyn == DIM_BOUNDED ? "<=%lld" : "%lld", (long long)s->dims[i]);
    }
    sb_putc(b, ']');
    if (s->layout) layout_print(b, s->layout);
}

int shape_check(const shape *s, char *why, size_t n) {
    if (s->dtype == DT_TUPLE) {
        for (uint32_t i = 0; i < s->ntuple; i++)
            if (shape_check(&s->tuple[i], why, n)) return 1;
        return 0;
    }
    if (s->dtype <= DT_INVALID || s->dtype >= DT_COUNT) {
        snprintf(why, n, "invalid element type %d", s->dtype);
        return 1;
    }
    int64_t elems = 1;
    for (uint32_t i = 0; i < s->rank; i++) {
        if (s->dims[i] < 0) {
            snprintf(why, n, "dimension %u is negative (%lld)", i, (long long)s->dims[i]);
            return 1;
        }
        if (!mul_ok(elems, s->dims[i], &elems)) {
            snprintf(why, n, "element count overflows 64 bits");
            return 1;
        }
    }
    int64_t bytes;
    int bits = dtype_bits(s->dtype);
    if (!mul_ok(elems, bits ? bits : 8, &bytes)) {
        snprintf(why, n, "array of %lld elements of %s is larger than 2^63 bits",
                 (long long)elems, dtype_name(s->dtype));
        return 1;
    }
    if (s->layout && s->layout->n && s->layout->n != s->rank) {
        snprintf(why, n, "layout has %u entries for rank %u", s->layout->n, s->rank);
        return 1;
    }
    if (s->layout) {
        uint64_t seen = 0;
        for (uint32_t i = 0; i < s->layout->n; i++) {
            int64_t d = s->layout->minor_to_major[i];
            if (d < 0 || d >= (int64_t)s->rank || (d < 64 && (seen >> d & 1))) {
                snprintf(why, n, "layout {...} is not a permutation of the dimensions");
                return 1;
            }
            if (d < 64) seen |= 1ull << d;
        }
    }
    return 0;
}
