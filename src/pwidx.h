/* pwidx — piecewise-affine functions of one integer variable.
 *
 * The checker meets index arithmetic that depends on both data and the device:
 * a vocab-parallel embedding computes, per device r, `t - r·V/n`, compares it
 * with bounds, masks and gathers. Such values are exact functions of one integer
 * input t (a token id), so they are represented per device as a function of t:
 * sorted, contiguous pieces [lo, hi) covering every int64, each with value
 * a·t + b. Booleans are pieces with a = 0 and b ∈ {0, 1}; the checker also uses
 * b as a small tag (ZERO, HIT, JUNK) for masked values.
 *
 * Operations are exact. They fail (return false) instead of approximating: more
 * than PW_MAX pieces, a product of two non-constant pieces, a comparison whose
 * slope is not -1, 0 or 1, or arithmetic that would overflow.
 * Functions are plain values; nothing is allocated.
 */
#ifndef SCALIFY_PWIDX_H
#define SCALIFY_PWIDX_H

#include <stdbool.h>
#include <stdint.h>

#define PW_MAX 16
#define PW_NEG_INF INT64_MIN
#define PW_POS_INF INT64_MAX

typedef struct pw_piece {
    int64_t lo, hi;  /* [lo, hi); PW_NEG_INF / PW_POS_INF are unbounded */
    int64_t a, b;    /* value a·t + b */
} pw_piece;

typedef struct pw_fn {
    uint32_t n;
    pw_piece p[PW_MAX];
} pw_fn;

enum pw_op {
    PW_ADD, PW_SUB, PW_MUL, PW_MIN, PW_MAX_OP, PW_AND, PW_OR, PW_XOR,
    PW_EQ, PW_NE, PW_LT, PW_LE, PW_GT, PW_GE
};

void pw_const(pw_fn *f, int64_t k);
/* Appends [lo, hi) with value a·t + b (merging with an equal neighbour); false
 * when f is full. Pieces must be appended in order. */
bool pw_push(pw_fn *f, int64_t lo, int64_t hi, int64_t a, int64_t b);
/* t + b */
void pw_shift(pw_fn *f, int64_t b);
bool pw_binary(int op, const pw_fn *f, const pw_fn *g, pw_fn *out);
/* c ? t : f, with c boolean. */
bool pw_select(const pw_fn *c, const pw_fn *t, const pw_fn *f, pw_fn *out);
bool pw_not(const pw_fn *f, pw_fn *out);     /* boolean negation */
bool pw_negate(const pw_fn *f, pw_fn *out);
/* f as an unsigned integer of `bits` bits (at most 32) holds it, exactly for
 * 0 <= t < 2^bits: values below 0 or from 2^bits on wrap by 2^bits. Pieces
 * over t < 0 are kept as they are (ids are never negative). False when a
 * piece over t >= 0 has a slope other than -1, 0 or 1, or could wrap more
 * than once there. */
bool pw_wrap_unsigned(const pw_fn *f, int bits, pw_fn *out);
/* The constant value of f over [lo, hi), or false when it is not constant there. */
bool pw_constant_on(const pw_fn *f, int64_t lo, int64_t hi, int64_t *value);

#endif
