# sixth batch: unusual-but-correct collective idioms (each once reported as a false alarm, or close to one)
def c6(name, tag, mesh, f, ins, out, base, args):
    variants(name, tag, mesh, lambda bug: f, ins, out, base, args, [])
# offsets
c6("s.slice_reversed_device_order", "dp4", {"dp": 4}, lambda w: lax.dynamic_slice_in_dim(w, (3 - idx("dp")) * 4, 4, 0)[::-1],
   (P(),), P("dp"), lambda w: w[::-1], (R(16, 4),))
c6("s.slice_offset_table", "dp4", {"dp": 4}, lambda w: lax.dynamic_slice_in_dim(w, jnp.array([0, 4, 8, 12])[idx("dp")], 4, 0) * 2.0,
   (P(),), P("dp"), lambda w: w * 2.0, (R(16, 4),))
c6("s.slice_flat_2d_index", "dp2xtp4", {"dp": 2, "tp": 4}, lambda w: lax.dynamic_slice_in_dim(w, (idx("dp") * 4 + idx("tp")) * 2, 2, 0) - 1.0,
   (P(),), P(("dp", "tp")), lambda w: w - 1.0, (R(16, 4),))
c6("s.slice_multi_axis_index", "dp2xtp4", {"dp": 2, "tp": 4}, lambda w: lax.dynamic_slice_in_dim(w, idx(("dp", "tp")) * 2, 2, 0) - 1.0,
   (P(),), P(("dp", "tp")), lambda w: w - 1.0, (R(16, 4),))
# permutations
c6("s.roll_by_two_shards", "sp4", {"sp": 4}, lambda x: lax.ppermute(x, "sp", [(i, (i + 2) % 4) for i in range(4)]),
   (P("sp"),), P("sp"), lambda x: jnp.roll(x, 8, 0), (R(16, 4),))
def butterfly(x, w):
    p = x @ w
    p = p + lax.ppermute(p, "tp", [(i, i ^ 1) for i in range(4)])
    return p + lax.ppermute(p, "tp", [(i, i ^ 2) for i in range(4)])
c6("s.butterfly_allreduce", "tp4", {"tp": 4}, butterfly, (P(None, "tp"), P("tp", None)), P(), lambda x, w: x @ w, (R(8, 16), R(16, 8)))
c6("s.ppermute_2d_inner_axis", "dp2xtp4", {"dp": 2, "tp": 4}, lambda x: lax.ppermute(x, "tp", [(i, (i + 1) % 4) for i in range(4)]),
   (P("dp", "tp"),), P("dp", "tp"), lambda x: jnp.roll(x.reshape(8, 4, 8), 1, 1).reshape(8, 32), (R(8, 32),))
# layout
c6("s.gather_axis1_then_transpose", "fsdp4", {"fsdp": 4}, lambda w, x: x @ lax.all_gather(w, "fsdp", axis=1).transpose(1, 0, 2).reshape(D, 16),
   (P("fsdp"), P()), P(), lambda w, x: x @ w, (R(D, 16), R(8, D)))
# dtype: distributed more precise than the baseline (f32 psum of bf16 partials, cast back)
c6("s.bf16_f32_psum_castback", "tp4", {"tp": 4},
   lambda x, w: psum(jnp.dot(x, w, preferred_element_type=jnp.float32), "tp").astype(jnp.bfloat16),
   (P(None, "tp"), P("tp", None)), P(), lambda x, w: x @ w, (R(8, D).astype(jnp.bfloat16), R(D, 16, scale=0.2).astype(jnp.bfloat16)))
# dup values through reducing collectives, compensated
c6("s.psum_scatter_dup_div_n", "dp4", {"dp": 4}, lambda w, x, y: w - 0.1 * lax.psum_scatter(jax.grad(lin_loss)(lax.all_gather(w, "dp", axis=0, tiled=True), x, y), "dp", scatter_dimension=0, tiled=True) / 4,
   (P("dp"), P(), P()), P("dp"), lambda w, x, y: w - 0.1 * jax.grad(lin_loss)(w, x, y), (R(16, 8, scale=0.2), R(8, 16), R(8, 8)))
c6("s.psum_dup_then_div", "tp4", {"tp": 4}, lambda b: psum(b, "tp") / 4, (P(),), P(), lambda b: b, (R(16),))
c6("s.neg_pmax_is_pmin", "tp4", {"tp": 4}, lambda x: -pmax(-x.min(1), "tp"), (P(None, "tp"),), P(), lambda x: x.min(1), (R(8, 32),))
c6("s.count_true_psum", "dp8", {"dp": 8}, lambda x: psum(jnp.sum(x > 0, dtype=jnp.int32), "dp"), (P("dp"),), P(),
   lambda x: jnp.sum(x > 0, dtype=jnp.int32), (R(64),))
c6("s.local_mean_pmean", "dp4", {"dp": 4}, lambda x: pmean(x.mean(0), "dp"), (P("dp"),), P(), lambda x: x.mean(0), (R(16, 8),))
c6("s.global_var_two_pass", "dp4", {"dp": 4}, lambda x: (lambda mu: pmean(((x - mu) ** 2).mean(0), "dp"))(pmean(x.mean(0), "dp")),
   (P("dp"),), P(), lambda x: x.var(0), (R(16, 8),))
c6("m.psum_scatter_dup_div_n", "dp4", {"dp": 4}, lambda b: lax.psum_scatter(b, "dp", scatter_dimension=0, tiled=True) / 4,
   (P(),), P("dp"), lambda b: b, (R(16, 4),))
c6("m.psum_scatter_dup_pmean_form", "dp4", {"dp": 4}, lambda b: lax.psum_scatter(b / 4, "dp", scatter_dimension=0, tiled=True),
   (P(),), P("dp"), lambda b: b, (R(16, 4),))
c6("m.psum_scatter_partial", "dp4", {"dp": 4}, lambda x: lax.psum_scatter(x.sum(0), "dp", scatter_dimension=0, tiled=True),
   (P("dp"),), P("dp"), lambda x: x.sum(0), (R(16, 8),))
