"""samples/fresh122: a 122nd batch of programs as a user writes them, on the theme of numerically delicate but correct distributed programs (statistics merged across devices with max shifts, -inf masks, compensation terms, guarded divisions, wrapping integer arithmetic, low-precision reductions in another order), none of them an idiom of samples/fresh .. fresh26, probe, train or wild.
Every correct pair is written to provoke a false alarm: its per-device program
looks different from the baseline op by op (local maxima then a pmax and a
rescale, -inf entries, zero-count devices, bf16 partial sums, uint32 wrap),
yet computes the same function up to rounding.
shard_map families:
 1. log-sum-exp and softmax over a vocabulary sharded over tp (dp2 x tp4):
    logits scaled by 30 (exp would overflow unshifted), local max, pmax of
    the stop_gradient'ed local maxima, psum of the shifted exponentials,
    probabilities as exp(x - lse). Bugs: each device shifts by its own
    local maximum before the psum, the denominator pmean'd instead of
    psum'd.
 2. causal attention by a ring of ppermutes (sp4) with an online-softmax
    merge (running max, running sum, rescaled accumulator) and -inf causal
    masks (blocks entirely in the future are all -inf; the first block merged
    is the diagonal one, so the running max is finite). Bugs: the accumulator
    not rescaled by exp(m_old - m_new), the source block of step s computed
    as me + s where the ring sends to the right.
 3. masked per-feature mean and variance, batch over dp4 and features over
    tp2: each device runs Welford over its rows with lax.scan (skipping
    masked rows), the (count, mean, M2) triples are all_gather'd and merged
    pairwise with Chan's formula, the divisions guarded (one device holds no
    valid row). Bugs: the between-group term d^2 na nb / n dropped, the mean
    taken as the pmean of the local means (unweighted).
 4. attention with keys over sp4 under a key-padding mask filled with -inf
    where the masked keys cover whole devices' blocks for some rows: the
    global max by pmax of the local maxima (-inf on a fully masked block),
    exp(s - gmax), psum'd sums and psum'd weighted values. Bugs: each block
    shifted by its own maximum (NaN on fully masked blocks), the
    denominator left local.
 5. bf16 Megatron MLP (dp2 x tp4): column-parallel bf16 matmul, GELU,
    row-parallel bf16 matmul whose partial sums are psum'd in bf16 (another
    summation order than the baseline's dot), bias, residual, RMSNorm in
    f32. Bugs: the bias added before the psum (on every device), the psum
    over dp instead of tp.
 6. greedy argmax over a vocabulary sharded over tp4 (dp2 x tp4,
    check_vma=True) of scores quantised by floor(2 x) so ties across shards
    are common: the max by pmax, the first global index among the devices
    holding it by pmin. Bugs: ties broken by pmax (last index), local indices
    without the shard offset.
 7. uint32 hash dropout on a sequence sharded over sp8: a murmur-style
    finaliser of the global flat position (wrapping multiplies, logical
    shifts), keep when the hash is below a threshold, and a uint32 checksum
    of all hashes psum'd (wrapping modulo 2^32). Bugs: the local position
    (no block offset), the hash computed in int32 (arithmetic right shift).
 8. a first-order linear recurrence h_t = a_t h_{t-1} + x_t with the time
    axis over sp4: a local associative scan, block summaries (prod a,
    h_last) scanned across devices by Hillis-Steele ppermutes (offsets 1
    and 2), an exclusive carry by one more ppermute. Bugs: the carry added
    without the local cumulative product of a, the ppermutes in the wrong
    direction.
 9. a training step of a Megatron MLP (dp4 x tp2) with a masked-mean loss
    (one dp device has no valid token; global denominator max(psum(count),
    1)), dynamic loss scaling with a global finiteness vote (pmin of the
    local isfinite flags over both axes), the gradient by jax.vjp of the
    local part with the cotangent of the psum'd output, gradients psum'd
    over dp, clipping by the global norm (psum of squares over tp for
    tp-sharded leaves), the update skipped and the scale halved when not
    finite. Bugs: the mean over the local count, the global norm without
    the psum over tp.
GSPMD pairs (jax.jit with in/out shardings; correct): 10. log_softmax with
-inf masks covering whole vocabulary shards (tp8); 11. jnp.var / jnp.mean
with where= over a dp-sharded batch (dp4 x tp2); 12. lax.top_k of bf16
scores quantised by floor(2 x) (ties within and across shards) with the
vocabulary over tp (dp2 x tp4).
Numerics: correct pairs agree at rounding level (f32 about 1e-6, the bf16
family at bf16 rounding, a few 1e-2 on outputs of order 1); bug variants
differ clearly or produce NaN where the baseline does not.
Run from the repository root: bash samples/gen/run_fresh122.sh [SUBSTR...]
"""
import sys
import numpy as np
import jax, jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec as P
sys.path.insert(0, "samples/gen")  # run from the repository root (run_fresh122.sh)
from fresh_lib import Corpus, seeded  # noqa: E402

SCRIPT = "samples/gen/fresh122.py"
C = Corpus("samples/fresh122", SCRIPT, "samples/gen/run_fresh122.sh", sys.argv[1:])
rng, R, I = seeded(122122)
psum, pmax, pmin, pmean, idx = lax.psum, lax.pmax, lax.pmin, lax.pmean, lax.axis_index
NEG_INF = -jnp.inf

# ---------------------------------------------------------------------------
# 1. log-sum-exp / softmax over the vocabulary sharded over tp.


def lse_ref(x):
    x = x * 30.0
    return jax.nn.logsumexp(x, -1), jax.nn.softmax(x, -1)


def lse_tp(bug):
    def f(x):
        x = x * 30.0
        mloc = jnp.max(x, -1, keepdims=True)
        if bug == "local-max-shift":
            m = mloc
        else:
            m = pmax(lax.stop_gradient(mloc), "tp")
        e = jnp.exp(x - m)
        s = pmean(jnp.sum(e, -1, keepdims=True), "tp") if bug == "pmean-denominator" else \
            psum(jnp.sum(e, -1, keepdims=True), "tp")
        lse = jnp.log(s) + m
        return lse[:, 0], jnp.exp(x - lse)
    return f


C.smap("s.lse_softmax_pmax_psum_vocab.dp2xtp4", {"dp": 2, "tp": 4}, lse_tp, (P("dp", "tp"),),
       (P("dp"), P("dp", "tp")), lse_ref, (R(8, 32),),
       bugs=[("local-max-shift", ["wrong-rescale"]), ("pmean-denominator", ["wrong-collective"])])

# ---------------------------------------------------------------------------
# 2. ring attention with an online-softmax merge, causal -inf masks.
T2, E2 = 16, 8


def causal_ref(q, k, v):
    s = q @ k.T / np.sqrt(E2)
    s = jnp.where(jnp.tril(jnp.ones((T2, T2), bool)), s, NEG_INF)
    return jax.nn.softmax(s, -1) @ v


def ring_causal(bug):
    def f(q, k, v):
        n, tl = 4, q.shape[0]
        me = idx("sp")
        qpos = me * tl + jnp.arange(tl)
        m = jnp.full((tl, 1), NEG_INF)
        l = jnp.zeros((tl, 1))
        acc = jnp.zeros_like(q)
        kb, vb = k, v
        for s in range(n):
            src = (me + s) % n if bug == "src-wrong-direction" else (me - s) % n
            kpos = src * tl + jnp.arange(tl)
            sc = q @ kb.T / np.sqrt(E2)
            sc = jnp.where(qpos[:, None] >= kpos[None, :], sc, NEG_INF)
            m_new = jnp.maximum(m, jnp.max(sc, -1, keepdims=True))
            p = jnp.exp(sc - m_new)
            corr = jnp.exp(m - m_new)
            l = l * corr + jnp.sum(p, -1, keepdims=True)
            acc = (acc if bug == "no-acc-rescale" else acc * corr) + p @ vb
            m = m_new
            if s < n - 1:
                perm = [(j, (j + 1) % n) for j in range(n)]
                kb, vb = lax.ppermute(kb, "sp", perm), lax.ppermute(vb, "sp", perm)
        return acc / l
    return f


C.smap("s.ring_online_softmax_causal_neginf.sp4", {"sp": 4}, ring_causal, (P("sp"),) * 3, P("sp"),
       causal_ref, (R(T2, E2), R(T2, E2), R(T2, E2)),
       bugs=[("no-acc-rescale", ["wrong-rescale"]), ("src-wrong-direction", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 3. Welford per device, Chan merge across dp, guarded divisions.
B3, F3 = 32, 8
MASK3 = np.ones(B3, bool)
MASK3[16:24] = False          # dp device 2 holds no valid row
MASK3[[1, 4, 5, 27, 30]] = False  # unequal counts elsewhere


def masked_stats_ref(x, m):
    w = m.astype(jnp.float32)[:, None]
    n = jnp.sum(w)
    mean = jnp.sum(x * w, 0) / n
    var = jnp.sum(w * jnp.square(x - mean), 0) / n
    return mean, var


def chan_merge(a, b, bug):
    na, ma, qa = a
    nb, mb, qb = b
    n = na + nb
    safe = jnp.maximum(n, 1.0)
    d = mb - ma
    mean = jnp.where(n > 0, ma + d * nb / safe, 0.0)
    q = qa + qb if bug == "no-between-term" else qa + qb + d * d * na * nb / safe
    return n, mean, q


def welford_chan(bug):
    def f(x, m):
        def step(c, row):
            xi, mi = row
            n, mean, q = c
            n1 = n + mi.astype(jnp.float32)
            d = xi - mean
            mean1 = mean + jnp.where(mi, d / jnp.maximum(n1, 1.0), 0.0)
            q1 = q + jnp.where(mi, d * (xi - mean1), 0.0)
            return (n1, mean1, q1), None
        z = jnp.zeros(x.shape[1])
        (n, mean, q), _ = lax.scan(step, (jnp.float32(0), z, z), (x, m))
        ns, means, qs = (lax.all_gather(t, "dp") for t in (n, mean, q))
        acc = (ns[0], means[0], qs[0])
        for i in range(1, 4):
            acc = chan_merge(acc, (ns[i], means[i], qs[i]), bug)
        nt, mt, qt = acc
        if bug == "mean-of-means":
            mt = pmean(mean, "dp")
        return mt, qt / jnp.maximum(nt, 1.0)
    return f


C.smap("s.welford_scan_chan_merge_masked.dp4xtp2", {"dp": 4, "tp": 2}, welford_chan, (P("dp", "tp"), P("dp")),
       (P("tp"), P("tp")), masked_stats_ref, (R(B3, F3, scale=3.0) + 5.0, MASK3),
       bugs=[("no-between-term", ["missing-term"]), ("mean-of-means", ["wrong-reduction"])])

# ---------------------------------------------------------------------------
# 4. attention with whole key blocks masked by -inf, keys over sp.
B4, Q4, K4, E4 = 2, 4, 16, 8
KM4 = np.ones((B4, K4), bool)
KM4[0, 4:12] = False   # sp devices 1 and 2 see only masked keys for row 0
KM4[1, 12:] = False    # sp device 3 for row 1
KM4[1, 0:2] = False


def padmask_ref(q, k, v, km):
    s = jnp.einsum("bqe,bke->bqk", q, k) / np.sqrt(E4)
    s = jnp.where(km[:, None, :], s, NEG_INF)
    return jnp.einsum("bqk,bke->bqe", jax.nn.softmax(s, -1), v)


def padmask_sp(bug):
    def f(q, k, v, km):
        s = jnp.einsum("bqe,bke->bqk", q, k) / np.sqrt(E4)
        s = jnp.where(km[:, None, :], s, NEG_INF)
        mloc = jnp.max(s, -1, keepdims=True)
        m = pmax(mloc, "sp")
        if bug == "shift-by-local-max":
            e = jnp.exp(s - mloc) * jnp.exp(mloc - m)
        else:
            e = jnp.exp(s - m)
        lsum = jnp.sum(e, -1, keepdims=True)
        l = lsum if bug == "local-denominator" else psum(lsum, "sp")
        o = psum(jnp.einsum("bqk,bke->bqe", e, v), "sp")
        return o / l
    return f


C.smap("s.padmask_neginf_whole_blocks.sp4", {"sp": 4}, padmask_sp,
       (P(), P(None, "sp"), P(None, "sp"), P(None, "sp")), P(), padmask_ref,
       (R(B4, Q4, E4), R(B4, K4, E4), R(B4, K4, E4), KM4),
       bugs=[("shift-by-local-max", ["nan"]), ("local-denominator", ["missing-collective"])])

# ---------------------------------------------------------------------------
# 5. bf16 Megatron MLP, partial sums psum'd in bf16.
D5, H5 = 16, 32
bf = jnp.bfloat16


def bf16_mlp_ref(x, w1, w2, b2, g):
    h = jax.nn.gelu(jnp.dot(x, w1))
    y = jnp.dot(h, w2) + b2
    r = (x + y).astype(jnp.float32)
    return r * lax.rsqrt(jnp.mean(r * r, -1, keepdims=True) + 1e-6) * g


def bf16_mlp_tp(bug):
    def f(x, w1, w2, b2, g):
        h = jax.nn.gelu(jnp.dot(x, w1))
        part = jnp.dot(h, w2)
        if bug == "bias-before-psum":
            y = psum(part + b2, "tp")
        elif bug == "psum-over-dp":
            y = psum(part, "dp") + b2
        else:
            y = psum(part, "tp") + b2
        r = (x + y).astype(jnp.float32)
        return r * lax.rsqrt(jnp.mean(r * r, -1, keepdims=True) + 1e-6) * g
    return f


C.smap("s.bf16_megatron_mlp_psum_order.dp2xtp4", {"dp": 2, "tp": 4}, bf16_mlp_tp,
       (P("dp"), P(None, "tp"), P("tp", None), P(), P()), P("dp"), bf16_mlp_ref,
       (R(8, D5, dt=bf), R(D5, H5, scale=0.3, dt=bf), R(H5, D5, scale=0.3, dt=bf), R(D5, scale=0.5, dt=bf),
        1.0 + R(D5, scale=0.1)),
       bugs=[("bias-before-psum", ["duplicated-term"]), ("psum-over-dp", ["wrong-axis"])])

# ---------------------------------------------------------------------------
# 6. argmax with ties across vocabulary shards.
V6 = 32


def argmax_ref(x):
    s = jnp.floor(2.0 * x)
    return jnp.argmax(s, -1).astype(jnp.int32), jnp.max(s, -1)


def argmax_tp(bug):
    def f(x):
        s = jnp.floor(2.0 * x)
        vl = x.shape[-1]
        li = jnp.argmax(s, -1).astype(jnp.int32)
        lv = jnp.max(s, -1)
        gv = pmax(lv, "tp")
        gi = li if bug == "no-offset" else li + idx("tp") * vl
        if bug == "ties-to-last":
            g = pmax(jnp.where(lv == gv, gi, -1), "tp")
        else:
            g = pmin(jnp.where(lv == gv, gi, V6), "tp")
        return g, gv
    return f


C.smap("s.argmax_ties_first_index_pmin.dp2xtp4", {"dp": 2, "tp": 4}, argmax_tp, (P("dp", "tp"),), (P("dp"), P("dp")),
       argmax_ref, (R(8, V6),), check_vma=True,
       bugs=[("ties-to-last", ["wrong-tie-break"]), ("no-offset", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 7. uint32 hash dropout with a wrapping checksum.
B7, T7 = 4, 32
u32 = jnp.uint32


def mix32(h):
    h = h ^ (h >> u32(16))
    h = h * u32(0x85EBCA6B)
    h = h ^ (h >> u32(13))
    h = h * u32(0xC2B2AE35)
    return h ^ (h >> u32(16))


def mix32_signed(h):
    h = lax.bitcast_convert_type(h, jnp.int32)
    h = h ^ (h >> 16)
    h = h * jnp.int32(-2048144789)   # 0x85EBCA6B as int32
    h = h ^ (h >> 13)
    h = h * jnp.int32(-1028477387)   # 0xC2B2AE35 as int32
    h = h ^ (h >> 16)
    return lax.bitcast_convert_type(h, u32)


THRESH7 = u32(int(0.75 * 2 ** 32))


def hash_drop_ref(x, seed):
    pos = (jnp.arange(B7)[:, None] * T7 + jnp.arange(T7)[None, :]).astype(u32)
    h = mix32(pos * u32(0x9E3779B1) + seed)
    return jnp.where(h < THRESH7, x / 0.75, 0.0), jnp.sum(h, dtype=u32)


def hash_drop_sp(bug):
    def f(x, seed):
        tl = x.shape[1]
        t = jnp.arange(tl) if bug == "local-position" else idx("sp") * tl + jnp.arange(tl)
        pos = (jnp.arange(B7)[:, None] * T7 + t[None, :]).astype(u32)
        pre = pos * u32(0x9E3779B1) + seed
        h = mix32_signed(pre) if bug == "signed-shift" else mix32(pre)
        return jnp.where(h < THRESH7, x / 0.75, 0.0), psum(jnp.sum(h, dtype=u32), "sp")
    return f


C.smap("s.uint32_hash_dropout_wrapping_checksum.sp8", {"sp": 8}, hash_drop_sp, (P(None, "sp"), P()),
       (P(None, "sp"), P()), hash_drop_ref, (R(B7, T7), np.uint32(2654435769)),
       bugs=[("local-position", ["wrong-offset"]), ("signed-shift", ["wrong-dtype"])])

# ---------------------------------------------------------------------------
# 8. linear recurrence over a sequence sharded over sp, Hillis-Steele carries.
B8, T8 = 2, 32


def lin_combine(a, b):
    (a1, h1), (a2, h2) = a, b
    return a1 * a2, a2 * h1 + h2


def recur_ref(a_logit, x):
    a = jax.nn.sigmoid(a_logit)

    def step(h, ax):
        at, xt = ax
        h = at * h + xt
        return h, h
    _, hs = lax.scan(step, jnp.zeros(B8), (a.T, x.T))
    return hs.T


def recur_sp(bug):
    def f(a_logit, x):
        n = 4
        me = idx("sp")
        a = jax.nn.sigmoid(a_logit)
        A, H = lax.associative_scan(lin_combine, (a, x), axis=1)
        At, Ht = A[:, -1], H[:, -1]

        def shift(v, d):
            perm = [(j, j - d) for j in range(d, n)] if bug == "wrong-direction" else [(j, j + d) for j in range(n - d)]
            return lax.ppermute(v, "sp", perm)
        for d in (1, 2):
            pa, ph = shift(At, d), shift(Ht, d)
            ok = me >= d
            At, Ht = jnp.where(ok, pa * At, At), jnp.where(ok, At * ph + Ht, Ht)
        carry = jnp.where(me >= 1, shift(Ht, 1), 0.0)
        if bug == "carry-unscaled":
            return H + carry[:, None]
        return H + A * carry[:, None]
    return f


C.smap("s.linear_recurrence_hillis_steele_carry.sp4", {"sp": 4}, recur_sp, (P(None, "sp"),) * 2, P(None, "sp"),
       recur_ref, (R(B8, T8) + 1.5, R(B8, T8)),
       bugs=[("carry-unscaled", ["wrong-rescale"]), ("wrong-direction", ["wrong-permutation"])])

# ---------------------------------------------------------------------------
# 9. training step: masked mean, loss scaling with a finiteness vote, clipping.
B9, D9, H9 = 16, 8, 16
MASK9 = np.ones(B9, bool)
MASK9[4:8] = False             # dp device 1 has no valid token
MASK9[[0, 13]] = False
LR9, CLIP9 = 0.1, 0.5


def mlp9(p, x):
    return jnp.tanh(x @ p["w1"] + p["b1"]) @ p["w2"]


def step9_ref(p, scale, x, y, m):
    def loss(p):
        err = jnp.sum(jnp.square(mlp9(p, x) - y), -1)
        w = m.astype(jnp.float32)
        return scale * jnp.sum(err * w) / jnp.maximum(jnp.sum(w), 1.0)
    g = jax.grad(loss)(p)
    g = jax.tree.map(lambda t: t / scale, g)
    finite = jnp.all(jnp.stack([jnp.all(jnp.isfinite(t)) for t in jax.tree.leaves(g)]))
    norm = jnp.sqrt(sum(jnp.sum(jnp.square(t)) for t in jax.tree.leaves(g)))
    c = jnp.minimum(1.0, CLIP9 / jnp.maximum(norm, 1e-12))
    newp = jax.tree.map(lambda a, t: jnp.where(finite, a - LR9 * c * t, a), p, g)
    return newp, jnp.where(finite, scale, scale * 0.5), norm


def step9_sm(bug):
    def f(p, scale, x, y, m):
        w = m.astype(jnp.float32)
        cnt = jnp.sum(w) if bug == "local-count" else psum(jnp.sum(w), "dp")
        denom = jnp.maximum(cnt, 1.0)

        def local(p):  # this device's partial output (before the psum over tp)
            return jnp.tanh(x @ p["w1"] + p["b1"]) @ p["w2"]
        part, vjp = jax.vjp(local, p)
        out = psum(part, "tp")
        dout = scale * 2.0 * (out - y) * (w / denom)[:, None]
        (g,) = vjp(dout)
        g = jax.tree.map(lambda t: psum(t, "dp") / scale, g)
        ok = jnp.all(jnp.stack([jnp.all(jnp.isfinite(t)) for t in jax.tree.leaves(g)])).astype(jnp.int32)
        finite = pmin(ok, ("dp", "tp")) > 0
        sq = sum(jnp.sum(jnp.square(t)) for t in jax.tree.leaves(g))
        norm = jnp.sqrt(sq if bug == "norm-no-psum" else psum(sq, "tp"))
        c = jnp.minimum(1.0, CLIP9 / jnp.maximum(norm, 1e-12))
        newp = jax.tree.map(lambda a, t: jnp.where(finite, a - LR9 * c * t, a), p, g)
        return newp, jnp.where(finite, scale, scale * 0.5), norm
    return f


SPEC9 = {"w1": P(None, "tp"), "b1": P("tp"), "w2": P("tp", None)}
P9 = {"w1": R(D9, H9, scale=0.5), "b1": R(H9, scale=0.1), "w2": R(H9, 2, scale=0.5)}
C.smap("s.train_masked_mean_lossscale_vote_clip.dp4xtp2", {"dp": 4, "tp": 2}, step9_sm,
       (SPEC9, P(), P("dp"), P("dp"), P("dp")), (SPEC9, P(), P()), step9_ref,
       (P9, np.float32(1024.0), R(B9, D9), R(B9, 2), MASK9),
       bugs=[("local-count", ["wrong-denominator"]), ("norm-no-psum", ["missing-collective"])])

# ---------------------------------------------------------------------------
# GSPMD pairs.
# 10. log_softmax with -inf masks covering whole vocabulary shards.
VM10 = np.ones((4, 64), bool)
VM10[0, 8:40] = False
VM10[2, :56] = False
VM10[3, 24:32] = False


def masked_logsoftmax(x, vm):
    s = jnp.where(vm, x * 20.0, NEG_INF)
    return jax.nn.log_softmax(s, -1), jax.nn.logsumexp(s, -1)


C.gspmd("g.masked_log_softmax_neginf_shards.tp8", {"tp": 8}, (P(None, "tp"), P(None, "tp")),
        (P(None, "tp"), P()), masked_logsoftmax, (R(4, 64), VM10))

# 11. masked mean / variance with where= over a dp-sharded batch.
M11 = np.ones((32, 1), bool)
M11[8:16] = False
M11[[2, 3, 29]] = False


def where_stats(x, m):
    return jnp.mean(x, 0, where=m), jnp.var(x, 0, where=m)


C.gspmd("g.where_mean_var_empty_shard.dp4xtp2", {"dp": 4, "tp": 2}, (P("dp", "tp"), P("dp")),
        (P("tp"), P("tp")), where_stats, (R(32, 8, scale=2.0) + 10.0, M11))


# 12. top-k of quantised scores (ties everywhere) over a tp-sharded vocabulary.
def topk_quantised(x):
    s = jnp.floor(2.0 * x).astype(jnp.bfloat16)
    v, i = lax.top_k(s, 4)
    return v.astype(jnp.float32), i


C.gspmd("g.topk_ties_quantised_bf16_vocab.dp2xtp4", {"dp": 2, "tp": 4}, (P("dp", "tp"),), (P("dp"), P("dp")),
        topk_quantised, (R(8, 32),))

C.known_miss("s.padmask_neginf_whole_blocks.sp4.bug.shift-by-local-max",
             "the bug's only effect is NaN (exp(-inf - -inf)) in the rows where a device's whole key block is masked, where the baseline is finite; the witness counts differences where one side is NaN and the other finite as undecided (outside the programs' domain), and the rules do not relate a shift by a partial (local) max")
C.finish()
