"""samples/fresh88: an 88th batch of programs as a user writes them, on the theme of multi-agent reinforcement learning and multi-agent models under sharding in current JAX / optax, none of them an idiom of samples/fresh .. fresh26, probe, train or wild.
The agents of a team are sharded over a mesh axis "ag" (a few agents per
device), environments over "dp" where a second axis is used.
shard_map families:
 1. MAPPO centralised critic: every agent's observation feeds one value
    V(s) over the joint observation; each device multiplies its agents'
    observations by its rows of the replicated critic matrix (a
    dynamic_slice at axis_index * rows) and psums; per-agent advantages
    returns - V. Bugs: no psum (the critic sees local agents only), rows
    sliced at offset 0.
 2. MAPPO advantage normalisation and PPO clipped loss on a dp2 x ag4 mesh:
    the advantage mean / variance over all environments and agents by psum
    over both axes. Bugs: normalised per device, statistics over ag only.
 3. VDN: Q_tot as the sum over agents of the chosen Q-values (take_along
    _axis), target sum of per-agent maxima, TD loss pmean'd over dp
    (dp2 x ag4). Bugs: the mixer sums only the local agents, pmean instead
    of psum over the agents.
 4. QMIX monotonic mixing: hypernetwork weights |s W1| (agent-major
    columns sharded over ag as P(None, "ag")), the first layer's
    agent sum psum'd, bias, ELU, second hypernetwork layer, V(s) head; TD
    loss. Bugs: sum over local agents only, first-layer bias added inside
    the psum.
 5. attention over agents (MAAC-style): queries for the local agents,
    keys and values all_gather'd over ag, an agent never attends to itself
    (mask at the global agent index). Bugs: softmax over local agents only,
    self-mask at the local index.
 6. mean-field communication: 3 rounds (lax.fori_loop) of messages
    tanh(h Wm), each agent receives the mean of the OTHER agents' messages
    (psum minus own, over A - 1), h <- relu(h U + m V). Bugs: mean over
    the local agents, pmean (over devices) used as the sum.
 7. a ring of agents: agent i reads messages from i - 1 and i + 1
    (cyclically over all agents, jnp.roll in the baseline); devices hold
    contiguous agents, the halos by ppermute; 2 rounds in lax.scan. Bugs:
    the left halo from the right neighbour, the ring not closed (zeros at
    the ends).
 8. COMA counterfactual baseline: a critic per agent over the state, all
    other agents' one-hot actions (own masked out) and the agent id; the
    joint actions all_gather'd; baseline sum_u pi_a(u) Q_a(u); advantage
    and actor loss psum'd. Bugs: own action masked at the local agent
    index, the agent-id one-hot at the local index.
 9. self-play against a league: 8 opponent policies sharded over a league
    axis lg4 (dp2 x lg4), an opponent index per environment as input; each
    device evaluates the envs whose opponent it holds, psum over lg. Bugs:
    index without the league offset, no psum.
10. population Elo: 16 players over pop8 (2 per device), a batch of
    matches (pairs and scores, replicated); ratings all_gather'd,
    expected scores, rating deltas by segment_sum, the local slice
    returned. Bugs: deltas sliced at offset 0, psum of deltas each device
    already computed in full.
11. a MAPPO actor training step on dp2 x ag4: a parameter-shared policy,
    agent-id one-hot appended, PPO clipped objective with global advantage
    normalisation, jax.grad inside the body, gradients psum'd over
    (dp, ag), optax.adam. Bugs: gradients psum'd over dp only, the
    agent-id one-hot at the local index.
17. the centralised critic of 1. over all_gather'd observations (non-tiled
    gather, device axis moved next to the local agents before the reshape).
    Bugs: no moveaxis, gathered along the env axis.
18. QMIX hypernetwork gradients by jax.grad inside the body (check_vma=True).
    Bugs: the agent psum divided by 4, replicated gradients psum'd again.
19. population Elo with the matches sharded over pop8: deltas scattered
    (.at[].add) into a population vector, psum_scatter to the owners. Bugs:
    psum then the first block, opponent ratings from the local shard tiled.
20. multi-head attention over agents on ag2 x tp4 (agents over ag, heads
    over tp, bf16 projections, row-parallel output psum'd over tp). Bugs:
    softmax over local agents, output projection not psum'd.
21. self-play with the league all_gather'd then indexed by the opponent
    index. Bug: index into the local shard modulo its size.
22. prioritized fictitious self-play weights (1 - win rate)^2 over lg8,
    normalised by psum, and the expected win rate. Bugs: local
    normalisation, expectation pmean'd instead of psum'd.
27. independent learners: per-agent (unshared) heads (A, ...) over ag,
    envs over dp, A2C loss with entropy bonus, gradients pmean'd over dp
    only, optax.adam shard-wise. Bugs: gradients also psum'd over ag,
    gradients not averaged over dp.
28. attention over agents without gathering keys: queries all_gather'd,
    softmax merged by pmax / psum, outputs psum_scatter'd back. Bugs:
    denominator not psum'd, local maxima not merged (a per-device max
    changes the numerator and denominator by different factors per device).
29. per-agent advantage normalisation with statistics over the
    environments only (psum over dp alone on dp2 x ag4). Bugs: statistics
    over all agents, variance around the local mean.
30. sequential Elo (lax.scan over the matches), ratings over pop8, a rating
    lookup by psum of the owner's masked value. Bugs: owner offset shifted
    by one device, lookup not psum'd.
31. COMA with every device computing all agents' Q-values (vmap over the
    agents) from the gathered joint action and keeping its block by
    dynamic_slice. Bug: the next device's block.
32. graph message passing between agents with adjacency rows over ag,
    features all_gather'd, clamped degree normalisation, 2 layers. Bugs:
    the adjacency's diagonal block only, the degree psum'd over ag.
35. observations split by environment, per-agent heads split by agent:
    all_to_all there and back (ax4). Bugs: heads of the first block, the
    way back by all_gather and the first envs.
36. population-based training exploit: ranks from all_gather'd scores, the
    bottom two copy (and perturb) the top two's all_gather'd parameters.
    Bugs: ascending ranks, a member copying its own parameters.
37. a ring of agents on dp2 x ag4 with bf16 messages (ppermute each way,
    fori_loop). Bugs: the ring over dp, the neighbour sum doubled.
38. mean-field Q-learning with int32 one-hot action counts psum'd over ag8.
    Bugs: local counts, divided by the local agent count.
39. Bradley-Terry minorisation-maximisation (5 iterations) from a
    win-count matrix with rows over pop4 (the transposed block from an
    all_gather, strengths all_gather'd, renormalised by psum). Bugs: no
    transpose, local normalisation.
42. attention over agents as a ring of ppermutes with an online softmax.
    Bugs: no rescaling of the running sums, one step short.
43. VDN with 16 agents over both mesh axes (P(None, ("dp", "ag"))). Bugs:
    psum over ag only, the reward added inside the psum.
44. the COMA actor gradient by jax.grad inside the body (check_vma=True).
    Bugs: loss pmean'd instead of psum'd, gradient psum'd again.
45. Elo re-anchored to the best player by pmax, the mean by pmean. Bugs:
    local maximum, psum of the local means.
46. mean-field messages aggregated by psum_scatter + all_gather. Bugs:
    gathered blocks interleaved, the scattered part tiled without a gather.
47. QMIX with the hypernetwork's first layer replicated and each device's
    agent block sliced by dynamic_slice. Bug: slice at the device index
    (stride 1) instead of device * local agents.
48. attention over agents merged from per-device partial softmaxes, each
    with its local maximum, rescaled by exp(m - pmax(m)) before the psum.
    Bugs: rescale sign flipped, numerator not rescaled.
49. the best agent per environment: pmax of the local maxima, pmin of the
    global indices reaching it (ties to the lowest index). Bugs: index
    without the device offset, ties to the highest index (pmax) -- a known
    miss: random normal inputs never tie.
50. the team-average message by a hand-written ring all-reduce (3 hops of
    ppermute), a replicated gain pmean'd (a no-op). Bugs: two hops, divided
    by the local agent count.
51. recurrent agents (shared GRU) over 5 steps of lax.scan with VDN mixing
    psum'd over ag every step, dp2 x ag4. Bugs: mixing over dp, no mixing.
53. a centralised value loss computed redundantly on every ag device (the
    joint observation all_gather'd), pmean'd over (dp, ag), its gradient
    psum'd over ag / 4. Bugs: loss psum'd over ag, gradient not divided.
54. the ring of agents with a local jnp.roll whose wrapped entry is replaced
    by the neighbour's (jnp.where). Bugs: wrapped entry kept, the right
    neighbours rolled the wrong way.
56. the COMA baseline with actions over tp too (ag2 x tp4): softmax by
    pmax / psum over tp, the marginalisation psum'd over tp, the taken
    action's Q picked by its owner. Bugs: softmax over local actions, the
    action index without the tp offset.
57. a league of 4 opponent archetypes (different functions), one per lg
    device by lax.switch on axis_index, kept per environment by a masked
    psum. Bugs: the next device's archetype, pmean of all outputs.
45.'s bug "local-max" is a known miss: the checker's own random normal
inputs put the outputs near the anchor 2000, and a local maximum off by ~1
is 5e-4 of that, judged between rounding and a mismatch.
GSPMD pairs (jax.jit with in/out shardings): 12. a QMIX TD step with
optax.adam, q-values over (dp, ag); 13. the MAPPO centralised critic with
observations over (dp, ag); 14. attention over agents, agents over ag8;
15. population Elo with ratings over pop8; 16. COMA advantages, agents
over ag4; 23. a VDN TD step with optax.sgd momentum, obs over (dp, ag);
24. the ring of agents by jnp.roll, agents over ag8; 25. mean-field rounds,
dp2 x ag4; 26. league evaluation, league over lg4; 33. the independent
learners' adam step; 34. the agent GNN with adjacency rows over ag4;
40. Bradley-Terry with win-matrix rows over pop4; 41. the PBT exploit step
over pop8; 52. the recurrent VDN loss and its gradient (dp2 x ag4); 55. the
MAPPO actor step with optax.chain(clip_by_global_norm, adamw).
Numerics: every correct pair agrees with its baseline at rounding level;
every bug variant differs clearly (see "numerics"). Dropped while writing:
a first draft's mean-field bug "all_gather on the size-1 dim then reshape"
was the same function (the reshape restores the order), and a GNN bug
"degree unclamped" only made NaNs, which the numerics do not show.
Run from the repository root: bash samples/gen/run_fresh88.sh [SUBSTR...]
"""
import sys
import numpy as np
import jax, jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec as P
import optax
sys.path.insert(0, "samples/gen")  # run from the repository root (run_fresh88.sh)
from fresh_lib import Corpus, seeded, state_specs, np_tree  # noqa: E402

SCRIPT = "samples/gen/fresh88.py"
C = Corpus("samples/fresh88", SCRIPT, "samples/gen/run_fresh88.sh", sys.argv[1:])
rng, R, I = seeded(8888)
psum, pmean, idx = lax.psum, lax.pmean, lax.axis_index

NE, NA, OD, NU = 8, 8, 6, 5  # envs, agents, obs dim, actions

# ---------------------------------------------------------------------------
# 1. MAPPO centralised critic over the joint observation.


def central_critic(obs, wc, bc, ret):
    joint = obs.reshape(obs.shape[0], -1)                 # (E, A*D)
    v = jnp.tanh(joint @ wc) @ bc                          # wc (A*D, H), bc (H,)
    return ret - v[:, None]


def central_critic_sm(bug):
    def f(obs, wc, bc, ret):
        e, a, d = obs.shape
        me = idx("ag")
        off = 0 if bug == "rows-offset-zero" else me * a * d
        rows = lax.dynamic_slice_in_dim(wc, off, a * d, 0)
        part = obs.reshape(e, a * d) @ rows
        if bug != "no-psum":
            part = psum(part, "ag")
        v = jnp.tanh(part) @ bc
        return ret - v[:, None]
    return f


C.smap("s.mappo_central_critic_rows.ag4", {"ag": 4}, central_critic_sm,
       (P(None, "ag"), P(), P(), P(None, "ag")), P(None, "ag"), central_critic,
       (R(NE, NA, OD), R(NA * OD, 16, scale=0.2), R(16), R(NE, NA)),
       bugs=[("no-psum", ["missing-collective"]), ("rows-offset-zero", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 2. advantage normalisation over all envs and agents, PPO clipped loss.
EPS_CLIP = 0.2


def ppo_norm(adv, logp, logp_old):
    a = (adv - adv.mean()) / (adv.std() + 1e-5)
    r = jnp.exp(logp - logp_old)
    return -jnp.mean(jnp.minimum(r * a, jnp.clip(r, 1 - EPS_CLIP, 1 + EPS_CLIP) * a))


def ppo_norm_sm(bug):
    def f(adv, logp, logp_old):
        axes = ("ag",) if bug == "stats-over-ag-only" else ("dp", "ag")
        n = adv.size * (4 if bug == "stats-over-ag-only" else 8)
        if bug == "per-device-norm":
            mu = adv.mean()
            var = jnp.mean(jnp.square(adv - mu))
        else:
            mu = psum(adv.sum(), axes) / n
            var = psum(jnp.sum(jnp.square(adv - mu)), axes) / n
        a = (adv - mu) / (jnp.sqrt(var) + 1e-5)
        r = jnp.exp(logp - logp_old)
        obj = jnp.minimum(r * a, jnp.clip(r, 1 - EPS_CLIP, 1 + EPS_CLIP) * a)
        return -psum(obj.sum(), ("dp", "ag")) / (adv.size * 8)
    return f


S2 = P("dp", "ag")
lp_old = R(NE, NA, scale=0.5)
C.smap("s.mappo_adv_norm_ppo_clip.dp2xag4", {"dp": 2, "ag": 4}, ppo_norm_sm, (S2,) * 3, P(), ppo_norm,
       (R(NE, NA) * 2 + np.arange(NA, dtype=np.float32), lp_old + R(NE, NA, scale=0.3), lp_old),
       bugs=[("per-device-norm", ["missing-collective"]), ("stats-over-ag-only", ["wrong-axis"])])

# ---------------------------------------------------------------------------
# 3. VDN.
GAMMA = 0.97


def vdn(q, act, rew, done, q_next):
    chosen = jnp.take_along_axis(q, act[..., None], -1)[..., 0]   # (E, A)
    tot = chosen.sum(1)
    tgt = rew + GAMMA * (1 - done) * q_next.max(-1).sum(1)
    return jnp.mean(jnp.square(tot - lax.stop_gradient(tgt)))


def vdn_sm(bug):
    def f(q, act, rew, done, q_next):
        chosen = jnp.take_along_axis(q, act[..., None], -1)[..., 0]
        s, sn = chosen.sum(1), q_next.max(-1).sum(1)
        if bug == "sum-local-agents":
            tot, nxt = s, psum(sn, "ag")
        elif bug == "pmean-not-psum":
            tot, nxt = pmean(s, "ag"), pmean(sn, "ag")
        else:
            tot, nxt = psum(s, "ag"), psum(sn, "ag")
        tgt = rew + GAMMA * (1 - done) * nxt
        return pmean(jnp.mean(jnp.square(tot - tgt)), "dp")
    return f


C.smap("s.vdn_td_sum_agents.dp2xag4", {"dp": 2, "ag": 4}, vdn_sm,
       (S2, S2, P("dp"), P("dp"), S2), P(), vdn,
       (R(NE, NA, NU), I(0, NU, NE, NA), R(NE), (rng.random(NE) < 0.3).astype(np.float32), R(NE, NA, NU)),
       bugs=[("sum-local-agents", ["missing-collective"]), ("pmean-not-psum", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 4. QMIX monotonic mixing with hypernetwork weights.
SD, MH = 10, 8


def qmix_mix(qa, s, hw1, hb1, hw2, hv1, hv2):
    e, a = qa.shape
    w1 = jnp.abs(s @ hw1).reshape(e, a, MH)
    h = jax.nn.elu(jnp.einsum("ea,eam->em", qa, w1) + s @ hb1)
    w2 = jnp.abs(s @ hw2)
    v = jax.nn.relu(s @ hv1) @ hv2
    return jnp.sum(h * w2, -1) + v


def qmix_loss(qa, s, hw1, hb1, hw2, hv1, hv2, tgt):
    return jnp.mean(jnp.square(qmix_mix(qa, s, hw1, hb1, hw2, hv1, hv2) - tgt))


def qmix_sm(bug):
    def f(qa, s, hw1, hb1, hw2, hv1, hv2, tgt):
        e, a = qa.shape
        w1 = jnp.abs(s @ hw1).reshape(e, a, MH)   # this device's agents' columns
        part = jnp.einsum("ea,eam->em", qa, w1)
        if bug == "bias-inside-psum":
            pre = psum(part + s @ hb1, "ag")
        elif bug == "sum-local-agents":
            pre = part + s @ hb1
        else:
            pre = psum(part, "ag") + s @ hb1
        h = jax.nn.elu(pre)
        qt = jnp.sum(h * jnp.abs(s @ hw2), -1) + jax.nn.relu(s @ hv1) @ hv2
        return jnp.mean(jnp.square(qt - tgt))
    return f


C.smap("s.qmix_hypernet_mixing.ag4", {"ag": 4}, qmix_sm,
       (P(None, "ag"), P(), P(None, "ag"), P(), P(), P(), P(), P()), P(), qmix_loss,
       (R(NE, NA), R(NE, SD), R(SD, NA * MH, scale=0.3), R(SD, MH, scale=0.3), R(SD, MH, scale=0.3),
        R(SD, MH, scale=0.3), R(MH, scale=0.3), R(NE)),
       bugs=[("sum-local-agents", ["missing-collective"]), ("bias-inside-psum", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 5. attention over agents, no self-attention.
HD = 8


def agent_attn(h, wq, wk, wv):
    q, k, v = h @ wq, h @ wk, h @ wv                       # (E, A, HD)
    s = jnp.einsum("eid,ejd->eij", q, k) / np.sqrt(HD)
    a = h.shape[1]
    s = jnp.where(jnp.eye(a, dtype=bool), -1e30, s)
    return jnp.einsum("eij,ejd->eid", jax.nn.softmax(s, -1), v)


def agent_attn_sm(bug):
    def f(h, wq, wk, wv):
        al = h.shape[1]
        me = idx("ag")
        q = h @ wq
        if bug == "softmax-local-agents":
            k, v = h @ wk, h @ wv
            cols = me * al + jnp.arange(al)
        else:
            k = lax.all_gather(h @ wk, "ag", axis=1, tiled=True)
            v = lax.all_gather(h @ wv, "ag", axis=1, tiled=True)
            cols = jnp.arange(k.shape[1])
        rows = (jnp.arange(al) if bug == "self-mask-local-index" else me * al + jnp.arange(al))
        s = jnp.einsum("eid,ejd->eij", q, k) / np.sqrt(HD)
        s = jnp.where(rows[:, None] == cols[None, :], -1e30, s)
        return jnp.einsum("eij,ejd->eid", jax.nn.softmax(s, -1), v)
    return f


C.smap("s.agent_attention_gather_kv.ag4", {"ag": 4}, agent_attn_sm, (P(None, "ag"), P(), P(), P()),
       P(None, "ag"), agent_attn, (R(4, NA, 12), R(12, HD), R(12, HD), R(12, HD)),
       bugs=[("softmax-local-agents", ["missing-collective"]), ("self-mask-local-index", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 6. mean-field communication rounds.


def meanfield(h, wm, u, vv):
    a = h.shape[1]

    def rnd(_, h):
        m = jnp.tanh(h @ wm)
        mf = (m.sum(1, keepdims=True) - m) / (a - 1)
        return jax.nn.relu(h @ u + mf @ vv)
    return lax.fori_loop(0, 3, rnd, h)


def meanfield_sm(bug):
    def f(h, wm, u, vv):
        a = h.shape[1] * 4

        def rnd(_, h):
            m = jnp.tanh(h @ wm)
            if bug == "mean-local-agents":
                tot = m.sum(1, keepdims=True)
                mf = (tot - m) / (h.shape[1] - 1)
            elif bug == "pmean-as-sum":
                mf = (pmean(m.sum(1, keepdims=True), "ag") - m) / (a - 1)
            else:
                mf = (psum(m.sum(1, keepdims=True), "ag") - m) / (a - 1)
            return jax.nn.relu(h @ u + mf @ vv)
        return lax.fori_loop(0, 3, rnd, h)
    return f


C.smap("s.meanfield_messages_3rounds.ag4", {"ag": 4}, meanfield_sm, (P(None, "ag"), P(), P(), P()),
       P(None, "ag"), meanfield, (R(4, NA, 8), R(8, 8, scale=0.5), R(8, 8, scale=0.4), R(8, 8, scale=0.6)),
       bugs=[("mean-local-agents", ["missing-collective"]), ("pmean-as-sum", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 7. a ring of agents: neighbours i-1 and i+1, halos by ppermute.


def ring_comm(h, wl, wr, ws):
    def rnd(h, _):
        left, right = jnp.roll(h, 1, axis=1), jnp.roll(h, -1, axis=1)   # agent i-1, agent i+1
        h = jnp.tanh(h @ ws + left @ wl + right @ wr)
        return h, h.mean()
    h, tr = lax.scan(rnd, h, None, length=2)
    return h, tr


def ring_comm_sm(bug):
    def f(h, wl, wr, ws):
        n = 4
        me = idx("ag")
        to_right = [(i, (i + 1) % n) for i in range(n)]
        to_left = [(i, (i - 1) % n) for i in range(n)]

        def rnd(h, _):
            # left halo: the last agent of the device on my left
            lh = lax.ppermute(h[:, -1:], "ag", to_left if bug == "left-halo-wrong-neighbour" else to_right)
            rh = lax.ppermute(h[:, :1], "ag", to_left)
            if bug == "ring-not-closed":
                lh = jnp.where(me == 0, 0.0, lh)
                rh = jnp.where(me == n - 1, 0.0, rh)
            left = jnp.concatenate([lh, h[:, :-1]], 1)
            right = jnp.concatenate([h[:, 1:], rh], 1)
            h = jnp.tanh(h @ ws + left @ wl + right @ wr)
            return h, pmean(h.mean(), "ag")
        h, tr = lax.scan(rnd, h, None, length=2)
        return h, tr
    return f


C.smap("s.agent_ring_ppermute_scan.ag4", {"ag": 4}, ring_comm_sm, (P(None, "ag"), P(), P(), P()),
       (P(None, "ag"), P()), ring_comm,
       (R(3, NA, 8), R(8, 8, scale=0.5), R(8, 8, scale=0.5), R(8, 8, scale=0.5)),
       bugs=[("left-halo-wrong-neighbour", ["wrong-permutation"]), ("ring-not-closed", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 8. COMA counterfactual baseline.
CH = 16


def coma_inputs(s, act, a_idx):
    """critic input of agent a_idx: state, the joint one-hot actions with
    agent a_idx's zeroed, the one-hot agent id."""
    e, a = act.shape
    oh = jax.nn.one_hot(act, NU)                                     # (E, A, U)
    keep = (jnp.arange(a) != a_idx)[None, :, None]
    others = (oh * keep).reshape(e, a * NU)
    aid = jnp.broadcast_to(jax.nn.one_hot(a_idx, a), (e, a))
    return jnp.concatenate([s, others, aid], -1)


def coma(s, act, logits, w1, w2):
    e, a = act.shape

    def q_of(ai):
        return jnp.tanh(coma_inputs(s, act, ai) @ w1) @ w2            # (E, U)
    q = jnp.stack([q_of(i) for i in range(a)], 1)                     # (E, A, U)
    pi = jax.nn.softmax(logits, -1)
    base = jnp.sum(pi * q, -1)
    qa = jnp.take_along_axis(q, act[..., None], -1)[..., 0]
    adv = qa - base
    logp = jnp.take_along_axis(jax.nn.log_softmax(logits, -1), act[..., None], -1)[..., 0]
    return adv, -jnp.mean(logp * lax.stop_gradient(adv))


def coma_sm(bug):
    def f(s, act, logits, w1, w2):
        e, al = act.shape
        me = idx("ag")
        jact = lax.all_gather(act, "ag", axis=1, tiled=True)          # (E, A)
        a = jact.shape[1]
        oh = jax.nn.one_hot(jact, NU)
        qs = []
        for j in range(al):
            g = me * al + j
            mask_at = j if bug == "mask-local-agent" else g
            id_at = j if bug == "agent-id-local" else g
            keep = (jnp.arange(a) != mask_at)[None, :, None]
            x = jnp.concatenate([s, (oh * keep).reshape(e, a * NU),
                                 jnp.broadcast_to(jax.nn.one_hot(id_at, a), (e, a))], -1)
            qs.append(jnp.tanh(x @ w1) @ w2)
        q = jnp.stack(qs, 1)
        pi = jax.nn.softmax(logits, -1)
        adv = jnp.take_along_axis(q, act[..., None], -1)[..., 0] - jnp.sum(pi * q, -1)
        logp = jnp.take_along_axis(jax.nn.log_softmax(logits, -1), act[..., None], -1)[..., 0]
        return adv, -psum(jnp.sum(logp * adv), "ag") / (e * a)
    return f


C.smap("s.coma_counterfactual_baseline.ag4", {"ag": 4}, coma_sm, (P(), P(None, "ag"), P(None, "ag"), P(), P()),
       (P(None, "ag"), P()), coma,
       (R(NE, SD), I(0, NU, NE, NA), R(NE, NA, NU), R(SD + NA * NU + NA, CH, scale=0.3), R(CH, NU, scale=0.5)),
       bugs=[("mask-local-agent", ["wrong-offset"]), ("agent-id-local", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 9. self-play against league opponents chosen by an index input.
NK = 8


def league_eval(obs, opp, wp, league):
    """obs (E, D); opp (E,) league index; wp (D, U) learner; league (K, D, U)."""
    mine = jax.nn.log_softmax(obs @ wp, -1)
    theirs = jax.nn.softmax(jnp.einsum("ed,edu->eu", obs, league[opp]), -1)
    return jnp.sum(theirs * mine, -1)   # learner log-prob of the opponent's action distribution


def league_sm(bug):
    def f(obs, opp, wp, league):
        kl = league.shape[0]
        me = idx("lg")
        loc = opp if bug == "index-no-offset" else opp - me * kl
        here = (loc >= 0) & (loc < kl)
        w = league[jnp.clip(loc, 0, kl - 1)]
        lg = jnp.where(here[:, None], jnp.einsum("ed,edu->eu", obs, w), 0.0)
        if bug != "no-psum":
            lg = psum(lg, "lg")
        mine = jax.nn.log_softmax(obs @ wp, -1)
        return jnp.sum(jax.nn.softmax(lg, -1) * mine, -1)
    return f


C.smap("s.league_opponent_by_index.dp2xlg4", {"dp": 2, "lg": 4}, league_sm,
       (P("dp"), P("dp"), P(), P("lg")), P("dp"), league_eval,
       (R(NE, OD), I(0, NK, NE), R(OD, NU), R(NK, OD, NU)),
       bugs=[("index-no-offset", ["wrong-offset"]), ("no-psum", ["missing-collective"])])

# ---------------------------------------------------------------------------
# 10. population Elo.
NPL, NM, KE = 16, 24, 16.0


def elo(r, pa, pb, score):
    ea = 1.0 / (1.0 + 10.0 ** ((r[pb] - r[pa]) / 400.0))
    d = KE * (score - ea)
    delta = jax.ops.segment_sum(d, pa, NPL) - jax.ops.segment_sum(d, pb, NPL)
    return r + delta


def elo_sm(bug):
    def f(r, pa, pb, score):
        rl = r.shape[0]
        me = idx("pop")
        rall = lax.all_gather(r, "pop", tiled=True)
        ea = 1.0 / (1.0 + 10.0 ** ((rall[pb] - rall[pa]) / 400.0))
        d = KE * (score - ea)
        delta = jax.ops.segment_sum(d, pa, NPL) - jax.ops.segment_sum(d, pb, NPL)
        if bug == "psum-full-deltas":
            delta = psum(delta, "pop")
        off = 0 if bug == "slice-offset-zero" else me * rl
        return r + lax.dynamic_slice_in_dim(delta, off, rl)
    return f


pa10 = I(0, NPL, NM)
pb10 = (pa10 + I(1, NPL, NM)) % NPL
C.smap("s.population_elo_batch.pop8", {"pop": 8}, elo_sm, (P("pop"), P(), P(), P()), P("pop"), elo,
       (1500 + R(NPL, scale=100.0), pa10, pb10, rng.choice([0.0, 0.5, 1.0], NM).astype(np.float32)),
       bugs=[("slice-offset-zero", ["wrong-offset"]), ("psum-full-deltas", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 11. MAPPO actor training step, parameter sharing, dp2 x ag4.
actor_opt = optax.adam(3e-3)


def actor_logits(p, obs, aid):
    return jnp.concatenate([obs, aid], -1) @ p["w"] + p["b"]


def mappo_actor_step(p, st, obs, act, adv, logp_old):
    e, a, _ = obs.shape
    aid = jnp.broadcast_to(jnp.eye(a), (e, a, a))

    def loss(p):
        lp = jnp.take_along_axis(jax.nn.log_softmax(actor_logits(p, obs, aid), -1), act[..., None], -1)[..., 0]
        an = (adv - adv.mean()) / (adv.std() + 1e-5)
        r = jnp.exp(lp - logp_old)
        return -jnp.mean(jnp.minimum(r * an, jnp.clip(r, 0.8, 1.2) * an))
    l, g = jax.value_and_grad(loss)(p)
    u, st = actor_opt.update(g, st, p)
    return optax.apply_updates(p, u), st, l


def mappo_actor_sm(bug):
    def f(p, st, obs, act, adv, logp_old):
        e, al, _ = obs.shape
        me = idx("ag")
        na = al * 4
        ids = jnp.arange(al) if bug == "agent-id-local" else me * al + jnp.arange(al)
        aid = jnp.broadcast_to(jax.nn.one_hot(ids, na), (e, al, na))
        n = adv.size * 8
        mu = psum(adv.sum(), ("dp", "ag")) / n
        sd = jnp.sqrt(psum(jnp.sum(jnp.square(adv - mu)), ("dp", "ag")) / n)
        an = (adv - mu) / (sd + 1e-5)

        def loss(p):
            lp = jnp.take_along_axis(jax.nn.log_softmax(actor_logits(p, obs, aid), -1), act[..., None], -1)[..., 0]
            r = jnp.exp(lp - logp_old)
            return -jnp.sum(jnp.minimum(r * an, jnp.clip(r, 0.8, 1.2) * an)) / n
        l, g = jax.value_and_grad(loss)(p)
        axes = ("dp",) if bug == "grad-psum-dp-only" else ("dp", "ag")
        g = jax.tree.map(lambda x: psum(x, axes), g)
        l = psum(l, ("dp", "ag"))
        u, st = actor_opt.update(g, st, p)
        return optax.apply_updates(p, u), st, l
    return f


ap = {"w": R(OD + NA, NU, scale=0.3), "b": np.zeros(NU, np.float32)}
ast = np_tree(actor_opt.init(ap))
ap_spec = jax.tree.map(lambda _: P(), ap)
ast_spec = jax.tree.map(lambda _: P(), ast)
obs11 = R(NE, NA, OD)
act11 = I(0, NU, NE, NA)
lp11 = np.asarray(jnp.take_along_axis(jax.nn.log_softmax(actor_logits(ap, obs11, np.broadcast_to(np.eye(NA), (NE, NA, NA))), -1),
                                      act11[..., None], -1)[..., 0]) + R(NE, NA, scale=0.1)
C.smap("s.mappo_actor_adam_step.dp2xag4", {"dp": 2, "ag": 4}, mappo_actor_sm,
       (ap_spec, ast_spec, S2, S2, S2, S2), (ap_spec, ast_spec, P()), mappo_actor_step,
       (ap, ast, obs11, act11, R(NE, NA) + 0.5, lp11.astype(np.float32)),
       bugs=[("grad-psum-dp-only", ["wrong-axis"]), ("agent-id-local", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# GSPMD pairs.
# 12. QMIX TD step with optax.adam, q-values over (dp, ag).
qopt = optax.adam(1e-3)
qp = {"hw1": R(SD, NA * MH, scale=0.3), "hb1": R(SD, MH, scale=0.3), "hw2": R(SD, MH, scale=0.3),
      "hv1": R(SD, MH, scale=0.3), "hv2": R(MH, scale=0.3)}
qst = np_tree(qopt.init(qp))


def qmix_step(p, st, qa, s, r, done, qa_next, s_next):
    tgt = r + GAMMA * (1 - done) * qmix_mix(qa_next.max(-1), s_next, **p)
    tgt = lax.stop_gradient(tgt)

    def loss(p):
        chosen = qa.max(-1)
        return jnp.mean(jnp.square(qmix_mix(chosen, s, **p) - tgt))
    l, g = jax.value_and_grad(loss)(p)
    u, st = qopt.update(g, st, p)
    return optax.apply_updates(p, u), st, l


qp_spec = {"hw1": P(None, "ag"), "hb1": P(), "hw2": P(), "hv1": P(), "hv2": P()}
qst_spec = state_specs(qst, qp_spec)
Q3 = P("dp", "ag", None)
C.gspmd("g.qmix_td_adam.dp2xag4", {"dp": 2, "ag": 4},
        (qp_spec, qst_spec, Q3, P("dp"), P("dp"), P("dp"), Q3, P("dp")), (qp_spec, qst_spec, P()), qmix_step,
        (qp, qst, R(NE, NA, NU), R(NE, SD), R(NE), (rng.random(NE) < 0.3).astype(np.float32),
         R(NE, NA, NU), R(NE, SD)))

# 13. centralised critic, observations over (dp, ag).
C.gspmd("g.mappo_central_critic.dp2xag4", {"dp": 2, "ag": 4}, (P("dp", "ag"), P(), P(), P("dp", "ag")),
        P("dp", "ag"), central_critic, (R(NE, NA, OD), R(NA * OD, 16, scale=0.2), R(16), R(NE, NA)))

# 14. attention over agents, agents over ag8.
C.gspmd("g.agent_attention.ag8", {"ag": 8}, (P(None, "ag"), P(), P(), P()), P(None, "ag"), agent_attn,
        (R(4, NA, 12), R(12, HD), R(12, HD), R(12, HD)))

# 15. population Elo, ratings over pop8.
C.gspmd("g.population_elo.pop8", {"pop": 8}, (P("pop"), P(), P(), P()), P("pop"), elo,
        (1500 + R(NPL, scale=100.0), pa10, pb10, rng.choice([0.0, 0.5, 1.0], NM).astype(np.float32)))

# 16. COMA advantages and actor loss, agents over ag4.
C.gspmd("g.coma_advantages.ag4", {"ag": 4}, (P(), P(None, "ag"), P(None, "ag"), P(), P()), (P(None, "ag"), P()),
        coma, (R(NE, SD), I(0, NU, NE, NA), R(NE, NA, NU), R(SD + NA * NU + NA, CH, scale=0.3),
               R(CH, NU, scale=0.5)))

# ---------------------------------------------------------------------------
# 17. centralised critic over all_gather'd observations (non-tiled gather,
#     the device axis moved next to the local agents before the reshape).


def critic_gather_sm(bug):
    def f(obs, wc, bc, ret):
        e = obs.shape[0]
        if bug == "gather-no-moveaxis":
            g = lax.all_gather(obs, "ag")                     # (n, E, al, D)
            joint = g.reshape(e, -1)
        elif bug == "gather-env-axis":
            g = lax.all_gather(obs, "ag", axis=0, tiled=True)  # (n*E, al, D)
            joint = g.reshape(e, -1)
        else:
            g = lax.all_gather(obs, "ag")                     # (n, E, al, D)
            joint = jnp.moveaxis(g, 0, 1).reshape(e, -1)
        v = jnp.tanh(joint @ wc) @ bc
        return ret - v[:, None]
    return f


C.smap("s.mappo_critic_gather_joint_obs.ag4", {"ag": 4}, critic_gather_sm,
       (P(None, "ag"), P(), P(), P(None, "ag")), P(None, "ag"), central_critic,
       (R(NE, NA, OD), R(NA * OD, 16, scale=0.2), R(16), R(NE, NA)),
       bugs=[("gather-no-moveaxis", ["layout-mismatch"]), ("gather-env-axis", ["wrong-axis"])])

# ---------------------------------------------------------------------------
# 18. QMIX hypernetwork gradients by jax.grad inside the body (check_vma=True):
#     hw1's columns over ag, the rest replicated; gradients of replicated
#     parameters psum'd by the transpose of the agent psum.


def qmix_grads(qa, s, hw1, hb1, hw2, hv1, hv2, tgt):
    return jax.grad(lambda a, b, c: qmix_loss(qa, s, a, b, c, hv1, hv2, tgt), argnums=(0, 1, 2))(hw1, hb1, hw2)


def qmix_grad_sm(bug):
    def f(qa, s, hw1, hb1, hw2, hv1, hv2, tgt):
        def loss(hw1, hb1, hw2):
            e, a = qa.shape
            w1 = jnp.abs(s @ hw1).reshape(e, a, MH)
            part = jnp.einsum("ea,eam->em", qa, w1)
            if bug == "scale-by-agents":
                pre = psum(part, "ag") / 4 + s @ hb1
            else:
                pre = psum(part, "ag") + s @ hb1
            h = jax.nn.elu(pre)
            qt = jnp.sum(h * jnp.abs(s @ hw2), -1) + jax.nn.relu(s @ hv1) @ hv2
            return jnp.mean(jnp.square(qt - tgt))
        g = jax.grad(loss, argnums=(0, 1, 2))(hw1, hb1, hw2)
        if bug == "replicated-grads-psummed":
            g = (g[0], psum(g[1], "ag"), g[2])
        return g
    return f


C.smap("s.qmix_hypernet_grads_vma.ag4", {"ag": 4}, qmix_grad_sm,
       (P(None, "ag"), P(), P(None, "ag"), P(), P(), P(), P(), P()), (P(None, "ag"), P(), P()), qmix_grads,
       (R(NE, NA), R(NE, SD), R(SD, NA * MH, scale=0.3), R(SD, MH, scale=0.3), R(SD, MH, scale=0.3),
        R(SD, MH, scale=0.3), R(MH, scale=0.3), R(NE)),
       bugs=[("scale-by-agents", ["wrong-scale"]), ("replicated-grads-psummed", ["wrong-scale"])], check_vma=True)

# ---------------------------------------------------------------------------
# 19. population Elo with the matches sharded over pop: each device scores
#     its matches against all_gather'd ratings, scatters the deltas into a
#     population-sized vector, and psum_scatter hands each device its players.


def elo_rs_sm(bug):
    def f(r, pa, pb, score):
        rall = lax.all_gather(r, "pop", tiled=True)
        ea = 1.0 / (1.0 + 10.0 ** ((rall[pb] - rall[pa]) / 400.0))
        d = KE * (score - ea)
        delta = jnp.zeros(NPL, jnp.float32).at[pa].add(d).at[pb].add(-d)
        if bug == "psum-then-first-block":
            mine = psum(delta, "pop")[:r.shape[0]]
        elif bug == "local-ratings-only":
            rl = jnp.tile(r, 8)
            ea = 1.0 / (1.0 + 10.0 ** ((rl[pb] - rl[pa]) / 400.0))
            d = KE * (score - ea)
            mine = lax.psum_scatter(jnp.zeros(NPL, jnp.float32).at[pa].add(d).at[pb].add(-d), "pop", tiled=True)
        else:
            mine = lax.psum_scatter(delta, "pop", tiled=True)
        return r + mine
    return f


pa19 = I(0, NPL, 32)
pb19 = (pa19 + I(1, NPL, 32)) % NPL
C.smap("s.population_elo_matches_sharded.pop8", {"pop": 8}, elo_rs_sm, (P("pop"), P("pop"), P("pop"), P("pop")),
       P("pop"), elo, (1500 + R(NPL, scale=100.0), pa19, pb19, rng.choice([0.0, 0.5, 1.0], 32).astype(np.float32)),
       bugs=[("psum-then-first-block", ["wrong-offset"]), ("local-ratings-only", ["missing-collective"])])

# ---------------------------------------------------------------------------
# 20. multi-head attention over agents on ag2 x tp4: agents over ag, heads
#     over tp (column-parallel q/k/v, row-parallel output psum'd over tp),
#     keys and values all_gather'd over ag; bf16 projections.
NH, DH = 4, 4


def mh_agent_attn(h, wq, wk, wv, wo):
    e, a, _ = h.shape
    hb = h.astype(jnp.bfloat16)
    q, k, v = (jnp.einsum("ead,dhk->eahk", hb, w.astype(jnp.bfloat16)).astype(jnp.float32) for w in (wq, wk, wv))
    s = jnp.einsum("eihk,ejhk->ehij", q, k) / np.sqrt(DH)
    o = jnp.einsum("ehij,ejhk->eihk", jax.nn.softmax(s, -1), v)
    return jnp.einsum("eihk,hkd->eid", o, wo)


def mh_agent_attn_sm(bug):
    def f(h, wq, wk, wv, wo):
        hb = h.astype(jnp.bfloat16)
        q, k, v = (jnp.einsum("ead,dhk->eahk", hb, w.astype(jnp.bfloat16)).astype(jnp.float32) for w in (wq, wk, wv))
        if bug != "softmax-local-agents":
            k = lax.all_gather(k, "ag", axis=1, tiled=True)
            v = lax.all_gather(v, "ag", axis=1, tiled=True)
        s = jnp.einsum("eihk,ejhk->ehij", q, k) / np.sqrt(DH)
        o = jnp.einsum("ehij,ejhk->eihk", jax.nn.softmax(s, -1), v)
        out = jnp.einsum("eihk,hkd->eid", o, wo)
        return out if bug == "out-proj-no-psum" else psum(out, "tp")
    return f


WH = P(None, "tp", None)
C.smap("s.multihead_agent_attention.ag2xtp4", {"ag": 2, "tp": 4}, mh_agent_attn_sm,
       (P(None, "ag"), WH, WH, WH, P("tp")), P(None, "ag"), mh_agent_attn,
       (R(4, NA, 12), R(12, NH, DH, scale=0.4), R(12, NH, DH, scale=0.4), R(12, NH, DH), R(NH, DH, 12, scale=0.4)),
       bugs=[("softmax-local-agents", ["missing-collective"]), ("out-proj-no-psum", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 21. self-play against a league gathered whole: the league's opponents over
#     lg4 all_gather'd and indexed by the per-environment opponent index.


def league_gather_sm(bug):
    def f(obs, opp, wp, league):
        if bug == "index-local-shard":
            w = league[opp % league.shape[0]]
        else:
            full = lax.all_gather(league, "lg", tiled=True)
            w = full[opp]
        lg = jnp.einsum("ed,edu->eu", obs, w)
        mine = jax.nn.log_softmax(obs @ wp, -1)
        return jnp.sum(jax.nn.softmax(lg, -1) * mine, -1)
    return f


C.smap("s.league_gathered_then_indexed.dp2xlg4", {"dp": 2, "lg": 4}, league_gather_sm,
       (P("dp"), P("dp"), P(), P("lg")), P("dp"), league_eval,
       (R(NE, OD), I(0, NK, NE), R(OD, NU), R(NK, OD, NU)),
       bugs=[("index-local-shard", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 22. prioritized fictitious self-play: opponent sampling weights
#     f(p) = (1 - p)^2 of each league member's win rate (wins / games,
#     counts over lg8), normalised by a psum; and the expected win rate
#     under that distribution.


def pfsp(wins, games):
    p = wins / jnp.maximum(games, 1.0)
    w = jnp.square(1.0 - p)
    w = w / w.sum()
    return w, jnp.sum(w * p)


def pfsp_sm(bug):
    def f(wins, games):
        p = wins / jnp.maximum(games, 1.0)
        w = jnp.square(1.0 - p)
        z = w.sum() if bug == "normalise-local" else psum(w.sum(), "lg")
        w = w / z
        tot = jnp.sum(w * p)
        return w, (pmean(tot, "lg") if bug == "expectation-pmean" else psum(tot, "lg"))
    return f


g22 = rng.integers(0, 20, 16).astype(np.float32)
C.smap("s.pfsp_opponent_weights.lg8", {"lg": 8}, pfsp_sm, (P("lg"), P("lg")), (P("lg"), P()), pfsp,
       (np.floor(g22 * rng.random(16)).astype(np.float32), g22),
       bugs=[("normalise-local", ["missing-collective"]), ("expectation-pmean", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# More GSPMD pairs.
# 23. VDN TD step with optax.sgd (momentum), q-network shared by agents, obs over (dp, ag).
sgd = optax.sgd(1e-2, momentum=0.9)
vp = {"w1": R(OD, 16, scale=0.4), "w2": R(16, NU, scale=0.4)}
vst = np_tree(sgd.init(vp))


def vdn_step(p, st, obs, act, rew, done, obs_next):
    def qnet(p, o):
        return jax.nn.relu(o @ p["w1"]) @ p["w2"]

    def loss(p):
        tot = jnp.take_along_axis(qnet(p, obs), act[..., None], -1)[..., 0].sum(1)
        tgt = rew + GAMMA * (1 - done) * qnet(p, obs_next).max(-1).sum(1)
        return jnp.mean(jnp.square(tot - lax.stop_gradient(tgt)))
    l, g = jax.value_and_grad(loss)(p)
    u, st = sgd.update(g, st, p)
    return optax.apply_updates(p, u), st, l


vsp = jax.tree.map(lambda _: P(), vp)
C.gspmd("g.vdn_sgd_step.dp2xag4", {"dp": 2, "ag": 4},
        (vsp, state_specs(vst, vsp), P("dp", "ag"), P("dp", "ag"), P("dp"), P("dp"), P("dp", "ag")),
        (vsp, state_specs(vst, vsp), P()), vdn_step,
        (vp, vst, R(NE, NA, OD), I(0, NU, NE, NA), R(NE), (rng.random(NE) < 0.3).astype(np.float32), R(NE, NA, OD)))

# 24. ring of agents by jnp.roll, agents over ag8.
C.gspmd("g.agent_ring_roll.ag8", {"ag": 8}, (P(None, "ag"), P(), P(), P()), (P(None, "ag"), P()), ring_comm,
        (R(3, NA, 8), R(8, 8, scale=0.5), R(8, 8, scale=0.5), R(8, 8, scale=0.5)))

# 25. mean-field rounds, agents over ag4, envs over dp2.
C.gspmd("g.meanfield_rounds.dp2xag4", {"dp": 2, "ag": 4}, (P("dp", "ag"), P(), P(), P()), P("dp", "ag"), meanfield,
        (R(4, NA, 8), R(8, 8, scale=0.5), R(8, 8, scale=0.4), R(8, 8, scale=0.6)))

# 26. self-play league evaluation, league over lg4, envs over dp2.
C.gspmd("g.league_eval.dp2xlg4", {"dp": 2, "lg": 4}, (P("dp"), P("dp"), P(), P("lg")), P("dp"), league_eval,
        (R(NE, OD), I(0, NK, NE), R(OD, NU), R(NK, OD, NU)))

# ---------------------------------------------------------------------------
# 27. independent learners: per-agent (unshared) policy and value heads of
#     shape (A, ...) sharded over ag, envs over dp (dp2 x ag4); an A2C loss
#     with an entropy bonus; gradients pmean'd over dp ONLY (each device owns
#     its agents' parameters); optax.adam shard-wise.
ind_opt = optax.adam(1e-2)


def ind_loss(p, obs, act, ret):
    logits = jnp.einsum("ead,adu->eau", obs, p["pi"])
    v = jnp.einsum("ead,ad->ea", obs, p["v"])
    logp = jax.nn.log_softmax(logits, -1)
    lp = jnp.take_along_axis(logp, act[..., None], -1)[..., 0]
    adv = lax.stop_gradient(ret - v)
    ent = -jnp.sum(jnp.exp(logp) * logp, -1)
    return jnp.sum(jnp.mean(-lp * adv + 0.5 * jnp.square(ret - v) - 0.01 * ent, 0))  # sum over agents


def ind_step(p, st, obs, act, ret):
    l, g = jax.value_and_grad(ind_loss)(p, obs, act, ret)
    u, st = ind_opt.update(g, st, p)
    return optax.apply_updates(p, u), st, l


def ind_step_sm(bug):
    def f(p, st, obs, act, ret):
        l, g = jax.value_and_grad(ind_loss)(p, obs, act, ret)
        if bug == "grads-psum-over-agents":
            g = jax.tree.map(lambda x: pmean(psum(x, "ag"), "dp"), g)
        elif bug == "grads-not-averaged-over-dp":
            pass
        else:
            g = jax.tree.map(lambda x: pmean(x, "dp"), g)
        u, st = ind_opt.update(g, st, p)
        return optax.apply_updates(p, u), st, psum(pmean(l, "dp"), "ag")
    return f


ip = {"pi": R(NA, OD, NU, scale=0.3), "v": R(NA, OD, scale=0.3)}
ist = np_tree(ind_opt.init(ip))
ip_spec = {"pi": P("ag"), "v": P("ag")}
ist_spec = state_specs(ist, ip_spec)
C.smap("s.independent_learners_per_agent_params.dp2xag4", {"dp": 2, "ag": 4}, ind_step_sm,
       (ip_spec, ist_spec, S2, S2, S2), (ip_spec, ist_spec, P()), ind_step,
       (ip, ist, R(NE, NA, OD), I(0, NU, NE, NA), R(NE, NA)),
       bugs=[("grads-psum-over-agents", ["wrong-axis"]), ("grads-not-averaged-over-dp", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 28. attention over agents without gathering keys: the queries all_gather'd,
#     each device scores them against its own agents' keys, the softmax
#     merged by pmax / psum of the exponentials and of the weighted values,
#     and psum_scatter returns each device its queries' outputs.


def agent_attn_full(h, wq, wk, wv):
    q, k, v = h @ wq, h @ wk, h @ wv
    s = jnp.einsum("eid,ejd->eij", q, k) / np.sqrt(HD)
    return jnp.einsum("eij,ejd->eid", jax.nn.softmax(s, -1), v)


def agent_attn_merge_sm(bug):
    def f(h, wq, wk, wv):
        qa = lax.all_gather(h @ wq, "ag", axis=1, tiled=True)        # (E, A, HD)
        k, v = h @ wk, h @ wv
        s = jnp.einsum("eid,ejd->eij", qa, k) / np.sqrt(HD)
        m = s.max(-1, keepdims=True)
        if bug != "local-max-unmerged":
            m = lax.pmax(m, "ag")
        p = jnp.exp(s - m)
        den = p.sum(-1, keepdims=True)
        num = jnp.einsum("eij,ejd->eid", p, v)
        if bug == "denominator-local":
            out = num / den
            return lax.psum_scatter(out, "ag", scatter_dimension=1, tiled=True)
        den = psum(den, "ag")
        return lax.psum_scatter(num / den, "ag", scatter_dimension=1, tiled=True)
    return f


C.smap("s.agent_attention_merged_softmax.ag4", {"ag": 4}, agent_attn_merge_sm, (P(None, "ag"), P(), P(), P()),
       P(None, "ag"), agent_attn_full, (R(4, NA, 12), R(12, HD), R(12, HD), R(12, HD)),
       bugs=[("denominator-local", ["missing-all-reduce"]), ("local-max-unmerged", ["wrong-collective-op"])])

# ---------------------------------------------------------------------------
# 29. per-agent advantage normalisation (each agent's statistics over the
#     environments only) with envs over dp and agents over ag: the statistics
#     psum'd over dp alone.


def per_agent_norm(adv):
    mu = adv.mean(0, keepdims=True)
    sd = jnp.sqrt(jnp.mean(jnp.square(adv - mu), 0, keepdims=True))
    return (adv - mu) / (sd + 1e-6)


def per_agent_norm_sm(bug):
    def f(adv):
        axes = ("dp", "ag") if bug == "stats-over-all-agents" else "dp"
        if bug == "stats-over-all-agents":
            n = adv.size * 8
            mu = psum(adv.sum(keepdims=True), axes) / n
            var = psum(jnp.sum(jnp.square(adv - mu), keepdims=True), axes) / n
        else:
            n = adv.shape[0] * 2
            mu = psum(adv.sum(0, keepdims=True), axes) / n
            var = psum(jnp.sum(jnp.square(adv - mu), 0, keepdims=True), axes) / n
        if bug == "var-before-psum-mean":
            var = psum(jnp.sum(jnp.square(adv - adv.mean(0, keepdims=True)), 0, keepdims=True), axes) / n
        return (adv - mu) / (jnp.sqrt(var) + 1e-6)
    return f


C.smap("s.per_agent_adv_norm_dp_only.dp2xag4", {"dp": 2, "ag": 4}, per_agent_norm_sm, (S2,), S2, per_agent_norm,
       ((R(NE, NA) + np.arange(NA, dtype=np.float32) * np.linspace(-1, 1, NE, dtype=np.float32)[:, None]),),
       bugs=[("stats-over-all-agents", ["wrong-axis"]), ("var-before-psum-mean", ["wrong-reduction"])])

# ---------------------------------------------------------------------------
# 30. sequential Elo over a match list (lax.scan), ratings over pop8: a
#     rating lookup is a psum of the owner's masked local value; only the
#     owner applies the update.


def elo_seq(r, pa, pb, score):
    def step(r, m):
        a, b, sc = m
        ea = 1.0 / (1.0 + 10.0 ** ((r[b] - r[a]) / 400.0))
        d = KE * (sc - ea)
        return r.at[a].add(d).at[b].add(-d), d
    return lax.scan(step, r, (pa, pb, score))


def elo_seq_sm(bug):
    def f(r, pa, pb, score):
        rl = r.shape[0]
        me = idx("pop")
        base = (me + 1) * rl if bug == "owner-offset-shifted" else me * rl
        ids = base + jnp.arange(rl)

        def get(r, i):
            v = jnp.sum(jnp.where(ids == i, r, 0.0))
            return v if bug == "lookup-not-psummed" else psum(v, "pop")

        def step(r, m):
            a, b, sc = m
            ea = 1.0 / (1.0 + 10.0 ** ((get(r, b) - get(r, a)) / 400.0))
            d = KE * (sc - ea)
            return r + d * (ids == a) - d * (ids == b), d
        return lax.scan(step, r, (pa, pb, score))
    return f


C.smap("s.sequential_elo_scan_owner.pop8", {"pop": 8}, elo_seq_sm, (P("pop"), P(), P(), P()), (P("pop"), P()),
       elo_seq, (1500 + R(NPL, scale=100.0), pa10, pb10, rng.choice([0.0, 0.5, 1.0], NM).astype(np.float32)),
       bugs=[("owner-offset-shifted", ["wrong-offset"]), ("lookup-not-psummed", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 31. COMA with every device computing all agents' counterfactual Q-values
#     from the gathered joint action (vmap over agents), then keeping its own
#     agents by dynamic_slice at axis_index.


def coma_all_q(s, act, w1, w2):
    a = act.shape[1]
    return jax.vmap(lambda i: jnp.tanh(coma_inputs(s, act, i) @ w1) @ w2, out_axes=1)(jnp.arange(a))


def coma_vmap(s, act, logits, w1, w2):
    q = coma_all_q(s, act, w1, w2)
    pi = jax.nn.softmax(logits, -1)
    return jnp.take_along_axis(q, act[..., None], -1)[..., 0] - jnp.einsum("eau,eau->ea", pi, q)


def coma_slice_sm(bug):
    def f(s, act, logits, w1, w2):
        al = act.shape[1]
        jact = lax.all_gather(act, "ag", axis=1, tiled=True)
        q = coma_all_q(s, jact, w1, w2)
        off = (idx("ag") + 1) % 4 * al if bug == "slice-next-device" else idx("ag") * al
        q = lax.dynamic_slice_in_dim(q, off, al, 1)
        pi = jax.nn.softmax(logits, -1)
        return jnp.take_along_axis(q, act[..., None], -1)[..., 0] - jnp.einsum("eau,eau->ea", pi, q)
    return f


C.smap("s.coma_vmap_all_agents_slice.ag4", {"ag": 4}, coma_slice_sm, (P(), P(None, "ag"), P(None, "ag"), P(), P()),
       P(None, "ag"), coma_vmap,
       (R(NE, SD), I(0, NU, NE, NA), R(NE, NA, NU), R(SD + NA * NU + NA, CH, scale=0.3), R(CH, NU, scale=0.5)),
       bugs=[("slice-next-device", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 32. graph message passing between agents with a dense adjacency: the rows
#     of the local agents (adjacency sharded by row over ag), features
#     all_gather'd, degree-normalised aggregation, 2 layers.


def agent_gnn(h, adj, w1, w2):
    deg = jnp.maximum(adj.sum(-1, keepdims=True), 1.0)
    for w in (w1, w2):
        h = jax.nn.relu(jnp.einsum("ij,ejd->eid", adj, h) / deg @ w + h)
    return h


def agent_gnn_sm(bug):
    def f(h, adj, w1, w2):
        deg = jnp.maximum(adj.sum(-1, keepdims=True), 1.0)
        for w in (w1, w2):
            if bug == "adjacency-local-block":
                me = idx("ag")
                blk = lax.dynamic_slice_in_dim(adj, me * h.shape[1], h.shape[1], 1)
                agg = jnp.einsum("ij,ejd->eid", blk, h)
            else:
                hall = lax.all_gather(h, "ag", axis=1, tiled=True)
                agg = jnp.einsum("ij,ejd->eid", adj, hall)
            d = jnp.maximum(psum(adj.sum(-1, keepdims=True), "ag"), 1.0) if bug == "degree-psummed" else deg
            h = jax.nn.relu(agg / d @ w + h)
        return h
    return f


adj32 = (rng.random((NA, NA)) < 0.35).astype(np.float32)
np.fill_diagonal(adj32, 0.0)
adj32[3] = 0.0  # an isolated agent (degree clamped to 1)
C.smap("s.agent_gnn_adjacency_rows.ag4", {"ag": 4}, agent_gnn_sm, (P(None, "ag"), P("ag"), P(), P()),
       P(None, "ag"), agent_gnn, (R(3, NA, 8), adj32, R(8, 8, scale=0.5), R(8, 8, scale=0.5)),
       bugs=[("adjacency-local-block", ["missing-collective"]), ("degree-psummed", ["wrong-reduction"])])

# 33. GSPMD: independent learners' adam step, per-agent params over ag.
C.gspmd("g.independent_learners_adam.dp2xag4", {"dp": 2, "ag": 4}, (ip_spec, ist_spec, S2, S2, S2),
        (ip_spec, ist_spec, P()), ind_step, (ip, ist, R(NE, NA, OD), I(0, NU, NE, NA), R(NE, NA)))

# 34. GSPMD: agent GNN with adjacency rows over ag.
C.gspmd("g.agent_gnn.ag4", {"ag": 4}, (P(None, "ag"), P("ag"), P(), P()), P(None, "ag"), agent_gnn,
        (R(3, NA, 8), adj32, R(8, 8, scale=0.5), R(8, 8, scale=0.5)))

# ---------------------------------------------------------------------------
# 35. observations arrive split by environment (over ax4), per-agent heads
#     (A, D, U) are split by agent: an all_to_all moves to the agent split,
#     the heads apply, a second all_to_all moves the logits back.


def per_agent_heads(obs, heads):
    return jnp.einsum("ead,adu->eau", obs, heads)


def a2a_heads_sm(bug):
    def f(obs, heads):
        byag = lax.all_to_all(obs, "ax", split_axis=1, concat_axis=0, tiled=True)   # (E, al, D)
        if bug == "heads-first-block":
            heads = lax.all_gather(heads, "ax", tiled=True)[:heads.shape[0]]
        lg = jnp.einsum("ead,adu->eau", byag, heads)
        if bug == "back-by-gather-first-envs":
            return lax.all_gather(lg, "ax", axis=1, tiled=True)[:obs.shape[0]]
        return lax.all_to_all(lg, "ax", split_axis=0, concat_axis=1, tiled=True)
    return f


C.smap("s.env_to_agent_split_all_to_all.ax4", {"ax": 4}, a2a_heads_sm, (P("ax"), P("ax")), P("ax"),
       per_agent_heads, (R(NE, NA, OD), R(NA, OD, NU, scale=0.5)),
       bugs=[("heads-first-block", ["wrong-offset"]), ("back-by-gather-first-envs", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 36. population-based training exploit step: 8 members over pop8, each
#     with parameters and a score; ranks from the all_gather'd scores (ties
#     broken by member index); the bottom two copy the parameters of the top
#     two (rank 6 <- rank 0, rank 7 <- rank 1) and perturb them by 0.8 / 1.2.


def pbt_exploit(params, scores):
    n = scores.shape[0]
    i = jnp.arange(n)
    better = (scores[None, :] > scores[:, None]) | ((scores[None, :] == scores[:, None]) & (i[None, :] < i[:, None]))
    rank = better.sum(1)                                              # 0 = best
    by_rank = jnp.argsort(rank)                                       # member at each rank
    src = jnp.where(rank >= n - 2, by_rank[jnp.clip(rank - (n - 2), 0, n - 1)], i)
    fac = jnp.where(rank >= n - 2, jnp.where(rank % 2 == 0, 0.8, 1.2), 1.0)
    return params[src] * fac[:, None], rank


def pbt_sm(bug):
    def f(params, scores):
        n = 8
        me = idx("pop")
        sc = lax.all_gather(scores, "pop", tiled=True)
        allp = lax.all_gather(params, "pop", tiled=True)
        i = jnp.arange(n)
        if bug == "ascending-ranks":
            better = (sc[None, :] < sc[:, None]) | ((sc[None, :] == sc[:, None]) & (i[None, :] < i[:, None]))
        else:
            better = (sc[None, :] > sc[:, None]) | ((sc[None, :] == sc[:, None]) & (i[None, :] < i[:, None]))
        rank = better.sum(1)
        by_rank = jnp.argsort(rank)
        myrank = rank[me]
        src = jnp.where(myrank >= n - 2, by_rank[jnp.clip(myrank - (n - 2), 0, n - 1)], me)
        if bug == "copy-from-self-shard":
            src = me
        fac = jnp.where(myrank >= n - 2, jnp.where(myrank % 2 == 0, 0.8, 1.2), 1.0)
        return allp[src][None] * fac, myrank[None]
    return f


C.smap("s.pbt_exploit_bottom_copies_top.pop8", {"pop": 8}, pbt_sm, (P("pop"), P("pop")), (P("pop"), P("pop")),
       pbt_exploit, (R(8, 6), rng.permutation(8).astype(np.float32)),
       bugs=[("ascending-ranks", ["wrong-op"]), ("copy-from-self-shard", ["missing-collective"])])

# ---------------------------------------------------------------------------
# 37. a ring of agents on dp2 x ag4 with bf16 messages: both halos in one
#     ppermute each way of the packed boundary agents, 3 rounds of
#     lax.fori_loop; the envs over dp.


def ring_bf16(h, wn, ws):
    def rnd(_, h):
        m = (h @ wn).astype(jnp.bfloat16)
        nb = (jnp.roll(m, 1, axis=1) + jnp.roll(m, -1, axis=1)).astype(jnp.float32)
        return jnp.tanh(h @ ws + nb)
    return lax.fori_loop(0, 3, rnd, h)


def ring_bf16_sm(bug):
    def f(h, wn, ws):
        n = 4
        ax = "dp" if bug == "ring-over-dp" else "ag"
        nn = 2 if bug == "ring-over-dp" else n

        def rnd(_, h):
            m = (h @ wn).astype(jnp.bfloat16)
            from_left = lax.ppermute(m[:, -1:], ax, [(i, (i + 1) % nn) for i in range(nn)])
            from_right = lax.ppermute(m[:, :1], ax, [(i, (i - 1) % nn) for i in range(nn)])
            left = jnp.concatenate([from_left, m[:, :-1]], 1)
            right = jnp.concatenate([m[:, 1:], from_right], 1)
            if bug == "sum-in-bf16-then-double":
                nb = (left + right).astype(jnp.float32) * 2
            else:
                nb = (left + right).astype(jnp.float32)
            return jnp.tanh(h @ ws + nb)
        return lax.fori_loop(0, 3, rnd, h)
    return f


C.smap("s.agent_ring_bf16_messages.dp2xag4", {"dp": 2, "ag": 4}, ring_bf16_sm, (S2, P(), P()), S2, ring_bf16,
       (R(4, NA, 8), R(8, 8, scale=0.5), R(8, 8, scale=0.5)),
       bugs=[("ring-over-dp", ["wrong-axis"]), ("sum-in-bf16-then-double", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 38. mean-field Q-learning: Q(o_i, a, mean action of the others), the
#     mean action from int32 one-hot counts psum'd over ag8.


def mfq(obs, act, wo, wa):
    a = act.shape[1]
    cnt = jax.nn.one_hot(act, NU, dtype=jnp.int32).sum(1, keepdims=True)          # (E, 1, U)
    others = (cnt - jax.nn.one_hot(act, NU, dtype=jnp.int32)).astype(jnp.float32) / (a - 1)
    return obs @ wo + others @ wa                                                    # (E, A, U)


def mfq_sm(bug):
    def f(obs, act, wo, wa):
        a = act.shape[1] * 8
        oh = jax.nn.one_hot(act, NU, dtype=jnp.int32)
        cnt = oh.sum(1, keepdims=True)
        if bug != "counts-local":
            cnt = psum(cnt, "ag")
        den = (act.shape[1] - 1) if bug == "divide-local-count" else (a - 1)
        others = (cnt - oh).astype(jnp.float32) / den
        return obs @ wo + others @ wa
    return f


C.smap("s.meanfield_q_int_counts.ag8", {"ag": 8}, mfq_sm, (P(None, "ag"), P(None, "ag"), P(), P()),
       P(None, "ag"), mfq, (R(4, 16, OD), I(0, NU, 4, 16), R(OD, NU), R(NU, NU)),
       bugs=[("counts-local", ["missing-collective"]), ("divide-local-count", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 39. Bradley-Terry ratings of a population by 5 minorisation-maximisation
#     iterations from a win-count matrix (rows over pop4): n_ij = W_ij + W_ji
#     needs the transposed block (all_gather of W), strengths all_gather'd
#     each iteration and renormalised by a psum.


def bradley_terry(w):
    n = w + w.T
    wins = w.sum(1)
    p = jnp.ones(w.shape[0], jnp.float32)
    for _ in range(5):
        den = jnp.sum(n / (p[:, None] + p[None, :]), 1)
        p = wins / den
        p = p / p.sum() * p.shape[0]
    return p


def bt_sm(bug):
    def f(w):
        rl = w.shape[0]
        me = idx("pop")
        wall = lax.all_gather(w, "pop", tiled=True)                     # (P, P)
        wt = lax.dynamic_slice_in_dim(wall.T, me * rl, rl, 0)
        n = w + (w if bug == "no-transpose" else wt)
        wins = w.sum(1)
        p = jnp.ones(rl, jnp.float32)
        for _ in range(5):
            pall = lax.all_gather(p, "pop", tiled=True)
            den = jnp.sum(n / (p[:, None] + pall[None, :]), 1)
            p = wins / den
            tot = p.sum() * 4 if bug == "normalise-local" else psum(p.sum(), "pop")
            p = p / tot * (rl * 4)
        return p
    return f


w39 = rng.integers(0, 6, (NPL, NPL)).astype(np.float32)
np.fill_diagonal(w39, 0.0)
w39[:, 0] *= 3  # skill differences
C.smap("s.bradley_terry_mm_rows.pop4", {"pop": 4}, bt_sm, (P("pop"),), P("pop"), bradley_terry, (w39,),
       bugs=[("no-transpose", ["layout-mismatch"]), ("normalise-local", ["missing-collective"])])

# 40-41. GSPMD: Bradley-Terry with the win matrix's rows over pop4; PBT exploit over pop8.
C.gspmd("g.bradley_terry.pop4", {"pop": 4}, (P("pop"),), P("pop"), bradley_terry, (w39,))
C.gspmd("g.pbt_exploit.pop8", {"pop": 8}, (P("pop"), P("pop")), (P("pop"), P("pop")), pbt_exploit,
        (R(8, 6), rng.permutation(8).astype(np.float32)))

# ---------------------------------------------------------------------------
# 42. attention over agents as a ring: key / value blocks of the agents
#     passed around ag4 by ppermute (4 steps of lax.fori_loop) with an online
#     softmax (running max, denominator, numerator).


def ring_agent_attn_sm(bug):
    def f(h, wq, wk, wv):
        n = 4
        q, k, v = h @ wq / np.sqrt(HD), h @ wk, h @ wv
        perm = [(i, (i + 1) % n) for i in range(n)]
        m0 = jnp.full(q.shape[:2] + (1,), -1e30, jnp.float32)
        l0 = jnp.zeros(q.shape[:2] + (1,), jnp.float32)
        o0 = jnp.zeros_like(q)

        def step(i, c):
            k, v, m, l, o = c
            s = jnp.einsum("eid,ejd->eij", q, k)
            mn = jnp.maximum(m, s.max(-1, keepdims=True))
            p = jnp.exp(s - mn)
            corr = jnp.exp(m - mn)
            if bug == "no-rescale":
                corr = jnp.ones_like(corr)
            l = l * corr + p.sum(-1, keepdims=True)
            o = o * corr + jnp.einsum("eij,ejd->eid", p, v)
            k, v = lax.ppermute(k, "ag", perm), lax.ppermute(v, "ag", perm)
            return k, v, mn, l, o
        steps = 3 if bug == "one-step-short" else n
        k, v, m, l, o = lax.fori_loop(0, steps, step, (k, v, m0, l0, o0))
        return o / l
    return f


C.smap("s.agent_ring_attention_online_softmax.ag4", {"ag": 4}, ring_agent_attn_sm, (P(None, "ag"), P(), P(), P()),
       P(None, "ag"), agent_attn_full, (R(4, NA, 12), R(12, HD), R(12, HD), R(12, HD)),
       bugs=[("no-rescale", ["wrong-op"]), ("one-step-short", ["missing-collective"])])

# ---------------------------------------------------------------------------
# 43. VDN with 16 agents spread over both mesh axes (P(None, ("dp", "ag")),
#     dp2 x ag4): the agent sum psum'd over ("ag", "dp") in that order.


def vdn_q(q, act, rew):
    return rew + jnp.take_along_axis(q, act[..., None], -1)[..., 0].sum(1)


def vdn2_sm(bug):
    def f(q, act, rew):
        loc = jnp.take_along_axis(q, act[..., None], -1)[..., 0].sum(1)
        if bug == "psum-ag-only":
            tot = psum(loc, "ag")
        elif bug == "reward-inside-psum":
            return psum(loc + rew, ("ag", "dp"))
        else:
            tot = psum(loc, ("ag", "dp"))
        return rew + tot
    return f


AG2 = P(None, ("dp", "ag"))
C.smap("s.vdn_agents_over_both_axes.dp2xag4", {"dp": 2, "ag": 4}, vdn2_sm, (AG2, AG2, P()), P(), vdn_q,
       (R(NE, 16, NU), I(0, NU, NE, 16), R(NE)),
       bugs=[("psum-ag-only", ["wrong-axis"]), ("reward-inside-psum", ["wrong-reduction"])])

# ---------------------------------------------------------------------------
# 44. the COMA actor gradient by jax.grad inside the body (check_vma=True):
#     a shared actor over the local agents' observations, advantages given,
#     the loss psum'd over ag so the replicated weights get the full gradient.


def coma_actor_grad(w, obs, act, adv):
    def loss(w):
        lp = jnp.take_along_axis(jax.nn.log_softmax(obs @ w, -1), act[..., None], -1)[..., 0]
        return -jnp.mean(lp * adv)
    return jax.grad(loss)(w)


def coma_actor_grad_sm(bug):
    def f(w, obs, act, adv):
        n = act.size * 4

        def loss(w):
            lp = jnp.take_along_axis(jax.nn.log_softmax(obs @ w, -1), act[..., None], -1)[..., 0]
            part = -jnp.sum(lp * adv) / n
            if bug == "loss-pmean":
                return pmean(part, "ag")
            return psum(part, "ag")
        g = jax.grad(loss)(w)
        if bug == "grad-psummed-again":
            g = psum(g, "ag") / 2
        return g
    return f


C.smap("s.coma_actor_grad_vma.ag4", {"ag": 4}, coma_actor_grad_sm, (P(), P(None, "ag"), P(None, "ag"), P(None, "ag")),
       P(), coma_actor_grad, (R(OD, NU, scale=0.5), R(NE, NA, OD), I(0, NU, NE, NA), R(NE, NA)),
       bugs=[("loss-pmean", ["wrong-scale"]), ("grad-psummed-again", ["wrong-scale"])], check_vma=True)

# ---------------------------------------------------------------------------
# 45. Elo ratings re-anchored so the best player sits at 2000 (pmax), and
#     the population's mean rating reported (pmean); ratings over pop8.


def elo_anchor(r):
    return r - r.max() + 2000.0, r.mean()


def elo_anchor_sm(bug):
    def f(r):
        top = r.max() if bug == "local-max" else lax.pmax(r.max(), "pop")
        mean = psum(r.mean(), "pop") if bug == "mean-psum-of-means" else pmean(r.mean(), "pop")
        return r - top + 2000.0, mean
    return f


C.smap("s.elo_anchor_best_pmax.pop8", {"pop": 8}, elo_anchor_sm, (P("pop"),), (P("pop"), P()), elo_anchor,
       (1500 + R(NPL, scale=100.0),),
       bugs=[("local-max", ["missing-collective"]), ("mean-psum-of-means", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 46. mean-field messages aggregated by psum_scatter over the message
#     features and an all_gather back (the all-reduce written out), 2 rounds.


def meanfield_rs_sm(bug):
    def f(h, wm, u, vv):
        a = h.shape[1] * 4

        def rnd(_, h):
            m = jnp.tanh(h @ wm)
            sm = m.sum(1, keepdims=True)                                  # (E, 1, F)
            part = lax.psum_scatter(sm, "ag", scatter_dimension=2, tiled=True)
            if bug == "gathered-blocks-interleaved":
                tot = jnp.swapaxes(lax.all_gather(part, "ag", axis=1, tiled=True), 1, 2).reshape(sm.shape)
            else:
                tot = lax.all_gather(part, "ag", axis=2, tiled=True)
            if bug == "scatter-no-gather-scale":
                tot = jnp.tile(part, (1, 1, 4))
            mf = (tot - m) / (a - 1)
            return jax.nn.relu(h @ u + mf @ vv)
        return lax.fori_loop(0, 3, rnd, h)
    return f


C.smap("s.meanfield_reduce_scatter_gather.ag4", {"ag": 4}, meanfield_rs_sm, (P(None, "ag"), P(), P(), P()),
       P(None, "ag"), meanfield, (R(4, NA, 8), R(8, 8, scale=0.5), R(8, 8, scale=0.4), R(8, 8, scale=0.6)),
       bugs=[("gathered-blocks-interleaved", ["layout-mismatch"]), ("scatter-no-gather-scale", ["missing-collective"])])

# ---------------------------------------------------------------------------
# 47. QMIX with the hypernetwork's first layer replicated: every device
#     computes all agents' mixing weights and slices its agents' block by
#     dynamic_slice at axis_index before the agent sum.


def qmix_slice_sm(bug):
    def f(qa, s, hw1, hb1, hw2, hv1, hv2, tgt):
        e, al = qa.shape
        me = idx("ag")
        w1 = jnp.abs(s @ hw1).reshape(e, al * 4, MH)
        start = me * al if bug != "slice-agent-stride" else me
        w1 = lax.dynamic_slice_in_dim(w1, start, al, 1)
        pre = psum(jnp.einsum("ea,eam->em", qa, w1), "ag") + s @ hb1
        h = jax.nn.elu(pre)
        qt = jnp.sum(h * jnp.abs(s @ hw2), -1) + jax.nn.relu(s @ hv1) @ hv2
        return jnp.mean(jnp.square(qt - tgt))
    return f


C.smap("s.qmix_replicated_hypernet_sliced.ag4", {"ag": 4}, qmix_slice_sm,
       (P(None, "ag"), P(), P(), P(), P(), P(), P(), P()), P(), qmix_loss,
       (R(NE, NA), R(NE, SD), R(SD, NA * MH, scale=0.3), R(SD, MH, scale=0.3), R(SD, MH, scale=0.3),
        R(SD, MH, scale=0.3), R(MH, scale=0.3), R(NE)),
       bugs=[("slice-agent-stride", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 48. attention over agents merged from per-device partial softmaxes: each
#     device keeps its own local maximum, and the partial numerators and
#     denominators are rescaled by exp(m_local - pmax(m_local)) before the
#     psum (the queries all_gather'd, outputs psum_scatter'd).


def agent_attn_lse_sm(bug):
    def f(h, wq, wk, wv):
        qa = lax.all_gather(h @ wq, "ag", axis=1, tiled=True)
        k, v = h @ wk, h @ wv
        s = jnp.einsum("eid,ejd->eij", qa, k) / np.sqrt(HD)
        m = lax.stop_gradient(s.max(-1, keepdims=True))                 # local maximum
        p = jnp.exp(s - m)
        den, num = p.sum(-1, keepdims=True), jnp.einsum("eij,ejd->eid", p, v)
        mg = lax.pmax(m, "ag")
        sc = jnp.exp(m - mg)
        if bug == "rescale-sign-flipped":
            sc = jnp.exp(mg - m)
        den = psum(den * sc, "ag")
        if bug == "numerator-unscaled":
            num_all = num
        else:
            num_all = num * sc
        return lax.psum_scatter(num_all / den, "ag", scatter_dimension=1, tiled=True)
    return f


C.smap("s.agent_attention_local_max_rescaled.ag4", {"ag": 4}, agent_attn_lse_sm, (P(None, "ag"), P(), P(), P()),
       P(None, "ag"), agent_attn_full, (R(4, NA, 12), R(12, HD), R(12, HD), R(12, HD)),
       bugs=[("rescale-sign-flipped", ["wrong-op"]), ("numerator-unscaled", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 49. the best agent of each environment (highest value estimate, ties to
#     the lowest agent index) over ag4: pmax of the local maxima, then pmin
#     of the global indices that reach it; its value returned with the index.


def best_agent(v):
    return jnp.argmax(v, 1).astype(jnp.int32), v.max(1)


def best_agent_sm(bug):
    def f(v):
        al = v.shape[1]
        me = idx("ag")
        lm = v.max(1)
        gm = lax.pmax(lm, "ag")
        li = jnp.argmax(v, 1).astype(jnp.int32) + (0 if bug == "index-no-offset" else me * al)
        cand = jnp.where(lm == gm, li, jnp.int32(1 << 30))
        best = lax.pmax(jnp.where(lm == gm, li, -1), "ag") if bug == "ties-to-highest" else lax.pmin(cand, "ag")
        return best, gm
    return f


v49 = np.round(R(NE, NA), 0)  # rounded so ties across devices happen
C.smap("s.best_agent_pmax_pmin_index.ag4", {"ag": 4}, best_agent_sm, (P(None, "ag"),), (P(), P()), best_agent,
       (v49,), bugs=[("index-no-offset", ["wrong-offset"]), ("ties-to-highest", ["wrong-collective-op"])])

# ---------------------------------------------------------------------------
# 50. the team-average message by a hand-written ring all-reduce: each
#     device forwards the block it last received (3 hops of ppermute),
#     accumulating; each agent then reads its team's average; replicated
#     inputs pmean'd (a no-op) as a user might, for safety.


def team_avg(m, g):
    return jnp.tanh(m * g) - jnp.mean(jnp.tanh(m * g), 1, keepdims=True)


def team_avg_sm(bug):
    def f(m, g):
        n = 4
        g = pmean(g, "ag")                                            # replicated already: a no-op
        x = jnp.tanh(m * g)
        blk = x.sum(1, keepdims=True)
        acc, cur = blk, blk
        hops = 2 if bug == "two-hops" else n - 1
        for _ in range(hops):
            cur = lax.ppermute(cur, "ag", [(i, (i + 1) % n) for i in range(n)])
            acc = acc + cur
        if bug == "average-local-count":
            return x - acc / x.shape[1]
        return x - acc / (x.shape[1] * n)
    return f


C.smap("s.team_average_ring_allreduce.ag4", {"ag": 4}, team_avg_sm, (P(None, "ag"), P()), P(None, "ag"), team_avg,
       (R(NE, NA, 6), R(6)), bugs=[("two-hops", ["missing-collective"]), ("average-local-count", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 51. recurrent agents (a GRU cell shared by the agents) over T = 5 steps of
#     lax.scan, VDN mixing at every step, the TD loss summed over time and
#     averaged over environments; agents over ag, envs over dp (dp2 x ag4).
TT, GH = 5, 8


def gru(x, h, p):
    z = jax.nn.sigmoid(x @ p["wz"] + h @ p["uz"])
    r = jax.nn.sigmoid(x @ p["wr"] + h @ p["ur"])
    c = jnp.tanh(x @ p["wc"] + (r * h) @ p["uc"])
    return (1 - z) * h + z * c


def rnn_vdn(p, obs, act, rew):
    """obs (E, T, A, D), act (E, T, A), rew (E, T)."""
    h0 = jnp.zeros(obs.shape[:1] + obs.shape[2:3] + (GH,), jnp.float32)

    def step(h, xs):
        o, a, r = xs
        h = gru(o, h, p)
        q = h @ p["wq"]
        tot = jnp.take_along_axis(q, a[..., None], -1)[..., 0].sum(1)
        return h, jnp.square(r - tot)
    _, err = lax.scan(step, h0, (jnp.swapaxes(obs, 0, 1), jnp.swapaxes(act, 0, 1), jnp.swapaxes(rew, 0, 1)))
    return jnp.mean(err.sum(0))


def rnn_vdn_sm(bug):
    def f(p, obs, act, rew):
        h0 = jnp.zeros(obs.shape[:1] + obs.shape[2:3] + (GH,), jnp.float32)

        def step(h, xs):
            o, a, r = xs
            h = gru(o, h, p)
            q = h @ p["wq"]
            loc = jnp.take_along_axis(q, a[..., None], -1)[..., 0].sum(1)
            tot = psum(loc, "dp" if bug == "mix-over-dp" else "ag")
            if bug == "mix-missing":
                tot = loc
            return h, jnp.square(r - tot)
        _, err = lax.scan(step, h0, (jnp.swapaxes(obs, 0, 1), jnp.swapaxes(act, 0, 1), jnp.swapaxes(rew, 0, 1)))
        return pmean(jnp.mean(err.sum(0)), "dp")
    return f


rp = {k: R(OD, GH, scale=0.4) for k in ("wz", "wr", "wc")}
rp.update({k: R(GH, GH, scale=0.4) for k in ("uz", "ur", "uc")})
rp["wq"] = R(GH, NU, scale=0.5)
rp_spec = jax.tree.map(lambda _: P(), rp)
O4 = P("dp", None, "ag")
rnn_args = (rp, R(NE, TT, NA, OD), I(0, NU, NE, TT, NA), R(NE, TT))
C.smap("s.recurrent_vdn_scan_over_time.dp2xag4", {"dp": 2, "ag": 4}, rnn_vdn_sm, (rp_spec, O4, O4, P("dp")), P(),
       rnn_vdn, rnn_args, bugs=[("mix-over-dp", ["wrong-axis"]), ("mix-missing", ["missing-collective"])])

# 52. GSPMD: the recurrent VDN loss and its gradient, agents over ag, envs over dp.
C.gspmd("g.recurrent_vdn_grad.dp2xag4", {"dp": 2, "ag": 4}, (rp_spec, O4, O4, P("dp")), (P(), rp_spec),
        jax.value_and_grad(rnn_vdn), rnn_args)

# ---------------------------------------------------------------------------
# 53. a centralised value loss computed redundantly: the joint observation
#     all_gather'd, so every ag device computes the same critic loss on its
#     envs; the loss then pmean'd over (dp, ag) (a mean over identical copies
#     on ag) and the value's gradient psum'd over ag and divided by 4.


def critic_loss_grad(wc, bc, obs, ret):
    def loss(wc):
        v = jnp.tanh(obs.reshape(obs.shape[0], -1) @ wc) @ bc
        return jnp.mean(jnp.square(ret.mean(1) - v))
    return jax.value_and_grad(loss)(wc)


def critic_redundant_sm(bug):
    def f(wc, bc, obs, ret):
        joint = lax.all_gather(obs, "ag", axis=1, tiled=True)
        r = pmean(ret.mean(1), "ag")

        def loss(wc):
            v = jnp.tanh(joint.reshape(joint.shape[0], -1) @ wc) @ bc
            return jnp.mean(jnp.square(r - v))
        l, g = jax.value_and_grad(loss)(wc)
        if bug == "loss-psum-over-ag":
            l = pmean(psum(l, "ag"), "dp")
        else:
            l = pmean(l, ("dp", "ag"))
        g = pmean(psum(g, "ag") / (4 if bug != "grad-not-divided" else 1), "dp")
        return l, g
    return f


C.smap("s.critic_loss_redundant_on_ag.dp2xag4", {"dp": 2, "ag": 4}, critic_redundant_sm,
       (P(), P(), S2, P("dp", "ag")), (P(), P()), critic_loss_grad,
       (R(NA * OD, 16, scale=0.2), R(16), R(NE, NA, OD), R(NE, NA)),
       bugs=[("loss-psum-over-ag", ["wrong-scale"]), ("grad-not-divided", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 54. the ring of agents written with a local jnp.roll whose wrapped entry is
#     replaced by the neighbour's boundary agent (jnp.where on the position).


def ring_roll_sm(bug):
    def f(h, wl, wr, ws):
        n = 4
        first = jnp.arange(h.shape[1])[None, :, None] == 0
        last = jnp.arange(h.shape[1])[None, :, None] == h.shape[1] - 1

        def rnd(h, _):
            lh = lax.ppermute(h[:, -1:], "ag", [(i, (i + 1) % n) for i in range(n)])
            rh = lax.ppermute(h[:, :1], "ag", [(i, (i - 1) % n) for i in range(n)])
            left = jnp.where(first, lh, jnp.roll(h, 1, axis=1))
            right = jnp.where(last, rh, jnp.roll(h, -1 if bug != "right-roll-wrong-way" else 1, axis=1))
            if bug == "wrapped-entry-kept":
                left = jnp.roll(h, 1, axis=1)
            h = jnp.tanh(h @ ws + left @ wl + right @ wr)
            return h, pmean(h.mean(), "ag")
        return lax.scan(rnd, h, None, length=2)
    return f


C.smap("s.agent_ring_local_roll_fixup.ag4", {"ag": 4}, ring_roll_sm, (P(None, "ag"), P(), P(), P()),
       (P(None, "ag"), P()), ring_comm, (R(3, 16, 8), R(8, 8, scale=0.5), R(8, 8, scale=0.5), R(8, 8, scale=0.5)),
       bugs=[("wrapped-entry-kept", ["wrong-permutation"]), ("right-roll-wrong-way", ["wrong-offset"])])

# 55. GSPMD: the MAPPO actor step with optax.chain(clip_by_global_norm, adamw), agents over ag, envs over dp.
chain_opt = optax.chain(optax.clip_by_global_norm(0.5), optax.adamw(3e-3, weight_decay=0.01))


def mappo_chain_step(p, st, obs, act, adv, logp_old):
    e, a, _ = obs.shape
    aid = jnp.broadcast_to(jnp.eye(a), (e, a, a))

    def loss(p):
        lp = jnp.take_along_axis(jax.nn.log_softmax(actor_logits(p, obs, aid), -1), act[..., None], -1)[..., 0]
        an = (adv - adv.mean()) / (adv.std() + 1e-5)
        r = jnp.exp(lp - logp_old)
        return -jnp.mean(jnp.minimum(r * an, jnp.clip(r, 0.8, 1.2) * an))
    l, g = jax.value_and_grad(loss)(p)
    u, st = chain_opt.update(g, st, p)
    return optax.apply_updates(p, u), st, l


cst = np_tree(chain_opt.init(ap))
cst_spec = jax.tree.map(lambda _: P(), cst)
C.gspmd("g.mappo_actor_clip_adamw.dp2xag4", {"dp": 2, "ag": 4}, (ap_spec, cst_spec, S2, S2, S2, S2),
        (ap_spec, cst_spec, P()), mappo_chain_step, (ap, cst, obs11, act11, R(NE, NA) + 0.5, lp11.astype(np.float32)))

# ---------------------------------------------------------------------------
# 56. the COMA baseline with the action dimension sharded too (ag2 x tp4):
#     per-agent Q-values and policy logits with actions over tp; the policy's
#     softmax by pmax / psum over tp, the marginalisation sum_u pi(u) Q(u)
#     psum'd over tp, Q of the taken action picked by its owner and psum'd.
NU8 = 8


def coma_tp(q, logits, act):
    pi = jax.nn.softmax(logits, -1)
    return jnp.take_along_axis(q, act[..., None], -1)[..., 0] - jnp.sum(pi * q, -1)


def coma_tp_sm(bug):
    def f(q, logits, act):
        ul = q.shape[-1]
        me = idx("tp")
        m = lax.pmax(lax.stop_gradient(logits.max(-1, keepdims=True)), "tp")
        e = jnp.exp(logits - m)
        z = e.sum(-1, keepdims=True) if bug == "softmax-local-actions" else psum(e.sum(-1, keepdims=True), "tp")
        pi = e / z
        base = psum(jnp.sum(pi * q, -1), "tp")
        loc = act - (0 if bug == "action-no-offset" else me * ul)
        own = (loc >= 0) & (loc < ul)
        qa = jnp.where(own, jnp.take_along_axis(q, jnp.clip(loc, 0, ul - 1)[..., None], -1)[..., 0], 0.0)
        return psum(qa, "tp") - base
    return f


C.smap("s.coma_actions_over_tp.ag2xtp4", {"ag": 2, "tp": 4}, coma_tp_sm,
       (P(None, "ag", "tp"), P(None, "ag", "tp"), P(None, "ag")), P(None, "ag"), coma_tp,
       (R(NE, NA, NU8), R(NE, NA, NU8), I(0, NU8, NE, NA)),
       bugs=[("softmax-local-actions", ["missing-all-reduce"]), ("action-no-offset", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 57. a league of 4 opponent archetypes (different functions), one per lg
#     device, chosen by lax.switch on axis_index; each environment's
#     opponent index selects whose output it keeps (masked psum).


def arche(k, obs, w):
    if k == 0:
        return jnp.tanh(obs @ w)
    if k == 1:
        return jax.nn.relu(obs @ w) - 0.5
    if k == 2:
        return jnp.sin(obs @ w)
    return (obs @ w) * 0.1


def league_arch(obs, opp, w):
    outs = jnp.stack([arche(k, obs, w) for k in range(4)], 0)                 # (4, E, U)
    return jnp.take_along_axis(outs, opp[None, :, None], 0)[0]


def league_arch_sm(bug):
    def f(obs, opp, w):
        me = idx("lg")
        br = [lambda o, k=k: arche(k, o, w) for k in range(4)]
        sel = (me + 1) % 4 if bug == "switch-next-archetype" else me
        out = lax.switch(sel, br, obs)
        keep = (opp == me)[:, None]
        if bug == "keep-all-envs":
            return pmean(out, "lg")
        return psum(jnp.where(keep, out, 0.0), "lg")
    return f


C.smap("s.league_archetypes_switch_axis_index.lg4", {"lg": 4}, league_arch_sm, (P(), P(), P()), P(), league_arch,
       (R(NE, OD), I(0, 4, NE), R(OD, NU)),
       bugs=[("switch-next-archetype", ["wrong-offset"]), ("keep-all-envs", ["wrong-reduction"])])

C.known_miss("s.best_agent_pmax_pmin_index.ag4.bug.ties-to-highest",
             "the bug only matters on ties across devices; the checker's random normal inputs never tie")
C.known_miss("s.elo_anchor_best_pmax.pop8.bug.local-max",
             "the checker's own inputs are standard normal, so a local max differs from the global one by ~1 "
             "while the outputs sit near the anchor 2000: relative 5e-4, judged 'between' rounding and a mismatch")
C.finish()
