"""The loop-carry cases tests/cases/accum-views/*.{base,dist}.hlo (GSPMD,
relations from the shardings): gradient accumulation over micro-batches by
lax.scan, as training steps write it, on a 2 x 2 mesh (fsdp, tp).

two-axes: two weights of one local shape sharded (fsdp, tp) and (tp, fsdp):
the partitioner's zero accumulators [2, 2] are blocks of the baseline's
[4, 4] zeros under either view, and only the body says which.
one-micro: a single micro-batch, whose dynamic slice at the scan's counter
XLA folds on the distributed side only.
Usage: JAX_VENV=DIR bash samples/gen/jax_case.sh accum (jax 0.12 wrote them).
"""
import os
import shutil
import sys
import tempfile

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=4")
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "python"))
from scalify_jax import export_pair  # noqa: E402

jax.config.update("jax_enable_compilation_cache", False)
OUT = "tests/cases/accum-views"


def loss(params, x):
    h = jnp.tanh(x @ params["w1"])
    return jnp.sum(jnp.square(h @ params["w2"]))


def accumulate(params, xs):
    def body(g, x):
        return jax.tree.map(jnp.add, g, jax.grad(loss)(params, x)), None
    g0 = jax.tree.map(jnp.zeros_like, params)
    return jax.lax.scan(body, g0, xs)[0]


def case(name, micro):
    rng = np.random.default_rng(0)
    params = {"w1": rng.standard_normal((4, 4)).astype(np.float32),
              "w2": rng.standard_normal((4, 4)).astype(np.float32)}
    xs = rng.standard_normal((micro, 4, 4)).astype(np.float32)
    specs = ({"w1": P("fsdp", "tp"), "w2": P("tp", "fsdp")}, P(None, "fsdp"))
    tmp = tempfile.mkdtemp()
    export_pair(accumulate, (params, xs), mesh={"fsdp": 2, "tp": 2}, name=name, out_dir=tmp,
                in_shardings=specs, out_shardings={"w1": P("fsdp", "tp"), "w2": P("tp", "fsdp")})
    os.makedirs(OUT, exist_ok=True)
    shutil.copy(os.path.join(tmp, name + ".baseline.hlo"), os.path.join(OUT, name + ".base.hlo"))
    shutil.copy(os.path.join(tmp, name + ".dist.hlo"), os.path.join(OUT, name + ".dist.hlo"))
    shutil.rmtree(tmp)


case("two-axes", 2)
case("one-micro", 1)
