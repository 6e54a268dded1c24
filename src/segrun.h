/* segrun — runs of a computation, the units of segment memoisation (DESIGN §6).
 *
 * A run is a maximal range [i0, i1) of a computation's instructions that share
 * one top-level op_name scope ("layers.3" in "jit(f)/layers.3/attn/dot");
 * instructions without a scope belong to the run before them. The values a run
 * reads from outside it — instructions before it, and parameters, wherever
 * they are listed (protobuf modules list them where first used) — are its
 * slots, numbered by first use. A position of a run is exported when an instruction after the run
 * reads it or it is the computation's root.
 *
 * Two runs of one module are structurally equal (sr_equal) when they have the
 * same length and, position by position, the same opcode, shape, attributes
 * (called computations when they are the same reducer on the same type or
 * equal instruction by instruction, constants by value; an elided constant
 * equals nothing; a channel id only by whether there is one) and operands, each operand being either the same position
 * inside the run or the same slot (parameters inside the range compare by
 * shape only: they are slots). Equal runs compute the same function of
 * their slots; names and metadata play no part. sr_fingerprint hashes exactly
 * what sr_equal compares (minus attribute payloads), so equal runs have equal
 * fingerprints.
 *
 * Everything is allocated in the arena passed in and lives as long as it.
 */
#ifndef SCALIFY_SEGRUN_H
#define SCALIFY_SEGRUN_H

#include "graph.h"

#define SR_NONE UINT32_MAX

typedef struct sr_run {
    uint32_t i0, i1;              /* instruction range */
    const char *scope;            /* top-level scope, not NUL-terminated */
    uint32_t nscope;
    uint32_t *slots;              /* instruction index of each slot */
    uint32_t nslots;
    uint8_t *exported;            /* per position (i - i0): 1 when read after the run */
    uint64_t fp;                  /* structural fingerprint */
} sr_run;

typedef struct sr_runs {
    sr_run *runs;
    uint32_t n;
    uint32_t *start;              /* per instruction: run starting there, else SR_NONE */
} sr_runs;

/* The first op_name component after any jit(...)/ prefix (hlo_instr.scope, set
 * when the module was finalised); false when none. */
bool sr_scope_top(const hlo_instr *in, const char **s, size_t *n);

/* The number of runs of comp (cheap: no allocation). */
uint32_t sr_count(const hlo_comp *comp);

/* Splits comp into runs with their slots, exported positions and fingerprints. */
void sr_split(const hlo_module *m, const hlo_comp *comp, arena *a, sr_runs *out);

/* Structural equality of two runs of computations of one module (see above). */
bool sr_equal(const hlo_module *m, const hlo_comp *ca, const sr_run *a, const hlo_comp *cb, const sr_run *b);

#endif
