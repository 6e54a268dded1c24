"""samples/fresh94: a 94th batch of programs as a user writes them, on the theme of model and loss code from maintained PyPI libraries that neither samples/wild nor samples/fresh91 uses -- haliax (named-axis NamedArray modules: hnn.Linear, hnn.attention.dot_product_attention with causal_mask, hnn.LayerNorm, hnn.cross_entropy_loss, axis-name -> mesh-axis mappings through haliax.partitioning.pspec_for_axis), jraph (GraphNetwork with custom aggregation functions, GAT, segment sums over edges sharded over devices), rlax (V-trace, policy-gradient and entropy losses, TD(lambda), the PPO clipped surrogate, categorical double Q-learning), distrax (MultivariateNormalDiag / Categorical log_prob, entropy and KL, a Transformed normalizing flow of MaskedCoupling + ScalarAffine bijectors) and optax extras (optax.contrib schedule_free_adamw, muon and sam, optax.MultiSteps gradient accumulation wrapped in apply_if_finite) -- with tiny configs and random init, none of them an idiom of samples/fresh .. fresh26, probe, train or wild.
Every model's parameters are passed as plain arrays: haliax modules are
flattened to their leaves and rebuilt inside the function with
jax.tree.unflatten on a treedef taken from jax.eval_shape of the module's own
init (with the local axis sizes inside shard_map bodies); jraph graphs are
rebuilt as jraph.GraphsTuple from their arrays.
shard_map families (the library's functions called on the local shards):
 1. a Megatron MLP of two haliax hnn.Linear modules (dp2 x tp4): a local
    Linear(embed -> mlp/tp) and a bias-free Linear(mlp/tp -> embed) on the
    rank's slices, the output NamedArray's .array psum'd over tp, the down
    bias added after. Bugs: the psum over dp instead of tp, the down
    bias added on every rank before the psum.
 2. haliax causal self-attention (hnn.attention.dot_product_attention with
    hnn.attention.causal_mask) with its heads over tp4 (local q/k/v Linear
    modules with heads/tp), batch over dp2; the output Linear's bias zeroed
    off rank 0, psum over tp. Bugs: no psum, the bias kept on every rank.
 3. jraph.GraphNetwork (edge, node and global updates) with the edges over
    ep8 and the nodes replicated: aggregate_edges_for_nodes_fn and
    aggregate_edges_for_globals_fn are segment_sum followed by psum over ep.
    Bugs: the edges->nodes aggregation without psum, the edges->globals
    aggregation pmean'd instead of psum'd.
 4. jraph.GAT vmapped over a batch of padded graphs, graphs over dp4, node
    regression loss, gradients pmean'd, optax.adam. Bugs: gradients not
    reduced, gradients psum'd (4x).
 5. rlax V-trace actor-critic (vtrace_td_error_and_advantage, policy
    gradient and entropy losses, vmapped over environments), environments
    over dp4, gradients pmean'd, optax.rmsprop. Bugs: no gradient pmean, only
    the policy's gradients pmean'd (the value head's left local).
 6. PPO with a distrax.Categorical policy (log_prob, entropy) and
    rlax.clipped_surrogate_pg_loss, TD(lambda) returns from rlax.td_lambda,
    advantages normalised with the GLOBAL batch mean/std (psum'd sums and
    sums of squares), batch over dp8, gradients pmean'd, optax.adam. Bugs:
    advantages normalised by the local statistics, gradients not reduced.
 7. a diagonal Gaussian policy from distrax.MultivariateNormalDiag with the
    action (event) dimension over tp4 and the batch over dp2: log_prob, KL to
    the old policy and entropy computed on the rank's event slice and psum'd
    over tp. Bugs: log_prob pmean'd instead of psum'd, the KL not psum'd, the
    entropy psum'd over dp too.
 8. a distrax normalizing flow (Transformed(MultivariateNormalDiag, Chain of
    MaskedCoupling layers with ScalarAffine bijectors and an MLP conditioner))
    trained by NLL with optax.contrib.schedule_free_adamw, batch over dp8,
    gradients pmean'd. Bugs: gradients not reduced, the NLL summed (psum)
    over devices before the gradient.
 9. optax.MultiSteps(apply_if_finite(adam), every_k_schedule=2) gradient
    accumulation on an MLP, the state one micro-step in so this step emits an
    update, batch over dp4, gradients pmean'd before the optimizer. Bugs:
    the optimizer's updates pmean'd instead of the gradients, no pmean.
GSPMD pairs (jax.jit with in/out shardings; correct): 10. a haliax pre-LN
transformer block (LayerNorm, causal attention, MLP) forward with the mapping
{batch: dp, heads: tp, mlp: tp} (dp2 x tp4); 11. a haliax next-token training
step (hnn.Embedding, block, hnn.cross_entropy_loss, adamw) with FSDP mapping
{embed: fsdp, batch: fsdp} over fsdp8; 12. jraph.GraphNetwork forward with
the edges over e8; 13. a jraph.GAT adam step over graphs dp2 and hidden units
tp4; 14. rlax categorical double Q-learning adam step (dp2 x tp4, hidden
units over tp); 15. the distrax flow NLL with an optax.contrib.muon step (the
conditioner's hidden units over tp4, batch over dp2); 16. an optax.contrib.sam
step (its non-opaque mode, adversarial step) on an MLP regression over dp8;
17. the rlax/distrax PPO loss and adam step over dp8 under GSPMD; 18. family
7's distrax log_prob / KL / entropy with the event dim over tp4 under GSPMD.
Libraries: haliax 1.3 (the newest release) does not import on jax 0.12
(jax._src.tree_util.BuiltInKeyEntry is gone); haliax 1.4.dev453 imports but
calls jax.core.is_constant_dim, which jax 0.12 removed: used with the one-line
shim below (jax.core.is_constant_dim = jax._src.core.is_constant_dim).
"""
import sys
import numpy as np
import jax, jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec as P
import jax._src.core as _jcore
if not hasattr(jax.core, "is_constant_dim"):  # haliax 1.4.dev453 on jax 0.12
    jax.core.is_constant_dim = _jcore.is_constant_dim
import optax
import optax.contrib
import haliax as hax
import haliax.nn as hnn
import haliax.partitioning as hp
import jraph
import rlax
import distrax
sys.path.insert(0, "samples/gen")  # run from the repository root (run_fresh94.sh)
from fresh_lib import Corpus, seeded, state_specs, np_tree  # noqa: E402

SCRIPT = "samples/gen/fresh94.py"
C = Corpus("samples/fresh94", SCRIPT, "samples/gen/run_fresh94.sh", sys.argv[1:])
rng, R, I = seeded(94)
from importlib.metadata import version as _v  # noqa: E402
LIBS = "haliax %s, jraph %s, rlax %s, distrax %s, optax %s" % tuple(
    _v(p) for p in ("haliax", "jraph", "rlax", "distrax", "optax"))


def leaves_np(tree):
    return [np.asarray(a) for a in jax.tree.leaves(tree)]


def tdef_of(make):
    """The treedef of the module make() builds, without running its init."""
    return jax.tree.structure(jax.eval_shape(make))


def hx_specs(module, mapping):
    """haliax: each NamedArray leaf's PartitionSpec under an axis mapping, as a leaf list."""
    named = jax.tree.leaves(module, is_leaf=lambda x: isinstance(x, hax.NamedArray))
    return [hp.pspec_for_axis(n.axes, mapping) for n in named]


KEY = jax.random.PRNGKey
rep = lambda t: jax.tree.map(lambda a: P(), t)

# ---------------------------------------------------------------------------
# 1. haliax Megatron MLP, dp2 x tp4.
Batch, Pos, Embed, Mlp = hax.Axis("batch", 8), hax.Axis("position", 6), hax.Axis("embed", 16), hax.Axis("mlp", 64)
MlpL = Mlp.resize(Mlp.size // 4)
UP = hnn.Linear.init(In=Embed, Out=Mlp, key=KEY(1))
DOWN = hnn.Linear.init(In=Mlp, Out=Embed, key=KEY(2))
P1 = {"up": leaves_np(UP), "down": leaves_np(DOWN)}  # [weight (out, in), bias]
P1["up"][1] = R(Mlp.size, scale=0.3)
P1["down"][1] = R(Embed.size, scale=0.3)
X1 = R(Batch.size, Pos.size, Embed.size)
T_UP, T_DOWN = tdef_of(lambda: UP), tdef_of(lambda: DOWN)
T_UPL = tdef_of(lambda: hnn.Linear.init(In=Embed, Out=MlpL, key=KEY(0)))
T_DOWNL = tdef_of(lambda: hnn.Linear.init(In=MlpL, Out=Embed, key=KEY(0), use_bias=False))


def mlp1(p, x):
    up, down = jax.tree.unflatten(T_UP, p["up"]), jax.tree.unflatten(T_DOWN, p["down"])
    xn = hax.named(x, (Batch, Pos, Embed))
    return down(hnn.gelu(up(xn))).rearrange((Batch, Pos, Embed)).array


def mlp1_tp(bug):
    def body(p, x):
        up = jax.tree.unflatten(T_UPL, p["up"])
        down = jax.tree.unflatten(T_DOWNL, p["down"][:1])
        xn = hax.named(x, (Batch.resize(x.shape[0]), Pos, Embed))
        y = down(hnn.gelu(up(xn))).rearrange((xn.axes[0], Pos, Embed)).array
        if bug == "bias-before-psum":
            y = y + p["down"][1]
        y = lax.psum(y, "dp" if bug == "psum-over-dp" else "tp")
        if bug != "bias-before-psum":
            y = y + p["down"][1]
        return y
    return body


PS1 = {"up": [P("tp", None), P("tp")], "down": [P(None, "tp"), P()]}
C.smap("s.haliax_linear_megatron_mlp.dp2xtp4", {"dp": 2, "tp": 4}, mlp1_tp, (PS1, P("dp")), P("dp"), mlp1, (P1, X1),
       bugs=[("psum-over-dp", ["wrong_axis"]), ("bias-before-psum", ["wrong_scale"])], note=LIBS)

# ---------------------------------------------------------------------------
# 2. haliax causal attention, heads over tp4, batch over dp2.
Heads, HSize = hax.Axis("heads", 8), hax.Axis("head_size", 4)
KPos = Pos.alias("key_position")
HeadsL = Heads.resize(2)


def attn_mods(H, key):
    k = jax.random.split(key, 4)
    return {"q": hnn.Linear.init(In=Embed, Out=(H, HSize), key=k[0]),
            "k": hnn.Linear.init(In=Embed, Out=(H, HSize), key=k[1]),
            "v": hnn.Linear.init(In=Embed, Out=(H, HSize), key=k[2]),
            "o": hnn.Linear.init(In=(H, HSize), Out=Embed, key=k[3])}


ATT = attn_mods(Heads, KEY(3))
P2 = {n: leaves_np(m) for n, m in ATT.items()}
for n in P2:
    P2[n][1] = R(*P2[n][1].shape, scale=0.3)
T_ATT = tdef_of(lambda: attn_mods(Heads, KEY(0)))
T_ATTL = tdef_of(lambda: attn_mods(HeadsL, KEY(0)))
X2 = R(4, Pos.size, Embed.size)


def hx_attention(m, xn):
    q = m["q"](xn)
    k = m["k"](xn).rename({"position": "key_position"})
    v = m["v"](xn).rename({"position": "key_position"})
    mask = hnn.attention.causal_mask(Pos, KPos)
    o = hnn.attention.dot_product_attention(KPos, HSize, q, k, v, mask=mask)
    return m["o"](o)


def attn2(p, x):
    m = jax.tree.unflatten(T_ATT, jax.tree.leaves(p))
    xn = hax.named(x, (Batch.resize(x.shape[0]), Pos, Embed))
    return hx_attention(m, xn).rearrange((xn.axes[0], Pos, Embed)).array


def attn2_tp(bug):
    def body(p, x):
        p = dict(p)
        if bug != "bias-every-rank":
            first = (lax.axis_index("tp") == 0).astype(x.dtype)
            p["o"] = [p["o"][0], p["o"][1] * first]
        m = jax.tree.unflatten(T_ATTL, jax.tree.leaves(p))
        xn = hax.named(x, (Batch.resize(x.shape[0]), Pos, Embed))
        y = hx_attention(m, xn).rearrange((xn.axes[0], Pos, Embed)).array
        return y if bug == "no-psum" else lax.psum(y, "tp")
    return body


col = [P("tp", None, None), P("tp", None)]  # weight (heads, head_size, embed), bias (heads, head_size)
PS2 = {"q": col, "k": col, "v": col, "o": [P(None, "tp", None), P()]}
C.smap("s.haliax_causal_attention_heads.dp2xtp4", {"dp": 2, "tp": 4}, attn2_tp, (PS2, P("dp")), P("dp"), attn2,
       (P2, X2), bugs=[("no-psum", ["missing_collective"]), ("bias-every-rank", ["wrong_scale"])], note=LIBS)

# ---------------------------------------------------------------------------
# 3. jraph.GraphNetwork, edges over ep8, nodes replicated.
N3, E3, FN, FE, FG, H3 = 12, 32, 6, 4, 3, 8
W3 = {"e": R(FE + 2 * FN + FG, H3, scale=0.4), "n": R(FN + H3 + FG, H3, scale=0.4),
      "g": R(FG + 2 * H3, FG, scale=0.4)}
NODES3, EDGES3, GLOB3 = R(N3, FN), R(E3, FE), R(1, FG)
SND3, RCV3 = I(0, N3, E3), I(0, N3, E3)


def gn3(w, agg_nodes, agg_globals):
    return jraph.GraphNetwork(
        update_edge_fn=lambda e, s, r, g: jnp.tanh(jnp.concatenate([e, s, r, g], -1) @ w["e"]),
        update_node_fn=lambda n, s, r, g: jax.nn.silu(jnp.concatenate([n, r, g], -1) @ w["n"]),
        update_global_fn=lambda n, e, g: jnp.concatenate([g, n, e], -1) @ w["g"],
        aggregate_edges_for_nodes_fn=agg_nodes, aggregate_edges_for_globals_fn=agg_globals)


def graph3(w, nodes, edges, glob, snd, rcv):
    g = jraph.GraphsTuple(nodes=nodes, edges=edges, senders=snd, receivers=rcv, globals=glob,
                          n_node=jnp.array([nodes.shape[0]]), n_edge=jnp.array([edges.shape[0]]))
    out = gn3(w, jraph.segment_sum, jraph.segment_sum)(g)
    return out.nodes, out.edges, out.globals


def graph3_ep(bug):
    def psum_agg(d, s, n):
        return lax.psum(jraph.segment_sum(d, s, n), "ep")

    def body(w, nodes, edges, glob, snd, rcv):
        g = jraph.GraphsTuple(nodes=nodes, edges=edges, senders=snd, receivers=rcv, globals=glob,
                              n_node=jnp.array([nodes.shape[0]]), n_edge=jnp.array([edges.shape[0]]))
        agg_n = jraph.segment_sum if bug == "nodes-agg-no-psum" else psum_agg
        agg_g = (lambda d, s, n: lax.pmean(jraph.segment_sum(d, s, n), "ep")) if bug == "globals-agg-pmean" \
            else psum_agg
        out = gn3(w, agg_n, agg_g)(g)
        return out.nodes, out.edges, out.globals
    return body


C.smap("s.jraph_graphnetwork_edges.ep8", {"ep": 8}, graph3_ep, (P(), P(), P("ep"), P(), P("ep"), P("ep")),
       (P(), P("ep"), P()), graph3, (W3, NODES3, EDGES3, GLOB3, SND3, RCV3),
       bugs=[("nodes-agg-no-psum", ["missing_collective"]), ("globals-agg-pmean", ["wrong_scale"])], note=LIBS)

# ---------------------------------------------------------------------------
# 4. jraph.GAT over a batch of graphs, graphs over dp4, adam.
G4, N4, E4, F4, H4 = 8, 6, 12, 5, 8
P4 = {"q": R(F4, H4, scale=0.4), "a": R(2 * H4, 1, scale=0.4), "out": R(H4, 1, scale=0.4)}
NODES4, SND4, RCV4, Y4 = R(G4, N4, F4), I(0, N4, G4, E4), I(0, N4, G4, E4), R(G4, N4, 1)
OPT4 = optax.adam(1e-2)
S4 = np_tree(OPT4.init(P4))


def gat4(p, nodes, snd, rcv):
    layer = jraph.GAT(attention_query_fn=lambda n: n @ p["q"],
                      attention_logit_fn=lambda s, r, e: jax.nn.leaky_relu(jnp.concatenate([s, r], -1) @ p["a"]),
                      node_update_fn=lambda n: jax.nn.elu(n) @ p["out"])
    g = jraph.GraphsTuple(nodes=nodes, edges=None, senders=snd, receivers=rcv, globals=None,
                          n_node=jnp.array([N4]), n_edge=jnp.array([E4]))
    return layer(g).nodes


def loss4(p, nodes, snd, rcv, y):
    pred = jax.vmap(gat4, (None, 0, 0, 0))(p, nodes, snd, rcv)
    return jnp.mean(jnp.square(pred - y))


def step4(p, s, nodes, snd, rcv, y):
    l, g = jax.value_and_grad(loss4)(p, nodes, snd, rcv, y)
    u, s = OPT4.update(g, s, p)
    return optax.apply_updates(p, u), s, l


def step4_dp(bug):
    def body(p, s, nodes, snd, rcv, y):
        l, g = jax.value_and_grad(loss4)(p, nodes, snd, rcv, y)
        if bug == "grad-psum":
            g = lax.psum(g, "dp")
        elif bug != "no-grad-pmean":
            g = lax.pmean(g, "dp")
        u, s = OPT4.update(g, s, p)
        return optax.apply_updates(p, u), s, lax.pmean(l, "dp")
    return body


C.smap("s.jraph_gat_graph_batch_adam_step.dp4", {"dp": 4}, step4_dp, (P(), P(), P("dp"), P("dp"), P("dp"), P("dp")),
       (P(), P(), P()), step4, (P4, S4, NODES4, SND4, RCV4, Y4),
       bugs=[("no-grad-pmean", ["missing_collective"]), ("grad-psum", ["wrong_scale"])], note=LIBS)

# ---------------------------------------------------------------------------
# 5. rlax V-trace actor-critic, environments over dp4, rmsprop.
T5, B5, D5, A5 = 8, 16, 6, 4
P5 = {"pi": R(D5, A5, scale=0.5), "v": R(D5, 1, scale=0.5)}
OBS5, MU5 = R(T5 + 1, B5, D5), R(T5, B5, A5)
ACT5, REW5 = I(0, A5, T5, B5), R(T5, B5)
DISC5 = (0.97 * (rng.random((T5, B5)) > 0.1)).astype(np.float32)
OPT5 = optax.rmsprop(3e-3, decay=0.9)
S5 = np_tree(OPT5.init(P5))


def vtrace_terms(p, obs, mu, a, r, disc):
    """Per environment: (policy-gradient + entropy loss, value loss); vmapped over axis 1."""
    def one(obs, mu, a, r, disc):
        logits = obs[:-1] @ p["pi"]
        v = (obs @ p["v"])[:, 0]
        logp = jax.nn.log_softmax(logits)
        logmu = jax.nn.log_softmax(mu)
        rho = jnp.exp(jnp.take_along_axis(logp, a[:, None], 1) - jnp.take_along_axis(logmu, a[:, None], 1))[:, 0]
        out = rlax.vtrace_td_error_and_advantage(v[:-1], v[1:], r, disc, rho, lambda_=0.95)
        w = jnp.ones_like(r)
        pg = rlax.policy_gradient_loss(logits, a, out.pg_advantage, w) + 0.01 * rlax.entropy_loss(logits, w)
        return pg, 0.5 * jnp.mean(jnp.square(out.errors))
    return jax.vmap(one, (1, 1, 1, 1, 1))(obs, mu, a, r, disc)


def loss5(p, *batch):
    pg, vl = vtrace_terms(p, *batch)
    return jnp.mean(pg) + jnp.mean(vl)


def step5(p, s, *batch):
    l, g = jax.value_and_grad(loss5)(p, *batch)
    u, s = OPT5.update(g, s, p)
    return optax.apply_updates(p, u), s, l


def step5_dp(bug):
    def body(p, s, *batch):
        l, g = jax.value_and_grad(loss5)(p, *batch)  # the local environments' mean loss
        if bug == "grad-pmean-pi-only":
            g = {"pi": lax.pmean(g["pi"], "dp"), "v": g["v"]}
        elif bug != "no-grad-pmean":
            g = lax.pmean(g, "dp")
        u, s = OPT5.update(g, s, p)
        return optax.apply_updates(p, u), s, lax.pmean(l, "dp")
    return body


C.smap("s.rlax_vtrace_actor_critic_rmsprop.dp4", {"dp": 4}, step5_dp,
       (P(), P(), P(None, "dp"), P(None, "dp"), P(None, "dp"), P(None, "dp"), P(None, "dp")), (P(), P(), P()),
       step5, (P5, S5, OBS5, MU5, ACT5, REW5, DISC5),
       bugs=[("no-grad-pmean", ["missing_collective"]), ("grad-pmean-pi-only", ["missing_collective"])], note=LIBS)

# ---------------------------------------------------------------------------
# 6. PPO: distrax.Categorical policy, rlax clipped surrogate, td_lambda returns, dp8.
T6, B6, D6, A6 = 6, 16, 5, 3
P6 = {"pi": R(D6, A6, scale=0.5), "v": R(D6, 1, scale=0.5)}
OBS6, ACT6, REW6 = R(T6 + 1, B6, D6), I(0, A6, T6, B6), R(T6, B6)
OLDLP6 = np.log(rng.uniform(0.2, 0.6, (T6, B6))).astype(np.float32)
OPT6 = optax.adam(3e-3)
S6 = np_tree(OPT6.init(P6))


def ppo_parts(p, obs, a, r, oldlp):
    logits = obs[:-1] @ p["pi"]
    v = (obs @ p["v"])[..., 0]
    ret = jax.vmap(lambda v_tm1, r, v_t: rlax.td_lambda(v_tm1, r, jnp.full_like(r, 0.99), v_t, 0.9),
                   (1, 1, 1), 1)(v[:-1], r, v[1:])
    adv = lax.stop_gradient(ret - v[:-1])
    pi = distrax.Categorical(logits=logits)
    ratio = jnp.exp(pi.log_prob(a) - oldlp)
    return adv, ratio, pi.entropy(), jnp.square(ret - v[:-1])


def ppo_loss(adv_n, ratio, ent, vsq):
    pg = rlax.clipped_surrogate_pg_loss(ratio.reshape(-1), adv_n.reshape(-1), 0.2)
    return pg + 0.5 * jnp.mean(vsq) - 0.01 * jnp.mean(ent)


def loss6(p, obs, a, r, oldlp):
    adv, ratio, ent, vsq = ppo_parts(p, obs, a, r, oldlp)
    adv_n = (adv - adv.mean()) / (adv.std() + 1e-6)
    return ppo_loss(adv_n, ratio, ent, vsq)


def step6(p, s, *batch):
    l, g = jax.value_and_grad(loss6)(p, *batch)
    u, s = OPT6.update(g, s, p)
    return optax.apply_updates(p, u), s, l


def step6_dp(bug):
    def loss_local(p, obs, a, r, oldlp):
        adv, ratio, ent, vsq = ppo_parts(p, obs, a, r, oldlp)
        if bug == "local-adv-norm":
            mean, std = adv.mean(), adv.std()
        else:
            n = lax.psum(adv.size, "dp")
            mean = lax.psum(adv.sum(), "dp") / n
            std = jnp.sqrt(lax.psum(jnp.sum(jnp.square(adv - mean)), "dp") / n)
        return ppo_loss((adv - mean) / (std + 1e-6), ratio, ent, vsq)

    def body(p, s, *batch):
        l, g = jax.value_and_grad(loss_local)(p, *batch)
        if bug != "no-grad-pmean":
            g = lax.pmean(g, "dp")
        u, s = OPT6.update(g, s, p)
        return optax.apply_updates(p, u), s, lax.pmean(l, "dp")
    return body


C.smap("s.rlax_distrax_ppo_clipped_adam.dp8", {"dp": 8}, step6_dp,
       (P(), P(), P(None, "dp"), P(None, "dp"), P(None, "dp"), P(None, "dp")), (P(), P(), P()),
       step6, (P6, S6, OBS6, ACT6, REW6, OLDLP6),
       bugs=[("local-adv-norm", ["wrong_scale"]), ("no-grad-pmean", ["missing_collective"])], note=LIBS)

# ---------------------------------------------------------------------------
# 7. distrax MultivariateNormalDiag with the event dim over tp4, batch over dp2.
B7, A7 = 8, 16
MU7, LS7, OMU7, OLS7, ACT7 = R(B7, A7), R(B7, A7, scale=0.3), R(B7, A7), R(B7, A7, scale=0.3), R(B7, A7)


def gauss7(mu, ls, omu, ols, a):
    pi = distrax.MultivariateNormalDiag(mu, jnp.exp(ls))
    old = distrax.MultivariateNormalDiag(omu, jnp.exp(ols))
    return pi.log_prob(a), pi.kl_divergence(old), pi.entropy()


def gauss7_tp(bug):
    def body(mu, ls, omu, ols, a):
        lp, kl, ent = gauss7(mu, ls, omu, ols, a)
        lp = lax.pmean(lp, "tp") if bug == "logprob-pmean" else lax.psum(lp, "tp")
        if bug != "kl-no-psum":
            kl = lax.psum(kl, "tp")
        ent = lax.psum(ent, ("dp", "tp") if bug == "entropy-psum-dp-too" else "tp")
        return lp, kl, ent
    return body


sp7 = P("dp", "tp")
C.smap("s.distrax_mvn_diag_event_sharded.dp2xtp4", {"dp": 2, "tp": 4}, gauss7_tp, (sp7,) * 5, (P("dp"),) * 3,
       gauss7, (MU7, LS7, OMU7, OLS7, ACT7),
       bugs=[("logprob-pmean", ["wrong_scale"]), ("kl-no-psum", ["missing_collective"]),
             ("entropy-psum-dp-too", ["wrong_axis"])], note=LIBS)

# ---------------------------------------------------------------------------
# 8. distrax coupling flow, NLL, optax.contrib.schedule_free_adamw, dp8.
D8, H8 = 4, 16
MASKS8 = [np.arange(D8) % 2 == 0, np.arange(D8) % 2 == 1]


def flow_init(key):
    ks = jax.random.split(key, 4)
    return [{"w1": np.asarray(jax.random.normal(ks[2 * i], (D8, H8)) * 0.4), "b1": np.zeros(H8, np.float32),
             "w2": np.asarray(jax.random.normal(ks[2 * i + 1], (H8, 2 * D8)) * 0.1),
             "b2": np.zeros(2 * D8, np.float32)} for i in range(2)]


def make_flow(p):
    layers = []
    for lp, mask in zip(p, MASKS8):
        def cond(x, lp=lp):
            h = jnp.tanh(x @ lp["w1"] + lp["b1"]) @ lp["w2"] + lp["b2"]
            return h[..., :D8], h[..., D8:]

        def bij(params):
            shift, log_scale = params
            return distrax.ScalarAffine(shift=shift, log_scale=jnp.tanh(log_scale))
        layers.append(distrax.MaskedCoupling(mask=mask, conditioner=cond, bijector=bij))
    base = distrax.MultivariateNormalDiag(jnp.zeros(D8), jnp.ones(D8))
    return distrax.Transformed(base, distrax.Chain(layers))


P8 = flow_init(KEY(8))
X8 = (R(32, D8) @ R(D8, D8, scale=0.6) + 0.5).astype(np.float32)
OPT8 = optax.contrib.schedule_free_adamw(1e-2, warmup_steps=3)
S8 = np_tree(OPT8.init(P8))


def nll8(p, x):
    return -jnp.mean(make_flow(p).log_prob(x))


def step8(p, s, x):
    l, g = jax.value_and_grad(nll8)(p, x)
    u, s = OPT8.update(g, s, p)
    return optax.apply_updates(p, u), s, l


def step8_dp(bug):
    def loss_dp(p, x):
        l = nll8(p, x)
        return lax.psum(l, "dp") if bug == "nll-psum" else l

    def body(p, s, x):
        l, g = jax.value_and_grad(loss_dp)(p, x)
        if bug == "nll-psum":
            g = lax.psum(g, "dp")
        elif bug != "no-grad-pmean":
            g = lax.pmean(g, "dp")
        u, s = OPT8.update(g, s, p)
        return optax.apply_updates(p, u), s, lax.pmean(l, "dp")
    return body


C.smap("s.distrax_coupling_flow_schedule_free.dp8", {"dp": 8}, step8_dp, (P(), P(), P("dp")), (P(), P(), P()),
       step8, (P8, S8, X8), bugs=[("no-grad-pmean", ["missing_collective"]), ("nll-psum", ["wrong_scale"])],
       note=LIBS)

# ---------------------------------------------------------------------------
# 9. optax.MultiSteps(apply_if_finite(adam)) gradient accumulation, dp4.
P9 = {"w1": R(8, 32, scale=0.3), "b1": R(32, scale=0.1), "w2": R(32, 4, scale=0.3)}
X9, Y9 = R(16, 8), R(16, 4)
OPT9 = optax.MultiSteps(optax.apply_if_finite(optax.adam(1e-2), max_consecutive_errors=3), every_k_schedule=2)


def loss9(p, x, y):
    return jnp.mean(jnp.square(jax.nn.gelu(x @ p["w1"] + p["b1"]) @ p["w2"] - y))


# one micro-step already accumulated: the next update applies adam to the mean of the two
S9 = np_tree(OPT9.update(jax.grad(loss9)(P9, X9[::-1], Y9[::-1] * 0.5), OPT9.init(P9), P9)[1])


def step9(p, s, x, y):
    l, g = jax.value_and_grad(loss9)(p, x, y)
    u, s = OPT9.update(g, s, p)
    return optax.apply_updates(p, u), s, l


def step9_dp(bug):
    def body(p, s, x, y):
        l, g = jax.value_and_grad(loss9)(p, x, y)
        if bug not in ("pmean-updates", "no-pmean"):
            g = lax.pmean(g, "dp")
        u, s = OPT9.update(g, s, p)
        if bug == "pmean-updates":
            u = lax.pmean(u, "dp")
        return optax.apply_updates(p, u), s, lax.pmean(l, "dp")
    return body


C.smap("s.optax_multisteps_apply_if_finite_adam.dp4", {"dp": 4}, step9_dp, (P(), P(), P("dp"), P("dp")),
       (P(), P(), P()), step9, (P9, S9, X9, Y9),
       bugs=[("pmean-updates", ["wrong_order"]), ("no-pmean", ["missing_collective"])], note=LIBS)

# ---------------------------------------------------------------------------
# GSPMD pairs.
# 10. haliax pre-LN transformer block forward, {batch: dp, heads: tp, mlp: tp}, dp2 x tp4.
def block_mods(key):
    k = jax.random.split(key, 4)
    return {"ln1": hnn.LayerNorm.init(Embed), "attn": attn_mods(Heads, k[0]), "ln2": hnn.LayerNorm.init(Embed),
            "up": hnn.Linear.init(In=Embed, Out=Mlp, key=k[1]), "down": hnn.Linear.init(In=Mlp, Out=Embed, key=k[2])}


BLK = block_mods(KEY(10))
T_BLK = jax.tree.structure(BLK)
P10 = [a + R(*a.shape, scale=0.1) for a in leaves_np(BLK)]
MAP10 = {"batch": "dp", "heads": "tp", "mlp": "tp"}


def block(m, xn):
    xn = xn + hx_attention(m["attn"], m["ln1"](xn))
    return xn + m["down"](hnn.gelu(m["up"](m["ln2"](xn))))


def block10(p, x):
    xn = hax.named(x, (Batch, Pos, Embed))
    return block(jax.tree.unflatten(T_BLK, p), xn).rearrange((Batch, Pos, Embed)).array


PS10 = hx_specs(BLK, MAP10)
C.gspmd("g.haliax_preln_block_forward_mapping.dp2xtp4", {"dp": 2, "tp": 4}, (PS10, P("dp")), P("dp"), block10,
        (P10, X1), note=LIBS)

# 11. haliax next-token training step, FSDP mapping over fsdp8.
Vocab = hax.Axis("vocab", 32)


def lm_mods(key):
    k = jax.random.split(key, 2)
    return {"emb": hnn.Embedding.init(Vocab, Embed, key=k[0]), "blk": block_mods(k[1]),
            "head": hnn.Linear.init(In=Embed, Out=Vocab, key=k[1], use_bias=False)}


LM = lm_mods(KEY(11))
T_LM = jax.tree.structure(LM)
P11 = leaves_np(LM)
OPT11 = optax.adamw(3e-3, weight_decay=0.1)
S11 = np_tree(OPT11.init(P11))
TOK11 = I(0, Vocab.size, Batch.size, Pos.size + 1)


def loss11(p, tok):
    m = jax.tree.unflatten(T_LM, p)
    inp = hax.named(tok[:, :-1], (Batch, Pos))
    tgt = hax.named(tok[:, 1:], (Batch, Pos))
    logits = m["head"](block(m["blk"], m["emb"](inp)))
    return hnn.cross_entropy_loss(logits, Vocab, hnn.one_hot(tgt, Vocab), reduction=hax.mean).array


def step11(p, s, tok):
    l, g = jax.value_and_grad(loss11)(p, tok)
    u, s = OPT11.update(g, s, p)
    return optax.apply_updates(p, u), s, l


PS11 = hx_specs(LM, {"embed": "fsdp", "batch": "fsdp"})
SS11 = jax.tree.map(lambda a: P(), S11)
SS11 = (SS11[0]._replace(mu=PS11, nu=PS11),) + tuple(SS11[1:])
C.gspmd("g.haliax_lm_adamw_step_fsdp_mapping.fsdp8", {"fsdp": 8}, (PS11, SS11, P("fsdp")), (PS11, SS11, P()),
        step11, (P11, S11, TOK11), note=LIBS)

# 12. jraph.GraphNetwork forward, edges over e8 (GSPMD).
C.gspmd("g.jraph_graphnetwork_edges_sharded.e8", {"e": 8}, (P(), P(), P("e"), P(), P("e"), P("e")),
        (P(), P("e"), P()), graph3, (W3, NODES3, EDGES3, GLOB3, SND3, RCV3), note=LIBS)

# 13. jraph.GAT adam step, graphs over dp2, hidden units over tp4.
PS13 = {"q": P(None, "tp"), "a": P(), "out": P("tp", None)}
SS13 = state_specs(S4, PS13)
C.gspmd("g.jraph_gat_adam_step_graphs_hidden.dp2xtp4", {"dp": 2, "tp": 4},
        (PS13, SS13, P("dp"), P("dp"), P("dp"), P("dp")), (PS13, SS13, P()), step4,
        (P4, S4, NODES4, SND4, RCV4, Y4), note=LIBS)

# 14. rlax categorical double Q-learning, adam, dp2 x tp4.
B14, D14, A14, NA14, H14 = 16, 6, 3, 11, 32
ATOMS14 = np.linspace(-5.0, 5.0, NA14).astype(np.float32)
P14 = {"w1": R(D14, H14, scale=0.4), "w2": R(H14, A14 * NA14, scale=0.2)}
TGT14 = jax.tree.map(lambda a: a + R(*a.shape, scale=0.05), P14)
O14, O14N = R(B14, D14), R(B14, D14)
A14_, R14 = I(0, A14, B14), R(B14)
DISC14 = (0.99 * (rng.random(B14) > 0.2)).astype(np.float32)
OPT14 = optax.adam(1e-3)
S14 = np_tree(OPT14.init(P14))


def qnet(p, o):
    return (jax.nn.relu(o @ p["w1"]) @ p["w2"]).reshape(o.shape[0], A14, NA14)


def loss14(p, tp, o, a, r, d, on):
    q_logits_tm1 = qnet(p, o)
    q_logits_t = qnet(tp, on)
    sel = jnp.sum(jax.nn.softmax(qnet(p, on)) * ATOMS14, -1)
    l = jax.vmap(rlax.categorical_double_q_learning, (None, 0, 0, 0, 0, None, 0, 0))(
        ATOMS14, q_logits_tm1, a, r, d, ATOMS14, q_logits_t, sel)
    return jnp.mean(l)


def step14(p, s, tp, o, a, r, d, on):
    l, g = jax.value_and_grad(loss14)(p, tp, o, a, r, d, on)
    u, s = OPT14.update(g, s, p)
    return optax.apply_updates(p, u), s, l


PS14 = {"w1": P(None, "tp"), "w2": P("tp", None)}
C.gspmd("g.rlax_categorical_double_q_adam.dp2xtp4", {"dp": 2, "tp": 4},
        (PS14, state_specs(S14, PS14), PS14) + (P("dp"),) * 5, (PS14, state_specs(S14, PS14), P()), step14,
        (P14, S14, TGT14, O14, A14_, R14, DISC14, O14N), note=LIBS)

# 15. distrax flow NLL + optax.contrib.muon, conditioner hidden over tp4, batch over dp2.
OPT15 = optax.contrib.muon(1e-2)
S15 = np_tree(OPT15.init(P8))


def step15(p, s, x):
    l, g = jax.value_and_grad(nll8)(p, x)
    u, s = OPT15.update(g, s, p)
    return optax.apply_updates(p, u), s, l


PS15 = [{"w1": P(None, "tp"), "b1": P("tp"), "w2": P("tp", None), "b2": P()} for _ in range(2)]
SS15 = jax.tree.map(lambda a: P(), S15)
C.gspmd("g.distrax_flow_muon_step.dp2xtp4", {"dp": 2, "tp": 4}, (PS15, SS15, P("dp")), (PS15, SS15, P()), step15,
        (P8, S15, X8), note=LIBS)

# 16. optax.contrib.sam (non-opaque, the adversarial step) on an MLP over dp8.
OPT16 = optax.contrib.sam(optax.sgd(0.05, momentum=0.9), optax.sgd(0.05), sync_period=2)
S16 = np_tree(OPT16.init(P9))


def step16(p, s, x, y):
    l, g = jax.value_and_grad(loss9)(p, x, y)
    u, s = OPT16.update(g, s, p)
    return optax.apply_updates(p, u), s, l


C.gspmd("g.optax_contrib_sam_step.dp8", {"dp": 8}, (rep(P9), rep(S16), P("dp"), P("dp")), (rep(P9), rep(S16), P()),
        step16, (P9, S16, X9, Y9), note=LIBS)

# 17. PPO (rlax + distrax) adam step, batch over dp8 (GSPMD).
C.gspmd("g.rlax_distrax_ppo_adam_step.dp8", {"dp": 8},
        (P(), P(), P(None, "dp"), P(None, "dp"), P(None, "dp"), P(None, "dp")), (P(), P(), P()),
        step6, (P6, S6, OBS6, ACT6, REW6, OLDLP6), note=LIBS)

# 18. the distrax MultivariateNormalDiag log_prob / KL / entropy with the event dim over tp4 (GSPMD).
C.gspmd("g.distrax_mvn_diag_event_sharded.dp2xtp4", {"dp": 2, "tp": 4}, (sp7,) * 5, (P("dp"),) * 3, gauss7,
        (MU7, LS7, OMU7, OLS7, ACT7), note=LIBS)

C.finish()
