"""samples/fresh16: a sixteenth batch of programs as a user writes them, on
the theme of LLM inference and serving as inference engineers write it in
JAX (KV caches, paged attention, continuous batching, sampling, beam search,
speculative decoding, quantised caches and weights, prefix caching,
multi-LoRA), none of them an idiom of samples/fresh .. fresh14, probe, train
or wild.
shard_map families: 1. a decode step of a batch at ragged lengths, heads
over tp, RoPE at each request's position and the new k / v written into the
head-sharded cache by a vmap of dynamic_update_slice at pos[b]; 2. a decode
step over a cache sharded over the sequence (dp x sp), the owner of pos[b]
writing at pos[b] - its offset (a where on ownership), partial softmax
statistics (maximum guarded on shards with no valid key) merged by pmax /
psum; 3. GQA decode on tp8 with 2 kv heads replicated (every device writes
the same cache entries) and the kv head picked by idx // 4; 4. paged
attention with the page pool over heads: the new entry scattered into page
table[b, pos // PS] at slot pos % PS, the block table's pages gathered and
flattened page-major; 5. paged attention with the page pool sharded over
pages (sp4): the write scattered with mode="drop" on non-owners, each device
gathering the table entries it owns (local id = page - offset, the rest
masked), pmax / psum merge; 6. a continuous-batching sampling step (dp x tp)
with per-request temperatures, Gumbel noise given as an input, argmax across
the vocabulary by pmax / pmin of global indices, finished slots masked to
PAD and not grown, slots finishing on their stop token; 7. greedy decoding
with Gemma-2 final-logit soft-capping on tp8, each device's best (value,
global index) all_gathered, the token's log-probability from the global
log-sum-exp; 8. top-k then top-p over a sharded vocabulary (local top-k with
global indices, tiled all_gather, global top-k, probabilities under the
global softmax, the nucleus by the exclusive cumulative mass, inverse-CDF
draw with a provided uniform); 9. min-p with a pmax'd maximum and a
Gumbel-max draw whose full-vocabulary noise row is sliced at the device's
offset, the kept count psum'd; 10. repetition (CTRL), frequency and presence
penalties whose per-request histograms are scatter-adds (mode="drop") of a
history sharded over sp into a vocabulary sharded over tp, psum'd over sp;
11. a beam-search step (dp x tp): global log-softmax, GNMT length
normalisation, top-k over beams x vocabulary by flat global indices beam * V
+ token (local top-k, all_gather, global top-k), parents and tokens decoded,
lengths and the head-sharded cache reordered by take_along_axis; 12.
speculative verification (tp4): target and draft probabilities of the draft
tokens by masked lookups psum'd, acceptance against provided uniforms, the
count by a cumulative product, the bonus token from the residual max(p - q,
0) by an exponential race with provided noise, the cache rolled back past the
accepted drafts; 13. an int8 KV cache with per-token, per-head absmax scales
(two heads per device), quantised at the write and dequantised in the
attention; 14. an int4 weight-only (codes in int8, a scale per group of 8
rows) bf16 SwiGLU, gate / up column-parallel, down row-parallel with its
replicated scale table sliced at the device's groups, f32 accumulation and
psum; 15. prefix caching as cascade attention: a pool of shared prefixes
referenced by prefix id and per-request suffix caches, the two parts merged
by logaddexp of their log-sum-exps (dp x tp); 16. multi-LoRA serving:
per-request adapter ids gathering stacked A / B, B of the column-parallel up
projection sliced at the device's column offset and A of the row-parallel
down projection at its row offset, x A psum'd before B; 17. chunked prefill
at per-request start positions, the chunk over sp and heads over tp, RoPE at
start + shard offset + i, the chunk's k / v all_gathered (tiled) and written
at start[b]; 18. a multi-LoRA Adam step (check_vma=True), only the stacked
adapters trained, the loss pmean'd over dp; 19. an Adam step distilling a
draft head into the target's distribution, KL at temperature 2 over a
sharded vocabulary with stop_gradient'ed maxima (check_vma=True); 20. a
greedy generation loop (lax.fori_loop, 3 tokens) with a tied
vocabulary-sharded embedding (masked lookup psum'd), one attention layer
writing its head-sharded cache, the argmax across tp fed back.
Under GSPMD (jax.jit with in / out shardings, with_sharding_constraint where
a user puts one): the ragged decode step with requests over dp and heads
over tp, paged attention with the pool sharded over pages, top-k / top-p on
tp8, the beam step with the cache reordered, speculative verification and
rollback, the int8 cache sharded over the sequence, the int4 SwiGLU, a
multi-LoRA AdamW step with the adapters sharded over tp, penalties followed
by min-p sampling, the draft-distillation Adam step, prefix-cached attention
written as a gather and concatenation, and MQA decode over a cache sharded
over the sequence on sp8.
Sampling is deterministic: the noise (Gumbel, exponential, uniforms) is an
input, so both programs compute the same function; the seeded logits have no
ties. Continuous batching: the stop tokens of half the slots are set to the
token the baseline draws, so slots do finish in the step.
Left out, as idioms of earlier batches: a single-position decode step with
dynamic_update_slice, a paged cache spread over devices, greedy sampling by
all-gathering best logits with the token's embedding, temperature + top-p,
a speculative acceptance check, group-wise int8 weights, LoRA on a tp MLP
(fresh6: here ragged per-request positions, an owner-masked write into a
sequence-sharded cache, a page pool sharded over heads or over pages with
mode="drop" scatters, top-k before top-p with a global softmax, the
acceptance count, bonus draw and cache rollback, per-request adapters);
split-KV decoding and flash-decoding merges (fresh9, fresh12); a beam step
over a sharded vocabulary (fresh3: here with length normalisation and the
cache reordered); distributed top-k and argmax with ties (fresh13); typical
sampling with a repetition penalty (fresh11: here histograms by scatter-add
over a sharded history); Gumbel-max via jax.random (fresh10: here the noise
is an input); QLoRA and int4 packing by bit ops (fresh10).
Numerics: every correct pair agrees with its baseline at rounding level (f32
within 2e-6; token ids, counts, int8 codes and the bf16 int4 MLP exactly).
Changed for its numerics: the int8 cache family first had one head per
device, so its two scale bugs (per-device absmax, the first local head's
scale) computed the right function; it now has two heads per device. The
paged pool family's first missing-psum bug left the denominator unsummed,
which divides by 0 on devices holding none of a request's pages (inf); it
now leaves the numerator unsummed. Nothing was dropped.
Each shard_map family has the bug variants a careless parallelisation makes
(a cache write at the batch's largest position, without the device offset
or into the logical instead of the physical page, pages flattened slot-major,
a merge without the max correction, a numerator or output not psum'd, the kv
head chosen by idx % kv, pmean for psum, argmax or top-k indices without the
vocabulary offset, gathered indices without it, a temperature of the
device's first slot, a log-sum-exp or top-p probabilities or a min-p maximum
from the local shard, noise not sliced at the offset, a histogram not psum'd
or without its vocabulary / position offset, flat beam indices of the local
vocabulary, the cache reordered by gather positions, a draft probability not
psum'd, accepted drafts counted without the cumulative product, int8 scales
per device instead of per head, a group-scale table sliced at 0, cascade
weights swapped, prefixes picked by slot, a LoRA B sliced at 0 or x A not
psum'd, RoPE without the shard offset, an untiled all_gather reshaped
directly, a chunk written at 0, a loss psum'd where it is pmean'd, a KL
pmean'd over the vocabulary shards, an embedding lookup without its row
offset, a per-shard argmax).
Exported with scalify_jax.export_pair; every pair is also run by JAX on
seeded inputs and its manifest entry records the largest difference from
the single-device run ("numerics").
Run from the repository root: bash samples/gen/run_fresh16.sh [SUBSTR...]
(only the pairs whose name contains a SUBSTR; the others keep their entries).
"""
import sys
import numpy as np
import jax, jax.numpy as jnp
from jax import lax
from jax.sharding import NamedSharding, PartitionSpec as P
import optax
sys.path.insert(0, "samples/gen")  # run from the repository root (run_fresh16.sh)
from fresh_lib import Corpus, seeded, mse, np_tree, state_specs  # noqa: E402
from scalify_jax import make_mesh  # noqa: E402

SCRIPT = "samples/gen/fresh16.py"
C = Corpus("samples/fresh16", SCRIPT, "samples/gen/run_fresh16.sh", sys.argv[1:])
rng, R, I = seeded(1616)
psum, pmax, pmin, pmean, idx = lax.psum, lax.pmax, lax.pmin, lax.pmean, lax.axis_index
NEG = -jnp.inf


def rope(x, pos, base=10000.0):
    """Rotary embedding of x (..., h, e) at positions pos (x.shape[:-2])."""
    half = x.shape[-1] // 2
    freq = 1.0 / base ** (jnp.arange(half, dtype=jnp.float32) / half)
    ang = pos.astype(jnp.float32)[..., None, None] * freq
    c, s = jnp.cos(ang), jnp.sin(ang)
    x1, x2 = x[..., :half], x[..., half:]
    return jnp.concatenate([x1 * c - x2 * s, x2 * c + x1 * s], -1)


def write_at(cache, new, pos):
    """The serving engine's cache write: request b's new entry (new[b], one
    token) at its own position pos[b] (ragged lengths)."""
    return jax.vmap(lambda c, n, p: lax.dynamic_update_slice_in_dim(c, n[None], p, 0))(cache, new, pos)


def write_chunk(cache, new, start):
    """A chunk new[b] (c, ...) written at start[b]."""
    return jax.vmap(lambda c, n, p: lax.dynamic_update_slice_in_dim(c, n, p, 0))(cache, new, start)


def decode_attn(q, k, v, ok):
    """One query token per request: q (b, h, e), k / v (b, t, h, e), ok (b, t)."""
    s = jnp.einsum("bhe,bthe->bht", q, k) / np.sqrt(q.shape[-1])
    s = jnp.where(ok[:, None, :], s, NEG)
    return jnp.einsum("bht,bthe->bhe", jax.nn.softmax(s, -1), v)


def proj(x, w):
    return jnp.einsum("bd,dhe->bhe", x, w)


def dist_argmax(z, ax, first=True):
    """argmax over a vocabulary sharded over ax (last dim): the global maximum
    by pmax, the smallest global index holding it by pmin (as jnp.argmax)."""
    vl = z.shape[-1]
    li = jnp.argmax(z, -1)
    lv = jnp.max(z, -1)
    gv = pmax(lv, ax)
    gi = li + idx(ax) * vl
    return pmin(jnp.where(lv == gv, gi, jnp.iinfo(jnp.int32).max), ax).astype(jnp.int32)


# ---------------------------------------------------------------------------
# 1. one decode step of a batch of requests at different lengths, heads over
#    tp: q / k / v of the new token projected with column-parallel weights,
#    RoPE at each request's own position, the new k / v written into the
#    head-sharded cache at pos[b] (vmap of dynamic_update_slice), attention
#    over positions <= pos[b], the row-parallel output projection psum'd.
D1_B, D1_T, D1_D, D1_H, D1_E = 4, 16, 32, 4, 8


def decode_step(x, wq, wk, wv, wo, kc, vc, pos):
    q, k, v = rope(proj(x, wq), pos), rope(proj(x, wk), pos), proj(x, wv)
    kc, vc = write_at(kc, k, pos), write_at(vc, v, pos)
    ok = jnp.arange(kc.shape[1])[None, :] <= pos[:, None]
    return jnp.einsum("bhe,hed->bd", decode_attn(q, kc, vc, ok), wo), kc, vc


def decode_tp(bug):
    def f(x, wq, wk, wv, wo, kc, vc, pos):
        wpos = jnp.broadcast_to(jnp.max(pos), pos.shape) if bug == "write-at-batch-max-pos" else pos
        q, k, v = rope(proj(x, wq), pos), rope(proj(x, wk), pos), proj(x, wv)
        kc, vc = write_at(kc, k, wpos), write_at(vc, v, wpos)
        ok = jnp.arange(kc.shape[1])[None, :] <= pos[:, None]
        y = jnp.einsum("bhe,hed->bd", decode_attn(q, kc, vc, ok), wo)
        return (y if bug == "out-proj-not-psummed" else psum(y, "tp")), kc, vc
    return f


d1_pos = np.array([3, 11, 0, 7], np.int32)
C.smap("s.decode_ragged_cache_write_heads.tp4", {"tp": 4}, decode_tp,
       (P(), P(None, "tp"), P(None, "tp"), P(None, "tp"), P("tp"), P(None, None, "tp"), P(None, None, "tp"), P()),
       (P(), P(None, None, "tp"), P(None, None, "tp")), decode_step,
       (R(D1_B, D1_D), R(D1_D, D1_H, D1_E, scale=0.3), R(D1_D, D1_H, D1_E, scale=0.3), R(D1_D, D1_H, D1_E, scale=0.3),
        R(D1_H, D1_E, D1_D, scale=0.3), R(D1_B, D1_T, D1_H, D1_E), R(D1_B, D1_T, D1_H, D1_E), d1_pos),
       bugs=[("write-at-batch-max-pos", ["wrong-offset"]), ("out-proj-not-psummed", ["missing-all-reduce"])])


# ---------------------------------------------------------------------------
# 2. a decode step over a KV cache sharded over the sequence (sp), requests
#    over dp: the device owning position pos[b] writes the new k / v at
#    pos[b] - its offset (the others keep their block: a where on ownership),
#    each device attends to its valid keys (maximum guarded to 0 where it
#    holds none), the partial numerators and denominators rescaled to the
#    pmax'd maximum and psum'd.
D2_B, D2_T, D2_H, D2_E = 4, 32, 2, 8


def seq_decode(q, knew, vnew, kc, vc, pos):
    kc, vc = write_at(kc, knew, pos), write_at(vc, vnew, pos)
    ok = jnp.arange(kc.shape[1])[None, :] <= pos[:, None]
    return decode_attn(q, kc, vc, ok), kc, vc


def seq_decode_sp(bug):
    def f(q, knew, vnew, kc, vc, pos):
        tl = kc.shape[1]
        off = idx("sp") * tl
        lp = pos if bug == "write-no-device-offset" else pos - off
        mine = ((pos >= off) & (pos < off + tl))[:, None, None, None]
        kc = jnp.where(mine, write_at(kc, knew, lp), kc)
        vc = jnp.where(mine, write_at(vc, vnew, lp), vc)
        ok = (off + jnp.arange(tl))[None, :] <= pos[:, None]
        s = jnp.where(ok[:, None, :], jnp.einsum("bhe,bthe->bht", q, kc) / np.sqrt(q.shape[-1]), NEG)
        m = jnp.max(s, -1, keepdims=True)
        m = jnp.where(jnp.isneginf(m), 0.0, m)
        gm = m if bug == "merge-without-max-correction" else pmax(m, "sp")
        p = jnp.exp(s - gm)
        num = psum(jnp.einsum("bht,bthe->bhe", p, vc), "sp")
        den = psum(jnp.sum(p, -1), "sp")
        return num / den[..., None], kc, vc
    return f


C.smap("s.decode_seq_sharded_cache_owner_write.dp2xsp4", {"dp": 2, "sp": 4}, seq_decode_sp,
       (P("dp"), P("dp"), P("dp"), P("dp", "sp"), P("dp", "sp"), P("dp")),
       (P("dp"), P("dp", "sp"), P("dp", "sp")), seq_decode,
       (R(D2_B, D2_H, D2_E, scale=2.0), R(D2_B, D2_H, D2_E), R(D2_B, D2_H, D2_E), R(D2_B, D2_T, D2_H, D2_E),
        R(D2_B, D2_T, D2_H, D2_E), np.array([5, 30, 17, 9], np.int32)),
       bugs=[("write-no-device-offset", ["wrong-offset"]), ("merge-without-max-correction", ["missing-all-reduce"])])


# ---------------------------------------------------------------------------
# 3. GQA decode with fewer kv heads than devices: 8 query heads over tp8, 2
#    kv heads whose projection and cache are replicated (every device writes
#    the same new entries at pos[b]); a device attends with the kv head of
#    its query head's group, idx // 4; the output projection psum'd.
G3_B, G3_T, G3_D, G3_HQ, G3_HK, G3_E = 3, 16, 32, 8, 2, 8


def gqa_decode(x, wq, wk, wv, wo, kc, vc, pos):
    q = rope(proj(x, wq), pos)
    kc, vc = write_at(kc, rope(proj(x, wk), pos), pos), write_at(vc, proj(x, wv), pos)
    ok = jnp.arange(kc.shape[1])[None, :] <= pos[:, None]
    rep = G3_HQ // G3_HK
    o = decode_attn(q, jnp.repeat(kc, rep, 2), jnp.repeat(vc, rep, 2), ok)
    return jnp.einsum("bhe,hed->bd", o, wo), kc, vc


def gqa_decode_tp(bug):
    def f(x, wq, wk, wv, wo, kc, vc, pos):
        q = rope(proj(x, wq), pos)
        kc, vc = write_at(kc, rope(proj(x, wk), pos), pos), write_at(vc, proj(x, wv), pos)
        ok = jnp.arange(kc.shape[1])[None, :] <= pos[:, None]
        g = idx("tp") % G3_HK if bug == "kv-head-interleaved" else idx("tp") // (G3_HQ // G3_HK)
        k = lax.dynamic_slice_in_dim(kc, g, 1, 2)
        v = lax.dynamic_slice_in_dim(vc, g, 1, 2)
        y = jnp.einsum("bhe,hed->bd", decode_attn(q, k, v, ok), wo)
        return (pmean(y, "tp") if bug == "out-pmean-not-psum" else psum(y, "tp")), kc, vc
    return f


C.smap("s.gqa_decode_kv_heads_replicated.tp8", {"tp": 8}, gqa_decode_tp,
       (P(), P(None, "tp"), P(), P(), P("tp"), P(), P(), P()), (P(), P(), P()), gqa_decode,
       (R(G3_B, G3_D), R(G3_D, G3_HQ, G3_E, scale=0.3), R(G3_D, G3_HK, G3_E, scale=0.3),
        R(G3_D, G3_HK, G3_E, scale=0.3), R(G3_HQ, G3_E, G3_D, scale=0.3), R(G3_B, G3_T, G3_HK, G3_E),
        R(G3_B, G3_T, G3_HK, G3_E), np.array([12, 2, 6], np.int32)),
       bugs=[("kv-head-interleaved", ["wrong-offset"]), ("out-pmean-not-psum", ["wrong-collective-op"])])


# ---------------------------------------------------------------------------
# 4. paged attention, the page pool sharded over heads (tp): the new token's
#    k / v written into its physical page table[b, pos // PS] at slot
#    pos % PS (a scatter), the request's pages gathered through its block
#    table and flattened page-major into its logical sequence, masked at
#    pos[b]; output projection psum'd.
PG_NP, PG_PS, PG_MP, PG_B, PG_D, PG_H, PG_E = 16, 4, 4, 3, 32, 4, 8
pg_table = np.array([[3, 9, 1, 14], [7, 0, 12, 5], [2, 11, 8, 6]], np.int32)


def paged_write(pool, new, table, pos):
    page = jnp.take_along_axis(table, (pos // PG_PS)[:, None], 1)[:, 0]
    return pool.at[page, pos % PG_PS].set(new)


def paged_gather(pool, table):
    g = pool[table]  # (b, pages, slot, h, e)
    return g.reshape(g.shape[0], -1, *g.shape[3:])


def paged_decode(x, wq, wk, wv, wo, kp, vp, table, pos):
    q = rope(proj(x, wq), pos)
    kp, vp = paged_write(kp, rope(proj(x, wk), pos), table, pos), paged_write(vp, proj(x, wv), table, pos)
    ok = jnp.arange(PG_MP * PG_PS)[None, :] <= pos[:, None]
    o = decode_attn(q, paged_gather(kp, table), paged_gather(vp, table), ok)
    return jnp.einsum("bhe,hed->bd", o, wo), kp, vp


def paged_tp(bug):
    def f(x, wq, wk, wv, wo, kp, vp, table, pos):
        q = rope(proj(x, wq), pos)
        if bug == "logical-page-as-physical":
            wt = jnp.broadcast_to(jnp.arange(PG_MP, dtype=jnp.int32), table.shape)
        else:
            wt = table
        kp, vp = paged_write(kp, rope(proj(x, wk), pos), wt, pos), paged_write(vp, proj(x, wv), wt, pos)
        if bug == "pages-flattened-slot-major":
            gat = lambda pool: jnp.swapaxes(pool[table], 1, 2).reshape(table.shape[0], -1, *pool.shape[2:])
        else:
            gat = lambda pool: paged_gather(pool, table)
        ok = jnp.arange(PG_MP * PG_PS)[None, :] <= pos[:, None]
        o = decode_attn(q, gat(kp), gat(vp), ok)
        return psum(jnp.einsum("bhe,hed->bd", o, wo), "tp"), kp, vp
    return f


C.smap("s.paged_attn_pool_heads_block_table.tp4", {"tp": 4}, paged_tp,
       (P(), P(None, "tp"), P(None, "tp"), P(None, "tp"), P("tp"), P(None, None, "tp"), P(None, None, "tp"), P(),
        P()), (P(), P(None, None, "tp"), P(None, None, "tp")), paged_decode,
       (R(PG_B, PG_D), R(PG_D, PG_H, PG_E, scale=0.3), R(PG_D, PG_H, PG_E, scale=0.3),
        R(PG_D, PG_H, PG_E, scale=0.3), R(PG_H, PG_E, PG_D, scale=0.3), R(PG_NP, PG_PS, PG_H, PG_E),
        R(PG_NP, PG_PS, PG_H, PG_E), pg_table, np.array([9, 14, 4], np.int32)),
       bugs=[("logical-page-as-physical", ["wrong-offset"]), ("pages-flattened-slot-major", ["wrong-reshape-order"])])


# ---------------------------------------------------------------------------
# 5. paged attention with the page pool sharded over pages (sp): each device
#    holds pages [off, off + NP/4); the new entry is scattered into the
#    owner's page (other devices index one past their block: mode="drop"),
#    each device gathers the table entries it owns (local id = page - off,
#    the rest masked), partial softmax statistics merged by pmax / psum.
PS5_NP = 16


def paged_pool_decode(q, knew, vnew, kp, vp, table, pos):
    kp, vp = paged_write(kp, knew, table, pos), paged_write(vp, vnew, table, pos)
    ok = jnp.arange(PG_MP * PG_PS)[None, :] <= pos[:, None]
    return decode_attn(q, paged_gather(kp, table), paged_gather(vp, table), ok), kp, vp


def paged_sp(bug):
    def f(q, knew, vnew, kp, vp, table, pos):
        npl = kp.shape[0]
        off = 0 if bug == "page-no-shard-offset" else idx("sp") * npl
        loc = table - off
        own = (loc >= 0) & (loc < npl)
        wpage = jnp.take_along_axis(loc, (pos // PG_PS)[:, None], 1)[:, 0]
        wpage = jnp.where((wpage >= 0) & (wpage < npl), wpage, npl)
        kp = kp.at[wpage, pos % PG_PS].set(knew, mode="drop")
        vp = vp.at[wpage, pos % PG_PS].set(vnew, mode="drop")
        safe = jnp.where(own, loc, 0)
        kg = kp[safe].reshape(table.shape[0], -1, *kp.shape[2:])
        vg = vp[safe].reshape(table.shape[0], -1, *vp.shape[2:])
        ok = (jnp.arange(PG_MP * PG_PS)[None, :] <= pos[:, None]) & jnp.repeat(own, PG_PS, 1)
        s = jnp.where(ok[:, None, :], jnp.einsum("bhe,bthe->bht", q, kg) / np.sqrt(q.shape[-1]), NEG)
        gm = pmax(jnp.max(s, -1, keepdims=True), "sp")
        p = jnp.exp(s - gm)
        num = jnp.einsum("bht,bthe->bhe", p, vg)
        num = num if bug == "num-not-psummed" else psum(num, "sp")
        den = psum(jnp.sum(p, -1), "sp")
        return num / den[..., None], kp, vp
    return f


C.smap("s.paged_attn_pool_pages_sharded.sp4", {"sp": 4}, paged_sp,
       (P(), P(), P(), P("sp"), P("sp"), P(), P()), (P(), P("sp"), P("sp")), paged_pool_decode,
       (R(PG_B, PG_H, PG_E, scale=2.0), R(PG_B, PG_H, PG_E), R(PG_B, PG_H, PG_E), R(PS5_NP, PG_PS, PG_H, PG_E),
        R(PS5_NP, PG_PS, PG_H, PG_E), pg_table, np.array([9, 14, 4], np.int32)),
       bugs=[("page-no-shard-offset", ["wrong-offset"]), ("num-not-psummed", ["missing-all-reduce"])])


# ---------------------------------------------------------------------------
# 6. a continuous-batching sampling step, requests over dp, vocabulary over
#    tp: logits of the slot's hidden state divided by the request's own
#    temperature, Gumbel noise provided as an input (so both programs draw
#    the same sample), the argmax across tp (pmax of values, pmin of global
#    indices); finished slots emit PAD and do not grow, a slot finishes when
#    it emits its request's stop token.
CB_B, CB_D, CB_V, CB_PAD = 8, 16, 64, -1


def cb_step(h, w, temp, g, done, lens, eos):
    z = (h @ w) / temp[:, None] + g
    tok = jnp.where(done == 1, CB_PAD, jnp.argmax(z, -1).astype(jnp.int32))
    fin = (done == 1) | (tok == eos)
    return tok, fin.astype(jnp.int32), lens + (1 - done)


def cb_dp_tp(bug):
    def f(h, w, temp, g, done, lens, eos):
        t = temp[0] if bug == "temp-of-first-slot" else temp[:, None]
        z = (h @ w) / t + g
        if bug == "argmax-no-vocab-offset":
            lv = jnp.max(z, -1)
            gi = pmin(jnp.where(lv == pmax(lv, "tp"), jnp.argmax(z, -1), CB_V), "tp").astype(jnp.int32)
        else:
            gi = dist_argmax(z, "tp")
        tok = jnp.where(done == 1, CB_PAD, gi)
        fin = (done == 1) | (tok == eos)
        return tok, fin.astype(jnp.int32), lens + (1 - done)
    return f


cb_args = [R(CB_B, CB_D), R(CB_D, CB_V, scale=0.5), np.abs(R(CB_B)) + 0.5,
           -np.log(-np.log(rng.uniform(1e-6, 1.0, (CB_B, CB_V)))).astype(np.float32),
           np.array([0, 0, 1, 0, 0, 1, 0, 0], np.int32), I(3, 20, CB_B)]
_z = cb_args[0] @ cb_args[1] / cb_args[2][:, None] + cb_args[3]
cb_eos = np.where(np.arange(CB_B) % 2 == 0, np.argmax(_z, -1), 0).astype(np.int32)  # half the slots stop now
C.smap("s.continuous_batch_sample_eos.dp2xtp4", {"dp": 2, "tp": 4}, cb_dp_tp,
       (P("dp"), P(None, "tp"), P("dp"), P("dp", "tp"), P("dp"), P("dp"), P("dp")), (P("dp"), P("dp"), P("dp")),
       cb_step, tuple(cb_args) + (cb_eos,),
       bugs=[("argmax-no-vocab-offset", ["wrong-offset"]), ("temp-of-first-slot", ["wrong-offset"])])


# ---------------------------------------------------------------------------
# 7. greedy decoding with Gemma-2 final-logit soft-capping over a
#    vocabulary-sharded LM head (tp8): each device's best (value, global
#    index) all_gathered and the best of the gathered taken; the chosen
#    token's log-probability from the global log-sum-exp (pmax, psum).
GR_B, GR_D, GR_V, GR_CAP = 4, 16, 64, 30.0


def greedy_softcap(h, w):
    l = GR_CAP * jnp.tanh((h @ w) / GR_CAP)
    tok = jnp.argmax(l, -1)
    return tok.astype(jnp.int32), jnp.take_along_axis(jax.nn.log_softmax(l, -1), tok[:, None], 1)[:, 0]


def greedy_tp(bug):
    def f(h, w):
        l = GR_CAP * jnp.tanh((h @ w) / GR_CAP)
        vl = l.shape[-1]
        li = jnp.argmax(l, -1).astype(jnp.int32)
        gi = li if bug == "gathered-idx-no-offset" else li + idx("tp") * vl
        av, ai = lax.all_gather(jnp.max(l, -1), "tp"), lax.all_gather(gi, "tp")
        best = jnp.argmax(av, 0)
        tok = jnp.take_along_axis(ai, best[None], 0)[0]
        m = jnp.max(av, 0)
        if bug == "lse-local":
            lm = jnp.max(l, -1)
            lse = lm + jnp.log(jnp.sum(jnp.exp(l - lm[:, None]), -1))
        else:
            lse = m + jnp.log(psum(jnp.sum(jnp.exp(l - m[:, None]), -1), "tp"))
        return tok, m - lse
    return f


C.smap("s.greedy_softcap_logprob_allgather.tp8", {"tp": 8}, greedy_tp, (P(), P(None, "tp")), (P(), P()),
       greedy_softcap, (R(GR_B, GR_D), R(GR_D, GR_V, scale=2.0)),
       bugs=[("gathered-idx-no-offset", ["wrong-offset"]), ("lse-local", ["missing-all-reduce"])])


# ---------------------------------------------------------------------------
# 8. top-k then top-p (nucleus) sampling over a vocabulary sharded over tp:
#    per-request temperature and top_p, local top-k with global indices,
#    all_gather (tiled), the global top-k of the candidates; their
#    probabilities under the global softmax (log-sum-exp by pmax / psum),
#    the nucleus kept by the exclusive cumulative mass, and the token drawn
#    by inverse CDF with a provided uniform.
TK_B, TK_V, TK_K = 4, 64, 8


def topk_topp(logits, temp, top_p, u):
    z = logits / temp[:, None]
    lse = jax.nn.logsumexp(z, -1)
    v, i = lax.top_k(z, TK_K)
    p = jnp.exp(v - lse[:, None])
    keep = (jnp.cumsum(p, -1) - p) < top_p[:, None]
    w = jnp.where(keep, p, 0.0)
    c = jnp.cumsum(w, -1) / jnp.sum(w, -1, keepdims=True)
    choice = jnp.minimum(jnp.sum(c < u[:, None], -1), TK_K - 1)
    return jnp.take_along_axis(i, choice[:, None], 1)[:, 0].astype(jnp.int32), jnp.sum(w, -1)


def topk_topp_tp(bug):
    def f(logits, temp, top_p, u):
        z = logits / temp[:, None]
        lv, li = lax.top_k(z, TK_K)
        gi = li if bug == "topk-idx-no-offset" else li + idx("tp") * z.shape[-1]
        av = lax.all_gather(lv, "tp", axis=1, tiled=True)
        ai = lax.all_gather(gi, "tp", axis=1, tiled=True)
        v, j = lax.top_k(av, TK_K)
        i = jnp.take_along_axis(ai, j, 1)
        if bug == "topp-local-probs":
            lse = jax.nn.logsumexp(z, -1)
        else:
            m = pmax(jnp.max(z, -1), "tp")
            lse = m + jnp.log(psum(jnp.sum(jnp.exp(z - m[:, None]), -1), "tp"))
        p = jnp.exp(v - lse[:, None])
        keep = (jnp.cumsum(p, -1) - p) < top_p[:, None]
        w = jnp.where(keep, p, 0.0)
        c = jnp.cumsum(w, -1) / jnp.sum(w, -1, keepdims=True)
        choice = jnp.minimum(jnp.sum(c < u[:, None], -1), TK_K - 1)
        return jnp.take_along_axis(i, choice[:, None], 1)[:, 0].astype(jnp.int32), jnp.sum(w, -1)
    return f


C.smap("s.topk_topp_sample_vocab_sharded.tp4", {"tp": 4}, topk_topp_tp, (P(None, "tp"), P(), P(), P()), (P(), P()),
       topk_topp, (R(TK_B, TK_V, scale=2.0), np.array([0.7, 1.0, 1.3, 0.9], np.float32),
                   np.array([0.5, 0.9, 0.75, 0.3], np.float32), rng.uniform(0, 1, TK_B).astype(np.float32)),
       bugs=[("topp-local-probs", ["missing-all-reduce"]), ("topk-idx-no-offset", ["wrong-offset"])])


# ---------------------------------------------------------------------------
# 9. min-p sampling, requests over dp, vocabulary over tp: a token is kept
#    when its probability is at least min_p times the largest (z - max(z) >=
#    log(min_p), the maximum pmax'd), the Gumbel-max draw over the kept
#    tokens with the request's noise row (given over the full vocabulary and
#    sliced at the device's offset); also the number of kept tokens.
MP_B, MP_V = 4, 64


def minp_sample(logits, temp, min_p, g):
    z = logits / temp[:, None]
    keep = z - jnp.max(z, -1, keepdims=True) >= jnp.log(min_p)[:, None]
    tok = jnp.argmax(jnp.where(keep, z + g, NEG), -1).astype(jnp.int32)
    return tok, jnp.sum(keep, -1).astype(jnp.int32)


def minp_tp(bug):
    def f(logits, temp, min_p, g):
        z = logits / temp[:, None]
        vl = z.shape[-1]
        m = jnp.max(z, -1, keepdims=True)
        keep = z - (m if bug == "minp-local-max" else pmax(m, "tp")) >= jnp.log(min_p)[:, None]
        gl = lax.dynamic_slice_in_dim(g, 0 if bug == "noise-not-sliced" else idx("tp") * vl, vl, 1)
        tok = dist_argmax(jnp.where(keep, z + gl, NEG), "tp")
        return tok, psum(jnp.sum(keep, -1).astype(jnp.int32), "tp")
    return f


C.smap("s.minp_gumbel_sample.dp2xtp4", {"dp": 2, "tp": 4}, minp_tp, (P("dp", "tp"), P("dp"), P("dp"), P("dp")),
       (P("dp"), P("dp")), minp_sample,
       (R(MP_B, MP_V, scale=2.0), np.array([1.0, 0.8, 1.5, 1.2], np.float32),
        np.array([0.05, 0.1, 0.02, 0.2], np.float32),
        -np.log(-np.log(rng.uniform(1e-6, 1.0, (MP_B, MP_V)))).astype(np.float32)),
       bugs=[("minp-local-max", ["missing-all-reduce"]), ("noise-not-sliced", ["wrong-offset"])])


# ---------------------------------------------------------------------------
# 10. repetition, frequency and presence penalties with per-request token
#     histories: the history's positions over sp (ragged history lengths),
#     the vocabulary over tp; each device scatter-adds the counts of its
#     history slice's tokens that fall in its vocabulary block (mode="drop"
#     for the others), the counts psum'd over sp; CTRL's repetition penalty
#     (divide positive logits, multiply negative ones) on seen tokens, then
#     OpenAI-style frequency and presence penalties.
PN_B, PN_V, PN_L = 4, 32, 16


def penalties(logits, hist, hlen, rp, fp, pp):
    valid = (jnp.arange(PN_L)[None, :] < hlen[:, None]).astype(jnp.float32)
    counts = jnp.zeros((PN_B, PN_V)).at[jnp.arange(PN_B)[:, None], hist].add(valid)
    seen = counts > 0
    l = jnp.where(seen, jnp.where(logits > 0, logits / rp[:, None], logits * rp[:, None]), logits)
    return l - fp[:, None] * counts - pp[:, None] * seen, counts


def penalties_sp_tp(bug):
    def f(logits, hist, hlen, rp, fp, pp):
        b, ll = hist.shape
        vl = logits.shape[-1]
        posn = jnp.arange(ll) + (0 if bug == "hist-len-local-pos" else idx("sp") * ll)
        valid = (posn[None, :] < hlen[:, None]).astype(jnp.float32)
        ids = hist - (0 if bug == "hist-no-vocab-offset" else idx("tp") * vl)
        ids = jnp.where((ids >= 0) & (ids < vl), ids, vl)
        counts = jnp.zeros((b, vl)).at[jnp.arange(b)[:, None], ids].add(valid, mode="drop")
        counts = counts if bug == "hist-not-psummed" else psum(counts, "sp")
        seen = counts > 0
        l = jnp.where(seen, jnp.where(logits > 0, logits / rp[:, None], logits * rp[:, None]), logits)
        return l - fp[:, None] * counts - pp[:, None] * seen, counts
    return f


C.smap("s.rep_freq_penalty_hist_scatter_add.sp4xtp2", {"sp": 4, "tp": 2}, penalties_sp_tp,
       (P(None, "tp"), P(None, "sp"), P(), P(), P(), P()), (P(None, "tp"), P(None, "tp")), penalties,
       (R(PN_B, PN_V, scale=2.0), I(0, PN_V, PN_B, PN_L), np.array([16, 9, 3, 12], np.int32),
        np.array([1.2, 1.5, 1.1, 1.3], np.float32), np.array([0.3, 0.1, 0.5, 0.2], np.float32),
        np.array([0.2, 0.4, 0.1, 0.6], np.float32)),
       bugs=[("hist-not-psummed", ["missing-all-reduce"]), ("hist-no-vocab-offset", ["wrong-offset"]),
             ("hist-len-local-pos", ["wrong-offset"])])


# ---------------------------------------------------------------------------
# 11. one beam-search step, requests over dp, vocabulary and the cache's
#     heads over tp: log-probabilities by a global log-sum-exp, candidate
#     scores normalised by the GNMT length penalty ((5 + n) / 6)^0.6, the
#     top-k over beams x vocabulary (local top-k over the device's flat
#     candidates with global flat indices beam * V + token, all_gather, global
#     top-k), parents and tokens decoded from the flat index, raw scores
#     restored, lengths and the KV cache reordered by the parents.
BM_B, BM_K, BM_V, BM_T, BM_H, BM_E = 2, 4, 32, 8, 4, 4


def lpen(n):
    return ((5.0 + n) / 6.0) ** 0.6


def beam_step(scores, logits, lens, kc, vc):
    cand = (scores[..., None] + jax.nn.log_softmax(logits, -1)) / lpen(lens + 1)[..., None]
    v, i = lax.top_k(cand.reshape(BM_B, BM_K * BM_V), BM_K)
    parent, tok = i // BM_V, i % BM_V
    nl = jnp.take_along_axis(lens, parent, 1) + 1
    re = lambda c: jnp.take_along_axis(c, parent[:, :, None, None, None], 1)
    return v * lpen(nl), tok.astype(jnp.int32), parent.astype(jnp.int32), nl, re(kc), re(vc)


def beam_tp(bug):
    def f(scores, logits, lens, kc, vc):
        b, k, vl = logits.shape
        m = pmax(jnp.max(logits, -1), "tp")
        lse = m + jnp.log(psum(jnp.sum(jnp.exp(logits - m[..., None]), -1), "tp"))
        cand = (scores[..., None] + logits - lse[..., None]) / lpen(lens + 1)[..., None]
        if bug == "flat-index-local-vocab":
            gflat = jnp.arange(k)[:, None] * vl + jnp.arange(vl)[None, :]
        else:
            gflat = jnp.arange(k)[:, None] * BM_V + idx("tp") * vl + jnp.arange(vl)[None, :]
        lv, li = lax.top_k(cand.reshape(b, k * vl), BM_K)
        gi = gflat.reshape(-1)[li]
        av = lax.all_gather(lv, "tp", axis=1, tiled=True)
        ai = lax.all_gather(gi, "tp", axis=1, tiled=True)
        v, j = lax.top_k(av, BM_K)
        i = jnp.take_along_axis(ai, j, 1)
        parent, tok = i // BM_V, i % BM_V
        nl = jnp.take_along_axis(lens, parent, 1) + 1
        src = j % BM_K if bug == "reorder-by-gather-position" else parent
        re = lambda c: jnp.take_along_axis(c, src[:, :, None, None, None], 1)
        return v * lpen(nl), tok.astype(jnp.int32), parent.astype(jnp.int32), nl, re(kc), re(vc)
    return f


bm_cache = P("dp", None, None, "tp")
C.smap("s.beam_step_topk_reorder_cache.dp2xtp4", {"dp": 2, "tp": 4}, beam_tp,
       (P("dp"), P("dp", None, "tp"), P("dp"), bm_cache, bm_cache),
       (P("dp"), P("dp"), P("dp"), P("dp"), bm_cache, bm_cache), beam_step,
       (-np.abs(R(BM_B, BM_K, scale=3.0)), R(BM_B, BM_K, BM_V, scale=2.0), I(3, 7, BM_B, BM_K),
        R(BM_B, BM_K, BM_T, BM_H, BM_E), R(BM_B, BM_K, BM_T, BM_H, BM_E)),
       bugs=[("flat-index-local-vocab", ["wrong-offset"]), ("reorder-by-gather-position", ["wrong-permutation"])])



# ---------------------------------------------------------------------------
# 12. speculative decoding, verification: the target model's logits for the
#     G draft positions and the one after them (vocabulary over tp, so the
#     target probabilities come from a global log-sum-exp, and the target and
#     draft probabilities of each draft token from a masked lookup psum'd),
#     acceptance u < min(1, p / q) with provided uniforms, the number
#     accepted by a cumulative product, the bonus token drawn from the
#     residual max(p - q, 0) at the first rejected position by the
#     exponential race argmax(r / E) (E provided), and the head-sharded KV
#     cache rolled back past the accepted drafts.
SD_B, SD_G, SD_V, SD_T, SD_H, SD_E = 4, 3, 32, 16, 4, 4


def spec_verify(tl, qd, dtok, u, ex, lens, kc):
    p = jax.nn.softmax(tl, -1)
    pt = jnp.take_along_axis(p[:, :SD_G], dtok[..., None], 2)[..., 0]
    qt = jnp.take_along_axis(qd, dtok[..., None], 2)[..., 0]
    acc = (u < jnp.minimum(1.0, pt / qt)).astype(jnp.int32)
    n = jnp.sum(jnp.cumprod(acc, -1), -1)
    qpad = jnp.concatenate([qd, jnp.zeros_like(qd[:, :1])], 1)
    pn = jnp.take_along_axis(p, n[:, None, None], 1)[:, 0]
    qn = jnp.take_along_axis(qpad, n[:, None, None], 1)[:, 0]
    bonus = jnp.argmax(jnp.maximum(pn - qn, 0.0) / ex, -1).astype(jnp.int32)
    g = jnp.arange(SD_G + 1)[None, :]
    out = jnp.where(g < n[:, None], jnp.pad(dtok, ((0, 0), (0, 1))), jnp.where(g == n[:, None], bonus[:, None], -1))
    keep = jnp.arange(SD_T)[None, :] < (lens + n)[:, None]
    return n, out, lens + n + 1, jnp.where(keep[:, :, None, None], kc, 0.0)


def spec_tp(bug):
    def f(tl, qd, dtok, u, ex, lens, kc):
        vl = tl.shape[-1]
        if bug == "target-lse-local":
            p = jax.nn.softmax(tl, -1)
        else:
            m = pmax(jnp.max(tl, -1, keepdims=True), "tp")
            e = jnp.exp(tl - m)
            p = e / psum(jnp.sum(e, -1, keepdims=True), "tp")
        lid = dtok - idx("tp") * vl
        mine = (lid >= 0) & (lid < vl)
        look = lambda a: jnp.where(mine, jnp.take_along_axis(a, jnp.clip(lid, 0, vl - 1)[..., None], 2)[..., 0], 0.0)
        pt = psum(look(p[:, :SD_G]), "tp")
        qt = look(qd) if bug == "draft-prob-not-psummed" else psum(look(qd), "tp")
        acc = (u < jnp.minimum(1.0, pt / qt)).astype(jnp.int32)
        n = jnp.sum(acc, -1) if bug == "accept-count-no-cumprod" else jnp.sum(jnp.cumprod(acc, -1), -1)
        qpad = jnp.concatenate([qd, jnp.zeros_like(qd[:, :1])], 1)
        pn = jnp.take_along_axis(p, n[:, None, None], 1)[:, 0]
        qn = jnp.take_along_axis(qpad, n[:, None, None], 1)[:, 0]
        bonus = dist_argmax(jnp.maximum(pn - qn, 0.0) / ex, "tp")
        g = jnp.arange(SD_G + 1)[None, :]
        out = jnp.where(g < n[:, None], jnp.pad(dtok, ((0, 0), (0, 1))),
                        jnp.where(g == n[:, None], bonus[:, None], -1))
        keep = jnp.arange(SD_T)[None, :] < (lens + n)[:, None]
        return n, out, lens + n + 1, jnp.where(keep[:, :, None, None], kc, 0.0)
    return f


sd_tl = R(SD_B, SD_G + 1, SD_V, scale=2.0)
sd_dl = sd_tl[:, :SD_G] + R(SD_B, SD_G, SD_V, scale=0.8)
sd_q = np.exp(sd_dl - sd_dl.max(-1, keepdims=True))
sd_q = (sd_q / sd_q.sum(-1, keepdims=True)).astype(np.float32)
sd_tok = np.argmax(sd_dl - np.log(-np.log(rng.uniform(1e-6, 1, sd_dl.shape))), -1).astype(np.int32)
C.smap("s.spec_decode_verify_rollback.tp4", {"tp": 4}, spec_tp,
       (P(None, None, "tp"), P(None, None, "tp"), P(), P(), P(None, "tp"), P(), P(None, None, "tp")),
       (P(), P(), P(), P(None, None, "tp")), spec_verify,
       (sd_tl, sd_q, sd_tok, rng.uniform(0, 1, (SD_B, SD_G)).astype(np.float32),
        rng.exponential(1.0, (SD_B, SD_V)).astype(np.float32), np.array([4, 9, 2, 6], np.int32),
        R(SD_B, SD_T, SD_H, SD_E)),
       bugs=[("target-lse-local", ["missing-all-reduce"]), ("draft-prob-not-psummed", ["missing-all-reduce"]),
             ("accept-count-no-cumprod", ["numerics"])])


# ---------------------------------------------------------------------------
# 13. a decode step over an int8 KV cache with per-token, per-head scales
#     (absmax / 127 over the head dim), heads over tp: the new k / v
#     quantised and written with their scales at pos[b], the cache
#     dequantised (codes times the head's scale) inside the attention.
Q8_B, Q8_T, Q8_D, Q8_H, Q8_E = 3, 16, 32, 8, 4


def quant8(a, per_device=False):
    amax = jnp.max(jnp.abs(a), (-2, -1), keepdims=True) if per_device else jnp.max(jnp.abs(a), -1, keepdims=True)
    s = jnp.broadcast_to(amax, a.shape[:-1] + (1,)) / 127.0
    return jnp.clip(jnp.round(a / s), -127, 127).astype(jnp.int8), s[..., 0]


def int8_decode(x, wq, wk, wv, wo, kq, ks, vq, vs, pos):
    q, k, v = rope(proj(x, wq), pos), rope(proj(x, wk), pos), proj(x, wv)
    (k8, k1), (v8, v1) = quant8(k), quant8(v)
    kq, ks, vq, vs = write_at(kq, k8, pos), write_at(ks, k1, pos), write_at(vq, v8, pos), write_at(vs, v1, pos)
    ok = jnp.arange(Q8_T)[None, :] <= pos[:, None]
    o = decode_attn(q, kq.astype(jnp.float32) * ks[..., None], vq.astype(jnp.float32) * vs[..., None], ok)
    return jnp.einsum("bhe,hed->bd", o, wo), kq, ks, vq, vs


def int8_tp(bug):
    def f(x, wq, wk, wv, wo, kq, ks, vq, vs, pos):
        q, k, v = rope(proj(x, wq), pos), rope(proj(x, wk), pos), proj(x, wv)
        (k8, k1), (v8, v1) = (quant8(a, bug == "quant-scale-per-device") for a in (k, v))
        kq, ks, vq, vs = write_at(kq, k8, pos), write_at(ks, k1, pos), write_at(vq, v8, pos), write_at(vs, v1, pos)
        ok = jnp.arange(Q8_T)[None, :] <= pos[:, None]
        if bug == "dequant-first-local-head-scale":
            ks, vs = ks[..., :1], vs[..., :1]
        o = decode_attn(q, kq.astype(jnp.float32) * ks[..., None], vq.astype(jnp.float32) * vs[..., None], ok)
        if bug == "dequant-first-local-head-scale":
            ks, vs = jnp.broadcast_to(ks, kq.shape[:3]), jnp.broadcast_to(vs, vq.shape[:3])
        return psum(jnp.einsum("bhe,hed->bd", o, wo), "tp"), kq, ks, vq, vs
    return f


def int8_cache(b, t, h, e):
    a = R(b, t, h, e)
    s = np.abs(a).max(-1) / 127.0
    return np.clip(np.round(a / s[..., None]), -127, 127).astype(np.int8), s.astype(np.float32)


q8_k, q8_v = int8_cache(Q8_B, Q8_T, Q8_H, Q8_E), int8_cache(Q8_B, Q8_T, Q8_H, Q8_E)
hd = P(None, None, "tp")
C.smap("s.int8_kv_cache_per_head_scales.tp4", {"tp": 4}, int8_tp,
       (P(), P(None, "tp"), P(None, "tp"), P(None, "tp"), P("tp"), hd, hd, hd, hd, P()), (P(), hd, hd, hd, hd),
       int8_decode,
       (R(Q8_B, Q8_D), R(Q8_D, Q8_H, Q8_E, scale=0.3), R(Q8_D, Q8_H, Q8_E, scale=0.3), R(Q8_D, Q8_H, Q8_E, scale=0.3),
        R(Q8_H, Q8_E, Q8_D, scale=0.3), q8_k[0], q8_k[1], q8_v[0], q8_v[1], np.array([6, 13, 1], np.int32)),
       bugs=[("quant-scale-per-device", ["wrong-shard-dim"]), ("dequant-first-local-head-scale", ["wrong-shard-dim"])])


# ---------------------------------------------------------------------------
# 14. int4 weight-only quantised SwiGLU MLP in bf16 (codes in [-8, 7] kept
#     in int8, one f32 scale per group of 8 input rows and output column):
#     gate / up column-parallel over tp with their scales sharded alike, down
#     row-parallel with its codes over tp and its scale table replicated, each
#     device slicing its groups at its offset; bf16 activations with f32
#     accumulation, the down projection's partial sums psum'd in f32.
Q4_B, Q4_D, Q4_F, Q4_G = 4, 32, 64, 8


def deq4(c, s):
    return (c.reshape(-1, Q4_G, c.shape[1]).astype(jnp.float32) * s[:, None, :]).reshape(c.shape).astype(jnp.bfloat16)


def mm(a, w):
    return jnp.dot(a, w, preferred_element_type=jnp.float32)


def int4_mlp(x, gc, gs, uc, us, dc, ds):
    h = (jax.nn.silu(mm(x, deq4(gc, gs))) * mm(x, deq4(uc, us))).astype(jnp.bfloat16)
    return mm(h, deq4(dc, ds)).astype(jnp.bfloat16)


def int4_tp(bug):
    def f(x, gc, gs, uc, us, dc, ds):
        h = (jax.nn.silu(mm(x, deq4(gc, gs))) * mm(x, deq4(uc, us))).astype(jnp.bfloat16)
        gl = dc.shape[0] // Q4_G
        dsl = lax.dynamic_slice_in_dim(ds, 0 if bug == "down-scale-no-tp-offset" else idx("tp") * gl, gl, 0)
        y = mm(h, deq4(dc, dsl))
        return (y if bug == "down-not-psummed" else psum(y, "tp")).astype(jnp.bfloat16)
    return f


def int4_codes(din, dout):
    return rng.integers(-8, 8, (din, dout)).astype(np.int8), (np.abs(R(din // Q4_G, dout)) * 0.02 + 0.01)


q4_g, q4_u, q4_d = int4_codes(Q4_D, Q4_F), int4_codes(Q4_D, Q4_F), int4_codes(Q4_F, Q4_D)
C.smap("s.int4_group_scales_swiglu_bf16.tp4", {"tp": 4}, int4_tp,
       (P(), P(None, "tp"), P(None, "tp"), P(None, "tp"), P(None, "tp"), P("tp"), P()), P(), int4_mlp,
       (R(Q4_B, Q4_D).astype(jnp.bfloat16), q4_g[0], q4_g[1], q4_u[0], q4_u[1], q4_d[0], q4_d[1]),
       bugs=[("down-scale-no-tp-offset", ["wrong-offset"]), ("down-not-psummed", ["missing-all-reduce"])])


# ---------------------------------------------------------------------------
# 15. prefix caching as cascade attention: a pool of shared prefixes'
#     K / V (heads over tp) that several requests point to by prefix id, and
#     each request's own suffix cache (requests over dp); the prefix and
#     suffix parts attended separately and merged by their log-sum-exps
#     (logaddexp), the output projection psum'd. Baseline: one softmax over
#     the concatenated, masked sequence.
PF_N, PF_L, PF_S, PF_B, PF_D, PF_H, PF_E = 3, 8, 8, 4, 32, 4, 8


def prefix_attn(x, wq, wo, pk, pv, plen, pid, sk, sv, slen):
    q = proj(x, wq)
    k, v = jnp.concatenate([pk[pid], sk], 1), jnp.concatenate([pv[pid], sv], 1)
    ok = jnp.concatenate([jnp.arange(PF_L)[None, :] < plen[pid][:, None], jnp.arange(PF_S)[None, :] < slen[:, None]], 1)
    return jnp.einsum("bhe,hed->bd", decode_attn(q, k, v, ok), wo)


def part_attn(q, k, v, ok):
    s = jnp.where(ok[:, None, :], jnp.einsum("bhe,bthe->bht", q, k) / np.sqrt(q.shape[-1]), NEG)
    m = jnp.max(s, -1, keepdims=True)
    e = jnp.exp(s - m)
    l = jnp.sum(e, -1)
    return jnp.einsum("bht,bthe->bhe", e, v) / l[..., None], m[..., 0] + jnp.log(l)


def prefix_cascade(bug):
    def f(x, wq, wo, pk, pv, plen, pid, sk, sv, slen):
        q = proj(x, wq)
        use = jnp.arange(pid.shape[0]) % PF_N if bug == "prefix-by-slot-index" else pid
        o1, l1 = part_attn(q, pk[use], pv[use], jnp.arange(PF_L)[None, :] < plen[use][:, None])
        o2, l2 = part_attn(q, sk, sv, jnp.arange(PF_S)[None, :] < slen[:, None])
        lse = jnp.logaddexp(l1, l2)
        w1, w2 = jnp.exp(l1 - lse)[..., None], jnp.exp(l2 - lse)[..., None]
        o = o1 * w2 + o2 * w1 if bug == "cascade-weights-swapped" else o1 * w1 + o2 * w2
        return psum(jnp.einsum("bhe,hed->bd", o, wo), "tp")
    return f


C.smap("s.prefix_cache_cascade_lse_merge.dp2xtp4", {"dp": 2, "tp": 4}, prefix_cascade,
       (P("dp"), P(None, "tp"), P("tp"), P(None, None, "tp"), P(None, None, "tp"), P(), P("dp"),
        P("dp", None, "tp"), P("dp", None, "tp"), P("dp")), P("dp"), prefix_attn,
       (R(PF_B, PF_D), R(PF_D, PF_H, PF_E, scale=0.4), R(PF_H, PF_E, PF_D, scale=0.3), R(PF_N, PF_L, PF_H, PF_E),
        R(PF_N, PF_L, PF_H, PF_E), np.array([8, 5, 7], np.int32), np.array([2, 2, 0, 1], np.int32),
        R(PF_B, PF_S, PF_H, PF_E), R(PF_B, PF_S, PF_H, PF_E), np.array([3, 8, 1, 6], np.int32)),
       bugs=[("cascade-weights-swapped", ["wrong-permutation"]), ("prefix-by-slot-index", ["wrong-offset"])])


# ---------------------------------------------------------------------------
# 16. multi-LoRA serving (Punica / S-LoRA style): each request names its
#     adapter, whose A and B are gathered from the stacked adapters; the MLP
#     is Megatron-style over tp, so the up projection's B is sliced at the
#     device's column offset and the down projection's A at its row offset,
#     the partial x A of the row-parallel side psum'd before B.
ML_B, ML_T, ML_D, ML_F, ML_N, ML_R, ML_S = 4, 4, 16, 32, 3, 4, 2.0


def lora_mlp(x, aid, w1, a1, b1, w2, a2, b2):
    h = jax.nn.gelu(x @ w1 + ML_S * jnp.einsum("btd,bdr,brf->btf", x, a1[aid], b1[aid]))
    return h @ w2 + ML_S * jnp.einsum("btf,bfr,brd->btd", h, a2[aid], b2[aid])


def lora_tp(bug):
    def f(x, aid, w1, a1, b1, w2, a2, b2):
        fl = w1.shape[1]
        off = idx("tp") * fl
        b1l = lax.dynamic_slice_in_dim(b1, 0 if bug == "lora-b-no-tp-offset" else off, fl, 2)
        a2l = lax.dynamic_slice_in_dim(a2, off, fl, 1)
        h = jax.nn.gelu(x @ w1 + ML_S * jnp.einsum("btd,bdr,brf->btf", x, a1[aid], b1l[aid]))
        xa = jnp.einsum("btf,bfr->btr", h, a2l[aid])
        xa = xa if bug == "lora-a-partial-not-psummed" else psum(xa, "tp")
        return psum(h @ w2, "tp") + ML_S * jnp.einsum("btr,brd->btd", xa, b2[aid])
    return f


ml_args = (R(ML_B, ML_T, ML_D), np.array([1, 0, 2, 1], np.int32), R(ML_D, ML_F, scale=0.3),
           R(ML_N, ML_D, ML_R, scale=0.3), R(ML_N, ML_R, ML_F, scale=0.3), R(ML_F, ML_D, scale=0.3),
           R(ML_N, ML_F, ML_R, scale=0.3), R(ML_N, ML_R, ML_D, scale=0.3))
C.smap("s.multi_lora_per_request_adapters.dp2xtp4", {"dp": 2, "tp": 4}, lora_tp,
       (P("dp"), P("dp"), P(None, "tp"), P(), P(), P("tp"), P(), P()), P("dp"), lora_mlp, ml_args,
       bugs=[("lora-b-no-tp-offset", ["wrong-offset"]), ("lora-a-partial-not-psummed", ["missing-all-reduce"])])


# ---------------------------------------------------------------------------
# 17. chunked prefill into a KV cache at per-request start positions: the
#     chunk's tokens over sp, heads over tp; RoPE at start[b] + the shard's
#     offset + i, the chunk's k / v all_gathered over sp (tiled) and written
#     at start[b], each query attending causally to the cache (earlier
#     chunks included); output projection psum'd over tp.
CP_B, CP_C, CP_T, CP_D, CP_H, CP_E = 2, 8, 24, 32, 4, 8


def chunk_prefill(x, wq, wk, wv, wo, kc, vc, start):
    pos = start[:, None] + jnp.arange(x.shape[1])
    pr = lambda w: jnp.einsum("btd,dhe->bthe", x, w)
    q, k, v = rope(pr(wq), pos), rope(pr(wk), pos), pr(wv)
    kc, vc = write_chunk(kc, k, start), write_chunk(vc, v, start)
    ok = jnp.arange(CP_T)[None, None, :] <= pos[:, :, None]
    s = jnp.where(ok[:, None], jnp.einsum("bqhe,bkhe->bhqk", q, kc) / np.sqrt(CP_E), NEG)
    o = jnp.einsum("bhqk,bkhe->bqhe", jax.nn.softmax(s, -1), vc)
    return jnp.einsum("bqhe,hed->bqd", o, wo), kc, vc


def chunk_prefill_sp_tp(bug):
    def f(x, wq, wk, wv, wo, kc, vc, start):
        cl = x.shape[1]
        pos = start[:, None] + (0 if bug == "rope-no-shard-offset" else idx("sp") * cl) + jnp.arange(cl)
        pr = lambda w: jnp.einsum("btd,dhe->bthe", x, w)
        q, k, v = rope(pr(wq), pos), rope(pr(wk), pos), pr(wv)
        if bug == "kv-gather-untiled-reshape":
            gat = lambda a: lax.all_gather(a, "sp").reshape(a.shape[0], -1, *a.shape[2:])
        else:
            gat = lambda a: lax.all_gather(a, "sp", axis=1, tiled=True)
        at = jnp.zeros_like(start) if bug == "chunk-written-at-zero" else start
        kc, vc = write_chunk(kc, gat(k), at), write_chunk(vc, gat(v), at)
        ok = jnp.arange(CP_T)[None, None, :] <= pos[:, :, None]
        s = jnp.where(ok[:, None], jnp.einsum("bqhe,bkhe->bhqk", q, kc) / np.sqrt(CP_E), NEG)
        o = jnp.einsum("bhqk,bkhe->bqhe", jax.nn.softmax(s, -1), vc)
        return psum(jnp.einsum("bqhe,hed->bqd", o, wo), "tp"), kc, vc
    return f


C.smap("s.chunked_prefill_rope_cache_write.sp2xtp4", {"sp": 2, "tp": 4}, chunk_prefill_sp_tp,
       (P(None, "sp"), P(None, "tp"), P(None, "tp"), P(None, "tp"), P("tp"), hd, hd, P()), (P(None, "sp"), hd, hd),
       chunk_prefill,
       (R(CP_B, CP_C, CP_D), R(CP_D, CP_H, CP_E, scale=0.3), R(CP_D, CP_H, CP_E, scale=0.3),
        R(CP_D, CP_H, CP_E, scale=0.3), R(CP_H, CP_E, CP_D, scale=0.3), R(CP_B, CP_T, CP_H, CP_E),
        R(CP_B, CP_T, CP_H, CP_E), np.array([5, 12], np.int32)),
       bugs=[("rope-no-shard-offset", ["wrong-offset"]), ("kv-gather-untiled-reshape", ["wrong-reshape-order"]),
             ("chunk-written-at-zero", ["wrong-offset"])])


# ---------------------------------------------------------------------------
# 18. multi-LoRA fine-tuning step (check_vma=True): the frozen base MLP over
#     tp, a batch mixing requests of three adapters over dp; only the stacked
#     adapters are trained (Adam), B sliced at the device's column offset
#     inside the loss, the loss pmean'd over dp (the type system psums the
#     adapters' gradients over both axes).
lt_opt = optax.adam(1e-2)


def lora_fwd(lora, w1, w2, x, aid, b1=None):
    b1 = lora["b1"] if b1 is None else b1
    h = jax.nn.gelu(x @ w1 + ML_S * jnp.einsum("btd,bdr,brf->btf", x, lora["a1"][aid], b1[aid]))
    return h @ w2


def lora_train_step(lora, st, w1, w2, x, aid, y):
    lv, g = jax.value_and_grad(lambda lo: mse(lora_fwd(lo, w1, w2, x, aid), y))(lora)
    u, st = lt_opt.update(g, st, lora)
    return optax.apply_updates(lora, u), st, lv


def lora_train_vma(bug):
    def f(lora, st, w1, w2, x, aid, y):
        def loss(lo):
            fl = w1.shape[1]
            b1l = lax.dynamic_slice_in_dim(lo["b1"], 0 if bug == "lora-b-no-tp-offset" else idx("tp") * fl, fl, 2)
            out = psum(lora_fwd(lo, w1, w2, x, aid, b1l), "tp")
            return (psum if bug == "loss-psum-not-pmean" else pmean)(mse(out, y), "dp")
        lv, g = jax.value_and_grad(loss)(lora)
        u, st = lt_opt.update(g, st, lora)
        return optax.apply_updates(lora, u), st, lv
    return f


lt_lora = {"a1": R(ML_N, ML_D, ML_R, scale=0.3), "b1": R(ML_N, ML_R, ML_F, scale=0.3)}
lt_rep = {k: P() for k in lt_lora}
lt_st = np_tree(lt_opt.init(lt_lora))
C.smap("s.multi_lora_adam_step_vma.dp2xtp4", {"dp": 2, "tp": 4}, lora_train_vma,
       (lt_rep, state_specs(lt_st, lt_rep), P(None, "tp"), P("tp"), P("dp"), P("dp"), P("dp")),
       (lt_rep, state_specs(lt_st, lt_rep), P()), lora_train_step,
       (lt_lora, lt_st, R(ML_D, ML_F, scale=0.3), R(ML_F, ML_D, scale=0.3), R(ML_B, ML_T, ML_D),
        np.array([2, 0, 1, 2], np.int32), R(ML_B, ML_T, ML_D, scale=0.5)), check_vma=True,
       bugs=[("lora-b-no-tp-offset", ["wrong-offset"]), ("loss-psum-not-pmean", ["wrong-collective-op"])])


# ---------------------------------------------------------------------------
# 19. distilling a speculative-decoding draft head into the target's
#     distribution (check_vma=True): the draft LM head and the target's
#     logits over a vocabulary sharded over tp, KL(target || draft) at
#     temperature 2 from global log-sum-exps (maxima under stop_gradient,
#     pmax then psum), the per-request KL psum'd over tp; Adam on the head.
DS_B, DS_D, DS_V, DS_TAU = 4, 16, 64, 2.0
ds_opt = optax.adam(5e-3)


def kl_loss(wd, h, tl):
    lt = jax.nn.log_softmax(tl / DS_TAU, -1)
    ld = jax.nn.log_softmax((h @ wd) / DS_TAU, -1)
    return jnp.mean(jnp.sum(jnp.exp(lt) * (lt - ld), -1))


def distill_step(wd, st, h, tl):
    lv, g = jax.value_and_grad(kl_loss)(wd, h, tl)
    u, st = ds_opt.update(g, st, wd)
    return optax.apply_updates(wd, u), st, lv


def distill_vma(bug):
    def glse(z, local=False):
        m = lax.stop_gradient(jnp.max(z, -1, keepdims=True))
        if local:
            return m + jnp.log(jnp.sum(jnp.exp(z - m), -1, keepdims=True))
        m = pmax(m, "tp")
        return m + jnp.log(psum(jnp.sum(jnp.exp(z - m), -1, keepdims=True), "tp"))

    def f(wd, st, h, tl):
        def loss(wd):
            zt, zd = tl / DS_TAU, (h @ wd) / DS_TAU
            lt = zt - glse(zt)
            ld = zd - glse(zd, bug == "draft-lse-local")
            kl = jnp.sum(jnp.exp(lt) * (lt - ld), -1)
            return jnp.mean((pmean if bug == "kl-pmean-over-tp" else psum)(kl, "tp"))
        lv, g = jax.value_and_grad(loss)(wd)
        u, st = ds_opt.update(g, st, wd)
        return optax.apply_updates(wd, u), st, lv
    return f


ds_w = R(DS_D, DS_V, scale=0.3)
ds_st = np_tree(ds_opt.init(ds_w))
ds_ss = jax.tree.map(lambda a: P(None, "tp") if np.ndim(a) == 2 else P(), ds_st)
C.smap("s.draft_head_distill_kl_adam_vma.tp4", {"tp": 4}, distill_vma, (P(None, "tp"), ds_ss, P(), P(None, "tp")),
       (P(None, "tp"), ds_ss, P()), distill_step, (ds_w, ds_st, R(DS_B, DS_D), R(DS_B, DS_V, scale=3.0)),
       check_vma=True, bugs=[("draft-lse-local", ["missing-all-reduce"]), ("kl-pmean-over-tp", ["wrong-collective-op"])])


# ---------------------------------------------------------------------------
# 20. a greedy generation loop (lax.fori_loop, three tokens) over a tied
#     vocabulary-sharded embedding, heads over tp: the token's embedding by a
#     masked lookup of the device's rows psum'd, one attention layer writing
#     its head-sharded cache at each request's position, the tied LM head's
#     local logits and the argmax across tp, fed back as the next token.
GL_B, GL_V, GL_D, GL_H, GL_E, GL_T, GL_N = 3, 32, 16, 4, 4, 12, 3


def gen_layer(x, wq, wk, wv, wo, kc, vc, pos, reduce):
    q, k, v = rope(proj(x, wq), pos), rope(proj(x, wk), pos), proj(x, wv)
    kc, vc = write_at(kc, k, pos), write_at(vc, v, pos)
    ok = jnp.arange(GL_T)[None, :] <= pos[:, None]
    return x + reduce(jnp.einsum("bhe,hed->bd", decode_attn(q, kc, vc, ok), wo)), kc, vc


def greedy_generate(emb, wq, wk, wv, wo, kc, vc, tok, pos):
    def body(i, c):
        tok, pos, kc, vc, out = c
        h, kc, vc = gen_layer(emb[tok], wq, wk, wv, wo, kc, vc, pos, lambda a: a)
        tok = jnp.argmax(h @ emb.T, -1).astype(jnp.int32)
        return tok, pos + 1, kc, vc, out.at[:, i].set(tok)
    _, _, kc, vc, out = lax.fori_loop(0, GL_N, body, (tok, pos, kc, vc, jnp.zeros((GL_B, GL_N), jnp.int32)))
    return out, kc, vc


def generate_tp(bug):
    def f(emb, wq, wk, wv, wo, kc, vc, tok, pos):
        vl = emb.shape[0]

        def embed(t):
            loc = t - (0 if bug == "embed-lookup-no-offset" else idx("tp") * vl)
            ok = (loc >= 0) & (loc < vl)
            return psum(jnp.where(ok[:, None], emb[jnp.clip(loc, 0, vl - 1)], 0.0), "tp")

        def body(i, c):
            tok, pos, kc, vc, out = c
            h, kc, vc = gen_layer(embed(tok), wq, wk, wv, wo, kc, vc, pos, lambda a: psum(a, "tp"))
            z = h @ emb.T
            if bug == "argmax-local-shard":
                tok = (jnp.argmax(z, -1) + idx("tp") * vl).astype(jnp.int32)
            else:
                tok = dist_argmax(z, "tp")
            return tok, pos + 1, kc, vc, out.at[:, i].set(tok)
        _, _, kc, vc, out = lax.fori_loop(0, GL_N, body, (tok, pos, kc, vc, jnp.zeros((GL_B, GL_N), jnp.int32)))
        return out, kc, vc
    return f


C.smap("s.greedy_generate_loop_tied_embed.tp4", {"tp": 4}, generate_tp,
       (P("tp"), P(None, "tp"), P(None, "tp"), P(None, "tp"), P("tp"), hd, hd, P(), P()), (P(), hd, hd),
       greedy_generate,
       (R(GL_V, GL_D), R(GL_D, GL_H, GL_E, scale=0.4), R(GL_D, GL_H, GL_E, scale=0.4), R(GL_D, GL_H, GL_E, scale=0.4),
        R(GL_H, GL_E, GL_D, scale=0.4), R(GL_B, GL_T, GL_H, GL_E), R(GL_B, GL_T, GL_H, GL_E),
        np.array([5, 17, 30], np.int32), np.array([2, 6, 4], np.int32)),
       bugs=[("embed-lookup-no-offset", ["wrong-offset"]), ("argmax-local-shard", ["missing-collective"])])



# ===========================================================================
# Under GSPMD: the same serving math under jax.jit with in / out shardings.
def wsc(mesh, a, *spec):
    return lax.with_sharding_constraint(a, NamedSharding(make_mesh(mesh), P(*spec)))


# 21. the decode step of 1. with requests over dp and heads over tp (the
#     per-request dynamic_update_slice of the cache left to the partitioner).
C.gspmd("g.decode_ragged_cache_write.dp2xtp4", {"dp": 2, "tp": 4},
        (P("dp"), P(None, "tp"), P(None, "tp"), P(None, "tp"), P("tp"), P("dp", None, "tp"), P("dp", None, "tp"),
         P("dp")), (P("dp"), P("dp", None, "tp"), P("dp", None, "tp")), decode_step,
        (R(D1_B, D1_D), R(D1_D, D1_H, D1_E, scale=0.3), R(D1_D, D1_H, D1_E, scale=0.3),
         R(D1_D, D1_H, D1_E, scale=0.3), R(D1_H, D1_E, D1_D, scale=0.3), R(D1_B, D1_T, D1_H, D1_E),
         R(D1_B, D1_T, D1_H, D1_E), np.array([9, 0, 15, 4], np.int32)))

# 22. paged attention (5.) with the page pool sharded over pages: the
#     scatter of the new entry and the block-table gather from a sharded pool.
C.gspmd("g.paged_attn_pool_pages_sharded.sp4", {"sp": 4}, (P(), P(), P(), P("sp"), P("sp"), P(), P()),
        (P(), P("sp"), P("sp")), paged_pool_decode,
        (R(PG_B, PG_H, PG_E, scale=2.0), R(PG_B, PG_H, PG_E), R(PG_B, PG_H, PG_E), R(PS5_NP, PG_PS, PG_H, PG_E),
         R(PS5_NP, PG_PS, PG_H, PG_E), pg_table, np.array([13, 2, 10], np.int32)))

# 23. top-k / top-p sampling (8.) on a vocabulary sharded over tp8 (lax.top_k,
#     log-sum-exp and cumsum over the sharded vocabulary).
C.gspmd("g.topk_topp_sample_vocab.tp8", {"tp": 8}, (P(None, "tp"), P(), P(), P()), (P(), P()), topk_topp,
        (R(TK_B, TK_V, scale=2.0), np.array([1.1, 0.6, 1.0, 0.8], np.float32),
         np.array([0.8, 0.4, 0.95, 0.6], np.float32), rng.uniform(0, 1, TK_B).astype(np.float32)))

# 24. the beam-search step of 11. (top-k over beams x a sharded vocabulary,
#     the cache reordered by take_along_axis), requests over dp.
C.gspmd("g.beam_step_topk_reorder_cache.dp2xtp4", {"dp": 2, "tp": 4},
        (P("dp"), P("dp", None, "tp"), P("dp"), bm_cache, bm_cache), (P("dp"), P("dp"), P("dp"), P("dp"), bm_cache,
                                                                       bm_cache), beam_step,
        (-np.abs(R(BM_B, BM_K, scale=3.0)), R(BM_B, BM_K, BM_V, scale=2.0), I(2, 9, BM_B, BM_K),
         R(BM_B, BM_K, BM_T, BM_H, BM_E), R(BM_B, BM_K, BM_T, BM_H, BM_E)))

# 25. speculative verification and rollback (12.), target and draft
#     distributions and the noise sharded over the vocabulary, the cache over
#     heads.
C.gspmd("g.spec_decode_verify_rollback.tp4", {"tp": 4},
        (P(None, None, "tp"), P(None, None, "tp"), P(), P(), P(None, "tp"), P(), P(None, None, "tp")),
        (P(), P(), P(), P(None, None, "tp")), spec_verify,
        (sd_tl, sd_q, sd_tok, rng.uniform(0, 1, (SD_B, SD_G)).astype(np.float32),
         rng.exponential(1.0, (SD_B, SD_V)).astype(np.float32), np.array([1, 7, 5, 3], np.int32),
         R(SD_B, SD_T, SD_H, SD_E)))

# 26. the int8 KV-cache decode step (13.) with the cache and its scales
#     sharded over the sequence (sp) and the projections replicated.
q8b_k, q8b_v = int8_cache(Q8_B, Q8_T, Q8_H, Q8_E), int8_cache(Q8_B, Q8_T, Q8_H, Q8_E)
C.gspmd("g.int8_kv_cache_seq_sharded.sp4", {"sp": 4},
        (P(), P(), P(), P(), P(), P(None, "sp"), P(None, "sp"), P(None, "sp"), P(None, "sp"), P()),
        (P(), P(None, "sp"), P(None, "sp"), P(None, "sp"), P(None, "sp")), int8_decode,
        (R(Q8_B, Q8_D), R(Q8_D, Q8_H, Q8_E, scale=0.3), R(Q8_D, Q8_H, Q8_E, scale=0.3),
         R(Q8_D, Q8_H, Q8_E, scale=0.3), R(Q8_H, Q8_E, Q8_D, scale=0.3), q8b_k[0], q8b_k[1], q8b_v[0], q8b_v[1],
         np.array([15, 3, 8], np.int32)))

# 27. the int4 group-quantised bf16 SwiGLU (14.), codes and scales of each
#     weight sharded alike (down's rows and scale groups over tp), batch over dp.
C.gspmd("g.int4_group_scales_swiglu_bf16.dp2xtp4", {"dp": 2, "tp": 4},
        (P("dp"), P(None, "tp"), P(None, "tp"), P(None, "tp"), P(None, "tp"), P("tp"), P("tp")), P("dp"), int4_mlp,
        (R(Q4_B, Q4_D).astype(jnp.bfloat16), q4_g[0], q4_g[1], q4_u[0], q4_u[1], q4_d[0], q4_d[1]))


# 28. a multi-LoRA AdamW step whose stacked adapters are sharded over tp (A
#     of the down projection over its rows, B of the up projection over its
#     columns), the frozen base MLP over tp, requests over dp, the hidden
#     activations constrained over (dp, tp).
la_opt = optax.adamw(5e-3, weight_decay=0.01)


def lora_mlp_loss(lora, w1, w2, x, aid, y):
    h = jax.nn.gelu(x @ w1 + ML_S * jnp.einsum("btd,bdr,brf->btf", x, lora["a1"][aid], lora["b1"][aid]))
    h = wsc({"dp": 2, "tp": 4}, h, "dp", None, "tp")
    out = h @ w2 + ML_S * jnp.einsum("btf,bfr,brd->btd", h, lora["a2"][aid], lora["b2"][aid])
    return mse(out, y)


def lora_adamw_step(lora, st, w1, w2, x, aid, y):
    lv, g = jax.value_and_grad(lora_mlp_loss)(lora, w1, w2, x, aid, y)
    u, st = la_opt.update(g, st, lora)
    return optax.apply_updates(lora, u), st, lv


la_lora = {"a1": R(ML_N, ML_D, ML_R, scale=0.3), "b1": R(ML_N, ML_R, ML_F, scale=0.3),
           "a2": R(ML_N, ML_F, ML_R, scale=0.3), "b2": R(ML_N, ML_R, ML_D, scale=0.3)}
la_ps = {"a1": P(), "b1": P(None, None, "tp"), "a2": P(None, "tp"), "b2": P()}
la_st = np_tree(la_opt.init(la_lora))
C.gspmd("g.multi_lora_adamw_adapters_tp.dp2xtp4", {"dp": 2, "tp": 4},
        (la_ps, state_specs(la_st, la_ps), P(None, "tp"), P("tp"), P("dp"), P("dp"), P("dp")),
        (la_ps, state_specs(la_st, la_ps), P()), lora_adamw_step,
        (la_lora, la_st, R(ML_D, ML_F, scale=0.3), R(ML_F, ML_D, scale=0.3), R(ML_B, ML_T, ML_D),
         np.array([0, 2, 2, 1], np.int32), R(ML_B, ML_T, ML_D, scale=0.5)))


# 29. a serving sampler: penalties from per-request histories (10., the
#     histogram by scatter-add), then per-request temperature, min-p and a
#     Gumbel-max draw with provided noise; requests over dp, the vocabulary
#     over tp (the penalised logits constrained there).
def penalised_minp(logits, hist, hlen, rp, fp, pp, temp, min_p, g):
    l, _ = penalties(logits, hist, hlen, rp, fp, pp)
    l = wsc({"dp": 2, "tp": 4}, l, "dp", "tp")
    return minp_sample(l, temp, min_p, g)


C.gspmd("g.penalties_then_minp_sample.dp2xtp4", {"dp": 2, "tp": 4},
        (P("dp", "tp"), P("dp"), P("dp"), P("dp"), P("dp"), P("dp"), P("dp"), P("dp"), P("dp", "tp")),
        (P("dp"), P("dp")), penalised_minp,
        (R(PN_B, PN_V, scale=2.0), I(0, PN_V, PN_B, PN_L), np.array([10, 16, 4, 7], np.int32),
         np.array([1.3, 1.1, 1.6, 1.2], np.float32), np.array([0.2, 0.4, 0.1, 0.3], np.float32),
         np.array([0.3, 0.0, 0.5, 0.2], np.float32), np.array([0.9, 1.2, 0.7, 1.0], np.float32),
         np.array([0.1, 0.05, 0.2, 0.02], np.float32),
         -np.log(-np.log(rng.uniform(1e-6, 1.0, (PN_B, PN_V)))).astype(np.float32)))

# 30. the draft-head distillation step (19.) with requests over dp and the
#     vocabulary over tp.
ds_st2 = np_tree(ds_opt.init(ds_w))
C.gspmd("g.draft_head_distill_kl_adam.dp2xtp4", {"dp": 2, "tp": 4}, (P(None, "tp"), ds_ss, P("dp"), P("dp", "tp")),
        (P(None, "tp"), ds_ss, P()), distill_step, (ds_w, ds_st2, R(DS_B, DS_D), R(DS_B, DS_V, scale=3.0)))

# 31. prefix-cached attention (15.) written the single-device way (shared
#     prefixes gathered by id and concatenated with each request's suffix),
#     prefix pool and suffix caches over heads, requests over dp.
C.gspmd("g.prefix_cache_concat_attn.dp2xtp4", {"dp": 2, "tp": 4},
        (P("dp"), P(None, "tp"), P("tp"), P(None, None, "tp"), P(None, None, "tp"), P(), P("dp"),
         P("dp", None, "tp"), P("dp", None, "tp"), P("dp")), P("dp"), prefix_attn,
        (R(PF_B, PF_D), R(PF_D, PF_H, PF_E, scale=0.4), R(PF_H, PF_E, PF_D, scale=0.3), R(PF_N, PF_L, PF_H, PF_E),
         R(PF_N, PF_L, PF_H, PF_E), np.array([6, 8, 3], np.int32), np.array([1, 0, 1, 2], np.int32),
         R(PF_B, PF_S, PF_H, PF_E), R(PF_B, PF_S, PF_H, PF_E), np.array([8, 2, 5, 1], np.int32)))

# 32. multi-query decode (4 query heads, one kv head) over a cache sharded
#     over the sequence (sp8): RoPE at per-request positions, the new entry
#     written by dynamic_update_slice into the sharded cache, the softmax over
#     the sharded sequence left to the partitioner.
MQ_B, MQ_T, MQ_D, MQ_H, MQ_E = 2, 32, 16, 4, 8


def mqa_decode(x, wq, wk, wv, wo, kc, vc, pos):
    q = rope(proj(x, wq), pos)
    kc, vc = write_at(kc, rope((x @ wk)[:, None], pos), pos), write_at(vc, (x @ wv)[:, None], pos)
    s = jnp.einsum("bhe,bte->bht", q, kc[:, :, 0]) / np.sqrt(MQ_E)
    s = jnp.where((jnp.arange(MQ_T)[None, :] <= pos[:, None])[:, None], s, NEG)
    o = jnp.einsum("bht,bte->bhe", jax.nn.softmax(s, -1), vc[:, :, 0])
    return jnp.einsum("bhe,hed->bd", o, wo), kc, vc


C.gspmd("g.mqa_decode_seq_sharded_cache.sp8", {"sp": 8},
        (P(), P(), P(), P(), P(), P(None, "sp"), P(None, "sp"), P()), (P(), P(None, "sp"), P(None, "sp")),
        mqa_decode,
        (R(MQ_B, MQ_D), R(MQ_D, MQ_H, MQ_E, scale=0.4), R(MQ_D, MQ_E, scale=0.4), R(MQ_D, MQ_E, scale=0.4),
         R(MQ_H, MQ_E, MQ_D, scale=0.3), R(MQ_B, MQ_T, 1, MQ_E), R(MQ_B, MQ_T, 1, MQ_E), np.array([21, 6], np.int32)))


# ---------------------------------------------------------------------------
C.finish()
