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


# --------------------------------------------------------------------------
# 2. Data-parallel Adam (optax.adam with its step counter) on pmean'd
#    gradients. The optimizer state comes in as an input (a later step: count
#    3, non-zero moments), so a gradient scaled by the device count changes the
#    update (on the first step Adam's update is nearly scale-invariant).
# --------------------------------------------------------------------------

ADAM = dict(learning_rate=0.05, b1=0.9, b2=0.999, eps=1e-8)


def adam_state(params, rng):
    import optax
    state = optax.adam(**ADAM).init(params)
    adam = state[0]._replace(
        count=np.int32(3),
        mu=jax.tree.map(lambda p: rand(rng, p.shape, 0.05), params),
        nu=jax.tree.map(lambda p: np.abs(rand(rng, p.shape, 0.01)), params))
    return (adam,) + tuple(state[1:])


def adam_update(params, opt_state, g):
    import optax
    with jax.named_scope("optimizer"):
        updates, opt_state = optax.adam(**ADAM).update(g, opt_state, params)
        return optax.apply_updates(params, updates), opt_state


def adam_baseline(params, opt_state, x, y):
    loss, g = jax.value_and_grad(mse)(params, x, y)
    params, opt_state = adam_update(params, opt_state, g)
    return params, opt_state, loss


def make_dp_adam(mesh, bug=None, DP="dp"):
    def step(params, opt_state, x, y):
        loss, g = jax.value_and_grad(mse)(params, x, y)
        with jax.named_scope("grad_sync"):
            if bug == "adam-psum-grads":
                g = jax.lax.psum(g, DP)                     # BUG(adam-psum-grads)
            else:
                g = jax.lax.pmean(g, DP)
            loss = jax.lax.pmean(loss, DP)
        params, opt_state = adam_update(params, opt_state, g)
        return params, opt_state, loss

    params, x, y = mlp_data(2)
    state = adam_state(params, np.random.default_rng(12))
    in_specs = (replicated(params), replicated(state), P(DP), P(DP))
    out_specs = (replicated(params), replicated(state), P())
    return Program("mlp.dp_adam", mesh, step, in_specs, out_specs, adam_baseline,
                   (params, state, x, y), outputs=("params", "opt_state", "loss"))


# --------------------------------------------------------------------------
# 3. Data-parallel SGD normalised by the global batch: each device divides its
#    sum of per-example losses by the global batch size; gradients and loss are
#    psum'd.
# --------------------------------------------------------------------------

def make_dp_sgd_global(mesh, bug=None, DP="dp"):
    n = mesh.shape[DP]

    def step(params, x, y):
        def loss_fn(p):
            per = per_example_loss(p, x, y)
            if bug == "global-local-count":
                return jnp.sum(per) / per.shape[0]          # BUG(global-local-count)
            return jnp.sum(per) / (per.shape[0] * n)
        loss, g = jax.value_and_grad(loss_fn)(params)
        with jax.named_scope("grad_sync"):
            g = jax.lax.psum(g, DP)
            loss = jax.lax.psum(loss, DP)
        return sgd(params, g), loss

    params, x, y = mlp_data(3)
    in_specs = (replicated(params), P(DP), P(DP))
    out_specs = (replicated(params), P())
    return Program("mlp.dp_sgd_global", mesh, step, in_specs, out_specs, sgd_baseline,
                   (params, x, y))


# --------------------------------------------------------------------------
# Megatron's conjugate operators for tensor parallelism under
# shard_map(check_vma=False): `copy_to_tp` is the identity forward and an
# all-reduce of the gradient backward; `reduce_from_tp` all-reduces forward and
# passes the gradient through backward. (A bare psum in the forward transposes
# to another psum under check_vma=False: gradients tp times too large.)
# --------------------------------------------------------------------------

def tp_ops(TP):
    @jax.custom_vjp
    def copy_to_tp(x):
        return x

    def copy_fwd(x):
        return x, None

    def copy_bwd(_, g):
        return (jax.lax.psum(g, TP),)

    copy_to_tp.defvjp(copy_fwd, copy_bwd)

    @jax.custom_vjp
    def reduce_from_tp(x):
        return jax.lax.psum(x, TP)

    def reduce_fwd(x):
        return jax.lax.psum(x, TP), None

    def reduce_bwd(_, g):
        return (g,)

    reduce_from_tp.defvjp(reduce_fwd, reduce_bwd)
    return copy_to_tp, reduce_from_tp


# --------------------------------------------------------------------------
# 4. dp x tp: the MLP with a column-parallel w1/b1 and a row-parallel w2 over
#    tp (reduce_from_tp), batch on dp, gradients pmean'd over dp.
# --------------------------------------------------------------------------

def make_dp_tp_mlp(mesh, bug=None, DP="dp", TP="tp"):
    _, reduce_from_tp = tp_ops(TP)

    def local_loss(p, x, y):
        with jax.named_scope("mlp"):
            h = jax.nn.relu(x @ p["w1"] + p["b1"])
            if bug == "tp-bare-psum":
                out = jax.lax.psum(h @ p["w2"], TP) + p["b2"]   # BUG(tp-bare-psum)
            else:
                out = reduce_from_tp(h @ p["w2"]) + p["b2"]
        with jax.named_scope("loss"):
            return jnp.mean(jnp.sum((out - y) ** 2, axis=-1))

    def step(params, x, y):
        loss, g = jax.value_and_grad(local_loss)(params, x, y)
        with jax.named_scope("grad_sync"):
            if bug == "tp-pmean-wrong-axis":
                g = jax.lax.pmean(g, TP)                    # BUG(tp-pmean-wrong-axis)
            else:
                g = jax.lax.pmean(g, DP)
            loss = jax.lax.pmean(loss, DP)
        return sgd(params, g), loss

    params, x, y = mlp_data(4)
    pspec = {"w1": P(None, TP), "b1": P(TP), "w2": P(TP, None), "b2": P()}
    in_specs = (pspec, P(DP), P(DP))
    out_specs = (pspec, P())
    return Program("mlp.dp_tp", mesh, step, in_specs, out_specs, sgd_baseline,
                   (params, x, y))


# --------------------------------------------------------------------------
# 5. FSDP / ZeRO-3: every parameter sharded on dim 0 over dp; all_gather before
#    use, gradients reduce-scattered (psum_scatter) back to shards and divided by
#    the device count, the update on the shards.
# --------------------------------------------------------------------------

def make_fsdp(mesh, bug=None, DP="dp"):
    n = mesh.shape[DP]

    def gather(k, w):
        if bug == "fsdp-gather-wrong-dim" and k == "w1":
            full = (w.shape[0] * n,) + w.shape[1:]
            return jax.lax.all_gather(w, DP, axis=1, tiled=True).reshape(full)  # BUG(fsdp-gather-wrong-dim)
        return jax.lax.all_gather(w, DP, axis=0, tiled=True)

    def step(params, x, y):
        with jax.named_scope("fsdp_gather"):
            full = {k: gather(k, w) for k, w in params.items()}
        loss, g = jax.value_and_grad(mse)(full, x, y)
        with jax.named_scope("grad_sync"):
            if bug == "fsdp-scatter-no-mean":
                g = jax.tree.map(lambda t: jax.lax.psum_scatter(t, DP, scatter_dimension=0, tiled=True), g)  # BUG(fsdp-scatter-no-mean)
            else:
                g = jax.tree.map(lambda t: jax.lax.psum_scatter(t, DP, scatter_dimension=0,
                                                                tiled=True) / n, g)
            loss = jax.lax.pmean(loss, DP)
        return sgd(params, g), loss

    params, x, y = mlp_data(5)
    pspec = jax.tree.map(lambda _: P(DP), params)
    in_specs = (pspec, P(DP), P(DP))
    out_specs = (pspec, P())
    return Program("mlp.fsdp", mesh, step, in_specs, out_specs, sgd_baseline,
                   (params, x, y))


# --------------------------------------------------------------------------
# 6. Gradient accumulation: each device splits its batch into MICRO
#    microbatches (jax.lax.scan), sums the microbatch gradients, divides by the
#    number of microbatches, then pmean over dp.
# --------------------------------------------------------------------------

MICRO = 2


def make_grad_accum(mesh, bug=None, DP="dp"):
    def step(params, x, y):
        xs = x.reshape((MICRO, -1) + x.shape[1:])
        ys = y.reshape((MICRO, -1) + y.shape[1:])

        def micro(carry, xy):
            gsum, lsum = carry
            loss, g = jax.value_and_grad(mse)(params, *xy)
            return (jax.tree.map(jnp.add, gsum, g), lsum + loss), None

        zero = jax.tree.map(jnp.zeros_like, params)
        with jax.named_scope("accumulate"):
            (gsum, lsum), _ = jax.lax.scan(micro, (zero, jnp.float32(0)), (xs, ys))
            if bug == "accum-wrong-count":
                g = jax.tree.map(lambda t: t / x.shape[0], gsum)   # BUG(accum-wrong-count)
            else:
                g = jax.tree.map(lambda t: t / MICRO, gsum)
        with jax.named_scope("grad_sync"):
            g = jax.lax.pmean(g, DP)
            loss = jax.lax.pmean(lsum / MICRO, DP)
        return sgd(params, g), loss

    params, x, y = mlp_data(6, batch=2 * B)
    in_specs = (replicated(params), P(DP), P(DP))
    out_specs = (replicated(params), P())
    return Program("mlp.grad_accum", mesh, step, in_specs, out_specs, sgd_baseline,
                   (params, x, y))
