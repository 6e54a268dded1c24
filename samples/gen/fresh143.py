"""samples/fresh143: a 143rd batch of programs as a user writes them, on the theme of recurrent and state-space models as current open-source JAX code writes them: linear recurrences by jax.lax.associative_scan (LRU / S5-style diagonal SSMs, complex and real, ZOH discretisation), a Mamba-style selective scan (input-dependent dt / B / C, discretisation by exp, lax.scan over time) with the inner dim over tp, a Mamba-2-style head-wise scalar-decay scan with the heads over tp and a gated RMSNorm, Griffin's RG-LRU, an LSTM and a GRU by jax.lax.scan (batch over dp; hidden units column-parallel over tp with an all_gather of h each step), causal linear attention by cumsum with the heads over tp, RWKV-4 time mixing (token shift, decay and bonus), sequence-parallel recurrences where each device scans its time chunk and the carries pass between devices (a ppermute chain, or an all_gather of the chunk-final states plus a prefix combine), and training steps (value_and_grad through the scans, optax adam / adamw, global-norm clipping) under dp, dp x sp and dp x tp.
Sizes: model widths 8-32, state sizes 8-16, sequences 10-32 steps, batch
2-16, tp4 / sp4 / sp8 / dp8 meshes on 8 CPU devices. Optimizer states are
warmed by two single-device steps, so a gradient's scale reaches the update.
shard_map families (bugs in brackets):
 1. LRU layer (dp2 x tp4): complex diagonal recurrence lambda = exp(-exp(nu)
    + i exp(theta)), gamma-normalised complex B, associative_scan over time,
    y = Re(C h) + D x, x + gelu(y); the state dim over tp, Re(C h) psum'd
    over tp. [the skip term D x added before the psum (counted four times);
    the psum over dp instead of tp.]
 2. Mamba (v1) block forward (dp2 x tp4, d_inner over tp): in_proj
    column-parallel to x and z, causal depthwise conv1d (width 4) and silu,
    x_proj row-parallel (psum over tp) to dt_low / B / C, dt_proj
    column-parallel with softplus, dA = exp(dt A), selective scan by lax.scan,
    D skip, silu(z) gate, out_proj row-parallel with a psum. [x_proj's
    partial sums not psum'd (B, C, dt from the local channels); the conv
    padded on the right (anticausal).]
 3. LSTM sequence-regression training step (dp8): fused-gate LSTM by
    lax.scan over time with a length mask (carry frozen on padding), a
    per-step head, masked MSE over the global count of valid steps (psum of
    the local counts; lengths sorted, so devices differ), gradients psum'd,
    chain(clip_by_global_norm, adam), warmed. [the loss over the local count
    of valid steps with the gradients pmean'd; the gradients pmean'd
    instead of psum'd.]
 4. GRU forward with the hidden units column-parallel (dp2 x tp4): gate
    weights [in, 3, H] split over H, each step the local slice of r / z / n
    from the full h, all_gather of the new local h over tp, the hidden
    sequence out hidden-sharded and a row-parallel readout of the last
    state. [the all_gather along the batch axis reshaped to [B, H] (wrong
    layout); the previous h's local slice taken without the rank offset.]
 5. causal linear attention (dp2 x tp4, heads over tp): elu+1 feature map,
    running K V^T and K sums by cumsum over time, per-head normaliser,
    out-projection row-parallel with a psum. [no psum after the
    out-projection; the normaliser psum'd over tp (summed across heads).]
 6. RWKV-4 time mixing, sequence parallel (dp2 x sp4): token shift with the
    previous device's last token by ppermute, receptance / key / value,
    WKV numerator and denominator recurrences (decay exp(-w), bonus u)
    scanned per chunk from zero, chunk-final states all_gather'd over sp and
    the incoming state summed with decay powers exp(-w L (d-1-j)), the local
    states corrected by exp(-w t) times it. [the shifted token taken from
    the next device (perm reversed); the incoming state summed without the
    decay powers.]
 7. Griffin RG-LRU, sequence parallel over sp8: recurrence and input gates,
    a = sigmoid(Lambda)^(8 r) by exp of log-sigmoid, sqrt(1 - a^2) input
    scaling, associative_scan per time chunk, the carries passed down a
    ppermute chain (n-1 rounds of carry = ppermute(A_chunk carry + h_chunk)),
    h corrected by the within-chunk cumulative decay times the carry.
    [the chain's permutation cyclic (device 0 receives the last device's
    state); the carry added without the cumulative decay.]
 8. S5 (real diagonal, ZOH) training step, dp2 x sp4 (time over sp):
    associative_scan per chunk, chunk-final states all_gather'd over sp and
    combined by an associative_scan over chunks, the exclusive prefix taken
    as the carry, gelu readout, MSE over the global batch, gradients psum'd
    over (dp, sp), chain(clip_by_global_norm, adamw), warmed. [the
    inclusive prefix (the device's own chunk counted in its carry); the
    gradients psum'd over dp only.]
 9. Mamba-2-style training step (dp2 x tp4, heads over tp, check_vma=True
    so jax.grad reduces the replicated parameters' gradients): x / z
    projections and dt per head column-parallel, B / C shared by all heads
    (replicated), scalar decay per head, associative_scan over time, D skip,
    gated RMSNorm over the full inner dim (sum of squares psum'd over tp),
    out-projection row-parallel; a tp-aware global-norm clip (the sharded
    leaves' squares psum'd over tp) then adamw, warmed. [the RMSNorm
    statistic over the local heads only; the clip's replicated leaves'
    squares psum'd over tp with the sharded ones (counted four times in the
    norm, a smaller clip scale).]
GSPMD pairs (jax.jit with NamedSharding in / out shardings; correct):
 10. LRU forward, batch over dp2, state dim over tp4;
 11. Mamba block training step (clip + adamw), batch over dp2, d_inner over
     tp4;
 12. masked LSTM training step (clip + adam), batch over dp8;
 13. causal linear attention forward, batch over dp2, heads over tp4;
 14. RWKV-4 time mixing forward, batch over dp2, channels over tp4;
 15. S5 training step (clip + adamw) with the time axis over sp4 and the
     batch over dp2.
Numerics: f32 (complex64 in the LRU) throughout; correct pairs agree at
about 1e-6; bug variants differ clearly.
Run from the repository root: bash samples/gen/run_fresh143.sh [SUBSTR...]
"""
import sys
import numpy as np
import jax, jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec as P
import optax
sys.path.insert(0, "samples/gen")  # run from the repository root (run_fresh143.sh)
from fresh_lib import Corpus, seeded, state_specs  # noqa: E402

SCRIPT = "samples/gen/fresh143.py"
C = Corpus("samples/fresh143", SCRIPT, "samples/gen/run_fresh143.sh", sys.argv[1:])
rng, R, I = seeded(143143)
psum, pmean, idx, ppermute, all_gather = lax.psum, lax.pmean, lax.axis_index, lax.ppermute, lax.all_gather
f32 = jnp.float32


def U(lo, hi, *s):
    return rng.uniform(lo, hi, s).astype(np.float32)


# ---------------------------------------------------------------------------
# shared pieces


def binop(e1, e2):
    """the associative operator of h_t = a_t h_{t-1} + b_t on (a, b) pairs."""
    a1, b1 = e1
    a2, b2 = e2
    return a2 * a1, a2 * b1 + b2


def linear_scan(a, b, axis=1):
    """(cumulative product of a, h) of h_t = a_t h_{t-1} + b_t from h = 0, along axis."""
    return lax.associative_scan(binop, (jnp.broadcast_to(a, b.shape), b), axis=axis)


def warm(step, params, state, *data, times=2):
    j = jax.jit(step)
    for _ in range(times):
        params, state, _ = j(params, state, *data)
    return jax.tree.map(np.asarray, params), jax.tree.map(np.asarray, state)


def sq_norm(tree):
    return sum(jnp.sum(jnp.square(g)) for g in jax.tree.leaves(tree))


# ---------------------------------------------------------------------------
# 1. LRU (complex diagonal) by associative_scan, state dim over tp.
B1, L1, H1, N1 = 8, 16, 16, 32


def lru_params(h=H1, n=N1):
    r = U(0.6, 0.99, n)
    theta = U(0.05, np.pi / 4, n)
    nu_log = np.log(-np.log(r)).astype(np.float32)
    th_log = np.log(theta).astype(np.float32)
    g_log = np.log(np.sqrt(1 - r ** 2)).astype(np.float32)
    s = (2 * h) ** -0.5
    return (nu_log, th_log, g_log, R(n, h, scale=s), R(n, h, scale=s), R(h, n, scale=n ** -0.5),
            R(h, n, scale=n ** -0.5), R(h))


def lru_core(x, nu_log, th_log, g_log, b_re, b_im, c_re, c_im):
    """Re(C h) with h_t = lambda h_{t-1} + B_norm x_t over the (possibly local) state dims."""
    lam = jnp.exp(-jnp.exp(nu_log) + 1j * jnp.exp(th_log))
    b = (b_re + 1j * b_im) * jnp.exp(g_log)[:, None]
    bu = jnp.einsum("blh,nh->bln", x.astype(jnp.complex64), b)
    _, h = linear_scan(lam, bu, axis=1)
    return jnp.einsum("bln,hn->blh", h, c_re + 1j * c_im).real


def lru_ref(x, nu_log, th_log, g_log, b_re, b_im, c_re, c_im, d):
    y = lru_core(x, nu_log, th_log, g_log, b_re, b_im, c_re, c_im) + d * x
    return x + jax.nn.gelu(y)


def lru_tp(bug):
    def f(x, nu_log, th_log, g_log, b_re, b_im, c_re, c_im, d):
        part = lru_core(x, nu_log, th_log, g_log, b_re, b_im, c_re, c_im)
        if bug == "skip-inside-psum":
            y = psum(part + d * x, "tp")
        elif bug == "psum-over-dp":
            y = psum(part, "dp") + d * x
        else:
            y = psum(part, "tp") + d * x
        return x + jax.nn.gelu(y)
    return f


LRU_SPECS = (P("tp"), P("tp"), P("tp"), P("tp"), P("tp"), P(None, "tp"), P(None, "tp"), P())
C.smap("s.lru_complex_diag_associative_scan_state_tp.dp2xtp4", {"dp": 2, "tp": 4}, lru_tp,
       (P("dp"),) + LRU_SPECS, P("dp"), lru_ref, (R(B1, L1, H1),) + lru_params(),
       bugs=[("skip-inside-psum", ["wrong-scale", "duplicated-term"]), ("psum-over-dp", ["wrong-axis"])])

# ---------------------------------------------------------------------------
# 2. Mamba (v1) block, d_inner over tp.
B2, L2, D2, DI2, N2, R2, K2 = 4, 16, 16, 32, 8, 4, 4


def mamba_params():
    dt0 = np.exp(U(np.log(0.01), np.log(0.5), DI2))
    return {"w_in": R(D2, 2, DI2, scale=D2 ** -0.5), "conv_w": R(K2, DI2, scale=0.5), "conv_b": R(DI2, scale=0.1),
            "w_x": R(DI2, R2 + 2 * N2, scale=DI2 ** -0.5), "w_dt": R(R2, DI2, scale=R2 ** -0.5),
            "b_dt": np.log(np.expm1(dt0)).astype(np.float32),
            "a_log": np.log(np.tile(np.arange(1, N2 + 1, dtype=np.float32), (DI2, 1))),
            "d": np.ones(DI2, np.float32), "w_out": R(DI2, D2, scale=DI2 ** -0.5)}


MAMBA_SPECS = {"w_in": P(None, None, "tp"), "conv_w": P(None, "tp"), "conv_b": P("tp"), "w_x": P("tp", None),
               "w_dt": P(None, "tp"), "b_dt": P("tp"), "a_log": P("tp", None), "d": P("tp"), "w_out": P("tp", None)}


def causal_conv1d(x, w, b, anticausal=False):
    """depthwise conv over time of x [B, L, C] with w [K, C]: out_t = sum_k w_k x_{t-K+1+k}."""
    k, l = w.shape[0], x.shape[1]
    pad = (0, k - 1) if anticausal else (k - 1, 0)
    xp = jnp.pad(x, ((0, 0), pad, (0, 0)))
    return sum(xp[:, i:i + l] * w[i] for i in range(k)) + b


def selective_scan(u, dt, a, b, c, d):
    """Mamba's selective_scan_ref: u, dt [B, L, Di], a [Di, N], b, c [B, L, N]."""
    da = jnp.exp(dt[..., None] * a)                                    # [B, L, Di, N]
    dbu = (dt * u)[..., None] * b[:, :, None, :]

    def step(h, inp):
        da_t, dbu_t, c_t = inp
        h = da_t * h + dbu_t
        return h, jnp.einsum("bdn,bn->bd", h, c_t)
    h0 = jnp.zeros((u.shape[0],) + a.shape, u.dtype)
    _, ys = lax.scan(step, h0, (jnp.swapaxes(da, 0, 1), jnp.swapaxes(dbu, 0, 1), jnp.swapaxes(c, 0, 1)))
    return jnp.swapaxes(ys, 0, 1) + u * d


def mamba_mixer(p, x, reduce_x=lambda t: t, reduce_out=lambda t: t, anticausal=False):
    """reduce_x / reduce_out: the all-reduces after the row-parallel x_proj / out_proj (identity on one
    device)."""
    xz = jnp.einsum("bld,dkc->blkc", x, p["w_in"])
    xs, z = xz[:, :, 0], xz[:, :, 1]
    xs = jax.nn.silu(causal_conv1d(xs, p["conv_w"], p["conv_b"], anticausal))
    dbc = reduce_x(xs @ p["w_x"])
    dt_low, b, c = dbc[..., :R2], dbc[..., R2:R2 + N2], dbc[..., R2 + N2:]
    dt = jax.nn.softplus(dt_low @ p["w_dt"] + p["b_dt"])
    y = selective_scan(xs, dt, -jnp.exp(p["a_log"]), b, c, p["d"])
    y = y * jax.nn.silu(z)
    return reduce_out(y @ p["w_out"])


def mamba_ref(p, x):
    return x + mamba_mixer(p, x)


def mamba_tp(bug):
    def f(p, x):
        tp_sum = lambda t: psum(t, "tp")  # noqa: E731
        reduce_x = (lambda t: t) if bug == "x-proj-no-psum" else tp_sum
        return x + mamba_mixer(p, x, reduce_x, tp_sum, anticausal=bug == "conv-pad-right")
    return f


C.smap("s.mamba_selective_scan_inner_dim_tp.dp2xtp4", {"dp": 2, "tp": 4}, mamba_tp,
       (MAMBA_SPECS, P("dp")), P("dp"), mamba_ref, (mamba_params(), R(B2, L2, D2)),
       bugs=[("x-proj-no-psum", ["missing-all-reduce"]), ("conv-pad-right", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 3. masked LSTM training step, dp8.
B3, L3, DIN3, H3, DOUT3 = 16, 12, 8, 16, 4
OPT3 = optax.chain(optax.clip_by_global_norm(1.0), optax.adam(1e-2))


def lstm_params(din=DIN3, h=H3, dout=DOUT3):
    return {"wx": R(din, 4 * h, scale=din ** -0.5), "wh": R(h, 4 * h, scale=h ** -0.5),
            "b": np.zeros(4 * h, np.float32), "wo": R(h, dout, scale=h ** -0.5), "bo": np.zeros(dout, np.float32)}


def lstm_apply(p, x, mask):
    """x [B, L, in], mask [B, L]: h / c frozen where mask is 0; per-step head."""
    hdim = p["wh"].shape[0]

    def step(carry, inp):
        h, c = carry
        xt, mt = inp
        g = xt @ p["wx"] + h @ p["wh"] + p["b"]
        i, f, gg, o = jnp.split(g, 4, -1)
        c_new = jax.nn.sigmoid(f + 1.0) * c + jax.nn.sigmoid(i) * jnp.tanh(gg)
        h_new = jax.nn.sigmoid(o) * jnp.tanh(c_new)
        m = mt[:, None]
        h, c = jnp.where(m, h_new, h), jnp.where(m, c_new, c)
        return (h, c), h
    z = jnp.zeros((x.shape[0], hdim), x.dtype)
    _, hs = lax.scan(step, (z, z), (jnp.swapaxes(x, 0, 1), jnp.swapaxes(mask, 0, 1)))
    return jnp.swapaxes(hs, 0, 1) @ p["wo"] + p["bo"]


def lstm_sse(p, x, t, mask):
    err = jnp.sum(jnp.square(lstm_apply(p, x, mask) - t), -1)
    return jnp.sum(jnp.where(mask, err, 0.0))


def lstm_step(params, state, x, t, lens):
    mask = jnp.arange(x.shape[1])[None, :] < lens[:, None]
    loss, g = jax.value_and_grad(lambda p: lstm_sse(p, x, t, mask) / jnp.sum(mask))(params)
    upd, state = OPT3.update(g, state, params)
    return optax.apply_updates(params, upd), state, loss


def lstm_step_dp(bug):
    def f(params, state, x, t, lens):
        mask = jnp.arange(x.shape[1])[None, :] < lens[:, None]
        if bug == "local-token-count":
            cnt = jnp.sum(mask)
        else:
            cnt = psum(jnp.sum(mask), "dp")
        loss, g = jax.value_and_grad(lambda p: lstm_sse(p, x, t, mask) / cnt)(params)
        if bug in ("local-token-count", "grads-pmean"):
            g, loss = pmean(g, "dp"), pmean(loss, "dp")
        else:
            g, loss = psum(g, "dp"), psum(loss, "dp")
        upd, state = OPT3.update(g, state, params)
        return optax.apply_updates(params, upd), state, loss
    return f


def lstm_batch(b=B3):
    lens = np.sort(I(2, L3 + 1, b))[::-1].copy()
    return R(b, L3, DIN3), R(b, L3, DOUT3, scale=0.5), lens


P3 = lstm_params()
P3, S3 = warm(lstm_step, P3, OPT3.init(P3), *lstm_batch())
PS3 = jax.tree.map(lambda _: P(), P3)
C.smap("s.lstm_masked_seq_train_step_adam_clip.dp8", {"dp": 8}, lstm_step_dp,
       (PS3, state_specs(S3, PS3), P("dp"), P("dp"), P("dp")), (PS3, state_specs(S3, PS3), P()), lstm_step,
       (P3, S3) + lstm_batch(),
       bugs=[("local-token-count", ["local-statistic", "wrong-denominator"]),
             ("grads-pmean", ["wrong-collective-op", "wrong-scale"])])

# ---------------------------------------------------------------------------
# 4. GRU with the hidden units column-parallel over tp.
B4, L4, DIN4, H4, DOUT4 = 8, 10, 8, 32, 8


def gru_params():
    return (R(DIN4, 3, H4, scale=DIN4 ** -0.5), R(H4, 3, H4, scale=H4 ** -0.5), R(3, H4, scale=0.1),
            R(3, H4, scale=0.1), R(H4, DOUT4, scale=H4 ** -0.5))


def gru_gates(gx, gh, h_prev):
    """PyTorch GRU: gx, gh [B, 3, h] (input / hidden projections with their biases)."""
    r = jax.nn.sigmoid(gx[:, 0] + gh[:, 0])
    z = jax.nn.sigmoid(gx[:, 1] + gh[:, 1])
    n = jnp.tanh(gx[:, 2] + r * gh[:, 2])
    return (1 - z) * n + z * h_prev


def gru_ref(x, wx, wh, bx, bh, wy):
    gx = jnp.einsum("bli,igh->blgh", x, wx) + bx

    def step(h, gxt):
        h = gru_gates(gxt, jnp.einsum("bj,jgh->bgh", h, wh) + bh, h)
        return h, h
    h, hs = lax.scan(step, jnp.zeros((x.shape[0], wh.shape[0]), x.dtype), jnp.swapaxes(gx, 0, 1))
    return jnp.swapaxes(hs, 0, 1), h @ wy


def gru_tp(bug):
    def f(x, wx, wh, bx, bh, wy):
        hl = wh.shape[-1]
        off = 0 if bug == "carry-slice-no-offset" else idx("tp") * hl
        gx = jnp.einsum("bli,igh->blgh", x, wx) + bx                  # this rank's hidden units

        def step(h, gxt):
            h_loc = gru_gates(gxt, jnp.einsum("bj,jgh->bgh", h, wh) + bh, lax.dynamic_slice_in_dim(h, off, hl, 1))
            if bug == "gather-batch-axis":
                h = all_gather(h_loc, "tp", axis=0, tiled=True).reshape(h.shape)
            else:
                h = all_gather(h_loc, "tp", axis=1, tiled=True)
            return h, h_loc
        _, hs = lax.scan(step, jnp.zeros((x.shape[0], wh.shape[0]), x.dtype), jnp.swapaxes(gx, 0, 1))
        return jnp.swapaxes(hs, 0, 1), psum(hs[-1] @ wy, "tp")
    return f


C.smap("s.gru_hidden_column_parallel_all_gather_h.dp2xtp4", {"dp": 2, "tp": 4}, gru_tp,
       (P("dp"), P(None, None, "tp"), P(None, None, "tp"), P(None, "tp"), P(None, "tp"), P("tp")),
       (P("dp", None, "tp"), P("dp")), gru_ref, (R(B4, L4, DIN4),) + gru_params(),
       bugs=[("gather-batch-axis", ["wrong-layout", "wrong-reshape-order"]),
             ("carry-slice-no-offset", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 5. causal linear attention by cumsum, heads over tp.
B5, L5, D5, NH5, DH5 = 4, 16, 16, 8, 4


def phi(t):
    return jax.nn.elu(t) + 1.0


def linear_attention_heads(x, wq, wk, wv, norm=lambda t: t):
    q = phi(jnp.einsum("bld,dhe->blhe", x, wq))
    k = phi(jnp.einsum("bld,dhe->blhe", x, wk))
    v = jnp.einsum("bld,dhe->blhe", x, wv)
    kv = jnp.cumsum(jnp.einsum("blhd,blhe->blhde", k, v), axis=1)
    ksum = jnp.cumsum(k, axis=1)
    num = jnp.einsum("blhd,blhde->blhe", q, kv)
    den = norm(jnp.einsum("blhd,blhd->blh", q, ksum))
    return num / (den[..., None] + 1e-6)


def linattn_ref(x, wq, wk, wv, wo):
    return x + jnp.einsum("blhe,hed->bld", linear_attention_heads(x, wq, wk, wv), wo)


def linattn_tp(bug):
    def f(x, wq, wk, wv, wo):
        norm = (lambda t: psum(t, "tp")) if bug == "normaliser-psum-over-tp" else (lambda t: t)
        o = jnp.einsum("blhe,hed->bld", linear_attention_heads(x, wq, wk, wv, norm), wo)
        return x + (o if bug == "no-out-psum" else psum(o, "tp"))
    return f


W5 = (R(D5, NH5, DH5, scale=D5 ** -0.5), R(D5, NH5, DH5, scale=D5 ** -0.5), R(D5, NH5, DH5, scale=D5 ** -0.5),
      R(NH5, DH5, D5, scale=(NH5 * DH5) ** -0.5))
C.smap("s.causal_linear_attention_cumsum_heads_tp.dp2xtp4", {"dp": 2, "tp": 4}, linattn_tp,
       (P("dp"), P(None, "tp"), P(None, "tp"), P(None, "tp"), P("tp")), P("dp"), linattn_ref,
       (R(B5, L5, D5),) + W5,
       bugs=[("no-out-psum", ["missing-all-reduce"]), ("normaliser-psum-over-tp", ["extra-reduction"])])

# ---------------------------------------------------------------------------
# 6. RWKV-4 time mixing, sequence parallel over sp.
B6, L6, C6 = 4, 32, 16


def rwkv_params(c=C6):
    return {"mu_k": U(0.2, 0.9, c), "mu_v": U(0.2, 0.9, c), "mu_r": U(0.2, 0.9, c),
            "w_log": np.log(U(0.1, 1.0, c)), "u": R(c, scale=0.5),
            "wk": R(c, c, scale=0.3 * c ** -0.5), "wv": R(c, c, scale=c ** -0.5), "wr": R(c, c, scale=c ** -0.5),
            "wo": R(c, c, scale=c ** -0.5)}


def token_shift(x):
    return jnp.pad(x, ((0, 0), (1, 0), (0, 0)))[:, :-1]


def rwkv_proj(p, x, xx):
    mix = lambda mu: x * mu + xx * (1 - mu)  # noqa: E731
    return mix(p["mu_k"]) @ p["wk"], mix(p["mu_v"]) @ p["wv"], mix(p["mu_r"]) @ p["wr"]


def wkv_local(w, k, v):
    """numerator / denominator states before each step (from zero) and after the last one."""
    decay, ek = jnp.exp(-w), jnp.exp(k)
    _, a = linear_scan(decay, ek * v)
    _, b = linear_scan(decay, ek)
    return token_shift(a), token_shift(b), a[:, -1], b[:, -1]


def rwkv_out(p, x, k, v, r, a_prev, b_prev):
    eu = jnp.exp(p["u"] + k)
    wkv = (a_prev + eu * v) / (b_prev + eu)
    return x + (jax.nn.sigmoid(r) * wkv) @ p["wo"]


def rwkv_ref(p, x):
    k, v, r = rwkv_proj(p, x, token_shift(x))
    a_prev, b_prev, _, _ = wkv_local(jnp.exp(p["w_log"]), k, v)
    return rwkv_out(p, x, k, v, r, a_prev, b_prev)


def rwkv_sp(bug):
    def f(p, x):
        n, d, lc = 4, idx("sp"), x.shape[1]
        perm = [(i + 1, i) for i in range(n - 1)] if bug == "shift-from-next-device" else \
            [(i, i + 1) for i in range(n - 1)]
        xx = jnp.concatenate([ppermute(x[:, -1:], "sp", perm), x[:, :-1]], 1)
        k, v, r = rwkv_proj(p, x, xx)
        w = jnp.exp(p["w_log"])
        a_prev, b_prev, a_fin, b_fin = wkv_local(w, k, v)
        j = jnp.arange(n)
        if bug == "carry-no-decay":
            wt = jnp.where(j[:, None] < d, 1.0, 0.0) * jnp.ones_like(w)
        else:
            wt = jnp.where(j[:, None] < d, jnp.exp(-w * lc * jnp.maximum(d - 1 - j, 0)[:, None]), 0.0)   # [n, C]
        a_in = jnp.einsum("jc,jbc->bc", wt, all_gather(a_fin, "sp"))
        b_in = jnp.einsum("jc,jbc->bc", wt, all_gather(b_fin, "sp"))
        dec = jnp.exp(-w * jnp.arange(lc)[:, None])                                   # [L, C]
        return rwkv_out(p, x, k, v, r, a_prev + dec * a_in[:, None], b_prev + dec * b_in[:, None])
    return f


PS6 = jax.tree.map(lambda _: P(), rwkv_params())
C.smap("s.rwkv4_time_mix_seq_parallel_allgather_carry.dp2xsp4", {"dp": 2, "sp": 4}, rwkv_sp,
       (PS6, P("dp", "sp")), P("dp", "sp"), rwkv_ref, (rwkv_params(), R(B6, L6, C6)),
       bugs=[("shift-from-next-device", ["wrong-permutation", "wrong-direction"]),
             ("carry-no-decay", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 7. Griffin RG-LRU, sequence parallel over sp8 with a ppermute chain of carries.
B7, L7, H7, RG_C = 2, 32, 16, 8.0


def rglru_params(h=H7):
    lam = np.log(1 / (1 - U(0.8, 0.99, h)) - 1).astype(np.float32)   # sigmoid(lam) in [0.8, 0.99]
    return {"wa": R(h, h, scale=h ** -0.5), "ba": R(h, scale=0.1), "wx": R(h, h, scale=h ** -0.5),
            "bx": R(h, scale=0.1), "lam": lam, "wo": R(h, h, scale=h ** -0.5)}


def rglru_coeffs(p, x):
    r = jax.nn.sigmoid(x @ p["wa"] + p["ba"])
    i = jax.nn.sigmoid(x @ p["wx"] + p["bx"])
    log_a = -RG_C * r * jax.nn.softplus(-p["lam"])
    a = jnp.exp(log_a)
    return a, jnp.sqrt(1 - jnp.exp(2 * log_a)) * (i * x)


def rglru_ref(p, x):
    a, b = rglru_coeffs(p, x)
    _, h = linear_scan(a, b)
    return x + h @ p["wo"]


def rglru_sp(bug):
    def f(p, x):
        n = 8
        a, b = rglru_coeffs(p, x)
        acum, h = linear_scan(a, b)
        a_tot, h_fin = acum[:, -1], h[:, -1]
        if bug == "cyclic-chain":
            perm = [(i, (i + 1) % n) for i in range(n)]
        else:
            perm = [(i, i + 1) for i in range(n - 1)]
        carry = jnp.zeros_like(h_fin)
        for _ in range(n - 1):
            carry = ppermute(a_tot * carry + h_fin, "sp", perm)
        if bug == "carry-no-cumulative-decay":
            h = h + carry[:, None]
        else:
            h = h + acum * carry[:, None]
        return x + h @ p["wo"]
    return f


PS7 = jax.tree.map(lambda _: P(), rglru_params())
C.smap("s.griffin_rglru_seq_parallel_ppermute_chain.sp8", {"sp": 8}, rglru_sp,
       (PS7, P(None, "sp")), P(None, "sp"), rglru_ref, (rglru_params(), R(B7, L7, H7)),
       bugs=[("cyclic-chain", ["wrong-permutation"]), ("carry-no-cumulative-decay", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 8. S5 (real diagonal, ZOH) training step, time over sp, batch over dp.
B8, L8, H8, N8 = 4, 32, 8, 16
OPT8 = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(1e-2, weight_decay=0.05))


def s5_params(h=H8, n=N8):
    return {"lam_log": np.log(U(0.05, 0.6, n)), "log_dt": np.log(U(0.1, 0.5, n)),
            "b": R(n, h, scale=h ** -0.5), "c": R(h, n, scale=n ** -0.5), "d": R(h, scale=0.5),
            "wo": R(h, h, scale=h ** -0.5)}


def s5_disc(p):
    """zero-order hold: lambda_bar = exp(lambda dt), B_bar = (lambda_bar - 1) / lambda B."""
    lam = -jnp.exp(p["lam_log"])
    lb = jnp.exp(lam * jnp.exp(p["log_dt"]))
    return lb, ((lb - 1) / lam)[:, None] * p["b"]


def s5_readout(p, x, h):
    y = h @ p["c"].T + p["d"] * x
    return x + jax.nn.gelu(y) @ p["wo"]


def s5_loss(p, x, t):
    lb, bb = s5_disc(p)
    _, h = linear_scan(lb, x @ bb.T)
    return jnp.mean(jnp.sum(jnp.square(s5_readout(p, x, h) - t), -1))


def s5_step(params, state, x, t):
    loss, g = jax.value_and_grad(s5_loss)(params, x, t)
    upd, state = OPT8.update(g, state, params)
    return optax.apply_updates(params, upd), state, loss


def s5_step_sp(bug):
    def f(params, state, x, t):
        n_glob = B8 * L8

        def local_loss(p):
            lb, bb = s5_disc(p)
            acum, h = linear_scan(lb, x @ bb.T)
            fins = all_gather(h[:, -1], "sp")                                  # [sp, b, N]
            _, pre = linear_scan(acum[:, -1][None], fins, axis=0)              # inclusive prefix over chunks
            d = idx("sp")
            if bug == "prefix-inclusive":
                carry = pre[d]
            else:
                carry = jnp.where(d > 0, pre[jnp.maximum(d - 1, 0)], 0.0)
            h = h + acum * carry[:, None]
            return jnp.sum(jnp.square(s5_readout(p, x, h) - t)) / n_glob
        loss, g = jax.value_and_grad(local_loss)(params)
        axes = "dp" if bug == "grad-psum-dp-only" else ("dp", "sp")
        g = psum(g, axes)
        upd, state = OPT8.update(g, state, params)
        return optax.apply_updates(params, upd), state, psum(loss, ("dp", "sp"))
    return f


P8 = s5_params()
P8, S8 = warm(s5_step, P8, OPT8.init(P8), R(B8, L8, H8), R(B8, L8, H8, scale=0.5))
PS8 = jax.tree.map(lambda _: P(), P8)
C.smap("s.s5_seq_parallel_chunk_prefix_train_step_adamw.dp2xsp4", {"dp": 2, "sp": 4}, s5_step_sp,
       (PS8, state_specs(S8, PS8), P("dp", "sp"), P("dp", "sp")), (PS8, state_specs(S8, PS8), P()), s5_step,
       (P8, S8, R(B8, L8, H8), R(B8, L8, H8, scale=0.5)),
       bugs=[("prefix-inclusive", ["wrong-offset"]),
             ("grad-psum-dp-only", ["missing-all-reduce", "wrong-collective-group"])])

# ---------------------------------------------------------------------------
# 9. Mamba-2-style training step, heads over tp (check_vma=True).
B9, L9, D9, NH9, HD9, N9 = 4, 16, 16, 8, 4, 8
DI9 = NH9 * HD9
MAXN9 = 0.2
OPT9 = optax.chain(optax.clip_by_global_norm(MAXN9), optax.adamw(1e-2, weight_decay=0.1))


def mamba2_params():
    dt0 = np.exp(U(np.log(0.02), np.log(0.3), NH9))
    return {"w_xz": R(D9, 2, NH9, HD9, scale=D9 ** -0.5), "w_bc": R(D9, 2, N9, scale=D9 ** -0.5),
            "w_dt": R(D9, NH9, scale=0.1), "dt_bias": np.log(np.expm1(dt0)).astype(np.float32),
            "a_log": np.log(U(1.0, 8.0, NH9)), "d": np.ones(NH9, np.float32),
            "norm": 1.0 + R(NH9, HD9, scale=0.1), "w_out": R(NH9, HD9, D9, scale=DI9 ** -0.5)}


M2_SPECS = {"w_xz": P(None, None, "tp"), "w_bc": P(), "w_dt": P(None, "tp"), "dt_bias": P("tp"),
            "a_log": P("tp"), "d": P("tp"), "norm": P("tp"), "w_out": P("tp")}


def mamba2_mixer(p, x, norm_sum=lambda t: t, out_sum=lambda t: t):
    xz = jnp.einsum("bld,dkhp->blkhp", x, p["w_xz"])
    xs, z = xz[:, :, 0], xz[:, :, 1]                                       # [b, l, h, p]
    bc = jnp.einsum("bld,dkn->blkn", x, p["w_bc"])
    b, c = bc[:, :, 0], bc[:, :, 1]                                        # [b, l, N], shared by the heads
    dt = jax.nn.softplus(x @ p["w_dt"] + p["dt_bias"])                     # [b, l, h]
    a = jnp.exp(-dt * jnp.exp(p["a_log"]))
    bx = (dt[..., None] * xs)[..., None] * b[:, :, None, None, :]          # [b, l, h, p, N]
    _, hs = linear_scan(a[..., None, None], bx)
    y = jnp.einsum("blhpn,bln->blhp", hs, c) + p["d"][:, None] * xs
    y = y * jax.nn.silu(z)
    ms = norm_sum(jnp.sum(jnp.square(y), (-2, -1))) / DI9                    # gated RMSNorm over d_inner
    y = y * lax.rsqrt(ms + 1e-5)[..., None, None] * p["norm"]
    return out_sum(jnp.einsum("blhp,hpd->bld", y, p["w_out"]))


def mamba2_loss(p, x, t):
    return jnp.mean(jnp.square(x + mamba2_mixer(p, x) - t))


def mamba2_step(params, state, x, t):
    loss, g = jax.value_and_grad(mamba2_loss)(params, x, t)
    upd, state = OPT9.update(g, state, params)
    return optax.apply_updates(params, upd), state, loss


def clip_by_global_norm_tp(max_norm, specs, psum_all=False):
    """optax.clip_by_global_norm for gradients whose leaves with a "tp" spec hold only their shard
    (their squares psum'd over tp); psum_all: every leaf's squares psum'd over tp."""
    def update(g, state, params=None):
        flags = jax.tree.leaves(jax.tree.map(lambda s: "tp" in s, specs, is_leaf=lambda s: isinstance(s, P)))
        leaves = jax.tree.leaves(g)
        shard = sum(jnp.sum(jnp.square(v)) for v, fl in zip(leaves, flags) if fl)
        repl = sum(jnp.sum(jnp.square(v)) for v, fl in zip(leaves, flags) if not fl)
        if psum_all:
            norm = jnp.sqrt(psum(shard + repl, "tp"))
        else:
            norm = jnp.sqrt(psum(shard, "tp") + repl)
        scale = jnp.where(norm < max_norm, 1.0, max_norm / norm)
        return jax.tree.map(lambda v: v * scale, g), state
    return optax.GradientTransformation(lambda params: optax.EmptyState(), update)


def mamba2_step_tp(bug):
    psum_all = bug == "clip-repl-squares-psum"
    opt = optax.chain(clip_by_global_norm_tp(MAXN9, M2_SPECS, psum_all), optax.adamw(1e-2, weight_decay=0.1))

    def f(params, state, x, t):
        n_glob = B9 * L9 * D9
        tp_sum = lambda v: psum(v, "tp")  # noqa: E731
        norm_sum = (lambda v: v) if bug == "rmsnorm-local-heads" else tp_sum

        def local_loss(p):
            y = x + mamba2_mixer(p, x, norm_sum, tp_sum)
            return jnp.sum(jnp.square(y - t)) / n_glob
        loss, g = jax.value_and_grad(local_loss)(params)     # replicated leaves' gradients reduced by jax.grad
        upd, state = opt.update(g, state, params)
        return optax.apply_updates(params, upd), state, psum(loss, "dp")
    return f


P9 = mamba2_params()
P9, S9 = warm(mamba2_step, P9, OPT9.init(P9), R(B9, L9, D9), R(B9, L9, D9, scale=0.5))
C.smap("s.mamba2_heads_tp_gated_rmsnorm_train_step_adamw.dp2xtp4", {"dp": 2, "tp": 4}, mamba2_step_tp,
       (M2_SPECS, state_specs(S9, M2_SPECS), P("dp"), P("dp")), (M2_SPECS, state_specs(S9, M2_SPECS), P()),
       mamba2_step, (P9, S9, R(B9, L9, D9), R(B9, L9, D9, scale=0.5)), check_vma=True,
       bugs=[("rmsnorm-local-heads", ["local-statistic", "missing-all-reduce"]),
             ("clip-repl-squares-psum", ["extra-reduction", "wrong-scale"])])

# ---------------------------------------------------------------------------
# GSPMD pairs.

# 10. LRU forward, batch over dp2, state dim over tp4.
C.gspmd("g.lru_complex_forward_state_tp.dp2xtp4", {"dp": 2, "tp": 4}, (P("dp"),) + LRU_SPECS, P("dp"), lru_ref,
        (R(B1, L1, H1),) + lru_params())

# 11. Mamba block training step, d_inner over tp4.
OPT11 = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(2e-3, weight_decay=0.1))


def mamba_step(params, state, x, t):
    loss, g = jax.value_and_grad(lambda p: jnp.mean(jnp.sum(jnp.square(mamba_ref(p, x) - t), -1)))(params)
    upd, state = OPT11.update(g, state, params)
    return optax.apply_updates(params, upd), state, loss


P11 = mamba_params()
P11, S11 = warm(mamba_step, P11, OPT11.init(P11), R(B2, L2, D2), R(B2, L2, D2, scale=0.5))
C.gspmd("g.mamba_block_train_step_adamw_clip_inner_tp.dp2xtp4", {"dp": 2, "tp": 4},
        (MAMBA_SPECS, state_specs(S11, MAMBA_SPECS), P("dp"), P("dp")),
        (MAMBA_SPECS, state_specs(S11, MAMBA_SPECS), P()), mamba_step,
        (P11, S11, R(B2, L2, D2), R(B2, L2, D2, scale=0.5)))

# 12. masked LSTM training step, batch over dp8.
P12 = lstm_params()
P12, S12 = warm(lstm_step, P12, OPT3.init(P12), *lstm_batch())
PS12 = jax.tree.map(lambda _: P(), P12)
C.gspmd("g.lstm_masked_train_step_adam_clip.dp8", {"dp": 8},
        (PS12, state_specs(S12, PS12), P("dp"), P("dp"), P("dp")), (PS12, state_specs(S12, PS12), P()), lstm_step,
        (P12, S12) + lstm_batch())

# 13. causal linear attention forward, heads over tp4.
C.gspmd("g.causal_linear_attention_forward_heads_tp.dp2xtp4", {"dp": 2, "tp": 4},
        (P("dp"), P(None, "tp"), P(None, "tp"), P(None, "tp"), P("tp")), P("dp"), linattn_ref,
        (R(B5, L5, D5), R(D5, NH5, DH5, scale=D5 ** -0.5), R(D5, NH5, DH5, scale=D5 ** -0.5),
         R(D5, NH5, DH5, scale=D5 ** -0.5), R(NH5, DH5, D5, scale=(NH5 * DH5) ** -0.5)))

# 14. RWKV-4 time mixing forward, channels over tp4.
RW_TP = {"mu_k": P("tp"), "mu_v": P("tp"), "mu_r": P("tp"), "w_log": P("tp"), "u": P("tp"),
         "wk": P(None, "tp"), "wv": P(None, "tp"), "wr": P(None, "tp"), "wo": P("tp", None)}
C.gspmd("g.rwkv4_time_mix_forward_channels_tp.dp2xtp4", {"dp": 2, "tp": 4}, (RW_TP, P("dp")), P("dp"), rwkv_ref,
        (rwkv_params(), R(B6, L6, C6)))

# 15. S5 training step with the time axis over sp4.
P15 = s5_params()
P15, S15 = warm(s5_step, P15, OPT8.init(P15), R(B8, L8, H8), R(B8, L8, H8, scale=0.5))
PS15 = jax.tree.map(lambda _: P(), P15)
C.gspmd("g.s5_train_step_time_sharded.dp2xsp4", {"dp": 2, "sp": 4},
        (PS15, state_specs(S15, PS15), P("dp", "sp"), P("dp", "sp")), (PS15, state_specs(S15, PS15), P()), s5_step,
        (P15, S15, R(B8, L8, H8), R(B8, L8, H8, scale=0.5)))

C.finish()
