/* hlo_pb — HLO protobuf (HloModuleProto, HloProto or HloSnapshot) → graph IR.
 *
 * Two ways to the message tree, one conversion. The fast way, a one-pass
 * unpacker, checks and unpacks together for input it is sure of, and hands
 * anything else to the careful way. The careful way: (1) a wire-format walker
 * checks the whole input against the generated descriptors before protobuf-c
 * sees it: every tag, varint, length and packed run must be valid, nesting is
 * bounded and the memory protobuf-c would allocate is estimated and capped,
 * so hostile bytes end in a diagnostic ("byte N: field a.b[3].c: ...") rather
 * than a crash, a stack overflow or a huge allocation; (2) protobuf-c
 * unpacks. Both ways build the same tree (tests/unit/test_pb.c holds them to
 * it), except that the fast way leaves instructions on the wire until
 * conversion asks for them. (3) The messages are converted into the IR
 * exactly as hlo_parse_text() builds it for the printed form of the same
 * module: instructions in proto
 * order, ids mapped to indexes, attributes in their text spelling, defaults
 * that XLA's printer leaves out left out here too.
 *
 * Invariant: every failure is reported through diag_binary with a byte offset
 * and a field path (conversion errors name the computation or instruction that
 * holds the problem), and everything allocated is released on every path.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hlo.h"
#include "hlo.pb-c.h"

/* Message nesting the walker accepts; protobuf-c recurses once per level. */
#define PB_MAX_DEPTH HLO_MAX_NESTING
/* protobuf-c may allocate at most this much per input byte, plus a floor:
 * real dumps need under 20x, a run of empty sub-messages can ask for 300x. */
#define PB_COST_PER_BYTE 64
#define PB_COST_FLOOR ((uint64_t)64 << 20)

/* ---- (1) the wire-format walker ---- */

typedef struct frame {
    const char *name;   /* field name, or NULL for an unknown field */
    uint32_t number;
    int64_t index;      /* position in a repeated field, -1 otherwise */
} frame;

typedef struct walker {
    const uint8_t *buf;
    size_t n;
    uint64_t cost, budget;
    frame frames[PB_MAX_DEPTH + 2];
    int depth;
    /* the first problem */
    bool bad;
    size_t err_off;
    char err[160];
    char err_path[512];
    /* payload offsets, in the order protobuf-c will unpack them */
    size_t module_off;
    bool have_module;
    size_t *comp_off, *instr_off;
    size_t ncomp, capcomp, ninstr, capinstr;
} walker;

static void path_format(const frame *f, int n, char *out, size_t cap) {
    size_t len = 0;
    out[0] = 0;
    for (int i = 0; i < n && len + 1 < cap; i++) {
        int k;
        if (f[i].name) k = snprintf(out + len, cap - len, "%s%s", i ? "." : "", f[i].name);
        else k = snprintf(out + len, cap - len, "%s#%u", i ? "." : "", f[i].number);
        if (k > 0) len += (size_t)k;
        if (f[i].index >= 0 && len + 1 < cap) {
            k = snprintf(out + len, cap - len, "[%lld]", (long long)f[i].index);
            if (k > 0) len += (size_t)k;
        }
    }
    if (len >= cap) out[cap - 1] = 0;
}

static bool wbad(walker *w, size_t off, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static bool wbad(walker *w, size_t off, const char *fmt, ...) {
    if (w->bad) return false;
    w->bad = true;
    w->err_off = off;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(w->err, sizeof w->err, fmt, ap);
    va_end(ap);
    path_format(w->frames, w->depth, w->err_path, sizeof w->err_path);
    return false;
}

/* A varint of at most max bytes starting at p; returns its length, 0 when it is
 * cut off by end or longer than max. */
static size_t read_varint(const uint8_t *p, const uint8_t *end, size_t max, uint64_t *v) {
    uint64_t x = 0;
    for (size_t i = 0; i < max && p + i < end; i++) {
        x |= (uint64_t)(p[i] & 0x7f) << (7 * i);
        if (!(p[i] & 0x80)) {
            *v = x;
            return i + 1;
        }
    }
    return 0;
}

static bool charge(walker *w, size_t off, uint64_t bytes) {
    w->cost += bytes;
    if (w->cost > w->budget)
        return wbad(w, off, "unpacking would need more than %llu MiB of memory for %zu input bytes",
                    (unsigned long long)(w->budget >> 20), w->n);
    return true;
}

static void note_offset(size_t **v, size_t *n, size_t *cap, size_t off) {
    XGROW(*v, *cap, *n + 1);
    (*v)[(*n)++] = off;
}

/* The wire type protobuf-c accepts for a field of this type (unpacked form). */
static int wire_type_of(ProtobufCType t) {
    switch (t) {
    case PROTOBUF_C_TYPE_FIXED32: case PROTOBUF_C_TYPE_SFIXED32: case PROTOBUF_C_TYPE_FLOAT: return 5;
    case PROTOBUF_C_TYPE_FIXED64: case PROTOBUF_C_TYPE_SFIXED64: case PROTOBUF_C_TYPE_DOUBLE: return 1;
    case PROTOBUF_C_TYPE_STRING: case PROTOBUF_C_TYPE_BYTES: case PROTOBUF_C_TYPE_MESSAGE: return 2;
    default: return 0;
    }
}

/* A packed run of scalars at [p, end): every element complete. */
static bool walk_packed(walker *w, const uint8_t *p, const uint8_t *end, int wt) {
    size_t len = (size_t)(end - p), count = 0;
    if (wt == 5 || wt == 1) {
        size_t size = wt == 5 ? 4 : 8;
        if (len % size)
            return wbad(w, (size_t)(p - w->buf), "packed run of %zu bytes is not a whole number of %zu-byte values",
                        len, size);
        count = len / size;
    } else {
        while (p < end) {
            uint64_t v;
            size_t k = read_varint(p, end, 10, &v);
            if (!k) return wbad(w, (size_t)(p - w->buf), "packed varint is cut off or longer than 10 bytes");
            p += k;
            count++;
        }
    }
    return charge(w, (size_t)(end - w->buf), (uint64_t)count * 8);
}

static bool walk_message(walker *w, size_t start, size_t end, const ProtobufCMessageDescriptor *desc);

static bool walk_field(walker *w, const ProtobufCFieldDescriptor *f, int wt, const uint8_t *p,
                       const uint8_t *end, size_t tag_off) {
    size_t off = (size_t)(p - w->buf);
    if (!f) return charge(w, off, (uint64_t)(end - p) + 48); /* protobuf-c keeps a copy */
    int want = wire_type_of(f->type);
    bool repeated = f->label == PROTOBUF_C_LABEL_REPEATED;
    if (wt != want && !(repeated && wt == 2 && want != 2))
        return wbad(w, tag_off, "wire type %d where the field needs %d", wt, want);
    if (repeated && !charge(w, off, 8)) return false;
    if (wt != 2) return true;
    if (f->type == PROTOBUF_C_TYPE_MESSAGE)
        return walk_message(w, off, (size_t)(end - w->buf), f->descriptor);
    if (f->type == PROTOBUF_C_TYPE_STRING || f->type == PROTOBUF_C_TYPE_BYTES)
        return charge(w, off, (uint64_t)(end - p) + 1);
    return walk_packed(w, p, end, want);
}

/* Checks the message at [start, end) of w->buf and everything under it. */
static bool walk_message(walker *w, size_t start, size_t end, const ProtobufCMessageDescriptor *desc) {
    if (w->depth > PB_MAX_DEPTH) return wbad(w, start, "messages nested deeper than %d levels", PB_MAX_DEPTH);
    if (!charge(w, start, desc->sizeof_message)) return false;
    if (desc == &xla__hlo_module_proto__descriptor && !w->have_module) {
        w->have_module = true;
        w->module_off = start;
    }
    if (desc == &xla__hlo_computation_proto__descriptor) note_offset(&w->comp_off, &w->ncomp, &w->capcomp, start);
    if (desc == &xla__hlo_instruction_proto__descriptor)
        note_offset(&w->instr_off, &w->ninstr, &w->capinstr, start);
    /* Occurrences so far of each repeated field, for the [i] in paths. */
    uint32_t seen[128];
    size_t nseen = desc->n_fields < ARRAY_LEN(seen) ? desc->n_fields : ARRAY_LEN(seen);
    memset(seen, 0, nseen * sizeof *seen);  /* only field indexes below n_fields are counted */
    const uint8_t *p = w->buf + start, *e = w->buf + end;
    while (p < e) {
        size_t tag_off = (size_t)(p - w->buf);
        uint64_t tag;
        size_t k = read_varint(p, e, 5, &tag);
        if (!k) return wbad(w, tag_off, "field tag is cut off or longer than 5 bytes");
        uint32_t number = (uint32_t)(tag >> 3);
        int wt = (int)(tag & 7);
        if (number == 0) return wbad(w, tag_off, "invalid tag: field number 0");
        const ProtobufCFieldDescriptor *f = protobuf_c_message_descriptor_get_field(desc, number);
        frame *fr = &w->frames[w->depth];
        fr->name = f ? f->name : NULL;
        fr->number = number;
        fr->index = -1;
        if (f && f->label == PROTOBUF_C_LABEL_REPEATED) {
            size_t fi = (size_t)(f - desc->fields);
            bool packed_run = wt == 2 && f->type != PROTOBUF_C_TYPE_MESSAGE && f->type != PROTOBUF_C_TYPE_STRING &&
                              f->type != PROTOBUF_C_TYPE_BYTES;
            if (fi < ARRAY_LEN(seen) && !packed_run) fr->index = seen[fi]++;
        }
        w->depth++;
        p += k;
        const uint8_t *vend = p;
        uint64_t v;
        switch (wt) {
        case 0:
            k = read_varint(p, e, 10, &v);
            if (!k) return wbad(w, (size_t)(p - w->buf), "varint is cut off or longer than 10 bytes");
            vend = p + k;
            break;
        case 1: case 5: {
            size_t size = wt == 1 ? 8 : 4;
            if ((size_t)(e - p) < size)
                return wbad(w, tag_off, "%zu-byte value is cut off after %zu bytes", size, (size_t)(e - p));
            vend = p + size;
            break;
        }
        case 2:
            k = read_varint(p, e, 5, &v);
            if (!k) return wbad(w, (size_t)(p - w->buf), "length prefix is cut off or longer than 5 bytes");
            p += k;
            if (v > (uint64_t)(e - p))
                return wbad(w, tag_off, "length %llu runs past the end of its message (%zu bytes left)",
                            (unsigned long long)v, (size_t)(e - p));
            vend = p + v;
            break;
        default:
            return wbad(w, tag_off, "wire type %d is not valid here", wt);
        }
        if (!walk_field(w, f, wt, p, vend, tag_off)) return false;
        p = vend;
        w->depth--;
    }
    return true;
}

/* ---- container detection ---- */

/* The payload of the first occurrence of field 1 as a length-delimited value,
 * when the message at [p, e) parses shallowly. */
static bool first_field1(const uint8_t *p, const uint8_t *e, const uint8_t **s, size_t *n) {
    bool found = false;
    while (p < e) {
        uint64_t tag, v;
        size_t k = read_varint(p, e, 5, &tag);
        if (!k) return found;
        p += k;
        int wt = (int)(tag & 7);
        if (wt == 0) {
            if (!(k = read_varint(p, e, 10, &v))) return found;
            p += k;
        } else if (wt == 1 || wt == 5) {
            p += wt == 1 ? 8 : 4;
        } else if (wt == 2) {
            if (!(k = read_varint(p, e, 5, &v)) || v > (uint64_t)(e - p - k)) return found;
            p += k;
            if ((tag >> 3) == 1 && !found) {
                found = true;
                *s = p;
                *n = (size_t)v;
            }
            p += v;
        } else {
            return found;
        }
    }
    return found;
}

/* A module name is text; a wrapped message starts with a tag byte below ' '. */
static bool is_text(const uint8_t *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (s[i] < 0x20 || s[i] == 0x7f) return false;
    return true;
}

/* True when [p, e) looks like an HloModuleProto: field 1 is a name (or absent). */
static bool looks_like_module(const uint8_t *p, const uint8_t *e) {
    const uint8_t *s;
    size_t n;
    if (!first_field1(p, e, &s, &n)) return true;
    return is_text(s, n);
}

/* 0 = HloModuleProto, 1 = HloProto, 2 = HloSnapshot. */
static int detect_container(const uint8_t *buf, size_t n) {
    const uint8_t *p = buf, *e = buf + n;
    for (int level = 0; level < 2; level++) {
        if (looks_like_module(p, e)) return level;
        const uint8_t *s;
        size_t k;
        first_field1(p, e, &s, &k);
        p = s;
        e = s + k;
    }
    return 2;
}

static const char *const format_names[] = {"HloModuleProto", "HloProto", "HloSnapshot"};
static const char *const prefixes[] = {"", "hlo_module.", "hlo.hlo_module."};
static const ProtobufCMessageDescriptor *const containers[] = {
    &xla__hlo_module_proto__descriptor, &xla__hlo_proto__descriptor, &xla__hlo_snapshot__descriptor};

/* ---- (3) conversion ---- */

/* Instruction and computation ids (int64, unique, often huge) -> indexes.
 * XLA numbers instructions in order, so a computation's ids usually fill a
 * range little wider than their count: then a direct table indexed by id - lo
 * (lookups of nearby ids touch nearby memory); else open addressing over a
 * table sized once for all its keys. */
typedef struct idmap {
    int64_t *keys;
    uint32_t *vals;    /* UINT32_MAX: empty slot */
    size_t mask;       /* hashed: capacity - 1; direct: the range's width - 1 */
    unsigned shift;    /* 64 - log2(capacity): Fibonacci hashing keeps the top bits */
    bool direct;
    int64_t lo;        /* direct: the smallest id */
    size_t cap;        /* entries allocated in vals (and keys) */
} idmap;

/* Room for n ids in [lo, hi] (lo > hi: not known). */
static void idmap_reset(idmap *m, size_t n, int64_t lo, int64_t hi) {
    uint64_t width = lo <= hi ? (uint64_t)hi - (uint64_t)lo : UINT64_MAX;
    m->direct = width < 4 * (uint64_t)n + 64;
    size_t cap = 16;
    if (m->direct) {
        cap = (size_t)width + 1;
        m->lo = lo;
        m->mask = cap - 1;
    } else {
        while (cap < 2 * n) cap *= 2;
        m->mask = cap - 1;
        m->shift = 64;
        for (size_t c = cap; c > 1; c >>= 1) m->shift--;
    }
    if (cap > m->cap) {
        free(m->keys);
        free(m->vals);
        m->keys = xmalloc(cap * sizeof *m->keys);
        m->vals = xmalloc(cap * sizeof *m->vals);
        m->cap = cap;
    }
    memset(m->vals, 0xff, cap * sizeof *m->vals);
}

/* id's slot, or SIZE_MAX when it is outside a direct table's range. */
static size_t idmap_slot(const idmap *m, int64_t id) {
    if (m->direct) {
        uint64_t k = (uint64_t)id - (uint64_t)m->lo;
        return id >= m->lo && k <= m->mask ? (size_t)k : SIZE_MAX;
    }
    size_t i = (size_t)(((uint64_t)id * 0x9e3779b97f4a7c15ull) >> m->shift) & m->mask;
    while (m->vals[i] != UINT32_MAX && m->keys[i] != id) i = (i + 1) & m->mask;
    return i;
}

/* False when id is already present (or outside the range given). */
static bool idmap_put(idmap *m, int64_t id, uint32_t v) {
    size_t i = idmap_slot(m, id);
    if (i == SIZE_MAX || m->vals[i] != UINT32_MAX) return false;
    m->keys[i] = id;
    m->vals[i] = v;
    return true;
}

static bool idmap_get(const idmap *m, int64_t id, uint32_t *v) {
    size_t i = idmap_slot(m, id);
    *v = i == SIZE_MAX ? UINT32_MAX : m->vals[i];
    return *v != UINT32_MAX;
}

static void idmap_free(idmap *m) {
    free(m->keys);
    free(m->vals);
}

typedef struct unpacker unpacker;

typedef struct pb {
    walker w;
    unpacker *u;               /* the one-pass unpacker that built the tree, or NULL */
    diag *d;
    hlo_module *m;
    jmp_buf fail;
    const char *prefix;        /* path of the module message: "", "hlo_module.", ... */
    /* where we are, for messages */
    uint32_t comp, instr;      /* indexes; UINT32_MAX when outside */
    size_t *instr_base;        /* per proto computation: w.instr_off index of its first instruction */
    /* per-instruction scratch */
    int64_t *pnum;             /* per instruction of the computation: its id while the ids are read, then its parameter_number */
    size_t cappnum;
    uint32_t *params;          /* the computation's parameter instructions, in order */
    size_t nparams, capparams;
    bool control;              /* some instruction of the computation has control predecessors */
    hlo_attr *attrs;
    size_t nattrs, capattrs;
    strbuf sb;
    int depth;
    /* lookups: computation id -> index; per computation, instruction id -> index */
    idmap comp_index, ids;
    strmap names;
    const char *last_op_name;  /* the previous metadata op_name (module arena) */
    attr_cache attrs_kept;     /* graph_share_attrs */
    bool retry;                /* one pass failed: the careful path will say why */
} pb;

/* Reports at the innermost computation or instruction being converted; in the
 * one pass, says nothing but leaves it to the careful path (see unpacker). */
static _Noreturn void fail(pb *p, const char *field, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static _Noreturn void fail(pb *p, const char *field, const char *fmt, ...) {
    if (p->u) {
        p->retry = true;
        longjmp(p->fail, 1);
    }
    char msg[512], path[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    size_t off = p->w.module_off;
    int k = snprintf(path, sizeof path, "%s", p->prefix);
    if (p->comp != UINT32_MAX) {
        if (p->comp < p->w.ncomp) off = p->w.comp_off[p->comp];
        k += snprintf(path + k, sizeof path - (size_t)k, "computations[%u]", p->comp);
        if (p->instr != UINT32_MAX) {
            size_t g = p->instr_base ? p->instr_base[p->comp] + p->instr : SIZE_MAX;
            if (g < p->w.ninstr) off = p->w.instr_off[g];
            k += snprintf(path + k, sizeof path - (size_t)k, ".instructions[%u]", p->instr);
        }
    }
    if (field && *field) snprintf(path + k, sizeof path - (size_t)k, "%s%s", k && path[k - 1] != '.' ? "." : "", field);
    else if (k && path[k - 1] == '.') path[k - 1] = 0;
    diag_binary(p->d, off, path, "%s", msg);
    longjmp(p->fail, 1);
}

static const char *intern(pb *p, const char *s) { return graph_intern(p->m, s ? s : "", s ? strlen(s) : 0); }

static int64_t *copy_i64(pb *p, const int64_t *v, size_t n) {
    return n ? arena_memdup(&p->m->arena, v, n * sizeof *v) : NULL;
}

static int64_t *copy_i32(pb *p, const int32_t *v, size_t n) {
    if (!n) return NULL;
    int64_t *out = arena_alloc(&p->m->arena, n * sizeof *out);
    for (size_t i = 0; i < n; i++) out[i] = v[i];
    return out;
}

static uint32_t count32(pb *p, size_t n, const char *field) {
    if (n > UINT32_MAX) fail(p, field, "more than 2^32 entries");
    return (uint32_t)n;
}

/* Adds an attribute; a second value for the same known key replaces the first. */
static hlo_attr *add_attr(pb *p, int key) {
    if (key != A_RAW)
        for (size_t i = 0; i < p->nattrs; i++)
            if (p->attrs[i].key == key) {
                memset(&p->attrs[i], 0, sizeof p->attrs[i]);
                p->attrs[i].key = (uint16_t)key;
                p->attrs[i].kind = (uint16_t)attr_key_kind(key);
                return &p->attrs[i];
            }
    XGROW(p->attrs, p->capattrs, p->nattrs + 1);
    hlo_attr *a = &p->attrs[p->nattrs++];
    memset(a, 0, sizeof *a);
    a->key = (uint16_t)key;
    a->kind = (uint16_t)attr_key_kind(key);
    return a;
}

static void attr_int(pb *p, int key, int64_t v) { add_attr(p, key)->v.i = v; }

static void attr_ints(pb *p, int key, const int64_t *v, size_t n) {
    if (!n) return;
    hlo_attr *a = add_attr(p, key);
    a->n = count32(p, n, attr_key_name(key));
    a->v.ints = copy_i64(p, v, n);
}

static void attr_ident(pb *p, int key, const char *s) { add_attr(p, key)->v.str = intern(p, s); }

/* An attribute the IR knows only as text: key=value as the text reader keeps it. */
static void raw_attr(pb *p, const char *key, const char *value) {
    hlo_attr *a = add_attr(p, A_RAW);
    a->raw_key = intern(p, key);
    a->v.str = intern(p, value);
}

/* An enum value's name from its descriptor, lowercased with a prefix removed
 * ("ALG_DOT_BF16_BF16_F32" -> "dot_bf16_bf16_f32"); the number when unnamed. */
static const char *enum_word(pb *p, const ProtobufCEnumDescriptor *ed, int v, const char *strip, bool lower) {
    const ProtobufCEnumValue *ev = protobuf_c_enum_descriptor_get_value(ed, v);
    sb_reset(&p->sb);
    if (!ev) {
        sb_printf(&p->sb, "%d", v);
    } else {
        const char *s = ev->name;
        if (strip && strncmp(s, strip, strlen(strip)) == 0) s += strlen(strip);
        for (; *s; s++) sb_putc(&p->sb, lower && *s >= 'A' && *s <= 'Z' ? (char)(*s - 'A' + 'a') : *s);
    }
    return graph_intern(p->m, p->sb.s, p->sb.len);
}

/* ---- shapes ---- */

static void convert_shape(pb *p, const Xla__ShapeProto *sp, shape *s, const char *field) {
    hlo_module *m = p->m;
    memset(s, 0, sizeof *s);
    if (!sp) fail(p, field, "missing shape");
    int dt = (int)sp->element_type;
    if (dt <= DT_INVALID || dt >= DT_COUNT) fail(p, field, "invalid element type %d", dt);
    s->dtype = (uint8_t)dt;
    if (dt == DT_TUPLE) {
        if (++p->depth > HLO_MAX_NESTING) fail(p, field, "tuple shapes nested deeper than %d levels", HLO_MAX_NESTING);
        s->ntuple = count32(p, sp->n_tuple_shapes, field);
        s->tuple = s->ntuple ? arena_alloc(&m->arena, s->ntuple * sizeof *s->tuple) : NULL;
        for (uint32_t i = 0; i < s->ntuple; i++) convert_shape(p, sp->tuple_shapes[i], &s->tuple[i], field);
        p->depth--;
        return;
    }
    if (sp->n_dimensions > 1024) fail(p, field, "more than 1024 dimensions");
    s->rank = (uint32_t)sp->n_dimensions;
    s->dims = copy_i64(p, sp->dimensions, sp->n_dimensions);
    bool any_dyn = false;
    for (size_t i = 0; i < sp->n_is_dynamic_dimension; i++) any_dyn |= sp->is_dynamic_dimension[i] != 0;
    if (any_dyn) {
        if (sp->n_is_dynamic_dimension != sp->n_dimensions)
            fail(p, field, "%zu dynamic-dimension flags for %zu dimensions", sp->n_is_dynamic_dimension,
                 sp->n_dimensions);
        s->dynamic = arena_alloc(&m->arena, s->rank);
        for (uint32_t i = 0; i < s->rank; i++) {
            if (!sp->is_dynamic_dimension[i]) continue;
            /* XLA writes an unbounded dimension ('?' in text) as INT64_MIN. */
            if (s->dims[i] == INT64_MIN) {
                s->dims[i] = 0;
                s->dynamic[i] = DIM_UNBOUNDED;
            } else {
                s->dynamic[i] = DIM_BOUNDED;
            }
        }
    }
    const Xla__LayoutProto *lp = sp->layout;
    bool extra = lp && lp->scalify_extra && *lp->scalify_extra;
    bool tail = lp && lp->tail_padding_alignment_in_elements > 1;
    /* XLA prints no layout for a scalar unless it holds more than the order. */
    if (lp && (s->rank > 0 || lp->n_tiles || lp->element_size_in_bits || lp->memory_space || extra || tail)) {
        layout *l = arena_alloc(&m->arena, sizeof *l);
        l->n = count32(p, lp->n_minor_to_major, field);
        l->minor_to_major = copy_i64(p, lp->minor_to_major, lp->n_minor_to_major);
        l->ntiles = count32(p, lp->n_tiles, field);
        l->tiles = l->ntiles ? arena_alloc(&m->arena, l->ntiles * sizeof *l->tiles) : NULL;
        for (uint32_t t = 0; t < l->ntiles; t++) {
            l->tiles[t].n = count32(p, lp->tiles[t]->n_dimensions, field);
            l->tiles[t].dims = copy_i64(p, lp->tiles[t]->dimensions, lp->tiles[t]->n_dimensions);
        }
        l->element_size_bits = lp->element_size_in_bits;
        l->memory_space = lp->memory_space;
        if (extra) {
            l->extra = intern(p, lp->scalify_extra);
        } else if (tail) {
            sb_reset(&p->sb);
            sb_printf(&p->sb, "L(%lld)", (long long)lp->tail_padding_alignment_in_elements);
            l->extra = graph_intern(m, p->sb.s, p->sb.len);
        }
        s->layout = l;
    }
    char why[200];
    if (shape_check(s, why, sizeof why)) fail(p, field, "invalid shape: %s", why);
}

/* ---- literals ---- */

double hlo_float_decode(int dt, uint32_t bits) {
    if (dt == DT_BF16) {
        uint32_t u = bits << 16;
        float f;
        memcpy(&f, &u, 4);
        return f;
    }
    if (dt == DT_F16) {
        int e = (int)(bits >> 10) & 0x1f, mant = (int)(bits & 0x3ff);
        double v = e == 0 ? ldexp(mant, -24) : e == 31 ? (mant ? NAN : INFINITY) : ldexp(1024 + mant, e - 25);
        return bits & 0x8000 ? -v : v;
    }
    const minifloat *f = dtype_minifloat(dt);
    if (!f) return NAN;
    if (f->kind == MF_E8M0) return (bits & 0xff) == 0xff ? NAN : ldexp(1.0, (int)(bits & 0xff) - 127);
    int nbits = 1 + f->ebits + f->mbits;
    bits &= (1u << nbits) - 1;
    uint32_t sign = bits >> (nbits - 1), emax = (1u << f->ebits) - 1, mmax = (1u << f->mbits) - 1;
    uint32_t e = (bits >> f->mbits) & emax, mant = bits & mmax;
    if (f->kind == MF_FNUZ && bits == (1u << (nbits - 1))) return NAN;
    if (f->kind == MF_IEEE && e == emax) return mant ? NAN : sign ? -INFINITY : INFINITY;
    if (f->kind == MF_FN && e == emax && mant == mmax) return NAN;
    /* Subnormal without the implicit leading one. */
    double v = e == 0 ? ldexp(mant, 1 - f->bias - f->mbits)
                      : ldexp((double)((1u << f->mbits) + mant), (int)e - f->bias - f->mbits);
    return sign ? -v : v;
}

uint32_t hlo_float_encode(int dt, double v) {
    int nbits = dt == DT_F16 || dt == DT_BF16 ? 16 : dtype_bits(dt);
    if (nbits <= 0 || nbits > 16) return 0;
    if (dt == DT_BF16) {
        if (isnan(v)) return signbit(v) ? 0xffc0 : 0x7fc0;
        float f = (float)dtype_round(DT_BF16, v);
        uint32_t u;
        memcpy(&u, &f, 4);
        return u >> 16;
    }
    if (dt == DT_F16) {
        uint32_t sign = signbit(v) ? 0x8000 : 0;
        if (isnan(v)) return sign | 0x7e00;
        double a = fabs(dtype_round(DT_F16, v));
        if (isinf(a)) return sign | 0x7c00;
        if (a < 0x1p-14) return sign | (uint32_t)(a * 0x1p24);  /* subnormal: exact */
        int e;
        double f = frexp(a, &e);                                /* a = f * 2^e, f in [0.5, 1) */
        return sign | (uint32_t)(e + 14) << 10 | (uint32_t)((f * 2 - 1) * 1024);
    }
    /* The nearest code of a narrow kind, ties to the even code: a search over
     * at most 256 codes, which only fixture writing pays for. */
    uint32_t best = 0, ncodes = 1u << nbits;
    double bestd = INFINITY;
    bool found = false;
    for (uint32_t c = 0; c < ncodes; c++) {
        double x = hlo_float_decode(dt, c);
        if (isnan(v) || isnan(x)) {
            if (isnan(v) && isnan(x) && !found) {
                best = c;
                found = true;
                bestd = 0;
            }
            continue;
        }
        if (x == v && signbit(x) == signbit(v)) return c;
        double dd = fabs(x - v);
        if (isnan(dd)) continue;
        if (dd < bestd || (dd == bestd && !(c & 1))) {
            bestd = dd;
            best = c;
        }
    }
    return best;
}

static int64_t sign_extend(uint64_t v, int bits) {
    uint64_t m = 1ull << (bits - 1);
    v &= bits == 64 ? ~0ull : (1ull << bits) - 1;
    return (int64_t)((v ^ m) - m);
}

/* Text of a literal the IR keeps as text (tuples, complex), as XLA prints it:
 * arrays in nested braces, complex values as (re, im), tuples in parentheses. */
static void literal_text(pb *p, const Xla__LiteralProto *lp, const shape *s, strbuf *b);
static void array_values(pb *p, const Xla__LiteralProto *lp, const shape *s, hlo_literal *lit);

static void complex_array(strbuf *b, const shape *s, const float *f32, const double *f64, uint32_t dim, size_t *k) {
    if (dim == s->rank) {
        size_t i = (*k)++;
        sb_putc(b, '(');
        if (f32) graph_put_float(b, DT_C64, f32[2 * i]); else graph_put_float(b, DT_C128, f64[2 * i]);
        sb_puts(b, ", ");
        if (f32) graph_put_float(b, DT_C64, f32[2 * i + 1]); else graph_put_float(b, DT_C128, f64[2 * i + 1]);
        sb_putc(b, ')');
        return;
    }
    /* as XLA's printer writes them: "{ {(0, 0)}, {(0, 1)} }", spaces inside
     * the braces of every dim but the innermost */
    bool inner = dim + 1 == s->rank;
    sb_puts(b, inner ? "{" : "{ ");
    for (int64_t i = 0; i < s->dims[dim]; i++) {
        if (i) sb_puts(b, ", ");
        complex_array(b, s, f32, f64, dim + 1, k);
    }
    sb_puts(b, inner ? "}" : " }");
}

static void literal_text(pb *p, const Xla__LiteralProto *lp, const shape *s, strbuf *b) {
    if (s->dtype == DT_TUPLE) {
        if (lp->n_tuple_literals != s->ntuple)
            fail(p, "literal.tuple_literals", "%zu tuple elements for a shape of %u", lp->n_tuple_literals, s->ntuple);
        if (++p->depth > HLO_MAX_NESTING) fail(p, "literal", "tuple literals nested too deeply");
        sb_putc(b, '(');
        for (uint32_t i = 0; i < s->ntuple; i++) {
            if (i) sb_puts(b, ", ");
            literal_text(p, lp->tuple_literals[i], &s->tuple[i], b);
        }
        sb_putc(b, ')');
        p->depth--;
        return;
    }
    if (dtype_is_complex(s->dtype)) {
        int64_t want = shape_elements(s);
        size_t have = s->dtype == DT_C64 ? lp->n_c64s : lp->n_c128s;
        if (want < 0 || have != 2 * (uint64_t)want)
            fail(p, "literal", "%zu complex parts for %lld elements", have, (long long)want);
        size_t k = 0;
        complex_array(b, s, s->dtype == DT_C64 ? lp->c64s : NULL, s->dtype == DT_C128 ? lp->c128s : NULL, 0, &k);
        return;
    }
    /* Arrays inside a tuple: convert, then print the values. */
    int64_t want = shape_elements(s);
    if (want < 0) return;
    hlo_literal tmp;
    memset(&tmp, 0, sizeof tmp);
    array_values(p, lp, s, &tmp);
    int64_t k = 0;
    uint32_t idx[64] = {0};
    if (s->rank > 64) fail(p, "literal", "literal of rank %u", s->rank);
    /* Nested braces following the dimensions. */
    for (uint32_t d = 0; d < s->rank; d++) sb_putc(b, '{');
    if (want == 0) {
        for (uint32_t d = 0; d < s->rank; d++) sb_putc(b, '}');
        return;
    }
    for (;;) {
        if (tmp.f) graph_put_float(b, s->dtype, tmp.f[k]);
        else if (s->dtype == DT_PRED) sb_puts(b, tmp.i[k] ? "true" : "false");
        else if (dtype_is_unsigned(s->dtype)) sb_printf(b, "%llu", (unsigned long long)tmp.i[k]);
        else sb_printf(b, "%lld", (long long)tmp.i[k]);
        k++;
        uint32_t d = s->rank;
        while (d > 0 && ++idx[d - 1] == s->dims[d - 1]) {
            idx[d - 1] = 0;
            sb_putc(b, '}');
            d--;
        }
        if (d == 0) break;
        sb_puts(b, ", ");
        for (uint32_t j = d; j < s->rank; j++) sb_putc(b, '{');
    }
}

static void need(pb *p, size_t have, int64_t want, const char *what) {
    if ((int64_t)have != want)
        fail(p, "literal", "%zu %s values for a shape of %lld elements", have, what, (long long)want);
}

/* The values of an array literal, stored as the text reader stores them:
 * doubles (exact values of the element type) for floats, int64 otherwise. */
static void array_values(pb *p, const Xla__LiteralProto *lp, const shape *s, hlo_literal *lit) {
    arena *a = &p->m->arena;
    int dt = s->dtype;
    int64_t want = shape_elements(s);
    lit->dtype = dt;
    lit->count = want;
    const ProtobufCBinaryData *bytes = NULL;
    int width = 1;
    switch (dt) {
    case DT_PRED:
        need(p, lp->n_preds, want, "pred");
        lit->i = arena_alloc(a, (size_t)want * sizeof *lit->i + 1);
        for (int64_t k = 0; k < want; k++) lit->i[k] = lp->preds[k] != 0;
        return;
    case DT_S32:
        need(p, lp->n_s32s, want, "s32");
        lit->i = copy_i32(p, lp->s32s, lp->n_s32s);
        return;
    case DT_S64:
        need(p, lp->n_s64s, want, "s64");
        lit->i = copy_i64(p, lp->s64s, lp->n_s64s);
        return;
    case DT_U32:
        need(p, lp->n_u32s, want, "u32");
        lit->i = arena_alloc(a, (size_t)want * sizeof *lit->i + 1);
        for (int64_t k = 0; k < want; k++) lit->i[k] = lp->u32s[k];
        return;
    case DT_U64:
        need(p, lp->n_u64s, want, "u64");
        lit->i = arena_alloc(a, (size_t)want * sizeof *lit->i + 1);
        for (int64_t k = 0; k < want; k++) lit->i[k] = (int64_t)lp->u64s[k];
        return;
    case DT_F32:
        need(p, lp->n_f32s, want, "f32");
        lit->f = arena_alloc(a, (size_t)want * sizeof *lit->f + 1);
        for (int64_t k = 0; k < want; k++) lit->f[k] = lp->f32s[k];
        return;
    case DT_F64:
        need(p, lp->n_f64s, want, "f64");
        lit->f = arena_alloc(a, (size_t)want * sizeof *lit->f + 1);
        for (int64_t k = 0; k < want; k++) lit->f[k] = lp->f64s[k];
        return;
    case DT_S8: bytes = &lp->s8s; break;
    case DT_U8: bytes = &lp->u8s; break;
    case DT_S16: bytes = &lp->s16s; width = 2; break;
    case DT_U16: bytes = &lp->u16s; width = 2; break;
    case DT_S4: bytes = &lp->s4s; break;
    case DT_U4: bytes = &lp->u4s; break;
    case DT_S2: bytes = &lp->s2s; break;
    case DT_U2: bytes = &lp->u2s; break;
    case DT_S1: bytes = &lp->s1s; break;
    case DT_U1: bytes = &lp->u1s; break;
    case DT_F16: bytes = &lp->f16s; width = 2; break;
    case DT_BF16: bytes = &lp->bf16s; width = 2; break;
    case DT_F8E5M2: bytes = &lp->f8e5m2s; break;
    case DT_F8E4M3FN: bytes = &lp->f8e4m3fns; break;
    case DT_F8E4M3B11FNUZ: bytes = &lp->f8e4m3b11fnuzs; break;
    case DT_F8E5M2FNUZ: bytes = &lp->f8e5m2fnuzs; break;
    case DT_F8E4M3FNUZ: bytes = &lp->f8e4m3fnuzs; break;
    case DT_F8E4M3: bytes = &lp->f8e4m3s; break;
    case DT_F8E3M4: bytes = &lp->f8e3m4s; break;
    case DT_F4E2M1FN: bytes = &lp->f4e2m1fns; break;
    case DT_F8E8M0FNU: bytes = &lp->f8e8m0fnus; break;
    default: fail(p, "literal", "a %s constant has no array values", dtype_name(dt));
    }
    /* Narrow kinds: one element per byte below 16 bits, little-endian pairs at 16. */
    if (bytes->len % (size_t)width) fail(p, "literal", "%zu bytes of %s values", bytes->len, dtype_name(dt));
    need(p, bytes->len / (size_t)width, want, dtype_name(dt));
    bool is_float = dtype_is_float(dt);
    if (is_float) lit->f = arena_alloc(a, (size_t)want * sizeof *lit->f + 1);
    else lit->i = arena_alloc(a, (size_t)want * sizeof *lit->i + 1);
    int bits = dtype_bits(dt);
    for (int64_t k = 0; k < want; k++) {
        const uint8_t *q = bytes->data + k * width;
        uint32_t u = width == 2 ? (uint32_t)q[0] | (uint32_t)q[1] << 8 : q[0];
        if (is_float) lit->f[k] = hlo_float_decode(dt, u);
        else if (dtype_is_unsigned(dt)) lit->i[k] = u & ((1u << bits) - 1);
        else lit->i[k] = sign_extend(u, width == 2 ? 16 : 8);
    }
}

static hlo_literal *convert_literal(pb *p, const Xla__LiteralProto *lp, const shape *s) {
    hlo_literal *lit = arena_alloc(&p->m->arena, sizeof *lit);
    lit->dtype = s->dtype;
    if (!lp) fail(p, "literal", "a constant without a literal");
    if (s->dtype == DT_TUPLE || dtype_is_complex(s->dtype) || s->dtype == DT_TOKEN || s->dtype == DT_OPAQUE) {
        sb_reset(&p->sb);
        literal_text(p, lp, s, &p->sb);
        lit->raw = graph_intern(p->m, p->sb.s ? p->sb.s : "", p->sb.len);
        lit->count = shape_elements(s);
        return lit;
    }
    array_values(p, lp, s, lit);
    return lit;
}

/* ---- shardings and groups ---- */

static bool is_identity(const int32_t *perm, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (perm[i] != (int32_t)i) return false;
    return true;
}

/* One mesh axis (or a sub-axis of it) as the text writes it: 'x' or 'x':(2)4. */
static void axis_ref_text(pb *p, const Xla__MeshProto *mesh, const Xla__AxisRefProto *ar, strbuf *b) {
    if (ar->mesh_axis_index < 0 || (size_t)ar->mesh_axis_index >= mesh->n_axes)
        fail(p, "sharding.named_sharding", "axis %lld is not in the mesh", (long long)ar->mesh_axis_index);
    const char *nm = mesh->axes[ar->mesh_axis_index]->name;
    sb_printf(b, "'%s'", nm ? nm : "");
    if (ar->sub_axis_info)
        sb_printf(b, ":(%lld)%lld", (long long)ar->sub_axis_info->pre_size, (long long)ar->sub_axis_info->size);
}

/* {'a', 'b':(2)2} */
static void axis_set_text(pb *p, const Xla__MeshProto *mesh, Xla__AxisRefProto *const *v, size_t n, strbuf *b) {
    sb_putc(b, '{');
    for (size_t i = 0; i < n; i++) {
        if (i) sb_puts(b, ", ");
        axis_ref_text(p, mesh, v[i], b);
    }
    sb_putc(b, '}');
}

/* True when the axes are every axis of the mesh, whole. */
static bool whole_mesh(const Xla__MeshProto *mesh, Xla__AxisRefProto *const *v, size_t n) {
    if (n != mesh->n_axes) return false;
    for (size_t i = 0; i < n; i++)
        if (v[i]->sub_axis_info || v[i]->mesh_axis_index != (int64_t)i) return false;
    return true;
}

/* A sharding by mesh axes (OpSharding.named_sharding), kept as the text the
 * printer writes between the braces, e.g. mesh['x'=2,'y'=4], [{'x'}, {}]:
 * the IR keeps Shardy's text form raw, so both forms of a module agree and
 * nothing reads such a sharding as replicated. */
static const char *named_sharding_text(pb *p, const Xla__NamedShardingProto *ns) {
    static const Xla__MeshProto none = XLA__MESH_PROTO__INIT;
    const Xla__MeshProto *mesh = ns->mesh ? ns->mesh : &none;
    strbuf *b = &p->sb;
    sb_reset(b);
    if (mesh->n_axes == 0 && mesh->n_device_ids == 1) {
        sb_printf(b, "maximal_mesh[device_id=%lld]", (long long)mesh->device_ids[0]);
        return graph_intern(p->m, b->s, b->len);
    }
    sb_puts(b, "mesh[");
    for (size_t i = 0; i < mesh->n_axes; i++)
        sb_printf(b, "%s'%s'=%lld", i ? "," : "", mesh->axes[i]->name ? mesh->axes[i]->name : "",
                  (long long)mesh->axes[i]->size);
    sb_putc(b, ']');
    const Xla__MeshProto__IotaDeviceOrder *io = mesh->iota_device_ids;
    if (mesh->n_device_ids) {
        sb_puts(b, ", device_ids=(");
        for (size_t i = 0; i < mesh->n_device_ids; i++) sb_printf(b, "%s%lld", i ? "," : "", (long long)mesh->device_ids[i]);
        sb_putc(b, ')');
    } else if (io && !is_identity(io->transpose_perm, io->n_transpose_perm)) {
        sb_puts(b, ", device_ids=([");
        for (size_t i = 0; i < io->n_reshape_dims; i++) sb_printf(b, "%s%lld", i ? "," : "", (long long)io->reshape_dims[i]);
        sb_puts(b, "]T(");
        for (size_t i = 0; i < io->n_transpose_perm; i++) sb_printf(b, "%s%d", i ? "," : "", (int)io->transpose_perm[i]);
        sb_puts(b, "))");
    }
    bool dims = ns->n_dim_shardings > 0;
    if (dims) {
        sb_puts(b, ", [");
        for (size_t d = 0; d < ns->n_dim_shardings; d++) {
            const Xla__NamedShardingProto__DimensionSharding *ds = ns->dim_shardings[d];
            if (d) sb_puts(b, ", ");
            sb_putc(b, '{');
            for (size_t i = 0; i < ds->n_axes; i++) {
                if (i) sb_puts(b, ", ");
                axis_ref_text(p, mesh, ds->axes[i], b);
            }
            if (!ds->is_closed) sb_puts(b, ds->n_axes ? ", ?" : "?");
            sb_putc(b, '}');
        }
        sb_putc(b, ']');
    }
    if (!dims && !ns->n_replicated_axes && !ns->n_unreduced_axes && !ns->n_manual_axes) sb_puts(b, ", replicated");
    if (ns->n_replicated_axes) {
        sb_puts(b, ", replicated=");
        axis_set_text(p, mesh, ns->replicated_axes, ns->n_replicated_axes, b);
    }
    static const char *const ops[] = {"", "max", "min"};
    int op = (int)ns->reduction_op;
    if (op < 0 || op > 2) fail(p, "sharding.named_sharding.reduction_op", "unknown reduction %d", op);
    if (ns->n_unreduced_axes && !dims && !op && whole_mesh(mesh, ns->unreduced_axes, ns->n_unreduced_axes)) {
        sb_puts(b, ", unreduced");
    } else if (ns->n_unreduced_axes) {
        sb_printf(b, ", unreduced=%s", ops[op]);
        axis_set_text(p, mesh, ns->unreduced_axes, ns->n_unreduced_axes, b);
    }
    if (ns->n_manual_axes && !dims && whole_mesh(mesh, ns->manual_axes, ns->n_manual_axes)) {
        sb_puts(b, ", manual");
    } else if (ns->n_manual_axes) {
        sb_puts(b, ", manual=");
        axis_set_text(p, mesh, ns->manual_axes, ns->n_manual_axes, b);
    }
    return graph_intern(p->m, b->s, b->len);
}

static void convert_sharding(pb *p, const Xla__OpSharding *os, hlo_sharding *s) {
    hlo_module *m = p->m;
    memset(s, 0, sizeof *s);
    if (os->named_sharding) {
        s->type = SH_RAW;
        s->raw = named_sharding_text(p, os->named_sharding);
        return;
    }
    int type = (int)os->type;
    s->type = type;
    switch (type) {
    case SH_REPLICATED: case SH_MANUAL: case SH_UNKNOWN: case SH_UNREDUCED:
        return;
    case SH_MAXIMAL: {
        if (os->n_tile_assignment_devices < 1) fail(p, "sharding", "maximal sharding without a device");
        int64_t one = 1;
        s->tile_dims = copy_i64(p, &one, 1);
        s->ntile = 1;
        s->devices = copy_i64(p, os->tile_assignment_devices, 1);
        s->ndevices = 1;
        return;
    }
    case SH_TUPLE:
        if (++p->depth > HLO_MAX_NESTING) fail(p, "sharding", "tuple shardings nested too deeply");
        s->ntuple = count32(p, os->n_tuple_shardings, "sharding");
        s->tuple = s->ntuple ? arena_alloc(&m->arena, s->ntuple * sizeof *s->tuple) : NULL;
        for (uint32_t i = 0; i < s->ntuple; i++) convert_sharding(p, os->tuple_shardings[i], &s->tuple[i]);
        p->depth--;
        return;
    case SH_OTHER:
        s->ntile = count32(p, os->n_tile_assignment_dimensions, "sharding");
        s->tile_dims = copy_i64(p, os->tile_assignment_dimensions, os->n_tile_assignment_dimensions);
        if (os->n_iota_reshape_dims) {
            s->nreshape = count32(p, os->n_iota_reshape_dims, "sharding");
            s->reshape = copy_i64(p, os->iota_reshape_dims, os->n_iota_reshape_dims);
            /* The text form writes T(...) only for a real transposition. */
            if (!is_identity(os->iota_transpose_perm, os->n_iota_transpose_perm)) {
                s->nperm = count32(p, os->n_iota_transpose_perm, "sharding");
                s->perm = copy_i32(p, os->iota_transpose_perm, os->n_iota_transpose_perm);
            }
        } else {
            s->ndevices = count32(p, os->n_tile_assignment_devices, "sharding");
            s->devices = copy_i64(p, os->tile_assignment_devices, os->n_tile_assignment_devices);
        }
        s->replicate_last = os->replicate_on_last_tile_dim;
        if (os->n_last_tile_dims) {
            if (os->n_last_tile_dims > 64) fail(p, "sharding.last_tile_dims", "more than 64 subgroup types");
            s->nlast = (uint32_t)os->n_last_tile_dims;
            s->last_tile_dims = arena_alloc(&m->arena, s->nlast * sizeof *s->last_tile_dims);
            for (uint32_t i = 0; i < s->nlast; i++) {
                int t = (int)os->last_tile_dims[i];
                if (t < SH_REPLICATED || t > SH_UNREDUCED)
                    fail(p, "sharding.last_tile_dims", "invalid subgroup type %d", t);
                s->last_tile_dims[i] = t;
            }
        }
        return;
    default:
        fail(p, "sharding.type", "unknown sharding type %d", type);
    }
}

static hlo_groups *list_groups(pb *p, Xla__ReplicaGroup *const *rg, size_t n, const char *field) {
    hlo_module *m = p->m;
    hlo_groups *g = arena_alloc(&m->arena, sizeof *g);
    g->ngroups = count32(p, n, field);
    g->start = arena_alloc(&m->arena, ((size_t)n + 1) * sizeof *g->start);
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        total += rg[i]->n_replica_ids;
        if (total > UINT32_MAX) fail(p, field, "too many ids in the groups");
    }
    g->ids = total ? arena_alloc(&m->arena, total * sizeof *g->ids) : NULL;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        g->start[i] = (uint32_t)k;
        if (rg[i]->n_replica_ids) memcpy(g->ids + k, rg[i]->replica_ids, rg[i]->n_replica_ids * sizeof *g->ids);
        k += rg[i]->n_replica_ids;
    }
    g->start[n] = (uint32_t)k;
    return g;
}

/* Iota groups, checked as the text reader checks [G,S]<=[dims]T(perm). */
static hlo_groups *iota_groups(pb *p, const Xla__IotaReplicaGroupListProto *ip, const char *field) {
    hlo_module *m = p->m;
    hlo_groups *g = arena_alloc(&m->arena, sizeof *g);
    g->iota = true;
    if (ip->num_replica_groups < 0 || ip->num_replica_groups > UINT32_MAX || ip->num_devices_per_group < 0)
        fail(p, field, "invalid iota replica group sizes");
    g->ngroups = (uint32_t)ip->num_replica_groups;
    g->group_size = ip->num_devices_per_group;
    g->nreshape = count32(p, ip->n_iota_reshape_dims, field);
    g->reshape = copy_i64(p, ip->iota_reshape_dims, ip->n_iota_reshape_dims);
    int64_t total = 1, want;
    for (uint32_t i = 0; i < g->nreshape; i++)
        if (g->reshape[i] < 0 || !mul_ok(total, g->reshape[i], &total)) fail(p, field, "invalid iota reshape");
    if (!mul_ok(ip->num_replica_groups, ip->num_devices_per_group, &want) || want != total)
        fail(p, field, "iota replica groups [%lld,%lld] do not cover %lld devices", (long long)ip->num_replica_groups,
             (long long)ip->num_devices_per_group, (long long)total);
    if (!is_identity(ip->iota_transpose_perm, ip->n_iota_transpose_perm)) {
        if (ip->n_iota_transpose_perm != g->nreshape) fail(p, field, "permutation length differs from the reshape");
        g->nperm = g->nreshape;
        g->perm = copy_i32(p, ip->iota_transpose_perm, ip->n_iota_transpose_perm);
        for (uint32_t i = 0; i < g->nperm; i++)
            if (g->perm[i] < 0 || g->perm[i] >= g->nreshape) fail(p, field, "invalid permutation");
    }
    return g;
}

/* Shardy's mesh-axes groups, in the IR's mesh form (graph.h). */
static hlo_groups *mesh_groups(pb *p, const Xla__MeshAxesReplicaGroupListProto *mp, const char *field) {
    hlo_module *m = p->m;
    hlo_groups *g = arena_alloc(&m->arena, sizeof *g);
    g->mesh = true;
    const Xla__MeshProto *mesh = mp->mesh;
    if (!mesh || mesh->n_axes == 0) fail(p, field, "mesh groups without mesh axes");
    if (mesh->n_axes > 64) fail(p, field, "more than 64 mesh axes");
    g->naxes = (uint32_t)mesh->n_axes;
    g->axis_names = arena_alloc(&m->arena, g->naxes * sizeof *g->axis_names);
    g->axis_sizes = arena_alloc(&m->arena, g->naxes * sizeof *g->axis_sizes);
    for (uint32_t i = 0; i < g->naxes; i++) {
        g->axis_names[i] = intern(p, mesh->axes[i]->name);
        g->axis_sizes[i] = mesh->axes[i]->size;
        if (g->axis_sizes[i] <= 0) fail(p, field, "mesh axis sizes must be positive");
    }
    if (mesh->n_device_ids) {
        g->ndevice_ids = count32(p, mesh->n_device_ids, field);
        g->device_ids = copy_i64(p, mesh->device_ids, mesh->n_device_ids);
    } else if (mesh->iota_device_ids) {
        const Xla__MeshProto__IotaDeviceOrder *io = mesh->iota_device_ids;
        /* The identity order is the default and has no text. */
        if (!is_identity(io->transpose_perm, io->n_transpose_perm)) {
            if (io->n_reshape_dims > 64 || io->n_transpose_perm != io->n_reshape_dims)
                fail(p, field, "invalid iota device order");
            g->ndev_reshape = (uint32_t)io->n_reshape_dims;
            g->dev_reshape = copy_i64(p, io->reshape_dims, io->n_reshape_dims);
            g->ndev_perm = (uint32_t)io->n_transpose_perm;
            g->dev_perm = copy_i32(p, io->transpose_perm, io->n_transpose_perm);
            for (uint32_t i = 0; i < g->ndev_perm; i++)
                if (g->dev_perm[i] < 0 || g->dev_perm[i] >= g->ndev_perm) fail(p, field, "invalid iota device order");
        }
    }
    if (mp->n_axes > 64) fail(p, field, "more than 64 selected axes");
    g->nsel = (uint32_t)mp->n_axes;
    g->sel = g->nsel ? arena_alloc(&m->arena, g->nsel * sizeof *g->sel) : NULL;
    for (uint32_t i = 0; i < g->nsel; i++) {
        const Xla__AxisRefProto *ar = mp->axes[i];
        if (ar->mesh_axis_index < 0 || ar->mesh_axis_index >= g->naxes)
            fail(p, field, "selected axis %lld is not in the mesh", (long long)ar->mesh_axis_index);
        g->sel[i].axis = (uint32_t)ar->mesh_axis_index;
        if (ar->sub_axis_info) {
            g->sel[i].pre = ar->sub_axis_info->pre_size;
            g->sel[i].size = ar->sub_axis_info->size;
            if (g->sel[i].pre <= 0 || g->sel[i].size <= 0) fail(p, field, "invalid sub-axis");
        }
    }
    return g;
}

/* ---- text forms of window and convolution dimension numbers ---- */

/* window={size=3x3 stride=2x2 pad=1_1x1_1 lhs_dilate=.. rhs_dilate=.. rhs_reversal=..};
 * each part after size only when some dimension differs from the default. */
static const char *window_text(pb *p, const Xla__Window *wp) {
    strbuf *b = &p->sb;
    sb_reset(b);
    sb_putc(b, '{');
    size_t n = wp->n_dimensions;
    bool stride = false, pad = false, lhs = false, rhs = false, rev = false;
    for (size_t i = 0; i < n; i++) {
        const Xla__WindowDimension *d = wp->dimensions[i];
        stride |= d->stride != 1;
        pad |= d->padding_low != 0 || d->padding_high != 0;
        lhs |= d->base_dilation != 1;
        rhs |= d->window_dilation != 1;
        rev |= d->window_reversal;
    }
    for (int part = 0; part < 6; part++) {
        static const char *const names[] = {"size", "stride", "pad", "lhs_dilate", "rhs_dilate", "rhs_reversal"};
        bool on[] = {true, stride, pad, lhs, rhs, rev};
        if (!on[part]) continue;
        sb_printf(b, "%s%s=", part ? " " : "", names[part]);
        for (size_t i = 0; i < n; i++) {
            const Xla__WindowDimension *d = wp->dimensions[i];
            if (i) sb_putc(b, 'x');
            switch (part) {
            case 0: sb_printf(b, "%lld", (long long)d->size); break;
            case 1: sb_printf(b, "%lld", (long long)d->stride); break;
            case 2: sb_printf(b, "%lld_%lld", (long long)d->padding_low, (long long)d->padding_high); break;
            case 3: sb_printf(b, "%lld", (long long)d->base_dilation); break;
            case 4: sb_printf(b, "%lld", (long long)d->window_dilation); break;
            default: sb_putc(b, d->window_reversal ? '1' : '0'); break;
            }
        }
    }
    sb_putc(b, '}');
    return graph_intern(p->m, b->s, b->len);
}

/* One operand's labels: position i holds the letter of the dimension numbered i. */
static void dim_letters(pb *p, strbuf *b, int64_t batch, char bc, int64_t feat, char fc, const int64_t *spatial,
                        size_t ns) {
    char slots[64][24];
    int64_t len = (batch > feat ? batch : feat) + 1;
    for (size_t i = 0; i < ns; i++)
        if (spatial[i] + 1 > len) len = spatial[i] + 1;
    bool ok = batch >= 0 && feat >= 0 && len <= 64;
    for (size_t i = 0; i < ns && ok; i++) ok = spatial[i] >= 0;
    if (!ok) fail(p, "convolution_dimension_numbers", "dimension numbers out of range");
    for (int64_t i = 0; i < len; i++) strcpy(slots[i], "?");
    snprintf(slots[batch], sizeof slots[batch], "%c", bc);
    snprintf(slots[feat], sizeof slots[feat], "%c", fc);
    for (size_t i = 0; i < ns; i++) snprintf(slots[spatial[i]], sizeof slots[0], "%zu", i);
    for (int64_t i = 0; i < len; i++) sb_puts(b, slots[i]);
}

/* dim_labels=b01f_01io->b01f */
static const char *dim_labels_text(pb *p, const Xla__ConvolutionDimensionNumbers *c) {
    strbuf *b = &p->sb;
    sb_reset(b);
    dim_letters(p, b, c->input_batch_dimension, 'b', c->input_feature_dimension, 'f', c->input_spatial_dimensions,
                c->n_input_spatial_dimensions);
    sb_putc(b, '_');
    dim_letters(p, b, c->kernel_input_feature_dimension, 'i', c->kernel_output_feature_dimension, 'o',
                c->kernel_spatial_dimensions, c->n_kernel_spatial_dimensions);
    sb_puts(b, "->");
    dim_letters(p, b, c->output_batch_dimension, 'b', c->output_feature_dimension, 'f', c->output_spatial_dimensions,
                c->n_output_spatial_dimensions);
    return graph_intern(p->m, b->s, b->len);
}

/* ---- instructions ---- */

static uint32_t lookup_comp(pb *p, int64_t id) {
    uint32_t idx;
    if (!idmap_get(&p->comp_index, id, &idx))
        fail(p, "called_computation_ids", "no computation has id %lld", (long long)id);
    return idx;
}

static uint32_t lookup_instr(pb *p, int64_t id, const char *field) {
    uint32_t idx;
    if (!idmap_get(&p->ids, id, &idx))
        fail(p, field, "id %lld is not an instruction of this computation", (long long)id);
    return idx;
}

/* The comparison type XLA's printer leaves out for this operand type. */
static const char *default_compare_type(int dt) {
    if (dtype_is_float(dt) || dtype_is_complex(dt)) return "FLOAT";
    if (dtype_is_unsigned(dt) || dt == DT_PRED) return "UNSIGNED";
    if (dtype_is_int(dt)) return "SIGNED";
    return NULL;
}

static void attr_comps(pb *p, int key, const int64_t *v, size_t n) {
    hlo_attr *a = add_attr(p, key);
    a->n = a->kind == K_COMP ? 0 : (uint32_t)n;
    a->v.ints = copy_i64(p, v, n);
}

/* called_computation_ids -> the attribute keys the text form uses. */
static void called_attrs(pb *p, const hlo_instr *in, const int64_t *c, size_t n, bool pred_first) {
    if (n == 0) return;
    switch (in->op) {
    case OP_WHILE:
        if (n != 2) fail(p, "called_computation_ids", "while needs [body, condition], got %zu computations", n);
        attr_comps(p, A_BODY, c, 1);
        attr_comps(p, A_CONDITION, c + 1, 1);
        return;
    case OP_CONDITIONAL:
        if (pred_first && n == 2) {
            attr_comps(p, A_TRUE_COMPUTATION, c, 1);
            attr_comps(p, A_FALSE_COMPUTATION, c + 1, 1);
        } else {
            attr_comps(p, A_BRANCH_COMPUTATIONS, c, n);
        }
        return;
    case OP_SELECT_AND_SCATTER:
        if (n != 2) fail(p, "called_computation_ids", "select-and-scatter needs [select, scatter]");
        attr_comps(p, A_SELECT, c, 1);
        attr_comps(p, A_SCATTER, c + 1, 1);
        return;
    case OP_FUSION: case OP_ASYNC_START: case OP_ASYNC_UPDATE: case OP_ASYNC_DONE:
        attr_comps(p, A_CALLS, c, n);
        return;
    case OP_CUSTOM_CALL:
        attr_comps(p, A_CALLED_COMPUTATIONS, c, n);
        return;
    default:
        attr_comps(p, n == 1 ? A_TO_APPLY : A_CALLED_COMPUTATIONS, c, n);
        return;
    }
}

/* An attribute the writer kept as text (scalify's field 50000). */
static void text_attr(pb *p, const hlo_instr *in, const Xla__TextAttribute *ta) {
    hlo_module *m = p->m;
    const char *k = ta->key ? ta->key : "", *v = ta->value ? ta->value : "";
    int key = attr_key_from_name(k, strlen(k));
    if (strcmp(k, "literal") == 0) key = A_LITERAL;
    hlo_attr *a = add_attr(p, key);
    switch (a->kind) {
    case K_INT: case K_BOOL:
        a->v.i = strcmp(v, "true") == 0 ? 1 : strtoll(v, NULL, 10);
        break;
    case K_IDENTS: {
        /* {a,b,c} */
        size_t cnt = 0, cap = 0;
        const char **w = NULL;
        const char *s = v + (*v == '{');
        while (*s && *s != '}') {
            const char *e = s;
            while (*e && *e != ',' && *e != '}') e++;
            if (cnt == cap) {
                size_t nc = cap ? cap * 2 : 4;
                const char **nw = arena_alloc(&m->arena, nc * sizeof *nw);
                if (cnt) memcpy(nw, w, cnt * sizeof *nw);
                w = nw;
                cap = nc;
            }
            w[cnt++] = graph_intern(m, s, (size_t)(e - s));
            s = *e == ',' ? e + 1 : e;
        }
        a->n = (uint32_t)cnt;
        a->v.strs = w;
        break;
    }
    case K_SHARDING:
        a->v.sharding = hlo_sharding_from_text(m, v, strlen(v));
        break;
    case K_LITERAL:
        a->v.lit = arena_alloc(&m->arena, sizeof *a->v.lit);
        a->v.lit->dtype = in->shape.dtype;
        a->v.lit->count = shape_elements(&in->shape);
        if (strcmp(v, "{...}") == 0) a->v.lit->elided = true;
        else a->v.lit->raw = intern(p, v);
        break;
    case K_IDENT: case K_STRING: case K_BACKEND: case K_RAW:
        a->v.str = intern(p, v);
        if (key == A_RAW) a->raw_key = intern(p, k);
        break;
    default:
        fail(p, "scalify_text_attributes", "attribute '%s' cannot be given as text", k);
    }
}

static int kv_cmp(const void *x, const void *y) {
    const char *const *a = x, *const *b = y;
    int c = strcmp(a[0], b[0]);
    return c ? c : strcmp(a[1], b[1]);
}

/* The instruction's metadata but its op_name, which goes to *op_name. */
static hlo_meta *convert_meta(pb *p, const Xla__OpMetadata *md, const char **op_name) {
    if (!md) return NULL;
#define S(f) (md->f && md->f[0])
    bool any = S(op_type) || S(op_name) || S(source_file) || S(deduplicated_name) || S(scheduling_name) ||
               S(scalify_extra) || md->source_line || md->source_end_line || md->source_column ||
               md->source_end_column || md->stack_frame_id || md->n_profile_type;
    if (!any) return NULL;
    hlo_meta meta, *h = &meta;
    memset(h, 0, sizeof *h);
    h->op_type = S(op_type) ? intern(p, md->op_type) : NULL;
    *op_name = S(op_name) ? graph_copy_repeat(p->m, md->op_name, strlen(md->op_name), &p->last_op_name) : NULL;
    h->source_file = S(source_file) ? intern(p, md->source_file) : NULL;
    h->source_line = md->source_line;
    h->source_end_line = md->source_end_line;
    h->source_column = md->source_column;
    h->source_end_column = md->source_end_column;
    h->stack_frame_id = md->stack_frame_id;
    if (S(scalify_extra)) {
        h->extra = intern(p, md->scalify_extra);
    } else if (md->n_profile_type || S(deduplicated_name) || S(scheduling_name)) {
        /* The other fields in the order and spelling of XLA's metadata printer. */
        strbuf *b = &p->sb;
        sb_reset(b);
        if (md->n_profile_type) {
            sb_puts(b, "profile_type={");
            for (size_t i = 0; i < md->n_profile_type; i++) sb_printf(b, i ? ",%d" : "%d", md->profile_type[i]);
            sb_putc(b, '}');
        }
        if (S(deduplicated_name)) {
            sb_puts(b, b->len ? " deduplicated_name=\"" : "deduplicated_name=\"");
            sb_put_escaped(b, md->deduplicated_name, strlen(md->deduplicated_name));
            sb_putc(b, '"');
        }
        if (S(scheduling_name)) sb_printf(b, "%sscheduling_name=\"%s\"", b->len ? " " : "", md->scheduling_name);
        h->extra = graph_intern(p->m, b->s, b->len);
    }
#undef S
    return graph_share_meta(p->m, h);
}

/* replica_groups (in whichever of XLA's four forms), source_target_pairs. */
static void collective_attrs(pb *p, const Xla__HloInstructionProto *ip) {
    hlo_module *m = p->m;
    /* The newest form present wins, as in XLA. */
    const Xla__CollectiveDeviceListProto *cdl = ip->collective_device_list;
    hlo_groups *g = NULL;
    if (ip->mesh_axes_replica_group_list)
        g = mesh_groups(p, ip->mesh_axes_replica_group_list, "mesh_axes_replica_group_list");
    else if (ip->iota_collective_device_list)
        g = iota_groups(p, ip->iota_collective_device_list, "iota_collective_device_list");
    else if (cdl && cdl->iota_replica_group_list)
        g = iota_groups(p, cdl->iota_replica_group_list, "collective_device_list");
    else if (cdl)
        g = list_groups(p, cdl->replica_groups, cdl->n_replica_groups, "collective_device_list");
    else if (ip->n_replica_groups)
        g = list_groups(p, ip->replica_groups, ip->n_replica_groups, "replica_groups");
    if (g) add_attr(p, A_REPLICA_GROUPS)->v.groups = g;
    size_t n = ip->n_source_target_pairs;
    if (n) {
        if (n > UINT32_MAX / 2) fail(p, "source_target_pairs", "too many pairs");
        g = arena_alloc(&m->arena, sizeof *g);
        g->ngroups = (uint32_t)n;
        g->start = arena_alloc(&m->arena, (n + 1) * sizeof *g->start);
        g->ids = arena_alloc(&m->arena, 2 * n * sizeof *g->ids);
        for (size_t k = 0; k <= n; k++) g->start[k] = (uint32_t)(2 * k);
        for (size_t k = 0; k < n; k++) {
            g->ids[2 * k] = ip->source_target_pairs[k]->source;
            g->ids[2 * k + 1] = ip->source_target_pairs[k]->target;
        }
        add_attr(p, A_SOURCE_TARGET_PAIRS)->v.groups = g;
    }
    /* XLA: a non-positive channel id is no channel. */
    if (ip->channel_id > 0) attr_int(p, A_CHANNEL_ID, ip->channel_id);
    if (ip->use_global_device_ids) attr_int(p, A_USE_GLOBAL_DEVICE_IDS, 1);
    if (ip->constrain_layout) attr_int(p, A_CONSTRAIN_LAYOUT, 1);
}

/* Three numbers per dimension (slices, padding), as K_SLICES / K_PADDING hold them. */
static int64_t *triples(pb *p, int key, size_t n) {
    hlo_attr *a = add_attr(p, key);
    a->n = count32(p, n, attr_key_name(key));
    return a->v.ints = arena_alloc(&p->m->arena, 3 * n * sizeof *a->v.ints);
}

/* Dimension lists: dimensions, slices, padding, dot/gather/scatter numbers. */
static void dimension_attrs(pb *p, const hlo_instr *in, const Xla__HloInstructionProto *ip) {
    if (in->op == OP_IOTA && ip->n_dimensions) attr_int(p, A_IOTA_DIMENSION, ip->dimensions[0]);
    else attr_ints(p, A_DIMENSIONS, ip->dimensions, ip->n_dimensions);
    if (ip->n_slice_dimensions) {
        int64_t *v = triples(p, A_SLICE, ip->n_slice_dimensions);
        for (size_t k = 0; k < ip->n_slice_dimensions; k++, v += 3) {
            const Xla__HloInstructionProto__SliceDimensions *d = ip->slice_dimensions[k];
            v[0] = d->start, v[1] = d->limit, v[2] = d->stride;
        }
    }
    attr_ints(p, A_DYNAMIC_SLICE_SIZES, ip->dynamic_slice_sizes, ip->n_dynamic_slice_sizes);
    if (ip->padding_config && ip->padding_config->n_dimensions) {
        int64_t *v = triples(p, A_PADDING, ip->padding_config->n_dimensions);
        for (size_t k = 0; k < ip->padding_config->n_dimensions; k++, v += 3) {
            const Xla__PaddingConfig__PaddingConfigDimension *d = ip->padding_config->dimensions[k];
            v[0] = d->edge_padding_low, v[1] = d->edge_padding_high, v[2] = d->interior_padding;
        }
    }
    const Xla__DotDimensionNumbers *dd = ip->dot_dimension_numbers;
    if (!dd && ip->ragged_dot_dimension_numbers) dd = ip->ragged_dot_dimension_numbers->dot_dimension_numbers;
    if (dd) {
        attr_ints(p, A_LHS_BATCH_DIMS, dd->lhs_batch_dimensions, dd->n_lhs_batch_dimensions);
        attr_ints(p, A_LHS_CONTRACTING_DIMS, dd->lhs_contracting_dimensions, dd->n_lhs_contracting_dimensions);
        attr_ints(p, A_RHS_BATCH_DIMS, dd->rhs_batch_dimensions, dd->n_rhs_batch_dimensions);
        attr_ints(p, A_RHS_CONTRACTING_DIMS, dd->rhs_contracting_dimensions, dd->n_rhs_contracting_dimensions);
    }
    const Xla__GatherDimensionNumbers *gd = ip->gather_dimension_numbers;
    if (gd) {
        attr_ints(p, A_OFFSET_DIMS, gd->offset_dims, gd->n_offset_dims);
        attr_ints(p, A_COLLAPSED_SLICE_DIMS, gd->collapsed_slice_dims, gd->n_collapsed_slice_dims);
        attr_ints(p, A_START_INDEX_MAP, gd->start_index_map, gd->n_start_index_map);
        attr_ints(p, A_OPERAND_BATCHING_DIMS, gd->operand_batching_dims, gd->n_operand_batching_dims);
        attr_ints(p, A_START_INDICES_BATCHING_DIMS, gd->start_indices_batching_dims,
                  gd->n_start_indices_batching_dims);
        attr_int(p, A_INDEX_VECTOR_DIM, gd->index_vector_dim);
    }
    attr_ints(p, A_SLICE_SIZES, ip->gather_slice_sizes, ip->n_gather_slice_sizes);
    const Xla__ScatterDimensionNumbers *sd = ip->scatter_dimension_numbers;
    if (sd) {
        attr_ints(p, A_UPDATE_WINDOW_DIMS, sd->update_window_dims, sd->n_update_window_dims);
        attr_ints(p, A_INSERTED_WINDOW_DIMS, sd->inserted_window_dims, sd->n_inserted_window_dims);
        attr_ints(p, A_SCATTER_DIMS_TO_OPERAND_DIMS, sd->scatter_dims_to_operand_dims,
                  sd->n_scatter_dims_to_operand_dims);
        attr_ints(p, A_INPUT_BATCHING_DIMS, sd->input_batching_dims, sd->n_input_batching_dims);
        attr_ints(p, A_SCATTER_INDICES_BATCHING_DIMS, sd->scatter_indices_batching_dims,
                  sd->n_scatter_indices_batching_dims);
        attr_int(p, A_INDEX_VECTOR_DIM, sd->index_vector_dim);
    }
    if (ip->window && ip->window->n_dimensions) attr_ident(p, A_WINDOW, window_text(p, ip->window));
    if (ip->convolution_dimension_numbers)
        attr_ident(p, A_DIM_LABELS, dim_labels_text(p, ip->convolution_dimension_numbers));
}

/* Enum-valued attributes, spelled as XLA's printer spells them. */
static void enum_attrs(pb *p, const hlo_instr *in, const Xla__HloInstructionProto *ip) {
    hlo_module *m = p->m;
    const Xla__PrecisionConfig *pc = ip->precision_config;
    if (pc) {
        /* operand_precision only when some operand asks for more than DEFAULT. */
        bool any = false;
        for (size_t k = 0; k < pc->n_operand_precision; k++) any |= pc->operand_precision[k] != 0;
        if (any) {
            hlo_attr *a = add_attr(p, A_OPERAND_PRECISION);
            a->n = count32(p, pc->n_operand_precision, "precision_config");
            a->v.strs = arena_alloc(&m->arena, a->n * sizeof *a->v.strs);
            for (uint32_t k = 0; k < a->n; k++)
                a->v.strs[k] =
                    enum_word(p, &xla__precision_config__precision__descriptor, pc->operand_precision[k], NULL, true);
        }
        if (pc->algorithm)
            attr_ident(p, A_ALGORITHM,
                       enum_word(p, &xla__precision_config__algorithm__descriptor, pc->algorithm, "ALG_", true));
    }
    if (in->op == OP_RNG_BIT_GENERATOR)
        attr_ident(p, A_ALGORITHM, enum_word(p, &xla__random_algorithm__descriptor, ip->rng_algorithm, NULL, true));
    if (in->op == OP_FFT) {
        attr_ident(p, A_FFT_TYPE, enum_word(p, &xla__fft_type__descriptor, ip->fft_type, NULL, false));
        attr_ints(p, A_FFT_LENGTH, ip->fft_length, ip->n_fft_length);
    }
    if (ip->distribution)
        attr_ident(p, A_DISTRIBUTION,
                   enum_word(p, &xla__random_distribution__descriptor, ip->distribution, NULL, true));
    /* API_VERSION_ORIGINAL is XLA's default and has no text. */
    if (ip->custom_call_api_version > 1)
        attr_ident(p, A_API_VERSION,
                   enum_word(p, &xla__custom_call_api_version__descriptor, ip->custom_call_api_version, NULL, false));
    if (ip->custom_call_schedule)
        raw_attr(p, "schedule",
                 enum_word(p, &xla__custom_call_schedule__descriptor, ip->custom_call_schedule, NULL, false));
}

static void convert_instr(pb *p, hlo_comp *c, uint32_t i, const Xla__HloInstructionProto *ip) {
    hlo_module *m = p->m;
    hlo_instr *in = &c->instrs[i];
    p->nattrs = 0;
    if (!ip->opcode || !*ip->opcode) fail(p, "opcode", "missing opcode");
    in->opname = intern(p, ip->opcode);
    in->op = (uint16_t)hlo_op_from_name(in->opname, strlen(in->opname));
    convert_shape(p, ip->shape, &in->shape, "shape");
    in->meta = convert_meta(p, ip->metadata, &in->op_name);

    /* Operands: earlier instructions of this computation. */
    in->noperands = count32(p, ip->n_operand_ids, "operand_ids");
    in->operands = in->noperands ? arena_alloc(&m->arena, in->noperands * sizeof *in->operands) : NULL;
    for (uint32_t o = 0; o < in->noperands; o++) {
        uint32_t idx = lookup_instr(p, ip->operand_ids[o], "operand_ids");
        if (idx >= i) fail(p, "operand_ids", "operand %u (%s) is not defined before its use", o, c->instrs[idx].name);
        in->operands[o] = idx;
    }
    const shape *op0 = in->noperands ? &c->instrs[in->operands[0]].shape : NULL;

    switch (in->op) {
    case OP_PARAMETER: attr_int(p, A_PARAMETER_NUMBER, ip->parameter_number); break;
    case OP_CONSTANT: add_attr(p, A_LITERAL)->v.lit = NULL; break; /* filled last */
    case OP_GET_TUPLE_ELEMENT: attr_int(p, A_INDEX, ip->tuple_index); break;
    default: break;
    }
    if (ip->fusion_kind && *ip->fusion_kind) attr_ident(p, A_KIND, ip->fusion_kind);
    collective_attrs(p, ip);
    dimension_attrs(p, in, ip);
    enum_attrs(p, in, ip);
    if (ip->indices_are_sorted) attr_int(p, A_INDICES_ARE_SORTED, 1);
    if (ip->unique_indices) attr_int(p, A_UNIQUE_INDICES, 1);
    if (ip->comparison_direction && *ip->comparison_direction) attr_ident(p, A_DIRECTION, ip->comparison_direction);
    if (ip->comparison_type && *ip->comparison_type) {
        /* XLA prints type= only when it differs from the operand type's default. */
        const char *dflt = op0 ? default_compare_type(op0->dtype) : NULL;
        if (!dflt || strcmp(dflt, ip->comparison_type) != 0) attr_ident(p, A_COMPARE_TYPE, ip->comparison_type);
    }
    if (ip->comparison_order && *ip->comparison_order) {
        /* Newer XLA says TOTAL or PARTIAL here (beside or instead of
         * type=TOTALORDER) and prints order= when it is not the default for
         * the operand type: PARTIAL for floating types, TOTAL for others. */
        bool fl = op0 && (dtype_is_float(op0->dtype) || dtype_is_complex(op0->dtype));
        if (!op0 || strcmp(fl ? "PARTIAL" : "TOTAL", ip->comparison_order) != 0)
            raw_attr(p, "order", ip->comparison_order);
    }
    if (ip->is_stable) attr_int(p, A_IS_STABLE, 1);
    if (ip->k) attr_int(p, A_K, ip->k);
    if (ip->largest) attr_int(p, A_LARGEST, 1);
    if (ip->epsilon != 0 || ip->feature_index != 0) {
        /* batch normalization: kept as text, as the text reader keeps them
         * (XLA prints a float with six significant digits) */
        char t[64];
        snprintf(t, sizeof t, "%g", (double)ip->epsilon);
        raw_attr(p, "epsilon", t);
        snprintf(t, sizeof t, "%lld", (long long)ip->feature_index);
        raw_attr(p, "feature_index", t);
    }
    if (ip->exponent_bits) attr_int(p, A_EXPONENT_BITS, ip->exponent_bits);
    if (ip->mantissa_bits) attr_int(p, A_MANTISSA_BITS, ip->mantissa_bits);
    /* XLA leaves out group counts of 1. */
    if (ip->feature_group_count > 1 || ip->feature_group_count < 0)
        attr_int(p, A_FEATURE_GROUP_COUNT, ip->feature_group_count);
    if (ip->batch_group_count > 1 || ip->batch_group_count < 0) attr_int(p, A_BATCH_GROUP_COUNT, ip->batch_group_count);
    if (ip->n_called_computation_ids) {
        size_t n = ip->n_called_computation_ids;
        int64_t *idx = arena_alloc(&m->arena, n * sizeof *idx);
        for (size_t k = 0; k < n; k++) idx[k] = lookup_comp(p, ip->called_computation_ids[k]);
        called_attrs(p, in, idx, n, op0 && op0->dtype == DT_PRED);
    }
    if (ip->custom_call_target && *ip->custom_call_target)
        add_attr(p, A_CUSTOM_CALL_TARGET)->v.str = intern(p, ip->custom_call_target);
    if (ip->custom_call_has_side_effect) attr_int(p, A_CUSTOM_CALL_HAS_SIDE_EFFECT, 1);
    if (ip->sharding) {
        hlo_sharding *s = arena_alloc(&m->arena, sizeof *s);
        p->depth = 0;
        convert_sharding(p, ip->sharding, s);
        add_attr(p, A_SHARDING)->v.sharding = s;
    }
    if (ip->n_control_predecessor_ids) {
        hlo_attr *a = add_attr(p, A_CONTROL_PREDECESSORS);
        p->control = true;
        a->n = count32(p, ip->n_control_predecessor_ids, "control_predecessor_ids");
        /* Ids for now: they may name later instructions, resolved by convert_comp. */
        a->v.ints = copy_i64(p, ip->control_predecessor_ids, a->n);
    }
    if (ip->frontend_attributes && ip->frontend_attributes->n_map) {
        const Xla__FrontendAttributes *fa = ip->frontend_attributes;
        hlo_attr *a = add_attr(p, A_FRONTEND_ATTRIBUTES);
        a->n = count32(p, fa->n_map, "frontend_attributes");
        a->v.strs = arena_alloc(&m->arena, 2 * (size_t)a->n * sizeof *a->v.strs);
        for (uint32_t k = 0; k < a->n; k++) {
            a->v.strs[2 * k] = intern(p, fa->map[k]->key);
            a->v.strs[2 * k + 1] = intern(p, fa->map[k]->value);
        }
        /* The map has no order on the wire; XLA prints it sorted by key. */
        qsort(a->v.strs, a->n, 2 * sizeof *a->v.strs, kv_cmp);
    }
    if (ip->backend_config.len)
        add_attr(p, A_BACKEND_CONFIG)->v.str =
            graph_intern(m, (const char *)ip->backend_config.data, ip->backend_config.len);
    /* Attributes XLA prints that the IR keeps as raw text. */
    if (ip->is_host_transfer) raw_attr(p, "is_host_transfer", "true");
    if (ip->result_accuracy && (ip->result_accuracy->mode || ip->result_accuracy->tolerance)) {
        /* as XLA prints it: result_accuracy={mode=highest} or a tolerance */
        const Xla__ResultAccuracy *ra = ip->result_accuracy;
        sb_reset(&p->sb);
        if (ra->tolerance)
            sb_printf(&p->sb, "{tolerance={atol=%g,rtol=%g,ulps=%lld}}", ra->tolerance->atol, ra->tolerance->rtol,
                      (long long)ra->tolerance->ulps);
        else if (ra->mode == 1)
            sb_puts(&p->sb, "{mode=highest}");
        else
            sb_printf(&p->sb, "{mode=%d}", (int)ra->mode);
        raw_attr(p, "result_accuracy", p->sb.s);
    }
    if (ip->async_execution_thread && *ip->async_execution_thread && strcmp(ip->async_execution_thread, "main")) {
        sb_reset(&p->sb);
        sb_printf(&p->sb, "\"%s\"", ip->async_execution_thread);
        raw_attr(p, "async_execution_thread", p->sb.s);
    }
    for (size_t k = 0; k < ip->n_scalify_text_attributes; k++) text_attr(p, in, ip->scalify_text_attributes[k]);
    /* The literal last, so a text form from field 50000 can stand in for it. */
    for (size_t k = 0; k < p->nattrs; k++)
        if (p->attrs[k].key == A_LITERAL && !p->attrs[k].v.lit) {
            p->depth = 0;
            p->attrs[k].v.lit = convert_literal(p, ip->literal, &in->shape);
        }
    if (p->nattrs > UINT16_MAX) fail(p, NULL, "too many attributes");
    graph_share_attrs(m, in, p->attrs, p->nattrs, &p->attrs_kept);
    graph_finalize_instr(m, in);
}

static void instr_key(pb *p, uint32_t c, const Xla__HloComputationProto *cp, uint32_t i, int64_t *id,
                      const char **name, size_t *len);
static const Xla__HloInstructionProto *instr_get(pb *p, uint32_t c, const Xla__HloComputationProto *cp, uint32_t i);

static void convert_comp(pb *p, uint32_t ci, const Xla__HloComputationProto *cp) {
    hlo_module *m = p->m;
    hlo_comp *c = &m->comps[ci];
    p->comp = ci;
    p->instr = UINT32_MAX;
    size_t n = cp->n_instructions;
    if (n == 0) fail(p, "instructions", "computation %s has no instructions", c->name);
    c->ninstrs = count32(p, n, "instructions");
    c->instrs = arena_alloc(&m->arena, n * sizeof *c->instrs);
    /* Ids (in pnum for now) and names first: the ids' range sizes the map. */
    XGROW(p->pnum, p->cappnum, n);
    int64_t lo = INT64_MAX, hi = INT64_MIN;
    for (uint32_t i = 0; i < c->ninstrs; i++) {
        const char *s;
        size_t len;
        p->instr = i;
        instr_key(p, ci, cp, i, &p->pnum[i], &s, &len);
        lo = p->pnum[i] < lo ? p->pnum[i] : lo;
        hi = p->pnum[i] > hi ? p->pnum[i] : hi;
        /* Names are unique, so interning them would only grow the pool. */
        c->instrs[i].name = graph_strndup(p->m, s, len);
    }
    idmap_reset(&p->ids, n, lo, hi);
    strmap_free(&p->names);
    strmap_init(&p->names);
    strmap_reserve(&p->names, n);
    for (uint32_t i = 0; i < c->ninstrs; i++) {
        const char *name = c->instrs[i].name;
        p->instr = i;
        if (!idmap_put(&p->ids, p->pnum[i], i)) fail(p, "id", "instruction id %lld is used twice", (long long)p->pnum[i]);
        if (!strmap_put(&p->names, name, strlen(name), i))
            fail(p, "name", "instruction name '%.80s' is used twice in the computation", name);
    }
    int64_t maxparam = -1;
    p->nparams = 0;
    p->control = false;
    for (uint32_t i = 0; i < c->ninstrs; i++) {
        p->instr = i;
        const Xla__HloInstructionProto *ip = instr_get(p, ci, cp, i);
        convert_instr(p, c, i, ip);
        p->pnum[i] = ip->parameter_number;
        if (c->instrs[i].op == OP_PARAMETER) {
            int64_t k = ip->parameter_number;
            if (k < 0 || k >= (int64_t)n)
                fail(p, "parameter_number", "parameter number %lld out of range", (long long)k);
            if (k > maxparam) maxparam = k;
            XGROW(p->params, p->capparams, p->nparams + 1);
            p->params[p->nparams++] = i;
        }
    }
    /* Parameters 0..max, each exactly once. */
    c->nparams = (uint32_t)(maxparam + 1);
    c->params = c->nparams ? arena_alloc(&m->arena, c->nparams * sizeof *c->params) : NULL;
    for (uint32_t k = 0; k < c->nparams; k++) c->params[k] = UINT32_MAX;
    for (size_t j = 0; j < p->nparams; j++) {
        uint32_t i = p->params[j];
        int64_t k = p->pnum[i];
        p->instr = i;
        if (c->params[k] != UINT32_MAX)
            fail(p, "parameter_number", "parameter number %lld is used twice", (long long)k);
        c->params[k] = i;
    }
    p->instr = UINT32_MAX;
    for (uint32_t k = 0; k < c->nparams; k++)
        if (c->params[k] == UINT32_MAX) fail(p, NULL, "computation %s has no parameter %u", c->name, k);
    /* control-predecessors may name any instruction of the computation. */
    for (uint32_t i = 0; p->control && i < c->ninstrs; i++) {
        hlo_instr *in = &c->instrs[i];
        p->instr = i;
        for (uint32_t a = 0; a < in->nattrs; a++)
            if (in->attrs[a].key == A_CONTROL_PREDECESSORS)
                for (uint32_t k = 0; k < in->attrs[a].n; k++)
                    in->attrs[a].v.ints[k] = lookup_instr(p, in->attrs[a].v.ints[k], "control_predecessor_ids");
    }
    p->instr = UINT32_MAX;
    c->root = c->ninstrs - 1;
    uint32_t r;
    if (idmap_get(&p->ids, cp->root_id, &r)) c->root = r;
    else if (cp->root_id != 0)
        fail(p, "root_id", "root id %lld is not an instruction of %s", (long long)cp->root_id, c->name);
}

static void convert_frames(pb *p, const Xla__StackFrameIndexProto *sf) {
    hlo_module *m = p->m;
    if (!sf) return;
    p->comp = UINT32_MAX;
    m->nfile_names = count32(p, sf->n_file_names, "stack_frame_index.file_names");
    m->file_names = arena_alloc(&m->arena, sf->n_file_names * sizeof *m->file_names + 1);
    for (size_t i = 0; i < sf->n_file_names; i++) m->file_names[i] = intern(p, sf->file_names[i]);
    m->nfunction_names = count32(p, sf->n_function_names, "stack_frame_index.function_names");
    m->function_names = arena_alloc(&m->arena, sf->n_function_names * sizeof *m->function_names + 1);
    for (size_t i = 0; i < sf->n_function_names; i++) m->function_names[i] = intern(p, sf->function_names[i]);
    m->nfile_locs = count32(p, sf->n_file_locations, "stack_frame_index.file_locations");
    m->file_locs = arena_alloc(&m->arena, sf->n_file_locations * sizeof *m->file_locs + 1);
    for (uint32_t i = 0; i < m->nfile_locs; i++) {
        const Xla__StackFrameIndexProto__FileLocation *l = sf->file_locations[i];
        m->file_locs[i] =
            (hlo_file_loc){l->file_name_id, l->function_name_id, l->line, l->column, l->end_line, l->end_column};
        if (l->file_name_id < 1 || (uint32_t)l->file_name_id > m->nfile_names || l->function_name_id < 0 ||
            (uint32_t)l->function_name_id > m->nfunction_names)
            fail(p, "stack_frame_index.file_locations", "file location %u names a missing file or function", i + 1);
    }
    m->nframes = count32(p, sf->n_stack_frames, "stack_frame_index.stack_frames");
    m->frames = arena_alloc(&m->arena, sf->n_stack_frames * sizeof *m->frames + 1);
    for (uint32_t i = 0; i < m->nframes; i++) {
        const Xla__StackFrameIndexProto__StackFrame *f = sf->stack_frames[i];
        m->frames[i] = (hlo_frame){f->file_location_id, f->parent_frame_id};
        if (f->file_location_id < 1 || (uint32_t)f->file_location_id > m->nfile_locs)
            fail(p, "stack_frame_index.stack_frames", "stack frame %u names missing file location %d", i + 1,
                 f->file_location_id);
        if (f->parent_frame_id < 0 || (uint32_t)f->parent_frame_id > m->nframes)
            fail(p, "stack_frame_index.stack_frames", "stack frame %u names missing parent frame %d", i + 1,
                 f->parent_frame_id);
    }
}

/* True when s is one balanced {...} group (quotes respected): XLA prints such
 * a frontend attribute value bare, any other quoted. */
static bool is_braced(const char *s) {
    if (*s != '{') return false;
    int depth = 0;
    bool str = false;
    for (const char *q = s; *q; q++) {
        if (str) {
            if (*q == '\\' && q[1]) q++;
            else if (*q == '"') str = false;
        } else if (*q == '"') {
            str = true;
        } else if (*q == '{' && ++depth > HLO_MAX_NESTING) {
            return false;
        } else if (*q == '}' && --depth == 0) {
            return q[1] == 0;
        }
    }
    return false;
}

/* The module's frontend attributes as the header attribute the text form
 * has: frontend_attributes={key=value,...}, keys sorted, a value bare when
 * it is a braced group, else quoted with C escapes. */
static void module_frontend_attributes(pb *p, const Xla__FrontendAttributes *fa) {
    hlo_module *m = p->m;
    uint32_t n = count32(p, fa->n_map, "frontend_attributes");
    const char **kv = xmalloc(2 * (size_t)n * sizeof *kv);
    for (uint32_t k = 0; k < n; k++) {
        kv[2 * k] = fa->map[k]->key ? fa->map[k]->key : "";
        kv[2 * k + 1] = fa->map[k]->value ? fa->map[k]->value : "";
    }
    qsort(kv, n, 2 * sizeof *kv, kv_cmp);
    sb_reset(&p->sb);
    sb_putc(&p->sb, '{');
    for (uint32_t k = 0; k < n; k++) {
        const char *v = kv[2 * k + 1];
        sb_printf(&p->sb, "%s%s=", k ? "," : "", kv[2 * k]);
        if (is_braced(v)) {
            sb_puts(&p->sb, v);
            continue;
        }
        sb_putc(&p->sb, '"');
        for (const unsigned char *q = (const unsigned char *)v; *q; q++) {
            if (*q == '"' || *q == '\\') sb_printf(&p->sb, "\\%c", *q);
            else if (*q == '\n') sb_puts(&p->sb, "\\n");
            else if (*q < 0x20 || *q == 0x7f) sb_printf(&p->sb, "\\%03o", *q);
            else sb_putc(&p->sb, (char)*q);
        }
        sb_putc(&p->sb, '"');
    }
    sb_putc(&p->sb, '}');
    free(kv);
    m->attrs[m->nattrs++] = (hlo_attr){.key = A_RAW, .kind = K_RAW, .raw_key = intern(p, "frontend_attributes"),
                                       .v.str = graph_intern(m, p->sb.s, p->sb.len)};
}

/* The header attributes the protobuf can tell: the device assignment's
 * counts (num_partitions, replica_count when not 1) and the frontend
 * attributes, as the text header spells them. */
static void module_header(pb *p, const Xla__HloModuleProto *mp) {
    hlo_module *m = p->m;
    m->attrs = arena_alloc(&m->arena, 3 * sizeof *m->attrs);
    const Xla__DeviceAssignmentProto *da = mp->device_assignment;
    if (da && da->computation_count > 0) {
        static const char *const keys[] = {"num_partitions", "replica_count"};
        int32_t v[] = {da->computation_count, da->replica_count};
        for (int k = 0; k < 2; k++) {
            if (k == 1 && v[k] <= 1) continue;
            sb_reset(&p->sb);
            sb_printf(&p->sb, "%d", (int)v[k]);
            m->attrs[m->nattrs++] = (hlo_attr){.key = A_RAW, .kind = K_RAW, .raw_key = intern(p, keys[k]),
                                               .v.str = graph_intern(m, p->sb.s, p->sb.len)};
        }
    }
    if (mp->frontend_attributes && mp->frontend_attributes->n_map)
        module_frontend_attributes(p, mp->frontend_attributes);
}

/* The partitioner's parameter and result shardings (graph.h). */
static void module_spmd_shardings(pb *p, const Xla__HloModuleProto *mp) {
    hlo_module *m = p->m;
    p->comp = UINT32_MAX;
    p->instr = UINT32_MAX;
    if (mp->n_spmd_parameters_shardings) {
        m->nspmd_params = count32(p, mp->n_spmd_parameters_shardings, "spmd_parameters_shardings");
        m->spmd_params = arena_alloc(&m->arena, m->nspmd_params * sizeof *m->spmd_params);
        for (uint32_t k = 0; k < m->nspmd_params; k++)
            convert_sharding(p, mp->spmd_parameters_shardings[k], &m->spmd_params[k]);
    }
    if (mp->spmd_output_sharding) {
        m->spmd_output = arena_alloc(&m->arena, sizeof *m->spmd_output);
        convert_sharding(p, mp->spmd_output_sharding, m->spmd_output);
    }
}

static void convert_module(pb *p, const Xla__HloModuleProto *mp) {
    hlo_module *m = p->m;
    p->comp = UINT32_MAX;
    p->instr = UINT32_MAX;
    m->name = mp->name && *mp->name ? intern(p, mp->name) : "unnamed";
    if (mp->n_computations == 0) fail(p, "computations", "no computations in the module");
    uint32_t n = m->ncomps = count32(p, mp->n_computations, "computations");
    m->comps = arena_alloc(&m->arena, n * sizeof *m->comps);
    p->instr_base = xmalloc(n * sizeof *p->instr_base);
    /* Computation ids and names are known before any instruction needs them. */
    idmap_reset(&p->comp_index, n, 1, 0);
    strmap_free(&p->names);
    strmap_init(&p->names);
    size_t base = 0;
    for (uint32_t c = 0; c < n; c++) {
        const Xla__HloComputationProto *cp = mp->computations[c];
        p->comp = c;
        p->instr_base[c] = base;
        base += cp->n_instructions;
        if (!idmap_put(&p->comp_index, cp->id, c)) fail(p, "id", "computation id %lld is used twice", (long long)cp->id);
        const char *name = m->comps[c].name = intern(p, cp->name);
        if (!strmap_put(&p->names, name, strlen(name), c))
            fail(p, "name", "computation name '%.80s' is used twice", name);
    }
    p->comp = UINT32_MAX;
    /* The entry: by name, else by id, else the last computation (as in text). */
    uint32_t e;
    m->entry = n - 1;
    const char *en = mp->entry_computation_name;
    if (en && *en && strmap_get(&p->names, en, strlen(en), &e)) m->entry = e;
    else if (idmap_get(&p->comp_index, mp->entry_computation_id, &e)) m->entry = e;
    convert_frames(p, mp->stack_frame_index);
    module_header(p, mp);
    module_spmd_shardings(p, mp);
    /* Computations stay in proto order: XLA's printers do not agree on one
     * (pass dumps list callees by first use, as_text in storage order). */
    for (uint32_t c = 0; c < n; c++) convert_comp(p, c, mp->computations[c]);
    m->comps[m->entry].is_entry = true;
}

/* ---- entry point ---- */

/* graph_finalize's findings, at the offset of the instruction or computation
 * message they are about (the module's when neither). */
static size_t where_in_pb(void *ctx, uint32_t comp, uint32_t instr, char *field, size_t nfield) {
    pb *p = ctx;
    size_t off = p->w.module_off;
    int k = snprintf(field, nfield, "%s", p->prefix[0] ? "hlo_module" : "");
    if (comp == UINT32_MAX || comp >= p->w.ncomp) return off;
    size_t g = instr == UINT32_MAX || !p->instr_base ? SIZE_MAX : p->instr_base[comp] + instr;
    snprintf(field + k, nfield - (size_t)k, "%scomputations[%u]", k ? "." : "", comp);
    if (g >= p->w.ninstr) return p->w.comp_off[comp];
    k = (int)strlen(field);
    snprintf(field + k, nfield - (size_t)k, ".instructions[%u]", instr);
    return p->w.instr_off[g];
}

static int finalize(pb *p) { return graph_finalize_at(p->m, p->d, where_in_pb, p); }

/* Forgets a previous walk's counts and offsets. */
static void walk_reset(walker *w) {
    w->bad = w->have_module = false;
    w->cost = w->module_off = 0;
    w->depth = 0;
    w->ncomp = w->ninstr = 0;
}

static bool walk_one(walker *w, int kind) {
    walk_reset(w);
    return walk_message(w, 0, w->n, containers[kind]);
}

/* Walks the input as container *kind, the guess of detect_container. A guess
 * of a module is certain (its name is text, a wrapper's first field never
 * is); a wrapper may also be a module whose name is binary, so then all three
 * readings are walked and the one whose module holds the most instructions
 * wins, the guess on ties. On failure the error is the guess's. The guess is
 * walked last: it is nearly always the winner, and then w already holds its
 * offsets (or its error) without a second walk of a large input. */
static bool walk_as(walker *w, int *kind) {
    int guess = *kind, nread = guess == 0 ? 1 : 3, best = -1;
    bool counts[3];
    size_t instrs[3];
    for (int k = nread - 1; k >= 0; k--) {
        bool ok = walk_one(w, (guess + k) % 3);
        /* Another reading counts only with a module: to a wrapper whose other
         * fields we do not declare, any well-formed bytes would do. */
        counts[k] = ok && (k == 0 || w->have_module);
        instrs[k] = w->ninstr;
    }
    for (int k = 0; k < nread; k++)
        if (counts[k] && (best < 0 || instrs[k] > instrs[best])) best = k;
    if (best < 0) return false;
    if (best != 0) walk_one(w, (guess + best) % 3); /* its offsets, for conversion messages */
    *kind = (guess + best) % 3;
    return true;
}

/* ---- (1+2) the one-pass unpacker ---- */

/* The common case in one pass: the bytes are checked and unpacked together
 * into the message tree protobuf_c_message_unpack would build (in the same
 * arena; unknown fields, which nothing here reads, are skipped rather than
 * kept), charging the walker's memory estimate and noting the walker's
 * offsets. It only answers yes or no. Whatever it is unsure of — every wire
 * error, a singular message field given twice (protobuf-c merges those), a
 * packed bool other than 0 or 1 (protobuf-c versions differ on those), the
 * nesting or memory limit — sends the input down the walker + protobuf-c path, which
 * reports exactly. So what it accepts, both of those accept, with the same
 * result; the pb tests check that on hostile bytes. Instructions, most of a
 * large module's tree, are only framed in that pass (scan_instr): conversion
 * takes their ids and names as it noted them and checks and unpacks each
 * one, when it gets to it, into scratch memory the next one reuses
 * (instr_key, instr_get); if one does not unpack, or conversion fails, the
 * input goes down the careful path after all, which says what is wrong. */

/* One field as it sits on the wire: [v, vend) is the varint, the fixed-size
 * value or the payload of a length-delimited one. */
typedef struct wire_field {
    uint32_t number;
    int wt;
    const uint8_t *v, *vend;
    uint64_t value;  /* the varint (wire type 0) */
} wire_field;

/* A varint of at most max bytes; the byte after it, or NULL when cut off or longer. */
static inline const uint8_t *varint_at(const uint8_t *p, const uint8_t *e, size_t max, uint64_t *v) {
    if (p < e && *p < 0x80) {
        *v = *p;
        return p + 1;
    }
    if (e - p >= 2 && p[1] < 0x80) {
        *v = (uint64_t)(p[0] & 0x7f) | (uint64_t)p[1] << 7;
        return p + 2;
    }
    size_t k = read_varint(p, e, max, v);
    return k ? p + k : NULL;
}

/* The field at *pp (before e), checked as walk_message checks it; advances *pp. */
static inline __attribute__((always_inline)) bool next_field(const uint8_t **pp, const uint8_t *e, wire_field *f) {
    uint64_t tag, len;
    const uint8_t *p = varint_at(*pp, e, 5, &tag);
    if (!p) return false;
    f->number = (uint32_t)(tag >> 3);
    f->wt = (int)(tag & 7);
    if (f->number == 0) return false;
    f->v = p;
    f->value = 0;
    switch (f->wt) {
    case 0:
        if (!(f->vend = varint_at(p, e, 10, &f->value))) return false;
        break;
    case 1: case 5: {
        size_t size = f->wt == 1 ? 8 : 4;
        if ((size_t)(e - p) < size) return false;
        f->vend = p + size;
        break;
    }
    case 2:
        if (!(p = varint_at(p, e, 5, &len)) || len > (uint64_t)(e - p)) return false;
        f->v = p;
        f->vend = p + len;
        break;
    default:
        return false;
    }
    *pp = f->vend;
    return true;
}

/* Bytes per element of a repeated field, as protobuf-c lays arrays out. */
static size_t elt_size(ProtobufCType t) {
    switch (t) {
    case PROTOBUF_C_TYPE_INT64: case PROTOBUF_C_TYPE_SINT64: case PROTOBUF_C_TYPE_SFIXED64:
    case PROTOBUF_C_TYPE_UINT64: case PROTOBUF_C_TYPE_FIXED64: case PROTOBUF_C_TYPE_DOUBLE: return 8;
    case PROTOBUF_C_TYPE_BOOL: return sizeof(protobuf_c_boolean);
    case PROTOBUF_C_TYPE_STRING: return sizeof(char *);
    case PROTOBUF_C_TYPE_BYTES: return sizeof(ProtobufCBinaryData);
    case PROTOBUF_C_TYPE_MESSAGE: return sizeof(void *);
    default: return 4;
    }
}

/* Elements of the packed run [p, e) of a field of type t, checked as
 * walk_packed and protobuf-c check them; false when either would refuse it
 * (or, for bools, when protobuf-c versions would not agree). */
static bool packed_count(ProtobufCType t, const uint8_t *p, const uint8_t *e, size_t *count) {
    int wt = wire_type_of(t);
    size_t len = (size_t)(e - p);
    if (wt == 1 || wt == 5) {
        size_t size = wt == 5 ? 4 : 8;
        *count = len / size;
        return len % size == 0;
    }
    if (t == PROTOBUF_C_TYPE_BOOL) {
        /* protobuf-c takes one byte per bool; newer versions refuse any but 0 and 1 */
        for (const uint8_t *q = p; q < e; q++)
            if (*q > 1) return false;
        *count = len;
        return true;
    }
    size_t c = 0;
    for (const uint8_t *q = p; q < e; c++) {
        uint64_t v;
        if (!(q = varint_at(q, e, 10, &v))) return false;
    }
    *count = c;
    return true;
}

/* Stores one scalar of type t, read from the wire as protobuf-c reads it,
 * at dst. v is the varint's value (wire type 0), [q, qend) its bytes. */
static void store_scalar(ProtobufCType t, void *dst, uint64_t v, const uint8_t *q, const uint8_t *qend) {
    switch (t) {
    case PROTOBUF_C_TYPE_INT32: case PROTOBUF_C_TYPE_UINT32: case PROTOBUF_C_TYPE_ENUM: {
        uint32_t u = (uint32_t)v;
        memcpy(dst, &u, 4);
        return;
    }
    case PROTOBUF_C_TYPE_SINT32: {
        uint32_t u = (uint32_t)v;
        int32_t s = (int32_t)(u >> 1) ^ -(int32_t)(u & 1);
        memcpy(dst, &s, 4);
        return;
    }
    case PROTOBUF_C_TYPE_INT64: case PROTOBUF_C_TYPE_UINT64:
        memcpy(dst, &v, 8);
        return;
    case PROTOBUF_C_TYPE_SINT64: {
        int64_t s = (int64_t)(v >> 1) ^ -(int64_t)(v & 1);
        memcpy(dst, &s, 8);
        return;
    }
    case PROTOBUF_C_TYPE_BOOL: {
        /* Any payload bit set, even one a 64-bit value would drop. */
        protobuf_c_boolean b = 0;
        for (const uint8_t *r = q; r < qend; r++) b |= (*r & 0x7f) != 0;
        *(protobuf_c_boolean *)dst = b;
        return;
    }
    default: /* fixed-size: little-endian on the wire and in memory */
        memcpy(dst, q, (size_t)(qend - q));
        return;
    }
}

/* Field number -> field of one message type, by table for the numbers below
 * FIELD_DIRECT (all of XLA's); scalify's 50000 goes to protobuf-c's search. */
#define FIELD_DIRECT 128
#define FIELD_TABLES 64 /* more than hlo.proto has message types */
typedef struct field_table {
    const ProtobufCMessageDescriptor *d;
    uint16_t at[FIELD_DIRECT]; /* 1 + index into d->fields; 0: no such field */
} field_table;

/* An instruction left on the wire: its id and name (up to the first NUL, as
 * a C string would end; the last of a repeated singular field wins, as when
 * unpacking), read off its top-level fields in the one pass, the end of its
 * payload and how deep it is nested. */
typedef struct lazy_key {
    int64_t id;
    size_t name, nname;  /* offset in the input, length */
    size_t end;
    int depth;
} lazy_key;

struct unpacker {
    walker *w;  /* buf, budget and cost; offsets and counts as a walk leaves them */
    arena *a;   /* where messages go: the tree's arena, or scratch while replaying */
    field_table tables[FIELD_TABLES]; /* open addressing by descriptor, filled on first use */
    /* Instructions are framed in the one pass but checked and unpacked
     * later, one at a time as conversion reaches them, into scratch that
     * each reuses: the tree of a large module is mostly instructions (one
     * computation may hold most of them), and building all of them at once
     * costs more in fresh memory (page faults) than reading their top-level
     * fields twice costs in time. keys[g] holds what conversion looks up
     * first (id, name) and where the payload that w->instr_off[g] starts
     * ends. Should an instruction then not unpack, or conversion fail, the
     * careful path reads the input again and says what is wrong: a later
     * instruction's wire error must win over an earlier one's meaning, as
     * it does there. */
    bool replay;       /* unpacking a noted instruction: its offset is noted already */
    lazy_key *keys;
    size_t nkeys, capkeys;
    arena scratch;
};

/* d's table, or NULL when every slot is taken. */
static const field_table *table_of(unpacker *u, const ProtobufCMessageDescriptor *d) {
    size_t i = (size_t)(((uint64_t)(uintptr_t)d * 0x9e3779b97f4a7c15ull) >> 58);
    for (size_t k = 0; k < FIELD_TABLES; k++, i = (i + 1) % FIELD_TABLES) {
        field_table *t = &u->tables[i];
        if (t->d == d) return t;
        if (t->d) continue;
        t->d = d;
        for (unsigned f = 0; f < d->n_fields && f < UINT16_MAX; f++)
            if (d->fields[f].id < FIELD_DIRECT) t->at[d->fields[f].id] = (uint16_t)(f + 1);
        return t;
    }
    return NULL;
}

static const ProtobufCFieldDescriptor *field_of(const ProtobufCMessageDescriptor *d, const field_table *t,
                                                uint32_t number) {
    if (t && number < FIELD_DIRECT) return t->at[number] ? &d->fields[t->at[number] - 1] : NULL;
    return protobuf_c_message_descriptor_get_field(d, number);
}

static bool fast_charge(unpacker *u, uint64_t bytes) {
    u->w->cost += bytes;
    return u->w->cost <= u->w->budget;
}

/* The offsets walk_message notes for a message of type d starting at start. */
static void note_message(unpacker *u, const ProtobufCMessageDescriptor *d, size_t start) {
    walker *w = u->w;
    if (u->replay) return;
    if (d == &xla__hlo_module_proto__descriptor && !w->have_module) {
        w->have_module = true;
        w->module_off = start;
    }
    if (d == &xla__hlo_computation_proto__descriptor) note_offset(&w->comp_off, &w->ncomp, &w->capcomp, start);
    if (d == &xla__hlo_instruction_proto__descriptor) note_offset(&w->instr_off, &w->ninstr, &w->capinstr, start);
}

static ProtobufCMessage *unpack_message(unpacker *u, const ProtobufCMessageDescriptor *d, const uint8_t *p,
                                        const uint8_t *e, int depth);

/* The capacity of a repeated field's array holding n elements: none for
 * none, else the least power of two that holds max(n, 4). Arrays grow by
 * doubling, so the capacity follows from n and needs no storage; protobuf-c
 * sizes them exactly, which no reader of the tree can tell. */
static size_t array_cap(size_t n) {
    size_t c = n ? 4 : 0;
    while (c < n) c *= 2;
    return c;
}

/* arr (holding n elements of size bytes), or a copy in a, with room for add more. */
static char *array_room(arena *a, char *arr, size_t n, size_t add, size_t size) {
    if (add == 1 && n && (n < 4 || (n & (n - 1)))) return arr; /* not full */
    if (n + add <= array_cap(n)) return arr;
    char *grown = arena_alloc_raw(a, array_cap(n + add) * size); /* read only below the count */
    if (n) memcpy(grown, arr, n * size);
    return grown;
}

/* One value of field f, at wf on the wire, into member. */
static bool unpack_value(unpacker *u, const ProtobufCFieldDescriptor *f, char *member, const wire_field *wf,
                         int depth) {
    size_t len = (size_t)(wf->vend - wf->v);
    switch (f->type) {
    case PROTOBUF_C_TYPE_STRING: {
        if (!fast_charge(u, (uint64_t)len + 1)) return false;
        char *s = arena_alloc_raw(u->a, len + 1);
        memcpy(s, wf->v, len);
        s[len] = 0;
        *(char **)member = s;
        return true;
    }
    case PROTOBUF_C_TYPE_BYTES: {
        if (!fast_charge(u, (uint64_t)len + 1)) return false;
        ProtobufCBinaryData *bd = (ProtobufCBinaryData *)member;
        bd->len = len;
        bd->data = len ? arena_memdup(u->a, wf->v, len) : NULL;
        return true;
    }
    case PROTOBUF_C_TYPE_MESSAGE: {
        ProtobufCMessage **sub = (ProtobufCMessage **)member;
        if (*sub) return false; /* a second one: protobuf-c merges them */
        return (*sub = unpack_message(u, f->descriptor, wf->v, wf->vend, depth + 1)) != NULL;
    }
    default:
        store_scalar(f->type, member, wf->value, wf->v, wf->vend);
        return true;
    }
}

/* The packed run of field f at wf, count elements, appended to array *arr holding *n. */
static void unpack_packed(unpacker *u, const ProtobufCFieldDescriptor *f, char **arr, size_t *n, size_t count,
                          const wire_field *wf) {
    size_t size = elt_size(f->type);
    int wt = wire_type_of(f->type);
    *arr = array_room(u->a, *arr, *n, count, size);
    for (const uint8_t *q = wf->v; q < wf->vend;) {
        uint64_t v = 0;
        const uint8_t *qend = wt == 0 ? varint_at(q, wf->vend, 10, &v) : q + (wt == 5 ? 4 : 8);
        store_scalar(f->type, *arr + (*n)++ * size, v, q, qend);
        q = qend;
    }
}

/* The instruction at [p, e), nested depth deep, noted and its key read off
 * its top-level fields; false when those do not frame. Nothing inside them is
 * looked at: replaying it (instr_get) checks and charges the rest. */
static bool scan_instr(unpacker *u, const uint8_t *p, const uint8_t *e, int depth, lazy_key *key) {
    const uint8_t *buf = u->w->buf;
    note_message(u, &xla__hlo_instruction_proto__descriptor, (size_t)(p - buf));
    *key = (lazy_key){.end = (size_t)(e - buf), .depth = depth};
    for (const uint8_t *q = p; q < e;) {
        wire_field wf;
        if (!next_field(&q, e, &wf)) return false;
        if (wf.number == 1 && wf.wt == 2) {
            const void *nul = memchr(wf.v, 0, (size_t)(wf.vend - wf.v));
            key->name = (size_t)(wf.v - buf);
            key->nname = (size_t)((nul ? (const uint8_t *)nul : wf.vend) - wf.v);
        } else if (wf.number == 35 && wf.wt == 0) {
            key->id = (int64_t)wf.value;
        }
    }
    return true;
}

/* The message of type d at [p, e), nested depth deep; NULL when the careful
 * path must decide. Each field is checked, charged and stored as it comes:
 * repeated fields append (packed runs counted first), sub-messages recurse,
 * payload bytes are copied once. */
static ProtobufCMessage *unpack_message(unpacker *u, const ProtobufCMessageDescriptor *d, const uint8_t *p,
                                        const uint8_t *e, int depth) {
    if (depth > PB_MAX_DEPTH || !fast_charge(u, d->sizeof_message)) return NULL;
    note_message(u, d, (size_t)(p - u->w->buf));
    ProtobufCMessage *m = arena_alloc_raw(u->a, d->sizeof_message);
    d->message_init(m); /* every member */
    const field_table *t = table_of(u, d);
    for (const uint8_t *q = p; q < e;) {
        wire_field wf;
        if (!next_field(&q, e, &wf)) return NULL;
        const ProtobufCFieldDescriptor *f = field_of(d, t, wf.number);
        if (!f) {
            if (!fast_charge(u, (uint64_t)(wf.vend - wf.v) + 48)) return NULL;
            continue;
        }
        int want = wire_type_of(f->type);
        bool repeated = f->label == PROTOBUF_C_LABEL_REPEATED;
        if (wf.wt != want && !(repeated && wf.wt == 2 && want != 2)) return NULL;
        char *member = (char *)m + f->offset;
        if (repeated) {
            size_t *n = (size_t *)((char *)m + f->quantifier_offset), count;
            char **arr = (char **)member;
            if (wf.wt == 2 && want != 2) {
                if (!packed_count(f->type, wf.v, wf.vend, &count) || !fast_charge(u, 8 + (uint64_t)count * 8))
                    return NULL;
                if (count) unpack_packed(u, f, arr, n, count, &wf);
                continue;
            }
            if (!fast_charge(u, 8)) return NULL;
            if (f->descriptor == &xla__hlo_instruction_proto__descriptor && !u->replay) {
                /* Framed now, unpacked by instr_get; the array stays NULL. */
                lazy_key k;
                if (!scan_instr(u, wf.v, wf.vend, depth + 1, &k)) return NULL;
                XGROW(u->keys, u->capkeys, u->nkeys + 1);
                u->keys[u->nkeys++] = k;
                (*n)++;
                continue;
            }
            size_t size = elt_size(f->type);
            *arr = array_room(u->a, *arr, *n, 1, size);
            member = *arr + (*n)++ * size;
            memset(member, 0, size); /* a message slot is looked at first (unpack_value) */
        }
        if (!unpack_value(u, f, member, &wf, depth)) return NULL;
    }
    return m;
}

/* The input unpacked as container kind (detect_container's guess) into a,
 * with w holding what walk_as would leave there; NULL when walk_as and
 * protobuf-c must decide. For a wrapper, walk_as also reads the input as
 * the other two containers; those readings are walked here too (for real
 * dumps they are short: the module they find, if any, is a name read as
 * bytes) and when one of them would win, the careful path takes over. */
static ProtobufCMessage *unpack_fast(unpacker *u, int kind) {
    walker *w = u->w;
    bool rival = false; /* another reading holds a module */
    size_t rival_instrs = 0;
    for (int k = kind == 0 ? 3 : 1; k < 3; k++)
        if (walk_one(w, (kind + k) % 3) && w->have_module && (!rival || w->ninstr > rival_instrs)) {
            rival = true;
            rival_instrs = w->ninstr;
        }
    walk_reset(w);
    ProtobufCMessage *msg = unpack_message(u, containers[kind], w->buf, w->buf + w->n, 0);
    /* walk_as keeps the guess on ties: a rival must hold more instructions */
    return msg && !(rival && rival_instrs > w->ninstr) ? msg : NULL;
}

/* The key of instruction i of computation c (as its index among the module's
 * instructions) when the tree left it out; [*p0, *p1) its bytes on the wire. */
static const lazy_key *lazy_instr(pb *p, uint32_t c, uint32_t i, const uint8_t **p0, const uint8_t **p1) {
    size_t g = p->instr_base[c] + i;
    if (g >= p->u->nkeys || g >= p->w.ninstr) fail(p, NULL, "internal error: instruction %zu was not noted", g);
    *p0 = p->w.buf + p->w.instr_off[g];
    *p1 = p->w.buf + p->u->keys[g].end;
    return &p->u->keys[g];
}

/* Instruction i's id and name (up to its first NUL, as a C string would
 * end; not NUL-terminated): from the tree, or as the one pass noted them. */
static void instr_key(pb *p, uint32_t c, const Xla__HloComputationProto *cp, uint32_t i, int64_t *id,
                      const char **name, size_t *len) {
    if (!p->u) {
        const Xla__HloInstructionProto *ip = cp->instructions[i];
        *id = ip->id;
        *name = ip->name ? ip->name : "";
        *len = strlen(*name);
        return;
    }
    const uint8_t *q, *e;
    const lazy_key *k = lazy_instr(p, c, i, &q, &e);
    *id = k->id;
    *name = (const char *)p->w.buf + k->name;
    *len = k->nname;
}

/* Instruction i, valid until the next call: from the tree, or checked and
 * unpacked from its wire bytes into the scratch arena, which each
 * instruction reuses (when they do not unpack, the careful path decides). */
static const Xla__HloInstructionProto *instr_get(pb *p, uint32_t c, const Xla__HloComputationProto *cp,
                                                 uint32_t i) {
    if (!p->u) return cp->instructions[i];
    unpacker *u = p->u;
    const uint8_t *q, *e;
    arena_reset(&u->scratch);
    u->a = &u->scratch;
    u->replay = true;
    const lazy_key *k = lazy_instr(p, c, i, &q, &e);
    ProtobufCMessage *ip = unpack_message(u, &xla__hlo_instruction_proto__descriptor, q, e, k->depth);
    if (!ip) fail(p, NULL, "the instruction does not unpack");
    return (const Xla__HloInstructionProto *)ip;
}

/* protobuf-c allocates from an arena: one free for the whole message tree. */
static void *pc_alloc(void *data, size_t n) { return arena_alloc(data, n); }
static void pc_free(void *data, void *ptr) { (void)data, (void)ptr; }

static void unpacker_free(unpacker *u) {
    if (!u) return;
    arena_free(&u->scratch);
    free(u->keys);
    free(u);
}

/* The module, or NULL (freed) after a diagnostic. */
static hlo_module *convert(pb *p, const Xla__HloModuleProto *mp) {
    if (setjmp(p->fail) == 0) {
        convert_module(p, mp);
        if (finalize(p) == 0) return p->m;
    }
    graph_free(p->m);
    return NULL;
}

static hlo_module *parse_pb(const uint8_t *buf, size_t n, const char *path, diag *d, bool one_pass) {
    pb *p = xcalloc(1, sizeof *p);
    p->d = d;
    sb_init(&p->sb);
    strmap_init(&p->names);
    walker *w = &p->w;
    w->buf = buf;
    w->n = n;
    w->budget = (uint64_t)n * PB_COST_PER_BYTE + PB_COST_FLOOR;
    int kind = n ? detect_container(buf, n) : 0;
    hlo_module *m = NULL;
    void *msg = NULL;
    p->prefix = "";
    arena unpacked;
    arena_init(&unpacked);
    ProtobufCAllocator alloc = {pc_alloc, pc_free, &unpacked};
    if (n == 0) {
        diag_binary(d, 0, "", "empty input");
    } else if (one_pass) {
        p->u = xcalloc(1, sizeof *p->u);
        p->u->w = w;
        p->u->a = &unpacked;
        arena_init(&p->u->scratch);
        msg = unpack_fast(p->u, kind);
    }
    if (n && !msg) {
        /* The careful path, which says exactly what is wrong. */
        arena_free(&unpacked);
        unpacker_free(p->u);
        p->u = NULL;
        if (!walk_as(w, &kind))
            diag_binary(d, w->err_off, w->err_path, "%s (reading it as %s)", w->err, format_names[kind]);
        else if (!(msg = protobuf_c_message_unpack(containers[kind], &alloc, n, buf)))
            diag_binary(d, 0, "", "protobuf-c could not unpack the %s", format_names[kind]);
    }
    if (msg) {
        const Xla__HloModuleProto *mp = NULL;
        if (kind == 0) mp = msg;
        else if (kind == 1) mp = ((Xla__HloProto *)msg)->hlo_module;
        else if (((Xla__HloSnapshot *)msg)->hlo) mp = ((Xla__HloSnapshot *)msg)->hlo->hlo_module;
        p->prefix = prefixes[kind];
        if (!mp) {
            diag_binary(d, 0, kind == 1 ? "hlo_module" : "hlo.hlo_module", "the %s holds no module",
                        format_names[kind]);
        } else {
            p->m = graph_new();
            arena_expect(&p->m->arena, n / 2 * 7); /* a module takes about 3.2 times its protobuf bytes */
            p->m->format = format_names[kind];
            const char *sp = path ? path : "<input>";
            p->m->source_path = graph_intern(p->m, sp, strlen(sp));
            m = convert(p, mp);
        }
    }
    arena_free(&unpacked);
    unpacker_free(p->u);
    free(w->comp_off);
    free(w->instr_off);
    free(p->attrs);
    free(p->pnum);
    free(p->params);
    free(p->instr_base);
    idmap_free(&p->comp_index);
    sb_free(&p->sb);
    idmap_free(&p->ids);
    strmap_free(&p->names);
    bool retry = p->retry;
    free(p);
    return retry ? parse_pb(buf, n, path, d, false) : m;
}

hlo_module *hlo_parse_pb(const uint8_t *buf, size_t n, const char *path, diag *d) {
    return parse_pb(buf, n, path, d, true);
}

hlo_module *hlo_parse_pb_careful(const uint8_t *buf, size_t n, const char *path, diag *d) {
    return parse_pb(buf, n, path, d, false);
}
