/* bindex — the index of a batch check (`check --manifest`), and merging the
 * indexes of a sharded batch (`check --manifest --shard K/N`).
 *
 * A batch writes DIR/index.json: {"pairs": [{"name", "verdict", "expected",
 * "trace"?}, ...]} in manifest order, "trace" naming the pair's trace file
 * relative to DIR (absent when none was written: the pair is "error"). Shard
 * K of N checks the manifest's pairs i with i mod N = K and writes
 * DIR/index.K-of-N.json instead: the same, plus {"shard": {"index": K,
 * "count": N, "manifest_pairs": M}} and each pair's manifest "position".
 *
 * bindex_load() reads index files (a plain index or shard indexes, in any
 * order) into one list in manifest order. Shard indexes must come all from
 * one split (same count and manifest size), every shard exactly once: a
 * missing or repeated shard, a pair named twice, or a shard index mixed with a
 * plain one is an error, so a merged report never silently lacks a node's
 * pairs. bindex_write() writes the merged list as a plain index.json, byte
 * for byte what one unsharded batch writing its traces into the folder of
 * that file would have written. Entries own their strings; bindex_free()
 * releases everything.
 */
#ifndef SCALIFY_BINDEX_H
#define SCALIFY_BINDEX_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "diag.h"

typedef struct bindex_entry {
    json_t *entry;    /* the index's object, as read ("position" removed) */
    char *trace;      /* the trace file's path as the caller can open it; NULL: none */
    size_t position;  /* in the manifest */
} bindex_entry;

typedef struct bindex {
    bindex_entry *e;
    size_t n;
} bindex;

/* True when the file parses as JSON with a "pairs" array and is not a trace. */
bool bindex_is_index(const char *path);
/* Reads and merges the index files; false (and messages in d) on any error
 * above. */
bool bindex_load(bindex *ix, const char *const *files, size_t nfiles, diag *d);
/* Writes the merged index to path (atomically, io.h), each "trace" relative to
 * path's folder when the trace lies below it, else absolute. */
bool bindex_write(const bindex *ix, const char *path, diag *d);
void bindex_free(bindex *ix);

/* Writes j as the batch writes its JSON files (indented by one, keys in
 * order, ASCII, a final newline), atomically. */
bool bindex_write_json(const char *path, json_t *j, diag *d);

#endif
