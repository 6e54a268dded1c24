/* provenance — what the lifting said of the distributed values around a
 * finding, kept for the trace after the lifting is gone.
 *
 * Two things: each distributed value's view in words ("partial(tp,sum)",
 * "shard(1,tp)", "dup"), which the nodes of a finding's picture show, and a
 * finding's path: the chain of instructions from where a partial value the
 * finding's instruction uses became partial (the row-parallel dot that
 * contracted a sharded dimension) down to the finding, numbered as scan-build
 * numbers the steps of its paths.
 *
 * Views are those of the last walk of each computation (a loop body's last
 * walk); an instruction lifting never reached has none. Collecting them costs
 * two bytes per distributed instruction of the computations walked, and is
 * done only for pairs with findings.
 */
#ifndef SCALIFY_PROVENANCE_H
#define SCALIFY_PROVENANCE_H

#include <stddef.h>

#include "lift.h"

typedef struct pv_views pv_views;

/* The words of every value lifting recorded (lift_value_at), on mesh m. */
pv_views *pv_collect(const lift_ctx *c, const mesh *m);
/* The view of distributed instruction in (of comp) in words, or NULL. */
const char *pv_view(const pv_views *v, const hlo_module *dist, const hlo_comp *comp, const hlo_instr *in);
/* Drops the view of in: one lifting chose to go on with rather than computed
 * (a missing all-reduce's result is taken as complete). */
void pv_forget(pv_views *v, const hlo_module *dist, const hlo_comp *comp, const hlo_instr *in);
void pv_free(pv_views *v);

/* A finding's path shows at most this many steps: the origin first, the
 * finding's instruction last; a longer chain keeps the origin and the steps
 * nearest the finding. */
#define PV_PATH_MAX 12

/* The path to instruction i of comp: its first operand that is partial, that
 * operand's partial operand over the same axes, and so on up to the first
 * instruction none of whose operands is (where the value became partial).
 * Writes the instruction indices origin first, i last, into path and
 * returns how many; *len gets the chain's whole length. 0 when no operand
 * of i is partial: no path. */
size_t pv_path(const lift_ctx *c, const hlo_comp *comp, uint32_t i, uint32_t path[PV_PATH_MAX], size_t *len);

#endif
