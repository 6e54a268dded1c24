# fourth batch: bugs on 2x2 meshes where shapes coincide (axis-name confusions), and other subtle bugs
M22 = {"dp": 2, "tp": 2}
def bugpair(family, tag, mesh, make, ins, out, base, args, bugs):
    variants(family, tag, mesh, make, ins, out, base, args, bugs)
# all_gather over the wrong mesh axis
def ag_axis(bug):
    return lambda w, x: x @ lax.all_gather(w, "dp" if bug == "gather-wrong-mesh-axis" else "tp", axis=0, tiled=True)
bugpair("s.ag22", "dp2xtp2", M22, ag_axis, (P("tp"), P("dp")), P("dp"), lambda w, x: x @ w, (R(16, 8), R(8, 16)),
        [("gather-wrong-mesh-axis", ["wrong-collective-group"])])
# psum_scatter over the wrong mesh axis
def rs_axis(bug):
    return lambda x, w: lax.psum_scatter(x @ w, "dp" if bug == "scatter-wrong-mesh-axis" else "tp", scatter_dimension=1, tiled=True)
bugpair("s.rs22", "dp2xtp2", M22, rs_axis, (P(None, "tp"), P("tp", None)), P(None, "tp"), lambda x, w: x @ w, (R(8, 16), R(16, 8)),
        [("scatter-wrong-mesh-axis", ["wrong-collective-group"])])
# all_to_all over the wrong mesh axis
def a2a_axis(bug):
    ax = "dp" if bug == "a2a-wrong-mesh-axis" else "tp"
    return lambda x: lax.all_to_all(x, ax, 1, 0, tiled=True) * 2.0
bugpair("s.a2a22", "dp2xtp2", M22, a2a_axis, (P("tp"),), P(None, "tp"), lambda x: x * 2.0, (R(8, 8),),
        [("a2a-wrong-mesh-axis", ["wrong-collective-group"])])
# ppermute over the wrong mesh axis (ring roll along sp)
def pp_axis(bug):
    ax = "dp" if bug == "permute-wrong-mesh-axis" else "tp"
    return lambda x: lax.ppermute(x, ax, [(0, 1), (1, 0)])
bugpair("s.pp22", "dp2xtp2", M22, pp_axis, (P("tp"),), P("tp"), lambda x: jnp.roll(x, 4, 0), (R(8, 4),),
        [("permute-wrong-mesh-axis", ["wrong-collective-group"])])
# axis_index of the wrong axis for a slice offset
def slice_axis(bug):
    def f(w):
        n = w.shape[0] // 2
        return lax.dynamic_slice_in_dim(w, idx("dp" if bug == "index-wrong-axis" else "tp") * n, n, 0) * 3.0
    return f
bugpair("s.slice22", "dp2xtp2", M22, slice_axis, (P(),), P("tp"), lambda w: w * 3.0, (R(8, 4),),
        [("index-wrong-axis", ["wrong-shard-dim"])])
# psum over both axes where the value is partial only over tp (over-count)
def over(bug):
    return lambda x, w: psum(x @ w, ("dp", "tp") if bug == "psum-both-axes" else "tp")
bugpair("s.tp_rowpar22", "dp2xtp2", M22, over, (P(None, "tp"), P("tp", None)), P(), lambda x, w: x @ w, (R(8, 16), R(16, 8)),
        [("psum-both-axes", ["wrong-reduction"])])
# ring roll with a missing pair in the permutation (one device receives zeros)
def roll_missing(bug):
    perm = [(i, (i + 1) % 4) for i in range(4)]
    if bug == "perm-missing-pair": perm = perm[:-1]
    return lambda x: lax.ppermute(x, "sp", perm)
bugpair("s.ring_roll_b", "sp4", {"sp": 4}, roll_missing, (P("sp"),), P("sp"), lambda x: jnp.roll(x, 4, 0), (R(16, 8),),
        [("perm-missing-pair", ["wrong-collective-group"])])
# causal mask with > instead of >= (both sides computed from iota) in cp attention
def cp_strict(bug):
    def f(q, k, v):
        sl = q.shape[1]
        kf = lax.all_gather(k, "cp", axis=1, tiled=True); vf = lax.all_gather(v, "cp", axis=1, tiled=True)
        qpos = idx("cp") * sl + jnp.arange(sl)
        s = jnp.einsum("bqd,bkd->bqk", q, kf) / np.sqrt(q.shape[-1])
        keep = (qpos[:, None] > jnp.arange(kf.shape[1])[None, :]) | (jnp.arange(kf.shape[1])[None, :] == 0) if bug == "mask-strict" else qpos[:, None] >= jnp.arange(kf.shape[1])[None, :]
        s = jnp.where(keep, s, -1e30)
        return jax.nn.softmax(s, -1) @ vf
    return f
bugpair("s.cp_gather_attn_b", "cp4", {"cp": 4}, cp_strict, (P(None, "cp"),) * 3, P(None, "cp"), cp_base,
        (R(2, 16, 8), R(2, 16, 8), R(2, 16, 8)), [("mask-strict", ["constant-mismatch"])])
# layer-norm statistics psum'd over the sequence-sharding axis (x sharded on seq, stats are per token)
def ln_sp(bug):
    def f(x):
        m = x.mean(-1, keepdims=True)
        if bug == "stats-psum-seq": m = psum(m, "sp") / 4
        return x - m
    return f
bugpair("s.sp_center", "sp4", {"sp": 4}, ln_sp, (P(None, "sp"),), P(None, "sp"), lambda x: x - x.mean(-1, keepdims=True), (R(2, 16, 8),),
        [("stats-psum-seq", ["wrong-reduction"])])
# last shard zeroed (where on axis_index)
def drop_last(bug):
    return lambda x: jnp.where(idx("sp") == 3, 0.0, x) if bug == "zero-last-shard" else x + 0.0
bugpair("s.identity_sp", "sp4", {"sp": 4}, drop_last, (P("sp"),), P("sp"), lambda x: x + 0.0, (R(16, 4),),
        [("zero-last-shard", ["wrong-shard-dim"])])
# grad accumulation over micro-batches with fori_loop; bug: divide by local micro-batch count twice
def accum(bug):
    def f(w, x, y):
        xs = x.reshape(2, -1, x.shape[-1]); ys = y.reshape(2, -1, y.shape[-1])
        g = lax.fori_loop(0, 2, lambda i, g: g + jax.grad(lin_loss)(w, xs[i], ys[i]), jnp.zeros_like(w)) / 2
        g = pmean(g, "dp")
        if bug == "double-divide": g = g / 2
        return w - 0.1 * g
    return f
bugpair("s.grad_accum_fori", "dp4", {"dp": 4}, accum, (P(), P("dp"), P("dp")), P(),
        lambda w, x, y: w - 0.1 * jax.grad(lin_loss)(w, x, y), (R(D, 8, scale=0.2), R(32, D), R(32, 8)),
        [("double-divide", ["constant-mismatch"])])
