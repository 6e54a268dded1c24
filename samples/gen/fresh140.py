"""samples/fresh140: a 140th batch of programs as a user writes them, on the theme of mixture-of-experts layers and their training steps as current open-source JAX code writes them (Switch / GShard / Mixtral / DeepSeek-MoE styles): top-1 and top-k routing with jax.lax.top_k, softmax-then-topk vs topk-then-softmax gates, expert capacity with token dropping (position in expert by cumsum of the one-hot dispatch mask), load-balancing auxiliary loss and router z-loss, shared experts beside routed ones, fine-grained experts, dense einsum dispatch / combine tensors vs sort-based dispatch (argsort by expert id, gather, ragged_dot, segment sums), expert parallelism by all_to_all over an ep axis in shard_map (dp x ep meshes, ep x tp with the expert MLP column / row parallel inside), and GSPMD pairs with the expert weights sharded over an expert axis and the dispatch einsums left to the partitioner.
Sizes: D=16, 8 experts of hidden 16 (16 fine-grained experts of hidden 8
with a shared expert of hidden 16 in the DeepSeek families), GELU expert
MLPs. Capacity follows GShard's groups: the single-device baselines route
tokens in G groups (one per device of the token axes) with a capacity of
ceil(cf * k * group_size / E) slots per expert and group, dropping the
overflow; a dropped token's MoE output is 0.
shard_map families (bugs in brackets):
 1. Switch top-1 (softmax then top-1, the gate is the chosen probability),
    capacity factor 1 with dropping, dense one-hot cumsum dispatch, expert
    parallelism (dp2 x ep4) by all_to_all [E, C, D] -> [E/ep, ep*C, D] and
    back. [the capacity from the global token count; the forward
    all_to_all with split / concat axes swapped (reshaped back).]
 2. Mixtral top-2 with renormalised gates (softmax, top-2, divided by their
    sum), dropless sort-based dispatch over the local expert slice
    (dp2 x ep4, tokens replicated over ep): argsort by local expert id
    (other devices' experts sorted last into a zero expert), gather,
    jax.lax.ragged_dot, segment_sum back to the tokens, psum over ep.
    [the local expert id without the rank's offset; the gates not
    renormalised.]
 3. DeepSeek-MoE (ep2 x tp4, tokens replicated): 16 fine-grained experts,
    top-4 softmax gates without renormalisation, the local expert slice
    of the combine tensor by dynamic_slice, expert MLPs column / row
    parallel over tp, one shared expert column / row parallel over tp.
    [the row-parallel routed projection psum'd over ep instead of tp; the
    shared expert's output added before the psum over ep (counted twice).]
 4. data-parallel training step (dp8) of a top-2 MoE layer with the
    Switch load-balancing loss (fractions of top-1 assignments x mean
    router probabilities, over the global batch) and the router z-loss:
    local loss contributions over the global token count, gradients
    psum'd, optax.adam (warmed). [the load-balancing loss from each
    device's local fractions and probabilities, averaged; the gradients
    pmean'd instead of psum'd.]
 5. top-2 (top-k then softmax) with capacity by sort-based dispatch (ep4):
    stable argsort by expert id, position in expert = sorted index - the
    expert's start, scatter into the [E, C, D] buffer, all_to_all over ep
    and back, gather and segment_sum. [the position from the inclusive
    count (off by one); the segment_sum over the unsorted token ids.]
 6. GShard top-2 (ep8, one expert per device): second-choice positions
    after all first choices, capacity 1x, and the auxiliary loss as a
    second output. [the second choices' positions not offset by the
    first-choice counts; the auxiliary loss from local fractions,
    pmean'd.]
 7. expert-parallel training step (dp2 x ep4): Switch top-1 with capacity,
    value_and_grad through the all_to_alls, expert gradients psum'd over
    dp, router gradients over (dp, ep), optax.adam (warmed). [the expert
    gradients psum'd over (dp, ep); the router gradient psum'd over dp
    only.]
 8. ep4 x tp2 Mixtral top-2 with capacity 2x: all_to_all over ep, the
    experts column / row parallel over tp with a psum over tp, all_to_all
    back. [no psum over tp after the row-parallel projection; the return
    all_to_all over tp instead of ep.]
GSPMD pairs (jax.jit with NamedSharding in/out shardings; correct):
 9. Switch top-1 grouped capacity forward, groups and experts over ep8;
 10. Mixtral top-2 grouped capacity training step (adamw + clip), groups
     over dp2, experts over ep4;
 11. DeepSeek-MoE forward, experts over ep4 with their MLP over tp2, the
     shared expert over tp2;
 12. sort-based capacity dispatch (vmapped over groups) forward, ep4;
 13. training step with the load-balancing and z losses (adamw + clip),
     tokens over dp2, experts over ep4.
Numerics: f32 throughout; correct pairs agree at about 1e-6; bug variants
differ clearly.
Run from the repository root: bash samples/gen/run_fresh140.sh [SUBSTR...]
"""
import math
import sys
import numpy as np
import jax, jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec as P
import optax
sys.path.insert(0, "samples/gen")  # run from the repository root (run_fresh140.sh)
from fresh_lib import Corpus, seeded, state_specs  # noqa: E402

SCRIPT = "samples/gen/fresh140.py"
C = Corpus("samples/fresh140", SCRIPT, "samples/gen/run_fresh140.sh", sys.argv[1:])
rng, R, I = seeded(140140)
psum, pmean, idx = lax.psum, lax.pmean, lax.axis_index
f32 = jnp.float32
D, E, FE = 16, 8, 16


# ---------------------------------------------------------------------------
# routing, dispatch, experts


def capacity(n, k, cf, e=E):
    return int(math.ceil(cf * k * n / e))


def gate_softmax_topk(logits, k, renorm):
    """softmax over all experts, then top-k (Switch, GShard, DeepSeek); renorm: Mixtral's division."""
    p = jax.nn.softmax(logits, -1)
    v, i = lax.top_k(p, k)
    if renorm:
        v = v / jnp.sum(v, -1, keepdims=True)
    return v, i


def gate_topk_softmax(logits, k):
    """top-k of the logits, then softmax over the k (Mixtral's reference code)."""
    v, i = lax.top_k(logits, k)
    return jax.nn.softmax(v, -1), i


def dispatch_combine(topi, gates, cap, priority="k", e=E):
    """dense dispatch [n, E, C] (0/1) and combine [n, E, C] (gate) tensors; the position of an
    assignment in its expert is the exclusive cumsum of the one-hot mask in priority order
    ("k": all first choices before the second ones, GShard; "token": token-major)."""
    n, k = topi.shape
    oh = jax.nn.one_hot(topi, e, dtype=f32)                      # [n, k, E]
    if priority == "k":
        flat = jnp.swapaxes(oh, 0, 1).reshape(k * n, e)
    else:
        flat = oh.reshape(n * k, e)
    pos = jnp.sum((jnp.cumsum(flat, 0) - flat) * flat, -1).astype(jnp.int32)
    d = flat[:, :, None] * jax.nn.one_hot(pos, cap, dtype=f32)[:, None, :]  # overflow: zero row
    if priority == "k":
        d = jnp.swapaxes(d.reshape(k, n, e, cap), 0, 1)
    else:
        d = d.reshape(n, k, e, cap)
    return jnp.sum(d, 1), jnp.einsum("nk,nkec->nec", gates, d)


def ffn(x, wi, wo):
    """expert MLPs: x [..., e, c, D] against [e, D, F], [e, F, D]."""
    return jnp.einsum("...ecf,efd->...ecd", jax.nn.gelu(jnp.einsum("...ecd,edf->...ecf", x, wi)), wo)


def moe_grouped(x, wr, wi, wo, G, k, cf, gate, priority="k"):
    """single-device GShard-style MoE over G groups of tokens with capacity per group and expert."""
    xg = x.reshape(G, -1, x.shape[-1])
    cap = capacity(xg.shape[1], k, cf)

    def one(xs):
        g, i = gate(xs @ wr)
        return dispatch_combine(i, g, cap, priority)
    disp, comb = jax.vmap(one)(xg)
    buf = jnp.einsum("gnec,gnd->gecd", disp, xg)
    out = ffn(buf, wi, wo)
    return jnp.einsum("gnec,gecd->gnd", comb, out).reshape(x.shape)


switch_gate = lambda l: gate_softmax_topk(l, 1, False)  # noqa: E731
mixtral_gate = lambda l: gate_topk_softmax(l, 2)       # noqa: E731


def expert_weights(e=E, f=FE, d=D):
    return R(D, e, scale=0.5), R(e, d, f, scale=d ** -0.5), R(e, f, d, scale=f ** -0.5)


# ---------------------------------------------------------------------------
# 1. Switch top-1 with capacity and dropping, all_to_all over ep.
N1, G1, CF1 = 256, 8, 1.0


def switch_ref(x, wr, wi, wo):
    return moe_grouped(x, wr, wi, wo, G1, 1, CF1, switch_gate)


def switch_ep(bug):
    def f(x, wr, wi, wo):
        n, el = x.shape[0], wi.shape[0]
        cap = capacity(N1, 1, CF1) if bug == "capacity-from-global-tokens" else capacity(n, 1, CF1)
        g, i = switch_gate(x @ wr)
        disp, comb = dispatch_combine(i, g, cap)
        buf = jnp.einsum("nec,nd->ecd", disp, x)                       # [E, C, D]
        if bug == "a2a-split-concat-swapped":
            buf = lax.all_to_all(buf, "ep", 1, 0, tiled=True).reshape(el, -1, D)
        else:
            buf = lax.all_to_all(buf, "ep", 0, 1, tiled=True).reshape(el, -1, D)   # [E/ep, ep*C, D]
        out = ffn(buf, wi, wo)
        out = lax.all_to_all(out, "ep", 1, 0, tiled=True).reshape(E, cap, D)
        return jnp.einsum("nec,ecd->nd", comb, out)
    return f


W1 = expert_weights()
C.smap("s.switch_top1_capacity_drop_all_to_all.dp2xep4", {"dp": 2, "ep": 4}, switch_ep,
       (P(("dp", "ep")), P(), P("ep"), P("ep")), P(("dp", "ep")), switch_ref, (R(N1, D),) + W1,
       bugs=[("capacity-from-global-tokens", ["wrong-value", "local-statistic"]),
             ("a2a-split-concat-swapped", ["wrong-layout", "wrong-permutation"])])

# ---------------------------------------------------------------------------
# 2. Mixtral top-2, dropless sort-based dispatch over the local expert slice, ragged_dot.
N2, K2 = 64, 2


def sorted_experts(x, topi, gates, wi, wo, first):
    """dropless: the assignments of experts first .. first+el-1 sorted by expert, the others last
    (into an all-zero expert), ragged_dot, weighted and segment-summed back to their tokens."""
    n, k = topi.shape
    el = wi.shape[0]
    lid = topi.reshape(-1) - first
    ok = (lid >= 0) & (lid < el)
    key = jnp.where(ok, lid, el)
    order = jnp.argsort(key, stable=True)
    tok = (jnp.arange(n * k) // k)[order]
    sizes = jnp.bincount(key, length=el + 1).astype(jnp.int32)
    wi_z = jnp.concatenate([wi, jnp.zeros_like(wi[:1])], 0)
    wo_z = jnp.concatenate([wo, jnp.zeros_like(wo[:1])], 0)
    h = jax.nn.gelu(lax.ragged_dot(x[tok], wi_z, sizes))
    out = lax.ragged_dot(h, wo_z, sizes)
    w = jnp.where(ok, gates.reshape(-1), 0.0)[order]
    return jax.ops.segment_sum(out * w[:, None], tok, num_segments=n)


def mixtral_ref(x, wr, wi, wo):
    g, i = gate_softmax_topk(x @ wr, K2, True)
    return sorted_experts(x, i, g, wi, wo, 0)


def mixtral_sorted_ep(bug):
    def f(x, wr, wi, wo):
        g, i = gate_softmax_topk(x @ wr, K2, bug != "gates-not-renormalised")
        first = 0 if bug == "no-expert-offset" else idx("ep") * wi.shape[0]
        return psum(sorted_experts(x, i, g, wi, wo, first), "ep")
    return f


C.smap("s.mixtral_top2_sorted_ragged_dot_expert_slice.dp2xep4", {"dp": 2, "ep": 4}, mixtral_sorted_ep,
       (P("dp"), P(), P("ep"), P("ep")), P("dp"), mixtral_ref, (R(N2, D),) + expert_weights(),
       bugs=[("no-expert-offset", ["wrong-offset"]), ("gates-not-renormalised", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 3. DeepSeek-MoE: fine-grained routed experts + shared expert, ep2 x tp4.
N3, E3, F3, K3, FS3 = 32, 16, 8, 4, 16


def deepseek_ref(x, wr, wi, wo, si, so):
    g, i = gate_softmax_topk(x @ wr, K3, False)
    comb = jnp.sum(jax.nn.one_hot(i, E3, dtype=f32) * g[..., None], 1)         # [n, E]
    h = jax.nn.gelu(jnp.einsum("nd,edf->enf", x, wi))
    routed = jnp.einsum("ne,end->nd", comb, jnp.einsum("enf,efd->end", h, wo))
    return routed + jax.nn.gelu(x @ si) @ so


def deepseek_ep_tp(bug):
    def f(x, wr, wi, wo, si, so):
        el = wi.shape[0]
        g, i = gate_softmax_topk(x @ wr, K3, False)
        comb = jnp.sum(jax.nn.one_hot(i, E3, dtype=f32) * g[..., None], 1)
        comb = lax.dynamic_slice_in_dim(comb, idx("ep") * el, el, 1)            # local experts
        h = jax.nn.gelu(jnp.einsum("nd,edf->enf", x, wi))                       # column parallel
        down = jnp.einsum("enf,efd->end", h, wo)                                # row parallel partial
        down = psum(down, "ep") if bug == "routed-psum-over-ep" else psum(down, "tp")
        routed = jnp.einsum("ne,end->nd", comb, down)                           # this ep rank's experts
        shared = jax.nn.gelu(x @ si) @ so                                       # tp partial
        if bug == "shared-before-ep-psum":
            return psum(routed + psum(shared, "tp"), "ep")
        return psum(routed, "ep") + psum(shared, "tp")
    return f


W3 = (R(D, E3, scale=0.5), R(E3, D, F3, scale=0.25), R(E3, F3, D, scale=F3 ** -0.5),
      R(D, FS3, scale=0.25), R(FS3, D, scale=0.25))
C.smap("s.deepseek_moe_shared_fine_grained_col_row.ep2xtp4", {"ep": 2, "tp": 4}, deepseek_ep_tp,
       (P(), P(), P("ep", None, "tp"), P("ep", "tp"), P(None, "tp"), P("tp")), P(), deepseek_ref,
       (R(N3, D),) + W3,
       bugs=[("routed-psum-over-ep", ["wrong-axis"]), ("shared-before-ep-psum", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 4. data-parallel training step with load-balancing and z losses.
N4, E4, AUXW, ZW = 128, 4, 0.5, 0.01


def moe_dense(p, x, k=2):
    """dropless top-2 (softmax then top-2, renormalised), every expert on every token."""
    logits = x @ p["wr"]
    g, i = gate_softmax_topk(logits, k, True)
    comb = jnp.sum(jax.nn.one_hot(i, p["wi"].shape[0], dtype=f32) * g[..., None], 1)
    out = ffn(jnp.broadcast_to(x, (p["wi"].shape[0],) + x.shape), p["wi"], p["wo"])
    return jnp.einsum("ne,end->nd", comb, out), logits


def lb_terms(logits):
    """per-expert count of top-1 assignments (no gradient), sum of router probabilities, sum of z^2."""
    probs = jax.nn.softmax(logits, -1)
    cnt = jnp.sum(jax.nn.one_hot(jnp.argmax(logits, -1), logits.shape[-1], dtype=f32), 0)
    return lax.stop_gradient(cnt), jnp.sum(probs, 0), jnp.sum(jax.nn.logsumexp(logits, -1) ** 2)


def aux_loss_sums(p, x, t, frac, n_glob):
    """this shard's share of: MSE + AUXW * E * sum_e f_e P_e + ZW * mean z^2 (over the global batch)."""
    y, logits = moe_dense(p, x)
    _, psums, z2 = lb_terms(logits)
    e = logits.shape[-1]
    mse = jnp.sum((y - t) ** 2) / (n_glob * D)
    return mse + AUXW * e * jnp.sum(frac * psums / n_glob) + ZW * z2 / n_glob


OPT4 = optax.adam(3e-3)


def lb_step(params, state, x, t):
    n = x.shape[0]
    cnt, _, _ = lb_terms(x @ params["wr"])
    loss, g = jax.value_and_grad(aux_loss_sums)(params, x, t, cnt / n, n)
    upd, state = OPT4.update(g, state, params)
    return optax.apply_updates(params, upd), state, loss


def lb_step_dp(bug):
    def f(params, state, x, t):
        n = x.shape[0]
        ndev = 8
        cnt, psl, _ = lb_terms(x @ params["wr"])
        if bug == "aux-local-fractions":
            # each device its own Switch loss, averaged over devices
            def local(p):
                y, logits = moe_dense(p, x)
                _, ps, z2 = lb_terms(logits)
                e = logits.shape[-1]
                return (jnp.sum((y - t) ** 2) / (n * ndev * D) + AUXW * e * jnp.sum(cnt / n * ps / n) / ndev
                        + ZW * z2 / (n * ndev))
            loss, g = jax.value_and_grad(local)(params)
        else:
            n_glob = n * ndev
            frac = psum(cnt, "dp") / n_glob
            loss, g = jax.value_and_grad(aux_loss_sums)(params, x, t, frac, n_glob)
        g = jax.tree.map(lambda a: pmean(a, "dp") if bug == "grad-pmean" else psum(a, "dp"), g)
        upd, state = OPT4.update(g, state, params)
        return optax.apply_updates(params, upd), state, psum(loss, "dp")
    return f


def warm(step, params, state, *data, times=2):
    j = jax.jit(step)
    for _ in range(times):
        params, state, _ = j(params, state, *data)
    return jax.tree.map(np.asarray, params), jax.tree.map(np.asarray, state)


wr4, wi4, wo4 = expert_weights(E4)
P4 = {"wr": wr4, "wi": wi4, "wo": wo4}
X4, T4 = R(N4, D), R(N4, D, scale=0.5)
P4, S4 = warm(lb_step, P4, OPT4.init(P4), R(N4, D), R(N4, D, scale=0.5))
PS4 = {"wr": P(), "wi": P(), "wo": P()}
C.smap("s.dp_step_load_balance_zloss_adam.dp8", {"dp": 8}, lb_step_dp,
       (PS4, state_specs(S4, PS4), P("dp"), P("dp")), (PS4, state_specs(S4, PS4), P()), lb_step,
       (P4, S4, X4, T4),
       bugs=[("aux-local-fractions", ["local-statistic"]), ("grad-pmean", ["wrong-collective", "wrong-scale"])])

# ---------------------------------------------------------------------------
# 5. top-2 with capacity by sort-based dispatch, all_to_all over ep4.
N5, G5, K5, CF5 = 128, 4, 2, 1.0


def sortcap_ref(x, wr, wi, wo):
    return moe_grouped(x, wr, wi, wo, G5, K5, CF5, mixtral_gate, priority="token")


def sort_dispatch(x, topi, cap, bug=None):
    """stable argsort of the (token-major) assignments by expert; position in expert = sorted index -
    expert start; kept ones scattered into [E*cap (+1 trash row), D]."""
    n, k = topi.shape
    ef = topi.reshape(-1)
    order = jnp.argsort(ef, stable=True)
    es = ef[order]
    cnt = jnp.bincount(ef, length=E)
    start = jnp.cumsum(cnt) - cnt
    pos = jnp.arange(n * k) - start[es]
    if bug == "position-inclusive":
        pos = pos + 1
    keep = pos < cap
    slot = jnp.where(keep, es * cap + pos, E * cap)
    tok = jnp.arange(n * k) // k
    buf = jnp.zeros((E * cap + 1, x.shape[-1]), x.dtype).at[slot].set(x[tok[order]])
    return buf[:-1].reshape(E, cap, -1), order, slot, keep, tok


def sort_combine(out, gates, order, slot, keep, tok, n, bug=None):
    flat = jnp.concatenate([out.reshape(-1, out.shape[-1]), jnp.zeros_like(out[0, :1])], 0)
    w = jnp.where(keep, gates.reshape(-1)[order], 0.0)
    ids = tok if bug == "segment-ids-unsorted" else tok[order]
    return jax.ops.segment_sum(flat[slot] * w[:, None], ids, num_segments=n)


def sortcap_ep(bug):
    def f(x, wr, wi, wo):
        n, el = x.shape[0], wi.shape[0]
        cap = capacity(n, K5, CF5)
        g, i = mixtral_gate(x @ wr)
        buf, order, slot, keep, tok = sort_dispatch(x, i, cap, bug)
        buf = lax.all_to_all(buf, "ep", 0, 1, tiled=True)                      # [E/ep, ep*C, D]
        out = lax.all_to_all(ffn(buf, wi, wo), "ep", 1, 0, tiled=True)          # [E, C, D]
        return sort_combine(out, g, order, slot, keep, tok, n, bug)
    return f


C.smap("s.topk_softmax_sort_dispatch_capacity_all_to_all.ep4", {"ep": 4}, sortcap_ep,
       (P("ep"), P(), P("ep"), P("ep")), P("ep"), sortcap_ref, (R(N5, D),) + expert_weights(),
       bugs=[("position-inclusive", ["wrong-offset"]), ("segment-ids-unsorted", ["wrong-permutation"])])

# ---------------------------------------------------------------------------
# 6. GShard top-2 with the auxiliary loss, ep8 (one expert per device).
N6, G6, CF6 = 128, 8, 1.0


def gshard_dispatch(probs, cap, bug=None):
    """GShard's top-2: the second expert's positions come after all first choices of that expert."""
    g, i = lax.top_k(probs, 2)
    g = g / jnp.sum(g, -1, keepdims=True)
    m1 = jax.nn.one_hot(i[:, 0], E, dtype=f32)
    m2 = jax.nn.one_hot(i[:, 1], E, dtype=f32)
    pos1 = jnp.sum((jnp.cumsum(m1, 0) - m1) * m1, -1).astype(jnp.int32)
    c2 = jnp.cumsum(m2, 0) - m2
    if bug != "second-choice-no-offset":
        c2 = c2 + jnp.sum(m1, 0, keepdims=True)
    pos2 = jnp.sum(c2 * m2, -1).astype(jnp.int32)
    d1 = m1[:, :, None] * jax.nn.one_hot(pos1, cap, dtype=f32)[:, None]
    d2 = m2[:, :, None] * jax.nn.one_hot(pos2, cap, dtype=f32)[:, None]
    return d1 + d2, g[:, :1, None] * d1 + g[:, 1:, None] * d2, m1


def gshard_ref(x, wr, wi, wo):
    xg = x.reshape(G6, -1, D)
    cap = capacity(xg.shape[1], 2, CF6)
    probs = jax.nn.softmax(xg @ wr, -1)
    disp, comb, m1 = jax.vmap(lambda p: gshard_dispatch(p, cap))(probs)
    out = ffn(jnp.einsum("gnec,gnd->gecd", disp, xg), wi, wo)
    y = jnp.einsum("gnec,gecd->gnd", comb, out).reshape(x.shape)
    aux = E * jnp.sum(jnp.mean(m1, (0, 1)) * jnp.mean(probs, (0, 1)))
    return y, aux


def gshard_ep(bug):
    def f(x, wr, wi, wo):
        n, el = x.shape[0], wi.shape[0]
        cap = capacity(n, 2, CF6)
        probs = jax.nn.softmax(x @ wr, -1)
        disp, comb, m1 = gshard_dispatch(probs, cap, bug)
        buf = lax.all_to_all(jnp.einsum("nec,nd->ecd", disp, x), "ep", 0, 1, tiled=True)
        out = lax.all_to_all(ffn(buf, wi, wo), "ep", 1, 0, tiled=True)
        y = jnp.einsum("nec,ecd->nd", comb, out)
        if bug == "aux-local-fractions":
            aux = pmean(E * jnp.sum(jnp.mean(m1, 0) * jnp.mean(probs, 0)), "ep")
        else:
            aux = E * jnp.sum(pmean(jnp.mean(m1, 0), "ep") * pmean(jnp.mean(probs, 0), "ep"))
        return y, aux
    return f


C.smap("s.gshard_top2_second_after_first_aux_loss.ep8", {"ep": 8}, gshard_ep,
       (P("ep"), P(), P("ep"), P("ep")), (P("ep"), P()), gshard_ref, (R(N6, D),) + expert_weights(),
       bugs=[("second-choice-no-offset", ["wrong-offset"]), ("aux-local-fractions", ["local-statistic"])])

# ---------------------------------------------------------------------------
# 7. expert-parallel training step (dp2 x ep4), Switch top-1 with capacity 2x.
N7, G7, CF7 = 128, 8, 2.0
OPT7 = optax.adam(1e-2)


def switch_loss_ref(p, x, t):
    y = moe_grouped(x, p["wr"], p["wi"], p["wo"], G7, 1, CF7, switch_gate)
    return jnp.mean(jnp.sum((y - t) ** 2, -1))


def ep_step_ref(params, state, x, t):
    loss, g = jax.value_and_grad(switch_loss_ref)(params, x, t)
    upd, state = OPT7.update(g, state, params)
    return optax.apply_updates(params, upd), state, loss


def ep_step(bug):
    def f(params, state, x, t):
        n = x.shape[0]
        cap = capacity(n, 1, CF7)

        def local_loss(p):
            el = p["wi"].shape[0]
            g, i = switch_gate(x @ p["wr"])
            disp, comb = dispatch_combine(i, g, cap)
            buf = lax.all_to_all(jnp.einsum("nec,nd->ecd", disp, x), "ep", 0, 1, tiled=True).reshape(el, -1, D)
            out = lax.all_to_all(ffn(buf, p["wi"], p["wo"]), "ep", 1, 0, tiled=True).reshape(E, cap, D)
            y = jnp.einsum("nec,ecd->nd", comb, out)
            return jnp.sum((y - t) ** 2) / N7
        loss, g = jax.value_and_grad(local_loss)(params)
        eax = ("dp", "ep") if bug == "expert-grad-psum-dp-ep" else "dp"
        rax = "dp" if bug == "router-grad-dp-only" else ("dp", "ep")
        g = {"wr": psum(g["wr"], rax), "wi": psum(g["wi"], eax), "wo": psum(g["wo"], eax)}
        upd, state = OPT7.update(g, state, params)
        return optax.apply_updates(params, upd), state, psum(loss, ("dp", "ep"))
    return f


wr7, wi7, wo7 = expert_weights()
P7 = {"wr": wr7, "wi": wi7, "wo": wo7}
P7, S7 = warm(ep_step_ref, P7, OPT7.init(P7), R(N7, D), R(N7, D, scale=0.5))
PS7 = {"wr": P(), "wi": P("ep"), "wo": P("ep")}
C.smap("s.ep_train_step_switch_capacity_adam.dp2xep4", {"dp": 2, "ep": 4}, ep_step,
       (PS7, state_specs(S7, PS7), P(("dp", "ep")), P(("dp", "ep"))), (PS7, state_specs(S7, PS7), P()),
       ep_step_ref, (P7, S7, R(N7, D), R(N7, D, scale=0.5)),
       bugs=[("expert-grad-psum-dp-ep", ["wrong-axis"]), ("router-grad-dp-only", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 8. ep4 x tp2: Mixtral top-2 with capacity 2x, experts column / row parallel over tp.
N8, G8, CF8 = 128, 4, 2.0


def mixtral_cap_ref(x, wr, wi, wo):
    return moe_grouped(x, wr, wi, wo, G8, 2, CF8, mixtral_gate, priority="token")


def mixtral_ep_tp(bug):
    def f(x, wr, wi, wo):
        n, el = x.shape[0], wi.shape[0]
        cap = capacity(n, 2, CF8)
        g, i = mixtral_gate(x @ wr)
        disp, comb = dispatch_combine(i, g, cap, "token")
        buf = lax.all_to_all(jnp.einsum("nec,nd->ecd", disp, x), "ep", 0, 1, tiled=True)   # [E/ep, ep*C, D]
        part = ffn(buf, wi, wo)                                                  # tp partial sums
        out = part if bug == "no-tp-psum" else psum(part, "tp")
        ax = "tp" if bug == "return-a2a-over-tp" else "ep"
        out = lax.all_to_all(out, ax, 1, 0, tiled=True).reshape(E, cap, D)
        return jnp.einsum("nec,ecd->nd", comb, out)
    return f


C.smap("s.mixtral_capacity_ep_a2a_tp_col_row.ep4xtp2", {"ep": 4, "tp": 2}, mixtral_ep_tp,
       (P("ep"), P(), P("ep", None, "tp"), P("ep", "tp")), P("ep"), mixtral_cap_ref,
       (R(N8, D),) + expert_weights(),
       bugs=[("no-tp-psum", ["missing-all-reduce"]), ("return-a2a-over-tp", ["wrong-axis"])])

# ---------------------------------------------------------------------------
# GSPMD pairs: expert weights sharded over an expert axis, dispatch left to the partitioner.

# 9. Switch top-1 grouped capacity forward, ep8.
C.gspmd("g.switch_grouped_capacity_forward.ep8", {"ep": 8}, (P("ep"), P(), P("ep"), P("ep")), P("ep"),
        lambda x, wr, wi, wo: moe_grouped(x.reshape(-1, D), wr, wi, wo, 8, 1, 1.25, switch_gate).reshape(x.shape),
        (R(8, 16, D),) + expert_weights())

# 10. Mixtral top-2 grouped capacity training step, dp2 x ep4.
OPT10 = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(3e-3, weight_decay=0.1))


def mixtral_step(params, state, x, t):
    def loss_fn(p):
        y = moe_grouped(x.reshape(-1, D), p["wr"], p["wi"], p["wo"], x.shape[0], 2, 1.5, mixtral_gate)
        return jnp.mean(jnp.sum((y.reshape(x.shape) - t) ** 2, -1))
    loss, g = jax.value_and_grad(loss_fn)(params)
    upd, state = OPT10.update(g, state, params)
    return optax.apply_updates(params, upd), state, loss


wr10, wi10, wo10 = expert_weights()
P10 = {"wr": wr10, "wi": wi10, "wo": wo10}
P10, S10 = warm(mixtral_step, P10, OPT10.init(P10), R(4, 16, D), R(4, 16, D, scale=0.5))
PS10 = {"wr": P(), "wi": P("ep"), "wo": P("ep")}
C.gspmd("g.mixtral_grouped_capacity_train_step_adamw.dp2xep4", {"dp": 2, "ep": 4},
        (PS10, state_specs(S10, PS10), P("dp"), P("dp")), (PS10, state_specs(S10, PS10), P()), mixtral_step,
        (P10, S10, R(4, 16, D), R(4, 16, D, scale=0.5)))

# 11. DeepSeek-MoE forward, ep4 x tp2.
C.gspmd("g.deepseek_shared_fine_grained_forward.ep4xtp2", {"ep": 4, "tp": 2},
        (P(), P(), P("ep", None, "tp"), P("ep", "tp"), P(None, "tp"), P("tp")), P(), deepseek_ref,
        (R(32, D), R(D, E3, scale=0.5), R(E3, D, F3, scale=0.25), R(E3, F3, D, scale=F3 ** -0.5),
         R(D, FS3, scale=0.25), R(FS3, D, scale=0.25)))


# 12. sort-based capacity dispatch vmapped over groups, ep4.
def sortcap_grouped(x, wr, wi, wo):
    cap = capacity(x.shape[1], K5, CF5)

    def disp(xs):
        g, i = mixtral_gate(xs @ wr)
        buf, order, slot, keep, tok = sort_dispatch(xs, i, cap)
        return buf, (g, order, slot, keep, tok)
    buf, aux = jax.vmap(disp)(x)
    out = ffn(buf, wi, wo)
    return jax.vmap(lambda o, a: sort_combine(o, a[0], *a[1:], x.shape[1]))(out, aux)


C.gspmd("g.sort_dispatch_capacity_grouped_forward.ep4", {"ep": 4}, (P("ep"), P(), P("ep"), P("ep")), P("ep"),
        sortcap_grouped, (R(4, 32, D),) + expert_weights())

# 13. load-balancing + z-loss training step, dp2 x ep4.
OPT13 = optax.chain(optax.clip_by_global_norm(0.5), optax.adamw(3e-3, weight_decay=0.1))


def lb_step13(params, state, x, t):
    n = x.shape[0]
    cnt, _, _ = lb_terms(x @ params["wr"])
    loss, g = jax.value_and_grad(aux_loss_sums)(params, x, t, cnt / n, n)
    upd, state = OPT13.update(g, state, params)
    return optax.apply_updates(params, upd), state, loss


wr13, wi13, wo13 = expert_weights()
P13 = {"wr": wr13, "wi": wi13, "wo": wo13}
P13, S13 = warm(lb_step13, P13, OPT13.init(P13), R(64, D), R(64, D, scale=0.5))
PS13 = {"wr": P(), "wi": P("ep"), "wo": P("ep")}
C.gspmd("g.load_balance_zloss_train_step_adamw.dp2xep4", {"dp": 2, "ep": 4},
        (PS13, state_specs(S13, PS13), P("dp"), P("dp")), (PS13, state_specs(S13, PS13), P()), lb_step13,
        (P13, S13, R(64, D), R(64, D, scale=0.5)))

C.finish()
