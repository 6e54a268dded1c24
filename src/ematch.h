/* ematch — patterns, e-matching, side-condition expressions, term building and
 * relation tables over e-class ids (rules/README.md; DESIGN §5).
 *
 * A pattern program (em_prog) is an index-addressed store of pattern nodes
 * (em_pat) that rules.c compiles rule text into; a rule refers to its patterns
 * by index and numbers its own variables 0..nvars-1. Pattern kinds:
 *   EM_VAR      ?x — a class variable in a term position, a value variable (a
 *               list of int64, scalars are lists of one) in an attribute or
 *               expression position, an op variable after a %class head;
 *   EM_NODE     (op child... :key value...) — attributes sorted by key; a key a
 *               pattern does not mention must hold its default in the node
 *               (absent), so a rewrite never drops an attribute silently;
 *   EM_OPCLASS  (%class ?f child...) — any op of a declared op class; ?f binds
 *               the node's (op, attributes, dtype) so a right-hand side rebuilds it;
 *   EM_AS       (as ?x pattern) — names the class a sub-pattern matched;
 *   EM_INT, EM_WORDS (literal list / encoded string), EM_LIST (elements that are
 *               ints, variables or, in expressions, sub-expressions; flattened),
 *   EM_TYPE     a literal type f32[4,8] (words: dtype, rank, dims...);
 *   EM_CALL     (primitive args...) — a side-condition expression (em_prim_*);
 *   EM_PARAM    (param k TYPE) — a parameter leaf of a concrete example term;
 *   EM_REL, EM_MATCHES, EM_WHEN, EM_UNION — relation-rule atoms (rules.c).
 *
 * Matching binds variables in an em_subst (undone on backtracking) and calls
 * back once per complete match; node order is creation order, so matches come
 * in a deterministic order. Matching assumes a rebuilt e-graph (canonical
 * children) and must not add nodes while it runs (callers queue the matches).
 *
 * Relation tables (em_rel) hold rows of int64 columns; class columns hold e-class
 * ids and are canonicalised by em_rel_canon after each rebuild (rows that
 * change get a new stamp: the semi-naive "delta"). Everything here is owned by
 * the struct that holds it and freed by its *_free.
 */
#ifndef SCALIFY_EMATCH_H
#define SCALIFY_EMATCH_H

#include <stdbool.h>
#include <stdint.h>

#include "egraph.h"
#include "graph.h"
#include "util.h"

typedef enum em_kind {
    EM_VAR, EM_NODE, EM_OPCLASS, EM_AS, EM_INT, EM_WORDS, EM_LIST, EM_TYPE, EM_CALL, EM_PARAM,
    EM_REL, EM_MATCHES, EM_WHEN, EM_UNION,
} em_kind;

enum { VK_NONE = 0, VK_CLASS, VK_VALUE, VK_OP };

#define EM_MAX_OP 1024 /* ops indexed: graph.h hlo_op and EG_OP_* */

typedef struct em_pat {
    uint8_t kind;          /* em_kind */
    uint16_t op;           /* NODE: opcode; CALL: primitive; OPCLASS: class; REL: relation */
    uint32_t var;          /* VAR, AS, OPCLASS (the op variable), MATCHES, UNION */
    uint32_t kids, nkids;  /* children / arguments: prog->kids[kids .. kids+nkids) */
    uint32_t attrs, nattrs; /* NODE: prog->attrs[attrs .. +nattrs), sorted by key */
    uint32_t type;         /* NODE: index + 1 of a :type expression; 0 none */
    int64_t ival;          /* INT value; PARAM number */
    uint32_t words, nwords; /* WORDS, TYPE, PARAM (its type): prog->words */
    uint32_t off;          /* source byte offset (diagnostics) */
} em_pat;

typedef struct em_attr {
    uint16_t key;  /* attr_key */
    uint32_t val;  /* value pattern / expression index */
} em_attr;

typedef struct em_opclass {
    char *name;
    uint8_t ops[EM_MAX_OP];  /* 1: member */
    char **targets;          /* custom-call targets that are members */
    uint32_t ntargets;
} em_opclass;

typedef struct em_prog {
    em_pat *pats;
    size_t npats, cappats;
    uint32_t *kids;
    size_t nkids, capkids;
    em_attr *attrs;
    size_t nattrs, capattrs;
    int64_t *words;
    size_t nwords, capwords;
    em_opclass *classes;
    uint32_t nclasses, capclasses;
} em_prog;

void em_prog_init(em_prog *p);
void em_prog_free(em_prog *p);
uint32_t em_pat_new(em_prog *p, uint8_t kind, uint32_t off);  /* zeroed; returns its index */
uint32_t em_words_add(em_prog *p, const int64_t *w, uint32_t n); /* returns the start */
/* The op class named s, or -1; em_opclass_add creates it when missing. */
int em_opclass_find(const em_prog *p, const char *s, size_t n);
int em_opclass_add(em_prog *p, const char *s, size_t n);
bool em_opclass_has(const em_prog *p, int cls, const egraph *g, uint16_t op, uint32_t attr);

/* ---- substitutions ---- */
typedef struct em_subst {
    uint32_t nvars;
    eid *cls;                 /* class variables (EID_NONE: unbound) */
    uint32_t *voff, *vlen;    /* value variables: words[voff..+vlen); vlen UINT32_MAX: unbound */
    uint16_t *op;             /* op variables (0: unbound) */
    uint32_t *oattr;
    uint8_t *odt;
    int64_t *words;
    size_t nwords, capwords;
    eid root;                 /* class of the matched root (set by em_match_node) */
} em_subst;

void em_subst_init(em_subst *s, uint32_t nvars);
void em_subst_free(em_subst *s);
void em_subst_clear(em_subst *s);  /* unbinds everything */
/* Binds value variable v to w[0..n) (copied). */
void em_subst_bind_value(em_subst *s, uint32_t v, const int64_t *w, uint32_t n);

/* ---- matching ---- */
/* Called once per match; return false to stop the search. */
typedef bool (*em_match_cb)(void *ctx, em_subst *s);

/* Matches pattern pat against e-class c (variables already bound in s are
 * constraints). Returns false when a callback stopped the search. */
bool em_match_class(egraph *g, const em_prog *p, uint32_t pat, eid c, em_subst *s, em_match_cb cb, void *ctx);
/* Matches pat rooted at one node (pat is EM_NODE, EM_OPCLASS or EM_AS of
 * those); s->root is set to the node's class. */
bool em_match_node(egraph *g, const em_prog *p, uint32_t pat, eid node, em_subst *s, em_match_cb cb, void *ctx);
/* The op the root of pat requires (EM_AS looked through), or -1 for an op
 * class / variable (any op). */
int em_pat_root_op(const em_prog *p, uint32_t pat);

/* Live nodes by opcode, creation order: built once per saturation iteration. */
typedef struct em_index {
    uint32_t start[EM_MAX_OP + 1];
    eid *nodes;
    size_t cap;
} em_index;
void em_index_build(em_index *ix, const egraph *g);
void em_index_free(em_index *ix);

/* ---- expressions ---- */
typedef struct em_vec {
    int64_t *w;
    size_t n, cap;
} em_vec;

/* Primitive ids and their names/arity (rules/README.md lists them). */
int em_prim_from_name(const char *s, size_t n);  /* -1 when unknown */
const char *em_prim_name(int prim);
void em_prim_arity(int prim, int *min, int *max);  /* max -1: any */
/* Whether the primitive's value arguments are class variables (rank, dims...). */
bool em_prim_takes_class(int prim);
/* Named constants usable in expressions and attribute values: dtype names
 * (f32 → 11), directions (LT → 2), true/false. Returns false when unknown. */
bool em_symbol_value(const char *s, size_t n, int64_t *v);

/* Evaluates expression e under s; appends the value to out and sets *off, *len.
 * Returns false on a domain error (index out of range, not a permutation, ...),
 * which makes a side condition false. */
bool em_eval(egraph *g, const em_prog *p, uint32_t e, const em_subst *s, em_vec *out, size_t *off, uint32_t *len);
/* A condition: the value is a non-empty list whose first word is non-zero. */
bool em_eval_true(egraph *g, const em_prog *p, uint32_t e, const em_subst *s, em_vec *scratch);

/* ---- shapes and building ---- */
/* The type of op(children) with attributes attr: checks `declared` (non-zero)
 * against what the op implies, or infers it. Returns the type, or 0 with a
 * reason appended to why (ill-typed, or not inferable without a declared type). */
uint32_t em_infer_type(egraph *g, uint16_t op, uint32_t attr, const uint32_t *ctypes, uint32_t n,
                       uint32_t declared, strbuf *why);
/* Builds the term pat under s into g (EM_VAR: the bound class). The root gets
 * type root_type when non-zero; inner nodes a :type or an inferred type, but
 * an inner dot without :type takes root_type's element type (its operands do
 * not imply it: bf16 operands, f32 result).
 * Returns the class, or EID_NONE with the reason in why. */
eid em_build(egraph *g, const em_prog *p, uint32_t pat, const em_subst *s, uint32_t root_type, uint8_t origin,
             strbuf *why);

/* ---- relation tables ---- */
#define EM_REL_MAX_ARITY 8

typedef struct em_rel {
    char *name;
    uint32_t arity;
    uint8_t is_class[EM_REL_MAX_ARITY];
    int64_t *rows;   /* n rows of arity columns */
    uint32_t *stamp; /* per row: epoch of insertion or last change */
    size_t n, cap;
    uint32_t *slots; /* hash set over row indexes */
    size_t nslots;
} em_rel;

void em_rel_init(em_rel *r, const char *name, uint32_t arity, const uint8_t *is_class);
void em_rel_free(em_rel *r);
/* Inserts a row (class columns should be canonical); true when it was new. */
bool em_rel_insert(em_rel *r, const int64_t *row, uint32_t stamp);
bool em_rel_contains(const em_rel *r, const int64_t *row);
/* Rewrites class columns to canonical ids, merging duplicates; changed rows get
 * stamp. Returns the number of rows that changed. */
size_t em_rel_canon(em_rel *r, egraph *g, uint32_t stamp);

#endif
