"""samples/fresh55: a 55th batch of programs as a user writes them, on the theme of packed sequences and document masking in training (segment ids, position ids restarting per document, block-diagonal document masks with causal masks, per-document loss normalisation, documents straddling sequence-parallel blocks, load-balanced zigzag context parallelism, jax.grad training steps with optax), none of them an idiom of samples/fresh .. fresh26, probe, train or wild.
Segment ids: 1, 2, ... per document within a row, 0 for padding at the row's
end (never a document); documents straddle the sp blocks.
shard_map families:
 1. per-document mean loss, sequence over sp4: per-token cross-entropy of a
    replicated head on labels passed pre-shifted, per-(row, document) sums
    and token counts by a one-hot einsum, both psum'd over sp, the mean per
    document then over the documents present. Bugs: counts not psum'd (local
    counts), per-document means taken locally then pmean'd, padding
    (segment 0) counted as a document.
 2. training step, batch over dp4 (rows hold different numbers of
    documents): the loss is the mean over all documents of the batch of the
    per-document mean; each device's share is its documents' means over the
    psum'd document count; jax.grad of the share, gradients psum'd by hand
    (check_vma=False), one optax.adam step from a passed-in state (mu, nu,
    count). Bugs: the local mean over local documents with pmean'd
    gradients, gradients not reduced.
 3. zigzag (load-balanced) context parallelism for document-masked causal
    attention, sp4: the row is held in zigzag order (8 chunks of 4; device
    i holds chunks i and 7 - i), the baseline undoes the order, attends and
    redoes it; on device the global positions of both chunks, keys, values,
    segment ids and positions all_gather'd. Bugs: the second chunk's
    positions taken as contiguous (chunk 4 + i), key positions taken as the
    gather order (arange), document mask dropped.
 4. learned absolute position embeddings at positions restarting per
    document, sequence over sp4: segment ids all_gather'd, the first index
    of each document by jax.ops.segment_min over the full row, the block's
    slice by dynamic_slice at axis_index * block; token + position
    embeddings. Bugs: slice at offset 0, positions not restarted (global
    token index).
 5. document-masked causal attention with heads over tp and batch over dp
    (dp2 x tp4), projections in bf16 with f32 softmax, the output
    projection psum'd over tp. Bugs: psum over dp (wrong axis), no psum.
 6. per-document mean pooling (document embeddings) of a packed batch,
    dp2 x sp4 (rows over dp, sequence over sp): jax.ops.segment_sum per row
    (vmap), sums and counts psum'd over sp. Bugs: local counts, sums psum'd
    over dp instead of sp.
 7. training step, sequence over sp4, check_vma=True, a document-weighted
    loss (document d weighs sqrt(n_d), n_d its token count; mean per
    document then the weighted mean over documents) whose sums are psum'd
    inside the differentiated function; jax.grad; optax.sgd with momentum
    from a passed-in trace. Bugs: gradients psum'd once more by hand,
    per-document weights from local token counts (loss pmean'd).
13. segment ids from end-of-document flags, sequence over sp4: the
    devices' EOS totals scanned across devices Hillis-Steele style
    (ppermute by 1 then 2), made exclusive, then document-masked causal
    attention on gathered keys. Bugs: steps 1, 1; the scan sent the wrong
    way; an inclusive prefix.
14. vocab-parallel cross-entropy with per-document normalisation and its
    gradient (check_vma=True), vocab over tp, rows over dp. Bugs: the
    target logit psum'd over (dp, tp), the target index without the vocab
    offset, a pmean over dp of per-shard document means. (First-draft bugs
    "local max" and "target logit pmax'd" dropped: check_vma rejects the
    first, pmax has no derivative.)
15. Ulysses-style (all_to_all sequence <-> heads) bidirectional
    document-masked attention on padded packed rows, sp4. Bugs: the key
    segment ids the local block tiled, padding keys not masked.
16. optax.adamw step on dp2 x sp4 with check_vma=True, per-document mean
    loss whose sums are psum'd over sp inside the differentiated function.
    Bugs: gradients psum'd over dp once more, document sums left sp-local
    and the loss pmean'd over sp.
21. per-document mean loss with the documents psum_scatter'd over sp8
    (rank r owns document r; the padding document dropped on rank 0).
    Bugs: padding dropped on rank 1, the numerator pmean'd.
22. gradient accumulation over 2 microbatches by lax.scan, dp4, the
    gradient of the sum of document means and the document count
    accumulated then psum'd and divided; optax.sgd. Bugs: normalised per
    microbatch (then pmean'd), the document count not psum'd.
23. blockwise online-softmax document-masked causal attention, sp4, keys
    gathered stacked (all_gather tiled=False), lax.scan over key blocks.
    Bugs: no rescale of the running sums, key-block offset missing.
26. the same with a tiled gather reshaped into blocks by the user. Bug:
    the denominator not rescaled.
27. half token mean plus half per-document mean, int32 bincount counts
    psum'd as integers, document sums by segment_sum, sp4. Bugs: the token
    count left local, the document count taken as the number of tokens.
28. token-weighted mean over documents of the per-document means, dp2 x
    sp4: local per-document means merged by token counts,
    psum(n_dk * mean_dk) / psum(n_dk). Bugs: an unweighted merge, the outer
    weights the local counts. (The correct pair is right: n_dk * mean_dk is
    the local sum s_dk; with --no-witness, or above the witness's element
    bound, the rules report it as a missing all-reduce.)
29. the per-document mean loss, the baseline written with jnp.nanmean over
    NaN-filled absent documents, the body as psum'd sums and counts, dp2 x
    sp4. Bug: the document count not psum'd over dp.
GSPMD pairs (jax.jit with in/out shardings): 8. the per-document mean loss
of 1. with its gradient in the head (sp4); 9. the zigzag document-masked
attention baseline of 3. (sp4); 10. the training step of 2. with the batch
over dp2 and the head's vocab over tp4; 11. per-document mean pooling of 6.
(dp2 x sp4); 12. position-restarting embeddings of 4. followed by the
document-masked attention of 5. (dp2 x tp4, heads constrained to tp);
17. the loss of 14. with its gradient (dp2 x tp4); 18. the EOS segment ids
and attention of 13. (sp4); 19. the adamw step of 16. (dp2 x sp4); 20. the
bidirectional attention of 15. with heads over sp4; 24. the step of 22. as
one jitted step (dp4); 25. the per-document mean loss (sp8); 30. the
token-weighted loss of 28. with its gradient (dp2 x sp4).
First draft of 4.: the baseline computed restarting positions by a cummax
of run starts while the body used segment_min of each id's first index;
the two differ on ids that are not one contiguous run (which random
witness inputs have), so the checker's mismatch was right; the baseline
now uses the same first-index definition (embed_first).
Numerics: see each pair's "numerics" in the manifest (f32 correct pairs at
rounding level; the bf16 family 5 at bf16 rounding, as its baseline is bf16
too). Masks fill with -1e30, not -inf.
Run from the repository root: bash samples/gen/run_fresh55.sh [SUBSTR...]
"""
import sys
import numpy as np
import jax, jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec as P, NamedSharding
import optax
sys.path.insert(0, "samples/gen")  # run from the repository root (run_fresh55.sh)
from fresh_lib import Corpus, seeded  # noqa: E402
from scalify_jax import make_mesh  # noqa: E402

SCRIPT = "samples/gen/fresh55.py"
C = Corpus("samples/fresh55", SCRIPT, "samples/gen/run_fresh55.sh", sys.argv[1:])
rng, R, I = seeded(5555)
psum, pmean, idx = lax.psum, lax.pmean, lax.axis_index
NEG = -1e30
ND = 8  # segment ids < ND


def pack(b, t, lens, pad):
    """Segment ids (1, 2, ...) of b rows of t tokens packed with documents of
    the lengths lens (cycled, shifted per row), the last pad[r] tokens of
    row r padding (0)."""
    out = np.zeros((b, t), np.int32)
    for r in range(b):
        i, s, n = 0, 1, r
        while i < t - pad[r]:
            L = min(lens[n % len(lens)], t - pad[r] - i)
            out[r, i:i + L] = s
            i, s, n = i + L, s + 1, n + 1
    return out


def token_ce(h, w, y):
    return optax.softmax_cross_entropy_with_integer_labels(jnp.einsum("btd,dv->btv", h, w), y)


def doc_mean_loss(h, w, y, seg):
    ce = token_ce(h, w, y)
    oh = jax.nn.one_hot(seg, ND)  # (b, t, ND)
    sums = jnp.einsum("bt,btn->bn", ce, oh)
    cnt = oh.sum(1)
    present = (cnt > 0) & (jnp.arange(ND) > 0)
    means = sums / jnp.maximum(cnt, 1.0)
    return jnp.sum(jnp.where(present, means, 0.0)) / jnp.sum(present)


# ---------------------------------------------------------------------------
# 1. per-document mean loss, sequence over sp4.
B1, T1, D1, V1 = 2, 16, 8, 16


def doc_loss_sp(bug):
    def f(h, w, y, seg):
        ce = token_ce(h, w, y)
        oh = jax.nn.one_hot(seg, ND)
        sums, cnt = jnp.einsum("bt,btn->bn", ce, oh), oh.sum(1)
        if bug == "local-doc-means-pmean":
            present = (cnt > 0) & (jnp.arange(ND) > 0)
            means = sums / jnp.maximum(cnt, 1.0)
            return pmean(jnp.sum(jnp.where(present, means, 0.0)) / jnp.maximum(jnp.sum(present), 1), "sp")
        sums = psum(sums, "sp")
        if bug != "counts-not-psummed":
            cnt = psum(cnt, "sp")
        present = (cnt > 0)
        if bug != "pad-counted-as-doc":
            present = present & (jnp.arange(ND) > 0)
        means = sums / jnp.maximum(cnt, 1.0)
        return jnp.sum(jnp.where(present, means, 0.0)) / jnp.sum(present)
    return f


SEG1 = pack(B1, T1, [6, 3, 5], [3, 2])
ARGS1 = (R(B1, T1, D1), R(D1, V1, scale=0.7), I(0, V1, B1, T1), SEG1)
C.smap("s.perdoc_mean_loss_onehot.sp4", {"sp": 4}, doc_loss_sp,
       (P(None, "sp"), P(), P(None, "sp"), P(None, "sp")), P(), doc_mean_loss, ARGS1,
       bugs=[("counts-not-psummed", ["missing-all-reduce"]), ("local-doc-means-pmean", ["wrong-collective-op"]),
             ("pad-counted-as-doc", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 2. training step, batch over dp4, mean over all documents of the batch of
#    the per-document mean, one adam step from a passed-in state.
B2, T2, D2, V2 = 8, 8, 8, 12
OPT2 = optax.adam(0.05)


def adam_state(params, mu, nu, count):
    st = OPT2.init(params)
    return (st[0]._replace(count=count, mu=mu, nu=nu),) + tuple(st[1:])


def doc_sums(p, h, y, seg):
    ce = optax.softmax_cross_entropy_with_integer_labels(jnp.einsum("btd,dv->btv", h, p["w"]) + p["b"], y)
    oh = jax.nn.one_hot(seg, ND)
    sums, cnt = jnp.einsum("bt,btn->bn", ce, oh), oh.sum(1)
    present = (cnt > 0) & (jnp.arange(ND) > 0)
    return jnp.sum(jnp.where(present, sums / jnp.maximum(cnt, 1.0), 0.0)), jnp.sum(present)


def step2(p, mu, nu, count, h, y, seg):
    def loss(p):
        s, n = doc_sums(p, h, y, seg)
        return s / n
    l, g = jax.value_and_grad(loss)(p)
    upd, st = OPT2.update(g, adam_state(p, mu, nu, count), p)
    return optax.apply_updates(p, upd), st[0].mu, st[0].nu, l


def step2_dp(bug):
    def f(p, mu, nu, count, h, y, seg):
        ndocs = psum(doc_sums(p, h, y, seg)[1], "dp")

        def share(p):
            s, n = doc_sums(p, h, y, seg)
            return s / n if bug == "local-mean-pmean-grads" else s / ndocs
        l, g = jax.value_and_grad(share)(p)
        if bug == "local-mean-pmean-grads":
            l, g = pmean(l, "dp"), pmean(g, "dp")
        elif bug == "grads-not-reduced":
            l = psum(l, "dp")
        else:
            l, g = psum(l, "dp"), psum(g, "dp")
        upd, st = OPT2.update(g, adam_state(p, mu, nu, count), p)
        return optax.apply_updates(p, upd), st[0].mu, st[0].nu, l
    return f


# rows with different numbers of documents, so device shares differ
SEG2 = np.concatenate([pack(2, T2, [8], [0, 0]), pack(2, T2, [2, 3], [1, 0]), pack(2, T2, [1, 2, 1], [0, 2]),
                       pack(2, T2, [4, 1], [3, 0])])
P2 = {"w": R(D2, V2, scale=0.5), "b": R(V2, scale=0.1)}
MU2 = {"w": R(D2, V2, scale=0.05), "b": R(V2, scale=0.05)}
NU2 = {"w": np.abs(R(D2, V2, scale=0.01)), "b": np.abs(R(V2, scale=0.01))}
ARGS2 = (P2, MU2, NU2, np.int32(3), R(B2, T2, D2), I(0, V2, B2, T2), SEG2)
RP2 = {"w": P(), "b": P()}
C.smap("s.perdoc_loss_adam_step.dp4", {"dp": 4}, step2_dp, (RP2, RP2, RP2, P(), P("dp"), P("dp"), P("dp")),
       (RP2, RP2, RP2, P()), step2, ARGS2,
       bugs=[("local-mean-pmean-grads", ["wrong-collective-op"]), ("grads-not-reduced", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 3. zigzag context parallelism, document-masked causal attention, sp4.
B3, T3, H3, E3, NS = 2, 32, 2, 8, 4
CH = T3 // (2 * NS)
ZZ = np.concatenate([np.r_[i * CH:(i + 1) * CH, (2 * NS - 1 - i) * CH:(2 * NS - i) * CH] for i in range(NS)])
UNZZ = np.argsort(ZZ)


def attend(q, k, v, ok):
    s = jnp.einsum("bqhe,bkhe->bhqk", q, k) / np.sqrt(q.shape[-1])
    s = jnp.where(ok[:, None], s, NEG)
    return jnp.einsum("bhqk,bkhe->bqhe", jax.nn.softmax(s, -1), v)


def docmask_causal(q, k, v, seg):
    t = q.shape[1]
    ok = (seg[:, :, None] == seg[:, None, :]) & jnp.tril(jnp.ones((t, t), bool))
    return attend(q, k, v, ok)


def zigzag_attn(q, k, v, seg):
    """Inputs held in zigzag order (position ZZ[j] at slot j)."""
    q, k, v, seg = (a[:, UNZZ] for a in (q, k, v, seg))
    return docmask_causal(q, k, v, seg)[:, ZZ]


def zigzag_cp(bug):
    def f(q, k, v, seg):
        me = idx("sp")
        second = (NS + me) if bug == "second-chunk-contiguous" else (2 * NS - 1 - me)
        pos = jnp.concatenate([me * CH + jnp.arange(CH), second * CH + jnp.arange(CH)])
        kk, vv, ks = (lax.all_gather(a, "sp", axis=1, tiled=True) for a in (k, v, seg))
        kpos = jnp.arange(T3) if bug == "key-pos-gather-order" else lax.all_gather(pos, "sp", tiled=True)
        ok = pos[:, None] >= kpos[None, :]
        if bug != "no-doc-mask":
            ok = ok[None] & (seg[:, :, None] == ks[:, None, :])
        else:
            ok = jnp.broadcast_to(ok, (q.shape[0],) + ok.shape)
        return attend(q, kk, vv, ok)
    return f


SEG3 = pack(B3, T3, [7, 12, 5, 9], [0, 3])[:, ZZ]
ARGS3 = (R(B3, T3, H3, E3), R(B3, T3, H3, E3), R(B3, T3, H3, E3), SEG3)
C.smap("s.zigzag_cp_docmask_causal.sp4", {"sp": 4}, zigzag_cp, (P(None, "sp"),) * 4, P(None, "sp"),
       zigzag_attn, ARGS3,
       bugs=[("second-chunk-contiguous", ["wrong-offset"]), ("key-pos-gather-order", ["wrong-offset"]),
             ("no-doc-mask", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 4. learned position embeddings at positions restarting per document, sp4.
B4, T4, D4, V4 = 2, 16, 8, 20


def restart_pos(seg):
    t = jnp.arange(seg.shape[1])
    first = jnp.concatenate([jnp.ones_like(seg[:, :1], bool), seg[:, 1:] != seg[:, :-1]], 1)
    return t - lax.cummax(jnp.where(first, t, 0), axis=1)


def first_index_pos(seg):
    """t minus the first index of t's segment id in the row (the same as
    restart_pos when every id is one contiguous run)."""
    t = jnp.arange(seg.shape[1])
    return t - jax.vmap(lambda s: jax.ops.segment_min(t, s, num_segments=ND)[s])(seg)


def embed(tok, seg, te, pe):
    return te[tok] + pe[restart_pos(seg)]


def embed_first(tok, seg, te, pe):
    return jnp.take(te, tok, axis=0) + jnp.take(pe, first_index_pos(seg), axis=0)


def embed_sp(bug):
    def f(tok, seg, te, pe):
        tl = seg.shape[1]
        full = lax.all_gather(seg, "sp", axis=1, tiled=True)  # (b, T)
        t = jnp.arange(full.shape[1])
        if bug == "global-positions":
            pos = jnp.broadcast_to(t, full.shape)
        else:
            start = jax.vmap(lambda s: jax.ops.segment_min(t, s, num_segments=ND)[s])(full)
            pos = t - start
        off = 0 if bug == "slice-at-zero" else idx("sp") * tl
        mine = lax.dynamic_slice_in_dim(pos, off, tl, 1)
        return jnp.take(te, tok, axis=0) + jnp.take(pe, mine, axis=0)
    return f


SEG4 = pack(B4, T4, [5, 7, 3], [2, 0])
ARGS4 = (I(0, V4, B4, T4), SEG4, R(V4, D4), R(T4, D4))
C.smap("s.learned_pos_emb_restart_segment_min.sp4", {"sp": 4}, embed_sp,
       (P(None, "sp"), P(None, "sp"), P(), P()), P(None, "sp"), embed_first, ARGS4,
       bugs=[("slice-at-zero", ["wrong-offset"]), ("global-positions", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 5. document-masked causal attention, heads over tp, batch over dp, bf16.
B5, T5, D5, H5, E5 = 4, 8, 16, 8, 4
bf = jnp.bfloat16


def mha_doc(x, wq, wk, wv, wo, seg):
    q, k, v = (jnp.einsum("btd,dhe->bthe", x, w) for w in (wq, wk, wv))
    t = x.shape[1]
    ok = (seg[:, :, None] == seg[:, None, :]) & jnp.tril(jnp.ones((t, t), bool))
    s = jnp.einsum("bqhe,bkhe->bhqk", q, k).astype(jnp.float32) / np.sqrt(E5)
    pr = jax.nn.softmax(jnp.where(ok[:, None], s, NEG), -1).astype(bf)
    o = jnp.einsum("bhqk,bkhe->bqhe", pr, v)
    return jnp.einsum("bthe,hed->btd", o, wo)


def mha_tp(bug):
    def f(x, wq, wk, wv, wo, seg):
        y = mha_doc(x, wq, wk, wv, wo, seg)
        if bug == "psum-over-dp":
            return psum(y, "dp")
        return y if bug == "no-psum" else psum(y, "tp")
    return f


SEG5 = pack(B5, T5, [3, 4, 2], [0, 1, 0, 2])
ARGS5 = (R(B5, T5, D5, dt=bf), R(D5, H5, E5, scale=0.3, dt=bf), R(D5, H5, E5, scale=0.3, dt=bf),
         R(D5, H5, E5, scale=0.3, dt=bf), R(H5, E5, D5, scale=0.3, dt=bf), SEG5)
C.smap("s.docmask_mha_heads_tp_bf16.dp2xtp4", {"dp": 2, "tp": 4}, mha_tp,
       (P("dp"), P(None, "tp"), P(None, "tp"), P(None, "tp"), P("tp"), P("dp")), P("dp"), mha_doc, ARGS5,
       bugs=[("psum-over-dp", ["wrong-axis"]), ("no-psum", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 6. per-document mean pooling, rows over dp, sequence over sp.
B6, T6, D6 = 4, 16, 8


def pool(h, seg):
    def row(hr, sr):
        s = jax.ops.segment_sum(hr, sr, num_segments=ND)
        n = jax.ops.segment_sum(jnp.ones_like(sr, jnp.float32), sr, num_segments=ND)
        return s / jnp.maximum(n, 1.0)[:, None]
    return jax.vmap(row)(h, seg)


def pool_sp(bug):
    def f(h, seg):
        def row(hr, sr):
            return (jax.ops.segment_sum(hr, sr, num_segments=ND),
                    jax.ops.segment_sum(jnp.ones_like(sr, jnp.float32), sr, num_segments=ND))
        s, n = jax.vmap(row)(h, seg)
        s = psum(s, "dp" if bug == "sums-psum-over-dp" else "sp")
        if bug != "local-counts":
            n = psum(n, "sp")
        return s / jnp.maximum(n, 1.0)[..., None]
    return f


SEG6 = pack(B6, T6, [5, 2, 6], [0, 3, 1, 0])
C.smap("s.doc_mean_pool_segment_sum.dp2xsp4", {"dp": 2, "sp": 4}, pool_sp, (P("dp", "sp"), P("dp", "sp")), P("dp"),
       pool, (R(B6, T6, D6), SEG6),
       bugs=[("local-counts", ["missing-all-reduce"]), ("sums-psum-over-dp", ["wrong-axis"])])

# ---------------------------------------------------------------------------
# 7. training step, sequence over sp4 (check_vma=True), sqrt(n_d)-weighted
#    per-document loss, sgd with momentum from a passed-in trace.
B7, T7, D7, V7 = 2, 16, 8, 10
OPT7 = optax.sgd(0.1, momentum=0.9)


def wdoc_terms(w, h, y, seg):
    ce = token_ce(h, w, y)
    oh = jax.nn.one_hot(seg, ND)
    return jnp.einsum("bt,btn->bn", ce, oh), oh.sum(1)


def wdoc_loss(sums, cnt):
    wt = jnp.where(jnp.arange(ND) > 0, jnp.sqrt(cnt), 0.0)
    return jnp.sum(wt * sums / jnp.maximum(cnt, 1.0)) / jnp.sum(wt)


def step7(w, tr, h, y, seg):
    l, g = jax.value_and_grad(lambda w: wdoc_loss(*wdoc_terms(w, h, y, seg)))(w)
    st = OPT7.init(w)
    upd, st = OPT7.update(g, (optax.TraceState(trace=tr),) + tuple(st[1:]), w)
    return optax.apply_updates(w, upd), st[0].trace, l


def step7_sp(bug):
    def f(w, tr, h, y, seg):
        def loss(w):
            sums, cnt = wdoc_terms(w, h, y, seg)
            if bug == "weights-from-local-counts":
                return pmean(wdoc_loss(psum(sums, "sp"), cnt), "sp")
            return wdoc_loss(psum(sums, "sp"), psum(cnt, "sp"))
        l, g = jax.value_and_grad(loss)(w)
        if bug == "grads-psummed-again":
            g = psum(g, "sp")
        st = OPT7.init(w)
        upd, st = OPT7.update(g, (optax.TraceState(trace=tr),) + tuple(st[1:]), w)
        return optax.apply_updates(w, upd), st[0].trace, l
    return f


SEG7 = pack(B7, T7, [9, 2, 4], [1, 0])
ARGS7 = (R(D7, V7, scale=0.5), R(D7, V7, scale=0.1), R(B7, T7, D7), I(0, V7, B7, T7), SEG7)
C.smap("s.sqrt_weighted_doc_loss_sgd_momentum.sp4", {"sp": 4}, step7_sp,
       (P(), P(), P(None, "sp"), P(None, "sp"), P(None, "sp")), (P(), P(), P()), step7, ARGS7, check_vma=True,
       bugs=[("grads-psummed-again", ["wrong-scale"]), ("weights-from-local-counts", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# GSPMD pairs.
# 8. per-document mean loss and its gradient in the head, sequence over sp4.
C.gspmd("g.perdoc_mean_loss_grad.sp4", {"sp": 4}, (P(None, "sp"), P(), P(None, "sp"), P(None, "sp")), (P(), P()),
        lambda h, w, y, seg: jax.value_and_grad(doc_mean_loss, 1)(h, w, y, seg), ARGS1)

# 9. zigzag-held document-masked causal attention, sequence over sp4.
C.gspmd("g.zigzag_docmask_causal.sp4", {"sp": 4}, (P(None, "sp"),) * 4, P(None, "sp"), zigzag_attn, ARGS3)

# 10. the adam step of 2., batch over dp2, head vocab over tp4.
SP10 = {"w": P(None, "tp"), "b": P("tp")}
C.gspmd("g.perdoc_loss_adam_step.dp2xtp4", {"dp": 2, "tp": 4}, (SP10, SP10, SP10, P(), P("dp"), P("dp"), P("dp")),
        (SP10, SP10, SP10, P()), step2, ARGS2)

# 11. per-document mean pooling, rows over dp2, sequence over sp4.
C.gspmd("g.doc_mean_pool.dp2xsp4", {"dp": 2, "sp": 4}, (P("dp", "sp"), P("dp", "sp")), P("dp"), pool,
        (R(B6, T6, D6), SEG6))


# 12. restarting-position embeddings then document-masked attention, heads
#     constrained over tp, batch over dp.
M12 = make_mesh({"dp": 2, "tp": 4})


def embed_attn(tok, seg, te, pe, wq, wk, wv, wo):
    x = embed(tok, seg, te, pe)
    q, k, v = (lax.with_sharding_constraint(jnp.einsum("btd,dhe->bthe", x, w), NamedSharding(M12, P("dp", None, "tp")))
               for w in (wq, wk, wv))
    t = x.shape[1]
    ok = (seg[:, :, None] == seg[:, None, :]) & jnp.tril(jnp.ones((t, t), bool))
    return jnp.einsum("bthe,hed->btd", attend(q, k, v, ok), wo)


C.gspmd("g.restart_pos_emb_docmask_attn.dp2xtp4", {"dp": 2, "tp": 4},
        (P("dp"), P("dp"), P(), P(), P(None, "tp"), P(None, "tp"), P(None, "tp"), P("tp")), P("dp"), embed_attn,
        (I(0, V4, 4, T4), pack(4, T4, [5, 7, 3], [2, 0, 1, 4]), R(V4, D4), R(T4, D4), R(D4, 8, 4, scale=0.3),
         R(D4, 8, 4, scale=0.3), R(D4, 8, 4, scale=0.3), R(8, 4, D4, scale=0.3)))

# ---------------------------------------------------------------------------
# 13. segment ids from end-of-document flags (1 + the number of EOS tokens
#     strictly before t), sequence over sp4: the devices' EOS totals scanned
#     across devices Hillis-Steele style (ppermute by 1 then by 2; devices
#     without a source receive zeros), made exclusive; then the
#     document-masked causal attention with keys, values and ids gathered.
B13, T13, H13, E13 = 2, 16, 2, 8


def eos_segids(eos):
    return 1 + jnp.cumsum(eos, 1) - eos


def eos_docattn(q, k, v, eos):
    return docmask_causal(q, k, v, eos_segids(eos))


def eos_sp(bug):
    def f(q, k, v, eos):
        n, tl = 4, q.shape[1]
        me = idx("sp")
        local = jnp.cumsum(eos, 1)
        tot = local[:, -1:]
        acc = tot
        for d in ((1, 1) if bug == "scan-steps-1-1" else (1, 2)):
            perm = [(i, i - d) for i in range(d, n)] if bug == "scan-wrong-direction" else \
                [(i, i + d) for i in range(n - d)]
            acc = acc + lax.ppermute(acc, "sp", perm)
        before = acc if bug == "inclusive-prefix" else acc - tot
        seg = 1 + before + local - eos
        kk, vv, ks = (lax.all_gather(a, "sp", axis=1, tiled=True) for a in (k, v, seg))
        qpos = me * tl + jnp.arange(tl)
        ok = (seg[:, :, None] == ks[:, None, :]) & (qpos[:, None] >= jnp.arange(n * tl)[None, :])
        return attend(q, kk, vv, ok)
    return f


EOS13 = np.zeros((B13, T13), np.int32)
EOS13[0, [2, 5, 9, 10, 14]] = 1
EOS13[1, [6, 7, 12]] = 1
ARGS13 = (R(B13, T13, H13, E13), R(B13, T13, H13, E13), R(B13, T13, H13, E13), EOS13)
C.smap("s.eos_flags_segids_hillis_steele_scan.sp4", {"sp": 4}, eos_sp, (P(None, "sp"),) * 4, P(None, "sp"),
       eos_docattn, ARGS13,
       bugs=[("scan-steps-1-1", ["wrong-permutation"]), ("scan-wrong-direction", ["wrong-permutation"]),
             ("inclusive-prefix", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 14. vocab-parallel cross-entropy with per-document normalisation and its
#     gradient (check_vma=True), vocab over tp, rows over dp: the maximum
#     pmax'd under stop_gradient, the log-sum-exp from psum'd exponentials,
#     the target logit by a masked psum at the rank's vocab offset; per-row
#     document sums and counts, the mean over all documents of the batch
#     from psums over dp.
B14, T14, D14, V14 = 4, 8, 8, 32


def vp_perdoc(h, w, y, seg):
    def loss(w):
        ce = token_ce(h, w, y)
        oh = jax.nn.one_hot(seg, ND)
        sums, cnt = jnp.einsum("bt,btn->bn", ce, oh), oh.sum(1)
        present = (cnt > 0) & (jnp.arange(ND) > 0)
        return jnp.sum(jnp.where(present, sums / jnp.maximum(cnt, 1.0), 0.0)) / jnp.sum(present)
    return jax.value_and_grad(loss)(w)


def vp_tp(bug):
    def f(h, w, y, seg):
        vl = w.shape[1]

        def loss(w):
            lg = jnp.einsum("btd,dv->btv", h, w)
            m = lax.pmax(lax.stop_gradient(jnp.max(lg, -1, keepdims=True)), "tp")
            lse = m[..., 0] + jnp.log(psum(jnp.sum(jnp.exp(lg - m), -1), "tp"))
            off = 0 if bug == "target-without-offset" else idx("tp") * vl
            loc = y - off
            inr = (loc >= 0) & (loc < vl)
            tl = jnp.take_along_axis(lg, jnp.clip(loc, 0, vl - 1)[..., None], -1)[..., 0]
            ce = lse - psum(jnp.where(inr, tl, 0.0), ("dp", "tp") if bug == "target-psum-over-dp-tp" else "tp")
            oh = jax.nn.one_hot(seg, ND)
            sums, cnt = jnp.einsum("bt,btn->bn", ce, oh), oh.sum(1)
            present = (cnt > 0) & (jnp.arange(ND) > 0)
            mean_sum = jnp.sum(jnp.where(present, sums / jnp.maximum(cnt, 1.0), 0.0))
            if bug == "pmean-of-row-means":
                return pmean(mean_sum / jnp.sum(present), "dp")
            return psum(mean_sum, "dp") / psum(jnp.sum(present), "dp")
        return jax.value_and_grad(loss)(w)
    return f


SEG14 = np.concatenate([pack(2, T14, [8], [0, 3]), pack(2, T14, [2, 1, 3], [0, 1])])
ARGS14 = (R(B14, T14, D14), R(D14, V14, scale=0.6), I(0, V14, B14, T14), SEG14)
C.smap("s.vocab_parallel_ce_perdoc_grad.dp2xtp4", {"dp": 2, "tp": 4}, vp_tp,
       (P("dp"), P(None, "tp"), P("dp"), P("dp")), (P(), P(None, "tp")), vp_perdoc, ARGS14, check_vma=True,
       bugs=[("target-psum-over-dp-tp", ["wrong-collective-group"]), ("target-without-offset", ["wrong-offset"]),
             ("pmean-of-row-means", ["wrong-collective-op"])])

# ---------------------------------------------------------------------------
# 15. Ulysses-style sequence parallelism for bidirectional (encoder)
#     document-masked attention on packed rows with padding: all_to_all from
#     sequence-sharded to head-sharded, segment ids all_gather'd, padding
#     keys (segment 0) masked, all_to_all back.
B15, T15, H15, E15 = 2, 16, 4, 8


def bidir_doc(q, k, v, seg):
    ok = (seg[:, :, None] == seg[:, None, :]) & (seg[:, None, :] > 0)
    return attend(q, k, v, ok)


def ulysses(bug):
    def f(q, k, v, seg):
        q, k, v = (lax.all_to_all(a, "sp", 2, 1, tiled=True) for a in (q, k, v))
        full = jnp.tile(seg, (1, 4)) if bug == "key-ids-tiled-local" else lax.all_gather(seg, "sp", axis=1, tiled=True)
        ok = full[:, :, None] == full[:, None, :]
        if bug != "no-pad-mask":
            ok = ok & (full[:, None, :] > 0)
        return lax.all_to_all(attend(q, k, v, ok), "sp", 1, 2, tiled=True)
    return f


SEG15 = pack(B15, T15, [6, 4, 3], [3, 5])
ARGS15 = (R(B15, T15, H15, E15), R(B15, T15, H15, E15), R(B15, T15, H15, E15), SEG15)
C.smap("s.ulysses_a2a_bidir_docmask_padding.sp4", {"sp": 4}, ulysses, (P(None, "sp"),) * 4, P(None, "sp"),
       bidir_doc, ARGS15, bugs=[("key-ids-tiled-local", ["wrong-offset"]), ("no-pad-mask", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 16. adamw step on a dp2 x sp4 mesh (rows over dp, sequence over sp,
#     check_vma=True): per-(row, document) sums and counts psum'd over sp,
#     the mean over all documents of the batch from psums over dp, jax.grad
#     through the collectives, optax.adamw from a passed-in state.
B16, T16, D16, V16 = 4, 16, 8, 12
OPT16 = optax.adamw(0.02, weight_decay=0.1)


def adamw_state(w, mu, nu, count):
    st = OPT16.init(w)
    return (st[0]._replace(count=count, mu=mu, nu=nu),) + tuple(st[1:])


def step16(w, mu, nu, count, h, y, seg):
    l, g = jax.value_and_grad(lambda w: doc_mean_loss(h, w, y, seg))(w)
    upd, st = OPT16.update(g, adamw_state(w, mu, nu, count), w)
    return optax.apply_updates(w, upd), st[0].mu, st[0].nu, l


def step16_2d(bug):
    def f(w, mu, nu, count, h, y, seg):
        def loss(w):
            ce = token_ce(h, w, y)
            oh = jax.nn.one_hot(seg, ND)
            sums, cnt = jnp.einsum("bt,btn->bn", ce, oh), psum(oh.sum(1), "sp")
            present = (cnt > 0) & (jnp.arange(ND) > 0)
            if bug == "doc-sums-local-pmean":
                part = jnp.sum(jnp.where(present, sums / jnp.maximum(cnt, 1.0), 0.0))
                return pmean(psum(part, "dp"), "sp") / psum(jnp.sum(present), "dp")
            part = jnp.sum(jnp.where(present, psum(sums, "sp") / jnp.maximum(cnt, 1.0), 0.0))
            return psum(part, "dp") / psum(jnp.sum(present), "dp")
        l, g = jax.value_and_grad(loss)(w)
        if bug == "grads-psummed-over-dp-again":
            g = psum(g, "dp")
        upd, st = OPT16.update(g, adamw_state(w, mu, nu, count), w)
        return optax.apply_updates(w, upd), st[0].mu, st[0].nu, l
    return f


SEG16 = pack(B16, T16, [7, 3, 5, 2], [0, 2, 4, 1])
ARGS16 = (R(D16, V16, scale=0.5), R(D16, V16, scale=0.05), np.abs(R(D16, V16, scale=0.01)), np.int32(5),
          R(B16, T16, D16), I(0, V16, B16, T16), SEG16)
C.smap("s.perdoc_loss_adamw_grad_through_psum.dp2xsp4", {"dp": 2, "sp": 4}, step16_2d,
       (P(), P(), P(), P(), P("dp", "sp"), P("dp", "sp"), P("dp", "sp")), (P(), P(), P(), P()), step16, ARGS16,
       check_vma=True,
       bugs=[("grads-psummed-over-dp-again", ["wrong-scale"]), ("doc-sums-local-pmean", ["wrong-scale"])])

# GSPMD: 17. the loss of 14. with its gradient, dp2 x tp4; 18. the EOS
# segment ids and attention of 13., sp4; 19. the adamw step of 16., dp2 x sp4;
# 20. the Ulysses encoder attention baseline of 15. with heads over sp8.
C.gspmd("g.vocab_ce_perdoc_grad.dp2xtp4", {"dp": 2, "tp": 4}, (P("dp"), P(None, "tp"), P("dp"), P("dp")),
        (P(), P(None, "tp")), vp_perdoc, ARGS14)
C.gspmd("g.eos_segids_docattn.sp4", {"sp": 4}, (P(None, "sp"),) * 4, P(None, "sp"), eos_docattn, ARGS13)
C.gspmd("g.perdoc_loss_adamw.dp2xsp4", {"dp": 2, "sp": 4},
        (P(), P(), P(), P(), P("dp", "sp"), P("dp", "sp"), P("dp", "sp")), (P(), P(), P(), P()), step16, ARGS16)
C.gspmd("g.bidir_docmask_heads.sp4", {"sp": 4}, (P(None, None, "sp"),) * 3 + (P(),), P(None, None, "sp"),
        bidir_doc, ARGS15)

# ---------------------------------------------------------------------------
# 21. per-document mean loss with the documents reduce-scattered, sp8: the
#     per-(row, document) sums and counts psum_scatter'd over the document
#     axis (rank r owns document r), the rank's document mean, the padding
#     document (id 0) dropped on rank 0, the sum of means and the document
#     count psum'd.
B21, T21, D21, V21 = 2, 16, 8, 16


def doc_loss_rs(bug):
    def f(h, w, y, seg):
        ce = token_ce(h, w, y)
        oh = jax.nn.one_hot(seg, ND)
        sums = lax.psum_scatter(jnp.einsum("bt,btn->bn", ce, oh), "sp", scatter_dimension=1, tiled=True)
        cnt = lax.psum_scatter(oh.sum(1), "sp", scatter_dimension=1, tiled=True)
        pad_rank = 1 if bug == "pad-doc-at-wrong-rank" else 0
        present = (cnt > 0) & (idx("sp") != pad_rank)
        num = jnp.sum(jnp.where(present, sums / jnp.maximum(cnt, 1.0), 0.0))
        num = pmean(num, "sp") if bug == "numerator-pmean" else psum(num, "sp")
        return num / psum(jnp.sum(present), "sp")
    return f


SEG21 = pack(B21, T21, [5, 4, 3], [2, 1])
ARGS21 = (R(B21, T21, D21), R(D21, V21, scale=0.7), I(0, V21, B21, T21), SEG21)
C.smap("s.perdoc_loss_docs_reduce_scattered.sp8", {"sp": 8}, doc_loss_rs,
       (P(None, "sp"), P(), P(None, "sp"), P(None, "sp")), P(), doc_mean_loss, ARGS21,
       bugs=[("pad-doc-at-wrong-rank", ["wrong-offset"]), ("numerator-pmean", ["wrong-collective-op"])])

# ---------------------------------------------------------------------------
# 22. gradient accumulation over 2 microbatches by lax.scan, batch over dp4:
#     the loss is the mean over every document of the global batch of the
#     per-document mean; the scan accumulates the gradient of the sum of
#     document means and the document count; both psum'd over dp, divided;
#     one optax.sgd step.
B22, T22, D22, V22 = 8, 8, 8, 12
OPT22 = optax.sgd(0.5)


def sum_doc_means(w, h, y, seg):
    s, n = doc_sums({"w": w, "b": jnp.zeros((w.shape[1],), w.dtype)}, h, y, seg)
    return s, n


def step22(w, h, y, seg):
    l, g = jax.value_and_grad(lambda w: (lambda s, n: s / n)(*sum_doc_means(w, h, y, seg)))(w)
    upd, _ = OPT22.update(g, OPT22.init(w), w)
    return optax.apply_updates(w, upd), l


def step22_dp(bug):
    def f(w, h, y, seg):
        mb = lambda a: a.reshape((2, a.shape[0] // 2) + a.shape[1:])  # noqa: E731

        def body(acc, xs):
            gs, ss, ns = acc
            (s, n), g = jax.value_and_grad(sum_doc_means, has_aux=True)(w, *xs)
            if bug == "normalise-per-microbatch":
                return (gs + g / n / 2, ss + s / n / 2, ns + 1.0), None
            return (gs + g, ss + s, ns + n), None
        (g, s, n), _ = lax.scan(body, (jnp.zeros_like(w), 0.0, 0.0), (mb(h), mb(y), mb(seg)))
        if bug == "normalise-per-microbatch":
            g, l = pmean(g, "dp"), pmean(s, "dp")
        else:
            tot = n if bug == "count-not-psummed" else psum(n, "dp")
            g, l = psum(g, "dp") / tot, psum(s, "dp") / tot
        upd, _ = OPT22.update(g, OPT22.init(w), w)
        return optax.apply_updates(w, upd), l
    return f


SEG22 = np.concatenate([pack(2, T22, [3], [0, 2]), pack(2, T22, [5, 3], [0, 0]), pack(2, T22, [8], [0, 4]),
                        pack(2, T22, [2, 1], [1, 0])])
ARGS22 = (R(D22, V22, scale=0.5), R(B22, T22, D22), I(0, V22, B22, T22), SEG22)
C.smap("s.grad_accum_scan_perdoc_norm_sgd.dp4", {"dp": 4}, step22_dp, (P(), P("dp"), P("dp"), P("dp")), (P(), P()),
       step22, ARGS22,
       bugs=[("normalise-per-microbatch", ["wrong-scale"]), ("count-not-psummed", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 23. blockwise (online-softmax) document-masked causal attention, sequence
#     over sp4: keys, values and segment ids all_gather'd, then a lax.scan
#     over 4 key blocks keeping the running maximum, denominator and
#     accumulator, rescaled by exp(m_old - m_new).
B23, T23, H23, E23 = 2, 16, 2, 8


def blockwise_sp(bug):
    def f(q, k, v, seg):
        n, tl = 4, q.shape[1]
        me = idx("sp")
        qpos = me * tl + jnp.arange(tl)
        kk, vv, ks = (lax.all_gather(a, "sp", axis=0, tiled=False) for a in (k, v, seg))  # (n, b, tl, ...)
        q = q / np.sqrt(E23)

        def body(c, xs):
            m, l, acc = c
            kb, vb, sb, j = xs
            kpos = (0 if bug == "key-block-offset-missing" else j * tl) + jnp.arange(tl)
            ok = (seg[:, :, None] == sb[:, None, :]) & (qpos[:, None] >= kpos[None, :])
            s = jnp.where(ok[:, None], jnp.einsum("bqhe,bkhe->bhqk", q, kb), NEG)
            mn = jnp.maximum(m, s.max(-1))
            p = jnp.exp(s - mn[..., None])
            sc = jnp.ones_like(m) if bug == "no-rescale" else jnp.exp(m - mn)
            return (mn, l * sc + p.sum(-1), acc * sc[..., None] + jnp.einsum("bhqk,bkhe->bhqe", p, vb)), None
        b, h = q.shape[0], q.shape[2]
        init = (jnp.full((b, h, tl), NEG), jnp.zeros((b, h, tl)), jnp.zeros((b, h, tl, E23)))
        (m, l, acc), _ = lax.scan(body, init, (kk, vv, ks, jnp.arange(n)))
        return jnp.transpose(acc / l[..., None], (0, 2, 1, 3))
    return f


SEG23 = pack(B23, T23, [6, 7, 2], [0, 3])
ARGS23 = (R(B23, T23, H23, E23), R(B23, T23, H23, E23), R(B23, T23, H23, E23), SEG23)
C.smap("s.blockwise_online_softmax_docmask.sp4", {"sp": 4}, blockwise_sp, (P(None, "sp"),) * 4, P(None, "sp"),
       docmask_causal, ARGS23,
       bugs=[("no-rescale", ["wrong-scale"]), ("key-block-offset-missing", ["wrong-offset"])])

# 24. GSPMD: the gradient-accumulation step of 22. as one jitted step, batch
#     over dp4; 25. the reduce-scattered loss of 21. as plain jit, sp8.
C.gspmd("g.perdoc_norm_sgd_step.dp4", {"dp": 4}, (P(), P("dp"), P("dp"), P("dp")), (P(), P()), step22, ARGS22)
C.gspmd("g.perdoc_mean_loss.sp8", {"sp": 8}, (P(None, "sp"), P(), P(None, "sp"), P(None, "sp")), P(),
        doc_mean_loss, ARGS21)

# ---------------------------------------------------------------------------
# 26. the blockwise attention of 23. with the keys gathered tiled and
#     reshaped into blocks by the user (keys (b, n*tl, ...) ->
#     (n, b, tl, ...) by reshape + moveaxis) instead of a stacked gather.


def blockwise_tiled_sp(bug):
    def f(q, k, v, seg):
        n, tl = 4, q.shape[1]
        me = idx("sp")
        qpos = me * tl + jnp.arange(tl)
        blocks = lambda a: jnp.moveaxis(a.reshape((a.shape[0], n, tl) + a.shape[2:]), 1, 0)  # noqa: E731
        kk, vv, ks = (blocks(lax.all_gather(a, "sp", axis=1, tiled=True)) for a in (k, v, seg))
        q = q / np.sqrt(E23)

        def body(c, xs):
            m, l, acc = c
            kb, vb, sb, j = xs
            ok = (seg[:, :, None] == sb[:, None, :]) & (qpos[:, None] >= j * tl + jnp.arange(tl)[None, :])
            s = jnp.where(ok[:, None], jnp.einsum("bqhe,bkhe->bhqk", q, kb), NEG)
            mn = jnp.maximum(m, s.max(-1))
            p = jnp.exp(s - mn[..., None])
            sc = jnp.exp(m - mn)
            den = (l if bug == "denominator-not-rescaled" else l * sc) + p.sum(-1)
            return (mn, den, acc * sc[..., None] + jnp.einsum("bhqk,bkhe->bhqe", p, vb)), None
        b, h = q.shape[0], q.shape[2]
        init = (jnp.full((b, h, tl), NEG), jnp.zeros((b, h, tl)), jnp.zeros((b, h, tl, E23)))
        (m, l, acc), _ = lax.scan(body, init, (kk, vv, ks, jnp.arange(n)))
        return jnp.transpose(acc / l[..., None], (0, 2, 1, 3))
    return f


C.smap("s.blockwise_docmask_tiled_gather_reshaped.sp4", {"sp": 4}, blockwise_tiled_sp, (P(None, "sp"),) * 4,
       P(None, "sp"), docmask_causal, ARGS23, bugs=[("denominator-not-rescaled", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 27. a mixed objective, half the token mean and half the per-document
#     mean, with integer token counts per document (jnp.bincount per row,
#     int32) psum'd over sp4 as integers; the token-mean denominator the
#     psum'd int32 count of non-padding tokens.


def mixed_loss(h, w, y, seg):
    ce = token_ce(h, w, y)
    real = seg > 0
    tok_mean = jnp.sum(jnp.where(real, ce, 0.0)) / jnp.sum(real.astype(jnp.int32))
    return 0.5 * tok_mean + 0.5 * doc_mean_loss(h, w, y, seg)


def mixed_sp(bug):
    def f(h, w, y, seg):
        ce = token_ce(h, w, y)
        real = seg > 0
        ntok = jnp.sum(real.astype(jnp.int32))
        ntok = ntok if bug == "token-count-local" else psum(ntok, "sp")
        tok_mean = psum(jnp.sum(jnp.where(real, ce, 0.0)), "sp") / ntok
        cnt = jax.vmap(lambda s: jnp.bincount(s, length=ND))(seg)  # int32 (b, ND)
        cnt = psum(cnt, "sp")
        sums = psum(jax.vmap(lambda c, s: jax.ops.segment_sum(c, s, num_segments=ND))(ce, seg), "sp")
        present = (cnt > 0) & (jnp.arange(ND) > 0)
        den = jnp.maximum(cnt, 1).astype(jnp.float32)
        if bug == "doc-count-sum-of-tokens":
            ndoc = jnp.sum(jnp.where(present, cnt, 0))
        else:
            ndoc = jnp.sum(present)
        doc_mean = jnp.sum(jnp.where(present, sums / den, 0.0)) / ndoc
        return 0.5 * tok_mean + 0.5 * doc_mean
    return f


C.smap("s.mixed_token_doc_mean_int_counts.sp4", {"sp": 4}, mixed_sp,
       (P(None, "sp"), P(), P(None, "sp"), P(None, "sp")), P(), mixed_loss, ARGS1,
       bugs=[("token-count-local", ["missing-all-reduce"]), ("doc-count-sum-of-tokens", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 28. token-weighted mean over documents of the per-document means (the
#     baseline writes it as sum_d n_d * mean_d / sum_d n_d), rows over dp,
#     sequence over sp: every device's local per-document means merged by
#     their token counts, mean_d = psum(n_dk * mean_dk) / psum(n_dk).
B28, T28, D28, V28 = 4, 16, 8, 16


def tokw_doc_loss(h, w, y, seg):
    ce = token_ce(h, w, y)
    oh = jax.nn.one_hot(seg, ND) * (jnp.arange(ND) > 0)
    cnt = oh.sum(1)
    means = jnp.einsum("bt,btn->bn", ce, oh) / jnp.maximum(cnt, 1.0)
    return jnp.sum(cnt * means) / jnp.sum(cnt)


def tokw_merge(bug):
    def f(h, w, y, seg):
        ce = token_ce(h, w, y)
        oh = jax.nn.one_hot(seg, ND) * (jnp.arange(ND) > 0)
        nk = oh.sum(1)
        mk = jnp.einsum("bt,btn->bn", ce, oh) / jnp.maximum(nk, 1.0)
        if bug == "merge-unweighted":
            here = (nk > 0).astype(jnp.float32)
            md = psum(mk * here, "sp") / jnp.maximum(psum(here, "sp"), 1.0)
        else:
            md = psum(nk * mk, "sp") / jnp.maximum(psum(nk, "sp"), 1.0)
        nd = psum(nk, "sp")
        num = jnp.sum((nk if bug == "outer-weights-local" else nd) * md)
        return psum(num, "dp") / psum(jnp.sum(nd), "dp")
    return f


SEG28 = pack(B28, T28, [7, 2, 5], [0, 3, 1, 2])
ARGS28 = (R(B28, T28, D28), R(D28, V28, scale=0.7), I(0, V28, B28, T28), SEG28)
C.smap("s.token_weighted_doc_means_merged.dp2xsp4", {"dp": 2, "sp": 4}, tokw_merge,
       (P("dp", "sp"), P(), P("dp", "sp"), P("dp", "sp")), P(), tokw_doc_loss, ARGS28,
       bugs=[("merge-unweighted", ["wrong-scale"]), ("outer-weights-local", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 29. the per-document mean loss written with jnp.nanmean over the
#     documents (absent documents NaN) in the baseline; the body as psum'd
#     sums and counts, sequence over sp4, batch over dp2.


def nanmean_doc_loss(h, w, y, seg):
    ce = token_ce(h, w, y)
    oh = jax.nn.one_hot(seg, ND)
    cnt = oh.sum(1)
    means = jnp.einsum("bt,btn->bn", ce, oh) / cnt
    return jnp.nanmean(jnp.where((cnt > 0) & (jnp.arange(ND) > 0), means, jnp.nan))


def nanmean_body(bug):
    def f(h, w, y, seg):
        ce = token_ce(h, w, y)
        oh = jax.nn.one_hot(seg, ND)
        sums = psum(jnp.einsum("bt,btn->bn", ce, oh), "sp")
        cnt = psum(oh.sum(1), "sp")
        present = ((cnt > 0) & (jnp.arange(ND) > 0)).astype(jnp.float32)
        num = jnp.sum(present * sums / jnp.maximum(cnt, 1.0))
        if bug == "doc-count-over-dp-missing":
            return psum(num, "dp") / jnp.sum(present)
        return psum(num, "dp") / psum(jnp.sum(present), "dp")
    return f


C.smap("s.nanmean_baseline_doc_loss.dp2xsp4", {"dp": 2, "sp": 4}, nanmean_body,
       (P("dp", "sp"), P(), P("dp", "sp"), P("dp", "sp")), P(), nanmean_doc_loss, ARGS28,
       bugs=[("doc-count-over-dp-missing", ["missing-all-reduce"])])

# 30. GSPMD: the token-weighted loss of 28. with its gradient, dp2 x sp4.
C.gspmd("g.token_weighted_doc_loss_grad.dp2xsp4", {"dp": 2, "sp": 4},
        (P("dp", "sp"), P(), P("dp", "sp"), P("dp", "sp")), (P(), P()),
        lambda h, w, y, seg: jax.value_and_grad(tokw_doc_loss, 1)(h, w, y, seg), ARGS28)

C.finish()
