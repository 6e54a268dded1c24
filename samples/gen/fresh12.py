"""samples/fresh12: a twelfth batch of programs as a user writes them, on
the theme of attention across devices, above all the many ways people write
the online-softmax (flash attention) combination of per-device partial
attention, none of them an idiom of samples/fresh .. fresh11, probe, train
or wild.
shard_map families (context parallelism: keys and values sharded over the
sequence, each device attends to its block, the partial results combined):
the output of a locally normalised softmax rescaled by l * exp(m - pmax(m))
before the psum (keepdims maxima); the probabilities rescaled before the
dot (the global maximum by pmax first, squeezed maxima, a causal mask
filled with -inf so that rows are fully masked on some devices) on a
dp x sp mesh; log-sum-exp weights exp(lse_local - lse_global) with a
finfo.min fill; a key-padding mask whose maximum is guarded to 0 on fully
masked rows and numerator and denominator stacked into one psum, heads over
tp; bf16 inputs with f32 scores and f32 accumulation of bf16 probabilities;
flash-decoding of one query token with GQA groups, the per-split outputs
and log-sum-exps all_gathered and merged by a softmax over the splits;
ring attention with K and V stacked into one ppermute per step and the
merge written as out - sigmoid(lse_b - lse) (out - o_b), lse -
log_sigmoid(lse - lse_b) (an unrolled python loop); causal ring attention in
a lax.fori_loop with the source block's positions; zigzag load-balanced
causal attention (each device holds chunks i and 2n-1-i, keys all_gathered);
sliding-window attention with a window longer than a shard (halos from the
previous two shards by two ppermutes) plus an attention-sink token (key 0,
broadcast by a masked psum) counted only outside the window; gpt-oss style
learned sink logits per head added once to the psum'd denominator and to
the maximum; bidirectional ALiBi -slope |i - j| from axis_index offsets of
the key block and the head block; Gemma-2 logit soft-capping with GQA
kv heads repeated; OLMo-2 QK-norm (RMSNorm over all heads of the projection)
with heads over tp (the mean square psum'd, the gain sliced at the device's
offset); GQA on a two-axis tensor mesh (kv x g) with fewer kv heads than
devices (q heads over the tuple, kv heads over kv only, the kv head picked by
axis_index of g); cross-attention whose decoder sequence is over sp and
encoder memory over another axis kv (with encoder padding); an SGD step
through the log-sum-exp combination (keys sliced from the replicated
sequence at the device's offset, the maximum under stop_gradient,
check_vma=True) and an Adam step through causal ring attention in a
lax.scan (check_vma=True).
Under GSPMD: a memory-efficient attention written as a lax.scan over key
chunks with an online softmax on a sequence-sharded input, GQA with the kv
heads jnp.repeat'ed and constrained over tp8, a Gemma-2 style local/global
two-layer model with soft-capped attention and final logits in an AdamW
step, per-head QK-norm with RoPE in an Adam step with the sequence over sp,
learned sinks with a sliding window (heads over tp, sequence over sp),
bidirectional ALiBi with the keys' sequence sharded, cross-attention with
the encoder over its own axis, flash-decoding of MQA as a vmap over
cache splits merged by log-sum-exp, zigzag reordering by jnp.take of a
sequence-sharded input, jax.nn.dot_product_attention with a local window
and GQA, a block with sinks, soft-capping and QK-norm in an AdamW step, a
bf16 flash-style step (f32 softmax, bf16 probabilities, f32 accumulation),
ring attention emulated by jnp.roll of key blocks, and blocked local
attention over the previous block.
Fully masked rows: where the maximum is taken over a row that can be fully
masked on a device, the programs do what a user does -- take the global
maximum first (pmax, finite), guard the local maximum to 0 (flash-attn's
convention), or fill with finfo.min instead of -inf; no correct program
meets exp(-inf - -inf). The seeded inputs keep every row of the global
softmax non-empty (lengths >= 1, the diagonal in causal masks).
The training steps take the maximum under lax.stop_gradient (it only
shifts the exponent), as flash-attention implementations do; pmax has no
differentiation rule.
Left out, as idioms of earlier batches: split-KV decoding with a pmax and
psum (fresh9: here flash-decoding merges by all_gather), ring attention with
a packed-sequence segment mask and the usual running (m, l, acc) rescale in
an unrolled loop (fresh8: here the lse / sigmoid merge and a fori_loop), a
one-hop sliding-window halo (fresh6: here two hops and a sink token), ALiBi
with queries sharded and keys all-gathered (fresh6: here keys sharded,
bidirectional), GQA with tp over kv heads by a dynamic_slice of the kv
weights (probe batch12: here a two-axis tensor mesh), the minimal online
softmax of probe batch17 and Ulysses (fresh2, fresh9).
Two minimal pairs isolate what programs above hinge on: the merge of
per-device log-sum-exps of a row's blocks (shard_map, 3.'s combination),
and the gradients of GQA attention whose replicated kv weights are
jnp.repeat'ed to query heads over tp (GSPMD, shared by 21. and 29.).
Nothing was dropped or changed for its numerics: every correct pair agrees
with its baseline at rounding level (see "numerics": f32 pairs within a few
1e-6; the bf16 shard_map pair exactly, the bf16 GSPMD step within half a
bf16 ulp of its outputs). Two first-draft bug variants were replaced
because their error was NaN or inf (which "numerics", a max that skips
NaN, shows as 0): weights exp(lse_global - lse_local) under a finfo.min
fill, and a merge softmax over the wrong axis of -inf lses; a third NaN
bug is kept on purpose (the -inf guard missing, said in its manifest note).
Each shard_map family has the bug variants a careless parallelisation makes
(rescale inverted, the local maximum used as global, a weight without its
sum, an lse merged by the max alone or without its shift added back, merge
weights not normalised, a denominator or the stacked psum over the wrong
axis, the -inf guard missing, local key positions, a ring that resends its
own block, goes the wrong way or stops a step short, a running sum not
rescaled, an lse update with the wrong sign, zigzag positions taken as
contiguous, a window off by one or a halo one hop short, a sink counted
twice or on every device, a head offset missing, soft-capping after the
shift, kv heads tiled instead of repeated or interleaved into groups, a
local QK-norm or an unsliced gain, a kv head chosen without the group
offset, a psum over one axis of two, probabilities psum'd in bf16, keys
sliced at offset 0, a loss psum'd where it is pmean'd).
Exported with scalify_jax.export_pair; every pair is also run by JAX on
seeded inputs and its manifest entry records the largest difference from
the single-device run ("numerics").
Run from the repository root: bash samples/gen/run_fresh12.sh [SUBSTR...]
(only the pairs whose name contains a SUBSTR; the others keep their entries).
"""
import sys
import numpy as np
import jax, jax.numpy as jnp
from jax import lax
from jax.sharding import NamedSharding, PartitionSpec as P
import optax
sys.path.insert(0, "samples/gen")  # run from the repository root (run_fresh12.sh)
from fresh_lib import Corpus, seeded, mse, np_tree, state_specs  # noqa: E402
from scalify_jax import make_mesh  # noqa: E402

SCRIPT = "samples/gen/fresh12.py"
C = Corpus("samples/fresh12", SCRIPT, "samples/gen/run_fresh12.sh", sys.argv[1:])
rng, R, I = seeded(1212)
psum, pmax, pmean, idx = lax.psum, lax.pmax, lax.pmean, lax.axis_index
NEG = -jnp.inf


def attention(q, k, v, ok=None, bias=None):
    """Plain softmax attention, q (b, q, h, e), k / v (b, k, h, e); ok and bias
    broadcast against the (b, h, q, k) scores."""
    s = jnp.einsum("bqhe,bkhe->bhqk", q, k) / np.sqrt(q.shape[-1])
    if bias is not None:
        s = s + bias
    if ok is not None:
        s = jnp.where(ok, s, NEG)
    return jnp.einsum("bhqk,bkhe->bqhe", jax.nn.softmax(s, -1), v)


def causal(tq, tk):
    return np.arange(tq)[:, None] >= np.arange(tk)[None, :]


def scores(q, k):
    return jnp.einsum("bqhe,bkhe->bhqk", q, k) / np.sqrt(q.shape[-1])


# ---------------------------------------------------------------------------
# 1. context parallelism, the output rescaled: queries on every device, keys
#    and values over sp; each device normalises its own softmax, then the
#    outputs are weighted by l * exp(m - pmax(m)) (keepdims maxima) and
#    psum'd, divided by the psum'd weights.
A_B, A_T, A_H, A_E = 2, 16, 2, 8


def cp_rescale_out(bug):
    def f(q, k, v):
        s = scores(q, k)
        m = s.max(-1, keepdims=True)
        e = jnp.exp(s - m)
        l = e.sum(-1, keepdims=True)
        o = jnp.einsum("bhqk,bkhe->bhqe", e / l, v)
        gm = m if bug == "local-max-as-global" else pmax(m, "sp")
        c = jnp.exp(gm - m) if bug == "rescale-inverted" else jnp.exp(m - gm)
        w = c if bug == "weight-without-sum" else l * c
        return jnp.swapaxes(psum(o * w, "sp") / psum(w, "sp"), 1, 2)
    return f


C.smap("s.cp_rescale_output_keepdims.sp4", {"sp": 4}, cp_rescale_out, (P(), P(None, "sp"), P(None, "sp")), P(),
       attention, (R(A_B, A_T, A_H, A_E), R(A_B, A_T, A_H, A_E), R(A_B, A_T, A_H, A_E)),
       bugs=[("rescale-inverted", ["constant-mismatch"]), ("local-max-as-global", ["missing-all-reduce"]),
             ("weight-without-sum", ["wrong-reduction"])])


# ---------------------------------------------------------------------------
# 2. causal context parallelism, the probabilities rescaled before the dot:
#    the global row maximum first (pmax of squeezed local maxima; a query
#    before every key of the block has a row of -inf there), then exp(s - M)
#    @ v and the row sums, each psum'd. Batch over dp.
def causal_attn(q, k, v):
    return attention(q, k, v, causal(q.shape[1], k.shape[1]))


def cp_rescale_probs(bug):
    def f(q, k, v):
        tl = k.shape[1]
        kpos = jnp.arange(tl) + (0 if bug == "key-pos-no-offset" else idx("sp") * tl)
        s = jnp.where(jnp.arange(q.shape[1])[:, None] >= kpos[None, :], scores(q, k), NEG)
        gm = pmax(jnp.max(s, -1), "sp")
        p = jnp.exp(s - gm[..., None])
        num = psum(jnp.einsum("bhqk,bkhe->bhqe", p, v), "sp")
        den = psum(jnp.sum(p, -1), "dp" if bug == "den-psum-over-dp" else "sp")
        return jnp.swapaxes(num / den[..., None], 1, 2)
    return f


C.smap("s.cp_causal_rescale_probs_neginf.dp2xsp4", {"dp": 2, "sp": 4}, cp_rescale_probs,
       (P("dp"), P("dp", "sp"), P("dp", "sp")), P("dp"), causal_attn,
       (R(4, A_T, A_H, A_E), R(4, A_T, A_H, A_E), R(4, A_T, A_H, A_E)),
       bugs=[("key-pos-no-offset", ["wrong-shard-dim"]), ("den-psum-over-dp", ["wrong-collective-group"])])


# ---------------------------------------------------------------------------
# 3. causal context parallelism through log-sum-exps: each device returns its
#    normalised output and lse = m + log(l) (masked scores filled with
#    finfo.min, so a fully masked row has a finite, hugely negative lse); the
#    global lse by a pmax-shifted psum, the outputs weighted by
#    exp(lse_local - lse_global) and psum'd.
def causal_attn_min(q, k, v):
    s = jnp.where(causal(q.shape[1], k.shape[1]), scores(q, k), jnp.finfo(jnp.float32).min)
    return jnp.einsum("bhqk,bkhe->bqhe", jax.nn.softmax(s, -1), v)


def cp_lse(bug):
    def f(q, k, v):
        tl = k.shape[1]
        kpos = idx("sp") * tl + jnp.arange(tl)
        s = jnp.where(jnp.arange(q.shape[1])[:, None] >= kpos, scores(q, k), jnp.finfo(jnp.float32).min)
        m = jnp.max(s, -1)
        e = jnp.exp(s - m[..., None])
        l = jnp.sum(e, -1)
        o = jnp.einsum("bhqk,bkhe->bhqe", e, v) / l[..., None]
        lse = m + jnp.log(l)
        top = pmax(lse, "sp")
        if bug == "lse-max-only":
            glse = top
        elif bug == "lse-shift-not-added-back":
            glse = jnp.log(psum(jnp.exp(lse - top), "sp"))
        else:
            glse = top + jnp.log(psum(jnp.exp(lse - top), "sp"))
        wt = jnp.exp(lse - glse)
        return jnp.einsum("bhqe->bqhe", psum(o * wt[..., None], "sp"))
    return f


C.smap("s.cp_causal_lse_weights_finfo_min.sp4", {"sp": 4}, cp_lse, (P(), P(None, "sp"), P(None, "sp")), P(),
       causal_attn_min, (R(A_B, A_T, A_H, A_E), R(A_B, A_T, A_H, A_E), R(A_B, A_T, A_H, A_E)),
       bugs=[("lse-max-only", ["missing-all-reduce"]), ("lse-shift-not-added-back", ["constant-mismatch"])])


# ---------------------------------------------------------------------------
# 4. key padding over a sequence-sharded cache, heads over tp: the local
#    maximum guarded to 0 where the device holds no valid key for the row
#    (flash-attn's convention), numerator and denominator rescaled to the
#    pmax and stacked into one psum.
def padded_attn(q, k, v, lens):
    ok = jnp.arange(k.shape[1])[None, :] < lens[:, None]
    return attention(q, k, v, ok[:, None, None, :])


def cp_stacked(bug):
    def f(q, k, v, lens):
        tl = k.shape[1]
        kpos = jnp.arange(tl) + (0 if bug == "len-mask-local-pos" else idx("sp") * tl)
        ok = (kpos[None, :] < lens[:, None])[:, None, None, :]
        s = jnp.where(ok, scores(q, k), NEG)
        m = jnp.max(s, -1, keepdims=True)
        ms = m if bug == "no-neginf-guard" else jnp.where(jnp.isneginf(m), 0.0, m)
        e = jnp.exp(s - ms)
        c = jnp.exp(ms - pmax(m, "sp"))
        pack = jnp.concatenate([jnp.einsum("bhqk,bkhe->bhqe", e, v) * c, jnp.sum(e, -1, keepdims=True) * c], -1)
        tot = psum(pack, "tp" if bug == "pack-psum-over-tp" else "sp")
        return jnp.swapaxes(tot[..., :-1] / tot[..., -1:], 1, 2)
    return f


C.smap("s.cp_padmask_guard_stacked_psum.sp4xtp2", {"sp": 4, "tp": 2}, cp_stacked,
       (P(None, None, "tp"), P(None, "sp", "tp"), P(None, "sp", "tp"), P()), P(None, None, "tp"), padded_attn,
       (R(2, 8, 4, A_E), R(2, A_T, 4, A_E), R(2, A_T, 4, A_E), np.array([13, 6], np.int32)),
       bugs=[("len-mask-local-pos", ["wrong-shard-dim"]), ("no-neginf-guard", ["constant-mismatch"]),
             ("pack-psum-over-tp", ["wrong-collective-group"])])
if "s.cp_padmask_guard_stacked_psum.sp4xtp2.bug.no-neginf-guard" in C.extra:
    C.extra["s.cp_padmask_guard_stacked_psum.sp4xtp2.bug.no-neginf-guard"]["note"] = (
        "exp(-inf - -inf) on the rows a device holds no valid key for: NaN in the output of sequence 1, "
        "which max_abs_diff (a max that skips NaN) does not show")


# ---------------------------------------------------------------------------
# 5. bf16 context parallelism: bf16 queries / keys / values, f32 scores
#    (preferred_element_type), the unnormalised probabilities cast to bf16
#    for the value matmul with f32 accumulation, psums in f32, the output
#    cast back to bf16 (the baseline is written the same flash-style way).
def bf16_attn(q, k, v):
    s = jnp.einsum("bqhe,bkhe->bhqk", q, k, preferred_element_type=jnp.float32) / np.sqrt(q.shape[-1])
    p = jnp.exp(s - jnp.max(s, -1, keepdims=True))
    o = jnp.einsum("bhqk,bkhe->bqhe", p.astype(jnp.bfloat16), v, preferred_element_type=jnp.float32)
    return (o / jnp.swapaxes(jnp.sum(p, -1), 1, 2)[..., None]).astype(jnp.bfloat16)


def cp_bf16(bug):
    def f(q, k, v):
        s = jnp.einsum("bqhe,bkhe->bhqk", q, k, preferred_element_type=jnp.float32) / np.sqrt(q.shape[-1])
        m = jnp.max(s, -1, keepdims=True)
        p = jnp.exp(s - (m if bug == "max-local-no-pmax" else pmax(m, "sp")))
        o = jnp.einsum("bhqk,bkhe->bqhe", p.astype(jnp.bfloat16), v, preferred_element_type=jnp.float32)
        if bug == "psum-in-bf16":
            o = psum(o.astype(jnp.bfloat16), "sp").astype(jnp.float32)
        else:
            o = psum(o, "sp")
        l = psum(jnp.sum(p, -1), "sp")
        return (o / jnp.swapaxes(l, 1, 2)[..., None]).astype(jnp.bfloat16)
    return f


bf = lambda a: a.astype(jnp.bfloat16)
C.smap("s.cp_bf16_probs_f32_accum.sp4", {"sp": 4}, cp_bf16, (P(), P(None, "sp"), P(None, "sp")), P(), bf16_attn,
       (bf(R(A_B, A_T, A_H, A_E)), bf(R(A_B, A_T, A_H, A_E)), bf(R(A_B, A_T, A_H, A_E))),
       bugs=[("max-local-no-pmax", ["missing-all-reduce"]), ("psum-in-bf16", ["constant-mismatch"])])


# ---------------------------------------------------------------------------
# 6. flash-decoding: one query token per sequence, GQA (8 query heads on 2
#    kv heads), the cache's length over sp with per-sequence lengths (a short
#    sequence has no valid key on the last devices). Each split returns its
#    normalised output and lse; both are all_gathered and merged by a softmax
#    of the lses over the splits (FlashDecoding's reduction), on every device.
FD_B, FD_T, FD_HQ, FD_HK, FD_E = 2, 32, 8, 2, 8
FD_G = FD_HQ // FD_HK


def gqa_decode(q, k, v, lens):
    qg = q.reshape(FD_B, FD_HK, FD_G, FD_E)
    s = jnp.einsum("bkge,btke->bkgt", qg, k) / np.sqrt(FD_E)
    s = jnp.where((jnp.arange(FD_T)[None, :] < lens[:, None])[:, None, None], s, NEG)
    return jnp.einsum("bkgt,btke->bkge", jax.nn.softmax(s, -1), v).reshape(FD_B, FD_HQ, FD_E)


# The unnormalised merge weights differ only where two cache splits hold
# valid keys; the checker's execution draws integer inputs (the lengths) in
# [0, 16), and on its seeds both rows end in the first split.


def flash_decode(bug):
    def f(q, k, v, lens):
        tl = k.shape[1]
        if bug == "groups-interleaved":
            qg = jnp.swapaxes(q.reshape(FD_B, FD_G, FD_HK, FD_E), 1, 2)
        else:
            qg = q.reshape(FD_B, FD_HK, FD_G, FD_E)
        kpos = jnp.arange(tl) + (0 if bug == "len-mask-no-offset" else idx("sp") * tl)
        s = jnp.einsum("bkge,btke->bkgt", qg, k) / np.sqrt(FD_E)
        s = jnp.where((kpos[None, :] < lens[:, None])[:, None, None], s, NEG)
        m = jnp.max(s, -1)
        m = jnp.where(m == NEG, 0.0, m)
        e = jnp.exp(s - m[..., None])
        l = jnp.sum(e, -1)
        o = jnp.einsum("bkgt,btke->bkge", e, v) / jnp.where(l == 0, 1.0, l)[..., None]
        lse = m + jnp.log(l)
        lses = lax.all_gather(lse, "sp")
        if bug == "merge-weights-unnormalised":
            w = jnp.exp(lses - jnp.max(lses, 0))
        else:
            w = jax.nn.softmax(lses, axis=0)
        return jnp.sum(w[..., None] * lax.all_gather(o, "sp"), 0).reshape(FD_B, FD_HQ, FD_E)
    return f


C.smap("s.flash_decode_gqa_allgather_merge.sp4", {"sp": 4}, flash_decode, (P(), P(None, "sp"), P(None, "sp"), P()),
       P(), gqa_decode, (R(FD_B, FD_HQ, FD_E), R(FD_B, FD_T, FD_HK, FD_E), R(FD_B, FD_T, FD_HK, FD_E),
                         np.array([27, 9], np.int32)),
       bugs=[("groups-interleaved", ["layout-mismatch"]), ("len-mask-no-offset", ["wrong-shard-dim"]),
             ("merge-weights-unnormalised", ["wrong-reduction"])])


# ---------------------------------------------------------------------------
# 7. ring attention (bidirectional), an unrolled python loop: K and V stacked
#    into one array so that each step is one ppermute; every block's
#    normalised output and lse merged into the running (out, lse) as
#    out - sigmoid(lse_b - lse) (out - o_b), lse - log_sigmoid(lse - lse_b).
def ring_lse(bug):
    def f(q, k, v):
        n = 4
        ring = [(j, (j + 1) % n) for j in range(n)]
        kv = jnp.stack([k, v])
        blk = kv
        out = lse = None
        for step in range(n - 1 if bug == "one-step-short" else n):
            s = scores(q, blk[0])
            m = jnp.max(s, -1)
            e = jnp.exp(s - m[..., None])
            l = jnp.sum(e, -1)
            ob = jnp.einsum("bhqk,bkhe->bhqe", e, blk[1]) / l[..., None]
            lb = m + jnp.log(l)
            if step == 0:
                out, lse = ob, lb
            else:
                out = out - jax.nn.sigmoid(lb - lse)[..., None] * (out - ob)
                if bug == "lse-update-sign":
                    lse = lse + jax.nn.log_sigmoid(lse - lb)
                else:
                    lse = lse - jax.nn.log_sigmoid(lse - lb)
            if step < n - 1:
                blk = lax.ppermute(kv if bug == "ring-resends-own-block" else blk, "sp", ring)
        return jnp.swapaxes(out, 1, 2)
    return f


C.smap("s.ring_attn_sigmoid_lse_merge_unrolled.sp4", {"sp": 4}, ring_lse, (P(None, "sp"),) * 3, P(None, "sp"),
       attention, (R(A_B, A_T, A_H, A_E), R(A_B, A_T, A_H, A_E), R(A_B, A_T, A_H, A_E)),
       bugs=[("one-step-short", ["missing-all-reduce"]), ("lse-update-sign", ["constant-mismatch"]),
             ("ring-resends-own-block", ["wrong-collective-group"])])


# ---------------------------------------------------------------------------
# 8. causal ring attention in a lax.fori_loop: the carry holds the key and
#    value block, the running max (squeezed), sum and accumulator; the block
#    held at step i came from device (me - i) mod n, whose positions mask the
#    scores; the max is guarded to 0 while a row has seen no key.
def ring_fori(bug):
    def f(q, k, v):
        n, me, tl = lax.axis_size("sp"), idx("sp"), q.shape[1]
        ring = [(j, (j + 1) % 4) for j in range(4)]
        qpos = me * tl + jnp.arange(tl)

        def body(i, c):
            k, v, m, l, acc = c
            src = (me + i) % n if bug == "source-wrong-way" else (me - i) % n
            kpos = src * tl + jnp.arange(tl)
            s = jnp.where(qpos[:, None] >= kpos[None, :], scores(q, k), NEG)
            m_new = jnp.maximum(m, jnp.max(s, -1))
            mu = jnp.where(m_new == NEG, 0.0, m_new)
            p = jnp.exp(s - mu[..., None])
            corr = jnp.exp(m - mu)
            l = (l if bug == "sum-not-rescaled" else l * corr) + jnp.sum(p, -1)
            acc = acc * corr[..., None] + jnp.einsum("bhqk,bkhe->bhqe", p, v)
            return lax.ppermute(k, "sp", ring), lax.ppermute(v, "sp", ring), m_new, l, acc
        b, h = q.shape[0], q.shape[2]
        init = (k, v, jnp.full((b, h, tl), NEG), jnp.zeros((b, h, tl)), jnp.zeros((b, h, tl, q.shape[3])))
        _, _, _, l, acc = lax.fori_loop(0, n, body, init)
        return jnp.swapaxes(acc / l[..., None], 1, 2)
    return f


C.smap("s.ring_attn_causal_fori_loop.sp4", {"sp": 4}, ring_fori, (P(None, "sp"),) * 3, P(None, "sp"), causal_attn,
       (R(A_B, A_T, A_H, A_E), R(A_B, A_T, A_H, A_E), R(A_B, A_T, A_H, A_E)),
       bugs=[("source-wrong-way", ["wrong-shard-dim"]), ("sum-not-rescaled", ["constant-mismatch"])])


# ---------------------------------------------------------------------------
# 9. zigzag load-balanced causal context parallelism: the sequence is cut in
#    2n chunks and laid out so that device i holds chunks i and 2n-1-i (the
#    data loader's order, which the baseline takes too: its causal mask comes
#    from the table of true positions); keys and values all_gathered in that
#    layout, the query positions from the device's two chunk ids.
ZZ_N, ZZ_C = 4, 4
ZZ_T = 2 * ZZ_N * ZZ_C
ZZ_ORDER = [c for i in range(ZZ_N) for c in (i, 2 * ZZ_N - 1 - i)]
ZZ_POS = np.concatenate([np.arange(ZZ_C) + c * ZZ_C for c in ZZ_ORDER]).astype(np.int32)


def zigzag_attn(q, k, v):
    return attention(q, k, v, ZZ_POS[:, None] >= ZZ_POS[None, :])


def zigzag_cp(bug):
    def f(q, k, v):
        i = idx("sp")
        kf = lax.all_gather(k, "sp", axis=1, tiled=True)
        vf = lax.all_gather(v, "sp", axis=1, tiled=True)
        if bug == "second-chunk-contiguous":
            qpos = i * 2 * ZZ_C + jnp.arange(2 * ZZ_C)
        else:
            qpos = jnp.concatenate([i * ZZ_C + jnp.arange(ZZ_C), (2 * ZZ_N - 1 - i) * ZZ_C + jnp.arange(ZZ_C)])
        kpos = jnp.arange(ZZ_T) if bug == "key-pos-natural-order" else jnp.asarray(ZZ_POS)
        return attention(q, kf, vf, qpos[:, None] >= kpos[None, :])
    return f


C.smap("s.zigzag_causal_cp_allgather.sp4", {"sp": ZZ_N}, zigzag_cp, (P(None, "sp"),) * 3, P(None, "sp"),
       zigzag_attn, (R(A_B, ZZ_T, A_H, A_E), R(A_B, ZZ_T, A_H, A_E), R(A_B, ZZ_T, A_H, A_E)),
       bugs=[("second-chunk-contiguous", ["wrong-shard-dim"]), ("key-pos-natural-order", ["wrong-shard-dim"])])


# ---------------------------------------------------------------------------
# 10. sliding-window causal attention with a window (7) longer than a shard
#     (4 positions on sp8): halos of keys / values from the previous shard
#     and the last two from the one before (two ppermutes, zeros past the
#     start, masked by position), plus an attention-sink token (key 0, sent
#     to every device by a psum of the block masked to device 0) that a
#     query sees only when key 0 is outside its window.
SW_T, SW_W, SW_N = 32, 7, 8


def swa_sink_ok(t):
    d = t[:, None] - t[None, :]
    return ((d >= 0) & (d < SW_W)) | ((t[None, :] == 0) & (d >= 0))


def swa_sink(q, k, v):
    return attention(q, k, v, swa_sink_ok(np.arange(SW_T)))


def swa_halo2(bug):
    def f(q, k, v):
        tl, me = q.shape[1], idx("sp")
        hop1 = [(i, i + 1) for i in range(SW_N - 1)]
        hop2 = [(i, i + 2) for i in range(SW_N - 2)]
        first = lambda a: psum(jnp.where(me == 0, a[:, :1], 0.0), "sp")
        base = me * tl
        ks, vs, ps = [first(k)], [first(v)], [jnp.zeros((1,), jnp.int32)]
        if bug != "halo-one-hop":
            ks.append(lax.ppermute(k[:, -2:], "sp", hop2))
            vs.append(lax.ppermute(v[:, -2:], "sp", hop2))
            ps.append(base - tl - 2 + jnp.arange(2))
        ks += [lax.ppermute(k, "sp", hop1), k]
        vs += [lax.ppermute(v, "sp", hop1), v]
        ps += [base - tl + jnp.arange(tl), base + jnp.arange(tl)]
        kk, vv, kpos = jnp.concatenate(ks, 1), jnp.concatenate(vs, 1), jnp.concatenate(ps)
        d = (base + jnp.arange(tl))[:, None] - kpos[None, :]
        win = (d >= 0) & ((d <= SW_W) if bug == "window-off-by-one" else (d < SW_W)) & (kpos[None, :] >= 0)
        sink = d[:, :1] >= 0 if bug == "sink-counted-twice" else d[:, :1] >= SW_W
        return attention(q, kk, vv, jnp.concatenate([sink, win[:, 1:]], 1))
    return f


C.smap("s.swa_two_hop_halo_sink_token.sp8", {"sp": SW_N}, swa_halo2, (P(None, "sp"),) * 3, P(None, "sp"), swa_sink,
       (R(A_B, SW_T, A_H, A_E), R(A_B, SW_T, A_H, A_E), R(A_B, SW_T, A_H, A_E)),
       bugs=[("halo-one-hop", ["wrong-shard-dim"]), ("window-off-by-one", ["constant-mismatch"]),
             ("sink-counted-twice", ["wrong-reduction"])])


# ---------------------------------------------------------------------------
# 11. gpt-oss style learned attention sinks under context parallelism: a
#     per-head sink logit joins every row's softmax (its column dropped after
#     the softmax). Keys over sp, heads over tp (the sink logits replicated,
#     sliced at the device's head offset); the maximum is pmax'd and raised
#     to the sink, the sink's exp(sink - M) added once to the psum'd
#     denominator.
SK_H = 4


def sink_attn(q, k, v, sinks):
    s = scores(q, k)
    col = jnp.broadcast_to(sinks[None, :, None, None], s.shape[:3] + (1,))
    p = jax.nn.softmax(jnp.concatenate([s, col], -1), -1)[..., :-1]
    return jnp.einsum("bhqk,bkhe->bqhe", p, v)


def sink_cp(bug):
    def f(q, k, v, sinks):
        hl = q.shape[2]
        sk = sinks[:hl] if bug == "sink-head-no-tp-offset" else lax.dynamic_slice_in_dim(sinks, idx("tp") * hl, hl)
        sk = sk[None, :, None]
        s = scores(q, k)
        gm = jnp.maximum(pmax(jnp.max(s, -1), "sp"), sk)
        p = jnp.exp(s - gm[..., None])
        num = psum(jnp.einsum("bhqk,bkhe->bhqe", p, v), "sp")
        if bug == "sink-on-every-device":
            den = psum(jnp.sum(p, -1) + jnp.exp(sk - gm), "sp")
        else:
            den = psum(jnp.sum(p, -1), "sp") + jnp.exp(sk - gm)
        return jnp.swapaxes(num / den[..., None], 1, 2)
    return f


C.smap("s.learned_sinks_cp_heads.sp4xtp2", {"sp": 4, "tp": 2}, sink_cp,
       (P(None, None, "tp"), P(None, "sp", "tp"), P(None, "sp", "tp"), P()), P(None, None, "tp"), sink_attn,
       (R(A_B, 8, SK_H, A_E), R(A_B, A_T, SK_H, A_E), R(A_B, A_T, SK_H, A_E), R(SK_H, scale=1.5)),
       bugs=[("sink-head-no-tp-offset", ["wrong-shard-dim"]), ("sink-on-every-device", ["wrong-reduction"])])


# ---------------------------------------------------------------------------
# 12. bidirectional ALiBi (bias -slope_h |i - j|) with keys over sp and heads
#     over tp: key positions and slopes from the axis_index offsets of the key
#     block and the head block; squeezed maxima, locally normalised outputs
#     weighted by l exp(m - pmax(m)).
AB_H, AB_TQ = 4, 8


def alibi_slopes(h):
    return 2.0 ** (-8.0 * (h + 1.0) / AB_H)


def alibi_bidir(q, k, v):
    bias = -alibi_slopes(jnp.arange(AB_H))[:, None, None] * jnp.abs(
        jnp.arange(AB_TQ)[:, None] - jnp.arange(k.shape[1])[None, :]).astype(jnp.float32)
    return attention(q, k, v, bias=bias)


def alibi_kv(bug):
    def f(q, k, v):
        tl, hl = k.shape[1], q.shape[2]
        kpos = jnp.arange(tl) + (0 if bug == "key-pos-no-offset" else idx("sp") * tl)
        heads = jnp.arange(hl) + (0 if bug == "slope-local-head-index" else idx("tp") * hl)
        bias = -alibi_slopes(heads)[:, None, None] * jnp.abs(jnp.arange(AB_TQ)[:, None] - kpos[None, :])
        s = scores(q, k) + bias
        m = jnp.max(s, -1)
        e = jnp.exp(s - m[..., None])
        l = jnp.sum(e, -1)
        o = jnp.einsum("bhqk,bkhe->bhqe", e, v) / l[..., None]
        a = l * jnp.exp(m - pmax(m, "sp"))
        return jnp.swapaxes(psum(o * a[..., None], "sp") / psum(a, "sp")[..., None], 1, 2)
    return f


C.smap("s.alibi_bidir_kv_sharded.sp4xtp2", {"sp": 4, "tp": 2}, alibi_kv,
       (P(None, None, "tp"), P(None, "sp", "tp"), P(None, "sp", "tp")), P(None, None, "tp"), alibi_bidir,
       (R(A_B, AB_TQ, AB_H, A_E), R(A_B, A_T, AB_H, A_E), R(A_B, A_T, AB_H, A_E)),
       bugs=[("key-pos-no-offset", ["wrong-shard-dim"]), ("slope-local-head-index", ["wrong-shard-dim"])])


# ---------------------------------------------------------------------------
# 13. Gemma-2 logit soft-capping (cap * tanh(s / cap)) with GQA (4 query
#     heads on 2 kv heads, jnp.repeat) under context parallelism: keys over
#     sp, the capped scores' maximum pmax'd, numerator and denominator psum'd.
SC_CAP, SC_HQ, SC_HK = 5.0, 4, 2


def softcap_gqa(q, k, v):
    k, v = jnp.repeat(k, SC_HQ // SC_HK, 2), jnp.repeat(v, SC_HQ // SC_HK, 2)
    s = SC_CAP * jnp.tanh(scores(q, k) / SC_CAP)
    return jnp.einsum("bhqk,bkhe->bqhe", jax.nn.softmax(s, -1), v)


def softcap_cp(bug):
    def f(q, k, v):
        if bug == "kv-heads-tiled":
            k, v = jnp.tile(k, (1, 1, SC_HQ // SC_HK, 1)), jnp.tile(v, (1, 1, SC_HQ // SC_HK, 1))
        else:
            k, v = jnp.repeat(k, SC_HQ // SC_HK, 2), jnp.repeat(v, SC_HQ // SC_HK, 2)
        raw = scores(q, k)
        if bug == "softcap-after-shift":
            gm = pmax(jnp.max(raw, -1, keepdims=True), "sp")
            p = jnp.exp(SC_CAP * jnp.tanh((raw - gm) / SC_CAP))
        else:
            s = SC_CAP * jnp.tanh(raw / SC_CAP)
            p = jnp.exp(s - pmax(jnp.max(s, -1, keepdims=True), "sp"))
        num = psum(jnp.einsum("bhqk,bkhe->bqhe", p, v), "sp")
        return num / jnp.swapaxes(psum(jnp.sum(p, -1), "sp"), 1, 2)[..., None]
    return f


C.smap("s.gemma2_softcap_gqa_cp.sp4", {"sp": 4}, softcap_cp, (P(), P(None, "sp"), P(None, "sp")), P(), softcap_gqa,
       (R(A_B, 8, SC_HQ, A_E, scale=2.0), R(A_B, A_T, SC_HK, A_E, scale=2.0), R(A_B, A_T, SC_HK, A_E)),
       bugs=[("softcap-after-shift", ["constant-mismatch"]), ("kv-heads-tiled", ["layout-mismatch"])])


# ---------------------------------------------------------------------------
# 14. OLMo-2 QK-norm: RMSNorm of the whole query (and key) projection, all
#     heads together, with a learned gain, before causal attention; heads
#     over tp, so the mean square is psum'd over tp and the gain sliced at the
#     device's head offset; row-parallel output projection.
QN_B, QN_T, QN_D, QN_H, QN_E = 2, 8, 16, 4, 4


def qk_rms(a, g, reduce=lambda x: x, n=QN_H * QN_E):
    ms = reduce(jnp.sum(jnp.square(a), (2, 3), keepdims=True)) / n
    return a * lax.rsqrt(ms + 1e-6) * g.reshape(a.shape[2:])


def qknorm_attn(x, wq, wk, wv, wo, gq, gk):
    q = qk_rms(jnp.einsum("btd,dhe->bthe", x, wq), gq)
    k = qk_rms(jnp.einsum("btd,dhe->bthe", x, wk), gk)
    o = attention(q, k, jnp.einsum("btd,dhe->bthe", x, wv), causal(QN_T, QN_T))
    return jnp.einsum("bthe,hed->btd", o, wo)


def qknorm_tp(bug):
    def f(x, wq, wk, wv, wo, gq, gk):
        hl = wq.shape[1]
        red = (lambda a: a) if bug == "qknorm-local-rms" else (lambda a: psum(a, "tp"))
        n = hl * QN_E if bug == "qknorm-local-rms" else QN_H * QN_E
        off = 0 if bug == "gain-not-sliced" else idx("tp") * hl * QN_E
        gql, gkl = (lax.dynamic_slice_in_dim(g, off, hl * QN_E) for g in (gq, gk))
        q = qk_rms(jnp.einsum("btd,dhe->bthe", x, wq), gql, red, n)
        k = qk_rms(jnp.einsum("btd,dhe->bthe", x, wk), gkl, red, n)
        o = attention(q, k, jnp.einsum("btd,dhe->bthe", x, wv), causal(QN_T, QN_T))
        return psum(jnp.einsum("bthe,hed->btd", o, wo), "tp")
    return f


qn_args = (R(QN_B, QN_T, QN_D), R(QN_D, QN_H, QN_E, scale=0.4), R(QN_D, QN_H, QN_E, scale=0.4),
           R(QN_D, QN_H, QN_E, scale=0.4), R(QN_H, QN_E, QN_D, scale=0.4), 1.0 + R(QN_H * QN_E, scale=0.3),
           1.0 + R(QN_H * QN_E, scale=0.3))
C.smap("s.olmo2_qknorm_heads_tp.tp4", {"tp": 4}, qknorm_tp,
       (P(), P(None, "tp"), P(None, "tp"), P(None, "tp"), P("tp"), P(), P()), P(), qknorm_attn, qn_args,
       bugs=[("qknorm-local-rms", ["missing-all-reduce"]), ("gain-not-sliced", ["wrong-shard-dim"])])


# ---------------------------------------------------------------------------
# 15. GQA on a two-axis tensor mesh kv x g (2 x 2): 8 query heads over the
#     tuple (kv, g), 4 kv heads over kv only, so each device holds two kv
#     heads and picks the one of its query heads' group by axis_index of g;
#     causal, the output projection psum'd over both axes.
G2_D, G2_HQ, G2_HK, G2_E, G2_T = 16, 8, 4, 4, 8


def gqa_block(x, wq, wk, wv, wo):
    q = jnp.einsum("btd,dhe->bthe", x, wq)
    k = jnp.repeat(jnp.einsum("btd,dhe->bthe", x, wk), G2_HQ // G2_HK, 2)
    v = jnp.repeat(jnp.einsum("btd,dhe->bthe", x, wv), G2_HQ // G2_HK, 2)
    return jnp.einsum("bthe,hed->btd", attention(q, k, v, causal(G2_T, G2_T)), wo)


def gqa_2d(bug):
    def f(x, wq, wk, wv, wo):
        g = 0 if bug == "kv-pick-no-g-offset" else idx("g")
        q = jnp.einsum("btd,dhe->bthe", x, wq)
        k = jnp.einsum("btd,dhe->bthe", x, lax.dynamic_slice_in_dim(wk, g, 1, 1))
        v = jnp.einsum("btd,dhe->bthe", x, lax.dynamic_slice_in_dim(wv, g, 1, 1))
        k, v = jnp.repeat(k, q.shape[2], 2), jnp.repeat(v, q.shape[2], 2)
        y = jnp.einsum("bthe,hed->btd", attention(q, k, v, causal(G2_T, G2_T)), wo)
        return psum(y, "g" if bug == "out-psum-g-only" else ("kv", "g"))
    return f


C.smap("s.gqa_two_axis_tp_kv_by_group.kv2xg2", {"kv": 2, "g": 2}, gqa_2d,
       (P(), P(None, ("kv", "g")), P(None, "kv"), P(None, "kv"), P(("kv", "g"))), P(), gqa_block,
       (R(2, G2_T, G2_D), R(G2_D, G2_HQ, G2_E, scale=0.4), R(G2_D, G2_HK, G2_E, scale=0.4),
        R(G2_D, G2_HK, G2_E, scale=0.4), R(G2_HQ, G2_E, G2_D, scale=0.3)),
       bugs=[("kv-pick-no-g-offset", ["wrong-shard-dim"]), ("out-psum-g-only", ["missing-all-reduce"])])


# ---------------------------------------------------------------------------
# 16. cross-attention whose decoder sequence is over sp and encoder memory
#     over another axis kv, with encoder padding (a short memory has no valid
#     key on the last kv devices): the pmax, numerator and denominator over
#     kv only; projections replicated.
CA_B, CA_TQ, CA_TK, CA_D, CA_H, CA_E = 2, 8, 16, 16, 2, 8


def cross_attn(x, enc, lens, wq, wk, wv, wo):
    q = jnp.einsum("btd,dhe->bthe", x, wq)
    k, v = jnp.einsum("btd,dhe->bthe", enc, wk), jnp.einsum("btd,dhe->bthe", enc, wv)
    ok = (jnp.arange(CA_TK)[None, :] < lens[:, None])[:, None, None, :]
    return jnp.einsum("bthe,hed->btd", attention(q, k, v, ok), wo)


def cross_cp(bug):
    def f(x, enc, lens, wq, wk, wv, wo):
        tl = enc.shape[1]
        q = jnp.einsum("btd,dhe->bthe", x, wq)
        k, v = jnp.einsum("btd,dhe->bthe", enc, wk), jnp.einsum("btd,dhe->bthe", enc, wv)
        kpos = jnp.arange(tl) + (0 if bug == "enc-mask-no-offset" else idx("kv") * tl)
        s = jnp.where((kpos[None, :] < lens[:, None])[:, None, None, :], scores(q, k), NEG)
        p = jnp.exp(s - pmax(jnp.max(s, -1, keepdims=True), "kv"))
        ax = "sp" if bug == "combine-over-sp" else "kv"
        num = psum(jnp.einsum("bhqk,bkhe->bqhe", p, v), ax)
        den = psum(jnp.sum(p, -1), ax)
        return jnp.einsum("bthe,hed->btd", num / jnp.swapaxes(den, 1, 2)[..., None], wo)
    return f


C.smap("s.cross_attn_enc_other_axis_padded.sp2xkv4", {"sp": 2, "kv": 4}, cross_cp,
       (P(None, "sp"), P(None, "kv"), P(), P(), P(), P(), P()), P(None, "sp"), cross_attn,
       (R(CA_B, CA_TQ, CA_D), R(CA_B, CA_TK, CA_D), np.array([14, 5], np.int32), R(CA_D, CA_H, CA_E, scale=0.4),
        R(CA_D, CA_H, CA_E, scale=0.4), R(CA_D, CA_H, CA_E, scale=0.4), R(CA_H, CA_E, CA_D, scale=0.3)),
       bugs=[("enc-mask-no-offset", ["wrong-shard-dim"]), ("combine-over-sp", ["wrong-collective-group"])])


# ---------------------------------------------------------------------------
# 17. an SGD step through causal context parallelism by log-sum-exps
#     (check_vma=True): every sp device holds the whole sequence (batch over
#     dp), computes all queries and the keys / values of its block (sliced at
#     its offset), the global lse's shift under stop_gradient; the loss is
#     pmean'd over dp.
TR_B, TR_T, TR_D, TR_H, TR_E = 4, 16, 16, 2, 8


def attn_layer(p, x):
    q, k, v = (jnp.einsum("btd,dhe->bthe", x, p[w]) for w in ("wq", "wk", "wv"))
    return jnp.einsum("bthe,hed->btd", causal_attn(q, k, v), p["wo"])


def sgd_step(p, x, y):
    lv, g = jax.value_and_grad(lambda p: mse(attn_layer(p, x), y))(p)
    return jax.tree.map(lambda a, b: a - 0.2 * b, p, g), lv


def lse_train(bug):
    def f(p, x, y):
        def loss(p):
            n = lax.axis_size("sp")
            tl = x.shape[1] // n
            xb = lax.dynamic_slice_in_dim(x, 0 if bug == "kv-slice-no-offset" else idx("sp") * tl, tl, 1)
            q = jnp.einsum("btd,dhe->bthe", x, p["wq"])
            k, v = jnp.einsum("btd,dhe->bthe", xb, p["wk"]), jnp.einsum("btd,dhe->bthe", xb, p["wv"])
            kpos = idx("sp") * tl + jnp.arange(tl)
            s = jnp.where(jnp.arange(x.shape[1])[:, None] >= kpos, scores(q, k), jnp.finfo(jnp.float32).min)
            m = lax.stop_gradient(jnp.max(s, -1))
            e = jnp.exp(s - m[..., None])
            lse = m + jnp.log(jnp.sum(e, -1))
            o = jnp.einsum("bhqk,bkhe->bhqe", e, v) / jnp.sum(e, -1)[..., None]
            top = pmax(lax.stop_gradient(lse), "sp")
            glse = top + jnp.log(psum(jnp.exp(lse - top), "sp"))
            out = jnp.einsum("bhqe,hed->bqd", psum(o * jnp.exp(lse - glse)[..., None], "sp"), p["wo"])
            red = psum if bug == "loss-psum-not-pmean" else pmean
            return red(mse(out, y), "dp")
        lv, g = jax.value_and_grad(loss)(p)
        return jax.tree.map(lambda a, b: a - 0.2 * b, p, g), lv
    return f


tr_p = {"wq": R(TR_D, TR_H, TR_E, scale=0.3), "wk": R(TR_D, TR_H, TR_E, scale=0.3),
        "wv": R(TR_D, TR_H, TR_E, scale=0.3), "wo": R(TR_H, TR_E, TR_D, scale=0.3)}
tr_rep = {k: P() for k in tr_p}
C.smap("s.cp_lse_sgd_step_vma.dp2xsp4", {"dp": 2, "sp": 4}, lse_train, (tr_rep, P("dp"), P("dp")), (tr_rep, P()),
       sgd_step, (tr_p, R(TR_B, TR_T, TR_D), R(TR_B, TR_T, TR_D, scale=0.5)), check_vma=True,
       bugs=[("kv-slice-no-offset", ["wrong-shard-dim"]), ("loss-psum-not-pmean", ["wrong-scale"])])


# ---------------------------------------------------------------------------
# 18. an Adam step through causal ring attention written as a lax.scan over
#     the ring's steps (check_vma=True): the sequence over sp, the running
#     state starts from constants lax.pcast to varying, the maximum under
#     stop_gradient; the loss psum'd over sp.
ra_opt = optax.adam(0.01)


def ring_adam_ref(p, st, x, y):
    lv, g = jax.value_and_grad(lambda p: mse(attn_layer(p, x), y))(p)
    u, st = ra_opt.update(g, st, p)
    return optax.apply_updates(p, u), st, lv


def ring_train(bug):
    def f(p, st, x, y):
        n, me, tl = 4, idx("sp"), x.shape[1]
        ring = [(j, (j + 1) % n) for j in range(n)]
        off = (lambda j: 0) if bug == "causal-local-positions" else (lambda j: j * tl)

        def loss(p):
            q, k, v = (jnp.einsum("btd,dhe->bthe", x, p[w]) for w in ("wq", "wk", "wv"))
            qpos = off(me) + jnp.arange(tl)

            def step(c, i):
                k, v, m, l, acc = c
                kpos = off((me - i) % n) + jnp.arange(tl)
                s = jnp.where(qpos[:, None] >= kpos[None, :], scores(q, k), NEG)
                m_new = lax.stop_gradient(jnp.maximum(m, jnp.max(s, -1)))
                mu = jnp.where(jnp.isneginf(m_new), 0.0, m_new)
                pr = jnp.exp(s - mu[..., None])
                corr = jnp.exp(m - mu)
                c = (lax.ppermute(k, "sp", ring), lax.ppermute(v, "sp", ring), m_new, l * corr + pr.sum(-1),
                     acc * corr[..., None] + jnp.einsum("bhqk,bkhe->bhqe", pr, v))
                return c, None
            b, h, e = x.shape[0], p["wq"].shape[1], p["wq"].shape[2]
            vary = lambda a: lax.pcast(a, "sp", to="varying")
            init = (k, v, vary(jnp.full((b, h, tl), NEG)), vary(jnp.zeros((b, h, tl))),
                    vary(jnp.zeros((b, h, tl, e))))
            (_, _, _, l, acc), _ = lax.scan(step, init, jnp.arange(n))
            out = jnp.einsum("bhqe,hed->bqd", acc / l[..., None], p["wo"])
            return psum(jnp.sum(jnp.square(out - y)), "sp") / (x.shape[0] * tl * n * x.shape[2])
        lv, g = jax.value_and_grad(loss)(p)
        u, st = ra_opt.update(g, st, p)
        return optax.apply_updates(p, u), st, lv
    return f


ra_st = np_tree(ra_opt.init(tr_p))
ra_ss = state_specs(ra_st, tr_rep)
C.smap("s.ring_attn_scan_adam_vma.sp4", {"sp": 4}, ring_train, (tr_rep, ra_ss, P(None, "sp"), P(None, "sp")),
       (tr_rep, ra_ss, P()), ring_adam_ref, (tr_p, ra_st, R(2, TR_T, TR_D), R(2, TR_T, TR_D, scale=0.5)),
       check_vma=True, bugs=[("causal-local-positions", ["wrong-shard-dim"])])

# ---------------------------------------------------------------------------
# 18b. the smallest form of 3.'s combination: each device's log-sum-exp of
#     its block of a row (m + log(sum(exp(s - m)))), merged into the row's
#     log-sum-exp by a pmax-shifted psum of exp(lse_local - max).
def merge_lse(bug):
    def f(s):
        m = jnp.max(s, -1)
        lse = m + jnp.log(jnp.sum(jnp.exp(s - m[:, None]), -1))
        top = pmax(lse, "sp")
        return top + jnp.log(psum(jnp.exp(lse - top), "sp"))
    return f


C.smap("s.merge_local_logsumexps_min.sp4", {"sp": 4}, merge_lse, (P(None, "sp"),), P(),
       lambda s: jax.nn.logsumexp(s, -1), (R(8, 32, scale=2.0),))

# ===========================================================================
# GSPMD
def wsc(mesh, a, *spec):
    return lax.with_sharding_constraint(a, NamedSharding(make_mesh(mesh), P(*spec)))


def rms(a, g):
    return a * lax.rsqrt(jnp.mean(jnp.square(a), -1, keepdims=True) + 1e-6) * g


def rope(a, pos):
    half = a.shape[-1] // 2
    inv = 1.0 / (10000.0 ** (jnp.arange(half, dtype=jnp.float32) / half))
    ang = pos[:, None].astype(jnp.float32) * inv
    cos, sin = jnp.cos(ang)[:, None], jnp.sin(ang)[:, None]
    a1, a2 = a[..., :half], a[..., half:]
    return jnp.concatenate([a1 * cos - a2 * sin, a1 * sin + a2 * cos], -1)


# ---------------------------------------------------------------------------
# 19. memory-efficient causal attention as users write it after Rabe & Staats:
#     a lax.scan over key chunks carrying the running max, sum and
#     accumulator (the max guarded while a query has seen no key); the
#     sequence of queries, keys and values over sp, the batch over dp.
GM_CH = 8


def chunked_causal(q, k, v):
    b, t, h, e = q.shape
    nc = t // GM_CH
    qpos = jnp.arange(t)

    def chunk(c, kvj):
        m, l, acc = c
        kc, vc, j = kvj
        kpos = j * GM_CH + jnp.arange(GM_CH)
        s = jnp.where(qpos[:, None] >= kpos[None, :], scores(q, kc), NEG)
        m_new = jnp.maximum(m, jnp.max(s, -1))
        mu = jnp.where(jnp.isneginf(m_new), 0.0, m_new)
        p = jnp.exp(s - mu[..., None])
        corr = jnp.exp(m - mu)
        return (m_new, l * corr + p.sum(-1), acc * corr[..., None] + jnp.einsum("bhqk,bkhe->bhqe", p, vc)), None
    split = lambda a: jnp.moveaxis(a.reshape(b, nc, GM_CH, h, e), 1, 0)
    init = (jnp.full((b, h, t), NEG), jnp.zeros((b, h, t)), jnp.zeros((b, h, t, e)))
    (_, l, acc), _ = lax.scan(chunk, init, (split(k), split(v), jnp.arange(nc)))
    return jnp.swapaxes(acc / l[..., None], 1, 2)


C.gspmd("g.chunked_online_softmax_scan.dp2xsp4", {"dp": 2, "sp": 4}, (P("dp", "sp"),) * 3, P("dp", "sp"),
        chunked_causal, (R(4, 32, A_H, A_E), R(4, 32, A_H, A_E), R(4, 32, A_H, A_E)))

# ---------------------------------------------------------------------------
# 20. GQA with 8 query heads over tp8 and 2 kv heads replicated: the kv heads
#     jnp.repeat'ed to 8 and constrained over tp (each device keeps the copy
#     of its group), causal, row-parallel output projection.
M_TP8 = {"tp": 8}


def gqa_repeat_wsc(x, wq, wk, wv, wo):
    q = jnp.einsum("btd,dhe->bthe", x, wq)
    k = wsc(M_TP8, jnp.repeat(jnp.einsum("btd,dhe->bthe", x, wk), 4, 2), None, None, "tp")
    v = wsc(M_TP8, jnp.repeat(jnp.einsum("btd,dhe->bthe", x, wv), 4, 2), None, None, "tp")
    return jnp.einsum("bthe,hed->btd", attention(q, k, v, causal(x.shape[1], x.shape[1])), wo)


C.gspmd("g.gqa_repeat_kv_constrained.tp8", M_TP8, (P(), P(None, "tp"), P(), P(), P("tp")), P(), gqa_repeat_wsc,
        (R(2, 8, 16), R(16, 8, 4, scale=0.4), R(16, 2, 4, scale=0.4), R(16, 2, 4, scale=0.4), R(8, 4, 16, scale=0.3)))

# ---------------------------------------------------------------------------
# 21. a Gemma-2 style two-layer model in an AdamW step: a local (sliding
#     window 4) then a global attention layer, both GQA with soft-capped
#     logits (cap 20 after 1/sqrt(d) scaling), pre- and post-norms, the final
#     logits soft-capped (cap 15), cross-entropy. Query heads and the head
#     over tp (2 kv heads replicated), batch over dp.
GE_D, GE_H, GE_K, GE_E, GE_V, GE_T = 16, 4, 2, 8, 32, 8
ge_opt = optax.adamw(0.01, weight_decay=0.01)


def gemma_attn(lp, x, window):
    h = rms(x, lp["pre"])
    q = jnp.einsum("btd,dhe->bthe", h, lp["wq"])
    k = jnp.repeat(jnp.einsum("btd,dhe->bthe", h, lp["wk"]), GE_H // GE_K, 2)
    v = jnp.repeat(jnp.einsum("btd,dhe->bthe", h, lp["wv"]), GE_H // GE_K, 2)
    s = 20.0 * jnp.tanh(scores(q, k) / 20.0)
    t = np.arange(GE_T)
    d = t[:, None] - t[None, :]
    ok = (d >= 0) & (d < window if window else True)
    o = jnp.einsum("bhqk,bkhe->bqhe", jax.nn.softmax(jnp.where(ok, s, NEG), -1), v)
    return x + rms(jnp.einsum("bthe,hed->btd", o, lp["wo"]), lp["post"])


def gemma_loss(p, x, labels):
    h = gemma_attn(p["local"], x, 4)
    h = gemma_attn(p["global"], h, None)
    logits = 15.0 * jnp.tanh((rms(h, p["final"]) @ p["head"]) / 15.0)
    return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), labels[..., None], -1))


def gemma_step(p, st, x, labels):
    lv, g = jax.value_and_grad(gemma_loss)(p, x, labels)
    u, st = ge_opt.update(g, st, p)
    return optax.apply_updates(p, u), st, lv


def gemma_layer():
    return {"pre": 1.0 + R(GE_D, scale=0.1), "wq": R(GE_D, GE_H, GE_E, scale=0.5), "wk": R(GE_D, GE_K, GE_E, scale=0.5),
            "wv": R(GE_D, GE_K, GE_E, scale=0.4), "wo": R(GE_H, GE_E, GE_D, scale=0.3), "post": 1.0 + R(GE_D, scale=0.1)}


ge_lps = {"pre": P(), "wq": P(None, "tp"), "wk": P(), "wv": P(), "wo": P("tp"), "post": P()}
ge_p = {"local": gemma_layer(), "global": gemma_layer(), "final": 1.0 + R(GE_D, scale=0.1),
        "head": R(GE_D, GE_V, scale=0.5)}
ge_ps = {"local": ge_lps, "global": ge_lps, "final": P(), "head": P(None, "tp")}
ge_st = np_tree(ge_opt.init(ge_p))
C.gspmd("g.gemma2_local_global_softcap_adamw.dp2xtp4", {"dp": 2, "tp": 4},
        (ge_ps, state_specs(ge_st, ge_ps), P("dp"), P("dp")), (ge_ps, state_specs(ge_st, ge_ps), P()), gemma_step,
        (ge_p, ge_st, R(4, GE_T, GE_D), I(0, GE_V, 4, GE_T)))

# ---------------------------------------------------------------------------
# 22. per-head QK-norm (RMSNorm over the head dim with learned scales) and
#     RoPE, causal attention in an Adam step; the sequence over sp (context
#     parallelism left to the partitioner), the batch over dp.
qr_opt = optax.adam(0.02)


def qk_rope_layer(p, x):
    t = jnp.arange(x.shape[1])
    q = rope(rms(jnp.einsum("btd,dhe->bthe", x, p["wq"]), p["qn"]), t)
    k = rope(rms(jnp.einsum("btd,dhe->bthe", x, p["wk"]), p["kn"]), t)
    v = jnp.einsum("btd,dhe->bthe", x, p["wv"])
    return jnp.einsum("bthe,hed->btd", causal_attn(q, k, v), p["wo"])


def qk_rope_step(p, st, x, y):
    lv, g = jax.value_and_grad(lambda p: mse(qk_rope_layer(p, x), y))(p)
    u, st = qr_opt.update(g, st, p)
    return optax.apply_updates(p, u), st, lv


qr_p = dict(tr_p, qn=1.0 + R(TR_E, scale=0.2), kn=1.0 + R(TR_E, scale=0.2))
qr_rep = {k: P() for k in qr_p}
qr_st = np_tree(qr_opt.init(qr_p))
C.gspmd("g.qknorm_rope_cp_adam.dp2xsp4", {"dp": 2, "sp": 4}, (qr_rep, state_specs(qr_st, qr_rep), P("dp", "sp"),
        P("dp", "sp")), (qr_rep, state_specs(qr_st, qr_rep), P()), qk_rope_step,
        (qr_p, qr_st, R(4, TR_T, TR_D), R(4, TR_T, TR_D, scale=0.5)))

# ---------------------------------------------------------------------------
# 23. learned sinks with a causal sliding window (6): projections with the
#     heads over tp (the sinks too), the sequence over sp.
def sink_swa_layer(x, wq, wk, wv, wo, sinks):
    q, k, v = (jnp.einsum("btd,dhe->bthe", x, w) for w in (wq, wk, wv))
    t = np.arange(x.shape[1])
    d = t[:, None] - t[None, :]
    s = jnp.where((d >= 0) & (d < 6), scores(q, k), NEG)
    col = jnp.broadcast_to(sinks[None, :, None, None], s.shape[:3] + (1,))
    p = jax.nn.softmax(jnp.concatenate([s, col], -1), -1)[..., :-1]
    return jnp.einsum("bqhe,hed->bqd", jnp.einsum("bhqk,bkhe->bqhe", p, v), wo)


C.gspmd("g.sinks_sliding_window_heads_seq.sp2xtp4", {"sp": 2, "tp": 4},
        (P(None, "sp"), P(None, "tp"), P(None, "tp"), P(None, "tp"), P("tp"), P("tp")), P(None, "sp"), sink_swa_layer,
        (R(2, 16, 16), R(16, 4, 8, scale=0.4), R(16, 4, 8, scale=0.4), R(16, 4, 8, scale=0.4), R(4, 8, 16, scale=0.3),
         R(4, scale=1.5)))

# ---------------------------------------------------------------------------
# 24. bidirectional ALiBi (12.) with the keys' and values' sequence over sp,
#     the batch over dp.
C.gspmd("g.alibi_bidir_kv_seq.dp2xsp4", {"dp": 2, "sp": 4}, (P("dp"), P("dp", "sp"), P("dp", "sp")), P("dp"),
        alibi_bidir, (R(4, AB_TQ, AB_H, A_E), R(4, A_T, AB_H, A_E), R(4, A_T, AB_H, A_E)))

# 25. cross-attention (16.) with the decoder over sp, the encoder memory over
#     its own axis kv and the batch over dp.
C.gspmd("g.cross_attn_enc_other_axis.dp2xsp2xkv2", {"dp": 2, "sp": 2, "kv": 2},
        (P("dp", "sp"), P("dp", "kv"), P("dp"), P(), P(), P(), P()), P("dp", "sp"), cross_attn,
        (R(4, CA_TQ, CA_D), R(4, CA_TK, CA_D), np.array([14, 5, 16, 3], np.int32), R(CA_D, CA_H, CA_E, scale=0.4),
         R(CA_D, CA_H, CA_E, scale=0.4), R(CA_D, CA_H, CA_E, scale=0.4), R(CA_H, CA_E, CA_D, scale=0.3)))

# ---------------------------------------------------------------------------
# 26. flash-decoding of multi-query attention as a vmap over cache splits:
#     the cache reshaped into 8 splits constrained over sp8, each split's
#     normalised output and lse (guarded for splits past a sequence's
#     length), merged by a softmax of the lses over the splits.
FS_S = 8


def mqa_split_decode(q, kc, vc, lens):
    b, t, e = kc.shape
    sl = t // FS_S
    ks = wsc({"sp": FS_S}, kc.reshape(b, FS_S, sl, e), None, "sp")
    vs = wsc({"sp": FS_S}, vc.reshape(b, FS_S, sl, e), None, "sp")

    def part(k, v, kpos):
        s = jnp.einsum("bhe,bte->bht", q, k) / np.sqrt(e)
        s = jnp.where((kpos[None, :] < lens[:, None])[:, None], s, NEG)
        m = jnp.max(s, -1)
        m = jnp.where(jnp.isneginf(m), 0.0, m)
        ex = jnp.exp(s - m[..., None])
        l = jnp.sum(ex, -1)
        return jnp.einsum("bht,bte->bhe", ex, v) / jnp.maximum(l, 1e-30)[..., None], m + jnp.log(l)
    o, lse = jax.vmap(part, in_axes=(1, 1, 0))(ks, vs, jnp.arange(t).reshape(FS_S, sl))
    return jnp.sum(jax.nn.softmax(lse, 0)[..., None] * o, 0)


C.gspmd("g.flash_decode_mqa_vmap_splits.sp8", {"sp": FS_S}, (P(), P(), P(), P()), P(), mqa_split_decode,
        (R(2, 4, 8), R(2, 64, 8), R(2, 64, 8), np.array([50, 13], np.int32)))

# ---------------------------------------------------------------------------
# 27. zigzag context parallelism under GSPMD: queries, keys and values in
#     natural order with the sequence over sp, reordered to the zigzag layout
#     by jnp.take and constrained there, causal attention by the position
#     table, the output taken back to natural order.
def zigzag_take(q, k, v):
    zz = lambda a: wsc({"sp": ZZ_N}, jnp.take(a, ZZ_POS, axis=1), None, "sp")
    o = attention(zz(q), zz(k), zz(v), ZZ_POS[:, None] >= ZZ_POS[None, :])
    return jnp.take(o, np.argsort(ZZ_POS), axis=1)


C.gspmd("g.zigzag_reorder_take_causal.sp4", {"sp": ZZ_N}, (P(None, "sp"),) * 3, P(None, "sp"), zigzag_take,
        (R(A_B, ZZ_T, A_H, A_E), R(A_B, ZZ_T, A_H, A_E), R(A_B, ZZ_T, A_H, A_E)))

# ---------------------------------------------------------------------------
# 28. jax.nn.dot_product_attention with is_causal and a local window (3
#     back), 8 query heads on 2 kv heads (its own GQA), query heads over tp.
def dpa_window(q, k, v):
    return jax.nn.dot_product_attention(q, k, v, is_causal=True, local_window_size=(3, 0))


C.gspmd("g.dot_product_attention_local_window_gqa.dp2xtp4", {"dp": 2, "tp": 4},
        (P("dp", None, "tp"), P("dp"), P("dp")), P("dp", None, "tp"), dpa_window,
        (R(4, 16, 8, 8), R(4, 16, 2, 8), R(4, 16, 2, 8)))

# ---------------------------------------------------------------------------
# 29. a pre-norm block with learned sinks, soft-capped logits and per-head
#     QK-norm (GQA, 4 query heads on 2 kv heads) and a gelu MLP, in an AdamW
#     step; query heads, sinks and the MLP hidden units over tp, batch over dp.
bl_opt = optax.adamw(0.01, weight_decay=0.05)


def sink_cap_qk_block(p, x):
    h = rms(x, p["n1"])
    q = rms(jnp.einsum("btd,dhe->bthe", h, p["wq"]), p["qn"])
    k = jnp.repeat(rms(jnp.einsum("btd,dhe->bthe", h, p["wk"]), p["kn"]), 2, 2)
    v = jnp.repeat(jnp.einsum("btd,dhe->bthe", h, p["wv"]), 2, 2)
    s = jnp.where(causal(x.shape[1], x.shape[1]), 8.0 * jnp.tanh(scores(q, k) / 8.0), NEG)
    col = jnp.broadcast_to(p["sinks"][None, :, None, None], s.shape[:3] + (1,))
    pr = jax.nn.softmax(jnp.concatenate([s, col], -1), -1)[..., :-1]
    x = x + jnp.einsum("bqhe,hed->bqd", jnp.einsum("bhqk,bkhe->bqhe", pr, v), p["wo"])
    return x + jax.nn.gelu(rms(x, p["n2"]) @ p["w1"]) @ p["w2"]


def block_step(p, st, x, y):
    lv, g = jax.value_and_grad(lambda p: mse(sink_cap_qk_block(p, x), y))(p)
    u, st = bl_opt.update(g, st, p)
    return optax.apply_updates(p, u), st, lv


bl_p = {"n1": 1.0 + R(16, scale=0.1), "wq": R(16, 4, 8, scale=0.4), "wk": R(16, 2, 8, scale=0.4),
        "wv": R(16, 2, 8, scale=0.4), "qn": 1.0 + R(8, scale=0.1), "kn": 1.0 + R(8, scale=0.1),
        "sinks": R(4, scale=1.0), "wo": R(4, 8, 16, scale=0.3), "n2": 1.0 + R(16, scale=0.1),
        "w1": R(16, 32, scale=0.3), "w2": R(32, 16, scale=0.3)}
bl_ps = {"n1": P(), "wq": P(None, "tp"), "wk": P(), "wv": P(), "qn": P(), "kn": P(), "sinks": P("tp"),
         "wo": P("tp"), "n2": P(), "w1": P(None, "tp"), "w2": P("tp")}
bl_st = np_tree(bl_opt.init(bl_p))
C.gspmd("g.block_sinks_softcap_qknorm_adamw.dp2xtp4", {"dp": 2, "tp": 4},
        (bl_ps, state_specs(bl_st, bl_ps), P("dp"), P("dp")), (bl_ps, state_specs(bl_st, bl_ps), P()), block_step,
        (bl_p, bl_st, R(4, 8, 16), R(4, 8, 16, scale=0.5)))

# ---------------------------------------------------------------------------
# 30. a bf16 attention layer in an SGD step written flash-style: bf16
#     weights and activations, f32 scores and softmax statistics, the
#     unnormalised probabilities cast to bf16 for the value matmul with f32
#     accumulation; the update computed in f32 and cast back. Heads over tp,
#     batch over dp.
def bf16_layer_loss(p, x, y):
    q, k, v = (jnp.einsum("btd,dhe->bthe", x, p[w]) for w in ("wq", "wk", "wv"))
    o = bf16_attn(q, k, v)
    out = jnp.einsum("bthe,hed->btd", o, p["wo"], preferred_element_type=jnp.float32)
    return mse(out, y)


def bf16_sgd_step(p, x, y):
    lv, g = jax.value_and_grad(bf16_layer_loss)(p, x, y)
    return jax.tree.map(lambda a, b: (a.astype(jnp.float32) - 0.5 * b.astype(jnp.float32)).astype(a.dtype), p, g), lv


b16_p = {k: bf(v) for k, v in tr_p.items()}
b16_ps = {"wq": P(None, "tp"), "wk": P(None, "tp"), "wv": P(None, "tp"), "wo": P("tp")}
C.gspmd("g.bf16_flash_style_attn_sgd.dp4xtp2", {"dp": 4, "tp": 2}, (b16_ps, P("dp"), P("dp")), (b16_ps, P()),
        bf16_sgd_step, (b16_p, bf(R(4, TR_T, TR_D)), R(4, TR_T, TR_D, scale=0.5)))

# ---------------------------------------------------------------------------
# 31. ring attention emulated under GSPMD: queries, keys and values
#     reshaped into blocks whose block dim is constrained over sp; the key
#     and value blocks rolled by one block per step (jnp.roll), an online
#     softmax with the causal mask from the rolled block's index.
def roll_ring_causal(q, k, v):
    b, t, h, e = q.shape
    n, tl = 4, t // 4
    blocks = lambda a: wsc({"sp": 4}, a.reshape(b, n, tl, h, e), None, "sp")
    qb, kb, vb = blocks(q), blocks(k), blocks(v)
    qpos = (jnp.arange(n)[:, None] * tl + jnp.arange(tl))
    m = jnp.full((b, n, h, tl), NEG)
    l = jnp.zeros((b, n, h, tl))
    acc = jnp.zeros((b, n, h, tl, e))
    for step in range(n):
        kpos = ((jnp.arange(n) - step) % n)[:, None] * tl + jnp.arange(tl)
        ok = (qpos[:, :, None] >= kpos[:, None, :])[None, :, None]
        s = jnp.where(ok, jnp.einsum("bnqhe,bnkhe->bnhqk", qb, kb) / np.sqrt(e), NEG)
        m_new = jnp.maximum(m, jnp.max(s, -1))
        mu = jnp.where(jnp.isneginf(m_new), 0.0, m_new)
        p = jnp.exp(s - mu[..., None])
        corr = jnp.exp(m - mu)
        l = l * corr + p.sum(-1)
        acc = acc * corr[..., None] + jnp.einsum("bnhqk,bnkhe->bnhqe", p, vb)
        m = m_new
        kb, vb = jnp.roll(kb, 1, axis=1), jnp.roll(vb, 1, axis=1)
    o = acc / l[..., None]
    return jnp.transpose(o, (0, 1, 3, 2, 4)).reshape(b, t, h, e)


C.gspmd("g.ring_by_roll_blocks_causal.sp4", {"sp": 4}, (P(None, "sp"),) * 3, P(None, "sp"), roll_ring_causal,
        (R(A_B, A_T, A_H, A_E), R(A_B, A_T, A_H, A_E), R(A_B, A_T, A_H, A_E)))

# ---------------------------------------------------------------------------
# 32. blocked local attention (window 5): the sequence in blocks of 4 whose
#     block dim is over sp, each block attending to itself and the previous
#     block (a pad-and-slice shift of the key blocks), masked by position.
def blocked_local(q, k, v):
    b, t, h, e = q.shape
    bs, nb = 4, t // 4
    blocks = lambda a: wsc({"sp": 4}, a.reshape(b, nb, bs, h, e), None, "sp")
    qb, kb, vb = blocks(q), blocks(k), blocks(v)
    prev = lambda a: jnp.pad(a, ((0, 0), (1, 0), (0, 0), (0, 0), (0, 0)))[:, :-1]
    kk, vv = jnp.concatenate([prev(kb), kb], 2), jnp.concatenate([prev(vb), vb], 2)
    qpos = jnp.arange(nb)[:, None] * bs + jnp.arange(bs)
    kpos = jnp.arange(nb)[:, None] * bs - bs + jnp.arange(2 * bs)
    d = qpos[:, :, None] - kpos[:, None, :]
    ok = ((d >= 0) & (d < 5) & (kpos[:, None, :] >= 0))[None, :, None]
    s = jnp.where(ok, jnp.einsum("bnqhe,bnkhe->bnhqk", qb, kk) / np.sqrt(e), NEG)
    o = jnp.einsum("bnhqk,bnkhe->bnqhe", jax.nn.softmax(s, -1), vv)
    return o.reshape(b, t, h, e)


C.gspmd("g.blocked_local_prev_block.sp4", {"sp": 4}, (P(None, "sp"),) * 3, P(None, "sp"), blocked_local,
        (R(A_B, 32, A_H, A_E), R(A_B, 32, A_H, A_E), R(A_B, 32, A_H, A_E)))

# ---------------------------------------------------------------------------
# 33. the smallest form of what 21. and 29. share: the gradient of GQA
#     attention whose kv heads come from replicated weights and are
#     jnp.repeat'ed to the query heads, which are over tp (the partitioner
#     sums the repeat's transpose over pairs of tp devices).
def gqa_repeat_grads(wq, wk, wv, x):
    def loss(wq, wk, wv):
        q = jnp.einsum("btd,dhe->bthe", x, wq)
        k = jnp.repeat(jnp.einsum("btd,dhe->bthe", x, wk), 2, 2)
        v = jnp.repeat(jnp.einsum("btd,dhe->bthe", x, wv), 2, 2)
        return jnp.sum(jnp.square(attention(q, k, v)))
    return jax.grad(loss, (0, 1, 2))(wq, wk, wv)


C.gspmd("g.gqa_repeat_grad_replicated_kv_min.dp2xtp4", {"dp": 2, "tp": 4}, (P(None, "tp"), P(), P(), P("dp")),
        (P(None, "tp"), P(), P()), gqa_repeat_grads,
        (R(16, 4, 8, scale=0.5), R(16, 2, 8, scale=0.5), R(16, 2, 8, scale=0.4), R(4, 8, 16)))

# ---------------------------------------------------------------------------
C.finish()
