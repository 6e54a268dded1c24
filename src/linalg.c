/* linalg — dense factorisations in binary64 (linalg.h). */
#include "linalg.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

/* Relative distance under which two magnitudes are a tie (linalg.h). */
#define TIE 1e-9

static bool near_tie(double a, double b) {
    double s = fmax(fabs(a), fabs(b));
    return s > 0 && fabs(a - b) <= TIE * s;
}

int linalg_routine(const char *t) {
    static const char *const names[] = {"potrf", "trsm", "geqrf", "orgqr", "getrf", "syevd", "gesdd"};
    size_t n = t ? strlen(t) : 0;
    if (n < 12 || strncmp(t, "lapack_", 7) != 0 || (t[7] != 's' && t[7] != 'd') || strcmp(t + n - 4, "_ffi") != 0)
        return -1;
    for (int k = 0; k < (int)(sizeof names / sizeof *names); k++)
        if (n - 12 == strlen(names[k]) && strncmp(t + 8, names[k], n - 12) == 0) return k;
    return -1;
}

/* The sign LAPACK leaves free on a vector of n entries spaced `stride`
 * apart (an eigenvector, a singular pair): the one that makes its entry of
 * largest magnitude positive (-1 or 1). An entry of the other sign as large
 * to within rounding makes the convention itself a tie. */
static double free_sign(const double *x, int64_t n, int64_t stride, int64_t *ties) {
    int64_t big = 0;
    for (int64_t r = 1; r < n; r++)
        if (fabs(x[r * stride]) > fabs(x[big * stride])) big = r;
    for (int64_t r = 0; ties && r < n; r++)
        if (r != big && near_tie(fabs(x[r * stride]), fabs(x[big * stride])) && (x[r * stride] < 0) != (x[big * stride] < 0)) {
            ++*ties;
            break;
        }
    return x[big * stride] < 0 ? -1 : 1;
}

/* ------------------------------------------------------------------ cholesky */

int64_t linalg_potrf(double *a, int64_t n, bool lower) {
    /* Element (i, j), i >= j, of the triangle being factored: the lower
     * triangle itself, or the upper one read transposed (U = Lᵀ). */
#define T(i, j) a[lower ? (i) * n + (j) : (j) * n + (i)]
    for (int64_t j = 0; j < n; j++) {
        double d = T(j, j);
        for (int64_t k = 0; k < j; k++) d -= T(j, k) * T(j, k);
        if (!(d > 0)) {  /* also NaN */
            T(j, j) = d;
            return j + 1;
        }
        d = sqrt(d);
        T(j, j) = d;
        for (int64_t i = j + 1; i < n; i++) {
            double s = T(i, j);
            for (int64_t k = 0; k < j; k++) s -= T(i, k) * T(j, k);
            T(i, j) = s / d;
        }
    }
#undef T
    return 0;
}

/* ------------------------------------------------------------------ trsm */

/* Solves op(A)·x = x in place for one vector of p entries spaced `stride`
 * apart, A p×p with its `lower` triangle, op = transpose when trans. */
static void solve_vec(const double *a, int64_t p, double *x, int64_t stride, bool lower, bool trans, bool unit) {
#define OPA(i, j) (trans ? a[(j) * p + (i)] : a[(i) * p + (j)])
    if (lower != trans) {  /* op(A) lower: forward */
        for (int64_t i = 0; i < p; i++) {
            double s = x[i * stride];
            for (int64_t k = 0; k < i; k++) s -= OPA(i, k) * x[k * stride];
            x[i * stride] = unit ? s : s / OPA(i, i);
        }
    } else {
        for (int64_t i = p; i-- > 0;) {
            double s = x[i * stride];
            for (int64_t k = i + 1; k < p; k++) s -= OPA(i, k) * x[k * stride];
            x[i * stride] = unit ? s : s / OPA(i, i);
        }
    }
#undef OPA
}

void linalg_trsm(const double *a, double *b, int64_t m, int64_t n, bool left, bool lower, bool trans, bool unit) {
    if (left)  /* each column of B */
        for (int64_t j = 0; j < n; j++) solve_vec(a, m, b + j, n, lower, trans, unit);
    else       /* each row: x·op(A) = r is op(A)ᵀ·xᵀ = rᵀ */
        for (int64_t i = 0; i < m; i++) solve_vec(a, n, b + i * n, 1, lower, !trans, unit);
}

/* ------------------------------------------------------------------ qr */

/* Applies H = I − tau·v·vᵀ from the left to columns c0 .. n-1 of rows
 * i .. m-1 of a (m×n): v's entry in row i is 1, its entries below are those
 * of column vi of v (an m×nv matrix) in rows i+1 .. m-1. */
static void apply_reflector(double *a, int64_t m, int64_t n, int64_t i, int64_t c0, const double *v, int64_t nv,
                            int64_t vi, double tau) {
    if (tau == 0) return;
    for (int64_t j = c0; j < n; j++) {
        double w = a[i * n + j];
        for (int64_t r = i + 1; r < m; r++) w += v[r * nv + vi] * a[r * n + j];
        w *= tau;
        a[i * n + j] -= w;
        for (int64_t r = i + 1; r < m; r++) a[r * n + j] -= v[r * nv + vi] * w;
    }
}

void linalg_geqrf(double *a, int64_t m, int64_t n, double *tau) {
    int64_t k = m < n ? m : n;
    for (int64_t i = 0; i < k; i++) {
        /* dlarfg: the reflector taking (alpha, x) to (beta, 0) */
        double alpha = a[i * n + i], xnorm = 0;
        for (int64_t r = i + 1; r < m; r++) xnorm = hypot(xnorm, a[r * n + i]);
        if (xnorm == 0) {
            tau[i] = 0;
            continue;
        }
        double beta = -copysign(hypot(alpha, xnorm), alpha);
        tau[i] = (beta - alpha) / beta;
        double scale = 1 / (alpha - beta);
        for (int64_t r = i + 1; r < m; r++) a[r * n + i] *= scale;
        a[i * n + i] = beta;
        /* H(i)ᵀ = H(i) on the columns to the right (v read from column i,
         * which it leaves alone) */
        apply_reflector(a, m, n, i, i + 1, a, n, i, tau[i]);
    }
}

void linalg_orgqr(double *a, int64_t m, int64_t n, const double *tau, int64_t k) {
    double *v = xmalloc((size_t)(m * n > 0 ? m * n : 1) * sizeof *v);
    memcpy(v, a, (size_t)(m * n) * sizeof *v);
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) a[i * n + j] = i == j;
    /* Q·I[:, :n] = H(0)·(H(1)·(…·H(k−1)·I[:, :n])) */
    for (int64_t i = k; i-- > 0;) apply_reflector(a, m, n, i, 0, v, n, i, tau[i]);
    free(v);
}

/* ------------------------------------------------------------------ lu */

int64_t linalg_getrf(double *a, int64_t m, int64_t n, int64_t *ipiv, int64_t *ties) {
    int64_t k = m < n ? m : n, info = 0;
    for (int64_t j = 0; j < k; j++) {
        int64_t p = j;
        for (int64_t i = j + 1; i < m; i++)
            if (fabs(a[i * n + j]) > fabs(a[p * n + j])) p = i;
        for (int64_t i = j; ties && i < m; i++)
            if (i != p && near_tie(fabs(a[i * n + j]), fabs(a[p * n + j]))) {
                ++*ties;
                break;
            }
        ipiv[j] = p + 1;
        if (p != j)
            for (int64_t c = 0; c < n; c++) {
                double t = a[j * n + c];
                a[j * n + c] = a[p * n + c];
                a[p * n + c] = t;
            }
        double piv = a[j * n + j];
        if (piv != 0) {
            for (int64_t i = j + 1; i < m; i++) a[i * n + j] /= piv;
        } else if (!info) {
            info = j + 1;
        }
        for (int64_t i = j + 1; i < m; i++)
            for (int64_t c = j + 1; c < n; c++) a[i * n + c] -= a[i * n + j] * a[j * n + c];
    }
    return info;
}

/* ------------------------------------------------------------------ eigh */

int64_t linalg_syevd(double *a, int64_t n, bool lower, double *w, int64_t *ties) {
    /* the full symmetric matrix from the given triangle */
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < i; j++) {
            if (lower) a[j * n + i] = a[i * n + j];
            else a[i * n + j] = a[j * n + i];
        }
    double *v = xcalloc((size_t)(n * n > 0 ? n * n : 1), sizeof *v);
    for (int64_t i = 0; i < n; i++) v[i * n + i] = 1;
    int64_t info = 1;
    for (int sweep = 0; sweep < 100; sweep++) {
        double off = 0, all = 0;
        for (int64_t i = 0; i < n; i++)
            for (int64_t j = 0; j < n; j++) {
                all += a[i * n + j] * a[i * n + j];
                if (i != j) off += a[i * n + j] * a[i * n + j];
            }
        if (!isfinite(all)) break;
        if (off <= 1e-28 * all) {  /* off-diagonal norm 1e-14 of the whole */
            info = 0;
            break;
        }
        for (int64_t p = 0; p < n; p++)
            for (int64_t q = p + 1; q < n; q++) {
                double apq = a[p * n + q];
                if (apq == 0) continue;
                /* the rotation zeroing (p, q) (Rutishauser's form) */
                double theta = (a[q * n + q] - a[p * n + p]) / (2 * apq);
                double t = copysign(1.0, theta) / (fabs(theta) + sqrt(theta * theta + 1));
                if (!isfinite(theta)) t = 0;  /* apq negligible beside the diagonal */
                double c = 1 / sqrt(t * t + 1), s = t * c;
                for (int64_t r = 0; r < n; r++) {  /* A·J */
                    double x = a[r * n + p], y = a[r * n + q];
                    a[r * n + p] = c * x - s * y;
                    a[r * n + q] = s * x + c * y;
                }
                for (int64_t r = 0; r < n; r++) {  /* Jᵀ·A */
                    double x = a[p * n + r], y = a[q * n + r];
                    a[p * n + r] = c * x - s * y;
                    a[q * n + r] = s * x + c * y;
                }
                for (int64_t r = 0; r < n; r++) {  /* V·J */
                    double x = v[r * n + p], y = v[r * n + q];
                    v[r * n + p] = c * x - s * y;
                    v[r * n + q] = s * x + c * y;
                }
                a[p * n + q] = a[q * n + p] = 0;
            }
    }
    /* ascending eigenvalues (stable: equal ones keep their order) */
    int64_t *ord = xmalloc((size_t)(n > 0 ? n : 1) * sizeof *ord);
    double scale = 0;
    for (int64_t i = 0; i < n; i++) {
        ord[i] = i;
        scale = fmax(scale, fabs(a[i * n + i]));
    }
    for (int64_t i = 1; i < n; i++)
        for (int64_t j = i; j > 0 && a[ord[j] * n + ord[j]] < a[ord[j - 1] * n + ord[j - 1]]; j--) {
            int64_t t = ord[j];
            ord[j] = ord[j - 1];
            ord[j - 1] = t;
        }
    for (int64_t i = 0; i < n; i++) w[i] = a[ord[i] * n + ord[i]];
    for (int64_t i = 0; ties && i + 1 < n; i++)
        if (fabs(w[i + 1] - w[i]) <= TIE * scale) ++*ties;  /* a repeated eigenvalue: any basis of its space */
    for (int64_t c = 0; c < n; c++) {
        double sign = free_sign(v + ord[c], n, n, ties);
        for (int64_t r = 0; r < n; r++) a[r * n + c] = sign * v[r * n + ord[c]];
    }
    free(ord);
    free(v);
    return info;
}

/* ------------------------------------------------------------------ svd */

/* Completes the orthonormal columns of q (p×p, row-major) whose `have[c]`
 * is set with unit vectors made orthogonal to them (Gram–Schmidt, twice),
 * taking for each missing column the coordinate vector that keeps most of
 * its length; a choice between two that keep as much is a tie. */
static void complete_basis(double *q, int64_t p, const bool *have, int64_t *ties) {
    bool *done = xcalloc((size_t)(p + 1), sizeof *done);
    memcpy(done, have, (size_t)p * sizeof *done);
    double *x = xmalloc((size_t)(p + 1) * sizeof *x), *best = xmalloc((size_t)(p + 1) * sizeof *best);
    for (int64_t c = 0; c < p; c++) {
        if (have[c]) continue;
        double bn = -1, second = -1;
        for (int64_t e = 0; e < p; e++) {
            for (int64_t r = 0; r < p; r++) x[r] = r == e;
            for (int pass = 0; pass < 2; pass++)
                for (int64_t k = 0; k < p; k++) {
                    if (!done[k]) continue;
                    double d = 0;
                    for (int64_t r = 0; r < p; r++) d += q[r * p + k] * x[r];
                    for (int64_t r = 0; r < p; r++) x[r] -= d * q[r * p + k];
                }
            double nrm = 0;
            for (int64_t r = 0; r < p; r++) nrm = hypot(nrm, x[r]);
            if (nrm > bn) {
                second = bn;
                bn = nrm;
                memcpy(best, x, (size_t)p * sizeof *x);
            } else if (nrm > second) {
                second = nrm;
            }
        }
        if (ties && second >= 0 && near_tie(bn, second)) ++*ties;
        for (int64_t r = 0; r < p; r++) q[r * p + c] = bn > 0 ? best[r] / bn : 0;
        done[c] = true;
    }
    free(done);
    free(x);
    free(best);
}

int64_t linalg_gesdd(const double *a, int64_t m, int64_t n, double *s, double *u, int64_t ucols, double *vt,
                     int64_t vtrows, int64_t *ties) {
    /* One-sided Jacobi on the columns of g = A (m ≥ n) or Aᵀ (m < n): rotate
     * pairs until orthogonal; g = U·Σ, the rotations' product V. */
    bool tr = m < n;
    int64_t gm = tr ? n : m, gn = tr ? m : n, k = gn;
    double *g = xmalloc((size_t)(gm * gn + 1) * sizeof *g), *v = xcalloc((size_t)(gn * gn + 1), sizeof *v);
    for (int64_t i = 0; i < gm; i++)
        for (int64_t j = 0; j < gn; j++) g[i * gn + j] = tr ? a[j * n + i] : a[i * n + j];
    for (int64_t j = 0; j < gn; j++) v[j * gn + j] = 1;
    int64_t info = 1;
    for (int sweep = 0; sweep < 100; sweep++) {
        bool rotated = false, finite = true;
        /* a column whose length is rounding beside the longest is zero:
         * rotating it against the others would only chase the noise */
        double longest = 0;
        for (int64_t j = 0; j < gn; j++) {
            double c2 = 0;
            for (int64_t i = 0; i < gm; i++) c2 += g[i * gn + j] * g[i * gn + j];
            longest = fmax(longest, c2);
        }
        for (int64_t p = 0; p < gn; p++)
            for (int64_t q = p + 1; q < gn; q++) {
                double al = 0, be = 0, ga = 0;
                for (int64_t i = 0; i < gm; i++) {
                    al += g[i * gn + p] * g[i * gn + p];
                    be += g[i * gn + q] * g[i * gn + q];
                    ga += g[i * gn + p] * g[i * gn + q];
                }
                finite &= isfinite(al) && isfinite(be) && isfinite(ga);
                if (!(fabs(ga) > 1e-15 * sqrt(al * be)) || fmin(al, be) <= 1e-30 * longest) continue;
                rotated = true;
                double zeta = (be - al) / (2 * ga);
                double t = copysign(1.0, zeta) / (fabs(zeta) + sqrt(1 + zeta * zeta));
                double c = 1 / sqrt(1 + t * t), sn = c * t;
                for (int64_t i = 0; i < gm; i++) {
                    double x = g[i * gn + p], y = g[i * gn + q];
                    g[i * gn + p] = c * x - sn * y;
                    g[i * gn + q] = sn * x + c * y;
                }
                for (int64_t i = 0; i < gn; i++) {
                    double x = v[i * gn + p], y = v[i * gn + q];
                    v[i * gn + p] = c * x - sn * y;
                    v[i * gn + q] = sn * x + c * y;
                }
            }
        if (!finite) break;
        if (!rotated) {
            info = 0;
            break;
        }
    }
    /* singular values, descending (stable) */
    double *sv = xmalloc((size_t)(k + 1) * sizeof *sv), top = 0;
    int64_t *ord = xmalloc((size_t)(k + 1) * sizeof *ord);
    for (int64_t j = 0; j < k; j++) {
        double nrm = 0;
        for (int64_t i = 0; i < gm; i++) nrm = hypot(nrm, g[i * gn + j]);
        sv[j] = nrm;
        ord[j] = j;
        top = fmax(top, nrm);
    }
    for (int64_t i = 1; i < k; i++)
        for (int64_t j = i; j > 0 && sv[ord[j]] > sv[ord[j - 1]]; j--) {
            int64_t t = ord[j];
            ord[j] = ord[j - 1];
            ord[j - 1] = t;
        }
    /* the left vectors (of g) as the columns of a gm×gm basis, the right
     * ones gn×gn; each pair signed so the left one's largest entry is
     * positive; a zero singular value leaves its left vector to complete */
    double *lq = xcalloc((size_t)(gm * gm + 1), sizeof *lq), *rq = xcalloc((size_t)(gn * gn + 1), sizeof *rq);
    bool *have = xcalloc((size_t)(gm + 1), sizeof *have);
    for (int64_t c = 0; c < k; c++) {
        int64_t src = ord[c];
        s[c] = sv[src];
        if (ties && c + 1 < k && fabs(sv[ord[c + 1]] - sv[src]) <= TIE * top) ++*ties;  /* repeated: any basis */
        have[c] = sv[src] > 1e-13 * top;
        for (int64_t i = 0; have[c] && i < gm; i++) lq[i * gm + c] = g[i * gn + src] / sv[src];
        for (int64_t i = 0; i < gn; i++) rq[i * gn + c] = v[i * gn + src];
    }
    for (int64_t c = 0; ties && c < k; c++) *ties += !have[c] && top > 0;
    complete_basis(lq, gm, have, ties);
    for (int64_t c = 0; c < k; c++) {
        if (free_sign(lq + c, gm, gm, ties) < 0) {
            for (int64_t i = 0; i < gm; i++) lq[i * gm + c] = -lq[i * gm + c];
            for (int64_t i = 0; i < gn; i++) rq[i * gn + c] = -rq[i * gn + c];
        }
    }
    /* A = L·Σ·Rᵀ (m ≥ n: U = L, V = R; else U = R, V = L) */
    const double *uq = tr ? rq : lq, *vq = tr ? lq : rq;
    int64_t up = tr ? gn : gm, vp = tr ? gm : gn;  /* their orders: m, n */
    for (int64_t i = 0; i < m; i++)
        for (int64_t c = 0; c < ucols; c++) u[i * ucols + c] = c < up ? uq[i * up + c] : 0;
    for (int64_t r = 0; r < vtrows; r++)
        for (int64_t j = 0; j < n; j++) vt[r * n + j] = r < vp ? vq[j * vp + r] : 0;
    free(g);
    free(v);
    free(sv);
    free(ord);
    free(lq);
    free(rq);
    free(have);
    return info;
}
