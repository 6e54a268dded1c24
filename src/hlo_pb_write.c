/* hlo_pb_write — graph IR → a bare HloModuleProto, packed by protobuf-c.
 *
 * The inverse of hlo_pb.c, so tests can make protobuf fixtures from text:
 * hlo_parse_pb(hlo_write_pb(m)) is graph_equal to m (GEQ_IGNORE_HEADER).
 * Every attribute goes to its XLA field when the reader would give back the
 * same IR value from it; anything else (unknown attributes, text-only forms,
 * values the reader would take for XLA's defaults) travels as text in
 * scalify's own field 50000. Ids are assigned here: computation k has id k+1,
 * instructions are numbered from 1 across the module.
 *
 * All protobuf-c structures live in one arena that is freed before returning.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hlo.h"
#include "hlo.pb-c.h"

typedef struct wr {
    arena a;
    const hlo_module *m;
    int64_t *instr_ids;        /* current computation: instruction index -> id */
    int64_t next_id;
    strbuf sb;
} wr;

/* fn_new(w): a message of that type, initialised, in the writer's arena. */
#define INIT_FN(type, fn)                                    \
    static type *fn##_new(wr *w) {                           \
        type *x = arena_alloc(&w->a, sizeof *x);             \
        fn##__init(x);                                       \
        return x;                                            \
    }
INIT_FN(Xla__ShapeProto, xla__shape_proto)
INIT_FN(Xla__LayoutProto, xla__layout_proto)
INIT_FN(Xla__TileProto, xla__tile_proto)
INIT_FN(Xla__LiteralProto, xla__literal_proto)
INIT_FN(Xla__OpMetadata, xla__op_metadata)
INIT_FN(Xla__OpSharding, xla__op_sharding)
INIT_FN(Xla__ReplicaGroup, xla__replica_group)
INIT_FN(Xla__IotaReplicaGroupListProto, xla__iota_replica_group_list_proto)
INIT_FN(Xla__MeshAxesReplicaGroupListProto, xla__mesh_axes_replica_group_list_proto)
INIT_FN(Xla__MeshProto, xla__mesh_proto)
INIT_FN(Xla__MeshProto__MeshAxis, xla__mesh_proto__mesh_axis)
INIT_FN(Xla__MeshProto__IotaDeviceOrder, xla__mesh_proto__iota_device_order)
INIT_FN(Xla__AxisRefProto, xla__axis_ref_proto)
INIT_FN(Xla__AxisRefProto__SubAxis, xla__axis_ref_proto__sub_axis)
INIT_FN(Xla__SourceTarget, xla__source_target)
INIT_FN(Xla__PaddingConfig, xla__padding_config)
INIT_FN(Xla__PaddingConfig__PaddingConfigDimension, xla__padding_config__padding_config_dimension)
INIT_FN(Xla__Window, xla__window)
INIT_FN(Xla__WindowDimension, xla__window_dimension)
INIT_FN(Xla__ConvolutionDimensionNumbers, xla__convolution_dimension_numbers)
INIT_FN(Xla__DotDimensionNumbers, xla__dot_dimension_numbers)
INIT_FN(Xla__GatherDimensionNumbers, xla__gather_dimension_numbers)
INIT_FN(Xla__ScatterDimensionNumbers, xla__scatter_dimension_numbers)
INIT_FN(Xla__PrecisionConfig, xla__precision_config)
INIT_FN(Xla__FrontendAttributes, xla__frontend_attributes)
INIT_FN(Xla__FrontendAttributes__MapEntry, xla__frontend_attributes__map_entry)
INIT_FN(Xla__TextAttribute, xla__text_attribute)
INIT_FN(Xla__HloInstructionProto, xla__hlo_instruction_proto)
INIT_FN(Xla__HloInstructionProto__SliceDimensions, xla__hlo_instruction_proto__slice_dimensions)
INIT_FN(Xla__HloComputationProto, xla__hlo_computation_proto)
INIT_FN(Xla__StackFrameIndexProto, xla__stack_frame_index_proto)
INIT_FN(Xla__StackFrameIndexProto__FileLocation, xla__stack_frame_index_proto__file_location)
INIT_FN(Xla__StackFrameIndexProto__StackFrame, xla__stack_frame_index_proto__stack_frame)
INIT_FN(Xla__HloModuleProto, xla__hlo_module_proto)

static void *alloc(wr *w, size_t n) { return n ? arena_alloc(&w->a, n) : NULL; }
static void *ptrs(wr *w, size_t n) { return alloc(w, n * sizeof(void *)); }
static char *str(const char *s) { return (char *)(s ? s : ""); }

static int64_t *ints(wr *w, const int64_t *v, size_t n) { return n ? arena_memdup(&w->a, v, n * sizeof *v) : NULL; }

static int32_t *ints32(wr *w, const int64_t *v, size_t n) {
    int32_t *out = alloc(w, n * sizeof *out);
    for (size_t i = 0; i < n; i++) out[i] = (int32_t)v[i];
    return out;
}

static char *dup_text(wr *w, const char *s, size_t n) { return arena_strndup(&w->a, s, n); }

/* ---- shapes and literals ---- */

static Xla__ShapeProto *shape_pb(wr *w, const shape *s) {
    Xla__ShapeProto *sp = xla__shape_proto_new(w);
    sp->element_type = (Xla__PrimitiveType)s->dtype;
    if (s->dtype == DT_TUPLE) {
        sp->n_tuple_shapes = s->ntuple;
        sp->tuple_shapes = ptrs(w, s->ntuple);
        for (uint32_t i = 0; i < s->ntuple; i++) sp->tuple_shapes[i] = shape_pb(w, &s->tuple[i]);
        return sp;
    }
    sp->n_dimensions = s->rank;
    sp->dimensions = ints(w, s->dims, s->rank);
    if (s->dynamic) {
        sp->n_is_dynamic_dimension = s->rank;
        sp->is_dynamic_dimension = alloc(w, s->rank * sizeof *sp->is_dynamic_dimension);
        for (uint32_t i = 0; i < s->rank; i++) {
            sp->is_dynamic_dimension[i] = s->dynamic[i] != DIM_STATIC;
            /* XLA's spelling of '?' */
            if (s->dynamic[i] == DIM_UNBOUNDED) sp->dimensions[i] = INT64_MIN;
        }
    }
    const layout *l = s->layout;
    if (l) {
        Xla__LayoutProto *lp = sp->layout = xla__layout_proto_new(w);
        lp->n_minor_to_major = l->n;
        lp->minor_to_major = ints(w, l->minor_to_major, l->n);
        lp->n_tiles = l->ntiles;
        lp->tiles = ptrs(w, l->ntiles);
        for (uint32_t t = 0; t < l->ntiles; t++) {
            Xla__TileProto *tp = lp->tiles[t] = xla__tile_proto_new(w);
            tp->n_dimensions = l->tiles[t].n;
            tp->dimensions = ints(w, l->tiles[t].dims, l->tiles[t].n);
        }
        lp->element_size_in_bits = l->element_size_bits;
        lp->memory_space = l->memory_space;
        if (l->extra) lp->scalify_extra = str(l->extra);
    }
    return sp;
}

/* Array values in the LiteralProto field of their element type. */
static Xla__LiteralProto *literal_pb(wr *w, const hlo_literal *lit, const shape *s) {
    Xla__LiteralProto *lp = xla__literal_proto_new(w);
    lp->shape = shape_pb(w, s);
    size_t n = lit->count > 0 ? (size_t)lit->count : 0;
    int dt = lit->dtype;
    switch (dt) {
    case DT_PRED:
        lp->n_preds = n;
        lp->preds = alloc(w, n * sizeof *lp->preds);
        for (size_t k = 0; k < n; k++) lp->preds[k] = lit->i[k] != 0;
        return lp;
    case DT_S32:
        lp->n_s32s = n;
        lp->s32s = ints32(w, lit->i, n);
        return lp;
    case DT_S64:
        lp->n_s64s = n;
        lp->s64s = ints(w, lit->i, n);
        return lp;
    case DT_U32:
        lp->n_u32s = n;
        lp->u32s = alloc(w, n * sizeof *lp->u32s);
        for (size_t k = 0; k < n; k++) lp->u32s[k] = (uint32_t)lit->i[k];
        return lp;
    case DT_U64:
        lp->n_u64s = n;
        lp->u64s = alloc(w, n * sizeof *lp->u64s);
        for (size_t k = 0; k < n; k++) lp->u64s[k] = (uint64_t)lit->i[k];
        return lp;
    case DT_F32:
        lp->n_f32s = n;
        lp->f32s = alloc(w, n * sizeof *lp->f32s);
        for (size_t k = 0; k < n; k++) lp->f32s[k] = (float)lit->f[k];
        return lp;
    case DT_F64:
        lp->n_f64s = n;
        lp->f64s = arena_memdup(&w->a, lit->f, n * sizeof *lit->f + 1);
        return lp;
    default:
        break;
    }
    /* Narrow kinds: one byte per element below 16 bits, little-endian pairs. */
    ProtobufCBinaryData *b = NULL;
    switch (dt) {
    case DT_S8: b = &lp->s8s; break;
    case DT_U8: b = &lp->u8s; break;
    case DT_S16: b = &lp->s16s; break;
    case DT_U16: b = &lp->u16s; break;
    case DT_S4: b = &lp->s4s; break;
    case DT_U4: b = &lp->u4s; break;
    case DT_S2: b = &lp->s2s; break;
    case DT_U2: b = &lp->u2s; break;
    case DT_S1: b = &lp->s1s; break;
    case DT_U1: b = &lp->u1s; break;
    case DT_F16: b = &lp->f16s; break;
    case DT_BF16: b = &lp->bf16s; break;
    case DT_F8E5M2: b = &lp->f8e5m2s; break;
    case DT_F8E4M3FN: b = &lp->f8e4m3fns; break;
    case DT_F8E4M3B11FNUZ: b = &lp->f8e4m3b11fnuzs; break;
    case DT_F8E5M2FNUZ: b = &lp->f8e5m2fnuzs; break;
    case DT_F8E4M3FNUZ: b = &lp->f8e4m3fnuzs; break;
    case DT_F8E4M3: b = &lp->f8e4m3s; break;
    case DT_F8E3M4: b = &lp->f8e3m4s; break;
    case DT_F4E2M1FN: b = &lp->f4e2m1fns; break;
    case DT_F8E8M0FNU: b = &lp->f8e8m0fnus; break;
    default: return lp;
    }
    size_t width = dt == DT_S16 || dt == DT_U16 || dt == DT_F16 || dt == DT_BF16 ? 2 : 1;
    b->len = n * width;
    b->data = alloc(w, b->len + 1);
    for (size_t k = 0; k < n; k++) {
        uint32_t u = lit->f ? hlo_float_encode(dt, lit->f[k]) : (uint32_t)lit->i[k];
        b->data[k * width] = (uint8_t)u;
        if (width == 2) b->data[k * width + 1] = (uint8_t)(u >> 8);
    }
    return lp;
}

/* ---- attribute forms the reader turns back into text ---- */

/* window={size=.. stride=.. pad=lo_hi.. lhs_dilate=.. rhs_dilate=.. rhs_reversal=..}:
 * parsed into a Window when the reader's canonical text of it is this text. */
static Xla__Window *window_pb(wr *w, const char *text) {
    size_t len = strlen(text);
    if (len < 2 || text[0] != '{' || text[len - 1] != '}') return NULL;
    static const char *const names[] = {"size", "stride", "pad", "lhs_dilate", "rhs_dilate", "rhs_reversal"};
    int64_t vals[6][2][16];
    size_t ndims = 0;
    bool seen[6] = {false};
    const char *p = text + 1, *end = text + len - 1;
    int last = -1;
    while (p < end) {
        int part = -1;
        for (int k = 0; k < 6; k++) {
            size_t nl = strlen(names[k]);
            if ((size_t)(end - p) > nl && strncmp(p, names[k], nl) == 0 && p[nl] == '=') {
                part = k;
                p += nl + 1;
                break;
            }
        }
        /* Canonical: size first, parts in this order, each once. */
        if (part <= last || (last < 0 && part != 0)) return NULL;
        last = part;
        seen[part] = true;
        size_t d = 0;
        for (;;) {
            if (d == 16) return NULL;
            char *q;
            vals[part][0][d] = strtoll(p, &q, 10);
            if (q == p) return NULL;
            p = q;
            if (part == 2) {
                if (*p != '_') return NULL;
                vals[part][1][d] = strtoll(++p, &q, 10);
                if (q == p) return NULL;
                p = q;
            }
            d++;
            if (*p != 'x') break;
            p++;
        }
        if (part == 0) ndims = d;
        else if (d != ndims) return NULL;
        if (p < end) {
            if (*p != ' ') return NULL;
            p++;
        }
    }
    if (!seen[0] || ndims == 0) return NULL;
    Xla__Window *wp = xla__window_new(w);
    wp->n_dimensions = ndims;
    wp->dimensions = ptrs(w, ndims);
    bool differs[6] = {true, false, false, false, false, false};
    for (size_t i = 0; i < ndims; i++) {
        Xla__WindowDimension *wd = wp->dimensions[i] = xla__window_dimension_new(w);
        wd->size = vals[0][0][i];
        wd->stride = seen[1] ? vals[1][0][i] : 1;
        wd->padding_low = seen[2] ? vals[2][0][i] : 0;
        wd->padding_high = seen[2] ? vals[2][1][i] : 0;
        wd->base_dilation = seen[3] ? vals[3][0][i] : 1;
        wd->window_dilation = seen[4] ? vals[4][0][i] : 1;
        if (seen[5] && (vals[5][0][i] | 1) != 1) return NULL;
        wd->window_reversal = seen[5] && vals[5][0][i];
        differs[1] |= wd->stride != 1;
        differs[2] |= wd->padding_low || wd->padding_high;
        differs[3] |= wd->base_dilation != 1;
        differs[4] |= wd->window_dilation != 1;
        differs[5] |= wd->window_reversal;
    }
    /* A part that only restates defaults would not come back. */
    for (int k = 1; k < 6; k++)
        if (seen[k] != differs[k]) return NULL;
    return wp;
}

/* One operand's labels ("b01f"): the dimension number of each letter. */
static bool parse_labels(const char *s, size_t n, char a, int64_t *ap, char b, int64_t *bp, int64_t *sp, size_t *ns) {
    *ap = *bp = -1;
    *ns = 0;
    int64_t spatial[10];
    bool have[10] = {false};
    for (size_t i = 0; i < n; i++) {
        if (s[i] == a && *ap < 0) *ap = (int64_t)i;
        else if (s[i] == b && *bp < 0) *bp = (int64_t)i;
        else if (s[i] >= '0' && s[i] <= '9' && !have[s[i] - '0']) {
            have[s[i] - '0'] = true;
            spatial[s[i] - '0'] = (int64_t)i;
            (*ns)++;
        } else {
            return false;
        }
    }
    for (size_t k = 0; k < *ns; k++) {
        if (!have[k]) return false;
        sp[k] = spatial[k];
    }
    return *ap >= 0 && *bp >= 0;
}

/* dim_labels=b01f_01io->b01f */
static Xla__ConvolutionDimensionNumbers *dim_labels_pb(wr *w, const char *text) {
    const char *us = strchr(text, '_'), *ar = strstr(text, "->");
    if (!us || !ar || ar < us) return NULL;
    Xla__ConvolutionDimensionNumbers *c = xla__convolution_dimension_numbers_new(w);
    int64_t sp[3][10];
    size_t ns[3];
    if (!parse_labels(text, (size_t)(us - text), 'b', &c->input_batch_dimension, 'f', &c->input_feature_dimension,
                      sp[0], &ns[0]) ||
        !parse_labels(us + 1, (size_t)(ar - us - 1), 'i', &c->kernel_input_feature_dimension, 'o',
                      &c->kernel_output_feature_dimension, sp[1], &ns[1]) ||
        !parse_labels(ar + 2, strlen(ar + 2), 'b', &c->output_batch_dimension, 'f', &c->output_feature_dimension,
                      sp[2], &ns[2]))
        return NULL;
    c->n_input_spatial_dimensions = ns[0];
    c->input_spatial_dimensions = ints(w, sp[0], ns[0]);
    c->n_kernel_spatial_dimensions = ns[1];
    c->kernel_spatial_dimensions = ints(w, sp[1], ns[1]);
    c->n_output_spatial_dimensions = ns[2];
    c->output_spatial_dimensions = ints(w, sp[2], ns[2]);
    return c;
}

/* An enum value by name: prefix + the word in upper case; -1 when unnamed. */
static int enum_value(const ProtobufCEnumDescriptor *ed, const char *prefix, const char *word, bool upper) {
    char buf[128];
    size_t k = strlen(prefix);
    if (k + strlen(word) + 1 > sizeof buf) return -1;
    memcpy(buf, prefix, k);
    for (const char *s = word; *s; s++) buf[k++] = upper && *s >= 'a' && *s <= 'z' ? (char)(*s - 'a' + 'A') : *s;
    buf[k] = 0;
    const ProtobufCEnumValue *ev = protobuf_c_enum_descriptor_get_value_by_name(ed, buf);
    return ev ? ev->value : -1;
}

static const char *default_compare_type(int dt) {
    if (dtype_is_float(dt) || dtype_is_complex(dt)) return "FLOAT";
    if (dtype_is_unsigned(dt) || dt == DT_PRED) return "UNSIGNED";
    if (dtype_is_int(dt)) return "SIGNED";
    return NULL;
}

/* ---- instructions ---- */

typedef struct texts {
    Xla__TextAttribute **v;
    size_t n, cap;
} texts;

/* Keeps attribute a as text (field 50000) in the form text_attr() reads. */
static void keep_text(wr *w, texts *t, const hlo_attr *a, const hlo_module *m, const hlo_comp *c, const hlo_instr *in) {
    Xla__TextAttribute *ta = xla__text_attribute_new(w);
    ta->key = str(a->key == A_RAW ? a->raw_key : attr_key_name(a->key));
    sb_reset(&w->sb);
    switch (a->kind) {
    case K_STRING: case K_BACKEND: case K_RAW: case K_IDENT: sb_puts(&w->sb, a->v.str); break;
    case K_SHARDING:
        if (a->v.sharding->type == SH_RAW) {
            sb_puts(&w->sb, a->v.sharding->raw ? a->v.sharding->raw : "");
        } else { /* a tuple with text elements: its whole text, without the outer braces */
            hlo_print_attr_value(&w->sb, m, c, in, a);
            if (w->sb.len >= 2) {
                memmove(w->sb.s, w->sb.s + 1, w->sb.len - 2);
                w->sb.len -= 2;
                w->sb.s[w->sb.len] = 0;
            }
        }
        break;
    case K_LITERAL: sb_puts(&w->sb, a->v.lit->raw ? a->v.lit->raw : "{...}"); break;
    default: hlo_print_attr_value(&w->sb, m, c, in, a); break;
    }
    ta->value = dup_text(w, w->sb.s ? w->sb.s : "", w->sb.len);
    if (t->n == t->cap) {
        size_t nc = t->cap ? 2 * t->cap : 4;
        Xla__TextAttribute **nv = ptrs(w, nc);
        if (t->n) memcpy(nv, t->v, t->n * sizeof *nv);
        t->v = nv;
        t->cap = nc;
    }
    t->v[t->n++] = ta;
}

static Xla__ReplicaGroup **list_pb(wr *w, const hlo_groups *g) {
    Xla__ReplicaGroup **v = ptrs(w, g->ngroups);
    for (uint32_t i = 0; i < g->ngroups; i++) {
        v[i] = xla__replica_group_new(w);
        v[i]->n_replica_ids = g->start[i + 1] - g->start[i];
        if (v[i]->n_replica_ids) v[i]->replica_ids = ints(w, g->ids + g->start[i], v[i]->n_replica_ids);
    }
    return v;
}

static void groups_pb(wr *w, Xla__HloInstructionProto *ip, const hlo_groups *g) {
    if (g->mesh) {
        Xla__MeshAxesReplicaGroupListProto *mp = ip->mesh_axes_replica_group_list =
            xla__mesh_axes_replica_group_list_proto_new(w);
        Xla__MeshProto *mesh = mp->mesh = xla__mesh_proto_new(w);
        mesh->n_axes = g->naxes;
        mesh->axes = ptrs(w, g->naxes);
        for (uint32_t i = 0; i < g->naxes; i++) {
            mesh->axes[i] = xla__mesh_proto__mesh_axis_new(w);
            mesh->axes[i]->name = str(g->axis_names[i]);
            mesh->axes[i]->size = g->axis_sizes[i];
        }
        if (g->device_ids) {
            mesh->n_device_ids = g->ndevice_ids;
            mesh->device_ids = ints(w, g->device_ids, g->ndevice_ids);
        } else if (g->dev_reshape) {
            Xla__MeshProto__IotaDeviceOrder *io = mesh->iota_device_ids =
                xla__mesh_proto__iota_device_order_new(w);
            io->n_reshape_dims = g->ndev_reshape;
            io->reshape_dims = ints(w, g->dev_reshape, g->ndev_reshape);
            io->n_transpose_perm = g->ndev_perm;
            io->transpose_perm = ints32(w, g->dev_perm, g->ndev_perm);
        }
        mp->n_axes = g->nsel;
        mp->axes = ptrs(w, g->nsel);
        for (uint32_t i = 0; i < g->nsel; i++) {
            Xla__AxisRefProto *ar = mp->axes[i] = xla__axis_ref_proto_new(w);
            ar->mesh_axis_index = g->sel[i].axis;
            if (g->sel[i].size) {
                ar->sub_axis_info = xla__axis_ref_proto__sub_axis_new(w);
                ar->sub_axis_info->pre_size = g->sel[i].pre;
                ar->sub_axis_info->size = g->sel[i].size;
            }
        }
    } else if (g->iota) {
        /* Field 92; XLA's other home, collective_device_list (87), holds the
         * lists of real dumps, so both are exercised. */
        Xla__IotaReplicaGroupListProto *io = ip->iota_collective_device_list =
            xla__iota_replica_group_list_proto_new(w);
        io->num_replica_groups = g->ngroups;
        io->num_devices_per_group = g->group_size;
        io->n_iota_reshape_dims = g->nreshape;
        io->iota_reshape_dims = ints(w, g->reshape, g->nreshape);
        io->n_iota_transpose_perm = g->nperm;
        io->iota_transpose_perm = ints32(w, g->perm, g->nperm);
    } else {
        ip->n_replica_groups = g->ngroups;
        ip->replica_groups = list_pb(w, g);
    }
}

static Xla__OpSharding *sharding_pb(wr *w, const hlo_sharding *s) {
    Xla__OpSharding *os = xla__op_sharding_new(w);
    os->type = (Xla__OpSharding__Type)s->type;
    os->n_tile_assignment_dimensions = s->ntile;
    os->tile_assignment_dimensions = ints(w, s->tile_dims, s->ntile);
    os->n_tile_assignment_devices = s->ndevices;
    os->tile_assignment_devices = ints(w, s->devices, s->ndevices);
    os->n_iota_reshape_dims = s->nreshape;
    os->iota_reshape_dims = ints(w, s->reshape, s->nreshape);
    os->n_iota_transpose_perm = s->nperm;
    os->iota_transpose_perm = ints32(w, s->perm, s->nperm);
    os->replicate_on_last_tile_dim = s->replicate_last;
    os->n_last_tile_dims = s->nlast;
    os->last_tile_dims = alloc(w, s->nlast * sizeof *os->last_tile_dims);
    for (uint32_t i = 0; i < s->nlast; i++) os->last_tile_dims[i] = (Xla__OpSharding__Type)s->last_tile_dims[i];
    os->n_tuple_shardings = s->ntuple;
    os->tuple_shardings = ptrs(w, s->ntuple);
    for (uint32_t i = 0; i < s->ntuple; i++) os->tuple_shardings[i] = sharding_pb(w, &s->tuple[i]);
    return os;
}

static bool sharding_has_raw(const hlo_sharding *s) {
    if (s->type == SH_RAW) return true;
    for (uint32_t i = 0; i < s->ntuple; i++)
        if (sharding_has_raw(&s->tuple[i])) return true;
    return false;
}

static Xla__OpMetadata *meta_pb(wr *w, const hlo_meta *md, const char *op_name) {
    static const hlo_meta none;
    if (!md) md = &none;
    Xla__OpMetadata *om = xla__op_metadata_new(w);
    om->op_type = str(md->op_type);
    om->op_name = str(op_name);
    om->source_file = str(md->source_file);
    om->source_line = md->source_line;
    om->source_end_line = md->source_end_line;
    om->source_column = md->source_column;
    om->source_end_column = md->source_end_column;
    om->stack_frame_id = md->stack_frame_id;
    if (md->extra) om->scalify_extra = str(md->extra);
    return om;
}

/* Dimension-number messages, made on first use. */
static Xla__DotDimensionNumbers *dot_dn(wr *w, Xla__HloInstructionProto *ip) {
    if (!ip->dot_dimension_numbers) ip->dot_dimension_numbers = xla__dot_dimension_numbers_new(w);
    return ip->dot_dimension_numbers;
}

static Xla__GatherDimensionNumbers *gather_dn(wr *w, Xla__HloInstructionProto *ip) {
    if (!ip->gather_dimension_numbers)
        ip->gather_dimension_numbers = xla__gather_dimension_numbers_new(w);
    return ip->gather_dimension_numbers;
}

static Xla__ScatterDimensionNumbers *scatter_dn(wr *w, Xla__HloInstructionProto *ip) {
    if (!ip->scatter_dimension_numbers)
        ip->scatter_dimension_numbers = xla__scatter_dimension_numbers_new(w);
    return ip->scatter_dimension_numbers;
}

static Xla__PrecisionConfig *precision(wr *w, Xla__HloInstructionProto *ip) {
    if (!ip->precision_config) ip->precision_config = xla__precision_config_new(w);
    return ip->precision_config;
}

/* Keys of computation references, in the order called_computation_ids lists
 * them (the reader maps them back by opcode). */
static const int called_keys[] = {A_BODY, A_CONDITION, A_TRUE_COMPUTATION, A_FALSE_COMPUTATION,
                                  A_BRANCH_COMPUTATIONS, A_SELECT, A_SCATTER, A_CALLS,
                                  A_CALLED_COMPUTATIONS, A_TO_APPLY};

static Xla__HloInstructionProto *instr_pb(wr *w, const hlo_comp *c, uint32_t idx) {
    const hlo_module *m = w->m;
    const hlo_instr *in = &c->instrs[idx];
    Xla__HloInstructionProto *ip = xla__hlo_instruction_proto_new(w);
    ip->name = str(in->name);
    ip->opcode = str(in->opname);
    ip->shape = shape_pb(w, &in->shape);
    ip->id = w->instr_ids[idx];
    if (in->meta || in->op_name) ip->metadata = meta_pb(w, in->meta, in->op_name);
    ip->n_operand_ids = in->noperands;
    ip->operand_ids = alloc(w, in->noperands * sizeof *ip->operand_ids);
    for (uint32_t o = 0; o < in->noperands; o++) ip->operand_ids[o] = w->instr_ids[in->operands[o]];
    int op0 = in->noperands ? c->instrs[in->operands[0]].shape.dtype : DT_INVALID;
    const char *dflt_type = in->op == OP_COMPARE ? default_compare_type(op0) : NULL;

    texts t = {0};
#define SET_INTS(obj, field, a) ((obj)->n_##field = (a)->n, (obj)->field = ints(w, (a)->v.ints, (a)->n))
    for (uint32_t k = 0; k < in->nattrs; k++) {
        const hlo_attr *a = &in->attrs[k];
        bool ok = true;
        switch (a->key) {
        case A_PARAMETER_NUMBER: ok = in->op == OP_PARAMETER; ip->parameter_number = a->v.i; break;
        case A_LITERAL:
            ok = !a->v.lit->raw && !a->v.lit->elided && in->op == OP_CONSTANT;
            if (ok) ip->literal = literal_pb(w, a->v.lit, &in->shape);
            break;
        case A_INDEX: ok = in->op == OP_GET_TUPLE_ELEMENT; ip->tuple_index = a->v.i; break;
        case A_IOTA_DIMENSION:
            ok = in->op == OP_IOTA && !instr_attr(in, A_DIMENSIONS);
            if (ok) {
                ip->n_dimensions = 1;
                ip->dimensions = ints(w, &a->v.i, 1);
            }
            break;
        case A_DIMENSIONS:
            ok = in->op != OP_IOTA;
            if (ok) SET_INTS(ip, dimensions, a);
            break;
        case A_KIND: ip->fusion_kind = str(a->v.str); break;
        case A_CHANNEL_ID: ok = a->v.i > 0; ip->channel_id = a->v.i; break;
        case A_REPLICA_GROUPS: groups_pb(w, ip, a->v.groups); break;
        case A_SOURCE_TARGET_PAIRS: {
            const hlo_groups *g = a->v.groups;
            for (uint32_t i = 0; i < g->ngroups && ok; i++) ok = g->start[i + 1] - g->start[i] == 2;
            if (!ok) break;
            ip->n_source_target_pairs = g->ngroups;
            ip->source_target_pairs = ptrs(w, g->ngroups);
            for (uint32_t i = 0; i < g->ngroups; i++) {
                Xla__SourceTarget *st = ip->source_target_pairs[i] = xla__source_target_new(w);
                st->source = g->ids[g->start[i]];
                st->target = g->ids[g->start[i] + 1];
            }
            break;
        }
        case A_CONSTRAIN_LAYOUT: ip->constrain_layout = a->v.i != 0; break;
        case A_USE_GLOBAL_DEVICE_IDS: ip->use_global_device_ids = a->v.i != 0; break;
        case A_SLICE:
            ip->n_slice_dimensions = a->n;
            ip->slice_dimensions = ptrs(w, a->n);
            for (uint32_t i = 0; i < a->n; i++) {
                Xla__HloInstructionProto__SliceDimensions *sl = ip->slice_dimensions[i] =
                    xla__hlo_instruction_proto__slice_dimensions_new(w);
                sl->start = a->v.ints[3 * i];
                sl->limit = a->v.ints[3 * i + 1];
                sl->stride = a->v.ints[3 * i + 2];
            }
            break;
        case A_DYNAMIC_SLICE_SIZES: SET_INTS(ip, dynamic_slice_sizes, a); break;
        case A_PADDING: {
            Xla__PaddingConfig *pcfg = ip->padding_config = xla__padding_config_new(w);
            pcfg->n_dimensions = a->n;
            pcfg->dimensions = ptrs(w, a->n);
            for (uint32_t i = 0; i < a->n; i++) {
                Xla__PaddingConfig__PaddingConfigDimension *d = pcfg->dimensions[i] =
                    xla__padding_config__padding_config_dimension_new(w);
                d->edge_padding_low = a->v.ints[3 * i];
                d->edge_padding_high = a->v.ints[3 * i + 1];
                d->interior_padding = a->v.ints[3 * i + 2];
            }
            break;
        }
        case A_LHS_BATCH_DIMS: SET_INTS(dot_dn(w, ip), lhs_batch_dimensions, a); break;
        case A_LHS_CONTRACTING_DIMS: SET_INTS(dot_dn(w, ip), lhs_contracting_dimensions, a); break;
        case A_RHS_BATCH_DIMS: SET_INTS(dot_dn(w, ip), rhs_batch_dimensions, a); break;
        case A_RHS_CONTRACTING_DIMS: SET_INTS(dot_dn(w, ip), rhs_contracting_dimensions, a); break;
        case A_OPERAND_PRECISION: {
            int *v = alloc(w, a->n * sizeof *v);
            bool any = false;
            for (uint32_t i = 0; i < a->n && ok; i++) {
                v[i] = enum_value(&xla__precision_config__precision__descriptor, "", a->v.strs[i], true);
                ok = v[i] >= 0;
                any |= v[i] > 0;
            }
            /* All-default precisions have no text: the reader would drop them. */
            ok = ok && any;
            if (!ok) break;
            precision(w, ip)->n_operand_precision = a->n;
            precision(w, ip)->operand_precision = (Xla__PrecisionConfig__Precision *)v;
            break;
        }
        case A_ALGORITHM:
            if (in->op == OP_RNG_BIT_GENERATOR) {
                int v = enum_value(&xla__random_algorithm__descriptor, "", a->v.str, true);
                ok = v >= 0;
                ip->rng_algorithm = (Xla__RandomAlgorithm)(ok ? v : 0);
            } else {
                int v = enum_value(&xla__precision_config__algorithm__descriptor, "ALG_", a->v.str, true);
                ok = v > 0;
                if (ok) precision(w, ip)->algorithm = (Xla__PrecisionConfig__Algorithm)v;
            }
            break;
        case A_OFFSET_DIMS: SET_INTS(gather_dn(w, ip), offset_dims, a); break;
        case A_COLLAPSED_SLICE_DIMS: SET_INTS(gather_dn(w, ip), collapsed_slice_dims, a); break;
        case A_START_INDEX_MAP: SET_INTS(gather_dn(w, ip), start_index_map, a); break;
        case A_OPERAND_BATCHING_DIMS: SET_INTS(gather_dn(w, ip), operand_batching_dims, a); break;
        case A_START_INDICES_BATCHING_DIMS: SET_INTS(gather_dn(w, ip), start_indices_batching_dims, a); break;
        case A_UPDATE_WINDOW_DIMS: SET_INTS(scatter_dn(w, ip), update_window_dims, a); break;
        case A_INSERTED_WINDOW_DIMS: SET_INTS(scatter_dn(w, ip), inserted_window_dims, a); break;
        case A_SCATTER_DIMS_TO_OPERAND_DIMS: SET_INTS(scatter_dn(w, ip), scatter_dims_to_operand_dims, a); break;
        case A_INPUT_BATCHING_DIMS: SET_INTS(scatter_dn(w, ip), input_batching_dims, a); break;
        case A_SCATTER_INDICES_BATCHING_DIMS: SET_INTS(scatter_dn(w, ip), scatter_indices_batching_dims, a); break;
        case A_INDEX_VECTOR_DIM:
            if (in->op == OP_GATHER) gather_dn(w, ip)->index_vector_dim = a->v.i;
            else if (in->op == OP_SCATTER) scatter_dn(w, ip)->index_vector_dim = a->v.i;
            else ok = false;
            break;
        case A_SLICE_SIZES: SET_INTS(ip, gather_slice_sizes, a); break;
        case A_INDICES_ARE_SORTED: ip->indices_are_sorted = a->v.i != 0; break;
        case A_UNIQUE_INDICES: ip->unique_indices = a->v.i != 0; break;
        case A_DIRECTION: ip->comparison_direction = str(a->v.str); break;
        case A_COMPARE_TYPE:
            /* A type equal to the operand's default would be dropped on reading. */
            ok = !dflt_type || strcmp(dflt_type, a->v.str) != 0;
            if (ok) ip->comparison_type = str(a->v.str);
            break;
        case A_IS_STABLE: ip->is_stable = a->v.i != 0; break;
        case A_K: ip->k = a->v.i; break;
        case A_LARGEST: ip->largest = a->v.i != 0; break;
        case A_EXPONENT_BITS: ok = a->v.i == (int32_t)a->v.i; ip->exponent_bits = (int32_t)a->v.i; break;
        case A_MANTISSA_BITS: ok = a->v.i == (int32_t)a->v.i; ip->mantissa_bits = (int32_t)a->v.i; break;
        case A_FFT_TYPE: {
            int v = enum_value(&xla__fft_type__descriptor, "", a->v.str, false);
            ok = v >= 0;
            ip->fft_type = (Xla__FftType)(ok ? v : 0);
            break;
        }
        case A_FFT_LENGTH: SET_INTS(ip, fft_length, a); break;
        case A_DISTRIBUTION: {
            int v = enum_value(&xla__random_distribution__descriptor, "", a->v.str, true);
            ok = v > 0;
            ip->distribution = (Xla__RandomDistribution)(ok ? v : 0);
            break;
        }
        case A_WINDOW: ok = (ip->window = window_pb(w, a->v.str)) != NULL; break;
        case A_DIM_LABELS: ok = (ip->convolution_dimension_numbers = dim_labels_pb(w, a->v.str)) != NULL; break;
        case A_FEATURE_GROUP_COUNT: ok = a->v.i != 1; ip->feature_group_count = a->v.i; break;
        case A_BATCH_GROUP_COUNT: ok = a->v.i != 1; ip->batch_group_count = a->v.i; break;
        case A_CUSTOM_CALL_TARGET: ip->custom_call_target = str(a->v.str); break;
        case A_CUSTOM_CALL_HAS_SIDE_EFFECT: ip->custom_call_has_side_effect = a->v.i != 0; break;
        case A_API_VERSION: {
            int v = enum_value(&xla__custom_call_api_version__descriptor, "", a->v.str, false);
            ok = v > 1;
            ip->custom_call_api_version = (Xla__CustomCallApiVersion)(ok ? v : 0);
            break;
        }
        case A_SHARDING:
            ok = !sharding_has_raw(a->v.sharding);
            if (ok) ip->sharding = sharding_pb(w, a->v.sharding);
            break;
        case A_CONTROL_PREDECESSORS:
            ip->n_control_predecessor_ids = a->n;
            ip->control_predecessor_ids = alloc(w, a->n * sizeof *ip->control_predecessor_ids);
            for (uint32_t i = 0; i < a->n; i++) ip->control_predecessor_ids[i] = w->instr_ids[a->v.ints[i]];
            break;
        case A_FRONTEND_ATTRIBUTES: {
            Xla__FrontendAttributes *fa = ip->frontend_attributes = xla__frontend_attributes_new(w);
            fa->n_map = a->n;
            fa->map = ptrs(w, a->n);
            for (uint32_t i = 0; i < a->n; i++) {
                fa->map[i] = xla__frontend_attributes__map_entry_new(w);
                fa->map[i]->key = str(a->v.strs[2 * i]);
                fa->map[i]->value = str(a->v.strs[2 * i + 1]);
            }
            break;
        }
        case A_BACKEND_CONFIG:
            ip->backend_config.data = (uint8_t *)str(a->v.str);
            ip->backend_config.len = strlen(a->v.str);
            break;
        default:
            /* Computation references are gathered below; the rest is text. */
            ok = a->kind == K_COMP || a->kind == K_COMPS;
            break;
        }
        if (!ok) keep_text(w, &t, a, m, c, in);
    }
#undef SET_INTS
    /* XLA always writes a comparison type; the reader drops the default one. */
    if (in->op == OP_COMPARE && !instr_attr(in, A_COMPARE_TYPE) && dflt_type) ip->comparison_type = str(dflt_type);

    size_t ncalled = 0;
    for (size_t k = 0; k < ARRAY_LEN(called_keys); k++) {
        const hlo_attr *a = instr_attr(in, called_keys[k]);
        if (a) ncalled += a->kind == K_COMP ? 1 : a->n;
    }
    ip->n_called_computation_ids = ncalled;
    ip->called_computation_ids = alloc(w, ncalled * sizeof *ip->called_computation_ids);
    ncalled = 0;
    for (size_t k = 0; k < ARRAY_LEN(called_keys); k++) {
        const hlo_attr *a = instr_attr(in, called_keys[k]);
        uint32_t n = a ? (a->kind == K_COMP ? 1 : a->n) : 0;
        for (uint32_t i = 0; i < n; i++) ip->called_computation_ids[ncalled++] = a->v.ints[i] + 1;
    }
    ip->n_scalify_text_attributes = t.n;
    ip->scalify_text_attributes = t.v;
    return ip;
}

static Xla__StackFrameIndexProto *frames_pb(wr *w, const hlo_module *m) {
    Xla__StackFrameIndexProto *sf = xla__stack_frame_index_proto_new(w);
    sf->n_file_names = m->nfile_names;
    sf->file_names = ptrs(w, m->nfile_names);
    for (uint32_t i = 0; i < m->nfile_names; i++) sf->file_names[i] = str(m->file_names[i]);
    sf->n_function_names = m->nfunction_names;
    sf->function_names = ptrs(w, m->nfunction_names);
    for (uint32_t i = 0; i < m->nfunction_names; i++) sf->function_names[i] = str(m->function_names[i]);
    sf->n_file_locations = m->nfile_locs;
    sf->file_locations = ptrs(w, m->nfile_locs);
    for (uint32_t i = 0; i < m->nfile_locs; i++) {
        const hlo_file_loc *l = &m->file_locs[i];
        Xla__StackFrameIndexProto__FileLocation *fl = sf->file_locations[i] =
            xla__stack_frame_index_proto__file_location_new(w);
        fl->file_name_id = l->file_name_id;
        fl->function_name_id = l->function_name_id;
        fl->line = l->line;
        fl->column = l->column;
        fl->end_line = l->end_line;
        fl->end_column = l->end_column;
    }
    sf->n_stack_frames = m->nframes;
    sf->stack_frames = ptrs(w, m->nframes);
    for (uint32_t i = 0; i < m->nframes; i++) {
        Xla__StackFrameIndexProto__StackFrame *f = sf->stack_frames[i] =
            xla__stack_frame_index_proto__stack_frame_new(w);
        f->file_location_id = m->frames[i].file_location_id;
        f->parent_frame_id = m->frames[i].parent_frame_id;
    }
    return sf;
}

void hlo_write_pb(const hlo_module *m, strbuf *out) {
    wr w = {.m = m, .next_id = 1};
    arena_init(&w.a);
    sb_init(&w.sb);
    Xla__HloModuleProto *mp = xla__hlo_module_proto_new(&w);
    mp->name = str(m->name);
    mp->n_computations = m->ncomps;
    mp->computations = ptrs(&w, m->ncomps);
    for (uint32_t ci = 0; ci < m->ncomps; ci++) {
        const hlo_comp *c = &m->comps[ci];
        Xla__HloComputationProto *cp = mp->computations[ci] =
            xla__hlo_computation_proto_new(&w);
        cp->name = str(c->name);
        cp->id = ci + 1;
        w.instr_ids = alloc(&w, c->ninstrs * sizeof *w.instr_ids);
        for (uint32_t i = 0; i < c->ninstrs; i++) w.instr_ids[i] = w.next_id++;
        cp->n_instructions = c->ninstrs;
        cp->instructions = ptrs(&w, c->ninstrs);
        for (uint32_t i = 0; i < c->ninstrs; i++) cp->instructions[i] = instr_pb(&w, c, i);
        if (c->ninstrs) cp->root_id = w.instr_ids[c->root];
    }
    if (m->entry < m->ncomps) {
        mp->entry_computation_name = str(m->comps[m->entry].name);
        mp->entry_computation_id = m->entry + 1;
    }
    if (m->nfile_names || m->nfunction_names || m->nfile_locs || m->nframes) mp->stack_frame_index = frames_pb(&w, m);
    size_t len = protobuf_c_message_get_packed_size(&mp->base);
    XGROW(out->s, out->cap, out->len + len + 1);
    protobuf_c_message_pack(&mp->base, (uint8_t *)out->s + out->len);
    out->len += len;
    out->s[out->len] = 0;
    sb_free(&w.sb);
    arena_free(&w.a);
}
