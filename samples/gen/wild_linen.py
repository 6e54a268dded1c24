"""Flax Linen decoder-only LM (the lm1b example's pattern) built from Flax's own
modules (Embed, MultiHeadDotProductAttention, LayerNorm, Dense), every parameter
annotated with nn.with_logical_partitioning and activations constrained with
nn.with_logical_constraint; the mesh sharding comes from logical axis rules.
Forward pass and an optax AdamW training step; layers unrolled or under nn.scan."""
import contextlib
import functools

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

LIB = ("flax", version("flax"))
VOCAB, D, HEADS, FFN, LAYERS, BATCH, SEQ = 128, 64, 8, 128, 2, 8, 16

wlp = nn.with_logical_partitioning
INIT = nn.initializers.normal(0.02)
# The mesh is handed to the activation constraints explicitly rather than set
# globally: with a global mesh, Linen's apply-time shape check of DenseGeneral's
# init (the flat 2-D kernel under 3 logical names) trips over its own constraint.
MESH = [None]


def constrain(x, names):
    return nn.with_logical_constraint(x, names, mesh=MESH[0])


class Block(nn.Module):
    @nn.compact
    def __call__(self, x, _=None):
        x = constrain(x, ("batch", "length", "embed"))
        h = nn.LayerNorm(use_bias=False, scale_init=wlp(nn.initializers.ones, ("embed",)))(x)
        mask = nn.make_causal_mask(jnp.ones(x.shape[:2]))
        h = nn.MultiHeadDotProductAttention(
            num_heads=HEADS, use_bias=False, deterministic=True,
            kernel_init=wlp(INIT, ("embed", "heads", "kv")),
            out_kernel_init=wlp(INIT, ("heads", "kv", "embed")))(h, mask=mask)
        x = x + constrain(h, ("batch", "length", "embed"))
        h = nn.LayerNorm(use_bias=False, scale_init=wlp(nn.initializers.ones, ("embed",)))(x)
        h = nn.Dense(FFN, use_bias=False, kernel_init=wlp(INIT, ("embed", "mlp")))(h)
        h = constrain(nn.gelu(h), ("batch", "length", "mlp"))
        h = nn.Dense(D, use_bias=False, kernel_init=wlp(INIT, ("mlp", "embed")))(h)
        x = x + constrain(h, ("batch", "length", "embed"))
        return x, None


class LM(nn.Module):
    scan: bool = False

    @nn.compact
    def __call__(self, tokens):
        x = nn.Embed(VOCAB, D, embedding_init=wlp(INIT, ("vocab", "embed")))(tokens)
        if self.scan:
            layers = nn.scan(Block, variable_axes={"params": 0}, split_rngs={"params": True},
                             length=LAYERS, metadata_params={nn.PARTITION_NAME: "layers"})
            x, _ = layers(name="layers")(x, None)
        else:
            for i in range(LAYERS):
                x, _ = Block(name=f"layer_{i}")(x)
        x = nn.LayerNorm(use_bias=False, scale_init=wlp(nn.initializers.ones, ("embed",)))(x)
        logits = nn.Dense(VOCAB, use_bias=False, kernel_init=wlp(INIT, ("embed", "vocab")))(x)
        return constrain(logits, ("batch", "length", "vocab"))


TX = optax.adamw(1e-3, weight_decay=0.1)

# logical axis -> mesh axis, per parallelism (rules are in priority order)
RULES = {
    "dp": [("batch", "data")],
    "fsdp": [("batch", "fsdp"), ("embed", "fsdp")],
    "tp": [("heads", "tensor"), ("mlp", "tensor"), ("vocab", "tensor")],
    "dpxtp": [("batch", "data"), ("heads", "tensor"), ("mlp", "tensor"), ("vocab", "tensor")],
    "fsdpxtp": [("batch", "fsdp"), ("heads", "tensor"), ("mlp", "tensor"),
                ("vocab", "tensor"), ("embed", "fsdp")],
    # Megatron sequence parallelism: the residual stream is split on the sequence
    # between blocks, heads / mlp / vocab on the same axis inside them
    "tpsp": [("heads", "tensor"), ("mlp", "tensor"), ("vocab", "tensor"),
             ("length", "tensor")],
}
MESHES = {"dp": {"data": 8}, "fsdp": {"fsdp": 8}, "tp": {"tensor": 4},
          "dpxtp": {"data": 2, "tensor": 4}, "fsdpxtp": {"fsdp": 2, "tensor": 4},
          "tpsp": {"tensor": 4}}


def boxed_state(model):
    """Abstract (params, adamw state) with their Partitioned boxes."""
    def init():
        params = model.init(jax.random.key(0), jnp.zeros((BATCH, SEQ), jnp.int32))["params"]
        return params, TX.init(params)
    return jax.eval_shape(init)


def inputs(model, train):
    params = nn.unbox(jax.jit(lambda: model.init(jax.random.key(0),
                                                  jnp.zeros((BATCH, SEQ), jnp.int32)))()["params"])
    params = jax.tree.map(np.asarray, params)
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, VOCAB, (BATCH, SEQ), dtype=np.int32)
    if not train:
        return (params, tokens)
    opt = jax.tree.map(np.asarray, TX.init(params))
    targets = rng.integers(0, VOCAB, (BATCH, SEQ), dtype=np.int32)
    return (params, opt, tokens, targets)


def maker(model, rules, train):
    def make(mesh):
        params_spec, opt_spec = nn.get_partition_spec(boxed_state(model))
        shard = functools.partial(nn.logical_to_mesh_sharding, mesh=mesh, rules=rules)
        p_sh, o_sh = shard(params_spec), shard(opt_spec)
        data_sh = shard(jax.sharding.PartitionSpec("batch", "length"))
        logits_sh = shard(jax.sharding.PartitionSpec("batch", "length", "vocab"))
        scalar_sh = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())

        @contextlib.contextmanager
        def ctx():
            MESH[0] = mesh
            try:
                with nn.logical_axis_rules(rules):
                    yield
            finally:
                MESH[0] = None

        def forward(params, tokens):
            return model.apply({"params": params}, tokens)

        def train_step(params, opt, tokens, targets):
            def loss_fn(p):
                logits = model.apply({"params": p}, tokens)
                return optax.softmax_cross_entropy_with_integer_labels(logits, targets).mean()
            loss, grads = jax.value_and_grad(loss_fn)(params)
            updates, opt = TX.update(grads, opt, params)
            return optax.apply_updates(params, updates), opt, loss

        if train:
            return (train_step, (p_sh, o_sh, data_sh, data_sh), (p_sh, o_sh, scalar_sh), ctx)
        return forward, (p_sh, data_sh), logits_sh, ctx
    return make


def programs():
    out = []
    variants = [("dp", False), ("fsdp", False), ("tp", False), ("dpxtp", False),
                ("fsdpxtp", False), ("tpsp", False), ("tp", True), ("dpxtp", True)]
    for par, scan in variants:
        model = LM(scan=scan)
        mesh = MESHES[par]
        tag = "x".join(f"{a}{n}" for a, n in mesh.items())
        for train in (False, True):
            name = f"linen.lm{'-scan' if scan else ''}.{'train' if train else 'fwd'}.{par}.{tag}"
            out.append(Prog(name, LIB, mesh, functools.partial(inputs, model, train),
                            maker(model, RULES[par], train)))
    return out


PROGRAMS = programs()
