"""Writes tests/cases/interp/jax-linalg.{hlo,hlo.pb,io.stf}: jax.numpy.linalg
and jax.lax.linalg as XLA's CPU backend computes them (its LAPACK custom
calls potrf, trsm, geqrf, orgqr, getrf, syevd, gesdd), so that the interpreter's
factorisations (src/linalg.c) are held to the real thing: Cholesky, triangular
solves on either side, either triangle, transposed or not, unit diagonal or
not; QR reduced and complete, tall and wide; LU with its pivots and a singular
matrix; eigh; SVD square, tall, wide and values only, a
pseudo-inverse; batched matrices; a matrix that is not positive definite.

    JAX_VENV=DIR bash samples/gen/jax_case.sh linalg      (from the repository root)

The io file holds in.<k> (the parameters) and out.<k> (JAX's outputs in the
order of `forward`). Inputs are fixed by a seeded NumPy generator.
"""
import jax
import jax.numpy as jnp
import numpy as np

from jax_case import write_case

TS = jax.lax.linalg.triangular_solve


def forward(spd, bspd, a, b, tall, wide, sing, sym, indef):
    outs = []
    l = jnp.linalg.cholesky(spd)                                 # potrf, lower
    outs.append(l)
    outs.append(jnp.linalg.cholesky(bspd))                       # batched
    outs.append(jnp.linalg.cholesky(indef))                      # not PD: NaN
    u = jnp.linalg.cholesky(spd, upper=True)                     # upper
    outs.append(u)
    for left in (True, False):
        rhs = b if left else b.T
        for lower in (True, False):
            for trans in (False, True):
                for unit in (False, True):
                    tri = jnp.tril(a) if lower else jnp.triu(a)
                    tri = tri + 4 * jnp.eye(a.shape[0], dtype=a.dtype)
                    outs.append(TS(tri, rhs, left_side=left, lower=lower, transpose_a=trans, unit_diagonal=unit))
    q, r = jnp.linalg.qr(tall)                                   # geqrf + orgqr
    outs += [q, r]
    q, r = jnp.linalg.qr(tall, mode="complete")
    outs += [q, r]
    q, r = jnp.linalg.qr(wide)
    outs += [q, r]
    outs += list(jax.lax.linalg.lu(a))                           # lu, pivots, permutation
    outs += list(jax.lax.linalg.lu(sing))
    w, v = jnp.linalg.eigh(sym)                                  # syevd
    outs += [w, v]
    outs.append(jnp.linalg.solve(spd, b))                        # getrf + trsm
    outs.append(jnp.linalg.inv(bspd))
    outs += list(jnp.linalg.svd(a))                              # gesdd: square, full
    outs += list(jnp.linalg.svd(tall, full_matrices=False))     # tall, reduced
    outs += list(jnp.linalg.svd(wide, full_matrices=False))     # wide, reduced
    outs.append(jnp.linalg.svd(sing, compute_uv=False))          # values only, rank 4
    outs.append(jnp.linalg.pinv(tall))
    return tuple(outs)


def main():
    rng = np.random.default_rng(20261206)
    f = lambda *s: rng.uniform(-1, 1, size=s).astype(np.float32)
    x = f(6, 6)
    spd = x @ x.T + 6 * np.eye(6, dtype=np.float32)
    xb = f(3, 5, 5)
    bspd = np.einsum("bij,bkj->bik", xb, xb) + 5 * np.eye(5, dtype=np.float32)
    a, b = f(6, 6), f(6, 4)
    tall, wide = f(7, 4), f(3, 5)
    sing = f(5, 5)
    sing[3] = sing[1] * 2  # rank 4: a zero pivot
    y = f(6, 6)
    sym = (y + y.T) / 2
    indef = spd - 12 * np.eye(6, dtype=np.float32)
    args = (spd, bspd, a, b, tall, wide, sing, sym, indef)
    print(write_case("jax-linalg", forward, args), "outputs")

if __name__ == "__main__":
    main()
