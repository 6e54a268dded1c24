"""Equinox decoder-only LM from Equinox's own modules (eqx.nn.Embedding,
MultiheadAttention, RMSNorm, Linear), vmapped over the batch; the arrays of the
model pytree are sharded by path (Megatron column/row split of the attention and
MLP projections, vocabulary-split embedding and head), activations constrained with
eqx.filter_shard. Forward pass and an optax adamw step on eqx.filter_value_and_grad;
layers unrolled or (scan) stacked with eqx.filter_vmap and run under jax.lax.scan."""
import contextlib
import functools

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import NamedSharding, PartitionSpec as P

LIB = ("equinox", version("equinox"))
VOCAB, D, HEADS, FFN, LAYERS, BATCH, SEQ = 128, 64, 8, 128, 2, 8, 16
TX = optax.adamw(1e-3, weight_decay=0.1)


class Block(eqx.Module):
    norm1: eqx.nn.RMSNorm
    attn: eqx.nn.MultiheadAttention
    norm2: eqx.nn.RMSNorm
    up: eqx.nn.Linear
    down: eqx.nn.Linear

    def __init__(self, key):
        k1, k2, k3 = jax.random.split(key, 3)
        self.norm1 = eqx.nn.RMSNorm(D)
        self.attn = eqx.nn.MultiheadAttention(HEADS, D, use_query_bias=False, use_key_bias=False,
                                              use_value_bias=False, use_output_bias=False, key=k1)
        self.norm2 = eqx.nn.RMSNorm(D)
        self.up = eqx.nn.Linear(D, FFN, use_bias=False, key=k2)
        self.down = eqx.nn.Linear(FFN, D, use_bias=False, key=k3)

    def __call__(self, x):
        h = jax.vmap(self.norm1)(x)
        mask = jnp.tril(jnp.ones((x.shape[0], x.shape[0]), bool))
        x = x + self.attn(h, h, h, mask=mask)
        h = jax.vmap(self.norm2)(x)
        return x + jax.vmap(self.down)(jax.nn.gelu(jax.vmap(self.up)(h)))


class LM(eqx.Module):
    embed: eqx.nn.Embedding
    layers: object  # a list of Block, or one Block of stacked arrays (scan)
    norm: eqx.nn.RMSNorm
    head: eqx.nn.Linear
    scan: bool = eqx.field(static=True)

    def __init__(self, key, scan=False):
        ke, kl, kh = jax.random.split(key, 3)
        self.embed = eqx.nn.Embedding(VOCAB, D, key=ke)
        keys = jax.random.split(kl, LAYERS)
        self.layers = eqx.filter_vmap(Block)(keys) if scan else [Block(k) for k in keys]
        self.norm = eqx.nn.RMSNorm(D)
        self.head = eqx.nn.Linear(D, VOCAB, use_bias=False, key=kh)
        self.scan = scan

    def __call__(self, tokens):
        """tokens [seq] -> logits [seq, vocab] (one example)."""
        x = jax.vmap(self.embed)(tokens)
        if self.scan:
            dyn, static = eqx.partition(self.layers, eqx.is_array)

            def body(x, layer):
                return eqx.combine(layer, static)(x), None
            x, _ = jax.lax.scan(body, x, dyn)
        else:
            for layer in self.layers:
                x = layer(x)
        return jax.vmap(self.head)(jax.vmap(self.norm)(x))


def param_spec(path, leaf, tp):
    """Megatron split by the leaf's place in the model (weights are [out, in]; a
    stacked layer has one more leading dimension)."""
    names = [getattr(k, "name", None) for k in path]
    lead = (None,) if leaf.ndim == 3 else ()
    if tp is None or leaf.ndim < 2:
        return P()
    if "embed" in names:
        return P(tp, None)
    if "head" in names or "up" in names:
        return P(*lead, tp, None)
    if any(n in names for n in ("query_proj", "key_proj", "value_proj")):
        return P(*lead, tp, None)
    if "output_proj" in names or "down" in names:
        return P(*lead, None, tp)
    return P()


def split_model(scan):
    model = LM(jax.random.key(0), scan)
    return eqx.partition(model, eqx.is_array)


def inputs(scan, train):
    params, _ = split_model(scan)
    params = jax.tree.map(np.asarray, params)
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, VOCAB, (BATCH, SEQ), dtype=np.int32)
    if not train:
        return (params, tokens)
    opt = jax.tree.map(np.asarray, TX.init(params))
    return (params, opt, tokens, rng.integers(0, VOCAB, (BATCH, SEQ), dtype=np.int32))


def maker(scan, dp, tp, train):
    def make(mesh):
        params, static = split_model(scan)
        named = lambda spec: NamedSharding(mesh, spec)
        p_sh = jax.tree_util.tree_map_with_path(lambda pa, l: named(param_spec(pa, l, tp)), params)
        data_sh = named(P(dp, None))
        logits_sh = named(P(dp, None, tp))

        def logits_of(params, tokens):
            model = eqx.combine(params, static)
            tokens = eqx.filter_shard(tokens, data_sh)
            return eqx.filter_shard(jax.vmap(model)(tokens), logits_sh)

        def train_step(params, opt, tokens, targets):
            @eqx.filter_value_and_grad
            def loss_fn(params):
                logits = logits_of(params, tokens)
                return optax.softmax_cross_entropy_with_integer_labels(logits, targets).mean()
            loss, grads = loss_fn(params)
            updates, opt = TX.update(grads, opt, params)
            return eqx.apply_updates(params, updates), opt, loss

        if not train:
            return logits_of, (p_sh, data_sh), logits_sh, contextlib.nullcontext
        opt_abs = jax.eval_shape(TX.init, params)
        # adam's mu and nu mirror the parameter pytree: same shardings; count replicated
        o_sh = _mirror(opt_abs, params, p_sh, named(P()))
        return (train_step, (p_sh, o_sh, data_sh, data_sh), (p_sh, o_sh, named(P())),
                contextlib.nullcontext)
    return make


def _mirror(opt_tree, params, p_sh, scalar_sh):
    """Shardings for an optax state: a sub-tree shaped like the parameters takes the
    parameters' shardings, any other leaf is replicated."""
    pdef = jax.tree.structure(params)

    def walk(node):
        if jax.tree.structure(node) == pdef:
            return p_sh
        if isinstance(node, tuple) and hasattr(node, "_fields"):
            return type(node)(*[walk(c) for c in node])
        if isinstance(node, (tuple, list)):
            return type(node)(walk(c) for c in node)
        return scalar_sh
    return walk(opt_tree)


def programs():
    out = []
    variants = [("dp", {"data": 8}, "data", None, False),
                ("tp", {"model": 4}, None, "model", False),
                ("dpxtp", {"data": 2, "model": 4}, "data", "model", False),
                ("tp", {"model": 4}, None, "model", True)]
    for par, mesh, dp, tp, scan in variants:
        tag = "x".join(f"{a}{n}" for a, n in mesh.items())
        for train in (False, True):
            name = f"eqx.lm{'-scan' if scan else ''}.{'train' if train else 'fwd'}.{par}.{tag}"
            out.append(Prog(name, LIB, mesh, functools.partial(inputs, scan, train),
                            maker(scan, dp, tp, train)))
    return out


PROGRAMS = programs()
