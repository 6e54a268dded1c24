"""samples/fresh79: a 79th batch of programs as a user writes them, on the theme of multimodal / vision-language models under sharding in current JAX / optax, none of them an idiom of samples/fresh .. fresh26, probe, train or wild.
shard_map families:
 1. LLaVA-style splice, text sequence over sp4: image patch features
    projected (replicated projector) and written into the text embeddings at
    a per-row splice offset given as an input; each device picks, for every
    global position of its block, the image token position - offset when it
    falls inside the image (take_along_axis + where). The baseline is a
    vmapped lax.dynamic_update_slice. Bugs: local positions (no axis_index
    offset), an inclusive upper bound (one extra token overwritten).
 2. a 2-layer MLP projector (column-parallel w1 + bias, GELU, row-parallel
    w2, psum over tp, bias after the psum) on dp2 x tp4, its image tokens
    concatenated in front of the text embeddings. Bugs: no psum after the
    row-parallel projection, the output bias added before the psum.
 3. a Flamingo-style Perceiver resampler: learned latents cross-attend to
    image features whose tokens are over sp4, keys = image tokens + the
    latents themselves (replicated); softmax merged across devices by pmax /
    psum, the latents' own terms added once. Bugs: softmax over the local
    image shard only (outputs pmean'd), the latents' terms inside the psum
    (counted once per device).
 4. a Q-Former cross-attention block: learned queries (replicated), image
    features with the batch over dp, heads over tp (wq/wk/wv column, wo row
    parallel), residual, then a replicated GELU FFN. Bugs: psum over dp
    instead of tp, the FFN applied to the partial sums before the psum.
 5. CoCa loss on dp4: symmetric InfoNCE between L2-normalised image and
    text embeddings (all_gather'd over dp, labels offset by the device's
    batch start, a learned temperature) plus a masked captioning
    cross-entropy (sum of masked token losses / number of valid tokens, both
    psum'd). Bugs: contrastive over the local batch only, labels without the
    offset, captioning loss as a pmean of per-device means.
 6. Flamingo gated cross-attention from text (sequence over sp) to image
    features (heads over tp) on a 2-D sp2 x tp4 mesh, a padded-image key
    mask, tanh gate. Bugs: output projection psum'd over sp, the residual
    added inside the psum.
 7. interleaved image-text sequence over sp4 with a modality id per token
    passed replicated (0 text, k > 0 image k): each device slices its
    block's ids, applies modality-specific projections, and attends with
    all_gather'd keys under a causal-for-text / bidirectional-within-image
    mask. Bugs: ids sliced from the next device's block, sliced at 0.
 8. modality-specific experts routed by a modality id (4 modalities, one
    expert each) on dp2 x ep4: tokens over dp, experts over ep, each device
    computes its expert on its modality's tokens, psum over ep. Bugs: the
    expert index from the dp axis, no psum over ep.
 9. Qwen2-VL-style M-RoPE: 3-D (temporal, row, column) position ids for
    image tokens of a gh x gw grid at an input offset, 1-D text positions
    continuing after max(gh, gw), rotary frequencies split in 3 sections,
    sequence over sp4 with positions computed on device. Bugs: local token
    index, row and column swapped (j % gw as row).
10. a training step of a tiny VLM (patch embedding, column/row-parallel
    MLP projector, image tokens prepended to text embeddings, one causal
    attention layer with heads over tp, LM head, loss on text positions)
    on dp2 x tp4 with check_vma=True, jax.grad and optax.sgd with momentum.
    Bugs: loss not pmean'd over dp, projector's row-parallel output not
    psum'd.
11. SigLIP sigmoid loss with the text embeddings passed around the dp4
    ring by ppermute inside a lax.fori_loop, positives on the first step's
    diagonal only. Bugs: positives on every step's diagonal, the psum'd sum
    divided by the local batch.
12. ViT patch grid with rows over sp4: 2-D sincos position embedding at
    global (row, col) computed on device, a Qwen2-VL 2 x 2 patch merger and
    its MLP. Bugs: local row index, the row offset counted in patches
    (me * rows * cols).
13. jax.grad of the Perceiver resampler of 3. (check_vma=True, the running
    maximum a stop_gradient before the pmax). Bugs: the denominator
    pmean'd, the loss psum'd over sp (gradients 4x).
14. LLaVA splice with the image patch tokens themselves over sp4 (bf16
    projector, all_gather'd), the offset wrapped and clamped as
    dynamic_update_slice does. Bugs: the local image tokens only, positions
    offset by the image shard length.
15. modality experts with all_to_all dispatch and return (tokens over ep4,
    slots from a cumsum of the one-hot routing, capacity = local tokens).
    Bugs: no return all_to_all, a capacity a quarter as large (tokens
    dropped).
16. modality ids derived on device from <img> / </img> marker tokens of an
    interleaved sequence over sp4 (local cumsum + exclusive prefix of the
    all_gather'd per-device balances), type embeddings added. Bugs: no
    prefix, an inclusive prefix.
17. the Q-Former block of 4. with the head-parallel output psum_scatter'd
    over the query axis (tp8), residual and FFN on the query shard, then
    all_gather'd. Bugs: the residual's query shard taken at 0, the gather
    along the batch axis reshaped.
18. a CoCa-style training step on dp4 without check_vma: mean-pooled
    towers, contrastive loss over all_gather'd embeddings (gradient through
    the gather), a captioning head; gradients pmean'd by hand, optax.sgd
    with Nesterov momentum. Bugs: gradients not averaged, psum'd.
19. Perceiver cross-attention on sp2 x tp4: image tokens over sp (pmax /
    psum softmax), heads over tp. Bugs: softmax over the local image shard,
    the output projection psum'd over (sp, tp).
20. the projector of 2. with the output bias added by tp rank 0 inside the
    psum (Megatron style). Bugs: bias on every rank, rank 0 of dp.
21. the cross-attention of 19. normalised by the psum'd denominator first,
    then one psum over (sp, tp). Bugs: the denominator local, the fused
    psum over tp only.
22. the contrastive loss with the positive logit computed locally and
    log-sum-exps over all_gather'd embeddings. Bugs: log-sum-exp over the
    local batch, mean over the local batch.
23. the splice of 14. as a scatter of each device's image tokens into a
    full-length zero buffer, psum over sp, the device's block sliced out.
    Bugs: patch index without the device offset, the next device's block.
24. modality experts with tokens replicated over ep and the outputs
    psum_scatter'd onto a (dp, ep) token axis. Bugs: experts in reverse ep
    order, psum then a block at the dp index.
25. the projector of 2. in bf16 end to end (bf16 psum). Bugs: psum over
    dp, bias inside a float32 psum.
26. the M-RoPE of 9. with lax.div / lax.rem on the clamped in-image index
    and sections picked by a one-hot matmul. Bugs: divide before
    subtracting the offset, row from lax.rem.
27. vision tower and language model on two pipeline stages (pp2): image
    tokens handed from stage 0 to 1 by ppermute, result broadcast by a
    masked psum. Bugs: ppermute 1 -> 0, result from stage 0.
28. the projector of 2. with the output bias split evenly over the tp
    ranks (b2 / 4 inside the psum). Bugs: b2 / 2, a psum over (dp, tp)
    halved.
29. the cross-attention of 21. with two psums, over tp then over sp.
    Bugs: the second psum over tp again, the tp psum dropped.
30. captioning losses on dp4: a masked mean as pmean(sum) / pmean(count)
    and a plain mean as psum(sum) / psum(constant count). Bugs: pmean over
    psum, the plain mean over the local count.
31. the SigLIP loss of 11. with a bidirectional ring, unrolled (own, left,
    right and distance-2 blocks). Bugs: the distance-2 block fetched from
    both sides, the right neighbour's block labelled positive.
32. two stacked Perceiver cross-attention layers under lax.scan over the
    stacked weights with jax.checkpoint, image tokens over sp4. Bugs: local
    maximum (no pmax), the scan reversed.
33. "attend to the most recent image only": images over sp4, replicated
    text tokens each attending only to the image given by an input id, so
    the softmax over the local image is complete; other images' tokens
    zeroed, psum. Bugs: local image index, no psum.
34. contrastive loss with in-group negatives by design (groups = the dp4
    shards): the local logits are the whole story. Bugs: negatives from the
    all_gather'd batch, a psum of the group means.
35. video-text interleave: one frame per sp4 device, the frame's 2 patch
    tokens at the start of its 4-token block (local positions by design).
    Bugs: the frame from the left neighbour, the patches at the block end.
36. CoCa on dp2 x sp4: text over sp mean-pooled by a psum over sp,
    contrastive over the all_gather'd dp batch, a captioning term psum'd
    over sp. Bugs: text pooled over the local block, the captioning sum
    over the local length.
GSPMD pairs (jax.jit with in/out shardings): the splice + projector of 1.
(sp4); the Perceiver resampler of 3. (sp4); the CoCa loss of 5. with its
gradient (dp4); the VLM training step of 10. with optax.adamw (dp2 x tp4);
the M-RoPE of 9. (sp4); the modality experts of 8. (dp2 x ep4); the SigLIP
loss of 11. with its gradient (dp4); the patch merger of 12. (sp4); the
interleaved attention of 7. with the ids over sp4; the gated
cross-attention of 6. (sp2 x tp4); the CoCa training step of 18. (dp4);
the cross-attention of 19. (sp2 x tp4); the bf16 projector of 25.
(dp2 x tp4); the scanned Perceiver of 32. (sp4); a LLaVA splice by
take_along_axis with the projected tokens constrained to features over sp
and the output to (dp, sp) (dp2 x sp4); the 2-D CoCa loss of 36. with its
gradient in the image projection, head and temperature (dp2 x sp4).
Numerics: every correct pair agrees with its baseline at rounding level
(f32 within ~1.5e-6; the bf16 projector within one bf16 ulp, 0.0156 at
magnitude ~4); bug variants differ clearly (see "numerics" in the
manifest). A first draft of 15.'s bug (inclusive slots) did not change the
function and was replaced; first drafts of the splices (1., 14., 23.) did
not wrap and clamp the offset as dynamic_update_slice does, so they
differed from the baseline for offsets outside [0, T - patches]: fixed.
Run from the repository root: bash samples/gen/run_fresh79.sh [SUBSTR...]
"""
import sys
import numpy as np
import jax, jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec as P
import optax
sys.path.insert(0, "samples/gen")  # run from the repository root (run_fresh79.sh)
from fresh_lib import Corpus, seeded, state_specs  # noqa: E402
from scalify_jax import make_mesh  # noqa: E402
from jax.sharding import NamedSharding  # noqa: E402

SCRIPT = "samples/gen/fresh79.py"
C = Corpus("samples/fresh79", SCRIPT, "samples/gen/run_fresh79.sh", sys.argv[1:])
rng, R, I = seeded(7979)
psum, pmax, pmean, idx = lax.psum, lax.pmax, lax.pmean, lax.axis_index
NEG = -1e30


def mha(q, k, v, ok=None):
    """q (b, q, h, e), k / v (b, k, h, e); ok broadcasts to (b, h, q, k)."""
    s = jnp.einsum("bqhe,bkhe->bhqk", q, k) / np.sqrt(q.shape[-1])
    if ok is not None:
        s = jnp.where(ok, s, NEG)
    return jnp.einsum("bhqk,bkhe->bqhe", jax.nn.softmax(s, -1), v)


def layernorm(x, eps=1e-5):
    m = x.mean(-1, keepdims=True)
    return (x - m) * lax.rsqrt(jnp.var(x, -1, keepdims=True) + eps)


# ---------------------------------------------------------------------------
# 1. LLaVA splice, text sequence over sp4.
B1, T1, D1, NP1, DV1 = 2, 16, 16, 4, 8


def splice(txt, img, w, off):
    it = jnp.einsum("bpv,vd->bpd", img, w)
    return jax.vmap(lambda t, i, o: lax.dynamic_update_slice(t, i, (o, 0)))(txt, it, off)


def splice_sp(bug):
    def f(txt, img, w, off):
        tl = txt.shape[1]
        off = jnp.clip(jnp.where(off < 0, off + 4 * tl, off), 0, 4 * tl - NP1)  # as dynamic_update_slice
        it = img @ w
        gpos = jnp.arange(tl) if bug == "local-positions" else idx("sp") * tl + jnp.arange(tl)
        j = gpos[None, :] - off[:, None]
        inside = (j >= 0) & ((j <= NP1) if bug == "inclusive-upper-bound" else (j < NP1))
        picked = jnp.take_along_axis(it, jnp.clip(j, 0, NP1 - 1)[..., None], axis=1)
        return jnp.where(inside[..., None], picked, txt)
    return f


ARGS1 = (R(B1, T1, D1), R(B1, NP1, DV1), R(DV1, D1, scale=0.4), np.array([3, 9], np.int32))
C.smap("s.llava_splice_offset_input.sp4", {"sp": 4}, splice_sp, (P(None, "sp"), P(), P(), P()), P(None, "sp"),
       splice, ARGS1, bugs=[("local-positions", ["wrong-offset"]), ("inclusive-upper-bound", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 2. MLP projector: column-parallel w1, row-parallel w2, dp2 x tp4.
B2, NP2, DV2, F2, D2, T2 = 4, 4, 8, 32, 16, 6


def projector(img, w1, b1, w2, b2, txt):
    h = jax.nn.gelu(jnp.dot(img, w1) + b1)
    return jnp.concatenate([jnp.dot(h, w2) + b2, txt], axis=1)


def projector_tp(bug):
    def f(img, w1, b1, w2, b2, txt):
        h = jax.nn.gelu(jnp.dot(img, w1) + b1)
        y = jnp.dot(h, w2)
        if bug == "bias-before-psum":
            y = psum(y + b2, "tp")
        elif bug == "no-psum":
            y = y + b2
        else:
            y = psum(y, "tp") + b2
        return jnp.concatenate([y, txt], axis=1)
    return f


C.smap("s.mlp_projector_rowparallel_concat.dp2xtp4", {"dp": 2, "tp": 4}, projector_tp,
       (P("dp"), P(None, "tp"), P("tp"), P("tp"), P(), P("dp")), P("dp"), projector,
       (R(B2, NP2, DV2), R(DV2, F2, scale=0.4), R(F2, scale=0.1), R(F2, D2, scale=0.3), R(D2, scale=0.5),
        R(B2, T2, D2)),
       bugs=[("no-psum", ["missing-all-reduce"]), ("bias-before-psum", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 3. Perceiver resampler, image tokens over sp4; keys are the image tokens
#    and the latents.
B3, NI3, D3, NQ3, H3, E3 = 2, 16, 16, 4, 2, 8


def resampler(feats, lat, wq, wk, wv, wo):
    x = jnp.concatenate([feats, jnp.broadcast_to(lat, (feats.shape[0],) + lat.shape)], 1)
    q = jnp.einsum("qd,dhe->qhe", layernorm(lat), wq)
    k = jnp.einsum("btd,dhe->bthe", layernorm(x), wk)
    v = jnp.einsum("btd,dhe->bthe", layernorm(x), wv)
    s = jnp.einsum("qhe,bkhe->bhqk", q, k) / np.sqrt(E3)
    o = jnp.einsum("bhqk,bkhe->bqhe", jax.nn.softmax(s, -1), v)
    return lat + jnp.einsum("bqhe,hed->bqd", o, wo)


def resampler_sp(bug):
    def f(feats, lat, wq, wk, wv, wo):
        q = jnp.einsum("qd,dhe->qhe", layernorm(lat), wq) / np.sqrt(E3)
        kf, vf = (jnp.einsum("btd,dhe->bthe", layernorm(feats), w) for w in (wk, wv))
        kl, vl = (jnp.einsum("qd,dhe->qhe", layernorm(lat), w) for w in (wk, wv))
        sf = jnp.einsum("qhe,bkhe->bhqk", q, kf)
        sl = jnp.broadcast_to(jnp.einsum("qhe,khe->hqk", q, kl), (feats.shape[0], H3, NQ3, NQ3))
        if bug == "local-softmax":
            p = jax.nn.softmax(jnp.concatenate([sf, sl], -1), -1)
            o = jnp.einsum("bhqk,bkhe->bqhe", p[..., :sf.shape[-1]], vf) + \
                jnp.einsum("bhqk,khe->bqhe", p[..., sf.shape[-1]:], vl)
            o = pmean(o, "sp")
        else:
            m = jnp.maximum(pmax(sf.max(-1, keepdims=True), "sp"), sl.max(-1, keepdims=True))
            ef, el = jnp.exp(sf - m), jnp.exp(sl - m)
            numf = jnp.einsum("bhqk,bkhe->bqhe", ef, vf)
            numl = jnp.einsum("bhqk,khe->bqhe", el, vl)
            denf = jnp.swapaxes(ef.sum(-1), 1, 2)[..., None]
            denl = jnp.swapaxes(el.sum(-1), 1, 2)[..., None]
            if bug == "latent-terms-in-psum":
                num, den = psum(numf + numl, "sp"), psum(denf + denl, "sp")
            else:
                num, den = psum(numf, "sp") + numl, psum(denf, "sp") + denl
            o = num / den
        return lat + jnp.einsum("bqhe,hed->bqd", o, wo)
    return f


ARGS3 = (R(B3, NI3, D3), R(NQ3, D3), R(D3, H3, E3, scale=0.4), R(D3, H3, E3, scale=0.4), R(D3, H3, E3, scale=0.4),
         R(H3, E3, D3, scale=0.3))
C.smap("s.perceiver_resampler_latent_keys.sp4", {"sp": 4}, resampler_sp, (P(None, "sp"), P(), P(), P(), P(), P()),
       P(), resampler, ARGS3,
       bugs=[("local-softmax", ["missing-all-reduce"]), ("latent-terms-in-psum", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 4. Q-Former cross-attention block, batch over dp, heads over tp.
B4, NI4, D4, NQ4, H4, E4, F4 = 4, 8, 16, 4, 8, 4, 24


def qformer(img, qry, wq, wk, wv, wo, f1, f2):
    q = jnp.einsum("qd,dhe->qhe", layernorm(qry), wq)
    q = jnp.broadcast_to(q, (img.shape[0],) + q.shape)
    k = jnp.einsum("bnd,dhe->bnhe", img, wk)
    v = jnp.einsum("bnd,dhe->bnhe", img, wv)
    x = qry + jnp.einsum("bqhe,hed->bqd", mha(q, k, v), wo)
    return x + jax.nn.gelu(layernorm(x) @ f1) @ f2


def qformer_tp(bug):
    def f(img, qry, wq, wk, wv, wo, f1, f2):
        q = jnp.einsum("qd,dhe->qhe", layernorm(qry), wq)
        q = jnp.broadcast_to(q, (img.shape[0],) + q.shape)
        k = jnp.einsum("bnd,dhe->bnhe", img, wk)
        v = jnp.einsum("bnd,dhe->bnhe", img, wv)
        part = jnp.einsum("bqhe,hed->bqd", mha(q, k, v), wo)
        if bug == "ffn-before-psum":
            x = qry / 4 + part
            return psum(x + jax.nn.gelu(layernorm(x) @ f1) @ f2, "tp")
        x = qry + psum(part, "dp" if bug == "psum-over-dp" else "tp")
        return x + jax.nn.gelu(layernorm(x) @ f1) @ f2
    return f


C.smap("s.qformer_xattn_heads_tp.dp2xtp4", {"dp": 2, "tp": 4}, qformer_tp,
       (P("dp"), P(), P(None, "tp"), P(None, "tp"), P(None, "tp"), P("tp"), P(), P()), P("dp"), qformer,
       (R(B4, NI4, D4), R(NQ4, D4), R(D4, H4, E4, scale=0.4), R(D4, H4, E4, scale=0.4), R(D4, H4, E4, scale=0.4),
        R(H4, E4, D4, scale=0.3), R(D4, F4, scale=0.3), R(F4, D4, scale=0.3)),
       bugs=[("psum-over-dp", ["wrong-axis"]), ("ffn-before-psum", ["wrong-order"])])

# ---------------------------------------------------------------------------
# 5. CoCa loss on dp4.
B5, D5, L5, V5 = 8, 8, 6, 16


def l2n(x):
    return x / jnp.linalg.norm(x, axis=-1, keepdims=True)


def coca(ie, te, t, cl, ct, cm):
    a, b = l2n(ie), l2n(te)
    lg = a @ b.T * jnp.exp(t)
    lab = jnp.arange(a.shape[0])
    con = 0.5 * (optax.softmax_cross_entropy_with_integer_labels(lg, lab).mean()
                 + optax.softmax_cross_entropy_with_integer_labels(lg.T, lab).mean())
    ce = optax.softmax_cross_entropy_with_integer_labels(cl, ct)
    cap = jnp.sum(ce * cm) / jnp.sum(cm)
    return con + 2.0 * cap


def coca_dp(bug):
    def f(ie, te, t, cl, ct, cm):
        a, b = l2n(ie), l2n(te)
        bl = a.shape[0]
        if bug == "local-batch-contrastive":
            aa, bb, lab = a, b, jnp.arange(bl)
        else:
            aa, bb = lax.all_gather(a, "dp", tiled=True), lax.all_gather(b, "dp", tiled=True)
            lab = jnp.arange(bl) + (0 if bug == "labels-without-offset" else idx("dp") * bl)
        li = a @ bb.T * jnp.exp(t)
        lt = b @ aa.T * jnp.exp(t)
        con = pmean(0.5 * (optax.softmax_cross_entropy_with_integer_labels(li, lab).mean()
                           + optax.softmax_cross_entropy_with_integer_labels(lt, lab).mean()), "dp")
        ce = optax.softmax_cross_entropy_with_integer_labels(cl, ct)
        if bug == "caption-pmean-of-means":
            cap = pmean(jnp.sum(ce * cm) / jnp.sum(cm), "dp")
        else:
            cap = psum(jnp.sum(ce * cm), "dp") / psum(jnp.sum(cm), "dp")
        return con + 2.0 * cap
    return f


LEN5 = np.array([6, 2, 5, 1, 3, 6, 4, 2])
CM5 = (np.arange(L5)[None, :] < LEN5[:, None]).astype(np.float32)
ARGS5 = (R(B5, D5), R(B5, D5), np.float32(np.log(5.0)), R(B5, L5, V5), I(0, V5, B5, L5), CM5)
C.smap("s.coca_contrastive_caption_loss.dp4", {"dp": 4}, coca_dp, (P("dp"), P("dp"), P(), P("dp"), P("dp"), P("dp")),
       P(), coca, ARGS5,
       bugs=[("local-batch-contrastive", ["missing-collective"]), ("labels-without-offset", ["wrong-offset"]),
             ("caption-pmean-of-means", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 6. Flamingo gated cross-attention, text over sp2, heads over tp4.
B6, T6, NI6, D6, H6, E6 = 2, 8, 6, 16, 8, 4


def gated_xattn(x, img, imask, wq, wk, wv, wo, gate):
    q = jnp.einsum("btd,dhe->bthe", layernorm(x), wq)
    k = jnp.einsum("bnd,dhe->bnhe", img, wk)
    v = jnp.einsum("bnd,dhe->bnhe", img, wv)
    o = mha(q, k, v, (imask > 0)[:, None, None, :])
    return x + jnp.tanh(gate) * jnp.einsum("bthe,hed->btd", o, wo)


def gated_xattn_sp_tp(bug):
    def f(x, img, imask, wq, wk, wv, wo, gate):
        q = jnp.einsum("btd,dhe->bthe", layernorm(x), wq)
        k = jnp.einsum("bnd,dhe->bnhe", img, wk)
        v = jnp.einsum("bnd,dhe->bnhe", img, wv)
        o = mha(q, k, v, (imask > 0)[:, None, None, :])
        y = jnp.tanh(gate) * jnp.einsum("bthe,hed->btd", o, wo)
        if bug == "residual-inside-psum":
            return psum(x + y, "tp")
        return x + psum(y, "sp" if bug == "psum-over-sp" else "tp")
    return f


IM6 = np.array([[1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1]], np.int32)
C.smap("s.gated_xattn_text_sp_image_heads_tp.sp2xtp4", {"sp": 2, "tp": 4}, gated_xattn_sp_tp,
       (P(None, "sp"), P(), P(), P(None, "tp"), P(None, "tp"), P(None, "tp"), P("tp"), P()), P(None, "sp"),
       gated_xattn,
       (R(B6, T6, D6), R(B6, NI6, D6), IM6, R(D6, H6, E6, scale=0.4), R(D6, H6, E6, scale=0.4),
        R(D6, H6, E6, scale=0.4), R(H6, E6, D6, scale=0.3), np.float32(0.7)),
       bugs=[("psum-over-sp", ["wrong-axis"]), ("residual-inside-psum", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 7. interleaved image-text sequence over sp4, modality ids replicated.
B7, T7, D7, H7, E7 = 2, 16, 8, 2, 4
MOD7 = np.zeros((B7, T7), np.int32)
MOD7[0, 2:6] = 1
MOD7[0, 9:14] = 2
MOD7[1, 5:11] = 1
MOD7[1, 12:15] = 2


def interleaved(x, mod, wt, wi, wk, wv):
    h = jnp.where((mod > 0)[..., None], x @ wi, x @ wt)
    q = h.reshape(h.shape[:2] + (H7, E7))
    k = jnp.einsum("btd,dhe->bthe", h, wk)
    v = jnp.einsum("btd,dhe->bthe", h, wv)
    t = jnp.arange(x.shape[1])
    ok = (t[None, :, None] >= t[None, None, :]) | ((mod[:, :, None] > 0) & (mod[:, :, None] == mod[:, None, :]))
    return mha(q, k, v, ok[:, None])


def interleaved_sp(bug):
    def f(x, mod, wt, wi, wk, wv):
        n, tl = 4, x.shape[1]
        me = idx("sp")
        start = 0 if bug == "ids-sliced-at-zero" else ((me + 1) % n if bug == "ids-from-next-device" else me) * tl
        ml = lax.dynamic_slice_in_dim(mod, start, tl, axis=1)
        h = jnp.where((ml > 0)[..., None], x @ wi, x @ wt)
        q = h.reshape(h.shape[:2] + (H7, E7))
        k = lax.all_gather(jnp.einsum("btd,dhe->bthe", h, wk), "sp", axis=1, tiled=True)
        v = lax.all_gather(jnp.einsum("btd,dhe->bthe", h, wv), "sp", axis=1, tiled=True)
        tq = me * tl + jnp.arange(tl)
        tk = jnp.arange(mod.shape[1])
        ok = (tq[None, :, None] >= tk[None, None, :]) | ((ml[:, :, None] > 0) & (ml[:, :, None] == mod[:, None, :]))
        return mha(q, k, v, ok[:, None])
    return f


C.smap("s.interleaved_modality_mask_replicated_ids.sp4", {"sp": 4}, interleaved_sp,
       (P(None, "sp"), P(), P(), P(), P(), P()), P(None, "sp"), interleaved,
       (R(B7, T7, D7), MOD7, R(D7, D7, scale=0.5), R(D7, D7, scale=0.5), R(D7, H7, E7, scale=0.5),
        R(D7, H7, E7, scale=0.5)),
       bugs=[("ids-from-next-device", ["wrong-offset"]), ("ids-sliced-at-zero", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 8. modality experts: 4 modalities, one expert each, experts over ep4,
#    tokens over dp2.
N8, D8, F8 = 16, 8, 16


def modality_experts(x, mod, w1, w2):
    oh = jax.nn.one_hot(mod, 4, dtype=x.dtype)
    h = jax.nn.silu(jnp.einsum("nd,edf->nef", x, w1))
    y = jnp.einsum("nef,efd->ned", h, w2)
    return jnp.einsum("ned,ne->nd", y, oh)


def modality_experts_ep(bug):
    def f(x, mod, w1, w2):
        e = idx("dp") if bug == "expert-id-from-dp" else idx("ep")
        y = jax.nn.silu(x @ w1[0]) @ w2[0]
        y = jnp.where((mod == e)[:, None], y, 0.0)
        return y if bug == "no-psum-over-ep" else psum(y, "ep")
    return f


MODS8 = np.array([0, 1, 2, 3, 1, 1, 0, 2, 3, 3, 1, 0, 2, 1, 0, 3], np.int32)
C.smap("s.modality_experts_by_id.dp2xep4", {"dp": 2, "ep": 4}, modality_experts_ep,
       (P("dp"), P("dp"), P("ep"), P("ep")), P("dp"), modality_experts,
       (R(N8, D8), MODS8, R(4, D8, F8, scale=0.4), R(4, F8, D8, scale=0.4)),
       bugs=[("expert-id-from-dp", ["wrong-axis"]), ("no-psum-over-ep", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 9. Qwen2-VL M-RoPE, sequence over sp4.
B9, T9, H9, E9, GH, GW = 2, 16, 2, 12, 2, 3
SECT = (2, 2, 2)  # frequencies per (temporal, row, column)
INV9 = (1.0 / (10000.0 ** (np.arange(0, E9, 2) / E9))).astype(np.float32)


def mrope_pos(t, off, swap=False):
    """(3, b, tl) position ids of global token indices t (tl,) with the
    image grid at per-row offsets off (b,)."""
    j = t[None, :] - off[:, None]
    img = (j >= 0) & (j < GH * GW)
    after = j >= GH * GW
    row, col = (j % GW, j // GW) if swap else (j // GW, j % GW)
    txt = jnp.where(after, off[:, None] + max(GH, GW) + (j - GH * GW), t[None, :])
    pt = jnp.where(img, off[:, None], txt)
    ph = jnp.where(img, off[:, None] + row, txt)
    pw = jnp.where(img, off[:, None] + col, txt)
    return jnp.stack([pt, ph, pw])


def mrope_apply(x, pos):
    sec = np.repeat(np.arange(3), SECT)  # which position each frequency uses
    p = pos[sec]  # (nf, b, t)
    ang = jnp.moveaxis(p, 0, -1).astype(jnp.float32) * INV9  # (b, t, nf)
    c, s = jnp.cos(ang)[:, :, None], jnp.sin(ang)[:, :, None]
    x1, x2 = x[..., :E9 // 2], x[..., E9 // 2:]
    return jnp.concatenate([x1 * c - x2 * s, x2 * c + x1 * s], -1)


def mrope(x, off):
    return mrope_apply(x, mrope_pos(jnp.arange(x.shape[1]), off))


def mrope_sp(bug):
    def f(x, off):
        tl = x.shape[1]
        t = jnp.arange(tl) if bug == "local-token-index" else idx("sp") * tl + jnp.arange(tl)
        return mrope_apply(x, mrope_pos(t, off, swap=bug == "row-col-swapped"))
    return f


OFF9 = np.array([2, 7], np.int32)
C.smap("s.mrope_3d_image_positions.sp4", {"sp": 4}, mrope_sp, (P(None, "sp"), P()), P(None, "sp"), mrope,
       (R(B9, T9, H9, E9), OFF9),
       bugs=[("local-token-index", ["wrong-offset"]), ("row-col-swapped", ["wrong-permutation"])])

# ---------------------------------------------------------------------------
# 10. a training step of a tiny VLM on dp2 x tp4.
B10, NP10, PD10, DV10, F10, D10, H10, E10, V10, T10 = 4, 4, 12, 8, 16, 16, 4, 4, 24, 6


def init10():
    return {"patch": R(PD10, DV10, scale=0.3), "p1": R(DV10, F10, scale=0.3), "p2": R(F10, D10, scale=0.3),
            "emb": R(V10, D10, scale=0.5), "wq": R(D10, H10, E10, scale=0.3), "wk": R(D10, H10, E10, scale=0.3),
            "wv": R(D10, H10, E10, scale=0.3), "wo": R(H10, E10, D10, scale=0.3), "out": R(D10, V10, scale=0.3)}


SPEC10 = {"patch": P(), "p1": P(None, "tp"), "p2": P("tp"), "emb": P(), "wq": P(None, "tp"), "wk": P(None, "tp"),
          "wv": P(None, "tp"), "wo": P("tp"), "out": P()}


def vlm_loss(p, patches, tok, tp_sum=lambda y: y):
    it = tp_sum(jax.nn.gelu((patches @ p["patch"]) @ p["p1"]) @ p["p2"])
    x = jnp.concatenate([it, p["emb"][tok[:, :-1]]], 1)
    h = layernorm(x)
    q, k, v = (jnp.einsum("btd,dhe->bthe", h, p[n]) for n in ("wq", "wk", "wv"))
    S = x.shape[1]
    x = x + tp_sum(jnp.einsum("bthe,hed->btd", mha(q, k, v, jnp.tril(jnp.ones((S, S), bool))), p["wo"]))
    lg = layernorm(x[:, NP10:]) @ p["out"]
    return jnp.mean(optax.softmax_cross_entropy_with_integer_labels(lg, tok[:, 1:]))


OPT10 = optax.sgd(0.1, momentum=0.9)


def step10(p, s, patches, tok):
    l, g = jax.value_and_grad(vlm_loss)(p, patches, tok)
    u, s = OPT10.update(g, s, p)
    return optax.apply_updates(p, u), s, l


def step10_sm(bug):
    def f(p, s, patches, tok):
        def loss(p):
            tps = lambda y: psum(y, "tp")  # noqa: E731
            if bug == "projector-no-psum":
                it = jax.nn.gelu((patches @ p["patch"]) @ p["p1"]) @ p["p2"]
                x = jnp.concatenate([it, p["emb"][tok[:, :-1]]], 1)
                h = layernorm(x)
                q, k, v = (jnp.einsum("btd,dhe->bthe", h, p[n]) for n in ("wq", "wk", "wv"))
                S = x.shape[1]
                x = x + tps(jnp.einsum("bthe,hed->btd", mha(q, k, v, jnp.tril(jnp.ones((S, S), bool))), p["wo"]))
                lg = layernorm(x[:, NP10:]) @ p["out"]
                lo = jnp.mean(optax.softmax_cross_entropy_with_integer_labels(lg, tok[:, 1:]))
                return pmean(lo, ("dp", "tp"))
            lo = vlm_loss(p, patches, tok, tps)
            return lo if bug == "loss-not-pmeaned-over-dp" else pmean(lo, "dp")
        l, g = jax.value_and_grad(loss)(p)
        u, s = OPT10.update(g, s, p)
        if bug == "loss-not-pmeaned-over-dp":
            l = pmean(l, "dp")
        return optax.apply_updates(p, u), s, l
    return f


P10 = init10()
S10 = OPT10.init(P10)
SS10 = state_specs(S10, SPEC10)
ARGS10 = (P10, S10, R(B10, NP10, PD10), I(0, V10, B10, T10 + 1))
C.smap("s.vlm_train_step_sgd_momentum.dp2xtp4", {"dp": 2, "tp": 4}, step10_sm, (SPEC10, SS10, P("dp"), P("dp")),
       (SPEC10, SS10, P()), step10, ARGS10,
       bugs=[("loss-not-pmeaned-over-dp", ["missing-all-reduce"]), ("projector-no-psum", ["missing-all-reduce"])],
       check_vma=True)

# ---------------------------------------------------------------------------
# 11. SigLIP sigmoid loss with the text embeddings passed around the dp4 ring
#     by ppermute inside a lax.fori_loop; positives only on the first step's
#     diagonal; learned temperature and bias.
B11, D11 = 8, 8


def siglip(ie, te, t, b):
    lg = l2n(ie) @ l2n(te).T * jnp.exp(t) + b
    z = 2.0 * jnp.eye(ie.shape[0]) - 1.0
    return -jnp.sum(jax.nn.log_sigmoid(z * lg)) / ie.shape[0]


def siglip_ring(bug):
    def f(ie, te, t, b):
        n, bl = 4, ie.shape[0]
        a, tx = l2n(ie), l2n(te)
        eye = jnp.eye(bl)

        def body(k, carry):
            cur, acc = carry
            lg = a @ cur.T * jnp.exp(t) + b
            pos = eye if bug == "positives-every-step" else jnp.where(k == 0, eye, 0.0)
            acc = acc - jnp.sum(jax.nn.log_sigmoid((2.0 * pos - 1.0) * lg))
            return lax.ppermute(cur, "dp", [(i, (i + 1) % n) for i in range(n)]), acc
        _, acc = lax.fori_loop(0, n, body, (tx, jnp.float32(0.0)))
        return psum(acc, "dp") / (bl if bug == "normalised-by-local-batch" else n * bl)
    return f


ARGS11 = (R(B11, D11), R(B11, D11), np.float32(np.log(10.0)), np.float32(-2.0))
C.smap("s.siglip_sigmoid_loss_ring_fori.dp4", {"dp": 4}, siglip_ring, (P("dp"), P("dp"), P(), P()), P(), siglip,
       ARGS11, bugs=[("positives-every-step", ["wrong-offset"]), ("normalised-by-local-batch", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 12. ViT patch grid with rows over sp4: 2-D sincos position embedding at
#     global (row, col) computed on device, then a 2 x 2 patch merger
#     (Qwen2-VL style) and its MLP.
B12, GH12, GW12, D12, O12 = 2, 8, 4, 8, 12


def sincos(p, dim):
    om = 1.0 / (100.0 ** (np.arange(dim // 2) / (dim // 2)))
    a = p[..., None].astype(jnp.float32) * om
    return jnp.concatenate([jnp.sin(a), jnp.cos(a)], -1)


def merge2x2(x, w1, w2):
    b, h, w, d = x.shape
    m = x.reshape(b, h // 2, 2, w // 2, 2, d).transpose(0, 1, 3, 2, 4, 5).reshape(b, h // 2, w // 2, 4 * d)
    return jax.nn.gelu(layernorm(m) @ w1) @ w2


def vit_merge(x, w1, w2):
    r, c = jnp.meshgrid(jnp.arange(x.shape[1]), jnp.arange(x.shape[2]), indexing="ij")
    pe = jnp.concatenate([sincos(r, D12 // 2), sincos(c, D12 // 2)], -1)
    return merge2x2(x + pe, w1, w2)


def vit_merge_sp(bug):
    def f(x, w1, w2):
        rl, gw = x.shape[1], x.shape[2]
        base = 0 if bug == "local-row-index" else idx("sp") * (rl * gw if bug == "row-offset-in-patches" else rl)
        r, c = jnp.meshgrid(base + jnp.arange(rl), jnp.arange(gw), indexing="ij")
        pe = jnp.concatenate([sincos(r, D12 // 2), sincos(c, D12 // 2)], -1)
        return merge2x2(x + pe, w1, w2)
    return f


ARGS12 = (R(B12, GH12, GW12, D12), R(4 * D12, 16, scale=0.3), R(16, O12, scale=0.3))
C.smap("s.vit_sincos2d_patch_merger_rows.sp4", {"sp": 4}, vit_merge_sp, (P(None, "sp"), P(), P()), P(None, "sp"),
       vit_merge, ARGS12, bugs=[("local-row-index", ["wrong-offset"]), ("row-offset-in-patches", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 13. gradient of the Perceiver resampler of 3. (loss: mean square of the
#     resampled latents) in the latents and the projections, image tokens
#     over sp4, check_vma=True, the running maximum a stop_gradient.


def resampler_grad(feats, lat, wq, wk, wv, wo):
    return jax.grad(lambda *p: jnp.mean(jnp.square(resampler(feats, *p))), (0, 1, 2, 3, 4))(lat, wq, wk, wv, wo)


def resampler_grad_sp(bug):
    def f(feats, lat, wq, wk, wv, wo):
        def fwd(lat, wq, wk, wv, wo):
            q = jnp.einsum("qd,dhe->qhe", layernorm(lat), wq) / np.sqrt(E3)
            kf, vf = (jnp.einsum("btd,dhe->bthe", layernorm(feats), w) for w in (wk, wv))
            kl, vl = (jnp.einsum("qd,dhe->qhe", layernorm(lat), w) for w in (wk, wv))
            sf = jnp.einsum("qhe,bkhe->bhqk", q, kf)
            sl = jnp.broadcast_to(jnp.einsum("qhe,khe->hqk", q, kl), (feats.shape[0], H3, NQ3, NQ3))
            sg = lax.stop_gradient
            m = jnp.maximum(pmax(sg(sf).max(-1, keepdims=True), "sp"), sg(sl).max(-1, keepdims=True))
            ef, el = jnp.exp(sf - m), jnp.exp(sl - m)
            num = psum(jnp.einsum("bhqk,bkhe->bqhe", ef, vf), "sp") + jnp.einsum("bhqk,khe->bqhe", el, vl)
            red = pmean if bug == "denominator-pmean" else psum
            den = red(jnp.swapaxes(ef.sum(-1), 1, 2)[..., None], "sp") + jnp.swapaxes(el.sum(-1), 1, 2)[..., None]
            out = lat + jnp.einsum("bqhe,hed->bqd", num / den, wo)
            l = jnp.mean(jnp.square(out))
            return psum(l, "sp") if bug == "loss-psummed" else l
        return jax.grad(fwd, (0, 1, 2, 3, 4))(lat, wq, wk, wv, wo)
    return f


C.smap("s.perceiver_resampler_grad_vma.sp4", {"sp": 4}, resampler_grad_sp, (P(None, "sp"), P(), P(), P(), P(), P()),
       (P(),) * 5, resampler_grad, ARGS3,
       bugs=[("denominator-pmean", ["wrong-scale"]), ("loss-psummed", ["wrong-scale"])], check_vma=True)

# ---------------------------------------------------------------------------
# 14. LLaVA splice with the image patch tokens themselves over sp4 (bf16
#     projector, all_gather'd before the splice), text over sp4.
B14, T14, NP14, DV14, D14 = 2, 16, 8, 8, 16


def splice_bf16(txt, img, w, off):
    it = jnp.einsum("bpv,vd->bpd", img.astype(jnp.bfloat16), w.astype(jnp.bfloat16)).astype(jnp.float32)
    return jax.vmap(lambda t, i, o: lax.dynamic_update_slice(t, i, (o, 0)))(txt, it, off)


def splice_bf16_sp(bug):
    def f(txt, img, w, off):
        tl = txt.shape[1]
        off = jnp.clip(jnp.where(off < 0, off + 4 * tl, off), 0, 4 * tl - NP14)  # as dynamic_update_slice
        it = jnp.einsum("bpv,vd->bpd", img.astype(jnp.bfloat16), w.astype(jnp.bfloat16)).astype(jnp.float32)
        if bug != "local-image-tokens":
            it = lax.all_gather(it, "sp", axis=1, tiled=True)
        npt = it.shape[1]
        gpos = idx("sp") * (img.shape[1] if bug == "positions-from-image-shard" else tl) + jnp.arange(tl)
        j = gpos[None, :] - off[:, None]
        picked = jnp.take_along_axis(it, jnp.clip(j, 0, npt - 1)[..., None], axis=1)
        return jnp.where(((j >= 0) & (j < NP14))[..., None], picked, txt)
    return f


ARGS14 = (R(B14, T14, D14), R(B14, NP14, DV14), R(DV14, D14, scale=0.4), np.array([1, 6], np.int32))
C.smap("s.llava_splice_sharded_patches_bf16.sp4", {"sp": 4}, splice_bf16_sp, (P(None, "sp"), P(None, "sp"), P(), P()),
       P(None, "sp"), splice_bf16, ARGS14,
       bugs=[("local-image-tokens", ["missing-collective"]), ("positions-from-image-shard", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 15. modality experts with all_to_all dispatch: tokens over ep4, one expert
#     per modality per device, slots from a cumsum of the one-hot routing
#     (capacity = local tokens, nothing dropped), all_to_all there and back.
N15, D15, F15 = 32, 8, 16


def modality_a2a(bug):
    def f(x, mod, w1, w2):
        nl = x.shape[0]
        oh = jax.nn.one_hot(mod, 4, dtype=x.dtype)
        slot = jnp.sum((jnp.cumsum(oh, 0) - (0 if bug == "slots-inclusive" else 1)) * oh, -1).astype(jnp.int32)
        so = jax.nn.one_hot(slot, nl // 4 if bug == "capacity-too-small" else nl, dtype=x.dtype)
        disp = jnp.einsum("ne,nc,nd->ecd", oh, so, x)
        recv = lax.all_to_all(disp, "ep", 0, 0, tiled=True)
        y = jax.nn.silu(recv @ w1[0]) @ w2[0]
        back = y if bug == "no-return-all-to-all" else lax.all_to_all(y, "ep", 0, 0, tiled=True)
        return jnp.einsum("ne,nc,ecd->nd", oh, so, back)
    return f


MODS15 = I(0, 4, N15)
C.smap("s.modality_experts_all_to_all.ep4", {"ep": 4}, modality_a2a, (P("ep"), P("ep"), P("ep"), P("ep")), P("ep"),
       modality_experts, (R(N15, D15), MODS15, R(4, D15, F15, scale=0.4), R(4, F15, D15, scale=0.4)),
       bugs=[("no-return-all-to-all", ["missing-collective"]), ("capacity-too-small", ["wrong-shape"])])

# ---------------------------------------------------------------------------
# 16. modality ids derived on device from image-begin / image-end marker
#     tokens of an interleaved sequence over sp4 (an image spans marker to
#     marker and may cross devices): local cumsum of begins minus ends plus
#     the exclusive prefix of the all_gather'd per-device balances; the
#     image tokens get a learned image-type embedding, the text tokens a
#     text-type embedding.
B16, T16, D16 = 2, 16, 8
TOK16 = np.full((B16, T16), 5, np.int32)
TOK16[0, [2, 10]], TOK16[0, [7, 13]] = 1, 2  # 1 = <img>, 2 = </img>
TOK16[1, [3]], TOK16[1, [12]] = 1, 2


def type_embed(x, tok, temb):
    inside = jnp.cumsum((tok == 1).astype(jnp.int32) - (tok == 2).astype(jnp.int32), 1)
    inside = inside + (tok == 2)  # the closing marker still belongs to the image
    return x + temb[(inside > 0).astype(jnp.int32)]


def type_embed_sp(bug):
    def f(x, tok, temb):
        bal = (tok == 1).astype(jnp.int32) - (tok == 2).astype(jnp.int32)
        loc = jnp.cumsum(bal, 1)
        tot = lax.all_gather(loc[:, -1], "sp")  # (n, b)
        n, me = 4, idx("sp")
        keep = (jnp.arange(n) <= me) if bug == "inclusive-prefix" else (jnp.arange(n) < me)
        inside = loc + (0 if bug == "no-prefix" else jnp.sum(jnp.where(keep[:, None], tot, 0), 0)[:, None])
        inside = inside + (tok == 2)
        return x + temb[(inside > 0).astype(jnp.int32)]
    return f


C.smap("s.modality_ids_from_markers_prefix.sp4", {"sp": 4}, type_embed_sp, (P(None, "sp"), P(None, "sp"), P()),
       P(None, "sp"), type_embed, (R(B16, T16, D16), TOK16, R(2, D16)),
       bugs=[("no-prefix", ["missing-collective"]), ("inclusive-prefix", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 17. the Q-Former block of 4. with the head-parallel output reduce-
#     scattered over the query axis (psum_scatter), the residual and FFN on
#     the query shard, then all_gather'd (tp8, batch replicated).


def qformer_rs(bug):
    def f(img, qry, wq, wk, wv, wo, f1, f2):
        q = jnp.einsum("qd,dhe->qhe", layernorm(qry), wq)
        q = jnp.broadcast_to(q, (img.shape[0],) + q.shape)
        k = jnp.einsum("bnd,dhe->bnhe", img, wk)
        v = jnp.einsum("bnd,dhe->bnhe", img, wv)
        part = jnp.einsum("bqhe,hed->bqd", mha(q, k, v), wo)
        y = lax.psum_scatter(part, "tp", scatter_dimension=1, tiled=True)
        ql = qry.shape[0] // 8
        start = (0 if bug == "residual-query-shard-0" else idx("tp")) * ql
        x = lax.dynamic_slice_in_dim(qry, start, ql, 0) + y
        x = x + jax.nn.gelu(layernorm(x) @ f1) @ f2
        return lax.all_gather(x, "tp", axis=1, tiled=bug != "gather-untiled") if bug != "gather-untiled" else \
            lax.all_gather(x, "tp", axis=0, tiled=True).reshape(img.shape[0], qry.shape[0], -1)
    return f


C.smap("s.qformer_reduce_scatter_queries.tp8", {"tp": 8}, qformer_rs,
       (P(), P(), P(None, "tp"), P(None, "tp"), P(None, "tp"), P("tp"), P(), P()), P(), qformer,
       (R(2, NI4, D4), R(8, D4), R(D4, H4, E4, scale=0.4), R(D4, H4, E4, scale=0.4), R(D4, H4, E4, scale=0.4),
        R(H4, E4, D4, scale=0.3), R(D4, F4, scale=0.3), R(F4, D4, scale=0.3)),
       bugs=[("residual-query-shard-0", ["wrong-offset"]), ("gather-untiled", ["wrong-permutation"])])

# ---------------------------------------------------------------------------
# 18. a CoCa-style training step on dp4 written without check_vma: mean-
#     pooled image and text towers, the contrastive loss of 5. over
#     all_gather'd embeddings (its gradient flows back through the gather),
#     a captioning head conditioned on the image embedding; jax.grad of the
#     local loss, gradients pmean'd over dp by hand, optax.sgd (Nesterov).
B18, NP18, PD18, D18, V18, L18 = 8, 4, 6, 8, 12, 5


def init18():
    return {"wi": R(PD18, D18, scale=0.4), "wt": R(D18, D18, scale=0.4), "emb": R(V18, D18, scale=0.5),
            "wout": R(D18, V18, scale=0.4), "t": np.float32(np.log(4.0))}


def coca_model_loss(p, patches, tok, gather=lambda a: a, off=0):
    ie = jnp.mean(patches, 1) @ p["wi"]
    te = jnp.mean(p["emb"][tok], 1) @ p["wt"]
    a, b = l2n(ie), l2n(te)
    aa, bb = gather(a), gather(b)
    lab = off + jnp.arange(a.shape[0])
    con = 0.5 * (optax.softmax_cross_entropy_with_integer_labels(a @ bb.T * jnp.exp(p["t"]), lab).mean()
                 + optax.softmax_cross_entropy_with_integer_labels(b @ aa.T * jnp.exp(p["t"]), lab).mean())
    lg = (p["emb"][tok[:, :-1]] + ie[:, None]) @ p["wout"]
    return con + jnp.mean(optax.softmax_cross_entropy_with_integer_labels(lg, tok[:, 1:]))


OPT18 = optax.sgd(0.2, momentum=0.9, nesterov=True)


def step18(p, s, patches, tok):
    l, g = jax.value_and_grad(coca_model_loss)(p, patches, tok)
    u, s = OPT18.update(g, s, p)
    return optax.apply_updates(p, u), s, l


def step18_dp(bug):
    def f(p, s, patches, tok):
        def loss(p):
            return coca_model_loss(p, patches, tok, lambda a: lax.all_gather(a, "dp", tiled=True),
                                   idx("dp") * patches.shape[0])
        l, g = jax.value_and_grad(loss)(p)
        if bug == "grads-psummed":
            g = psum(g, "dp")
        elif bug != "grads-not-averaged":
            g = pmean(g, "dp")
        u, s = OPT18.update(g, s, p)
        return optax.apply_updates(p, u), s, pmean(l, "dp")
    return f


P18 = init18()
S18 = OPT18.init(P18)
SPEC18 = jax.tree.map(lambda _: P(), P18)
SS18 = jax.tree.map(lambda _: P(), S18)
ARGS18 = (P18, S18, R(B18, NP18, PD18), I(0, V18, B18, L18 + 1))
C.smap("s.coca_train_step_grad_through_gather.dp4", {"dp": 4}, step18_dp, (SPEC18, SS18, P("dp"), P("dp")),
       (SPEC18, SS18, P()), step18, ARGS18,
       bugs=[("grads-not-averaged", ["missing-all-reduce"]), ("grads-psummed", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 19. Perceiver cross-attention (latents only as queries, no latent keys)
#     on a 2-D sp2 x tp4 mesh: image tokens over sp (softmax merged by pmax
#     / psum), heads over tp (output projection psum'd over tp).
B19, NI19, D19, NQ19, H19, E19 = 2, 8, 16, 4, 8, 4


def latent_xattn(feats, lat, wq, wk, wv, wo):
    q = jnp.broadcast_to(jnp.einsum("qd,dhe->qhe", lat, wq), (feats.shape[0], NQ19, H19, E19))
    k, v = (jnp.einsum("btd,dhe->bthe", feats, w) for w in (wk, wv))
    return lat + jnp.einsum("bqhe,hed->bqd", mha(q, k, v), wo)


def latent_xattn_2d(bug):
    def f(feats, lat, wq, wk, wv, wo):
        q = jnp.einsum("qd,dhe->qhe", lat, wq) / np.sqrt(E19)
        k, v = (jnp.einsum("btd,dhe->bthe", feats, w) for w in (wk, wv))
        sc = jnp.einsum("qhe,bkhe->bhqk", q, k)
        if bug == "softmax-local-shard":
            o = jnp.einsum("bhqk,bkhe->bqhe", jax.nn.softmax(sc, -1), v)
        else:
            m = pmax(jnp.max(sc, -1, keepdims=True), "sp")
            e = jnp.exp(sc - m)
            o = psum(jnp.einsum("bhqk,bkhe->bqhe", e, v), "sp") / \
                jnp.swapaxes(psum(e.sum(-1), "sp"), 1, 2)[..., None]
        y = jnp.einsum("bqhe,hed->bqd", o, wo)
        return lat + (psum(y, ("sp", "tp")) if bug == "out-psum-over-both" else psum(y, "tp"))
    return f


C.smap("s.latent_xattn_images_sp_heads_tp.sp2xtp4", {"sp": 2, "tp": 4}, latent_xattn_2d,
       (P(None, "sp"), P(), P(None, "tp"), P(None, "tp"), P(None, "tp"), P("tp")), P(), latent_xattn,
       (R(B19, NI19, D19), R(NQ19, D19), R(D19, H19, E19, scale=0.4), R(D19, H19, E19, scale=0.4),
        R(D19, H19, E19, scale=0.4), R(H19, E19, D19, scale=0.3)),
       bugs=[("softmax-local-shard", ["missing-all-reduce"]), ("out-psum-over-both", ["wrong-axis"])])

# ---------------------------------------------------------------------------
# 20. the MLP projector of 2. the Megatron way with the output bias added
#     by tp rank 0 only, inside the psum (dp2 x tp4). Bugs: the bias added
#     by every rank, the bias added by rank 0 of dp instead of tp.


def projector_rank0_bias(bug):
    def f(img, w1, b1, w2, b2, txt):
        h = jax.nn.gelu(jnp.dot(img, w1) + b1)
        who = idx("dp") if bug == "bias-rank-from-dp" else idx("tp")
        bias = b2 if bug == "bias-on-every-rank" else jnp.where(who == 0, b2, jnp.zeros_like(b2))
        y = psum(jnp.dot(h, w2) + bias, "tp")
        return jnp.concatenate([y, txt], axis=1)
    return f


C.smap("s.mlp_projector_bias_rank0_in_psum.dp2xtp4", {"dp": 2, "tp": 4}, projector_rank0_bias,
       (P("dp"), P(None, "tp"), P("tp"), P("tp"), P(), P("dp")), P("dp"), projector,
       (R(B2, NP2, DV2), R(DV2, F2, scale=0.4), R(F2, scale=0.1), R(F2, D2, scale=0.3), R(D2, scale=0.5),
        R(B2, T2, D2)),
       bugs=[("bias-on-every-rank", ["wrong-reduction"]), ("bias-rank-from-dp", ["wrong-axis"])])

# ---------------------------------------------------------------------------
# 21. the latent cross-attention of 19. with the softmax normalised by the
#     psum'd denominator before the output projection, so that one psum
#     over (sp, tp) sums both the image shards' numerators and the heads.
#     Bugs: the denominator left local, the fused psum over tp only.


def latent_xattn_fused(bug):
    def f(feats, lat, wq, wk, wv, wo):
        q = jnp.einsum("qd,dhe->qhe", lat, wq) / np.sqrt(E19)
        k, v = (jnp.einsum("btd,dhe->bthe", feats, w) for w in (wk, wv))
        sc = jnp.einsum("qhe,bkhe->bhqk", q, k)
        m = pmax(jnp.max(sc, -1, keepdims=True), "sp")
        e = jnp.exp(sc - m)
        den = e.sum(-1, keepdims=True)
        if bug != "denominator-local":
            den = psum(den, "sp")
        y = jnp.einsum("bqhe,hed->bqd", jnp.einsum("bhqk,bkhe->bqhe", e / den, v), wo)
        return lat + psum(y, "tp" if bug == "fused-psum-tp-only" else ("sp", "tp"))
    return f


C.smap("s.latent_xattn_fused_psum_sp_tp.sp2xtp4", {"sp": 2, "tp": 4}, latent_xattn_fused,
       (P(None, "sp"), P(), P(None, "tp"), P(None, "tp"), P(None, "tp"), P("tp")), P(), latent_xattn,
       (R(B19, NI19, D19), R(NQ19, D19), R(D19, H19, E19, scale=0.4), R(D19, H19, E19, scale=0.4),
        R(D19, H19, E19, scale=0.4), R(H19, E19, D19, scale=0.3)),
       bugs=[("denominator-local", ["missing-all-reduce"]), ("fused-psum-tp-only", ["wrong-axis"])])

# ---------------------------------------------------------------------------
# 22. the contrastive part of 5. written with the positive logit computed
#     locally (row-wise dot of the device's own pairs) and log-sum-exps over
#     the all_gather'd embeddings, the mean as psum / global batch.
#     Bugs: the log-sum-exp over the local batch only, the mean over the
#     local batch (psum / local batch).


def clip_loss(ie, te, t):
    a, b = l2n(ie), l2n(te)
    lg = a @ b.T * jnp.exp(t)
    lab = jnp.arange(a.shape[0])
    return 0.5 * (optax.softmax_cross_entropy_with_integer_labels(lg, lab).mean()
                  + optax.softmax_cross_entropy_with_integer_labels(lg.T, lab).mean())


def clip_loss_pos(bug):
    def f(ie, te, t):
        a, b = l2n(ie), l2n(te)
        bl, s = a.shape[0], jnp.exp(t)
        if bug == "lse-local-batch":
            aa, bb = a, b
        else:
            aa, bb = (lax.all_gather(x, "dp", tiled=True) for x in (a, b))
        pos = jnp.sum(a * b, -1) * s
        li = jax.nn.logsumexp(a @ bb.T * s, -1) - pos
        lt = jax.nn.logsumexp(b @ aa.T * s, -1) - pos
        tot = psum(jnp.sum(li + lt), "dp")
        return 0.5 * tot / (bl if bug == "mean-over-local-batch" else bl * 4)
    return f


C.smap("s.clip_loss_local_positive_logit.dp4", {"dp": 4}, clip_loss_pos, (P("dp"), P("dp"), P()), P(), clip_loss,
       (R(B5, D5), R(B5, D5), np.float32(np.log(5.0))),
       bugs=[("lse-local-batch", ["missing-collective"]), ("mean-over-local-batch", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 23. the splice of 14. written as a scatter into a full-length zero buffer
#     by every device for its own image tokens (their global patch index
#     from axis_index), psum over sp, then the device's text block sliced
#     out (dynamic_slice) and merged with a splice mask.
#     Bugs: the patch index without the device offset, the block sliced at
#     the next device's offset.


def splice_scatter_psum(bug):
    def f(txt, img, w, off):
        tl, npl = txt.shape[1], img.shape[1]
        me = idx("sp")
        off = jnp.clip(jnp.where(off < 0, off + 4 * tl, off), 0, 4 * tl - NP14)  # as dynamic_update_slice
        it = jnp.einsum("bpv,vd->bpd", img.astype(jnp.bfloat16), w.astype(jnp.bfloat16)).astype(jnp.float32)
        pidx = jnp.arange(npl) + (0 if bug == "patch-index-local" else me * npl)
        dest = off[:, None] + pidx[None, :]  # (b, npl) global positions
        buf = jnp.zeros((txt.shape[0], 4 * tl, txt.shape[2]), jnp.float32)
        buf = jax.vmap(lambda bb, d, x: bb.at[d].set(x))(buf, dest, it)
        buf = psum(buf, "sp")
        start = ((me + 1) % 4 if bug == "block-of-next-device" else me) * tl
        blk = lax.dynamic_slice_in_dim(buf, start, tl, 1)
        g = start + jnp.arange(tl)
        inside = (g[None, :] >= off[:, None]) & (g[None, :] < off[:, None] + NP14)
        return jnp.where(inside[..., None], blk, txt)
    return f


C.smap("s.llava_splice_scatter_psum_slice.sp4", {"sp": 4}, splice_scatter_psum,
       (P(None, "sp"), P(None, "sp"), P(), P()), P(None, "sp"), splice_bf16, ARGS14,
       bugs=[("patch-index-local", ["wrong-offset"]), ("block-of-next-device", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 24. the modality experts of 8. with tokens replicated over ep and the
#     expert outputs reduce-scattered over ep (psum_scatter) onto a
#     (dp, ep)-sharded token axis. Bugs: experts taken in reverse ep order
#     (device e runs expert e's weights on modality 3 - e), psum then the
#     ep-th block taken by dynamic_slice at the dp index.


def modality_experts_rs(bug):
    def f(x, mod, w1, w2):
        y = jax.nn.silu(x @ w1[0]) @ w2[0]
        e = 3 - idx("ep") if bug == "expert-order-reversed" else idx("ep")
        y = jnp.where((mod == e)[:, None], y, 0.0)
        if bug == "slice-at-dp-index":
            n = y.shape[0] // 4
            return lax.dynamic_slice_in_dim(psum(y, "ep"), idx("dp") * n, n, 0)
        return lax.psum_scatter(y, "ep", scatter_dimension=0, tiled=True)
    return f


C.smap("s.modality_experts_psum_scatter.dp2xep4", {"dp": 2, "ep": 4}, modality_experts_rs,
       (P("dp"), P("dp"), P("ep"), P("ep")), P(("dp", "ep")), modality_experts,
       (R(N8, D8), MODS8, R(4, D8, F8, scale=0.4), R(4, F8, D8, scale=0.4)),
       bugs=[("expert-order-reversed", ["wrong-permutation"]), ("slice-at-dp-index", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 25. the MLP projector of 2. in bf16 end to end (weights, activations and
#     the psum over tp in bf16, as a bf16 model is run), output bias after
#     the psum; tp4 x dp2. Bugs: psum over dp, the output cast to bf16 only
#     after a float32 psum of the float32-upcast partials with the bias
#     inside it.
def projector_bf16(img, w1, b1, w2, b2):
    bf = jnp.bfloat16
    h = jax.nn.gelu(jnp.dot(img.astype(bf), w1.astype(bf)) + b1.astype(bf))
    return jnp.dot(h, w2.astype(bf)) + b2.astype(bf)


def projector_bf16_tp(bug):
    def f(img, w1, b1, w2, b2):
        bf = jnp.bfloat16
        h = jax.nn.gelu(jnp.dot(img.astype(bf), w1.astype(bf)) + b1.astype(bf))
        y = jnp.dot(h, w2.astype(bf))
        if bug == "bias-inside-f32-psum":
            return psum(y.astype(jnp.float32) + b2, "tp").astype(bf)
        return psum(y, "dp" if bug == "psum-over-dp" else "tp") + b2.astype(bf)
    return f


ARGS25 = (R(B2, NP2, DV2), R(DV2, F2, scale=0.4), R(F2, scale=0.1), R(F2, D2, scale=0.3), R(D2, scale=0.5))
C.smap("s.mlp_projector_bf16_psum.dp2xtp4", {"dp": 2, "tp": 4}, projector_bf16_tp,
       (P("dp"), P(None, "tp"), P("tp"), P("tp"), P()), P("dp"), projector_bf16, ARGS25,
       bugs=[("psum-over-dp", ["wrong-axis"]), ("bias-inside-f32-psum", ["wrong-reduction"])])

# ---------------------------------------------------------------------------
# 26. the M-RoPE of 9. with row and column from lax.div / lax.rem on the
#     clamped in-image index (truncating integer ops, safe because clamped
#     at 0), the sections' positions picked with a one-hot matmul instead
#     of indexing. Bugs: the clamp dropped with the offset subtracted after
#     the division (j = t // GW - off // GW), row from lax.rem.


def mrope_sp_lax(bug):
    def f(x, off):
        tl = x.shape[1]
        t = idx("sp") * tl + jnp.arange(tl)
        j = t[None, :] - off[:, None]
        jc = jnp.maximum(j, 0)
        if bug == "divide-before-offset":
            row = lax.div(t[None, :], GW) - lax.div(off[:, None], GW)
        elif bug == "row-from-rem":
            row = lax.rem(jc, GW)
        else:
            row = lax.div(jc, GW)
        col = lax.rem(jc, GW)
        img = (j >= 0) & (j < GH * GW)
        txt = jnp.where(j >= GH * GW, off[:, None] + max(GH, GW) + (j - GH * GW), t[None, :])
        pos = jnp.stack([jnp.where(img, off[:, None], txt), jnp.where(img, off[:, None] + row, txt),
                         jnp.where(img, off[:, None] + col, txt)], -1).astype(jnp.float32)  # (b, tl, 3)
        sel = jax.nn.one_hot(np.repeat(np.arange(3), SECT), 3, dtype=jnp.float32)  # (nf, 3)
        ang = jnp.einsum("btc,fc->btf", pos, sel) * INV9
        c, s_ = jnp.cos(ang)[:, :, None], jnp.sin(ang)[:, :, None]
        x1, x2 = x[..., :E9 // 2], x[..., E9 // 2:]
        return jnp.concatenate([x1 * c - x2 * s_, x2 * c + x1 * s_], -1)
    return f


C.smap("s.mrope_lax_div_rem_onehot_sections.sp4", {"sp": 4}, mrope_sp_lax, (P(None, "sp"), P()), P(None, "sp"),
       mrope, (R(B9, T9, H9, E9), OFF9),
       bugs=[("divide-before-offset", ["wrong-offset"]), ("row-from-rem", ["wrong-permutation"])])

# ---------------------------------------------------------------------------
# 27. vision tower and language model on two pipeline stages (pp2): stage 0
#     embeds the patches and projects them, hands the image tokens to stage
#     1 by ppermute; stage 1 prepends them to its text embeddings and runs
#     one causal attention layer; the result is broadcast from stage 1 by a
#     masked psum. Bugs: ppermute 1 -> 0 (stage 1 gets zeros), result taken
#     from stage 0 (mask on pp == 0).


def vlm_two_stage(patches, txt, wp, wproj, wq, wk, wv):
    it = jax.nn.gelu(patches @ wp) @ wproj
    x = jnp.concatenate([it, txt], 1)
    S = x.shape[1]
    q, k, v = (jnp.einsum("btd,dhe->bthe", layernorm(x), w) for w in (wq, wk, wv))
    o = mha(q, k, v, jnp.tril(jnp.ones((S, S), bool)))
    return x + o.reshape(x.shape)


def vlm_two_stage_pp(bug):
    def f(patches, txt, wp, wproj, wq, wk, wv):
        st = idx("pp")
        it = jax.nn.gelu(patches @ wp) @ wproj  # meaningful on stage 0
        it = lax.ppermute(it, "pp", [(1, 0)] if bug == "send-backwards" else [(0, 1)])
        x = jnp.concatenate([it, txt], 1)
        S = x.shape[1]
        q, k, v = (jnp.einsum("btd,dhe->bthe", layernorm(x), w) for w in (wq, wk, wv))
        y = x + mha(q, k, v, jnp.tril(jnp.ones((S, S), bool))).reshape(x.shape)
        mine = st == (0 if bug == "result-from-stage-0" else 1)
        return psum(jnp.where(mine, y, 0.0), "pp")
    return f


C.smap("s.vision_lm_two_stage_pipeline.pp2", {"pp": 2}, vlm_two_stage_pp, (P(),) * 7, P(), vlm_two_stage,
       (R(2, 4, 12), R(2, 6, 8), R(12, 16, scale=0.3), R(16, 8, scale=0.3), R(8, 2, 4, scale=0.4),
        R(8, 2, 4, scale=0.4), R(8, 2, 4, scale=0.4)),
       bugs=[("send-backwards", ["wrong-permutation"]), ("result-from-stage-0", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 28. the projector of 2. with the output bias split evenly over the tp
#     ranks (b2 / tp added by every rank inside the psum). Bugs: b2 / 2,
#     b2 / dp-size taken from the wrong axis (psum'd over both axes).


def projector_bias_split(bug):
    def f(img, w1, b1, w2, b2, txt):
        h = jax.nn.gelu(jnp.dot(img, w1) + b1)
        share = b2 / (2.0 if bug == "bias-halved" else 4.0)
        y = jnp.dot(h, w2) + share
        y = psum(y, ("dp", "tp")) / 2.0 if bug == "psum-both-axes-halved" else psum(y, "tp")
        return jnp.concatenate([y, txt], axis=1)
    return f


C.smap("s.mlp_projector_bias_split_over_tp.dp2xtp4", {"dp": 2, "tp": 4}, projector_bias_split,
       (P("dp"), P(None, "tp"), P("tp"), P("tp"), P(), P("dp")), P("dp"), projector,
       (R(B2, NP2, DV2), R(DV2, F2, scale=0.4), R(F2, scale=0.1), R(F2, D2, scale=0.3), R(D2, scale=0.5),
        R(B2, T2, D2)),
       bugs=[("bias-halved", ["wrong-scale"]), ("psum-both-axes-halved", ["wrong-axis"])])

# ---------------------------------------------------------------------------
# 29. the cross-attention of 21. with two psums, over tp first and then
#     over sp. Bugs: the second psum over tp again, the first psum dropped
#     (psum over sp only).


def latent_xattn_two_psums(bug):
    def f(feats, lat, wq, wk, wv, wo):
        q = jnp.einsum("qd,dhe->qhe", lat, wq) / np.sqrt(E19)
        k, v = (jnp.einsum("btd,dhe->bthe", feats, w) for w in (wk, wv))
        sc = jnp.einsum("qhe,bkhe->bhqk", q, k)
        e = jnp.exp(sc - pmax(jnp.max(sc, -1, keepdims=True), "sp"))
        y = jnp.einsum("bqhe,hed->bqd", jnp.einsum("bhqk,bkhe->bqhe", e / psum(e.sum(-1, keepdims=True), "sp"), v), wo)
        if bug != "tp-psum-dropped":
            y = psum(y, "tp")
        return lat + psum(y, "tp" if bug == "second-psum-tp-again" else "sp")
    return f


C.smap("s.latent_xattn_two_psums_tp_then_sp.sp2xtp4", {"sp": 2, "tp": 4}, latent_xattn_two_psums,
       (P(None, "sp"), P(), P(None, "tp"), P(None, "tp"), P(None, "tp"), P("tp")), P(), latent_xattn,
       (R(B19, NI19, D19), R(NQ19, D19), R(D19, H19, E19, scale=0.4), R(D19, H19, E19, scale=0.4),
        R(D19, H19, E19, scale=0.4), R(H19, E19, D19, scale=0.3)),
       bugs=[("second-psum-tp-again", ["wrong-axis"]), ("tp-psum-dropped", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 30. captioning losses on dp4: a masked token mean written as a ratio of
#     pmeans (pmean(sum) / pmean(count)), plus a plain token mean as a psum
#     over a psum'd constant count. Bugs: pmean numerator over psum
#     denominator, the plain mean over the local count.


def caption_losses(cl, ct, cm):
    ce = optax.softmax_cross_entropy_with_integer_labels(cl, ct)
    return jnp.sum(ce * cm) / jnp.sum(cm) + 0.5 * jnp.mean(ce)


def caption_losses_dp(bug):
    def f(cl, ct, cm):
        ce = optax.softmax_cross_entropy_with_integer_labels(cl, ct)
        num = pmean(jnp.sum(ce * cm), "dp")
        den = psum(jnp.sum(cm), "dp") if bug == "pmean-over-psum" else pmean(jnp.sum(cm), "dp")
        cnt = jnp.float32(ce.size)
        if bug != "plain-mean-local-count":
            cnt = psum(cnt, "dp")
        return num / den + 0.5 * psum(jnp.sum(ce), "dp") / cnt
    return f


C.smap("s.caption_loss_ratio_of_pmeans.dp4", {"dp": 4}, caption_losses_dp, (P("dp"), P("dp"), P("dp")), P(),
       caption_losses, (R(B5, L5, V5), I(0, V5, B5, L5), CM5),
       bugs=[("pmean-over-psum", ["wrong-scale"]), ("plain-mean-local-count", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 31. the SigLIP loss of 11. with a bidirectional ring (dp4): the local
#     block, the left and right neighbours' text blocks, and the block at
#     distance 2 (forwarded once more from the left), unrolled. Bugs: the
#     distance-2 block fetched from both sides (counted twice), the right
#     neighbour's block labelled positive.


def siglip_bidir(bug):
    def f(ie, te, t, b):
        n = 4
        a, tx = l2n(ie), l2n(te)
        eye = jnp.eye(a.shape[0])
        right = [(i, (i + 1) % n) for i in range(n)]
        left = [(i, (i - 1) % n) for i in range(n)]

        def part(blk, pos):
            lg = a @ blk.T * jnp.exp(t) + b
            return -jnp.sum(jax.nn.log_sigmoid((2.0 * pos - 1.0) * lg))
        from_l = lax.ppermute(tx, "dp", right)
        from_r = lax.ppermute(tx, "dp", left)
        d2 = lax.ppermute(from_l, "dp", right)
        tot = part(tx, eye) + part(from_l, 0.0) + part(from_r, eye if bug == "right-block-positive" else 0.0) + \
            part(d2, 0.0)
        if bug == "distance-2-twice":
            tot = tot + part(lax.ppermute(from_r, "dp", left), 0.0)
        return psum(tot, "dp") / (n * a.shape[0])
    return f


C.smap("s.siglip_bidirectional_ring_unrolled.dp4", {"dp": 4}, siglip_bidir, (P("dp"), P("dp"), P(), P()), P(),
       siglip, ARGS11, bugs=[("distance-2-twice", ["wrong-permutation"]), ("right-block-positive", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 32. two stacked Perceiver cross-attention layers (latents only as
#     queries, a GELU MLP after each) run by lax.scan over the stacked
#     weights with jax.checkpoint on the layer, image tokens over sp4, the
#     softmax merged by pmax / psum. Bugs: the local maximum (no pmax), the
#     scan over the weights reversed (reverse=True).
NL32 = 2


def perceiver_layer(lat, w, attend):
    q = jnp.einsum("bqd,dhe->bqhe", layernorm(lat), w["q"]) / np.sqrt(E3)
    o = attend(q, w)
    lat = lat + jnp.einsum("bqhe,hed->bqd", o, w["o"])
    return lat + jax.nn.gelu(layernorm(lat) @ w["f1"]) @ w["f2"]


def perceiver_stack(feats, lat0, ws):
    def attend(q, w):
        k, v = (jnp.einsum("btd,dhe->bthe", layernorm(feats), w[n]) for n in ("k", "v"))
        return jnp.einsum("bhqk,bkhe->bqhe", jax.nn.softmax(jnp.einsum("bqhe,bkhe->bhqk", q, k), -1), v)
    lat = jnp.broadcast_to(lat0, (feats.shape[0],) + lat0.shape)
    lat, _ = lax.scan(lambda c, w: (jax.checkpoint(lambda c, w: perceiver_layer(c, w, attend))(c, w), None), lat, ws)
    return lat


def perceiver_stack_sp(bug):
    def f(feats, lat0, ws):
        def attend(q, w):
            k, v = (jnp.einsum("btd,dhe->bthe", layernorm(feats), w[n]) for n in ("k", "v"))
            sc = jnp.einsum("bqhe,bkhe->bhqk", q, k)
            m = jnp.max(sc, -1, keepdims=True)
            if bug != "local-max":
                m = pmax(m, "sp")
            e = jnp.exp(sc - m)
            num = psum(jnp.einsum("bhqk,bkhe->bqhe", e, v), "sp")
            return num / jnp.swapaxes(psum(e.sum(-1), "sp"), 1, 2)[..., None]
        lat = jnp.broadcast_to(lat0, (feats.shape[0],) + lat0.shape)
        lat, _ = lax.scan(lambda c, w: (jax.checkpoint(lambda c, w: perceiver_layer(c, w, attend))(c, w), None),
                          lat, ws, reverse=bug == "layers-reversed")
        return lat
    return f


WS32 = {"q": R(NL32, D3, H3, E3, scale=0.4), "k": R(NL32, D3, H3, E3, scale=0.4), "v": R(NL32, D3, H3, E3, scale=0.4),
        "o": R(NL32, H3, E3, D3, scale=0.3), "f1": R(NL32, D3, 24, scale=0.3), "f2": R(NL32, 24, D3, scale=0.3)}
ARGS32 = (R(B3, NI3, D3), R(NQ3, D3), WS32)
C.smap("s.perceiver_scan_remat_two_layers.sp4", {"sp": 4}, perceiver_stack_sp, (P(None, "sp"), P(), P()), P(),
       perceiver_stack, ARGS32, bugs=[("local-max", ["missing-all-reduce"]), ("layers-reversed", ["wrong-order"])])

# ---------------------------------------------------------------------------
# 33. Flamingo-style "attend to the most recent image only": 4 images per
#     sample with the image axis over sp4, replicated text tokens each
#     attending only to the image given by an input image id; the softmax
#     over the local image's tokens is the whole softmax, tokens of other
#     devices' images are zeroed and the outputs psum'd. Bugs: the local
#     image index taken without the device offset, the psum dropped.
B33, T33, NIMG, NT33, D33, H33, E33 = 2, 8, 4, 3, 8, 2, 4


def recent_image_xattn(x, imgs, img_id, wq, wk, wv):
    q = jnp.einsum("btd,dhe->bthe", x, wq)
    k, v = (jnp.einsum("bind,dhe->binhe", imgs, w) for w in (wk, wv))
    ks = jnp.take_along_axis(k, img_id[:, :, None, None, None], axis=1)  # (b, t, n, h, e)
    vs = jnp.take_along_axis(v, img_id[:, :, None, None, None], axis=1)
    sc = jnp.einsum("bthe,btnhe->bthn", q, ks) / np.sqrt(E33)
    return jnp.einsum("bthn,btnhe->bthe", jax.nn.softmax(sc, -1), vs)


def recent_image_xattn_sp(bug):
    def f(x, imgs, img_id, wq, wk, wv):
        q = jnp.einsum("btd,dhe->bthe", x, wq)
        kl, vl = (jnp.einsum("bnd,dhe->bnhe", imgs[:, 0], w) for w in (wk, wv))  # this device's image
        me = 0 if bug == "image-index-local" else idx("sp")
        sc = jnp.einsum("bthe,bnhe->bthn", q, kl) / np.sqrt(E33)
        o = jnp.einsum("bthn,bnhe->bthe", jax.nn.softmax(sc, -1), vl)
        o = jnp.where((img_id == me)[..., None, None], o, 0.0)
        return o if bug == "no-psum" else psum(o, "sp")
    return f


ID33 = np.array([[0, 0, 1, 1, 1, 2, 3, 3], [0, 1, 1, 2, 2, 2, 3, 3]], np.int32)
C.smap("s.recent_image_only_xattn_images_sp.sp4", {"sp": 4}, recent_image_xattn_sp,
       (P(), P(None, "sp"), P(), P(), P(), P()), P(), recent_image_xattn,
       (R(B33, T33, D33), R(B33, NIMG, NT33, D33), ID33, R(D33, H33, E33, scale=0.5), R(D33, H33, E33, scale=0.5),
        R(D33, H33, E33, scale=0.5)),
       bugs=[("image-index-local", ["wrong-offset"]), ("no-psum", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 34. contrastive loss with in-group negatives by design (the batch split
#     into 4 groups of 2, as when negatives are meant to be same-source):
#     the baseline reshapes into groups; on dp4 each device's batch is its
#     group, so the local logits are the whole story; pmean of group means.
#     Bugs: negatives from the all_gather'd batch (labels offset), a psum of
#     the group means.


def group_contrastive(ie, te, t):
    a, b = l2n(ie).reshape(4, -1, ie.shape[-1]), l2n(te).reshape(4, -1, te.shape[-1])
    lg = jnp.einsum("gid,gjd->gij", a, b) * jnp.exp(t)
    lab = jnp.broadcast_to(jnp.arange(a.shape[1]), a.shape[:2])
    return jnp.mean(optax.softmax_cross_entropy_with_integer_labels(lg, lab))


def group_contrastive_dp(bug):
    def f(ie, te, t):
        a, b = l2n(ie), l2n(te)
        if bug == "global-negatives":
            bb = lax.all_gather(b, "dp", tiled=True)
            lab = idx("dp") * a.shape[0] + jnp.arange(a.shape[0])
        else:
            bb, lab = b, jnp.arange(a.shape[0])
        l = jnp.mean(optax.softmax_cross_entropy_with_integer_labels(a @ bb.T * jnp.exp(t), lab))
        return psum(l, "dp") if bug == "psum-of-group-means" else pmean(l, "dp")
    return f


C.smap("s.group_contrastive_local_negatives.dp4", {"dp": 4}, group_contrastive_dp, (P("dp"), P("dp"), P()), P(),
       group_contrastive, (R(B5, D5), R(B5, D5), np.float32(np.log(5.0))),
       bugs=[("global-negatives", ["wrong-collective"]), ("psum-of-group-means", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 35. video-text interleave: 4 frames, each a block of 4 tokens whose first
#     2 are that frame's patch tokens (projected), the rest text; one frame
#     per device (sp4), so the splice positions are local by design.
#     Bugs: the frame taken from the left neighbour (ppermute), the patch
#     tokens placed at the block's end.


def video_interleave(txt, frames, w):
    b, T, d = txt.shape
    it = jnp.einsum("bfpv,vd->bfpd", frames, w)  # (b, F, 2, d)
    blocks = txt.reshape(b, frames.shape[1], -1, d)
    return jnp.concatenate([it, blocks[:, :, 2:]], 2).reshape(b, T, d)


def video_interleave_sp(bug):
    def f(txt, frames, w):
        fr = frames[:, 0]
        if bug == "frame-from-left-neighbour":
            fr = lax.ppermute(fr, "sp", [(i, (i + 1) % 4) for i in range(4)])
        it = jnp.einsum("bpv,vd->bpd", fr, w)
        if bug == "patches-at-block-end":
            return jnp.concatenate([txt[:, :2], it], 1)
        return jnp.concatenate([it, txt[:, 2:]], 1)
    return f


C.smap("s.video_frames_local_splice.sp4", {"sp": 4}, video_interleave_sp, (P(None, "sp"), P(None, "sp"), P()),
       P(None, "sp"), video_interleave, (R(2, 16, 8), R(2, 4, 2, 6), R(6, 8, scale=0.4)),
       bugs=[("frame-from-left-neighbour", ["wrong-permutation"]), ("patches-at-block-end", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 36. CoCa on a 2-D dp2 x sp4 mesh: batch over dp, the text sequence over
#     sp; the text embedding is the mean over the whole sequence (the local
#     token sums psum'd over sp), the image embedding a mean over patches
#     (replicated over sp); contrastive over the all_gather'd dp batch; a
#     captioning term from the text tokens conditioned on the image
#     embedding, its token mean psum'd over sp and pmean'd over dp.
#     Bugs: text mean-pooled over the local block only, the captioning sum
#     divided by the local sequence length.
B36, T36, NP36, D36, V36 = 4, 8, 4, 8, 12


def coca_2d(patches, txt, tgt, wi, wout, t):
    ie = jnp.mean(patches, 1) @ wi
    te = jnp.mean(txt, 1)
    a, b = l2n(ie), l2n(te)
    lg = a @ b.T * jnp.exp(t)
    lab = jnp.arange(a.shape[0])
    con = 0.5 * (optax.softmax_cross_entropy_with_integer_labels(lg, lab).mean()
                 + optax.softmax_cross_entropy_with_integer_labels(lg.T, lab).mean())
    cap = optax.softmax_cross_entropy_with_integer_labels((txt + ie[:, None]) @ wout, tgt).mean()
    return con + cap


def coca_2d_sm(bug):
    def f(patches, txt, tgt, wi, wout, t):
        tl = txt.shape[1]
        ie = jnp.mean(patches, 1) @ wi
        te = jnp.mean(txt, 1) if bug == "text-pooled-locally" else psum(jnp.sum(txt, 1), "sp") / (4 * tl)
        a, b = l2n(ie), l2n(te)
        aa, bb = (lax.all_gather(x, "dp", tiled=True) for x in (a, b))
        lab = idx("dp") * a.shape[0] + jnp.arange(a.shape[0])
        con = 0.5 * (optax.softmax_cross_entropy_with_integer_labels(a @ bb.T * jnp.exp(t), lab).mean()
                     + optax.softmax_cross_entropy_with_integer_labels(b @ aa.T * jnp.exp(t), lab).mean())
        ce = optax.softmax_cross_entropy_with_integer_labels((txt + ie[:, None]) @ wout, tgt)
        n = tl if bug == "caption-over-local-length" else 4 * tl
        cap = psum(jnp.sum(ce, 1), "sp") / n
        return pmean(con + jnp.mean(cap), "dp")
    return f


ARGS36 = (R(B36, NP36, D36), R(B36, T36, D36), I(0, V36, B36, T36), R(D36, D36, scale=0.4), R(D36, V36, scale=0.4),
          np.float32(np.log(5.0)))
C.smap("s.coca_text_sp_batch_dp.dp2xsp4", {"dp": 2, "sp": 4}, coca_2d_sm,
       (P("dp"), P("dp", "sp"), P("dp", "sp"), P(), P(), P()), P(), coca_2d, ARGS36,
       bugs=[("text-pooled-locally", ["missing-all-reduce"]), ("caption-over-local-length", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# GSPMD pairs.
C.gspmd("g.llava_splice_projector.sp4", {"sp": 4}, (P(None, "sp"), P(), P(), P()), P(None, "sp"), splice, ARGS1)
C.gspmd("g.perceiver_resampler_image_tokens.sp4", {"sp": 4}, (P(None, "sp"), P(), P(), P(), P(), P()), P(),
        resampler, ARGS3)
C.gspmd("g.coca_loss_grad.dp4", {"dp": 4}, (P("dp"), P("dp"), P(), P("dp"), P("dp"), P("dp")),
        (P(), (P("dp"), P("dp"), P())),
        lambda *a: jax.value_and_grad(coca, (0, 1, 2))(*a), ARGS5)
OPT14 = optax.adamw(1e-2, weight_decay=0.05)
S14 = OPT14.init(P10)
SS14 = state_specs(S14, SPEC10)


def step14(p, s, patches, tok):
    l, g = jax.value_and_grad(vlm_loss)(p, patches, tok)
    u, s = OPT14.update(g, s, p)
    return optax.apply_updates(p, u), s, l


C.gspmd("g.vlm_train_step_adamw.dp2xtp4", {"dp": 2, "tp": 4}, (SPEC10, SS14, P("dp"), P("dp")),
        (SPEC10, SS14, P()), step14, (P10, S14, ARGS10[2], ARGS10[3]))
C.gspmd("g.mrope_3d_positions.sp4", {"sp": 4}, (P(None, "sp"), P()), P(None, "sp"), mrope,
        (R(B9, T9, H9, E9), OFF9))
C.gspmd("g.modality_experts.dp2xep4", {"dp": 2, "ep": 4}, (P("dp"), P("dp"), P("ep"), P("ep")), P("dp"),
        modality_experts, (R(N8, D8), MODS8, R(4, D8, F8, scale=0.4), R(4, F8, D8, scale=0.4)))
C.gspmd("g.siglip_sigmoid_loss_grad.dp4", {"dp": 4}, (P("dp"), P("dp"), P(), P()), (P(), (P("dp"), P("dp"), P(), P())),
        lambda *a: jax.value_and_grad(siglip, (0, 1, 2, 3))(*a), ARGS11)
C.gspmd("g.vit_sincos2d_patch_merger.sp4", {"sp": 4}, (P(None, "sp"), P(), P()), P(None, "sp"), vit_merge, ARGS12)
C.gspmd("g.interleaved_modality_attention.sp4", {"sp": 4}, (P(None, "sp"), P(None, "sp"), P(), P(), P(), P()),
        P(None, "sp"), interleaved,
        (R(B7, T7, D7), MOD7, R(D7, D7, scale=0.5), R(D7, D7, scale=0.5), R(D7, H7, E7, scale=0.5),
         R(D7, H7, E7, scale=0.5)))
C.gspmd("g.gated_xattn.sp2xtp4", {"sp": 2, "tp": 4},
        (P(None, "sp"), P(), P(), P(None, "tp"), P(None, "tp"), P(None, "tp"), P("tp"), P()), P(None, "sp"),
        gated_xattn,
        (R(B6, T6, D6), R(B6, NI6, D6), IM6, R(D6, H6, E6, scale=0.4), R(D6, H6, E6, scale=0.4),
         R(D6, H6, E6, scale=0.4), R(H6, E6, D6, scale=0.3), np.float32(0.7)))
C.gspmd("g.coca_train_step_sgd.dp4", {"dp": 4}, (SPEC18, SS18, P("dp"), P("dp")), (SPEC18, SS18, P()), step18, ARGS18)
C.gspmd("g.latent_xattn.sp2xtp4", {"sp": 2, "tp": 4},
        (P(None, "sp"), P(), P(None, "tp"), P(None, "tp"), P(None, "tp"), P("tp")), P(), latent_xattn,
        (R(B19, NI19, D19), R(NQ19, D19), R(D19, H19, E19, scale=0.4), R(D19, H19, E19, scale=0.4),
         R(D19, H19, E19, scale=0.4), R(H19, E19, D19, scale=0.3)))
C.gspmd("g.mlp_projector_bf16_rowparallel.dp2xtp4", {"dp": 2, "tp": 4}, (P("dp"), P(None, "tp"), P("tp"), P("tp"), P()),
        P("dp"), projector_bf16, ARGS25)
C.gspmd("g.perceiver_scan_remat.sp4", {"sp": 4}, (P(None, "sp"), P(), P()), P(), perceiver_stack, ARGS32)
M33 = make_mesh({"dp": 2, "sp": 4})


def splice_constrained(txt, img, w, off):
    it = jnp.einsum("bpv,vd->bpd", img, w)
    it = lax.with_sharding_constraint(it, NamedSharding(M33, P("dp", None, "sp")))  # features over sp
    pos = jnp.arange(txt.shape[1])[None, :] - off[:, None]
    picked = jnp.take_along_axis(it, jnp.clip(pos, 0, it.shape[1] - 1)[..., None], axis=1)
    out = jnp.where(((pos >= 0) & (pos < it.shape[1]))[..., None], picked, txt)
    return lax.with_sharding_constraint(out, NamedSharding(M33, P("dp", "sp")))


C.gspmd("g.llava_splice_take_constrained.dp2xsp4", {"dp": 2, "sp": 4}, (P("dp", "sp"), P("dp"), P(), P("dp")),
        P("dp", "sp"), splice_constrained,
        (R(4, 16, 16), R(4, 4, 8), R(8, 16, scale=0.4), np.array([0, 5, 12, 3], np.int32)))
C.gspmd("g.coca_text_sp_batch_dp_grad.dp2xsp4", {"dp": 2, "sp": 4},
        (P("dp"), P("dp", "sp"), P("dp", "sp"), P(), P(), P()), (P(), (P(), P(), P())),
        lambda *a: jax.value_and_grad(coca_2d, (3, 4, 5))(*a), ARGS36)
C.finish()
