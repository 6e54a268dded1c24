"""samples/fresh20: a twentieth batch of programs as a user writes them, on
the theme of mixture-of-experts layers and their training in current JAX:
token-choice routing (top-1 / top-2, capacities and token dropping by
cumsum positions, one-hot dispatch and combine tensors), expert-choice
routing, sort-based dispatch with lax.ragged_dot and segment sums, shared
experts beside routed ones, load-balancing and z losses over the global
batch, and expert parallelism by all_to_all on ep, ep x dp and ep x tp
meshes; none of them an idiom of samples/fresh .. fresh19, probe, train or
wild.
shard_map families: 1. GShard top-2 with a per-group capacity (second
choices placed after all first choices, gates renormalised), two experts
per device, tiled all_to_all there and back; 2. expert-choice routing over
the global batch (scores all_gathered, each device's experts take their
top-k tokens, a scatter-add and psum_scatter back); 3. dropless Mixtral
top-2 by a stable argsort, jnp.bincount group sizes and lax.ragged_dot
with the expert hidden dim over tp; 4. DeepSeek-V3 shared + routed experts
(sigmoid scores, top-2 on biased scores, gates the renormalised unbiased
scores x 2.5) with the all-gather dispatcher on ep x tp; 5. Switch top-1
with the capacity of the global batch, a token's buffer position its local
exclusive cumsum plus the counts of the devices before it (all_gather of
counts); 6. an SGD step of a Switch layer on dp x ep (check_vma=False: the
loss scaled by 1 / groups, gradients psum'd over the axes their parameter
is replicated on; the load-balancing token fractions pmean'd over both
axes under stop_gradient); 7. EP x TP with per-group capacity (all_to_all
over ep, expert hidden over tp, psum over tp); 8. dropless Mixtral with
experts over ep by sorting the pairs of the device's own experts first
(ragged_dot leaves rows past the group sizes zero), gates permuted by the
same order, jax.ops.segment_sum by token id, psum_scatter; 9. Soft MoE with
the sequence over sp (the dispatch softmax over tokens by pmax and psum,
slot inputs psum'd, check_vma=True); 10. DeepSeek-V3's auxiliary-loss-free
bias update from the psum'd global load; 11. DeepSeek-V3 group-limited
routing with the router columns over ep (group scores all_gathered untiled
and transposed, scores all_gathered tiled along experts); 12. bf16 tokens
and expert weights through the all_to_alls with an f32 router and combine
(capacity = group size, nothing drops); 13. an Adam step of a MoE
transformer block (causal attention, top-2, load-balancing and z losses
over the global batch, check_vma=True); 14. V-MoE batch prioritized routing
(positions by descending gate, put back by the inverse permutation) with
the non-tiled all_to_all; 15. DeepSeek-V3's sequence-wise balance loss with
sequences over sp (statistics psum'd over sp only) and the batch over dp;
16. expert parallelism with FSDP'd expert weights (all_gather over dp) on a
square dp2 x ep2 mesh; 17. top-1 with a quantised router (logits rounded to
0.5: ties, the lowest expert wins) whose columns are over ep (pmax, pmin of
the winning device, a masked psum of its index); 18. an SGD-with-momentum
step through expert-choice routing (check_vma=True).
Under GSPMD: 19. the GShard top-2 einsum program with the dispatched tensor
constrained over ep; 20. expert choice with tokens over dp and experts
over ep; 21. the sorted ragged_dot layer with the expert hidden over tp;
22. an AdamW step of the DeepSeek layer; 23. the MoE block's Adam step with
the experts over ep; 24. Soft MoE with the sequence over sp and the slot
inputs constrained over ep; 25. Mixtral with the experts a jax.vmap over
stacked weights, outputs constrained over (ep, dp); 26. Switch with the
global capacity dispatched by segment_sum into an E * C + 1 buffer (a
drop row) constrained over ep, expert hidden over tp; 27. the bf16 grouped
layer; 28. the auxiliary-loss-free update; 29. group-limited routing on ep x
tp; 30. the Switch SGD step with the global load-balancing loss.
Routing is deterministic: argmax, lax.top_k and stable argsorts break ties
by the lower index (17. makes ties on purpose and resolves them the same
way across devices). Capacities: where a baseline drops tokens it routes
the same groups the devices do (1., 6., 7., 14., 16., 19., 30.: groups are
the shards of the batch, as GShard and Switch group tokens), or computes
the positions over the global batch the distributed program reconstructs
by device prefixes (5., 26.); on the seeded inputs these do drop (1.: 99 of
128 assignments kept, 5.: 26 of 32, 6.: 59 of 64, 7.: 61 of 64, 14.: 53 of
64, 16.: 63 of 64, 19.: 206 of 256, 30.: 61 of 64) and the correct programs
drop exactly the baseline's tokens. 12. and 27. use a capacity of the
whole group (nothing drops); expert choice (2., 18., 20.), the dropless
sorted layers (3., 8., 21.), the dense-masked layers (4., 10., 11., 13.,
17., 22., 23., 25., 28., 29.) and Soft MoE have no capacity.
Each shard_map family has the bug variants a careless parallelisation makes
(combine weights not renormalised, second choices without the first
choices' count, experts interleaved by a wrong reshape, expert columns or
gates sliced without the device's offset, an output sliced at offset 0
after a psum, no psum over tp, outputs un-sorted by a gather instead of a
scatter, gates from biased scores, a shared expert not psum'd, no device
prefix or an inclusive one, a capacity from the local batch, token
fractions of the local batch, expert gradients not psum'd over dp or psum'd
over ep too, an all_to_all over tp or dp, an FFN psum over ep, group sizes
counted from global ids, gates not permuted with the rows, a local
dispatch softmax, slot inputs not psum'd, local load counts, a flipped
bias update, group scores reshaped instead of transposed, the router in
bf16, the combine in bf16, a loss psum'd where it is pmean'd, the aux loss
as a mean of local products, positions not un-permuted, the non-tiled
all_to_all back with concat_axis 1, sequence statistics psum'd over dp too
or averaged over the local length, weights gathered over ep, a local
argmax index without its offset, tied indices summed).
Changed for its numerics: the bf16 experts (12., 27.) upcast their
operands for the two matmuls: the first draft's bf16 x bf16 -> f32 dots
(preferred_element_type) made XLA:CPU fail on the baseline ("Unsupported
element type for DotThunk::Execute: BF16 x BF16 = F32"). Nothing was
dropped: every correct pair agrees with its baseline at rounding level (see
"numerics": f32 within a few 1e-6, the bf16 pairs exactly), every bug
variant differs clearly (the smallest: one bf16 ulp, 0.03125, for the two
bf16 dtype bugs; 0.01 to 0.05 in the training steps' parameters and the
bias updates).
Exported with scalify_jax.export_pair; every pair is also run by JAX on
seeded inputs and its manifest entry records the largest difference from
the single-device run ("numerics").
Run from the repository root: bash samples/gen/run_fresh20.sh [SUBSTR...]
(only the pairs whose name contains a SUBSTR; the others keep their entries).
"""
import sys
import numpy as np
import jax, jax.numpy as jnp
from jax import lax
from jax.sharding import NamedSharding, PartitionSpec as P
import optax
sys.path.insert(0, "samples/gen")  # run from the repository root (run_fresh20.sh)
from fresh_lib import Corpus, seeded, mse, np_tree, state_specs  # noqa: E402
from scalify_jax import make_mesh  # noqa: E402

SCRIPT = "samples/gen/fresh20.py"
C = Corpus("samples/fresh20", SCRIPT, "samples/gen/run_fresh20.sh", sys.argv[1:])
rng, R, I = seeded(2020)
psum, pmax, pmean, idx = lax.psum, lax.pmax, lax.pmean, lax.axis_index
M, H = 16, 32  # model dim, expert hidden dim


def experts_dense(x, w1, w2, act=jax.nn.gelu):
    """Every expert on every token: x (T, M), w1 (E, M, H), w2 (E, H, M) -> (T, E, M)."""
    return jnp.einsum("teh,ehm->tem", act(jnp.einsum("tm,emh->teh", x, w1)), w2)


def experts_slots(xe, w1, w2, act=jax.nn.gelu):
    """Each expert on its own slots: xe (..., E, C, M) -> (..., E, C, M)."""
    return jnp.einsum("...ech,ehm->...ecm", act(jnp.einsum("...ecm,emh->...ech", xe, w1)), w2)


def top2_gating(logits, cap, renorm=True, second_offset=True):
    """GShard top-2 gating of one group's tokens, logits (S, E) -> combine
    weights (S, E, cap): the first choices take buffer positions in token
    order, the second choices after all first choices; a token past the
    capacity of its expert is dropped for that choice; the two gates are
    renormalised to sum to one (before the drops, as GShard does)."""
    E = logits.shape[-1]
    probs = jax.nn.softmax(logits, -1)
    m1 = jax.nn.one_hot(jnp.argmax(probs, -1), E)
    m2 = jax.nn.one_hot(jnp.argmax(jnp.where(m1 > 0, -1.0, probs), -1), E)
    g1, g2 = jnp.sum(probs * m1, -1), jnp.sum(probs * m2, -1)
    if renorm:
        g1, g2 = g1 / (g1 + g2), g2 / (g1 + g2)
    pos1 = jnp.cumsum(m1, 0) - m1
    m1 = m1 * (pos1 < cap)
    pos2 = jnp.cumsum(m2, 0) - m2 + (jnp.sum(m1, 0, keepdims=True) if second_offset else 0.0)
    m2 = m2 * (pos2 < cap)
    s1 = jax.nn.one_hot(jnp.sum(pos1 * m1, -1).astype(jnp.int32), cap)
    s2 = jax.nn.one_hot(jnp.sum(pos2 * m2, -1).astype(jnp.int32), cap)
    return (g1[:, None, None] * m1[:, :, None] * s1[:, None, :] +
            g2[:, None, None] * m2[:, :, None] * s2[:, None, :])


def top1_gating(logits, cap):
    """Switch top-1 gating of one group, logits (S, E) -> combine (S, E, cap),
    positions in token order, tokens past capacity dropped."""
    E = logits.shape[-1]
    probs = jax.nn.softmax(logits, -1)
    oh = jax.nn.one_hot(jnp.argmax(probs, -1), E)
    pos = jnp.cumsum(oh, 0) - oh
    oh = oh * (pos < cap)
    slot = jax.nn.one_hot(jnp.sum(pos * oh, -1).astype(jnp.int32), cap)
    return jnp.max(probs, -1)[:, None, None] * oh[:, :, None] * slot[:, None, :]


def moe_groups(xg, wg, w1, w2, gating):
    """A grouped MoE layer (GShard / Switch): xg (G, S, M), the gating per group,
    dispatch and combine by einsum with the one-hot combine tensor."""
    comb = jax.vmap(lambda t: gating(t @ wg))(xg)
    xe = jnp.einsum("gsec,gsm->gecm", (comb > 0).astype(xg.dtype), xg)
    return jnp.einsum("gsec,gecm->gsm", comb, experts_slots(xe, w1, w2))


# ---------------------------------------------------------------------------
# 1. GShard top-2 with a per-group capacity: each ep device is one group of
#    S tokens (the baseline routes the same groups, so the same tokens are
#    dropped: capacity 4 of 16 tokens x 2 choices over 8 experts drops some),
#    two experts per device; dispatch (E, C, M) reshaped to (ep, E_loc, C, M),
#    all_to_all there and back (tiled, split = concat = 0), combine einsum.
G1_S, G1_E, G1_CAP, EP = 16, 8, 4, 4


def gshard_ref(x, wg, w1, w2):
    xg = x.reshape(-1, G1_S, M)
    return moe_groups(xg, wg, w1, w2, lambda l: top2_gating(l, G1_CAP)).reshape(x.shape)


def gshard_top2(bug):
    def f(x, wg, w1, w2):
        el = w1.shape[0]
        comb = top2_gating(x @ wg, G1_CAP, renorm=bug != "combine-not-renormalised",
                           second_offset=bug != "second-choice-no-offset")
        xe = jnp.einsum("sec,sm->ecm", (comb > 0).astype(x.dtype), x)
        if bug == "experts-interleaved":
            xe = jnp.swapaxes(xe.reshape(el, EP, G1_CAP, M), 0, 1)
        else:
            xe = xe.reshape(EP, el, G1_CAP, M)
        xe = lax.all_to_all(xe, "ep", 0, 0, tiled=True)  # (groups, E_loc, C, M)
        ye = lax.all_to_all(experts_slots(xe, w1, w2), "ep", 0, 0, tiled=True)
        return jnp.einsum("sec,ecm->sm", comb, ye.reshape(G1_E, G1_CAP, M))
    return f


C.smap("s.gshard_top2_group_capacity_a2a.ep4", {"ep": EP}, gshard_top2, (P("ep"), P(), P("ep"), P("ep")), P("ep"),
       gshard_ref, (R(EP * G1_S, M), R(M, G1_E), R(G1_E, M, H, scale=0.3), R(G1_E, H, M, scale=0.3)),
       bugs=[("combine-not-renormalised", ["numerics"]), ("second-choice-no-offset", ["wrong-offset"]),
             ("experts-interleaved", ["wrong-reshape-order"])])


# ---------------------------------------------------------------------------
# 2. expert-choice routing over the global batch: tokens over ep, experts
#    over ep (two per device); the router's softmax over experts per token,
#    the scores all_gathered (tiled), each device's experts pick their top-k
#    tokens of the whole batch (lax.top_k: ties to the lower index), the
#    tokens all_gathered and gathered by index, the gated outputs scattered
#    into a (T, M) buffer and psum_scatter'ed back to the token owners.
EC_T, EC_E, EC_K = 32, 8, 8


def expert_choice_ref(x, wg, w1, w2):
    s = jax.nn.softmax(x @ wg, -1)
    g, ix = lax.top_k(s.T, EC_K)  # (E, K)
    ye = experts_slots(x[ix], w1, w2) * g[..., None]
    return x + jnp.zeros_like(x).at[ix.reshape(-1)].add(ye.reshape(-1, M))


def expert_choice(bug):
    def f(x, wg, w1, w2):
        el, tl = w1.shape[0], x.shape[0]
        s = lax.all_gather(jax.nn.softmax(x @ wg, -1), "ep", tiled=True)  # (T, E)
        off = 0 if bug == "expert-cols-no-offset" else idx("ep") * el
        g, ix = lax.top_k(lax.dynamic_slice_in_dim(s, off, el, 1).T, EC_K)
        xa = lax.all_gather(x, "ep", tiled=True)
        ye = experts_slots(xa[ix], w1, w2) * g[..., None]
        full = jnp.zeros_like(xa).at[ix.reshape(-1)].add(ye.reshape(-1, M))
        if bug == "out-slice-no-offset":
            return x + psum(full, "ep")[:tl]
        return x + lax.psum_scatter(full, "ep", scatter_dimension=0, tiled=True)
    return f


C.smap("s.expert_choice_global_topk_tokens.ep4", {"ep": EP}, expert_choice, (P("ep"), P(), P("ep"), P("ep")),
       P("ep"), expert_choice_ref, (R(EC_T, M), R(M, EC_E), R(EC_E, M, H, scale=0.3), R(EC_E, H, M, scale=0.3)),
       bugs=[("expert-cols-no-offset", ["wrong-offset"]), ("out-slice-no-offset", ["wrong-offset"])])


# ---------------------------------------------------------------------------
# 3. dropless Mixtral top-2 by sorting: the (token, choice) pairs argsorted
#    (stable) by expert id, jnp.bincount group sizes, lax.ragged_dot for the
#    two expert matmuls (SiLU), the outputs put back by a scatter at the sort
#    order; softmax over the two chosen logits. Tensor parallel over tp: the
#    expert hidden dim sharded, tokens replicated, the outputs psum'd.
MX_T, MX_E = 24, 4


def mixtral_dense(x, wg, w1, w2, act):
    top, ids = lax.top_k(x @ wg, 2)
    y = jnp.take_along_axis(experts_dense(x, w1, w2, act), ids[..., None], 1)
    return jnp.einsum("tk,tkm->tm", jax.nn.softmax(top, -1), y)


def mixtral_sorted_ref(x, wg, w1, w2):
    top, ids = lax.top_k(x @ wg, 2)
    order = jnp.argsort(ids.reshape(-1), stable=True)
    gs = jnp.bincount(ids.reshape(-1), length=w1.shape[0])
    ys = lax.ragged_dot(jax.nn.silu(lax.ragged_dot(x[order // 2], w1, gs)), w2, gs)
    y = jnp.zeros_like(ys).at[order].set(ys).reshape(x.shape[0], 2, M)
    return jnp.einsum("tk,tkm->tm", jax.nn.softmax(top, -1), y)


def ragged_tp(bug):
    def f(x, wg, w1, w2):
        top, ids = lax.top_k(x @ wg, 2)
        flat = ids.reshape(-1)
        order = jnp.argsort(flat, stable=True)
        gs = jnp.bincount(flat, length=w1.shape[0])
        ys = lax.ragged_dot(jax.nn.silu(lax.ragged_dot(x[order // 2], w1, gs)), w2, gs)
        if bug != "no-psum-over-tp":
            ys = psum(ys, "tp")
        if bug == "unsort-by-gather":
            y = ys[order]
        else:
            y = jnp.zeros_like(ys).at[order].set(ys)
        return jnp.einsum("tk,tkm->tm", jax.nn.softmax(top, -1), y.reshape(x.shape[0], 2, M))
    return f


C.smap("s.mixtral_sorted_ragged_dot_hidden_tp.tp4", {"tp": 4}, ragged_tp,
       (P(), P(), P(None, None, "tp"), P(None, "tp")), P(), mixtral_sorted_ref,
       (R(MX_T, M), R(M, MX_E), R(MX_E, M, H, scale=0.3), R(MX_E, H, M, scale=0.3)),
       bugs=[("no-psum-over-tp", ["missing-all-reduce"]), ("unsort-by-gather", ["wrong-permutation"])])


# ---------------------------------------------------------------------------
# 4. DeepSeek-V3 style: a shared expert beside 8 routed ones; sigmoid
#    scores, top-2 chosen on scores + a load-balancing bias, the gates the
#    unbiased scores of the chosen renormalised and scaled by 2.5. ep x tp:
#    tokens over ep (replicated over tp), all_gathered (the all-gather
#    dispatcher), each device runs its two experts on every token masked by
#    their gates, psum_scatter'ed back over ep; expert and shared hidden dims
#    over tp, one psum over tp at the end.
DS_T, DS_E, DS_K, DS_SCALE = 32, 8, 2, 2.5


def ds_gates(s, bias, E):
    _, ids = lax.top_k(s + bias, DS_K)
    sel = jnp.take_along_axis(s, ids, -1)
    w = sel / jnp.sum(sel, -1, keepdims=True) * DS_SCALE
    return jnp.sum(jax.nn.one_hot(ids, E) * w[..., None], 1)


def deepseek_ref(x, wg, bias, ws1, ws2, w1, w2):
    gates = ds_gates(jax.nn.sigmoid(x @ wg), bias, wg.shape[1])
    shared = jax.nn.silu(x @ ws1) @ ws2
    return x + shared + jnp.einsum("te,tem->tm", gates, experts_dense(x, w1, w2, jax.nn.silu))


def deepseek_ep_tp(bug):
    def f(x, wg, bias, ws1, ws2, w1, w2):
        el = w1.shape[0]
        shared = jax.nn.silu(x @ ws1) @ ws2  # partial over tp
        xa = lax.all_gather(x, "ep", tiled=True)
        s = jax.nn.sigmoid(xa @ wg)
        if bug == "gates-from-biased-scores":
            gates = ds_gates(s + bias, 0.0, wg.shape[1])
        else:
            gates = ds_gates(s, bias, wg.shape[1])
        off = idx("ep") if bug == "expert-offset-by-index" else idx("ep") * el
        g = lax.dynamic_slice_in_dim(gates, off, el, 1)
        y = jnp.einsum("te,tem->tm", g, experts_dense(xa, w1, w2, jax.nn.silu))
        routed = psum(lax.psum_scatter(y, "ep", scatter_dimension=0, tiled=True), "tp")
        return x + routed + (shared if bug == "shared-not-psummed" else psum(shared, "tp"))
    return f


C.smap("s.deepseek_shared_routed_allgather_dispatch.ep4xtp2", {"ep": EP, "tp": 2}, deepseek_ep_tp,
       (P("ep"), P(), P(), P(None, "tp"), P("tp"), P("ep", None, "tp"), P("ep", "tp")), P("ep"), deepseek_ref,
       (R(DS_T, M), R(M, DS_E, scale=0.5), R(DS_E, scale=0.2), R(M, H, scale=0.3), R(H, M, scale=0.3),
        R(DS_E, M, H // 2, scale=0.3), R(DS_E, H // 2, M, scale=0.3)),
       bugs=[("gates-from-biased-scores", ["numerics"]), ("expert-offset-by-index", ["wrong-offset"]),
             ("shared-not-psummed", ["missing-all-reduce"])])


# ---------------------------------------------------------------------------
# 5. Switch top-1 with the capacity of the global batch (capacity factor 1:
#    8 slots per expert for 32 tokens over 4 experts; tokens drop): a token's
#    place in its expert's buffer is its rank among all tokens of the batch
#    choosing that expert, i.e. its local exclusive cumsum plus the counts
#    of the devices before it (all_gather of the per-device counts, masked
#    by axis_index). Data parallel over dp, experts replicated, a dropped
#    token keeps its residual.
SW_T, SW_E, SW_CF, DP = 32, 4, 1.0, 4


def switch_global_ref(x, wg, w1, w2):
    p = jax.nn.softmax(x @ wg, -1)
    oh = jax.nn.one_hot(jnp.argmax(p, -1), SW_E)
    pos = jnp.sum((jnp.cumsum(oh, 0) - oh) * oh, -1)
    keep = pos < int(SW_CF * x.shape[0] / SW_E)
    y = jnp.einsum("te,tem->tm", oh, experts_dense(x, w1, w2))
    return x + jnp.where(keep, jnp.max(p, -1), 0.0)[:, None] * y


def switch_global(bug):
    def f(x, wg, w1, w2):
        p = jax.nn.softmax(x @ wg, -1)
        oh = jax.nn.one_hot(jnp.argmax(p, -1), SW_E)
        counts = lax.all_gather(jnp.sum(oh, 0), "dp")  # (dp, E)
        dev = jnp.arange(DP)[:, None]
        before = dev <= idx("dp") if bug == "prefix-inclusive" else dev < idx("dp")
        prefix = 0.0 if bug == "no-device-prefix" else jnp.sum(counts * before, 0)
        pos = jnp.sum((jnp.cumsum(oh, 0) - oh + prefix) * oh, -1)
        tokens = x.shape[0] if bug == "capacity-from-local-batch" else x.shape[0] * DP
        keep = pos < int(SW_CF * tokens / SW_E)
        y = jnp.einsum("te,tem->tm", oh, experts_dense(x, w1, w2))
        return x + jnp.where(keep, jnp.max(p, -1), 0.0)[:, None] * y
    return f


C.smap("s.switch_global_capacity_device_prefix.dp4", {"dp": DP}, switch_global, (P("dp"), P(), P(), P()), P("dp"),
       switch_global_ref, (R(SW_T, M), R(M, SW_E), R(SW_E, M, H, scale=0.3), R(SW_E, H, M, scale=0.3)),
       bugs=[("no-device-prefix", ["wrong-offset"]), ("prefix-inclusive", ["wrong-offset"]),
             ("capacity-from-local-batch", ["numerics"])])


# ---------------------------------------------------------------------------
# 6. an SGD step of a Switch layer on a dp x ep mesh: 8 groups of 8 tokens
#    over (dp, ep), per-group capacity 3 (drops), 4 experts over ep (one per
#    device, replicated over dp), all_to_all over ep only. The loss: mse plus
#    the load-balancing loss E * sum_i f_i P_i of the whole batch, f (token
#    fractions, no gradient) pmean'd over both axes, P the local mean router
#    probability (linear, so the mean of the local losses is the global
#    one). check_vma=False: the loss is scaled by 1 / groups and every
#    gradient psum'd over the axes its parameter is replicated on (router:
#    dp and ep; experts: dp, the all_to_all's transpose brings the ep row's
#    cotangents).
SG_S, SG_E, SG_CAP, SG_G, SG_ALPHA = 8, 4, 3, 8, 0.05


def lb_loss(p_mean, frac):
    return SG_E * jnp.sum(frac * p_mean)


def switch_loss_ref(p, x, y):
    xg = x.reshape(SG_G, SG_S, M)
    out = xg + moe_groups(xg, p["wg"], p["w1"], p["w2"], lambda l: top1_gating(l, SG_CAP))
    probs = jax.nn.softmax(x @ p["wg"], -1)
    frac = jnp.mean(jax.nn.one_hot(jnp.argmax(probs, -1), SG_E), 0)
    return mse(out.reshape(x.shape), y) + SG_ALPHA * lb_loss(jnp.mean(probs, 0), frac)


def switch_sgd_ref(p, x, y):
    lv, g = jax.value_and_grad(switch_loss_ref)(p, x, y)
    return jax.tree.map(lambda a, b: a - 0.5 * b, p, g), lv


def switch_ep_dp_sgd(bug):
    def f(p, x, y):
        def loss(p):
            comb = top1_gating(x @ p["wg"], SG_CAP)
            xe = jnp.einsum("sec,sm->ecm", (comb > 0).astype(x.dtype), x)
            xe = lax.all_to_all(xe, "ep", 0, 0, tiled=True)  # (ep groups, C, M) for my expert
            ye = jnp.einsum("gch,hm->gcm", jax.nn.gelu(jnp.einsum("gcm,mh->gch", xe, p["w1"][0])), p["w2"][0])
            ye = lax.all_to_all(ye, "ep", 0, 0, tiled=True)
            out = x + jnp.einsum("sec,ecm->sm", comb, ye)
            probs = jax.nn.softmax(x @ p["wg"], -1)
            frac = lax.stop_gradient(jnp.mean(jax.nn.one_hot(jnp.argmax(probs, -1), SG_E), 0))
            if bug != "aux-local-fractions":
                frac = pmean(frac, ("dp", "ep"))
            return (mse(out, y) + SG_ALPHA * lb_loss(jnp.mean(probs, 0), frac)) / SG_G
        lv, g = jax.value_and_grad(loss)(p)
        exp_axes = ("dp", "ep") if bug == "expert-grad-psum-over-ep-too" else "dp"
        g = {"wg": psum(g["wg"], ("dp", "ep")), "w1": g["w1"], "w2": g["w2"]}
        if bug != "expert-grad-not-reduced-over-dp":
            g["w1"], g["w2"] = psum(g["w1"], exp_axes), psum(g["w2"], exp_axes)
        return jax.tree.map(lambda a, b: a - 0.5 * b, p, g), psum(lv, ("dp", "ep"))
    return f


sg_p = {"wg": R(M, SG_E), "w1": R(SG_E, M, H, scale=0.3), "w2": R(SG_E, H, M, scale=0.3)}
sg_ps = {"wg": P(), "w1": P("ep"), "w2": P("ep")}
C.smap("s.switch_ep_dp_sgd_global_aux.dp2xep4", {"dp": 2, "ep": 4}, switch_ep_dp_sgd,
       (sg_ps, P(("dp", "ep")), P(("dp", "ep"))), (sg_ps, P()), switch_sgd_ref,
       (sg_p, R(SG_G * SG_S, M), R(SG_G * SG_S, M, scale=0.5)),
       bugs=[("aux-local-fractions", ["missing-all-reduce"]), ("expert-grad-not-reduced-over-dp", ["missing-all-reduce"]),
             ("expert-grad-psum-over-ep-too", ["wrong-collective-group"])])


# ---------------------------------------------------------------------------
# 7. EP x TP: Switch top-1 with per-group capacity (groups = ep devices, 4
#    of 16 tokens per expert), 8 experts over ep (two per device), each
#    expert's hidden dim over tp; tokens replicated over tp. all_to_all over
#    ep, the expert FFN's partial output psum'd over tp, all_to_all back.
ET_S, ET_E, ET_CAP = 16, 8, 4


def ep_tp_ref(x, wg, w1, w2):
    xg = x.reshape(-1, ET_S, M)
    return x + moe_groups(xg, wg, w1, w2, lambda l: top1_gating(l, ET_CAP)).reshape(x.shape)


def ep_tp(bug):
    def f(x, wg, w1, w2):
        el = w1.shape[0]
        comb = top1_gating(x @ wg, ET_CAP)
        xe = jnp.einsum("sec,sm->ecm", (comb > 0).astype(x.dtype), x).reshape(EP, el, ET_CAP, M)
        xe = lax.all_to_all(xe, "tp" if bug == "a2a-over-tp" else "ep", 0, 0, tiled=True)
        ye = experts_slots(xe, w1, w2)  # partial over tp
        ye = psum(ye, "ep" if bug == "ffn-psum-over-ep" else "tp")
        ye = lax.all_to_all(ye, "ep", 0, 0, tiled=True).reshape(ET_E, ET_CAP, M)
        return x + jnp.einsum("sec,ecm->sm", comb, ye)
    return f


C.smap("s.ep_tp_switch_hidden_over_tp.ep4xtp2", {"ep": EP, "tp": 2}, ep_tp,
       (P("ep"), P(), P("ep", None, "tp"), P("ep", "tp")), P("ep"), ep_tp_ref,
       (R(EP * ET_S, M), R(M, ET_E), R(ET_E, M, H, scale=0.3), R(ET_E, H, M, scale=0.3)),
       bugs=[("a2a-over-tp", ["wrong-all-to-all-axis"]), ("ffn-psum-over-ep", ["wrong-collective-group"])])


# ---------------------------------------------------------------------------
# 8. dropless Mixtral top-2 with experts over ep, by sorting: tokens over ep
#    all_gathered, each device sorts the (token, choice) pairs so that those
#    of its own experts come first (key: local expert id, others last),
#    group sizes of its experts only (ragged_dot leaves the rows past their
#    sum zero), gelu, the rows weighted by their gates (permuted by the same
#    order), jax.ops.segment_sum by token id, psum_scatter to the owners.
MXE_T, MXE_E = 32, 8


def mixtral_ep_ref(x, wg, w1, w2):
    return mixtral_dense(x, wg, w1, w2, jax.nn.gelu)


def mixtral_ep_sorted(bug):
    def f(x, wg, w1, w2):
        el = w1.shape[0]
        xa = lax.all_gather(x, "ep", tiled=True)
        top, ids = lax.top_k(xa @ wg, 2)
        flat = ids.reshape(-1)
        off = idx("ep") * el
        mine = (flat >= off) & (flat < off + el)
        key = jnp.where(mine, flat - off, el)
        order = jnp.argsort(key, stable=True)
        if bug == "group-sizes-global-ids":
            gs = jnp.bincount(flat, length=MXE_E)[:el]
        else:
            gs = jnp.bincount(key, length=el + 1)[:el]
        tok = order // 2
        ys = lax.ragged_dot(jax.nn.gelu(lax.ragged_dot(xa[tok], w1, gs)), w2, gs)
        w = jax.nn.softmax(top, -1).reshape(-1)
        ys = ys * (w[:, None] if bug == "gates-not-permuted" else w[order][:, None])
        out = jax.ops.segment_sum(ys, tok, num_segments=xa.shape[0])
        return lax.psum_scatter(out, "ep", scatter_dimension=0, tiled=True)
    return f


C.smap("s.mixtral_ep_sorted_ragged_segment_sum.ep4", {"ep": EP}, mixtral_ep_sorted,
       (P("ep"), P(), P("ep"), P("ep")), P("ep"), mixtral_ep_ref,
       (R(MXE_T, M), R(M, MXE_E), R(MXE_E, M, H, scale=0.3), R(MXE_E, H, M, scale=0.3)),
       bugs=[("group-sizes-global-ids", ["wrong-offset"]), ("gates-not-permuted", ["wrong-permutation"])])


# ---------------------------------------------------------------------------
# 9. Soft MoE (Puigcerver et al.): 4 experts x 2 slots; the dispatch weights
#    a softmax over the tokens of each sequence, the combine weights a softmax
#    over the slots. The sequence over sp: the dispatch softmax by a pmax'd
#    maximum and a psum'd denominator, the slot inputs psum'd; the experts
#    (replicated) run on every device; check_vma=True.
SM_E, SM_SL = 4, 2


def soft_moe_ref(x, phi, w1, w2):
    lg = jnp.einsum("btm,mn->btn", x, phi)
    xs = jnp.einsum("btn,btm->bnm", jax.nn.softmax(lg, 1), x).reshape(x.shape[0], SM_E, SM_SL, M)
    ys = experts_slots(xs, w1, w2).reshape(x.shape[0], SM_E * SM_SL, M)
    return jnp.einsum("btn,bnm->btm", jax.nn.softmax(lg, 2), ys)


def soft_moe_sp(bug):
    def f(x, phi, w1, w2):
        lg = jnp.einsum("btm,mn->btn", x, phi)
        m = jnp.max(lg, 1, keepdims=True)
        if bug == "dispatch-softmax-local":
            e = jnp.exp(lg - m)
            d = e / jnp.sum(e, 1, keepdims=True)
        else:
            e = jnp.exp(lg - pmax(m, "sp"))
            d = e / psum(jnp.sum(e, 1, keepdims=True), "sp")
        xs = jnp.einsum("btn,btm->bnm", d, x)
        if bug != "slot-inputs-not-psummed":
            xs = psum(xs, "sp")
        ys = experts_slots(xs.reshape(x.shape[0], SM_E, SM_SL, M), w1, w2).reshape(x.shape[0], SM_E * SM_SL, M)
        return jnp.einsum("btn,bnm->btm", jax.nn.softmax(lg, 2), ys)
    return f


C.smap("s.soft_moe_dispatch_softmax_over_seq.sp4", {"sp": 4}, soft_moe_sp, (P(None, "sp"), P(), P(), P()),
       P(None, "sp"), soft_moe_ref, (R(2, 32, M), R(M, SM_E * SM_SL), R(SM_E, M, H, scale=0.3),
                                     R(SM_E, H, M, scale=0.3)), check_vma=True,
       bugs=[("dispatch-softmax-local", ["missing-all-reduce"]), ("slot-inputs-not-psummed", ["missing-all-reduce"])])


# ---------------------------------------------------------------------------
# 10. DeepSeek-V3's auxiliary-loss-free balancing: top-2 on sigmoid scores
#     plus a bias, and the bias nudged by 0.01 * sign(mean load - load) with
#     the load counted over the global batch (psum of the per-device
#     counts). Tokens over dp, experts replicated; outputs the layer output
#     and the new bias.
AF_T, AF_E = 32, 8


def aux_free_ref(x, wg, bias, w1, w2):
    s = jax.nn.sigmoid(x @ wg)
    _, ids = lax.top_k(s + bias, 2)
    sel = jnp.take_along_axis(s, ids, -1)
    gates = jnp.sum(jax.nn.one_hot(ids, AF_E) * (sel / jnp.sum(sel, -1, keepdims=True))[..., None], 1)
    load = jnp.sum(jax.nn.one_hot(ids, AF_E), (0, 1))
    return x + jnp.einsum("te,tem->tm", gates, experts_dense(x, w1, w2)), bias + 0.01 * jnp.sign(jnp.mean(load) - load)


def aux_free(bug):
    def f(x, wg, bias, w1, w2):
        s = jax.nn.sigmoid(x @ wg)
        _, ids = lax.top_k(s + bias, 2)
        sel = jnp.take_along_axis(s, ids, -1)
        gates = jnp.sum(jax.nn.one_hot(ids, AF_E) * (sel / jnp.sum(sel, -1, keepdims=True))[..., None], 1)
        load = jnp.sum(jax.nn.one_hot(ids, AF_E), (0, 1))
        if bug != "load-local-counts":
            load = psum(load, "dp")
        err = load - jnp.mean(load) if bug == "bias-update-sign-flipped" else jnp.mean(load) - load
        return x + jnp.einsum("te,tem->tm", gates, experts_dense(x, w1, w2)), bias + 0.01 * jnp.sign(err)
    return f


C.smap("s.aux_loss_free_bias_global_load.dp4", {"dp": DP}, aux_free, (P("dp"), P(), P(), P(), P()), (P("dp"), P()),
       aux_free_ref, (R(AF_T, M), R(M, AF_E, scale=0.5), R(AF_E, scale=0.1), R(AF_E, M, H, scale=0.3),
                      R(AF_E, H, M, scale=0.3)),
       bugs=[("load-local-counts", ["missing-all-reduce"]), ("bias-update-sign-flipped", ["numerics"])])


# ---------------------------------------------------------------------------
# 11. DeepSeek-V3 group-limited routing: 16 experts in 4 groups, one group
#     per ep device (router columns, bias and expert weights over ep); a
#     group's score the sum of its two best biased scores, the top-2 groups
#     kept, top-4 experts among them. Tokens replicated: the group scores
#     all_gathered (untiled, (ep, T), transposed), the biased and unbiased
#     scores all_gathered tiled along the expert dim; each device runs its
#     experts gated, psum over ep.
GL_T, GL_E, GL_G, GL_K = 16, 16, 4, 4


def group_limited_gates(s, sb, gscore):
    _, gi = lax.top_k(gscore, 2)
    gmask = jnp.repeat(jnp.sum(jax.nn.one_hot(gi, GL_G), 1), GL_E // GL_G, 1)
    _, ids = lax.top_k(jnp.where(gmask > 0, sb, -jnp.inf), GL_K)
    sel = jnp.take_along_axis(s, ids, -1)
    return jnp.sum(jax.nn.one_hot(ids, GL_E) * (sel / jnp.sum(sel, -1, keepdims=True))[..., None], 1)


def group_limited_ref(x, wg, bias, w1, w2):
    s = jax.nn.sigmoid(x @ wg)
    sb = s + bias
    gscore = jnp.sum(lax.top_k(sb.reshape(x.shape[0], GL_G, GL_E // GL_G), 2)[0], -1)
    gates = group_limited_gates(s, sb, gscore)
    return x + jnp.einsum("te,tem->tm", gates, experts_dense(x, w1, w2))


def group_limited(bug):
    def f(x, wg, bias, w1, w2):
        el = w1.shape[0]
        s = jax.nn.sigmoid(x @ wg)
        sb = s + bias
        gs = lax.all_gather(jnp.sum(lax.top_k(sb, 2)[0], -1), "ep")  # (ep, T)
        gscore = gs.reshape(x.shape[0], GL_G) if bug == "group-scores-reshaped" else gs.T
        sa, sba = lax.all_gather(jnp.stack([s, sb]), "ep", axis=2, tiled=True)
        gates = group_limited_gates(sa, sba, gscore)
        off = 0 if bug == "gates-offset-missing" else idx("ep") * el
        g = lax.dynamic_slice_in_dim(gates, off, el, 1)
        return x + psum(jnp.einsum("te,tem->tm", g, experts_dense(x, w1, w2)), "ep")
    return f


C.smap("s.group_limited_routing_router_cols_ep.ep4", {"ep": EP}, group_limited,
       (P(), P(None, "ep"), P("ep"), P("ep"), P("ep")), P(), group_limited_ref,
       (R(GL_T, M), R(M, GL_E, scale=0.5), R(GL_E, scale=0.1), R(GL_E, M, H, scale=0.3), R(GL_E, H, M, scale=0.3)),
       bugs=[("group-scores-reshaped", ["wrong-reshape-order"]), ("gates-offset-missing", ["wrong-offset"])])


# ---------------------------------------------------------------------------
# 12. bf16 expert parallelism: bf16 tokens and expert weights through the
#     all_to_alls, the router in f32 (the tokens upcast), expert matmuls on
#     upcast operands (XLA:CPU has no bf16 x bf16 = f32 dot for the
#     baseline's fused form) with a bf16 hidden and bf16 outputs, the combine in f32, the residual
#     output cast to bf16. Top-1 with capacity = group size (nothing drops),
#     8 experts over ep4.
BF_S, BF_E = 16, 8
bf = lambda a: a.astype(jnp.bfloat16)
f32 = lambda a: a.astype(jnp.float32)


def bf16_experts(xe, w1, w2):
    h = bf(jax.nn.gelu(jnp.einsum("...ecm,emh->...ech", f32(xe), f32(w1))))
    return bf(jnp.einsum("...ech,ehm->...ecm", f32(h), f32(w2)))


def bf16_moe_ref(x, wg, w1, w2):
    xg = x.reshape(-1, BF_S, M)
    comb = jax.vmap(lambda t: top1_gating(f32(t) @ wg, BF_S))(xg)
    ye = bf16_experts(jnp.einsum("gsec,gsm->gecm", bf(comb > 0), xg), w1, w2)
    return bf(f32(xg) + jnp.einsum("gsec,gecm->gsm", comb, f32(ye))).reshape(x.shape)


def bf16_ep(bug):
    def f(x, wg, w1, w2):
        el = w1.shape[0]
        logits = x @ bf(wg) if bug == "router-logits-bf16" else f32(x) @ wg
        comb = top1_gating(f32(logits), BF_S)
        xe = jnp.einsum("sec,sm->ecm", bf(comb > 0), x).reshape(EP, el, BF_S, M)
        ye = bf16_experts(lax.all_to_all(xe, "ep", 0, 0, tiled=True), w1, w2)
        ye = lax.all_to_all(ye, "ep", 0, 0, tiled=True).reshape(BF_E, BF_S, M)
        if bug == "combine-in-bf16":
            return x + jnp.einsum("sec,ecm->sm", bf(comb), ye)
        return bf(f32(x) + jnp.einsum("sec,ecm->sm", comb, f32(ye)))
    return f


C.smap("s.bf16_tokens_a2a_f32_router_combine.ep4", {"ep": EP}, bf16_ep, (P("ep"), P(), P("ep"), P("ep")), P("ep"),
       bf16_moe_ref, (bf(R(EP * BF_S, M)), R(M, BF_E), bf(R(BF_E, M, H, scale=0.3)), bf(R(BF_E, H, M, scale=0.3))),
       bugs=[("router-logits-bf16", ["dtype-precision"]), ("combine-in-bf16", ["dtype-precision"])])


# ---------------------------------------------------------------------------
# 13. an Adam step of a MoE transformer block (single-head causal attention,
#     then top-2 over 4 experts, dense-masked, no capacity) with the
#     load-balancing loss and the router z-loss over the global batch;
#     data parallel over dp, everything replicated, check_vma=True: the
#     loss terms pmean'd (f and P separately, then multiplied), the
#     gradients come out invariant.
BK_E, BK_T = 4, 8
bk_opt = optax.adam(0.01)


def moe_block(p, x):
    h = x * lax.rsqrt(jnp.mean(x * x, -1, keepdims=True) + 1e-6)
    q, k, v = h @ p["wq"], h @ p["wk"], h @ p["wv"]
    s = jnp.einsum("btd,bsd->bts", q, k) / np.sqrt(q.shape[-1])
    s = jnp.where(np.tril(np.ones((x.shape[1], x.shape[1]), bool)), s, -jnp.inf)
    x = x + jnp.einsum("bts,bsd->btd", jax.nn.softmax(s, -1), v) @ p["wo"]
    h = x * lax.rsqrt(jnp.mean(x * x, -1, keepdims=True) + 1e-6)
    t = h.reshape(-1, M)
    logits = t @ p["wg"]
    top, ids = lax.top_k(logits, 2)
    gates = jnp.sum(jax.nn.one_hot(ids, BK_E) * jax.nn.softmax(top, -1)[..., None], 1)
    y = jnp.einsum("te,tem->tm", gates, experts_dense(t, p["w1"], p["w2"]))
    frac = lax.stop_gradient(jnp.mean(jnp.sum(jax.nn.one_hot(ids, BK_E), 1), 0) / 2)
    return x + y.reshape(x.shape), frac, jnp.mean(jax.nn.softmax(logits, -1), 0), \
        jnp.mean(jnp.square(jax.nn.logsumexp(logits, -1)))


def block_loss_ref(p, x, y):
    out, frac, pm, z = moe_block(p, x)
    return mse(out, y) + 0.05 * BK_E * jnp.sum(frac * pm) + 0.01 * z


def block_adam_ref(p, st, x, y):
    lv, g = jax.value_and_grad(block_loss_ref)(p, x, y)
    u, st = bk_opt.update(g, st, p)
    return optax.apply_updates(p, u), st, lv


def block_adam_dp(bug):
    def f(p, st, x, y):
        def loss(p):
            out, frac, pm, z = moe_block(p, x)
            task = psum(mse(out, y), "dp") if bug == "loss-psum-not-pmean" else pmean(mse(out, y), "dp")
            if bug == "aux-mean-of-local-products":
                aux = pmean(BK_E * jnp.sum(frac * pm), "dp")
            else:
                aux = BK_E * jnp.sum(pmean(frac, "dp") * pmean(pm, "dp"))
            return task + 0.05 * aux + 0.01 * pmean(z, "dp")
        lv, g = jax.value_and_grad(loss)(p)
        u, st = bk_opt.update(g, st, p)
        return optax.apply_updates(p, u), st, lv
    return f


bk_p = {"wq": R(M, 8, scale=0.3), "wk": R(M, 8, scale=0.3), "wv": R(M, 8, scale=0.3), "wo": R(8, M, scale=0.3),
        "wg": R(M, BK_E), "w1": R(BK_E, M, H, scale=0.3), "w2": R(BK_E, H, M, scale=0.3)}
bk_ps = {k: P() for k in bk_p}
bk_st = np_tree(bk_opt.init(bk_p))
C.smap("s.moe_block_adam_global_aux_zloss_vma.dp4", {"dp": DP}, block_adam_dp,
       (bk_ps, state_specs(bk_st, bk_ps), P("dp"), P("dp")), (bk_ps, state_specs(bk_st, bk_ps), P()), block_adam_ref,
       (bk_p, bk_st, R(4, BK_T, M), R(4, BK_T, M, scale=0.5)), check_vma=True,
       bugs=[("loss-psum-not-pmean", ["wrong-collective-op"]), ("aux-mean-of-local-products", ["missing-all-reduce"])])


# ---------------------------------------------------------------------------
# 14. V-MoE batch prioritized routing: in each group the buffer positions
#     go to the tokens in order of descending gate (stable argsort), the
#     positions put back in token order by the inverse permutation; top-1,
#     capacity 4 of 16 tokens over 4 experts (drops, the same groups in the
#     baseline). One expert per ep device, the non-tiled all_to_all
#     (split_axis = concat_axis = 0) there and back.
BP_S, BP_E, BP_CAP = 16, 4, 4


def bpr_gating(logits, cap, unpermute=True):
    probs = jax.nn.softmax(logits, -1)
    oh = jax.nn.one_hot(jnp.argmax(probs, -1), logits.shape[-1])
    gate = jnp.max(probs, -1)
    order = jnp.argsort(-gate, stable=True)
    pos_sorted = jnp.cumsum(oh[order], 0) - oh[order]
    pos = pos_sorted[jnp.argsort(order)] if unpermute else pos_sorted[order]
    oh = oh * (pos < cap)
    slot = jax.nn.one_hot(jnp.sum(pos * oh, -1).astype(jnp.int32), cap)
    return gate[:, None, None] * oh[:, :, None] * slot[:, None, :]


def bpr_ref(x, wg, w1, w2):
    xg = x.reshape(-1, BP_S, M)
    return x + moe_groups(xg, wg, w1, w2, lambda l: bpr_gating(l, BP_CAP)).reshape(x.shape)


def bpr_ep(bug):
    def f(x, wg, w1, w2):
        comb = bpr_gating(x @ wg, BP_CAP, unpermute=bug != "positions-not-unpermuted")
        xe = lax.all_to_all(jnp.einsum("sec,sm->ecm", (comb > 0).astype(x.dtype), x), "ep", 0, 0)
        ye = jnp.einsum("gch,hm->gcm", jax.nn.gelu(jnp.einsum("gcm,mh->gch", xe, w1[0])), w2[0])
        if bug == "a2a-back-concat-axis-1":
            ye = lax.all_to_all(ye, "ep", 0, 1).reshape(BP_E, BP_CAP, M)
        else:
            ye = lax.all_to_all(ye, "ep", 0, 0)
        return x + jnp.einsum("sec,ecm->sm", comb, ye)
    return f


C.smap("s.batch_prioritized_routing_untiled_a2a.ep4", {"ep": EP}, bpr_ep, (P("ep"), P(), P("ep"), P("ep")),
       P("ep"), bpr_ref, (R(EP * BP_S, M), R(M, BP_E), R(BP_E, M, H, scale=0.3), R(BP_E, H, M, scale=0.3)),
       bugs=[("positions-not-unpermuted", ["wrong-permutation"]), ("a2a-back-concat-axis-1", ["wrong-all-to-all-axis"])])


# ---------------------------------------------------------------------------
# 15. DeepSeek-V3's sequence-wise balance loss: per sequence, f_i = E / (K T)
#     * (tokens choosing i) and P_i the mean of the normalised sigmoid
#     scores, loss sum_i f_i P_i averaged over the batch. The batch over dp
#     and each sequence over sp: the statistics psum'd over sp only (they are
#     per sequence), the mean over sequences pmean'd over dp.
SQ_E, SQ_K, SQ_T = 8, 2, 16


def seq_balance_ref(x, wg):
    s = jax.nn.sigmoid(x @ wg)
    _, ids = lax.top_k(s, SQ_K)
    cnt = jnp.sum(jax.nn.one_hot(ids, SQ_E), (1, 2))  # (B, E)
    pm = jnp.mean(s / jnp.sum(s, -1, keepdims=True), 1)
    return jnp.mean(jnp.sum(cnt * SQ_E / (SQ_K * x.shape[1]) * pm, -1))


def seq_balance(bug):
    def f(x, wg):
        s = jax.nn.sigmoid(x @ wg)
        _, ids = lax.top_k(s, SQ_K)
        stats = jnp.stack([jnp.sum(jax.nn.one_hot(ids, SQ_E), (1, 2)), jnp.sum(s / jnp.sum(s, -1, keepdims=True), 1)])
        stats = psum(stats, ("dp", "sp") if bug == "stats-over-dp-and-sp" else "sp")
        cnt, pm = stats[0], stats[1] / (x.shape[1] if bug == "mean-over-local-length" else SQ_T)
        return pmean(jnp.mean(jnp.sum(cnt * SQ_E / (SQ_K * SQ_T) * pm, -1)), "dp")
    return f


C.smap("s.seqwise_balance_loss_stats_over_sp.dp2xsp4", {"dp": 2, "sp": 4}, seq_balance,
       (P("dp", "sp"), P()), P(), seq_balance_ref, (R(4, SQ_T, M), R(M, SQ_E)),
       bugs=[("stats-over-dp-and-sp", ["wrong-collective-group"]), ("mean-over-local-length", ["numerics"])])


# ---------------------------------------------------------------------------
# 16. expert parallelism with FSDP'd expert weights on a square dp2 x ep2
#     mesh: tokens over (dp, ep) (4 groups of 16, per-group capacity 6 over
#     4 experts: drops), experts over ep, each expert's weights further
#     split over dp along their first dim and all_gathered over dp before use
#     (ZeRO-3); all_to_all over ep.
FS_S, FS_E, FS_CAP = 16, 4, 6


def ep_fsdp_ref(x, wg, w1, w2):
    xg = x.reshape(-1, FS_S, M)
    return x + moe_groups(xg, wg, w1, w2, lambda l: top1_gating(l, FS_CAP)).reshape(x.shape)


def ep_fsdp(bug):
    def f(x, wg, w1, w2):
        el = w1.shape[0]
        gather_axis = "ep" if bug == "weights-gathered-over-ep" else "dp"
        w1 = lax.all_gather(w1, gather_axis, axis=1, tiled=True)
        w2 = lax.all_gather(w2, gather_axis, axis=1, tiled=True)
        comb = top1_gating(x @ wg, FS_CAP)
        xe = jnp.einsum("sec,sm->ecm", (comb > 0).astype(x.dtype), x).reshape(2, el, FS_CAP, M)
        a2a_axis = "dp" if bug == "a2a-over-dp" else "ep"
        ye = experts_slots(lax.all_to_all(xe, a2a_axis, 0, 0, tiled=True), w1, w2)
        ye = lax.all_to_all(ye, a2a_axis, 0, 0, tiled=True).reshape(FS_E, FS_CAP, M)
        return x + jnp.einsum("sec,ecm->sm", comb, ye)
    return f


C.smap("s.ep_fsdp_expert_weights_gathered.dp2xep2", {"dp": 2, "ep": 2}, ep_fsdp,
       (P(("dp", "ep")), P(), P("ep", "dp"), P("ep", "dp")), P(("dp", "ep")), ep_fsdp_ref,
       (R(4 * FS_S, M), R(M, FS_E), R(FS_E, M, H, scale=0.3), R(FS_E, H, M, scale=0.3)),
       bugs=[("weights-gathered-over-ep", ["wrong-collective-group"]), ("a2a-over-dp", ["wrong-all-to-all-axis"])])


# ---------------------------------------------------------------------------
# 17. top-1 routing with a quantised router (logits rounded to multiples of
#     0.5, so many ties; argmax takes the lowest expert index). Router
#     columns and experts over ep (2 per device), tokens replicated: each
#     device's best local logit and its global index; the global maximum by
#     pmax, the winner the lowest device holding it (pmin), its index
#     broadcast by a psum masked to the winner; the softmax gate from a
#     psum'd denominator; each device runs its experts, psum over ep.
QR_T, QR_E = 16, 8


def quant_top1_ref(x, wg, w1, w2):
    lg = jnp.round(x @ wg * 2.0) / 2.0
    e = jnp.argmax(lg, -1)
    gate = jnp.max(jax.nn.softmax(lg, -1), -1)
    y = jnp.take_along_axis(experts_dense(x, w1, w2), e[:, None, None], 1)[:, 0]
    return x + gate[:, None] * y


def quant_top1(bug):
    def f(x, wg, w1, w2):
        el, me = w1.shape[0], idx("ep")
        lg = jnp.round(x @ wg * 2.0) / 2.0  # (T, E_loc)
        lmax = jnp.max(lg, -1)
        lid = jnp.argmax(lg, -1) + (0 if bug == "local-index-no-offset" else me * el)
        gmax = pmax(lmax, "ep")
        if bug == "tied-indices-summed":
            e = psum(jnp.where(lmax == gmax, lid, 0), "ep")
        else:
            win = lax.pmin(jnp.where(lmax == gmax, me, EP), "ep")
            e = psum(jnp.where(me == win, lid, 0), "ep")
        gate = 1.0 / psum(jnp.sum(jnp.exp(lg - gmax[:, None]), -1), "ep")
        sel = jax.nn.one_hot(e - me * el, el)  # zero rows for experts elsewhere
        y = jnp.einsum("te,tem->tm", sel, experts_dense(x, w1, w2))
        return x + gate[:, None] * psum(y, "ep")
    return f


C.smap("s.top1_quantised_router_ties_cols_ep.ep4", {"ep": EP}, quant_top1, (P(), P(None, "ep"), P("ep"), P("ep")),
       P(), quant_top1_ref, (R(QR_T, M), R(M, QR_E, scale=0.15), R(QR_E, M, H, scale=0.3), R(QR_E, H, M, scale=0.3)),
       bugs=[("local-index-no-offset", ["wrong-offset"]), ("tied-indices-summed", ["numerics"])])


# ---------------------------------------------------------------------------
# 18. an SGD-with-momentum step through expert-choice routing (2.) with
#     check_vma=True: tokens and experts over ep, the router replicated; the
#     loss pmean'd over ep, the gradients left to the type system (the
#     router's comes out invariant, the experts' varying).
ecs_opt = optax.sgd(0.1, momentum=0.9)


def ec_sgd_ref(p, st, x, y):
    lv, g = jax.value_and_grad(lambda p: mse(expert_choice_ref(x, p["wg"], p["w1"], p["w2"]), y))(p)
    u, st = ecs_opt.update(g, st, p)
    return optax.apply_updates(p, u), st, lv


def ec_sgd(bug):
    def f(p, st, x, y):
        def loss(p):
            el = p["w1"].shape[0]
            s = lax.all_gather(jax.nn.softmax(x @ p["wg"], -1), "ep", tiled=True)
            off = 0 if bug == "expert-cols-no-offset" else idx("ep") * el
            g, ix = lax.top_k(lax.dynamic_slice_in_dim(s, off, el, 1).T, EC_K)
            xa = lax.all_gather(x, "ep", tiled=True)
            ye = experts_slots(xa[ix], p["w1"], p["w2"]) * g[..., None]
            full = jnp.zeros_like(xa).at[ix.reshape(-1)].add(ye.reshape(-1, M))
            out = x + lax.psum_scatter(full, "ep", scatter_dimension=0, tiled=True)
            return psum(mse(out, y), "ep") if bug == "loss-psum-not-pmean" else pmean(mse(out, y), "ep")
        lv, g = jax.value_and_grad(loss)(p)
        u, st = ecs_opt.update(g, st, p)
        return optax.apply_updates(p, u), st, lv
    return f


ecs_p = {"wg": R(M, EC_E), "w1": R(EC_E, M, H, scale=0.3), "w2": R(EC_E, H, M, scale=0.3)}
ecs_ps = {"wg": P(), "w1": P("ep"), "w2": P("ep")}
ecs_st = np_tree(ecs_opt.init(ecs_p))
C.smap("s.expert_choice_momentum_step_vma.ep4", {"ep": EP}, ec_sgd,
       (ecs_ps, state_specs(ecs_st, ecs_ps), P("ep"), P("ep")), (ecs_ps, state_specs(ecs_st, ecs_ps), P()), ec_sgd_ref,
       (ecs_p, ecs_st, R(EC_T, M), R(EC_T, M, scale=0.5)), check_vma=True,
       bugs=[("expert-cols-no-offset", ["wrong-offset"]), ("loss-psum-not-pmean", ["wrong-collective-op"])])


# ===========================================================================
# GSPMD: jax.jit with in / out shardings, constraints where a user puts them.
def wsc(mesh, a, *spec):
    return lax.with_sharding_constraint(a, NamedSharding(make_mesh(mesh), P(*spec)))


M_DPEP = {"dp": 2, "ep": 4}

# ---------------------------------------------------------------------------
# 19. GShard top-2 (1.) as the einsum program: groups (G, S, M) over the
#     tuple (dp, ep), the dispatched tensor (G, E, C, M) constrained with
#     the experts over ep (the partitioner's all-to-all), expert weights
#     over ep.
def gshard_wsc(xg, wg, w1, w2):
    comb = jax.vmap(lambda t: top2_gating(t @ wg, G1_CAP))(xg)
    xe = wsc(M_DPEP, jnp.einsum("gsec,gsm->gecm", (comb > 0).astype(xg.dtype), xg), None, "ep")
    ye = wsc(M_DPEP, experts_slots(xe, w1, w2), None, "ep")
    return jnp.einsum("gsec,gecm->gsm", comb, ye)


C.gspmd("g.gshard_top2_einsum_dispatch_wsc.dp2xep4", M_DPEP, (P(("dp", "ep")), P(), P("ep"), P("ep")),
        P(("dp", "ep")), gshard_wsc,
        (R(8, G1_S, M), R(M, G1_E), R(G1_E, M, H, scale=0.3), R(G1_E, H, M, scale=0.3)))

# ---------------------------------------------------------------------------
# 20. expert-choice routing (2.) with tokens over dp and experts over ep.
C.gspmd("g.expert_choice_tokens_dp_experts_ep.dp2xep4", M_DPEP, (P("dp"), P(), P("ep"), P("ep")), P("dp"),
        expert_choice_ref, (R(EC_T, M), R(M, EC_E), R(EC_E, M, H, scale=0.3), R(EC_E, H, M, scale=0.3)))

# ---------------------------------------------------------------------------
# 21. the sorted ragged_dot Mixtral layer (3.) with the expert hidden dim
#     over tp4, tokens replicated.
C.gspmd("g.mixtral_sorted_ragged_dot_hidden_tp.tp4", {"tp": 4}, (P(), P(), P(None, None, "tp"), P(None, "tp")), P(),
        mixtral_sorted_ref, (R(MX_T, M), R(M, MX_E), R(MX_E, M, H, scale=0.3), R(MX_E, H, M, scale=0.3)))

# ---------------------------------------------------------------------------
# 22. an AdamW step of the DeepSeek layer (4.: shared expert, biased top-2
#     selection, normalised sigmoid gates), routed experts over ep, the
#     shared expert's hidden over ep too (as tensor parallelism), tokens over
#     dp; the bias an input, not trained.
ds_opt = optax.adamw(0.01, weight_decay=0.01)


def ds_adamw_step(p, st, bias, x, y):
    lv, g = jax.value_and_grad(lambda p: mse(deepseek_ref(x, p["wg"], bias, p["ws1"], p["ws2"], p["w1"],
                                                          p["w2"]), y))(p)
    u, st = ds_opt.update(g, st, p)
    return optax.apply_updates(p, u), st, lv


ds_p = {"wg": R(M, DS_E, scale=0.5), "ws1": R(M, H, scale=0.3), "ws2": R(H, M, scale=0.3),
        "w1": R(DS_E, M, H // 2, scale=0.3), "w2": R(DS_E, H // 2, M, scale=0.3)}
ds_ps = {"wg": P(), "ws1": P(None, "ep"), "ws2": P("ep"), "w1": P("ep"), "w2": P("ep")}
ds_st = np_tree(ds_opt.init(ds_p))
C.gspmd("g.deepseek_shared_routed_adamw.dp2xep4", M_DPEP, (ds_ps, state_specs(ds_st, ds_ps), P(), P("dp"), P("dp")),
        (ds_ps, state_specs(ds_st, ds_ps), P()), ds_adamw_step,
        (ds_p, ds_st, R(DS_E, scale=0.2), R(DS_T, M), R(DS_T, M, scale=0.5)))

# ---------------------------------------------------------------------------
# 23. the MoE block's Adam step (13.) with the experts over ep and the batch
#     over dp.
bk_ps2 = dict(bk_ps, w1=P("ep"), w2=P("ep"))
C.gspmd("g.moe_block_adam_aux_zloss.dp2xep4", M_DPEP, (bk_ps2, state_specs(bk_st, bk_ps2), P("dp"), P("dp")),
        (bk_ps2, state_specs(bk_st, bk_ps2), P()), block_adam_ref,
        (bk_p, bk_st, R(4, BK_T, M), R(4, BK_T, M, scale=0.5)))

# ---------------------------------------------------------------------------
# 24. Soft MoE (9.) with the sequence over sp and the experts' weights over
#     ep, the slot inputs constrained with the experts over ep.
M_SPEP = {"sp": 4, "ep": 2}


def soft_moe_wsc(x, phi, w1, w2):
    lg = jnp.einsum("btm,mn->btn", x, phi)
    xs = jnp.einsum("btn,btm->bnm", jax.nn.softmax(lg, 1), x).reshape(x.shape[0], SM_E, SM_SL, M)
    xs = wsc(M_SPEP, xs, None, "ep")
    ys = experts_slots(xs, w1, w2).reshape(x.shape[0], SM_E * SM_SL, M)
    return jnp.einsum("btn,bnm->btm", jax.nn.softmax(lg, 2), ys)


C.gspmd("g.soft_moe_seq_sp_slots_ep.sp4xep2", M_SPEP, (P(None, "sp"), P(), P("ep"), P("ep")), P(None, "sp"),
        soft_moe_wsc, (R(2, 32, M), R(M, SM_E * SM_SL), R(SM_E, M, H, scale=0.3), R(SM_E, H, M, scale=0.3)))

# ---------------------------------------------------------------------------
# 25. Mixtral top-2 with the experts as a jax.vmap of one FFN over stacked
#     weights (ep), every expert on every token, the stacked outputs
#     (E, T, M) constrained over (ep, dp), gathered by the chosen ids.
def mixtral_vmap(x, wg, w1, w2):
    top, ids = lax.top_k(x @ wg, 2)
    ffn = lambda a, b: jax.nn.silu(x @ a) @ b
    ys = wsc(M_DPEP, jax.vmap(ffn)(w1, w2), "ep", "dp")  # (E, T, M)
    y = jnp.take_along_axis(jnp.swapaxes(ys, 0, 1), ids[..., None], 1)
    return jnp.einsum("tk,tkm->tm", jax.nn.softmax(top, -1), y)


C.gspmd("g.mixtral_vmap_experts_stacked.dp2xep4", M_DPEP, (P("dp"), P(), P("ep"), P("ep")), P("dp"), mixtral_vmap,
        (R(MXE_T, M), R(M, MXE_E), R(MXE_E, M, H, scale=0.3), R(MXE_E, H, M, scale=0.3)))

# ---------------------------------------------------------------------------
# 26. Switch top-1 with the global capacity (5.) dispatched by
#     jax.ops.segment_sum into an (E * C + 1, M) buffer (the last row takes
#     the dropped tokens), the buffer constrained with the experts over ep,
#     each expert's hidden over tp, the outputs gathered back by slot.
M_DET = {"dp": 2, "ep": 2, "tp": 2}


def switch_segment(x, wg, w1, w2):
    cap = int(SW_CF * x.shape[0] / SW_E)
    p = jax.nn.softmax(x @ wg, -1)
    e = jnp.argmax(p, -1)
    oh = jax.nn.one_hot(e, SW_E)
    pos = jnp.sum((jnp.cumsum(oh, 0) - oh) * oh, -1).astype(jnp.int32)
    slot = jnp.where(pos < cap, e * cap + pos, SW_E * cap)
    buf = jax.ops.segment_sum(x, slot, num_segments=SW_E * cap + 1)[:-1].reshape(SW_E, cap, M)
    out = experts_slots(wsc(M_DET, buf, "ep"), w1, w2).reshape(SW_E * cap, M)
    y = jnp.concatenate([out, jnp.zeros((1, M), out.dtype)])[slot]
    return x + jnp.max(p, -1)[:, None] * y


C.gspmd("g.switch_global_capacity_segment_sum.dp2xep2xtp2", M_DET, (P("dp"), P(), P("ep", None, "tp"),
        P("ep", "tp")), P("dp"), switch_segment,
        (R(SW_T, M), R(M, SW_E), R(SW_E, M, H, scale=0.3), R(SW_E, H, M, scale=0.3)))

# ---------------------------------------------------------------------------
# 27. the bf16 grouped layer (12.) with the groups over dp and the experts
#     over ep.
C.gspmd("g.bf16_grouped_top1_f32_router.dp2xep4", M_DPEP, (P("dp"), P(), P("ep"), P("ep")), P("dp"), bf16_moe_ref,
        (bf(R(4 * BF_S, M)), R(M, BF_E), bf(R(BF_E, M, H, scale=0.3)), bf(R(BF_E, H, M, scale=0.3))))

# ---------------------------------------------------------------------------
# 28. the auxiliary-loss-free layer and bias update (10.) with the tokens
#     over dp and the experts over ep.
C.gspmd("g.aux_loss_free_bias_update.dp4xep2", {"dp": 4, "ep": 2}, (P("dp"), P(), P(), P("ep"), P("ep")),
        (P("dp"), P()), aux_free_ref, (R(AF_T, M), R(M, AF_E, scale=0.5), R(AF_E, scale=0.1),
                                       R(AF_E, M, H, scale=0.3), R(AF_E, H, M, scale=0.3)))

# ---------------------------------------------------------------------------
# 29. group-limited routing (11.) with the router columns and experts over
#     ep and each expert's hidden over tp.
C.gspmd("g.group_limited_routing.ep4xtp2", {"ep": EP, "tp": 2}, (P(), P(None, "ep"), P("ep"), P("ep", None, "tp"),
        P("ep", "tp")), P(), group_limited_ref,
        (R(GL_T, M), R(M, GL_E, scale=0.5), R(GL_E, scale=0.1), R(GL_E, M, H, scale=0.3), R(GL_E, H, M, scale=0.3)))

# ---------------------------------------------------------------------------
# 30. the Switch SGD step with the global load-balancing loss (6.): groups
#     over (dp, ep), experts over ep.
C.gspmd("g.switch_sgd_global_aux.dp2xep4", M_DPEP, (sg_ps, P(("dp", "ep")), P(("dp", "ep"))), (sg_ps, P()),
        switch_sgd_ref, (sg_p, R(SG_G * SG_S, M), R(SG_G * SG_S, M, scale=0.5)))

# ---------------------------------------------------------------------------
MISS_PREC = ("a difference of bf16 rounding only: execution runs every type unrounded, and the rules do not name a value rounded to bf16 where the baseline keeps it in f32 (only partial sums so rounded)")
C.known_miss("s.bf16_tokens_a2a_f32_router_combine.ep4.bug.combine-in-bf16", MISS_PREC)
C.known_miss("s.bf16_tokens_a2a_f32_router_combine.ep4.bug.router-logits-bf16", MISS_PREC)
MISS_SIGN = ("the rules name the local load (a missing all-reduce), but the bias update takes only its sign, which the local and the global loads share on random inputs, so execution contradicts the rules and nothing is decided")
C.known_miss("s.aux_loss_free_bias_global_load.dp4.bug.load-local-counts", MISS_SIGN)
C.finish()
