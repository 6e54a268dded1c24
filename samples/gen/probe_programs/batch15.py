# fifteenth batch: collectives in their less common forms — psum_scatter
# along dim 1 then all_gather back, an untiled all_gather transposed into
# place, an all_to_all between sequence and heads, a roll by two blocks,
# pmin, a pytree psum over two axes, a dynamic_slice at the device's offset
# along dim 1, a mask from iota rows offset by axis_index — and GSPMD argmin,
# roll and where, segment_sum, .at[].set at data positions, one_hot into a
# sharded vocab, sort and cummax along a sharded dim, a three-operand einsum.
# Bug variants: a gather along the wrong dim, an all_to_all concatenating
# along batch (outputs of another shape), offsets left out, a local min, a
# psum over one axis of two, a shift by one block.
D15 = 16
# 1. psum_scatter along dim 1 (tiled), then all_gather back along dim 1
def rs_dim1(bug):
    def f(x, w):
        y = x @ w                                   # partial over tp (w rows sharded)
        y = lax.psum_scatter(y, "tp", scatter_dimension=1, tiled=True)
        y = jnp.tanh(y)
        return lax.all_gather(y, "tp", axis=1 if bug != "gather-dim0" else 0, tiled=True)
    return f
variants("s.rs_dim1", "tp4", {"tp": 4}, rs_dim1, (P(None, "tp"), P("tp")), P(), lambda x, w: jnp.tanh(x @ w),
       (R(8, D15), R(D15, 16)), [("gather-dim0", ["wrong-shard-dim"])])

# 2. all_gather untiled + reshape/transpose
def ag_untiled(bug):
    def f(x):
        g = lax.all_gather(x, "sp")                 # [4, s, d]
        if bug == "no-transpose": return g.reshape(x.shape[0], -1) * 2
        return jnp.transpose(g, (1, 0, 2, 3)).reshape(x.shape[0], -1) * 2
    return f
variants("s.ag_untiled_transpose", "sp4", {"sp": 4}, ag_untiled, (P(None, "sp"),), P(), lambda x: (x * 2).reshape(x.shape[0], -1),
       (R(4, 8, 3),), [("no-transpose", ["layout-mismatch"])])

# 3. all_to_all with split_axis != concat_axis (sequence <-> heads)
def a2a_sh(bug):
    def f(x):   # x: [b, s/4, h, d] -> [b, s, h/4, d]
        y = lax.all_to_all(x, "sp", split_axis=2, concat_axis=1 if bug != "concat-0" else 0, tiled=True)
        return jnp.tanh(y)
    return f
variants("s.a2a_seq_heads", "sp4", {"sp": 4}, a2a_sh, (P(None, "sp"),), P(None, None, "sp"), lambda x: jnp.tanh(x),
       (R(2, 8, 4, 3),), [("concat-0", ["wrong-shard-dim"])])

# 4. ppermute shift by 2 (roll by two blocks)
def roll2(bug):
    def f(x):
        n = 4; k = 2 if bug != "shift-1" else 1
        return lax.ppermute(x, "sp", [(j, (j + k) % n) for j in range(n)])
    return f
variants("s.roll_two_blocks", "sp4", {"sp": 4}, roll2, (P("sp"),), P("sp"), lambda x: jnp.roll(x, 2 * x.shape[0] // 4, axis=0),
       (R(16, 3),), [("shift-1", ["wrong-shard-dim"])])

# 5. pmin for a global min-normalisation
def minnorm_base(x): return x - jnp.min(x)
def minnorm(bug):
    def f(x):
        m = jnp.min(x)
        if bug != "local-min": m = lax.pmin(m, "dp")
        return x - m
    return f
variants("s.pmin_shift", "dp4", {"dp": 4}, minnorm, (P("dp"),), P("dp"), minnorm_base, (R(16, 4),), [("local-min", ["missing-all-reduce"])])

# 6. pytree psum over two axes in either order
def tree_base(a, b): return {"a": jnp.sum(a, 0), "b": jnp.sum(b)}
def tree_psum(bug):
    def f(a, b):
        t = {"a": jnp.sum(a, 0), "b": jnp.sum(b)}
        return lax.psum(t, ("tp", "dp") if bug != "dp-only" else "dp")
    return f
variants("s.tree_psum_axes", "dp2xtp4", {"dp": 2, "tp": 4}, tree_psum, (P(("dp", "tp")), P(("tp", "dp"))), {"a": P(), "b": P()}, tree_base,
       (R(16, 3), R(16)), [("dp-only", ["missing-all-reduce"])])

# 7. dynamic_slice of a replicated table at axis_index offset on dim 1
def ds_dim1(bug):
    def f(t, x):
        r = lax.axis_index("tp"); w = t.shape[1] // 4
        off = r * w if bug != "no-offset" else 0
        return x * lax.dynamic_slice_in_dim(t, off, w, axis=1)
    return f
variants("s.dynslice_dim1", "tp4", {"tp": 4}, ds_dim1, (P(), P(None, "tp")), P(None, "tp"), lambda t, x: x * t,
       (R(4, 16), R(4, 16)), [("no-offset", ["wrong-shard-dim"])])

# 8. GSPMD: argmin over a sharded dim, jnp.roll on a sharded dim, where with sharded cond
gspmd("g.argmin_roll_where.dp2xtp4", {"dp": 2, "tp": 4}, (P("dp", "tp"), P("dp", "tp")), (P("dp"), P("dp", "tp")),
        lambda x, c: (jnp.argmin(x, 1), jnp.where(c > 0, jnp.roll(x, 3, 1), -x)), (R(8, 16), R(8, 16)))

# 9. GSPMD: segment_sum with sharded data and replicated segment ids, num_segments small
gspmd("g.segment_sum_sharded.dp4", {"dp": 4}, (P("dp"), P("dp")), P(),
        lambda x, s: jax.ops.segment_sum(x, s, num_segments=5), (R(16, 3), I(0, 5, 16)))

# 10. GSPMD: .at[].set on a sharded dim at data positions
gspmd("g.at_set_sharded.tp4", {"tp": 4}, (P(None, "tp"), P(), P()), P(None, "tp"),
        lambda x, i, v: x.at[:, i].set(v), (R(4, 16), I(0, 16, 3), R(4, 3)))

# 11. GSPMD: one_hot into a vocab-sharded output and a norm
gspmd("g.onehot_norm.dp2xtp4", {"dp": 2, "tp": 4}, (P("dp"), P("dp", "tp")), (P("dp", "tp"), P("dp")),
        lambda y, x: (jax.nn.one_hot(y, 16) * 3.0, jnp.linalg.norm(x, axis=1)), (I(0, 16, 8), R(8, 16)))

# 12. GSPMD: sort along a sharded dim and cummax
gspmd("g.sort_cummax.sp4", {"sp": 4}, (P(None, "sp"),), (P(None, "sp"), P(None, "sp")),
        lambda x: (jnp.sort(x, 1), lax.cummax(x, axis=1)), (R(4, 16),))

# 13. GSPMD: three-operand einsum with fsdp x tp and a broadcasted bias
gspmd("g.einsum_bias_3d.fsdp2xtp4", {"fsdp": 2, "tp": 4}, (P("fsdp"), P(None, "tp"), P("tp"), P("tp")), P("fsdp"),
        lambda x, a, b, c: jnp.einsum("bi,ij,jk->bk", x, a, b) + c.sum(), (R(8, D15), R(D15, 32), R(32, D15), R(8)))

# 14. shard_map: row-parallel layer with psum then dropout-like fixed mask from iota and axis_index
def fixed_mask_base(x, w):
    y = x @ w
    m = (jnp.arange(y.shape[0])[:, None] + jnp.arange(y.shape[1])[None]) % 3 != 0
    return jnp.where(m, y, 0.0)
def fixed_mask(bug):
    def f(x, w):
        y = lax.psum(x @ w, "tp")
        rows = jnp.arange(y.shape[0]) + (lax.axis_index("dp") * y.shape[0] if bug != "row-no-offset" else 0)
        m = (rows[:, None] + jnp.arange(y.shape[1])[None]) % 3 != 0
        return jnp.where(m, y, 0.0)
    return f
variants("s.iota_mask_rows", "dp2xtp4", {"dp": 2, "tp": 4}, fixed_mask, (P("dp", "tp"), P("tp")), P("dp"), fixed_mask_base,
       (R(8, D15), R(D15, 8)), [("row-no-offset", ["wrong-shard-dim"])])
