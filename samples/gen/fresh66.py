"""samples/fresh66: a 66th batch of programs as a user writes them, on the theme of training procedures that evaluate the model more than once per step under data and tensor parallelism in current JAX / optax (sharpness-aware minimisation, adaptive SAM, lookahead slow / fast weights, EMA teachers for BYOL / DINO-style self-distillation, temperature knowledge distillation with a vocabulary-parallel KL, consistency regularisation between two augmented views, gradient centralisation), none of them an idiom of samples/fresh .. fresh26, probe, train or wild.
shard_map families:
 1. SAM under FSDP (fsdp4, check_vma=False): the two weight matrices'
    rows over fsdp, all_gather'd in the loss (so jax.grad reduce-scatters
    their gradients), a replicated bias whose gradient is psum'd by hand,
    the batch over fsdp and the loss a local sum over the global batch
    size; the ascent step rho g / |g| with the global norm psum'd over
    fsdp, the descent gradient at the perturbed weights, plain SGD; returns
    the new parameters and the loss. Bugs: the perturbation normalised by
    the local gradient norm (no psum), the bias gradient not psum'd in the
    ascent.
 2. adaptive SAM (ASAM, elementwise |w| + eta scaling) on a Megatron MLP
    (w1 columns over tp, w2 rows over tp, output bias replicated), batch
    over dp, check_vma=True, loss pmean'd over dp; the norm of T g from the
    tp-sharded leaves psum'd over tp plus the replicated leaf; the descent
    update by optax.adamw (state sharded like the parameters). Bugs: the
    perturbation T g instead of T^2 g, the norm of g instead of T g.
 3. lookahead by hand on replicated weights, batch over dp4: 3 fast SGD-
    with-momentum steps (optax.sgd) in a lax.fori_loop over micro-batches,
    each gradient pmean'd over dp, then slow <- slow + alpha (fast - slow).
    Bugs: the inner gradients not pmean'd, the interpolation reversed
    (fast + alpha (slow - fast)).
 4. a DINO step (dp2 x tp4, check_vma=False): student and teacher heads
    with their prototypes over tp, two views; the teacher's probabilities
    centred and sharpened at TT, the student's log-softmax at TS, both
    softmaxes over the sharded prototype axis by pmax / psum; cross-view
    cross-entropy; the student gradient of the per-device partial loss
    psum'd over dp; SGD; the teacher as an EMA of the new student; the
    centre updated with the global batch mean of the teacher logits
    (psum over dp). Bugs: the centre from the local batch only, the
    student temperature left out (temperature on one side only), the EMA
    decay applied twice.
 5. a BYOL step (dp4 x tp2, check_vma=True): online projection (columns
    over tp) and an elementwise predictor gain, target projection from the
    other view under stop_gradient, the cosine with dot products and norms
    psum'd over tp, the symmetrised loss pmean'd over dp, SGD, then the
    target as an EMA of the new online weights. Bugs: the predictor norm
    from the local tp shard (loss then pmean'd over both axes), the EMA
    decay applied twice.
 6. temperature knowledge distillation over a packed sequence (sp2 x tp4,
    check_vma=False): student logits f32 and teacher logits bf16 (upcast),
    both (batch, seq over sp, vocab over tp); per-token KL(teacher ||
    student) at temperature TK summed over the vocabulary by a psum over
    tp; masked mean over tokens with numerator and count psum'd over sp,
    times TK^2; returns the loss and the per-token KL. Bugs: the KL summed
    over the sequence axis (the local sum along axis 1), the KL psum'd
    over sp instead of tp, the temperature applied to the student only.
 7. UDA-style consistency regularisation (dp2 x tp4, check_vma=False):
    classes over tp; supervised cross-entropy on labelled examples (the
    one-hot at the class offset of the rank) plus a KL between the
    sharpened (temperature TSH) weak-view distribution and the strong
    view, masked where the weak view's global max probability exceeds
    THR; gradient of the per-device partial loss psum'd over dp, SGD.
    Bugs: the confidence from the local classes' max (no pmax), the
    unlabelled mean over the local batch, the label one-hot without the
    class offset.
 8. gradient centralisation (as optax.centralize: the mean over all but
    the leading axis subtracted) on a Megatron MLP (dp2 x tp4,
    check_vma=True): w1 (D, H) columns over tp, so its row means are
    psum'd over tp / H; w2 (H, O) rows over tp, its row means local; the
    bias left alone; optax.sgd with momentum. Bugs: the w1 row mean over
    the local columns, the mean over the leading axis.
 9. a mean teacher under ZeRO-style sharding (dp4): student weights
    replicated, the EMA teacher kept as row shards, all_gather'd and bias-
    corrected by 1 - D^t; CE on view 1 plus the squared distance between
    student and teacher probabilities (views 1 and 2); the gradient
    psum_scatter'd / dp onto the rows, SGD and EMA on the shard, the new
    weights all_gather'd. Bugs: the reduce-scatter not divided by dp, the
    bias correction at step t + 1, the EMA applied twice to the shard.
10. DINO multi-crop (v2 x dp4, check_vma=False): 2 teacher crops, 4 student
    crops, device v holding teacher crop v and student crops 2v, 2v+1;
    teacher probabilities all_gather'd over v; all pairs i != j; the
    centre from a psum over v and dp. Bugs: the centre from the dp psum
    only (the device's own crop), the pair mask at local crop indices.
GSPMD pairs (jax.jit with in/out shardings): 11. the SAM step of 1. with
the parameters and batch over fsdp8; 12. the DINO step of 4. (dp2 x tp4);
13. optax.lookahead around optax.sgd (sync period 2, three steps unrolled)
with the weights over tp; 14. optax.chain(optax.centralize(), adam) on the
MLP of 8. (dp2 x tp4); 15. the BYOL step of 5. (dp4 x tp2);
16. the mean-teacher step of 9. with the teacher rows over dp4; 17. the multi-crop DINO step of 10. (v2 x dp4).
Numerics: see each entry's "numerics" (correct pairs at rounding level,
bug variants clearly off).
Run from the repository root: bash samples/gen/run_fresh66.sh [SUBSTR...]
"""
import sys
import numpy as np
import jax, jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec as P
import optax
sys.path.insert(0, "samples/gen")  # run from the repository root (run_fresh66.sh)
from fresh_lib import Corpus, seeded, state_specs  # noqa: E402

SCRIPT = "samples/gen/fresh66.py"
C = Corpus("samples/fresh66", SCRIPT, "samples/gen/run_fresh66.sh", sys.argv[1:])
rng, R, I = seeded(6666)
psum, pmax, pmean, idx = lax.psum, lax.pmax, lax.pmean, lax.axis_index
sg = lax.stop_gradient
tmap = jax.tree.map

# ---------------------------------------------------------------------------
# 1. SAM under FSDP.
RHO1, LR1, N1 = 0.05, 0.3, 16


def fsdp_net(p, x):
    return jnp.tanh(x @ p["w1"]) @ p["w2"] + p["b"]


def sam_fsdp(p, x, y):
    def loss(p):
        return jnp.sum(jnp.square(fsdp_net(p, x) - y)) / x.shape[0]
    l, g = jax.value_and_grad(loss)(p)
    gn = optax.global_norm(g)
    e = tmap(lambda d: RHO1 * d / (gn + 1e-12), g)
    g2 = jax.grad(loss)(tmap(jnp.add, p, e))
    return tmap(lambda w, d: w - LR1 * d, p, g2), l


def sam_fsdp_sm(bug):
    def f(p, x, y):
        def loss(p):
            full = {"w1": lax.all_gather(p["w1"], "fsdp", tiled=True),
                    "w2": lax.all_gather(p["w2"], "fsdp", tiled=True), "b": p["b"]}
            return jnp.sum(jnp.square(fsdp_net(full, x) - y)) / N1

        def grads(p, reduce_bias=True):
            g = jax.grad(loss)(p)
            if reduce_bias:
                g["b"] = psum(g["b"], "fsdp")
            return g
        g = grads(p, reduce_bias=bug != "ascent-bias-grad-unreduced")
        sq_sh = jnp.sum(g["w1"] ** 2) + jnp.sum(g["w2"] ** 2)
        if bug == "local-grad-norm":
            sq = sq_sh + jnp.sum(g["b"] ** 2)
        else:
            sq = psum(sq_sh, "fsdp") + jnp.sum(g["b"] ** 2)
        scale = RHO1 / (jnp.sqrt(sq) + 1e-12)
        e = tmap(lambda d: scale * d, g)
        g2 = grads(tmap(jnp.add, p, e))
        return tmap(lambda w, d: w - LR1 * d, p, g2), psum(loss(p), "fsdp")
    return f


P1 = {"w1": R(16, 32, scale=0.3), "w2": R(32, 8, scale=0.3), "b": R(8, scale=0.2)}
SP1 = {"w1": P("fsdp"), "w2": P("fsdp"), "b": P()}
C.smap("s.sam_fsdp_allgather_ascent_descent.fsdp4", {"fsdp": 4}, sam_fsdp_sm, (SP1, P("fsdp"), P("fsdp")),
       (SP1, P()), sam_fsdp, (P1, R(N1, 16), R(N1, 8)),
       bugs=[("local-grad-norm", ["missing-all-reduce"]), ("ascent-bias-grad-unreduced", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 2. adaptive SAM on a Megatron MLP, adamw descent.
RHO2, ETA2 = 0.5, 0.01
OPT2 = optax.adamw(3e-2, weight_decay=1e-2)


def mlp2(p, x):
    return jax.nn.gelu(x @ p["w1"]) @ p["w2"] + p["b2"]


def asam(p, s, x, y):
    loss = lambda p: jnp.mean(jnp.square(mlp2(p, x) - y))
    g = jax.grad(loss)(p)
    t = tmap(lambda w: jnp.abs(w) + ETA2, p)
    n = optax.global_norm(tmap(jnp.multiply, t, g))
    e = tmap(lambda ti, d: RHO2 * ti * ti * d / n, t, g)
    g2 = jax.grad(loss)(tmap(jnp.add, p, e))
    u, s = OPT2.update(g2, s, p)
    return optax.apply_updates(p, u), s


def asam_sm(bug):
    def f(p, s, x, y):
        def loss(p):
            out = psum(jnp.einsum("bh,ho->bo", jax.nn.gelu(jnp.einsum("bd,dh->bh", x, p["w1"])), p["w2"]), "tp")
            return pmean(jnp.mean(jnp.square(out + p["b2"] - y)), "dp")
        g = jax.grad(loss)(p)
        t = {k: jnp.abs(w) + ETA2 for k, w in p.items()}
        if bug == "norm-of-g-not-tg":
            tg = g
        else:
            tg = {k: t[k] * g[k] for k in g}
        sq = psum(jnp.sum(tg["w1"] ** 2) + jnp.sum(tg["w2"] ** 2), "tp") + jnp.sum(tg["b2"] ** 2)
        inv = RHO2 * lax.rsqrt(sq)
        if bug == "perturb-t-once":
            e = {k: inv * t[k] * g[k] for k in g}
        else:
            e = {k: inv * t[k] * t[k] * g[k] for k in g}
        g2 = jax.grad(loss)({k: p[k] + e[k] for k in p})
        u, s = OPT2.update(g2, s, p)
        return optax.apply_updates(p, u), s
    return f


P2 = {"w1": R(16, 32, scale=0.4), "w2": R(32, 8, scale=0.3), "b2": R(8, scale=0.5)}
S2 = OPT2.init(P2)
SP2 = {"w1": P(None, "tp"), "w2": P("tp"), "b2": P()}
SS2 = state_specs(S2, SP2)
C.smap("s.asam_elementwise_scale_megatron_adamw.dp2xtp4", {"dp": 2, "tp": 4}, asam_sm,
       (SP2, SS2, P("dp"), P("dp")), (SP2, SS2), asam, (P2, S2, R(8, 16), R(8, 8)), check_vma=True,
       bugs=[("perturb-t-once", ["wrong-scale"]), ("norm-of-g-not-tg", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 3. lookahead by hand: three fast steps, then the slow interpolation.
K3, ALPHA3 = 3, 0.6
OPT3 = optax.sgd(0.1, momentum=0.9)


def net3(p, x):
    h = jax.nn.relu(x @ p["w"] + p["b"])
    return h @ p["v"]


def look_ref(p, mom, xs, ys):
    def loss(q, x, y):
        return jnp.mean(jnp.square(net3(q, x) - y))

    def body(i, c):
        q, st = c
        g = jax.grad(loss)(q, xs[i], ys[i])
        u, st = OPT3.update(g, st, q)
        return optax.apply_updates(q, u), st
    fast, mom = lax.fori_loop(0, K3, body, (p, mom))
    slow = tmap(lambda s_, f_: s_ + ALPHA3 * (f_ - s_), p, fast)
    return slow, mom


def look_sm(bug):
    def f(p, mom, xs, ys):
        def loss(q, x, y):
            return jnp.mean(jnp.square(net3(q, x) - y))

        def body(i, c):
            q, st = c
            g = jax.grad(loss)(q, xs[i], ys[i])
            if bug != "inner-grad-not-pmeaned":
                g = pmean(g, "dp")
            u, st = OPT3.update(g, st, q)
            return optax.apply_updates(q, u), st
        fast, mom = lax.fori_loop(0, K3, body, (p, mom))
        if bug == "interp-reversed":
            slow = tmap(lambda s_, f_: f_ + ALPHA3 * (s_ - f_), p, fast)
        else:
            slow = tmap(lambda s_, f_: s_ + ALPHA3 * (f_ - s_), p, fast)
        return slow, mom
    return f


P3 = {"w": R(12, 24, scale=0.3), "b": R(24, scale=0.1), "v": R(24, 4, scale=0.3)}
M3 = OPT3.init(P3)
C.smap("s.lookahead_fast_fori_slow_interp.dp4", {"dp": 4}, look_sm, (P(), P(), P(None, "dp"), P(None, "dp")),
       (P(), P()), look_ref, (P3, M3, R(K3, 16, 12), R(K3, 16, 4)),
       bugs=[("inner-grad-not-pmeaned", ["missing-all-reduce"]), ("interp-reversed", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 4. DINO step: centring, sharpening, cross-view CE, EMA teacher, centre.
TS4, TT4, LR4, M4, CM4 = 0.5, 0.2, 0.5, 0.9, 0.8
B4, D4, K4 = 8, 12, 32


def dino(ws, wt, c, hs, ht):
    t = jnp.einsum("vbd,dk->vbk", ht, wt)
    pt = sg(jax.nn.softmax((t - c) / TT4, -1))

    def loss(ws):
        lps = jax.nn.log_softmax(jnp.einsum("vbd,dk->vbk", hs, ws) / TS4, -1)
        return -(jnp.sum(pt[0] * lps[1]) + jnp.sum(pt[1] * lps[0])) / (2 * hs.shape[1])
    l, g = jax.value_and_grad(loss)(ws)
    ws2 = ws - LR4 * g
    wt2 = M4 * wt + (1 - M4) * ws2
    c2 = CM4 * c + (1 - CM4) * jnp.mean(t, (0, 1))
    return ws2, wt2, c2, l


def vocab_softmax(z):
    m = pmax(sg(jnp.max(z, -1, keepdims=True)), "tp")
    e = jnp.exp(z - m)
    return e / psum(jnp.sum(e, -1, keepdims=True), "tp")


def vocab_log_softmax(z):
    m = pmax(sg(jnp.max(z, -1, keepdims=True)), "tp")
    return z - m - jnp.log(psum(jnp.sum(jnp.exp(z - m), -1, keepdims=True), "tp"))


def dino_sm(bug):
    def f(ws, wt, c, hs, ht):
        t = jnp.einsum("vbd,dk->vbk", ht, wt)
        pt = sg(vocab_softmax((t - c) / TT4))

        def part(ws):  # this device's share of the loss (its batch rows, its prototypes)
            z = jnp.einsum("vbd,dk->vbk", hs, ws)
            lps = vocab_log_softmax(z if bug == "student-temp-missing" else z / TS4)
            return -(jnp.sum(pt[0] * lps[1]) + jnp.sum(pt[1] * lps[0])) / (2 * B4)
        l, g = jax.value_and_grad(part)(ws)
        ws2 = ws - LR4 * psum(g, "dp")
        wt2 = M4 * wt + (1 - M4) * ws2
        if bug == "ema-twice":
            wt2 = M4 * wt2 + (1 - M4) * ws2
        if bug == "centre-local-batch":
            bm = jnp.mean(t, (0, 1))
        else:
            bm = psum(jnp.sum(t, (0, 1)), "dp") / (2 * B4)
        c2 = CM4 * c + (1 - CM4) * bm
        return ws2, wt2, c2, psum(l, ("dp", "tp"))
    return f


DINO_ARGS = (R(D4, K4, scale=0.5), R(D4, K4, scale=0.5), R(K4, scale=0.3), R(2, B4, D4), R(2, B4, D4))
DINO_SP = (P(None, "tp"), P(None, "tp"), P("tp"), P(None, "dp"), P(None, "dp"))
C.smap("s.dino_centre_sharpen_ema_teacher.dp2xtp4", {"dp": 2, "tp": 4}, dino_sm, DINO_SP,
       (P(None, "tp"), P(None, "tp"), P("tp"), P()), dino, DINO_ARGS,
       bugs=[("centre-local-batch", ["missing-all-reduce"]), ("student-temp-missing", ["wrong-scale"]),
             ("ema-twice", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 5. BYOL step: predictor on the online branch, stop-gradient target, EMA.
LR5, TAU5 = 0.2, 0.95


def byol(wo, q, wt, x1, x2):
    def loss(pr):
        wo, q = pr

        def reg(a, b):
            p = (a @ wo) * q
            z = sg(b @ wt)
            cos = jnp.sum(p * z, -1) / (jnp.linalg.norm(p, axis=-1) * jnp.linalg.norm(z, axis=-1))
            return 2.0 - 2.0 * cos
        return jnp.mean(reg(x1, x2) + reg(x2, x1))
    l, (gw, gq) = jax.value_and_grad(loss)((wo, q))
    wo2, q2 = wo - LR5 * gw, q - LR5 * gq
    return wo2, q2, TAU5 * wt + (1 - TAU5) * wo2, l


def byol_sm(bug):
    def f(wo, q, wt, x1, x2):
        def loss(pr):
            wo, q = pr

            def reg(a, b):
                p = jnp.einsum("bd,de->be", a, wo) * q
                z = sg(jnp.einsum("bd,de->be", b, wt))
                dot = psum(jnp.sum(p * z, -1), "tp")
                pp = jnp.sum(p * p, -1) if bug == "pred-norm-local" else psum(jnp.sum(p * p, -1), "tp")
                zz = psum(jnp.sum(z * z, -1), "tp")
                return 2.0 - 2.0 * dot * lax.rsqrt(pp) * lax.rsqrt(zz)
            per = jnp.mean(reg(x1, x2) + reg(x2, x1))
            return pmean(per, ("dp", "tp")) if bug == "pred-norm-local" else pmean(per, "dp")
        l, (gw, gq) = jax.value_and_grad(loss)((wo, q))
        wo2, q2 = wo - LR5 * gw, q - LR5 * gq
        wt2 = TAU5 * wt + (1 - TAU5) * wo2
        if bug == "ema-twice":
            wt2 = TAU5 * wt2 + (1 - TAU5) * wo2
        return wo2, q2, wt2, l
    return f


BYOL_ARGS = (R(16, 8, scale=0.4), 1.0 + R(8, scale=0.2), R(16, 8, scale=0.4), R(16, 16), R(16, 16))
BYOL_SP = (P(None, "tp"), P("tp"), P(None, "tp"), P("dp"), P("dp"))
C.smap("s.byol_predictor_cosine_ema_target.dp4xtp2", {"dp": 4, "tp": 2}, byol_sm, BYOL_SP,
       (P(None, "tp"), P("tp"), P(None, "tp"), P()), byol, BYOL_ARGS, check_vma=True,
       bugs=[("pred-norm-local", ["missing-all-reduce"]), ("ema-twice", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 6. temperature distillation, sequence over sp, vocabulary over tp.
TK = 2.0
B6, T6, V6 = 2, 8, 16


def kd(sl, tl, mask):
    lps = jax.nn.log_softmax(sl / TK, -1)
    lpt = jax.nn.log_softmax(tl.astype(jnp.float32) / TK, -1)
    kl = jnp.sum(jnp.exp(lpt) * (lpt - lps), -1)
    return TK * TK * jnp.sum(kl * mask) / jnp.sum(mask), kl


def kd_sm(bug):
    def f(sl, tl, mask):
        lps = vocab_log_softmax(sl / TK)
        tz = tl.astype(jnp.float32)
        lpt = vocab_log_softmax(tz if bug == "temp-student-only" else tz / TK)
        term = jnp.exp(lpt) * (lpt - lps)
        if bug == "kl-sum-seq-axis":
            kl = psum(jnp.sum(term, 1), "tp")
        elif bug == "kl-psum-over-sp":
            kl = psum(jnp.sum(term, -1), "sp")
        else:
            kl = psum(jnp.sum(term, -1), "tp")
        num = psum(jnp.sum(kl * mask), "sp")
        den = psum(jnp.sum(mask), "sp")
        return TK * TK * num / den, kl
    return f


MASK6 = (rng.random((B6, T6)) < 0.75).astype(np.float32)
C.smap("s.kd_temp_vocab_kl_masked_tokens.sp2xtp4", {"sp": 2, "tp": 4}, kd_sm,
       (P(None, "sp", "tp"), P(None, "sp", "tp"), P(None, "sp")), (P(), P(None, "sp")), kd,
       (R(B6, T6, V6, scale=2.0), R(B6, T6, V6, scale=2.0, dt=jnp.bfloat16), MASK6),
       bugs=[("kl-sum-seq-axis", ["wrong-axis"]), ("kl-psum-over-sp", ["wrong-collective-group"]),
             ("temp-student-only", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 7. UDA consistency between a weak and a strong view, classes over tp.
TSH, THR, LAM7, LR7 = 0.4, 0.3, 1.0, 0.5
B7, D7, K7 = 8, 12, 16


def uda(p, xl, yl, xw, xs):
    def loss(p):
        lg = xl @ p["w"] + p["b"]
        ce = -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(lg, -1), yl[:, None], -1)[:, 0])
        zw = sg(xw @ p["w"] + p["b"])
        conf = jnp.max(jax.nn.softmax(zw, -1), -1)
        q = jax.nn.softmax(zw / TSH, -1)
        lps = jax.nn.log_softmax(xs @ p["w"] + p["b"], -1)
        kl = jnp.sum(q * (jnp.log(q) - lps), -1)
        return ce + LAM7 * jnp.sum(jnp.where(conf > THR, kl, 0.0)) / xw.shape[0]
    l, g = jax.value_and_grad(loss)(p)
    return tmap(lambda w, d: w - LR7 * d, p, g), l


def uda_sm(bug):
    def f(p, xl, yl, xw, xs):
        kl_ = p["w"].shape[1]

        def part(p):
            lg = xl @ p["w"] + p["b"]
            off = 0 if bug == "label-no-offset" else idx("tp") * kl_
            oh = jax.nn.one_hot(yl - off, kl_)
            ce = -jnp.sum(oh * vocab_log_softmax(lg)) / B7
            zw = sg(xw @ p["w"] + p["b"])
            pw = vocab_softmax(zw)
            conf = jnp.max(pw, -1) if bug == "conf-local-max" else pmax(jnp.max(pw, -1), "tp")
            q = vocab_softmax(zw / TSH)
            lps = vocab_log_softmax(xs @ p["w"] + p["b"])
            kl = jnp.sum(q * (jnp.log(q) - lps), -1)
            nb = xw.shape[0] if bug == "unlab-local-mean" else B7
            return ce + LAM7 * jnp.sum(jnp.where(conf > THR, kl, 0.0)) / nb
        l, g = jax.value_and_grad(part)(p)
        g = psum(g, "dp")
        return tmap(lambda w, d: w - LR7 * d, p, g), psum(l, ("dp", "tp"))
    return f


P7 = {"w": R(D7, K7, scale=0.8), "b": R(K7, scale=0.5)}
SP7 = {"w": P(None, "tp"), "b": P("tp")}
C.smap("s.uda_weak_strong_sharpen_confmask.dp2xtp4", {"dp": 2, "tp": 4}, uda_sm,
       (SP7, P("dp"), P("dp"), P("dp"), P("dp")), (SP7, P()), uda,
       (P7, R(B7, D7), I(0, K7, B7), R(B7, D7, scale=1.5), R(B7, D7, scale=1.5)),
       bugs=[("conf-local-max", ["missing-all-reduce"]), ("unlab-local-mean", ["wrong-scale"]),
             ("label-no-offset", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 8. gradient centralisation (optax.centralize convention) on a Megatron MLP.
OPT8 = optax.sgd(0.1, momentum=0.9)


def gc_center(g):
    return g - jnp.mean(g, tuple(range(1, g.ndim)), keepdims=True) if g.ndim > 1 else g


def gc_step(p, s, x, y):
    g = jax.grad(lambda p: jnp.mean(jnp.square(mlp2(p, x) - y)))(p)
    g = tmap(gc_center, g)
    u, s = OPT8.update(g, s, p)
    return optax.apply_updates(p, u), s


def gc_sm(bug):
    def f(p, s, x, y):
        def loss(p):
            return pmean(jnp.mean(jnp.square(psum(jax.nn.gelu(x @ p["w1"]) @ p["w2"], "tp") + p["b2"] - y)), "dp")
        g = jax.grad(loss)(p)
        h = g["w1"].shape[1] * lax.axis_size("tp")
        if bug == "w1-local-mean":
            m1 = jnp.mean(g["w1"], 1, keepdims=True)
        elif bug == "mean-leading-axis":
            m1 = jnp.mean(g["w1"], 0, keepdims=True)
        else:
            m1 = psum(jnp.sum(g["w1"], 1, keepdims=True), "tp") / h
        g = {"w1": g["w1"] - m1, "w2": g["w2"] - jnp.mean(g["w2"], 1, keepdims=True), "b2": g["b2"]}
        u, s = OPT8.update(g, s, p)
        return optax.apply_updates(p, u), s
    return f


P8 = {"w1": R(16, 32, scale=0.4), "w2": R(32, 8, scale=0.3), "b2": R(8, scale=0.5)}
S8 = OPT8.init(P8)
SS8 = state_specs(S8, SP2)
C.smap("s.grad_centralize_megatron_sgd_momentum.dp2xtp4", {"dp": 2, "tp": 4}, gc_sm,
       (SP2, SS8, P("dp"), P("dp")), (SP2, SS8), gc_step, (P8, S8, R(8, 16), R(8, 8)), check_vma=True,
       bugs=[("w1-local-mean", ["missing-all-reduce"]), ("mean-leading-axis", ["wrong-axis"])])

# ---------------------------------------------------------------------------
# 9. mean teacher under ZeRO-style sharding (dp4): full student weights
#    replicated, the EMA teacher kept as row shards; the teacher all_gather'd
#    and bias-corrected by 1 - D^t; student loss CE on view 1 plus a squared
#    distance between the student's and teacher's probabilities (views 1, 2);
#    the gradient psum_scatter'd / dp onto the row shards, SGD on the shard,
#    EMA on the shard, new weights all_gather'd.
D9, LR9, LAM9 = 0.9, 0.5, 2.0
B9, F9, K9 = 16, 16, 8


def mean_teacher(w, ema, t, x1, x2, y):
    tw = ema / (1.0 - D9 ** t)
    tp = sg(jax.nn.softmax(x2 @ tw, -1))

    def loss(w):
        lg = x1 @ w
        ce = -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(lg, -1), y[:, None], -1))
        return ce + LAM9 * jnp.mean(jnp.sum(jnp.square(jax.nn.softmax(lg, -1) - tp), -1))
    l, g = jax.value_and_grad(loss)(w)
    w2 = w - LR9 * g
    return w2, D9 * ema + (1 - D9) * w2, l


def mean_teacher_sm(bug):
    def f(w, ema, t, x1, x2, y):
        n = lax.axis_size("dp")
        tstep = t + 1.0 if bug == "debias-step-plus-one" else t
        tw = lax.all_gather(ema, "dp", axis=0, tiled=True) / (1.0 - D9 ** tstep)
        tp = sg(jax.nn.softmax(x2 @ tw, -1))

        def loss(w):
            lg = x1 @ w
            ce = -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(lg, -1), y[:, None], -1))
            return ce + LAM9 * jnp.mean(jnp.sum(jnp.square(jax.nn.softmax(lg, -1) - tp), -1))
        l, g = jax.value_and_grad(loss)(w)
        gs = lax.psum_scatter(g, "dp", scatter_dimension=0, tiled=True)
        if bug != "scatter-not-averaged":
            gs = gs / n
        rows = ema.shape[0]
        ws = lax.dynamic_slice_in_dim(w, idx("dp") * rows, rows, 0)
        ws2 = ws - LR9 * gs
        ema2 = D9 * ema + (1 - D9) * ws2
        if bug == "ema-applied-twice":
            ema2 = D9 * ema2 + (1 - D9) * ws2
        return lax.all_gather(ws2, "dp", axis=0, tiled=True), ema2, pmean(l, "dp")
    return f


C.smap("s.mean_teacher_zero_rows_debiased_ema.dp4", {"dp": 4}, mean_teacher_sm,
       (P(), P("dp"), P(), P("dp"), P("dp"), P("dp")), (P(), P("dp"), P()), mean_teacher,
       (R(F9, K9, scale=0.5), R(F9, K9, scale=0.3), np.float32(3.0), R(B9, F9), R(B9, F9), I(0, K9, B9)),
       bugs=[("scatter-not-averaged", ["wrong-scale"]), ("debias-step-plus-one", ["constant-mismatch"]),
             ("ema-applied-twice", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 10. DINO multi-crop: 2 global crops for the teacher, 4 crops for the
#     student, the crops over v2 (device v holds teacher crop v and student
#     crops 2v, 2v+1), batch over dp4; the teacher probabilities all_gather'd
#     over v, every (teacher i, student j) pair with i != j; the centre from
#     the mean over both global crops and the global batch (psum over v and
#     dp); student gradient of the per-device partial loss psum'd over both.
TS10, TT10, CM10, LR10 = 0.3, 0.1, 0.7, 0.5
B10, D10, K10 = 8, 8, 16
NPAIR = 2 * 4 - 2


def dino_mc(ws, wt, c, hg, hs):
    t = jnp.einsum("vbd,dk->vbk", hg, wt)
    pt = sg(jax.nn.softmax((t - c) / TT10, -1))

    def loss(ws):
        ls = jax.nn.log_softmax(jnp.einsum("vbd,dk->vbk", hs, ws) / TS10, -1)
        tot = 0.0
        for i in range(2):
            for j in range(4):
                if i != j:
                    tot = tot - jnp.mean(jnp.sum(pt[i] * ls[j], -1))
        return tot / NPAIR
    l, g = jax.value_and_grad(loss)(ws)
    return ws - LR10 * g, CM10 * c + (1 - CM10) * jnp.mean(t, (0, 1)), l


def dino_mc_sm(bug):
    def f(ws, wt, c, hg, hs):
        t = jnp.einsum("vbd,dk->vbk", hg, wt)
        pt = sg(jax.nn.softmax((t - c) / TT10, -1))
        pt_all = lax.all_gather(pt, "v", axis=0, tiled=True)
        j0 = 0 if bug == "pair-mask-local-index" else 2 * idx("v")

        def part(ws):
            ls = jax.nn.log_softmax(jnp.einsum("vbd,dk->vbk", hs, ws) / TS10, -1)
            tot = 0.0
            for i in range(2):
                for jj in range(2):
                    keep = jnp.where(j0 + jj != i, 1.0, 0.0)
                    tot = tot - keep * jnp.sum(pt_all[i] * ls[jj])
            return tot / (NPAIR * B10)
        l, g = jax.value_and_grad(part)(ws)
        if bug == "centre-over-dp-only":
            bm = psum(jnp.sum(t, (0, 1)), "dp") / B10
        else:
            bm = psum(jnp.sum(t, (0, 1)), ("v", "dp")) / (2 * B10)
        return ws - LR10 * psum(g, ("v", "dp")), CM10 * c + (1 - CM10) * bm, psum(l, ("v", "dp"))
    return f


C.smap("s.dino_multicrop_pairs_over_views.v2xdp4", {"v": 2, "dp": 4}, dino_mc_sm,
       (P(), P(), P(), P("v", "dp"), P("v", "dp")), (P(), P(), P()), dino_mc,
       (R(D10, K10, scale=0.5), R(D10, K10, scale=0.5), R(K10, scale=0.3), R(2, B10, D10), R(4, B10, D10)),
       bugs=[("centre-over-dp-only", ["missing-all-reduce"]), ("pair-mask-local-index", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# GSPMD pairs.
SP9 = {"w1": P("fsdp"), "w2": P("fsdp"), "b": P()}
C.gspmd("g.sam_step_fsdp.fsdp8", {"fsdp": 8}, (SP9, P("fsdp"), P("fsdp")), (SP9, P()), sam_fsdp,
        (P1, R(N1, 16), R(N1, 8)))
C.gspmd("g.dino_step.dp2xtp4", {"dp": 2, "tp": 4}, DINO_SP, (P(None, "tp"), P(None, "tp"), P("tp"), P()), dino,
        DINO_ARGS)

LOOK = optax.lookahead(optax.sgd(0.1), sync_period=2, slow_step_size=0.5)


def look_optax(lp, st, xs, ys):
    for i in range(3):
        g = jax.grad(lambda q: jnp.mean(jnp.square(net3(q, xs[i]) - ys[i])))(lp.fast)
        u, st = LOOK.update(g, st, lp)
        lp = optax.apply_updates(lp, u)
    return lp, st


LP11 = optax.LookaheadParams.init_synced(P3)
ST11 = LOOK.init(LP11)
SPW = {"w": P(None, "tp"), "b": P("tp"), "v": P("tp")}
LPS = optax.LookaheadParams(fast=SPW, slow=SPW)
STS = jax.tree.map(lambda _: P(), ST11)
C.gspmd("g.optax_lookahead_sgd.tp4", {"tp": 4}, (LPS, STS, P(), P()), (LPS, STS), look_optax,
        (LP11, ST11, R(K3, 16, 12), R(K3, 16, 4)))

OPT12 = optax.chain(optax.centralize(), optax.adam(1e-2))


def gc_adam(p, s, x, y):
    g = jax.grad(lambda p: jnp.mean(jnp.square(mlp2(p, x) - y)))(p)
    u, s = OPT12.update(g, s, p)
    return optax.apply_updates(p, u), s


S12 = OPT12.init(P8)
SS12 = state_specs(S12, SP2)
C.gspmd("g.centralize_adam_megatron.dp2xtp4", {"dp": 2, "tp": 4}, (SP2, SS12, P("dp"), P("dp")), (SP2, SS12),
        gc_adam, (P8, S12, R(8, 16), R(8, 8)))
C.gspmd("g.byol_step.dp4xtp2", {"dp": 4, "tp": 2}, BYOL_SP, (P(None, "tp"), P("tp"), P(None, "tp"), P()), byol,
        BYOL_ARGS)

C.gspmd("g.mean_teacher_rows.dp4", {"dp": 4}, (P(), P("dp"), P(), P("dp"), P("dp"), P("dp")), (P(), P("dp"), P()),
        mean_teacher, (R(F9, K9, scale=0.5), R(F9, K9, scale=0.3), np.float32(3.0), R(B9, F9), R(B9, F9),
                       I(0, K9, B9)))
C.gspmd("g.dino_multicrop.v2xdp4", {"v": 2, "dp": 4}, (P(), P(), P(), P("v", "dp"), P("v", "dp")), (P(), P(), P()),
        dino_mc, (R(D10, K10, scale=0.5), R(D10, K10, scale=0.5), R(K10, scale=0.3), R(2, B10, D10), R(4, B10, D10)))

C.finish()
