"""samples/fresh98: a 98th batch of programs as a user writes them, on the theme of recent attention variants under tensor / sequence / context parallelism in forward passes and training steps (DeepSeek MLA with the latent rank split, absorbed MLA decode, differential attention with per-head GroupNorm and a shared lambda, sigmoid attention with a learned bias, gated attention, softpick and softmax-plus-one "quiet" attention, native-sparse-attention branches, learned sink key / value vectors, partial-RoPE + NoPE layers, YOCO cross-layer KV sharing), none of them an idiom of samples/fresh .. fresh26, probe, train or wild.
shard_map families (bugs in brackets):
 1. MLA prefill with the LATENT RANK split over tp (dp2 x tp4): the q and kv
    down-projections column-parallel over the latent dims, the latent
    RMSNorms with psum'd sums of squares (gain split with the latent), the
    up-projections row-parallel over the latent and psum'd; the decoupled
    rotary key from a replicated projection; heads and output projection
    replicated. [kv up-projection not psum'd (latent projection not
    reduced), latent-norm statistics of the local latent slice only, q
    up-projection pmean'd].
 2. MLA decode in absorbed form with heads over tp4 (dp2 x tp4): the
    baseline up-projects the cached latent into keys / values (naive form),
    the distributed body folds W_uk into the query and applies W_uv after the
    latent readout; the query's rotary projection kept replicated and its
    rank's head columns taken by dynamic_slice at axis_index; per-row cache
    lengths, the new token at position len - 1. [rotary query columns of
    the next rank's heads, output psum'd over dp instead of tp].
 3. differential attention with per-head GroupNorm (mean and variance over
    each head's 2*dh features, affine), 8 heads over tp4 (2 per rank), the
    four lambda vectors sharded over tp like every other parameter (FSDP
    style) so the dot products are psum'd: one lambda shared by all heads;
    causal; output (1 - lambda_init) scaled, row-parallel, psum'd. [lambda
    dot products not psum'd (a different lambda per rank), psum of exp(.)
    instead of exp(psum(.)), GroupNorm statistics over both local heads].
 4. causal sigmoid attention with a learned per-head bias (init -log n) by
    ring attention (sp4, unrolled loop, keys / values ppermute'd right, the
    block at step s is (me - s) mod n's); no normalisation, so the blocks'
    contributions just add. [causal mask from block-local positions, ring
    turned left with the source still me - s].
 5. gated attention (dp2 x tp4): a per-head scalar sigmoid gate on the SDPA
    output (gate projection replicated, the rank's head columns sliced at
    axis_index * heads_per_rank), row-parallel output projection, then a
    hidden-size sigmoid output gate multiplied onto each rank's PARTIAL sum
    before the psum (correct: the psum is linear). [gate columns of rank 0,
    the output gate computed from the partial sum].
 6. softpick attention (relu(e^s - 1) / (sum |e^s - 1| + eps), written
    shift-invariant with a global max) for decode queries against a KV
    cache over sp4 (dp2 x sp4) with per-row lengths at global positions.
    [denominator not psum'd, per-device maxima (no pmax), padding mask at
    local key positions].
 7. softmax-plus-one ("quiet") causal attention by ring attention over sp4 in
    a lax.fori_loop: online state started at m = 0, l = 1 (the +1 is a
    zero logit with a zero value). [the +1 added at every ring step,
    state started at -inf / 0 (ordinary softmax)].
 8. native-sparse-attention style three branches with GQA (4 kv groups over
    tp4, 2 query heads each): a compressed branch over blocks of 4 keys
    compressed by a shared linear map, top-2 block selection by the group's
    summed compressed probabilities (current block forced), a sliding
    window of 4, per-head sigmoid gates per branch, output psum'd.
    [selection importance psum'd over tp (one selection for all groups),
    output pmean'd].
 9. a partial-RoPE layer (rotary on the first half of the head dims) then a
    NoPE layer with Llama-4 attention temperature tuning of the queries
    (log(floor((pos+1)/4)+1) * 0.1 + 1), residual, sequence over sp4 with
    keys / values all_gather'd. [temperature at local positions, rotary at
    local positions].
10. YOCO: a self-decoder sliding-window layer (window 3, halo of 2 from the
    left neighbour by a non-cyclic ppermute) then ONE shared KV projection
    all_gather'd once and reused by two cross-decoder layers with causal
    masks at global positions (sp4). [halo from the right neighbour, cross
    layers attending to the local KV block only].
11. an adamw training step (dp2 x tp4, check_vma=True) of quiet attention with
    a per-head gate, heads over tp, gate projection replicated and sliced.
    [gate columns of rank 0, output psum'd over (dp, tp)].
12. flash-decoding with learned sink key / value vectors per head (a
    learned extra key and value joining every softmax) against a cache over
    sp4: pmax of the guarded local maxima maxed with the sink score, the sink
    term added on device 0 only before the psums. [sink term added on every
    device, padding at local key positions].
GSPMD pairs (correct only): 13. the latent-rank-split MLA of 1. with the
latent dims over tp; 14. an MLA adamw training step with heads over tp and
batch over dp; 15. differential attention with GroupNorm, batch over dp2
and heads over tp4; 16. the native-sparse-attention block of 8. with heads
over tp4; 17. YOCO of 10. with the sequence over sp4; 18. softpick decode
of 6. with the cache over sp4; 19. partial-RoPE + NoPE layers of 9. with
the sequence over sp4.
More shard_map families (numbered as in the code):
20. softmax-plus-one flash-decoding against a cache over sp4 (the baseline
    concatenates a zero logit and drops its probability): each device adds
    exp(-M) / n to its local denominator before the psum (n shares make one
    +1). [exp(-M) added on every device, the share taken at the local
    maximum].
21. differential attention under context parallelism (dp2 x sp4): two
    flash-decoding states psum'd separately, lambda computed on device 0 and
    broadcast by a masked psum, per-head GroupNorm. [lambda psum'd unmasked
    (n lambda), the second map divided by the first map's denominator].
22. the latent-rank-split MLA of 1. with the kv up-projections concatenated,
    psum_scatter'd and all_gather'd, and the latent norms' sums of squares
    all_gather'd and summed. [the device's own sum of squares times tp, the
    scattered sum divided by tp].
25. sigmoid attention with a per-head bias, heads over tp4 (dp2 x tp4), the
    row-parallel projection's bias added as bias / tp on every rank before the
    psum. [bias added whole on every rank, bias / 8].
26. the learned sink key / value decode of 12. with the sink term shared as
    exp(sink - M) / n on every device. [shared as / 2].
More GSPMD pairs: 23. the quiet decode of 20. (zero logit concatenated)
with the cache over sp4; 24. sigmoid attention with a learned bias, batch
over dp4 and heads over tp2.
Masks fill with -1e30, not -inf. Numerics: see each manifest entry.
Run from the repository root: bash samples/gen/run_fresh98.sh [SUBSTR...]
"""
import sys
import numpy as np
import jax, jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec as P
import optax
sys.path.insert(0, "samples/gen")  # run from the repository root (run_fresh98.sh)
from fresh_lib import Corpus, seeded, state_specs  # noqa: E402

SCRIPT = "samples/gen/fresh98.py"
C = Corpus("samples/fresh98", SCRIPT, "samples/gen/run_fresh98.sh", sys.argv[1:])
rng, R, I = seeded(9898)
psum, pmax, pmean, idx = lax.psum, lax.pmax, lax.pmean, lax.axis_index
NEG = -1e30
EPS = 1e-6


def rms(x, g=None):
    y = x * lax.rsqrt(jnp.mean(jnp.square(x), -1, keepdims=True) + EPS)
    return y if g is None else y * g


def rope(x, pos):
    """rotate-half RoPE on the last dim of x; pos broadcasts against x[..., 0]."""
    e = x.shape[-1]
    inv = 1.0 / 10000.0 ** (jnp.arange(0, e, 2, dtype=jnp.float32) / e)
    ang = pos[..., None].astype(jnp.float32) * inv
    c, s = jnp.cos(ang), jnp.sin(ang)
    a, b = x[..., :e // 2], x[..., e // 2:]
    return jnp.concatenate([a * c - b * s, b * c + a * s], -1)


def tril(t):
    return jnp.tril(jnp.ones((t, t), bool))


# ---------------------------------------------------------------------------
# 1. MLA with the latent rank split over tp
D1, H1, DN, DR, DV, RQ, RK, T1 = 32, 4, 8, 4, 8, 16, 16, 8


def mla_params():
    return dict(wdq=R(D1, RQ, scale=0.2), gq=1 + R(RQ, scale=0.1), wuq=R(RQ, H1 * (DN + DR), scale=0.25),
                wdkv=R(D1, RK, scale=0.2), gkv=1 + R(RK, scale=0.1), wuk=R(RK, H1 * DN, scale=0.25),
                wuv=R(RK, H1 * DV, scale=0.25), wkr=R(D1, DR, scale=0.2), wo=R(H1 * DV, D1, scale=0.2))


def mla_attend(x, q, kn, v, kr_raw):
    b, t, _ = x.shape
    q = q.reshape(b, t, H1, DN + DR)
    pos = jnp.arange(t)
    qn, qr = q[..., :DN], rope(q[..., DN:], pos[:, None])
    kr = rope(kr_raw, pos)
    s = (jnp.einsum("bqhd,bkhd->bhqk", qn, kn.reshape(b, t, H1, DN))
         + jnp.einsum("bqhd,bkd->bhqk", qr, kr)) / np.sqrt(DN + DR)
    s = jnp.where(tril(t), s, NEG)
    o = jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(s, -1), v.reshape(b, t, H1, DV))
    return o.reshape(b, t, H1 * DV)


def mla(x, p):
    q = rms(x @ p["wdq"], p["gq"]) @ p["wuq"]
    ckv = rms(x @ p["wdkv"], p["gkv"])
    o = mla_attend(x, q, ckv @ p["wuk"], ckv @ p["wuv"], x @ p["wkr"])
    return o @ p["wo"]


MLA_SPEC = dict(wdq=P(None, "tp"), gq=P("tp"), wuq=P("tp", None), wdkv=P(None, "tp"), gkv=P("tp"),
                wuk=P("tp", None), wuv=P("tp", None), wkr=P(), wo=P())


def mla_latent_tp(bug):
    def latent_norm(z, g, width):
        ss = jnp.sum(jnp.square(z), -1, keepdims=True)
        if bug == "latent-norm-local-stats":
            ms = ss / z.shape[-1]
        else:
            ms = psum(ss, "tp") / width
        return z * lax.rsqrt(ms + EPS) * g

    def f(x, p):
        cq = latent_norm(x @ p["wdq"], p["gq"], RQ)
        qpart = cq @ p["wuq"]
        q = pmean(qpart, "tp") if bug == "q-up-pmean" else psum(qpart, "tp")
        ckv = latent_norm(x @ p["wdkv"], p["gkv"], RK)
        if bug == "kv-up-not-reduced":
            kn, v = ckv @ p["wuk"], ckv @ p["wuv"]
        else:
            kn, v = psum(ckv @ p["wuk"], "tp"), psum(ckv @ p["wuv"], "tp")
        return mla_attend(x, q, kn, v, x @ p["wkr"]) @ p["wo"]
    return f


P1 = mla_params()
X1 = R(4, T1, D1)
C.smap("s.mla_latent_rank_split.dp2xtp4", {"dp": 2, "tp": 4}, mla_latent_tp, (P("dp"), MLA_SPEC), P("dp"),
       mla, (X1, P1),
       bugs=[("kv-up-not-reduced", ["missing-all-reduce"]), ("latent-norm-local-stats", ["missing-all-reduce"]),
             ("q-up-pmean", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 2. absorbed MLA decode, heads over tp4, batch over dp2
D2, H2, R2, T2 = 32, 8, 16, 12


def mla_decode_naive(x, ckv, kr, lens, wq, wqr, wuk, wuv, wo):
    """x (b, D) new token; ckv (b, T, r) latent cache; kr (b, T, DR) rotated
    rotary keys; the new token sits at position lens - 1."""
    b = x.shape[0]
    qn = (x @ wq).reshape(b, H2, DN)
    qr = rope((x @ wqr).reshape(b, H2, DR), (lens - 1)[:, None])
    k = jnp.einsum("btr,hrd->bthd", ckv, wuk)
    v = jnp.einsum("btr,hrd->bthd", ckv, wuv)
    s = (jnp.einsum("bhd,bthd->bht", qn, k) + jnp.einsum("bhd,btd->bht", qr, kr)) / np.sqrt(DN + DR)
    ok = jnp.arange(ckv.shape[1])[None, None, :] < lens[:, None, None]
    p = jax.nn.softmax(jnp.where(ok, s, NEG), -1)
    return jnp.einsum("bht,bthd->bhd", p, v).reshape(b, H2 * DV) @ wo


def mla_decode_tp(bug):
    def f(x, ckv, kr, lens, wq, wqr, wuk, wuv, wo):
        b, hl = x.shape[0], wuk.shape[0]
        r = idx("tp")
        if bug == "qrope-next-rank-cols":
            r = (r + 1) % 4
        wqr_l = lax.dynamic_slice_in_dim(wqr, r * hl * DR, hl * DR, 1)
        qn = (x @ wq).reshape(b, hl, DN)
        qr = rope((x @ wqr_l).reshape(b, hl, DR), (lens - 1)[:, None])
        q_lat = jnp.einsum("bhd,hrd->bhr", qn, wuk)          # W_uk absorbed into the query
        s = (jnp.einsum("bhr,btr->bht", q_lat, ckv) + jnp.einsum("bhd,btd->bht", qr, kr)) / np.sqrt(DN + DR)
        ok = jnp.arange(ckv.shape[1])[None, None, :] < lens[:, None, None]
        p = jax.nn.softmax(jnp.where(ok, s, NEG), -1)
        o_lat = jnp.einsum("bht,btr->bhr", p, ckv)
        o = jnp.einsum("bhr,hrd->bhd", o_lat, wuv).reshape(b, hl * DV) @ wo
        return psum(o, "dp") if bug == "psum-over-dp" else psum(o, "tp")
    return f


ARGS2 = (R(4, D2), rms(R(4, T2, R2)), R(4, T2, DR), np.array([12, 5, 9, 1], np.int32),
         R(D2, H2 * DN, scale=0.2), R(D2, H2 * DR, scale=0.3), R(H2, R2, DN, scale=0.3), R(H2, R2, DV, scale=0.3),
         R(H2 * DV, D2, scale=0.2))
C.smap("s.mla_absorbed_decode_heads.dp2xtp4", {"dp": 2, "tp": 4}, mla_decode_tp,
       (P("dp"), P("dp"), P("dp"), P("dp"), P(None, "tp"), P(), P("tp"), P("tp"), P("tp")), P("dp"),
       mla_decode_naive, ARGS2,
       bugs=[("qrope-next-rank-cols", ["wrong-offset"]), ("psum-over-dp", ["wrong-axis"])])

# ---------------------------------------------------------------------------
# 3. differential attention with per-head GroupNorm, shared lambda, tp4
D3, H3, E3, T3 = 32, 8, 4, 8
LAM_INIT = 0.8 - 0.6 * np.exp(-0.3 * 2)


def diff_params():
    return dict(wq=R(D3, H3 * 2 * E3, scale=0.25), wk=R(D3, H3 * 2 * E3, scale=0.25), wv=R(D3, H3 * 2 * E3, scale=0.2),
                lq1=R(E3 * 2, scale=0.3), lk1=R(E3 * 2, scale=0.3), lq2=R(E3 * 2, scale=0.3),
                lk2=R(E3 * 2, scale=0.3), gn_w=1 + R(H3 * 2 * E3, scale=0.1), gn_b=R(H3 * 2 * E3, scale=0.1),
                wo=R(H3 * 2 * E3, D3, scale=0.2))


def diff_core(x, p, lam, nh):
    b, t, _ = x.shape
    q = (x @ p["wq"]).reshape(b, t, nh, 2, E3)
    k = (x @ p["wk"]).reshape(b, t, nh, 2, E3)
    v = (x @ p["wv"]).reshape(b, t, nh, 2 * E3)
    ok = tril(t)

    def amap(i):
        s = jnp.einsum("bqhd,bkhd->bhqk", q[..., i, :], k[..., i, :]) / np.sqrt(E3)
        return jax.nn.softmax(jnp.where(ok, s, NEG), -1)
    a = amap(0) - lam * amap(1)
    return jnp.einsum("bhqk,bkhd->bqhd", a, v)                         # (b, t, nh, 2E)


def groupnorm_heads(o, w, b, joint=False):
    bsz, t, nh, e = o.shape
    if joint:
        z = o.reshape(bsz, t, nh * e)
        z = (z - z.mean(-1, keepdims=True)) * lax.rsqrt(z.var(-1, keepdims=True) + 1e-5)
        z = z.reshape(bsz, t, nh, e)
    else:
        z = (o - o.mean(-1, keepdims=True)) * lax.rsqrt(o.var(-1, keepdims=True) + 1e-5)
    return z.reshape(bsz, t, nh * e) * w + b


def diff_gn(x, p):
    lam = jnp.exp(p["lq1"] @ p["lk1"]) - jnp.exp(p["lq2"] @ p["lk2"]) + LAM_INIT
    o = groupnorm_heads(diff_core(x, p, lam, H3), p["gn_w"], p["gn_b"]) * (1 - LAM_INIT)
    return o @ p["wo"]


DIFF_SPEC = dict(wq=P(None, "tp"), wk=P(None, "tp"), wv=P(None, "tp"), lq1=P("tp"), lk1=P("tp"), lq2=P("tp"),
                 lk2=P("tp"), gn_w=P("tp"), gn_b=P("tp"), wo=P("tp"))


def diff_gn_tp(bug):
    def f(x, p):
        d1, d2 = p["lq1"] @ p["lk1"], p["lq2"] @ p["lk2"]
        if bug == "lambda-dot-not-psummed":
            lam = jnp.exp(d1) - jnp.exp(d2) + LAM_INIT
        elif bug == "psum-of-exp":
            lam = psum(jnp.exp(d1), "tp") - psum(jnp.exp(d2), "tp") + LAM_INIT
        else:
            lam = jnp.exp(psum(d1, "tp")) - jnp.exp(psum(d2, "tp")) + LAM_INIT
        o = diff_core(x, p, lam, H3 // 4)
        o = groupnorm_heads(o, p["gn_w"], p["gn_b"], joint=bug == "groupnorm-joint-local-heads") * (1 - LAM_INIT)
        return psum(o @ p["wo"], "tp")
    return f


P3 = diff_params()
C.smap("s.diff_attn_groupnorm_shared_lambda.tp4", {"tp": 4}, diff_gn_tp, (P(), DIFF_SPEC), P(), diff_gn,
       (R(2, T3, D3), P3),
       bugs=[("lambda-dot-not-psummed", ["missing-all-reduce"]), ("psum-of-exp", ["wrong-op"]),
             ("groupnorm-joint-local-heads", ["wrong-reduction"])])

# ---------------------------------------------------------------------------
# 4. causal sigmoid attention with a learned per-head bias, ring over sp4
T4, H4, E4 = 16, 2, 8


def sigmoid_attn(q, k, v, bias):
    s = jnp.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(E4) + bias[None, :, None, None]
    w = jnp.where(tril(q.shape[1]), jax.nn.sigmoid(s), 0.0)
    return jnp.einsum("bhqk,bkhd->bqhd", w, v)


def sigmoid_ring(bug):
    n = 4

    def f(q, k, v, bias):
        me = idx("sp")
        tl = q.shape[1]
        qpos = me * tl + jnp.arange(tl)
        out = jnp.zeros_like(q)
        perm = [(i, (i - 1) % n) for i in range(n)] if bug == "ring-turned-left" else [(i, (i + 1) % n) for i in range(n)]
        for st in range(n):
            src = (me - st) % n
            kpos = src * tl + jnp.arange(tl)
            if bug == "causal-block-local":
                ok = tril(tl)
            else:
                ok = qpos[:, None] >= kpos[None, :]
            s = jnp.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(E4) + bias[None, :, None, None]
            w = jnp.where(ok, jax.nn.sigmoid(s), 0.0)
            out = out + jnp.einsum("bhqk,bkhd->bqhd", w, v)
            if st < n - 1:
                k, v = lax.ppermute(k, "sp", perm), lax.ppermute(v, "sp", perm)
        return out
    return f


C.smap("s.sigmoid_attn_learned_bias_ring.sp4", {"sp": 4}, sigmoid_ring, (P(None, "sp"),) * 3 + (P(),),
       P(None, "sp"), sigmoid_attn,
       (R(2, T4, H4, E4), R(2, T4, H4, E4), R(2, T4, H4, E4), (-np.log(T4) + R(H4, scale=0.5)).astype(np.float32)),
       bugs=[("causal-block-local", ["wrong-offset"]), ("ring-turned-left", ["wrong-permutation"])])

# ---------------------------------------------------------------------------
# 5. gated attention: headwise gate + hidden output gate before the psum
D5, H5, E5, T5 = 32, 8, 4, 8


def sdpa_causal(q, k, v):
    s = jnp.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(q.shape[-1])
    s = jnp.where(tril(q.shape[1]), s, NEG)
    return jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(s, -1), v)


def gated_attn(x, wq, wk, wv, wg, wo, wgo):
    b, t, _ = x.shape
    sh = lambda z: z.reshape(b, t, -1, E5)
    o = sdpa_causal(sh(x @ wq), sh(x @ wk), sh(x @ wv)) * jax.nn.sigmoid(x @ wg)[..., None]
    return (o.reshape(b, t, -1) @ wo) * jax.nn.sigmoid(x @ wgo)


def gated_attn_tp(bug):
    def f(x, wq, wk, wv, wg, wo, wgo):
        b, t, _ = x.shape
        hl = wq.shape[1] // E5
        off = 0 if bug == "gate-cols-rank0" else idx("tp") * hl
        g = jax.nn.sigmoid(x @ lax.dynamic_slice_in_dim(wg, off, hl, 1))
        sh = lambda z: z.reshape(b, t, hl, E5)
        o = sdpa_causal(sh(x @ wq), sh(x @ wk), sh(x @ wv)) * g[..., None]
        part = o.reshape(b, t, hl * E5) @ wo
        if bug == "out-gate-from-partial":
            part = part * jax.nn.sigmoid(part @ wgo)
        else:
            part = part * jax.nn.sigmoid(x @ wgo)           # gate applied before the psum: linear, so fine
        return psum(part, "tp")
    return f


C.smap("s.gated_attn_headwise_and_output_gate.dp2xtp4", {"dp": 2, "tp": 4}, gated_attn_tp,
       (P("dp"), P(None, "tp"), P(None, "tp"), P(None, "tp"), P(), P("tp"), P()), P("dp"), gated_attn,
       (R(4, T5, D5), R(D5, H5 * E5, scale=0.3), R(D5, H5 * E5, scale=0.3), R(D5, H5 * E5, scale=0.3),
        R(D5, H5, scale=0.3), R(H5 * E5, D5, scale=0.3), R(D5, D5, scale=0.2)),
       bugs=[("gate-cols-rank0", ["wrong-offset"]), ("out-gate-from-partial", ["wrong-order"])])

# ---------------------------------------------------------------------------
# 6. softpick decode against a KV cache over sp4
T6, H6, E6, Q6 = 16, 2, 8, 3


def softpick_decode(q, k, v, lens):
    s = jnp.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(E6)
    ok = (jnp.arange(k.shape[1]) < lens[:, None])[:, None, None, :]
    m = jnp.max(jnp.where(ok, s, NEG), -1, keepdims=True)
    e = jnp.where(ok, jnp.exp(s - m) - jnp.exp(-m), 0.0)
    w = jax.nn.relu(e) / (jnp.sum(jnp.abs(e), -1, keepdims=True) + 1e-6 * jnp.exp(-m))
    return jnp.einsum("bhqk,bkhd->bqhd", w, v)


def softpick_sp(bug):
    def f(q, k, v, lens):
        tl = k.shape[1]
        kpos = jnp.arange(tl) if bug == "padding-local-pos" else idx("sp") * tl + jnp.arange(tl)
        s = jnp.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(E6)
        ok = (kpos < lens[:, None])[:, None, None, :]
        m = jnp.max(jnp.where(ok, s, NEG), -1, keepdims=True)
        if bug != "local-max-no-pmax":
            m = pmax(m, "sp")
        e = jnp.where(ok, jnp.exp(s - m) - jnp.exp(-m), 0.0)
        num = psum(jnp.einsum("bhqk,bkhd->bqhd", jax.nn.relu(e), v), "sp")
        den = jnp.sum(jnp.abs(e), -1)
        if bug != "den-not-psummed":
            den = psum(den, "sp")
        den = den + 1e-6 * jnp.exp(-m[..., 0])
        return num / jnp.transpose(den, (0, 2, 1))[..., None]
    return f


ARGS6 = (R(4, Q6, H6, E6), R(4, T6, H6, E6), R(4, T6, H6, E6), np.array([13, 16, 14, 15], np.int32))
C.smap("s.softpick_decode_cache.dp2xsp4", {"dp": 2, "sp": 4}, softpick_sp,
       (P("dp"), P("dp", "sp"), P("dp", "sp"), P("dp")), P("dp"), softpick_decode, ARGS6,
       bugs=[("den-not-psummed", ["missing-all-reduce"]), ("local-max-no-pmax", ["missing-all-reduce"]),
             ("padding-local-pos", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 7. softmax-plus-one (quiet) causal attention, ring in a fori_loop over sp4
T7, H7, E7 = 16, 2, 8


def quiet_attn(q, k, v):
    s = jnp.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(E7)
    s = jnp.where(tril(q.shape[1]), s, NEG)
    m = jnp.maximum(jnp.max(s, -1, keepdims=True), 0.0)
    e = jnp.exp(s - m)
    w = e / (jnp.exp(-m) + jnp.sum(e, -1, keepdims=True))
    return jnp.einsum("bhqk,bkhd->bqhd", w, v)


def quiet_ring(bug):
    n = 4

    def f(q, k, v):
        me = idx("sp")
        b, tl, h, e = q.shape
        qpos = me * tl + jnp.arange(tl)
        if bug == "plain-softmax-init":
            m0, l0 = jnp.full((b, h, tl, 1), NEG), jnp.zeros((b, h, tl, 1))
        else:
            m0, l0 = jnp.zeros((b, h, tl, 1)), jnp.ones((b, h, tl, 1))
        acc0 = jnp.zeros((b, h, tl, e))

        def step(st, c):
            k, v, m, l, acc = c
            kpos = ((me - st) % n) * tl + jnp.arange(tl)
            s = jnp.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(E7)
            s = jnp.where(qpos[:, None] >= kpos[None, :], s, NEG)
            mn = jnp.maximum(m, jnp.max(s, -1, keepdims=True))
            p = jnp.exp(s - mn)
            a = jnp.exp(m - mn)
            l = l * a + jnp.sum(p, -1, keepdims=True)
            if bug == "plus-one-every-step":
                l = l + jnp.exp(-mn)
            acc = acc * a + jnp.einsum("bhqk,bkhd->bhqd", p, v)
            perm = [(i, (i + 1) % n) for i in range(n)]
            return lax.ppermute(k, "sp", perm), lax.ppermute(v, "sp", perm), mn, l, acc
        _, _, m, l, acc = lax.fori_loop(0, n, step, (k, v, m0, l0, acc0))
        return jnp.transpose(acc / l, (0, 2, 1, 3))
    return f


C.smap("s.quiet_softmax1_ring_fori.sp4", {"sp": 4}, quiet_ring, (P(None, "sp"),) * 3, P(None, "sp"), quiet_attn,
       (R(2, T7, H7, E7, scale=1.5), R(2, T7, H7, E7), R(2, T7, H7, E7)),
       bugs=[("plus-one-every-step", ["wrong-scale"]), ("plain-softmax-init", ["wrong-value"])])

# ---------------------------------------------------------------------------
# 8. native sparse attention style branches, kv groups over tp4
D8, G8, J8, E8, T8, BL, TOPN, WIN = 32, 4, 2, 8, 16, 4, 2, 4


def nsa_group(x, wq, wk, wv, wc, wgate, wo, imp_reduce=lambda z: z):
    """x (b, t, D); wq (D, g*J*E); wk, wv (D, g*E); wgate (D, g*J, 3); returns the
    (b, t, D) contribution of the g local kv groups."""
    b, t, _ = x.shape
    g = wk.shape[1] // E8
    nb = t // BL
    q = (x @ wq).reshape(b, t, g, J8, E8)
    k = (x @ wk).reshape(b, t, g, E8)
    v = (x @ wv).reshape(b, t, g, E8)
    kc = jnp.einsum("bngf,fe->bnge", k.reshape(b, nb, BL, g, E8).transpose(0, 1, 3, 2, 4).reshape(b, nb, g, BL * E8), wc)
    vc = v.reshape(b, nb, BL, g, E8).mean(2)
    tq = jnp.arange(t)
    cok = ((jnp.arange(nb) + 1) * BL - 1)[None, :] <= tq[:, None]          # complete past blocks
    sc = jnp.einsum("btgjd,bngd->bgjtn", q, kc) / np.sqrt(E8)
    pc = jax.nn.softmax(jnp.where(cok, sc, NEG), -1) * jnp.any(cok, -1)[:, None]
    oc = jnp.einsum("bgjtn,bngd->btgjd", pc, vc)
    imp = imp_reduce(pc.sum(2))                                             # (b, g, t, nb)
    cur = (tq // BL)[:, None] == jnp.arange(nb)[None, :]
    fut = (jnp.arange(nb) * BL)[None, :] > tq[:, None]
    imp = jnp.where(fut, NEG, imp + 1e3 * cur)
    _, top = lax.top_k(imp, TOPN)                                           # (b, g, t, TOPN)
    kblk = jnp.arange(t) // BL
    sel = jnp.any(top[..., None] == kblk, -2)                               # (b, g, t, t)
    caus = tril(t)
    s = jnp.einsum("btgjd,bkgd->bgjtk", q, k) / np.sqrt(E8)
    os_ = jnp.einsum("bgjtk,bkgd->btgjd", jax.nn.softmax(jnp.where(sel[:, :, None] & caus, s, NEG), -1), v)
    win = caus & (tq[:, None] - tq[None, :] < WIN)
    ow = jnp.einsum("bgjtk,bkgd->btgjd", jax.nn.softmax(jnp.where(win, s, NEG), -1), v)
    gt = jax.nn.sigmoid(jnp.einsum("btd,dhc->bthc", x, wgate)).reshape(b, t, g, J8, 3)
    o = gt[..., 0:1] * oc + gt[..., 1:2] * os_ + gt[..., 2:3] * ow
    return o.reshape(b, t, g * J8 * E8) @ wo


def nsa(x, wq, wk, wv, wc, wgate, wo):
    return nsa_group(x, wq, wk, wv, wc, wgate, wo)


def nsa_tp(bug):
    def f(x, wq, wk, wv, wc, wgate, wo):
        red = (lambda z: psum(z, "tp")) if bug == "importance-psum-tp" else (lambda z: z)
        o = nsa_group(x, wq, wk, wv, wc, wgate, wo, red)
        return pmean(o, "tp") if bug == "output-pmean" else psum(o, "tp")
    return f


NSA_IN = (P(), P(None, "tp"), P(None, "tp"), P(None, "tp"), P(), P(None, "tp", None), P("tp"))
ARGS8 = (R(2, T8, D8), R(D8, G8 * J8 * E8, scale=0.4), R(D8, G8 * E8, scale=0.4), R(D8, G8 * E8, scale=0.3),
         R(BL * E8, E8, scale=0.3), R(D8, G8 * J8, 3, scale=0.3), R(G8 * J8 * E8, D8, scale=0.2))
C.smap("s.nsa_compressed_selected_window.tp4", {"tp": 4}, nsa_tp, NSA_IN, P(), nsa, ARGS8,
       bugs=[("importance-psum-tp", ["wrong-reduction"]), ("output-pmean", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 9. partial-RoPE layer then NoPE layer with temperature tuning, sp4
D9, H9, E9, T9, ROT = 32, 4, 8, 16, 4


def attn_layer(x, wqkv, wo, pos, kpos, mode, t_glob):
    b, t, _ = x.shape
    q, k, v = jnp.split((rms(x) @ wqkv).reshape(b, t, 3, H9, E9), 3, 2)
    q, k, v = q[:, :, 0], k[:, :, 0], v[:, :, 0]
    if mode == "rope":
        q = jnp.concatenate([rope(q[..., :ROT], pos[:, None]), q[..., ROT:]], -1)
        k = jnp.concatenate([rope(k[..., :ROT], pos[:, None]), k[..., ROT:]], -1)
    else:
        q = q * (jnp.log(jnp.floor((pos + 1) / 4.0) + 1.0) * 0.1 + 1.0)[:, None, None]
    return q, k, v


def pnope_attend(q, k, v, qpos, kpos):
    s = jnp.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(E9)
    s = jnp.where(qpos[:, None] >= kpos[None, :], s, NEG)
    o = jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(s, -1), v)
    return o.reshape(o.shape[0], o.shape[1], -1)


def pnope(x, w1, o1, w2, o2):
    pos = jnp.arange(x.shape[1])
    q, k, v = attn_layer(x, w1, o1, pos, pos, "rope", None)
    x = x + pnope_attend(q, k, v, pos, pos) @ o1
    q, k, v = attn_layer(x, w2, o2, pos, pos, "nope", None)
    return x + pnope_attend(q, k, v, pos, pos) @ o2


def pnope_sp(bug):
    def f(x, w1, o1, w2, o2):
        tl = x.shape[1]
        gpos = idx("sp") * tl + jnp.arange(tl)
        lpos = jnp.arange(tl)
        allpos = jnp.arange(tl * 4)
        q, k, v = attn_layer(x, w1, o1, lpos if bug == "rope-local-pos" else gpos, None, "rope", None)
        k, v = lax.all_gather(k, "sp", axis=1, tiled=True), lax.all_gather(v, "sp", axis=1, tiled=True)
        x = x + pnope_attend(q, k, v, gpos, allpos) @ o1
        q, k, v = attn_layer(x, w2, o2, lpos if bug == "temperature-local-pos" else gpos, None, "nope", None)
        k, v = lax.all_gather(k, "sp", axis=1, tiled=True), lax.all_gather(v, "sp", axis=1, tiled=True)
        return x + pnope_attend(q, k, v, gpos, allpos) @ o2
    return f


ARGS9 = (R(2, T9, D9), R(D9, 3 * H9 * E9, scale=0.3), R(H9 * E9, D9, scale=0.2), R(D9, 3 * H9 * E9, scale=0.3),
         R(H9 * E9, D9, scale=0.2))
C.smap("s.partial_rope_then_nope_temp.sp4", {"sp": 4}, pnope_sp, (P(None, "sp"), P(), P(), P(), P()),
       P(None, "sp"), pnope, ARGS9,
       bugs=[("temperature-local-pos", ["wrong-offset"]), ("rope-local-pos", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 10. YOCO: self-decoder SWA layer, one shared KV, two cross-decoder layers, sp4
D10, H10, E10, T10, W10 = 32, 4, 8, 16, 3


def heads(z):
    return z.reshape(z.shape[0], z.shape[1], H10, E10)


def attend_mask(q, k, v, ok):
    s = jnp.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(E10)
    o = jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(jnp.where(ok, s, NEG), -1), v)
    return o.reshape(o.shape[0], o.shape[1], -1)


def yoco(x, p):
    t = x.shape[1]
    pos = jnp.arange(t)
    h = rms(x)
    win = (pos[:, None] >= pos[None, :]) & (pos[:, None] - pos[None, :] < W10)
    x = x + attend_mask(heads(h @ p["sq"]), heads(h @ p["sk"]), heads(h @ p["sv"]), win) @ p["so"]
    hk = rms(x)
    k, v = heads(hk @ p["ck"]), heads(hk @ p["cv"])
    for i in range(2):
        x = x + attend_mask(heads(rms(x) @ p["cq"][i]), k, v, tril(t)) @ p["co"][i]
    return x


def yoco_sp(bug):
    n = 4

    def f(x, p):
        tl = x.shape[1]
        me = idx("sp")
        gpos = me * tl + jnp.arange(tl)
        h = rms(x)
        k, v = heads(h @ p["sk"]), heads(h @ p["sv"])
        perm = [(i, i - 1) for i in range(1, n)] if bug == "halo-from-right" else [(i, i + 1) for i in range(n - 1)]
        hk = lax.ppermute(k[:, -(W10 - 1):], "sp", perm)
        hv = lax.ppermute(v[:, -(W10 - 1):], "sp", perm)
        kk, vv = jnp.concatenate([hk, k], 1), jnp.concatenate([hv, v], 1)
        kp = jnp.concatenate([me * tl - (W10 - 1) + jnp.arange(W10 - 1), gpos])
        win = (gpos[:, None] >= kp[None, :]) & (gpos[:, None] - kp[None, :] < W10) & (kp[None, :] >= 0)
        x = x + attend_mask(heads(h @ p["sq"]), kk, vv, win) @ p["so"]
        hk2 = rms(x)
        k, v = heads(hk2 @ p["ck"]), heads(hk2 @ p["cv"])
        if bug == "cross-local-kv-block":
            kpos = gpos
        else:
            k, v = lax.all_gather(k, "sp", axis=1, tiled=True), lax.all_gather(v, "sp", axis=1, tiled=True)
            kpos = jnp.arange(tl * n)
        ok = gpos[:, None] >= kpos[None, :]
        for i in range(2):
            x = x + attend_mask(heads(rms(x) @ p["cq"][i]), k, v, ok) @ p["co"][i]
        return x
    return f


P10 = dict(sq=R(D10, H10 * E10, scale=0.3), sk=R(D10, H10 * E10, scale=0.3), sv=R(D10, H10 * E10, scale=0.3),
           so=R(H10 * E10, D10, scale=0.2), ck=R(D10, H10 * E10, scale=0.3), cv=R(D10, H10 * E10, scale=0.3),
           cq=R(2, D10, H10 * E10, scale=0.3), co=R(2, H10 * E10, D10, scale=0.2))
YOCO_SPEC = jax.tree.map(lambda _: P(), P10)
C.smap("s.yoco_shared_kv_cross_decoder.sp4", {"sp": 4}, yoco_sp, (P(None, "sp"), YOCO_SPEC), P(None, "sp"), yoco,
       (R(2, T10, D10), P10),
       bugs=[("halo-from-right", ["wrong-permutation"]), ("cross-local-kv-block", ["missing-collective"])])

# ---------------------------------------------------------------------------
# 11. adamw step of quiet attention with a per-head gate (dp2 x tp4, check_vma=True)
D11, H11, E11, T11 = 16, 8, 4, 8
OPT11 = optax.adamw(2e-2, weight_decay=0.05)


def quiet_probs(s):
    m = jnp.maximum(jnp.max(s, -1, keepdims=True), 0.0)
    e = jnp.exp(s - m)
    return e / (jnp.exp(-m) + jnp.sum(e, -1, keepdims=True))


def qgate_heads(x, p, g):
    b, t, _ = x.shape
    sh = lambda z: z.reshape(b, t, -1, E11)
    q, k, v = sh(x @ p["wq"]), sh(x @ p["wk"]), sh(x @ p["wv"])
    s = jnp.where(tril(t), jnp.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(E11), NEG)
    o = jnp.einsum("bhqk,bkhd->bqhd", quiet_probs(s), v) * g[..., None]
    return o.reshape(b, t, -1) @ p["wo"]


def qgate_loss(p, x, y):
    return jnp.mean(jnp.square(qgate_heads(x, p, jax.nn.sigmoid(x @ p["wg"])) - y))


def qgate_step(p, s, x, y):
    loss, g = jax.value_and_grad(qgate_loss)(p, x, y)
    u, s = OPT11.update(g, s, p)
    return optax.apply_updates(p, u), s, loss


P11 = dict(wq=R(D11, H11 * E11, scale=0.4), wk=R(D11, H11 * E11, scale=0.4), wv=R(D11, H11 * E11, scale=0.4),
           wg=R(D11, H11, scale=0.4), wo=R(H11 * E11, D11, scale=0.3))
Q11_SPEC = dict(wq=P(None, "tp"), wk=P(None, "tp"), wv=P(None, "tp"), wg=P(), wo=P("tp"))
_, S11, _ = jax.jit(qgate_step)(P11, OPT11.init(P11), R(4, T11, D11), R(4, T11, D11))
S11 = jax.tree.map(np.asarray, S11)
SS11 = state_specs(S11, Q11_SPEC)


def qgate_step_tp(bug):
    def f(p, s, x, y):
        def loss(p):
            hl = p["wq"].shape[1] // E11
            off = 0 if bug == "gate-cols-rank0" else idx("tp") * hl
            g = jax.nn.sigmoid(x @ lax.dynamic_slice_in_dim(p["wg"], off, hl, 1))
            part = qgate_heads(x, p, g)
            out = psum(part, ("dp", "tp")) if bug == "psum-dp-and-tp" else psum(part, "tp")
            return pmean(jnp.mean(jnp.square(out - y)), "dp")
        l, g = jax.value_and_grad(loss)(p)
        u, s = OPT11.update(g, s, p)
        return optax.apply_updates(p, u), s, l
    return f


C.smap("s.quiet_gated_attn_adamw_step.dp2xtp4", {"dp": 2, "tp": 4}, qgate_step_tp,
       (Q11_SPEC, SS11, P("dp"), P("dp")), (Q11_SPEC, SS11, P()), qgate_step,
       (P11, S11, R(4, T11, D11), R(4, T11, D11)), check_vma=True,
       bugs=[("gate-cols-rank0", ["wrong-offset"]), ("psum-dp-and-tp", ["wrong-axis"])])

# ---------------------------------------------------------------------------
# 12. flash-decoding with learned sink key / value vectors, cache over sp4
H12, E12, T12 = 4, 8, 16


def sink_kv_decode(q, k, v, lens, sk, sv):
    b = q.shape[0]
    kk = jnp.concatenate([jnp.broadcast_to(sk[None, None], (b, 1, H12, E12)), k], 1)
    vv = jnp.concatenate([jnp.broadcast_to(sv[None, None], (b, 1, H12, E12)), v], 1)
    ok = jnp.concatenate([jnp.ones((b, 1), bool), jnp.arange(k.shape[1])[None] < lens[:, None]], 1)
    s = jnp.einsum("bhd,bkhd->bhk", q, kk) / np.sqrt(E12)
    p = jax.nn.softmax(jnp.where(ok[:, None], s, NEG), -1)
    return jnp.einsum("bhk,bkhd->bhd", p, vv)


def sink_kv_sp(bug):
    def f(q, k, v, lens, sk, sv):
        tl = k.shape[1]
        kpos = jnp.arange(tl) if bug == "padding-local-pos" else idx("sp") * tl + jnp.arange(tl)
        ok = (kpos[None] < lens[:, None])[:, None]
        s = jnp.einsum("bhd,bkhd->bhk", q, k) / np.sqrt(E12)
        s = jnp.where(ok, s, NEG)
        mloc = jnp.max(s, -1)
        mloc = jnp.where(jnp.any(ok, -1), mloc, 0.0)
        ssink = jnp.einsum("bhd,hd->bh", q, sk) / np.sqrt(E12)
        m = jnp.maximum(pmax(mloc, "sp"), ssink)
        p = jnp.where(ok, jnp.exp(s - m[..., None]), 0.0)
        den = jnp.sum(p, -1)
        num = jnp.einsum("bhk,bkhd->bhd", p, v)
        es = jnp.exp(ssink - m)
        first = jnp.ones((), bool) if bug == "sink-every-device" else idx("sp") == 0
        den = den + jnp.where(first, es, 0.0)
        num = num + jnp.where(first, es[..., None] * sv[None], 0.0)
        return psum(num, "sp") / psum(den, "sp")[..., None]
    return f


C.smap("s.learned_sink_kv_flash_decode.sp4", {"sp": 4}, sink_kv_sp,
       (P(), P(None, "sp"), P(None, "sp"), P(), P(), P()), P(), sink_kv_decode,
       (R(3, H12, E12, scale=1.5), R(3, T12, H12, E12), R(3, T12, H12, E12), np.array([16, 6, 11], np.int32),
        R(H12, E12), R(H12, E12)),
       bugs=[("sink-every-device", ["wrong-scale"]), ("padding-local-pos", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# GSPMD pairs (correct only)
C.gspmd("g.mla_latent_rank_split.dp2xtp4", {"dp": 2, "tp": 4}, (P("dp"), MLA_SPEC), P("dp"), mla, (R(4, T1, D1), P1))

OPT14 = optax.adamw(1e-2, weight_decay=0.1)


def mla_step(p, s, x, y):
    loss, g = jax.value_and_grad(lambda p: jnp.mean(jnp.square(mla(x, p) - y)))(p)
    u, s = OPT14.update(g, s, p)
    return optax.apply_updates(p, u), s, loss


MLA_HEAD_SPEC = dict(wdq=P(), gq=P(), wuq=P(None, "tp"), wdkv=P(), gkv=P(), wuk=P(None, "tp"),
                     wuv=P(None, "tp"), wkr=P(), wo=P("tp"))
_, S14, _ = jax.jit(mla_step)(P1, OPT14.init(P1), R(4, T1, D1), R(4, T1, D1))
S14 = jax.tree.map(np.asarray, S14)
SS14 = state_specs(S14, MLA_HEAD_SPEC)
C.gspmd("g.mla_adamw_step_heads_tp.dp2xtp4", {"dp": 2, "tp": 4}, (MLA_HEAD_SPEC, SS14, P("dp"), P("dp")),
        (MLA_HEAD_SPEC, SS14, P()), mla_step, (P1, S14, R(4, T1, D1), R(4, T1, D1)))

DIFF_G_SPEC = dict(DIFF_SPEC, lq1=P(), lk1=P(), lq2=P(), lk2=P())
C.gspmd("g.diff_attn_groupnorm.dp2xtp4", {"dp": 2, "tp": 4}, (P("dp"), DIFF_G_SPEC), P("dp"), diff_gn,
        (R(4, T3, D3), P3))
C.gspmd("g.nsa_three_branch_heads.tp4", {"tp": 4}, NSA_IN, P(), nsa, ARGS8)
C.gspmd("g.yoco_shared_kv.sp4", {"sp": 4}, (P(None, "sp"), YOCO_SPEC), P(None, "sp"), yoco, (R(2, T10, D10), P10))
C.gspmd("g.softpick_decode_cache.dp2xsp4", {"dp": 2, "sp": 4}, (P("dp"), P("dp", "sp"), P("dp", "sp"), P("dp")),
        P("dp"), softpick_decode, ARGS6)
C.gspmd("g.partial_rope_then_nope_temp.sp4", {"sp": 4}, (P(None, "sp"), P(), P(), P(), P()), P(None, "sp"), pnope,
        ARGS9)

# ---------------------------------------------------------------------------
# 20. quiet (softmax-plus-one) flash-decoding, the +1 split as exp(-M)/n per device
H20, E20, T20 = 4, 8, 16


def quiet_decode(q, k, v, lens):
    s = jnp.einsum("bhd,bkhd->bhk", q, k) / np.sqrt(E20)
    s = jnp.where((jnp.arange(k.shape[1])[None] < lens[:, None])[:, None], s, NEG)
    s1 = jnp.concatenate([jnp.zeros(s.shape[:-1] + (1,)), s], -1)     # the +1: a zero logit ...
    p = jax.nn.softmax(s1, -1)[..., 1:]                                  # ... whose probability is dropped
    return jnp.einsum("bhk,bkhd->bhd", p, v)


def quiet_decode_sp(bug):
    n = 4

    def f(q, k, v, lens):
        tl = k.shape[1]
        kpos = idx("sp") * tl + jnp.arange(tl)
        ok = (kpos[None] < lens[:, None])[:, None]
        s = jnp.where(ok, jnp.einsum("bhd,bkhd->bhk", q, k) / np.sqrt(E20), NEG)
        mloc = jnp.maximum(jnp.max(s, -1), 0.0)
        m = pmax(mloc, "sp")
        p = jnp.exp(s - m[..., None])
        den = jnp.sum(p, -1)
        if bug == "plus-one-each-device":
            den = den + jnp.exp(-m)
        elif bug == "plus-one-at-local-max":
            den = den + jnp.exp(-mloc) / n
        else:
            den = den + jnp.exp(-m) / n                                  # n shares of the +1 make one
        num = jnp.einsum("bhk,bkhd->bhd", p, v)
        return psum(num, "sp") / psum(den, "sp")[..., None]
    return f


C.smap("s.quiet_decode_plus_one_shared_out.sp4", {"sp": 4}, quiet_decode_sp,
       (P(), P(None, "sp"), P(None, "sp"), P()), P(), quiet_decode,
       (R(3, H20, E20, scale=2.0), R(3, T20, H20, E20), R(3, T20, H20, E20), np.array([16, 3, 10], np.int32)),
       bugs=[("plus-one-each-device", ["wrong-scale"]), ("plus-one-at-local-max", ["wrong-value"])])

# ---------------------------------------------------------------------------
# 21. differential attention under context parallelism: two flash-decoding
#     states psum'd separately, lambda computed on device 0 and broadcast by a
#     masked psum, per-head GroupNorm (dp2 x sp4)
H21, E21, T21, Q21 = 2, 4, 16, 4


def diff_cp_ref(q1, q2, k1, k2, v, lv, gw, gb):
    lam = jnp.exp(lv[0] @ lv[1]) - jnp.exp(lv[2] @ lv[3]) + LAM_INIT

    def amap(q, k):
        return jax.nn.softmax(jnp.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(E21), -1)
    o = jnp.einsum("bhqk,bkhd->bqhd", amap(q1, k1) - lam * amap(q2, k2), v)
    return groupnorm_heads(o, gw, gb) * (1 - LAM_INIT)


def diff_cp(bug):
    def f(q1, q2, k1, k2, v, lv, gw, gb):
        lam0 = jnp.exp(lv[0] @ lv[1]) - jnp.exp(lv[2] @ lv[3]) + LAM_INIT
        lam = psum(lam0 if bug == "lambda-broadcast-unmasked" else jnp.where(idx("sp") == 0, lam0, 0.0), "sp")

        def part(q, k):
            s = jnp.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(E21)
            m = pmax(jnp.max(s, -1, keepdims=True), "sp")
            p = jnp.exp(s - m)
            return psum(jnp.einsum("bhqk,bkhd->bqhd", p, v), "sp"), psum(jnp.sum(p, -1), "sp")
        n1, l1 = part(q1, k1)
        n2, l2 = part(q2, k2)
        l1, l2 = jnp.transpose(l1, (0, 2, 1))[..., None], jnp.transpose(l2, (0, 2, 1))[..., None]
        o = n1 / l1 - lam * n2 / (l1 if bug == "second-map-first-den" else l2)
        return groupnorm_heads(o, gw, gb) * (1 - LAM_INIT)
    return f


C.smap("s.diff_attn_cp_two_states_groupnorm.dp2xsp4", {"dp": 2, "sp": 4}, diff_cp,
       (P("dp"), P("dp"), P("dp", "sp"), P("dp", "sp"), P("dp", "sp"), P(), P(), P()), P("dp"), diff_cp_ref,
       (R(4, Q21, H21, E21), R(4, Q21, H21, E21), R(4, T21, H21, E21), R(4, T21, H21, E21), R(4, T21, H21, 2 * E21),
        R(4, E21, scale=0.3), 1 + R(H21 * 2 * E21, scale=0.1), R(H21 * 2 * E21, scale=0.1)),
       bugs=[("lambda-broadcast-unmasked", ["wrong-scale"]), ("second-map-first-den", ["wrong-value"])])

# ---------------------------------------------------------------------------
# 22. the latent-rank-split MLA of 1. written with psum_scatter + all_gather for
#     the kv up-projection and the latent norm's sums of squares all_gather'd
def mla_latent_rs(bug):
    def latent_norm(z, g, width):
        ss = lax.all_gather(jnp.sum(jnp.square(z), -1), "tp")        # (tp, b, t)
        tot = ss[idx("tp")] * 4 if bug == "ss-own-entry" else jnp.sum(ss, 0)
        return z * lax.rsqrt(tot / width + EPS)[..., None] * g

    def f(x, p):
        q = psum(latent_norm(x @ p["wdq"], p["gq"], RQ) @ p["wuq"], "tp")
        ckv = latent_norm(x @ p["wdkv"], p["gkv"], RK)
        kv = jnp.concatenate([ckv @ p["wuk"], ckv @ p["wuv"]], -1)     # (b, t, H*(DN+DV))
        kv = lax.psum_scatter(kv, "tp", scatter_dimension=2, tiled=True)
        if bug == "scatter-mean":
            kv = kv / 4
        kv = lax.all_gather(kv, "tp", axis=2, tiled=True)
        kn, v = kv[..., :H1 * DN], kv[..., H1 * DN:]
        return mla_attend(x, q, kn, v, x @ p["wkr"]) @ p["wo"]
    return f


C.smap("s.mla_latent_split_rs_ag.dp2xtp4", {"dp": 2, "tp": 4}, mla_latent_rs, (P("dp"), MLA_SPEC), P("dp"),
       mla, (R(4, T1, D1), P1),
       bugs=[("ss-own-entry", ["missing-all-reduce"]), ("scatter-mean", ["wrong-scale"])])

# GSPMD: 23. quiet decode of 20. (zero logit concatenated) with the cache over sp4;
# 24. sigmoid attention with a learned bias, batch over dp4 and heads over tp2.
C.gspmd("g.quiet_decode_zero_logit.sp4", {"sp": 4}, (P(), P(None, "sp"), P(None, "sp"), P()), P(), quiet_decode,
        (R(3, H20, E20, scale=2.0), R(3, T20, H20, E20), R(3, T20, H20, E20), np.array([16, 3, 10], np.int32)))
C.gspmd("g.sigmoid_attn_bias_heads.dp4xtp2", {"dp": 4, "tp": 2}, (P("dp", None, "tp"),) * 3 + (P("tp"),),
        P("dp", None, "tp"), sigmoid_attn,
        (R(4, T4, H4, E4), R(4, T4, H4, E4), R(4, T4, H4, E4), (-np.log(T4) + R(H4, scale=0.5)).astype(np.float32)))

# ---------------------------------------------------------------------------
# 25. sigmoid attention with a learned per-head bias, heads over tp4 (dp2 x tp4),
#     row-parallel output projection whose bias is added as bias / tp on every
#     rank before the psum (n shares make one bias).
D25, H25, E25, T25 = 32, 8, 4, 8


def sig_heads(x, wqkv, hb, wo, bo):
    b, t, _ = x.shape
    q, k, v = jnp.split((x @ wqkv).reshape(b, t, -1, 3 * E25), 3, -1)
    s = jnp.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(E25) + hb[None, :, None, None]
    w = jnp.where(tril(t), jax.nn.sigmoid(s), 0.0)
    o = jnp.einsum("bhqk,bkhd->bqhd", w, v).reshape(b, t, -1)
    return o @ wo + bo


def sig_heads_tp(bug):
    def f(x, wqkv, hb, wo, bo):
        b, t, _ = x.shape
        q, k, v = jnp.split((x @ wqkv).reshape(b, t, -1, 3 * E25), 3, -1)
        s = jnp.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(E25) + hb[None, :, None, None]
        w = jnp.where(tril(t), jax.nn.sigmoid(s), 0.0)
        o = jnp.einsum("bhqk,bkhd->bqhd", w, v).reshape(b, t, -1)
        share = bo if bug == "bias-every-rank" else bo / 4
        if bug == "bias-share-local-heads":
            share = bo * (o.shape[-1] / (H25 * E25))
            share = share / 2
        return psum(o @ wo + share, "tp")
    return f


C.smap("s.sigmoid_attn_heads_bias_share.dp2xtp4", {"dp": 2, "tp": 4}, sig_heads_tp,
       (P("dp"), P(None, "tp"), P("tp"), P("tp"), P()), P("dp"), sig_heads,
       (R(4, T25, D25), R(D25, H25 * 3 * E25, scale=0.3), (-np.log(T25) + R(H25, scale=0.5)).astype(np.float32),
        R(H25 * E25, D25, scale=0.3), R(D25)),
       bugs=[("bias-every-rank", ["wrong-scale"]), ("bias-share-local-heads", ["wrong-scale"])])

# 26. the learned sink key / value decode of 12. with the sink term shared as
#     exp(sink - M) / n on every device instead of on device 0.
def sink_kv_share(bug):
    def f(q, k, v, lens, sk, sv):
        tl = k.shape[1]
        kpos = idx("sp") * tl + jnp.arange(tl)
        ok = (kpos[None] < lens[:, None])[:, None]
        s = jnp.where(ok, jnp.einsum("bhd,bkhd->bhk", q, k) / np.sqrt(E12), NEG)
        ssink = jnp.einsum("bhd,hd->bh", q, sk) / np.sqrt(E12)
        m = pmax(jnp.maximum(jnp.max(s, -1), ssink), "sp")
        p = jnp.exp(s - m[..., None])
        es = jnp.exp(ssink - m) / (2 if bug == "share-half" else 4)
        den = jnp.sum(p, -1) + es
        num = jnp.einsum("bhk,bkhd->bhd", p, v) + es[..., None] * sv
        return psum(num, "sp") / psum(den, "sp")[..., None]
    return f


C.smap("s.learned_sink_kv_share_per_device.sp4", {"sp": 4}, sink_kv_share,
       (P(), P(None, "sp"), P(None, "sp"), P(), P(), P()), P(), sink_kv_decode,
       (R(3, H12, E12, scale=1.5), R(3, T12, H12, E12), R(3, T12, H12, E12), np.array([16, 6, 11], np.int32),
        R(H12, E12), R(H12, E12)),
       bugs=[("share-half", ["wrong-scale"])])

C.finish()
