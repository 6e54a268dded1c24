/* stf — the Scalify tensor file: named tensors in one little-endian file, the
 * format of the samples' seeded inputs and JAX outputs (samples/<config>/<name>.io.stf, see
 * samples/README.md) and of `scalify eval --inputs/--outputs`.
 *
 *   "STF1"  u32 count
 *   count × { u32 name_len, name bytes, u32 dtype (XLA PrimitiveType), u32 rank,
 *             i64 dims[rank], u64 nbytes, nbytes of row-major data }
 *
 * Element types: pred (1 byte), s8/s16/s32/s64, u8/u16/u32/u64, f16, bf16, f32,
 * f64. Files may be gzipped. Inputs are named "in.<param>.<name>", outputs
 * "out.<index>" (samples/gen/export.py writes them).
 *
 * An stf_file owns its names and holds one reference to each value; stf_free
 * releases both.
 */
#ifndef SCALIFY_STF_H
#define SCALIFY_STF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "diag.h"
#include "interp.h"
#include "util.h"

typedef struct stf_file {
    char **names;
    interp_val **vals;
    uint32_t n;
} stf_file;

/* Reads path (gzip too); false (and a diag) when unreadable or malformed. */
bool stf_read(const char *path, stf_file *f, diag *d);
bool stf_parse(const uint8_t *buf, size_t n, stf_file *f, diag *d);
void stf_free(stf_file *f);
/* The tensor named exactly name, or NULL. */
interp_val *stf_find(const stf_file *f, const char *name);
/* The input tensor of parameter k: named "in.<k>" or "in.<k>.<anything>". */
interp_val *stf_find_input(const stf_file *f, uint32_t k);
/* Appends the file holding n named arrays (tuples are refused: false). */
bool stf_write(strbuf *b, const char *const *names, interp_val *const *vals, uint32_t n);

#endif
