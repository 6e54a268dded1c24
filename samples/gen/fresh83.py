"""samples/fresh83: an 83rd batch of programs as a user writes them, on the theme of linear-attention and recurrent LLM layers under sequence and tensor parallelism in current JAX / optax (RetNet retention, GLA, DeltaNet / gated delta rule, RWKV-5/6 time mixing, Hyena long convolutions by FFT, Based Taylor features, mLSTM, Lightning attention, their training steps), none of them an idiom of samples/fresh .. fresh26, probe, train or wild.
shard_map families (bugs in brackets):
 1. RetNet chunkwise retention, one chunk per device on sp4, the cross-chunk
    state handed down a python loop of n - 1 ppermute rounds (out = gamma^L
    inc + own state) [carry from the next device; the own chunk's state in
    the cross term; the cross decay gamma^n instead of gamma^(n+1)];
 2. RetNet multi-scale retention in parallel form on sp2 x tp4: heads over
    tp with the gammas sliced by the tp index, K/V all_gathered over sp, the
    decay mask from global query positions, GroupNorm per head, swish gate,
    row-parallel out projection [local query positions; gammas of the first
    head block; no psum after the out projection];
 3. GLA with data-dependent per-key-channel decays on sp4: (total log
    decay, state) all_gathered, an inclusive prefix by a python loop, the
    entry before mine taken [inclusive prefix; no decay across devices];
 4. gated delta rule, heads over tp2 x sequence over sp4: a token lax.scan
    from the incoming state, the shard rerun n - 1 times with its final
    state ppermuted down [no psum over tp; state sent up the chain; no
    incoming state];
 5. RWKV-6 time mixing (LoRA data-dependent decay, bonus u) on dp2 x sp4:
    token shift by a non-cyclic ppermute, the WKV state folded from the
    all_gathered (log decay sum, zero-start state) of earlier devices, the
    shard rescanned [shift ignores the previous device; shift from the next
    device; inclusive carry];
 6. Hyena long convolution by FFT on sp4: all_to_all to channels-sharded
    full sequences, a zero-padded causal rfft convolution with the device's
    filter columns, all_to_all back [filter of the first channels; circular
    FFT without padding; convolution within the shard];
 7. Based (2nd-order Taylor features) linear attention with a normaliser on
    dp2 x sp4, exclusive prefix = cumsum of the all_gathered sums - own
    [inclusive prefix; normaliser not carried; psum of all devices - own];
 8. Lightning-attention-style decayed linear attention on sp8, the incoming
    state a masked einsum of the all_gathered chunk states with weights
    lam^(L (i - 1 - j)) [states from later devices; cross decay with the
    global position where the local one is needed];
 9. a simple-GLA block's AdamW step on dp2 x tp4 (check_vma=True) [loss
    psum'd instead of pmean'd over dp];
10. a bf16 multi-scale retention decode step, heads (and state) over tp8
    [pmean for psum; state decayed twice];
11. mLSTM (exp input gate, max(|q.n|, 1) normaliser) on sp4, the (C, n)
    carry as a psum_scatter of per-destination decayed contributions
    [contribution to the own row; decay including the destination; no abs];
12. DeltaNet's 4-tap short causal conv with a 3-token ppermute halo on sp8
    [no halo; halo from the next device; halo of one token];
13. Hyena with an implicit filter evaluated at each device's global
    positions and all_gathered, the input all_gathered, own block kept
    (dp2 x sp4) [filter at local positions; keeps the first block];
14. an SGD-momentum step through the ppermute chain of 1. on dp2 x sp4
    (check_vma=True) [loss psum'd over sp; stop_gradient on the carry];
15. retention with states normalised to global position 0 (sum gamma^-m
    k v^T), the carry a plain exclusive lax.cumsum of the gathered states,
    read with gamma^t [local positions; reverse cumsum];
16. linear attention with grouped kv heads (8 q, 2 kv) as a scan, q heads
    over tp4, each device slicing its group's kv head, out projection by
    psum_scatter + all_gather [kv head of group 0; scatter without gather];
17. DeltaNet in chunked WY / UT form (lax.linalg.triangular_solve, lax.scan
    over chunks of 4), heads over tp4 x batch over dp2 [strict tril in the
    output; state from the uncorrected U; no psum over tp];
18. RetNet with two chunks per device in a lax.scan and the carry from a
    lax.associative_scan over the gathered (gamma^L, state) pairs, made
    exclusive with jnp.roll [no roll; combine operands swapped];
19. RWKV-5 time mixing with a bf16 output on sp4: token shift by a cyclic
    ppermute with device 0 masked, the carry by a lax.fori_loop of ppermute
    rounds [shift wraps around; one round short];
20. simple GLA on dp2 x sp4 with one psum per destination device
    [source <= destination; psum over dp];
21. GLA's fused RMSNorm over all heads (mean square psum'd over tp4), swish
    gate, row-parallel o_proj [mean square of local heads; divided by the
    local width];
22. bidirectional linear attention on sp4, a prefix from earlier and a
    suffix from later devices [backward state from earlier; forward state
    from later];
23. the backward pass of causal linear attention by hand on sp4 (baseline
    jax.vjp): prefix chain i -> i + 1, suffix chain i + 1 -> i [suffix from
    earlier devices; own chunk counted twice];
24. an SGD step of elu+1 linear attention on dp2 x sp4, check_vma=False,
    jax.grad through all_gather, grads psum'd over both axes by hand [psum
    over dp only];
25. causal linear attention entirely in bf16 on sp8 (agrees at bf16
    rounding only) [inclusive prefix].
GSPMD pairs (correct only): the token-level baselines of 1., 2., 3. (heads
over tp2), 4. (dp2 x tp2), 5., 6. (the FFT falls back to replicated), 7.,
8., 9.'s AdamW step, 10., 11., 12., 13., 14.'s SGD step, 15., 16., 17.
(token scan and WY form), 19. (bf16 out), 20., 21., 22., 23. (jax.vjp),
24. and 25. (bf16).
Numerics: correct shard_map pairs agree with their baselines at rounding
level (f32 within ~3e-5 on outputs of ~100; 25. within one bf16 ulp); bug
variants differ clearly (see "numerics" in the manifest). Drafts: 24.
first divided the summed gradients by B*T instead of B*T*E (a real bug in
the draft, not kept); 19.'s decay was first an input: the checker's random
log-decays made the one-round-short bug nearly invisible in bf16, so the
decays are now constants (w = 0.95, 0.87).
Run from the repository root: bash samples/gen/run_fresh83.sh [SUBSTR...]
"""
import sys
import numpy as np
import jax, jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec as P
import optax
sys.path.insert(0, "samples/gen")  # run from the repository root (run_fresh83.sh)
from fresh_lib import Corpus, seeded, state_specs  # noqa: E402

SCRIPT = "samples/gen/fresh83.py"
C = Corpus("samples/fresh83", SCRIPT, "samples/gen/run_fresh83.sh", sys.argv[1:])
rng, R, I = seeded(8383)
psum, pmean, idx = lax.psum, lax.pmean, lax.axis_index


def fwd(n):
    return [(i, i + 1) for i in range(n - 1)]  # i -> i + 1; device 0 receives zeros


def bwd(n):
    return [(i + 1, i) for i in range(n - 1)]  # i + 1 -> i; the last device receives zeros


def heads_norm(o, eps=1e-5):
    """GroupNorm with one group per head (RetNet / RWKV): o (..., H, e)."""
    m = o.mean(-1, keepdims=True)
    return (o - m) * lax.rsqrt(jnp.mean(jnp.square(o - m), -1, keepdims=True) + eps)


# ---------------------------------------------------------------------------
# 1. RetNet chunkwise retention, sequence over sp4, one chunk per device, the
#    cross-chunk state handed down a chain of ppermutes (n - 1 rounds).
B1, T1, D1, H1, E1 = 2, 32, 16, 4, 4
GAM1 = (1.0 - 2.0 ** (-np.arange(3, 3 + H1))).astype(np.float32)  # per-head decay


def retention_scan(x, wq, wk, wv, wo):
    q, k, v = (jnp.einsum("btd,dhe->bthe", x, w) for w in (wq, wk, wv))
    g = jnp.asarray(GAM1)[None, :, None, None]

    def step(S, t):
        qt, kt, vt = t
        S = g * S + jnp.einsum("bhk,bhv->bhkv", kt, vt)
        return S, jnp.einsum("bhk,bhkv->bhv", qt, S)
    S0 = jnp.zeros((x.shape[0], H1, E1, E1), x.dtype)
    _, o = lax.scan(step, S0, tuple(jnp.moveaxis(a, 1, 0) for a in (q, k, v)))
    return jnp.einsum("bthe,hed->btd", jnp.moveaxis(o, 0, 1), wo)


def retention_chunk_sp(bug):
    n = 4

    def f(x, wq, wk, wv, wo):
        q, k, v = (jnp.einsum("btd,dhe->bthe", x, w) for w in (wq, wk, wv))
        L = x.shape[1]
        t = jnp.arange(L, dtype=jnp.float32)
        lg = jnp.log(jnp.asarray(GAM1))                             # (H,)
        diff = t[:, None] - t[None, :]
        dec = jnp.where(diff >= 0, jnp.exp(lg[:, None, None] * jnp.maximum(diff, 0)), 0.0)  # (H, L, L)
        a = jnp.einsum("bnhk,bmhk->bhnm", q, k) * dec
        o = jnp.einsum("bhnm,bmhv->bnhv", a, v)
        kdec = jnp.exp(lg[None, :] * (L - 1 - t)[:, None])          # (L, H)
        s_loc = jnp.einsum("bmhk,mh,bmhv->bhkv", k, kdec, v)
        gl = jnp.exp(lg * L)[None, :, None, None]
        inc = jnp.zeros_like(s_loc)
        for _ in range(n - 1):
            out = gl * inc + s_loc
            inc = lax.ppermute(out, "sp", bwd(n) if bug == "carry-from-next" else fwd(n))
        if bug == "state-includes-own-chunk":
            inc = gl * inc + s_loc
        if bug == "stop-gradient-on-carry":
            inc = lax.stop_gradient(inc)
        p = t if bug == "cross-decay-off-by-one" else t + 1
        qdec = jnp.exp(lg[None, :] * p[:, None])                     # (L, H)
        o = o + jnp.einsum("bnhk,nh,bhkv->bnhv", q, qdec, inc)
        return jnp.einsum("bthe,hed->btd", o, wo)
    return f


ARGS1 = (R(B1, T1, D1), R(D1, H1, E1, scale=0.3), R(D1, H1, E1, scale=0.3), R(D1, H1, E1, scale=0.3),
         R(H1, E1, D1, scale=0.3))
C.smap("s.retnet_chunkwise_ppermute_chain.sp4", {"sp": 4}, retention_chunk_sp, (P(None, "sp"),) + (P(),) * 4,
       P(None, "sp"), retention_scan, ARGS1,
       bugs=[("carry-from-next", ["wrong-permutation"]), ("state-includes-own-chunk", ["wrong-offset"]),
             ("cross-decay-off-by-one", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 2. RetNet multi-scale retention, parallel form: sequence over sp2, heads
#    over tp4 (2 heads per device, gammas picked by the tp index), keys and
#    values all_gathered over sp, the decay mask from global positions,
#    GroupNorm per head, swish gate, row-parallel out projection psum'd.
B2, T2, D2, H2, E2 = 2, 16, 16, 8, 4
GAM2 = (1.0 - np.exp(np.linspace(np.log(1 / 32), np.log(1 / 512), H2))).astype(np.float32)


def msr_parallel(x, wq, wk, wv, wg, wo):
    q, k, v = (jnp.einsum("btd,dhe->bthe", x, w) for w in (wq, wk, wv))
    T = x.shape[1]
    n = jnp.arange(T)[:, None]
    m = jnp.arange(T)[None, :]
    D = jnp.where(n >= m, jnp.asarray(GAM2)[:, None, None] ** (n - m).astype(jnp.float32), 0.0)
    s = jnp.einsum("bnhe,bmhe->bhnm", q, k) / np.sqrt(E2) * D
    o = heads_norm(jnp.einsum("bhnm,bmhe->bnhe", s, v))
    g = jax.nn.silu(jnp.einsum("btd,dhe->bthe", x, wg))
    return jnp.einsum("bthe,hed->btd", g * o, wo)


def msr_sp_tp(bug):
    def f(x, wq, wk, wv, wg, wo):
        q, k, v = (jnp.einsum("btd,dhe->bthe", x, w) for w in (wq, wk, wv))
        k = lax.all_gather(k, "sp", axis=1, tiled=True)
        v = lax.all_gather(v, "sp", axis=1, tiled=True)
        L, hl = q.shape[1], q.shape[2]
        gam = jnp.asarray(GAM2)
        if bug == "gammas-of-first-head-block":
            gam = gam[:hl]
        else:
            gam = lax.dynamic_slice_in_dim(gam, idx("tp") * hl, hl)
        n = jnp.arange(L) + (0 if bug == "local-query-positions" else idx("sp") * L)
        m = jnp.arange(k.shape[1])
        dist = (n[:, None] - m[None, :]).astype(jnp.float32)
        D = jnp.where(dist >= 0, gam[:, None, None] ** jnp.maximum(dist, 0.0), 0.0)
        s = jnp.einsum("bnhe,bmhe->bhnm", q, k) / np.sqrt(E2) * D
        o = heads_norm(jnp.einsum("bhnm,bmhe->bnhe", s, v))
        g = jax.nn.silu(jnp.einsum("btd,dhe->bthe", x, wg))
        y = jnp.einsum("bthe,hed->btd", g * o, wo)
        return y if bug == "no-psum-after-out-proj" else psum(y, "tp")
    return f


ARGS2 = (R(B2, T2, D2),) + tuple(R(D2, H2, E2, scale=0.35) for _ in range(4)) + (R(H2, E2, D2, scale=0.3),)
SPECS2 = (P(None, "sp"),) + (P(None, "tp"),) * 4 + (P("tp"),)
C.smap("s.retnet_msr_parallel_heads_tp.sp2xtp4", {"sp": 2, "tp": 4}, msr_sp_tp, SPECS2, P(None, "sp"),
       msr_parallel, ARGS2,
       bugs=[("local-query-positions", ["wrong-offset"]), ("gammas-of-first-head-block", ["wrong-offset"]),
             ("no-psum-after-out-proj", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 3. gated linear attention (GLA), data-dependent per-key-channel decays,
#    sequence over sp4; (total log decay, local state) all_gathered, an
#    inclusive prefix by a python loop over devices, the entry before mine
#    taken (exclusive), device 0 gets zeros.
B3, T3, D3, H3, E3 = 2, 32, 16, 2, 4


def gla_proj(x, wq, wk, wv, wa):
    q, k, v = (jnp.einsum("btd,dhe->bthe", x, w) for w in (wq, wk, wv))
    la = jax.nn.log_sigmoid(jnp.einsum("btd,dhe->bthe", x, wa) + 2.0) / 4.0   # log alpha <= 0
    return q, k, v, la


def gla_scan(x, wq, wk, wv, wa):
    q, k, v, la = gla_proj(x, wq, wk, wv, wa)

    def step(S, t):
        qt, kt, vt, at = t
        S = jnp.exp(at)[..., None] * S + kt[..., None] * vt[..., None, :]
        return S, jnp.einsum("bhk,bhkv->bhv", qt, S)
    S0 = jnp.zeros((x.shape[0], H3, E3, E3))
    _, o = lax.scan(step, S0, tuple(jnp.swapaxes(a, 0, 1) for a in (q, k, v, la)))
    return jnp.swapaxes(o, 0, 1).reshape(x.shape[0], x.shape[1], H3 * E3)


def gla_sp(bug):
    n = 4

    def f(x, wq, wk, wv, wa):
        q, k, v, la = gla_proj(x, wq, wk, wv, wa)
        b = jnp.cumsum(la, axis=1)                                   # (B, L, H, K)
        L = x.shape[1]
        causal = jnp.tril(jnp.ones((L, L), bool))
        dd = b[:, :, None] - b[:, None, :]                           # (B, n, m, H, K)
        dd = jnp.where(causal[None, :, :, None, None], dd, -jnp.inf)
        A = jnp.einsum("bnhk,bmhk,bnmhk->bhnm", q, k, jnp.exp(dd))
        o = jnp.einsum("bhnm,bmhv->bnhv", A, v)
        tot = b[:, -1]                                               # (B, H, K)
        s_loc = jnp.einsum("bmhk,bmhv->bhkv", k * jnp.exp(tot[:, None] - b), v)
        ga = lax.all_gather(tot, "sp")
        gs = lax.all_gather(s_loc, "sp")
        pref, acc = [], jnp.zeros_like(s_loc)
        for j in range(n):
            if bug == "no-decay-across-devices":
                acc = acc + gs[j]
            else:
                acc = jnp.exp(ga[j])[..., None] * acc + gs[j]
            pref.append(acc)
        pref = jnp.stack([jnp.zeros_like(s_loc)] + pref)             # pref[i] = state after devices < i
        me = idx("sp")
        inc = pref[me + 1] if bug == "inclusive-prefix" else pref[me]
        o = o + jnp.einsum("bnhk,bhkv->bnhv", q * jnp.exp(b), inc)
        return o.reshape(x.shape[0], L, H3 * E3)
    return f


ARGS3 = (R(B3, T3, D3),) + tuple(R(D3, H3, E3, scale=0.35) for _ in range(4))
C.smap("s.gla_datadep_decay_gather_loop_prefix.sp4", {"sp": 4}, gla_sp, (P(None, "sp"),) + (P(),) * 4,
       P(None, "sp"), gla_scan, ARGS3,
       bugs=[("inclusive-prefix", ["wrong-offset"]), ("no-decay-across-devices", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 4. gated delta rule (Gated DeltaNet) with heads over tp2 and the sequence
#    over sp4: a token-level lax.scan from the incoming state, the incoming
#    state found by rerunning the shard n - 1 times and ppermuting its final
#    state down the chain, row-parallel out projection psum'd over tp.
B4, T4, D4, H4, E4 = 2, 16, 16, 4, 4


def gdn_inputs(x, wq, wk, wv, wa, wb):
    q, k, v = (jnp.einsum("btd,dhe->bthe", x, w) for w in (wq, wk, wv))
    k = k * lax.rsqrt(jnp.sum(k * k, -1, keepdims=True) + 1e-6)
    q = q * lax.rsqrt(jnp.sum(q * q, -1, keepdims=True) + 1e-6)
    alpha = jax.nn.sigmoid(x @ wa + 2.0)                             # (B, T, H)
    beta = jax.nn.sigmoid(x @ wb)
    return q, k, v, alpha, beta


def gdn_scan(S0, q, k, v, alpha, beta):
    def step(S, t):
        qt, kt, vt, at, bt = t
        kS = jnp.einsum("bhk,bhkv->bhv", kt, S)
        S = at[..., None, None] * (S - bt[..., None, None] * kt[..., None] * kS[..., None, :]) \
            + bt[..., None, None] * kt[..., None] * vt[..., None, :]
        return S, jnp.einsum("bhk,bhkv->bhv", qt, S)
    S, o = lax.scan(step, S0, tuple(jnp.swapaxes(a, 0, 1) for a in (q, k, v, alpha, beta)))
    return S, jnp.swapaxes(o, 0, 1)


def gdn_layer(x, wq, wk, wv, wa, wb, wo):
    q, k, v, al, be = gdn_inputs(x, wq, wk, wv, wa, wb)
    _, o = gdn_scan(jnp.zeros((x.shape[0], H4, E4, E4)), q, k, v, al, be)
    return jnp.einsum("bthe,hed->btd", o, wo)


def gdn_sp_tp(bug):
    n = 4

    def f(x, wq, wk, wv, wa, wb, wo):
        q, k, v, al, be = gdn_inputs(x, wq, wk, wv, wa, wb)
        inc = jnp.zeros((x.shape[0], q.shape[2], E4, E4))
        if bug != "no-incoming-state":
            for _ in range(n - 1):
                fin, _ = gdn_scan(inc, q, k, v, al, be)
                inc = lax.ppermute(fin, "sp", bwd(n) if bug == "state-up-the-chain" else fwd(n))
        _, o = gdn_scan(inc, q, k, v, al, be)
        y = jnp.einsum("bthe,hed->btd", o, wo)
        return y if bug == "no-psum-tp" else psum(y, "tp")
    return f


ARGS4 = (R(B4, T4, D4),) + tuple(R(D4, H4, E4, scale=0.4) for _ in range(3)) + \
    (R(D4, H4, scale=0.3), R(D4, H4, scale=0.3), R(H4, E4, D4, scale=0.3))
SPECS4 = (P(None, "sp"), P(None, "tp"), P(None, "tp"), P(None, "tp"), P(None, "tp"), P(None, "tp"), P("tp"))
C.smap("s.gated_delta_rule_rerun_chain.sp4xtp2", {"sp": 4, "tp": 2}, gdn_sp_tp, SPECS4, P(None, "sp"), gdn_layer,
       ARGS4,
       bugs=[("no-psum-tp", ["missing-all-reduce"]), ("state-up-the-chain", ["wrong-permutation"]),
             ("no-incoming-state", ["missing-collective"])])

# ---------------------------------------------------------------------------
# 5. RWKV-6 time mixing (data-dependent decay through a small LoRA, bonus u,
#    per-head GroupNorm, silu gate) on dp2 x sp4: the token shift takes the
#    previous device's last token by ppermute; the WKV state: each device's
#    (summed log decay, zero-start final state) all_gathered, the state
#    entering device i folded from devices < i, the shard rescanned from it.
B5, T5, D5, H5, E5, R5 = 4, 16, 16, 4, 4, 4


def rwkv_shift_mix(x, xprev, mu):
    dx = xprev - x
    return [x + dx * mu[i] for i in range(mu.shape[0])]


def rwkv_inputs(x, xprev, mu, wr, wk, wv, wg, w0, wa, wb):
    xr, xk, xv, xg, xw = rwkv_shift_mix(x, xprev, mu)
    b, t = x.shape[:2]
    r, k, v = (jnp.einsum("btd,dhe->bthe", a, w) for a, w in ((xr, wr), (xk, wk), (xv, wv)))
    g = jax.nn.silu(xg @ wg)
    lw = -jnp.exp(w0 + jnp.tanh(xw @ wa) @ wb).reshape(b, t, H5, E5)   # log decay per key channel
    return r, k, v, g, lw


def wkv6(S0, r, k, v, lw, u):
    def step(S, t):
        rt, kt, vt, lwt = t
        kv = kt[..., None] * vt[..., None, :]
        o = jnp.einsum("bhk,bhkv->bhv", rt, S + u[None, :, :, None] * kv)
        return jnp.exp(lwt)[..., None] * S + kv, o
    S, o = lax.scan(step, S0, tuple(jnp.swapaxes(a, 0, 1) for a in (r, k, v, lw)))
    return S, jnp.swapaxes(o, 0, 1)


def rwkv6_tmix(x, mu, wr, wk, wv, wg, w0, wa, wb, u, wo):
    xprev = jnp.pad(x, ((0, 0), (1, 0), (0, 0)))[:, :-1]
    r, k, v, g, lw = rwkv_inputs(x, xprev, mu, wr, wk, wv, wg, w0, wa, wb)
    _, o = wkv6(jnp.zeros((x.shape[0], H5, E5, E5)), r, k, v, lw, u)
    o = heads_norm(o).reshape(x.shape)
    return (o * g) @ wo


def rwkv6_sp(bug):
    n = 4

    def f(x, mu, wr, wk, wv, wg, w0, wa, wb, u, wo):
        me = idx("sp")
        if bug == "shift-ignores-previous-device":
            last = jnp.zeros_like(x[:, -1:])
        else:
            last = lax.ppermute(x[:, -1:], "sp", bwd(n) if bug == "shift-from-next-device" else fwd(n))
        xprev = jnp.concatenate([last, x[:, :-1]], axis=1)
        r, k, v, g, lw = rwkv_inputs(x, xprev, mu, wr, wk, wv, wg, w0, wa, wb)
        b = x.shape[0]
        fin, _ = wkv6(jnp.zeros((b, H5, E5, E5)), r, k, v, lw, u)
        tot = lw.sum(1)                                                  # (B, H, K)
        gs, gt = lax.all_gather(fin, "sp"), lax.all_gather(tot, "sp")
        inc = jnp.zeros_like(fin)
        for j in range(n):
            take = (j < me) if bug != "inclusive-carry" else (j <= me)
            inc = jnp.where(take, jnp.exp(gt[j])[..., None] * inc + gs[j], inc)
        _, o = wkv6(inc, r, k, v, lw, u)
        o = heads_norm(o).reshape(x.shape)
        return (o * g) @ wo
    return f


ARGS5 = (R(B5, T5, D5), (0.5 + 0.2 * R(5, D5)).astype(np.float32)) + \
    tuple(R(D5, H5, E5, scale=0.3) for _ in range(3)) + \
    (R(D5, D5, scale=0.3), (-0.8 + 0.3 * R(D5)).astype(np.float32), R(D5, R5, scale=0.3), R(R5, D5, scale=0.3),
     R(H5, E5, scale=0.5), R(D5, D5, scale=0.3))
SPECS5 = (P("dp", "sp"),) + (P(),) * 10
C.smap("s.rwkv6_time_mix_token_shift.dp2xsp4", {"dp": 2, "sp": 4}, rwkv6_sp, SPECS5, P("dp", "sp"), rwkv6_tmix, ARGS5,
       bugs=[("shift-ignores-previous-device", ["missing-collective"]), ("shift-from-next-device", ["wrong-permutation"]),
             ("inclusive-carry", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 6. Hyena-style long convolution via FFT, sequence over sp4: v and the gate
#    column projections, then an all_to_all to channels-sharded / full
#    sequence, a causal FFT convolution (zero-padded to 2T) with each device's
#    slice of the explicit filter, all_to_all back, gate, output projection.
B6, T6, D6 = 2, 32, 16


def fft_causal_conv(v, h):
    T = v.shape[1]
    y = jnp.fft.irfft(jnp.fft.rfft(v, n=2 * T, axis=1) * jnp.fft.rfft(h, n=2 * T, axis=0)[None], n=2 * T, axis=1)
    return y[:, :T]


def hyena(x, wv, wg, h, dskip, wo):
    v = x @ wv
    g = x @ wg
    y = fft_causal_conv(v, h) + dskip * v
    return (y * g) @ wo


def hyena_sp(bug):
    n = 4

    def f(x, wv, wg, h, dskip, wo):
        v = x @ wv
        g = x @ wg
        if bug == "conv-within-shard":
            y = fft_causal_conv(v, h[: v.shape[1]]) + dskip * v
            return (y * g) @ wo
        vt = lax.all_to_all(v, "sp", split_axis=2, concat_axis=1, tiled=True)     # (B, T, D/n)
        c = vt.shape[2]
        hs = h[:, :c] if bug == "filter-of-first-channels" else lax.dynamic_slice_in_dim(h, idx("sp") * c, c, axis=1)
        if bug == "circular-fft":
            yt = jnp.fft.irfft(jnp.fft.rfft(vt, axis=1) * jnp.fft.rfft(hs, axis=0)[None], n=vt.shape[1], axis=1)
        else:
            yt = fft_causal_conv(vt, hs)
        y = lax.all_to_all(yt, "sp", split_axis=1, concat_axis=2, tiled=True) + dskip * v
        return (y * g) @ wo
    return f


ARGS6 = (R(B6, T6, D6), R(D6, D6, scale=0.3), R(D6, D6, scale=0.3),
         (R(T6, D6) * np.exp(-np.arange(T6) / 8.0)[:, None]).astype(np.float32), R(D6, scale=0.5),
         R(D6, D6, scale=0.3))
C.smap("s.hyena_fft_longconv_all_to_all.sp4", {"sp": 4}, hyena_sp, (P(None, "sp"),) + (P(),) * 5, P(None, "sp"),
       hyena, ARGS6,
       bugs=[("filter-of-first-channels", ["wrong-offset"]), ("circular-fft", ["wrong-offset"]),
             ("conv-within-shard", ["missing-collective"])])

# ---------------------------------------------------------------------------
# 7. Based: 2nd-order Taylor feature map phi(x) = [1, x / d^(1/4),
#    vec(x x^T) / (sqrt(2) sqrt(d))], causal linear attention with a
#    normaliser, dp2 x sp4; the per-device (sum phi(k) v^T, sum phi(k))
#    all_gathered, exclusive prefix = cumsum - own.
B7, T7, D7, H7, F7, E7 = 4, 16, 16, 2, 4, 4


def taylor(x):
    d = x.shape[-1]
    x2 = (x[..., :, None] * x[..., None, :]).reshape(x.shape[:-1] + (d * d,))
    return jnp.concatenate([jnp.ones_like(x[..., :1]), x / d ** 0.25, x2 / (np.sqrt(2.0) * np.sqrt(d))], -1)


def based(x, wq, wk, wv, wo):
    q, k = (taylor(jnp.einsum("btd,dhf->bthf", x, w)) for w in (wq, wk))
    v = jnp.einsum("btd,dhe->bthe", x, wv)
    kv = jnp.cumsum(k[..., :, None] * v[..., None, :], axis=1)
    z = jnp.cumsum(k, axis=1)
    num = jnp.einsum("bthf,bthfe->bthe", q, kv)
    den = jnp.einsum("bthf,bthf->bth", q, z)
    o = num / (den[..., None] + 1e-6)
    return jnp.einsum("bthe,hed->btd", o, wo)


def based_sp(bug):
    def f(x, wq, wk, wv, wo):
        q, k = (taylor(jnp.einsum("btd,dhf->bthf", x, w)) for w in (wq, wk))
        v = jnp.einsum("btd,dhe->bthe", x, wv)
        kv = jnp.cumsum(k[..., :, None] * v[..., None, :], axis=1)
        z = jnp.cumsum(k, axis=1)
        me = idx("sp")
        if bug == "psum-of-all-devices":
            kv_in = psum(kv[:, -1], "sp") - kv[:, -1]
        else:
            gkv = lax.all_gather(kv[:, -1], "sp")
            ckv = jnp.cumsum(gkv, 0)
            kv_in = ckv[me] if bug == "inclusive-prefix" else ckv[me] - gkv[me]
        gz = lax.all_gather(z[:, -1], "sp")
        z_in = jnp.cumsum(gz, 0)[me] - gz[me]
        kv = kv + kv_in[:, None]
        if bug != "normaliser-not-carried":
            z = z + z_in[:, None]
        num = jnp.einsum("bthf,bthfe->bthe", q, kv)
        den = jnp.einsum("bthf,bthf->bth", q, z)
        o = num / (den[..., None] + 1e-6)
        return jnp.einsum("bthe,hed->btd", o, wo)
    return f


ARGS7 = (R(B7, T7, D7), R(D7, H7, F7, scale=0.3), R(D7, H7, F7, scale=0.3), R(D7, H7, E7, scale=0.4),
         R(H7, E7, D7, scale=0.4))
C.smap("s.based_taylor_linear_attn_cumsum_prefix.dp2xsp4", {"dp": 2, "sp": 4}, based_sp,
       (P("dp", "sp"),) + (P(),) * 4, P("dp", "sp"), based, ARGS7,
       bugs=[("inclusive-prefix", ["wrong-offset"]), ("normaliser-not-carried", ["missing-collective"]),
             ("psum-of-all-devices", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 8. Lightning-attention-style chunked linear attention (relu features, a
#    fixed decay per head) on sp8: every device's chunk state all_gathered
#    and weighted by a row of lam^(L (i - 1 - j)) for j < i, a masked einsum
#    over the device axis (prefix as a matmul); within the shard the decay
#    uses local positions.
B8, T8, D8, H8, E8 = 2, 32, 8, 2, 4
LAM8 = np.array([0.9, 0.75], np.float32)


def lightning(x, wq, wk, wv):
    q, k, v = (jax.nn.relu(jnp.einsum("btd,dhe->bthe", x, w)) for w in (wq, wk, wv))
    T = x.shape[1]
    t = jnp.arange(T)
    dist = (t[:, None] - t[None, :]).astype(jnp.float32)
    M = jnp.where(dist >= 0, jnp.asarray(LAM8)[:, None, None] ** jnp.maximum(dist, 0.0), 0.0)
    return jnp.einsum("bnhe,bmhe,hnm,bmhf->bnhf", q, k, M, v)


def lightning_sp(bug):
    n = 8

    def f(x, wq, wk, wv):
        q, k, v = (jax.nn.relu(jnp.einsum("btd,dhe->bthe", x, w)) for w in (wq, wk, wv))
        L = x.shape[1]
        lam = jnp.asarray(LAM8)
        t = jnp.arange(L, dtype=jnp.float32)
        dist = t[:, None] - t[None, :]
        M = jnp.where(dist >= 0, lam[:, None, None] ** jnp.maximum(dist, 0.0), 0.0)
        o = jnp.einsum("bnhe,bmhe,hnm,bmhf->bnhf", q, k, M, v)
        s_loc = jnp.einsum("bmhe,hm,bmhf->bhef", k, lam[:, None] ** (L - 1 - t)[None, :], v)
        allS = lax.all_gather(s_loc, "sp")                             # (n, B, H, E, E)
        me = idx("sp")
        j = jnp.arange(n)
        if bug == "states-from-later-devices":
            ok, ex = j > me, (j - me - 1)
        else:
            ok, ex = j < me, (me - 1 - j)
        w = jnp.where(ok[:, None], lam[None, :] ** (L * jnp.maximum(ex, 0)).astype(jnp.float32)[:, None], 0.0)
        inc = jnp.einsum("jh,jbhef->bhef", w, allS)
        p = t + 1 + (me * L if bug == "cross-decay-global-position" else 0)
        o = o + jnp.einsum("bnhe,hn,bhef->bnhf", q, lam[:, None] ** p[None, :], inc)
        return o
    return f


ARGS8 = (R(B8, T8, D8), R(D8, H8, E8, scale=0.5), R(D8, H8, E8, scale=0.5), R(D8, H8, E8, scale=0.5))
C.smap("s.lightning_attn_decay_prefix_matmul.sp8", {"sp": 8}, lightning_sp, (P(None, "sp"),) + (P(),) * 3,
       P(None, "sp"), lightning, ARGS8,
       bugs=[("states-from-later-devices", ["wrong-permutation"]),
             ("cross-decay-global-position", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 9. a training step of a simple-GLA block (scalar data-dependent decay per
#    head, chunk-free parallel form with a cumulative log-decay mask, heads
#    over tp4, batch over dp2) with optax.adamw, check_vma=True: the loss
#    pmean'd over dp, the out projection psum'd over tp.
B9, T9, D9, H9, E9 = 4, 8, 16, 4, 4


def init9():
    return {"wq": R(D9, H9, E9, scale=0.3), "wk": R(D9, H9, E9, scale=0.3), "wv": R(D9, H9, E9, scale=0.3),
            "wf": R(D9, H9, scale=0.3), "fb": (2.0 + R(H9, scale=0.3)).astype(np.float32),
            "wo": R(H9, E9, D9, scale=0.3), "ln": np.ones(D9, np.float32)}


SPEC9 = {"wq": P(None, "tp"), "wk": P(None, "tp"), "wv": P(None, "tp"), "wf": P(None, "tp"), "fb": P("tp"),
         "wo": P("tp"), "ln": P()}


def sgla_loss(p, x, y, tsum=lambda a: a):
    q, k, v = (jnp.einsum("btd,dhe->bthe", x, p[w]) for w in ("wq", "wk", "wv"))
    lf = jnp.cumsum(jax.nn.log_sigmoid(x @ p["wf"] + p["fb"]), axis=1)      # (B, T, H)
    T = x.shape[1]
    causal = jnp.tril(jnp.ones((T, T), bool))
    dm = jnp.where(causal[None, None], jnp.swapaxes(lf, 1, 2)[..., :, None] - jnp.swapaxes(lf, 1, 2)[..., None, :],
                   -jnp.inf)
    a = jnp.einsum("bnhe,bmhe->bhnm", q, k) * jnp.exp(dm)
    o = jnp.einsum("bhnm,bmhe->bnhe", a, v)
    h = x + tsum(jnp.einsum("bthe,hed->btd", o, p["wo"]))
    h = h * lax.rsqrt(jnp.mean(h * h, -1, keepdims=True) + 1e-6) * p["ln"]
    return jnp.mean(jnp.square(h - y))


OPT9 = optax.adamw(3e-3, b1=0.9, b2=0.99, weight_decay=0.01)


def step9(p, s, x, y):
    l, g = jax.value_and_grad(sgla_loss)(p, x, y)
    u, s = OPT9.update(g, s, p)
    return optax.apply_updates(p, u), s, l


def step9_sm(bug):
    def f(p, s, x, y):
        def loss(p):
            lo = sgla_loss(p, x, y, lambda a: psum(a, "tp"))
            return psum(lo, "dp") if bug == "loss-psum-not-pmean" else pmean(lo, "dp")
        l, g = jax.value_and_grad(loss)(p)
        u, s = OPT9.update(g, s, p)
        return optax.apply_updates(p, u), s, l
    return f


P9 = init9()
S9 = OPT9.init(P9)
SS9 = state_specs(S9, SPEC9)
ARGS9 = (P9, S9, R(B9, T9, D9), R(B9, T9, D9))
C.smap("s.simple_gla_train_step_adamw.dp2xtp4", {"dp": 2, "tp": 4}, step9_sm, (SPEC9, SS9, P("dp"), P("dp")),
       (SPEC9, SS9, P()), step9, ARGS9,
       bugs=[("loss-psum-not-pmean", ["wrong-scale"])], check_vma=True)

# ---------------------------------------------------------------------------
# 10. one recurrent decoding step of multi-scale retention in bf16 (state in
#     f32), heads over tp8: S <- gamma S + k^T v, o = q S, per-head norm,
#     row-parallel out projection psum'd over tp in f32.
B10, D10, H10, E10 = 4, 16, 8, 4
GAM10 = (1.0 - 2.0 ** (-np.linspace(3, 8, H10))).astype(np.float32)


def ret_decode(x, S, wq, wk, wv, wo):
    xb = x.astype(jnp.bfloat16)
    q, k, v = (jnp.einsum("bd,dhe->bhe", xb, w.astype(jnp.bfloat16)).astype(jnp.float32) for w in (wq, wk, wv))
    S = jnp.asarray(GAM10)[None, :, None, None] * S + k[..., :, None] * v[..., None, :]
    o = heads_norm(jnp.einsum("bhk,bhkv->bhv", q, S)).astype(jnp.bfloat16)
    y = jnp.einsum("bhe,hed->bd", o, wo.astype(jnp.bfloat16), preferred_element_type=jnp.float32)
    return y, S


def ret_decode_tp(bug):
    def f(x, S, wq, wk, wv, wo):
        xb = x.astype(jnp.bfloat16)
        q, k, v = (jnp.einsum("bd,dhe->bhe", xb, w.astype(jnp.bfloat16)).astype(jnp.float32) for w in (wq, wk, wv))
        hl = q.shape[1]
        g = lax.dynamic_slice_in_dim(jnp.asarray(GAM10), idx("tp") * hl, hl)
        if bug == "state-decayed-twice":
            S = g[None, :, None, None] * (g[None, :, None, None] * S) + k[..., :, None] * v[..., None, :]
        else:
            S = g[None, :, None, None] * S + k[..., :, None] * v[..., None, :]
        o = heads_norm(jnp.einsum("bhk,bhkv->bhv", q, S)).astype(jnp.bfloat16)
        y = jnp.einsum("bhe,hed->bd", o, wo.astype(jnp.bfloat16), preferred_element_type=jnp.float32)
        if bug == "pmean-instead-of-psum":
            return pmean(y, "tp"), S
        return psum(y, "tp"), S
    return f


ARGS10 = (R(B10, D10), R(B10, H10, E10, E10, scale=0.5), R(D10, H10, E10, scale=0.3), R(D10, H10, E10, scale=0.3),
          R(D10, H10, E10, scale=0.3), R(H10, E10, D10, scale=0.3))
C.smap("s.retention_decode_step_bf16_heads.tp8", {"tp": 8}, ret_decode_tp,
       (P(), P(None, "tp"), P(None, "tp"), P(None, "tp"), P(None, "tp"), P("tp")), (P(), P(None, "tp")),
       ret_decode, ARGS10,
       bugs=[("pmean-instead-of-psum", ["wrong-scale"]), ("state-decayed-twice", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 11. mLSTM (xLSTM) with a sigmoid forget gate, a bounded exponential input
#     gate and the max(|q.n|, 1) normaliser, sequence over sp4: the (C, n)
#     state entering each device as a reduce-scatter of per-destination
#     contributions (device j adds its chunk state, decayed over the devices
#     in between, to every later device's row; psum_scatter hands row i to i).
B11, T11, D11, H11, E11 = 2, 32, 16, 2, 4


def mlstm_proj(x, wq, wk, wv, wf, wi):
    q, k, v = (jnp.einsum("btd,dhe->bthe", x, w) for w in (wq, wk, wv))
    return q / np.sqrt(E11), k, v, jax.nn.log_sigmoid(x @ wf + 1.5), jnp.tanh(x @ wi)


def mlstm(x, wq, wk, wv, wf, wi):
    q, k, v, lf, li = mlstm_proj(x, wq, wk, wv, wf, wi)

    def step(c, t):
        Cm, nv = c
        qt, kt, vt, ft, it = t
        f, i = jnp.exp(ft)[..., None], jnp.exp(it)[..., None]
        Cm = f[..., None] * Cm + i[..., None] * kt[..., :, None] * vt[..., None, :]
        nv = f * nv + i * kt
        h = jnp.einsum("bhk,bhkv->bhv", qt, Cm) / jnp.maximum(jnp.abs(jnp.sum(qt * nv, -1)), 1.0)[..., None]
        return (Cm, nv), h
    b = x.shape[0]
    c0 = (jnp.zeros((b, H11, E11, E11)), jnp.zeros((b, H11, E11)))
    _, h = lax.scan(step, c0, tuple(jnp.swapaxes(a, 0, 1) for a in (q, k, v, lf, li)))
    return jnp.swapaxes(h, 0, 1).reshape(b, x.shape[1], H11 * E11)


def mlstm_sp(bug):
    n = 4

    def f(x, wq, wk, wv, wf, wi):
        q, k, v, lf, li = mlstm_proj(x, wq, wk, wv, wf, wi)
        bc = jnp.cumsum(lf, 1)                                          # (B, L, H)
        L = x.shape[1]
        causal = jnp.tril(jnp.ones((L, L), bool))
        lw = bc[:, :, None] - bc[:, None, :] + li[:, None, :]          # (B, n, m, H)
        w = jnp.where(causal[None, :, :, None], jnp.exp(jnp.where(causal[None, :, :, None], lw, 0.0)), 0.0)
        qk = jnp.einsum("bnhe,bmhe->bnmh", q, k) * w
        num = jnp.einsum("bnmh,bmhv->bnhv", qk, v)
        den = qk.sum(2)                                                 # (B, n, H)
        tot = bc[:, -1]                                                 # (B, H)
        wl = jnp.exp(tot[:, None] - bc + li)                            # (B, L, H)
        c_loc = jnp.einsum("bmh,bmhk,bmhv->bhkv", wl, k, v)
        n_loc = jnp.einsum("bmh,bmhk->bhk", wl, k)
        me = idx("sp")
        G = jnp.cumsum(lax.all_gather(tot, "sp"), 0)                   # (n, B, H) inclusive sums of totals
        i = jnp.arange(n)
        gap = G[jnp.maximum(i - 1, 0)] - G[me]                          # sum of totals strictly between me and i
        later = (i >= me) if bug == "contribute-to-own-row" else (i > me)
        if bug == "decay-includes-destination":
            gap = G[i] - G[me]
        wt = jnp.where(later[:, None, None], jnp.exp(jnp.where(later[:, None, None], gap, 0.0)), 0.0)  # (n, B, H)
        c_in = lax.psum_scatter(wt[..., None, None] * c_loc[None], "sp", scatter_dimension=0, tiled=True)[0]
        n_in = lax.psum_scatter(wt[..., None] * n_loc[None], "sp", scatter_dimension=0, tiled=True)[0]
        eb = jnp.exp(bc)[..., None]                                     # (B, L, H, 1)
        num = num + eb * jnp.einsum("bnhk,bhkv->bnhv", q, c_in)
        den = den + eb[..., 0] * jnp.einsum("bnhk,bhk->bnh", q, n_in)
        if bug == "normaliser-without-abs":
            h = num / jnp.maximum(den, 1.0)[..., None]
        else:
            h = num / jnp.maximum(jnp.abs(den), 1.0)[..., None]
        return h.reshape(x.shape[0], L, H11 * E11)
    return f


ARGS11 = (R(B11, T11, D11),) + tuple(R(D11, H11, E11, scale=0.5) for _ in range(3)) + \
    (R(D11, H11, scale=0.3), R(D11, H11, scale=0.5))
C.smap("s.mlstm_psum_scatter_carry.sp4", {"sp": 4}, mlstm_sp, (P(None, "sp"),) + (P(),) * 5, P(None, "sp"), mlstm,
       ARGS11,
       bugs=[("contribute-to-own-row", ["wrong-offset"]), ("decay-includes-destination", ["wrong-offset"]),
             ("normaliser-without-abs", ["wrong-sign"])])

# ---------------------------------------------------------------------------
# 12. DeltaNet's short causal depthwise convolution (4 taps) in front of the
#     q/k projections, sequence over sp8 with 4 tokens per device: a 3-token
#     halo from the previous device by ppermute, a VALID lax.conv with
#     feature_group_count, SiLU, keys L2-normalised per head.
B12, T12, D12, K12, H12 = 2, 32, 16, 4, 4


def dwconv(xp, w):
    return lax.conv_general_dilated(xp, w[:, None, :], (1,), "VALID", dimension_numbers=("NWC", "WIO", "NWC"),
                                    feature_group_count=xp.shape[-1])


def short_conv_keys(x, wk, cw):
    u = x @ wk
    y = jax.nn.silu(dwconv(jnp.pad(u, ((0, 0), (K12 - 1, 0), (0, 0))), cw))
    y = y.reshape(y.shape[:2] + (H12, -1))
    return (y * lax.rsqrt(jnp.sum(y * y, -1, keepdims=True) + 1e-6)).reshape(u.shape)


def short_conv_sp(bug):
    n = 8

    def f(x, wk, cw):
        u = x @ wk
        if bug == "no-halo":
            halo = jnp.zeros_like(u[:, : K12 - 1])
        elif bug == "halo-from-next-device":
            halo = lax.ppermute(u[:, -(K12 - 1):], "sp", bwd(n))
        elif bug == "halo-of-one-token":
            halo = jnp.concatenate([jnp.zeros_like(u[:, : K12 - 2]), lax.ppermute(u[:, -1:], "sp", fwd(n))], 1)
        else:
            halo = lax.ppermute(u[:, -(K12 - 1):], "sp", fwd(n))
        y = jax.nn.silu(dwconv(jnp.concatenate([halo, u], 1), cw))
        y = y.reshape(y.shape[:2] + (H12, -1))
        return (y * lax.rsqrt(jnp.sum(y * y, -1, keepdims=True) + 1e-6)).reshape(u.shape)
    return f


ARGS12 = (R(B12, T12, D12), R(D12, D12, scale=0.3), R(K12, D12, scale=0.5))
C.smap("s.deltanet_short_conv_halo.sp8", {"sp": 8}, short_conv_sp, (P(None, "sp"), P(), P()), P(None, "sp"),
       short_conv_keys, ARGS12,
       bugs=[("no-halo", ["missing-collective"]), ("halo-from-next-device", ["wrong-permutation"]),
             ("halo-of-one-token", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 13. Hyena with an implicit filter: sinusoidal features of the position ->
#     a small MLP -> times an exponential window; each device evaluates the
#     filter at its own global positions and all_gathers it, the input is
#     all_gathered too, the causal FFT convolution runs on the full sequence
#     and each device keeps its block (sequence over sp4, dp2).
B13, T13, D13, F13, M13 = 4, 32, 8, 4, 16
FREQ13 = (np.pi / T13 * 2.0 ** np.arange(F13)).astype(np.float32)


def implicit_filter(t, w1, w2, alpha):
    feats = jnp.concatenate([jnp.sin(t[:, None] * FREQ13), jnp.cos(t[:, None] * FREQ13)], -1)
    return (jnp.tanh(feats @ w1) @ w2) * jnp.exp(-jax.nn.softplus(alpha) * t[:, None] / 4.0)


def hyena_implicit(x, w1, w2, alpha, wg):
    h = implicit_filter(jnp.arange(x.shape[1], dtype=jnp.float32), w1, w2, alpha)
    return fft_causal_conv(x, h) * jax.nn.sigmoid(x @ wg)


def hyena_implicit_sp(bug):
    def f(x, w1, w2, alpha, wg):
        L = x.shape[1]
        me = idx("sp")
        t = jnp.arange(L, dtype=jnp.float32) + (0.0 if bug == "filter-at-local-positions" else (me * L).astype(jnp.float32))
        h = lax.all_gather(implicit_filter(t, w1, w2, alpha), "sp", axis=0, tiled=True)
        xf = lax.all_gather(x, "sp", axis=1, tiled=True)
        y = fft_causal_conv(xf, h)
        y = lax.dynamic_slice_in_dim(y, (0 if bug == "keeps-first-block" else me * L), L, axis=1)
        return y * jax.nn.sigmoid(x @ wg)
    return f


ARGS13 = (R(B13, T13, D13), R(2 * F13, M13, scale=0.5), R(M13, D13, scale=0.4), R(D13, scale=0.5),
          R(D13, D13, scale=0.4))
C.smap("s.hyena_implicit_filter_gathered.dp2xsp4", {"dp": 2, "sp": 4}, hyena_implicit_sp,
       (P("dp", "sp"), P(), P(), P(), P()), P("dp", "sp"), hyena_implicit, ARGS13,
       bugs=[("filter-at-local-positions", ["wrong-offset"]), ("keeps-first-block", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 14. a training step (SGD with momentum) of the chunkwise retention of 1.
#     under dp2 x sp4 with check_vma=True: jax.grad runs back through the
#     ppermute chain; the token-mean loss pmean'd over (dp, sp).
OPT14 = optax.sgd(2e-4, momentum=0.9)
K14 = ("wq", "wk", "wv", "wo")
P14 = dict(zip(K14, ARGS1[1:]))
S14 = OPT14.init(P14)
Y14 = R(B1 * 2, T1, D1)
X14 = R(B1 * 2, T1, D1, scale=0.3)


def ret_step(p, s, x, y):
    def loss(p):
        return jnp.mean(jnp.square(retention_scan(x, *(p[k] for k in K14)) - y))
    l, g = jax.value_and_grad(loss)(p)
    u, s = OPT14.update(g, s, p)
    return optax.apply_updates(p, u), s, l


def ret_step_sm(bug):
    body = retention_chunk_sp("stop-gradient-on-carry" if bug == "stop-gradient-on-carry" else None)

    def f(p, s, x, y):
        def loss(p):
            lo = jnp.mean(jnp.square(body(x, *(p[k] for k in K14)) - y))
            if bug == "loss-psum-over-sp":
                return pmean(psum(lo, "sp"), "dp")
            return pmean(lo, ("dp", "sp"))
        l, g = jax.value_and_grad(loss)(p)
        u, s = OPT14.update(g, s, p)
        return optax.apply_updates(p, u), s, l
    return f


SS14 = state_specs(S14, {k: P() for k in K14})
C.smap("s.retnet_chunk_train_step_sgd.dp2xsp4", {"dp": 2, "sp": 4}, ret_step_sm,
       ({k: P() for k in K14}, SS14, P("dp", "sp"), P("dp", "sp")), ({k: P() for k in K14}, SS14, P()),
       ret_step, (P14, S14, X14, Y14),
       bugs=[("loss-psum-over-sp", ["wrong-scale"]), ("stop-gradient-on-carry", ["missing-collective"])],
       check_vma=True)

# ---------------------------------------------------------------------------
# 15. retention written with global positions: every device keeps its state
#     normalised to position 0 (sum_m gamma^-m k_m v_m^T over its global m),
#     so the state entering device i is a plain exclusive sum of the earlier
#     devices' states (lax.cumsum over the all_gathered axis minus its own)
#     and a query at global position t reads it with gamma^t (sp4).
B15, T15, D15, H15, E15 = 2, 16, 8, 2, 4
GAM15 = np.array([0.95, 0.85], np.float32)


def retention_global(x, wq, wk, wv):
    q, k, v = (jnp.einsum("btd,dhe->bthe", x, w) for w in (wq, wk, wv))
    T = x.shape[1]
    t = jnp.arange(T, dtype=jnp.float32)
    d = t[:, None] - t[None, :]
    M = jnp.where(d >= 0, jnp.asarray(GAM15)[:, None, None] ** jnp.maximum(d, 0.0), 0.0)
    return jnp.einsum("hnm,bnhk,bmhk,bmhv->bnhv", M, q, k, v).reshape(x.shape[0], T, H15 * E15)


def retention_global_sp(bug):
    def f(x, wq, wk, wv):
        q, k, v = (jnp.einsum("btd,dhe->bthe", x, w) for w in (wq, wk, wv))
        L = x.shape[1]
        me = idx("sp")
        lg = jnp.log(jnp.asarray(GAM15))
        tl = jnp.arange(L, dtype=jnp.float32)
        tg = tl if bug == "local-positions" else tl + (me * L).astype(jnp.float32)
        d = tl[:, None] - tl[None, :]
        M = jnp.where(d >= 0, jnp.exp(lg[:, None, None] * jnp.maximum(d, 0.0)), 0.0)
        o = jnp.einsum("hnm,bnhk,bmhk,bmhv->bnhv", M, q, k, v)
        s0 = jnp.einsum("mh,bmhk,bmhv->bhkv", jnp.exp(-lg[None, :] * tg[:, None]), k, v)
        allS = lax.all_gather(s0, "sp")
        cs = lax.cumsum(allS, axis=0, reverse=(bug == "reverse-cumsum"))
        inc = cs[me] - allS[me]
        o = o + jnp.einsum("nh,bnhk,bhkv->bnhv", jnp.exp(lg[None, :] * tg[:, None]), q, inc)
        return o.reshape(x.shape[0], L, H15 * E15)
    return f


ARGS15 = (R(B15, T15, D15), R(D15, H15, E15, scale=0.4), R(D15, H15, E15, scale=0.4), R(D15, H15, E15, scale=0.4))
C.smap("s.retention_state_at_position_zero.sp4", {"sp": 4}, retention_global_sp, (P(None, "sp"),) + (P(),) * 3,
       P(None, "sp"), retention_global, ARGS15,
       bugs=[("local-positions", ["wrong-offset"]), ("reverse-cumsum", ["wrong-permutation"])])

# ---------------------------------------------------------------------------
# 16. linear attention with grouped key/value heads (8 query heads, 2 kv
#     heads) as a lax.scan, query heads over tp4: the kv projections are
#     replicated and each device slices the kv head of its group; the out
#     projection is row-parallel, reduced with psum_scatter + all_gather.
B16, T16, D16, HQ16, HK16, E16 = 2, 8, 16, 8, 2, 4


def gqa_linear(x, wq, wk, wv, wo):
    q = jax.nn.elu(jnp.einsum("btd,dhe->bthe", x, wq)) + 1.0
    k = jax.nn.elu(jnp.einsum("btd,dhe->bthe", x, wk)) + 1.0
    v = jnp.einsum("btd,dhe->bthe", x, wv)
    rep = q.shape[2] // k.shape[2]
    k, v = jnp.repeat(k, rep, axis=2), jnp.repeat(v, rep, axis=2)

    def step(c, t):
        S, z = c
        qt, kt, vt = t
        S = S + kt[..., :, None] * vt[..., None, :]
        z = z + kt
        return (S, z), jnp.einsum("bhk,bhkv->bhv", qt, S) / jnp.sum(qt * z, -1, keepdims=True)
    b, h = x.shape[0], q.shape[2]
    _, o = lax.scan(step, (jnp.zeros((b, h, E16, E16)), jnp.zeros((b, h, E16))),
                    tuple(jnp.swapaxes(a, 0, 1) for a in (q, k, v)))
    return jnp.einsum("bthe,hed->btd", jnp.swapaxes(o, 0, 1), wo)


def gqa_linear_tp(bug):
    def f(x, wq, wk, wv, wo):
        hl = wq.shape[1]
        grp = HQ16 // HK16                                               # query heads per kv head
        g = 0 if bug == "kv-head-of-group-zero" else (idx("tp") * hl) // grp
        wk_l = lax.dynamic_slice_in_dim(wk, g, 1, axis=1)
        wv_l = lax.dynamic_slice_in_dim(wv, g, 1, axis=1)
        q = jax.nn.elu(jnp.einsum("btd,dhe->bthe", x, wq)) + 1.0
        k = jax.nn.elu(jnp.einsum("btd,dhe->bthe", x, wk_l)) + 1.0
        v = jnp.einsum("btd,dhe->bthe", x, wv_l)
        kc, vc = jnp.cumsum(k[..., :, None] * v[..., None, :], 1), jnp.cumsum(k, 1)
        o = jnp.einsum("bthk,btkv->bthv", q, kc[:, :, 0]) / jnp.einsum("bthk,btk->bth", q, vc[:, :, 0])[..., None]
        y = jnp.einsum("bthe,hed->btd", o, wo)
        if bug == "scatter-without-gather":
            return jnp.tile(lax.psum_scatter(y, "tp", scatter_dimension=2, tiled=True), (1, 1, 4))
        return lax.all_gather(lax.psum_scatter(y, "tp", scatter_dimension=2, tiled=True), "tp", axis=2, tiled=True)
    return f


ARGS16 = (R(B16, T16, D16), R(D16, HQ16, E16, scale=0.3), R(D16, HK16, E16, scale=0.3), R(D16, HK16, E16, scale=0.3),
          R(HQ16, E16, D16, scale=0.3))
C.smap("s.grouped_kv_linear_attn_heads.tp4", {"tp": 4}, gqa_linear_tp, (P(), P(None, "tp"), P(), P(), P("tp")), P(),
       gqa_linear, ARGS16,
       bugs=[("kv-head-of-group-zero", ["wrong-offset"]), ("scatter-without-gather", ["missing-collective"])])

# ---------------------------------------------------------------------------
# 17. DeltaNet in the chunked WY / UT form (chunks of 4 in a lax.scan, the
#     (I + diag(beta) tril(K K^T, -1))^-1 by lax.linalg.triangular_solve),
#     heads over tp4 and batch over dp2, row-parallel out projection psum'd.
B17, T17, D17, H17, E17, C17 = 4, 16, 16, 4, 4, 4


def delta_inputs(x, wq, wk, wv, wb):
    q, k, v = (jnp.einsum("btd,dhe->bhte", x, w) for w in (wq, wk, wv))
    k = k / jnp.linalg.norm(k, axis=-1, keepdims=True)
    q = q / jnp.linalg.norm(q, axis=-1, keepdims=True)
    return q, k, v, jax.nn.sigmoid(jnp.einsum("btd,dh->bht", x, wb))


def deltanet_tokens(x, wq, wk, wv, wb, wo):
    q, k, v, beta = delta_inputs(x, wq, wk, wv, wb)

    def step(S, t):
        qt, kt, vt, bt = t
        u = bt[..., None] * (vt - jnp.einsum("bhk,bhkv->bhv", kt, S))
        S = S + kt[..., :, None] * u[..., None, :]
        return S, jnp.einsum("bhk,bhkv->bhv", qt, S)
    S0 = jnp.zeros(q.shape[:2] + (E17, E17))
    _, o = lax.scan(step, S0, tuple(jnp.moveaxis(a, 2, 0) for a in (q, k, v, beta)))
    return jnp.einsum("thbe,hed->btd", jnp.swapaxes(o, 1, 2), wo)


def deltanet_wy_tp(bug):
    def f(x, wq, wk, wv, wb, wo):
        q, k, v, beta = delta_inputs(x, wq, wk, wv, wb)
        b, h, t, e = q.shape
        nc = t // C17
        ch = lambda a: jnp.moveaxis(a.reshape(b, h, nc, C17, *a.shape[3:]), 2, 0)
        eye = jnp.eye(C17, dtype=x.dtype)

        def chunk(S, c):
            qc, kc, vc, bc = c
            A = jnp.tril(jnp.einsum("bhik,bhjk->bhij", kc, kc), -1) * bc[..., :, None]
            Tv = lax.linalg.triangular_solve(eye + A, bc[..., None] * vc, left_side=True, lower=True,
                                             unit_diagonal=True)
            Tk = lax.linalg.triangular_solve(eye + A, bc[..., None] * kc, left_side=True, lower=True,
                                             unit_diagonal=True)
            U = Tv - jnp.einsum("bhik,bhkv->bhiv", Tk, S)
            qk = jnp.einsum("bhik,bhjk->bhij", qc, kc)
            qk = jnp.tril(qk, -1) if bug == "strict-tril-in-output" else jnp.tril(qk)
            o = jnp.einsum("bhik,bhkv->bhiv", qc, S) + jnp.einsum("bhij,bhjv->bhiv", qk, U)
            S = S + jnp.einsum("bhik,bhiv->bhkv", kc, Tv if bug == "state-from-uncorrected-u" else U)
            return S, o
        _, o = lax.scan(chunk, jnp.zeros((b, h, e, e)), (ch(q), ch(k), ch(v), ch(beta)))
        o = jnp.moveaxis(o, 0, 2).reshape(b, h, t, e)
        y = jnp.einsum("bhte,hed->btd", o, wo)
        return y if bug in ("no-psum-tp", "single-device") else psum(y, "tp")
    return f


ARGS17 = (R(B17, T17, D17),) + tuple(R(D17, H17, E17, scale=0.4) for _ in range(3)) + \
    (R(D17, H17, scale=0.5), R(H17, E17, D17, scale=0.3))
SPECS17 = (P("dp"), P(None, "tp"), P(None, "tp"), P(None, "tp"), P(None, "tp"), P("tp"))
C.smap("s.deltanet_chunked_wy_triangular_solve.dp2xtp4", {"dp": 2, "tp": 4}, deltanet_wy_tp, SPECS17, P("dp"),
       deltanet_tokens, ARGS17,
       bugs=[("strict-tril-in-output", ["wrong-offset"]), ("state-from-uncorrected-u", ["wrong-offset"]),
             ("no-psum-tp", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 18. RetNet chunkwise with two chunks of 4 per device in a lax.scan (the
#     scan starts from the incoming state), sequence over sp4; the incoming
#     state from a lax.associative_scan over the all_gathered (gamma^L,
#     final state) pairs, made exclusive by jnp.roll and zeroing row 0.
B18, T18, D18, H18, E18, C18 = 2, 32, 8, 2, 4, 4
GAM18 = np.array([0.9, 0.97], np.float32)


def retention_scan18(x, wq, wk, wv):
    q, k, v = (jnp.einsum("btd,dhe->bthe", x, w) for w in (wq, wk, wv))
    g = jnp.asarray(GAM18)[None, :, None, None]

    def step(S, t):
        S = g * S + t[1][..., :, None] * t[2][..., None, :]
        return S, jnp.einsum("bhk,bhkv->bhv", t[0], S)
    _, o = lax.scan(step, jnp.zeros((x.shape[0], H18, E18, E18)), tuple(jnp.moveaxis(a, 1, 0) for a in (q, k, v)))
    return jnp.moveaxis(o, 0, 1)


def chunks_from(S0, q, k, v):
    b, L = q.shape[:2]
    gam = jnp.asarray(GAM18)
    t = jnp.arange(C18, dtype=jnp.float32)
    d = t[:, None] - t[None, :]
    Dm = jnp.where(d >= 0, gam[:, None, None] ** jnp.maximum(d, 0.0), 0.0)
    ch = lambda a: jnp.moveaxis(a.reshape(b, L // C18, C18, H18, E18), 1, 0)

    def chunk(S, c):
        qc, kc, vc = c
        o = jnp.einsum("hnm,bnhk,bmhk,bmhv->bnhv", Dm, qc, kc, vc)
        o = o + jnp.einsum("nh,bnhk,bhkv->bnhv", gam[None, :] ** (t[:, None] + 1), qc, S)
        S = (gam ** C18)[None, :, None, None] * S + jnp.einsum("mh,bmhk,bmhv->bhkv",
                                                                gam[None, :] ** (C18 - 1 - t[:, None]), kc, vc)
        return S, o
    S, o = lax.scan(chunk, S0, (ch(q), ch(k), ch(v)))
    return S, jnp.moveaxis(o, 0, 1).reshape(b, L, H18, E18)


def retention_assoc_sp(bug):
    def f(x, wq, wk, wv):
        q, k, v = (jnp.einsum("btd,dhe->bthe", x, w) for w in (wq, wk, wv))
        L = x.shape[1]
        S0 = jnp.zeros((x.shape[0], H18, E18, E18))
        fin, _ = chunks_from(S0, q, k, v)
        gl = jnp.broadcast_to((jnp.asarray(GAM18) ** L)[None, :, None, None], fin.shape)
        ga, gs = lax.all_gather(gl, "sp"), lax.all_gather(fin, "sp")

        def combine(e1, e2):
            a1, s1 = e1
            a2, s2 = e2
            if bug == "combine-operands-swapped":
                return a1 * a2, a1 * s2 + s1
            return a1 * a2, a2 * s1 + s2
        _, inc_all = lax.associative_scan(combine, (ga, gs), axis=0)
        if bug == "inclusive-no-roll":
            excl = inc_all
        else:
            excl = jnp.roll(inc_all, 1, axis=0).at[0].set(0.0)
        _, o = chunks_from(excl[idx("sp")], q, k, v)
        return o
    return f


ARGS18 = (R(B18, T18, D18), R(D18, H18, E18, scale=0.4), R(D18, H18, E18, scale=0.4), R(D18, H18, E18, scale=0.4))
C.smap("s.retnet_local_chunk_scan_assoc_carry.sp4", {"sp": 4}, retention_assoc_sp, (P(None, "sp"),) + (P(),) * 3,
       P(None, "sp"), retention_scan18, ARGS18,
       bugs=[("inclusive-no-roll", ["wrong-offset"]), ("combine-operands-swapped", ["wrong-permutation"])])

# ---------------------------------------------------------------------------
# 19. RWKV-5 time mixing (per-head constant decay, bonus u, matrix state),
#     sequence over sp4, output in bf16: the token shift by a CYCLIC ppermute
#     with device 0's wrapped-around token masked to zero, the state entering
#     each device by a lax.fori_loop of n - 1 ppermute rounds (fin = w^L inc +
#     own state, handed to the next device).
B19, T19, D19, H19, E19 = 2, 16, 8, 2, 4


def rwkv5_proj(x, xprev, mu, wr, wk, wv):
    return [jnp.einsum("btd,dhe->bthe", x + (xprev - x) * mu[i], w) for i, w in enumerate((wr, wk, wv))]


LW19 = np.array([-3.0, -2.0], np.float32)  # log(-log w) per head: slow decays (w = 0.95, 0.87)


def rwkv5(x, mu, wr, wk, wv, u):
    lw = jnp.asarray(LW19)
    xprev = jnp.concatenate([jnp.zeros_like(x[:, :1]), x[:, :-1]], 1)
    r, k, v = rwkv5_proj(x, xprev, mu, wr, wk, wv)
    w = jnp.exp(-jnp.exp(lw))                                            # (H,)

    def step(S, t):
        rt, kt, vt = t
        kv = kt[..., :, None] * vt[..., None, :]
        o = jnp.einsum("bhk,bhkv->bhv", rt, S + u[None, :, :, None] * kv)
        return w[None, :, None, None] * S + kv, o
    _, o = lax.scan(step, jnp.zeros((x.shape[0], H19, E19, E19)), tuple(jnp.moveaxis(a, 1, 0) for a in (r, k, v)))
    return jnp.moveaxis(o, 0, 1).reshape(x.shape[0], x.shape[1], H19 * E19).astype(jnp.bfloat16)


def rwkv5_sp(bug):
    n = 4
    ring = [(i, (i + 1) % n) for i in range(n)]

    def f(x, mu, wr, wk, wv, u):
        lw = jnp.asarray(LW19)
        me = idx("sp")
        last = lax.ppermute(x[:, -1:], "sp", ring)
        if bug != "shift-wraps-around":
            last = jnp.where(me == 0, 0.0, last)
        xprev = jnp.concatenate([last, x[:, :-1]], 1)
        r, k, v = rwkv5_proj(x, xprev, mu, wr, wk, wv)
        L = x.shape[1]
        lwd = -jnp.exp(lw)                                               # log decay per head
        t = jnp.arange(L, dtype=jnp.float32)
        d = t[:, None] - t[None, :] - 1.0
        M = jnp.where(d >= 0, jnp.exp(lwd[:, None, None] * jnp.maximum(d, 0.0)), 0.0)   # strictly causal
        o = jnp.einsum("hnm,bnhk,bmhk,bmhv->bnhv", M, r, k, v)
        o = o + jnp.einsum("bnhk,hk,bnhk,bnhv->bnhv", r, u, k, v)
        s_loc = jnp.einsum("mh,bmhk,bmhv->bhkv", jnp.exp(lwd[None, :] * (L - 1 - t)[:, None]), k, v)
        wl = jnp.exp(lwd * L)[None, :, None, None]
        rounds = n - 2 if bug == "one-round-short" else n - 1
        inc = lax.fori_loop(0, rounds, lambda _, inc: lax.ppermute(wl * inc + s_loc, "sp", fwd(n)),
                            jnp.zeros_like(s_loc))
        o = o + jnp.einsum("nh,bnhk,bhkv->bnhv", jnp.exp(lwd[None, :] * t[:, None]), r, inc)
        return o.reshape(x.shape[0], L, H19 * E19).astype(jnp.bfloat16)
    return f


ARGS19 = (R(B19, T19, D19), (0.5 + 0.2 * R(3, D19)).astype(np.float32), R(D19, H19, E19, scale=0.4),
          R(D19, H19, E19, scale=0.4), R(D19, H19, E19, scale=0.4), R(H19, E19, scale=0.5))
C.smap("s.rwkv5_cyclic_shift_fori_chain_bf16_out.sp4", {"sp": 4}, rwkv5_sp, (P(None, "sp"),) + (P(),) * 5,
       P(None, "sp"), rwkv5, ARGS19,
       bugs=[("shift-wraps-around", ["wrong-permutation"]), ("one-round-short", ["missing-collective"])])

# ---------------------------------------------------------------------------
# 20. linear attention with a scalar data-dependent gate per head (the
#     "simple GLA" of 9.) on dp2 x sp4, the incoming state built the naive
#     way: one psum per destination device (every device adds its decayed
#     state where it is below the destination), the row of my own index kept.
B20, T20, D20, H20, E20 = 4, 16, 8, 2, 4


def sgla_proj(x, wq, wk, wv, wf):
    q, k, v = (jnp.einsum("btd,dhe->bthe", x, w) for w in (wq, wk, wv))
    return q, k, v, jax.nn.log_sigmoid(x @ wf + 2.0)


def sgla_scan(x, wq, wk, wv, wf):
    q, k, v, lf = sgla_proj(x, wq, wk, wv, wf)

    def step(S, t):
        qt, kt, vt, ft = t
        S = jnp.exp(ft)[..., None, None] * S + kt[..., :, None] * vt[..., None, :]
        return S, jnp.einsum("bhk,bhkv->bhv", qt, S)
    _, o = lax.scan(step, jnp.zeros((x.shape[0], H20, E20, E20)), tuple(jnp.moveaxis(a, 1, 0) for a in (q, k, v, lf)))
    return jnp.moveaxis(o, 0, 1)


def sgla_naive_sp(bug):
    n = 4

    def f(x, wq, wk, wv, wf):
        q, k, v, lf = sgla_proj(x, wq, wk, wv, wf)
        bc = jnp.cumsum(lf, 1)                                           # (B, L, H)
        L = x.shape[1]
        causal = jnp.tril(jnp.ones((L, L), bool))[None, :, :, None]
        dm = jnp.exp(jnp.where(causal, bc[:, :, None] - bc[:, None, :], -jnp.inf))   # (B, n, m, H)
        o = jnp.einsum("bnmh,bnhk,bmhk,bmhv->bnhv", dm, q, k, v)
        tot = bc[:, -1]
        s_loc = jnp.einsum("bmh,bmhk,bmhv->bhkv", jnp.exp(tot[:, None] - bc), k, v)
        me = idx("sp")
        gt = lax.all_gather(tot, "sp")                                   # (n, B, H)
        G = jnp.cumsum(gt, 0)
        axis = "dp" if bug == "psum-over-dp" else "sp"
        rows = []
        for dst in range(n):
            below = (me <= dst) if bug == "source-le-destination" else (me < dst)
            gap = G[max(dst - 1, 0)] - G[me]                             # decay of the devices strictly between
            c = jnp.where(below, jnp.exp(jnp.where(below, gap, 0.0))[..., None, None] * s_loc, 0.0)
            rows.append(psum(c, axis))
        inc = jnp.stack(rows)[me]
        return o + jnp.einsum("bnh,bnhk,bhkv->bnhv", jnp.exp(bc), q, inc)
    return f


ARGS20 = (R(B20, T20, D20),) + tuple(R(D20, H20, E20, scale=0.4) for _ in range(3)) + (R(D20, H20, scale=0.5),)
C.smap("s.simple_gla_psum_per_destination.dp2xsp4", {"dp": 2, "sp": 4}, sgla_naive_sp, (P("dp", "sp"),) + (P(),) * 4,
       P("dp", "sp"), sgla_scan, ARGS20,
       bugs=[("source-le-destination", ["wrong-offset"]), ("psum-over-dp", ["wrong-axis"])])

# ---------------------------------------------------------------------------
# 21. GLA output block as fla writes it: a fused RMSNorm over the WHOLE
#     head-concatenated output (heads over tp4, so the mean square needs a
#     psum over tp), times a swish gate, then the row-parallel o_proj
#     psum'd; the recurrent part a per-head scalar-decay linear attention in
#     its parallel form (no sequence sharding).
B21, T21, D21, H21, E21 = 2, 8, 16, 8, 4


def gla_norm_block(x, wq, wk, wv, wf, wg, gn, wo):
    q, k, v = (jnp.einsum("btd,dhe->bthe", x, w) for w in (wq, wk, wv))
    bc = jnp.cumsum(jax.nn.log_sigmoid(x @ wf + 2.0), 1)             # (B, T, H)
    T = x.shape[1]
    causal = jnp.tril(jnp.ones((T, T), bool))[None, :, :, None]
    dm = jnp.exp(jnp.where(causal, bc[:, :, None] - bc[:, None, :], -jnp.inf))
    o = jnp.einsum("bnmh,bnhk,bmhk,bmhv->bnhv", dm, q, k, v).reshape(x.shape[0], T, -1)
    o = o * lax.rsqrt(jnp.mean(o * o, -1, keepdims=True) + 1e-6) * gn
    return (o * jax.nn.silu(x @ wg)) @ wo


def gla_norm_tp(bug):
    def f(x, wq, wk, wv, wf, wg, gn, wo):
        q, k, v = (jnp.einsum("btd,dhe->bthe", x, w) for w in (wq, wk, wv))
        bc = jnp.cumsum(jax.nn.log_sigmoid(x @ wf + 2.0), 1)
        T = x.shape[1]
        causal = jnp.tril(jnp.ones((T, T), bool))[None, :, :, None]
        dm = jnp.exp(jnp.where(causal, bc[:, :, None] - bc[:, None, :], -jnp.inf))
        o = jnp.einsum("bnmh,bnhk,bmhk,bmhv->bnhv", dm, q, k, v).reshape(x.shape[0], T, -1)
        ss = jnp.sum(o * o, -1, keepdims=True)
        if bug == "mean-square-of-local-heads":
            ms = ss / o.shape[-1]
        elif bug == "divides-by-local-width":
            ms = psum(ss, "tp") / o.shape[-1]
        else:
            ms = psum(ss, "tp") / (o.shape[-1] * lax.psum(1, "tp"))
        o = o * lax.rsqrt(ms + 1e-6) * gn
        return psum((o * jax.nn.silu(x @ wg)) @ wo, "tp")
    return f


ARGS21 = (R(B21, T21, D21),) + tuple(R(D21, H21, E21, scale=0.3) for _ in range(3)) + \
    (R(D21, H21, scale=0.5), R(D21, H21 * E21, scale=0.3), (1.0 + 0.1 * R(H21 * E21)).astype(np.float32),
     R(H21 * E21, D21, scale=0.2))
SPECS21 = (P(), P(None, "tp"), P(None, "tp"), P(None, "tp"), P(None, "tp"), P(None, "tp"), P("tp"), P("tp"))
C.smap("s.gla_fused_rmsnorm_over_tp_heads.tp4", {"tp": 4}, gla_norm_tp, SPECS21, P(), gla_norm_block, ARGS21,
       bugs=[("mean-square-of-local-heads", ["missing-all-reduce"]), ("divides-by-local-width", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 22. bidirectional (non-causal-in-two-halves) linear attention, sequence
#     over sp4: a forward causal state from the earlier devices and a
#     backward anti-causal state from the later devices, both from one
#     all_gather of the per-device sums; exclusive prefix and exclusive suffix.
B22, T22, D22, E22 = 2, 16, 8, 4


def bidir_linear(x, wq, wk, wv, wmix):
    q, k = (jax.nn.softplus(x @ w) for w in (wq, wk))
    v = x @ wv
    kv = k[..., :, None] * v[..., None, :]
    fw = jnp.cumsum(kv, 1)
    bw = jnp.flip(jnp.cumsum(jnp.flip(kv, 1), 1), 1) - kv            # strictly after
    of = jnp.einsum("btk,btkv->btv", q, fw)
    ob = jnp.einsum("btk,btkv->btv", q, bw)
    return jnp.concatenate([of, ob], -1) @ wmix


def bidir_sp(bug):
    def f(x, wq, wk, wv, wmix):
        q, k = (jax.nn.softplus(x @ w) for w in (wq, wk))
        v = x @ wv
        kv = k[..., :, None] * v[..., None, :]
        fw = jnp.cumsum(kv, 1)
        bw = jnp.flip(jnp.cumsum(jnp.flip(kv, 1), 1), 1) - kv
        tot = lax.all_gather(fw[:, -1], "sp")                           # (n, B, K, V)
        me = idx("sp")
        j = jnp.arange(tot.shape[0])[:, None, None, None]
        before = jnp.sum(jnp.where(j < me, tot, 0.0), 0)
        after = jnp.sum(jnp.where((j < me) if bug == "backward-state-from-earlier" else (j > me), tot, 0.0), 0)
        if bug == "forward-state-from-later":
            before = jnp.sum(jnp.where(j > me, tot, 0.0), 0)
        of = jnp.einsum("btk,btkv->btv", q, fw + before[:, None])
        ob = jnp.einsum("btk,btkv->btv", q, bw + after[:, None])
        return jnp.concatenate([of, ob], -1) @ wmix
    return f


ARGS22 = (R(B22, T22, D22), R(D22, E22, scale=0.4), R(D22, E22, scale=0.4), R(D22, E22, scale=0.4),
          R(2 * E22, D22, scale=0.3))
C.smap("s.bidirectional_linear_attn_prefix_suffix.sp4", {"sp": 4}, bidir_sp, (P(None, "sp"),) + (P(),) * 4,
       P(None, "sp"), bidir_linear, ARGS22,
       bugs=[("backward-state-from-earlier", ["wrong-permutation"]), ("forward-state-from-later", ["wrong-permutation"])])

# ---------------------------------------------------------------------------
# 23. the backward pass of causal linear attention written by hand, sequence
#     over sp4 (the baseline is jax.vjp of the forward): dq needs the forward
#     prefix state S_t = sum_{m<=t} k_m v_m^T (from the earlier devices), dk
#     and dv the suffix dS_m = sum_{n>=m} q_n do_n^T (from the LATER devices,
#     a ppermute chain running i + 1 -> i).
B23, T23, E23 = 2, 32, 4


def lin_attn(q, k, v):
    S = jnp.cumsum(k[..., :, None] * v[..., None, :], 1)
    return jnp.einsum("btk,btkv->btv", q, S)


def lin_attn_bwd(q, k, v, do):
    return jax.vjp(lin_attn, q, k, v)[1](do)


def lin_attn_bwd_sp(bug):
    n = 4

    def f(q, k, v, do):
        S = jnp.cumsum(k[..., :, None] * v[..., None, :], 1)
        qd = q[..., :, None] * do[..., None, :]
        dS = jnp.flip(jnp.cumsum(jnp.flip(qd, 1), 1), 1)
        s_in = jnp.zeros_like(S[:, 0])
        d_in = jnp.zeros_like(S[:, 0])
        for _ in range(n - 1):
            s_in = lax.ppermute(s_in + S[:, -1], "sp", fwd(n))
            d_in = lax.ppermute(d_in + dS[:, 0], "sp", fwd(n) if bug == "suffix-from-earlier" else bwd(n))
        if bug == "suffix-includes-own-chunk-twice":
            d_in = d_in + dS[:, 0]
        S = S + s_in[:, None]
        dS = dS + d_in[:, None]
        dq = jnp.einsum("btv,btkv->btk", do, S)
        dk = jnp.einsum("btkv,btv->btk", dS, v)
        dv = jnp.einsum("btkv,btk->btv", dS, k)
        return dq, dk, dv
    return f


ARGS23 = (R(B23, T23, E23, scale=0.5), R(B23, T23, E23, scale=0.5), R(B23, T23, E23, scale=0.5), R(B23, T23, E23))
C.smap("s.linear_attn_manual_backward_suffix_chain.sp4", {"sp": 4}, lin_attn_bwd_sp, (P(None, "sp"),) * 4,
       (P(None, "sp"),) * 3, lin_attn_bwd, ARGS23,
       bugs=[("suffix-from-earlier", ["wrong-permutation"]), ("suffix-includes-own-chunk-twice", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 24. a plain-SGD step of a sequence-parallel causal linear attention layer
#     (elu + 1 features, normaliser) under check_vma=False, dp2 x sp4: the
#     carry by all_gather + masked sum, jax.grad through it inside the body,
#     the gradients of the replicated weights psum'd over both axes by hand
#     and divided by the token count.
B24, T24, D24, E24 = 4, 16, 8, 4


def la_layer(x, wq, wk, wv, carry=None):
    q, k = (jax.nn.elu(x @ w) + 1.0 for w in (wq, wk))
    v = x @ wv
    kv = jnp.cumsum(k[..., :, None] * v[..., None, :], 1)
    z = jnp.cumsum(k, 1)
    if carry is not None:
        kv_in, z_in = carry(kv[:, -1], z[:, -1])
        kv, z = kv + kv_in[:, None], z + z_in[:, None]
    return jnp.einsum("btk,btkv->btv", q, kv) / jnp.einsum("btk,btk->bt", q, z)[..., None]


def la_sgd(p, x, y):
    g = jax.grad(lambda p: jnp.mean(jnp.square(la_layer(x, *p) - y)))(p)
    return tuple(w - 0.5 * gw for w, gw in zip(p, g))


def la_sgd_sm(bug):
    def carry(kv_last, z_last):
        me = idx("sp")
        gkv, gz = lax.all_gather(kv_last, "sp"), lax.all_gather(z_last, "sp")
        j = jnp.arange(gkv.shape[0])
        return (jnp.sum(jnp.where((j < me)[:, None, None, None], gkv, 0.0), 0),
                jnp.sum(jnp.where((j < me)[:, None, None], gz, 0.0), 0))

    def f(p, x, y):
        ntok = y.size * 8                                               # elements of the global (B, T, E) target
        g = jax.grad(lambda p: jnp.sum(jnp.square(la_layer(x, *p, carry=carry) - y)))(p)
        if bug == "grads-psum-dp-only":
            g = tuple(psum(gw, "dp") / ntok for gw in g)
        else:
            g = tuple(psum(gw, ("dp", "sp")) / ntok for gw in g)
        return tuple(w - 0.5 * gw for w, gw in zip(p, g))
    return f


ARGS24 = ((R(D24, E24, scale=0.4), R(D24, E24, scale=0.4), R(D24, E24, scale=0.4)), R(B24, T24, D24),
          R(B24, T24, E24, scale=0.5))
C.smap("s.linear_attn_sgd_grad_through_all_gather.dp2xsp4", {"dp": 2, "sp": 4}, la_sgd_sm,
       ((P(), P(), P()), P("dp", "sp"), P("dp", "sp")), (P(), P(), P()), la_sgd, ARGS24,
       bugs=[("grads-psum-dp-only", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 25. causal linear attention entirely in bf16 (features, states, the
#     cross-device prefix), sequence over sp8: the distributed sums run in a
#     different order than the baseline's cumsum, so the pair agrees at bf16
#     rounding level only; the prefix as all_gather + cumsum - own.
B25, T25, D25, E25 = 2, 32, 8, 4


def bf16_linear(x, wq, wk, wv):
    xb = x.astype(jnp.bfloat16)
    q, k = (jax.nn.relu(xb @ w.astype(jnp.bfloat16)) for w in (wq, wk))
    v = xb @ wv.astype(jnp.bfloat16)
    kv = jnp.cumsum(k[..., :, None] * v[..., None, :], 1)
    return jnp.einsum("btk,btkv->btv", q, kv)


def bf16_linear_sp(bug):
    def f(x, wq, wk, wv):
        xb = x.astype(jnp.bfloat16)
        q, k = (jax.nn.relu(xb @ w.astype(jnp.bfloat16)) for w in (wq, wk))
        v = xb @ wv.astype(jnp.bfloat16)
        kv = jnp.cumsum(k[..., :, None] * v[..., None, :], 1)
        g = lax.all_gather(kv[:, -1], "sp")
        me = idx("sp")
        inc = jnp.cumsum(g, 0)[me] - (0 if bug == "prefix-inclusive" else g[me])
        return jnp.einsum("btk,btkv->btv", q, kv + inc[:, None])
    return f


ARGS25 = (R(B25, T25, D25), R(D25, E25, scale=0.5), R(D25, E25, scale=0.5), R(D25, E25, scale=0.5))
C.smap("s.bf16_linear_attn_gathered_prefix.sp8", {"sp": 8}, bf16_linear_sp, (P(None, "sp"),) + (P(),) * 3,
       P(None, "sp"), bf16_linear, ARGS25, bugs=[("prefix-inclusive", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# GSPMD pairs (correct only).
C.gspmd("g.retnet_scan_seq_sharded.sp4", {"sp": 4}, (P(None, "sp"),) + (P(),) * 4, P(None, "sp"), retention_scan,
        ARGS1)
C.gspmd("g.retnet_msr_parallel.sp2xtp4", {"sp": 2, "tp": 4}, SPECS2, P(None, "sp"), msr_parallel, ARGS2)
C.gspmd("g.gla_scan_heads_tp.tp2", {"tp": 2}, (P(),) + (P(None, "tp"),) * 4, P(None, None, "tp"), gla_scan, ARGS3)
C.gspmd("g.gated_delta_rule_heads_tp.dp2xtp2", {"dp": 2, "tp": 2},
        (P("dp"), P(None, "tp"), P(None, "tp"), P(None, "tp"), P(None, "tp"), P(None, "tp"), P("tp")), P("dp"),
        gdn_layer, ARGS4)
C.gspmd("g.rwkv6_time_mix.dp2xsp4", {"dp": 2, "sp": 4}, SPECS5, P("dp", "sp"), rwkv6_tmix, ARGS5)
C.gspmd("g.hyena_fft_longconv.sp4", {"sp": 4}, (P(None, "sp"),) + (P(),) * 5, P(None, "sp"), hyena, ARGS6)
C.gspmd("g.based_taylor_cumsum.dp2xsp4", {"dp": 2, "sp": 4}, (P("dp", "sp"),) + (P(),) * 4, P("dp", "sp"), based,
        ARGS7)
C.gspmd("g.lightning_attn_decay_mask.sp8", {"sp": 8}, (P(None, "sp"),) + (P(),) * 3, P(None, "sp"), lightning, ARGS8)
C.gspmd("g.simple_gla_train_step_adamw.dp2xtp4", {"dp": 2, "tp": 4}, (SPEC9, SS9, P("dp"), P("dp")),
        (SPEC9, SS9, P()), step9, ARGS9)
C.gspmd("g.retention_decode_bf16.tp8", {"tp": 8},
        (P(), P(None, "tp"), P(None, "tp"), P(None, "tp"), P(None, "tp"), P("tp")), (P(), P(None, "tp")),
        ret_decode, ARGS10)
C.gspmd("g.mlstm_scan.sp4", {"sp": 4}, (P(None, "sp"),) + (P(),) * 5, P(None, "sp"), mlstm, ARGS11)
C.gspmd("g.deltanet_short_conv.sp8", {"sp": 8}, (P(None, "sp"), P(), P()), P(None, "sp"), short_conv_keys, ARGS12)
C.gspmd("g.hyena_implicit_filter.dp2xsp4", {"dp": 2, "sp": 4}, (P("dp", "sp"), P(), P(), P(), P()), P("dp", "sp"),
        hyena_implicit, ARGS13)
C.gspmd("g.retnet_scan_train_step_sgd.dp2xsp4", {"dp": 2, "sp": 4}, ({k: P() for k in K14}, SS14, P("dp", "sp"),
        P("dp", "sp")), ({k: P() for k in K14}, SS14, P()), ret_step, (P14, S14, X14, Y14))
C.gspmd("g.retention_global_positions.sp4", {"sp": 4}, (P(None, "sp"),) + (P(),) * 3, P(None, "sp"),
        retention_global, ARGS15)
C.gspmd("g.grouped_kv_linear_attn.tp4", {"tp": 4}, (P(), P(None, "tp"), P(), P(), P("tp")), P(),
        gqa_linear, ARGS16)
C.gspmd("g.deltanet_tokens_heads_tp.dp2xtp4", {"dp": 2, "tp": 4}, SPECS17, P("dp"), deltanet_tokens, ARGS17)
C.gspmd("g.deltanet_wy_chunked.dp2xtp4", {"dp": 2, "tp": 4}, SPECS17, P("dp"),
        deltanet_wy_tp("single-device"), ARGS17)
C.gspmd("g.rwkv5_bf16_out.sp4", {"sp": 4}, (P(None, "sp"),) + (P(),) * 5, P(None, "sp"), rwkv5, ARGS19)
C.gspmd("g.simple_gla_scan.dp2xsp4", {"dp": 2, "sp": 4}, (P("dp", "sp"),) + (P(),) * 4, P("dp", "sp"), sgla_scan,
        ARGS20)
C.gspmd("g.gla_fused_rmsnorm_heads.tp4", {"tp": 4}, SPECS21, P(), gla_norm_block, ARGS21)
C.gspmd("g.bidirectional_linear_attn.sp4", {"sp": 4}, (P(None, "sp"),) + (P(),) * 4, P(None, "sp"), bidir_linear,
        ARGS22)
C.gspmd("g.linear_attn_vjp.sp4", {"sp": 4}, (P(None, "sp"),) * 4, (P(None, "sp"),) * 3, lin_attn_bwd, ARGS23)
C.gspmd("g.linear_attn_sgd_step.dp2xsp4", {"dp": 2, "sp": 4}, ((P(), P(), P()), P("dp", "sp"), P("dp", "sp")),
        (P(), P(), P()), la_sgd, ARGS24)
C.gspmd("g.bf16_linear_attn_cumsum.sp8", {"sp": 8}, (P(None, "sp"),) + (P(),) * 3, P(None, "sp"), bf16_linear,
        ARGS25)
C.finish()
