"""samples/fresh130: a 130th batch of programs as a user writes them, on the theme of correct programs that look like false-alarm bait in two areas -- convolutions whose spatial axis (time or image height) is sharded with halos exchanged by ppermute while the channels are ALSO sharded over a second mesh axis (contracted by a psum or kept sharded), and Megatron-style vocabulary-parallel cross entropy picked by logits[jnp.arange(B), local_target] (and CLIP diagonals logits[arange, arange]) beside jnp.take_along_axis baselines -- plus their bug variants, none of them an idiom of samples/fresh .. fresh26, probe, train or wild.
Every correct pair is written to provoke a false alarm: the halo rows come
from a neighbour (zeros at the mesh edge from a ppermute without wrap), the
local conv is VALID on a concatenation while the baseline pads, the picks
index a shard-local vocabulary by target - shard_start with a where() on the
in-range mask, and the baseline is written with take_along_axis where the
distributed program uses the arange form, or the other way round.
shard_map families:
 1. causal 1-D conv (K=4, left padding K-1) over time sharded over sp4, the
    input channels over tp2 and contracted (psum over tp), bias and GELU:
    left halo of K-1 rows by a ppermute j -> j+1 (device 0 gets zeros).
    Bugs: the halo taken from the right neighbour, the psum over tp missing.
 2. 'SAME' dilated 1-D conv (K=3, dilation 2) over time sharded over sp4,
    output channels kept sharded over tp2 (bias over tp, SiLU gate): halos
    of 2 rows on both sides. Bugs: halos one row too short (1 row exchanged,
    the conv's padding supplying the other as zero), left and right halos
    swapped.
 3. strided depthwise 1-D conv (K=5, stride 2, VALID: 14 outputs of 32 rows)
    with time over sp4 and channels over tp2: each device takes 3 rows from
    its right neighbour, computes 4 outputs (the last device's last 2 are
    garbage from zero halos), all_gather over sp and the global [:14] slice.
    Bugs: the halo one row short (zero-padded), the halo from the left
    neighbour.
 4. 2-D conv (3x3 SAME) NHWC with the height over sp4 and the input
    channels over tp2 contracted: top and bottom halo rows by ppermute, the
    width padded by the conv, psum over tp, bias, ReLU. Bugs: the bottom
    halo taken from the upper neighbour, the channel psum over sp.
 5. grouped 2-D conv (4 groups, 2 per tp device, dilation 2 along the
    height, SAME) with the height over sp4: halos of 2 rows both sides.
    Bugs: halo of 1 row (padding the other), a psum over tp of the grouped
    outputs (groups summed).
 6. vocabulary-parallel cross entropy (V=32 over tp4, batch over dp2) with
    label smoothing 0.1 and z-loss 1e-3, baseline by take_along_axis, the
    distributed pick logits[jnp.arange(Bl), where(in_range, t - start, 0)].
    Bugs: the target not offset by the shard's vocabulary start, each tp
    device shifting by its own max (pmax missing).
 7. cross entropy over (B, S, V=48) with ignore_index -100 and per-token
    weights (dp2 x tp4), baseline by the arange form
    logits[arange(B)[:, None], arange(S)[None], t], the distributed pick by
    take_along_axis of the clipped local target. Bugs: the in-range mask
    sign flipped, the weight denominator not psum'd over dp. The per-token
    loss output is 0 at ignored tokens in both programs.
 8. CLIP loss with image rows over dp2 and text rows over tp4 (the logits
    block (4, 2) of the global (8, 8)), the diagonal picked as
    L[arange(4), dp*4 + arange(4) - tp*2] for i2t and by rows for t2i, beside
    a class-head cross entropy (V=32 over tp) picked by
    logits[arange, y - start]; baseline logits[arange(B), arange(B)].
    Bugs: the diagonal column not offset by tp*2, the t2i (column) log-sum-
    exp reduced over tp instead of dp.
 9. PPO-style per-token log-probabilities and entropy of a policy head with
    V=40 over tp4 (dp2), baseline logp[arange, arange, a], distributed
    take_along_axis. Bugs: the vocabulary start computed from the dp index,
    the entropy's vocabulary sum not psum'd over tp.
10. cross entropy with replicated labels sliced by the dp index
    (dp4 x tp2, V=64), loss = sum(lse) - psum(sum picked) with label
    smoothing. Bugs: the arange over the global batch with the global
    labels (rows past the local batch clamp), the smoothing term's
    vocabulary sum not psum'd over tp.
GSPMD pairs (jax.jit with in/out shardings; correct; jit arguments must
divide evenly, so the uneven sizes are intermediates pinned by
with_sharding_constraint): 11. a VALID then a 'SAME' 1-D conv with time 30
over sp4 and the input channels over tp2; 12. strided 2-D conv with height
16 -> 7 over sp4 and the output channels over tp2; 13. take_along_axis cross entropy with label smoothing,
z-loss and ignore_index over dp2 x tp4; 14. CLIP diagonal logits[arange,
arange] beside a class-head logits[arange, y] pick, image rows over dp and
text rows over tp; 15. causal dilated depthwise conv over a 4-step context + 32 steps (36
over sp8).
Numerics: all f32; correct pairs agree at rounding level (about 1e-6);
bug variants differ clearly on the seeded inputs.
Run from the repository root: bash samples/gen/run_fresh130.sh [SUBSTR...]
"""
import sys
import numpy as np
import jax, jax.numpy as jnp
from jax import lax
from jax.sharding import NamedSharding, PartitionSpec as P
sys.path.insert(0, "samples/gen")  # run from the repository root (run_fresh130.sh)
from fresh_lib import Corpus, seeded  # noqa: E402
from scalify_jax._export import make_mesh  # noqa: E402

SCRIPT = "samples/gen/fresh130.py"
C = Corpus("samples/fresh130", SCRIPT, "samples/gen/run_fresh130.sh", sys.argv[1:])
rng, R, I = seeded(130130)
psum, pmax, idx = lax.psum, lax.pmax, lax.axis_index
DN1 = ("NWC", "WIO", "NWC")
DN2 = ("NHWC", "HWIO", "NHWC")


def conv1d(x, w, pad, stride=1, dil=1, groups=1):
    return lax.conv_general_dilated(x, w, (stride,), [pad], rhs_dilation=(dil,), dimension_numbers=DN1,
                                    feature_group_count=groups)


def conv2d(x, w, pad, stride=(1, 1), dil=(1, 1), groups=1):
    return lax.conv_general_dilated(x, w, stride, pad, rhs_dilation=dil, dimension_numbers=DN2,
                                    feature_group_count=groups)


def from_left(a, axis, n):   # device j receives a from device j-1; device 0 gets zeros
    return lax.ppermute(a, axis, [(j, j + 1) for j in range(n - 1)])


def from_right(a, axis, n):  # device j receives a from device j+1; the last gets zeros
    return lax.ppermute(a, axis, [(j + 1, j) for j in range(n - 1)])


# ---------------------------------------------------------------------------
# 1. causal conv1d, time over sp, input channels over tp (psum).
K1 = 4


def causal_ref(x, w, b):
    return jax.nn.gelu(conv1d(x, w, (K1 - 1, 0)) + b)


def causal_sm(bug):
    def f(x, w, b):
        tail = x[:, -(K1 - 1):]
        halo = from_right(tail, "sp", 4) if bug == "halo-from-right" else from_left(tail, "sp", 4)
        y = conv1d(jnp.concatenate([halo, x], 1), w, (0, 0))
        if bug != "no-psum-tp":
            y = psum(y, "tp")
        return jax.nn.gelu(y + b)
    return f


C.smap("s.causal_conv1d_left_halo_cin_psum.sp4xtp2", {"sp": 4, "tp": 2}, causal_sm,
       (P(None, "sp", "tp"), P(None, "tp", None), P()), P(None, "sp", None), causal_ref,
       (R(2, 32, 8), R(K1, 8, 6, scale=0.4), R(6, scale=0.1)),
       bugs=[("halo-from-right", ["wrong-permutation"]), ("no-psum-tp", ["missing-collective"])])

# ---------------------------------------------------------------------------
# 2. 'SAME' dilated conv1d, both halos, output channels kept over tp.
K2, D2 = 3, 2
H2 = (K2 - 1) * D2 // 2   # 2 rows each side


def same_dil_ref(x, w, b):
    y = conv1d(x, w, (H2, H2), dil=D2) + b
    return y * jax.nn.sigmoid(y)


def same_dil_sm(bug):
    def f(x, w, b):
        if bug == "halo-short-by-one":
            h = H2 - 1
            left, right = from_left(x[:, -h:], "sp", 4), from_right(x[:, :h], "sp", 4)
            y = conv1d(jnp.concatenate([left, x, right], 1), w, (1, 1), dil=D2)
        else:
            if bug == "halos-swapped":
                left, right = from_right(x[:, :H2], "sp", 4), from_left(x[:, -H2:], "sp", 4)
            else:
                left, right = from_left(x[:, -H2:], "sp", 4), from_right(x[:, :H2], "sp", 4)
            y = conv1d(jnp.concatenate([left, x, right], 1), w, (0, 0), dil=D2)
        y = y + b
        return y * jax.nn.sigmoid(y)
    return f


C.smap("s.same_dilated_conv1d_both_halos_cout_tp.sp4xtp2", {"sp": 4, "tp": 2}, same_dil_sm,
       (P(None, "sp", None), P(None, None, "tp"), P("tp")), P(None, "sp", "tp"), same_dil_ref,
       (R(2, 32, 6), R(K2, 6, 8, scale=0.4), R(8, scale=0.1)),
       bugs=[("halo-short-by-one", ["wrong-halo"]), ("halos-swapped", ["wrong-permutation"])])

# ---------------------------------------------------------------------------
# 3. strided depthwise conv1d, VALID: the last device holds fewer needed rows.
K3, S3, T3 = 5, 2, 32
NOUT3 = (T3 - K3) // S3 + 1   # 14


def strided_ref(x, w):
    return conv1d(x, w, (0, 0), stride=S3, groups=x.shape[-1])


def strided_sm(bug):
    def f(x, w):
        need = K3 - S3   # 3 rows of the right neighbour
        if bug == "halo-short-by-one":
            nxt = from_right(x[:, :need - 1], "sp", 4)
            nxt = jnp.concatenate([nxt, jnp.zeros_like(x[:, :1])], 1)
        elif bug == "halo-from-left":
            nxt = from_left(x[:, :need], "sp", 4)
        else:
            nxt = from_right(x[:, :need], "sp", 4)
        y = conv1d(jnp.concatenate([x, nxt], 1), w, (0, 0), stride=S3, groups=x.shape[-1])
        y = lax.all_gather(y, "sp", axis=1, tiled=True)
        return y[:, :NOUT3]
    return f


C.smap("s.strided_depthwise_conv1d_uneven_tail.sp4xtp2", {"sp": 4, "tp": 2}, strided_sm,
       (P(None, "sp", "tp"), P(None, None, "tp")), P(None, None, "tp"), strided_ref,
       (R(2, T3, 8), R(K3, 1, 8, scale=0.5)),
       bugs=[("halo-short-by-one", ["wrong-halo"]), ("halo-from-left", ["wrong-permutation"])])

# ---------------------------------------------------------------------------
# 4. conv2d 3x3 SAME, height over sp, input channels over tp (psum).


def conv2d_ref(x, w, b):
    return jax.nn.relu(conv2d(x, w, [(1, 1), (1, 1)]) + b)


def conv2d_sm(bug):
    def f(x, w, b):
        top = from_left(x[:, -1:], "sp", 4)
        if bug == "bottom-from-upper":
            bot = from_left(x[:, :1], "sp", 4)
        else:
            bot = from_right(x[:, :1], "sp", 4)
        y = conv2d(jnp.concatenate([top, x, bot], 1), w, [(0, 0), (1, 1)])
        y = psum(y, "sp") if bug == "psum-over-sp" else psum(y, "tp")
        return jax.nn.relu(y + b)
    return f


C.smap("s.conv2d_height_halo_cin_psum.sp4xtp2", {"sp": 4, "tp": 2}, conv2d_sm,
       (P(None, "sp", None, "tp"), P(None, None, "tp", None), P()), P(None, "sp", None, None), conv2d_ref,
       (R(2, 16, 6, 8), R(3, 3, 8, 4, scale=0.3), R(4, scale=0.1)),
       bugs=[("bottom-from-upper", ["wrong-permutation"]), ("psum-over-sp", ["wrong-axis"])])

# ---------------------------------------------------------------------------
# 5. grouped conv2d (4 groups over tp2), dilation 2 along the height.
G5 = 4


def grouped_ref(x, w):
    return conv2d(x, w, [(2, 2), (1, 1)], dil=(2, 1), groups=G5)


def grouped_sm(bug):
    def f(x, w):
        g = G5 // 2
        if bug == "halo-one-row":
            top, bot = from_left(x[:, -1:], "sp", 4), from_right(x[:, :1], "sp", 4)
            y = conv2d(jnp.concatenate([top, x, bot], 1), w, [(1, 1), (1, 1)], dil=(2, 1), groups=g)
        else:
            top, bot = from_left(x[:, -2:], "sp", 4), from_right(x[:, :2], "sp", 4)
            y = conv2d(jnp.concatenate([top, x, bot], 1), w, [(0, 0), (1, 1)], dil=(2, 1), groups=g)
        if bug == "psum-groups-tp":
            y = psum(y, "tp")
        return y
    return f


C.smap("s.grouped_dilated_conv2d_groups_tp.sp4xtp2", {"sp": 4, "tp": 2}, grouped_sm,
       (P(None, "sp", None, "tp"), P(None, None, None, "tp")), P(None, "sp", None, "tp"), grouped_ref,
       (R(2, 16, 4, 8), R(3, 3, 2, 12, scale=0.4)),
       bugs=[("halo-one-row", ["wrong-halo"]), ("psum-groups-tp", ["wrong-reduction"])])

# ---------------------------------------------------------------------------
# 6. vocab-parallel CE, label smoothing + z-loss; baseline take_along_axis.
V6, B6, EPS6, Z6 = 32, 16, 0.1, 1e-3


def ce6_ref(logits, t):
    lse = jax.nn.logsumexp(logits, -1)
    nll = lse - jnp.take_along_axis(logits, t[:, None], -1)[:, 0]
    smooth = lse - jnp.mean(logits, -1)
    loss = (1 - EPS6) * nll + EPS6 * smooth + Z6 * jnp.square(lse)
    return jnp.mean(loss), nll


def ce6_sm(bug):
    def f(logits, t):
        bl, vl = logits.shape
        start = idx("tp") * vl
        mloc = jnp.max(logits, -1)
        m = mloc if bug == "no-pmax" else pmax(lax.stop_gradient(mloc), "tp")
        lse = jnp.log(psum(jnp.sum(jnp.exp(logits - m[:, None]), -1), "tp")) + m
        lt = t if bug == "no-vocab-offset" else t - start
        inr = (lt >= 0) & (lt < vl)
        picked = logits[jnp.arange(bl), jnp.where(inr, lt, 0)]
        picked = psum(jnp.where(inr, picked, 0.0), "tp")
        nll = lse - picked
        smooth = lse - psum(jnp.sum(logits, -1), "tp") / V6
        loss = (1 - EPS6) * nll + EPS6 * smooth + Z6 * jnp.square(lse)
        return psum(jnp.sum(loss), "dp") / B6, nll
    return f


C.smap("s.vocab_ce_arange_pick_smooth_zloss.dp2xtp4", {"dp": 2, "tp": 4}, ce6_sm, (P("dp", "tp"), P("dp")),
       (P(), P("dp")), ce6_ref, (R(B6, V6, scale=3.0), I(0, V6, B6)),
       bugs=[("no-vocab-offset", ["wrong-offset"]), ("no-pmax", ["missing-collective"])])

# ---------------------------------------------------------------------------
# 7. CE over (B, S, V) with ignore_index -100 and per-token weights;
#    baseline arange form, distributed take_along_axis.
B7, S7, V7 = 4, 8, 48
T7 = I(0, V7, B7, S7)
T7[0, :3] = -100
T7[2, 5:] = -100
T7[3, 0] = -100


def ce7_ref(logits, t, wt):
    valid = t != -100
    safe = jnp.where(valid, t, 0)
    lse = jax.nn.logsumexp(logits, -1)
    pick = logits[jnp.arange(B7)[:, None], jnp.arange(S7)[None, :], safe]
    w = wt * valid
    return jnp.sum(w * (lse - pick)) / jnp.sum(w), jnp.where(valid, lse - pick, 0.0)


def ce7_sm(bug):
    def f(logits, t, wt):
        vl = logits.shape[-1]
        lt = t - idx("tp") * vl
        inr = (lt >= 0) & (lt < vl)
        m = pmax(lax.stop_gradient(jnp.max(logits, -1)), "tp")
        lse = jnp.log(psum(jnp.sum(jnp.exp(logits - m[..., None]), -1), "tp")) + m
        pick = jnp.take_along_axis(logits, jnp.clip(lt, 0, vl - 1)[..., None], -1)[..., 0]
        pick = jnp.where(inr, 0.0, pick) if bug == "mask-sign-flipped" else jnp.where(inr, pick, 0.0)
        valid = t != -100
        nll = jnp.where(valid, lse - psum(pick, "tp"), 0.0)
        w = wt * valid
        den = jnp.sum(w) if bug == "local-denominator" else psum(jnp.sum(w), "dp")
        return psum(jnp.sum(w * nll), "dp") / den, nll
    return f


C.smap("s.ce_ignore_index_token_weights_take_along.dp2xtp4", {"dp": 2, "tp": 4}, ce7_sm,
       (P("dp", None, "tp"), P("dp"), P("dp")), (P(), P("dp")), ce7_ref,
       (R(B7, S7, V7, scale=2.0), T7, np.abs(R(B7, S7)) + 0.2),
       bugs=[("mask-sign-flipped", ["wrong-mask"]), ("local-denominator", ["missing-collective"])])

# ---------------------------------------------------------------------------
# 8. CLIP loss on 2-D sharded logits (images over dp, texts over tp) with
#    diagonal picks, beside a vocab-parallel class-head CE.
B8, D8, V8, SC8 = 8, 16, 32, 10.0


def l2n(x):
    return x / jnp.linalg.norm(x, axis=-1, keepdims=True)


def clip_ref(img, txt, wc, y):
    L = SC8 * l2n(img) @ l2n(txt).T
    diag = L[jnp.arange(B8), jnp.arange(B8)]
    i2t = jnp.mean(jax.nn.logsumexp(L, 1) - diag)
    t2i = jnp.mean(jax.nn.logsumexp(L, 0) - diag)
    cl = img @ wc
    ce = jnp.mean(jax.nn.logsumexp(cl, -1) - cl[jnp.arange(B8), y])
    return (i2t + t2i) / 2, ce


def clip_sm(bug):
    def f(img, txt, wc, y):
        bi, bt = img.shape[0], txt.shape[0]      # 4 image rows, 2 text rows
        di, dt = idx("dp"), idx("tp")
        L = SC8 * l2n(img) @ l2n(txt).T            # block (bi, bt)
        # rows: image r = di*bi + i, its positive text is column r
        jr = di * bi + jnp.arange(bi) if bug == "diag-no-col-offset" else di * bi + jnp.arange(bi) - dt * bt
        inr = (jr >= 0) & (jr < bt)
        drow = psum(jnp.where(inr, L[jnp.arange(bi), jnp.where(inr, jr, 0)], 0.0), "tp")
        mr = pmax(lax.stop_gradient(jnp.max(L, 1)), "tp")
        lse_r = jnp.log(psum(jnp.sum(jnp.exp(L - mr[:, None]), 1), "tp")) + mr
        i2t = psum(jnp.sum(lse_r - drow), "dp")
        # columns: text c = dt*bt + j, its positive image is row c
        ic = dt * bt + jnp.arange(bt) - di * bi
        inc = (ic >= 0) & (ic < bi)
        dcol = psum(jnp.where(inc, L[jnp.where(inc, ic, 0), jnp.arange(bt)], 0.0), "dp")
        cax = "tp" if bug == "t2i-lse-over-tp" else "dp"
        mc = pmax(lax.stop_gradient(jnp.max(L, 0)), cax)
        lse_c = jnp.log(psum(jnp.sum(jnp.exp(L - mc[None, :]), 0), cax)) + mc
        t2i = psum(jnp.sum(lse_c - dcol), "tp")
        # class head: vocab over tp
        cl = img @ wc
        vl = cl.shape[-1]
        lt = y - dt * vl
        iv = (lt >= 0) & (lt < vl)
        pk = psum(jnp.where(iv, cl[jnp.arange(bi), jnp.where(iv, lt, 0)], 0.0), "tp")
        m = pmax(lax.stop_gradient(jnp.max(cl, -1)), "tp")
        lse = jnp.log(psum(jnp.sum(jnp.exp(cl - m[:, None]), -1), "tp")) + m
        ce = psum(jnp.sum(lse - pk), "dp") / B8
        return (i2t + t2i) / (2 * B8), ce
    return f


C.smap("s.clip_diag_pick_2d_blocks_plus_class_ce.dp2xtp4", {"dp": 2, "tp": 4}, clip_sm,
       (P("dp"), P("tp"), P(None, "tp"), P("dp")), (P(), P()), clip_ref,
       (R(B8, D8), R(B8, D8), R(D8, V8, scale=0.5), I(0, V8, B8)),
       bugs=[("diag-no-col-offset", ["wrong-offset"]), ("t2i-lse-over-tp", ["wrong-axis"])])

# ---------------------------------------------------------------------------
# 9. PPO per-token log-probs and entropy; baseline arange, dist take_along_axis.
B9, T9, V9, CLIPR9 = 4, 6, 40, 0.2


def ppo_ref(logits, a, old_lp, adv):
    logp = jax.nn.log_softmax(logits, -1)
    lp = logp[jnp.arange(B9)[:, None], jnp.arange(T9)[None, :], a]
    ent = -jnp.sum(jnp.exp(logp) * logp, -1)
    ratio = jnp.exp(lp - old_lp)
    obj = jnp.minimum(ratio * adv, jnp.clip(ratio, 1 - CLIPR9, 1 + CLIPR9) * adv)
    return -jnp.mean(obj) - 0.01 * jnp.mean(ent), lp, ent


def ppo_sm(bug):
    def f(logits, a, old_lp, adv):
        vl = logits.shape[-1]
        start = (idx("dp") if bug == "start-from-dp-index" else idx("tp")) * vl
        m = pmax(lax.stop_gradient(jnp.max(logits, -1, keepdims=True)), "tp")
        z = logits - m
        lse = jnp.log(psum(jnp.sum(jnp.exp(z), -1, keepdims=True), "tp"))
        logp = z - lse
        la = a - start
        ok = (la >= 0) & (la < vl)
        lp = jnp.take_along_axis(logp, jnp.clip(la, 0, vl - 1)[..., None], -1)[..., 0]
        lp = psum(jnp.where(ok, lp, 0.0), "tp")
        e = -jnp.sum(jnp.exp(logp) * logp, -1)
        ent = e if bug == "entropy-no-psum" else psum(e, "tp")
        ratio = jnp.exp(lp - old_lp)
        obj = jnp.minimum(ratio * adv, jnp.clip(ratio, 1 - CLIPR9, 1 + CLIPR9) * adv)
        n = B9 * T9
        loss = -psum(jnp.sum(obj), "dp") / n - 0.01 * psum(jnp.sum(ent), "dp") / n
        return loss, lp, ent
    return f


LG9 = R(B9, T9, V9, scale=1.5)
A9 = I(0, V9, B9, T9)
OLD9 = (np.take_along_axis(np.asarray(jax.nn.log_softmax(LG9, -1)), A9[..., None], -1)[..., 0]
        + R(B9, T9, scale=0.15)).astype(np.float32)
C.smap("s.ppo_logprob_entropy_take_along_vocab.dp2xtp4", {"dp": 2, "tp": 4}, ppo_sm,
       (P("dp", None, "tp"), P("dp"), P("dp"), P("dp")), (P(), P("dp"), P("dp")), ppo_ref,
       (LG9, A9, OLD9, R(B9, T9)),
       bugs=[("start-from-dp-index", ["wrong-offset"]), ("entropy-no-psum", ["missing-collective"])])

# ---------------------------------------------------------------------------
# 10. CE with replicated labels sliced by the dp index (dp4 x tp2, V=64).
B10, V10, EPS10 = 16, 64, 0.1


def ce10_ref(logits, labels):
    logp = jax.nn.log_softmax(logits, -1)
    nll = -jnp.take_along_axis(logp, labels[:, None], 1)[:, 0]
    return jnp.mean((1 - EPS10) * nll - EPS10 * jnp.mean(logp, -1))


def ce10_sm(bug):
    def f(logits, labels):
        bl, vl = logits.shape
        m = pmax(lax.stop_gradient(jnp.max(logits, -1)), "tp")
        lse = jnp.log(psum(jnp.sum(jnp.exp(logits - m[:, None]), -1), "tp")) + m
        if bug == "arange-global-batch":
            rows, t = jnp.arange(labels.shape[0]), labels
        else:
            rows, t = jnp.arange(bl), lax.dynamic_slice_in_dim(labels, idx("dp") * bl, bl)
        lt = t - idx("tp") * vl
        inr = (lt >= 0) & (lt < vl)
        picked = jnp.where(inr, logits[rows, jnp.where(inr, lt, 0)], 0.0)
        tot = jnp.sum(lse) - psum(jnp.sum(picked), "tp")
        ssum = jnp.sum(logits) if bug == "smooth-no-psum" else psum(jnp.sum(logits), "tp")
        smooth = jnp.sum(lse) - ssum / V10
        return psum((1 - EPS10) * tot + EPS10 * smooth, "dp") / B10
    return f


C.smap("s.ce_replicated_labels_dp_slice_arange.dp4xtp2", {"dp": 4, "tp": 2}, ce10_sm, (P("dp", "tp"), P()),
       P(), ce10_ref, (R(B10, V10, scale=2.5), I(0, V10, B10)),
       bugs=[("arange-global-batch", ["wrong-index"]), ("smooth-no-psum", ["missing-collective"])])

# ---------------------------------------------------------------------------
# GSPMD pairs.


# 11. 'SAME' conv1d after a VALID one: time 32 -> 30 (uneven over sp4,
#     pinned by with_sharding_constraint), input channels over tp2.
M11 = make_mesh({"sp": 4, "tp": 2})


def g_conv1d_same(x, w1, w2):
    y = conv1d(x, w1, (0, 0))                                 # (2, 30, 8)
    y = lax.with_sharding_constraint(y, NamedSharding(M11, P(None, "sp", "tp")))
    z = jnp.tanh(conv1d(y, w2, (2, 2)))                       # (2, 30, 6)
    return jnp.pad(z, ((0, 0), (1, 1), (0, 0)))


C.gspmd("g.conv1d_same_uneven_time_cin.sp4xtp2", {"sp": 4, "tp": 2},
        (P(None, "sp", "tp"), P(None, "tp", None), P(None, "tp", None)), P(None, "sp", None), g_conv1d_same,
        (R(2, 32, 8), R(3, 8, 8, scale=0.4), R(5, 8, 6, scale=0.4)))


# 12. strided conv2d, height 16 -> 7 (uneven over sp4, pinned), output
#     channels over tp2, padded back to height 8.
def g_conv2d_strided(x, w):
    y = conv2d(x, w, [(0, 0), (1, 1)], stride=(2, 1))      # (2, 7, 6, 8)
    y = lax.with_sharding_constraint(y, NamedSharding(M11, P(None, "sp", None, "tp")))
    return jnp.pad(jax.nn.relu(y), ((0, 0), (0, 1), (0, 0), (0, 0)))


C.gspmd("g.conv2d_stride2_uneven_height_cout.sp4xtp2", {"sp": 4, "tp": 2},
        (P(None, "sp", None, None), P(None, None, None, "tp")), P(None, "sp", None, "tp"), g_conv2d_strided,
        (R(2, 16, 6, 4), R(3, 3, 4, 8, scale=0.4)))

# 13. take_along_axis CE with smoothing, z-loss, ignore_index.
T13 = I(0, 48, 16)
T13[[1, 6, 7, 12]] = -100


def g_ce13(logits, t):
    valid = t != -100
    lse = jax.nn.logsumexp(logits, -1)
    pick = jnp.take_along_axis(logits, jnp.where(valid, t, 0)[:, None], -1)[:, 0]
    loss = 0.9 * (lse - pick) + 0.1 * (lse - jnp.mean(logits, -1)) + 1e-3 * lse ** 2
    return jnp.sum(jnp.where(valid, loss, 0.0)) / jnp.sum(valid)


C.gspmd("g.ce_take_along_smooth_zloss_ignore.dp2xtp4", {"dp": 2, "tp": 4}, (P("dp", "tp"), P("dp")), P(),
        g_ce13, (R(16, 48, scale=2.0), T13))


# 14. CLIP diagonal beside a class-head arange pick.
def g_clip14(img, txt, wc, y):
    return clip_ref(img, txt, wc, y)


C.gspmd("g.clip_diag_arange_class_pick.dp2xtp4", {"dp": 2, "tp": 4},
        (P("dp", None), P("tp", None), P(None, "tp"), P("dp")), (P(), P()), g_clip14,
        (R(B8, D8), R(B8, D8), R(D8, V8, scale=0.5), I(0, V8, B8)))


# 15. causal dilated depthwise conv1d on a 4-step context + 32 steps (36,
#     uneven over sp8, pinned), the last 32 outputs kept.
M15 = make_mesh({"sp": 8})


def g_causal_dw(ctx, x, w):
    xx = jnp.concatenate([ctx, x], 1)                          # (2, 36, 4)
    xx = lax.with_sharding_constraint(xx, NamedSharding(M15, P(None, "sp", None)))
    y = conv1d(xx, w, (8, 0), dil=4, groups=xx.shape[-1])
    return y[:, ctx.shape[1]:]


C.gspmd("g.causal_dilated_depthwise_conv1d_uneven.sp8", {"sp": 8}, (P(), P(None, "sp", None), P()),
        P(None, "sp", None), g_causal_dw, (R(2, 4, 4), R(2, 32, 4), R(3, 1, 4, scale=0.6)))

C.finish()
