"""samples/fresh111: a 111th batch of programs as a user writes them, on the theme of LLM post-training objectives in JAX (DPO / IPO / KTO / SimPO losses from policy and reference sequence log-probs, reward-model heads with Bradley-Terry and listwise losses, PPO for LLMs, GRPO, best-of-n selection, training steps with jax.grad + optax on a tiny transformer policy) under dp, dp x tp, dp x sp and a dp x sp x tp mesh, none of them an idiom of samples/fresh .. fresh26, probe, train or wild (nor of fresh27 / fresh78, the earlier post-training batches).
shard_map families:
 1. DPO on an interleaved batch (rows chosen_0, rejected_0, chosen_1, ...;
    whole pairs per dp shard) from hidden states and a head whose vocab is
    over tp4: pmax'd maximum, psum'd exponentials, the target logit by
    take_along_axis at a clipped local index and a range test, psum'd over
    tp; masked sequence sums, beta-scaled implicit rewards. Bugs: the range
    test against the global vocabulary size, pairs taken as the first and
    second halves of the local rows, the loss psum'd over dp.
 2. KTO with the KL reference point from mismatched completions (the
    completion of the NEXT example in the global batch scored under each
    prompt's logits, TRL style), batch over dp4: the next device's first
    row by ppermute, z0 = max(0, pmean(kl)) detached, the mean KL also returned as
    the logged metric. Bugs: the row taken
    from the previous device, a roll within the local rows, the rolled
    tokens masked with the own row's mask.
 3. SimPO on a three-axis mesh dp2 x sp2 x tp2: chosen and rejected hidden
    states with the sequence over sp, a vocab-parallel head over tp
    (one_hot at target - offset with the local vocab size), length-averaged
    log-probs and margin gamma. Bugs: the token counts psum'd over sp and
    tp (2x), the log-prob sums psum'd over dp instead of sp.
 4. reward model on K = 8 ranked responses per prompt with K over dp4:
    mean-pooled masked hidden states dot a head, then all-pairs
    Bradley-Terry (i better than j for i < j) against the all_gather'd
    rewards and the Plackett-Luce listwise loss with suffix log-sum-exps.
    Bugs: pairs only among the device's own responses, ranks compared with
    local indices, PL suffixes over the local responses only.
 5. token-level GAE (KL-penalised rewards plus the score at a global EOS
    index) with the sequence over sp4 and the batch over dp2: a local
    reverse lax.scan from a zero carry, the next value by ppermute, and the
    carry of later blocks passed right-to-left by a chain of three
    ppermutes (c <- first advantage + (gamma lambda)^block * c). Bugs: the
    carry's weight exponent one short, two rounds of the chain instead of
    three, the EOS compared with local positions.
 6. PPO policy + clipped value loss with TRL-style masked whitening
    (unbiased variance, shift_mean) of the advantages over the global batch
    (dp2 x sp4), the sums, squares and counts psum'd as one stacked
    vector; clip fraction. Bugs: the statistics psum'd over sp only, the
    value loss normalised by the local token count (guarded by
    maximum(count, 1)) then pmean'd.
 7. GRPO (Dr. GRPO token-sum normalised by a constant) with groups of 8
    completions and 4 rows per device on dp4, so each group is the rows of
    a device pair: the group sums and squares from the partner device
    (d xor 1) by ppermute. Bugs: the partner a cyclic shift (d + 1), the
    rewards centred on the device's own mean (the std still per group).
 8. best-of-n over N = 8 completions per prompt with N over dp4 and the
    reward head's hidden dim over tp2: reward psum'd over tp, pmax'd best
    reward, the winner's global index by pmin over devices holding the
    best, its tokens by a masked psum. Bugs: argmax on the tp-partial
    rewards, the winner index without the device offset, every device's
    row at the winner's local index summed.
 9. temperature-scaled token log-probs and entropies from a tied
    embedding matrix whose vocab rows are over tp4 (batch over dp2), the
    log-sum-exp merged from all_gather'd per-shard log-sum-exps. Bugs: the
    temperature left out of the logits (applied after), the log-sum-exps
    gathered over dp, the vocab offset from the dp index.
10. IPO on length-normalised log-ratios with the batch over dp2 and the
    sequence over sp4: per-row sums and counts stacked and reduced by
    psum_scatter over sp (each sp rank finishes 2 of its dp block's 8
    pairs), per-pair margins returned sharded over (dp, sp), the loss
    psum'd over both axes, counts guarded by maximum(count, 1). Bugs: the
    loss psum'd over sp only, the counts from the device's own block.
11. a DPO training step of a tiny one-layer transformer policy (causal
    attention, RMSNorm, GELU MLP, untied head) against a frozen reference
    with jax.value_and_grad and optax.adam, pairs over dp4, gradients
    pmean'd. Bugs: gradients not pmean'd, the reference log-probs from the
    policy's parameters, the loss not pmean'd.
12. a Bradley-Terry reward-model training step with a Megatron MLP head
    (column-split w1, row-split w2 over tp4, psum before the bias), pairs
    over dp2, check_vma=True, optax.adamw; the mean chosen
    reward returned as a metric (the loss sees only differences). Bugs: the bias added inside the
    psum, chosen and rejected swapped on odd dp shards.
12b. the step of 12. with the bias added on every tp rank inside the psum
    and no reward metric: the loss sees only reward differences, so the
    step computes the baseline's function (a harmless slip; correct).
    Bug: chosen and rejected swapped on odd dp shards.
13. advantage whitening by all_gather of the flattened advantages and
    masks over (dp, sp) on dp2 x sp4, then the masked mean and unbiased
    std on the full vector. Bugs: gathered over sp only, ddof 0.
14. rejection-sampling fine-tuning: the top 2 of N = 8 completions per
    prompt by reward kept (N over dp4; the threshold from lax.top_k of the
    all_gather'd rewards), NLL token mean over the kept completions and the
    kept token counts per prompt (the count guarded by maximum(count, 1)).
    Bugs: the threshold from the local top 2, the token count local.
15. reward scores from a head with the hidden dim over tp4 and the bias
    pre-divided by tp inside the psum (psum(h w + b / tp)), normalised over
    the global batch (dp2). Bugs: the whole bias inside the psum, the
    variance local.
16. a Bradley-Terry loss and its gradients (check_vma=True) where the bias
    is added on every tp rank inside the psum (rewards off by (tp - 1) b):
    the loss sees only chosen - rejected, so the pair computes the
    baseline's function -- a slip a user makes that changes nothing.
    Bugs: the reward psum'd over dp and tp (other pairs' rewards added),
    the difference reversed.
22. GRPO advantages with strided groups (row r in group r % 4, every
    device holding one member of each group, dp4): an all_to_all brings
    each group to one device, normalised there (unbiased std), a second
    all_to_all returns it. Bugs: the return all_to_all left out, the
    rewards normalised over the device's own rows before any exchange.
23. DPO with the sequence over sp4 and pairs over dp2: the per-row sums of
    policy and reference log-probs all-reduced as psum_scatter over sp then
    a tiled all_gather over sp. Bugs: the reduce-scatter / all-gather over
    dp, the reference sums left unreduced.
(22 and 23 are numbered after the GSPMD pairs: added last.)
GSPMD pairs (jax.jit with in/out shardings): 17. DPO loss and its head
gradient from vocab-sharded logits (dp2 x tp4); 18. GAE by reverse lax.scan
with the batch over dp8 and global whitening; 19. GRPO group advantages by
reshape into groups of 8 spanning devices (dp8) with the clipped loss;
20. best-of-n selection by argmax over the N axis sharded over dp4;
21. the DPO training step of 11. with Megatron-sharded parameters (tp4) and
the batch over dp2, optax.adamw.
Numerics: see "numerics" in the manifest; correct pairs agree with their
baselines at f32 rounding level.
Run from the repository root: bash samples/gen/run_fresh111.sh [SUBSTR...]
"""
import sys
import numpy as np
import jax, jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec as P
import optax
sys.path.insert(0, "samples/gen")  # run from the repository root (run_fresh111.sh)
from fresh_lib import Corpus, seeded, state_specs  # noqa: E402

SCRIPT = "samples/gen/fresh111.py"
C = Corpus("samples/fresh111", SCRIPT, "samples/gen/run_fresh111.sh", sys.argv[1:])
rng, R, I = seeded(111)
psum, pmax, pmin, pmean, idx = lax.psum, lax.pmax, lax.pmin, lax.pmean, lax.axis_index
NEG = -1e30
BETA = 0.1


def tok_logp(logits, tgt):
    return jnp.take_along_axis(jax.nn.log_softmax(logits, -1), tgt[..., None], -1)[..., 0]


def resp_mask(b, t, lo=1, hi=None):
    """Response masks: prompt of 1..2 tokens, response until a random end."""
    m = np.zeros((b, t), np.float32)
    for r in range(b):
        s = int(rng.integers(lo, lo + 2))
        e = int(rng.integers(s + 2, t + 1))
        m[r, s:e] = 1.0
    return m


def rms(x, eps=1e-6):
    return x * lax.rsqrt(jnp.mean(jnp.square(x), -1, keepdims=True) + eps)


# ---------------------------------------------------------------------------
# 1. DPO on an interleaved batch, vocab-parallel head (dp2 x tp4)
B1, T1, D1, V1 = 8, 6, 16, 32


def dpo_interleaved(h, w, ref, tgt, m):
    lp = tok_logp(jnp.einsum("btd,dv->btv", h, w), tgt)
    d = BETA * (jnp.sum(lp * m, 1) - jnp.sum(ref * m, 1))
    c, r = d[0::2], d[1::2]
    return -jnp.mean(jax.nn.log_sigmoid(c - r)), jnp.stack([c, r], 1)


def dpo_interleaved_tp(bug):
    def f(h, w, ref, tgt, m):
        vl = w.shape[1]
        lo = idx("tp") * vl
        z = jnp.einsum("btd,dv->btv", h, w)
        mx = pmax(jnp.max(z, -1), "tp")
        lse = jnp.log(psum(jnp.sum(jnp.exp(z - mx[..., None]), -1), "tp")) + mx
        li = tgt - lo
        ok = (li >= 0) & (li < (V1 if bug == "range-global-vocab" else vl))
        g = jnp.take_along_axis(z, jnp.clip(li, 0, vl - 1)[..., None], -1)[..., 0]
        lp = psum(jnp.where(ok, g, 0.0), "tp") - lse
        d = BETA * (jnp.sum(lp * m, 1) - jnp.sum(ref * m, 1))
        if bug == "halves-not-interleaved":
            n = d.shape[0] // 2
            c, r = d[:n], d[n:]
        else:
            c, r = d[0::2], d[1::2]
        loss = -jnp.mean(jax.nn.log_sigmoid(c - r))
        loss = psum(loss, "dp") if bug == "loss-psum-dp" else pmean(loss, "dp")
        return loss, jnp.stack([c, r], 1)
    return f


C.smap("s.dpo_interleaved_takealong_vocab.dp2xtp4", {"dp": 2, "tp": 4}, dpo_interleaved_tp,
       (P("dp"), P(None, "tp"), P("dp"), P("dp"), P("dp")), (P(), P("dp")), dpo_interleaved,
       (R(B1, T1, D1), R(D1, V1, scale=0.5), R(B1, T1, scale=0.5) - 3.0, I(0, V1, B1, T1), resp_mask(B1, T1)),
       bugs=[("range-global-vocab", ["wrong-offset"]), ("halves-not-interleaved", ["wrong-offset"]),
             ("loss-psum-dp", ["wrong-collective-op"])])

# ---------------------------------------------------------------------------
# 2. KTO with mismatched-completion KL reference point (dp4)
B2, T2, V2 = 8, 5, 16
LD, LU = 1.0, 1.33


def seq_lp(logits, t, mm):
    return jnp.sum(tok_logp(logits, t) * mm, 1)


def kto(pol, ref, tok, m, y):
    r = seq_lp(pol, tok, m) - seq_lp(ref, tok, m)
    tk, mk = jnp.roll(tok, -1, 0), jnp.roll(m, -1, 0)
    kl = seq_lp(pol, tk, mk) - seq_lp(ref, tk, mk)
    z0 = lax.stop_gradient(jnp.maximum(jnp.mean(kl), 0.0))
    ld = 1 - jax.nn.sigmoid(BETA * (r - z0))
    lu = 1 - jax.nn.sigmoid(BETA * (z0 - r))
    return jnp.mean(jnp.where(y > 0, LD * ld, LU * lu)), z0, jnp.mean(kl)


def kto_dp(bug):
    def f(pol, ref, tok, m, y):
        n = 4
        r = seq_lp(pol, tok, m) - seq_lp(ref, tok, m)
        if bug == "roll-within-shard":
            tk, mk = jnp.roll(tok, -1, 0), jnp.roll(m, -1, 0)
        else:
            perm = [(i, (i + 1) % n) for i in range(n)] if bug == "row-from-previous-device" else \
                [(i, (i - 1) % n) for i in range(n)]
            nt, nm = lax.ppermute(tok[:1], "dp", perm), lax.ppermute(m[:1], "dp", perm)
            tk, mk = jnp.concatenate([tok[1:], nt]), jnp.concatenate([m[1:], nm])
        if bug == "own-mask-for-kl":
            mk = m
        kl = seq_lp(pol, tk, mk) - seq_lp(ref, tk, mk)
        klm = pmean(jnp.mean(kl), "dp")
        z0 = lax.stop_gradient(jnp.maximum(klm, 0.0))
        ld = 1 - jax.nn.sigmoid(BETA * (r - z0))
        lu = 1 - jax.nn.sigmoid(BETA * (z0 - r))
        return pmean(jnp.mean(jnp.where(y > 0, LD * ld, LU * lu)), "dp"), z0, klm
    return f


TOK2 = I(0, V2, B2, T2)
REF2 = R(B2, T2, V2)
POL2 = (REF2 + R(B2, T2, V2, scale=0.3) + 2.0 * jax.nn.one_hot(TOK2, V2)
        + 3.0 * jax.nn.one_hot(np.roll(TOK2, -1, 0), V2)).astype(np.float32)
C.smap("s.kto_mismatched_kl_reference_point.dp4", {"dp": 4}, kto_dp, (P("dp"),) * 5, (P(), P(), P()), kto,
       (np.asarray(POL2), REF2, TOK2, resp_mask(B2, T2), np.array([1, 0, 1, 1, 0, 0, 1, 0], np.float32)),
       bugs=[("row-from-previous-device", ["wrong-permutation"]), ("roll-within-shard", ["missing-collective"]),
             ("own-mask-for-kl", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 3. SimPO on dp2 x sp2 x tp2
N3, T3, D3, V3 = 4, 8, 8, 16
SIMPO_B, SIMPO_G = 2.0, 0.5


def simpo(hc, hr, w, tc, tr, mc, mr):
    def avg(h, t, m):
        return jnp.sum(tok_logp(h @ w, t) * m, 1) / jnp.sum(m, 1)
    return -jnp.mean(jax.nn.log_sigmoid(SIMPO_B * (avg(hc, tc, mc) - avg(hr, tr, mr)) - SIMPO_G))


def simpo_3d(bug):
    def f(hc, hr, w, tc, tr, mc, mr):
        vl = w.shape[1]
        lo = idx("tp") * vl

        def avg(h, t, m):
            z = h @ w
            mx = pmax(lax.stop_gradient(jnp.max(z, -1)), "tp")
            lse = mx + jnp.log(psum(jnp.exp(z - mx[..., None]).sum(-1), "tp"))
            zt = psum(jnp.sum(z * jax.nn.one_hot(t - lo, vl), -1), "tp")
            s = jnp.sum((zt - lse) * m, 1)
            s = psum(s, "dp") if bug == "sums-over-dp" else psum(s, "sp")
            cnt = psum(jnp.sum(m, 1), ("sp", "tp") if bug == "counts-over-sp-and-tp" else "sp")
            return s / cnt
        loss = -jnp.mean(jax.nn.log_sigmoid(SIMPO_B * (avg(hc, tc, mc) - avg(hr, tr, mr)) - SIMPO_G))
        return pmean(loss, "dp")
    return f


C.smap("s.simpo_three_axis_vocab_seq.dp2xsp2xtp2", {"dp": 2, "sp": 2, "tp": 2}, simpo_3d,
       (P("dp", "sp"), P("dp", "sp"), P(None, "tp"), P("dp", "sp"), P("dp", "sp"), P("dp", "sp"), P("dp", "sp")),
       P(), simpo,
       (R(N3, T3, D3), R(N3, T3, D3), R(D3, V3, scale=0.5), I(0, V3, N3, T3), I(0, V3, N3, T3),
        resp_mask(N3, T3), resp_mask(N3, T3)),
       bugs=[("counts-over-sp-and-tp", ["wrong-axis"]), ("sums-over-dp", ["wrong-axis"])])

# ---------------------------------------------------------------------------
# 4. all-pairs Bradley-Terry and Plackett-Luce on K = 8 ranked responses over dp4
P4, K4, T4, D4 = 3, 8, 6, 8
IU4 = np.triu(np.ones((K4, K4), np.float32), 1)


def rewards_pool(h, m, w):
    return jnp.einsum("pktd,pkt,d->pk", h, m, w) / jnp.sum(m, -1)


def ranked_rm(h, m, w):
    r = rewards_pool(h, m, w)
    bt = -jnp.sum(jax.nn.log_sigmoid(r[:, :, None] - r[:, None, :]) * IU4) / (P4 * IU4.sum())
    suf = lax.cumlogsumexp(r, axis=1, reverse=True)
    pl = -jnp.mean(jnp.sum(r - suf, 1))
    return bt, pl


def ranked_rm_dp(bug):
    def f(h, m, w):
        kl = h.shape[1]
        r = rewards_pool(h, m, w)  # (P, kl)
        rall = lax.all_gather(r, "dp", axis=1, tiled=True)
        gi = (0 if bug == "rank-local-index" else idx("dp") * kl) + jnp.arange(kl)
        if bug == "pairs-local-only":
            later = (jnp.arange(kl)[:, None] < jnp.arange(kl)[None, :]).astype(jnp.float32)
            bt = jnp.sum(jax.nn.log_sigmoid(r[:, :, None] - r[:, None, :]) * later)
        else:
            later = (gi[:, None] < jnp.arange(K4)[None, :]).astype(jnp.float32)
            bt = jnp.sum(jax.nn.log_sigmoid(r[:, :, None] - rall[:, None, :]) * later)
        bt = -psum(bt, "dp") / (P4 * IU4.sum())
        if bug == "pl-suffix-local":
            suf = lax.cumlogsumexp(r, axis=1, reverse=True)
        else:
            ge = gi[:, None] <= jnp.arange(K4)[None, :]  # (kl, K)
            suf = jax.nn.logsumexp(jnp.where(ge[None], rall[:, None, :], NEG), -1)
        pl = -psum(jnp.sum(r - suf), "dp") / P4
        return bt, pl
    return f


C.smap("s.ranked_rm_allpairs_bt_plackett_luce.dp4", {"dp": 4}, ranked_rm_dp,
       (P(None, "dp"), P(None, "dp"), P()), (P(), P()), ranked_rm,
       (R(P4, K4, T4, D4), resp_mask(P4 * K4, T4).reshape(P4, K4, T4), R(D4)),
       bugs=[("pairs-local-only", ["missing-collective"]), ("rank-local-index", ["wrong-offset"]),
             ("pl-suffix-local", ["missing-collective"])])

# ---------------------------------------------------------------------------
# 5. token-level GAE, carry chained by ppermutes (dp2 x sp4)
B5, T5 = 4, 16
GAM, LAM, KLC = 1.0, 0.95, 0.05


def gae_tokens(lp, ref, v, score, eos):
    t = jnp.arange(lp.shape[1])
    r = -KLC * (lp - ref) + jnp.where(t[None] == eos[:, None], score[:, None], 0.0)
    vn = jnp.concatenate([v[:, 1:], jnp.zeros_like(v[:, :1])], 1)
    delta = r + GAM * vn - v

    def step(c, d):
        a = d + GAM * LAM * c
        return a, a
    _, a = lax.scan(step, jnp.zeros(lp.shape[0]), delta.T, reverse=True)
    return a.T, a.T + v


def gae_chain(bug):
    def f(lp, ref, v, score, eos):
        n, tl = 4, lp.shape[1]
        gl = GAM * LAM
        left = [(i, i - 1) for i in range(1, n)]
        pos = jnp.arange(tl) if bug == "eos-local-position" else idx("sp") * tl + jnp.arange(tl)
        r = -KLC * (lp - ref) + jnp.where(pos[None] == eos[:, None], score[:, None], 0.0)
        vn = jnp.concatenate([v[:, 1:], lax.ppermute(v[:, :1], "sp", left)], 1)
        delta = r + GAM * vn - v

        def step(c, d):
            a = d + gl * c
            return a, a
        _, a = lax.scan(step, jnp.zeros(lp.shape[0]), delta.T, reverse=True)
        a = a.T
        c = jnp.zeros(lp.shape[0])
        for _ in range(2 if bug == "two-rounds" else n - 1):
            c = lax.ppermute(a[:, 0] + gl ** tl * c, "sp", left)
        e = tl - jnp.arange(tl) - (1 if bug == "exponent-one-short" else 0)
        adv = a + (gl ** e)[None, :] * c[:, None]
        return adv, adv + v
    return f


C.smap("s.gae_scan_ppermute_carry_chain.dp2xsp4", {"dp": 2, "sp": 4}, gae_chain,
       (P("dp", "sp"), P("dp", "sp"), P("dp", "sp"), P("dp"), P("dp")), (P("dp", "sp"), P("dp", "sp")), gae_tokens,
       (R(B5, T5) - 2.0, R(B5, T5) - 2.0, R(B5, T5), R(B5) + 1.0, np.array([15, 9, 3, 12], np.int32)),
       bugs=[("exponent-one-short", ["wrong-scale"]), ("two-rounds", ["missing-collective"]),
             ("eos-local-position", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 6. PPO with TRL-style masked whitening and value clipping (dp2 x sp4)
B6, T6 = 4, 16
CLIP, CLIPV, VF = 0.2, 0.2, 0.5


def masked_mean(x, m):
    return jnp.sum(x * m) / jnp.sum(m)


def whiten(x, m, shift_mean=True):
    mu = masked_mean(x, m)
    var = masked_mean(jnp.square(x - mu), m)
    var = var * jnp.sum(m) / (jnp.sum(m) - 1)
    w = (x - mu) * lax.rsqrt(var + 1e-8)
    return w if shift_mean else w + mu


def ppo_loss(lp, old, adv, vpred, vold, ret, m):
    a = whiten(adv, m)
    ratio = jnp.exp(lp - old)
    pg = jnp.maximum(-a * ratio, -a * jnp.clip(ratio, 1 - CLIP, 1 + CLIP))
    vc = jnp.clip(vpred, vold - CLIPV, vold + CLIPV)
    vf = 0.5 * jnp.maximum(jnp.square(vpred - ret), jnp.square(vc - ret))
    cf = (jnp.abs(ratio - 1) > CLIP).astype(jnp.float32)
    return masked_mean(pg, m) + VF * masked_mean(vf, m), masked_mean(cf, m)


def ppo_loss_sp(bug):
    def f(lp, old, adv, vpred, vold, ret, m):
        ax = "sp" if bug == "stats-over-sp-only" else ("dp", "sp")
        s1 = psum(jnp.stack([jnp.sum(adv * m), jnp.sum(m)]), ax)
        mu = s1[0] / s1[1]
        var = psum(jnp.sum(jnp.square(adv - mu) * m), ax) / s1[1]
        var = var * s1[1] / (s1[1] - 1)
        a = (adv - mu) * lax.rsqrt(var + 1e-8)
        ratio = jnp.exp(lp - old)
        pg = jnp.maximum(-a * ratio, -a * jnp.clip(ratio, 1 - CLIP, 1 + CLIP))
        vc = jnp.clip(vpred, vold - CLIPV, vold + CLIPV)
        vf = 0.5 * jnp.maximum(jnp.square(vpred - ret), jnp.square(vc - ret))
        cf = (jnp.abs(ratio - 1) > CLIP).astype(jnp.float32)
        tot = psum(jnp.stack([jnp.sum(pg * m), jnp.sum(vf * m), jnp.sum(cf * m), jnp.sum(m)]), ("dp", "sp"))
        if bug == "vf-local-count":
            vloss = pmean(jnp.sum(vf * m) / jnp.maximum(jnp.sum(m), 1.0), ("dp", "sp"))
        else:
            vloss = tot[1] / tot[3]
        return tot[0] / tot[3] + VF * vloss, tot[2] / tot[3]
    return f


M6 = np.zeros((B6, T6), np.float32)
for _r, (_s, _e) in enumerate([(1, 16), (2, 7), (3, 12), (1, 4)]):
    M6[_r, _s:_e] = 1.0
OLD6 = R(B6, T6) - 1.0
C.smap("s.ppo_trl_whiten_value_clip.dp2xsp4", {"dp": 2, "sp": 4}, ppo_loss_sp, (P("dp", "sp"),) * 7, (P(), P()),
       ppo_loss,
       (OLD6 + R(B6, T6, scale=0.3), OLD6, R(B6, T6) * 2.0 + np.arange(B6)[:, None].astype(np.float32), R(B6, T6),
        R(B6, T6), R(B6, T6), M6),
       bugs=[("stats-over-sp-only", ["wrong-axis"]), ("vf-local-count", ["wrong-collective-op"])])

# ---------------------------------------------------------------------------
# 7. Dr. GRPO with each group on a device pair, partner by ppermute (dp4)
N7, G7, T7, LMAX = 16, 8, 6, 6.0
BETA7 = 0.04


def grpo(rw, lp, old, ref, m):
    g = rw.reshape(-1, G7)
    mu = g.mean(1, keepdims=True)
    sd = jnp.std(g, 1, keepdims=True, ddof=1)
    a = ((g - mu) / (sd + 1e-4)).reshape(-1)[:, None]
    ratio = jnp.exp(lp - old)
    pg = -jnp.minimum(ratio * a, jnp.clip(ratio, 1 - CLIP, 1 + CLIP) * a)
    k3 = jnp.exp(ref - lp) - (ref - lp) - 1
    return jnp.sum((pg + BETA7 * k3) * m) / (rw.shape[0] * LMAX), a[:, 0]


def grpo_pair(bug):
    def f(rw, lp, old, ref, m):
        nl = rw.shape[0]
        perm = [(i, (i + 1) % 4) for i in range(4)] if bug == "partner-cyclic" else [(i, i ^ 1) for i in range(4)]
        st = jnp.stack([rw.sum(), jnp.square(rw).sum()])
        st = st + lax.ppermute(st, "dp", perm)
        mu = st[0] / G7
        sd = jnp.sqrt((st[1] - G7 * mu * mu) / (G7 - 1))
        if bug == "center-local-mean":
            mu = jnp.mean(rw)
        a = ((rw - mu) / (sd + 1e-4))[:, None]
        ratio = jnp.exp(lp - old)
        pg = -jnp.minimum(ratio * a, jnp.clip(ratio, 1 - CLIP, 1 + CLIP) * a)
        k3 = jnp.exp(ref - lp) - (ref - lp) - 1
        return psum(jnp.sum((pg + BETA7 * k3) * m), "dp") / (N7 * LMAX), a[:, 0]
    return f


OLD7 = R(N7, T7) - 1.0
C.smap("s.dr_grpo_group_on_device_pair.dp4", {"dp": 4}, grpo_pair, (P("dp"),) * 5, (P(), P("dp")), grpo,
       (R(N7) + np.repeat(np.arange(2) * 3.0, G7).astype(np.float32), OLD7 + R(N7, T7, scale=0.2), OLD7,
        OLD7 + R(N7, T7, scale=0.2), resp_mask(N7, T7)),
       bugs=[("partner-cyclic", ["wrong-permutation"]), ("center-local-mean", ["missing-collective"])])

# ---------------------------------------------------------------------------
# 8. best-of-n with N over dp4 and the reward head's hidden dim over tp2
P8, N8, D8, T8 = 3, 8, 8, 5


def best_of_n(h, w, toks):
    r = h @ w
    best = jnp.argmax(r, 1)
    return jnp.take_along_axis(toks, best[:, None, None], 1)[:, 0], best.astype(jnp.int32), jnp.max(r, 1)


def best_of_n_sm(bug):
    def f(h, w, toks):
        nl = h.shape[1]
        part = h @ w
        r = part if bug == "argmax-before-tp-psum" else psum(part, "tp")
        lb = jnp.argmax(r, 1)
        lm = jnp.max(r, 1)
        gm = pmax(lm, "dp")
        off = 0 if bug == "winner-no-offset" else idx("dp") * nl
        win = pmin(jnp.where(lm == gm, off + lb, N8), "dp").astype(jnp.int32)
        if bug == "row-at-local-index-summed":
            sel = psum(jnp.take_along_axis(toks, (win % nl)[:, None, None], 1)[:, 0], "dp")
        else:
            mine = (off + jnp.arange(nl))[None, :] == win[:, None]
            sel = psum(jnp.sum(jnp.where(mine[..., None], toks, 0), 1), "dp")
        return sel, win, gm
    return f


C.smap("s.best_of_n_reward_argmax_across_devices.dp4xtp2", {"dp": 4, "tp": 2}, best_of_n_sm,
       (P(None, "dp", "tp"), P("tp"), P(None, "dp")), (P(), P(), P()), best_of_n,
       (R(P8, N8, D8), R(D8), I(1, 50, P8, N8, T8)),
       bugs=[("argmax-before-tp-psum", ["missing-collective"]), ("winner-no-offset", ["wrong-offset"]),
             ("row-at-local-index-summed", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 9. temperature-scaled log-probs and entropies, tied embedding over tp4
B9, T9, D9, V9 = 4, 6, 16, 32
TEMP = 0.7


def temp_logp(h, emb, tgt):
    z = jnp.einsum("btd,vd->btv", h, emb) / TEMP
    ls = jax.nn.log_softmax(z, -1)
    ent = -jnp.sum(jnp.exp(ls) * ls, -1)
    return jnp.take_along_axis(ls, tgt[..., None], -1)[..., 0], ent


def temp_logp_tp(bug):
    def f(h, emb, tgt):
        vl = emb.shape[0]
        lo = (idx("dp") if bug == "offset-from-dp" else idx("tp")) * vl
        z = jnp.einsum("btd,vd->btv", h, emb)
        if bug != "temperature-after":
            z = z / TEMP
        lse = jax.nn.logsumexp(lax.all_gather(jax.nn.logsumexp(z, -1),
                                              "dp" if bug == "lse-gathered-over-dp" else "tp"), 0)
        zt = psum(jnp.sum(jnp.where(lo + jnp.arange(vl) == tgt[..., None], z, 0.0), -1), "tp")
        ent = lse - psum(jnp.sum(jnp.exp(z - lse[..., None]) * z, -1), "tp")
        lp = zt - lse
        if bug == "temperature-after":
            lp = lp / TEMP
        return lp, ent
    return f


C.smap("s.temperature_logprob_tied_embedding.dp2xtp4", {"dp": 2, "tp": 4}, temp_logp_tp,
       (P("dp"), P("tp"), P("dp")), (P("dp"), P("dp")), temp_logp,
       (R(B9, T9, D9), R(V9, D9, scale=0.4), I(0, V9, B9, T9)),
       bugs=[("temperature-after", ["wrong-scale"]), ("lse-gathered-over-dp", ["wrong-axis"]),
             ("offset-from-dp", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 10. IPO with psum_scatter of per-row statistics over sp (dp2 x sp4)
N10, T10 = 16, 8
TAU = 0.25


def ipo(lpc, lpr, rfc, rfr, mc, mr):
    nc, nr = jnp.maximum(mc.sum(1), 1.0), jnp.maximum(mr.sum(1), 1.0)
    h = (jnp.sum((lpc - rfc) * mc, 1) / nc) - (jnp.sum((lpr - rfr) * mr, 1) / nr)
    return jnp.mean(jnp.square(h - 1 / (2 * TAU))), h


def ipo_scatter(bug):
    def f(lpc, lpr, rfc, rfr, mc, mr):
        st = jnp.stack([jnp.sum(lpc * mc, 1), jnp.sum(rfc * mc, 1), jnp.sum(mc, 1),
                        jnp.sum(lpr * mr, 1), jnp.sum(rfr * mr, 1), jnp.sum(mr, 1)], 1)  # (8, 6)
        red = lax.psum_scatter(st, "sp", scatter_dimension=0, tiled=True)  # (2, 6)
        nc, nr = red[:, 2], red[:, 5]
        if bug == "counts-own-block":
            k = red.shape[0]
            own = lax.dynamic_slice_in_dim(st, idx("sp") * k, k, 0)
            nc, nr = own[:, 2], own[:, 5]
        nc, nr = jnp.maximum(nc, 1.0), jnp.maximum(nr, 1.0)
        h = (red[:, 0] - red[:, 1]) / nc - (red[:, 3] - red[:, 4]) / nr
        tot = jnp.sum(jnp.square(h - 1 / (2 * TAU)))
        tot = psum(tot, "sp" if bug == "loss-psum-sp-only" else ("dp", "sp"))
        return tot / N10, h
    return f


C.smap("s.ipo_psum_scatter_row_stats.dp2xsp4", {"dp": 2, "sp": 4}, ipo_scatter, (P("dp", "sp"),) * 6,
       (P(), P(("dp", "sp"))), ipo,
       (R(N10, T10) - 2.0, R(N10, T10) - 2.0, R(N10, T10) - 2.0, R(N10, T10) - 2.0,
        resp_mask(N10, T10), resp_mask(N10, T10)),
       bugs=[("loss-psum-sp-only", ["wrong-axis"]), ("counts-own-block", ["missing-collective"])])

# ---------------------------------------------------------------------------
# 11. DPO training step of a tiny transformer policy (dp4), optax.adam
V11, D11, F11, T11, N11 = 16, 8, 16, 6, 8


def tiny_params(scale=0.4):
    return {"emb": R(V11, D11, scale=scale), "wq": R(D11, D11, scale=scale), "wk": R(D11, D11, scale=scale),
            "wv": R(D11, D11, scale=scale), "wo": R(D11, D11, scale=scale), "w1": R(D11, F11, scale=scale),
            "w2": R(F11, D11, scale=scale), "head": R(D11, V11, scale=scale)}


def tiny_logits(p, x):
    h = p["emb"][x]
    u = rms(h)
    q, k, v = u @ p["wq"], u @ p["wk"], u @ p["wv"]
    s = jnp.einsum("btd,bsd->bts", q, k) / np.sqrt(D11)
    s = jnp.where(jnp.tril(jnp.ones((x.shape[1],) * 2, bool)), s, NEG)
    h = h + jnp.einsum("bts,bsd->btd", jax.nn.softmax(s, -1), v) @ p["wo"]
    h = h + jax.nn.gelu(rms(h) @ p["w1"]) @ p["w2"]
    return rms(h) @ p["head"]


def seq_logp_tf(p, x, m):
    return jnp.sum(tok_logp(tiny_logits(p, x[:, :-1]), x[:, 1:]) * m[:, 1:], 1)


def dpo_loss_tf(p, ref, xc, xr, mc, mr):
    dc = seq_logp_tf(p, xc, mc) - seq_logp_tf(ref, xc, mc)
    dr = seq_logp_tf(p, xr, mr) - seq_logp_tf(ref, xr, mr)
    return -jnp.mean(jax.nn.log_sigmoid(BETA * (dc - dr)))


OPT11 = optax.adam(3e-2)


def dpo_step(p, ref, st, xc, xr, mc, mr):
    loss, g = jax.value_and_grad(dpo_loss_tf)(p, ref, xc, xr, mc, mr)
    up, st = OPT11.update(g, st, p)
    return optax.apply_updates(p, up), st, loss


def dpo_step_dp(bug):
    def f(p, ref, st, xc, xr, mc, mr):
        r = jax.tree.map(lax.stop_gradient, p) if bug == "reference-from-policy" else ref
        loss, g = jax.value_and_grad(dpo_loss_tf)(p, r, xc, xr, mc, mr)
        if bug != "grads-not-pmean":
            g = pmean(g, "dp")
        up, st = OPT11.update(g, st, p)
        return optax.apply_updates(p, up), st, loss if bug == "loss-not-pmean" else pmean(loss, "dp")
    return f


P11, REF11 = tiny_params(), tiny_params()
S11 = OPT11.init(P11)
SP11 = jax.tree.map(lambda _: P(), P11)
SS11 = jax.tree.map(lambda _: P(), S11)
C.smap("s.dpo_train_step_tiny_transformer_adam.dp4", {"dp": 4}, dpo_step_dp,
       (SP11, SP11, SS11, P("dp"), P("dp"), P("dp"), P("dp")), (SP11, SS11, P()), dpo_step,
       (P11, REF11, S11, I(0, V11, N11, T11 + 1), I(0, V11, N11, T11 + 1),
        resp_mask(N11, T11 + 1), resp_mask(N11, T11 + 1)),
       bugs=[("grads-not-pmean", ["missing-collective"]), ("reference-from-policy", ["wrong-operand"]),
             ("loss-not-pmean", ["missing-collective"])])

# ---------------------------------------------------------------------------
# 12. Bradley-Terry reward-model training step, Megatron MLP head (dp2 x tp4), check_vma
N12, D12, F12 = 8, 8, 16
MARGIN = 0.5
OPT12 = optax.adamw(1e-2, weight_decay=0.01)


def rm_reward(p, x):
    return jax.nn.gelu(x @ p["w1"]) @ p["w2"] + p["b"]


def rm_loss(p, xc, xr):
    return -jnp.mean(jax.nn.log_sigmoid(rm_reward(p, xc) - rm_reward(p, xr) - MARGIN))


def rm_step(p, st, xc, xr):
    loss, g = jax.value_and_grad(rm_loss)(p, xc, xr)
    up, st = OPT12.update(g, st, p)
    return optax.apply_updates(p, up), st, loss, jnp.mean(rm_reward(p, xc))


def rm_step_tp(bug):
    def f(p, st, xc, xr):
        def reward(q, x):
            part = jax.nn.gelu(x @ q["w1"]) @ q["w2"]
            if bug == "bias-inside-psum":
                return psum(part + q["b"], "tp")
            return psum(part, "tp") + q["b"]

        def loss_fn(q):
            d = reward(q, xc) - reward(q, xr)
            if bug == "swapped-on-odd-dp":
                d = jnp.where(idx("dp") % 2 == 1, -d, d)
            return pmean(-jnp.mean(jax.nn.log_sigmoid(d - MARGIN)), "dp")
        loss, g = jax.value_and_grad(loss_fn)(p)
        up, st = OPT12.update(g, st, p)
        return optax.apply_updates(p, up), st, loss, pmean(jnp.mean(reward(p, xc)), "dp")
    return f


P12 = {"w1": R(D12, F12, scale=0.4), "w2": R(F12, scale=0.4), "b": np.float32(0.1)}
S12 = OPT12.init(P12)
SP12 = {"w1": P(None, "tp"), "w2": P("tp"), "b": P()}
SS12 = state_specs(S12, SP12)
C.smap("s.bt_reward_model_step_megatron_head.dp2xtp4", {"dp": 2, "tp": 4}, rm_step_tp,
       (SP12, SS12, P("dp"), P("dp")), (SP12, SS12, P(), P()), rm_step,
       (P12, S12, R(N12, D12), R(N12, D12)),
       bugs=[("bias-inside-psum", ["wrong-scale"]), ("swapped-on-odd-dp", ["wrong-operand"])], check_vma=True)


# 12b. the step of 12. as a user who adds the bias inside the psum writes it:
#      every tp rank adds b, so the rewards are off by (tp - 1) b, but the
#      loss sees only chosen - rejected and no metric reports the rewards:
#      the step computes the baseline's function (correct pair).
def rm_step_noreward(p, st, xc, xr):
    return rm_step(p, st, xc, xr)[:3]


def rm_step_bias_in_psum(bug):
    def f(p, st, xc, xr):
        def loss_fn(q):
            def reward(x):
                return psum(jax.nn.gelu(x @ q["w1"]) @ q["w2"] + q["b"], "tp")
            d = reward(xc) - reward(xr)
            if bug == "swapped-on-odd-dp":
                d = jnp.where(idx("dp") % 2 == 1, -d, d)
            return pmean(-jnp.mean(jax.nn.log_sigmoid(d - MARGIN)), "dp")
        loss, g = jax.value_and_grad(loss_fn)(p)
        up, st = OPT12.update(g, st, p)
        return optax.apply_updates(p, up), st, loss
    return f


C.smap("s.bt_rm_step_bias_in_psum_harmless.dp2xtp4", {"dp": 2, "tp": 4}, rm_step_bias_in_psum,
       (SP12, SS12, P("dp"), P("dp")), (SP12, SS12, P()), rm_step_noreward,
       (P12, S12, R(N12, D12), R(N12, D12)),
       bugs=[("swapped-on-odd-dp", ["wrong-operand"])], check_vma=True)

# ---------------------------------------------------------------------------
# 13. advantage whitening by all_gather of the flattened advantages (dp2 x sp4)
B13, T13 = 4, 8


def whiten_gather(adv, m):
    a = adv.reshape(-1)
    w = m.reshape(-1)
    mu = jnp.sum(a * w) / jnp.sum(w)
    sd = jnp.sqrt(jnp.sum(jnp.square(a - mu) * w) / (jnp.sum(w) - 1))
    return (adv - mu) / (sd + 1e-6) * m


def whiten_gather_sm(bug):
    def f(adv, m):
        ax = "sp" if bug == "gather-over-sp-only" else ("dp", "sp")
        a = lax.all_gather(adv, ax, tiled=True).reshape(-1)
        w = lax.all_gather(m, ax, tiled=True).reshape(-1)
        mu = jnp.sum(a * w) / jnp.sum(w)
        ddof = 0 if bug == "ddof-zero" else 1
        sd = jnp.sqrt(jnp.sum(jnp.square(a - mu) * w) / (jnp.sum(w) - ddof))
        return (adv - mu) / (sd + 1e-6) * m
    return f


C.smap("s.whiten_by_allgather_flattened.dp2xsp4", {"dp": 2, "sp": 4}, whiten_gather_sm, (P("dp", "sp"),) * 2,
       P("dp", "sp"), whiten_gather,
       (R(B13, T13) + np.arange(B13)[:, None].astype(np.float32), resp_mask(B13, T13)),
       bugs=[("gather-over-sp-only", ["wrong-axis"]), ("ddof-zero", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 14. rejection-sampling fine-tuning: keep the top 2 of N = 8 completions per
#     prompt by reward (N over dp4), NLL token mean over the kept ones
P14, N14, T14, D14, V14, KEEP = 3, 8, 5, 8, 16, 2


def rft_nll(h, w, tok, m, rw):
    thr = lax.top_k(rw, KEEP)[0][:, -1:]
    keep = (rw >= thr).astype(jnp.float32)[..., None] * m
    nll = -tok_logp(jnp.einsum("pntd,dv->pntv", h, w), tok)
    return jnp.sum(nll * keep) / jnp.maximum(jnp.sum(keep), 1.0), keep.sum((1, 2))


def rft_nll_dp(bug):
    def f(h, w, tok, m, rw):
        if bug == "threshold-local-topk":
            thr = lax.top_k(rw, KEEP)[0][:, -1:]
        else:
            thr = lax.top_k(lax.all_gather(rw, "dp", axis=1, tiled=True), KEEP)[0][:, -1:]
        keep = (rw >= thr).astype(jnp.float32)[..., None] * m
        nll = -tok_logp(jnp.einsum("pntd,dv->pntv", h, w), tok)
        cnt = jnp.sum(keep) if bug == "count-local" else psum(jnp.sum(keep), "dp")
        return psum(jnp.sum(nll * keep), "dp") / jnp.maximum(cnt, 1.0), psum(keep.sum((1, 2)), "dp")
    return f


C.smap("s.rejection_sampling_topk_nll.dp4", {"dp": 4}, rft_nll_dp,
       (P(None, "dp"), P(), P(None, "dp"), P(None, "dp"), P(None, "dp")), (P(), P()), rft_nll,
       (R(P14, N14, T14, D14), R(D14, V14, scale=0.5), I(0, V14, P14, N14, T14),
        resp_mask(P14 * N14, T14).reshape(P14, N14, T14), R(P14, N14)),
       bugs=[("threshold-local-topk", ["missing-collective"]), ("count-local", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 15. reward scores with the head's bias split as b / tp inside the psum,
#     then normalised over the global batch (dp2 x tp4)
B15, D15 = 8, 16


def rm_scores(h, w, b):
    r = h @ w + b
    mu = jnp.mean(r)
    return (r - mu) / jnp.sqrt(jnp.mean(jnp.square(r - mu)) + 1e-6), mu


def rm_scores_tp(bug):
    def f(h, w, b):
        tp = 4
        r = psum(h @ w + (b if bug == "bias-whole-in-psum" else b / tp), "tp")
        mu = pmean(jnp.mean(r), "dp")
        ms = jnp.mean(jnp.square(r - mu))
        var = ms if bug == "var-local" else pmean(ms, "dp")
        return (r - mu) / jnp.sqrt(var + 1e-6), mu
    return f


C.smap("s.rm_scores_bias_split_in_psum.dp2xtp4", {"dp": 2, "tp": 4}, rm_scores_tp, (P("dp", "tp"), P("tp"), P()),
       (P("dp"), P()), rm_scores, (R(B15, D15), R(D15, scale=0.5), np.float32(0.7)),
       bugs=[("bias-whole-in-psum", ["wrong-scale"]), ("var-local", ["missing-collective"])])

# ---------------------------------------------------------------------------
# 16. pairwise BT loss and its gradient with the bias added on every tp rank
#     inside the psum: the reward is off by (tp - 1) b, but the loss sees
#     only chosen - rejected, so the loss and the gradients of w and b are
#     those of the baseline (a harmless slip; the pair is correct).


def bt_loss_grad(hc, hr, w, b):
    def loss(w, b):
        return -jnp.mean(jax.nn.log_sigmoid((hc @ w + b) - (hr @ w + b)))
    return jax.value_and_grad(loss, (0, 1))(w, b)


def bt_loss_grad_tp(bug):
    def f(hc, hr, w, b):
        def loss(w, b):
            def rw(h):
                return psum(h @ w + b, ("dp", "tp") if bug == "psum-over-dp-and-tp" else "tp")
            d = rw(hc) - rw(hr)
            if bug == "rejected-minus-chosen":
                d = -d
            return pmean(-jnp.mean(jax.nn.log_sigmoid(d)), "dp")
        l, (gw, gb) = jax.value_and_grad(loss, (0, 1))(w, b)
        return l, (gw, gb)
    return f


C.smap("s.bt_bias_inside_psum_harmless.dp2xtp4", {"dp": 2, "tp": 4}, bt_loss_grad_tp,
       (P("dp", "tp"), P("dp", "tp"), P("tp"), P()), (P(), (P("tp"), P())), bt_loss_grad,
       (R(B15, D15), R(B15, D15), R(D15, scale=0.5), np.float32(0.7)),
       bugs=[("psum-over-dp-and-tp", ["wrong-axis"]), ("rejected-minus-chosen", ["wrong-operand"])], check_vma=True)

# ---------------------------------------------------------------------------
# 22. GRPO advantages with strided groups (row r in group r % 4, one member
#     of every group per device on dp4): all_to_all brings each group to
#     one device, normalised there, and a second all_to_all returns it.
N22, G22 = 16, 4


def grpo_strided(rw):
    g = rw.reshape(N22 // G22, G22).T  # (group, member)
    a = (g - g.mean(1, keepdims=True)) / (jnp.std(g, 1, keepdims=True, ddof=1) + 1e-4)
    return a.T.reshape(-1)


def grpo_a2a(bug):
    def f(rw):
        x = rw[:, None]  # (4 groups, 1)
        if bug == "normalised-before-exchange":
            x = (x - x.mean()) / (jnp.std(x, ddof=1) + 1e-4)
            return x[:, 0]
        g = lax.all_to_all(x, "dp", 0, 1, tiled=True)  # (1, 4 members)
        a = (g - g.mean(1, keepdims=True)) / (jnp.std(g, 1, keepdims=True, ddof=1) + 1e-4)
        if bug == "no-return-all-to-all":
            return a.reshape(-1)
        return lax.all_to_all(a, "dp", 1, 0, tiled=True)[:, 0]
    return f


C.smap("s.grpo_strided_groups_all_to_all.dp4", {"dp": 4}, grpo_a2a, (P("dp"),), P("dp"), grpo_strided,
       (R(N22) + np.tile(np.arange(G22) * 2.0, N22 // G22).astype(np.float32),),
       bugs=[("no-return-all-to-all", ["wrong-layout"]), ("normalised-before-exchange", ["missing-collective"])])

# ---------------------------------------------------------------------------
# 23. DPO with the sequence over sp4 (batch over dp2): per-row sums of the
#     policy and reference log-probs all-reduced as psum_scatter over sp
#     followed by a tiled all_gather over sp.
N23, T23 = 8, 16


def dpo_rows(lpc, lpr, rfc, rfr):
    d = BETA * ((lpc.sum(1) - rfc.sum(1)) - (lpr.sum(1) - rfr.sum(1)))
    return -jnp.mean(jax.nn.log_sigmoid(d)), d


def dpo_rs_ag(bug):
    def f(lpc, lpr, rfc, rfr):
        st = jnp.stack([lpc.sum(1), lpr.sum(1), rfc.sum(1), rfr.sum(1)], 1)  # (4 rows, 4)
        ax = "dp" if bug == "reduce-over-dp" else "sp"
        red = lax.all_gather(lax.psum_scatter(st, ax, scatter_dimension=0, tiled=True), ax, axis=0, tiled=True)
        if bug == "reference-unreduced":
            red = red.at[:, 2:].set(st[:, 2:])
        d = BETA * ((red[:, 0] - red[:, 2]) - (red[:, 1] - red[:, 3]))
        return pmean(-jnp.mean(jax.nn.log_sigmoid(d)), "dp"), d
    return f


C.smap("s.dpo_seq_sums_reduce_scatter_all_gather.dp2xsp4", {"dp": 2, "sp": 4}, dpo_rs_ag, (P("dp", "sp"),) * 4,
       (P(), P("dp")), dpo_rows,
       tuple(R(N23, T23, scale=0.5) - 2.0 for _ in range(4)),
       bugs=[("reduce-over-dp", ["wrong-axis"]), ("reference-unreduced", ["missing-collective"])])

# ---------------------------------------------------------------------------
# GSPMD pairs
# 17. DPO loss + head gradient from vocab-sharded logits (dp2 x tp4)
C.gspmd("g.dpo_loss_head_grad_vocab_sharded.dp2xtp4", {"dp": 2, "tp": 4},
        (P("dp"), P(None, "tp"), P("dp"), P("dp"), P("dp")), (P(), P(None, "tp")),
        lambda h, w, ref, tgt, m: jax.value_and_grad(lambda ww: dpo_interleaved(h, ww, ref, tgt, m)[0])(w),
        (R(B1, T1, D1), R(D1, V1, scale=0.5), R(B1, T1, scale=0.5) - 3.0, I(0, V1, B1, T1), resp_mask(B1, T1)))

# 18. GAE by reverse scan with the batch over dp8 and global whitening
B14 = 16


def gae_whiten(lp, ref, v, score, eos, m):
    adv, ret = gae_tokens(lp, ref, v, score, eos)
    return whiten(adv, m), ret


C.gspmd("g.gae_reverse_scan_global_whiten.dp8", {"dp": 8}, (P("dp"),) * 6, (P("dp"), P("dp")), gae_whiten,
        (R(B14, 8) - 2.0, R(B14, 8) - 2.0, R(B14, 8), R(B14), I(3, 8, B14), resp_mask(B14, 8)))

# 19. GRPO group advantages by reshape (groups of 8 over dp8, 4 rows each)
N15 = 32
C.gspmd("g.grpo_reshape_groups_clipped_loss.dp8", {"dp": 8}, (P("dp"),) * 5, (P(), P("dp")), grpo,
        (R(N15) + np.repeat(np.arange(4) * 2.0, G7).astype(np.float32), R(N15, T7) - 1.0, R(N15, T7) - 1.0,
         R(N15, T7) - 1.0, resp_mask(N15, T7)))

# 20. best-of-n with the N axis over dp4 (reward head replicated)
C.gspmd("g.best_of_n_argmax_take.dp4", {"dp": 4}, (P(None, "dp"), P(), P(None, "dp")), (P(), P(), P()),
        best_of_n, (R(P8, N8, D8), R(D8), I(1, 50, P8, N8, T8)))

# 21. DPO training step of 11. with Megatron-sharded parameters (tp4), batch over dp2, adamw
OPT17 = optax.adamw(3e-2, weight_decay=0.01)


def dpo_step17(p, ref, st, xc, xr, mc, mr):
    loss, g = jax.value_and_grad(dpo_loss_tf)(p, ref, xc, xr, mc, mr)
    up, st = OPT17.update(g, st, p)
    return optax.apply_updates(p, up), st, loss


SP17 = {"emb": P(), "wq": P(None, "tp"), "wk": P(None, "tp"), "wv": P(None, "tp"), "wo": P("tp"),
        "w1": P(None, "tp"), "w2": P("tp"), "head": P(None, "tp")}
S17 = OPT17.init(P11)
SS17 = state_specs(S17, SP17)
C.gspmd("g.dpo_train_step_megatron_adamw.dp2xtp4", {"dp": 2, "tp": 4},
        (SP17, SP17, SS17, P("dp"), P("dp"), P("dp"), P("dp")), (SP17, SS17, P()), dpo_step17,
        (P11, REF11, S17, I(0, V11, N11, T11 + 1), I(0, V11, N11, T11 + 1),
         resp_mask(N11, T11 + 1), resp_mask(N11, T11 + 1)))

C.finish()
