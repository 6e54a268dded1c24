/* lift_int — what the lifting modules share (lift.c, lift_zmask.c); not for
 * other modules, which use lift.h.
 *
 * lstate: the instruction being lifted, its operands' values (ops, which a
 * transfer function may re-view) and the values of its computation so far
 * (vals, as lifted). The helpers work on the lift context's e-graph and arena:
 *   lf_type_of        the e-graph type of (dtype, dims)
 *   lf_kval           the known values of a constant-only class, or NULL
 *   lf_mk_reshape     reshape(x) to type t, reshape chains collapsed and
 *                     constants folded
 *   lf_reshape_run    the next run of dims with equal products of a reshape
 *   lf_is_elementwise whether op works element by element
 *   lf_finding        records a finding (kind, site, words); none on the
 *                     baseline
 *   lf_assume         records an assumption the verdict rests on (once)
 *   lf_zmask_after    the zero mask of a value just lifted (lift_zmask.c)
 */
#ifndef SCALIFY_LIFT_INT_H
#define SCALIFY_LIFT_INT_H

#include "lift.h"

typedef struct lstate {
    lift_ctx *c;
    const hlo_comp *comp;
    const hlo_instr *in;
    lval *ops;
    const lval *vals;             /* values of the computation so far */
} lstate;

uint32_t lf_type_of(lift_ctx *c, int dt, const int64_t *dims, uint32_t rank);
struct interp_val *lf_kval(lift_ctx *c, eid cls);
eid lf_mk_reshape(lift_ctx *c, eid x, uint32_t t, uint8_t origin);
bool lf_reshape_run(const int64_t *a, uint32_t ra, const int64_t *b, uint32_t rb, uint32_t i, uint32_t j, uint32_t *i2,
                    uint32_t *j2);
bool lf_is_elementwise(int op);
void lf_finding(lift_ctx *c, const char *kind, const hlo_comp *comp, const hlo_instr *in, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
void lf_assume(lift_ctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void lf_zmask_after(lstate *s, lval *v);

#endif
