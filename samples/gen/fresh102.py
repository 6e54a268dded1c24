"""samples/fresh102: a 102nd batch of programs as a user writes them, on the theme of protein-structure and molecular models in JAX under axial (DAP-style) sharding -- Evoformer pieces with the MSA and the pair representation moved between row and column layouts by all_to_all, invariant point attention with frames, FAPE and pTM heads with padding masks, recycling with stop_gradient, dense equivariant message passing with cutoffs and padding, and training steps with jax.grad and optax -- none of them an idiom of samples/fresh .. fresh101, probe, train or wild.
Sizes: N = 16 residues (48 in 10.), S = 8 MSA sequences, channels 8, 2 heads
of 4, 32 atoms. Masks are floats (1 valid, 0 padding).
shard_map families:
 1. MSA row attention with pair bias on a 2-D mesh r2 x c4: MSA sequences
    over r, residues over c; keys / values all_gather'd over c; the pair
    representation's rows over c give the bias rows b_ij of the local
    queries directly. Bugs: the bias transposed (b_ji from the gathered
    bias), keys gathered untiled and reshaped in the wrong order.
 2. masked MSA column attention, MSA over sequences (dap4): all_to_all to
    the residue layout (residues over dap, all sequences local), attention
    over sequences with key padding mask, all_to_all back. Bugs: no
    transposition (softmax over the local sequences), back to the sequence
    layout by all_gather and the rows at offset 0.
 3. triangle multiplicative update, incoming edges, pair rows over dap4 with
    a pair mask: a's columns obtained by an all_to_all (a[:, I]), b
    all_gather'd. Bugs: a local swapaxes instead of the all_to_all, the
    outgoing einsum.
 4. triangle attention around the ending node as the starting-node attention
    of the transposed pair: all_to_all + swapaxes into the transposed row
    layout, the transposed bias gathered, then swapaxes + all_to_all back.
    Bugs: the bias of the untransposed pair, the result left in the
    transposed layout (no transposition back).
 5. masked outer-product mean, MSA with residues over dap4 (after column
    attention), b and the mask all_gather'd, normalised by the pairwise mask
    counts. Bugs: the normaliser from the local mask tiled, a and b swapped
    (a gathered, b local).
 6. invariant point attention, residues over dap4: scalar q/k/v, query /
    key / value points in global frames (frames applied before the gather),
    pair bias and pair values from the local pair rows, softplus head
    weights, output points back in the local frames. Bugs: the key points
    transformed by the local frames tiled (frames not gathered), output
    points rotated by R instead of R^T.
 7. FAPE on a 2-D mesh r2 x c4: frames over r, atoms over c, clamped at 10,
    frame and atom padding masks, masked mean as psum / psum over (r, c).
    Bugs: psum'd over r only, pmean of the local masked means.
 8. recycling training step, batch over dp4: two recycles under
    stop_gradient, then the graded pass; distogram cross-entropy with pair
    masks normalised per example; jax.grad in the body, pmean of the
    gradients over dp; optax.sgd with momentum. Bugs: no stop_gradient on
    the recycled pair, gradients not pmean'd.
 9. dense EGNN layer with a distance cutoff and padded atoms, atoms over
    sp4 as receivers (positions, features, mask all_gather'd), self pairs
    excluded by global index. Bugs: self excluded by the local index,
    relative vectors x_j - x_i, the receiver mask from rows at offset 0.
10. pTM from PAE logits (N = 48), rows over dap4, a boolean padding mask:
    d0 from the psum'd number of valid residues (clipped at 19 as in the
    TM-score), per-alignment scores, pmax. Bugs: d0 from the local count,
    no pmax. (A first draft with N = 32 and a float mask left the d0 bug
    unverified: on random masks both counts fall under the clip of 19, so
    execution cannot tell; N = 48 with a boolean mask reaches past it.)
11. training step on dp2 x dap4 with check_vma=True: outer-product mean
    with the MSA over sequences (psum over dap), pair transition, distogram
    head; loss pmean'd over dp; jax.grad; optax.sgd with momentum. Bugs:
    the loss psum'd over dp, the outer-product sum divided by the local
    sequence count.
12. backbone update and clash loss, residues over sp4: quaternion frame
    updates composed with the frames, 3 atoms per residue placed from
    literature coordinates, atoms all_gather'd, clashes between atoms of
    non-adjacent residues with residue padding; loss psum'd. Bugs: residue
    index of the local atoms without the block offset, the clash sum not
    psum'd.
GSPMD pairs (jax.jit with in/out shardings): 13. IPA of 6. with residues
over dap4; 14. FAPE of 7. with frames over r and atoms over c (r2 x c4);
15. an axial MSA block (row attention with pair bias, column attention)
with with_sharding_constraint moving the MSA from the sequence layout to the
residue layout and back (dap4); 16. the recycling training step of 8. with
the batch over dp4; 17. the dense EGNN of 9. with atoms over sp4; 18. the
incoming triangle update of 3. followed by the ending-node triangle
attention of 4. with pair rows over dap4; 19. the axial block of 13. with
the MSA over (r, c) on r2 x c4 (the partitioner's own layout changes).
Numerics: every correct pair agrees with its baseline at rounding level
(f32, at most ~2e-6); every bug variant differs clearly (see "numerics").
Run from the repository root: bash samples/gen/run_fresh102.sh [SUBSTR...]
"""
import sys
import numpy as np
import jax, jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec as P
import optax
sys.path.insert(0, "samples/gen")  # run from the repository root (run_fresh102.sh)
from fresh_lib import Corpus, seeded  # noqa: E402

SCRIPT = "samples/gen/fresh102.py"
C = Corpus("samples/fresh102", SCRIPT, "samples/gen/run_fresh102.sh", sys.argv[1:])
rng, R, I = seeded(10202)
psum, pmax, pmean, idx = lax.psum, lax.pmax, lax.pmean, lax.axis_index
N, S, CM, CZ, H, D = 16, 8, 8, 8, 2, 4
NEG = -1e9


def ln(x, eps=1e-5):
    mu = jnp.mean(x, -1, keepdims=True)
    var = jnp.mean(jnp.square(x - mu), -1, keepdims=True)
    return (x - mu) * lax.rsqrt(var + eps)


def split_heads(x):
    return x.reshape(x.shape[:-1] + (H, D))


def mask_from_lengths(n, lengths):
    return (np.arange(n)[None] < np.asarray(lengths)[:, None]).astype(np.float32)


# 1. MSA row attention with pair bias, r2 x c4


def row_attn(m, z, wq, wk, wv, wb, wg, wo):
    x = ln(m)
    q, k, v = split_heads(x @ wq), split_heads(x @ wk), split_heads(x @ wv)
    b = ln(z) @ wb                                              # (N, N, H)
    logits = jnp.einsum("sihd,sjhd->shij", q, k) / np.sqrt(D) + jnp.transpose(b, (2, 0, 1))[None]
    o = jnp.einsum("shij,sjhd->sihd", jax.nn.softmax(logits, -1), v)
    g = jax.nn.sigmoid(x @ wg)
    return m + (g * o.reshape(g.shape)) @ wo


def row_attn_sm(bug):
    def f(m, z, wq, wk, wv, wb, wg, wo):
        x = ln(m)                                               # (s, n, C)
        q = split_heads(x @ wq)
        kl, vl = split_heads(x @ wk), split_heads(x @ wv)
        if bug == "keys-untiled-wrong-order":
            kg = lax.all_gather(kl, "c", axis=1)                # (s, 4, n, H, D)
            k = jnp.swapaxes(kg, 1, 2).reshape(kg.shape[0], -1, H, D)
        else:
            k = lax.all_gather(kl, "c", axis=1, tiled=True)
        v = lax.all_gather(vl, "c", axis=1, tiled=True)
        b = ln(z) @ wb                                          # rows of the local queries, all j
        if bug == "bias-transposed":
            bf = lax.all_gather(b, "c", axis=0, tiled=True)
            b = lax.dynamic_slice_in_dim(jnp.swapaxes(bf, 0, 1), idx("c") * m.shape[1], m.shape[1], 0)
        logits = jnp.einsum("sihd,sjhd->shij", q, k) / np.sqrt(D) + jnp.transpose(b, (2, 0, 1))[None]
        o = jnp.einsum("shij,sjhd->sihd", jax.nn.softmax(logits, -1), v)
        g = jax.nn.sigmoid(x @ wg)
        return m + (g * o.reshape(g.shape)) @ wo
    return f


ROW_W = (R(CM, H * D, scale=0.4), R(CM, H * D, scale=0.4), R(CM, H * D, scale=0.4), R(CZ, H),
         R(CM, H * D, scale=0.4), R(H * D, CM, scale=0.4))
C.smap("s.msa_row_attn_pair_bias.r2xc4", {"r": 2, "c": 4}, row_attn_sm,
       (P("r", "c"), P("c")) + (P(),) * 6, P("r", "c"), row_attn, (R(S, N, CM), R(N, N, CZ)) + ROW_W,
       bugs=[("bias-transposed", ["wrong-operand"]), ("keys-untiled-wrong-order", ["wrong-reshape-order"])])

# 2. masked MSA column attention via all_to_all (dap4)


def col_attn(m, mask, wq, wk, wv, wg, wo):
    x = ln(m)
    q, k, v = split_heads(x @ wq), split_heads(x @ wk), split_heads(x @ wv)
    logits = jnp.einsum("sihd,tihd->ihst", q, k) / np.sqrt(D)
    logits = logits + (NEG * (1.0 - mask.T))[:, None, None, :]
    o = jnp.einsum("ihst,tihd->sihd", jax.nn.softmax(logits, -1), v)
    g = jax.nn.sigmoid(x @ wg)
    return m + (g * o.reshape(g.shape)) @ wo


def col_attn_sm(bug):
    def f(m, mask, wq, wk, wv, wg, wo):
        if bug == "no-transpose":
            return col_attn(m, mask, wq, wk, wv, wg, wo)
        mt = lax.all_to_all(m, "dap", 1, 0, tiled=True)           # (S, n, C)
        kt = lax.all_to_all(mask, "dap", 1, 0, tiled=True)        # (S, n)
        out = col_attn(mt, kt, wq, wk, wv, wg, wo)
        if bug == "back-gather-offset0":
            full = lax.all_gather(out, "dap", axis=1, tiled=True)
            return full[:m.shape[0]]
        return lax.all_to_all(out, "dap", 0, 1, tiled=True)       # (s, N, C)
    return f


MSA_MASK = np.ones((S, N), np.float32)
MSA_MASK[3:, 12:] = 0.0
MSA_MASK[6:, 5:9] = 0.0
COL_W = (R(CM, H * D, scale=0.4), R(CM, H * D, scale=0.4), R(CM, H * D, scale=0.4),
         R(CM, H * D, scale=0.4), R(H * D, CM, scale=0.4))
C.smap("s.msa_col_attn_all_to_all.dap4", {"dap": 4}, col_attn_sm, (P("dap"), P("dap")) + (P(),) * 5, P("dap"),
       col_attn, (R(S, N, CM), MSA_MASK) + COL_W,
       bugs=[("no-transpose", ["missing-collective"]), ("back-gather-offset0", ["wrong-offset"])])

# 3. triangle multiplicative update, incoming, pair rows over dap4


def tri_proj(z, pm, wa, wb, wga, wgb):
    x = ln(z)
    a = jax.nn.sigmoid(x @ wga) * (x @ wa) * pm[..., None]
    b = jax.nn.sigmoid(x @ wgb) * (x @ wb) * pm[..., None]
    return x, a, b


def tri_in(z, pm, wa, wb, wga, wgb, wg, wo):
    x, a, b = tri_proj(z, pm, wa, wb, wga, wgb)
    t = jnp.einsum("kic,kjc->ijc", a, b)
    return z + jax.nn.sigmoid(x @ wg) * (ln(t) @ wo)


def tri_in_sm(bug):
    def f(z, pm, wa, wb, wga, wgb, wg, wo):
        x, a, b = tri_proj(z, pm, wa, wb, wga, wgb)              # (n, N, C)
        if bug == "local-swapaxes":
            a_cols = jnp.swapaxes(a, 0, 1)
        else:
            a_cols = lax.all_to_all(a, "dap", 1, 0, tiled=True)  # a[:, I]
        b_full = lax.all_gather(b, "dap", axis=0, tiled=True)
        if bug == "outgoing-einsum":
            t = jnp.einsum("ikc,jkc->ijc", a, b_full)
        else:
            t = jnp.einsum("kic,kjc->ijc", a_cols, b_full)
        return z + jax.nn.sigmoid(x @ wg) * (ln(t) @ wo)
    return f


PAIR_MASK = mask_from_lengths(N, [N] * 13 + [0] * 3)
PAIR_MASK = PAIR_MASK * PAIR_MASK.T
TRI_W = tuple(R(CZ, CZ, scale=0.4) for _ in range(6))
C.smap("s.tri_mul_incoming_all_to_all.dap4", {"dap": 4}, tri_in_sm, (P("dap"), P("dap")) + (P(),) * 6, P("dap"),
       tri_in, (R(N, N, CZ), PAIR_MASK) + TRI_W,
       bugs=[("local-swapaxes", ["missing-collective"]), ("outgoing-einsum", ["wrong-operand"])])

# 4. triangle attention around the ending node via the transposed layout


def tri_att_core(z, wq, wk, wv, wb, wg, wo):
    """Starting-node attention without the residual: row i attends over k
    for each j with the bias b_jk."""
    x = ln(z)
    q, k, v = split_heads(x @ wq), split_heads(x @ wk), split_heads(x @ wv)
    return x, q, k, v


def tri_att_rows(x, q, k, v, b, wg, wo):
    logits = jnp.einsum("ijhd,ikhd->ihjk", q, k) / np.sqrt(D) + jnp.transpose(b, (2, 0, 1))[None]
    o = jnp.einsum("ihjk,ikhd->ijhd", jax.nn.softmax(logits, -1), v)
    g = jax.nn.sigmoid(x @ wg)
    return (g * o.reshape(g.shape)) @ wo


def tri_att_end(z, wq, wk, wv, wb, wg, wo):
    zt = jnp.swapaxes(z, 0, 1)
    x, q, k, v = tri_att_core(zt, wq, wk, wv, wb, wg, wo)
    return z + jnp.swapaxes(tri_att_rows(x, q, k, v, x @ wb, wg, wo), 0, 1)


def tri_att_end_sm(bug):
    def f(z, wq, wk, wv, wb, wg, wo):
        zt = jnp.swapaxes(lax.all_to_all(z, "dap", 1, 0, tiled=True), 0, 1)   # rows of z^T
        x, q, k, v = tri_att_core(zt, wq, wk, wv, wb, wg, wo)
        if bug == "bias-untransposed":
            b = lax.all_gather(ln(z) @ wb, "dap", axis=0, tiled=True)
        else:
            b = lax.all_gather(x @ wb, "dap", axis=0, tiled=True)
        ot = tri_att_rows(x, q, k, v, b, wg, wo)                 # rows I of core(z^T)
        if bug == "no-transpose-back":
            return z + ot
        return z + lax.all_to_all(jnp.swapaxes(ot, 0, 1), "dap", 0, 1, tiled=True)
    return f


ATT_W = (R(CZ, H * D, scale=0.4), R(CZ, H * D, scale=0.4), R(CZ, H * D, scale=0.4), R(CZ, H),
         R(CZ, H * D, scale=0.4), R(H * D, CZ, scale=0.4))
C.smap("s.tri_attn_ending_transposed_layout.dap4", {"dap": 4}, tri_att_end_sm, (P("dap"),) + (P(),) * 6, P("dap"),
       tri_att_end, (R(N, N, CZ),) + ATT_W,
       bugs=[("bias-untransposed", ["wrong-operand"]), ("no-transpose-back", ["missing-collective"])])

# 5. masked outer-product mean, residues over dap4
CO = 4


def opm(m, mask, w1, w2, wo, bo):
    x = ln(m)
    a = (x @ w1) * mask[..., None]
    b = (x @ w2) * mask[..., None]
    o = jnp.einsum("sic,sjd->ijcd", a, b)
    o = o.reshape(o.shape[:2] + (CO * CO,)) @ wo + bo
    norm = jnp.einsum("si,sj->ij", mask, mask)[..., None]
    return o / (1e-3 + norm)


def opm_sm(bug):
    def f(m, mask, w1, w2, wo, bo):
        x = ln(m)                                                # (S, n, C)
        a = (x @ w1) * mask[..., None]
        b = (x @ w2) * mask[..., None]
        mask_full = lax.all_gather(mask, "dap", axis=1, tiled=True)
        if bug == "a-b-swapped":
            a_full = lax.all_gather(a, "dap", axis=1, tiled=True)
            o = jnp.einsum("sjc,sid->ijcd", a_full, b)
        else:
            b_full = lax.all_gather(b, "dap", axis=1, tiled=True)
            o = jnp.einsum("sic,sjd->ijcd", a, b_full)
        o = o.reshape(o.shape[:2] + (CO * CO,)) @ wo + bo
        if bug == "norm-local-mask":
            norm = jnp.einsum("si,sj->ij", mask, jnp.tile(mask, (1, 4)))[..., None]
        else:
            norm = jnp.einsum("si,sj->ij", mask, mask_full)[..., None]
        return o / (1e-3 + norm)
    return f


OPM_MASK = np.ones((S, N), np.float32)
OPM_MASK[2:, 10:] = 0.0
OPM_MASK[5:, :3] = 0.0
OPM_MASK[4, 6] = 0.0
C.smap("s.outer_product_mean_masked_residues.dap4", {"dap": 4}, opm_sm,
       (P(None, "dap"), P(None, "dap"), P(), P(), P(), P()), P("dap"), opm,
       (R(S, N, CM), OPM_MASK, R(CM, CO, scale=0.5), R(CM, CO, scale=0.5), R(CO * CO, CZ, scale=0.3), R(CZ)),
       bugs=[("norm-local-mask", ["wrong-operand"]), ("a-b-swapped", ["wrong-operand"])])

# 6. invariant point attention, residues over dap4
CS, PQ, PV = 8, 2, 2


def quat_to_rot(q):
    q = q / jnp.linalg.norm(q, axis=-1, keepdims=True)
    a, b, c, d = q[..., 0], q[..., 1], q[..., 2], q[..., 3]
    return jnp.stack([
        jnp.stack([a * a + b * b - c * c - d * d, 2 * (b * c - a * d), 2 * (b * d + a * c)], -1),
        jnp.stack([2 * (b * c + a * d), a * a - b * b + c * c - d * d, 2 * (c * d - a * b)], -1),
        jnp.stack([2 * (b * d - a * c), 2 * (c * d + a * b), a * a - b * b - c * c + d * d], -1)], -2)


def apply_frame(rot, t, p):
    """rot (n, 3, 3), t (n, 3), p (n, ..., 3) in the local frames -> global."""
    extra = p.ndim - 2
    r = rot.reshape(rot.shape[:1] + (1,) * extra + (3, 3))
    return jnp.einsum("n...ab,n...b->n...a", jnp.broadcast_to(r, p.shape[:-1] + (3, 3)), p) + \
        t.reshape(t.shape[:1] + (1,) * extra + (3,))


def invert_apply(rot, t, p):
    extra = p.ndim - 2
    d = p - t.reshape(t.shape[:1] + (1,) * extra + (3,))
    r = rot.reshape(rot.shape[:1] + (1,) * extra + (3, 3))
    return jnp.einsum("n...ba,n...b->n...a", jnp.broadcast_to(r, p.shape[:-1] + (3, 3)), d)


def ipa_parts(s, rot, t, p):
    q = split_heads(s @ p["wq"])
    k = split_heads(s @ p["wk"])
    v = split_heads(s @ p["wv"])
    qp = apply_frame(rot, t, (s @ p["wqp"]).reshape(s.shape[0], H, PQ, 3))
    kp = (s @ p["wkp"]).reshape(s.shape[0], H, PQ, 3)
    vp = (s @ p["wvp"]).reshape(s.shape[0], H, PV, 3)
    return q, k, v, qp, kp, vp


def ipa_attend(s, z, rot, t, p, q, k, v, qp, kpg, vpg, inv=invert_apply):
    wc = np.sqrt(2.0 / (9.0 * PQ))
    gamma = jax.nn.softplus(p["hw"])
    b = z @ p["wb"]                                             # (n, N, H)
    d2 = jnp.sum(jnp.square(qp[:, None] - kpg[None]), (-1, -2))  # (n, N, H)
    logits = (jnp.einsum("ihd,jhd->ijh", q, k) / np.sqrt(D) + b - 0.5 * gamma * wc * d2) * np.sqrt(1 / 3)
    a = jax.nn.softmax(logits, 1)                               # over j
    o = jnp.einsum("ijh,jhd->ihd", a, v).reshape(s.shape[0], H * D)
    op = jnp.einsum("ijh,jhpx->ihpx", a, vpg)                   # global frame
    opl = inv(rot, t, op)
    onorm = jnp.sqrt(jnp.sum(jnp.square(opl), -1) + 1e-8).reshape(s.shape[0], -1)
    opair = jnp.einsum("ijh,ijc->ihc", a, z).reshape(s.shape[0], -1)
    feats = jnp.concatenate([o, opl.reshape(s.shape[0], -1), onorm, opair], -1)
    return s + feats @ p["wo"]


def ipa(s, z, rot, t, p):
    q, k, v, qp, kp, vp = ipa_parts(s, rot, t, p)
    return ipa_attend(s, z, rot, t, p, q, k, v, qp, apply_frame(rot, t, kp), apply_frame(rot, t, vp))


def rotate_wrong(rot, t, p):
    extra = p.ndim - 2
    d = p - t.reshape(t.shape[:1] + (1,) * extra + (3,))
    r = rot.reshape(rot.shape[:1] + (1,) * extra + (3, 3))
    return jnp.einsum("n...ab,n...b->n...a", jnp.broadcast_to(r, p.shape[:-1] + (3, 3)), d)


def ipa_sm(bug):
    def f(s, z, rot, t, p):
        q, k, v, qp, kp, vp = ipa_parts(s, rot, t, p)
        if bug == "key-frames-local-tiled":
            kpg = apply_frame(jnp.tile(rot, (4, 1, 1)), jnp.tile(t, (4, 1)),
                              lax.all_gather(kp, "dap", axis=0, tiled=True))
        else:
            kpg = lax.all_gather(apply_frame(rot, t, kp), "dap", axis=0, tiled=True)
        vpg = lax.all_gather(apply_frame(rot, t, vp), "dap", axis=0, tiled=True)
        kg = lax.all_gather(k, "dap", axis=0, tiled=True)
        vg = lax.all_gather(v, "dap", axis=0, tiled=True)
        inv = rotate_wrong if bug == "out-rotated-by-R" else invert_apply
        return ipa_attend(s, z, rot, t, p, q, kg, vg, qp, kpg, vpg, inv=inv)
    return f


def ipa_params():
    fo = H * D + H * PV * 3 + H * PV + H * CZ
    return {"wq": R(CS, H * D, scale=0.4), "wk": R(CS, H * D, scale=0.4), "wv": R(CS, H * D, scale=0.4),
            "wqp": R(CS, H * PQ * 3, scale=0.4), "wkp": R(CS, H * PQ * 3, scale=0.4),
            "wvp": R(CS, H * PV * 3, scale=0.4), "wb": R(CZ, H, scale=0.5), "hw": R(H, scale=0.3),
            "wo": R(fo, CS, scale=0.2)}


ROT = np.asarray(quat_to_rot(jnp.asarray(R(N, 4))), np.float32)
TRANS = R(N, 3, scale=3.0)
IPA_P = ipa_params()
IPA_ARGS = (R(N, CS), R(N, N, CZ), ROT, TRANS, IPA_P)
IPA_SPECS = (P("dap"), P("dap"), P("dap"), P("dap"), jax.tree.map(lambda _: P(), IPA_P))
C.smap("s.invariant_point_attention.dap4", {"dap": 4}, ipa_sm, IPA_SPECS, P("dap"), ipa, IPA_ARGS,
       bugs=[("key-frames-local-tiled", ["missing-collective"]), ("out-rotated-by-R", ["wrong-operand"])])

# 7. FAPE on r2 x c4: frames over r, atoms over c
NA = 32


def fape(rp, tp, rt, tt, fmask, xp, xt, amask):
    lp = jnp.einsum("iba,ijb->ija", rp, xp[None] - tp[:, None])
    lt = jnp.einsum("iba,ijb->ija", rt, xt[None] - tt[:, None])
    d = jnp.sqrt(jnp.sum(jnp.square(lp - lt), -1) + 1e-4)
    w = fmask[:, None] * amask[None]
    return jnp.sum(jnp.minimum(d, 10.0) * w) / (jnp.sum(w) + 1e-8) / 10.0


def fape_sm(bug):
    def f(rp, tp, rt, tt, fmask, xp, xt, amask):
        lp = jnp.einsum("iba,ijb->ija", rp, xp[None] - tp[:, None])
        lt = jnp.einsum("iba,ijb->ija", rt, xt[None] - tt[:, None])
        d = jnp.sqrt(jnp.sum(jnp.square(lp - lt), -1) + 1e-4)
        w = fmask[:, None] * amask[None]
        num, den = jnp.sum(jnp.minimum(d, 10.0) * w), jnp.sum(w)
        if bug == "pmean-local-means":
            return pmean(num / (den + 1e-8), ("r", "c")) / 10.0
        axes = "r" if bug == "psum-r-only" else ("r", "c")
        return psum(num, axes) / (psum(den, axes) + 1e-8) / 10.0
    return f


FMASK = mask_from_lengths(N, [13])[0]
AMASK = mask_from_lengths(NA, [27])[0]
XT = R(NA, 3, scale=4.0)
FAPE_ARGS = (ROT, TRANS, np.asarray(quat_to_rot(jnp.asarray(R(N, 4))), np.float32), R(N, 3, scale=3.0), FMASK,
             XT + R(NA, 3, scale=2.0), XT, AMASK)
FAPE_SPECS = (P("r"), P("r"), P("r"), P("r"), P("r"), P("c"), P("c"), P("c"))
C.smap("s.fape_frames_r_atoms_c.r2xc4", {"r": 2, "c": 4}, fape_sm, FAPE_SPECS, P(), fape, FAPE_ARGS,
       bugs=[("psum-r-only", ["missing-all-reduce"]), ("pmean-local-means", ["wrong-reduction"])])

# 8. recycling training step, batch over dp4
NB, NBIN, NAA = 4, 6, 5


def recyc_block(p, z0, prev):
    z = z0 + ln(prev) @ p["wrec"]
    return z + jax.nn.relu(ln(z) @ p["w1"]) @ p["w2"]


def recyc_loss(p, aa, tgt, pm):
    s = jax.nn.one_hot(aa, NAA) @ p["emb"]                      # (B, N, C)
    z0 = (s @ p["wl"])[:, :, None] + (s @ p["wr"])[:, None]
    prev = jnp.zeros_like(z0)
    for _ in range(2):
        prev = lax.stop_gradient(recyc_block(p, z0, prev))
    z = recyc_block(p, z0, prev)
    logp = jax.nn.log_softmax(z @ p["wd"], -1)
    ce = -jnp.take_along_axis(logp, tgt[..., None], -1)[..., 0]
    return jnp.mean(jnp.sum(ce * pm, (1, 2)) / jnp.sum(pm, (1, 2)))


RC_OPT = optax.sgd(0.1, momentum=0.9)


def recyc_step(p, st, aa, tgt, pm):
    loss, g = jax.value_and_grad(recyc_loss)(p, aa, tgt, pm)
    up, st = RC_OPT.update(g, st, p)
    return optax.apply_updates(p, up), st, loss


def recyc_sm(bug):
    def loss_nsg(p, aa, tgt, pm):
        s = jax.nn.one_hot(aa, NAA) @ p["emb"]
        z0 = (s @ p["wl"])[:, :, None] + (s @ p["wr"])[:, None]
        prev = jnp.zeros_like(z0)
        for _ in range(2):
            prev = recyc_block(p, z0, prev)
        z = recyc_block(p, z0, prev)
        logp = jax.nn.log_softmax(z @ p["wd"], -1)
        ce = -jnp.take_along_axis(logp, tgt[..., None], -1)[..., 0]
        return jnp.mean(jnp.sum(ce * pm, (1, 2)) / jnp.sum(pm, (1, 2)))

    def f(p, st, aa, tgt, pm):
        lf = loss_nsg if bug == "no-stop-gradient" else recyc_loss
        loss, g = jax.value_and_grad(lf)(p, aa, tgt, pm)
        if bug != "grads-not-pmean":
            g = pmean(g, "dp")
        up, st = RC_OPT.update(g, st, p)
        return optax.apply_updates(p, up), st, pmean(loss, "dp")
    return f


RC_P = {"emb": R(NAA, CZ, scale=0.5), "wl": R(CZ, CZ, scale=0.4), "wr": R(CZ, CZ, scale=0.4),
        "wrec": R(CZ, CZ, scale=0.4), "w1": R(CZ, 2 * CZ, scale=0.4), "w2": R(2 * CZ, CZ, scale=0.3),
        "wd": R(CZ, NBIN, scale=0.4)}
RC_ST = jax.tree.map(np.asarray, RC_OPT.init(RC_P))
RC_ST = jax.tree.map(lambda x: x + R(*x.shape, scale=0.05) if np.ndim(x) else x, RC_ST)
RC_PM = np.stack([np.outer(mask_from_lengths(N, [L])[0], mask_from_lengths(N, [L])[0]) for L in (16, 12, 9, 14)])
RC_ARGS = (RC_P, RC_ST, I(0, NAA, NB, N), I(0, NBIN, NB, N, N), RC_PM.astype(np.float32))
rep = lambda t: jax.tree.map(lambda _: P(), t)  # noqa: E731
RC_SPECS = (rep(RC_P), rep(RC_ST), P("dp"), P("dp"), P("dp"))
RC_OUT = (rep(RC_P), rep(RC_ST), P())
C.smap("s.recycling_train_step_sgd.dp4", {"dp": 4}, recyc_sm, RC_SPECS, RC_OUT, recyc_step, RC_ARGS,
       bugs=[("no-stop-gradient", ["wrong-gradient"]), ("grads-not-pmean", ["missing-all-reduce"])])

# 9. dense EGNN with cutoff and padded atoms, atoms over sp4
F, RC2 = 8, 4.0


def egnn_msgs(h_i, h_j, d2, p):
    hi = jnp.broadcast_to(h_i[:, None], d2.shape + (h_i.shape[-1],))
    hj = jnp.broadcast_to(h_j[None], d2.shape + (h_j.shape[-1],))
    e = jnp.concatenate([hi, hj, d2[..., None]], -1)
    return jax.nn.silu(jax.nn.silu(e @ p["we1"]) @ p["we2"])


def egnn_update(x_i, h_i, m_i, x_j, h_j, m_j, gi, gj, p, sign=1.0):
    rel = sign * (x_i[:, None] - x_j[None])
    d2 = jnp.sum(jnp.square(x_i[:, None] - x_j[None]), -1)
    adj = (d2 < RC2) & (m_i[:, None] > 0) & (m_j[None] > 0) & (gi[:, None] != gj[None])
    adj = adj.astype(jnp.float32)
    msg = egnn_msgs(h_i, h_j, d2, p) * adj[..., None]
    deg = jnp.sum(adj, 1, keepdims=True)
    x_new = x_i + jnp.sum(rel * (msg @ p["wx"]), 1) / (1.0 + deg)
    h_new = h_i + jax.nn.silu(jnp.concatenate([h_i, jnp.sum(msg, 1)], -1) @ p["wh"])
    return x_new * m_i[:, None], h_new * m_i[:, None]


def egnn(x, h, m, p):
    g = jnp.arange(x.shape[0])
    return egnn_update(x, h, m, x, h, m, g, g, p)


def egnn_sm(bug):
    def f(x, h, m, p):
        n = x.shape[0]
        xg = lax.all_gather(x, "sp", axis=0, tiled=True)
        hg = lax.all_gather(h, "sp", axis=0, tiled=True)
        mg = lax.all_gather(m, "sp", axis=0, tiled=True)
        gi = jnp.arange(n) + (0 if bug == "self-local-index" else idx("sp") * n)
        gj = jnp.arange(xg.shape[0])
        mi = mg[:n] if bug == "recv-mask-offset0" else m
        return egnn_update(x, h, mi, xg, hg, mg, gi, gj, p, sign=-1.0 if bug == "rel-sign" else 1.0)
    return f


EG_P = {"we1": R(2 * F + 1, F, scale=0.3), "we2": R(F, F, scale=0.3), "wx": R(F, 1, scale=0.3),
        "wh": R(2 * F, F, scale=0.3)}
EG_MASK = mask_from_lengths(NA, [26])[0]
EG_ARGS = (R(NA, 3, scale=1.2), R(NA, F), EG_MASK, EG_P)
C.smap("s.egnn_dense_cutoff_padding.sp4", {"sp": 4}, egnn_sm, (P("sp"), P("sp"), P("sp"), rep(EG_P)),
       (P("sp"), P("sp")), egnn, EG_ARGS,
       bugs=[("self-local-index", ["wrong-offset"]), ("rel-sign", ["wrong-sign"]),
             ("recv-mask-offset0", ["wrong-offset"])])

# 10. pTM from PAE logits, rows over dap4
NP, PBIN = 48, 16
STEP = 31.0 / (PBIN - 2)
CENTERS = np.linspace(0.0, 31.0, PBIN - 1) + STEP / 2
CENTERS = np.concatenate([CENTERS, CENTERS[-1:] + STEP]).astype(np.float32)


def ptm_terms(logits, mask_rows, mask_cols, nres):
    d0 = 1.24 * jnp.cbrt(jnp.maximum(nres, 19.0) - 15.0) - 1.8
    tm = 1.0 / (1.0 + jnp.square(CENTERS / d0))
    term = jnp.sum(jax.nn.softmax(logits, -1) * tm, -1)         # (n, N)
    per = jnp.sum(term * mask_cols[None], -1) / (1e-8 + jnp.sum(mask_cols))
    return per * mask_rows


def ptm(logits, mask):
    mask = mask.astype(jnp.float32)
    return jnp.max(ptm_terms(logits, mask, mask, jnp.sum(mask)))


def ptm_sm(bug):
    def f(logits, mask):
        mask = mask.astype(jnp.float32)
        mask_full = lax.all_gather(mask, "dap", axis=0, tiled=True)
        nres = jnp.sum(mask) if bug == "d0-local-count" else psum(jnp.sum(mask), "dap")
        best = jnp.max(ptm_terms(logits, mask, mask_full, nres))
        return best if bug == "no-pmax" else pmax(best, "dap")
    return f


PTM_MASK = mask_from_lengths(NP, [41])[0] > 0
PTM_LOGITS = R(NP, NP, PBIN, scale=1.5)
PTM_LOGITS[24:36, :, :4] += 2.5   # rows of the third block are confident: the best alignment lives there
C.smap("s.ptm_from_pae_logits.dap4", {"dap": 4}, ptm_sm, (P("dap"), P("dap")), P(), ptm, (PTM_LOGITS, PTM_MASK),
       bugs=[("d0-local-count", ["wrong-operand"]), ("no-pmax", ["missing-all-reduce"])])

# 11. training step on dp2 x dap4 (check_vma=True): OPM + transition + distogram
NB2, S2, N2 = 2, 8, 8
TS_OPT = optax.sgd(0.05, momentum=0.9)


def ts_forward(p, msa, S_total, psum_fn=lambda x: x):
    x = ln(msa)                                                 # (B, s, N, C)
    a, b = x @ p["w1"], x @ p["w2"]
    o = psum_fn(jnp.einsum("bsic,bsjd->bijcd", a, b)) / S_total
    z = o.reshape(o.shape[:3] + (CO * CO,)) @ p["wo"] + p["bo"]
    z = z + jax.nn.relu(ln(z) @ p["t1"]) @ p["t2"]
    return z @ p["wd"]


def ts_ce(logits, tgt):
    logp = jax.nn.log_softmax(logits, -1)
    return -jnp.mean(jnp.take_along_axis(logp, tgt[..., None], -1))


def ts_step(p, st, msa, tgt):
    loss, g = jax.value_and_grad(lambda p: ts_ce(ts_forward(p, msa, S2), tgt))(p)
    up, st = TS_OPT.update(g, st, p)
    return optax.apply_updates(p, up), st, loss


def ts_sm(bug):
    def f(p, st, msa, tgt):
        s_div = msa.shape[1] if bug == "opm-local-seq-count" else S2

        def lossf(p):
            lg = ts_forward(p, msa, s_div, lambda x: psum(x, "dap"))
            l = ts_ce(lg, tgt)
            return psum(l, "dp") if bug == "loss-psum-dp" else pmean(l, "dp")
        loss, g = jax.value_and_grad(lossf)(p)
        up, st = TS_OPT.update(g, st, p)
        return optax.apply_updates(p, up), st, loss
    return f


TS_P = {"w1": R(CM, CO, scale=0.5), "w2": R(CM, CO, scale=0.5), "wo": R(CO * CO, CZ, scale=0.3), "bo": R(CZ),
        "t1": R(CZ, 2 * CZ, scale=0.4), "t2": R(2 * CZ, CZ, scale=0.3), "wd": R(CZ, NBIN, scale=0.4)}
TS_ST = jax.tree.map(np.asarray, TS_OPT.init(TS_P))
TS_ST = jax.tree.map(lambda x: x + R(*x.shape, scale=0.05) if np.ndim(x) else x, TS_ST)
C.smap("s.opm_distogram_train_step.dp2xdap4", {"dp": 2, "dap": 4}, ts_sm,
       (rep(TS_P), rep(TS_ST), P("dp", "dap"), P("dp")), (rep(TS_P), rep(TS_ST), P()), ts_step,
       (TS_P, TS_ST, R(NB2, S2, N2, CM), I(0, NBIN, NB2, N2, N2)), check_vma=True,
       bugs=[("loss-psum-dp", ["wrong-scale"]), ("opm-local-seq-count", ["wrong-scale"])])

# 12. backbone update and clash loss, residues over sp4
LIT = np.array([[-0.525, 1.363, 0.0], [0.0, 0.0, 0.0], [1.526, 0.0, 0.0]], np.float32)


def backbone(s, rot, t, wq, wt):
    u = s @ wq                                                  # (n, 3)
    ru = quat_to_rot(jnp.concatenate([jnp.ones_like(u[:, :1]), u], -1))
    rot2 = jnp.einsum("nab,nbc->nac", rot, ru)
    t2 = jnp.einsum("nab,nb->na", rot, s @ wt) + t
    atoms = jnp.einsum("nab,kb->nka", rot2, LIT) + t2[:, None]  # (n, 3, 3)
    return rot2, t2, atoms


def clash_terms(xi, ri, mi, xj, rj, mj):
    d = jnp.sqrt(jnp.sum(jnp.square(xi[:, None] - xj[None]), -1) + 1e-6)
    far = jnp.abs(ri[:, None] - rj[None]) > 1
    w = far * mi[:, None] * mj[None]
    return jnp.sum(jax.nn.relu(3.0 - d) * w)


def bb_clash(s, rot, t, rmask, wq, wt):
    rot2, t2, atoms = backbone(s, rot, t, wq, wt)
    x = atoms.reshape(-1, 3)
    res = jnp.repeat(jnp.arange(s.shape[0]), 3)
    am = jnp.repeat(rmask, 3)
    return rot2, t2, 0.5 * clash_terms(x, res, am, x, res, am)


def bb_sm(bug):
    def f(s, rot, t, rmask, wq, wt):
        n = s.shape[0]
        rot2, t2, atoms = backbone(s, rot, t, wq, wt)
        x = atoms.reshape(-1, 3)
        xg = lax.all_gather(x, "sp", axis=0, tiled=True)
        mg = lax.all_gather(rmask, "sp", axis=0, tiled=True)
        off = 0 if bug == "res-index-local" else idx("sp") * n
        ri = jnp.repeat(jnp.arange(n) + off, 3)
        rj = jnp.repeat(jnp.arange(xg.shape[0] // 3), 3)
        c = 0.5 * clash_terms(x, ri, jnp.repeat(rmask, 3), xg, rj, jnp.repeat(mg, 3))
        return rot2, t2, (c if bug == "clash-not-psum" else psum(c, "sp"))
    return f


BB_T = np.cumsum(R(N, 3, scale=1.5), 0).astype(np.float32)
C.smap("s.backbone_update_clash_loss.sp4", {"sp": 4}, bb_sm,
       (P("sp"), P("sp"), P("sp"), P("sp"), P(), P()), (P("sp"), P("sp"), P()), bb_clash,
       (R(N, CS), ROT, BB_T, mask_from_lengths(N, [14])[0], R(CS, 3, scale=0.2), R(CS, 3, scale=0.3)),
       bugs=[("res-index-local", ["wrong-offset"]), ("clash-not-psum", ["missing-all-reduce"])])

# 13. axial MSA block on r2 x c4: sequences over r, residues over c; row
# attention gathers over c, column attention after an all_to_all over r


def axial2d_sm(bug):
    row = row_attn_sm(None)

    def f(m, z, mask, rw, cw):
        m = row(m, z, *rw)                                       # (s, n, C)
        mt = lax.all_to_all(m, "r", 1, 0, tiled=True)            # (S, n / 2, C)
        kt = lax.all_to_all(mask, "r", 1, 0, tiled=True)
        if bug == "mask-not-moved":
            kt = jnp.tile(mask[:, :mt.shape[1]], (2, 1))
        out = col_attn(mt, kt, *cw)
        if bug == "back-rows-c-index":
            full = lax.all_gather(out, "r", axis=1, tiled=True)  # (S, n, C)
            return lax.dynamic_slice_in_dim(full, (idx("c") % 2) * m.shape[0], m.shape[0], 0)
        return lax.all_to_all(out, "r", 0, 1, tiled=True)
    return f


def axial2d(m, z, mask, rw, cw):
    return col_attn(row_attn(m, z, *rw), mask, *cw)


C.smap("s.axial_msa_block_2d_all_to_all.r2xc4", {"r": 2, "c": 4}, axial2d_sm,
       (P("r", "c"), P("c"), P("r", "c"), (P(),) * 6, (P(),) * 5), P("r", "c"), axial2d,
       (R(S, N, CM), R(N, N, CZ), MSA_MASK, ROW_W, COL_W),
       bugs=[("mask-not-moved", ["wrong-operand"]), ("back-rows-c-index", ["wrong-axis"])])

# 14. batched outer-product mean in bf16 with f32 accumulation, dp2 x dap4:
# MSA over sequences, the partial sums psum_scatter'd onto the pair rows


def opm_bf16(m, w1, w2, wo, bo):
    x = ln(m).astype(jnp.bfloat16)                               # (B, S, N, C)
    a, b = x @ w1.astype(jnp.bfloat16), x @ w2.astype(jnp.bfloat16)
    o = jnp.einsum("bsic,bsjd->bijcd", a, b, preferred_element_type=jnp.float32) / S
    return o.reshape(o.shape[:3] + (CO * CO,)) @ wo + bo


def opm_bf16_sm(bug):
    def f(m, w1, w2, wo, bo):
        x = ln(m).astype(jnp.bfloat16)
        a, b = x @ w1.astype(jnp.bfloat16), x @ w2.astype(jnp.bfloat16)
        part = jnp.einsum("bsic,bsjd->bijcd", a, b, preferred_element_type=jnp.float32)
        if bug == "scatter-along-j":
            o = jnp.swapaxes(lax.psum_scatter(part, "dap", scatter_dimension=2, tiled=True), 1, 2)
        else:
            o = lax.psum_scatter(part, "dap", scatter_dimension=1, tiled=True)
        o = o / (m.shape[1] if bug == "local-seq-count" else S)
        return o.reshape(o.shape[:3] + (CO * CO,)) @ wo + bo
    return f


C.smap("s.opm_bf16_psum_scatter_rows.dp2xdap4", {"dp": 2, "dap": 4}, opm_bf16_sm,
       (P("dp", "dap"), P(), P(), P(), P()), P("dp", "dap"), opm_bf16,
       (R(2, S, N, CM), R(CM, CO, scale=0.5), R(CM, CO, scale=0.5), R(CO * CO, CZ, scale=0.3), R(CZ)),
       bugs=[("scatter-along-j", ["wrong-shard-dim"]), ("local-seq-count", ["wrong-scale"])])

# GSPMD pairs
C.gspmd("g.invariant_point_attention.dap4", {"dap": 4}, IPA_SPECS, P("dap"), ipa, IPA_ARGS)
C.gspmd("g.fape_frames_r_atoms_c.r2xc4", {"r": 2, "c": 4}, FAPE_SPECS, P(), fape, FAPE_ARGS)

AX_MESH = None


def axial_block(m, z, mask, rw, cw):
    from jax.sharding import NamedSharding
    m = row_attn(m, z, *rw)
    m = lax.with_sharding_constraint(m, NamedSharding(AX_MESH, P(None, "dap")))
    m = col_attn(m, mask, *cw)
    return lax.with_sharding_constraint(m, NamedSharding(AX_MESH, P("dap")))


def _ax_mesh():
    global AX_MESH
    from scalify_jax import make_mesh
    AX_MESH = make_mesh({"dap": 4})


_ax_mesh()
C.gspmd("g.axial_msa_block_wsc.dap4", {"dap": 4}, (P("dap"), P("dap"), P("dap"), (P(),) * 6, (P(),) * 5), P("dap"),
        axial_block, (R(S, N, CM), R(N, N, CZ), MSA_MASK, ROW_W, COL_W))
C.gspmd("g.recycling_train_step_sgd.dp4", {"dp": 4}, RC_SPECS, RC_OUT, recyc_step, RC_ARGS)
C.gspmd("g.egnn_dense_cutoff_padding.sp4", {"sp": 4}, (P("sp"), P("sp"), P("sp"), rep(EG_P)), (P("sp"), P("sp")),
        egnn, EG_ARGS)


def tri_in_then_end(z, pm, tw, aw):
    return tri_att_end(tri_in(z, pm, *tw), *aw)


C.gspmd("g.tri_incoming_then_ending_attn.dap4", {"dap": 4}, (P("dap"), P("dap"), (P(),) * 6, (P(),) * 6), P("dap"),
        tri_in_then_end, (R(N, N, CZ), PAIR_MASK, TRI_W, ATT_W))

C.gspmd("g.axial_msa_block_2d.r2xc4", {"r": 2, "c": 4}, (P("r", "c"), P("c"), P("r", "c"), (P(),) * 6, (P(),) * 5),
        P("r", "c"), axial2d, (R(S, N, CM), R(N, N, CZ), MSA_MASK, ROW_W, COL_W))

C.finish()
