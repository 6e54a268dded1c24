"""Exports samples/bigtrain/: one full-size training step of a Llama-3.1-405B-shaped
decoder written with Flax Linen (forward, loss, jax.grad, optax AdamW update), every
parameter under nn.with_logical_partitioning, activations under
nn.with_logical_constraint, sharded FSDP x TP by logical axis rules on a 64-device
CPU mesh (fsdp 8 x tensor 8), every layer unrolled.

No weights exist and nothing runs: the step is lowered from jax.ShapeDtypeStruct
inputs and compiled only to dump the module after the spmd-partitioning pass.
Conventions are those of wild.py (files gzipped without name or mtime over 200 KB,
manifest entries of kind gspmd with relations auto).

Run from the repository root through samples/gen/run_bigtrain.sh:

    bigtrain.py [--layers N]     (default: 126, the full depth)
"""
import functools
import importlib.metadata
import json
import os
import shutil
import sys
import time

assert "--xla_force_host_platform_device_count=64" in os.environ.get("XLA_FLAGS", ""), \
    "run through samples/gen/run_bigtrain.sh (XLA_FLAGS must be set before jax is imported)"

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import NamedSharding, PartitionSpec as P

jax.config.update("jax_enable_compilation_cache", False)

GEN = "samples/gen"
sys.path.insert(0, GEN)
import dumpfiles  # noqa: E402  (samples/gen/dumpfiles.py)
OUT = "samples/bigtrain"
from scalify_jax import after_partitioning, before_partitioning, make_mesh  # noqa: E402

ARGS = sys.argv[1:]
LAYERS = int(ARGS[ARGS.index("--layers") + 1]) if "--layers" in ARGS else 126

# Llama-3.1 405B: model width, query heads, key/value heads, head width, MLP width,
# vocabulary, RoPE base; one global batch of 8 sequences of 2048 tokens.
D, HEADS, KV_HEADS, HEAD_DIM, FFN, VOCAB, THETA = 16384, 128, 8, 128, 53248, 128256, 500000.0
BATCH, SEQ = 8, 2048
PARAM_DTYPE, DTYPE = jnp.float32, jnp.bfloat16

wlp = nn.with_logical_partitioning
INIT = nn.initializers.normal(0.02)
MESH = [None]
MESH_AXES = {"fsdp": 8, "tensor": 8}
RULES = [("batch", "fsdp"), ("heads", "tensor"), ("kv_heads", "tensor"), ("mlp", "tensor"),
         ("vocab", "tensor"), ("embed", "fsdp")]
TX = optax.adamw(1e-4, b1=0.9, b2=0.95, weight_decay=0.1)


def constrain(x, names):
    return nn.with_logical_constraint(x, names, mesh=MESH[0])


def rope(x, positions):
    """Rotary position embedding on the last axis (halves rotated)."""
    half = HEAD_DIM // 2
    freq = 1.0 / (THETA ** (jnp.arange(half, dtype=jnp.float32) / half))
    ang = positions[:, :, None, None].astype(jnp.float32) * freq
    sin, cos = jnp.sin(ang), jnp.cos(ang)
    a, b = x[..., :half].astype(jnp.float32), x[..., half:].astype(jnp.float32)
    return jnp.concatenate([a * cos - b * sin, b * cos + a * sin], axis=-1).astype(x.dtype)


def norm():
    return nn.RMSNorm(epsilon=1e-5, dtype=DTYPE, param_dtype=PARAM_DTYPE,
                      scale_init=wlp(nn.initializers.ones, ("embed",)))


class Attention(nn.Module):
    @nn.compact
    def __call__(self, x, positions):
        dense = functools.partial(nn.DenseGeneral, use_bias=False, dtype=DTYPE, param_dtype=PARAM_DTYPE)
        q = dense((HEADS, HEAD_DIM), kernel_init=wlp(INIT, ("embed", "heads", "kv")), name="q")(x)
        k = dense((KV_HEADS, HEAD_DIM), kernel_init=wlp(INIT, ("embed", "kv_heads", "kv")), name="k")(x)
        v = dense((KV_HEADS, HEAD_DIM), kernel_init=wlp(INIT, ("embed", "kv_heads", "kv")), name="v")(x)
        q = constrain(rope(q, positions), ("batch", "length", "heads", "kv"))
        k = constrain(rope(k, positions), ("batch", "length", "kv_heads", "kv"))
        v = constrain(v, ("batch", "length", "kv_heads", "kv"))
        # grouped-query attention: each key/value head serves HEADS // KV_HEADS queries
        b, s = x.shape[:2]
        q = q.reshape(b, s, KV_HEADS, HEADS // KV_HEADS, HEAD_DIM)
        scores = jnp.einsum("bqhgd,bkhd->bhgqk", q, k).astype(jnp.float32) / np.sqrt(HEAD_DIM)
        causal = jnp.tril(jnp.ones((s, s), dtype=bool))
        scores = jnp.where(causal, scores, jnp.finfo(jnp.float32).min)
        probs = jax.nn.softmax(scores, axis=-1).astype(DTYPE)
        out = jnp.einsum("bhgqk,bkhd->bqhgd", probs, v).reshape(b, s, HEADS, HEAD_DIM)
        out = constrain(out, ("batch", "length", "heads", "kv"))
        return dense(D, axis=(-2, -1), kernel_init=wlp(INIT, ("heads", "kv", "embed")), name="o")(out)


class Block(nn.Module):
    @nn.compact
    def __call__(self, x, positions):
        x = constrain(x, ("batch", "length", "embed"))
        h = Attention(name="attn")(norm()(x), positions)
        x = x + constrain(h, ("batch", "length", "embed"))
        h = norm()(x)
        dense = functools.partial(nn.Dense, use_bias=False, dtype=DTYPE, param_dtype=PARAM_DTYPE)
        gate = dense(FFN, kernel_init=wlp(INIT, ("embed", "mlp")), name="gate")(h)
        up = dense(FFN, kernel_init=wlp(INIT, ("embed", "mlp")), name="up")(h)
        h = constrain(nn.silu(gate) * up, ("batch", "length", "mlp"))
        h = dense(D, kernel_init=wlp(INIT, ("mlp", "embed")), name="down")(h)
        return x + constrain(h, ("batch", "length", "embed"))


class Llama(nn.Module):
    @nn.compact
    def __call__(self, tokens):
        positions = jnp.broadcast_to(jnp.arange(tokens.shape[1]), tokens.shape)
        x = nn.Embed(VOCAB, D, dtype=DTYPE, param_dtype=PARAM_DTYPE,
                     embedding_init=wlp(INIT, ("vocab", "embed")))(tokens)
        for i in range(LAYERS):
            x = Block(name=f"layer_{i}")(x, positions)
        x = norm()(x)
        logits = nn.Dense(VOCAB, use_bias=False, dtype=DTYPE, param_dtype=PARAM_DTYPE,
                          kernel_init=wlp(INIT, ("embed", "vocab")), name="lm_head")(x)
        return constrain(logits, ("batch", "length", "vocab"))


MODEL = Llama()


def train_step(params, opt, tokens, targets):
    def loss_fn(p):
        logits = MODEL.apply({"params": p}, tokens).astype(jnp.float32)
        return optax.softmax_cross_entropy_with_integer_labels(logits, targets).mean()
    loss, grads = jax.value_and_grad(loss_fn)(params)
    updates, opt = TX.update(grads, opt, params)
    return optax.apply_updates(params, updates), opt, loss


def version(dist):
    return importlib.metadata.version(dist)


def main():
    # Over the first 64 devices in iota order (python/scalify_jax, on the script's path).
    mesh = make_mesh(MESH_AXES)
    tokens = jax.ShapeDtypeStruct((BATCH, SEQ), jnp.int32)

    def init():
        params = MODEL.init(jax.random.key(0), jnp.zeros((BATCH, SEQ), jnp.int32))["params"]
        return params, TX.init(params)

    t0 = time.time()
    boxed = jax.eval_shape(init)
    p_spec, o_spec = nn.get_partition_spec(boxed)
    shard = functools.partial(nn.logical_to_mesh_sharding, mesh=mesh, rules=RULES)
    p_sh, o_sh = shard(p_spec), shard(o_spec)
    data_sh = shard(P("batch", "length"))
    scalar_sh = NamedSharding(mesh, P())
    params, opt = nn.unbox(boxed)
    sds = lambda t, s: jax.tree.map(lambda a, sh: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=sh), t, s)
    args = (sds(params, p_sh), sds(opt, o_sh), jax.ShapeDtypeStruct(tokens.shape, tokens.dtype, sharding=data_sh),
            jax.ShapeDtypeStruct(tokens.shape, tokens.dtype, sharding=data_sh))
    n_params = sum(int(np.prod(a.shape)) for a in jax.tree.leaves(params))
    MESH[0] = mesh
    try:
        with nn.logical_axis_rules(RULES):
            lo = jax.jit(train_step, in_shardings=(p_sh, o_sh, data_sh, data_sh),
                         out_shardings=(p_sh, o_sh, scalar_sh)).lower(*args)
            t1 = time.time()
            # The pair: the module as lowered, and right after the partitioner.
            base_text, base_pb = before_partitioning(lo)
            dist_text, dist_pb = after_partitioning(lo)
            t2 = time.time()
    finally:
        MESH[0] = None
    print(f"{LAYERS} layers, {n_params} parameters: trace+lower {t1 - t0:.1f} s, compile {t2 - t1:.1f} s",
          flush=True)
    name = f"linen.llama3.1-405b.train.fsdpxtp.fsdp8xtensor8.l{LAYERS}"
    shutil.rmtree(os.path.join(OUT, "linen"), ignore_errors=True)
    rel = f"linen/{name}"
    entry = {"name": name, "kind": "gspmd", "config": "linen", "mesh": MESH_AXES,
             "library": {"name": "flax", "version": version("flax")},
             "baseline": {"hlo": dumpfiles.put(OUT, rel + ".baseline.hlo", base_text.encode()),
                          "pb": dumpfiles.put(OUT, rel + ".baseline.hlo.pb", base_pb)},
             "distributed": {"hlo": dumpfiles.put(OUT, rel + ".dist.hlo", dist_text.encode()),
                             "pb": dumpfiles.put(OUT, rel + ".dist.hlo.pb", dist_pb)},
             "relations": "auto", "expected": "verified",
             "note": (f"Llama-3.1-405B shapes ({n_params} parameters at {LAYERS} of 126 layers), "
                      f"float32 parameters and AdamW state, bfloat16 compute; lowered from "
                      f"ShapeDtypeStruct inputs, nothing executed")}
    doc = {"scalify_manifest": 1,
           "generator": {"jax": jax.__version__, "jaxlib": version("jaxlib"), "flax": version("flax"),
                         "optax": version("optax"), "script": "samples/gen/run_bigtrain.sh"},
           "pairs": [entry]}
    with open(os.path.join(OUT, "manifest.json"), "w") as f:
        f.write(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    main()
