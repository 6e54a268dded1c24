"""samples/fresh23: DOCSTRING
"""
import sys
import numpy as np
import jax, jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec as P
import optax
sys.path.insert(0, "samples/gen")  # run from the repository root (run_fresh23.sh)
from fresh_lib import Corpus, seeded, mse, np_tree, state_specs  # noqa: E402

SCRIPT = "samples/gen/fresh23.py"
C = Corpus("samples/fresh23", SCRIPT, "samples/gen/run_fresh23.sh", sys.argv[1:])
rng, R, I = seeded(2323)
psum, pmean, idx = lax.psum, lax.pmean, lax.axis_index


def nsp(ax="sp"):
    return lax.axis_size(ax)


def chain(n, step=1, cyclic=False):
    """ppermute pairs i -> i + step (negative step: towards lower indices)."""
    return [(i, (i + step) % n) for i in range(n) if cyclic or 0 <= i + step < n]


# ---------------------------------------------------------------------------
# 1. Mamba-2 SSD, chunked form with one chunk per device: a scalar decay per
#    head (dt * A), inside the shard the quadratic "attention" form with
#    L = exp(segsum), each device's final state and total log decay
#    all_gathered, the exclusive prefix over devices by lax.associative_scan
#    of (log decay, state) pairs, then the off-diagonal term C exp(cum) h_in.
SSD_B, SSD_T, SSD_H, SSD_P, SSD_N = 2, 32, 2, 4, 8


def ssd_ref(x, dt, A, Bm, Cm):
    """x (b, t, h, p), dt (b, t, h) > 0, A (h) < 0, B / C (b, t, n): the recurrence."""
    def step(h, inp):
        xt, dtt, bt, ct = inp
        h = jnp.exp(dtt * A)[:, :, None, None] * h + jnp.einsum("bh,bhp,bn->bhpn", dtt, xt, bt)
        return h, jnp.einsum("bhpn,bn->bhp", h, ct)
    h0 = jnp.zeros((x.shape[0], x.shape[2], x.shape[3], Bm.shape[-1]), x.dtype)
    _, y = lax.scan(step, h0, (jnp.moveaxis(x, 1, 0), jnp.moveaxis(dt, 1, 0), jnp.moveaxis(Bm, 1, 0),
                               jnp.moveaxis(Cm, 1, 0)))
    return jnp.moveaxis(y, 0, 1)


def segsum(a):
    """a (..., t) -> (..., t, t): sum of a[j+1..i] below the diagonal, -inf above."""
    t = a.shape[-1]
    c = jnp.cumsum(a, -1)
    s = c[..., :, None] - c[..., None, :]
    return jnp.where(np.tril(np.ones((t, t), bool)), s, -jnp.inf)


def ssd_sp(bug):
    def f(x, dt, A, Bm, Cm):
        a = jnp.moveaxis(dt * A, 1, -1)                         # (b, h, t) log decays
        L = jnp.exp(segsum(a))                                   # (b, h, t, t)
        y = jnp.einsum("btn,bsn,bhts,bsh,bshp->bthp", Cm, Bm, L, dt, x)
        cum = jnp.cumsum(a, -1)
        tot = cum[..., -1]                                       # (b, h)
        st = jnp.einsum("bhs,bsh,bshp,bsn->bhpn", jnp.exp(tot[..., None] - cum), dt, x, Bm)
        g_tot = lax.all_gather(tot, "sp")                         # (n, b, h)
        g_st = lax.all_gather(st, "sp")                           # (n, b, h, p, n)

        def comb(l, r):
            return l[0] + r[0], jnp.exp(r[0])[..., None, None] * l[1] + r[1]
        _, inc = lax.associative_scan(comb, (g_tot, g_st))
        exc = jnp.concatenate([jnp.zeros_like(inc[:1]), inc[:-1]])
        h_in = (inc if bug == "inclusive-prefix" else exc)[idx("sp")]
        decay_in = jnp.exp(cum)
        if bug == "decay-twice":
            decay_in = decay_in * jnp.exp(tot)[..., None]
        return y + jnp.einsum("btn,bht,bhpn->bthp", Cm, decay_in, h_in)
    return f


ssd_args = (R(SSD_B, SSD_T, SSD_H, SSD_P), jax.nn.softplus(R(SSD_B, SSD_T, SSD_H)) * 0.5,
            -np.exp(R(SSD_H, scale=0.3)), R(SSD_B, SSD_T, SSD_N, scale=0.5), R(SSD_B, SSD_T, SSD_N, scale=0.5))
C.smap("s.mamba2_ssd_chunk_per_device_assoc_prefix.sp4", {"sp": 4}, ssd_sp,
       (P(None, "sp"), P(None, "sp"), P(), P(None, "sp"), P(None, "sp")), P(None, "sp"), ssd_ref, ssd_args,
       bugs=[("inclusive-prefix", ["wrong-offset"]), ("decay-twice", ["numerics"])])


# ---------------------------------------------------------------------------
# 2. Griffin's RG-LRU in log space: log a_t = -8 r_t softplus(lambda), the
#    input scaled by sqrt(1 - a_t^2); inside the shard a lax.associative_scan
#    of (log a, b) pairs, across devices a Hillis-Steele scan of the shard
#    summaries by ppermutes i -> i + 1, 2, 4 (devices below the hop keep
#    theirs), then one more hop to make it exclusive.
LR_B, LR_T, LR_D = 2, 32, 8


def rglru_gates(x, wa, wx, lam):
    r = jax.nn.sigmoid(x @ wa)
    i = jax.nn.sigmoid(x @ wx)
    log_a = -8.0 * r * jax.nn.softplus(lam)
    b = jnp.sqrt(1 - jnp.exp(2 * log_a)) * (i * x)
    return log_a, b


def rglru_ref(x, wa, wx, lam):
    log_a, b = rglru_gates(x, wa, wx, lam)

    def step(h, ab):
        h = jnp.exp(ab[0]) * h + ab[1]
        return h, h
    _, hs = lax.scan(step, jnp.zeros((x.shape[0], x.shape[2])), (jnp.swapaxes(log_a, 0, 1), jnp.swapaxes(b, 0, 1)))
    return jnp.swapaxes(hs, 0, 1)


def lin_comb(l, r):
    return l[0] + r[0], jnp.exp(r[0]) * l[1] + r[1]


def rglru_sp(bug):
    def f(x, wa, wx, lam):
        log_a, b = rglru_gates(x, wa, wx, lam)
        cla, hl = lax.associative_scan(lin_comb, (log_a, b), axis=1)
        n, i = nsp(), idx("sp")
        la, h = cla[:, -1], hl[:, -1]
        d = 1
        while d < n:
            step = -d if bug == "hops-from-above" else d
            la_r = lax.ppermute(la, "sp", chain(n, step))
            h_r = lax.ppermute(h, "sp", chain(n, step))
            has = (i >= d) if step > 0 else (i < n - d)
            if bug == "combine-swapped":
                la, h = jnp.where(has, la_r + la, la), jnp.where(has, jnp.exp(la_r) * h + h_r, h)
            else:
                la, h = jnp.where(has, la_r + la, la), jnp.where(has, jnp.exp(la) * h_r + h, h)
            d *= 2
        h_in = lax.ppermute(h, "sp", chain(n, 1))
        return hl + jnp.exp(cla) * h_in[:, None]
    return f


C.smap("s.rglru_logspace_hillis_steele_carry.sp8", {"sp": 8}, rglru_sp, (P(None, "sp"), P(), P(), P()),
       P(None, "sp"), rglru_ref,
       (R(LR_B, LR_T, LR_D), R(LR_D, LR_D, scale=0.5), R(LR_D, LR_D, scale=0.5), R(LR_D) - 1.0),
       bugs=[("combine-swapped", ["numerics"]), ("hops-from-above", ["wrong-permutation"])])


# ---------------------------------------------------------------------------
# 3. RWKV channel mix (bf16) with token shift across the device boundary: the
#    last token of each shard goes to the next device by a non-cyclic
#    ppermute (device 0 sees zeros, as the unsharded jnp.pad does); the
#    shifted input lerped by mu_k / mu_r, squared-ReLU key, sigmoid
#    receptance. Batch over dp.
RW_B, RW_T, RW_D, RW_F = 4, 32, 16, 32


def token_shift(x):
    return jnp.pad(x, ((0, 0), (1, 0), (0, 0)))[:, :-1]


def rwkv_cmix(x, mu_k, mu_r, wk, wv, wr):
    xx = token_shift(x) - x
    xk, xr = x + xx * mu_k, x + xx * mu_r
    k = jnp.square(jax.nn.relu(xk @ wk))
    return jax.nn.sigmoid(xr @ wr) * (k @ wv)


def rwkv_cmix_sp(bug):
    def f(x, mu_k, mu_r, wk, wv, wr):
        n = nsp()
        last = x[:, -1:]
        if bug == "shift-from-next":
            prev = lax.ppermute(x[:, :1], "sp", chain(n, -1))
        else:
            prev = lax.ppermute(last, "sp", chain(n, 1, cyclic=bug == "cyclic-shift"))
        xx = jnp.concatenate([prev, x[:, :-1]], 1) - x
        xk, xr = x + xx * mu_k, x + xx * mu_r
        k = jnp.square(jax.nn.relu(xk @ wk))
        return jax.nn.sigmoid(xr @ wr) * (k @ wv)
    return f


bf = jnp.bfloat16
C.smap("s.rwkv_channel_mix_token_shift_bf16.dp2xsp4", {"dp": 2, "sp": 4}, rwkv_cmix_sp,
       (P("dp", "sp"), P(), P(), P(), P(), P()), P("dp", "sp"), rwkv_cmix,
       (R(RW_B, RW_T, RW_D, dt=bf), jax.nn.sigmoid(R(RW_D)).astype(bf), jax.nn.sigmoid(R(RW_D)).astype(bf),
        R(RW_D, RW_F, scale=0.3, dt=bf), R(RW_F, RW_D, scale=0.2, dt=bf), R(RW_D, RW_D, scale=0.3, dt=bf)),
       bugs=[("shift-from-next", ["wrong-permutation"]), ("cyclic-shift", ["wrong-permutation"])])


# ---------------------------------------------------------------------------
# 4. Gated linear attention (GLA) with a data-dependent decay per key channel
#    (log g = logsigmoid / 16), heads over tp, sequence over sp: inside the
#    shard the parallel form with q exp(G) and k exp(-G), each device's state
#    and total log gate all_gathered over sp, the incoming state as the masked
#    sum over earlier devices j of exp(C_{i-1} - C_j) S_j (C: cumsum of the
#    gathered totals).
GL_B, GL_T, GL_H, GL_K, GL_V = 2, 32, 4, 4, 4


def gla_ref(q, k, v, lg):
    def step(S, inp):
        qt, kt, vt, gt = inp
        S = jnp.exp(gt)[..., None] * S + jnp.einsum("bhk,bhv->bhkv", kt, vt)
        return S, jnp.einsum("bhk,bhkv->bhv", qt, S)
    S0 = jnp.zeros((q.shape[0], q.shape[2], q.shape[3], v.shape[3]))
    _, o = lax.scan(step, S0, tuple(jnp.moveaxis(a, 1, 0) for a in (q, k, v, lg)))
    return jnp.moveaxis(o, 0, 1)


def gla_sp(bug):
    def f(q, k, v, lg):
        G = jnp.cumsum(lg, 1)                                   # (b, t, h, k)
        qg, kg = q * jnp.exp(G), k * jnp.exp(-G)
        t = q.shape[1]
        A = jnp.where(np.tril(np.ones((t, t), bool)), jnp.einsum("bthk,bshk->bhts", qg, kg), 0.0)
        o = jnp.einsum("bhts,bshv->bthv", A, v)
        tot = G[:, -1]                                           # (b, h, k)
        S = jnp.einsum("bshk,bshv->bhkv", k * jnp.exp(tot[:, None] - G), v)
        gt, gS = lax.all_gather(tot, "sp"), lax.all_gather(S, "sp")
        Cc = jnp.cumsum(gt, 0)
        i, n = idx("sp"), nsp()
        j = jnp.arange(n)
        ci = jnp.where(i > 0, Cc[i - 1], 0.0)
        if bug == "own-chunk-in-carry":
            use = j <= i
        elif bug == "carry-from-later":
            use = j > i
        else:
            use = j < i
        expo = ci[None] - Cc if bug != "carry-exponent-inclusive" else Cc[i][None] - Cc
        w = jnp.where(use[:, None, None, None], jnp.exp(jnp.where(use[:, None, None, None], expo, 0.0)), 0.0)
        h_in = jnp.einsum("nbhk,nbhkv->bhkv", w, gS)
        return o + jnp.einsum("bthk,bhkv->bthv", qg, h_in)
    return f


gl_lg = jax.nn.log_sigmoid(R(GL_B, GL_T, GL_H, GL_K) + 2.0) / 4
C.smap("s.gla_datadep_gate_masked_prefix.sp4xtp2", {"sp": 4, "tp": 2}, gla_sp,
       (P(None, "sp", "tp"),) * 4, P(None, "sp", "tp"), gla_ref,
       (R(GL_B, GL_T, GL_H, GL_K, scale=0.5), R(GL_B, GL_T, GL_H, GL_K, scale=0.5), R(GL_B, GL_T, GL_H, GL_V),
        np.asarray(gl_lg)),
       bugs=[("own-chunk-in-carry", ["wrong-offset"]), ("carry-from-later", ["wrong-permutation"]),
             ("carry-exponent-inclusive", ["numerics"])])


# ---------------------------------------------------------------------------
# 5. DeltaNet: S_t = (I - beta k k^T) S_{t-1} + beta k v^T, o_t = S_t^T q_t
#    with l2-normalised keys. The carried state is an affine map of the
#    incoming one, S_out = M S_in + B, so each device scans its shard for
#    (M, B) (a lax.scan from (I, 0)), all_gathers them and composes the
#    maps of the earlier devices in order (a python loop over the mesh),
#    then reruns its shard from the incoming state.
DN_B, DN_T, DN_H, DN_K = 2, 16, 2, 4


def dn_inputs(q, k, beta):
    k = k / jnp.linalg.norm(k, axis=-1, keepdims=True)
    return q, k, jax.nn.sigmoid(beta)


def dn_scan(S0, q, k, v, beta):
    def step(S, inp):
        qt, kt, vt, bt = inp
        S = S - bt[..., None, None] * jnp.einsum("bhk,bhj,bhjv->bhkv", kt, kt, S) \
            + bt[..., None, None] * jnp.einsum("bhk,bhv->bhkv", kt, vt)
        return S, jnp.einsum("bhkv,bhk->bhv", S, qt)
    S, o = lax.scan(step, S0, tuple(jnp.moveaxis(a, 1, 0) for a in (q, k, v, beta)))
    return S, jnp.moveaxis(o, 0, 1)


def deltanet_ref(q, k, v, beta):
    q, k, beta = dn_inputs(q, k, beta)
    S0 = jnp.zeros((q.shape[0], q.shape[2], q.shape[3], v.shape[3]))
    return dn_scan(S0, q, k, v, beta)[1]


def deltanet_sp(bug):
    def f(q, k, v, beta):
        q, k, beta = dn_inputs(q, k, beta)
        b, _, h, dk = k.shape

        def mstep(M, inp):
            kt, bt = inp
            return M - bt[..., None, None] * jnp.einsum("bhk,bhj,bhjm->bhkm", kt, kt, M), None
        eye = jnp.broadcast_to(jnp.eye(dk), (b, h, dk, dk))
        M, _ = lax.scan(mstep, eye, (jnp.moveaxis(k, 1, 0), jnp.moveaxis(beta, 1, 0)))
        Bst, _ = dn_scan(jnp.zeros((b, h, dk, v.shape[3])), q, k, v, beta)
        gM, gB = lax.all_gather(M, "sp"), lax.all_gather(Bst, "sp")
        n, i = nsp(), idx("sp")
        s = jnp.zeros_like(Bst)
        ins = []
        for j in range(n):
            ins.append(s)
            if bug == "compose-transposed":
                s = jnp.einsum("bhjk,bhjv->bhkv", gM[j], s) + gB[j]
            else:
                s = jnp.einsum("bhkj,bhjv->bhkv", gM[j], s) + gB[j]
        ins = jnp.stack(ins)
        S_in = ins[jnp.minimum(i + 1, n - 1)] if bug == "incoming-of-next" else ins[i]
        return dn_scan(S_in, q, k, v, beta)[1]
    return f


C.smap("s.deltanet_affine_state_compose.sp4", {"sp": 4}, deltanet_sp, (P(None, "sp"),) * 4, P(None, "sp"),
       deltanet_ref, (R(DN_B, DN_T, DN_H, DN_K), R(DN_B, DN_T, DN_H, DN_K), R(DN_B, DN_T, DN_H, DN_K),
                      R(DN_B, DN_T, DN_H)),
       bugs=[("compose-transposed", ["wrong-reshape-order"]), ("incoming-of-next", ["wrong-offset"])])


# ---------------------------------------------------------------------------
# 6. causal linear attention ("Transformers are RNNs", elu + 1 features) with
#    its normaliser: the key-value state and the key sum z of every earlier
#    device reach it by a cyclic ring of ppermutes (n - 1 hops, a state kept
#    when its source is below the device).
LA_B, LA_T, LA_H, LA_E = 2, 32, 2, 8


def phi(x):
    return jax.nn.elu(x) + 1


def linattn_ref(q, k, v):
    q, k = phi(q), phi(k)
    t = q.shape[1]
    a = jnp.where(np.tril(np.ones((t, t), bool)), jnp.einsum("bthe,bshe->bhts", q, k), 0.0)
    return jnp.einsum("bhts,bshv->bthv", a, v) / jnp.sum(a, -1).transpose(0, 2, 1)[..., None]


def linattn_ring(bug):
    def f(q, k, v):
        q, k = phi(q), phi(k)
        t = q.shape[1]
        a = jnp.where(np.tril(np.ones((t, t), bool)), jnp.einsum("bthe,bshe->bhts", q, k), 0.0)
        num = jnp.einsum("bhts,bshv->bthv", a, v)
        den = jnp.sum(a, -1).transpose(0, 2, 1)
        S, z = jnp.einsum("bshe,bshv->bhev", k, v), jnp.sum(k, 1)
        n, i = nsp(), idx("sp")
        S_in, z_in = jnp.zeros_like(S), jnp.zeros_like(z)
        buf = (S, z)
        for step in range(1, n):
            buf = lax.ppermute(buf, "sp", chain(n, 1, cyclic=True))
            src = (i - step) % n
            keep = (src != i) if bug == "non-causal-sum" else (src < i)
            S_in = S_in + jnp.where(keep, buf[0], 0.0)
            z_in = z_in + jnp.where(keep, buf[1], 0.0)
        num = num + jnp.einsum("bthe,bhev->bthv", q, S_in)
        if bug != "z-not-carried":
            den = den + jnp.einsum("bthe,bhe->bth", q, z_in)
        return num / den[..., None]
    return f


C.smap("s.linear_attn_elu_ring_state_normaliser.sp4", {"sp": 4}, linattn_ring, (P(None, "sp"),) * 3,
       P(None, "sp"), linattn_ref, (R(LA_B, LA_T, LA_H, LA_E), R(LA_B, LA_T, LA_H, LA_E), R(LA_B, LA_T, LA_H, LA_E)),
       bugs=[("z-not-carried", ["missing-collective"]), ("non-causal-sum", ["wrong-offset"])])

# PART2

# ---------------------------------------------------------------------------
C.finish()
