"""Writes tests/cases/interp/jax-topk.{hlo,hlo.pb,io.stf}: jax.lax.top_k as
XLA's CPU backend computes it, on inputs full of ties, NaNs, infinities and
signed zeros, so the interpreter's topk is held to the real thing.

    JAX_VENV=DIR bash samples/gen/jax_case.sh topk      (from the repository root)

The io file holds in.<k> (the parameters) and out.<k> (JAX's outputs, values
then indices for each call). Inputs are fixed by a seeded NumPy generator.
"""
import jax
import jax.numpy as jnp
import numpy as np

from jax_case import write_case


def forward(x, y, z, w):
    outs = []
    outs += jax.lax.top_k(x, 5)                      # f32 rows: ties, NaN, inf, -0
    outs += jax.lax.top_k(x, x.shape[-1])            # k = n: the whole order
    outs += jax.lax.top_k(y, 4)                      # s32 with ties
    outs += jax.lax.top_k(z, 3)                      # bf16: ties after rounding
    outs += jax.lax.top_k(w, 2, axis=0)              # another axis
    outs += jax.lax.top_k(-x, 3)                     # smallest via negation
    return tuple(outs)


def main():
    rng = np.random.default_rng(20261204)
    x = rng.integers(-3, 4, size=(6, 12)).astype(np.float32)
    specials = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, -np.nan], np.float32)
    for r in range(6):
        cols = rng.choice(12, size=4, replace=False)
        x[r, cols] = rng.choice(specials, size=4)
    y = rng.integers(-2, 3, size=(3, 9)).astype(np.int32)
    z = jnp.asarray(rng.uniform(1.0, 1.03, size=(4, 10)).astype(np.float32), jnp.bfloat16)
    w = rng.integers(0, 3, size=(7, 3)).astype(np.float32)
    args = (x, y, z, w)
    write_case("jax-topk", forward, args)

if __name__ == "__main__":
    main()
