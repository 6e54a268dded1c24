"""samples/fresh86: an 86th batch of programs as a user writes them, on the theme of model-based reinforcement learning and world models under sharding in current JAX / optax (Dreamer-style RSSM imagination with a GRU deterministic state and a stochastic latent, KL balancing with free bits, lambda-returns over an imagined horizon, return normalisation by percentiles of the global batch, two-hot categorical critics on symlog targets, MuZero-style unrolled dynamics, target-critic EMA, training steps with optax), none of them an idiom of samples/fresh .. fresh26, probe, train or wild.
shard_map families (batch over dp, hidden units over tp):
 1. RSSM imagination rollout in lax.scan from start states sharded over dp2,
    the GRU's hidden units over tp4 (the Dreamer GRU: reset / candidate /
    update gates, update bias -1): the full deterministic state
    all_gather'd (tiled) before the gate matmul whose gate columns the rank
    owns, the stochastic prior mean and the action from row-parallel
    projections psum'd over tp, exploration noise passed in. Bugs: the
    prior's projection not psum'd, the prior's bias added inside the psum.
 2. lambda-returns computed backward over an imagined horizon (reverse
    lax.scan, bootstrap from the last value) with the batch of start states
    over dp8, returns normalised by the 5th / 95th percentiles of the
    global batch (all_gather'd, jnp.percentile) kept in an EMA state, a
    discount-weighted actor objective pmean'd. Bugs: percentiles of the
    local batch (then averaged over devices to keep the state replicated),
    the recursion bootstrapped from the second-last value, the objective a
    local mean.
 3. a two-hot categorical critic on symlog returns, 32 bins over tp4 and
    the batch over dp2 (check_vma=True): the bin below the target found by
    psum'd counts of the local bins <= y, the bin values picked by a masked
    psum, the cross-entropy against the distributed log-softmax, the
    expected value symexp(E[bins]) psum'd, value_and_grad for the sharded
    head. Bugs: the two-hot's lower bin off by one (count without -1),
    the count not psum'd, the one-hot without the rank's bin offset.
 4. categorical-latent KL balancing with free bits (Dreamer v3: 0.5 dyn,
    0.1 rep, 1% unimix; free bits 2 nats, above Dreamer's 1, so that the
    clip binds on some rows and not on others), 8 latent groups over tp4, batch over
    dp2 (check_vma=True), the KL summed over groups by psum before the
    free-bits clip, gradients for the posterior and prior logits. Bugs: the
    dyn / rep coefficients swapped (same value, different gradients), the
    free-bits clip applied to the local partial sum, the clip applied
    after the batch mean.
 5. a MuZero-style unrolled training step (representation, 3 dynamics
    steps with the gradient scaled by 1/2 at each, prediction heads for
    policy, value and reward; value and reward as two-hot on 11 bins of
    symlog targets) with the batch over dp8 and replicated parameters
    (check_vma=False, gradients pmean'd by hand), optax.adam. Bugs: no
    pmean of the gradients, reward targets taken one step late, the
    two-hot's upper bin off by one.
 6. a Dreamer actor-critic step on imagined features under dp2 x tp4
    (check_vma=True): Megatron critic and actor MLPs (column-parallel first
    layer, row-parallel heads psum'd before replicated biases), a target
    critic for the lambda-return bootstrap, percentile return
    normalisation over the global batch with an EMA, REINFORCE actor loss
    with an entropy bonus, optax.adam, the target critic updated by EMA
    from the new critic. Bugs: percentiles of the local batch averaged
    over dp, the EMA coefficients swapped, the actor bias added inside the
    psum.
 7. the world-model loss of an RSSM observe pass (lax.scan over 4 steps)
    with the batch over dp2 and hidden units and the encoder embedding over
    tp4: the posterior from [h, embed] by a row-parallel psum'd projection,
    the prior from h, the symlog reconstruction of the observation from a
    row-parallel decoder, reward and continue heads, the KL, all pmean'd
    over dp; the posterior's weight is stored with its rows blocked per rank
    ([h_r; e_r]), which the baseline undoes by a reshape. Bugs: the
    decoder not psum'd, the reconstruction loss not pmean'd over dp.
 8. a GRU over a sequence whose input projection is row-parallel (input
    features over tp4) and finished by psum_scatter onto the rank's gate
    units, the recurrent projection column-parallel on the all_gather'd
    state, the bias sliced at the rank's units (dynamic_slice). Bugs: the
    bias sliced at offset 0, the reduce-scatter divided by tp.
 9. imagination from every posterior state of a replay batch (batch over
    dp2, time over sp4): the starts flattened (B, T) -> (B T), a 4-step
    rollout with a deterministic actor, lambda-returns, percentiles over
    the starts of all devices (all_gather over (dp, sp)), unflattened.
    Bugs: percentiles gathered over dp only, the starts flattened time-major
    (but unflattened batch-major).
10. MuZero n-step value targets with the value rescaling h(x) = sign(x)
    (sqrt(|x| + 1) - 1) + eps x, time over sp4: the next 3 rewards and
    values from the right neighbour by ppermute (tail inputs on the last
    device), two-hot on 21 bins, cross-entropy pmean'd over dp2 x sp4.
    Bugs: the halo from the left neighbour, the loss pmean'd over dp only.
11. a straight-through categorical-latent world-model step: 8 latent
    groups of 6 classes over tp4 from a column-parallel bf16 encoder (f32
    accumulation), argmax(logits + gumbel) samples with the noise passed
    in, z = onehot + p - sg(p), a row-parallel decoder psum'd, a symlog
    reconstruction loss pmean'd over dp, optax.adam (check_vma=True). Bugs:
    no straight-through term (the encoder gets no gradient), the encoder's
    gradient psum'd over tp by hand.
GSPMD pairs (jax.jit with in/out shardings): 11. the imagination rollout of
1. on dp2 x tp4; 12. lambda-returns with percentile normalisation on dp8;
13. the two-hot critic loss with its gradient, bins over tp4; 14. the
MuZero training step of 5. with the batch over dp8; 15. the actor-critic
step of 6. with Megatron shardings on dp2 x tp4; 16. the GRU of 8. with
the units over tp4; 17. the imagination of 9. on dp2 x sp4; 18. the
n-step value loss of 10. on dp2 x sp4; 19. the straight-through
step of 11. on dp2 x tp4.
Numerics: every correct pair agrees with its baseline at rounding level
(f32; the two-hot critic's symexp'd values, up to 27, within 8e-6); every
bug variant differs clearly (see "numerics"). Drafts fixed before the final
export: the two-hot critic's baseline first read the bins from a constant
while the distributed body took them as an input (equal only on the seeded
bins; the checker's witness, on random bins, rightly said mismatch); the
actor-critic step needed a pmax over dp of the percentiles taken from the
all_gather'd returns, which check_vma counts as dp-varying; the free-bits
threshold went from 1 nat to 2 because at 1 the witness's random logits
and at 3 or 5 the seeded ones left the clip inactive (or always active) so
the KL-balancing bugs showed no difference.
Exported with scalify_jax.export_pair; every pair is also run by JAX on
seeded inputs and its manifest entry records the largest difference from
the single-device run ("numerics").
Run from the repository root: bash samples/gen/run_fresh86.sh [SUBSTR...]
(only the pairs whose name contains a SUBSTR; the others keep their entries).
"""
import sys
import numpy as np
import jax, jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec as P
import optax
sys.path.insert(0, "samples/gen")  # run from the repository root (run_fresh86.sh)
from fresh_lib import Corpus, seeded, state_specs, np_tree  # noqa: E402

SCRIPT = "samples/gen/fresh86.py"
C = Corpus("samples/fresh86", SCRIPT, "samples/gen/run_fresh86.sh", sys.argv[1:])
rng, R, I = seeded(8686)
psum, pmax, pmean, idx = lax.psum, lax.pmax, lax.pmean, lax.axis_index
GAMMA, LAM = 0.985, 0.95
D22 = {"dp": 2, "tp": 4}


def symlog(x):
    return jnp.sign(x) * jnp.log1p(jnp.abs(x))


def symexp(x):
    return jnp.sign(x) * jnp.expm1(jnp.abs(x))


def conts(*shape, p=0.1):
    return (rng.random(shape) >= p).astype(np.float32)


# ---------------------------------------------------------------------------
# 1. RSSM imagination rollout, start states over dp, GRU units over tp.
IB, IH, IZ, IA, IT = 8, 16, 8, 4, 5


def gru_gates(g, h):
    r, c, u = jax.nn.sigmoid(g[:, 0]), g[:, 1], jax.nn.sigmoid(g[:, 2] - 1.0)
    c = jnp.tanh(r * c)
    return u * c + (1.0 - u) * h


def imagine(h0, z0, eps, wg, bg, wz, bz, wah, waz):
    def step(carry, e):
        h, z = carry
        a = jnp.tanh(h @ wah + z @ waz) + 0.1 * e
        g = jnp.einsum("bi,igh->bgh", jnp.concatenate([h, z, a], -1), wg) + bg
        h = gru_gates(g, h)
        z = jnp.tanh(h @ wz + bz)
        return (h, z), (h, z, a)
    _, out = lax.scan(step, (h0, z0), eps)
    return out


def imagine_tp(bug):
    def f(h0, z0, eps, wg, bg, wz, bz, wah, waz):
        def step(carry, e):
            h, z = carry
            a = jnp.tanh(psum(h @ wah, "tp") + z @ waz) + 0.1 * e
            hf = lax.all_gather(h, "tp", axis=1, tiled=True)
            g = jnp.einsum("bi,igh->bgh", jnp.concatenate([hf, z, a], -1), wg) + bg
            h = gru_gates(g, h)
            if bug == "prior-not-psummed":
                pre = h @ wz + bz
            elif bug == "prior-bias-inside-psum":
                pre = psum(h @ wz + bz, "tp")
            else:
                pre = psum(h @ wz, "tp") + bz
            z = jnp.tanh(pre)
            return (h, z), (h, z, a)
        _, out = lax.scan(step, (h0, z0), eps)
        return out
    return f


im_args = (R(IB, IH, scale=0.5), R(IB, IZ, scale=0.5), R(IT, IB, IA), R(IH + IZ + IA, 3, IH, scale=0.3),
           R(3, IH, scale=0.1), R(IH, IZ, scale=0.4), R(IZ, scale=0.1), R(IH, IA, scale=0.4), R(IZ, IA, scale=0.4))
im_in = (P("dp", "tp"), P("dp"), P(None, "dp"), P(None, None, "tp"), P(None, "tp"), P("tp", None), P(), P("tp", None),
         P())
im_out = (P(None, "dp", "tp"), P(None, "dp"), P(None, "dp"))
C.smap("s.rssm_imagine_gru_units_tp.dp2xtp4", D22, imagine_tp, im_in, im_out, imagine, im_args,
       bugs=[("prior-not-psummed", ["missing-collective"]), ("prior-bias-inside-psum", ["wrong-scale"])])


# ---------------------------------------------------------------------------
# 2. lambda-returns over the imagined horizon, percentile normalisation.
LB, LH = 32, 6


def lambda_returns(rew, cont, val):
    """rew, cont (H, B); val (H + 1, B): R_t = r_t + g c_t ((1 - l) v_{t+1} + l R_{t+1}), R_H = v_H."""
    def step(nxt, x):
        r, c, v1 = x
        g = r + GAMMA * c * ((1.0 - LAM) * v1 + LAM * nxt)
        return g, g
    _, ret = lax.scan(step, val[-1], (rew, cont, val[1:]), reverse=True)
    return ret


def ret_norm(rew, cont, val, lohi):
    ret = lambda_returns(rew, cont, val)
    q = jnp.stack([jnp.percentile(ret, 5.0), jnp.percentile(ret, 95.0)])
    lohi = 0.99 * lohi + 0.01 * q
    scale = jnp.maximum(1.0, lohi[1] - lohi[0])
    adv = (ret - val[:-1]) / scale
    w = jnp.cumprod(jnp.concatenate([jnp.ones_like(cont[:1]), GAMMA * cont[:-1]], 0), 0)
    return ret, adv, lohi, -jnp.mean(w * adv)


def ret_norm_dp(bug):
    def f(rew, cont, val, lohi):
        if bug == "bootstrap-from-second-last":
            def step(nxt, x):
                r, c, v1 = x
                g = r + GAMMA * c * ((1.0 - LAM) * v1 + LAM * nxt)
                return g, g
            _, ret = lax.scan(step, val[-2], (rew, cont, val[1:]), reverse=True)
        else:
            ret = lambda_returns(rew, cont, val)
        if bug == "percentiles-local-batch":
            q = pmean(jnp.stack([jnp.percentile(ret, 5.0), jnp.percentile(ret, 95.0)]), "dp")
        else:
            allr = lax.all_gather(ret, "dp", axis=1, tiled=True)
            q = jnp.stack([jnp.percentile(allr, 5.0), jnp.percentile(allr, 95.0)])
        lohi2 = 0.99 * lohi + 0.01 * q
        scale = jnp.maximum(1.0, lohi2[1] - lohi2[0])
        adv = (ret - val[:-1]) / scale
        w = jnp.cumprod(jnp.concatenate([jnp.ones_like(cont[:1]), GAMMA * cont[:-1]], 0), 0)
        obj = -jnp.mean(w * adv)
        if bug != "objective-local-mean":
            obj = pmean(obj, "dp")
        return ret, adv, lohi2, obj
    return f


TB = P(None, "dp")
ln_args = (R(LH, LB, scale=2.0) + 1.0, conts(LH, LB), R(LH + 1, LB, scale=6.0) + 3.0, np.array([-2.0, 9.0], np.float32))
C.smap("s.lambda_returns_global_percentiles.dp8", {"dp": 8}, ret_norm_dp, (TB, TB, TB, P()), (TB, TB, P(), P()),
       ret_norm, ln_args,
       bugs=[("percentiles-local-batch", ["missing-all-gather"]), ("bootstrap-from-second-last", ["wrong-offset"]),
             ("objective-local-mean", ["missing-all-reduce"])])


# ---------------------------------------------------------------------------
# 3. two-hot categorical critic on symlog targets, bins over tp.
NB, CB, CD = 32, 8, 12
BINS = np.linspace(-6.0, 6.0, NB).astype(np.float32)


def twohot(y, bins):
    k = bins.shape[0]
    below = jnp.clip(jnp.sum((bins <= y[:, None]).astype(jnp.int32), -1) - 1, 0, k - 1)
    above = jnp.clip(k - jnp.sum((bins > y[:, None]).astype(jnp.int32), -1), 0, k - 1)
    eq = below == above
    db = jnp.where(eq, 1.0, jnp.abs(bins[below] - y))
    da = jnp.where(eq, 1.0, jnp.abs(bins[above] - y))
    tot = db + da
    return jax.nn.one_hot(below, k) * (da / tot)[:, None] + jax.nn.one_hot(above, k) * (db / tot)[:, None]


def critic_twohot(w, b, x, ret, bins):
    def loss(w, b):
        lg = x @ w + b
        tgt = twohot(symlog(ret), bins)
        return -jnp.mean(jnp.sum(tgt * jax.nn.log_softmax(lg), -1)), lg
    (lv, lg), (gw, gb) = jax.value_and_grad(loss, (0, 1), has_aux=True)(w, b)
    val = symexp(jnp.sum(jax.nn.softmax(lg) * bins, -1))
    return lv, val, gw, gb


def critic_twohot_tp(bug):
    def f(w, b, x, ret, bins):
        kl = bins.shape[0]
        off = idx("tp") * kl
        gi = jnp.arange(kl) + (off if bug != "onehot-without-bin-offset" else 0)
        y = symlog(ret)

        def cnt(mask):
            c = jnp.sum(mask.astype(jnp.int32), -1)
            return c if bug == "count-not-psummed" else psum(c, "tp")
        below = cnt(bins <= y[:, None]) - (0 if bug == "twohot-below-off-by-one" else 1)
        below = jnp.clip(below, 0, NB - 1)
        above = jnp.clip(NB - cnt(bins > y[:, None]), 0, NB - 1)

        def pick(i):
            return psum(jnp.sum(jnp.where(gi == i[:, None], bins, 0.0), -1), "tp")
        eq = below == above
        db = jnp.where(eq, 1.0, jnp.abs(pick(below) - y))
        da = jnp.where(eq, 1.0, jnp.abs(pick(above) - y))
        tot = db + da
        tgt = (gi == below[:, None]) * (da / tot)[:, None] + (gi == above[:, None]) * (db / tot)[:, None]

        def loss(w, b):
            lg = x @ w + b
            m = pmax(lax.stop_gradient(jnp.max(lg, -1)), "tp")
            lz = jnp.log(psum(jnp.sum(jnp.exp(lg - m[:, None]), -1), "tp")) + m
            ce = -psum(jnp.sum(tgt * (lg - lz[:, None]), -1), "tp")
            return pmean(jnp.mean(ce), "dp"), (lg, lz)
        (lv, (lg, lz)), (gw, gb) = jax.value_and_grad(loss, (0, 1), has_aux=True)(w, b)
        val = symexp(psum(jnp.sum(jnp.exp(lg - lz[:, None]) * bins, -1), "tp"))
        return lv, val, gw, gb
    return f


ct_args = (R(CD, NB, scale=0.4), R(NB, scale=0.1), R(CB, CD), R(CB, scale=30.0), BINS)
C.smap("s.twohot_symlog_critic_bins_tp.dp2xtp4", D22, critic_twohot_tp,
       (P(None, "tp"), P("tp"), P("dp"), P("dp"), P("tp")), (P(), P("dp"), P(None, "tp"), P("tp")),
       critic_twohot, ct_args, check_vma=True,
       bugs=[("twohot-below-off-by-one", ["wrong-offset"]), ("count-not-psummed", ["missing-collective"]),
             ("onehot-without-bin-offset", ["wrong-offset"])])


# ---------------------------------------------------------------------------
# 4. KL balancing with free bits, latent groups over tp.
KB, KG, KK = 8, 8, 6
FREE, BDYN, BREP = 2.0, 0.5, 0.1


def unimix_logp(lg):
    p = 0.99 * jax.nn.softmax(lg, -1) + 0.01 / lg.shape[-1]
    return jnp.log(p)


def kl_cat(lq, lp):
    return jnp.sum(jnp.exp(lq) * (lq - lp), -1)


def kl_balance(post, prior):
    def loss(post, prior):
        lq, lp = unimix_logp(post), unimix_logp(prior)
        dyn = jnp.sum(kl_cat(lax.stop_gradient(lq), lp), -1)
        rep = jnp.sum(kl_cat(lq, lax.stop_gradient(lp)), -1)
        return jnp.mean(BDYN * jnp.maximum(FREE, dyn) + BREP * jnp.maximum(FREE, rep))
    lv, (gq, gp) = jax.value_and_grad(loss, (0, 1))(post, prior)
    return lv, gq, gp


def kl_balance_tp(bug):
    bd, br = (BREP, BDYN) if bug == "kl-coeffs-swapped" else (BDYN, BREP)

    def f(post, prior):
        def loss(post, prior):
            lq, lp = unimix_logp(post), unimix_logp(prior)
            dyn = jnp.sum(kl_cat(lax.stop_gradient(lq), lp), -1)
            rep = jnp.sum(kl_cat(lq, lax.stop_gradient(lp)), -1)
            if bug == "free-bits-on-local-sum":
                dyn, rep = psum(jnp.maximum(FREE / 4, dyn), "tp"), psum(jnp.maximum(FREE / 4, rep), "tp")
                return pmean(jnp.mean(bd * dyn + br * rep), "dp")
            dyn, rep = psum(dyn, "tp"), psum(rep, "tp")
            if bug == "free-bits-after-batch-mean":
                return bd * jnp.maximum(FREE, pmean(jnp.mean(dyn), "dp")) + br * jnp.maximum(FREE, pmean(jnp.mean(rep), "dp"))
            return pmean(jnp.mean(bd * jnp.maximum(FREE, dyn) + br * jnp.maximum(FREE, rep)), "dp")
        return (lambda r: (r[0],) + tuple(r[1]))(jax.value_and_grad(loss, (0, 1))(post, prior))
    return f


kl_prior = R(KB, KG, KK)
kl_post = kl_prior + R(KB, KG, KK) * np.linspace(0.3, 2.5, KB, dtype=np.float32)[:, None, None]
C.smap("s.kl_balance_free_bits_groups_tp.dp2xtp4", D22, kl_balance_tp, (P("dp", "tp"),) * 2,
       (P(), P("dp", "tp"), P("dp", "tp")), kl_balance, (kl_post, kl_prior), check_vma=True,
       bugs=[("kl-coeffs-swapped", ["wrong-scale"]), ("free-bits-on-local-sum", ["wrong-order"]),
             ("free-bits-after-batch-mean", ["wrong-order"])])


# ---------------------------------------------------------------------------
# 5. MuZero-style unrolled training step, batch over dp8, replicated params.
MB, MO, MH, MA, MK = 16, 10, 16, 4, 3
VB = np.linspace(-5.0, 5.0, 11).astype(np.float32)
mz_opt = optax.adam(3e-3)


def twohot_np(y, bins, upper_bug=False):
    bins = jnp.asarray(bins)
    k = bins.shape[0]
    below = jnp.clip(jnp.sum((bins <= y[..., None]).astype(jnp.int32), -1) - 1, 0, k - 1)
    above = jnp.clip(below + (2 if upper_bug else 1), 0, k - 1)
    lo, hi = bins[below], bins[above]
    wa = jnp.where(above == below, 0.0, jnp.clip((y - lo) / jnp.where(hi == lo, 1.0, hi - lo), 0.0, 1.0))
    return jax.nn.one_hot(below, k) * (1.0 - wa)[..., None] + jax.nn.one_hot(above, k) * wa[..., None]


def mz_loss(p, obs, acts, pi_t, v_t, r_t, bug=None):
    s = jnp.tanh(obs @ p["rep"] + p["rep_b"])
    total = 0.0
    for k in range(MK + 1):
        pl = s @ p["pol"]
        vl = s @ p["val"]
        total += -jnp.mean(jnp.sum(pi_t[k] * jax.nn.log_softmax(pl), -1))
        total += -jnp.mean(jnp.sum(twohot_np(symlog(v_t[k]), VB, bug == "twohot-upper-off-by-one")
                                   * jax.nn.log_softmax(vl), -1)) * 0.25
        if k == MK:
            break
        a = jax.nn.one_hot(acts[k], MA)
        s = jax.nn.relu(jnp.concatenate([s, a], -1) @ p["dyn"] + p["dyn_b"])
        s = s / (jnp.max(jnp.abs(s), -1, keepdims=True) + 1e-3)
        rl = s @ p["rew"]
        rk = r_t[min(k + 1, MK - 1)] if bug == "reward-target-one-late" else r_t[k]
        total += -jnp.mean(jnp.sum(twohot_np(symlog(rk), VB) * jax.nn.log_softmax(rl), -1))
        s = 0.5 * s + 0.5 * lax.stop_gradient(s)
    return total / (MK + 1)


def mz_step(p, st, obs, acts, pi_t, v_t, r_t):
    lv, g = jax.value_and_grad(mz_loss)(p, obs, acts, pi_t, v_t, r_t)
    u, st = mz_opt.update(g, st, p)
    return optax.apply_updates(p, u), st, lv


def mz_step_dp(bug):
    def f(p, st, obs, acts, pi_t, v_t, r_t):
        lv, g = jax.value_and_grad(mz_loss)(p, obs, acts, pi_t, v_t, r_t, bug)
        if bug != "grads-not-pmeaned":
            g = pmean(g, "dp")
        u, st = mz_opt.update(g, st, p)
        return optax.apply_updates(p, u), st, pmean(lv, "dp")
    return f


mz_p = {"rep": R(MO, MH, scale=0.4), "rep_b": R(MH, scale=0.1), "dyn": R(MH + MA, MH, scale=0.4),
        "dyn_b": R(MH, scale=0.1), "pol": R(MH, MA, scale=0.4), "val": R(MH, 11, scale=0.4), "rew": R(MH, 11, scale=0.4)}
mz_rep = {k: P() for k in mz_p}
mz_st = np_tree(mz_opt.init(mz_p))
mz_st_spec = jax.tree.map(lambda _: P(), mz_st)
mz_pi = np.asarray(jax.nn.softmax(R(MK + 1, MB, MA) * 2.0, -1), np.float32)
mz_batch = (R(MB, MO), I(0, MA, MK, MB), mz_pi, R(MK + 1, MB, scale=20.0), R(MK, MB, scale=3.0))
TD = P(None, "dp")
C.smap("s.muzero_unroll_twohot_step.dp8", {"dp": 8}, mz_step_dp,
       (mz_rep, mz_st_spec, P("dp"), TD, TD, TD, TD), (mz_rep, mz_st_spec, P()), mz_step, (mz_p, mz_st) + mz_batch,
       bugs=[("grads-not-pmeaned", ["missing-all-reduce"]), ("reward-target-one-late", ["wrong-offset"]),
             ("twohot-upper-off-by-one", ["wrong-offset"])])


# ---------------------------------------------------------------------------
# 6. Dreamer actor-critic step, dp2 x tp4, target critic EMA.
AH_, AB, AF, AD, AA = 5, 8, 8, 16, 4
ac_opt = optax.adam(1e-2)
ETA, TAU = 3e-3, 0.02


def critic_fn(c, feat, tp=False):
    h = jax.nn.silu(feat @ c["w1"] + c["b1"])
    o = h @ c["w2"]
    return (psum(o, "tp") if tp else o) + c["b2"]


def ac_losses(p, tgt, lohi, feat, rew, cont, act, tp=False, percentiles=None, bias_bug=False):
    v_t = critic_fn(tgt, feat, tp)
    ret = lambda_returns(rew, cont, v_t)
    q = percentiles(ret)
    lohi = 0.99 * lohi + 0.01 * q
    scale = jnp.maximum(1.0, lohi[1] - lohi[0])
    adv = lax.stop_gradient((ret - v_t[:-1]) / scale)
    a = p["actor"]
    h = jax.nn.silu(feat[:-1] @ a["w1"] + a["b1"])
    if tp:
        lg = psum(h @ a["wpi"] + a["bpi"], "tp") if bias_bug else psum(h @ a["wpi"], "tp") + a["bpi"]
    else:
        lg = h @ a["wpi"] + a["bpi"]
    lp = jax.nn.log_softmax(lg)
    logp = jnp.take_along_axis(lp, act[..., None], -1)[..., 0]
    ent = -jnp.sum(jnp.exp(lp) * lp, -1)
    v = critic_fn(p["critic"], feat[:-1], tp)
    loss = jnp.mean(-logp * adv - ETA * ent) + jnp.mean(0.5 * jnp.square(v - lax.stop_gradient(ret)))
    return loss, lohi


def ac_step(p, st, tgt, lohi, feat, rew, cont, act):
    pct = lambda r: jnp.stack([jnp.percentile(r, 5.0), jnp.percentile(r, 95.0)])
    (lv, lohi), g = jax.value_and_grad(ac_losses, has_aux=True)(p, tgt, lohi, feat, rew, cont, act, percentiles=pct)
    u, st = ac_opt.update(g, st, p)
    p = optax.apply_updates(p, u)
    tgt = jax.tree.map(lambda t, c: (1.0 - TAU) * t + TAU * c, tgt, p["critic"])
    return p, st, tgt, lohi, lv


def ac_step_tp(bug):
    def f(p, st, tgt, lohi, feat, rew, cont, act):
        def pct(r):
            if bug == "percentiles-local-batch":
                return pmean(jnp.stack([jnp.percentile(r, 5.0), jnp.percentile(r, 95.0)]), "dp")
            allr = lax.all_gather(r, "dp", axis=1, tiled=True)
            # all_gather's result counts as dp-varying under check_vma; every rank holds the same
            # percentiles, so a pmax makes them invariant without changing them.
            return pmax(jnp.stack([jnp.percentile(allr, 5.0), jnp.percentile(allr, 95.0)]), "dp")

        def loss(p):
            l, lh = ac_losses(p, tgt, lohi, feat, rew, cont, act, tp=True, percentiles=pct,
                              bias_bug=bug == "actor-bias-inside-psum")
            return pmean(l, "dp"), lh
        (lv, lh), g = jax.value_and_grad(loss, has_aux=True)(p)
        u, st = ac_opt.update(g, st, p)
        p = optax.apply_updates(p, u)
        tau = 1.0 - TAU if bug == "ema-coefficients-swapped" else TAU
        tgt2 = jax.tree.map(lambda t, c: (1.0 - tau) * t + tau * c, tgt, p["critic"])
        return p, st, tgt2, lh, lv
    return f


ac_critic = {"w1": R(AF, AD, scale=0.4), "b1": R(AD, scale=0.1), "w2": R(AD, scale=0.4), "b2": np.float32(0.3)}
ac_tgt = jax.tree.map(lambda x: (x + R(*np.shape(x), scale=0.05)).astype(np.float32), ac_critic)
ac_p = {"critic": ac_critic,
        "actor": {"w1": R(AF, AD, scale=0.4), "b1": R(AD, scale=0.1), "wpi": R(AD, AA, scale=0.4),
                  "bpi": R(AA, scale=0.1)}}
crit_spec = {"w1": P(None, "tp"), "b1": P("tp"), "w2": P("tp"), "b2": P()}
ac_spec = {"critic": crit_spec, "actor": {"w1": P(None, "tp"), "b1": P("tp"), "wpi": P("tp", None), "bpi": P()}}
ac_st = np_tree(ac_opt.init(ac_p))
ac_st_spec = state_specs(ac_st, ac_spec)
ac_batch = (R(AH_ + 1, AB, AF), R(AH_, AB, scale=2.0), conts(AH_, AB), I(0, AA, AH_, AB))
ac_lohi = np.array([-1.5, 2.5], np.float32)
C.smap("s.dreamer_actor_critic_target_ema.dp2xtp4", D22, ac_step_tp,
       (ac_spec, ac_st_spec, crit_spec, P(), TD, TD, TD, TD), (ac_spec, ac_st_spec, crit_spec, P(), P()), ac_step,
       (ac_p, ac_st, ac_tgt, ac_lohi) + ac_batch, check_vma=True,
       bugs=[("percentiles-local-batch", ["missing-all-gather"]), ("ema-coefficients-swapped", ["wrong-scale"]),
             ("actor-bias-inside-psum", ["wrong-scale"])])


# ---------------------------------------------------------------------------
# 7. RSSM observe pass world-model loss, batch over dp2, units / embedding over tp4.
WT, WB, WO, WE, WH, WZ = 4, 8, 12, 16, 16, 8


def wm_loss(obs, rew, cont, h0, p, tp=False, bug=None):
    ps = (lambda x: psum(x, "tp")) if tp else (lambda x: x)
    gather = (lambda x: lax.all_gather(x, "tp", axis=1, tiled=True)) if tp else (lambda x: x)

    def step(carry, x):
        h, z = carry
        o, r, c = x
        e = jnp.tanh(symlog(o) @ p["enc"])
        hf = gather(h)
        g = jnp.einsum("bi,igh->bgh", jnp.concatenate([hf, z], -1), p["gru"])
        h = gru_gates(g, h)
        prior = ps(h @ p["pri"])
        if tp:  # the rank's block of rows [h_r; e_r]
            post = ps(jnp.concatenate([h, e], -1) @ p["pos"])
        else:  # the same weight, rows stored rank-blocked: undo the blocking
            wp = p["pos"].reshape(4, -1, WZ)
            hu = wp.shape[1] // 2
            post = h @ wp[:, :hu].reshape(-1, WZ) + e @ wp[:, hu:].reshape(-1, WZ)
        zq = jnp.tanh(post)
        rec = h @ p["dec"]
        rec = rec if bug == "decoder-not-psummed" else ps(rec)
        rec = rec + zq @ p["dec_z"]
        rec_err = jnp.mean(jnp.square(rec - symlog(o)), -1)
        rhat = ps(h @ p["rw"]) + zq @ p["rw_z"]
        chat = ps(h @ p["ct"])
        bce = optax.sigmoid_binary_cross_entropy(chat, c)
        kl = 0.5 * jnp.sum(jnp.square(post - prior), -1)
        return (h, zq), (rec_err, jnp.square(rhat - symlog(r)), bce, kl)
    z0 = jnp.zeros((obs.shape[1], WZ), obs.dtype)
    _, (re, rr, cc, kk) = lax.scan(step, (h0, z0), (obs, rew, cont))
    return jnp.mean(re), jnp.mean(rr), jnp.mean(cc), jnp.mean(jnp.maximum(1.0, kk))


def wm_base(obs, rew, cont, h0, p):
    return wm_loss(obs, rew, cont, h0, p)


def wm_tp(bug):
    def f(obs, rew, cont, h0, p):
        terms = wm_loss(obs, rew, cont, h0, p, tp=True, bug=bug)
        if bug == "rec-loss-not-pmeaned":
            return (terms[0],) + tuple(pmean(t, "dp") for t in terms[1:])
        return tuple(pmean(t, "dp") for t in terms)
    return f


wm_p = {"enc": R(WO, WE, scale=0.4), "gru": R(WH + WZ, 3, WH, scale=0.3), "pri": R(WH, WZ, scale=0.4),
        "pos": R(WH + WE, WZ, scale=0.3), "dec": R(WH, WO, scale=0.4), "dec_z": R(WZ, WO, scale=0.4),
        "rw": R(WH), "rw_z": R(WZ), "ct": R(WH)}
# the posterior's input rows [h (units), e (embedding)] split over tp as one block per rank: [h_r, e_r].
WP = np.concatenate([np.concatenate([wm_p["pos"][r * 4:(r + 1) * 4], wm_p["pos"][WH + r * 4:WH + (r + 1) * 4]], 0)
                     for r in range(4)], 0)
wm_spec = {"enc": P(None, "tp"), "gru": P(None, None, "tp"), "pri": P("tp", None), "pos": P("tp", None),
           "dec": P("tp", None), "dec_z": P(), "rw": P("tp"), "rw_z": P(), "ct": P("tp")}
wm_args = (R(WT, WB, WO, scale=3.0), R(WT, WB, scale=2.0), conts(WT, WB), R(WB, WH, scale=0.5), wm_p)
wm_p["pos"] = WP
C.smap("s.rssm_observe_world_model_loss.dp2xtp4", D22, wm_tp, (P(None, "dp"), TD, TD, P("dp", "tp"), wm_spec),
       (P(), P(), P(), P()), wm_base, wm_args,
       bugs=[("decoder-not-psummed", ["missing-collective"]), ("rec-loss-not-pmeaned", ["missing-all-reduce"])])


# ---------------------------------------------------------------------------
# 8. GRU input projection as a row-parallel matmul finished by psum_scatter
#    over the gate units (the input features over tp), recurrent weights
#    column-parallel on the all_gather'd state; bias sliced at the rank's units.
GB, GT, GI, GH = 8, 3, 16, 16


def gru_seq(x, h0, w, u, bg):
    def step(h, xt):
        g = jnp.einsum("bi,igh->bgh", xt, w) + jnp.einsum("bj,jgh->bgh", h, u) + bg
        h = gru_gates(g, h)
        return h, h
    return lax.scan(step, h0, x)[1]


def gru_seq_tp(bug):
    def f(x, h0, w, u, bg):
        hl = h0.shape[1]
        off = 0 if bug == "bias-slice-at-zero" else idx("tp") * hl
        b_me = lax.dynamic_slice_in_dim(bg, off, hl, axis=1)

        def step(h, xt):
            part = jnp.einsum("bi,igh->bgh", xt, w)
            gx = lax.psum_scatter(part, "tp", scatter_dimension=2, tiled=True)
            if bug == "scatter-divided-by-tp":
                gx = gx / 4.0
            hf = lax.all_gather(h, "tp", axis=1, tiled=True)
            g = gx + jnp.einsum("bj,jgh->bgh", hf, u) + b_me
            h = gru_gates(g, h)
            return h, h
        return lax.scan(step, h0, x)[1]
    return f


C.smap("s.gru_input_proj_psum_scatter_units.dp2xtp4", D22, gru_seq_tp,
       (P(None, "dp", "tp"), P("dp", "tp"), P("tp"), P(None, None, "tp"), P()), P(None, "dp", "tp"), gru_seq,
       (R(GT, GB, GI), R(GB, GH, scale=0.5), R(GI, 3, GH, scale=0.3), R(GH, 3, GH, scale=0.3), R(3, GH, scale=0.2)),
       bugs=[("bias-slice-at-zero", ["wrong-offset"]), ("scatter-divided-by-tp", ["wrong-scale"])])


# ---------------------------------------------------------------------------
# 9. imagination from every posterior state of a replay batch, the batch over
#    dp2 and time over sp4: starts flattened (B, T) -> (B T), a 4-step
#    deterministic-actor rollout, lambda-returns, percentiles over all starts
#    of all devices (all_gather over both axes), unflattened back.
SB, ST, SF, SA, SH = 4, 8, 8, 3, 4


def dream_from_posteriors(feat, wd, wa, wpi, wr, wc, wv, lohi):
    b, t, fdim = feat.shape
    s = feat.reshape(b * t, fdim)
    ss, rs, cs = [s], [], []
    for _ in range(SH):
        a = jnp.tanh(s @ wpi)
        s = jnp.tanh(s @ wd + a @ wa)
        ss.append(s)
        rs.append(s @ wr)
        cs.append(jax.nn.sigmoid(s @ wc))
    val = jnp.stack([x @ wv for x in ss])
    ret = lambda_returns(jnp.stack(rs), jnp.stack(cs), val)
    return ret, val


def dream_norm(feat, wd, wa, wpi, wr, wc, wv, lohi):
    ret, val = dream_from_posteriors(feat, wd, wa, wpi, wr, wc, wv, lohi)
    q = jnp.stack([jnp.percentile(ret, 5.0), jnp.percentile(ret, 95.0)])
    lohi = 0.99 * lohi + 0.01 * q
    adv = (ret - val[:-1]) / jnp.maximum(1.0, lohi[1] - lohi[0])
    b, t = feat.shape[:2]
    return ret.reshape(SH, b, t), adv.reshape(SH, b, t), lohi, -jnp.mean(adv)


def dream_norm_2d(bug):
    def f(feat, wd, wa, wpi, wr, wc, wv, lohi):
        b, t, fdim = feat.shape
        if bug == "starts-flattened-time-major":
            feat_in = jnp.swapaxes(feat, 0, 1)
        else:
            feat_in = feat
        ret, val = dream_from_posteriors(feat_in, wd, wa, wpi, wr, wc, wv, lohi)
        ax = "dp" if bug == "percentiles-over-dp-only" else ("dp", "sp")
        allr = lax.all_gather(ret, ax, axis=1, tiled=True)
        q = jnp.stack([jnp.percentile(allr, 5.0), jnp.percentile(allr, 95.0)])
        lohi = 0.99 * lohi + 0.01 * q
        adv = (ret - val[:-1]) / jnp.maximum(1.0, lohi[1] - lohi[0])
        obj = pmean(-jnp.mean(adv), ("dp", "sp"))
        return ret.reshape(SH, b, t), adv.reshape(SH, b, t), lohi, obj
    return f


dr_args = (R(SB, ST, SF), R(SF, SF, scale=0.5), R(SA, SF, scale=0.5), R(SF, SA, scale=0.5), R(SF, scale=2.0), R(SF),
           R(SF, scale=3.0), np.array([-1.0, 4.0], np.float32))
dr_in = (P("dp", "sp"), P(), P(), P(), P(), P(), P(), P())
dr_out = (P(None, "dp", "sp"), P(None, "dp", "sp"), P(), P())
C.smap("s.imagine_from_every_posterior_percentiles.dp2xsp4", {"dp": 2, "sp": 4}, dream_norm_2d, dr_in, dr_out,
       dream_norm, dr_args,
       bugs=[("percentiles-over-dp-only", ["wrong-axis"]), ("starts-flattened-time-major", ["wrong-layout"])])


# ---------------------------------------------------------------------------
# 10. MuZero n-step value targets with the invertible value rescaling
#     h(x) = sign(x)(sqrt(|x| + 1) - 1) + eps x, time over sp4 (4 steps a
#     device), the next 3 rewards and values from the right neighbour by
#     ppermute (the last device takes the tail inputs), two-hot on 21 bins,
#     cross-entropy against value logits pmean'd over dp2 x sp4.
NT, NBt, NSTEP, NK = 16, 4, 3, 21
NBINS = np.linspace(-4.0, 4.0, NK).astype(np.float32)
EPS_H = 1e-3


def h_rescale(x):
    return jnp.sign(x) * (jnp.sqrt(jnp.abs(x) + 1.0) - 1.0) + EPS_H * x


def nstep_targets(u, v, tail_u, tail_v):
    uu = jnp.concatenate([u, tail_u], 1)
    vv = jnp.concatenate([v, tail_v], 1)
    t = u.shape[1]
    z = sum(GAMMA ** i * uu[:, i:i + t] for i in range(NSTEP)) + GAMMA ** NSTEP * vv[:, NSTEP:NSTEP + t]
    return z


def mz_value_loss(u, v, tail_u, tail_v, logits):
    z = nstep_targets(u, v, tail_u, tail_v)
    tgt = twohot_np(h_rescale(z), NBINS)
    return z, jnp.mean(-jnp.sum(tgt * jax.nn.log_softmax(logits), -1))


def mz_value_loss_sp(bug):
    def f(u, v, tail_u, tail_v, logits):
        n, me = 4, idx("sp")
        perm = [(i, i + 1) for i in range(n - 1)] if bug == "halo-from-left" else [(i, i - 1) for i in range(1, n)]
        hu = lax.ppermute(u[:, :NSTEP], "sp", perm)
        hv = lax.ppermute(v[:, :NSTEP], "sp", perm)
        last = me == n - 1
        hu, hv = jnp.where(last, tail_u, hu), jnp.where(last, tail_v, hv)
        z = nstep_targets(u, v, hu, hv)
        tgt = twohot_np(h_rescale(z), NBINS)
        l = jnp.mean(-jnp.sum(tgt * jax.nn.log_softmax(logits), -1))
        return z, pmean(l, "dp" if bug == "loss-pmean-over-dp-only" else ("dp", "sp"))
    return f


mv_args = (R(NBt, NT, scale=2.0), R(NBt, NT, scale=8.0), R(NBt, NSTEP, scale=2.0), R(NBt, NSTEP + 1, scale=8.0)[:, 1:],
           R(NBt, NT, NK))
C.smap("s.muzero_nstep_value_rescale_halo.dp2xsp4", {"dp": 2, "sp": 4}, mz_value_loss_sp,
       (P("dp", "sp"), P("dp", "sp"), P("dp"), P("dp"), P("dp", "sp")), (P("dp", "sp"), P()), mz_value_loss, mv_args,
       bugs=[("halo-from-left", ["wrong-permutation"]), ("loss-pmean-over-dp-only", ["wrong-axis"])])


# ---------------------------------------------------------------------------
# 11. a straight-through categorical-latent world-model step: 8 latent groups
#     of 6 classes over tp4 (logits from a column-parallel bf16 encoder with
#     f32 accumulation), samples by argmax(logits + gumbel) with the gumbel
#     noise passed in, z = onehot + p - sg(p), a row-parallel decoder psum'd
#     over tp, symlog reconstruction loss pmean'd over dp, optax.adam on the
#     sharded encoder / decoder (check_vma=True).
XB, XO, XG, XK = 8, 12, 8, 6
st_opt = optax.adam(5e-3)


def st_sample(lg, gum, straight=True):
    p = 0.99 * jax.nn.softmax(lg, -1) + 0.01 / XK
    oh = jax.nn.one_hot(jnp.argmax(lg + gum, -1), XK, dtype=lg.dtype)
    return oh + p - lax.stop_gradient(p) if straight else oh


def st_forward(p, obs, gum, dec_psum=None, straight=True):
    lg = jnp.dot(symlog(obs).astype(jnp.bfloat16), p["enc"].astype(jnp.bfloat16),
                 preferred_element_type=jnp.float32)
    lg = lg.reshape(obs.shape[0], -1, XK)
    z = st_sample(lg, gum, straight).reshape(obs.shape[0], -1)
    rec = jnp.dot(z, p["dec"])
    rec = dec_psum(rec) if dec_psum else rec
    return jnp.mean(jnp.square(rec + p["dec_b"] - symlog(obs)))


def st_step(p, st, obs, gum):
    lv, g = jax.value_and_grad(st_forward)(p, obs, gum)
    u, st = st_opt.update(g, st, p)
    return optax.apply_updates(p, u), st, lv


def st_step_tp(bug):
    def f(p, st, obs, gum):
        def loss(p):
            l = st_forward(p, obs, gum, lambda x: psum(x, "tp"), straight=bug != "no-straight-through")
            return pmean(l, "dp")
        lv, g = jax.value_and_grad(loss)(p)
        if bug == "enc-grad-psummed-over-tp":
            g = dict(g, enc=psum(g["enc"], "tp"))
        u, st = st_opt.update(g, st, p)
        return optax.apply_updates(p, u), st, lv
    return f


xs_p = {"enc": R(XO, XG * XK, scale=0.5), "dec": R(XG * XK, XO, scale=0.3), "dec_b": R(XO, scale=0.1)}
xs_spec = {"enc": P(None, "tp"), "dec": P("tp", None), "dec_b": P()}
xs_st = np_tree(st_opt.init(xs_p))
xs_st_spec = state_specs(xs_st, xs_spec)
xs_args = (xs_p, xs_st, R(XB, XO, scale=3.0), -np.log(-np.log(rng.random((XB, XG, XK)) * 0.98 + 0.01)).astype(np.float32))
C.smap("s.straight_through_latent_wm_step_bf16.dp2xtp4", D22, st_step_tp,
       (xs_spec, xs_st_spec, P("dp"), P("dp", "tp")), (xs_spec, xs_st_spec, P()), st_step, xs_args, check_vma=True,
       bugs=[("no-straight-through", ["wrong-gradient"]), ("enc-grad-psummed-over-tp", ["wrong-collective"])])


# ---------------------------------------------------------------------------
# GSPMD pairs.
# 11. imagination rollout of 1. on dp2 x tp4.
C.gspmd("g.rssm_imagine_rollout.dp2xtp4", D22, im_in, im_out, imagine, im_args)

# 12. lambda-returns with percentile normalisation, batch over dp8.
C.gspmd("g.lambda_returns_percentile_norm.dp8", {"dp": 8}, (TB, TB, TB, P()), (TB, TB, P(), P()), ret_norm, ln_args)

# 13. two-hot critic loss and gradient, bins over tp4.
C.gspmd("g.twohot_critic_grad_bins_tp.dp2xtp4", D22, (P(None, "tp"), P("tp"), P("dp"), P("dp"), P("tp")),
        (P(), P("dp"), P(None, "tp"), P("tp")), critic_twohot, ct_args)

# 14. MuZero training step of 5., batch over dp8.
C.gspmd("g.muzero_unroll_adam_step.dp8", {"dp": 8}, (mz_rep, mz_st_spec, P("dp"), TD, TD, TD, TD),
        (mz_rep, mz_st_spec, P()), mz_step, (mz_p, mz_st) + mz_batch)

# 15. actor-critic step of 6., Megatron shardings on dp2 x tp4.
C.gspmd("g.dreamer_actor_critic_ema.dp2xtp4", D22, (ac_spec, ac_st_spec, crit_spec, P(), TD, TD, TD, TD),
        (ac_spec, ac_st_spec, crit_spec, P(), P()), ac_step, (ac_p, ac_st, ac_tgt, ac_lohi) + ac_batch)

# 16. the psum_scatter'd GRU of 8. as GSPMD, and 17. imagination from every
#     posterior of 9. with the replay batch over dp2 x sp4.
C.gspmd("g.gru_sequence_units_tp.dp2xtp4", D22, (P(None, "dp"), P("dp", "tp"), P(None, None, "tp"),
                                                  P(None, None, "tp"), P(None, "tp")), P(None, "dp", "tp"), gru_seq,
        (R(GT, GB, GI), R(GB, GH, scale=0.5), R(GI, 3, GH, scale=0.3), R(GH, 3, GH, scale=0.3), R(3, GH, scale=0.2)))
C.gspmd("g.imagine_from_every_posterior.dp2xsp4", {"dp": 2, "sp": 4}, dr_in, dr_out, dream_norm, dr_args)
# 18. the n-step value targets and loss of 10. with time over sp4.
C.gspmd("g.muzero_nstep_value_loss.dp2xsp4", {"dp": 2, "sp": 4},
        (P("dp", "sp"), P("dp", "sp"), P("dp"), P("dp"), P("dp", "sp")), (P("dp", "sp"), P()), mz_value_loss, mv_args)

# 19. the straight-through latent step of 11. as GSPMD.
C.gspmd("g.straight_through_latent_wm_step.dp2xtp4", D22, (xs_spec, xs_st_spec, P("dp"), P("dp", "tp")),
        (xs_spec, xs_st_spec, P()), st_step, xs_args)

C.finish()
