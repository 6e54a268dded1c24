# eighteenth batch: more correct programs that look wrong op by op — a bf16
# row-parallel matmul whose partial sums are widened to f32 for the psum (the
# usual "reduce in fp32"), a pmax over an axis along which the value is
# sharded (the max of the blocks, as the baseline writes it with a reshape),
# an all_gather along the other dim put back in place by a reshape and
# transpose, two partial sums over different axes each divided by the other
# axis' size before one psum over both, a hierarchical psum (within the inner
# axis, then the outer), a psum_scatter then psum over the other axis.
# Bug variants: narrowing to f16 before the psum, no division of the second
# partial, the scatter gathered back along the wrong dim.
D18 = 16

# 1. bf16 row-parallel matmul, partial sums widened to f32 for the psum
def bf16_f32_psum(bug):
    def f(x, w):
        y = jnp.dot(x, w)                                 # bf16, partial over tp
        wide = jnp.float16 if bug == "f16-psum" else jnp.float32
        return psum(y.astype(wide), "tp").astype(jnp.bfloat16)
    return f
variants("s.bf16_psum_in_f32", "tp4", {"tp": 4}, bf16_f32_psum, (P(None, "tp"), P("tp")), P(), lambda x, w: jnp.dot(x, w),
         (R(8, D18, dt=jnp.bfloat16), R(D18, 8, dt=jnp.bfloat16)), [("f16-psum", ["dtype-mismatch"])])

# 2. pmax over the axis the rows are sharded along: the max of the four blocks
def pmax_blocks(bug):
    def f(x):
        return lax.pmax(jnp.tanh(x), "sp")
    return f
variants("s.pmax_of_blocks", "sp4", {"sp": 4}, pmax_blocks, (P("sp"),), P(),
         lambda x: jnp.tanh(x).reshape(4, -1, x.shape[1]).max(0), (R(16, 4),), [])

# 3. all_gather of a column-sharded value along dim 0, put back by reshape/transpose
def ag_other(bug):
    def f(x):
        g = lax.all_gather(x, "tp", axis=0, tiled=True)   # [4*r, c/4]: blocks stacked along rows
        r, c = x.shape
        return jnp.sin(g.reshape(4, r, c).transpose(1, 0, 2).reshape(r, 4 * c))
    return f
variants("s.gather_rows_then_transpose", "tp4", {"tp": 4}, ag_other, (P(None, "tp"),), P(), jnp.sin, (R(8, 16),), [])

# 4. a data term partial over dp and a weight term partial over tp, each
#    divided by the other axis' size, summed by one psum over both
def two_partials(bug):
    def f(x, w, v):
        data = jnp.sum(jnp.tanh(x @ v)) / 2                # partial over dp (x rows), same on every tp device
        reg = jnp.sum(w * w) / (2 if bug != "undivided" else 1)   # partial over tp (w cols), same on every dp device
        return psum(data + reg, ("dp", "tp"))
    return f
def two_base(x, w, v): return jnp.sum(jnp.tanh(x @ v)) + jnp.sum(w * w)
variants("s.two_partials_one_psum", "dp2xtp2", {"dp": 2, "tp": 2}, two_partials, (P("dp"), P(None, "tp"), P()), P(), two_base,
         (R(8, D18), R(D18, 8), R(D18, 4)), [("undivided", ["wrong-reduction"])])

# 5. a hierarchical all-reduce: psum within tp, then within dp
def hier(bug):
    def f(x, w):
        y = x @ w                                         # partial over (dp, tp): both contract a sharded dim
        return psum(psum(y, "tp"), "dp")
    return f
variants("s.hierarchical_psum", "dp2xtp2", {"dp": 2, "tp": 2}, hier, (P(None, ("dp", "tp")), P(("dp", "tp"))), P(),
         lambda x, w: x @ w, (R(8, D18), R(D18, 8)), [])

# 6. psum_scatter over tp then psum over dp, gathered back over tp
def rs_then_other(bug):
    def f(x, w):
        y = lax.psum_scatter(x @ w, "tp", scatter_dimension=1, tiled=True)
        y = psum(y, "dp")
        return lax.all_gather(y, "tp", axis=1 if bug != "gather-dim0" else 0, tiled=True)
    return f
variants("s.scatter_then_other_axis", "dp2xtp2", {"dp": 2, "tp": 2}, rs_then_other, (P(None, ("dp", "tp")), P(("dp", "tp"))), P(),
         lambda x, w: x @ w, (R(4, D18), R(D18, 8)), [("gather-dim0", ["wrong-shard-dim"])])

# 7. GSPMD: a bf16 model whose matmul accumulates in f32 (preferred_element_type)
gspmd("g.bf16_dot_f32_accum_tp4", {"tp": 4}, (P(None, "tp"), P("tp", None)), P(),
      lambda x, w: jnp.dot(x, w, preferred_element_type=jnp.float32).astype(jnp.bfloat16),
      (R(8, D18, dt=jnp.bfloat16), R(D18, 8, dt=jnp.bfloat16)))
