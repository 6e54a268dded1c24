"""samples/fresh124: a 124th batch of programs as a user writes them, on the theme of whole training steps (forward, loss, jax.value_and_grad, an optax update with its state) of small but realistic models whose backward pass goes through integer / boolean / index paths (embedding lookups by jnp.take and x[ids] with scatter-add gradients, take_along_axis cross-entropy with ignore_index masks, one_hot, top-k MoE routing with capacity by cumsum positions, max-pool (select-and-scatter) and reduce_window avg-pool, cumsum along a sharded sequence, segment_sum over packed sequences, jnp.clip and jnp.where gradients), mostly under GSPMD with MaxText-style logical axis rules, none of them an idiom of samples/fresh .. fresh26, probe, train or wild.
GSPMD pairs (jax.jit with in/out NamedShardings on params, optimizer state
and batch; with_sharding_constraint on activations through logical-axis
rules per mesh; all correct), each model under two or three of the meshes
dp8, fsdp8, tp4, dp2 x tp4, dp2 x fsdp2 x tp2 (params FSDP over fsdp and
Megatron over tp):
 1. lm_take_ce_adamw_mask: one-layer causal decoder, jnp.take embedding,
    GLU MLP, RMSNorm, take_along_axis CE with ignore_index -100, adamw with a
    weight-decay mask (no decay on norms / embedding).
 2. moe_top2_capacity_adafactor: top-2 MoE layer with capacity (one_hot
    masks, cumsum positions over first then second choices, dropped
    tokens), renormalised gates, load-balancing aux loss, adafactor with
    factored second moments (min_dim_size_to_factor lowered).
 3. cnn_maxpool_avgpool_nesterov: conv / relu / reduce_window max-pool
    (select-and-scatter gradient) / conv / reduce_window avg-pool, one_hot
    CE, sgd with Nesterov momentum.
 4. packed_segment_sum_lion_ema: x[ids] embedding, GLU MLP, mean-pooling
    per packed segment by segment_sum with global segment ids, CE with
    ignored (padding / empty) segments, lion, an EMA of the params.
 5. cumsum_seqpar_clip_schedule: causal running-mean token mixer (jnp.cumsum
    along the sequence, which the constraints shard over tp), CE with ignore,
    chain(clip_by_global_norm, inject_hyperparams(adamw) with a
    warmup-cosine schedule on its step counter).
 6. glu_multisteps_accum: RMSNorm GLU classifier, CE by take_along_axis
    with ignored labels, optax.MultiSteps(adamw, 2) entered at mini_step 1
    so the step both accumulates and applies.
 7. ppo_clip_where_adam: PPO policy / value step, x[ids] previous-action
    embedding, clipped ratio surrogate (jnp.clip, jnp.minimum), clipped
    value loss, masked means by jnp.where, entropy, chain(clip, injected
    adam with a linear schedule).
 8. tied_embed_smooth_zloss: tied input / output embedding (x[ids] and
    h @ E.T), label smoothing by one_hot, z-loss, ignore mask, adamw with a
    matrices-only decay mask.
shard_map families (bugs in brackets):
 9. vocab-parallel embedding (dp2 x tp4): ids shifted by the shard offset,
    out-of-range rows masked, psum over tp; gradient by scatter-add
    (.at[rows].add, mode="drop") at local rows, psum over dp; adam.
    [scatter-add at the global ids (only tp shard 0 gets rows); embedding
    gradient not reduced over dp].
10. vocab-parallel CE with ignore_index (dp2 x tp4): pmax / psum
    log-sum-exp, target logit on the owning shard, global valid-token count
    psum'd over dp (dp halves hold very different counts), hand-written
    softmax - one_hot gradient, sgd Nesterov. [token count local; target
    picked at the global label without the shard offset].
11. FSDP step (fsdp8): params all_gather'd (tiled) along dim 0, the local
    loss over local tokens / global valid count, value_and_grad on the
    gathered params, psum_scatter of the gradients back to shards, a
    replicated norm scale psum'd, adamw with mask. [w1's gradient
    psum_scatter'd along dim 1 then reshaped to the shard; the norm scale's
    gradient not reduced].
12. cumsum over a sequence sharded over sp4: local cumsum plus the exclusive
    carry of earlier blocks' totals (all_gather + where), running-mean
    divisor at global positions, autodiff through the all_gather, gradients
    psum'd, injected adamw with a schedule. [inclusive carry; carry from
    later blocks].
13. segment_sum pooling over packed sequences with the time axis over sp4
    (segments cross device boundaries): local segment_sum, psum of sums and
    counts, head loss on the pooled means, jax.vjp of the local part,
    gradient psum'd, chain(clip_by_global_norm, adamw). [segment counts
    local; the pooled part's gradient not psum'd].
14. GShard top-1 MoE (ep4): one group per device, capacity by cumsum
    positions, all_to_all of the dispatched tokens to the expert's device
    and back, autodiff through the all_to_all, router gradient psum'd,
    adam. [router gradient not reduced; loss mean over the local tokens].
Numerics: correct pairs agree at rounding level (f32, about 1e-6 or below
on outputs of order 1; Adam-type updates divide by sqrt(v), still 1e-6);
bug variants differ clearly.
Run from the repository root: bash samples/gen/run_fresh124.sh [SUBSTR...]
"""
import sys
import numpy as np
import jax, jax.numpy as jnp
import optax
from jax import lax
from jax.sharding import NamedSharding, PartitionSpec as P
sys.path.insert(0, "samples/gen")  # run from the repository root (run_fresh124.sh)
from fresh_lib import Corpus, seeded, state_specs, np_tree  # noqa: E402
from scalify_jax._export import make_mesh  # noqa: E402

SCRIPT = "samples/gen/fresh124.py"
C = Corpus("samples/fresh124", SCRIPT, "samples/gen/run_fresh124.sh", sys.argv[1:])
rng, R, I = seeded(124124)
psum, pmax, idx = lax.psum, lax.pmax, lax.axis_index
IGN = -100


def W(*s, scale=None):
    return R(*s, scale=scale if scale is not None else 1.0 / np.sqrt(s[0]))


def with_ignore(lab, frac=0.25):
    lab = lab.copy()
    lab[rng.random(lab.shape) < frac] = IGN
    return lab


def rms(x, g):
    return x * lax.rsqrt(jnp.mean(x * x, -1, keepdims=True) + 1e-6) * g


def masked_ce(logits, labels):
    valid = labels != IGN
    safe = jnp.where(valid, labels, 0)
    logp = jax.nn.log_softmax(logits, -1)
    nll = -jnp.take_along_axis(logp, safe[..., None], -1)[..., 0]
    return jnp.sum(jnp.where(valid, nll, 0.0)) / jnp.maximum(jnp.sum(valid), 1)


# ---------------------------------------------------------------------------
# GSPMD: meshes and MaxText-style logical axis rules.
MESHES = {"dp8": {"dp": 8}, "fsdp8": {"fsdp": 8}, "tp4": {"tp": 4}, "dp2xtp4": {"dp": 2, "tp": 4},
          "dp2xfsdp2xtp2": {"dp": 2, "fsdp": 2, "tp": 2}}


def rules_for(mname, seq=False):
    m = MESHES[mname]
    bt = tuple(a for a in ("dp", "fsdp") if a in m)
    bt = None if not bt else (bt[0] if len(bt) == 1 else bt)
    tp = "tp" if "tp" in m else None
    return {"batch": bt, "embed": "fsdp" if "fsdp" in m else None, "vocab": tp, "mlp": tp, "heads": tp,
            "exp": tp, "act_batch": bt, "act_len": tp if seq else None, "act_embed": None,
            "act_mlp": None if seq else tp, "act_heads": tp, "act_vocab": None if seq else tp, "act_exp": tp}


def pspec(names, r):
    return P(*[r.get(n) if n else None for n in names])


def train_pair(tag, mname, axes, params, opt, make_loss, batch, batch_names, seq=False, ema=False):
    """Exports g.TAG.MESH: one training step of make_loss(c) (c: the
    activation constraint) with opt, entered with the state after one
    step on the same batch (a non-trivial optimizer state)."""
    r = rules_for(mname, seq)
    m = make_mesh(MESHES[mname])

    def c(x, names):
        return lax.with_sharding_constraint(x, NamedSharding(m, pspec(names, r)))
    loss_fn = make_loss(c)

    def step(p, s, *b):
        l, g = jax.value_and_grad(loss_fn)(p, *b)
        u, s = opt.update(g, s, p)
        return optax.apply_updates(p, u), s, l

    def step_ema(p, s, e, *b):
        p, s, l = step(p, s, *b)
        return p, s, jax.tree.map(lambda a, q: 0.99 * a + 0.01 * q, e, p), l
    p1, s1, _ = np_tree(jax.jit(step)(params, opt.init(params), *batch))
    ps = {k: pspec(axes[k], r) for k in params}
    ss = state_specs(s1, ps)
    bs = tuple(pspec(n, r) for n in batch_names)
    if ema:
        C.gspmd("g.%s.%s" % (tag, mname), MESHES[mname], (ps, ss, ps) + bs, (ps, ss, ps, P()), step_ema,
                (p1, s1, np_tree(params)) + tuple(batch))
    else:
        C.gspmd("g.%s.%s" % (tag, mname), MESHES[mname], (ps, ss) + bs, (ps, ss, P()), step, (p1, s1) + tuple(batch))


B, T, D, F, V, H, HD = 8, 8, 16, 32, 32, 4, 4
CAUSAL = np.tril(np.ones((T, T), bool))
IDS = I(0, V, B, T)
LAB = with_ignore(I(0, V, B, T))

# ------------------------------------------------------------ 1. decoder LM
LM_AX = {"embed": ("vocab", "embed"), "ln1": (None,), "wq": ("embed", "heads"), "wk": ("embed", "heads"),
         "wv": ("embed", "heads"), "wo": ("heads", "embed"), "ln2": (None,), "wg": ("embed", "mlp"),
         "wu": ("embed", "mlp"), "wd": ("mlp", "embed"), "lnf": (None,), "head": ("embed", "vocab")}
LM_P = {"embed": R(V, D, scale=0.5), "ln1": 1.0 + R(D, scale=0.1), "wq": W(D, H * HD), "wk": W(D, H * HD),
        "wv": W(D, H * HD), "wo": W(H * HD, D), "ln2": 1.0 + R(D, scale=0.1), "wg": W(D, F), "wu": W(D, F),
        "wd": W(F, D), "lnf": 1.0 + R(D, scale=0.1), "head": W(D, V)}


def lm_loss(c):
    def loss(p, ids, labels):
        x = c(jnp.take(p["embed"], ids, axis=0), ("act_batch", "act_len", "act_embed"))
        h = rms(x, p["ln1"])
        q, k, v = ((h @ p[w]).reshape(B, T, H, HD) for w in ("wq", "wk", "wv"))
        q = c(q, ("act_batch", "act_len", "act_heads", None))
        s = jnp.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(HD)
        a = jax.nn.softmax(jnp.where(CAUSAL, s, -1e9), -1)
        o = jnp.einsum("bhqk,bkhd->bqhd", a, v).reshape(B, T, H * HD)
        x = c(x + o @ p["wo"], ("act_batch", "act_len", "act_embed"))
        h = rms(x, p["ln2"])
        mlp = c(jax.nn.silu(h @ p["wg"]) * (h @ p["wu"]), ("act_batch", "act_len", "act_mlp"))
        x = x + mlp @ p["wd"]
        logits = c(rms(x, p["lnf"]) @ p["head"], ("act_batch", "act_len", "act_vocab"))
        return masked_ce(logits, labels)
    return loss


LM_MASK = {k: k not in ("embed", "ln1", "ln2", "lnf") for k in LM_P}
for mn in ("dp2xtp4", "dp2xfsdp2xtp2", "fsdp8"):
    train_pair("lm_take_ce_adamw_mask", mn, LM_AX, LM_P, optax.adamw(1e-2, weight_decay=0.1, mask=LM_MASK),
               lm_loss, (IDS, LAB), (("batch", None), ("batch", None)))

# ------------------------------------------------------------ 2. top-2 MoE with capacity
E2, K2, N2 = 4, 2, B * T
CAP2 = int(0.75 * N2 * K2 / E2)   # 24 < the busiest expert's load: tokens are dropped
MOE_AX = {"embed": ("vocab", "embed"), "router": ("embed", None), "w_in": ("exp", "embed", None),
          "w_out": ("exp", None, "embed"), "ln": (None,), "head": ("embed", "vocab")}
MOE_P = {"embed": R(V, D, scale=0.5), "router": W(D, E2, scale=1.0), "w_in": W(E2, D, F, scale=0.25),
         "w_out": W(E2, F, D, scale=0.2), "ln": 1.0 + R(D, scale=0.1), "head": W(D, V)}


def moe_loss(c):
    def loss(p, ids, labels):
        x = c(jnp.take(p["embed"], ids, axis=0), ("act_batch", "act_len", "act_embed"))
        xt = rms(x, p["ln"]).reshape(N2, D)
        probs = jax.nn.softmax(xt @ p["router"], -1)
        topv, topi = lax.top_k(probs, K2)                               # (N, K)
        mask = jax.nn.one_hot(topi, E2, dtype=jnp.int32)                # (N, K, E)
        pos = jnp.cumsum(mask.transpose(1, 0, 2).reshape(K2 * N2, E2), 0) - 1
        pos = pos.reshape(K2, N2, E2).transpose(1, 0, 2)
        keep = (pos < CAP2) & (mask > 0)
        slot = jnp.sum(pos * mask, -1)                                  # (N, K)
        kept = jnp.any(keep, -1)
        gates = jnp.where(kept, topv, 0.0)
        gates = gates / (jnp.sum(gates, -1, keepdims=True) + 1e-9)
        sel = keep.astype(jnp.float32)[..., None] * jax.nn.one_hot(slot, CAP2)[:, :, None, :]  # (N,K,E,C)
        disp = jnp.sum(sel, 1)
        comb = jnp.einsum("nk,nkec->nec", gates, sel)
        xin = c(jnp.einsum("nec,nd->ecd", disp, xt), ("act_exp", None, "act_embed"))
        hid = jax.nn.gelu(jnp.einsum("ecd,edf->ecf", xin, p["w_in"]))
        y = c(jnp.einsum("ecf,efd->ecd", hid, p["w_out"]), ("act_exp", None, "act_embed"))
        x = x + jnp.einsum("nec,ecd->nd", comb, y).reshape(B, T, D)
        aux = E2 * jnp.sum(jnp.mean(mask[:, 0].astype(jnp.float32), 0) * jnp.mean(probs, 0))
        logits = c(x @ p["head"], ("act_batch", "act_len", "act_vocab"))
        return masked_ce(logits, labels) + 0.01 * aux
    return loss


for mn in ("dp2xtp4", "dp8", "dp2xfsdp2xtp2"):
    train_pair("moe_top2_capacity_adafactor", mn, MOE_AX, MOE_P,
               optax.adafactor(learning_rate=1e-2, min_dim_size_to_factor=8), moe_loss, (IDS, LAB),
               (("batch", None), ("batch", None)))

# ------------------------------------------------------------ 3. CNN with max / avg pools
CNN_AX = {"c1": (None, None, None, "mlp"), "b1": ("mlp",), "c2": (None, None, "mlp", None), "b2": (None,),
          "fc": (None, None), "bf": (None,)}
CNN_P = {"c1": W(3, 3, 3, 16, scale=0.3), "b1": R(16, scale=0.1), "c2": W(3, 3, 16, 16, scale=0.1),
         "b2": R(16, scale=0.1), "fc": W(16, 10, scale=0.3), "bf": np.zeros(10, np.float32)}
DN = ("NHWC", "HWIO", "NHWC")


def cnn_loss(c):
    def loss(p, x, y):
        h = lax.conv_general_dilated(x, p["c1"], (1, 1), "SAME", dimension_numbers=DN) + p["b1"]
        h = c(jax.nn.relu(h), ("act_batch", None, None, "act_mlp"))
        h = lax.reduce_window(h, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")
        h = jax.nn.relu(lax.conv_general_dilated(h, p["c2"], (1, 1), "SAME", dimension_numbers=DN) + p["b2"])
        h = lax.reduce_window(h, 0.0, lax.add, (1, 2, 2, 1), (1, 2, 2, 1), "VALID") / 4.0
        logits = jnp.mean(h, (1, 2)) @ p["fc"] + p["bf"]
        return -jnp.mean(jnp.sum(jax.nn.one_hot(y, 10) * jax.nn.log_softmax(logits), -1))
    return loss


IMG, YIMG = R(16, 8, 8, 3), I(0, 10, 16)
for mn in ("dp8", "dp2xtp4"):
    train_pair("cnn_maxpool_avgpool_nesterov", mn, CNN_AX, CNN_P, optax.sgd(0.05, momentum=0.9, nesterov=True),
               cnn_loss, (IMG, YIMG), (("batch", None, None, None), ("batch",)))

# ------------------------------------------------------------ 4. packed segments, segment_sum, lion + EMA
S4G, NC4 = 4, 6
SEG4 = np.zeros((B, T), np.int32)
for b in range(B):
    cuts = np.sort(rng.choice(np.arange(1, T), 2, replace=False))
    pad = int(rng.integers(0, 3))
    SEG4[b] = np.concatenate([np.full(cuts[0], 1), np.full(cuts[1] - cuts[0], 2), np.full(T - cuts[1], 3)])
    if pad:
        SEG4[b, T - pad:] = 0
SEGLAB4 = I(0, NC4, B * S4G)
SEGLAB4[np.arange(B) * S4G] = IGN       # segment 0 is padding
for b in range(B):
    for s in range(1, S4G):
        if not (SEG4[b] == s).any():
            SEGLAB4[b * S4G + s] = IGN
SEG_AX = {"embed": ("vocab", "embed"), "ln": (None,), "wg": ("embed", "mlp"), "wu": ("embed", "mlp"),
          "wd": ("mlp", "embed"), "cls": ("embed", None)}
SEG_P = {"embed": R(V, D, scale=0.5), "ln": 1.0 + R(D, scale=0.1), "wg": W(D, F), "wu": W(D, F), "wd": W(F, D),
         "cls": W(D, NC4, scale=1.0)}


def seg_loss(c):
    def loss(p, ids, seg, lab):
        x = c(p["embed"][ids], ("act_batch", "act_len", "act_embed"))
        h = rms(x, p["ln"])
        x = x + c(jax.nn.silu(h @ p["wg"]) * (h @ p["wu"]), ("act_batch", "act_len", "act_mlp")) @ p["wd"]
        gid = (jnp.arange(B)[:, None] * S4G + seg).reshape(-1)
        sums = jax.ops.segment_sum(x.reshape(-1, D), gid, B * S4G)
        cnt = jax.ops.segment_sum(jnp.ones(B * T), gid, B * S4G)
        pooled = sums / jnp.maximum(cnt, 1.0)[:, None]
        return masked_ce(pooled @ p["cls"], lab)
    return loss


for mn in ("fsdp8", "dp2xfsdp2xtp2"):
    train_pair("packed_segment_sum_lion_ema", mn, SEG_AX, SEG_P, optax.lion(3e-3, weight_decay=0.01), seg_loss,
               (IDS, SEG4, SEGLAB4), (("batch", None), ("batch", None), (None,)), ema=True)

# ------------------------------------------------------------ 5. cumsum token mixer, sequence parallel
CUM_AX = {"embed": ("vocab", "embed"), "ln": (None,), "w1": ("embed", "mlp"), "w2": ("mlp", "embed"),
          "lnf": (None,), "head": ("embed", "vocab")}
CUM_P = {"embed": R(V, D, scale=0.5), "ln": 1.0 + R(D, scale=0.1), "w1": W(D, F), "w2": W(F, D),
         "lnf": 1.0 + R(D, scale=0.1), "head": W(D, V)}
SCHED5 = optax.warmup_cosine_decay_schedule(0.0, 1e-2, 2, 20)


def cum_loss(c):
    def loss(p, ids, labels):
        x = c(jnp.take(p["embed"], ids, axis=0), ("act_batch", "act_len", "act_embed"))
        u = rms(x, p["ln"]) @ p["w1"]
        cs = c(jnp.cumsum(u, axis=1), ("act_batch", "act_len", None)) / jnp.arange(1, T + 1)[None, :, None]
        x = c(x + jax.nn.gelu(cs) @ p["w2"], ("act_batch", "act_len", "act_embed"))
        logits = c(rms(x, p["lnf"]) @ p["head"], ("act_batch", "act_len", "act_vocab"))
        return masked_ce(logits, labels)
    return loss


OPT5 = optax.chain(optax.clip_by_global_norm(0.5),
                   optax.inject_hyperparams(optax.adamw)(learning_rate=SCHED5, weight_decay=0.05))
for mn in ("dp2xtp4", "tp4"):
    train_pair("cumsum_seqpar_clip_schedule", mn, CUM_AX, CUM_P, OPT5, cum_loss, (IDS, LAB),
               (("batch", None), ("batch", None)), seq=True)

# ------------------------------------------------------------ 6. GLU classifier, MultiSteps
DIN6, NC6 = 16, 8
GLU_AX = {"ln": (None,), "wg": ("embed", "mlp"), "wu": ("embed", "mlp"), "wd": ("mlp", "embed"),
          "lnf": (None,), "head": ("embed", None), "bh": (None,)}
GLU_P = {"ln": 1.0 + R(DIN6, scale=0.1), "wg": W(DIN6, F), "wu": W(DIN6, F), "wd": W(F, DIN6),
         "lnf": 1.0 + R(DIN6, scale=0.1), "head": W(DIN6, NC6), "bh": np.zeros(NC6, np.float32)}


def glu_loss(c):
    def loss(p, x, y):
        h = rms(x, p["ln"])
        m = c(jax.nn.silu(h @ p["wg"]) * (h @ p["wu"]), ("act_batch", "act_mlp"))
        x = c(x + m @ p["wd"], ("act_batch", "act_embed"))
        return masked_ce(rms(x, p["lnf"]) @ p["head"] + p["bh"], y)
    return loss


X6 = R(16, DIN6)
Y6 = with_ignore(I(0, NC6, 16), 0.2)
for mn in ("dp2xfsdp2xtp2", "dp8", "fsdp8"):
    train_pair("glu_multisteps_accum", mn, GLU_AX, GLU_P,
               optax.MultiSteps(optax.adamw(1e-2, weight_decay=0.01), every_k_schedule=2), glu_loss, (X6, Y6),
               (("batch", "act_embed"), ("batch",)))

# ------------------------------------------------------------ 7. PPO step
DO7, A7 = 8, 8
PPO_AX = {"aemb": (None, "embed"), "w1": ("embed", "mlp"), "b1": ("mlp",), "wpi": ("mlp", None),
          "wv": ("mlp", None)}
PPO_P = {"aemb": R(A7, DO7, scale=0.5), "w1": W(DO7, F), "b1": R(F, scale=0.1), "wpi": W(F, A7),
         "wv": W(F, 1)}


def ppo_forward(p, obs, prev, c=lambda x, n: x):
    h = c(jnp.tanh((obs + p["aemb"][prev]) @ p["w1"] + p["b1"]), ("act_batch", None, "act_mlp"))
    h = jnp.clip(h, -0.9, 0.9)
    return h @ p["wpi"], (h @ p["wv"])[..., 0]


OBS7, PREV7, ACT7 = R(B, T, DO7), I(0, A7, B, T), I(0, A7, B, T)
_l0, _v0 = jax.jit(ppo_forward)(PPO_P, OBS7, PREV7)
OLDLP7 = np.asarray(jnp.take_along_axis(jax.nn.log_softmax(_l0), ACT7[..., None], -1)[..., 0]) + R(B, T, scale=0.3)
OLDV7 = np.asarray(_v0) + R(B, T, scale=0.3)
ADV7, RET7 = R(B, T), R(B, T)
MASK7 = rng.random((B, T)) > 0.2


def ppo_loss(c):
    def loss(p, obs, prev, act, oldlp, oldv, adv, ret, mask):
        logits, v = ppo_forward(p, obs, prev, c)
        logp_all = jax.nn.log_softmax(logits)
        lp = jnp.take_along_axis(logp_all, act[..., None], -1)[..., 0]
        ratio = jnp.exp(lp - oldlp)
        surr = jnp.minimum(ratio * adv, jnp.clip(ratio, 0.8, 1.2) * adv)
        vclip = oldv + jnp.clip(v - oldv, -0.2, 0.2)
        vl = jnp.maximum(jnp.square(v - ret), jnp.square(vclip - ret))
        ent = -jnp.sum(jnp.exp(logp_all) * logp_all, -1)
        n = jnp.maximum(jnp.sum(mask), 1)
        mm = lambda t: jnp.sum(jnp.where(mask, t, 0.0)) / n
        return -mm(surr) + 0.5 * mm(vl) - 0.01 * mm(ent)
    return loss


OPT7 = optax.chain(optax.clip_by_global_norm(1.0),
                   optax.inject_hyperparams(optax.adam)(learning_rate=optax.linear_schedule(3e-3, 0.0, 50)))
for mn in ("dp8", "tp4"):
    train_pair("ppo_clip_where_adam", mn, PPO_AX, PPO_P, OPT7, ppo_loss,
               (OBS7, PREV7, ACT7, OLDLP7, OLDV7, ADV7, RET7, MASK7),
               (("batch", None, None),) + (("batch", None),) * 7)

# ------------------------------------------------------------ 8. tied embedding, smoothing, z-loss
TIE_AX = {"embed": ("vocab", "embed"), "ln": (None,), "wg": ("embed", "mlp"), "wu": ("embed", "mlp"),
          "wd": ("mlp", "embed"), "lnf": (None,)}
TIE_P = {"embed": R(V, D, scale=0.5), "ln": 1.0 + R(D, scale=0.1), "wg": W(D, F), "wu": W(D, F), "wd": W(F, D),
         "lnf": 1.0 + R(D, scale=0.1)}
EPS8 = 0.1


def tie_loss(c):
    def loss(p, ids, labels):
        x = c(p["embed"][ids] * np.sqrt(D), ("act_batch", "act_len", "act_embed"))
        h = rms(x, p["ln"])
        x = x + c(jax.nn.gelu(h @ p["wg"]) * (h @ p["wu"]), ("act_batch", "act_len", "act_mlp")) @ p["wd"]
        logits = c(rms(x, p["lnf"]) @ p["embed"].T, ("act_batch", "act_len", "act_vocab"))
        valid = labels != IGN
        tgt = jax.nn.one_hot(jnp.where(valid, labels, 0), V) * (1 - EPS8) + EPS8 / V
        lse = jax.nn.logsumexp(logits, -1)
        tok = -jnp.sum(tgt * (logits - lse[..., None]), -1) + 1e-3 * jnp.square(lse)
        return jnp.sum(jnp.where(valid, tok, 0.0)) / jnp.maximum(jnp.sum(valid), 1)
    return loss


TIE_MASK = {k: v.ndim > 1 for k, v in TIE_P.items()}
for mn in ("tp4", "dp2xtp4"):
    train_pair("tied_embed_smooth_zloss", mn, TIE_AX, TIE_P, optax.adamw(1e-2, weight_decay=0.1, mask=TIE_MASK),
               tie_loss, (IDS, LAB), (("batch", None), ("batch", None)))


# ===========================================================================
# shard_map families.
def opt_step(opt, p, s, g):
    u, s = opt.update(g, s, p)
    return optax.apply_updates(p, u), s


# ------------------------------------------------------------ 9. vocab-parallel embedding gradient
NC9 = 8
SPEC9 = {"embed": P("tp", None), "w": P()}
P9 = {"embed": R(V, D, scale=0.5), "w": W(D, NC9)}
OPT9 = optax.adam(1e-2)
S9 = np_tree(OPT9.init(P9))
IDS9 = I(0, V, B, T)
Y9 = R(B, T, NC9)


def emb9_loss(p, ids, y):
    out = p["embed"][ids] @ p["w"]
    return jnp.mean(jnp.sum(jnp.square(out - y), -1))


def emb9_ref(p, s, ids, y):
    l, g = jax.value_and_grad(emb9_loss)(p, ids, y)
    return opt_step(OPT9, p, s, g) + (l,)


def emb9_sm(bug):
    def f(p, s, ids, y):
        vl = p["embed"].shape[0]
        loc = ids - idx("tp") * vl
        inr = (loc >= 0) & (loc < vl)
        e = psum(jnp.where(inr[..., None], p["embed"][jnp.clip(loc, 0, vl - 1)], 0.0), "tp")
        r = e @ p["w"] - y
        n = B * T
        loss = psum(jnp.sum(jnp.square(r)), "dp") / n
        dout = 2.0 * r / n
        gw = psum(jnp.einsum("btd,btc->dc", e, dout), "dp")
        de = dout @ p["w"].T
        if bug == "global-row-ids":
            rows = jnp.where(inr, ids, vl)
        else:
            rows = jnp.where(inr, loc, vl)
        ge = jnp.zeros_like(p["embed"]).at[rows].add(de, mode="drop")
        if bug != "no-dp-reduce":
            ge = psum(ge, "dp")
        return opt_step(OPT9, p, s, {"embed": ge, "w": gw}) + (loss,)
    return f


C.smap("s.vocab_parallel_embed_scatter_grad.dp2xtp4", {"dp": 2, "tp": 4}, emb9_sm,
       (SPEC9, state_specs(S9, SPEC9), P("dp"), P("dp")), (SPEC9, state_specs(S9, SPEC9), P()), emb9_ref,
       (P9, S9, IDS9, Y9),
       bugs=[("global-row-ids", ["wrong-offset"]), ("no-dp-reduce", ["missing-collective"])])

# ------------------------------------------------------------ 10. vocab-parallel CE, global token count
SPEC10 = {"head": P(None, "tp")}
P10 = {"head": W(D, V)}
OPT10 = optax.sgd(0.5, momentum=0.9, nesterov=True)
S10 = np_tree(OPT10.init(P10))
H10 = R(B, T, D)
LAB10 = I(0, V, B, T)
LAB10[:4][rng.random((4, T)) < 0.7] = IGN     # dp shard 0: few valid tokens
LAB10[4:][rng.random((4, T)) < 0.1] = IGN


def ce10_loss(p, h, labels):
    return masked_ce(h @ p["head"], labels)


def ce10_ref(p, s, h, labels):
    l, (gp, gh) = jax.value_and_grad(ce10_loss, argnums=(0, 1))(p, h, labels)
    return opt_step(OPT10, p, s, gp) + (l, gh)


def ce10_sm(bug):
    def f(p, s, h, labels):
        w = p["head"]
        vl = w.shape[1]
        logits = h @ w
        m = pmax(lax.stop_gradient(jnp.max(logits, -1)), "tp")
        lse = jnp.log(psum(jnp.sum(jnp.exp(logits - m[..., None]), -1), "tp")) + m
        valid = labels != IGN
        loc = labels if bug == "target-no-offset" else labels - idx("tp") * vl
        inr = (loc >= 0) & (loc < vl) & valid
        picked = jnp.take_along_axis(logits, jnp.clip(loc, 0, vl - 1)[..., None], -1)[..., 0]
        tgt = psum(jnp.where(inr, picked, 0.0), "tp")
        cnt = jnp.sum(valid) if bug == "local-count" else psum(jnp.sum(valid), "dp")
        cnt = jnp.maximum(cnt, 1).astype(jnp.float32)
        loss = psum(jnp.sum(jnp.where(valid, lse - tgt, 0.0)), "dp") / cnt
        prob = jnp.exp(logits - lse[..., None])
        onehot = jax.nn.one_hot(jnp.where(inr, loc, -1), vl)
        dlog = (prob - onehot) * (valid[..., None] / cnt)
        gw = psum(jnp.einsum("btd,btv->dv", h, dlog), "dp")
        gh = psum(jnp.einsum("btv,dv->btd", dlog, w), "tp")
        return opt_step(OPT10, p, s, {"head": gw}) + (loss, gh)
    return f


C.smap("s.vocab_parallel_ce_ignore_global_count.dp2xtp4", {"dp": 2, "tp": 4}, ce10_sm,
       (SPEC10, state_specs(S10, SPEC10), P("dp"), P("dp")), (SPEC10, state_specs(S10, SPEC10), P(), P("dp")),
       ce10_ref, (P10, S10, H10, LAB10),
       bugs=[("local-count", ["wrong-denominator"]), ("target-no-offset", ["wrong-offset"])])

# ------------------------------------------------------------ 11. FSDP all_gather / psum_scatter step
SPEC11 = {"embed": P("fsdp"), "w1": P("fsdp"), "w2": P("fsdp"), "g": P(), "head": P("fsdp")}
P11 = {"embed": R(V, D, scale=0.5), "w1": W(D, F), "w2": W(F, D), "g": 1.0 + R(D, scale=0.1), "head": W(D, V)}
OPT11 = optax.adamw(3e-3, weight_decay=0.1, mask={"embed": False, "w1": True, "w2": True, "g": False, "head": True})
S11 = np_tree(OPT11.init(P11))
IDS11, LAB11 = I(0, V, B, T), with_ignore(I(0, V, B, T), 0.3)


def fsdp11_loss(p, ids, labels):
    x = p["embed"][ids]
    x = x + jax.nn.gelu(rms(x, p["g"]) @ p["w1"]) @ p["w2"]
    return masked_ce(x @ p["head"], labels)


def fsdp11_ref(p, s, ids, labels):
    l, g = jax.value_and_grad(fsdp11_loss)(p, ids, labels)
    return opt_step(OPT11, p, s, g) + (l,)


def fsdp11_sm(bug):
    def f(p, s, ids, labels):
        full = {k: v if k == "g" else lax.all_gather(v, "fsdp", axis=0, tiled=True) for k, v in p.items()}
        valid = labels != IGN
        cnt = jnp.maximum(psum(jnp.sum(valid), "fsdp"), 1).astype(jnp.float32)

        def local(q):
            x = q["embed"][ids]
            x = x + jax.nn.gelu(rms(x, q["g"]) @ q["w1"]) @ q["w2"]
            logp = jax.nn.log_softmax(x @ q["head"], -1)
            nll = -jnp.take_along_axis(logp, jnp.where(valid, labels, 0)[..., None], -1)[..., 0]
            return jnp.sum(jnp.where(valid, nll, 0.0)) / cnt
        l, g = jax.value_and_grad(local)(full)
        gs = {}
        for k, t in g.items():
            if k == "g":
                gs[k] = t if bug == "norm-grad-not-reduced" else psum(t, "fsdp")
            elif k == "w1" and bug == "scatter-dim1":
                gs[k] = lax.psum_scatter(t, "fsdp", scatter_dimension=1, tiled=True).reshape(p[k].shape)
            else:
                gs[k] = lax.psum_scatter(t, "fsdp", scatter_dimension=0, tiled=True)
        return opt_step(OPT11, p, s, gs) + (psum(l, "fsdp"),)
    return f


C.smap("s.fsdp_allgather_psum_scatter_adamw.fsdp8", {"fsdp": 8}, fsdp11_sm,
       (SPEC11, state_specs(S11, SPEC11), P("fsdp"), P("fsdp")), (SPEC11, state_specs(S11, SPEC11), P()),
       fsdp11_ref, (P11, S11, IDS11, LAB11),
       bugs=[("scatter-dim1", ["wrong-dimension"]), ("norm-grad-not-reduced", ["missing-collective"])])

# ------------------------------------------------------------ 12. cumsum over a sequence sharded over sp
B12, T12, D12, F12, N12 = 2, 16, 8, 16, 4
SPEC12 = {"w1": P(), "w2": P()}
P12 = {"w1": W(D12, F12), "w2": W(F12, D12)}
OPT12 = optax.inject_hyperparams(optax.adamw)(learning_rate=optax.warmup_cosine_decay_schedule(0.0, 1e-2, 2, 10),
                                              weight_decay=0.01)
S12 = np_tree(OPT12.init(P12))
X12, Y12 = R(B12, T12, D12), R(B12, T12, D12)


def cum12_loss(p, x, y):
    cs = jnp.cumsum(x @ p["w1"], axis=1) / jnp.arange(1, T12 + 1)[None, :, None]
    return jnp.mean(jnp.square(jnp.tanh(cs) @ p["w2"] - y))


def cum12_ref(p, s, x, y):
    l, g = jax.value_and_grad(cum12_loss)(p, x, y)
    return opt_step(OPT12, p, s, g) + (l,)


def cum12_sm(bug):
    def f(p, s, x, y):
        me, tl = idx("sp"), x.shape[1]
        if bug == "inclusive-carry":
            sel = jnp.arange(N12) <= me
        elif bug == "carry-from-later":
            sel = jnp.arange(N12) > me
        else:
            sel = jnp.arange(N12) < me

        def local(q):
            u = x @ q["w1"]
            tots = lax.all_gather(jnp.sum(u, 1), "sp")                       # (n, B, F)
            carry = jnp.sum(jnp.where(sel[:, None, None], tots, 0.0), 0)
            pos = (me * tl + jnp.arange(1, tl + 1)).astype(jnp.float32)
            cs = (jnp.cumsum(u, 1) + carry[:, None, :]) / pos[None, :, None]
            return jnp.sum(jnp.square(jnp.tanh(cs) @ q["w2"] - y)) / (B12 * T12 * D12)
        l, g = jax.value_and_grad(local)(p)
        g = jax.tree.map(lambda t: psum(t, "sp"), g)
        return opt_step(OPT12, p, s, g) + (psum(l, "sp"),)
    return f


C.smap("s.cumsum_sp_exclusive_carry_allgather.sp4", {"sp": N12}, cum12_sm,
       (SPEC12, state_specs(S12, SPEC12), P(None, "sp"), P(None, "sp")), (SPEC12, state_specs(S12, SPEC12), P()),
       cum12_ref, (P12, S12, X12, Y12),
       bugs=[("inclusive-carry", ["wrong-offset"]), ("carry-from-later", ["wrong-direction"])])

# ------------------------------------------------------------ 13. segment_sum pooling, time over sp
B13, T13, D13, F13, S13, NC13 = 2, 16, 8, 16, 4, 4
SEG13 = np.array([[1] * 6 + [2] * 7 + [3] * 2 + [0] * 1,
                  [1] * 3 + [2] * 10 + [0] * 3], np.int32)   # row 1: segment 3 empty
LAB13 = I(0, NC13, B13 * S13)
LAB13[[0, 4, 7]] = IGN
SPEC13 = {"w1": P(), "w2": P()}
P13 = {"w1": W(D13, F13), "w2": W(F13, NC13, scale=1.0)}
OPT13 = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(1e-2, weight_decay=0.01))
S13S = np_tree(OPT13.init(P13))
X13 = R(B13, T13, D13)


def seg13_loss(p, x, seg, lab):
    h = jnp.tanh(x @ p["w1"])
    gid = (jnp.arange(B13)[:, None] * S13 + seg).reshape(-1)
    sums = jax.ops.segment_sum(h.reshape(-1, F13), gid, B13 * S13)
    cnt = jax.ops.segment_sum(jnp.ones(gid.shape), gid, B13 * S13)
    return masked_ce(sums / jnp.maximum(cnt, 1.0)[:, None] @ p["w2"], lab)


def seg13_ref(p, s, x, seg, lab):
    l, g = jax.value_and_grad(seg13_loss)(p, x, seg, lab)
    return opt_step(OPT13, p, s, g) + (l,)


def seg13_sm(bug):
    def f(p, s, x, seg, lab):
        gid = (jnp.arange(B13)[:, None] * S13 + seg).reshape(-1)

        def part(w1):
            h = jnp.tanh(x @ w1)
            return jax.ops.segment_sum(h.reshape(-1, F13), gid, B13 * S13)
        sums_loc, vjp = jax.vjp(part, p["w1"])
        sums = psum(sums_loc, "sp")
        cnt = jax.ops.segment_sum(jnp.ones(gid.shape), gid, B13 * S13)
        if bug != "local-count":
            cnt = psum(cnt, "sp")

        def head(sm, w2):
            return masked_ce(sm / jnp.maximum(cnt, 1.0)[:, None] @ w2, lab)
        l, (gsum, gw2) = jax.value_and_grad(head, argnums=(0, 1))(sums, p["w2"])
        (gw1,) = vjp(gsum)
        if bug != "no-grad-psum":
            gw1 = psum(gw1, "sp")
        return opt_step(OPT13, p, s, {"w1": gw1, "w2": gw2}) + (l,)
    return f


C.smap("s.segment_sum_packed_sp_vjp.sp4", {"sp": 4}, seg13_sm,
       (SPEC13, state_specs(S13S, SPEC13), P(None, "sp"), P(None, "sp"), P()),
       (SPEC13, state_specs(S13S, SPEC13), P()), seg13_ref, (P13, S13S, X13, SEG13, LAB13),
       bugs=[("local-count", ["wrong-denominator"]), ("no-grad-psum", ["missing-collective"])])

# ------------------------------------------------------------ 14. GShard top-1 MoE over ep4
G14, S14, D14, F14, E14, CAP14 = 4, 8, 8, 16, 4, 3
SPEC14 = {"router": P(), "w_in": P("ep"), "w_out": P("ep")}
P14 = {"router": W(D14, E14, scale=1.5), "w_in": W(E14, D14, F14, scale=0.35), "w_out": W(E14, F14, D14, scale=0.25)}
OPT14 = optax.adam(1e-2)
S14S = np_tree(OPT14.init(P14))
X14, Y14 = R(G14, S14, D14), R(G14, S14, D14)


def route14(xg, router):
    probs = jax.nn.softmax(xg @ router, -1)
    e = jnp.argmax(probs, -1)
    gate = jnp.max(probs, -1)
    mask = jax.nn.one_hot(e, E14, dtype=jnp.int32)            # (S, E)
    pos = jnp.cumsum(mask, 0) - 1
    keep = (pos < CAP14) & (mask > 0)
    slot = jnp.sum(pos * mask, -1)
    disp = keep.astype(jnp.float32)[..., None] * jax.nn.one_hot(slot, CAP14)[:, None, :]   # (S, E, C)
    return disp, gate


def moe14_loss(p, x, y):
    disp, gate = jax.vmap(route14, (0, None))(x, p["router"])
    xin = jnp.einsum("gsec,gsd->gecd", disp, x)
    hid = jax.nn.gelu(jnp.einsum("gecd,edf->gecf", xin, p["w_in"]))
    yo = jnp.einsum("gecf,efd->gecd", hid, p["w_out"])
    out = jnp.einsum("gsec,gecd->gsd", disp, yo) * gate[..., None]
    return jnp.mean(jnp.square(out + x - y))


def moe14_ref(p, s, x, y):
    l, g = jax.value_and_grad(moe14_loss)(p, x, y)
    return opt_step(OPT14, p, s, g) + (l,)


def moe14_sm(bug):
    def f(p, s, x, y):
        xg, yg = x[0], y[0]
        denom = S14 * D14 if bug == "local-mean" else G14 * S14 * D14

        def local(q):
            disp, gate = route14(xg, q["router"])
            xin = jnp.einsum("sec,sd->ecd", disp, xg)                               # (E, C, D)
            xr = lax.all_to_all(xin, "ep", 0, 0, tiled=True)                        # (G, C, D) for my expert
            hid = jax.nn.gelu(jnp.einsum("gcd,df->gcf", xr, q["w_in"][0]))
            yo = jnp.einsum("gcf,fd->gcd", hid, q["w_out"][0])
            yb = lax.all_to_all(yo, "ep", 0, 0, tiled=True)                         # (E, C, D) for my group
            out = jnp.einsum("sec,ecd->sd", disp, yb) * gate[:, None]
            return jnp.sum(jnp.square(out + xg - yg)) / denom
        l, g = jax.value_and_grad(local)(p)
        if bug != "router-grad-not-reduced":
            g["router"] = psum(g["router"], "ep")
        return opt_step(OPT14, p, s, g) + (psum(l, "ep"),)
    return f


C.smap("s.gshard_top1_capacity_all_to_all.ep4", {"ep": 4}, moe14_sm,
       (SPEC14, state_specs(S14S, SPEC14), P("ep"), P("ep")), (SPEC14, state_specs(S14S, SPEC14), P()),
       moe14_ref, (P14, S14S, X14, Y14),
       bugs=[("router-grad-not-reduced", ["missing-collective"]), ("local-mean", ["wrong-denominator"])])

C.known_miss("s.vocab_parallel_embed_scatter_grad.dp2xtp4.bug.global-row-ids",
             "the bug scatters at the global ids with mode='drop', so on tp shards 1..3 every row id is out of bounds "
             "and dropped; the witness reads a difference where the distributed program indexes out of bounds more "
             "than the baseline as inputs outside the programs' domain (undecided), and the rules do not relate the "
             "scatter's index arithmetic")
C.finish()
