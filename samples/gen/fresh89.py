"""samples/fresh89: an 89th batch of programs as a user writes them, on the theme of protein structure and pair-representation models (AlphaFold / Evoformer style, tiny sizes) under sharding in current JAX / optax, none of them an idiom of samples/fresh .. fresh26, probe, train or wild.
Pair representations z (N, N, C) with N = 16 residues, MSAs (S, N, Cm).
shard_map families:
 1. triangle multiplicative update, outgoing edges, rows over sp4: gated
    projections a, b of the layer-normed pair; b all_gather'd over rows;
    t_ij = sum_k a_ik b_jk. Bugs: incoming einsum on the gathered b
    (b_kj), b gathered untiled and reshaped in the wrong order.
 2. triangle multiplicative update, incoming edges, rows over sp4: the
    local rows are the contracted k; partial (N, N) product psum_scatter'd
    over rows. Bugs: outgoing einsum (the correct code of 1.), no reduction
    (own rows of the local partial), psum then the first rows.
 3. incoming update on a 2-D mesh r2 x c4 (i over r, j over c): a's columns
    all_gather'd over c, the product over the local k rows psum_scatter'd
    over r. Bugs: no reduction over the contracted residue dim, psum then
    rows at offset 0.
 4. outgoing update on r4 x c2: b's rows all_gather'd over r (the
    transposed block), the product over the local k columns psum_scatter'd
    over c along j. Bugs: no reduction, psum then columns at offset 0.
 5. triangle attention around the starting node, rows over sp4: q, k, v of
    a row are local, the pair bias b_jk all_gather'd. Bugs: transposed bias
    (b_kj), the bias gathered untiled and reshaped in the wrong order.
 6. triangle attention around the ending node, rows over sp4: keys and
    values of all rows gathered, the bias b_ki taken as the columns of the
    gathered bias at the own row offset. Bugs: bias from the local
    (untransposed) block b_ik, columns at offset 0.
 7. outer-product mean, MSA over sequences (sp4): sum over local
    sequences, psum, divide by S, linear + bias. Bugs: divided by the local
    sequence count, no psum, bias added before the psum.
 8. MSA column attention (gated), batch over dp2, sequences over sp4: keys
    and values all_gather'd over sequences. Bugs: softmax over the local
    sequences only, pmean of local attention outputs.
 9. MSA row attention with pair bias, residues over sp4 (MSA columns and
    pair rows): keys/values gathered along residues, bias from the local
    pair rows. Bugs: bias from the gathered pair transposed, keys gathered
    untiled and reshaped in the wrong order.
10. distogram loss, pair logits on r4 x c2 with 2-D offsets, distances
    from replicated CB coordinates, 12 bins, residue mask; masked mean as
    psum / psum. Bugs: column offset from the r index, pmean of local
    means, loss psum'd over r only.
11. training step of a tiny pair block (outgoing triangle update +
    transition + distogram head) on dp2 x sp4, jax.grad of the local loss
    inside the body, gradients psum'd over (dp, sp), optax.sgd with
    momentum. Bugs: gradients pmean'd (scaled by 1/8), gradients psum'd
    over sp only.
12. outgoing update with b's row blocks passed around a ring (ppermute
    inside a lax.fori_loop, column blocks written by
    dynamic_update_slice). Bugs: ring turned the wrong way, column block
    written at the own offset.
13. incoming update in bf16 with f32 accumulation (preferred_element_type),
    psum_scatter over rows. Bugs: the scattered rows taken from the
    neighbour (ppermute), scattered then all_gather'd and rows at offset 0.
14. outer-product mean with the pair's rows psum_scatter'd (MSA over
    sequences, pair rows over sp4). Bugs: pmean then own rows, bias / 4.
15. MSA column attention with queries gathered and keys / values local,
    the softmax merged by pmax of the maxima and psum of numerators and
    denominators. Bugs: local maxima, denominator not psum'd.
16. relative-position one-hot (clipped i - j) added to the pair on r2xc4
    with 2-D index offsets (jnp.take of the embedding). Bugs: column
    offset from the r index, j - i.
17. two recycling iterations of the outgoing update in lax.scan. Bug: b
    gathered once before the loop (stale).
18. lDDT-style per-residue score, predicted coordinates over residues
    (all_gather'd), true coordinates replicated, self excluded by global
    index. Bugs: self excluded by the local index, rows at offset 0.
19. triangle attention around the starting node on r2xc4: keys / values
    gathered over c, the bias b_jk from the fully gathered bias at the
    rows of the own column block. Bugs: bias rows at the r offset,
    softmax over the local keys only.
20. pair transition, hidden units over c (column / row parallel), rows
    over r, r4xc2. Bugs: bias added before the psum, pmean.
21. masked-MSA loss and its gradient w.r.t. the logits, sequences over
    sp4, check_vma=True, jax.value_and_grad in the body. Bugs: local mask
    count, the gradient psum'd.
22. gradients of the outer-product mean's weights (jax.grad in the body,
    psum'd). Bugs: one gradient not reduced, pmean.
23. distogram targets by jnp.searchsorted, rows and coordinates over sp4.
    Bug: the row coordinates taken at offset 0.
24. outer-product mean in bf16 reduced by psum_scatter along j then
    all_gather'd (replicated pair). Bug: gathered along the wrong dim.
GSPMD pairs: 25. outgoing + incoming triangle updates with z over
P("r", "c") on r2xc4; 26. the outer-product mean with the MSA over
sequences (sp4); 27. triangle attention around the ending node, rows over
sp4; 28. the distogram loss and its gradient with logits over (r, c) on
r4xc2; 29. MSA row attention with pair bias, batch over dp, MSA rows over
sp (dp2xsp4); 30. MSA column attention (dp2xsp4); 31. recycled outgoing
update in lax.scan (sp4); 32. gradients of the outgoing update's weights
with z over (r, c) on r4xc2; 33. pair transition with Megatron shardings
(r4xc2); 34. triangle attention around the starting node on r2xc4.
Numerics: see the manifest ("numerics").
Run from the repository root: bash samples/gen/run_fresh89.sh [SUBSTR...]
"""
import sys
import numpy as np
import jax, jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec as P
import optax
sys.path.insert(0, "samples/gen")
from fresh_lib import Corpus, seeded  # noqa: E402

SCRIPT = "samples/gen/fresh89.py"
C = Corpus("samples/fresh89", SCRIPT, "samples/gen/run_fresh89.sh", sys.argv[1:])
rng, R, I = seeded(8989)
psum, pmean, idx = lax.psum, lax.pmean, lax.axis_index
NR, CZ, NS, CM, NH, HD = 16, 8, 8, 8, 2, 4


def ln(x, eps=1e-5):
    mu = x.mean(-1, keepdims=True)
    return (x - mu) * lax.rsqrt(jnp.mean(jnp.square(x - mu), -1, keepdims=True) + eps)


def gate_proj(z, wa, wb, wg):
    x = ln(z)
    g = jax.nn.sigmoid(x @ wg)
    return g * (x @ wa), g * (x @ wb)


def tri_out(z, wa, wb, wg, wo):
    a, b = gate_proj(z, wa, wb, wg)
    t = jnp.einsum("ikc,jkc->ijc", a, b)
    return z + ln(t) @ wo


def tri_in(z, wa, wb, wg, wo):
    a, b = gate_proj(z, wa, wb, wg)
    t = jnp.einsum("kic,kjc->ijc", a, b)
    return z + ln(t) @ wo


def tri_w():
    return (R(CZ, CZ, scale=0.4), R(CZ, CZ, scale=0.4), R(CZ, CZ, scale=0.4), R(CZ, CZ, scale=0.4))


Z = R(NR, NR, CZ)
W4 = (P(),) * 4

# 1. outgoing, rows over sp4


def tri_out_sm(bug):
    def f(z, wa, wb, wg, wo):
        a, b = gate_proj(z, wa, wb, wg)
        if bug == "untiled-wrong-order":
            g = lax.all_gather(b, "sp", axis=0)             # (4, n, N, C)
            bf = jnp.swapaxes(g, 0, 1).reshape(NR, NR, CZ)
        else:
            bf = lax.all_gather(b, "sp", axis=0, tiled=True)
        if bug == "incoming-einsum":
            t = jnp.einsum("ikc,kjc->ijc", a, bf)
        else:
            t = jnp.einsum("ikc,jkc->ijc", a, bf)
        return z + ln(t) @ wo
    return f


C.smap("s.tri_mul_outgoing_gather_rows.sp4", {"sp": 4}, tri_out_sm, (P("sp"),) + W4, P("sp"), tri_out,
       (Z,) + tri_w(),
       bugs=[("incoming-einsum", ["wrong-operand"]), ("untiled-wrong-order", ["wrong-reshape-order"])])

# 2. incoming, rows over sp4: local rows are the contracted k


def tri_in_sm(bug):
    def f(z, wa, wb, wg, wo):
        a, b = gate_proj(z, wa, wb, wg)
        n = z.shape[0]
        if bug == "outgoing-einsum":
            t = jnp.einsum("ikc,jkc->ijc", a, lax.all_gather(b, "sp", axis=0, tiled=True))
        else:
            part = jnp.einsum("kic,kjc->ijc", a, b)           # (N, N, C) over the local k
            if bug == "no-reduce":
                t = lax.dynamic_slice_in_dim(part, idx("sp") * n, n, 0)
            elif bug == "psum-first-rows":
                t = psum(part, "sp")[:n]
            else:
                t = lax.psum_scatter(part, "sp", scatter_dimension=0, tiled=True)
        return z + ln(t) @ wo
    return f


C.smap("s.tri_mul_incoming_psum_scatter.sp4", {"sp": 4}, tri_in_sm, (P("sp"),) + W4, P("sp"), tri_in,
       (R(NR, NR, CZ),) + tri_w(),
       bugs=[("outgoing-einsum", ["wrong-operand"]), ("no-reduce", ["missing-all-reduce"]),
             ("psum-first-rows", ["wrong-offset"])])

# 3. incoming on r2 x c4


def tri_in_2d_sm(bug):
    def f(z, wa, wb, wg, wo):
        a, b = gate_proj(z, wa, wb, wg)                       # a[K_r, J_c]
        n = z.shape[0]
        a_rows = lax.all_gather(a, "c", axis=1, tiled=True)  # a[K_r, all i]
        part = jnp.einsum("kic,kjc->ijc", a_rows, b)          # (N, J_c)
        if bug == "no-reduce":
            t = lax.dynamic_slice_in_dim(part, idx("r") * n, n, 0)
        elif bug == "psum-rows-offset-zero":
            t = lax.dynamic_slice_in_dim(psum(part, "r"), 0, n, 0)
        else:
            t = lax.psum_scatter(part, "r", scatter_dimension=0, tiled=True)
        return z + ln(t) @ wo
    return f


C.smap("s.tri_mul_incoming_2d.r2xc4", {"r": 2, "c": 4}, tri_in_2d_sm, (P("r", "c"),) + W4, P("r", "c"), tri_in,
       (R(NR, NR, CZ),) + tri_w(),
       bugs=[("no-reduce", ["missing-all-reduce"]), ("psum-rows-offset-zero", ["wrong-offset"])])

# 4. outgoing on r4 x c2


def tri_out_2d_sm(bug):
    def f(z, wa, wb, wg, wo):
        a, b = gate_proj(z, wa, wb, wg)                       # a[I_r, K_c]
        m = z.shape[1]
        b_t = lax.all_gather(b, "r", axis=0, tiled=True)     # b[all j, K_c]
        part = jnp.einsum("ikc,jkc->ijc", a, b_t)            # (I_r, N)
        if bug == "no-reduce":
            t = lax.dynamic_slice_in_dim(part, idx("c") * m, m, 1)
        elif bug == "psum-cols-offset-zero":
            t = psum(part, "c")[:, :m]
        else:
            t = lax.psum_scatter(part, "c", scatter_dimension=1, tiled=True)
        return z + ln(t) @ wo
    return f


C.smap("s.tri_mul_outgoing_2d.r4xc2", {"r": 4, "c": 2}, tri_out_2d_sm, (P("r", "c"),) + W4, P("r", "c"), tri_out,
       (R(NR, NR, CZ),) + tri_w(),
       bugs=[("no-reduce", ["missing-all-reduce"]), ("psum-cols-offset-zero", ["wrong-offset"])])

# 5. / 6. triangle attention


def heads(x, w):
    return (x @ w).reshape(x.shape[:-1] + (NH, HD))


def tri_att_start(z, wq, wk, wv, wb, wg, wo):
    x = ln(z)
    q, k, v = heads(x, wq), heads(x, wk), heads(x, wv)
    bias = x @ wb                                            # (N, N, H): b_jk
    s = jnp.einsum("ijhd,ikhd->ihjk", q, k) / np.sqrt(HD) + jnp.transpose(bias, (2, 0, 1))[None]
    o = jnp.einsum("ihjk,ikhd->ijhd", jax.nn.softmax(s, -1), v)
    o = jax.nn.sigmoid(heads(x, wg)) * o
    return z + o.reshape(z.shape[:2] + (NH * HD,)) @ wo


def tri_att_end(z, wq, wk, wv, wb, wg, wo):
    x = ln(z)
    q, k, v = heads(x, wq), heads(x, wk), heads(x, wv)
    bias = x @ wb                                            # b_ki
    s = jnp.einsum("ijhd,kjhd->jhik", q, k) / np.sqrt(HD) + jnp.transpose(bias, (2, 1, 0))[None]
    o = jnp.einsum("jhik,kjhd->ijhd", jax.nn.softmax(s, -1), v)
    o = jax.nn.sigmoid(heads(x, wg)) * o
    return z + o.reshape(z.shape[:2] + (NH * HD,)) @ wo


def att_w():
    return (R(CZ, NH * HD, scale=0.5), R(CZ, NH * HD, scale=0.5), R(CZ, NH * HD, scale=0.5),
            R(CZ, NH), R(CZ, NH * HD, scale=0.5), R(NH * HD, CZ, scale=0.5))


W6 = (P(),) * 6


def tri_att_start_sm(bug):
    def f(z, wq, wk, wv, wb, wg, wo):
        x = ln(z)
        q, k, v = heads(x, wq), heads(x, wk), heads(x, wv)
        bl = x @ wb
        if bug == "bias-untiled-wrong-order":
            bias = jnp.swapaxes(lax.all_gather(bl, "sp"), 0, 1).reshape(NR, NR, NH)
        else:
            bias = lax.all_gather(bl, "sp", axis=0, tiled=True)
        bt = jnp.transpose(bias, (2, 1, 0)) if bug == "bias-transposed" else jnp.transpose(bias, (2, 0, 1))
        s = jnp.einsum("ijhd,ikhd->ihjk", q, k) / np.sqrt(HD) + bt[None]
        o = jnp.einsum("ihjk,ikhd->ijhd", jax.nn.softmax(s, -1), v)
        o = jax.nn.sigmoid(heads(x, wg)) * o
        return z + o.reshape(z.shape[:2] + (NH * HD,)) @ wo
    return f


C.smap("s.tri_attn_starting_node_bias_gather.sp4", {"sp": 4}, tri_att_start_sm, (P("sp"),) + W6, P("sp"),
       tri_att_start, (R(NR, NR, CZ),) + att_w(),
       bugs=[("bias-transposed", ["wrong-operand"]), ("bias-untiled-wrong-order", ["wrong-reshape-order"])])


def tri_att_end_sm(bug):
    def f(z, wq, wk, wv, wb, wg, wo):
        x = ln(z)
        n = z.shape[0]
        q, k, v = heads(x, wq), heads(x, wk), heads(x, wv)
        kf = lax.all_gather(k, "sp", axis=0, tiled=True)
        vf = lax.all_gather(v, "sp", axis=0, tiled=True)
        bl = x @ wb                                          # b[i_loc, all]
        if bug == "bias-untransposed":
            bki = bl                                         # used as b[k, i]: wrong block
            bt = jnp.transpose(bki, (2, 0, 1))               # (H, i_loc, k)
        else:
            bf = lax.all_gather(bl, "sp", axis=0, tiled=True)  # (N k, N i, H)
            off = 0 if bug == "bias-cols-offset-zero" else idx("sp") * n
            bki = lax.dynamic_slice_in_dim(bf, off, n, 1)    # (N k, i_loc, H)
            bt = jnp.transpose(bki, (2, 1, 0))               # (H, i_loc, k)
        s = jnp.einsum("ijhd,kjhd->jhik", q, kf) / np.sqrt(HD) + bt[None]
        o = jnp.einsum("jhik,kjhd->ijhd", jax.nn.softmax(s, -1), vf)
        o = jax.nn.sigmoid(heads(x, wg)) * o
        return z + o.reshape(z.shape[:2] + (NH * HD,)) @ wo
    return f


C.smap("s.tri_attn_ending_node_transposed_bias.sp4", {"sp": 4}, tri_att_end_sm, (P("sp"),) + W6, P("sp"),
       tri_att_end, (R(NR, NR, CZ),) + att_w(),
       bugs=[("bias-untransposed", ["wrong-operand"]), ("bias-cols-offset-zero", ["wrong-offset"])])

# 7. outer-product mean, MSA over sequences
CO = 4


def opm(m, w1, w2, wo, bo):
    x = ln(m)
    a, b = x @ w1, x @ w2                                    # (S, N, CO)
    o = jnp.einsum("sic,sjd->ijcd", a, b) / m.shape[0]
    return o.reshape(NR, NR, CO * CO) @ wo + bo


def opm_sm(bug):
    def f(m, w1, w2, wo, bo):
        x = ln(m)
        a, b = x @ w1, x @ w2
        o = jnp.einsum("sic,sjd->ijcd", a, b)
        if bug == "bias-inside-psum":
            return psum((o / NS).reshape(NR, NR, CO * CO) @ wo + bo, "sp")
        if bug == "local-count":
            o = psum(o, "sp") / m.shape[0]
        elif bug == "no-psum":
            o = o / NS
        else:
            o = psum(o, "sp") / NS
        return o.reshape(NR, NR, CO * CO) @ wo + bo
    return f


OPM_W = (R(CM, CO), R(CM, CO), R(CO * CO, CZ, scale=0.3), R(CZ))
C.smap("s.outer_product_mean_msa_seqs.sp4", {"sp": 4}, opm_sm, (P("sp"), P(), P(), P(), P()), P(), opm,
       (R(NS, NR, CM),) + OPM_W,
       bugs=[("local-count", ["wrong-scale"]), ("no-psum", ["missing-all-reduce"]),
             ("bias-inside-psum", ["wrong-value"])])

# 8. MSA column attention, batch over dp, sequences over sp
NB = 2


def col_att(m, wq, wk, wv, wg, wo):
    x = ln(m)                                                # (B, S, N, C)
    q, k, v = heads(x, wq), heads(x, wk), heads(x, wv)
    s = jnp.einsum("bsihd,btihd->bihst", q, k) / np.sqrt(HD)
    o = jnp.einsum("bihst,btihd->bsihd", jax.nn.softmax(s, -1), v)
    o = jax.nn.sigmoid(heads(x, wg)) * o
    return m + o.reshape(m.shape[:3] + (NH * HD,)) @ wo


def col_att_sm(bug):
    def f(m, wq, wk, wv, wg, wo):
        x = ln(m)
        q, k, v = heads(x, wq), heads(x, wk), heads(x, wv)
        if bug not in ("local-softmax", "pmean-local"):
            k = lax.all_gather(k, "sp", axis=1, tiled=True)
            v = lax.all_gather(v, "sp", axis=1, tiled=True)
        s = jnp.einsum("bsihd,btihd->bihst", q, k) / np.sqrt(HD)
        o = jnp.einsum("bihst,btihd->bsihd", jax.nn.softmax(s, -1), v)
        if bug == "pmean-local":
            o = pmean(o, "sp")
        o = jax.nn.sigmoid(heads(x, wg)) * o
        return m + o.reshape(m.shape[:3] + (NH * HD,)) @ wo
    return f


C.smap("s.msa_column_attention_gather_seqs.dp2xsp4", {"dp": 2, "sp": 4}, col_att_sm,
       (P("dp", "sp"), P(), P(), P(), P(), P()), P("dp", "sp"), col_att,
       (R(NB, NS, NR, CM), R(CM, NH * HD), R(CM, NH * HD), R(CM, NH * HD), R(CM, NH * HD), R(NH * HD, CM, scale=0.5)),
       bugs=[("local-softmax", ["missing-collective"]), ("pmean-local", ["wrong-reduction"])])

# 9. MSA row attention with pair bias, residues over sp


def row_att(m, z, wq, wk, wv, wb, wo):
    x = ln(m)                                                # (S, N, C)
    q, k, v = heads(x, wq), heads(x, wk), heads(x, wv)
    bias = ln(z) @ wb                                        # (N, N, H)
    s = jnp.einsum("sihd,sjhd->shij", q, k) / np.sqrt(HD) + jnp.transpose(bias, (2, 0, 1))[None]
    o = jnp.einsum("shij,sjhd->sihd", jax.nn.softmax(s, -1), v)
    return m + o.reshape(m.shape[:2] + (NH * HD,)) @ wo


def row_att_sm(bug):
    def f(m, z, wq, wk, wv, wb, wo):
        x = ln(m)                                            # (S, n, C)
        n = m.shape[1]
        q, k, v = heads(x, wq), heads(x, wk), heads(x, wv)
        if bug == "keys-untiled-wrong-order":
            k = jnp.swapaxes(lax.all_gather(k, "sp", axis=1), 1, 2).reshape(NS, NR, NH, HD)
        else:
            k = lax.all_gather(k, "sp", axis=1, tiled=True)
        v = lax.all_gather(v, "sp", axis=1, tiled=True)
        if bug == "bias-gathered-transposed":
            zf = lax.all_gather(z, "sp", axis=0, tiled=True)
            bias = jnp.swapaxes(lax.dynamic_slice_in_dim(ln(zf) @ wb, idx("sp") * n, n, 1), 0, 1)
        else:
            bias = ln(z) @ wb                                # (n, N, H) = b[i_loc, j]
        s = jnp.einsum("sihd,sjhd->shij", q, k) / np.sqrt(HD) + jnp.transpose(bias, (2, 0, 1))[None]
        o = jnp.einsum("shij,sjhd->sihd", jax.nn.softmax(s, -1), v)
        return m + o.reshape(m.shape[:2] + (NH * HD,)) @ wo
    return f


ROW_W = (R(CM, NH * HD), R(CM, NH * HD), R(CM, NH * HD), R(CZ, NH), R(NH * HD, CM, scale=0.5))
C.smap("s.msa_row_attention_pair_bias_residues.sp4", {"sp": 4}, row_att_sm,
       (P(None, "sp"), P("sp")) + (P(),) * 5, P(None, "sp"), row_att,
       (R(NS, NR, CM), R(NR, NR, CZ)) + ROW_W,
       bugs=[("bias-gathered-transposed", ["wrong-operand"]), ("keys-untiled-wrong-order", ["wrong-reshape-order"])])

# 10. distogram loss on r4 x c2
NBIN = 12
EDGES = np.linspace(2.3, 21.7, NBIN - 1).astype(np.float32)


def disto_loss(logits, xyz, mask):
    d2 = jnp.sum(jnp.square(xyz[:, None] - xyz[None]), -1)
    tgt = jnp.sum(d2[..., None] > EDGES ** 2, -1)
    ll = jnp.take_along_axis(jax.nn.log_softmax(logits, -1), tgt[..., None], -1)[..., 0]
    pm = mask[:, None] * mask[None]
    return -jnp.sum(ll * pm) / (jnp.sum(pm) + 1e-6)


def disto_sm(bug):
    def f(logits, xyz, mask):
        ni, nj = logits.shape[:2]
        i0 = idx("r") * ni
        j0 = idx("r") * nj % NR if bug == "col-offset-from-r" else idx("c") * nj
        xi, xj = lax.dynamic_slice_in_dim(xyz, i0, ni), lax.dynamic_slice_in_dim(xyz, j0, nj)
        mi, mj = lax.dynamic_slice_in_dim(mask, i0, ni), lax.dynamic_slice_in_dim(mask, j0, nj)
        d2 = jnp.sum(jnp.square(xi[:, None] - xj[None]), -1)
        tgt = jnp.sum(d2[..., None] > EDGES ** 2, -1)
        ll = jnp.take_along_axis(jax.nn.log_softmax(logits, -1), tgt[..., None], -1)[..., 0]
        pm = mi[:, None] * mj[None]
        num, den = -jnp.sum(ll * pm), jnp.sum(pm)
        if bug == "pmean-local-means":
            return pmean(num / (den + 1e-6), ("r", "c"))
        ax = ("r",) if bug == "psum-r-only" else ("r", "c")
        return psum(num, ax) / (psum(den, ax) + 1e-6)
    return f


XYZ = np.cumsum(R(NR, 3, scale=2.2), 0).astype(np.float32)
MASK = (np.arange(NR) % 5 != 3).astype(np.float32)
MASK[11:14] = 0.0
C.smap("s.distogram_loss_2d_offsets.r4xc2", {"r": 4, "c": 2}, disto_sm, (P("r", "c"), P(), P()), P(), disto_loss,
       (R(NR, NR, NBIN), XYZ, MASK),
       bugs=[("col-offset-from-r", ["wrong-offset"]), ("pmean-local-means", ["wrong-reduction"]),
             ("psum-r-only", ["wrong-collective-group"])])

# 11. training step of a tiny pair block
opt = optax.sgd(0.05, momentum=0.9)


def block_loss(params, z, xyz, mask):
    z = tri_out(z, params["wa"], params["wb"], params["wg"], params["wo"])
    z = z + jax.nn.relu(ln(z) @ params["t1"]) @ params["t2"]
    return disto_loss(z @ params["head"], xyz, mask)


def batched_loss(params, z, xyz, mask):
    return jnp.mean(jax.vmap(block_loss, (None, 0, 0, 0))(params, z, xyz, mask))


def train_step(params, mom, z, xyz, mask):
    loss, g = jax.value_and_grad(batched_loss)(params, z, xyz, mask)
    upd, mom = opt.update(g, mom, params)
    return optax.apply_updates(params, upd), mom, loss


def train_sm(bug):
    def f(params, mom, z, xyz, mask):
        n = z.shape[1]
        me = idx("sp")

        def local(params):
            def one(z, xyz, mask):
                a, b = gate_proj(z, params["wa"], params["wb"], params["wg"])
                bf = lax.all_gather(b, "sp", axis=0, tiled=True)
                t = jnp.einsum("ikc,jkc->ijc", a, bf)
                z = z + ln(t) @ params["wo"]
                z = z + jax.nn.relu(ln(z) @ params["t1"]) @ params["t2"]
                logits = z @ params["head"]
                xi = lax.dynamic_slice_in_dim(xyz, me * n, n)
                mi = lax.dynamic_slice_in_dim(mask, me * n, n)
                d2 = jnp.sum(jnp.square(xi[:, None] - xyz[None]), -1)
                tgt = jnp.sum(d2[..., None] > EDGES ** 2, -1)
                ll = jnp.take_along_axis(jax.nn.log_softmax(logits, -1), tgt[..., None], -1)[..., 0]
                pm = mi[:, None] * mask[None]
                tot = jnp.sum(mask) ** 2 + 1e-6
                return -jnp.sum(ll * pm) / tot
            return jnp.sum(jax.vmap(one)(z, xyz, mask)) / (z.shape[0] * 2)
        loss, g = jax.value_and_grad(local)(params)
        if bug == "grad-pmean":
            g = jax.tree.map(lambda x: pmean(x, ("dp", "sp")), g)
        elif bug == "grad-psum-sp-only":
            g = jax.tree.map(lambda x: psum(x, "sp"), g)
        else:
            g = jax.tree.map(lambda x: psum(x, ("dp", "sp")), g)
        upd, mom = opt.update(g, mom, params)
        return optax.apply_updates(params, upd), mom, psum(loss, ("dp", "sp"))
    return f


PARAMS = dict(zip(["wa", "wb", "wg", "wo"], tri_w()))
PARAMS.update(t1=R(CZ, 2 * CZ, scale=0.4), t2=R(2 * CZ, CZ, scale=0.4), head=R(CZ, NBIN, scale=0.4))
MOM = jax.tree.map(np.asarray, opt.init(PARAMS))
MOM = jax.tree.map(lambda x: (np.asarray(x) + R(*np.shape(x), scale=0.01)).astype(np.float32), MOM)
PS = jax.tree.map(lambda _: P(), PARAMS)
MS = jax.tree.map(lambda _: P(), MOM)
XYZB = np.stack([XYZ, np.cumsum(R(NR, 3, scale=2.2), 0)]).astype(np.float32)
MASKB = np.stack([MASK, np.ones(NR, np.float32)])
C.smap("s.pair_block_train_sgd_momentum.dp2xsp4", {"dp": 2, "sp": 4}, train_sm,
       (PS, MS, P("dp", "sp"), P("dp"), P("dp")), (PS, MS, P()), train_step,
       (PARAMS, MOM, R(2, NR, NR, CZ), XYZB, MASKB),
       bugs=[("grad-pmean", ["wrong-scale"]), ("grad-psum-sp-only", ["wrong-collective-group"])])

# 12. outgoing update with b's row blocks passed around a ring (ppermute in a fori_loop)


def tri_out_ring_sm(bug):
    def f(z, wa, wb, wg, wo):
        a, b = gate_proj(z, wa, wb, wg)
        n, me = z.shape[0], idx("sp")
        perm = [(i, (i - 1) % 4) for i in range(4)] if bug == "ring-wrong-direction" else \
            [(i, (i + 1) % 4) for i in range(4)]

        def step(s, carry):
            t, blk = carry
            src = (me - s) % 4                                # block held after s right-shifts
            col = jnp.einsum("ikc,jkc->ijc", a, blk)
            off = src * n if bug != "column-at-own-offset" else me * n
            t = lax.dynamic_update_slice_in_dim(t, col, off, 1)
            return t, lax.ppermute(blk, "sp", perm)
        t, _ = lax.fori_loop(0, 4, step, (jnp.zeros((n, NR, CZ), z.dtype), b))
        return z + ln(t) @ wo
    return f


C.smap("s.tri_mul_outgoing_ring_fori.sp4", {"sp": 4}, tri_out_ring_sm, (P("sp"),) + W4, P("sp"), tri_out,
       (R(NR, NR, CZ),) + tri_w(),
       bugs=[("ring-wrong-direction", ["wrong-permutation"]), ("column-at-own-offset", ["wrong-offset"])])

# 13. incoming update in bf16 with f32 accumulation, rows over sp4


def tri_in_bf16(z, wa, wb, wg, wo):
    a, b = gate_proj(z, wa, wb, wg)
    t = jnp.einsum("kic,kjc->ijc", a.astype(jnp.bfloat16), b.astype(jnp.bfloat16),
                   preferred_element_type=jnp.float32)
    return z + ln(t) @ wo


def tri_in_bf16_sm(bug):
    def f(z, wa, wb, wg, wo):
        a, b = gate_proj(z, wa, wb, wg)
        part = jnp.einsum("kic,kjc->ijc", a.astype(jnp.bfloat16), b.astype(jnp.bfloat16),
                          preferred_element_type=jnp.float32)
        t = lax.psum_scatter(part, "sp", scatter_dimension=0, tiled=True)
        if bug == "rows-from-neighbour":
            t = lax.ppermute(t, "sp", [(i, (i + 1) % 4) for i in range(4)])
        if bug == "scatter-then-own-rows-of-gather":
            t = lax.dynamic_slice_in_dim(lax.all_gather(t, "sp", axis=0, tiled=True), 0, z.shape[0], 0)
        return z + ln(t) @ wo
    return f


C.smap("s.tri_mul_incoming_bf16_f32acc.sp4", {"sp": 4}, tri_in_bf16_sm, (P("sp"),) + W4, P("sp"), tri_in_bf16,
       (R(NR, NR, CZ),) + tri_w(),
       bugs=[("rows-from-neighbour", ["wrong-permutation"]), ("scatter-then-own-rows-of-gather", ["wrong-offset"])])

# 14. outer-product mean with the result's rows scattered (MSA over sequences, pair over rows)


def opm_rows_sm(bug):
    def f(m, w1, w2, wo, bo):
        x = ln(m)
        a, b = x @ w1, x @ w2
        o = jnp.einsum("sic,sjd->ijcd", a, b).reshape(NR, NR, CO * CO)
        if bug == "pmean-own-rows":
            o = lax.dynamic_slice_in_dim(pmean(o, "sp"), idx("sp") * (NR // 4), NR // 4, 0)
        else:
            o = lax.psum_scatter(o, "sp", scatter_dimension=0, tiled=True)
        o = o * (1.0 / NS)
        if bug == "bias-per-shard":
            return o @ wo + bo / 4
        return o @ wo + bo
    return f


C.smap("s.outer_product_mean_scatter_rows.sp4", {"sp": 4}, opm_rows_sm, (P("sp"), P(), P(), P(), P()), P("sp"), opm,
       (R(NS, NR, CM),) + OPM_W,
       bugs=[("pmean-own-rows", ["wrong-scale"]), ("bias-per-shard", ["wrong-scale"])])

# 15. MSA column attention, queries gathered, keys / values local, softmax merged by pmax / psum


def col_att_merge_sm(bug):
    def f(m, wq, wk, wv, wg, wo):
        x = ln(m)
        q, k, v = heads(x, wq), heads(x, wk), heads(x, wv)
        sl, me = m.shape[1], idx("sp")
        qf = lax.all_gather(q, "sp", axis=1, tiled=True)                   # every query sequence
        s = jnp.einsum("bsihd,btihd->bihst", qf, k) / np.sqrt(HD)          # against the local keys
        mx = jnp.max(s, -1, keepdims=True)
        if bug != "local-max":
            mx = lax.pmax(mx, "sp")
        p = jnp.exp(s - lax.stop_gradient(mx))
        den = jnp.sum(p, -1)                                               # (b, i, h, S)
        num = jnp.einsum("bihst,btihd->bsihd", p, v)
        if bug != "den-not-psum":
            den = psum(den, "sp")
        num = psum(num, "sp")
        o = num / jnp.transpose(den, (0, 3, 1, 2))[..., None]
        o = lax.dynamic_slice_in_dim(o, me * sl, sl, 1)
        o = jax.nn.sigmoid(heads(x, wg)) * o
        return m + o.reshape(m.shape[:3] + (NH * HD,)) @ wo
    return f


COLW = (R(CM, NH * HD), R(CM, NH * HD), R(CM, NH * HD), R(CM, NH * HD), R(NH * HD, CM, scale=0.5))
C.smap("s.msa_column_attention_softmax_merge.dp2xsp4", {"dp": 2, "sp": 4}, col_att_merge_sm,
       (P("dp", "sp"), P(), P(), P(), P(), P()), P("dp", "sp"), col_att, (R(NB, NS, NR, CM),) + COLW,
       bugs=[("local-max", ["wrong-reduction"]), ("den-not-psum", ["missing-all-reduce"])])

# 16. relative position one-hot added to the pair, r2 x c4 with 2-D offsets
KREL = 5


def relpos(z, w):
    r = jnp.arange(NR)
    d = jnp.clip(r[:, None] - r[None], -KREL, KREL) + KREL
    return z + jax.nn.one_hot(d, 2 * KREL + 1) @ w


def relpos_sm(bug):
    def f(z, w):
        ni, nj = z.shape[:2]
        i = idx("r") * ni + jnp.arange(ni)
        j = (idx("r") if bug == "col-offset-from-r" else idx("c")) * nj + jnp.arange(nj)
        dd = j[None] - i[:, None] if bug == "j-minus-i" else i[:, None] - j[None]
        d = jnp.clip(dd, -KREL, KREL) + KREL
        return z + jnp.take(w, d, axis=0)
    return f


C.smap("s.relpos_onehot_2d_offsets.r2xc4", {"r": 2, "c": 4}, relpos_sm, (P("r", "c"), P()), P("r", "c"), relpos,
       (R(NR, NR, CZ), R(2 * KREL + 1, CZ)),
       bugs=[("col-offset-from-r", ["wrong-offset"]), ("j-minus-i", ["wrong-sign"])])

# 17. two recycling iterations of the outgoing update (lax.scan), rows over sp4


def recycle(z, wa, wb, wg, wo):
    def body(z, _):
        return tri_out(z, wa, wb, wg, wo), None
    return lax.scan(body, z, None, length=2)[0]


def recycle_sm(bug):
    def f(z, wa, wb, wg, wo):
        b0 = lax.all_gather(gate_proj(z, wa, wb, wg)[1], "sp", axis=0, tiled=True)

        def body(z, _):
            a, b = gate_proj(z, wa, wb, wg)
            bf = b0 if bug == "gather-once-stale" else lax.all_gather(b, "sp", axis=0, tiled=True)
            return z + ln(jnp.einsum("ikc,jkc->ijc", a, bf)) @ wo, None
        return lax.scan(body, z, None, length=2)[0]
    return f


C.smap("s.recycle_tri_out_scan.sp4", {"sp": 4}, recycle_sm, (P("sp"),) + W4, P("sp"), recycle,
       (R(NR, NR, CZ),) + tri_w(),
       bugs=[("gather-once-stale", ["wrong-value"])])

# 18. lDDT-style per-residue score, predicted coordinates over residues (sp4)


def lddt(pred, true, mask):
    dt = jnp.sqrt(jnp.sum(jnp.square(true[:, None] - true[None]), -1) + 1e-8)
    dp = jnp.sqrt(jnp.sum(jnp.square(pred[:, None] - pred[None]), -1) + 1e-8)
    nb = (dt < 15.0) * (1.0 - jnp.eye(NR)) * mask[:, None] * mask[None]
    err = jnp.abs(dt - dp)
    sc = 0.25 * sum((err < c).astype(jnp.float32) for c in (0.5, 1.0, 2.0, 4.0))
    return jnp.sum(nb * sc, -1) / (jnp.sum(nb, -1) + 1e-6)


def lddt_sm(bug):
    def f(pred, true, mask):
        n = pred.shape[0]
        i0 = 0 if bug == "rows-at-offset-zero" else idx("sp") * n
        pf = lax.all_gather(pred, "sp", axis=0, tiled=True)
        ti, mi = lax.dynamic_slice_in_dim(true, i0, n), lax.dynamic_slice_in_dim(mask, i0, n)
        dt = jnp.sqrt(jnp.sum(jnp.square(ti[:, None] - true[None]), -1) + 1e-8)
        dp = jnp.sqrt(jnp.sum(jnp.square(pred[:, None] - pf[None]), -1) + 1e-8)
        me = idx("sp") * n + jnp.arange(n)
        not_self = (me[:, None] != jnp.arange(NR)[None]) if bug != "self-by-local-index" else \
            (jnp.arange(n)[:, None] != jnp.arange(NR)[None])
        nb = (dt < 15.0) * not_self * mi[:, None] * mask[None]
        err = jnp.abs(dt - dp)
        sc = 0.25 * sum((err < c).astype(jnp.float32) for c in (0.5, 1.0, 2.0, 4.0))
        return jnp.sum(nb * sc, -1) / (jnp.sum(nb, -1) + 1e-6)
    return f


C.smap("s.lddt_per_residue_rows.sp4", {"sp": 4}, lddt_sm, (P("sp"), P(), P()), P("sp"), lddt,
       ((XYZ + R(NR, 3, scale=0.8)).astype(np.float32), XYZ, MASK),
       bugs=[("self-by-local-index", ["wrong-offset"]), ("rows-at-offset-zero", ["wrong-offset"])])

# 19. triangle attention around the starting node on r2 x c4 (i over r, j over c)


def tri_att_start_2d_sm(bug):
    def f(z, wq, wk, wv, wb, wg, wo):
        x = ln(z)                                            # x[I_r, J_c]
        ni, nj = z.shape[:2]
        q = heads(x, wq)
        kf = lax.all_gather(heads(x, wk), "c", axis=1, tiled=True)   # row i, every key column k
        vf = lax.all_gather(heads(x, wv), "c", axis=1, tiled=True)
        bl = x @ wb
        bfull = lax.all_gather(lax.all_gather(bl, "c", axis=1, tiled=True), "r", axis=0, tiled=True)
        roff = idx("r") * ni if bug == "bias-rows-from-r" else idx("c") * nj
        bjk = lax.dynamic_slice_in_dim(bfull, roff, nj, 0)   # b[J_c, all k]
        s = jnp.einsum("ijhd,ikhd->ihjk", q, kf) / np.sqrt(HD) + jnp.transpose(bjk, (2, 0, 1))[None]
        if bug == "softmax-local-keys":
            kl = lax.dynamic_slice_in_dim(s, idx("c") * nj, nj, 3)
            o = jnp.einsum("ihjk,ikhd->ijhd", jax.nn.softmax(kl, -1), heads(x, wv))
        else:
            o = jnp.einsum("ihjk,ikhd->ijhd", jax.nn.softmax(s, -1), vf)
        o = jax.nn.sigmoid(heads(x, wg)) * o
        return z + o.reshape(z.shape[:2] + (NH * HD,)) @ wo
    return f


C.smap("s.tri_attn_starting_node_2d.r2xc4", {"r": 2, "c": 4}, tri_att_start_2d_sm, (P("r", "c"),) + W6,
       P("r", "c"), tri_att_start, (R(NR, NR, CZ),) + att_w(),
       bugs=[("bias-rows-from-r", ["wrong-offset"]), ("softmax-local-keys", ["missing-collective"])])

# 20. pair transition, rows over r, hidden units over c (column / row parallel), r4 x c2


def transition(z, w1, b1, w2, b2):
    return z + jax.nn.relu(ln(z) @ w1 + b1) @ w2 + b2


def transition_sm(bug):
    def f(z, w1, b1, w2, b2):
        h = jax.nn.relu(ln(z) @ w1 + b1)
        y = h @ w2
        if bug == "bias-before-psum":
            return z + psum(y + b2, "c")
        if bug == "pmean-rows":
            y = pmean(y, "c")
        else:
            y = psum(y, "c")
        return z + y + b2
    return f


C.smap("s.pair_transition_hidden_over_c.r4xc2", {"r": 4, "c": 2}, transition_sm,
       (P("r"), P(None, "c"), P("c"), P("c"), P()), P("r"), transition,
       (R(NR, NR, CZ), R(CZ, 4 * CZ, scale=0.4), R(4 * CZ, scale=0.1), R(4 * CZ, CZ, scale=0.3), R(CZ)),
       bugs=[("bias-before-psum", ["wrong-reduction"]), ("pmean-rows", ["wrong-scale"])])

# 21. masked-MSA loss and its gradient w.r.t. the logits, sequences over sp4 (check_vma=True)
NAA = 23


def msa_loss(logits, tgt, msk):
    ll = jnp.take_along_axis(jax.nn.log_softmax(logits, -1), tgt[..., None], -1)[..., 0]
    return -jnp.sum(ll * msk) / (jnp.sum(msk) + 1e-8)


def msa_vg(logits, tgt, msk):
    return jax.value_and_grad(msa_loss)(logits, tgt, msk)


def msa_loss_sm(bug):
    def f(logits, tgt, msk):
        den = jnp.sum(msk) if bug == "local-count" else psum(jnp.sum(msk), "sp")

        def local(lg):
            ll = jnp.take_along_axis(jax.nn.log_softmax(lg, -1), tgt[..., None], -1)[..., 0]
            return -jnp.sum(ll * msk) / (den + 1e-8)
        l, g = jax.value_and_grad(local)(logits)
        if bug == "grad-psum":
            g = psum(g, "sp")
        return psum(l, "sp"), g
    return f


MSK = (rng.random((NS, NR)) < 0.15 + 0.1 * np.arange(NS)[:, None] / NS).astype(np.float32)
C.smap("s.masked_msa_loss_grad.sp4", {"sp": 4}, msa_loss_sm, (P("sp"), P("sp"), P("sp")), (P(), P("sp")), msa_vg,
       (R(NS, NR, NAA), I(0, NAA, NS, NR), MSK), check_vma=True,
       bugs=[("local-count", ["wrong-scale"]), ("grad-psum", ["wrong-reduction"])])

# 22. gradient of the outer-product mean's weights, MSA over sequences (grad inside the body)


def opm_grads(m, w1, w2, wo, bo, ct):
    return jax.grad(lambda w1, w2, wo: jnp.sum(opm(m, w1, w2, wo, bo) * ct), (0, 1, 2))(w1, w2, wo)


def opm_grads_sm(bug):
    def f(m, w1, w2, wo, bo, ct):
        def local(w1, w2, wo):
            x = ln(m)
            o = jnp.einsum("sic,sjd->ijcd", x @ w1, x @ w2) / NS
            return jnp.sum((o.reshape(NR, NR, CO * CO) @ wo) * ct)
        g = jax.grad(local, (0, 1, 2))(w1, w2, wo)
        if bug == "w1-grad-not-reduced":
            return (g[0],) + tuple(psum(x, "sp") for x in g[1:])
        if bug == "pmean-grads":
            return tuple(pmean(x, "sp") for x in g)
        return tuple(psum(x, "sp") for x in g)
    return f


C.smap("s.outer_product_mean_weight_grads.sp4", {"sp": 4}, opm_grads_sm, (P("sp"),) + (P(),) * 5, (P(),) * 3,
       opm_grads, (R(NS, NR, CM),) + OPM_W + (R(NR, NR, CZ),),
       bugs=[("w1-grad-not-reduced", ["missing-all-reduce"]), ("pmean-grads", ["wrong-scale"])])

# 23. distogram targets by searchsorted, rows over sp4, coordinates over sp4 (all_gather'd)


def disto_ss(logits, xyz):
    d = jnp.sqrt(jnp.sum(jnp.square(xyz[:, None] - xyz[None]), -1))
    tgt = jnp.searchsorted(jnp.asarray(EDGES), d, side="right")
    lp = jax.nn.log_softmax(logits, -1)
    return -jnp.mean(jnp.sum(jax.nn.one_hot(tgt, NBIN) * lp, -1), -1)     # per residue i


def disto_ss_sm(bug):
    def f(logits, xyz):
        n = xyz.shape[0]
        xf = lax.all_gather(xyz, "sp", axis=0, tiled=True)
        xi = lax.dynamic_slice_in_dim(xf, 0, n) if bug == "rows-coords-offset-zero" else xyz
        d = jnp.sqrt(jnp.sum(jnp.square(xi[:, None] - xf[None]), -1))
        tgt = jnp.searchsorted(jnp.asarray(EDGES), d, side="left" if bug == "side-left" else "right")
        lp = jax.nn.log_softmax(logits, -1)
        return -jnp.mean(jnp.sum(jax.nn.one_hot(tgt, NBIN) * lp, -1), -1)
    return f


C.smap("s.distogram_searchsorted_rows.sp4", {"sp": 4}, disto_ss_sm, (P("sp"), P("sp")), P("sp"), disto_ss,
       (R(NR, NR, NBIN), XYZ), bugs=[("rows-coords-offset-zero", ["wrong-offset"])])

# 24. outer-product mean reduced by psum_scatter over rows then all_gather'd (replicated pair), bf16 activations


def opm_bf16(m, w1, w2, wo, bo):
    x = ln(m).astype(jnp.bfloat16)
    a, b = x @ w1.astype(jnp.bfloat16), x @ w2.astype(jnp.bfloat16)
    o = jnp.einsum("sic,sjd->ijcd", a, b, preferred_element_type=jnp.float32) / m.shape[0]
    return o.reshape(NR, NR, CO * CO) @ wo + bo


def opm_rs_ag_sm(bug):
    def f(m, w1, w2, wo, bo):
        x = ln(m).astype(jnp.bfloat16)
        a, b = x @ w1.astype(jnp.bfloat16), x @ w2.astype(jnp.bfloat16)
        o = jnp.einsum("sic,sjd->ijcd", a, b, preferred_element_type=jnp.float32)
        o = lax.psum_scatter(o, "sp", scatter_dimension=1, tiled=True)
        o = lax.all_gather(o, "sp", axis=0 if bug == "gather-wrong-dim" else 1, tiled=True)
        if bug == "gather-wrong-dim":
            o = o.reshape(NR, NR, CO, CO)
        return (o / NS).reshape(NR, NR, CO * CO) @ wo + bo
    return f


C.smap("s.outer_product_mean_rs_ag_bf16.sp4", {"sp": 4}, opm_rs_ag_sm, (P("sp"), P(), P(), P(), P()), P(), opm_bf16,
       (R(NS, NR, CM),) + OPM_W, bugs=[("gather-wrong-dim", ["wrong-shard-dim"])])

# GSPMD pairs


def tri_both(z, w1, w2):
    return tri_in(tri_out(z, *w1), *w2)


C.gspmd("g.tri_mul_out_then_in.r2xc4", {"r": 2, "c": 4}, (P("r", "c"), (P(),) * 4, (P(),) * 4), P("r", "c"),
        tri_both, (R(NR, NR, CZ), tri_w(), tri_w()))
C.gspmd("g.outer_product_mean_seqs.sp4", {"sp": 4}, (P("sp"), P(), P(), P(), P()), P(), opm,
        (R(NS, NR, CM),) + OPM_W)
C.gspmd("g.tri_attn_ending_rows.sp4", {"sp": 4}, (P("sp"),) + W6, P("sp"), tri_att_end,
        (R(NR, NR, CZ),) + att_w())


def disto_vg(logits, xyz, mask):
    return jax.value_and_grad(disto_loss)(logits, xyz, mask)


C.gspmd("g.distogram_loss_grad.r4xc2", {"r": 4, "c": 2}, (P("r", "c"), P(), P()), (P(), P("r", "c")), disto_vg,
        (R(NR, NR, NBIN), XYZ, MASK))
C.gspmd("g.msa_row_attention_pair_bias.dp2xsp4", {"dp": 2, "sp": 4},
        (P("dp", "sp"), P("dp")) + (P(),) * 5, P("dp", "sp"),
        jax.vmap(row_att, (0, 0) + (None,) * 5), (R(2, NS, NR, CM), R(2, NR, NR, CZ)) + ROW_W)

C.gspmd("g.msa_column_attention.dp2xsp4", {"dp": 2, "sp": 4}, (P("dp", "sp"),) + (P(),) * 5, P("dp", "sp"),
        col_att, (R(NB, NS, NR, CM),) + COLW)
C.gspmd("g.recycle_tri_out_scan.sp4", {"sp": 4}, (P("sp"),) + W4, P("sp"), recycle, (R(NR, NR, CZ),) + tri_w())


def tri_out_grad(z, w):
    return jax.grad(lambda w: jnp.sum(jnp.square(tri_out(z, *w))))(w)


C.gspmd("g.tri_mul_outgoing_weight_grads.r4xc2", {"r": 4, "c": 2}, (P("r", "c"), (P(),) * 4), (P(),) * 4,
        tri_out_grad, (R(NR, NR, CZ), tri_w()))
C.gspmd("g.pair_transition_megatron.r4xc2", {"r": 4, "c": 2}, (P("r"), P(None, "c"), P("c"), P("c"), P()), P("r"),
        transition, (R(NR, NR, CZ), R(CZ, 4 * CZ, scale=0.4), R(4 * CZ, scale=0.1), R(4 * CZ, CZ, scale=0.3), R(CZ)))

C.gspmd("g.tri_attn_starting_node.r2xc4", {"r": 2, "c": 4}, (P("r", "c"),) + W6, P("r", "c"), tri_att_start,
        (R(NR, NR, CZ),) + att_w())

C.finish()
