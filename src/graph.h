/* graph — the HLO graph IR (DESIGN §4) that every reader produces.
 *
 * A module owns computations; a computation owns its instructions in dependency
 * order (every operand index is smaller than the user's index). Ids are uint32
 * indexes: operands index the computation's instruction array, called
 * computations index the module's computation array. Everything — strings,
 * arrays, attributes — lives in the module's arena and is released by
 * graph_free(); nothing in the IR is freed individually.
 *
 * Attributes are a list of typed values, one per key. Known keys (the X-list
 * below) have a fixed kind; unknown keys are kept as raw text (A_RAW) and never
 * dropped. After graph_finalize_instr() the list is in canonical order (key
 * order, raw ones last in input order) and "default" values (0, false, empty
 * lists) are removed, so the text and protobuf readers produce identical IR for
 * the same module: absence means the default.
 *
 * Readers call graph_finalize() once at the end: it resolves stack frames into
 * source locations, recognises reducers and checks every invariant
 * (graph_check()). A module that fails the check is not returned to users.
 */
#ifndef SCALIFY_GRAPH_H
#define SCALIFY_GRAPH_H

#include <stdbool.h>
#include <stdint.h>

#include "diag.h"
#include "shape.h"
#include "util.h"

/* Limits graph_check enforces, so that every later stage may rely on them:
 * devices a module runs on (header, tile assignments, replica groups), dims
 * of an iota device order ([reshape]T(perm)), and how deep computations call
 * each other (every walk over called computations recurses once per level). */
#define GRAPH_MAX_DEVICES (1 << 20)
#define GRAPH_MAX_IOTA_RANK 64
#define GRAPH_MAX_CALL_DEPTH 200

/* ---- opcodes (XLA's text spellings); OP_UNKNOWN keeps the spelling ---- */
#define HLO_OPS(X) \
    X(ABS, "abs") X(ADD, "add") X(ADD_DEPENDENCY, "add-dependency") \
    X(AFTER_ALL, "after-all") X(ALL_GATHER, "all-gather") \
    X(ALL_GATHER_START, "all-gather-start") X(ALL_GATHER_DONE, "all-gather-done") \
    X(ALL_REDUCE, "all-reduce") X(ALL_REDUCE_START, "all-reduce-start") \
    X(ALL_REDUCE_DONE, "all-reduce-done") X(ALL_TO_ALL, "all-to-all") \
    X(AND, "and") X(ASYNC_START, "async-start") X(ASYNC_UPDATE, "async-update") \
    X(ASYNC_DONE, "async-done") X(ATAN2, "atan2") \
    X(BATCH_NORM_GRAD, "batch-norm-grad") X(BATCH_NORM_INFERENCE, "batch-norm-inference") \
    X(BATCH_NORM_TRAINING, "batch-norm-training") X(BITCAST, "bitcast") \
    X(BITCAST_CONVERT, "bitcast-convert") X(BROADCAST, "broadcast") X(CALL, "call") \
    X(CBRT, "cbrt") X(CEIL, "ceil") X(CHOLESKY, "cholesky") X(CLAMP, "clamp") \
    X(CLZ, "count-leading-zeros") X(COLLECTIVE_BROADCAST, "collective-broadcast") \
    X(COLLECTIVE_PERMUTE, "collective-permute") \
    X(COLLECTIVE_PERMUTE_START, "collective-permute-start") \
    X(COLLECTIVE_PERMUTE_DONE, "collective-permute-done") X(COMPARE, "compare") \
    X(COMPLEX, "complex") X(CONCATENATE, "concatenate") X(CONDITIONAL, "conditional") \
    X(CONSTANT, "constant") X(CONVERT, "convert") X(CONVOLUTION, "convolution") \
    X(COPY, "copy") X(COPY_START, "copy-start") X(COPY_DONE, "copy-done") \
    X(COSINE, "cosine") X(CUSTOM_CALL, "custom-call") X(DIVIDE, "divide") \
    X(DOMAIN, "domain") X(DOT, "dot") X(DYNAMIC_RESHAPE, "dynamic-reshape") \
    X(DYNAMIC_SLICE, "dynamic-slice") X(DYNAMIC_UPDATE_SLICE, "dynamic-update-slice") \
    X(ERF, "erf") X(EXP, "exponential") X(EXPM1, "exponential-minus-one") X(FFT, "fft") \
    X(FLOOR, "floor") X(FUSION, "fusion") X(GATHER, "gather") \
    X(GET_DIMENSION_SIZE, "get-dimension-size") X(GET_TUPLE_ELEMENT, "get-tuple-element") \
    X(IMAG, "imag") X(INFEED, "infeed") X(IOTA, "iota") X(IS_FINITE, "is-finite") \
    X(LOG, "log") X(LOG1P, "log-plus-one") X(LOGISTIC, "logistic") X(MAP, "map") \
    X(MAXIMUM, "maximum") X(MINIMUM, "minimum") X(MULTIPLY, "multiply") \
    X(NEGATE, "negate") X(NOT, "not") X(OPT_BARRIER, "opt-barrier") X(OR, "or") \
    X(OUTFEED, "outfeed") X(PAD, "pad") X(PARAMETER, "parameter") \
    X(PARTITION_ID, "partition-id") X(POPCNT, "popcnt") X(POWER, "power") \
    X(RAGGED_ALL_TO_ALL, "ragged-all-to-all") X(RAGGED_DOT, "ragged-dot") \
    X(REAL, "real") X(RECV, "recv") X(RECV_DONE, "recv-done") X(REDUCE, "reduce") \
    X(REDUCE_PRECISION, "reduce-precision") X(REDUCE_SCATTER, "reduce-scatter") \
    X(REDUCE_WINDOW, "reduce-window") X(REMAINDER, "remainder") \
    X(REPLICA_ID, "replica-id") X(RESHAPE, "reshape") X(REVERSE, "reverse") \
    X(RNG, "rng") X(RNG_BIT_GENERATOR, "rng-bit-generator") \
    X(RNG_GET_AND_UPDATE_STATE, "rng-get-and-update-state") \
    X(ROUND_AFZ, "round-nearest-afz") X(ROUND_EVEN, "round-nearest-even") \
    X(RSQRT, "rsqrt") X(SCATTER, "scatter") X(SELECT, "select") \
    X(SELECT_AND_SCATTER, "select-and-scatter") X(SEND, "send") X(SEND_DONE, "send-done") \
    X(SET_DIMENSION_SIZE, "set-dimension-size") X(SHIFT_LEFT, "shift-left") \
    X(SHIFT_RIGHT_ARITHMETIC, "shift-right-arithmetic") \
    X(SHIFT_RIGHT_LOGICAL, "shift-right-logical") X(SIGN, "sign") X(SINE, "sine") \
    X(SLICE, "slice") X(SORT, "sort") X(SQRT, "sqrt") \
    X(STOCHASTIC_CONVERT, "stochastic-convert") X(SUBTRACT, "subtract") X(TAN, "tan") \
    X(TANH, "tanh") X(TOPK, "topk") X(TRANSPOSE, "transpose") \
    X(TRIANGULAR_SOLVE, "triangular-solve") X(TUPLE, "tuple") X(WHILE, "while") \
    X(XOR, "xor")

typedef enum hlo_op {
    OP_UNKNOWN = 0,
#define X(id, s) OP_##id,
    HLO_OPS(X)
#undef X
    OP_COUNT
} hlo_op;

const char *hlo_op_name(int op);               /* text spelling; "?" for OP_UNKNOWN */
int hlo_op_from_name(const char *s, size_t n); /* OP_UNKNOWN when not listed */
bool hlo_op_is_collective(int op);             /* all-reduce, all-gather, ... */

/* ---- attribute kinds and keys ---- */
typedef enum attr_kind {
    K_INT,       /* i */
    K_BOOL,      /* i (0/1) */
    K_INTS,      /* ints[n] */
    K_IDENT,     /* str: a bare word (direction=LT, kind=kLoop) */
    K_IDENTS,    /* strs[n]: {default,high} */
    K_STRING,    /* str: a quoted string */
    K_BACKEND,   /* str: backend_config, JSON object text or a string */
    K_COMP,      /* ints[0]: a computation index */
    K_COMPS,     /* ints[n]: computation indexes */
    K_INSTRS,    /* ints[n]: instruction indexes in the same computation */
    K_SLICES,    /* ints[3n]: start, limit, stride per dimension */
    K_PADDING,   /* ints[3n]: low, high, interior per dimension */
    K_GROUPS,    /* groups: replica groups, list or iota form */
    K_LISTS,     /* groups (list form): source_target_pairs */
    K_SHARDING,  /* sharding */
    K_KV,        /* strs[2n]: frontend_attributes key, value pairs */
    K_LITERAL,   /* lit: constant payload */
    K_RAW,       /* str: unparsed value text; raw_key names the key */
} attr_kind;

/* Canonical attribute order is this list's order (the printer follows it). */
#define HLO_ATTRS(X) \
    X(PARAMETER_NUMBER, "parameter_number", K_INT) \
    X(LITERAL, "literal", K_LITERAL) \
    X(INDEX, "index", K_INT) \
    X(IOTA_DIMENSION, "iota_dimension", K_INT) \
    X(KIND, "kind", K_IDENT) \
    X(CALLS, "calls", K_COMPS) \
    X(CHANNEL_ID, "channel_id", K_INT) \
    X(REPLICA_GROUPS, "replica_groups", K_GROUPS) \
    X(SOURCE_TARGET_PAIRS, "source_target_pairs", K_LISTS) \
    X(DIMENSIONS, "dimensions", K_INTS) \
    X(SPLIT_DIMENSION, "split_dimension", K_INT) \
    X(CONSTRAIN_LAYOUT, "constrain_layout", K_BOOL) \
    X(USE_GLOBAL_DEVICE_IDS, "use_global_device_ids", K_BOOL) \
    X(SLICE, "slice", K_SLICES) \
    X(DYNAMIC_SLICE_SIZES, "dynamic_slice_sizes", K_INTS) \
    X(PADDING, "padding", K_PADDING) \
    X(LHS_BATCH_DIMS, "lhs_batch_dims", K_INTS) \
    X(LHS_CONTRACTING_DIMS, "lhs_contracting_dims", K_INTS) \
    X(RHS_BATCH_DIMS, "rhs_batch_dims", K_INTS) \
    X(RHS_CONTRACTING_DIMS, "rhs_contracting_dims", K_INTS) \
    X(OPERAND_PRECISION, "operand_precision", K_IDENTS) \
    X(ALGORITHM, "algorithm", K_IDENT) \
    X(OFFSET_DIMS, "offset_dims", K_INTS) \
    X(COLLAPSED_SLICE_DIMS, "collapsed_slice_dims", K_INTS) \
    X(START_INDEX_MAP, "start_index_map", K_INTS) \
    X(OPERAND_BATCHING_DIMS, "operand_batching_dims", K_INTS) \
    X(START_INDICES_BATCHING_DIMS, "start_indices_batching_dims", K_INTS) \
    X(UPDATE_WINDOW_DIMS, "update_window_dims", K_INTS) \
    X(INSERTED_WINDOW_DIMS, "inserted_window_dims", K_INTS) \
    X(SCATTER_DIMS_TO_OPERAND_DIMS, "scatter_dims_to_operand_dims", K_INTS) \
    X(INPUT_BATCHING_DIMS, "input_batching_dims", K_INTS) \
    X(SCATTER_INDICES_BATCHING_DIMS, "scatter_indices_batching_dims", K_INTS) \
    X(INDEX_VECTOR_DIM, "index_vector_dim", K_INT) \
    X(SLICE_SIZES, "slice_sizes", K_INTS) \
    X(INDICES_ARE_SORTED, "indices_are_sorted", K_BOOL) \
    X(UNIQUE_INDICES, "unique_indices", K_BOOL) \
    X(DIRECTION, "direction", K_IDENT) \
    X(COMPARE_TYPE, "type", K_IDENT) \
    X(IS_STABLE, "is_stable", K_BOOL) \
    X(K, "k", K_INT) \
    X(LARGEST, "largest", K_BOOL) \
    X(EXPONENT_BITS, "exponent_bits", K_INT) \
    X(MANTISSA_BITS, "mantissa_bits", K_INT) \
    X(DISTRIBUTION, "distribution", K_IDENT) \
    X(FFT_TYPE, "fft_type", K_IDENT) \
    X(FFT_LENGTH, "fft_length", K_INTS) \
    X(WINDOW, "window", K_RAW) \
    X(DIM_LABELS, "dim_labels", K_IDENT) \
    X(FEATURE_GROUP_COUNT, "feature_group_count", K_INT) \
    X(BATCH_GROUP_COUNT, "batch_group_count", K_INT) \
    X(TO_APPLY, "to_apply", K_COMP) \
    X(CONDITION, "condition", K_COMP) \
    X(BODY, "body", K_COMP) \
    X(TRUE_COMPUTATION, "true_computation", K_COMP) \
    X(FALSE_COMPUTATION, "false_computation", K_COMP) \
    X(BRANCH_COMPUTATIONS, "branch_computations", K_COMPS) \
    X(SELECT, "select", K_COMP) \
    X(SCATTER, "scatter", K_COMP) \
    X(CUSTOM_CALL_TARGET, "custom_call_target", K_STRING) \
    X(CALLED_COMPUTATIONS, "called_computations", K_COMPS) \
    X(CUSTOM_CALL_HAS_SIDE_EFFECT, "custom_call_has_side_effect", K_BOOL) \
    X(API_VERSION, "api_version", K_IDENT) \
    X(SHARDING, "sharding", K_SHARDING) \
    X(CONTROL_PREDECESSORS, "control-predecessors", K_INSTRS) \
    X(FRONTEND_ATTRIBUTES, "frontend_attributes", K_KV) \
    X(BACKEND_CONFIG, "backend_config", K_BACKEND)

typedef enum attr_key {
#define X(id, s, k) A_##id,
    HLO_ATTRS(X)
#undef X
    A_RAW,  /* unknown key: raw_key + str */
    A_COUNT
} attr_key;

const char *attr_key_name(int key);
int attr_key_from_name(const char *s, size_t n);  /* A_RAW when unknown */
attr_kind attr_key_kind(int key);

/* One selected axis of a mesh-axes replica group: the whole axis (size 0), or
 * the sub-axis 'name':(pre)size — Shardy's: the axis of size n split into
 * [pre, size, n / (pre·size)] (major first), its middle factor: coordinate
 * (c / (n / (pre·size))) % size of that axis ('tp':(2)2 of tp=4 is its minor
 * half, 'tp':(1)2 its major half). */
typedef struct mesh_axis_ref {
    uint32_t axis;
    int64_t pre, size;
} mesh_axis_ref;

/* Replica groups / source-target pairs, in one of three forms.
 * List: ngroups lists, group g is ids[start[g] .. start[g+1]).
 * Iota ([G,S]<=[reshape]T(perm)): device ids 0..prod(reshape)-1 reshaped,
 *   transposed by perm, and read as G groups of S.
 * Mesh (mesh['a'=4,'b'=2], device_ids=(...) {'a'}): the devices laid out on a
 *   mesh (in device_ids order, default 0..n-1); a group is the devices that agree
 *   on every coordinate except the selected axes, ordered by those axes. */
typedef struct hlo_groups {
    bool iota, mesh;
    uint32_t ngroups;
    uint32_t *start;      /* ngroups + 1 entries (list form) */
    int64_t *ids;
    int64_t group_size;   /* iota form */
    int64_t *reshape, *perm;
    uint32_t nreshape, nperm;
    /* mesh form */
    uint32_t naxes, nsel, ndevice_ids;
    const char **axis_names;
    int64_t *axis_sizes;
    mesh_axis_ref *sel;
    int64_t *device_ids;            /* explicit order, or NULL */
    int64_t *dev_reshape, *dev_perm; /* iota order ([dims]T(perm)), or NULL */
    uint32_t ndev_reshape, ndev_perm;
} hlo_groups;

/* Expands iota and mesh groups into list form (arena-allocated) so callers see
 * one representation; a list is returned as is. An inconsistent description
 * expands to zero groups. */
void groups_expand(const hlo_groups *g, arena *a, hlo_groups *out);
/* Whether g expands to at least one group: an iota or mesh description this
 * reader cannot expand is a limitation to say, not a program's mistake. */
bool groups_expandable(const hlo_groups *g);

/* The ids 0..prod(reshape)-1 reshaped and transposed by perm (identity when
 * nperm is 0), flattened row-major into out (prod(reshape) entries). */
void iota_tile_ids(const int64_t *reshape, uint32_t nreshape, const int64_t *perm, uint32_t nperm,
                   int64_t *out);

/* OpSharding types, numbered as in the protobuf (HLO.md); SH_RAW is ours:
 * a form we keep as text (Shardy mesh syntax, anything unrecognised). */
enum { SH_REPLICATED = 0, SH_MAXIMAL = 1, SH_TUPLE = 2, SH_OTHER = 3, SH_MANUAL = 4,
       SH_UNKNOWN = 5, SH_UNREDUCED = 6, SH_RAW = 100 };

typedef struct hlo_sharding {
    int type;
    bool replicate_last;          /* last_tile_dim_replicate */
    int64_t *tile_dims;           /* tile assignment shape */
    uint32_t ntile;
    int64_t *devices;             /* explicit device list, or NULL in iota form */
    uint32_t ndevices;
    int64_t *reshape, *perm;      /* iota form: <=[reshape]T(perm) */
    uint32_t nreshape, nperm;
    int *last_tile_dims;          /* SH_* per trailing subgroup dim */
    uint32_t nlast;
    struct hlo_sharding *tuple;   /* SH_TUPLE */
    uint32_t ntuple;
    const char *raw;              /* SH_RAW: the text between the braces */
} hlo_sharding;

/* A constant's payload. Values are stored as doubles for floating types (rounded
 * to the element type) and int64 for integer and pred types. */
typedef struct hlo_literal {
    int dtype;
    bool elided;      /* the dump printed {...}: no values */
    int64_t count;
    double *f;
    int64_t *i;
    const char *raw;  /* a form kept as text (tuples, complex); NULL otherwise */
} hlo_literal;

typedef struct hlo_attr {
    uint16_t key;                 /* attr_key */
    uint16_t kind;                /* attr_kind */
    uint32_t n;
    union {
        int64_t i;
        int64_t *ints;
        const char *str;
        const char **strs;
        hlo_groups *groups;
        hlo_sharding *sharding;
        hlo_literal *lit;
    } v;
    const char *raw_key;          /* A_RAW only */
} hlo_attr;

/* Source metadata but its op_name (hlo_instr.op_name: nearly every
 * instruction has its own, while the rest repeats: instructions whose
 * metadata agree on it share one hlo_meta, graph_share_meta). Strings are
 * interned in the module. src_* are resolved by graph_finalize: from
 * source_file/line when given, else from the stack frame. */
typedef struct hlo_meta {
    const char *op_type, *source_file;
    const char *extra;            /* other metadata fields, raw text */
    const char *src_file;         /* resolved; NULL when unknown */
    int32_t source_line, source_end_line, source_column, source_end_column;
    int32_t stack_frame_id;
    int32_t src_line, src_col;
} hlo_meta;

typedef struct hlo_instr {
    const char *name;
    const char *opname;           /* spelling as read (interned) */
    uint16_t op;                  /* hlo_op */
    uint16_t nattrs;
    uint32_t noperands;
    shape shape;
    uint32_t *operands;
    hlo_attr *attrs;
    hlo_meta *meta;               /* NULL when the input gave no metadata; shared */
    const char *op_name;          /* metadata op_name; NULL when none */
    uint32_t line, col;           /* position in a text input; 0 otherwise */
    /* The first component of op_name after any jit(...)/ prefix
     * ("layers.3"), not NUL-terminated; nscope 0 when none. Set by
     * graph_finalize_instr (segments and the memo look it up per instruction);
     * instructions finalised one after another with the same scope share the
     * pointer, so equal pointers are a quick yes (unequal ones prove nothing). */
    const char *scope;
    uint32_t nscope;
} hlo_instr;

/* Reducer kinds recognised from to_apply computations. */
typedef enum reducer {
    RED_NONE = 0, RED_SUM, RED_PROD, RED_MAX, RED_MIN, RED_AND, RED_OR, RED_XOR,
    RED_ARG /* the position element of a selecting pair (lift_argmax.c); no reducer computation is one */
} reducer;
const char *reducer_name(int r);

typedef struct hlo_comp {
    const char *name;
    hlo_instr *instrs;
    uint32_t ninstrs;
    uint32_t root;
    uint32_t *params;             /* instruction index of parameter k */
    uint32_t nparams;
    bool is_entry;                /* written as ENTRY (or chosen as the entry) */
    uint8_t reducer;              /* RED_* when it is a scalar binary reducer */
    uint32_t line, col;
} hlo_comp;

typedef struct hlo_file_loc {
    int32_t file_name_id, function_name_id, line, column, end_line, end_column;
} hlo_file_loc;

typedef struct hlo_frame {
    int32_t file_location_id, parent_frame_id;  /* protobuf values (1-based; 0 = none) */
} hlo_frame;

typedef struct hlo_module {
    arena arena;
    arena strs;                   /* names and op_names, packed (graph_strndup) */
    strmap interned;              /* string pool; keys live in the arena */
    const char *last_scope;       /* graph_finalize_instr: the previous scope */
    uint32_t last_nscope;
    strmap metas;                 /* graph_share_meta's, until graph_finalize */
    hlo_meta *last_meta;
    const char *name;
    const char *source_path;      /* file it was read from */
    const char *format;           /* "text", "HloModuleProto", "HloProto", "HloSnapshot" */
    hlo_comp *comps;
    uint32_t ncomps;
    uint32_t entry;
    hlo_attr *attrs;              /* header attributes (text only), A_RAW */
    uint32_t nattrs;
    const char **file_names, **function_names;
    uint32_t nfile_names, nfunction_names;
    hlo_file_loc *file_locs;
    uint32_t nfile_locs;
    hlo_frame *frames;
    uint32_t nframes;
    /* The partitioner's record of the entry's interface (protobuf dumps only:
     * HloModuleProto spmd_parameters_shardings / spmd_output_sharding): how
     * each global parameter and the global result are split over the
     * devices. NULL / 0 when the module does not say. */
    hlo_sharding *spmd_params;
    uint32_t nspmd_params;
    hlo_sharding *spmd_output;
} hlo_module;

hlo_module *graph_new(void);
void graph_free(hlo_module *m);
/* Appends the shortest decimal that reads back to v as a value of element
 * type dt (a complex type: of its parts' type): nan, -nan, inf, -inf as
 * XLA prints them. */
void graph_put_float(strbuf *b, int dt, double v);
/* A complex literal's text (nested braces of (re, im)) with every number
 * written as graph_put_float writes it, so that the text and protobuf forms
 * of one module carry the same text. */
const char *graph_complex_literal(hlo_module *m, int dt, const char *s, size_t n);
/* Interns s[0..n) in the module: equal strings share one pointer. */
const char *graph_intern(hlo_module *m, const char *s, size_t n);
/* A copy of s[0..n) in the module: for the many strings nearly every
 * instruction has its own of (names), packed without alignment. */
const char *graph_strndup(hlo_module *m, const char *s, size_t n);
/* For strings that are many and mostly distinct but often repeat the previous
 * one (op_names: an intern table would cost more than it saves): *last when
 * it equals s[0..n), else a copy in the module, which becomes *last. */
const char *graph_copy_repeat(hlo_module *m, const char *s, size_t n, const char **last);

/* The module's hlo_meta equal to md (a copy the first time; md's padding
 * zeroed, as memset leaves it: metas are compared as bytes), for a reader
 * until graph_finalize, which resolves their locations in place. */
hlo_meta *graph_share_meta(hlo_module *m, const hlo_meta *md);

/* Sorts attributes canonically and drops default-valued ones (see top);
 * graph_finalize_instr also sets the scope. Both leave a finalised
 * instruction as it is. */
void graph_finalize_instr(hlo_module *m, hlo_instr *in);
void graph_finalize_attrs(hlo_instr *in);
/* A reader's memory of attribute lists: per opcode, the last one it kept. */
typedef struct attr_cache {
    const hlo_attr *last[OP_COUNT];
    uint16_t nlast[OP_COUNT];
} attr_cache;
/* The n attributes in scratch (reordered) become in's list, finalised
 * (graph_finalize_attrs): the cache's last list of in's opcode when they
 * equal it (a deep program's dots repeat a few lists), else a copy in m
 * that becomes the last. Never shared: lists with a literal (not worth
 * comparing) or computation or instruction indexes (a reader fixes those
 * up later, and tests renumber them). */
void graph_share_attrs(hlo_module *m, hlo_instr *in, hlo_attr *scratch, size_t n, attr_cache *cache);
/* Resolves locations and reducers, then runs graph_check; returns the number of
 * problems found (each reported to d), 0 when the module is valid. */
int graph_finalize(hlo_module *m, diag *d);
/* For binary input: where a problem of instruction instr of computation comp
 * is (either UINT32_MAX when the problem is the computation's or the
 * module's): returns its byte offset and writes its field path to field. */
typedef size_t (*graph_where_fn)(void *ctx, uint32_t comp, uint32_t instr, char *field, size_t nfield);
/* graph_finalize reporting problems of a module without text positions
 * through diag_binary at where's offsets. */
int graph_finalize_at(hlo_module *m, diag *d, graph_where_fn where, void *ctx);
/* Invariants: operands precede users, called computations exist, do not
 * form a cycle and nest at most GRAPH_MAX_CALL_DEPTH deep, shapes valid, roots
 * and parameters consistent; per opcode (one table in graph.c, after XLA's
 * opcode arities and verifier): the operand count, the computations it must
 * name and their parameter counts; dimension numbers in range; iota and mesh
 * device orders are permutations; tile assignments list each device once and
 * fit the module's device count. Returns the number of violations, each
 * reported to d (may be NULL). A module that passes may be walked by every
 * later stage without further structural checks. */
int graph_check(const hlo_module *m, diag *d);

/* The operand count graph_check allows op (max -1: no upper bound; further
 * forms, such as reduce's even count, are checked too); false for an opcode
 * the table does not list. */
bool graph_op_operands(int op, int *min, int *max);
/* Whether op works element by element: every operand has the result's dims
 * (select's predicate and clamp's bounds may be scalars). */
bool graph_op_elementwise(int op);

const hlo_attr *instr_attr(const hlo_instr *in, int key);
/* Integer attribute or dflt; list attribute (NULL and *n = 0 when absent). */
int64_t instr_int(const hlo_instr *in, int key, int64_t dflt);
const int64_t *instr_ints(const hlo_instr *in, int key, uint32_t *n);
const char *instr_str(const hlo_instr *in, int key);
/* The computation attribute `key` names (to_apply, calls, body, condition:
 * the first of a list), as an index into m->comps, or UINT32_MAX when absent
 * or out of range. */
uint32_t instr_called(const hlo_module *m, const hlo_instr *in, int key);
/* A custom call that only annotates its one operand (a sharding, a shard_map
 * boundary, a host placement): its value is the operand's. */
bool instr_is_identity_custom_call(const hlo_instr *in);
/* The value of frontend attribute `key` (frontend_attributes={key=value}), or
 * NULL. */
const char *instr_frontend_attr(const hlo_instr *in, const char *key);
/* An integer field `key = N` of a typed-FFI custom call's backend_config (the
 * MLIR dictionary jax writes: "{diag = 85 : ui8, side = 76 : ui8}", LAPACK's
 * option letters as character codes); dflt when absent. */
int64_t instr_backend_int(const hlo_instr *in, const char *key, int64_t dflt);
/* The k-th computation attribute key of `in` names (to_apply, body, a
 * conditional's branch k), or NULL. */
const hlo_comp *instr_callee(const hlo_module *m, const hlo_instr *in, int key, uint32_t k);
/* Reduction of an instruction's to_apply computation (RED_NONE when none). */
int instr_reducer(const hlo_module *m, const hlo_instr *in);
/* The whole op_name of its metadata without the "jit(...)/" prefix GSPMD
 * modules carry; NULL when it has none. */
const char *instr_op_scope(const hlo_instr *in);
/* Whether x is zeros written into the program: a literal of zeros, through
 * broadcasts, reshapes, converts and copies in comp (not a value that
 * happens to be zero, such as a loop carry's first value). */
bool instr_is_zero_literal(const hlo_comp *comp, const hlo_instr *x);
/* Whether value i of comp is a constant, or a broadcast of one. */
bool instr_is_constant(const hlo_comp *comp, uint32_t i);

const hlo_comp *graph_entry(const hlo_module *m);
/* Devices the module runs on: num_partitions × replica_count from the header
 * when present, else 1 + the largest device id in shardings and replica groups. */
int64_t graph_num_devices(const hlo_module *m);
/* Whether the module states its device count at all (a protobuf module has no
 * header; one without shardings or collectives says nothing). */
bool graph_devices_stated(const hlo_module *m);
/* Replicas the module runs on: replica_count from the header, else 1. */
int64_t graph_num_replicas(const hlo_module *m);

/* How a collective's replica groups name devices (XLA's GetCollectiveOpGroupMode):
 * replica ids (no channel_id), partition ids (a channel_id on all-to-all,
 * collective-permute, collective-broadcast, which have no
 * use_global_device_ids), replica ids each spanning every partition (a
 * channel_id without use_global_device_ids) or global device ids. */
typedef enum group_mode {
    GROUPS_CROSS_REPLICA, GROUPS_CROSS_PARTITION, GROUPS_CROSS_REPLICA_AND_PARTITION, GROUPS_FLATTENED_ID
} group_mode;
int graph_group_mode(const hlo_instr *in);
/* The device groups a collective runs over on R replicas × P partitions, as
 * global device ids (replica · P + partition; empty groups: every replica, or
 * partition in cross-partition mode): *ng groups, group g is
 * ids[start[g] .. start[g+1]) (caller frees ids and start). False, with why,
 * for an id out of range, a device named twice or groups that do not expand. */
bool graph_device_groups(const hlo_instr *in, int64_t R, int64_t P, int64_t **ids, uint32_t **start, uint32_t *ng,
                         char *why, size_t nwhy);
/* Total instruction count over all computations. */
uint64_t graph_instr_count(const hlo_module *m);

/* Structural equality of two modules. Differences are described in why (may be
 * NULL) as "computation c, instruction i: ...". Flags relax the comparison where
 * one form cannot carry what the other does. */
enum {
    GEQ_IGNORE_HEADER = 1,        /* header attributes (text only) */
    GEQ_ELIDED_MATCHES = 2,       /* an elided constant equals any payload */
    GEQ_IGNORE_POSITIONS = 4,     /* text line/col (always ignored; kept for clarity) */
};
bool graph_equal(const hlo_module *a, const hlo_module *b, int flags, strbuf *why);
/* Equality of two attributes as graph_equal compares them (flags 0). */
bool hlo_attr_equal(const hlo_attr *a, const hlo_attr *b);

#endif
