"""samples/fresh8: an eighth batch of programs as a user writes them, on the
theme of evaluation, metrics and data-dependent control flow, none of them an
idiom of samples/fresh .. fresh7, probe, train or wild: top-1 / top-5
accuracy, a confusion matrix and balanced accuracy over a weighted eval batch,
perplexity and token accuracy with a padding mask over a vocabulary-sharded
LM head (global argmax by pmax / pmin), expected calibration error with
one_hot histogram bins, gradient descent with a backtracking (Armijo) line
search and an early exit, both lax.while_loop predicates from psum'd losses,
Megatron's f / g operators as custom_vjp in a lax.scan over stacked layers
under jax.checkpoint, a straight-through int8 fake-quantiser and a clipped-
gradient identity (custom_vjp) in a data-parallel step with a lax.cond skip,
AUC by ranks from an argsort of all-gathered scores with NDCG@k per query,
average precision from a cumsum over a list sharded along its length, a
replay buffer written and read at data-dependent positions
(dynamic_update_slice / dynamic_slice on padded row blocks), per-document
losses of a packed batch (document ids by a cumsum of BOS flags across
sequence shards, segment_sum), ring attention with a packed-sequence segment
mask, a bf16 block whose row-parallel partial sums are psum'd in f32; under
GSPMD a classifier eval with argsort top-5 and macro-F1, an early-exit
gradient descent (while_loop with a lax.cond accept / reject), an MLP with
with_sharding_constraint P(None, 'tp') then P('tp', None) mid-layer, a reshape
merging the sharded batch with time and a three-operand einsum, a SwiGLU
stack in a scan with remat and SGD, packed-sequence attention with heads
sharded, a ROC / PR curve by sorting a sharded batch, temperature scaling by
a grid search and ECE by bincount.
Each shard_map family has the bug variants a careless parallelisation makes.
Exported with scalify_jax.export_pair; every pair is also run by JAX on seeded
inputs and its manifest entry records the largest difference from the
single-device run ("numerics").
Run from the repository root: bash samples/gen/run_fresh8.sh [SUBSTR...]
(only the pairs whose name contains a SUBSTR; the others keep their entries).
"""
import sys
import numpy as np
import jax, jax.numpy as jnp
from jax import lax
from jax.sharding import NamedSharding, PartitionSpec as P
sys.path.insert(0, "samples/gen")  # run from the repository root (run_fresh8.sh)
from fresh_lib import Corpus, seeded  # noqa: E402
from scalify_jax._export import make_mesh  # noqa: E402

C = Corpus("samples/fresh8", "samples/gen/fresh8.py", "samples/gen/run_fresh8.sh", sys.argv[1:])
rng, R, I = seeded(8181)
psum, pmax, pmin, pmean, idx = lax.psum, lax.pmax, lax.pmin, lax.pmean, lax.axis_index
DT_MESH = make_mesh({"dp": 2, "tp": 4})


def wsc(m, x, *spec):
    return lax.with_sharding_constraint(x, NamedSharding(m, P(*spec)))


def bce(logit, y):
    return jnp.maximum(logit, 0.0) - logit * y + jnp.log1p(jnp.exp(-jnp.abs(logit)))


def xent(logits, labels):
    """Per-row cross-entropy; a label outside the vocabulary picks nothing."""
    return jax.nn.logsumexp(logits, -1) - jnp.sum(logits * jax.nn.one_hot(labels, logits.shape[-1]), -1)

# ---------------------------------------------------------------------------
# 1. a classifier's eval over a batch sharded on dp with per-example weights
#    (a weighted eval set; the padding rows of the last batch weigh 0):
#    weighted top-1 and top-5 accuracy, the weighted confusion matrix
#    (scatter-add of the weights) and the balanced accuracy (mean per-class
#    recall) from it.
TK_B, TK_K = 32, 10


def topk_confusion(logits, labels, wt):
    pred = jnp.argmax(logits, -1)
    top5 = jnp.any(lax.top_k(logits, 5)[1] == labels[:, None], -1)
    n = jnp.sum(wt)
    conf = jnp.zeros((TK_K, TK_K)).at[labels, pred].add(wt)
    recall = jnp.diag(conf) / jnp.where(jnp.sum(conf, 1) != 0, jnp.sum(conf, 1), 1.0)
    top1 = jnp.sum(jnp.where(pred == labels, wt, 0.0)) / n
    return top1, jnp.sum(jnp.where(top5, wt, 0.0)) / n, conf, jnp.mean(recall)


def topk_dp(bug):
    def f(logits, labels, wt):
        pred = jnp.argmax(logits, -1)
        top5 = jnp.any(lax.top_k(logits, 5)[1] == labels[:, None], -1)
        hit1, hit5, n = jnp.sum(jnp.where(pred == labels, wt, 0.0)), jnp.sum(jnp.where(top5, wt, 0.0)), jnp.sum(wt)
        if bug == "acc-pmean-local":
            top1 = pmean(hit1 / n, "dp")
        else:
            top1 = psum(hit1, "dp") / psum(n, "dp")
        conf = jnp.zeros((TK_K, TK_K)).at[labels, pred].add(wt)
        if bug != "confusion-no-psum":
            conf = psum(conf, "dp")
        recall = jnp.diag(conf) / jnp.where(jnp.sum(conf, 1) != 0, jnp.sum(conf, 1), 1.0)
        return top1, psum(hit5, "dp") / psum(n, "dp"), conf, jnp.mean(recall)
    return f


tk_lab = I(0, TK_K, TK_B)
tk_wt = rng.uniform(0.5, 2.0, TK_B).astype(np.float32)
tk_wt[[3, 9, 10, 21, 26, 27, 28, 29, 30, 31]] = 0.0  # a padded last batch, shards unevenly full
C.smap("s.topk_confusion_weighted.dp4", {"dp": 4}, topk_dp, (P("dp"), P("dp"), P("dp")), (P(), P(), P(), P()),
       topk_confusion, (R(TK_B, TK_K) + 1.5 * np.eye(TK_K, dtype=np.float32)[tk_lab], tk_lab, tk_wt),
       bugs=[("acc-pmean-local", ["wrong-reduction"]), ("confusion-no-psum", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 2. an LM's eval over a padded batch: logits with the batch over dp and the
#    vocabulary over tp, token id 0 is padding. Corpus perplexity (exp of
#    the mean NLL over all real tokens), per-sequence perplexity and the token
#    accuracy, the argmax over the sharded vocabulary taken as the first
#    column holding the global max (pmax, then pmin of the column ids).
PP_B, PP_T, PP_V, PP_PAD = 8, 16, 32, 0


def lm_eval(logits, labels):
    valid = labels != PP_PAD
    nll = xent(logits, labels)
    hit = valid & (jnp.argmax(logits, -1) == labels)
    seq_n = jnp.sum(valid, -1)
    seq_nll = jnp.sum(jnp.where(valid, nll, 0.0), -1)
    n = jnp.sum(seq_n)
    return jnp.exp(jnp.sum(seq_nll) / n), jnp.exp(seq_nll / jnp.maximum(seq_n, 1)), jnp.sum(hit) / n


def lm_eval_dp_tp(bug):
    def f(logits, labels):
        vl = logits.shape[-1]
        off = idx("tp") * vl
        valid = labels != PP_PAD
        mx = pmax(jnp.max(logits, -1), "tp")
        lse = mx + jnp.log(psum(jnp.sum(jnp.exp(logits - mx[..., None]), -1), "tp"))
        nll = lse - psum(jnp.sum(logits * jax.nn.one_hot(labels - off, vl), -1), "tp")
        col = jnp.arange(vl) + (0 if bug == "argmax-no-offset" else off)
        first = pmin(jnp.min(jnp.where(logits == mx[..., None], col, PP_V), -1), "tp")
        hit = valid & (first == labels)
        seq_n = jnp.sum(valid, -1)
        seq_nll = jnp.sum(jnp.where(valid, nll, 0.0), -1)
        n = psum(jnp.sum(seq_n), "dp")
        if bug == "ppl-pmean-dp":
            ppl = pmean(jnp.exp(jnp.sum(seq_nll) / jnp.sum(seq_n)), "dp")
        else:
            ppl = jnp.exp(psum(jnp.sum(seq_nll), "dp") / n)
        return ppl, jnp.exp(seq_nll / jnp.maximum(seq_n, 1)), psum(jnp.sum(hit), "dp") / n
    return f


pp_lab = I(1, PP_V, PP_B, PP_T)
pp_lab[0, 5:] = PP_PAD
pp_lab[1, 2:] = PP_PAD
pp_lab[3, 11:] = PP_PAD
pp_lab[6, 14:] = PP_PAD
pp_logits = R(PP_B, PP_T, PP_V) + 2.5 * np.eye(PP_V, dtype=np.float32)[pp_lab]
C.smap("s.lm_perplexity_tokacc.dp2xtp4", {"dp": 2, "tp": 4}, lm_eval_dp_tp, (P("dp", None, "tp"), P("dp")),
       (P(), P("dp"), P()), lm_eval, (pp_logits, pp_lab),
       bugs=[("argmax-no-offset", ["wrong-shard-dim"]), ("ppl-pmean-dp", ["wrong-reduction"])])

# ---------------------------------------------------------------------------
# 3. expected calibration error over a batch sharded on dp: confidence (max
#    softmax probability) binned into EC_NB equal-width bins, per-bin counts,
#    confidence sums and hit sums (one_hot histograms, psum'd), the ECE and
#    the reliability diagram (per-bin accuracy and mean confidence).
EC_B, EC_K, EC_NB = 64, 5, 10


def ece(logits, labels):
    conf = jnp.max(jax.nn.softmax(logits, -1), -1)
    hit = (jnp.argmax(logits, -1) == labels).astype(jnp.float32)
    b = jnp.clip(jnp.floor(conf * EC_NB).astype(jnp.int32), 0, EC_NB - 1)
    oh = jax.nn.one_hot(b, EC_NB)
    cnt, s_conf, s_hit = jnp.sum(oh, 0), conf @ oh, hit @ oh
    err = jnp.sum(jnp.abs(s_hit - s_conf)) / logits.shape[0]
    return err, cnt.astype(jnp.int32), s_hit / jnp.maximum(cnt, 1.0), s_conf / jnp.maximum(cnt, 1.0)


def ece_dp(bug):
    def f(logits, labels):
        conf = jnp.max(jax.nn.softmax(logits, -1), -1)
        hit = (jnp.argmax(logits, -1) == labels).astype(jnp.float32)
        b = jnp.clip(jnp.floor(conf * EC_NB).astype(jnp.int32), 0, EC_NB - 1)
        oh = jax.nn.one_hot(b, EC_NB)
        cnt, s_conf, s_hit = jnp.sum(oh, 0), conf @ oh, hit @ oh
        if bug == "ece-pmean-local":
            err = pmean(jnp.sum(jnp.abs(s_hit - s_conf)) / logits.shape[0], "dp")
        cnt, s_hit = psum(cnt, "dp"), psum(s_hit, "dp")
        if bug != "conf-sum-no-psum":
            s_conf = psum(s_conf, "dp")
        if bug != "ece-pmean-local":
            err = jnp.sum(jnp.abs(s_hit - s_conf)) / EC_B
        return err, cnt.astype(jnp.int32), s_hit / jnp.maximum(cnt, 1.0), s_conf / jnp.maximum(cnt, 1.0)
    return f


ec_lab = I(0, EC_K, EC_B)
ec_logits = R(EC_B, EC_K, scale=1.5) + np.eye(EC_K, dtype=np.float32)[ec_lab] * rng.uniform(0, 3, (EC_B, 1)).astype(
    np.float32)
C.smap("s.ece_reliability_bins.dp4", {"dp": 4}, ece_dp, (P("dp"), P("dp")), (P(), P(), P(), P()), ece,
       (ec_logits, ec_lab),
       bugs=[("ece-pmean-local", ["wrong-reduction"]), ("conf-sum-no-psum", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 4. logistic regression by gradient descent with a backtracking (Armijo)
#    line search: an outer lax.while_loop that exits early once the global
#    loss is below AR_TOL, an inner one halving the step until the loss has
#    decreased enough; each step size is written into a log at the step's
#    index. The batch is sharded over dp, so every loss in either predicate
#    is a psum over the batch shards.
AR_N, AR_D, AR_C, AR_BETA, AR_MAXK, AR_STEPS, AR_TOL = 32, 8, 1e-4, 0.5, 12, 8, 0.45


def armijo_loop(f, grad, w, t0):
    def step(s):
        k, w, fw, ts = s
        g = grad(w)
        gg = jnp.sum(g * g)
        t, _ = lax.while_loop(lambda c: (c[1] < AR_MAXK) & (f(w - c[0] * g) > fw - AR_C * c[0] * gg),
                              lambda c: (c[0] * AR_BETA, c[1] + 1), (t0, 0))
        w = w - t * g
        return k + 1, w, f(w), lax.dynamic_update_slice(ts, t[None], (k,))
    return lax.while_loop(lambda s: (s[0] < AR_STEPS) & (s[2] > AR_TOL), step,
                          (0, w, f(w), jnp.zeros(AR_STEPS, jnp.float32)))


def armijo_gd(w, x, y, t0):
    def f(w):
        return jnp.sum(bce(x @ w, y)) / AR_N
    return armijo_loop(f, jax.grad(f), w, t0)


def armijo_dp(bug):
    def f(w, x, y, t0):
        def loss(w):
            s = jnp.sum(bce(x @ w, y))
            return (pmean(s, "dp") if bug == "loss-pmean-of-sums" else psum(s, "dp")) / AR_N

        def grad(w):
            g = jax.grad(lambda w: jnp.sum(bce(x @ w, y)))(w)
            return psum(g, "dp") / (x.shape[0] if bug == "grad-local-normaliser" else AR_N)
        return armijo_loop(loss, grad, w, t0)
    return f


ar_x = R(AR_N, AR_D)
ar_y = (ar_x @ R(AR_D) + R(AR_N, scale=3.0) > 0).astype(np.float32)  # noisy labels: no separating w
C.smap("s.armijo_linesearch_early_exit.dp4", {"dp": 4}, armijo_dp, (P(), P("dp"), P("dp"), P()), (P(), P(), P(), P()),
       armijo_gd, (np.zeros(AR_D, np.float32), ar_x, ar_y, np.float32(16.0)),
       bugs=[("loss-pmean-of-sums", ["wrong-reduction"]), ("grad-local-normaliser", ["constant-mismatch"])])

# ---------------------------------------------------------------------------
# 5. a stack of Megatron MLP blocks (pre-LayerNorm, residual) in a lax.scan
#    over stacked weights, each block under jax.checkpoint; the loss and the
#    gradients of the stacked weights. Per device: Megatron's f (identity
#    forward, psum over tp backward) and g (psum forward, identity backward)
#    written as custom_vjp, w1 column-parallel and w2 row-parallel in the
#    stack, the batch over dp (gradients psum'd over dp).
MG_L, MG_D, MG_H, MG_B = 3, 16, 32, 8


def ln(x):
    m = jnp.mean(x, -1, keepdims=True)
    return (x - m) * lax.rsqrt(jnp.mean(jnp.square(x - m), -1, keepdims=True) + 1e-5)


def mlp_stack_loss(w1, w2, x, y, f_op=lambda a: a, g_op=lambda a: a):
    @jax.checkpoint
    def block(h, w):
        a, b = w
        return h + g_op(jax.nn.gelu(f_op(ln(h)) @ a) @ b), None
    h, _ = lax.scan(block, x, (w1, w2))
    return jnp.sum(jnp.square(h - y)) / MG_B


def megatron_scan_step(w1, w2, x, y):
    return jax.value_and_grad(mlp_stack_loss, (0, 1))(w1, w2, x, y)


def megatron_fg(bug):
    @jax.custom_vjp
    def f_op(x):
        return x

    def f_bwd(_, g):
        return (g if bug == "f-bwd-no-psum" else psum(g, "tp"),)
    f_op.defvjp(lambda x: (x, None), f_bwd)

    @jax.custom_vjp
    def g_op(x):
        return psum(x, "tp")

    def g_bwd(_, g):
        return (psum(g, "tp") if bug == "g-bwd-psum" else g,)
    g_op.defvjp(lambda x: (psum(x, "tp"), None), g_bwd)

    def f(w1, w2, x, y):
        loss, (g1, g2) = jax.value_and_grad(lambda a, b: mlp_stack_loss(a, b, x, y, f_op, g_op), (0, 1))(w1, w2)
        return psum(loss, "dp"), (psum(g1, "dp"), psum(g2, "dp"))
    return f


C.smap("s.megatron_fg_scan_remat.dp2xtp4", {"dp": 2, "tp": 4}, megatron_fg,
       (P(None, None, "tp"), P(None, "tp"), P("dp"), P("dp")), (P(), (P(None, None, "tp"), P(None, "tp"))),
       megatron_scan_step,
       (R(MG_L, MG_D, MG_H, scale=0.3), R(MG_L, MG_H, MG_D, scale=0.2), R(MG_B, MG_D), R(MG_B, MG_D)),
       bugs=[("f-bwd-no-psum", ["missing-all-reduce"]), ("g-bwd-psum", ["wrong-reduction"])])

# ---------------------------------------------------------------------------
# 6. a quantisation-aware classifier step, batch over dp: the hidden
#    activations fake-quantised to int8 with a per-tensor scale from their
#    absolute max over the whole batch and a straight-through round
#    (custom_vjp), a clipped-gradient identity (custom_vjp) before the head,
#    the mean cross-entropy; the SGD update is skipped (lax.cond) once the
#    global loss is below SQ_TARGET.
SQ_B, SQ_D, SQ_H, SQ_C, SQ_LR, SQ_CLIP, SQ_TARGET = 16, 8, 16, 4, 0.5, 0.01, 0.3


@jax.custom_vjp
def ste_round(x):
    return jnp.round(x)


ste_round.defvjp(lambda x: (jnp.round(x), None), lambda _, g: (g,))


@jax.custom_vjp
def clip_grad(x):
    return x


clip_grad.defvjp(lambda x: (x, None), lambda _, g: (jnp.clip(g, -SQ_CLIP, SQ_CLIP),))


def qat_loss_sum(w1, w2, x, lab, amax_all=lambda m: m):
    h = jax.nn.relu(x @ w1)
    s = jnp.maximum(amax_all(lax.stop_gradient(jnp.max(jnp.abs(h)))), 1e-6) / 127.0
    hq = jnp.clip(ste_round(h / s), -127, 127) * s
    return jnp.sum(xent(clip_grad(hq) @ w2, lab))


def sgd_unless_done(loss, w1, w2, g1, g2):
    return lax.cond(loss > SQ_TARGET, lambda: (w1 - SQ_LR * g1, w2 - SQ_LR * g2), lambda: (w1, w2))


def qat_step(w1, w2, x, lab):
    loss, (g1, g2) = jax.value_and_grad(lambda a, b: qat_loss_sum(a, b, x, lab) / SQ_B, (0, 1))(w1, w2)
    return sgd_unless_done(loss, w1, w2, g1, g2) + (loss,)


def qat_dp(bug):
    def f(w1, w2, x, lab):
        amax = (lambda m: m) if bug == "absmax-local" else (lambda m: pmax(m, "dp"))
        if bug == "loss-local-mean":
            loss, (g1, g2) = jax.value_and_grad(lambda a, b: qat_loss_sum(a, b, x, lab, amax) / x.shape[0],
                                                (0, 1))(w1, w2)
            loss = pmean(loss, "dp")
        else:
            loss, (g1, g2) = jax.value_and_grad(lambda a, b: qat_loss_sum(a, b, x, lab, amax) / SQ_B, (0, 1))(w1, w2)
            loss = psum(loss, "dp")
        g1, g2 = psum(g1, "dp"), psum(g2, "dp")
        return sgd_unless_done(loss, w1, w2, g1, g2) + (loss,)
    return f


sq_x = R(SQ_B, SQ_D)
sq_x[:4] *= 3.0  # the first dp shard holds the largest activations
C.smap("s.qat_ste_clipgrad_cond.dp4", {"dp": 4}, qat_dp, (P(), P(), P("dp"), P("dp")), (P(), P(), P()), qat_step,
       (R(SQ_D, SQ_H, scale=0.5), R(SQ_H, SQ_C, scale=0.5), sq_x, I(0, SQ_C, SQ_B)),
       bugs=[("absmax-local", ["missing-all-reduce"]), ("loss-local-mean", ["wrong-reduction"])])

# ---------------------------------------------------------------------------
# 7. ranking metrics over a batch sharded on dp: ROC AUC from the ranks of
#    the scores (argsort; Mann-Whitney), where each device gathers all
#    scores, ranks them and sums the ranks of its own positives; NDCG@AU_K of
#    per-query candidate lists (a query's list on one device) averaged over
#    the queries.
AU_N, AU_Q, AU_L, AU_K = 32, 8, 6, 4
AU_DISC = 1.0 / np.log2(np.arange(AU_K) + 2.0).astype(np.float32)


def ranks(s):
    """1-based rank of each score in ascending order (stable)."""
    return jnp.zeros(s.shape[0], jnp.float32).at[jnp.argsort(s)].set(jnp.arange(1, s.shape[0] + 1, dtype=jnp.float32))


def ndcg_at_k(qs, rel):
    gain = 2.0 ** rel.astype(jnp.float32) - 1.0
    dcg = jnp.sum(jnp.take_along_axis(gain, jnp.argsort(-qs, -1)[:, :AU_K], -1) * AU_DISC, -1)
    idcg = jnp.sum(-jnp.sort(-gain, -1)[:, :AU_K] * AU_DISC, -1)
    return jnp.where(idcg > 0, dcg / jnp.where(idcg > 0, idcg, 1.0), 0.0)


def auc_ndcg(s, lab, qs, rel):
    pos = lab > 0
    npos = jnp.sum(pos)
    u = jnp.sum(jnp.where(pos, ranks(s), 0.0)) - npos * (npos + 1) / 2
    nd = ndcg_at_k(qs, rel)
    return u / (npos * (AU_N - npos)), nd, jnp.sum(nd) / AU_Q


def auc_ndcg_dp(bug):
    def f(s, lab, qs, rel):
        nl = s.shape[0]
        pos = lab > 0
        r_all = ranks(lax.all_gather(s, "dp", tiled=True))
        mine = lax.dynamic_slice_in_dim(r_all, 0 if bug == "rank-no-offset" else idx("dp") * nl, nl)
        npos = psum(jnp.sum(pos), "dp")
        u = psum(jnp.sum(jnp.where(pos, mine, 0.0)), "dp") - npos * (npos + 1) / 2
        nd = ndcg_at_k(qs, rel)
        return u / (npos * (AU_N - npos)), nd, psum(jnp.sum(nd), "dp") / (
            qs.shape[0] if bug == "ndcg-divide-local-q" else AU_Q)
    return f


au_lab = (rng.uniform(0, 1, AU_N) < 0.4).astype(np.int32)
C.smap("s.auc_ranks_ndcg.dp4", {"dp": 4}, auc_ndcg_dp, (P("dp"),) * 4, (P(), P("dp"), P()), auc_ndcg,
       (R(AU_N) + 0.8 * au_lab.astype(np.float32), au_lab, R(AU_Q, AU_L), I(0, 4, AU_Q, AU_L)),
       bugs=[("rank-no-offset", ["wrong-shard-dim"]), ("ndcg-divide-local-q", ["constant-mismatch"])])

# ---------------------------------------------------------------------------
# 8. average precision, precision@k and recall@k of long ranked candidate
#    lists (in ranked order, relevance > 0 means relevant) with the list
#    sharded along its length over sp: the running hit count is the local
#    cumsum plus the hits of the earlier shards (all_gather of the shard
#    totals), the rank is the global position.
AP_Q, AP_L, AP_K = 4, 32, 10


def ap_metrics(rel):
    r = (rel > 0).astype(jnp.float32)
    hits = jnp.cumsum(r, -1)
    prec = hits / jnp.arange(1, AP_L + 1)
    nrel = jnp.maximum(jnp.sum(r, -1), 1.0)
    ap = jnp.sum(prec * r, -1) / nrel
    return ap, jnp.mean(ap), prec[:, AP_K - 1], hits[:, AP_K - 1] / nrel


def ap_sp(bug):
    def f(rel):
        ll = rel.shape[1]
        me = idx("sp")
        r = (rel > 0).astype(jnp.float32)
        tot = lax.all_gather(jnp.sum(r, -1), "sp")  # [shards, Q]
        before = jnp.sum(jnp.where(jnp.arange(tot.shape[0])[:, None] < me, tot, 0.0), 0)
        hits = jnp.cumsum(r, -1) + before[:, None]
        rank = jnp.arange(1, ll + 1) + (0 if bug == "rank-no-offset" else me * ll)
        prec = hits / rank
        nrel = jnp.maximum(jnp.sum(r, -1) if bug == "nrel-local" else jnp.sum(tot, 0), 1.0)
        ap = psum(jnp.sum(prec * r, -1), "sp") / nrel
        at_k = rank == AP_K
        p_k = psum(jnp.sum(jnp.where(at_k, prec, 0.0), -1), "sp")
        h_k = psum(jnp.sum(jnp.where(at_k, hits, 0.0), -1), "sp")
        return ap, jnp.mean(ap), p_k, h_k / nrel
    return f


ap_rel = I(0, 3, AP_Q, AP_L) * (rng.uniform(0, 1, (AP_Q, AP_L)) < np.linspace(0.9, 0.1, AP_L)).astype(np.int32)
C.smap("s.average_precision_cumsum.sp4", {"sp": 4}, ap_sp, (P(None, "sp"),), (P(), P(), P(), P()), ap_metrics,
       (ap_rel,), bugs=[("rank-no-offset", ["wrong-shard-dim"]), ("nrel-local", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 9. a replay buffer (observations and rewards, RB_CAP rows) written with a
#    batch of RB_N transitions at the write pointer and read as a minibatch
#    of windows of RB_W rows, each from a sampled start (taken modulo the
#    number of window starts), by dynamic_update_slice / dynamic_slice (a
#    write running off the end is clamped, as XLA does); the mean reward of
#    the buffer and the next pointer. Rows are sharded over dp: each device
#    pads its block with RB_N (RB_W) rows on both sides and clips the local
#    start into the padded block, so a window that misses its rows lands in
#    the padding; the windows read are psum'd.
RB_CAP, RB_D, RB_N, RB_W = 32, 4, 6, 5


def replay_write_read(obs, rew, new_obs, new_rew, ptr, q):
    s = ptr % RB_CAP
    obs = lax.dynamic_update_slice(obs, new_obs, (s, 0))
    rew = lax.dynamic_update_slice(rew, new_rew, (s,))
    q = q % (RB_CAP - RB_W + 1)
    win = jax.vmap(lambda q: lax.dynamic_slice(obs, (q, 0), (RB_W, RB_D)))(q)
    win_r = jax.vmap(lambda q: lax.dynamic_slice(rew, (q,), (RB_W,)))(q)
    return obs, rew, win, win_r, jnp.mean(rew), (s + RB_N) % RB_CAP


def replay_dp(bug):
    def f(obs, rew, new_obs, new_rew, ptr, q):
        cl = obs.shape[0]
        off = 0 if bug == "write-no-offset" else idx("dp") * cl
        s = ptr % RB_CAP
        # where the (clamped) write starts in my padded block
        a = jnp.clip(jnp.minimum(s, RB_CAP - RB_N) - off + RB_N, 0, cl + RB_N)
        ext = jnp.concatenate([jnp.zeros((RB_N, RB_D)), obs, jnp.zeros((RB_N, RB_D))])
        obs = lax.dynamic_update_slice(ext, new_obs, (a, 0))[RB_N:RB_N + cl]
        ext_r = jnp.concatenate([jnp.zeros(RB_N), rew, jnp.zeros(RB_N)])
        rew = lax.dynamic_update_slice(ext_r, new_rew, (a,))[RB_N:RB_N + cl]
        b = jnp.clip(q % (RB_CAP - RB_W + 1) - idx("dp") * cl + RB_W, 0, cl + RB_W)  # the reads, likewise
        ext = jnp.concatenate([jnp.zeros((RB_W, RB_D)), obs, jnp.zeros((RB_W, RB_D))])
        ext_r = jnp.concatenate([jnp.zeros(RB_W), rew, jnp.zeros(RB_W)])
        win = jax.vmap(lambda b: lax.dynamic_slice(ext, (b, 0), (RB_W, RB_D)))(b)
        win_r = jax.vmap(lambda b: lax.dynamic_slice(ext_r, (b,), (RB_W,)))(b)
        if bug != "window-no-psum":
            win, win_r = psum(win, "dp"), psum(win_r, "dp")
        return obs, rew, win, win_r, psum(jnp.sum(rew), "dp") / RB_CAP, (s + RB_N) % RB_CAP
    return f


C.smap("s.replay_buffer_dus_windows.dp4", {"dp": 4}, replay_dp, (P("dp"), P("dp"), P(), P(), P(), P()),
       (P("dp"), P("dp"), P(), P(), P(), P()), replay_write_read,
       (R(RB_CAP, RB_D), R(RB_CAP), R(RB_N, RB_D), R(RB_N), np.int32(45), np.array([10, 0, 27, 17], np.int32)),
       bugs=[("write-no-offset", ["wrong-shard-dim"]), ("window-no-psum", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 10. per-document losses of a packed LM batch with the sequence sharded over
#     sp: the document index of each position is the running count of BOS
#     tokens (local cumsum plus the BOS count of the earlier shards); token
#     NLLs (label 0 is padding) are summed per document with segment_sum
#     (sorted ids) and psum'd; the per-document mean, the token count, the
#     mean over documents and the mean over tokens.
PK_B, PK_T, PK_V, PK_BOS, PK_PAD = 2, 32, 16, 1, 0
PK_S = PK_T + 1


def doc_sums(a, seg):
    return jax.vmap(lambda a, s: jax.ops.segment_sum(a, s, PK_S, indices_are_sorted=True))(a, seg)


def doc_finish(dsum, dcnt):
    dloss = dsum / jnp.maximum(dcnt, 1.0)
    has = dcnt > 0
    return (dloss, dcnt.astype(jnp.int32), jnp.sum(jnp.where(has, dloss, 0.0)) / jnp.maximum(jnp.sum(has), 1),
            jnp.sum(dsum) / jnp.maximum(jnp.sum(dcnt), 1.0))


def packed_doc_losses(logits, tokens, labels):
    seg = jnp.cumsum(tokens == PK_BOS, -1)
    keep = labels != PK_PAD
    nll = jnp.where(keep, xent(logits, labels), 0.0)
    return doc_finish(doc_sums(nll, seg), doc_sums(keep.astype(jnp.float32), seg))


def packed_sp(bug):
    def f(logits, tokens, labels):
        bos = tokens == PK_BOS
        seg = jnp.cumsum(bos, -1)
        if bug != "seg-no-prefix":
            cnt = lax.all_gather(jnp.sum(bos, -1), "sp")  # [shards, B]
            seg = seg + jnp.sum(jnp.where(jnp.arange(cnt.shape[0])[:, None] < idx("sp"), cnt, 0), 0)[:, None]
        keep = labels != PK_PAD
        nll = jnp.where(keep, xent(logits, labels), 0.0)
        dcnt = doc_sums(keep.astype(jnp.float32), seg)
        if bug != "doc-count-no-psum":
            dcnt = psum(dcnt, "sp")
        return doc_finish(psum(doc_sums(nll, seg), "sp"), dcnt)
    return f


pk_tok = I(2, PK_V, PK_B, PK_T)
pk_tok[0, [0, 5, 13, 14, 27]] = PK_BOS
pk_tok[1, [0, 9, 20, 22]] = PK_BOS
pk_lab = np.concatenate([pk_tok[:, 1:], np.zeros((PK_B, 1), np.int32)], 1)
pk_lab[1, 26:] = PK_PAD
C.smap("s.packed_doc_loss_segsum.sp4", {"sp": 4}, packed_sp, (P(None, "sp"), P(None, "sp"), P(None, "sp")),
       (P(), P(), P(), P()), packed_doc_losses, (R(PK_B, PK_T, PK_V, scale=2.0), pk_tok, pk_lab),
       bugs=[("seg-no-prefix", ["wrong-shard-dim"]), ("doc-count-no-psum", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 11. causal attention over packed sequences (a key is seen by a query of the
#     same segment at an earlier or equal position) with the sequence sharded
#     over sp: ring attention, the key / value / segment-id blocks passed to
#     the next device each step, an online softmax, positions from the block
#     the keys came from.
RA_B, RA_T, RA_H, RA_E, RA_N = 2, 16, 2, 8, 4


def packed_causal_attn(q, k, v, seg):
    s = jnp.einsum("bqhe,bkhe->bhqk", q, k) / np.sqrt(RA_E)
    pos = jnp.arange(RA_T)
    ok = (seg[:, :, None] == seg[:, None, :]) & (pos[:, None] >= pos[None, :])
    p = jax.nn.softmax(jnp.where(ok[:, None], s, -1e30), -1)
    return jnp.einsum("bhqk,bkhe->bqhe", p, v)


def ring_attn_sp(bug):
    ring = [(j, (j + 1) % RA_N) for j in range(RA_N)]
    if bug == "ring-wrong-direction":
        ring = [(j, (j - 1) % RA_N) for j in range(RA_N)]

    def f(q, k, v, seg):
        b, tl = q.shape[:2]
        me = idx("sp")
        qpos = jnp.arange(tl) + (0 if bug == "causal-no-offset" else me * tl)
        m = jnp.full((b, RA_H, tl), -1e30)
        l = jnp.zeros((b, RA_H, tl))
        acc = jnp.zeros((b, RA_H, tl, RA_E))
        kseg = seg
        for j in range(RA_N):
            src = (me - j) % RA_N
            kpos = jnp.arange(tl) + (0 if bug == "causal-no-offset" else src * tl)
            ok = ((seg[:, :, None] == kseg[:, None, :]) & (qpos[:, None] >= kpos[None, :]))[:, None]
            s = jnp.where(ok, jnp.einsum("bqhe,bkhe->bhqk", q, k) / np.sqrt(RA_E), -1e30)
            m_new = jnp.maximum(m, jnp.max(s, -1))
            p = jnp.where(ok, jnp.exp(s - m_new[..., None]), 0.0)
            corr = jnp.exp(m - m_new)
            l = l * corr + jnp.sum(p, -1)
            acc = acc * corr[..., None] + jnp.einsum("bhqk,bkhe->bhqe", p, v)
            m = m_new
            if j < RA_N - 1:
                k, v, kseg = (lax.ppermute(a, "sp", ring) for a in (k, v, kseg))
        return jnp.transpose(acc / l[..., None], (0, 2, 1, 3))
    return f


ra_seg = np.stack([np.repeat([0, 1, 2], [5, 7, 4]), np.repeat([0, 1], [10, 6])]).astype(np.int32)
C.smap("s.ring_attn_packed_segmask.sp4", {"sp": RA_N}, ring_attn_sp, (P(None, "sp"),) * 4, P(None, "sp"),
       packed_causal_attn,
       (R(RA_B, RA_T, RA_H, RA_E), R(RA_B, RA_T, RA_H, RA_E), R(RA_B, RA_T, RA_H, RA_E), ra_seg),
       bugs=[("ring-wrong-direction", ["wrong-collective-group"]), ("causal-no-offset", ["wrong-shard-dim"])])

# ---------------------------------------------------------------------------
# 12. a bf16 MLP block with f32 accumulation: the matmuls take bf16 operands
#     and accumulate in f32, the residual and the RMSNorm are in f32, the
#     output is cast back to bf16; a mean-square statistic of the output.
#     Batch over dp, Megatron over tp: the row-parallel partial sums are
#     psum'd in f32 and only then cast.
BF_B, BF_D, BF_H = 8, 16, 32
bf16, f32 = jnp.bfloat16, jnp.float32


def bf16_block(x, w1, w2, gamma):
    h = jax.nn.gelu(jnp.dot(x, w1, preferred_element_type=f32)).astype(bf16)
    y = x.astype(f32) + jnp.dot(h, w2, preferred_element_type=f32)
    out = (y * lax.rsqrt(jnp.mean(y * y, -1, keepdims=True) + 1e-6) * gamma).astype(bf16)
    return out, jnp.mean(jnp.square(out.astype(f32)))


def bf16_dp_tp(bug):
    def f(x, w1, w2, gamma):
        h = jax.nn.gelu(jnp.dot(x, w1, preferred_element_type=f32)).astype(bf16)
        part = jnp.dot(h, w2, preferred_element_type=f32)
        if bug == "psum-bf16":
            y = x.astype(f32) + psum(part.astype(bf16), "tp").astype(f32)
        elif bug == "residual-before-psum":
            y = psum(x.astype(f32) + part, "tp")
        else:
            y = x.astype(f32) + psum(part, "tp")
        out = (y * lax.rsqrt(jnp.mean(y * y, -1, keepdims=True) + 1e-6) * gamma).astype(bf16)
        return out, pmean(jnp.mean(jnp.square(out.astype(f32))), "dp")
    return f


C.smap("s.bf16_block_f32_psum.dp2xtp4", {"dp": 2, "tp": 4}, bf16_dp_tp, (P("dp"), P(None, "tp"), P("tp"), P()),
       (P("dp"), P()), bf16_block,
       (R(BF_B, BF_D, dt=jnp.bfloat16), R(BF_D, BF_H, scale=0.3, dt=jnp.bfloat16),
        R(BF_H, BF_D, scale=0.3, dt=jnp.bfloat16), 1.0 + R(BF_D, scale=0.1)),
       bugs=[("psum-bf16", ["dtype-mismatch"]), ("residual-before-psum", ["wrong-reduction"])])

# ---------------------------------------------------------------------------
# 13. a linear classifier's eval under GSPMD with the batch over dp: top-5
#     from an argsort of the logits, the confusion matrix as a product of
#     one-hots, per-class precision / recall and macro-F1.
GE_B, GE_F, GE_K = 64, 16, 10


def classifier_eval(x, w, b, labels):
    logits = x @ w + b
    top5 = jnp.argsort(logits, -1)[:, -5:]
    pred = top5[:, -1]
    conf = jnp.einsum("bi,bj->ij", jax.nn.one_hot(labels, GE_K), jax.nn.one_hot(pred, GE_K))
    tp = jnp.diag(conf)
    prec = tp / jnp.maximum(jnp.sum(conf, 0), 1.0)
    rec = tp / jnp.maximum(jnp.sum(conf, 1), 1.0)
    f1 = jnp.where(prec + rec > 0, 2 * prec * rec / jnp.where(prec + rec > 0, prec + rec, 1.0), 0.0)
    return (jnp.mean(pred == labels), jnp.mean(jnp.any(top5 == labels[:, None], -1)), conf.astype(jnp.int32),
            jnp.mean(f1))


ge_w = R(GE_F, GE_K, scale=0.5)
ge_x = R(GE_B, GE_F)
C.gspmd("g.classifier_eval_macro_f1.dp8", {"dp": 8}, (P("dp"), P(), P(), P("dp")), (P(), P(), P(), P()),
        classifier_eval,
        (ge_x, ge_w, R(GE_K, scale=0.1), np.argmax(ge_x @ ge_w + R(GE_B, GE_K), -1).astype(np.int32)))

# ---------------------------------------------------------------------------
# 14. multi-output least squares by gradient descent with an early exit
#     (lax.while_loop until the loss is below EX_TOL or EX_MAXIT steps), each
#     step accepted only if the loss went down (lax.cond: accept and grow the
#     rate, or reject and halve it); batch over dp, output columns over tp
#     (GSPMD).
EX_N, EX_D, EX_O, EX_TOL, EX_MAXIT, EX_LR = 32, 8, 8, 0.05, 20, 0.1


def early_exit_gd(w, x, y):
    def loss(w):
        return jnp.mean(jnp.sum(jnp.square(x @ w - y), -1))

    def body(s):
        i, w, l, lr = s
        w2 = w - lr * jax.grad(loss)(w)
        l2 = loss(w2)
        w, l, lr = lax.cond(l2 < l, lambda: (w2, l2, lr * 1.1), lambda: (w, l, lr * 0.5))
        return i + 1, w, l, lr
    return lax.while_loop(lambda s: (s[0] < EX_MAXIT) & (s[2] > EX_TOL), body,
                          (0, w, loss(w), jnp.float32(EX_LR)))


ex_x = R(EX_N, EX_D)
C.gspmd("g.early_exit_gd_cond.dp2xtp4", {"dp": 2, "tp": 4}, (P(None, "tp"), P("dp"), P("dp", "tp")),
        (P(), P(None, "tp"), P(), P()), early_exit_gd,
        (np.zeros((EX_D, EX_O), np.float32), ex_x, ex_x @ R(EX_D, EX_O, scale=0.5) + R(EX_N, EX_O, scale=0.05)))

# ---------------------------------------------------------------------------
# 15. an MLP over a [batch, time, feature] input whose batch is over dp: the
#     batch and time merged by a reshape, the hidden layer constrained to
#     P(None, 'tp') and the output rows to P('tp', None) (with_sharding_
#     constraint mid-layer), back to [batch, time, feature], then a masked
#     attention-free pooling as one three-operand einsum (features, a
#     projection and the padding mask) over the count of real steps.
WS_B, WS_T, WS_D, WS_H, WS_E = 4, 8, 16, 32, 8


def wsc_mlp_pool(x, mask, w1, w2, wp):
    b, t, d = x.shape
    h = jax.nn.gelu(x.reshape(b * t, d) @ w1)
    h = wsc(DT_MESH, h, None, "tp")
    h = wsc(DT_MESH, h @ w2, "tp", None)
    h = ln(h.reshape(b, t, d) + x)
    return jnp.einsum("btd,de,bt->be", h, wp, mask) / jnp.maximum(jnp.sum(mask, 1, keepdims=True), 1.0), h


ws_mask = (np.arange(WS_T)[None] < np.array([8, 3, 6, 1])[:, None]).astype(np.float32)
C.gspmd("g.wsc_midlayer_reshape_einsum3.dp2xtp4", {"dp": 2, "tp": 4}, (P("dp"), P("dp"), P(), P(), P()),
        (P("dp"), P("dp")), wsc_mlp_pool,
        (R(WS_B, WS_T, WS_D), ws_mask, R(WS_D, WS_H, scale=0.3), R(WS_H, WS_D, scale=0.2), R(WS_D, WS_E, scale=0.3)))

# ---------------------------------------------------------------------------
# 16. a stack of RMSNorm + SwiGLU blocks in a lax.scan over stacked weights
#     (hidden dim over tp), each block rematerialised with a policy that
#     saves nothing, the loss, value_and_grad and an SGD step; batch over dp
#     (GSPMD).
SW_L, SW_D, SW_H, SW_B, SW_LR = 3, 16, 32, 8, 0.05


def swiglu_scan_sgd(p, x, y):
    def loss(p):
        def block(h, w):
            z = h * lax.rsqrt(jnp.mean(h * h, -1, keepdims=True) + 1e-6) * w["g"]
            return h + (jax.nn.silu(z @ w["wg"]) * (z @ w["wu"])) @ w["wd"], None
        h, _ = lax.scan(jax.checkpoint(block, policy=jax.checkpoint_policies.nothing_saveable), x, p)
        return jnp.mean(jnp.square(h - y))
    lv, g = jax.value_and_grad(loss)(p)
    return jax.tree.map(lambda a, b: a - SW_LR * b, p, g), lv


sw_spec = {"g": P(), "wg": P(None, None, "tp"), "wu": P(None, None, "tp"), "wd": P(None, "tp")}
C.gspmd("g.swiglu_scan_remat_sgd.dp2xtp4", {"dp": 2, "tp": 4}, (sw_spec, P("dp"), P("dp")), (sw_spec, P()),
        swiglu_scan_sgd,
        ({"g": 1.0 + R(SW_L, SW_D, scale=0.1), "wg": R(SW_L, SW_D, SW_H, scale=0.3),
          "wu": R(SW_L, SW_D, SW_H, scale=0.3), "wd": R(SW_L, SW_H, SW_D, scale=0.2)}, R(SW_B, SW_D), R(SW_B, SW_D)))

# ---------------------------------------------------------------------------
# 17. an attention block over packed sequences (segments from a running
#     count of BOS tokens, causal within a segment) with the batch over dp
#     and the heads over tp: fused QKV projection, the mask, the softmax, the
#     output projection summing over the heads (GSPMD).
PA_B, PA_T, PA_D, PA_H, PA_E, PA_BOS = 4, 16, 16, 4, 4, 1


def packed_attn_block(x, tok, wqkv, wo):
    seg = jnp.cumsum(tok == PA_BOS, -1)
    q, k, v = jnp.einsum("btd,dshe->sbthe", x, wqkv)
    q = wsc(DT_MESH, q, "dp", None, "tp", None)
    s = jnp.einsum("bqhe,bkhe->bhqk", q, k) / np.sqrt(PA_E)
    pos = jnp.arange(PA_T)
    ok = (seg[:, :, None] == seg[:, None, :]) & (pos[:, None] >= pos[None, :])
    o = jnp.einsum("bhqk,bkhe->bqhe", jax.nn.softmax(jnp.where(ok[:, None], s, -1e30), -1), v)
    return x + jnp.einsum("bqhe,hed->bqd", o, wo)


pa_tok = I(2, 20, PA_B, PA_T)
pa_tok[:, 0] = PA_BOS
pa_tok[0, [6, 11]] = PA_BOS
pa_tok[2, 9] = PA_BOS
C.gspmd("g.packed_attn_heads_tp.dp2xtp4", {"dp": 2, "tp": 4},
        (P("dp"), P("dp"), P(None, None, "tp"), P("tp")), P("dp"), packed_attn_block,
        (R(PA_B, PA_T, PA_D), pa_tok, R(PA_D, 3, PA_H, PA_E, scale=0.3), R(PA_H, PA_E, PA_D, scale=0.3)))

# ---------------------------------------------------------------------------
# 18. ROC and precision-recall curves of a binary scorer over a batch sharded
#     on dp (GSPMD): the batch sorted by descending score, cumulative true and
#     false positives, ROC AUC by the trapezoid rule, average precision, and
#     the threshold with the best F1.
RC_N = 64


def roc_pr(scores, labels):
    order = jnp.argsort(-scores)
    y = (labels > 0)[order].astype(jnp.float32)
    tp, fp = jnp.cumsum(y), jnp.cumsum(1.0 - y)
    tpr, fpr = tp / jnp.maximum(tp[-1], 1.0), fp / jnp.maximum(fp[-1], 1.0)
    auc = fpr[0] * tpr[0] / 2 + jnp.sum((fpr[1:] - fpr[:-1]) * (tpr[1:] + tpr[:-1]) / 2)
    prec = tp / jnp.arange(1, RC_N + 1)
    ap = jnp.sum(prec * y) / jnp.maximum(tp[-1], 1.0)
    f1 = 2 * prec * tpr / (prec + tpr + 1e-9)
    k = jnp.argmax(f1)
    return auc, ap, scores[order][k], f1[k], tpr, fpr


rc_lab = (rng.uniform(0, 1, RC_N) < 0.3).astype(np.int32)
C.gspmd("g.roc_pr_curve_sort.dp4", {"dp": 4}, (P("dp"), P("dp")), (P(), P(), P(), P(), P("dp"), P("dp")), roc_pr,
        (R(RC_N) + 1.2 * rc_lab.astype(np.float32), rc_lab))

# ---------------------------------------------------------------------------
# 19. temperature scaling by a grid search (the NLL at each temperature,
#     vmapped), then the ECE at the chosen temperature with bincount
#     histograms; logits over dp (GSPMD).
TS_N, TS_K, TS_NB = 64, 5, 8
TS_GRID = np.linspace(0.5, 3.0, 11).astype(np.float32)


def temperature_ece(logits, labels):
    nll = jax.vmap(lambda t: jnp.mean(xent(logits / t, labels)))(TS_GRID)
    t = jnp.asarray(TS_GRID)[jnp.argmin(nll)]
    p = jax.nn.softmax(logits / t, -1)
    conf = jnp.max(p, -1)
    hit = (jnp.argmax(p, -1) == labels).astype(jnp.float32)
    b = jnp.minimum((conf * TS_NB).astype(jnp.int32), TS_NB - 1)
    cnt = jnp.bincount(b, length=TS_NB)
    gap = jnp.bincount(b, weights=hit - conf, length=TS_NB)
    return t, nll, jnp.sum(jnp.abs(gap)) / TS_N, cnt


ts_lab = I(0, TS_K, TS_N)
C.gspmd("g.temperature_grid_ece_bincount.dp4", {"dp": 4}, (P("dp"), P("dp")), (P(), P(), P(), P()),
        temperature_ece, (R(TS_N, TS_K, scale=2.0) + 2.0 * np.eye(TS_K, dtype=np.float32)[ts_lab], ts_lab))

# ---------------------------------------------------------------------------
C.finish()
