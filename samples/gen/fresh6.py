"""samples/fresh6: a sixth batch of programs as a user writes them, on the
theme of inference, serving and model components, none of them an idiom of
samples/fresh .. fresh4, probe, train or wild: one decode step writing a KV
cache with dynamic_update_slice (heads over tp), multi-query attention on a
dp x tp mesh, a paged KV cache whose pages are spread over the devices,
greedy sampling by all-gathering each shard's best logit and embedding the
chosen token from a vocab-sharded table, temperature + top-p filtering over a
sharded vocabulary, a speculative-decoding acceptance check, sliding-window
attention over a sequence-sharded input with a halo by ppermute, a ViT (patch
embedding, cls token, Megatron block), group-wise int8 weight-only
quantisation on a row-parallel layer, LoRA adapters on a tensor-parallel MLP,
dense top-2 mixture-of-experts inference with two experts per device
(all_to_all there and back), kNN retrieval with top_k over a sharded
database, ALiBi under context parallelism with heads over tp, an RMSNorm in
bf16 over a sharded hidden dim; under GSPMD a conv + BatchNorm inference net
with spatial sharding, a final RMSNorm with a tied LM head and greedy tokens,
a chunked prefill into a KV cache at a position, an int8 GEMM with int32
accumulation, and a bf16 patch embedding by a strided convolution.
Each shard_map family has the bug variants a careless parallelisation makes.
Exported with scalify_jax.export_pair; every pair is also run by JAX on seeded
inputs and its manifest entry records the largest difference from the
single-device run ("numerics").
Run from the repository root: bash samples/gen/run_fresh6.sh [SUBSTR...]
(only the pairs whose name contains a SUBSTR; the others keep their entries).
"""
import sys
import numpy as np
import jax, jax.numpy as jnp
from jax import lax
from jax.sharding import NamedSharding, PartitionSpec as P
sys.path.insert(0, "samples/gen")  # run from the repository root (run_fresh6.sh)
from fresh_lib import Corpus, seeded  # noqa: E402
from scalify_jax._export import make_mesh  # noqa: E402

C = Corpus("samples/fresh6", "samples/gen/fresh6.py", "samples/gen/run_fresh6.sh", sys.argv[1:])
rng, R, I = seeded(6161)
psum, pmax, idx = lax.psum, lax.pmax, lax.axis_index
HW_MESH, DT_MESH = make_mesh({"h": 4, "w": 2}), make_mesh({"dp": 2, "tp": 4})


def wsc(m, x, *spec):
    return lax.with_sharding_constraint(x, NamedSharding(m, P(*spec)))

# ---------------------------------------------------------------------------
# 1. one decode step with a KV cache: the new token's key and value written at
#    position pos with dynamic_update_slice, attention over the cache up to
#    pos; heads (of the projections and the cache) sharded over tp, the output
#    projection row-parallel.
DC_H, DC_D, DC_S, DC_M = 8, 4, 16, 16


def decode_step(x, kc, vc, pos, wq, wk, wv, wo):
    q = jnp.einsum("bm,mhd->bhd", x, wq)
    k = jnp.einsum("bm,mhd->bhd", x, wk)
    v = jnp.einsum("bm,mhd->bhd", x, wv)
    kc = lax.dynamic_update_slice(kc, k[:, :, None], (0, 0, pos, 0))
    vc = lax.dynamic_update_slice(vc, v[:, :, None], (0, 0, pos, 0))
    s = jnp.einsum("bhd,bhsd->bhs", q, kc) * DC_D ** -0.5
    s = jnp.where(jnp.arange(DC_S) <= pos, s, -1e30)
    o = jnp.einsum("bhs,bhsd->bhd", jax.nn.softmax(s, -1), vc)
    return jnp.einsum("bhd,hdm->bm", o, wo), kc, vc


def decode_tp(bug):
    def f(x, kc, vc, pos, wq, wk, wv, wo):
        q = jnp.einsum("bm,mhd->bhd", x, wq)
        k = jnp.einsum("bm,mhd->bhd", x, wk)
        v = jnp.einsum("bm,mhd->bhd", x, wv)
        kc = lax.dynamic_update_slice(kc, k[:, :, None], (0, 0, pos, 0))
        vc = lax.dynamic_update_slice(vc, v[:, :, None], (0, 0, pos, 0))
        s = jnp.einsum("bhd,bhsd->bhs", q, kc) * DC_D ** -0.5
        s = jnp.where(jnp.arange(kc.shape[2]) <= pos, s, -1e30)
        o = jnp.einsum("bhs,bhsd->bhd", jax.nn.softmax(s, -1), vc)
        y = jnp.einsum("bhd,hdm->bm", o, wo)
        if bug == "no-psum":
            return y, kc, vc
        if bug == "pmean-out":
            return lax.pmean(y, "tp"), kc, vc
        return psum(y, "tp"), kc, vc
    return f


dc_kc = R(2, DC_H, DC_S, DC_D)
dc_vc = R(2, DC_H, DC_S, DC_D)
dc_kc[:, :, 10:] = 0.0  # the cache is filled up to position 9
dc_vc[:, :, 10:] = 0.0
C.smap("s.decode_kvcache_heads.tp4", {"tp": 4}, decode_tp,
       (P(), P(None, "tp"), P(None, "tp"), P(), P(None, "tp"), P(None, "tp"), P(None, "tp"), P("tp")),
       (P(), P(None, "tp"), P(None, "tp")), decode_step,
       (R(2, DC_M), dc_kc, dc_vc, np.array(10, np.int32), R(DC_M, DC_H, DC_D, scale=0.3),
        R(DC_M, DC_H, DC_D, scale=0.3), R(DC_M, DC_H, DC_D, scale=0.3), R(DC_H, DC_D, DC_M, scale=0.3)),
       bugs=[("no-psum", ["missing-all-reduce"]), ("pmean-out", ["wrong-reduction"])])

# ---------------------------------------------------------------------------
# 2. multi-query attention (one shared key/value head) over a causal prompt:
#    batch over dp, the query heads over tp, the shared k/v projection
#    replicated on every tp device, the output projection row-parallel.
MQ_H, MQ_D, MQ_M = 8, 4, 16


def mqa(x, wq, wk, wv, wo):
    t = x.shape[1]
    q = jnp.einsum("btm,mhd->bhtd", x, wq)
    k, v = x @ wk, x @ wv
    s = jnp.einsum("bhtd,bsd->bhts", q, k) * MQ_D ** -0.5
    s = jnp.where(jnp.tril(jnp.ones((t, t), bool)), s, -1e30)
    o = jnp.einsum("bhts,bsd->bhtd", jax.nn.softmax(s, -1), v)
    return jnp.einsum("bhtd,hdm->btm", o, wo)


def mqa_tp(bug):
    def f(x, wq, wk, wv, wo):
        t = x.shape[1]
        q = jnp.einsum("btm,mhd->bhtd", x, wq)
        k, v = x @ wk, x @ wv
        if bug == "kv-psum":
            k = psum(k, "tp")
        s = jnp.einsum("bhtd,bsd->bhts", q, k) * MQ_D ** -0.5
        s = jnp.where(jnp.tril(jnp.ones((t, t), bool)), s, -1e30)
        o = jnp.einsum("bhts,bsd->bhtd", jax.nn.softmax(s, -1), v)
        return psum(jnp.einsum("bhtd,hdm->btm", o, wo), "dp" if bug == "psum-dp" else "tp")
    return f


C.smap("s.mqa_prompt.dp2xtp4", {"dp": 2, "tp": 4}, mqa_tp,
       (P("dp"), P(None, "tp"), P(), P(), P("tp")), P("dp"), mqa,
       (R(4, 8, MQ_M), R(MQ_M, MQ_H, MQ_D, scale=0.3), R(MQ_M, MQ_D, scale=0.3), R(MQ_M, MQ_D, scale=0.3),
        R(MQ_H, MQ_D, MQ_M, scale=0.3)),
       bugs=[("psum-dp", ["wrong-collective-group"]), ("kv-psum", ["wrong-reduction"])])

# ---------------------------------------------------------------------------
# 3. a paged KV cache: pools of pages [pages, page, heads, dim], the pages
#    spread over the kv devices; each sequence's block table names its pages;
#    a device gathers the pages it holds (zeros elsewhere) and a psum
#    assembles them; attention up to each sequence's length.
PG_N, PG_B, PG_H, PG_D, PG_NB = 16, 4, 2, 4, 4


def paged_attn(q, kpool, vpool, table, lens):
    b = q.shape[0]
    k = kpool[table].reshape(b, PG_NB * PG_B, PG_H, PG_D)
    v = vpool[table].reshape(b, PG_NB * PG_B, PG_H, PG_D)
    s = jnp.einsum("bhd,bshd->bhs", q, k) * PG_D ** -0.5
    s = jnp.where(jnp.arange(PG_NB * PG_B)[None, None] < lens[:, None, None], s, -1e30)
    return jnp.einsum("bhs,bshd->bhd", jax.nn.softmax(s, -1), v)


def paged_kv(bug):
    def f(q, kpool, vpool, table, lens):
        b, npl = q.shape[0], kpool.shape[0]
        loc = table if bug == "no-offset" else table - idx("kv") * npl
        here = ((loc >= 0) & (loc < npl))[..., None, None, None]
        if bug == "no-mask":
            here = True
        ci = jnp.clip(loc, 0, npl - 1)
        k = psum(jnp.where(here, kpool[ci], 0.0), "kv").reshape(b, PG_NB * PG_B, PG_H, PG_D)
        v = psum(jnp.where(here, vpool[ci], 0.0), "kv").reshape(b, PG_NB * PG_B, PG_H, PG_D)
        s = jnp.einsum("bhd,bshd->bhs", q, k) * PG_D ** -0.5
        s = jnp.where(jnp.arange(PG_NB * PG_B)[None, None] < lens[:, None, None], s, -1e30)
        return jnp.einsum("bhs,bshd->bhd", jax.nn.softmax(s, -1), v)
    return f


pg_table = rng.permutation(PG_N)[:3 * PG_NB].reshape(3, PG_NB).astype(np.int32)
C.smap("s.paged_kv_gather.kv4", {"kv": 4}, paged_kv, (P(), P("kv"), P("kv"), P(), P()), P(), paged_attn,
       (R(3, PG_H, PG_D), R(PG_N, PG_B, PG_H, PG_D), R(PG_N, PG_B, PG_H, PG_D), pg_table,
        np.array([13, 16, 6], np.int32)),
       bugs=[("no-offset", ["wrong-shard-dim"]), ("no-mask", ["wrong-reduction"])], check_vma=True)

# ---------------------------------------------------------------------------
# 4. greedy sampling over logits sharded on the vocabulary: each shard's best
#    logit and its global index are all-gathered, the best of the bests wins;
#    the chosen token is embedded from a vocab-sharded table (masked rows and
#    a psum).
GR_V, GR_M = 32, 8


def greedy_embed(logits, emb):
    tok = jnp.argmax(logits, -1).astype(jnp.int32)
    return tok, emb[tok]


def greedy_tp(bug):
    def f(logits, emb):
        vl = logits.shape[-1]
        off = idx("tp") * vl
        best = jnp.max(logits, -1)
        arg = jnp.argmax(logits, -1).astype(jnp.int32) + (0 if bug == "no-offset" else off)
        allb = lax.all_gather(best, "tp")
        alla = lax.all_gather(arg, "tp")
        w = jnp.argmax(allb, 0)
        tok = jnp.take_along_axis(alla, w[None], 0)[0]
        loc = tok - off
        here = (loc >= 0) & (loc < vl)
        if bug == "embed-no-mask":
            here = jnp.ones_like(here)
        e = jnp.where(here[:, None], emb[jnp.clip(loc, 0, vl - 1)], 0.0)
        return tok, psum(e, "tp")
    return f


C.smap("s.greedy_sample_embed.tp4", {"tp": 4}, greedy_tp, (P(None, "tp"), P("tp")), (P(), P()), greedy_embed,
       (R(6, GR_V, scale=3.0), R(GR_V, GR_M)),
       bugs=[("no-offset", ["wrong-shard-dim"]), ("embed-no-mask", ["wrong-reduction"])])

# ---------------------------------------------------------------------------
# 5. temperature and top-p (nucleus) filtering of logits sharded on the
#    vocabulary: a softmax through pmax/psum, the sorted probabilities from an
#    all-gather, the kept tokens renormalised by a psum.
TP_T, TP_P, TP_V = 0.7, 0.8, 32


def probs_t(z):
    e = jnp.exp(z - jnp.max(z, -1, keepdims=True))
    return e / jnp.sum(e, -1, keepdims=True)


def nucleus_threshold(pf):
    ps = -jnp.sort(-pf, -1)
    cs = jnp.cumsum(ps, -1)
    return jnp.min(jnp.where(cs - ps < TP_P, ps, jnp.inf), -1, keepdims=True)


def top_p(logits):
    p = probs_t(logits / TP_T)
    q = jnp.where(p >= nucleus_threshold(p), p, 0.0)
    return q / jnp.sum(q, -1, keepdims=True)


def top_p_tp(bug):
    def f(logits):
        z = logits / TP_T
        m = pmax(jnp.max(z, -1, keepdims=True), "tp")
        e = jnp.exp(z - m)
        p = e / psum(jnp.sum(e, -1, keepdims=True), "tp")
        if bug == "threshold-untempered":
            thr = nucleus_threshold(probs_t(lax.all_gather(logits, "tp", axis=1, tiled=True)))
        elif bug == "local-threshold":
            thr = nucleus_threshold(p)
        else:
            thr = nucleus_threshold(lax.all_gather(p, "tp", axis=1, tiled=True))
        q = jnp.where(p >= thr, p, 0.0)
        return q / psum(jnp.sum(q, -1, keepdims=True), "tp")
    return f


C.smap("s.top_p_filter.tp4", {"tp": 4}, top_p_tp, (P(None, "tp"),), P(None, "tp"), top_p,
       (R(4, TP_V, scale=1.5),),
       bugs=[("local-threshold", ["missing-all-reduce"]), ("threshold-untempered", ["constant-mismatch"])])

# ---------------------------------------------------------------------------
# 6. speculative decoding: K draft tokens are accepted while u < p/q (target
#    over draft probability of the token); the accepted count per sequence and
#    the mean acceptance rate. Batch over dp, the vocabulary over tp.
SD_K, SD_V = 4, 16


def spec_accept(tlog, dlog, toks, u):
    pt = jax.nn.softmax(tlog, -1)
    pd = jax.nn.softmax(dlog, -1)
    a = jnp.take_along_axis(pt, toks[..., None], -1)[..., 0]
    b = jnp.take_along_axis(pd, toks[..., None], -1)[..., 0]
    acc = (u < jnp.minimum(1.0, a / b)).astype(jnp.int32)
    n = jnp.sum(jnp.cumprod(acc, -1), -1)
    return n, jnp.mean(n) / SD_K


def spec_tp(bug):
    def f(tlog, dlog, toks, u):
        vl = tlog.shape[-1]
        lo = idx("tp") * vl

        def prob_of(lg):
            m = pmax(jnp.max(lg, -1, keepdims=True), "tp")
            e = jnp.exp(lg - m)
            p = e / psum(jnp.sum(e, -1, keepdims=True), "tp")
            loc = toks - lo
            here = (loc >= 0) & (loc < vl)
            pick = jnp.take_along_axis(p, jnp.clip(loc, 0, vl - 1)[..., None], -1)[..., 0]
            return psum(jnp.where(here, pick, 0.0), "dp" if bug == "pick-psum-dp" else "tp")
        a, b = prob_of(tlog), prob_of(dlog)
        acc = (u < jnp.minimum(1.0, a / b)).astype(jnp.int32)
        n = jnp.sum(jnp.cumprod(acc, -1), -1)
        r = jnp.mean(n)
        return n, (r if bug == "rate-no-pmean" else lax.pmean(r, "dp")) / SD_K
    return f


sd_t = R(8, SD_K, SD_V, scale=2.0)
sd_d = sd_t + R(8, SD_K, SD_V) * np.array([0.2] * 4 + [2.0] * 4, np.float32)[:, None, None]  # a good draft, a poor one
sd_tok = np.argmax(sd_d + R(8, SD_K, SD_V, scale=1.0), -1).astype(np.int32)
C.smap("s.spec_decode_accept.dp2xtp4", {"dp": 2, "tp": 4}, spec_tp,
       (P("dp", None, "tp"), P("dp", None, "tp"), P("dp"), P("dp")), (P("dp"), P()), spec_accept,
       (sd_t, sd_d, sd_tok, rng.uniform(0, 1, (8, SD_K)).astype(np.float32)),
       bugs=[("pick-psum-dp", ["wrong-collective-group"]), ("rate-no-pmean", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 7. sliding-window causal attention (each query sees the last SW_W keys) on a
#    sequence sharded over sp: the previous shard's last SW_W keys and values
#    come by ppermute; on the first shard those halo rows are masked.
SW_W, SW_T, SW_H, SW_D = 4, 32, 2, 4


def swa(q, k, v):
    t = jnp.arange(q.shape[0])
    d = t[:, None] - t[None, :]
    s = jnp.einsum("qhd,khd->hqk", q, k) * SW_D ** -0.5
    s = jnp.where((d >= 0) & (d < SW_W), s, -1e30)
    return jnp.einsum("hqk,khd->qhd", jax.nn.softmax(s, -1), v)


def swa_sp(bug):
    n = 4

    def f(q, k, v):
        tl = q.shape[0]
        fwd = [(i, i + 1) for i in range(n - 1)]
        if bug == "halo-swap":
            fwd = [(i + 1, i) for i in range(n - 1)]
        kk = jnp.concatenate([lax.ppermute(k[-SW_W:], "sp", fwd), k], 0)
        vv = jnp.concatenate([lax.ppermute(v[-SW_W:], "sp", fwd), v], 0)
        qpos = idx("sp") * tl + jnp.arange(tl)
        kpos = idx("sp") * tl - SW_W + jnp.arange(tl + SW_W)
        d = qpos[:, None] - kpos[None, :]
        ok = (d >= 0) & (d < SW_W)
        if bug != "no-edge-mask":
            ok = ok & (kpos[None, :] >= 0)
        s = jnp.einsum("qhd,khd->hqk", q, kk) * SW_D ** -0.5
        s = jnp.where(ok, s, -1e30)
        return jnp.einsum("hqk,khd->qhd", jax.nn.softmax(s, -1), vv)
    return f


C.smap("s.sliding_window_halo.sp4", {"sp": 4}, swa_sp, (P("sp"), P("sp"), P("sp")), P("sp"), swa,
       (R(SW_T, SW_H, SW_D), R(SW_T, SW_H, SW_D), R(SW_T, SW_H, SW_D)),
       bugs=[("halo-swap", ["wrong-collective-group"]), ("no-edge-mask", ["wrong-shard-dim"])], check_vma=True)

# ---------------------------------------------------------------------------
# 8. a ViT: 4x4 patches of an 8x8 image embedded, a cls token and position
#    embeddings, one pre-norm block with the heads and the MLP hidden units
#    over tp (Megatron), the batch over dp; the cls token's features out.
VT_P, VT_M, VT_H, VT_F = 4, 16, 4, 32


def vt_ln(x):
    m = jnp.mean(x, -1, keepdims=True)
    return (x - m) * lax.rsqrt(jnp.mean(jnp.square(x - m), -1, keepdims=True) + 1e-6)


def patches(img):
    b, h, w, c = img.shape
    x = img.reshape(b, h // VT_P, VT_P, w // VT_P, VT_P, c).transpose(0, 1, 3, 2, 4, 5)
    return x.reshape(b, (h // VT_P) * (w // VT_P), VT_P * VT_P * c)


def vit_body(img, wp, cls, pos, wqkv, wo, w1, w2, attn_red, mlp_red):
    x = patches(img) @ wp
    x = jnp.concatenate([jnp.broadcast_to(cls, (x.shape[0], 1, VT_M)), x], 1) + pos
    h = vt_ln(x)
    q, k, v = jnp.split(jnp.einsum("btm,mhe->bthe", h, wqkv), 3, -1)
    s = jnp.einsum("bqhe,bkhe->bhqk", q, k) * q.shape[-1] ** -0.5
    o = jnp.einsum("bhqk,bkhe->bqhe", jax.nn.softmax(s, -1), v)
    x = x + attn_red(jnp.einsum("bqhe,hem->bqm", o, wo))
    x = x + mlp_red(jax.nn.gelu(vt_ln(x) @ w1) @ w2)
    return x[:, 0]


def vit(img, wp, cls, pos, wqkv, wo, w1, w2):
    return vit_body(img, wp, cls, pos, wqkv, wo, w1, w2, lambda y: y, lambda y: y)


def vit_tp(bug):
    def f(img, wp, cls, pos, wqkv, wo, w1, w2):
        ar = (lambda y: psum(y, "dp")) if bug == "attn-psum-dp" else (lambda y: psum(y, "tp"))
        mr = (lambda y: y) if bug == "mlp-no-psum" else (lambda y: psum(y, "tp"))
        return vit_body(img, wp, cls, pos, wqkv, wo, w1, w2, ar, mr)
    return f


C.smap("s.vit_patch_block.dp2xtp4", {"dp": 2, "tp": 4}, vit_tp,
       (P("dp"), P(), P(), P(), P(None, "tp"), P("tp"), P(None, "tp"), P("tp")), P("dp"), vit,
       (R(4, 8, 8, 3), R(VT_P * VT_P * 3, VT_M, scale=0.2), R(1, 1, VT_M), R(5, VT_M, scale=0.1),
        R(VT_M, VT_H, 12, scale=0.3), R(VT_H, 4, VT_M, scale=0.3), R(VT_M, VT_F, scale=0.3),
        R(VT_F, VT_M, scale=0.3)),
       bugs=[("mlp-no-psum", ["missing-all-reduce"]), ("attn-psum-dp", ["wrong-collective-group"])])

# ---------------------------------------------------------------------------
# 9. conv + BatchNorm inference (running statistics folded in by hand), relu
#    and a 2x2 average pool, the image sharded over H and W (GSPMD).


def conv_bn(x, k, mean, var, gamma, beta):
    y = lax.conv_general_dilated(x, k, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))
    y = wsc(HW_MESH, y, None, "h", "w")
    y = jax.nn.relu((y - mean) * lax.rsqrt(var + 1e-5) * gamma + beta)
    b, h, w, c = y.shape
    return jnp.mean(y.reshape(b, h // 2, 2, w // 2, 2, c), (2, 4))


C.gspmd("g.conv_bn_infer_pool.h4xw2", {"h": 4, "w": 2}, (P(None, "h", "w"), P(), P(), P(), P(), P()),
        P(None, "h", "w"), conv_bn,
        (R(2, 16, 16, 4), R(3, 3, 4, 8, scale=0.3), R(8, scale=0.1), 1.0 + np.abs(R(8, scale=0.2)),
         1.0 + R(8, scale=0.1), R(8, scale=0.1)))

# ---------------------------------------------------------------------------
# 10. group-wise int8 weight-only quantisation (one f32 scale per group of
#     GQ_G input rows and output column) on a row-parallel layer: the int8
#     rows over tp, the scales replicated and sliced by each device's groups;
#     the bias added after the psum.
GQ_IN, GQ_OUT, GQ_G = 32, 16, 4


def dequant(wq, s):
    return (wq.astype(jnp.float32).reshape(-1, GQ_G, wq.shape[1]) * s[:, None, :]).reshape(wq.shape)


def w8_linear(x, wq, s, b):
    return x @ dequant(wq, s) + b


def w8_tp(bug):
    def f(x, wq, s, b):
        ng = wq.shape[0] // GQ_G
        sl = lax.dynamic_slice_in_dim(s, (0 if bug == "scales-no-offset" else idx("tp")) * ng, ng, 0)
        y = x @ dequant(wq, sl)
        if bug == "bias-before-psum":
            return psum(y + b, "tp")
        return psum(y, "tp") + b
    return f


w8_w = R(GQ_IN, GQ_OUT)
w8_s = np.abs(w8_w.reshape(-1, GQ_G, GQ_OUT)).max(1) / 127.0
w8_q = np.clip(np.round(w8_w.reshape(-1, GQ_G, GQ_OUT) / w8_s[:, None]), -127, 127).astype(np.int8).reshape(w8_w.shape)
C.smap("s.int8_groupwise_rowpar.tp4", {"tp": 4}, w8_tp, (P(None, "tp"), P("tp"), P(), P()), P(), w8_linear,
       (R(4, GQ_IN), w8_q, w8_s.astype(np.float32), R(GQ_OUT, scale=0.1)),
       bugs=[("scales-no-offset", ["wrong-shard-dim"]), ("bias-before-psum", ["wrong-reduction"])],
       check_vma=True)

# ---------------------------------------------------------------------------
# 11. LoRA adapters on a tensor-parallel MLP: the up projection column-
#     parallel (its B factor sharded on the same columns, A replicated), the
#     down projection row-parallel (its A factor sharded on the same rows, B
#     replicated): the low-rank activations need their own psum.
LR_S = 0.5


def lora_mlp(x, w1, a1, b1, w2, a2, b2):
    h = jax.nn.gelu(x @ w1 + LR_S * (x @ a1) @ b1)
    return h @ w2 + LR_S * (h @ a2) @ b2


def lora_tp(bug):
    def f(x, w1, a1, b1, w2, a2, b2):
        h = jax.nn.gelu(x @ w1 + LR_S * (x @ a1) @ b1)
        z = h @ a2
        if bug != "lora-no-psum":
            z = psum(z, "tp")
        low = LR_S * z @ b2
        if bug == "lora-psum-twice":
            low = psum(low, "tp")
        return psum(h @ w2, "tp") + low
    return f


C.smap("s.lora_tp_mlp.tp4", {"tp": 4}, lora_tp, (P(), P(None, "tp"), P(), P(None, "tp"), P("tp"), P("tp"), P()), P(),
       lora_mlp, (R(4, 16), R(16, 32, scale=0.3), R(16, 4, scale=0.3), R(4, 32, scale=0.3), R(32, 16, scale=0.3),
                  R(32, 4, scale=0.3), R(4, 16, scale=0.3)),
       bugs=[("lora-no-psum", ["missing-all-reduce"]), ("lora-psum-twice", ["wrong-reduction"])])

# ---------------------------------------------------------------------------
# 12. dense top-2 mixture-of-experts inference: every token goes to every
#     expert (no capacity), eight experts, two per ep device; all_to_all sends
#     each device's tokens to the experts' devices and back; the top-2 gates
#     (renormalised) weight the expert outputs.
ME_E, ME_D, ME_F = 8, 8, 16


def top2_gates(x, wg):
    v, i = lax.top_k(jax.nn.softmax(x @ wg, -1), 2)
    v = v / jnp.sum(v, -1, keepdims=True)
    return jnp.sum(jax.nn.one_hot(i, ME_E) * v[..., None], 1)


def moe_dense(x, wg, w1, w2):
    eo = jnp.einsum("etf,efd->etd", jax.nn.gelu(jnp.einsum("td,edf->etf", x, w1)), w2)
    return jnp.einsum("te,etd->td", top2_gates(x, wg), eo)


def moe_dense_ep(bug):
    def f(x, wg, w1, w2):
        tl, le = x.shape[0], w1.shape[0]
        xe = lax.all_to_all(jnp.broadcast_to(x, (ME_E, tl, ME_D)), "ep", 0, 0, tiled=True)
        if bug == "expert-order":
            xe = xe.reshape(le, -1, tl, ME_D).swapaxes(0, 1)
        else:
            xe = xe.reshape(-1, le, tl, ME_D)   # [source device, local expert, tokens, d]
        h = jax.nn.gelu(jnp.einsum("sltd,ldf->sltf", xe, w1))
        eo = jnp.einsum("sltf,lfd->sltd", h, w2).reshape(ME_E, tl, ME_D)
        eo = lax.all_to_all(eo, "ep", 0, 0, tiled=True)  # [expert, my tokens, d]
        return jnp.einsum("te,etd->td", top2_gates(x, wg), eo)
    return f


C.smap("s.moe_dense_top2_a2a.ep4", {"ep": 4}, moe_dense_ep, (P("ep"), P(), P("ep"), P("ep")), P("ep"), moe_dense,
       (R(16, ME_D), R(ME_D, ME_E), R(ME_E, ME_D, ME_F, scale=0.3), R(ME_E, ME_F, ME_D, scale=0.3)),
       bugs=[("expert-order", ["layout-mismatch"])], check_vma=True)

# ---------------------------------------------------------------------------
# 13. kNN retrieval (as in kNN-LM): cosine similarity of queries with a
#     database sharded over its rows, each shard's top k at global indices,
#     all-gathered, the global top k; the retrieved rows' values (sharded
#     with the keys) by a masked gather and psum, weighted by a softmax.
KN_N, KN_K, KN_T = 32, 3, 0.1


def knn(q, keys, vals):
    kn = keys / jnp.linalg.norm(keys, axis=-1, keepdims=True)
    sv, si = lax.top_k(q @ kn.T, KN_K)
    w = jax.nn.softmax(sv / KN_T, -1)
    return jnp.einsum("qk,qkc->qc", w, vals[si]), si


def knn_db(bug):
    def f(q, keys, vals):
        nl = keys.shape[0]
        off = idx("db") * nl
        kn = keys / jnp.linalg.norm(keys, axis=-1, keepdims=True)
        lv, li = lax.top_k(q @ kn.T, KN_K)
        if bug != "no-offset":
            li = li + off
        av = lax.all_gather(lv, "db", axis=1, tiled=True)
        ai = lax.all_gather(li, "db", axis=1, tiled=True)
        sv, j = lax.top_k(av, KN_K)
        si = jnp.take_along_axis(ai, j, -1)
        loc = si - off
        here = (loc >= 0) & (loc < nl)
        got = jnp.where(here[..., None], vals[jnp.clip(loc, 0, nl - 1)], 0.0)
        if bug != "vals-no-psum":
            got = psum(got, "db")
        w = jax.nn.softmax(sv / KN_T, -1)
        return jnp.einsum("qk,qkc->qc", w, got), si
    return f


C.smap("s.knn_retrieval_topk.db4", {"db": 4}, knn_db, (P(), P("db"), P("db")), (P(), P()), knn,
       (R(4, 8), R(KN_N, 8), R(KN_N, 4)),
       bugs=[("no-offset", ["wrong-shard-dim"]), ("vals-no-psum", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 14. ALiBi attention under context parallelism: queries sharded on the
#     sequence over sp (keys and values all-gathered), heads over tp; the bias
#     -slope_h * (i - j) needs the global query position and the global head.
AL_T, AL_H, AL_D = 16, 4, 4


def alibi_bias(qpos, kpos, heads):
    slope = 2.0 ** (-8.0 * (heads + 1) / AL_H)
    d = (qpos[:, None] - kpos[None, :]).astype(jnp.float32)
    return jnp.where(d >= 0, -slope[:, None, None] * d, -1e30)


def alibi_attn(q, k, v):
    t = jnp.arange(q.shape[0])
    s = jnp.einsum("qhd,khd->hqk", q, k) * AL_D ** -0.5 + alibi_bias(t, t, jnp.arange(AL_H))
    return jnp.einsum("hqk,khd->qhd", jax.nn.softmax(s, -1), v)


def alibi_cp(bug):
    def f(q, k, v):
        tl, hl = q.shape[0], q.shape[1]
        ax = "tp" if bug == "gather-over-tp" else "sp"
        kf = lax.all_gather(k, ax, axis=0, tiled=True)
        vf = lax.all_gather(v, ax, axis=0, tiled=True)
        qpos = idx("sp") * tl + jnp.arange(tl)
        heads = jnp.arange(hl) + (0 if bug == "slope-no-head-offset" else idx("tp") * hl)
        s = jnp.einsum("qhd,khd->hqk", q, kf) * AL_D ** -0.5 + alibi_bias(qpos, jnp.arange(kf.shape[0]), heads)
        return jnp.einsum("hqk,khd->qhd", jax.nn.softmax(s, -1), vf)
    return f


C.smap("s.alibi_context_par.sp4xtp2", {"sp": 4, "tp": 2}, alibi_cp, (P("sp", "tp"),) * 3, P("sp", "tp"), alibi_attn,
       (R(AL_T, AL_H, AL_D), R(AL_T, AL_H, AL_D), R(AL_T, AL_H, AL_D)),
       bugs=[("gather-over-tp", ["wrong-collective-group"]), ("slope-no-head-offset", ["wrong-shard-dim"])],
       check_vma=True)

# ---------------------------------------------------------------------------
# 15. RMSNorm of bf16 activations over a hidden dim sharded on tp: the mean
#     square in f32 through a psum, the output f32.


def rms_bf16(x, g):
    xf = x.astype(jnp.float32)
    return xf * lax.rsqrt(jnp.mean(xf * xf, -1, keepdims=True) + 1e-6) * g


def rms_tp(bug):
    def f(x, g):
        xf = x.astype(jnp.float32)
        if bug == "bf16-psum":
            ss = psum(jnp.sum(x * x, -1, keepdims=True), "tp").astype(jnp.float32)
        else:
            ss = jnp.sum(xf * xf, -1, keepdims=True)
            ss = ss if bug == "no-psum" else psum(ss, "tp")
        return xf * lax.rsqrt(ss / 32 + 1e-6) * g
    return f


C.smap("s.rmsnorm_bf16_hidden.tp4", {"tp": 4}, rms_tp, (P(None, "tp"), P("tp")), P(None, "tp"), rms_bf16,
       (R(8, 32, scale=3.0, dt=jnp.bfloat16), 1.0 + R(32, scale=0.1)),
       bugs=[("no-psum", ["missing-all-reduce"]), ("bf16-psum", ["dtype-mismatch"])], check_vma=True)

# ---------------------------------------------------------------------------
# 16. the end of a decoder under GSPMD: a final RMSNorm, an LM head tied to
#     the vocab-sharded embedding table, log-softmax and the greedy tokens;
#     the logits constrained to (dp, -, tp).


def lm_head(h, g, emb):
    hn = h * lax.rsqrt(jnp.mean(h * h, -1, keepdims=True) + 1e-6) * g
    logits = wsc(DT_MESH, jnp.einsum("btm,vm->btv", hn, emb), "dp", None, "tp")
    return jax.nn.log_softmax(logits, -1), jnp.argmax(logits, -1).astype(jnp.int32)


C.gspmd("g.rmsnorm_tied_lmhead.dp2xtp4", {"dp": 2, "tp": 4}, (P("dp"), P(), P("tp")),
        (P("dp", None, "tp"), P("dp")), lm_head, (R(4, 4, 16), 1.0 + R(16, scale=0.1), R(32, 16, scale=0.5)))

# ---------------------------------------------------------------------------
# 17. chunked prefill: a chunk of CH_T new keys/values written into a KV cache
#     [batch, seq, heads, dim] at position pos (dynamic_update_slice), the
#     chunk's queries attending causally to the cache (GSPMD, batch over dp and
#     heads over tp).
CH_T, CH_S, CH_H, CH_D = 4, 16, 4, 4


def prefill_chunk(q, k, v, kc, vc, pos):
    kc = lax.dynamic_update_slice(kc, k, (0, pos, 0, 0))
    vc = lax.dynamic_update_slice(vc, v, (0, pos, 0, 0))
    qpos = pos + jnp.arange(CH_T)
    s = jnp.einsum("bqhd,bkhd->bhqk", q, kc) * CH_D ** -0.5
    s = jnp.where(jnp.arange(CH_S)[None, :] <= qpos[:, None], s, -1e30)
    o = jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(s, -1), vc)
    return o, kc, vc


ch_kc, ch_vc = R(2, CH_S, CH_H, CH_D), R(2, CH_S, CH_H, CH_D)
ch_kc[:, 6:] = 0.0
ch_vc[:, 6:] = 0.0
ch_sp = P("dp", None, "tp")
C.gspmd("g.prefill_chunk_dus.dp2xtp4", {"dp": 2, "tp": 4}, (ch_sp, ch_sp, ch_sp, ch_sp, ch_sp, P()),
        (ch_sp, ch_sp, ch_sp), prefill_chunk,
        (R(2, CH_T, CH_H, CH_D), R(2, CH_T, CH_H, CH_D), R(2, CH_T, CH_H, CH_D), ch_kc, ch_vc,
         np.array(6, np.int32)))

# ---------------------------------------------------------------------------
# 18. an int8 x int8 GEMM with int32 accumulation (the contraction sharded
#     over tp, rows over dp), then the int32 result requantised with the
#     per-row and per-column scales (GSPMD).


def int8_gemm(xq, wq, sx, sw):
    acc = lax.dot_general(xq, wq, (((1,), (0,)), ((), ())), preferred_element_type=jnp.int32)
    return acc, acc.astype(jnp.float32) * sx[:, None] * sw[None, :]


C.gspmd("g.int8_gemm_int32acc.dp2xtp4", {"dp": 2, "tp": 4}, (P("dp", "tp"), P("tp"), P("dp"), P()),
        (P("dp"), P("dp")), int8_gemm,
        (I(-127, 128, 8, 32).astype(np.int8), I(-127, 128, 32, 16).astype(np.int8),
         np.abs(R(8, scale=0.01)), np.abs(R(16, scale=0.01))))

# ---------------------------------------------------------------------------
# 19. a bf16 patch embedding as a strided convolution (f32 accumulation),
#     plus position embeddings, batch over dp and the embedding channels over
#     tp, constrained after the conv (GSPMD).


def patch_embed(img, k, pos):
    y = lax.conv_general_dilated(img, k, (4, 4), "VALID", dimension_numbers=("NHWC", "HWIO", "NHWC"),
                                 preferred_element_type=jnp.float32)
    y = wsc(DT_MESH, y, "dp", None, None, "tp")
    b, h, w, c = y.shape
    return y.reshape(b, h * w, c) + pos


C.gspmd("g.patch_embed_bf16.dp2xtp4", {"dp": 2, "tp": 4}, (P("dp"), P(None, None, None, "tp"), P(None, "tp")),
        P("dp", None, "tp"), patch_embed,
        (R(4, 16, 16, 3, dt=jnp.bfloat16), R(4, 4, 3, 16, scale=0.2, dt=jnp.bfloat16), R(16, 16, scale=0.1)))

# ---------------------------------------------------------------------------
C.finish()
