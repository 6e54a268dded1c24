"""Hand-written training steps (shard_map) and their bug variants.

Each `make_*` returns a Program: the per-device step (same signature and
parameter order as the baseline), in/out PartitionSpecs, the mesh, the plain
single-device baseline step (same math on global arrays) and seeded concrete
inputs. A step is forward, loss, jax.grad and an optimizer update; its outputs
are the updated parameters (and optimizer state) and the loss. `bug` selects one
realistic mistake; every mistake is on a line tagged `# BUG(<id>)` so the
exporter can record its file:line.

New programs go at the end of this file: the exported HLO records the source
lines of every operation.
"""
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P

B, H, F, O = 8, 32, 64, 16      # batch, input/hidden, ffn, output widths
LR = 0.5


class Program:
    def __init__(self, family, mesh, fn, in_specs, out_specs, baseline, args,
                 check_vma=False, outputs=("params", "loss")):
        self.family = family
        self.outputs = outputs    # names of the top-level outputs of the step
        self.mesh = mesh
        self.fn = fn
        self.in_specs = in_specs
        self.out_specs = out_specs
        self.baseline = baseline
        self.args = args          # concrete inputs (numpy), global shapes
        self.check_vma = check_vma

    def smap(self):
        return jax.shard_map(self.fn, mesh=self.mesh, in_specs=self.in_specs,
                             out_specs=self.out_specs, check_vma=self.check_vma)


def rand(rng, shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def mlp_params(rng):
    return {"w1": rand(rng, (H, F), 1 / np.sqrt(H)), "b1": rand(rng, (F,), 0.1),
            "w2": rand(rng, (F, O), 1 / np.sqrt(F)), "b2": rand(rng, (O,), 0.1)}


def mlp(p, x):
    with jax.named_scope("mlp"):
        h = jax.nn.relu(x @ p["w1"] + p["b1"])
        return h @ p["w2"] + p["b2"]


def per_example_loss(p, x, y):
    with jax.named_scope("loss"):
        return jnp.sum((mlp(p, x) - y) ** 2, axis=-1)


def mse(p, x, y):
    return jnp.mean(per_example_loss(p, x, y))


def sgd(p, g, lr=LR):
    with jax.named_scope("optimizer"):
        return jax.tree.map(lambda w, d: w - lr * d, p, g)


def mlp_data(seed, batch=B):
    rng = np.random.default_rng(seed)
    return mlp_params(rng), rand(rng, (batch, H)), rand(rng, (batch, O))


def replicated(tree):
    return jax.tree.map(lambda _: P(), tree)


def sgd_baseline(params, x, y):
    loss, g = jax.value_and_grad(mse)(params, x, y)
    return sgd(params, g), loss


# --------------------------------------------------------------------------
# 1. Data-parallel SGD: batch sharded on dp, local mean loss, pmean'd gradients.
#    DP may name several mesh axes (a 2-D data-parallel mesh).
# --------------------------------------------------------------------------

def make_dp_sgd(mesh, bug=None, DP="dp"):
    def step(params, x, y):
        loss, g = jax.value_and_grad(mse)(params, x, y)
        with jax.named_scope("grad_sync"):
            if bug == "dp-psum-grads":
                g = jax.lax.psum(g, DP)                     # BUG(dp-psum-grads)
            elif bug == "dp2d-pmean-one-axis":
                g = jax.lax.pmean(g, DP[1])                 # BUG(dp2d-pmean-one-axis)
            elif bug != "dp-missing-pmean":
                g = jax.lax.pmean(g, DP)                    # BUG(dp-missing-pmean)
            loss = jax.lax.pmean(loss, DP)
        return sgd(params, g), loss

    params, x, y = mlp_data(1)
    in_specs = (replicated(params), P(DP), P(DP))
    out_specs = (replicated(params), P())
    return Program("mlp.dp_sgd", mesh, step, in_specs, out_specs, sgd_baseline,
                   (params, x, y))
