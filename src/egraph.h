/* egraph — hash-consed e-graph with union-find and deferred rebuilding (DESIGN §5).
 *
 * An e-node is (op, attr, type, children): op an opcode (graph.h hlo_op, or
 * EG_OP_* extensions), attr an interned attribute blob (0: none), type an
 * interned (dtype, dims) pair — the shape analysis — and children e-class ids.
 * Every node belongs to one e-class; classes are merged with eg_union and
 * found with eg_find. Invariants after eg_rebuild() (checked by eg_check):
 *   - hash-consing: no two live nodes have the same (op, attr, type, canonical
 *     children);
 *   - congruence: nodes equal up to canonical children are in one class;
 *   - every class has exactly one type (the shape analysis): a union of two
 *     classes of different types is refused (it would be a rule bug) and reported.
 * Between eg_union and eg_rebuild the hash-cons is stale; eg_add and
 * eg_lookup may then miss congruences (call eg_rebuild before relying on them).
 *
 * Ids: node and class ids are uint32 indexes; a class id is the id of the node
 * that created it, so both index the same arrays. Iteration (eg_class_nodes,
 * nodes by id) is in creation order: deterministic.
 * Origins: a bitmask per class (EG_BASELINE, EG_DISTRIBUTED, EG_LIFTED), merged
 * on union. The graph owns all its memory; eg_free releases it.
 */
#ifndef SCALIFY_EGRAPH_H
#define SCALIFY_EGRAPH_H

#include <stdbool.h>
#include <stdint.h>

#include "util.h"

typedef uint32_t eid;
#define EID_NONE UINT32_MAX

enum { EG_BASELINE = 1, EG_DISTRIBUTED = 2, EG_LIFTED = 4 };

/* Opcodes beyond HLO's, for terms that have no instruction of their own. */
/* EG_OP_APP: output attr[1] of the baseline layer structure attr[0] applied to
 * its inputs (the children) — a name for a value a memoised layer computes. */
enum { EG_OP_PARAM = 1000, EG_OP_VAR = 1001, EG_OP_APP = 1002 };

typedef struct egraph egraph;

typedef struct eg_stats {
    uint64_t nodes, live_nodes, classes, unions, rebuilds, repairs;
    size_t bytes;
} eg_stats;

egraph *eg_new(void);
void eg_free(egraph *g);

/* Interns an attribute blob of n int64 words; 0 is "no attributes". The
 * words eg_attr_words and eg_type_dims give never move: valid as long as g. */
uint32_t eg_attr(egraph *g, const int64_t *words, uint32_t n);
const int64_t *eg_attr_words(const egraph *g, uint32_t attr, uint32_t *n);
/* Interns a type: element type and dims (rank may be 0). Type 0 is "untyped". */
uint32_t eg_type(egraph *g, int dt, const int64_t *dims, uint32_t rank);
int eg_type_dtype(const egraph *g, uint32_t type);
const int64_t *eg_type_dims(const egraph *g, uint32_t type, uint32_t *rank);

/* Adds (or finds) a node; returns its canonical class. origin tags the class. */
eid eg_add(egraph *g, uint16_t op, uint32_t attr, uint32_t type, const eid *children, uint32_t n,
           uint8_t origin);
/* The class of an existing node, or EID_NONE; never inserts. */
eid eg_lookup(egraph *g, uint16_t op, uint32_t attr, uint32_t type, const eid *children, uint32_t n);
eid eg_find(egraph *g, eid c);
/* Merges two classes: 1 merged, 0 already one class, -1 refused because the
 * types differ (why, when not NULL, gets both terms). */
int eg_union(egraph *g, eid a, eid b, strbuf *why);
/* Restores hash-consing and congruence after unions; returns repairs made. */
uint64_t eg_rebuild(egraph *g);

uint32_t eg_class_type(egraph *g, eid c);
uint8_t eg_class_origin(egraph *g, eid c);
/* Live nodes of a class: first, then next until EID_NONE. */
eid eg_class_first(egraph *g, eid c);
eid eg_class_next(const egraph *g, eid node);
uint32_t eg_node_count(const egraph *g);  /* ids 0..count-1, dead ones included */
bool eg_node_live(const egraph *g, eid node);
uint16_t eg_node_op(const egraph *g, eid node);
uint32_t eg_node_attr(const egraph *g, eid node);
/* Valid until the next eg_add (which may move every node's children: copy
 * what is needed across any call that can add a node); eg_add itself may be
 * given them. */
const eid *eg_node_children(const egraph *g, eid node, uint32_t *n);

/* A short term for messages: the class's first node, children to depth levels
 * (op names from graph.h). Appends to b. */
void eg_print_term(strbuf *b, egraph *g, eid c, int depth);
eg_stats eg_get_stats(const egraph *g);
/* Verifies every invariant above; returns the number of violations (described in
 * why when not NULL). Only meaningful right after eg_rebuild. */
int eg_check(egraph *g, strbuf *why);

#endif
