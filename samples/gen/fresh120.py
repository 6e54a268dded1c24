"""samples/fresh120: a 120th batch of programs as a user writes them, on the theme of the silent parallelisation bugs that degrade real training runs, each inside a realistic transformer training step (forward, loss, jax.grad / value_and_grad, an optax update) written with jax.shard_map in several styles, none of them an idiom of samples/fresh .. fresh26, probe, train or wild.
Styles: einsum vs `@` vs lax.dot_general; hand-written flax.linen-like module
classes on local shards (flax itself is not in the pinned venv); lax.scan
over stacked layers vs unrolled layers; bf16 compute with f32 master
weights and dynamic loss scaling; per-device autodiff with Megatron's f / g
conjugate operators as jax.custom_vjp (check_vma=False) vs autodiff through
the collectives (check_vma=True); optax adamw, adam, sgd (momentum,
Nesterov), chain(clip, adamw). Meshes of 8 CPU devices: dp2 x tp4,
dp2 x sp2 x tp2, fsdp2 x tp4, dp2 x ep2 x tp2, dp4 x tp2, pod2 x dp2 x tp2,
sp4 x tp2, dp2 x sp4, fsdp8.
shard_map families (bugs in brackets):
 1. Megatron decoder training step, dp2 x tp4, 2 unrolled layers with `@`
    on flat (D, H*E) projections, f / g as custom_vjp, the local loss
    summed over local tokens / global tokens, gradients psum'd over dp by
    hand, adamw. [MLP row-parallel output not all-reduced; the norm gains'
    gradients left unreduced over dp (one parameter group only); heads
    split / merged as (E, H) instead of (H, E) on the local columns].
 2. Ulysses sequence parallelism inside tensor parallelism, dp2 x sp2 x tp2,
    LayerNorm decoder layer with lax.dot_general, RoPE at global positions,
    all_to_all over sp seq <-> tp-local heads, gradients psum'd over
    (dp, sp), adam. [all_to_all over tp instead of sp; RoPE offset from the
    dp index instead of the sp index; LayerNorm parameters' gradients
    psum'd over dp only, not over sp].
 3. FSDP x TP with lax.scan over stacked layers (check_vma=True): weight
    slices all_gather'd over fsdp inside the scan body, heads over tp,
    row-parallel psum, padding mask with unequal valid tokens per shard,
    masked mean over the global valid tokens, sgd with Nesterov momentum.
    [FSDP gather along the wrong dimension (untiled gather then reshape:
    rows interleaved); loss as the mean of per-shard token means; heads
    merged (E, H) instead of (H, E)].
 4. top-1 MoE LM layer, dp2 x ep2 x tp2: tokens over (dp, ep), 4 experts
    over ep with their hidden dim over tp, one-hot dispatch with capacity =
    local tokens, all_to_all over ep there and back, expert down
    projection all-reduced over tp, router / replicated leaves psum'd over
    (dp, ep), experts over dp, sgd momentum. [dispatch and return
    all_to_all over dp instead of ep; expert output all-reduced over ep
    instead of tp; router gradient not all-reduced].
 5. module-style model (Dense / LayerNorm / SelfAttention / MLP / Block
    classes with {"params": {...}} kernels and biases, column / row
    kinds), dp4 x tp2, gradients all-reduced hierarchically over dp (psum
    with replica groups {0,1},{2,3} inside the host, then {0,2},{1,3}
    across hosts), chain(clip, adamw). [second stage with the first stage's
    groups; second stage skipped].
 6. bf16 compute with f32 master weights, pod2 x dp2 x tp2, loss scaled by
    2**32 (Megatron-LM's initial loss scale), gradients all-reduced over
    (pod, dp) in f32 then unscaled, the step skipped and the scale halved
    when a gradient is not finite, sgd. [gradients reduced over the dp
    sub-axis only, not across pods; gradient all-reduce through an fp16
    cast (overflows: every step is skipped)].
 7. the bf16 decoder on dp2 x tp4 with Megatron's f written with a
    low-precision backward all-reduce of activation gradients (bf16 in the
    correct version). [the backward all-reduce through an fp16 cast
    (overflow, step skipped); the loss scale not undone for the norm gains
    only].
 8. one decoding step against a KV cache with the sequence over sp4 and
    heads over tp2: new key / value rotated at the global position and
    written by the owning shard at pos - shard * S_local, softmax merged by
    pmax / psum over sp, output psum'd over tp. [written at pos without the
    shard offset (no shard writes it); written at pos % S_local on every
    shard; softmax denominator psum'd over tp instead of sp].
 9. chunked prefill with continuous batching, dp2 x tp4: each row's chunk
    written into the KV cache at the row's start offset, the offsets
    replicated (P()) and sliced at the dp shard's first row, RoPE at
    start + i, causal attention against the cache, output psum'd over tp.
    [offsets sliced at row 0 on every dp shard (the local row index);
    output projection not all-reduced].
10. Megatron sequence parallelism, dp2 x tp4: RMSNorm on the local sequence
    block, all_gather along the sequence before column-parallel
    projections, psum_scatter after row-parallel ones, padding mask, loss
    normalised by the global count of valid tokens, per-device autodiff,
    gains / embedding / head gradients psum'd over (dp, tp), tp weights
    over dp, adamw. [norm gains' gradients not reduced over the sequence
    (tp) axis; sequence all_gather on the feature dim then reshaped
    (tokens interleaved); loss as the mean of per-shard token means].
11. load-balanced ("zigzag") causal context parallelism, dp2 x sp4: rows
    stored as chunks [c0, c7, c1, c6, c2, c5, c3, c4], shard r holding
    chunks r and 7 - r, RoPE at their global positions, keys / values and
    positions all_gather'd over sp, gradients psum'd over (dp, sp), adam.
    [second chunk offset (n + r) instead of (2n - 1 - r); key positions
    taken as contiguous; gradients psum'd over sp only].
12. ZeRO-2 style step on dp4 x tp2: Megatron tensor parallelism as in 1.
    (one layer), gradients reduce-scattered over dp along dim 0, adamw on
    the dp shard of each parameter with the optimizer state sharded over
    dp, updated shards all_gather'd back. [updated shards gathered along a
    new minor dim then reshaped (interleaved); parameter shard sliced at
    offset 0 on every dp rank].
13. tied input / output embeddings with the vocabulary over tp, dp2 x tp4:
    vocab-parallel lookup (masked local rows, Megatron g), logits against
    the local vocab slice, a vocab-parallel cross-entropy as custom_vjp
    (pmax / psum of exp-sums / psum of the target logit; backward
    softmax - one-hot), adamw. [lookup without the vocab offset; target
    logit not all-reduced; exp-sums psum'd over dp instead of tp].
14. gradient accumulation over 2 micro-batches by lax.scan, dp4 x tp2,
    one psum over dp after the scan, plain SGD. [an extra psum over dp in
    every micro-batch; the accumulated gradients also pmean'd over tp].
15. the decoder of 1. with check_vma=True and autodiff through the
    collectives, dp2 x tp4: the row-parallel all-reduce as a reduce-scatter
    along the sequence then an all_gather along it, the loss pmean'd over
    tp and dp, SGD. [the all_gather on a new minor dim then reshaped; the
    loss psum'd over dp instead of pmean'd].
16. gradients all-reduced over dp4 by a hand-written ring (dp4 x tp2):
    ravel_pytree, 4 chunks, a reduce-scatter ring of 3 ppermute steps and
    an all-gather ring of 3, adam. [reduce-scatter ring one step short;
    all-gather ring writing the received chunk one slot off].
17. sliding-window decoding against a ring-buffer KV cache of 16 slots
    over sp4 (batch over dp2), step k after a 16-token prompt: the new
    key / value written by the owner of slot pos % W, slot positions
    pos - ((pos - slot) mod W), softmax merged by pmax / psum over sp.
    [owner from the unwrapped position pos // S_local (nobody writes once
    pos >= W); the softmax maximum not pmax'd].
18. ZeRO-3 / pure FSDP over fsdp8 with check_vma=True: every leaf sharded
    on dim 0, all_gather'd where used in two unrolled layers (jnp.dot),
    gradients reduce-scattered by autodiff, loss pmean'd, sgd momentum.
    [the output projection gathered along a new minor dim then reshaped;
    the loss psum'd instead of pmean'd].
GSPMD pairs (correct only): the baseline steps of 18. and of 1., 2., 3., 4. (dense
experts), 5., 6., 8., 9., 10., 11., 12. and 13. under jax.jit with NamedSharding'd
parameters, optimizer states and batches.
Numerics: f32 correct pairs agree with their baselines within 1e-6; the
bf16 ones (6., 7.) within 5e-5 (rounding of bf16 activations); every bug
differs clearly (see "numerics"), the fp16 ones by the skipped step
(parameters unchanged, loss scale halved).
Exported with scalify_jax.export_pair; every pair is also run by JAX on
seeded inputs and its manifest entry records the largest difference from
the single-device run ("numerics").
Run from the repository root: bash samples/gen/run_fresh120.sh [SUBSTR...]
(only the pairs whose name contains a SUBSTR; the others keep their entries).
"""
import sys
import numpy as np
import jax, jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec as P
import optax
sys.path.insert(0, "samples/gen")  # run from the repository root (run_fresh120.sh)
from fresh_lib import Corpus, seeded, state_specs  # noqa: E402

SCRIPT = "samples/gen/fresh120.py"
C = Corpus("samples/fresh120", SCRIPT, "samples/gen/run_fresh120.sh", sys.argv[1:])
rng, R, I = seeded(120120)
psum, pmean, pmax, idx = lax.psum, lax.pmean, lax.pmax, lax.axis_index
NEG = -1e30
f32, bf16, f16 = jnp.float32, jnp.bfloat16, jnp.float16


def ident(x):
    return x


def rms(x, g, eps=1e-6):
    x32 = x.astype(f32)
    y = x32 * lax.rsqrt(jnp.mean(jnp.square(x32), -1, keepdims=True) + eps)
    return (y * g.astype(f32)).astype(x.dtype)


def layernorm(x, g, b, eps=1e-5):
    mu = jnp.mean(x, -1, keepdims=True)
    var = jnp.mean(jnp.square(x - mu), -1, keepdims=True)
    return (x - mu) * lax.rsqrt(var + eps) * g + b


def rope(x, pos, base=10000.0):
    """rotate-half RoPE on x (b, t, h, e) at positions pos (t,) or (b, t)."""
    e = x.shape[-1]
    inv = 1.0 / (base ** (np.arange(0, e, 2, dtype=np.float32) / e))
    ang = jnp.asarray(pos, f32)[..., None] * inv
    if ang.ndim == 2:
        ang = ang[None]
    cos, sin = jnp.cos(ang)[:, :, None].astype(x.dtype), jnp.sin(ang)[:, :, None].astype(x.dtype)
    x1, x2 = x[..., :e // 2], x[..., e // 2:]
    return jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1)


def attend(q, k, v, qpos, kpos):
    """causal attention, q (b, tq, h, e), k / v (b, tk, h, e), masks from positions."""
    s = jnp.einsum("bqhe,bkhe->bhqk", q, k, preferred_element_type=f32) / np.sqrt(q.shape[-1])
    s = jnp.where(qpos[:, None] >= kpos[None, :], s, NEG)
    return jnp.einsum("bhqk,bkhe->bqhe", jax.nn.softmax(s, -1).astype(v.dtype), v)


def split_heads(y, e, order="he"):
    b, t, n = y.shape
    if order == "he":
        return y.reshape(b, t, n // e, e)
    return y.reshape(b, t, e, n // e).swapaxes(2, 3)


def merge_heads(o, order="he"):
    b, t, h, e = o.shape
    if order == "he":
        return o.reshape(b, t, h * e)
    return o.swapaxes(2, 3).reshape(b, t, h * e)


def ce(logits, tgt):
    return optax.softmax_cross_entropy_with_integer_labels(logits.astype(f32), tgt)


def megatron_ops(axis):
    """Megatron's conjugate f (identity forward, all-reduce backward) and g
    (all-reduce forward, identity backward) operators, per-device autodiff."""
    @jax.custom_vjp
    def f_copy(x):
        return x
    f_copy.defvjp(lambda x: (x, None), lambda _, ct: (psum(ct, axis),))

    @jax.custom_vjp
    def g_reduce(x):
        return psum(x, axis)
    g_reduce.defvjp(lambda x: (psum(x, axis), None), lambda _, ct: (ct,))
    return f_copy, g_reduce


def keyed(path):
    return [getattr(k, "key", getattr(k, "idx", None)) for k in path]


# ---------------------------------------------------------------------------
# 1. Megatron training step, dp2 x tp4, two unrolled decoder layers written
#    with `@` on flat (D, H*E) projections, the conjugate f / g operators as
#    custom_vjp, per-device jax.value_and_grad of the local loss (sum over
#    local tokens / global tokens), gradients psum'd over dp by hand, adamw.
D1, H1, E1, F1, V1, T1, B1 = 32, 8, 4, 64, 16, 8, 4


def init_decoder(D, H, E, F, V, nl, dt=np.float32):
    def layer():
        return {"g1": 1.0 + R(D, scale=0.1), "wq": R(D, H * E, scale=0.2), "wk": R(D, H * E, scale=0.2),
                "wv": R(D, H * E, scale=0.2), "wo": R(H * E, D, scale=0.2), "g2": 1.0 + R(D, scale=0.1),
                "w1": R(D, F, scale=0.2), "w2": R(F, D, scale=0.2)}
    p = {"emb": R(V, D, scale=0.5), "gf": 1.0 + R(D, scale=0.1), "wout": R(D, V, scale=0.2),
         "layers": {"l%d" % i: layer() for i in range(nl)}}
    return jax.tree.map(lambda a: a.astype(dt), p)


def decoder(p, tok, E, f=ident, g=ident, order="he", g_mlp=None):
    x = p["emb"][tok]
    pos = jnp.arange(tok.shape[1])
    for L in p["layers"].values():
        h = f(rms(x, L["g1"]))
        q, k, v = (split_heads(h @ L[n], E, order) for n in ("wq", "wk", "wv"))
        o = attend(rope(q, pos), rope(k, pos), v, pos, pos)
        x = x + g(merge_heads(o, order) @ L["wo"])
        h = f(rms(x, L["g2"]))
        x = x + (g_mlp or g)(jax.nn.gelu(h @ L["w1"]) @ L["w2"])
    return rms(x, p["gf"]) @ p["wout"]


OPT1 = optax.adamw(3e-3, weight_decay=0.05)
TP_LAYER = {"g1": P(), "wq": P(None, "tp"), "wk": P(None, "tp"), "wv": P(None, "tp"), "wo": P("tp", None),
            "g2": P(), "w1": P(None, "tp"), "w2": P("tp", None)}
SPEC1 = {"emb": P(), "gf": P(), "wout": P(), "layers": {"l0": TP_LAYER, "l1": TP_LAYER}}


def step1(p, s, tok):
    def loss(p):
        return jnp.mean(ce(decoder(p, tok[:, :-1], E1), tok[:, 1:]))
    l, g = jax.value_and_grad(loss)(p)
    u, s = OPT1.update(g, s, p)
    return optax.apply_updates(p, u), s, l


def step1_sm(bug):
    def f(p, s, tok):
        fc, gr = megatron_ops("tp")
        order = "eh" if bug == "split-heads-dh" else "he"
        g_mlp = ident if bug == "mlp-row-output-not-reduced" else gr
        ntok = 2 * tok.shape[0] * (tok.shape[1] - 1)

        def loss(p):
            return jnp.sum(ce(decoder(p, tok[:, :-1], E1, fc, gr, order, g_mlp), tok[:, 1:])) / ntok
        l, g = jax.value_and_grad(loss)(p)

        def allreduce(path, x):
            if bug == "gain-grads-not-dp-reduced" and keyed(path)[-1] in ("g1", "g2", "gf"):
                return x
            return psum(x, "dp")
        g = jax.tree_util.tree_map_with_path(allreduce, g)
        u, s = OPT1.update(g, s, p)
        return optax.apply_updates(p, u), s, psum(l, "dp")
    return f


P1 = init_decoder(D1, H1, E1, F1, V1, 2)
S1 = OPT1.init(P1)
SS1 = state_specs(S1, SPEC1)
TOK1 = I(0, V1, B1, T1 + 1)
C.smap("s.megatron_customvjp_step_adamw.dp2xtp4", {"dp": 2, "tp": 4}, step1_sm, (SPEC1, SS1, P("dp")),
       (SPEC1, SS1, P()), step1, (P1, S1, TOK1),
       bugs=[("mlp-row-output-not-reduced", ["missing-all-reduce"]), ("gain-grads-not-dp-reduced", ["missing-all-reduce"]),
             ("split-heads-dh", ["wrong-layout"])])

# ---------------------------------------------------------------------------
# 2. Ulysses sequence parallelism inside tensor parallelism, dp2 x sp2 x tp2,
#    one LayerNorm (with bias) decoder layer written with lax.dot_general:
#    heads column-parallel over tp, the sequence over sp; RoPE at global
#    positions (sp offset), all_to_all over sp trading the sequence for the
#    tp-local heads and back, row-parallel outputs by Megatron's g; the
#    gradients of every (sp- and dp-replicated) parameter psum'd over
#    (dp, sp) by hand; optax.adam.
D2, H2, E2, F2, V2, T2, B2 = 32, 8, 4, 64, 16, 8, 4


def dg(a, w):
    return lax.dot_general(a, w, (((a.ndim - 1,), (0,)), ((), ())))


def init_ln_layer(D, H, E, F, V):
    return {"emb": R(V, D, scale=0.5), "ln1": {"g": 1.0 + R(D, scale=0.1), "b": R(D, scale=0.1)},
            "wq": R(D, H * E, scale=0.2), "wk": R(D, H * E, scale=0.2), "wv": R(D, H * E, scale=0.2),
            "wo": R(H * E, D, scale=0.2), "ln2": {"g": 1.0 + R(D, scale=0.1), "b": R(D, scale=0.1)},
            "w1": R(D, F, scale=0.2), "w2": R(F, D, scale=0.2),
            "lnf": {"g": 1.0 + R(D, scale=0.1), "b": R(D, scale=0.1)}, "wout": R(D, V, scale=0.2)}


def ln_layer(p, tok, E, pos=None, f=ident, g=ident, mix=None, full_pos=None):
    """mix: the attention core on rotated q, k and v (b, t, h, e)."""
    x = p["emb"][tok]
    pos = jnp.arange(tok.shape[1]) if pos is None else pos
    h = f(layernorm(x, p["ln1"]["g"], p["ln1"]["b"]))
    q, k, v = (split_heads(dg(h, p[n]), E) for n in ("wq", "wk", "wv"))
    q, k = rope(q, pos), rope(k, pos)
    o = mix(q, k, v) if mix else attend(q, k, v, pos, pos)
    x = x + g(dg(merge_heads(o), p["wo"]))
    h = f(layernorm(x, p["ln2"]["g"], p["ln2"]["b"]))
    x = x + g(dg(jax.nn.gelu(dg(h, p["w1"])), p["w2"]))
    return dg(layernorm(x, p["lnf"]["g"], p["lnf"]["b"]), p["wout"])


OPT2 = optax.adam(2e-3)
SPEC2 = {"emb": P(), "ln1": {"g": P(), "b": P()}, "wq": P(None, "tp"), "wk": P(None, "tp"), "wv": P(None, "tp"),
         "wo": P("tp", None), "ln2": {"g": P(), "b": P()}, "w1": P(None, "tp"), "w2": P("tp", None),
         "lnf": {"g": P(), "b": P()}, "wout": P()}


def step2(p, s, inp, tgt):
    l, g = jax.value_and_grad(lambda p: jnp.mean(ce(ln_layer(p, inp, E2), tgt)))(p)
    u, s = OPT2.update(g, s, p)
    return optax.apply_updates(p, u), s, l


def step2_sm(bug):
    def f(p, s, inp, tgt):
        fc, gr = megatron_ops("tp")
        ax = "tp" if bug == "ulysses-a2a-over-tp" else "sp"
        tl = inp.shape[1]
        shard = idx("dp") if bug == "rope-offset-from-dp-index" else idx("sp")
        pos = shard * tl + jnp.arange(tl)

        def mix(q, k, v):
            q, k, v = (lax.all_to_all(a, ax, 2, 1, tiled=True) for a in (q, k, v))
            t = jnp.arange(q.shape[1])
            return lax.all_to_all(attend(q, k, v, t, t), ax, 1, 2, tiled=True)
        ntok = B2 * T2

        def loss(p):
            return jnp.sum(ce(ln_layer(p, inp, E2, pos, fc, gr, mix), tgt)) / ntok
        l, g = jax.value_and_grad(loss)(p)

        def allreduce(path, x):
            if bug == "ln-grads-not-reduced-over-sp" and str(keyed(path)[0]).startswith("ln"):
                return psum(x, "dp")
            return psum(x, ("dp", "sp"))
        g = jax.tree_util.tree_map_with_path(allreduce, g)
        u, s = OPT2.update(g, s, p)
        return optax.apply_updates(p, u), s, psum(l, ("dp", "sp"))
    return f


P2 = init_ln_layer(D2, H2, E2, F2, V2)
S2 = OPT2.init(P2)
SS2 = state_specs(S2, SPEC2)
TOK2 = I(0, V2, B2, T2 + 1)
C.smap("s.ulysses_in_tp_step_adam.dp2xsp2xtp2", {"dp": 2, "sp": 2, "tp": 2}, step2_sm,
       (SPEC2, SS2, P("dp", "sp"), P("dp", "sp")), (SPEC2, SS2, P()), step2, (P2, S2, TOK2[:, :-1], TOK2[:, 1:]),
       bugs=[("ulysses-a2a-over-tp", ["wrong-axis"]), ("rope-offset-from-dp-index", ["wrong-offset"]),
             ("ln-grads-not-reduced-over-sp", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 3. FSDP x TP with the layers stacked and run by lax.scan (check_vma=True,
#    autodiff through the collectives): each layer's weight slices
#    all_gather'd over fsdp inside the scan body (so their gradients are
#    reduce-scattered by the transpose), heads over tp with flat (D, H*E)
#    projections split by reshape, row-parallel psum over tp; a padding mask
#    with unequal valid tokens per shard, the loss a masked mean over the
#    global valid tokens (psum / psum over fsdp); optax.sgd with Nesterov
#    momentum.
D3, H3, E3, F3, V3, T3, B3, L3 = 32, 8, 4, 64, 16, 8, 4, 2


def init_stacked(D, H, E, F, V, nl):
    return {"emb": R(V, D, scale=0.5), "gf": 1.0 + R(D, scale=0.1), "wout": R(D, V, scale=0.2),
            "stack": {"g1": 1.0 + R(nl, D, scale=0.1), "wq": R(nl, D, H * E, scale=0.2), "wk": R(nl, D, H * E, scale=0.2),
                      "wv": R(nl, D, H * E, scale=0.2), "wo": R(nl, H * E, D, scale=0.2),
                      "g2": 1.0 + R(nl, D, scale=0.1), "w1": R(nl, D, F, scale=0.2), "w2": R(nl, F, D, scale=0.2)}}


def scan_decoder(p, tok, E, gather=lambda w, a: w, tp_sum=ident, merge="he"):
    pos = jnp.arange(tok.shape[1])

    def layer(x, L):
        h = rms(x, L["g1"])
        q, k, v = (split_heads(jnp.einsum("btd,dn->btn", h, gather(L[n], 0)), E) for n in ("wq", "wk", "wv"))
        o = merge_heads(attend(rope(q, pos), rope(k, pos), v, pos, pos), merge)
        x = x + tp_sum(jnp.einsum("btn,nd->btd", o, gather(L["wo"], 1)))
        h = rms(x, L["g2"])
        f = jax.nn.gelu(jnp.einsum("btd,df->btf", h, gather(L["w1"], 0)))
        return x + tp_sum(jnp.einsum("btf,fd->btd", f, gather(L["w2"], 1))), None
    x, _ = lax.scan(layer, p["emb"][tok], p["stack"])
    return jnp.einsum("btd,dv->btv", rms(x, p["gf"]), p["wout"])


OPT3 = optax.sgd(0.05, momentum=0.9, nesterov=True)
SPEC3 = {"emb": P(), "gf": P(), "wout": P(),
         "stack": {"g1": P(), "wq": P(None, "fsdp", "tp"), "wk": P(None, "fsdp", "tp"), "wv": P(None, "fsdp", "tp"),
                   "wo": P(None, "tp", "fsdp"), "g2": P(), "w1": P(None, "fsdp", "tp"), "w2": P(None, "tp", "fsdp")}}


def step3(p, s, inp, tgt, mask):
    def loss(p):
        return jnp.sum(ce(scan_decoder(p, inp, E3), tgt) * mask) / jnp.sum(mask)
    l, g = jax.value_and_grad(loss)(p)
    u, s = OPT3.update(g, s, p)
    return optax.apply_updates(p, u), s, l


def step3_sm(bug):
    def f(p, s, inp, tgt, mask):
        def gather(w, a):
            if bug == "fsdp-gather-wrong-dim":
                full = lax.all_gather(w, "fsdp", axis=a + 1)  # (.., d, fsdp, ..) merged the wrong way
                return full.reshape(w.shape[:a] + (-1,) + w.shape[a + 1:])
            return lax.all_gather(w, "fsdp", axis=a, tiled=True)

        def loss(p):
            lg = scan_decoder(p, inp, E3, gather, lambda y: psum(y, "tp"),
                              "eh" if bug == "merge-heads-dh" else "he")
            tot = jnp.sum(ce(lg, tgt) * mask)
            if bug == "loss-mean-over-local-tokens":
                return pmean(tot / jnp.sum(mask), "fsdp")
            return psum(tot, "fsdp") / psum(jnp.sum(mask), "fsdp")
        l, g = jax.value_and_grad(loss)(p)
        u, s = OPT3.update(g, s, p)
        return optax.apply_updates(p, u), s, l
    return f


P3 = init_stacked(D3, H3, E3, F3, V3, L3)
S3 = OPT3.init(P3)
SS3 = state_specs(S3, SPEC3)
TOK3 = I(0, V3, B3, T3 + 1)
MASK3 = np.ones((B3, T3), np.float32)
MASK3[0, 5:] = 0.0
MASK3[1, 2:] = 0.0
MASK3[3, 7:] = 0.0  # 7 + 2 valid tokens on fsdp shard 0, 8 + 7 on shard 1
C.smap("s.fsdp_tp_scan_layers_masked_step_sgd.fsdp2xtp4", {"fsdp": 2, "tp": 4}, step3_sm,
       (SPEC3, SS3, P("fsdp"), P("fsdp"), P("fsdp")), (SPEC3, SS3, P()), step3,
       (P3, S3, TOK3[:, :-1], TOK3[:, 1:], MASK3),
       bugs=[("fsdp-gather-wrong-dim", ["wrong-layout"]), ("loss-mean-over-local-tokens", ["wrong-scale"]),
             ("merge-heads-dh", ["wrong-layout"])], check_vma=True)

# ---------------------------------------------------------------------------
# 4. top-1 MoE language-model layer on a dp2 x ep2 x tp2 mesh: tokens over
#    (dp, ep), 4 experts over ep (2 each) with their hidden dim over tp;
#    dispatch with capacity = local tokens (nothing dropped) as a one-hot
#    (expert, token, d) buffer, all_to_all over ep there and back, the
#    expert's down projection all-reduced over tp (Megatron g); per-device
#    autodiff, replicated leaves' gradients psum'd over (dp, ep), the
#    experts' over dp; optax.sgd with momentum.
D4, F4, V4, NE4, T4, B4 = 16, 32, 16, 4, 8, 8


def moe_lm(p, tok, expert_ffn=None):
    x = p["emb"][tok]
    b, t, d = x.shape
    h = rms(x, p["g1"]).reshape(b * t, d)
    gate = jax.nn.softmax(h @ p["router"], -1)
    onehot = jax.nn.one_hot(jnp.argmax(gate, -1), gate.shape[-1])
    if expert_ffn is None:
        y_all = jnp.einsum("enf,efd->end", jax.nn.gelu(jnp.einsum("nd,edf->enf", h, p["w1"])), p["w2"])
    else:
        y_all = expert_ffn(onehot.T[:, :, None] * h[None])
    y = jnp.einsum("ne,end->nd", onehot * gate, y_all)
    x = x + y.reshape(b, t, d)
    return rms(x, p["gf"]) @ p["wout"]


OPT4 = optax.sgd(0.1, momentum=0.9)
SPEC4 = {"emb": P(), "g1": P(), "router": P(), "w1": P("ep", None, "tp"), "w2": P("ep", "tp", None),
         "gf": P(), "wout": P()}


def step4(p, s, inp, tgt):
    l, g = jax.value_and_grad(lambda p: jnp.mean(ce(moe_lm(p, inp), tgt)))(p)
    u, s = OPT4.update(g, s, p)
    return optax.apply_updates(p, u), s, l


def step4_sm(bug):
    def f(p, s, inp, tgt):
        fc, _ = megatron_ops("tp")
        _, gr = megatron_ops("ep" if bug == "expert-output-reduced-over-ep" else "tp")
        ax = "dp" if bug == "dispatch-a2a-over-dp" else "ep"

        def experts(buf):
            buf = lax.all_to_all(buf, ax, 0, 1, tiled=True)  # (local experts, ep * tokens, d)
            hh = jax.nn.gelu(jnp.einsum("end,edf->enf", fc(buf), p_w["w1"]))
            yy = gr(jnp.einsum("enf,efd->end", hh, p_w["w2"]))
            return lax.all_to_all(yy, ax, 1, 0, tiled=True)
        p_w = {}

        def loss(p):
            p_w.update(w1=p["w1"], w2=p["w2"])
            return jnp.sum(ce(moe_lm(p, inp, experts), tgt)) / (B4 * T4)
        l, g = jax.value_and_grad(loss)(p)

        def allreduce(path, x):
            k = keyed(path)[-1]
            if k in ("w1", "w2"):
                return psum(x, "dp")
            if bug == "router-grad-not-reduced" and k == "router":
                return x
            return psum(x, ("dp", "ep"))
        g = jax.tree_util.tree_map_with_path(allreduce, g)
        u, s = OPT4.update(g, s, p)
        return optax.apply_updates(p, u), s, psum(l, ("dp", "ep"))
    return f


P4 = {"emb": R(V4, D4, scale=0.5), "g1": 1.0 + R(D4, scale=0.1), "router": R(D4, NE4, scale=0.5),
      "w1": R(NE4, D4, F4, scale=0.3), "w2": R(NE4, F4, D4, scale=0.3), "gf": 1.0 + R(D4, scale=0.1),
      "wout": R(D4, V4, scale=0.3)}
S4 = OPT4.init(P4)
SS4 = state_specs(S4, SPEC4)
TOK4 = I(0, V4, B4, T4 + 1)
C.smap("s.moe_top1_ep_tp_step_sgdm.dp2xep2xtp2", {"dp": 2, "ep": 2, "tp": 2}, step4_sm,
       (SPEC4, SS4, P(("dp", "ep")), P(("dp", "ep"))), (SPEC4, SS4, P()), step4, (P4, S4, TOK4[:, :-1], TOK4[:, 1:]),
       bugs=[("dispatch-a2a-over-dp", ["wrong-axis"]), ("expert-output-reduced-over-ep", ["wrong-axis"]),
             ("router-grad-not-reduced", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 5. a module-style model (flax.linen-like classes written by hand: Dense /
#    column / row kinds, nested {"params": {...}} with kernels and biases)
#    on dp4 x tp2; per-device autodiff, the gradients all-reduced over dp
#    hierarchically as a multi-host user does it: psum inside the host
#    (replica groups {0,1}, {2,3}) then across hosts ({0,2}, {1,3});
#    optax.chain(clip, adamw).
D5, H5, E5, F5, V5, T5, B5 = 16, 4, 4, 32, 16, 8, 8


class Ops:
    def __init__(self, f=ident, g=ident):
        self.f, self.g = f, g


class Dense:
    def __init__(self, name, kind=None):
        self.name, self.kind = name, kind

    def __call__(self, params, x, ops):
        p = params[self.name]
        if self.kind == "column":
            x = ops.f(x)
        y = jnp.einsum("...i,io->...o", x, p["kernel"])
        if self.kind == "row":
            y = ops.g(y)
        return y + p["bias"] if "bias" in p else y


class LayerNorm:
    def __init__(self, name):
        self.name = name

    def __call__(self, params, x, ops):
        return layernorm(x, params[self.name]["scale"], params[self.name]["bias"])


class SelfAttention:
    def __init__(self, name, head_dim):
        self.name, self.e = name, head_dim
        self.q, self.k, self.v = Dense("query", "column"), Dense("key", "column"), Dense("value", "column")
        self.o = Dense("out", "row")

    def __call__(self, params, x, ops):
        p = params[self.name]
        x = ops.f(x)
        none = Ops()
        q, k, v = (split_heads(m(p, x, none), self.e) for m in (self.q, self.k, self.v))
        pos = jnp.arange(x.shape[1])
        return self.o(p, merge_heads(attend(rope(q, pos), rope(k, pos), v, pos, pos)), ops)


class MLP:
    def __init__(self, name):
        self.name, self.fc1, self.fc2 = name, Dense("fc1", "column"), Dense("fc2", "row")

    def __call__(self, params, x, ops):
        p = params[self.name]
        return self.fc2(p, jax.nn.gelu(self.fc1(p, x, ops)), ops)


class Block:
    def __init__(self, name, head_dim):
        self.name = name
        self.ln0, self.attn, self.ln1, self.mlp = LayerNorm("ln_0"), SelfAttention("attn", head_dim), LayerNorm("ln_1"), MLP("mlp")

    def __call__(self, params, x, ops):
        p = params[self.name]
        x = x + self.attn(p, self.ln0(p, x, ops), ops)
        return x + self.mlp(p, self.ln1(p, x, ops), ops)


class TinyLM:
    def __init__(self, head_dim, depth):
        self.blocks = [Block("block_%d" % i, head_dim) for i in range(depth)]
        self.ln_f, self.head = LayerNorm("ln_f"), Dense("head")

    def apply(self, variables, tok, ops=Ops()):
        p = variables["params"]
        x = p["embed"]["embedding"][tok]
        for b in self.blocks:
            x = b(p, x, ops)
        return self.head(p, self.ln_f(p, x, ops), ops)


def init_tinylm(D, H, E, F, V, depth):
    def dense(i, o, bias=True):
        d = {"kernel": R(i, o, scale=1.0 / np.sqrt(i))}
        if bias:
            d["bias"] = R(o, scale=0.1)
        return d

    def ln():
        return {"scale": 1.0 + R(D, scale=0.1), "bias": R(D, scale=0.1)}
    p = {"embed": {"embedding": R(V, D, scale=0.5)}, "ln_f": ln(), "head": dense(D, V, False)}
    for i in range(depth):
        p["block_%d" % i] = {"ln_0": ln(), "ln_1": ln(),
                             "attn": {n: dense(D, H * E) for n in ("query", "key", "value")} | {"out": dense(H * E, D)},
                             "mlp": {"fc1": dense(D, F), "fc2": dense(F, D)}}
    return {"params": p}


def tinylm_specs(depth, col=P(None, "tp"), colb=P("tp"), row=P("tp", None)):
    def ln():
        return {"scale": P(), "bias": P()}
    p = {"embed": {"embedding": P()}, "ln_f": ln(), "head": {"kernel": P()}}
    for i in range(depth):
        p["block_%d" % i] = {"ln_0": ln(), "ln_1": ln(),
                             "attn": {n: {"kernel": col, "bias": colb} for n in ("query", "key", "value")}
                             | {"out": {"kernel": row, "bias": P()}},
                             "mlp": {"fc1": {"kernel": col, "bias": colb}, "fc2": {"kernel": row, "bias": P()}}}
    return {"params": p}


MODEL5 = TinyLM(E5, 2)
OPT5 = optax.chain(optax.clip(0.5), optax.adamw(2e-3, weight_decay=0.01))
SPEC5 = tinylm_specs(2)


def step5(v, s, inp, tgt):
    l, g = jax.value_and_grad(lambda v: jnp.mean(ce(MODEL5.apply(v, inp), tgt)))(v)
    u, s = OPT5.update(g, s, v)
    return optax.apply_updates(v, u), s, l


def step5_sm(bug):
    def f(v, s, inp, tgt):
        fc, gr = megatron_ops("tp")
        ntok = B5 * T5

        def loss(v):
            return jnp.sum(ce(MODEL5.apply(v, inp, Ops(fc, gr)), tgt)) / ntok
        l, g = jax.value_and_grad(loss)(v)

        def hier(x):
            x = psum(x, "dp", axis_index_groups=[[0, 1], [2, 3]])  # inside the host
            if bug == "inter-host-stage-skipped":
                return x
            groups = [[0, 1], [2, 3]] if bug == "inter-host-stage-same-groups" else [[0, 2], [1, 3]]
            return psum(x, "dp", axis_index_groups=groups)  # across hosts
        g = jax.tree.map(hier, g)
        u, s = OPT5.update(g, s, v)
        return optax.apply_updates(v, u), s, psum(l, "dp")
    return f


P5 = init_tinylm(D5, H5, E5, F5, V5, 2)
S5 = OPT5.init(P5)
SS5 = state_specs(S5, SPEC5)
TOK5 = I(0, V5, B5, T5 + 1)
C.smap("s.module_style_hierarchical_grad_allreduce.dp4xtp2", {"dp": 4, "tp": 2}, step5_sm,
       (SPEC5, SS5, P("dp"), P("dp")), (SPEC5, SS5, P()), step5, (P5, S5, TOK5[:, :-1], TOK5[:, 1:]),
       bugs=[("inter-host-stage-same-groups", ["wrong-replica-groups"]),
             ("inter-host-stage-skipped", ["wrong-replica-groups"])])

# ---------------------------------------------------------------------------
# 6. bf16 compute with f32 master weights and dynamic loss scaling on a
#    multi-pod mesh pod2 x dp2 x tp2: the batch over (pod, dp), the decoder
#    of 1. cast to bf16 for the forward (dots accumulated in f32), the loss
#    scaled by 2**32 (Megatron-LM's initial scale), per-device autodiff w.r.t. the f32 masters, gradients
#    all-reduced over (pod, dp) in f32 and unscaled, the step skipped and
#    the scale halved when any gradient is not finite; optax.sgd.
D6, H6, E6, F6, V6, T6, B6 = 32, 8, 4, 64, 16, 8, 8
LS6 = 2.0 ** 32  # Megatron-LM's default initial loss scale
OPT6 = optax.sgd(0.05)


def decoder_bf16(p, tok, E, f=ident, g=ident, lookup_f32=False):
    pb = jax.tree.map(lambda a: a.astype(bf16), p)
    x = p["emb"][tok].astype(bf16) if lookup_f32 else pb["emb"][tok]
    pos = jnp.arange(tok.shape[1])

    def mm(a, w):
        return jnp.einsum("btd,dn->btn", a, w, preferred_element_type=f32)
    for L in pb["layers"].values():
        h = f(rms(x, L["g1"]))
        q, k, v = (split_heads(mm(h, L[n]).astype(bf16), E) for n in ("wq", "wk", "wv"))
        o = attend(rope(q, pos), rope(k, pos), v, pos, pos)
        x = x + g(mm(merge_heads(o), L["wo"])).astype(bf16)
        h = f(rms(x, L["g2"]))
        x = x + g(mm(jax.nn.gelu(mm(h, L["w1"]).astype(bf16)), L["w2"])).astype(bf16)
    return mm(rms(x, pb["gf"]), pb["wout"])


def skip_if_nonfinite(p, s, scale, g, opt):
    ok = jnp.all(jnp.stack([jnp.all(jnp.isfinite(x)) for x in jax.tree.leaves(g)]))
    g = jax.tree.map(lambda x: jnp.where(ok, x, 0.0), g)
    u, s2 = opt.update(g, s, p)
    p2 = optax.apply_updates(p, u)
    pick = lambda a, b: jax.tree.map(lambda x, y: jnp.where(ok, x, y), a, b)  # noqa: E731
    return pick(p2, p), pick(s2, s), jnp.where(ok, scale, scale / 2)


def step6(p, s, scale, inp, tgt):
    l, g = jax.value_and_grad(lambda p: jnp.mean(ce(decoder_bf16(p, inp, E6), tgt)) * scale)(p)
    g = jax.tree.map(lambda x: x / scale, g)
    p, s, scale = skip_if_nonfinite(p, s, scale, g, OPT6)
    return p, s, scale, l / LS6


def step6_sm(bug):
    def f(p, s, scale, inp, tgt):
        fc, gr = megatron_ops("tp")
        ntok = B6 * T6
        l, g = jax.value_and_grad(lambda p: jnp.sum(ce(decoder_bf16(p, inp, E6, fc, gr), tgt)) / ntok * scale)(p)
        if bug == "grads-reduced-over-dp-subaxis-only":
            g = jax.tree.map(lambda x: psum(x, "dp"), g)
        elif bug == "grad-allreduce-in-fp16":
            g = jax.tree.map(lambda x: psum(x.astype(f16), ("pod", "dp")).astype(f32), g)
        else:
            g = jax.tree.map(lambda x: psum(x, ("pod", "dp")), g)
        g = jax.tree.map(lambda x: x / scale, g)
        p, s, scale = skip_if_nonfinite(p, s, scale, g, OPT6)
        return p, s, scale, psum(l, ("pod", "dp")) / LS6
    return f


P6 = init_decoder(D6, H6, E6, F6, V6, 2)
S6 = OPT6.init(P6)
SS6 = state_specs(S6, SPEC1)
TOK6 = I(0, V6, B6, T6 + 1)
C.smap("s.bf16_master_f32_dynamic_loss_scale_step.pod2xdp2xtp2", {"pod": 2, "dp": 2, "tp": 2}, step6_sm,
       (SPEC1, SS6, P(), P(("pod", "dp")), P(("pod", "dp"))), (SPEC1, SS6, P(), P()), step6,
       (P6, S6, np.float32(LS6), TOK6[:, :-1], TOK6[:, 1:]),
       bugs=[("grads-reduced-over-dp-subaxis-only", ["wrong-replica-groups"]),
             ("grad-allreduce-in-fp16", ["wrong-dtype"])])

# ---------------------------------------------------------------------------
# 7. the same bf16 decoder with f32 masters on dp2 x tp4 (here the token
#    rows gathered from the f32 master table, then cast), where the user
#    writes Megatron's f operator with a communication-saving backward: the
#    activation-gradient all-reduce over tp runs in the low precision of
#    the compute (bf16 in the correct version; an fp16 cast in the bug,
#    which overflows under the 2**32 loss scale), then the dp gradient
#    psum; dynamic loss scaling skips non-finite steps.


def megatron_ops_lowp(axis, dt):
    @jax.custom_vjp
    def f_copy(x):
        return x
    f_copy.defvjp(lambda x: (x, None), lambda _, ct: (psum(ct.astype(f32), axis).astype(ct.dtype)
                                                      if dt is None else psum(ct.astype(dt), axis).astype(ct.dtype),))

    @jax.custom_vjp
    def g_reduce(x):
        return psum(x, axis)
    g_reduce.defvjp(lambda x: (psum(x, axis), None), lambda _, ct: (ct,))
    return f_copy, g_reduce


def step7(p, s, scale, inp, tgt):
    l, g = jax.value_and_grad(lambda p: jnp.mean(ce(decoder_bf16(p, inp, E6, lookup_f32=True), tgt)) * scale)(p)
    g = jax.tree.map(lambda x: x / scale, g)
    p, s, scale = skip_if_nonfinite(p, s, scale, g, OPT6)
    return p, s, scale, l / LS6


def step7_sm(bug):
    def f(p, s, scale, inp, tgt):
        fc, gr = megatron_ops_lowp("tp", f16 if bug == "f-backward-allreduce-in-fp16" else None)
        ntok = B6 * T6
        l, g = jax.value_and_grad(
            lambda p: jnp.sum(ce(decoder_bf16(p, inp, E6, fc, gr, True), tgt)) / ntok * scale)(p)
        g = jax.tree.map(lambda x: psum(x, "dp") / scale, g)
        if bug == "loss-scale-not-undone-for-gains":
            g = jax.tree_util.tree_map_with_path(lambda pth, x: x * scale if keyed(pth)[-1] in ("g1", "g2") else x, g)
        p, s, scale = skip_if_nonfinite(p, s, scale, g, OPT6)
        return p, s, scale, psum(l, "dp") / LS6
    return f


C.smap("s.bf16_megatron_f_backward_lowp_allreduce.dp2xtp4", {"dp": 2, "tp": 4}, step7_sm,
       (SPEC1, SS6, P(), P("dp"), P("dp")), (SPEC1, SS6, P(), P()), step7,
       (P6, S6, np.float32(LS6), TOK6[:, :-1], TOK6[:, 1:]),
       bugs=[("f-backward-allreduce-in-fp16", ["wrong-dtype"]), ("loss-scale-not-undone-for-gains", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 8. one decoding step against a KV cache whose sequence is sharded over sp4
#    and heads over tp2: the new token's key / value (rotated at its global
#    position) written into the cache by the device that owns that
#    position (local offset pos - shard * S_local), attention over the
#    positions <= pos with the softmax merged by pmax / psum over sp, the
#    output projection psum'd over tp. Returns the output and both caches.
D8, H8, E8, S8, B8 = 32, 4, 8, 16, 2


def decode8(x, wq, wk, wv, wo, kc, vc, pos):
    pos = jnp.clip(pos, 0, kc.shape[1] - 1)
    b = x.shape[0]
    q, k, v = ((x @ w).reshape(b, 1, -1, E8) for w in (wq, wk, wv))
    q, k = rope(q, pos[None]), rope(k, pos[None])
    kc = lax.dynamic_update_slice(kc, k, (0, pos, 0, 0))
    vc = lax.dynamic_update_slice(vc, v, (0, pos, 0, 0))
    o = attend(q, kc, vc, pos[None], jnp.arange(kc.shape[1]))
    return o.reshape(b, -1) @ wo, kc, vc


def decode8_sm(bug):
    def f(x, wq, wk, wv, wo, kc, vc, pos):
        sl, me = kc.shape[1], idx("sp")
        pos = jnp.clip(pos, 0, S8 - 1)
        b = x.shape[0]
        q, k, v = ((x @ w).reshape(b, 1, -1, E8) for w in (wq, wk, wv))
        q, k = rope(q, pos[None]), rope(k, pos[None])
        if bug == "cache-write-on-every-shard":
            loc, mine = pos % sl, True
        else:
            loc = pos if bug == "cache-write-without-shard-offset" else pos - me * sl
            mine = (loc >= 0) & (loc < sl)
        at = jnp.clip(loc, 0, sl - 1)
        kc = jnp.where(mine, lax.dynamic_update_slice(kc, k, (0, at, 0, 0)), kc)
        vc = jnp.where(mine, lax.dynamic_update_slice(vc, v, (0, at, 0, 0)), vc)
        kpos = me * sl + jnp.arange(sl)
        s = jnp.einsum("bqhe,bkhe->bhqk", q, kc) / np.sqrt(E8)
        s = jnp.where(kpos[None, None, None, :] <= pos, s, NEG)
        m = pmax(jnp.max(s, -1, keepdims=True), "sp")
        e = jnp.exp(s - m)
        den = psum(jnp.sum(e, -1, keepdims=True), "tp" if bug == "softmax-denominator-psum-over-tp" else "sp")
        num = psum(jnp.einsum("bhqk,bkhe->bqhe", e, vc), "sp")
        o = num / den.transpose(0, 2, 1, 3)
        return psum(o.reshape(b, -1) @ wo, "tp"), kc, vc
    return f


C.smap("s.kv_cache_decode_seq_sharded.sp4xtp2", {"sp": 4, "tp": 2}, decode8_sm,
       (P(), P(None, "tp"), P(None, "tp"), P(None, "tp"), P("tp", None), P(None, "sp", "tp"), P(None, "sp", "tp"), P()),
       (P(), P(None, "sp", "tp"), P(None, "sp", "tp")), decode8,
       (R(B8, D8), R(D8, H8 * E8, scale=0.2), R(D8, H8 * E8, scale=0.2), R(D8, H8 * E8, scale=0.2),
        R(H8 * E8, D8, scale=0.2), R(B8, S8, H8, E8), R(B8, S8, H8, E8), np.int32(9)),
       bugs=[("cache-write-without-shard-offset", ["wrong-offset"]), ("cache-write-on-every-shard", ["wrong-offset"]),
             ("softmax-denominator-psum-over-tp", ["wrong-axis"])])

# ---------------------------------------------------------------------------
# 9. chunked prefill with continuous batching, dp2 x tp4: a chunk of C new
#    tokens per row written into a KV cache (rows over dp, kv heads over tp)
#    at each row's own start offset, the offsets kept replicated as
#    scheduler metadata (P()) and sliced at the dp shard's first row;
#    causal attention of the chunk against the cache, RoPE at start + i,
#    output projection psum'd over tp.
D9, H9, E9, S9, B9, C9 = 32, 4, 8, 16, 4, 4


def prefill_row(xr, kcr, vcr, st, wq, wk, wv):
    st = jnp.clip(st, 0, S9 - C9)
    pos = st + jnp.arange(C9)
    q, k, v = ((xr @ w).reshape(1, C9, -1, E9) for w in (wq, wk, wv))
    q, k = rope(q, pos), rope(k, pos)
    kcr = lax.dynamic_update_slice(kcr, k[0], (st, 0, 0))
    vcr = lax.dynamic_update_slice(vcr, v[0], (st, 0, 0))
    o = attend(q, kcr[None], vcr[None], pos, jnp.arange(S9))
    return o.reshape(C9, -1), kcr, vcr


def prefill9(x, wq, wk, wv, wo, kc, vc, starts):
    o, kc, vc = jax.vmap(prefill_row, (0, 0, 0, 0, None, None, None))(x, kc, vc, starts, wq, wk, wv)
    return o @ wo, kc, vc


def prefill9_sm(bug):
    def f(x, wq, wk, wv, wo, kc, vc, starts):
        bl = x.shape[0]
        first = 0 if bug == "row-start-from-local-row-index" else idx("dp") * bl
        st = lax.dynamic_slice(starts, (first,), (bl,))
        o, kc, vc = jax.vmap(prefill_row, (0, 0, 0, 0, None, None, None))(x, kc, vc, st, wq, wk, wv)
        y = o @ wo
        return (y if bug == "out-proj-not-reduced" else psum(y, "tp")), kc, vc
    return f


C.smap("s.chunked_prefill_row_offsets.dp2xtp4", {"dp": 2, "tp": 4}, prefill9_sm,
       (P("dp"), P(None, "tp"), P(None, "tp"), P(None, "tp"), P("tp", None), P("dp", None, "tp"), P("dp", None, "tp"), P()),
       (P("dp"), P("dp", None, "tp"), P("dp", None, "tp")), prefill9,
       (R(B9, C9, D9), R(D9, H9 * E9, scale=0.2), R(D9, H9 * E9, scale=0.2), R(D9, H9 * E9, scale=0.2),
        R(H9 * E9, D9, scale=0.2), R(B9, S9, H9, E9), R(B9, S9, H9, E9), np.array([3, 9, 0, 12], np.int32)),
       bugs=[("row-start-from-local-row-index", ["wrong-offset"]), ("out-proj-not-reduced", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 10. Megatron sequence parallelism, dp2 x tp4 (the sequence over tp outside
#     the tensor-parallel regions): RMSNorm on the local sequence block,
#     all_gather along the sequence before the column-parallel projections,
#     psum_scatter back after the row-parallel ones; a padding mask, the
#     loss normalised by the global count of valid tokens; per-device
#     autodiff (the gather / reduce-scatter transposes do the sequence
#     gradients), the norm gains', embedding's and head's gradients psum'd
#     over (dp, tp), the tensor-parallel weights' over dp; optax.adamw.
D10, H10, E10, F10, V10, T10, B10 = 16, 4, 4, 32, 16, 8, 4
SPEC10 = {"emb": P(), "gf": P(), "wout": P(), "layers": {"l0": TP_LAYER}}
OPT10 = optax.adamw(2e-3, weight_decay=0.02)


def step10(p, s, inp, tgt, mask):
    l, g = jax.value_and_grad(lambda p: jnp.sum(ce(decoder(p, inp, E10), tgt) * mask) / jnp.sum(mask))(p)
    u, s = OPT10.update(g, s, p)
    return optax.apply_updates(p, u), s, l


def sp_decoder(p, tok, bug):
    def gather(h):
        if bug == "seq-gather-wrong-dim":
            return lax.all_gather(h, "tp", axis=2).reshape(h.shape[0], -1, h.shape[2])
        return lax.all_gather(h, "tp", axis=1, tiled=True)

    def scatter(y):
        return lax.psum_scatter(y, "tp", scatter_dimension=1, tiled=True)
    x = p["emb"][tok]
    pos = jnp.arange(tok.shape[1] * 4)
    for L in p["layers"].values():
        h = gather(rms(x, L["g1"]))
        q, k, v = (split_heads(h @ L[n], E10) for n in ("wq", "wk", "wv"))
        o = attend(rope(q, pos), rope(k, pos), v, pos, pos)
        x = x + scatter(merge_heads(o) @ L["wo"])
        h = gather(rms(x, L["g2"]))
        x = x + scatter(jax.nn.gelu(h @ L["w1"]) @ L["w2"])
    return rms(x, p["gf"]) @ p["wout"]


def step10_sm(bug):
    def f(p, s, inp, tgt, mask):
        def loss(p):
            tot = jnp.sum(ce(sp_decoder(p, inp, bug), tgt) * mask)
            if bug == "loss-mean-over-local-tokens":
                return tot / jnp.sum(mask) / 8
            return tot / psum(jnp.sum(mask), ("dp", "tp"))
        l, g = jax.value_and_grad(loss)(p)

        def allreduce(path, x):
            k = keyed(path)[-1]
            if k in ("wq", "wk", "wv", "wo", "w1", "w2"):
                return psum(x, "dp")
            if bug == "norm-grads-not-reduced-over-sp" and k in ("g1", "g2", "gf"):
                return psum(x, "dp")
            return psum(x, ("dp", "tp"))
        g = jax.tree_util.tree_map_with_path(allreduce, g)
        u, s = OPT10.update(g, s, p)
        return optax.apply_updates(p, u), s, psum(l, ("dp", "tp"))
    return f


P10 = init_decoder(D10, H10, E10, F10, V10, 1)
S10 = OPT10.init(P10)
SS10 = state_specs(S10, SPEC10)
TOK10 = I(0, V10, B10, T10 + 1)
MASK10 = np.ones((B10, T10), np.float32)
MASK10[1, 3:] = 0.0
MASK10[2, 6:] = 0.0
C.smap("s.megatron_seq_parallel_masked_step_adamw.dp2xtp4", {"dp": 2, "tp": 4}, step10_sm,
       (SPEC10, SS10, P("dp", "tp"), P("dp", "tp"), P("dp", "tp")), (SPEC10, SS10, P()), step10,
       (P10, S10, TOK10[:, :-1], TOK10[:, 1:], MASK10),
       bugs=[("norm-grads-not-reduced-over-sp", ["missing-all-reduce"]), ("seq-gather-wrong-dim", ["wrong-layout"]),
             ("loss-mean-over-local-tokens", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 11. load-balanced ("zigzag") causal context parallelism, dp2 x sp4: the
#     data loader stores each row as 2*sp chunks in the order
#     [c0, c7, c1, c6, c2, c5, c3, c4], so shard r holds chunks r and 7 - r;
#     RoPE at those chunks' global positions, keys / values all_gather'd
#     over sp with their positions, causal mask by position; the LayerNorm
#     layer of 2. without tensor parallelism; gradients psum'd over
#     (dp, sp); optax.adam.
T11, B11, CH11 = 16, 4, 2
ZZ = np.concatenate([np.arange(c * CH11, (c + 1) * CH11) for r in range(4) for c in (r, 7 - r)])
INV_ZZ = np.argsort(ZZ)


def step11(p, s, inp, tgt):
    def loss(p):
        x, y = inp[:, INV_ZZ], tgt[:, INV_ZZ]  # back to natural order
        return jnp.mean(ce(ln_layer(p, x, E2), y))
    l, g = jax.value_and_grad(loss)(p)
    u, s = OPT2.update(g, s, p)
    return optax.apply_updates(p, u), s, l


def step11_sm(bug):
    def f(p, s, inp, tgt):
        r = idx("sp")
        second = (4 + r) if bug == "second-chunk-offset-n-plus-r" else (7 - r)
        pos = jnp.concatenate([r * CH11 + jnp.arange(CH11), second * CH11 + jnp.arange(CH11)])

        def mix(q, k, v):
            kk, vv = (lax.all_gather(a, "sp", axis=1, tiled=True) for a in (k, v))
            kpos = jnp.arange(T11) if bug == "key-positions-contiguous" else lax.all_gather(pos, "sp", tiled=True)
            return attend(q, kk, vv, pos, kpos)

        def loss(p):
            return jnp.sum(ce(ln_layer(p, inp, E2, pos, mix=mix), tgt)) / (B11 * T11)
        l, g = jax.value_and_grad(loss)(p)
        g = jax.tree.map(lambda x: psum(x, "sp" if bug == "grads-psum-over-sp-only" else ("dp", "sp")), g)
        u, s = OPT2.update(g, s, p)
        return optax.apply_updates(p, u), s, psum(l, ("dp", "sp"))
    return f


P11 = init_ln_layer(D2, H2, E2, F2, V2)
S11 = OPT2.init(P11)
SPEC11 = jax.tree.map(lambda _: P(), P11)
SS11 = state_specs(S11, SPEC11)
TOK11 = I(0, V2, B11, T11 + 1)
C.smap("s.zigzag_context_parallel_step_adam.dp2xsp4", {"dp": 2, "sp": 4}, step11_sm,
       (SPEC11, SS11, P("dp", "sp"), P("dp", "sp")), (SPEC11, SS11, P()), step11,
       (P11, S11, TOK11[:, :-1][:, ZZ], TOK11[:, 1:][:, ZZ]),
       bugs=[("second-chunk-offset-n-plus-r", ["wrong-offset"]), ("key-positions-contiguous", ["wrong-offset"]),
             ("grads-psum-over-sp-only", ["wrong-replica-groups"])])

# ---------------------------------------------------------------------------
# 12. ZeRO-2 style step on dp4 x tp2: Megatron tensor parallelism (one
#     layer of 1.), per-device autodiff, each gradient reduce-scattered over
#     dp along dim 0, adamw on the rank's dp shard of every parameter (the
#     optimizer state sharded over dp too), the updated shards all_gather'd
#     back into the dp-replicated parameters.
D12, H12, E12, F12, V12, T12, B12 = 32, 8, 4, 64, 16, 8, 8
OPT12 = optax.adamw(3e-3, weight_decay=0.1)


def zero_spec(s, ndim):
    e = list(s) + [None] * (ndim - len(s))
    e[0] = "dp" if e[0] is None else (e[0], "dp")
    return P(*e)


def step12(p, s, tok):
    l, g = jax.value_and_grad(lambda p: jnp.mean(ce(decoder(p, tok[:, :-1], E12), tok[:, 1:])))(p)
    u, s = OPT12.update(g, s, p)
    return optax.apply_updates(p, u), s, l


def step12_sm(bug):
    def f(p, s, tok):
        fc, gr = megatron_ops("tp")
        ntok = B12 * T12
        l, g = jax.value_and_grad(lambda p: jnp.sum(ce(decoder(p, tok[:, :-1], E12, fc, gr), tok[:, 1:])) / ntok)(p)
        g = jax.tree.map(lambda x: lax.psum_scatter(x, "dp", scatter_dimension=0, tiled=True), g)

        def shard(x):
            n = x.shape[0] // 4
            return lax.dynamic_slice_in_dim(x, 0 if bug == "param-shard-at-offset-0" else idx("dp") * n, n, 0)
        ps = jax.tree.map(shard, p)
        u, s = OPT12.update(g, s, ps)
        ps = optax.apply_updates(ps, u)

        def gather(x):
            if bug == "updated-shards-gathered-on-minor-dim":
                return lax.all_gather(x, "dp", axis=1).reshape((-1,) + x.shape[1:])
            return lax.all_gather(x, "dp", axis=0, tiled=True)
        return jax.tree.map(gather, ps), s, psum(l, "dp")
    return f


P12 = init_decoder(D12, H12, E12, F12, V12, 1)
S12 = OPT12.init(P12)
ZSPEC12 = jax.tree.map(lambda sp, x: zero_spec(sp, x.ndim), SPEC10, P12, is_leaf=lambda x: isinstance(x, P))
SS12 = state_specs(S12, ZSPEC12)
TOK12 = I(0, V12, B12, T12 + 1)
C.smap("s.zero2_reduce_scatter_sharded_adamw.dp4xtp2", {"dp": 4, "tp": 2}, step12_sm, (SPEC10, SS12, P("dp")),
       (SPEC10, SS12, P()), step12, (P12, S12, TOK12),
       bugs=[("updated-shards-gathered-on-minor-dim", ["wrong-layout"]), ("param-shard-at-offset-0", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 13. tied input / output embeddings with the vocabulary over tp (dp2 x tp4):
#     vocab-parallel embedding lookup (rows of the local vocab slice, the
#     rest zero, all-reduced by Megatron's g), logits against the local
#     vocab slice of the same table, and a vocab-parallel cross-entropy
#     written as a custom_vjp (pmax of the maxima, psum of the exp-sums and
#     of the target logit; backward softmax - one-hot on the local slice),
#     one decoder layer, gradients psum'd over dp, adamw.
D13, H13, E13, F13, V13, T13, B13 = 16, 4, 4, 32, 32, 8, 4
OPT13 = optax.adamw(2e-3, weight_decay=0.01)


def run_layers(p, x, E, f=ident, g=ident):
    pos = jnp.arange(x.shape[1])
    for L in p["layers"].values():
        h = f(rms(x, L["g1"]))
        q, k, v = (split_heads(h @ L[n], E) for n in ("wq", "wk", "wv"))
        x = x + g(merge_heads(attend(rope(q, pos), rope(k, pos), v, pos, pos)) @ L["wo"])
        h = f(rms(x, L["g2"]))
        x = x + g(jax.nn.gelu(h @ L["w1"]) @ L["w2"])
    return rms(x, p["gf"])


def step13(p, s, inp, tgt):
    def loss(p):
        h = run_layers(p, p["emb"][inp], E13)
        return jnp.mean(ce(h @ p["emb"].T, tgt))
    l, g = jax.value_and_grad(loss)(p)
    u, s = OPT13.update(g, s, p)
    return optax.apply_updates(p, u), s, l


def vocab_parallel_ce(bug):
    @jax.custom_vjp
    def vce(lg, tgt):
        return vce_fwd(lg, tgt)[0]

    def vce_fwd(lg, tgt):
        vl = lg.shape[-1]
        loc = tgt - idx("tp") * vl
        ok = (loc >= 0) & (loc < vl)
        m = pmax(lax.stop_gradient(jnp.max(lg, -1)), "tp")
        e = jnp.exp(lg - m[..., None])
        se = psum(jnp.sum(e, -1), "dp" if bug == "exp-sum-psum-over-dp" else "tp")
        tl = jnp.where(ok, jnp.take_along_axis(lg, jnp.clip(loc, 0, vl - 1)[..., None], -1)[..., 0], 0.0)
        if bug != "target-logit-not-reduced":
            tl = psum(tl, "tp")
        return jnp.log(se) + m - tl, (e / se[..., None], ok, loc)

    def vce_bwd(res, ct):
        sm, ok, loc = res
        onehot = jax.nn.one_hot(loc, sm.shape[-1]) * ok[..., None]
        return (sm - onehot) * ct[..., None], None
    vce.defvjp(vce_fwd, vce_bwd)
    return vce


def step13_sm(bug):
    def f(p, s, inp, tgt):
        fc, gr = megatron_ops("tp")
        vce = vocab_parallel_ce(bug)

        def lookup(emb, tok):
            vl = emb.shape[0]
            loc = tok - (0 if bug == "lookup-without-vocab-offset" else idx("tp") * vl)
            ok = (loc >= 0) & (loc < vl)
            return gr(jnp.where(ok[..., None], emb[jnp.clip(loc, 0, vl - 1)], 0.0))

        def loss(p):
            h = run_layers(p, lookup(p["emb"], inp), E13, fc, gr)
            return jnp.sum(vce(fc(h) @ p["emb"].T, tgt)) / (B13 * T13)
        l, g = jax.value_and_grad(loss)(p)
        g = jax.tree.map(lambda x: psum(x, "dp"), g)
        u, s = OPT13.update(g, s, p)
        return optax.apply_updates(p, u), s, psum(l, "dp")
    return f


P13 = init_decoder(D13, H13, E13, F13, V13, 1)
del P13["wout"]
SPEC13 = {"emb": P("tp", None), "gf": P(), "layers": {"l0": TP_LAYER}}
S13 = OPT13.init(P13)
SS13 = state_specs(S13, SPEC13)
TOK13 = I(0, V13, B13, T13 + 1)
C.smap("s.tied_vocab_parallel_embedding_ce_step.dp2xtp4", {"dp": 2, "tp": 4}, step13_sm,
       (SPEC13, SS13, P("dp"), P("dp")), (SPEC13, SS13, P()), step13, (P13, S13, TOK13[:, :-1], TOK13[:, 1:]),
       bugs=[("lookup-without-vocab-offset", ["wrong-offset"]), ("target-logit-not-reduced", ["missing-all-reduce"]),
             ("exp-sum-psum-over-dp", ["wrong-axis"])])

# ---------------------------------------------------------------------------
# 14. gradient accumulation over 2 micro-batches by lax.scan on dp4 x tp2
#     (Megatron f / g, one decoder layer): per-device gradients summed over
#     the micro-batches (each micro-batch loss summed over its tokens /
#     global tokens of the step), one psum over dp after the scan, plain
#     SGD (scale-sensitive, unlike Adam). [an extra psum over dp inside
#     every micro-batch (gradients dp times too large); the accumulated
#     gradients pmean'd over tp as well as psum'd over dp (wrong axis; the
#     tp-sharded weights' gradients averaged across different shards)].
D14, H14, E14, F14, V14, T14, B14, K14 = 16, 4, 4, 32, 16, 8, 8, 2
OPT14 = optax.sgd(0.3)


def step14(p, s, tok):
    l, g = jax.value_and_grad(lambda p: jnp.mean(ce(decoder(p, tok[:, :-1], E14), tok[:, 1:])))(p)
    u, s = OPT14.update(g, s, p)
    return optax.apply_updates(p, u), s, l


def step14_sm(bug):
    def f(p, s, tok):
        fc, gr = megatron_ops("tp")
        ntok = B14 * T14
        micro = tok.reshape(K14, tok.shape[0] // K14, tok.shape[1])

        def one(acc, mb):
            l, g = jax.value_and_grad(
                lambda p: jnp.sum(ce(decoder(p, mb[:, :-1], E14, fc, gr), mb[:, 1:])) / ntok)(p)
            if bug == "psum-inside-every-microbatch":
                g = jax.tree.map(lambda x: psum(x, "dp"), g)
            return (acc[0] + l, jax.tree.map(jnp.add, acc[1], g)), None
        zero = (jnp.zeros((), f32), jax.tree.map(jnp.zeros_like, p))
        (l, g), _ = lax.scan(one, zero, micro)
        g = jax.tree.map(lambda x: psum(x, "dp"), g)
        if bug == "accumulated-grads-pmean-over-tp":
            g = jax.tree.map(lambda x: pmean(x, "tp"), g)
        u, s = OPT14.update(g, s, p)
        return optax.apply_updates(p, u), s, psum(l, "dp")
    return f


P14 = init_decoder(D14, H14, E14, F14, V14, 1)
S14 = OPT14.init(P14)
SS14 = state_specs(S14, SPEC10)
TOK14 = I(0, V14, B14, T14 + 1)
C.smap("s.grad_accumulation_scan_microbatches_sgd.dp4xtp2", {"dp": 4, "tp": 2}, step14_sm, (SPEC10, SS14, P("dp")),
       (SPEC10, SS14, P()), step14, (P14, S14, TOK14),
       bugs=[("psum-inside-every-microbatch", ["wrong-scale"]), ("accumulated-grads-pmean-over-tp", ["wrong-axis"])])

# ---------------------------------------------------------------------------
# 15. the Megatron decoder of 1. (two unrolled layers) on dp2 x tp4 with
#     check_vma=True and autodiff through the collectives: the row-parallel
#     all-reduce written as a reduce-scatter along the sequence followed by
#     an all_gather along it, the loss pmean'd over dp, jax.grad, plain SGD.
#     [the all_gather along a new minor dim then reshaped (tokens
#     interleaved); the loss psum'd over dp instead of pmean'd (gradients
#     twice as large)].
OPT15 = optax.sgd(0.2)


def step15(p, s, tok):
    l, g = jax.value_and_grad(lambda p: jnp.mean(ce(decoder(p, tok[:, :-1], E1), tok[:, 1:])))(p)
    u, s = OPT15.update(g, s, p)
    return optax.apply_updates(p, u), s, l


def step15_sm(bug):
    def f(p, s, tok):
        def rs_ag(y):
            y = lax.psum_scatter(y, "tp", scatter_dimension=1, tiled=True)
            if bug == "gather-on-new-minor-dim":
                return lax.all_gather(y, "tp", axis=2).reshape(y.shape[0], -1, y.shape[2])
            return lax.all_gather(y, "tp", axis=1, tiled=True)

        def loss(p):
            l = jnp.mean(ce(decoder(p, tok[:, :-1], E1, g=rs_ag), tok[:, 1:]))
            l = pmean(l, "tp")  # equal on every tp rank; all_gather's result counts as tp-varying
            return psum(l, "dp") if bug == "loss-psum-not-pmean-over-dp" else pmean(l, "dp")
        l, g = jax.value_and_grad(loss)(p)
        u, s = OPT15.update(g, s, p)
        return optax.apply_updates(p, u), s, l
    return f


S15 = OPT15.init(P1)
SS15 = state_specs(S15, SPEC1)
C.smap("s.vma_autodiff_reduce_scatter_all_gather_sgd.dp2xtp4", {"dp": 2, "tp": 4}, step15_sm, (SPEC1, SS15, P("dp")),
       (SPEC1, SS15, P()), step15, (P1, S15, TOK1),
       bugs=[("gather-on-new-minor-dim", ["wrong-layout"]), ("loss-psum-not-pmean-over-dp", ["wrong-scale"])],
       check_vma=True)

# ---------------------------------------------------------------------------
# 16. gradients all-reduced over dp4 by a hand-written ring (dp4 x tp2,
#     Megatron f / g, one decoder layer): the local gradients raveled into
#     one vector (jax.flatten_util), padded to 4 chunks, a reduce-scatter
#     ring of 3 ppermute steps (send chunk i - k, add into chunk i - 1 - k)
#     then an all-gather ring of 3 steps, unraveled; optax.adam.
#     [reduce-scatter ring one step short (one rank's gradient missing
#     from every chunk); all-gather ring writing the received chunk one
#     slot off].
from jax.flatten_util import ravel_pytree  # noqa: E402
OPT16 = optax.adam(3e-3)


def ring_allreduce(vec, axis, n, bug):
    m = -(-vec.shape[0] // n)
    ch = jnp.pad(vec, (0, n * m - vec.shape[0])).reshape(n, m)
    i = idx(axis)
    right = [(j, (j + 1) % n) for j in range(n)]
    for k in range(n - 2 if bug == "reduce-scatter-ring-one-step-short" else n - 1):
        got = lax.ppermute(ch[(i - k) % n], axis, right)
        ch = ch.at[(i - 1 - k) % n].add(got)
    for k in range(n - 1):
        got = lax.ppermute(ch[(i + 1 - k) % n], axis, right)
        slot = (i + 1 - k) % n if bug == "all-gather-ring-slot-off-by-one" else (i - k) % n
        ch = ch.at[slot].set(got)
    return ch.reshape(-1)[:vec.shape[0]]


def step16(p, s, tok):
    l, g = jax.value_and_grad(lambda p: jnp.mean(ce(decoder(p, tok[:, :-1], E14), tok[:, 1:])))(p)
    u, s = OPT16.update(g, s, p)
    return optax.apply_updates(p, u), s, l


def step16_sm(bug):
    def f(p, s, tok):
        fc, gr = megatron_ops("tp")
        ntok = B14 * T14
        l, g = jax.value_and_grad(lambda p: jnp.sum(ce(decoder(p, tok[:, :-1], E14, fc, gr), tok[:, 1:])) / ntok)(p)
        flat, unravel = ravel_pytree(g)
        g = unravel(ring_allreduce(flat, "dp", 4, bug))
        u, s = OPT16.update(g, s, p)
        return optax.apply_updates(p, u), s, psum(l, "dp")
    return f


S16 = OPT16.init(P14)
SS16 = state_specs(S16, SPEC10)
C.smap("s.hand_ring_grad_allreduce_adam.dp4xtp2", {"dp": 4, "tp": 2}, step16_sm, (SPEC10, SS16, P("dp")),
       (SPEC10, SS16, P()), step16, (P14, S16, TOK14),
       bugs=[("reduce-scatter-ring-one-step-short", ["missing-all-reduce"]),
             ("all-gather-ring-slot-off-by-one", ["wrong-permutation"])])

# ---------------------------------------------------------------------------
# 17. sliding-window decoding against a ring-buffer KV cache of W = 16
#     slots sharded over sp4 (batch over dp2), decoding step `step` after a
#     16-token prompt (position 16 + step): the new token's rotated key
#     / value go to slot pos % W, written by the shard owning that slot;
#     each slot's absolute position is pos - ((pos - slot) mod W), keys at
#     negative positions masked; softmax merged by pmax / psum over sp.
#     [owner computed from the unwrapped position (pos // S_local: nobody
#     writes once pos >= W); the softmax maximum not pmax'd (each shard's
#     exp-sums on its own scale)].
D17, H17, E17, W17, B17 = 16, 2, 8, 16, 4


PROMPT17 = 16  # decoding steps after a 16-token prompt (the window is full)


def ring_decode(x, wq, wk, wv, kc, vc, step):
    pos = PROMPT17 + jnp.clip(step, 0, 1000)
    b = x.shape[0]
    q, k, v = ((x @ w).reshape(b, 1, H17, E17) for w in (wq, wk, wv))
    q, k = rope(q, pos[None]), rope(k, pos[None])
    slot = pos % W17
    kc = lax.dynamic_update_slice(kc, k, (0, slot, 0, 0))
    vc = lax.dynamic_update_slice(vc, v, (0, slot, 0, 0))
    j = jnp.arange(W17)
    kpos = pos - (pos - j) % W17
    s = jnp.einsum("bqhe,bkhe->bhqk", q, kc) / np.sqrt(E17)
    s = jnp.where(kpos >= 0, s, NEG)
    return jnp.einsum("bhqk,bkhe->bqhe", jax.nn.softmax(s, -1), vc).reshape(b, -1), kc, vc


def ring_decode_sm(bug):
    def f(x, wq, wk, wv, kc, vc, step):
        pos = PROMPT17 + jnp.clip(step, 0, 1000)
        sl, me, b = kc.shape[1], idx("sp"), x.shape[0]
        q, k, v = ((x @ w).reshape(b, 1, H17, E17) for w in (wq, wk, wv))
        q, k = rope(q, pos[None]), rope(k, pos[None])
        slot = pos % W17
        owner = pos // sl if bug == "owner-from-unwrapped-position" else slot // sl
        at = slot % sl
        kc = jnp.where(owner == me, lax.dynamic_update_slice(kc, k, (0, at, 0, 0)), kc)
        vc = jnp.where(owner == me, lax.dynamic_update_slice(vc, v, (0, at, 0, 0)), vc)
        j = me * sl + jnp.arange(sl)
        kpos = pos - (pos - j) % W17
        s = jnp.einsum("bqhe,bkhe->bhqk", q, kc, preferred_element_type=f32) / np.sqrt(E17)
        s = jnp.where((kpos >= 0)[None, None, None, :], s, NEG)
        m = jnp.max(s, -1, keepdims=True)
        if bug != "softmax-max-not-pmaxed":
            m = pmax(m, "sp")
        e = jnp.exp(s - m)
        o = psum(jnp.einsum("bhqk,bkhe->bqhe", e, vc), "sp") / psum(jnp.sum(e, -1), "sp").transpose(0, 2, 1)[..., None]
        return o.reshape(b, -1), kc, vc
    return f


C.smap("s.ring_buffer_window_kv_decode.dp2xsp4", {"dp": 2, "sp": 4}, ring_decode_sm,
       (P("dp"), P(), P(), P(), P("dp", "sp"), P("dp", "sp"), P()), (P("dp"), P("dp", "sp"), P("dp", "sp")),
       ring_decode, (R(B17, D17), R(D17, H17 * E17, scale=0.3), R(D17, H17 * E17, scale=0.3),
                     R(D17, H17 * E17, scale=0.3), R(B17, W17, H17, E17), R(B17, W17, H17, E17), np.int32(5)),
       bugs=[("owner-from-unwrapped-position", ["wrong-offset"]), ("softmax-max-not-pmaxed", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 18. ZeRO-3 / pure FSDP over 8 devices (check_vma=True, autodiff through
#     the gathers): every leaf sharded on dim 0 over fsdp8, all_gather'd
#     (tiled) where used in two unrolled decoder layers, so that jax.grad
#     reduce-scatters each gradient back onto its shard; the loss pmean'd
#     over fsdp; sgd with momentum on the shards. [the attention output
#     projection gathered along a new minor dim then reshaped (rows
#     interleaved); the loss psum'd instead of pmean'd].
D18, H18, E18, F18, V18, T18, B18 = 32, 8, 4, 64, 16, 8, 8
OPT18 = optax.sgd(0.1, momentum=0.8)


def fsdp_decoder(p, tok, E, gather=lambda w, name: w):
    x = gather(p["emb"], "emb")[tok]
    pos = jnp.arange(tok.shape[1])
    for L in p["layers"].values():
        w = {n: gather(a, n) for n, a in L.items()}
        h = rms(x, w["g1"])
        q, k, v = (split_heads(jnp.dot(h, w[n]), E) for n in ("wq", "wk", "wv"))
        x = x + jnp.dot(merge_heads(attend(rope(q, pos), rope(k, pos), v, pos, pos)), w["wo"])
        h = rms(x, w["g2"])
        x = x + jnp.dot(jax.nn.gelu(jnp.dot(h, w["w1"])), w["w2"])
    return jnp.dot(rms(x, gather(p["gf"], "gf")), gather(p["wout"], "wout"))


def step18(p, s, tok):
    l, g = jax.value_and_grad(lambda p: jnp.mean(ce(fsdp_decoder(p, tok[:, :-1], E18), tok[:, 1:])))(p)
    u, s = OPT18.update(g, s, p)
    return optax.apply_updates(p, u), s, l


def step18_sm(bug):
    def f(p, s, tok):
        def gather(w, name):
            if bug == "wo-gathered-on-new-minor-dim" and name == "wo":
                return lax.all_gather(w, "fsdp", axis=1).reshape((-1,) + w.shape[1:])
            return lax.all_gather(w, "fsdp", axis=0, tiled=True)

        def loss(p):
            l = jnp.mean(ce(fsdp_decoder(p, tok[:, :-1], E18, gather), tok[:, 1:]))
            return psum(l, "fsdp") if bug == "loss-psum-not-pmean" else pmean(l, "fsdp")
        l, g = jax.value_and_grad(loss)(p)
        u, s = OPT18.update(g, s, p)
        return optax.apply_updates(p, u), s, l
    return f


P18 = init_decoder(D18, H18, E18, F18, V18, 2)
SPEC18 = jax.tree.map(lambda _: P("fsdp"), P18)
S18 = OPT18.init(P18)
SS18 = state_specs(S18, SPEC18)
TOK18 = I(0, V18, B18, T18 + 1)
C.smap("s.zero3_fsdp8_unrolled_autodiff_sgdm.fsdp8", {"fsdp": 8}, step18_sm, (SPEC18, SS18, P("fsdp")),
       (SPEC18, SS18, P()), step18, (P18, S18, TOK18),
       bugs=[("wo-gathered-on-new-minor-dim", ["wrong-layout"]), ("loss-psum-not-pmean", ["wrong-scale"])],
       check_vma=True)

# ---------------------------------------------------------------------------
# GSPMD pairs: the single-device steps above under jax.jit with the
# parameters, optimizer states and batches placed by NamedSharding
# (the partitioner inserts the collectives; correct only).
C.gspmd("g.megatron_decoder_step_adamw.dp2xtp4", {"dp": 2, "tp": 4}, (SPEC1, SS1, P("dp")), (SPEC1, SS1, P()),
        step1, (P1, S1, TOK1))
C.gspmd("g.ln_decoder_step_adam_seq_sharded.dp2xsp2xtp2", {"dp": 2, "sp": 2, "tp": 2},
        (SPEC2, SS2, P("dp", "sp"), P("dp", "sp")), (SPEC2, SS2, P()), step2, (P2, S2, TOK2[:, :-1], TOK2[:, 1:]))
C.gspmd("g.scan_layers_fsdp_tp_masked_step_sgd.fsdp2xtp4", {"fsdp": 2, "tp": 4},
        (SPEC3, SS3, P("fsdp"), P("fsdp"), P("fsdp")), (SPEC3, SS3, P()), step3,
        (P3, S3, TOK3[:, :-1], TOK3[:, 1:], MASK3))
C.gspmd("g.moe_top1_dense_experts_step_sgdm.dp2xep2xtp2", {"dp": 2, "ep": 2, "tp": 2},
        (SPEC4, SS4, P(("dp", "ep")), P(("dp", "ep"))), (SPEC4, SS4, P()), step4, (P4, S4, TOK4[:, :-1], TOK4[:, 1:]))
C.gspmd("g.module_style_lm_step_clip_adamw.dp4xtp2", {"dp": 4, "tp": 2}, (SPEC5, SS5, P("dp"), P("dp")),
        (SPEC5, SS5, P()), step5, (P5, S5, TOK5[:, :-1], TOK5[:, 1:]))
C.gspmd("g.bf16_master_dynamic_loss_scale_step.pod2xdp2xtp2", {"pod": 2, "dp": 2, "tp": 2},
        (SPEC1, SS6, P(), P(("pod", "dp")), P(("pod", "dp"))), (SPEC1, SS6, P(), P()), step6,
        (P6, S6, np.float32(LS6), TOK6[:, :-1], TOK6[:, 1:]))
C.gspmd("g.kv_cache_decode_seq_heads_sharded.sp4xtp2", {"sp": 4, "tp": 2},
        (P(), P(None, "tp"), P(None, "tp"), P(None, "tp"), P("tp", None), P(None, "sp", "tp"), P(None, "sp", "tp"), P()),
        (P(), P(None, "sp", "tp"), P(None, "sp", "tp")), decode8,
        (R(B8, D8), R(D8, H8 * E8, scale=0.2), R(D8, H8 * E8, scale=0.2), R(D8, H8 * E8, scale=0.2),
         R(H8 * E8, D8, scale=0.2), R(B8, S8, H8, E8), R(B8, S8, H8, E8), np.int32(9)))
C.gspmd("g.seq_sharded_tokens_masked_step_adamw.dp2xtp4", {"dp": 2, "tp": 4},
        (SPEC10, SS10, P("dp", "tp"), P("dp", "tp"), P("dp", "tp")), (SPEC10, SS10, P()), step10,
        (P10, S10, TOK10[:, :-1], TOK10[:, 1:], MASK10))
C.gspmd("g.zigzag_stored_rows_step_adam.dp2xsp4", {"dp": 2, "sp": 4}, (SPEC11, SS11, P("dp", "sp"), P("dp", "sp")),
        (SPEC11, SS11, P()), step11, (P11, S11, TOK11[:, :-1][:, ZZ], TOK11[:, 1:][:, ZZ]))
C.gspmd("g.zero_sharded_adamw_state_step.dp4xtp2", {"dp": 4, "tp": 2}, (SPEC10, SS12, P("dp")), (SPEC10, SS12, P()),
        step12, (P12, S12, TOK12))
C.gspmd("g.tied_embeddings_vocab_sharded_step.dp2xtp4", {"dp": 2, "tp": 4}, (SPEC13, SS13, P("dp"), P("dp")),
        (SPEC13, SS13, P()), step13, (P13, S13, TOK13[:, :-1], TOK13[:, 1:]))
C.gspmd("g.fully_sharded_dim0_step_sgdm.fsdp8", {"fsdp": 8}, (SPEC18, SS18, P("fsdp")), (SPEC18, SS18, P()),
        step18, (P18, S18, TOK18))
C.gspmd("g.chunked_prefill_row_offsets.dp2xtp4", {"dp": 2, "tp": 4},
        (P("dp"), P(None, "tp"), P(None, "tp"), P(None, "tp"), P("tp", None), P("dp", None, "tp"), P("dp", None, "tp"), P()),
        (P("dp"), P("dp", None, "tp"), P("dp", None, "tp")), prefill9,
        (R(B9, C9, D9), R(D9, H9 * E9, scale=0.2), R(D9, H9 * E9, scale=0.2), R(D9, H9 * E9, scale=0.2),
         R(H9 * E9, D9, scale=0.2), R(B9, S9, H9, E9), R(B9, S9, H9, E9), np.array([3, 9, 0, 12], np.int32)))
C.finish()
