"""samples/fresh78: a 78th batch of programs as a user writes them, on the theme of LLM post-training objectives under data, tensor (vocab-parallel) and sequence parallelism in current JAX / optax (SimPO, ORPO, KTO, conservative DPO on a concatenated chosen|rejected batch, RLOO and GRPO with strided groups, DAPO token-level PPO with a k3 KL, REINFORCE with the exp(logp - sg(logp)) trick and an entropy bonus, REINFORCE returns with a per-token KL penalty, Bradley-Terry reward heads with a margin), none of them an idiom of samples/fresh .. fresh26, probe, train or wild.
shard_map families:
 1. SimPO: length-normalised sequence log-probs with pairs over dp2 and the
    sequence over sp4, reward margin gamma; the per-sequence sums and token
    counts both pmean'd over sp (the 1/sp cancels in the ratio), the loss
    pmean'd over dp. Bugs: the sums pmean'd but the counts psum'd (the
    average 4x too small), the counts local.
 2. per-token log-probs and entropies from logits sharded (None, sp, tp)
    (vocab over tp4, sequence over sp2): the target's logit by a one_hot of
    (target - vocab offset) with the local vocabulary size (out-of-range ids
    give a zero row), the log-sum-exp from a pmax'd stop_gradient maximum.
    Bugs: log-softmax over the local vocab shard, the vocab offset from the
    sp index, the offset one shard too far.
 3. response masks built from prompt and response lengths at global
    positions (sequence over sp4, batch over dp2); a k2 KL (0.5 log-ratio^2)
    to the reference reduced two ways: seq-mean-token-mean and the global
    token mean. Bugs: local positions, the mask starting one token late
    (pos > prompt_len), the token mean's count not psum'd over dp.
 4. GRPO advantages with 4 groups of 6 completions laid out strided (row r
    in group r % 4) and 6 rows per device over dp4, so every group spans
    all devices: per-group sums, sums of squares by one_hot matmuls psum'd,
    unbiased std. Bugs: group ids from local row indices, advantages
    normalised over the device's rows instead of per group, biased std.
    (A first draft's "per-device group statistics" bug divided by n - 1 = 0
    for groups with one local member, NaN; replaced.)
 5. RLOO: (prompts, K=8) rewards with the K axis over dp4; the leave-one-out
    baseline (sum - r) / (K - 1) from a psum'd sum; the REINFORCE loss
    -mean(adv * seq_logp). Bugs: K - 1 from the local K, the sum local, the
    loss's mean not pmean'd over dp.
 6. DAPO-style token-level PPO loss (asymmetric clip 0.2 / 0.28, clip-higher)
    plus beta * k3 KL to the reference, normalised by the global number of
    response tokens (dp2 x sp4), and the clip fraction. Bugs: the KL's
    log-ratio with the wrong sign, the token count local.
 7. REINFORCE with the exp(logp - stop_gradient(logp)) surrogate and an
    entropy bonus, vocab-parallel head (vocab over tp4, batch over dp2),
    jax.value_and_grad inside the body (check_vma=True) returning the loss
    and the head's gradient. Bugs: the stop_gradient left out (the value is
    the same, the gradient of the policy term vanishes), the entropy's
    log-sum-exp over the local shard (the loss then pmean'd over tp, which
    check_vma needs).
 8. conservative DPO (label smoothing 0.1) on a concatenated batch: rows
    [chosen_0..7, rejected_0..7] over dp4, so the rejected partners of
    devices 0, 1 live on devices 2, 3 and come by ppermute (d -> d+2 mod 4);
    loss and reward accuracy psum'd from devices 0, 1 over P. Bugs: the
    ppermute shift 1 instead of 2, the loss pmean'd over all four devices.
 9. KTO with the KL reference point z0 = max(0, mean(kl_logp - kl_ref)),
    detached, over the batch (dp4); desirable and undesirable weights.
    Bugs: z0 per device, the clamp applied per device before the pmean,
    the undesirable term with the desirable sign.
10. ORPO: NLL of the chosen responses as a global token mean plus
    lambda * -log_sigmoid(log-odds_c - log-odds_r), log-odds from
    length-normalised log-probs (pairs over dp2, sequence over sp4). Bugs:
    the length normalisation from the block's tokens, the NLL's count from
    the device's own tokens. The average log-prob is clamped to <= -1e-4
    before log1p(-exp(a)) and counts guarded by maximum(count, 1): the first
    draft had neither, and the witness's random (positive) log-probs made
    every output NaN in both programs, so both bugs stayed unverified.
11. REINFORCE returns (gamma 1) of token rewards -beta * (logp - ref) plus
    the score at the last response token (global index given), sequence
    over sp4: a local reverse cumsum plus the totals of later blocks from an
    all_gather. Bugs: the KL penalty with the wrong sign, the carry from
    earlier blocks, the score position compared with local indices.
12. Bradley-Terry reward-model loss with a margin (Llama-2 style) on pooled
    hidden states with the hidden dim over tp4, pairs over dp2; the loss,
    accuracy and mean reward. Bugs: the bias added before the psum, the
    reward not psum'd over tp, the loss not pmean'd over dp.
13. response masks from the prompt length up to and including the first
    EOS after it, the first EOS's global index by a pmin over sp4 (batch
    over dp2); length-normalised sequence log-probs and the token mean.
    Bugs: pmax instead of pmin, the first EOS local, the EOS excluded.
14. DPO from logits sharded (None, sp2, tp4) with the target found by
    comparing a global vocab iota (arange + offset) with the target, the
    sequence sums psum'd over sp, and the gradients of both logits by
    jax.value_and_grad inside the body (check_vma=True). Bugs: the iota
    without the vocab offset, the sequence sum not psum'd (loss pmean'd
    over sp, which check_vma needs).
15. GRPO with binary rewards (two groups all-equal: std 0), groups x K with
    K over dp4: group sums and squared deviations by psum_scatter over the
    group dim then all_gather (tiled); the fraction of groups with non-zero
    std. Bugs: the mean over the local K, the variance around the local
    mean.
16. PPO with gradient accumulation: a lax.scan over 2 micro-batches per
    device, the value_and_grad of each micro-batch's masked sum over the
    global token count, grads psum'd by hand over dp (check_vma=False, no
    collective inside the differentiated function), an SGD step. Bugs:
    each micro-batch normalised by its own count, the grads pmean'd.
17. IPO on a 3-axis mesh dp2 x sp2 x tp2: sequence log-probs from a
    vocab-parallel head (one_hot target, pmax / psum over tp, psum over
    sp). Bugs: log-sum-exp over the local vocab, the sequence sum psum'd
    over dp.
18. GRPO with the rewards replicated: every device computes all group
    advantages and takes its rows by dynamic_slice at axis_index * rows;
    per-sequence token means, pmean over dp4. Bugs: the slice offset
    axis_index * K, the next device's rows.
19. DPO computed redundantly on every device from sequence sums
    all_gather'd (tiled, axis 1 of a (2, pairs) stack) over dp4, returning
    the loss and the implicit rewards. Bug: all_gather untiled on a new
    axis 0 and reshaped to (2, P) (chosen / rejected interleaved). (A first
    draft's bug gathered tiled along axis 0, which changed the output
    shape; replaced.)
20. a reward model read at each sequence's last real token (global index
    lens - 1) by a one_hot against the block's local positions (zero rows
    elsewhere) and a psum over sp4, pairs as the two batch halves. Bugs:
    the index without the block offset, the selection pmean'd.
21. a per-sequence k1 KL mean and the batch's entropy token mean, dp4 x
    sp2, with int32 token counts psum'd and cast, the entropy sums
    psum_scatter'd over sp then psum'd over both axes. Bugs: the k1
    log-ratio reversed (ref - logp), the batch count not psum'd over dp.
22. a response mask up to and including the first EOS from a cumsum of EOS
    flags, sequence over sp4: a local cumsum plus an exclusive prefix of
    the earlier blocks' EOS counts (all_gather'd). Bugs: an inclusive
    prefix, the prefix from later blocks.
23. per-token log-probs and entropies with the global log-sum-exp merged
    as logsumexp over the all_gather'd local log-sum-exps (dp2 x tp4).
    Bugs: the local log-sum-exp, the merge by pmax.
24. the same with local maxima: the global sum of exponentials as
    psum(exp(m_local - m_global) * s_local) (an online-softmax merge), the
    target by comparing a global vocab iota (sp2 x tp4). Bugs: no rescale,
    the rescale factor inverted.
25. unmasked length-normalised log-probs as the pmean over sp of the block
    means (equal blocks), a SimPO-style loss (dp2 x sp4). Bugs: the block
    means psum'd, pmean'd over dp instead of sp.
26. per-token log-probs and entropies from bf16 logits, upcast to f32 on
    each shard before the pmax / psum (dp2 x tp4). Bugs: the sums of
    exponentials psum'd in bf16 (a precision bug), the maximum not pmax'd.
27. GRPO advantages of bf16 rewards with the group statistics in f32 (psum
    of f32 sums, K over dp4) cast to bf16 as jnp.mean / jnp.std of bf16
    do. Bugs: the variance from the local K only, the mean divided by the
    number of groups.
28. rollout metrics (vocab over tp4, batch over dp2): the response token
    count summed as int32 and cast to f32 on each device before the psum
    (exact below 2^24), the mean response length, the masked mean KL, and
    the per-token max logit cast to bf16 before the pmax over tp (rounding
    is monotone, so max and the cast commute: exact). Bugs: the count not
    psum'd, the max by pmin.
29. DPO with everything in bf16 as a bf16 training run has it: per-token
    log-probs, masks cast to bf16, sequence sums and their psum over sp4 in
    bf16, pairs over dp2 (the baseline sums in bf16 too). Bugs: the
    sequence sums psum'd over dp, the rejected reference added.
30. DPO from vocab-parallel f32 logits (the one_hot log-probs body of 2.,
    on a dp2 x tp4 mesh) with the implicit-reward margins and the loss in
    bf16, the loss pmean'd over dp in bf16. Bugs: the local log-softmax, the loss psum'd.
31. the masked mean response log-prob and entropy from vocab-parallel
    logits (the body of 2. on dp2 x tp4), the int32 token count cast to f32
    on each device before the psum (exact below 2^24). Bugs: the count
    local, the count pmean'd.
32. the strided-group GRPO advantages of 4. with a REINFORCE loss
    (-mean(adv * seq_logp)) cast to bf16 and pmean'd over dp4 in bf16.
    Bugs: group ids from local rows, the loss psum'd.
GSPMD pairs (jax.jit with in/out shardings): 33. DPO from vocab-sharded
chosen / rejected logits with log_softmax and take_along_axis (dp2 x tp4);
34. GRPO strided-group advantages and the DAPO token loss on dp8; 35. one
optax.adamw step of a SimPO loss on a vocab-parallel head (dp2 x tp4);
36. a PPO token loss with a per-token k1 KL penalty and an entropy bonus
from logits with the sequence over sp4 and the batch over dp2; 37. the EOS
response masks of 13.; 38. one optax.adam step of a GRPO loss with a k3 KL
on a tiny policy (embedding, tanh MLP, head; w1 over tp on its output dim,
the head over tp on its input dim, Adam moments sharded alike, binary
rewards of 2 groups of 8 with K over dp4); 39. the ORPO loss of 10.;
40. the last-token reward model of 20. with take_along_axis; 41. the
cumsum EOS mask of 22. with the sequence over sp4; 42. a SimPO loss of a bf16
vocab-parallel head with f32 accumulation (preferred_element_type).
Numerics: every correct pair agrees with its baseline at rounding level (f32:
at most 3.8e-6 on values up to 52; the bf16 GRPO of 27. 7.8e-3 on values up
to 2.25, half a bf16 ulp; 29. and 30. exactly); every bug variant differs
clearly (the smallest: 6. kl-sign 0.013 on 0.44, 9. undesirable-sign
0.017, 26.'s bf16 psum 0.019 on 8.3, a precision bug). Masks are bool
inputs; counts are guarded where a mask may be empty. Second-draft changes:
4.'s "per-device group statistics" bug (NaN, see 4.), 10.'s clamp (see
10.), 19.'s bug (see 19.), 7.'s and 14.'s bugs pmean'd for check_vma.
Checker outcome when committed (scalify check, witness on): 22 of 42
correct pairs verified, 18 unverified, 2 mismatch (30. and 32., a
dtype-mismatch at the bf16 loss's pmean over dp: the same convert +
all-reduce that 29.'s verified program has, flagged only where the
upstream log-softmax or group statistics are not related); 71 of 71 bug
variants mismatch.
Exported with scalify_jax.export_pair; every pair is also run by JAX on
seeded inputs and its manifest entry records the largest difference from
the single-device run ("numerics").
Run from the repository root: bash samples/gen/run_fresh78.sh [SUBSTR...]
(only the pairs whose name contains a SUBSTR; the others keep their entries).
"""
import sys
import numpy as np
import jax, jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec as P
import optax
sys.path.insert(0, "samples/gen")  # run from the repository root (run_fresh78.sh)
from fresh_lib import Corpus, seeded  # noqa: E402

SCRIPT = "samples/gen/fresh78.py"
C = Corpus("samples/fresh78", SCRIPT, "samples/gen/run_fresh78.sh", sys.argv[1:])
rng, R, I = seeded(7878)
psum, pmax, pmean, idx = lax.psum, lax.pmax, lax.pmean, lax.axis_index
f32 = jnp.float32
lsig = jax.nn.log_sigmoid


def M(*s, p=0.75):
    return rng.random(s) < p


def LP(*s):
    """Per-token log-probs (negative)."""
    return (-np.abs(rng.standard_normal(s)) - 0.05).astype(np.float32)


# ---------------------------------------------------------------------------
# 1. SimPO
B1, T1 = 4, 16
BETA_S, GAMMA_S = 2.0, 0.5


def simpo(lc, lr, mc, mr):
    mc, mr = mc.astype(f32), mr.astype(f32)
    ac = jnp.sum(lc * mc, 1) / jnp.sum(mc, 1)
    ar = jnp.sum(lr * mr, 1) / jnp.sum(mr, 1)
    z = BETA_S * (ac - ar) - GAMMA_S
    return -jnp.mean(lsig(z)), jnp.mean(BETA_S * (ac - ar))


def simpo_sm(bug):
    def f(lc, lr, mc, mr):
        mc, mr = mc.astype(f32), mr.astype(f32)
        cnt = (lambda x: x) if bug == "count-local" else (
            (lambda x: psum(x, "sp")) if bug == "sum-pmean-count-psum" else (lambda x: pmean(x, "sp")))
        ac = pmean(jnp.sum(lc * mc, 1), "sp") / cnt(jnp.sum(mc, 1))
        ar = pmean(jnp.sum(lr * mr, 1), "sp") / cnt(jnp.sum(mr, 1))
        z = BETA_S * (ac - ar) - GAMMA_S
        return pmean(-jnp.mean(lsig(z)), "dp"), pmean(jnp.mean(BETA_S * (ac - ar)), "dp")
    return f


mc1 = M(B1, T1); mc1[:, 0] = True
mr1 = M(B1, T1); mr1[:, 0] = True
C.smap("s.simpo_len_norm_pmean_ratio.dp2xsp4", {"dp": 2, "sp": 4}, simpo_sm, (P("dp", "sp"),) * 4, (P(), P()),
       simpo, (LP(B1, T1), LP(B1, T1), mc1, mr1),
       bugs=[("sum-pmean-count-psum", ["wrong-collective-op"]), ("count-local", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 2. token log-probs / entropy from logits over (sp, tp)
B2, T2, V2 = 2, 8, 32


def logp_ent(z, y):
    ls = jax.nn.log_softmax(z, -1)
    return jnp.take_along_axis(ls, y[..., None], -1)[..., 0], -jnp.sum(jnp.exp(ls) * ls, -1)


def logp_ent_sm(bug):
    def f(z, y):
        vl = z.shape[-1]
        if bug == "local-log-softmax":
            m = lax.stop_gradient(z.max(-1))
            lse = m + jnp.log(jnp.sum(jnp.exp(z - m[..., None]), -1))
        else:
            m = pmax(lax.stop_gradient(z.max(-1)), "tp")
            lse = m + jnp.log(psum(jnp.sum(jnp.exp(z - m[..., None]), -1), "tp"))
        if bug == "offset-from-sp":
            off = idx("sp") * vl
        elif bug == "offset-next-shard":
            off = (idx("tp") + 1) * vl
        else:
            off = idx("tp") * vl
        oh = jax.nn.one_hot(y - off, vl, dtype=z.dtype)
        zy = psum(jnp.sum(oh * z, -1), "tp")
        p = jnp.exp(z - lse[..., None])
        ent = lse - psum(jnp.sum(p * z, -1), "tp")
        return zy - lse, ent
    return f


C.smap("s.token_logp_entropy_onehot_offset.sp2xtp4", {"sp": 2, "tp": 4}, logp_ent_sm,
       (P(None, "sp", "tp"), P(None, "sp")), (P(None, "sp"), P(None, "sp")), logp_ent,
       (R(B2, T2, V2, scale=2.0), I(0, V2, B2, T2)),
       bugs=[("local-log-softmax", ["missing-all-reduce"]), ("offset-from-sp", ["wrong-offset"]),
             ("offset-next-shard", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 3. response masks from prompt lengths, k2 KL two ways
B3, T3 = 4, 16


def resp_mask(t, plen, rlen):
    return (t[None, :] >= plen[:, None]) & (t[None, :] < (plen + rlen)[:, None])


def k2_kl(lp, ref, plen, rlen):
    m = resp_mask(jnp.arange(lp.shape[1]), plen, rlen).astype(f32)
    k2 = 0.5 * jnp.square(lp - ref)
    seq = jnp.sum(k2 * m, 1) / jnp.maximum(jnp.sum(m, 1), 1.0)
    return jnp.mean(seq), jnp.sum(k2 * m) / jnp.maximum(jnp.sum(m), 1.0)


def k2_kl_sm(bug):
    def f(lp, ref, plen, rlen):
        tl = lp.shape[1]
        t = jnp.arange(tl) if bug == "local-positions" else idx("sp") * tl + jnp.arange(tl)
        if bug == "mask-starts-late":
            m = (t[None, :] > plen[:, None]) & (t[None, :] < (plen + rlen)[:, None])
        else:
            m = resp_mask(t, plen, rlen)
        m = m.astype(f32)
        k2 = 0.5 * jnp.square(lp - ref)
        s, c = psum(jnp.sum(k2 * m, 1), "sp"), psum(jnp.sum(m, 1), "sp")
        seq = pmean(jnp.mean(s / jnp.maximum(c, 1.0)), "dp")
        tot = psum(jnp.sum(s), "dp")
        n = jnp.sum(c) if bug == "token-count-not-psummed-dp" else psum(jnp.sum(c), "dp")
        return seq, tot / jnp.maximum(n, 1.0)
    return f


plen3 = np.array([3, 6, 1, 9], np.int32)
rlen3 = np.array([7, 9, 12, 5], np.int32)
C.smap("s.resp_mask_prompt_len_k2_kl.dp2xsp4", {"dp": 2, "sp": 4}, k2_kl_sm,
       (P("dp", "sp"), P("dp", "sp"), P("dp"), P("dp")), (P(), P()), k2_kl,
       (R(B3, T3), R(B3, T3), plen3, rlen3),
       bugs=[("local-positions", ["wrong-offset"]), ("mask-starts-late", ["wrong-offset"]),
             ("token-count-not-psummed-dp", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 4. GRPO advantages with strided groups
NG4, GS4 = 4, 6
N4 = NG4 * GS4


def grpo_strided(r):
    g = r.reshape(GS4, NG4)  # row r -> group r % 4
    mu = g.mean(0)
    sd = g.std(0, ddof=1)
    return ((g - mu) / (sd + 1e-4)).reshape(-1)


def grpo_strided_sm(bug):
    def f(r):
        nl = r.shape[0]
        rows = jnp.arange(nl) if bug == "local-group-id" else idx("dp") * nl + jnp.arange(nl)
        oh = jax.nn.one_hot(rows % NG4, NG4, dtype=r.dtype)  # (nl, g)
        if bug == "per-device-norm":  # normalised over the device's rows, not per group
            return (r - jnp.mean(r)) / (jnp.std(r, ddof=1) + 1e-4)
        s, ss, n = psum(r @ oh, "dp"), psum((r * r) @ oh, "dp"), psum(jnp.sum(oh, 0), "dp")
        mu = s / n
        var = (ss - n * mu * mu) / (n if bug == "biased-std" else n - 1)
        sd = jnp.sqrt(jnp.maximum(var, 0.0))
        return (r - oh @ mu) / (oh @ sd + 1e-4)
    return f


C.smap("s.grpo_adv_strided_groups.dp4", {"dp": 4}, grpo_strided_sm, (P("dp"),), P("dp"), grpo_strided,
       (R(N4) + np.tile(np.arange(NG4, dtype=np.float32), GS4),),
       bugs=[("local-group-id", ["wrong-offset"]), ("per-device-norm", ["missing-all-reduce"]),
             ("biased-std", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 5. RLOO with the K axis over dp
P5, K5 = 4, 8


def rloo(r, slp):
    base = (jnp.sum(r, 1, keepdims=True) - r) / (K5 - 1)
    adv = r - base
    return adv, -jnp.mean(lax.stop_gradient(adv) * slp)


def rloo_sm(bug):
    def f(r, slp):
        kl = r.shape[1]
        tot = jnp.sum(r, 1, keepdims=True)
        if bug != "sum-local":
            tot = psum(tot, "dp")
        k = kl if bug == "k-local" else psum(kl, "dp")
        adv = r - (tot - r) / (k - 1)
        loss = -jnp.mean(lax.stop_gradient(adv) * slp)
        return adv, (loss if bug == "loss-not-pmeaned" else pmean(loss, "dp"))
    return f


C.smap("s.rloo_leave_one_out_k_over_dp.dp4", {"dp": 4}, rloo_sm, (P(None, "dp"), P(None, "dp")),
       (P(None, "dp"), P()), rloo, (R(P5, K5), LP(P5, K5) * 5),
       bugs=[("k-local", ["wrong-scale"]), ("sum-local", ["missing-all-reduce"]),
             ("loss-not-pmeaned", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 6. DAPO token-level PPO + k3 KL
B6, T6 = 4, 16
CLO, CHI, BETA6 = 0.2, 0.28, 0.1


def dapo_terms(lp, old, ref, adv, m, sign=1.0):
    ratio = jnp.exp(lp - old)
    a = adv[:, None]
    pg = -jnp.minimum(ratio * a, jnp.clip(ratio, 1 - CLO, 1 + CHI) * a)
    d = sign * (ref - lp)
    kl = jnp.exp(d) - d - 1
    clipped = ((ratio < 1 - CLO) | (ratio > 1 + CHI)).astype(f32)
    return jnp.sum((pg + BETA6 * kl) * m), jnp.sum(clipped * m), jnp.sum(m)


def dapo(lp, old, ref, adv, mask):
    s, c, n = dapo_terms(lp, old, ref, adv, mask.astype(f32))
    return s / n, c / n


def dapo_sm(bug):
    def f(lp, old, ref, adv, mask):
        s, c, n = dapo_terms(lp, old, ref, adv, mask.astype(f32), -1.0 if bug == "kl-sign" else 1.0)
        s, c = psum(s, ("dp", "sp")), psum(c, ("dp", "sp"))
        if bug != "token-count-local":
            n = psum(n, ("dp", "sp"))
        return s / n, c / n
    return f


lp6 = LP(B6, T6)
C.smap("s.dapo_token_level_ppo_k3.dp2xsp4", {"dp": 2, "sp": 4}, dapo_sm,
       (P("dp", "sp"),) * 3 + (P("dp"), P("dp", "sp")), (P(), P()), dapo,
       (lp6, lp6 + R(B6, T6, scale=0.3), lp6 + R(B6, T6, scale=0.8), R(B6), M(B6, T6)),
       bugs=[("kl-sign", ["wrong-value"]), ("token-count-local", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 7. REINFORCE with the sg trick and an entropy bonus, vocab over tp
B7, T7, D7, V7 = 4, 6, 8, 32
ENT7 = 0.01


def reinforce(h, w, y, adv, mask):
    m = mask.astype(f32)

    def loss(w):
        ls = jax.nn.log_softmax(jnp.einsum("btd,dv->btv", h, w), -1)
        lp = jnp.take_along_axis(ls, y[..., None], -1)[..., 0]
        ent = -jnp.sum(jnp.exp(ls) * ls, -1)
        sur = jnp.exp(lp - lax.stop_gradient(lp)) * adv[:, None]
        return -jnp.sum((sur + ENT7 * ent) * m) / jnp.sum(m)
    return jax.value_and_grad(loss)(w)


def reinforce_sm(bug):
    def f(h, w, y, adv, mask):
        m = mask.astype(f32)
        n = psum(jnp.sum(m), "dp")

        def loss(w):
            z = jnp.einsum("btd,dv->btv", h, w)
            vl = z.shape[-1]
            mx = pmax(lax.stop_gradient(z.max(-1)), "tp")
            lse = mx + jnp.log(psum(jnp.sum(jnp.exp(z - mx[..., None]), -1), "tp"))
            loc = y - idx("tp") * vl
            hit = (loc >= 0) & (loc < vl)
            zy = psum(jnp.where(hit, jnp.take_along_axis(z, jnp.clip(loc, 0, vl - 1)[..., None], -1)[..., 0], 0.0), "tp")
            lp = zy - lse
            if bug == "entropy-local-lse":
                ml = lax.stop_gradient(z.max(-1))
                lse_e = ml + jnp.log(jnp.sum(jnp.exp(z - ml[..., None]), -1))
            else:
                lse_e = lse
            p = jnp.exp(z - lse_e[..., None])
            ent = lse_e - psum(jnp.sum(p * z, -1), "tp")
            old = lp if bug == "no-stop-gradient" else lax.stop_gradient(lp)
            sur = jnp.exp(lp - old) * adv[:, None]
            out = -psum(jnp.sum((sur + ENT7 * ent) * m), "dp") / n
            # the local-lse entropy leaves the loss tp-varying; check_vma then needs a pmean over tp
            return pmean(out, "tp") if bug == "entropy-local-lse" else out
        return jax.value_and_grad(loss)(w)
    return f


C.smap("s.reinforce_sg_trick_entropy_grad.dp2xtp4", {"dp": 2, "tp": 4}, reinforce_sm,
       (P("dp"), P(None, "tp"), P("dp"), P("dp"), P("dp")), (P(), P(None, "tp")), reinforce,
       (R(B7, T7, D7), R(D7, V7, scale=0.5), I(0, V7, B7, T7), R(B7), M(B7, T7)), check_vma=True,
       bugs=[("no-stop-gradient", ["wrong-value"]), ("entropy-local-lse", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 8. conservative DPO on a concatenated chosen|rejected batch over dp4
P8, T8 = 8, 6
BETA8, LS8 = 0.5, 0.1


def cdpo_z(s, rs, sr, rsr):
    return BETA8 * ((s - sr) - (rs - rsr))


def cdpo_loss(z):
    return -(1 - LS8) * lsig(z) - LS8 * lsig(-z)


def cdpo(lp, ref, mask):
    m = mask.astype(f32)
    s, rs = jnp.sum(lp * m, 1), jnp.sum(ref * m, 1)
    z = cdpo_z(s[:P8], rs[:P8], s[P8:], rs[P8:])
    return jnp.mean(cdpo_loss(z)), jnp.mean((z > 0).astype(f32))


def cdpo_sm(bug):
    def f(lp, ref, mask):
        m = mask.astype(f32)
        s, rs = jnp.sum(lp * m, 1), jnp.sum(ref * m, 1)
        sh = 1 if bug == "shift-one" else 2
        perm = [(d, (d + sh) % 4) for d in range(4)]
        sr, rsr = lax.ppermute(s, "dp", perm), lax.ppermute(rs, "dp", perm)
        # devices 0, 1 hold chosen rows; their rejected partners arrive from 2, 3
        z = cdpo_z(s, rs, sr, rsr)
        own = (idx("dp") < 2).astype(f32)
        l_sum, a_sum = jnp.sum(cdpo_loss(z)) * own, jnp.sum((z > 0).astype(f32)) * own
        if bug == "pmean-all-devices":
            return pmean(l_sum / s.shape[0], "dp"), psum(a_sum, "dp") / P8
        return psum(l_sum, "dp") / P8, psum(a_sum, "dp") / P8
    return f


C.smap("s.cdpo_concat_batch_ppermute_partner.dp4", {"dp": 4}, cdpo_sm, (P("dp"),) * 3, (P(), P()), cdpo,
       (LP(2 * P8, T8), LP(2 * P8, T8), M(2 * P8, T8)),
       bugs=[("shift-one", ["wrong-permutation"]), ("pmean-all-devices", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 9. KTO
B9 = 16
BETA9, LD9, LU9 = 0.3, 1.0, 1.33


def kto_terms(lp, rp, des, z0, usign=1.0):
    rw = lp - rp
    ld = LD9 * (1 - jax.nn.sigmoid(BETA9 * (rw - z0)))
    lu = LU9 * (1 - jax.nn.sigmoid(usign * BETA9 * (z0 - rw)))
    return jnp.where(des, ld, lu)


def kto(lp, rp, des, klp, klr):
    z0 = lax.stop_gradient(jnp.maximum(jnp.mean(klp - klr), 0.0))
    return jnp.mean(kto_terms(lp, rp, des, z0)), z0


def kto_sm(bug):
    def f(lp, rp, des, klp, klr):
        loc = jnp.mean(klp - klr)
        if bug == "z0-local":
            z0 = jnp.maximum(loc, 0.0)
        elif bug == "clamp-before-pmean":
            z0 = pmean(jnp.maximum(loc, 0.0), "dp")
        else:
            z0 = jnp.maximum(pmean(loc, "dp"), 0.0)
        z0 = lax.stop_gradient(z0)
        t = kto_terms(lp, rp, des, z0, -1.0 if bug == "undesirable-sign" else 1.0)
        return pmean(jnp.mean(t), "dp"), z0
    return f


klr9 = LP(B9) * 3
kl_shift = np.repeat(np.array([1.5, -1.0, 2.0, -0.8], np.float32), B9 // 4)
C.smap("s.kto_kl_reference_point.dp4", {"dp": 4}, kto_sm, (P("dp"),) * 5, (P(), P()), kto,
       (LP(B9) * 5, LP(B9) * 5, M(B9, p=0.5), klr9 + kl_shift + R(B9, scale=0.2), klr9),
       bugs=[("z0-local", ["missing-all-reduce"]), ("clamp-before-pmean", ["wrong-order"]),
             ("undesirable-sign", ["wrong-value"])])

# ---------------------------------------------------------------------------
# 10. ORPO
B10, T10 = 4, 16
LAM10 = 0.25


def log_odds(a):
    a = jnp.minimum(a, -1e-4)  # log(p / (1 - p)) needs p < 1; clamped for safety
    return a - jnp.log1p(-jnp.exp(a))


def orpo(lc, lr, mc, mr):
    mc, mr = mc.astype(f32), mr.astype(f32)
    ac = jnp.sum(lc * mc, 1) / jnp.maximum(jnp.sum(mc, 1), 1.0)
    ar = jnp.sum(lr * mr, 1) / jnp.maximum(jnp.sum(mr, 1), 1.0)
    nll = -jnp.sum(lc * mc) / jnp.maximum(jnp.sum(mc), 1.0)
    orl = -jnp.mean(lsig(log_odds(ac) - log_odds(ar)))
    return nll + LAM10 * orl, orl


def orpo_sm(bug):
    def f(lc, lr, mc, mr):
        mc, mr = mc.astype(f32), mr.astype(f32)
        sc, sr = psum(jnp.sum(lc * mc, 1), "sp"), psum(jnp.sum(lr * mr, 1), "sp")
        if bug == "length-from-block":
            nc, nr = jnp.maximum(jnp.sum(mc, 1), 1.0), jnp.maximum(jnp.sum(mr, 1), 1.0)
        else:
            nc, nr = jnp.maximum(psum(jnp.sum(mc, 1), "sp"), 1.0), jnp.maximum(psum(jnp.sum(mr, 1), "sp"), 1.0)
        ac, ar = sc / nc, sr / nr
        tok = jnp.sum(mc) if bug == "nll-count-own-tokens" else psum(jnp.sum(mc), ("dp", "sp"))
        nll = -psum(jnp.sum(lc * mc), ("dp", "sp")) / jnp.maximum(tok, 1.0)
        orl = pmean(-jnp.mean(lsig(log_odds(ac) - log_odds(ar))), "dp")
        return nll + LAM10 * orl, orl
    return f


mc10 = M(B10, T10); mc10[:, ::4] = True
mr10 = M(B10, T10); mr10[:, ::4] = True
C.smap("s.orpo_log_odds_len_norm.dp2xsp4", {"dp": 2, "sp": 4}, orpo_sm, (P("dp", "sp"),) * 4, (P(), P()), orpo,
       (LP(B10, T10), LP(B10, T10) * 1.5, mc10, mr10),
       bugs=[("length-from-block", ["missing-all-reduce"]), ("nll-count-own-tokens", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 11. REINFORCE returns with a per-token KL penalty, sequence over sp
B11, T11 = 3, 16
BETA11 = 0.2


def token_rewards(lp, ref, score, last, t, sign=-1.0):
    return sign * BETA11 * (lp - ref) + jnp.where(t[None, :] == last[:, None], score[:, None], 0.0)


def returns(lp, ref, score, last):
    r = token_rewards(lp, ref, score, last, jnp.arange(lp.shape[1]))
    return jnp.flip(jnp.cumsum(jnp.flip(r, 1), 1), 1)


def returns_sm(bug):
    def f(lp, ref, score, last):
        tl, me = lp.shape[1], idx("sp")
        t = jnp.arange(tl) if bug == "score-local-index" else me * tl + jnp.arange(tl)
        r = token_rewards(lp, ref, score, last, t, 1.0 if bug == "kl-sign" else -1.0)
        suffix = jnp.sum(r, 1, keepdims=True) - jnp.cumsum(r, 1) + r
        tots = lax.all_gather(jnp.sum(r, 1), "sp")  # (n, b)
        later = (jnp.arange(4) < me) if bug == "carry-from-earlier" else (jnp.arange(4) > me)
        carry = jnp.sum(jnp.where(later[:, None], tots, 0.0), 0)
        return suffix + carry[:, None]
    return f


C.smap("s.reinforce_returns_kl_penalty_suffix.sp4", {"sp": 4}, returns_sm,
       (P(None, "sp"), P(None, "sp"), P(), P()), P(None, "sp"), returns,
       (LP(B11, T11), LP(B11, T11), R(B11) * 3, np.array([13, 6, 10], np.int32)),
       bugs=[("kl-sign", ["wrong-value"]), ("carry-from-earlier", ["wrong-offset"]),
             ("score-local-index", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 12. Bradley-Terry reward head with a margin, hidden over tp
B12, D12 = 8, 32


def bt(hc, hr, w, b, margin):
    rc, rr = hc @ w + b, hr @ w + b
    d = rc - rr
    return -jnp.mean(lsig(d - margin)), jnp.mean((d > 0).astype(f32)), jnp.mean(0.5 * (rc + rr))


def bt_sm(bug):
    def f(hc, hr, w, b, margin):
        if bug == "bias-before-psum":
            rc, rr = psum(hc @ w + b, "tp"), psum(hr @ w + b, "tp")
        elif bug == "reward-not-psummed":
            rc, rr = hc @ w + b, hr @ w + b
        else:
            rc, rr = psum(hc @ w, "tp") + b, psum(hr @ w, "tp") + b
        d = rc - rr
        red = (lambda x: x) if bug == "loss-not-pmeaned" else (lambda x: pmean(x, "dp"))
        return (red(-jnp.mean(lsig(d - margin))), pmean(jnp.mean((d > 0).astype(f32)), "dp"),
                pmean(jnp.mean(0.5 * (rc + rr)), "dp"))
    return f


C.smap("s.bt_reward_margin_hidden_tp.dp2xtp4", {"dp": 2, "tp": 4}, bt_sm,
       (P("dp", "tp"), P("dp", "tp"), P("tp"), P(), P("dp")), (P(), P(), P()), bt,
       (R(B12, D12), R(B12, D12), R(D12, scale=0.3), np.float32(0.7), np.abs(R(B12))),
       bugs=[("bias-before-psum", ["wrong-value"]), ("reward-not-psummed", ["missing-all-reduce"]),
             ("loss-not-pmeaned", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 13. response masks ending at the first EOS after the prompt, sequence over sp
B13e, T13e, V13e, EOS = 4, 16, 8, 0


def eos_mask(t, tok, plen, first):
    return ((t[None, :] >= plen[:, None]) & (t[None, :] <= first[:, None])).astype(f32)


def eos_len_norm(tok, lp, plen):
    T = tok.shape[1]
    t = jnp.arange(T)
    cand = jnp.where((tok == EOS) & (t[None, :] >= plen[:, None]), t[None, :], T - 1)
    first = jnp.min(cand, 1)
    m = eos_mask(t, tok, plen, first)
    return jnp.sum(lp * m, 1) / jnp.sum(m, 1), jnp.sum(lp * m) / jnp.sum(m), first


def eos_len_norm_sm(bug):
    def f(tok, lp, plen):
        tl = tok.shape[1]
        T = tl * 4
        t = idx("sp") * tl + jnp.arange(tl)
        cand = jnp.where((tok == EOS) & (t[None, :] >= plen[:, None]), t[None, :], T - 1)
        first = jnp.min(cand, 1)
        if bug == "first-eos-pmax":
            first = pmax(first, "sp")
        elif bug != "first-eos-local":
            first = lax.pmin(first, "sp")
        if bug == "eos-excluded":
            m = ((t[None, :] >= plen[:, None]) & (t[None, :] < first[:, None])).astype(f32)
        else:
            m = eos_mask(t, tok, plen, first)
        s, n = psum(jnp.sum(lp * m, 1), "sp"), psum(jnp.sum(m, 1), "sp")
        return s / n, psum(jnp.sum(s), "dp") / psum(jnp.sum(n), "dp"), first
    return f


tok13 = I(1, V13e, B13e, T13e)
tok13[0, [5, 11]] = EOS; tok13[1, [2, 9]] = EOS; tok13[2, 14] = EOS; tok13[3, [1, 6]] = EOS
tok13[tok13 == EOS] = EOS
tok13 = np.where(rng.random(tok13.shape) < 0.0, EOS, tok13).astype(np.int32)
plen13 = np.array([3, 4, 2, 5], np.int32)
C.smap("s.eos_response_mask_len_norm.dp2xsp4", {"dp": 2, "sp": 4}, eos_len_norm_sm,
       (P("dp", "sp"), P("dp", "sp"), P("dp")), (P("dp"), P(), P("dp")), eos_len_norm,
       (tok13, LP(B13e, T13e), plen13),
       bugs=[("first-eos-pmax", ["wrong-collective-op"]), ("first-eos-local", ["missing-all-reduce"]),
             ("eos-excluded", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 14. DPO from logits over (sp, tp) with the logits' gradient (check_vma=True)
B14, T14, V14 = 2, 8, 16
BETA14 = 0.2


def dpo_from_logits(zc, zr, yc, yr, refc, refr):
    def seq(z, y):
        ls = jax.nn.log_softmax(z, -1)
        return jnp.sum(jnp.take_along_axis(ls, y[..., None], -1)[..., 0], -1)

    def loss(zc, zr):
        d = BETA14 * ((seq(zc, yc) - refc) - (seq(zr, yr) - refr))
        return -jnp.mean(lsig(d))
    l, (gc, gr) = jax.value_and_grad(loss, (0, 1))(zc, zr)
    return l, gc, gr


def dpo_from_logits_sm(bug):
    def f(zc, zr, yc, yr, refc, refr):
        def seq(z, y):
            vl = z.shape[-1]
            m = pmax(lax.stop_gradient(z).max(-1), "tp")
            lse = m + jnp.log(psum(jnp.sum(jnp.exp(z - m[..., None]), -1), "tp"))
            off = 0 if bug == "iota-without-offset" else idx("tp") * vl
            hit = (jnp.arange(vl) + off)[None, None, :] == y[..., None]
            zy = psum(jnp.sum(jnp.where(hit, z, 0.0), -1), "tp")
            tok = jnp.sum(zy - lse, -1)
            return tok if bug == "seq-sum-not-psummed-sp" else psum(tok, "sp")

        def loss(zc, zr):
            d = BETA14 * ((seq(zc, yc) - refc) - (seq(zr, yr) - refr))
            l = -jnp.mean(lsig(d))
            return pmean(l, "sp") if bug == "seq-sum-not-psummed-sp" else l
        l, (gc, gr) = jax.value_and_grad(loss, (0, 1))(zc, zr)
        return l, gc, gr
    return f


C.smap("s.dpo_logits_sp_tp_iota_grad.sp2xtp4", {"sp": 2, "tp": 4}, dpo_from_logits_sm,
       (P(None, "sp", "tp"), P(None, "sp", "tp"), P(None, "sp"), P(None, "sp"), P(), P()),
       (P(), P(None, "sp", "tp"), P(None, "sp", "tp")), dpo_from_logits,
       (R(B14, T14, V14, scale=2), R(B14, T14, V14, scale=2), I(0, V14, B14, T14), I(0, V14, B14, T14),
        R(B14) * 4 - 20, R(B14) * 4 - 20), check_vma=True,
       bugs=[("iota-without-offset", ["wrong-offset"]), ("seq-sum-not-psummed-sp", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 15. GRPO group statistics by psum_scatter + all_gather, K over dp, binary rewards
G15, K15 = 8, 8


def grpo_binary(r):
    mu = r.mean(1, keepdims=True)
    sd = jnp.sqrt(jnp.mean(jnp.square(r - mu), 1, keepdims=True))
    adv = (r - mu) / (sd + 1e-6)
    return adv, jnp.mean((sd[:, 0] > 0).astype(f32))


def grpo_binary_sm(bug):
    def f(r):
        kl = r.shape[1]
        k = kl if bug == "mean-over-local-k" else kl * 4
        s = lax.psum_scatter(jnp.sum(r, 1), "dp", scatter_dimension=0, tiled=True)  # 2 groups each
        mu = lax.all_gather(s / k, "dp", tiled=True)[:, None]
        if bug == "variance-around-local-mean":
            mu_v = jnp.mean(r, 1, keepdims=True)
        else:
            mu_v = mu
        q = lax.psum_scatter(jnp.sum(jnp.square(r - mu_v), 1), "dp", scatter_dimension=0, tiled=True)
        sd = jnp.sqrt(lax.all_gather(q / k, "dp", tiled=True))[:, None]
        adv = (r - mu) / (sd + 1e-6)
        return adv, jnp.mean((sd[:, 0] > 0).astype(f32))
    return f


r15 = (rng.random((G15, K15)) < 0.5).astype(np.float32)
r15[1] = 1.0; r15[4] = 0.0
C.smap("s.grpo_binary_reward_scatter_gather.dp4", {"dp": 4}, grpo_binary_sm, (P(None, "dp"),),
       (P(None, "dp"), P()), grpo_binary, (r15,),
       bugs=[("mean-over-local-k", ["wrong-scale"]), ("variance-around-local-mean", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 16. PPO with gradient accumulation over micro-batches (lax.scan), grads psum'd by hand
B16m, T16m, D16m, V16m, MB = 8, 4, 8, 16, 2


def ppo_head_tok(w, h, y, old, adv, m):
    ls = jax.nn.log_softmax(h @ w, -1)
    lp = jnp.take_along_axis(ls, y[..., None], -1)[..., 0]
    ratio = jnp.exp(lp - old)
    pg = -jnp.minimum(ratio * adv[:, None], jnp.clip(ratio, 0.8, 1.2) * adv[:, None])
    return jnp.sum(pg * m)


def ppo_accum(w, h, y, old, adv, mask):
    m = mask.astype(f32)
    n = jnp.sum(m)
    l, g = jax.value_and_grad(lambda w: ppo_head_tok(w, h, y, old, adv, m) / n)(w)
    return w - 0.5 * g, l


def ppo_accum_sm(bug):
    def f(w, h, y, old, adv, mask):
        m = mask.astype(f32)
        n = psum(jnp.sum(m), "dp")
        split = lambda x: x.reshape((MB, x.shape[0] // MB) + x.shape[1:])

        def step(carry, xs):
            hb, yb, ob, ab, mb = xs
            nb = jnp.sum(mb) * 2 * MB if bug == "microbatch-count" else n
            l, g = jax.value_and_grad(lambda w: ppo_head_tok(w, hb, yb, ob, ab, mb) / nb)(w)
            return (carry[0] + l, carry[1] + g), None
        (l, g), _ = lax.scan(step, (jnp.zeros((), f32), jnp.zeros_like(w)),
                             tuple(map(split, (h, y, old, adv, m))))
        red = pmean if bug == "grad-pmean" else psum
        return w - 0.5 * red(g, "dp"), psum(l, "dp")
    return f


lp16m = LP(B16m, T16m)
C.smap("s.ppo_grad_accum_scan_microbatches.dp2", {"dp": 2}, ppo_accum_sm,
       (P(), P("dp"), P("dp"), P("dp"), P("dp"), P("dp")), (P(), P()), ppo_accum,
       (R(D16m, V16m, scale=0.5), R(B16m, T16m, D16m), I(0, V16m, B16m, T16m), lp16m - 2.0, R(B16m),
        M(B16m, T16m, p=0.6)),
       bugs=[("microbatch-count", ["wrong-scale"]), ("grad-pmean", ["wrong-collective-op"])])

# ---------------------------------------------------------------------------
# 17. IPO on a 3-axis mesh: batch over dp, sequence over sp, head's vocab over tp
B17, T17, D17, V17 = 4, 8, 8, 16
TAU17 = 0.1


def ipo_head(hc, hr, w, yc, yr, refc, refr):
    def seq(h, y):
        ls = jax.nn.log_softmax(jnp.einsum("btd,dv->btv", h, w), -1)
        return jnp.sum(jnp.take_along_axis(ls, y[..., None], -1)[..., 0], -1)
    d = (seq(hc, yc) - refc) - (seq(hr, yr) - refr)
    return jnp.mean(jnp.square(d - 1 / (2 * TAU17))), jnp.mean(d)


def ipo_head_sm(bug):
    def f(hc, hr, w, yc, yr, refc, refr):
        def seq(h, y):
            z = jnp.einsum("btd,dv->btv", h, w)
            vl = z.shape[-1]
            if bug == "lse-local-vocab":
                m = z.max(-1)
                lse = m + jnp.log(jnp.sum(jnp.exp(z - m[..., None]), -1))
            else:
                m = pmax(z.max(-1), "tp")
                lse = m + jnp.log(psum(jnp.sum(jnp.exp(z - m[..., None]), -1), "tp"))
            loc = y - idx("tp") * vl
            zy = psum(jnp.sum(jax.nn.one_hot(loc, vl, dtype=z.dtype) * z, -1), "tp")
            return psum(jnp.sum(zy - lse, -1), "dp" if bug == "seq-psum-over-dp" else "sp")
        d = (seq(hc, yc) - refc) - (seq(hr, yr) - refr)
        return pmean(jnp.mean(jnp.square(d - 1 / (2 * TAU17))), "dp"), pmean(jnp.mean(d), "dp")
    return f


C.smap("s.ipo_vocab_head_3axis.dp2xsp2xtp2", {"dp": 2, "sp": 2, "tp": 2}, ipo_head_sm,
       (P("dp", "sp"), P("dp", "sp"), P(None, "tp"), P("dp", "sp"), P("dp", "sp"), P("dp"), P("dp")), (P(), P()),
       ipo_head,
       (R(B17, T17, D17), R(B17, T17, D17), R(D17, V17, scale=0.6), I(0, V17, B17, T17), I(0, V17, B17, T17),
        R(B17) - 22, R(B17) - 22),
       bugs=[("lse-local-vocab", ["missing-all-reduce"]), ("seq-psum-over-dp", ["wrong-collective-group"])])

# ---------------------------------------------------------------------------
# 18. GRPO advantages from replicated rewards, each device slicing its rows
G18r, K18r, T18r = 2, 8, 6


def grpo_rows(rew, lp, old, mask):
    mu, sd = rew.mean(1, keepdims=True), rew.std(1, keepdims=True)
    adv = ((rew - mu) / (sd + 1e-4)).reshape(-1)
    m = mask.astype(f32)
    ratio = jnp.exp(lp - old)
    per_seq = jnp.sum(-ratio * adv[:, None] * m, 1) / jnp.maximum(jnp.sum(m, 1), 1.0)
    return jnp.mean(per_seq), adv


def grpo_rows_sm(bug):
    def f(rew, lp, old, mask):
        mu, sd = rew.mean(1, keepdims=True), rew.std(1, keepdims=True)
        adv = ((rew - mu) / (sd + 1e-4)).reshape(-1)
        nl = lp.shape[0]
        if bug == "slice-offset-by-k":
            start = idx("dp") * K18r
        elif bug == "slice-next-device":
            start = ((idx("dp") + 1) % 4) * nl
        else:
            start = idx("dp") * nl
        a = lax.dynamic_slice_in_dim(adv, start, nl)
        m = mask.astype(f32)
        ratio = jnp.exp(lp - old)
        per_seq = jnp.sum(-ratio * a[:, None] * m, 1) / jnp.maximum(jnp.sum(m, 1), 1.0)
        return pmean(jnp.mean(per_seq), "dp"), adv
    return f


lp18r = LP(G18r * K18r, T18r)
C.smap("s.grpo_replicated_rewards_row_slice.dp4", {"dp": 4}, grpo_rows_sm, (P(), P("dp"), P("dp"), P("dp")),
       (P(), P()), grpo_rows,
       (R(G18r, K18r), lp18r, lp18r + R(G18r * K18r, T18r, scale=0.2), M(G18r * K18r, T18r)),
       bugs=[("slice-offset-by-k", ["wrong-offset"]), ("slice-next-device", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 19. DPO computed redundantly on every device from all_gather'd sequence sums
P19, T19 = 8, 8
BETA19 = 0.1


def dpo_gathered(lc, lr, mc, mr, refc, refr):
    sc = jnp.sum(jnp.where(mc, lc, 0.0), 1)
    sr = jnp.sum(jnp.where(mr, lr, 0.0), 1)
    rc, rr = BETA19 * (sc - refc), BETA19 * (sr - refr)
    return -jnp.mean(lsig(rc - rr)), rc, rr


def dpo_gathered_sm(bug):
    def f(lc, lr, mc, mr, refc, refr):
        sc = jnp.sum(jnp.where(mc, lc, 0.0), 1) - refc
        sr = jnp.sum(jnp.where(mr, lr, 0.0), 1) - refr
        both = jnp.stack([sc, sr])  # (2, pl)
        if bug == "gather-reshape-interleaved":
            g = lax.all_gather(both, "dp").reshape(2, -1)  # (4, 2, pl) -> (2, P): chosen and rejected interleaved
        else:
            g = lax.all_gather(both, "dp", axis=1, tiled=True)  # (2, P)
        rc, rr = BETA19 * g[0], BETA19 * g[1]
        return -jnp.mean(lsig(rc - rr)), rc, rr
    return f


C.smap("s.dpo_redundant_all_gather_rewards.dp4", {"dp": 4}, dpo_gathered_sm, (P("dp"),) * 6, (P(), P(), P()),
       dpo_gathered,
       (LP(P19, T19), LP(P19, T19), M(P19, T19), M(P19, T19), R(P19) * 3 - 8, R(P19) * 3 - 8),
       bugs=[("gather-reshape-interleaved", ["wrong-reshape-order"])])

# ---------------------------------------------------------------------------
# 20. reward at each sequence's last real token by a one_hot of the global index, sequence over sp
B20, T20, D20 = 8, 16, 8


def rm_last(h, w, lens):
    last = jnp.take_along_axis(h, (lens - 1)[:, None, None], 1)[:, 0]  # (b, d)
    r = last @ w
    rc, rr = r[: B20 // 2], r[B20 // 2:]
    return -jnp.mean(lsig(rc - rr)), r


def rm_last_sm(bug):
    def f(h, w, lens):
        tl = h.shape[1]
        loc = lens - 1 if bug == "index-without-offset" else lens - 1 - idx("sp") * tl
        oh = jax.nn.one_hot(loc, tl, dtype=h.dtype)  # zero row when the last token is elsewhere
        part = jnp.einsum("bt,btd->bd", oh, h) @ w
        r = pmean(part, "sp") if bug == "selection-pmean" else psum(part, "sp")
        rc, rr = r[: B20 // 2], r[B20 // 2:]
        return -jnp.mean(lsig(rc - rr)), r
    return f


C.smap("s.rm_last_token_onehot_global_index.sp4", {"sp": 4}, rm_last_sm, (P(None, "sp"), P(), P()), (P(), P()),
       rm_last, (R(B20, T20, D20), R(D20, scale=0.5), np.array([16, 3, 9, 5, 12, 7, 1, 14], np.int32)),
       bugs=[("index-without-offset", ["wrong-offset"]), ("selection-pmean", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 21. per-sequence and batch token means with int32 counts (dp4 x sp2)
B21, T21 = 8, 8


def kl_ent_means(lp, ref, ent, mask):
    m = mask.astype(f32)
    k1 = (lp - ref) * m
    n = jnp.sum(mask, 1, dtype=jnp.int32)
    seq_kl = jnp.sum(k1, 1) / jnp.maximum(n, 1).astype(f32)
    ent_mean = jnp.sum(ent * m) / jnp.sum(n).astype(f32)
    return seq_kl, ent_mean


def kl_ent_means_sm(bug):
    def f(lp, ref, ent, mask):
        m = mask.astype(f32)
        k1 = (ref - lp) * m if bug == "kl-reversed" else (lp - ref) * m
        n = psum(jnp.sum(mask, 1, dtype=jnp.int32), "sp")
        seq_kl = psum(jnp.sum(k1, 1), "sp") / jnp.maximum(n, 1).astype(f32)
        tot = lax.psum_scatter(jnp.sum(ent * m, 1), "sp", scatter_dimension=0, tiled=True)  # (b/2,)
        tot = psum(jnp.sum(tot), ("dp", "sp"))
        cnt = jnp.sum(n) if bug == "count-not-psummed-dp" else psum(jnp.sum(n), "dp")
        return seq_kl, tot / cnt.astype(f32)
    return f


C.smap("s.kl_entropy_means_int_counts_scatter.dp4xsp2", {"dp": 4, "sp": 2}, kl_ent_means_sm,
       (P("dp", "sp"),) * 4, (P("dp"), P()), kl_ent_means,
       (LP(B21, T21), LP(B21, T21), np.abs(R(B21, T21)) * 2, M(B21, T21)),
       bugs=[("kl-reversed", ["wrong-value"]), ("count-not-psummed-dp", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 22. response mask up to the first EOS by a cumsum of EOS flags with an exclusive device prefix (sp4)
B22, T22 = 4, 16


def eos_cumsum_mask(tok, lp):
    is_eos = (tok == EOS).astype(jnp.int32)
    before = jnp.cumsum(is_eos, 1) - is_eos  # EOS seen strictly before t
    m = (before == 0).astype(f32)
    return m, jnp.sum(lp * m, 1)


def eos_cumsum_mask_sm(bug):
    def f(tok, lp):
        me = idx("sp")
        is_eos = (tok == EOS).astype(jnp.int32)
        cs = jnp.cumsum(is_eos, 1)
        tot = lax.all_gather(cs[:, -1], "sp")  # (n, b) EOS count of each block
        sel = (jnp.arange(4) > me) if bug == "prefix-from-later-blocks" else (
            jnp.arange(4) <= me if bug == "inclusive-prefix" else jnp.arange(4) < me)
        prefix = jnp.sum(jnp.where(sel[:, None], tot, 0), 0)
        before = cs - is_eos + prefix[:, None]
        m = (before == 0).astype(f32)
        return m, psum(jnp.sum(lp * m, 1), "sp")
    return f


tok22 = I(1, 8, B22, T22)
tok22[0, 6] = EOS; tok22[1, 3] = EOS; tok22[1, 12] = EOS; tok22[2, 9] = EOS; tok22[2, 10] = EOS
C.smap("s.eos_cumsum_exclusive_prefix_mask.sp4", {"sp": 4}, eos_cumsum_mask_sm, (P(None, "sp"), P(None, "sp")),
       (P(None, "sp"), P()), eos_cumsum_mask, (tok22, LP(B22, T22)),
       bugs=[("inclusive-prefix", ["wrong-offset"]), ("prefix-from-later-blocks", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 23. token log-probs with the global log-sum-exp merged from all_gather'd local log-sum-exps (dp2 x tp4)
B23, T23, V23 = 4, 6, 32


def local_lse(z):
    m = lax.stop_gradient(z.max(-1))
    return m + jnp.log(jnp.sum(jnp.exp(z - m[..., None]), -1))


def logp_ent_merge_sm(bug):
    def f(z, y):
        vl = z.shape[-1]
        ll = local_lse(z)
        if bug == "lse-local":
            lse = ll
        elif bug == "merge-by-pmax":
            lse = pmax(ll, "tp")
        else:
            lse = jax.nn.logsumexp(lax.all_gather(ll, "tp"), 0)
        loc = y - idx("tp") * vl
        hit = (loc >= 0) & (loc < vl)
        zy = psum(jnp.where(hit, jnp.take_along_axis(z, jnp.clip(loc, 0, vl - 1)[..., None], -1)[..., 0], 0.0), "tp")
        ent = lse - psum(jnp.sum(jnp.exp(z - lse[..., None]) * z, -1), "tp")
        return zy - lse, ent
    return f


C.smap("s.logp_entropy_lse_merge_all_gather.dp2xtp4", {"dp": 2, "tp": 4}, logp_ent_merge_sm,
       (P("dp", None, "tp"), P("dp")), (P("dp"), P("dp")), logp_ent,
       (R(B23, T23, V23, scale=2.5), I(0, V23, B23, T23)),
       bugs=[("lse-local", ["missing-all-reduce"]), ("merge-by-pmax", ["wrong-collective-op"])])

# ---------------------------------------------------------------------------
# 24. the log-sum-exp from local maxima rescaled by the global one (online-softmax merge), sp2 x tp4
B24, T24, V24 = 2, 8, 32


def logp_rescale_sm(bug):
    def f(z, y):
        vl = z.shape[-1]
        ml = lax.stop_gradient(z.max(-1))
        sl = jnp.sum(jnp.exp(z - ml[..., None]), -1)
        mg = pmax(ml, "tp")
        if bug == "no-rescale":
            S = psum(sl, "tp")
        elif bug == "rescale-sign":
            S = psum(jnp.exp(mg - ml) * sl, "tp")
        else:
            S = psum(jnp.exp(ml - mg) * sl, "tp")
        lse = mg + jnp.log(S)
        oh = (jnp.arange(vl) + idx("tp") * vl == y[..., None]).astype(z.dtype)
        zy = psum(jnp.einsum("btv,btv->bt", oh, z), "tp")
        ent = lse - psum(jnp.sum(jnp.exp(z - lse[..., None]) * z, -1), "tp")
        return zy - lse, ent
    return f


C.smap("s.logp_entropy_local_max_rescaled.sp2xtp4", {"sp": 2, "tp": 4}, logp_rescale_sm,
       (P(None, "sp", "tp"), P(None, "sp")), (P(None, "sp"), P(None, "sp")), logp_ent,
       (R(B24, T24, V24, scale=3.0), I(0, V24, B24, T24)),
       bugs=[("no-rescale", ["wrong-value"]), ("rescale-sign", ["wrong-value"])])

# ---------------------------------------------------------------------------
# 25. unmasked length-normalised log-probs as pmean'd block means (equal blocks), SimPO-style loss
B25, T25 = 4, 16


def simpo_nomask(lc, lr):
    d = BETA_S * (jnp.mean(lc, 1) - jnp.mean(lr, 1)) - GAMMA_S
    return -jnp.mean(lsig(d)), jnp.mean(lc, 1)


def simpo_nomask_sm(bug):
    def f(lc, lr):
        red = (lambda x: psum(x, "sp")) if bug == "block-means-psummed" else (
            (lambda x: pmean(x, "dp")) if bug == "block-means-pmean-dp" else (lambda x: pmean(x, "sp")))
        ac, ar = red(jnp.mean(lc, 1)), red(jnp.mean(lr, 1))
        d = BETA_S * (ac - ar) - GAMMA_S
        return pmean(-jnp.mean(lsig(d)), "dp"), ac
    return f


C.smap("s.simpo_unmasked_pmean_block_means.dp2xsp4", {"dp": 2, "sp": 4}, simpo_nomask_sm,
       (P("dp", "sp"), P("dp", "sp")), (P(), P("dp")), simpo_nomask, (LP(B25, T25), LP(B25, T25)),
       bugs=[("block-means-psummed", ["wrong-reduction"]), ("block-means-pmean-dp", ["wrong-collective-group"])])

# ---------------------------------------------------------------------------
# 26. per-token log-probs and entropy from bf16 logits upcast to f32 per shard (dp2 x tp4)
B26, T26, V26 = 4, 6, 32
bf16 = jnp.bfloat16


def logp_ent_bf16(z, y):
    return logp_ent(z.astype(f32), y)


def logp_ent_bf16_sm(bug):
    def f(z, y):
        vl = z.shape[-1]
        if bug == "exp-sum-psummed-in-bf16":
            m = pmax(z.max(-1), "tp").astype(f32)
            zf = z.astype(f32)
            S = psum(jnp.sum(jnp.exp(zf - m[..., None]), -1).astype(bf16), "tp").astype(f32)
        else:
            zf = z.astype(f32)
            m = pmax(zf.max(-1), "tp")
            S = psum(jnp.sum(jnp.exp(zf - m[..., None]), -1), "tp")
        if bug == "max-not-pmaxed":
            m = zf.max(-1)
            S = psum(jnp.sum(jnp.exp(zf - m[..., None]), -1), "tp")
        lse = m + jnp.log(S)
        loc = y - idx("tp") * vl
        zy = psum(jnp.sum(jax.nn.one_hot(loc, vl, dtype=f32) * zf, -1), "tp")
        ent = lse - psum(jnp.sum(jnp.exp(zf - lse[..., None]) * zf, -1), "tp")
        return zy - lse, ent
    return f


C.smap("s.logp_entropy_bf16_logits_f32_upcast.dp2xtp4", {"dp": 2, "tp": 4}, logp_ent_bf16_sm,
       (P("dp", None, "tp"), P("dp")), (P("dp"), P("dp")), logp_ent_bf16,
       (R(B26, T26, V26, scale=2.0).astype(jnp.bfloat16), I(0, V26, B26, T26)),
       bugs=[("exp-sum-psummed-in-bf16", ["dtype-precision"]), ("max-not-pmaxed", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 27. GRPO advantages of bf16 rewards with f32 statistics (groups x K, K over dp4)
G27, K27 = 4, 8


def grpo_bf16(r):
    mu, sd = r.mean(1, keepdims=True), r.std(1, keepdims=True)
    return (r - mu) / (sd + 1e-2)


def grpo_bf16_sm(bug):
    def f(r):
        k = r.shape[1] * 4
        rf = r.astype(f32)
        mu32 = psum(jnp.sum(rf, 1, keepdims=True), "dp") / k
        if bug == "variance-local":
            var = jnp.mean(jnp.square(rf - mu32), 1, keepdims=True)
        else:
            var = psum(jnp.sum(jnp.square(rf - mu32), 1, keepdims=True), "dp") / k
        mu, sd = mu32.astype(bf16), jnp.sqrt(var).astype(bf16)
        if bug == "mean-over-group-count":
            mu = (mu32 * k / G27).astype(bf16)
        return (r - mu) / (sd + 1e-2)
    return f


C.smap("s.grpo_bf16_rewards_f32_stats.dp4", {"dp": 4}, grpo_bf16_sm, (P(None, "dp"),), P(None, "dp"), grpo_bf16,
       ((R(G27, K27) * 2).astype(jnp.bfloat16),),
       bugs=[("variance-local", ["missing-all-reduce"]), ("mean-over-group-count", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 28. rollout metrics: token counts cast to f32 on each device before the psum, the max logit
#     cast to bf16 before the pmax (rounding is monotone, so this is exact), vocab over tp4, batch over dp2
B28, T28, V28 = 4, 6, 32


def rollout_metrics(z, lp, ref, mask):
    n = jnp.sum(mask, dtype=jnp.int32).astype(f32)
    seq_len = jnp.sum(mask, 1, dtype=jnp.int32).astype(f32)
    kl = jnp.sum((lp - ref) * mask) / n
    return n, jnp.mean(seq_len), kl, jnp.max(z, -1).astype(bf16)


def rollout_metrics_sm(bug):
    def f(z, lp, ref, mask):
        nl = jnp.sum(mask, dtype=jnp.int32).astype(f32)
        n = nl if bug == "count-not-psummed" else psum(nl, "dp")
        seq_len = jnp.sum(mask, 1, dtype=jnp.int32).astype(f32)
        kl = psum(jnp.sum((lp - ref) * mask), "dp") / n
        mx = z.max(-1).astype(bf16)
        mx = lax.pmin(mx, "tp") if bug == "max-by-pmin" else pmax(mx, "tp")
        return n, pmean(jnp.mean(seq_len), "dp"), kl, mx
    return f


C.smap("s.rollout_metrics_casts_before_reduce.dp2xtp4", {"dp": 2, "tp": 4}, rollout_metrics_sm,
       (P("dp", None, "tp"), P("dp"), P("dp"), P("dp")), (P(), P(), P(), P("dp")), rollout_metrics,
       (R(B28, T28, V28, scale=2.0), LP(B28, T28), LP(B28, T28), M(B28, T28)),
       bugs=[("count-not-psummed", ["missing-all-reduce"]), ("max-by-pmin", ["wrong-collective-op"])])

# ---------------------------------------------------------------------------
# 29. DPO with everything in bf16 (per-token log-probs, masks, sums, psum), sequence over sp4, pairs over dp2
B29, T29 = 4, 16


def dpo_bf16(lc, lr, mc, mr, refc, refr):
    sc = jnp.sum(lc * mc.astype(bf16), 1)
    sr = jnp.sum(lr * mr.astype(bf16), 1)
    d = bf16(0.1) * ((sc - refc) - (sr - refr))
    return -jnp.mean(lsig(d)), sc


def dpo_bf16_sm(bug):
    def f(lc, lr, mc, mr, refc, refr):
        ax = "dp" if bug == "seq-psum-over-dp" else "sp"
        sc = psum(jnp.sum(lc * mc.astype(bf16), 1), ax)
        sr = psum(jnp.sum(lr * mr.astype(bf16), 1), ax)
        if bug == "rejected-ref-added":
            d = bf16(0.1) * ((sc - refc) - (sr + refr))
        else:
            d = bf16(0.1) * ((sc - refc) - (sr - refr))
        return pmean(-jnp.mean(lsig(d)), "dp"), sc
    return f


C.smap("s.dpo_all_bf16_seq_psum.dp2xsp4", {"dp": 2, "sp": 4}, dpo_bf16_sm,
       (P("dp", "sp"),) * 4 + (P("dp"), P("dp")), (P(), P("dp")), dpo_bf16,
       (LP(B29, T29).astype(jnp.bfloat16), LP(B29, T29).astype(jnp.bfloat16), M(B29, T29), M(B29, T29),
        (R(B29) * 2 - 10).astype(jnp.bfloat16), (R(B29) * 2 - 10).astype(jnp.bfloat16)),
       bugs=[("seq-psum-over-dp", ["wrong-collective-group"]), ("rejected-ref-added", ["wrong-value"])])

# ---------------------------------------------------------------------------
# 30. DPO from vocab-parallel logits (f32) with the loss in bf16, pmean'd over dp2 in bf16 (tp4)
B30, T30, V30 = 4, 6, 32


def dpo_tp_bf16(zc, zr, yc, yr, refc, refr):
    def seq(z, y):
        ls = jax.nn.log_softmax(z, -1)
        return jnp.sum(jnp.take_along_axis(ls, y[..., None], -1)[..., 0], -1)
    d = (0.1 * ((seq(zc, yc) - refc) - (seq(zr, yr) - refr))).astype(bf16)
    return -jnp.mean(lsig(d)), d


def dpo_tp_bf16_sm(bug):
    def f(zc, zr, yc, yr, refc, refr):
        def seq(z, y):
            lp, _ = logp_ent_sm(None)(z, y) if bug != "lse-local" else logp_ent_sm("local-log-softmax")(z, y)
            return jnp.sum(lp, -1)
        d = (0.1 * ((seq(zc, yc) - refc) - (seq(zr, yr) - refr))).astype(bf16)
        loss = -jnp.mean(lsig(d))
        return (psum(loss, "dp") if bug == "loss-psummed" else pmean(loss, "dp")), d
    return f


C.smap("s.dpo_vocab_tp_bf16_loss_pmean.dp2xtp4", {"dp": 2, "tp": 4}, dpo_tp_bf16_sm,
       (P("dp", None, "tp"), P("dp", None, "tp"), P("dp"), P("dp"), P("dp"), P("dp")), (P(), P("dp")), dpo_tp_bf16,
       (R(B30, T30, V30, scale=2), R(B30, T30, V30, scale=2), I(0, V30, B30, T30), I(0, V30, B30, T30),
        R(B30) * 3 - 20, R(B30) * 3 - 20),
       bugs=[("lse-local", ["missing-all-reduce"]), ("loss-psummed", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 31. masked mean response log-prob from vocab-parallel logits, the int32 token count cast to f32
#     on each device before the psum (exact below 2^24), vocab over tp4, batch over dp2
B31, T31, V31 = 4, 6, 32


def mean_resp_logp(z, y, mask):
    lp, ent = logp_ent(z, y)
    n = jnp.sum(mask, dtype=jnp.int32).astype(f32)
    return jnp.sum(jnp.where(mask, lp, 0.0)) / n, jnp.sum(jnp.where(mask, ent, 0.0)) / n


def mean_resp_logp_sm(bug):
    def f(z, y, mask):
        lp, ent = logp_ent_sm(None)(z, y)
        nl = jnp.sum(mask, dtype=jnp.int32).astype(f32)
        n = nl if bug == "count-local" else psum(nl, "dp")
        den = pmean(nl, "dp") if bug == "count-pmean" else n
        return psum(jnp.sum(jnp.where(mask, lp, 0.0)), "dp") / den, psum(jnp.sum(jnp.where(mask, ent, 0.0)), "dp") / n
    return f


C.smap("s.mean_resp_logp_int_count_cast.dp2xtp4", {"dp": 2, "tp": 4}, mean_resp_logp_sm,
       (P("dp", None, "tp"), P("dp"), P("dp")), (P(), P()), mean_resp_logp,
       (R(B31, T31, V31, scale=2), I(0, V31, B31, T31), M(B31, T31)),
       bugs=[("count-local", ["missing-all-reduce"]), ("count-pmean", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 32. the strided-group GRPO advantages of 4. with a REINFORCE loss in bf16, pmean'd over dp4 in bf16


def grpo_strided_bf16_loss(r, slp):
    return -jnp.mean((grpo_strided(r) * slp).astype(bf16))


def grpo_strided_bf16_loss_sm(bug):
    def f(r, slp):
        adv = grpo_strided_sm("local-group-id" if bug == "local-group-id" else None)(r)
        loss = -jnp.mean((adv * slp).astype(bf16))
        return psum(loss, "dp") if bug == "loss-psummed" else pmean(loss, "dp")
    return f


C.smap("s.grpo_strided_bf16_loss_pmean.dp4", {"dp": 4}, grpo_strided_bf16_loss_sm, (P("dp"), P("dp")), P(),
       grpo_strided_bf16_loss, (R(N4) + np.tile(np.arange(NG4, dtype=np.float32), GS4), LP(N4) * 4),
       bugs=[("local-group-id", ["wrong-offset"]), ("loss-psummed", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# GSPMD pairs
B13, T13, V13 = 4, 6, 32


def dpo_logits(zc, zr, yc, yr, mc, mr, refc, refr):
    def seq(z, y, m):
        ls = jax.nn.log_softmax(z.astype(f32), -1)
        return jnp.sum(jnp.take_along_axis(ls, y[..., None], -1)[..., 0] * m, -1)
    lc, lr = seq(zc, yc, mc.astype(f32)), seq(zr, yr, mr.astype(f32))
    z = 0.1 * ((lc - refc) - (lr - refr))
    return -jnp.mean(lsig(z)), jnp.mean(lc - refc), jnp.mean(lr - refr)


C.gspmd("g.dpo_vocab_sharded_logits.dp2xtp4", {"dp": 2, "tp": 4},
        (P("dp", None, "tp"),) * 2 + (P("dp"),) * 6, (P(), P(), P()), dpo_logits,
        (R(B13, T13, V13, scale=2), R(B13, T13, V13, scale=2), I(0, V13, B13, T13), I(0, V13, B13, T13),
         M(B13, T13), M(B13, T13), R(B13) * 5 - 10, R(B13) * 5 - 10))


def grpo_dapo(rew, lp, old, ref, mask):
    adv = grpo_strided(rew)
    return dapo(lp, old, ref, adv, mask) + (adv,)


lp14 = LP(N4, 8)
C.gspmd("g.grpo_strided_dapo_loss.dp8", {"dp": 8}, (P("dp"),) * 5, (P(), P(), P("dp")), grpo_dapo,
        (R(N4) + np.tile(np.arange(NG4, dtype=np.float32), GS4), lp14, lp14 + R(N4, 8, scale=0.3),
         lp14 + R(N4, 8, scale=0.5), M(N4, 8)))

B15, T15, D15, V15 = 4, 6, 16, 32
OPT15 = optax.adamw(1e-2, weight_decay=0.01)


def simpo_step(w, opt, hc, hr, yc, yr, mc, mr):
    def loss(w):
        def lps(h, y):
            ls = jax.nn.log_softmax(jnp.einsum("btd,dv->btv", h, w), -1)
            return jnp.take_along_axis(ls, y[..., None], -1)[..., 0]
        return simpo(lps(hc, yc), lps(hr, yr), mc, mr)[0]
    l, g = jax.value_and_grad(loss)(w)
    up, opt = OPT15.update(g, opt, w)
    return optax.apply_updates(w, up), opt, l


w15 = R(D15, V15, scale=0.3)
opt15 = OPT15.init(jnp.asarray(w15))
mc15 = M(B15, T15); mc15[:, 0] = True
mr15 = M(B15, T15); mr15[:, 0] = True
OS15 = jax.tree.map(lambda x: P(None, "tp") if np.ndim(x) == 2 else P(), opt15)
C.gspmd("g.simpo_adamw_step_vocab_head.dp2xtp4", {"dp": 2, "tp": 4},
        (P(None, "tp"), OS15, P("dp"), P("dp"), P("dp"), P("dp"), P("dp"), P("dp")),
        (P(None, "tp"), OS15, P()), simpo_step,
        (w15, jax.tree.map(np.asarray, opt15), R(B15, T15, D15), R(B15, T15, D15), I(0, V15, B15, T15),
         I(0, V15, B15, T15), mc15, mr15))

B16, T16, V16 = 4, 16, 16


def ppo_kl_ent(z, y, old, ref, adv, mask):
    ls = jax.nn.log_softmax(z, -1)
    lp = jnp.take_along_axis(ls, y[..., None], -1)[..., 0]
    ent = -jnp.sum(jnp.exp(ls) * ls, -1)
    m = mask.astype(f32)
    a = adv[:, None] - 0.05 * lax.stop_gradient(lp - ref)  # per-token k1 KL penalty in the advantage
    ratio = jnp.exp(lp - old)
    pg = -jnp.minimum(ratio * a, jnp.clip(ratio, 0.8, 1.2) * a)
    tok = pg - 0.01 * ent
    return jnp.sum(tok * m) / jnp.sum(m), jnp.sum(ent * m) / jnp.sum(m)


lp16 = LP(B16, T16)
C.gspmd("g.ppo_k1_penalty_entropy_seq_sp.dp2xsp4", {"dp": 2, "sp": 4},
        (P("dp", "sp", None), P("dp", "sp"), P("dp", "sp"), P("dp", "sp"), P("dp"), P("dp", "sp")), (P(), P()),
        ppo_kl_ent,
        (R(B16, T16, V16), I(0, V16, B16, T16), lp16 - 2.0, lp16 - 2.5, R(B16), M(B16, T16)))


C.gspmd("g.eos_response_mask_len_norm.dp2xsp4", {"dp": 2, "sp": 4}, (P("dp", "sp"), P("dp", "sp"), P("dp")),
        (P("dp"), P(), P("dp")), eos_len_norm, (tok13, LP(B13e, T13e), plen13))

OPT18 = optax.adam(3e-3)
V18, D18, G18, K18, T18 = 32, 16, 2, 8, 6


def grpo_policy_step(p, opt, tok, y, rew, old, ref, mask):
    adv, _ = grpo_binary(rew)
    adv = adv.reshape(-1)

    def loss(p):
        h = jnp.tanh(p["emb"][tok] @ p["w1"])
        ls = jax.nn.log_softmax(h @ p["head"], -1)
        lp = jnp.take_along_axis(ls, y[..., None], -1)[..., 0]
        ratio = jnp.exp(lp - old)
        pg = -jnp.minimum(ratio * adv[:, None], jnp.clip(ratio, 0.8, 1.28) * adv[:, None])
        d = ref - lp
        kl = jnp.exp(d) - d - 1
        m = mask.astype(f32)
        per_seq = jnp.sum((pg + 0.04 * kl) * m, 1) / jnp.maximum(jnp.sum(m, 1), 1.0)
        return jnp.mean(per_seq)
    l, g = jax.value_and_grad(loss)(p)
    up, opt = OPT18.update(g, opt, p)
    return optax.apply_updates(p, up), opt, l


p18 = {"emb": R(V18, D18, scale=0.5), "w1": R(D18, D18, scale=0.3), "head": R(D18, V18, scale=0.3)}
o18 = jax.tree.map(np.asarray, OPT18.init(jax.tree.map(jnp.asarray, p18)))
SP18 = {"emb": P(), "w1": P(None, "tp"), "head": P("tp", None)}
OS18 = jax.tree.map(lambda x: P(), o18)
OS18 = (OS18[0]._replace(mu=SP18, nu=SP18), OS18[1])
N18 = G18 * K18
lp18 = LP(N18, T18) - 2.5
rew18 = (rng.random((G18, K18)) < 0.5).astype(np.float32)
C.gspmd("g.grpo_adam_step_tiny_policy.dp4xtp2", {"dp": 4, "tp": 2},
        (SP18, OS18, P("dp"), P("dp"), P(None, "dp"), P("dp"), P("dp"), P("dp")), (SP18, OS18, P()),
        grpo_policy_step,
        (p18, o18, I(0, V18, N18, T18), I(0, V18, N18, T18), rew18, lp18, lp18 + R(N18, T18, scale=0.3),
         M(N18, T18)))


C.gspmd("g.orpo_log_odds_len_norm.dp2xsp4", {"dp": 2, "sp": 4}, (P("dp", "sp"),) * 4, (P(), P()), orpo,
        (LP(B10, T10), LP(B10, T10) * 1.5, mc10, mr10))
C.gspmd("g.rm_last_token_take_along.sp4", {"sp": 4}, (P(None, "sp"), P(), P()), (P(), P()), rm_last,
        (R(B20, T20, D20), R(D20, scale=0.5), np.array([16, 3, 9, 5, 12, 7, 1, 14], np.int32)))

C.gspmd("g.eos_cumsum_mask_seq_sp.sp4", {"sp": 4}, (P(None, "sp"), P(None, "sp")), (P(None, "sp"), P()),
        eos_cumsum_mask, (tok22, LP(B22, T22)))


def simpo_bf16_head(hc, hr, w, yc, yr):
    def lps(h, y):
        z = jnp.einsum("btd,dv->btv", h, w, preferred_element_type=f32)
        ls = jax.nn.log_softmax(z, -1)
        return jnp.take_along_axis(ls, y[..., None], -1)[..., 0]
    ac, ar = jnp.mean(lps(hc, yc), 1), jnp.mean(lps(hr, yr), 1)
    d = BETA_S * (ac - ar) - GAMMA_S
    return -jnp.mean(lsig(d)), ac


C.gspmd("g.simpo_bf16_head_f32_accum.dp2xtp4", {"dp": 2, "tp": 4}, (P("dp"), P("dp"), P(None, "tp"), P("dp"), P("dp")),
        (P(), P("dp")), simpo_bf16_head,
        (R(4, 6, 16).astype(jnp.bfloat16), R(4, 6, 16).astype(jnp.bfloat16), R(16, 32, scale=0.3).astype(jnp.bfloat16),
         I(0, 32, 4, 6), I(0, 32, 4, 6)))

C.finish()
