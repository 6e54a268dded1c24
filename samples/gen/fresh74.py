"""samples/fresh74: a 74th batch of programs as a user writes them, on the theme of mixture-of-experts layers as recent models write them in current JAX (grouped expert GEMMs with lax.ragged_dot over tokens sorted by expert, DeepSeek-style auxiliary-loss-free balancing, shared plus routed experts, expert-choice routing, capacity-limited dispatch with token dropping, device-limited routing, optax training steps under ep, dp x ep and ep x tp), none of them an idiom of samples/fresh .. fresh26, probe, train or wild.
shard_map families:
 1. capacity-limited top-2 over groups = the dp shards (dp4 x tp2): the
    assignments sorted by expert (stable argsort), group sizes from
    jnp.bincount, a row's slot its sorted index minus its expert's start
    (cumsum of sizes), rows past the capacity zeroed before the SwiGLU
    lax.ragged_dot chain, the expert hidden dim over tp and the combine
    psum'd over tp. Bugs: no psum over tp, expert starts from group sizes
    psum'd over dp, the capacity computed from the global batch.
 2. an SGD-with-momentum step (optax) of a sigmoid-scored top-2 layer with
    DeepSeek's auxiliary-loss-free balancing (dp2 x ep4, check_vma=True):
    a per-expert bias, sharded over ep, all_gather'd and added to the
    scores for the top-k choice only; gates the renormalised unbiased
    scores; experts over ep, combine psum'd over ep; loss pmean'd over dp;
    after the step the bias moves by 0.01 * sign(mean load - load) with the
    load psum'd over dp, each ep rank updating its own slice. Bugs: gates
    from the biased scores, gradients of the local (not pmean'd) loss, the
    bias slice of the load at offset 0.
 3. DeepSeek-V2 device-limited routing on ep4 (tokens and experts over ep,
    2 experts per device): per token the top-2 devices by their best
    expert's softmax score, then the top-3 experts on those devices
    (gates unnormalised), a shared GELU expert replicated; dispatch as an
    (n, N, D) buffer per destination device by a non-tiled all_to_all with
    the per-device combine weights beside it, the results back by a second
    all_to_all and summed. Bugs: devices grouped as experts e % n (an
    interleaving reshape), the weights sent sliced at offset 0 for every
    destination, no all_to_all back.
 4. expert-choice routing within groups = the dp shards (dp2 x ep4): the
    softmax over all 8 experts, each device's 2 experts take their top-C
    tokens of the group (C = 2 * T / E), gather, SwiGLU, scatter-add,
    psum over ep. Bugs: softmax over the device's own expert columns only,
    C from the global batch, psum over (dp, ep).
 5. an AdamW step of a dropless top-2 layer on ep2 x tp4 (check_vma=True):
    tokens over ep all_gather'd, each ep rank's 4 experts' assignments
    sorted first with every other assignment sent to a sentinel group 4
    whose (zero) weights are concatenated to the local stack, group sizes
    bincount(length=5), ragged_dot with the expert hidden over tp, psum over
    tp, psum_scatter back over ep; MSE + 1.0 * Switch load-balancing loss +
    z-loss on the gathered (global) router statistics; loss pmean'd over ep.
    Bugs: local expert ids without the ep offset, psum then the first block
    (offset 0) instead of psum_scatter, the load-balancing statistics of
    the local tokens only (pmean'd).
 6. top-1 with a global per-expert capacity and priority by the chosen
    router logit rounded to 0.5 (ties on purpose, broken by the lower
    global token index), tokens over dp4: ranks from all_gather'd expert ids,
    priorities and global indices. Bugs: ranks among the local tokens only,
    ties broken by the local index, a rank that counts the token itself.
 7. Llama-4-style top-1 with the sigmoid gate applied to the expert's
    input, bf16 tokens and expert weights through the ragged_dot chain with
    f32 accumulation (preferred_element_type), a shared SwiGLU expert; dp2 x
    tp4 with both hidden dims over tp, the routed partial reduced by
    psum_scatter + all_gather along the model dim, the shared one along the
    tokens. Bugs: the shared expert's partial not reduced, the routed
    pieces all_gather'd along the tokens (then reshaped), the gate applied
    to the expert's output instead of its input.
GSPMD pairs (jax.jit with in/out shardings): 8. the capacity-limited sorted
ragged_dot layer of 1. over groups by a Python loop (dp4 x tp2); 9. expert choice of
4. (dp2 x ep4); 10. DeepSeek-V3 node-limited routing (sigmoid + bias for
the choice, 4 groups of 2 experts scored by the sum of their top-2 biased
scores, top-2 groups, top-3 experts, gates renormalised x 2.5) with a shared
expert, experts over ep and tokens over dp; 11. the auxiliary-loss-free SGD
step of 2. (dp2 x ep4); 12. the AdamW ragged_dot step of 5. with experts over
ep and the expert hidden over tp; 13. the device-limited layer of 3. (ep4);
14. the Llama-4-style bf16 layer of 7. (dp2 x tp4).
Routing is deterministic (lax.top_k, argmax and stable argsorts prefer the
lower index). Capacities: 1./8. drop (capacity 2 per expert and group of 8
tokens x 2 choices), 4./9. expert choice has no drops by construction but
leaves tokens unchosen, 6. drops (capacity 5 per expert of 32 tokens over 4
experts); 2., 3., 5., 7., 10.-14. are dropless.
Exported with scalify_jax.export_pair; every pair is also run by JAX on
seeded inputs and its manifest entry records the largest difference from
the single-device run ("numerics").
Run from the repository root: bash samples/gen/run_fresh74.sh [SUBSTR...]
(only the pairs whose name contains a SUBSTR; the others keep their entries).
"""
import sys
import numpy as np
import jax, jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec as P
import optax
sys.path.insert(0, "samples/gen")  # run from the repository root (run_fresh74.sh)
from fresh_lib import Corpus, seeded, state_specs  # noqa: E402

SCRIPT = "samples/gen/fresh74.py"
C = Corpus("samples/fresh74", SCRIPT, "samples/gen/run_fresh74.sh", sys.argv[1:])
rng, R, I = seeded(7474)
psum, pmean, idx = lax.psum, lax.pmean, lax.axis_index

D, F, E = 16, 32, 8


def swiglu_dense(x, w1, w3, w2):
    """every expert on every row: (N, D) -> (E, N, D)"""
    h = jnp.einsum("nd,edf->enf", x, w1)
    g = jnp.einsum("nd,edf->enf", x, w3)
    return jnp.einsum("enf,efd->end", jax.nn.silu(h) * g, w2)


def swiglu_ragged(xs, w1, w3, w2, gs):
    h = jax.nn.silu(lax.ragged_dot(xs, w1, gs)) * lax.ragged_dot(xs, w3, gs)
    return lax.ragged_dot(h, w2, gs)


def experts(e, scale=0.3):
    return R(e, D, F, scale=scale), R(e, D, F, scale=scale), R(e, F, D, scale=scale)


# ---------------------------------------------------------------------------
# 1. capacity-limited top-2 by sorted positions, groups = dp shards,
#    expert hidden over tp.
T1, CAP1 = 8, 2


def cap_group(x, wr, w1, w3, w2, cap=CAP1, tp_sum=lambda y: y, sizes_for_starts=lambda s: s):
    t = x.shape[0]
    p = jax.nn.softmax(x @ wr, -1)
    g, e = lax.top_k(p, 2)
    g = g / jnp.sum(g, -1, keepdims=True)
    fe, fg = e.reshape(-1), g.reshape(-1)
    tok = jnp.repeat(jnp.arange(t), 2)
    order = jnp.argsort(fe, stable=True)
    se, st, sg = fe[order], tok[order], fg[order]
    sizes = jnp.bincount(fe, length=E)
    ss = sizes_for_starts(sizes)
    starts = jnp.cumsum(ss) - ss
    slot = jnp.arange(t * 2) - starts[se]
    keep = slot < cap
    xs = jnp.where(keep[:, None], x[st], 0.0)
    ys = swiglu_ragged(xs, w1, w3, w2, sizes)
    out = jnp.zeros_like(x).at[st].add(ys * jnp.where(keep, sg, 0.0)[:, None])
    return tp_sum(out)


def cap_ref(x, wr, w1, w3, w2):
    # (jax.vmap of ragged_dot over an lhs batch dim is not implemented: a loop over groups)
    return jnp.concatenate([cap_group(x[i:i + T1], wr, w1, w3, w2) for i in range(0, x.shape[0], T1)], 0)


def cap_sm(bug):
    def f(x, wr, w1, w3, w2):
        tp_sum = (lambda y: y) if bug == "no-tp-psum" else (lambda y: psum(y, "tp"))
        sfs = (lambda s: psum(s, "dp")) if bug == "starts-from-global-sizes" else (lambda s: s)
        cap = CAP1 * 4 if bug == "capacity-from-global-batch" else CAP1
        return cap_group(x, wr, w1, w3, w2, cap=cap, tp_sum=tp_sum, sizes_for_starts=sfs)
    return f


X1 = R(4 * T1, D)
WR1 = R(D, E, scale=0.5)
EX1 = experts(E)
SP1 = (P("dp"), P(), P(None, None, "tp"), P(None, None, "tp"), P(None, "tp", None))
C.smap("s.capacity_sorted_slots_ragged.dp4xtp2", {"dp": 4, "tp": 2}, cap_sm, SP1, P("dp"), cap_ref,
       (X1, WR1) + EX1,
       bugs=[("no-tp-psum", ["missing-collective"]), ("starts-from-global-sizes", ["wrong-offset"]),
             ("capacity-from-global-batch", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 2. auxiliary-loss-free balancing inside an SGD-momentum step (dp2 x ep4).
N2, EL2 = 16, 2
OPT2 = optax.sgd(0.1, momentum=0.9)
U2 = 0.01


def af_route(x, wr, b, biased_gates=False):
    s = jax.nn.sigmoid(x @ wr)
    _, e = lax.top_k(s + b, 2)
    m = jnp.sum(jax.nn.one_hot(e, E), 1)
    g = (s + b if biased_gates else s) * m
    return g / jnp.sum(g, -1, keepdims=True), jnp.sum(m, 0)


def af_step(p, s, b, x, y):
    def loss(p):
        cw, cnt = af_route(x, p["wr"], b)
        out = jnp.einsum("ne,end->nd", cw, swiglu_dense(x, p["w1"], p["w3"], p["w2"]))
        return jnp.mean(jnp.square(out - y)), cnt
    (l, cnt), g = jax.value_and_grad(loss, has_aux=True)(p)
    u, s = OPT2.update(g, s, p)
    b = b + U2 * jnp.sign(jnp.mean(cnt) - cnt)
    return optax.apply_updates(p, u), s, b, l


def af_sm(bug):
    def f(p, s, b, x, y):
        me = idx("ep")
        bfull = lax.all_gather(b, "ep", tiled=True)

        def loss(p):
            cw, cnt = af_route(x, p["wr"], bfull, biased_gates=(bug == "biased-gates"))
            cl = lax.dynamic_slice_in_dim(cw, me * EL2, EL2, 1)
            out = psum(jnp.einsum("ne,end->nd", cl, swiglu_dense(x, p["w1"], p["w3"], p["w2"])), "ep")
            l = jnp.mean(jnp.square(out - y))
            if bug != "grad-of-local-loss":
                l = pmean(l, "dp")
            return l, cnt
        (l, cnt), g = jax.value_and_grad(loss, has_aux=True)(p)
        if bug == "grad-of-local-loss":
            l = pmean(l, "dp")
        u, s = OPT2.update(g, s, p)
        load = psum(cnt, "dp")
        off = 0 if bug == "bias-slice-offset0" else me * EL2
        b = b + U2 * jnp.sign(jnp.mean(load) - lax.dynamic_slice_in_dim(load, off, EL2))
        return optax.apply_updates(p, u), s, b, l
    return f


w1_, w3_, w2_ = experts(E)
P2 = {"wr": R(D, E, scale=0.5), "w1": w1_, "w3": w3_, "w2": w2_}
PS2 = {"wr": P(), "w1": P("ep"), "w3": P("ep"), "w2": P("ep")}
S2 = OPT2.init(P2)
SS2 = state_specs(S2, PS2)
B2 = R(E, scale=0.1)
C.smap("s.aux_free_bias_sgd_step.dp2xep4", {"dp": 2, "ep": 4}, af_sm, (PS2, SS2, P("ep"), P("dp"), P("dp")),
       (PS2, SS2, P("ep"), P()), af_step, (P2, S2, B2, R(N2, D), R(N2, D)), check_vma=True,
       bugs=[("biased-gates", ["wrong-scale"]), ("grad-of-local-loss", ["missing-collective"]),
             ("bias-slice-offset0", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 3. DeepSeek-V2 device-limited routing, all_to_all dispatch per device (ep4).
N3, NDEV, EL3, M3, K3 = 32, 4, 2, 2, 3


def dl_route(x, wr, interleaved=False):
    s = jax.nn.softmax(x @ wr, -1)
    if interleaved:
        dev = jnp.max(s.reshape(-1, EL3, NDEV), 1)
    else:
        dev = jnp.max(s.reshape(-1, NDEV, EL3), -1)
    _, dt = lax.top_k(dev, M3)
    dm = jnp.sum(jax.nn.one_hot(dt, NDEV), 1)
    em = (jnp.tile(dm, EL3) if interleaved else jnp.repeat(dm, EL3, axis=1)) > 0
    g, e = lax.top_k(jnp.where(em, s, -1.0), K3)
    return jnp.sum(jax.nn.one_hot(e, E) * g[..., None], 1)


def shared_ffn(x, ws1, ws2):
    return jax.nn.gelu(x @ ws1) @ ws2


def dl_ref(x, wr, w1, w3, w2, ws1, ws2):
    cw = dl_route(x, wr)
    return shared_ffn(x, ws1, ws2) + jnp.einsum("ne,end->nd", cw, swiglu_dense(x, w1, w3, w2))


def dl_sm(bug):
    def f(x, wr, w1, w3, w2, ws1, ws2):
        n = x.shape[0]
        cw = dl_route(x, wr, interleaved=(bug == "experts-interleaved"))
        if bug == "weights-offset0":
            cwd = jnp.broadcast_to(cw[None, :, :EL3], (NDEV, n, EL3))
        else:
            cwd = cw.reshape(n, NDEV, EL3).transpose(1, 0, 2)  # (dest, N, EL)
        sel = jnp.sum(cwd, -1) > 0
        send = jnp.where(sel[..., None], x[None], 0.0)
        recv = lax.all_to_all(send, "ep", 0, 0)
        wrecv = lax.all_to_all(cwd, "ep", 0, 0)
        y = swiglu_dense(recv.reshape(-1, D), w1, w3, w2)  # (EL, src * N, D)
        y = jnp.einsum("end,ne->nd", y, wrecv.reshape(-1, EL3)).reshape(NDEV, n, D)
        back = y if bug == "no-return-all_to_all" else lax.all_to_all(y, "ep", 0, 0)
        return shared_ffn(x, ws1, ws2) + jnp.sum(back, 0)
    return f


ARGS3 = (R(N3, D), R(D, E, scale=0.5)) + experts(E) + (R(D, F, scale=0.3), R(F, D, scale=0.3))
SP3 = (P("ep"), P(), P("ep"), P("ep"), P("ep"), P(), P())
C.smap("s.device_limited_top2dev_all_to_all.ep4", {"ep": 4}, dl_sm, SP3, P("ep"), dl_ref, ARGS3,
       bugs=[("experts-interleaved", ["wrong-permutation"]), ("weights-offset0", ["wrong-offset"]),
             ("no-return-all_to_all", ["missing-collective"])])

# ---------------------------------------------------------------------------
# 4. expert choice within dp groups, experts over ep (dp2 x ep4).
T4, EL4 = 16, 2
CAP4 = 2 * T4 // E


def ec_group(x, s, w1, w3, w2, cap):
    g, ti = lax.top_k(s.T, cap)  # (E, C)
    xe = x[ti]
    h = jax.nn.silu(jnp.einsum("ecd,edf->ecf", xe, w1)) * jnp.einsum("ecd,edf->ecf", xe, w3)
    y = jnp.einsum("ecf,efd->ecd", h, w2) * g[..., None]
    return jnp.zeros_like(x).at[ti.reshape(-1)].add(y.reshape(-1, D))


def ec_ref(x, wr, w1, w3, w2):
    def grp(xg):
        return ec_group(xg, jax.nn.softmax(xg @ wr, -1), w1, w3, w2, CAP4)
    return jax.vmap(grp)(x.reshape(-1, T4, D)).reshape(x.shape)


def ec_sm(bug):
    def f(x, wr, w1, w3, w2):
        me = idx("ep")
        if bug == "local-softmax":
            s = jax.nn.softmax(x @ lax.dynamic_slice_in_dim(wr, me * EL4, EL4, 1), -1)
        else:
            s = lax.dynamic_slice_in_dim(jax.nn.softmax(x @ wr, -1), me * EL4, EL4, 1)
        cap = CAP4 * 2 if bug == "capacity-from-global-batch" else CAP4
        y = ec_group(x, s, w1, w3, w2, cap)
        return psum(y, ("dp", "ep") if bug == "psum-dp-too" else "ep")
    return f


ARGS4 = (R(2 * T4, D), R(D, E, scale=0.5)) + experts(E)
SP4 = (P("dp"), P(), P("ep"), P("ep"), P("ep"))
C.smap("s.expert_choice_groups.dp2xep4", {"dp": 2, "ep": 4}, ec_sm, SP4, P("dp"), ec_ref, ARGS4,
       bugs=[("local-softmax", ["wrong-scale"]), ("capacity-from-global-batch", ["wrong-scale"]),
             ("psum-dp-too", ["wrong-axis"])])

# ---------------------------------------------------------------------------
# 5. AdamW step of a dropless top-2 ragged_dot layer on ep2 x tp4.
N5, EL5 = 16, 4
OPT5 = optax.adamw(1e-2, weight_decay=0.01)
LB5, Z5 = 1.0, 1e-3


def lbz(logits, p, e):
    f = jnp.mean(jnp.sum(jax.nn.one_hot(e, E), 1), 0) / 2
    lb = E * jnp.sum(f * jnp.mean(p, 0))
    z = jnp.mean(jnp.square(jax.nn.logsumexp(logits, -1)))
    return LB5 * lb + Z5 * z


def route2(x, wr):
    logits = x @ wr
    p = jax.nn.softmax(logits, -1)
    g, e = lax.top_k(p, 2)
    return logits, p, g / jnp.sum(g, -1, keepdims=True), e


def moe5_loss(p, x, y):
    logits, pr, g, e = route2(x, p["wr"])
    fe = e.reshape(-1)
    tok = jnp.repeat(jnp.arange(x.shape[0]), 2)
    order = jnp.argsort(fe, stable=True)
    ys = swiglu_ragged(x[tok[order]], p["w1"], p["w3"], p["w2"], jnp.bincount(fe, length=E))
    out = jnp.zeros_like(x).at[tok[order]].add(ys * g.reshape(-1)[order][:, None])
    return jnp.mean(jnp.square(out - y)) + lbz(logits, pr, e)


def moe5_step(p, s, x, y):
    l, g = jax.value_and_grad(moe5_loss)(p, x, y)
    u, s = OPT5.update(g, s, p)
    return optax.apply_updates(p, u), s, l


def pad0(w):
    return jnp.concatenate([w, jnp.zeros((1,) + w.shape[1:], w.dtype)], 0)


def moe5_sm(bug):
    def f(p, s, x, y):
        me = idx("ep")

        def loss(p):
            xa = lax.all_gather(x, "ep", axis=0, tiled=True)
            logits, pr, g, e = route2(xa, p["wr"])
            fe = e.reshape(-1)
            le = fe if bug == "local-ids-no-offset" else fe - me * EL5
            le = jnp.where((le >= 0) & (le < EL5), le, EL5)
            tok = jnp.repeat(jnp.arange(xa.shape[0]), 2)
            order = jnp.argsort(le, stable=True)
            ys = swiglu_ragged(xa[tok[order]], pad0(p["w1"]), pad0(p["w3"]), pad0(p["w2"]),
                               jnp.bincount(le, length=EL5 + 1))
            part = jnp.zeros_like(xa).at[tok[order]].add(ys * g.reshape(-1)[order][:, None])
            part = psum(part, "tp")
            if bug == "psum-then-offset0":
                out = psum(part, "ep")[:x.shape[0]]
            else:
                out = lax.psum_scatter(part, "ep", scatter_dimension=0, tiled=True)
            if bug == "lb-local-tokens":
                ll, lp, _, lee = route2(x, p["wr"])
                aux = lbz(ll, lp, lee)
            else:
                aux = lbz(logits, pr, e)
            return pmean(jnp.mean(jnp.square(out - y)) + aux, "ep")
        l, g = jax.value_and_grad(loss)(p)
        u, s = OPT5.update(g, s, p)
        return optax.apply_updates(p, u), s, l
    return f


w1_, w3_, w2_ = experts(E)
P5 = {"wr": R(D, E, scale=0.5), "w1": w1_, "w3": w3_, "w2": w2_}
PS5 = {"wr": P(), "w1": P("ep", None, "tp"), "w3": P("ep", None, "tp"), "w2": P("ep", "tp", None)}
S5 = OPT5.init(P5)
SS5 = state_specs(S5, PS5)
X5, Y5 = R(N5, D), R(N5, D)
C.smap("s.ragged_sentinel_adamw_step.ep2xtp4", {"ep": 2, "tp": 4}, moe5_sm, (PS5, SS5, P("ep"), P("ep")),
       (PS5, SS5, P()), moe5_step, (P5, S5, X5, Y5), check_vma=True,
       bugs=[("local-ids-no-offset", ["wrong-offset"]), ("psum-then-offset0", ["wrong-offset"]),
             ("lb-local-tokens", ["missing-collective"])])

# ---------------------------------------------------------------------------
# 6. top-1, global capacity per expert, priority = chosen logit rounded to
#    0.5, ties by the lower global index; tokens over dp4.
N6, E6, CAP6 = 32, 4, 5


def prio_route(x, wr):
    lg = x @ wr
    e = jnp.argmax(lg, -1)
    q = jnp.round(jnp.max(lg, -1) * 2) / 2
    gate = jnp.max(jax.nn.softmax(lg, -1), -1)
    return e, q, gate


def dense4(x, w1, w2, e):
    y = jnp.einsum("enf,efd->end", jax.nn.relu(jnp.einsum("nd,edf->enf", x, w1)), w2)
    return jnp.take_along_axis(y, e[None, :, None], 0)[0]


def prio_ref(x, wr, w1, w2):
    e, q, gate = prio_route(x, wr)
    i = jnp.arange(x.shape[0])
    same = e[:, None] == e[None, :]
    ahead = (q[None, :] > q[:, None]) | ((q[None, :] == q[:, None]) & (i[None, :] < i[:, None]))
    keep = jnp.sum(same & ahead, 1) < CAP6
    return dense4(x, w1, w2, e) * jnp.where(keep, gate, 0.0)[:, None]


def prio_sm(bug):
    def f(x, wr, w1, w2):
        n = x.shape[0]
        e, q, gate = prio_route(x, wr)
        i = idx("dp") * n + jnp.arange(n)
        if bug == "local-ranks":
            ea, qa, ia = e, q, i
        else:
            ea = lax.all_gather(e, "dp", tiled=True)
            qa = lax.all_gather(q, "dp", tiled=True)
            ia = jnp.arange(n * 4)
        mine = jnp.arange(n) if bug == "ties-by-local-index" else i
        same = e[:, None] == ea[None, :]
        if bug == "rank-counts-self":
            tie = ia[None, :] <= mine[:, None]
        else:
            tie = ia[None, :] < mine[:, None]
        ahead = (qa[None, :] > q[:, None]) | ((qa[None, :] == q[:, None]) & tie)
        keep = jnp.sum(same & ahead, 1) < CAP6
        return dense4(x, w1, w2, e) * jnp.where(keep, gate, 0.0)[:, None]
    return f


ARGS6 = (R(N6, D), R(D, E6, scale=0.4), R(E6, D, F, scale=0.3), R(E6, F, D, scale=0.3))
C.smap("s.global_capacity_priority_ties.dp4", {"dp": 4}, prio_sm, (P("dp"), P(), P(), P()), P("dp"), prio_ref,
       ARGS6, bugs=[("local-ranks", ["missing-collective"]), ("ties-by-local-index", ["wrong-offset"]),
                    ("rank-counts-self", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 7. Llama-4-style top-1 with the sigmoid gate on the expert's input, bf16
#    tokens and expert weights in the ragged_dot chain (f32 accumulation),
#    a shared SwiGLU expert beside it; dp2 x tp4 with both hidden dims over
#    tp, each partial reduced by psum_scatter + all_gather (routed: along
#    the model dim, shared: along the tokens).
BF = jnp.bfloat16


def l4_routed(x, wr, w1, w3, w2, gate_on_output=False):
    lg = x @ wr
    e = jnp.argmax(lg, -1)
    s = jax.nn.sigmoid(jnp.max(lg, -1))[:, None]
    xi = (x if gate_on_output else x * s).astype(BF)
    order = jnp.argsort(e, stable=True)
    gs = jnp.bincount(e, length=E)
    rd = lambda a, w: lax.ragged_dot(a, w, gs, preferred_element_type=jnp.float32)
    h = jax.nn.silu(rd(xi[order], w1)) * rd(xi[order], w3)
    y = rd(h.astype(BF), w2)
    y = y * s[order] if gate_on_output else y
    return jnp.zeros(x.shape, jnp.float32).at[order].set(y)


def l4_shared(x, ws1, ws3, ws2):
    return (jax.nn.silu(x @ ws1) * (x @ ws3)) @ ws2


def l4_ref(x, wr, w1, w3, w2, ws1, ws3, ws2):
    return l4_routed(x, wr, w1, w3, w2) + l4_shared(x, ws1, ws3, ws2)


def l4_sm(bug):
    def f(x, wr, w1, w3, w2, ws1, ws3, ws2):
        r = l4_routed(x, wr, w1, w3, w2, gate_on_output=(bug == "gate-on-output"))
        r = lax.psum_scatter(r, "tp", scatter_dimension=1, tiled=True)
        if bug == "routed-gather-wrong-dim":
            r = lax.all_gather(r, "tp", axis=0, tiled=True).reshape(x.shape)
        else:
            r = lax.all_gather(r, "tp", axis=1, tiled=True)
        sh = l4_shared(x, ws1, ws3, ws2)
        if bug != "shared-no-reduce":
            sh = lax.all_gather(lax.psum_scatter(sh, "tp", scatter_dimension=0, tiled=True), "tp", axis=0, tiled=True)
        return r + sh
    return f


ARGS7 = (R(32, D), R(D, E, scale=0.5)) + tuple(a.astype(BF) for a in experts(E)) + \
    (R(D, F, scale=0.3), R(D, F, scale=0.3), R(F, D, scale=0.3))
SP7 = (P("dp"), P(), P(None, None, "tp"), P(None, None, "tp"), P(None, "tp", None), P(None, "tp"), P(None, "tp"),
       P("tp", None))
C.smap("s.llama4_top1_bf16_ragged_shared.dp2xtp4", {"dp": 2, "tp": 4}, l4_sm, SP7, P("dp"), l4_ref, ARGS7,
       bugs=[("shared-no-reduce", ["missing-collective"]), ("routed-gather-wrong-dim", ["wrong-axis"]),
             ("gate-on-output", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# GSPMD pairs.
# 8. the capacity-limited sorted layer of 1., groups by a Python loop.
C.gspmd("g.capacity_sorted_slots_ragged.dp4xtp2", {"dp": 4, "tp": 2}, SP1, P("dp"), cap_ref, (X1, WR1) + EX1)

# 9. expert choice within groups, experts over ep.
C.gspmd("g.expert_choice_groups.dp2xep4", {"dp": 2, "ep": 4}, SP4, P("dp"), ec_ref, ARGS4)

# 10. DeepSeek-V3 node-limited (top-k groups) routing with a bias for the
#    choice only and a shared expert.
NG9, TG9, K9, SC9 = 4, 2, 3, 2.5


def v3_layer(x, wr, b, w1, w3, w2, ws1, ws2):
    s = jax.nn.sigmoid(x @ wr)
    sb = (s + b).reshape(-1, NG9, E // NG9)
    gsc = jnp.sum(lax.top_k(sb, 2)[0], -1)
    _, gi = lax.top_k(gsc, TG9)
    gm = jnp.repeat(jnp.sum(jax.nn.one_hot(gi, NG9), 1), E // NG9, axis=1) > 0
    _, e = lax.top_k(jnp.where(gm, s + b, -jnp.inf), K9)
    w = jnp.take_along_axis(s, e, 1)
    w = SC9 * w / jnp.sum(w, -1, keepdims=True)
    cw = jnp.sum(jax.nn.one_hot(e, E) * w[..., None], 1)
    return shared_ffn(x, ws1, ws2) + jnp.einsum("ne,end->nd", cw, swiglu_dense(x, w1, w3, w2))


C.gspmd("g.deepseek_v3_group_limited_shared.dp2xep4", {"dp": 2, "ep": 4},
        (P("dp"), P(), P(), P("ep"), P("ep"), P("ep"), P(), P()), P("dp"), v3_layer,
        (R(16, D), R(D, E, scale=0.5), R(E, scale=0.1)) + experts(E) + (R(D, F, scale=0.3), R(F, D, scale=0.3)))

# 11. the auxiliary-loss-free SGD step of 2.
C.gspmd("g.aux_free_bias_sgd_step.dp2xep4", {"dp": 2, "ep": 4}, (PS2, SS2, P("ep"), P("dp"), P("dp")),
        (PS2, SS2, P("ep"), P()), af_step, (P2, S2, B2, R(N2, D), R(N2, D)))

# 12. the AdamW ragged_dot step of 5.
C.gspmd("g.ragged_adamw_step.ep2xtp4", {"ep": 2, "tp": 4}, (PS5, SS5, P("ep"), P("ep")), (PS5, SS5, P()),
        moe5_step, (P5, S5, X5, Y5))

# 13. the device-limited layer of 3.
C.gspmd("g.device_limited_shared.ep4", {"ep": 4}, SP3, P("ep"), dl_ref, ARGS3)

# 14. the Llama-4-style bf16 top-1 layer of 7. (dp2 x tp4).
C.gspmd("g.llama4_top1_bf16_ragged_shared.dp2xtp4", {"dp": 2, "tp": 4}, SP7, P("dp"), l4_ref, ARGS7)

C.finish()
