"""samples/fresh85: an 85th batch of programs as a user writes them, on the theme of equivariant and molecular models under sharding in current JAX / optax (SchNet continuous filters from radial bases with cutoff envelopes, EGNN and PaiNN message passing with neighbour lists passed in as edge-index inputs sharded by source or by destination owner, real spherical harmonics up to l = 2 and scalar x vector tensor products with channels over tp, energies summed per molecule by segment sums with atoms sharded, forces as -dE/dx, periodic boxes with the minimum-image convention, an energy + force training step), none of them an idiom of samples/fresh .. fresh26, probe, train or wild.
Conventions: 32 atoms in 4 molecules of 5, 11, 7 and 9 atoms (molecules
straddle the atom blocks of every mesh); neighbour lists are (src, dst)
int32 vectors of global atom ids within one molecule, src != dst; "dst
owner" lists hold, in block b, only edges whose dst lies in atom block b
(the same for "src owner"); messages flow src -> dst.
shard_map families:
 1. SchNet cfconv with the edge list over sp8 (any order), atoms and
    features replicated: Gaussian RBF of |x_dst - x_src|, cosine cutoff
    envelope at an adaptive cutoff 1.05 max_e d (pmax over sp), filter
    network ssp(rbf W1) W2 times envelope, messages (h Win)[src] * filter
    segment-summed to dst and psum'd, residual ssp output layer. Bugs:
    cutoff from the local maximum (no pmax), messages pmean'd instead of
    psum'd.
 2. per-molecule energy readout with atoms over sp8: atomic energies from
    an MLP of the features plus a per-element reference energy looked up
    by atomic number, segment_sum by molecule id (num_segments 4), psum'd;
    also energy per atom with psum'd atom counts. Bugs: the segment sum
    not summed across devices, atom counts local.
 3. an EGNN layer, atoms over sp4, edges by dst owner: h and x all_gather'd,
    rel = x_dst - x_src, messages from (h_dst, h_src, |rel|^2), coordinate
    update by the mean over incoming edges of rel * tanh(m Wx), node update
    from summed messages; the local segment ids dst - block offset. Bugs:
    relative vectors with the wrong sign, dst used without the offset.
 4. a PaiNN message block, atoms over sp4, edges by src owner: scalar and
    vector features (n, 3, F) of the local sources, filter from RBF times
    cosine cutoff, ds / dv_v / dv_s split, messages scattered to all 32
    atoms then psum_scatter'd (tiled) to the owner blocks. Bugs: own slice
    of the local partial sums (no reduction over edges owned elsewhere),
    unit vectors with the wrong sign.
 5. real spherical harmonics up to l = 2 of edge vectors and a scalar x
    Y_lm tensor product, dp2 (frames) x tp4 (feature channels): per-l
    radial weights from rbf, layer-normed over the channels (mean and
    variance psum'd over tp), aggregation to dst, per-l invariant norms and
    an l = 1 vector output contracted over channels (psum over tp). Bugs:
    layer norm over the local channel shard, the relative vector with the
    wrong sign (the vector output flips), the channel contraction not
    psum'd.
 6. energies per molecule and forces as -grad E, atoms over sp4, edges by
    dst owner, positions all_gather'd, the gradient with respect to the
    gathered positions psum_scatter'd back to the owners by hand. Bugs:
    forces from the own block of the local gradient only, energies not
    psum'd, forces as +grad.
 7. a Morse pair potential in a periodic box with the minimum-image
    convention (d - L round(d / L)) and a DimeNet polynomial envelope,
    dp2 (frames with their own box) x sp4 (edges); energy per frame psum'd
    over sp, forces from jax.grad of the local edge energy psum'd over sp.
    Bugs: forces not psum'd, energy psum'd over (dp, sp) (frames mixed),
    minimum image by floor.
 8. an energy + force training step of a tiny continuous-filter potential,
    molecules (6 atoms, 12 edges each) over dp4: forces -grad_x E inside
    the loss, jax.grad for the parameters (a second derivative), gradients
    pmean'd, optax.adam. Bugs: gradients not pmean'd, forces as +grad.
 9. SchNet filter with the RBF centres over tp4 (16 centres, 4 per device,
    centres built on device from axis_index), the filter's first dense
    layer row-parallel (psum over tp), frames over dp2. Bugs: centres
    without the rank offset, the radial basis of the local shard only (no
    psum of the row-parallel product).
10. a cfconv with edges by dst owner whose source atoms' positions and
    features travel a ring of ppermutes (lax.fori_loop, 4 steps), the
    visiting block (me - s) mod 4, edges masked to sources in it. Bugs: the
    visiting block computed as (me + s) mod 4 (ring direction), one ring
    step short.
11. the same cfconv written with lax.scan, blocks travelling to the left
    ((me + s) mod 4), per-edge messages stacked by the scan and segment-
    summed to the local destinations after the loop. Bug: the visiting
    block computed for the other direction.
12. energies per molecule and forces of 6. with the gradient taken with
    respect to the local position block through the all_gather (whose
    transpose psum_scatters the contributions of edges owned elsewhere).
    Bugs: the gradient of the psum'd energy (check_vma=False: four times
    the forces), energies not psum'd.
13. an EGNN layer whose edge MLP's hidden layer (32) is over tp4 (column-
    then row-parallel, psum before the bias and activation), frames over
    dp2. Bugs: the row-parallel product not psum'd, activation applied
    before the psum.
14. per-molecule energies (8 molecules) returned over sp4 by a tiled
    psum_scatter of the local segment sums, the atom MLP in bf16 with f32
    accumulation. Bugs: own slice of the local partial sums, the scatter
    divided by the axis size.
15. a PaiNN update block with the channels over tp4: U v and V v with
    column-parallel U, V; the MLP's rows for ||V v|| row-parallel (psum);
    the three gates sliced at the rank's channel offset. Bugs: the norm
    rows not psum'd, channel slices at offset 0.
GSPMD pairs (jax.jit with in/out shardings): 11. the cfconv of 1. with
edges over sp8; 12. energies and forces of 6. with atoms and edges over
sp4; 13. the spherical-harmonic tensor product of 5. on dp2 x tp4; 14. the
training step of 8. with molecules over dp4; 15. the periodic Morse energy
and forces of 7. on dp2 x sp4; 16. the EGNN layer of 3. with atoms and
edges over sp4; 17. the PaiNN message of 4. with the feature channels over
tp4 and the edges over dp2; 18. the EGNN of 13. on dp2 x tp4.
Findings while writing: 10. (scatter and gather on owner-local ids inside
a fori_loop) is reported a mismatch confirmed by execution on the
checker's random integers, which put edges off their owners; 11. and 3.,
with the same owner-local ids outside a loop, are called undecided.
Numerics: every correct pair agrees with its baseline at rounding level;
every bug variant differs clearly (see "numerics").
Run from the repository root: bash samples/gen/run_fresh85.sh [SUBSTR...]
"""
import sys
import numpy as np
import jax, jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec as P
import optax
sys.path.insert(0, "samples/gen")  # run from the repository root (run_fresh85.sh)
from fresh_lib import Corpus, seeded  # noqa: E402

SCRIPT = "samples/gen/fresh85.py"
C = Corpus("samples/fresh85", SCRIPT, "samples/gen/run_fresh85.sh", sys.argv[1:])
rng, R, I = seeded(8585)
psum, pmax, pmean, idx = lax.psum, lax.pmax, lax.pmean, lax.axis_index
segsum = jax.ops.segment_sum

N, M, F, K = 32, 4, 16, 8
SIZES = [5, 11, 7, 9]
MOL = np.repeat(np.arange(M), SIZES).astype(np.int32)
STARTS = np.cumsum([0] + SIZES)[:-1]


def mol_edges(nblk, per, owner):
    """per edges for each of nblk atom blocks, the block's atom being dst
    (owner="dst") or src (owner="src"); the other end in the same molecule."""
    blk = N // nblk
    src, dst = [], []
    for b in range(nblk):
        for _ in range(per):
            a = int(rng.integers(b * blk, (b + 1) * blk))
            m = MOL[a]
            o = a
            while o == a:
                o = int(rng.integers(STARTS[m], STARTS[m] + SIZES[m]))
            s, d = (o, a) if owner == "dst" else (a, o)
            src.append(s)
            dst.append(d)
    return np.array(src, np.int32), np.array(dst, np.int32)


def frame_edges(nf, n, e):
    out = np.zeros((2, nf, e), np.int32)
    for f in range(nf):
        for k in range(e):
            i, j = rng.choice(n, 2, replace=False)
            out[:, f, k] = (i, j)
    return out[0], out[1]


def ssp(x):
    return jax.nn.softplus(x) - np.log(2.0).astype(np.float32)


def gauss_rbf(d, k, rc, mu=None):
    mu = jnp.linspace(0.0, rc, k) if mu is None else mu
    gamma = (k / rc) ** 2
    return jnp.exp(-gamma * jnp.square(d[..., None] - mu))


def cos_cut(d, rc):
    return 0.5 * (jnp.cos(np.pi * d / rc) + 1.0) * (d < rc)


def norm(v, axis=-1):
    return jnp.sqrt(jnp.sum(v * v, axis) + 1e-9)


# ---------------------------------------------------------------- 1. SchNet cfconv, edges over sp8
S1, D1 = mol_edges(8, 6, "dst")
perm = rng.permutation(S1.shape[0])
S1, D1 = S1[perm], D1[perm]
P1 = {"w1": R(K, F, scale=0.4), "w2": R(F, F, scale=0.3), "win": R(F, F, scale=0.3), "wout": R(F, F, scale=0.3)}
X1, H1 = R(N, 3, scale=1.2), R(N, F)


def cfconv_terms(p, x, h, src, dst, dmax):
    d = norm(x[dst] - x[src])
    rc = 1.05 * dmax
    filt = ssp(gauss_rbf(d, K, rc) @ p["w1"]) @ p["w2"] * cos_cut(d, rc)[:, None]
    msg = (h @ p["win"])[src] * filt
    return segsum(msg, dst, N)


def cfconv(p, x, h, src, dst):
    dmax = jnp.max(norm(x[dst] - x[src]))
    return h + ssp(cfconv_terms(p, x, h, src, dst, dmax) @ p["wout"])


def make1(bug):
    def body(p, x, h, src, dst):
        dl = jnp.max(norm(x[dst] - x[src]))
        dmax = dl if bug == "local-max-cutoff" else pmax(dl, "sp")
        agg = cfconv_terms(p, x, h, src, dst, dmax)
        agg = pmean(agg, "sp") if bug == "pmean-not-psum" else psum(agg, "sp")
        return h + ssp(agg @ p["wout"])
    return body


PS1 = {k: P() for k in P1}
C.smap("s.schnet_cfconv_adaptive_cutoff_edges.sp8", {"sp": 8}, make1,
       (PS1, P(), P(), P("sp"), P("sp")), P(), cfconv, (P1, X1, H1, S1, D1),
       bugs=[("local-max-cutoff", ["missing-collective"]), ("pmean-not-psum", ["wrong-scale"])])

# ---------------------------------------------------------------- 2. per-molecule energy readout, atoms over sp8
Z2 = I(0, 5, N)
P2 = {"w1": R(F, F, scale=0.4), "b1": R(F, scale=0.1), "w2": R(F, scale=0.4), "eref": R(5, scale=2.0)}
H2 = R(N, F)


def atom_energy(p, h, z):
    return jax.nn.silu(h @ p["w1"] + p["b1"]) @ p["w2"] + p["eref"][z]


def readout(p, h, z, mol):
    e = segsum(atom_energy(p, h, z), mol, M)
    cnt = segsum(jnp.ones_like(mol, jnp.float32), mol, M)
    return jnp.stack([e, e / jnp.maximum(cnt, 1.0)], -1)


def make2(bug):
    def body(p, h, z, mol):
        el = segsum(atom_energy(p, h, z), mol, M)
        e = el if bug == "no-cross-device-sum" else psum(el, "sp")
        cl = segsum(jnp.ones_like(mol, jnp.float32), mol, M)
        cnt = cl if bug == "local-counts" else psum(cl, "sp")
        return jnp.stack([e, e / jnp.maximum(cnt, 1.0)], -1)
    return body


C.smap("s.molecule_energy_segment_sum_atoms.sp8", {"sp": 8}, make2,
       ({k: P() for k in P2}, P("sp"), P("sp"), P("sp")), P(), readout, (P2, H2, Z2, MOL),
       bugs=[("no-cross-device-sum", ["missing-collective"]), ("local-counts", ["missing-collective"])])

# ---------------------------------------------------------------- 3. EGNN layer, atoms over sp4, edges by dst owner
S3, D3 = mol_edges(4, 16, "dst")
P3 = {"we1": R(2 * F + 1, F, scale=0.3), "we2": R(F, F, scale=0.3), "wx": R(F, scale=0.3),
      "wh1": R(2 * F, F, scale=0.3), "wh2": R(F, F, scale=0.3)}
X3, H3 = R(N, 3), R(N, F)


def egnn_edges(p, hf, xf, src, dst, sign=1.0):
    rel = sign * (xf[dst] - xf[src])
    d2 = jnp.sum(rel * rel, -1, keepdims=True)
    m = jax.nn.silu(jax.nn.silu(jnp.concatenate([hf[dst], hf[src], d2], -1) @ p["we1"]) @ p["we2"])
    return rel * jnp.tanh(m @ p["wx"])[:, None], m


def egnn_nodes(p, h, x, dx, magg, deg):
    x2 = x + dx / jnp.maximum(deg, 1.0)[:, None]
    h2 = h + jax.nn.silu(jnp.concatenate([h, magg], -1) @ p["wh1"]) @ p["wh2"]
    return h2, x2


def egnn(p, h, x, src, dst):
    dxe, m = egnn_edges(p, h, x, src, dst)
    deg = segsum(jnp.ones(dst.shape, jnp.float32), dst, N)
    return egnn_nodes(p, h, x, segsum(dxe, dst, N), segsum(m, dst, N), deg)


def make3(bug):
    def body(p, h, x, src, dst):
        n = h.shape[0]
        hf, xf = lax.all_gather(h, "sp", tiled=True), lax.all_gather(x, "sp", tiled=True)
        dxe, m = egnn_edges(p, hf, xf, src, dst, -1.0 if bug == "rel-sign" else 1.0)
        loc = dst if bug == "dst-no-offset" else dst - idx("sp") * n
        deg = segsum(jnp.ones(dst.shape, jnp.float32), loc, n)
        return egnn_nodes(p, h, x, segsum(dxe, loc, n), segsum(m, loc, n), deg)
    return body


C.smap("s.egnn_layer_dst_owner_edges.sp4", {"sp": 4}, make3,
       ({k: P() for k in P3}, P("sp"), P("sp"), P("sp"), P("sp")), (P("sp"), P("sp")), egnn,
       (P3, H3, X3, S3, D3), bugs=[("rel-sign", ["wrong-sign"]), ("dst-no-offset", ["wrong-offset"])])

# ---------------------------------------------------------------- 4. PaiNN message, atoms over sp4, edges by src owner
S4, D4 = mol_edges(4, 16, "src")
RC4 = 3.0
P4 = {"w1": R(F, F, scale=0.3), "w2": R(F, 3 * F, scale=0.3), "wr": R(K, 3 * F, scale=0.4)}
X4, S4f, V4 = R(N, 3), R(N, F), R(N, 3, F)


def painn_msg(p, s_src, v_src, rel, sign=1.0):
    d = norm(rel)
    rhat = sign * rel / d[:, None]
    x = (jax.nn.silu(s_src @ p["w1"]) @ p["w2"]) * ((gauss_rbf(d, K, RC4) @ p["wr"]) * cos_cut(d, RC4)[:, None])
    ds, dvv, dvs = jnp.split(x, 3, -1)
    dv = v_src * dvv[:, None, :] + dvs[:, None, :] * rhat[:, :, None]
    return ds, dv


def painn(p, x, s, v, src, dst):
    ds, dv = painn_msg(p, s[src], v[src], x[dst] - x[src])
    return s + segsum(ds, dst, N), v + segsum(dv, dst, N)


def make4(bug):
    def body(p, x, s, v, src, dst):
        n = s.shape[0]
        xf = lax.all_gather(x, "sp", tiled=True)
        ls = src - idx("sp") * n
        ds, dv = painn_msg(p, s[ls], v[ls], xf[dst] - xf[src], -1.0 if bug == "rhat-sign" else 1.0)
        ps, pv = segsum(ds, dst, N), segsum(dv, dst, N)
        if bug == "no-reduce-scatter":
            ps = lax.dynamic_slice_in_dim(ps, idx("sp") * n, n)
            pv = lax.dynamic_slice_in_dim(pv, idx("sp") * n, n)
        else:
            ps = lax.psum_scatter(ps, "sp", scatter_dimension=0, tiled=True)
            pv = lax.psum_scatter(pv, "sp", scatter_dimension=0, tiled=True)
        return s + ps, v + pv
    return body


C.smap("s.painn_message_src_owner_edges.sp4", {"sp": 4}, make4,
       ({k: P() for k in P4}, P("sp"), P("sp"), P("sp"), P("sp"), P("sp")), (P("sp"), P("sp")), painn,
       (P4, X4, S4f, V4, S4, D4), bugs=[("no-reduce-scatter", ["missing-collective"]), ("rhat-sign", ["wrong-sign"])])

# ---------------------------------------------------------------- 5. spherical harmonics l <= 2, dp2 x tp4
B5, n5, E5 = 2, 8, 20
S5, D5 = frame_edges(B5, n5, E5)
X5, H5 = R(B5, n5, 3), R(B5, n5, F)
P5 = {"wr": R(K, 3, F, scale=0.5), "g": 1.0 + R(3, F, scale=0.2), "wo": R(3, F, scale=0.3), "wv": R(F, scale=0.3)}
RC5 = 4.0


def sph_l2(u):
    x, y, z = u[..., 0], u[..., 1], u[..., 2]
    s3, s5, s15 = np.sqrt(3.0), np.sqrt(5.0), np.sqrt(15.0)
    return jnp.stack([jnp.ones_like(x), s3 * x, s3 * y, s3 * z,
                      s15 * x * y, s15 * y * z, 0.5 * s5 * (3 * z * z - 1), s15 * x * z, 0.5 * s15 * (x * x - y * y)], -1)


LIDX = np.array([0, 1, 1, 1, 2, 2, 2, 2, 2])


def sh_tp_frame(p, x, h, src, dst, stats, sign=1.0):
    """stats(r) -> (mean, var) of r over the channel axis (last)."""
    rel = sign * (x[dst] - x[src])
    d = norm(rel)
    y = sph_l2(rel / d[:, None])
    r = jnp.einsum("ek,klc->elc", gauss_rbf(d, K, RC5) * cos_cut(d, RC5)[:, None], p["wr"])
    mu, var = stats(r)
    r = (r - mu) * lax.rsqrt(var + 1e-5) * p["g"]
    a = segsum(h[src][:, None, :] * r[:, LIDX, :] * y[:, :, None], dst, x.shape[0])  # (n, 9, c)
    inv = jnp.stack([jnp.abs(a[:, 0]), norm(a[:, 1:4], 1), norm(a[:, 4:9], 1)], 1)  # (n, 3, c)
    return jnp.einsum("nlc,lc->n", inv, p["wo"]), jnp.einsum("nmc,c->nm", a[:, 1:4], p["wv"])


def full_stats(r):
    return jnp.mean(r, -1, keepdims=True), jnp.var(r, -1, keepdims=True)


def sh_tp(p, x, h, src, dst):
    return jax.vmap(lambda *a: sh_tp_frame(p, *a, full_stats))(x, h, src, dst)


def make5(bug):
    def tp_stats(r):
        if bug == "local-layernorm":
            return full_stats(r)
        c = r.shape[-1] * lax.axis_size("tp")
        mu = psum(jnp.sum(r, -1, keepdims=True), "tp") / c
        return mu, psum(jnp.sum(jnp.square(r - mu), -1, keepdims=True), "tp") / c

    def body(p, x, h, src, dst):
        e, v = jax.vmap(lambda *a: sh_tp_frame(p, *a, tp_stats, -1.0 if bug == "rel-sign" else 1.0))(x, h, src, dst)
        if bug == "no-tp-psum":
            return e, v
        return psum(e, "tp"), psum(v, "tp")
    return body


PS5 = {"wr": P(None, None, "tp"), "g": P(None, "tp"), "wo": P(None, "tp"), "wv": P("tp")}
C.smap("s.spherical_harmonics_l2_tensor_product.dp2xtp4", {"dp": 2, "tp": 4}, make5,
       (PS5, P("dp"), P("dp", None, "tp"), P("dp"), P("dp")), (P("dp"), P("dp")), sh_tp,
       (P5, X5, H5, S5, D5), bugs=[("local-layernorm", ["missing-collective"]), ("rel-sign", ["wrong-sign"]),
                                   ("no-tp-psum", ["missing-collective"])])

# ---------------------------------------------------------------- 6. energies + forces, atoms over sp4, dst owner edges
S6, D6 = mol_edges(4, 16, "dst")
Z6 = I(0, 4, N)
X6 = R(N, 3, scale=1.3)
P6 = {"wk": R(K, scale=0.5), "a": 1.0 + R(4, scale=0.3)}
RC6 = 3.5


def edge_energy(p, x, z, src, dst):
    d = norm(x[dst] - x[src])
    return (gauss_rbf(d, K, RC6) @ p["wk"]) * cos_cut(d, RC6) * p["a"][z[src]] * p["a"][z[dst]]


def energy_forces(p, x, z, mol, src, dst):
    def etot(x):
        e = segsum(segsum(edge_energy(p, x, z, src, dst), dst, N), mol, M)
        return jnp.sum(e), e
    g, e = jax.grad(etot, has_aux=True)(x)
    return e, -g


def make6(bug):
    def body(p, x, z, mol, src, dst):
        n = x.shape[0]
        xf, zf = lax.all_gather(x, "sp", tiled=True), lax.all_gather(z, "sp", tiled=True)

        def eloc(xf):
            ea = segsum(edge_energy(p, xf, zf, src, dst), dst - idx("sp") * n, n)
            e = segsum(ea, mol, M)
            return jnp.sum(e), e
        g, e = jax.grad(eloc, has_aux=True)(xf)
        if bug == "forces-no-psum":
            g = lax.dynamic_slice_in_dim(g, idx("sp") * n, n)
        else:
            g = lax.psum_scatter(g, "sp", scatter_dimension=0, tiled=True)
        e = e if bug == "energy-no-psum" else psum(e, "sp")
        return e, (g if bug == "forces-plus-grad" else -g)
    return body


C.smap("s.molecule_energy_forces_neg_grad_dst_owner.sp4", {"sp": 4}, make6,
       ({k: P() for k in P6}, P("sp"), P("sp"), P("sp"), P("sp"), P("sp")), (P(), P("sp")), energy_forces,
       (P6, X6, Z6, MOL, S6, D6), bugs=[("forces-no-psum", ["missing-collective"]),
                                        ("energy-no-psum", ["missing-collective"]),
                                        ("forces-plus-grad", ["wrong-sign"])])

# ---------------------------------------------------------------- 7. periodic Morse, dp2 (frames) x sp4 (edges)
B7, n7, E7 = 2, 16, 48
S7, D7 = frame_edges(B7, n7, E7)
L7 = np.array([[4.0, 4.5, 3.8], [5.0, 4.2, 4.6]], np.float32)
X7 = (rng.random((B7, n7, 3)) * L7[:, None, :]).astype(np.float32)
PM7 = np.array([0.8, 1.5, 1.2], np.float32)  # depth, width, r0
RC7 = 1.9


def envelope(u, pexp=5):
    c1, c2, c3 = (pexp + 1) * (pexp + 2) / 2, pexp * (pexp + 2), pexp * (pexp + 1) / 2
    return jnp.where(u < 1, 1 - c1 * u ** pexp + c2 * u ** (pexp + 1) - c3 * u ** (pexp + 2), 0.0)


def morse_frame(pm, x, box, src, dst, wrap=jnp.round):
    d = x[dst] - x[src]
    d = d - box * wrap(d / box)
    r = norm(d)
    e = pm[0] * jnp.square(1 - jnp.exp(-pm[1] * (r - pm[2]))) - pm[0]
    return jnp.sum(e * envelope(r / RC7))


def pbc_ef(pm, x, box, src, dst):
    def one(x, box, src, dst):
        e, g = jax.value_and_grad(morse_frame, 1)(pm, x, box, src, dst)
        return e, -g
    return jax.vmap(one)(x, box, src, dst)


def make7(bug):
    wrap = jnp.floor if bug == "floor-min-image" else jnp.round

    def body(pm, x, box, src, dst):
        e, g = jax.vmap(lambda x, b, s, d: jax.value_and_grad(morse_frame, 1)(pm, x, b, s, d, wrap))(x, box, src, dst)
        e = psum(e, ("dp", "sp")) if bug == "energy-psum-dp-sp" else psum(e, "sp")
        g = g if bug == "forces-no-psum" else psum(g, "sp")
        return e, -g
    return body


C.smap("s.pbc_morse_min_image_energy_forces.dp2xsp4", {"dp": 2, "sp": 4}, make7,
       (P(), P("dp"), P("dp"), P("dp", "sp"), P("dp", "sp")), (P("dp"), P("dp")), pbc_ef,
       (PM7, X7, L7, S7, D7), bugs=[("forces-no-psum", ["missing-collective"]),
                                    ("energy-psum-dp-sp", ["wrong-axis"]), ("floor-min-image", ["wrong-offset"])])

# ---------------------------------------------------------------- 8. energy + force training step, molecules over dp4
B8, n8, E8, T8, F8 = 8, 6, 12, 3, 8
S8, D8 = frame_edges(B8, n8, E8)
X8, Z8 = R(B8, n8, 3, scale=1.2), I(0, T8, B8, n8)
ER8, FR8 = R(B8), R(B8, n8, 3, scale=0.5)
P8 = {"emb": R(T8, F8, scale=0.5), "wr": R(K, F8, scale=0.5), "wo": R(F8, scale=0.4)}
OPT8 = optax.adam(1e-2)
S8opt = OPT8.init(P8)
RC8 = 3.0


def mol_energy(p, x, z, src, dst):
    d = norm(x[dst] - x[src])
    f = (gauss_rbf(d, K, RC8) @ p["wr"]) * cos_cut(d, RC8)[:, None]
    h = segsum(p["emb"][z[src]] * f, dst, x.shape[0]) + p["emb"][z]
    return jnp.sum(ssp(h) @ p["wo"])


def ef_loss(p, x, z, src, dst, er, fr, sign=-1.0):
    def one(x, z, s, d):
        e, g = jax.value_and_grad(mol_energy, 1)(p, x, z, s, d)
        return e, sign * g
    e, f = jax.vmap(one)(x, z, src, dst)
    return jnp.mean(jnp.square(e - er)) + 0.5 * jnp.mean(jnp.square(f - fr))


def train8(p, s, x, z, src, dst, er, fr):
    loss, g = jax.value_and_grad(ef_loss)(p, x, z, src, dst, er, fr)
    u, s = OPT8.update(g, s, p)
    return optax.apply_updates(p, u), s, loss


def make8(bug):
    def body(p, s, x, z, src, dst, er, fr):
        loss, g = jax.value_and_grad(ef_loss)(p, x, z, src, dst, er, fr, 1.0 if bug == "forces-plus-grad" else -1.0)
        if bug != "grad-not-pmean":
            g = pmean(g, "dp")
        u, s = OPT8.update(g, s, p)
        return optax.apply_updates(p, u), s, pmean(loss, "dp")
    return body


PS8 = {k: P() for k in P8}
SS8 = jax.tree.map(lambda _: P(), S8opt)
C.smap("s.energy_force_train_step_adam.dp4", {"dp": 4}, make8,
       (PS8, SS8, P("dp"), P("dp"), P("dp"), P("dp"), P("dp"), P("dp")), (PS8, SS8, P()), train8,
       (P8, S8opt, X8, Z8, S8, D8, ER8, FR8),
       bugs=[("grad-not-pmean", ["missing-collective"]), ("forces-plus-grad", ["wrong-sign"])])

# ---------------------------------------------------------------- 9. RBF centres over tp4, dp2 frames
B9, n9, E9, K9 = 2, 8, 24, 16
S9, D9 = frame_edges(B9, n9, E9)
X9, H9 = R(B9, n9, 3), R(B9, n9, F)
P9 = {"w1": R(K9, F, scale=0.4), "w2": R(F, F, scale=0.3)}
RC9 = 4.0


def filt9(p, d, rb):
    return ssp(ssp(rb) @ p["w2"]) * cos_cut(d, RC9)[:, None]


def schnet9(p, x, h, src, dst):
    def one(x, h, s, t):
        d = norm(x[t] - x[s])
        rb = gauss_rbf(d, K9, RC9, jnp.arange(K9) * (RC9 / (K9 - 1))) @ p["w1"]
        return segsum(h[s] * filt9(p, d, rb), t, n9)
    return jax.vmap(one)(x, h, src, dst)


def make9(bug):
    def body(p, x, h, src, dst):
        kl = p["w1"].shape[0]
        off = 0 if bug == "centres-no-offset" else idx("tp") * kl
        mu = (off + jnp.arange(kl)) * (RC9 / (K9 - 1))

        def one(x, h, s, t):
            d = norm(x[t] - x[s])
            rb = gauss_rbf(d, K9, RC9, mu) @ p["w1"]
            if bug != "rbf-local-shard":
                rb = psum(rb, "tp")
            return segsum(h[s] * filt9(p, d, rb), t, n9)
        return jax.vmap(one)(x, h, src, dst)
    return body


C.smap("s.schnet_rbf_centres_over_tp.dp2xtp4", {"dp": 2, "tp": 4}, make9,
       ({"w1": P("tp"), "w2": P()}, P("dp"), P("dp"), P("dp"), P("dp")), P("dp"), schnet9,
       (P9, X9, H9, S9, D9), bugs=[("centres-no-offset", ["wrong-offset"]), ("rbf-local-shard", ["missing-collective"])])

# ---------------------------------------------------------------- 10. cfconv with source blocks on a ppermute ring
S10, D10 = mol_edges(4, 12, "dst")
P10 = {"w1": R(K, F, scale=0.4), "w2": R(F, F, scale=0.3)}
X10, H10 = R(N, 3, scale=1.2), R(N, F)
RC10 = 3.5


def cf_edge(p, xs, xd, hs):
    d = norm(xd - xs)
    return hs * (ssp(gauss_rbf(d, K, RC10) @ p["w1"]) @ p["w2"]) * cos_cut(d, RC10)[:, None]


def cf_ring_ref(p, x, h, src, dst):
    return h + segsum(cf_edge(p, x[src], x[dst], h[src]), dst, N)


def make10(bug):
    def body(p, x, h, src, dst):
        n, nd, me = x.shape[0], lax.axis_size("sp"), idx("sp")
        ld = dst - me * n
        perm = [(i, (i + 1) % 4) for i in range(4)]

        def step(s, carry):
            acc, xb, hb = carry
            b = (me + s) % nd if bug == "ring-direction" else (me - s) % nd
            mine = (src // n) == b
            ls = jnp.where(mine, src - b * n, 0)
            m = cf_edge(p, xb[ls], x[ld], hb[ls]) * mine[:, None]
            acc = acc + segsum(m, ld, n)
            return acc, lax.ppermute(xb, "sp", perm), lax.ppermute(hb, "sp", perm)
        steps = 3 if bug == "ring-one-short" else 4
        acc, _, _ = lax.fori_loop(0, steps, step, (jnp.zeros_like(h), x, h))
        return h + acc
    return body


C.smap("s.cfconv_source_blocks_ppermute_ring.sp4", {"sp": 4}, make10,
       ({k: P() for k in P10}, P("sp"), P("sp"), P("sp"), P("sp")), P("sp"), cf_ring_ref, (P10, X10, H10, S10, D10),
       bugs=[("ring-direction", ["wrong-permutation"]), ("ring-one-short", ["wrong-offset"])])

def make11(bug):
    def body(p, x, h, src, dst):
        n, nd, me = x.shape[0], lax.axis_size("sp"), idx("sp")
        ld = dst - me * n
        xd = x[ld]
        perm = [(i, (i - 1) % 4) for i in range(4)]  # blocks travel to the left here

        def step(carry, s):
            xb, hb = carry
            b = (me - s) % nd if bug == "ring-direction" else (me + s) % nd
            mine = (src // n) == b
            ls = jnp.where(mine, src - b * n, 0)
            m = jnp.where(mine[:, None], cf_edge(p, xb[ls], xd, hb[ls]), 0.0)
            return (lax.ppermute(xb, "sp", perm), lax.ppermute(hb, "sp", perm)), m
        _, ms = lax.scan(step, (x, h), jnp.arange(4))
        return h + segsum(jnp.sum(ms, 0), ld, n)
    return body


C.smap("s.cfconv_ring_scan_edge_accumulator.sp4", {"sp": 4}, make11,
       ({k: P() for k in P10}, P("sp"), P("sp"), P("sp"), P("sp")), P("sp"), cf_ring_ref, (P10, X10, H10, S10, D10),
       bugs=[("ring-direction", ["wrong-permutation"])])

# ---------------------------------------------------------------- 12. forces by grad through all_gather (its transpose reduces)
def make12(bug):
    def body(p, x, z, mol, src, dst):
        n = x.shape[0]
        zf = lax.all_gather(z, "sp", tiled=True)

        def eloc(xb):
            xf = lax.all_gather(xb, "sp", tiled=True)
            ea = segsum(edge_energy(p, xf, zf, src, dst), dst - idx("sp") * n, n)
            e = segsum(ea, mol, M)
            return (jnp.sum(psum(e, "sp")) if bug == "grad-of-psummed-energy" else jnp.sum(e)), e
        g, e = jax.grad(eloc, has_aux=True)(x)
        e = e if bug == "energy-no-psum" else psum(e, "sp")
        return e, -g
    return body


C.smap("s.molecule_forces_grad_through_all_gather.sp4", {"sp": 4}, make12,
       ({k: P() for k in P6}, P("sp"), P("sp"), P("sp"), P("sp"), P("sp")), (P(), P("sp")), energy_forces,
       (P6, X6, Z6, MOL, S6, D6), bugs=[("grad-of-psummed-energy", ["wrong-scale"]),
                                        ("energy-no-psum", ["missing-collective"])])

# ---------------------------------------------------------------- 13. EGNN edge MLP hidden over tp4, frames over dp2
B13, n13, E13, H13n = 2, 8, 20, 32
S13, D13 = frame_edges(B13, n13, E13)
X13, Hf13 = R(B13, n13, 3), R(B13, n13, F)
P13 = {"a_i": R(F, H13n, scale=0.3), "a_j": R(F, H13n, scale=0.3), "a_d": R(H13n, scale=0.3), "b": R(F, scale=0.1),
       "wo": R(H13n, F, scale=0.3), "wx": R(F, scale=0.3)}


def egnn_tp_frame(p, x, h, src, dst, reduce=lambda t: t, act_first=False):
    rel = x[dst] - x[src]
    d2 = jnp.sum(rel * rel, -1)
    pre = h[dst] @ p["a_i"] + h[src] @ p["a_j"] + d2[:, None] * p["a_d"]
    hid = jax.nn.silu(pre)
    m = hid @ p["wo"]
    m = jax.nn.silu(m) if act_first else m
    m = reduce(m)
    m = m + p["b"] if act_first else jax.nn.silu(m + p["b"])
    w = jnp.tanh(m @ p["wx"])
    deg = jnp.maximum(segsum(jnp.ones_like(d2), dst, x.shape[0]), 1.0)
    return h + segsum(m, dst, x.shape[0]), x + segsum(rel * w[:, None], dst, x.shape[0]) / deg[:, None]


def egnn_tp(p, x, h, src, dst):
    return jax.vmap(lambda *a: egnn_tp_frame(p, *a))(x, h, src, dst)


def make13(bug):
    def red(t):
        return t if bug == "no-row-psum" else psum(t, "tp")

    def body(p, x, h, src, dst):
        return jax.vmap(lambda *a: egnn_tp_frame(p, *a, red, bug == "act-before-psum"))(x, h, src, dst)
    return body


PS13 = {"a_i": P(None, "tp"), "a_j": P(None, "tp"), "a_d": P("tp"), "b": P(), "wo": P("tp"), "wx": P()}
C.smap("s.egnn_edge_mlp_hidden_over_tp.dp2xtp4", {"dp": 2, "tp": 4}, make13,
       (PS13, P("dp"), P("dp"), P("dp"), P("dp")), (P("dp"), P("dp")), egnn_tp, (P13, X13, Hf13, S13, D13),
       bugs=[("no-row-psum", ["missing-collective"]), ("act-before-psum", ["wrong-order"])])

# ---------------------------------------------------------------- 14. per-molecule energies over sp by psum_scatter, bf16 atom MLP
SIZES14 = [3, 5, 4, 6, 2, 5, 3, 4]
MOL14 = np.repeat(np.arange(8), SIZES14).astype(np.int32)
H14, Z14 = R(N, F), I(0, 5, N)
P14 = {"w1": R(F, 2 * F, scale=0.3), "w2": R(2 * F, scale=0.3), "eref": R(5, scale=1.5)}


def atom_e_bf16(p, h, z):
    a = jax.nn.gelu(jnp.dot(h.astype(jnp.bfloat16), p["w1"].astype(jnp.bfloat16), preferred_element_type=jnp.float32))
    return a @ p["w2"] + p["eref"][z]


def mol_e14(p, h, z, mol):
    return segsum(atom_e_bf16(p, h, z), mol, 8)


def make14(bug):
    def body(p, h, z, mol):
        part = segsum(atom_e_bf16(p, h, z), mol, 8)
        if bug == "own-slice-no-reduce":
            return lax.dynamic_slice_in_dim(part, idx("sp") * 2, 2)
        if bug == "scatter-wrong-axis-sum":
            return lax.psum_scatter(part, "sp", tiled=True) / lax.axis_size("sp")
        return lax.psum_scatter(part, "sp", scatter_dimension=0, tiled=True)
    return body


C.smap("s.molecule_energies_psum_scatter_bf16_mlp.sp4", {"sp": 4}, make14,
       ({k: P() for k in P14}, P("sp"), P("sp"), P("sp")), P("sp"), mol_e14, (P14, H14, Z14, MOL14),
       bugs=[("own-slice-no-reduce", ["missing-collective"]), ("scatter-wrong-axis-sum", ["wrong-scale"])])

# ---------------------------------------------------------------- 15. PaiNN update block, channels over tp4
P15 = {"U": R(F, F, scale=0.3), "V": R(F, F, scale=0.3), "w1s": R(F, F, scale=0.3), "w1v": R(F, F, scale=0.3),
       "b1": R(F, scale=0.1), "w2": R(F, 3 * F, scale=0.3)}
S15, V15 = R(N, F), R(N, 3, F)


def painn_update(p, s, v):
    uv, vv = v @ p["U"], v @ p["V"]
    a = jax.nn.silu(s @ p["w1s"] + norm(vv, 1) @ p["w1v"] + p["b1"]) @ p["w2"]
    avv, asv, ass = jnp.split(a, 3, -1)
    return s + ass + asv * jnp.sum(uv * vv, 1), v + avv[:, None, :] * uv


def make15(bug):
    def body(p, s, v):
        fl = p["U"].shape[1]
        uv, vv = v @ p["U"], v @ p["V"]  # local output channels
        t = norm(vv, 1) @ p["w1v"]
        t = t if bug == "norm-rows-no-psum" else psum(t, "tp")
        a = jax.nn.silu(s @ p["w1s"] + t + p["b1"]) @ p["w2"]
        off = 0 if bug == "channel-offset-zero" else idx("tp") * fl
        avv, asv, ass = (lax.dynamic_slice_in_dim(c, off, fl, 1) for c in jnp.split(a, 3, -1))
        sl = lax.dynamic_slice_in_dim(s, off, fl, 1)
        return sl + ass + asv * jnp.sum(uv * vv, 1), lax.dynamic_slice_in_dim(v, off, fl, 2) + avv[:, None, :] * uv
    return body


C.smap("s.painn_update_block_channels_over_tp.tp4", {"tp": 4}, make15,
       ({"U": P(None, "tp"), "V": P(None, "tp"), "w1s": P(), "w1v": P("tp"), "b1": P(), "w2": P()}, P(), P()),
       (P(None, "tp"), P(None, None, "tp")), painn_update, (P15, S15, V15),
       bugs=[("norm-rows-no-psum", ["missing-collective"]), ("channel-offset-zero", ["wrong-offset"])])

# ---------------------------------------------------------------- GSPMD pairs
C.gspmd("g.schnet_cfconv_edges.sp8", {"sp": 8}, (PS1, P(), P(), P("sp"), P("sp")), P(), cfconv,
        (P1, X1, H1, S1, D1))
C.gspmd("g.molecule_energy_forces_atoms_edges.sp4", {"sp": 4},
        ({k: P() for k in P6}, P("sp"), P("sp"), P("sp"), P("sp"), P("sp")), (P(), P("sp")), energy_forces,
        (P6, X6, Z6, MOL, S6, D6))
C.gspmd("g.spherical_harmonics_tensor_product.dp2xtp4", {"dp": 2, "tp": 4},
        (PS5, P("dp"), P("dp", None, "tp"), P("dp"), P("dp")), (P("dp"), P("dp")), sh_tp, (P5, X5, H5, S5, D5))
C.gspmd("g.energy_force_train_step_adam.dp4", {"dp": 4},
        (PS8, SS8, P("dp"), P("dp"), P("dp"), P("dp"), P("dp"), P("dp")), (PS8, SS8, P()), train8,
        (P8, S8opt, X8, Z8, S8, D8, ER8, FR8))
C.gspmd("g.pbc_morse_energy_forces.dp2xsp4", {"dp": 2, "sp": 4},
        (P(), P("dp"), P("dp"), P("dp", "sp"), P("dp", "sp")), (P("dp"), P("dp")), pbc_ef, (PM7, X7, L7, S7, D7))
C.gspmd("g.egnn_layer_atoms_edges.sp4", {"sp": 4}, ({k: P() for k in P3}, P("sp"), P("sp"), P("sp"), P("sp")),
        (P("sp"), P("sp")), egnn, (P3, H3, X3, S3, D3))
C.gspmd("g.painn_message_vectors_over_tp.dp2xtp4", {"dp": 2, "tp": 4},
        ({k: P() for k in P4}, P(), P(None, "tp"), P(None, None, "tp"), P("dp"), P("dp")), (P(None, "tp"), P(None, None, "tp")),
        painn, (P4, X4, S4f, V4, S4, D4))
C.gspmd("g.egnn_edge_mlp_hidden_over_tp.dp2xtp4", {"dp": 2, "tp": 4}, (PS13, P("dp"), P("dp"), P("dp"), P("dp")),
        (P("dp"), P("dp")), egnn_tp, (P13, X13, Hf13, S13, D13))
C.known_miss("s.cfconv_source_blocks_ppermute_ring.sp4.bug.ring-direction",
             "the program masks the edges each device does not own (src // n == b on every ring step), which random integers"
             " break: execution decides only with every integer input drawn on its owner, and with the sources on their own device too the ring's direction changes nothing; the rules do not relate the masked ring")
C.known_miss("s.egnn_layer_dst_owner_edges.sp4.bug.dst-no-offset",
             "the witness's random edge indices are not on their owner devices, so the correct body indexes out of range as much as the bug does and execution cannot tell them apart; the rules do not relate owner-local segment ids")
C.finish()
