/* interp — the reference interpreter (DESIGN §5: witnesses, rule validation,
 * `scalify eval`). It executes a module of the graph IR on N simulated devices.
 *
 * Devices. A module runs on R replicas × P partitions; device d is the
 * flattened id d = r·P + p (XLA's "flattened id"), so with one replica the
 * partition id is the device id. `replica-id` / `partition-id` return r / p.
 * The devices run in lockstep: every instruction is evaluated for every active
 * device before the next one, so a collective sees every participant's operand.
 * Control flow may diverge (a while loop that stops earlier on one device, a
 * conditional taking another branch on another); the devices that take the
 * same path continue together, and a collective whose group spans devices that
 * are not on the same path is refused (real hardware would hang there).
 *
 * Collectives follow XLA's CollectiveOpGroupMode: no channel_id → cross-replica
 * (groups list replica ids, one group per partition); channel_id and no
 * use_global_device_ids on all-to-all / collective-permute → cross-partition
 * (groups list partition ids, one per replica); on all-reduce / all-gather /
 * reduce-scatter → cross-replica-and-partition (groups list replica ids, each
 * with every partition); use_global_device_ids=true → flattened ids. Replica
 * groups in list, iota and mesh form are accepted (groups_expand); no groups
 * means one group of every id. Reductions fold the group in group order.
 *
 * Numbers. Floating values are held as doubles, computed in double precision
 * and rounded to the element type after every operation (dtype_round), so f32,
 * bf16 and f16 arithmetic is emulated op by op. Inside one operation:
 * `dot` accumulates in double and rounds once; a recognised sum reducer
 * (`reduce`, `all-reduce`, `reduce-scatter`) on f32/f64 accumulates in double
 * and rounds once, on bf16/f16 rounds after every addition (as XLA does when it
 * upcasts each bf16 add); any other to_apply is called on scalars per element.
 * Integers are int64 wrapped to their width after every op; preds are 0/1.
 * Complex values (c64, c128) hold their real parts in f and imaginary parts in
 * im, each rounded as the part type (f32, f64). They run only through the ops
 * that interpret both parts — data movement, tuples and calls, `add`,
 * `subtract`, `multiply`, `divide`, `negate`, `abs`, `exponential`,
 * `compare` EQ/NE, `convert` from real or complex, `complex`, `real`, `imag`,
 * `dot` (accumulated in double), a sum `reduce` / `all-reduce` /
 * `reduce-scatter`, and `fft`; any other op on a complex value is refused.
 * interp_val_new refuses complex types (constant folding never makes one),
 * interp_val_new_input takes them (entry parameters may be complex),
 * interp_eval_instr (constant folding) refuses complex operands and results;
 * interp_run may return complex results. f8/f4/token element types are
 * refused.
 *
 * FFT. `fft` transforms the last len(fft_length) (1 to 3) dims, which must be
 * fft_length (IRFFT: fft_length[-1]/2+1 in the last operand dim), exactly as
 * XLA defines it: FFT e^{-2πi·jk/N}, IFFT e^{+2πi·jk/N}/N per dim, RFFT the
 * FFT of a real operand keeping the N/2+1 first bins of the last dim, IRFFT
 * the inverse of the Hermitian spectrum those bins stand for (the outer dims
 * inverted first, then the last one as numpy.fft.irfftn and pocketfft do,
 * ignoring the imaginary parts of its DC and Nyquist bins). Computed in
 * double (radix 2 for powers of two, else a direct DFT whose N² work per
 * line is charged to the step budget) and rounded once.
 *
 * Orders. `compare` with `type=TOTALORDER` or `order=TOTAL` uses XLA's total
 * order (-NaN < -inf < … < -0 < +0 < … < +inf < +NaN). `sort` is a stable
 * merge sort whatever is_stable says (one of the results XLA allows when
 * false). `topk` sorts its last dimension stably by that total order,
 * descending for largest=true, and keeps the first k with their s32 indices
 * (XLA's decomposition): ties keep the lower index first; a (positive) NaN
 * ranks first for largest, last otherwise. The custom call `TopK` (older frontends)
 * sorts the same way with its comparator.
 *
 * Custom calls. `Sharding`, `SPMDFullToShardShape`, `SPMDShardToFullShape`,
 * `xla.sdy.*` sharding markers, `MoveToHost` / `MoveToDevice` and
 * `LayoutConstraint` are identities when the result shape equals the operand
 * shape (the partitioned side, where they are markers). The activations
 * `silu` (x·logistic(x), jax.nn.silu) and `gelu_tanh` (jax.nn.gelu's tanh
 * approximation) are elementwise on floating operands: the custom calls the
 * rules' `unary` op class names, given the meaning the rules assume. A
 * FullToShard/ShardToFull that changes the shape belongs to a pre-partitioning
 * module whose manual region cannot run per device here; it is refused. The
 * LAPACK calls of XLA's CPU backend, lapack_{s,d}{potrf,trsm,geqrf,orgqr,
 * getrf,syevd,gesdd}_ffi, run matrix by matrix over their leading batch
 * dims with LAPACK's results (linalg.h; options from the backend config's
 * uplo, side, trans_x, diag), infos and pivots s32; choices between values
 * equal to within rounding are counted in interp_stats.ties.
 *
 * reduce-precision rounds as XLA does, bit by bit: the mantissa to nearest
 * even when narrowed, and when the exponent narrows, overflow to inf and no
 * subnormals (flushed to zero); unrounded runs keep the value.
 *
 * Budgets. A module whose instructions hold more than max_elements elements in
 * total (all computations, every device; default INTERP_MAX_ELEMENTS) is
 * refused before running; while loops stop with an error after max_iterations
 * iterations in total; and a run stops (INTERP_EBUDGET) once it has taken
 * max_steps element steps — every instruction evaluated costs its result's and
 * its operands' elements on each device — so a loop whose counter never
 * reaches its bound ends in seconds whatever its body holds. Calls nest at most
 * GRAPH_MAX_CALL_DEPTH deep (graph_check), which bounds the recursion.
 *
 * Ownership. Values (interp_val) are reference counted: every function that
 * returns one hands the caller one reference, released by interp_val_free().
 * Arguments passed to interp_run are borrowed.
 */
#ifndef SCALIFY_INTERP_H
#define SCALIFY_INTERP_H

#include <stdbool.h>
#include <stdint.h>

#include "graph.h"
#include "util.h"

#define INTERP_MAX_ELEMENTS ((int64_t)1 << 27)
#define INTERP_MAX_ITERATIONS ((int64_t)1 << 20)
#define INTERP_MAX_STEPS ((int64_t)1 << 32)  /* about a minute of work */
#define INTERP_MAX_RANK 16

/* A tensor on one device, or a tuple of them. Exactly one of f (floating and
 * complex types) and i (integer and pred types) is set for an array; complex
 * types also set im; tuples set elems. */
typedef struct interp_val {
    int refs;
    int dtype;
    uint32_t rank;
    int64_t dims[INTERP_MAX_RANK];
    int64_t n;                    /* element count */
    double *f;                    /* floats; the real parts of complex values */
    double *im;                   /* complex types: the imaginary parts */
    int64_t *i;
    struct interp_val **elems;    /* DT_TUPLE */
    uint32_t nelems;
} interp_val;

/* Status codes of interp_run. */
enum { INTERP_OK = 0, INTERP_EINPUT = 1, INTERP_EUNSUPPORTED = 2, INTERP_EBUDGET = 3, INTERP_ERUN = 4 };

/* A zero-filled array value; NULL when the element type cannot be represented
 * (tuple, token, f8, complex) or the rank exceeds INTERP_MAX_RANK. */
interp_val *interp_val_new(int dt, uint32_t rank, const int64_t *dims);
/* interp_val_new, complex types too (c64, c128: real and imaginary parts
 * zero): a program's inputs, which interp_run takes whatever their type. */
interp_val *interp_val_new_input(int dt, uint32_t rank, const int64_t *dims);
/* A tuple owning the n references in elems (they are consumed). */
interp_val *interp_val_tuple(uint32_t n, interp_val **elems);
interp_val *interp_val_ref(interp_val *v);   /* returns v with one more reference */
void interp_val_free(interp_val *v);         /* drops one reference; NULL is fine */
/* Element k as a double (integers converted; a complex value's real part). */
double interp_val_get(const interp_val *v, int64_t k);
/* Sets element k from a double, rounded/wrapped to the element type. */
void interp_val_set(interp_val *v, int64_t k, double x);
/* True when v has the dtype and dims of s (arrays; tuples elementwise). */
bool interp_val_matches(const interp_val *v, const shape *s);
/* Appends "f32[2,3]". */
void interp_val_print_type(strbuf *b, const interp_val *v);
/* True for element types this interpreter can hold. */
bool interp_dtype_ok(int dtype);
bool interp_activation(const char *target);  /* a custom-call target the activations above name (silu, gelu_tanh) */

/* Replicas and partitions of a module: the header's replica_count and
 * num_partitions when present; else one replica and graph_num_devices()
 * partitions. */
void interp_devices(const hlo_module *m, int64_t *replicas, int64_t *partitions);

typedef struct interp_config {
    int64_t replicas, partitions;  /* 0: from the module (interp_devices) */
    int64_t max_elements;          /* 0: INTERP_MAX_ELEMENTS */
    int64_t max_iterations;        /* 0: INTERP_MAX_ITERATIONS */
    int64_t max_steps;             /* 0: INTERP_MAX_STEPS */
    bool unrounded;                /* floats held as binary64 whatever their type (inputs
                                    * stay as given): programs that differ only in rounding,
                                    * or in where they round, compute the same */
    struct interp_stats *stats;    /* when set: receives the run's index counts */
    /* When set: called after every instruction of every computation is
     * evaluated (in evaluation order, a call's body before the call), with
     * the na devices that evaluated it (devs) and their results (borrowed:
     * take a reference to keep one). */
    void (*observe)(void *ctx, const hlo_comp *c, uint32_t i, uint32_t na, const int64_t *devs,
                    interp_val *const *res);
    void *observe_ctx;
} interp_config;

/* Index vectors a run used, over all devices: scatter updates (one per
 * window) and how many were skipped, their window out of bounds; gather
 * slices and how many of their starts were clamped into bounds (a slice
 * read elsewhere). Ties: choices a factorisation made between values equal
 * to within rounding (linalg.h: LU pivots, eigenvectors). */
typedef struct interp_stats {
    int64_t scattered, dropped, gathered, clamped, ties;
} interp_stats;

/* The checks interp_run makes before running: device count (1..4096),
 * the element budget, ranks, an entry computation. INTERP_OK or a status with
 * the reason in err (may be NULL). Call it before building large inputs. */
int interp_check(const hlo_module *m, const interp_config *cfg, strbuf *err);

/* Runs the entry computation on every device d = 0..R·P-1 with the borrowed
 * arguments args[d][k] (parameter k of device d). On INTERP_OK, out[d] holds
 * device d's result (caller frees each with interp_val_free). Otherwise out is
 * all NULL and err (may be NULL) says why, naming the instruction. */
int interp_run(const hlo_module *m, const interp_config *cfg, interp_val **const *args,
               interp_val **out, strbuf *err);

/* A window attribute's fields (window={size=.. stride=.. pad=l_h.. lhs_dilate=..
 * rhs_dilate=..}) for `rank` dims, absent ones at their defaults; false when
 * unreadable or reversed. pad holds low, high per dim. */
bool interp_window(const char *text, uint32_t rank, int64_t *size, int64_t *stride, int64_t *pad, int64_t *lhs_dilate,
                   int64_t *rhs_dilate);

/* Evaluates one instruction of m on operand values ops[k] (borrowed), as if on
 * a single device: constant folding. Refuses (NULL, reason in err when not
 * NULL) ops whose result is not a function of the operands alone
 * (partition-id, replica-id, rng, collectives, control flow, calls, custom
 * calls, parameters, I/O) and tuple results. The result has in's shape;
 * the caller frees it. */
interp_val *interp_eval_instr(const hlo_module *m, const hlo_instr *in, interp_val **ops, strbuf *err);
/* The tile of a global array of shape dims[rank] that device d holds under
 * sharding sh (replicated, maximal, tiled with or without replicated trailing
 * dims, iota or explicit device order): offsets and sizes per dimension.
 * Returns false when the sharding is not one of these forms or d is not in it
 * (a maximal sharding gives device 0's tile the whole array; others none). */
bool interp_shard_tile(const hlo_sharding *sh, uint32_t rank, const int64_t *dims, int64_t d,
                       int64_t *offsets, int64_t *sizes);
/* The global dims of a local shape under a tiled sharding (local × tile);
 * false when the sharding is not tiled/replicated. */
bool interp_shard_global(const hlo_sharding *sh, uint32_t rank, const int64_t *local,
                         int64_t *global);
/* The value parameter p of a module run on several devices gets on device d
 * from the tensor v: v itself when v has p's shape; the tile of v under p's
 * sharding when v is the global array (p's shape × its tile counts).
 * NULL when neither. */
interp_val *interp_param_input(const hlo_instr *p, interp_val *v, int64_t d);
/* A new value holding v[offsets .. offsets+sizes) (a static slice). */
interp_val *interp_val_slice(const interp_val *v, const int64_t *offsets, const int64_t *sizes);

/* Deterministic pseudo-random numbers (splitmix64): the same stream on every
 * machine. */
typedef struct interp_rng {
    uint64_t s;
} interp_rng;
void interp_rng_seed(interp_rng *r, uint64_t seed);
uint64_t interp_rng_next(interp_rng *r);
/* Fills v with the documented random distribution: floats uniform in [-1, 1)
 * rounded to the element type (a complex value's real parts, then its
 * imaginary parts, each rounded to the part type); signed and unsigned
 * integers uniform in [0, 16); preds 0 or 1 with equal probability. */
void interp_val_fill_random(interp_val *v, interp_rng *r);

/* The seeded input of parameter k (`scalify eval` without --inputs): a
 * splitmix64 stream seeded with seed ^ (0x9e3779b97f4a7c15 · (k + 1)) fills,
 * by interp_val_fill_random, the parameter's global array when the module runs
 * on ndev > 1 devices and p has a tiled sharding (so replicated parameters
 * agree across devices and shards are pieces of one array; cut it with
 * interp_param_input), else p's own shape. NULL, with the reason in why (may
 * be NULL), when the type cannot be held or the array would exceed
 * INTERP_MAX_ELEMENTS. The caller frees the result. */
interp_val *interp_param_random(const hlo_instr *p, uint32_t k, int64_t ndev, uint64_t seed, strbuf *why);

#endif
