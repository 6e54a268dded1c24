import sys
sys.path.insert(0, "samples/gen")
import numpy as np, jax, jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec as P
from fresh_lib import Corpus, seeded
C = Corpus("build/bag-mask", "tests/cases/bag-mask/bag.py", "x.sh", [])
rng, R, I = seeded(1)
def ref_len(tab, ids, lens):
    m = jnp.arange(ids.shape[1]) < lens[:, None]
    return jnp.sum(tab[ids] * m[..., None].astype(tab.dtype), 1)
def mk(kind):
    def f(tab, ids, lens):
        rl = tab.shape[0]; loc = ids - lax.axis_index("tp") * rl
        hit = (loc >= 0) & (loc < rl) & (jnp.arange(ids.shape[1]) < lens[:, None])
        e = tab[jnp.clip(loc, 0, rl - 1)]
        e = jnp.where(hit[..., None], e, 0.0) if kind == "where" else e * hit[..., None].astype(e.dtype)
        return lax.psum(jnp.sum(e, 1), "tp")
    return lambda bug: f
T, ids, lens = R(32, 8), I(0, 32, 8, 4), I(1, 5, 8)
for kind in ["where", "mul"]:
    C.smap("bag_" + kind, {"tp": 4}, mk(kind), (P("tp"), P(), P()), P(), ref_len, (T, ids, lens))
C.finish()
# tests/cases/bag-mask: a sum over a bag of rows looked up in a table split by
# rows over tp, each row masked by ownership and by the bag's length (where /
# multiply by the mask made a number). Exported with JAX 0.12 by running this
# file from the repository root with PYTHONPATH=python (the venv of
# samples/gen/env312.sh); bag_K.{baseline,dist}.hlo renamed to K.{base,dist}.hlo.
