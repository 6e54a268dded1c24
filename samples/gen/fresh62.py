"""samples/fresh62: a 62nd batch of programs as a user writes them, on the theme of dynamic-programming losses and decoders of speech and sequence models under sharding in current JAX, none of them an idiom of samples/fresh .. fresh61, probe, train or wild.
Everything is written by hand (no optax.ctc_loss): lattices in log space with
lax.scan / fori_loop / associative_scan / cumlogsumexp / cummin, the
vocabulary over tp so that every log-softmax needs a pmax'd maximum and a
psum'd sum of exponentials, the batch over dp.
shard_map families:
 1. CTC loss by the forward algorithm (lax.scan over time, log space, the
    extended label sequence blank/label/blank..., skip transitions, frame
    and label paddings), blank = the last class (it lives on the last tp
    shard), batch over dp2, vocabulary over tp4; per-utterance loss divided
    by its label length, mean over the global batch by psum / B. Bugs: the
    log-sum-exp with each shard's own maximum (psum of exp(x - local max)),
    the blank taken as the last LOCAL column on every shard, the batch mean
    over the local batch only (no psum over dp).
 2. a CTC training step: tanh encoder layer (replicated) and an output layer
    whose columns are over tp, jax.value_and_grad inside the body
    (check_vma=True), blank = 0, loss normalised by the total number of
    target tokens (psum'd over dp). Bugs: normalised by the local number of
    target tokens (and pmean'd), the token count psum'd over (dp, tp)
    (tp times too many tokens).
 3. RNN-T loss over the (T, U+1) lattice: joint network tanh(enc + pred)
    then an output layer with the vocabulary over tp; the row recurrence
    along u written as a log-space linear recurrence with lax.cumlogsumexp;
    lax.scan over t; batch over dp. Bugs: the blank read at local column 0
    on every shard (blank is global 0), the log-softmax normaliser not
    psum'd over tp, the lattice using the blank of the NEXT frame (time
    shift the wrong way).
 4. CTC forced alignment (Viterbi, max-product) with backpointers and a
    reverse lax.scan backtrack, returning the best score and the state path;
    its log-softmax normaliser written as log(psum(exp(local lse))) (no
    global max: fine for these logits, and exactly the global lse).
    Bugs: m_local + log(psum(sum exp(x - m_local))), the state path offset
    by one frame (backtrack aligned to the wrong time step).
 5. HMM forward-backward with the time over sp4: per-step log transition
    matrices M_t[i, j] = logA[i, j] + e_t[j] (the first step diagonal),
    log-semiring matrix products by lax.associative_scan inside a block,
    block totals all_gather'd and combined in order for the incoming forward
    vector and the outgoing backward vector; log-likelihood and posteriors.
    Bugs: the incoming prefix including the own block, the backward vector
    from the earlier blocks instead of the later ones, the block totals
    multiplied in reverse order.
 6. word-error-rate counts: Levenshtein distance rows by a cummin trick
    (lax.scan over hypothesis positions, int32), per-utterance distances at
    the true lengths, WER = psum(errors) / psum(reference words), batch over
    dp4. Bugs: divided by the local number of reference words, pmean of
    per-device WERs, errors not psum'd.
 7. one beam-search step with a GNMT length penalty ((5 + len) / 6)^alpha,
    vocabulary over tp4, batch over dp2: vocab-parallel log-softmax, a local
    top-k over (beam, local vocab), candidates all_gather'd with global ids,
    a global top-k; returns new scores, parent beams and tokens. Bugs: token
    ids without the shard offset, the log-softmax normaliser local, the
    penalty on the old length.
 8. label-smoothed cross-entropy of a speech decoder, bf16 logits from a
    column-parallel head (vocab over tp4) with the loss in f32, padded
    positions masked, mean over the global number of real tokens, and its
    gradient in the head (jax.value_and_grad inside, check_vma=True).
    Bugs: the smoothing term averaged over the local vocabulary size, the
    normaliser from the local token count.
 9. HMM Viterbi decoding with the states over tp4: the previous delta
    all_gather'd each step, transition columns local, backpointers
    global, the final argmax across shards by all_gather; backtrack by a
    fori_loop. Bugs: final state index without the shard offset, the
    emission of the previous frame added (time shift).
10. CTC forward with the time over sp4: alpha handed to the right
    neighbour by ppermute in n - 1 rounds, each device rescanning its block
    from what it received; the loss from the last device. Bugs: alpha sent
    to the left, the loss read on the first device.
11. an RNN-T training step with optax.adam, batch over dp4, embedding
    prediction network; loss and gradients pmean'd. Bugs: gradients not
    reduced, gradients psum'd.
12. HMM Viterbi max-plus steps with the transition rows over tp4: partial
    maxima pmax'd, backpointers as the pmin of a masked global iota, the new
    delta dynamic_slice'd back to the own states. Bugs: backpointer as the
    pmax of local argmaxes (plus offset), delta sliced at offset 0.
13. KL label smoothing, vocab over tp4, batch over dp2, written another way:
    the log-sum-exp from the all_gather'd per-shard log-sum-exps, the
    smoothing term as a pmean over tp of local means, the target term by a
    masked take at the local index. Bugs: shard log-sum-exps summed, the
    target index without the shard offset.
14. HMM backward pass with the time over sp4: beta handed to the LEFT
    neighbour by ppermute in n - 1 rounds, e_{t+1} at a block's end from the
    right neighbour's first emission; log-likelihood on device 0. Bugs:
    beta sent to the right, the next emission taken from the left neighbour
    (time shift the wrong way).
GSPMD pairs (jax.jit with in/out shardings): 15. the CTC loss of 1. with
its gradient in the logits (dp2 x tp4); 16. the RNN-T loss of 3. (dp2 x
tp4); 17. HMM forward-backward by associative_scan over the whole
sequence, time over sp4; 18. Levenshtein distances and WER of 6. (dp4);
19. the beam-search step of 7. (dp2 x tp4); 20. the CTC loss of 10. with
the time over sp4; 21. the HMM Viterbi deltas and backpointers of 12.
with the states over tp4.
Numerics: NEG = -1e30 stands for log 0 (no exp(-inf - -inf)). Every
correct f32 pair agrees with its baseline within a few 1e-6; the bf16 pair
8. within 2e-3 (bf16 rounding of the head gradient); every bug variant
differs clearly (see "numerics" in the manifest). Integer lengths are
clipped into range in 1. and 10. (as a loader guard), so that the checker's
own random integer inputs give finite losses.
Exported with scalify_jax.export_pair; every pair is also run by JAX on
seeded inputs and its manifest entry records the largest difference from
the single-device run ("numerics").
Run from the repository root: bash samples/gen/run_fresh62.sh [SUBSTR...]
(only the pairs whose name contains a SUBSTR; the others keep their entries).
"""
import sys
import numpy as np
import jax, jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec as P
import optax
sys.path.insert(0, "samples/gen")  # run from the repository root (run_fresh62.sh)
from fresh_lib import Corpus, seeded  # noqa: E402

SCRIPT = "samples/gen/fresh62.py"
C = Corpus("samples/fresh62", SCRIPT, "samples/gen/run_fresh62.sh", sys.argv[1:])
rng, R, I = seeded(6262)
psum, pmax, pmean, idx = lax.psum, lax.pmax, lax.pmean, lax.axis_index
NEG = -1e30


def lse2(a, b):
    return jnp.logaddexp(a, b)


# ---------------------------------------------------------------------------
# CTC helpers shared by the baselines and the bodies: the extended label
# sequence and the forward recursion on per-state emissions em (B, T, S).

def ctc_ext(labels, blank):
    """labels (B, U) -> extended (B, 2U+1) blank, l1, blank, l2, ..., blank
    and the skip mask (a state may be entered from two states back)."""
    b, u = labels.shape
    ext = jnp.full((b, 2 * u + 1), blank, labels.dtype).at[:, 1::2].set(labels)
    prev2 = jnp.concatenate([jnp.full((b, 2), blank, labels.dtype), ext[:, :-2]], 1)
    skip = (ext != blank) & (ext != prev2)
    return ext, skip


def ctc_forward(em, skip, flen, llen):
    """-log p(labels | x) from em (B, T, S) per-state log-probs, frame
    lengths flen and label lengths llen."""
    b, t, s = em.shape
    a0 = jnp.full((b, s), NEG).at[:, 0].set(em[:, 0, 0]).at[:, 1].set(em[:, 0, 1])

    def step(a, xs):
        e, ti = xs
        a1 = jnp.concatenate([jnp.full((b, 1), NEG), a[:, :-1]], 1)
        a2 = jnp.concatenate([jnp.full((b, 2), NEG), a[:, :-2]], 1)
        n = lse2(lse2(a, a1), jnp.where(skip, a2, NEG)) + e
        a = jnp.where((ti < flen)[:, None], n, a)
        return a, None
    a, _ = lax.scan(step, a0, (jnp.swapaxes(em, 0, 1)[1:], jnp.arange(1, t)))
    end = jnp.take_along_axis(a, jnp.stack([2 * llen, 2 * llen - 1], 1), 1)
    return -lse2(end[:, 0], end[:, 1])


def vp_log_softmax(x, ax="tp"):
    """log-softmax over a vocabulary split over ax (global max by pmax)."""
    m = pmax(jnp.max(lax.stop_gradient(x), -1, keepdims=True), ax)
    return x - m - jnp.log(psum(jnp.sum(jnp.exp(x - m), -1, keepdims=True), ax))


def vp_take(lp, ids, ax="tp"):
    """lp[..., ids] for global ids from a vocab-sharded lp (last dim): a
    one_hot at the shard's offset, summed over the local columns and psum'd."""
    vl = lp.shape[-1]
    oh = jax.nn.one_hot(ids - idx(ax) * vl, vl, dtype=lp.dtype)  # zero row when outside
    return psum(jnp.sum(oh * lp, -1), ax)


# ---------------------------------------------------------------------------
# 1. CTC loss, forward algorithm, batch over dp2, vocab over tp4, blank = V-1.
B1, T1, V1, U1 = 4, 12, 16, 4
BL1 = V1 - 1


def ctc_loss1(logits, labels, flen, llen):
    flen, llen = jnp.clip(flen, 1, T1), jnp.clip(llen, 1, U1)  # lengths from the loader, kept in range
    lp = jax.nn.log_softmax(logits, -1)
    ext, skip = ctc_ext(labels, BL1)
    em = jnp.take_along_axis(lp, jnp.broadcast_to(ext[:, None], (B1, T1, ext.shape[1])), 2)
    per = ctc_forward(em, skip, flen, llen)
    return jnp.mean(per / llen)


def ctc1(bug):
    def f(logits, labels, flen, llen):
        flen, llen = jnp.clip(flen, 1, T1), jnp.clip(llen, 1, U1)
        vl = logits.shape[-1]
        if bug == "lse-local-max":
            m = jnp.max(logits, -1, keepdims=True)
            lp = logits - m - jnp.log(psum(jnp.sum(jnp.exp(logits - m), -1, keepdims=True), "tp"))
        else:
            lp = vp_log_softmax(logits)
        ext, skip = ctc_ext(labels, BL1)
        lid = ext[:, None, :] - idx("tp") * vl
        if bug == "blank-last-local-column":
            lid = jnp.where(ext[:, None, :] == BL1, vl - 1, lid)
        oh = jax.nn.one_hot(lid, vl, dtype=lp.dtype)  # (b, 1, S, vl)
        em = psum(jnp.einsum("btsv,btv->bts", jnp.broadcast_to(oh, lp.shape[:2] + oh.shape[2:]), lp), "tp")
        per = ctc_forward(em, skip, flen, llen) / llen
        if bug == "local-batch-mean":
            return jnp.mean(per)
        return psum(jnp.sum(per), "dp") / B1
    return f


LAB1 = I(0, V1 - 1, B1, U1)
LAB1[0, 1] = LAB1[0, 0]  # a repeated label (no skip there)
FL1 = np.array([12, 10, 11, 9], np.int32)
LL1 = np.array([4, 3, 2, 4], np.int32)
LOG1 = R(B1, T1, V1, scale=1.5)
C.smap("s.ctc_forward_vocab_parallel_blank_last.dp2xtp4", {"dp": 2, "tp": 4}, ctc1,
       (P("dp", None, "tp"), P("dp"), P("dp"), P("dp")), P(), ctc_loss1, (LOG1, LAB1, FL1, LL1),
       bugs=[("lse-local-max", ["wrong-reduction"]), ("blank-last-local-column", ["wrong-offset"]),
             ("local-batch-mean", ["missing-collective"])])

# ---------------------------------------------------------------------------
# 2. a CTC training step: x (B, T, F) -> tanh(x W1) W2, W2's columns over
#    tp, blank 0, loss = sum of utterance losses / total target tokens;
#    jax.value_and_grad inside the body (check_vma=True).
B2, T2, F2, H2, V2, U2 = 4, 10, 6, 8, 16, 3


def ctc_model_loss(w1, w2, x, labels, flen, llen):
    lp = jax.nn.log_softmax(jnp.tanh(x @ w1) @ w2, -1)
    ext, skip = ctc_ext(labels, 0)
    em = jnp.take_along_axis(lp, jnp.broadcast_to(ext[:, None], (B2, T2, ext.shape[1])), 2)
    return jnp.sum(ctc_forward(em, skip, flen, llen)) / jnp.sum(llen)


def ctc_step_ref(w1, w2, x, labels, flen, llen):
    return jax.value_and_grad(ctc_model_loss, (0, 1))(w1, w2, x, labels, flen, llen)


def ctc2(bug):
    def f(w1, w2, x, labels, flen, llen):
        def loss(w1, w2):
            lp = vp_log_softmax(jnp.tanh(x @ w1) @ w2)
            ext, skip = ctc_ext(labels, 0)
            vl = lp.shape[-1]
            oh = jax.nn.one_hot(ext - idx("tp") * vl, vl, dtype=lp.dtype)
            em = jnp.einsum("bsv,btv->bts", oh, lp)
            tot = ctc_forward(psum(em, "tp"), skip, flen, llen)
            if bug == "local-token-count":
                return pmean(jnp.sum(tot) / jnp.sum(llen), "dp")
            if bug == "token-count-psum-all-axes":
                return psum(jnp.sum(tot), "dp") / psum(lax.pcast(jnp.sum(llen), "tp", to="varying"), ("dp", "tp"))
            return psum(jnp.sum(tot), "dp") / psum(jnp.sum(llen), "dp")
        return jax.value_and_grad(loss, (0, 1))(w1, w2)
    return f


C.smap("s.ctc_train_step_grad_tokens_norm.dp2xtp4", {"dp": 2, "tp": 4}, ctc2,
       (P(), P(None, "tp"), P("dp"), P("dp"), P("dp"), P("dp")), (P(), (P(), P(None, "tp"))), ctc_step_ref,
       (R(F2, H2, scale=0.5), R(H2, V2, scale=0.7), R(B2, T2, F2), I(1, V2, B2, U2),
        np.array([10, 8, 9, 10], np.int32), np.array([3, 1, 2, 3], np.int32)),
       bugs=[("local-token-count", ["wrong-reduction"]), ("token-count-psum-all-axes", ["wrong-scale"])],
       check_vma=True)

# ---------------------------------------------------------------------------
# 3. RNN-T loss, (T, U+1) lattice, batch over dp2, vocab over tp4, blank 0.
B3, T3, U3, H3, V3 = 4, 6, 3, 8, 16


def rnnt_lattice(bl, yl):
    """bl (B, T, U+1) blank log-probs, yl (B, T, U) label log-probs ->
    -log p. Rows over t by lax.scan; along u a log-space linear recurrence
    a[u] = lse(c[u], a[u-1] + yl[u-1]) done with cumlogsumexp."""
    b, t, u1 = bl.shape

    def row(c, y):
        cy = jnp.concatenate([jnp.zeros((b, 1)), jnp.cumsum(y, 1)], 1)
        return cy + lax.cumlogsumexp(c - cy, axis=1)

    a0 = row(jnp.full((b, u1), NEG).at[:, 0].set(0.0), yl[:, 0])

    def step(a, xs):
        blp, y = xs  # blank of the previous frame, labels of this frame
        a = row(a + blp, y)
        return a, None
    a, _ = lax.scan(step, a0, (jnp.swapaxes(bl, 0, 1)[:-1], jnp.swapaxes(yl, 0, 1)[1:]))
    return -(a[:, -1] + bl[:, -1, -1])


def rnnt_loss(enc, pred, wo, labels):
    lp = jax.nn.log_softmax(jnp.tanh(enc[:, :, None] + pred[:, None]) @ wo, -1)
    bl = lp[..., 0]
    yl = jnp.take_along_axis(lp[:, :, :-1], jnp.broadcast_to(labels[:, None, :, None], (B3, T3, U3, 1)), 3)[..., 0]
    return jnp.mean(rnnt_lattice(bl, yl))


def rnnt3(bug):
    def f(enc, pred, wo, labels):
        z = jnp.tanh(enc[:, :, None] + pred[:, None]) @ wo
        if bug == "normaliser-not-psummed":
            lp = jax.nn.log_softmax(z, -1)
        else:
            lp = vp_log_softmax(z)
        vl = lp.shape[-1]
        if bug == "blank-local-column-0":
            bl = psum(lp[..., 0], "tp")
        else:
            bl = psum(jnp.where(idx("tp") == 0, lp[..., 0], 0.0), "tp")
        yl = vp_take(lp[:, :, :-1], jnp.broadcast_to(labels[:, None], (enc.shape[0], T3, U3)))
        if bug == "blank-next-frame":
            bl = jnp.concatenate([bl[:, 1:], bl[:, -1:]], 1)
        return psum(jnp.sum(rnnt_lattice(bl, yl)), "dp") / B3
    return f


C.smap("s.rnnt_lattice_cumlogsumexp.dp2xtp4", {"dp": 2, "tp": 4}, rnnt3,
       (P("dp"), P("dp"), P(None, "tp"), P("dp")), P(), rnnt_loss,
       (R(B3, T3, H3), R(B3, U3 + 1, H3), R(H3, V3), I(1, V3, B3, U3)),
       bugs=[("blank-local-column-0", ["wrong-offset"]), ("normaliser-not-psummed", ["missing-collective"]),
             ("blank-next-frame", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 4. CTC forced alignment (Viterbi) with backpointers and a backtrack,
#    batch over dp2, vocab over tp4, blank 0; all utterances full length.
B4, T4, V4, U4 = 4, 10, 16, 3


def ctc_viterbi(em, skip):
    b, t, s = em.shape
    a0 = jnp.full((b, s), NEG).at[:, 0].set(em[:, 0, 0]).at[:, 1].set(em[:, 0, 1])

    def step(a, e):
        a1 = jnp.concatenate([jnp.full((b, 1), NEG), a[:, :-1]], 1)
        a2 = jnp.where(skip, jnp.concatenate([jnp.full((b, 2), NEG), a[:, :-2]], 1), NEG)
        cand = jnp.stack([a, a1, a2], -1)
        bp = jnp.argmax(cand, -1)
        return jnp.max(cand, -1) + e, bp
    a, bps = lax.scan(step, a0, jnp.swapaxes(em, 0, 1)[1:])  # bps (T-1, b, s)
    last = jnp.where(a[:, -1] >= a[:, -2], s - 1, s - 2)
    score = jnp.maximum(a[:, -1], a[:, -2])

    def back(st, bp):
        prev = st - jnp.take_along_axis(bp, st[:, None], 1)[:, 0]
        return prev, st
    first, path = lax.scan(back, last, bps, reverse=True)
    return score, jnp.concatenate([first[:, None], jnp.swapaxes(path, 0, 1)], 1)


def align_ref(logits, labels):
    lp = jax.nn.log_softmax(logits, -1)
    ext, skip = ctc_ext(labels, 0)
    em = jnp.take_along_axis(lp, jnp.broadcast_to(ext[:, None], (B4, T4, ext.shape[1])), 2)
    return ctc_viterbi(em, skip)


def align4(bug):
    def f(logits, labels):
        if bug == "lse-local-max":
            m = jnp.max(logits, -1, keepdims=True)
            lse = m + jnp.log(psum(jnp.sum(jnp.exp(logits - m), -1, keepdims=True), "tp"))
        else:
            lse = jnp.log(psum(jnp.exp(jax.nn.logsumexp(logits, -1, keepdims=True)), "tp"))
        lp = logits - lse
        ext, skip = ctc_ext(labels, 0)
        em = vp_take(lp[:, :, None, :], jnp.broadcast_to(ext[:, None], (logits.shape[0], T4, ext.shape[1])))
        score, path = ctc_viterbi(em, skip)
        if bug == "path-one-frame-late":
            path = jnp.concatenate([path[:, :1], path[:, :-1]], 1)
        return score, path
    return f


C.smap("s.ctc_forced_align_viterbi_backtrack.dp2xtp4", {"dp": 2, "tp": 4}, align4,
       (P("dp", None, "tp"), P("dp")), (P("dp"), P("dp")), align_ref,
       (R(B4, T4, V4, scale=2.0), I(1, V4, B4, U4)),
       bugs=[("lse-local-max", ["wrong-reduction"]), ("path-one-frame-late", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 5. HMM forward-backward, time over sp4, log-semiring products.
B5, T5, S5 = 2, 16, 4


def logmm(a, b):
    """log-semiring matrix product over the last two dims (batched)."""
    return jax.nn.logsumexp(a[..., :, :, None] + b[..., None, :, :], axis=-2)


def hmm_mats(logA, em, t0):
    """M_t[i, j] = logA[i, j] + e_t[j]; at global t == 0 the diagonal e_0."""
    t = t0 + jnp.arange(em.shape[1])
    diag = jnp.where(jnp.eye(S5, dtype=bool), em[:, :, None, :], NEG)
    full = logA + em[:, :, None, :]
    return jnp.where((t == 0)[None, :, None, None], diag, full)  # (b, t, S, S)


def hmm_fb_ref(logpi, logA, em):
    def fwd(a, e):
        a = jax.nn.logsumexp(a[:, :, None] + logA, 1) + e
        return a, a
    a0 = logpi + em[:, 0]
    _, al = lax.scan(fwd, a0, jnp.swapaxes(em, 0, 1)[1:])
    al = jnp.concatenate([a0[None], al], 0)

    def bwd(bt, e):
        bt = jax.nn.logsumexp(logA + (e + bt)[:, None, :], 2)
        return bt, bt
    bT = jnp.zeros((em.shape[0], S5))
    _, be = lax.scan(bwd, bT, jnp.swapaxes(em, 0, 1)[1:], reverse=True)
    be = jnp.concatenate([be, bT[None]], 0)
    ll = jax.nn.logsumexp(al[-1], -1)
    return ll, jnp.swapaxes(al + be, 0, 1) - ll[:, None, None]


def hmm5(bug):
    def f(logpi, logA, em):
        n, tl = 4, em.shape[1]
        me = idx("sp")
        M = hmm_mats(logA, em, me * tl)
        pre = lax.associative_scan(logmm, M, axis=1)  # M_s .. M_t
        tot = lax.all_gather(pre[:, -1], "sp")  # (n, b, S, S)
        # incoming forward vector: pi x T_0 x ... x T_{me-1}
        v = jnp.broadcast_to(logpi, (em.shape[0], S5))
        stop = me + 1 if bug == "prefix-includes-own-block" else me
        for d in (reversed(range(n)) if bug == "blocks-reversed" else range(n)):
            v = jnp.where(d < stop, jax.nn.logsumexp(v[:, :, None] + tot[d], 1), v)
        al = jax.nn.logsumexp(v[:, None, :, None] + pre, 2)  # (b, t, S)
        # outgoing backward vector: T_{me+1} x ... x T_{n-1} x 0
        w = jnp.zeros((em.shape[0], S5))
        for d in reversed(range(n)):
            keep = (d < me) if bug == "suffix-from-earlier-blocks" else (d > me)
            w = jnp.where(keep, jax.nn.logsumexp(tot[d] + w[:, None, :], 2), w)
        # local suffix: S_t = M_{t+1} .. M_e (identity at the block end)
        rev = lax.associative_scan(lambda a, b: logmm(b, a), M[:, ::-1], axis=1)[:, ::-1]
        eye = jnp.broadcast_to(jnp.where(jnp.eye(S5, dtype=bool), 0.0, NEG), (em.shape[0], 1, S5, S5))
        suf = jnp.concatenate([rev[:, 1:], eye], 1)
        be = jax.nn.logsumexp(suf + w[:, None, None, :], 3)
        ll = jax.nn.logsumexp(al[:, -1], -1)  # the last block's last step holds p(x)
        ll = pmax(jnp.where(me == n - 1, ll, NEG), "sp")
        return ll, al + be - ll[:, None, None]
    return f


LA5 = jax.nn.log_softmax(R(S5, S5), -1)
C.smap("s.hmm_forward_backward_assoc_scan_time.sp4", {"sp": 4}, hmm5, (P(), P(), P(None, "sp")),
       (P(), P(None, "sp")), hmm_fb_ref,
       (np.asarray(jax.nn.log_softmax(R(S5))), np.asarray(LA5), R(B5, T5, S5)),
       bugs=[("prefix-includes-own-block", ["wrong-offset"]), ("suffix-from-earlier-blocks", ["wrong-permutation"]),
             ("blocks-reversed", ["wrong-permutation"])])

# ---------------------------------------------------------------------------
# 6. WER counts: Levenshtein rows by cummin, batch over dp4.
B6, LH, LR = 8, 7, 6


def lev_rows(hyp, ref, hlen, rlen):
    """edit distance of hyp[:hlen] and ref[:rlen] per row (int32): rows
    over hypothesis positions; d[i][j] = min over k <= j of t[k] + (j - k)."""
    b = hyp.shape[0]
    j = jnp.arange(LR + 1, dtype=jnp.int32)
    d0 = jnp.broadcast_to(j, (b, LR + 1))

    def step(d, xs):
        h, i = xs
        sub = (h[:, None] != ref).astype(jnp.int32)
        t = jnp.concatenate([d[:, :1] + 1, jnp.minimum(d[:, 1:] + 1, d[:, :-1] + sub)], 1)
        return lax.cummin(t - j, axis=1) + j, d
    dl, rows = lax.scan(step, d0, (jnp.swapaxes(hyp, 0, 1), jnp.arange(1, LH + 1)))
    rows = jnp.concatenate([rows, dl[None]], 0)  # (LH+1, b, LR+1)
    rows = jnp.take_along_axis(jnp.swapaxes(rows, 0, 1), hlen[:, None, None], 1)[:, 0]
    return jnp.take_along_axis(rows, rlen[:, None], 1)[:, 0]


def wer_ref(hyp, ref, hlen, rlen):
    dist = lev_rows(hyp, ref, hlen, rlen)
    return dist, jnp.sum(dist), jnp.sum(dist).astype(jnp.float32) / jnp.sum(rlen)


def wer6(bug):
    def f(hyp, ref, hlen, rlen):
        dist = lev_rows(hyp, ref, hlen, rlen)
        err = jnp.sum(dist)
        if bug == "pmean-of-device-wers":
            return dist, psum(err, "dp"), pmean(err.astype(jnp.float32) / jnp.sum(rlen), "dp")
        if bug == "errors-not-psummed":
            return dist, err, err.astype(jnp.float32) / psum(jnp.sum(rlen), "dp")
        err = psum(err, "dp")
        den = jnp.sum(rlen) if bug == "local-ref-words" else psum(jnp.sum(rlen), "dp")
        return dist, err, err.astype(jnp.float32) / den
    return f


C.smap("s.wer_levenshtein_cummin_rows.dp4", {"dp": 4}, wer6, (P("dp"),) * 4, (P("dp"), P(), P()), wer_ref,
       (I(0, 5, B6, LH), I(0, 5, B6, LR), np.array([7, 3, 5, 6, 1, 7, 4, 2], np.int32),
        np.array([6, 4, 2, 6, 5, 1, 6, 3], np.int32)),
       bugs=[("local-ref-words", ["wrong-reduction"]), ("pmean-of-device-wers", ["wrong-collective-op"]),
             ("errors-not-psummed", ["missing-collective"])])

# ---------------------------------------------------------------------------
# 7. one beam-search step with a GNMT length penalty, vocab over tp4.
B7, K7, V7, ALPHA = 4, 3, 32, 0.6


def lpen(n):
    return ((5.0 + n) / 6.0) ** ALPHA


def beam_ref(logits, cum, length):
    lp = jax.nn.log_softmax(logits, -1)
    tot = cum[..., None] + lp  # (b, k, v)
    sc = tot / lpen(length + 1.0)[..., None]
    top, fid = lax.top_k(sc.reshape(sc.shape[0], -1), K7)
    return top, fid // V7, fid % V7


def beam7(bug):
    def f(logits, cum, length):
        vl = logits.shape[-1]
        lp = jax.nn.log_softmax(logits, -1) if bug == "local-normaliser" else vp_log_softmax(logits)
        n = length if bug == "penalty-on-old-length" else length + 1.0
        sc = (cum[..., None] + lp) / lpen(n)[..., None]
        ltop, lid = lax.top_k(sc.reshape(sc.shape[0], -1), K7)
        beam, tok = lid // vl, lid % vl
        if bug != "token-no-offset":
            tok = tok + idx("tp") * vl
        allv = lax.all_gather(ltop, "tp", axis=1, tiled=True)
        allb = lax.all_gather(beam, "tp", axis=1, tiled=True)
        allt = lax.all_gather(tok, "tp", axis=1, tiled=True)
        top, j = lax.top_k(allv, K7)
        return top, jnp.take_along_axis(allb, j, 1), jnp.take_along_axis(allt, j, 1)
    return f


C.smap("s.beam_step_gnmt_penalty_vocab_parallel.dp2xtp4", {"dp": 2, "tp": 4}, beam7,
       (P("dp", None, "tp"), P("dp"), P("dp")), (P("dp"), P("dp"), P("dp")), beam_ref,
       (R(B7, K7, V7, scale=2.0), -np.abs(R(B7, K7, scale=3.0)), I(1, 9, B7, K7).astype(np.float32)),
       bugs=[("token-no-offset", ["wrong-offset"]), ("local-normaliser", ["missing-collective"]),
             ("penalty-on-old-length", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 8. label-smoothed CE of a speech decoder, bf16 logits, vocab over tp4,
#    padded positions masked, mean over the global real-token count, and
#    the gradient in the head (check_vma=True).
B8, T8, D8, V8, EPS = 4, 6, 16, 32, 0.1


def ls_loss(w, h, tgt, mask):
    z = jnp.einsum("btd,dv->btv", h.astype(jnp.bfloat16), w.astype(jnp.bfloat16)).astype(jnp.float32)
    lp = jax.nn.log_softmax(z, -1)
    nll = -jnp.take_along_axis(lp, tgt[..., None], -1)[..., 0]
    smooth = -jnp.mean(lp, -1)
    per = (1 - EPS) * nll + EPS * smooth
    return jnp.sum(per * mask) / jnp.sum(mask)


def ls_ref(w, h, tgt, mask):
    return jax.value_and_grad(ls_loss)(w, h, tgt, mask)


def ls8(bug):
    def f(w, h, tgt, mask):
        def loss(w):
            z = jnp.einsum("btd,dv->btv", h.astype(jnp.bfloat16), w.astype(jnp.bfloat16)).astype(jnp.float32)
            lp = vp_log_softmax(z)
            vl = lp.shape[-1]
            nll = -vp_take(lp[..., None, :], tgt[..., None])[..., 0]
            if bug == "smooth-local-vocab":
                smooth = -psum(jnp.mean(lp, -1), "tp")
            else:
                smooth = -psum(jnp.sum(lp, -1), "tp") / (vl * 4)
            per = (1 - EPS) * nll + EPS * smooth
            num = psum(jnp.sum(per * mask), "dp")
            if bug == "local-token-count":
                return pmean(num / jnp.sum(mask) / 2, "dp")
            return num / psum(jnp.sum(mask), "dp")
        return jax.value_and_grad(loss)(w)
    return f


MASK8 = np.ones((B8, T8), np.float32)
MASK8[0, 4:] = 0
MASK8[1, 2:] = 0
MASK8[3, 5:] = 0
C.smap("s.label_smoothing_vocab_parallel_bf16_grad.dp2xtp4", {"dp": 2, "tp": 4}, ls8,
       (P(None, "tp"), P("dp"), P("dp"), P("dp")), (P(), P(None, "tp")), ls_ref,
       (R(D8, V8, scale=0.4), R(B8, T8, D8), I(0, V8, B8, T8), MASK8),
       bugs=[("smooth-local-vocab", ["wrong-scale"]), ("local-token-count", ["wrong-reduction"])],
       check_vma=True)

# ---------------------------------------------------------------------------
# 9. HMM Viterbi decoding, states over tp4, batch replicated.
B9, T9, S9 = 2, 8, 16


def hmm_viterbi_ref(logpi, logA, em):
    def step(d, e):
        c = d[:, :, None] + logA
        return jnp.max(c, 1) + e, jnp.argmax(c, 1)
    d0 = logpi + em[:, 0]
    d, bps = lax.scan(step, d0, jnp.swapaxes(em, 0, 1)[1:])
    last = jnp.argmax(d, -1)

    def back(st, bp):
        return jnp.take_along_axis(bp, st[:, None], 1)[:, 0], st
    first, path = lax.scan(back, last, bps, reverse=True)
    return jnp.max(d, -1), jnp.concatenate([first[:, None], jnp.swapaxes(path, 0, 1)], 1)


def viterbi9(bug):
    def f(logpi, logA, em):  # logpi (S/tp,), logA (S, S/tp), em (b, T, S/tp)
        sl = em.shape[-1]
        off = idx("tp") * sl
        d0 = logpi + em[:, 0]

        def step(d, t):
            e = em[:, t - 1] if bug == "emission-previous-frame" else em[:, t]
            full = lax.all_gather(d, "tp", axis=1, tiled=True)  # (b, S)
            c = full[:, :, None] + logA
            return jnp.max(c, 1) + e, jnp.argmax(c, 1)
        d, bps = lax.scan(step, d0, jnp.arange(1, T9))
        bps = lax.all_gather(bps, "tp", axis=2, tiled=True)  # (T-1, b, S) global prev states
        lmax, larg = jnp.max(d, -1), jnp.argmax(d, -1)
        if bug != "final-index-no-offset":
            larg = larg + off
        gm = lax.all_gather(lmax, "tp")  # (tp, b)
        ga = lax.all_gather(larg, "tp")
        w = jnp.argmax(gm, 0)
        last = jnp.take_along_axis(ga, w[None], 0)[0]
        path = jnp.zeros((d.shape[0], T9), jnp.int32).at[:, T9 - 1].set(last)

        def back(i, carry):
            st, path = carry
            t = T9 - 2 - i
            st = jnp.take_along_axis(bps[t], st[:, None], 1)[:, 0]
            return st, path.at[:, t].set(st)
        _, path = lax.fori_loop(0, T9 - 1, back, (last, path))
        return jnp.max(gm, 0), path
    return f


C.smap("s.hmm_viterbi_states_tp_allgather.tp4", {"tp": 4}, viterbi9, (P("tp"), P(None, "tp"), P(None, None, "tp")),
       (P(), P()), hmm_viterbi_ref,
       (np.asarray(jax.nn.log_softmax(R(S9))), np.asarray(jax.nn.log_softmax(R(S9, S9, scale=2.0), -1)),
        R(B9, T9, S9, scale=2.0)),
       bugs=[("final-index-no-offset", ["wrong-offset"]), ("emission-previous-frame", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 10. CTC forward with the TIME over sp4: the alpha carried from block to
#     block by a ppermute to the right neighbour, n - 1 rounds in which every
#     device rescans its block from what it received (a virtual alpha_{-1}
#     = log one_hot(0) on device 0); the last device holds the final alpha.
B10, T10, V10, U10 = 4, 16, 8, 3


def ctc_time_ref(logits, labels, llen):
    llen = jnp.clip(llen, 1, U10)
    lp = jax.nn.log_softmax(logits, -1)
    ext, skip = ctc_ext(labels, 0)
    em = jnp.take_along_axis(lp, jnp.broadcast_to(ext[:, None], (B10, T10, ext.shape[1])), 2)
    return jnp.mean(ctc_forward(em, skip, jnp.full((B10,), T10), llen))


def ctc_time_sp(bug):
    def f(logits, labels, llen):
        n = 4
        llen = jnp.clip(llen, 1, U10)
        me = idx("sp")
        lp = jax.nn.log_softmax(logits, -1)
        ext, skip = ctc_ext(labels, 0)
        em = jnp.take_along_axis(lp, jnp.broadcast_to(ext[:, None], lp.shape[:2] + ext.shape[1:]), 2)
        b, s = ext.shape

        def block(a):
            def step(a, e):
                a1 = jnp.concatenate([jnp.full((b, 1), NEG), a[:, :-1]], 1)
                a2 = jnp.concatenate([jnp.full((b, 2), NEG), a[:, :-2]], 1)
                return lse2(lse2(a, a1), jnp.where(skip, a2, NEG)) + e, None
            return lax.scan(step, a, jnp.swapaxes(em, 0, 1))[0]
        carry = jnp.full((b, s), NEG).at[:, 0].set(0.0)
        perm = [(i, i - 1) for i in range(1, n)] if bug == "carry-sent-left" else [(i, i + 1) for i in range(n - 1)]
        for r in range(n - 1):
            recv = lax.ppermute(block(carry), "sp", perm)
            carry = jnp.where(me == r + 1, recv, carry)
        a = block(carry)
        end = jnp.take_along_axis(a, jnp.stack([2 * llen, 2 * llen - 1], 1), 1)
        loss = jnp.mean(-lse2(end[:, 0], end[:, 1]))
        owner = 0 if bug == "loss-from-first-device" else n - 1
        return psum(jnp.where(me == owner, loss, 0.0), "sp")
    return f


C.smap("s.ctc_time_sharded_ppermute_pipeline.sp4", {"sp": 4}, ctc_time_sp, (P(None, "sp"), P(), P()), P(),
       ctc_time_ref, (R(B10, T10, V10, scale=1.5), I(1, V10, B10, U10), np.array([3, 2, 3, 1], np.int32)),
       bugs=[("carry-sent-left", ["wrong-permutation"]), ("loss-from-first-device", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 11. an RNN-T training step with optax.adam, batch over dp4: encoder layer,
#     prediction network = embedding of the previous label, joint + output;
#     jax.value_and_grad of the local mean loss, loss and gradients pmean'd.
B11, T11, F11, H11, V11, U11 = 8, 5, 6, 8, 8, 2
OPT11 = optax.adam(1e-2)


def rnnt_model_loss(p, x, labels):
    enc = jnp.tanh(x @ p["we"])
    prev = jnp.concatenate([jnp.zeros_like(labels[:, :1]), labels], 1)
    pred = p["emb"][prev]
    lp = jax.nn.log_softmax(jnp.tanh(enc[:, :, None] + pred[:, None]) @ p["wo"], -1)
    yl = jnp.take_along_axis(lp[:, :, :-1], jnp.broadcast_to(labels[:, None, :, None], lp.shape[:2] + (U11, 1)), 3)
    return jnp.mean(rnnt_lattice(lp[..., 0], yl[..., 0]))


def rnnt_step_ref(p, st, x, labels):
    l, g = jax.value_and_grad(rnnt_model_loss)(p, x, labels)
    u, st = OPT11.update(g, st, p)
    return optax.apply_updates(p, u), st, l


def rnnt_step_dp(bug):
    def f(p, st, x, labels):
        l, g = jax.value_and_grad(rnnt_model_loss)(p, x, labels)
        if bug == "grads-psummed":
            g = jax.tree.map(lambda a: psum(a, "dp"), g)
        elif bug != "grads-not-reduced":
            g = jax.tree.map(lambda a: pmean(a, "dp"), g)
        u, st = OPT11.update(g, st, p)
        return optax.apply_updates(p, u), st, pmean(l, "dp")
    return f


P11 = {"we": R(F11, H11, scale=0.5), "emb": R(V11, H11, scale=0.5), "wo": R(H11, V11, scale=0.5)}
S11 = jax.tree.map(np.asarray, OPT11.init(P11))
C.smap("s.rnnt_train_step_adam_dp.dp4", {"dp": 4}, rnnt_step_dp, (P(), P(), P("dp"), P("dp")), P(),
       rnnt_step_ref, (P11, S11, R(B11, T11, F11), I(1, V11, B11, U11)),
       bugs=[("grads-not-reduced", ["missing-collective"]), ("grads-psummed", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 12. HMM Viterbi max-plus step with the transition ROWS over tp4 (the
#     previous delta sharded the same way): partial maxima over the local
#     previous states pmax'd, the argmax as the smallest global index that
#     reaches the maximum (pmin of a masked iota), the new delta sliced back
#     to the own states.
B12, T12, S12 = 2, 6, 16


def viterbi_bp_ref(logpi, logA, em):
    def step(d, e):
        c = d[:, :, None] + logA
        return jnp.max(c, 1) + e, jnp.argmax(c, 1).astype(jnp.int32)
    d, bps = lax.scan(step, logpi + em[:, 0], jnp.swapaxes(em, 0, 1)[1:])
    return d, bps


def viterbi_rows(bug):
    def f(logpi, logA, em):  # logpi (S/tp,), logA (S/tp, S), em (b, T, S/tp)
        sl = logA.shape[0]
        off = idx("tp") * sl

        def step(d, t):
            c = d[:, :, None] + logA  # (b, sl, S)
            m = pmax(jnp.max(c, 1), "tp")  # (b, S)
            if bug == "argmax-local-index-pmax":
                arg = pmax(jnp.argmax(c, 1).astype(jnp.int32) + off, "tp")
            else:
                iota = (off + jnp.arange(sl, dtype=jnp.int32))[None, :, None]
                arg = pmin(jnp.min(jnp.where(c == m[:, None, :], iota, S12), 1), "tp")
            e = lax.dynamic_index_in_dim(em, t, 1, keepdims=False)
            mine = lax.dynamic_slice_in_dim(m, 0 if bug == "delta-slice-at-0" else off, sl, 1)
            return mine + e, arg
        d, bps = lax.scan(step, logpi + em[:, 0], jnp.arange(1, T12))
        return d, bps
    return f


pmin = lax.pmin
C.smap("s.hmm_viterbi_maxplus_rows_pmax_pmin.tp4", {"tp": 4}, viterbi_rows,
       (P("tp"), P("tp"), P(None, None, "tp")), (P(None, "tp"), P()), viterbi_bp_ref,
       (np.asarray(jax.nn.log_softmax(R(S12))), np.asarray(jax.nn.log_softmax(R(S12, S12, scale=2.0), -1)),
        R(B12, T12, S12, scale=2.0)),
       bugs=[("argmax-local-index-pmax", ["wrong-collective-op"]), ("delta-slice-at-0", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 13. KL-style label smoothing of an attention decoder's outputs, vocab over
#     tp4, batch over dp2, written another way: the log-sum-exp from the
#     all_gather'd per-shard log-sum-exps, the smoothing term as a pmean over
#     tp of local means (equal shard sizes), the target term by a
#     dynamic_slice of the shard's columns at the local index under a mask.
B13, T13, V13, EPS13 = 4, 5, 32, 0.2


def ls_kl_ref(z, tgt):
    lp = jax.nn.log_softmax(z, -1)
    q = jax.nn.one_hot(tgt, V13) * (1 - EPS13) + EPS13 / V13
    return jnp.mean(jnp.sum(q * (jnp.log(q) - lp), -1))


def ls_kl_tp(bug):
    def f(z, tgt):
        vl = z.shape[-1]
        lses = lax.all_gather(jax.nn.logsumexp(z, -1), "tp")  # (tp, b, t)
        lse = jax.nn.logsumexp(lses, 0) if bug != "lse-sum-of-shards" else jnp.sum(lses, 0)
        lp = z - lse[..., None]
        smooth = pmean(jnp.mean(lp, -1), "tp")
        loc = tgt if bug == "target-no-offset" else tgt - idx("tp") * vl
        ok = (loc >= 0) & (loc < vl)
        hit = jnp.take_along_axis(lp, jnp.clip(loc, 0, vl - 1)[..., None], -1)[..., 0]
        tgt_lp = psum(jnp.where(ok, hit, 0.0), "tp")
        hi, lo = 1 - EPS13 + EPS13 / V13, EPS13 / V13
        ent = hi * np.log(hi) + (V13 - 1) * lo * np.log(lo)
        per = ent - (hi - lo) * tgt_lp - lo * V13 * smooth
        return pmean(jnp.mean(per), "dp")
    return f


C.smap("s.label_smoothing_kl_allgather_lse_pmean.dp2xtp4", {"dp": 2, "tp": 4}, ls_kl_tp,
       (P("dp", None, "tp"), P("dp")), P(), ls_kl_ref, (R(B13, T13, V13, scale=2.0), I(0, V13, B13, T13)),
       bugs=[("lse-sum-of-shards", ["wrong-collective-op"]), ("target-no-offset", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 14. HMM backward pass with the time over sp4, beta carried to the LEFT
#     neighbour by ppermute in n - 1 rounds (the backward direction), each
#     block rescanned in reverse from what it received; the log-likelihood
#     on device 0 from pi, the first emission and beta_0.
B14, T14, S14 = 2, 12, 4


def hmm_bwd_ref(logpi, logA, em):
    def bwd(bt, e):
        bt = jax.nn.logsumexp(logA + (e + bt)[:, None, :], 2)
        return bt, bt
    bT = jnp.zeros((em.shape[0], S14))
    _, be = lax.scan(bwd, bT, jnp.swapaxes(em, 0, 1)[1:], reverse=True)
    be = jnp.concatenate([be, bT[None]], 0)
    ll = jax.nn.logsumexp(logpi + em[:, 0] + be[0], -1)
    return ll, jnp.swapaxes(be, 0, 1)


def hmm_bwd_sp(bug):
    def f(logpi, logA, em):
        n, tl = 4, em.shape[1]
        me = idx("sp")
        # e_{t+1} for the block's last step: the right neighbour's first emission
        src = [(i, i + 1) for i in range(n - 1)] if bug == "next-emission-from-left" else [(i, i - 1) for i in range(1, n)]
        nxt = lax.ppermute(em[:, :1], "sp", src)
        e_next = jnp.concatenate([em[:, 1:], nxt], 1)
        is_end = (me == n - 1) & (jnp.arange(tl) == tl - 1)  # beta_{T-1} = 0

        def block(bt):
            def bwd(bt, xs):
                e, end = xs
                new = jnp.where(end, 0.0, jax.nn.logsumexp(logA + (e + bt)[:, None, :], 2))
                return new, new
            return lax.scan(bwd, bt, (jnp.swapaxes(e_next, 0, 1), is_end), reverse=True)
        perm = [(i, i + 1) for i in range(n - 1)] if bug == "beta-sent-right" else [(i, i - 1) for i in range(1, n)]
        carry = jnp.zeros((em.shape[0], S14))
        for r in range(n - 1):
            first, _ = block(carry)
            recv = lax.ppermute(first, "sp", perm)
            carry = jnp.where(me == n - 2 - r, recv, carry)
        first, be = block(carry)
        ll = jax.nn.logsumexp(logpi + em[:, 0] + first, -1)
        return psum(jnp.where(me == 0, ll, 0.0), "sp"), jnp.swapaxes(be, 0, 1)
    return f


C.smap("s.hmm_backward_time_sp_ppermute_left.sp4", {"sp": 4}, hmm_bwd_sp, (P(), P(), P(None, "sp")),
       (P(), P(None, "sp")), hmm_bwd_ref,
       (np.asarray(jax.nn.log_softmax(R(S14))), np.asarray(jax.nn.log_softmax(R(S14, S14), -1)), R(B14, T14, S14)),
       bugs=[("beta-sent-right", ["wrong-permutation"]), ("next-emission-from-left", ["wrong-permutation"])])

# ---------------------------------------------------------------------------
# GSPMD pairs.
# 15. the CTC loss of 1. and its gradient in the logits.
C.gspmd("g.ctc_forward_loss_grad_logits.dp2xtp4", {"dp": 2, "tp": 4}, (P("dp", None, "tp"), P("dp"), P("dp"), P("dp")),
        (P(), P("dp", None, "tp")), jax.value_and_grad(ctc_loss1), (LOG1, LAB1, FL1, LL1))

# 16. the RNN-T loss of 3., batch over dp, output layer columns over tp.
C.gspmd("g.rnnt_loss_joint.dp2xtp4", {"dp": 2, "tp": 4}, (P("dp"), P("dp"), P(None, "tp"), P("dp")), P(), rnnt_loss,
        (R(B3, T3, H3), R(B3, U3 + 1, H3), R(H3, V3), I(1, V3, B3, U3)))


# 17. HMM forward-backward by associative_scan over the whole sequence
#     (log-semiring matrices), time over sp4.
def hmm_fb_assoc(logpi, logA, em):
    M = hmm_mats(logA, em, 0)
    pre = lax.associative_scan(logmm, M, axis=1)
    al = jax.nn.logsumexp(logpi[None, None, :, None] + pre, 2)
    rev = lax.associative_scan(lambda a, b: logmm(b, a), M[:, ::-1], axis=1)[:, ::-1]
    eye = jnp.broadcast_to(jnp.where(jnp.eye(S5, dtype=bool), 0.0, NEG), (em.shape[0], 1, S5, S5))
    be = jax.nn.logsumexp(jnp.concatenate([rev[:, 1:], eye], 1), 3)
    ll = jax.nn.logsumexp(al[:, -1], -1)
    return ll, al + be - ll[:, None, None]


C.gspmd("g.hmm_forward_backward_assoc.sp4", {"sp": 4}, (P(), P(), P(None, "sp")), (P(), P(None, "sp")), hmm_fb_assoc,
        (np.asarray(jax.nn.log_softmax(R(S5))), np.asarray(LA5), R(B5, T5, S5)))

# 18. Levenshtein distances and WER, batch over dp4.
C.gspmd("g.wer_levenshtein.dp4", {"dp": 4}, (P("dp"),) * 4, (P("dp"), P(), P()), wer_ref,
        (I(0, 4, B6, LH), I(0, 4, B6, LR), np.array([2, 7, 6, 5, 4, 7, 3, 1], np.int32),
         np.array([6, 1, 6, 4, 3, 5, 2, 6], np.int32)))

# 19. the beam-search step of 7.
C.gspmd("g.beam_step_gnmt_penalty.dp2xtp4", {"dp": 2, "tp": 4}, (P("dp", None, "tp"), P("dp"), P("dp")),
        (P("dp"), P("dp"), P("dp")), beam_ref,
        (R(B7, K7, V7, scale=2.0), -np.abs(R(B7, K7, scale=3.0)), I(1, 9, B7, K7).astype(np.float32)))

# 20. the CTC loss of 10. (full frames) with the time over sp4.
C.gspmd("g.ctc_time_sharded_loss.sp4", {"sp": 4}, (P(None, "sp"), P(), P()), P(), ctc_time_ref,
        (R(B10, T10, V10, scale=1.5), I(1, V10, B10, U10), np.array([2, 3, 1, 3], np.int32)))

# 21. HMM Viterbi deltas and backpointers (of 12.) with the states over tp4.
C.gspmd("g.hmm_viterbi_backpointers_states.tp4", {"tp": 4}, (P("tp"), P(None, "tp"), P(None, None, "tp")),
        (P(None, "tp"), P()), viterbi_bp_ref,
        (np.asarray(jax.nn.log_softmax(R(S12))), np.asarray(jax.nn.log_softmax(R(S12, S12, scale=2.0), -1)),
         R(B12, T12, S12, scale=2.0)))

C.finish()
