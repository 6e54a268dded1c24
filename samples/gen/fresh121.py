"""samples/fresh121: a 121st batch of programs as a user writes them, on the theme of the current Flax NNX, Flax Linen and Equinox APIs used the way their own documentation shards models (flax 0.12.12, equinox 0.13.8, jax 0.12.0.1, optax 0.2.8, tiny sizes, random init), none of them an idiom of samples/fresh .. fresh26, probe, train or wild.
(samples/wild's NNX, Linen and Equinox programs are decoder-only LMs; none
here is one.) Both libraries (the versions samples/wild pins) install and
import on jax 0.12.0.1; the virtualenv is pinned in requirements-fresh121.txt.
Parameters travel as the libraries' own pytrees turned into plain dicts:
NNX models are split (nnx.split) and their state passed as
State.to_pure_dict(), merged back inside the function with nnx.merge;
NNX variables carry nnx.with_partitioning metadata created with eager
sharding off (nnx.use_eager_sharding(False)) and the specs come from
nnx.get_partition_spec. Linen parameters carry nn.with_logical_partitioning
/ nn.Partitioned boxes, unboxed, with specs from nn.get_partition_spec and
nn.logical_to_mesh_sharding under logical axis rules. Equinox models are passed
as the array part of eqx.partition and recombined with eqx.combine.
shard_map families (the library's modules applied to the local shards,
hand-written collectives):
 1. an NNX CNN (nnx.Conv, nnx.BatchNorm with axis_name="dp" -- synchronised
    batch statistics --, nnx.Linear) trained by nnx.Optimizer(adamw) with
    nnx.value_and_grad, batch over dp4, gradients pmean'd; the running
    statistics are part of the returned state. Bugs: BatchNorm without
    axis_name (local batch statistics), gradients not reduced.
 2. a Megatron MLP of nnx.LayerNorm + two nnx.Linear (column-parallel up
    with its bias sharded, row-parallel down without bias) over tp4 x dp2,
    psum over tp, the down bias added after. Bugs: psum over dp, the down
    bias added on every rank before the psum.
 3. NNX layers stacked with nnx.split_rngs + nnx.vmap and run with nnx.scan
    (each block under nnx.remat), an adam step (nnx.Optimizer) over dp4,
    gradients pmean'd. Bugs: no gradient pmean, gradients psum'd.
 4. Linen nn.LayerNorm(axis_name="tp") on a hidden dimension sharded over
    tp4 (the statistics pmean'd by Linen itself), followed by a row-parallel
    nn.Dense (psum over tp, bias after), batch over dp2. Bugs: LayerNorm
    without axis_name (per-shard statistics), its statistics over dp.
 5. Linen residual MLP blocks under nn.scan(nn.remat(Block),
    variable_axes={"params": 0}) trained with optax sgd + momentum over dp4,
    gradients pmean'd. Bugs: no pmean, only the head's gradients pmean'd.
 6. eqx.nn.MultiheadAttention with its heads over tp4 (a local module with
    num_heads/4 and explicit qk_size/vo_size), batch over dp2 (vmapped), the
    output bias zeroed off tp rank 0, psum over tp. Bugs: no psum, the
    output bias kept on every rank.
 7. eqx.nn.LSTMCell scanned over time (lax.scan), eqx.nn.Linear readout,
    vmapped over the batch, eqx.filter_value_and_grad + optax adam, batch over
    dp4, gradients pmean'd. Bugs: no pmean, gradients psum'd.
 8. eqx.nn.Conv2d + eqx.nn.BatchNorm(axis_name=("batch", "dp")) with
    eqx.nn.State (vmapped with axis_name="batch"), an sgd step over dp4,
    gradients pmean'd. Bugs: BatchNorm statistics over the local batch only
    (axis_name="batch"), gradients not reduced.
 9. an eqx.nn.LayerNorm + eqx.nn.MLP applied per token on a sequence sharded
    over sp4 (batch over dp2), mean-pooled over the sequence (local sum,
    psum over sp, divided by the global length), eqx.nn.Linear classifier.
    Bugs: the pool psum'd over dp, the local mean not reduced (pmean of
    nothing: the rank's own mean).
10. Megatron sequence parallelism with nnx.RMSNorm + nnx.Linear (dp2 x
    tp4): the norm on the rank's sequence shard, all_gather of the sequence,
    column/row-parallel MLP, psum_scatter back to sequence shards, the down
    bias and the residual after. Bugs: the down bias added before the
    psum_scatter, a psum followed by the next rank's sequence slice.
11. a Megatron MLP of two eqx.nn.Linear trained by sgd under shard_map with
    check_vma=True (dp2 x tp4): jax.grad through the psum over tp, the loss
    pmean'd over dp inside the differentiated function and no explicit
    gradient reduction (with vma, jax.grad's transposes sum the replicated
    parameters' gradients over dp). Bugs: the loss psum'd over dp instead
    of pmean'd, the down bias inside the psum over tp.
GSPMD pairs (jax.jit with in/out shardings; correct):
12. NNX CNN with nnx.BatchNorm and nnx.Dropout (an nnx.Rngs stream built from
    a key passed in) adamw step over dp8;
13. an NNX MLP forward with nnx.with_partitioning kernels, shardings from
    nnx.get_partition_spec, a with_sharding_constraint on the hidden
    activation (dp2 x tp4);
14. family 3's nnx.scan / nnx.vmap / nnx.remat model with FSDP kernels
    (nnx.vmap's transform_metadata naming the layer axis) adam step, fsdp8;
15. an nnx.MultiHeadAttention + nnx.LayerNorm encoder block forward with the
    sequence sharded over sp4 (constraints on the activations);
16. family 2's Megatron MLP trained with nnx.Optimizer(sgd) over tp4;
17. a Linen block (with_logical_partitioning + logical axis rules,
    nn.with_logical_constraint, nn.logical_to_mesh_sharding) adam step,
    dp2 x tp4;
18. Linen nn.scan layers with nn.with_partitioning (nn.Partitioned) kernels
    over fsdp, the scanned axis unnamed (metadata_params PARTITION_NAME
    None), an adamw step over fsdp8;
19. Linen nn.Conv + nn.BatchNorm (mutable batch_stats) nesterov sgd step over dp8;
20. eqx.nn.MLP adamw step with its weights over fsdp8;
21. eqx.nn.Conv2d + eqx.nn.BatchNorm (eqx.nn.State) sgd step over dp8;
22. eqx.nn.MultiheadAttention forward with heads over tp4, batch over dp2,
    eqx.filter_shard on the output;
23. family 7's LSTM adam step with the batch over dp2 and the cell's
    hidden units over tp4 (dp2 x tp4);
24. family 10's sequence-parallel MLP under GSPMD with bf16 compute
    (nnx.Linear dtype=bfloat16, float32 parameters), dp2 x tp4;
25. pair 15's nnx.MultiHeadAttention encoder block with its heads over tp4
    and the batch over dp2, an nnx.Optimizer(adamw) step with the moments
    already under way.
"""
import sys
import numpy as np
import jax, jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec as P
import optax
import flax
from flax import nnx
import flax.linen as nn
import equinox as eqx
sys.path.insert(0, "samples/gen")  # run from the repository root (run_fresh121.sh)
from fresh_lib import Corpus, seeded, state_specs, np_tree  # noqa: E402

SCRIPT = "samples/gen/fresh121.py"
C = Corpus("samples/fresh121", SCRIPT, "samples/gen/run_fresh121.sh", sys.argv[1:])
rng, R, I = seeded(121)
LIBS = "flax %s, equinox %s, optax %s" % (flax.__version__, eqx.__version__, optax.__version__)
nnx.use_eager_sharding(False)  # metadata only; the jit shardings place the arrays


def ce(logits, labels):
    return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()


def pure(obj):
    return np_tree(nnx.state(obj).to_pure_dict())


def perturb(tree, scale=0.1):
    return jax.tree.map(lambda a: a + R(*np.shape(a), scale=scale) if np.issubdtype(a.dtype, np.floating) else a, tree)


# ---------------------------------------------------------------------------
# 1. NNX CNN with synchronised BatchNorm, adamw via nnx.Optimizer, dp4.
class CNN(nnx.Module):
    def __init__(self, rngs, axis_name=None):
        self.conv = nnx.Conv(3, 8, (3, 3), use_bias=False, rngs=rngs)
        self.bn = nnx.BatchNorm(8, momentum=0.9, axis_name=axis_name, rngs=rngs)
        self.head = nnx.Linear(8, 5, rngs=rngs)

    def __call__(self, x):
        h = nnx.relu(self.bn(self.conv(x)))
        return self.head(h.mean(axis=(1, 2)))


CNN_G, _cnn_state = nnx.split(CNN(nnx.Rngs(1)))
CNN_GL = nnx.split(CNN(nnx.Rngs(1), axis_name="dp"))[0]
M1 = perturb(np_tree(_cnn_state.to_pure_dict()), 0.05)
TX1 = optax.adamw(1e-2, weight_decay=0.05)
OPT1_G, _o1 = nnx.split(nnx.Optimizer(nnx.merge(CNN_G, M1), TX1, wrt=nnx.Param))
O1 = np_tree(_o1.to_pure_dict())
X1, Y1 = R(16, 6, 6, 3), I(0, 5, 16)


def cnn_loss(model, x, y):
    return ce(model(x), y)


def make_step1(graph, reduce_grads):
    def step(m, o, x, y):
        model, opt = nnx.merge(graph, m), nnx.merge(OPT1_G, o)
        model.train()
        loss, grads = nnx.value_and_grad(cnn_loss)(model, x, y)
        grads, loss = reduce_grads(grads, loss)
        opt.update(model, grads)
        return nnx.state(model).to_pure_dict(), nnx.state(opt).to_pure_dict(), loss
    return step


step1 = make_step1(CNN_G, lambda g, l: (g, l))


def step1_dp(bug):
    graph = CNN_G if bug == "bn-local-stats" else CNN_GL

    def red(g, l):
        if bug != "no-grad-pmean":
            g = jax.tree.map(lambda a: lax.pmean(a, "dp"), g)
        return g, lax.pmean(l, "dp")
    return make_step1(graph, red)


C.smap("s.nnx_syncbn_cnn_adamw_step.dp4", {"dp": 4}, step1_dp, (P(), P(), P("dp"), P("dp")), (P(), P(), P()),
       step1, (M1, O1, X1, Y1), bugs=[("bn-local-stats", ["missing_collective"]),
                                      ("no-grad-pmean", ["missing_collective"])], note=LIBS)

# ---------------------------------------------------------------------------
# 2. Megatron MLP from nnx.LayerNorm + nnx.Linear, tp4 x dp2 (forward).
D2, F2, TP2 = 16, 64, 4
part = nnx.with_partitioning


class MegaMLP(nnx.Module):
    def __init__(self, rngs, f=F2, down_bias=True):
        init = nnx.initializers.lecun_normal()
        self.norm = nnx.LayerNorm(D2, rngs=rngs)
        self.up = nnx.Linear(D2, f, kernel_init=part(init, (None, "tp")), bias_init=part(nnx.initializers.normal(0.5), ("tp",)),
                             rngs=rngs)
        self.down = nnx.Linear(f, D2, use_bias=down_bias, kernel_init=part(init, ("tp", None)),
                               bias_init=nnx.initializers.normal(0.5), rngs=rngs)

    def __call__(self, x):
        return self.down(nnx.gelu(self.up(self.norm(x))))


MLP2_G, _s2 = nnx.split(MegaMLP(nnx.Rngs(2)))
M2 = perturb(np_tree(_s2.to_pure_dict()), 0.2)
PS2 = nnx.get_partition_spec(_s2).to_pure_dict()
MLP2_L = nnx.split(MegaMLP(nnx.Rngs(2), f=F2 // TP2, down_bias=False))[0]
MLP2_LB = nnx.split(MegaMLP(nnx.Rngs(2), f=F2 // TP2))[0]
X2 = R(8, 6, D2)


def mlp2(m, x):
    return nnx.merge(MLP2_G, m)(x)


def mlp2_tp(bug):
    def body(m, x):
        if bug == "down-bias-before-psum":
            return lax.psum(nnx.merge(MLP2_LB, m)(x), "tp")
        local = {**m, "down": {"kernel": m["down"]["kernel"]}}
        y = lax.psum(nnx.merge(MLP2_L, local)(x), "dp" if bug == "psum-over-dp" else "tp")
        return y + m["down"]["bias"]
    return body


C.smap("s.nnx_linear_megatron_mlp.dp2xtp4", {"dp": 2, "tp": 4}, mlp2_tp, (PS2, P("dp")), P("dp"), mlp2, (M2, X2),
       bugs=[("psum-over-dp", ["wrong_axis"]), ("down-bias-before-psum", ["wrong_scale"])], note=LIBS)

# ---------------------------------------------------------------------------
# 3. nnx.vmap-created layers run by nnx.scan with nnx.remat, adam step over dp4.
D3, L3 = 16, 3


class Block3(nnx.Module):
    def __init__(self, rngs):
        init = nnx.initializers.lecun_normal()
        self.norm = nnx.LayerNorm(D3, rngs=rngs)
        self.fc = nnx.Linear(D3, D3, kernel_init=part(init, ("fsdp", None)), rngs=rngs)

    def __call__(self, x):
        return x + nnx.tanh(self.fc(self.norm(x)))


class Stack3(nnx.Module):
    def __init__(self, rngs):
        @nnx.split_rngs(splits=L3)
        @nnx.vmap(in_axes=(0,), out_axes=0, transform_metadata={nnx.PARTITION_NAME: None})
        def create(rngs):
            return Block3(rngs)
        self.blocks = create(rngs)
        self.out = nnx.Linear(D3, 1, rngs=rngs)

    def __call__(self, x):
        @nnx.scan(in_axes=(0, nnx.Carry), out_axes=nnx.Carry)
        @nnx.remat
        def run(block, x):
            return block(x)
        return self.out(run(self.blocks, x))[..., 0]


ST3_G, _s3 = nnx.split(Stack3(nnx.Rngs(3)))
M3 = perturb(np_tree(_s3.to_pure_dict()), 0.05)
PS3 = nnx.get_partition_spec(_s3).to_pure_dict()
TX3 = optax.adam(5e-3)
OPT3_G, _o3 = nnx.split(nnx.Optimizer(nnx.merge(ST3_G, M3), TX3, wrt=nnx.Param))
O3 = np_tree(_o3.to_pure_dict())
X3, Y3 = R(16, 5, D3), R(16, 5)


def loss3(model, x, y):
    return jnp.mean(jnp.square(model(x) - y))


def make_step3(red):
    def step(m, o, x, y):
        model, opt = nnx.merge(ST3_G, m), nnx.merge(OPT3_G, o)
        loss, grads = nnx.value_and_grad(loss3)(model, x, y)
        grads = red(grads)
        opt.update(model, grads)
        return nnx.state(model).to_pure_dict(), nnx.state(opt).to_pure_dict(), loss
    return step


step3 = make_step3(lambda g: g)


def step3_dp(bug):
    red = {"no-grad-pmean": lambda g: g,
           "grad-psum": lambda g: jax.tree.map(lambda a: lax.psum(a, "dp"), g)}.get(
               bug, lambda g: jax.tree.map(lambda a: lax.pmean(a, "dp"), g))
    inner = make_step3(red)

    def body(m, o, x, y):
        m, o, loss = inner(m, o, x, y)
        return m, o, lax.pmean(loss, "dp")
    return body


C.smap("s.nnx_scan_vmap_remat_layers_adam_step.dp4", {"dp": 4}, step3_dp, (P(), P(), P("dp"), P("dp")),
       (P(), P(), P()), step3, (M3, O3, X3, Y3),
       bugs=[("no-grad-pmean", ["missing_collective"]), ("grad-psum", ["wrong_scale"])], note=LIBS)

# ---------------------------------------------------------------------------
# 4. Linen nn.LayerNorm(axis_name="tp") on a tp4-sharded hidden dim, then a
#    row-parallel nn.Dense; batch over dp2.
D4, E4, TP4 = 32, 12, 4


class NormProj(nn.Module):
    features: int = E4
    axis_name: str = None
    use_bias: bool = True

    @nn.compact
    def __call__(self, x):
        h = nn.LayerNorm(axis_name=self.axis_name, name="norm")(x)
        return nn.Dense(self.features, use_bias=self.use_bias, name="proj")(h)


NP4 = NormProj()
X4 = R(4, 6, D4, scale=2.0) + R(D4, scale=1.5)  # per-feature offsets: every shard's stats differ
V4 = perturb(np_tree(NP4.init(jax.random.key(4), X4)["params"]), 0.3)
PS4 = {"norm": {"scale": P("tp"), "bias": P("tp")}, "proj": {"kernel": P("tp", None), "bias": P()}}


def normproj(p, x):
    return NP4.apply({"params": p}, x)


def normproj_tp(bug):
    ax = {"local-stats": None, "stats-over-dp": "dp"}.get(bug, "tp")
    local = NormProj(axis_name=ax, use_bias=False)

    def body(p, x):
        y = local.apply({"params": {"norm": p["norm"], "proj": {"kernel": p["proj"]["kernel"]}}}, x)
        return lax.psum(y, "tp") + p["proj"]["bias"]
    return body


C.smap("s.linen_layernorm_axis_name_hidden_shard.dp2xtp4", {"dp": 2, "tp": 4}, normproj_tp,
       (PS4, P("dp", None, "tp")), P("dp"), normproj, (V4, X4),
       bugs=[("local-stats", ["missing_collective"]), ("stats-over-dp", ["wrong_axis"])], note=LIBS)

# ---------------------------------------------------------------------------
# 5. Linen nn.scan(nn.remat(Block)) residual MLP, sgd momentum over dp4.
D5, L5 = 16, 3


class ResBlock(nn.Module):
    @nn.compact
    def __call__(self, x, _):
        h = nn.Dense(2 * D5, name="fc1")(nn.RMSNorm(name="norm")(x))
        return x + nn.Dense(D5, name="fc2")(nn.gelu(h)), None


class ScanNet(nn.Module):
    @nn.compact
    def __call__(self, x):
        x = nn.Dense(D5, name="embed")(x)
        blocks = nn.scan(nn.remat(ResBlock), variable_axes={"params": 0}, split_rngs={"params": True},
                         length=L5)
        x, _ = blocks(name="blocks")(x, None)
        return nn.Dense(3, name="head")(x)


NET5 = ScanNet()
X5, Y5 = R(16, 7), I(0, 3, 16)
V5 = np_tree(NET5.init(jax.random.key(5), X5)["params"])
TX5 = optax.sgd(0.1, momentum=0.9)
O5 = perturb(np_tree(TX5.init(V5)), 0.05)  # momentum under way


def loss5(p, x, y):
    return ce(NET5.apply({"params": p}, x), y)


def step5(p, o, x, y):
    l, g = jax.value_and_grad(loss5)(p, x, y)
    u, o = TX5.update(g, o, p)
    return optax.apply_updates(p, u), o, l


def step5_dp(bug):
    def body(p, o, x, y):
        l, g = jax.value_and_grad(loss5)(p, x, y)
        if bug == "pmean-head-only":
            g = {**g, "head": lax.pmean(g["head"], "dp")}
        elif bug != "no-grad-pmean":
            g = lax.pmean(g, "dp")
        u, o = TX5.update(g, o, p)
        return optax.apply_updates(p, u), o, lax.pmean(l, "dp")
    return body


C.smap("s.linen_scan_remat_resmlp_sgd_momentum.dp4", {"dp": 4}, step5_dp, (P(), P(), P("dp"), P("dp")),
       (P(), P(), P()), step5, (V5, O5, X5, Y5),
       bugs=[("no-grad-pmean", ["missing_collective"]), ("pmean-head-only", ["missing_collective"])], note=LIBS)

# ---------------------------------------------------------------------------
# 6. eqx.nn.MultiheadAttention, heads over tp4, batch over dp2 (vmapped).
H6, D6, T6 = 8, 16, 6
MHA6 = eqx.nn.MultiheadAttention(H6, D6, use_query_bias=True, use_key_bias=True, use_value_bias=True,
                                 use_output_bias=True, key=jax.random.key(6))
MHA6 = jax.tree.map(lambda a: a + R(*a.shape, scale=0.3) if eqx.is_array(a) and a.ndim == 1 else a, MHA6)  # non-zero biases
MHA6_ARR, MHA6_STATIC = eqx.partition(MHA6, eqx.is_array)
MHA6_ARR = np_tree(MHA6_ARR)
MHA6_LOCAL = eqx.nn.MultiheadAttention(H6 // 4, D6, qk_size=D6 // H6, vo_size=D6 // H6, use_query_bias=True,
                                       use_key_bias=True, use_value_bias=True, use_output_bias=True,
                                       key=jax.random.key(0))


def into(skeleton, arr):
    """skeleton (a module of local sizes) with the arrays of arr (the rank's shards, same fields)."""
    dyn, static = eqx.partition(skeleton, eqx.is_array)
    return eqx.combine(jax.tree.unflatten(jax.tree.structure(dyn), jax.tree.leaves(arr)), static)


def mha_spec(path, a):
    name = "/".join(str(getattr(k, "name", k)) for k in path)
    if "output_proj" in name:
        return P(None, "tp") if a.ndim == 2 else P()
    return P("tp", None) if a.ndim == 2 else P("tp")


PS6 = jax.tree_util.tree_map_with_path(mha_spec, MHA6_ARR)
X6 = R(4, T6, D6)
MASK6 = np.tril(np.ones((T6, T6), bool))


def mha6(arr, x):
    m = eqx.combine(arr, MHA6_STATIC)
    return jax.vmap(lambda s: m(s, s, s, mask=MASK6))(x)


def mha6_tp(bug):
    def body(arr, x):
        if bug != "bias-every-rank":
            first = (lax.axis_index("tp") == 0).astype(x.dtype)
            arr = eqx.tree_at(lambda m: m.output_proj.bias, arr, arr.output_proj.bias * first)
        m = into(MHA6_LOCAL, arr)
        o = jax.vmap(lambda s: m(s, s, s, mask=MASK6))(x)
        return o if bug == "no-psum" else lax.psum(o, "tp")
    return body


C.smap("s.eqx_mha_heads_tp_causal.dp2xtp4", {"dp": 2, "tp": 4}, mha6_tp, (PS6, P("dp")), P("dp"), mha6,
       (MHA6_ARR, X6), bugs=[("no-psum", ["missing_collective"]), ("bias-every-rank", ["wrong_scale"])], note=LIBS)

# ---------------------------------------------------------------------------
# 7. eqx.nn.LSTMCell scanned over time, adam step over dp4.
I7, H7, T7 = 5, 12, 6


class SeqRegressor(eqx.Module):
    cell: eqx.nn.LSTMCell
    out: eqx.nn.Linear

    def __init__(self, key, hidden=H7):
        k1, k2 = jax.random.split(key)
        self.cell = eqx.nn.LSTMCell(I7, hidden, key=k1)
        self.out = eqx.nn.Linear(hidden, "scalar", key=k2)

    def __call__(self, xs):
        h = self.cell.hidden_size

        def tick(carry, x):
            return self.cell(x, carry), None
        (hT, _), _ = lax.scan(tick, (jnp.zeros(h), jnp.zeros(h)), xs)
        return self.out(hT)


SEQ7 = SeqRegressor(jax.random.key(7))
ARR7, STATIC7 = eqx.partition(SEQ7, eqx.is_array)
ARR7 = np_tree(ARR7)
TX7 = optax.adam(1e-2)
O7 = np_tree(TX7.init(ARR7))
X7, Y7 = R(16, T7, I7), R(16)


def loss7(model, x, y):
    return jnp.mean(jnp.square(jax.vmap(model)(x) - y))


def make_step7(red):
    def step(arr, o, x, y):
        model = eqx.combine(arr, STATIC7)
        l, g = eqx.filter_value_and_grad(loss7)(model, x, y)
        g, l = red(g, l)
        u, o = TX7.update(g, o, eqx.filter(model, eqx.is_array))
        model = eqx.apply_updates(model, u)
        return eqx.filter(model, eqx.is_array), o, l
    return step


step7 = make_step7(lambda g, l: (g, l))


def step7_dp(bug):
    def red(g, l):
        if bug == "grad-psum":
            g = jax.tree.map(lambda a: lax.psum(a, "dp"), g)
        elif bug != "no-grad-pmean":
            g = jax.tree.map(lambda a: lax.pmean(a, "dp"), g)
        return g, lax.pmean(l, "dp")
    return make_step7(red)


C.smap("s.eqx_lstmcell_scan_adam_step.dp4", {"dp": 4}, step7_dp, (P(), P(), P("dp"), P("dp")), (P(), P(), P()),
       step7, (ARR7, O7, X7, Y7), bugs=[("no-grad-pmean", ["missing_collective"]), ("grad-psum", ["wrong_scale"])],
       note=LIBS)

# ---------------------------------------------------------------------------
# 8. eqx.nn.Conv2d + eqx.nn.BatchNorm with eqx.nn.State, sgd step over dp4.
C8 = 6


class ConvBN(eqx.Module):
    conv: eqx.nn.Conv2d
    bn: eqx.nn.BatchNorm
    head: eqx.nn.Linear

    def __init__(self, key, axis_name="batch"):
        k1, k2 = jax.random.split(key)
        self.conv = eqx.nn.Conv2d(3, C8, 3, padding=1, use_bias=False, key=k1)
        self.bn = eqx.nn.BatchNorm(C8, axis_name=axis_name, momentum=0.9, mode="batch")
        self.head = eqx.nn.Linear(C8, 4, key=k2)

    def __call__(self, x, state):
        h, state = self.bn(self.conv(x), state)
        return self.head(jax.nn.relu(h).mean(axis=(1, 2))), state


CBN8, ST8 = eqx.nn.make_with_state(ConvBN)(jax.random.key(8))
ARR8, STATIC8 = eqx.partition(CBN8, eqx.is_array)
ARR8 = perturb(np_tree(ARR8), 0.1)
ST8 = np_tree(ST8)


def with_bn_axis(model, axis_name):
    """The same model (the same state index) whose BatchNorm averages over axis_name."""
    bn = eqx.nn.BatchNorm(C8, axis_name=axis_name, momentum=0.9, mode="batch")
    bn = eqx.tree_at(lambda b: (b.batch_state_index, b.batch_counter), bn,
                     (model.bn.batch_state_index, model.bn.batch_counter))
    return eqx.tree_at(lambda m: m.bn, model, bn)


SYNC8 = with_bn_axis(CBN8, ("batch", "dp"))
LR8 = 0.1
X8, Y8 = R(16, 3, 6, 6), I(0, 4, 16)


def make_step8(skeleton, red):
    def step(arr, state, x, y):
        model = into(skeleton, arr)

        def loss(model, state):
            logits, state = jax.vmap(model, axis_name="batch", in_axes=(0, None), out_axes=(0, None))(x, state)
            return ce(logits, y), state
        (l, state), g = eqx.filter_value_and_grad(loss, has_aux=True)(model, state)
        g, l = red(g, l)
        model = eqx.apply_updates(model, jax.tree.map(lambda a: -LR8 * a, g))
        return eqx.filter(model, eqx.is_array), state, l
    return step


step8 = make_step8(CBN8, lambda g, l: (g, l))


def step8_dp(bug):
    skeleton = CBN8 if bug == "bn-local-batch" else SYNC8

    def red(g, l):
        if bug != "no-grad-pmean":
            g = jax.tree.map(lambda a: lax.pmean(a, "dp"), g)
        return g, lax.pmean(l, "dp")
    return make_step8(skeleton, red)


C.smap("s.eqx_conv_batchnorm_state_sgd_step.dp4", {"dp": 4}, step8_dp, (P(), P(), P("dp"), P("dp")),
       (P(), P(), P()), step8, (ARR8, ST8, X8, Y8),
       bugs=[("bn-local-batch", ["missing_collective"]), ("no-grad-pmean", ["missing_collective"])], note=LIBS)

# ---------------------------------------------------------------------------
# 9. eqx.nn.LayerNorm + eqx.nn.MLP per token, sequence over sp4, mean pool.
D9, T9 = 8, 16


class TokenPool(eqx.Module):
    norm: eqx.nn.LayerNorm
    mlp: eqx.nn.MLP
    cls: eqx.nn.Linear

    def __init__(self, key):
        k1, k2 = jax.random.split(key)
        self.norm = eqx.nn.LayerNorm(D9)
        self.mlp = eqx.nn.MLP(D9, D9, 16, depth=2, activation=jax.nn.silu, key=k1)
        self.cls = eqx.nn.Linear(D9, 3, key=k2)

    def tokens(self, x):
        return jax.vmap(lambda t: self.mlp(self.norm(t)))(x)

    def __call__(self, x):
        return self.cls(self.tokens(x).mean(axis=0))


TP9 = TokenPool(jax.random.key(9))
ARR9, STATIC9 = eqx.partition(TP9, eqx.is_array)
ARR9 = perturb(np_tree(ARR9), 0.1)
X9 = R(4, T9, D9) + 1.0  # a non-zero mean over the sequence


def pool9(arr, x):
    return jax.vmap(eqx.combine(arr, STATIC9))(x)


def pool9_sp(bug):
    def body(arr, x):
        m = eqx.combine(arr, STATIC9)

        def one(xs):
            h = m.tokens(xs)
            if bug == "local-mean":
                pooled = h.mean(axis=0)
            else:
                pooled = lax.psum(h.sum(axis=0), "dp" if bug == "psum-over-dp" else "sp") / T9
            return m.cls(pooled)
        return jax.vmap(one)(x)
    return body


C.smap("s.eqx_mlp_layernorm_sequence_pool.dp2xsp4", {"dp": 2, "sp": 4}, pool9_sp, (P(), P("dp", "sp")), P("dp"),
       pool9, (ARR9, X9), bugs=[("psum-over-dp", ["wrong_axis"]), ("local-mean", ["missing_collective"])], note=LIBS)

# ---------------------------------------------------------------------------
# 10. Megatron sequence parallelism with nnx.RMSNorm + nnx.Linear: the norm on
#     the rank's sequence shard, all_gather of the sequence, column/row-parallel
#     MLP, psum_scatter back to sequence shards, the down bias and the residual
#     after; dp2 x tp4.
D10, F10, T10 = 16, 32, 8


class SPMLP(nnx.Module):
    def __init__(self, rngs, f=F10, down_bias=True):
        init = nnx.initializers.lecun_normal()
        self.norm = nnx.RMSNorm(D10, rngs=rngs)
        self.up = nnx.Linear(D10, f, use_bias=False, kernel_init=part(init, (None, "tp")), rngs=rngs)
        self.down = nnx.Linear(f, D10, use_bias=down_bias, kernel_init=part(init, ("tp", None)),
                               bias_init=nnx.initializers.normal(0.5), rngs=rngs)

    def __call__(self, x):
        return x + self.down(nnx.silu(self.up(self.norm(x))))


SP_G, _s10b = nnx.split(SPMLP(nnx.Rngs(100)))
M10B = perturb(np_tree(_s10b.to_pure_dict()), 0.2)
PS10B = nnx.get_partition_spec(_s10b).to_pure_dict()
SP_LG = nnx.split(SPMLP(nnx.Rngs(100), f=F10 // 4, down_bias=False))[0]
X10B = R(4, T10, D10)


def spmlp(m, x):
    return nnx.merge(SP_G, m)(x)


def spmlp_tp(bug):
    def body(m, x):
        local = nnx.merge(SP_LG, {**m, "down": {"kernel": m["down"]["kernel"]}})
        h = lax.all_gather(local.norm(x), "tp", axis=1, tiled=True)
        y = local.down(nnx.silu(local.up(h)))
        if bug == "bias-before-scatter":
            y = y + m["down"]["bias"]
        if bug == "psum-slice-next-rank":
            full = lax.psum(y, "tp")
            start = ((lax.axis_index("tp") + 1) % 4) * (T10 // 4)
            y = lax.dynamic_slice_in_dim(full, start, T10 // 4, axis=1)
        else:
            y = lax.psum_scatter(y, "tp", scatter_dimension=1, tiled=True)
        if bug != "bias-before-scatter":
            y = y + m["down"]["bias"]
        return x + y
    return body


C.smap("s.nnx_rmsnorm_sequence_parallel_mlp.dp2xtp4", {"dp": 2, "tp": 4}, spmlp_tp, (PS10B, P("dp", "tp")),
       P("dp", "tp"), spmlp, (M10B, X10B),
       bugs=[("bias-before-scatter", ["wrong_scale"]), ("psum-slice-next-rank", ["wrong_offset"])], note=LIBS)

# ---------------------------------------------------------------------------
# 11. a Megatron MLP of two eqx.nn.Linear trained under shard_map with
#     check_vma=True (jax.grad through the psum over tp), dp2 x tp4: the loss
#     pmean'd over dp inside the differentiated function, no explicit
#     gradient reduction (jax.grad's transposes do it).
D11, F11 = 8, 32


class EqxMLP2(eqx.Module):
    up: eqx.nn.Linear
    down: eqx.nn.Linear

    def __init__(self, key, f=F11, down_bias=True):
        k1, k2 = jax.random.split(key)
        self.up = eqx.nn.Linear(D11, f, key=k1)
        self.down = eqx.nn.Linear(f, D11, use_bias=down_bias, key=k2)

    def __call__(self, x):
        return self.down(jax.nn.gelu(self.up(x)))


MLP11 = EqxMLP2(jax.random.key(111))
ARR11, STATIC11 = eqx.partition(MLP11, eqx.is_array)
ARR11 = perturb(np_tree(ARR11), 0.3)
PS11B = EqxMLP2(jax.random.key(0))
PS11B = eqx.tree_at(lambda m: (m.up.weight, m.up.bias, m.down.weight, m.down.bias), eqx.filter(PS11B, eqx.is_array),
                    (P("tp", None), P("tp"), P(None, "tp"), P()))
LOCAL11 = EqxMLP2(jax.random.key(0), f=F11 // 4, down_bias=False)
LOCAL11B = EqxMLP2(jax.random.key(0), f=F11 // 4)
X11, T11 = R(8, D11), R(8, D11)
LR11 = 0.1


def step11(arr, x, t):
    def loss(arr):
        return jnp.mean(jnp.square(jax.vmap(eqx.combine(arr, STATIC11))(x) - t))
    l, g = jax.value_and_grad(loss)(arr)
    return jax.tree.map(lambda a, b: a - LR11 * b, arr, g), l


def step11_tp(bug):
    def body(arr, x, t):
        def loss(arr):
            if bug == "bias-inside-psum":
                y = lax.psum(jax.vmap(into(LOCAL11B, arr))(x), "tp")
            else:
                local = into(LOCAL11, [arr.up.weight, arr.up.bias, arr.down.weight])
                y = lax.psum(jax.vmap(local)(x), "tp") + arr.down.bias
            # the global mean inside the loss: the replicated (dp-invariant) parameters'
            # gradients come out of jax.grad already summed over dp (vma transpose)
            return (lax.psum if bug == "loss-psum-dp" else lax.pmean)(jnp.mean(jnp.square(y - t)), "dp")
        l, g = jax.value_and_grad(loss)(arr)
        return jax.tree.map(lambda a, b: a - LR11 * b, arr, g), l
    return body


C.smap("s.eqx_megatron_mlp_grad_check_vma_sgd.dp2xtp4", {"dp": 2, "tp": 4}, step11_tp,
       (PS11B, P("dp"), P("dp")), (PS11B, P()), step11, (ARR11, X11, T11), check_vma=True,
       bugs=[("loss-psum-dp", ["wrong_scale"]), ("bias-inside-psum", ["wrong_scale"])], note=LIBS)

# ---------------------------------------------------------------------------
# GSPMD pairs.
from scalify_jax._export import make_mesh  # noqa: E402  (the meshes C.gspmd runs on)
from jax.sharding import NamedSharding  # noqa: E402


def specs_like(tree, ref, ref_specs):
    """The spec of the parameter (of ref, ref_specs) whose path ends the path of
    each leaf of tree (an optimizer state), when it has as many dims; else P()."""
    flat = {jax.tree_util.keystr(k): s for k, s in
            jax.tree_util.tree_flatten_with_path(ref_specs, is_leaf=lambda x: isinstance(x, P))[0]}

    def spec(path, leaf):
        name = jax.tree_util.keystr(path)
        for k, s in flat.items():
            if name.endswith(k) and np.ndim(leaf) >= len(s):
                return s
        return P()
    return jax.tree_util.tree_map_with_path(spec, tree)


def replicated(tree):
    return jax.tree.map(lambda _: P(), tree)


def filled(specs):
    """An Equinox spec tree with P() where the module has no array (None), for jit's shardings."""
    return jax.tree.map(lambda s: P() if s is None else s, specs, is_leaf=lambda s: s is None or isinstance(s, P))


# 12. NNX CNN with BatchNorm and Dropout (rngs from a key passed in), adamw, dp8.
class CNNDrop(nnx.Module):
    def __init__(self, rngs):
        self.conv1 = nnx.Conv(3, 8, (3, 3), use_bias=False, rngs=rngs)  # no bias before BatchNorm
        self.bn = nnx.BatchNorm(8, momentum=0.9, rngs=rngs)
        self.drop = nnx.Dropout(0.25)
        self.conv2 = nnx.Conv(8, 8, (3, 3), strides=(2, 2), rngs=rngs)
        self.head = nnx.Linear(8, 5, rngs=rngs)

    def __call__(self, x, rngs):
        h = self.drop(nnx.relu(self.bn(self.conv1(x))), rngs=rngs)
        h = nnx.gelu(self.conv2(h))
        return self.head(h.mean(axis=(1, 2)))


CD_G, _s10 = nnx.split(CNNDrop(nnx.Rngs(10)))
M10 = np_tree(_s10.to_pure_dict())
TX10 = optax.adamw(3e-3, weight_decay=0.01)
OPT10_G, _o10 = nnx.split(nnx.Optimizer(nnx.merge(CD_G, M10), TX10, wrt=nnx.Param))
O10 = np_tree(_o10.to_pure_dict())
X10, Y10 = R(16, 8, 8, 3), I(0, 5, 16)
K10 = np.asarray(jax.random.key_data(jax.random.key(1010)))


def step10(m, o, x, y, key):
    model, opt = nnx.merge(CD_G, m), nnx.merge(OPT10_G, o)
    model.train()

    def loss(model):
        rngs = nnx.Rngs(dropout=jax.random.wrap_key_data(key))
        return ce(model(x, rngs), y)
    loss, grads = nnx.value_and_grad(loss)(model)
    opt.update(model, grads)
    return nnx.state(model).to_pure_dict(), nnx.state(opt).to_pure_dict(), loss


C.gspmd("g.nnx_cnn_batchnorm_dropout_adamw_step.dp8", {"dp": 8},
        (replicated(M10), replicated(O10), P("dp"), P("dp"), P()), (replicated(M10), replicated(O10), P()),
        step10, (M10, O10, X10, Y10, K10), note=LIBS)

# 13. NNX MLP forward, with_partitioning kernels, constraint on the hidden, dp2 x tp4.
MESH11 = make_mesh({"dp": 2, "tp": 4})


class PartMLP(nnx.Module):
    def __init__(self, rngs):
        init = nnx.initializers.xavier_uniform()
        self.fc1 = nnx.Linear(12, 32, kernel_init=part(init, (None, "tp")),
                              bias_init=part(nnx.initializers.zeros_init(), ("tp",)), rngs=rngs)
        self.fc2 = nnx.Linear(32, 32, kernel_init=part(init, ("tp", None)), rngs=rngs)
        self.fc3 = nnx.Linear(32, 6, kernel_init=part(init, (None, None)), rngs=rngs)

    def __call__(self, x):
        h = nnx.relu(self.fc1(x))
        h = jax.lax.with_sharding_constraint(h, NamedSharding(MESH11, P("dp", "tp")))
        h = nnx.relu(self.fc2(h))
        return self.fc3(h)


PM_G, _s11 = nnx.split(PartMLP(nnx.Rngs(11)))
M11 = perturb(np_tree(_s11.to_pure_dict()), 0.1)
PS11 = nnx.get_partition_spec(_s11).to_pure_dict()
C.gspmd("g.nnx_partitioned_mlp_forward.dp2xtp4", {"dp": 2, "tp": 4}, (PS11, P("dp")), P("dp"),
        lambda m, x: nnx.merge(PM_G, m)(x), (M11, R(8, 12)), note=LIBS)

# 14. family 3's scanned stack with FSDP kernels, adam step over fsdp8.
C.gspmd("g.nnx_scan_vmap_remat_fsdp_adam_step.fsdp8", {"fsdp": 8},
        (PS3, specs_like(O3, M3, PS3), P("fsdp"), P("fsdp")), (PS3, specs_like(O3, M3, PS3), P()),
        step3, (M3, O3, X3, Y3), note=LIBS)

# 15. nnx.MultiHeadAttention + nnx.LayerNorm encoder block, sequence over sp4.
MESH13 = make_mesh({"sp": 4})


class Encoder(nnx.Module):
    def __init__(self, rngs, act_sharding=None):
        self.act_sharding = act_sharding or NamedSharding(MESH13, P(None, "sp", None))
        self.ln1 = nnx.LayerNorm(16, rngs=rngs)
        self.attn = nnx.MultiHeadAttention(num_heads=4, in_features=16, decode=False, rngs=rngs)
        self.ln2 = nnx.LayerNorm(16, rngs=rngs)
        self.ff = nnx.Linear(16, 16, rngs=rngs)

    def __call__(self, x):
        seq = self.act_sharding
        x = jax.lax.with_sharding_constraint(x + self.attn(self.ln1(x)), seq)
        return jax.lax.with_sharding_constraint(x + self.ff(nnx.gelu(self.ln2(x))), seq)


EN_G, _s13 = nnx.split(Encoder(nnx.Rngs(13)))
M13 = perturb(np_tree(_s13.to_pure_dict()), 0.05)
C.gspmd("g.nnx_mha_encoder_sequence_sharded_forward.sp4", {"sp": 4}, (replicated(M13), P(None, "sp")),
        P(None, "sp"), lambda m, x: nnx.merge(EN_G, m)(x), (M13, R(2, 16, 16)), note=LIBS)

# 16. family 2's Megatron MLP, nnx.Optimizer(sgd) step, tp4.
TX14 = optax.sgd(0.05)
OPT14_G, _o14 = nnx.split(nnx.Optimizer(nnx.merge(MLP2_G, M2), TX14, wrt=nnx.Param))
O14 = np_tree(_o14.to_pure_dict())


def step14(m, o, x, t):
    model, opt = nnx.merge(MLP2_G, m), nnx.merge(OPT14_G, o)
    loss, grads = nnx.value_and_grad(lambda model: jnp.mean(jnp.square(model(x) - t)))(model)
    opt.update(model, grads)
    return nnx.state(model).to_pure_dict(), nnx.state(opt).to_pure_dict(), loss


C.gspmd("g.nnx_megatron_mlp_sgd_step.tp4", {"tp": 4}, (PS2, replicated(O14), P(), P()), (PS2, replicated(O14), P()),
        step14, (M2, O14, X2, R(8, 6, D2)), note=LIBS)

# 17. Linen block with logical partitioning + axis rules, adam step, dp2 x tp4.
wlp = nn.with_logical_partitioning
RULES15 = (("batch", "dp"), ("mlp", "tp"), ("heads", "tp"), ("embed", None), ("length", None))
MESH15 = make_mesh({"dp": 2, "tp": 4})


class LogicalBlock(nn.Module):
    @nn.compact
    def __call__(self, x):
        init = nn.initializers.lecun_normal()
        h = nn.LayerNorm(scale_init=wlp(nn.initializers.ones, ("embed",)),
                         bias_init=wlp(nn.initializers.zeros, ("embed",)))(x)
        h = nn.Dense(64, kernel_init=wlp(init, ("embed", "mlp")), bias_init=wlp(nn.initializers.zeros, ("mlp",)))(h)
        h = nn.with_logical_constraint(nn.gelu(h), ("batch", "length", "mlp"), mesh=MESH15, rules=RULES15)
        h = nn.Dense(16, kernel_init=wlp(init, ("mlp", "embed")), bias_init=wlp(nn.initializers.zeros, ("embed",)))(h)
        return x + h


LB15 = LogicalBlock()
X15, T15 = R(8, 6, 16), R(8, 6, 16)
_boxed15 = LB15.init(jax.random.key(15), X15)["params"]
V15 = perturb(np_tree(nn.meta.unbox(_boxed15)), 0.1)
PS15 = jax.tree.map(lambda s: s.spec, nn.logical_to_mesh_sharding(nn.get_partition_spec(_boxed15), MESH15, RULES15),
                    is_leaf=lambda s: isinstance(s, NamedSharding))
TX15 = optax.adam(1e-3)
O15 = np_tree(TX15.init(V15))


def step15(p, o, x, t):
    l, g = jax.value_and_grad(lambda p: jnp.mean(jnp.square(LB15.apply({"params": p}, x) - t)))(p)
    u, o = TX15.update(g, o, p)
    return optax.apply_updates(p, u), o, l


C.gspmd("g.linen_logical_rules_block_adam_step.dp2xtp4", {"dp": 2, "tp": 4},
        (PS15, specs_like(O15, V15, PS15), P("dp"), P("dp")), (PS15, specs_like(O15, V15, PS15), P()),
        step15, (V15, O15, X15, T15), note=LIBS)


# 18. Linen nn.scan layers with nn.Partitioned kernels (the scanned axis unnamed), adamw step, fsdp8.
class FFLayer(nn.Module):
    @nn.compact
    def __call__(self, x, _):
        h = nn.Dense(32, kernel_init=nn.with_partitioning(nn.initializers.lecun_normal(), ("fsdp", None)))(x)
        h = nn.Dense(16, kernel_init=nn.with_partitioning(nn.initializers.lecun_normal(), (None, "fsdp")))(nn.relu(h))
        return nn.LayerNorm()(x + h), None


class ScanFF(nn.Module):
    @nn.compact
    def __call__(self, x):
        layers = nn.scan(FFLayer, variable_axes={"params": 0}, split_rngs={"params": True}, length=4,
                         metadata_params={nn.PARTITION_NAME: None})
        x, _ = layers(name="layers")(x, None)
        return nn.Dense(4, name="out")(x.mean(axis=1))


SF16 = ScanFF()
X16, Y16 = R(16, 5, 16), I(0, 4, 16)
_boxed16 = SF16.init(jax.random.key(16), X16)["params"]
V16 = np_tree(nn.meta.unbox(_boxed16))
PS16 = nn.get_partition_spec(_boxed16)
TX16 = optax.adamw(2e-3)
O16 = np_tree(TX16.init(V16))


def step16(p, o, x, y):
    l, g = jax.value_and_grad(lambda p: ce(SF16.apply({"params": p}, x), y))(p)
    u, o = TX16.update(g, o, p)
    return optax.apply_updates(p, u), o, l


C.gspmd("g.linen_scan_partitioned_layers_adamw_step.fsdp8", {"fsdp": 8},
        (PS16, specs_like(O16, V16, PS16), P("fsdp"), P("fsdp")), (PS16, specs_like(O16, V16, PS16), P()),
        step16, (V16, O16, X16, Y16), note=LIBS)


# 19. Linen nn.Conv + nn.BatchNorm (mutable batch_stats), sgd step, dp8.
class ConvNet(nn.Module):
    @nn.compact
    def __call__(self, x, train):
        h = nn.Conv(8, (3, 3), use_bias=False)(x)
        h = nn.relu(nn.BatchNorm(use_running_average=not train, momentum=0.9)(h))
        h = nn.avg_pool(h, (2, 2), strides=(2, 2))
        return nn.Dense(5)(h.reshape(h.shape[0], -1))


CN17 = ConvNet()
X17, Y17 = R(16, 6, 6, 3), I(0, 5, 16)
_v17 = CN17.init(jax.random.key(17), X17, train=True)
V17, BS17 = np_tree(_v17["params"]), perturb(np_tree(_v17["batch_stats"]), 0.2)
TX17 = optax.sgd(0.05, momentum=0.9, nesterov=True)
O17 = np_tree(TX17.init(V17))


def step17(p, bs, o, x, y):
    def loss(p):
        logits, upd = CN17.apply({"params": p, "batch_stats": bs}, x, train=True, mutable=["batch_stats"])
        return ce(logits, y), upd["batch_stats"]
    (l, bs), g = jax.value_and_grad(loss, has_aux=True)(p)
    u, o = TX17.update(g, o, p)
    return optax.apply_updates(p, u), bs, o, l


C.gspmd("g.linen_conv_batchnorm_nesterov_step.dp8", {"dp": 8},
        (replicated(V17), replicated(BS17), replicated(O17), P("dp"), P("dp")),
        (replicated(V17), replicated(BS17), replicated(O17), P()), step17, (V17, BS17, O17, X17, Y17), note=LIBS)

# 20. eqx.nn.MLP adamw step with its weights over fsdp8.
MLP18 = eqx.nn.MLP(12, 3, 32, depth=3, activation=jax.nn.gelu, key=jax.random.key(18))
ARR18, STATIC18 = eqx.partition(MLP18, eqx.is_array)
ARR18 = np_tree(ARR18)
PS18 = jax.tree.map(lambda a: P("fsdp") if a.shape[0] % 8 == 0 else P(), ARR18)
TX18 = optax.adamw(1e-3, weight_decay=0.1)
O18 = np_tree(TX18.init(ARR18))
X18, Y18 = R(32, 12), R(32, 3)


@eqx.filter_value_and_grad
def loss18(model, x, y):
    return jnp.mean(jnp.square(jax.vmap(model)(x) - y))


def step18(arr, o, x, y):
    model = eqx.combine(arr, STATIC18)
    l, g = loss18(model, x, y)
    u, o = TX18.update(g, o, eqx.filter(model, eqx.is_array))
    return eqx.filter(eqx.apply_updates(model, u), eqx.is_array), o, l


PS18, OS18 = filled(PS18), filled(specs_like(O18, ARR18, PS18))
C.gspmd("g.eqx_mlp_fsdp_adamw_step.fsdp8", {"fsdp": 8}, (PS18, OS18, P("fsdp"), P("fsdp")), (PS18, OS18, P()), step18, (ARR18, O18, X18, Y18), note=LIBS)

# 21. family 8's eqx Conv2d + BatchNorm (State) sgd step, dp8.
C.gspmd("g.eqx_conv_batchnorm_state_sgd_step.dp8", {"dp": 8}, (filled(replicated(ARR8)), filled(replicated(ST8)),
                                                                  P("dp"), P("dp")),
        (filled(replicated(ARR8)), filled(replicated(ST8)), P()), step8, (ARR8, ST8, X8, Y8), note=LIBS)

# 22. eqx.nn.MultiheadAttention forward, heads over tp4, batch dp2, eqx.filter_shard on the output.
MESH20 = make_mesh({"dp": 2, "tp": 4})


def mha20(arr, x):
    return eqx.filter_shard(mha6(arr, x), NamedSharding(MESH20, P("dp")))


C.gspmd("g.eqx_mha_heads_tp_filter_shard_forward.dp2xtp4", {"dp": 2, "tp": 4}, (filled(PS6), P("dp")), P("dp"), mha20,
        (MHA6_ARR, X6), note=LIBS)

# 23. family 7's LSTM adam step, batch over dp2, the cell's hidden units over tp4.


def lstm_spec(path, a):
    name = jax.tree_util.keystr(path)
    if "cell" in name:
        return P("tp", None) if a.ndim == 2 else P("tp")
    return P(None, "tp") if a.ndim == 2 else P()


PS21 = jax.tree_util.tree_map_with_path(lstm_spec, ARR7)
PS21, OS21 = filled(PS21), filled(specs_like(O7, ARR7, PS21))
C.gspmd("g.eqx_lstmcell_scan_adam_step.dp2xtp4", {"dp": 2, "tp": 4},
        (PS21, OS21, P("dp"), P("dp")), (PS21, OS21, P()),
        step7, (ARR7, O7, X7, Y7), note=LIBS)


# 24. family 10's sequence-parallel MLP under GSPMD with bf16 compute
#     (nnx.Linear dtype=bfloat16, float32 params), sequence over tp4, batch dp2.
class SPMLPbf16(nnx.Module):
    def __init__(self, rngs):
        init = nnx.initializers.lecun_normal()
        self.norm = nnx.RMSNorm(D10, rngs=rngs)
        self.up = nnx.Linear(D10, F10, use_bias=False, dtype=jnp.bfloat16, kernel_init=part(init, (None, "tp")),
                             rngs=rngs)
        self.down = nnx.Linear(F10, D10, dtype=jnp.bfloat16, kernel_init=part(init, ("tp", None)),
                               bias_init=nnx.initializers.normal(0.5), rngs=rngs)

    def __call__(self, x):
        x = jax.lax.with_sharding_constraint(x, NamedSharding(MESH11, P("dp", "tp")))
        h = self.up(self.norm(x))
        h = jax.lax.with_sharding_constraint(h, NamedSharding(MESH11, P("dp", None, "tp")))
        return x + self.down(nnx.silu(h)).astype(jnp.float32)


SPB_G, _s22 = nnx.split(SPMLPbf16(nnx.Rngs(22)))
M22 = perturb(np_tree(_s22.to_pure_dict()), 0.2)
PS22 = nnx.get_partition_spec(_s22).to_pure_dict()
C.gspmd("g.nnx_bf16_sequence_parallel_mlp_forward.dp2xtp4", {"dp": 2, "tp": 4}, (PS22, P("dp", "tp")),
        P("dp", "tp"), lambda m, x: nnx.merge(SPB_G, m)(x), (M22, X10B), note=LIBS)


# 25. pair 15's encoder block, heads over tp4 and batch over dp2 (its activation
#     constraint now on the batch), an adamw step with the attention kernels sharded by head.
def head_spec(path, a):
    name = jax.tree_util.keystr(path)
    if "attn" in name and "out" in name:
        return P("tp", None, None) if a.ndim == 3 else P()
    if "attn" in name:
        return P(None, "tp", None) if a.ndim == 3 else P("tp", None)
    return P()


EN24_G = nnx.split(Encoder(nnx.Rngs(13), NamedSharding(MESH11, P("dp", None, None))))[0]
PS24 = jax.tree_util.tree_map_with_path(head_spec, M13)
TX24 = optax.adamw(1e-3)
OPT24_G, _o24 = nnx.split(nnx.Optimizer(nnx.merge(EN24_G, M13), TX24, wrt=nnx.Param))
O24 = jax.tree_util.tree_map_with_path(  # adam under way: moments not zero, nu >= 0
    lambda path, a: np.abs(a + R(*a.shape, scale=0.01)) if "nu" in jax.tree_util.keystr(path)
    else (a + R(*a.shape, scale=0.01) if "mu" in jax.tree_util.keystr(path) else a), np_tree(_o24.to_pure_dict()))


def step24(m, o, x, t):
    model, opt = nnx.merge(EN24_G, m), nnx.merge(OPT24_G, o)
    loss, grads = nnx.value_and_grad(lambda model: jnp.mean(jnp.square(model(x) - t)))(model)
    opt.update(model, grads)
    return nnx.state(model).to_pure_dict(), nnx.state(opt).to_pure_dict(), loss


C.gspmd("g.nnx_mha_encoder_heads_tp_adamw_step.dp2xtp4", {"dp": 2, "tp": 4},
        (PS24, specs_like(O24, M13, PS24), P("dp"), P("dp")), (PS24, specs_like(O24, M13, PS24), P()),
        step24, (M13, O24, R(4, 16, 16), R(4, 16, 16)), note=LIBS)
C.finish()
