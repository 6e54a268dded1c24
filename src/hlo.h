/* hlo — reading and writing HLO modules.
 *
 * hlo_read_file() takes any HLO file a user has: text or protobuf (a bare
 * HloModuleProto, an HloProto or an HloSnapshot, told apart by content), each
 * optionally gzipped. The readers return a finalized module (graph.h) that the
 * caller frees with graph_free(), or NULL after reporting every problem to the
 * diag: text errors carry file:line:col, protobuf errors a byte offset and field.
 *
 * hlo_print() writes canonical text that hlo_parse_text() reads back to an
 * identical module (graph_equal with no flags).
 */
#ifndef SCALIFY_HLO_H
#define SCALIFY_HLO_H

#include <stddef.h>
#include <stdint.h>

#include "diag.h"
#include "graph.h"
#include "trace_enums.h"

/* Nesting deeper than this (tuple shapes, shardings) is refused as bad input. */
#define HLO_MAX_NESTING 200

hlo_module *hlo_read_file(const char *path, diag *d);
/* The form of a module file's bytes (after gunzip): HLO text or protobuf.
 * The only place input formats are told apart; a new one is a new entry of
 * TRACE_FORMATS (trace_enums.h) and a case in hlo_read_buffer. */
trace_format hlo_detect_format(const char *buf, size_t n);
/* Parses buf (NUL-terminated at buf[n]) in the form hlo_detect_format finds,
 * which *fmt gets when not NULL. path names the input in messages. */
hlo_module *hlo_read_buffer(const char *buf, size_t n, const char *path, trace_format *fmt, diag *d);

/* src must be NUL-terminated at src[n]. path names the input in messages. */
hlo_module *hlo_parse_text(const char *src, size_t n, const char *path, diag *d);
hlo_module *hlo_parse_pb(const uint8_t *buf, size_t n, const char *path, diag *d);
/* The sharding whose text (between "sharding={" and its "}") is s[0..n), read
 * as the text reader reads it, allocated in m's arena: forms it does not model
 * are SH_RAW (whole, or per tuple element). Never fails. */
hlo_sharding *hlo_sharding_from_text(hlo_module *m, const char *s, size_t n);
/* hlo_parse_pb without its one-pass unpacker: always the wire walker, then
 * protobuf-c. The same module or the same diagnostics, only slower; the
 * tests hold the fast path to it. */
hlo_module *hlo_parse_pb_careful(const uint8_t *buf, size_t n, const char *path, diag *d);

/* The module as a bare HloModuleProto (XLA's field numbers), appended to out.
 * hlo_parse_pb reads it back to a module graph_equal to m (GEQ_IGNORE_HEADER:
 * the text header has no protobuf home). IR values that only exist as text
 * travel in scalify's own field 50000 (proto/hlo.proto). */
void hlo_write_pb(const hlo_module *m, strbuf *out);

/* Bit patterns of the narrow float types (f16, bf16, the f8 kinds, f4e2m1fn)
 * as LiteralProto stores them: the exact value of a pattern, and the pattern
 * nearest to a value (ties to even). */
double hlo_float_decode(int dt, uint32_t bits);
uint32_t hlo_float_encode(int dt, double v);

/* Canonical HLO text of the whole module, appended to b. */
void hlo_print(strbuf *b, const hlo_module *m);
/* One instruction's line (without ROOT and indentation), appended to b. */
void hlo_print_instr(strbuf *b, const hlo_module *m, const hlo_comp *c, const hlo_instr *in);
/* The text of one attribute value of instruction in (of computation c). */
void hlo_print_attr_value(strbuf *b, const hlo_module *m, const hlo_comp *c, const hlo_instr *in,
                          const hlo_attr *a);

#endif
