"""samples/fresh69: a 69th batch of programs as a user writes them, on the
theme of the attention blocks of recent open LLMs under tensor, sequence and
context parallelism in current JAX (DeepSeek multi-head latent attention with
low-rank compressed keys / values and decoupled rotary keys, its absorbed
decode form, GQA with more tensor-parallel ranks than kv heads, gpt-oss-style
attention sinks with sliding windows, differential attention, QK-norm, tanh
logit soft-capping, per-head sigmoid output gates, and their training steps
with jax.grad and optax.adamw), none of them an idiom of samples/fresh ..
fresh26, probe, train or wild.
shard_map families:
 1. MLA (DeepSeek-V2) on dp2 x tp4: queries from a low-rank latent (down-proj,
    RMSNorm, per-head up-proj into a "nope" and a rotary part), keys / values
    from a shared compressed latent c_kv (down-proj, RMSNorm, per-head
    up-projections) plus ONE rotary key shared by all heads (decoupled RoPE);
    the down-projections and the rotary key replicated, the up-projections
    and the output projection split by head over tp; psum of the output.
    Bugs: no psum of the output, scale 1/sqrt(d_nope) instead of
    1/sqrt(d_nope + d_rope), pmean instead of psum.
 2. MLA under context parallelism (sp4): each device computes the compressed
    latent and the rotary key of its block at global positions, and
    all_gathers only those (the point of MLA: a small cache to move), then
    up-projects the gathered latent; causal mask at global positions. Bugs:
    rotary key rotated at local positions, causal mask from local query
    positions.
 3. MLA decode in absorbed form (W_uk folded into the query, W_uv applied
    after the latent readout), the bf16 latent cache and rotary-key cache
    over sp4 (flash-decoding): per-device scores with per-row cache lengths
    at global positions, pmax of the maxima, psum of denominators and of the
    latent readouts. Bugs: lengths compared with local cache positions, the
    local maximum used (no pmax), denominator not psum'd.
 4. gpt-oss-style attention on tp8: 8 query heads (one per rank), 2 kv heads
    whose projections are replicated, rank r takes kv head r // 4 by
    lax.dynamic_index_in_dim; a learned per-head sink logit (passed
    replicated, sliced at the rank's head) joins the softmax denominator;
    sliding window 3 causal mask; output psum'd. Bugs: sinks sliced at head
    0, kv head from r // n_kv (the ratio the wrong way round), window 4.
 5. sliding window (3) with sinks under context parallelism (sp4): the left
    neighbour's last 2 keys / values by a non-cyclic ppermute, the halo
    masked on device 0; sink logit per head. Bugs: halo from the right
    neighbour, cyclic ppermute with the halo left unmasked on device 0.
 6. differential attention (DIFF Transformer) on dp2 x tp4 with 8 heads (2
    per rank): two softmax maps per head, A1 - lambda A2 with lambda =
    exp(lq1.lk1) - exp(lq2.lk2) + lambda_init (replicated lambda vectors),
    per-head RMS sub-norm times (1 - lambda_init), output psum'd. Bugs:
    A1 + lambda A2, the sub-norm over both local heads jointly, pmean for
    psum.
 7. causal differential attention by ring attention (sp4, unrolled python
    loop of ppermutes of k1, k2, v): two online softmax states merged per
    step with masks at global positions. Bugs: ring turned the other way
    (the source chunk index still me - step), the second map divided by the
    first map's denominator.
 8. Qwen3-style block under Megatron sequence parallelism (tp4): sequence-
    sharded input all_gather'd, per-head QK-norm with shared gains, tanh
    soft-capping of the logits (cap 5) before the causal mask, a per-head
    elementwise sigmoid gate on the attention output (gate projection
    split by head), psum_scatter back to the sequence. Bugs: soft-capping
    after the mask (masked logits become -cap), QK-norm over the rank's
    heads jointly, the reduce-scatter along the hidden dim... replaced by a
    psum then the rank's block taken at offset 0.
 9. a training step of the differential-attention block (dp2 x tp4,
    check_vma=True): jax.grad of an MSE loss pmean'd over dp, the
    replicated lambda vectors and sub-norm gain get their gradients summed
    over tp by the transpose, optax.adamw with a state from an earlier step
    (sharded like the parameters). Bugs: loss psum'd over dp, output
    pmean'd over tp.
GSPMD pairs (jax.jit with in/out shardings): 10. the MLA block of 1. with
batch over dp and heads over tp; 11. an MLA training step with
optax.adamw, up-projections over tp, batch over dp; 12. gpt-oss sinks +
sliding-window GQA on tp8 with the 2 kv heads jnp.repeat'ed and constrained
to the query heads' sharding; 13. the causal differential attention of 7.
with the sequence over sp4; 14. a training step of the gated, soft-capped,
QK-normed block of 8. with optax.adamw on dp2 x tp4 and with_sharding_
constraint on the attention heads.
More shard_map families (numbered as in the code):
15. gpt-oss decode with learned sinks against a KV cache over sp8 (flash-
    decoding, 4 query heads, 2 kv heads jnp.repeat'ed, per-row lengths): the
    maximum pmax'd and maxed with the sink, the sink added to the psum'd
    denominator once. Bugs: the sink added on every device before the
    psum, kv heads jnp.tile'd instead of repeated.
16. GQA under Megatron sequence parallelism (tp4) with the fused k/v
    projection's head-dim columns over tp, k/v all_gather'd along the head
    dim, rank r keeps kv head r // 2; written with lax.dot_general;
    psum_scatter back to the sequence. Bugs: kv head r % 2, kv head from
    r // (n_q / n_kv).
17. an MLA training step with check_vma=False written with Megatron's
    conjugate f / g operators as jax.custom_vjp (identity / psum over tp)
    where the replicated latents and rotary key enter the head-parallel
    region and on its output, gradients pmean'd over dp by hand, optax.adamw
    (dp2 x tp4). Bugs: the rotary key not passed through the f operator (its
    projection's gradient stays partial over tp), gradients psum'd over dp.
20. two MLA layers under lax.scan over stacked bf16 parameters (upcast to
    f32), pre-norm residual, heads over tp4, batch over dp2, each layer's
    all-reduce as psum_scatter along the hidden dim + all_gather. Bugs: the
    gathered sum divided by tp, the layer stack reversed.
More GSPMD pairs: 18. the absorbed MLA decode of 3. with the bf16 caches
over sp4; 19. the sliding window with sinks of 5. with the sequence over sp4.
Masks fill with -1e30, not -inf. Every correct pair agrees with its baseline
at rounding level (see "numerics"); every bug variant differs clearly.
Exported with scalify_jax.export_pair; every pair is also run by JAX on
seeded inputs and its manifest entry records the largest difference from
the single-device run ("numerics").
Run from the repository root: bash samples/gen/run_fresh69.sh [SUBSTR...]
(only the pairs whose name contains a SUBSTR; the others keep their entries).
"""
import sys
import numpy as np
import jax, jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec as P
import optax
sys.path.insert(0, "samples/gen")  # run from the repository root (run_fresh69.sh)
from fresh_lib import Corpus, seeded, state_specs  # noqa: E402
from scalify_jax import make_mesh  # noqa: E402
from jax.sharding import NamedSharding  # noqa: E402

SCRIPT = "samples/gen/fresh69.py"
C = Corpus("samples/fresh69", SCRIPT, "samples/gen/run_fresh69.sh", sys.argv[1:])
rng, R, I = seeded(6969)
psum, pmax, pmean, idx = lax.psum, lax.pmax, lax.pmean, lax.axis_index
NEG = -1e30


def rms(x, g=None, eps=1e-6):
    y = x * lax.rsqrt(jnp.mean(jnp.square(x), -1, keepdims=True) + eps)
    return y if g is None else y * g


def rope_il(x, pos, base=10000.0):
    """Interleaved (GPT-J / DeepSeek) rotary embedding of the last dim of x at
    positions pos; x (..., t, [h,] e) with pos broadcast to the t axis by the
    caller (pos has shape (t, 1) or (t,))."""
    e = x.shape[-1]
    inv = 1.0 / (base ** (np.arange(0, e, 2, dtype=np.float32) / e))
    ang = pos[..., None].astype(jnp.float32) * inv
    c, s = jnp.cos(ang), jnp.sin(ang)
    x0, x1 = x[..., 0::2], x[..., 1::2]
    return jnp.stack([x0 * c - x1 * s, x0 * s + x1 * c], -1).reshape(x.shape)


# ---------------------------------------------------------------------------
# 1. MLA, heads over tp4, batch over dp2.
D1, H1, DN, DR, DV, DC, DQ = 16, 8, 4, 4, 4, 8, 12
T1 = 8


def mla_heads(x, p, pos, scale_dims=DN + DR, q_pos=None, k_pos=None, enter=lambda a: a, enter_kr=None):
    """MLA of x (b, t, d) for the heads p holds; returns (b, t, d) summed over
    those heads (before any reduction over ranks). pos: global positions (t,).
    enter / enter_kr: applied where the replicated latents enter the
    head-parallel region (Megatron's f operator in 12.)."""
    enter_kr = enter if enter_kr is None else enter_kr
    cq = enter(rms(x @ p["wdq"], p["gq"]))
    q = jnp.einsum("btc,chf->bthf", cq, p["wuq"])
    qn, qr = q[..., :DN], rope_il(q[..., DN:], (pos if q_pos is None else q_pos)[:, None])
    ckv = enter(rms(x @ p["wdkv"], p["gkv"]))
    kn = jnp.einsum("btc,chn->bthn", ckv, p["wuk"])
    v = jnp.einsum("btc,chv->bthv", ckv, p["wuv"])
    kr = enter_kr(rope_il(x @ p["wkr"], pos if k_pos is None else k_pos))  # (b, t, dr) one key for all heads
    s = (jnp.einsum("bqhn,bkhn->bhqk", qn, kn) + jnp.einsum("bqhr,bkr->bhqk", qr, kr)) / np.sqrt(scale_dims)
    ok = pos[:, None] >= pos[None, :]
    s = jnp.where(ok, s, NEG)
    o = jnp.einsum("bhqk,bkhv->bqhv", jax.nn.softmax(s, -1), v)
    return jnp.einsum("bqhv,hvd->bqd", o, p["wo"])


def mla_params(d=D1, h=H1):
    return {"wdq": R(d, DQ, scale=0.3), "gq": 1.0 + R(DQ, scale=0.2), "wuq": R(DQ, h, DN + DR, scale=0.4),
            "wdkv": R(d, DC, scale=0.3), "gkv": 1.0 + R(DC, scale=0.2), "wuk": R(DC, h, DN, scale=0.4),
            "wuv": R(DC, h, DV, scale=0.4), "wkr": R(d, DR, scale=0.4), "wo": R(h, DV, d, scale=0.3)}


MLA_SPEC = {"wdq": P(), "gq": P(), "wuq": P(None, "tp"), "wdkv": P(), "gkv": P(), "wuk": P(None, "tp"),
            "wuv": P(None, "tp"), "wkr": P(), "wo": P("tp")}
P1 = mla_params()


def mla(x, p):
    return mla_heads(x, p, jnp.arange(x.shape[1]))


def mla_tp(bug):
    def f(x, p):
        y = mla_heads(x, p, jnp.arange(x.shape[1]), scale_dims=DN if bug == "scale-nope-only" else DN + DR)
        if bug == "no-psum":
            return y
        if bug == "pmean-output":
            return pmean(y, "tp")
        return psum(y, "tp")
    return f


C.smap("s.mla_decoupled_rope_heads_tp.dp2xtp4", {"dp": 2, "tp": 4}, mla_tp, (P("dp"), MLA_SPEC), P("dp"), mla,
       (R(4, T1, D1), P1),
       bugs=[("no-psum", ["missing-all-reduce"]), ("scale-nope-only", ["wrong-scale"]),
             ("pmean-output", ["wrong-collective-op", "wrong-scale"])])

# ---------------------------------------------------------------------------
# 2. MLA under context parallelism: the compressed latent and the decoupled
#    rotary key are computed per block and all_gather'd (not the per-head
#    keys and values), queries stay local.
T2 = 16
P2 = mla_params(h=4)


def mla_cp(bug):
    def f(x, p):
        tl = x.shape[1]
        me = idx("sp")
        gpos = me * tl + jnp.arange(tl)
        cq = rms(x @ p["wdq"], p["gq"])
        q = jnp.einsum("btc,chf->bthf", cq, p["wuq"])
        qn, qr = q[..., :DN], rope_il(q[..., DN:], gpos[:, None])
        ckv = lax.all_gather(rms(x @ p["wdkv"], p["gkv"]), "sp", axis=1, tiled=True)
        kpos = jnp.arange(tl) if bug == "krope-local-pos" else gpos
        kr = lax.all_gather(rope_il(x @ p["wkr"], kpos), "sp", axis=1, tiled=True)
        kn = jnp.einsum("btc,chn->bthn", ckv, p["wuk"])
        v = jnp.einsum("btc,chv->bthv", ckv, p["wuv"])
        s = (jnp.einsum("bqhn,bkhn->bhqk", qn, kn) + jnp.einsum("bqhr,bkr->bhqk", qr, kr)) / np.sqrt(DN + DR)
        qpos = jnp.arange(tl) if bug == "mask-local-query-pos" else gpos
        s = jnp.where(qpos[:, None] >= jnp.arange(4 * tl)[None, :], s, NEG)
        o = jnp.einsum("bhqk,bkhv->bqhv", jax.nn.softmax(s, -1), v)
        return jnp.einsum("bqhv,hvd->bqd", o, p["wo"])
    return f


C.smap("s.mla_latent_allgather_cp.sp4", {"sp": 4}, mla_cp, (P(None, "sp"), jax.tree.map(lambda _: P(), P2)),
       P(None, "sp"), mla, (R(2, T2, D1), P2),
       bugs=[("krope-local-pos", ["wrong-offset"]), ("mask-local-query-pos", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 3. MLA decode in absorbed form against a bf16 latent cache over sp4.
B3, H3, S3 = 2, 4, 16


def mla_decode(qn, qr, ckv, kr, wuk, wuv, lens):
    ckv, kr = ckv.astype(jnp.float32), kr.astype(jnp.float32)
    ql = jnp.einsum("bhn,chn->bhc", qn, wuk)  # W_uk absorbed into the query
    s = (jnp.einsum("bhc,bsc->bhs", ql, ckv) + jnp.einsum("bhr,bsr->bhs", qr, kr)) / np.sqrt(DN + DR)
    s = jnp.where(jnp.arange(ckv.shape[1])[None, None, :] < lens[:, None, None], s, NEG)
    ol = jnp.einsum("bhs,bsc->bhc", jax.nn.softmax(s, -1), ckv)
    return jnp.einsum("bhc,chv->bhv", ol, wuv)


def mla_decode_sp(bug):
    def f(qn, qr, ckv, kr, wuk, wuv, lens):
        ckv, kr = ckv.astype(jnp.float32), kr.astype(jnp.float32)
        sl = ckv.shape[1]
        pos = jnp.arange(sl) if bug == "len-mask-local-pos" else idx("sp") * sl + jnp.arange(sl)
        ql = jnp.einsum("bhn,chn->bhc", qn, wuk)
        s = (jnp.einsum("bhc,bsc->bhs", ql, ckv) + jnp.einsum("bhr,bsr->bhs", qr, kr)) / np.sqrt(DN + DR)
        ok = pos[None, None, :] < lens[:, None, None]
        s = jnp.where(ok, s, NEG)
        m = jnp.max(s, -1, keepdims=True)
        if bug != "local-max":
            m = pmax(m, "sp")
        e = jnp.where(ok, jnp.exp(s - m), 0.0)
        den = jnp.sum(e, -1)[..., None]
        if bug != "den-not-psummed":
            den = psum(den, "sp")
        ol = psum(jnp.einsum("bhs,bsc->bhc", e, ckv), "sp") / den
        return jnp.einsum("bhc,chv->bhv", ol, wuv)
    return f


C.smap("s.mla_absorbed_decode_bf16_cache.sp4", {"sp": 4}, mla_decode_sp,
       (P(), P(), P(None, "sp"), P(None, "sp"), P(), P(), P()), P(), mla_decode,
       (R(B3, H3, DN), R(B3, H3, DR), R(B3, S3, DC, dt=jnp.bfloat16), R(B3, S3, DR, dt=jnp.bfloat16),
        R(DC, H3, DN, scale=0.5), R(DC, H3, DV, scale=0.5), np.array([11, 6], np.int32)),
       bugs=[("len-mask-local-pos", ["wrong-offset"]), ("local-max", ["missing-collective"]),
             ("den-not-psummed", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 4. gpt-oss-style GQA on tp8: 8 query heads, 2 kv heads (replicated
#    projections), learned per-head sinks, sliding window 3.
D4, HQ4, HKV4, E4, T4, W4 = 16, 8, 2, 4, 8, 3


def sink_softmax(s, sink):
    """softmax over the last dim with a per-head sink logit in the
    denominator; s (b, h, q, k), sink (h,)."""
    sk = jnp.broadcast_to(sink[None, :, None, None], s.shape[:-1] + (1,))
    return jax.nn.softmax(jnp.concatenate([s, sk], -1), -1)[..., :-1]


def window_mask(qpos, kpos, w):
    d = qpos[:, None] - kpos[None, :]
    return (d >= 0) & (d < w)


def gptoss_attn(x, wq, wk, wv, sinks, wo):
    q = jnp.einsum("btd,dhe->bthe", x, wq)
    k = jnp.repeat(jnp.einsum("btd,dhe->bthe", x, wk), HQ4 // HKV4, 2)
    v = jnp.repeat(jnp.einsum("btd,dhe->bthe", x, wv), HQ4 // HKV4, 2)
    s = jnp.einsum("bqhe,bkhe->bhqk", q, k) / np.sqrt(E4)
    t = jnp.arange(x.shape[1])
    s = jnp.where(window_mask(t, t, W4), s, NEG)
    o = jnp.einsum("bhqk,bkhe->bqhe", sink_softmax(s, sinks), v)
    return jnp.einsum("bqhe,hed->bqd", o, wo)


def gptoss_tp(bug):
    def f(x, wq, wk, wv, sinks, wo):
        me = idx("tp")
        kvh = me // HKV4 if bug == "kv-head-ratio-inverted" else me // (8 // HKV4)
        k = lax.dynamic_index_in_dim(jnp.einsum("btd,dhe->bthe", x, wk), kvh, 2)
        v = lax.dynamic_index_in_dim(jnp.einsum("btd,dhe->bthe", x, wv), kvh, 2)
        q = jnp.einsum("btd,dhe->bthe", x, wq)
        sink = lax.dynamic_slice_in_dim(sinks, 0 if bug == "sinks-offset0" else me, 1)
        s = jnp.einsum("bqhe,bkhe->bhqk", q, k) / np.sqrt(E4)
        t = jnp.arange(x.shape[1])
        s = jnp.where(window_mask(t, t, W4 + 1 if bug == "window-4" else W4), s, NEG)
        o = jnp.einsum("bhqk,bkhe->bqhe", sink_softmax(s, sink), v)
        return psum(jnp.einsum("bqhe,hed->bqd", o, wo), "tp")
    return f


C.smap("s.gptoss_sinks_window_gqa_kv_replicated.tp8", {"tp": 8}, gptoss_tp,
       (P(), P(None, "tp"), P(), P(), P(), P("tp")), P(), gptoss_attn,
       (R(2, T4, D4), R(D4, HQ4, E4, scale=0.4), R(D4, HKV4, E4, scale=0.4), R(D4, HKV4, E4, scale=0.4),
        R(HQ4, scale=1.5), R(HQ4, E4, D4, scale=0.3)),
       bugs=[("sinks-offset0", ["wrong-offset"]), ("kv-head-ratio-inverted", ["wrong-offset"]),
             ("window-4", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 5. sliding window with sinks under context parallelism (sp4), halo of the
#    left neighbour's last W-1 keys and values by ppermute.
T5, H5, E5, W5 = 16, 2, 4, 3


def window_sinks(q, k, v, sinks):
    s = jnp.einsum("bqhe,bkhe->bhqk", q, k) / np.sqrt(E5)
    t = jnp.arange(q.shape[1])
    s = jnp.where(window_mask(t, t, W5), s, NEG)
    return jnp.einsum("bhqk,bkhe->bqhe", sink_softmax(s, sinks), v)


def window_sinks_cp(bug):
    def f(q, k, v, sinks):
        n, tl, hw = 4, q.shape[1], W5 - 1
        me = idx("sp")
        if bug == "halo-from-right":
            perm = [(i, i - 1) for i in range(1, n)]
        elif bug == "halo-cyclic-unmasked":
            perm = [(i, (i + 1) % n) for i in range(n)]
        else:
            perm = [(i, i + 1) for i in range(n - 1)]
        hk, hv = (lax.ppermute(a[:, -hw:], "sp", perm) for a in (k, v))
        kk, vv = jnp.concatenate([hk, k], 1), jnp.concatenate([hv, v], 1)
        qpos = me * tl + jnp.arange(tl)
        kpos = me * tl - hw + jnp.arange(tl + hw)
        ok = window_mask(qpos, kpos, W5)
        if bug != "halo-cyclic-unmasked":
            ok = ok & (kpos >= 0)[None, :]
        else:
            ok = window_mask(jnp.arange(tl) + hw, jnp.arange(tl + hw), W5)
        s = jnp.einsum("bqhe,bkhe->bhqk", q, kk) / np.sqrt(E5)
        s = jnp.where(ok, s, NEG)
        return jnp.einsum("bhqk,bkhe->bqhe", sink_softmax(s, sinks), vv)
    return f


C.smap("s.window_sinks_halo_ppermute.sp4", {"sp": 4}, window_sinks_cp, (P(None, "sp"),) * 3 + (P(),),
       P(None, "sp"), window_sinks,
       (R(2, T5, H5, E5), R(2, T5, H5, E5), R(2, T5, H5, E5), R(H5, scale=1.5)),
       bugs=[("halo-from-right", ["wrong-permutation"]), ("halo-cyclic-unmasked", ["wrong-permutation", "wrong-offset"])])

# ---------------------------------------------------------------------------
# 6. differential attention, 8 heads over tp4 (2 per rank), batch over dp2.
D6, H6, E6, T6 = 16, 8, 4, 8
LAMBDA_INIT = float(0.8 - 0.6 * np.exp(-0.3 * 1))  # layer index 2 (depth 1)


def diff_heads(x, p, sign=-1.0, joint_norm=False):
    q = jnp.einsum("btd,dhce->cbthe", x, p["wq"])  # c: the two maps
    k = jnp.einsum("btd,dhce->cbthe", x, p["wk"])
    v = jnp.einsum("btd,dhf->bthf", x, p["wv"])  # f = 2e
    s = jnp.einsum("cbqhe,cbkhe->cbhqk", q, k) / np.sqrt(E6)
    t = jnp.arange(x.shape[1])
    s = jnp.where(t[:, None] >= t[None, :], s, NEG)
    a = jax.nn.softmax(s, -1)
    lq, lk = p["lam"][:2], p["lam"][2:]
    lam = jnp.exp(jnp.sum(lq[0] * lk[0])) - jnp.exp(jnp.sum(lq[1] * lk[1])) + LAMBDA_INIT
    o = jnp.einsum("bhqk,bkhf->bqhf", a[0] + sign * lam * a[1], v)
    if joint_norm:
        b, tq, h, fe = o.shape
        o = rms(o.reshape(b, tq, h * fe)).reshape(o.shape) * p["g"]
    else:
        o = rms(o, p["g"])
    o = o * (1.0 - LAMBDA_INIT)
    return jnp.einsum("bqhf,hfd->bqd", o, p["wo"])


def diff_params():
    return {"wq": R(D6, H6, 2, E6, scale=0.4), "wk": R(D6, H6, 2, E6, scale=0.4), "wv": R(D6, H6, 2 * E6, scale=0.4),
            "lam": R(4, E6, scale=0.1), "g": 1.0 + R(2 * E6, scale=0.2), "wo": R(H6, 2 * E6, D6, scale=0.3)}


DIFF_SPEC = {"wq": P(None, "tp"), "wk": P(None, "tp"), "wv": P(None, "tp"), "lam": P(), "g": P(), "wo": P("tp")}
P6 = diff_params()


def diff_tp(bug):
    def f(x, p):
        y = diff_heads(x, p, sign=1.0 if bug == "plus-second-map" else -1.0,
                       joint_norm=bug == "subnorm-over-local-heads")
        return pmean(y, "tp") if bug == "pmean-output" else psum(y, "tp")
    return f


C.smap("s.diff_attention_heads_tp.dp2xtp4", {"dp": 2, "tp": 4}, diff_tp, (P("dp"), DIFF_SPEC), P("dp"),
       diff_heads, (R(4, T6, D6), P6),
       bugs=[("plus-second-map", ["wrong-sign"]), ("subnorm-over-local-heads", ["wrong-reduction"]),
             ("pmean-output", ["wrong-collective-op", "wrong-scale"])])

# ---------------------------------------------------------------------------
# 7. causal differential attention as ring attention over sp4: unrolled
#    ppermutes of (k1, k2, v), two online-softmax states.
T7, H7, E7 = 16, 2, 4


def diff_core(q1, q2, k1, k2, v, lam):
    t = jnp.arange(q1.shape[1])
    ok = t[:, None] >= t[None, :]

    def amap(q, k):
        s = jnp.where(ok, jnp.einsum("bqhe,bkhe->bhqk", q, k) / np.sqrt(E7), NEG)
        return jax.nn.softmax(s, -1)
    return jnp.einsum("bhqk,bkhf->bqhf", amap(q1, k1) - lam * amap(q2, k2), v)


def diff_ring(bug):
    def f(q1, q2, k1, k2, v, lam):
        n, tl = 4, q1.shape[1]
        me = idx("sp")
        qpos = me * tl + jnp.arange(tl)
        perm = [(i, (i - 1) % n) for i in range(n)] if bug == "ring-reversed" else [(i, (i + 1) % n) for i in range(n)]
        b, _, h, fe = v.shape
        st = [(jnp.full((b, h, tl, 1), NEG), jnp.zeros((b, h, tl, 1)), jnp.zeros((b, tl, h, fe))) for _ in range(2)]
        kk1, kk2, vv = k1, k2, v
        for step in range(n):
            src = (me - step) % n
            kpos = src * tl + jnp.arange(tl)
            ok = qpos[:, None] >= kpos[None, :]
            new = []
            for (m, l, acc), q, k in zip(st, (q1, q2), (kk1, kk2)):
                s = jnp.where(ok, jnp.einsum("bqhe,bkhe->bhqk", q, k) / np.sqrt(E7), NEG)
                mn = jnp.maximum(m, jnp.max(s, -1, keepdims=True))
                pr = jnp.where(ok, jnp.exp(s - mn), 0.0)
                c = jnp.exp(m - mn)
                l = l * c + jnp.sum(pr, -1, keepdims=True)
                acc = acc * jnp.transpose(c, (0, 2, 1, 3)) + jnp.einsum("bhqk,bkhf->bqhf", pr, vv)
                new.append((mn, l, acc))
            st = new
            if step < n - 1:
                kk1, kk2, vv = (lax.ppermute(a, "sp", perm) for a in (kk1, kk2, vv))
        (_, l1, a1), (_, l2, a2) = st
        if bug == "shared-denominator":
            l2 = l1
        return a1 / jnp.transpose(l1, (0, 2, 1, 3)) - lam * a2 / jnp.transpose(l2, (0, 2, 1, 3))
    return f


C.smap("s.diff_attention_ring_causal.sp4", {"sp": 4}, diff_ring, (P(None, "sp"),) * 5 + (P(),), P(None, "sp"),
       diff_core, tuple(R(2, T7, H7, E7) for _ in range(4)) + (R(2, T7, H7, 2 * E7), np.float32(0.6)),
       bugs=[("ring-reversed", ["wrong-permutation"]), ("shared-denominator", ["wrong-operand", "wrong-scale"])])

# ---------------------------------------------------------------------------
# 8. Qwen3-style block under Megatron sequence parallelism (tp4): QK-norm,
#    tanh soft-capping, per-head sigmoid output gates.
D8, H8, E8, T8, CAP = 16, 8, 4, 8, 5.0


def gated_heads(xf, p, cap_after_mask=False, joint_qknorm=False):
    q = jnp.einsum("btd,dhe->bthe", xf, p["wq"])
    k = jnp.einsum("btd,dhe->bthe", xf, p["wk"])
    v = jnp.einsum("btd,dhe->bthe", xf, p["wv"])
    if joint_qknorm:
        b, t, h, e = q.shape
        q = rms(q.reshape(b, t, h * e)).reshape(q.shape) * p["gq"]
        k = rms(k.reshape(b, t, h * e)).reshape(k.shape) * p["gk"]
    else:
        q, k = rms(q, p["gq"]), rms(k, p["gk"])
    s = jnp.einsum("bqhe,bkhe->bhqk", q, k) / np.sqrt(E8)
    t = jnp.arange(xf.shape[1])
    ok = t[:, None] >= t[None, :]
    if cap_after_mask:
        s = CAP * jnp.tanh(jnp.where(ok, s, NEG) / CAP)
    else:
        s = jnp.where(ok, CAP * jnp.tanh(s / CAP), NEG)
    o = jnp.einsum("bhqk,bkhe->bqhe", jax.nn.softmax(s, -1), v)
    o = o * jax.nn.sigmoid(jnp.einsum("btd,dhe->bthe", xf, p["wg"]))
    return jnp.einsum("bqhe,hed->bqd", o, p["wo"])


def gated_params():
    return {"wq": R(D8, H8, E8, scale=0.4), "wk": R(D8, H8, E8, scale=0.4), "wv": R(D8, H8, E8, scale=0.4),
            "gq": 1.0 + R(E8, scale=0.3), "gk": 2.0 + R(E8, scale=0.3), "wg": R(D8, H8, E8, scale=0.5),
            "wo": R(H8, E8, D8, scale=0.3)}


GATED_SPEC = {"wq": P(None, "tp"), "wk": P(None, "tp"), "wv": P(None, "tp"), "gq": P(), "gk": P(),
              "wg": P(None, "tp"), "wo": P("tp")}
P8 = gated_params()


def gated_sp(bug):
    def f(x, p):
        xf = lax.all_gather(x, "tp", axis=1, tiled=True)
        y = gated_heads(xf, p, cap_after_mask=bug == "softcap-after-mask",
                        joint_qknorm=bug == "qknorm-over-local-heads")
        if bug == "psum-take-block0":
            return lax.dynamic_slice_in_dim(psum(y, "tp"), 0, x.shape[1], 1)
        return lax.psum_scatter(y, "tp", scatter_dimension=1, tiled=True)
    return f


C.smap("s.qwen3_gated_softcap_qknorm_seqpar.tp4", {"tp": 4}, gated_sp, (P(None, "tp"), GATED_SPEC), P(None, "tp"),
       gated_heads, (R(2, T8, D8), P8),
       bugs=[("softcap-after-mask", ["wrong-value"]), ("qknorm-over-local-heads", ["wrong-reduction"]),
             ("psum-take-block0", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 9. a training step of the differential-attention block (dp2 x tp4,
#    check_vma=True) with optax.adamw, the state from an earlier step.
OPT9 = optax.adamw(3e-2, weight_decay=0.1)


def diff_loss(p, x, y):
    return jnp.mean(jnp.square(diff_heads(x, p) - y))


def diff_step(p, s, x, y):
    loss, g = jax.value_and_grad(diff_loss)(p, x, y)
    u, s = OPT9.update(g, s, p)
    return optax.apply_updates(p, u), s, loss


P9 = diff_params()
_x0, _y0 = R(4, T6, D6), R(4, T6, D6)
_, S9, _ = jax.jit(diff_step)(P9, OPT9.init(P9), _x0, _y0)
S9 = jax.tree.map(np.asarray, S9)
SS9 = state_specs(S9, DIFF_SPEC)


def diff_step_tp(bug):
    def f(p, s, x, y):
        def loss(p):
            out = diff_heads(x, p)
            out = pmean(out, "tp") if bug == "pmean-tp" else psum(out, "tp")
            l = jnp.mean(jnp.square(out - y))
            return psum(l, "dp") if bug == "loss-psum-dp" else pmean(l, "dp")
        l, g = jax.value_and_grad(loss)(p)
        u, s = OPT9.update(g, s, p)
        return optax.apply_updates(p, u), s, l
    return f


C.smap("s.diff_attention_adamw_step.dp2xtp4", {"dp": 2, "tp": 4}, diff_step_tp,
       (DIFF_SPEC, SS9, P("dp"), P("dp")), (DIFF_SPEC, SS9, P()), diff_step,
       (P9, S9, R(4, T6, D6), R(4, T6, D6)), check_vma=True,
       bugs=[("loss-psum-dp", ["wrong-collective-op", "wrong-scale"]),
             ("pmean-tp", ["wrong-collective-op", "wrong-scale"])])

# ---------------------------------------------------------------------------
# GSPMD pairs.
# 10. the MLA block of 1., batch over dp, heads over tp.
C.gspmd("g.mla_block.dp2xtp4", {"dp": 2, "tp": 4}, (P("dp"), MLA_SPEC), P("dp"), mla, (R(4, T1, D1), mla_params()))

# 11. an MLA training step (cross-entropy of a tied-free LM head over the
#     MLA output) with optax.adamw, up-projections over tp, batch over dp.
OPT11 = optax.adamw(1e-2, b1=0.8, weight_decay=0.05)
V11 = 24


def mla_step(p, s, x, tok):
    def loss(p):
        h = x + mla(rms(x), p)
        lg = rms(h) @ p["head"]
        return jnp.mean(optax.softmax_cross_entropy_with_integer_labels(lg, tok))
    l, g = jax.value_and_grad(loss)(p)
    u, s = OPT11.update(g, s, p)
    return optax.apply_updates(p, u), s, l


P11 = dict(mla_params(), head=R(D1, V11, scale=0.4))
SPEC11 = dict(MLA_SPEC, head=P(None, "tp"))
_, S11, _ = jax.jit(mla_step)(P11, OPT11.init(P11), R(4, T1, D1), I(0, V11, 4, T1))
S11 = jax.tree.map(np.asarray, S11)
SS11 = state_specs(S11, SPEC11)
C.gspmd("g.mla_adamw_step.dp2xtp4", {"dp": 2, "tp": 4}, (SPEC11, SS11, P("dp"), P("dp")), (SPEC11, SS11, P()),
        mla_step, (P11, S11, R(4, T1, D1), I(0, V11, 4, T1)))

# 12. gpt-oss sinks + sliding window GQA on tp8, kv heads repeated and
#     constrained to the query heads' sharding.
M12 = make_mesh({"tp": 8})


def gptoss_gspmd(x, wq, wk, wv, sinks, wo):
    q = jnp.einsum("btd,dhe->bthe", x, wq)
    k, v = (lax.with_sharding_constraint(jnp.repeat(jnp.einsum("btd,dhe->bthe", x, w), HQ4 // HKV4, 2),
                                         NamedSharding(M12, P(None, None, "tp"))) for w in (wk, wv))
    s = jnp.einsum("bqhe,bkhe->bhqk", q, k) / np.sqrt(E4)
    t = jnp.arange(x.shape[1])
    s = jnp.where(window_mask(t, t, W4), s, NEG)
    o = jnp.einsum("bhqk,bkhe->bqhe", sink_softmax(s, sinks), v)
    return jnp.einsum("bqhe,hed->bqd", o, wo)


C.gspmd("g.gptoss_sinks_window_gqa.tp8", {"tp": 8}, (P(), P(None, "tp"), P(), P(), P("tp"), P("tp")), P(),
        gptoss_gspmd, (R(2, T4, D4), R(D4, HQ4, E4, scale=0.4), R(D4, HKV4, E4, scale=0.4),
                       R(D4, HKV4, E4, scale=0.4), R(HQ4, scale=1.5), R(HQ4, E4, D4, scale=0.3)))

# 13. the causal differential attention of 7. with the sequence over sp4.
C.gspmd("g.diff_attention_causal.sp4", {"sp": 4}, (P(None, "sp"),) * 5 + (P(),), P(None, "sp"), diff_core,
        tuple(R(2, T7, H7, E7) for _ in range(4)) + (R(2, T7, H7, 2 * E7), np.float32(0.6)))

# 14. a training step of the gated soft-capped QK-normed block of 8. with
#     optax.adamw, heads over tp, batch over dp, attention heads constrained.
M14 = make_mesh({"dp": 2, "tp": 4})
OPT14 = optax.adamw(2e-2, weight_decay=0.1)


def gated_step(p, s, x, y):
    def loss(p):
        h = lax.with_sharding_constraint(x, NamedSharding(M14, P("dp", "tp", None)))
        out = x + gated_heads(rms(h), p)
        return jnp.mean(jnp.square(out - y))
    l, g = jax.value_and_grad(loss)(p)
    g = jax.tree.map(lambda a: a * jnp.minimum(1.0, 1.0 / optax.global_norm(g)), g)
    u, s = OPT14.update(g, s, p)
    return optax.apply_updates(p, u), s, l


P14 = gated_params()
_, S14, _ = jax.jit(gated_step)(P14, OPT14.init(P14), R(4, T8, D8), R(4, T8, D8))
S14 = jax.tree.map(np.asarray, S14)
SS14 = state_specs(S14, GATED_SPEC)
C.gspmd("g.gated_softcap_qknorm_adamw_step.dp2xtp4", {"dp": 2, "tp": 4}, (GATED_SPEC, SS14, P("dp"), P("dp")),
        (GATED_SPEC, SS14, P()), gated_step, (P14, S14, R(4, T8, D8), R(4, T8, D8)))

# ---------------------------------------------------------------------------
# 15. gpt-oss decode against a KV cache over sp8 (flash-decoding) with
#     learned sinks: 4 query heads, 2 kv heads jnp.repeat'ed, per-row cache
#     lengths; the sink joins the denominator once, after the psum.
B15, H15, KV15, S15, E15 = 2, 4, 2, 32, 4


def sink_decode(q, k, v, sinks, lens):
    k, v = jnp.repeat(k, H15 // KV15, 2), jnp.repeat(v, H15 // KV15, 2)
    s = jnp.einsum("bhe,bshe->bhs", q, k) / np.sqrt(E15)
    s = jnp.where(jnp.arange(k.shape[1])[None, None] < lens[:, None, None], s, NEG)
    sk = jnp.broadcast_to(sinks[None, :, None], (q.shape[0], H15, 1))
    pr = jax.nn.softmax(jnp.concatenate([s, sk], -1), -1)[..., :-1]
    return jnp.einsum("bhs,bshe->bhe", pr, v)


def sink_decode_sp(bug):
    def f(q, k, v, sinks, lens):
        sl = k.shape[1]
        rep = (lambda a: jnp.tile(a, (1, 1, H15 // KV15, 1))) if bug == "kv-tiled-not-repeated" else \
            (lambda a: jnp.repeat(a, H15 // KV15, 2))
        k, v = rep(k), rep(v)
        pos = idx("sp") * sl + jnp.arange(sl)
        ok = pos[None, None] < lens[:, None, None]
        s = jnp.where(ok, jnp.einsum("bhe,bshe->bhs", q, k) / np.sqrt(E15), NEG)
        m = jnp.maximum(pmax(jnp.max(s, -1), "sp"), sinks[None])  # (b, h)
        e = jnp.where(ok, jnp.exp(s - m[..., None]), 0.0)
        num = psum(jnp.einsum("bhs,bshe->bhe", e, v), "sp")
        if bug == "sink-on-every-device":
            den = psum(jnp.sum(e, -1) + jnp.exp(sinks[None] - m), "sp")
        else:
            den = psum(jnp.sum(e, -1), "sp") + jnp.exp(sinks[None] - m)
        return num / den[..., None]
    return f


C.smap("s.gptoss_sink_flash_decode.sp8", {"sp": 8}, sink_decode_sp, (P(), P(None, "sp"), P(None, "sp"), P(), P()), P(),
       sink_decode, (R(B15, H15, E15), R(B15, S15, KV15, E15), R(B15, S15, KV15, E15), R(H15, scale=1.5),
                     np.array([27, 9], np.int32)),
       bugs=[("sink-on-every-device", ["wrong-scale"]), ("kv-tiled-not-repeated", ["layout-mismatch"])])

# ---------------------------------------------------------------------------
# 16. GQA under Megatron sequence parallelism (tp4) with the fused k/v
#     projection's head-dim columns split over tp: the sequence-sharded
#     input all_gather'd, k/v computed on the rank's columns and
#     all_gather'd along the head dim, rank r keeps kv head r // 2 (8 query
#     heads, 2 per rank, 2 kv heads); written with lax.dot_general;
#     reduce-scatter of the output along the sequence.
D16, H16, KV16, E16, T16 = 16, 8, 2, 4, 8


def gqa_fused_kv(x, wq, wkv, wo):
    q = jnp.einsum("btd,dhe->bthe", x, wq)
    kv = jnp.einsum("btd,dche->btche", x, wkv)  # c: k / v
    k, v = (jnp.repeat(kv[:, :, i], H16 // KV16, 2) for i in range(2))
    s = jnp.einsum("bqhe,bkhe->bhqk", q, k) / np.sqrt(E16)
    t = jnp.arange(x.shape[1])
    s = jnp.where(t[:, None] >= t[None, :], s, NEG)
    o = jnp.einsum("bhqk,bkhe->bqhe", jax.nn.softmax(s, -1), v)
    return jnp.einsum("bqhe,hed->bqd", o, wo)


def gqa_fused_sp(bug):
    def f(x, wq, wkv, wo):
        me = idx("tp")
        xf = lax.all_gather(x, "tp", axis=1, tiled=True)
        q = lax.dot_general(xf, wq, (((2,), (0,)), ((), ())))  # (b, t, h, e)
        kv = lax.dot_general(xf, wkv, (((2,), (0,)), ((), ())))  # (b, t, 2, kv, e / tp)
        kv = lax.all_gather(kv, "tp", axis=4, tiled=True)
        if bug == "kv-head-r-mod-2":
            kvh = me % KV16
        elif bug == "kv-group-from-heads":
            kvh = me // (H16 // KV16)
        else:
            kvh = me // (4 // KV16)
        kv = lax.dynamic_index_in_dim(kv, kvh, 3, keepdims=True)
        k, v = (jnp.broadcast_to(kv[:, :, i], q.shape) for i in range(2))
        s = lax.dot_general(q, k, (((3,), (3,)), ((0, 2), (0, 2)))) / np.sqrt(E16)  # (b, h, q, k)
        t = jnp.arange(xf.shape[1])
        s = jnp.where(t[:, None] >= t[None, :], s, NEG)
        o = lax.dot_general(jax.nn.softmax(s, -1), v, (((3,), (1,)), ((0, 1), (0, 2))))  # (b, h, q, e)
        y = lax.dot_general(o, wo, (((1, 3), (0, 1)), ((), ())))  # (b, q, d)
        return lax.psum_scatter(y, "tp", scatter_dimension=1, tiled=True)
    return f


C.smap("s.gqa_fused_kv_cols_seqpar.tp4", {"tp": 4}, gqa_fused_sp,
       (P(None, "tp"), P(None, "tp"), P(None, None, None, "tp"), P("tp")), P(None, "tp"), gqa_fused_kv,
       (R(2, T16, D16), R(D16, H16, E16, scale=0.4), R(D16, 2, KV16, E16, scale=0.4), R(H16, E16, D16, scale=0.3)),
       bugs=[("kv-head-r-mod-2", ["wrong-offset"]), ("kv-group-from-heads", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 17. an MLA training step in a shard_map body with check_vma=False (dp2 x
#     tp4), written with Megatron's conjugate operators as jax.custom_vjp:
#     "enter" (identity forward, psum over tp backward) where the replicated
#     latents c_q, c_kv and the rotary key enter the head-parallel region,
#     "leave" (psum forward, identity backward) on the output; gradients
#     pmean'd over dp by hand; optax.adamw from an earlier step's state.


@jax.custom_vjp
def enter_tp(a):
    return a


enter_tp.defvjp(lambda a: (a, None), lambda _, g: (psum(g, "tp"),))


@jax.custom_vjp
def leave_tp(a):
    return psum(a, "tp")


leave_tp.defvjp(lambda a: (psum(a, "tp"), None), lambda _, g: (g,))
OPT17 = optax.adamw(1e-2, weight_decay=0.05)
V17 = 24


def mla_loss17(p, x, tok, enter=lambda a: a, leave=lambda a: a, enter_kr=None):
    h = x + leave(mla_heads(rms(x), p, jnp.arange(x.shape[1]), enter=enter, enter_kr=enter_kr))
    lg = rms(h) @ p["head"]
    return jnp.mean(optax.softmax_cross_entropy_with_integer_labels(lg, tok))


def mla_step17(p, s, x, tok):
    l, g = jax.value_and_grad(mla_loss17)(p, x, tok)
    u, s = OPT17.update(g, s, p)
    return optax.apply_updates(p, u), s, l


P17 = dict(mla_params(), head=R(D1, V17, scale=0.4))
SPEC17 = dict(MLA_SPEC, head=P())
_, S17, _ = jax.jit(mla_step17)(P17, OPT17.init(P17), R(4, T1, D1), I(0, V17, 4, T1))
S17 = jax.tree.map(np.asarray, S17)
SS17 = state_specs(S17, SPEC17)


def mla_step17_tp(bug):
    def f(p, s, x, tok):
        l, g = jax.value_and_grad(mla_loss17)(p, x, tok, enter=enter_tp, leave=leave_tp,
                                             enter_kr=(lambda a: a) if bug == "krope-not-entered" else enter_tp)
        red = (lambda a: psum(a, "dp")) if bug == "grads-psum-dp" else (lambda a: pmean(a, "dp"))
        g = jax.tree.map(red, g)
        u, s = OPT17.update(g, s, p)
        return optax.apply_updates(p, u), s, pmean(l, "dp")
    return f


C.smap("s.mla_adamw_megatron_fg_ops.dp2xtp4", {"dp": 2, "tp": 4}, mla_step17_tp,
       (SPEC17, SS17, P("dp"), P("dp")), (SPEC17, SS17, P()), mla_step17, (P17, S17, R(4, T1, D1), I(0, V17, 4, T1)),
       bugs=[("krope-not-entered", ["missing-all-reduce"]), ("grads-psum-dp", ["wrong-collective-op", "wrong-scale"])])

# 18. (GSPMD) the absorbed MLA decode of 3. with the bf16 caches over sp4.
C.gspmd("g.mla_absorbed_decode.sp4", {"sp": 4}, (P(), P(), P(None, "sp"), P(None, "sp"), P(), P(), P()), P(),
        mla_decode, (R(B3, H3, DN), R(B3, H3, DR), R(B3, S3, DC, dt=jnp.bfloat16), R(B3, S3, DR, dt=jnp.bfloat16),
                     R(DC, H3, DN, scale=0.5), R(DC, H3, DV, scale=0.5), np.array([13, 4], np.int32)))

# 19. (GSPMD) sliding window with sinks of 5. with the sequence over sp4.
C.gspmd("g.window_sinks.sp4", {"sp": 4}, (P(None, "sp"),) * 3 + (P(),), P(None, "sp"), window_sinks,
        (R(2, T5, H5, E5), R(2, T5, H5, E5), R(2, T5, H5, E5), R(H5, scale=1.5)))

# ---------------------------------------------------------------------------
# 20. two MLA layers scanned with lax.scan over stacked bf16 parameters
#     (upcast to f32 where used), pre-norm residual stream, heads over tp4
#     and batch over dp2; each layer's all-reduce written as psum_scatter
#     along the hidden dim followed by all_gather.
L20 = 2


def stack_bf16(ps):
    return jax.tree.map(lambda *a: np.stack(a).astype(jnp.bfloat16), *ps)


P20 = stack_bf16([mla_params() for _ in range(L20)])
SPEC20 = jax.tree.map(lambda sp: P(None, *sp), MLA_SPEC, is_leaf=lambda a: isinstance(a, P))


def mla_stack(x, ps, reduce=lambda y: y):
    def layer(h, p):
        p = jax.tree.map(lambda a: a.astype(jnp.float32), p)
        return h + reduce(mla_heads(rms(h), p, jnp.arange(h.shape[1]))), None
    return lax.scan(layer, x, ps)[0]


def mla_stack_tp(bug):
    def red(y):
        z = lax.psum_scatter(y, "tp", scatter_dimension=2, tiled=True)
        if bug == "gather-then-mean":
            return lax.all_gather(z, "tp", axis=2, tiled=True) / 4
        return lax.all_gather(z, "tp", axis=2, tiled=True)

    def f(x, ps):
        if bug == "layers-reversed":
            ps = jax.tree.map(lambda a: a[::-1], ps)
        return mla_stack(x, ps, red)
    return f


C.smap("s.mla_scan_layers_bf16_rs_ag.dp2xtp4", {"dp": 2, "tp": 4}, mla_stack_tp, (P("dp"), SPEC20), P("dp"),
       mla_stack, (R(4, T1, D1), P20),
       bugs=[("gather-then-mean", ["wrong-scale"]), ("layers-reversed", ["wrong-order"])])

C.finish()
