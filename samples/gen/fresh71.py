"""samples/fresh71: a 71st batch of programs as a user writes them, on the theme of actor-critic reinforcement learning with the time axis or the environments sharded over devices in current JAX (GAE, V-trace, Retrace, TD(lambda), n-step returns, PPO objectives, vocabulary-parallel action heads, optax update steps), none of them an idiom of samples/fresh .. fresh26, probe, train or wild.
shard_map families (rollouts (B envs, T steps), time over sp, envs over dp,
actions over tp):
 1. GAE with time over sp4, the carry relayed by hand: the next step's value
    and the bootstrap at a block end by one stacked ppermute from the right
    neighbour, a local reverse lax.scan from a zero carry keeping the
    product of gamma*lambda*(1-done), then n-1 rounds of a non-cyclic
    ppermute (device i+1 -> i) of "first advantage + product * carry" so
    the carry of the last block reaches device 0. Bugs: one relay round
    short, the relay sent to the right (i -> i+1), the bootstrap value not
    put in on the last device (zero next value).
 2. V-trace (IMPALA) targets and policy-gradient advantages with envs over
    dp2 and time over sp4: clipped rho / c, a local reverse scan of the
    value corrections, the blocks' (first correction, product) all_gather'd
    over sp and combined by a reversed lax.associative_scan of affine maps,
    the carry of block me+1 by dynamic_index; the pg advantage at a block
    end uses the next device's v_s (second ppermute). Bugs: the pg
    advantage's boundary term from the next value instead of v_s, the
    inclusive carry (block me's own start), all_gather over dp.
 3. Retrace Q targets with the actions over tp4 (16 actions) and envs over
    dp2: the target policy's softmax across tp (pmax'd max, psum'd
    normaliser), the expected value E_pi Q by a psum, Q(x, a) and pi(a|x)
    picked by a one-hot with the rank's action offset and psum'd, c =
    lambda min(1, pi/mu), a reverse scan over the whole time axis; the
    squared TD loss pmean'd over dp. Bugs: the one-hot without the action
    offset, the softmax normaliser not psum'd, the loss pmean'd over tp.
 4. TD(lambda) returns in the recursive form G_t = r_t + gamma (1 - d_t)
    ((1 - lambda) V_{t+1} + lambda G_{t+1}), time over sp4: each block's
    affine map (a, b) with the bootstrap folded into the last block's,
    suffix-composed by recursive doubling (ppermutes by 1 then 2 devices),
    the next block's start by one more ppermute. Bugs: one doubling round
    only, doubling from the left neighbours, the block's own start as its
    carry.
 5. 3-step returns with episode ends crossing device boundaries, time over
    sp4 (4 steps a device): a halo of the next 3 rewards, dones and values
    from the right neighbour (the last device takes the rollout's tail
    inputs), the survival mask prod(1 - d) along the window; mean squared
    error of the values pmean'd. Bugs: halo from the left neighbour, the
    halo's dones dropped (the mask stops at the device boundary), the loss
    a local mean.
 6. a PPO loss with advantages normalised by masked global statistics over
    dp2 x sp4 (psum of counts, sums and squared deviations over both axes),
    clipped ratio, value loss and entropy, and its gradient by jax.grad in
    the body (check_vma=True, replicated parameters). Bugs: statistics
    psum'd over sp only, the loss as a pmean of per-device masked means,
    the gradient psum'd again by hand.
 7. a vocabulary-parallel action head (32 actions over tp4, envs over dp2):
    clipped PPO surrogate on log pi(a) and an entropy bonus from the
    distributed log-softmax (pmax of a stop_gradient max, psum'd exp sums,
    psum'd sum of p * logits), value_and_grad for the head's sharded W, b
    (check_vma=True). Bugs: the action's one-hot without the tp offset, the
    entropy's E_p[logits] not psum'd (loss then pmean'd over dp and tp).
 8. a full actor-critic update step under dp2 x tp4 (check_vma=True): a
    Megatron MLP torso (column-parallel W1, row-parallel policy and value
    heads psum'd before their replicated biases), GAE inside the loss on
    stop_gradient values (time whole), advantages normalised by pmean'd
    statistics over dp, loss pmean'd over dp, jax.value_and_grad,
    optax.adam applied shard-wise. Bugs: advantage statistics local, the
    replicated policy bias added inside the psum (tp times), the loss
    psum'd over dp.
 9. GAE the lazy way on dp2 x sp4: the envs' whole rollouts all_gather'd
    (tiled) along sp, GAE over the full time axis on every device, the own
    block kept by dynamic_slice at axis_index * block. Bugs: the block at
    offset 0, the gather over dp.
10. discrete soft actor-critic targets with the actions over tp4 and envs
    over dp2: alpha * logsumexp(Q' / alpha) across tp (pmax'd max, psum'd
    exp sums), the target r + gamma (1 - d) V', the policy entropy from the
    same distributed log-softmax, the critic's squared error at the taken
    action (masked psum) pmean'd over dp. Bugs: the log-sum-exp's max not
    pmax'd, the target psum'd over tp.
GSPMD pairs (jax.jit with in/out shardings): 11. V-trace of 2. with time over
sp4 (scan along the sharded axis); 12. 3-step returns and TD(lambda)
returns on dp2 x sp4; 13. Retrace targets with the Q and policy logits'
actions over tp4 and envs over dp2; 14. an actor-critic update step with
optax.sgd (Nesterov momentum) and the MLP's weights Megatron-sharded over
tp4, the rollouts over dp2.
Numerics: every correct pair agrees with its baseline at rounding level
(f32); every bug variant differs clearly (see "numerics"). A first draft of
2. composed the gathered block maps in the wrong order inside
lax.associative_scan(reverse=True) (a difference of 1.48, caught by the
recorded numerics) and was fixed before export. Dones are drawn
at a rate that leaves most 4-step blocks open (products non-zero), so the
carries matter.
Exported with scalify_jax.export_pair; every pair is also run by JAX on
seeded inputs and its manifest entry records the largest difference from
the single-device run ("numerics").
Run from the repository root: bash samples/gen/run_fresh71.sh [SUBSTR...]
(only the pairs whose name contains a SUBSTR; the others keep their entries).
"""
import sys
import numpy as np
import jax, jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec as P
import optax
sys.path.insert(0, "samples/gen")  # run from the repository root (run_fresh71.sh)
from fresh_lib import Corpus, seeded, state_specs, np_tree  # noqa: E402

SCRIPT = "samples/gen/fresh71.py"
C = Corpus("samples/fresh71", SCRIPT, "samples/gen/run_fresh71.sh", sys.argv[1:])
rng, R, I = seeded(7171)
psum, pmax, pmean, idx, ppermute = lax.psum, lax.pmax, lax.pmean, lax.axis_index, lax.ppermute

B, T = 4, 16
GAMMA, LAM = 0.97, 0.9


def dones(*shape, p=0.08):
    return (rng.random(shape) < p).astype(np.float32)


def from_right(n, k=1):
    """ppermute pairs: device i receives from device i + k (non-cyclic)."""
    return [(i, i - k) for i in range(k, n)]


def from_left(n, k=1):
    return [(i, i + k) for i in range(n - k)]


def reverse_affine(a, b):
    """x_t = a_t + b_t x_{t+1}, x_T = 0, along axis 1 of (B, T); returns x
    and the suffix products prod_{j>=t} b_j."""
    def step(c, ab):
        x, pr = c
        x, pr = ab[0] + ab[1] * x, ab[1] * pr
        return (x, pr), (x, pr)
    z = 0.0 * a[:, 0] * b[:, 0]  # (inherits the inputs' varying axes inside shard_map)
    _, (x, pr) = lax.scan(step, (z, z + 1.0), (a.T, b.T), reverse=True)
    return x.T, pr.T


# ---------------------------------------------------------------------------
# 1. GAE, time over sp4, the carry relayed down a chain of ppermutes.
def gae(rew, val, done, boot):
    nxt = jnp.concatenate([val[:, 1:], boot[:, None]], 1)
    delta = rew + GAMMA * (1.0 - done) * nxt - val
    adv, _ = reverse_affine(delta, GAMMA * LAM * (1.0 - done))
    return adv, adv + val


def gae_relay(bug):
    def f(rew, val, done, boot):
        n, me = 4, idx("sp")
        nv = ppermute(val[:, 0], "sp", from_right(n))
        if bug != "no-bootstrap":
            nv = jnp.where(me == n - 1, boot, nv)
        nxt = jnp.concatenate([val[:, 1:], nv[:, None]], 1)
        disc = GAMMA * (1.0 - done)
        delta = rew + disc * nxt - val
        # local scan written the other way round: time leading, reverse=True
        def back(carry, x):
            d, k = x
            a, pr = carry
            a = d + k * a
            pr = pr * k
            return (a, pr), (a, pr)
        z = jnp.zeros_like(boot)
        _, (a, pr) = lax.scan(back, (z, z + 1.0), (delta.T, (LAM * disc).T), reverse=True)
        a, pr = a.T, pr.T
        perm = from_left(n) if bug == "relay-to-the-right" else from_right(n)
        rounds = n - 2 if bug == "one-round-short" else n - 1
        carry = z
        for _ in range(rounds):
            carry = ppermute(a[:, 0] + pr[:, 0] * carry, "sp", perm)
        adv = a + pr * carry[:, None]
        return adv, adv + val
    return f


C.smap("s.gae_ppermute_relay_chain.sp4", {"sp": 4}, gae_relay, (P(None, "sp"),) * 3 + (P(),),
       (P(None, "sp"), P(None, "sp")), gae, (R(B, T), R(B, T), dones(B, T), R(B)),
       bugs=[("one-round-short", ["wrong-offset"]), ("relay-to-the-right", ["wrong-permutation"]),
             ("no-bootstrap", ["wrong-offset"])])


# ---------------------------------------------------------------------------
# 2. V-trace, envs over dp2, time over sp4.
RHO_BAR, C_BAR, PG_RHO_BAR, VT_LAM = 1.0, 1.0, 1.0, 0.95


def vtrace(blogp, tlogp, rew, val, done, boot):
    rho = jnp.exp(tlogp - blogp)
    rc, cs = jnp.minimum(RHO_BAR, rho), VT_LAM * jnp.minimum(C_BAR, rho)
    disc = GAMMA * (1.0 - done)
    nxt = jnp.concatenate([val[:, 1:], boot[:, None]], 1)
    delta = rc * (rew + disc * nxt - val)
    err, _ = reverse_affine(delta, disc * cs)
    vs = val + err
    vs_next = jnp.concatenate([vs[:, 1:], boot[:, None]], 1)
    pg_adv = jnp.minimum(PG_RHO_BAR, rho) * (rew + disc * vs_next - val)
    return vs, pg_adv


def vtrace_sp(bug):
    def f(blogp, tlogp, rew, val, done, boot):
        n, me = 4, idx("sp")
        last = me == n - 1
        rho = jnp.exp(tlogp - blogp)
        rc, cs = jnp.minimum(RHO_BAR, rho), VT_LAM * jnp.minimum(C_BAR, rho)
        disc = GAMMA * (1.0 - done)
        v_in = jnp.where(last, boot, ppermute(val[:, 0], "sp", from_right(n)))
        nxt = jnp.concatenate([val[:, 1:], v_in[:, None]], 1)
        delta = rc * (rew + disc * nxt - val)
        e, pr = reverse_affine(delta, disc * cs)
        ax = "dp" if bug == "gather-over-dp" else "sp"
        e0, p0 = lax.all_gather(e[:, 0], ax), lax.all_gather(pr[:, 0], ax)  # (n, b)

        def compose(later, earlier):  # x -> e + p x of the earlier block after the later one
            el, pl = later
            ee, pe = earlier
            return ee + pe * el, pe * pl
        F, _ = lax.associative_scan(compose, (e0, p0), reverse=True)
        F = jnp.concatenate([F, jnp.zeros_like(F[:1])], 0)
        k = me if bug == "inclusive-carry" else me + 1
        carry = lax.dynamic_index_in_dim(F, k, 0, keepdims=False)
        err = e + pr * carry[:, None]
        vs = val + err
        vs_in = ppermute(vs[:, 0], "sp", from_right(n))
        if bug == "pg-boundary-from-values":
            vs_in = v_in
        vs_in = jnp.where(last, boot, vs_in)
        vs_next = jnp.concatenate([vs[:, 1:], vs_in[:, None]], 1)
        pg_adv = jnp.minimum(PG_RHO_BAR, rho) * (rew + disc * vs_next - val)
        return vs, pg_adv
    return f


VB = 4
vt_blogp = R(VB, T, scale=0.4) - 1.2
vt_args = (vt_blogp, vt_blogp + R(VB, T, scale=0.3), R(VB, T), R(VB, T), dones(VB, T), R(VB))
SPD = P("dp", "sp")
C.smap("s.vtrace_assoc_scan_blocks.dp2xsp4", {"dp": 2, "sp": 4}, vtrace_sp, (SPD,) * 5 + (P("dp"),), (SPD, SPD),
       vtrace, vt_args,
       bugs=[("pg-boundary-from-values", ["wrong-offset"]), ("inclusive-carry", ["wrong-offset"]),
             ("gather-over-dp", ["wrong-axis"])])


# ---------------------------------------------------------------------------
# 3. Retrace targets, actions over tp4, envs over dp2.
RA, RT, R_LAM = 16, 8, 0.95


def retrace(q, logits, mu_a, act, rew, done):
    pi = jax.nn.softmax(logits, -1)
    v = jnp.sum(pi * q, -1)
    q_a = jnp.take_along_axis(q, act[..., None], -1)[..., 0]
    pi_a = jnp.take_along_axis(pi, act[..., None], -1)[..., 0]
    c = R_LAM * jnp.minimum(1.0, pi_a / mu_a)
    g = v[:, -1]
    outs = []
    for t in range(RT - 2, -1, -1):
        g = rew[:, t] + GAMMA * (1.0 - done[:, t]) * (v[:, t + 1] + c[:, t + 1] * (g - q_a[:, t + 1]))
        outs.append(g)
    tgt = jnp.stack(outs[::-1], 1)
    loss = jnp.mean(jnp.square(q_a[:, :-1] - tgt))
    return tgt, loss


def retrace_tp(bug):
    def f(q, logits, mu_a, act, rew, done):
        al = q.shape[-1]
        m = pmax(jnp.max(logits, -1, keepdims=True), "tp")
        ex = jnp.exp(logits - m)
        z = jnp.sum(ex, -1, keepdims=True)
        if bug != "normaliser-not-psummed":
            z = psum(z, "tp")
        pi = ex / z
        v = psum(jnp.einsum("bta,bta->bt", pi, q), "tp")
        off = 0 if bug == "onehot-without-offset" else idx("tp") * al
        oh = (act[..., None] == off + jnp.arange(al)).astype(q.dtype)
        q_a, pi_a = psum(jnp.sum(oh * q, -1), "tp"), psum(jnp.sum(oh * pi, -1), "tp")
        c = R_LAM * jnp.minimum(1.0, pi_a / mu_a)
        disc = GAMMA * (1.0 - done)

        def back(g, x):
            r, dsc, vn, cn, qn = x
            g = r + dsc * (vn + cn * (g - qn))
            return g, g
        xs = tuple(a.T for a in (rew[:, :-1], disc[:, :-1], v[:, 1:], c[:, 1:], q_a[:, 1:]))
        _, tgt = lax.scan(back, v[:, -1], xs, reverse=True)
        tgt = tgt.T
        loss = jnp.mean(jnp.square(q_a[:, :-1] - tgt))
        loss = pmean(loss, "tp" if bug == "loss-pmean-over-tp" else "dp")
        return tgt, loss
    return f


rt_mu = rng.uniform(0.05, 0.6, (4, RT)).astype(np.float32)
C.smap("s.retrace_action_head_tp.dp2xtp4", {"dp": 2, "tp": 4}, retrace_tp,
       (P("dp", None, "tp"), P("dp", None, "tp"), P("dp"), P("dp"), P("dp"), P("dp")), (P("dp"), P()),
       retrace, (R(4, RT, RA), R(4, RT, RA), rt_mu, I(0, RA, 4, RT), R(4, RT), dones(4, RT, p=0.1)),
       bugs=[("onehot-without-offset", ["wrong-offset"]), ("normaliser-not-psummed", ["missing-collective"]),
             ("loss-pmean-over-tp", ["wrong-axis"])])


# ---------------------------------------------------------------------------
# 4. TD(lambda) returns by recursive doubling over sp4.
def td_lambda(rew, val, done, boot):
    nxt = jnp.concatenate([val[:, 1:], boot[:, None]], 1)
    g = boot
    out = []
    for t in range(T - 1, -1, -1):
        g = rew[:, t] + GAMMA * (1.0 - done[:, t]) * ((1.0 - LAM) * nxt[:, t] + LAM * g)
        out.append(g)
    ret = jnp.stack(out[::-1], 1)
    return ret, ret - val


def td_lambda_sp(bug):
    def f(rew, val, done, boot):
        n, me = 4, idx("sp")
        last = me == n - 1
        v_in = jnp.where(last, boot, ppermute(val[:, 0], "sp", from_right(n)))
        nxt = jnp.concatenate([val[:, 1:], v_in[:, None]], 1)
        a = rew + GAMMA * (1.0 - done) * (1.0 - LAM) * nxt
        b = GAMMA * LAM * (1.0 - done)
        A, Bp = reverse_affine(a, b)
        ma = jnp.where(last, A[:, 0] + Bp[:, 0] * boot, A[:, 0])
        mb = jnp.where(last, 0.0, Bp[:, 0])
        shifts = (1,) if bug == "one-doubling-round" else (1, 2)
        for s in shifts:
            perm = from_left(n, s) if bug == "doubling-from-left" else from_right(n, s)
            ra, rb = ppermute(ma, "sp", perm), ppermute(mb, "sp", perm)
            ma, mb = ma + mb * ra, mb * rb
        if bug == "own-start-as-carry":
            g_in = jnp.where(last, boot, ma)
        else:
            g_in = jnp.where(last, boot, ppermute(ma, "sp", from_right(n)))
        ret = A + Bp * g_in[:, None]
        return ret, ret - val
    return f


C.smap("s.td_lambda_recursive_doubling.sp4", {"sp": 4}, td_lambda_sp, (P(None, "sp"),) * 3 + (P(),),
       (P(None, "sp"), P(None, "sp")), td_lambda, (R(B, T), R(B, T), dones(B, T, p=0.05), R(B)),
       bugs=[("one-doubling-round", ["wrong-offset"]), ("doubling-from-left", ["wrong-permutation"]),
             ("own-start-as-carry", ["wrong-offset"])])


# ---------------------------------------------------------------------------
# 5. 3-step returns with dones crossing device boundaries, time over sp4.
NS = 3


def nstep(rew, done, val, t_rew, t_done, t_val):
    r = jnp.concatenate([rew, t_rew], 1)
    d = jnp.concatenate([done, t_done], 1)
    v = jnp.concatenate([val, t_val], 1)
    tl = rew.shape[1]
    g = jnp.zeros_like(rew)
    alive = jnp.ones_like(rew)
    for k in range(NS):
        g = g + (GAMMA ** k) * alive * r[:, k:k + tl]
        alive = alive * (1.0 - d[:, k:k + tl])
    g = g + (GAMMA ** NS) * alive * v[:, NS:NS + tl]
    return g, jnp.mean(jnp.square(val - g))


def nstep_sp(bug):
    def f(rew, done, val, t_rew, t_done, t_val):
        n, me = 4, idx("sp")
        perm = from_left(n) if bug == "halo-from-left" else from_right(n)
        halo = ppermute(jnp.stack([rew[:, :NS], done[:, :NS], val[:, :NS]]), "sp", perm)
        halo = jnp.where(me == n - 1, jnp.stack([t_rew, t_done, t_val]), halo)
        h_done = jnp.zeros_like(halo[1]) if bug == "halo-dones-dropped" else halo[1]
        r = jnp.concatenate([rew, halo[0]], 1)
        d = jnp.concatenate([done, h_done], 1)
        v = jnp.concatenate([val, halo[2]], 1)
        tl = rew.shape[1]
        ks = jnp.arange(NS)
        # the window as gathered slices: (b, tl, NS)
        win = jnp.arange(tl)[:, None] + ks[None, :]
        rw, dw = r[:, win], d[:, win]
        alive = jnp.cumprod(1.0 - dw, -1)
        alive_before = jnp.concatenate([jnp.ones_like(alive[..., :1]), alive[..., :-1]], -1)
        g = jnp.einsum("btk,k->bt", alive_before * rw, GAMMA ** ks.astype(jnp.float32))
        g = g + GAMMA ** NS * alive[..., -1] * v[:, NS:NS + tl]
        loss = jnp.mean(jnp.square(val - g))
        if bug != "loss-local-mean":
            loss = pmean(loss, "sp")
        return g, loss
    return f


C.smap("s.nstep_returns_halo_dones.sp4", {"sp": 4}, nstep_sp, (P(None, "sp"),) * 3 + (P(),) * 3,
       (P(None, "sp"), P()), nstep,
       (R(B, T), dones(B, T, p=0.3), R(B, T), R(B, NS), dones(B, NS, p=0.3), R(B, NS)),
       bugs=[("halo-from-left", ["wrong-permutation"]), ("halo-dones-dropped", ["wrong-offset"]),
             ("loss-local-mean", ["missing-collective"])])


# ---------------------------------------------------------------------------
# 6. PPO loss with masked global advantage normalisation over dp2 x sp4,
#    and its gradient (check_vma=True).
PD, PA, PB, PT, CLIP, ENT, VF = 6, 5, 4, 8, 0.2, 0.01, 0.5


def ppo_terms(p, obs, act, old_logp, adv_n, ret, mask):
    logits = obs @ p["w"] + p["b"]
    logp_all = jax.nn.log_softmax(logits)
    logp = jnp.take_along_axis(logp_all, act[..., None], -1)[..., 0]
    ratio = jnp.exp(logp - old_logp)
    pg = -jnp.minimum(ratio * adv_n, jnp.clip(ratio, 1 - CLIP, 1 + CLIP) * adv_n)
    v = obs @ p["wv"]
    vf = jnp.square(v - ret)
    ent = -jnp.sum(jnp.exp(logp_all) * logp_all, -1)
    return jnp.sum(mask * (pg + VF * vf - ENT * ent))


def ppo_masked(p, obs, act, old_logp, adv, ret, mask):
    cnt = mask.sum()
    mu = (mask * adv).sum() / cnt
    var = (mask * jnp.square(adv - mu)).sum() / cnt
    adv_n = (adv - mu) / (jnp.sqrt(var) + 1e-8)
    return jax.value_and_grad(lambda p: ppo_terms(p, obs, act, old_logp, adv_n, ret, mask) / cnt)(p)


def ppo_masked_sharded(bug):
    def f(p, obs, act, old_logp, adv, ret, mask):
        ax = "sp" if bug == "stats-over-sp-only" else ("dp", "sp")
        cnt = psum(mask.sum(), ax)
        mu = psum((mask * adv).sum(), ax) / cnt
        var = psum((mask * jnp.square(adv - mu)).sum(), ax) / cnt
        adv_n = (adv - mu) / (jnp.sqrt(var) + 1e-8)

        def loss(p):
            s = ppo_terms(p, obs, act, old_logp, adv_n, ret, mask)
            if bug == "pmean-of-local-means":
                return pmean(s / mask.sum(), ("dp", "sp"))
            return psum(s, ("dp", "sp")) / psum(mask.sum(), ("dp", "sp"))
        lv, g = jax.value_and_grad(loss)(p)
        if bug == "grad-psummed-again":
            g = jax.tree.map(lambda x: psum(x, ("dp", "sp")), g)
        return lv, g
    return f


pp_p = {"w": R(PD, PA, scale=0.5), "b": R(PA, scale=0.1), "wv": R(PD, scale=0.5)}
pp_rep = {k: P() for k in pp_p}
pp_mask = (rng.random((PB, PT)) < 0.7).astype(np.float32)
pp_mask[:, :2] = 1.0
pp_old = R(PB, PT, scale=0.3) - 1.6
C.smap("s.ppo_masked_global_advnorm_grad.dp2xsp4", {"dp": 2, "sp": 4}, ppo_masked_sharded,
       (pp_rep, P("dp", "sp"), P("dp", "sp"), SPD, SPD, SPD, SPD), (P(), pp_rep), ppo_masked,
       (pp_p, R(PB, PT, PD), I(0, PA, PB, PT), pp_old, R(PB, PT) + 0.5, R(PB, PT), pp_mask), check_vma=True,
       bugs=[("stats-over-sp-only", ["wrong-axis"]), ("pmean-of-local-means", ["wrong-scale"]),
             ("grad-psummed-again", ["wrong-scale"])])


# ---------------------------------------------------------------------------
# 7. vocabulary-parallel action head, entropy bonus, value_and_grad of the
#    sharded head (check_vma=True).
VA, VD, VBt, BETA = 32, 8, 8, 0.05


def head_loss(w, b, h, act, old_logp, adv):
    def loss(w, b):
        lg = h @ w + b
        lp = jax.nn.log_softmax(lg)
        logp = jnp.take_along_axis(lp, act[:, None], -1)[:, 0]
        ent = -jnp.sum(jnp.exp(lp) * lp, -1)
        ratio = jnp.exp(logp - old_logp)
        surr = jnp.minimum(ratio * adv, jnp.clip(ratio, 1 - CLIP, 1 + CLIP) * adv)
        return jnp.mean(-surr - BETA * ent)
    lv, (gw, gb) = jax.value_and_grad(loss, (0, 1))(w, b)
    return lv, gw, gb


def head_loss_tp(bug):
    def f(w, b, h, act, old_logp, adv):
        def loss(w, b):
            al = w.shape[1]
            lg = jnp.dot(h, w) + b
            m = pmax(lax.stop_gradient(jnp.max(lg, -1)), "tp")
            s = psum(jnp.sum(jnp.exp(lg - m[:, None]), -1), "tp")
            logz = m + jnp.log(s)
            off = idx("tp") * al if bug != "onehot-without-tp-offset" else 0
            oh = jax.nn.one_hot(act - off, al, dtype=lg.dtype)
            logp = psum(jnp.sum(oh * lg, -1), "tp") - logz
            p = jnp.exp(lg - logz[:, None])
            e_lg = jnp.sum(p * lg, -1)
            if bug != "entropy-not-psummed":
                e_lg = psum(e_lg, "tp")
            ent = logz - e_lg
            ratio = jnp.exp(logp - old_logp)
            surr = jnp.minimum(ratio * adv, jnp.clip(ratio, 1 - CLIP, 1 + CLIP) * adv)
            l = jnp.mean(-surr - BETA * ent)
            if bug == "entropy-not-psummed":  # tp-varying now: averaged over tp to get past check_vma
                return pmean(l, ("dp", "tp"))
            return pmean(l, "dp")
        lv, (gw, gb) = jax.value_and_grad(loss, (0, 1))(w, b)
        return lv, gw, gb
    return f


C.smap("s.vocab_parallel_action_head_entropy_grad.dp2xtp4", {"dp": 2, "tp": 4}, head_loss_tp,
       (P(None, "tp"), P("tp"), P("dp"), P("dp"), P("dp"), P("dp")), (P(), P(None, "tp"), P("tp")), head_loss,
       (R(VD, VA, scale=0.6), R(VA, scale=0.2), R(VBt, VD), I(0, VA, VBt), R(VBt, scale=0.3) - 3.2, R(VBt)),
       check_vma=True,
       bugs=[("onehot-without-tp-offset", ["wrong-offset"]), ("entropy-not-psummed", ["missing-collective"])])


# ---------------------------------------------------------------------------
# 8. a full actor-critic update step under dp2 x tp4 with optax.adam.
AD, AH, AA, AB, AT = 6, 16, 4, 4, 6
ac_opt = optax.adam(1e-2)


def ac_gae(rew, val, done, boot):
    nxt = jnp.concatenate([val[:, 1:], boot[:, None]], 1)
    delta = rew + GAMMA * (1.0 - done) * nxt - val
    adv, _ = reverse_affine(delta, GAMMA * LAM * (1.0 - done))
    return adv, adv + val


def ac_loss_terms(logits, v, boot_v, act, rew, done, stats):
    adv, ret = ac_gae(rew, lax.stop_gradient(v), done, lax.stop_gradient(boot_v))
    mu, var = stats(adv)
    adv = (adv - mu) / jnp.sqrt(var + 1e-6)
    lp = jax.nn.log_softmax(logits)
    logp = jnp.take_along_axis(lp, act[..., None], -1)[..., 0]
    ent = -jnp.sum(jnp.exp(lp) * lp, -1)
    return jnp.mean(-logp * adv + 0.5 * jnp.square(v - ret) - 0.01 * ent)


def ac_step(p, st, obs, boot_obs, act, rew, done):
    def loss(p):
        h = jnp.tanh(obs @ p["w1"] + p["b1"])
        hb = jnp.tanh(boot_obs @ p["w1"] + p["b1"])
        logits = h @ p["wpi"] + p["bpi"]
        v, bv = h @ p["wv"] + p["bv"], hb @ p["wv"] + p["bv"]

        def stats(a):
            mu = a.mean()
            return mu, jnp.square(a - mu).mean()
        return ac_loss_terms(logits, v, bv, act, rew, done, stats)
    lv, g = jax.value_and_grad(loss)(p)
    u, st = ac_opt.update(g, st, p)
    return optax.apply_updates(p, u), st, lv


def ac_step_sharded(bug):
    def f(p, st, obs, boot_obs, act, rew, done):
        def loss(p):
            h = jnp.tanh(obs @ p["w1"] + p["b1"])
            hb = jnp.tanh(boot_obs @ p["w1"] + p["b1"])
            if bug == "bias-inside-psum":
                logits = psum(h @ p["wpi"] + p["bpi"], "tp")
            else:
                logits = psum(h @ p["wpi"], "tp") + p["bpi"]
            v = psum(h @ p["wv"], "tp") + p["bv"]
            bv = psum(hb @ p["wv"], "tp") + p["bv"]

            def stats(a):
                if bug == "adv-stats-local":
                    mu = a.mean()
                    return mu, jnp.square(a - mu).mean()
                mu = pmean(a.mean(), "dp")
                return mu, pmean(jnp.square(a - mu).mean(), "dp")
            l = ac_loss_terms(logits, v, bv, act, rew, done, stats)
            return psum(l, "dp") if bug == "loss-psum-over-dp" else pmean(l, "dp")
        lv, g = jax.value_and_grad(loss)(p)
        u, st = ac_opt.update(g, st, p)
        return optax.apply_updates(p, u), st, lv
    return f


ac_p = {"w1": R(AD, AH, scale=0.4), "b1": R(AH, scale=0.1), "wpi": R(AH, AA, scale=0.4), "bpi": R(AA, scale=0.1),
        "wv": R(AH, scale=0.4), "bv": np.float32(0.2)}
ac_spec = {"w1": P(None, "tp"), "b1": P("tp"), "wpi": P("tp", None), "bpi": P(), "wv": P("tp"), "bv": P()}
ac_st = np_tree(ac_opt.init(ac_p))
ac_st_spec = state_specs(ac_st, ac_spec)
ac_batch = (R(AB, AT, AD), R(AB, AD), I(0, AA, AB, AT), R(AB, AT), dones(AB, AT, p=0.1))
C.smap("s.actor_critic_adam_step_megatron.dp2xtp4", {"dp": 2, "tp": 4}, ac_step_sharded,
       (ac_spec, ac_st_spec) + (P("dp"),) * 5, (ac_spec, ac_st_spec, P()), ac_step, (ac_p, ac_st) + ac_batch,
       check_vma=True,
       bugs=[("adv-stats-local", ["missing-all-reduce"]), ("bias-inside-psum", ["wrong-scale"]),
             ("loss-psum-over-dp", ["wrong-collective-op"])])

# ---------------------------------------------------------------------------
# 9. GAE the lazy way, envs over dp2 and time over sp4: every device
#    all_gathers the whole rollout of its envs along sp (tiled), runs GAE on
#    the full time axis redundantly and keeps its own block by dynamic_slice.
def gae_gathered(bug):
    def f(rew, val, done, boot):
        tl = rew.shape[1]
        ax = "dp" if bug == "gather-over-dp" else "sp"
        full = [lax.all_gather(a, ax, axis=1, tiled=True) for a in (rew, val, done)]
        adv, ret = gae(*full, boot)
        start = 0 if bug == "own-block-at-offset-zero" else idx("sp") * tl
        take = lambda a: lax.dynamic_slice_in_dim(a, start, tl, axis=1)
        return take(adv), take(ret)
    return f


C.smap("s.gae_allgather_time_redundant.dp2xsp4", {"dp": 2, "sp": 4}, gae_gathered, (SPD,) * 3 + (P("dp"),), (SPD, SPD),
       gae, (R(B, T), R(B, T), dones(B, T), R(B)),
       bugs=[("own-block-at-offset-zero", ["wrong-offset"]), ("gather-over-dp", ["wrong-axis"])])


# ---------------------------------------------------------------------------
# 10. discrete soft actor-critic targets, actions over tp4 (16), envs over
#     dp2: the soft state value alpha * logsumexp(Q / alpha) of the next
#     state across tp; the target r + gamma (1 - d) V,
#     the policy's entropy from the same distributed log-softmax, and the
#     critic's squared error at the taken action pmean'd over dp.
ALPHA = 0.5


def soft_targets(q, q_next, act, rew, done):
    v_next = ALPHA * jax.nn.logsumexp(q_next / ALPHA, -1)
    y = rew + GAMMA * (1.0 - done) * v_next
    lp = jax.nn.log_softmax(q / ALPHA, -1)
    ent = -jnp.sum(jnp.exp(lp) * lp, -1)
    q_a = jnp.take_along_axis(q, act[:, None], -1)[:, 0]
    return y, ent, jnp.mean(jnp.square(q_a - y))


def soft_targets_tp(bug):
    def f(q, q_next, act, rew, done):
        al = q.shape[-1]

        def lse(x):
            m = jnp.max(x, -1)
            if bug != "local-max-in-lse":
                m = pmax(m, "tp")
            return jnp.log(psum(jnp.sum(jnp.exp(x - m[:, None]), -1), "tp")) + m
        v_next = ALPHA * lse(q_next / ALPHA)
        y = rew + GAMMA * (1.0 - done) * v_next
        if bug == "target-psummed":
            y = psum(y, "tp")
        x = q / ALPHA
        lz = lse(x)
        ent = lz - psum(jnp.sum(jnp.exp(x - lz[:, None]) * x, -1), "tp")
        sel = jnp.arange(al) + idx("tp") * al == act[:, None]
        q_a = psum(jnp.where(sel, q, 0.0).sum(-1), "tp")
        return y, ent, pmean(jnp.mean(jnp.square(q_a - y)), "dp")
    return f


C.smap("s.soft_ac_targets_action_tp.dp2xtp4", {"dp": 2, "tp": 4}, soft_targets_tp,
       (P("dp", "tp"), P("dp", "tp"), P("dp"), P("dp"), P("dp")), (P("dp"), P("dp"), P()), soft_targets,
       (R(8, RA), R(8, RA), I(0, RA, 8), R(8), dones(8, p=0.2)),
       bugs=[("local-max-in-lse", ["missing-collective"]), ("target-psummed", ["wrong-scale"])])


# ---------------------------------------------------------------------------
# GSPMD pairs.
# 11. V-trace of 2. with time over sp4.
C.gspmd("g.vtrace_time_sharded.sp4", {"sp": 4}, (P(None, "sp"),) * 5 + (P(),), (P(None, "sp"), P(None, "sp")),
        vtrace, vt_args)


# 12. 3-step returns and TD(lambda) returns on dp2 x sp4.
def both_returns(rew, done, val, t_rew, t_done, t_val):
    g3, l3 = nstep(rew, done, val, t_rew, t_done, t_val)
    gl, _ = td_lambda(rew, val, done, t_val[:, 0])
    return g3, gl, l3 + jnp.mean(jnp.square(gl - val))


C.gspmd("g.nstep_and_td_lambda_returns.dp2xsp4", {"dp": 2, "sp": 4}, (SPD,) * 3 + (P("dp"),) * 3, (SPD, SPD, P()),
        both_returns, (R(B, T), dones(B, T, p=0.2), R(B, T), R(B, NS), dones(B, NS, p=0.2), R(B, NS)))

# 13. Retrace with actions over tp4, envs over dp2.
Q3 = P("dp", None, "tp")
C.gspmd("g.retrace_actions_tp.dp2xtp4", {"dp": 2, "tp": 4}, (Q3, Q3, P("dp"), P("dp"), P("dp"), P("dp")),
        (P("dp"), P()), retrace, (R(4, RT, RA), R(4, RT, RA), rt_mu, I(0, RA, 4, RT), R(4, RT), dones(4, RT, p=0.1)))

# 14. actor-critic step with Nesterov SGD, Megatron-sharded weights.
sgd_opt = optax.sgd(5e-2, momentum=0.9, nesterov=True)


def ac_sgd_step(p, st, obs, boot_obs, act, rew, done):
    def loss(p):
        h = jax.nn.relu(jnp.einsum("btd,dh->bth", obs, p["w1"]) + p["b1"])
        hb = jax.nn.relu(boot_obs @ p["w1"] + p["b1"])
        logits = jnp.einsum("bth,ha->bta", h, p["wpi"]) + p["bpi"]
        v, bv = jnp.einsum("bth,h->bt", h, p["wv"]) + p["bv"], hb @ p["wv"] + p["bv"]

        def stats(a):
            mu = a.mean()
            return mu, a.var()
        return ac_loss_terms(logits, v, bv, act, rew, done, stats)
    lv, g = jax.value_and_grad(loss)(p)
    u, st = sgd_opt.update(g, st, p)
    return optax.apply_updates(p, u), st, lv


sg_st = np_tree(sgd_opt.init(ac_p))
sg_st_spec = state_specs(sg_st, ac_spec)
C.gspmd("g.actor_critic_nesterov_megatron.dp2xtp4", {"dp": 2, "tp": 4}, (ac_spec, sg_st_spec) + (P("dp"),) * 5,
        (ac_spec, sg_st_spec, P()), ac_sgd_step, (ac_p, sg_st) + ac_batch)

C.finish()
