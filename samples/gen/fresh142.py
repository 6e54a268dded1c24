"""samples/fresh142: a 142nd batch of programs as a user writes them, on the theme of the input and output layers and the losses of training steps as current open-source JAX code writes them: vocab-parallel embedding lookup (Megatron's VocabParallelEmbedding: the table sharded over tp on vocab rows, ids outside the shard masked, psum over tp), vocab-parallel cross-entropy (max pmax'd and sum-exp psum'd across the vocab shards, the target logit picked by a masked index), tied input / output embeddings and their gradient (scatter-add by the backward of take plus the output projection's), label smoothing, z-loss, masked-LM loss over padded batches (mean over the real masked tokens of all dp shards), CLIP's contrastive loss with the features all_gather'd across data-parallel devices (local rows against all columns, labels offset by axis_index), in-batch and hard negatives with logQ correction, per-class weighted loss with an ignore index, and complete training steps (forward, backward, optax adamw / adam / sgd with momentum, clip_by_global_norm) under dp, tp and dp x tp.
Sizes: vocab V=32, width D=16, sequences of T=8 tokens (pad id 0), batches
of 8 to 32; 32 classes in the classifier family; everything tiny.
Optimizer states are warmed by two single-device steps, so the scale of a
gradient reaches the update.
shard_map families (bugs in brackets):
 1. BERT embeddings with a vocab-parallel word table (dp2 x tp4): word rows
    over tp, the ids outside the shard's [start, start + V/tp) masked to
    row 0 and their vectors zeroed, psum over tp, position and token-type
    embeddings added, LayerNorm. [the lookup by take(mode="clip") with the
    out-of-range rows not zeroed; the partial embeddings psum'd over
    (dp, tp), mixing the two batch shards.]
 2. Megatron vocab-parallel cross-entropy of a column-parallel LM head
    (dp2 x tp4): logits [b, T, V/tp], max by pmax, sum of exp by psum,
    the target logit by a masked take_along_axis psum'd over tp; per-token
    losses and the mean over the real tokens of the global batch. [each
    shard's own max (no pmax); the target logit not masked to the shard
    that owns the label, so psum adds four logits.]
 3. BERT masked-LM training step (dp4): attention with a key padding mask,
    tied decoder (the word table transposed) plus an output bias, the loss
    the sum over masked positions divided by the psum of their count (the
    shards hold very different numbers of masked tokens), gradients
    psum'd, chain(clip_by_global_norm, adamw). [each shard's mean over its
    own masked tokens, gradients pmean'd; the optimizer applied to the
    local gradients and the updates pmean'd.]
 4. CLIP training step (dp8): image MLP tower and mean-pooled text tower,
    L2-normalised features all_gather'd over dp (gradient flowing back
    through the gather), local rows against all columns in both directions
    with labels offset by axis_index * b, clamped learnable logit scale,
    gradients psum'd, adam. [labels without the rank offset; the gathered
    features under stop_gradient (only the local rows get a gradient).]
 5. tied-embedding causal LM training step, Megatron style (dp2 x tp4,
    check_vma=False): vocab-parallel lookup with custom_vjp f / g
    operators (copy_to_tp: identity forward, psum backward;
    reduce_from_tp: psum forward, identity backward), one replicated
    transformer block, logits against the local vocab rows, a custom_vjp
    vocab-parallel logsumexp, label smoothing 0.1 and z-loss, the global
    gradient norm for clipping with the table's squares psum'd over tp
    (an optax GradientTransformation, the same norm returned as the
    grad_norm metric), adamw. [optax.clip_by_global_norm and
    optax.global_norm on each device's shard of the table; the logits'
    input without the copy_to_tp operator (its cotangent not psum'd
    over tp).]
 6. dual encoder with in-batch and hard negatives and logQ correction
    (dp8, forward): query / document towers over a shared token table,
    documents and hard negatives concatenated and gathered in one
    all_gather, labels at rank * 2b + i. [only the local hard negatives
    (documents gathered alone); the label offset rank * b, ignoring the
    hard negatives interleaved in the gather.]
 7. classifier training step with per-class weights and ignore_index
    (dp2 x tp4, check_vma=True): class-parallel head, pmax / psum
    logsumexp, the target logit and the class weight picked by masked
    psums over tp, loss = sum w_y * ce / sum w_y over the global batch,
    nesterov SGD. [each dp shard's weighted mean, pmean'd; the shard start
    from the dp rank.]
 8. LM training step with the word table sharded on the model dim
    (dp2 x tp4, check_vma=True): local lookup of D/tp columns, RMSNorm
    with the mean square psum'd over tp, a row-parallel then
    column-parallel MLP, tied logits psum'd over tp, SGD with momentum
    and a warmup-cosine schedule. [RMSNorm from the local columns' mean
    square; the row-parallel bias added before the psum.]
GSPMD pairs (jax.jit with NamedSharding in / out shardings; correct):
 9. tied LM loss (smoothing + z-loss), table on vocab rows (dp2 x tp4);
 10. LM training step, table on the model dim, adamw + clip (dp2 x tp4);
 11. untied LM head returning the logits sharded on vocab and the
     per-token losses (dp2 x tp4);
 12. CLIP training step, batch sharded (dp8), adam;
 13. masked-LM training step, tied table on vocab rows, adamw + clip
     (dp2 x tp4);
 14. dual encoder with hard negatives, batch over dp, table on vocab
     rows (dp2 x tp4).
Numerics: f32 throughout; correct pairs agree at about 1e-6; bug variants
differ clearly.
Run from the repository root: bash samples/gen/run_fresh142.sh [SUBSTR...]
"""
import sys
from functools import partial
import numpy as np
import jax, jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec as P
import optax
sys.path.insert(0, "samples/gen")  # run from the repository root (run_fresh142.sh)
from fresh_lib import Corpus, seeded, state_specs  # noqa: E402

SCRIPT = "samples/gen/fresh142.py"
C = Corpus("samples/fresh142", SCRIPT, "samples/gen/run_fresh142.sh", sys.argv[1:])
rng, R, I = seeded(142142)
psum, pmean, pmax, idx = lax.psum, lax.pmean, lax.pmax, lax.axis_index
f32 = jnp.float32
V, D, T, PAD = 32, 16, 8, 0


# ---------------------------------------------------------------------------
# shared layers and data


def layer_norm(x, g, b, eps=1e-12):
    mu = jnp.mean(x, -1, keepdims=True)
    var = jnp.mean(jnp.square(x - mu), -1, keepdims=True)
    return (x - mu) * lax.rsqrt(var + eps) * g + b


def rms_norm(x, g, eps=1e-6):
    return x * lax.rsqrt(jnp.mean(jnp.square(x), -1, keepdims=True) + eps) * g


def l2_normalize(x, eps=1e-6):
    return x / jnp.sqrt(jnp.sum(jnp.square(x), -1, keepdims=True) + eps)


def padded_ids(b, t, lengths, lo=1):
    """token ids in [lo, V) with everything from lengths[i] on set to PAD."""
    ids = I(lo, V, b, t)
    return np.where(np.arange(t)[None] < np.asarray(lengths)[:, None], ids, PAD).astype(np.int32)


def warm(step, params, state, *data, times=2):
    j = jax.jit(step)
    for _ in range(times):
        params, state, _ = j(params, state, *data)
    return jax.tree.map(np.asarray, params), jax.tree.map(np.asarray, state)


def vocab_shard(ids, vl, start):
    """Megatron's masking: local row of each id and whether this shard owns it."""
    local = ids - start
    own = (local >= 0) & (local < vl)
    return jnp.where(own, local, 0), own


# ---------------------------------------------------------------------------
# 1. BERT embeddings, vocab-parallel word table.
B1 = 8


def bert_embed_ref(ids, tt, word, pos, ttab, g, b):
    x = jnp.take(word, ids, axis=0) + pos[None, : ids.shape[1]] + jnp.take(ttab, tt, axis=0)
    return layer_norm(x, g, b)


def bert_embed_tp(bug):
    def f(ids, tt, word, pos, ttab, g, b):
        vl = word.shape[0]
        start = idx("tp") * vl
        if bug == "no-out-of-range-mask":
            e = jnp.take(word, ids - start, axis=0, mode="clip")
        else:
            local, own = vocab_shard(ids, vl, start)
            e = jnp.where(own[..., None], jnp.take(word, local, axis=0), 0.0)
        e = psum(e, ("dp", "tp")) if bug == "embedding-psum-over-dp-tp" else psum(e, "tp")
        x = e + pos[None, : ids.shape[1]] + jnp.take(ttab, tt, axis=0)
        return layer_norm(x, g, b)
    return f


C.smap("s.bert_vocab_parallel_embedding_mask_psum_layernorm.dp2xtp4", {"dp": 2, "tp": 4}, bert_embed_tp,
       (P("dp"), P("dp"), P("tp"), P(), P(), P(), P()), P("dp"), bert_embed_ref,
       (I(0, V, B1, T), I(0, 2, B1, T), R(V, D), R(T, D, scale=0.5), R(2, D, scale=0.5),
        1.0 + R(D, scale=0.1), R(D, scale=0.1)),
       bugs=[("no-out-of-range-mask", ["missing-mask"]),
             ("embedding-psum-over-dp-tp", ["wrong-collective-group", "wrong-axis"])])

# ---------------------------------------------------------------------------
# 2. Megatron vocab-parallel cross-entropy of a column-parallel LM head.
B2 = 8


def lm_head_xent_ref(h, w, bias, labels, mask):
    logits = h @ w + bias
    tok = optax.softmax_cross_entropy_with_integer_labels(logits, labels)
    return tok, jnp.sum(tok * mask) / jnp.sum(mask)


def vocab_parallel_xent(bug):
    def f(h, w, bias, labels, mask):
        logits = h @ w + bias                                                   # [b, T, V/tp]
        vl = logits.shape[-1]
        m = jnp.max(logits, -1) if bug == "max-not-pmax" else pmax(jnp.max(logits, -1), "tp")
        sumexp = psum(jnp.sum(jnp.exp(logits - m[..., None]), -1), "tp")
        if bug == "target-logit-unmasked":
            local = jnp.clip(labels - idx("tp") * vl, 0, vl - 1)
            tgt = jnp.take_along_axis(logits, local[..., None], -1)[..., 0]
        else:
            local, own = vocab_shard(labels, vl, idx("tp") * vl)
            tgt = jnp.where(own, jnp.take_along_axis(logits, local[..., None], -1)[..., 0], 0.0)
        tok = jnp.log(sumexp) + m - psum(tgt, "tp")
        return tok, psum(jnp.sum(tok * mask), "dp") / psum(jnp.sum(mask), "dp")
    return f


LEN2 = [8, 8, 7, 8, 3, 5, 2, 6]
C.smap("s.megatron_vocab_parallel_xent_lm_head.dp2xtp4", {"dp": 2, "tp": 4}, vocab_parallel_xent,
       (P("dp"), P(None, "tp"), P("tp"), P("dp"), P("dp")), (P("dp"), P()), lm_head_xent_ref,
       (R(B2, T, D), R(D, V, scale=0.6), R(V, scale=0.5), I(0, V, B2, T),
        (np.arange(T)[None] < np.array(LEN2)[:, None]).astype(np.float32)),
       bugs=[("max-not-pmax", ["missing-all-reduce", "local-statistic"]),
             ("target-logit-unmasked", ["missing-mask"])])

# ---------------------------------------------------------------------------
# 3. BERT masked-LM training step (dp4) over a padded batch.
B3, F3 = 16, 32


def bert_params():
    return {"word": R(V, D, scale=0.5), "pos": R(T, D, scale=0.2),
            "ln0": {"g": 1.0 + R(D, scale=0.1), "b": R(D, scale=0.1)},
            "attn": {"wq": R(D, D, scale=D ** -0.5), "wk": R(D, D, scale=D ** -0.5),
                     "wv": R(D, D, scale=D ** -0.5), "wo": R(D, D, scale=D ** -0.5)},
            "ln1": {"g": 1.0 + R(D, scale=0.1), "b": R(D, scale=0.1)},
            "mlp": {"w1": R(D, F3, scale=D ** -0.5), "b1": R(F3, scale=0.1),
                    "w2": R(F3, D, scale=F3 ** -0.5), "b2": R(D, scale=0.1)},
            "ln2": {"g": 1.0 + R(D, scale=0.1), "b": R(D, scale=0.1)},
            "head": {"w": R(D, D, scale=D ** -0.5), "b": R(D, scale=0.1),
                     "ln": {"g": 1.0 + R(D, scale=0.1), "b": R(D, scale=0.1)}, "out_bias": R(V, scale=0.1)}}


def bert_encoder(p, ids):
    keep = ids != PAD
    x = layer_norm(jnp.take(p["word"], ids, axis=0) + p["pos"][None, : ids.shape[1]], **p["ln0"])
    a = p["attn"]
    q, k, v = x @ a["wq"], x @ a["wk"], x @ a["wv"]
    s = jnp.einsum("btd,bsd->bts", q, k) / jnp.sqrt(f32(D))
    s = jnp.where(keep[:, None, :], s, -1e9)
    x = layer_norm(x + jnp.einsum("bts,bsd->btd", jax.nn.softmax(s, -1), v) @ a["wo"], **p["ln1"])
    m = p["mlp"]
    x = layer_norm(x + jax.nn.gelu(x @ m["w1"] + m["b1"]) @ m["w2"] + m["b2"], **p["ln2"])
    return x


def mlm_logits(p, ids):
    h = bert_encoder(p, ids)
    t = layer_norm(jax.nn.gelu(h @ p["head"]["w"] + p["head"]["b"]), **p["head"]["ln"])
    return t @ p["word"].T + p["head"]["out_bias"]                           # tied decoder


def mlm_loss_sum(p, ids, labels, weights):
    ce = optax.softmax_cross_entropy_with_integer_labels(mlm_logits(p, ids), labels)
    return jnp.sum(ce * weights)


OPT3 = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(2e-3, weight_decay=0.01))


def mlm_step(params, state, ids, labels, weights):
    loss, g = jax.value_and_grad(lambda p: mlm_loss_sum(p, ids, labels, weights) / jnp.sum(weights))(params)
    upd, state = OPT3.update(g, state, params)
    return optax.apply_updates(params, upd), state, loss


def mlm_step_dp(bug):
    def f(params, state, ids, labels, weights):
        if bug == "local-token-mean-pmean":
            loss, g = jax.value_and_grad(lambda p: mlm_loss_sum(p, ids, labels, weights) / jnp.sum(weights))(params)
            g, loss = pmean(g, "dp"), pmean(loss, "dp")
        else:
            n_masked = psum(jnp.sum(weights), "dp")
            loss, g = jax.value_and_grad(lambda p: mlm_loss_sum(p, ids, labels, weights) / n_masked)(params)
            loss = psum(loss, "dp")
            g = g if bug == "optimizer-before-grad-reduce" else psum(g, "dp")
        upd, state = OPT3.update(g, state, params)
        if bug == "optimizer-before-grad-reduce":
            upd = pmean(upd, "dp")
        return optax.apply_updates(params, upd), state, loss
    return f


def mlm_batch(b, lengths, p_mask):
    """masked-LM inputs: the original ids are the labels, the chosen real positions (weight 1)
    replaced by the [MASK] id V-1."""
    ids = padded_ids(b, T, lengths, lo=1)
    labels = ids.copy()
    pick = (rng.random((b, T)) < p_mask) & (ids != PAD)
    pick[:, 0] |= True
    weights = pick.astype(np.float32)
    ids = np.where(pick, V - 1, ids).astype(np.int32)
    return ids, labels.astype(np.int32), weights


P3 = bert_params()
# the first shard has full rows and many masks, the last short rows
LEN3 = [8, 8, 8, 8, 8, 7, 6, 7, 5, 4, 6, 3, 2, 3, 1, 2]
P3, S3 = warm(mlm_step, P3, OPT3.init(P3), *mlm_batch(B3, LEN3, 0.4))
PS3 = jax.tree.map(lambda _: P(), P3)
C.smap("s.bert_mlm_padded_global_token_mean_clip_adamw.dp4", {"dp": 4}, mlm_step_dp,
       (PS3, state_specs(S3, PS3), P("dp"), P("dp"), P("dp")), (PS3, state_specs(S3, PS3), P()), mlm_step,
       (P3, S3) + mlm_batch(B3, LEN3, 0.4),
       bugs=[("local-token-mean-pmean", ["local-statistic", "wrong-denominator"]),
             ("optimizer-before-grad-reduce", ["wrong-order"])])

# ---------------------------------------------------------------------------
# 4. CLIP training step (dp8), features all_gather'd with gradient.
B4, DI4, H4, E4, TT4 = 32, 24, 32, 16, 6


def clip_features(p, img, txt):
    fi = jax.nn.gelu(img @ p["img"]["w1"] + p["img"]["b1"]) @ p["img"]["w2"]
    keep = (txt != PAD)[..., None].astype(f32)
    pooled = jnp.sum(jnp.take(p["txt"]["tok"], txt, axis=0) * keep, 1) / jnp.maximum(jnp.sum(keep, 1), 1.0)
    ft = pooled @ p["txt"]["proj"]
    return l2_normalize(fi), l2_normalize(ft)


def logit_scale(p):
    return jnp.minimum(jnp.exp(p["logit_scale"]), 100.0)


def clip_loss(p, img, txt):
    fi, ft = clip_features(p, img, txt)
    logits = logit_scale(p) * fi @ ft.T
    labels = jnp.arange(img.shape[0])
    ce = optax.softmax_cross_entropy_with_integer_labels
    return (jnp.mean(ce(logits, labels)) + jnp.mean(ce(logits.T, labels))) / 2


OPT4 = optax.adam(2e-3)


def clip_step(params, state, img, txt):
    loss, g = jax.value_and_grad(clip_loss)(params, img, txt)
    upd, state = OPT4.update(g, state, params)
    return optax.apply_updates(params, upd), state, loss


def clip_step_dp(bug):
    def f(params, state, img, txt):
        b = img.shape[0]
        n = b * lax.axis_size("dp")

        def local_loss(p):
            fi, ft = clip_features(p, img, txt)
            all_i = lax.all_gather(fi, "dp", tiled=True)
            all_t = lax.all_gather(ft, "dp", tiled=True)
            if bug == "gathered-features-no-grad":
                all_i, all_t = lax.stop_gradient(all_i), lax.stop_gradient(all_t)
            s = logit_scale(p)
            per_img, per_txt = s * fi @ all_t.T, s * ft @ all_i.T                   # [b, n]
            if bug == "labels-no-rank-offset":
                labels = jnp.arange(b)
            else:
                labels = jnp.arange(b) + idx("dp") * b
            ce = optax.softmax_cross_entropy_with_integer_labels
            return (jnp.sum(ce(per_img, labels)) + jnp.sum(ce(per_txt, labels))) / (2 * n)
        loss, g = jax.value_and_grad(local_loss)(params)
        g = psum(g, "dp")
        upd, state = OPT4.update(g, state, params)
        return optax.apply_updates(params, upd), state, psum(loss, "dp")
    return f


def clip_params():
    return {"img": {"w1": R(DI4, H4, scale=DI4 ** -0.5), "b1": R(H4, scale=0.1), "w2": R(H4, E4, scale=H4 ** -0.5)},
            "txt": {"tok": R(V, D, scale=0.5), "proj": R(D, E4, scale=D ** -0.5)},
            "logit_scale": np.float32(np.log(1 / 0.07))}


def clip_batch(b):
    return R(b, DI4), padded_ids(b, TT4, I(2, TT4 + 1, b))


P4 = clip_params()
P4, S4 = warm(clip_step, P4, OPT4.init(P4), *clip_batch(B4))
PS4 = jax.tree.map(lambda _: P(), P4)
C.smap("s.clip_contrastive_allgather_with_grad_rank_labels_adam.dp8", {"dp": 8}, clip_step_dp,
       (PS4, state_specs(S4, PS4), P("dp"), P("dp")), (PS4, state_specs(S4, PS4), P()), clip_step,
       (P4, S4) + clip_batch(B4),
       bugs=[("labels-no-rank-offset", ["wrong-offset"]),
             ("gathered-features-no-grad", ["wrong-gradient", "missing-collective"])])

# ---------------------------------------------------------------------------
# 5. tied-embedding causal LM training step, Megatron f / g operators (dp2 x tp4).
B5, F5, EPS5, ZW5 = 8, 32, 0.1, 1e-3


@partial(jax.custom_vjp, nondiff_argnums=(1,))
def copy_to_tp(x, axis):
    return x


def _copy_fwd(x, axis):
    return x, None


def _copy_bwd(axis, _, g):
    return (psum(g, axis),)


copy_to_tp.defvjp(_copy_fwd, _copy_bwd)


@partial(jax.custom_vjp, nondiff_argnums=(1,))
def reduce_from_tp(x, axis):
    return psum(x, axis)


def _reduce_fwd(x, axis):
    return psum(x, axis), None


def _reduce_bwd(axis, _, g):
    return (g,)


reduce_from_tp.defvjp(_reduce_fwd, _reduce_bwd)


@partial(jax.custom_vjp, nondiff_argnums=(1,))
def vocab_parallel_logsumexp(logits, axis):
    m = pmax(jnp.max(logits, -1), axis)
    return m + jnp.log(psum(jnp.sum(jnp.exp(logits - m[..., None]), -1), axis))


def _vplse_fwd(logits, axis):
    lse = vocab_parallel_logsumexp(logits, axis)
    return lse, (logits, lse)


def _vplse_bwd(axis, res, g):
    logits, lse = res
    return (g[..., None] * jnp.exp(logits - lse[..., None]),)


vocab_parallel_logsumexp.defvjp(_vplse_fwd, _vplse_bwd)


def lm_block(p, x):
    """one pre-norm causal transformer block (single head) and the final RMSNorm."""
    h = rms_norm(x, p["ln1"])
    q, k, v = h @ p["wq"], h @ p["wk"], h @ p["wv"]
    s = jnp.einsum("btd,bsd->bts", q, k) / jnp.sqrt(f32(D))
    t = x.shape[1]
    s = jnp.where(jnp.tril(jnp.ones((t, t), bool)), s, -1e9)
    x = x + jnp.einsum("bts,bsd->btd", jax.nn.softmax(s, -1), v) @ p["wo"]
    x = x + jax.nn.gelu(rms_norm(x, p["ln2"]) @ p["w1"]) @ p["w2"]
    return rms_norm(x, p["lnf"])


def lm_params():
    return {"emb": R(V, D, scale=0.5), "ln1": 1.0 + R(D, scale=0.1), "ln2": 1.0 + R(D, scale=0.1),
            "lnf": 1.0 + R(D, scale=0.1), "wq": R(D, D, scale=D ** -0.5), "wk": R(D, D, scale=D ** -0.5),
            "wv": R(D, D, scale=D ** -0.5), "wo": R(D, D, scale=D ** -0.5), "w1": R(D, F5, scale=D ** -0.5),
            "w2": R(F5, D, scale=F5 ** -0.5)}


def tied_lm_loss(p, ids, labels, mask):
    h = lm_block(p, jnp.take(p["emb"], ids, axis=0))
    logits = h @ p["emb"].T
    ce = optax.softmax_cross_entropy(logits, optax.smooth_labels(jax.nn.one_hot(labels, V), EPS5))
    tok = ce + ZW5 * jnp.square(jax.nn.logsumexp(logits, -1))
    return jnp.sum(tok * mask) / jnp.sum(mask)



CLIP5, LR5 = 0.5, 1e-2
OPT5 = optax.chain(optax.clip_by_global_norm(CLIP5), optax.adamw(LR5, weight_decay=0.01))


def tied_lm_step(params, state, ids, labels, mask):
    loss, g = jax.value_and_grad(tied_lm_loss)(params, ids, labels, mask)
    upd, state = OPT5.update(g, state, params)
    return optax.apply_updates(params, upd), state, {"loss": loss, "grad_norm": optax.global_norm(g)}


def sharded_global_norm(tree, sharded, axis):
    """optax.global_norm of a tree whose leaves marked in sharded are split over axis."""
    sq = [psum(jnp.sum(jnp.square(u)), axis) if s else jnp.sum(jnp.square(u))
          for u, s in zip(jax.tree.leaves(tree), jax.tree.leaves(sharded))]
    return jnp.sqrt(sum(sq))


def clip_by_sharded_global_norm(max_norm, sharded, axis):
    """optax.clip_by_global_norm with the norm of sharded_global_norm."""
    def update_fn(updates, state, params=None):
        g_norm = sharded_global_norm(updates, sharded, axis)
        trigger = g_norm < max_norm
        return jax.tree.map(lambda t: lax.select(trigger, t, (t / g_norm) * max_norm), updates), state
    return optax.GradientTransformation(optax.init_empty_state, update_fn)


def tied_lm_step_tp(bug):
    def f(params, state, ids, labels, mask):
        n_tok = psum(jnp.sum(mask), "dp")

        def local_loss(p):
            vl = p["emb"].shape[0]
            start = idx("tp") * vl
            local, own = vocab_shard(ids, vl, start)
            x = reduce_from_tp(jnp.where(own[..., None], jnp.take(p["emb"], local, axis=0), 0.0), "tp")
            h = lm_block(p, x)
            if bug == "logits-input-no-copy-to-tp":
                logits = h @ p["emb"].T
            else:
                logits = copy_to_tp(h, "tp") @ p["emb"].T                           # [b, T, V/tp]
            lse = vocab_parallel_logsumexp(logits, "tp")
            lab, own_l = vocab_shard(labels, vl, start)
            tgt = reduce_from_tp(jnp.where(own_l, jnp.take_along_axis(logits, lab[..., None], -1)[..., 0], 0.0),
                                 "tp")
            mean_logit = reduce_from_tp(jnp.sum(logits, -1), "tp") / V
            tok = (1 - EPS5) * (lse - tgt) + EPS5 * (lse - mean_logit) + ZW5 * jnp.square(lse)
            return jnp.sum(tok * mask) / n_tok
        loss, g = jax.value_and_grad(local_loss)(params)
        g = psum(g, "dp")
        sharded = {k: k == "emb" for k in g}
        if bug == "clip-norm-local-shard":
            clip, g_norm = optax.clip_by_global_norm(CLIP5), optax.global_norm(g)
        else:
            clip, g_norm = clip_by_sharded_global_norm(CLIP5, sharded, "tp"), sharded_global_norm(g, sharded, "tp")
        opt = optax.chain(clip, optax.adamw(LR5, weight_decay=0.01))
        upd, state = opt.update(g, state, params)
        return optax.apply_updates(params, upd), state, {"loss": psum(loss, "dp"), "grad_norm": g_norm}
    return f


def lm_batch(b, lengths):
    seq = padded_ids(b, T + 1, lengths, lo=1)
    mask = (seq[:, 1:] != PAD).astype(np.float32)
    return seq[:, :-1], seq[:, 1:], mask


LEN5 = [9, 9, 8, 6, 9, 5, 7, 4]
P5 = lm_params()
P5, S5 = warm(tied_lm_step, P5, OPT5.init(P5), *lm_batch(B5, LEN5))
PS5 = {k: P("tp") if k == "emb" else P() for k in P5}
C.smap("s.megatron_tied_embedding_lm_custom_vjp_smoothing_zloss_clip_adamw.dp2xtp4", {"dp": 2, "tp": 4},
       tied_lm_step_tp, (PS5, state_specs(S5, PS5), P("dp"), P("dp"), P("dp")), (PS5, state_specs(S5, PS5), P()),
       tied_lm_step, (P5, S5) + lm_batch(B5, LEN5),
       bugs=[("clip-norm-local-shard", ["local-norm", "missing-all-reduce"]),
             ("logits-input-no-copy-to-tp", ["missing-all-reduce", "wrong-gradient"])])

# ---------------------------------------------------------------------------
# 6. dual encoder with in-batch and hard negatives, logQ correction (dp8).
B6, T6, E6, TAU6 = 32, 6, 16, 0.05


def tower(tok, w, ids):
    keep = (ids != PAD)[..., None].astype(f32)
    pooled = jnp.sum(jnp.take(tok, ids, axis=0) * keep, 1) / jnp.maximum(jnp.sum(keep, 1), 1.0)
    return l2_normalize(pooled @ w)


def retrieval_ref(tok, wq, wd, q_ids, d_ids, h_ids, logq_d, logq_h):
    q, d, h = tower(tok, wq, q_ids), tower(tok, wd, d_ids), tower(tok, wd, h_ids)
    cols = jnp.concatenate([d, h], 0)
    logits = q @ cols.T / TAU6 - jnp.concatenate([logq_d, logq_h])[None]
    per_q = optax.softmax_cross_entropy_with_integer_labels(logits, jnp.arange(q.shape[0]))
    return per_q, jnp.mean(per_q)


def retrieval_dp(bug):
    def f(tok, wq, wd, q_ids, d_ids, h_ids, logq_d, logq_h):
        b = q_ids.shape[0]
        q, d, h = tower(tok, wq, q_ids), tower(tok, wd, d_ids), tower(tok, wd, h_ids)
        if bug == "hard-negatives-local-only":
            cols = jnp.concatenate([lax.all_gather(d, "dp", tiled=True), h], 0)
            lq = jnp.concatenate([lax.all_gather(logq_d, "dp", tiled=True), logq_h])
            labels = idx("dp") * b + jnp.arange(b)
        else:
            # one gather of [docs; hard negatives] per device: device r's docs start at r * 2b
            cols = lax.all_gather(jnp.concatenate([d, h], 0), "dp", tiled=True)
            lq = lax.all_gather(jnp.concatenate([logq_d, logq_h]), "dp", tiled=True)
            if bug == "label-offset-ignores-hard-negatives":
                labels = idx("dp") * b + jnp.arange(b)
            else:
                labels = idx("dp") * 2 * b + jnp.arange(b)
        logits = q @ cols.T / TAU6 - lq[None]
        per_q = optax.softmax_cross_entropy_with_integer_labels(logits, labels)
        return per_q, pmean(jnp.mean(per_q), "dp")
    return f


def retrieval_args(b):
    lens = lambda: I(2, T6 + 1, b)  # noqa: E731
    logq = lambda: np.log(rng.dirichlet(np.ones(V * 4))[:b] + 1e-3).astype(np.float32)  # noqa: E731
    return (R(V, D, scale=0.5), R(D, E6, scale=D ** -0.5), R(D, E6, scale=D ** -0.5),
            padded_ids(b, T6, lens()), padded_ids(b, T6, lens()), padded_ids(b, T6, lens()), logq(), logq())


C.smap("s.dual_encoder_inbatch_hard_negatives_logq_one_gather.dp8", {"dp": 8}, retrieval_dp,
       (P(), P(), P(), P("dp"), P("dp"), P("dp"), P("dp"), P("dp")), (P("dp"), P()), retrieval_ref,
       retrieval_args(B6),
       bugs=[("hard-negatives-local-only", ["missing-collective", "local-statistic"]),
             ("label-offset-ignores-hard-negatives", ["wrong-offset", "wrong-layout"])])

# ---------------------------------------------------------------------------
# 7. class-weighted classifier step with ignore_index, class-parallel head (dp2 x tp4, check_vma).
B7, DI7, H7, NC7, IGN = 16, 24, 16, 32, -100


def weighted_ce_loss(p, x, labels, cw):
    """torch.nn.CrossEntropyLoss(weight=cw, ignore_index=-100): sum_i w_yi ce_i / sum_i w_yi."""
    h = jax.nn.gelu(x @ p["w0"] + p["b0"])
    logits = h @ p["wc"] + p["bc"]
    valid = labels != IGN
    y = jnp.where(valid, labels, 0)
    ce = optax.softmax_cross_entropy_with_integer_labels(logits, y)
    w = jnp.where(valid, cw[y], 0.0)
    return jnp.sum(w * ce) / jnp.sum(w)


OPT7 = optax.sgd(0.1, momentum=0.9, nesterov=True)


def weighted_ce_step(params, state, x, labels, cw):
    loss, g = jax.value_and_grad(weighted_ce_loss)(params, x, labels, cw)
    upd, state = OPT7.update(g, state, params)
    return optax.apply_updates(params, upd), state, loss


def weighted_ce_step_tp(bug):
    def f(params, state, x, labels, cw):
        def loss_fn(p):
            h = jax.nn.gelu(x @ p["w0"] + p["b0"])
            logits = h @ p["wc"] + p["bc"]                                         # [b, C/tp]
            cl = logits.shape[-1]
            m = pmax(lax.stop_gradient(jnp.max(logits, -1)), "tp")
            lse = m + jnp.log(psum(jnp.sum(jnp.exp(logits - m[:, None]), -1), "tp"))
            start = idx("dp") * cl if bug == "shard-start-from-dp-rank" else idx("tp") * cl
            local, own = vocab_shard(labels, cl, start)                            # IGN is owned by no shard
            tgt = psum(jnp.where(own, jnp.take_along_axis(logits, local[:, None], -1)[:, 0], 0.0), "tp")
            w = psum(jnp.where(own, cw[local], 0.0), "tp")
            num, den = jnp.sum(w * (lse - tgt)), jnp.sum(w)
            if bug == "weighted-mean-per-dp-shard":
                return pmean(num / den, "dp")
            return psum(num, "dp") / psum(den, "dp")
        loss, g = jax.value_and_grad(loss_fn)(params)                              # check_vma: grads reduced
        upd, state = OPT7.update(g, state, params)
        return optax.apply_updates(params, upd), state, loss
    return f


def weighted_ce_labels():
    y = I(0, NC7, B7)
    y[[3, 9, 10, 12, 13, 15]] = IGN        # first dp shard: one ignored, second: five
    return y


P7 = {"w0": R(DI7, H7, scale=DI7 ** -0.5), "b0": R(H7, scale=0.1), "wc": R(H7, NC7, scale=H7 ** -0.5),
      "bc": R(NC7, scale=0.1)}
CW7 = np.exp(R(NC7, scale=0.8)).astype(np.float32)
P7, S7 = warm(weighted_ce_step, P7, OPT7.init(P7), R(B7, DI7), weighted_ce_labels(), CW7)
PS7 = {"w0": P(), "b0": P(), "wc": P(None, "tp"), "bc": P("tp")}
C.smap("s.class_weighted_ignore_index_class_parallel_nesterov.dp2xtp4", {"dp": 2, "tp": 4}, weighted_ce_step_tp,
       (PS7, state_specs(S7, PS7), P("dp"), P("dp"), P("tp")), (PS7, state_specs(S7, PS7), P()),
       weighted_ce_step, (P7, S7, R(B7, DI7), weighted_ce_labels(), CW7), check_vma=True,
       bugs=[("weighted-mean-per-dp-shard", ["local-statistic", "wrong-denominator"]),
             ("shard-start-from-dp-rank", ["wrong-offset", "wrong-axis"])])

# ---------------------------------------------------------------------------
# 8. LM step with the word table sharded on the model dim (dp2 x tp4, check_vma).
B8, F8 = 8, 32


def md_params():
    return {"emb": R(V, D, scale=0.5), "g": 1.0 + R(D, scale=0.1), "w1": R(D, F8, scale=D ** -0.5),
            "b1": R(F8, scale=0.1), "w2": R(F8, D, scale=F8 ** -0.5), "gf": 1.0 + R(D, scale=0.1)}


def md_loss(p, ids, labels, mask):
    x = jnp.take(p["emb"], ids, axis=0)
    x = x + jax.nn.gelu(rms_norm(x, p["g"]) @ p["w1"] + p["b1"]) @ p["w2"]
    logits = rms_norm(x, p["gf"]) @ p["emb"].T
    ce = optax.softmax_cross_entropy_with_integer_labels(logits, labels)
    return jnp.sum(ce * mask) / jnp.sum(mask)


OPT8 = optax.sgd(optax.warmup_cosine_decay_schedule(0.0, 0.5, 2, 20), momentum=0.9)


def md_step(params, state, ids, labels, mask):
    loss, g = jax.value_and_grad(md_loss)(params, ids, labels, mask)
    upd, state = OPT8.update(g, state, params)
    return optax.apply_updates(params, upd), state, loss


def md_step_tp(bug):
    def rms_sharded(x, g, eps=1e-6):
        if bug == "rmsnorm-local-mean-square":
            ms = jnp.mean(jnp.square(x), -1, keepdims=True)
        else:
            ms = psum(jnp.sum(jnp.square(x), -1, keepdims=True), "tp") / D
        return x * lax.rsqrt(ms + eps) * g

    def f(params, state, ids, labels, mask):
        def loss_fn(p):
            x = jnp.take(p["emb"], ids, axis=0)                                    # [b, T, D/tp]
            h = rms_sharded(x, p["g"]) @ p["w1"]                                    # row parallel: partial
            if bug == "row-parallel-bias-before-psum":
                pre = psum(h + p["b1"], "tp")
            else:
                pre = psum(h, "tp") + p["b1"]
            x = x + jax.nn.gelu(pre) @ p["w2"]                                      # column parallel: [b, T, D/tp]
            logits = psum(rms_sharded(x, p["gf"]) @ p["emb"].T, "tp")              # [b, T, V]
            ce = optax.softmax_cross_entropy_with_integer_labels(logits, labels)
            return psum(jnp.sum(ce * mask), "dp") / psum(jnp.sum(mask), "dp")
        loss, g = jax.value_and_grad(loss_fn)(params)
        upd, state = OPT8.update(g, state, params)
        return optax.apply_updates(params, upd), state, loss
    return f


LEN8 = [9, 9, 9, 8, 7, 4, 3, 5]
P8 = md_params()
P8, S8 = warm(md_step, P8, OPT8.init(P8), *lm_batch(B8, LEN8))
PS8 = {"emb": P(None, "tp"), "g": P("tp"), "w1": P("tp"), "b1": P(), "w2": P(None, "tp"), "gf": P("tp")}
C.smap("s.embedding_model_dim_sharded_rmsnorm_psum_sgd_momentum.dp2xtp4", {"dp": 2, "tp": 4}, md_step_tp,
       (PS8, state_specs(S8, PS8), P("dp"), P("dp"), P("dp")), (PS8, state_specs(S8, PS8), P()), md_step,
       (P8, S8) + lm_batch(B8, LEN8), check_vma=True,
       bugs=[("rmsnorm-local-mean-square", ["local-statistic", "missing-all-reduce"]),
             ("row-parallel-bias-before-psum", ["wrong-scale", "duplicated-term"])])

# ---------------------------------------------------------------------------
# GSPMD pairs.
DPTP = {"dp": 2, "tp": 4}

# 9. tied LM loss with smoothing and z-loss, the table on vocab rows.
P9 = lm_params()
PS9 = {k: P("tp", None) if k == "emb" else P() for k in P9}
C.gspmd("g.tied_lm_loss_smoothing_zloss_table_vocab_rows.dp2xtp4", DPTP, (PS9, P("dp"), P("dp"), P("dp")), P(),
        tied_lm_loss, (P9,) + lm_batch(8, [9, 7, 9, 5, 9, 8, 3, 6]))

# 10. LM training step, the table on the model dim, adamw + clip.
OPT10 = optax.chain(optax.clip_by_global_norm(0.5), optax.adamw(3e-3, weight_decay=0.01))


def md_step_adamw(params, state, ids, labels, mask):
    loss, g = jax.value_and_grad(md_loss)(params, ids, labels, mask)
    upd, state = OPT10.update(g, state, params)
    return optax.apply_updates(params, upd), state, loss


P10 = md_params()
P10, S10 = warm(md_step_adamw, P10, OPT10.init(P10), *lm_batch(8, LEN8))
PS10 = {"emb": P(None, "tp"), "g": P("tp"), "w1": P("tp", None), "b1": P(), "w2": P(None, "tp"), "gf": P("tp")}
C.gspmd("g.lm_step_table_model_dim_adamw_clip.dp2xtp4", DPTP,
        (PS10, state_specs(S10, PS10), P("dp"), P("dp"), P("dp")), (PS10, state_specs(S10, PS10), P()),
        md_step_adamw, (P10, S10) + lm_batch(8, [9, 9, 6, 8, 4, 9, 7, 2]))


# 11. untied LM head: logits sharded on vocab and per-token losses.
def lm_head_smoothed(h, w, bias, labels):
    logits = h @ w + bias
    ce = optax.softmax_cross_entropy(logits, optax.smooth_labels(jax.nn.one_hot(labels, V), 0.1))
    return logits, ce + 1e-4 * jnp.square(jax.nn.logsumexp(logits, -1))


C.gspmd("g.lm_head_logits_vocab_sharded_smoothed_xent.dp2xtp4", DPTP,
        (P("dp"), P(None, "tp"), P("tp"), P("dp")), (P("dp", None, "tp"), P("dp")), lm_head_smoothed,
        (R(8, T, D), R(D, V, scale=0.6), R(V, scale=0.5), I(0, V, 8, T)))

# 12. CLIP training step, batch sharded.
P12 = clip_params()
P12, S12 = warm(clip_step, P12, OPT4.init(P12), *clip_batch(B4))
PS12 = jax.tree.map(lambda _: P(), P12)
C.gspmd("g.clip_contrastive_step_batch_sharded_adam.dp8", {"dp": 8},
        (PS12, state_specs(S12, PS12), P("dp"), P("dp")), (PS12, state_specs(S12, PS12), P()), clip_step,
        (P12, S12) + clip_batch(B4))

# 13. masked-LM training step, the tied table on vocab rows.
P13 = bert_params()
LEN13 = [8, 7, 8, 6, 8, 5, 8, 4, 3, 8, 2, 6, 7, 1, 8, 5]
P13, S13 = warm(mlm_step, P13, OPT3.init(P13), *mlm_batch(B3, LEN13, 0.3))
PS13 = jax.tree.map(lambda _: P(), P13)
PS13["word"] = P("tp", None)
PS13["head"]["out_bias"] = P("tp")
C.gspmd("g.bert_mlm_step_tied_table_vocab_rows_clip_adamw.dp2xtp4", DPTP,
        (PS13, state_specs(S13, PS13), P("dp"), P("dp"), P("dp")), (PS13, state_specs(S13, PS13), P()), mlm_step,
        (P13, S13) + mlm_batch(B3, LEN13, 0.3))

# 14. dual encoder with hard negatives, batch over dp, token table on vocab rows.
C.gspmd("g.dual_encoder_hard_negatives_logq_table_vocab_rows.dp2xtp4", DPTP,
        (P("tp", None), P(), P(), P("dp"), P("dp"), P("dp"), P("dp"), P("dp")), (P("dp"), P()), retrieval_ref,
        retrieval_args(16))

C.finish()
