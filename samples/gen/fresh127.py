"""samples/fresh127: a 127th batch of programs as a user writes them, on the theme of programs that mix graph message passing by segment / scatter reductions over edges sharded across devices, per-token losses with ignore sentinels under data, tensor (vocabulary-parallel) and sequence parallelism, token-shift / causal-conv halos across sequence shards, and RL-style per-token log-probabilities of a vocabulary-parallel policy head, none of them an idiom of samples/fresh .. fresh26, probe, train or wild.
Every correct pair is written to look suspicious: -inf / +inf / iinfo.min
identities left in per-device buffers of empty segments before a pmax /
pmin, integer and boolean reductions, labels that index no column of a
device's vocabulary shard, ppermutes whose non-receivers get zeros that
double as the causal zero padding, one-hot picks of out-of-range indices,
yet each computes its baseline's function up to rounding.
shard_map families:
 1. GNN aggregation with edges over e4 and node features over f2: per-edge
    messages x[src] * w, jax.ops.segment_max / segment_min / segment_sum
    with num_segments (empty segments hold -inf / +inf / 0 per device),
    then pmax / pmin / psum over e; the in-degree by segment_sum of ones
    psum'd; the mean guarded by max(deg, 1), empty nodes zeroed by deg > 0.
    Bugs: the segment maxima psum'd instead of pmax'd, the degree used for
    the mean and the mask taken per device.
 2. scatter reductions into replicated buffers (e8): softplus messages
    .at[dst].max into a -inf buffer and .at[dst].min into a +inf buffer,
    a boolean "has an in-edge" flag .at[dst].set(True) reduced by a psum
    of its int32, the int32 maximum edge type by segment_max (empty =
    iinfo.min) and pmax, the int32 in-degree by .at[].add and psum.
    Bugs: the min buffer initialised to 0 (not +inf), the boolean flag
    left per device.
 3. vocabulary-parallel cross-entropy (dp2 x tp4) with ignore index -100,
    label smoothing 0.1 and z-loss 1e-3: the logits h W with W over tp,
    the log-sum-exp by pmax / psum, the target logit picked by
    take_along_axis of the clipped local index masked by the shard's
    range, the smoothing term's mean logit by psum / V, the token count
    psum'd over dp. Bugs: the count per device, the z-loss added outside
    the ignore mask.
 4. next-token loss under sequence parallelism (dp2 x sp4) with the pad id
    0 and a fill of -1 at the last position as ignore sentinels: the
    targets are tokens[t + 1], the first token of the next shard brought by
    a ppermute j -> j - 1, the last shard filling -1; the loss sum and
    count psum'd over both axes. Bugs: the fill on every shard's last
    position, the halo taken from the previous shard.
 5. RWKV-style time mixing (dp2 x sp4): x_prev is the previous token, the
    last row of the previous shard by a cyclic ppermute, a learned state
    vector at position 0 on shard 0; receptance / key / value mixes with
    per-channel mu. Bugs: the learned state on every shard's position 0,
    the cyclic wrap kept (shard 0 mixes the sequence's last token).
 6. two causal depthwise convolutions (width 3 then width 2, dp2 x sp4):
    a two-row halo of x by a non-cyclic ppermute (shard 0 receives zeros,
    which are the causal zero padding), SiLU, then a one-row halo of the
    first conv's output. Bugs: only one halo row (the second from the left
    zero), the second conv's halo taken from x instead of the first
    conv's output.
 7. PPO / GRPO loss of a vocabulary-parallel policy head (dp2 x tp4):
    log p(a) = x_a - lse with the global lse by pmax / psum, the pick by a
    one_hot of the local index (the ignore sentinel -1 and other shards'
    actions give all-zero rows), the entropy lse - sum p x psum'd, group
    normalised advantages (one group of K = 4 per dp device), clipped
    ratios, the token count psum'd. Bugs: a local log-sum-exp, the one_hot
    index without the shard offset.
 8. DPO (sp2 x tp4): policy and reference heads over tp, sequence log-probs
    of chosen and rejected sequences summed over valid tokens (-100 on the
    prompt and padding) and psum'd over sp, the pick by take_along_axis.
    Bugs: the ignore mask dropped on the reference side, the sequence sum
    psum'd over tp instead of sp.
GSPMD pairs (jax.jit with in/out shardings; correct): 9. jax.ops
segment_max / segment_min / segment_sum of float and int32 messages with
edges over e8 (empty segments left -inf / +inf / iinfo.min in the
output); 10. vocabulary-parallel cross-entropy with ignore index -100,
label smoothing and z-loss (dp2 x tp4); 11. a token shift by jnp.pad, a
causal depthwise conv by lax.conv_general_dilated with feature_group_count
and next-token targets filled with -100 at the end (dp2 x sp4).
Numerics: correct pairs agree at f32 rounding level (about 1e-6 relative);
bug variants differ by order-1 amounts on the seeded inputs.
Run from the repository root: bash samples/gen/run_fresh127.sh [SUBSTR...]
"""
import sys
import numpy as np
import jax, jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec as P
sys.path.insert(0, "samples/gen")  # run from the repository root (run_fresh127.sh)
from fresh_lib import Corpus, seeded  # noqa: E402

SCRIPT = "samples/gen/fresh127.py"
C = Corpus("samples/fresh127", SCRIPT, "samples/gen/run_fresh127.sh", sys.argv[1:])
rng, R, I = seeded(127127)
psum, pmax, pmin, idx = lax.psum, lax.pmax, lax.pmin, lax.axis_index

# ---------------------------------------------------------------------------
# 1. GNN aggregation: segment_max / segment_min / segment_sum, edges over e.
N1, F1, E1 = 16, 8, 48
SRC1 = I(0, N1, E1)
DST1 = I(0, 12, E1)           # nodes 12..15 have no incoming edge


def gnn_ref(x, w, src, dst):
    msg = x[src] * w[:, None]
    mx = jax.ops.segment_max(msg, dst, num_segments=N1)
    mn = jax.ops.segment_min(msg, dst, num_segments=N1)
    sm = jax.ops.segment_sum(msg, dst, num_segments=N1)
    deg = jax.ops.segment_sum(jnp.ones_like(w), dst, num_segments=N1)
    has = (deg > 0)[:, None]
    mean = sm / jnp.maximum(deg, 1.0)[:, None]
    h = jnp.where(has, mx, 0.0) + 0.5 * jnp.where(has, mn, 0.0) + mean
    return x + jnp.tanh(h), deg


def gnn_sm(bug):
    def f(x, w, src, dst):
        msg = x[src] * w[:, None]
        mx_l = jax.ops.segment_max(msg, dst, num_segments=N1)   # -inf on empty
        mn_l = jax.ops.segment_min(msg, dst, num_segments=N1)   # +inf on empty
        sm_l = jax.ops.segment_sum(msg, dst, num_segments=N1)
        deg_l = jax.ops.segment_sum(jnp.ones_like(w), dst, num_segments=N1)
        mx = psum(mx_l, "e") if bug == "psum-for-max" else pmax(mx_l, "e")
        mn = pmin(mn_l, "e")
        sm = psum(sm_l, "e")
        deg = deg_l if bug == "local-degree" else psum(deg_l, "e")
        has = (deg > 0)[:, None]
        mean = sm / jnp.maximum(deg, 1.0)[:, None]
        h = jnp.where(has, mx, 0.0) + 0.5 * jnp.where(has, mn, 0.0) + mean
        return x + jnp.tanh(h), deg
    return f


C.smap("s.gnn_segment_max_min_sum_edges.e4xf2", {"e": 4, "f": 2}, gnn_sm,
       (P(None, "f"), P("e"), P("e"), P("e")), (P(None, "f"), P()), gnn_ref,
       (R(N1, F1), R(E1) + 0.5, SRC1, DST1),
       bugs=[("psum-for-max", ["wrong-collective"]), ("local-degree", ["missing-collective"])])

# ---------------------------------------------------------------------------
# 2. scatter .at[].max / .at[].min into replicated buffers, int and bool.
N2, F2, E2, T2 = 12, 4, 64, 6
SRC2 = I(0, N2, E2)
DST2 = I(0, 10, E2)            # nodes 10, 11 receive nothing
ET2 = I(0, T2, E2)


def scatter_ref(x, ef, src, dst, et):
    msg = jax.nn.softplus(x[src] + ef)
    amax = jnp.full((N2, F2), -jnp.inf).at[dst].max(msg)
    amin = jnp.full((N2, F2), jnp.inf).at[dst].min(msg)
    has = jnp.zeros(N2, bool).at[dst].set(True)
    tmax = jax.ops.segment_max(et, dst, num_segments=N2)
    deg = jnp.zeros(N2, jnp.int32).at[dst].add(1)
    spread = jnp.where(has[:, None], amax - amin, 0.0)
    return spread, jnp.where(has, tmax, -1), deg, has


def scatter_sm(bug):
    def f(x, ef, src, dst, et):
        msg = jax.nn.softplus(x[src] + ef)
        amax = jnp.full((N2, F2), -jnp.inf).at[dst].max(msg)
        init = jnp.zeros((N2, F2)) if bug == "init-zero-min" else jnp.full((N2, F2), jnp.inf)
        amin = init.at[dst].min(msg)
        has_l = jnp.zeros(N2, bool).at[dst].set(True)
        tmax_l = jax.ops.segment_max(et, dst, num_segments=N2)   # iinfo.min on empty
        deg_l = jnp.zeros(N2, jnp.int32).at[dst].add(1)
        amax, amin = pmax(amax, "e"), pmin(amin, "e")
        has = has_l if bug == "bool-flag-local" else psum(has_l.astype(jnp.int32), "e") > 0
        tmax = pmax(tmax_l, "e")
        deg = psum(deg_l, "e")
        spread = jnp.where(has[:, None], amax - amin, 0.0)
        return spread, jnp.where(has, tmax, -1), deg, has
    return f


C.smap("s.scatter_at_max_min_int_bool_buffers.e8", {"e": 8}, scatter_sm,
       (P(), P("e"), P("e"), P("e"), P("e")), (P(), P(), P(), P()), scatter_ref,
       (R(N2, F2), R(E2, F2), SRC2, DST2, ET2),
       bugs=[("init-zero-min", ["wrong-identity"]), ("bool-flag-local", ["missing-collective"])])

# ---------------------------------------------------------------------------
# 3. vocabulary-parallel cross-entropy, ignore -100, label smoothing, z-loss.
BT3, D3, V3 = 16, 8, 32
EPS3, Z3 = 0.1, 1e-3
LAB3 = I(0, V3, BT3)
LAB3[[0, 1, 2, 9, 13]] = -100     # prompt / padding tokens


def ce_ref(h, w, lab):
    lg = h @ w
    lse = jax.nn.logsumexp(lg, -1)
    valid = lab != -100
    xt = jnp.take_along_axis(lg, jnp.where(valid, lab, 0)[:, None], -1)[:, 0]
    tok = (1 - EPS3) * (lse - xt) + EPS3 * (lse - jnp.mean(lg, -1)) + Z3 * lse ** 2
    tok = jnp.where(valid, tok, 0.0)
    return jnp.sum(tok) / jnp.maximum(jnp.sum(valid), 1), tok


def ce_vp(bug):
    def f(h, w, lab):
        lg = h @ w
        vl = lg.shape[-1]
        m = pmax(lax.stop_gradient(jnp.max(lg, -1)), "tp")
        lse = jnp.log(psum(jnp.sum(jnp.exp(lg - m[:, None]), -1), "tp")) + m
        valid = lab != -100
        loc = lab - idx("tp") * vl
        inr = valid & (loc >= 0) & (loc < vl)
        pick = jnp.take_along_axis(lg, jnp.clip(loc, 0, vl - 1)[:, None], -1)[:, 0]
        xt = psum(jnp.where(inr, pick, 0.0), "tp")
        mean_lg = psum(jnp.sum(lg, -1), "tp") / V3
        ce = (1 - EPS3) * (lse - xt) + EPS3 * (lse - mean_lg)
        if bug == "zloss-unmasked":
            tok = jnp.where(valid, ce, 0.0) + Z3 * lse ** 2
        else:
            tok = jnp.where(valid, ce + Z3 * lse ** 2, 0.0)
        n = jnp.sum(valid)
        cnt = n if bug == "local-count" else psum(n, "dp")
        return psum(jnp.sum(tok), "dp") / jnp.maximum(cnt, 1), tok
    return f


C.smap("s.vocab_parallel_ce_ignore_smooth_zloss.dp2xtp4", {"dp": 2, "tp": 4}, ce_vp,
       (P("dp"), P(None, "tp"), P("dp")), (P(), P("dp")), ce_ref,
       (R(BT3, D3, scale=1.5), R(D3, V3), LAB3),
       bugs=[("local-count", ["wrong-denominator"]), ("zloss-unmasked", ["missing-mask"])])

# ---------------------------------------------------------------------------
# 4. next-token loss under sequence parallelism, pad id 0 and fill -1.
B4, T4, V4, D4 = 4, 16, 16, 8
PAD4 = 0
TOK4 = I(1, V4, B4, T4)
for r, n in enumerate([16, 11, 6, 14]):
    TOK4[r, n:] = PAD4


def lm_logits(tok, emb, wh, wo):
    return jnp.tanh(emb[tok] @ wh) @ wo


def nt_loss(lg, tgt):
    valid = (tgt != PAD4) & (tgt != -1)
    lp = jax.nn.log_softmax(lg, -1)
    nll = -jnp.take_along_axis(lp, jnp.where(valid, tgt, 0)[..., None], -1)[..., 0]
    return jnp.where(valid, nll, 0.0), valid


def nt_ref(tok, emb, wh, wo):
    tgt = jnp.concatenate([tok[:, 1:], jnp.full((B4, 1), -1, tok.dtype)], 1)
    nll, valid = nt_loss(lm_logits(tok, emb, wh, wo), tgt)
    return jnp.sum(nll) / jnp.maximum(jnp.sum(valid), 1), nll


def nt_sp(bug):
    def f(tok, emb, wh, wo):
        n = 4
        me = idx("sp")
        if bug == "halo-from-previous":
            perm = [(j, j + 1) for j in range(n - 1)]
        else:
            perm = [(j, j - 1) for j in range(1, n)]
        nxt = lax.ppermute(tok[:, 0], "sp", perm)
        if bug == "fill-every-shard":
            nxt = jnp.full_like(nxt, -1)
        else:
            nxt = jnp.where(me == n - 1, -1, nxt)
        tgt = jnp.concatenate([tok[:, 1:], nxt[:, None]], 1)
        nll, valid = nt_loss(lm_logits(tok, emb, wh, wo), tgt)
        cnt = psum(jnp.sum(valid), ("dp", "sp"))
        return psum(jnp.sum(nll), ("dp", "sp")) / jnp.maximum(cnt, 1), nll
    return f


C.smap("s.next_token_loss_pad_fill_halo.dp2xsp4", {"dp": 2, "sp": 4}, nt_sp,
       (P("dp", "sp"), P(), P(), P()), (P(), P("dp", "sp")), nt_ref,
       (TOK4, R(V4, D4), R(D4, D4, scale=0.5), R(D4, V4)),
       bugs=[("fill-every-shard", ["wrong-fill"]), ("halo-from-previous", ["wrong-permutation"])])

# ---------------------------------------------------------------------------
# 5. RWKV-style time mixing with a learned state at position 0.
B5, T5, C5 = 2, 16, 8


def rwkv_mix(x, xp, p):
    def mix(mu):
        return x * mu + xp * (1.0 - mu)
    r = jax.nn.sigmoid(mix(p["mu_r"]) @ p["wr"])
    k = jnp.tanh(mix(p["mu_k"]) @ p["wk"])
    v = mix(p["mu_v"]) @ p["wv"]
    return x + (r * k * v) @ p["wo"]


def rwkv_ref(x, p):
    xp = jnp.concatenate([jnp.broadcast_to(p["x0"], (B5, 1, C5)), x[:, :-1]], 1)
    return rwkv_mix(x, xp, p)


def rwkv_sp(bug):
    def f(x, p):
        n = 4
        me = idx("sp")
        last = lax.ppermute(x[:, -1], "sp", [(j, (j + 1) % n) for j in range(n)])
        x0 = jnp.broadcast_to(p["x0"], last.shape)
        if bug == "state-on-every-shard":
            first = x0
        elif bug == "roll-wraps":
            first = last
        else:
            first = jnp.where(me == 0, x0, last)
        xp = jnp.concatenate([first[:, None], x[:, :-1]], 1)
        return rwkv_mix(x, xp, p)
    return f


P5 = {"mu_r": jax.nn.sigmoid(R(C5)), "mu_k": jax.nn.sigmoid(R(C5)), "mu_v": jax.nn.sigmoid(R(C5)),
      "wr": R(C5, C5, scale=0.5), "wk": R(C5, C5, scale=0.5), "wv": R(C5, C5, scale=0.5),
      "wo": R(C5, C5, scale=0.5), "x0": R(C5)}
P5 = {k: np.asarray(v, np.float32) for k, v in P5.items()}
C.smap("s.rwkv_time_mix_learned_state_shift.dp2xsp4", {"dp": 2, "sp": 4}, rwkv_sp,
       (P("dp", "sp"), {k: P() for k in P5}), P("dp", "sp"), rwkv_ref, (R(B5, T5, C5), P5),
       bugs=[("state-on-every-shard", ["wrong-fill"]), ("roll-wraps", ["wrong-permutation"])])

# ---------------------------------------------------------------------------
# 6. causal depthwise convs of width 3 then 2 with halos.
B6, T6, C6 = 2, 16, 8


def dwconv_ref(x, w3, b3, w2):
    xp = jnp.pad(x, ((0, 0), (2, 0), (0, 0)))
    y = jax.nn.silu(w3[0] * xp[:, :-2] + w3[1] * xp[:, 1:-1] + w3[2] * xp[:, 2:] + b3)
    yp = jnp.pad(y, ((0, 0), (1, 0), (0, 0)))
    z = w2[0] * yp[:, :-1] + w2[1] * yp[:, 1:]
    return z * jax.nn.sigmoid(x)


def dwconv_sp(bug):
    def f(x, w3, b3, w2):
        n = 4
        right = [(j, j + 1) for j in range(n - 1)]   # shard 0 receives zeros
        if bug == "halo-one-row":
            h1 = lax.ppermute(x[:, -1:], "sp", right)
            halo = jnp.concatenate([jnp.zeros_like(h1), h1], 1)
        else:
            halo = lax.ppermute(x[:, -2:], "sp", right)
        xp = jnp.concatenate([halo, x], 1)
        y = jax.nn.silu(w3[0] * xp[:, :-2] + w3[1] * xp[:, 1:-1] + w3[2] * xp[:, 2:] + b3)
        # the padding of y at position 0 is 0 (zero fill), not silu(b3)
        if bug == "conv2-halo-from-x":
            hy = halo[:, -1:]
        else:
            hy = lax.ppermute(y[:, -1:], "sp", right)
        yp = jnp.concatenate([hy, y], 1)
        z = w2[0] * yp[:, :-1] + w2[1] * yp[:, 1:]
        return z * jax.nn.sigmoid(x)
    return f


C.smap("s.causal_dwconv_w3_w2_halos.dp2xsp4", {"dp": 2, "sp": 4}, dwconv_sp,
       (P("dp", "sp"), P(), P(), P()), P("dp", "sp"), dwconv_ref,
       (R(B6, T6, C6), R(3, C6), R(C6, scale=0.5), R(2, C6)),
       bugs=[("halo-one-row", ["wrong-halo"]), ("conv2-halo-from-x", ["wrong-operand"])])

# ---------------------------------------------------------------------------
# 7. PPO / GRPO loss of a vocabulary-parallel policy head.
G7, K7, T7, D7, V7 = 2, 4, 6, 8, 32
ACT7 = I(0, V7, G7 * K7, T7)
ACT7[:, :2] = -1                 # prompt positions
ACT7[[1, 6], 5] = -1             # padding at the end
CLIP7, ENT7 = 0.2, 0.01


def grpo_adv(rew):
    r = rew.reshape(-1, K7)
    a = (r - jnp.mean(r, -1, keepdims=True)) / (jnp.std(r, -1, keepdims=True) + 1e-4)
    return a.reshape(-1)


def ppo_obj(la, ent, old, adv, valid, cnt):
    ratio = jnp.exp(la - old)
    a = adv[:, None]
    obj = jnp.minimum(ratio * a, jnp.clip(ratio, 1 - CLIP7, 1 + CLIP7) * a)
    return (-jnp.sum(jnp.where(valid, obj, 0.0)) - ENT7 * jnp.sum(jnp.where(valid, ent, 0.0))) / cnt


def ppo_ref(h, w, act, old, rew):
    lg = h @ w
    lse = jax.nn.logsumexp(lg, -1)
    valid = act != -1
    la = jnp.take_along_axis(lg, jnp.where(valid, act, 0)[..., None], -1)[..., 0] - lse
    ent = lse - jnp.sum(jax.nn.softmax(lg, -1) * lg, -1)
    cnt = jnp.maximum(jnp.sum(valid), 1)
    return ppo_obj(la, ent, old, grpo_adv(rew), valid, cnt), jnp.where(valid, la, 0.0)


def ppo_vp(bug):
    def f(h, w, act, old, rew):
        lg = h @ w
        vl = lg.shape[-1]
        if bug == "local-lse":
            m = jnp.max(lg, -1)
            se = jnp.sum(jnp.exp(lg - m[..., None]), -1)
        else:
            m = pmax(lax.stop_gradient(jnp.max(lg, -1)), "tp")
            se = psum(jnp.sum(jnp.exp(lg - m[..., None]), -1), "tp")
        lse = jnp.log(se) + m
        valid = act != -1
        loc = act if bug == "onehot-no-offset" else act - idx("tp") * vl
        oh = jax.nn.one_hot(loc, vl, dtype=lg.dtype)      # zero rows outside the shard
        la = psum(jnp.sum(oh * lg, -1), "tp") - lse
        p = jnp.exp(lg - lse[..., None])
        ent = lse - psum(jnp.sum(p * lg, -1), "tp")
        cnt = jnp.maximum(psum(jnp.sum(valid), "dp"), 1)
        loss = psum(ppo_obj(la, ent, old, grpo_adv(rew), valid, cnt), "dp")
        return loss, jnp.where(valid, la, 0.0)
    return f


OLD7 = R(G7 * K7, T7, scale=0.05) - 3.5
C.smap("s.ppo_grpo_vocab_parallel_onehot_logprob.dp2xtp4", {"dp": 2, "tp": 4}, ppo_vp,
       (P("dp"), P(None, "tp"), P("dp"), P("dp"), P("dp")), (P(), P("dp")), ppo_ref,
       (R(G7 * K7, T7, D7), R(D7, V7, scale=0.4), ACT7, OLD7, R(G7 * K7)),
       bugs=[("local-lse", ["local-statistic"]), ("onehot-no-offset", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 8. DPO with policy and reference heads over tp, sequence over sp.
B8, T8, D8, V8 = 2, 8, 8, 32
BETA8 = 0.5
LAB8 = I(0, V8, 2 * B8, T8)
LAB8[:, :3] = -100               # prompt
LAB8[[1, 2], 6:] = -100          # padding
LAB8[3, 4:] = -100               # a whole sp shard of row 3 ignored


def seq_logp_ref(h, w, lab):
    lg = h @ w
    lp = jax.nn.log_softmax(lg, -1)
    valid = lab != -100
    pick = jnp.take_along_axis(lp, jnp.where(valid, lab, 0)[..., None], -1)[..., 0]
    return jnp.sum(jnp.where(valid, pick, 0.0), -1)


def dpo_from(pol, ref):
    pc, pr = pol[:B8], pol[B8:]
    rc, rr = ref[:B8], ref[B8:]
    logits = BETA8 * ((pc - rc) - (pr - rr))
    return -jnp.mean(jax.nn.log_sigmoid(logits)), BETA8 * (pc - rc), BETA8 * (pr - rr)


def dpo_ref(h, wp, wr, lab):
    return dpo_from(seq_logp_ref(h, wp, lab), seq_logp_ref(h, wr, lab))


def dpo_sm(bug):
    def seq_logp(h, w, lab, masked, seq_axis):
        lg = h @ w
        vl = lg.shape[-1]
        m = pmax(lax.stop_gradient(jnp.max(lg, -1)), "tp")
        lse = jnp.log(psum(jnp.sum(jnp.exp(lg - m[..., None]), -1), "tp")) + m
        loc = lab - idx("tp") * vl
        inr = (loc >= 0) & (loc < vl)
        pick = jnp.take_along_axis(lg, jnp.clip(loc, 0, vl - 1)[..., None], -1)[..., 0]
        lp = psum(jnp.where(inr, pick, 0.0), "tp") - lse
        if masked:
            lp = jnp.where(lab != -100, lp, 0.0)
        return psum(jnp.sum(lp, -1), seq_axis)

    def f(h, wp, wr, lab):
        ax = "tp" if bug == "seq-sum-over-tp" else "sp"
        pol = seq_logp(h, wp, lab, True, ax)
        ref = seq_logp(h, wr, lab, bug != "ref-mask-dropped", ax)
        return dpo_from(pol, ref)
    return f


C.smap("s.dpo_policy_ref_take_along_vocab_seq.sp2xtp4", {"sp": 2, "tp": 4}, dpo_sm,
       (P(None, "sp"), P(None, "tp"), P(None, "tp"), P(None, "sp")), (P(), P(), P()), dpo_ref,
       (R(2 * B8, T8, D8), R(D8, V8, scale=0.4), R(D8, V8, scale=0.4), LAB8),
       bugs=[("ref-mask-dropped", ["missing-mask"]), ("seq-sum-over-tp", ["wrong-axis"])])

# ---------------------------------------------------------------------------
# GSPMD pairs.
# 9. segment reductions of float and int32 messages, edges over e8.
N9, E9 = 12, 64
SRC9 = I(0, N9, E9)
DST9 = I(0, 9, E9)               # nodes 9..11 empty: -inf / +inf / iinfo.min stay


def seg_gspmd(x, w, et, src, dst):
    msg = x[src] * w[:, None]
    return (jax.ops.segment_max(msg, dst, num_segments=N9), jax.ops.segment_min(msg, dst, num_segments=N9),
            jax.ops.segment_sum(msg, dst, num_segments=N9), jax.ops.segment_max(et, dst, num_segments=N9),
            jax.ops.segment_sum((et > 2).astype(jnp.int32), dst, num_segments=N9))


C.gspmd("g.segment_max_min_sum_int_empty.e8", {"e": 8}, (P(), P("e"), P("e"), P("e"), P("e")),
        (P(), P(), P(), P(), P()), seg_gspmd, (R(N9, 4), R(E9), I(0, 6, E9), SRC9, DST9))


# 10. vocabulary-parallel cross-entropy with ignore index, smoothing, z-loss.
LAB10 = I(0, V3, BT3)
LAB10[[3, 4, 5, 15]] = -100
C.gspmd("g.vocab_ce_ignore_smooth_zloss.dp2xtp4", {"dp": 2, "tp": 4}, (P("dp"), P(None, "tp"), P("dp")),
        (P(), P("dp")), ce_ref, (R(BT3, D3, scale=1.5), R(D3, V3), LAB10))

# 11. token shift by jnp.pad, depthwise causal conv, next-token targets.
B11, T11, C11 = 2, 16, 8


def shift_conv_targets(x, mu, k, tok):
    xp = jnp.pad(x, ((0, 0), (1, 0), (0, 0)))[:, :-1]
    xm = x * mu + xp * (1.0 - mu)
    y = lax.conv_general_dilated(xm, k, (1,), [(2, 0)], dimension_numbers=("NWC", "WIO", "NWC"),
                                 feature_group_count=C11)
    tgt = jnp.concatenate([tok[:, 1:], jnp.full((B11, 1), -100, tok.dtype)], 1)
    return jax.nn.silu(y), tgt


C.gspmd("g.token_shift_pad_dwconv_next_target.dp2xsp4", {"dp": 2, "sp": 4},
        (P("dp", "sp"), P(), P(), P("dp", "sp")), (P("dp", "sp"), P("dp", "sp")), shift_conv_targets,
        (R(B11, T11, C11), np.asarray(jax.nn.sigmoid(R(C11))), R(3, 1, C11), I(0, 50, B11, T11)))

C.finish()
