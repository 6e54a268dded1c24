/* eattr — attribute blobs of lifted HLO terms in the e-graph (rules/README.md).
 *
 * An e-node's attributes are one interned int64 word array (egraph.h eg_attr):
 * a sequence of triples (attr_key, n, v0 .. v{n-1}) using graph.h's attr_key
 * numbers, sorted by key, each key at most once, default values omitted — the
 * same "absent means default" rule as graph.h (0, false, empty list, empty
 * string). Encodings of values:
 *   - K_INT / K_BOOL: n = 1, the value (0 is the default: omitted);
 *   - K_INTS, K_SLICES (3 words per dim: start, limit, stride), K_PADDING: the list;
 *   - A_DIRECTION: EQ NE LT LE GT GE as 0..5 (EA_DIR_*); EQ is the default;
 *   - strings and identifiers (custom_call_target, ...): n = 1 + ceil(len / 8),
 *     v0 = byte length, then the bytes packed little-endian 8 per word;
 *   - A_LITERAL (a constant's payload): n = 2, (element count, digest) where the
 *     digest is the 64-bit hash (util.h hash_bytes) of the values in row-major
 *     order, each as the IEEE binary64 bits of the value rounded to the element
 *     type (floating types) or as int64 (integer and pred types); the digest 0 is
 *     replaced by 1. An elided constant ({...}: values unknown) is n = 3,
 *     (count, 0, unique): equal only to itself, the caller chooses unique.
 * A convert's target type is the node's type, not an attribute; a parameter is
 * an EG_OP_PARAM node whose blob is the bare word {k} (its number), not triples.
 *
 * An ea_builder collects triples in any order; ea_intern sorts them, drops
 * defaults and interns the blob. Builders own their words; ea_free releases them.
 */
#ifndef SCALIFY_EATTR_H
#define SCALIFY_EATTR_H

#include <stdbool.h>
#include <stdint.h>

#include "egraph.h"
#include "graph.h"

enum { EA_DIR_EQ = 0, EA_DIR_NE, EA_DIR_LT, EA_DIR_LE, EA_DIR_GT, EA_DIR_GE, EA_DIR_COUNT };

/* "EQ".."GE" → 0..5; -1 when not a direction. */
int ea_direction_from_name(const char *s, size_t n);
const char *ea_direction_name(int dir);  /* "?" when out of range */

typedef struct ea_builder {
    int64_t *w;
    size_t n, cap;
} ea_builder;

void ea_init(ea_builder *b);
void ea_free(ea_builder *b);
void ea_reset(ea_builder *b);
/* Adds key with n values (a list; for K_INT keys n = 1). A later put of the same
 * key replaces the earlier one. */
void ea_put(ea_builder *b, int key, const int64_t *v, uint32_t n);
void ea_put_int(ea_builder *b, int key, int64_t v);
void ea_put_str(ea_builder *b, int key, const char *s, size_t len);
/* A constant's payload (see above); unique is used only when it is elided. */
void ea_put_literal(ea_builder *b, const hlo_literal *lit, int64_t unique);
/* The canonical blob (sorted, defaults dropped) interned in g; 0 when empty. */
uint32_t ea_intern(ea_builder *b, egraph *g);
/* The canonical words into out (an ea_builder reused as a buffer). */
void ea_canon(const ea_builder *b, ea_builder *out);

/* Whether key's value v[0..n) is its default (omitted from blobs). */
bool ea_is_default(int key, const int64_t *v, uint32_t n);
/* Encoded words of a string: writes up to cap words, returns the count needed. */
uint32_t ea_str_words(const char *s, size_t len, int64_t *out, uint32_t cap);

/* Reading: the values of key in blob w[0..n) (NULL and *cnt = 0 when absent). */
const int64_t *ea_find(const int64_t *w, uint32_t n, int key, uint32_t *cnt);
/* Through the e-graph: the values of key in attribute id attr. */
const int64_t *ea_get(const egraph *g, uint32_t attr, int key, uint32_t *cnt);
/* An integer attribute, or dflt when absent. */
int64_t ea_get_int(const egraph *g, uint32_t attr, int key, int64_t dflt);
/* A string attribute decoded into out (NUL-terminated, truncated to cap - 1);
 * returns its full length, 0 when absent. */
size_t ea_get_str(const egraph *g, uint32_t attr, int key, char *out, size_t cap);
/* Checks a blob's form (triples, sorted, no defaults); 0 when valid, else
 * a count of problems described in why (may be NULL). */
int ea_check(const int64_t *w, uint32_t n, strbuf *why);

/* Appends a readable form: "dimensions={1,0} slice={[0:4:1]}" ("" when empty). */
void ea_print(strbuf *b, const egraph *g, uint32_t attr);

#endif
