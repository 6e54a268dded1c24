"""samples/fresh53: a 53rd batch of programs as a user writes them, on the theme of switching layouts inside one program (resharding between layers) in current JAX, none of them an idiom of samples/fresh .. fresh26, probe, train or wild.
shard_map families:
 1. Ulysses-style attention on sp4: the sequence-sharded q, k, v (16 heads)
    moved to head sharding by a tiled all_to_all (split heads, concat
    sequence), causal attention over the full sequence on 4 local heads,
    moved back (split sequence, concat heads), heads merged head-major and
    projected. Bugs: the way back with split and concat axes swapped (the
    result reshaped to the expected shape), heads merged head_dim-major.
 2. batch -> hidden -> batch on a 1-D x4 mesh: RMSNorm of each row on the
    batch shard, a tiled all_to_all to feature sharding, a batch
    standardisation of each feature over the whole batch with the gain
    sliced at the device's feature offset, a row-parallel matmul with the
    weight rows over x and psum_scatter back to batch sharding. Bugs:
    all_to_all with split and concat swapped (reshaped), gain sliced at
    offset 0.
 3. Megatron sequence-parallel attention (dp2 x tp4): the sequence
    all_gather'd over tp, column-parallel q/k/v split into heads, causal
    attention on local heads, heads merged, row-parallel output projection
    reduce-scattered by a non-tiled psum_scatter over a (b, tp, s/tp, d)
    view. Bugs: heads split head_dim-major, psum_scatter along the batch dim
    (the local batch equals tp, so shapes agree), psum then the block of the
    dp index (the wrong device's block).
 4. mesh transpose between blocks on dp2 x r2 x c2: block 1 under
    P(dp, r, c) (a bias per column over c), the activation moved to
    P(dp, c, r) by all_gather over r and c and a dynamic_slice of this
    device's block, block 2 with row / column scales sharded the transposed
    way. Bugs: the slice at (r, c) instead of (c, r), rows gathered over c
    and columns over r.
 5. weight-stationary 2-layer MLP on r2 x c4: x columns over r, W1 under
    P(r, c), hidden psum'd over r (hidden now over c), W2 under P(c, r),
    output psum'd over c (output columns over r: the mesh roles swap between
    the layers). Bugs: the second psum over r, the first psum missing.
 6. activation-stationary layer on r4 x c2: x stays under P(r, c), the
    weight under P(c, r) gathered over r non-tiled and merged to full rows,
    partial products reduce-scattered over c along the feature dim,
    residual. Bugs: the gathered blocks merged in the wrong order (no
    moveaxis), psum then a dynamic_slice at the r index (wrong block).
 7. batch x seq merges on dp2 x sp4: the local tokens merged seq-major for
    a token-wise matmul and split back the same way, the sequence gathered
    non-tiled and merged as (b, device, s) into whole rows, a causal running
    mean, and this device's sequence block sliced out. Bugs: the gathered
    tokens merged device-major (no transpose), the block sliced at the dp
    index.
 8. a training step (jax.grad inside the body, plain SGD) on x4: a hidden
    layer on the batch shard, all_to_all to feature sharding, a batch
    standardisation with per-feature gains, all_to_all back, a readout;
    the local loss differentiated and the gradients psum'd. Bugs: the
    gradients pmean'd, the way back with split and concat swapped.
 9. as 8. without the per-feature gain (a plain standardisation of each
    feature over the batch), SGD at lr 0.1. Bugs: gradients not psum'd,
    the way there with split and concat swapped. 9b: the same step with
    the gain switched off in the config while the parameter tree still
    holds it (zero gradient, left unchanged). Bug: gradients not psum'd.
10. a training step with optax.sgd (Nesterov momentum) on dp2 x tp4:
    RMSNorm on the sequence shard, all_gather of the sequence over tp,
    column / row-parallel MLP, psum_scatter back along the sequence,
    residual, MSE; the gradients of the tp-sharded weights psum'd over dp,
    the replicated gain's over (dp, tp). Bugs: the gain's gradient psum'd
    over dp only, the weight gradients not psum'd.
GSPMD pairs (jax.jit with in/out shardings, with_sharding_constraint inside):
11. an MLP whose activations are constrained batch-sharded -> hidden-sharded
    -> batch-sharded between layers (dp2 x tp4); 12. Ulysses attention with
    q/k/v constrained from sequence to head sharding and the output back;
    13. three matmul blocks on r2 x c4 with the activation constrained to
    P(r, c), P(c, r), P(r, c) (the mesh transposed between blocks);
    14. a training step (jax.grad + optax.adamw) with the activations
    constrained batch -> hidden -> batch; 15. batch x seq merged into
    tokens constrained over (dp, sp), heads split and constrained over tp,
    then merged back; 16. the weight-stationary MLP of 5. with the hidden
    constrained over c.
Numerics: see "numerics" of the manifest.
Run from the repository root: bash samples/gen/run_fresh53.sh [SUBSTR...]
(only the pairs whose name contains a SUBSTR; the others keep their entries).
"""
import sys
import numpy as np
import jax, jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec as P, NamedSharding
import optax
sys.path.insert(0, "samples/gen")  # run from the repository root (run_fresh53.sh)
from fresh_lib import Corpus, seeded, state_specs  # noqa: E402
from scalify_jax import make_mesh  # noqa: E402

SCRIPT = "samples/gen/fresh53.py"
C = Corpus("samples/fresh53", SCRIPT, "samples/gen/run_fresh53.sh", sys.argv[1:])
rng, R, I = seeded(5353)
psum, pmean, idx = lax.psum, lax.pmean, lax.axis_index


def causal_attn(q, k, v):
    """q, k, v (b, s, h, e), causal over s."""
    s = jnp.einsum("bqhe,bkhe->bhqk", q, k) / np.sqrt(q.shape[-1])
    n = q.shape[1]
    s = jnp.where(jnp.tril(jnp.ones((n, n), bool)), s, -1e30)
    return jnp.einsum("bhqk,bkhe->bqhe", jax.nn.softmax(s, -1), v)


def rms(x, eps=1e-6):
    return x * lax.rsqrt(jnp.mean(x * x, -1, keepdims=True) + eps)


# ---------------------------------------------------------------------------
# 1. Ulysses attention, sp4, 16 heads of 4
B1, S1, D1, H1, E1 = 2, 16, 16, 16, 4


def ulysses_ref(x, wq, wk, wv, wo):
    b, s, _ = x.shape
    q, k, v = ((x @ w).reshape(b, s, H1, E1) for w in (wq, wk, wv))
    o = causal_attn(q, k, v)
    return o.reshape(b, s, H1 * E1) @ wo


def ulysses(bug):
    def f(x, wq, wk, wv, wo):
        b, sl, _ = x.shape
        to_heads = lambda t: lax.all_to_all(t, "sp", split_axis=2, concat_axis=1, tiled=True)
        q, k, v = (to_heads((x @ w).reshape(b, sl, H1, E1)) for w in (wq, wk, wv))
        o = causal_attn(q, k, v)                       # (b, s, h/4, e)
        if bug == "back-split-concat-swapped":
            o = lax.all_to_all(o, "sp", split_axis=2, concat_axis=1, tiled=True).reshape(b, sl, H1, E1)
        else:
            o = lax.all_to_all(o, "sp", split_axis=1, concat_axis=2, tiled=True)
        if bug == "merge-head-dim-major":
            o = jnp.swapaxes(o, 2, 3)
        return o.reshape(b, sl, H1 * E1) @ wo
    return f


C.smap("s.ulysses_seq_to_heads_a2a_and_back.sp4", {"sp": 4}, ulysses, (P(None, "sp"), P(), P(), P(), P()),
       P(None, "sp"), ulysses_ref,
       (R(B1, S1, D1), R(D1, H1 * E1, scale=0.3), R(D1, H1 * E1, scale=0.3), R(D1, H1 * E1, scale=0.3),
        R(H1 * E1, D1, scale=0.2)),
       bugs=[("back-split-concat-swapped", ["wrong-shard-dim"]), ("merge-head-dim-major", ["wrong-reshape-order"])])


# ---------------------------------------------------------------------------
# 2. batch -> hidden -> batch on x4
def bn_cols(h, g, eps=1e-5):
    mu = jnp.mean(h, 0, keepdims=True)
    var = jnp.mean(jnp.square(h - mu), 0, keepdims=True)
    return (h - mu) * lax.rsqrt(var + eps) * g


def b2h_ref(x, g, w):
    return bn_cols(rms(x), g) @ w


def b2h(bug):
    def f(x, g, w):
        n = 4
        bl, d = x.shape
        h = rms(x)
        if bug == "a2a-split-concat-swapped":
            h = lax.all_to_all(h, "x", split_axis=0, concat_axis=1, tiled=True).reshape(bl * n, d // n)
        else:
            h = lax.all_to_all(h, "x", split_axis=1, concat_axis=0, tiled=True)   # (B, D/4)
        off = 0 if bug == "gain-offset-zero" else idx("x") * (d // n)
        h = bn_cols(h, lax.dynamic_slice_in_dim(g, off, d // n))
        return lax.psum_scatter(h @ w, "x", scatter_dimension=0, tiled=True)
    return f


C.smap("s.batch_to_hidden_a2a_batchstat_rowparallel_scatter.x4", {"x": 4}, b2h, (P("x"), P(), P("x")), P("x"),
       b2h_ref, (R(16, 16), 1.0 + R(16, scale=0.5), R(16, 8, scale=0.4)),
       bugs=[("a2a-split-concat-swapped", ["wrong-shard-dim"]), ("gain-offset-zero", ["wrong-offset"])])


# ---------------------------------------------------------------------------
# 3. Megatron SP attention, dp2 x tp4, heads over tp; output reduce-scattered
#    over the sequence by a non-tiled psum_scatter of a (b, tp, s/tp, d) view
H3, E3 = 8, 4


def sp_attn_ref(x, wq, wk, wv, wo):
    b, s, _ = x.shape
    q, k, v = ((x @ w).reshape(b, s, H3, E3) for w in (wq, wk, wv))
    return x + causal_attn(q, k, v).reshape(b, s, H3 * E3) @ wo


def sp_attn(bug):
    def f(x, wq, wk, wv, wo):
        n = 4
        xf = lax.all_gather(x, "tp", axis=1, tiled=True)     # (b, s, d)
        b, s, d = xf.shape
        hl = H3 // n

        def heads(t):
            if bug == "split-head-dim-major":
                return t.reshape(b, s, E3, hl).swapaxes(2, 3)
            return t.reshape(b, s, hl, E3)
        q, k, v = (heads(xf @ w) for w in (wq, wk, wv))
        part = causal_attn(q, k, v).reshape(b, s, hl * E3) @ wo   # partial over tp
        if bug == "psum-then-dp-block":
            y = lax.dynamic_slice_in_dim(psum(part, "tp"), idx("dp") * (s // n), s // n, 1)
        elif bug == "scatter-batch-dim":
            y = lax.psum_scatter(part.reshape(b, n, s // n, d), "tp", scatter_dimension=0)
        else:
            y = lax.psum_scatter(part.reshape(b, n, s // n, d), "tp", scatter_dimension=1)
        return x + y
    return f


C.smap("s.megatron_sp_attention_nontiled_scatter.dp2xtp4", {"dp": 2, "tp": 4}, sp_attn,
       (P("dp", "tp"), P(None, "tp"), P(None, "tp"), P(None, "tp"), P("tp", None)), P("dp", "tp"), sp_attn_ref,
       (R(8, 8, 16), R(16, H3 * E3, scale=0.3), R(16, H3 * E3, scale=0.3), R(16, H3 * E3, scale=0.3),
        R(H3 * E3, 16, scale=0.2)),
       bugs=[("split-head-dim-major", ["wrong-reshape-order"]), ("scatter-batch-dim", ["wrong-shard-dim"]),
             ("psum-then-dp-block", ["wrong-offset"])])


# ---------------------------------------------------------------------------
# 4. mesh transpose between blocks, dp2 x r2 x c2
def mt_ref(x, bias, rs, cs):
    y = jax.nn.gelu(x + bias)
    return y * rs[:, None] * cs[None, :]


def mesh_transpose(bug):
    def f(x, bias, rs, cs):
        y = jax.nn.gelu(x + bias)                        # (1, m/2, n/2) block (r, c)
        _, mb, nb = y.shape
        if bug == "gather-axes-swapped":
            full = lax.all_gather(lax.all_gather(y, "c", axis=1, tiled=True), "r", axis=2, tiled=True)
        else:
            full = lax.all_gather(lax.all_gather(y, "r", axis=1, tiled=True), "c", axis=2, tiled=True)
        if bug == "slice-own-block":
            i, j = idx("r"), idx("c")
        else:
            i, j = idx("c"), idx("r")
        z = lax.dynamic_slice(full, (0, i * mb, j * nb), (1, mb, nb))    # block (c, r)
        return z * rs[:, None] * cs[None, :]
    return f


C.smap("s.mesh_transpose_gather_slice_between_blocks.dp2xr2xc2", {"dp": 2, "r": 2, "c": 2}, mesh_transpose,
       (P("dp", "r", "c"), P("c"), P("c"), P("r")), P("dp", "c", "r"), mt_ref,
       (R(2, 8, 8), R(8), 1.0 + R(8, scale=0.5), 1.0 + R(8, scale=0.5)),
       bugs=[("slice-own-block", ["wrong-offset"]), ("gather-axes-swapped", ["wrong-collective-group"])])


# ---------------------------------------------------------------------------
# 5. weight-stationary 2-layer MLP, r2 x c4
def ws_ref(x, w1, w2):
    return jax.nn.gelu(x @ w1) @ w2


def weight_stationary(bug):
    def f(x, w1, w2):
        h = jnp.dot(x, w1)
        if bug != "first-psum-missing":
            h = psum(h, "r")                                  # hidden cols over c
        y = jnp.dot(jax.nn.gelu(h), w2)
        return psum(y, "r" if bug == "second-psum-over-r" else "c")   # out cols over r
    return f


C.smap("s.weight_stationary_mlp_roles_swap.r2xc4", {"r": 2, "c": 4}, weight_stationary,
       (P(None, "r"), P("r", "c"), P("c", "r")), P(None, "r"), ws_ref,
       (R(8, 16), R(16, 32, scale=0.3), R(32, 16, scale=0.3)),
       bugs=[("second-psum-over-r", ["wrong-collective-group"]), ("first-psum-missing", ["missing-all-reduce"])])


# ---------------------------------------------------------------------------
# 6. activation-stationary layer, r4 x c2
def as_ref(x, w):
    return x + jax.nn.relu(x @ w)


def act_stationary(bug):
    def f(x, w):
        g = lax.all_gather(w, "r", axis=0)                    # (4, d/2, f/4)
        if bug != "gathered-merge-no-moveaxis":
            g = jnp.moveaxis(g, 0, 1)                          # (d/2, 4, f/4)
        wrow = g.reshape(w.shape[0], -1)                       # (d/2, f)
        part = x @ wrow
        if bug == "psum-then-r-block":
            y = lax.dynamic_slice_in_dim(psum(part, "c"), idx("r") * x.shape[1], x.shape[1], 1)
        else:
            y = lax.psum_scatter(part, "c", scatter_dimension=1, tiled=True)
        return x + jax.nn.relu(y)
    return f


C.smap("s.activation_stationary_gather_weight_scatter.r4xc2", {"r": 4, "c": 2}, act_stationary,
       (P("r", "c"), P("c", "r")), P("r", "c"), as_ref, (R(16, 8), R(8, 8, scale=0.5)),
       bugs=[("gathered-merge-no-moveaxis", ["wrong-reshape-order"]), ("psum-then-r-block", ["wrong-offset"])])


# ---------------------------------------------------------------------------
# 7. batch x seq merges, dp2 x sp4
def running_mean(h):
    return jnp.cumsum(h, 1) / jnp.arange(1, h.shape[1] + 1, dtype=h.dtype)[None, :, None]


def bs_ref(x, w):
    b, s, d = x.shape
    t = jnp.tanh(x.reshape(b * s, d) @ w).reshape(b, s, d)
    return running_mean(t)


def batch_seq_merge(bug):
    def f(x, w):
        n = 4
        b, sl, d = x.shape
        tok = jnp.swapaxes(x, 0, 1).reshape(sl * b, d)          # seq-major merge
        t = jnp.swapaxes(jnp.tanh(tok @ w).reshape(sl, b, d), 0, 1)
        g = lax.all_gather(t.reshape(b * sl, d), "sp", axis=0)  # (n, b*sl, d)
        g = g.reshape(n, b, sl, d)
        if bug != "gathered-merged-device-major":
            g = jnp.swapaxes(g, 0, 1)                           # (b, n, sl, d)
        rows = g.reshape(b, n * sl, d)
        m = running_mean(rows)
        blk = idx("dp") if bug == "slice-dp-block" else idx("sp")
        return lax.dynamic_slice_in_dim(m, blk * sl, sl, 1)
    return f


C.smap("s.batch_seq_merge_tokens_gather_rows.dp2xsp4", {"dp": 2, "sp": 4}, batch_seq_merge,
       (P("dp", "sp"), P()), P("dp", "sp"), bs_ref, (R(4, 16, 8), R(8, 8, scale=0.5)),
       bugs=[("gathered-merged-device-major", ["wrong-reshape-order"]), ("slice-dp-block", ["wrong-offset"])])


# ---------------------------------------------------------------------------
# 8. training step, x4, all_to_all there and back, jax.grad in the body, SGD
LR8 = 0.1


def fwd8(p, x, to_feat=lambda h: h, from_feat=lambda h: h, gain=lambda g: g):
    h = jnp.tanh(x @ p["w1"])
    h = from_feat(bn_cols(to_feat(h), gain(p["g"])))
    return jax.nn.relu(h) @ p["w2"]


def step8_ref(p, x, y):
    def loss(p):
        return jnp.mean(jnp.square(fwd8(p, x, ) - y))
    l, g = jax.value_and_grad(loss)(p)
    return jax.tree.map(lambda a, b: a - LR8 * b, p, g), l


def step8(bug):
    def f(p, x, y):
        n, bl = 4, x.shape[0]
        fl = p["w1"].shape[1] // n

        def back(h):
            if bug == "back-split-concat-swapped":
                return lax.all_to_all(h, "x", split_axis=1, concat_axis=0, tiled=True).reshape(bl, fl * n)
            return lax.all_to_all(h, "x", split_axis=0, concat_axis=1, tiled=True)

        def loss(p):
            out = fwd8(p, x, lambda h: lax.all_to_all(h, "x", split_axis=1, concat_axis=0, tiled=True), back,
                       lambda g: lax.dynamic_slice_in_dim(g, idx("x") * fl, fl))
            return jnp.sum(jnp.square(out - y)) / (n * y.size)
        l, g = jax.value_and_grad(loss)(p)
        g = pmean(g, "x") if bug == "grads-pmeaned" else psum(g, "x")
        return jax.tree.map(lambda a, b: a - LR8 * b, p, g), psum(l, "x")
    return f


P8 = {"w1": R(8, 16, scale=0.4), "g": 1.0 + R(16, scale=0.3), "w2": R(16, 4, scale=0.3)}
C.smap("s.train_step_a2a_feature_batchnorm_sgd.x4", {"x": 4}, step8, ({"w1": P(), "g": P(), "w2": P()}, P("x"), P("x")),
       ({"w1": P(), "g": P(), "w2": P()}, P()), step8_ref, (P8, R(16, 8), R(16, 4)),
       bugs=[("grads-pmeaned", ["wrong-scale"]), ("back-split-concat-swapped", ["wrong-shard-dim"])])


# ---------------------------------------------------------------------------
# 9. as 8. without the per-feature gain (a plain standardisation), the
#     readout's gradient and the hidden layer's psum'd, SGD at lr 0.1
def fwd10(p, x, to_feat=lambda h: h, from_feat=lambda h: h):
    return jax.nn.relu(from_feat(bn_cols(to_feat(jnp.tanh(x @ p["w1"])), 1.0))) @ p["w2"]


def step10_ref(p, x, y):
    l, g = jax.value_and_grad(lambda p: jnp.mean(jnp.square(fwd10(p, x) - y)))(p)
    return jax.tree.map(lambda a, b: a - LR8 * b, p, g), l


def step10(bug):
    def f(p, x, y):
        n, bl = 4, x.shape[0]

        def there(h):
            if bug == "there-split-concat-swapped":
                return lax.all_to_all(h, "x", split_axis=0, concat_axis=1, tiled=True).reshape(bl * n, -1)
            return lax.all_to_all(h, "x", split_axis=1, concat_axis=0, tiled=True)

        def loss(p):
            out = fwd10(p, x, there, lambda h: lax.all_to_all(h, "x", split_axis=0, concat_axis=1, tiled=True))
            return jnp.sum(jnp.square(out - y)) / (n * y.size)
        l, g = jax.value_and_grad(loss)(p)
        if bug != "grads-not-psummed":
            g = psum(g, "x")
        return jax.tree.map(lambda a, b: a - LR8 * b, p, g), psum(l, "x")
    return f


P10 = {"w1": R(8, 16, scale=0.4), "w2": R(16, 4, scale=0.3)}
C.smap("s.train_step_a2a_standardise_nogain_sgd.x4", {"x": 4}, step10, ({"w1": P(), "w2": P()}, P("x"), P("x")),
       ({"w1": P(), "w2": P()}, P()), step10_ref, (P10, R(16, 8), R(16, 4)),
       bugs=[("grads-not-psummed", ["missing-all-reduce"]), ("there-split-concat-swapped", ["wrong-shard-dim"])])

# 9b. the same step with the model's config switching the gain off
#     (use_gain=False) while the parameter tree still holds "g": its
#     gradient is zero and SGD leaves it as it was.
P10b = {"w1": P10["w1"], "g": 1.0 + R(16, scale=0.3), "w2": P10["w2"]}
C.smap("s.train_step_a2a_standardise_gain_switched_off_sgd.x4", {"x": 4}, step10,
       ({"w1": P(), "g": P(), "w2": P()}, P("x"), P("x")), ({"w1": P(), "g": P(), "w2": P()}, P()), step10_ref,
       (P10b, R(16, 8), R(16, 4)), bugs=[("grads-not-psummed", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 10. training step with optax.sgd(nesterov), dp2 x tp4, sequence parallel MLP
OPT9 = optax.sgd(0.05, momentum=0.9, nesterov=True)
SPEC9 = {"g": P(), "w1": P(None, "tp"), "w2": P("tp", None)}


def fwd9(p, x, gather=lambda h: h, scatter=lambda h: h):
    h = gather(rms(x) * p["g"])
    return x + scatter(jax.nn.gelu(h @ p["w1"]) @ p["w2"])


def step9_ref(p, s, x, y):
    def loss(p):
        return jnp.mean(jnp.square(fwd9(p, x) - y))
    l, g = jax.value_and_grad(loss)(p)
    u, s = OPT9.update(g, s, p)
    return optax.apply_updates(p, u), s, l


def step9(bug):
    def f(p, s, x, y):
        def loss(p):
            out = fwd9(p, x, lambda h: lax.all_gather(h, "tp", axis=1, tiled=True),
                       lambda h: lax.psum_scatter(h, "tp", scatter_dimension=1, tiled=True))
            return jnp.sum(jnp.square(out - y)) / (8 * y.size)
        l, g = jax.value_and_grad(loss)(p)
        g = dict(g)
        g["g"] = psum(g["g"], "dp" if bug == "gain-grad-psum-dp-only" else ("dp", "tp"))
        if bug != "weight-grads-not-psummed":
            g["w1"], g["w2"] = psum(g["w1"], "dp"), psum(g["w2"], "dp")
        u, s = OPT9.update(g, s, p)
        return optax.apply_updates(p, u), s, psum(l, ("dp", "tp"))
    return f


P9 = {"g": 1.0 + R(8, scale=0.3), "w1": R(8, 16, scale=0.4), "w2": R(16, 8, scale=0.3)}
S9 = OPT9.init(P9)
S9 = jax.tree.map(lambda a: a + 0.1 * jnp.asarray(R(*a.shape)) if a.ndim else a, S9)   # a warm momentum
SS9 = state_specs(S9, SPEC9)
C.smap("s.train_step_sp_mlp_optax_nesterov.dp2xtp4", {"dp": 2, "tp": 4}, step9, (SPEC9, SS9, P("dp", "tp"), P("dp", "tp")),
       (SPEC9, SS9, P()), step9_ref, (P9, S9, R(4, 8, 8), R(4, 8, 8)),
       bugs=[("gain-grad-psum-dp-only", ["missing-all-reduce"]), ("weight-grads-not-psummed", ["missing-all-reduce"])])


# ---------------------------------------------------------------------------
# GSPMD pairs
M10 = make_mesh({"dp": 2, "tp": 4})


def cons(m, x, *spec):
    return lax.with_sharding_constraint(x, NamedSharding(m, P(*spec)))


def mlp_reshard(x, w1, w2, w3):
    h = cons(M10, rms(x), ("dp", "tp"), None)           # batch over all 8
    h = cons(M10, jax.nn.gelu(h @ w1), "dp", "tp")      # hidden over tp
    h = cons(M10, bn_cols(h, 1.0), None, "tp")          # whole batch per feature
    h = cons(M10, h @ w2, ("dp", "tp"), None)           # back to batch
    return rms(h) @ w3


C.gspmd("g.mlp_batch_hidden_batch_constraints.dp2xtp4", {"dp": 2, "tp": 4}, (P(("dp", "tp")), P(), P(), P()),
        P(("dp", "tp")), mlp_reshard, (R(16, 8), R(8, 16, scale=0.4), R(16, 8, scale=0.3), R(8, 8, scale=0.3)))

M11 = make_mesh({"sp": 4})


def ulysses_gspmd(x, wq, wk, wv, wo):
    b, s, _ = x.shape
    x = cons(M11, x, None, "sp")
    q, k, v = (cons(M11, (x @ w).reshape(b, s, H1, E1), None, "sp") for w in (wq, wk, wv))
    q, k, v = (cons(M11, t, None, None, "sp") for t in (q, k, v))
    o = cons(M11, causal_attn(q, k, v), None, None, "sp")
    o = cons(M11, o, None, "sp")
    return o.reshape(b, s, H1 * E1) @ wo


C.gspmd("g.ulysses_constraints_seq_heads_seq.sp4", {"sp": 4}, (P(None, "sp"), P(), P(), P(), P()), P(None, "sp"),
        ulysses_gspmd, (R(B1, S1, D1), R(D1, H1 * E1, scale=0.3), R(D1, H1 * E1, scale=0.3),
                        R(D1, H1 * E1, scale=0.3), R(H1 * E1, D1, scale=0.2)))

M12 = make_mesh({"r": 2, "c": 4})


def transposed_blocks(x, a, b, c):
    h = cons(M12, jnp.tanh(x @ a), "r", "c")
    h = cons(M12, jnp.tanh(h @ b), "c", "r")
    return cons(M12, h @ c + h, "r", "c")


C.gspmd("g.mesh_transposed_between_blocks.r2xc4", {"r": 2, "c": 4}, (P("r", "c"), P("c", "r"), P("r", "c"), P("c", "r")),
        P("r", "c"), transposed_blocks, (R(8, 8), R(8, 8, scale=0.4), R(8, 8, scale=0.4), R(8, 8, scale=0.4)))

OPT13 = optax.adamw(1e-2, weight_decay=0.05)
SPEC13 = {"w1": P(None, "tp"), "g": P("tp"), "w2": P("tp", None)}


def step13(p, s, x, y):
    def loss(p):
        h = cons(M10, jnp.tanh(x @ p["w1"]), ("dp", "tp"), None)
        h = cons(M10, bn_cols(cons(M10, h, None, "tp"), p["g"]), None, "tp")
        h = cons(M10, jax.nn.relu(h), ("dp", "tp"), None)
        return jnp.mean(jnp.square(h @ p["w2"] - y))
    l, g = jax.value_and_grad(loss)(p)
    u, s = OPT13.update(g, s, p)
    return optax.apply_updates(p, u), s, l


P13 = {"w1": R(8, 16, scale=0.4), "g": 1.0 + R(16, scale=0.3), "w2": R(16, 4, scale=0.3)}
S13 = OPT13.init(P13)
SS13 = state_specs(S13, SPEC13)
C.gspmd("g.train_step_batch_hidden_constraints_adamw.dp2xtp4", {"dp": 2, "tp": 4},
        (SPEC13, SS13, P(("dp", "tp")), P(("dp", "tp"))), (SPEC13, SS13, P()), step13,
        (P13, S13, R(16, 8), R(16, 4)))

M14 = make_mesh({"dp": 2, "sp": 2, "tp": 2})


def merge_split(x, wq, wo):
    b, s, d = x.shape
    t = cons(M14, x.reshape(b * s, d), ("dp", "sp"), None)
    q = cons(M14, (t @ wq).reshape(b, s, 4, 4), "dp", "sp", "tp", None)
    q = jax.nn.softmax(q, -1) * q
    o = cons(M14, q.reshape(b * s, 16), ("dp", "sp"), None) @ wo
    return cons(M14, o.reshape(b, s, d) + x, "dp", "sp", None)


C.gspmd("g.batch_seq_tokens_heads_merge_split.dp2xsp2xtp2", {"dp": 2, "sp": 2, "tp": 2},
        (P("dp", "sp"), P(), P()), P("dp", "sp"), merge_split,
        (R(4, 8, 8), R(8, 16, scale=0.4), R(16, 8, scale=0.3)))

M15 = make_mesh({"r": 2, "c": 4})


def ws_gspmd(x, w1, w2):
    h = cons(M15, jax.nn.gelu(x @ w1), None, "c")
    return cons(M15, h @ w2, None, "r")


C.gspmd("g.weight_stationary_mlp_constraints.r2xc4", {"r": 2, "c": 4}, (P(None, "r"), P("r", "c"), P("c", "r")),
        P(None, "r"), ws_gspmd, (R(8, 16), R(16, 32, scale=0.3), R(32, 16, scale=0.3)))

C.finish()
