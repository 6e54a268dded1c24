"""samples/fresh82: an 82nd batch of programs as a user writes them, on the
theme of knowledge distillation and model combination under sharding in
current JAX / optax (temperature logit distillation with vocab-parallel
teacher and student logits, hidden-state distillation through a
row-parallel projection, attention-map distillation with heads over tp,
sequence-level distillation with response masks, weighted soups across
data-parallel replicas, task-vector arithmetic, TIES merging, LoRA merging
into a row-parallel base, ensembles with members on different devices and a
distillation training step), none of them an idiom of samples/fresh ..
fresh26, probe, train or wild.
shard_map families:
 1. temperature logit distillation, KL(teacher || student) at tau = 2 times
    tau^2, teacher and student logits both vocab-parallel over tp, batch
    over dp, a token mask; log-softmax over the global vocab (pmax of the
    maximum, psum of the exponentials); masked mean as psum / psum over dp.
    Bugs: log-softmax over the local vocab shard, the temperature on the
    student side only, the mask count not psum'd over dp.
 2. hidden-state distillation: student hidden (dim 16) over tp, teacher
    hidden (dim 32) over tp on its own dim, a row-parallel projection
    student -> teacher whose partial products are psum_scatter'd onto the
    teacher's blocks; the teacher layer-normed over its full dim (psum'd
    moments); MSE psum'd over (dp, tp). Bugs: teacher moments from the
    local shard, psum then the first block taken (offset 0), the loss sum
    psum'd over dp only.
 3. attention-map distillation (MiniLM style, non-causal with a key padding
    mask): 8 student heads over tp4, 16 teacher heads passed replicated,
    each student head matched to the mean of 2 teacher heads, the rank's
    teacher heads taken by dynamic_slice at 4 * rank; KL by xlogy; psum'd
    over (dp, tp). Bugs: teacher heads sliced at offset 0, at 2 * rank,
    loss not psum'd over tp.
 4. sequence-level distillation: the student's NLL of teacher-generated
    tokens with a response mask, vocab-parallel LM head over tp, per-
    sequence mean then batch mean over dp. Bugs: target index without the
    vocab offset, log-sum-exp of the local shard, batch mean of the local
    rows only.
 5. a weighted model soup of 4 replicas stacked over dp (softmax of held-out
    scores over the replicas, psum over dp of the weighted parameters),
    each replica's MLP Megatron-sharded over tp2; the soup evaluated on a
    batch. Bugs: softmax over the local replica only, the weighted sum over
    tp instead of dp, the row-parallel output not psum'd.
 6. task-vector arithmetic in bf16 (tasks over m4, weights over tp2):
    base + sum_k lam_k (theta_k - base) with a negative lam for
    forgetting, computed in f32, plus each task vector's global norm.
    Bugs: norm of the local shard, pmean over tasks instead of psum, the
    sum over tp instead of m.
 7. TIES merging (tasks over m4, weights over tp2; the task vectors passed
    in precomputed): trim each task vector to
    its top 25% by a threshold from the all_gather'd magnitudes of the
    whole matrix, elect the sign from the psum over tasks, disjoint mean
    over agreeing tasks (psum'd values / psum'd counts). Bugs: threshold
    from the local shard, sign elected per device, counts not psum'd.
 8. LoRA merged into a row-parallel base weight (input dim over tp4, batch
    over dp2), A passed replicated and sliced at the rank's rows, B
    replicated; the merged weight and the layer output. Bugs: the unmerged
    LoRA product (all-reduced) added on every tp rank before the psum, A
    rows from block 0, the output psum'd over dp.
 9. an ensemble of 4 MLP members over ens4, batch over dp2: mean of the
    members' probabilities (pmean), log of the mean and the mutual
    information (entropy of the mean minus the mean entropy). Bugs: mean of
    logits before the softmax, psum'd probabilities, the member entropy
    not averaged.
10. a distillation training step (check_vma=True): Megatron MLP student
    over tp4, batch over dp2, loss alpha tau^2 KL + (1 - alpha) CE pmean'd
    over dp, jax.grad, optax.sgd with momentum (trace state sharded as the
    parameters). Bugs: loss psum'd over dp (gradients doubled), the
    temperature on the teacher only.
11. an ensemble of 8 members, 2 per device over ens4 (vmap over the local
    members, local mean, pmean), the averaged log-probabilities and the
    members' variance. Bugs: local members only, variance pmean'd over dp.
12. weight averaging across dp4 replicas after local SGD (lax.scan of 3
    jax.grad steps per replica from the same start), then pmean of the
    parameters; the baseline vmaps the replicas. Bugs: psum of the
    parameters, averaging before the last local step.
13. DoRA merged into a row-parallel base weight (per-output-column norm
    over the tp-sharded input dim, psum'd). Bugs: the local column norm, a
    psum of local rsqrt's.
14. sequence-level distillation from sampled teacher sequences, sequence
    over sp, groups of 4 samples over dp: weights a group softmax of the
    teacher's sequence log-probs (psum'd over sp), length-normalised
    student NLL. Bugs: softmax of the per-block partial log-probs, lengths
    of the local block, group sum not psum'd over dp.
15. TIES merging of 8 task vectors, 2 per device over m4 (vmap'd sorts of
    the all_gather'd magnitudes, sums over the local task axis then psum
    over m, per-task lam). Bugs: threshold from the local shard, sign
    elected per device, counts psum'd over tp.
16. generalised JSD (beta 0.3) on bf16 vocab-parallel logits, the global
    log-sum-exp merged from all_gather'd per-shard maxima and rescaled sums.
    Bugs: shard sums not rescaled to the global max, betas swapped.
17. cosine hidden-state distillation, student sequence over sp and teacher
    dim over the same axis, the projection all_to_all'd from sequence
    blocks to dim blocks. Bugs: all_gather then the first dim block, the
    teacher norm of the local block.
18. a hard-vote ensemble over ens4 (argmax one-hots psum'd, winner by
    argmax, vote share). Bugs: votes not summed, share over local members.
19. a uniform soup of 8 replicas over a2 x b4 by psum_scatter then
    all_gather over (a, b). Bugs: scatter axes in the order (b, a), divided
    by the inner axis size.
20. ensemble averaging by a hand-written ring all-reduce (ppermute in a
    lax.fori_loop). Bugs: one hop short, divided by the hop count.
21. the soup of 19. as one pmean over (a, b). Bug: pmean over b only.
GSPMD pairs (jax.jit with in/out shardings): the logit distillation loss of
1. (dp2 x tp4); TIES merging of 7. and of 15. (m4 x tp2); the LoRA merge
and forward of 8.; the ensemble of 9.; the distillation training step of
10.; hidden-state distillation of 2. with the projection column-parallel;
the local-SGD replica average of 12.; the DoRA merge of 13.; the group-
weighted sequence distillation of 14.; the cosine distillation of 17.; the
generalised JSD of 16.
Left out, as idioms of earlier batches: EMA teachers and the plain
vocab-parallel KD of fresh66 (here with masks, JSD and all_gather'd
log-sum-exp merges), the wide-teacher hidden distillation of fresh52 (here
reduce-scattered and all_to_all'd projections), uniform pmean soups of
fresh60 (here weighted, 2-D reduce-scatter and after local SGD).
Numerics: every correct pair agrees with its baseline at rounding level;
every bug variant differs clearly (see "numerics").
Run from the repository root: bash samples/gen/run_fresh82.sh [SUBSTR...]
"""
import sys
import numpy as np
import jax, jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec as P
from jax.scipy.special import xlogy
import optax
sys.path.insert(0, "samples/gen")  # run from the repository root (run_fresh82.sh)
from fresh_lib import Corpus, seeded, state_specs  # noqa: E402

SCRIPT = "samples/gen/fresh82.py"
C = Corpus("samples/fresh82", SCRIPT, "samples/gen/run_fresh82.sh", sys.argv[1:])
rng, R, I = seeded(8282)
psum, pmax, pmean, idx = lax.psum, lax.pmax, lax.pmean, lax.axis_index
NEG = -1e30


def vp_log_softmax(z, axis_name="tp"):
    m = pmax(lax.stop_gradient(jnp.max(z, -1, keepdims=True)), axis_name)
    s = psum(jnp.sum(jnp.exp(z - m), -1, keepdims=True), axis_name)
    return z - m - jnp.log(s)


# ---------------------------------------------------------------------------
# 1. temperature logit distillation, vocab over tp, batch over dp.
TAU = 2.0
B1, T1, V1 = 8, 4, 32


def kd_loss(zs, zt, mask):
    lpt = jax.nn.log_softmax(zt / TAU, -1)
    lps = jax.nn.log_softmax(zs / TAU, -1)
    kl = jnp.sum(jnp.exp(lpt) * (lpt - lps), -1)
    return TAU ** 2 * jnp.sum(kl * mask) / jnp.sum(mask)


def kd_loss_vp(bug):
    def f(zs, zt, mask):
        lsm = (lambda z: jax.nn.log_softmax(z, -1)) if bug == "local-vocab-softmax" else vp_log_softmax
        lpt = lsm(zt if bug == "temperature-student-only" else zt / TAU)
        lps = lsm(zs / TAU)
        kl = psum(jnp.sum(jnp.exp(lpt) * (lpt - lps), -1), "tp")
        num = psum(jnp.sum(kl * mask), "dp")
        den = jnp.sum(mask) if bug == "mask-count-local" else psum(jnp.sum(mask), "dp")
        return TAU ** 2 * num / den
    return f


MASK1 = (rng.random((B1, T1)) < 0.6).astype(np.float32)
MASK1[:4, 0] = 1.0
MASK1[4:] = 1.0  # the second dp shard has every token, the first fewer
C.smap("s.kd_logits_temperature_vocab_parallel.dp2xtp4", {"dp": 2, "tp": 4}, kd_loss_vp,
       (P("dp", None, "tp"), P("dp", None, "tp"), P("dp")), P(), kd_loss,
       (R(B1, T1, V1, scale=2.0), R(B1, T1, V1, scale=2.0), MASK1),
       bugs=[("local-vocab-softmax", ["missing-all-reduce"]), ("temperature-student-only", ["wrong-scale"]),
             ("mask-count-local", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 2. hidden-state distillation: row-parallel projection student -> teacher
#    dim, reduce-scattered onto the teacher's dim blocks; teacher layer-normed.
B2, T2, DS, DT = 4, 4, 16, 32


def ln(x, eps=1e-5):
    mu = jnp.mean(x, -1, keepdims=True)
    var = jnp.mean(jnp.square(x - mu), -1, keepdims=True)
    return (x - mu) * lax.rsqrt(var + eps)


def hid_distill(hs, w, ht):
    proj = jnp.einsum("btd,de->bte", hs, w)
    return jnp.mean(jnp.square(proj - ln(ht)))


def hid_distill_tp(bug):
    def f(hs, w, ht):
        part = jnp.einsum("btd,de->bte", hs, w)  # partial sums over the student dim
        if bug == "psum-then-block-zero":
            proj = psum(part, "tp")[..., :ht.shape[-1]]
        else:
            proj = lax.psum_scatter(part, "tp", scatter_dimension=2, tiled=True)
        if bug == "teacher-moments-local":
            tn = ln(ht)
        else:
            mu = psum(jnp.sum(ht, -1, keepdims=True), "tp") / DT
            var = psum(jnp.sum(jnp.square(ht - mu), -1, keepdims=True), "tp") / DT
            tn = (ht - mu) * lax.rsqrt(var + 1e-5)
        sq = jnp.sum(jnp.square(proj - tn))
        tot = psum(sq, "dp") if bug == "loss-sum-dp-only" else psum(sq, ("dp", "tp"))
        return tot / (B2 * T2 * DT)
    return f


C.smap("s.hidden_distill_rowparallel_proj_scatter.dp2xtp4", {"dp": 2, "tp": 4}, hid_distill_tp,
       (P("dp", None, "tp"), P("tp", None), P("dp", None, "tp")), P(), hid_distill,
       (R(B2, T2, DS), R(DS, DT, scale=0.3), 0.5 + R(B2, T2, DT, scale=2.0)),
       bugs=[("teacher-moments-local", ["missing-all-reduce"]), ("psum-then-block-zero", ["wrong-offset"]),
             ("loss-sum-dp-only", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 3. attention-map distillation: student heads over tp, teacher maps
#    replicated and sliced at the rank's heads (2 teacher heads per student
#    head, averaged), non-causal with a key padding mask.
B3, T3, D3, HS, HT, E3 = 4, 6, 16, 8, 16, 4


def teacher_maps(kmask):
    s = rng.standard_normal((B3, HT, T3, T3)) * 2.0
    s = np.where(kmask[:, None, None, :] > 0, s, -np.inf)
    e = np.exp(s - s.max(-1, keepdims=True))
    return (e / e.sum(-1, keepdims=True)).astype(np.float32)


def student_logp(x, wq, wk, kmask):
    q = jnp.einsum("btd,dhe->bhte", x, wq)
    k = jnp.einsum("btd,dhe->bhte", x, wk)
    s = jnp.einsum("bhqe,bhke->bhqk", q, k) / np.sqrt(E3)
    s = jnp.where(kmask[:, None, None, :] > 0, s, NEG)
    return jax.nn.log_softmax(s, -1)


def attn_kl_sum(at, lps):
    at = at.reshape(at.shape[0], -1, 2, T3, T3).mean(2)
    return jnp.sum(xlogy(at, at) - at * lps)


def attn_distill(x, wq, wk, at, kmask):
    return attn_kl_sum(at, student_logp(x, wq, wk, kmask)) / (B3 * HS * T3)


def attn_distill_tp(bug):
    def f(x, wq, wk, at, kmask):
        hl = wq.shape[1]
        lps = student_logp(x, wq, wk, kmask)
        start = {"teacher-heads-offset-zero": 0, "teacher-heads-stride-half": idx("tp") * hl}.get(bug,
                                                                                                   idx("tp") * 2 * hl)
        mine = lax.dynamic_slice_in_dim(at, start, 2 * hl, axis=1)
        tot = attn_kl_sum(mine, lps)
        tot = psum(tot, "dp") if bug == "no-tp-sum" else psum(tot, ("dp", "tp"))
        return tot / (B3 * HS * T3)
    return f


KM3 = np.ones((B3, T3), np.float32)
KM3[0, 4:] = 0
KM3[3, 5:] = 0
KM3[1, 3:] = 0
C.smap("s.attention_map_distill_heads_tp.dp2xtp4", {"dp": 2, "tp": 4}, attn_distill_tp,
       (P("dp"), P(None, "tp"), P(None, "tp"), P("dp"), P("dp")), P(), attn_distill,
       (R(B3, T3, D3), R(D3, HS, E3, scale=0.5), R(D3, HS, E3, scale=0.5), teacher_maps(KM3), KM3),
       bugs=[("teacher-heads-offset-zero", ["wrong-offset"]), ("teacher-heads-stride-half", ["wrong-offset"]),
             ("no-tp-sum", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 4. sequence-level distillation: the student's NLL of teacher-generated
#    sequences with a response mask, vocab-parallel head.
B4, T4, D4, V4 = 8, 6, 16, 64


def seqkd(h, w, tok, resp):
    lg = jnp.einsum("btd,dv->btv", h, w)
    nll = jax.nn.logsumexp(lg, -1) - jnp.take_along_axis(lg, tok[..., None], -1)[..., 0]
    per_seq = jnp.sum(nll * resp, 1) / jnp.maximum(jnp.sum(resp, 1), 1.0)
    return jnp.mean(per_seq)


def seqkd_vp(bug):
    def f(h, w, tok, resp):
        vl = w.shape[1]
        lg = jnp.einsum("btd,dv->btv", h, w)
        if bug == "lse-local-shard":
            lse = jax.nn.logsumexp(lg, -1)
        else:
            m = pmax(jnp.max(lg, -1), "tp")
            lse = m + jnp.log(psum(jnp.sum(jnp.exp(lg - m[..., None]), -1), "tp"))
        loc = tok if bug == "target-no-vocab-offset" else tok - idx("tp") * vl
        ok = (loc >= 0) & (loc < vl)
        g = jnp.take_along_axis(lg, jnp.clip(loc, 0, vl - 1)[..., None], -1)[..., 0]
        tgt = psum(jnp.where(ok, g, 0.0), "tp")
        per_seq = jnp.sum((lse - tgt) * resp, 1) / jnp.maximum(jnp.sum(resp, 1), 1.0)
        if bug == "batch-mean-local":
            return jnp.mean(per_seq)
        return psum(jnp.sum(per_seq), "dp") / B4
    return f


RESP4 = np.zeros((B4, T4), np.float32)
for r_, (a_, b_) in enumerate([(2, 6), (1, 5), (3, 6), (2, 4), (1, 6), (4, 6), (2, 5), (0, 3)]):
    RESP4[r_, a_:b_] = 1.0
C.smap("s.seqlevel_distill_response_mask_vocab.dp2xtp4", {"dp": 2, "tp": 4}, seqkd_vp,
       (P("dp"), P(None, "tp"), P("dp"), P("dp")), P(), seqkd,
       (R(B4, T4, D4), R(D4, V4, scale=0.5), I(0, V4, B4, T4), RESP4),
       bugs=[("target-no-vocab-offset", ["wrong-offset"]), ("lse-local-shard", ["missing-all-reduce"]),
             ("batch-mean-local", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 5. weighted model soup of replicas stacked over dp; each replica's MLP over tp.
R5, D5, F5, O5, N5 = 4, 8, 16, 8, 6


def soup(w1s, w2s, score, x):
    a = jax.nn.softmax(score / 0.5)
    w1 = jnp.einsum("r,rdf->df", a, w1s)
    w2 = jnp.einsum("r,rfo->fo", a, w2s)
    return w1, w2, jax.nn.gelu(x @ w1) @ w2


def soup_dp(bug):
    def f(w1s, w2s, score, x):
        s = score / 0.5
        if bug == "softmax-local-replica":
            a = jnp.exp(s - s)
        else:
            m = pmax(jnp.max(s), "dp")
            e = jnp.exp(s - m)
            a = e / psum(jnp.sum(e), "dp")
        ax = "tp" if bug == "soup-over-tp" else "dp"
        w1 = psum(a[0] * w1s[0], ax)
        w2 = psum(a[0] * w2s[0], ax)
        y = jax.nn.gelu(x @ w1) @ w2
        if bug != "row-output-not-psummed":
            y = psum(y, "tp")
        return w1, w2, y
    return f


C.smap("s.weighted_soup_replicas_dp_megatron_eval.dp4xtp2", {"dp": 4, "tp": 2}, soup_dp,
       (P("dp", None, "tp"), P("dp", "tp", None), P("dp"), P()), (P(None, "tp"), P("tp", None), P()), soup,
       (R(R5, D5, F5, scale=0.4), R(R5, F5, O5, scale=0.4), R(R5), R(N5, D5)),
       bugs=[("softmax-local-replica", ["missing-all-reduce"]), ("soup-over-tp", ["wrong-axis"]),
             ("row-output-not-psummed", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 6. task-vector arithmetic, bf16 weights computed in f32, tasks over m.
K6, D6, F6 = 4, 8, 16


def task_arith(base, thetas, lam):
    b = base.astype(jnp.float32)
    tau = thetas.astype(jnp.float32) - b
    merged = b + jnp.einsum("k,kdf->df", lam, tau)
    return merged, jnp.sqrt(jnp.sum(jnp.square(tau), (1, 2)))


def task_arith_m(bug):
    def f(base, thetas, lam):
        b = base.astype(jnp.float32)
        tau = thetas.astype(jnp.float32) - b
        contrib = lam[0] * tau[0]
        if bug == "pmean-over-tasks":
            merged = b + pmean(contrib, "m")
        elif bug == "sum-over-tp":
            merged = b + psum(contrib, "tp")
        else:
            merged = b + psum(contrib, "m")
        sq = jnp.sum(jnp.square(tau), (1, 2))
        if bug != "norm-local-shard":
            sq = psum(sq, "tp")
        return merged, jnp.sqrt(sq)
    return f


LAM6 = np.array([0.5, 0.3, -0.4, 0.2], np.float32)
BASE6 = R(D6, F6)
C.smap("s.task_vector_arith_bf16_tasks_m.m4xtp2", {"m": 4, "tp": 2}, task_arith_m,
       (P(None, "tp"), P("m", None, "tp"), P("m")), (P(None, "tp"), P("m")), task_arith,
       (BASE6.astype(jnp.bfloat16), (BASE6[None] + R(K6, D6, F6, scale=0.2)).astype(jnp.bfloat16), LAM6),
       bugs=[("norm-local-shard", ["missing-all-reduce"]), ("pmean-over-tasks", ["wrong-scale"]),
             ("sum-over-tp", ["wrong-axis"])])

# ---------------------------------------------------------------------------
# 7. TIES merging: trim (global top-25% per task), elect sign (psum over
#    tasks), disjoint mean.
K7, D7, F7 = 4, 8, 16
KEEP7 = D7 * F7 // 4
LAM7 = 0.8


def ties(base, taus):
    tau = taus
    mag = jnp.abs(tau).reshape(K7, -1)
    thr = jnp.sort(mag, -1)[:, -KEEP7]
    tr = jnp.where(jnp.abs(tau) >= thr[:, None, None], tau, 0.0)
    sgn = jnp.sign(jnp.sum(tr, 0))
    agree = (jnp.sign(tr) == sgn[None]) & (tr != 0)
    num = jnp.sum(jnp.where(agree, tr, 0.0), 0)
    cnt = jnp.sum(agree.astype(jnp.float32), 0)
    return base + LAM7 * num / jnp.maximum(cnt, 1.0)


def ties_m(bug):
    def f(base, taus):
        tau = taus[0]
        if bug == "local-threshold":
            mag = jnp.abs(tau).reshape(-1)
        else:
            mag = lax.all_gather(jnp.abs(tau), "tp", axis=1, tiled=True).reshape(-1)
        thr = jnp.sort(mag)[-KEEP7] if bug != "local-threshold" else jnp.sort(mag)[-KEEP7 // 2]
        tr = jnp.where(jnp.abs(tau) >= thr, tau, 0.0)
        sgn = jnp.sign(tr) if bug == "sign-per-device" else jnp.sign(psum(tr, "m"))
        agree = (jnp.sign(tr) == sgn) & (tr != 0)
        num = psum(jnp.where(agree, tr, 0.0), "m")
        cnt = agree.astype(jnp.float32)
        if bug != "count-not-summed":
            cnt = psum(cnt, "m")
        return base + LAM7 * num / jnp.maximum(cnt, 1.0)
    return f


BASE7 = R(D7, F7)  # the task vectors (fine-tuned minus base) are passed in, as saved
C.smap("s.ties_merge_trim_elect_disjoint.m4xtp2", {"m": 4, "tp": 2}, ties_m,
       (P(None, "tp"), P("m", None, "tp")), P(None, "tp"), ties,
       (BASE7, R(K7, D7, F7, scale=0.1)),
       bugs=[("local-threshold", ["missing-collective"]), ("sign-per-device", ["missing-all-reduce"]),
             ("count-not-summed", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 8. LoRA merged into a row-parallel base weight.
N8, DI8, DO8, R8, ALPHA8 = 8, 32, 16, 4, 8.0


def lora_merge(w, a, b, x):
    wm = w + (ALPHA8 / R8) * (a @ b)
    return wm, x @ wm


def lora_merge_tp(bug):
    def f(w, a, b, x):
        dl = w.shape[0]
        off = 0 if bug == "A-rows-block-zero" else idx("tp") * dl
        al = lax.dynamic_slice_in_dim(a, off, dl, axis=0)
        wm = w + (ALPHA8 / R8) * (al @ b)
        if bug == "lora-on-every-rank":
            xa = psum(x @ al, "tp")
            y = psum(x @ w + (ALPHA8 / R8) * (xa @ b), "tp")
        elif bug == "output-psum-dp":
            y = psum(x @ wm, "dp")
        else:
            y = psum(x @ wm, "tp")
        return wm, y
    return f


C.smap("s.lora_merge_rowparallel_base.dp2xtp4", {"dp": 2, "tp": 4}, lora_merge_tp,
       (P("tp", None), P(), P(), P("dp", "tp")), (P("tp", None), P("dp")), lora_merge,
       (R(DI8, DO8, scale=0.3), R(DI8, R8, scale=0.3), R(R8, DO8, scale=0.3), R(N8, DI8)),
       bugs=[("lora-on-every-rank", ["wrong-scale"]), ("A-rows-block-zero", ["wrong-offset"]),
             ("output-psum-dp", ["wrong-axis"])])

# ---------------------------------------------------------------------------
# 9. ensemble members over ens, batch over dp.
M9, N9, D9, F9, C9 = 4, 8, 8, 16, 6


def entropy(p):
    return -jnp.sum(xlogy(p, p), -1)


def member_probs(w1, w2, x):
    return jax.nn.softmax(jnp.tanh(x @ w1) @ w2, -1)


def ensemble(w1s, w2s, x):
    ps = jax.vmap(member_probs, (0, 0, None))(w1s, w2s, x)
    pm = jnp.mean(ps, 0)
    mi = entropy(pm) - jnp.mean(jax.vmap(entropy)(ps), 0)
    return jnp.log(pm), mi


def ensemble_ens(bug):
    def f(w1s, w2s, x):
        if bug == "mean-logits":
            pm = jax.nn.softmax(pmean(jnp.tanh(x @ w1s[0]) @ w2s[0], "ens"), -1)
            p = member_probs(w1s[0], w2s[0], x)
        else:
            p = member_probs(w1s[0], w2s[0], x)
            pm = psum(p, "ens") if bug == "psum-probs" else pmean(p, "ens")
        hbar = entropy(p) if bug == "member-entropy-not-averaged" else pmean(entropy(p), "ens")
        return jnp.log(pm), entropy(pm) - hbar
    return f


C.smap("s.ensemble_members_over_devices_bald.ens4xdp2", {"ens": 4, "dp": 2}, ensemble_ens,
       (P("ens"), P("ens"), P("dp")), (P("dp"), P("dp")), ensemble,
       (R(M9, D9, F9, scale=0.6), R(M9, F9, C9, scale=0.8), R(N9, D9)),
       bugs=[("mean-logits", ["wrong-op"]), ("psum-probs", ["wrong-scale"]),
             ("member-entropy-not-averaged", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 10. a distillation training step: Megatron MLP student over tp, batch over
#     dp, alpha tau^2 KL + (1 - alpha) CE, jax.grad, optax.sgd with momentum.
N10, D10, F10, V10, ALPHA10, TAU10 = 8, 8, 16, 12, 0.7, 3.0
OPT10 = optax.sgd(0.2, momentum=0.9)
PAR10 = {"w1": R(D10, F10, scale=0.4), "w2": R(F10, V10, scale=0.4)}
SPEC10 = {"w1": P(None, "tp"), "w2": P("tp", None)}
ST10 = OPT10.init(PAR10)
ST10 = jax.tree.map(lambda a: np.asarray(a) + R(*a.shape, scale=0.05) if np.ndim(a) == 2 else a, ST10)
SS10 = state_specs(ST10, SPEC10)


def distill_objective(logits, zt, y, tau_s=TAU10, tau_t=TAU10):
    lpt = jax.nn.log_softmax(zt / tau_t, -1)
    lps = jax.nn.log_softmax(logits / tau_s, -1)
    kl = jnp.sum(jnp.exp(lpt) * (lpt - lps), -1)
    ce = -jnp.take_along_axis(jax.nn.log_softmax(logits, -1), y[:, None], -1)[:, 0]
    return jnp.mean(ALPHA10 * TAU10 ** 2 * kl + (1 - ALPHA10) * ce)


def distill_step(p, s, x, zt, y):
    def loss(p):
        return distill_objective(jax.nn.gelu(x @ p["w1"]) @ p["w2"], zt, y)
    l, g = jax.value_and_grad(loss)(p)
    u, s = OPT10.update(g, s, p)
    return optax.apply_updates(p, u), s, l


def distill_step_tp(bug):
    def f(p, s, x, zt, y):
        def loss(p):
            logits = psum(jax.nn.gelu(x @ p["w1"]) @ p["w2"], "tp")
            kw = {"tau_s": 1.0} if bug == "temperature-teacher-only" else {}
            l = distill_objective(logits, zt, y, **kw)
            return psum(l, "dp") if bug == "loss-psum-dp" else pmean(l, "dp")
        l, g = jax.value_and_grad(loss)(p)
        u, s = OPT10.update(g, s, p)
        return optax.apply_updates(p, u), s, l
    return f


C.smap("s.distill_train_step_megatron_sgd_momentum.dp2xtp4", {"dp": 2, "tp": 4}, distill_step_tp,
       (SPEC10, SS10, P("dp"), P("dp"), P("dp")), (SPEC10, SS10, P()), distill_step,
       (PAR10, ST10, R(N10, D10), R(N10, V10, scale=2.0), I(0, V10, N10)),
       bugs=[("loss-psum-dp", ["wrong-scale"]), ("temperature-teacher-only", ["wrong-scale"])], check_vma=True)


# ---------------------------------------------------------------------------
# 11. an ensemble of 8 members, 2 per device over ens4 (vmap over the local
#     members, their mean, then pmean over ens), batch over dp2; the averaged
#     log-probabilities and the members' disagreement (variance of p).
M11 = 8


def ensemble2(w1s, w2s, x):
    ps = jax.vmap(member_probs, (0, 0, None))(w1s, w2s, x)
    pm = jnp.mean(ps, 0)
    return jnp.log(pm), jnp.mean(jnp.square(ps - pm), 0).sum(-1)


def ensemble2_ens(bug):
    def f(w1s, w2s, x):
        ps = jax.vmap(member_probs, (0, 0, None))(w1s, w2s, x)
        loc = jnp.mean(ps, 0)
        pm = loc if bug == "local-members-only" else pmean(loc, "ens")
        dev = jnp.mean(jnp.square(ps - pm), 0)
        dev = pmean(dev, "dp") if bug == "variance-pmean-dp" else pmean(dev, "ens")
        return jnp.log(pm), dev.sum(-1)
    return f


C.smap("s.ensemble_two_members_per_device_vmap.ens4xdp2", {"ens": 4, "dp": 2}, ensemble2_ens,
       (P("ens"), P("ens"), P("dp")), (P("dp"), P("dp")), ensemble2,
       (R(M11, D9, F9, scale=0.6), R(M11, F9, C9, scale=0.8), R(N9, D9)),
       bugs=[("local-members-only", ["missing-all-reduce"]), ("variance-pmean-dp", ["wrong-axis"])])

# ---------------------------------------------------------------------------
# 12. weight averaging across data-parallel replicas after local SGD (a
#     lax.scan of 3 jax.grad steps on each replica's own batches from the
#     same start), then pmean of the parameters; the baseline vmaps the
#     replicas.
R12, S12, N12, D12, O12, LR12 = 4, 3, 4, 8, 4, 0.1


def local_sgd(p, xs, ys):
    def step(p, b):
        x, y = b
        g = jax.grad(lambda p: jnp.mean(jnp.square(jnp.tanh(x @ p["w"]) @ p["v"] - y)))(p)
        return jax.tree.map(lambda a, b: a - LR12 * b, p, g), None
    return lax.scan(step, p, (xs, ys))[0]


def avg_replicas(p, xs, ys):
    ps = jax.vmap(local_sgd, (None, 0, 0))(p, xs, ys)
    return jax.tree.map(lambda a: jnp.mean(a, 0), ps)


def avg_replicas_dp(bug):
    def f(p, xs, ys):
        if bug == "average-before-last-step":
            q = local_sgd(p, xs[0, :-1], ys[0, :-1])
            q = jax.tree.map(lambda a: pmean(a, "dp"), q)
            return local_sgd(q, xs[0, -1:], ys[0, -1:])
        q = local_sgd(p, xs[0], ys[0])
        red = (lambda a: psum(a, "dp")) if bug == "psum-params" else (lambda a: pmean(a, "dp"))
        return jax.tree.map(red, q)
    return f


P12 = {"w": R(D12, 16, scale=0.4), "v": R(16, O12, scale=0.4)}
C.smap("s.local_sgd_then_pmean_params_scan.dp4", {"dp": 4}, avg_replicas_dp,
       ({"w": P(), "v": P()}, P("dp"), P("dp")), {"w": P(), "v": P()}, avg_replicas,
       (P12, R(R12, S12, N12, D12), R(R12, S12, N12, O12)),
       bugs=[("psum-params", ["wrong-scale"]), ("average-before-last-step", ["wrong-op"])])

# ---------------------------------------------------------------------------
# 13. DoRA merged into a row-parallel base weight: W' = m * (W + s A B) /
#     ||W + s A B|| with the norm per output column over the (tp-sharded)
#     input dim, A over tp with W, B and m replicated; then the layer.
def dora_merge(w, a, b, mag, x):
    v = w + (ALPHA8 / R8) * (a @ b)
    wm = mag * v / jnp.sqrt(jnp.sum(jnp.square(v), 0, keepdims=True))
    return wm, x @ wm


def dora_merge_tp(bug):
    def f(w, a, b, mag, x):
        v = w + (ALPHA8 / R8) * (a @ b)
        sq = jnp.sum(jnp.square(v), 0, keepdims=True)
        if bug == "sum-of-local-rsqrt":
            inv = psum(lax.rsqrt(sq), "tp")
        elif bug == "column-norm-local":
            inv = lax.rsqrt(sq)
        else:
            inv = lax.rsqrt(psum(sq, "tp"))
        wm = mag * v * inv
        return wm, psum(x @ wm, "tp")
    return f


C.smap("s.dora_merge_rowparallel_colnorm.dp2xtp4", {"dp": 2, "tp": 4}, dora_merge_tp,
       (P("tp", None), P("tp", None), P(), P(), P("dp", "tp")), (P("tp", None), P("dp")), dora_merge,
       (R(DI8, DO8, scale=0.3), R(DI8, R8, scale=0.3), R(R8, DO8, scale=0.3), 1.0 + R(1, DO8, scale=0.2),
        R(N8, DI8)),
       bugs=[("column-norm-local", ["missing-all-reduce"]), ("sum-of-local-rsqrt", ["wrong-op"])])

# ---------------------------------------------------------------------------
# 14. sequence-level distillation with sampled teacher sequences, sequence
#     over sp, groups of 4 samples per prompt over dp: the samples' weights
#     a softmax over the group of the teacher's sequence log-probabilities
#     (masked sums psum'd over sp), the student's length-normalised NLL of
#     each sample weighted by them.
B14, T14, G14 = 8, 16, 4


def seq_weighted(lpt, lps, mask):
    st = jnp.sum(lpt * mask, 1).reshape(-1, G14)
    w = jax.nn.softmax(st, -1).reshape(-1)
    nll = -jnp.sum(lps * mask, 1) / jnp.sum(mask, 1)
    return jnp.sum(w * nll) / (B14 // G14)


def seq_weighted_sp(bug):
    def f(lpt, lps, mask):
        st = jnp.sum(lpt * mask, 1)
        if bug != "teacher-logp-partial-softmax":
            st = psum(st, "sp")
        w = jax.nn.softmax(st.reshape(-1, G14), -1).reshape(-1)
        ln = jnp.sum(mask, 1) if bug == "length-local-block" else psum(jnp.sum(mask, 1), "sp")
        nll = -psum(jnp.sum(lps * mask, 1), "sp") / ln
        tot = jnp.sum(w * nll)
        return (tot if bug == "group-sum-not-psummed-dp" else psum(tot, "dp")) / (B14 // G14)
    return f


MASK14 = np.zeros((B14, T14), np.float32)
for r_ in range(B14):
    MASK14[r_, :5 + (3 * r_) % 11] = 1.0
C.smap("s.seqlevel_kd_group_softmax_weights.dp2xsp4", {"dp": 2, "sp": 4}, seq_weighted_sp,
       (P("dp", "sp"), P("dp", "sp"), P("dp", "sp")), P(), seq_weighted,
       (-np.abs(R(B14, T14)), -np.abs(R(B14, T14)), MASK14),
       bugs=[("teacher-logp-partial-softmax", ["missing-all-reduce"]), ("length-local-block", ["missing-all-reduce"]),
             ("group-sum-not-psummed-dp", ["missing-all-reduce"])])


# ---------------------------------------------------------------------------
# 15. TIES merging of 8 task vectors, 2 per device over m4, weights over tp2,
#     written for several tasks per device: per-task thresholds by a vmap'd
#     sort of the all_gather'd magnitudes, sign election and disjoint mean
#     as sums over the local task axis then psum over m; a per-task scaling
#     lam_k passed over m.
K15 = 8
KEEP15 = D7 * F7 // 5


def ties8(base, taus, lam):
    thr = jax.vmap(lambda t: jnp.sort(jnp.abs(t).reshape(-1))[-KEEP15])(taus)
    tr = jnp.where(jnp.abs(taus) >= thr[:, None, None], taus, 0.0) * lam[:, None, None]
    sgn = jnp.sign(tr.sum(0))
    agree = (jnp.sign(tr) == sgn) & (tr != 0)
    num = jnp.where(agree, tr, 0.0).sum(0)
    cnt = agree.sum(0).astype(jnp.float32)
    return base + jnp.where(cnt > 0, num / jnp.where(cnt > 0, cnt, 1.0), 0.0)


def ties8_m(bug):
    def f(base, taus, lam):
        if bug == "threshold-local-shard":
            full = jnp.abs(taus)
            keep = KEEP15 // 2
        else:
            full = lax.all_gather(jnp.abs(taus), "tp", axis=2, tiled=True)
            keep = KEEP15
        thr = jax.vmap(lambda t: jnp.sort(t.reshape(-1))[-keep])(full)
        tr = jnp.where(jnp.abs(taus) >= thr[:, None, None], taus, 0.0) * lam[:, None, None]
        tot = tr.sum(0)
        sgn = jnp.sign(tot if bug == "sign-election-per-device" else psum(tot, "m"))
        agree = (jnp.sign(tr) == sgn) & (tr != 0)
        num = psum(jnp.where(agree, tr, 0.0).sum(0), "m")
        cnt = psum(agree.sum(0).astype(jnp.float32), "tp" if bug == "count-psum-tp" else "m")
        return base + jnp.where(cnt > 0, num / jnp.where(cnt > 0, cnt, 1.0), 0.0)
    return f


TAUS15 = R(K15, D7, F7, scale=0.1)
LAM15 = np.abs(1.0 + R(K15, scale=0.3))
C.smap("s.ties8_two_tasks_per_device_vmap_sort.m4xtp2", {"m": 4, "tp": 2}, ties8_m,
       (P(None, "tp"), P("m", None, "tp"), P("m")), P(None, "tp"), ties8, (BASE7, TAUS15, LAM15),
       bugs=[("threshold-local-shard", ["missing-collective"]), ("sign-election-per-device", ["missing-all-reduce"]),
             ("count-psum-tp", ["wrong-axis"])])


# ---------------------------------------------------------------------------
# 16. generalised JSD distillation (beta = 0.3) on vocab-parallel logits in
#     bf16 (computed in f32), the global log-sum-exp merged from all_gather'd
#     per-shard maxima and rescaled sums (online-softmax style) instead of
#     pmax / psum; the mixture's log taken elementwise by logaddexp.
B16, V16, BETA = 8, 64, 0.3


def gjsd(zs, zt):
    lps = jax.nn.log_softmax(zs.astype(jnp.float32), -1)
    lpt = jax.nn.log_softmax(zt.astype(jnp.float32), -1)
    lm = jnp.logaddexp(np.log(BETA) + lpt, np.log(1 - BETA) + lps)
    kl_t = jnp.sum(jnp.exp(lpt) * (lpt - lm), -1)
    kl_s = jnp.sum(jnp.exp(lps) * (lps - lm), -1)
    return jnp.mean(BETA * kl_t + (1 - BETA) * kl_s)


def gjsd_tp(bug):
    def lsm(z):
        m_loc = jnp.max(z, -1)
        s_loc = jnp.sum(jnp.exp(z - m_loc[:, None]), -1)
        ms, ss = lax.all_gather(m_loc, "tp"), lax.all_gather(s_loc, "tp")  # (tp, b)
        m = jnp.max(ms, 0)
        tot = jnp.sum(ss, 0) if bug == "no-rescale-of-shard-sums" else jnp.sum(ss * jnp.exp(ms - m), 0)
        return z - (m + jnp.log(tot))[:, None]

    def f(zs, zt):
        lps, lpt = lsm(zs.astype(jnp.float32)), lsm(zt.astype(jnp.float32))
        if bug == "betas-swapped":
            lm = jnp.logaddexp(np.log(1 - BETA) + lpt, np.log(BETA) + lps)
        else:
            lm = jnp.logaddexp(np.log(BETA) + lpt, np.log(1 - BETA) + lps)
        kl = BETA * jnp.sum(jnp.exp(lpt) * (lpt - lm), -1) + (1 - BETA) * jnp.sum(jnp.exp(lps) * (lps - lm), -1)
        return pmean(jnp.mean(psum(kl, "tp")), "dp")
    return f


ZS16 = R(B16, V16, scale=2.0).astype(jnp.bfloat16)
ZT16 = R(B16, V16, scale=2.0).astype(jnp.bfloat16)
C.smap("s.generalised_jsd_allgather_lse_bf16.dp2xtp4", {"dp": 2, "tp": 4}, gjsd_tp,
       (P("dp", "tp"), P("dp", "tp")), P(), gjsd, (ZS16, ZT16),
       bugs=[("no-rescale-of-shard-sums", ["wrong-scale"]), ("betas-swapped", ["wrong-op"])])

# ---------------------------------------------------------------------------
# 17. hidden-state distillation with the student's sequence over sp and the
#     teacher's hidden dim over the same axis: the projected student states
#     all_to_all'd from sequence blocks to dim blocks, then a cosine loss per
#     token (norms psum'd over the dim blocks), mean over tokens.
B17, T17, DS17, DT17 = 2, 8, 8, 16


def cos_distill(hs, w, ht):
    p = jnp.einsum("btd,de->bte", hs, w)
    c = jnp.sum(p * ht, -1) / jnp.sqrt(jnp.sum(p * p, -1) * jnp.sum(ht * ht, -1))
    return jnp.mean(1.0 - c)


def cos_distill_sp(bug):
    def f(hs, w, ht):
        p = jnp.einsum("btd,de->bte", hs, w)  # (b, t/sp, dt)
        if bug == "gather-then-first-dim-block":
            p = lax.all_gather(p, "sp", axis=1, tiled=True)[..., :ht.shape[-1]]
        else:
            p = lax.all_to_all(p, "sp", split_axis=2, concat_axis=1, tiled=True)  # (b, t, dt/sp)
        dot, pp = psum(jnp.sum(p * ht, -1), "sp"), psum(jnp.sum(p * p, -1), "sp")
        hh = jnp.sum(ht * ht, -1) if bug == "teacher-norm-local" else psum(jnp.sum(ht * ht, -1), "sp")
        return jnp.mean(1.0 - dot / jnp.sqrt(pp * hh))
    return f


C.smap("s.cosine_hidden_distill_all_to_all_seq_to_dim.sp4", {"sp": 4}, cos_distill_sp,
       (P(None, "sp"), P(), P(None, None, "sp")), P(), cos_distill,
       (R(B17, T17, DS17), R(DS17, DT17, scale=0.4), R(B17, T17, DT17)),
       bugs=[("gather-then-first-dim-block", ["wrong-offset"]), ("teacher-norm-local", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 18. a hard-vote ensemble: 4 classifiers over ens4 (linear heads on shared
#     features, batch over dp2), each member's argmax one-hot, votes psum'd,
#     the winner by argmax (ties to the lowest class in both programs) and
#     the winner's vote share.
M18, N18, D18, C18 = 4, 8, 8, 5


def vote(ws, x):
    pred = jnp.argmax(jnp.einsum("nd,mdc->mnc", x, ws), -1)
    votes = jax.nn.one_hot(pred, C18, dtype=jnp.int32).sum(0)
    win = jnp.argmax(votes, -1)
    return win, jnp.max(votes, -1).astype(jnp.float32) / M18


def vote_ens(bug):
    def f(ws, x):
        pred = jnp.argmax(jnp.einsum("nd,mdc->mnc", x, ws), -1)
        mine = jax.nn.one_hot(pred, C18, dtype=jnp.int32).sum(0)
        votes = mine if bug == "votes-not-summed" else psum(mine, "ens")
        win = jnp.argmax(votes, -1)
        share = jnp.max(votes, -1).astype(jnp.float32)
        return win, share / (1 if bug == "share-over-local-members" else M18)
    return f


C.smap("s.hard_vote_ensemble_psum_onehot.ens4xdp2", {"ens": 4, "dp": 2}, vote_ens, (P("ens"), P("dp")),
       (P("dp"), P("dp")), vote, (R(M18, D18, C18), R(N18, D18)),
       bugs=[("votes-not-summed", ["missing-all-reduce"]), ("share-over-local-members", ["wrong-scale"])])


# ---------------------------------------------------------------------------
# 19. a uniform soup of 8 replicas over both axes of a 2-D mesh (a2 x b4),
#     the flat parameter vector averaged by a psum_scatter over (a, b)
#     followed by an all_gather over (a, b) (the ZeRO way), kept 2-D.
R19, L19 = 8, 64


def soup8(flat):
    return jnp.mean(flat, 0, keepdims=True)


def soup8_ab(bug):
    def f(flat):
        sc_axes = ("b", "a") if bug == "scatter-gather-axis-order" else ("a", "b")
        part = lax.psum_scatter(flat, sc_axes, scatter_dimension=1, tiled=True)
        part = part / (4 if bug == "divide-by-inner-axis" else R19)
        return lax.all_gather(part, ("a", "b"), axis=1, tiled=True)
    return f


C.smap("s.soup8_reduce_scatter_allgather_2d.a2xb4", {"a": 2, "b": 4}, soup8_ab, (P(("a", "b")),), P(), soup8,
       (R(R19, L19),),
       bugs=[("scatter-gather-axis-order", ["wrong-permutation"]), ("divide-by-inner-axis", ["wrong-scale"])])


# 21. the same uniform soup written with one pmean over both axes.
def soup8_pmean(bug):
    def f(flat):
        return pmean(flat, "b") if bug == "pmean-inner-axis-only" else pmean(flat, ("a", "b"))
    return f


C.smap("s.soup8_pmean_both_axes.a2xb4", {"a": 2, "b": 4}, soup8_pmean, (P(("a", "b")),), P(), soup8, (R(R19, L19),),
       bugs=[("pmean-inner-axis-only", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 20. ensemble averaging by a ring all-reduce written by hand: 4 members'
#     probabilities over ens4 passed around a ring of ppermutes in a
#     lax.fori_loop and accumulated; the mean and its entropy.
def ring_ens(w1s, w2s, x):
    ps = jax.vmap(member_probs, (0, 0, None))(w1s, w2s, x)
    pm = jnp.mean(ps, 0)
    return pm, entropy(pm)


def ring_ens_ens(bug):
    def f(w1s, w2s, x):
        p = jax.vmap(member_probs, (0, 0, None))(w1s, w2s, x).sum(0)
        ring = [(i, (i + 1) % 4) for i in range(4)]
        steps = 2 if bug == "ring-one-step-short" else 3

        def body(_, c):
            acc, cur = c
            cur = lax.ppermute(cur, "ens", ring)
            return acc + cur, cur
        acc, _ = lax.fori_loop(0, steps, body, (p, p))
        pm = acc / (3.0 if bug == "divide-by-hops" else 4.0)
        return pm, entropy(pm)
    return f


C.smap("s.ring_allreduce_ensemble_fori_ppermute.ens4xdp2", {"ens": 4, "dp": 2}, ring_ens_ens,
       (P("ens"), P("ens"), P("dp")), (P("dp"), P("dp")), ring_ens,
       (R(M9, D9, F9, scale=0.6), R(M9, F9, C9, scale=0.8), R(N9, D9)),
       bugs=[("ring-one-step-short", ["missing-collective"]), ("divide-by-hops", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# GSPMD pairs.
C.gspmd("g.kd_logits_temperature.dp2xtp4", {"dp": 2, "tp": 4},
        (P("dp", None, "tp"), P("dp", None, "tp"), P("dp")), P(), kd_loss,
        (R(B1, T1, V1, scale=2.0), R(B1, T1, V1, scale=2.0), MASK1))
C.gspmd("g.ties_merge.m4xtp2", {"m": 4, "tp": 2}, (P(None, "tp"), P("m", None, "tp")), P(None, "tp"), ties,
        (BASE7, R(K7, D7, F7, scale=0.1)))
C.gspmd("g.lora_merge_rowparallel.dp2xtp4", {"dp": 2, "tp": 4}, (P("tp", None), P("tp", None), P(), P("dp", "tp")),
        (P("tp", None), P("dp")), lora_merge,
        (R(DI8, DO8, scale=0.3), R(DI8, R8, scale=0.3), R(R8, DO8, scale=0.3), R(N8, DI8)))
C.gspmd("g.ensemble_bald.ens4xdp2", {"ens": 4, "dp": 2}, (P("ens"), P("ens"), P("dp")), (P("dp"), P("dp")), ensemble,
        (R(M9, D9, F9, scale=0.6), R(M9, F9, C9, scale=0.8), R(N9, D9)))
C.gspmd("g.distill_train_step_sgd_momentum.dp2xtp4", {"dp": 2, "tp": 4}, (SPEC10, SS10, P("dp"), P("dp"), P("dp")),
        (SPEC10, SS10, P()), distill_step, (PAR10, ST10, R(N10, D10), R(N10, V10, scale=2.0), I(0, V10, N10)))
C.gspmd("g.hidden_distill_colparallel_proj.dp2xtp4", {"dp": 2, "tp": 4},
        (P("dp"), P(None, "tp"), P("dp", None, "tp")), P(), hid_distill,
        (R(B2, T2, DS), R(DS, DT, scale=0.3), 0.5 + R(B2, T2, DT, scale=2.0)))

C.gspmd("g.local_sgd_replica_average.dp4", {"dp": 4}, ({"w": P(), "v": P()}, P("dp"), P("dp")),
        {"w": P(), "v": P()}, avg_replicas, (P12, R(R12, S12, N12, D12), R(R12, S12, N12, O12)))
C.gspmd("g.dora_merge_rowparallel.dp2xtp4", {"dp": 2, "tp": 4}, (P("tp", None), P("tp", None), P(), P(), P("dp", "tp")),
        (P("tp", None), P("dp")), dora_merge,
        (R(DI8, DO8, scale=0.3), R(DI8, R8, scale=0.3), R(R8, DO8, scale=0.3), 1.0 + R(1, DO8, scale=0.2),
         R(N8, DI8)))
C.gspmd("g.seqlevel_kd_group_weights.dp2xsp4", {"dp": 2, "sp": 4}, (P("dp", "sp"),) * 3, P(), seq_weighted,
        (-np.abs(R(B14, T14)), -np.abs(R(B14, T14)), MASK14))

C.gspmd("g.ties8_tasks_over_m.m4xtp2", {"m": 4, "tp": 2}, (P(None, "tp"), P("m", None, "tp"), P("m")), P(None, "tp"),
        ties8, (BASE7, TAUS15, LAM15))

C.gspmd("g.cosine_hidden_distill_seq_vs_dim.sp4", {"sp": 4}, (P(None, "sp"), P(), P(None, None, "sp")), P(),
        cos_distill, (R(B17, T17, DS17), R(DS17, DT17, scale=0.4), R(B17, T17, DT17)))
C.gspmd("g.generalised_jsd_bf16.dp2xtp4", {"dp": 2, "tp": 4}, (P("dp", "tp"), P("dp", "tp")), P(), gjsd, (ZS16, ZT16))

C.finish()
