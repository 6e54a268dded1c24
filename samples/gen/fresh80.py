"""samples/fresh80: an 80th batch of programs as a user writes them, on the theme of LLM serving under tensor and data parallelism in current JAX (paged KV caches sharded by kv head, continuous batching, speculative decoding, sampling from vocab-parallel logits, logit processors), none of them an idiom of samples/fresh .. fresh26, probe, train or wild.
shard_map families:
 1. a paged decode step, GQA (8 query heads, 4 kv heads) with the page
    pools [pages, page, kv heads, dim] sharded by kv head over tp4: the new
    token's k / v written at (block_table[b, pos // PS], pos % PS) by a
    scatter (.at[].set), every sequence's pages gathered from the pool
    through its block table, a length mask (positions <= pos), row-parallel
    output projection psum'd. Bugs: physical page = logical block (no
    block-table lookup), length mask exclusive (the new token not attended),
    output projection not psum'd.
 2. continuous batching on dp2 x tp4: a contiguous per-slot KV cache with
    the batch over dp and kv heads over tp, per-slot lengths and a finished
    flag; live slots write their new k / v by a vmapped
    lax.dynamic_update_slice at their length, finished slots keep their
    cache, their output zeroed and their length frozen. Bugs: finished slots
    still written, the mask one position too long (a stale slot attended).
 3. greedy speculative verification, target and draft logits vocab-parallel
    over tp4: the draft's tokens are the argmax of the target logits plus
    input noise (a noisy draft), the target's argmax across shards by local
    argmax + all_gather of (max, index + offset); acceptance the cumulative
    product of matches, the accepted length, the bonus token at that length.
    Bugs: acceptance not cumulative (plain sum of matches), argmax index
    without the shard's vocab offset.
 4. top-k sampling with temperature on vocab-parallel logits (tp4): local
    lax.top_k, indices + the shard's offset, all_gather (tiled) and a second
    top_k, softmax over the k survivors and Gumbel-max with the noise passed
    as an input. Bugs: the top-k of device 0's shard only (no gather), the
    gathered indices without the offset.
 5. top-p (nucleus) filtering with a global sort (tp4): logits all_gather'd,
    sorted, the cumulative softmax, the threshold logit of the nucleus, each
    device masking its own vocab shard; then Gumbel-max with sharded noise
    and a cross-shard argmax (pmax of the value, pmin of the matching
    index). Bugs: the nucleus from the local shard's sort, an exclusive
    nucleus (the token crossing top_p dropped).
 6. logit processors on dp2 x tp4: a repetition penalty from a token
    history (presence by comparing the history with the shard's global
    vocab ids), min-length EOS masking (EOS lives on one shard), greedy
    argmax across shards. Bugs: history compared with local ids (no offset),
    EOS masked at its local index on every shard, min-length off by one.
 7. chunked prefill into a flattened bf16 paged pool [pages*PS, kv heads,
    dim] sharded by kv head over tp2 (dp4 over the batch is not possible:
    the pool is shared), slots page*PS + off computed from the block table
    and written by a scatter, causal attention of the chunk over the
    sequence's gathered pages. Bugs: the slot's page taken from the next
    logical block, causal mask off by one (query sees its successor).
 8. the finish bookkeeping of a continuous batch on dp2 x tp4: greedy token
    from vocab-parallel logits, pad for already finished slots, finished =
    finished | eos | length reached, lengths advanced for live slots only.
    Bugs: finished flag not sticky, the argmax's pmax over dp (wrong axis).
 9. speculative sampling (rejection) on vocab-parallel target / draft
    logits (tp4): softmax across shards, p(x) and q(x) of the draft tokens
    by a masked local sum + psum, accept u < p/q, cumulative acceptance,
    accepted length, the residual max(p - q, 0) at the first rejection (or
    p at position K) sampled by Gumbel-max with sharded noise. Bugs:
    acceptance not cumulative, the softmax denominator local to a shard.
10. a 3-step greedy decode loop (lax.scan) of a one-layer model on tp4:
    replicated embedding, heads over tp with a per-head KV cache written by
    dynamic_update_slice at each step's position, row-parallel output
    psum'd, vocab-parallel LM head and greedy argmax across shards. Bugs:
    argmax index without offset, the cache written one slot late.
11. an LM head row-parallel over tp4 (hidden sharded), logits
    psum_scatter'd to vocab-parallel, temperature, log-softmax across shards
    (pmax / psum), the chosen tokens' log-probabilities by a masked psum.
    Bugs: psum then device 0's vocab block for every device, temperature
    applied after the log-sum-exp.
12. OpenAI-style frequency / presence penalties (dp2 x tp4): counts from
    the history by a scatter-add into the device's vocab shard, other
    shards' ids moved past the end and dropped (a negative local id would
    wrap). Bugs: ids without the vocab offset, mode="clip" (out-of-shard
    ids piled onto the shard's edge).
13. min-p filtering of bf16 logits after a temperature of 0.25 (tp8): keep
    x >= pmax(max x) + log(min_p), renormalised log-probabilities across
    shards. Bugs: the local maximum, the local normaliser.
14. prefix caching with copy-on-write (tp4, pools over kv heads): the
    shared last page copied to a free page, the child's block table entry
    pointed at it, the new k written into the copy. Bugs: the new k written
    into the shared page, the table entry of the next logical block.
15. the bookkeeping after speculative verification (dp2 x tp4): lengths +
    accepted + 1 (bonus), rejected cache entries zeroed. Bugs: no bonus,
    the keep mask inclusive.
16. greedy verification written another way (tp4): lax.cummin acceptance,
    the length as the first mismatch of a sentinel-padded row, the target
    argmax by an owner shard (pmin of shard ids at the global max) and a
    psum of its global index; baseline the cumprod of 3. Bugs: cummax, the
    length as the plain sum of matches.
17. exact top-k by k rounds of a cross-shard maximum in a lax.fori_loop
    (tp8): pmax, owner by pmin, global index by psum, the entry knocked
    out on the owner. Bugs: index without offset, entry not knocked out.
18. flash-decoding over the pages of a paged cache (tp4): a lax.scan over
    logical blocks, one page gathered per step, running max / sum /
    accumulator. Bugs: positions from the physical page number, the sum not
    divided at the end.
19. repetition penalty with the token history split over tp4 (presence
    pmax'd over tp) and min-length EOS masking, batch over dp2. Bugs:
    presence not reduced, the penalty ignoring the logit's sign.
20. vocab-parallel logits all_to_all'd to full rows with the batch split
    (tp4), per-row temperatures and Gumbel noise sliced at the device's
    batch offset, argmax, tokens all_gather'd. Bugs: temperatures sliced at
    offset 0, the noise of the next device's rows.
GSPMD pairs (jax.jit with in/out shardings, correct only): the paged
decode step of 1. (tp4, and with the batch over dp2 x tp4); top-k /
temperature / Gumbel sampling of 4. (dp2 x tp4); greedy speculative
verification of 3.; top-p with the global sort of 5.; the logit processors
of 6. (dp2 x tp4); the continuous-batching cache update of 2. (dp2 x tp4);
the scan decode loop of 10.; the chunked bf16 prefill of 7. (tp2); the
rejection sampling of 9.; the frequency / presence penalties of 12.; the
LM-head log-probabilities of 11.; min-p of 13. (tp8); copy-on-write of
14.; lax.top_k of 17. (tp8); the paged attention of 18.; the history
penalty of 19.; the row sampling of 20. with a with_sharding_constraint
moving the logits to batch-split rows.
Known miss: 6.'s min-length off by one (the witness's random lengths never
equal MIN_LEN).
Numerics: every correct pair agrees with its baseline at rounding level;
bug variants differ clearly (see "numerics"). Masks fill with -1e30.
Exported with scalify_jax.export_pair; every pair is also run by JAX on
seeded inputs and its manifest entry records the largest difference from
the single-device run ("numerics").
Run from the repository root: bash samples/gen/run_fresh80.sh [SUBSTR...]
"""
import sys
import numpy as np
import jax, jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec as P
sys.path.insert(0, "samples/gen")
from fresh_lib import Corpus, seeded  # noqa: E402
from jax.sharding import NamedSharding  # noqa: E402
from scalify_jax import make_mesh  # noqa: E402

SCRIPT = "samples/gen/fresh80.py"
C = Corpus("samples/fresh80", SCRIPT, "samples/gen/run_fresh80.sh", sys.argv[1:])
rng, R, I = seeded(8080)
psum, pmax, pmin, idx = lax.psum, lax.pmax, lax.pmin, lax.axis_index
NEG = -1e30


def xshard_argmax(x, axis_name, bug=None):
    """Greedy argmax over the last (vocab) dim of a vocab-parallel x (.., Vl):
    local max and index + offset all_gather'd, the first shard's maximum wins."""
    vl = x.shape[-1]
    m = jnp.max(x, -1)
    i = jnp.argmax(x, -1).astype(jnp.int32)
    if bug != "argmax-no-offset":
        i = i + idx(axis_name) * vl
    ms = lax.all_gather(m, axis_name)  # (n, ...)
    is_ = lax.all_gather(i, axis_name)
    s = jnp.argmax(ms, 0)
    return jnp.take_along_axis(is_, s[None], 0)[0]


# ---------------------------------------------------------------------------
# 1. paged decode step, pools sharded by kv head over tp4.
NP1, PS1, MB1, B1, KVH1, G1, D1, M1 = 24, 4, 4, 4, 4, 2, 8, 16


def paged_ref(q, knew, vnew, kpool, vpool, table, pos, wo):
    b = q.shape[0]
    page = jnp.take_along_axis(table, (pos // PS1)[:, None], 1)[:, 0]
    kpool = kpool.at[page, pos % PS1].set(knew)
    vpool = vpool.at[page, pos % PS1].set(vnew)
    k = kpool[table].reshape(b, MB1 * PS1, KVH1, D1)
    v = vpool[table].reshape(b, MB1 * PS1, KVH1, D1)
    qg = q.reshape(b, KVH1, G1, D1)
    s = jnp.einsum("bhgd,bshd->bhgs", qg, k) / np.sqrt(D1)
    ok = jnp.arange(MB1 * PS1)[None, :] <= pos[:, None]
    s = jnp.where(ok[:, None, None], s, NEG)
    o = jnp.einsum("bhgs,bshd->bhgd", jax.nn.softmax(s, -1), v).reshape(b, -1)
    return o @ wo, kpool, vpool


def paged_tp(bug):
    def f(q, knew, vnew, kpool, vpool, table, pos, wo):
        b, kvl = q.shape[0], kpool.shape[2]
        if bug == "no-table-lookup":
            page = pos // PS1
        else:
            page = jnp.take_along_axis(table, (pos // PS1)[:, None], 1)[:, 0]
        kpool = kpool.at[page, pos % PS1].set(knew)
        vpool = vpool.at[page, pos % PS1].set(vnew)
        k = kpool[table].reshape(b, MB1 * PS1, kvl, D1)
        v = vpool[table].reshape(b, MB1 * PS1, kvl, D1)
        qg = q.reshape(b, kvl, G1, D1)
        s = jnp.einsum("bhgd,bshd->bhgs", qg, k) / np.sqrt(D1)
        if bug == "mask-exclusive":
            ok = jnp.arange(MB1 * PS1)[None, :] < pos[:, None]
        else:
            ok = jnp.arange(MB1 * PS1)[None, :] <= pos[:, None]
        s = jnp.where(ok[:, None, None], s, NEG)
        o = jnp.einsum("bhgs,bshd->bhgd", jax.nn.softmax(s, -1), v).reshape(b, -1)
        y = o @ wo
        if bug != "no-psum":
            y = psum(y, "tp")
        return y, kpool, vpool
    return f


TABLE1 = rng.permutation(NP1)[:B1 * MB1].reshape(B1, MB1).astype(np.int32)
POS1 = np.array([5, 0, 15, 9], np.int32)
ARGS1 = (R(B1, KVH1 * G1 * D1), R(B1, KVH1, D1), R(B1, KVH1, D1), R(NP1, PS1, KVH1, D1), R(NP1, PS1, KVH1, D1),
         TABLE1, POS1, R(KVH1 * G1 * D1, M1, scale=0.2))
SPEC1 = (P(None, "tp"), P(None, "tp"), P(None, "tp"), P(None, None, "tp"), P(None, None, "tp"), P(), P(), P("tp"))
C.smap("s.paged_decode_kvhead_pools.tp4", {"tp": 4}, paged_tp, SPEC1,
       (P(), P(None, None, "tp"), P(None, None, "tp")), paged_ref, ARGS1,
       bugs=[("no-table-lookup", ["wrong-offset"]), ("mask-exclusive", ["wrong-offset"]),
             ("no-psum", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 2. continuous batching: contiguous per-slot cache, batch over dp, kv heads over tp.
B2, T2, KVH2, D2 = 4, 12, 4, 8


def cb_write(cache, new, pos):
    return jax.vmap(lambda c, n, p: lax.dynamic_update_slice(c, n[None], (p, 0, 0)))(cache, new, pos)


def cb_ref(q, knew, vnew, kc, vc, lens, done):
    live = done == 0
    kc = jnp.where(live[:, None, None, None], cb_write(kc, knew, lens), kc)
    vc = jnp.where(live[:, None, None, None], cb_write(vc, vnew, lens), vc)
    s = jnp.einsum("bhd,bthd->bht", q, kc) / np.sqrt(D2)
    s = jnp.where((jnp.arange(T2)[None] <= lens[:, None])[:, None], s, NEG)
    o = jnp.einsum("bht,bthd->bhd", jax.nn.softmax(s, -1), vc)
    o = jnp.where(live[:, None, None], o, 0.0)
    return o, kc, vc, lens + live.astype(jnp.int32)


def cb_tp(bug):
    def f(q, knew, vnew, kc, vc, lens, done):
        live = done == 0
        wr = jnp.ones_like(live) if bug == "finished-still-written" else live
        kc = jnp.where(wr[:, None, None, None], cb_write(kc, knew, lens), kc)
        vc = jnp.where(wr[:, None, None, None], cb_write(vc, vnew, lens), vc)
        s = jnp.einsum("bhd,bthd->bht", q, kc) / np.sqrt(D2)
        hi = lens + 1 if bug == "mask-one-long" else lens
        s = jnp.where((jnp.arange(T2)[None] <= hi[:, None])[:, None], s, NEG)
        o = jnp.einsum("bht,bthd->bhd", jax.nn.softmax(s, -1), vc)
        o = jnp.where(live[:, None, None], o, 0.0)
        return o, kc, vc, lens + live.astype(jnp.int32)
    return f


ARGS2 = (R(B2, KVH2, D2), R(B2, KVH2, D2), R(B2, KVH2, D2), R(B2, T2, KVH2, D2), R(B2, T2, KVH2, D2),
         np.array([3, 7, 0, 10], np.int32), np.array([0, 1, 0, 1], np.int32))
SPEC2 = (P("dp", "tp"), P("dp", "tp"), P("dp", "tp"), P("dp", None, "tp"), P("dp", None, "tp"), P("dp"), P("dp"))
C.smap("s.continuous_batch_slots.dp2xtp4", {"dp": 2, "tp": 4}, cb_tp, SPEC2,
       (P("dp", "tp"), P("dp", None, "tp"), P("dp", None, "tp"), P("dp")), cb_ref, ARGS2,
       bugs=[("finished-still-written", ["wrong-value"]), ("mask-one-long", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 3. greedy speculative verification, vocab over tp4.
B3, K3, V3 = 4, 4, 32


def spec_ref(tl, noise):
    draft = jnp.argmax(tl[:, :K3] + 0.3 * noise, -1).astype(jnp.int32)
    tgt = jnp.argmax(tl, -1).astype(jnp.int32)
    acc = jnp.cumprod((tgt[:, :K3] == draft).astype(jnp.int32), -1)
    n = jnp.sum(acc, -1)
    bonus = jnp.take_along_axis(tgt, n[:, None], 1)[:, 0]
    return n, bonus, jnp.where(acc == 1, draft, -1)


def spec_tp(bug):
    def f(tl, noise):
        draft = xshard_argmax(tl[:, :K3] + 0.3 * noise, "tp")
        tgt = xshard_argmax(tl, "tp", bug)
        match = (tgt[:, :K3] == draft).astype(jnp.int32)
        if bug == "acceptance-not-cumulative":
            acc = match
        else:
            acc = jnp.cumprod(match, -1)
        n = jnp.sum(acc, -1)
        bonus = jnp.take_along_axis(tgt, n[:, None], 1)[:, 0]
        return n, bonus, jnp.where(acc == 1, draft, -1)
    return f


ARGS3 = (R(B3, K3 + 1, V3), R(B3, K3, V3))
C.smap("s.spec_verify_greedy_vocab.tp4", {"tp": 4}, spec_tp, (P(None, None, "tp"), P(None, None, "tp")),
       (P(), P(), P()), spec_ref, ARGS3,
       bugs=[("acceptance-not-cumulative", ["wrong-value"]), ("argmax-no-offset", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 4. top-k + temperature + Gumbel-max on vocab-parallel logits.
B4, V4, K4, TEMP4 = 4, 64, 5, 0.7


def topk_ref(logits, g):
    vals, ids = lax.top_k(logits, K4)
    z = vals / TEMP4
    probs = jax.nn.softmax(z, -1)
    tok = jnp.take_along_axis(ids, jnp.argmax(z + g, -1)[:, None], 1)[:, 0]
    return tok, probs, ids


def topk_tp(bug):
    def f(logits, g):
        vl = logits.shape[-1]
        v, i = lax.top_k(logits, K4)
        if bug != "gathered-no-offset":
            i = i + idx("tp") * vl
        if bug == "local-topk-only":
            vals, ids = v, i
        else:
            av = lax.all_gather(v, "tp", axis=1, tiled=True)
            ai = lax.all_gather(i, "tp", axis=1, tiled=True)
            vals, j = lax.top_k(av, K4)
            ids = jnp.take_along_axis(ai, j, 1)
        z = vals / TEMP4
        probs = jax.nn.softmax(z, -1)
        tok = jnp.take_along_axis(ids, jnp.argmax(z + g, -1)[:, None], 1)[:, 0]
        return tok, probs, ids
    return f


ARGS4 = (R(B4, V4, scale=2.0), -np.log(-np.log(rng.uniform(1e-6, 1.0, (B4, K4)))).astype(np.float32))
C.smap("s.topk_gumbel_vocab_parallel.tp4", {"tp": 4}, topk_tp, (P(None, "tp"), P()), (P(), P(), P()),
       topk_ref, ARGS4,
       bugs=[("local-topk-only", ["missing-collective"]), ("gathered-no-offset", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 5. top-p with a global sort, then Gumbel-max with sharded noise.
B5, V5, TOPP5 = 4, 32, 0.8


def nucleus_threshold(full, inclusive=True):
    srt = -jnp.sort(-full, -1)
    pr = jax.nn.softmax(srt, -1)
    cum = jnp.cumsum(pr, -1)
    keep = (cum - pr < TOPP5) if inclusive else (cum < TOPP5)
    keep = keep.at[:, 0].set(True)
    return jnp.min(jnp.where(keep, srt, jnp.inf), -1, keepdims=True)


def topp_ref(logits, g):
    thr = nucleus_threshold(logits)
    masked = jnp.where(logits >= thr, logits, NEG)
    tok = jnp.argmax(masked + g, -1).astype(jnp.int32)
    return masked, tok


def topp_tp(bug):
    def f(logits, g):
        vl = logits.shape[-1]
        if bug == "local-sort":
            thr = nucleus_threshold(logits)
        else:
            full = lax.all_gather(logits, "tp", axis=1, tiled=True)
            thr = nucleus_threshold(full, inclusive=bug != "exclusive-nucleus")
        masked = jnp.where(logits >= thr, logits, NEG)
        y = masked + g
        m = jnp.max(y, -1)
        gm = pmax(m, "tp")
        li = jnp.argmax(y, -1).astype(jnp.int32) + idx("tp") * vl
        tok = pmin(jnp.where(m == gm, li, V5), "tp")
        return masked, tok
    return f


ARGS5 = (R(B5, V5, scale=2.0), -np.log(-np.log(rng.uniform(1e-6, 1.0, (B5, V5)))).astype(np.float32))
C.smap("s.top_p_global_sort.tp4", {"tp": 4}, topp_tp, (P(None, "tp"), P(None, "tp")), (P(None, "tp"), P()),
       topp_ref, ARGS5,
       bugs=[("local-sort", ["wrong-reduction"]), ("exclusive-nucleus", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 6. repetition penalty + min-length EOS + greedy, dp2 x tp4.
B6, V6, H6, EOS6, MINLEN6, PEN6 = 4, 32, 6, 13, 4, 1.3


def procs_ref(logits, hist, glen):
    seen = jnp.any(hist[:, :, None] == jnp.arange(V6)[None, None], 1)
    pen = jnp.where(logits > 0, logits / PEN6, logits * PEN6)
    x = jnp.where(seen, pen, logits)
    x = jnp.where((jnp.arange(V6)[None] == EOS6) & (glen[:, None] < MINLEN6), NEG, x)
    return x, jnp.argmax(x, -1).astype(jnp.int32)


def procs_tp(bug):
    def f(logits, hist, glen):
        vl = logits.shape[-1]
        off = 0 if bug == "history-no-offset" else idx("tp") * vl
        ids = jnp.arange(vl) + off
        seen = jnp.any(hist[:, :, None] == ids[None, None], 1)
        pen = jnp.where(logits > 0, logits / PEN6, logits * PEN6)
        x = jnp.where(seen, pen, logits)
        gid = jnp.arange(vl) + idx("tp") * vl
        is_eos = (jnp.arange(vl) == EOS6 % vl) if bug == "eos-every-shard" else (gid == EOS6)
        short = (glen <= MINLEN6) if bug == "minlen-off-by-one" else (glen < MINLEN6)
        x = jnp.where(is_eos[None] & short[:, None], NEG, x)
        return x, xshard_argmax(x, "tp")
    return f


L6 = R(B6, V6, scale=2.0)
L6[:, EOS6] = 6.0  # EOS would win unless masked
HIST6 = I(0, V6, B6, H6)
C.smap("s.rep_penalty_minlen_eos.dp2xtp4", {"dp": 2, "tp": 4}, procs_tp, (P("dp", "tp"), P("dp"), P("dp")),
       (P("dp", "tp"), P("dp")), procs_ref, (L6, HIST6, np.array([1, 4, 7, 3], np.int32)),
       bugs=[("history-no-offset", ["wrong-offset"]), ("eos-every-shard", ["wrong-offset"]),
             ("minlen-off-by-one", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 7. chunked prefill into a flattened bf16 paged pool, kv heads over tp2.
NP7, PS7, MB7, B7, CH7, KVH7, D7 = 12, 4, 3, 2, 4, 2, 8


def prefill_slots(table, start, shift=0):
    t = start[:, None] + jnp.arange(CH7)[None]  # (b, c) logical positions
    page = jnp.take_along_axis(table, jnp.minimum(t // PS7 + shift, MB7 - 1), 1)
    return page * PS7 + t % PS7, t


def prefill_ref(q, kn, vn, kpool, vpool, table, start):
    b = q.shape[0]
    slot, t = prefill_slots(table, start)
    kpool = kpool.at[slot].set(kn.astype(kpool.dtype))
    vpool = vpool.at[slot].set(vn.astype(vpool.dtype))
    gather = (table[:, :, None] * PS7 + jnp.arange(PS7)).reshape(b, -1)
    k, v = kpool[gather].astype(jnp.float32), vpool[gather].astype(jnp.float32)
    s = jnp.einsum("bchd,bshd->bhcs", q, k) / np.sqrt(D7)
    ok = jnp.arange(MB7 * PS7)[None, None] <= t[:, :, None]
    s = jnp.where(ok[:, None], s, NEG)
    return jnp.einsum("bhcs,bshd->bchd", jax.nn.softmax(s, -1), v), kpool, vpool


def prefill_tp(bug):
    def f(q, kn, vn, kpool, vpool, table, start):
        b = q.shape[0]
        slot, t = prefill_slots(table, start, 1 if bug == "next-block-page" else 0)
        kpool = kpool.at[slot].set(kn.astype(kpool.dtype))
        vpool = vpool.at[slot].set(vn.astype(vpool.dtype))
        gather = (table[:, :, None] * PS7 + jnp.arange(PS7)).reshape(b, -1)
        k, v = kpool[gather].astype(jnp.float32), vpool[gather].astype(jnp.float32)
        s = jnp.einsum("bchd,bshd->bhcs", q, k) / np.sqrt(D7)
        hi = t + 1 if bug == "causal-off-by-one" else t
        ok = jnp.arange(MB7 * PS7)[None, None] <= hi[:, :, None]
        s = jnp.where(ok[:, None], s, NEG)
        return jnp.einsum("bhcs,bshd->bchd", jax.nn.softmax(s, -1), v), kpool, vpool
    return f


TABLE7 = rng.permutation(NP7)[:B7 * MB7].reshape(B7, MB7).astype(np.int32)
ARGS7 = (R(B7, CH7, KVH7, D7), R(B7, CH7, KVH7, D7), R(B7, CH7, KVH7, D7),
         R(NP7 * PS7, KVH7, D7).astype(jnp.bfloat16), R(NP7 * PS7, KVH7, D7).astype(jnp.bfloat16),
         TABLE7, np.array([2, 5], np.int32))
SP7 = P(None, None, "tp")
C.smap("s.chunked_prefill_flat_pool_bf16.tp2", {"tp": 2}, prefill_tp,
       (SP7, SP7, SP7, P(None, "tp"), P(None, "tp"), P(), P()), (SP7, P(None, "tp"), P(None, "tp")),
       prefill_ref, ARGS7,
       bugs=[("next-block-page", ["wrong-offset"]), ("causal-off-by-one", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 8. finish bookkeeping of a continuous batch, dp2 x tp4.
B8, V8, EOS8, PAD8, MAXLEN8 = 8, 32, 3, 0, 9


def finish_ref(logits, done, lens):
    tok = jnp.argmax(logits, -1).astype(jnp.int32)
    tok = jnp.where(done, PAD8, tok)
    live = jnp.logical_not(done)
    new_len = lens + live.astype(jnp.int32)
    done = done | (tok == EOS8) | (new_len >= MAXLEN8)
    return tok, done, new_len


def finish_tp(bug):
    def f(logits, done, lens):
        vl = logits.shape[-1]
        ax = "dp" if bug == "pmax-over-dp" else "tp"
        m = jnp.max(logits, -1)
        gm = pmax(m, ax)
        li = jnp.argmax(logits, -1).astype(jnp.int32) + idx("tp") * vl
        tok = pmin(jnp.where(m == gm, li, V8), "tp")
        tok = jnp.where(done, PAD8, tok)
        live = jnp.logical_not(done)
        new_len = lens + live.astype(jnp.int32)
        hit = (tok == EOS8) | (new_len >= MAXLEN8)
        done = hit if bug == "done-not-sticky" else done | hit
        return tok, done, new_len
    return f


L8 = R(B8, V8)
L8[1, EOS8] = 5.0
L8[4, EOS8] = 5.0
C.smap("s.batch_finish_bookkeeping.dp2xtp4", {"dp": 2, "tp": 4}, finish_tp, (P("dp", "tp"), P("dp"), P("dp")),
       (P("dp"), P("dp"), P("dp")), finish_ref,
       (L8, np.array([0, 0, 1, 0, 0, 1, 0, 0], bool), np.array([2, 5, 9, 8, 1, 4, 6, 3], np.int32)),
       bugs=[("done-not-sticky", ["wrong-value"]), ("pmax-over-dp", ["wrong-axis"])])

# ---------------------------------------------------------------------------
# 9. speculative sampling (rejection) with vocab-parallel probabilities.
B9, K9, V9 = 4, 3, 32


def specsamp_ref(tl, dl, draft, u, g):
    p = jax.nn.softmax(tl, -1)  # (b, k+1, v)
    q = jax.nn.softmax(dl, -1)  # (b, k, v)
    px = jnp.take_along_axis(p[:, :K9], draft[..., None], -1)[..., 0]
    qx = jnp.take_along_axis(q, draft[..., None], -1)[..., 0]
    acc = jnp.cumprod((u < px / qx).astype(jnp.int32), -1)
    n = jnp.sum(acc, -1)
    qpad = jnp.concatenate([q, jnp.zeros_like(q[:, :1])], 1)
    pn = jnp.take_along_axis(p, n[:, None, None], 1)[:, 0]
    qn = jnp.take_along_axis(qpad, n[:, None, None], 1)[:, 0]
    res = jnp.maximum(pn - qn, 0.0)
    tok = jnp.argmax(jnp.log(res + 1e-20) + g, -1).astype(jnp.int32)
    return n, tok, res / jnp.sum(res, -1, keepdims=True)


def specsamp_tp(bug):
    def smax(x):
        e = jnp.exp(x - pmax(jnp.max(x, -1, keepdims=True), "tp"))
        z = jnp.sum(e, -1, keepdims=True)
        return e / (z if bug == "local-denominator" else psum(z, "tp"))

    def f(tl, dl, draft, u, g):
        vl = tl.shape[-1]
        off = idx("tp") * vl
        p, q = smax(tl), smax(dl)
        oh = (draft[..., None] == jnp.arange(vl) + off)
        px = psum(jnp.sum(jnp.where(oh, p[:, :K9], 0.0), -1), "tp")
        qx = psum(jnp.sum(jnp.where(oh, q, 0.0), -1), "tp")
        ok = (u < px / qx).astype(jnp.int32)
        acc = ok if bug == "acceptance-not-cumulative" else jnp.cumprod(ok, -1)
        n = jnp.sum(acc, -1)
        qpad = jnp.concatenate([q, jnp.zeros_like(q[:, :1])], 1)
        pn = jnp.take_along_axis(p, n[:, None, None], 1)[:, 0]
        qn = jnp.take_along_axis(qpad, n[:, None, None], 1)[:, 0]
        res = jnp.maximum(pn - qn, 0.0)
        tok = xshard_argmax(jnp.log(res + 1e-20) + g, "tp")
        return n, tok, res / psum(jnp.sum(res, -1, keepdims=True), "tp")
    return f


TL9 = R(B9, K9 + 1, V9, scale=1.5)
DL9 = (TL9[:, :K9] + R(B9, K9, V9, scale=0.5)).astype(np.float32)
DRAFT9 = np.argmax(DL9 + 0.5 * R(B9, K9, V9), -1).astype(np.int32)
ARGS9 = (TL9, DL9, DRAFT9, rng.uniform(0, 1, (B9, K9)).astype(np.float32),
         -np.log(-np.log(rng.uniform(1e-6, 1.0, (B9, V9)))).astype(np.float32))
C.smap("s.spec_rejection_sampling.tp4", {"tp": 4}, specsamp_tp,
       (P(None, None, "tp"), P(None, None, "tp"), P(), P(), P(None, "tp")), (P(), P(), P(None, "tp")),
       specsamp_ref, ARGS9,
       bugs=[("acceptance-not-cumulative", ["wrong-value"]), ("local-denominator", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 10. 3-step greedy decode loop (lax.scan), heads and vocab over tp4.
V10, M10, H10, D10, T10, B10, STEPS10 = 32, 16, 4, 4, 8, 2, 3


def decode_ref(emb, wq, wk, wv, wo, wlm, kc, vc, tok, pos):
    def step(c, _):
        kc, vc, tok, pos = c
        x = emb[tok]  # (b, m)
        q = (x @ wq).reshape(B10, H10, D10)
        k = (x @ wk).reshape(B10, H10, D10)
        v = (x @ wv).reshape(B10, H10, D10)
        kc = jax.vmap(lambda c_, n, p: lax.dynamic_update_slice(c_, n[None], (p, 0, 0)))(kc, k, pos)
        vc = jax.vmap(lambda c_, n, p: lax.dynamic_update_slice(c_, n[None], (p, 0, 0)))(vc, v, pos)
        s = jnp.einsum("bhd,bthd->bht", q, kc) / np.sqrt(D10)
        s = jnp.where((jnp.arange(T10)[None] <= pos[:, None])[:, None], s, NEG)
        o = jnp.einsum("bht,bthd->bhd", jax.nn.softmax(s, -1), vc).reshape(B10, -1)
        h = x + o @ wo
        nxt = jnp.argmax(h @ wlm, -1).astype(jnp.int32)
        return (kc, vc, nxt, pos + 1), nxt
    (kc, vc, _, _), toks = lax.scan(step, (kc, vc, tok, pos), None, length=STEPS10)
    return toks.T, kc, vc


def decode_tp(bug):
    def f(emb, wq, wk, wv, wo, wlm, kc, vc, tok, pos):
        hl = kc.shape[2]

        def step(c, _):
            kc, vc, tok, pos = c
            x = emb[tok]
            q = (x @ wq).reshape(B10, hl, D10)
            k = (x @ wk).reshape(B10, hl, D10)
            v = (x @ wv).reshape(B10, hl, D10)
            wpos = pos + 1 if bug == "cache-one-late" else pos
            kc = jax.vmap(lambda c_, n, p: lax.dynamic_update_slice(c_, n[None], (p, 0, 0)))(kc, k, wpos)
            vc = jax.vmap(lambda c_, n, p: lax.dynamic_update_slice(c_, n[None], (p, 0, 0)))(vc, v, wpos)
            s = jnp.einsum("bhd,bthd->bht", q, kc) / np.sqrt(D10)
            s = jnp.where((jnp.arange(T10)[None] <= pos[:, None])[:, None], s, NEG)
            o = jnp.einsum("bht,bthd->bhd", jax.nn.softmax(s, -1), vc).reshape(B10, -1)
            h = x + psum(o @ wo, "tp")
            nxt = xshard_argmax(h @ wlm, "tp", bug)
            return (kc, vc, nxt, pos + 1), nxt
        (kc, vc, _, _), toks = lax.scan(step, (kc, vc, tok, pos), None, length=STEPS10)
        return toks.T, kc, vc
    return f


ARGS10 = (R(V10, M10), R(M10, H10 * D10, scale=0.5), R(M10, H10 * D10, scale=0.5), R(M10, H10 * D10, scale=0.5),
          R(H10 * D10, M10, scale=0.5), R(M10, V10), R(B10, T10, H10, D10), R(B10, T10, H10, D10),
          np.array([7, 19], np.int32), np.array([2, 4], np.int32))
SPEC10 = (P(), P(None, "tp"), P(None, "tp"), P(None, "tp"), P("tp"), P(None, "tp"),
          P(None, None, "tp"), P(None, None, "tp"), P(), P())
C.smap("s.greedy_decode_scan_cache.tp4", {"tp": 4}, decode_tp, SPEC10,
       (P(), P(None, None, "tp"), P(None, None, "tp")), decode_ref, ARGS10,
       bugs=[("argmax-no-offset", ["wrong-offset"]), ("cache-one-late", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 11. LM head row-parallel over tp4 (hidden sharded), logits psum_scatter'd to
#     vocab-parallel, temperature log-softmax across shards, logprob of the
#     chosen tokens and the full vocab-parallel logprobs.
B11, M11, V11, TEMP11 = 4, 16, 32, 0.8


def lmhead_ref(h, w, tok):
    lp = jax.nn.log_softmax((h @ w) / TEMP11, -1)
    return jnp.take_along_axis(lp, tok[:, None], 1)[:, 0], lp


def lmhead_tp(bug):
    def f(h, w, tok):
        part = h @ w  # (b, V) partial over tp
        if bug == "psum-then-first-block":
            z = lax.dynamic_slice_in_dim(psum(part, "tp"), 0, V11 // 4, 1)
        else:
            z = lax.psum_scatter(part, "tp", scatter_dimension=1, tiled=True)
        z = z / TEMP11 if bug != "temperature-after-lse" else z
        m = pmax(jnp.max(lax.stop_gradient(z), -1, keepdims=True), "tp")
        lse = m + jnp.log(psum(jnp.sum(jnp.exp(z - m), -1, keepdims=True), "tp"))
        lp = z - lse
        if bug == "temperature-after-lse":
            lp = lp / TEMP11
        vl = z.shape[-1]
        oh = tok[:, None] == jnp.arange(vl) + idx("tp") * vl
        return psum(jnp.sum(jnp.where(oh, lp, 0.0), -1), "tp"), lp
    return f


ARGS11 = (R(B11, M11), R(M11, V11, scale=0.4), I(0, V11, B11))
C.smap("s.lm_head_scatter_logprobs.tp4", {"tp": 4}, lmhead_tp, (P(None, "tp"), P("tp"), P()), (P(), P(None, "tp")),
       lmhead_ref, ARGS11,
       bugs=[("psum-then-first-block", ["wrong-offset"]), ("temperature-after-lse", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 12. OpenAI-style frequency / presence penalties: token counts from the
#     history by a scatter-add into the device's vocab shard (out-of-shard ids
#     dropped), dp2 x tp4.
B12, V12, H12, FREQ12, PRES12 = 4, 32, 10, 0.5, 0.7


def freqpen_ref(logits, hist):
    counts = jax.vmap(lambda h: jnp.zeros(V12, jnp.float32).at[h].add(1.0))(hist)
    return logits - FREQ12 * counts - PRES12 * (counts > 0)


def freqpen_tp(bug):
    def f(logits, hist):
        vl = logits.shape[-1]
        loc = hist if bug == "no-offset" else hist - idx("tp") * vl
        # another shard's ids -> vl (past the end, so the scatter drops them; a
        # negative index would wrap around)
        loc = jnp.where((loc >= 0) & (loc < vl), loc, vl)
        mode = "clip" if bug == "clip-not-drop" else "drop"
        counts = jax.vmap(lambda h: jnp.zeros(vl, jnp.float32).at[h].add(1.0, mode=mode))(loc)
        return logits - FREQ12 * counts - PRES12 * (counts > 0)
    return f


HIST12 = I(0, V12, B12, H12)
C.smap("s.freq_presence_penalty_scatter.dp2xtp4", {"dp": 2, "tp": 4}, freqpen_tp, (P("dp", "tp"), P("dp")),
       P("dp", "tp"), freqpen_ref, (R(B12, V12), HIST12),
       bugs=[("no-offset", ["wrong-offset"]), ("clip-not-drop", ["wrong-value"])])

# ---------------------------------------------------------------------------
# 13. min-p filtering on bf16 vocab-parallel logits (tp8), after a temperature
#     of 0.25: probabilities below
#     min_p times the top probability dropped (global max by pmax), then the
#     renormalised log-probabilities across shards.
B13, V13, MINP13, TEMP13 = 2, 64, 0.1, 0.25


def minp_ref(logits):
    x = logits.astype(jnp.float32) / TEMP13
    p = jax.nn.softmax(x, -1)
    keep = p >= MINP13 * jnp.max(p, -1, keepdims=True)
    y = jnp.where(keep, x, NEG)
    return jax.nn.log_softmax(y, -1)


def minp_tp(bug):
    def f(logits):
        x = logits.astype(jnp.float32) / TEMP13
        mx = jnp.max(x, -1, keepdims=True)
        gmx = mx if bug == "local-max" else pmax(mx, "tp")
        # p >= min_p * p_max  <=>  x >= x_max + log(min_p)
        keep = x >= gmx + np.log(MINP13)
        y = jnp.where(keep, x, NEG)
        my = pmax(jnp.max(y, -1, keepdims=True), "tp")
        z = jnp.sum(jnp.exp(y - my), -1, keepdims=True)
        if bug != "local-normaliser":
            z = psum(z, "tp")
        return y - my - jnp.log(z)
    return f


C.smap("s.min_p_filter_bf16.tp8", {"tp": 8}, minp_tp, (P(None, "tp"),), P(None, "tp"), minp_ref,
       (R(B13, V13, scale=2.0).astype(jnp.bfloat16),),
       bugs=[("local-max", ["missing-all-reduce"]), ("local-normaliser", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 14. prefix caching with copy-on-write: a child sequence shares its parent's
#     pages; before it writes into its last (shared) page, the page is copied
#     to a free page, the child's block table entry pointed at the copy, and
#     the new k written there. Pools sharded by kv head over tp4.
NP14, PS14, MB14, B14, KVH14, D14 = 16, 4, 3, 3, 4, 4


def cow_ref(pool, table, pos, free, knew):
    blk = pos // PS14
    src = jnp.take_along_axis(table, blk[:, None], 1)[:, 0]
    pool = pool.at[free].set(pool[src])
    table = jax.vmap(lambda t, b_, f_: t.at[b_].set(f_))(table, blk, free)
    pool = pool.at[free, pos % PS14].set(knew)
    return pool, table


def cow_tp(bug):
    def f(pool, table, pos, free, knew):
        blk = pos // PS14
        src = jnp.take_along_axis(table, blk[:, None], 1)[:, 0]
        pool = pool.at[free].set(pool[src])
        tb = blk + 1 if bug == "table-entry-next-block" else blk
        table = jax.vmap(lambda t, b_, f_: t.at[b_].set(f_, mode="drop"))(table, tb, free)
        dst = src if bug == "write-into-shared-page" else free
        pool = pool.at[dst, pos % PS14].set(knew)
        return pool, table
    return f


TABLE14 = np.array([[0, 1, 2], [0, 1, 3], [4, 5, 6]], np.int32)  # rows 0 and 1 share pages 0, 1
ARGS14 = (R(NP14, PS14, KVH14, D14), TABLE14, np.array([6, 5, 9], np.int32), np.array([10, 11, 12], np.int32),
          R(B14, KVH14, D14))
C.smap("s.prefix_cache_copy_on_write.tp4", {"tp": 4}, cow_tp,
       (P(None, None, "tp"), P(), P(), P(), P(None, "tp")), (P(None, None, "tp"), P()), cow_ref, ARGS14,
       bugs=[("write-into-shared-page", ["wrong-offset"]), ("table-entry-next-block", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 15. after speculative verification: lengths advance by the accepted draft
#     tokens plus the bonus, rejected draft entries of the KV cache rolled
#     back (zeroed past the new length); batch over dp2, kv heads over tp4.
B15, T15, KVH15, D15, K15 = 4, 12, 4, 4, 3


def rollback_ref(kc, lens, acc):
    n = jnp.sum(jnp.cumprod(acc, -1), -1)
    new = lens + n + 1
    keep = jnp.arange(T15)[None] < new[:, None]
    return jnp.where(keep[:, :, None, None], kc, 0.0), new


def rollback_tp(bug):
    def f(kc, lens, acc):
        n = jnp.sum(jnp.cumprod(acc, -1), -1)
        new = lens + n if bug == "no-bonus" else lens + n + 1
        keep = (jnp.arange(T15)[None] <= new[:, None]) if bug == "keep-inclusive" else \
            (jnp.arange(T15)[None] < new[:, None])
        return jnp.where(keep[:, :, None, None], kc, 0.0), new
    return f


ARGS15 = (R(B15, T15, KVH15, D15), np.array([2, 5, 0, 7], np.int32),
          np.array([[1, 1, 0], [1, 1, 1], [0, 1, 1], [1, 0, 1]], np.int32))
C.smap("s.spec_rollback_kv.dp2xtp4", {"dp": 2, "tp": 4}, rollback_tp, (P("dp", None, "tp"), P("dp"), P("dp")),
       (P("dp", None, "tp"), P("dp")), rollback_ref, ARGS15,
       bugs=[("no-bonus", ["wrong-offset"]), ("keep-inclusive", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 16. greedy verification written another way (tp4): acceptance by lax.cummin
#     of the matches, the accepted length as the first mismatch (argmax of a
#     sentinel-padded mismatch row), the target's argmax across shards by an
#     owner shard (pmin of the shard ids holding the global max) and a psum of
#     the owner's global index. The baseline is family 3's cumprod.
def spec2_tp(bug):
    def owner_argmax(x):
        vl = x.shape[-1]
        m = jnp.max(x, -1)
        gm = pmax(m, "tp")
        me = idx("tp")
        own = pmin(jnp.where(m == gm, me, 4), "tp") == me
        li = jnp.argmax(x, -1).astype(jnp.int32) + me * vl
        return psum(jnp.where(own, li, 0), "tp")

    def f(tl, noise):
        draft = owner_argmax(tl[:, :K3] + 0.3 * noise)
        tgt = owner_argmax(tl)
        match = (tgt[:, :K3] == draft).astype(jnp.int32)
        acc = lax.cummax(match, axis=1) if bug == "cummax-not-cummin" else lax.cummin(match, axis=1)
        miss = jnp.concatenate([1 - match, jnp.ones_like(match[:, :1])], 1)
        n = jnp.argmax(miss, -1).astype(jnp.int32)
        if bug == "length-from-sum-of-matches":
            n = jnp.sum(match, -1)
        bonus = jnp.take_along_axis(tgt, n[:, None], 1)[:, 0]
        return n, bonus, jnp.where(acc == 1, draft, -1)
    return f


C.smap("s.spec_verify_cummin_owner_argmax.tp4", {"tp": 4}, spec2_tp, (P(None, None, "tp"), P(None, None, "tp")),
       (P(), P(), P()), spec_ref, ARGS3,
       bugs=[("cummax-not-cummin", ["wrong-reduction"]), ("length-from-sum-of-matches", ["wrong-value"])])

# ---------------------------------------------------------------------------
# 17. exact top-k by k rounds of a cross-shard maximum (lax.fori_loop): each
#     round pmax's the shards' maxima, the owner (lowest shard holding it)
#     reports the global index by psum and knocks the entry out; vocab over
#     tp8, then the softmax over the k values.
B17, V17, K17 = 2, 64, 4


def topk_rounds_ref(logits):
    vals, ids = lax.top_k(logits, K17)
    return vals, ids, jax.nn.softmax(vals, -1)


def topk_rounds_tp(bug):
    def f(logits):
        vl = logits.shape[-1]
        me = idx("tp")

        def body(r, c):
            x, vals, ids = c
            m = jnp.max(x, -1)
            gm = pmax(m, "tp")
            own = pmin(jnp.where(m == gm, me, 8), "tp") == me
            li = jnp.argmax(x, -1)
            gi = li.astype(jnp.int32) + (0 if bug == "index-no-offset" else me * vl)
            gi = psum(jnp.where(own, gi, 0), "tp")
            hit = (jnp.arange(vl)[None] == li[:, None]) & own[:, None]
            if bug != "not-knocked-out":
                x = jnp.where(hit, -jnp.inf, x)
            return x, vals.at[:, r].set(gm), ids.at[:, r].set(gi)
        z = jnp.zeros((logits.shape[0], K17))
        _, vals, ids = lax.fori_loop(0, K17, body, (logits, z, z.astype(jnp.int32)))
        return vals, ids, jax.nn.softmax(vals, -1)
    return f


ARGS17 = (R(B17, V17),)
C.smap("s.topk_by_rounds_of_pmax.tp8", {"tp": 8}, topk_rounds_tp, (P(None, "tp"),), (P(), P(), P()),
       topk_rounds_ref, ARGS17,
       bugs=[("index-no-offset", ["wrong-offset"]), ("not-knocked-out", ["wrong-value"])])

# ---------------------------------------------------------------------------
# 18. flash-decoding over the pages of a paged cache (tp4, kv heads sharded):
#     a lax.scan over each sequence's logical blocks gathers one page, masks
#     by length and keeps a running max / sum / accumulator; MQA-free (one
#     query head per kv head). Baseline: gather everything, one softmax.
NP18, PS18, MB18, B18, KVH18, D18 = 12, 4, 3, 3, 4, 8


def flashdec_ref(q, kpool, vpool, table, lens):
    b = q.shape[0]
    k = kpool[table].reshape(b, MB18 * PS18, KVH18, D18)
    v = vpool[table].reshape(b, MB18 * PS18, KVH18, D18)
    s = jnp.einsum("bhd,bshd->bhs", q, k) / np.sqrt(D18)
    s = jnp.where((jnp.arange(MB18 * PS18)[None] < lens[:, None])[:, None], s, NEG)
    return jnp.einsum("bhs,bshd->bhd", jax.nn.softmax(s, -1), v)


def flashdec_tp(bug):
    def f(q, kpool, vpool, table, lens):
        b, hl = q.shape[0], q.shape[1]

        def step(c, j):
            m, l, acc = c
            page = table[:, j]
            k, v = kpool[page], vpool[page]  # (b, PS, hl, d)
            s = jnp.einsum("bhd,bshd->bhs", q, k) / np.sqrt(D18)
            start = j * PS18 if bug != "page-offset-from-physical-page" else page[:, None] * PS18
            t = start + jnp.arange(PS18)
            ok = t[None] < lens[:, None] if bug != "page-offset-from-physical-page" else t < lens[:, None]
            s = jnp.where(ok[:, None], s, NEG)
            mn = jnp.maximum(m, jnp.max(s, -1))
            a = jnp.exp(m - mn)
            p = jnp.exp(s - mn[..., None])
            l = l * a + jnp.sum(p, -1)
            acc = acc * a[..., None] + jnp.einsum("bhs,bshd->bhd", p, v)
            return (mn, l, acc), None
        init = (jnp.full((b, hl), NEG), jnp.zeros((b, hl)), jnp.zeros((b, hl, D18)))
        (m, l, acc), _ = lax.scan(step, init, jnp.arange(MB18))
        return acc / (l[..., None] if bug != "sum-not-rescaled" else 1.0)
    return f


TABLE18 = rng.permutation(NP18)[:B18 * MB18].reshape(B18, MB18).astype(np.int32)
ARGS18 = (R(B18, KVH18, D18), R(NP18, PS18, KVH18, D18), R(NP18, PS18, KVH18, D18), TABLE18,
          np.array([3, 12, 7], np.int32))
C.smap("s.flash_decoding_over_pages.tp4", {"tp": 4}, flashdec_tp,
       (P(None, "tp"), P(None, None, "tp"), P(None, None, "tp"), P(), P()), P(None, "tp"), flashdec_ref, ARGS18,
       bugs=[("page-offset-from-physical-page", ["wrong-offset"]), ("sum-not-rescaled", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 19. repetition penalty with the token history split over tp4 (each device
#     holds a quarter of the history positions and the full vocab row):
#     per-device presence pmax'd over tp, then the penalty and min-length
#     EOS mask; batch over dp2.
B19, V19, H19, EOS19, MINLEN19, PEN19 = 4, 16, 8, 2, 3, 1.5


def hist_split_ref(logits, hist, glen):
    seen = jnp.any(hist[:, :, None] == jnp.arange(V19), 1)
    x = jnp.where(seen, jnp.where(logits > 0, logits / PEN19, logits * PEN19), logits)
    return jnp.where((jnp.arange(V19) == EOS19)[None] & (glen < MINLEN19)[:, None], NEG, x)


def hist_split_tp(bug):
    def f(logits, hist, glen):
        seen = jnp.any(hist[:, :, None] == jnp.arange(V19), 1).astype(jnp.int32)
        if bug != "presence-not-reduced":
            seen = pmax(seen, "tp")
        pen = logits * PEN19 if bug == "penalty-sign-ignored" else \
            jnp.where(logits > 0, logits / PEN19, logits * PEN19)
        x = jnp.where(seen > 0, pen, logits)
        return jnp.where((jnp.arange(V19) == EOS19)[None] & (glen < MINLEN19)[:, None], NEG, x)
    return f


C.smap("s.rep_penalty_history_over_tp.dp2xtp4", {"dp": 2, "tp": 4}, hist_split_tp,
       (P("dp"), P("dp", "tp"), P("dp")), P("dp"), hist_split_ref,
       (R(B19, V19, scale=2.0), I(0, V19, B19, H19), np.array([0, 5, 2, 9], np.int32)),
       bugs=[("presence-not-reduced", ["missing-all-reduce"]), ("penalty-sign-ignored", ["wrong-value"])])

# ---------------------------------------------------------------------------
# 20. logits arrive vocab-parallel (tp4) and are all_to_all'd to full rows
#     with the batch split; each device applies its rows' temperatures (a
#     replicated per-row vector sliced at the device's batch offset), Gumbel
#     noise for its rows, argmax; the tokens all_gather'd.
B20, V20 = 8, 32


def a2a_ref(logits, temps, g):
    return jnp.argmax(logits / temps[:, None] + g, -1).astype(jnp.int32)


def a2a_tp(bug):
    def f(logits, temps, g):
        rows = lax.all_to_all(logits, "tp", 0, 1, tiled=True)  # (B/4, V)
        bl = rows.shape[0]
        off = 0 if bug == "temps-at-offset-0" else idx("tp") * bl
        t = lax.dynamic_slice_in_dim(temps, off, bl)
        gr = lax.dynamic_slice_in_dim(g, (idx("tp") + 1) % 4 * bl if bug == "noise-of-next-rows" else off, bl)
        tok = jnp.argmax(rows / t[:, None] + gr, -1).astype(jnp.int32)
        return lax.all_gather(tok, "tp", tiled=True)
    return f


ARGS20 = (R(B20, V20), rng.uniform(0.3, 1.5, B20).astype(np.float32),
          -np.log(-np.log(rng.uniform(1e-6, 1.0, (B20, V20)))).astype(np.float32))
C.smap("s.sample_rows_after_all_to_all.tp4", {"tp": 4}, a2a_tp, (P(None, "tp"), P(), P()), P(), a2a_ref, ARGS20,
       bugs=[("temps-at-offset-0", ["wrong-offset"]), ("noise-of-next-rows", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# GSPMD pairs.
C.gspmd("g.paged_decode_kvhead_pools.tp4", {"tp": 4}, SPEC1, (P(), P(None, None, "tp"), P(None, None, "tp")),
        paged_ref, ARGS1)
C.gspmd("g.topk_gumbel_sampling.dp2xtp4", {"dp": 2, "tp": 4}, (P("dp", "tp"), P("dp")), (P("dp"), P("dp"), P("dp")),
        topk_ref, ARGS4)
C.gspmd("g.spec_verify_greedy.tp4", {"tp": 4}, (P(None, None, "tp"), P(None, None, "tp")), (P(), P(), P()),
        spec_ref, ARGS3)
C.gspmd("g.top_p_global_sort.tp4", {"tp": 4}, (P(None, "tp"), P(None, "tp")), (P(None, "tp"), P()), topp_ref, ARGS5)
C.gspmd("g.rep_penalty_minlen_eos.dp2xtp4", {"dp": 2, "tp": 4}, (P("dp", "tp"), P("dp"), P("dp")),
        (P("dp", "tp"), P("dp")), procs_ref, (L6, HIST6, np.array([1, 4, 7, 3], np.int32)))
C.gspmd("g.continuous_batch_slots.dp2xtp4", {"dp": 2, "tp": 4}, SPEC2,
        (P("dp", "tp"), P("dp", None, "tp"), P("dp", None, "tp"), P("dp")), cb_ref, ARGS2)
C.gspmd("g.greedy_decode_scan_cache.tp4", {"tp": 4}, SPEC10, (P(), P(None, None, "tp"), P(None, None, "tp")),
        decode_ref, ARGS10)
C.gspmd("g.chunked_prefill_flat_pool_bf16.tp2", {"tp": 2}, (SP7, SP7, SP7, P(None, "tp"), P(None, "tp"), P(), P()),
        (SP7, P(None, "tp"), P(None, "tp")), prefill_ref, ARGS7)
C.gspmd("g.spec_rejection_sampling.tp4", {"tp": 4}, (P(None, None, "tp"), P(None, None, "tp"), P(), P(), P(None, "tp")),
        (P(), P(), P(None, "tp")), specsamp_ref, ARGS9)
C.gspmd("g.freq_presence_penalty.dp2xtp4", {"dp": 2, "tp": 4}, (P("dp", "tp"), P("dp")), P("dp", "tp"),
        freqpen_ref, (R(B12, V12), HIST12))
C.gspmd("g.lm_head_logprobs_rowparallel.tp4", {"tp": 4}, (P(None, "tp"), P("tp"), P()), (P(), P(None, "tp")),
        lmhead_ref, ARGS11)
C.gspmd("g.min_p_filter_bf16.tp8", {"tp": 8}, (P(None, "tp"),), P(None, "tp"), minp_ref,
        (R(B13, V13, scale=2.0).astype(jnp.bfloat16),))
C.gspmd("g.prefix_cache_copy_on_write.tp4", {"tp": 4}, (P(None, None, "tp"), P(), P(), P(), P(None, "tp")),
        (P(None, None, "tp"), P()), cow_ref, ARGS14)
C.gspmd("g.paged_decode_batch_dp.dp2xtp4", {"dp": 2, "tp": 4},
        (P("dp", "tp"), P("dp", "tp"), P("dp", "tp"), P(None, None, "tp"), P(None, None, "tp"), P("dp"), P("dp"),
         P("tp")), (P("dp"), P(None, None, "tp"), P(None, None, "tp")), paged_ref, ARGS1)
C.gspmd("g.topk_by_rounds_ref.tp8", {"tp": 8}, (P(None, "tp"),), (P(), P(), P()), topk_rounds_ref, ARGS17)
C.gspmd("g.flash_decoding_pages.tp4", {"tp": 4}, (P(None, "tp"), P(None, None, "tp"), P(None, None, "tp"), P(), P()),
        P(None, "tp"), flashdec_ref, ARGS18)
C.gspmd("g.rep_penalty_history_split.dp2xtp4", {"dp": 2, "tp": 4}, (P("dp"), P("dp", "tp"), P("dp")), P("dp"),
        hist_split_ref, (R(B19, V19, scale=2.0), I(0, V19, B19, H19), np.array([0, 5, 2, 9], np.int32)))


M20 = make_mesh({"tp": 4})


def a2a_constrained(logits, temps, g):
    rows = lax.with_sharding_constraint(logits, NamedSharding(M20, P("tp", None)))  # full rows, batch split
    return jnp.argmax(rows / temps[:, None] + g, -1).astype(jnp.int32)


C.gspmd("g.sample_rows_resharded.tp4", {"tp": 4}, (P(None, "tp"), P(), P()), P(), a2a_constrained, ARGS20)
C.known_miss("s.rep_penalty_minlen_eos.dp2xtp4.bug.minlen-off-by-one",
             "glen <= 4 vs glen < 4 differs only when a generated length equals MIN_LEN exactly; "
             "the witness's random lengths never hit 4")
C.finish()
