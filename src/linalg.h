/* linalg — the dense factorisations XLA's CPU backend calls LAPACK for, in
 * binary64, as LAPACK defines their results (interp.h: the custom calls
 * lapack_{s,d}{potrf,trsm,geqrf,orgqr,getrf,syevd,gesdd}_ffi and the HLO ops
 * cholesky / triangular-solve).
 *
 * Matrices are row-major: element (i, j) of an m×n matrix a is a[i*n + j],
 * which is the logical matrix whatever layout the HLO gives it. Each function
 * works on one matrix (the interpreter loops over batch dims), allocates
 * nothing it keeps and never fails: results for singular or indefinite input
 * are what LAPACK's unblocked algorithm leaves, with its `info`.
 *
 * Ties. Where a result depends on a discrete choice between values equal to
 * within 1e-9 of their magnitude — an LU pivot, the basis of the eigenspace of
 * a repeated eigenvalue, an eigenvector's sign — rounding may choose
 * differently in two programs that compute the same matrix. Such choices are
 * counted in *ties (may be NULL), so that a difference they explain is not
 * taken for a difference in what the programs compute.
 */
#ifndef SCALIFY_LINALG_H
#define SCALIFY_LINALG_H

#include <stdbool.h>
#include <stdint.h>

/* The routines, and the one a custom-call target names: XLA's CPU backend
 * calls LAPACK through typed-FFI custom calls named lapack_<s|d><routine>_ffi
 * (f32, f64); -1 for any other target (NULL too). */
enum { LINALG_POTRF, LINALG_TRSM, LINALG_GEQRF, LINALG_ORGQR, LINALG_GETRF, LINALG_SYEVD, LINALG_GESDD };
int linalg_routine(const char *target);

/* Cholesky factor of the n×n symmetric matrix whose `lower` (else upper)
 * triangle a holds: a = L·Lᵀ with L written over the lower triangle (upper:
 * a = Uᵀ·U, U over the upper one); the other triangle is not touched. Returns
 * 0, or the 1-based order of the first leading minor that is not positive
 * definite (its pivot left in place, the columns after it untouched). */
int64_t linalg_potrf(double *a, int64_t n, bool lower);

/* Solves op(A)·X = B (left) or X·op(A) = B (right) in place of the m×n
 * matrix b, A triangular (m×m left, n×n right) as its `lower` (else upper)
 * triangle says, op(A) = Aᵀ when trans, a unit diagonal assumed when unit. */
void linalg_trsm(const double *a, double *b, int64_t m, int64_t n, bool left, bool lower, bool trans, bool unit);

/* Householder QR of the m×n matrix a (dgeqr2): R over the upper triangle,
 * the reflectors' vectors below the diagonal (their leading 1 implied) and
 * their scales in tau[0 .. min(m,n)-1]; H(i) = I − tau_i·v_i·v_iᵀ and
 * a = H(0)·…·H(k−1)·R. */
void linalg_geqrf(double *a, int64_t m, int64_t n, double *tau);

/* The first n columns of Q = H(0)·…·H(k−1) from the k ≤ n ≤ m reflectors
 * geqrf leaves below the diagonal of the m×n matrix a, written over a. */
void linalg_orgqr(double *a, int64_t m, int64_t n, const double *tau, int64_t k);

/* LU with partial pivoting of the m×n matrix a (dgetf2): L (unit diagonal)
 * below, U on and above; ipiv[j] (1-based) the row swapped with row j at
 * step j; the pivot is the first entry of largest magnitude. Returns 0, or
 * the 1-based index of the first zero pivot. */
int64_t linalg_getrf(double *a, int64_t m, int64_t n, int64_t *ipiv, int64_t *ties);

/* Eigen decomposition of the n×n symmetric matrix whose `lower` (else upper)
 * triangle a holds: eigenvalues ascending in w, the orthonormal eigenvectors
 * as the columns of a (each with its entry of largest magnitude positive).
 * Cyclic Jacobi rotations to convergence. Returns 0, or 1 when the sweeps did
 * not converge (a non-finite entry). */
int64_t linalg_syevd(double *a, int64_t n, bool lower, double *w, int64_t *ties);

/* Singular value decomposition of the m×n matrix a, A = U·Σ·Vᵀ: the
 * k = min(m, n) singular values descending in s; U's first ucols columns
 * (k or m) in u (m×ucols), Vᵀ's first vtrows rows (k or n) in vt
 * (vtrows×n). Each pair of singular vectors signed so that the one of the
 * longer side (U's column when m ≥ n, else V's) has its entry of largest
 * magnitude positive; the vectors beyond k (and those of zero singular
 * values) complete an orthonormal basis. One-sided Jacobi
 * to convergence. Returns 0, or 1 when the sweeps did not converge (a
 * non-finite entry). Repeated or zero singular values are ties. */
int64_t linalg_gesdd(const double *a, int64_t m, int64_t n, double *s, double *u, int64_t ucols, double *vt,
                     int64_t vtrows, int64_t *ties);

#endif
