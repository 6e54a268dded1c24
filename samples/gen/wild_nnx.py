"""Flax NNX decoder-only LM in the pattern of Flax's NNX SPMD guide: Flax's own
nnx.Embed, nnx.MultiHeadAttention, nnx.RMSNorm and nnx.Linear, parameters annotated
with nnx.with_partitioning (mesh axis names), the model and an nnx.Optimizer (optax
adamw) split into a state whose shardings come from nnx.get_partition_spec.
Forward pass and training step (nnx.value_and_grad, optimizer.update), jitted on the
split state with NamedSharding in/out shardings."""
import contextlib
import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx
from jax.sharding import NamedSharding, PartitionSpec as P

LIB = ("flax", version("flax"))
VOCAB, D, HEADS, FFN, LAYERS, BATCH, SEQ = 128, 64, 8, 128, 2, 8, 16
INIT = nnx.initializers.normal(0.02)


class Block(nnx.Module):
    def __init__(self, ax, rngs):
        part = lambda init, names: nnx.with_partitioning(init, tuple(ax.get(n) for n in names))
        self.norm1 = nnx.RMSNorm(D, scale_init=part(nnx.initializers.ones, ("embed",)), rngs=rngs)
        self.attn = nnx.MultiHeadAttention(
            num_heads=HEADS, in_features=D, use_bias=False, decode=False, rngs=rngs,
            kernel_init=part(INIT, ("embed", "heads", "kv")),
            out_kernel_init=part(INIT, ("heads", "kv", "embed")))
        self.norm2 = nnx.RMSNorm(D, scale_init=part(nnx.initializers.ones, ("embed",)), rngs=rngs)
        self.up = nnx.Linear(D, FFN, use_bias=False, kernel_init=part(INIT, ("embed", "mlp")),
                             rngs=rngs)
        self.down = nnx.Linear(FFN, D, use_bias=False, kernel_init=part(INIT, ("mlp", "embed")),
                               rngs=rngs)

    def __call__(self, x):
        mask = nnx.make_causal_mask(jnp.ones(x.shape[:2]))
        x = x + self.attn(self.norm1(x), mask=mask)
        return x + self.down(nnx.silu(self.up(self.norm2(x))))


class LM(nnx.Module):
    def __init__(self, ax, rngs):
        part = lambda init, names: nnx.with_partitioning(init, tuple(ax.get(n) for n in names))
        self.embed = nnx.Embed(VOCAB, D, embedding_init=part(INIT, ("vocab", "embed")), rngs=rngs)
        self.layers = nnx.List([Block(ax, rngs) for _ in range(LAYERS)])
        self.norm = nnx.RMSNorm(D, scale_init=part(nnx.initializers.ones, ("embed",)), rngs=rngs)
        self.head = nnx.Linear(D, VOCAB, use_bias=False, kernel_init=part(INIT, ("embed", "vocab")),
                               rngs=rngs)

    def __call__(self, tokens):
        x = self.embed(tokens)
        for layer in self.layers:
            x = layer(x)
        return self.head(self.norm(x))


TX = optax.adamw(1e-3, weight_decay=0.1)

# logical dimension -> mesh axis, per parallelism; "batch" shards the data
AXES = {
    "dp": {"batch": "data"},
    "fsdp": {"batch": "fsdp", "embed": "fsdp"},
    "tp": {"heads": "model", "mlp": "model", "vocab": "model"},
    "dpxtp": {"batch": "data", "heads": "model", "mlp": "model", "vocab": "model"},
}
MESHES = {"dp": {"data": 8}, "fsdp": {"fsdp": 8}, "tp": {"model": 4},
          "dpxtp": {"data": 2, "model": 4}}


def build(ax, train, mesh):
    """NNX shards annotated variables as it creates them (eager sharding), under the
    mesh in context."""
    with jax.set_mesh(mesh):
        model = LM(ax, nnx.Rngs(0))
        if train:
            return nnx.split((model, nnx.Optimizer(model, TX, wrt=nnx.Param)))
        return nnx.split(model)


def inputs(ax, mesh_axes, train):
    _, state = build(ax, train, mesh_of(mesh_axes, unit=True))
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, VOCAB, (BATCH, SEQ), dtype=np.int32)
    state = jax.tree.map(np.asarray, state)
    if not train:
        return (state, tokens)
    return (state, tokens, rng.integers(0, VOCAB, (BATCH, SEQ), dtype=np.int32))


def maker(ax, train):
    def make(mesh):
        graphdef, state = build(ax, train, mesh)
        named = lambda spec: NamedSharding(mesh, spec)
        st_sh = jax.tree.map(named, nnx.get_partition_spec(state),
                             is_leaf=lambda x: isinstance(x, P))
        data_sh = named(P(ax.get("batch"), None))

        def forward(state, tokens):
            return nnx.merge(graphdef, state)(tokens)

        def train_step(state, tokens, targets):
            model, opt = nnx.merge(graphdef, state)

            def loss_fn(model):
                logits = model(tokens)
                return optax.softmax_cross_entropy_with_integer_labels(logits, targets).mean()
            loss, grads = nnx.value_and_grad(loss_fn)(model)
            opt.update(model, grads)
            return nnx.state((model, opt)), loss

        if train:
            return train_step, (st_sh, data_sh, data_sh), (st_sh, named(P())), contextlib.nullcontext
        return forward, (st_sh, data_sh), named(P(ax.get("batch"), None, ax.get("vocab"))), \
            contextlib.nullcontext
    return make


def programs():
    out = []
    for par in ("dp", "fsdp", "tp", "dpxtp"):
        mesh, ax = MESHES[par], AXES[par]
        tag = "x".join(f"{a}{n}" for a, n in mesh.items())
        for train in (False, True):
            name = f"nnx.lm.{'train' if train else 'fwd'}.{par}.{tag}"
            out.append(Prog(name, LIB, mesh, functools.partial(inputs, ax, mesh, train),
                            maker(ax, train)))
    return out


PROGRAMS = programs()
