"""samples/fresh16: DOCSTRING (filled in at the end)."""
import sys
import numpy as np
import jax, jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec as P
import optax
sys.path.insert(0, "samples/gen")  # run from the repository root (run_fresh16.sh)
from fresh_lib import Corpus, seeded, mse, np_tree, state_specs  # noqa: E402

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
C.finish()
