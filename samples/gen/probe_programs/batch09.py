# ninth batch: linear ops applied to a partial sum before its psum (all correct)
def c9(name, f, base, extra_in=(), extra_args=()):
    variants(name, "tp4", {"tp": 4}, lambda bug: f, (P(None, "tp"), P("tp", None)) + extra_in, P(), base, (X9, W9) + extra_args, [])
X9, W9 = R(8, D), R(D, 8, scale=0.3)
M9 = R(8, 8) > 0
c9("m.where_partial_zero_then_psum", lambda x, w, m: psum(jnp.where(m, x @ w, 0.0), "tp"), lambda x, w, m: jnp.where(m, x @ w, 0.0), (P(),), (M9,))
c9("m.mul_mask_partial_then_psum", lambda x, w, m: psum((x @ w) * m, "tp"), lambda x, w, m: (x @ w) * m, (P(),), (M9.astype(np.float32),))
c9("m.pad_partial_then_psum", lambda x, w: psum(jnp.pad(x @ w, ((1, 2), (0, 3))), "tp"), lambda x, w: jnp.pad(x @ w, ((1, 2), (0, 3))))
c9("m.concat_partials_then_psum", lambda x, w: psum(jnp.concatenate([x @ w, 2.0 * (x @ w)], 1), "tp"),
   lambda x, w: jnp.concatenate([x @ w, 2.0 * (x @ w)], 1))
c9("m.slice_partial_then_psum", lambda x, w: psum((x @ w)[2:6, ::2], "tp"), lambda x, w: (x @ w)[2:6, ::2])
c9("m.dynslice_partial_then_psum", lambda x, w, o: psum(lax.dynamic_slice_in_dim(x @ w, o, 4, 0), "tp"),
   lambda x, w, o: lax.dynamic_slice_in_dim(x @ w, o, 4, 0), (P(),), (np.int32(3),))
c9("m.gather_rows_partial_then_psum", lambda x, w, i: psum((x @ w)[i], "tp"), lambda x, w, i: (x @ w)[i], (P(),), (I(0, 8, 5),))
c9("m.cumsum_partial_then_psum", lambda x, w: psum(jnp.cumsum(x @ w, 0), "tp"), lambda x, w: jnp.cumsum(x @ w, 0))
c9("m.broadcast_partial_then_psum", lambda x, w: psum(jnp.broadcast_to((x @ w)[None], (3, 8, 8)), "tp"),
   lambda x, w: jnp.broadcast_to((x @ w)[None], (3, 8, 8)))
c9("m.dus_partial_into_zeros_then_psum", lambda x, w: psum(lax.dynamic_update_slice_in_dim(jnp.zeros((16, 8)), x @ w, 4, 0), "tp"),
   lambda x, w: lax.dynamic_update_slice_in_dim(jnp.zeros((16, 8)), x @ w, 4, 0))
c9("m.scatter_add_partial_then_psum", lambda x, w, i: psum(jnp.zeros((10, 8)).at[i].add(x @ w), "tp"),
   lambda x, w, i: jnp.zeros((10, 8)).at[i].add(x @ w), (P(),), (I(0, 10, 8),))
c9("m.psum_scatter_of_where_partial", lambda x, w, m: lax.all_gather(lax.psum_scatter(jnp.where(m, x @ w, 0.0), "tp", scatter_dimension=0, tiled=True), "tp", axis=0, tiled=True),
   lambda x, w, m: jnp.where(m, x @ w, 0.0), (P(),), (M9,))
c9("m.reverse_partial_then_psum", lambda x, w: psum((x @ w)[::-1], "tp"), lambda x, w: (x @ w)[::-1])
# realistic: padding-masked row-parallel projection (mask applied before the all-reduce)
def masked_rowpar(x, w, lens):
    y = x @ w                                             # B S D/tp @ D/tp O -> partial
    m = jnp.arange(x.shape[1])[None, :, None] < lens[:, None, None]
    return psum(jnp.where(m, y, 0.0), "tp")
variants("s.masked_rowpar_before_psum", "tp4", {"tp": 4}, lambda bug: masked_rowpar, (P(None, None, "tp"), P("tp", None), P()), P(),
         lambda x, w, lens: jnp.where(jnp.arange(x.shape[1])[None, :, None] < lens[:, None, None], x @ w, 0.0),
         (R(2, 8, D), R(D, 8, scale=0.3), np.array([5, 8], np.int32)), [])
# realistic: MoE combine: router-weighted expert outputs, experts tensor-parallel, psum at the end with a capacity mask
def moe_tp(x, w1, w2, gate):
    h = jax.nn.relu(jnp.einsum("td,edf->etf", x, w1))
    y = jnp.einsum("etf,efd->etd", h, w2)               # partial over tp (f sharded)
    return psum(jnp.einsum("etd,te->td", jnp.where(gate.T[..., None] > 0.3, y, 0.0), gate), "tp")
def moe_tp_base(x, w1, w2, gate):
    h = jax.nn.relu(jnp.einsum("td,edf->etf", x, w1)); y = jnp.einsum("etf,efd->etd", h, w2)
    return jnp.einsum("etd,te->td", jnp.where(gate.T[..., None] > 0.3, y, 0.0), gate)
variants("s.moe_tp_capacity_mask", "tp4", {"tp": 4}, lambda bug: moe_tp, (P(), P(None, None, "tp"), P(None, "tp", None), P()), P(), moe_tp_base,
         (R(8, 16), R(4, 16, 32, scale=0.3), R(4, 32, 16, scale=0.3), jax.nn.softmax(R(8, 4), -1)), [])
