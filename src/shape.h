/* shape — element types and array/tuple shapes of the graph IR.
 *
 * dtype values are XLA's PrimitiveType numbers (HLO.md), so the protobuf reader
 * uses them directly; dtype_name gives the text spelling ("f32", "bf16").
 *
 * A shape is an array (dtype + dims, optional layout, optional dynamic bounds) or
 * a tuple of shapes. Every array lives in the owning module's arena; shapes are
 * values that borrow those arrays. Invariant (checked by shape_check): dims are
 * non-negative and the byte size of every array fits in int64.
 */
#ifndef SCALIFY_SHAPE_H
#define SCALIFY_SHAPE_H

#include <stdbool.h>
#include <stdint.h>

#include "util.h"

typedef enum dtype {
    DT_INVALID = 0,
    DT_PRED = 1, DT_S8 = 2, DT_S16 = 3, DT_S32 = 4, DT_S64 = 5,
    DT_U8 = 6, DT_U16 = 7, DT_U32 = 8, DT_U64 = 9,
    DT_F16 = 10, DT_F32 = 11, DT_F64 = 12, DT_TUPLE = 13, DT_OPAQUE = 14,
    DT_C64 = 15, DT_BF16 = 16, DT_TOKEN = 17, DT_C128 = 18,
    DT_F8E5M2 = 19, DT_F8E4M3FN = 20, DT_S4 = 21, DT_U4 = 22,
    DT_F8E4M3B11FNUZ = 23, DT_F8E5M2FNUZ = 24, DT_F8E4M3FNUZ = 25,
    DT_S2 = 26, DT_U2 = 27, DT_F8E4M3 = 28, DT_F8E3M4 = 29, DT_S1 = 30,
    DT_U1 = 31, DT_F4E2M1FN = 32, DT_F8E8M0FNU = 33,
    DT_COUNT
} dtype;

const char *dtype_name(int dt);                 /* "f32"; "?" when unknown */
int dtype_from_name(const char *s, size_t n);   /* DT_INVALID when unknown */
int dtype_bits(int dt);                         /* 0 for tuple/token/opaque */
bool dtype_is_float(int dt);                    /* includes the f8/f4 kinds */
bool dtype_is_int(int dt);                      /* signed or unsigned */
/* The least and greatest values of an integer type, as doubles (the 64-bit
 * ones rounded to 2^63 and 2^64); false for other types. */
bool dtype_int_limits(int dt, double *lo, double *hi);
bool dtype_is_unsigned(int dt);
bool dtype_is_complex(int dt);
/* Whether every value of float or complex type `from` is exactly a value of
 * type `to` (a widening convert: bf16 -> f32 -> f64, f32 -> c64 -> c128):
 * such a convert is injective and commutes with sums. */
bool dtype_widens(int from, int to);

/* Narrow float formats: exponent and mantissa bits, bias, and how NaN and
 * infinity are spelled (IEEE-like, "FN": only all-ones is NaN, "FNUZ": the
 * negative-zero code is NaN and there is no negative zero, "FINITE": neither,
 * E8M0: powers of two). NULL for any other type. */
typedef struct minifloat {
    int dt, ebits, mbits, bias;
    enum { MF_IEEE, MF_FN, MF_FNUZ, MF_FINITE, MF_E8M0 } kind;
} minifloat;
const minifloat *dtype_minifloat(int dt);
/* Exponent and mantissa bits of a real float type (f16 5/10, bf16 8/7,
 * f32 8/23, f64 11/52, the narrow formats'); false for any other type. */
bool dtype_float_bits(int dt, int *ebits, int *mbits);
/* x rounded to the nearest value of float type dt, ties to even (f32, bf16,
 * f16 and the narrow formats with a NaN: beyond the largest finite value,
 * infinity where the format has one, else NaN); x itself for f64 and
 * non-float types. */
double dtype_round(int dt, double x);

/* Dimension flags: a bounded dynamic dim prints as "<=N", an unbounded one "?". */
enum { DIM_STATIC = 0, DIM_BOUNDED = 1, DIM_UNBOUNDED = 2 };

/* XLA's "combine" tile dimension, printed '*'. */
#define TILE_COMBINE INT64_MIN

typedef struct tile {
    int64_t *dims;
    uint32_t n;
} tile;

typedef struct layout {
    int64_t *minor_to_major;
    uint32_t n;
    tile *tiles;
    uint32_t ntiles;
    int64_t element_size_bits;  /* E(n); 0 when absent */
    int64_t memory_space;       /* S(n); 0 when absent */
    const char *extra;          /* other layout items, raw text (text reader only) */
} layout;

typedef struct shape {
    uint8_t dtype;
    uint32_t rank;
    int64_t *dims;         /* rank entries; for dynamic dims the bound */
    uint8_t *dynamic;      /* NULL, or rank DIM_* flags */
    layout *layout;        /* NULL when the input wrote none */
    struct shape *tuple;   /* dtype == DT_TUPLE: ntuple element shapes */
    uint32_t ntuple;
} shape;

/* Number of elements (1 for a scalar); -1 for tuples/tokens. */
int64_t shape_elements(const shape *s);
/* Structural equality including layouts. */
bool shape_equal(const shape *a, const shape *b);
/* Same dtype and dims, ignoring layout and dynamic flags. */
bool shape_same_array(const shape *a, const shape *b);
/* Appends the HLO text form, e.g. "f32[2,3]{1,0}" or "(s32[], f32[4])". */
void shape_print(strbuf *b, const shape *s);
/* 0 when valid, else writes a reason into why (size n). */
int shape_check(const shape *s, char *why, size_t n);

#endif
