/* lift — relation lifting from the distributed program to baseline terms
 * (DESIGN §5 "Lifting"). The code: lift.c (the walk, the dispatch,
 * elementwise ops), lift_term.c (e-nodes, constant folding), lift_dev.c
 * (device-dependent values), lift_mesh.c (replica groups, sub-axes),
 * lift_shape.c, lift_reduce.c, lift_argmax.c and lift_coll.c (transfer
 * functions by family), lift_loop.c (while loops), lift_layout.c (all-to-all layouts),
 * lift_memo.c (the segment memo), lift_scale.c (constant factors),
 * lift_index.c (LV_PW / LV_MASK), lift_win.c (LV_WIN), lift_psub.c
 * (LV_PSUB), lift_zmask.c (zero masks), lift_group.c (per-device groups,
 * LV_ROW), lift_unroll.c (per-device terms, LV_DEVT), lift_guard.c (a select
 * read under its own predicate); lift_int.h is what they share.
 *
 * The checker first adds the whole baseline to one e-graph (lift_baseline),
 * then walks the distributed program in order (lift_distributed). Every
 * distributed value gets an lval:
 *   - LV_TERM: a baseline-side term (an e-class) and the view relating it to the
 *     local value on every device. `assumed` marks a term whose content is a
 *     fresh variable standing for something the transfer functions could not
 *     relate (its view is still known): nothing built on it can be verified,
 *     but view violations downstream are still real findings.
 *   - LV_DEV: a small device-dependent value (partition-id arithmetic, offset
 *     tables), evaluated concretely on every device (DESIGN "Device-dependent
 *     scalars"): dev[d * count + k].
 *   - LV_TUPLE: elements.
 *   - LV_PW: an integer value that is, per device, a piecewise-affine function
 *     (pwidx.h) of one integer source term t at the same positions (`pos`, the
 *     class of t reshaped/broadcast to this value's shape): index arithmetic.
 *   - LV_MASK: the result of gathering rows of a table with such an index: per
 *     device and per range of t, the row itself (HIT: the term `hit`), zero, or
 *     something else (JUNK). A sum over devices with exactly one HIT and zeros
 *     elsewhere, for every t in [0, domain), is the gathered row: the
 *     vocab-parallel embedding. Relating it assumes the index source holds
 *     values in [0, domain); that assumption is recorded. Met by an op that
 *     does not take masks, such a mask is that row partial (sum) over the
 *     axes it sums over, and judged like any partial value.
 *   - LV_IVEC: index vectors (a gather index with several components along
 *     dim `vdim`, an embedding's token id beside a constant column): n
 *     components in elems, component j the value's slice at j along vdim,
 *     each an LV_PW (of the value's shape with vdim 1) or an LV_DEV holding
 *     one number per device (the same at every position).
 *   - LV_LAYOUT, LV_WIN: transient per-device arrangements (an all-to-all's
 *     result; a local slice of a sharded dim or a collective-permute's
 *     result), below; only layout ops, slices, concatenates, dynamic-slices
 *     and collective-permutes take them, until they are plain views again.
 *   - LV_PSUB: on every device, the sum of the shares of some devices of a
 *     partial sum (a ring or butterfly all-reduce written with
 *     collective-permutes and adds, half done), below; only collective-permutes
 *     and adds take it, until every device holds a whole group's sum.
 *   - LV_ROW: a term E of which every device holds the slice at its block
 *     along dim `vdim` (v is E's view, vdim sharded in blocks of one; the
 *     local value lacks that dim): the sum of the stacked blocks' totals
 *     before the device's, or the blocks' maxima of a partial max
 *     (from_max; lift_scan.c), until an op that meets it with a sharded
 *     term spreads it over the device's block of that dim; or (.group) the
 *     slices of a computation each device does on its own blocks, batched
 *     over the blocks as jax.vmap writes it (lift_group.c).
 *   - LV_DEVT: on a small mesh, device d's value is exactly the term
 *     elems[d].cls (n = the device count; each elem an LV_TERM, dup): what
 *     no view relates (a pipeline stage's own layer, a value kept on one
 *     device), until it settles into a view (lift_unroll.c).
 *   - LV_UNKNOWN: neither view nor content known (after an unsupported op).
 * A value that is a constant times a term carries the constant beside it
 * (`scale`) through the ops linear in it, and both sides put it back into the
 * term at the same places (lift_scale.c): a pmean's 1/n meets a local mean's
 * n/B as the baseline's 1/B.
 * `call`s are inlined, copies and sharding custom-calls are identities.
 * `while` loops are related by induction over the carry (lift_loop.c), and
 * layers equal to one already related are taken from a memo on both sides
 * (lift_memo.c; segrun.h; off with no_memo).
 *
 * Constant folding: a term whose operands all have known values (literals,
 * uniform device values, and what is computed from them) is evaluated with the
 * interpreter (interp_eval_instr) and replaced by the literal of its values, on
 * both sides alike, so a baseline that XLA folded (RoPE tables of a decode step)
 * meets a distributed program that computes the same values. Broadcasts keep
 * their structure (their values are still known), iota is never folded (its
 * sharded pieces are related structurally, iota_block), and results above
 * LIFT_FOLD_MAX elements are left as terms.
 *
 * Transfer functions that meet an inconsistency report a finding (kind,
 * instruction, words) through the callback context and continue with an
 * LV_UNKNOWN or assumed value, so one run reports the first divergence and
 * more. Everything lives in the lift context's arena, but for the entry
 * computations' values (mappings of their own: lift.c vals_for).
 */
#ifndef SCALIFY_LIFT_H
#define SCALIFY_LIFT_H

#include "egraph.h"
#include "pwidx.h"
#include "graph.h"
#include "trace_enums.h"
#include "view.h"

#define LIFT_FOLD_MAX 65536

enum { LV_UNKNOWN = 0, LV_TERM, LV_DEV, LV_TUPLE, LV_PW, LV_MASK, LV_LAYOUT, LV_WIN, LV_IVEC, LV_PSUB, LV_ROW, LV_DEVT };

/* Meshes of at most this many devices may carry per-device terms (LV_DEVT). */
#define LIFT_UNROLL_MAX_DEV 16

/* LV_LAYOUT: a local tensor whose dims are runs of atomic factors of the global
 * dims (after an all-to-all, or an all-gather along a dim other than the
 * sharded one, before the reshapes that bring it back to a plain view). Atom k is part `part` (0 major, 1 minor) of global dim `gdim`. */
#define LAYOUT_MAX_ATOMS 16
typedef struct layout_atom {
    uint8_t gdim, part;
    int64_t size;
} layout_atom;

typedef struct lift_layout {
    uint32_t grank;
    int64_t gdims[VIEW_MAX_RANK];      /* global dims of the term */
    int64_t split[VIEW_MAX_RANK];      /* size of the major part (1: not split) */
    int8_t bound[VIEW_MAX_RANK];       /* major part bound to the axes: -1 none */
    uint8_t axes[VIEW_MAX_RANK][MESH_MAX_AXES], naxes[VIEW_MAX_RANK];
    uint32_t ndims;                    /* local dims */
    uint8_t natoms[VIEW_MAX_RANK];     /* atoms per local dim */
    layout_atom atoms[VIEW_MAX_RANK][4];
    const hlo_instr *from;             /* the collective that rearranged the value */
    const hlo_comp *from_comp;
} lift_layout;

/* LV_WIN: a value whose content along one dim differs per device in a way no
 * view says (a local slice of a sharded dim, a collective-permute's result):
 * on every device r, local element l along `dim` is element idx[r·len + l]
 * of the term along that dim, or zero where that is -1; every other dim is as
 * the lval's view says (that view leaves `dim` unsharded and is never
 * partial). Kept only until it is a plain view again (the same element runs
 * in blocks over mesh axes): then a slice of the term. */
typedef struct lift_win {
    uint32_t dim;
    int64_t len;                       /* local length along dim */
    int64_t *idx;                      /* ndev × len */
    const hlo_instr *from;             /* where the pieces began (blamed when they never settle) */
    const hlo_comp *from_comp;
    /* Summed (lift_win.c, row-wise computation): the value is no window but
     * device r's sum of g(i) over the rows i = idx[r·len + l], where the sum
     * of g over all `total` rows is the term; g is named by key (the operands
     * and dims of the sum that made it). */
    bool summed;
    int64_t total;
    eid key[2];
    uint32_t key_dims;
} lift_win;

/* Tags of LV_MASK pieces: what a device holds for index values in a piece. */
enum { TAG_ZERO = 0, TAG_HIT = 1, TAG_JUNK = 2 };

typedef struct lval {
    /* Fields by size (flags as bits, one-byte, four-byte, eight-byte), so
     * that little padding sits between them: a flat program holds one lval
     * per instruction (304 bytes). */
    uint8_t kind;
    bool assumed : 1;
    bool konst : 1;               /* computed from constants only (no parameter) */
    bool rearranged : 1;          /* only a layout op's rearrangement of baseline values (see divergence) */
    bool ambiguous : 1;           /* the view is one of several readings of a reshape */
    bool shares_apart : 1;        /* a partial sum of which at most one device's share is non-zero at
                                   * each element, none negative (a one-hot pick of non-negative
                                   * values summed over a sharded dim): its partial max as well */
    bool partial_unsure : 1;      /* its partial axes come from reducing a unit dim that carries
                                   * them in only one reading of an ambiguous reshape (another
                                   * reading leaves the value sharded, not partial) */
    bool merged_unit : 1;         /* a dim's sharding comes from a sharded unit dim a reshape
                                   * merged into it, one reading of several (lift_shape.c
                                   * unit_dim_joined): summed over, it is no share of a sum */
    uint8_t vdim;                 /* LV_IVEC: the dim holding the components; LV_ROW: E's dim the
                                   * devices hold one slice of */
    bool in_domain : 1;           /* LV_MASK: the index values are known to lie there (iota) */
    bool conj : 1;                /* LV_PW of pred: also ANDed with the plain predicate term `hit`
                                   * (a bag's length mask beside a row's ownership test), of the
                                   * value's global dims and view */
    bool rescaled : 1;            /* a baseline term times a constant factor put back into it */
    bool from_max : 1;            /* LV_ROW: the blocks' maxima (or minima) of a partial max (lf_partial_row) */
    bool group : 1;               /* LV_ROW: rows of a per-device group computation (lift_group.c),
                                   * not a scan's sums (lift_scan.c) */
    bool guessed : 1;             /* assumed where no transfer function related the op (lf_assumed_term):
                                   * its view is a guess, so no finding rests on it or on what is
                                   * computed from it */
    bool respread : 1;            /* a uniform constant of which the scale plan took a factor out: its
                                   * term holds the new value, its instruction the old one */
    view v;
    eid cls;
    uint32_t count;
    uint32_t n;
    eid pos, hit;                 /* source positions; LV_MASK: the gathered row */
    eid src;                      /* LV_PW / LV_MASK: the source term itself (before shaping) */
    uint32_t diff;                /* distributed: 1 + index in lift_ctx.diffs of a proved difference
                                   * (0: none): the value differs from the term `corr` wherever the
                                   * term its factor was put into is non-zero (lift_scale.c) */
    eid corr;                     /* with diff: the term it would be with the baseline's factor */
    uint32_t pid;                 /* distributed partial sum (LV_TERM): names its per-device values,
                                   * the same through copies, tuples and loop carries, new for every
                                   * op that computes one (0: none; lift_psub.c) */
    double *dev;
    struct lval *elems;
    pw_fn *pw;                    /* LV_PW / LV_MASK: one function per device */
    lift_layout *lay;             /* LV_LAYOUT */
    lift_win *win;                /* LV_WIN */
    struct lift_psub *psub;       /* LV_PSUB */
    struct lval *carry;           /* LV_MASK whose rows and positions are being rearranged (an
                                   * all-to-all's layout): carry[0] the rows (for hit), carry[1]
                                   * the positions (for pos), moved alike; v, hit, pos unused */
    int64_t domain;               /* LV_MASK: valid index values [0, domain); -1: the extent
                                   * assumed for src elsewhere (a mask that only tests ids) */
    const struct lift_zmask *zm;  /* LV_TERM / LV_LAYOUT: a zero mask (below), or NULL */
    double scale;                 /* LV_TERM / LV_LAYOUT / LV_WIN: the value is this constant
                                   * times what the term and view say (0: 1; lift_scale.c) */
    const hlo_instr *factor_at;   /* distributed: the last op that changed the factor */
    const hlo_instr *summed_at;   /* distributed: the last sum collective upstream */
    const hlo_instr *short_at;    /* distributed: a sum collective after which the value stayed
                                   * partial (over the axes it still is), or NULL */
    const hlo_comp *short_comp;
} lval;

/* LV_PSUB (lift_psub.c): `base` is a partial sum (sum) over the mesh axes
 * `axes` (its group ≤ 64 devices), the values named `pid` on every device; device d holds the sum of the shares (base's local
 * values) of the devices of its group whose positions (mixed radix over
 * `axes`, major first) are the bits of sub[d]. `at`: the last op that made
 * it (blamed when the sum is never complete). */
typedef struct lift_psub {
    struct lval base;
    const hlo_instr *src, *at;         /* src: where the partial sum was first moved (for words) */
    const hlo_comp *src_comp, *at_comp;
    uint32_t pid;                      /* the partial sum's per-device values (lval.pid) */
    uint32_t axes;
    uint64_t *sub;                     /* ndev */
    /* Blocks placed into zeros (base from lf_placed_block): device e's share
     * is its block along dim pdim (of plen elements, over the axes paxes,
     * exactly `axes`) at its place, zeros elsewhere; pdim -1: not so. */
    int pdim;
    int64_t plen;
    view_dim paxes;
    /* Chunks (a ring reduce-scatter): on device d, only chunk chunk[d]
     * (elements [chunk·clen, +clen)) of dim cdim of those sums, taken by a
     * dynamic-slice (-1: no shares there, zeros); cdim -1: whole values. */
    int cdim;
    int64_t clen;
    int64_t *chunk;                    /* ndev */
} lift_psub;

/* A zero mask (a dense expert dispatch: every (expert, token) row is sent, the
 * rows not routed to the expert as zeros): a claim about the value's global
 * term. `pred`: the value is src(i) > 0, where i takes src's dim k from the
 * value's dim dims[k] (broadcast along the other dims). Otherwise the value
 * equals the term `full` wherever src(i) > 0, and with `zero` it is 0
 * elsewhere. src is known to be non-negative. A product with src itself that
 * pairs every src dim with its mask dim (the combine, sum_e w[t,e]·y[e,t]) is
 * then the same product with `full`: where src is 0 the product is 0 either
 * way (DESIGN §5, lift_zmask.c). Rows rearranged after the mask was made
 * (a reverse of the expert dim) are paired with another expert's weights
 * there: a layout-mismatch finding at the op that moved them. */
typedef struct lift_zmask {
    eid src, full;
    eid made;                     /* src when the mask was made (before `moved`) */
    const hlo_instr *moved;       /* the last op that rearranged the mask's rows, or NULL */
    bool pred, zero;
    uint8_t rank;                 /* src's rank */
    int8_t dims[VIEW_MAX_RANK];
} lift_zmask;

/* No finding kind (a use undecided without a suspect, a divergence that
 * suggests none). */
#define LF_NO_KIND KIND_COUNT

typedef struct lift_finding {
    trace_kind kind;              /* KIND_MISSING_ALL_REDUCE, ... (trace_enums.h) */
    const hlo_comp *comp;         /* distributed site */
    const hlo_instr *in;
    char *message;                /* one line (arena) */
} lift_finding;

/* A segment: the instructions of one top-level op_name scope ("embed",
 * "layers.3", "lm_head") in the entry computation, in order of appearance on
 * the distributed side (DESIGN §6). Each is judged on its own, assuming its
 * inputs relate as lifted (assume-guarantee). */
typedef struct lift_segment {
    const char *name;
    uint32_t dstart, dend;        /* distributed entry instruction range [start, end) */
    uint32_t bstart, bend;        /* baseline entry range of the same scope (0,0: none) */
    uint32_t findings, unsupported, divergent, outside, enodes;
    uint32_t runs, memo_hits;     /* distributed runs (segrun.h) of it; of them taken from the memo */
    int32_t memo_of;              /* the segment whose lifting was reused by the last hit (-1: none) */
    double ms;                    /* lifting its distributed instructions */
    double build_ms;              /* building (or naming, for a memo hit) its baseline instructions */
} lift_segment;

typedef struct lift_memo lift_memo;

/* E-nodes [n0, n1) were added while lifting segment seg. */
typedef struct lift_span {
    uint32_t seg, n0, n1;
} lift_span;

/* A set of pairs of numbers read once from the baseline (lift.c). */
typedef struct lf_pairs {
    int64_t *v; /* 2 words a pair */
    uint32_t n, cap;
    bool read;
} lf_pairs;

typedef struct lift_ctx {
    egraph *g;
    arena *a;
    const hlo_module *base, *dist;
    const mesh *mesh;                     /* the mesh of the side being walked */
    const mesh *dist_mesh;
    const hlo_module *cur;                /* the module being walked */
    uint8_t origin;                       /* EG_BASELINE or EG_LIFTED for new nodes */
    bool baseline_mode;                   /* walking the baseline: one device, all dup */
    bool quiet;                           /* lifting speculatively: no finding, no reason recorded */
    int64_t ndev;
    bool mesh_inferred;                   /* from sharding annotations: group mismatches are undecided */
    /* Set by lifting (0: none): per-device offsets that are blocks of part
     * of mesh axis refine_axis, split as lift_split_mesh_axis(refine_axis,
     * refine_factor) would make them one sub-axis's blocks (several tp
     * ranks sharing a kv head). The views cannot say it on this mesh; the
     * caller may lift again on the refined one. */
    uint32_t refine_axis;
    int64_t refine_factor;
    /* A reshape that puts a sharding on a unit dim followed by others in
     * its group, with no reading the baseline has, takes the unit dim
     * (reshape_defaulted says one did); with reshape_flip set before
     * lifting it takes the first non-unit dim instead (both are true
     * readings: the caller may lift again with the other). */
    bool reshape_defaulted, reshape_flip;
    bool ambiguous_now;                   /* an operand's view is one reading among several */
    bool partial_unsure_now;              /* an operand is partial only in one such reading */
    bool guessed_now;                     /* an operand's view is a guess (lval.guessed) */
    bool konst_operand_now;               /* an operand is computed from constants only */
    lift_finding *findings;
    uint32_t nfindings, capfindings;
    lift_finding pending;                 /* the first finding that holds only if the outputs */
    uint32_t npending;                    /* differ (lf_pending), and how many there were */
    lift_finding tentative;               /* the first reading taken on trust (lf_tentative): the */
    uint32_t ntentative;                  /* reason, if the outputs then do not meet (before the */
    bool tentative_first;                 /* first unsupported op, if it came first) */
    const hlo_instr *first_unsupported;   /* first instruction no rule relates */
    const hlo_comp *first_unsupported_comp;
    char *unsupported_why;
    trace_kind unsupported_kind;          /* the bug kind it suggests should execution differ, or LF_NO_KIND */
    const hlo_instr *silent;              /* first instruction left unknown without a reason although */
    const hlo_comp *silent_comp;          /* its operands were related (named only when an output */
    char *silent_why;                     /* is unrelated and nothing else says why) */
    const hlo_instr *later_unsupported;   /* the first one after a region was resynced */
    const hlo_comp *later_unsupported_comp;
    char *later_unsupported_why;
    bool later_unsupported_konst;         /* an operand of it is constant-only */
    const hlo_instr *divergence;          /* first term that joins no baseline class */
    eid divergence_cls;                   /* its term (EID_NONE for a rearrangement) */
    uint8_t *base_types;                  /* [type]: some baseline class has it (after lift_baseline) */
    size_t nbase_types;
    const hlo_comp *divergence_comp;      /* while its operands all do (or are rearrangements
                                           * of baseline values: then the layout op that hands
                                           * one over; an output that is one) */
    bool divergence_konst, unsupported_konst; /* an operand of that instruction is constant-only */
    bool divergence_layout;               /* it is a layout op handing a rearrangement over */
    trace_kind divergence_kind;           /* a kind the divergence suggests (a factor: lift_scale.c), or LF_NO_KIND */
    char *divergence_note;                /* words on it (arena), or NULL */
    char *divergence_cause;               /* a likely cause of a factor there, as a bug (arena), or NULL:
                                           * said only when the difference is a finding */
    strmap base_factors;                  /* baseline term class -> index in base_factor */
    double *base_factor;                  /* the factor the baseline put back into that term */
    size_t nbase_factors, capbase_factors;
    lift_finding *diffs;                  /* factors that differ, put back where a difference is
                                           * proved (lval.diff): kind, op to blame, words */
    uint32_t ndiffs, capdiffs;
    bool divergence_resynced;             /* found after a region assumed equal to the baseline's */
    uint64_t fresh;                       /* counter for fresh variables */
    uint32_t reduce_forms;                /* lf_node's canonical forms of a reduce in progress (a bound) */
    uint32_t slice_depth;                 /* lf_mk_slice calls in progress (a bound) */
    /* Resynchronisation: the baseline's last value of each op_name scope, so an
     * unrelated region's replicated result can be assumed equal to it. */
    strmap scope_index;
    eid *scope_cls;
    size_t nscopes, capscopes;
    uint32_t resynced;                    /* assumptions of that kind made */
    strbuf assumptions;                   /* preconditions relied on, one per line */
    struct lift_pick *picks;              /* elements picked along a dim (lift_index.c) */
    uint32_t npicks, cappicks;
    struct lf_domain {                    /* sources assumed within [0, size) ... */
        eid src;
        int64_t size;
        bool proven;                      /* ... or proved to be (lf_proven_domain) */
    } *doms;
    uint32_t ndoms, capdoms;
    struct lift_bmask *bmasks;            /* the baseline's masked rows (lf_note_baseline_mask) */
    uint32_t nbmasks, capbmasks;
    struct lift_winner *winners;          /* selections among a stack of partial maxima (lift_argmax.c) */
    uint32_t nwinners, capwinners;
    struct lift_scan *scans;              /* blockwise cumulative sums (lift_scan.c) */
    uint32_t nscans, capscans;
    struct lift_row *rows;                /* prefix sums of stacks held a slice per device (LV_ROW) */
    uint32_t nrows, caprows;
    struct lift_shift *shifts;            /* shared statistics of row maxima (lift_moment.c) */
    const hlo_instr *row_max_at;          /* the first op that took a partial max as its blocks' maxima, */
    const hlo_comp *row_max_comp;         /* one per device (lf_partial_row): named as a suspected */
    char *row_max_why;                    /* missing all-reduce when an output does not meet */
    uint32_t nshifts, capshifts;
    lf_pairs base_splits;                 /* (extent, parts) of every baseline reshape splitting a leading
                                           * dim into [parts, extent / parts] (lift.c baseline_splits) */
    lf_pairs base_repeats;                /* (copies, extent) of every baseline broadcast adding one dim of
                                           * that many copies before a dim of that extent (jnp.repeat) */
    lf_pairs base_cuts;                   /* (extent, size) of every baseline slice taking an aligned piece
                                           * of that size from a dim of that extent (lf_baseline_cuts) */
    const char *resync_scope;             /* the first one */
    uint64_t lifted, assumed;             /* instructions lifted; with assumed content */
    uint64_t opaque;                      /* of those, values of a known view whose content may be
                                           * anything (fresh variables): outputs that meet the
                                           * baseline's do whatever they are */
    uint64_t *digests[2];                 /* per module, per computation (0: not yet) */
    lift_segment *segs;
    uint32_t nsegs, capsegs, cur_seg;
    strmap seg_index; /* segment name -> index into segs */
    const char *last_scope;               /* segment_of's last question (a scope pointer) */
    uint32_t last_scope_seg;              /* and its answer */
    int depth;                            /* call depth while walking (0: entry) */
    const hlo_comp *call_comp;            /* the computation a call is lifting: its root tuple keeps factors */
    const struct lf_call_frame *frames;   /* the calls being lifted, innermost first (lift_table.c reads a
                                           * chain of constants up through their parameters) */
    uint8_t **barrier_only[2];            /* per module, per computation, per instruction: a tuple whose
                                           * users are optimization barriers read only by get-tuple-elements
                                           * (jax.checkpoint's; lift.c) */
    uint32_t built;                       /* baseline instructions built (flattened positions) */
    double acct_t;                        /* per-segment accounting: last instruction's start */
    uint32_t acct_nodes;
    double bacct_t;                       /* the same for building the baseline: the last switch */
    uint32_t bacct_seg;
    lift_span *spans;
    size_t nspans, capspans;
    uint32_t nunsupported, noutside;      /* totals of the segment counters */
    /* Segment memo (DESIGN §6): a distributed run structurally equal to one
     * already lifted cleanly, with inputs related the same way to a baseline run
     * equal to that one's, takes its results from it instead of being lifted. */
    struct lift_loop **loops;             /* the baseline's while loops, in walk order (each in the arena:
                                           * pointers stay valid as walks add more) */
    size_t nloops, caploops, next_loop;
    int loop_depth;                       /* inside a loop body or condition: no segment switches */
    int in_loop_cond;                     /* walking a while loop's condition (nesting count): a partial
                                           * value there decides when a group stops, not an output's value */
    const hlo_comp *test_comp;            /* the body being walked, and per instruction of it whether its */
    const uint8_t *test_only;             /* value only feeds the stopping test (lift_loop.c, loop_walk) */
    uint32_t loop_seg;                    /* baseline: the segment of the loop being walked */
    bool no_memo;                         /* set before lifting to turn it off */
    bool no_account;                      /* building a memoised baseline layer after the fact */
    lift_memo *memo;
    uint32_t memo_runs, memo_hits;        /* distributed runs considered; taken from the memo */
    /* Set before lifting (NULL: never): equality saturation of the e-graph as
     * it stands, which the memo asks for when a clean run's terms meet the
     * baseline's only through rewrites (DESIGN §6); false when it did not run.
     * c->cur_seg is the segment it is run for. */
    bool (*saturate)(struct lift_ctx *c, void *arg);
    void *saturate_arg;
    uint32_t memo_sat_runs, memo_sat_fails; /* saturations run; of them, those that made no representative */
    uint32_t loop_sat_runs;               /* saturations a loop's induction asked for (lift_loop.c) */
    bool sat_light;                       /* the saturation asked for is a light one: a few iterations, few
                                           * new nodes (a loop's induction; deterministic budget) */
    /* Constant folding: the values of e-classes whose term is computed from
     * constants only (indexed by class id; NULL: not known). Owned. */
    struct interp_val **kvals;
    size_t capkvals;
    /* Classes the baseline computes from constants only (indexed by class id
     * as it was then, 1: such a class): lift_scale.c starts no factor there. */
    uint8_t *base_konst;
    size_t capbase_konst;
    strmap folds;                         /* (op, attr, type, children) -> the class folded to */
    strmap chains;                        /* (class, local type) -> 1 + index into chain_vals (0: no
                                           * values): a predicate's values read up its chain once
                                           * (every layer's mask is the same term; lift_table.c) */
    struct interp_val **chain_vals;       /* owned, one reference each */
    uint32_t nchain_vals;
    size_t capchain_vals;
    uint32_t npids;                       /* partial sums named so far (lval.pid) */
    lval **walked;                        /* per distributed computation (by index): its values
                                           * the last time it was walked (arena), or NULL */
    uint32_t **seg_at;                    /* beside walked: the segment each instruction was
                                           * counted to (UINT32_MAX: none) */
    lval *vmap[2];                        /* the entry computations' values when large: mappings
                                           * of their own (lift.c vals_for), 0 baseline, 1 distributed */
    size_t vmap_len[2];
    bool vmap_spare;                      /* vmap[0] read by nothing: the distributed walk's to reuse */
} lift_ctx;

/* A window (LV_WIN) v, a value of comp, used by in (or read as an output)
 * as no plain view of a term: left unrelated, blamed on the op where its
 * pieces began; `where` ends the message ("where mul.3 uses them"). */
void lift_win_unsettled(lift_ctx *c, const hlo_comp *comp, const hlo_instr *in, const lval *v, const char *where);
/* An output o (LV_PSUB) whose expected view is want and baseline class
 * bout: a missing-all-reduce finding where bout is o's partial sum's term,
 * want that term complete over o's axes and no shares make the sums whole;
 * o read as its partial sum where want is partial and every share is
 * counted once; else o is unrelated (lift_psub.c). Other kinds: nothing. */
void lift_psub_at_output(lift_ctx *c, lval *o, const view *want, eid bout);

/* Output o not under the expected view want only along dims its term is
 * constant along by its form (lf_resize_constant_dims): dims o holds whole
 * that want cuts (jnp.full((batch,), s) under out_specs P("dp"): every
 * block of the wider value is the device's copy), or dims of one element
 * per device that want leaves whole (a [n, 1] update read with its unit
 * dim over dp: every device's element is the narrower value's). o is then
 * read as the term rebuilt at want's global dims. Other values: nothing. */
void lift_spread_at_output(lift_ctx *c, lval *o, const view *want);

/* x (LV_DEVT, of local shape `local`) as a term under view want (an
 * output's): the devices' terms glued block by block (lift_unroll.c). False,
 * x unknown, when want does not shard along every axis they vary along;
 * false, x untouched, for other kinds. */
bool lift_unroll_settle(lift_ctx *c, const shape *local, const view *want, lval *x);

/* Output v (its expected view want, the baseline's output class bout) a
 * constant k times the baseline's in that view, k not 1 beyond rounding: a
 * finding (*out) at the op that made the factor (lift_scale.c). */
bool lift_output_multiple(lift_ctx *c, const lval *v, const view *want, eid bout, lift_finding *out);

/* The value distributed instruction i of comp was lifted to the last time
 * its computation was walked (a loop body: its last walk), or NULL when it
 * never was. Valid until lift_done and the arena's end. */
const lval *lift_value_at(const lift_ctx *c, const hlo_comp *comp, uint32_t i);
/* The name of the segment distributed instruction in of comp was counted to
 * when last walked (lift_seg.c: its op_name scope's, or the current one for
 * an instruction without a scope), or NULL. Valid until lift_done. */
const char *lift_segment_at(const lift_ctx *c, const hlo_comp *comp, const hlo_instr *in);
/* A lifted value in words, as a finding's picture shows it: its view for a
 * term ("dup", "shard(1,tp)", "partial(tp,sum)"), else what it is
 * ("device-dependent", "index values", "pieces rearranged", "unrelated"). */
void lift_value_words(strbuf *b, const lval *v, const mesh *m);

void lift_init(lift_ctx *c, egraph *g, arena *a, const hlo_module *base, const hlo_module *dist, const mesh *m);
/* Frees the lifted values and the memo once nothing reads them (after the
 * provenance is kept): lift_value_at says NULL from then on; segments,
 * findings and the e-graph stay. The bulk of a deep program's memory. */
void lift_values_done(lift_ctx *c);
void lift_done(lift_ctx *c);

/* Adds the baseline's entry computation (calls inlined) to the e-graph; the
 * outputs (tuple elements of the root, else the root) are returned in *outs. */
bool lift_baseline(lift_ctx *c, eid **outs, uint32_t *nouts);
/* Lifts the distributed entry computation with parameter k related to
 * baseline parameter k by inputs[k]; returns the root's value. */
lval lift_distributed(lift_ctx *c, const view *inputs, uint32_t ninputs);

/* The number of e-classes each segment's e-nodes fall into now (after unions
 * and rebuilding): out[i] for segment i. */
void lift_segment_classes(lift_ctx *c, uint32_t *out);

/* SCALIFY_DEBUG base=, term=: the two terms' first parting, again (after the
 * final saturation); nothing unless both were named and lifted. */
void lift_debug_rediff(lift_ctx *c);

/* The mesh axes (bitmask) whose device groups are exactly the given replica
 * groups (order inside a group respected when ordered); -1 when none. */
int lift_groups_axes(const lift_ctx *c, const hlo_instr *in, bool ordered);
/* The same with the position in a group the index over the axes in any
 * order, written to *order (major first, axes of size 1 left out). */
int lift_groups_order(const lift_ctx *c, const hlo_instr *in, view_dim *order);

/* Refines rel's mesh where a collective of dist has replica groups that match
 * no set of its axes but would after splitting one axis in two (GSPMD groups
 * over part of an axis, e.g. pairs of neighbours on tp:8): the axis becomes
 * NAME.0 and NAME.1 (major, minor; same device ids) and every view of rel
 * uses both where it used the axis — the same blocks. Meant for meshes
 * inferred from shardings (a declared mesh is the user's word: groups that
 * miss its axes are findings). Returns whether it changed anything. */
bool lift_refine_mesh(relations *rel, const hlo_module *dist);

/* Splits axis a of rel's mesh into NAME.0 (major, size/f) and NAME.1
 * (minor, f), rewriting every view of rel to the same blocks, as
 * lift_refine_mesh does for replica groups (lift_ctx.refine_axis asks for
 * it). False when the mesh has no room or f does not divide the axis. */
bool lift_split_mesh_axis(relations *rel, uint32_t a, int64_t f);

#endif
