"""samples/fresh113: a 113th batch of programs as a user writes them, on the theme of distributed matrix-multiplication algorithms and tensor-parallel layouts beyond 1-D Megatron in JAX shard_map (SUMMA with fine panels and its gradient, SUMMA-NT with a psum_scatter of stacked partials, Cannon with jax.grad through the shifts, 2.5-D Cannon and 2.5-D SUMMA with replication over a depth axis, Agarwal's 3-D matmul, 2-D weight-stationary MLP and attention layouts, weight-gathering and reduce-scatter collective matmuls, Ulysses all_to_all swaps, transposes of 2-D sharded matrices), none of them an idiom of samples/fresh .. fresh26, probe, train or wild.
shard_map families:
 1. SUMMA on r2 x c4 with panels of width 2, finer than both A's column
    blocks (4) and B's row blocks (8): in a lax.fori_loop over the 8
    panels, A's panel dynamic_slice'd at local offset (t % 2) * 2 and
    broadcast along the row by a masked psum over c (owner t // 2), B's at
    (t % 4) * 2 by a masked psum over r (owner t // 4); the loss
    sum(tanh(C) * G) and its gradients by jax.value_and_grad of the local
    loss through the loop (check_vma=False: the psums transpose to psums),
    the loss psum'd over (r, c). Bugs: A's panel always at local offset 0,
    B's panel psum'd over c, the loss not psum'd.
 2. SUMMA-NT (C = A B^T, A and B both (rows over r, K over c)) on r2 x c4:
    B's row blocks all_gather'd over r, the 4 partial products A_ic B_jc^T
    stacked on a new axis j and psum_scatter'd over c (non-tiled) so that
    column c keeps block j = c. Bugs: the gathered B reshaped with j as the
    inner axis (interleaved rows), psum then block 0 taken on every column.
 3. Cannon's algorithm on b2 x r2 x c2 (a batch of 2 products over b) in a
    lax.fori_loop carrying (a, b, acc), the skew as a neighbour ppermute
    kept where the row (for A) / column (for B) index is 1, shifts by
    ppermute on c for A and r for B; jax.value_and_grad of the local squared
    error to a target (check_vma=True), the loss psum'd over (r, c).
    Bugs: B not skewed, A skewed by its column index, the loss pmean'd.
 4. 2.5-D Cannon on d2 x r2 x c2: A and B replicated over the depth axis d;
    layer l starts from the skew shifted by l ((i + j + l) % 2), does its one
    multiply, and the layers are psum'd over d. Bugs: layers psum'd over r,
    every layer the same offset (l ignored), pmean over d.
 5. 2.5-D SUMMA on d2 x r2 x c2: depth layer l broadcasts only panel l
    (A's from column l by a masked psum over c, B's from row l over r), and
    the partial products are psum_scatter'd over d along the rows, so C
    comes out with rows over (r, d). Bugs: A's panel owner from the row
    index, psum over d and the first half of the rows kept, B's panel from
    row 0 on every layer.
 6. Agarwal's 3-D matmul on i2 x j2 x k2: A (i, k) replicated over j, B
    (k, j) replicated over i, the local product psum_scatter'd over k along
    the columns (C comes out with columns over (j, k)), loss
    sum(gelu(C) * G) and its gradients; dA psum'd over j and dB over i (the
    devices holding the same block). Bugs: dA not psum'd over j, dB psum'd
    over k, the product scattered over j.
 7. 2-D weight-stationary MLP with a pre-LayerNorm on x4 x y2: activations
    (B, D) with D over x, W1 (D over x, F over y), W2 (F over y, D over x);
    LayerNorm statistics psum'd over x, the first product psum_scatter'd
    over x along the batch, GELU on the batch block, the batch all_gather'd
    back over x, the second product psum'd over y, residual. Bugs: LayerNorm mean from the
    local features, the second product psum'd over x, variance divided by
    the local width.
 8. 2-D tensor-parallel causal attention on x2 x y4: d_model over x, heads
    over y; q / k / v = x W psum'd over x, local heads attended, the output
    projection (heads over y, d_model over x) psum'd over y. Bugs: q psum'd
    over y, the scale from the local projection width, the output
    projection not reduced.
 9. weight-gathering collective matmul (FSDP style) on f4 x t2 in bf16 with
    f32 accumulation: x rows over f (full D), W's rows over f and columns
    over t; W's blocks passed around the f ring by ppermute in a
    lax.fori_loop, each multiplied with the matching column block of x
    ((me + s) % 4, received from the right). Bugs: the ring turned the
    other way, x's column block from the step alone (s).
10. reduce-scatter collective matmul on dp2 x t4 in a lax.scan: the
    contraction dim over t, partial sums of row block (me - s - 1) % 4
    passed to the right, output rows over t, plus a residual block. Bugs:
    block (me + s + 1) % 4, partial sums sent to the left.
11. Ulysses GQA causal attention on sp4 (8 query heads, 4 kv heads): q, k,
    v all_to_all'd from sequence blocks to head blocks, attention over the
    full sequence, all_to_all back, output projection. Bugs: kv heads
    jnp.tile'd instead of repeated (before the swap), the heads merged in
    (E, H) order.
12. Ulysses attention backward on sp4 under check_vma=True: value_and_grad
    of sum(out * G) with respect to q, k, v through the all_to_alls, the
    heads dealt to the ranks strided (rank r gets heads r, r + 4, ..., by a
    reshape / swapaxes before the swap, undone after the swap back), the
    loss psum'd. Bugs: the strided order not undone, loss pmean'd.
13. transpose of a rectangular 2-D sharded matrix on r2 x c4 (A 16 x 8 ->
    A^T with the same spec): all_gather over r, all_to_all over c (rows
    split, columns concatenated), the column block of the row index sliced,
    local transpose. Bugs: column slice at c % 2, local transpose missing.
14. symmetrisation (A + A^T) / 2 of a batch of square matrices on
    b2 x r2 x c2: the block (j, i) fetched by a ppermute over the tuple
    (r, c) with linear indices and transposed. Bugs: ppermute over r only,
    local transpose missing.
15. an all-gather collective matmul, sequence over tp4 and batch over dp2:
    the x blocks passed left around the ring by ppermute in a
    lax.fori_loop, each product written into its slot of the full sequence
    by dynamic_update_slice as it arrives; loss sum(gelu(y) * G) and
    gradients by value_and_grad under check_vma=True (the ring's transpose
    is the reduce-scatter ring; W's gradient summed over dp by the
    transpose of its implicit pvary). Bugs: slot (me - s) % 4, W's gradient
    psum'd over dp again by hand.
16. an SGD step of the MLP of 7. (without the shard_map-level specs
    changing) under check_vma=True: loss as the psum over x of local sums
    of squares divided by the global count. Bugs: the mean over the local
    count, the loss pmean'd over x. (A first draft's bug, the loss psum'd
    over (x, y), is rejected by check_vma: the loss is y-invariant.)
17. a 3-D matmul on i2 x j2 x k2 written the long way: A's rows gathered by
    hand as a psum over i of the block placed into zeros at its offset
    (dynamic_update_slice), the product psum'd over k and the device's
    column and row blocks dynamic_slice'd. Bugs: the block placed at offset
    0, the column block sliced at the j index.
18. redundant depth layers on d2 x r2 x c2: every layer computes the whole
    block C_ij (A's row panel all_gather'd over c, B's column panel over
    r), then the two identical replicas are psum'd over d and divided by 2.
    Bugs: not divided, divided by 4.
19. SUMMA entirely in bf16 (bf16 accumulation, as the baseline's bf16
    a @ b) with tiled all_gather'd panels and python-unrolled steps of
    width 8. Bug: B's panel of the next step.
20. a 1-D all-gather matmul ring laid over the whole x2 x y4 mesh: rows over
    the tuple (x, y), a ppermute over the tuple with x-major linear
    indices, slots from axis_index((x, y)), tanh of each product written
    by dynamic_update_slice, output replicated. Bug: the ring turned the
    other way (the slots unchanged). (A first draft's bug, the ring over
    the tuple (y, x), is refused by JAX: ppermute's axes must follow the
    mesh order.)
GSPMD pairs (jax.jit with in / out shardings): 21. the weight-stationary MLP
of 7. with its activations constrained; 22. Agarwal's 3-D layout of a
matmul with a gelu; 23. a transpose of a 2-D sharded rectangular matrix;
24. Ulysses-style attention, sequence over sp4 constrained to heads over
sp4 inside; 25. an optax.adamw step of the 2-D MLP (x2 x y4); 26. a chain
(A B) C^T with 2-D shardings on r2 x c4; 27. the 2-D TP attention of 8.;
28. A B^T with both operands (rows over r, K over c); 29. the
symmetrisation of 14.; 30. a transpose whose output spec swaps the axes
(a local transpose); 31. the block-tile view of a 2-D sharded matrix
(reshape + transpose to (row block, col block, 8, 2)) and the tiles'
norms; 32. a batched einsum whose operands' specs disagree (B with K over
c and N over r); 33. a matmul with jnp.roll along B's sharded K.
Numerics: every correct pair agrees at rounding level (f32; bf16 operands
with f32 accumulation in 9. and 10.); every bug variant differs clearly.
Run from the repository root: bash samples/gen/run_fresh113.sh [SUBSTR...]
"""
import sys
import numpy as np
import jax, jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec as P, NamedSharding
import optax
sys.path.insert(0, "samples/gen")  # run from the repository root (run_fresh113.sh)
from fresh_lib import Corpus, seeded, state_specs  # noqa: E402
from scalify_jax import make_mesh  # noqa: E402

SCRIPT = "samples/gen/fresh113.py"
C = Corpus("samples/fresh113", SCRIPT, "samples/gen/run_fresh113.sh", sys.argv[1:])
rng, R, I = seeded(11313)
psum, pmean, idx = lax.psum, lax.pmean, lax.axis_index
NEG = -1e30
f32, bf16 = jnp.float32, jnp.bfloat16

# ---------------------------------------------------------------------------
# 1. SUMMA with fine panels and its gradient
M1, K1, N1 = 16, 16, 16


def summa_loss_ref(a, b, g):
    def loss(a, b):
        return jnp.sum(jnp.tanh(a @ b) * g)
    l, (da, db) = jax.value_and_grad(loss, (0, 1))(a, b)
    return l, da, db


def summa_fine(bug):
    def body(a, b, g):
        ci, ri = idx("c"), idx("r")

        def summa(a, b):
            def step(t, acc):
                aoff = 0 if bug == "a-panel-offset-zero" else (t % 2) * 2
                ap = lax.dynamic_slice_in_dim(a, aoff, 2, axis=1)
                ap = psum(jnp.where(ci == t // 2, ap, 0.0), "c")
                bp = lax.dynamic_slice_in_dim(b, (t % 4) * 2, 2, axis=0)
                bp = psum(jnp.where(ri == t // 4, bp, 0.0), "c" if bug == "b-panel-psum-over-c" else "r")
                return acc + ap @ bp
            return lax.fori_loop(0, 8, step, jnp.zeros((a.shape[0], b.shape[1]), f32))

        def local(a, b):
            return jnp.sum(jnp.tanh(summa(a, b)) * g)
        l, (da, db) = jax.value_and_grad(local, (0, 1))(a, b)
        if bug != "loss-not-psummed":
            l = psum(l, ("r", "c"))
        return l, da, db
    return body


C.smap("s.summa_fine_panels_masked_psum_grad.r2xc4", {"r": 2, "c": 4}, summa_fine,
       (P("r", "c"),) * 3, (P(), P("r", "c"), P("r", "c")), summa_loss_ref,
       (R(M1, K1), R(K1, N1, scale=0.5), R(M1, N1)),
       bugs=[("a-panel-offset-zero", ["wrong-offset"]), ("b-panel-psum-over-c", ["wrong-axis"]),
             ("loss-not-psummed", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 2. SUMMA-NT: C = A B^T, partials stacked and psum_scatter'd over c
M2, N2, K2 = 16, 16, 32


def summa_nt(bug):
    def body(a, b):
        bg = lax.all_gather(b, "r", axis=0, tiled=True)  # (N, K/4): B's K block of this column
        nb = bg.shape[0] // 4
        if bug == "reshape-j-inner":
            bj = bg.reshape(nb, 4, -1).transpose(1, 0, 2)
        else:
            bj = bg.reshape(4, nb, -1)
        part = jnp.einsum("mk,jnk->jmn", a, bj)  # (4, M/2, N/4), partial over c
        if bug == "psum-then-first-block":
            return psum(part, "c")[0]
        return lax.psum_scatter(part, "c", scatter_dimension=0, tiled=False)
    return body


C.smap("s.summa_nt_stacked_psum_scatter.r2xc4", {"r": 2, "c": 4}, summa_nt, (P("r", "c"), P("r", "c")),
       P("r", "c"), lambda a, b: a @ b.T, (R(M2, K2), R(N2, K2)),
       bugs=[("reshape-j-inner", ["wrong-layout"]), ("psum-then-first-block", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 3. Cannon on a 2 x 2 grid (batch over b) with the gradient through the shifts
SW = [(0, 1), (1, 0)]


def cannon_ref(a, b, tgt):
    def loss(a, b):
        per = 0.5 * jnp.sum(jnp.square(jnp.einsum("bmk,bkn->bmn", a, b) - tgt), (1, 2))
        return jnp.sum(per), per
    (_, per), (da, db) = jax.value_and_grad(loss, (0, 1), has_aux=True)(a, b)
    return per, da, db


def cannon_grad(bug):
    def body(a, b, tgt):
        ri, ci = idx("r"), idx("c")
        mm = lambda a, b: jnp.einsum("bmk,bkn->bmn", a, b)

        def cannon(a, b):
            askew = ci if bug == "skew-a-by-col" else ri
            a = jnp.where(askew == 1, lax.ppermute(a, "c", SW), a)
            if bug != "no-skew-b":
                b = jnp.where(ci == 1, lax.ppermute(b, "r", SW), b)

            def step(s, carry):
                a, b, acc = carry
                a, b = lax.ppermute(a, "c", SW), lax.ppermute(b, "r", SW)
                return a, b, acc + mm(a, b)
            return lax.fori_loop(1, 2, step, (a, b, mm(a, b)))[2]

        def local(a, b):
            return 0.5 * jnp.sum(jnp.square(cannon(a, b) - tgt))
        l, (da, db) = jax.value_and_grad(local, (0, 1))(a, b)
        l = pmean(l, ("r", "c")) if bug == "loss-pmean-rc" else psum(l, ("r", "c"))
        return l[None], da, db
    return body


SP3 = P("b", "r", "c")
C.smap("s.cannon_fori_value_and_grad.b2xr2xc2", {"b": 2, "r": 2, "c": 2}, cannon_grad, (SP3,) * 3,
       (P("b"), SP3, SP3), cannon_ref, (R(2, 8, 8), R(2, 8, 8), R(2, 8, 8)), check_vma=True,
       bugs=[("no-skew-b", ["missing-collective"]), ("skew-a-by-col", ["wrong-permutation"]),
             ("loss-pmean-rc", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 4. 2.5-D Cannon: depth layers start from shifted skews, psum over depth


def cannon25(bug):
    def body(a, b):
        ri, ci, li = idx("r"), idx("c"), idx("d")
        sh = 0 if bug == "same-offset-every-layer" else li
        a = jnp.where((ri + sh) % 2 == 1, lax.ppermute(a, "c", SW), a)  # A_{i, (i+j+l)%2}
        b = jnp.where((ci + sh) % 2 == 1, lax.ppermute(b, "r", SW), b)  # B_{(i+j+l)%2, j}
        c = a @ b
        if bug == "pmean-over-d":
            return pmean(c, "d")
        return psum(c, "r" if bug == "psum-over-r" else "d")
    return body


C.smap("s.cannon_2p5d_depth_psum.d2xr2xc2", {"d": 2, "r": 2, "c": 2}, cannon25, (P("r", "c"), P("r", "c")),
       P("r", "c"), lambda a, b: a @ b, (R(16, 8), R(8, 12)),
       bugs=[("psum-over-r", ["wrong-axis"]), ("same-offset-every-layer", ["wrong-offset"]),
             ("pmean-over-d", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 5. 2.5-D SUMMA: one panel per depth layer, psum_scatter over depth


def summa25(bug):
    def body(a, b):
        ri, ci, li = idx("r"), idx("c"), idx("d")
        aown = ri if bug == "a-owner-from-row" else ci
        ap = psum(jnp.where(aown == li, a, 0.0), "c")
        bown = 0 if bug == "b-panel-row0" else li
        bp = psum(jnp.where(ri == bown, b, 0.0), "r")
        part = ap @ bp
        if bug == "psum-first-half":
            return psum(part, "d")[: part.shape[0] // 2]
        return lax.psum_scatter(part, "d", scatter_dimension=0, tiled=True)
    return body


C.smap("s.summa_2p5d_depth_psum_scatter.d2xr2xc2", {"d": 2, "r": 2, "c": 2}, summa25, (P("r", "c"), P("r", "c")),
       P(("r", "d"), "c"), lambda a, b: a @ b, (R(16, 12), R(12, 8)),
       bugs=[("a-owner-from-row", ["wrong-offset"]), ("psum-first-half", ["wrong-offset"]),
             ("b-panel-row0", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 6. Agarwal's 3-D matmul with a gelu loss and its gradient


def mm3d_ref(a, b, g):
    def loss(a, b):
        c = a @ b
        return jnp.sum(jax.nn.gelu(c) * g), c
    (l, c), (da, db) = jax.value_and_grad(loss, (0, 1), has_aux=True)(a, b)
    return l, c, da, db


def mm3d(bug):
    def body(a, b, g):
        def local(a, b):
            c = lax.psum_scatter(a @ b, "j" if bug == "scatter-over-j" else "k", scatter_dimension=1, tiled=True)
            return jnp.sum(jax.nn.gelu(c) * g), c
        (l, c), (da, db) = jax.value_and_grad(local, (0, 1), has_aux=True)(a, b)
        l = psum(l, ("i", "j", "k"))
        if bug != "da-not-psummed":
            da = psum(da, "j")
        db = psum(db, "k" if bug == "db-psum-over-k" else "i")
        return l, c, da, db
    return body


C.smap("s.agarwal_3d_matmul_gelu_grad.i2xj2xk2", {"i": 2, "j": 2, "k": 2}, mm3d,
       (P("i", "k"), P("k", "j"), P("i", ("j", "k"))), (P(), P("i", ("j", "k")), P("i", "k"), P("k", "j")),
       mm3d_ref, (R(8, 16), R(16, 16, scale=0.3), R(8, 16)),
       bugs=[("da-not-psummed", ["missing-all-reduce"]), ("db-psum-over-k", ["wrong-axis"]),
             ("scatter-over-j", ["wrong-axis"])])

# ---------------------------------------------------------------------------
# 7. 2-D weight-stationary MLP with a pre-LayerNorm
B7, D7, F7 = 8, 16, 32


def ln(x, g, eps=1e-5):
    mu = jnp.mean(x, -1, keepdims=True)
    var = jnp.mean(jnp.square(x - mu), -1, keepdims=True)
    return (x - mu) * lax.rsqrt(var + eps) * g


def mlp2d_ref(x, g, w1, w2):
    return x + jax.nn.gelu(ln(x, g) @ w1) @ w2


def mlp2d(bug):
    def body(x, g, w1, w2):
        s = jnp.sum(x, -1, keepdims=True)
        mu = (s if bug == "ln-mean-local" else psum(s, "x")) / D7
        v = psum(jnp.sum(jnp.square(x - mu), -1, keepdims=True), "x")
        v = v / (x.shape[-1] if bug == "var-local-width" else D7)
        xn = (x - mu) * lax.rsqrt(v + 1e-5) * g
        h = jax.nn.gelu(lax.psum_scatter(xn @ w1, "x", scatter_dimension=0, tiled=True))  # (B/x, F/y)
        h = lax.all_gather(h, "x", axis=0, tiled=True)  # (B, F/y)
        return x + psum(h @ w2, "x" if bug == "second-psum-over-x" else "y")  # (B, D/x)
    return body


SP7 = (P(None, "x"), P("x"), P("x", "y"), P("y", "x"))
A7 = (R(B7, D7), 1.0 + R(D7, scale=0.1), R(D7, F7, scale=0.3), R(F7, D7, scale=0.2))
C.smap("s.weight_stationary_2d_mlp_layernorm.x4xy2", {"x": 4, "y": 2}, mlp2d, SP7, P(None, "x"), mlp2d_ref, A7,
       bugs=[("ln-mean-local", ["missing-all-reduce"]), ("second-psum-over-x", ["wrong-axis"]),
             ("var-local-width", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 8. 2-D TP causal attention: d_model over x, heads over y
B8, T8, D8, H8, E8 = 2, 8, 16, 8, 4


def attn(q, k, v):
    s = jnp.einsum("bqhe,bkhe->bhqk", q, k) / np.sqrt(q.shape[-1])
    t = q.shape[1]
    s = jnp.where(jnp.tril(jnp.ones((t, t), bool)), s, NEG)
    return jnp.einsum("bhqk,bkhe->bqhe", jax.nn.softmax(s, -1), v)


def attn2d_ref(x, wq, wk, wv, wo):
    sp = lambda y: y.reshape(y.shape[:2] + (-1, E8))
    o = attn(sp(x @ wq), sp(x @ wk), sp(x @ wv))
    return o.reshape(o.shape[:2] + (-1,)) @ wo


def attn2d(bug):
    def body(x, wq, wk, wv, wo):
        sp = lambda y: y.reshape(y.shape[:2] + (-1, E8))
        q = psum(x @ wq, "y" if bug == "q-psum-over-y" else "x")
        k, v = psum(x @ wk, "x"), psum(x @ wv, "x")
        if bug == "scale-local-width":
            s = jnp.einsum("bqhe,bkhe->bhqk", sp(q), sp(k)) / np.sqrt(q.shape[-1])
            s = jnp.where(jnp.tril(jnp.ones((T8, T8), bool)), s, NEG)
            o = jnp.einsum("bhqk,bkhe->bqhe", jax.nn.softmax(s, -1), sp(v))
        else:
            o = attn(sp(q), sp(k), sp(v))
        out = o.reshape(o.shape[:2] + (-1,)) @ wo
        return out if bug == "wo-not-reduced" else psum(out, "y")
    return body


C.smap("s.attention_2d_tp_dmodel_x_heads_y.x2xy4", {"x": 2, "y": 4}, attn2d,
       (P(None, None, "x"), P("x", "y"), P("x", "y"), P("x", "y"), P("y", "x")), P(None, None, "x"), attn2d_ref,
       (R(B8, T8, D8), R(D8, H8 * E8, scale=0.3), R(D8, H8 * E8, scale=0.3), R(D8, H8 * E8, scale=0.3),
        R(H8 * E8, D8, scale=0.3)),
       bugs=[("q-psum-over-y", ["wrong-axis"]), ("scale-local-width", ["wrong-scale"]),
             ("wo-not-reduced", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 9. weight-gathering collective matmul (bf16, f32 accumulation)
LEFT4 = [(i, (i - 1) % 4) for i in range(4)]
RIGHT4 = [(i, (i + 1) % 4) for i in range(4)]


def wgather(bug):
    def body(x, w):
        me, n, dl = idx("f"), 4, w.shape[0]

        def step(s, carry):
            wc, acc = carry
            src = s if bug == "x-block-from-step" else (me + s) % n
            xs = lax.dynamic_slice_in_dim(x, src * dl, dl, axis=1)
            acc = acc + jnp.dot(xs, wc, preferred_element_type=f32)
            return lax.ppermute(wc, "f", RIGHT4 if bug == "ring-reversed" else LEFT4), acc
        return lax.fori_loop(0, n, step, (w, jnp.zeros((x.shape[0], w.shape[1]), f32)))[1]
    return body


C.smap("s.weight_gather_collective_matmul_bf16.f4xt2", {"f": 4, "t": 2}, wgather, (P("f", None), P("f", "t")),
       P("f", "t"), lambda x, w: jnp.dot(x, w, preferred_element_type=f32),
       (R(8, 32, dt=bf16), R(32, 16, scale=0.3, dt=bf16)),
       bugs=[("ring-reversed", ["wrong-permutation"]), ("x-block-from-step", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 10. reduce-scatter collective matmul in a lax.scan, plus a residual


def rs_ref(x, w, res):
    return jnp.einsum("btf,fd->btd", x, w, preferred_element_type=f32) + res


def rs_cm(bug):
    def body(x, w, res):
        me, n = idx("t"), 4
        tl = x.shape[1] // n
        perm = LEFT4 if bug == "send-left" else RIGHT4

        def step(acc, s):
            blk = (me + s + 1) % n if bug == "block-plus" else (me - s - 1) % n
            acc = lax.ppermute(acc, "t", perm)
            xs = lax.dynamic_slice_in_dim(x, blk * tl, tl, axis=1)
            return acc + jnp.einsum("btf,fd->btd", xs, w, preferred_element_type=f32), None
        acc0 = jnp.zeros((x.shape[0], tl, w.shape[1]), f32)
        acc, _ = lax.scan(step, acc0, jnp.arange(n))
        return acc + res
    return body


C.smap("s.reduce_scatter_collective_matmul_scan.dp2xt4", {"dp": 2, "t": 4}, rs_cm,
       (P("dp", None, "t"), P("t", None), P("dp", "t")), P("dp", "t"), rs_ref,
       (R(4, 16, 32, dt=bf16), R(32, 8, scale=0.3, dt=bf16), R(4, 16, 8)),
       bugs=[("block-plus", ["wrong-offset"]), ("send-left", ["wrong-permutation"])])

# ---------------------------------------------------------------------------
# 11. Ulysses GQA causal attention
B11, T11, HQ, HKV, E11, D11 = 2, 16, 8, 4, 8, 32


def gqa_ref(q, k, v, wo):
    rep = HQ // HKV
    o = attn(q, jnp.repeat(k, rep, 2), jnp.repeat(v, rep, 2))
    return o.reshape(B11, T11, HQ * E11) @ wo


def ulysses_gqa(bug):
    def body(q, k, v, wo):
        rep = HQ // HKV
        if bug == "kv-tile-not-repeat":
            k, v = jnp.tile(k, (1, 1, rep, 1)), jnp.tile(v, (1, 1, rep, 1))
        a2a = lambda t: lax.all_to_all(t, "sp", split_axis=2, concat_axis=1, tiled=True)
        q, k, v = a2a(q), a2a(k), a2a(v)  # (B, T, H/sp, E)
        if bug != "kv-tile-not-repeat":
            k, v = jnp.repeat(k, rep, 2), jnp.repeat(v, rep, 2)
        o = attn(q, k, v)
        o = lax.all_to_all(o, "sp", split_axis=1, concat_axis=2, tiled=True)  # (B, T/sp, H, E)
        if bug == "heads-merged-eh":
            o = o.transpose(0, 1, 3, 2)
        return o.reshape(o.shape[:2] + (-1,)) @ wo
    return body


C.smap("s.ulysses_gqa_causal_all_to_all.sp4", {"sp": 4}, ulysses_gqa, (P(None, "sp"),) * 3 + (P(),),
       P(None, "sp"), gqa_ref,
       (R(B11, T11, HQ, E11), R(B11, T11, HKV, E11), R(B11, T11, HKV, E11), R(HQ * E11, D11, scale=0.2)),
       bugs=[("kv-tile-not-repeat", ["wrong-layout"]), ("heads-merged-eh", ["wrong-layout"])])

# ---------------------------------------------------------------------------
# 12. Ulysses attention backward (check_vma=True)
B12, T12, H12, E12 = 2, 16, 8, 4


def uly_grad_ref(q, k, v, g):
    return jax.value_and_grad(lambda q, k, v: jnp.sum(attn(q, k, v) * g), (0, 1, 2))(q, k, v)


def uly_grad(bug):
    def body(q, k, v, g):
        n = 4

        def strided(t):  # rank r gets the heads r, r + 4, ...
            return t.reshape(t.shape[:2] + (-1, n) + t.shape[3:]).swapaxes(2, 3).reshape(t.shape)

        def unstrided(t):
            return t.reshape(t.shape[:2] + (n, -1) + t.shape[3:]).swapaxes(2, 3).reshape(t.shape)

        def local(q, k, v):
            a2a = lambda t: lax.all_to_all(strided(t), "sp", split_axis=2, concat_axis=1, tiled=True)
            o = attn(a2a(q), a2a(k), a2a(v))
            o = lax.all_to_all(o, "sp", split_axis=1, concat_axis=2, tiled=True)
            if bug != "strided-heads-not-undone":
                o = unstrided(o)
            return jnp.sum(o * g)
        l, gr = jax.value_and_grad(local, (0, 1, 2))(q, k, v)
        l = pmean(l, "sp") if bug == "loss-pmean" else psum(l, "sp")
        return l, gr
    return body


SP12 = P(None, "sp")
C.smap("s.ulysses_attention_value_and_grad.sp4", {"sp": 4}, uly_grad, (SP12,) * 4, (P(), (SP12,) * 3),
       uly_grad_ref, (R(B12, T12, H12, E12), R(B12, T12, H12, E12), R(B12, T12, H12, E12), R(B12, T12, H12, E12)),
       check_vma=True, bugs=[("strided-heads-not-undone", ["wrong-layout"]), ("loss-pmean", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 13. transpose of a rectangular 2-D sharded matrix


def transpose2d(bug):
    def body(a):
        col = lax.all_gather(a, "r", axis=0, tiled=True)  # (M, N/4)
        rows = lax.all_to_all(col, "c", split_axis=0, concat_axis=1, tiled=True)  # (M/4, N)
        w = rows.shape[1] // 2
        off = (idx("c") % 2) if bug == "slice-at-c-mod-2" else idx("r")
        blk = lax.dynamic_slice_in_dim(rows, off * w, w, axis=1)  # (M/4, N/2)
        return blk if bug == "no-local-transpose" else blk.T
    return body


C.smap("s.transpose_rect_2d_allgather_all_to_all.r2xc4", {"r": 2, "c": 4}, transpose2d, (P("r", "c"),),
       P("r", "c"), lambda a: a.T, (R(16, 8),),
       bugs=[("slice-at-c-mod-2", ["wrong-offset"]), ("no-local-transpose", ["wrong-layout"])])

# ---------------------------------------------------------------------------
# 14. symmetrisation with the mirrored block by ppermute over (r, c)
MIRROR = [(i * 2 + j, j * 2 + i) for i in range(2) for j in range(2)]


def symm(bug):
    def body(a):
        if bug == "ppermute-over-r":
            m = lax.ppermute(a, "r", SW)
        else:
            m = lax.ppermute(a, ("r", "c"), MIRROR)
        mt = m if bug == "no-local-transpose" else jnp.swapaxes(m, 1, 2)
        return 0.5 * (a + mt)
    return body


C.smap("s.symmetrize_mirror_ppermute_tuple.b2xr2xc2", {"b": 2, "r": 2, "c": 2}, symm, (P("b", "r", "c"),),
       P("b", "r", "c"), lambda a: 0.5 * (a + jnp.swapaxes(a, 1, 2)), (R(4, 8, 8),),
       bugs=[("ppermute-over-r", ["wrong-permutation"]), ("no-local-transpose", ["wrong-layout"])])

# ---------------------------------------------------------------------------
# 15. all-gather collective matmul (sequence over tp, chunks written by
#     dynamic_update_slice as they arrive) under value_and_grad, check_vma=True


def agcm_ref(x, w, g):
    def loss(x, w):
        return jnp.sum(jax.nn.gelu(jnp.einsum("btd,df->btf", x, w)) * g)
    l, (dx, dw) = jax.value_and_grad(loss, (0, 1))(x, w)
    return l, dx, dw


def agcm(bug):
    def body(x, w, g):
        me, n = idx("tp"), 4
        tl = x.shape[1]

        def fwd(x, w):
            def put(out, chunk, s):
                slot = (me - s) % n if bug == "slot-me-minus-s" else (me + s) % n
                return lax.dynamic_update_slice_in_dim(out, jnp.einsum("btd,df->btf", chunk, w), slot * tl, axis=1)
            out = put(jnp.zeros((x.shape[0], n * tl, w.shape[1]), f32), x, 0)

            def step(s, carry):
                chunk, out = carry
                chunk = lax.ppermute(chunk, "tp", LEFT4)  # now holds block me + s
                return chunk, put(out, chunk, s)
            return lax.fori_loop(1, n, step, (x, out))[1]

        def local(x, w):
            return jnp.sum(jax.nn.gelu(fwd(x, w)) * g)
        l, (dx, dw) = jax.value_and_grad(local, (0, 1))(x, w)
        if bug == "dw-psum-dp-by-hand":
            dw = psum(dw, "dp")  # check_vma already summed it over dp
        return psum(l, ("dp", "tp")), dx, dw
    return body


C.smap("s.allgather_collective_matmul_dus_grad.dp2xtp4", {"dp": 2, "tp": 4}, agcm,
       (P("dp", "tp"), P(None, "tp"), P("dp", None, "tp")), (P(), P("dp", "tp"), P(None, "tp")), agcm_ref,
       (R(4, 16, 8), R(8, 16, scale=0.4), R(4, 16, 16)), check_vma=True,
       bugs=[("slot-me-minus-s", ["wrong-offset"]), ("dw-psum-dp-by-hand", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 16. SGD step of the weight-stationary 2-D MLP of 7. (check_vma=True: the
#     gain's gradient summed over y by the transpose of its implicit pvary)
LR16 = 0.1
OPT19 = optax.adamw(1e-2, weight_decay=0.1)
P19 = {"g": 1.0 + R(D7, scale=0.1), "w1": R(D7, F7, scale=0.3), "w2": R(F7, D7, scale=0.2)}
S19 = OPT19.init(P19)
PS19 = {"g": P("x"), "w1": P("x", "y"), "w2": P("y", "x")}


def mlp_sgd_ref(p, x, y):
    def loss(p):
        return jnp.mean(jnp.square(mlp2d_ref(x, p["g"], p["w1"], p["w2"]) - y))
    l, gr = jax.value_and_grad(loss)(p)
    return jax.tree.map(lambda a, b: a - LR16 * b, p, gr), l


def mlp_sgd(bug):
    fwd = mlp2d(None)

    def body(p, x, y):
        def loss(p):
            d = fwd(x, p["g"], p["w1"], p["w2"]) - y  # (B, D/x), invariant over y
            if bug == "mean-over-local-count":
                return jnp.mean(jnp.square(d))
            return jnp.sum(jnp.square(d)) / (B7 * D7)
        l, gr = jax.value_and_grad(loss)(p)
        l = pmean(l, "x") if bug == "loss-pmean-x" else psum(l, "x")
        return jax.tree.map(lambda a, b: a - LR16 * b, p, gr), l
    return body


C.smap("s.weight_stationary_2d_mlp_sgd_step.x4xy2", {"x": 4, "y": 2}, mlp_sgd,
       (PS19, P(None, "x"), P(None, "x")), (PS19, P()), mlp_sgd_ref, (P19, R(B7, D7), R(B7, D7)), check_vma=True,
       bugs=[("mean-over-local-count", ["wrong-scale"]), ("loss-pmean-x", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 17. 3-D matmul written with psum then a slice (the reduce-scatter done the
#     long way) and A's rows all-gathered by hand as a psum of zero-padded
#     blocks (dynamic_update_slice at the owner's offset)


def mm3d_long(bug):
    def body(a, b):
        i_ = idx("i")
        ml = a.shape[0]
        pad = jnp.zeros((2 * ml, a.shape[1]), a.dtype)
        at = 0 if bug == "pad-at-zero" else i_ * ml
        afull = psum(lax.dynamic_update_slice_in_dim(pad, a, at, axis=0), "i")  # (M, K/k)
        c = psum(afull @ b, "k")  # (M, N/j), replicated over i and k
        w = c.shape[1] // 2
        off = idx("j") if bug == "slice-at-j" else idx("k")
        cb = lax.dynamic_slice_in_dim(c, off * w, w, axis=1)  # (M, N/(j k))
        return lax.dynamic_slice_in_dim(cb, i_ * ml, ml, axis=0)
    return body


C.smap("s.matmul_3d_psum_slice_handmade_gather.i2xj2xk2", {"i": 2, "j": 2, "k": 2}, mm3d_long,
       (P("i", "k"), P("k", "j")), P("i", ("j", "k")), lambda a, b: a @ b, (R(8, 16), R(16, 16, scale=0.3)),
       bugs=[("pad-at-zero", ["wrong-offset"]), ("slice-at-j", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 18. redundant depth layers: every layer of d computes the whole block
#     C_ij = A_i: B_:j (A's row panel all_gather'd over c, B's column panel
#     over r), then the replicas are "averaged" by psum over d / 2


def redundant_depth(bug):
    def body(a, b):
        ar = lax.all_gather(a, "c", axis=1, tiled=True)
        bc = lax.all_gather(b, "r", axis=0, tiled=True)
        c = psum(ar @ bc, "d")
        if bug == "psum-not-averaged":
            return c
        return c / (4 if bug == "divided-by-4" else 2)
    return body


C.smap("s.redundant_depth_layers_psum_average.d2xr2xc2", {"d": 2, "r": 2, "c": 2}, redundant_depth,
       (P("r", "c"), P("r", "c")), P("r", "c"), lambda a, b: a @ b, (R(8, 12), R(12, 8)),
       bugs=[("psum-not-averaged", ["wrong-scale"]), ("divided-by-4", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 19. SUMMA entirely in bf16 (bf16 accumulation, as the baseline's a @ b in
#     bf16 has it), panels by all_gather (tiled) and python-unrolled steps


def summa_bf16(bug):
    def body(a, b):
        ag = lax.all_gather(a, "c", axis=1, tiled=True)  # (M/2, K)
        bg = lax.all_gather(b, "r", axis=0, tiled=True)  # (K, N/4)
        kp = 8
        acc = jnp.zeros((a.shape[0], b.shape[1]), bf16)
        for t in range(ag.shape[1] // kp):
            bt = t + 1 if bug == "b-panel-next" and t + 1 < ag.shape[1] // kp else t
            acc = acc + ag[:, t * kp:(t + 1) * kp] @ bg[bt * kp:(bt + 1) * kp]
        return acc
    return body


C.smap("s.summa_bf16_unrolled_allgather_panels.r2xc4", {"r": 2, "c": 4}, summa_bf16, (P("r", "c"), P("r", "c")),
       P("r", "c"), lambda a, b: a @ b, (R(16, 32, dt=bf16), R(32, 16, scale=0.5, dt=bf16)),
       bugs=[("b-panel-next", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 20. a 1-D all-gather matmul ring laid over the whole 2-D mesh: x's rows over
#     the tuple (x, y) (x-major linear order), the ring a ppermute over the
#     tuple with linear indices, the chunk's rows from axis_index((x, y))
RING8 = [(i, (i - 1) % 8) for i in range(8)]


def ring2d(bug):
    def body(xs, w):
        perm = [(a, b_) for b_, a in RING8] if bug == "ring-reversed" else RING8
        me = idx(("x", "y"))
        tl = xs.shape[0]

        def step(s, carry):
            chunk, out = carry
            slot = (me + s) % 8
            out = lax.dynamic_update_slice_in_dim(out, jnp.tanh(chunk @ w), slot * tl, axis=0)
            return lax.ppermute(chunk, ("x", "y"), perm), out
        out = jnp.zeros((8 * tl, w.shape[1]), f32)
        return lax.fori_loop(0, 8, step, (xs, out))[1]
    return body


C.smap("s.allgather_matmul_ring_over_mesh_tuple.x2xy4", {"x": 2, "y": 4}, ring2d, (P(("x", "y")), P()), P(),
       lambda xs, w: jnp.tanh(xs @ w), (R(16, 8), R(8, 8, scale=0.5)),
       bugs=[("ring-reversed", ["wrong-permutation"])])

# ---------------------------------------------------------------------------
# GSPMD pairs
M15 = make_mesh({"x": 4, "y": 2})


def mlp2d_cons(x, g, w1, w2):
    c = lambda t, s: lax.with_sharding_constraint(t, NamedSharding(M15, s))
    h = c(ln(x, g) @ w1, P("x", "y"))
    o = c(jax.nn.gelu(h) @ w2, P("x", None))
    return x + o


C.gspmd("g.weight_stationary_2d_mlp_constrained.x4xy2", {"x": 4, "y": 2}, SP7, P(None, "x"), mlp2d_cons, A7)

C.gspmd("g.agarwal_3d_layout_gelu.i2xj2xk2", {"i": 2, "j": 2, "k": 2}, (P("i", "k"), P("k", "j")),
        P("i", ("j", "k")), lambda a, b: jax.nn.gelu(a @ b), (R(8, 16), R(16, 16, scale=0.3)))

C.gspmd("g.transpose_rect_2d.r2xc4", {"r": 2, "c": 4}, (P("r", "c"),), P("r", "c"), lambda a: a.T, (R(16, 8),))

M18 = make_mesh({"sp": 4})


def uly_cons(q, k, v, wo):
    c = lambda t, s: lax.with_sharding_constraint(t, NamedSharding(M18, s))
    q, k, v = (c(t, P(None, None, "sp")) for t in (q, k, v))
    o = c(attn(q, k, v), P(None, None, "sp"))
    o = c(o, P(None, "sp"))
    return o.reshape(o.shape[:2] + (-1,)) @ wo


C.gspmd("g.ulysses_constrained_heads.sp4", {"sp": 4}, (P(None, "sp"),) * 3 + (P(),), P(None, "sp"), uly_cons,
        (R(2, 16, 8, 8), R(2, 16, 8, 8), R(2, 16, 8, 8), R(64, 32, scale=0.2)))

SS19 = state_specs(S19, PS19)


def step19(p, s, x, y):
    def loss(p):
        return jnp.mean(jnp.square(mlp2d_ref(x, p["g"], p["w1"], p["w2"]) - y))
    l, g = jax.value_and_grad(loss)(p)
    u, s = OPT19.update(g, s, p)
    return optax.apply_updates(p, u), s, l


C.gspmd("g.mlp_2d_adamw_step.x2xy4", {"x": 2, "y": 4}, (PS19, SS19, P(None, "x"), P(None, "x")),
        (PS19, SS19, P()), step19, (P19, S19, R(B7, D7), R(B7, D7)))

C.gspmd("g.chain_ab_ct_2d.r2xc4", {"r": 2, "c": 4}, (P("r", "c"), P("r", "c"), P("c", "r")), P("r", "c"),
        lambda a, b, c: (a @ b) @ c.T, (R(16, 8), R(8, 16), R(8, 16)))

C.gspmd("g.attention_2d_tp.x2xy4", {"x": 2, "y": 4}, (P(None, None, "x"), P("x", "y"), P("x", "y"), P("x", "y"),
        P("y", "x")), P(None, None, "x"), attn2d_ref,
        (R(B8, T8, D8), R(D8, H8 * E8, scale=0.3), R(D8, H8 * E8, scale=0.3), R(D8, H8 * E8, scale=0.3),
         R(H8 * E8, D8, scale=0.3)))

C.gspmd("g.summa_nt_layout.r2xc4", {"r": 2, "c": 4}, (P("r", "c"), P("r", "c")), P("r", "c"),
        lambda a, b: a @ b.T, (R(16, 32), R(16, 32)))

C.gspmd("g.symmetrize_batch.b2xr2xc2", {"b": 2, "r": 2, "c": 2}, (P("b", "r", "c"),), P("b", "r", "c"),
        lambda a: 0.5 * (a + jnp.swapaxes(a, 1, 2)), (R(4, 8, 8),))

C.gspmd("g.transpose_spec_swap.r2xc4", {"r": 2, "c": 4}, (P("r", "c"),), P("c", "r"), lambda a: a.T, (R(16, 8),))


def tile_norms(a):
    t = a.reshape(2, 8, 4, 2).transpose(0, 2, 1, 3)  # (row block, col block, 8, 2)
    return t, jnp.sqrt(jnp.sum(jnp.square(t), (2, 3)))


C.gspmd("g.block_tiles_view_norms.r2xc4", {"r": 2, "c": 4}, (P("r", "c"),), (P("r", "c"), P("r", "c")),
        tile_norms, (R(16, 8),))

C.gspmd("g.batched_einsum_mixed_specs.b2xr2xc2", {"b": 2, "r": 2, "c": 2}, (P("b", "r", "c"), P("b", "c", "r")),
        P("b", "r", "c"), lambda a, b: jnp.einsum("bmk,bkn->bmn", a, b), (R(4, 8, 8), R(4, 8, 8)))

C.gspmd("g.matmul_rolled_sharded_k.r2xc4", {"r": 2, "c": 4}, (P("r", "c"), P("c", None)), P("r", None),
        lambda a, b: a @ jnp.roll(b, 3, axis=0), (R(8, 16), R(16, 8)))

C.finish()
