/* stf — Scalify tensor files; the format is in stf.h. */
#include "stf.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io.h"

static int elem_bytes(int dt) {
    switch (dt) {
    case DT_PRED: case DT_S8: case DT_U8: return 1;
    case DT_S16: case DT_U16: case DT_F16: case DT_BF16: return 2;
    case DT_S32: case DT_U32: case DT_F32: return 4;
    case DT_S64: case DT_U64: case DT_F64: return 8;
    default: return 0;
    }
}

static uint64_t le(const uint8_t *p, int n) {
    uint64_t v = 0;
    for (int k = n - 1; k >= 0; k--) v = v << 8 | p[k];
    return v;
}

static double half_to_double(uint16_t b) {
    int e = (b >> 10) & 0x1f, f = b & 0x3ff;
    double v = e == 0 ? ldexp(f, -24) : e == 31 ? (f ? NAN : INFINITY) : ldexp(1024 + f, e - 25);
    return (b & 0x8000) ? -v : v;
}

static uint16_t double_to_half(double x) {
    uint16_t s = signbit(x) ? 0x8000 : 0;
    double a = fabs(dtype_round(DT_F16, x));
    if (a != a) return 0x7e00 | s;
    if (isinf(a)) return 0x7c00 | s;
    if (a == 0) return s;
    int e;
    double m = frexp(a, &e);
    int ex = e - 1 + 15;
    if (ex <= 0) return s | (uint16_t)nearbyint(a / 0x1p-24);
    return s | (uint16_t)(ex << 10) | (uint16_t)((int)nearbyint((m * 2 - 1) * 1024) & 0x3ff);
}

static void decode(interp_val *v, const uint8_t *p) {
    int eb = elem_bytes(v->dtype);
    for (int64_t k = 0; k < v->n; k++, p += eb) {
        uint64_t u = le(p, eb);
        switch (v->dtype) {
        case DT_F32: {
            uint32_t w = (uint32_t)u;
            float f;
            memcpy(&f, &w, 4);
            v->f[k] = f;
            break;
        }
        case DT_F64: memcpy(&v->f[k], &u, 8); break;
        case DT_BF16: {
            uint32_t w = (uint32_t)u << 16;
            float f;
            memcpy(&f, &w, 4);
            v->f[k] = f;
            break;
        }
        case DT_F16: v->f[k] = half_to_double((uint16_t)u); break;
        case DT_PRED: v->i[k] = u != 0; break;
        case DT_S8: v->i[k] = (int8_t)u; break;
        case DT_S16: v->i[k] = (int16_t)u; break;
        case DT_S32: v->i[k] = (int32_t)u; break;
        default: v->i[k] = (int64_t)u; break;  /* s64, u8..u64 */
        }
    }
}

bool stf_parse(const uint8_t *buf, size_t n, stf_file *f, diag *d) {
    memset(f, 0, sizeof *f);
    size_t p = 0;
#define NEED(k, what)                                                                        \
    do {                                                                                     \
        if (n - p < (size_t)(k)) {                                                           \
            diag_binary(d, p, what, "truncated tensor file");                                \
            stf_free(f);                                                                     \
            return false;                                                                    \
        }                                                                                    \
    } while (0)
    NEED(8, "header");
    if (memcmp(buf, "STF1", 4) != 0) {
        diag_binary(d, 0, "header", "not a Scalify tensor file (no STF1 magic)");
        return false;
    }
    uint32_t count = (uint32_t)le(buf + 4, 4);
    p = 8;
    if (count > n / 16) {
        diag_binary(d, 4, "count", "%u tensors cannot fit in %zu bytes", count, n);
        return false;
    }
    f->names = xcalloc(count ? count : 1, sizeof *f->names);
    f->vals = xcalloc(count ? count : 1, sizeof *f->vals);
    for (uint32_t t = 0; t < count; t++) {
        NEED(4, "name_len");
        uint32_t nl = (uint32_t)le(buf + p, 4);
        p += 4;
        NEED(nl, "name");
        char *name = xstrndup((const char *)buf + p, nl);
        p += nl;
        f->names[f->n] = name;  /* owned by f from here on; stf_free releases it */
        f->vals[f->n++] = NULL;
        NEED(8, "dtype");
        uint32_t dt = (uint32_t)le(buf + p, 4), rank = (uint32_t)le(buf + p + 4, 4);
        p += 8;
        if (rank > INTERP_MAX_RANK || !elem_bytes((int)dt)) {
            diag_binary(d, p - 8, name, "unsupported dtype %u or rank %u", dt, rank);
            stf_free(f);
            return false;
        }
        NEED(8 * (size_t)rank + 8, "dims");
        int64_t dims[INTERP_MAX_RANK];
        for (uint32_t k = 0; k < rank; k++) dims[k] = (int64_t)le(buf + p + 8 * k, 8);
        p += 8 * (size_t)rank;
        uint64_t nb = le(buf + p, 8);
        p += 8;
        interp_val *v = interp_val_new((int)dt, rank, dims);
        if (!v || nb != (uint64_t)v->n * (uint64_t)elem_bytes((int)dt) || nb > n - p) {
            diag_binary(d, p - 8, name, "data size %llu does not match the shape or the file",
                        (unsigned long long)nb);
            interp_val_free(v);
            stf_free(f);
            return false;
        }
        decode(v, buf + p);
        p += nb;
        f->vals[f->n - 1] = v;
    }
#undef NEED
    return true;
}

bool stf_read(const char *path, stf_file *f, diag *d) {
    size_t n;
    bool gz;
    memset(f, 0, sizeof *f);
    char *buf = io_read_file(path, &n, &gz, d);
    if (!buf) return false;
    bool ok = stf_parse((const uint8_t *)buf, n, f, d);
    free(buf);
    return ok;
}

void stf_free(stf_file *f) {
    for (uint32_t k = 0; k < f->n; k++) {
        free(f->names[k]);
        interp_val_free(f->vals[k]);
    }
    free(f->names);
    free(f->vals);
    memset(f, 0, sizeof *f);
}

interp_val *stf_find(const stf_file *f, const char *name) {
    for (uint32_t k = 0; k < f->n; k++)
        if (strcmp(f->names[k], name) == 0) return f->vals[k];
    return NULL;
}

interp_val *stf_find_input(const stf_file *f, uint32_t k) {
    char pre[32];
    int pl = snprintf(pre, sizeof pre, "in.%u", k);
    for (uint32_t t = 0; t < f->n; t++)
        if (strncmp(f->names[t], pre, (size_t)pl) == 0 && (f->names[t][pl] == 0 || f->names[t][pl] == '.'))
            return f->vals[t];
    return NULL;
}

static void put_le(strbuf *b, uint64_t v, int n) {
    for (int k = 0; k < n; k++) sb_putc(b, (char)(v >> (8 * k)));
}

bool stf_write(strbuf *b, const char *const *names, interp_val *const *vals, uint32_t n) {
    for (uint32_t t = 0; t < n; t++)
        if (vals[t]->dtype == DT_TUPLE || !elem_bytes(vals[t]->dtype)) return false;
    sb_put(b, "STF1", 4);
    put_le(b, n, 4);
    for (uint32_t t = 0; t < n; t++) {
        const interp_val *v = vals[t];
        size_t nl = strlen(names[t]);
        put_le(b, nl, 4);
        sb_put(b, names[t], nl);
        put_le(b, (uint64_t)v->dtype, 4);
        put_le(b, v->rank, 4);
        for (uint32_t k = 0; k < v->rank; k++) put_le(b, (uint64_t)v->dims[k], 8);
        int eb = elem_bytes(v->dtype);
        put_le(b, (uint64_t)v->n * (uint64_t)eb, 8);
        for (int64_t k = 0; k < v->n; k++) {
            uint64_t u;
            if (v->dtype == DT_F32) {
                float fl = (float)v->f[k];
                uint32_t w;
                memcpy(&w, &fl, 4);
                u = w;
            } else if (v->dtype == DT_F64) memcpy(&u, &v->f[k], 8);
            else if (v->dtype == DT_BF16) {
                float fl = (float)dtype_round(DT_BF16, v->f[k]);
                uint32_t w;
                memcpy(&w, &fl, 4);
                u = w >> 16;
            } else if (v->dtype == DT_F16) u = double_to_half(v->f[k]);
            else u = (uint64_t)v->i[k];
            put_le(b, u, eb);
        }
    }
    return true;
}
