"""samples/fresh44: a 44th batch of programs as a user writes them, on the
theme of loss functions and training objectives under sharding in current
JAX / optax, none of them an idiom of samples/fresh .. fresh26, probe, train
or wild.
shard_map families:
 1. vocab-parallel cross-entropy whose log-sum-exp combines the per-rank
    log-sum-exps (pmax of them, psum of exp(lse_r - max)) as flash
    attention combines partials (a first draft's all_gather of them is
    tp-varying to check_vma, so could not be returned at P()),
    the target logit by comparing a broadcasted_iota shifted by the rank's
    vocab offset with the label (masked sum, psum'd over tp); jax.grad
    inside the body (check_vma=True), loss pmean'd over dp, one
    optax.sgd-with-momentum step of the tp-sharded head. Bugs: the offset
    of the next rank ((r+1)*V/tp), the loss psum'd over dp instead of
    pmean'd (gradients and loss dp times too large).
 2. token-level log-probabilities for a sequence loss: time over sp, vocab
    over tp (sp2 x tp4); log_softmax written with lax primitives (pmax of
    the row maximum, psum of exponentials), the target picked by a clipped
    take_along_axis at label - offset and masked; returns the token
    log-probs (time-sharded) and each sequence's length-normalised
    log-likelihood (masked sums and valid-token counts psum'd over sp).
    Bugs: the maximum not pmax'd (each rank shifts by its own maximum),
    the length from the rank's own time block, the offset from the sp rank.
 3. knowledge distillation with teacher and student logits both sharded
    over the vocabulary (dp2 x tp4): temperature-scaled forward KL
    KL(p_teacher || p_student) * T^2 mixed with the hard-label
    cross-entropy, both softmaxes normalised over the full vocabulary;
    jax.grad of the student head (check_vma=True), optax.adam. Bugs: the
    KL direction swapped, the teacher normalised over the local vocabulary
    shard.
 4. multi-class focal loss -alpha_y (1 - p_y)^gamma log p_y with the classes
    over tp4 and the per-class alpha vector sharded the same way (looked up
    by a masked psum), batch over dp2; jax.grad + optax.sgd
    (check_vma=True). Bugs: alpha looked up without the vocab offset, the
    loss psum'd over dp.
 5. a masked token mean with the global token count over dp4 (padding
    masks of very different density per shard): a tiny embedding + head,
    gradients by jax.grad of the local masked sum divided by the psum'd
    count (computed outside the grad), gradients psum'd over dp by hand
    (check_vma=False), optax.adamw. Bugs: the local count, the mean of the
    per-shard means (pmean), the gradients pmean'd instead of psum'd.
 6. a multi-task objective on dp4 (check_vma=False, gradients pmean'd by
    hand): shared trunk, a token-classification head and a regression head,
    loss = a * CE + b * MSE + c * ||W||^2 (the L2 term once, not per
    shard); returns parameters, optax.adamw state and the logged terms.
    Bugs: the logged MSE term not pmean'd, the gradients psum'd, the L2
    term's gradient divided by the dp size (as if it were per-shard data).
 7. the Switch-transformer load-balancing loss with the router's expert
    columns over ep (dp2 x ep4): softmax over experts with pmax / psum over
    ep, top-1 expert by pmax of the maximum and pmin of the winning global
    index, routed fraction f_e and mean probability P_e over all tokens
    (psum over dp), aux = E * sum_e f_e P_e psum'd over ep, plus a router
    z-loss; jax.grad + optax.sgd (check_vma=True). Bugs: the winner's index
    without the expert offset, f and P from the local tokens (aux pmean'd
    over dp afterwards).
 8. cross-entropy against an explicitly built smoothed target distribution
    q = (1 - eps) onehot + eps / V with the vocabulary over tp8 and a z-loss
    on the distributed log-sum-exp, the weights updated by optax.lion
    (check_vma=True). Bugs: eps spread over the local vocabulary size, the
    z-loss on the local log-sum-exp (loss then pmean'd over tp to pass
    check_vma).
 9. a hand-written backward for vocab-parallel cross-entropy (Megatron's
    custom-autograd style, no jax.grad through the collectives): dlogits =
    softmax - onehot over the tp shard, scaled by 1 / global token count,
    head gradient h^T dlogits psum'd over dp; a masked token mean (ignore
    index -100) with counts psum'd over dp (dp2 x tp4, check_vma=False).
    Bugs: the softmax normalised by the local sum of exponentials, the
    head gradient not psum'd over dp, the onehot at the unshifted label.
10. the simple way: the vocab-sharded logits all_gather'd (tiled, last dim)
    and log_softmax + take_along_axis on the full vocabulary, token
    log-probs and masked sequence sums, batch over dp (dp2 x tp4). Bugs:
    log_softmax on the shard before the gather, an untiled gather at the
    last axis reshaped back (vocabulary interleaved across ranks).
11. vocab-parallel CE whose two sums over tp are psum_scatter over the
    token rows then all_gather (tp4). Bugs: the scattered part divided by
    tp, the offset of the previous rank.
GSPMD pairs (jax.jit with in/out shardings): 12. label-smoothed
cross-entropy with z-loss and an optax.adamw step, head over tp, batch over
dp; 13. reverse-KL (student || teacher) distillation at temperature 2 with
both logit sets sharded over the vocabulary, its gradient; 14. a focal loss
over 64 classes sharded over tp8; 15. top-2 MoE load-balancing loss plus
router z-loss with the router over ep and tokens over dp, jax.grad and
optax.sgd; 16. a masked token mean with bf16 logits upcast to f32, batch
over dp8, the gradient of the embedding; 17. forward KL by
optax.losses.kl_divergence_with_log_targets with teacher and student over
the vocabulary and one optax.adafactor step of the head.
Exported with scalify_jax.export_pair; every pair is also run by JAX on
seeded inputs and its manifest entry records the largest difference from
the single-device run ("numerics").
Run from the repository root: bash samples/gen/run_fresh44.sh [SUBSTR...]
(only the pairs whose name contains a SUBSTR; the others keep their entries).
"""
import sys
import numpy as np
import jax, jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec as P
import optax
sys.path.insert(0, "samples/gen")  # run from the repository root (run_fresh44.sh)
from fresh_lib import Corpus, seeded, state_specs  # noqa: E402

SCRIPT = "samples/gen/fresh44.py"
C = Corpus("samples/fresh44", SCRIPT, "samples/gen/run_fresh44.sh", sys.argv[1:])
rng, R, I = seeded(4444)
psum, pmax, pmin, pmean, idx = lax.psum, lax.pmax, lax.pmin, lax.pmean, lax.axis_index

# ---------------------------------------------------------------------------
# 1. vocab-parallel CE: global lse combined from the per-rank lses,
#    target logit by an iota comparison; sgd with momentum on the head.
V1, D1 = 32, 16
OPT1 = optax.sgd(0.1, momentum=0.9)


def ce1(p, s, h, y):
    def loss(p):
        lg = jnp.einsum("btd,dv->btv", h, p["w"])
        return jnp.mean(jax.nn.logsumexp(lg, -1) - jnp.take_along_axis(lg, y[..., None], -1)[..., 0])
    l, g = jax.value_and_grad(loss)(p)
    u, s = OPT1.update(g, s, p)
    return optax.apply_updates(p, u), s, l


def ce1_sm(bug):
    def f(p, s, h, y):
        def loss(p):
            w = p["w"]
            vl = w.shape[1]
            lg = jnp.einsum("btd,dv->btv", h, w)
            ll = jax.nn.logsumexp(lg, -1)  # this rank's log-sum-exp, combined like flash-attention partials
            mm = pmax(lax.stop_gradient(ll), "tp")
            lse = mm + jnp.log(psum(jnp.exp(ll - mm), "tp"))
            r = idx("tp") + 1 if bug == "offset-next-rank" else idx("tp")
            cols = r * vl + lax.broadcasted_iota(jnp.int32, lg.shape, 2)
            tgt = psum(jnp.sum(jnp.where(cols == y[..., None], lg, 0.0), -1), "tp")
            l = jnp.mean(lse - tgt)
            return psum(l, "dp") if bug == "psum-over-dp" else pmean(l, "dp")
        l, g = jax.value_and_grad(loss)(p)
        u, s = OPT1.update(g, s, p)
        return optax.apply_updates(p, u), s, l
    return f


P1 = {"w": R(D1, V1, scale=0.5)}
S1 = OPT1.init(P1)
SP1 = {"w": P(None, "tp")}
SS1 = state_specs(S1, SP1)
# one optimizer step from a nonzero momentum (a later step of the run)
S1 = jax.tree.map(lambda x: R(*x.shape, scale=0.1) if np.ndim(x) else x, S1)
C.smap("s.vocab_ce_combined_rank_lse_iota_target_sgdm.dp2xtp4", {"dp": 2, "tp": 4}, ce1_sm,
       (SP1, SS1, P("dp"), P("dp")), (SP1, SS1, P()), ce1, (P1, S1, R(4, 6, D1), I(0, V1, 4, 6)),
       bugs=[("offset-next-rank", ["wrong-offset"]), ("psum-over-dp", ["wrong-scale"])], check_vma=True)

# ---------------------------------------------------------------------------
# 2. token log-probs for a sequence loss: time over sp, vocab over tp, the
#    log_softmax written by hand with lax ops; length-normalised per-sequence
#    log-likelihood from masked sums and counts psum'd over sp.
B2, T2, V2 = 4, 8, 32


def seq_logp(lg, y, mask):
    lp = jax.nn.log_softmax(lg, -1)
    tok = jnp.take_along_axis(lp, y[..., None], -1)[..., 0] * mask
    return tok, tok.sum(1) / jnp.maximum(mask.sum(1), 1.0)


def seq_logp_sm(bug):
    def f(lg, y, mask):
        vl = lg.shape[-1]
        m = lax.reduce_max(lax.stop_gradient(lg), (2,))
        if bug != "max-not-pmaxed":
            m = pmax(m, "tp")
        z = lg - m[..., None]
        lse = lax.log(psum(lax.reduce_sum(lax.exp(z), (2,)), "tp"))
        off = idx("sp" if bug == "offset-from-sp-rank" else "tp") * vl
        loc = y - off
        hit = (loc >= 0) & (loc < vl)
        zt = jnp.take_along_axis(z, jnp.clip(loc, 0, vl - 1)[..., None], -1)[..., 0]
        tok = (psum(jnp.where(hit, zt, 0.0), "tp") - lse) * mask
        n = mask.sum(1) if bug == "length-from-local-block" else psum(mask.sum(1), "sp")
        return tok, psum(tok.sum(1), "sp") / jnp.maximum(n, 1.0)
    return f


MASK2 = (np.arange(T2)[None] < np.array([8, 5, 3, 7])[:, None]).astype(np.float32)
C.smap("s.token_logprobs_seq_norm_time_sp_vocab_tp.sp2xtp4", {"sp": 2, "tp": 4}, seq_logp_sm,
       (P(None, "sp", "tp"), P(None, "sp"), P(None, "sp")), (P(None, "sp"), P()), seq_logp,
       (R(B2, T2, V2, scale=2.0), I(0, V2, B2, T2), MASK2),
       bugs=[("max-not-pmaxed", ["missing-all-reduce"]), ("length-from-local-block", ["missing-all-reduce"]),
             ("offset-from-sp-rank", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 3. distillation: teacher and student logits sharded over the vocabulary,
#    forward KL at temperature TT times TT^2 plus hard-label CE; adam step.
V3, D3, TT, ALPHA = 32, 16, 2.0, 0.7
OPT3 = optax.adam(1e-2)


def distill(p, s, h, tlg, y):
    def loss(p):
        slg = jnp.einsum("btd,dv->btv", h, p["ws"])
        lps = jax.nn.log_softmax(slg / TT, -1)
        lpt = jax.nn.log_softmax(tlg / TT, -1)
        kl = jnp.sum(jnp.exp(lpt) * (lpt - lps), -1)
        ce = -jnp.take_along_axis(jax.nn.log_softmax(slg, -1), y[..., None], -1)[..., 0]
        return jnp.mean(ALPHA * TT * TT * kl + (1 - ALPHA) * ce)
    l, g = jax.value_and_grad(loss)(p)
    u, s = OPT3.update(g, s, p)
    return optax.apply_updates(p, u), s, l


def dist_logsoftmax(x, local=False):
    m = lax.stop_gradient(x.max(-1, keepdims=True))
    if local:
        return x - m - jnp.log(jnp.exp(x - m).sum(-1, keepdims=True))
    m = pmax(m, "tp")
    return x - m - jnp.log(psum(jnp.exp(x - m).sum(-1, keepdims=True), "tp"))


def distill_sm(bug):
    def f(p, s, h, tlg, y):
        def loss(p):
            slg = jnp.einsum("btd,dv->btv", h, p["ws"])
            vl = slg.shape[-1]
            lps = dist_logsoftmax(slg / TT)
            lpt = dist_logsoftmax(tlg / TT, local=bug == "teacher-local-softmax")
            if bug == "kl-direction-swapped":
                kl = psum(jnp.sum(jnp.exp(lps) * (lps - lpt), -1), "tp")
            else:
                kl = psum(jnp.sum(jnp.exp(lpt) * (lpt - lps), -1), "tp")
            lp1 = dist_logsoftmax(slg)
            oh = jax.nn.one_hot(y - idx("tp") * vl, vl, dtype=slg.dtype)  # out-of-range rows are all zero
            ce = -psum(jnp.sum(oh * lp1, -1), "tp")
            return pmean(jnp.mean(ALPHA * TT * TT * kl + (1 - ALPHA) * ce), "dp")
        l, g = jax.value_and_grad(loss)(p)
        u, s = OPT3.update(g, s, p)
        return optax.apply_updates(p, u), s, l
    return f


P3 = {"ws": R(D3, V3, scale=0.5)}
S3 = OPT3.init(P3)
SP3 = {"ws": P(None, "tp")}
SS3 = state_specs(S3, SP3)
C.smap("s.distill_fwd_kl_temp_vocab_sharded_adam.dp2xtp4", {"dp": 2, "tp": 4}, distill_sm,
       (SP3, SS3, P("dp"), P("dp", None, "tp"), P("dp")), (SP3, SS3, P()), distill,
       (P3, S3, R(4, 5, D3), R(4, 5, V3, scale=2.0), I(0, V3, 4, 5)),
       bugs=[("kl-direction-swapped", ["wrong-operand"]), ("teacher-local-softmax", ["missing-all-reduce"])],
       check_vma=True)

# ---------------------------------------------------------------------------
# 4. multi-class focal loss, classes over tp with a class-weight vector
#    sharded the same way; sgd.
C4, D4, GAMMA = 32, 12, 2.0
OPT4 = optax.sgd(0.05)


def focal(p, x, y, alpha):
    def loss(p):
        lg = x @ p["w"] + p["b"]
        lp = jnp.take_along_axis(jax.nn.log_softmax(lg, -1), y[:, None], -1)[:, 0]
        return jnp.mean(-alpha[y] * (1 - jnp.exp(lp)) ** GAMMA * lp)
    l, g = jax.value_and_grad(loss)(p)
    u, _ = OPT4.update(g, OPT4.init(p), p)
    return optax.apply_updates(p, u), l


def focal_sm(bug):
    def f(p, x, y, alpha):
        def loss(p):
            lg = x @ p["w"] + p["b"]
            cl = lg.shape[-1]
            m = pmax(lax.stop_gradient(jnp.max(lg, -1)), "tp")
            lse = m + jnp.log(psum(jnp.sum(jnp.exp(lg - m[:, None]), -1), "tp"))
            loc = y - idx("tp") * cl
            hit = (loc >= 0) & (loc < cl)
            lc = jnp.clip(loc, 0, cl - 1)
            tgt = psum(jnp.where(hit, jnp.take_along_axis(lg, lc[:, None], -1)[:, 0], 0.0), "tp")
            ai = jnp.clip(y, 0, cl - 1) if bug == "alpha-no-offset" else lc
            a = psum(jnp.where(hit, alpha[ai], 0.0), "tp")
            lp = tgt - lse
            l = jnp.mean(-a * (1 - jnp.exp(lp)) ** GAMMA * lp)
            return psum(l, "dp") if bug == "loss-psum-over-dp" else pmean(l, "dp")
        l, g = jax.value_and_grad(loss)(p)
        u, _ = OPT4.update(g, OPT4.init(p), p)
        return optax.apply_updates(p, u), l
    return f


SP4 = {"w": P(None, "tp"), "b": P("tp")}
C.smap("s.focal_loss_classes_tp_alpha_sharded.dp2xtp4", {"dp": 2, "tp": 4}, focal_sm,
       (SP4, P("dp"), P("dp"), P("tp")), (SP4, P()), focal,
       ({"w": R(D4, C4, scale=0.6), "b": R(C4, scale=0.1)}, R(8, D4), I(0, C4, 8),
        (0.25 + np.abs(R(C4))).astype(np.float32)),
       bugs=[("alpha-no-offset", ["wrong-offset"]), ("loss-psum-over-dp", ["wrong-scale"])], check_vma=True)

# ---------------------------------------------------------------------------
# 5. masked token mean with the global token count over dp4; grads of the
#    local sum / global count, psum'd by hand; adamw.
V5, D5, T5 = 16, 8, 6
OPT5 = optax.adamw(1e-2, weight_decay=0.1)


def tok_loss_sum(p, x, y, m):
    lg = p["emb"][x] @ p["out"]
    nll = optax.softmax_cross_entropy_with_integer_labels(lg, y)
    return jnp.sum(nll * m)


def masked_mean(p, s, x, y, m):
    l, g = jax.value_and_grad(lambda p: tok_loss_sum(p, x, y, m) / jnp.sum(m))(p)
    u, s = OPT5.update(g, s, p)
    return optax.apply_updates(p, u), s, l


def masked_mean_sm(bug):
    def f(p, s, x, y, m):
        if bug == "pmean-of-local-means":
            l, g = jax.value_and_grad(lambda p: tok_loss_sum(p, x, y, m) / jnp.sum(m))(p)
            l, g = pmean(l, "dp"), jax.tree.map(lambda a: pmean(a, "dp"), g)
        else:
            cnt = jnp.sum(m) if bug == "local-count" else psum(jnp.sum(m), "dp")
            l, g = jax.value_and_grad(lambda p: tok_loss_sum(p, x, y, m) / cnt)(p)
            red = pmean if bug == "grads-pmean-not-psum" else psum
            l, g = psum(l, "dp"), jax.tree.map(lambda a: red(a, "dp"), g)
        u, s = OPT5.update(g, s, p)
        return optax.apply_updates(p, u), s, l
    return f


P5 = {"emb": R(V5, D5), "out": R(D5, V5, scale=0.4)}
S5 = OPT5.init(P5)
SS5 = jax.tree.map(lambda _: P(), S5)
LEN5 = np.array([6, 6, 5, 6, 1, 2, 0, 1, 3, 4, 3, 2, 6, 5, 6, 6])
M5 = (np.arange(T5)[None] < LEN5[:, None]).astype(np.float32)
C.smap("s.masked_token_mean_global_count_adamw.dp4", {"dp": 4}, masked_mean_sm,
       ({"emb": P(), "out": P()}, SS5, P("dp"), P("dp"), P("dp")), ({"emb": P(), "out": P()}, SS5, P()), masked_mean,
       (P5, S5, I(0, V5, 16, T5), I(0, V5, 16, T5), M5),
       bugs=[("local-count", ["missing-all-reduce"]), ("pmean-of-local-means", ["wrong-reduction"]),
             ("grads-pmean-not-psum", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 6. multi-task objective on dp4: shared trunk, token classification (CE),
#    regression (MSE) and an L2 term on the trunk; grads pmean'd by hand.
D6, K6 = 8, 6
WA, WB, WC = 1.0, 0.5, 1e-2
OPT6 = optax.adamw(5e-3)


def mt_terms(p, x, y, r):
    h = jnp.tanh(x @ p["trunk"])
    ce = jnp.mean(optax.softmax_cross_entropy_with_integer_labels(h @ p["cls"], y))
    mse = jnp.mean(jnp.square(h @ p["reg"] - r))
    return ce, mse


def multitask(p, s, x, y, r):
    def loss(p):
        ce, mse = mt_terms(p, x, y, r)
        l2 = jnp.sum(jnp.square(p["trunk"]))
        return WA * ce + WB * mse + WC * l2, (ce, mse)
    (l, (ce, mse)), g = jax.value_and_grad(loss, has_aux=True)(p)
    u, s = OPT6.update(g, s, p)
    return optax.apply_updates(p, u), s, jnp.stack([l, ce, mse])


def multitask_sm(bug):
    def f(p, s, x, y, r):
        def data_loss(p):
            ce, mse = mt_terms(p, x, y, r)
            return WA * ce + WB * mse, (ce, mse)
        (_, (ce, mse)), g = jax.value_and_grad(data_loss, has_aux=True)(p)
        red = psum if bug == "grads-psum" else pmean
        g = jax.tree.map(lambda a: red(a, "dp"), g)
        l2g = 2 * WC * p["trunk"]
        g["trunk"] = g["trunk"] + (l2g / 4 if bug == "l2-grad-divided-by-dp" else l2g)
        ce = pmean(ce, "dp")
        mse = mse if bug == "mse-not-pmeaned" else pmean(mse, "dp")
        l = WA * ce + WB * mse + WC * jnp.sum(jnp.square(p["trunk"]))
        u, s = OPT6.update(g, s, p)
        return optax.apply_updates(p, u), s, jnp.stack([l, ce, mse])
    return f


P6 = {"trunk": R(D6, D6, scale=0.5), "cls": R(D6, K6, scale=0.5), "reg": R(D6, scale=0.5)}
S6 = OPT6.init(P6)
SS6 = jax.tree.map(lambda _: P(), S6)
SP6 = jax.tree.map(lambda _: P(), P6)
C.smap("s.multitask_ce_mse_l2_weighted_adamw.dp4", {"dp": 4}, multitask_sm,
       (SP6, SS6, P("dp"), P("dp"), P("dp")), (SP6, SS6, P()), multitask,
       (P6, S6, R(16, D6), I(0, K6, 16), R(16)),
       bugs=[("mse-not-pmeaned", ["missing-all-reduce"]), ("grads-psum", ["wrong-scale"]),
             ("l2-grad-divided-by-dp", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 7. Switch load-balancing loss, router columns over ep, tokens over dp.
E7, D7, N7 = 8, 8, 16
LB, ZW = 1e-2, 1e-3
OPT7 = optax.sgd(0.5)


def lb_loss(p, x):
    def loss(p):
        lg = x @ p["router"]
        pr = jax.nn.softmax(lg, -1)
        f = jnp.mean(jax.nn.one_hot(jnp.argmax(lg, -1), E7), 0)
        aux = E7 * jnp.sum(f * jnp.mean(pr, 0))
        z = jnp.mean(jnp.square(jax.nn.logsumexp(lg, -1)))
        return LB * aux + ZW * z
    l, g = jax.value_and_grad(loss)(p)
    u, _ = OPT7.update(g, OPT7.init(p), p)
    return optax.apply_updates(p, u), l


def lb_sm(bug):
    def f(p, x):
        def loss(p):
            lg = x @ p["router"]
            el = lg.shape[-1]
            m = pmax(lax.stop_gradient(lg.max(-1)), "ep")
            ex = jnp.exp(lg - m[:, None])
            den = psum(ex.sum(-1), "ep")
            pr = ex / den[:, None]
            lmax = lax.stop_gradient(lg.max(-1))
            win = jnp.argmax(lg, -1) + (0 if bug == "winner-without-offset" else idx("ep") * el)
            win = pmin(jnp.where(lmax >= m, win, E7), "ep")
            mine = idx("ep") * el + jnp.arange(el)
            hits = (win[:, None] == mine).astype(jnp.float32)
            if bug == "fractions-from-local-tokens":
                f = jnp.mean(hits, 0)
                pm = jnp.mean(pr, 0)
            else:
                ntok = psum(x.shape[0], "dp")
                f = psum(hits.sum(0), "dp") / ntok
                pm = psum(pr.sum(0), "dp") / ntok
            aux = E7 * psum(jnp.sum(f * pm), "ep")
            if bug == "fractions-from-local-tokens":
                aux = pmean(aux, "dp")
            z = pmean(jnp.mean(jnp.square(jnp.log(den) + m)), "dp")
            return LB * aux + ZW * z
        l, g = jax.value_and_grad(loss)(p)
        u, _ = OPT7.update(g, OPT7.init(p), p)
        return optax.apply_updates(p, u), l
    return f


C.smap("s.switch_load_balance_router_ep_zloss.dp2xep4", {"dp": 2, "ep": 4}, lb_sm,
       ({"router": P(None, "ep")}, P("dp")), ({"router": P(None, "ep")}, P()), lb_loss,
       ({"router": R(D7, E7, scale=1.0)}, R(N7, D7)),
       bugs=[("winner-without-offset", ["wrong-offset"]), ("fractions-from-local-tokens", ["wrong-reduction"])],
       check_vma=True)

# ---------------------------------------------------------------------------
# 8. CE against an explicit smoothed target distribution with a z-loss,
#    vocab over tp8, optax.lion.
V8, D8, EPS8, Z8 = 64, 8, 0.1, 1e-3
OPT8 = optax.lion(1e-3)


def smooth_ce(p, s, h, y):
    def loss(p):
        lg = h @ p["w"]
        lse = jax.nn.logsumexp(lg, -1, keepdims=True)
        q = (1 - EPS8) * jax.nn.one_hot(y, V8) + EPS8 / V8
        return jnp.mean(-jnp.sum(q * (lg - lse), -1) + Z8 * jnp.square(lse[..., 0]))
    l, g = jax.value_and_grad(loss)(p)
    u, s = OPT8.update(g, s, p)
    return optax.apply_updates(p, u), s, l


def smooth_ce_sm(bug):
    def f(p, s, h, y):
        def loss(p):
            lg = h @ p["w"]
            vl = lg.shape[-1]
            m = pmax(lax.stop_gradient(lg.max(-1, keepdims=True)), "tp")
            lse = m + jnp.log(psum(jnp.exp(lg - m).sum(-1, keepdims=True), "tp"))
            col = idx("tp") * vl + jnp.arange(vl)
            base = EPS8 / (vl if bug == "eps-over-local-vocab" else V8)
            q = jnp.where(col == y[..., None], 1 - EPS8, 0.0) + base
            ce = psum(-jnp.sum(q * (lg - lse), -1), "tp")
            if bug == "zloss-local-lse":
                zl = jax.nn.logsumexp(lg, -1)
                return pmean(jnp.mean(ce + Z8 * jnp.square(zl)), "tp")
            return jnp.mean(ce + Z8 * jnp.square(lse[..., 0]))
        l, g = jax.value_and_grad(loss)(p)
        u, s = OPT8.update(g, s, p)
        return optax.apply_updates(p, u), s, l
    return f


P8 = {"w": R(D8, V8, scale=0.7)}
S8 = OPT8.init(P8)
SP8 = {"w": P(None, "tp")}
SS8 = state_specs(S8, SP8)
C.smap("s.smoothed_target_dist_ce_zloss_lion.tp8", {"tp": 8}, smooth_ce_sm,
       (SP8, SS8, P(), P()), (SP8, SS8, P()), smooth_ce, (P8, S8, R(6, D8), I(0, V8, 6)),
       bugs=[("eps-over-local-vocab", ["wrong-scale"]), ("zloss-local-lse", ["missing-all-reduce"])], check_vma=True)

# ---------------------------------------------------------------------------
# 9. hand-written backward of vocab-parallel CE (Megatron custom-autograd
#    style), ignore index -100, counts psum'd over dp; sgd on the head.
V9, D9, LR9 = 32, 8, 0.5


def ce_manual(w, h, y):
    valid = y != -100
    def loss(w):
        lg = h @ w
        nll = optax.softmax_cross_entropy_with_integer_labels(lg, jnp.where(valid, y, 0))
        return jnp.sum(nll * valid) / jnp.sum(valid)
    l, g = jax.value_and_grad(loss)(w)
    return w - LR9 * g, l


def ce_manual_sm(bug):
    def f(w, h, y):
        vl = w.shape[1]
        lg = h @ w  # (n, vl)
        valid = (y != -100).astype(jnp.float32)
        cnt = psum(valid.sum(), "dp")
        m = pmax(lg.max(-1, keepdims=True), "tp")
        ex = jnp.exp(lg - m)
        se = ex.sum(-1, keepdims=True)
        if bug != "softmax-local-sum":
            se = psum(se, "tp")
        sm = ex / se
        lab = y if bug == "onehot-unshifted-label" else y - idx("tp") * vl
        oh = jax.nn.one_hot(lab, vl)  # -100 and out-of-shard labels give zero rows
        tgt = psum(jnp.sum(oh * lg, -1), "tp")
        nll = m[:, 0] + jnp.log(psum(jnp.exp(lg - m).sum(-1), "tp")) - tgt
        l = psum(jnp.sum(nll * valid), "dp") / cnt
        dlg = (sm - oh) * (valid / cnt)[:, None]
        gw = h.T @ dlg
        if bug != "head-grad-not-psummed":
            gw = psum(gw, "dp")
        return w - LR9 * gw, l
    return f


Y9 = I(0, V9, 12)
Y9[[1, 4, 5, 9]] = -100
C.smap("s.vocab_ce_manual_backward_ignore_index.dp2xtp4", {"dp": 2, "tp": 4}, ce_manual_sm,
       (P(None, "tp"), P("dp"), P("dp")), (P(None, "tp"), P()), ce_manual, (R(D9, V9, scale=0.5), R(12, D9), Y9),
       bugs=[("softmax-local-sum", ["missing-all-reduce"]), ("head-grad-not-psummed", ["missing-all-reduce"]),
             ("onehot-unshifted-label", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 10. the simple way: all_gather the vocab-sharded logits (tiled, last dim),
#     then log_softmax and take_along_axis on the full vocabulary; token
#     log-probs and a masked sequence sum, batch over dp, vocab over tp.
V10 = 32


def gathered_logp(lg, y, mask):
    lp = jnp.take_along_axis(jax.nn.log_softmax(lg), y[..., None], -1)[..., 0]
    return lp, jnp.sum(lp * mask, -1)


def gathered_logp_sm(bug):
    def f(lg, y, mask):
        if bug == "log-softmax-before-gather":
            full = lax.all_gather(jax.nn.log_softmax(lg), "tp", axis=2, tiled=True)
        elif bug == "untiled-gather-interleaved":
            full = jax.nn.log_softmax(lax.all_gather(lg, "tp", axis=3).reshape(lg.shape[:2] + (V10,)))
        else:
            full = jax.nn.log_softmax(lax.all_gather(lg, "tp", axis=2, tiled=True))
        lp = jnp.take_along_axis(full, y[..., None], -1)[..., 0]
        return lp, jnp.sum(lp * mask, -1)
    return f


C.smap("s.gathered_vocab_log_softmax_take_along.dp2xtp4", {"dp": 2, "tp": 4}, gathered_logp_sm,
       (P("dp", None, "tp"), P("dp"), P("dp")), (P("dp"), P("dp")), gathered_logp,
       (R(4, 5, V10, scale=2.0), I(0, V10, 4, 5), (R(4, 5) > -0.5).astype(np.float32)),
       bugs=[("log-softmax-before-gather", ["missing-all-reduce"]), ("untiled-gather-interleaved", ["wrong-reshape-order"])])

# ---------------------------------------------------------------------------
# 11. vocab-parallel CE whose sums over tp are written as a reduce-scatter
#     over the token rows followed by an all_gather (the bandwidth-optimal
#     all-reduce); per-token losses and their mean, tokens replicated.
V11, N11 = 32, 8


def ce_rows(lg, y):
    l = jax.nn.logsumexp(lg, -1) - jnp.take_along_axis(lg, y[:, None], -1)[:, 0]
    return l, jnp.mean(l)


def ce_rs_ag_sm(bug):
    def allreduce(x):
        part = lax.psum_scatter(x, "tp", scatter_dimension=0, tiled=True)
        if bug == "scatter-mean":
            part = part / 4
        return lax.all_gather(part, "tp", axis=0, tiled=True)

    def f(lg, y):
        vl = lg.shape[-1]
        m = pmax(lg.max(-1), "tp")
        se = allreduce(jnp.exp(lg - m[:, None]).sum(-1))
        lo = (idx("tp") * vl) if bug != "offset-rank-minus-one" else (idx("tp") - 1) * vl
        hit = (y >= lo) & (y < lo + vl)
        t = jnp.where(hit, jnp.take_along_axis(lg, jnp.clip(y - lo, 0, vl - 1)[:, None], -1)[:, 0], 0.0)
        l = m + jnp.log(se) - allreduce(t)
        return l, jnp.mean(l)
    return f


C.smap("s.vocab_ce_reduce_scatter_allgather_sums.tp4", {"tp": 4}, ce_rs_ag_sm, (P(None, "tp"), P()), (P(), P()),
       ce_rows, (R(N11, V11, scale=2.0), I(0, V11, N11)),
       bugs=[("scatter-mean", ["wrong-scale"]), ("offset-rank-minus-one", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# GSPMD pairs.
# 12. label-smoothed CE + z-loss, adamw step, head over tp, batch over dp.
OPT10 = optax.adamw(1e-3, weight_decay=0.05)


def ce10(p, s, h, y):
    def loss(p):
        lg = jnp.einsum("btd,dv->btv", h, p["w"])
        ce = optax.softmax_cross_entropy(lg, optax.smooth_labels(jax.nn.one_hot(y, V1), 0.1))
        return jnp.mean(ce + 1e-4 * jnp.square(jax.nn.logsumexp(lg, -1)))
    l, g = jax.value_and_grad(loss)(p)
    u, s = OPT10.update(g, s, p)
    return optax.apply_updates(p, u), s, l


P10 = {"w": R(D1, V1, scale=0.5)}
S10 = OPT10.init(P10)
SS10 = state_specs(S10, SP1)
C.gspmd("g.label_smooth_zloss_adamw.dp2xtp4", {"dp": 2, "tp": 4}, (SP1, SS10, P("dp"), P("dp")), (SP1, SS10, P()),
        ce10, (P10, S10, R(4, 6, D1), I(0, V1, 4, 6)))


# 13. reverse-KL distillation at temperature 2, both logit sets over the vocab.
def rkl(ws, h, tlg):
    def loss(ws):
        lps = jax.nn.log_softmax(jnp.einsum("btd,dv->btv", h, ws) / 2.0)
        lpt = jax.nn.log_softmax(tlg / 2.0)
        return 4.0 * jnp.mean(jnp.sum(jnp.exp(lps) * (lps - lpt), -1))
    return jax.value_and_grad(loss)(ws)


C.gspmd("g.reverse_kl_distill_vocab_sharded.dp2xtp4", {"dp": 2, "tp": 4}, (P(None, "tp"), P("dp"), P("dp", None, "tp")),
        (P(), P(None, "tp")), rkl, (R(D3, V3, scale=0.5), R(4, 5, D3), R(4, 5, V3, scale=2.0)))


# 14. focal loss over 64 classes sharded over tp8.
def focal12(w, x, y):
    def loss(w):
        lp = jax.nn.log_softmax(x @ w)
        lpy = jnp.take_along_axis(lp, y[:, None], 1)[:, 0]
        return -jnp.mean((1 - jnp.exp(lpy)) ** 2 * lpy)
    return jax.value_and_grad(loss)(w)


C.gspmd("g.focal_loss_64_classes.tp8", {"tp": 8}, (P(None, "tp"), P(), P()), (P(), P(None, "tp")), focal12,
        (R(D4, 64, scale=0.5), R(8, D4), I(0, 64, 8)))

# 15. top-2 MoE load-balancing loss + router z-loss, router over ep, tokens over dp.
OPT13 = optax.sgd(0.3)


def lb_top2(p, x):
    def loss(p):
        lg = x @ p["router"]
        pr = jax.nn.softmax(lg, -1)
        _, top = lax.top_k(lg, 2)
        f = jnp.sum(jax.nn.one_hot(top, E7), 1).mean(0) / 2
        aux = E7 * jnp.sum(f * pr.mean(0))
        return 1e-2 * aux + 1e-3 * jnp.mean(jnp.square(jax.nn.logsumexp(lg, -1)))
    l, g = jax.value_and_grad(loss)(p)
    u, _ = OPT13.update(g, OPT13.init(p), p)
    return optax.apply_updates(p, u), l


C.gspmd("g.moe_top2_load_balance_zloss_sgd.dp2xep4", {"dp": 2, "ep": 4}, ({"router": P(None, "ep")}, P("dp")),
        ({"router": P(None, "ep")}, P()), lb_top2, ({"router": R(D7, E7)}, R(N7, D7)))


# 16. masked token mean with bf16 logits upcast, batch over dp8, grad of the embedding.
def bf16_masked(emb, out, x, y, m):
    def loss(emb):
        lg = (emb[x].astype(jnp.bfloat16) @ out.astype(jnp.bfloat16)).astype(jnp.float32)
        nll = optax.softmax_cross_entropy_with_integer_labels(lg, y)
        return jnp.sum(nll * m) / jnp.maximum(jnp.sum(m), 1.0)
    return jax.value_and_grad(loss)(emb)


LEN14 = np.array([6, 1, 0, 3, 6, 2, 5, 4])
C.gspmd("g.bf16_logits_masked_token_mean.dp8", {"dp": 8}, (P(), P(), P("dp"), P("dp"), P("dp")), (P(), P()),
        bf16_masked, (R(V5, D5), R(D5, V5, scale=0.4), I(0, V5, 8, T5), I(0, V5, 8, T5),
                      (np.arange(T5)[None] < LEN14[:, None]).astype(np.float32)))

# 17. forward-KL distillation written with optax.losses.kl_divergence_with_log_targets,
#     teacher and student over the vocab, one optax.adafactor step of the head.
OPT15 = optax.adafactor(1e-2)


def kl15(p, s, h, tlg):
    def loss(p):
        lps = jax.nn.log_softmax(jnp.einsum("btd,dv->btv", h, p["w"]))
        return jnp.mean(optax.losses.kl_divergence_with_log_targets(lps, jax.nn.log_softmax(tlg)))
    l, g = jax.value_and_grad(loss)(p)
    u, s = OPT15.update(g, s, p)
    return optax.apply_updates(p, u), s, l


P15 = {"w": R(D3, V3, scale=0.5)}
S15 = OPT15.init(P15)
SS15 = jax.tree.map(lambda _: P(), S15)
C.gspmd("g.optax_kl_log_targets_adafactor.dp2xtp4", {"dp": 2, "tp": 4}, ({"w": P(None, "tp")}, SS15, P("dp"),
        P("dp", None, "tp")), ({"w": P(None, "tp")}, SS15, P()), kl15,
        (P15, S15, R(4, 5, D3), R(4, 5, V3, scale=2.0)))

C.finish()
