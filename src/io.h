/* io — reading input files (gzip transparently) and writing outputs atomically.
 *
 * io_read_file returns a malloc'd buffer (caller frees) with a NUL byte after the
 * last byte, so text readers may rely on a terminator. Gzip input (magic 1f 8b) is
 * inflated, concatenated members included. Failures go to the diag.
 *
 * io_write_atomic writes to "<path>.tmp.<pid>" and renames it over path, so a
 * reader never sees a partial output file.
 */
#ifndef SCALIFY_IO_H
#define SCALIFY_IO_H

#include <stdbool.h>
#include <stddef.h>

#include "diag.h"

/* Inputs larger than this are refused, read as is or inflated. */
#define IO_MAX_INPUT ((size_t)4 << 30)
/* Memory budget of inflating n gzip bytes (io_inflate_limit): at most
 * IO_MAX_INFLATE_RATIO times n — HLO text and protobuf deflate about 14:1,
 * gzip bombs near deflate's ceiling of about 1032:1 — but always
 * IO_INFLATE_FREE, and never more than IO_MAX_INPUT. Beyond it the input is
 * refused before more memory is taken. */
#define IO_MAX_INFLATE_RATIO ((size_t)100)
#define IO_INFLATE_FREE ((size_t)64 << 20)
size_t io_inflate_limit(size_t n);

char *io_read_file(const char *path, size_t *len, bool *was_gzip, diag *d);
/* io_read_file that also gives the SHA-256 of the file's bytes as stored (before
 * decompression: what sha256sum prints). */
char *io_read_file_sha256(const char *path, size_t *len, bool *was_gzip, uint8_t digest[32], diag *d);
/* Inflates a gzip buffer; NULL (and a diag) when it is corrupt. Caller frees. */
char *io_gunzip(const char *data, size_t n, size_t *len, diag *d);
bool io_write_atomic(const char *path, const void *data, size_t n, diag *d);

#endif
