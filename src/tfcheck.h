/* tfcheck — property tests of the checker's transfer functions (DESIGN §5
 * Soundness; run by `scalify rules validate` and the soundness test suite).
 *
 * A fixed-seed generator writes small random program pairs as HLO text: a
 * baseline on one device, a distributed version on a mesh of 2 or 4 devices
 * ({x:N} or {dp:2, tp:2}) and a relations file. One family per group of
 * transfer functions (tf_family_name): elementwise ops on sharded/duplicated
 * inputs, dot with the contracting dim sharded (+ all-reduce), dot with a
 * non-contracting dim sharded, reduce over a sharded or unsharded dim,
 * all-gather undoing a sharding, transpose of a sharded tensor, ops applied to
 * partial sums before their all-reduce (linear ones are correct), two partial
 * sums combined, dynamic-slice of a duplicated tensor at partition-id·chunk,
 * reduce-scatter of a partial dot, all-to-all resharding (+ reshape/transpose;
 * also of a locally split dim, read as a view of the term reshaped, with a
 * dim bound on another axis kept through the exchange, and of a dim sharded
 * over both axes of a 2-D mesh, exchanged over the minor one),
 * slice / concatenate of sharded tensors, a table the baseline holds folded
 * into a constant and the distributed side computes from constants (constant
 * folding), reshapes that insert a unit dim before a sharded one (and
 * grouped-query kv heads repeated by a broadcast whose unit dim is sharded),
 * and a
 * positional table sharded by rows read at iota positions the vocab-parallel
 * way; a dense expert dispatch (zero masks through all-to-alls, combined by
 * the router weights); collective-permute (GSPMD's half of a sharded dim
 * resharded through local slices, a permute, a concatenate and a
 * dynamic-slice; a shift of the blocks and back; a full cycle of a
 * replicated value); dynamic-slice also at blocks of a window, and
 * dynamic-update-slice of values sharded alike; a scatter-add into a table
 * split by rows (indices offset per device, rows out of the block dropped,
 * tokens split over the other axis and all-reduced) or by columns. Each
 * family has a correct
 * variant and buggy ones (missing/spurious all-reduce, wrong reducer, wrong
 * replica groups, wrong gather dim, wrong output view, operands sharded over
 * different mesh axes, a non-linear op on partial sums, a wrong slice
 * multiplier or axis, a missing transpose, a shifted slice range, swapped
 * concatenate operands, a slice of a sharded dim taken per shard, a table
 * computed with other constants, an unreduced or shifted row table, an
 * inverted dispatch mask, a combine by other weights, reversed experts,
 * permute pairs reversed, a wrong offset after a permute, a shift not undone,
 * a pair of a cycle dropped, an update written one place further, a
 * scatter's offset shifted or combiner max, its blocks not or wrongly
 * all-reduced); every bug
 * built here changes values.
 *
 * Instance i belongs to family i % TF_FAMILIES and draws from its own
 * splitmix64 stream (seed 0x50a7d5eed·(i+1)), so its case name reproduces it.
 * Each pair goes through check_pair (witness on, the given rules) for the
 * verdict and witness_run (seed 1, as check_pair uses) for execution. An
 * instance FAILS when any of these does not hold:
 *   1. verified => the witness ran and the outputs agree (soundness: a failure
 *      here is counted in `unsound`);
 *   2. the verdict is not error and the witness ran;
 *   3. a variant built correct => the witness agrees (tests the generator);
 *   4. a variant built buggy => the witness differs.
 * Completeness (every correct pair verified) is counted, not required.
 *
 * Counterexample of a family: its smallest failing instance (shortest
 * distributed program), named by case, with the property it broke; the
 * failing instances' files stay in the temp directory it names. Everything a
 * report holds is owned by it (tf_report_free).
 */
#ifndef SCALIFY_TFCHECK_H
#define SCALIFY_TFCHECK_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "diag.h"

#define TF_FAMILIES 21
#define TF_INSTANCES (36 * TF_FAMILIES)  /* the default: 36 per family */

/* The name of family f (< TF_FAMILIES): "eltwise", "dot-k", ... */
const char *tf_family_name(uint32_t f);

typedef struct tf_family {
    uint32_t instances, correct;      /* instances run; built correct */
    uint32_t verified, correct_verified, mismatch, by_execution, unverified, errors;
    uint32_t failures, unsound;       /* broke a property above; of which 1 (verified but differs) */
    char *counterexample;             /* the smallest failing instance; NULL when none failed */
    size_t cex_size;
} tf_family;

typedef struct tf_report {
    tf_family fam[TF_FAMILIES];
    uint32_t instances, failures, unsound;
    char *dir;                        /* where failing (or, with keep, all) pairs stay; NULL when none */
} tf_report;

/* Runs instances 0..n-1 with the rules in rules_dir (NULL: none), writing the
 * pairs to a fresh temp directory removed afterwards unless something failed
 * or keep. Returns 0, or 2 when the temp directory cannot be made (d). */
int tf_run(uint32_t n, const char *rules_dir, bool keep, tf_report *out, diag *d);
/* Prints one row per family and a summary line; returns 1 when any instance
 * failed, else 0. */
int tf_print(FILE *f, const tf_report *r);
void tf_report_free(tf_report *r);

#endif
