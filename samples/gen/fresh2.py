"""samples/fresh2: a second batch of programs as a user writes them, none of
them an idiom of samples/fresh, probe, train or wild: a RoPE + GQA block with
heads sharded, context parallelism with rotary positions, a sequence-parallel
SwiGLU MLP (all_gather / psum_scatter), Ulysses attention (all_to_all heads <->
sequence), ZeRO-2 Adam, global-norm clipping with an EMA on a 2-D mesh, a Flax
Linen mixer with logical axis rules, vmap inside shard_map, int8 weights with
per-channel scales, a KV-cache decode step over a sequence-sharded cache, a
bf16 z-loss, mixed partial reductions, one-hot segment sums, a cumulative mean
with a sharded norm, top-1 routing with a capacity, per-example gradients.
Each shard_map family has the bug variants a careless parallelisation makes.
Exported with scalify_jax.export_pair; every pair is also run by JAX on seeded
inputs and its manifest entry records the largest difference from the
single-device run ("numerics").
Run from the repository root: bash samples/gen/run_fresh2.sh [SUBSTR...]
(only the pairs whose name contains a SUBSTR; the others keep their entries).
"""
import sys
import numpy as np
import jax, jax.numpy as jnp
from jax import lax
from jax.sharding import NamedSharding, PartitionSpec as P
from scalify_jax._export import make_mesh
sys.path.insert(0, "samples/gen")  # run from the repository root (run_fresh2.sh)
from fresh_lib import Corpus, seeded  # noqa: E402

C = Corpus("samples/fresh2", "samples/gen/fresh2.py", "samples/gen/run_fresh2.sh", sys.argv[1:])
rng, R, I = seeded(1507)
psum, pmean, pmax, idx = lax.psum, lax.pmean, lax.pmax, lax.axis_index


def rmsnorm(x, g):
    return x * lax.rsqrt(jnp.mean(jnp.square(x), -1, keepdims=True) + 1e-6) * g


# ---------------------------------------------------------------------------
# 1. pre-norm attention block: RMSNorm, rotary embeddings, grouped-query
#    attention (8 query heads, 4 key/value heads), heads tensor-parallel,
#    batch data-parallel; the output projection is row-parallel.
HD = 4


def rotary(x, pos):
    half = x.shape[-1] // 2
    inv = 1.0 / (10000.0 ** (jnp.arange(half, dtype=jnp.float32) / half))
    ang = pos[:, None].astype(jnp.float32) * inv[None, :]
    c, s = jnp.cos(ang)[None, :, None, :], jnp.sin(ang)[None, :, None, :]
    x1, x2 = x[..., :half], x[..., half:]
    return jnp.concatenate([x1 * c - x2 * s, x2 * c + x1 * s], -1)


def gqa(q, k, v, qpos, kpos):
    rep = q.shape[2] // k.shape[2]
    k, v = jnp.repeat(k, rep, axis=2), jnp.repeat(v, rep, axis=2)
    s = jnp.einsum("bqhd,bkhd->bhqk", q, k) * (q.shape[-1] ** -0.5)
    s = jnp.where(kpos[None, :] <= qpos[:, None], s, -1e9)
    return jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(s, -1), v)


def qkv(h, wq, wk, wv, pos_rope):
    b, t, _ = h.shape
    q = rotary((h @ wq).reshape(b, t, -1, HD), pos_rope)
    k = rotary((h @ wk).reshape(b, t, -1, HD), pos_rope)
    return q, k, (h @ wv).reshape(b, t, -1, HD)


def rope_block(x, g, wq, wk, wv, wo):
    b, t, _ = x.shape
    pos = jnp.arange(t)
    q, k, v = qkv(rmsnorm(x, g), wq, wk, wv, pos)
    return x + gqa(q, k, v, pos, pos).reshape(b, t, -1) @ wo


def rope_block_tp(bug):
    def f(x, g, wq, wk, wv, wo):
        b, t, _ = x.shape
        pos = jnp.arange(t)
        q, k, v = qkv(rmsnorm(x, g), wq, wk, wv, pos)
        part = gqa(q, k, v, pos, pos).reshape(b, t, -1) @ wo
        return x + psum(part, "dp" if bug == "psum-wrong-axis" else "tp")
    return f


rope_specs = (P("dp"), P(), P(None, "tp"), P(None, "tp"), P(None, "tp"), P("tp", None))
rope_args = (R(4, 8, 32), 1.0 + R(32, scale=0.1), R(32, 32, scale=0.3), R(32, 16, scale=0.3),
             R(32, 16, scale=0.3), R(32, 32, scale=0.3))
C.smap("s.rope_gqa_block.dp2xtp4", {"dp": 2, "tp": 4}, rope_block_tp, rope_specs, P("dp"), rope_block, rope_args,
       bugs=[("psum-wrong-axis", ["wrong-collective-group", "missing-all-reduce"])])
C.gspmd("g.rope_gqa_block.dp2xtp4", {"dp": 2, "tp": 4}, rope_specs, P("dp"), rope_block, rope_args)

# ---------------------------------------------------------------------------
# 2. context parallelism: the sequence is sharded; each device applies the
#    rotary embedding at its global positions, gathers keys and values and
#    masks causally against its global query positions.
def cp_block(x, g, wq, wk, wv, wo):
    return rope_block(x, g, wq, wk, wv, wo)


def cp_tp(bug):
    def f(x, g, wq, wk, wv, wo):
        b, t, _ = x.shape
        off = idx("sp") * t
        qpos = jnp.arange(t) + off
        rope_pos = jnp.arange(t) if bug == "rope-no-offset" else qpos
        q, k, v = qkv(rmsnorm(x, g), wq, wk, wv, rope_pos)
        k, v = lax.all_gather(k, "sp", axis=1, tiled=True), lax.all_gather(v, "sp", axis=1, tiled=True)
        mask_pos = jnp.arange(t) if bug == "mask-no-offset" else qpos
        o = gqa(q, k, v, mask_pos, jnp.arange(k.shape[1]))
        return x + o.reshape(b, t, -1) @ wo
    return f


C.smap("s.rope_context_parallel.sp4", {"sp": 4}, cp_tp, (P(None, "sp"), P(), P(), P(), P(), P()), P(None, "sp"),
       cp_block, (R(2, 16, 16), 1.0 + R(16, scale=0.1), R(16, 16, scale=0.3), R(16, 8, scale=0.3),
                  R(16, 8, scale=0.3), R(16, 16, scale=0.3)),
       bugs=[("rope-no-offset", ["wrong-shard-dim"]), ("mask-no-offset", ["wrong-shard-dim"])])

# ---------------------------------------------------------------------------
# 3. SwiGLU MLP with sequence parallelism on a dp x tp mesh: the norm runs on
#    the sequence shard, all_gather over tp before the column-parallel matmuls,
#    psum_scatter back onto the sequence after the row-parallel one.
def swiglu(h, w1, w3, w2):
    return (jax.nn.silu(h @ w1) * (h @ w3)) @ w2


def swiglu_block(x, g, w1, w3, w2):
    return x + swiglu(rmsnorm(x, g), w1, w3, w2)


def swiglu_sp(bug):
    def f(x, g, w1, w3, w2):
        h = lax.all_gather(rmsnorm(x, g), "tp", axis=1, tiled=True)
        y = swiglu(h, w1, w3, w2)
        if bug == "bf16-reduce-scatter":
            return x + lax.psum_scatter(y.astype(jnp.bfloat16), "tp", scatter_dimension=1, tiled=True).astype(x.dtype)
        return x + lax.psum_scatter(y, "tp", scatter_dimension=1, tiled=True)
    return f


sw_specs = (P("dp", "tp"), P(), P(None, "tp"), P(None, "tp"), P("tp", None))
sw_args = (R(4, 8, 16), 1.0 + R(16, scale=0.1), R(16, 32, scale=0.3), R(16, 32, scale=0.3), R(32, 16, scale=0.3))
C.smap("s.swiglu_seqpar.dp2xtp4", {"dp": 2, "tp": 4}, swiglu_sp, sw_specs, P("dp", "tp"), swiglu_block, sw_args,
       bugs=[("bf16-reduce-scatter", ["dtype-mismatch"])])

SW_MESH = make_mesh({"dp": 2, "tp": 4})


def swiglu_block_wsc(x, g, w1, w3, w2):
    c = lambda a, *s: lax.with_sharding_constraint(a, NamedSharding(SW_MESH, P(*s)))
    h = c(rmsnorm(x, g), "dp", None, None)
    u = c(jax.nn.silu(h @ w1) * (h @ w3), "dp", None, "tp")
    return c(x + u @ w2, "dp", "tp", None)


C.gspmd("g.swiglu_seqpar_wsc.dp2xtp4", SW_MESH, sw_specs, P("dp", "tp"), swiglu_block_wsc, sw_args)

# ---------------------------------------------------------------------------
# 4. Ulysses attention: the sequence is sharded; all_to_all trades sequence
#    for heads so that each device attends over the whole sequence with its
#    heads, and trades back for the output projection.
NSP = 4


def mha(x, wq, wk, wv, wo):
    b, t, _ = x.shape
    sp = lambda w: (x @ w).reshape(b, t, -1, HD)
    pos = jnp.arange(t)
    o = gqa(sp(wq), sp(wk), sp(wv), pos, pos)
    return o.reshape(b, t, -1) @ wo


def ulysses(bug):
    def f(x, wq, wk, wv, wo):
        b, t, _ = x.shape

        def heads_in(w):
            a = (x @ w).reshape(b, t, NSP, -1, HD)
            if bug == "a2a-axes-swapped":
                a = lax.all_to_all(a, "sp", 1, 2)
            else:
                a = lax.all_to_all(a, "sp", 2, 1)
            return a.reshape(b, NSP * t, -1, HD)
        pos = jnp.arange(NSP * t)
        o = gqa(heads_in(wq), heads_in(wk), heads_in(wv), pos, pos)
        o = lax.all_to_all(o.reshape(b, NSP, t, -1, HD), "sp", 1, 2)
        return o.reshape(b, t, -1) @ wo
    return f


C.smap("s.ulysses_attn.sp4", {"sp": NSP}, ulysses, (P(None, "sp"), P(), P(), P(), P()), P(None, "sp"), mha,
       (R(2, 16, 16), R(16, 32, scale=0.3), R(16, 32, scale=0.3), R(16, 32, scale=0.3), R(32, 16, scale=0.3)),
       bugs=[("a2a-axes-swapped", ["wrong-shard-dim", "layout-mismatch"])])

# ---------------------------------------------------------------------------
# 5. ZeRO-2: replicated parameters, gradients reduce-scattered over dp, Adam
#    on each device's rows of every parameter (its moments are sharded), the
#    updated rows all-gathered.
B1, B2, LR = 0.9, 0.99, 1e-2


def mlp_loss(p, x, y):
    return jnp.mean((jnp.tanh(x @ p["w1"] + p["b1"]) @ p["w2"] - y) ** 2)


def adam_rows(p, g, m, v, step):
    m = B1 * m + (1 - B1) * g
    v = B2 * v + (1 - B2) * g * g
    mh, vh = m / (1 - B1 ** step), v / (1 - B2 ** step)
    return p - LR * mh / (jnp.sqrt(vh) + 1e-8), m, v


def zero2_step(p, m, v, step, x, y):
    g = jax.grad(mlp_loss)(p, x, y)
    out = {k: adam_rows(p[k], g[k], m[k], v[k], step) for k in p}
    return ({k: o[0] for k, o in out.items()}, {k: o[1] for k, o in out.items()},
            {k: o[2] for k, o in out.items()})


def zero2(bug):
    def f(p, m, v, step, x, y):
        g = jax.grad(mlp_loss)(p, x, y)
        n = psum(1, "dp")
        new_p, new_m, new_v = {}, {}, {}
        for k in p:
            gs = lax.psum_scatter(g[k], "dp", scatter_dimension=0, tiled=True)
            if bug != "scatter-no-mean":
                gs = gs / n
            rows = gs.shape[0]
            start = 0 if bug == "slice-no-offset" else idx("dp") * rows
            ps = lax.dynamic_slice_in_dim(p[k], start, rows, 0)
            ps, new_m[k], new_v[k] = adam_rows(ps, gs, m[k], v[k], step)
            new_p[k] = lax.all_gather(ps, "dp", axis=0, tiled=True)
        return new_p, new_m, new_v
    return f


z_p = {"w1": R(8, 16, scale=0.3), "b1": R(16, scale=0.1), "w2": R(16, 8, scale=0.3)}
z_m = {k: R(*a.shape, scale=0.01) for k, a in z_p.items()}
z_v = {k: np.abs(R(*a.shape, scale=0.01)) for k, a in z_p.items()}
rowsh = {k: P("dp") for k in z_p}
rep = {k: P() for k in z_p}
C.smap("s.zero2_adam.dp4", {"dp": 4}, zero2, (rep, rowsh, rowsh, P(), P("dp"), P("dp")), (rep, rowsh, rowsh),
       zero2_step, (z_p, z_m, z_v, np.float32(3.0), R(16, 8), R(16, 8)),
       bugs=[("scatter-no-mean", ["constant-mismatch"]), ("slice-no-offset", ["wrong-shard-dim"])])

# ---------------------------------------------------------------------------
# 6. clipping by the global gradient norm, SGD, then an EMA of the parameters,
#    on an fsdp x tp mesh: each squared norm is summed over the axes its
#    parameter is sharded on, and over no other.
def clip_ema(w1, w2, b, g1, g2, gb, e1, e2, eb):
    n = jnp.sqrt(jnp.sum(g1 * g1) + jnp.sum(g2 * g2) + jnp.sum(gb * gb))
    s = 0.05 * jnp.minimum(1.0, 2.0 / (n + 1e-6))
    w1, w2, b = w1 - s * g1, w2 - s * g2, b - s * gb
    ema = lambda e, w: 0.99 * e + 0.01 * w
    return w1, w2, b, ema(e1, w1), ema(e2, w2), ema(eb, b)


def clip_ema_2d(bug):
    def f(w1, w2, b, g1, g2, gb, e1, e2, eb):
        both = ("tp",) if bug == "norm-psum-one-axis" else ("fsdp", "tp")
        sq = psum(jnp.sum(g1 * g1) + jnp.sum(g2 * g2), both) + psum(jnp.sum(gb * gb), "tp")
        s = 0.05 * jnp.minimum(1.0, 2.0 / (jnp.sqrt(sq) + 1e-6))
        w1, w2, b = w1 - s * g1, w2 - s * g2, b - s * gb
        ema = lambda e, w: 0.99 * e + 0.01 * w
        return w1, w2, b, ema(e1, w1), ema(e2, w2), ema(eb, b)
    return f


ce_w = (P("fsdp", "tp"), P("tp", "fsdp"), P("tp"))
ce_args = (R(16, 32, scale=0.3), R(32, 16, scale=0.3), R(32, scale=0.1), R(16, 32, scale=0.2), R(32, 16, scale=0.2),
           R(32, scale=0.2), R(16, 32, scale=0.3), R(32, 16, scale=0.3), R(32, scale=0.1))
C.smap("s.clip_ema.fsdp2xtp4", {"fsdp": 2, "tp": 4}, clip_ema_2d, ce_w * 3, ce_w * 2, clip_ema, ce_args,
       bugs=[("norm-psum-one-axis", ["wrong-collective-group", "missing-all-reduce"])])
C.gspmd("g.clip_ema.fsdp2xtp4", {"fsdp": 2, "tp": 4}, ce_w * 3, ce_w * 2, clip_ema, ce_args)

# ---------------------------------------------------------------------------
# 7. a Flax Linen MLP-Mixer block, parameters and activations annotated with
#    logical axis names, mapped onto a dp x tp mesh by logical axis rules;
#    the loss and its gradient.
import flax.linen as nn  # noqa: E402

MIX_MESH = make_mesh({"dp": 2, "tp": 4})
RULES = (("batch", "dp"), ("mlp", "tp"), ("embed", None), ("seq", None), ("tokmlp", "tp"))


class MixerBlock(nn.Module):
    @nn.compact
    def __call__(self, x):
        init = lambda names: nn.with_logical_partitioning(nn.initializers.normal(0.3), names)
        y = nn.LayerNorm(use_scale=False, use_bias=False)(x)
        y = jnp.swapaxes(y, 1, 2)
        y = nn.Dense(16, kernel_init=init(("seq", "tokmlp")), use_bias=False)(y)
        y = nn.Dense(x.shape[1], kernel_init=init(("tokmlp", "seq")), use_bias=False)(jax.nn.gelu(y))
        x = x + jnp.swapaxes(y, 1, 2)
        x = nn.with_logical_constraint(x, ("batch", "seq", "embed"), mesh=MIX_MESH)
        y = nn.Dense(32, kernel_init=init(("embed", "mlp")), use_bias=False)(nn.RMSNorm()(x))
        y = nn.with_logical_constraint(jax.nn.gelu(y), ("batch", "seq", "mlp"), mesh=MIX_MESH)
        return x + nn.Dense(x.shape[-1], kernel_init=init(("mlp", "embed")), use_bias=False)(y)


mixer = MixerBlock()
mix_x = R(8, 8, 16)
mix_boxed = mixer.init(jax.random.PRNGKey(0), mix_x)
mix_params = nn.unbox(mix_boxed)
with nn.logical_axis_rules(RULES):
    mix_pspec = nn.logical_to_mesh(nn.get_partition_spec(mix_boxed))


def mixer_loss_grad(params, x):
    with nn.logical_axis_rules(RULES):
        return jax.value_and_grad(lambda p: jnp.mean(mixer.apply(p, x) ** 2))(params)


C.gspmd("g.linen_mixer_logical.dp2xtp4", MIX_MESH, (mix_pspec, P("dp")), (P(), mix_pspec), mixer_loss_grad,
        (mix_params, mix_x))

# ---------------------------------------------------------------------------
# 8. vmap inside shard_map: a per-example function (softmax over a vocab
#    sharded on tp, its entropy) written for one example and vmapped over the
#    local batch; its collectives run inside the vmap.
def probs_entropy(x, w):
    p = jax.nn.softmax(x @ w, -1)
    return p, -jnp.sum(p * jnp.log(p), -1)


def vmap_tp(bug):
    def one(xi, w):
        z = xi @ w
        z = z - pmax(jnp.max(z), "tp")
        e = jnp.exp(z)
        den = jnp.sum(e) if bug == "local-norm" else psum(jnp.sum(e), "tp")
        p = e / den
        return p, -psum(jnp.sum(p * jnp.log(p)), "tp")
    return lambda x, w: jax.vmap(one, in_axes=(0, None))(x, w)


C.smap("s.vmap_softmax_entropy.tp4", {"tp": 4}, vmap_tp, (P(), P(None, "tp")), (P(None, "tp"), P()), probs_entropy,
       (R(8, 16), R(16, 32, scale=0.5)), bugs=[("local-norm", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 9. int8 weights with per-output-channel f32 scales: a column-parallel layer
#    (weights and scales sharded together) and a row-parallel one (scales
#    applied after the psum); the dequantised matmuls accumulate in f32.
def int8_mlp(x, q1, s1, q2, s2):
    h = jax.nn.relu(x @ (q1.astype(jnp.float32) * s1))
    return (h @ q2.astype(jnp.float32)) * s2


def int8_tp(bug):
    def f(x, q1, s1, q2, s2):
        if bug == "bf16-dequant":
            xb = x.astype(jnp.bfloat16)
            h = jax.nn.relu(xb @ (q1.astype(jnp.bfloat16) * s1.astype(jnp.bfloat16)))
            return psum(h @ q2.astype(jnp.bfloat16), "tp").astype(jnp.float32) * s2
        h = jax.nn.relu(x @ (q1.astype(jnp.float32) * s1))
        return psum(h @ q2.astype(jnp.float32), "tp") * s2
    return f


i8_args = (R(8, 16), I(-127, 128, 16, 32).astype(np.int8), np.abs(R(32, scale=0.01)) + 0.005,
           I(-127, 128, 32, 16).astype(np.int8), np.abs(R(16, scale=0.01)) + 0.005)
C.smap("s.int8_dequant.tp4", {"tp": 4}, int8_tp, (P(), P(None, "tp"), P("tp"), P("tp", None), P()), P(), int8_mlp,
       i8_args, bugs=[("bf16-dequant", ["dtype-mismatch"])])
C.gspmd("g.int8_dequant.dp2xtp4", {"dp": 2, "tp": 4}, (P("dp"), P(None, "tp"), P("tp"), P("tp", None), P()), P("dp"),
        int8_mlp, i8_args)

# ---------------------------------------------------------------------------
# 10. one decode step with a KV cache: the new key/value written at position
#     pos with dynamic_update_slice, attention over positions <= pos.
#     Sequence-sharded cache (flash-decoding style: the owner writes, the
#     softmax spans devices) and, under GSPMD, heads and batch sharded.
def decode(x, kc, vc, pos, wq, wk, wv, wo):
    b, s, h, d = kc.shape
    q, k, v = ((x @ w).reshape(b, h, d) for w in (wq, wk, wv))
    kc = lax.dynamic_update_slice(kc, k[:, None], (0, pos, 0, 0))
    vc = lax.dynamic_update_slice(vc, v[:, None], (0, pos, 0, 0))
    sc = jnp.einsum("bhd,bshd->bhs", q, kc) * d ** -0.5
    sc = jnp.where(jnp.arange(s) <= pos, sc, -1e9)
    o = jnp.einsum("bhs,bshd->bhd", jax.nn.softmax(sc, -1), vc)
    return o.reshape(b, -1) @ wo, kc, vc


def decode_sp(bug):
    def f(x, kc, vc, pos, wq, wk, wv, wo):
        b, sl, h, d = kc.shape
        q, k, v = ((x @ w).reshape(b, h, d) for w in (wq, wk, wv))
        off = idx("sp") * sl
        if bug == "write-no-offset":
            kc = lax.dynamic_update_slice(kc, k[:, None], (0, pos, 0, 0))
            vc = lax.dynamic_update_slice(vc, v[:, None], (0, pos, 0, 0))
        else:
            lp = pos - off
            mine = (lp >= 0) & (lp < sl)
            kc = jnp.where(mine, lax.dynamic_update_slice(kc, k[:, None], (0, lp, 0, 0)), kc)
            vc = jnp.where(mine, lax.dynamic_update_slice(vc, v[:, None], (0, lp, 0, 0)), vc)
        sc = jnp.einsum("bhd,bshd->bhs", q, kc) * d ** -0.5
        sc = jnp.where(jnp.arange(sl) + off <= pos, sc, -1e9)
        if bug == "local-softmax":
            o = psum(jnp.einsum("bhs,bshd->bhd", jax.nn.softmax(sc, -1), vc), "sp")
        else:
            m = pmax(jnp.max(sc, -1, keepdims=True), "sp")
            e = jnp.exp(sc - m)
            o = psum(jnp.einsum("bhs,bshd->bhd", e, vc), "sp") / psum(jnp.sum(e, -1), "sp")[..., None]
        return o.reshape(b, -1) @ wo, kc, vc
    return f


dec_args = (R(2, 16), R(2, 16, 4, 4), R(2, 16, 4, 4), np.int32(9), R(16, 16, scale=0.3), R(16, 16, scale=0.3),
            R(16, 16, scale=0.3), R(16, 16, scale=0.3))
C.smap("s.kv_decode_seqsharded.sp4", {"sp": 4}, decode_sp,
       (P(), P(None, "sp"), P(None, "sp"), P(), P(), P(), P(), P()), (P(), P(None, "sp"), P(None, "sp")), decode,
       dec_args, bugs=[("write-no-offset", ["wrong-shard-dim"]), ("local-softmax", ["missing-all-reduce"])])
C.gspmd("g.kv_decode_heads.dp2xtp4", {"dp": 2, "tp": 4},
        (P("dp"), P("dp", None, "tp"), P("dp", None, "tp"), P(), P(None, "tp"), P(None, "tp"), P(None, "tp"),
         P("tp", None)), (P("dp"), P("dp", None, "tp"), P("dp", None, "tp")), decode, dec_args)

# ---------------------------------------------------------------------------
# 11. cross-entropy with z-loss on bf16 logits over a vocab sharded on tp:
#     the baseline upcasts to f32 for the logsumexp; so must each device.
def zloss_bf16(logits, labels):
    lf = logits.astype(jnp.float32)
    lse = jax.nn.logsumexp(lf, -1)
    lab = jnp.take_along_axis(lf, labels[:, None], -1)[:, 0]
    return jnp.mean(lse - lab + 1e-4 * lse ** 2), lse


def zloss_bf16_tp(bug):
    def f(logits, labels):
        vl = logits.shape[-1]
        lf = logits.astype(jnp.float32)
        m = pmax(jnp.max(lf, -1), "tp")
        if bug == "bf16-psum":
            se = psum(jnp.sum(jnp.exp(logits - m[:, None].astype(jnp.bfloat16)), -1), "tp").astype(jnp.float32)
        else:
            se = psum(jnp.sum(jnp.exp(lf - m[:, None]), -1), "tp")
        lse = m + jnp.log(se)
        loc = labels - idx("tp") * vl
        hit = (loc >= 0) & (loc < vl)
        lab = jnp.take_along_axis(lf, jnp.clip(loc, 0, vl - 1)[:, None], -1)[:, 0]
        lab = psum(jnp.where(hit, lab, 0.0), "tp")
        return jnp.mean(lse - lab + 1e-4 * lse ** 2), lse
    return f


C.smap("s.zloss_bf16_vocab.tp4", {"tp": 4}, zloss_bf16_tp, (P(None, "tp"), P()), (P(), P()), zloss_bf16,
       (R(16, 128, scale=3.0).astype(jnp.bfloat16), I(0, 128, 16)), bugs=[("bf16-psum", ["dtype-mismatch"])])

# ---------------------------------------------------------------------------
# 12. partial reductions on a dp x tp mesh: a column mean and a column sum
#     over the batch (dp), a row max over the features (tp), and the mean of
#     the row maxima.
def col_row_stats(x):
    rmax = jnp.max(x, 1)
    return jnp.mean(x, 0), jnp.sum(x, 0), rmax, jnp.mean(rmax)


def col_row_2d(bug):
    def f(x):
        batch, feat = ("tp", "dp") if bug == "axes-swapped" else ("dp", "tp")
        rmax = pmax(jnp.max(x, 1), feat)
        csum = jnp.sum(x, 0)
        csum = pmean(csum, "dp") if bug == "pmean-for-sum" else psum(csum, "dp")
        return pmean(jnp.mean(x, 0), batch), csum, rmax, pmean(jnp.mean(rmax), "dp")
    return f


C.smap("s.col_row_stats.dp2xtp4", {"dp": 2, "tp": 4}, col_row_2d, (P("dp", "tp"),), (P("tp"), P("tp"), P("dp"), P()),
       col_row_stats, (R(8, 16),),
       bugs=[("axes-swapped", ["wrong-collective-group"]), ("pmean-for-sum", ["wrong-reduction", "constant-mismatch"])])
C.gspmd("g.col_row_stats.dp2xtp4", {"dp": 2, "tp": 4}, (P("dp", "tp"),), (P("tp"), P("tp"), P("dp"), P()),
        col_row_stats, (R(8, 16),))

# ---------------------------------------------------------------------------
# 13. segment sums and means through a one-hot matmul, rows data-parallel
NSEG = 6


def segment_stats(x, seg):
    oh = jax.nn.one_hot(seg, NSEG, dtype=x.dtype)
    sums, counts = oh.T @ x, jnp.sum(oh, 0)
    return sums, sums / jnp.maximum(counts, 1.0)[:, None]


def segment_dp(bug):
    def f(x, seg):
        oh = jax.nn.one_hot(seg, NSEG, dtype=x.dtype)
        sums = (pmean if bug == "pmean-for-psum" else psum)(oh.T @ x, "dp")
        counts = psum(jnp.sum(oh, 0), "dp")
        return sums, sums / jnp.maximum(counts, 1.0)[:, None]
    return f


C.smap("s.segment_onehot.dp4", {"dp": 4}, segment_dp, (P("dp"), P("dp")), (P(), P()), segment_stats,
       (R(16, 8), I(0, NSEG, 16)), bugs=[("pmean-for-psum", ["wrong-reduction"])])

# ---------------------------------------------------------------------------
# 14. a causal running mean (cumsum along the unsharded sequence axis) and an
#     RMS norm over the features sharded on tp
def running_rms(x):
    c = jnp.cumsum(x, 1) / jnp.arange(1, x.shape[1] + 1, dtype=x.dtype)[:, None]
    return c * lax.rsqrt(jnp.mean(c * c, -1, keepdims=True) + 1e-6)


def running_rms_2d(bug):
    def f(x):
        c = jnp.cumsum(x, 1) / jnp.arange(1, x.shape[1] + 1, dtype=x.dtype)[:, None]
        if bug == "norm-local-shard":
            ms = jnp.mean(c * c, -1, keepdims=True)
        else:
            ms = psum(jnp.sum(c * c, -1, keepdims=True), "tp") / (c.shape[-1] * psum(1, "tp"))
        return c * lax.rsqrt(ms + 1e-6)
    return f


C.smap("s.running_rms.dp2xtp4", {"dp": 2, "tp": 4}, running_rms_2d, (P("dp", None, "tp"),), P("dp", None, "tp"),
       running_rms, (R(4, 8, 16),), bugs=[("norm-local-shard", ["missing-all-reduce"])])
C.gspmd("g.running_rms.dp2xtp4", {"dp": 2, "tp": 4}, (P("dp", None, "tp"),), P("dp", None, "tp"), running_rms,
        (R(4, 8, 16),))

# ---------------------------------------------------------------------------
# 15. top-1 routing with an expert capacity: a token's slot in its expert is
#     its rank among all tokens routed there (a cumsum over the whole batch);
#     tokens past the capacity are dropped. Data-parallel tokens need the
#     counts of the devices before them; under GSPMD experts are sharded.
NEXP, CAP = 4, 5


def routed(x, wr, we):
    p = jax.nn.softmax(x @ wr, -1)
    oh = jax.nn.one_hot(jnp.argmax(p, -1), NEXP)
    slot = jnp.cumsum(oh, 0) * oh
    keep = oh * (slot <= CAP) * jnp.max(p, -1, keepdims=True)
    return jnp.einsum("ne,end->nd", keep, jnp.einsum("nd,edf->enf", x, we)), jnp.sum(oh * (slot <= CAP), 0)


def routed_dp(bug):
    def f(x, wr, we):
        p = jax.nn.softmax(x @ wr, -1)
        oh = jax.nn.one_hot(jnp.argmax(p, -1), NEXP)
        counts = lax.all_gather(jnp.sum(oh, 0), "dp")
        before = jnp.sum(jnp.where((jnp.arange(counts.shape[0]) < idx("dp"))[:, None], counts, 0.0), 0)
        slot = jnp.cumsum(oh, 0) if bug == "capacity-local-cumsum" else jnp.cumsum(oh, 0) + before
        slot = slot * oh
        keep = oh * (slot <= CAP) * jnp.max(p, -1, keepdims=True)
        y = jnp.einsum("ne,end->nd", keep, jnp.einsum("nd,edf->enf", x, we))
        return y, psum(jnp.sum(oh * (slot <= CAP), 0), "dp")
    return f


rt_args = (R(16, 8), R(8, NEXP), R(NEXP, 8, 8, scale=0.3))
C.smap("s.capacity_routing.dp4", {"dp": 4}, routed_dp, (P("dp"), P(), P()), (P("dp"), P()), routed, rt_args,
       bugs=[("capacity-local-cumsum", ["wrong-shard-dim"])])
C.gspmd("g.capacity_routing.dp2xep4", {"dp": 2, "ep": 4}, (P("dp"), P(), P("ep")), (P("dp"), P()), routed, rt_args)

# ---------------------------------------------------------------------------
# 16. per-example gradients (vmap of grad), clipped per example and averaged
#     (DP-SGD), batch on dp under GSPMD
def ex_loss(w, x, y):
    return jnp.sum((jnp.tanh(x @ w["a"]) @ w["b"] - y) ** 2)


def dpsgd(w, x, y):
    g = jax.vmap(jax.grad(ex_loss), in_axes=(None, 0, 0))(w, x, y)
    norm = jnp.sqrt(sum(jnp.sum(a.reshape(a.shape[0], -1) ** 2, -1) for a in jax.tree.leaves(g)))
    f = jnp.minimum(1.0, 1.0 / (norm + 1e-6))
    upd = jax.tree.map(lambda a: jnp.mean(a * f.reshape((-1,) + (1,) * (a.ndim - 1)), 0), g)
    return jax.tree.map(lambda p, u: p - 0.1 * u, w, upd), norm


C.gspmd("g.per_example_clip.dp8", {"dp": 8}, ({"a": P(), "b": P()}, P("dp"), P("dp")), ({"a": P(), "b": P()}, P("dp")),
        dpsgd, ({"a": R(8, 16, scale=0.3), "b": R(16, 4, scale=0.3)}, R(16, 8), R(16, 4)))

# ---------------------------------------------------------------------------
# 17. top-k over a vocab sharded on tp: each device's top k (its indices
#     offset to global ones), gathered, and the top k of those
TOPK = 4


def topk_vocab(logits):
    return tuple(lax.top_k(logits, TOPK))


def topk_tp(bug):
    def f(logits):
        v, i = lax.top_k(logits, TOPK)
        if bug != "index-no-offset":
            i = i + idx("tp") * logits.shape[-1]
        gv = lax.all_gather(v, "tp", axis=1, tiled=True)
        gi = lax.all_gather(i, "tp", axis=1, tiled=True)
        tv, ti = lax.top_k(gv, TOPK)
        return tv, jnp.take_along_axis(gi, ti, 1)
    return f


C.smap("s.topk_vocab.tp4", {"tp": 4}, topk_tp, (P(None, "tp"),), (P(), P()), topk_vocab, (R(8, 64),),
       bugs=[("index-no-offset", ["wrong-shard-dim"])])
C.gspmd("g.topk_sort.dp2xtp4", {"dp": 2, "tp": 4}, (P("dp", "tp"),), (P("dp"), P("dp"), P("dp", "tp"), P("dp", "tp")),
        lambda x: tuple(lax.top_k(x, TOPK)) + (jnp.sort(x, -1), jnp.argsort(x, -1).astype(jnp.int32)), (R(8, 32),))

# ---------------------------------------------------------------------------
# 18. a linear recurrence h_t = a_t h_(t-1) + b_t (an SSM / RG-LRU layer) over
#     a sequence sharded on sp: each device scans its chunk from zero, the
#     chunks' (decay, end state) pairs are gathered, and the state entering
#     each chunk is folded in with the chunk's cumulative decay.
def recurrence(a, b):
    def step(h, ab):
        h = ab[0] * h + ab[1]
        return h, h
    _, hs = lax.scan(step, jnp.zeros(a.shape[::2], a.dtype), (jnp.swapaxes(a, 0, 1), jnp.swapaxes(b, 0, 1)))
    return jnp.swapaxes(hs, 0, 1)


def recurrence_sp(bug):
    def f(a, b):
        hl = recurrence(a, b)
        decay = jnp.cumprod(a, 1)
        tot_a = lax.all_gather(decay[:, -1], "sp")
        tot_h = lax.all_gather(hl[:, -1], "sp")
        h_in = jnp.zeros_like(hl[:, 0])
        for j in range(tot_a.shape[0]):
            before = j < idx("sp")
            h_in = jnp.where(before, tot_a[j] * h_in + tot_h[j], h_in)
        if bug == "carry-no-decay":
            return hl + h_in[:, None]
        return hl + decay * h_in[:, None]
    return f


rec_args = (jax.nn.sigmoid(R(2, 16, 8) + 1.0), R(2, 16, 8))
C.smap("s.linear_recurrence.sp4", {"sp": 4}, recurrence_sp, (P(None, "sp"), P(None, "sp")), P(None, "sp"), recurrence,
       rec_args, bugs=[("carry-no-decay", ["layout-mismatch"])])

# ---------------------------------------------------------------------------
# 19. a causal depthwise conv1d (a Mamba block's short conv) over a sequence
#     sharded on sp: hand-written halo exchange with ppermute (the previous
#     device's last K-1 steps; zeros on the first), and under GSPMD
#     lax.conv_general_dilated with the sequence and the channels sharded.
KC = 3


def causal_conv(x, w):
    t = x.shape[1]
    xp = jnp.pad(x, ((0, 0), (KC - 1, 0), (0, 0)))
    return sum(w[j] * xp[:, KC - 1 - j:KC - 1 - j + t] for j in range(KC))


def causal_conv_sp(bug):
    def f(x, w):
        n, t = psum(1, "sp"), x.shape[1]
        if bug == "halo-wrong-direction":
            perm = [(i + 1, i) for i in range(n - 1)]
        else:
            perm = [(i, i + 1) for i in range(n - 1)]
        halo = lax.ppermute(x[:, t - (KC - 1):], "sp", perm)
        xe = jnp.concatenate([halo, x], 1)
        return sum(w[j] * xe[:, KC - 1 - j:KC - 1 - j + t] for j in range(KC))
    return f


conv_args = (R(2, 16, 8), R(KC, 8, scale=0.5))
C.smap("s.causal_conv_halo.sp4", {"sp": 4}, causal_conv_sp, (P(None, "sp"), P()), P(None, "sp"), causal_conv, conv_args,
       bugs=[("halo-wrong-direction", ["wrong-collective-group"])])


def causal_conv_lax(x, w):
    k = w[::-1, None, :]  # WIO with feature groups = channels
    return lax.conv_general_dilated(x, k, (1,), [(KC - 1, 0)], dimension_numbers=("NWC", "WIO", "NWC"),
                                    feature_group_count=x.shape[-1])


C.gspmd("g.causal_conv_lax.sp2xtp4", {"sp": 2, "tp": 4}, (P(None, "sp", "tp"), P(None, "tp")), P(None, "sp", "tp"),
        causal_conv_lax, conv_args)

# ---------------------------------------------------------------------------
# 20. power iteration with a fori_loop: a row-sharded matrix times a
#     replicated vector, the pieces gathered and normalised every step
def power_iter(a, v):
    def body(_, v):
        w = a @ v
        return w / jnp.linalg.norm(w)
    return lax.fori_loop(0, 4, body, v)


def power_iter_tp(bug):
    def f(a, v):
        def body(_, v):
            w = a @ v
            if bug == "norm-local-shard":
                return lax.all_gather(w / jnp.linalg.norm(w), "tp", tiled=True)
            w = lax.all_gather(w, "tp", tiled=True)
            return w / jnp.linalg.norm(w)
        return lax.fori_loop(0, 4, body, v)
    return f


pw_args = (R(16, 16) + 2.0 * np.eye(16, dtype=np.float32), R(16))
C.smap("s.power_iteration.tp4", {"tp": 4}, power_iter_tp, (P("tp"), P()), P(), power_iter, pw_args,
       bugs=[("norm-local-shard", ["missing-all-reduce"])])
C.gspmd("g.power_iteration.tp4", {"tp": 4}, (P("tp"), P()), P(), power_iter, pw_args)

# ---------------------------------------------------------------------------
# 21. argmax over a vocab sharded on tp: the local argmax at its global
#     index, the winner by pmax of the values, ties to the smallest index
def argmax_val(x):
    return jnp.argmax(x, -1).astype(jnp.int32), jnp.max(x, -1)


def argmax_tp(bug):
    def f(x):
        m = jnp.max(x, -1)
        a = jnp.argmax(x, -1).astype(jnp.int32) + idx("tp") * x.shape[-1]
        mm = pmax(m, "tp")
        return lax.pmin(jnp.where(m == mm, a, jnp.iinfo(jnp.int32).max), "tp"), mm
    return f


C.smap("s.argmax_vocab.tp4", {"tp": 4}, argmax_tp, (P(None, "tp"),), (P(), P()), argmax_val, (R(8, 64),))

# ---------------------------------------------------------------------------
# 22. GSPMD programs over ops the partitioner rewrites: scatter-add into a
#     histogram, a row gather from a sharded table, lax.cond on a global
#     statistic, flip and roll along a sharded axis, reshapes that merge
#     sharded dims, attention with the sequence sharded, a bf16 LayerNorm
#     over a sharded hidden dim.
C.gspmd("g.scatter_add_hist.dp4", {"dp": 4}, (P("dp"), P("dp")), P(),
        lambda ids, w: jnp.zeros((10,), jnp.float32).at[ids].add(w), (I(0, 10, 32), R(32)))
C.gspmd("g.take_rows.tp4", {"tp": 4}, (P("tp", None), P()), P(), lambda t, ids: jnp.take(t, ids, axis=0) * 2.0,
        (R(32, 8), I(0, 32, 4, 6)))


def clip_if_large(g):
    n = jnp.sqrt(jnp.sum(g * g))
    return lax.cond(n > 4.0, lambda x: x * (4.0 / n), lambda x: x, g), n


C.gspmd("g.cond_clip.dp2xtp4", {"dp": 2, "tp": 4}, (P("dp", "tp"),), (P("dp", "tp"), P()), clip_if_large, (R(8, 16),))
C.gspmd("g.flip_roll.sp4", {"sp": 4}, (P(None, "sp"),), (P(None, "sp"), P(None, "sp")),
        lambda x: (jnp.flip(x, 1), jnp.roll(x, 3, axis=1) - x), (R(2, 16, 4),))
C.gspmd("g.reshape_merge.dp2xtp4", {"dp": 2, "tp": 4}, (P("dp", "tp"),), (P("dp"), P()),
        lambda x: (x.reshape(8, 4, 4).transpose(0, 2, 1).reshape(8, 16) * 2.0, jnp.sum(x.reshape(-1)[::3])),
        (R(8, 16),))


def causal_attn(q, k, v):
    t = q.shape[1]
    s = jnp.einsum("bqd,bkd->bqk", q, k) / np.sqrt(q.shape[-1])
    s = jnp.where(jnp.tril(jnp.ones((t, t), bool)), s, -jnp.inf)
    return jax.nn.softmax(s, -1) @ v


C.gspmd("g.causal_attn_seq.sp4", {"sp": 4}, (P(None, "sp"), P(None, "sp"), P(None, "sp")), P(None, "sp"), causal_attn,
        (R(2, 16, 8), R(2, 16, 8), R(2, 16, 8)))


def layernorm_bf16(x, g, b):
    xf = x.astype(jnp.float32)
    mu = jnp.mean(xf, -1, keepdims=True)
    var = jnp.mean(jnp.square(xf - mu), -1, keepdims=True)
    return ((xf - mu) * lax.rsqrt(var + 1e-5) * g + b).astype(jnp.bfloat16)


C.gspmd("g.layernorm_bf16.dp2xtp4", {"dp": 2, "tp": 4}, (P("dp", "tp"), P("tp"), P("tp")), P("dp", "tp"), layernorm_bf16,
        (R(8, 32).astype(jnp.bfloat16), 1.0 + R(32, scale=0.1), R(32, scale=0.1)))

# ---------------------------------------------------------------------------
# 23. idioms of data-parallel code that are correct if odd: a pmean of a value
#     already replicated, one's own copy picked out of an all_gather, an
#     all-reduce written as reduce-scatter + all-gather, lax.axis_size for the
#     device count, the global batch statistics of a vmapped per-example
#     function (pmean over the vmap axis and the mesh axis together).
def dp_idioms(w, x):
    g = jnp.mean(x, 0) * w
    return w * 0.5, g, jnp.sum(x * x, 0), (x - jnp.mean(x, 0)) / jnp.sqrt(jnp.var(x, 0) + 1e-5)


def dp_idioms_dp(bug):
    def f(w, x):
        n = lax.axis_size("dp")
        w_again = pmean(w, "dp") * 0.5
        mine = lax.all_gather(w, "dp")[idx("dp")]
        g = lax.all_gather(lax.psum_scatter(jnp.sum(x, 0), "dp", tiled=True), "dp", tiled=True)
        g = g / (x.shape[0] * n) * mine
        sq = lax.all_gather(lax.psum_scatter(jnp.sum(x * x, 0), "dp", tiled=True), "dp", tiled=True)

        def norm(xi):
            mu = pmean(xi, ("b", "dp"))
            var = pmean(jnp.square(xi - mu), ("b", "dp"))
            return (xi - mu) / jnp.sqrt(var + 1e-5)
        return w_again, g, sq, jax.vmap(norm, axis_name="b")(x)
    return f


C.smap("s.dp_idioms.dp4", {"dp": 4}, dp_idioms_dp, (P(), P("dp")), (P(), P(), P(), P("dp")), dp_idioms,
       (R(16), R(16, 16)))

# ---------------------------------------------------------------------------
# 24. a data-parallel step with check_vma=True: jax.grad of the replicated
#     weights inside shard_map comes back summed over dp (JAX transposes the
#     implicit pvary into a psum); the user divides by the device count.
def dp_vma_step(w, x, y):
    g = jax.grad(lambda w: jnp.mean((jnp.tanh(x @ w) - y) ** 2))(w)
    return w - 0.1 * g


def dp_vma(bug):
    def f(w, x, y):
        g = jax.grad(lambda w: jnp.mean((jnp.tanh(x @ w) - y) ** 2))(w)
        if bug != "no-divide":
            g = g / lax.axis_size("dp")
        return w - 0.1 * g
    return f


C.smap("s.dp_grad_vma.dp4", {"dp": 4}, dp_vma, (P(), P("dp"), P("dp")), P(), dp_vma_step, (R(8, 8, scale=0.3), R(16, 8),
       R(16, 8)), bugs=[("no-divide", ["constant-mismatch"])], check_vma=True)

# ---------------------------------------------------------------------------
# 25. vocab-parallel code that masks through the ops' own out-of-range
#     behaviour: the label logit through one_hot of the shifted label (all
#     zeros off the shard), the embedding rows through take(mode="fill"), the
#     embedding gradient through .at[].add(mode="drop"); negative indices
#     must be moved out of range first (jnp wraps them).
def vocab_ops(logits, labels, table, ids, gout):
    lab = jnp.take_along_axis(logits, labels[:, None], -1)[:, 0]
    grad = jnp.zeros(table.shape, table.dtype).at[ids].add(gout)
    return lab, jnp.take(table, ids, axis=0), grad


def vocab_ops_tp(bug):
    def f(logits, labels, table, ids, gout):
        vl, tl = logits.shape[-1], table.shape[0]
        lab = psum(jnp.sum(logits * jax.nn.one_hot(labels - idx("tp") * vl, vl), -1), "tp")
        loc = ids - idx("tp") * tl
        if bug != "negative-wraps":
            loc = jnp.where(loc < 0, tl, loc)  # jnp indexing wraps negative indices
        rows = psum(jnp.take(table, loc, axis=0, mode="fill", fill_value=0.0), "tp")
        if bug == "ids-no-offset":
            loc = ids
        grad = jnp.zeros(table.shape, table.dtype).at[loc].add(gout, mode="drop")
        return lab, rows, grad
    return f


C.smap("s.vocab_oob_masking.tp4", {"tp": 4}, vocab_ops_tp, (P(None, "tp"), P(), P("tp"), P(), P()),
       (P(), P(), P("tp")), vocab_ops, (R(8, 32), I(0, 32, 8), R(32, 4), I(0, 32, 6), R(6, 4)),
       bugs=[("ids-no-offset", ["wrong-shard-dim"]), ("negative-wraps", ["wrong-shard-dim"])])

# ---------------------------------------------------------------------------
# 26. gradients through collectives with check_vma=True, as JAX writes their
#     transposes: the loss and logit gradient of a vocab-parallel
#     cross-entropy, a Megatron MLP's weight and input gradients, and FSDP
#     (an all_gather of the weight rows in the forward, its transpose a
#     reduce-scatter of the gradient, divided by the device count).
def xent_vg(logits, labels):
    def loss(z):
        lse = jax.nn.logsumexp(z, -1)
        return jnp.mean(lse - jnp.take_along_axis(z, labels[:, None], -1)[:, 0])
    return jax.value_and_grad(loss)(logits)


def xent_vg_tp(bug):
    def f(logits, labels):
        def loss(z):
            vl = z.shape[-1]
            m = pmax(lax.stop_gradient(jnp.max(z, -1)), "tp")
            lse = m + jnp.log(psum(jnp.sum(jnp.exp(z - m[:, None]), -1), "tp"))
            lab = psum(jnp.sum(z * jax.nn.one_hot(labels - idx("tp") * vl, vl), -1), "tp")
            return jnp.mean(lse - lab)
        return jax.value_and_grad(loss)(logits)
    return f


C.smap("s.xent_grad_vma.tp4", {"tp": 4}, xent_vg_tp, (P(None, "tp"), P()), (P(), P(None, "tp")), xent_vg,
       (R(8, 32, scale=2.0), I(0, 32, 8)), check_vma=True)


def megatron_vg(x, w1, w2):
    return jax.value_and_grad(lambda x, a, b: jnp.sum(jax.nn.gelu(x @ a) @ b), argnums=(0, 1, 2))(x, w1, w2)


def megatron_vg_tp(bug):
    def f(x, w1, w2):
        return jax.value_and_grad(lambda x, a, b: jnp.sum(psum(jax.nn.gelu(x @ a) @ b, "tp")), argnums=(0, 1, 2))(x, w1, w2)
    return f


C.smap("s.megatron_grad_vma.tp4", {"tp": 4}, megatron_vg_tp, (P(), P(None, "tp"), P("tp", None)),
       (P(), (P(), P(None, "tp"), P("tp", None))), megatron_vg, (R(4, 8), R(8, 16, scale=0.3), R(16, 8, scale=0.3)),
       check_vma=True)


def fsdp_step(w, x, y):
    g = jax.grad(lambda w: jnp.mean((jnp.tanh(x @ w) - y) ** 2))(w)
    return w - 0.1 * g


def fsdp_vma(bug):
    def f(w, x, y):
        def loss(ws):
            wf = lax.all_gather(ws, "dp", axis=0, tiled=True)
            return jnp.mean((jnp.tanh(x @ wf) - y) ** 2)
        g = jax.grad(loss)(w)
        if bug != "no-divide":
            g = g / lax.axis_size("dp")
        return w - 0.1 * g
    return f


C.smap("s.fsdp_grad_vma.dp4", {"dp": 4}, fsdp_vma, (P("dp"), P("dp"), P("dp")), P("dp"), fsdp_step,
       (R(8, 8, scale=0.3), R(16, 8), R(16, 8)), bugs=[("no-divide", ["constant-mismatch"])], check_vma=True)

# ---------------------------------------------------------------------------
# 27. reductions in orders a user may pick: a pmean over dp of a value still
#     partial over tp and then the psum over tp, a mean of per-shard means,
#     a weighted sum of the shards by a device-dependent weight.
def reduce_orders(x, w):
    h = x @ w
    xs = x.reshape(x.shape[0], 4, -1)
    return jnp.mean(h, 0), jnp.mean(x, -1), jnp.einsum("bkd,k->bd", xs, jnp.arange(1.0, 5.0))


def reduce_orders_2d(bug):
    def f(x, w):
        h = psum(pmean(jnp.mean(x @ w, 0), "dp"), "tp")
        m = pmean(jnp.mean(x, -1), "tp")
        return h, m, psum(x * (idx("tp") + 1.0), "tp")
    return f


C.smap("s.reduce_orders.dp2xtp4", {"dp": 2, "tp": 4}, reduce_orders_2d, (P("dp", "tp"), P("tp", None)),
       (P(), P("dp"), P("dp")), reduce_orders, (R(8, 16), R(16, 8)))

# ---------------------------------------------------------------------------
# 28. GSPMD over what the partitioner pads, masks and reshards: dims the mesh
#     axis does not divide (sharding constraints inside the function), sums,
#     maxima and argmax over them, a concatenation along a sharded dim, a
#     data-dependent dynamic_slice and take_along_axis on sharded dims, an
#     einsum whose operands shard the contraction differently, positions from
#     iota arithmetic, an output sharded on another dim than the input.
U_MESH = make_mesh({"dp": 2, "tp": 4})


def cons(a, *spec):
    return lax.with_sharding_constraint(a, NamedSharding(U_MESH, P(*spec)))


def uneven_stats(x):
    y = cons(jnp.tanh(x) * 2.0, None, "tp")  # 6 columns over 4 devices
    return jnp.sum(y, -1), jnp.max(y, -1), jnp.argmax(y, -1).astype(jnp.int32), cons(y + 1.0, "dp", "tp")


C.gspmd("g.uneven_constraint.dp2xtp4", U_MESH, (P(),), (P(), P(), P(), P()), uneven_stats, (R(8, 6),))


def concat_slice(x, z, start, ids):
    c = jnp.concatenate([x, z * 2.0], 1)
    d = lax.dynamic_slice_in_dim(c, start, 8, 1)
    return c, d, jnp.take_along_axis(x, ids, 1)


C.gspmd("g.concat_dynslice.dp2xtp4", U_MESH, (P("dp", "tp"), P("dp", "tp"), P(), P("dp")),
        (P("dp", "tp"), P("dp"), P("dp")), concat_slice, (R(8, 16), R(8, 16), np.int32(5), I(0, 16, 8, 3)))
C.gspmd("g.einsum_reshard.dp2xtp4", U_MESH, (P("dp", "tp"), P(None, "dp")), P(None, "tp"),
        lambda a, b: jnp.einsum("ik,kj->ij", a, b), (R(8, 16), R(16, 8)))


def sinusoid(x):
    t, d = x.shape[1], x.shape[2]
    pos = jnp.arange(t)[:, None]
    i = jnp.arange(d)[None, :]
    ang = pos / (100.0 ** ((i // 2) * 2 / d))
    pe = jnp.where(i % 2 == 0, jnp.sin(ang), jnp.cos(ang))
    return x + pe


C.gspmd("g.sinusoid_pos.dp2xtp4", U_MESH, (P("dp", "tp", None),), P("dp", None, "tp"), sinusoid, (R(4, 8, 16),))

# positions over a sharded dim divided by a constant: each device's iota plus
# its offset is data to the lifting, the baseline's iota a constant
def iota_terms(x):
    d = x.shape[-1]
    i = jnp.arange(d)
    return x + (i // 2) * 2 / d, x * ((i // 2) * 2 / d), x + i / d


C.gspmd("g.iota_scaled.dp2xtp4", U_MESH, (P("dp", "tp"),), (P("dp", "tp"),) * 3, iota_terms, (R(8, 16),))

# ---------------------------------------------------------------------------
C.finish()
