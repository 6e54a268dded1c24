/* io — reading input files (gzip transparently) and writing outputs atomically.
 *
 * io_read_file returns a malloc'd buffer (caller frees) with a NUL byte after the
 * last byte, so text readers may rely on a terminator. Gzip input (magic 1f 8b) is
 * inflated, concatenated members included. Failures go to the diag.
 *
 * io_write_atomic never leaves a partial or stale output behind a success:
 *   - path absent or a regular file: the bytes go to a temporary file created
 *     with O_EXCL under an unpredictable name (mkstemp) in path's folder, which
 *     is renamed over path only once every byte is written and closed; a
 *     replaced file keeps its permission bits, a new one gets 0666 & ~umask.
 *   - a symlink: followed; its target (a regular file, or a missing name that
 *     the chain ends at) is what gets written or created; the link stays.
 *   - /dev/stdout, /dev/stderr, /dev/fd/N, /proc/self/fd/N naming an open
 *     descriptor: written to that descriptor as it is (a file opened for
 *     appending keeps its contents); stdio is flushed first.
 *   - a character device or FIFO (/dev/stdout, /dev/null, a terminal, a named
 *     pipe): written through directly, as a shell redirection would; it is
 *     never replaced by a file.
 *   - anything else (a directory, a block device, a socket): refused.
 * Any failed write, close or rename is an error (false plus a diag naming
 * path and the cause); the temporary file is then removed.
 */
#ifndef SCALIFY_IO_H
#define SCALIFY_IO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

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
/* io_read_file_sha256 for a reader done with the text before anything else
 * runs (the HLO readers): a large uncompressed regular file is mapped read-only
 * instead of copied, so its pages are the page cache's (nothing to zero or
 * copy; the NUL after the last byte is the rest of its last page, so a size
 * that fills whole pages is read as before). *mapped is the mapped length (0:
 * a malloc'd copy, gzip inflated as usual). Give it back with io_unmap. */
const char *io_map_file_sha256(const char *path, size_t *len, bool *was_gzip, uint8_t digest[32], size_t *mapped,
                               diag *d);
void io_unmap(const char *buf, size_t mapped);
/* Inflates a gzip buffer; NULL (and a diag) when it is corrupt. Caller frees. */
char *io_gunzip(const char *data, size_t n, size_t *len, diag *d);
bool io_write_atomic(const char *path, const void *data, size_t n, diag *d);

#endif
