"""samples/fresh139: a 139th batch of programs as a user writes them, on the theme of vision model training steps in current JAX + optax (the models in plain JAX, the way a flax.linen model computes them: flax is not in the pinned environment): ViT (patch embedding by reshape or by a strided conv, class token, learned position embeddings, pre-norm blocks, head), ConvNeXt blocks (depthwise conv, LayerNorm over channels, inverted-bottleneck MLP, layer scale, stochastic depth with the drop mask passed in), ResNet blocks with BatchNorm in training mode (batch statistics synced across data-parallel devices by pmean of the mean and of the mean of squares, running statistics updated with momentum), a small UNet with GroupNorm, skip connections and a timestep embedding (diffusion epsilon-prediction loss with min-SNR weights), mixup / cutmix with the mixing coefficients passed in, label smoothing, weight decay, cosine schedules.
Sizes: images 8x8 to 16x16 with 2-3 channels, widths 8 to 32, 10 classes; the
ViT has D=32, 8 heads of dim 4 (no key bias), MLP 64, patches 4x4 (16
patches + class token). Optimizer states are warmed by two single-device steps, so a
gradient's scale reaches the update. Images carry a per-sample brightness
offset, so per-device batch statistics differ clearly from global ones.
shard_map families (bugs in brackets):
 1. ResNet basic block training step with synced BatchNorm (dp8): BN batch
    mean and mean of squares pmean'd over dp, running statistics updated with
    momentum 0.9, label-smoothed CE, value_and_grad of the local loss,
    gradients pmean'd, chain(add_decayed_weights on the kernels, nesterov SGD
    with a cosine schedule). [BN statistics of the local batch; the variance
    as the pmean of the local variances.]
 2. spatially parallel conv block (dp2 x sp4, image rows over sp): 3x3 convs
    on the local rows with one-row halos exchanged by ppermute (zeros at the
    image border), GroupNorm whose per-sample sums are psum'd over sp, silu,
    1x1 conv shortcut. [the halos taken from the wrong neighbours (top and
    bottom swapped); GroupNorm statistics of the local rows.]
 3. ViT forward with Megatron tensor parallelism (dp2 x tp4): patch embedding
    by reshape, class token, position embeddings, 2 pre-norm blocks with q/k/v
    and fc1 column-parallel (2 heads per device), out-projection and fc2
    row-parallel with a psum over tp, their biases added after the psum.
    [the out-projection bias added to each device's partial sum before the
    psum; no psum after fc2.]
 4. ViT forward with patch (sequence) parallelism (dp2 x sp4, pixel rows over
    sp, one row of patches per device): patches by reshape of the local rows,
    the position embeddings sliced at the device's patch offset, the class
    token replicated on every device, K / V of the patches all_gather'd over
    sp and the class token's K / V prepended once. [the class token's K / V
    concatenated on every shard before the all_gather (four class keys); the
    position embeddings sliced without the device offset.]
 5. ConvNeXt training step (dp4): patchify stem, depthwise 7x7 conv,
    LayerNorm over channels, inverted-bottleneck MLP, layer scale, stochastic
    depth by a per-sample drop mask passed in, mixup with the coefficient
    passed in and the batch reversed as partner (the partner of a local
    sample lives on the mirror device: local flip plus ppermute d -> n-1-d),
    label smoothing, adamw with warmup-cosine and a decay mask, gradients
    pmean'd. [mixup with the local reversed batch; gradients psum'd.]
 6. UNet diffusion training step (dp4): sinusoidal timestep embedding and
    MLP, GroupNorm res blocks with the time projection, stride-2 down, nearest
    up, skip concatenation, x_t from the cosine alpha-bar table at the passed
    timesteps (sorted, so each device holds its own range of noise levels),
    epsilon MSE with min-SNR-5 weights normalised by the global weight sum,
    adam, EMA of the parameters. [each device normalises by its
    local weight sum and pmeans; the gradients not reduced.]
 7. spatially parallel ResNet stem with synced BN (dp2 x sp4): a stride-2 3x3
    conv with symmetric (PyTorch-style) padding needing only the previous
    device's last row, BN statistics psum'd over (dp, sp) with running
    statistics, a 3x3 conv with two halos, a strided 1x1 shortcut. [the BN
    sums psum'd over sp only; the stride-2 conv given the next device's
    first row below instead of the previous device's last row above.]
 8. class-parallel classifier head (dp2 x tp4, 16 classes over tp) with label
    smoothing and cutmix targets (two labels, per-sample area ratio passed
    in): lse by pmax / psum, both target logits by masked psums at label -
    shard start, the smoothing term from the psum of the logit sums over all
    classes, the head's gradient (softmax - target) computed by hand and
    psum'd over dp. [no shard offset on the labels; the smoothing term from
    the mean of the local logits.]
GSPMD pairs (jax.jit with NamedSharding in / out shardings; correct):
 9. ResNet step with training-mode BN (dp8); 10. ViT step, conv patch
 embedding, mixup, adamw + cosine + clipping, parameters sharded (fsdp8);
 11. ViT step with heads / MLP columns over tp (dp2 x tp4); 12. conv net
 training step with the image rows sharded (dp2 x sp4); 13. UNet diffusion
 step (dp4); 14. ConvNeXt step with cutmix by a box mask passed in and drop
 path, fsdp over channels (dp2 x fsdp4).
Numerics: f32 throughout; correct pairs agree at about 1e-6; bug variants
differ clearly (1e-2 and more).
Run from the repository root: bash samples/gen/run_fresh139.sh [SUBSTR...]
"""
import sys
import numpy as np
import jax, jax.numpy as jnp
from jax import lax
from jax.sharding import NamedSharding, PartitionSpec as P
import optax
sys.path.insert(0, "samples/gen")  # run from the repository root (run_fresh139.sh)
from fresh_lib import Corpus, seeded, state_specs  # noqa: E402
from scalify_jax import make_mesh  # noqa: E402

SCRIPT = "samples/gen/fresh139.py"
C = Corpus("samples/fresh139", SCRIPT, "samples/gen/run_fresh139.sh", sys.argv[1:])
rng, R, I = seeded(139139)
psum, pmean, pmax, idx, ppermute = lax.psum, lax.pmean, lax.pmax, lax.axis_index, lax.ppermute
f32 = jnp.float32
K = 10          # classes
SMOOTH = 0.1    # label smoothing
BN_MOM = 0.9
EPS = 1e-5


def images(B, H, W, Cin):
    """images with a per-sample brightness offset and contrast."""
    return (R(B, H, W, Cin) * (0.5 + np.abs(R(B, 1, 1, 1))) + R(B, 1, 1, 1, scale=1.5)).astype(np.float32)


# ---------------------------------------------------------------------------
# layers


def conv(x, w, stride=1, padding="SAME", groups=1):
    return lax.conv_general_dilated(x, w, (stride, stride), padding, dimension_numbers=("NHWC", "HWIO", "NHWC"),
                                    feature_group_count=groups)


def layer_norm(x, g, b):
    m = jnp.mean(x, -1, keepdims=True)
    v = jnp.mean(jnp.square(x - m), -1, keepdims=True)
    return (x - m) * lax.rsqrt(v + 1e-6) * g + b


def group_norm(x, g, b, groups, red=lambda t: t):
    """GroupNorm over (H, W, C / groups) per sample; red reduces the per-sample sums (rows sharded)."""
    B, H, W, Ch = x.shape
    xg = x.reshape(B, H, W, groups, Ch // groups)
    s1 = red(jnp.sum(xg, (1, 2, 4)))
    s2 = red(jnp.sum(xg * xg, (1, 2, 4)))
    n = red(jnp.float32(H * W * (Ch // groups)))
    m = s1 / n
    v = s2 / n - m * m
    y = (xg - m[:, None, None, :, None]) * lax.rsqrt(v + EPS)[:, None, None, :, None]
    return y.reshape(B, H, W, Ch) * g + b


def batch_norm_train(x, p, st, stats=None):
    """training-mode BatchNorm (flax semantics: normalise with the biased batch variance, running
    statistics ra = m * ra + (1 - m) * batch). stats(x) -> (mean, mean of squares) over the batch."""
    if stats is None:
        mean, msq = jnp.mean(x, (0, 1, 2)), jnp.mean(x * x, (0, 1, 2))
    else:
        mean, msq = stats(x)
    var = msq - mean * mean
    y = (x - mean) * lax.rsqrt(var + EPS) * p["scale"] + p["bias"]
    new = {"mean": BN_MOM * st["mean"] + (1 - BN_MOM) * mean, "var": BN_MOM * st["var"] + (1 - BN_MOM) * var}
    return y, new


def smooth_ce(logits, target):
    """soft-target CE with label smoothing; target: probabilities [B, K]."""
    q = (1 - SMOOTH) * target + SMOOTH / logits.shape[-1]
    return -jnp.sum(q * jax.nn.log_softmax(logits, -1), -1)


def kernel_mask(params):
    """weight decay on conv / dense kernels only (not norms, biases, tokens, layer scale)."""
    return jax.tree_util.tree_map_with_path(lambda path, w: path[-1].key in ("w",) and np.ndim(w) >= 2, params)


def warm(step, params, state, batches):
    step = jax.jit(step)
    for b in batches:
        out = step(params, state, *b)
        params, state = out[0], out[1]
    return jax.tree.map(np.asarray, params), jax.tree.map(np.asarray, state)


def halo_rows(x, ax, n, swap=False):
    """x [B, h, W, C] with image rows over ax (n devices): the previous device's last row above and
    the next device's first row below (zeros at the image border)."""
    down = [(i, i + 1) for i in range(n - 1)]
    up = [(i + 1, i) for i in range(n - 1)]
    if swap:
        top, bot = ppermute(x[:, :1], ax, up), ppermute(x[:, -1:], ax, down)
    else:
        top, bot = ppermute(x[:, -1:], ax, down), ppermute(x[:, :1], ax, up)
    return jnp.concatenate([top, x, bot], 1)


def conv3_rows(x, w, ax, n, swap=False):
    """3x3 SAME conv of row-sharded x: halos, VALID over rows, padded over columns."""
    return conv(halo_rows(x, ax, n, swap), w, 1, ((0, 0), (1, 1)))


# ---------------------------------------------------------------------------
# 1. ResNet basic block training step with synced BatchNorm (dp8).
B1, HW1, C1 = 16, 8, 8


def resnet_init():
    s = lambda fan: (2.0 / fan) ** 0.5  # noqa: E731
    bn = lambda c: {"scale": 1.0 + R(c, scale=0.1), "bias": R(c, scale=0.1)}  # noqa: E731
    params = {"stem": {"w": R(3, 3, 3, C1, scale=s(27))}, "bn0": bn(C1),
              "conv1": {"w": R(3, 3, C1, C1, scale=s(9 * C1))}, "bn1": bn(C1),
              "conv2": {"w": R(3, 3, C1, C1, scale=s(9 * C1))}, "bn2": bn(C1),
              "head": {"w": R(C1, K, scale=C1 ** -0.5), "b": np.zeros(K, np.float32)}}
    stats = {k: {"mean": R(C1, scale=0.1), "var": 1.0 + np.abs(R(C1, scale=0.1))} for k in ("bn0", "bn1", "bn2")}
    return params, stats


def resnet_apply(p, st, x, stats=None):
    new = {}
    h, new["bn0"] = batch_norm_train(conv(x, p["stem"]["w"]), p["bn0"], st["bn0"], stats)
    h = jax.nn.relu(h)
    r, new["bn1"] = batch_norm_train(conv(h, p["conv1"]["w"]), p["bn1"], st["bn1"], stats)
    r, new["bn2"] = batch_norm_train(conv(jax.nn.relu(r), p["conv2"]["w"]), p["bn2"], st["bn2"], stats)
    h = jax.nn.relu(h + r)
    return jnp.mean(h, (1, 2)) @ p["head"]["w"] + p["head"]["b"], new


RESNET_OPT = optax.chain(optax.add_decayed_weights(5e-4, mask=kernel_mask),
                         optax.sgd(optax.cosine_decay_schedule(0.1, 100), momentum=0.9, nesterov=True))


def resnet_loss(p, st, x, y, stats=None):
    logits, new = resnet_apply(p, st, x, stats)
    return jnp.mean(smooth_ce(logits, jax.nn.one_hot(y, K))), new


def resnet_step(params, opt_state, bstats, x, y):
    (loss, new), g = jax.value_and_grad(resnet_loss, has_aux=True)(params, bstats, x, y)
    updates, opt_state = RESNET_OPT.update(g, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, new, loss


def resnet_syncbn(bug):
    def stats(x):
        mean, msq = jnp.mean(x, (0, 1, 2)), jnp.mean(x * x, (0, 1, 2))
        if bug == "bn-local-stats":
            return mean, msq
        if bug == "var-pmean-local-var":
            gm = pmean(mean, "dp")
            return gm, pmean(msq - mean * mean, "dp") + gm * gm
        return pmean(mean, "dp"), pmean(msq, "dp")

    def f(params, opt_state, bstats, x, y):
        (loss, new), g = jax.value_and_grad(resnet_loss, has_aux=True)(params, bstats, x, y, stats)
        g = pmean(g, "dp")
        updates, opt_state = RESNET_OPT.update(g, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, new, pmean(loss, "dp")
    return f


RP1, RS1 = resnet_init()


def resnet_warmed():
    params, stats = resnet_init()
    state = RESNET_OPT.init(params)

    def step(p, s, st, x, y):
        p, s, st, _ = resnet_step(p, s, st, x, y)
        return p, s, st
    j = jax.jit(step)
    for _ in range(2):
        params, state, stats = j(params, state, stats, images(B1, HW1, HW1, 3), I(0, K, B1))
    return tuple(jax.tree.map(np.asarray, t) for t in (params, state, stats))


P1, S1, ST1 = resnet_warmed()
C.smap("s.resnet_block_syncbn_nesterov_cosine_step.dp8", {"dp": 8}, resnet_syncbn,
       (P(), P(), P(), P("dp"), P("dp")), (P(), P(), P(), P()), resnet_step,
       (P1, S1, ST1, images(B1, HW1, HW1, 3), I(0, K, B1)),
       bugs=[("bn-local-stats", ["local-statistic"]), ("var-pmean-local-var", ["wrong-reduction"])])

# ---------------------------------------------------------------------------
# 2. spatially parallel conv block: halos by ppermute, GroupNorm psum'd over rows.
B2, H2, W2, CI2, CO2, G2, SP2 = 4, 16, 8, 4, 8, 4, 4


def spatial_block_ref(x, p):
    h = conv(x, p["c1"]["w"]) + p["c1"]["b"]
    h = jax.nn.silu(group_norm(h, p["gn"]["g"], p["gn"]["b"], G2))
    h = conv(h, p["c2"]["w"]) + p["c2"]["b"]
    return h + conv(x, p["skip"]["w"])


def spatial_block(bug):
    def f(x, p):
        swap = bug == "halo-wrong-neighbour"
        red = (lambda t: t) if bug == "gn-local-stats" else (lambda t: psum(t, "sp"))
        h = conv3_rows(x, p["c1"]["w"], "sp", SP2, swap) + p["c1"]["b"]
        h = jax.nn.silu(group_norm(h, p["gn"]["g"], p["gn"]["b"], G2, red))
        h = conv3_rows(h, p["c2"]["w"], "sp", SP2, swap) + p["c2"]["b"]
        return h + conv(x, p["skip"]["w"])
    return f


PB2 = {"c1": {"w": R(3, 3, CI2, CO2, scale=0.3), "b": R(CO2, scale=0.1)},
       "gn": {"g": 1.0 + R(CO2, scale=0.1), "b": R(CO2, scale=0.1)},
       "c2": {"w": R(3, 3, CO2, CO2, scale=0.2), "b": R(CO2, scale=0.1)},
       "skip": {"w": R(1, 1, CI2, CO2, scale=0.5)}}
C.smap("s.spatial_rows_halo_conv_groupnorm.dp2xsp4", {"dp": 2, "sp": SP2}, spatial_block,
       (P("dp", "sp"), P()), P("dp", "sp"), spatial_block_ref, (images(B2, H2, W2, CI2), PB2),
       bugs=[("halo-wrong-neighbour", ["wrong-halo", "wrong-permutation"]), ("gn-local-stats", ["local-statistic"])])

# ---------------------------------------------------------------------------
# ViT (families 3, 4 and GSPMD 10, 11)
IMG, PATCH, CH, DV, NH, HDV, MLPV, NBLK = 16, 4, 3, 32, 8, 4, 64, 2
NP = (IMG // PATCH) ** 2


def vit_init(conv_patch=False):
    s = DV ** -0.5
    blk = lambda: {"ln1": {"g": 1.0 + R(DV, scale=0.1), "b": R(DV, scale=0.1)},  # noqa: E731
                   "q": {"w": R(DV, DV, scale=s), "b": R(DV, scale=0.1)},
                   "k": {"w": R(DV, DV, scale=s)},   # no key bias: softmax is invariant to it
                   "v": {"w": R(DV, DV, scale=s), "b": R(DV, scale=0.1)},
                   "o": {"w": R(DV, DV, scale=s), "b": R(DV, scale=0.1)},
                   "ln2": {"g": 1.0 + R(DV, scale=0.1), "b": R(DV, scale=0.1)},
                   "fc1": {"w": R(DV, MLPV, scale=s), "b": R(MLPV, scale=0.1)},
                   "fc2": {"w": R(MLPV, DV, scale=MLPV ** -0.5), "b": R(DV, scale=0.1)}}
    pd = PATCH * PATCH * CH
    pw = R(PATCH, PATCH, CH, DV, scale=pd ** -0.5) if conv_patch else R(pd, DV, scale=pd ** -0.5)
    return {"patch": {"w": pw, "b": R(DV, scale=0.1)}, "cls": R(1, 1, DV, scale=0.5),
            "pos": R(1, NP + 1, DV, scale=0.5),
            "blocks": {"blk%d" % i: blk() for i in range(NBLK)},
            "ln": {"g": 1.0 + R(DV, scale=0.1), "b": R(DV, scale=0.1)},
            "head": {"w": R(DV, K, scale=s), "b": R(K, scale=0.1)}}


def patchify(x, p=PATCH):
    B, H, W, Cc = x.shape
    x = x.reshape(B, H // p, p, W // p, p, Cc).transpose(0, 1, 3, 2, 4, 5)
    return x.reshape(B, (H // p) * (W // p), p * p * Cc)


def heads(t):
    return t.reshape(t.shape[0], t.shape[1], -1, HDV)


def attend(q, k, v):
    s = jnp.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(HDV)
    return jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(s, -1), v)


def vit_block(x, bp, red=lambda o: o, attn_bias_in_partial=False, mlp_red=None):
    """pre-norm block; red reduces the row-parallel partial sums (identity on one device)."""
    mlp_red = red if mlp_red is None else mlp_red
    B, T, _ = x.shape
    h = layer_norm(x, bp["ln1"]["g"], bp["ln1"]["b"])
    q, k, v = (heads(h @ bp[n]["w"] + bp[n].get("b", 0.0)) for n in ("q", "k", "v"))
    o = attend(q, k, v).reshape(B, T, -1) @ bp["o"]["w"]
    o = red(o + bp["o"]["b"]) if attn_bias_in_partial else red(o) + bp["o"]["b"]
    x = x + o
    h = jax.nn.gelu(layer_norm(x, bp["ln2"]["g"], bp["ln2"]["b"]) @ bp["fc1"]["w"] + bp["fc1"]["b"])
    return x + mlp_red(h @ bp["fc2"]["w"]) + bp["fc2"]["b"]


def vit_embed(p, x):
    if p["patch"]["w"].ndim == 4:
        t = conv(x, p["patch"]["w"], PATCH, "VALID").reshape(x.shape[0], -1, DV) + p["patch"]["b"]
    else:
        t = patchify(x) @ p["patch"]["w"] + p["patch"]["b"]
    cls = jnp.broadcast_to(p["cls"], (x.shape[0], 1, DV))
    return jnp.concatenate([cls, t], 1) + p["pos"]


def vit_apply(p, x, constrain=None):
    h = vit_embed(p, x)
    for bp in p["blocks"].values():
        if constrain is not None:
            h = constrain(h)
        h = vit_block(h, bp)
    return layer_norm(h[:, 0], p["ln"]["g"], p["ln"]["b"]) @ p["head"]["w"] + p["head"]["b"]


def vit_tp_spec(path, w):
    names = [None] + [getattr(k, "key", None) for k in path]
    if names[-2] in ("q", "k", "v", "fc1"):
        return P(None, "tp") if names[-1] == "w" else P("tp")
    if names[-2] in ("o", "fc2") and names[-1] == "w":
        return P("tp", None)
    return P()


def tree_specs(params, fn):
    return jax.tree_util.tree_map_with_path(fn, params)


# 3. ViT forward with Megatron tensor parallelism.
B3 = 4


def vit_fwd_ref(p, x):
    return vit_apply(p, x)


def vit_tp(bug):
    def f(p, x):
        h = vit_embed(p, x)
        mlp_red = (lambda o: o) if bug == "fc2-no-psum" else (lambda o: psum(o, "tp"))
        for bp in p["blocks"].values():
            h = vit_block(h, bp, lambda o: psum(o, "tp"), attn_bias_in_partial=bug == "o-bias-before-psum",
                          mlp_red=mlp_red)
        return layer_norm(h[:, 0], p["ln"]["g"], p["ln"]["b"]) @ p["head"]["w"] + p["head"]["b"]
    return f


PV3 = vit_init()
C.smap("s.vit_megatron_heads_mlp_cls_pos.dp2xtp4", {"dp": 2, "tp": 4}, vit_tp,
       (tree_specs(PV3, vit_tp_spec), P("dp")), P("dp"), vit_fwd_ref, (PV3, images(B3, IMG, IMG, CH)),
       bugs=[("o-bias-before-psum", ["duplicated-term", "wrong-scale"]), ("fc2-no-psum", ["missing-all-reduce"])])

# 4. ViT forward with patch (sequence) parallelism, class token replicated.
B4, SP4 = 4, 4


def vit_seq_ref(p, x):
    h = vit_embed(p, x)
    for bp in p["blocks"].values():
        h = vit_block(h, bp)
    return layer_norm(h[:, 0], p["ln"]["g"], p["ln"]["b"]) @ p["head"]["w"] + p["head"]["b"], h[:, 1:]


def vit_seq(bug):
    def f(p, x):
        b = x.shape[0]
        t = patchify(x) @ p["patch"]["w"] + p["patch"]["b"]            # [b, n_local, D]
        n = t.shape[1]
        off = 0 if bug == "pos-no-offset" else idx("sp") * n
        t = t + lax.dynamic_slice_in_dim(p["pos"], 1 + off, n, 1)
        cls = jnp.broadcast_to(p["cls"] + p["pos"][:, :1], (b, 1, DV))
        h = jnp.concatenate([cls, t], 1)                               # [cls; local patches]
        for bp in p["blocks"].values():
            u = layer_norm(h, bp["ln1"]["g"], bp["ln1"]["b"])
            q, k, v = (heads(u @ bp[nm]["w"] + bp[nm].get("b", 0.0)) for nm in ("q", "k", "v"))
            if bug == "cls-on-every-shard":
                k, v = (lax.all_gather(a, "sp", axis=1, tiled=True) for a in (k, v))
            else:
                k, v = (jnp.concatenate([a[:, :1], lax.all_gather(a[:, 1:], "sp", axis=1, tiled=True)], 1)
                        for a in (k, v))
            h = h + attend(q, k, v).reshape(b, 1 + n, -1) @ bp["o"]["w"] + bp["o"]["b"]
            u = jax.nn.gelu(layer_norm(h, bp["ln2"]["g"], bp["ln2"]["b"]) @ bp["fc1"]["w"] + bp["fc1"]["b"])
            h = h + u @ bp["fc2"]["w"] + bp["fc2"]["b"]
        return layer_norm(h[:, 0], p["ln"]["g"], p["ln"]["b"]) @ p["head"]["w"] + p["head"]["b"], h[:, 1:]
    return f


PV4 = vit_init()
C.smap("s.vit_patch_parallel_allgather_kv_cls_replicated.dp2xsp4", {"dp": 2, "sp": SP4}, vit_seq,
       (P(), P("dp", "sp")), (P("dp"), P("dp", "sp")), vit_seq_ref, (PV4, images(B4, IMG, IMG, CH)),
       bugs=[("cls-on-every-shard", ["duplicated-term"]), ("pos-no-offset", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 5. ConvNeXt training step: mixup with the mirrored partner, drop path, adamw + cosine.
B5, DP5, CX, KEEP = 16, 4, 16, 0.8


def convnext_init():
    return {"stem": {"w": R(2, 2, 3, CX, scale=12 ** -0.5), "b": R(CX, scale=0.1)},
            "stem_ln": {"g": 1.0 + R(CX, scale=0.1), "b": R(CX, scale=0.1)},
            "dw": {"w": R(7, 7, 1, CX, scale=0.15), "b": R(CX, scale=0.1)},
            "ln": {"g": 1.0 + R(CX, scale=0.1), "b": R(CX, scale=0.1)},
            "pw1": {"w": R(CX, 4 * CX, scale=CX ** -0.5), "b": R(4 * CX, scale=0.1)},
            "pw2": {"w": R(4 * CX, CX, scale=(4 * CX) ** -0.5), "b": R(CX, scale=0.1)},
            "gamma": np.full(CX, 0.5, np.float32) + R(CX, scale=0.05),
            "norm": {"g": 1.0 + R(CX, scale=0.1), "b": R(CX, scale=0.1)},
            "head": {"w": R(CX, K, scale=CX ** -0.5), "b": np.zeros(K, np.float32)}}


def convnext_apply(p, x, keep_mask):
    h = conv(x, p["stem"]["w"], 2, "VALID") + p["stem"]["b"]
    h = layer_norm(h, p["stem_ln"]["g"], p["stem_ln"]["b"])
    r = conv(h, p["dw"]["w"], 1, "SAME", groups=CX) + p["dw"]["b"]
    r = layer_norm(r, p["ln"]["g"], p["ln"]["b"])
    r = jax.nn.gelu(r @ p["pw1"]["w"] + p["pw1"]["b"]) @ p["pw2"]["w"] + p["pw2"]["b"]
    r = p["gamma"] * r * (keep_mask / KEEP)[:, None, None, None]
    h = h + r
    h = layer_norm(jnp.mean(h, (1, 2)), p["norm"]["g"], p["norm"]["b"])
    return h @ p["head"]["w"] + p["head"]["b"]


CONVNEXT_OPT = optax.adamw(optax.warmup_cosine_decay_schedule(0.0, 2e-3, 2, 50, 1e-4), weight_decay=0.05,
                           mask=kernel_mask)


def convnext_loss(p, x, xp, y, yp, lam, keep):
    xm = lam * x + (1 - lam) * xp
    t = lam * jax.nn.one_hot(y, K) + (1 - lam) * jax.nn.one_hot(yp, K)
    return jnp.mean(smooth_ce(convnext_apply(p, xm, keep), t))


def convnext_step(params, opt_state, x, y, keep, lam):
    loss, g = jax.value_and_grad(convnext_loss)(params, x, jnp.flip(x, 0), y, jnp.flip(y, 0), lam, keep)
    updates, opt_state = CONVNEXT_OPT.update(g, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss


def convnext_dp(bug):
    mirror = [(d, DP5 - 1 - d) for d in range(DP5)]

    def f(params, opt_state, x, y, keep, lam):
        xp, yp = jnp.flip(x, 0), jnp.flip(y, 0)
        if bug != "mixup-local-flip":
            xp, yp = ppermute(xp, "dp", mirror), ppermute(yp, "dp", mirror)
        loss, g = jax.value_and_grad(convnext_loss)(params, x, xp, y, yp, lam, keep)
        g = psum(g, "dp") if bug == "grad-psum" else pmean(g, "dp")
        updates, opt_state = CONVNEXT_OPT.update(g, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, pmean(loss, "dp")
    return f


def keep_mask(B):
    return (rng.random(B) < KEEP).astype(np.float32)


P5 = convnext_init()
P5, S5 = warm(convnext_step, P5, CONVNEXT_OPT.init(P5),
              [(images(B5, 16, 16, 3), I(0, K, B5), keep_mask(B5), np.float32(0.7)) for _ in range(2)])
C.smap("s.convnext_mixup_mirror_droppath_adamw_cosine.dp4", {"dp": DP5}, convnext_dp,
       (P(), P(), P("dp"), P("dp"), P("dp"), P()), (P(), P(), P()), convnext_step,
       (P5, S5, images(B5, 16, 16, 3), I(0, K, B5), keep_mask(B5), np.float32(0.65)),
       bugs=[("mixup-local-flip", ["wrong-permutation"]), ("grad-psum", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 6. UNet diffusion training step (epsilon prediction, min-SNR weights), dp4.
B6, DP6, HW6, CU, TSTEPS, TD = 16, 4, 8, 8, 100, 16
_s = np.arange(TSTEPS + 1, dtype=np.float64) / TSTEPS
_ab = np.cos((_s + 0.008) / 1.008 * np.pi / 2) ** 2
ALPHA_BAR = np.clip(_ab[1:] / _ab[0], 1e-4, 0.9999).astype(np.float32)


def unet_init():
    def rb(ci, co):
        d = {"gn1": {"g": 1.0 + R(ci, scale=0.1), "b": R(ci, scale=0.1)},
             "c1": {"w": R(3, 3, ci, co, scale=(9 * ci) ** -0.5), "b": R(co, scale=0.1)},
             "t": {"w": R(2 * TD, co, scale=(2 * TD) ** -0.5), "b": R(co, scale=0.1)},
             "gn2": {"g": 1.0 + R(co, scale=0.1), "b": R(co, scale=0.1)},
             "c2": {"w": R(3, 3, co, co, scale=(9 * co) ** -0.5), "b": R(co, scale=0.1)}}
        if ci != co:
            d["skip"] = {"w": R(1, 1, ci, co, scale=ci ** -0.5)}
        return d
    return {"temb1": {"w": R(TD, 2 * TD, scale=TD ** -0.5), "b": R(2 * TD, scale=0.1)},
            "temb2": {"w": R(2 * TD, 2 * TD, scale=(2 * TD) ** -0.5), "b": R(2 * TD, scale=0.1)},
            "cin": {"w": R(3, 3, 2, CU, scale=18 ** -0.5), "b": R(CU, scale=0.1)},
            "rb1": rb(CU, CU),
            "down": {"w": R(3, 3, CU, 2 * CU, scale=(9 * CU) ** -0.5), "b": R(2 * CU, scale=0.1)},
            "rb2": rb(2 * CU, 2 * CU),
            "up": {"w": R(3, 3, 2 * CU, CU, scale=(18 * CU) ** -0.5), "b": R(CU, scale=0.1)},
            "rb3": rb(2 * CU, CU),
            "gno": {"g": 1.0 + R(CU, scale=0.1), "b": R(CU, scale=0.1)},
            "cout": {"w": R(3, 3, CU, 2, scale=(9 * CU) ** -0.5), "b": np.zeros(2, np.float32)}}


def timestep_embedding(t, dim=TD):
    half = dim // 2
    freqs = jnp.exp(-np.log(10000.0) * jnp.arange(half, dtype=f32) / half)
    a = t.astype(f32)[:, None] * freqs
    return jnp.concatenate([jnp.cos(a), jnp.sin(a)], -1)


def res_block(x, temb, p):
    h = conv(jax.nn.silu(group_norm(x, p["gn1"]["g"], p["gn1"]["b"], 4)), p["c1"]["w"]) + p["c1"]["b"]
    h = h + (jax.nn.silu(temb) @ p["t"]["w"] + p["t"]["b"])[:, None, None, :]
    h = conv(jax.nn.silu(group_norm(h, p["gn2"]["g"], p["gn2"]["b"], 4)), p["c2"]["w"]) + p["c2"]["b"]
    return h + (conv(x, p["skip"]["w"]) if "skip" in p else x)


def unet_apply(p, x, t):
    temb = jax.nn.silu(timestep_embedding(t) @ p["temb1"]["w"] + p["temb1"]["b"])
    temb = temb @ p["temb2"]["w"] + p["temb2"]["b"]
    h0 = conv(x, p["cin"]["w"]) + p["cin"]["b"]
    h1 = res_block(h0, temb, p["rb1"])
    h2 = res_block(conv(h1, p["down"]["w"], 2, ((1, 1), (1, 1))) + p["down"]["b"], temb, p["rb2"])
    u = jnp.repeat(jnp.repeat(h2, 2, 1), 2, 2)
    u = conv(u, p["up"]["w"]) + p["up"]["b"]
    h3 = res_block(jnp.concatenate([u, h1], -1), temb, p["rb3"])
    h3 = jax.nn.silu(group_norm(h3, p["gno"]["g"], p["gno"]["b"], 4))
    return conv(h3, p["cout"]["w"]) + p["cout"]["b"]


UNET_OPT = optax.adam(1e-2)
EMA = 0.99


def diffusion_terms(p, x0, t, eps):
    """per-sample epsilon MSE and min-SNR-5 weight."""
    ab = jnp.take(jnp.asarray(ALPHA_BAR), t)
    xt = jnp.sqrt(ab)[:, None, None, None] * x0 + jnp.sqrt(1 - ab)[:, None, None, None] * eps
    mse = jnp.mean(jnp.square(unet_apply(p, xt, t) - eps), (1, 2, 3))
    snr = ab / (1 - ab)
    return mse, jnp.minimum(snr, 5.0) / snr


def unet_step(params, opt_state, ema, x0, t, eps):
    def loss_fn(p):
        mse, w = diffusion_terms(p, x0, t, eps)
        return jnp.sum(w * mse) / jnp.sum(w)
    loss, g = jax.value_and_grad(loss_fn)(params)
    updates, opt_state = UNET_OPT.update(g, opt_state, params)
    params = optax.apply_updates(params, updates)
    ema = jax.tree.map(lambda e, q: EMA * e + (1 - EMA) * q, ema, params)
    return params, opt_state, ema, loss


def unet_dp(bug):
    def f(params, opt_state, ema, x0, t, eps):
        def loss_fn(p):
            mse, w = diffusion_terms(p, x0, t, eps)
            if bug == "snr-weight-local-sum":
                return jnp.sum(w * mse) / jnp.sum(w)
            return jnp.sum(w * mse) / psum(jnp.sum(w), "dp")
        loss, g = jax.value_and_grad(loss_fn)(params)
        if bug == "snr-weight-local-sum":
            g, loss = pmean(g, "dp"), pmean(loss, "dp")
        elif bug == "no-grad-psum":
            loss = psum(loss, "dp")
        else:
            g, loss = psum(g, "dp"), psum(loss, "dp")
        updates, opt_state = UNET_OPT.update(g, opt_state, params)
        params = optax.apply_updates(params, updates)
        ema = jax.tree.map(lambda e, q: EMA * e + (1 - EMA) * q, ema, params)
        return params, opt_state, ema, loss
    return f


def diffusion_batch(B):
    x0 = np.tanh(images(B, HW6, HW6, 2))
    return x0, np.sort(I(0, TSTEPS, B)), R(B, HW6, HW6, 2)   # sorted: the devices see different noise levels


P6 = unet_init()
S6 = UNET_OPT.init(P6)
_j6 = jax.jit(unet_step)
E6 = P6
for _ in range(2):
    P6, S6, E6, _ = _j6(P6, S6, E6, *diffusion_batch(B6))
P6, S6, E6 = (jax.tree.map(np.asarray, t) for t in (P6, S6, E6))
C.smap("s.unet_diffusion_eps_minsnr_adam_ema.dp4", {"dp": DP6}, unet_dp,
       (P(), P(), P(), P("dp"), P("dp"), P("dp")), (P(), P(), P(), P()), unet_step,
       (P6, S6, E6) + diffusion_batch(B6),
       bugs=[("snr-weight-local-sum", ["local-statistic"]), ("no-grad-psum", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 7. spatially parallel ResNet stem: stride-2 conv with one halo, synced BN over (dp, sp).
B7, H7, W7, C7, SP7 = 4, 16, 8, 8, 4
PT_PAD = ((1, 1), (1, 1))   # torch-style symmetric padding for the stride-2 conv


def stem_ref(x, p, st):
    new = {}
    h, new["bn1"] = batch_norm_train(conv(x, p["c1"]["w"], 2, PT_PAD), p["bn1"], st["bn1"])
    h = jax.nn.relu(h)
    h, new["bn2"] = batch_norm_train(conv(h, p["c2"]["w"]), p["bn2"], st["bn2"])
    return jax.nn.relu(h + conv(x, p["skip"]["w"], 2, "VALID")), new


def stem_sp(bug):
    axes = "sp" if bug == "bn-psum-over-sp-only" else ("dp", "sp")

    def stats(x):
        n = psum(jnp.float32(x.shape[0] * x.shape[1] * x.shape[2]), axes)
        return psum(jnp.sum(x, (0, 1, 2)), axes) / n, psum(jnp.sum(x * x, (0, 1, 2)), axes) / n

    def f(x, p, st):
        new = {}
        down = [(i, i + 1) for i in range(SP7 - 1)]
        up = [(i + 1, i) for i in range(SP7 - 1)]
        if bug == "stride2-halo-below":
            xp = jnp.concatenate([x, ppermute(x[:, :1], "sp", up)], 1)
        else:
            xp = jnp.concatenate([ppermute(x[:, -1:], "sp", down), x], 1)
        h = conv(xp, p["c1"]["w"], 2, ((0, 0), (1, 1)))
        h, new["bn1"] = batch_norm_train(h, p["bn1"], st["bn1"], stats)
        h = jax.nn.relu(h)
        h, new["bn2"] = batch_norm_train(conv3_rows(h, p["c2"]["w"], "sp", SP7), p["bn2"], st["bn2"], stats)
        return jax.nn.relu(h + conv(x, p["skip"]["w"], 2, "VALID")), new
    return f


bn7 = lambda: {"scale": 1.0 + R(C7, scale=0.1), "bias": R(C7, scale=0.1)}  # noqa: E731
PB7 = {"c1": {"w": R(3, 3, 3, C7, scale=0.3)}, "bn1": bn7(),
       "c2": {"w": R(3, 3, C7, C7, scale=0.15)}, "bn2": bn7(), "skip": {"w": R(1, 1, 3, C7, scale=0.5)}}
ST7 = {k: {"mean": R(C7, scale=0.1), "var": 1.0 + np.abs(R(C7, scale=0.1))} for k in ("bn1", "bn2")}
C.smap("s.spatial_resnet_stem_stride2_halo_syncbn.dp2xsp4", {"dp": 2, "sp": SP7}, stem_sp,
       (P("dp", "sp"), P(), P()), (P("dp", "sp"), P()), stem_ref, (images(B7, H7, W7, 3), PB7, ST7),
       bugs=[("bn-psum-over-sp-only", ["wrong-axis", "local-statistic"]), ("stride2-halo-below", ["wrong-halo"])])

# ---------------------------------------------------------------------------
# 8. class-parallel head with label smoothing and cutmix targets; the head's gradient by hand.
B8, D8, K8 = 8, 16, 16


def cutmix_head_ref(feat, w, b, ya, yb, lam):
    z = feat @ w + b
    t = lam[:, None] * jax.nn.one_hot(ya, K8) + (1 - lam[:, None]) * jax.nn.one_hot(yb, K8)
    q = (1 - SMOOTH) * t + SMOOTH / K8
    per = -jnp.sum(q * jax.nn.log_softmax(z, -1), -1)
    dz = (jax.nn.softmax(z, -1) - q) / feat.shape[0]
    return jnp.mean(per), per, feat.T @ dz, jnp.sum(dz, 0)


def cutmix_head_tp(bug):
    def f(feat, w, b, ya, yb, lam):
        kl = w.shape[1]
        z = feat @ w + b
        m = pmax(jnp.max(z, -1), "tp")
        se = psum(jnp.sum(jnp.exp(z - m[:, None]), -1), "tp")
        lse = jnp.log(se) + m
        off = 0 if bug == "no-class-offset" else idx("tp") * kl

        def tgt(y):
            li = y - off
            inr = (li >= 0) & (li < kl)
            zl = jnp.take_along_axis(z, jnp.clip(li, 0, kl - 1)[:, None], -1)[:, 0]
            return psum(jnp.where(inr, zl, 0.0), "tp"), jax.nn.one_hot(li, kl)   # one_hot is 0 out of range
        za, oa = tgt(ya)
        zb, ob = tgt(yb)
        zmean = jnp.mean(z, -1) if bug == "smoothing-local-mean" else psum(jnp.sum(z, -1), "tp") / K8
        per = lse - (1 - SMOOTH) * (lam * za + (1 - lam) * zb) - SMOOTH * zmean
        q = (1 - SMOOTH) * (lam[:, None] * oa + (1 - lam[:, None]) * ob) + SMOOTH / K8
        nb = psum(jnp.float32(feat.shape[0]), "dp")
        dz = (jnp.exp(z - lse[:, None]) - q) / nb
        return psum(jnp.sum(per), "dp") / nb, per, psum(feat.T @ dz, "dp"), psum(jnp.sum(dz, 0), "dp")
    return f


C.smap("s.class_parallel_head_smoothing_cutmix_grad.dp2xtp4", {"dp": 2, "tp": 4}, cutmix_head_tp,
       (P("dp"), P(None, "tp"), P("tp"), P("dp"), P("dp"), P("dp")), (P(), P("dp"), P(None, "tp"), P("tp")),
       cutmix_head_ref,
       (R(B8, D8), R(D8, K8, scale=0.5), R(K8, scale=0.2), I(0, K8, B8), I(0, K8, B8),
        rng.uniform(0.2, 0.9, B8).astype(np.float32)),
       bugs=[("no-class-offset", ["wrong-offset"]), ("smoothing-local-mean", ["local-statistic"])])

# ---------------------------------------------------------------------------
# GSPMD training steps.

# 9. ResNet step, training-mode BN over the global batch (dp8).
C.gspmd("g.resnet_block_bn_train_sgd_step.dp8", {"dp": 8}, (P(), P(), P(), P("dp"), P("dp")), (P(), P(), P(), P()),
        resnet_step, (P1, S1, ST1, images(B1, HW1, HW1, 3), I(0, K, B1)))

# 10. / 11. ViT step: conv patch embedding, mixup, adamw + cosine + clip.
VIT_OPT = optax.chain(optax.clip_by_global_norm(1.0),
                      optax.adamw(optax.warmup_cosine_decay_schedule(0.0, 1e-3, 2, 40, 1e-5), weight_decay=0.05,
                                  mask=kernel_mask))


def make_vit_step(constrain=None):
    def vit_step(params, opt_state, x, y, lam):
        def loss_fn(p):
            xm = lam * x + (1 - lam) * jnp.flip(x, 0)
            t = lam * jax.nn.one_hot(y, K) + (1 - lam) * jax.nn.one_hot(jnp.flip(y, 0), K)
            return jnp.mean(smooth_ce(vit_apply(p, xm, constrain), t))
        loss, g = jax.value_and_grad(loss_fn)(params)
        updates, opt_state = VIT_OPT.update(g, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss
    return vit_step


PV10 = vit_init(conv_patch=True)
PV10, SV10 = warm(make_vit_step(), PV10, VIT_OPT.init(PV10),
                  [(images(8, IMG, IMG, CH), I(0, K, 8), np.float32(0.6)) for _ in range(2)])


def vit_fsdp_spec(path, w):
    """each parameter sharded over fsdp on its first dim divisible by 8 (replicated if none)."""
    for d, n in enumerate(np.shape(w)):
        if n % 8 == 0 and n >= 8:
            return P(*([None] * d + ["fsdp"]))
    return P()


def gspmd_vit(name, mesh, spec_fn, bspec, act=None):
    ps = tree_specs(PV10, spec_fn)
    ss = state_specs(SV10, ps)
    constrain = None
    if act is not None:
        sh = NamedSharding(make_mesh(mesh), act)
        constrain = lambda h: lax.with_sharding_constraint(h, sh)  # noqa: E731
    C.gspmd(name, mesh, (ps, ss, bspec, bspec, P()), (ps, ss, P()), make_vit_step(constrain),
            (PV10, SV10, images(8, IMG, IMG, CH), I(0, K, 8), np.float32(0.7)))


gspmd_vit("g.vit_conv_patch_mixup_adamw_cosine_clip.fsdp8", {"fsdp": 8}, vit_fsdp_spec, P("fsdp"),
          act=P("fsdp"))
gspmd_vit("g.vit_heads_mlp_columns_tp.dp2xtp4", {"dp": 2, "tp": 4}, vit_tp_spec, P("dp"))

# 12. conv net step with the image rows sharded (dp2 x sp4).
CONV_OPT = optax.sgd(optax.cosine_decay_schedule(0.05, 100), momentum=0.9)


def convnet_loss(p, x, y):
    h = spatial_block_ref(x, p)
    h = jax.nn.relu(conv(h, p["c3"]["w"], 2, PT_PAD) + p["c3"]["b"])
    return jnp.mean(smooth_ce(jnp.mean(h, (1, 2)) @ p["head"]["w"], jax.nn.one_hot(y, K)))


def convnet_step(params, opt_state, x, y):
    loss, g = jax.value_and_grad(convnet_loss)(params, x, y)
    updates, opt_state = CONV_OPT.update(g, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss


P12 = dict(PB2, c3={"w": R(3, 3, CO2, CO2, scale=0.2), "b": R(CO2, scale=0.1)}, head={"w": R(CO2, K, scale=0.3)})
P12, S12 = warm(convnet_step, P12, CONV_OPT.init(P12), [(images(8, H2, W2, CI2), I(0, K, 8)) for _ in range(2)])
C.gspmd("g.convnet_image_rows_sharded_groupnorm_sgd.dp2xsp4", {"dp": 2, "sp": 4},
        (P(), P(), P("dp", "sp"), P("dp")), (P(), P(), P()), convnet_step,
        (P12, S12, images(8, H2, W2, CI2), I(0, K, 8)))

# 13. UNet diffusion step (dp4).
C.gspmd("g.unet_diffusion_minsnr_adam_ema.dp4", {"dp": 4}, (P(), P(), P(), P("dp"), P("dp"), P("dp")),
        (P(), P(), P(), P()), unet_step, (P6, S6, E6) + diffusion_batch(B6))


# 14. ConvNeXt step with cutmix by a box mask and drop path, channels over fsdp (dp2 x fsdp4).
def convnext_cutmix_step(params, opt_state, x, y, keep, box, lam):
    def loss_fn(p):
        xm = box[..., None] * jnp.flip(x, 0) + (1 - box[..., None]) * x
        t = lam * jax.nn.one_hot(y, K) + (1 - lam) * jax.nn.one_hot(jnp.flip(y, 0), K)
        return jnp.mean(smooth_ce(convnext_apply(p, xm, keep), t))
    loss, g = jax.value_and_grad(loss_fn)(params)
    updates, opt_state = CONVNEXT_OPT.update(g, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss


def cutmix_box(B, H, W, h, w):
    m = np.zeros((B, H, W), np.float32)
    r, c = int(rng.integers(0, H - h + 1)), int(rng.integers(0, W - w + 1))
    m[:, r:r + h, c:c + w] = 1.0
    return m, np.float32(1.0 - h * w / (H * W))


def convnext_fsdp_spec(path, w):
    names = [getattr(k, "key", None) for k in path]
    if names[-1] == "w" and np.ndim(w) >= 2:
        return P(*([None] * (np.ndim(w) - 1) + ["fsdp"])) if names[-2] != "head" else P("fsdp", None)
    return P("fsdp") if np.shape(w)[-1] % 4 == 0 and np.ndim(w) == 1 else P()


PS14 = tree_specs(P5, convnext_fsdp_spec)
BOX14, LAM14 = cutmix_box(8, 16, 16, 8, 6)
C.gspmd("g.convnext_cutmix_box_droppath_adamw.dp2xfsdp4", {"dp": 2, "fsdp": 4},
        (PS14, state_specs(S5, PS14), P(("dp", "fsdp")), P(("dp", "fsdp")), P(("dp", "fsdp")), P(("dp", "fsdp")),
         P()), (PS14, state_specs(S5, PS14), P()), convnext_cutmix_step,
        (P5, S5, images(8, 16, 16, 3), I(0, K, 8), keep_mask(8), BOX14, LAM14))

C.finish()
