/* witness — execution evidence for a checked pair (DESIGN §7, issue "witnesses").
 *
 * Runs the baseline on one device and the distributed program on every device
 * of the mesh (interp.h) with the same seeded random global inputs, each
 * device's parameter cut from the global one by its input view (a complex
 * input's real and imaginary parts both drawn as floats are), and compares
 * every output with the baseline's through the expected output view. Integer
 * inputs are drawn in [0, 16) (interp_val_fill_random), or in the smaller
 * range a proof assumed; one the baseline indexes a larger range with (a
 * vocabulary of 32) is drawn over all of that range, so that a vocabulary's
 * later shards are read by some ids too.
 *
 * Both programs run unrounded (interp_config.unrounded: every float held as
 * binary64 whatever its type), so that rounding the programs do differently
 * (a bf16 product summed in f32 on one side, in bf16 on the other) or that an
 * op amplifies (Adam's division by the root of a second moment near zero)
 * does not pass for a difference in what they compute; a precision bug is for
 * the rules to name (dtype-mismatch), never confirmed by execution.
 *
 * Two runs: inputs in [-1, 1) drawn from seed, then (when the first shows no
 * difference) inputs of seed + 1 scaled by 1/64, so what is negligible beside
 * values of one (an epsilon, a missing normalisation) shows. When neither
 * shows a difference and the baseline gave NaN somewhere (a square root or a
 * logarithm of a value that is never negative in use: a second moment, a
 * variance, a count — NaN then flows through compares and selects and can
 * hide any difference behind it), a third run takes the inputs of seed + 2
 * in [0, 1). When the outputs differ by more than rounding but less than the
 * tolerance, a last run takes the inputs of seed + 3 in [0, 2): values with
 * means and sums far from zero, where a wrong factor on a mean that centred
 * inputs leave near zero shows. Where integer inputs the baseline does not
 * index with exist and no run differed yet, one more (seed + 0x100) draws
 * them in {0, 1} (index inputs keep their range): programs that read
 * integers as flags or cells (a 0/1 board kept as int32) do nothing of
 * interest with values up to 15. An index input repeating a value (global
 * token positions a program takes to be distinct): the run that differed
 * runs again with each repeat replaced by a value not held yet, and
 * agreement within rounding there decides nothing (int_domain). A difference
 * beyond the tolerance of the element type, relative to the output's largest
 * magnitude (f32 1e-3, bf16/f16 0.1, f64 1e-9, integers exact), or NaN where
 * the baseline has none, confirms a mismatch (`differs`); within the tight one
 * (1e-9 for f32, bf16 and f16, which run in binary64 too; f64 1e-12) in both
 * runs the outputs agree as binary64 rounding explains (`agrees`); between
 * the two, execution decides nothing. So it decides nothing where the only
 * differences are a non-finite value (inf, NaN) beside a finite one, which
 * random inputs outside a program's domain make (an empty mask's softmax,
 * a count of zero): a run with integers drawn from [1, 16) then takes seed
 * + 4, and a difference there (of finite values, or beside inf or NaN
 * again) decides. Nor does a difference with integer inputs split over the
 * devices decide where the distributed program, all devices together,
 * indexed in bounds less often than the baseline on those inputs — applied
 * fewer scatter updates, or read fewer gather slices without clamping (a
 * device skipping the entries another device owns, by design, loses none of
 * them): random integers need not have the structure
 * a distributed program is written for (edges split by their source's owner,
 * buckets by the destination's, a CSR matrix split by nonzeros whose rows
 * stay in a device's block), and where they lack it the program reads and
 * writes outside its blocks. A wrong offset does the same, so one more run
 * (seed + 5) draws each block of an integer input split over the devices
 * within that block's share of the range the baseline indexes with it (its
 * entries on their owner): a difference there, without more out-of-bounds
 * reads, decides; anything else is left to the rules.
 * A difference on a run where a factorisation chose between values equal to
 * within rounding (an LU pivot, an eigenvector's sign or the basis of a
 * repeated eigenvalue's space: interp_stats.ties) decides nothing either.
 * Agreement is evidence, never a proof. max_rel is relative to that scale.
 */
#ifndef SCALIFY_WITNESS_H
#define SCALIFY_WITNESS_H

#include <stdbool.h>
#include <stdint.h>

#include "graph.h"
#include "locate.h"
#include "view.h"

typedef struct witness {
    bool ran;                 /* false: not run (budget, unsupported op); why says */
    bool differs;             /* some output exceeds its tolerance */
    bool agrees;              /* every output within rounding in every run (neither: undecided) */
    bool over_tight;          /* some output beyond its type's rounding */
    bool over_exact;          /* some output beyond binary64 rounding (summation order) */
    int runs;                 /* runs made (inputs of seed, small ones of seed + 1, non-negative ones of seed + 2,
                               * shifted ones of seed + 3) */
    bool nan_seen;            /* some baseline output held NaN */
    bool finite_seen;         /* some baseline output element compared was finite */
    bool vacuous;             /* every baseline output element was inf or NaN on every run (inputs outside the
                               * programs' domain): neither differs nor agrees */
    bool nonfinite;           /* (while running) some difference beside inf or NaN only */
    bool sharded_ints;        /* some integer input is split over devices (each holds other entries) */
    bool out_of_bounds_more;  /* a run where the distributed program (all devices) applied fewer scatter updates,
                               * or read fewer gather slices unclamped, than the baseline */
    bool int_domain;          /* they differed with sharded_ints where out_of_bounds_more, also with the
                               * integers on their owners: neither differs nor agrees */
    bool nonfinite_only;      /* outputs differed only where one program gave inf or NaN and the other a finite
                               * value (an empty softmax, a zero count: inputs outside the programs' domain),
                               * and agree on inputs whose integers avoid 0: neither differs nor agrees */
    bool unstable;            /* the outputs differed, and the baseline's alone moved beyond the tolerance with
                               * its inputs moved by 1e-9 of their values: neither differs nor agrees */
    bool tied;                /* the outputs differed on a run where a factorisation chose between values equal
                               * to within rounding (interp_stats.ties): unstable too, said why */
    uint32_t skipped;         /* output blocks not compared (unconstrained outputs whose sharding is unknown) */
    double max_abs, max_rel;  /* over all outputs and devices */
    double max_finite;        /* max_abs over the elements both programs give finite */
    uint64_t seed;
    char why[256];
    double diff_scale, diff_shift; /* the first run that differed: its input scale and shift, */
    uint64_t diff_seed;       /* its seed, */
    bool diff_plain;          /* whether its integers were drawn as the first runs draw them */
    bool flag_run, repeats;   /* (while running) the {0, 1} run; repeats replaced in an INTS_DISTINCT run */
    bool locate;              /* (witness_run's argument) find site where the outputs differ */
    locate_site site;         /* differs: where the distributed program first holds what the baseline never does,
                               * on the first run that differed (locate.h) */
} witness;

/* Whether a run says why it decides nothing (neither differs nor agrees, w->why). */
static inline bool witness_undecided(const witness *w) {
    return w->ran && (w->nonfinite_only || w->int_domain || w->unstable || w->vacuous);
}

/* Element budget for a witness run (both programs, all devices): the sum of
 * every instruction's elements, a bound on time as well as memory. 64 M
 * admits the 4-layer llama-scale samples (hidden 512, tp up to 8; about 0.8 s
 * and 220 MB), not the full-size ones. */
#define WITNESS_MAX_ELEMENTS ((int64_t)1 << 26)
/* Step budget of each witness run (interp.h): 16 passes over the element
 * budget, a few seconds; a loop that does not end stops there and the witness
 * "did not finish". */
#define WITNESS_MAX_STEPS ((int64_t)1 << 30)

/* locate: where the outputs differ, place w->site (locate.h: one more run of
 * both programs, keeping their values); a caller whose rules decided already
 * leaves it false.
 * int_below > 0: integer inputs are drawn in [0, int_below) instead (each
 * value of [0, 16) reduced modulo int_below), the domain a proof assumed for
 * gathered indices; 0 or >= 16 keeps [0, 16), or the larger range the
 * baseline indexes with the input. */
void witness_run(const hlo_module *base, const hlo_module *dist, const relations *rel, uint64_t seed, int64_t int_below,
                 bool locate, witness *w);

#endif
