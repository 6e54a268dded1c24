/* rinst — random instances of a rewrite rule's side (DESIGN §5 Soundness,
 * used by `scalify rules validate`; rules_validate.h).
 *
 * ri_generate writes a concrete term in the example syntax of rules/README.md
 * whose root the given pattern matches structurally: the root gets a random
 * type (rank 0..max_rank or exactly max_rank, dims 1..max_dim, a dim of 1 a quarter of the time,
 * dtype mostly f32, else f64, bf16, f16 or s32), and each node of the pattern
 * chooses its operands' types and its attributes at random so that the node
 * type-checks: elementwise ops and op-class members keep the type (select's
 * predicate is pred of the same dims), convert
 * draws an operand dtype, transpose a permutation, reshape a factorisation of
 * the element count, broadcast an increasing subset of dims, concatenate a
 * dim and a split, slice a box with stride 1 or 2 inside a larger operand,
 * dot a layout of batch / free / contracting dims on both sides, gather a
 * take_along_axis or a row lookup of the result's type (s32 indices). Literal
 * attributes of the pattern are kept; keys the pattern leaves out stay
 * absent (as matching requires); a class variable used twice gets the same
 * leaf; a value variable used twice (?lc of two dots) reuses the choice that
 * bound it. Choices that make side conditions hold by design are favoured
 * (identity permutations and broadcasts, same-dims reshapes, same-dtype
 * converts, full slices, a concatenation split reused): the caller still
 * checks that the rule fires and rejects the instance when it does not.
 * Leaves are (param k TYPE), numbered in order of appearance.
 *
 * Not generated (the call returns false): patterns with op-class members the
 * generator has no rule for, nodes of other ops, attributes it cannot choose.
 * Deterministic for a given rng state.
 */
#ifndef SCALIFY_RINST_H
#define SCALIFY_RINST_H

#include <stdbool.h>
#include <stdint.h>

#include "ematch.h"
#include "interp.h"
#include "util.h"

typedef struct ri_limits {
    uint32_t max_rank;  /* of the root and of reshape operands */
    int64_t max_dim;    /* of the root's dims and the dims the generator adds */
    bool exact_rank;    /* the root has rank max_rank (shrinking goes level by level) */
} ri_limits;

/* Appends a random instance of pattern pat to out; *elements gets the total
 * element count of its parameters. False (out unspecified) when this draw
 * could not be built: a draw that cannot satisfy the structure, or a pattern
 * outside what the generator knows. */
bool ri_generate(const em_prog *p, uint32_t pat, const ri_limits *lim, interp_rng *rng, strbuf *out,
                 uint64_t *elements);

#endif
