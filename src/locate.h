/* locate — where a distributed program that execution shows apart from its
 * baseline starts computing what the baseline never does (DESIGN §7).
 *
 * On the inputs of a witness run whose outputs differ, both programs run once
 * more keeping every value (interp_config.observe), and each value of the
 * distributed program is asked whether it is one of the baseline's under some
 * view: every device's array is a baseline value's block, the blocks along
 * each cut dim following mesh axes in device order (shard, dup when no dim is
 * cut); or the sum (maximum, minimum) of the devices' arrays over some mesh
 * axes is (a partial sum, maximum, minimum). Values of computations that run more than once (loop bodies,
 * reducers) or on some devices only (a branch) are not asked. From each output
 * that differs under its expected view, values that are no baseline value
 * lead back to the site: the first of them, in evaluation order, that depends
 * on the inputs — past it the program holds something the baseline never
 * does. At the site: whether its values are a constant multiple of a baseline
 * value (a wrong factor), and whether an operand is a baseline value only as a
 * partial sum (a sum never taken).
 *
 * Evidence from one run, not a proof: it places a finding execution
 * confirmed, it decides nothing. Programs whose values would hold more than
 * LOCATE_MAX_ELEMENTS elements in all, and searches past a comparison budget,
 * locate nothing.
 */
#ifndef SCALIFY_LOCATE_H
#define SCALIFY_LOCATE_H

#include <stdint.h>

#include "graph.h"
#include "interp.h"
#include "view.h"

#define LOCATE_MAX_ELEMENTS ((int64_t)1 << 23)

typedef struct locate_site {
    const hlo_comp *comp;          /* the distributed computation holding in and at */
    const hlo_instr *in;           /* the site; NULL when none was found */
    const hlo_instr *at;           /* what a finding names: partial where it computes the share (no copy,
                                    * tuple element or call forwarding one), else in */
    const hlo_instr *like;         /* baseline: in's values are scale times this value's (a view of it) */
    double scale;                  /* 0 when no multiple was found */
    const hlo_instr *partial;      /* in itself, or an operand of it, that is a baseline value only as a
                                    * partial sum (where a sum over the mesh was never taken) */
    uint32_t partial_axes;         /* its mesh axes (bitmask) */
    uint8_t partial_red;           /* and its reduction (RED_SUM, RED_MAX, RED_MIN) */
} locate_site;

/* Runs base on one device with bargs and dist on every device of rel's mesh
 * with dargs[d] (the witness run's inputs, borrowed; cb and cd its
 * configurations, whose observe is replaced) and fills *out. */
void locate_run(const hlo_module *base, const hlo_module *dist, const relations *rel, const interp_config *cb,
                const interp_config *cd, interp_val **bargs, interp_val **const *dargs, locate_site *out);

#endif
