/* lift_int — what the lifting modules share (lift.c and the lift_*.c files
 * beside it, each opening with what it owns); not for other modules, which
 * use lift.h.
 *
 * lstate: the instruction being lifted, its operands' values (ops, which a
 * transfer function may re-view) and the values of its computation so far
 * (vals, as lifted). The helpers work on the lift context's e-graph and arena:
 *   lf_type_of        the e-graph type of (dtype, dims)
 *   lf_list_attr      the attribute blob of one list attribute (dims, ...)
 *   lf_kval           the known values of a constant-only class, or NULL
 *   lf_mk_reshape     reshape(x) to type t, reshape chains collapsed and
 *                     constants folded
 *   lf_mk_element     element j of a tuple term (get-tuple-element), spelt
 *                     as the readers leave it (index 0 is no attribute)
 *   lf_reshape_run    the next run of dims with equal products of a reshape
 *   lf_finding        records a finding (kind, site, words); none on the
 *                     baseline
 *   lf_assume         records an assumption the verdict rests on (once)
 *   lf_node           the e-node of instruction in over children ch, global
 *                     dims (constants folded, identity broadcasts dropped;
 *                     with lf_type_of, lf_list_attr, lf_kval, lf_mk_reshape,
 *                     lf_fresh_var and lf_const_term: lift_term.c)
 *   lf_fresh_var      a fresh variable: content the transfer functions could
 *                     not relate
 *   lf_global_dims    the global dims of a local shape under a view
 *   lf_unsupported    records why an instruction could not be related
 *   lf_axes_words     "tp" / "dp and tp" for a bitmask of mesh axes
 *                     (lf_axes_words, lf_axes_dim, lf_block_offsets and
 *                     lf_collective_axes: lift_mesh.c)
 *   lf_axes_dim       the view dim sharded over a bitmask of axes, major first
 *   lf_dim_block      the block device r holds along a view dim
 *   lf_block_offsets  the axes (a mask; *axes in block order, which may differ
 *                     from the mesh's) whose block index gives every device's value as
 *                     base + index·size (0: none)
 *   lf_same_sharding  whether two views shard every dim alike
 *   lf_pw_instr       index arithmetic (lift_index.c): an op over LV_PW /
 *                     LV_MASK values, or false
 *   lf_index_as_term  an index value that means the same on every device, as
 *                     its plain term (false otherwise)
 *   lf_mask_resolves  whether a gathered row is held, whole, on every device
 *   lf_resolved_as_term index values or resolved rows as their term
 *   lf_mask_as_partial a gathered row as a partial sum over the axes it sums
 *   lf_win_instr      per-device windows (lift_win.c): slices, concatenates,
 *                     dynamic-slices and collective-permutes of them
 *   lf_win_dynamic_slice_term  a term sliced at per-device offsets that are
 *                     no view's blocks, as a window
 *   lf_win_assume     a window met by an op that does not take windows
 *   lf_permute_sources the source device of every device under a
 *                     collective-permute's pairs (-1: none), or NULL and why
 *   lf_axes_of_blocks the mesh axes, major first in any order, whose combined
 *                     coordinate is a given block number on every device
 *   lf_permute_view   the view a collective-permute leaves a value of view v
 *                     in, when every device receives blocks that some view
 *                     gives it (false otherwise)
 *   lf_zmask_after    the zero mask of a value just lifted (lift_zmask.c)
 *   lf_const_term     the constant term of known values
 *   lf_scale_*        constant factors carried beside terms (lift_scale.c)
 *
 * All-to-all layouts, gather and scatter readings (lift_layout.c): the
 * lf_ functions listed with them below.
 *
 * While loops (lift_loop.c): lf_loop_baseline, lf_loop_distributed; the walk
 * state they save and undo (lf_loop_mark, also lift_loop.c) and the lift.c
 * helpers they call.
 *
 * The walk (lift.c), for the memo (lift_memo.c):
 *   lf_lift_one       lifts instruction i of comp into vals[i]
 *   lf_walk_side      switches the walk to the baseline or the distributed side
 * Segments and scopes (lift_seg.c):
 *   lf_segment_of     the segment of an op_name scope, made on first sight
 *   lf_account_tree   the bookkeeping of an instruction not lifted (a memo
 *                     hit), and of all a call would have inlined
 *   lf_charge_segment the time and e-nodes since the last switch, to the
 *                     current segment
 *   lf_kvals_after_unions  constant values follow classes merged outside
 *                     lifting (saturation)
 * The memo (lift_memo.c): lf_memo_enter gives the memo side of comp when it is
 * walked for the first time as its side's segment computation (NULL
 * otherwise); lf_memo_run_at the run starting at instruction i (SR_NONE:
 * none); lf_memo_lift_run lifts a run or takes it from the memo and returns
 * the instruction after it; lf_memo_leave ends the walk; lf_memo_free frees.
 */
#ifndef SCALIFY_LIFT_INT_H
#define SCALIFY_LIFT_INT_H

#include "lift.h"
#include "interp.h"

/* A call being lifted: its callee's parameters are the operands of `call`
 * in `comp` (lift.c pushes one per call; a chain of constants and iotas is
 * read up through them). */
typedef struct lf_call_frame {
    const hlo_comp *comp, *callee;
    const hlo_instr *call;
    const struct lf_call_frame *up;
} lf_call_frame;

typedef struct lstate {
    lift_ctx *c;
    const hlo_comp *comp;
    const hlo_instr *in;
    lval *ops;
    const lval *vals;             /* values of the computation so far */
    const shape *from;            /* reshape: the shape ops[0] has, where it is not in's operand's (a chain of
                                   * reshapes read as one); NULL: the operand's */
} lstate;

static inline lval unknown(void) { return (lval){.kind = LV_UNKNOWN}; }
typedef struct lf_memo_side lf_memo_side;
static inline lval term(eid cls, view v, bool assumed) {
    return (lval){.kind = LV_TERM, .cls = cls, .v = v, .assumed = assumed};
}

uint32_t lf_type_of(lift_ctx *c, int dt, const int64_t *dims, uint32_t rank);
uint32_t lf_list_attr(lift_ctx *c, int key, const int64_t *v, uint32_t n);
struct interp_val *lf_kval(lift_ctx *c, eid cls);
/* The values of cls read off its nodes (a broadcast, reshape, slice,
 * transpose or convert of a class with values, a few levels) where none
 * are recorded; NULL when none. The caller frees them. */
struct interp_val *lf_class_values(lift_ctx *c, eid cls);
eid lf_mk_reshape(lift_ctx *c, eid x, uint32_t t, uint8_t origin);
/* x (whose elements are those of the global dims g without the dims wide
 * marks, unit dims of the local value that a view shards: constant along
 * them) reshaped to those dims and broadcast along the wide ones to g. */
eid lf_mk_unit_broadcast(lift_ctx *c, eid x, int dtype, const int64_t *g, const bool *wide, uint32_t rank);
/* transpose(x): result dim q is x's dim perm[q] (x itself for the identity) */
eid lf_mk_transpose(lift_ctx *c, eid x, const int64_t *perm);
/* x with its dim `from` moved to position `to`, the others in order. */
eid lf_mk_moved(lift_ctx *c, eid x, uint32_t from, uint32_t to);
eid lf_mk_element(lift_ctx *c, eid tuple, uint32_t j, uint32_t t);
/* slice(x) with sl = (start, limit, stride) per dim, global coordinates: the
 * same term as a slice instruction of the baseline (folded alike); x itself
 * when sl keeps every element. */
eid lf_mk_slice(lift_ctx *c, eid x, const int64_t *sl);
/* concatenate(ch[0..n)) along dim d (ch[0] itself when n is 1). */
eid lf_mk_concat(lift_ctx *c, const eid *ch, uint32_t n, uint32_t d);
bool lf_reshape_run(const int64_t *a, uint32_t ra, const int64_t *b, uint32_t rb, uint32_t i, uint32_t j, uint32_t *i2,
                    uint32_t *j2);
void lf_finding(lift_ctx *c, trace_kind kind, const hlo_comp *comp, const hlo_instr *in, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
void lf_assume(lift_ctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void lf_unsupported(lift_ctx *c, const hlo_comp *comp, const hlo_instr *in, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* lf_unsupported, naming the bug kind this undecided use would be if execution
 * shows the programs differ (the kind of an execution-confirmed finding). */
void lf_unsupported_suspect(lift_ctx *c, trace_kind kind, const hlo_comp *comp, const hlo_instr *in, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* A finding that holds only if the outputs then differ: the value is lifted
 * as what the program computes (not assumed), and a later op may take the
 * difference back. check.c names the first one when every output was
 * related and still does not meet the baseline's. */
void lf_pending(lift_ctx *c, trace_kind kind, const hlo_comp *comp, const hlo_instr *in, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* A reading that is exact but may not be the one the baseline computes (a
 * roll the baseline never takes): lifting goes on with it; where the outputs
 * then meet, it was right, else check.c names the first one as the reason
 * the pair is undecided, with the bug kind it suspects. */
void lf_tentative(lift_ctx *c, trace_kind kind, const hlo_comp *comp, const hlo_instr *in, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
eid lf_node(lift_ctx *c, const hlo_module *m, const hlo_instr *in, const eid *ch, uint32_t n, const int64_t *dims,
            uint8_t origin);
/* A copy of in whose attribute `key`, when it holds n integers, holds
 * ints[0..n) instead (a term's global slice sizes); the attribute list is
 * copied into the arena, in's left as it is. */
hlo_instr lf_with_ints(lift_ctx *c, const hlo_instr *in, int key, const int64_t *ints, uint32_t n);
eid lf_fresh_var(lift_ctx *c, int dt, const int64_t *dims, uint32_t rank);
void lf_global_dims(const lift_ctx *c, const view *v, const shape *local, int64_t *out);
/* Whether the baseline broadcasts some value adding one dim of n copies
 * right before a dim of extent len, operand dims on both sides of it (the
 * broadcast of jnp.repeat(x, n, axis)). */
bool lf_baseline_repeats(lift_ctx *c, int64_t n, int64_t len);
/* Whether the baseline slices some dim of extent len into a piece of size
 * starting at a multiple of size (x[4k:4k + 4]: one group of a batch it
 * computes group by group), or reshapes it into [len / size, size] groups. */
bool lf_baseline_cuts(lift_ctx *c, int64_t len, int64_t size);
void lf_axes_words(strbuf *b, const lift_ctx *c, uint32_t mask);
view_dim lf_axes_dim(const lift_ctx *c, uint32_t mask);
int64_t lf_dim_block(const lift_ctx *c, const view_dim *vd, int64_t r); /* device r's block along vd (major first) */
uint32_t lf_block_offsets(const lift_ctx *c, const double *vals, uint32_t count, int64_t size, int64_t *base, int64_t *parts,
                          view_dim *axes);
bool lf_same_sharding(const view *a, const view *b);
bool lf_pw_instr(lstate *s, lval *out);
/* Whether index values x (LV_PW) are, on every device, t itself for t in
 * [0, n) (lift_index.c). */
bool lf_pw_identity_on(const lift_ctx *c, const lval *x, int64_t n);
/* Source src is proved to lie in [0, n) (no assumption): what its domain
 * decides (a take's bounds check) holds (lift_index.c). */
void lf_proven_domain(lift_ctx *c, eid src, int64_t n);
/* The baseline's masked rows (a take's bounds-checked lookup, its plain term
 * kept: no domain was assumed while the baseline was lifted) are noted
 * (lf_note_baseline_mask); after the distributed walk, each whose source a
 * domain is still assumed or proved for and that is the row for every index
 * value of it has its plain term joined with the row (lf_settle_domains):
 * the same precondition the distributed program's rows rest on. */
void lf_note_baseline_mask(lift_ctx *c, const lval *v);
void lf_settle_domains(lift_ctx *c);
bool lf_index_as_term(lift_ctx *c, lval *x);
/* x (LV_PW, or an LV_MASK every device resolves) as its plain term; false
 * for any other x or where that fails (lift_index.c). */
bool lf_resolved_as_term(lift_ctx *c, lval *x);
bool lf_mask_resolves(const lift_ctx *c, const lval *m);
bool lf_mask_as_partial(lift_ctx *c, const lval *m, lval *out);
/* Whether class m is convert(t == iota along j) times another value: at
 * most one element along dim j is non-zero (lift_index.c). */
bool lf_onehot_summand(lift_ctx *c, eid m, uint32_t j);
bool lf_win_instr(lstate *s, lval *out);
/* lf_psub_instr: a collective-permute of a partial sum or of sums of its
 * shares, an add of such sums, or any other op meeting one (lift_psub.c);
 * false when none of these. */
bool lf_psub_instr(lstate *s, lval *out);
/* lf_placed_block: a dynamic-update-slice writing each device's block of a
 * sharded value into zeros at its place, as that value partial over the
 * axes (lift_psub.c); false otherwise. */
bool lf_placed_block(lstate *s, lval *out);
bool lf_win_dynamic_slice_term(lstate *s, uint32_t d, lval *out);
/* The positions of roles a and b (and of spatial dims by digit, in sp) in
 * one part of a convolution's dim_labels (b01f, 01io): the number of
 * spatial dims, or -1 when the part does not read (lift_reduce.c). */
int lf_conv_roles(const char *p, size_t n, char a, char b, int *pa, int *pb, int *sp);
bool lf_win_update(lstate *s, lval *out);
/* A window with zeros at the edges of its term (a halo exchange's) as a
 * window of the zero-padded term without zeros, the baseline's padding
 * preferred (only it, with baseline_only) (lift_win.c). */
bool lf_win_padded(lift_ctx *c, const lval *x, bool baseline_only, lval *out);   /* a dynamic-update-slice assembling a window (lift_win.c) */
/* lf_win_rearranged: a window whose pieces are whole runs, the same on the
 * devices that hold the same block along some mesh axes its view does not
 * use, but not in block order (a ring's rotation, a pipeline stage
 * handoff), as the term of those runs side by side in block order, sharded
 * over those axes (the fewest that explain it), when the baseline computes
 * that term too (jnp.roll). Taken only where the window is used by an op
 * no window transfer function takes, or is an output: windows stay exact
 * per device as long as they can. false (x unchanged) otherwise. */
bool lf_win_rearranged(lift_ctx *c, lval *x);
void lf_win_assume(lift_ctx *c, const hlo_instr *xi, lval *x);
int64_t *lf_permute_sources(lift_ctx *c, const hlo_instr *in, const char **bad);
bool lf_axes_of_blocks(const lift_ctx *c, const int64_t *b, int64_t parts, view_dim *out);
bool lf_permute_view(const lift_ctx *c, const view *v, const int64_t *from, view *out);
void lf_zmask_after(lstate *s, lval *v);
/* Whether every value of class cls is known to be 0 (a splat of a zero too
 * large to fold included; lift_zmask.c). */
bool lf_class_is_zero(lift_ctx *c, eid cls);
/* Whether instruction i of comp is >= 0 everywhere by how it is computed
 * (exponentials, squares, absolute values, non-negative constants, and
 * sums, products, quotients, selections, reductions, layout ops of such). */
bool lf_nonneg(const hlo_module *m, const hlo_comp *comp, uint32_t i);
/* The bound of instruction i's values when they are integers computed
 * exactly (counts), all-reduces over at most ndev devices; -1 otherwise
 * (lift_zmask.c). */
double lf_integral_bound(const hlo_module *m, const hlo_comp *comp, uint32_t i, int64_t ndev);
/* Whether integral shares of dtype from, each at most bound, summed over
 * parts devices, convert to dtype to exactly share by share (lift_zmask.c). */
bool lf_counts_convert_exactly(int from, int to, double bound, int64_t parts);
/* Whether every value of class cls is known to be x: the known values of the
 * class, or of the operand of a broadcast, reshape or convert it is (a splat
 * too large to fold; lift_zmask.c). */
bool lf_class_is_splat(lift_ctx *c, eid cls, double x);
/* The one value every element of class cls holds, from its known values or
 * those of the operand of the broadcasts and reshapes it is (no convert: a
 * rounding would be lost); false when there is no such value. */
bool lf_class_splat_value(lift_ctx *c, eid cls, double *x);
/* select(p, a, b) of type t (attribute blob attr) with a read where p holds
 * and b where it does not (a select on p inside them is its operand), or b
 * where the select names its own false operand (select(x == k, k, x),
 * select(x <= 0, 0, x) for x >= 0 by construction); EID_NONE when neither
 * changes anything (lift_guard.c). */
/* Class x, constant along the dims `along` marks by its form, rebuilt at
 * dims g (those dims of any size, the others as x's): a splat, an iota
 * along another dim, a broadcast adding them (or of an operand that is so
 * along the dims it lands on), an elementwise op over operands that are (a
 * padding mask compare(iota + offset, n)). Every element of the result
 * along those dims is x's. EID_NONE otherwise; *budget bounds the classes
 * visited, depth the levels (lift_term.c). */
eid lf_resize_constant_dims(lift_ctx *c, eid x, const bool *along, const int64_t *g, uint32_t *budget, int depth);
/* x re-read under want where the two differ only along dims x's term is
 * constant along by its form (lf_resize_constant_dims): dims x holds whole
 * that want cuts (every block of the wider term is the device's copy), or,
 * with narrow, dims of one element per device that want leaves whole
 * (every device's element is the narrower term's). The term is rebuilt at
 * want's global dims; the factor and flags stay. False (x unchanged)
 * otherwise; budget and depth bound the walk (lift.c). */
bool lf_resize_reading(lift_ctx *c, lval *x, const view *want, bool narrow, uint32_t budget, int depth);
eid lf_guarded_select(lift_ctx *c, eid p, eid a, eid b, uint32_t attr, uint32_t t, uint8_t origin);
eid lf_const_term(lift_ctx *c, struct interp_val *v, uint8_t origin);
/* The constant term of type `type` every element of which holds k (rounded
 * to the type): a scalar, or a broadcast of one (lift_scale.c). */
eid lf_splat(lift_ctx *c, uint32_t type, double k); /* EID_NONE for types with no values here (complex) */
/* E-node construction (lift_term.c) beside lf_node: */
uint32_t lf_encode_attrs(lift_ctx *c, const hlo_module *m, const hlo_instr *in); /* in's semantic attributes as a blob */
uint64_t lf_literal_digest(const hlo_literal *l);   /* a literal's values as one word (constant e-nodes) */
struct interp_val *lf_broadcast_values(const struct interp_val *x, const int64_t *bd, uint32_t nb, const int64_t *dims,
                                       uint32_t rank); /* known values broadcast along dims bd, or NULL */
bool lf_reducer_identity(lift_ctx *c, const hlo_module *m, const hlo_instr *in,
                         eid init);                /* init is the identity of reduce in's reducer */
/* The first node of class cls with op and n children (those in *ch when ch is
 * not NULL), or EID_NONE. */
eid lf_class_node(lift_ctx *c, eid cls, uint16_t op, uint32_t n, const eid **ch);
/* Class x as a zero pad of *y read through at most one slice: element i of
 * x along dim k is element at[k] + i·step[k] of y there, or one of the pad's
 * zeros where that falls outside y (exactly so where !interior[k]; a pad with
 * interior padding along k places y's elements otherwise). False when x has
 * no such node. */
bool lf_zero_pad_of(lift_ctx *c, eid x, uint32_t rank, eid *y, int64_t *at, int64_t *step, bool *interior);
int lf_node_concat_dim(const lift_ctx *c, eid node); /* a concatenate node's dim, else -1 */
/* The term of type `type` every element of which holds the one value every
 * element of constant x holds (EID_NONE: x is no such constant); lift_scale.c. */
eid lf_scale_respread(lift_ctx *c, const lval *x, uint32_t type);
/* k with class x = multiply(b, broadcast(k)) (a factor put back) or x = b
 * (k = 1); 0 when x is neither (lift_scale.c). */
double lf_multiple_of(lift_ctx *c, eid x, eid b);
/* Constant factors (lift_scale.c): lf_scale_of the factor of x (1 when none);
 * lf_scale_take relates multiply/divide by a uniform constant as a factor on
 * the other operand (false: not that case); lf_scale_plan takes the operands'
 * factors out when the op is linear in them and returns the result's (else
 * puts them back into the terms and returns 1); lf_scale_apply gives the
 * result that factor; lf_unscale puts x's factor back into its term. */
double lf_scale_of(const lval *x);
/* SCALIFY_DEBUG: descends baseline term x and distributed term y to the first
 * node where they part and prints both there (depth dbg_depth()). */
void lf_debug_diff(lift_ctx *c, eid x, eid y);
double lf_scale_base_factor(lift_ctx *c, eid x); /* the factor the baseline put into term x (1: none) */
bool lf_scale_take(lstate *s, lval *out);
double lf_scale_plan(lstate *s);
void lf_scale_apply(lstate *s, lval *v, double f);
void lf_unscale(lift_ctx *c, lval *x);
/* k when class x is base times a broadcast scalar constant k (a factor put
 * back into base: lf_unscale), else 0. */
double lf_scale_put_back(lift_ctx *c, eid x, eid base);
/* x as a factor put back into a term: *base and k (x = base times k), or x
 * itself and 1 when no factor was put back into it. */
double lf_scale_split(lift_ctx *c, eid x, eid *base);
/* lf_pad_forms: v, just lifted from a reduce or dot over a value masked to a
 * box (GSPMD's padding of an uneven dim), also gets the form over that box
 * sliced (lift_pad.c). */
void lf_pad_forms(lstate *s, const lval *v);
/* lf_moment_forms: v, just lifted from a subtract a·Σx² − a²·(Σx)² with
 * a = 1/N, also gets the form a·Σ(x − a·Σx)² (lift_moment.c). */
void lf_moment_forms(lstate *s, const lval *v);
/* lf_scale_like: x, another reading of operand value `was` that an op's
 * lf_scale_plan already turned into `now`, given the same treatment (its
 * factor taken out, or put back into its term); false when x's factor is not
 * was's or `now` is neither. */
bool lf_scale_like(lift_ctx *c, const lval *was, const lval *now, lval *x);
/* lf_scale_differ: v just lifted (with result factor `factor`) keeps an
 * operand's proved difference (lval.diff) when the op provably does, relift
 * lifting the op again over the operand's other term; else v has none. */
void lf_scale_differ(lstate *s, lval *v, double factor, lval (*relift)(lstate *));
/* Records that x differs from the term corr wherever (the data it computes
 * is non-zero): a proved difference, told at the outputs it reaches through
 * ops that keep one (check.c), as a finding of `kind` at `in`. */
void lf_prove_difference(lift_ctx *c, lval *x, trace_kind kind, const hlo_comp *comp, const hlo_instr *in, char *message,
                         eid corr);
/* lift_table.c: an elementwise op over values sharded as `want` and one
 * table every device computes alike from constants (local positions): the
 * op over the table tiled along the sharded dims, in *out (exact); when the
 * baseline has the op over the table of global positions and the two differ,
 * a proved difference (an offset left out). False when not of that form. */
bool lf_tiled_table(lstate *s, const view *want, lval *out);
/* The values of instruction i of s's computation when it is a chain of
 * ops over constants and iotas (elementwise ops, broadcasts, unit
 * reshapes) small enough to fold, at its own dims; NULL otherwise (the
 * caller frees them). */
struct interp_val *lf_chain_values(lstate *s, uint32_t i);
/* Values a tiled to dims g, a multiple of a's (element e: a's element at e's
 * index modulo a's dims); NULL when too large. */
struct interp_val *lf_tiled_values(const struct interp_val *a, const int64_t *g);
/* lf_scale_cancel: v, just lifted from add/subtract(p, q) with q = k2·b and
 * p = a + k1·b (factors put back), is also a + (k1 ± k2)·b, so a multiple
 * added before a sum over n devices (n·b) and taken back after it meets
 * the baseline's a + b. Linear algebra over the reals, as the rules. */
void lf_scale_cancel(lstate *s, const lval *v);
void lf_scale_forget(lval *x); /* x and its tuple elements keep no proved difference */
/* lf_scale_track notes where v's factor came from (for blame);
 * lf_factor_divergence: x (put back from the value `was`) meets no baseline
 * class; when the baseline put another factor into the same term, says so
 * (c->divergence_kind, _note) and gives the op to blame in *at. */
void lf_scale_track(lstate *s, lval *v);
/* lf_scale_base_konst records v, a baseline value computed from constants
 * only: a distributed value of its class (a device's iota plus its offset is
 * data) carries no factor, as the baseline's does not. */
void lf_scale_base_konst(lift_ctx *c, const lval *v);
bool lf_factor_divergence(lift_ctx *c, const hlo_comp *comp, const lval *x, const lval *was, const hlo_instr **at);

void lf_lift_one(lift_ctx *c, const hlo_comp *comp, uint32_t i, lval *vals, const lval *args, const view *inputs,
                 uint32_t ninputs);
void lf_walk_side(lift_ctx *c, bool baseline);
/* Segments and scopes (lift_seg.c). */
uint32_t lf_segment_of(lift_ctx *c, const char *s, size_t n);
void lf_account(lift_ctx *c, const hlo_instr *in);       /* positions, time and e-nodes of an instruction about to be lifted */
void lf_account_tree(lift_ctx *c, const hlo_instr *in);
void lf_charge_segment(lift_ctx *c, double t, uint32_t nn);
void lf_charge_build(lift_ctx *c, uint32_t next);        /* baseline build time to the segment left; next entered */
void lf_record_scope(lift_ctx *c, const hlo_instr *in, eid cls); /* the last baseline class of in's scope */
void lf_kvals_after_unions(lift_ctx *c);

lf_memo_side *lf_memo_enter(lift_ctx *c, const hlo_comp *comp, lval *vals);
uint32_t lf_memo_run_at(const lf_memo_side *ms, uint32_t i);
uint32_t lf_memo_lift_run(lift_ctx *c, lf_memo_side *ms, uint32_t r, const hlo_comp *comp, lval *vals, const lval *args,
                          const view *inputs, uint32_t ninputs);
void lf_memo_leave(lift_ctx *c, lf_memo_side *ms);
void lf_memo_free(lift_ctx *c);
/* After the baseline's walk: keeps, on their own, the values of the
 * baseline's entry computation the memo reads later (none when it is off
 * or futile); returns whether nothing else reads that walk's values. */
bool lf_memo_release_base(lift_ctx *c);

/* What lifting may leave in the context: a walk under one reading (of a
 * loop carry, of a partial sum) that is then undone goes back to it.
 * (E-nodes it added stay: they are true terms.) */
typedef struct lf_loop_mark {
    uint32_t nfindings, nunsupported, noutside, resynced, ndoms, seg_findings, seg_unsupported, seg_divergent, seg_outside;
    size_t next_loop, assumptions;
    uint64_t lifted, assumed;
    const hlo_instr *first_unsupported, *later_unsupported, *divergence;
    const hlo_comp *first_unsupported_comp, *later_unsupported_comp, *divergence_comp;
    char *unsupported_why, *later_unsupported_why, *divergence_note, *divergence_cause;
    bool unsupported_konst, later_unsupported_konst, divergence_konst, divergence_layout, divergence_resynced;
    trace_kind divergence_kind;
    const char *resync_scope;
    eid divergence_cls;
} lf_loop_mark;
lf_loop_mark lf_loop_mark_take(const lift_ctx *c);      /* the context now, to go back to */
void lf_loop_mark_undo(lift_ctx *c, const lf_loop_mark *m); /* back to the context at m */

/* Shared by the walk (lift.c) and while loops (lift_loop.c); defined in lift.c,
 * lift_term.c, lift_dev.c, lift_reduce.c and lift_layout.c. */
lval lf_lift_comp(lift_ctx *c, const hlo_comp *comp, const lval *args, const view *inputs,
                  uint32_t ninputs);                        /* lifts a called computation over args (the entry:
                                                             * args NULL, parameter k under inputs[k], or dup
                                                             * when inputs is NULL) */
uint64_t lf_comp_digest(lift_ctx *c, const hlo_module *m, uint32_t ci); /* structural digest of computation ci */
int lf_node_direction(lift_ctx *c, eid node); /* a compare node's direction, eattr.h's 0..5 (EQ when absent); -1 unknown */
uint64_t lf_reducer_digest(int red);  /* that digest of a computation recognised as reducer red (RED_SUM, ...) */
void lf_lse_forms(lstate *s, const lval *v);  /* log Σ exp(x - m) + m as log Σ exp(x) (lift_moment.c) */
void lf_sign_forms(lstate *s, const lval *v); /* x >= 0 true for x never negative by its form (lift_moment.c) */
/* select(x < MAX, x + 1, MAX) is x + 1, assumed (lift_moment.c); after index values' plain terms */
bool lf_counter_forms(lstate *s, const lval *v);
/* Whether some baseline value has type `type` (lift.c; false before lift_baseline). */
bool lf_baseline_has_type(const lift_ctx *c, uint32_t type);
void lf_softmax_forms(lstate *s, const lval *v); /* exp(x - m) / Σ exp(x - m) as exp(x) / Σ exp(x) (lift_moment.c) */
/* Notes class stat as a value every device shares made from the partial
 * row maxima `maxima` by another reduction (a pmin or psum of local maxima:
 * finite wherever the rows are), a shift a softmax or logsumexp may take
 * (lift_moment.c). */
void lf_shared_max_noted(lift_ctx *c, eid stat, eid maxima);
void lf_dot_forms(lstate *s, const lval *v);  /* dot(a / broadcast(s), b) as dot(a, b) / broadcast(s) (lift_moment.c) */
/* Device-dependent values (lift_dev.c); lf_dev_uniform and lf_dev_constant,
 * lf_konst_at below. */
lval lf_dev_from_literal(lift_ctx *c, const hlo_instr *in); /* a small integer constant as a device table */
bool lf_dev_instr(lift_ctx *c, const hlo_comp *comp, const hlo_instr *in, const lval *ops,
                  lval *out);                               /* an op over device values, on every device */
/* Whether device value v (its values on ndev devices: 1 for a baseline
 * value) holds one number everywhere, every element on every device. */
bool lf_dev_splat(const lval *v, int64_t ndev);
/* The one value every element of x holds on every device (a splat: zeros,
 * a false flag, a type's largest value), as a double: device values all
 * alike, or a replicated term of a splat class; false otherwise. A baseline
 * value (base) holds its device values for one device (lift_dev.c). */
bool lf_lval_splat(lift_ctx *c, const lval *x, bool base, double *v);
lval lf_splat_term(lift_ctx *c, const hlo_instr *in, const lval *v,
                   const view *w);                          /* that number as the constant under w */
lval lf_tiled_term(lift_ctx *c, const hlo_instr *in, const lval *v,
                   const view *w);                          /* a uniform table as its tiles under w, or unknown */
bool lf_dev_uniform(const lift_ctx *c, const lval *v);      /* a LV_DEV value equal on every device */
eid lf_dev_constant(lift_ctx *c, const hlo_instr *in, const lval *v); /* that uniform value as a constant term */
bool lf_same_dim(const view_dim *a, const view_dim *b);     /* two view dims shard alike */
eid lf_konst_at(lift_ctx *c, const hlo_comp *comp, const lval *vals, uint32_t i, const view *w,
                int depth);                                 /* a constant-only instruction as the term under w */
bool lf_layout_to_term(lift_ctx *c, const lval *x, const shape *local, bool reshaped,
                       lval *out);                          /* an all-to-all layout read back as a viewed term */
lval lf_loop_baseline(lift_ctx *c, const hlo_comp *comp, const hlo_instr *in,
                      const lval *vals);                    /* a baseline while loop (lift_loop.c) */
lval lf_loop_distributed(lift_ctx *c, const hlo_comp *comp, const hlo_instr *in,
                         const lval *vals);                 /* a distributed while loop, by induction */
lval lf_lift_conditional(lift_ctx *c, const hlo_comp *comp, const hlo_instr *in,
                         const lval *vals);                 /* the choice among its branches (lift_cond.c) */

/* All-to-all layouts and gather/scatter readings (lift_layout.c); each
 * returns false (no reading) or sets *out. */
bool lf_scatter_reading(lstate *s, lval *out);       /* scatter into own blocks, or a blocked sum */
/* A scatter's dims (false for shapes it cannot map): udim_of_idx[d] the
 * update dim of index dim d (-1 for the index vector dim), udim_of_op[d] the
 * update dim of operand window dim d (-1 for inserted and batching dims);
 * arrays of VIEW_MAX_RANK (lift_layout.c). */
bool lf_scatter_dims(const hlo_comp *comp, const hlo_instr *in, int64_t *udim_of_idx, int64_t *udim_of_op);
bool lf_iota_block(lstate *s, lval *out);            /* add(iota, block offset): a global iota's block */
/* v, just lifted, as a pick (a gather; a one-hot product summed) or a put (a scatter-add into zeros; a
 * one-hot product): noted, and made one class with one of the other kind doing the same (lift_index.c) */
void lf_pick_forms(lstate *s, const lval *v);
/* an iota through converts, copies, broadcasts, unit reshapes: its dim (-1: none); g: the chain at the global
 * dims of x's view gv (a longer iota, sharded along its dim) */
int lf_iota_chain(lift_ctx *c, const hlo_comp *comp, const hlo_instr *x, const view *gv, eid *g);
bool lf_gather_index_values(lstate *s, lval *out);   /* collectives moving index values */
bool lf_move_mask(lstate *s, lval *out);             /* element-moving ops over a masked row */
bool lf_settle_mask(lift_ctx *c, const shape *local, lval *m); /* a layout-carried mask as plain views */
bool lf_layout_op(lstate *s, lval *out);             /* reshape / transpose of a layout */
lval lf_lift_all_to_all(lstate *s);                  /* all-to-all: blocks of one dim to another */
bool lf_gather_views(lstate *s, lval *out);          /* gather under the views of its operands */
bool lf_only_scatter_indices(const lstate *s);       /* s's value is used only as scatter indices */
void lf_uniform_dev_as_term(lstate *s, uint32_t o);  /* operand o, equal on every device, as a term */

/* Collectives and partial sums (lift_coll.c); lf_lift_all_gather and
 * lf_blocks_moved below. */
lval lf_lift_all_reduce(lstate *s);                  /* all-reduce: partial over its groups' axes → complete */
lval lf_lift_reduce_scatter(lstate *s);              /* reduce-scatter: partial → sharded along its dim */
bool lf_picked_on_some_devices(lstate *s, lval *out); /* select(p, x, 0), p per device: a partial sum of k·x */
/* x where picked[d] (one flag per device), zeros elsewhere: a partial sum of k·x */
bool lf_picked_partial(lift_ctx *c, const uint8_t *picked, const lval *x, const hlo_instr *at, lval *out);
/* The value of instruction i of comp on every device (one per device; free
 * with lf_device_values_free) when it is computed from constants, iotas and
 * the partition id alone and small; else NULL. */
struct interp_val **lf_device_values(lift_ctx *c, const hlo_comp *comp, uint32_t i);
void lf_device_values_free(lift_ctx *c, struct interp_val **v);
bool lf_select_padding_zeros(lstate *s, lval *out);  /* select(p, x, 0), x zero padding where p is false: x */
/* the sum all-reduce over `partial` in's value reaches through layout ops
 * (and, with arith, through sums and products with constants) */
const hlo_instr *lf_summed_later(lift_ctx *c, const hlo_comp *comp, const hlo_instr *in, uint8_t partial, bool arith);
void lf_copies_into_partial_sums(lstate *s);         /* complete operands of an add to partial sums, as copies */
bool lf_short_reduction(lstate *s, const char *why); /* blames the sum that left an operand partial (reported) */
void lf_track_short(lstate *s, lval *v);             /* notes which sum collective left v partial */
/* reduce(x, identity) over dims dd (nd of them) with collective s's reducer
 * (its to_apply, ta; a sum from 0, a max from -inf, a min from +inf): the
 * result's local shape rs, global dims gdims (EID_NONE: another reducer). */
eid lf_sum_reduce_term(lstate *s, eid x, const int64_t *dd, uint32_t nd, const shape *rs, const int64_t *gdims,
                       const hlo_attr *ta);
bool lf_stack_only_reduced(const hlo_comp *comp, const hlo_module *m, uint32_t i, uint32_t d,
                           int red);                 /* all-gather i of partial values used only reduced over d */

/* Dot and reduce (lift_reduce.c). */
lval lf_lift_dot(lstate *s);
lval lf_lift_convolution(lstate *s);
lval lf_lift_reduce(lstate *s);
/* Gathered partial values (lift_reduce.c): value i of comp is an all-gather
 * along *d over *axes of a value partial over them (*x). */
bool lf_gathered_partials(lstate *s, uint32_t i, int *axes, uint32_t *d, const lval **x);

/* instr_reducer with and / or of predicates read as min / max (the same on
 * {0, 1}), so partial predicates combine whichever of the two is written. */
static inline int lf_reducer(const hlo_module *m, const hlo_instr *in) {
    int r = instr_reducer(m, in);
    if (in->shape.dtype == DT_PRED) r = r == RED_AND ? RED_MIN : r == RED_OR ? RED_MAX : r;
    return r;
}

/* Selecting reduces (lift_argmax.c). */
enum { SEL_NONE = 0, SEL_ARGMAX, SEL_ARGMIN };
int lf_select_kind(const hlo_module *m, const hlo_instr *in);    /* a 4-operand reduce's reducer: argmax, argmin or none */
int lf_select_red(const hlo_module *m, const hlo_instr *in, uint32_t o); /* the partial stack operand o completes */
lval lf_lift_reduce_tuple(lstate *s);                /* a variadic reduce */
bool lf_arg_offset(lstate *s, lval *out);            /* add(positions local to a block, the block's offset) */
bool lf_owner_test(lstate *s);                       /* eq(partial max, its complete value): unknown, for a select */
bool lf_owner_select(lstate *s, lval *out);         /* select(that eq, positions, fill): partial(min) positions */
bool lf_takes_along(const hlo_instr *g, uint32_t d, uint32_t rank); /* gather g is take_along_axis along d */
/* A reduce-window's window, per dim: size, stride, padding (low, high),
 * lhs and rhs dilation (lift_win.c). */
typedef struct win_attr {
    int64_t size[VIEW_MAX_RANK], stride[VIEW_MAX_RANK], pad[2 * VIEW_MAX_RANK], ld[VIEW_MAX_RANK], rd[VIEW_MAX_RANK];
} win_attr;
/* The window of reduce-window in over `rank` dims, each size, stride and
 * dilation at least 1; false when it does not read (lift_win.c). */
bool lf_read_window(const hlo_instr *in, uint32_t rank, win_attr *w);
/* The reduce-window of x (init init, `like`'s reducer) with window w,
 * global result dims dims: the term, or EID_NONE. */
eid lf_window_node(lift_ctx *c, const hlo_instr *like, eid x, eid init, const win_attr *w, const int64_t *dims);

/* Cumulative sums over a sharded dim (lift_scan.c). */
void lf_scan_noted(lift_ctx *c, const hlo_instr *in, eid x, uint32_t dim, int64_t nb, int64_t n, bool reverse, eid init,
                   eid blocked, eid global);         /* a blockwise scan (in) of x whose whole scan is `global` */
bool lf_scan_divergence(lift_ctx *c, eid v);         /* v a blockwise scan of a baseline value: its kind, words */
bool lf_row_select(lstate *s);                       /* select(prefix mask, stack, 0) summed later: no value yet */
bool lf_row_reduce(lstate *s, lval *out);            /* that sum: the stack's prefix sums, a slice per device */
bool lf_row_instr(lstate *s, lval *out);
/* Operand o, a partial max (or min) a reduce made over a sharded dim,
 * as its blocks' maxima: a row (LV_ROW, from_max) of the blockwise
 * reduce, false if it was made otherwise (lift_scan.c). */
bool lf_partial_row(lstate *s, uint32_t o, lval *out);
/* Whether instruction i of s's computation is computed from a value taken as
 * a partial max's blocks' maxima (lf_partial_row): per-device statistics,
 * an online softmax's local sums (lift_scan.c). */
bool lf_after_row_max(const lstate *s, uint32_t i);             /* an op over such slices (LV_ROW) */
bool lf_stack_pick(lstate *s, lval *out);            /* a take from a stack of partial positions at the winner */
bool lf_topk_blocks(lstate *s, lval *out);           /* top_k of rows sharded along: every block's own */
bool lf_topk_stack(lstate *s, lval *t);              /* top_k t of gathered blocks' top k: the rows' */
bool lf_topk_gather(lstate *s, lval *out);           /* the blocks' top positions, offset, gathered */         /* j: a selection's position among a stack (stack_winner) */
void lf_elementwise_unit_partials(lstate *s);        /* partial operands in their unit-dim reading, when theirs */

/* Per-device terms (lift_unroll.c): the instruction's value on every device
 * as a term, from its operands' (LV_DEVT, or a replicated term where all
 * are equal); false where some operand has none. */
bool lf_unroll_instr(lstate *s, lval *out);
/* Whether an op no view relates reads a device's own block of one of a
 * stacked value, squeezed (a pipeline stage's layer): where per-device terms
 * are tried (lift.c). */
bool lf_unroll_wanted(const lstate *s);
/* Instruction i's value (comp, vals) as per-device terms read up the graph
 * from the instructions that made it; false where some value has none. */
bool lf_unroll_value(lift_ctx *c, const hlo_comp *comp, const lval *vals, uint32_t i, lval *out);
/* Whether x is a device's block of one of a stacked value, squeezed. */
bool lf_unroll_stacked(lift_ctx *c, const lval *x);
/* pad(x, 0) along dim d alone, lo before and hi after (lift_win.c). */
eid lf_zero_pad(lift_ctx *c, eid x, uint32_t d, int64_t lo, int64_t hi);

/* Per-device groups (lift_group.c): rows (LV_ROW, .group) of a computation
 * each device does on its own blocks, which the baseline does per group. */
bool lf_group_instr(lstate *s, lval *out);            /* an op over group rows, or the diagonal blocks reduced; false
                                                       * (rows settled) when it has no row form */
bool lf_group_partial(lstate *s, lval *out);          /* a partial sum used whole: the op over every device's share */
bool lf_group_settle(lift_ctx *c, const shape *local, lval *x); /* a group row as a plain view (unknown: none) */
void lf_group_forms(lstate *s, const lval *v);        /* an all-reduce of shares: also the reduce of their rows */

/* Element-moving ops (lift_shape.c): the transfer functions of their opcodes. */
lval lf_lift_broadcast(lstate *s);
bool lf_broadcast_adds(const hlo_instr *b, uint32_t d);  /* b a broadcast, d a dim it adds (lift_shape.c) */
lval lf_lift_reverse(lstate *s);
lval lf_lift_transpose(lstate *s);
lval lf_lift_reshape(lstate *s);                     /* reshape and bitcast */
lval lf_lift_slice(lstate *s);
lval lf_lift_concatenate(lstate *s);
lval lf_lift_dynamic_slice(lstate *s);
lval lf_lift_dynamic_update_slice(lstate *s);        /* unknown when offsets differ per device */
/* The start along one dim of a dynamic-slice or dynamic-update-slice whose
 * offset operand o is one known number on every device (a constant, a
 * loop's counter walked iteration by iteration), clamped to [0, whole -
 * size] as XLA clamps; false when it is not known. */
bool lf_known_start(lift_ctx *c, const lval *o, int64_t whole, int64_t size, int64_t *start);
bool lf_lift_pad(lstate *s, lval *out);               /* false: not a view-keeping pad */
/* The op of s over x and a replicated scalar k (a pad value, an init), x's view. */
lval lf_with_scalar(lstate *s, const lval *x, const lval *k);

/* lift.c helpers the collectives, shapes and dots use (the elementwise
 * operand re-readings among them). */
/* Operand o re-read as want where its pieces allow (a broadcast, a
 * constant, a replicated value tiled); true when it is want's view now. */
bool lf_review_operand(lstate *s, uint32_t o, const view *want);
/* s, a select whose predicate is known (lf_select_known, a bounds check
 * constant over the domain), picked operand `picked`: the select as a term
 * over its operands' plain terms joined with picked's class, so that it
 * meets the other program's select where that one could not fold its
 * predicate (positions from an iota). Only where every operand is a plain
 * term under picked's view; nothing otherwise. */
void lf_select_union(lstate *s, const lval *picked);
/* Index arithmetic (or a masked row) that no device offsets and every
 * device holds whole (a mask of positions, a position embedding's rows) made
 * its plain term, in place (for the reviews); whether it was one. */
bool lf_plain_of_index(lval *x);
void lf_review_operands(lstate *s, const view *want); /* operands constant along dims want shards, read under it */
bool lf_review_broadcast(lstate *s, uint32_t o, const view *want); /* operand o, a broadcast, re-viewed as want */
bool lf_konst_review(lstate *s, uint32_t o, const view *want);     /* operand o, constant-only, read under want */
/* Operand o, reshape(broadcast(x)) merging an operand dim of one element
 * per device with a dim the broadcast adds (jnp.repeat of GQA's kv heads
 * under GSPMD, kv heads over tp's major sub-axis), read with the merged
 * dim sharded over more axes: the added dim takes the rest. */
bool lf_review_merged_broadcast(lstate *s, uint32_t o, const view *want);
bool lf_unit_dim_reread(lstate *s, uint32_t side, uint32_t to,
                        const view_dim *want);      /* operand `side` with want's axes moved to its dim `to` */
/* The operand an op returns unchanged: x + 0 with the zero a known constant
 * (an accumulator's first step), max(x, -inf) and min(x, +inf) with the
 * infinity a known constant of every element (jax.nn.softmax and logsumexp
 * take a max with -inf that a hand-written shard_map leaves out). NULL
 * otherwise. */
const lval *lf_identity_operand(lstate *s);
/* The operand a select picks whatever its predicate's values (both the same
 * value) or by a predicate known at every element (all true or all false);
 * NULL otherwise. */
const lval *lf_select_known(lstate *s);
/* A fresh variable (assumed content) under view v: lf_assumed_known where the
 * view is certain (a finding gone past, an all-reduce over every axis),
 * lf_assumed_term where it is a guess (no transfer function related the op:
 * lval.guessed, so that no finding rests on it). */
lval lf_assumed_term(lift_ctx *c, const hlo_instr *in, view v);
lval lf_assumed_known(lift_ctx *c, const hlo_instr *in, view v);
void lf_describe_operands(strbuf *b, const lift_ctx *c, const lval *ops,
                          uint32_t n);                       /* "operand 0 is shard(1,tp), ..." */
bool lf_unit_move(lift_ctx *c, const lval *x, const shape *sh, uint32_t from, uint32_t to,
                  lval *out);                                /* a sharded unit dim's axes read on dim `to` */
/* x's sharding of its local unit dim d read on dim d + 1 (a stack's
 * expand_dims, the reading that put the next dim's axes on the unit dim);
 * false when d carries none or the move does not apply. */
bool lf_unit_move_next(lift_ctx *c, const lval *x, const shape *sh, uint32_t d, lval *out);

/* Helpers the layouts use (lift.c, lift_term.c, lift_mesh.c, lift_coll.c). */
void lf_kval_set(lift_ctx *c, eid cls, interp_val *v);       /* records the known values of class cls */
bool lf_fold_size_ok(const int64_t *dims, uint32_t rank);    /* small enough to fold as constants */
bool lf_is_index(const lval *x);                             /* an index value: LV_PW, LV_MASK or LV_IVEC */
lval lf_lift_instr(lstate *s);                               /* the per-opcode dispatch of the walk */
/* A collective's groups as mesh axes (bitmask); ordered, the position in a
 * group is the index over them: in mesh order, or with order non-NULL in
 * any order, written there (major first, axes of size 1 left out). */
int lf_collective_axes(lstate *s, bool ordered, view_dim *order);
bool lf_blocks_moved(lstate *s, const lval *x, uint32_t e, uint32_t d, bool bound,
                     lval *out);                             /* blocks of dim e moved to dim d */
lval lf_lift_all_gather(lstate *s);                          /* all-gather */

#endif
