# eighth batch: programs aimed at the finding rules (loops carrying partials, psum of sharded values, partials over different axes)
def c8(name, tag, mesh, f, ins, out, base, args):
    variants(name, tag, mesh, lambda bug: f, ins, out, base, args, [])
# loop accumulates a partial sum from zeros, psum after the loop (grad-accumulation style)
def acc_loop_dist(xs, w):
    acc = lax.fori_loop(0, xs.shape[0], lambda i, a: a + xs[i] @ w, jnp.zeros((xs.shape[1], w.shape[1]), jnp.float32))
    return psum(acc, "tp")
def acc_loop_base(xs, w):
    return lax.fori_loop(0, xs.shape[0], lambda i, a: a + xs[i] @ w, jnp.zeros((xs.shape[1], w.shape[1]), jnp.float32))
c8("s.loop_accum_partial_psum_after", "tp4", {"tp": 4}, acc_loop_dist, (P(None, None, "tp"), P("tp", None)), P(), acc_loop_base,
   (R(3, 8, D), R(D, 8, scale=0.2)))
def acc_scan_dist(xs, w):
    return psum(lax.scan(lambda a, x: (a + x @ w, None), jnp.zeros((xs.shape[1], w.shape[1])), xs)[0], "tp")
def acc_scan_base(xs, w):
    return lax.scan(lambda a, x: (a + x @ w, None), jnp.zeros((xs.shape[1], w.shape[1])), xs)[0]
c8("s.scan_accum_partial_psum_after", "tp4", {"tp": 4}, acc_scan_dist, (P(None, None, "tp"), P("tp", None)), P(), acc_scan_base,
   (R(3, 8, D), R(D, 8, scale=0.2)))
# data-parallel grad accumulation over microbatches inside a loop, pmean after the loop; baseline has the same loop
def ga_dist(w, xs, ys):
    g = lax.fori_loop(0, 2, lambda i, g: g + jax.grad(lin_loss)(w, xs[i], ys[i]), jnp.zeros_like(w)) / 2
    return w - 0.1 * pmean(g, "dp")
def ga_base(w, xs, ys):
    g = lax.fori_loop(0, 2, lambda i, g: g + jax.grad(lin_loss)(w, xs[i], ys[i]), jnp.zeros_like(w)) / 2
    return w - 0.1 * g
c8("s.dp_grad_accum_loop_both", "dp4", {"dp": 4}, ga_dist, (P(), P(None, "dp"), P(None, "dp")), P(), ga_base,
   (R(D, 8, scale=0.2), R(2, 16, D), R(2, 16, 8)))
# all-gather emulated by zero buffer + dynamic_update_slice + psum
def ag_psum(x):
    n = x.shape[0]
    buf = jnp.zeros((4 * n,) + x.shape[1:], x.dtype)
    return psum(lax.dynamic_update_slice_in_dim(buf, x, idx("sp") * n, 0), "sp")
c8("s.allgather_via_psum", "sp4", {"sp": 4}, ag_psum, (P("sp"),), P(), lambda x: x + 0.0, (R(16, 4),))
# psum of a sharded value = sum of the blocks
c8("m.psum_of_sharded_is_blocksum", "sp4", {"sp": 4}, lambda x: psum(x, "sp"), (P("sp"),), P(), lambda x: x.reshape(4, 4, 4).sum(0), (R(16, 4),))
# product of partial sums over different mesh axes, reduced over both
c8("m.mul_partials_two_axes", "dp2xtp4", {"dp": 2, "tp": 4}, lambda a, b: psum(a.sum(0) * b.sum(0), ("dp", "tp")),
   (P("dp"), P("tp")), P(), lambda a, b: a.sum(0) * b.sum(0), (R(8, 4), R(16, 4)))
c8("m.dot_partials_two_axes", "dp2xtp4", {"dp": 2, "tp": 4}, lambda a, b: psum(a.sum(0) @ b.sum(0), ("dp", "tp")),
   (P("dp"), P("tp")), P(), lambda a, b: a.sum(0) @ b.sum(0), (R(8, 4, 6), R(16, 6, 4)))
# 2-D sharded matmul: contraction sharded over tp, the result then psum'd; rows over dp
c8("s.matmul_2d_contract_tp", "dp2xtp4", {"dp": 2, "tp": 4}, lambda x, w: psum(x @ w, "tp"), (P("dp", "tp"), P("tp", None)), P("dp"),
   lambda x, w: x @ w, (R(8, D), R(D, 8)))
# loss = sum of a row-parallel (partial) output, psum after the reduction
c8("s.sum_of_partial_then_psum", "tp4", {"tp": 4}, lambda x, w: psum(jnp.sum(jnp.tanh(x) @ w), "tp"), (P(None, "tp"), P("tp", None)), P(),
   lambda x, w: jnp.sum(jnp.tanh(x) @ w), (R(8, D), R(D, 8)))
c8("s.mean_of_partial_then_psum", "tp4", {"tp": 4}, lambda x, w: psum(jnp.mean(x @ w, 0), "tp"), (P(None, "tp"), P("tp", None)), P(),
   lambda x, w: jnp.mean(x @ w, 0), (R(8, D), R(D, 8)))
# scale a partial by a dup before the psum (linear: fine)
c8("s.scale_partial_then_psum", "tp4", {"tp": 4}, lambda x, w, s: psum((x @ w) * s, "tp"), (P(None, "tp"), P("tp", None), P()), P(),
   lambda x, w, s: (x @ w) * s, (R(8, D), R(D, 8), R(8)))
# divide a partial by a dup before the psum (linear: fine)
c8("s.div_partial_then_psum", "tp4", {"tp": 4}, lambda x, w, s: psum((x @ w) / s, "tp"), (P(None, "tp"), P("tp", None), P()), P(),
   lambda x, w, s: (x @ w) / s, (R(8, D), R(D, 8), np.abs(R(8)) + 1))
# pmean of a partial sum times n (same as psum)
c8("s.pmean_times_n", "tp4", {"tp": 4}, lambda x, w: pmean(x @ w, "tp") * 4, (P(None, "tp"), P("tp", None)), P(),
   lambda x, w: x @ w, (R(8, D), R(D, 8)))
# transpose / reshape of a partial before psum
c8("s.reshape_partial_then_psum", "tp4", {"tp": 4}, lambda x, w: psum((x @ w).T.reshape(-1), "tp"), (P(None, "tp"), P("tp", None)), P(),
   lambda x, w: (x @ w).T.reshape(-1), (R(8, D), R(D, 8)))
# negation / subtraction of partials before psum
c8("s.sub_partials_then_psum", "tp4", {"tp": 4}, lambda x, w1, w2: psum(x @ w1 - x @ w2, "tp"), (P(None, "tp"), P("tp", None), P("tp", None)), P(),
   lambda x, w1, w2: x @ w1 - x @ w2, (R(8, D), R(D, 8), R(D, 8)))
# select between two partials with a dup mask before psum (linear per element)
c8("s.select_partials_then_psum", "tp4", {"tp": 4}, lambda x, w1, w2, m: psum(jnp.where(m, x @ w1, x @ w2), "tp"),
   (P(None, "tp"), P("tp", None), P("tp", None), P()), P(), lambda x, w1, w2, m: jnp.where(m, x @ w1, x @ w2),
   (R(8, D), R(D, 8), R(D, 8), R(8, 8) > 0))
# masked partial (zero where mask) before psum
c8("s.mask_partial_then_psum", "tp4", {"tp": 4}, lambda x, w, m: psum(jnp.where(m, x @ w, 0.0), "tp"),
   (P(None, "tp"), P("tp", None), P()), P(), lambda x, w, m: jnp.where(m, x @ w, 0.0), (R(8, D), R(D, 8), R(8, 8) > 0))
# convert a partial to a wider type before psum (f32 -> f64 not available; bf16 -> f32)
c8("s.upcast_partial_then_psum", "tp4", {"tp": 4}, lambda x, w: psum((x @ w).astype(jnp.float32), "tp"),
   (P(None, "tp"), P("tp", None)), P(), lambda x, w: (x @ w).astype(jnp.float32),
   (R(8, D).astype(jnp.bfloat16), R(D, 8).astype(jnp.bfloat16)))
