/* view — meshes, views, relations files and relations from sharding
 * annotations. The contract is in view.h; this file keeps three parts apart:
 * views (print/parse), relations_read (JSON) and relations_auto (HLO
 * shardings, Shardy meshes). */
#include "view.h"

#include <ctype.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io.h"

/* Largest mesh we accept (devices); keeps tile assignments and products small. */
#define MESH_MAX_DEVICES (1 << 20)

/* ---- mesh ---- */

int64_t mesh_devices(const mesh *m) {
    int64_t p = 1;
    for (uint32_t a = 0; a < m->naxes && a < MESH_MAX_AXES; a++)
        if (m->sizes[a] <= 0 || !mul_ok(p, m->sizes[a], &p)) return -1;
    return p;
}

int mesh_axis(const mesh *m, const char *name, size_t n) {
    for (uint32_t a = 0; a < m->naxes && a < MESH_MAX_AXES; a++)
        if (strlen(m->names[a]) == n && memcmp(m->names[a], name, n) == 0) return (int)a;
    return -1;
}

/* Device-id distance between neighbours on axis a (iota order). */
static int64_t mesh_stride(const mesh *m, int a) {
    int64_t s = 1;
    for (uint32_t b = (uint32_t)a + 1; b < m->naxes; b++) s *= m->sizes[b];
    return s;
}

int64_t mesh_coord(const mesh *m, int64_t dev, int a) {
    if (a < 0 || (uint32_t)a >= m->naxes || m->sizes[a] <= 0) return 0;
    return (dev / mesh_stride(m, a)) % m->sizes[a];
}

void mesh_print(strbuf *b, const mesh *m) {
    sb_putc(b, '{');
    for (uint32_t a = 0; a < m->naxes && a < MESH_MAX_AXES; a++)
        sb_printf(b, "%s%s:%" PRId64, a ? ", " : "", m->names[a], m->sizes[a]);
    sb_putc(b, '}');
}

/* ---- views ---- */

view view_dup(uint32_t rank) {
    view v;
    memset(&v, 0, sizeof v);
    v.rank = (uint8_t)(rank > VIEW_MAX_RANK ? VIEW_MAX_RANK : rank);
    return v;
}

bool view_is_dup(const view *v) {
    if (v->partial) return false;
    for (uint32_t d = 0; d < v->rank && d < VIEW_MAX_RANK; d++)
        if (v->dims[d].naxes) return false;
    return true;
}

void view_drop_unit_axes(view *v, const mesh *m) {
    uint32_t unit = 0;
    for (uint32_t a = 0; a < m->naxes && a < 8; a++)
        if (m->sizes[a] == 1) unit |= 1u << a;
    if (!unit) return;
    v->partial &= (uint8_t)~unit;
    if (!v->partial) v->red = 0;
    for (uint32_t d = 0; d < v->rank && d < VIEW_MAX_RANK; d++) {
        view_dim *vd = &v->dims[d];
        uint8_t n = 0;
        for (uint8_t k = 0; k < vd->naxes; k++)
            if (!(unit >> vd->axes[k] & 1)) vd->axes[n++] = vd->axes[k];
        for (uint8_t k = n; k < vd->naxes; k++) vd->axes[k] = 0;
        vd->naxes = n;
    }
}

bool view_equal(const view *a, const view *b) {
    if (a->rank != b->rank || a->partial != b->partial) return false;
    if (a->partial && a->red != b->red) return false;
    for (uint32_t d = 0; d < a->rank && d < VIEW_MAX_RANK; d++) {
        const view_dim *x = &a->dims[d], *y = &b->dims[d];
        if (x->naxes != y->naxes) return false;
        for (uint32_t k = 0; k < x->naxes && k < MESH_MAX_AXES; k++)
            if (x->axes[k] != y->axes[k]) return false;
    }
    return true;
}

uint32_t view_sharded_axes(const view *v) {
    uint32_t used = 0;
    for (uint32_t d = 0; d < v->rank && d < VIEW_MAX_RANK; d++)
        for (uint32_t k = 0; k < v->dims[d].naxes && k < MESH_MAX_AXES; k++) used |= 1u << v->dims[d].axes[k];
    return used;
}

uint32_t view_axes_used(const view *v) { return v->partial | view_sharded_axes(v); }

void view_block(const view *v, const mesh *m, const int64_t *gdims, uint32_t rank, int64_t d, int64_t *off, int64_t *size) {
    for (uint32_t k = 0; k < rank; k++) {
        int64_t parts = k < v->rank ? view_dim_parts(v, m, k) : 1, idx = 0;
        for (uint32_t a = 0; k < v->rank && a < v->dims[k].naxes; a++) {
            int ax = v->dims[k].axes[a];
            idx = idx * m->sizes[ax] + mesh_coord(m, d, ax);
        }
        size[k] = gdims[k] / parts;
        off[k] = idx * size[k];
    }
}

int64_t view_dim_parts(const view *v, const mesh *m, uint32_t d) {
    if (d >= v->rank || d >= VIEW_MAX_RANK) return 1;
    int64_t p = 1;
    for (uint32_t k = 0; k < v->dims[d].naxes && k < MESH_MAX_AXES; k++) {
        uint32_t a = v->dims[d].axes[k];
        if (a >= m->naxes || m->sizes[a] <= 0 || !mul_ok(p, m->sizes[a], &p)) return -1;
    }
    return p;
}

void view_normalize(view *v, const mesh *m) {
    for (uint32_t d = 0; d < v->rank && d < VIEW_MAX_RANK; d++) {
        view_dim *vd = &v->dims[d];
        uint8_t k2 = 0;
        for (uint32_t k = 0; k < vd->naxes && k < MESH_MAX_AXES; k++)
            if (vd->axes[k] >= m->naxes || m->sizes[vd->axes[k]] != 1) vd->axes[k2++] = vd->axes[k];
        vd->naxes = k2;
        for (uint32_t k = k2; k < MESH_MAX_AXES; k++) vd->axes[k] = 0;
    }
    for (uint32_t a = 0; a < m->naxes; a++)
        if (m->sizes[a] == 1) v->partial &= (uint8_t)~(1u << a);
    if (!v->partial) v->red = RED_NONE;
}

static void put_axis(strbuf *b, const mesh *m, uint32_t a) {
    if (m && a < m->naxes) sb_puts(b, m->names[a]);
    else sb_printf(b, "#%u", a);
}

static void put_axes(strbuf *b, const mesh *m, const uint8_t *axes, uint32_t n) {
    if (n == 1) {
        put_axis(b, m, axes[0]);
        return;
    }
    sb_putc(b, '(');
    for (uint32_t k = 0; k < n; k++) {
        if (k) sb_putc(b, ',');
        put_axis(b, m, axes[k]);
    }
    sb_putc(b, ')');
}

void view_print(strbuf *b, const view *v, const mesh *m) {
    bool any = false;
    for (uint32_t d = 0; d < v->rank && d < VIEW_MAX_RANK; d++) {
        const view_dim *vd = &v->dims[d];
        if (!vd->naxes) continue;
        sb_printf(b, "%sshard(%u,", any ? " " : "", d);
        put_axes(b, m, vd->axes, vd->naxes < MESH_MAX_AXES ? vd->naxes : MESH_MAX_AXES);
        sb_putc(b, ')');
        any = true;
    }
    if (v->partial) {
        uint8_t axes[MESH_MAX_AXES];
        uint32_t n = 0;
        for (uint32_t a = 0; a < MESH_MAX_AXES; a++)
            if (v->partial & (1u << a)) axes[n++] = (uint8_t)a;
        sb_printf(b, "%spartial(", any ? " " : "");
        put_axes(b, m, axes, n);
        sb_printf(b, ",%s)", reducer_name(v->red));
        any = true;
    }
    if (!any) sb_puts(b, "dup");
}

/* The parser of view strings. Errors are written into why; `divides` tells the
 * caller the view was well-formed but a dimension does not divide, so that
 * relations_read can name the parameter the way users read it. */
typedef struct vparser {
    const char *p;
    const mesh *m;
    char *why;
    size_t whylen;
    bool failed;
} vparser;

static bool vfail(vparser *vp, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static bool vfail(vparser *vp, const char *fmt, ...) {
    if (!vp->failed && vp->why && vp->whylen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(vp->why, vp->whylen, fmt, ap);
        va_end(ap);
    }
    vp->failed = true;
    return false;
}

static void vskip(vparser *vp) {
    while (*vp->p == ' ' || *vp->p == '\t') vp->p++;
}

static bool vaccept(vparser *vp, char c) {
    vskip(vp);
    if (*vp->p != c) return false;
    vp->p++;
    return true;
}

static bool vexpect(vparser *vp, char c, const char *where) {
    if (vaccept(vp, c)) return true;
    if (*vp->p) return vfail(vp, "expected '%c' %s, found '%c'", c, where, *vp->p);
    return vfail(vp, "expected '%c' %s, found the end", c, where);
}

static bool is_name_char(char c) {
    return isalnum((unsigned char)c) || c == '_' || c == '-' || c == '.';
}

/* name -> [A-Za-z0-9_.-]+ */
static bool vname(vparser *vp, const char **s, size_t *n) {
    vskip(vp);
    const char *b = vp->p;
    while (is_name_char(*vp->p)) vp->p++;
    *s = b;
    *n = (size_t)(vp->p - b);
    if (*n == 0) {
        if (*vp->p) return vfail(vp, "expected a mesh axis name, found '%c'", *vp->p);
        return vfail(vp, "expected a mesh axis name, found the end");
    }
    return true;
}

/* axes -> name | '(' name (',' name)* ')' ; every axis known and used once. */
static bool vaxes(vparser *vp, uint32_t *used, uint8_t *axes, uint8_t *naxes) {
    bool paren = vaccept(vp, '(');
    *naxes = 0;
    do {
        const char *s;
        size_t n;
        if (!vname(vp, &s, &n)) return false;
        int a = mesh_axis(vp->m, s, n);
        if (a < 0) {
            char list[256] = "";
            size_t off = 0;
            for (uint32_t k = 0; k < vp->m->naxes && off < sizeof list; k++)
                off += (size_t)snprintf(list + off, sizeof list - off, "%s%s", k ? ", " : "", vp->m->names[k]);
            return vfail(vp, "unknown mesh axis '%.*s' (the mesh has %s)", (int)(n > 64 ? 64 : n), s,
                         vp->m->naxes ? list : "no axes");
        }
        if (*used & (1u << a)) return vfail(vp, "mesh axis %s is used twice", vp->m->names[a]);
        *used |= 1u << a;
        axes[(*naxes)++] = (uint8_t)a;
    } while (paren && vaccept(vp, ','));
    if (paren && !vexpect(vp, ')', "to close the axis list")) return false;
    if (*naxes == 0) return vfail(vp, "empty axis list");
    return true;
}

static bool vword(vparser *vp, const char *w) {
    size_t n = strlen(w);
    if (strncmp(vp->p, w, n) != 0 || is_name_char(vp->p[n])) return false;
    vp->p += n;
    return true;
}

static int reducer_from_name(const char *s, size_t n) {
    for (int r = RED_SUM; r <= RED_XOR; r++) {
        const char *name = reducer_name(r);
        if (strlen(name) == n && memcmp(name, s, n) == 0) return r;
    }
    return RED_NONE;
}

/* view -> 'dup' | term (' ' term)*
 * term -> 'shard' '(' int ',' axes ')' | 'partial' '(' axes ',' reducer ')' */
static bool view_parse_ex(const char *s, const mesh *m, const shape *global, view *out, char *why,
                          size_t whylen, bool *divides) {
    vparser vp = {.p = s ? s : "", .m = m, .why = why, .whylen = whylen};
    if (why && whylen) why[0] = 0;
    if (divides) *divides = true;
    if (global->dtype == DT_TUPLE) return vfail(&vp, "a tuple-shaped value cannot have a view");
    if (global->rank > VIEW_MAX_RANK)
        return vfail(&vp, "rank %u is more than the %d dimensions a view supports", global->rank, VIEW_MAX_RANK);
    if (m->naxes > MESH_MAX_AXES) return vfail(&vp, "mesh has too many axes");
    view v = view_dup(global->rank);
    uint32_t used = 0;
    bool dup = false;
    vskip(&vp);
    if (!*vp.p) return vfail(&vp, "empty view (write \"dup\" for a replicated value)");
    while (*vp.p) {
        const char *term = vp.p;
        if (vword(&vp, "dup")) {
            dup = true;
        } else if (vword(&vp, "shard")) {
            if (!vexpect(&vp, '(', "after shard")) return false;
            vskip(&vp);
            if (!isdigit((unsigned char)*vp.p)) return vfail(&vp, "expected a dimension number after shard(");
            int64_t d = 0;
            while (isdigit((unsigned char)*vp.p)) {
                if (d < 1000000) d = d * 10 + (*vp.p - '0');
                vp.p++;
            }
            if (d >= (int64_t)global->rank)
                return vfail(&vp, "shard(%" PRId64 ",...): the value has %u dimension%s", d, global->rank,
                             global->rank == 1 ? "" : "s");
            if (!vexpect(&vp, ',', "after the dimension number")) return false;
            view_dim *vd = &v.dims[d];
            if (vd->naxes) return vfail(&vp, "dimension %" PRId64 " is sharded twice", d);
            if (!vaxes(&vp, &used, vd->axes, &vd->naxes)) return false;
            if (!vexpect(&vp, ')', "to close shard(")) return false;
        } else if (vword(&vp, "partial")) {
            if (!vexpect(&vp, '(', "after partial")) return false;
            uint8_t axes[MESH_MAX_AXES], n;
            if (!vaxes(&vp, &used, axes, &n)) return false;
            if (!vexpect(&vp, ',', "before the reduction")) return false;
            const char *r;
            size_t rn;
            vskip(&vp);
            r = vp.p;
            while (isalpha((unsigned char)*vp.p)) vp.p++;
            rn = (size_t)(vp.p - r);
            int red = reducer_from_name(r, rn);
            if (red == RED_NONE)
                return vfail(&vp, "unknown reduction '%.*s' (sum, max, min or prod)", (int)(rn > 32 ? 32 : rn), r);
            if (v.partial && v.red != red)
                return vfail(&vp, "partial terms with different reductions (%s and %s)", reducer_name(v.red),
                             reducer_name(red));
            for (uint32_t k = 0; k < n; k++) v.partial |= (uint8_t)(1u << axes[k]);
            v.red = (uint8_t)red;
            if (!vexpect(&vp, ')', "to close partial(")) return false;
        } else {
            size_t n = 0;
            while (term[n] && term[n] != ' ' && n < 40) n++;
            return vfail(&vp, "unknown term '%.*s' (dup, shard(D,AXIS) or partial(AXIS,sum))", (int)n, term);
        }
        size_t before = (size_t)(vp.p - s);
        vskip(&vp);
        if (*vp.p && (size_t)(vp.p - s) == before)
            return vfail(&vp, "terms must be separated by a space, found '%c'", *vp.p);
    }
    if (dup && used) return vfail(&vp, "\"dup\" cannot be combined with other terms");
    for (uint32_t d = 0; d < v.rank; d++) {
        if (!v.dims[d].naxes) continue;
        int64_t parts = view_dim_parts(&v, m, d);
        if (parts <= 0 || global->dims[d] % parts != 0) {
            if (divides) *divides = false;
            strbuf b;
            sb_init(&b);
            put_axes(&b, m, v.dims[d].axes, v.dims[d].naxes);
            if (v.dims[d].naxes == 1)
                vfail(&vp, "mesh axis %s of size %" PRId64 " does not divide dimension %u (%" PRId64 ")", b.s,
                      parts, d, global->dims[d]);
            else
                vfail(&vp, "mesh axes %s of size %" PRId64 " do not divide dimension %u (%" PRId64 ")", b.s, parts,
                      d, global->dims[d]);
            sb_free(&b);
            return false;
        }
    }
    *out = v;
    return true;
}

bool view_parse(const char *s, const mesh *m, const shape *global, view *out, char *why, size_t whylen) {
    return view_parse_ex(s, m, global, out, why, whylen, NULL);
}

bool view_local_dims(const view *v, const mesh *m, const shape *global, int64_t *local) {
    if (global->dtype == DT_TUPLE || v->rank != global->rank) return false;
    for (uint32_t d = 0; d < global->rank; d++) {
        int64_t parts = view_dim_parts(v, m, d);
        if (parts <= 0 || global->dims[d] % parts != 0) return false;
        local[d] = global->dims[d] / parts;
    }
    return true;
}

/* ---- relations: common helpers ---- */

void relations_free(relations *r) {
    if (!r) return;
    if (r->input_names)
        for (uint32_t i = 0; i < r->ninputs; i++) free(r->input_names[i]);
    free(r->input_names);
    free(r->inputs);
    free(r->outputs);
    free(r->output_free);
    memset(r, 0, sizeof *r);
}

/* The user-facing name of entry parameter k: the pytree path in its op_name
 * ("params['layers.0.wq']" → "layers.0.wq"), else the op_name, else NULL. */
static char *param_name(const hlo_comp *c, uint32_t k) {
    const hlo_instr *in = &c->instrs[c->params[k]];
    const char *on = in->op_name;
    if (!on || !*on) return NULL;
    const char *q = strstr(on, "['");
    if (q) {
        const char *e = strstr(q + 2, "']");
        if (e && e > q + 2) return xstrndup(q + 2, (size_t)(e - q - 2));
    }
    return xstrdup(on);
}

static const shape *root_shape(const hlo_comp *c) { return &c->instrs[c->root].shape; }

static uint32_t output_count(const hlo_comp *c) {
    const shape *s = root_shape(c);
    return s->dtype == DT_TUPLE ? s->ntuple : 1;
}

static const shape *output_shape(const hlo_comp *c, uint32_t i) {
    const shape *s = root_shape(c);
    return s->dtype == DT_TUPLE ? &s->tuple[i] : s;
}

static void relations_alloc(relations *r, uint32_t nin, uint32_t nout) {
    r->ninputs = nin;
    r->noutputs = nout;
    r->inputs = xcalloc(nin ? nin : 1, sizeof *r->inputs);
    r->input_names = xcalloc(nin ? nin : 1, sizeof *r->input_names);
    r->outputs = xcalloc(nout ? nout : 1, sizeof *r->outputs);
    r->output_free = xcalloc(nout ? nout : 1, sizeof *r->output_free);
}

/* ---- relations_read ---- */

static const char *json_kind(const json_t *j) {
    switch (json_typeof(j)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a number";
    case JSON_TRUE:
    case JSON_FALSE: return "a boolean";
    case JSON_NULL: return "null";
    }
    return "?";
}

static bool read_mesh(json_t *jm, mesh *out, diag *d) {
    memset(out, 0, sizeof *out);
    if (!jm) {
        diag_plain(d, "missing \"mesh\" (an object of axis name to size, major to minor)");
        return false;
    }
    if (!json_is_object(jm)) {
        diag_plain(d, "\"mesh\" must be an object of axis name to size, not %s", json_kind(jm));
        return false;
    }
    bool ok = true;
    int64_t total = 1;
    /* Insertion order is the file's order: major to minor (samples/README.md). */
    for (void *it = json_object_iter(jm); it; it = json_object_iter_next(jm, it)) {
        const char *k = json_object_iter_key(it);
        json_t *v = json_object_iter_value(it);
        size_t kn = strlen(k);
        bool name_ok = kn > 0 && kn < sizeof out->names[0];
        for (size_t i = 0; i < kn && name_ok; i++) name_ok = is_name_char(k[i]);
        if (!name_ok) {
            diag_plain(d, "mesh axis name \"%.40s\" must be 1 to 31 characters of [A-Za-z0-9_.-]", k);
            ok = false;
            continue;
        }
        if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > MESH_MAX_DEVICES) {
            if (json_is_integer(v))
                diag_plain(d, "mesh axis %s has size %" JSON_INTEGER_FORMAT ", expected 1 to %d", k,
                           json_integer_value(v), MESH_MAX_DEVICES);
            else diag_plain(d, "mesh axis %s: size must be an integer, not %s", k, json_kind(v));
            ok = false;
            continue;
        }
        if (out->naxes == MESH_MAX_AXES) {
            diag_plain(d, "mesh has more than %d axes", MESH_MAX_AXES);
            return false;
        }
        int64_t size = json_integer_value(v);
        if (!mul_ok(total, size, &total) || total > MESH_MAX_DEVICES) {
            diag_plain(d, "mesh has more than %d devices", MESH_MAX_DEVICES);
            return false;
        }
        memcpy(out->names[out->naxes], k, kn + 1);
        out->sizes[out->naxes++] = size;
    }
    return ok;
}

/* Index v of an inputs/outputs entry: below n. */
static bool index_in_range(json_int_t v, const char *list, size_t pos, uint32_t n, const char *what, diag *d) {
    if (v >= 0 && (uint64_t)v < n) return true;
    diag_plain(d, "%s[%zu]: %s %" JSON_INTEGER_FORMAT " does not exist (the baseline has %u %s%s)", list, pos, what, v,
               n, what, n == 1 ? "" : "s");
    return false;
}

/* "index" field of an inputs/outputs entry: a non-negative integer below n. */
static bool entry_index(json_t *e, const char *list, size_t pos, const char *key, uint32_t n, const char *what,
                        uint32_t *out, diag *d) {
    json_t *j = json_object_get(e, key);
    if (!j) {
        diag_plain(d, "%s[%zu]: missing \"%s\"", list, pos, key);
        return false;
    }
    if (!json_is_integer(j)) {
        diag_plain(d, "%s[%zu]: \"%s\" must be an integer, not %s", list, pos, key, json_kind(j));
        return false;
    }
    json_int_t v = json_integer_value(j);
    if (!index_in_range(v, list, pos, n, what, d)) return false;
    *out = (uint32_t)v;
    return true;
}

static const char *entry_view(json_t *e, const char *list, size_t pos, diag *d) {
    json_t *j = json_object_get(e, "view");
    if (!j) {
        diag_plain(d, "%s[%zu]: missing \"view\"", list, pos);
        return NULL;
    }
    if (!json_is_string(j)) {
        diag_plain(d, "%s[%zu]: \"view\" must be a string, not %s", list, pos, json_kind(j));
        return NULL;
    }
    return json_string_value(j);
}

static const char *entry_name(json_t *e, const char *list, size_t pos, diag *d, bool *ok) {
    json_t *j = json_object_get(e, "name");
    if (!j) return NULL;
    if (!json_is_string(j)) {
        diag_plain(d, "%s[%zu]: \"name\" must be a string, not %s", list, pos, json_kind(j));
        *ok = false;
        return NULL;
    }
    return json_string_value(j);
}

/* Reports a view error for "parameter 6 'layers.0.w_gate'" / "output 0". */
static void view_error(diag *d, const char *what, uint32_t k, const char *name, const char *viewstr, const char *why,
                       bool divides) {
    char label[160];
    if (name) snprintf(label, sizeof label, "%s %u '%.100s'", what, k, name);
    else snprintf(label, sizeof label, "%s %u", what, k);
    if (!divides) diag_plain(d, "%s of %s", why, label);
    else diag_plain(d, "%s: view \"%.200s\": %s", label, viewstr, why);
}

/* A list of relations entries written as exporters write them, read from
 * the text without jansson (relations_read): '[' entry (',' entry)* ']'
 * with entry '{' field (',' field)* '}', each field once: the index key
 * ("param" or "output") with a decimal integer (no sign, at most 18
 * digits), "name" and "view" with strings of printable ASCII and no
 * escapes; JSON whitespace between tokens. A list the text spells any
 * other way is jansson's. */
typedef struct rel_list {
    char *at, *end;  /* its '[' and just after its ']'; at NULL: not read so */
    size_t len;      /* entries */
} rel_list;

typedef struct rel_entry {
    bool has_index;
    int64_t index;
    const char *name, *view;  /* NULL when absent */
} rel_entry;

static char *rl_ws(char *p) {
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') p++;
    return p;
}

/* A plain string at p: its body starts at p + 1; returns its closing quote. */
static char *rl_string(char *p) {
    if (*p != '"') return NULL;
    unsigned char *q = (unsigned char *)p + 1;
    while (*q >= 0x20 && *q < 0x7f && *q != '"' && *q != '\\') q++;
    return *q == '"' ? (char *)q : NULL;
}

/* One entry at p ('{'), into e; with terminate, the strings it points to
 * are cut out of the text by a NUL on their closing quotes. Returns what
 * follows the entry, or NULL when the entry is not spelled plainly. */
static char *rl_entry(char *p, const char *index_key, bool terminate, rel_entry *e) {
    memset(e, 0, sizeof *e);
    if (*p != '{') return NULL;
    p = rl_ws(p + 1);
    if (*p == '}') return p + 1;
    size_t nkey = strlen(index_key);
    for (;;) {
        char *q = rl_string(p);
        if (!q) return NULL;
        size_t kn = (size_t)(q - p - 1);
        const char *k = p + 1;
        p = rl_ws(q + 1);
        if (*p != ':') return NULL;
        p = rl_ws(p + 1);
        if (kn == nkey && memcmp(k, index_key, kn) == 0) {
            if (e->has_index || *p < '0' || *p > '9' || (*p == '0' && p[1] >= '0' && p[1] <= '9')) return NULL;
            int64_t v = 0;
            int digits = 0;
            for (; *p >= '0' && *p <= '9'; p++, digits++) v = v * 10 + (*p - '0');
            if (digits > 18 || *p == '.' || *p == 'e' || *p == 'E') return NULL;
            e->has_index = true;
            e->index = v;
        } else {
            const char **field = kn == 4 && memcmp(k, "name", 4) == 0   ? &e->name
                                 : kn == 4 && memcmp(k, "view", 4) == 0 ? &e->view
                                                                        : NULL;
            if (!field || *field || !(q = rl_string(p))) return NULL;
            *field = p + 1;
            if (terminate) *q = 0;
            p = q + 1;
        }
        p = rl_ws(p);
        if (*p == '}') return p + 1;
        if (*p != ',') return NULL;
        p = rl_ws(p + 1);
    }
}

/* The list at p ('['): its end and length into l, or false when it is not
 * spelled plainly. */
static bool rl_scan(char *p, const char *index_key, rel_list *l) {
    rel_entry e;
    size_t n = 0;
    char *q = rl_ws(p + 1);
    if (*q != ']') {
        for (;;) {
            if (!(q = rl_entry(q, index_key, false, &e))) return false;
            n++;
            q = rl_ws(q);
            if (*q == ']') break;
            if (*q != ',') return false;
            q = rl_ws(q + 1);
        }
    }
    l->at = p;
    l->end = q + 1;
    l->len = n;
    return true;
}

/* The root object's "inputs" and "outputs" lists, where they are plain:
 * a walk over strings and nesting that reads only the root's keys. A
 * malformed text finds nothing or anything: jansson reads it after. */
static void rl_find_lists(char *text, size_t len, rel_list *in, rel_list *out) {
    memset(in, 0, sizeof *in);
    memset(out, 0, sizeof *out);
    char *end = text + len;
    int depth = 0;
    bool key_next = false;
    for (char *p = text; p < end; p++) {
        char ch = *p;
        if (ch == '"') {
            char *s = p + 1, *q = s;
            while (q < end && *q != '"') q += *q == '\\' ? 2 : 1;
            if (q >= end) return;
            p = q;
            if (depth != 1 || !key_next) continue;
            key_next = false;
            rel_list *l = q - s == 6 && memcmp(s, "inputs", 6) == 0    ? in
                          : q - s == 7 && memcmp(s, "outputs", 7) == 0 ? out
                                                                       : NULL;
            char *v = rl_ws(q + 1);
            if (!l || l->at || *v != ':') continue;
            v = rl_ws(v + 1);
            if (*v == '[' && rl_scan(v, l == in ? "param" : "output", l)) p = l->end - 1;
        } else if (ch == '{' || ch == '[') {
            depth++;
            key_next = depth == 1;
        } else if (ch == '}' || ch == ']') {
            depth--;
        } else if (ch == ',') {
            key_next = depth == 1;
        }
    }
}

/* The text with each plain list replaced by "[]": what jansson reads. */
static char *rl_rest(const char *text, size_t len, const rel_list *a, const rel_list *b, size_t *n) {
    if (a->at && b->at && b->at < a->at) {
        const rel_list *t = a;
        a = b;
        b = t;
    }
    strbuf s;
    sb_init(&s);
    const char *p = text;
    for (const rel_list *l = a; l; l = l == a ? b : NULL) {
        if (!l->at) continue;
        sb_put(&s, p, (size_t)(l->at - p));
        sb_put(&s, "[]", 2);
        p = l->end;
    }
    sb_put(&s, p, (size_t)(text + len - p));
    *n = s.len;
    return sb_take(&s);
}

/* An entry's view, once its index is known to be in range: stored under
 * k unless k was seen before or the view does not parse. */
static bool entry_put(relations *r, bool inputs, const hlo_comp *c, const char *key, size_t pos, uint32_t k,
                      const char *name, const char *vs, uint8_t *seen, diag *d) {
    const char *what = inputs ? "parameter" : "output";
    if (seen[k]) {
        diag_plain(d, "%s[%zu]: %s %u is listed twice", key, pos, what, k);
        return false;
    }
    seen[k] = 1;
    const shape *gs = inputs ? &c->instrs[c->params[k]].shape : output_shape(c, k);
    char why[256];
    bool divides;
    view v;
    if (!view_parse_ex(vs, &r->mesh, gs, &v, why, sizeof why, &divides)) {
        char *bn = name ? NULL : (inputs ? param_name(c, k) : NULL);
        view_error(d, what, k, name ? name : bn, vs, why, divides);
        free(bn);
        return false;
    }
    if (inputs) {
        r->inputs[k] = v;
        if (name) r->input_names[k] = xstrdup(name);
    } else {
        r->outputs[k] = v;
    }
    return true;
}

/* The entries of a plain list (read from the text, which it cuts). */
static bool put_plain(const rel_list *l, const char *key, bool inputs, const hlo_comp *c, relations *r, uint32_t n,
                      uint8_t *seen, diag *d) {
    bool ok = true;
    const char *what = inputs ? "parameter" : "output";
    char *p = rl_ws(l->at + 1);
    for (size_t pos = 0; pos < l->len; pos++) {
        rel_entry e;
        p = rl_ws(rl_entry(p, inputs ? "param" : "output", true, &e));
        p = rl_ws(p + 1); /* ',' or the closing ']' */
        if (!e.has_index) {
            diag_plain(d, "%s[%zu]: missing \"%s\"", key, pos, inputs ? "param" : "output");
            ok = false;
        } else if (!index_in_range(e.index, key, pos, n, what, d)) {
            ok = false;
        } else if (!e.view) {
            diag_plain(d, "%s[%zu]: missing \"view\"", key, pos);
            seen[e.index] = 1;
            ok = false;
        } else {
            ok &= entry_put(r, inputs, c, key, pos, (uint32_t)e.index, e.name, e.view, seen, d);
        }
    }
    return ok;
}

static bool read_entries(json_t *root, const rel_list *plain, const char *key, bool inputs, const hlo_comp *c,
                         relations *r, diag *d) {
    json_t *list = plain->at ? NULL : json_object_get(root, key);
    uint32_t n = inputs ? c->nparams : output_count(c);
    const char *what = inputs ? "parameter" : "output";
    if (!plain->at && !list) {
        if (inputs) {
            diag_plain(d, "missing \"inputs\" (one entry per baseline parameter)");
            return false;
        }
        for (uint32_t i = 0; i < n; i++) {
            const shape *s = output_shape(c, i);
            r->outputs[i] = view_dup(s->dtype == DT_TUPLE ? 0 : s->rank);
        }
        return true;
    }
    if (!plain->at && !json_is_array(list)) {
        diag_plain(d, "\"%s\" must be an array, not %s", key, json_kind(list));
        return false;
    }
    bool ok = true;
    size_t len = plain->at ? plain->len : json_array_size(list);
    if (!inputs && len != n) {
        diag_plain(d, "\"outputs\" has %zu entr%s, the baseline's ROOT has %u output%s", len, len == 1 ? "y" : "ies",
                   n, n == 1 ? "" : "s");
        return false;
    }
    if (inputs && len != n) {
        /* Still look at the entries: the missing/unknown ones are named below. */
        ok = false;
        diag_plain(d, "\"inputs\" has %zu entr%s, the baseline has %u parameter%s", len, len == 1 ? "y" : "ies", n,
                   n == 1 ? "" : "s");
    }
    uint8_t *seen = xcalloc(n ? n : 1, 1);
    if (plain->at) ok &= put_plain(plain, key, inputs, c, r, n, seen, d);
    for (size_t pos = 0; list && pos < len; pos++) {
        json_t *e = json_array_get(list, pos);
        if (!json_is_object(e)) {
            diag_plain(d, "%s[%zu] must be an object, not %s", key, pos, json_kind(e));
            ok = false;
            continue;
        }
        uint32_t k;
        if (!entry_index(e, key, pos, inputs ? "param" : "output", n, what, &k, d)) {
            ok = false;
            continue;
        }
        bool name_ok = true;
        const char *name = entry_name(e, key, pos, d, &name_ok);
        const char *vs = entry_view(e, key, pos, d);
        if (!name_ok || !vs) {
            ok = false;
            seen[k] = 1;
            continue;
        }
        ok &= entry_put(r, inputs, c, key, pos, k, name, vs, seen, d);
    }
    if (inputs) {
        strbuf miss;
        sb_init(&miss);
        uint32_t nmiss = 0;
        for (uint32_t k = 0; k < n; k++) {
            if (seen[k]) continue;
            if (nmiss < 8) {
                char *bn = param_name(c, k);
                sb_printf(&miss, "%s%u", nmiss ? ", " : "", k);
                if (bn) sb_printf(&miss, " '%.80s'", bn);
                free(bn);
            }
            nmiss++;
        }
        if (nmiss) {
            diag_plain(d, "no view for parameter%s %s%s", nmiss == 1 ? "" : "s", miss.s,
                       nmiss > 8 ? " and more" : "");
            ok = false;
        }
        sb_free(&miss);
    }
    free(seen);
    return ok;
}

bool relations_read(const char *path, const hlo_module *baseline, relations *out, diag *d) {
    memset(out, 0, sizeof *out);
    const char *saved = d->file;
    d->file = path;
    int before = d->count;
    const hlo_comp *c = baseline ? graph_entry(baseline) : NULL;
    json_error_t err;
    json_t *root = NULL;
    char *text = NULL;
    rel_list in, outs;
    if (!c) {
        diag_plain(d, "the baseline has no entry computation");
        goto done;
    }
    /* Read whole, then parsed: jansson's own file reader takes a byte at a
     * time, which on a 405B model's relations is most of the time here. Its
     * tree of a list of 416k entries (a 100x deep program's) costs ten times
     * their text, which malloc keeps after it is freed: plain lists are read
     * from the text instead (rl_scan), jansson reads the rest, and the whole
     * file when the rest does not parse, so that its messages and positions
     * are those of the file. */
    size_t len;
    bool gz;
    text = io_read_file(path, &len, &gz, d);
    if (!text) goto done;
    rl_find_lists(text, len, &in, &outs);
    if (in.at || outs.at) {
        size_t rn;
        char *rest = rl_rest(text, len, &in, &outs, &rn);
        root = json_loadb(rest, rn, JSON_REJECT_DUPLICATES, &err);
        free(rest);
    }
    if (!root) {
        memset(&in, 0, sizeof in);
        memset(&outs, 0, sizeof outs);
        root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &err);
    }
    if (!root) {
        if (err.line > 0) diag_pos(d, err.line, err.column, "%s", err.text);
        else diag_plain(d, "%s", err.text);
        goto done;
    }
    if (!json_is_object(root)) {
        diag_plain(d, "a relations file is a JSON object, not %s", json_kind(root));
        goto done;
    }
    json_t *ver = json_object_get(root, "scalify_relations");
    if (!ver) {
        diag_plain(d, "not a relations file: no \"scalify_relations\": 1");
        goto done;
    }
    if (!json_is_integer(ver) || json_integer_value(ver) != 1) {
        diag_plain(d, "unsupported \"scalify_relations\" version (this scalify reads version 1)");
        goto done;
    }
    json_t *order = json_object_get(root, "device_order");
    if (order && !(json_is_string(order) && strcmp(json_string_value(order), "iota") == 0)) {
        diag_plain(d, "\"device_order\" must be \"iota\" (the only order supported)");
        goto done;
    }
    if (!read_mesh(json_object_get(root, "mesh"), &out->mesh, d)) goto done;
    relations_alloc(out, c->nparams, output_count(c));
    read_entries(root, &in, "inputs", true, c, out, d);
    read_entries(root, &outs, "outputs", false, c, out, d);
done:
    json_decref(root);
    free(text);
    d->file = saved;
    if (d->count == before) return true;
    relations_free(out);
    return false;
}

/* ---- relations_auto ---- */

/* One #sdy.mesh<[...]> starting after "#sdy.mesh<": 1 with axes, 0 for an
 * empty (or maximal, device_ids=[k]) mesh, -1 with a reason. */
static int shardy_mesh_one(const char *p, mesh *out, char *why, size_t whylen) {
    memset(out, 0, sizeof *out);
    while (*p == ' ') p++;
    if (*p != '[') {
        snprintf(why, whylen, "unreadable Shardy mesh in xla.sdy.meshes");
        return -1;
    }
    p++;
    for (;;) {
        while (*p == ' ' || *p == '\\' || *p == ',') p++;
        if (*p == ']') break;
        if (*p != '"') {
            snprintf(why, whylen, "unreadable Shardy mesh in xla.sdy.meshes");
            return -1;
        }
        p++;
        const char *nb = p;
        while (*p && *p != '"' && *p != '\\') p++;
        size_t nn = (size_t)(p - nb);
        while (*p == '\\' || *p == '"') p++;
        if (*p != '=' || nn == 0 || nn >= sizeof out->names[0]) {
            snprintf(why, whylen, "unreadable Shardy mesh axis in xla.sdy.meshes");
            return -1;
        }
        p++;
        char *end;
        long long size = strtoll(p, &end, 10);
        if (end == p || size < 1 || size > MESH_MAX_DEVICES) {
            snprintf(why, whylen, "unreadable Shardy mesh axis size in xla.sdy.meshes");
            return -1;
        }
        p = end;
        if (out->naxes == MESH_MAX_AXES) {
            /* Full: a unit axis (this one or one kept) makes room. */
            int u = size == 1 ? -2 : -1;
            for (uint32_t a = 0; a < out->naxes && u == -1; a++)
                if (out->sizes[a] == 1) u = (int)a;
            if (u == -1 || out->nunit == ARRAY_LEN(out->unit)) {
                snprintf(why, whylen, "the Shardy mesh has more than %d axes of size above 1", MESH_MAX_AXES);
                return -1;
            }
            if (u == -2) {
                memcpy(out->unit[out->nunit], nb, nn);
                out->unit[out->nunit++][nn] = 0;
                continue;
            }
            memcpy(out->unit[out->nunit++], out->names[u], sizeof out->names[u]);
            for (uint32_t a = (uint32_t)u; a + 1 < out->naxes; a++) {
                memcpy(out->names[a], out->names[a + 1], sizeof out->names[a]);
                out->sizes[a] = out->sizes[a + 1];
            }
            out->naxes--;
        }
        memcpy(out->names[out->naxes], nb, nn);
        out->names[out->naxes][nn] = 0;
        out->sizes[out->naxes++] = size;
    }
    p++;
    while (*p == ' ') p++;
    if (out->naxes == 0) return 0;
    if (*p == ',') {
        snprintf(why, whylen,
                 "the Shardy mesh has an explicit device order (device_ids); only iota order is supported");
        return -1;
    }
    int64_t total = mesh_devices(out);
    if (total < 1 || total > MESH_MAX_DEVICES) {
        snprintf(why, whylen, "the Shardy mesh is too large");
        return -1;
    }
    return 1;
}

/* The Shardy mesh from the module's frontend attribute xla.sdy.meshes, e.g.
 * {mesh = #sdy.mesh<["dp"=2, "tp"=4]>}: 1 when found (out filled), 0 when the
 * module has none (or only empty/maximal ones), -1 with a message in why when
 * it cannot be used (several meshes with axes, explicit device order). */
static int shardy_mesh(const hlo_module *m, mesh *out, char *why, size_t whylen) {
    memset(out, 0, sizeof *out);
    const char *txt = NULL;
    for (uint32_t i = 0; i < m->nattrs && !txt; i++) {
        const hlo_attr *a = &m->attrs[i];
        if (a->key == A_RAW && a->raw_key && strcmp(a->raw_key, "frontend_attributes") == 0 && a->v.str)
            txt = strstr(a->v.str, "xla.sdy.meshes");
    }
    if (!txt) return 0;
    int found = 0;
    for (const char *p = strstr(txt, "#sdy.mesh<"); p; p = strstr(p, "#sdy.mesh<")) {
        p += strlen("#sdy.mesh<");
        mesh one;
        int r = shardy_mesh_one(p, &one, why, whylen);
        if (r < 0) return -1;
        if (r == 0) continue;
        if (found) {
            snprintf(why, whylen, "the module defines several Shardy meshes (xla.sdy.meshes); only one is supported");
            return -1;
        }
        *out = one;
        found = 1;
    }
    return found;
}

/* A tile assignment made explicit: devices in row-major order over dims. */
typedef struct tiles {
    uint32_t n;                   /* dims (data dims then subgroup dims) */
    int64_t dims[VIEW_MAX_RANK + 8];
    int sub[VIEW_MAX_RANK + 8];   /* -1 for a data dim, else SH_* of the subgroup dim */
    int64_t *dev;                 /* total entries, caller frees */
    int64_t total;
} tiles;

/* Expands a tiled sharding of a rank-`rank` value. */
static bool tiles_expand(const hlo_sharding *s, uint32_t rank, tiles *t, char *why, size_t whylen) {
    memset(t, 0, sizeof *t);
    uint32_t nsub = s->nlast ? s->nlast : (s->replicate_last ? 1 : 0);
    if (s->ntile != rank + nsub) {
        snprintf(why, whylen, "its tile assignment has %u dimensions for a rank-%u value", s->ntile, rank);
        return false;
    }
    if (s->ntile > VIEW_MAX_RANK + 8) {
        snprintf(why, whylen, "its tile assignment has too many dimensions");
        return false;
    }
    t->n = s->ntile;
    t->total = 1;
    for (uint32_t i = 0; i < s->ntile; i++) {
        if (s->tile_dims[i] < 1 || !mul_ok(t->total, s->tile_dims[i], &t->total) || t->total > MESH_MAX_DEVICES) {
            snprintf(why, whylen, "its tile assignment is empty or too large");
            return false;
        }
        t->dims[i] = s->tile_dims[i];
        t->sub[i] = i < rank ? -1 : (s->nlast ? s->last_tile_dims[i - rank] : SH_REPLICATED);
    }
    t->dev = xmalloc((size_t)t->total * sizeof *t->dev);
    if (s->devices) {
        if ((int64_t)s->ndevices != t->total) {
            snprintf(why, whylen, "its tile assignment lists %u devices for %" PRId64 " tiles", s->ndevices, t->total);
            return false;
        }
        memcpy(t->dev, s->devices, (size_t)t->total * sizeof *t->dev);
        return true;
    }
    int64_t rt = 1;
    bool ok = s->nreshape > 0 && s->nreshape <= 64 && (s->nperm == 0 || s->nperm == s->nreshape);
    for (uint32_t i = 0; ok && i < s->nreshape; i++)
        ok = s->reshape[i] >= 1 && mul_ok(rt, s->reshape[i], &rt) && rt <= MESH_MAX_DEVICES;
    uint64_t seen = 0;
    for (uint32_t i = 0; ok && i < s->nperm; i++) {
        ok = s->perm[i] >= 0 && s->perm[i] < (int64_t)s->nreshape && !(seen & (1ull << s->perm[i]));
        if (ok) seen |= 1ull << s->perm[i];
    }
    if (!ok || rt != t->total) {
        snprintf(why, whylen, "its iota tile assignment is inconsistent");
        return false;
    }
    iota_tile_ids(s->reshape, s->nreshape, s->perm, s->nperm, t->dev);
    return true;
}

/* Device at tile index (j in dim i, 0 elsewhere). */
static int64_t tile_at(const tiles *t, uint32_t i, int64_t j) {
    int64_t stride = 1;
    for (uint32_t k = i + 1; k < t->n; k++) stride *= t->dims[k];
    return t->dev[j * stride];
}

/* Which mesh axes each tile dimension walks over: the device step along the
 * dimension names the minor axis (its stride), then the step after a whole
 * cycle of it names the next, and so on. Then every tile is checked. */
static bool tiles_explain(const tiles *t, const mesh *m, view_dim *out, char *why, size_t whylen) {
    int64_t n = mesh_devices(m);
    if (t->total != n) {
        snprintf(why, whylen, "its tile assignment covers %" PRId64 " devices, the mesh has %" PRId64, t->total, n);
        return false;
    }
    if (t->dev[0] != 0) {
        snprintf(why, whylen, "its first tile is on device %" PRId64 ", not 0 (not in mesh order)", t->dev[0]);
        return false;
    }
    uint32_t used = 0;
    for (uint32_t i = 0; i < t->n; i++) {
        /* Whole: views are compared bytewise, unused axes included. */
        memset(&out[i], 0, sizeof out[i]);
        int64_t step = 1, rest = t->dims[i];
        uint8_t rev[MESH_MAX_AXES];
        uint32_t nrev = 0;
        while (rest > 1) {
            int64_t diff = tile_at(t, i, step);
            int a = -1;
            for (uint32_t b = 0; b < m->naxes; b++)
                if (m->sizes[b] > 1 && !(used & (1u << b)) && mesh_stride(m, (int)b) == diff) a = (int)b;
            if (a < 0 || rest % m->sizes[a] != 0) {
                snprintf(why, whylen,
                         "its tile dimension %u (size %" PRId64 ") steps by device %" PRId64
                         ", which is no unused mesh axis",
                         i, t->dims[i], diff);
                return false;
            }
            used |= 1u << a;
            rev[nrev++] = (uint8_t)a;
            rest /= m->sizes[a];
            step *= m->sizes[a];
        }
        for (uint32_t k = 0; k < nrev; k++) out[i].axes[k] = rev[nrev - 1 - k];
        out[i].naxes = (uint8_t)nrev;
    }
    /* Check every tile: device = sum over dims of the dim's combined coordinate
     * spread over its axes. */
    int64_t idx[VIEW_MAX_RANK + 8] = {0};
    for (int64_t k = 0; k < t->total; k++) {
        int64_t dev = 0;
        for (uint32_t i = 0; i < t->n; i++) {
            int64_t j = idx[i];
            for (uint32_t q = out[i].naxes; q-- > 0;) {
                int a = out[i].axes[q];
                dev += (j % m->sizes[a]) * mesh_stride(m, a);
                j /= m->sizes[a];
            }
        }
        if (dev != t->dev[k]) {
            snprintf(why, whylen, "tile %" PRId64 " is on device %" PRId64 ", the mesh order puts device %" PRId64 " there",
                     k, t->dev[k], dev);
            return false;
        }
        for (uint32_t i = t->n; i-- > 0;) {
            if (++idx[i] < t->dims[i]) break;
            idx[i] = 0;
        }
    }
    return true;
}

/* The view of a value of shape s with HLO sharding sh on mesh m. */
static bool sharding_view(const hlo_sharding *sh, const shape *s, const mesh *m, view *out, char *why, size_t whylen) {
    if (s->dtype == DT_TUPLE) {
        snprintf(why, whylen, "tuple-shaped values are not supported");
        return false;
    }
    if (s->rank > VIEW_MAX_RANK) {
        snprintf(why, whylen, "rank %u is more than a view supports", s->rank);
        return false;
    }
    *out = view_dup(s->rank);
    switch (sh->type) {
    case SH_REPLICATED: return true;
    case SH_OTHER: break;
    case SH_MAXIMAL:
        if (mesh_devices(m) == 1) return true;
        snprintf(why, whylen, "maximal sharding (the whole value on one device) is not a view");
        return false;
    case SH_MANUAL: snprintf(why, whylen, "manual sharding is not a view"); return false;
    case SH_UNREDUCED: snprintf(why, whylen, "fully unreduced sharding is not supported"); return false;
    case SH_TUPLE: snprintf(why, whylen, "tuple sharding on a non-tuple value"); return false;
    default: snprintf(why, whylen, "this sharding form is not supported"); return false;
    }
    tiles t;
    if (!tiles_expand(sh, s->rank, &t, why, whylen)) {
        free(t.dev);
        return false;
    }
    view_dim dims[VIEW_MAX_RANK + 8];
    bool ok = tiles_explain(&t, m, dims, why, whylen);
    for (uint32_t i = 0; ok && i < t.n; i++) {
        if (t.sub[i] < 0) {
            out->dims[i] = dims[i];
        } else if (t.sub[i] == SH_UNREDUCED) {
            for (uint32_t k = 0; k < dims[i].naxes; k++) out->partial |= (uint8_t)(1u << dims[i].axes[k]);
            if (out->partial) out->red = RED_SUM;
        } else if (t.sub[i] != SH_REPLICATED) {
            snprintf(why, whylen, "subgroup type %d (manual) is not a view", t.sub[i]);
            ok = false;
        }
    }
    free(t.dev);
    if (ok) {
        for (uint32_t d = 0; d < s->rank; d++) {
            int64_t parts = view_dim_parts(out, m, d);
            if (parts <= 0 || s->dims[d] % parts != 0) {
                snprintf(why, whylen, "dimension %u (%" PRId64 ") does not divide into %" PRId64 " tiles", d,
                         s->dims[d], parts);
                return false;
            }
        }
    }
    return ok;
}

/* Whether every dimension of s divides into the parts v cuts it into. */
static bool dims_divide(const view *v, const mesh *m, const shape *s, char *why, size_t whylen) {
    for (uint32_t d = 0; d < s->rank; d++) {
        int64_t parts = view_dim_parts(v, m, d);
        if (parts <= 0 || s->dims[d] % parts != 0) {
            snprintf(why, whylen, "dimension %u (%" PRId64 ") does not divide into %" PRId64 " parts", d, s->dims[d],
                     parts);
            return false;
        }
    }
    return true;
}

/* Shardy's per-value dimension shardings, e.g. #sdy.sharding<@mesh, [{"tp"}, {}]>
 * or the `which`-th element of #sdy.sharding_per_value<[<@mesh, [...]>, ...]>.
 * Axes are named; sub-axes ("x":(1)2) are not supported. */
static bool shardy_view(const char *txt, uint32_t which, const shape *s, const mesh *m, view *out, char *why,
                        size_t whylen) {
    const char *p = txt;
    for (uint32_t k = 0; k <= which; k++) {
        p = strstr(p, "<@");
        if (!p) {
            snprintf(why, whylen, "no Shardy sharding for element %u", which);
            return false;
        }
        p += 2;
    }
    p = strchr(p, '[');
    if (!p) goto bad;
    p++;
    if (s->dtype == DT_TUPLE || s->rank > VIEW_MAX_RANK) {
        snprintf(why, whylen, "tuple-shaped or high-rank values are not supported");
        return false;
    }
    *out = view_dup(s->rank);
    uint32_t d = 0, used = 0;
    for (;;) {
        while (*p == ' ' || *p == ',') p++;
        if (*p == ']') break;
        if (*p != '{' || d >= s->rank) goto bad;
        p++;
        for (;;) {
            while (*p == ' ' || *p == ',' || *p == '\\') p++;
            if (*p == '}') break;
            if (*p == '?') {
                p++;
                continue;
            }
            if (*p != '"') goto bad;
            p++;
            const char *nb = p;
            while (*p && *p != '"' && *p != '\\') p++;
            if (!*p) goto bad;
            int a = mesh_axis(m, nb, (size_t)(p - nb));
            bool unit = false;
            for (uint32_t k = 0; a < 0 && k < m->nunit && !unit; k++)
                unit = strlen(m->unit[k]) == (size_t)(p - nb) && memcmp(m->unit[k], nb, (size_t)(p - nb)) == 0;
            if (unit) {
                while (*p == '\\' || *p == '"') p++;
                if (*p == ':') {
                    snprintf(why, whylen, "Shardy sub-axis shardings are not supported");
                    return false;
                }
                continue;
            }
            if (a < 0) {
                snprintf(why, whylen, "Shardy sharding names axis '%.*s', which is not in the mesh",
                         (int)(p - nb > 32 ? 32 : p - nb), nb);
                return false;
            }
            while (*p == '\\' || *p == '"') p++;
            if (*p == ':') {
                snprintf(why, whylen, "Shardy sub-axis shardings are not supported");
                return false;
            }
            if ((used & (1u << a)) || out->dims[d].naxes == MESH_MAX_AXES) goto bad;
            used |= 1u << a;
            out->dims[d].axes[out->dims[d].naxes++] = (uint8_t)a;
        }
        p++;
        while (*p == '?' || *p == 'p' || isdigit((unsigned char)*p)) p++;
        d++;
    }
    if (d != s->rank) goto bad;
    p++;
    const char *close = strchr(p, '>');
    const char *unred = strstr(p, "unreduced={");
    if (unred && (!close || unred < close)) {
        snprintf(why, whylen, "Shardy unreduced axes are not supported");
        return false;
    }
    return dims_divide(out, m, s, why, whylen);
bad:
    snprintf(why, whylen, "unreadable Shardy sharding");
    return false;
}

static const hlo_sharding *instr_sharding(const hlo_instr *in) {
    const hlo_attr *a = instr_attr(in, A_SHARDING);
    return a && a->kind == K_SHARDING ? a->v.sharding : NULL;
}

/* Derives a mesh (iota order) from the tile assignments: every run of devices
 * with one stride along a tile dimension marks a boundary (stride, stride ×
 * run); the sorted boundaries 1 = b0 | b1 | ... | n cut the device ids into axes,
 * minor to major. */
typedef struct bounds {
    int64_t v[64];
    uint32_t n;
    bool overflow;
} bounds;

static void bounds_add(bounds *b, int64_t x) {
    for (uint32_t i = 0; i < b->n; i++)
        if (b->v[i] == x) return;
    if (b->n == 64) {
        b->overflow = true;
        return;
    }
    b->v[b->n++] = x;
}

static void bounds_from_tiles(const tiles *t, bounds *b) {
    for (uint32_t i = 0; i < t->n; i++) {
        int64_t step = 1;
        while (step < t->dims[i]) {
            int64_t left = t->dims[i] / step, s = tile_at(t, i, step) - t->dev[0];
            if (s <= 0) break;
            /* the longest run with constant stride s, cut to a divisor of what is left */
            int64_t r = 1;
            while (r < left && tile_at(t, i, step * r) - t->dev[0] == r * s) r++;
            while (r > 1 && left % r) r--;
            if (r < 2) break; /* no mesh explains it; tiles_explain says why */
            bounds_add(b, s);
            bounds_add(b, s * r);
            step *= r;
        }
    }
}

static int cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static void collect_shardings(const hlo_comp *c, const hlo_sharding **v, const shape **shp, uint32_t *n,
                              uint32_t cap) {
    *n = 0;
    for (uint32_t k = 0; k < c->nparams && *n < cap; k++) {
        const hlo_instr *in = &c->instrs[c->params[k]];
        const hlo_sharding *s = instr_sharding(in);
        if (s && s->type == SH_OTHER) {
            v[*n] = s;
            shp[(*n)++] = &in->shape;
        }
    }
    const hlo_instr *r = &c->instrs[c->root];
    const hlo_sharding *s = instr_sharding(r);
    if (!s) return;
    if (s->type == SH_OTHER && r->shape.dtype != DT_TUPLE && *n < cap) {
        v[*n] = s;
        shp[(*n)++] = &r->shape;
    }
    if (s->type == SH_TUPLE && r->shape.dtype == DT_TUPLE)
        for (uint32_t i = 0; i < s->ntuple && i < r->shape.ntuple && *n < cap; i++)
            if (s->tuple[i].type == SH_OTHER) {
                v[*n] = &s->tuple[i];
                shp[(*n)++] = &r->shape.tuple[i];
            }
}

/* The mesh of n tiled shardings of values of shapes shp (others skipped). */
static bool derive_mesh_of(const hlo_sharding **v, const shape **shp, uint32_t n, int64_t devices, mesh *out,
                           char *why, size_t whylen) {
    memset(out, 0, sizeof *out);
    bounds b = {.n = 0};
    int64_t total = devices;
    bool ok = true;
    for (uint32_t i = 0; i < n && ok; i++) {
        tiles t;
        if (!tiles_expand(v[i], shp[i]->dtype == DT_TUPLE ? 0 : shp[i]->rank, &t, why, whylen)) {
            free(t.dev);
            continue; /* reported when its view is built */
        }
        if (total <= 0) total = t.total;
        if (t.total == total) bounds_from_tiles(&t, &b);
        free(t.dev);
    }
    if (total <= 0) total = 1;
    bounds_add(&b, 1);
    bounds_add(&b, total);
    if (b.overflow) {
        snprintf(why, whylen, "the tile assignments need too many mesh axes");
        return false;
    }
    qsort(b.v, b.n, sizeof b.v[0], cmp_i64);
    uint32_t k = 0;
    for (uint32_t i = 0; i + 1 < b.n; i++) {
        if (b.v[i + 1] > total) break;
        if (b.v[i + 1] % b.v[i] != 0) {
            snprintf(why, whylen,
                     "the tile assignments do not fit one mesh: device strides %" PRId64 " and %" PRId64
                     " do not nest",
                     b.v[i], b.v[i + 1]);
            return false;
        }
        k++;
    }
    if (k > MESH_MAX_AXES) {
        snprintf(why, whylen, "the tile assignments need more than %d mesh axes", MESH_MAX_AXES);
        return false;
    }
    /* b.v[0..k] are the boundaries up to total; axis j (major first) spans
     * boundaries k-1-j .. k-j. */
    out->naxes = k;
    for (uint32_t j = 0; j < k; j++) {
        snprintf(out->names[j], sizeof out->names[j], "axis_%u", j);
        out->sizes[j] = b.v[k - j] / b.v[k - j - 1];
    }
    if (b.v[k] != total) {
        snprintf(why, whylen, "the tile assignments do not fit %" PRId64 " devices", total);
        return false;
    }
    return ok;
}

static bool derive_mesh(const hlo_comp *c, int64_t devices, mesh *out, char *why, size_t whylen) {
    uint32_t cap = c->nparams + 64, n;
    const hlo_sharding **v = xmalloc(cap * sizeof *v);
    const shape **shp = xmalloc(cap * sizeof *shp);
    collect_shardings(c, v, shp, &n, cap);
    bool ok = derive_mesh_of(v, shp, n, devices, out, why, whylen);
    free(v);
    free(shp);
    return ok;
}

/* The instruction that carries output i's result sharding when the ROOT has
 * none: a FuncResultSharding custom-call reached through get-tuple-element /
 * tuple. Returns the instruction and sets *which to the per-value index. */
static const hlo_instr *result_sharding_call(const hlo_comp *c, uint32_t i, bool tuple_root) {
    uint32_t at = c->root;
    int64_t want = tuple_root ? (int64_t)i : -1;
    for (int guard = 0; guard < 64; guard++) {
        const hlo_instr *in = &c->instrs[at];
        if (in->op == OP_CUSTOM_CALL) {
            const char *tgt = instr_str(in, A_CUSTOM_CALL_TARGET);
            if (want < 0 && tgt && strcmp(tgt, "xla.sdy.FuncResultSharding") == 0) return in;
            return NULL;
        }
        if (in->op == OP_TUPLE && want >= 0 && want < (int64_t)in->noperands) {
            at = in->operands[want];
            want = -1;
        } else if (in->op == OP_GET_TUPLE_ELEMENT && in->noperands == 1 && want < 0) {
            want = instr_int(in, A_INDEX, 0);
            at = in->operands[0];
        } else if (in->op == OP_COPY && in->noperands == 1 && want < 0) {
            at = in->operands[0];
        } else {
            return NULL;
        }
    }
    return NULL;
}

static bool output_view(const hlo_comp *c, uint32_t i, const mesh *m, view *out, bool *free_out, char *why,
                        size_t whylen) {
    const hlo_instr *r = &c->instrs[c->root];
    bool tuple_root = r->shape.dtype == DT_TUPLE;
    const shape *s = output_shape(c, i);
    const hlo_sharding *sh = instr_sharding(r);
    if (sh && sh->type != SH_RAW) {
        if (tuple_root && sh->type == SH_TUPLE) {
            if (i >= sh->ntuple) {
                snprintf(why, whylen, "the ROOT's tuple sharding has %u elements", sh->ntuple);
                return false;
            }
            return sharding_view(&sh->tuple[i], s, m, out, why, whylen);
        }
        if (!tuple_root || sh->type == SH_REPLICATED) return sharding_view(sh, s, m, out, why, whylen);
    }
    const hlo_instr *cc = result_sharding_call(c, i, tuple_root);
    if (cc) {
        const hlo_sharding *cs = instr_sharding(cc);
        if (cs && cs->type != SH_RAW && cs->type != SH_TUPLE) return sharding_view(cs, s, m, out, why, whylen);
        const char *sdy = instr_frontend_attr(cc, "xla.sdy.sharding");
        if (sdy) return shardy_view(sdy, 0, s, m, out, why, whylen);
    }
    if (sh) {
        /* an annotation we could not read: saying dup would be a guess */
        if (sh->type == SH_RAW) snprintf(why, whylen, "unsupported ROOT sharding {%.100s}", sh->raw ? sh->raw : "");
        else snprintf(why, whylen, "the tuple ROOT has a sharding that is neither a tuple nor replicated");
        return false;
    }
    /* No annotation: the partitioner chose the result's sharding (jit without
     * out_shardings); replicated is only the default. */
    *out = view_dup(s->dtype == DT_TUPLE ? 0 : s->rank);
    *free_out = true;
    return true;
}

/* Whether mesh m has as many devices as the distributed program (devices;
 * 0: unknown); else says so in d, naming the mesh by what. */
static bool mesh_fits_devices(const mesh *m, int64_t devices, const char *what, diag *d) {
    if (devices <= 0 || mesh_devices(m) == devices) return true;
    strbuf b;
    sb_init(&b);
    mesh_print(&b, m);
    diag_plain(d, "%s %s has %" PRId64 " devices, the distributed program runs on %" PRId64, what, b.s, mesh_devices(m),
               devices);
    sb_free(&b);
    return false;
}

/* Mesh axis names for a derived mesh, taken from the parameters' Shardy
 * shardings (#sdy.sharding<@mesh, [{"tp"}, {}]>) when those are all that
 * carries them (a protobuf baseline keeps no header attributes). An axis is
 * renamed only when every parameter agrees on its name and names stay unique. */
static void name_derived_axes(const hlo_comp *c, relations *r) {
    char nm[MESH_MAX_AXES][32];
    bool conflict[MESH_MAX_AXES];
    memset(nm, 0, sizeof nm);
    memset(conflict, 0, sizeof conflict);
    for (uint32_t k = 0; k < c->nparams; k++) {
        const hlo_instr *in = &c->instrs[c->params[k]];
        const char *p = instr_frontend_attr(in, "xla.sdy.sharding");
        const view *v = &r->inputs[k];
        if (!p || !(p = strstr(p, "<@")) || !(p = strchr(p, '['))) continue;
        p++;
        for (uint32_t d = 0; d < v->rank; d++) {
            while (*p == ' ' || *p == ',') p++;
            if (*p != '{') break;
            p++;
            uint32_t q = 0;
            for (;;) {
                while (*p == ' ' || *p == ',' || *p == '\\' || *p == '?') p++;
                if (*p != '"') break;
                const char *nb = ++p;
                while (*p && *p != '"' && *p != '\\') p++;
                size_t nn = (size_t)(p - nb);
                while (*p == '\\' || *p == '"') p++;
                if (*p == ':') return; /* sub-axes: names do not map one to one */
                if (q < v->dims[d].naxes && nn > 0 && nn < sizeof nm[0]) {
                    uint32_t a = v->dims[d].axes[q];
                    if (!nm[a][0]) {
                        memcpy(nm[a], nb, nn);
                        nm[a][nn] = 0;
                    } else if (strlen(nm[a]) != nn || memcmp(nm[a], nb, nn) != 0) {
                        conflict[a] = true;
                    }
                }
                q++;
            }
            if (*p != '}') break;
            p++;
            if (q != v->dims[d].naxes) /* size-1 axes or a mismatch: trust nothing here */
                for (uint32_t j = 0; j < v->dims[d].naxes; j++) conflict[v->dims[d].axes[j]] = true;
        }
    }
    for (uint32_t a = 0; a < r->mesh.naxes; a++) {
        if (!nm[a][0] || conflict[a]) continue;
        bool unique = true;
        for (uint32_t b = 0; b < r->mesh.naxes; b++)
            if (b != a && (strcmp(nm[b], nm[a]) == 0 || strcmp(r->mesh.names[b], nm[a]) == 0)) unique = false;
        if (unique) memcpy(r->mesh.names[a], nm[a], sizeof nm[a]);
    }
}

bool relations_auto(const hlo_module *baseline, int64_t devices, relations *out, diag *d) {
    memset(out, 0, sizeof *out);
    const char *file = baseline && baseline->source_path ? baseline->source_path : d->file;
    const char *saved = d->file;
    d->file = file;
    int before = d->count;
    const hlo_comp *c = baseline ? graph_entry(baseline) : NULL;
    char why[320];
    if (!c) {
        diag_plain(d, "the baseline has no entry computation");
        goto done;
    }
    int sm = shardy_mesh(baseline, &out->mesh, why, sizeof why);
    if (sm < 0) {
        diag_plain(d, "%s", why);
        goto done;
    }
    if (sm > 0 && !mesh_fits_devices(&out->mesh, devices, "the Shardy mesh", d)) goto done;
    if (sm == 0 && !derive_mesh(c, devices, &out->mesh, why, sizeof why)) {
        diag_plain(d, "cannot infer a mesh from the sharding annotations: %s", why);
        goto done;
    }
    relations_alloc(out, c->nparams, output_count(c));
    for (uint32_t k = 0; k < c->nparams; k++) {
        const hlo_instr *in = &c->instrs[c->params[k]];
        out->input_names[k] = param_name(c, k);
        const hlo_sharding *sh = instr_sharding(in);
        const char *sdy = instr_frontend_attr(in, "xla.sdy.sharding");
        bool ok;
        if (sh && sh->type != SH_RAW) ok = sharding_view(sh, &in->shape, &out->mesh, &out->inputs[k], why, sizeof why);
        else if (sdy && sm > 0) ok = shardy_view(sdy, 0, &in->shape, &out->mesh, &out->inputs[k], why, sizeof why);
        else if (sh) {
            snprintf(why, sizeof why, "unsupported sharding {%.100s}", sh->raw ? sh->raw : "");
            ok = false;
        } else {
            /* No annotation: JAX annotates every argument it was given a
             * sharding for; an unannotated one is taken as replicated. */
            out->inputs[k] = view_dup(in->shape.dtype == DT_TUPLE ? 0 : in->shape.rank);
            ok = true;
        }
        if (!ok) {
            strbuf b;
            sb_init(&b);
            mesh_print(&b, &out->mesh);
            if (out->input_names[k])
                diag_plain(d, "parameter %u '%s': sharding cannot be explained by the mesh %s: %s", k,
                           out->input_names[k], b.s, why);
            else
                diag_plain(d, "parameter %u: sharding cannot be explained by the mesh %s: %s", k, b.s, why);
            sb_free(&b);
        }
    }
    if (sm == 0 && d->count == before) name_derived_axes(c, out);
    for (uint32_t i = 0; i < out->noutputs; i++) {
        if (!output_view(c, i, &out->mesh, &out->outputs[i], &out->output_free[i], why, sizeof why)) {
            strbuf b;
            sb_init(&b);
            mesh_print(&b, &out->mesh);
            diag_plain(d, "output %u: sharding cannot be explained by the mesh %s: %s", i, b.s, why);
            sb_free(&b);
        }
    }
done:
    d->file = saved;
    if (d->count == before) return true;
    relations_free(out);
    return false;
}

/* ---- relations from the distributed module (shard_map pairs) ---- */

/* Whether the baseline says anything about shardings: a Shardy mesh, a
 * sharding on an entry parameter or the result. A plain single-device
 * baseline (a shard_map pair's) says nothing. */
static bool baseline_annotated(const hlo_module *m) {
    mesh tmp;
    char why[160];
    if (shardy_mesh(m, &tmp, why, sizeof why) != 0) return true;
    const hlo_comp *c = graph_entry(m);
    if (!c) return false;
    for (uint32_t k = 0; k < c->nparams; k++) {
        const hlo_instr *in = &c->instrs[c->params[k]];
        if (instr_sharding(in) || instr_frontend_attr(in, "xla.sdy.sharding")) return true;
    }
    const hlo_instr *r = &c->instrs[c->root];
    if (instr_sharding(r)) return true;
    bool tuple_root = r->shape.dtype == DT_TUPLE;
    for (uint32_t i = 0; i < output_count(c); i++)
        if (result_sharding_call(c, i, tuple_root)) return true;
    return false;
}

/* A quoted axis name 'x' at p: sets *nb and *nn, returns the position after it,
 * or NULL. */
static const char *named_axis(const char *p, const char **nb, size_t *nn) {
    if (*p != '\'') return NULL;
    *nb = ++p;
    while (*p && *p != '\'') p++;
    if (!*p) return NULL;
    *nn = (size_t)(p - *nb);
    return p + 1;
}

/* The mesh of a sharding by mesh axes as the printer writes it,
 * mesh['dp'=2,'tp'=4], [...]: 1 when raw is one (out filled), 0 when it is
 * some other form, -1 with a reason. Sets *rest after the mesh. */
static int named_mesh(const char *raw, mesh *out, const char **rest, char *why, size_t whylen) {
    memset(out, 0, sizeof *out);
    if (!raw || strncmp(raw, "mesh[", 5) != 0) return 0;
    const char *p = raw + 5;
    while (*p != ']') {
        const char *nb;
        size_t nn;
        p = named_axis(p, &nb, &nn);
        if (!p || *p != '=' || nn == 0 || nn >= sizeof out->names[0]) {
            snprintf(why, whylen, "unreadable mesh in sharding {%.80s}", raw);
            return -1;
        }
        char *end;
        long long size = strtoll(p + 1, &end, 10);
        if (end == p + 1 || size < 1 || size > MESH_MAX_DEVICES) {
            snprintf(why, whylen, "unreadable mesh axis size in sharding {%.80s}", raw);
            return -1;
        }
        if (out->naxes == MESH_MAX_AXES) {
            snprintf(why, whylen, "the sharding's mesh has more than %d axes", MESH_MAX_AXES);
            return -1;
        }
        memcpy(out->names[out->naxes], nb, nn);
        out->names[out->naxes][nn] = 0;
        out->sizes[out->naxes++] = size;
        p = end;
        if (*p == ',') p++;
        else if (*p != ']') {
            snprintf(why, whylen, "unreadable mesh in sharding {%.80s}", raw);
            return -1;
        }
    }
    if (mesh_devices(out) > MESH_MAX_DEVICES) {
        snprintf(why, whylen, "the sharding's mesh is too large");
        return -1;
    }
    *rest = p + 1;
    return 1;
}

/* The view of a sharding by mesh axes (named_mesh's form) on mesh m, e.g.
 * mesh['dp'=2,'tp'=4], [{'tp'}, {}] is shard(0,tp). Open dimensions,
 * sub-axes, explicit device orders, unreduced and manual axes are refused:
 * each says something a view does not, or not for certain. */
static bool named_view(const char *raw, const shape *s, const mesh *m, view *out, char *why, size_t whylen) {
    mesh own;
    const char *p;
    int r = named_mesh(raw, &own, &p, why, whylen);
    if (r == 0) snprintf(why, whylen, "unsupported sharding {%.100s}", raw ? raw : "");
    if (r <= 0) return false;
    bool same = own.naxes == m->naxes || own.naxes == 0;
    for (uint32_t a = 0; same && a < own.naxes; a++)
        same = own.sizes[a] == m->sizes[a] && strcmp(own.names[a], m->names[a]) == 0;
    if (!same) {
        snprintf(why, whylen, "the sharding {%.100s} is on another mesh than the others", raw);
        return false;
    }
    if (s->dtype == DT_TUPLE || s->rank > VIEW_MAX_RANK) {
        snprintf(why, whylen, "tuple-shaped or high-rank values are not supported");
        return false;
    }
    *out = view_dup(s->rank);
    if (strncmp(p, ", device_ids=", 13) == 0) {
        snprintf(why, whylen, "the sharding's mesh has an explicit device order; only iota order is supported");
        return false;
    }
    uint32_t used = 0, d = 0;
    if (strncmp(p, ", [", 3) == 0) {
        p += 3;
        while (*p != ']') {
            if (*p != '{' || d >= s->rank) goto bad;
            p++;
            while (*p != '}') {
                const char *nb;
                size_t nn;
                if (*p == '?') {
                    snprintf(why, whylen, "an open dimension (?) in {%.100s} does not say the sharding", raw);
                    return false;
                }
                if (!(p = named_axis(p, &nb, &nn))) goto bad;
                if (*p == ':') {
                    snprintf(why, whylen, "sub-axis shardings are not supported");
                    return false;
                }
                int a = mesh_axis(m, nb, nn);
                if (a < 0 || (used & (1u << a)) || out->dims[d].naxes == MESH_MAX_AXES) goto bad;
                used |= 1u << a;
                out->dims[d].axes[out->dims[d].naxes++] = (uint8_t)a;
                if (*p == ',') p += *(p + 1) == ' ' ? 2 : 1;
                else if (*p != '}') goto bad;
            }
            p++;
            d++;
            if (*p == ',') p += *(p + 1) == ' ' ? 2 : 1;
            else if (*p != ']') goto bad;
        }
        p++;
        if (d != s->rank) goto bad;
    }
    /* What may follow: replicated axes (the default anyway). */
    if (strstr(p, "unreduced") || strstr(p, "manual")) {
        snprintf(why, whylen, "unreduced or manual axes in {%.100s} are not a view", raw);
        return false;
    }
    return dims_divide(out, m, s, why, whylen);
bad:
    snprintf(why, whylen, "unreadable sharding {%.100s}", raw);
    return false;
}

/* The sharding the distributed module records for entry parameter k: the
 * partitioner's spmd_parameters_shardings (protobuf), else the parameter's
 * own sharding= (text dumps print it there); NULL when neither. */
static const hlo_sharding *dist_param_sharding(const hlo_module *dm, const hlo_comp *dc, uint32_t k) {
    if (dm->nspmd_params == dc->nparams) return &dm->spmd_params[k];
    return instr_sharding(&dc->instrs[dc->params[k]]);
}

/* The sharding it records for output i (element i of a tuple result): the
 * ROOT's sharding, else the partitioner's spmd_output_sharding; NULL when
 * neither says. */
static const hlo_sharding *dist_output_sharding(const hlo_module *dm, const hlo_comp *dc, uint32_t i) {
    const hlo_instr *r = &dc->instrs[dc->root];
    const hlo_sharding *s = instr_sharding(r);
    if (!s) s = dm->spmd_output;
    if (!s || r->shape.dtype != DT_TUPLE) return s;
    if (s->type == SH_TUPLE) return i < s->ntuple ? &s->tuple[i] : NULL;
    return s->type == SH_REPLICATED ? s : NULL;
}

static bool dist_view(const hlo_sharding *sh, const shape *s, const mesh *m, view *out, char *why, size_t whylen) {
    if (sh->type == SH_RAW) return named_view(sh->raw, s, m, out, why, whylen);
    return sharding_view(sh, s, m, out, why, whylen);
}

/* The mesh: the one the shardings by mesh axes name (they must agree), else
 * the module's Shardy mesh, else one derived from the tile assignments. */
static bool dist_mesh(const hlo_module *dm, const hlo_sharding **v, const shape **shp, uint32_t n, mesh *out,
                      char *why, size_t whylen) {
    bool named = false;
    for (uint32_t i = 0; i < n; i++) {
        if (v[i]->type != SH_RAW) continue;
        mesh one;
        const char *rest;
        int r = named_mesh(v[i]->raw, &one, &rest, why, whylen);
        if (r < 0) return false;
        if (r == 0 || one.naxes == 0) continue; /* mesh[]: no axis, nothing split */
        if (named && (one.naxes != out->naxes || memcmp(one.sizes, out->sizes, sizeof one.sizes) != 0 ||
                      memcmp(one.names, out->names, sizeof one.names) != 0)) {
            snprintf(why, whylen, "the shardings name more than one mesh: {%.100s}", v[i]->raw);
            return false;
        }
        *out = one;
        named = true;
    }
    if (named) return true;
    int sm = shardy_mesh(dm, out, why, whylen);
    if (sm < 0) return false;
    if (sm > 0) return true;
    const hlo_sharding **tv = xmalloc((n ? n : 1) * sizeof *tv);
    const shape **ts = xmalloc((n ? n : 1) * sizeof *ts);
    uint32_t nt = 0;
    for (uint32_t i = 0; i < n; i++)
        if (v[i]->type == SH_OTHER) {
            tv[nt] = v[i];
            ts[nt++] = shp[i];
        }
    bool ok = derive_mesh_of(tv, ts, nt, graph_num_devices(dm), out, why, whylen);
    free(tv);
    free(ts);
    if (!ok) {
        char inner[200];
        snprintf(inner, sizeof inner, "%.190s", why);
        snprintf(why, whylen, "cannot infer a mesh from the shardings: %s", inner);
    }
    return ok;
}

static bool relations_from_distributed(const hlo_module *baseline, const hlo_module *dist, relations *out, diag *d) {
    const hlo_comp *bc = graph_entry(baseline), *dc = dist ? graph_entry(dist) : NULL;
    char why[320];
    if (!bc || !dc) {
        diag_plain(d, "the %s has no entry computation", bc ? "distributed program" : "baseline");
        return false;
    }
    uint32_t nout = output_count(bc);
    if (dc->nparams != bc->nparams || output_count(dc) != nout) {
        diag_plain(d,
                   "the baseline has %u parameters and %u outputs, the distributed program %u and %u: relations "
                   "cannot be read from the distributed program",
                   bc->nparams, nout, dc->nparams, output_count(dc));
        return false;
    }
    /* Every parameter and output must be said; nothing is assumed. */
    uint32_t n = bc->nparams + nout;
    const hlo_sharding **v = xmalloc((n ? n : 1) * sizeof *v);
    const shape **shp = xmalloc((n ? n : 1) * sizeof *shp);
    bool ok = true;
    for (uint32_t k = 0; k < bc->nparams; k++) {
        v[k] = dist_param_sharding(dist, dc, k);
        shp[k] = &bc->instrs[bc->params[k]].shape;
        if (!v[k] && ok) {
            diag_plain(d,
                       "the distributed program records no sharding for parameter %u (text dumps of newer XLA "
                       "versions print none: use the protobuf dump, .hlo.pb, or a relations file)",
                       k);
            ok = false;
        }
    }
    for (uint32_t i = 0; i < nout; i++) {
        v[bc->nparams + i] = dist_output_sharding(dist, dc, i);
        shp[bc->nparams + i] = output_shape(bc, i);
        if (!v[bc->nparams + i] && ok) {
            diag_plain(d,
                       "the distributed program records no sharding for output %u (a text dump does not print the "
                       "result's sharding: use the protobuf dump, .hlo.pb, or a relations file)",
                       i);
            ok = false;
        }
    }
    if (ok && !dist_mesh(dist, v, shp, n, &out->mesh, why, sizeof why)) {
        diag_plain(d, "%s", why);
        ok = false;
    }
    int64_t devices = graph_num_devices(dist);
    if (ok && !mesh_fits_devices(&out->mesh, devices, "the shardings' mesh", d)) {
        ok = false;
    }
    if (ok) {
        relations_alloc(out, bc->nparams, nout);
        for (uint32_t k = 0; k < n; k++) {
            bool input = k < bc->nparams;
            uint32_t i = input ? k : k - bc->nparams;
            if (input) out->input_names[i] = param_name(bc, i);
            if (dist_view(v[k], shp[k], &out->mesh, input ? &out->inputs[i] : &out->outputs[i], why, sizeof why))
                continue;
            strbuf b;
            sb_init(&b);
            mesh_print(&b, &out->mesh);
            if (input && out->input_names[i])
                diag_plain(d, "parameter %u '%s': the distributed program's sharding cannot be explained by the mesh "
                              "%s: %s",
                           i, out->input_names[i], b.s, why);
            else
                diag_plain(d, "%s %u: the distributed program's sharding cannot be explained by the mesh %s: %s",
                           input ? "parameter" : "output", i, b.s, why);
            sb_free(&b);
            ok = false;
        }
    }
    free(v);
    free(shp);
    return ok;
}

/* Whether the distributed module records any sharding of its interface. */
static bool dist_records(const hlo_module *dm) {
    const hlo_comp *dc = graph_entry(dm);
    if (dm->nspmd_params || dm->spmd_output) return true;
    if (!dc) return false;
    for (uint32_t k = 0; k < dc->nparams; k++)
        if (instr_sharding(&dc->instrs[dc->params[k]])) return true;
    return instr_sharding(&dc->instrs[dc->root]) != NULL;
}

/* Neither program records a sharding: a value whose per-device shape is its
 * global shape is split nowhere (dup, as relations_auto has it); one whose
 * shapes differ is split somehow, and nothing says how. */
static void unsplit_only(const hlo_comp *bc, const hlo_comp *dc, diag *d) {
    if (!bc || !dc || bc->nparams != dc->nparams || output_count(bc) != output_count(dc)) return;
    uint32_t nout = output_count(bc);
    for (uint32_t k = 0; k < bc->nparams + nout; k++) {
        bool input = k < bc->nparams;
        uint32_t i = input ? k : k - bc->nparams;
        const shape *g = input ? &bc->instrs[bc->params[i]].shape : output_shape(bc, i);
        const shape *l = input ? &dc->instrs[dc->params[i]].shape : output_shape(dc, i);
        if (shape_equal(g, l)) continue;
        strbuf gs, ls;
        sb_init(&gs);
        sb_init(&ls);
        shape_print(&gs, g);
        shape_print(&ls, l);
        diag_plain(d,
                   "%s %u is %s in the baseline and %s on each device, and neither program records how it is "
                   "split (text dumps of newer XLA versions print no shardings: use the protobuf dump, .hlo.pb, "
                   "or a relations file)",
                   input ? "parameter" : "output", i, gs.s, ls.s);
        sb_free(&gs);
        sb_free(&ls);
        return;
    }
}

bool relations_auto_pair(const hlo_module *baseline, const hlo_module *distributed, relations *out, diag *d) {
    if (!baseline || baseline_annotated(baseline) || !distributed)
        return relations_auto(baseline, distributed ? graph_num_devices(distributed) : 0, out, d);
    const char *saved = d->file;
    int before = d->count;
    if (!dist_records(distributed)) {
        if (!relations_auto(baseline, graph_num_devices(distributed), out, d)) return false;
        d->file = distributed->source_path ? distributed->source_path : d->file;
        unsplit_only(graph_entry(baseline), graph_entry(distributed), d);
    } else {
        memset(out, 0, sizeof *out);
        d->file = distributed->source_path ? distributed->source_path : d->file;
        relations_from_distributed(baseline, distributed, out, d);
    }
    d->file = saved;
    if (d->count == before) return true;
    relations_free(out);
    return false;
}
