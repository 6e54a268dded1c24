"""samples/fresh14: a fourteenth batch of programs as a user writes them, on
the theme of models and training outside language modelling (vision, audio,
reinforcement learning, generative models) in plain JAX / optax, none of
them an idiom of samples/fresh .. fresh12, probe, train or wild.
shard_map families. Vision: a Swin block with the image's height over sp
(the cyclic jnp.roll by half a window up as a two-row halo from the next
device, cyclic, and back down after the attention; the width roll local;
window partition / reverse by reshape + transpose; the shift mask's region
ids sliced at the device's first row; a relative position bias); a
ConvNeXt block with the channels over tp (depthwise 7x7 conv local, the
channels-last LayerNorm's statistics psum'd, all_gather before the
column-parallel MLP, psum_scatter after the row-parallel one, layer
scale); an MLP-Mixer block whose token-mixing MLP contracts over the
sequence-sharded patches (first weight's rows over sp, psum before the
bias, the second weight sliced at the device's tokens); a ResNet training
step under dp (bottleneck with a strided 3x3 and a strided projection
shortcut, a dilated 3x3, BatchNorm in training mode with pmean'd batch mean
and mean square, running statistics, momentum SGD on pmean'd gradients); a
ViT layer on images whose height and width are over two axes (h x w; the
position table sliced at both offsets, keys and values all_gathered over
the axis tuple, a class token kept on every device); a strided SAME conv
and a 3x3 / 2 max pool whose one-row halos come from the next device, then
global average pooling by pmean. Audio: a Conformer convolution module
(pointwise conv, GLU, depthwise 1-D conv of width 7 with three-frame halos
from both neighbours, BatchNorm in inference mode, swish) with time over
sp; Conformer relative positional self-attention (content and position
biases, a learned relative table indexed by global i - j, keys and values
all_gathered untiled and moved into place); a CTC training step with
optax.ctc_loss (frame and label paddings) under dp with Adam; log-mel
features with the waveform over sp (frames by strided slicing with a
16-sample halo from the next device, Hann window, jnp.fft.rfft, a mel
filterbank matmul, log) and per-utterance normalisation by pmean'd
statistics. RL: GAE by a reverse lax.scan with time over sp (the next
value from the next device or the bootstrap value, the shards' first
(advantage, product of gamma*lambda*(1-done)) all_gathered and combined by
a reverse scan over shards); a PPO update under dp (GAE per environment,
advantages normalised by pmean'd mean and std, clipped ratios, clipped
value loss, entropy bonus, clip_by_global_norm + Adam); a double-DQN step
with the actions over tp (argmax across tp by pmax of the local maxima and
pmin of the global indices holding it, the target network's value by a
masked psum, Huber loss, SGD, a Polyak target update; check_vma=True); a
REINFORCE step with per-episode discounted returns over a time axis over sp
(a reversed lax.associative_scan of affine maps per shard, the return
entering from later shards down a chain of n-1 ppermutes, a pmean'd
baseline). Generative: a VQ-VAE quantiser under dp (argmin distances,
straight-through output, commitment loss, EMA codebook update with psum'd
counts and sums and Laplace smoothing, perplexity); a codebook whose codes
are over tp (nearest code by pmin of distances then of indices, the
quantised vector by a masked psum); a RealNVP affine coupling layer with
the features over tp (conditioner psum'd before its bias, log-determinant
and square sums psum'd) and the same layer's NLL in an Adam step under
check_vma=True; a diffusion noise-prediction step under dp (timesteps and
noise drawn per example over the global batch from the step's key and
sliced by axis_index, a sinusoidal timestep embedding, per-sample loss
weights -- importance weights times the P2 weighting 1 / (1 + SNR) --
normalised by their psum'd sum, gradients psum'd, Adam).
Under GSPMD: the Swin block in an AdamW step (height over sp, batch over
dp), the ConvNeXt block in an AdamW step with the parameters' channels over
tp (images over dp only, and with their channels over tp too) and in bf16
(height over sp, channels over tp), the ResNet step with the batch over
dp8, the ViT layer in an Adam step (h x w), a Conformer block (macaron
feed-forwards, relative positional attention, the convolution module) with
time over sp, the CTC step on dp8, the log-mel features (time over sp, the
frames constrained there), the PPO step with the rollouts' time over sp
(GAE's reverse scan along the sharded axis), the double-DQN step with the
actions over tp, the REINFORCE step with time over sp, a VQ-VAE step
(straight-through, Adam on encoder / decoder, EMA codebook), two RealNVP
couplings in an Adam step with features over tp, the diffusion step on
dp8, and the MLP-Mixer block in an AdamW step with the tokens over sp.
Two GSPMD pairs are exported as expected mismatches (expected="mismatch",
said in their manifest notes), because XLA's partitioned program is not
the baseline's function: the gradient of a depthwise convolution
(feature_group_count = channels) with respect to its weight, when the
images are over dp and replicated over the other axis tp of the mesh, comes
out summed over the tp replicas (four times too large; 35. is the minimal
pair, the ConvNeXt AdamW step with images over dp the program that met
it). On a mesh of dp alone, or with the images' channels over tp (21b.),
it is right.
Numerics: every other correct pair agrees with its baseline at rounding
level (f32 pairs within about 2e-6 on outputs up to 80); the bf16 ConvNeXt
pair differs by 0.0156 on outputs of 4.75, half a bf16 ulp.
Replaced for their numerics: a PPO bug variant that psum'd instead of
pmean'd the gradients (clip_by_global_norm followed by Adam makes the
update scale-free, so the step did not change: now the gradients are not
pmean'd at all).
Left out, as idioms of earlier batches: the DDIM sampling loop (fresh7),
sync BatchNorm over dp as a forward pass (fresh), GroupNorm over sharded
channels and min-SNR weights (fresh7), one-hop sliding-window halos
(fresh6), ViT with patch rows over sp only (fresh11).
Each shard_map family has the bug variants a careless parallelisation makes
(a halo from the wrong neighbour, swapped or closed into a ring, the mask
or positions at local offsets, the window partition reshaped without its
transpose, an all_gather reshaped without moving the device axis, a
gather over one axis of two, local LayerNorm / BatchNorm / CMVN /
advantage statistics, a pmean of local variances, a bias added before the
psum, a psum then the first slice instead of a psum_scatter, a pooled
mean psum'd, a CTC blank index off by one, gradients not pmean'd, a GAE
carry missing or from the previous shard, a return chain reversed or a
step short, a local baseline, an argmax index without its offset or from
local maxima, codebook counts not psum'd or pmean'd, a code index without
its offset, a quantised vector not psum'd, a log-determinant without its
psum, psum'd over dp or pmean'd, a local weight sum, noise drawn without
slicing the global batch).
Exported with scalify_jax.export_pair; every pair is also run by JAX on
seeded inputs and its manifest entry records the largest difference from
the single-device run ("numerics").
Run from the repository root: bash samples/gen/run_fresh14.sh [SUBSTR...]
(only the pairs whose name contains a SUBSTR; the others keep their entries).
"""
import sys
import numpy as np
import jax, jax.numpy as jnp
from jax import lax
from jax.sharding import NamedSharding, PartitionSpec as P
import optax
sys.path.insert(0, "samples/gen")  # run from the repository root (run_fresh14.sh)
from fresh_lib import Corpus, seeded, mse, np_tree, state_specs  # noqa: E402
from scalify_jax import make_mesh  # noqa: E402

SCRIPT = "samples/gen/fresh14.py"
C = Corpus("samples/fresh14", SCRIPT, "samples/gen/run_fresh14.sh", sys.argv[1:])
rng, R, I = seeded(1414)
psum, pmax, pmin, pmean, idx, ppermute = lax.psum, lax.pmax, lax.pmin, lax.pmean, lax.axis_index, lax.ppermute
NHWC = ("NHWC", "HWIO", "NHWC")


def ln(x, w, b, eps=1e-6):
    mu = x.mean(-1, keepdims=True)
    var = jnp.square(x - mu).mean(-1, keepdims=True)
    return (x - mu) * lax.rsqrt(var + eps) * w + b


def wsc(mesh, a, *spec):
    return lax.with_sharding_constraint(a, NamedSharding(make_mesh(mesh), P(*spec)))


def up(n):
    """ppermute pairs sending each device's block to the previous one (j -> j-1), not cyclic."""
    return [(j, j - 1) for j in range(1, n)]


def down(n):
    """j -> j+1, not cyclic."""
    return [(j, j + 1) for j in range(n - 1)]


def ones_like_ln(c):
    return 1.0 + R(c, scale=0.1), R(c, scale=0.1)


# ---------------------------------------------------------------------------
# 1. a Swin block (shifted-window attention with a relative position bias and
#    the shift mask, then an MLP) with the image's height over sp: the cyclic
#    jnp.roll by half a window up (and back down after the attention) is a
#    halo of two rows from the next (previous) device, cyclic; the width roll
#    is local; the mask's region ids are sliced at the device's first row.
SW_B, SW_H, SW_W, SW_C, SW_NH, WS, SH = 2, 16, 8, 8, 2, 4, 2


def win_part(x, ws, bad=False):
    b, h, w, c = x.shape
    if bad:
        return x.reshape(b, h // ws, w // ws, ws, ws, c).reshape(-1, ws * ws, c)
    return x.reshape(b, h // ws, ws, w // ws, ws, c).transpose(0, 1, 3, 2, 4, 5).reshape(-1, ws * ws, c)


def win_rev(wins, ws, b, h, w, bad=False):
    c = wins.shape[-1]
    if bad:
        return wins.reshape(b, h, w, c)
    return wins.reshape(b, h // ws, w // ws, ws, ws, c).transpose(0, 1, 3, 2, 4, 5).reshape(b, h, w, c)


def swin_regions(h, w, ws, s):
    img = np.zeros((h, w), np.float32)
    cnt = 0
    for hs in (slice(0, -ws), slice(-ws, -s), slice(-s, None)):
        for wsl in (slice(0, -ws), slice(-ws, -s), slice(-s, None)):
            img[hs, wsl] = cnt
            cnt += 1
    return img


SW_REG = swin_regions(SW_H, SW_W, WS, SH)
_co = np.stack(np.meshgrid(np.arange(WS), np.arange(WS), indexing="ij")).reshape(2, -1)
_rel = (_co[:, :, None] - _co[:, None, :]).transpose(1, 2, 0) + WS - 1
SW_REL_IDX = _rel[..., 0] * (2 * WS - 1) + _rel[..., 1]


def shift_mask(reg, bad=False):
    mw = win_part(reg[None, :, :, None], WS, bad)[..., 0]
    return jnp.where(mw[:, None, :] != mw[:, :, None], -100.0, 0.0)


def win_attn(p, xw, mask):
    bw, n, c = xw.shape
    e = c // SW_NH
    qkv = (xw @ p["qkv"]).reshape(bw, n, 3, SW_NH, e)
    q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
    bias = p["rpb"][SW_REL_IDX].transpose(2, 0, 1)
    s = jnp.einsum("wqhe,wkhe->whqk", q, k) / np.sqrt(e) + bias[None]
    nw = mask.shape[0]
    s = (s.reshape(bw // nw, nw, SW_NH, n, n) + mask[None, :, None]).reshape(bw, SW_NH, n, n)
    o = jnp.einsum("whqk,wkhe->wqhe", jax.nn.softmax(s, -1), v).reshape(bw, n, c)
    return o @ p["proj"]


def swin_mlp(p, x):
    return x + jax.nn.gelu(ln(x, p["ln2w"], p["ln2b"]) @ p["w1"]) @ p["w2"]


def swin_block(p, x):
    b, h, w, c = x.shape
    xs = jnp.roll(ln(x, p["ln1w"], p["ln1b"]), (-SH, -SH), (1, 2))
    o = win_attn(p, win_part(xs, WS), shift_mask(jnp.asarray(SW_REG)))
    y = jnp.roll(win_rev(o, WS, b, h, w), (SH, SH), (1, 2))
    return swin_mlp(p, x + y)


def swin_rows(bug):
    def f(p, x):
        n, me = 4, idx("sp")
        b, hl, w, c = x.shape
        cyc_up = [(j, (j - 1) % n) for j in range(n)]
        cyc_down = [(j, (j + 1) % n) for j in range(n)]
        bad = bug == "window-reshape-order"
        h = ln(x, p["ln1w"], p["ln1b"])
        below = ppermute(h[:, :SH], "sp", cyc_down if bug == "halo-from-prev" else cyc_up)
        xs = jnp.roll(jnp.concatenate([h[:, SH:], below], 1), -SH, 2)
        reg = lax.dynamic_slice_in_dim(jnp.asarray(SW_REG), 0 if bug == "mask-rows-no-offset" else me * hl, hl, 0)
        o = win_attn(p, win_part(xs, WS, bad), shift_mask(reg, bad))
        y = jnp.roll(win_rev(o, WS, b, hl, w, bad), SH, 2)
        above = ppermute(y[:, -SH:], "sp", cyc_down)
        y = jnp.concatenate([above, y[:, :-SH]], 1)
        return swin_mlp(p, x + y)
    return f


sw_p = {"ln1w": 1.0 + R(SW_C, scale=0.1), "ln1b": R(SW_C, scale=0.1), "qkv": R(SW_C, 3 * SW_C, scale=0.4),
        "rpb": R((2 * WS - 1) ** 2, SW_NH, scale=0.5), "proj": R(SW_C, SW_C, scale=0.4),
        "ln2w": 1.0 + R(SW_C, scale=0.1), "ln2b": R(SW_C, scale=0.1), "w1": R(SW_C, 4 * SW_C, scale=0.3),
        "w2": R(4 * SW_C, SW_C, scale=0.3)}
sw_rep = {k: P() for k in sw_p}
sw_x = R(SW_B, SW_H, SW_W, SW_C)
C.smap("s.swin_shifted_window_rows_halo.sp4", {"sp": 4}, swin_rows, (sw_rep, P(None, "sp")), P(None, "sp"),
       swin_block, (sw_p, sw_x),
       bugs=[("halo-from-prev", ["wrong-permutation"]), ("mask-rows-no-offset", ["wrong-offset"]),
             ("window-reshape-order", ["wrong-reshape-order"])])


# ---------------------------------------------------------------------------
# 2. a ConvNeXt block with the channels over tp: the depthwise 7x7 conv is
#    per channel (local), the channels-last LayerNorm's mean and variance are
#    psum'd, the normalised activations all_gathered for the column-parallel
#    first MLP layer, the row-parallel second layer's partial sums
#    psum_scatter'ed back to the device's channels, times the layer scale.
CN_B, CN_H, CN_C = 2, 8, 16


def convnext(p, x):
    y = lax.conv_general_dilated(x, p["dw"], (1, 1), "SAME", dimension_numbers=NHWC,
                                 feature_group_count=x.shape[-1]) + p["dwb"]
    y = ln(y, p["lnw"], p["lnb"])
    y = jax.nn.gelu(y @ p["w1"] + p["b1"]) @ p["w2"] + p["b2"]
    return x + p["gamma"] * y


def convnext_tp(bug):
    def f(p, x):
        c = lax.psum(x.shape[-1], "tp")
        y = lax.conv_general_dilated(x, p["dw"], (1, 1), "SAME", dimension_numbers=NHWC,
                                     feature_group_count=x.shape[-1]) + p["dwb"]
        red = (lambda a: a) if bug == "ln-local-stats" else (lambda a: psum(a, "tp"))
        cl = y.shape[-1] if bug == "ln-local-stats" else c
        mu = red(y.sum(-1, keepdims=True)) / cl
        var = red(jnp.square(y - mu).sum(-1, keepdims=True)) / cl
        y = (y - mu) * lax.rsqrt(var + 1e-6) * p["lnw"] + p["lnb"]
        y = lax.all_gather(y, "tp", axis=3, tiled=True)
        part = jax.nn.gelu(y @ p["w1"] + p["b1"]) @ p["w2"]
        if bug == "psum-then-first-slice":
            y = psum(part, "tp")[..., :x.shape[-1]]
        else:
            y = lax.psum_scatter(part, "tp", scatter_dimension=3, tiled=True)
        return x + p["gamma"] * (y + p["b2"])
    return f


cn_p = {"dw": R(7, 7, 1, CN_C, scale=0.2), "dwb": R(CN_C, scale=0.1), "lnw": 1.0 + R(CN_C, scale=0.1),
        "lnb": R(CN_C, scale=0.1), "w1": R(CN_C, 4 * CN_C, scale=0.3), "b1": R(4 * CN_C, scale=0.1),
        "w2": R(4 * CN_C, CN_C, scale=0.2), "b2": R(CN_C, scale=0.1), "gamma": R(CN_C, scale=0.5)}
cn_ps = {"dw": P(None, None, None, "tp"), "dwb": P("tp"), "lnw": P("tp"), "lnb": P("tp"), "w1": P(None, "tp"),
         "b1": P("tp"), "w2": P("tp"), "b2": P("tp"), "gamma": P("tp")}
C.smap("s.convnext_block_channels.tp4", {"tp": 4}, convnext_tp, (cn_ps, P(None, None, None, "tp")),
       P(None, None, None, "tp"), convnext, (cn_p, R(CN_B, CN_H, CN_H, CN_C)),
       bugs=[("ln-local-stats", ["missing-all-reduce"]), ("psum-then-first-slice", ["wrong-offset"])])


# ---------------------------------------------------------------------------
# 3. an MLP-Mixer block with the patches (tokens) over sp: the token-mixing
#    MLP contracts over the sharded token dim (its first weight's rows over
#    sp, the partial products psum'd before the bias and the GELU), its
#    second weight and bias replicated and sliced at the device's tokens;
#    the channel-mixing MLP is local.
MX_B, MX_S, MX_C, MX_DT, MX_DC = 2, 16, 8, 32, 16


def mixer(p, x):
    y = ln(x, p["ln1w"], p["ln1b"])
    h = jax.nn.gelu(jnp.einsum("bsc,sd->bcd", y, p["tw1"]) + p["tb1"])
    x = x + jnp.swapaxes(jnp.einsum("bcd,ds->bcs", h, p["tw2"]) + p["tb2"], 1, 2)
    return x + jax.nn.gelu(ln(x, p["ln2w"], p["ln2b"]) @ p["cw1"] + p["cb1"]) @ p["cw2"] + p["cb2"]


def mixer_sp(bug):
    def f(p, x):
        sl = x.shape[1]
        y = ln(x, p["ln1w"], p["ln1b"])
        if bug == "bias-before-psum":
            h = jax.nn.gelu(psum(jnp.einsum("bsc,sd->bcd", y, p["tw1"]) + p["tb1"], "sp"))
        else:
            h = jax.nn.gelu(psum(jnp.einsum("bsc,sd->bcd", y, p["tw1"]), "sp") + p["tb1"])
        off = 0 if bug == "w2-cols-no-offset" else idx("sp") * sl
        w2 = lax.dynamic_slice_in_dim(p["tw2"], off, sl, 1)
        b2 = lax.dynamic_slice_in_dim(p["tb2"], off, sl, 0)
        x = x + jnp.swapaxes(jnp.einsum("bcd,ds->bcs", h, w2) + b2, 1, 2)
        return x + jax.nn.gelu(ln(x, p["ln2w"], p["ln2b"]) @ p["cw1"] + p["cb1"]) @ p["cw2"] + p["cb2"]
    return f


mx_p = {"ln1w": 1.0 + R(MX_C, scale=0.1), "ln1b": R(MX_C, scale=0.1), "tw1": R(MX_S, MX_DT, scale=0.3),
        "tb1": R(MX_DT, scale=0.3), "tw2": R(MX_DT, MX_S, scale=0.2), "tb2": R(MX_S, scale=0.1),
        "ln2w": 1.0 + R(MX_C, scale=0.1), "ln2b": R(MX_C, scale=0.1), "cw1": R(MX_C, MX_DC, scale=0.3),
        "cb1": R(MX_DC, scale=0.1), "cw2": R(MX_DC, MX_C, scale=0.3), "cb2": R(MX_C, scale=0.1)}
mx_ps = dict({k: P() for k in mx_p}, tw1=P("sp"))
C.smap("s.mlp_mixer_token_mixing_tokens.sp4", {"sp": 4}, mixer_sp, (mx_ps, P(None, "sp")), P(None, "sp"), mixer,
       (mx_p, R(MX_B, MX_S, MX_C)),
       bugs=[("bias-before-psum", ["numerics"]), ("w2-cols-no-offset", ["wrong-offset"])])


# ---------------------------------------------------------------------------
# 4. a ResNet training step under dp: a bottleneck block (1x1, strided 3x3,
#    1x1, a strided 1x1 projection shortcut) and a dilated 3x3 conv, every
#    conv followed by BatchNorm in training mode whose batch mean and mean
#    square are pmean'd over dp (cross-replica statistics); the running
#    statistics updated with momentum; SGD with momentum on pmean'd
#    gradients of the device's mean cross-entropy.
RN_B, RN_HW, RN_CIN, RN_K = 8, 8, 8, 5
BN_NAMES = ("bn1", "bn2", "bn3", "bnsc", "bnd")
rn_opt = optax.sgd(0.1, momentum=0.9)


def conv(x, w, stride=1, dil=1):
    return lax.conv_general_dilated(x, w, (stride, stride), "SAME", rhs_dilation=(dil, dil), dimension_numbers=NHWC)


def bn_train(x, g, b, axis=None, bug=None):
    mean = x.mean((0, 1, 2))
    msq = jnp.square(x).mean((0, 1, 2))
    if axis is not None and bug == "var-mean-of-local-vars":
        var = pmean(msq - jnp.square(mean), axis)
        mean = pmean(mean, axis)
    else:
        if axis is not None and bug != "bn-local-stats":
            mean, msq = pmean(mean, axis), pmean(msq, axis)
        var = msq - jnp.square(mean)
    return (x - mean) * lax.rsqrt(var + 1e-5) * g + b, (mean, var)


def resnet(p, x, axis=None, bug=None):
    st = {}

    def bn(h, name):
        h, st[name] = bn_train(h, p[name + "g"], p[name + "b"], axis, bug)
        return h
    h = jax.nn.relu(bn(conv(x, p["c1"]), "bn1"))
    h = jax.nn.relu(bn(conv(h, p["c2"], stride=2), "bn2"))
    h = bn(conv(h, p["c3"]), "bn3")
    h = jax.nn.relu(h + bn(conv(x, p["sc"], stride=2), "bnsc"))
    h = jax.nn.relu(bn(conv(h, p["cd"], dil=2), "bnd"))
    return h.mean((1, 2)) @ p["fc"], st


def rn_update_stats(run, st):
    return {k: (0.9 * run[k][0] + 0.1 * st[k][0], 0.9 * run[k][1] + 0.1 * st[k][1]) for k in run}


def rn_loss(p, x, y, axis=None, bug=None):
    logits, st = resnet(p, x, axis, bug)
    return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean(), st


def resnet_step(p, opt, run, x, y):
    (lv, st), g = jax.value_and_grad(rn_loss, has_aux=True)(p, x, y)
    u, opt = rn_opt.update(g, opt, p)
    return optax.apply_updates(p, u), opt, rn_update_stats(run, st), lv


def resnet_dp(bug):
    def f(p, opt, run, x, y):
        (lv, st), g = jax.value_and_grad(rn_loss, has_aux=True)(p, x, y, "dp", bug)
        g = pmean(g, "dp")
        u, opt = rn_opt.update(g, opt, p)
        return optax.apply_updates(p, u), opt, rn_update_stats(run, st), pmean(lv, "dp")
    return f


rn_p = {"c1": R(1, 1, RN_CIN, 4, scale=0.4), "c2": R(3, 3, 4, 4, scale=0.3), "c3": R(1, 1, 4, 16, scale=0.4),
        "sc": R(1, 1, RN_CIN, 16, scale=0.3), "cd": R(3, 3, 16, 16, scale=0.15), "fc": R(16, RN_K, scale=0.3)}
for _n, _c in zip(BN_NAMES, (4, 4, 16, 16, 16)):
    rn_p[_n + "g"], rn_p[_n + "b"] = ones_like_ln(_c)
rn_run = {n: (np.zeros(c, np.float32), np.ones(c, np.float32)) for n, c in zip(BN_NAMES, (4, 4, 16, 16, 16))}
rn_rep = {k: P() for k in rn_p}
rn_opt_st = np_tree(rn_opt.init(rn_p))
rn_args = (rn_p, rn_opt_st, rn_run, R(RN_B, RN_HW, RN_HW, RN_CIN), I(0, RN_K, RN_B))
rn_run_ps = jax.tree.map(lambda _: P(), rn_run)
C.smap("s.resnet_bottleneck_syncbn_momentum.dp4", {"dp": 4}, resnet_dp,
       (rn_rep, state_specs(rn_opt_st, rn_rep), rn_run_ps, P("dp"), P("dp")),
       (rn_rep, state_specs(rn_opt_st, rn_rep), rn_run_ps, P()), resnet_step, rn_args,
       bugs=[("bn-local-stats", ["missing-all-reduce"]), ("var-mean-of-local-vars", ["numerics"])])


# ---------------------------------------------------------------------------
# 5. a ViT encoder layer on images whose height and width are over two mesh
#    axes (h x w): each device embeds its block of patches (reshape +
#    transpose), adds the position embeddings sliced at its two offsets,
#    keeps a copy of the class token; keys and values of the patches are
#    all_gathered over both axes (the class token's once), the class token's
#    output goes to the head.
VT_B, VT_H, VT_W, VT_PS, VT_D, VT_NH, VT_K = 2, 16, 32, 4, 16, 2, 5


def patchify(img):
    b, h, w, c = img.shape
    return img.reshape(b, h // VT_PS, VT_PS, w // VT_PS, VT_PS, c).transpose(0, 1, 3, 2, 4, 5).reshape(
        b, h // VT_PS, w // VT_PS, VT_PS * VT_PS * c)


def vit_layer(p, tok, pos, gather):
    b, gh, gw, d = tok.shape
    x = (tok + pos).reshape(b, gh * gw, d)
    x = jnp.concatenate([jnp.broadcast_to(p["cls"] + p["pos_cls"], (b, 1, d)), x], 1)
    h = ln(x, p["ln1w"], p["ln1b"])
    q, k, v = jnp.split((h @ p["wqkv"]).reshape(b, -1, 3 * VT_NH, d // VT_NH), 3, 2)
    k = jnp.concatenate([k[:, :1], gather(k[:, 1:])], 1)
    v = jnp.concatenate([v[:, :1], gather(v[:, 1:])], 1)
    a = jax.nn.softmax(jnp.einsum("bqhe,bkhe->bhqk", q, k) / np.sqrt(d // VT_NH), -1)
    x = x + jnp.einsum("bhqk,bkhe->bqhe", a, v).reshape(b, -1, d) @ p["wo"]
    x = x + jax.nn.gelu(ln(x, p["ln2w"], p["ln2b"]) @ p["w1"]) @ p["w2"]
    return x[:, 0] @ p["head"], x[:, 1:].reshape(b, gh, gw, d)


def vit2d(p, img):
    return vit_layer(p, patchify(img) @ p["wp"] + p["bp"], p["pos"], lambda a: a)


def vit2d_hw(bug):
    def f(p, img):
        tok = patchify(img) @ p["wp"] + p["bp"]
        gh, gw = tok.shape[1:3]
        oh = idx("h") * gh
        ow = 0 if bug == "pos-offset-h-only" else idx("w") * gw
        pos = lax.dynamic_slice(p["pos"], (oh, ow, 0), (gh, gw, tok.shape[-1]))
        axes = "h" if bug == "kv-gather-h-only" else ("h", "w")
        return vit_layer(p, tok, pos, lambda a: lax.all_gather(a, axes, axis=1, tiled=True))
    return f


vt_p = {"wp": R(VT_PS * VT_PS * 3, VT_D, scale=0.2), "bp": R(VT_D, scale=0.1),
        "pos": R(VT_H // VT_PS, VT_W // VT_PS, VT_D, scale=0.5), "cls": R(VT_D, scale=0.5),
        "pos_cls": R(VT_D, scale=0.5), "ln1w": 1.0 + R(VT_D, scale=0.1), "ln1b": R(VT_D, scale=0.1),
        "wqkv": R(VT_D, 3 * VT_D, scale=0.3), "wo": R(VT_D, VT_D, scale=0.3), "ln2w": 1.0 + R(VT_D, scale=0.1),
        "ln2b": R(VT_D, scale=0.1), "w1": R(VT_D, 2 * VT_D, scale=0.3), "w2": R(2 * VT_D, VT_D, scale=0.3),
        "head": R(VT_D, VT_K, scale=0.3)}
vt_rep = {k: P() for k in vt_p}
vt_img = R(VT_B, VT_H, VT_W, 3)
C.smap("s.vit_2d_patches_cls_token.h2xw4", {"h": 2, "w": 4}, vit2d_hw, (vt_rep, P(None, "h", "w")),
       (P(), P(None, "h", "w")), vit2d, (vt_p, vt_img),
       bugs=[("pos-offset-h-only", ["wrong-offset"]), ("kv-gather-h-only", ["wrong-collective-group"])])


# ---------------------------------------------------------------------------
# 6. a strided 3x3 conv (SAME: one row of padding below, so each device
#    needs the next device's first row), ReLU, a 3x3 / 2 max pool (SAME,
#    again one row from below, -inf past the image), and global average
#    pooling (pmean) with the image's height over sp.
SC_B, SC_H, SC_W, SC_CI, SC_CO = 2, 32, 8, 4, 8


def strided_pool(w, x):
    h = jax.nn.relu(lax.conv_general_dilated(x, w, (2, 2), "SAME", dimension_numbers=NHWC))
    m = lax.reduce_window(h, -jnp.inf, lax.max, (1, 3, 3, 1), (1, 2, 2, 1), "SAME")
    return m, m.mean((1, 2))


def strided_pool_sp(bug):
    def f(w, x):
        n = 4
        halo = ppermute(x[:, :1], "sp", down(n) if bug == "conv-halo-from-prev" else up(n))
        xx = jnp.concatenate([x, halo], 1)
        h = jax.nn.relu(lax.conv_general_dilated(xx, w, (2, 2), ((0, 0), (0, 1)), dimension_numbers=NHWC))
        hb = ppermute(h[:, :1], "sp", up(n))
        hb = jnp.where(idx("sp") == n - 1, -jnp.inf, hb)
        m = lax.reduce_window(jnp.concatenate([h, hb], 1), -jnp.inf, lax.max, (1, 3, 3, 1), (1, 2, 2, 1),
                              ((0, 0), (0, 0), (0, 1), (0, 0)))
        red = psum if bug == "gap-psum" else pmean
        return m, red(m.mean((1, 2)), "sp")
    return f


C.smap("s.strided_conv_maxpool_gap_rows.sp4", {"sp": 4}, strided_pool_sp, (P(), P(None, "sp")),
       (P(None, "sp"), P()), strided_pool, (R(3, 3, SC_CI, SC_CO, scale=0.3), R(SC_B, SC_H, SC_W, SC_CI)),
       bugs=[("conv-halo-from-prev", ["wrong-permutation"]), ("gap-psum", ["wrong-collective-op"])])


# ---------------------------------------------------------------------------
# 7. a Conformer convolution module (LayerNorm, pointwise conv to 2D, GLU,
#    depthwise 1-D conv of width 7, BatchNorm in inference mode, swish,
#    pointwise conv, residual) with time over sp: three frames of halo from
#    each neighbour by two ppermutes (zeros at the ends of the utterance).
CF_B, CF_T, CF_D, CF_K = 2, 32, 8, 7


def conf_conv_pre(p, x):
    a, g = jnp.split(ln(x, p["lnw"], p["lnb"]) @ p["pw1"], 2, -1)
    return a * jax.nn.sigmoid(g)


def conf_conv_post(p, x, y):
    y = (y - p["bnm"]) * lax.rsqrt(p["bnv"] + 1e-5) * p["bng"] + p["bnb"]
    return x + jax.nn.silu(y) @ p["pw2"]


def conf_conv(p, x):
    y = conf_conv_pre(p, x)
    y = lax.conv_general_dilated(y, p["dw"], (1,), "SAME", dimension_numbers=("NWC", "WIO", "NWC"),
                                 feature_group_count=CF_D)
    return conf_conv_post(p, x, y)


def conf_conv_sp(bug):
    def f(p, x):
        n, hw = 4, CF_K // 2
        y = conf_conv_pre(p, x)
        to_next, to_prev = down(n), up(n)
        if bug == "halo-swapped":
            to_next, to_prev = to_prev, to_next
        if bug == "halo-cyclic":
            to_next, to_prev = to_next + [(n - 1, 0)], to_prev + [(0, n - 1)]
        left = ppermute(y[:, -hw:], "sp", to_next)
        right = ppermute(y[:, :hw], "sp", to_prev)
        y = lax.conv_general_dilated(jnp.concatenate([left, y, right], 1), p["dw"], (1,), "VALID",
                                     dimension_numbers=("NWC", "WIO", "NWC"), feature_group_count=CF_D)
        return conf_conv_post(p, x, y)
    return f


cf_p = {"lnw": 1.0 + R(CF_D, scale=0.1), "lnb": R(CF_D, scale=0.1), "pw1": R(CF_D, 2 * CF_D, scale=0.4),
        "dw": R(CF_K, 1, CF_D, scale=0.4), "bnm": R(CF_D, scale=0.1), "bnv": 1.0 + np.abs(R(CF_D, scale=0.2)),
        "bng": 1.0 + R(CF_D, scale=0.1), "bnb": R(CF_D, scale=0.1), "pw2": R(CF_D, CF_D, scale=0.4)}
cf_rep = {k: P() for k in cf_p}
C.smap("s.conformer_conv_module_time_halo.sp4", {"sp": 4}, conf_conv_sp, (cf_rep, P(None, "sp")), P(None, "sp"),
       conf_conv, (cf_p, R(CF_B, CF_T, CF_D)),
       bugs=[("halo-swapped", ["wrong-permutation"]), ("halo-cyclic", ["wrong-permutation"])])


# ---------------------------------------------------------------------------
# 8. Conformer / Transformer-XL relative positional self-attention (content
#    bias u, position bias v, a learned table of relative positions indexed
#    by i - j) with time over sp: the device's queries against keys and
#    values all_gathered over sp (untiled, then moved into place), the
#    relative index from the device's global query positions.
RP_B, RP_T, RP_D, RP_H, RP_E = 2, 32, 8, 2, 4


def relpos_core(p, x, q_pos, gather):
    h = ln(x, p["lnw"], p["lnb"])
    q, k, v = (jnp.einsum("btd,dhe->bthe", h, p[w]) for w in ("wq", "wk", "wv"))
    k, v = gather(k), gather(v)
    t = k.shape[1]
    rel = p["rel"][q_pos[:, None] - jnp.arange(t)[None, :] + t - 1]
    s = jnp.einsum("bqhe,bkhe->bhqk", q + p["u"], k) + jnp.einsum("bqhe,qkhe->bhqk", q + p["vb"], rel)
    a = jax.nn.softmax(s / np.sqrt(RP_E), -1)
    return x + jnp.einsum("bqhe,hed->bqd", jnp.einsum("bhqk,bkhe->bqhe", a, v), p["wo"])


def relpos_mhsa(p, x):
    return relpos_core(p, x, jnp.arange(x.shape[1]), lambda a: a)


def relpos_sp(bug):
    def f(p, x):
        tl = x.shape[1]

        def gather(a):
            g = lax.all_gather(a, "sp")  # (n, b, tl, h, e)
            if bug == "gather-reshape-order":
                return g.reshape(a.shape[0], -1, *a.shape[2:])
            return jnp.moveaxis(g, 0, 1).reshape(a.shape[0], -1, *a.shape[2:])
        q_pos = jnp.arange(tl) + (0 if bug == "query-pos-local" else idx("sp") * tl)
        return relpos_core(p, x, q_pos, gather)
    return f


rp_p = {"lnw": 1.0 + R(RP_D, scale=0.1), "lnb": R(RP_D, scale=0.1), "wq": R(RP_D, RP_H, RP_E, scale=0.4),
        "wk": R(RP_D, RP_H, RP_E, scale=0.4), "wv": R(RP_D, RP_H, RP_E, scale=0.4),
        "rel": R(2 * RP_T - 1, RP_H, RP_E, scale=0.5), "u": R(RP_H, RP_E, scale=0.3), "vb": R(RP_H, RP_E, scale=0.3),
        "wo": R(RP_H, RP_E, RP_D, scale=0.4)}
rp_rep = {k: P() for k in rp_p}
C.smap("s.conformer_relpos_mhsa_time.sp4", {"sp": 4}, relpos_sp, (rp_rep, P(None, "sp")), P(None, "sp"),
       relpos_mhsa, (rp_p, R(RP_B, RP_T, RP_D)),
       bugs=[("query-pos-local", ["wrong-offset"]), ("gather-reshape-order", ["wrong-reshape-order"])])


# ---------------------------------------------------------------------------
# 9. a CTC training step under dp: a small acoustic model (tanh layer, then
#    logits over 6 classes, blank 0), optax.ctc_loss with frame and label
#    paddings, per-utterance loss divided by the label length; the device's
#    mean loss, gradients pmean'd, Adam.
CT_B, CT_T, CT_F, CT_H, CT_K, CT_L = 8, 12, 8, 16, 6, 4
ct_opt = optax.adam(0.01)


def ctc_loss(p, x, xpad, lab, lpad, blank=0):
    logits = jnp.tanh(x @ p["w1"] + p["b1"]) @ p["w2"] + p["b2"]
    per = optax.ctc_loss(logits, xpad, lab, lpad, blank_id=blank)
    return jnp.mean(per / jnp.sum(1.0 - lpad, -1))


def ctc_step(p, st, x, xpad, lab, lpad):
    lv, g = jax.value_and_grad(ctc_loss)(p, x, xpad, lab, lpad)
    u, st = ct_opt.update(g, st, p)
    return optax.apply_updates(p, u), st, lv


def ctc_dp(bug):
    def f(p, st, x, xpad, lab, lpad):
        lv, g = jax.value_and_grad(ctc_loss)(p, x, xpad, lab, lpad, 1 if bug == "blank-id-1" else 0)
        if bug != "grads-not-pmeaned":
            g = pmean(g, "dp")
        u, st = ct_opt.update(g, st, p)
        return optax.apply_updates(p, u), st, pmean(lv, "dp")
    return f


ct_p = {"w1": R(CT_F, CT_H, scale=0.4), "b1": R(CT_H, scale=0.1), "w2": R(CT_H, CT_K, scale=0.4),
        "b2": R(CT_K, scale=0.1)}
ct_rep = {k: P() for k in ct_p}
ct_st = np_tree(ct_opt.init(ct_p))
_tlen = I(9, CT_T + 1, CT_B)
_llen = I(1, CT_L + 1, CT_B)
ct_xpad = (np.arange(CT_T)[None] >= _tlen[:, None]).astype(np.float32)
ct_lpad = (np.arange(CT_L)[None] >= _llen[:, None]).astype(np.float32)
ct_lab = np.where(ct_lpad > 0, 0, I(1, CT_K, CT_B, CT_L)).astype(np.int32)
C.smap("s.ctc_loss_adam_dp.dp4", {"dp": 4}, ctc_dp,
       (ct_rep, state_specs(ct_st, ct_rep), P("dp"), P("dp"), P("dp"), P("dp")),
       (ct_rep, state_specs(ct_st, ct_rep), P()), ctc_step,
       (ct_p, ct_st, R(CT_B, CT_T, CT_F), ct_xpad, ct_lab, ct_lpad),
       bugs=[("blank-id-1", ["wrong-offset"]), ("grads-not-pmeaned", ["missing-all-reduce"])])


# ---------------------------------------------------------------------------
# 10. log-mel features with the waveform's time over sp: frames of 32
#     samples every 16 (the end padded by 16 zeros) by strided slicing of
#     the device's samples and a halo of 16 from the next device, a Hann
#     window, jnp.fft.rfft, power, a mel filterbank matmul, log; then
#     per-utterance mean / variance normalisation over time (pmean'd).
LM_B, LM_N, LM_L, LM_HOP, LM_M = 2, 256, 32, 16, 8


def mel_fb(n_fft, n_mels, sr=16000.0):
    hz2mel = lambda f: 2595.0 * np.log10(1.0 + f / 700.0)
    mel2hz = lambda m: 700.0 * (10.0 ** (m / 2595.0) - 1.0)
    pts = mel2hz(np.linspace(hz2mel(0.0), hz2mel(sr / 2), n_mels + 2))
    freqs = np.linspace(0.0, sr / 2, n_fft // 2 + 1)
    fb = np.zeros((n_fft // 2 + 1, n_mels), np.float32)
    for m in range(n_mels):
        lo, c, hi = pts[m], pts[m + 1], pts[m + 2]
        fb[:, m] = np.maximum(0.0, np.minimum((freqs - lo) / (c - lo), (hi - freqs) / (hi - c)))
    return fb


LM_FB = mel_fb(LM_L, LM_M)
LM_WIN = np.hanning(LM_L + 1)[:-1].astype(np.float32)


def logmel_frames(fr):
    spec = jnp.abs(jnp.fft.rfft(fr * LM_WIN, axis=-1)) ** 2
    return jnp.log(spec @ LM_FB + 1e-6)


def logmel(x):
    xp = jnp.pad(x, ((0, 0), (0, LM_L - LM_HOP)))
    nf = (xp.shape[1] - LM_L) // LM_HOP + 1
    fr = jnp.stack([xp[:, i * LM_HOP:i * LM_HOP + LM_L] for i in range(nf)], 1)
    f = logmel_frames(fr)
    mu = f.mean(1, keepdims=True)
    return (f - mu) / jnp.sqrt(jnp.square(f - mu).mean(1, keepdims=True) + 1e-5)


def logmel_sp(bug):
    def f(x):
        n, nl = 4, x.shape[1]
        halo = ppermute(x[:, :LM_L - LM_HOP], "sp", down(n) if bug == "halo-from-prev" else up(n))
        xx = jnp.concatenate([x, halo], 1)
        nf = nl // LM_HOP
        fr = jnp.stack([xx[:, i * LM_HOP:i * LM_HOP + LM_L] for i in range(nf)], 1)
        f = logmel_frames(fr)
        red = (lambda a: a) if bug == "cmvn-local" else (lambda a: pmean(a, "sp"))
        mu = red(f.mean(1, keepdims=True))
        return (f - mu) / jnp.sqrt(red(jnp.square(f - mu).mean(1, keepdims=True)) + 1e-5)
    return f


C.smap("s.logmel_rfft_cmvn_time.sp4", {"sp": 4}, logmel_sp, (P(None, "sp"),), P(None, "sp"), logmel,
       (R(LM_B, LM_N),),
       bugs=[("halo-from-prev", ["wrong-permutation"]), ("cmvn-local", ["missing-all-reduce"])])


# ---------------------------------------------------------------------------
# 11. GAE by a reverse lax.scan over time with the time axis over sp: the
#     next value at a shard's last step is the next device's first value
#     (the bootstrap value on the last device); each device scans its steps
#     from a zero carry keeping the running product of gamma*lambda*(1-done),
#     the (advantage, product) at each shard's first step are all_gathered
#     and combined by a reverse scan over the shards, and the advantage
#     entering from the next shard is added times the product.
GA_B, GA_T, GAMMA, LAM = 4, 32, 0.99, 0.95


def gae_scan(rew, val, nxt, done):
    delta = rew + GAMMA * nxt * (1.0 - done) - val
    coef = GAMMA * LAM * (1.0 - done)

    def back(c, dc):
        d, k = dc
        a, pr = c
        return (d + k * a, k * pr), (d + k * a, k * pr)
    init = (jnp.zeros(rew.shape[0]), jnp.ones(rew.shape[0]))
    _, (adv, prod) = lax.scan(back, init, (delta.T, coef.T), reverse=True)
    return adv.T, prod.T


def gae(rew, val, done, last_val):
    nxt = jnp.concatenate([val[:, 1:], last_val[:, None]], 1)
    adv, _ = gae_scan(rew, val, nxt, done)
    return adv, adv + val


def gae_sp(bug):
    def f(rew, val, done, last_val):
        n, me = 4, idx("sp")
        first_next = ppermute(val[:, :1], "sp", up(n))
        first_next = jnp.where(me == n - 1, last_val[:, None], first_next)
        adv, prod = gae_scan(rew, val, jnp.concatenate([val[:, 1:], first_next], 1), done)
        a0 = lax.all_gather(adv[:, 0], "sp")
        p0 = lax.all_gather(prod[:, 0], "sp")
        _, starts = lax.scan(lambda c, ap: (ap[0] + ap[1] * c,) * 2, jnp.zeros(rew.shape[0]), (a0, p0), reverse=True)
        starts = jnp.concatenate([starts, jnp.zeros((1, rew.shape[0]))], 0)
        src = me - 1 if bug == "carry-from-prev" else me + 1
        carry = jnp.where(src >= 0, starts[jnp.clip(src, 0, n)], 0.0)
        if bug != "no-carry-from-next":
            adv = adv + prod * carry[:, None]
        return adv, adv + val
    return f


ga_done = (rng.random((GA_B, GA_T)) < 0.08).astype(np.float32)
C.smap("s.gae_reverse_scan_time_sharded.sp4", {"sp": 4}, gae_sp, (P(None, "sp"), P(None, "sp"), P(None, "sp"), P()),
       (P(None, "sp"), P(None, "sp")), gae, (R(GA_B, GA_T), R(GA_B, GA_T), ga_done, R(GA_B)),
       bugs=[("no-carry-from-next", ["missing-collective"]), ("carry-from-prev", ["wrong-permutation"])])


# ---------------------------------------------------------------------------
# 12. a PPO update under dp (rollouts' environments over dp): GAE per
#     environment by the reverse scan of 11. (local: time is whole), the
#     advantages normalised by their global mean and std (pmean'd), clipped
#     ratios, clipped value loss, an entropy bonus; gradients pmean'd,
#     optax.chain(clip_by_global_norm, adam).
PP_B, PP_T, PP_D, PP_A, CLIP = 8, 8, 6, 4, 0.2
pp_opt = optax.chain(optax.clip_by_global_norm(0.5), optax.adam(3e-3))


def ppo_loss(p, obs, act, old_logp, rew, val, done, last_val, axis=None, bug=None):
    adv, ret = gae(rew, val, done, last_val)
    red = (lambda a: a) if (axis is None or bug == "adv-local-stats") else (lambda a: pmean(a, axis))
    mu = red(adv.mean())
    adv = (adv - mu) / (jnp.sqrt(red(jnp.square(adv - mu).mean())) + 1e-8)
    logits = obs @ p["wpi"] + p["bpi"]
    logp_all = jax.nn.log_softmax(logits)
    logp = jnp.take_along_axis(logp_all, act[..., None], -1)[..., 0]
    ratio = jnp.exp(logp - old_logp)
    pg = -jnp.minimum(ratio * adv, jnp.clip(ratio, 1 - CLIP, 1 + CLIP) * adv).mean()
    v = (obs @ p["wv"])[..., 0] + p["bv"]
    v_clip = val + jnp.clip(v - val, -CLIP, CLIP)
    vf = 0.5 * jnp.maximum(jnp.square(v - ret), jnp.square(v_clip - ret)).mean()
    ent = -(jnp.exp(logp_all) * logp_all).sum(-1).mean()
    return pg + 0.5 * vf - 0.01 * ent


PPO_ARGS = ("obs", "act", "old_logp", "rew", "val", "done", "last_val")


def ppo_step(p, st, *batch):
    lv, g = jax.value_and_grad(ppo_loss)(p, *batch)
    u, st = pp_opt.update(g, st, p)
    return optax.apply_updates(p, u), st, lv


def ppo_dp(bug):
    def f(p, st, *batch):
        lv, g = jax.value_and_grad(ppo_loss)(p, *batch, "dp", bug)
        if bug != "grads-not-pmeaned":
            g = pmean(g, "dp")
        u, st = pp_opt.update(g, st, p)
        return optax.apply_updates(p, u), st, pmean(lv, "dp")
    return f


pp_p = {"wpi": R(PP_D, PP_A, scale=0.4), "bpi": R(PP_A, scale=0.1), "wv": R(PP_D, 1, scale=0.4),
        "bv": np.float32(0.1)}
pp_rep = {k: P() for k in pp_p}
pp_st = np_tree(pp_opt.init(pp_p))
pp_batch = (R(PP_B, PP_T, PP_D), I(0, PP_A, PP_B, PP_T), R(PP_B, PP_T, scale=0.3) - 1.4, R(PP_B, PP_T),
            R(PP_B, PP_T), (rng.random((PP_B, PP_T)) < 0.15).astype(np.float32), R(PP_B))
C.smap("s.ppo_gae_advnorm_clip_adam.dp4", {"dp": 4}, ppo_dp,
       (pp_rep, state_specs(pp_st, pp_rep)) + (P("dp"),) * 7, (pp_rep, state_specs(pp_st, pp_rep), P()),
       ppo_step, (pp_p, pp_st) + pp_batch,
       bugs=[("adv-local-stats", ["missing-all-reduce"]), ("grads-not-pmeaned", ["missing-all-reduce"])])


# ---------------------------------------------------------------------------
# 13. a double-DQN step with the Q head's actions over tp and transitions
#     over dp (check_vma=True): the online network's argmax over the next
#     state's actions across tp (local max / argmax, pmax, the lowest global
#     index among the devices holding the maximum by pmin), the target
#     network's value there by a masked psum; Huber loss on Q(s, a) (a
#     masked psum), SGD, then the Polyak update of the target network.
DQ_B, DQ_D, DQ_H, DQ_A, TAU, DQ_LR = 8, 6, 16, 16, 0.05, 0.1


def qnet(p, x):
    return jax.nn.relu(x @ p["w1"]) @ p["wq"]


def ddqn_step(on, tg, obs, act, rew, done, nobs):
    a_star = jnp.argmax(qnet(on, nobs), -1)
    qt = jnp.take_along_axis(qnet(tg, nobs), a_star[:, None], -1)[:, 0]
    y = rew + GAMMA * (1.0 - done) * qt

    def loss(on):
        qsa = jnp.take_along_axis(qnet(on, obs), act[:, None], -1)[:, 0]
        return optax.huber_loss(qsa, y).mean()
    lv, g = jax.value_and_grad(loss)(on)
    on = jax.tree.map(lambda a, b: a - DQ_LR * b, on, g)
    return on, jax.tree.map(lambda t, o: t + TAU * (o - t), tg, on), y, lv


def ddqn_tp(bug):
    def f(on, tg, obs, act, rew, done, nobs):
        al = on["wq"].shape[1]
        cols = idx("tp") * al + jnp.arange(al)
        qn = qnet(on, nobs)
        lmax, larg = qn.max(-1), jnp.argmax(qn, -1)
        gidx = larg if bug == "argmax-no-offset" else idx("tp") * al + larg
        if bug == "argmax-local-max":
            a_star = pmin(gidx, "tp")
        else:
            a_star = pmin(jnp.where(lmax == pmax(lmax, "tp"), gidx, DQ_A), "tp")
        qt = psum(jnp.where(cols == a_star[:, None], qnet(tg, nobs), 0.0).sum(-1), "tp")
        y = rew + GAMMA * (1.0 - done) * qt

        def loss(on):
            qsa = psum(jnp.where(cols == act[:, None], qnet(on, obs), 0.0).sum(-1), "tp")
            return pmean(optax.huber_loss(qsa, y).mean(), "dp")
        lv, g = jax.value_and_grad(loss)(on)
        on = jax.tree.map(lambda a, b: a - DQ_LR * b, on, g)
        return on, jax.tree.map(lambda t, o: t + TAU * (o - t), tg, on), y, lv
    return f


dq_on = {"w1": R(DQ_D, DQ_H, scale=0.5), "wq": R(DQ_H, DQ_A, scale=0.4)}
dq_tg = {"w1": R(DQ_D, DQ_H, scale=0.5), "wq": R(DQ_H, DQ_A, scale=0.4)}
dq_ps = {"w1": P(), "wq": P(None, "tp")}
dq_batch = (R(DQ_B, DQ_D), I(0, DQ_A, DQ_B), R(DQ_B), (rng.random(DQ_B) < 0.25).astype(np.float32), R(DQ_B, DQ_D))
C.smap("s.double_dqn_actions_tp_polyak.dp2xtp4", {"dp": 2, "tp": 4}, ddqn_tp,
       (dq_ps, dq_ps) + (P("dp"),) * 5, (dq_ps, dq_ps, P("dp"), P()), ddqn_step, (dq_on, dq_tg) + dq_batch,
       check_vma=True, bugs=[("argmax-no-offset", ["wrong-offset"]), ("argmax-local-max", ["missing-all-reduce"])])


# ---------------------------------------------------------------------------
# 14. a REINFORCE step with per-episode discounted returns over a time axis
#     over sp: returns by a reversed lax.associative_scan of affine maps
#     (discount times not-done, reward) within the shard, the return entering
#     from later shards passed down a chain of n-1 ppermutes (each device
#     forwarding its first return given what it received), a global mean
#     baseline (pmean); the policy gradient pmean'd, SGD.
PG_B, PG_T, PG_D, PG_A, PG_LR = 4, 32, 6, 4, 0.1


def affine_rev(k, r):
    def comb(later, earlier):
        return earlier[0] * later[0], earlier[1] + earlier[0] * later[1]
    return lax.associative_scan(comb, (k, r), reverse=True, axis=1)


def pg_loss(p, obs, act, G, baseline):
    logp = jax.nn.log_softmax(obs @ p["w"] + p["b"])
    lp = jnp.take_along_axis(logp, act[..., None], -1)[..., 0]
    return -jnp.mean(lp * (G - baseline))


def pg_step(p, obs, act, rew, done):
    _, G = affine_rev(GAMMA * (1.0 - done), rew)
    lv, g = jax.value_and_grad(pg_loss)(p, obs, act, G, G.mean())
    return jax.tree.map(lambda a, b: a - PG_LR * b, p, g), G, lv


def pg_sp(bug):
    def f(p, obs, act, rew, done):
        n = 4
        prod, G = affine_rev(GAMMA * (1.0 - done), rew)
        carry = jnp.zeros(rew.shape[0])
        for _ in range(n - 2 if bug == "chain-one-step-short" else n - 1):
            carry = ppermute(G[:, 0] + prod[:, 0] * carry, "sp", down(n) if bug == "chain-wrong-direction" else up(n))
        G = G + prod * carry[:, None]
        base = G.mean() if bug == "baseline-local" else pmean(G.mean(), "sp")
        lv, g = jax.value_and_grad(pg_loss)(p, obs, act, G, base)
        g = pmean(g, "sp")
        return jax.tree.map(lambda a, b: a - PG_LR * b, p, g), G, pmean(lv, "sp")
    return f


pg_p = {"w": R(PG_D, PG_A, scale=0.4), "b": R(PG_A, scale=0.1)}
pg_rep = {k: P() for k in pg_p}
C.smap("s.reinforce_returns_chain_time.sp4", {"sp": 4}, pg_sp, (pg_rep,) + (P(None, "sp"),) * 4,
       (pg_rep, P(None, "sp"), P()), pg_step,
       (pg_p, R(PG_B, PG_T, PG_D), I(0, PG_A, PG_B, PG_T), R(PG_B, PG_T),
        (rng.random((PG_B, PG_T)) < 0.06).astype(np.float32)),
       bugs=[("chain-wrong-direction", ["wrong-permutation"]), ("chain-one-step-short", ["missing-collective"]),
             ("baseline-local", ["missing-all-reduce"])])


# ---------------------------------------------------------------------------
# 15. a VQ-VAE quantiser with an EMA codebook under dp: squared distances,
#     argmin, the codebook lookup, straight-through output, commitment
#     loss (pmean), the EMA of the code counts and of the sums of assigned
#     vectors from psum'd batch statistics with Laplace smoothing, the
#     codebook perplexity from the global code frequencies.
VQ_N, VQ_D, VQ_K, VQ_BETA, VQ_DECAY = 32, 4, 8, 0.25, 0.9


def vq_assign(z, cb):
    d = jnp.sum(z * z, -1, keepdims=True) - 2.0 * z @ cb.T + jnp.sum(cb * cb, -1)
    codes = jnp.argmin(d, -1)
    return codes, cb[codes]


def vq_ema_update(cb, cnt, sm, counts, sums):
    cnt = VQ_DECAY * cnt + (1 - VQ_DECAY) * counts
    sm = VQ_DECAY * sm + (1 - VQ_DECAY) * sums
    tot = cnt.sum()
    smooth = (cnt + 1e-5) / (tot + VQ_K * 1e-5) * tot
    return sm / smooth[:, None], cnt, sm


def vq_ema(z, cb, cnt, sm, axis=None, bug=None):
    codes, zq = vq_assign(z, cb)
    z_st = z + lax.stop_gradient(zq - z)
    oh = jax.nn.one_hot(codes, VQ_K)
    counts, sums, loss = oh.sum(0), oh.T @ z, VQ_BETA * jnp.mean(jnp.square(z - lax.stop_gradient(zq)))
    n = z.shape[0]
    if axis is not None:
        if bug != "counts-not-psummed":
            counts = pmean(counts, axis) if bug == "counts-pmean" else psum(counts, axis)
        sums, loss, n = psum(sums, axis), pmean(loss, axis), psum(n, axis)
    new_cb, cnt, sm = vq_ema_update(cb, cnt, sm, counts, sums)
    prob = counts / n
    perp = jnp.exp(-jnp.sum(prob * jnp.log(prob + 1e-10)))
    return z_st, codes, loss, new_cb, cnt, sm, perp


def vq_ema_dp(bug):
    return lambda z, cb, cnt, sm: vq_ema(z, cb, cnt, sm, "dp", bug)


vq_cb = R(VQ_K, VQ_D)
vq_z = (vq_cb[I(0, VQ_K, VQ_N)] + R(VQ_N, VQ_D, scale=0.4)).astype(np.float32)
C.smap("s.vqvae_ema_codebook_counts.dp4", {"dp": 4}, vq_ema_dp, (P("dp"), P(), P(), P()),
       (P("dp"), P("dp"), P(), P(), P(), P(), P()), vq_ema,
       (vq_z, vq_cb, np.abs(R(VQ_K)) + 1.0, R(VQ_K, VQ_D)),
       bugs=[("counts-not-psummed", ["missing-all-reduce"]), ("counts-pmean", ["wrong-collective-op"])])


# ---------------------------------------------------------------------------
# 16. a VQ codebook whose codes are over tp (and the batch over dp): the
#     nearest code across tp by a pmin of the local minimum distances and a
#     pmin of the global indices of the devices that hold it; the quantised
#     vector by a masked lookup psum'd over tp; codebook + commitment loss.
VT_N, VT_K = 16, 16


def vq_plain(z, cb):
    codes, zq = vq_assign(z, cb)
    return z + lax.stop_gradient(zq - z), codes, (1 + VQ_BETA) * jnp.mean(jnp.square(z - zq))


def vq_codes_tp(bug):
    def f(z, cb):
        kl, me = cb.shape[0], idx("tp")
        d = jnp.sum(z * z, -1, keepdims=True) - 2.0 * z @ cb.T + jnp.sum(cb * cb, -1)
        lmin, larg = d.min(-1), jnp.argmin(d, -1)
        gi = larg if bug == "code-no-offset" else me * kl + larg
        codes = pmin(jnp.where(lmin == pmin(lmin, "tp"), gi, VT_K), "tp")
        own = (codes >= me * kl) & (codes < (me + 1) * kl)
        zq = jnp.where(own[:, None], cb[jnp.clip(codes - me * kl, 0, kl - 1)], 0.0)
        if bug != "zq-no-psum":
            zq = psum(zq, "tp")
        return z + lax.stop_gradient(zq - z), codes, pmean((1 + VQ_BETA) * jnp.mean(jnp.square(z - zq)), "dp")
    return f


vt_cb = R(VT_K, VQ_D)
C.smap("s.vq_codebook_rows_tp_argmin.dp2xtp4", {"dp": 2, "tp": 4}, vq_codes_tp, (P("dp"), P("tp")),
       (P("dp"), P("dp"), P()), vq_plain,
       ((vt_cb[I(0, VT_K, VT_N)] + R(VT_N, VQ_D, scale=0.3)).astype(np.float32), vt_cb),
       bugs=[("code-no-offset", ["wrong-offset"]), ("zq-no-psum", ["missing-all-reduce"])])


# ---------------------------------------------------------------------------
# 17. a RealNVP affine coupling layer with the features over tp and the
#     batch over dp: the conditioner's first layer contracts over the sharded
#     half x1 (psum before the bias and tanh), scale and shift are
#     column-parallel; the log-determinant (sum of the log-scales) is psum'd
#     over tp, the Gaussian negative log-likelihood's square sum too, the
#     mean over the batch pmean'd.
FL_B, FL_D, FL_H = 8, 16, 32


def coupling(p, x, red=lambda a: a, bias_inside=False):
    x1, x2 = x[:, 0], x[:, 1]
    if bias_inside:
        h = jnp.tanh(red(x1 @ p["w1"] + p["b1"]))
    else:
        h = jnp.tanh(red(x1 @ p["w1"]) + p["b1"])
    s = jnp.tanh(h @ p["ws"] + p["bs"])
    y2 = x2 * jnp.exp(s) + h @ p["wt"] + p["bt"]
    return jnp.stack([x1, y2], 1), s


def flow_nll(y, logdet, d):
    return jnp.mean(0.5 * jnp.sum(jnp.square(y), (1, 2)) + d * np.log(2 * np.pi) - logdet)


def flow(p, x):
    y, s = coupling(p, x)
    logdet = s.sum(-1)
    return y, logdet, flow_nll(y, logdet, x.shape[-1])


def flow_tp(bug):
    def f(p, x):
        y, s = coupling(p, x, lambda a: psum(a, "tp"))
        logdet = s.sum(-1)
        if bug != "logdet-no-psum":
            logdet = psum(logdet, "dp" if bug == "logdet-psum-over-dp" else "tp")
        sq = psum(jnp.sum(jnp.square(y), (1, 2)), "tp")
        d = psum(x.shape[-1], "tp")
        return y, logdet, pmean(jnp.mean(0.5 * sq + d * np.log(2 * np.pi) - logdet), "dp")
    return f


fl_p = {"w1": R(FL_D, FL_H, scale=0.3), "b1": R(FL_H, scale=0.1), "ws": R(FL_H, FL_D, scale=0.2),
        "bs": R(FL_D, scale=0.1), "wt": R(FL_H, FL_D, scale=0.3), "bt": R(FL_D, scale=0.1)}
fl_ps = {"w1": P("tp"), "b1": P(), "ws": P(None, "tp"), "bs": P("tp"), "wt": P(None, "tp"), "bt": P("tp")}
C.smap("s.realnvp_coupling_logdet_features.dp2xtp4", {"dp": 2, "tp": 4}, flow_tp, (fl_ps, P("dp", None, "tp")),
       (P("dp", None, "tp"), P("dp"), P()), flow, (fl_p, R(FL_B, 2, FL_D)),
       bugs=[("logdet-no-psum", ["missing-all-reduce"]), ("logdet-psum-over-dp", ["wrong-collective-group"])])


# ---------------------------------------------------------------------------
# 18. the coupling layer's NLL in an Adam step with the features over tp
#     (check_vma=True: the loss is invariant after its psums, and JAX's
#     transposes put the gradient of the replicated conditioner input where
#     it belongs).
fl_opt = optax.adam(0.01)


def flow_step(p, st, x):
    lv, g = jax.value_and_grad(lambda p: flow(p, x)[2])(p)
    u, st = fl_opt.update(g, st, p)
    return optax.apply_updates(p, u), st, lv


def flow_train_tp(bug):
    def f(p, st, x):
        def loss(p):
            y, s = coupling(p, x, lambda a: psum(a, "tp"), bias_inside=bug == "bias-inside-psum")
            ld = pmean(s.sum(-1), "tp") if bug == "logdet-pmean" else psum(s.sum(-1), "tp")
            sq = psum(jnp.sum(jnp.square(y), (1, 2)), "tp")
            return jnp.mean(0.5 * sq + psum(x.shape[-1], "tp") * np.log(2 * np.pi) - ld)
        lv, g = jax.value_and_grad(loss)(p)
        u, st = fl_opt.update(g, st, p)
        return optax.apply_updates(p, u), st, lv
    return f


fl_st = np_tree(fl_opt.init(fl_p))
C.smap("s.realnvp_coupling_nll_adam_vma.tp4", {"tp": 4}, flow_train_tp,
       (fl_ps, state_specs(fl_st, fl_ps), P(None, None, "tp")), (fl_ps, state_specs(fl_st, fl_ps), P()),
       flow_step, (fl_p, fl_st, R(FL_B, 2, FL_D)), check_vma=True,
       bugs=[("logdet-pmean", ["wrong-collective-op"]), ("bias-inside-psum", ["numerics"])])


# ---------------------------------------------------------------------------
# 19. a diffusion noise-prediction training step under dp: per-example
#     timesteps and noise drawn from the step's key over the global batch
#     (each device slicing its rows), x_t from the cumulative alphas, a
#     sinusoidal timestep embedding, an MLP predicting the noise; per-sample
#     loss weights (the data's importance weights times the P2 weighting
#     1 / (1 + SNR)) normalised by their global sum (psum'd); gradients
#     psum'd, Adam.
DF_N, DF_D, DF_E, DF_H, DF_TS = 16, 8, 8, 32, 100
DF_AB = np.cumprod(1.0 - np.linspace(1e-4, 0.05, DF_TS)).astype(np.float32)
df_opt = optax.adam(3e-3)


def temb(t):
    fr = np.exp(-np.log(1000.0) * np.arange(DF_E // 2) / (DF_E // 2)).astype(np.float32)
    a = t[:, None].astype(jnp.float32) * fr
    return jnp.concatenate([jnp.sin(a), jnp.cos(a)], -1)


def df_terms(p, x0, w, t, eps):
    ab = jnp.asarray(DF_AB)[t]
    xt = jnp.sqrt(ab)[:, None] * x0 + jnp.sqrt(1 - ab)[:, None] * eps
    h = jax.nn.silu(jnp.concatenate([xt, temb(t)], -1) @ p["w1"] + p["b1"])
    pred = jax.nn.silu(h @ p["w2"] + p["b2"]) @ p["w3"]
    lw = w / (1.0 + ab / (1.0 - ab))
    return lw * jnp.mean(jnp.square(pred - eps), -1), lw


def df_draw(key, n, d):
    kt, kn = jax.random.split(key)
    return jax.random.randint(kt, (n,), 0, DF_TS), jax.random.normal(kn, (n, d))


def df_step(p, st, x0, w, key):
    t, eps = df_draw(key, *x0.shape)

    def loss(p):
        per, lw = df_terms(p, x0, w, t, eps)
        return per.sum() / lw.sum()
    lv, g = jax.value_and_grad(loss)(p)
    u, st = df_opt.update(g, st, p)
    return optax.apply_updates(p, u), st, lv


def df_dp(bug):
    def f(p, st, x0, w, key):
        nl, d = x0.shape
        if bug == "noise-not-sliced":
            t, eps = df_draw(key, nl, d)
        else:
            t, eps = df_draw(key, nl * lax.psum(1, "dp"), d)
            t, eps = (lax.dynamic_slice_in_dim(a, idx("dp") * nl, nl, 0) for a in (t, eps))

        def loss(p):
            per, lw = df_terms(p, x0, w, t, eps)
            den = lw.sum() if bug == "weight-sum-local" else psum(lw.sum(), "dp")
            return per.sum() / den
        lv, g = jax.value_and_grad(loss)(p)
        u, st = df_opt.update(psum(g, "dp"), st, p)
        return optax.apply_updates(p, u), st, psum(lv, "dp")
    return f


df_p = {"w1": R(DF_D + DF_E, DF_H, scale=0.3), "b1": R(DF_H, scale=0.1), "w2": R(DF_H, DF_H, scale=0.2),
        "b2": R(DF_H, scale=0.1), "w3": R(DF_H, DF_D, scale=0.2)}
df_rep = {k: P() for k in df_p}
df_st = np_tree(df_opt.init(df_p))
df_key = np.array([0, 1414], np.uint32)
C.smap("s.diffusion_eps_step_p2_weights.dp4", {"dp": 4}, df_dp,
       (df_rep, state_specs(df_st, df_rep), P("dp"), P("dp"), P()), (df_rep, state_specs(df_st, df_rep), P()),
       df_step, (df_p, df_st, R(DF_N, DF_D), np.abs(R(DF_N)) + 0.5, df_key),
       bugs=[("weight-sum-local", ["missing-all-reduce"]), ("noise-not-sliced", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 20. the Swin block of 1. in an AdamW step under GSPMD: the image's height
#     over sp (the partitioner does the cyclic rolls along the sharded dim,
#     the window partition's reshapes and the mask), the batch over dp.
sw_opt = optax.adamw(0.01, weight_decay=0.05)


def swin_step(p, st, x, y):
    lv, g = jax.value_and_grad(lambda p: mse(swin_block(p, x), y))(p)
    u, st = sw_opt.update(g, st, p)
    return optax.apply_updates(p, u), st, lv


sw_st = np_tree(sw_opt.init(sw_p))
C.gspmd("g.swin_block_adamw_rows.dp2xsp4", {"dp": 2, "sp": 4},
        (sw_rep, state_specs(sw_st, sw_rep), P("dp", "sp"), P("dp", "sp")), (sw_rep, state_specs(sw_st, sw_rep), P()),
        swin_step, (sw_p, sw_st, R(4, SW_H, SW_W, SW_C), R(4, SW_H, SW_W, SW_C, scale=0.5)))

# ---------------------------------------------------------------------------
# 21. the ConvNeXt block of 2. in an AdamW step: channel dims of every
#     parameter over tp (the MLP's hidden units too), the batch over dp.
cn_opt = optax.adamw(3e-3, weight_decay=0.05)


def convnext_step(p, st, x, y):
    lv, g = jax.value_and_grad(lambda p: mse(convnext(p, x), y))(p)
    u, st = cn_opt.update(g, st, p)
    return optax.apply_updates(p, u), st, lv


cn_st = np_tree(cn_opt.init(cn_p))
cn_xy = (R(4, CN_H, CN_H, CN_C), R(4, CN_H, CN_H, CN_C, scale=0.5))
C.gspmd("g.convnext_block_adamw_channels.dp2xtp4", {"dp": 2, "tp": 4},
        (cn_ps, state_specs(cn_st, cn_ps), P("dp"), P("dp")), (cn_ps, state_specs(cn_st, cn_ps), P()), convnext_step,
        (cn_p, cn_st) + cn_xy, expected="mismatch",
        note="XLA's partitioned depthwise-conv weight gradient is wrong here (the images are over dp and "
             "replicated over tp): 35. isolates it; the Adam update shows it at the size of the learning rate")

# 21b. the same step with the images' channels over tp as well (the
#      activations sharded like the parameters).
C.gspmd("g.convnext_block_adamw_channels_act_tp.dp2xtp4", {"dp": 2, "tp": 4},
        (cn_ps, state_specs(cn_st, cn_ps), P("dp", None, None, "tp"), P("dp", None, None, "tp")),
        (cn_ps, state_specs(cn_st, cn_ps), P()), convnext_step, (cn_p, cn_st) + cn_xy)

# 22. the ConvNeXt block in bf16 (parameters and activations), channels over
#     tp, the image's height over sp.
bf = lambda a: jnp.asarray(a, jnp.bfloat16)
C.gspmd("g.convnext_block_bf16.sp2xtp4", {"sp": 2, "tp": 4}, (cn_ps, P(None, "sp", None, "tp")),
        P(None, "sp", None, "tp"), convnext, (jax.tree.map(bf, cn_p), bf(R(CN_B, CN_H, CN_H, CN_C))))

# ---------------------------------------------------------------------------
# 23. the ResNet step of 4. (BatchNorm over the whole batch) with the batch
#     over dp8: the partitioner makes the batch statistics cross-replica.
C.gspmd("g.resnet_bottleneck_bn_momentum.dp8", {"dp": 8},
        (rn_rep, state_specs(rn_opt_st, rn_rep), rn_run_ps, P("dp"), P("dp")),
        (rn_rep, state_specs(rn_opt_st, rn_rep), rn_run_ps, P()), resnet_step, rn_args)

# ---------------------------------------------------------------------------
# 24. the ViT layer of 5. in an Adam step on images whose height and width
#     are over h x w, the class token's logits in a cross-entropy.
vt_opt = optax.adam(3e-3)


def vit_step(p, st, img, lab):
    def loss(p):
        logits, _ = vit2d(p, img)
        return optax.softmax_cross_entropy_with_integer_labels(logits, lab).mean()
    lv, g = jax.value_and_grad(loss)(p)
    u, st = vt_opt.update(g, st, p)
    return optax.apply_updates(p, u), st, lv


vt_st = np_tree(vt_opt.init(vt_p))
C.gspmd("g.vit_2d_patches_adam.h2xw4", {"h": 2, "w": 4},
        (vt_rep, state_specs(vt_st, vt_rep), P(None, "h", "w"), P()), (vt_rep, state_specs(vt_st, vt_rep), P()),
        vit_step, (vt_p, vt_st, vt_img, I(0, VT_K, VT_B)))

# ---------------------------------------------------------------------------
# 25. a Conformer block (half-step feed-forward, relative positional
#     self-attention of 8., the convolution module of 7., half-step
#     feed-forward, final LayerNorm) with time over sp and the batch over dp.
def ffn_half(p, x):
    return x + 0.5 * jax.nn.silu(ln(x, p["w"], p["b"]) @ p["w1"]) @ p["w2"]


def conformer(p, x):
    x = ffn_half(p["ff1"], x)
    x = relpos_mhsa(p["att"], x)
    x = conf_conv(p["conv"], x)
    x = ffn_half(p["ff2"], x)
    return ln(x, p["lnw"], p["lnb"])


def ffn_params():
    w, b = ones_like_ln(CF_D)
    return {"w": w, "b": b, "w1": R(CF_D, 4 * CF_D, scale=0.3), "w2": R(4 * CF_D, CF_D, scale=0.3)}


cb_p = {"ff1": ffn_params(), "att": rp_p, "conv": cf_p, "ff2": ffn_params(), "lnw": 1.0 + R(CF_D, scale=0.1),
        "lnb": R(CF_D, scale=0.1)}
C.gspmd("g.conformer_block_time.dp2xsp4", {"dp": 2, "sp": 4}, (jax.tree.map(lambda _: P(), cb_p), P("dp", "sp")),
        P("dp", "sp"), conformer, (cb_p, R(4, CF_T, CF_D)))

# ---------------------------------------------------------------------------
# 26. the CTC step of 9. with the batch over dp8.
C.gspmd("g.ctc_loss_adam.dp8", {"dp": 8}, (ct_rep, state_specs(ct_st, ct_rep), P("dp"), P("dp"), P("dp"), P("dp")),
        (ct_rep, state_specs(ct_st, ct_rep), P()), ctc_step, (ct_p, ct_st, R(CT_B, CT_T, CT_F), ct_xpad, ct_lab, ct_lpad))

# 27. the log-mel features of 10. with the waveform's time over sp and the
#     frames constrained over sp.
def logmel_wsc(x):
    return wsc({"sp": 4}, logmel(x), None, "sp")


C.gspmd("g.logmel_rfft_cmvn_time.sp4", {"sp": 4}, (P(None, "sp"),), P(None, "sp"), logmel_wsc, (R(LM_B, LM_N),))

# ---------------------------------------------------------------------------
# 28. the PPO step of 12. with the rollouts' time over sp (the reverse scan
#     of GAE runs along the sharded time axis).
C.gspmd("g.ppo_gae_scan_time_adam.sp4", {"sp": 4},
        (pp_rep, state_specs(pp_st, pp_rep)) + (P(None, "sp"),) * 6 + (P(),), (pp_rep, state_specs(pp_st, pp_rep), P()),
        ppo_step, (pp_p, pp_st) + pp_batch)

# 29. the double-DQN step of 13. (argmax over actions, target network,
#     Polyak update) with the actions over tp and transitions over dp.
C.gspmd("g.double_dqn_actions_polyak.dp2xtp4", {"dp": 2, "tp": 4}, (dq_ps, dq_ps) + (P("dp"),) * 5,
        (dq_ps, dq_ps, P("dp"), P()), ddqn_step, (dq_on, dq_tg) + dq_batch)

# 30. the REINFORCE step of 14. with time over sp.
C.gspmd("g.reinforce_assoc_returns_time.sp4", {"sp": 4}, (pg_rep,) + (P(None, "sp"),) * 4,
        (pg_rep, P(None, "sp"), P()), pg_step,
        (pg_p, R(PG_B, PG_T, PG_D), I(0, PG_A, PG_B, PG_T), R(PG_B, PG_T),
         (rng.random((PG_B, PG_T)) < 0.06).astype(np.float32)))

# ---------------------------------------------------------------------------
# 31. a VQ-VAE step under dp: encoder, the quantiser with a straight-through
#     estimator and commitment loss, decoder, Adam on the encoder / decoder,
#     the EMA codebook update from the batch's code counts and sums.
vv_opt = optax.adam(0.01)
VV_IN = 12


def vqvae_step(p, st, cb, cnt, sm, x):
    def loss(p):
        z = jnp.tanh(x @ p["enc"])
        codes, zq = vq_assign(z, cb)
        rec = (z + lax.stop_gradient(zq - z)) @ p["dec"]
        return mse(rec, x) + VQ_BETA * jnp.mean(jnp.square(z - lax.stop_gradient(zq))), (z, codes)
    (lv, (z, codes)), g = jax.value_and_grad(loss, has_aux=True)(p)
    u, st = vv_opt.update(g, st, p)
    oh = jax.nn.one_hot(codes, VQ_K)
    cb, cnt, sm = vq_ema_update(cb, cnt, sm, oh.sum(0), oh.T @ z)
    return optax.apply_updates(p, u), st, cb, cnt, sm, lv


vv_p = {"enc": R(VV_IN, VQ_D, scale=0.5), "dec": R(VQ_D, VV_IN, scale=0.5)}
vv_rep = {k: P() for k in vv_p}
vv_st = np_tree(vv_opt.init(vv_p))
C.gspmd("g.vqvae_st_ema_codebook_adam.dp4", {"dp": 4},
        (vv_rep, state_specs(vv_st, vv_rep), P(), P(), P(), P("dp")),
        (vv_rep, state_specs(vv_st, vv_rep), P(), P(), P(), P()), vqvae_step,
        (vv_p, vv_st, R(VQ_K, VQ_D, scale=0.5), np.abs(R(VQ_K)) + 1.0, R(VQ_K, VQ_D), R(VQ_N, VV_IN)))

# 32. two RealNVP coupling layers (the second with the halves swapped) in an
#     Adam step, features over tp and the batch over dp.
def flow2_nll(p, x):
    y, s1 = coupling(p["c1"], x)
    y, s2 = coupling(p["c2"], y[:, ::-1])
    return flow_nll(y, s1.sum(-1) + s2.sum(-1), x.shape[-1])


def flow2_step(p, st, x):
    lv, g = jax.value_and_grad(flow2_nll)(p, x)
    u, st = fl_opt.update(g, st, p)
    return optax.apply_updates(p, u), st, lv


fl2_p = {"c1": fl_p, "c2": {"w1": R(FL_D, FL_H, scale=0.3), "b1": R(FL_H, scale=0.1), "ws": R(FL_H, FL_D, scale=0.2),
                            "bs": R(FL_D, scale=0.1), "wt": R(FL_H, FL_D, scale=0.3), "bt": R(FL_D, scale=0.1)}}
fl2_ps = {"c1": fl_ps, "c2": fl_ps}
fl2_st = np_tree(fl_opt.init(fl2_p))
C.gspmd("g.realnvp_two_couplings_adam.dp2xtp4", {"dp": 2, "tp": 4},
        (fl2_ps, state_specs(fl2_st, fl2_ps), P("dp", None, "tp")), (fl2_ps, state_specs(fl2_st, fl2_ps), P()),
        flow2_step, (fl2_p, fl2_st, R(FL_B, 2, FL_D)))

# 33. the diffusion step of 19. (timesteps and noise drawn per example from
#     the step's key) with the batch over dp8.
C.gspmd("g.diffusion_eps_step_p2_weights.dp8", {"dp": 8}, (df_rep, state_specs(df_st, df_rep), P("dp"), P("dp"), P()),
        (df_rep, state_specs(df_st, df_rep), P()), df_step, (df_p, df_st, R(DF_N, DF_D), np.abs(R(DF_N)) + 0.5, df_key))

# 34. the MLP-Mixer block of 3. in an AdamW step with the tokens over sp
#     (the token-mixing weight's rows too) and the batch over dp.
mx_opt = optax.adamw(3e-3, weight_decay=0.05)


def mixer_step(p, st, x, y):
    lv, g = jax.value_and_grad(lambda p: mse(mixer(p, x), y))(p)
    u, st = mx_opt.update(g, st, p)
    return optax.apply_updates(p, u), st, lv


mx_st = np_tree(mx_opt.init(mx_p))
C.gspmd("g.mlp_mixer_adamw_tokens.dp2xsp4", {"dp": 2, "sp": 4},
        (mx_ps, state_specs(mx_st, mx_ps), P("dp", "sp"), P("dp", "sp")), (mx_ps, state_specs(mx_st, mx_ps), P()),
        mixer_step, (mx_p, mx_st, R(4, MX_S, MX_C), R(4, MX_S, MX_C, scale=0.5)))

# ---------------------------------------------------------------------------
# 35. the smallest form of what 21. meets: the gradient of a depthwise conv
#     (feature_group_count = channels) with respect to its replicated weight,
#     the images over dp on a dp x tp mesh (replicated over tp). XLA's
#     partitioned program returns the gradient summed over the tp replicas
#     (four times too large); on a mesh of dp alone, or with the channels
#     over tp, it is right.
def dw_weight_grad(w, x, ct):
    f = lambda w: jnp.sum(lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=NHWC,
                                                   feature_group_count=x.shape[-1]) * ct)
    return jax.grad(f)(w)


C.gspmd("g.depthwise_conv_weight_grad_dp_repl_tp_min.dp2xtp4", {"dp": 2, "tp": 4}, (P(), P("dp"), P("dp")), P(),
        dw_weight_grad, (R(7, 7, 1, CN_C, scale=0.2), R(4, CN_H, CN_H, CN_C), R(4, CN_H, CN_H, CN_C)),
        expected="mismatch", note="XLA partitioner: depthwise-conv weight gradient summed over the tp replicas")

# ---------------------------------------------------------------------------
C.finish()
