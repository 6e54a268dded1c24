#include "graph.h"

#include <pthread.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- opcode and attribute tables ---- */

static const char *const op_names[OP_COUNT] = {
    [OP_UNKNOWN] = "?",
#define X(id, s) [OP_##id] = s,
    HLO_OPS(X)
#undef X
};

static strmap op_index, key_index;  /* built once (any thread), read-only afterwards */

static void fill_indexes(void) {
    for (int i = 1; i < OP_COUNT; i++) strmap_put(&op_index, op_names[i], strlen(op_names[i]), (uint32_t)i);
    for (int i = 0; i < A_RAW; i++) {
        const char *k = attr_key_name(i);
        strmap_put(&key_index, k, strlen(k), (uint32_t)i);
    }
}

static void build_indexes(void) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, fill_indexes);
}

const char *hlo_op_name(int op) { return op >= 0 && op < OP_COUNT ? op_names[op] : "?"; }

int hlo_op_from_name(const char *s, size_t n) {
    build_indexes();
    uint32_t v;
    return strmap_get(&op_index, s, n, &v) ? (int)v : OP_UNKNOWN;
}

bool hlo_op_is_collective(int op) {
    switch (op) {
    case OP_ALL_GATHER: case OP_ALL_GATHER_START: case OP_ALL_REDUCE:
    case OP_ALL_REDUCE_START: case OP_ALL_TO_ALL: case OP_COLLECTIVE_BROADCAST:
    case OP_COLLECTIVE_PERMUTE: case OP_COLLECTIVE_PERMUTE_START:
    case OP_RAGGED_ALL_TO_ALL: case OP_REDUCE_SCATTER:
        return true;
    default:
        return false;
    }
}

static const struct {
    const char *name;
    attr_kind kind;
} keys[A_COUNT] = {
#define X(id, s, k) [A_##id] = {s, k},
    HLO_ATTRS(X)
#undef X
    [A_RAW] = {"?", K_RAW},
};

const char *attr_key_name(int key) { return key >= 0 && key < A_COUNT ? keys[key].name : "?"; }
attr_kind attr_key_kind(int key) { return key >= 0 && key < A_COUNT ? keys[key].kind : K_RAW; }

int attr_key_from_name(const char *s, size_t n) {
    build_indexes();
    uint32_t v;
    return strmap_get(&key_index, s, n, &v) ? (int)v : A_RAW;
}

const char *reducer_name(int r) {
    static const char *const names[] = {"none", "sum", "prod", "max", "min", "and", "or", "xor", "arg"};
    return r >= 0 && r < (int)ARRAY_LEN(names) ? names[r] : "?";
}

/* ---- module ---- */

hlo_module *graph_new(void) {
    hlo_module *m = xcalloc(1, sizeof *m);
    arena_init(&m->arena);
    arena_init(&m->strs);
    strmap_init(&m->interned);
    strmap_init(&m->metas);
    return m;
}

void graph_free(hlo_module *m) {
    if (!m) return;
    strmap_free(&m->interned);
    strmap_free(&m->metas);
    arena_free(&m->strs);
    arena_free(&m->arena);
    free(m);
}

void graph_put_float(strbuf *b, int dt, double v) {
    if (isnan(v)) { sb_puts(b, signbit(v) ? "-nan" : "nan"); return; }
    if (isinf(v)) { sb_puts(b, v < 0 ? "-inf" : "inf"); return; }
    char buf[64];
    int maxp = dt == DT_F64 || dt == DT_C128 ? 17 : 9;
    for (int prec = 1; prec <= maxp; prec++) {
        snprintf(buf, sizeof buf, "%.*g", prec, v);
        if (strtod(buf, NULL) == v || (maxp == 9 && (float)strtod(buf, NULL) == (float)v)) break;
    }
    sb_puts(b, buf);
}

const char *graph_complex_literal(hlo_module *m, int dt, const char *s, size_t n) {
    strbuf b;
    sb_init(&b);
    for (size_t i = 0; i < n;) {
        char ch = s[i];
        bool num = (ch >= '0' && ch <= '9') || ch == '-' || ch == '+' || ch == '.' || ch == 'n' || ch == 'i';
        if (!num) {
            sb_putc(&b, ch);
            i++;
            continue;
        }
        size_t j = i;
        while (j < n && s[j] != ',' && s[j] != ')' && s[j] != ' ' && s[j] != '}') j++;
        char tok[64];
        size_t len = j - i < sizeof tok - 1 ? j - i : sizeof tok - 1;
        memcpy(tok, s + i, len);
        tok[len] = 0;
        char *end;
        double v = strtod(tok, &end);
        if (*end || end == tok) sb_put(&b, s + i, j - i); /* not a number: as it is */
        else graph_put_float(&b, dt, dt == DT_C64 ? (double)(float)v : v);
        i = j;
    }
    const char *r = graph_intern(m, b.s ? b.s : "", b.len);
    sb_free(&b);
    return r;
}

const char *graph_intern(hlo_module *m, const char *s, size_t n) {
    const char *k = strmap_key(&m->interned, s, n);
    if (k) return k;
    char *copy = arena_strndup(&m->arena, s, n);
    strmap_put(&m->interned, copy, n, 0);
    return copy;
}

hlo_meta *graph_share_meta(hlo_module *m, const hlo_meta *md) {
    /* Consecutive instructions mostly agree (one source line, or none). */
    if (m->last_meta && memcmp(m->last_meta, md, sizeof *md) == 0) return m->last_meta;
    const char *k = strmap_key(&m->metas, (const char *)md, sizeof *md);
    if (!k) {
        k = arena_memdup(&m->arena, md, sizeof *md);
        strmap_put(&m->metas, k, sizeof *md, 0);
    }
    return m->last_meta = (hlo_meta *)k;
}

const char *graph_copy_repeat(hlo_module *m, const char *s, size_t n, const char **last) {
    if (*last && strncmp(*last, s, n) == 0 && (*last)[n] == 0) return *last;
    return *last = graph_strndup(m, s, n);
}

const char *graph_strndup(hlo_module *m, const char *s, size_t n) { return arena_strndup_packed(&m->strs, s, n); }

/* ---- attributes ---- */

uint32_t instr_called(const hlo_module *m, const hlo_instr *in, int key) {
    const hlo_attr *a = instr_attr(in, key);
    /* a K_COMP keeps its one index in ints[0] with n = 0 */
    if (!a || !a->v.ints || (a->kind == K_COMPS && a->n < 1) || a->v.ints[0] < 0 || a->v.ints[0] >= m->ncomps)
        return UINT32_MAX;
    return (uint32_t)a->v.ints[0];
}

const hlo_attr *instr_attr(const hlo_instr *in, int key) {
    for (uint32_t i = 0; i < in->nattrs; i++)
        if (in->attrs[i].key == key) return &in->attrs[i];
    return NULL;
}

int64_t instr_int(const hlo_instr *in, int key, int64_t dflt) {
    const hlo_attr *a = instr_attr(in, key);
    return a ? a->v.i : dflt;
}

const int64_t *instr_ints(const hlo_instr *in, int key, uint32_t *n) {
    const hlo_attr *a = instr_attr(in, key);
    *n = a ? a->n : 0;
    return a ? a->v.ints : NULL;
}

const char *instr_str(const hlo_instr *in, int key) {
    const hlo_attr *a = instr_attr(in, key);
    return a ? a->v.str : NULL;
}

const char *instr_frontend_attr(const hlo_instr *in, const char *key) {
    const hlo_attr *a = instr_attr(in, A_FRONTEND_ATTRIBUTES);
    if (!a || a->kind != K_KV) return NULL;
    for (uint32_t i = 0; i < a->n; i++)
        if (a->v.strs[2 * i] && strcmp(a->v.strs[2 * i], key) == 0) return a->v.strs[2 * i + 1];
    return NULL;
}

int64_t instr_backend_int(const hlo_instr *in, const char *key, int64_t dflt) {
    const char *bc = instr_str(in, A_BACKEND_CONFIG);
    size_t kn = strlen(key);
    for (const char *p = bc; p && (p = strstr(p, key)); p += kn) {
        bool starts = p == bc || p[-1] == '{' || p[-1] == ' ' || p[-1] == ',';
        const char *q = p + kn;
        while (*q == ' ') q++;
        if (starts && *q == '=') return strtoll(q + 1, NULL, 10);
    }
    return dflt;
}

bool instr_is_identity_custom_call(const hlo_instr *in) {
    static const char *names[] = {"Sharding",    "SPMDFullToShardShape", "SPMDShardToFullShape",     "MoveToHost",
                                  "MoveToDevice", "LayoutConstraint",     "annotate_device_placement"};
    const char *t = in->op == OP_CUSTOM_CALL ? instr_str(in, A_CUSTOM_CALL_TARGET) : NULL;
    if (!t || in->noperands != 1) return false;
    if (strncmp(t, "xla.sdy.", 8) == 0) return true;
    for (size_t k = 0; k < sizeof names / sizeof *names; k++)
        if (strcmp(t, names[k]) == 0) return true;
    return false;
}

int instr_reducer(const hlo_module *m, const hlo_instr *in) {
    const hlo_attr *a = instr_attr(in, A_TO_APPLY);
    if (!a || a->v.ints[0] >= m->ncomps) return RED_NONE;
    return m->comps[a->v.ints[0]].reducer;
}

static bool attr_is_default(const hlo_instr *in, const hlo_attr *a) {
    switch (a->kind) {
    case K_INT:
        /* parameter(0) and index=0 are meaningful but equal the proto default;
         * absent means 0 for every integer attribute. */
        return a->v.i == 0;
    case K_BOOL:
        return a->v.i == 0;
    case K_INTS: case K_IDENTS: case K_KV: case K_INSTRS: case K_SLICES:
    case K_PADDING: case K_COMPS:
        return a->n == 0;
    case K_LISTS:
        return a->v.groups->ngroups == 0;
    case K_GROUPS:
        return !a->v.groups->iota && !a->v.groups->mesh && a->v.groups->ngroups == 0;
    case K_STRING: case K_BACKEND:
        return a->v.str[0] == 0;
    default:
        (void)in;
        return false;
    }
}

static int attr_cmp(const void *x, const void *y) {
    const hlo_attr *a = x, *b = y;
    if (a->key != b->key) return a->key < b->key ? -1 : 1;
    return 0;
}

/* Whether op_name component [p, e) names a layer: a stem, then '_' or '.',
 * then a number ("layers.3", "layer_0", "layers_12", "transformer_layer_2"). */
static bool layer_component(const char *p, const char *e) {
    const char *d = e;
    while (d > p && d[-1] >= '0' && d[-1] <= '9') d--;
    return d < e && d - p >= 2 && (d[-1] == '_' || d[-1] == '.');
}

/* The scope of an instruction's op_name (hlo_instr.scope): its path up to the
 * first component that names a layer ("LM/layer_0", "transpose(jvp(LM))/
 * layer_0" for that layer's backward pass, "decoder/layers_3"), else its first
 * component ("embed", "layers.3"), after a leading "jit(...)/". */
static void set_scope(hlo_module *m, hlo_instr *in) {
    in->scope = NULL;
    in->nscope = 0;
    const char *p = in->op_name;
    if (!p) return;
    if (strncmp(p, "jit(", 4) == 0) {
        const char *slash = strchr(p, '/');
        if (!slash) return;
        p = slash + 1;
    }
    const char *e = strchr(p, '/');
    if (!e || e == p) return;
    for (const char *q = p, *qe = e; qe; q = qe + 1, qe = strchr(q, '/'))
        if (layer_component(q, qe)) {
            e = qe;
            break;
        }
    uint32_t n = (uint32_t)(e - p);
    if (n == m->last_nscope && memcmp(p, m->last_scope, n) == 0) p = m->last_scope;
    in->scope = m->last_scope = p;
    in->nscope = m->last_nscope = n;
}

/* The layouts a custom call asks of its operands and the buffers it shares
 * with them change no value, and the two forms spell them differently (the
 * text's operand_layout_constraints and output_to_operand_aliasing, the
 * protobuf's constrain_layout and shapes with layouts): neither reader keeps
 * them. */
static bool layout_only(const hlo_instr *in, const hlo_attr *a) {
    if (in->op != OP_CUSTOM_CALL) return false;
    if (a->key == A_CONSTRAIN_LAYOUT) return true;
    return a->key == A_RAW &&
           (!strcmp(a->raw_key, "operand_layout_constraints") || !strcmp(a->raw_key, "output_to_operand_aliasing"));
}

void graph_finalize_instr(hlo_module *m, hlo_instr *in) {
    set_scope(m, in);
    graph_finalize_attrs(in);
}

void graph_share_attrs(hlo_module *m, hlo_instr *in, hlo_attr *scratch, size_t n, attr_cache *cache) {
    in->attrs = scratch;
    in->nattrs = (uint16_t)n;
    graph_finalize_attrs(in);
    for (uint32_t k = 0; k < in->nattrs && cache; k++) {
        int kind = in->attrs[k].kind;
        if (kind == K_LITERAL || kind == K_COMP || kind == K_COMPS || kind == K_INSTRS) cache = NULL;
    }
    if (cache) {
        const hlo_attr *last = cache->last[in->op];
        bool same = last && cache->nlast[in->op] == in->nattrs;
        for (uint32_t k = 0; k < in->nattrs && same; k++) same = hlo_attr_equal(&last[k], &in->attrs[k]);
        if (same) {
            in->attrs = (hlo_attr *)last;
            return;
        }
    }
    in->attrs = in->nattrs ? arena_memdup(&m->arena, scratch, in->nattrs * sizeof *scratch) : NULL;
    if (cache) {
        cache->last[in->op] = in->attrs;
        cache->nlast[in->op] = in->nattrs;
    }
}

void graph_finalize_attrs(hlo_instr *in) {
    uint32_t w = 0;
    for (uint32_t r = 0; r < in->nattrs; r++)
        if (!attr_is_default(in, &in->attrs[r]) && !layout_only(in, &in->attrs[r])) in->attrs[w++] = in->attrs[r];
    in->nattrs = (uint16_t)w;
    /* Insertion sort: stable (raw attributes keep input order) and lists are short. */
    for (uint32_t i = 1; i < w; i++) {
        hlo_attr t = in->attrs[i];
        uint32_t j = i;
        while (j > 0 && attr_cmp(&in->attrs[j - 1], &t) > 0) {
            in->attrs[j] = in->attrs[j - 1];
            j--;
        }
        in->attrs[j] = t;
    }
}

/* ---- groups ---- */

int graph_group_mode(const hlo_instr *in) {
    bool channel = instr_attr(in, A_CHANNEL_ID) != NULL;
    bool global = instr_int(in, A_USE_GLOBAL_DEVICE_IDS, 0) != 0;
    bool no_global_field = in->op == OP_ALL_TO_ALL || in->op == OP_COLLECTIVE_PERMUTE ||
                           in->op == OP_COLLECTIVE_BROADCAST; /* "absent", not false */
    if (!channel) return GROUPS_CROSS_REPLICA;
    if (no_global_field) return GROUPS_CROSS_PARTITION;
    return global ? GROUPS_FLATTENED_ID : GROUPS_CROSS_REPLICA_AND_PARTITION;
}

bool groups_expandable(const hlo_groups *g) {
    arena a;
    arena_init(&a);
    hlo_groups x = {0};
    groups_expand(g, &a, &x);
    bool ok = x.ngroups > 0 || (!g->iota && !g->mesh);
    arena_free(&a);
    return ok;
}

bool graph_device_groups(const hlo_instr *in, int64_t R, int64_t P, int64_t **ids_out, uint32_t **start_out,
                         uint32_t *ng_out, char *why, size_t nwhy) {
    const hlo_attr *ga = instr_attr(in, A_REPLICA_GROUPS);
    arena a;
    arena_init(&a);
    hlo_groups g = {0};
    if (ga) groups_expand(ga->v.groups, &a, &g);
    if (ga && g.ngroups == 0 && (ga->v.groups->iota || ga->v.groups->mesh)) {
        snprintf(why, nwhy, "replica groups do not expand");
        arena_free(&a);
        return false;
    }
    int mode = graph_group_mode(in);
    int64_t D = R * P;
    /* Empty groups: one group of every replica (partition in cross-partition mode). */
    int64_t lim = mode == GROUPS_CROSS_PARTITION ? P : mode == GROUPS_FLATTENED_ID ? D : R;
    uint32_t ngi = g.ngroups ? g.ngroups : 1;
    int64_t *ids = xmalloc((size_t)(D * 2 + 1) * sizeof *ids);
    uint32_t *start = xmalloc((size_t)(D * 2 + 2) * sizeof *start);
    uint32_t ng = 0, nid = 0;
    bool ok = true;
    int64_t outer = mode == GROUPS_CROSS_REPLICA ? P : mode == GROUPS_CROSS_PARTITION ? R : 1;
    int64_t inner = mode == GROUPS_CROSS_REPLICA_AND_PARTITION ? P : 1;
    for (uint32_t gi = 0; gi < ngi && ok; gi++) {
        int64_t gn = g.ngroups ? (int64_t)(g.start[gi + 1] - g.start[gi]) : lim;
        const int64_t *gids = g.ngroups ? g.ids + g.start[gi] : NULL;
        for (int64_t o = 0; o < outer && ok; o++) {
            start[ng++] = nid;
            for (int64_t k = 0; k < gn && ok; k++) {
                int64_t id = gids ? gids[k] : k;
                if (id < 0 || id >= lim) {
                    snprintf(why, nwhy, "id %lld is not one of the %lld there are", (long long)id, (long long)lim);
                    ok = false;
                    break;
                }
                for (int64_t p = 0; p < inner; p++) {
                    if (nid >= D * 2) {
                        snprintf(why, nwhy, "replica groups name a device twice");
                        ok = false;
                        break;
                    }
                    ids[nid++] = mode == GROUPS_CROSS_REPLICA ? id * P + o
                                 : mode == GROUPS_CROSS_PARTITION ? o * P + id
                                 : mode == GROUPS_CROSS_REPLICA_AND_PARTITION ? id * P + p : id;
                }
            }
        }
    }
    start[ng] = nid;
    arena_free(&a);
    if (!ok) {
        free(ids);
        free(start);
        return false;
    }
    *ids_out = ids;
    *start_out = start;
    *ng_out = ng;
    return true;
}

void iota_tile_ids(const int64_t *reshape, uint32_t nreshape, const int64_t *perm, uint32_t nperm,
                   int64_t *out) {
    /* Walk the transposed array in row-major order; element index idx (over the
     * transposed dims) reads source position sum idx[d] * stride[perm[d]]. */
    int64_t stride[64], idx[64];
    uint32_t r = nreshape;
    if (r > 64) return;
    int64_t total = 1;
    for (uint32_t i = 0; i < r; i++) total *= reshape[i];
    for (uint32_t i = r; i-- > 0;) stride[i] = (i + 1 < r) ? stride[i + 1] * reshape[i + 1] : 1;
    memset(idx, 0, sizeof idx);
    for (int64_t k = 0; k < total; k++) {
        int64_t src = 0;
        for (uint32_t d = 0; d < r; d++) src += idx[d] * stride[nperm == r ? perm[d] : d];
        out[k] = src;
        for (uint32_t d = r; d-- > 0;) {
            if (++idx[d] < reshape[nperm == r ? perm[d] : d]) break;
            idx[d] = 0;
        }
    }
}

static int64_t product(const int64_t *v, uint32_t n) {
    int64_t p = 1;
    for (uint32_t i = 0; i < n; i++)
        if (v[i] <= 0 || !mul_ok(p, v[i], &p)) return -1;
    return p;
}

/* Mesh form: see graph.h. An axis may be selected whole once, or as
 * sub-axes that do not overlap (several of one axis: 'q':(2)2,'q':(1)2 of
 * q=4 names its two halves, minor first). */
static void expand_mesh(const hlo_groups *g, arena *a, hlo_groups *out) {
    int64_t total = product(g->axis_sizes, g->naxes);
    if (total <= 0 || total > GRAPH_MAX_DEVICES || g->naxes > 64 || g->nsel > 64) return;
    int64_t *order = arena_alloc(a, (size_t)total * sizeof *order);
    if (g->device_ids) {
        if (g->ndevice_ids != total) return;
        memcpy(order, g->device_ids, (size_t)total * sizeof *order);
    } else if (g->dev_reshape) {
        if (product(g->dev_reshape, g->ndev_reshape) != total) return;
        iota_tile_ids(g->dev_reshape, g->ndev_reshape, g->dev_perm, g->ndev_perm, order);
    } else {
        for (int64_t k = 0; k < total; k++) order[k] = k;
    }
    /* Per selected reference: its factor of its axis's coordinate c, (c /
     * post) % size (the middle of [pre, size, post], major first); per axis
     * the size its selected factors leave over. */
    int64_t size[64], post[64], rest[64];
    for (uint32_t i = 0; i < g->naxes; i++) rest[i] = g->axis_sizes[i];
    int64_t gsize = 1;
    for (uint32_t k = 0; k < g->nsel; k++) {
        uint32_t ax = g->sel[k].axis;
        if (ax >= g->naxes) return;
        int64_t n = g->axis_sizes[ax], pre = g->sel[k].size ? g->sel[k].pre : 1;
        size[k] = g->sel[k].size ? g->sel[k].size : n;
        if (pre <= 0 || size[k] <= 0 || n % (pre * size[k])) return;
        post[k] = n / (pre * size[k]);
        for (uint32_t j = 0; j < k; j++) /* factors of one axis must not overlap */
            if (g->sel[j].axis == ax && post[k] < post[j] * size[j] && post[j] < post[k] * size[k]) return;
        rest[ax] /= size[k];
        gsize *= size[k];
    }
    int64_t *ids = arena_alloc(a, (size_t)total * sizeof *ids);
    int64_t coord[64];
    memset(coord, 0, sizeof coord);
    for (int64_t k = 0; k < total; k++) {
        /* Position inside the group: row-major over the selected refs in the order
         * written; group number: row-major over what each axis has left (its
         * coordinate with the selected factors taken out, the largest first). */
        int64_t in_group = 0, group = 0;
        for (uint32_t s = 0; s < g->nsel; s++) in_group = in_group * size[s] + (coord[g->sel[s].axis] / post[s]) % size[s];
        for (uint32_t i = 0; i < g->naxes; i++) {
            int64_t left = coord[i];
            for (int64_t bound = INT64_MAX;;) {
                int best = -1;
                for (uint32_t s = 0; s < g->nsel; s++)
                    if (g->sel[s].axis == i && post[s] < bound && (best < 0 || post[s] > post[best])) best = (int)s;
                if (best < 0) break;
                left = left % post[best] + post[best] * (left / (post[best] * size[best]));
                bound = post[best];
            }
            group = group * rest[i] + left;
        }
        ids[group * gsize + in_group] = order[k];
        for (uint32_t i = g->naxes; i-- > 0;) {
            if (++coord[i] < g->axis_sizes[i]) break;
            coord[i] = 0;
        }
    }
    out->ngroups = (uint32_t)(total / gsize);
    out->ids = ids;
    out->start = arena_alloc(a, (out->ngroups + 1) * sizeof *out->start);
    for (uint32_t i = 0; i <= out->ngroups; i++) out->start[i] = (uint32_t)(i * gsize);
}

void groups_expand(const hlo_groups *g, arena *a, hlo_groups *out) {
    if (!g->iota && !g->mesh) {
        *out = *g;
        return;
    }
    memset(out, 0, sizeof *out);
    if (g->mesh) {
        expand_mesh(g, a, out);
        return;
    }
    int64_t total = product(g->reshape, g->nreshape);
    if (total <= 0 || total > GRAPH_MAX_DEVICES || g->group_size <= 0 || total % g->group_size) return;
    int64_t *ids = arena_alloc(a, (size_t)total * sizeof *ids);
    iota_tile_ids(g->reshape, g->nreshape, g->perm, g->nperm, ids);
    out->ngroups = (uint32_t)(total / g->group_size);
    out->ids = ids;
    out->start = arena_alloc(a, (out->ngroups + 1) * sizeof *out->start);
    for (uint32_t i = 0; i <= out->ngroups; i++) out->start[i] = (uint32_t)(i * g->group_size);
}

/* ---- finalize: reducers, locations, checks ---- */

/* A predicate reducer written out (PyTorch/XLA's `all`: select(x != false &&
 * y != false, true, false)) is the boolean function its truth table says:
 * evaluated on the four inputs, over parameters, scalar constants, compare
 * EQ/NE, and, or, xor, not and select only. RED_NONE for anything else. */
#define PRED_TABLE_MAX 32
static int pred_reducer(const hlo_comp *c) {
    if (c->nparams != 2 || c->ninstrs > PRED_TABLE_MAX || c->instrs[c->root].shape.dtype != DT_PRED) return RED_NONE;
    int table = 0;  /* bit 2x+y: f(x, y) */
    for (int xy = 0; xy < 4; xy++) {
        bool v[PRED_TABLE_MAX];
        for (uint32_t i = 0; i < c->ninstrs; i++) {
            const hlo_instr *in = &c->instrs[i];
            if (in->shape.dtype != DT_PRED || in->shape.rank != 0 || in->noperands > 3) return RED_NONE;
            for (uint32_t o = 0; o < in->noperands; o++)
                if (in->operands[o] >= i) return RED_NONE;
            bool a = in->noperands > 0 && v[in->operands[0]], b = in->noperands > 1 && v[in->operands[1]];
            const hlo_attr *la = in->op == OP_CONSTANT ? instr_attr(in, A_LITERAL) : NULL;
            const char *dir = in->op == OP_COMPARE ? instr_str(in, A_DIRECTION) : NULL;
            switch (in->op) {
            case OP_PARAMETER:
                if (i != c->params[0] && i != c->params[1]) return RED_NONE;
                v[i] = (xy >> (i == c->params[0])) & 1;
                break;
            case OP_CONSTANT:
                if (!la || la->v.lit->elided || la->v.lit->raw || la->v.lit->count != 1) return RED_NONE;
                v[i] = la->v.lit->f ? la->v.lit->f[0] != 0 : la->v.lit->i[0] != 0;
                break;
            case OP_COMPARE:
                if (!dir || (strcmp(dir, "EQ") && strcmp(dir, "NE"))) return RED_NONE;
                v[i] = (a == b) == !strcmp(dir, "EQ");
                break;
            case OP_AND: v[i] = a && b; break;
            case OP_OR: v[i] = a || b; break;
            case OP_XOR: v[i] = a != b; break;
            case OP_NOT: v[i] = !a; break;
            case OP_SELECT:
                if (in->noperands != 3) return RED_NONE;
                v[i] = a ? b : v[in->operands[2]];
                break;
            default: return RED_NONE;
            }
        }
        table |= v[c->root] << xy;
    }
    return table == 8 ? RED_AND : table == 14 ? RED_OR : table == 6 ? RED_XOR : RED_NONE;
}

/* A reducer's root may copy the combining op's scalar (JAX's shard_map
 * psum under jit: add then ROOT copy(add)); a copy of the same type is the
 * value itself. The op under those copies, and how many there are. */
static const hlo_instr *reducer_core(const hlo_comp *c, uint32_t *ncopies) {
    const hlo_instr *r = &c->instrs[c->root];
    *ncopies = 0;
    while (r->op == OP_COPY && r->noperands == 1 && *ncopies < c->ninstrs) {
        const hlo_instr *o = &c->instrs[r->operands[0]];
        if (o->shape.dtype != r->shape.dtype || o->shape.rank != 0 || r->shape.rank != 0) break;
        r = o;
        ++*ncopies;
    }
    return r;
}

static int recognise_reducer(const hlo_comp *c) {
    uint32_t ncopies;
    const hlo_instr *root = reducer_core(c, &ncopies);
    if (c->nparams == 2 && c->ninstrs != 3 + ncopies) return pred_reducer(c);
    if (c->nparams != 2 || c->ninstrs != 3 + ncopies) return RED_NONE;
    if (root->noperands != 2 || root->shape.dtype == DT_TUPLE || root->shape.rank != 0)
        return RED_NONE;
    uint32_t a = root->operands[0], b = root->operands[1];
    if (!((a == c->params[0] && b == c->params[1]) || (a == c->params[1] && b == c->params[0])))
        return RED_NONE;
    switch (root->op) {
    case OP_ADD: return RED_SUM;
    case OP_MULTIPLY: return RED_PROD;
    case OP_MAXIMUM: return RED_MAX;
    case OP_MINIMUM: return RED_MIN;
    case OP_AND: return root->shape.dtype == DT_PRED ? RED_AND : RED_NONE;
    case OP_OR: return root->shape.dtype == DT_PRED ? RED_OR : RED_NONE;
    case OP_XOR: return RED_XOR;
    default: return RED_NONE;
    }
}

static void resolve_location(const hlo_module *m, hlo_meta *md) {
    md->src_file = NULL;
    md->src_line = md->src_col = 0;
    if (md->source_file && md->source_file[0]) {
        md->src_file = md->source_file;
        md->src_line = md->source_line;
        md->src_col = md->source_column;
        return;
    }
    int32_t f = md->stack_frame_id;
    if (f <= 0 || (uint32_t)f > m->nframes) return;
    int32_t l = m->frames[f - 1].file_location_id;
    if (l <= 0 || (uint32_t)l > m->nfile_locs) return;
    const hlo_file_loc *loc = &m->file_locs[l - 1];
    if (loc->file_name_id <= 0 || (uint32_t)loc->file_name_id > m->nfile_names) return;
    md->src_file = m->file_names[loc->file_name_id - 1];
    md->src_line = loc->line;
    md->src_col = loc->column;
}

static int check_at(const hlo_module *m, diag *d, graph_where_fn where, void *ctx);

int graph_finalize(hlo_module *m, diag *d) { return graph_finalize_at(m, d, NULL, NULL); }

int graph_finalize_at(hlo_module *m, diag *d, graph_where_fn where, void *ctx) {
    int errors = check_at(m, d, where, ctx);
    if (errors) return errors;
    /* Resolving changes the shared metas: none is shared from here on. */
    strmap_free(&m->metas);
    strmap_init(&m->metas);
    m->last_meta = NULL;
    for (uint32_t c = 0; c < m->ncomps; c++) {
        hlo_comp *comp = &m->comps[c];
        comp->reducer = (uint8_t)recognise_reducer(comp);
        for (uint32_t i = 0; i < comp->ninstrs; i++)
            if (comp->instrs[i].meta) resolve_location(m, comp->instrs[i].meta);
    }
    return 0;
}

/* Where graph_check's findings go: the diag, and for binary input the
 * reader's map from the computation and instruction being checked (cur_*,
 * UINT32_MAX outside one) to a byte offset and field. */
typedef struct checker {
    diag *d;
    graph_where_fn where;
    void *ctx;
    uint32_t cur_comp, cur_instr;
} checker;

/* Reports at a text position when the module came from text (line > 0), else
 * where the reader says the current computation or instruction is. */
static void report_at(checker *k, int *errors, uint32_t line, uint32_t col, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static void report_at(checker *k, int *errors, uint32_t line, uint32_t col, const char *fmt, ...) {
    (*errors)++;
    if (!k->d) return;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (line == 0 && k->where) {
        char field[128] = "";
        size_t off = k->where(k->ctx, k->cur_comp, k->cur_instr, field, sizeof field);
        diag_binary(k->d, off, field, "%s", msg);
    } else {
        diag_pos(k->d, (int)line, (int)col, "%s", msg);
    }
}
#define report(d, errors, ...) report_at(d, errors, 0, 0, __VA_ARGS__)

/* Depth-first search for a cycle in the call graph; colour 1 = on stack. On
 * the way back it sets depth[c]: 1 + the deepest chain of calls below c. */
static bool call_cycle(const hlo_module *m, uint32_t c, uint8_t *colour, uint32_t *stack, uint32_t *depth) {
    /* Iterative to survive deep call chains. stack holds (comp, next instr, next attr). */
    uint32_t sp = 0;
    stack[sp++] = c;
    colour[c] = 1;
    uint32_t *pos = xcalloc(m->ncomps, sizeof *pos);
    bool cyc = false;
    while (sp && !cyc) {
        uint32_t cur = stack[sp - 1];
        const hlo_comp *comp = &m->comps[cur];
        bool pushed = false;
        /* pos[cur] enumerates (instr, attr, element) flattened lazily. */
        while (!pushed && pos[cur] < comp->ninstrs) {
            const hlo_instr *in = &comp->instrs[pos[cur]++];
            for (uint32_t a = 0; a < in->nattrs && !cyc; a++) {
                const hlo_attr *at = &in->attrs[a];
                if (at->kind != K_COMP && at->kind != K_COMPS) continue;
                uint32_t n = at->kind == K_COMP ? 1 : at->n;
                for (uint32_t k = 0; k < n; k++) {
                    uint32_t callee = (uint32_t)at->v.ints[k];
                    if (callee >= m->ncomps) continue;
                    if (colour[callee] == 1) { cyc = true; break; }
                    if (colour[callee] == 0) {
                        /* Revisit this instruction later for its other callees. */
                        pos[cur]--;
                        colour[callee] = 1;
                        stack[sp++] = callee;
                        pushed = true;
                        break;
                    }
                }
                if (pushed) break;
            }
        }
        if (!pushed && !cyc) {
            colour[cur] = 2;
            sp--;
            /* Every callee is finished now (no cycle): cur's depth is one more than theirs. */
            uint32_t d = 0;
            for (uint32_t i = 0; i < comp->ninstrs; i++) {
                const hlo_instr *in = &comp->instrs[i];
                for (uint32_t a = 0; a < in->nattrs; a++) {
                    const hlo_attr *at = &in->attrs[a];
                    if (at->kind != K_COMP && at->kind != K_COMPS) continue;
                    uint32_t n = at->kind == K_COMP ? 1 : at->n;
                    for (uint32_t k = 0; k < n; k++)
                        if ((uint64_t)at->v.ints[k] < m->ncomps && depth[at->v.ints[k]] > d) d = depth[at->v.ints[k]];
                }
            }
            depth[cur] = d + 1;
        }
    }
    free(pos);
    return cyc;
}

/* Names may be missing in protobuf input; messages must not crash on that. */
#define NAME(s) ((s) ? (s) : "(unnamed)")

/* ---- per-opcode structure: the one table every later stage relies on ---- */

/* Operand-count forms beyond a plain [min, max] range. */
enum {
    AR_PLAIN = 0,
    AR_EVEN,     /* reduce, reduce-window: k inputs then k initial values */
    AR_ODD,      /* scatter: k operands, the indices, k updates */
    AR_DSLICE,   /* dynamic-slice: the operand, one scalar index per dimension */
    AR_DUSLICE,  /* dynamic-update-slice: operand, update, one index per dimension */
    AR_BRANCHES, /* conditional: the selector, one operand per branch */
};

/* Computations an opcode must name, and how many parameters each takes. */
enum {
    NEED_NONE = 0,
    NEED_TO_APPLY_N,   /* to_apply taking one parameter per operand (call, map) */
    NEED_TO_APPLY_2,   /* to_apply taking two scalars (all-reduce, reduce-scatter) */
    NEED_REDUCER,      /* to_apply taking 2k parameters for k inputs (reduce, reduce-window) */
    NEED_SORT,         /* to_apply taking two parameters per operand (the comparator) */
    NEED_SCATTER,      /* to_apply taking 2k parameters for k operands */
    NEED_WHILE,        /* condition and body, one parameter each */
    NEED_BRANCHES,     /* true/false computations or branch_computations, one parameter each */
    NEED_SELECT_SCATTER, /* select and scatter, two parameters each */
    NEED_CALLS,        /* calls: the fused or wrapped computation, one parameter per operand */
};

typedef struct op_rule {
    int16_t min, max;  /* operand count; max -1: no upper bound */
    uint8_t form;      /* AR_* */
    uint8_t need;      /* NEED_* */
    bool listed;       /* false: an opcode added to HLO_OPS without a rule here */
} op_rule;

#define VAR (-1)
#define R(lo, hi, form, need) {lo, hi, form, need, true}
#define NULLARY R(0, 0, 0, 0)
#define UNARY R(1, 1, 0, 0)
#define BINARY R(2, 2, 0, 0)
/* Operand counts as XLA's opcode table and verifier define them (variadic ops
 * with the least their shape inference accepts). Opcodes not listed
 * (OP_UNKNOWN) are kept as read: nothing downstream interprets them. */
static const op_rule op_rules[OP_COUNT] = {
    [OP_UNKNOWN] = R(0, VAR, 0, 0),
    /* nullary */
    [OP_CONSTANT] = NULLARY, [OP_IOTA] = NULLARY, [OP_PARAMETER] = NULLARY,
    [OP_PARTITION_ID] = NULLARY, [OP_REPLICA_ID] = NULLARY,
    [OP_RNG_GET_AND_UPDATE_STATE] = NULLARY,
    /* unary */
    [OP_ABS] = UNARY, [OP_BITCAST] = UNARY, [OP_BITCAST_CONVERT] = UNARY,
    [OP_BROADCAST] = UNARY, [OP_CBRT] = UNARY, [OP_CEIL] = UNARY,
    [OP_CHOLESKY] = UNARY, [OP_CLZ] = UNARY, [OP_CONVERT] = UNARY,
    [OP_COPY] = UNARY, [OP_COPY_START] = UNARY, [OP_COPY_DONE] = UNARY,
    [OP_COSINE] = UNARY, [OP_DOMAIN] = UNARY, [OP_ERF] = UNARY,
    [OP_EXP] = UNARY, [OP_EXPM1] = UNARY, [OP_FFT] = UNARY,
    [OP_FLOOR] = UNARY, [OP_GET_DIMENSION_SIZE] = UNARY,
    [OP_GET_TUPLE_ELEMENT] = UNARY, [OP_IMAG] = UNARY, [OP_INFEED] = UNARY,
    [OP_IS_FINITE] = UNARY, [OP_LOG] = UNARY, [OP_LOG1P] = UNARY,
    [OP_LOGISTIC] = UNARY, [OP_NEGATE] = UNARY, [OP_NOT] = UNARY,
    [OP_OPT_BARRIER] = UNARY, [OP_POPCNT] = UNARY, [OP_REAL] = UNARY,
    [OP_RECV] = UNARY, [OP_RECV_DONE] = UNARY, [OP_REDUCE_PRECISION] = UNARY,
    [OP_RESHAPE] = UNARY, [OP_REVERSE] = UNARY, [OP_RNG_BIT_GENERATOR] = UNARY,
    [OP_ROUND_AFZ] = UNARY, [OP_ROUND_EVEN] = UNARY, [OP_RSQRT] = UNARY,
    [OP_SEND_DONE] = UNARY, [OP_SIGN] = UNARY, [OP_SINE] = UNARY,
    [OP_SLICE] = UNARY, [OP_SQRT] = UNARY, [OP_TAN] = UNARY,
    [OP_TANH] = UNARY, [OP_TOPK] = UNARY, [OP_TRANSPOSE] = UNARY,
    [OP_ALL_GATHER_DONE] = UNARY, [OP_ALL_REDUCE_DONE] = UNARY,
    [OP_COLLECTIVE_PERMUTE_DONE] = UNARY, [OP_ASYNC_DONE] = UNARY,
    [OP_WHILE] = R(1, 1, 0, NEED_WHILE),
    /* binary */
    [OP_ADD] = BINARY, [OP_ADD_DEPENDENCY] = BINARY, [OP_AND] = BINARY,
    [OP_ATAN2] = BINARY, [OP_COMPARE] = BINARY, [OP_COMPLEX] = BINARY,
    [OP_DIVIDE] = BINARY, [OP_DOT] = BINARY, [OP_GATHER] = BINARY,
    [OP_MAXIMUM] = BINARY, [OP_MINIMUM] = BINARY, [OP_MULTIPLY] = BINARY,
    [OP_OR] = BINARY, [OP_OUTFEED] = BINARY, [OP_PAD] = BINARY,
    [OP_POWER] = BINARY, [OP_REMAINDER] = BINARY, [OP_RNG] = BINARY,
    [OP_SEND] = BINARY, [OP_SET_DIMENSION_SIZE] = BINARY, [OP_SHIFT_LEFT] = BINARY,
    [OP_SHIFT_RIGHT_ARITHMETIC] = BINARY, [OP_SHIFT_RIGHT_LOGICAL] = BINARY,
    [OP_STOCHASTIC_CONVERT] = BINARY, [OP_SUBTRACT] = BINARY,
    [OP_TRIANGULAR_SOLVE] = BINARY, [OP_XOR] = BINARY, [OP_CONVOLUTION] = BINARY,
    /* fixed, larger */
    [OP_CLAMP] = R(3, 3, 0, 0), [OP_SELECT] = R(3, 3, 0, 0), [OP_RAGGED_DOT] = R(3, 3, 0, 0),
    [OP_SELECT_AND_SCATTER] = R(3, 3, 0, NEED_SELECT_SCATTER), [OP_BATCH_NORM_TRAINING] = R(3, 3, 0, 0),
    [OP_BATCH_NORM_GRAD] = R(5, 5, 0, 0), [OP_BATCH_NORM_INFERENCE] = R(5, 5, 0, 0),
    [OP_RAGGED_ALL_TO_ALL] = R(6, 6, 0, 0),
    /* variadic */
    [OP_AFTER_ALL] = R(0, VAR, 0, 0), [OP_TUPLE] = R(0, VAR, 0, 0), [OP_CUSTOM_CALL] = R(0, VAR, 0, 0),
    [OP_ASYNC_START] = R(0, VAR, 0, NEED_CALLS), [OP_ASYNC_UPDATE] = R(1, VAR, 0, 0),
    [OP_FUSION] = R(0, VAR, 0, NEED_CALLS), [OP_CALL] = R(0, VAR, 0, NEED_TO_APPLY_N),
    [OP_MAP] = R(1, VAR, 0, NEED_TO_APPLY_N),
    [OP_ALL_GATHER] = R(1, VAR, 0, 0), [OP_ALL_GATHER_START] = R(1, VAR, 0, 0),
    [OP_ALL_REDUCE] = R(1, VAR, 0, NEED_TO_APPLY_2), [OP_ALL_REDUCE_START] = R(1, VAR, 0, NEED_TO_APPLY_2),
    [OP_REDUCE_SCATTER] = R(1, VAR, 0, NEED_TO_APPLY_2), [OP_ALL_TO_ALL] = R(1, VAR, 0, 0),
    [OP_COLLECTIVE_BROADCAST] = R(1, VAR, 0, 0), [OP_COLLECTIVE_PERMUTE] = R(1, VAR, 0, 0),
    [OP_COLLECTIVE_PERMUTE_START] = R(1, VAR, 0, 0), [OP_CONCATENATE] = R(1, VAR, 0, 0),
    [OP_DYNAMIC_RESHAPE] = R(1, VAR, 0, 0), [OP_SORT] = R(1, VAR, 0, NEED_SORT),
    [OP_REDUCE] = R(2, VAR, AR_EVEN, NEED_REDUCER), [OP_REDUCE_WINDOW] = R(2, VAR, AR_EVEN, NEED_REDUCER),
    [OP_SCATTER] = R(3, VAR, AR_ODD, NEED_SCATTER),
    [OP_DYNAMIC_SLICE] = R(1, VAR, AR_DSLICE, 0), [OP_DYNAMIC_UPDATE_SLICE] = R(2, VAR, AR_DUSLICE, 0),
    [OP_CONDITIONAL] = R(2, VAR, AR_BRANCHES, NEED_BRANCHES),
};
#undef VAR
#undef R
#undef NULLARY
#undef UNARY
#undef BINARY

bool graph_op_operands(int op, int *min, int *max) {
    if (op < 0 || op >= OP_COUNT || !op_rules[op].listed) return false;
    *min = op_rules[op].min;
    *max = op_rules[op].max;
    return true;
}

/* The computation attribute key names (k-th element), or NULL when absent. */
const hlo_comp *instr_callee(const hlo_module *m, const hlo_instr *in, int key, uint32_t k) {
    const hlo_attr *a = instr_attr(in, key);
    if (!a || (a->kind == K_COMPS && k >= a->n) || (a->kind == K_COMP && k > 0)) return NULL;
    if (a->kind != K_COMP && a->kind != K_COMPS) return NULL;
    int64_t c = a->v.ints[k];
    return c >= 0 && (uint64_t)c < m->ncomps ? &m->comps[c] : NULL;
}

/* The callee named by key, which must take want parameters; false with why. */
static bool need_comp(const hlo_module *m, const hlo_instr *in, int key, uint32_t k, uint32_t want, char *why,
                      size_t nwhy) {
    const hlo_comp *c = instr_callee(m, in, key, k);
    if (!c) {
        snprintf(why, nwhy, "%s needs %s", hlo_op_name(in->op), attr_key_name(key));
        return false;
    }
    if (c->nparams != want) {
        snprintf(why, nwhy, "%s=%s takes %u parameters where %s passes %u", attr_key_name(key), NAME(c->name),
                 c->nparams, hlo_op_name(in->op), want);
        return false;
    }
    return true;
}

/* A reducer computing integers for an op over floats, or floats for one
 * over integers, is no reducer of its values (XLA's verifier refuses it;
 * precision alone may differ: mixed-precision reductions); false with why. */
static bool reducer_kind_ok(const hlo_module *m, const hlo_instr *in, char *why, size_t nwhy) {
    const hlo_comp *c = instr_callee(m, in, A_TO_APPLY, 0);
    if (!c || in->shape.dtype == DT_TUPLE || c->root >= c->ninstrs) return true;
    int rd = c->instrs[c->root].shape.dtype;
    if (rd == DT_TUPLE || dtype_is_float(rd) == dtype_is_float(in->shape.dtype)) return true;
    snprintf(why, nwhy, "to_apply=%s computes %s where %s gives %s", NAME(c->name), dtype_name(rd), hlo_op_name(in->op),
             dtype_name(in->shape.dtype));
    return false;
}

bool graph_op_elementwise(int op) {
    switch (op) {
    case OP_ABS: case OP_ADD: case OP_AND: case OP_ATAN2: case OP_CBRT: case OP_CEIL: case OP_CLAMP: case OP_CLZ:
    case OP_COMPARE: case OP_COMPLEX: case OP_CONVERT: case OP_COSINE: case OP_DIVIDE: case OP_ERF: case OP_EXP:
    case OP_EXPM1: case OP_FLOOR: case OP_IMAG: case OP_IS_FINITE: case OP_LOG: case OP_LOG1P: case OP_LOGISTIC:
    case OP_MAXIMUM: case OP_MINIMUM: case OP_MULTIPLY: case OP_NEGATE: case OP_NOT: case OP_OR: case OP_POPCNT:
    case OP_POWER: case OP_REAL: case OP_REDUCE_PRECISION: case OP_REMAINDER: case OP_ROUND_AFZ: case OP_ROUND_EVEN:
    case OP_RSQRT: case OP_SELECT: case OP_SHIFT_LEFT: case OP_SHIFT_RIGHT_ARITHMETIC: case OP_SHIFT_RIGHT_LOGICAL:
    case OP_SIGN: case OP_SINE: case OP_SQRT: case OP_SUBTRACT: case OP_TAN: case OP_TANH: case OP_XOR:
        return true;
    default:
        return false;
    }
}

static void put_dims(char *buf, size_t n, const shape *s) {
    size_t at = 0;
    buf[0] = 0;
    for (uint32_t d = 0; d < s->rank && at + 24 < n; d++) /* (long shapes end early) */
        at += (size_t)snprintf(buf + at, n - at, "%s%lld", d ? "," : "", (long long)s->dims[d]);
}

/* Operand count, required computations and their parameter counts (op_rules),
 * and a get-tuple-element's index; false with why. */
static bool structure_ok(const hlo_module *m, const hlo_comp *comp, const hlo_instr *in, char *why, size_t nwhy) {
    if (in->op >= OP_COUNT || !op_rules[in->op].listed) return true;
    const op_rule *r = &op_rules[in->op];
    uint32_t n = in->noperands;
    const char *name = hlo_op_name(in->op);
    if (n < (uint32_t)r->min || (r->max >= 0 && n > (uint32_t)r->max)) {
        if (r->max == r->min) snprintf(why, nwhy, "%s takes %d operand%s, not %u", name, r->min, r->min == 1 ? "" : "s", n);
        else if (r->max < 0) snprintf(why, nwhy, "%s takes at least %d operand%s, not %u", name, r->min, r->min == 1 ? "" : "s", n);
        else snprintf(why, nwhy, "%s takes %d to %d operands, not %u", name, r->min, r->max, n);
        return false;
    }
    /* Operands are known to precede the instruction (checked first). */
    const shape *s0 = n ? &comp->instrs[in->operands[0]].shape : NULL;
    if (in->op == OP_TUPLE && (in->shape.dtype != DT_TUPLE || in->shape.ntuple != n || (n && !in->shape.tuple)))
        return snprintf(why, nwhy, "tuple of %u operands must have a tuple type of %u elements", n, n), false;
    switch (r->form) {
    case AR_EVEN:
        if (n % 2) return snprintf(why, nwhy, "%s takes inputs and as many initial values, not %u operands", name, n), false;
        break;
    case AR_ODD:
        if (n % 2 == 0) return snprintf(why, nwhy, "%s takes operands, indices and as many updates, not %u operands", name, n), false;
        break;
    case AR_DSLICE: case AR_DUSLICE: {
        /* One scalar index per dimension, or (XLA's older form, which its
         * shape inference still accepts) one index vector of rank entries. */
        uint32_t fixed = r->form == AR_DSLICE ? 1 : 2;
        uint32_t rank = s0->dtype == DT_TUPLE ? 0 : s0->rank;
        const shape *iv = n == fixed + 1 ? &comp->instrs[in->operands[fixed]].shape : NULL;
        bool vector = iv && iv->dtype != DT_TUPLE && iv->rank == 1 && iv->dims[0] == (int64_t)rank;
        if (n != fixed + rank && !vector)
            return snprintf(why, nwhy, "%s of a rank-%u operand takes %u operands, not %u", name, rank, fixed + rank, n), false;
        break;
    }
    default:
        break;
    }
    if (in->op == OP_ALL_REDUCE || in->op == OP_ALL_GATHER || in->op == OP_REDUCE_SCATTER || in->op == OP_ALL_TO_ALL ||
        in->op == OP_COLLECTIVE_PERMUTE) {
        /* Collectives move arrays; an all-reduce keeps their types. */
        for (uint32_t k = 0; k < n; k++)
            if (comp->instrs[in->operands[k]].shape.dtype == DT_TUPLE)
                return snprintf(why, nwhy, "%s takes arrays, but operand %u is a tuple", name, k), false;
        /* Several operands (a combined collective) give a tuple of as many results. */
        if (n > 1 && (in->shape.dtype != DT_TUPLE || in->shape.ntuple != n || !in->shape.tuple))
            return snprintf(why, nwhy, "%s of %u operands must give a tuple of %u results", name, n, n), false;
        bool same = in->op != OP_ALL_REDUCE || n != 1 || shape_same_array(&in->shape, s0);
        for (uint32_t k = 0; same && in->op == OP_ALL_REDUCE && n > 1 && k < n; k++)
            same = shape_same_array(&in->shape.tuple[k], &comp->instrs[in->operands[k]].shape);
        if (!same) return snprintf(why, nwhy, "%s's result type differs from its operands'", name), false;
    }
    switch (r->need) {
    case NEED_TO_APPLY_N:
        return need_comp(m, in, A_TO_APPLY, 0, n, why, nwhy);
    case NEED_TO_APPLY_2:
        return need_comp(m, in, A_TO_APPLY, 0, 2, why, nwhy) && reducer_kind_ok(m, in, why, nwhy);
    case NEED_REDUCER: case NEED_SCATTER:
        return need_comp(m, in, A_TO_APPLY, 0, r->need == NEED_REDUCER ? n : n - 1, why, nwhy) &&
               reducer_kind_ok(m, in, why, nwhy);
    case NEED_SORT:
        return need_comp(m, in, A_TO_APPLY, 0, 2 * n, why, nwhy);
    case NEED_WHILE: {
        if (!need_comp(m, in, A_CONDITION, 0, 1, why, nwhy) || !need_comp(m, in, A_BODY, 0, 1, why, nwhy)) return false;
        /* One state type throughout: the operand, the result, both
         * computations' parameter and the body's result. */
        const hlo_comp *cond = instr_callee(m, in, A_CONDITION, 0), *body = instr_callee(m, in, A_BODY, 0);
        const shape *st[] = {&in->shape, &cond->instrs[cond->params[0]].shape, &body->instrs[body->params[0]].shape,
                             &body->instrs[body->root].shape};
        static const char *const what[] = {"result", "condition's parameter", "body's parameter", "body's result"};
        for (uint32_t k = 0; k < ARRAY_LEN(st); k++)
            if (!shape_same_array(st[k], s0))
                return snprintf(why, nwhy, "%s's %s type differs from its operand's", name, what[k]), false;
        return true;
    }
    case NEED_SELECT_SCATTER:
        return need_comp(m, in, A_SELECT, 0, 2, why, nwhy) && need_comp(m, in, A_SCATTER, 0, 2, why, nwhy);
    case NEED_CALLS:
        return need_comp(m, in, A_CALLS, 0, n, why, nwhy);
    case NEED_BRANCHES: {
        const hlo_attr *b = instr_attr(in, A_BRANCH_COMPUTATIONS);
        if (!b) {
            if (n != 3) return snprintf(why, nwhy, "%s with true/false computations takes 3 operands, not %u", name, n), false;
            return need_comp(m, in, A_TRUE_COMPUTATION, 0, 1, why, nwhy) &&
                   need_comp(m, in, A_FALSE_COMPUTATION, 0, 1, why, nwhy);
        }
        if (n != b->n + 1)
            return snprintf(why, nwhy, "%s with %u branches takes %u operands, not %u", name, b->n, b->n + 1, n), false;
        for (uint32_t k = 0; k < b->n; k++)
            if (!need_comp(m, in, A_BRANCH_COMPUTATIONS, k, 1, why, nwhy)) return false;
        return true;
    }
    default:
        break;
    }
    if (graph_op_elementwise(in->op) && in->shape.dtype != DT_TUPLE) {
        for (uint32_t k = 0; k < n; k++) {
            const shape *sk = &comp->instrs[in->operands[k]].shape;
            bool scalar_ok = (in->op == OP_SELECT && k == 0) || (in->op == OP_CLAMP && k != 1);
            if (sk->dtype != DT_TUPLE && scalar_ok && sk->rank == 0) continue;
            if (sk->dtype == DT_TUPLE || sk->rank != in->shape.rank ||
                (sk->rank && memcmp(sk->dims, in->shape.dims, sk->rank * sizeof *sk->dims))) {
                char a[64], b[64];
                put_dims(a, sizeof a, sk);
                put_dims(b, sizeof b, &in->shape);
                return snprintf(why, nwhy, "%.40s works element by element, but operand %u has dims [%.60s] and the result [%.60s]",
                                name, k, sk->dtype == DT_TUPLE ? "a tuple" : a, b),
                       false;
            }
        }
    }
    if (in->op == OP_IOTA && in->shape.dtype != DT_TUPLE && in->shape.rank > 0) {
        int64_t k = instr_int(in, A_IOTA_DIMENSION, 0);
        if (k < 0 || k >= (int64_t)in->shape.rank)
            return snprintf(why, nwhy, "iota_dimension %lld of a rank-%u result", (long long)k, in->shape.rank), false;
    }
    if (in->op == OP_GET_TUPLE_ELEMENT) {
        int64_t k = instr_int(in, A_INDEX, 0);
        if (s0->dtype != DT_TUPLE || k < 0 || k >= (int64_t)s0->ntuple)
            return snprintf(why, nwhy, "get-tuple-element index %lld of a %s", (long long)k,
                            s0->dtype == DT_TUPLE ? "shorter tuple" : "non-tuple"), false;
    }
    return true;
}

/* ---- device numbering: permutations, iota shapes, tile assignments ---- */

/* perm (n entries) names each of 0..rank-1 once; n == 0 is the identity. */
static bool is_permutation(const int64_t *perm, uint32_t n, uint32_t rank) {
    if (n == 0) return true;
    if (n != rank || n > GRAPH_MAX_IOTA_RANK) return false;
    uint64_t seen = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (perm[i] < 0 || perm[i] >= (int64_t)n || (seen >> perm[i] & 1)) return false;
        seen |= (uint64_t)1 << perm[i];
    }
    return true;
}

/* An iota order [reshape]T(perm): at most GRAPH_MAX_IOTA_RANK dims, a product
 * of at most GRAPH_MAX_DEVICES, perm a permutation. Its product, or -1. */
static int64_t iota_order_size(const int64_t *reshape, uint32_t nreshape, const int64_t *perm, uint32_t nperm) {
    if (nreshape > GRAPH_MAX_IOTA_RANK || !is_permutation(perm, nperm, nreshape)) return -1;
    int64_t p = product(reshape, nreshape);
    return p > GRAPH_MAX_DEVICES ? -1 : p;
}

/* ids (n entries) are 0..n-1, each once. */
static bool ids_are_permutation(const int64_t *ids, uint32_t n) {
    uint8_t *seen = xcalloc(n ? n : 1, 1);
    bool ok = true;
    for (uint32_t i = 0; i < n && ok; i++) {
        if (ids[i] < 0 || ids[i] >= (int64_t)n || seen[ids[i]]) ok = false;
        else seen[ids[i]] = 1;
    }
    free(seen);
    return ok;
}

/* Replica groups in iota or mesh form describe devices consistently. */
static bool groups_ok(const hlo_groups *g, char *why, size_t nwhy) {
    if (g->mesh) {
        int64_t total = g->naxes <= GRAPH_MAX_IOTA_RANK ? product(g->axis_sizes, g->naxes) : -1;
        if (total <= 0 || total > GRAPH_MAX_DEVICES)
            return snprintf(why, nwhy, "mesh of %u axes holds no devices or more than %d", g->naxes, GRAPH_MAX_DEVICES), false;
        if (g->device_ids && (g->ndevice_ids != total || !ids_are_permutation(g->device_ids, g->ndevice_ids)))
            return snprintf(why, nwhy, "mesh device_ids are not a permutation of the %lld devices", (long long)total), false;
        if (g->dev_reshape && iota_order_size(g->dev_reshape, g->ndev_reshape, g->dev_perm, g->ndev_perm) != total)
            return snprintf(why, nwhy, "mesh device_ids order is not a permutation of the %lld devices", (long long)total), false;
        for (uint32_t k = 0; k < g->nsel; k++)
            if (g->sel[k].axis >= g->naxes) return snprintf(why, nwhy, "mesh group names a missing axis"), false;
        return true;
    }
    if (!g->iota) {
        for (uint32_t k = 0; k < g->ngroups; k++)
            for (uint32_t j = g->start[k]; j < g->start[k + 1]; j++)
                if (g->ids[j] < 0 || g->ids[j] >= GRAPH_MAX_DEVICES)
                    return snprintf(why, nwhy, "device %lld is not one of the %d a module may name", (long long)g->ids[j],
                                    GRAPH_MAX_DEVICES), false;
        return true;
    }
    {
        int64_t total = iota_order_size(g->reshape, g->nreshape, g->perm, g->nperm);
        if (total <= 0 || g->group_size <= 0 || total % g->group_size)
            return snprintf(why, nwhy, "iota replica groups are not a permutation of their devices in groups of %lld",
                            (long long)g->group_size), false;
    }
    return true;
}

/* A tile assignment: its shape's product is the number of devices it lists,
 * at most the module's D, and it lists each of them once. Maximal shardings
 * name one device below D. Tuple shardings are checked element by element;
 * their nesting is bounded by the readers (HLO_MAX_NESTING). */
static bool sharding_ok(const hlo_sharding *s, int64_t D, char *why, size_t nwhy) {
    if (s->type == SH_TUPLE) {
        for (uint32_t k = 0; k < s->ntuple; k++)
            if (!sharding_ok(&s->tuple[k], D, why, nwhy)) return false;
        return true;
    }
    if (s->type == SH_MAXIMAL) {
        for (uint32_t k = 0; k < s->ndevices; k++)
            if (s->devices[k] < 0 || s->devices[k] >= D)
                return snprintf(why, nwhy, "maximal sharding names device %lld of %lld", (long long)s->devices[k], (long long)D), false;
        return true;
    }
    if (s->ntile == 0) return true;
    int64_t total = s->ntile <= GRAPH_MAX_IOTA_RANK ? product(s->tile_dims, s->ntile) : -1;
    if (total <= 0 || total > D)
        return snprintf(why, nwhy, "tile assignment of %u dims holds more devices than the %lld there are (or none)", s->ntile,
                        (long long)D), false;
    if (s->devices) {
        if (s->ndevices != total)
            return snprintf(why, nwhy, "tile assignment lists %u devices for %lld tiles", s->ndevices, (long long)total), false;
        uint8_t *seen = xcalloc((size_t)D, 1);
        bool ok = true;
        for (uint32_t k = 0; k < s->ndevices && ok; k++) {
            if (s->devices[k] < 0 || s->devices[k] >= D || seen[s->devices[k]]) ok = false;
            else seen[s->devices[k]] = 1;
        }
        free(seen);
        if (!ok) return snprintf(why, nwhy, "tile assignment names a device twice or one of more than %lld", (long long)D), false;
    } else if (s->nreshape && iota_order_size(s->reshape, s->nreshape, s->perm, s->nperm) != total) {
        return snprintf(why, nwhy, "tile assignment order is not a permutation of its %lld devices", (long long)total), false;
    }
    return true;
}

/* A dynamic-slice's sizes are its result's dims (XLA infers the one from the
 * other; a dump that disagrees is not a program). */
static bool slice_sizes_are_shape(const hlo_instr *in) {
    uint32_t n;
    const int64_t *v = instr_ints(in, A_DYNAMIC_SLICE_SIZES, &n);
    if (in->shape.dtype == DT_TUPLE || n != in->shape.rank) return false;
    for (uint32_t k = 0; k < n; k++)
        if (v[k] != in->shape.dims[k]) return false;
    return true;
}


/* The first dimension number of in (dimensions, dot, gather and scatter
 * dimension numbers) outside the operand (or, for a broadcast, result) rank it
 * indexes, with its attribute; false when every one is in range. Transfer
 * functions and the interpreter index arrays by these numbers. */
static bool dim_out_of_range(const hlo_comp *comp, const hlo_instr *in, const char **key, int64_t *bad) {
    static const int dot_keys[4] = {A_LHS_BATCH_DIMS, A_LHS_CONTRACTING_DIMS, A_RHS_BATCH_DIMS, A_RHS_CONTRACTING_DIMS};
    int dkeys[5];
    uint32_t nkeys = 0, ranks[5];
    for (uint32_t o = 0; o < in->noperands; o++)
        if (in->operands[o] >= (uint32_t)(in - comp->instrs)) return false; /* reported as such */
#define RANK(o) comp->instrs[in->operands[o]].shape.rank
    switch (in->op) {
    case OP_GATHER: case OP_SCATTER: {
        /* gather(operand, indices); scatter(operands..., indices, updates...) */
        bool g = in->op == OP_GATHER;
        uint32_t k = g ? 1 : (in->noperands - 1) / 2;
        if (in->noperands < 2 || (!g && in->noperands % 2 == 0)) return false;
        for (uint32_t o = 0; o < in->noperands; o++)
            if (comp->instrs[in->operands[o]].shape.dtype == DT_TUPLE) return false;
        uint32_t ro = RANK(0), ri = RANK(k);
        int64_t ivd = instr_int(in, A_INDEX_VECTOR_DIM, 0);
        if (ivd < 0 || ivd > (int64_t)ri) { /* the indices' rank itself: one number per index */
            *key = attr_key_name(A_INDEX_VECTOR_DIM);
            *bad = ivd;
            return true;
        }
        int gk[5] = {A_OFFSET_DIMS, A_COLLAPSED_SLICE_DIMS, A_START_INDEX_MAP, A_OPERAND_BATCHING_DIMS,
                     A_START_INDICES_BATCHING_DIMS};
        int sk[5] = {A_UPDATE_WINDOW_DIMS, A_INSERTED_WINDOW_DIMS, A_SCATTER_DIMS_TO_OPERAND_DIMS, A_INPUT_BATCHING_DIMS,
                     A_SCATTER_INDICES_BATCHING_DIMS};
        uint32_t rk[5] = {g ? in->shape.rank : RANK(k + 1), ro, ro, ro, ri};
        for (uint32_t j = 0; j < 5; j++) dkeys[j] = g ? gk[j] : sk[j], ranks[j] = rk[j];
        nkeys = 5;
        break;
    }
    case OP_TRANSPOSE: case OP_REVERSE: case OP_REDUCE: case OP_CONCATENATE: case OP_ALL_GATHER: case OP_ALL_TO_ALL:
    case OP_REDUCE_SCATTER: case OP_SORT:
        if (!in->noperands || comp->instrs[in->operands[0]].shape.dtype == DT_TUPLE) return false;
        dkeys[0] = A_DIMENSIONS, ranks[0] = comp->instrs[in->operands[0]].shape.rank, nkeys = 1;
        break;
    case OP_BROADCAST:
        dkeys[0] = A_DIMENSIONS, ranks[0] = in->shape.rank, nkeys = 1;
        break;
    case OP_DOT:
        if (in->noperands != 2) return false;
        for (uint32_t k = 0; k < 4; k++) dkeys[k] = dot_keys[k], ranks[k] = RANK(k / 2);
        nkeys = 4;
        break;
    default:
        return false;
    }
#undef RANK
    for (uint32_t k = 0; k < nkeys; k++) {
        uint32_t n;
        const int64_t *v = instr_ints(in, dkeys[k], &n);
        for (uint32_t i = 0; i < n; i++)
            if (v[i] < 0 || v[i] >= (int64_t)ranks[k]) {
                *key = attr_key_name(dkeys[k]);
                *bad = v[i];
                return true;
            }
    }
    return false;
}

/* A transpose names every operand dim once (in range: dim_out_of_range). */
static bool transpose_is_permutation(const hlo_comp *comp, const hlo_instr *in) {
    if (in->noperands != 1 || in->operands[0] >= (uint32_t)(in - comp->instrs)) return true; /* reported as such */
    uint32_t n, rank = comp->instrs[in->operands[0]].shape.rank;
    const int64_t *p = instr_ints(in, A_DIMENSIONS, &n);
    if (n != rank) return false;
    for (uint32_t i = 0; i < n; i++)
        for (uint32_t j = 0; j < i; j++)
            if (p[i] == p[j]) return false;
    return true;
}

/* A broadcast names one result dim for each operand dim, of its size
 * (in range: dim_out_of_range). */
static bool broadcast_maps_operand(const hlo_comp *comp, const hlo_instr *in) {
    if (in->noperands != 1 || in->operands[0] >= (uint32_t)(in - comp->instrs)) return true; /* reported as such */
    const shape *src = &comp->instrs[in->operands[0]].shape;
    if (src->dtype == DT_TUPLE || in->shape.dtype == DT_TUPLE) return true;
    uint32_t n;
    const int64_t *p = instr_ints(in, A_DIMENSIONS, &n);
    if (n != src->rank) return false;
    for (uint32_t i = 0; i < n; i++)
        if (p[i] < 0 || p[i] >= (int64_t)in->shape.rank || in->shape.dims[p[i]] != src->dims[i]) return false;
    return true;
}

static int64_t header_int(const hlo_module *m, const char *key);

int graph_check(const hlo_module *m, diag *dg) { return check_at(m, dg, NULL, NULL); }

static int check_at(const hlo_module *m, diag *dg, graph_where_fn where, void *ctx) {
    checker ck = {dg, where, ctx, UINT32_MAX, UINT32_MAX}, *d = &ck;
    int errors = 0;
    char why[256];
    if (m->ncomps == 0) {
        report(d, &errors, "module has no computations");
        return errors;
    }
    if (m->entry >= m->ncomps) report(d, &errors, "entry computation index %u out of range", m->entry);
    for (uint32_t i = 0; i < m->nframes; i++) {
        const hlo_frame *f = &m->frames[i];
        if (f->file_location_id < 1 || (uint32_t)f->file_location_id > m->nfile_locs)
            report(d, &errors, "stack frame %u names missing file location %d", i + 1, f->file_location_id);
        if (f->parent_frame_id < 0 || (uint32_t)f->parent_frame_id > m->nframes)
            report(d, &errors, "stack frame %u names missing parent frame %d", i + 1, f->parent_frame_id);
    }
    for (uint32_t i = 0; i < m->nfile_locs; i++) {
        const hlo_file_loc *l = &m->file_locs[i];
        if (l->file_name_id < 1 || (uint32_t)l->file_name_id > m->nfile_names ||
            l->function_name_id < 0 || (uint32_t)l->function_name_id > m->nfunction_names)
            report(d, &errors, "file location %u names a missing file or function", i + 1);
    }
    /* Devices: the header's count, else 1 + the largest id the module names;
     * tile assignments must fit in it (the interpreter allocates by them). */
    int64_t parts = header_int(m, "num_partitions"), reps = header_int(m, "replica_count");
    if (parts < 0 || parts > GRAPH_MAX_DEVICES || reps < 0 || reps > GRAPH_MAX_DEVICES ||
        (parts ? parts : 1) * (reps ? reps : 1) > GRAPH_MAX_DEVICES) {
        /* Only text has a header; it is read before the first computation. */
        report_at(d, &errors, 1, 1, "num_partitions %lld x replica_count %lld: more than %d devices", (long long)parts,
                  (long long)reps, GRAPH_MAX_DEVICES);
        return errors;
    }
    int64_t ndev = graph_num_devices(m);
    if (ndev > GRAPH_MAX_DEVICES) ndev = GRAPH_MAX_DEVICES;
    for (uint32_t c = 0; c < m->ncomps; c++) {
        const hlo_comp *comp = &m->comps[c];
        ck.cur_comp = c;
        ck.cur_instr = UINT32_MAX;
        if (comp->ninstrs == 0) {
            report_at(d, &errors, comp->line, comp->col, "computation %s has no instructions", NAME(comp->name));
            continue;
        }
        if (comp->root >= comp->ninstrs)
            report_at(d, &errors, comp->line, comp->col, "computation %s: root out of range", NAME(comp->name));
        for (uint32_t k = 0; k < comp->nparams; k++)
            if (comp->params[k] >= comp->ninstrs || comp->instrs[comp->params[k]].op != OP_PARAMETER)
                report_at(d, &errors, comp->line, comp->col, "computation %s: parameter %u missing", NAME(comp->name), k);
        for (uint32_t i = 0; i < comp->ninstrs; i++) {
            const hlo_instr *in = &comp->instrs[i];
            ck.cur_instr = i;
            for (uint32_t o = 0; o < in->noperands; o++)
                if (in->operands[o] >= i)
                    report_at(d, &errors, in->line, in->col, "%s: operand %u of %s does not precede it", NAME(comp->name), o, NAME(in->name));
            if (shape_check(&in->shape, why, sizeof why))
                report_at(d, &errors, in->line, in->col, "%s: %s: %s", NAME(comp->name), NAME(in->name), why);
            bool ops_precede = true;
            for (uint32_t o = 0; o < in->noperands; o++) ops_precede &= in->operands[o] < i;
            if (ops_precede && !structure_ok(m, comp, in, why, sizeof why)) {
                report_at(d, &errors, in->line, in->col, "%s: %s: %s", NAME(comp->name), NAME(in->name), why);
                continue;
            }
            const char *key;
            int64_t bad;
            if (dim_out_of_range(comp, in, &key, &bad))
                report_at(d, &errors, in->line, in->col, "%s: %s: %s names dimension %lld, out of range", NAME(comp->name),
                          NAME(in->name), key, (long long)bad);
            else if (in->op == OP_TRANSPOSE && !transpose_is_permutation(comp, in))
                report_at(d, &errors, in->line, in->col, "%s: %s: dimensions is not a permutation of the operand's dims",
                          NAME(comp->name), NAME(in->name));
            else if (in->op == OP_BROADCAST && !broadcast_maps_operand(comp, in))
                report_at(d, &errors, in->line, in->col,
                          "%s: %s: dimensions does not map each operand dim to a result dim of its size",
                          NAME(comp->name), NAME(in->name));
            else if (in->op == OP_DYNAMIC_SLICE && !slice_sizes_are_shape(in))
                report_at(d, &errors, in->line, in->col, "%s: %s: dynamic_slice_sizes differ from the result's dims",
                          NAME(comp->name), NAME(in->name));
            for (uint32_t a = 0; a < in->nattrs; a++) {
                const hlo_attr *at = &in->attrs[a];
                if (at->kind == K_COMP || at->kind == K_COMPS) {
                    uint32_t n = at->kind == K_COMP ? 1 : at->n;
                    for (uint32_t k = 0; k < n; k++)
                        if ((uint64_t)at->v.ints[k] >= m->ncomps)
                            report_at(d, &errors, in->line, in->col, "%s: %s calls a missing computation", NAME(comp->name), NAME(in->name));
                }
                if ((at->kind == K_GROUPS || at->kind == K_LISTS) && !groups_ok(at->v.groups, why, sizeof why))
                    report_at(d, &errors, in->line, in->col, "%s: %s: %s: %s", NAME(comp->name), NAME(in->name),
                              attr_key_name(at->key), why);
                if (at->kind == K_SHARDING && !sharding_ok(at->v.sharding, ndev, why, sizeof why))
                    report_at(d, &errors, in->line, in->col, "%s: %s: sharding: %s", NAME(comp->name), NAME(in->name), why);
                if (at->kind == K_INSTRS)
                    for (uint32_t k = 0; k < at->n; k++)
                        if ((uint64_t)at->v.ints[k] >= comp->ninstrs)
                            report_at(d, &errors, in->line, in->col, "%s: %s names a missing instruction", NAME(comp->name),
                                      NAME(in->name));
            }
        }
    }
    if (errors) return errors;
    ck.cur_instr = UINT32_MAX;
    uint8_t *colour = xcalloc(m->ncomps, 1);
    uint32_t *stack = xcalloc(m->ncomps + 1, sizeof *stack);
    uint32_t *depth = xcalloc(m->ncomps, sizeof *depth);
    for (uint32_t c = 0; c < m->ncomps && !errors; c++)
        if (colour[c] == 0 && call_cycle(m, c, colour, stack, depth) && (ck.cur_comp = c, true))
            report_at(d, &errors, m->comps[c].line, m->comps[c].col,
                      "computations call each other in a cycle (through %s)", NAME(m->comps[c].name));
    /* Every later walk over called computations recurses once per level
     * (lifting, the interpreter, printers): the depth budget bounds them all.
     * Reported at the shallowest computation over the limit, whose calls start
     * the chain that is too deep. */
    for (uint32_t c = 0; c < m->ncomps && !errors; c++)
        if (depth[c] == GRAPH_MAX_CALL_DEPTH + 1 && (ck.cur_comp = c, true))
            report_at(d, &errors, m->comps[c].line, m->comps[c].col,
                      "computation %s starts a chain of calls %u levels deep: more than the limit of %d",
                      NAME(m->comps[c].name), depth[c], GRAPH_MAX_CALL_DEPTH);
    free(depth);
    free(colour);
    free(stack);
    return errors;
}

const hlo_comp *graph_entry(const hlo_module *m) {
    return m->entry < m->ncomps ? &m->comps[m->entry] : NULL;
}

uint64_t graph_instr_count(const hlo_module *m) {
    uint64_t n = 0;
    for (uint32_t c = 0; c < m->ncomps; c++) n += m->comps[c].ninstrs;
    return n;
}

static int64_t header_int(const hlo_module *m, const char *key) {
    for (uint32_t i = 0; i < m->nattrs; i++)
        if (m->attrs[i].raw_key && strcmp(m->attrs[i].raw_key, key) == 0)
            return strtoll(m->attrs[i].v.str, NULL, 10);
    return 0;
}

static int64_t sharding_max_device(const hlo_sharding *s) {
    int64_t best = -1;
    if (!s) return best;
    for (uint32_t i = 0; i < s->ndevices; i++)
        if (s->devices[i] > best) best = s->devices[i];
    if (s->nreshape) {
        int64_t t = product(s->reshape, s->nreshape);  /* -1 on overflow: graph_check refuses those */
        if (t - 1 > best) best = t - 1;
    }
    for (uint32_t i = 0; i < s->ntuple; i++) {
        int64_t b = sharding_max_device(&s->tuple[i]);
        if (b > best) best = b;
    }
    return best;
}

int64_t graph_num_replicas(const hlo_module *m) {
    int64_t reps = header_int(m, "replica_count");
    return reps > 0 ? reps : 1;
}

/* The device count the module states (header, else the largest device id a
 * sharding or replica group names, plus one); 0 when nothing states one. */
static int64_t stated_devices(const hlo_module *m) {
    int64_t parts = header_int(m, "num_partitions"), reps = header_int(m, "replica_count");
    if (parts > 0 || reps > 0) return (parts > 0 ? parts : 1) * (reps > 0 ? reps : 1);
    int64_t best = -1;
    for (uint32_t c = 0; c < m->ncomps; c++)
        for (uint32_t i = 0; i < m->comps[c].ninstrs; i++) {
            const hlo_instr *in = &m->comps[c].instrs[i];
            for (uint32_t a = 0; a < in->nattrs; a++) {
                const hlo_attr *at = &in->attrs[a];
                int64_t b = -1;
                if (at->kind == K_SHARDING) b = sharding_max_device(at->v.sharding);
                if (at->kind == K_GROUPS || at->kind == K_LISTS) {
                    const hlo_groups *g = at->v.groups;
                    if (g->mesh) {
                        b = product(g->axis_sizes, g->naxes) - 1;
                    } else if (g->iota) {
                        b = 1;
                        for (uint32_t k = 0; k < g->nreshape; k++) b *= g->reshape[k];
                        b--;
                    } else {
                        for (uint32_t k = 0; k < (g->ngroups ? g->start[g->ngroups] : 0); k++)
                            if (g->ids[k] > b) b = g->ids[k];
                    }
                }
                if (b > best) best = b;
            }
        }
    return best + 1 > 0 ? best + 1 : 0;
}

bool instr_is_constant(const hlo_comp *comp, uint32_t i) {
    const hlo_instr *x = &comp->instrs[i];
    return x->op == OP_CONSTANT || (x->op == OP_BROADCAST && x->noperands == 1 && comp->instrs[x->operands[0]].op == OP_CONSTANT);
}

bool instr_is_zero_literal(const hlo_comp *comp, const hlo_instr *x) {
    while ((x->op == OP_BROADCAST || x->op == OP_RESHAPE || x->op == OP_CONVERT || x->op == OP_COPY) && x->noperands == 1)
        x = &comp->instrs[x->operands[0]];
    const hlo_attr *la = x->op == OP_CONSTANT ? instr_attr(x, A_LITERAL) : NULL;
    if (!la || la->v.lit->elided || la->v.lit->raw) return false;
    for (int64_t k = 0; k < la->v.lit->count; k++)
        if (la->v.lit->f ? la->v.lit->f[k] != 0 : la->v.lit->i[k] != 0) return false;
    return true;
}

const char *instr_op_scope(const hlo_instr *in) {
    if (!in->op_name) return NULL;
    const char *s = in->op_name;
    if (strncmp(s, "jit(", 4) == 0) {
        const char *slash = strchr(s, '/');
        if (slash) return slash + 1;
    }
    return s;
}

int64_t graph_num_devices(const hlo_module *m) {
    int64_t n = stated_devices(m);
    return n > 0 ? n : 1;
}

bool graph_devices_stated(const hlo_module *m) { return stated_devices(m) > 0; }

/* ---- equality ---- */

typedef struct eqctx {
    int flags;
    strbuf *why;
    const char *where_c, *where_i;
} eqctx;

static bool differ(eqctx *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static bool differ(eqctx *e, const char *fmt, ...) {
    if (!e->why) return false;
    if (e->where_c) sb_printf(e->why, "computation %s", e->where_c);
    if (e->where_i) sb_printf(e->why, ", instruction %s", e->where_i);
    if (e->where_c) sb_puts(e->why, ": ");
    va_list ap;
    va_start(ap, fmt);
    sb_vprintf(e->why, fmt, ap);
    va_end(ap);
    return false;
}

static bool str_eq(const char *a, const char *b) {
    if (!a || !b) return a == b;
    return a == b || strcmp(a, b) == 0;
}

static bool ints_eq(const int64_t *a, const int64_t *b, size_t n) {
    return n == 0 || memcmp(a, b, n * sizeof *a) == 0;
}

static bool groups_eq(const hlo_groups *a, const hlo_groups *b) {
    if (a->iota != b->iota || a->mesh != b->mesh) return false;
    if (a->mesh) {
        if (a->naxes != b->naxes || a->nsel != b->nsel || a->ndevice_ids != b->ndevice_ids ||
            a->ndev_reshape != b->ndev_reshape || a->ndev_perm != b->ndev_perm ||
            !ints_eq(a->axis_sizes, b->axis_sizes, a->naxes) ||
            !ints_eq(a->device_ids, b->device_ids, a->ndevice_ids) ||
            !ints_eq(a->dev_reshape, b->dev_reshape, a->ndev_reshape) ||
            !ints_eq(a->dev_perm, b->dev_perm, a->ndev_perm))
            return false;
        for (uint32_t i = 0; i < a->naxes; i++)
            if (!str_eq(a->axis_names[i], b->axis_names[i])) return false;
        for (uint32_t i = 0; i < a->nsel; i++)
            if (a->sel[i].axis != b->sel[i].axis || a->sel[i].pre != b->sel[i].pre || a->sel[i].size != b->sel[i].size)
                return false;
        return true;
    }
    if (a->iota)
        return a->ngroups == b->ngroups && a->group_size == b->group_size &&
               a->nreshape == b->nreshape && a->nperm == b->nperm &&
               ints_eq(a->reshape, b->reshape, a->nreshape) && ints_eq(a->perm, b->perm, a->nperm);
    if (a->ngroups != b->ngroups) return false;
    if (a->ngroups == 0) return true;
    if (memcmp(a->start, b->start, (a->ngroups + 1) * sizeof *a->start)) return false;
    return ints_eq(a->ids, b->ids, a->start[a->ngroups]);
}

static bool sharding_eq(const hlo_sharding *a, const hlo_sharding *b) {
    if (a->type != b->type || a->replicate_last != b->replicate_last) return false;
    if (a->type == SH_RAW) return str_eq(a->raw, b->raw);
    if (a->ntile != b->ntile || a->ndevices != b->ndevices || a->nreshape != b->nreshape ||
        a->nperm != b->nperm || a->nlast != b->nlast || a->ntuple != b->ntuple)
        return false;
    if (!ints_eq(a->tile_dims, b->tile_dims, a->ntile) || !ints_eq(a->devices, b->devices, a->ndevices) ||
        !ints_eq(a->reshape, b->reshape, a->nreshape) || !ints_eq(a->perm, b->perm, a->nperm))
        return false;
    if (a->nlast && memcmp(a->last_tile_dims, b->last_tile_dims, a->nlast * sizeof(int))) return false;
    for (uint32_t i = 0; i < a->ntuple; i++)
        if (!sharding_eq(&a->tuple[i], &b->tuple[i])) return false;
    return true;
}

/* Whether two complex literals kept as text hold the same numbers, however
 * printed ("10" and "1e+01"; XLA's spaces inside nested braces). */
static bool complex_text_eq(const char *a, const char *b) {
    for (;;) {
        while (*a && !strchr("0123456789+-.in", *a)) a++;
        while (*b && !strchr("0123456789+-.in", *b)) b++;
        if (!*a || !*b) return !*a && !*b;
        char *ea, *eb;
        double x = strtod(a, &ea), y = strtod(b, &eb);
        /* a letter that starts no number (the i of a word): the same on both */
        if (ea == a && eb == b && *a == *b) {
            a++, b++;
            continue;
        }
        if (ea == a || eb == b) return false;
        if (!(x == y || (isnan(x) && isnan(y))) || signbit(x) != signbit(y)) return false;
        a = ea, b = eb;
    }
}

static bool literal_eq(const hlo_literal *a, const hlo_literal *b, int flags) {
    if ((a->elided || b->elided) && (flags & GEQ_ELIDED_MATCHES)) return true;
    if (a->elided != b->elided || a->count != b->count || a->dtype != b->dtype) return false;
    if (a->raw && b->raw && dtype_is_complex(a->dtype)) return complex_text_eq(a->raw, b->raw);
    if (a->raw || b->raw) return str_eq(a->raw, b->raw);
    if (a->elided) return true;
    for (int64_t k = 0; k < a->count; k++) {
        if (a->f) {
            double x = a->f[k], y = b->f[k];
            if (!(x == y || (isnan(x) && isnan(y))) || signbit(x) != signbit(y)) return false;
        } else if (a->i[k] != b->i[k]) {
            return false;
        }
    }
    return true;
}

static bool attr_eq(eqctx *e, const hlo_attr *a, const hlo_attr *b) {
    const char *name = a->key == A_RAW ? a->raw_key : attr_key_name(a->key);
    if (a->key != b->key || (a->key == A_RAW && !str_eq(a->raw_key, b->raw_key)))
        return differ(e, "attribute %s vs %s", name, b->key == A_RAW ? b->raw_key : attr_key_name(b->key));
    bool ok = a->n == b->n;
    if (ok) switch (a->kind) {
    case K_INT: case K_BOOL: ok = a->v.i == b->v.i; break;
    case K_INTS: case K_COMPS: case K_INSTRS: ok = ints_eq(a->v.ints, b->v.ints, a->n); break;
    case K_COMP: ok = a->v.ints[0] == b->v.ints[0]; break;
    case K_SLICES: case K_PADDING: ok = ints_eq(a->v.ints, b->v.ints, 3 * (size_t)a->n); break;
    case K_IDENT: case K_STRING: case K_BACKEND: case K_RAW: ok = str_eq(a->v.str, b->v.str); break;
    case K_IDENTS:
        for (uint32_t k = 0; k < a->n && ok; k++) ok = str_eq(a->v.strs[k], b->v.strs[k]);
        break;
    case K_KV:
        for (uint32_t k = 0; k < 2 * a->n && ok; k++) ok = str_eq(a->v.strs[k], b->v.strs[k]);
        break;
    case K_GROUPS: case K_LISTS: ok = groups_eq(a->v.groups, b->v.groups); break;
    case K_SHARDING: ok = sharding_eq(a->v.sharding, b->v.sharding); break;
    case K_LITERAL: ok = literal_eq(a->v.lit, b->v.lit, e->flags); break;
    }
    return ok ? true : differ(e, "attribute %s differs", name);
}

bool hlo_attr_equal(const hlo_attr *a, const hlo_attr *b) {
    eqctx e = {0, NULL, NULL, NULL};
    return attr_eq(&e, a, b);
}

static bool meta_eq(eqctx *e, const hlo_meta *a, const hlo_meta *b) {
    static const hlo_meta none;
    if (!a) a = &none;
    if (!b) b = &none;
    if (!str_eq(a->op_type, b->op_type) || !str_eq(a->source_file, b->source_file) || !str_eq(a->extra, b->extra))
        return differ(e, "metadata strings differ");
    if (a->source_line != b->source_line || a->source_end_line != b->source_end_line ||
        a->source_column != b->source_column || a->source_end_column != b->source_end_column ||
        a->stack_frame_id != b->stack_frame_id)
        return differ(e, "metadata positions differ");
    return true;
}

bool graph_equal(const hlo_module *a, const hlo_module *b, int flags, strbuf *why) {
    eqctx e = {flags, why, NULL, NULL};
    if (!str_eq(a->name, b->name)) return differ(&e, "module names %s vs %s", a->name, b->name);
    if (a->ncomps != b->ncomps) return differ(&e, "%u vs %u computations", a->ncomps, b->ncomps);
    if (a->entry != b->entry) return differ(&e, "entry computations differ");
    if (!(flags & GEQ_IGNORE_HEADER)) {
        if (a->nattrs != b->nattrs) return differ(&e, "header attribute counts differ");
        for (uint32_t i = 0; i < a->nattrs; i++)
            if (!attr_eq(&e, &a->attrs[i], &b->attrs[i])) return false;
    }
    if (a->nfile_names != b->nfile_names || a->nfunction_names != b->nfunction_names ||
        a->nfile_locs != b->nfile_locs || a->nframes != b->nframes)
        return differ(&e, "stack frame tables differ in size");
    for (uint32_t i = 0; i < a->nfile_names; i++)
        if (!str_eq(a->file_names[i], b->file_names[i])) return differ(&e, "file name %u differs", i + 1);
    for (uint32_t i = 0; i < a->nfunction_names; i++)
        if (!str_eq(a->function_names[i], b->function_names[i]))
            return differ(&e, "function name %u differs", i + 1);
    if (a->nfile_locs && memcmp(a->file_locs, b->file_locs, a->nfile_locs * sizeof *a->file_locs))
        return differ(&e, "file locations differ");
    if (a->nframes && memcmp(a->frames, b->frames, a->nframes * sizeof *a->frames))
        return differ(&e, "stack frames differ");
    for (uint32_t c = 0; c < a->ncomps; c++) {
        const hlo_comp *ca = &a->comps[c], *cb = &b->comps[c];
        e.where_c = ca->name;
        e.where_i = NULL;
        if (!str_eq(ca->name, cb->name)) return differ(&e, "name differs (%s)", cb->name);
        if (ca->ninstrs != cb->ninstrs) return differ(&e, "%u vs %u instructions", ca->ninstrs, cb->ninstrs);
        if (ca->root != cb->root) return differ(&e, "roots differ");
        if (ca->nparams != cb->nparams || ca->is_entry != cb->is_entry)
            return differ(&e, "parameters or entry flag differ");
        for (uint32_t i = 0; i < ca->ninstrs; i++) {
            const hlo_instr *ia = &ca->instrs[i], *ib = &cb->instrs[i];
            e.where_i = ia->name;
            if (!str_eq(ia->name, ib->name)) return differ(&e, "name differs (%s)", ib->name);
            if (ia->op != ib->op || !str_eq(ia->opname, ib->opname))
                return differ(&e, "opcode %s vs %s", ia->opname, ib->opname);
            if (!shape_equal(&ia->shape, &ib->shape)) {
                strbuf sa, sbb;
                sb_init(&sa);
                sb_init(&sbb);
                shape_print(&sa, &ia->shape);
                shape_print(&sbb, &ib->shape);
                differ(&e, "shape %s vs %s", sa.s, sbb.s);
                sb_free(&sa);
                sb_free(&sbb);
                return false;
            }
            if (ia->noperands != ib->noperands ||
                (ia->noperands && memcmp(ia->operands, ib->operands, ia->noperands * sizeof *ia->operands)))
                return differ(&e, "operands differ");
            if (ia->nattrs != ib->nattrs) {
                strbuf sa;
                sb_init(&sa);
                for (uint32_t k = 0; k < ia->nattrs; k++)
                    sb_printf(&sa, " %s", ia->attrs[k].key == A_RAW ? ia->attrs[k].raw_key : attr_key_name(ia->attrs[k].key));
                sb_puts(&sa, " |");
                for (uint32_t k = 0; k < ib->nattrs; k++)
                    sb_printf(&sa, " %s", ib->attrs[k].key == A_RAW ? ib->attrs[k].raw_key : attr_key_name(ib->attrs[k].key));
                differ(&e, "%u vs %u attributes:%s", ia->nattrs, ib->nattrs, sa.s);
                sb_free(&sa);
                return false;
            }
            for (uint32_t k = 0; k < ia->nattrs; k++)
                if (!attr_eq(&e, &ia->attrs[k], &ib->attrs[k])) return false;
            if (!meta_eq(&e, ia->meta, ib->meta)) return false;
            if (!str_eq(ia->op_name, ib->op_name)) return differ(&e, "metadata strings differ");
        }
    }
    return true;
}
