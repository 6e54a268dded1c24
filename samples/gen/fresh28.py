"""samples/fresh28: a 28th batch of programs as a user writes them, on the
theme of parameter-efficient fine-tuning and model adaptation under FSDP /
tensor parallelism in JAX / optax (LoRA on column- and row-parallel
projections, merged LoRA, DoRA, bottleneck adapters, prefix and prompt
tuning, IA3, QLoRA-style int8 bases, frozen bases under optax masks,
multi-LoRA banks), none of them an idiom of samples/fresh .. fresh26,
probe, train or wild.
shard_map families:
 1. LoRA on the q and v projections (column-parallel, heads over tp: A
    replicated, B sharded with the heads) and on the output projection
    (row-parallel: A sharded with its input rows, B replicated), the LoRA
    term added to the partial sum before the one psum; batch over dp.
    Bugs: the output projection's LoRA added after the psum (so not
    psum'd), alpha / r applied to both x @ A and the product (twice).
 2. merging LoRA into a column-parallel and a row-parallel weight shard by
    shard (W + s A @ B on each device: A replicated, B at the columns for
    the first; A -- passed replicated -- sliced at the device's rows, B
    replicated, for the second), returning the merged shards and the MLP
    output. Bugs: the row-parallel merge with the next device's rows of A,
    the row-parallel delta divided by tp (as if it were psum'd later).
 3. DoRA on a column-parallel up projection and a row-parallel down
    projection: magnitude times (W + s A B) over its column norms, the
    norms over the input dim, so psum'd squares over tp for the
    row-parallel weight. Bugs: the row-parallel norm over the local rows
    only, the column-parallel norm over the whole local shard (both dims), the psum of local
    norms instead of squares.
 4. a DoRA fine-tuning run of two optax.adam steps (check_vma=True) on a
    row-parallel layer (rows over tp, batch over dp), the norm detached
    (stop_gradient, as PEFT does), magnitude / A / B trained, the loss
    pmean'd over dp. Bugs: the norm over the local rows, the norm not
    detached (other gradients).
 5. a Houlsby bottleneck adapter after tensor-parallel attention (heads
    over tp, output projection psum'd), the adapter's bottleneck sharded
    over tp too (down column-, up row-parallel, psum), LayerNorm before it.
    Bugs: adapter applied to the partial (pre-psum) attention output, the
    residual added inside the adapter's psum, the up projection not psum'd.
 6. prefix tuning: learned prefix keys / values (passed replicated, sliced
    at the device's heads) concatenated before the keys along the time
    axis, always visible, causal among the real tokens. Bugs: prefix heads
    at offset 0, prefix appended after the keys (mask misaligned), the
    prefix masked causally.
 7. prefix tuning with the sequence over sp: real tokens at positions
    n_prefix + global index (as HF passes the prefix as a past), rotated
    keys all_gather'd, prefix concatenated once. Bugs: positions without
    the prefix offset, local positions, causal mask from local query
    positions.
 8. prompt tuning (check_vma=True) over a vocabulary-parallel embedding
    (masked lookup psum'd over tp), a soft prompt prepended, mean-pooled
    classifier, two optax.sgd (momentum) steps of the prompt only, batch
    over dp. Bugs: the prompt concatenated into each partial lookup before
    the psum (so times tp), token ids not shifted by the vocab offset.
 9. IA3 on attention and MLP with heads / hidden over tp, the scaling
    vectors passed replicated and sliced; the key scaling folded into the
    queries (sum_e q_e l_e k_e is the same). Bugs: the MLP vector sliced at
    offset 0, the MLP vector applied before the activation.
10. a QLoRA-style SwiGLU: int8 frozen gate / up (column-parallel, per
    output channel scales sharded with them) and down (row-parallel, its
    per-channel scales replicated) plus bf16 LoRA on up and down, f32
    accumulation, psum. Bugs: down LoRA added after the psum, the gate
    dequantised with the up scales.
11. LoRA gradients reduced by hand (check_vma=False: jax.grad of the
    device-local loss, collectives outside the grad) on a column-parallel
    layer, two optax.adamw steps: A (replicated) psum'd over tp and
    pmean'd over dp, B (sharded with the columns) pmean'd over dp. Bugs:
    A reduced over dp only, B's gradient summed over tp.
12. multi-LoRA serving: a stacked adapter bank sharded over ep by adapter,
    requests over dp with their adapter ids passed replicated (each dp
    rank slicing its own), every ep rank applying the adapters it owns to
    its requests (local index id - offset, others masked), psum over ep.
    Bugs: ids taken at batch offset 0, bank index without the ep offset.
13. rsLoRA (scale alpha / sqrt(r)) with the rank dim sharded over tp (A
    and B split along r, x A_s B_s psum'd) on an FSDP base weight
    (all_gather'd over dp). Bugs: the scale from the local rank, the LoRA
    product not psum'd.
14. a frozen-base LoRA MLP (column / row-parallel) trained two steps in a
    lax.scan with optax.multi_transform (adamw for the adapters,
    set_to_zero for the base, labels from the tree path), jax.grad of the
    whole tree under check_vma=True, loss pmean'd over dp; returns the new
    parameters and the per-step losses. Bugs: the row-parallel B labelled
    frozen, the loss psum'd over dp (losses doubled).
GSPMD pairs (jax.jit with in / out shardings): 15. the multi_transform
training run of 14.; 16. DoRA of 3.; 17. the multi-LoRA bank gathered by
jnp.take with the bank over ep and requests over dp; 18. a merged
int8-dequantised + LoRA weight (per-channel scales) with the merged weight
column-sharded; 19. the prefix-tuned attention of 6.
Left out, as idioms of earlier batches: LoRA psum'd x A on a tp MLP
(fresh6), block-wise 4-bit QLoRA (fresh10), per-request multi-LoRA
with replicated banks and its Adam step (fresh16).
Numerics: every correct pair agrees with its baseline at rounding level;
every bug variant differs clearly (see "numerics").
Run from the repository root: bash samples/gen/run_fresh28.sh [SUBSTR...]
"""
import sys
import numpy as np
import jax, jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec as P
import optax
sys.path.insert(0, "samples/gen")  # run from the repository root (run_fresh28.sh)
from fresh_lib import Corpus, seeded, state_specs  # noqa: E402

SCRIPT = "samples/gen/fresh28.py"
C = Corpus("samples/fresh28", SCRIPT, "samples/gen/run_fresh28.sh", sys.argv[1:])
rng, R, I = seeded(2828)
psum, pmean, idx = lax.psum, lax.pmean, lax.axis_index
NEG = -1e30
D, F, H, E, RK, ALPHA = 16, 32, 8, 4, 4, 8.0
S = ALPHA / RK
DPTP = {"dp": 2, "tp": 4}


def attn(q, k, v, ok):
    s = jnp.einsum("bqhe,bkhe->bhqk", q, k) / np.sqrt(q.shape[-1])
    s = jnp.where(ok, s, NEG)
    return jnp.einsum("bhqk,bkhe->bqhe", jax.nn.softmax(s, -1), v)


def causal(t):
    return jnp.tril(jnp.ones((t, t), bool))


def lnorm(x, eps=1e-5):
    m = x.mean(-1, keepdims=True)
    return (x - m) * lax.rsqrt(jnp.mean(jnp.square(x - m), -1, keepdims=True) + eps)


# ---------------------------------------------------------------------------
# 1. LoRA on q, v (column-parallel) and o (row-parallel).


def lora_qvo(x, wq, wk, wv, wo, aq, bq, av, bv, ao, bo):
    q = jnp.einsum("btd,dhe->bthe", x, wq) + S * jnp.einsum("btr,rhe->bthe", x @ aq, bq)
    k = jnp.einsum("btd,dhe->bthe", x, wk)
    v = jnp.einsum("btd,dhe->bthe", x, wv) + S * jnp.einsum("btr,rhe->bthe", x @ av, bv)
    o = attn(q, k, v, causal(x.shape[1]))
    return jnp.einsum("bthe,hed->btd", o, wo) + S * jnp.einsum("bthe,her->btr", o, ao) @ bo


def lora_qvo_tp(bug):
    def f(x, wq, wk, wv, wo, aq, bq, av, bv, ao, bo):
        xa = x @ aq
        if bug == "scale-twice":
            xa = S * xa
        q = jnp.einsum("btd,dhe->bthe", x, wq) + S * jnp.einsum("btr,rhe->bthe", xa, bq)
        k = jnp.einsum("btd,dhe->bthe", x, wk)
        v = jnp.dot(x, wv.reshape(D, -1)).reshape(k.shape) + S * jnp.einsum("btr,rhe->bthe", x @ av, bv)
        o = attn(q, k, v, causal(x.shape[1]))
        base = jnp.einsum("bthe,hed->btd", o, wo)
        lora = S * jnp.einsum("bthe,her->btr", o, ao) @ bo
        if bug == "o-lora-after-psum":
            return psum(base, "tp") + lora
        return psum(base + lora, "tp")
    return f


C.smap("s.lora_qv_col_o_row_attention.dp2xtp4", DPTP, lora_qvo_tp,
       (P("dp"), P(None, "tp"), P(None, "tp"), P(None, "tp"), P("tp"), P(), P(None, "tp"), P(), P(None, "tp"),
        P("tp"), P()), P("dp"), lora_qvo,
       (R(4, 6, D), R(D, H, E, scale=0.3), R(D, H, E, scale=0.3), R(D, H, E, scale=0.3), R(H, E, D, scale=0.3),
        R(D, RK, scale=0.3), R(RK, H, E, scale=0.3), R(D, RK, scale=0.3), R(RK, H, E, scale=0.3),
        R(H, E, RK, scale=0.3), R(RK, D, scale=0.3)),
       bugs=[("o-lora-after-psum", ["missing-all-reduce"]), ("scale-twice", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 2. merging LoRA shard by shard into a column- and a row-parallel weight.


def merge_mlp(w1, a1, b1, w2, a2, b2, x):
    m1, m2 = w1 + S * a1 @ b1, w2 + S * a2 @ b2
    return m1, m2, jax.nn.gelu(x @ m1) @ m2


def merge_tp(bug):
    def f(w1, a1, b1, w2, a2, b2, x):
        tp, fl = 4, w2.shape[0]
        m1 = w1 + S * jnp.matmul(a1, b1)
        r = (idx("tp") + 1) % tp if bug == "row-merge-next-a-shard" else idx("tp")
        a2s = lax.dynamic_slice_in_dim(a2, r * fl, fl, 0)
        delta = S * a2s @ b2
        if bug == "row-delta-over-tp":
            delta = delta / tp
        m2 = w2 + delta
        return m1, m2, psum(jax.nn.gelu(x @ m1) @ m2, "tp")
    return f


C.smap("s.merge_lora_shardwise_col_row.tp4", {"tp": 4}, merge_tp,
       (P(None, "tp"), P(), P(None, "tp"), P("tp"), P(), P(), P()), (P(None, "tp"), P("tp"), P()), merge_mlp,
       (R(D, F, scale=0.3), R(D, RK, scale=0.3), R(RK, F, scale=0.3), R(F, D, scale=0.3), R(F, RK, scale=0.3),
        R(RK, D, scale=0.3), R(5, D)),
       bugs=[("row-merge-next-a-shard", ["wrong-offset"]), ("row-delta-over-tp", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 3. DoRA on a column-parallel and a row-parallel projection.


def dora_w(w, a, b, m, norm=None):
    v = w + S * a @ b
    n = jnp.linalg.norm(v, axis=0) if norm is None else norm(v)
    return v * (m / n)


def dora_mlp(x, w1, a1, b1, m1, w2, a2, b2, m2):
    return jax.nn.gelu(x @ dora_w(w1, a1, b1, m1)) @ dora_w(w2, a2, b2, m2)


def dora_tp(bug):
    def f(x, w1, a1, b1, m1, w2, a2, b2, m2):
        if bug == "col-norm-whole-shard":
            n1 = lambda v: jnp.linalg.norm(v)
        else:
            n1 = lambda v: jnp.sqrt(jnp.sum(v * v, 0))
        if bug == "row-norm-local":
            n2 = lambda v: jnp.sqrt(jnp.sum(v * v, 0))
        elif bug == "row-psum-of-norms":
            n2 = lambda v: psum(jnp.sqrt(jnp.sum(v * v, 0)), "tp")
        else:
            n2 = lambda v: jnp.sqrt(psum(jnp.sum(v * v, 0), "tp"))
        h = jax.nn.gelu(x @ dora_w(w1, a1, b1, m1, n1))
        return psum(h @ dora_w(w2, a2, b2, m2, n2), "tp")
    return f


C.smap("s.dora_col_row_norms.tp4", {"tp": 4}, dora_tp,
       (P(), P(None, "tp"), P(), P(None, "tp"), P("tp"), P("tp"), P("tp"), P(), P()), P(), dora_mlp,
       (R(6, D), R(D, F, scale=0.3), R(D, RK, scale=0.3), R(RK, F, scale=0.3), 1.0 + R(F, scale=0.2),
        R(F, D, scale=0.3), R(F, RK, scale=0.3), R(RK, D, scale=0.3), 1.0 + R(D, scale=0.2)),
       bugs=[("row-norm-local", ["missing-all-reduce"]), ("col-norm-whole-shard", ["wrong-axis"]),
             ("row-psum-of-norms", ["wrong-reduction"])])

# ---------------------------------------------------------------------------
# 4. DoRA fine-tuning, two optax.adam steps, on a row-parallel layer (rows
#    over tp, batch over dp), check_vma=True; the column norms detached.
OPT4 = optax.adam(3e-2)


def dora4_loss(ad, w, x, y, norm):
    v = w + S * ad["a"] @ ad["b"]
    n = lax.stop_gradient(norm(v))
    return v * (ad["m"] / n)


def dora_train(ad, st, w, xs, ys):
    losses = []
    for i in range(2):
        def loss(ad):
            wd = dora4_loss(ad, w, xs[i], ys[i], lambda v: jnp.linalg.norm(v, axis=0))
            return jnp.mean(jnp.square(xs[i] @ wd - ys[i]))
        l, g = jax.value_and_grad(loss)(ad)
        u, st = OPT4.update(g, st, ad)
        ad = optax.apply_updates(ad, u)
        losses.append(l)
    return ad, st, jnp.stack(losses)


def dora_train_tp(bug):
    def f(ad, st, w, xs, ys):
        losses = []
        for i in range(2):
            def loss(ad):
                v = w + S * ad["a"] @ ad["b"]
                if bug == "norm-local-rows":
                    n = jnp.sqrt(jnp.sum(v * v, 0))
                else:
                    n = jnp.sqrt(psum(jnp.sum(v * v, 0), "tp"))
                if bug != "norm-not-detached":
                    n = lax.stop_gradient(n)
                y = psum(xs[i] @ (v * (ad["m"] / n)), "tp")
                return pmean(jnp.mean(jnp.square(y - ys[i])), "dp")
            l, g = jax.value_and_grad(loss)(ad)
            u, st = OPT4.update(g, st, ad)
            ad = optax.apply_updates(ad, u)
            losses.append(l)
        return ad, st, jnp.stack(losses)
    return f


AD4 = {"a": R(F, RK, scale=0.3), "b": R(RK, D, scale=0.3), "m": 1.0 + R(D, scale=0.2)}
SP4 = {"a": P("tp"), "b": P(), "m": P()}
ST4 = OPT4.init(AD4)
C.smap("s.dora_adam_two_steps_row_parallel.dp2xtp4", DPTP, dora_train_tp,
       (SP4, state_specs(ST4, SP4), P("tp"), P(None, "dp", "tp"), P(None, "dp")),
       (SP4, state_specs(ST4, SP4), P()), dora_train,
       (AD4, ST4, R(F, D, scale=0.3), R(2, 8, F), R(2, 8, D)),
       bugs=[("norm-local-rows", ["missing-all-reduce"]), ("norm-not-detached", ["wrong-gradient"])], check_vma=True)

# ---------------------------------------------------------------------------
# 5. a Houlsby bottleneck adapter after tensor-parallel attention.
RB = 8


def houlsby(x, wq, wk, wv, wo, dn, up):
    q, k, v = (jnp.einsum("btd,dhe->bthe", x, w) for w in (wq, wk, wv))
    h = x + jnp.einsum("bthe,hed->btd", attn(q, k, v, causal(x.shape[1])), wo)
    return h + jax.nn.gelu(lnorm(h) @ dn) @ up


def houlsby_tp(bug):
    def f(x, wq, wk, wv, wo, dn, up):
        q, k, v = (jnp.einsum("btd,dhe->bthe", x, w) for w in (wq, wk, wv))
        part = jnp.einsum("bthe,hed->btd", attn(q, k, v, causal(x.shape[1])), wo)
        if bug == "adapter-on-partial-sum":
            part = part + jax.nn.gelu(lnorm(part) @ dn) @ up
            return x + psum(part, "tp")
        h = x + psum(part, "tp")
        ad = jax.nn.gelu(lnorm(h) @ dn) @ up
        if bug == "residual-inside-psum":
            return psum(h + ad, "tp")
        if bug == "up-not-psummed":
            return h + ad
        return h + psum(ad, "tp")
    return f


C.smap("s.houlsby_adapter_after_tp_attention.dp2xtp4", DPTP, houlsby_tp,
       (P("dp"), P(None, "tp"), P(None, "tp"), P(None, "tp"), P("tp"), P(None, "tp"), P("tp")), P("dp"), houlsby,
       (R(4, 6, D), R(D, H, E, scale=0.3), R(D, H, E, scale=0.3), R(D, H, E, scale=0.3), R(H, E, D, scale=0.3),
        R(D, RB, scale=0.4), R(RB, D, scale=0.4)),
       bugs=[("adapter-on-partial-sum", ["wrong-reduction"]), ("residual-inside-psum", ["wrong-reduction"]),
             ("up-not-psummed", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 6. prefix tuning with heads over tp: learned prefix keys / values.
NP6 = 3


def prefix_mask(t, npf):
    return jnp.concatenate([jnp.ones((t, npf), bool), causal(t)], 1)


def prefix_attn(x, wq, wk, wv, wo, pk, pv):
    q, k, v = (jnp.einsum("btd,dhe->bthe", x, w) for w in (wq, wk, wv))
    b = x.shape[0]
    k = jnp.concatenate([jnp.broadcast_to(pk, (b,) + pk.shape), k], 1)
    v = jnp.concatenate([jnp.broadcast_to(pv, (b,) + pv.shape), v], 1)
    return jnp.einsum("bthe,hed->btd", attn(q, k, v, prefix_mask(x.shape[1], NP6)), wo)


def prefix_tp(bug):
    def f(x, wq, wk, wv, wo, pk, pv):
        hl = wq.shape[1]
        off = 0 if bug == "prefix-heads-offset-0" else idx("tp") * hl
        pk_l = lax.dynamic_slice_in_dim(pk, off, hl, 1)
        pv_l = lax.dynamic_slice_in_dim(pv, off, hl, 1)
        q, k, v = (jnp.einsum("btd,dhe->bthe", x, w) for w in (wq, wk, wv))
        b, t = x.shape[:2]
        pk_b = jnp.tile(pk_l[None], (b, 1, 1, 1))
        pv_b = jnp.tile(pv_l[None], (b, 1, 1, 1))
        if bug == "prefix-after-keys":
            kk, vv = jnp.concatenate([k, pk_b], 1), jnp.concatenate([v, pv_b], 1)
        else:
            kk, vv = jnp.concatenate([pk_b, k], 1), jnp.concatenate([pv_b, v], 1)
        qi, ki = jnp.arange(t)[:, None], jnp.arange(t + NP6)[None, :]
        ok = ki <= qi if bug == "prefix-masked-causally" else ki <= qi + NP6
        return psum(jnp.einsum("bthe,hed->btd", attn(q, kk, vv, ok), wo), "tp")
    return f


PF6 = (R(4, 6, D), R(D, H, E, scale=0.3), R(D, H, E, scale=0.3), R(D, H, E, scale=0.3), R(H, E, D, scale=0.3),
       R(NP6, H, E), R(NP6, H, E))
C.smap("s.prefix_tuning_kv_heads_tp.dp2xtp4", DPTP, prefix_tp,
       (P("dp"), P(None, "tp"), P(None, "tp"), P(None, "tp"), P("tp"), P(), P()), P("dp"), prefix_attn, PF6,
       bugs=[("prefix-heads-offset-0", ["wrong-offset"]), ("prefix-after-keys", ["wrong-offset"]),
             ("prefix-masked-causally", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 7. prefix tuning with the sequence over sp: real tokens at n_prefix + t.
NP7, T7 = 2, 16
INV7 = (1.0 / 10000.0 ** (np.arange(0, E, 2) / E)).astype(np.float32)


def rope(x, pos):
    ang = pos[:, None].astype(jnp.float32) * INV7
    c, s_ = jnp.cos(ang)[:, None], jnp.sin(ang)[:, None]
    x1, x2 = x[..., : E // 2], x[..., E // 2:]
    return jnp.concatenate([x1 * c - x2 * s_, x2 * c + x1 * s_], -1)


def prefix_rope(q, k, v, pk, pv):
    t = q.shape[1]
    pos = NP7 + jnp.arange(t)
    q, k = rope(q, pos), rope(k, pos)
    b = q.shape[0]
    kk = jnp.concatenate([jnp.broadcast_to(pk, (b,) + pk.shape), k], 1)
    vv = jnp.concatenate([jnp.broadcast_to(pv, (b,) + pv.shape), v], 1)
    return attn(q, kk, vv, prefix_mask(t, NP7))


def prefix_rope_sp(bug):
    def f(q, k, v, pk, pv):
        tl, b = q.shape[1], q.shape[0]
        me = idx("sp")
        g = me * tl + jnp.arange(tl)
        if bug == "positions-without-prefix-offset":
            pos = g
        elif bug == "positions-local":
            pos = NP7 + jnp.arange(tl)
        else:
            pos = NP7 + g
        q, k = rope(q, pos), rope(k, pos)
        kg = lax.all_gather(k, "sp", axis=1, tiled=True)
        vg = lax.all_gather(v, "sp", axis=1, tiled=True)
        kk = jnp.concatenate([jnp.broadcast_to(pk, (b,) + pk.shape), kg], 1)
        vv = jnp.concatenate([jnp.broadcast_to(pv, (b,) + pv.shape), vg], 1)
        qg = jnp.arange(tl) if bug == "mask-local-query-pos" else g
        kp = jnp.arange(NP7 + 4 * tl) - NP7
        ok = (kp[None, :] < 0) | (kp[None, :] <= qg[:, None])
        return attn(q, kk, vv, ok)
    return f


C.smap("s.prefix_tuning_rope_seq_parallel.sp4", {"sp": 4}, prefix_rope_sp,
       (P(None, "sp"), P(None, "sp"), P(None, "sp"), P(), P()), P(None, "sp"), prefix_rope,
       (R(2, T7, H, E), R(2, T7, H, E), R(2, T7, H, E), R(NP7, H, E), R(NP7, H, E)),
       bugs=[("positions-without-prefix-offset", ["wrong-offset"]), ("positions-local", ["wrong-offset"]),
             ("mask-local-query-pos", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 8. prompt tuning over a vocabulary-parallel embedding, two optax.sgd
#    (momentum) steps of the soft prompt, check_vma=True.
V8, NP8, NC8 = 32, 3, 5
OPT8 = optax.sgd(0.5, momentum=0.9)


def prompt_logits(prompt, emb, wc, tok):
    x = emb[tok]
    x = jnp.concatenate([jnp.broadcast_to(prompt, (tok.shape[0],) + prompt.shape), x], 1)
    return jnp.tanh(x).mean(1) @ wc


def prompt_train(prompt, st, emb, wc, toks, labels):
    ls = []
    for i in range(2):
        def loss(p):
            return optax.softmax_cross_entropy_with_integer_labels(prompt_logits(p, emb, wc, toks[i]), labels[i]).mean()
        l, g = jax.value_and_grad(loss)(prompt)
        u, st = OPT8.update(g, st, prompt)
        prompt = optax.apply_updates(prompt, u)
        ls.append(l)
    return prompt, st, jnp.stack(ls)


def prompt_train_tp(bug):
    def f(prompt, st, emb, wc, toks, labels):
        vl = emb.shape[0]
        off = idx("tp") * vl

        def lookup(tok):
            loc = tok if bug == "ids-without-vocab-offset" else tok - off
            hit = (loc >= 0) & (loc < vl)
            return jnp.where(hit[..., None], emb[jnp.clip(loc, 0, vl - 1)], 0.0)

        ls = []
        for i in range(2):
            def loss(p):
                tok = toks[i]
                pb = jnp.broadcast_to(p, (tok.shape[0],) + p.shape)
                if bug == "prompt-inside-psum":
                    x = psum(jnp.concatenate([pb, lookup(tok)], 1), "tp")
                else:
                    x = jnp.concatenate([pb, psum(lookup(tok), "tp")], 1)
                lg = jnp.tanh(x).mean(1) @ wc
                return pmean(optax.softmax_cross_entropy_with_integer_labels(lg, labels[i]).mean(), "dp")
            l, g = jax.value_and_grad(loss)(prompt)
            u, st = OPT8.update(g, st, prompt)
            prompt = optax.apply_updates(prompt, u)
            ls.append(l)
        return prompt, st, jnp.stack(ls)
    return f


PR8 = R(NP8, D, scale=0.5)
ST8 = OPT8.init(PR8)
C.smap("s.prompt_tuning_vocab_parallel_sgd.dp2xtp4", DPTP, prompt_train_tp,
       (P(), jax.tree.map(lambda _: P(), ST8), P("tp"), P(), P(None, "dp"), P(None, "dp")),
       (P(), jax.tree.map(lambda _: P(), ST8), P()), prompt_train,
       (PR8, ST8, R(V8, D), R(D, NC8), I(0, V8, 2, 4, 6), I(0, NC8, 2, 4)),
       bugs=[("prompt-inside-psum", ["wrong-reduction"]), ("ids-without-vocab-offset", ["wrong-offset"])],
       check_vma=True)

# ---------------------------------------------------------------------------
# 9. IA3 on attention and MLP, heads / hidden over tp, vectors replicated;
#    the key scaling folded into the queries.


def ia3(x, wq, wk, wv, wo, w1, w2, lk, lv, lff):
    q, k, v = (jnp.einsum("btd,dhe->bthe", x, w) for w in (wq, wk, wv))
    h = x + jnp.einsum("bthe,hed->btd", attn(q, k * lk, v * lv, causal(x.shape[1])), wo)
    return h + (jax.nn.silu(h @ w1) * lff) @ w2


def ia3_tp(bug):
    def f(x, wq, wk, wv, wo, w1, w2, lk, lv, lff):
        hl, fl, me = wq.shape[1], w1.shape[1], idx("tp")
        lk_l = lax.dynamic_slice_in_dim(lk, me * hl, hl, 0)
        lv_l = lax.dynamic_slice_in_dim(lv, me * hl, hl, 0)
        lff_l = lax.dynamic_slice_in_dim(lff, 0 if bug == "lff-offset-0" else me * fl, fl, 0)
        q = jnp.einsum("btd,dhe->bthe", x, wq * lk_l)  # l_k folded into the queries
        k = jnp.einsum("btd,dhe->bthe", x, wk)
        v = jnp.einsum("btd,dhe->bthe", x, wv) * lv_l
        h = x + psum(jnp.einsum("bthe,hed->btd", attn(q, k, v, causal(x.shape[1])), wo), "tp")
        if bug == "lff-before-activation":
            a = jax.nn.silu(h @ w1 * lff_l)
        else:
            a = jax.nn.silu(h @ w1) * lff_l
        return h + psum(a @ w2, "tp")
    return f


C.smap("s.ia3_key_scaling_folded_into_queries.tp4", {"tp": 4}, ia3_tp,
       (P(), P(None, "tp"), P(None, "tp"), P(None, "tp"), P("tp"), P(None, "tp"), P("tp"), P(), P(), P()), P(), ia3,
       (R(2, 6, D), R(D, H, E, scale=0.3), R(D, H, E, scale=0.3), R(D, H, E, scale=0.3), R(H, E, D, scale=0.3),
        R(D, F, scale=0.3), R(F, D, scale=0.3), 1.0 + R(H, E, scale=0.3), 1.0 + R(H, E, scale=0.3),
        1.0 + R(F, scale=0.5)),
       bugs=[("lff-offset-0", ["wrong-offset"]), ("lff-before-activation", ["wrong-order"])])

# ---------------------------------------------------------------------------
# 10. QLoRA-style SwiGLU: int8 frozen weights with per-output-channel
#     scales, bf16 LoRA on up and down with f32 accumulation.
bf16 = jnp.bfloat16


def bdot(a, b):
    return jnp.dot(a.astype(bf16), b.astype(bf16), preferred_element_type=jnp.float32)


def qlora_swiglu(x, cg, sg, cu, su, cd, sd, au, bu, ad, bd):
    wg, wu, wd = cg.astype(jnp.float32) * sg, cu.astype(jnp.float32) * su, cd.astype(jnp.float32) * sd
    u = x @ wu + S * bdot(bdot(x, au), bu)
    h = jax.nn.silu(x @ wg) * u
    return h @ wd + S * bdot(bdot(h, ad), bd)


def qlora_tp(bug):
    def f(x, cg, sg, cu, su, cd, sd, au, bu, ad, bd):
        wg = cg.astype(jnp.float32) * (su if bug == "gate-with-up-scales" else sg)
        wu = cu.astype(jnp.float32) * su
        u = x @ wu + S * bdot(bdot(x, au), bu)
        h = jax.nn.silu(x @ wg) * u
        xa = bdot(h, ad)  # partial over the device's hidden rows
        if bug != "down-xa-not-psummed":
            xa = psum(xa, "tp")
        y = psum(h @ (cd.astype(jnp.float32) * sd), "tp")
        return y + S * bdot(xa, bd)
    return f


def q8(w, axis):
    sc = np.abs(w).max(axis) / 127.0
    return np.round(w / np.expand_dims(sc, axis)).astype(np.int8), sc.astype(np.float32)


CG, SG = q8(R(D, F, scale=0.3), 0)
CU, SU = q8(R(D, F, scale=0.3), 0)
CD, SD = q8(R(F, D, scale=0.3), 0)
C.smap("s.qlora_int8_perchannel_swiglu_bf16_lora.dp2xtp4", DPTP, qlora_tp,
       (P("dp"), P(None, "tp"), P("tp"), P(None, "tp"), P("tp"), P("tp"), P(), P(), P(None, "tp"), P("tp"), P()),
       P("dp"), qlora_swiglu,
       (R(4, D), CG, SG, CU, SU, CD, SD, R(D, RK, scale=0.3), R(RK, F, scale=0.3), R(F, RK, scale=0.3),
        R(RK, D, scale=0.3)),
       bugs=[("down-xa-not-psummed", ["missing-all-reduce"]), ("gate-with-up-scales", ["wrong-operand"])])

# ---------------------------------------------------------------------------
# 11. LoRA gradients reduced by hand (check_vma=False), two adamw steps.
N11 = 16
OPT11 = optax.adamw(2e-2, weight_decay=0.01)


def lora_manual(ad, st, w, xs, ys):
    ls = []
    for i in range(2):
        def loss(ad):
            return jnp.mean(jnp.square(xs[i] @ w + S * (xs[i] @ ad["a"]) @ ad["b"] - ys[i]))
        l, g = jax.value_and_grad(loss)(ad)
        u, st = OPT11.update(g, st, ad)
        ad = optax.apply_updates(ad, u)
        ls.append(l)
    return ad, st, jnp.stack(ls)


def lora_manual_tp(bug):
    def f(ad, st, w, xs, ys):
        ls = []
        for i in range(2):
            x, y = xs[i], ys[i]

            def local_loss(ad):  # mean over the local batch, normalised by the full width
                return jnp.sum(jnp.square(x @ w + S * (x @ ad["a"]) @ ad["b"] - y)) / (x.shape[0] * N11)
            l, g = jax.value_and_grad(local_loss)(ad)
            ga = pmean(g["a"], "dp") if bug == "a-grad-dp-only" else pmean(psum(g["a"], "tp"), "dp")
            gb = pmean(psum(g["b"], "tp"), "dp") if bug == "b-grad-summed-over-tp" else pmean(g["b"], "dp")
            u, st = OPT11.update({"a": ga, "b": gb}, st, ad)
            ad = optax.apply_updates(ad, u)
            ls.append(pmean(psum(l, "tp"), "dp"))
        return ad, st, jnp.stack(ls)
    return f


AD11 = {"a": R(D, RK, scale=0.3), "b": R(RK, N11, scale=0.3)}
SP11 = {"a": P(), "b": P(None, "tp")}
ST11 = OPT11.init(AD11)
C.smap("s.lora_grads_by_hand_col_parallel_adamw.dp2xtp4", DPTP, lora_manual_tp,
       (SP11, state_specs(ST11, SP11), P(None, "tp"), P(None, "dp"), P(None, "dp", "tp")),
       (SP11, state_specs(ST11, SP11), P()), lora_manual,
       (AD11, ST11, R(D, N11, scale=0.3), R(2, 8, D), R(2, 8, N11)),
       bugs=[("a-grad-dp-only", ["missing-all-reduce"]), ("b-grad-summed-over-tp", ["wrong-reduction"])])

# ---------------------------------------------------------------------------
# 12. multi-LoRA serving with the adapter bank sharded over ep.
NA, N12 = 8, 16
DPEP = {"dp": 2, "ep": 4}


def multi_lora(x, ids, w, A, B):
    xa = jnp.einsum("bd,bdr->br", x, A[ids])
    return x @ w + S * jnp.einsum("br,brn->bn", xa, B[ids])


def multi_lora_ep(bug):
    def f(x, ids, w, A, B):
        bl, nl = x.shape[0], A.shape[0]
        mine = lax.dynamic_slice_in_dim(ids, 0 if bug == "ids-at-batch-offset-0" else idx("dp") * bl, bl)
        loc = mine if bug == "bank-index-without-offset" else mine - idx("ep") * nl
        own = (loc >= 0) & (loc < nl)
        li = jnp.clip(loc, 0, nl - 1)
        xa = jnp.einsum("bd,bdr->br", x, jnp.take(A, li, axis=0))
        d = jnp.einsum("br,brn->bn", xa, jnp.take(B, li, axis=0))
        return x @ w + S * psum(jnp.where(own[:, None], d, 0.0), "ep")
    return f


IDS12 = np.array([5, 0, 7, 2, 2, 6, 1, 3], np.int32)
C.smap("s.multi_lora_bank_over_ep_batch_over_dp.dp2xep4", DPEP, multi_lora_ep,
       (P("dp"), P(), P(), P("ep"), P("ep")), P("dp"), multi_lora,
       (R(8, D), IDS12, R(D, N12, scale=0.3), R(NA, D, RK, scale=0.3), R(NA, RK, N12, scale=0.3)),
       bugs=[("ids-at-batch-offset-0", ["wrong-offset"]), ("bank-index-without-offset", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 13. rsLoRA with the rank dim sharded over tp on an FSDP base weight.
R13, A13 = 8, 8.0


def rslora(x, w, a, b):
    return x @ w + (A13 / np.sqrt(R13)) * (x @ a) @ b


def rslora_tp(bug):
    def f(x, w, a, b):
        wf = lax.all_gather(w, "dp", axis=0, tiled=True)
        r = a.shape[1] if bug == "scale-from-local-rank" else a.shape[1] * 4
        lo = lax.dot(lax.dot(x, a), b)
        if bug != "lora-not-psummed":
            lo = psum(lo, "tp")
        return jnp.dot(x, wf) + A13 / np.sqrt(r) * lo
    return f


C.smap("s.rslora_rank_sharded_fsdp_base.dp2xtp4", DPTP, rslora_tp,
       (P("dp"), P("dp"), P(None, "tp"), P("tp")), P("dp"), rslora,
       (R(8, D), R(D, N12, scale=0.3), R(D, R13, scale=0.3), R(R13, N12, scale=0.3)),
       bugs=[("scale-from-local-rank", ["wrong-scale"]), ("lora-not-psummed", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 14. frozen-base LoRA MLP, two steps in a lax.scan, optax.multi_transform.


def labels14(p, frozen=()):
    return jax.tree_util.tree_map_with_path(
        lambda path, _: "train" if path[0].key == "lora" and path[-1].key not in frozen else "frozen", p)


def opt14(frozen=()):
    return optax.multi_transform({"train": optax.adamw(2e-2, weight_decay=0.01), "frozen": optax.set_to_zero()},
                                 lambda p: labels14(p, frozen))


def mlp14(p, x, tp_sum=lambda y: y):
    b, l = p["base"], p["lora"]
    h = jax.nn.gelu(x @ b["w1"] + S * (x @ l["a1"]) @ l["b1"])
    return tp_sum(h @ b["w2"] + S * (h @ l["a2"]) @ l["b2"])


def train14(p, xs, ys):
    opt = opt14()
    st = opt.init(p)

    def step(c, xy):
        p, st = c
        l, g = jax.value_and_grad(lambda p: jnp.mean(jnp.square(mlp14(p, xy[0]) - xy[1])))(p)
        u, st = opt.update(g, st, p)
        return (optax.apply_updates(p, u), st), l
    (p, st), ls = lax.scan(step, (p, st), (xs, ys))
    return p, ls


def train14_tp(bug):
    def f(p, xs, ys):
        opt = opt14(("b2",) if bug == "row-b-labelled-frozen" else ())
        st = opt.init(p)
        red = (lambda l: psum(l, "dp")) if bug == "loss-psummed-over-dp" else (lambda l: pmean(l, "dp"))

        def step(c, xy):
            p, st = c

            def loss(p):
                return red(jnp.mean(jnp.square(mlp14(p, xy[0], lambda y: psum(y, "tp")) - xy[1])))
            l, g = jax.value_and_grad(loss)(p)
            u, st = opt.update(g, st, p)
            return (optax.apply_updates(p, u), st), l
        (p, st), ls = lax.scan(step, (p, st), (xs, ys))
        return p, ls
    return f


P14 = {"base": {"w1": R(D, F, scale=0.3), "w2": R(F, D, scale=0.3)},
       "lora": {"a1": R(D, RK, scale=0.3), "b1": R(RK, F, scale=0.3), "a2": R(F, RK, scale=0.3),
                "b2": R(RK, D, scale=0.3)}}
SP14 = {"base": {"w1": P(None, "tp"), "w2": P("tp")},
        "lora": {"a1": P(), "b1": P(None, "tp"), "a2": P("tp"), "b2": P()}}
XY14 = (R(2, 8, D), R(2, 8, D))
C.smap("s.multitransform_frozen_base_lora_scan.dp2xtp4", DPTP, train14_tp,
       (SP14, P(None, "dp"), P(None, "dp")), (SP14, P()), train14, (P14,) + XY14,
       bugs=[("row-b-labelled-frozen", ["wrong-operand"]), ("loss-psummed-over-dp", ["wrong-reduction"])],
       check_vma=True)

# ---------------------------------------------------------------------------
# GSPMD pairs.
C.gspmd("g.multitransform_frozen_base_lora_scan.dp2xtp4", DPTP, (SP14, P(None, "dp"), P(None, "dp")),
        (SP14, P()), train14, (P14,) + XY14)

C.gspmd("g.dora_col_row.tp4", {"tp": 4},
        (P(), P(None, "tp"), P(), P(None, "tp"), P("tp"), P("tp"), P("tp"), P(), P()), P(), dora_mlp,
        (R(6, D), R(D, F, scale=0.3), R(D, RK, scale=0.3), R(RK, F, scale=0.3), 1.0 + R(F, scale=0.2),
         R(F, D, scale=0.3), R(F, RK, scale=0.3), R(RK, D, scale=0.3), 1.0 + R(D, scale=0.2)))

C.gspmd("g.multi_lora_bank_take.dp2xep4", DPEP, (P("dp"), P("dp"), P(), P("ep"), P("ep")), P("dp"), multi_lora,
        (R(8, D), IDS12, R(D, N12, scale=0.3), R(NA, D, RK, scale=0.3), R(NA, RK, N12, scale=0.3)))


def merged_int8_lora(codes, sc, a, b, x):
    w = (codes.astype(jnp.float32) * sc + S * a @ b).astype(bf16)
    return w, jnp.dot(x.astype(bf16), w, preferred_element_type=jnp.float32)


CM, SM = q8(R(D, F, scale=0.3), 0)
C.gspmd("g.merged_int8_perchannel_lora.dp2xtp4", DPTP, (P("dp", "tp"), P("tp"), P("dp"), P(None, "tp"), P()),
        (P("dp", "tp"), P(None, "tp")), merged_int8_lora,
        (CM, SM, R(D, RK, scale=0.3), R(RK, F, scale=0.3), R(4, D)))

C.gspmd("g.prefix_tuning_kv_heads.dp2xtp4", DPTP,
        (P("dp"), P(None, "tp"), P(None, "tp"), P(None, "tp"), P("tp"), P(None, "tp"), P(None, "tp")), P("dp"),
        prefix_attn, PF6)
C.finish()
