"""samples/fresh137: a 137th batch of programs as a user writes them, on the theme of reinforcement-learning training steps in current JAX + optax: PPO for a small policy / value network (clipped ratio objective, clipped value loss, entropy bonus, advantages normalised by the global mean / std across devices), generalized advantage estimation by a reverse lax.scan over time (rollouts sharded over the env axis; and time sharded with the GAE carry handed between devices by ppermute), GRPO for a tiny LM policy (group-relative advantages, groups sharded over dp, per-token log-probs by take_along_axis, KL to a frozen reference policy, padding after EOS masked), REINFORCE with a running baseline kept in an optimizer-like state, double-DQN targets with the action dim sharded over tp (Huber loss, target network EMA), and actor-critic with discrete actions sampled as argmax(logits + Gumbel noise) with the noise passed in.
Networks: observations of 8 features, tanh / relu MLPs of width 32, 4 to 16
discrete actions; the tiny LM has vocabulary 16 (64 for the vocabulary-
parallel family), width 16, a causal prefix-mean token mixer, prompts of 4
and completions of 8 tokens. Optimizer states (adam, sgd with momentum) are
warmed by single-device steps, so a gradient's scale reaches the update.
shard_map families (bugs in brackets):
 1. PPO step (dp8): advantages normalised by pmean'd mean / variance,
    value_and_grad on the local minibatch, gradients pmean'd, chain(clip by
    global norm, adam). [advantages normalised by the local mean / std;
    clip_by_global_norm applied to each device's gradient before the
    pmean.]
 2. GAE with the envs sharded (dp8): delta from the bootstrapped next value,
    reverse lax.scan with done masks, advantages normalised by global
    statistics (psum of sums over the global count), explained variance of
    the value function. [the advantage std from the local shard; var(ret) of
    the explained variance as the pmean of local variances.]
 3. GAE with time sharded (env2 x time4): the next chunk's first value
    ppermute'd back for the boundary delta (the last chunk bootstraps from
    last_value), a local reverse scan from a zero carry with the products of
    gamma * lambda * (1 - done), then the carry handed backwards by ppermute
    in time-1 rounds. [the carry ppermute'd forwards; the value halo
    ppermute'd cyclically so the last chunk bootstraps from chunk 0.]
 4. GRPO step for the tiny LM (dp4, 2 groups of 4 samples per device):
    rewards normalised within each group, per-token log-probs, clipped
    ratio, k3 KL to the reference log-probs, completion mask up to and
    including the first EOS, token-level loss over the global count of
    valid tokens, adam. [each device divides by its own token count before
    the pmean; the gradients not all-reduced.]
 5. GRPO per-token log-probs with a vocabulary-parallel head (dp2 x tp4):
    pmax / psum log-sum-exp, target logit by a masked psum at token - shard
    start, same for the frozen reference head, loss and mean KL over the
    global token count. [no shard offset on the target token; the
    reference's target logit not psum'd over tp.]
 6. REINFORCE with a running-mean baseline in an optimizer-like state
    (dp8): the debiased EMA of returns as the baseline, its update by the
    global mean return, sgd with momentum. [the baseline updated with the
    local mean return; the gradients psum'd instead of pmean'd.]
 7. double-DQN step (dp2 x tp4, 16 actions sharded over tp): online argmax
    over actions by pmax of the local maxima and pmin of the owning global
    index, target Q at that action by a masked psum, vanilla max target by
    pmax, Huber TD loss with a manual backward by jax.vjp (one-hot
    cotangent on the local action shard), trunk gradients psum'd over dp
    and tp, head over dp, adam, target EMA by optax.incremental_update.
    [the argmax index without the shard offset; the trunk gradient psum'd
    over dp only.]
 8. actor-critic step with Gumbel-argmax actions (dp2 x tp4, 16 actions):
    the device's columns of the replicated noise sliced at its offset, the
    sampled action by pmax / pmin, log-prob and entropy by a vocabulary-
    parallel softmax, manual actor backward through the logits, critic
    gradients psum'd over dp only (the critic is replicated over tp).
    [the noise sliced at column 0 on every device; the critic gradients
    also psum'd over tp.]
GSPMD pairs (jax.jit with NamedSharding in / out shardings; correct):
 9. PPO step (dp8); 10. PPO step with the parameters sharded on the hidden
 dim (fsdp8); 11. GRPO step of the tiny LM with MLP columns / vocabulary
 over tp (dp2 x tp4); 12. double-DQN step with target EMA, actions over tp
 (dp2 x tp4); 13. A2C on a rollout [T, N] with Gumbel-argmax actions and
 GAE by reverse scan, envs over dp (dp4).
Numerics: f32 throughout; correct pairs agree at about 1e-6; bug variants
differ by about the learning rate (1e-2) and more.
Run from the repository root: bash samples/gen/run_fresh137.sh [SUBSTR...]
"""
import sys
from typing import NamedTuple
import numpy as np
import jax, jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec as P
import optax
sys.path.insert(0, "samples/gen")  # run from the repository root (run_fresh137.sh)
from fresh_lib import Corpus, seeded, state_specs  # noqa: E402

SCRIPT = "samples/gen/fresh137.py"
C = Corpus("samples/fresh137", SCRIPT, "samples/gen/run_fresh137.sh", sys.argv[1:])
rng, R, I = seeded(137137)
psum, pmax, pmin, pmean, idx = lax.psum, lax.pmax, lax.pmin, lax.pmean, lax.axis_index
f32 = jnp.float32
OBS, HID = 8, 32
GAMMA, LAM = 0.99, 0.95


def np_tree(t):
    return jax.tree.map(np.asarray, t)


def perturb(p, scale):
    return jax.tree.map(lambda w: (w + R(*np.shape(w), scale=scale)).astype(np.float32), p)


def warm(step, params, state, args, n=2):
    """params / state after n single-device steps on args (the step returns them first)."""
    j = jax.jit(step)
    for _ in range(n):
        out = j(params, state, *args)
        params, state = out[0], out[1]
    return np_tree(params), np_tree(state)


def offsets(n_dev, per, scale):
    """a different offset per device block of per rows (so local and global statistics differ)."""
    return np.repeat(R(n_dev, scale=scale), per).astype(np.float32)


# ---------------------------------------------------------------------------
# PPO: shared tanh torso, policy and value heads.
ACT1, B1 = 4, 64
CLIP_EPS, VCLIP, VCOEF, ECOEF = 0.2, 0.2, 0.5, 0.01


def init_ac(act):
    return {"w1": R(OBS, HID, scale=OBS ** -0.5), "b1": R(HID, scale=0.1),
            "w2": R(HID, HID, scale=HID ** -0.5), "b2": R(HID, scale=0.1),
            "wpi": R(HID, act, scale=0.5 * HID ** -0.5), "bpi": np.zeros(act, np.float32),
            "wv": R(HID, 1, scale=HID ** -0.5), "bv": np.zeros(1, np.float32)}


def ac_apply(p, obs):
    h = jnp.tanh(obs @ p["w1"] + p["b1"])
    h = jnp.tanh(h @ p["w2"] + p["b2"])
    return h @ p["wpi"] + p["bpi"], (h @ p["wv"] + p["bv"])[..., 0]


def ppo_loss(p, b, adv):
    """local means of the clipped surrogate, the clipped value loss and the entropy."""
    logits, v = ac_apply(p, b["obs"])
    lp_all = jax.nn.log_softmax(logits)
    lp = jnp.take_along_axis(lp_all, b["act"][:, None], -1)[:, 0]
    ratio = jnp.exp(lp - b["old_logp"])
    pg = -jnp.minimum(ratio * adv, jnp.clip(ratio, 1 - CLIP_EPS, 1 + CLIP_EPS) * adv)
    vc = b["old_v"] + jnp.clip(v - b["old_v"], -VCLIP, VCLIP)
    vl = 0.5 * jnp.maximum(jnp.square(v - b["ret"]), jnp.square(vc - b["ret"]))
    ent = -jnp.sum(jnp.exp(lp_all) * lp_all, -1)
    stats = jnp.stack([jnp.mean(pg), jnp.mean(vl), jnp.mean(ent)])
    return stats[0] + VCOEF * stats[1] - ECOEF * stats[2], stats


MAXNORM1 = 0.25
OPT1 = optax.chain(optax.clip_by_global_norm(MAXNORM1), optax.adam(1e-2))


def ppo_step(params, opt_state, batch):
    a = batch["adv"]
    adv = (a - jnp.mean(a)) / (jnp.std(a) + 1e-8)
    (loss, stats), g = jax.value_and_grad(ppo_loss, has_aux=True)(params, batch, adv)
    updates, opt_state = OPT1.update(g, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss, stats, optax.global_norm(g)


def ppo_batch(params, n_dev):
    obs = R(B1, OBS)
    act = I(0, ACT1, B1)
    old = perturb(params, 0.15)
    logits, v = jax.jit(ac_apply)(old, obs)
    old_logp = np.take_along_axis(np.asarray(jax.nn.log_softmax(logits)), act[:, None], -1)[:, 0]
    adv = R(B1, scale=1.5) + offsets(n_dev, B1 // n_dev, 1.0)
    ret = np.asarray(v) + 0.5 * adv + R(B1, scale=0.3)
    return {"obs": obs, "act": act, "old_logp": old_logp, "old_v": np.asarray(v), "adv": adv, "ret": ret}


def ppo_dp(bug):
    def f(params, opt_state, batch):
        a = batch["adv"]
        if bug == "adv-local-stats":
            mu = jnp.mean(a)
            var = jnp.mean(jnp.square(a - mu))
        else:
            mu = pmean(jnp.mean(a), "dp")
            var = pmean(jnp.mean(jnp.square(a - mu)), "dp")
        adv = (a - mu) / (jnp.sqrt(var) + 1e-8)
        (loss, stats), g = jax.value_and_grad(ppo_loss, has_aux=True)(params, batch, adv)
        if bug == "clip-before-pmean":
            g, _ = optax.clip_by_global_norm(MAXNORM1).update(g, optax.EmptyState())
        g = pmean(g, "dp")
        updates, opt_state = OPT1.update(g, opt_state, params)
        return (optax.apply_updates(params, updates), opt_state, pmean(loss, "dp"), pmean(stats, "dp"),
                optax.global_norm(g))
    return f


P1 = init_ac(ACT1)
P1, S1 = warm(ppo_step, P1, OPT1.init(P1), (ppo_batch(P1, 8),))
BT1 = ppo_batch(P1, 8)
BSP1 = {k: P("dp") for k in BT1}
C.smap("s.ppo_clip_value_entropy_global_adv_norm.dp8", {"dp": 8}, ppo_dp,
       (P(), P(), BSP1), (P(), P(), P(), P(), P()), ppo_step, (P1, S1, BT1),
       bugs=[("adv-local-stats", ["local-statistic"]), ("clip-before-pmean", ["local-statistic"])])

# ---------------------------------------------------------------------------
# 2. GAE with the envs sharded.
T2, N2 = 16, 64


def gae_scan(delta, done, carry0=None):
    def step(a, x):
        d, dn = x
        a = d + GAMMA * LAM * (1.0 - dn) * a
        return a, a
    zero = jnp.zeros_like(delta[0]) if carry0 is None else carry0
    _, adv = lax.scan(step, zero, (delta, done), reverse=True)
    return adv


def gae_ref(rew, val, done, last_v):
    next_v = jnp.concatenate([val[1:], last_v[None]], 0)
    delta = rew + GAMMA * next_v * (1.0 - done) - val
    adv = gae_scan(delta, done)
    ret = adv + val
    adv_n = (adv - jnp.mean(adv)) / (jnp.std(adv) + 1e-8)
    ev = 1.0 - jnp.var(ret - val) / (jnp.var(ret) + 1e-8)
    return adv_n, ret, ev


def gae_env(bug):
    def f(rew, val, done, last_v):
        next_v = jnp.concatenate([val[1:], last_v[None]], 0)
        delta = rew + GAMMA * next_v * (1.0 - done) - val
        adv = gae_scan(delta, done)
        ret = adv + val
        n = psum(jnp.float32(adv.size), "dp")
        gmean = lambda t: psum(jnp.sum(t), "dp") / n  # noqa: E731
        mu = gmean(adv)
        if bug == "adv-local-std":
            sd = jnp.sqrt(jnp.mean(jnp.square(adv - mu)))
        else:
            sd = jnp.sqrt(gmean(jnp.square(adv - mu)))
        adv_n = (adv - mu) / (sd + 1e-8)
        err = ret - val
        var_err = gmean(jnp.square(err - gmean(err)))
        if bug == "ev-pmean-local-var":
            var_ret = pmean(jnp.var(ret), "dp")
        else:
            var_ret = gmean(jnp.square(ret - gmean(ret)))
        return adv_n, ret, 1.0 - var_err / (var_ret + 1e-8)
    return f


def rollout(T, N, n_blocks, axis_blocks):
    env_off = np.repeat(R(n_blocks, scale=1.0), N // n_blocks)
    rew = R(T, N, scale=0.5) + env_off[None, :] * 0.5
    val = R(T, N, scale=0.5) + env_off[None, :] * (3.0 if axis_blocks else 1.0)
    done = (rng.random((T, N)) < 0.08).astype(np.float32)
    return rew.astype(np.float32), val.astype(np.float32), done, R(N, scale=0.5)


C.smap("s.gae_reverse_scan_env_sharded_global_norm.dp8", {"dp": 8}, gae_env,
       (P(None, "dp"), P(None, "dp"), P(None, "dp"), P("dp")), (P(None, "dp"), P(None, "dp"), P()), gae_ref,
       rollout(T2, N2, 8, True),
       bugs=[("adv-local-std", ["local-statistic"]), ("ev-pmean-local-var", ["wrong-reduction"])])

# ---------------------------------------------------------------------------
# 3. GAE with time sharded: boundary value and carry handed backwards by ppermute.
T3, N3, NT3 = 32, 8, 4


def gae_plain_ref(rew, val, done, last_v):
    next_v = jnp.concatenate([val[1:], last_v[None]], 0)
    adv = gae_scan(rew + GAMMA * next_v * (1.0 - done) - val, done)
    return adv, adv + val


def gae_time(bug):
    def f(rew, val, done, last_v):
        me = idx("time")
        back = [(i + 1, i) for i in range(NT3 - 1)]       # chunk i+1 -> chunk i
        if bug == "value-halo-cyclic":
            boundary = lax.ppermute(val[0], "time", [((i + 1) % NT3, i) for i in range(NT3)])
        else:
            boundary = jnp.where(me == NT3 - 1, last_v, lax.ppermute(val[0], "time", back))
        next_v = jnp.concatenate([val[1:], boundary[None]], 0)
        delta = rew + GAMMA * next_v * (1.0 - done) - val

        def step(c, x):
            a, k = c
            d, dn = x
            g = GAMMA * LAM * (1.0 - dn)
            a, k = d + g * a, g * k
            return (a, k), (a, k)
        _, (a_loc, coef) = lax.scan(step, (jnp.zeros_like(last_v), jnp.ones_like(last_v)), (delta, done),
                                    reverse=True)
        carry_perm = [(i, i + 1) for i in range(NT3 - 1)] if bug == "carry-forward" else back
        a_in = jnp.zeros_like(last_v)
        for _ in range(NT3 - 1):
            a_in = lax.ppermute(a_loc[0] + coef[0] * a_in, "time", carry_perm)
        adv = a_loc + coef * a_in[None]
        return adv, adv + val
    return f


C.smap("s.gae_time_sharded_ppermute_carry.env2xtime4", {"env": 2, "time": NT3}, gae_time,
       (P("time", "env"), P("time", "env"), P("time", "env"), P("env")), (P("time", "env"), P("time", "env")),
       gae_plain_ref, rollout(T3, N3, 2, False),
       bugs=[("carry-forward", ["wrong-permutation"]), ("value-halo-cyclic", ["wrong-halo"])])

# ---------------------------------------------------------------------------
# 4. GRPO for a tiny LM policy: groups of K samples per prompt, groups sharded over dp.
V4, D4, F4, PL, TT = 16, 16, 32, 4, 12     # vocabulary, width, MLP, prompt length, total length
EOS, K4, G4 = 1, 4, 8
GRPO_EPS, BETA = 0.2, 0.04


def init_lm(v):
    return {"emb": R(v, D4, scale=0.5), "pos": R(TT, D4, scale=0.1),
            "w1": R(2 * D4, F4, scale=(2 * D4) ** -0.5), "b1": R(F4, scale=0.1),
            "wo": R(F4, v, scale=F4 ** -0.5)}


def lm_hidden(p, tokens):
    x = p["emb"][tokens] + p["pos"]
    c = jnp.cumsum(x, 1) / jnp.arange(1, TT + 1, dtype=f32)[:, None]    # causal prefix mean
    return jnp.tanh(jnp.concatenate([x, c], -1) @ p["w1"] + p["b1"])


def token_logp(p, tokens):
    """log-prob of tokens[:, 1:] under the policy, [B, TT-1]."""
    lp = jax.nn.log_softmax((lm_hidden(p, tokens) @ p["wo"])[:, :-1])
    return jnp.take_along_axis(lp, tokens[:, 1:, None], -1)[..., 0]


def completion_mask(tokens):
    """[B, TT-1] over the targets: completion tokens up to and including the first EOS."""
    comp = tokens[:, PL:]
    eos = (comp == EOS).astype(jnp.int32)
    keep = (jnp.cumsum(eos, 1) - eos) == 0
    return jnp.concatenate([jnp.zeros((tokens.shape[0], PL - 1), bool), keep], 1).astype(f32)


def group_adv(r):
    g = r.reshape(-1, K4)
    return ((g - g.mean(1, keepdims=True)) / (g.std(1, keepdims=True) + 1e-4)).reshape(-1)


def grpo_sums(p, tokens, old_lp, ref_lp, adv):
    lp = token_logp(p, tokens)
    m = completion_mask(tokens)
    ratio = jnp.exp(lp - old_lp)
    pg = -jnp.minimum(ratio * adv[:, None], jnp.clip(ratio, 1 - GRPO_EPS, 1 + GRPO_EPS) * adv[:, None])
    d = ref_lp - lp
    kl = jnp.exp(d) - d - 1.0
    return jnp.sum((pg + BETA * kl) * m), (jnp.sum(kl * m), jnp.sum(m))


OPT4 = optax.adam(1e-2)


def grpo_step(params, opt_state, batch):
    adv = group_adv(batch["reward"])
    (s, (kls, n)), g = jax.value_and_grad(grpo_sums, has_aux=True)(
        params, batch["tokens"], batch["old_lp"], batch["ref_lp"], adv)
    g = jax.tree.map(lambda t: t / n, g)
    updates, opt_state = OPT4.update(g, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, s / n, kls / n


def grpo_batch(params, v):
    prompts = I(2, v, G4, PL)
    comp = I(2, v, G4 * K4, TT - PL)
    comp[rng.random(comp.shape) < 0.18] = EOS
    tokens = np.concatenate([np.repeat(prompts, K4, 0), comp], 1).astype(np.int32)
    lpf = jax.jit(token_logp)
    old_lp = np.asarray(lpf(perturb(params, 0.1), tokens))
    ref_lp = np.asarray(lpf(perturb(params, 0.2), tokens))
    reward = (np.sum(comp == 3, 1) + R(G4 * K4, scale=0.5)).astype(np.float32)
    return {"tokens": tokens, "old_lp": old_lp, "ref_lp": ref_lp, "reward": reward}


def grpo_dp(bug):
    def f(params, opt_state, batch):
        adv = group_adv(batch["reward"])           # whole groups are local
        (s, (kls, n)), g = jax.value_and_grad(grpo_sums, has_aux=True)(
            params, batch["tokens"], batch["old_lp"], batch["ref_lp"], adv)
        ng = psum(n, "dp")
        if bug == "local-token-count":
            g = jax.tree.map(lambda t: pmean(t / n, "dp"), g)
        elif bug == "grads-not-reduced":
            g = jax.tree.map(lambda t: t / ng, g)
        else:
            g = jax.tree.map(lambda t: psum(t, "dp") / ng, g)
        updates, opt_state = OPT4.update(g, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, psum(s, "dp") / ng, psum(kls, "dp") / ng
    return f


P4 = init_lm(V4)
P4, S4 = warm(grpo_step, P4, OPT4.init(P4), (grpo_batch(P4, V4),))
BT4 = grpo_batch(P4, V4)
C.smap("s.grpo_group_adv_kl_eos_mask_token_mean.dp4", {"dp": 4}, grpo_dp,
       (P(), P(), {k: P("dp") for k in BT4}), (P(), P(), P(), P()), grpo_step, (P4, S4, BT4),
       bugs=[("local-token-count", ["local-statistic"]), ("grads-not-reduced", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 5. GRPO per-token log-probs with a vocabulary-parallel head (policy and frozen reference).
B5, T5, V5 = 8, 8, 64


def grpo_vp_ref(h, head, ref_head, tgt, mask, adv, old_lp):
    lp = jnp.take_along_axis(jax.nn.log_softmax(h @ head), tgt[..., None], -1)[..., 0]
    rlp = jnp.take_along_axis(jax.nn.log_softmax(h @ ref_head), tgt[..., None], -1)[..., 0]
    ratio = jnp.exp(lp - old_lp)
    pg = -jnp.minimum(ratio * adv[:, None], jnp.clip(ratio, 1 - GRPO_EPS, 1 + GRPO_EPS) * adv[:, None])
    kl = jnp.exp(rlp - lp) - (rlp - lp) - 1.0
    n = jnp.maximum(jnp.sum(mask), 1.0)
    return jnp.sum((pg + BETA * kl) * mask) / n, jnp.sum(kl * mask) / n, lp


def grpo_vp(bug):
    def vp_logp(h, w, tgt, reduce_tgt=True):
        vl = w.shape[1]
        logits = h @ w
        m = pmax(lax.stop_gradient(jnp.max(logits, -1)), "tp")
        lse = jnp.log(psum(jnp.sum(jnp.exp(logits - m[..., None]), -1), "tp")) + m
        li = tgt if bug == "no-vocab-offset" else tgt - idx("tp") * vl
        inr = (li >= 0) & (li < vl)
        t = jnp.where(inr, jnp.take_along_axis(logits, jnp.clip(li, 0, vl - 1)[..., None], -1)[..., 0], 0.0)
        return (psum(t, "tp") if reduce_tgt else t) - lse

    def f(h, head, ref_head, tgt, mask, adv, old_lp):
        lp = vp_logp(h, head, tgt)
        rlp = vp_logp(h, ref_head, tgt, reduce_tgt=bug != "ref-target-no-psum")
        ratio = jnp.exp(lp - old_lp)
        pg = -jnp.minimum(ratio * adv[:, None], jnp.clip(ratio, 1 - GRPO_EPS, 1 + GRPO_EPS) * adv[:, None])
        kl = jnp.exp(rlp - lp) - (rlp - lp) - 1.0
        n = jnp.maximum(psum(jnp.sum(mask), "dp"), 1.0)
        return psum(jnp.sum((pg + BETA * kl) * mask), "dp") / n, psum(jnp.sum(kl * mask), "dp") / n, lp
    return f


H5, W5 = R(B5, T5, D4), R(D4, V5, scale=0.4)
RW5 = (W5 + R(D4, V5, scale=0.1)).astype(np.float32)
TG5 = I(0, V5, B5, T5)
LEN5 = I(3, T5 + 1, B5)
M5 = (np.arange(T5)[None, :] < LEN5[:, None]).astype(np.float32)
OLD5 = np.asarray(grpo_vp_ref(H5, (W5 + R(D4, V5, scale=0.05)).astype(np.float32), RW5, TG5, M5,
                              np.zeros(B5, np.float32), np.zeros((B5, T5), np.float32))[2])
C.smap("s.grpo_vocab_parallel_logprobs_ref_kl.dp2xtp4", {"dp": 2, "tp": 4}, grpo_vp,
       (P("dp"), P(None, "tp"), P(None, "tp"), P("dp"), P("dp"), P("dp"), P("dp")), (P(), P(), P("dp")),
       grpo_vp_ref, (H5, W5, RW5, TG5, M5, R(B5), OLD5),
       bugs=[("no-vocab-offset", ["wrong-offset"]), ("ref-target-no-psum", ["missing-collective"])])

# ---------------------------------------------------------------------------
# 6. REINFORCE with a running baseline in an optimizer-like state.
ACT6, B6, DECAY = 4, 64, 0.9


class BaselineState(NamedTuple):
    ema: jnp.ndarray
    count: jnp.ndarray


OPT6 = optax.sgd(0.05, momentum=0.9)


def pol_logp(p, obs, act):
    h = jnp.tanh(obs @ p["w1"] + p["b1"])
    lp = jax.nn.log_softmax(h @ p["wpi"] + p["bpi"])
    return jnp.take_along_axis(lp, act[:, None], -1)[:, 0]


def baseline_of(bs):
    c = bs.count.astype(f32)
    return jnp.where(bs.count > 0, bs.ema / (1.0 - DECAY ** c), 0.0)


def reinforce_loss(p, obs, act, adv):
    return -jnp.mean(pol_logp(p, obs, act) * adv)


def reinforce_step(params, state, obs, act, ret):
    opt_s, bs = state
    adv = ret - baseline_of(bs)
    loss, g = jax.value_and_grad(reinforce_loss)(params, obs, act, adv)
    updates, opt_s = OPT6.update(g, opt_s, params)
    bs = BaselineState(DECAY * bs.ema + (1 - DECAY) * jnp.mean(ret), bs.count + 1)
    return optax.apply_updates(params, updates), (opt_s, bs), loss, baseline_of(bs)


def reinforce_dp(bug):
    def f(params, state, obs, act, ret):
        opt_s, bs = state
        adv = ret - baseline_of(bs)
        loss, g = jax.value_and_grad(reinforce_loss)(params, obs, act, adv)
        g = psum(g, "dp") if bug == "grad-psum" else pmean(g, "dp")
        updates, opt_s = OPT6.update(g, opt_s, params)
        mret = jnp.mean(ret) if bug == "baseline-local-mean" else pmean(jnp.mean(ret), "dp")
        bs = BaselineState(DECAY * bs.ema + (1 - DECAY) * mret, bs.count + 1)
        return optax.apply_updates(params, updates), (opt_s, bs), pmean(loss, "dp"), baseline_of(bs)
    return f


def reinforce_batch():
    return R(B6, OBS), I(0, ACT6, B6), (R(B6) + 2.0 + offsets(8, B6 // 8, 1.5)).astype(np.float32)


P6 = {k: v for k, v in init_ac(ACT6).items() if k in ("w1", "b1", "wpi", "bpi")}
S6 = (OPT6.init(P6), BaselineState(jnp.float32(0.0), jnp.int32(0)))
P6, S6 = warm(reinforce_step, P6, S6, reinforce_batch(), n=3)
C.smap("s.reinforce_running_baseline_state_sgd.dp8", {"dp": 8}, reinforce_dp,
       (P(), P(), P("dp"), P("dp"), P("dp")), (P(), P(), P(), P()), reinforce_step, (P6, S6) + reinforce_batch(),
       bugs=[("baseline-local-mean", ["local-statistic"]), ("grad-psum", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 7. double-DQN with the action dim sharded over tp.
A7, B7, TAU = 16, 32, 0.05
OPT7 = optax.adam(1e-2)


def init_q():
    return {"w1": R(OBS, HID, scale=OBS ** -0.5), "b1": R(HID, scale=0.1),
            "wq": R(HID, A7, scale=HID ** -0.5), "bq": R(A7, scale=0.1)}


def qnet(p, obs):
    return jax.nn.relu(obs @ p["w1"] + p["b1"]) @ p["wq"] + p["bq"]


def ddqn_step(online, target, opt_state, batch):
    a_star = jnp.argmax(qnet(online, batch["next_obs"]), -1)
    qt = qnet(target, batch["next_obs"])
    cont = GAMMA * (1.0 - batch["done"])
    y = batch["rew"] + cont * jnp.take_along_axis(qt, a_star[:, None], -1)[:, 0]
    y_dqn = batch["rew"] + cont * jnp.max(qt, -1)

    def loss(p):
        qsa = jnp.take_along_axis(qnet(p, batch["obs"]), batch["act"][:, None], -1)[:, 0]
        td = qsa - y
        return jnp.mean(optax.huber_loss(td)), td
    (l, td), g = jax.value_and_grad(loss, has_aux=True)(online)
    updates, opt_state = OPT7.update(g, opt_state, online)
    online = optax.apply_updates(online, updates)
    target = optax.incremental_update(online, target, TAU)
    return online, target, opt_state, l, td, jnp.mean(y_dqn)


def ddqn_tp(bug):
    def f(online, target, opt_state, batch):
        al = online["wq"].shape[1]
        off = idx("tp") * al
        bg = B7   # the global batch
        qn = qnet(online, batch["next_obs"])
        mv, li = jnp.max(qn, -1), jnp.argmax(qn, -1)
        gm = pmax(mv, "tp")
        own = li if bug == "argmax-no-offset" else li + off
        a_star = pmin(jnp.where(mv == gm, own, A7), "tp")
        qt = qnet(target, batch["next_obs"])

        def pick(q, a):
            la = a - off
            inr = (la >= 0) & (la < al)
            return psum(jnp.where(inr, jnp.take_along_axis(q, jnp.clip(la, 0, al - 1)[:, None], -1)[:, 0], 0.0),
                        "tp")
        cont = GAMMA * (1.0 - batch["done"])
        y = batch["rew"] + cont * pick(qt, a_star)
        y_dqn = batch["rew"] + cont * pmax(jnp.max(qt, -1), "tp")
        q_loc, back = jax.vjp(lambda p: qnet(p, batch["obs"]), online)
        td = pick(q_loc, batch["act"]) - y
        dtd = jnp.clip(td, -1.0, 1.0) / bg                     # d huber / d td, mean over the global batch
        g, = back(jax.nn.one_hot(batch["act"] - off, al) * dtd[:, None])
        trunk_axes = "dp" if bug == "trunk-grad-dp-only" else ("dp", "tp")
        g = {k: psum(t, trunk_axes if k in ("w1", "b1") else "dp") for k, t in g.items()}
        updates, opt_state = OPT7.update(g, opt_state, online)
        online = optax.apply_updates(online, updates)
        target = optax.incremental_update(online, target, TAU)
        l = psum(jnp.sum(optax.huber_loss(td)), "dp") / bg
        return online, target, opt_state, l, td, psum(jnp.sum(y_dqn), "dp") / bg
    return f


def dqn_batch():
    return {"obs": R(B7, OBS), "act": I(0, A7, B7), "rew": R(B7), "done": (rng.random(B7) < 0.2).astype(np.float32),
            "next_obs": R(B7, OBS)}


Q7 = init_q()
QT7 = perturb(Q7, 0.1)
S7 = OPT7.init(Q7)
for _ in range(2):
    Q7, QT7, S7 = jax.jit(ddqn_step)(Q7, QT7, S7, dqn_batch())[:3]
Q7, QT7, S7 = np_tree(Q7), np_tree(QT7), np_tree(S7)


def q_spec(k, w):
    return {"w1": P(), "b1": P(), "wq": P(None, "tp"), "bq": P("tp")}[k]


QS7 = {k: q_spec(k, w) for k, w in Q7.items()}
BS7 = {"obs": P("dp"), "act": P("dp"), "rew": P("dp"), "done": P("dp"), "next_obs": P("dp")}
C.smap("s.double_dqn_actions_over_tp_huber_target_ema.dp2xtp4", {"dp": 2, "tp": 4}, ddqn_tp,
       (QS7, QS7, state_specs(S7, QS7), BS7), (QS7, QS7, state_specs(S7, QS7), P(), P("dp"), P()),
       ddqn_step, (Q7, QT7, S7, dqn_batch()),
       bugs=[("argmax-no-offset", ["wrong-offset"]), ("trunk-grad-dp-only", ["missing-collective"])])

# ---------------------------------------------------------------------------
# 8. actor-critic with Gumbel-argmax actions, action logits over tp.
A8, B8, ENT8, VC8 = 16, 32, 0.02, 0.5


def mlp_tanh(p, obs, w, b):
    return jnp.tanh(obs @ p["w1"] + p["b1"]) @ p[w] + p[b]


def ac_losses(actor, critic, obs, next_obs, rew, done, gumbel):
    logits = mlp_tanh(actor, obs, "wpi", "bpi")
    a = jnp.argmax(logits + gumbel, -1)
    v_next = mlp_tanh(critic, next_obs, "wv", "bv")[:, 0]
    v_old = mlp_tanh(critic, obs, "wv", "bv")[:, 0]
    target = rew + GAMMA * (1.0 - done) * v_next
    adv = target - v_old

    def actor_loss(p):
        lp_all = jax.nn.log_softmax(mlp_tanh(p, obs, "wpi", "bpi"))
        lp = jnp.take_along_axis(lp_all, a[:, None], -1)[:, 0]
        ent = -jnp.sum(jnp.exp(lp_all) * lp_all, -1)
        return jnp.mean(-lp * adv - ENT8 * ent)

    def critic_loss(p):
        return VC8 * jnp.mean(jnp.square(mlp_tanh(p, obs, "wv", "bv")[:, 0] - target))
    la, ga = jax.value_and_grad(actor_loss)(actor)
    lc, gc = jax.value_and_grad(critic_loss)(critic)
    return a, la + lc, ga, gc


def ac_tp(bug):
    def f(actor, critic, obs, next_obs, rew, done, gumbel):
        al = actor["wpi"].shape[1]
        off = idx("tp") * al
        logits, back = jax.vjp(lambda p: mlp_tanh(p, obs, "wpi", "bpi"), actor)
        g_loc = lax.dynamic_slice_in_dim(gumbel, 0 if bug == "noise-slice-no-offset" else off, al, 1)
        z = logits + g_loc
        zm, zi = jnp.max(z, -1), jnp.argmax(z, -1)
        a = pmin(jnp.where(zm == pmax(zm, "tp"), zi + off, A8), "tp")
        v_next = mlp_tanh(critic, next_obs, "wv", "bv")[:, 0]
        v_old = mlp_tanh(critic, obs, "wv", "bv")[:, 0]
        target = rew + GAMMA * (1.0 - done) * v_next
        adv = target - v_old
        # vocabulary-parallel log-softmax over the action shards
        m = pmax(jnp.max(logits, -1), "tp")
        lse = jnp.log(psum(jnp.sum(jnp.exp(logits - m[:, None]), -1), "tp")) + m
        lp_loc = logits - lse[:, None]
        p_loc = jnp.exp(lp_loc)
        ent = -psum(jnp.sum(p_loc * lp_loc, -1), "tp")
        oh = jax.nn.one_hot(a - off, al)
        lp_a = psum(jnp.sum(oh * lp_loc, -1), "tp")
        actor_l = psum(jnp.sum(-lp_a * adv - ENT8 * ent), "dp") / B8
        dz = (-adv[:, None] * (oh - p_loc) + ENT8 * p_loc * (lp_loc + ent[:, None])) / B8
        ga, = back(dz)
        ga = {k: psum(t, ("dp", "tp") if k in ("w1", "b1") else "dp") for k, t in ga.items()}

        def critic_sum(p):
            return VC8 * jnp.sum(jnp.square(mlp_tanh(p, obs, "wv", "bv")[:, 0] - target)) / B8
        lc, gc = jax.value_and_grad(critic_sum)(critic)
        gc = psum(gc, ("dp", "tp") if bug == "critic-grad-psum-tp" else "dp")
        return a, actor_l + psum(lc, "dp"), ga, gc
    return f


ACTOR8 = {"w1": R(OBS, HID, scale=OBS ** -0.5), "b1": R(HID, scale=0.1),
          "wpi": R(HID, A8, scale=HID ** -0.5), "bpi": R(A8, scale=0.1)}
CRITIC8 = {"w1": R(OBS, HID, scale=OBS ** -0.5), "b1": R(HID, scale=0.1),
           "wv": R(HID, 1, scale=HID ** -0.5), "bv": R(1, scale=0.1)}
AS8 = {"w1": P(), "b1": P(), "wpi": P(None, "tp"), "bpi": P("tp")}
GUM8 = -np.log(-np.log(rng.uniform(1e-6, 1.0, (B8, A8)))).astype(np.float32)
C.smap("s.actor_critic_gumbel_argmax_actions_over_tp.dp2xtp4", {"dp": 2, "tp": 4}, ac_tp,
       (AS8, P(), P("dp"), P("dp"), P("dp"), P("dp"), P("dp")), (P("dp"), P(), AS8, P()), ac_losses,
       (ACTOR8, CRITIC8, R(B8, OBS), R(B8, OBS), R(B8), (rng.random(B8) < 0.2).astype(np.float32), GUM8),
       bugs=[("noise-slice-no-offset", ["wrong-offset"]), ("critic-grad-psum-tp", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# GSPMD pairs.

# 9. PPO step, data parallel.
P9 = init_ac(ACT1)
P9, S9 = warm(ppo_step, P9, OPT1.init(P9), (ppo_batch(P9, 8),))
BT9 = ppo_batch(P9, 8)
C.gspmd("g.ppo_step_clip_adam.dp8", {"dp": 8}, (P(), P(), {k: P("dp") for k in BT9}), (P(), P(), P(), P(), P()),
        ppo_step, (P9, S9, BT9))


# 10. PPO step, parameters sharded on the hidden dim.
def fsdp_ac_spec(k):
    return {"w1": P(None, "fsdp"), "b1": P("fsdp"), "w2": P("fsdp", None), "b2": P("fsdp"),
            "wpi": P("fsdp", None), "bpi": P(), "wv": P("fsdp", None), "bv": P()}[k]


P10 = init_ac(ACT1)
P10, S10 = warm(ppo_step, P10, OPT1.init(P10), (ppo_batch(P10, 8),))
PS10 = {k: fsdp_ac_spec(k) for k in P10}
SS10 = state_specs(S10, PS10)
BT10 = ppo_batch(P10, 8)
C.gspmd("g.ppo_step_params_sharded_hidden.fsdp8", {"fsdp": 8}, (PS10, SS10, {k: P("fsdp") for k in BT10}),
        (PS10, SS10, P(), P(), P()), ppo_step, (P10, S10, BT10))

# 11. GRPO step of the tiny LM, MLP columns and vocabulary over tp.
P11 = init_lm(V4)
P11, S11 = warm(grpo_step, P11, OPT4.init(P11), (grpo_batch(P11, V4),))
PS11 = {"emb": P("tp", None), "pos": P(), "w1": P(None, "tp"), "b1": P("tp"), "wo": P("tp", None)}
SS11 = state_specs(S11, PS11)
BT11 = grpo_batch(P11, V4)
C.gspmd("g.grpo_tiny_lm_step_mlp_vocab_tp.dp2xtp4", {"dp": 2, "tp": 4},
        (PS11, SS11, {k: P("dp") for k in BT11}), (PS11, SS11, P(), P()), grpo_step, (P11, S11, BT11))

# 12. double-DQN step with target EMA, actions over tp.
S12 = state_specs(S7, QS7)
C.gspmd("g.double_dqn_step_target_ema_actions_tp.dp2xtp4", {"dp": 2, "tp": 4}, (QS7, QS7, S12, BS7),
        (QS7, QS7, S12, P(), P("dp"), P()), ddqn_step, (Q7, QT7, S7, dqn_batch()))

# 13. A2C on a rollout with Gumbel-argmax actions and GAE, envs over dp.
T13, N13, A13 = 8, 16, 6
OPT13 = optax.chain(optax.clip_by_global_norm(1.0), optax.adam(3e-3))


def a2c_rollout_step(params, opt_state, obs, last_obs, rew, done, gumbel):
    """obs [T, N, OBS]; actions sampled from the current policy; GAE by reverse scan; one adam step."""
    logits, v = ac_apply(params, obs)
    a = jnp.argmax(logits + gumbel, -1)
    _, last_v = ac_apply(params, last_obs)
    next_v = jnp.concatenate([v[1:], last_v[None]], 0)
    adv = gae_scan(rew + GAMMA * next_v * (1.0 - done) - v, done)
    ret = adv + v

    def loss(p):
        lg, vv = ac_apply(p, obs)
        lp_all = jax.nn.log_softmax(lg)
        lp = jnp.take_along_axis(lp_all, a[..., None], -1)[..., 0]
        ent = -jnp.sum(jnp.exp(lp_all) * lp_all, -1)
        return jnp.mean(-lp * adv) + 0.5 * jnp.mean(jnp.square(vv - ret)) - 0.01 * jnp.mean(ent)
    l, g = jax.value_and_grad(loss)(params)
    updates, opt_state = OPT13.update(g, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, l, a, optax.global_norm(g)


P13 = init_ac(A13)
rew13, _, done13, _ = rollout(T13, N13, 4, False)
GUM13 = -np.log(-np.log(rng.uniform(1e-6, 1.0, (T13, N13, A13)))).astype(np.float32)
C.gspmd("g.a2c_rollout_gumbel_actions_gae_scan.dp4", {"dp": 4},
        (P(), P(), P(None, "dp"), P("dp"), P(None, "dp"), P(None, "dp"), P(None, "dp")),
        (P(), P(), P(), P(None, "dp"), P()), a2c_rollout_step,
        (P13, OPT13.init(P13), R(T13, N13, OBS), R(N13, OBS), rew13, done13, GUM13))

C.finish()
