# more shard_map and GSPMD programs (second batch)
def mk1(f): return lambda bug: f
# row-parallel linear with the bias added once (device 0) before the psum; bug: bias on every device
def rowbias(bug):
    def f(x, w, b):
        y = x @ w
        y = y + (b if bug == "bias-every-device" else jnp.where(idx("tp") == 0, b, 0.0))
        return psum(y, "tp")
    return f
variants("s.rowpar_bias_once", "tp4", {"tp": 4}, rowbias, (P(None, "tp"), P("tp", None), P()), P(),
         lambda x, w, b: x @ w + b, (R(B, D), R(D, 16, scale=0.2), R(16)), [("bias-every-device", ["wrong-reduction"])])
# row-parallel with bias / n on each device
variants("s.rowpar_bias_div", "tp4", {"tp": 4}, mk1(lambda x, w, b: psum(x @ w + b / 4, "tp")), (P(None, "tp"), P("tp", None), P()), P(),
         lambda x, w, b: x @ w + b, (R(B, D), R(D, 16, scale=0.2), R(16)), [])
# manual ring all-reduce with ppermute; bug: one step short
def ring_ar(bug):
    def f(x, w):
        p = x @ w; acc = p; buf = p
        for _ in range(2 if bug == "one-step-short" else 3):
            buf = lax.ppermute(buf, "tp", [(i, (i + 1) % 4) for i in range(4)]); acc = acc + buf
        return acc
    return f
variants("s.manual_ring_allreduce", "tp4", {"tp": 4}, ring_ar, (P(None, "tp"), P("tp", None)), P(),
         lambda x, w: x @ w, (R(B, D), R(D, 16, scale=0.2)), [("one-step-short", ["missing-all-reduce"])])
# reduce-scatter then all-gather == all-reduce
variants("s.rs_then_ag", "tp4", {"tp": 4},
         mk1(lambda x, w: lax.all_gather(lax.psum_scatter(x @ w, "tp", scatter_dimension=0, tiled=True), "tp", axis=0, tiled=True)),
         (P(None, "tp"), P("tp", None)), P(), lambda x, w: x @ w, (R(16, D), R(D, 16, scale=0.2)), [])
# tp MLP with pmean instead of psum (bug only)
smap("s.tp_mlp.tp4.bug.pmean-not-psum", {"tp": 4}, lambda w1, w2, x: pmean(jax.nn.relu(x @ w1) @ w2, "tp"),
     (P(None, "tp"), P("tp", None), P()), P(), tp_base, (R(D, F, scale=0.2), R(F, D, scale=0.2), R(B, D)),
     bug="pmean-not-psum", kinds=["wrong-reduction"], family="s.tp_mlp")
# all_gather then take own slice back == identity
variants("s.gather_then_own_slice", "sp4", {"sp": 4},
         mk1(lambda x: lax.dynamic_slice_in_dim(lax.all_gather(x, "sp", axis=0, tiled=True), idx("sp") * x.shape[0], x.shape[0], 0) * 2.0),
         (P("sp"),), P("sp"), lambda x: x * 2.0, (R(16, 8),), [])
# untiled gather, then sum over the new device axis == block sum
variants("s.gather_untiled_blocksum", "sp4", {"sp": 4}, mk1(lambda x: lax.all_gather(x, "sp").sum(0)), (P("sp"),), P(),
         lambda x: x.reshape(4, 4, 8).sum(0), (R(16, 8),), [])
# psum over a size-1 axis (identity) and pmean of an already replicated value
variants("s.size1_axis", "dp8xtp1", {"dp": 8, "tp": 1}, mk1(lambda w, x: pmean(psum(x @ w, "tp").sum(0), "dp") * 8 / x.shape[0] / 8 + pmean(w.sum(), "dp")),
         (P(None, "tp"), P("dp")), P(), lambda w, x: (x @ w).mean(0) + w.sum(), (R(D, 8), R(16, D)), [])
# per-device loss logged via all_gather then mean (metric)
variants("s.gather_losses_mean", "dp4", {"dp": 4}, mk1(lambda x, y: lax.all_gather(jnp.mean((x - y) ** 2), "dp").mean()),
         (P("dp"), P("dp")), P(), lambda x, y: jnp.mean((x - y) ** 2), (R(16, 8), R(16, 8)), [])
# 3-D mesh: dp x tp x sp
variants("s.mesh3d", "2x2x2", {"dp": 2, "tp": 2, "sp": 2},
         mk1(lambda x, w: psum(x @ w, "tp")),
         (P("dp", "sp", "tp"), P("tp", None)), P("dp", "sp"), lambda x, w: x @ w, (R(4, 8, 16), R(16, 8)), [])

# GSPMD second batch
def wsc_chain(x, w1, w2):
    h = jnp.tanh(x @ w1)
    h = jax.lax.with_sharding_constraint(h, NamedSharding(make_mesh({"dp": 2, "tp": 4}), P(None, "tp")))
    return h @ w2
gspmd("g.wsc_reshard.dp2xtp4", {"dp": 2, "tp": 4}, (P("dp"), P(), P("tp")), P(), wsc_chain, (R(8, D), R(D, F, scale=0.2), R(F, 8, scale=0.2)))
gspmd("g.mesh3d_einsum.2x2x2", {"dp": 2, "tp": 2, "sp": 2}, (P("dp", "sp", None), P(None, "tp")), P("dp", "sp", "tp"),
      lambda x, w: jnp.einsum("bsd,df->bsf", x, w), (R(4, 8, 16), R(16, 8)))
gspmd("g.l2norm_normalize.tp4", {"tp": 4}, (P(None, "tp"),), P(None, "tp"), lambda x: x / jnp.linalg.norm(x, axis=-1, keepdims=True), (R(8, 32),))
gspmd("g.xent_intlabels.vocab_tp4", {"tp": 4}, (P(None, "tp"), P()), P(),
      lambda lg, lab: jnp.mean(jax.nn.logsumexp(lg, -1) - jnp.take_along_axis(lg, lab[:, None], 1)[:, 0]), (R(8, 64), I(0, 64, 8)))
gspmd("g.batched_matmul_both.dp4", {"dp": 4}, (P("dp"), P("dp")), P("dp"), lambda a, b: jnp.einsum("bij,bjk->bik", a, b), (R(8, 4, 8), R(8, 8, 4)))
gspmd("g.transpose_out.dp2xtp4", {"dp": 2, "tp": 4}, (P("dp", "tp"),), P("tp", "dp"), lambda x: x.T * 3.0, (R(8, 32),))
gspmd("g.broadcast_add_outer.tp8", {"tp": 8}, (P("tp"), P()), P("tp", None), lambda a, b: a[:, None] + b[None, :], (R(32), R(16)))
gspmd("g.stop_gradient_ema.dp8", {"dp": 8}, (P(), P("dp"), P()), P(),
      lambda w, x, ema: 0.99 * ema + 0.01 * jax.lax.stop_gradient(jax.grad(lambda w: jnp.sum(jnp.tanh(x @ w)))(w)), (R(D, 8, scale=0.2), R(16, D), R(D, 8)))
gspmd("g.iota_causal_mask_sum.sp4", {"sp": 4}, (P(None, "sp"),), P(),
      lambda s: jnp.sum(jnp.where(jnp.arange(32)[:, None] >= jnp.arange(32)[None, :], s, 0.0), -1), (R(32, 32),))
