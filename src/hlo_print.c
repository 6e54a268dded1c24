/* hlo_print — graph IR → canonical HLO text (read back identically by hlo_parse). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hlo.h"
#include "hlo_lex.h"

static void print_ints(strbuf *b, const int64_t *v, uint32_t n) {
    for (uint32_t i = 0; i < n; i++) sb_printf(b, i ? ",%lld" : "%lld", (long long)v[i]);
}

static void print_quoted(strbuf *b, const char *s) {
    sb_putc(b, '"');
    sb_put_escaped(b, s, strlen(s));
    sb_putc(b, '"');
}

/* Shortest decimal that reads back to the same value of the element type. */
static void print_float(strbuf *b, int dt, double v) {
    if (isnan(v)) { sb_puts(b, signbit(v) ? "-nan" : "nan"); return; }
    if (isinf(v)) { sb_puts(b, v < 0 ? "-inf" : "inf"); return; }
    char buf[64];
    int maxp = dt == DT_F64 ? 17 : 9;
    for (int p = 1; p <= maxp; p++) {
        snprintf(buf, sizeof buf, "%.*g", p, v);
        double back = dt == DT_F64 ? strtod(buf, NULL) : dtype_round(dt, (double)strtof(buf, NULL));
        if (back == v) break;
    }
    sb_puts(b, buf);
}

static void print_value(strbuf *b, const hlo_literal *l, int64_t k) {
    if (l->f) print_float(b, l->dtype, l->f[k]);
    else if (l->dtype == DT_PRED) sb_puts(b, l->i[k] ? "true" : "false");
    else if (dtype_is_unsigned(l->dtype)) sb_printf(b, "%llu", (unsigned long long)l->i[k]);
    else sb_printf(b, "%lld", (long long)l->i[k]);
}

/* Nested braces following the dimensions: {{1, 2}, {3, 4}}. */
static void print_array(strbuf *b, const hlo_literal *l, const shape *s, uint32_t dim, int64_t *k) {
    if (dim == s->rank) {
        print_value(b, l, (*k)++);
        return;
    }
    sb_putc(b, '{');
    for (int64_t i = 0; i < s->dims[dim]; i++) {
        if (i) sb_puts(b, ", ");
        print_array(b, l, s, dim + 1, k);
    }
    sb_putc(b, '}');
}

static void print_literal(strbuf *b, const hlo_literal *l, const shape *s) {
    if (l->raw) sb_puts(b, l->raw);
    else if (l->elided) sb_puts(b, "{...}");
    else {
        int64_t k = 0;
        print_array(b, l, s, 0, &k);
    }
}

static void print_groups(strbuf *b, const hlo_groups *g) {
    if (g->mesh) {
        sb_puts(b, "mesh[");
        for (uint32_t i = 0; i < g->naxes; i++)
            sb_printf(b, i ? ",'%s'=%lld" : "'%s'=%lld", g->axis_names[i], (long long)g->axis_sizes[i]);
        sb_putc(b, ']');
        if (g->dev_reshape) {
            sb_puts(b, ", device_ids=([");
            print_ints(b, g->dev_reshape, g->ndev_reshape);
            sb_putc(b, ']');
            if (g->ndev_perm) {
                sb_puts(b, "T(");
                print_ints(b, g->dev_perm, g->ndev_perm);
                sb_putc(b, ')');
            }
            sb_putc(b, ')');
        } else if (g->device_ids) {
            sb_puts(b, ", device_ids=(");
            print_ints(b, g->device_ids, g->ndevice_ids);
            sb_putc(b, ')');
        }
        sb_puts(b, " {");
        for (uint32_t i = 0; i < g->nsel; i++) {
            sb_printf(b, i ? ",'%s'" : "'%s'", g->axis_names[g->sel[i].axis]);
            if (g->sel[i].size) sb_printf(b, ":(%lld)%lld", (long long)g->sel[i].pre, (long long)g->sel[i].size);
        }
        sb_putc(b, '}');
        return;
    }
    if (g->iota) {
        sb_printf(b, "[%u,%lld]<=[", g->ngroups, (long long)g->group_size);
        print_ints(b, g->reshape, g->nreshape);
        sb_putc(b, ']');
        if (g->nperm) {
            sb_puts(b, "T(");
            print_ints(b, g->perm, g->nperm);
            sb_putc(b, ')');
        }
        return;
    }
    sb_putc(b, '{');
    for (uint32_t i = 0; i < g->ngroups; i++) {
        sb_puts(b, i ? ",{" : "{");
        print_ints(b, g->ids + g->start[i], g->start[i + 1] - g->start[i]);
        sb_putc(b, '}');
    }
    sb_putc(b, '}');
}

static void print_sharding_body(strbuf *b, const hlo_sharding *s) {
    static const char *const types[] = {"replicated", "maximal", "tuple", "other", "manual", "unknown", "unreduced"};
    switch (s->type) {
    case SH_RAW: sb_puts(b, s->raw); return;
    case SH_REPLICATED: sb_puts(b, "replicated"); return;
    case SH_MANUAL: sb_puts(b, "manual"); return;
    case SH_UNKNOWN: sb_puts(b, "unknown"); return;
    case SH_UNREDUCED: sb_puts(b, "unreduced"); return;
    case SH_MAXIMAL: sb_printf(b, "maximal device=%lld", (long long)(s->ndevices ? s->devices[0] : 0)); return;
    case SH_TUPLE:
        for (uint32_t i = 0; i < s->ntuple; i++) {
            sb_puts(b, i ? ", {" : "{");
            print_sharding_body(b, &s->tuple[i]);
            sb_putc(b, '}');
        }
        return;
    default:
        sb_puts(b, "devices=[");
        print_ints(b, s->tile_dims, s->ntile);
        sb_putc(b, ']');
        if (s->nreshape) {
            sb_puts(b, "<=[");
            print_ints(b, s->reshape, s->nreshape);
            sb_putc(b, ']');
            if (s->nperm) {
                sb_puts(b, "T(");
                print_ints(b, s->perm, s->nperm);
                sb_putc(b, ')');
            }
        } else {
            print_ints(b, s->devices, s->ndevices);
        }
        if (s->replicate_last) sb_puts(b, " last_tile_dim_replicate");
        if (s->nlast) {
            sb_puts(b, " last_tile_dims={");
            for (uint32_t i = 0; i < s->nlast; i++) {
                if (i) sb_putc(b, ',');
                int t = s->last_tile_dims[i];
                sb_puts(b, t >= 0 && t < (int)ARRAY_LEN(types) ? types[t] : "unknown");
            }
            sb_putc(b, '}');
        }
    }
}

static bool is_plain_name(const char *s) {
    if (!*s || *s == '-') return false;
    for (; *s; s++)
        if (!lex_is_name_char(*s)) return false;
    return true;
}

void hlo_print_attr_value(strbuf *b, const hlo_module *m, const hlo_comp *c, const hlo_instr *in,
                             const hlo_attr *a) {
    switch (a->kind) {
    case K_INT: sb_printf(b, "%lld", (long long)a->v.i); break;
    case K_BOOL: sb_puts(b, a->v.i ? "true" : "false"); break;
    case K_INTS: sb_putc(b, '{'); print_ints(b, a->v.ints, a->n); sb_putc(b, '}'); break;
    case K_IDENT: case K_RAW: sb_puts(b, a->v.str); break;
    case K_IDENTS:
        sb_putc(b, '{');
        for (uint32_t i = 0; i < a->n; i++) {
            if (i) sb_putc(b, ',');
            sb_puts(b, a->v.strs[i]);
        }
        sb_putc(b, '}');
        break;
    case K_STRING: print_quoted(b, a->v.str); break;
    case K_BACKEND:
        if (a->v.str[0] == '{') sb_puts(b, a->v.str);
        else print_quoted(b, a->v.str);
        break;
    case K_COMP: sb_printf(b, "%%%s", m->comps[a->v.ints[0]].name); break;
    case K_COMPS:
        if (a->key == A_CALLS && a->n == 1) {
            sb_printf(b, "%%%s", m->comps[a->v.ints[0]].name);
            break;
        }
        sb_putc(b, '{');
        for (uint32_t i = 0; i < a->n; i++) sb_printf(b, i ? ", %%%s" : "%%%s", m->comps[a->v.ints[i]].name);
        sb_putc(b, '}');
        break;
    case K_INSTRS:
        sb_putc(b, '{');
        for (uint32_t i = 0; i < a->n; i++) sb_printf(b, i ? ", %%%s" : "%%%s", c->instrs[a->v.ints[i]].name);
        sb_putc(b, '}');
        break;
    case K_SLICES:
        sb_putc(b, '{');
        for (uint32_t i = 0; i < a->n; i++) {
            const int64_t *s = a->v.ints + 3 * i;
            sb_printf(b, i ? ", [%lld:%lld" : "[%lld:%lld", (long long)s[0], (long long)s[1]);
            if (s[2] != 1) sb_printf(b, ":%lld", (long long)s[2]);
            sb_putc(b, ']');
        }
        sb_putc(b, '}');
        break;
    case K_PADDING:
        for (uint32_t i = 0; i < a->n; i++) {
            const int64_t *p = a->v.ints + 3 * i;
            sb_printf(b, i ? "x%lld_%lld" : "%lld_%lld", (long long)p[0], (long long)p[1]);
            if (p[2]) sb_printf(b, "_%lld", (long long)p[2]);
        }
        break;
    case K_GROUPS: case K_LISTS: print_groups(b, a->v.groups); break;
    case K_SHARDING: sb_putc(b, '{'); print_sharding_body(b, a->v.sharding); sb_putc(b, '}'); break;
    case K_KV:
        sb_putc(b, '{');
        for (uint32_t i = 0; i < a->n; i++) {
            if (i) sb_puts(b, ", ");
            if (is_plain_name(a->v.strs[2 * i])) sb_puts(b, a->v.strs[2 * i]);
            else print_quoted(b, a->v.strs[2 * i]);
            sb_putc(b, '=');
            print_quoted(b, a->v.strs[2 * i + 1]);
        }
        sb_putc(b, '}');
        break;
    case K_LITERAL: print_literal(b, a->v.lit, &in->shape); break;
    }
}

/* Attributes XLA's own parser insists on even when they hold the default. */
static bool required(int op, int key) {
    switch (key) {
    case A_INDEX: return op == OP_GET_TUPLE_ELEMENT;
    case A_IOTA_DIMENSION: return op == OP_IOTA;
    case A_K: case A_LARGEST: return op == OP_TOPK; /* absent largest would read as true */
    case A_DIMENSIONS:
        return op == OP_BROADCAST || op == OP_TRANSPOSE || op == OP_REDUCE || op == OP_REVERSE ||
               op == OP_CONCATENATE;
    case A_REPLICA_GROUPS:
        return op == OP_ALL_REDUCE || op == OP_ALL_GATHER || op == OP_REDUCE_SCATTER ||
               op == OP_ALL_TO_ALL || op == OP_ALL_REDUCE_START || op == OP_ALL_GATHER_START;
    default: return false;
    }
}

static void print_meta(strbuf *b, const hlo_meta *md, const char *op_name) {
    static const hlo_meta none;
    if (!md) md = &none;
    sb_puts(b, ", metadata={");
    size_t start = b->len;
#define SEP() do { if (b->len > start) sb_putc(b, ' '); } while (0)
    if (md->op_type) { SEP(); sb_puts(b, "op_type="); print_quoted(b, md->op_type); }
    if (op_name) { SEP(); sb_puts(b, "op_name="); print_quoted(b, op_name); }
    if (md->source_file) { SEP(); sb_puts(b, "source_file="); print_quoted(b, md->source_file); }
    if (md->source_line) { SEP(); sb_printf(b, "source_line=%d", md->source_line); }
    if (md->source_end_line) { SEP(); sb_printf(b, "source_end_line=%d", md->source_end_line); }
    if (md->source_column) { SEP(); sb_printf(b, "source_column=%d", md->source_column); }
    if (md->source_end_column) { SEP(); sb_printf(b, "source_end_column=%d", md->source_end_column); }
    if (md->stack_frame_id) { SEP(); sb_printf(b, "stack_frame_id=%d", md->stack_frame_id); }
    if (md->extra) { SEP(); sb_puts(b, md->extra); }
#undef SEP
    sb_putc(b, '}');
}

void hlo_print_instr(strbuf *b, const hlo_module *m, const hlo_comp *c, const hlo_instr *in) {
    sb_printf(b, "%%%s = ", in->name);
    shape_print(b, &in->shape);
    sb_printf(b, " %s(", in->opname);
    const hlo_attr *lit = instr_attr(in, A_LITERAL);
    if (in->op == OP_PARAMETER) sb_printf(b, "%lld", (long long)instr_int(in, A_PARAMETER_NUMBER, 0));
    else if (lit) print_literal(b, lit->v.lit, &in->shape);
    for (uint32_t o = 0; o < in->noperands; o++) sb_printf(b, o ? ", %%%s" : "%%%s", c->instrs[in->operands[o]].name);
    sb_putc(b, ')');
    uint32_t j = 0;
    for (int key = 0; key < A_RAW; key++) {
        const hlo_attr *a = j < in->nattrs && in->attrs[j].key == key ? &in->attrs[j++] : NULL;
        if (key == A_PARAMETER_NUMBER || key == A_LITERAL) continue;
        if (!a && !required(in->op, key)) continue;
        sb_printf(b, ", %s=", attr_key_name(key));
        if (a) {
            hlo_print_attr_value(b, m, c, in, a);
        } else {
            attr_kind k = attr_key_kind(key);
            sb_puts(b, k == K_INTS ? "{}" : k == K_GROUPS ? "{}" : k == K_BOOL ? "false" : "0");
        }
    }
    for (; j < in->nattrs; j++) {
        const hlo_attr *a = &in->attrs[j];
        sb_printf(b, ", %s=", a->key == A_RAW ? a->raw_key : attr_key_name(a->key));
        hlo_print_attr_value(b, m, c, in, a);
    }
    if (in->meta || in->op_name) print_meta(b, in->meta, in->op_name);
}

void hlo_print(strbuf *b, const hlo_module *m) {
    sb_printf(b, "HloModule %s", m->name);
    for (uint32_t i = 0; i < m->nattrs; i++) sb_printf(b, ", %s=%s", m->attrs[i].raw_key, m->attrs[i].v.str);
    sb_puts(b, "\n\n");
    if (m->nfile_names) {
        sb_puts(b, "FileNames\n");
        for (uint32_t i = 0; i < m->nfile_names; i++) {
            sb_printf(b, "%u ", i + 1);
            print_quoted(b, m->file_names[i]);
            sb_putc(b, '\n');
        }
        sb_putc(b, '\n');
    }
    if (m->nfunction_names) {
        sb_puts(b, "FunctionNames\n");
        for (uint32_t i = 0; i < m->nfunction_names; i++) {
            sb_printf(b, "%u ", i + 1);
            print_quoted(b, m->function_names[i]);
            sb_putc(b, '\n');
        }
        sb_putc(b, '\n');
    }
    if (m->nfile_locs) {
        sb_puts(b, "FileLocations\n");
        for (uint32_t i = 0; i < m->nfile_locs; i++) {
            const hlo_file_loc *l = &m->file_locs[i];
            sb_printf(b, "%u {file_name_id=%d function_name_id=%d line=%d end_line=%d column=%d end_column=%d}\n",
                      i + 1, l->file_name_id, l->function_name_id, l->line, l->end_line, l->column, l->end_column);
        }
        sb_putc(b, '\n');
    }
    if (m->nframes) {
        sb_puts(b, "StackFrames\n");
        for (uint32_t i = 0; i < m->nframes; i++)
            sb_printf(b, "%u {file_location_id=%d parent_frame_id=%d}\n", i + 1, m->frames[i].file_location_id,
                      m->frames[i].parent_frame_id + 1);
        sb_putc(b, '\n');
    }
    for (uint32_t ci = 0; ci < m->ncomps; ci++) {
        const hlo_comp *c = &m->comps[ci];
        sb_printf(b, "%s%%%s {\n", c->is_entry ? "ENTRY " : "", c->name);
        for (uint32_t i = 0; i < c->ninstrs; i++) {
            sb_puts(b, i == c->root ? "  ROOT " : "  ");
            hlo_print_instr(b, m, c, &c->instrs[i]);
            sb_putc(b, '\n');
        }
        sb_puts(b, ci + 1 < m->ncomps ? "}\n\n" : "}\n");
    }
}
