"""samples/fresh57: a 57th batch of programs as a user writes them, on the theme of custom autodiff machinery in sharded training (jax.custom_vjp / jax.custom_jvp rules, jax.checkpoint policies, stop_gradient placements, jax.linearize / jax.vjp by hand, Hessian-vector products, collectives inside custom rules), none of them an idiom of samples/fresh .. fresh26, probe, train or wild.
shard_map families:
 1. a numerically stable log-sum-exp over a tp-sharded vocabulary written
    as a jax.custom_jvp (primal by pmax of a stop_gradient'd max and a
    psum of exponentials; the rule's tangent the psum of softmax * dz),
    inside a cross-entropy whose gradient in the column-sharded head comes
    from jax.value_and_grad through the rule (check_vma=True, dp2 x tp4,
    loss pmean'd over dp). Bugs: the rule's softmax taken against the
    local log-sum-exp, the target logit picked without the vocab offset.
 2. a Hessian-vector product by hand (forward-over-reverse: jax.jvp of
    jax.grad) of a logistic-regression loss with the batch over dp4 and
    check_vma=False: the gradient and the HVP of the local sum psum'd and
    divided by the global count. Bugs: the HVP not psum'd, the HVP divided
    by the local count.
 3. jax.linearize of a tensor-parallel MLP block (column-parallel up,
    row-parallel down psum'd over tp, bias after the psum) with the batch
    over dp, the linear map applied to two tangent directions. Bugs: the
    bias added before the psum, pmean instead of psum.
 4. domain-adversarial training with a gradient-reversal layer (custom_vjp:
    identity forward, -lambda * g backward) between a hidden layer sharded
    over tp and a row-parallel domain head; a task head beside it; one
    optax.sgd step (check_vma=True, dp2 x tp4). Bugs: the reversal's sign
    lost (+lambda), the reversal put on the task branch.
 5. Megatron sequence-parallel operators as custom_vjp pairs (all_gather
    along the sequence forward / psum_scatter backward, and psum_scatter
    forward / all_gather backward) around an MLP, check_vma=False, the
    sequence over tp4 and the batch over dp2, gradients in the weights
    psum'd over dp by hand, the input's gradient left sharded. Bugs: the
    all_gather's backward slicing the own block instead of reducing, the
    weight gradients not psum'd over dp.
 6. a custom_vjp that clips the cotangent elementwise (identity forward,
    clip(g, -c, c) backward) on the hidden activations of an MLP, in an
    optax.adam step with the batch over dp4 (check_vma=True, loss pmean'd).
    Bugs: the loss a local mean (not pmean'd: cotangents dp times larger,
    so other elements clip, and the gradients summed), the clip applied
    to the forward value.
 7. a tensor-parallel attention + MLP block under jax.checkpoint with a
    save_only_these_names policy (checkpoint_name on the row-parallel
    outputs) and a second block under checkpoint_dots, loss and gradients
    by value_and_grad (check_vma=True, dp2 x tp4). Bugs: a stop_gradient
    put on the residual stream next to the checkpoint_name, the
    row-parallel output pmean'd instead of psum'd.
 8. a fused token cross-entropy as a custom_vjp whose backward reuses the
    saved softmax ((p - onehot) * mask * g / count), with the tokens over
    (dp, sp) and the global token count psum'd in the forward and saved;
    gradient in a replicated head psum'd by hand (check_vma=False). Bugs:
    the backward dividing by the local count, the head gradient not
    psum'd over sp.
 9. a binarised (sign) layer with a straight-through estimator written as
    a jax.custom_jvp (tangent passed where |w| <= 0.25), the weights
    column-sharded over tp, two optax.sgd-with-momentum steps in a
    lax.scan (check_vma=True, dp2 x tp4). Bugs: the estimator's window
    taken from the binarised weights (always open), the second layer's
    output pmean'd.
10. a manual pipeline backward (pp4): the forward ticks ppermute the
    activation to the next stage and each stage saves its input; the
    backward ticks pull the cotangent back with jax.vjp at the saved input
    and ppermute it to the previous stage. Bugs: the cotangent sent
    forward, the vjp taken at the last received activation.
11. a DQN-style temporal-difference loss with the bootstrapped target
    under stop_gradient, batch over dp4, the Q network's second layer
    column-sharded over tp (dp4 x tp2, check_vma=True), the next state's
    action values all_gather'd for the greedy max (pmax has no
    differentiation rule, even under a later stop_gradient), Huber loss
    pmean'd over (dp, tp) (the all_gather'd values count as tp-varying, so a
    pmean over dp alone lets the transpose psum w1's gradient over tp: a
    first draft did that and was off by 0.05), one optax.sgd step.
    Bugs: the stop_gradient dropped (gradient through the target), the greedy action from the local action block.
12. expert-parallel dispatch and combine as custom_vjp operators around
    lax.all_to_all (backward: the inverse all_to_all), per-expert GELU MLPs,
    the loss and the gradients in the token buffer and the experts'
    weights (ep4, check_vma=False).
    Bugs: the dispatch's backward a reshape without the all_to_all (the
    token-buffer gradient lands on the wrong devices' slots), the loss
    scaled by the device count instead of psum'd.
13. DDP by autodiff: a custom_vjp "sync" on the replicated parameters
    (identity forward, gradient psum'd over dp backward), the loss a local
    sum over the global count, one optax.rmsprop step (dp4,
    check_vma=False). Bugs: pmean in the sync's backward, the local count.
14. a minimal pair isolating what jax.checkpoint inserts on saved
    residuals: reduce_precision to f32's own format (the identity) on a
    row-parallel partial sum before its psum (tp4). Bugs: the partials
    rounded to bf16's 7-bit mantissa before the psum, to e5m2's format.
15. a Hessian-vector product (jax.jvp of jax.grad) of a tensor-parallel
    MLP regression inside the body with check_vma=True, the transposes
    doing the reductions, and a damped step p - lr (g + 0.1 Hv). Bugs: the
    row-parallel output pmean'd, the loss not pmean'd over dp (check_vma
    then psums the gradient over dp).
16. Newton-CG by hand: 3 unrolled conjugate-gradient iterations on
    (H + 0.1 I) d = g with Hessian-vector products by jax.jvp of jax.grad
    of the local sum, psum'd over dp4 and divided by the global count
    (check_vma=False), for a logistic regression. Bugs: the gradient not
    psum'd, the HVP divided by the local count.
17. jax.linear_transpose of a row-parallel linear map (input features over
    tp, output psum'd) inside the body with check_vma=True, the forward and
    the transpose of a replicated cotangent (dp2 x tp4). Bug: the cotangent
    psum'd over tp first "to be safe".
18. a Megatron MLP block (w1 columns, w2 rows over tp4, batch over dp2)
    applied twice under jax.checkpoint(save_only_these_names("rowpar")),
    the name on the row-parallel partial product before its psum, the
    block input fake-quantised to float8_e4m3fn and back, loss and
    gradients by value_and_grad (check_vma=True). Bug: the fp8 round trip
    dropped on the distributed side.
19. the same block at a realistic width (hidden 256, ffn 1024, 64 tokens),
    without the fp8 round trip. Bug: the row-parallel output pmean'd.
20. hybrid fp8 training of that block: a custom_vjp rounding the
    cotangent to e5m2 (lax.reduce_precision, exponent 5, mantissa 2) on
    the block's (complete) output, the block under
    jax.checkpoint(checkpoint_dots), which saves every dot, the
    row-parallel partial product among them. Bug: the row-parallel output
    pmean'd.
21. the attention + MLP layer of 7. twice under checkpoint_dots with the
    e5m2 cotangent rounding of 20. on each layer's output. Bug: the
    row-parallel outputs pmean'd.
GSPMD pairs (jax.jit with in/out shardings): 22. the Hessian-vector product
of a 2-layer MLP with the weights over tp and the batch over dp; 23. the
fused custom_vjp cross-entropy of 8. with a vocab-sharded head and its
value_and_grad; 24. a scanned 3-layer residual MLP under
jax.checkpoint(checkpoint_dots) with an optax.adamw step, FSDP x TP
shardings; 25. the gradient-reversal DANN step of 4. with optax.adam;
26. the custom_jvp log-sum-exp of 1. under jax.linearize with the vocab
over tp; 27. a Megatron MLP (two applications) under
jax.checkpoint(save_only_these_names) with the name on the row-parallel
output, value_and_grad; 28. the full Hessian
(jax.hessian) of a small MLP loss in its first-layer weights, batch over
dp4.
Numerics: every correct pair agrees with its baseline at rounding level
(f32); every bug variant differs clearly. First drafts changed: 11.'s
loss pmean'd over dp only (off by 0.05, see 11.), 7.'s stop_gradient bug
on the input (no parameter upstream, so no change: moved to the second
layer), 12.'s backward bug left the token-buffer gradient out (now
returned).
Exported with scalify_jax.export_pair; every pair is also run by JAX on
seeded inputs and its manifest entry records the largest difference from
the single-device run ("numerics").
Run from the repository root: bash samples/gen/run_fresh57.sh [SUBSTR...]
(only the pairs whose name contains a SUBSTR; the others keep their entries).
"""
import sys
from functools import partial
import numpy as np
import jax, jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec as P
import optax
sys.path.insert(0, "samples/gen")  # run from the repository root (run_fresh57.sh)
from fresh_lib import Corpus, seeded, state_specs  # noqa: E402

SCRIPT = "samples/gen/fresh57.py"
C = Corpus("samples/fresh57", SCRIPT, "samples/gen/run_fresh57.sh", sys.argv[1:])
rng, R, I = seeded(5757)
psum, pmax, pmean, idx = lax.psum, lax.pmax, lax.pmean, lax.axis_index
DPTP = {"dp": 2, "tp": 4}

# ---------------------------------------------------------------------------
# 1. custom_jvp log-sum-exp over a tp-sharded vocabulary.


@jax.custom_jvp
def lse_ref(z):
    m = jnp.max(lax.stop_gradient(z), -1, keepdims=True)
    return (m + jnp.log(jnp.sum(jnp.exp(z - m), -1, keepdims=True)))[..., 0]


@lse_ref.defjvp
def _lse_ref_jvp(primals, tangents):
    (z,), (dz,) = primals, tangents
    out = lse_ref(z)
    p = jnp.exp(z - out[..., None])
    return out, jnp.sum(p * dz, -1)


def ce_lse_ref(h, w, y):
    z = h @ w
    zt = jnp.take_along_axis(z, y[:, None], 1)[:, 0]
    return jnp.mean(lse_ref(z) - zt)


def lse_tp(bug):
    @jax.custom_jvp
    def lse(z):
        m = pmax(jnp.max(lax.stop_gradient(z), -1, keepdims=True), "tp")
        return (m + jnp.log(psum(jnp.sum(jnp.exp(z - m), -1, keepdims=True), "tp")))[..., 0]

    @lse.defjvp
    def _jvp(primals, tangents):
        (z,), (dz,) = primals, tangents
        out = lse(z)
        if bug == "rule-softmax-local-lse":
            m = jnp.max(z, -1, keepdims=True)
            loc = m + jnp.log(jnp.sum(jnp.exp(z - m), -1, keepdims=True))
            p = jnp.exp(z - loc)
        else:
            p = jnp.exp(z - out[..., None])
        return out, psum(jnp.sum(p * dz, -1), "tp")
    return lse


def ce_lse_body(bug):
    lse = lse_tp(bug)

    def loss(h, w, y):
        z = h @ w
        vl = z.shape[-1]
        off = 0 if bug == "target-no-vocab-offset" else idx("tp") * vl
        loc = y - off
        ok = (loc >= 0) & (loc < vl)
        zt = psum(jnp.sum(jnp.where(ok[:, None] & (jnp.arange(vl) == loc[:, None]), z, 0.0), -1), "tp")
        return pmean(jnp.mean(lse(z) - zt), "dp")

    def f(h, w, y):
        return jax.value_and_grad(loss, 1)(h, w, y)
    return f


V1, D1 = 32, 12
C.smap("s.customjvp_lse_vocab_tp_ce_grad.dp2xtp4", DPTP, ce_lse_body, (P("dp"), P(None, "tp"), P("dp")),
       (P(), P(None, "tp")), lambda h, w, y: jax.value_and_grad(ce_lse_ref, 1)(h, w, y),
       (R(8, D1), R(D1, V1, scale=0.5), I(0, V1, 8)),
       bugs=[("rule-softmax-local-lse", ["missing-all-reduce"]), ("target-no-vocab-offset", ["wrong-offset"])],
       check_vma=True)

# ---------------------------------------------------------------------------
# 2. Hessian-vector product (forward-over-reverse) of a logistic regression
#    with the batch over dp4, reductions by hand.


def logreg_sum(w, x, y):
    z = x @ w[:-1] + w[-1]
    return jnp.sum(jax.nn.softplus(z) - y * z)


def hvp_ref(w, v, x, y):
    def loss(w):
        return logreg_sum(w, x, y) / x.shape[0]
    g, hv = jax.jvp(jax.grad(loss), (w,), (v,))
    return g, hv


def hvp_body(bug):
    def f(w, v, x, y):
        n = x.shape[0] * (1 if bug == "hvp-local-count" else 4)
        gl = jax.grad(logreg_sum)
        g, hv = jax.jvp(lambda w: gl(w, x, y), (w,), (v,))
        g = psum(g, "dp") / (x.shape[0] * 4)
        hv = (hv if bug == "hvp-not-psummed" else psum(hv, "dp")) / n
        return g, hv
    return f


D2 = 10
C.smap("s.hvp_fwd_over_rev_logreg.dp4", {"dp": 4}, hvp_body, (P(), P(), P("dp"), P("dp")), (P(), P()), hvp_ref,
       (R(D2 + 1, scale=0.5), R(D2 + 1), R(16, D2), (rng.random(16) > 0.5).astype(np.float32)),
       bugs=[("hvp-not-psummed", ["missing-all-reduce"]), ("hvp-local-count", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 3. jax.linearize of a tensor-parallel MLP block.


def mlp_block(x, w1, w2, b2):
    return jax.nn.gelu(x @ w1) @ w2 + b2


def lin_ref(x, w1, w2, b2, dx1, dx2):
    y, lf = jax.linearize(lambda x: mlp_block(x, w1, w2, b2), x)
    return y, lf(dx1), lf(dx2)


def lin_body(bug):
    def block(x, w1, w2, b2):
        part = jax.nn.gelu(x @ w1) @ w2
        if bug == "bias-before-psum":
            return psum(part + b2, "tp")
        if bug == "pmean-not-psum":
            return pmean(part, "tp") + b2
        return psum(part, "tp") + b2

    def f(x, w1, w2, b2, dx1, dx2):
        y, lf = jax.linearize(lambda x: block(x, w1, w2, b2), x)
        return y, lf(dx1), lf(dx2)
    return f


D3, F3 = 8, 16
C.smap("s.linearize_tp_mlp_two_tangents.dp2xtp4", DPTP, lin_body,
       (P("dp"), P(None, "tp"), P("tp", None), P(), P("dp"), P("dp")), (P("dp"), P("dp"), P("dp")), lin_ref,
       (R(4, D3), R(D3, F3, scale=0.4), R(F3, D3, scale=0.4), R(D3), R(4, D3), R(4, D3)),
       bugs=[("bias-before-psum", ["wrong-scale"]), ("pmean-not-psum", ["wrong-collective-op"])])

# ---------------------------------------------------------------------------
# 4. gradient-reversal layer (DANN), hidden units over tp, one optax.sgd step.


@partial(jax.custom_vjp, nondiff_argnums=(1,))
def grad_reverse(x, lam):
    return x


def _gr_fwd(x, lam):
    return x, None


def _gr_bwd(lam, _, g):
    return (-lam * g,)


grad_reverse.defvjp(_gr_fwd, _gr_bwd)


@partial(jax.custom_vjp, nondiff_argnums=(1,))
def grad_reverse_pos(x, lam):  # the bug: the sign lost
    return x


grad_reverse_pos.defvjp(_gr_fwd, lambda lam, _, g: (lam * g,))
LAM4 = 0.3
OPT4 = optax.sgd(0.1)


def dann_loss(p, x, y, d, red=lambda a: a, gr=grad_reverse, on_task=False):
    h = jax.nn.relu(x @ p["w1"])
    task_in = gr(h, LAM4) if on_task else h
    dom_in = h if on_task else gr(h, LAM4)
    yt = red(task_in @ p["wt"])[:, 0]
    dl = red(dom_in @ p["wd"])[:, 0]
    lt = jnp.mean(jnp.square(yt - y))
    ld = jnp.mean(optax.sigmoid_binary_cross_entropy(dl, d))
    return lt + ld


def dann_ref(p, x, y, d):
    g = jax.grad(dann_loss)(p, x, y, d)
    u, _ = OPT4.update(g, OPT4.init(p), p)
    return optax.apply_updates(p, u)


def dann_body(bug):
    def f(p, x, y, d):
        def loss(p):
            l = dann_loss(p, x, y, d, red=lambda a: psum(a, "tp"),
                          gr=grad_reverse_pos if bug == "reversal-sign-lost" else grad_reverse,
                          on_task=bug == "reversal-on-task-branch")
            return pmean(l, "dp")
        g = jax.grad(loss)(p)
        u, _ = OPT4.update(g, OPT4.init(p), p)
        return optax.apply_updates(p, u)
    return f


D4, H4 = 6, 16
P4 = {"w1": R(D4, H4, scale=0.5), "wt": R(H4, 1, scale=0.5), "wd": R(H4, 1, scale=0.5)}
S4 = {"w1": P(None, "tp"), "wt": P("tp", None), "wd": P("tp", None)}
C.smap("s.grad_reversal_dann_sgd.dp2xtp4", DPTP, dann_body, (S4, P("dp"), P("dp"), P("dp")), S4, dann_ref,
       (P4, R(8, D4), R(8), (rng.random(8) > 0.5).astype(np.float32)),
       bugs=[("reversal-sign-lost", ["wrong-sign"]), ("reversal-on-task-branch", ["wrong-operand"])],
       check_vma=True)

# ---------------------------------------------------------------------------
# 5. Megatron sequence-parallel f / g as custom_vjp (all_gather <-> psum_scatter).


def sp_ops(bug):
    @jax.custom_vjp
    def gather_seq(x):
        return lax.all_gather(x, "tp", axis=1, tiled=True)

    def g_fwd(x):
        return gather_seq(x), x.shape[1]

    def g_bwd(tl, g):
        if bug == "gather-bwd-slices":
            return (lax.dynamic_slice_in_dim(g, idx("tp") * tl, tl, 1),)
        return (lax.psum_scatter(g, "tp", scatter_dimension=1, tiled=True),)
    gather_seq.defvjp(g_fwd, g_bwd)

    @jax.custom_vjp
    def scatter_seq(x):
        return lax.psum_scatter(x, "tp", scatter_dimension=1, tiled=True)

    def s_fwd(x):
        return scatter_seq(x), None

    def s_bwd(_, g):
        return (lax.all_gather(g, "tp", axis=1, tiled=True),)
    scatter_seq.defvjp(s_fwd, s_bwd)
    return gather_seq, scatter_seq


def ln(x, eps=1e-5):
    mu = jnp.mean(x, -1, keepdims=True)
    return (x - mu) * lax.rsqrt(jnp.mean(jnp.square(x - mu), -1, keepdims=True) + eps)


def sp_block_ref(x, w1, w2):
    y = x + jax.nn.gelu(ln(x) @ w1) @ w2
    return 0.5 * jnp.sum(jnp.square(y))


def sp_ref(x, w1, w2):
    return jax.value_and_grad(sp_block_ref, (0, 1, 2))(x, w1, w2)


def sp_body(bug):
    gather_seq, scatter_seq = sp_ops(bug)

    def local(x, w1, w2):
        y = x + scatter_seq(jax.nn.gelu(gather_seq(ln(x)) @ w1) @ w2)
        return 0.5 * jnp.sum(jnp.square(y))

    def f(x, w1, w2):
        l, (dx, d1, d2) = jax.value_and_grad(local, (0, 1, 2))(x, w1, w2)
        if bug != "weight-grads-not-dp-reduced":
            d1, d2 = psum(d1, "dp"), psum(d2, "dp")
        return psum(l, ("dp", "tp")), (dx, d1, d2)
    return f


D5, F5 = 8, 16
C.smap("s.megatron_sp_gather_scatter_customvjp.dp2xtp4", DPTP, sp_body, (P("dp", "tp"), P(None, "tp"), P("tp", None)),
       (P(), (P("dp", "tp"), P(None, "tp"), P("tp", None))), sp_ref,
       (R(4, 8, D5), R(D5, F5, scale=0.4), R(F5, D5, scale=0.4)),
       bugs=[("gather-bwd-slices", ["missing-all-reduce"]), ("weight-grads-not-dp-reduced", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 6. elementwise cotangent clipping (custom_vjp) in an optax.adam step.
CLIP6 = 0.02


@jax.custom_vjp
def clip_cot(x):
    return x


clip_cot.defvjp(lambda x: (x, None), lambda _, g: (jnp.clip(g, -CLIP6, CLIP6),))
OPT6 = optax.adam(1e-2)


def mlp6(p, x, clipper=clip_cot):
    h = clipper(jnp.tanh(x @ p["w1"] + p["b1"]))
    return h @ p["w2"]


def adam6_ref(p, x, y):
    g = jax.grad(lambda p: jnp.mean(jnp.square(mlp6(p, x) - y)))(p)
    s = OPT6.init(p)
    u, s = OPT6.update(g, s, p)
    return optax.apply_updates(p, u), s[0].mu


def adam6_body(bug):
    def clip_fwd(x):
        return jnp.clip(x, -CLIP6, CLIP6)

    def f(p, x, y):
        def loss(p):
            l = jnp.mean(jnp.square(mlp6(p, x, clip_fwd if bug == "clip-in-forward" else clip_cot) - y))
            return l if bug == "loss-not-pmeaned" else pmean(l, "dp")
        g = jax.grad(loss)(p)
        s = OPT6.init(p)
        u, s = OPT6.update(g, s, p)
        return optax.apply_updates(p, u), s[0].mu
    return f


P6 = {"w1": R(6, 12, scale=0.5), "b1": R(12, scale=0.1), "w2": R(12, 3, scale=0.5)}
S6 = {"w1": P(), "b1": P(), "w2": P()}
C.smap("s.clip_cotangent_customvjp_adam.dp4", {"dp": 4}, adam6_body, (S6, P("dp"), P("dp")), (S6, S6), adam6_ref,
       (P6, R(16, 6), R(16, 3)),
       bugs=[("loss-not-pmeaned", ["missing-all-reduce"]), ("clip-in-forward", ["wrong-operand"])],
       check_vma=True)

# ---------------------------------------------------------------------------
# 7. tensor-parallel attention + MLP under jax.checkpoint policies.
from jax.ad_checkpoint import checkpoint_name  # noqa: E402

POL_NAMES = jax.checkpoint_policies.save_only_these_names("attn_out", "mlp_out")
POL_DOTS = jax.checkpoint_policies.checkpoint_dots


def tp_layer(p, x, red, bug=None):
    q, k, v = (jnp.einsum("btd,dhe->bthe", ln(x), p[n]) for n in ("wq", "wk", "wv"))
    s = jnp.einsum("bqhe,bkhe->bhqk", q, k) / np.sqrt(q.shape[-1])
    s = jnp.where(jnp.tril(jnp.ones(s.shape[-2:], bool)), s, -1e30)
    o = jnp.einsum("bhqk,bkhe->bqhe", jax.nn.softmax(s, -1), v)
    a = checkpoint_name(red(jnp.einsum("bqhe,hed->bqd", o, p["wo"])), "attn_out")
    x = (lax.stop_gradient(x) if bug == "residual-stop-gradient" else x) + a
    m = checkpoint_name(red(jax.nn.silu(ln(x) @ p["w1"]) @ p["w2"]), "mlp_out")
    return x + m


def two_blocks(ps, x, red=lambda a: a, bug=None):
    x = jax.checkpoint(partial(tp_layer, red=red), policy=POL_NAMES)(ps[0], x)
    x = jax.checkpoint(partial(tp_layer, red=red, bug=bug), policy=POL_DOTS)(ps[1], x)
    return x


def remat_ref(ps, x, t):
    return jax.value_and_grad(lambda ps: jnp.mean(jnp.square(two_blocks(ps, x) - t)))(ps)


def remat_body(bug):
    red = (lambda a: pmean(a, "tp")) if bug == "rowpar-pmean" else (lambda a: psum(a, "tp"))

    def f(ps, x, t):
        return jax.value_and_grad(lambda ps: pmean(jnp.mean(jnp.square(two_blocks(ps, x, red, bug) - t)), "dp"))(ps)
    return f


D7, H7, E7, F7 = 8, 4, 4, 16


def layer7():
    return {"wq": R(D7, H7, E7, scale=0.4), "wk": R(D7, H7, E7, scale=0.4), "wv": R(D7, H7, E7, scale=0.4),
            "wo": R(H7, E7, D7, scale=0.4), "w1": R(D7, F7, scale=0.4), "w2": R(F7, D7, scale=0.4)}


L7S = {"wq": P(None, "tp"), "wk": P(None, "tp"), "wv": P(None, "tp"), "wo": P("tp"), "w1": P(None, "tp"),
       "w2": P("tp", None)}
C.smap("s.remat_policies_tp_block_grad.dp2xtp4", DPTP, remat_body, ([L7S, L7S], P("dp"), P("dp")),
       (P(), [L7S, L7S]), remat_ref, ([layer7(), layer7()], R(4, 6, D7), R(4, 6, D7)),
       bugs=[("residual-stop-gradient", ["wrong-operand"]), ("rowpar-pmean", ["wrong-collective-op"])],
       check_vma=True)

# ---------------------------------------------------------------------------
# 8. fused token cross-entropy (custom_vjp, backward from the saved softmax),
#    tokens over (dp, sp).


def fused_ce_maker(count_fn, loss_red):
    @jax.custom_vjp
    def fused_ce(z, y, mask):
        return fce_fwd(z, y, mask)[0]

    def fce_fwd(z, y, mask):
        lz = jax.nn.log_softmax(z, -1)
        oh = jax.nn.one_hot(y, z.shape[-1], dtype=z.dtype)
        cnt = count_fn(jnp.sum(mask))
        loss = loss_red(-jnp.sum(oh * lz * mask[..., None])) / cnt
        return loss, (jnp.exp(lz), oh, mask, cnt)

    def fce_bwd(res, g):
        p, oh, mask, cnt = res
        return ((p - oh) * mask[..., None] * (g / cnt), None, None)
    fused_ce.defvjp(fce_fwd, fce_bwd)
    return fused_ce


fused_ce_ref = fused_ce_maker(lambda c: c, lambda s: s)


def fce_ref(h, w, y, mask):
    return jax.value_and_grad(lambda h, w: fused_ce_ref(h @ w, y, mask), (0, 1))(h, w)


def fce_body(bug):
    cnt_fn = (lambda c: c * 8) if bug == "bwd-local-count" else (lambda c: psum(c, ("dp", "sp")))
    fce = fused_ce_maker(cnt_fn, lambda s: psum(s, ("dp", "sp")))

    def f(h, w, y, mask):
        l, (dh, dw) = jax.value_and_grad(lambda h, w: fce(h @ w, y, mask), (0, 1))(h, w)
        dw = psum(dw, "dp") if bug == "head-grad-not-sp-reduced" else psum(dw, ("dp", "sp"))
        return l, (dh, dw)
    return f


V8, D8 = 16, 8
MASK8 = (rng.random((4, 8)) > 0.3).astype(np.float32)
C.smap("s.fused_ce_saved_softmax_customvjp.dp2xsp4", {"dp": 2, "sp": 4}, fce_body,
       (P("dp", "sp"), P(), P("dp", "sp"), P("dp", "sp")), (P(), (P("dp", "sp"), P())), fce_ref,
       (R(4, 8, D8), R(D8, V8, scale=0.5), I(0, V8, 4, 8), MASK8),
       bugs=[("bwd-local-count", ["wrong-scale"]), ("head-grad-not-sp-reduced", ["missing-all-reduce"])])
# the bug's count is the local count times the number of devices: equal to the
# global one only if every device has as many unmasked tokens, which MASK8 breaks.

# ---------------------------------------------------------------------------
# 9. binarised layer with a straight-through estimator as a custom_jvp,
#    two optax momentum steps in a lax.scan.


def make_ste(window_from_sign):
    @jax.custom_jvp
    def binarize(w):
        return jnp.where(w >= 0, 1.0, -1.0).astype(w.dtype)

    @binarize.defjvp
    def _jvp(primals, tangents):
        (w,), (dw,) = primals, tangents
        ref = binarize(w) if window_from_sign else w
        return binarize(w), dw * (jnp.abs(ref) <= WIN9)
    return binarize


OPT9 = optax.sgd(0.05, momentum=0.9)
WIN9 = 0.25  # a narrow estimator window (the weights are drawn with scale 1)


def bin_net(p, x, binarize, red=lambda a: a):
    h = jnp.tanh(x @ binarize(p["w1"]) * 0.3)
    return red(h @ p["w2"])


def bin_steps(p, xs, ys, binarize, red=lambda a: a, lred=lambda a: a):
    s = OPT9.init(p)

    def step(c, xy):
        p, s = c
        x, y = xy
        l, g = jax.value_and_grad(lambda p: lred(jnp.mean(jnp.square(bin_net(p, x, binarize, red) - y))))(p)
        u, s = OPT9.update(g, s, p)
        return (optax.apply_updates(p, u), s), l
    (p, s), ls = lax.scan(step, (p, s), (xs, ys))
    return p, ls


def bin_ref(p, xs, ys):
    return bin_steps(p, xs, ys, make_ste(False))


def bin_body(bug):
    red = (lambda a: pmean(a, "tp")) if bug == "second-layer-pmean" else (lambda a: psum(a, "tp"))

    def f(p, xs, ys):
        return bin_steps(p, xs, ys, make_ste(bug == "ste-window-from-sign"), red, lambda a: pmean(a, "dp"))
    return f


P9 = {"w1": R(8, 16, scale=1.0), "w2": R(16, 2, scale=0.4)}
S9 = {"w1": P(None, "tp"), "w2": P("tp", None)}
C.smap("s.binary_ste_customjvp_momentum_scan.dp2xtp4", DPTP, bin_body, (S9, P(None, "dp"), P(None, "dp")),
       (S9, P()), bin_ref, (P9, R(2, 8, 8), R(2, 8, 2)),
       bugs=[("ste-window-from-sign", ["wrong-operand"]), ("second-layer-pmean", ["wrong-collective-op"])],
       check_vma=True)

# ---------------------------------------------------------------------------
# 10. manual pipeline forward / backward with jax.vjp and ppermute (pp4).


def stage(w, x):
    return jnp.tanh(x @ w)


def pipe_ref(ws, x):
    def loss(ws, x):
        for s in range(ws.shape[0]):
            x = stage(ws[s], x)
        return 0.5 * jnp.sum(jnp.square(x))
    l, (dw, dx) = jax.value_and_grad(loss, (0, 1))(ws, x)
    return l, dw, dx


def pipe_body(bug):
    n = 4
    fwd = [(i, (i + 1) % n) for i in range(n)]
    bwd = [(i, (i - 1) % n) for i in range(n)]

    def f(ws, x):
        w, me = ws[0], idx("pp")
        cur, saved = x, jnp.zeros_like(x)
        for t in range(n):
            saved = jnp.where(me == t, cur, saved)
            cur = lax.ppermute(stage(w, cur), "pp", fwd)
        loss = psum(jnp.where(me == 0, 0.5 * jnp.sum(jnp.square(cur)), 0.0), "pp")
        g = lax.ppermute(jnp.where(me == 0, cur, 0.0), "pp", bwd)
        dw, dx0 = jnp.zeros_like(w), jnp.zeros_like(x)
        for t in reversed(range(n)):
            at = cur if bug == "vjp-at-last-activation" else saved
            _, pull = jax.vjp(stage, w, at)
            gw, gx = pull(g)
            dw = jnp.where(me == t, gw, dw)
            dx0 = jnp.where((me == 0) & (t == 0), gx, dx0)
            g = lax.ppermute(gx, "pp", fwd if bug == "cotangent-sent-forward" else bwd)
        return loss, dw[None], psum(dx0, "pp")
    return f


C.smap("s.manual_pipeline_vjp_ppermute.pp4", {"pp": 4}, pipe_body, (P("pp"), P()), (P(), P("pp"), P()), pipe_ref,
       (R(4, 8, 8, scale=0.5), R(3, 8)),
       bugs=[("cotangent-sent-forward", ["wrong-permutation"]), ("vjp-at-last-activation", ["wrong-operand"])])

# ---------------------------------------------------------------------------
# 11. DQN temporal-difference loss with a stop_gradient'd bootstrapped target.
GAMMA = 0.9
OPT11 = optax.sgd(0.1)


def qnet(p, s):
    return jnp.tanh(s @ p["w1"]) @ p["w2"]


def td_loss_ref(p, s, a, r, s2, done):
    q = jnp.take_along_axis(qnet(p, s), a[:, None], 1)[:, 0]
    tgt = r + GAMMA * (1 - done) * jnp.max(qnet(p, s2), -1)
    return jnp.mean(optax.huber_loss(q, lax.stop_gradient(tgt)))


def td_ref(p, s, a, r, s2, done):
    g = jax.grad(td_loss_ref)(p, s, a, r, s2, done)
    u, _ = OPT11.update(g, OPT11.init(p), p)
    return optax.apply_updates(p, u)


def td_body(bug):
    def loss(p, s, a, r, s2, done):
        qs, q2 = qnet(p, s), qnet(p, s2)  # action columns over tp
        al = qs.shape[-1]
        loc = a - idx("tp") * al
        q = psum(jnp.sum(jnp.where(jnp.arange(al) == loc[:, None], qs, 0.0), -1), "tp")
        q2 = q2 if bug == "greedy-local-block" else lax.all_gather(q2, "tp", axis=1, tiled=True)
        m2 = jnp.max(q2, -1)
        tgt = r + GAMMA * (1 - done) * m2
        if bug != "target-not-stopped":
            tgt = lax.stop_gradient(tgt)
        # all_gather's result counts as tp-varying under check_vma, so the loss
        # is pmean'd over tp too (a pmean over dp alone doubles w1's gradient).
        return pmean(jnp.mean(optax.huber_loss(q, tgt)), ("dp", "tp"))

    def f(p, s, a, r, s2, done):
        g = jax.grad(loss)(p, s, a, r, s2, done)
        u, _ = OPT11.update(g, OPT11.init(p), p)
        return optax.apply_updates(p, u)
    return f


P11 = {"w1": R(6, 12, scale=0.5), "w2": R(12, 4, scale=0.8)}
S11 = {"w1": P(), "w2": P(None, "tp")}
C.smap("s.dqn_td_stopgrad_target_sgd.dp4xtp2", {"dp": 4, "tp": 2}, td_body,
       (S11, P("dp"), P("dp"), P("dp"), P("dp"), P("dp")), S11, td_ref,
       (P11, R(8, 6), I(0, 4, 8), R(8), R(8, 6), (rng.random(8) > 0.7).astype(np.float32)),
       bugs=[("target-not-stopped", ["wrong-operand"]), ("greedy-local-block", ["missing-all-reduce"])],
       check_vma=True)

# ---------------------------------------------------------------------------
# 12. expert-parallel dispatch written as a custom_vjp around all_to_all
#     (backward: the inverse all_to_all), a per-expert MLP, the combine the
#     same operator the other way round; the loss and the gradient in the
#     experts' weights (check_vma=False, ep4).


def a2a_op(split, concat, bug):
    @jax.custom_vjp
    def op(x):
        return lax.all_to_all(x, "ep", split, concat, tiled=True)

    def bwd(_, g):
        if bug == "a2a-bwd-reshape-only":
            return (g.reshape(4, -1, g.shape[-1]),)  # (1, e * c_l, d) -> (e, c_l, d), no exchange
        return (lax.all_to_all(g, "ep", concat, split, tiled=True),)
    op.defvjp(lambda x: (op(x), None), bwd)
    return op


def moe_ref(x, w1, w2):
    # x (e, c, d): slot block e of the (global) token buffer goes to expert e
    def loss(x, w1, w2):
        y = jnp.einsum("ecf,efd->ecd", jax.nn.gelu(jnp.einsum("ecd,edf->ecf", x, w1)), w2)
        return jnp.sum(jnp.square(y - 0.5 * x))
    return jax.value_and_grad(loss, (0, 1, 2))(x, w1, w2)


def moe_body(bug):
    disp = a2a_op(0, 1, bug)     # (e, c_l, d) -> (1, e * c_l, d): my expert's slots from every device
    comb = a2a_op(1, 0, None)    # back

    def f(x, w1, w2):
        def loss(x, w1, w2):
            h = disp(x)
            y = jnp.einsum("ecf,efd->ecd", jax.nn.gelu(jnp.einsum("ecd,edf->ecf", h, w1)), w2)
            return jnp.sum(jnp.square(comb(y) - 0.5 * x))
        l, (gx, g1, g2) = jax.value_and_grad(loss, (0, 1, 2))(x, w1, w2)
        return (psum(l, "ep") if bug != "loss-not-summed" else l * 4), (gx, g1, g2)
    return f


C.smap("s.moe_a2a_customvjp_dispatch_grad.ep4", {"ep": 4}, moe_body, (P(None, "ep"), P("ep"), P("ep")),
       (P(), (P(None, "ep"), P("ep"), P("ep"))), moe_ref, (R(4, 8, 6), R(4, 6, 10, scale=0.4), R(4, 10, 6, scale=0.4)),
       bugs=[("a2a-bwd-reshape-only", ["missing-collective"]), ("loss-not-summed", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 13. DDP by autodiff: a custom_vjp "sync" on the replicated parameters
#     (identity forward, psum over dp backward), the loss a local sum over
#     the global count, check_vma=False, one optax.rmsprop step.
OPT13 = optax.rmsprop(1e-2)


def sync_op(bug):
    @jax.custom_vjp
    def sync(p):
        return p

    def bwd(_, g):
        red = (lambda a: pmean(a, "dp")) if bug == "sync-bwd-pmean" else (lambda a: psum(a, "dp"))
        return (jax.tree.map(red, g),)
    sync.defvjp(lambda p: (p, None), bwd)
    return sync


def reg13(p, x, y):
    return jnp.sum(jnp.square(jnp.tanh(x @ p["w"] + p["b"]) @ p["v"] - y))


def ddp_ref(p, x, y):
    g = jax.grad(lambda p: reg13(p, x, y) / x.shape[0])(p)
    s = OPT13.init(p)
    u, s = OPT13.update(g, s, p)
    return optax.apply_updates(p, u), s[0].nu


def ddp_body(bug):
    sync = sync_op(bug)

    def f(p, x, y):
        n = x.shape[0] * (1 if bug == "local-count" else 4)
        g = jax.grad(lambda p: reg13(sync(p), x, y) / n)(p)
        s = OPT13.init(p)
        u, s = OPT13.update(g, s, p)
        return optax.apply_updates(p, u), s[0].nu
    return f


P13 = {"w": R(5, 8, scale=0.5), "b": R(8, scale=0.1), "v": R(8, 2, scale=0.5)}
S13 = {"w": P(), "b": P(), "v": P()}
C.smap("s.ddp_sync_customvjp_rmsprop.dp4", {"dp": 4}, ddp_body, (S13, P("dp"), P("dp")), (S13, S13), ddp_ref,
       (P13, R(16, 5), R(16, 2)),
       bugs=[("sync-bwd-pmean", ["wrong-collective-op"]), ("local-count", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 14. minimal: what jax.checkpoint leaves in the program -- a reduce_precision
#     to the value's own format (exponent 8, mantissa 23: the identity on
#     f32) on a row-parallel partial sum before its psum (tp4). Bug: the
#     partials rounded to bf16's mantissa (7 bits) before the psum.


def rp_ref(x, w):
    return lax.reduce_precision(x @ w, exponent_bits=8, mantissa_bits=23)


def rp_body(bug):
    def f(x, w):
        eb, mb = {"partials-rounded-to-bf16": (8, 7), "partials-rounded-to-e5m2": (5, 2)}.get(bug, (8, 23))
        return psum(lax.reduce_precision(x @ w, exponent_bits=eb, mantissa_bits=mb), "tp")
    return f


C.smap("s.min_reduce_precision_identity_on_partial.tp4", {"tp": 4}, rp_body, (P(None, "tp"), P("tp")), P(), rp_ref,
       (R(4, 16), R(16, 8)),
       bugs=[("partials-rounded-to-bf16", ["wrong-dtype"]), ("partials-rounded-to-e5m2", ["wrong-dtype"])])

# ---------------------------------------------------------------------------
# 15. a Hessian-vector product of a tensor-parallel MLP regression inside
#     the body with check_vma=True (the transposes do the reductions), the
#     loss pmean'd over dp, the row-parallel output psum'd over tp, and a
#     damped update p - lr * (g + 0.1 * Hv).


def tp_mlp_loss(p, x, y, red=lambda a: a):
    return jnp.mean(jnp.square(red(jax.nn.silu(x @ p["w1"]) @ p["w2"]) - y))


def hvp15_ref(p, v, x, y):
    g, hv = jax.jvp(jax.grad(lambda p: tp_mlp_loss(p, x, y)), (p,), (v,))
    return jax.tree.map(lambda a, b, c: a - 0.1 * (b + 0.1 * c), p, g, hv), hv


def hvp15_body(bug):
    def red(a):
        return pmean(a, "tp") if bug == "rowpar-pmean" else psum(a, "tp")

    def f(p, v, x, y):
        def loss(p):
            l = tp_mlp_loss(p, x, y, red)
            return l if bug == "hvp-loss-not-pmeaned" else pmean(l, "dp")
        g, hv = jax.jvp(jax.grad(loss), (p,), (v,))
        return jax.tree.map(lambda a, b, c: a - 0.1 * (b + 0.1 * c), p, g, hv), hv
    return f


P15 = {"w1": R(6, 16, scale=0.5), "w2": R(16, 3, scale=0.5)}
V15 = {"w1": R(6, 16), "w2": R(16, 3)}
S15 = {"w1": P(None, "tp"), "w2": P("tp", None)}
C.smap("s.hvp_tp_mlp_checkvma_damped_step.dp2xtp4", DPTP, hvp15_body, (S15, S15, P("dp"), P("dp")), (S15, S15),
       hvp15_ref, (P15, V15, R(8, 6), R(8, 3)),
       bugs=[("rowpar-pmean", ["wrong-collective-op"]), ("hvp-loss-not-pmeaned", ["missing-all-reduce"])],
       check_vma=True)

# ---------------------------------------------------------------------------
# 16. Newton-CG by hand: 3 unrolled conjugate-gradient iterations on
#     (H + 0.1 I) d = g with Hessian-vector products by jax.jvp of jax.grad
#     of the local sum, psum'd over dp and divided by the global count
#     (check_vma=False); a logistic regression with the batch over dp4.


def newton_cg(grad_fn, hvp_fn, w, iters=3, damp=0.1):
    g = grad_fn(w)
    d, r = jnp.zeros_like(w), g
    q = r
    for _ in range(iters):
        hq = hvp_fn(w, q) + damp * q
        a = jnp.vdot(r, r) / jnp.vdot(q, hq)
        d, r_new = d + a * q, r - a * hq
        q = r_new + (jnp.vdot(r_new, r_new) / jnp.vdot(r, r)) * q
        r = r_new
    return w - d


def ncg_ref(w, x, y):
    def loss(w):
        return logreg_sum(w, x, y) / x.shape[0]
    return newton_cg(jax.grad(loss), lambda w, v: jax.jvp(jax.grad(loss), (w,), (v,))[1], w)


def ncg_body(bug):
    def f(w, x, y):
        n = x.shape[0] * 4
        gl = jax.grad(logreg_sum)

        def grad_fn(w):
            g = gl(w, x, y)
            return (g if bug == "gradient-not-psummed" else psum(g, "dp")) / n

        def hvp_fn(w, v):
            hv = jax.jvp(lambda w: gl(w, x, y), (w,), (v,))[1]
            return psum(hv, "dp") / (x.shape[0] if bug == "hvp-local-count" else n)
        return newton_cg(grad_fn, hvp_fn, w)
    return f


C.smap("s.newton_cg_hvp_logreg.dp4", {"dp": 4}, ncg_body, (P(), P("dp"), P("dp")), P(), ncg_ref,
       (R(D2 + 1, scale=0.5), R(16, D2), (rng.random(16) > 0.5).astype(np.float32)),
       bugs=[("gradient-not-psummed", ["missing-all-reduce"]), ("hvp-local-count", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 17. jax.linear_transpose of a row-parallel linear map (input features over
#     tp, psum'd output) inside the body with check_vma=True: the forward on
#     x and the transpose applied to a replicated cotangent.


def lt_ref(x, w, ct):
    def lin(x):
        return x @ w
    return lin(x), jax.linear_transpose(lin, x)(ct)[0]


def lt_body(bug):
    def f(x, w, ct):
        def lin(x):
            return psum(x @ w, "tp")
        if bug == "cotangent-psummed":
            ct = psum(ct, "tp")
        return lin(x), jax.linear_transpose(lin, x)(ct)[0]
    return f


C.smap("s.linear_transpose_rowpar_checkvma.dp2xtp4", DPTP, lt_body, (P("dp", "tp"), P("tp", None), P("dp")),
       (P("dp"), P("dp", "tp")), lt_ref, (R(4, 16), R(16, 6, scale=0.4), R(4, 6)),
       bugs=[("cotangent-psummed", ["wrong-scale"])], check_vma=True)

# ---------------------------------------------------------------------------
# 18. a Megatron MLP block (w1 columns, w2 rows over tp4, batch over dp2)
#     under jax.checkpoint(save_only_these_names("rowpar")) with the name on
#     the row-parallel partial product before its psum, the activations
#     fake-quantised to float8_e4m3fn and back (an fp8-training habit), loss
#     and gradients by value_and_grad (check_vma=True). Bug: the fp8 round
#     trip dropped on the distributed side.


def fq8(x):
    return x.astype(jnp.float8_e4m3fn).astype(jnp.float32)


def fp8_blk(p, x, red=lambda a: a, quant=fq8):
    h = jax.nn.gelu(quant(x) @ p["w1"])
    return x + red(checkpoint_name(h @ p["w2"], "rowpar"))


def fp8_remat_ref(p, x, y):
    f = jax.checkpoint(fp8_blk, policy=jax.checkpoint_policies.save_only_these_names("rowpar"))
    return jax.value_and_grad(lambda p: jnp.mean(jnp.square(f(p, f(p, x)) - y)))(p)


def fp8_remat_body(bug):
    def red(a):
        return psum(a, "tp")

    def f(p, x, y):
        blk = partial(fp8_blk, red=red, quant=(lambda a: a) if bug == "fp8-round-trip-dropped" else fq8)
        g = jax.checkpoint(blk, policy=jax.checkpoint_policies.save_only_these_names("rowpar"))
        return jax.value_and_grad(lambda p: pmean(jnp.mean(jnp.square(g(p, g(p, x)) - y)), "dp"))(p)
    return f


P18 = {"w1": R(8, 32, scale=0.3), "w2": R(32, 8, scale=0.3)}
S18 = {"w1": P(None, "tp"), "w2": P("tp", None)}
C.smap("s.remat_rowpar_name_fp8_fakequant_grad.dp2xtp4", DPTP, fp8_remat_body, (S18, P("dp"), P("dp")), (P(), S18),
       fp8_remat_ref, (P18, R(8, 8), R(8, 8)),
       bugs=[("fp8-round-trip-dropped", ["wrong-dtype"])], check_vma=True)

# ---------------------------------------------------------------------------
# 19. the same Megatron block under save_only_these_names at a realistic
#     width (hidden 256, ffn 1024, 64 tokens), too large for a quick
#     execution: the loss and the gradients (check_vma=True). Bug: the
#     row-parallel output pmean'd.


def wide_body(bug):
    def red(a):
        return pmean(a, "tp") if bug == "rowpar-pmean" else psum(a, "tp")

    def f(p, x, y):
        g = jax.checkpoint(partial(fp8_blk, red=red, quant=lambda a: a),
                           policy=jax.checkpoint_policies.save_only_these_names("rowpar"))
        return jax.value_and_grad(lambda p: pmean(jnp.mean(jnp.square(g(p, g(p, x)) - y)), "dp"))(p)
    return f


def wide_ref(p, x, y):
    f = jax.checkpoint(partial(fp8_blk, quant=lambda a: a),
                       policy=jax.checkpoint_policies.save_only_these_names("rowpar"))
    return jax.value_and_grad(lambda p: jnp.mean(jnp.square(f(p, f(p, x)) - y)))(p)


P19 = {"w1": R(256, 1024, scale=0.05), "w2": R(1024, 256, scale=0.03)}
C.smap("s.remat_rowpar_name_wide.dp2xtp4", DPTP, wide_body, (S18, P("dp"), P("dp")), (P(), S18), wide_ref,
       (P19, R(64, 256), R(64, 256)), bugs=[("rowpar-pmean", ["wrong-collective-op"])], check_vma=True)

# ---------------------------------------------------------------------------
# 20. hybrid fp8 training of the Megatron block: a custom_vjp that rounds
#     the cotangent to e5m2 (lax.reduce_precision, exponent 5, mantissa 2)
#     on the block's output, which is complete (after the psum), and the
#     block under jax.checkpoint(checkpoint_dots), which saves every dot --
#     the row-parallel partial product among them (check_vma=True). Bug:
#     the row-parallel output pmean'd.


@jax.custom_vjp
def e5m2_cot(x):
    return x


e5m2_cot.defvjp(lambda x: (x, None), lambda _, g: (lax.reduce_precision(g, exponent_bits=5, mantissa_bits=2),))


def e5m2_blk(p, x, red=lambda a: a):
    h = jax.nn.gelu(x @ p["w1"])
    return e5m2_cot(x + red(h @ p["w2"]))


def e5m2_ref(p, x, y):
    f = jax.checkpoint(e5m2_blk, policy=POL_DOTS)
    return jax.value_and_grad(lambda p: jnp.mean(jnp.square(f(p, f(p, x)) - y)))(p)


def e5m2_body(bug):
    def red(a):
        return pmean(a, "tp") if bug == "rowpar-pmean" else psum(a, "tp")

    def f(p, x, y):
        g = jax.checkpoint(partial(e5m2_blk, red=red), policy=POL_DOTS)
        return jax.value_and_grad(lambda p: pmean(jnp.mean(jnp.square(g(p, g(p, x)) - y)), "dp"))(p)
    return f


C.smap("s.e5m2_cotangent_customvjp_remat_dots.dp2xtp4", DPTP, e5m2_body, (S18, P("dp"), P("dp")), (P(), S18),
       e5m2_ref, (P18, R(8, 8), R(8, 8)), bugs=[("rowpar-pmean", ["wrong-collective-op"])], check_vma=True)

# 21. the attention + MLP layer of 7. under checkpoint_dots with the e5m2
#     cotangent rounding of 20. on each layer's output (two layers).


def e5m2_attn_ref(ps, x, t):
    def lyr(p, x):
        return e5m2_cot(tp_layer(p, x, lambda a: a))
    f = jax.checkpoint(lyr, policy=POL_DOTS)
    return jax.value_and_grad(lambda ps: jnp.mean(jnp.square(f(ps[1], f(ps[0], x)) - t)))(ps)


def e5m2_attn_body(bug):
    red = (lambda a: pmean(a, "tp")) if bug == "rowpar-pmean" else (lambda a: psum(a, "tp"))

    def f(ps, x, t):
        def lyr(p, x):
            return e5m2_cot(tp_layer(p, x, red))
        g = jax.checkpoint(lyr, policy=POL_DOTS)
        return jax.value_and_grad(lambda ps: pmean(jnp.mean(jnp.square(g(ps[1], g(ps[0], x)) - t)), "dp"))(ps)
    return f


C.smap("s.e5m2_cotangent_attn_mlp_remat_dots.dp2xtp4", DPTP, e5m2_attn_body, ([L7S, L7S], P("dp"), P("dp")),
       (P(), [L7S, L7S]), e5m2_attn_ref, ([layer7(), layer7()], R(4, 6, D7), R(4, 6, D7)),
       bugs=[("rowpar-pmean", ["wrong-collective-op"])], check_vma=True)

# ---------------------------------------------------------------------------
# GSPMD pairs.


# 22. HVP of a 2-layer MLP, weights over tp, batch over dp.
def mlp_loss12(p, x, y):
    return jnp.mean(jnp.square(jnp.tanh(x @ p["w1"]) @ p["w2"] - y))


def hvp12(p, v, x, y):
    return jax.jvp(jax.grad(lambda p: mlp_loss12(p, x, y)), (p,), (v,))


P12 = {"w1": R(8, 16, scale=0.4), "w2": R(16, 4, scale=0.4)}
V12 = {"w1": R(8, 16), "w2": R(16, 4)}
S12 = {"w1": P(None, "tp"), "w2": P("tp", None)}
C.gspmd("g.hvp_fwd_over_rev_mlp.dp2xtp4", DPTP, (S12, S12, P("dp"), P("dp")), (S12, S12), hvp12,
        (P12, V12, R(8, 8), R(8, 4)))

# 23. the fused custom_vjp cross-entropy of 8. with a vocab-sharded head.
C.gspmd("g.fused_ce_customvjp_vocab_head.dp2xtp4", DPTP, (P("dp"), P(None, "tp"), P("dp"), P("dp")),
        (P(), (P("dp"), P(None, "tp"))), fce_ref,
        (R(4, 8, D8), R(D8, 32, scale=0.5), I(0, 32, 4, 8), MASK8))

# 24. scanned residual MLP under checkpoint_dots with an optax.adamw step.
OPT14 = optax.adamw(1e-2, weight_decay=0.1)


def step14(p, s, x, y):
    def loss(p):
        def layer(h, w):
            return h + jax.nn.gelu(h @ w["a"]) @ w["b"], None
        h, _ = lax.scan(jax.checkpoint(layer, policy=POL_DOTS), x, p)
        return jnp.mean(jnp.square(h - y))
    l, g = jax.value_and_grad(loss)(p)
    u, s = OPT14.update(g, s, p)
    return optax.apply_updates(p, u), s, l


P14 = {"a": R(3, 8, 16, scale=0.3), "b": R(3, 16, 8, scale=0.3)}
S14p = {"a": P(None, "dp", "tp"), "b": P(None, "tp", "dp")}
ST14 = OPT14.init(P14)
SS14 = state_specs(ST14, S14p)
C.gspmd("g.scan_remat_dots_adamw_fsdp_tp.dp2xtp4", DPTP, (S14p, SS14, P("dp"), P("dp")), (S14p, SS14, P()), step14,
        (P14, jax.tree.map(np.asarray, ST14), R(8, 8), R(8, 8)))


# 25. the DANN step of 4. with optax.adam.
OPT15 = optax.adam(1e-2)


def dann15(p, x, y, d):
    g = jax.grad(dann_loss)(p, x, y, d)
    u, _ = OPT15.update(g, OPT15.init(p), p)
    return optax.apply_updates(p, u)


C.gspmd("g.grad_reversal_dann_adam.dp2xtp4", DPTP, (S4, P("dp"), P("dp"), P("dp")), S4, dann15,
        (P4, R(8, D4), R(8), (rng.random(8) > 0.5).astype(np.float32)))


# 26. the custom_jvp log-sum-exp under jax.linearize, vocab over tp.
def lin16(z, dz1, dz2):
    y, lf = jax.linearize(lse_ref, z)
    return y, lf(dz1), lf(dz2)


C.gspmd("g.customjvp_lse_linearize.dp2xtp4", DPTP, (P("dp", "tp"),) * 3, (P("dp"), P("dp"), P("dp")), lin16,
        (R(8, 32, scale=2.0), R(8, 32), R(8, 32)))


# 27. a Megatron MLP under jax.checkpoint(save_only_these_names) with the
#     name on the row-parallel output, GSPMD placing the all-reduce; loss and
#     gradients.
def mlp20(p, x, y):
    def blk(p, x):
        h = checkpoint_name(jax.nn.gelu(x @ p["w1"]), "hid")
        return x + checkpoint_name(h @ p["w2"], "rowpar")
    f = jax.checkpoint(blk, policy=jax.checkpoint_policies.save_only_these_names("rowpar"))
    return jnp.mean(jnp.square(f(p, f(p, x)) - y))


P20 = {"w1": R(8, 32, scale=0.3), "w2": R(32, 8, scale=0.3)}
S20 = {"w1": P(None, "tp"), "w2": P("tp", None)}
C.gspmd("g.remat_save_names_megatron_mlp_grad.dp2xtp4", DPTP, (S20, P("dp"), P("dp")), (P(), S20),
        jax.value_and_grad(mlp20), (P20, R(8, 8), R(8, 8)))


# 28. the full Hessian (jax.hessian: jacfwd of jacrev) of a small MLP loss in
#     its first-layer weights, batch over dp.
def hess22(w1, w2, x, y):
    return jax.hessian(lambda w1: jnp.mean(jnp.square(jnp.tanh(x @ w1) @ w2 - y)))(w1)


C.gspmd("g.full_hessian_jacfwd_jacrev.dp4", {"dp": 4}, (P(), P(), P("dp"), P("dp")), P(), hess22,
        (R(4, 3, scale=0.5), R(3, 2, scale=0.5), R(16, 4), R(16, 2)))

C.finish()
