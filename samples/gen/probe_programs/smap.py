# shard_map programs: smap(name, mesh, local_fn, in_specs, out_specs, baseline_fn, args, bug=..., family=...)
psum, pmean, pmax, idx = lax.psum, lax.pmean, lax.pmax, lax.axis_index
def variants(family, tag, mesh, make, in_specs, out_specs, baseline, args, bugs, vma=False):
    """make(bug) -> local fn; bugs: list of (bug_id, kinds); vma: shard_map's check_vma"""
    for b, kinds in [(None, None)] + bugs:
        os_ = out_specs(b) if callable(out_specs) else out_specs
        name = f"{family}.{tag}" + (f".bug.{b}" if b else "")
        try: smap(name, mesh, make(b), in_specs, os_, baseline, args, bug=b, kinds=kinds, family=family, vma=vma)
        except Exception as ex: print("!! export failed", name, type(ex).__name__, str(ex)[:400], flush=True)

# 1. data-parallel SGD on a linear model
lin_loss = lambda w, x, y: jnp.mean((x @ w - y) ** 2)
def dp_sgd(bug):
    def f(w, x, y):
        g = jax.grad(lin_loss)(w, x, y)
        if bug == "psum-not-pmean": g = psum(g, "dp")
        elif bug == "no-allreduce": pass
        else: g = pmean(g, "dp")
        return w - 0.1 * g
    return f
variants("s.dp_sgd", "dp8", {"dp": 8}, dp_sgd, (P(), P("dp"), P("dp")), P(),
         lambda w, x, y: w - 0.1 * jax.grad(lin_loss)(w, x, y), (R(D, 8, scale=0.2), R(32, D), R(32, 8)),
         [("psum-not-pmean", ["wrong-reduction"]), ("no-allreduce", ["missing-all-reduce"])])

# 2. Megatron MLP (column then row parallel)
def tp_mlp(bug, ax="tp"):
    def f(w1, w2, x):
        h = jax.nn.relu(x @ w1) @ w2
        if bug == "no-psum": return h
        return psum(h, "dp" if bug == "psum-wrong-axis" else ax)
    return f
tp_base = lambda w1, w2, x: jax.nn.relu(x @ w1) @ w2
variants("s.tp_mlp", "tp4", {"tp": 4}, tp_mlp, (P(None, "tp"), P("tp", None), P()), P(), tp_base,
         (R(D, F, scale=0.2), R(F, D, scale=0.2), R(B, D)), [("no-psum", ["missing-all-reduce"])])
variants("s.tp_mlp2d", "dp2xtp4", {"dp": 2, "tp": 4}, tp_mlp, (P(None, "tp"), P("tp", None), P("dp")), P("dp"), tp_base,
         (R(D, F, scale=0.2), R(F, D, scale=0.2), R(B, D)), [("psum-wrong-axis", ["wrong-collective-group"])])

# 3. cumsum over a sequence-sharded dim: local cumsum + exclusive prefix of shard totals
def seq_cumsum(bug):
    def f(x):
        c = jnp.cumsum(x, 1)
        if bug == "no-offset": return c
        tot = lax.all_gather(c[:, -1], "sp", axis=1)            # B x n
        before = jnp.arange(tot.shape[1])[None, :] < idx("sp")
        return c + jnp.sum(jnp.where(before, tot, 0.0), 1, keepdims=True)
    return f
variants("s.seq_cumsum", "sp4", {"sp": 4}, seq_cumsum, (P(None, "sp"),), P(None, "sp"), lambda x: jnp.cumsum(x, 1),
         (R(4, 32),), [("no-offset", ["wrong-shard-dim"])])

# 4. argmax over a vocab-sharded dim
def vocab_argmax(bug):
    def f(x):
        n = x.shape[1]
        a = jnp.argmax(x, 1) + (0 if bug == "no-shard-offset" else idx("tp") * n)
        gm = lax.all_gather(x.max(1), "tp", axis=1); ga = lax.all_gather(a, "tp", axis=1)
        return jnp.take_along_axis(ga, jnp.argmax(gm, 1)[:, None], 1)[:, 0]
    return f
variants("s.vocab_argmax", "tp4", {"tp": 4}, vocab_argmax, (P(None, "tp"),), P(), lambda x: jnp.argmax(x, 1),
         (R(8, 64),), [("no-shard-offset", ["constant-mismatch"])])

# 5. softmax over a sharded dim
def sm(bug):
    def f(x):
        m = x.max(-1, keepdims=True)
        if bug != "local-max": m = pmax(m, "tp")
        e = jnp.exp(x - m)
        return e / psum(e.sum(-1, keepdims=True), "tp")
    return f
variants("s.softmax", "tp4", {"tp": 4}, sm, (P(None, "tp"),), P(None, "tp"), lambda x: jax.nn.softmax(x, -1),
         (R(8, 32, scale=3),), [("local-max", ["missing-all-reduce"])])

# 6. RMS norm over a sharded hidden dim
def rms(bug):
    def f(x, g):
        ss = jnp.sum(x * x, -1, keepdims=True)
        if bug == "local-ms": ms = ss / x.shape[-1]
        else: ms = psum(ss, "tp") / D
        return x * lax.rsqrt(ms + 1e-6) * g
    return f
variants("s.rmsnorm", "tp4", {"tp": 4}, rms, (P(None, "tp"), P("tp")), P(None, "tp"),
         lambda x, g: x * lax.rsqrt(jnp.mean(x * x, -1, keepdims=True) + 1e-6) * g, (R(8, D), R(D)),
         [("local-ms", ["missing-all-reduce"])])

# 7. FSDP: all-gather weights then matmul
def fsdp(bug):
    def f(w, x):
        if bug == "gather-axis1": wf = lax.all_gather(w, "fsdp", axis=1, tiled=False).reshape(D, F)
        elif bug == "reshape-order": wf = lax.all_gather(w, "fsdp", axis=0, tiled=False).transpose(1, 0, 2).reshape(D, F)
        else: wf = lax.all_gather(w, "fsdp", axis=0, tiled=True)
        return jnp.tanh(x @ wf)
    return f
variants("s.fsdp_matmul", "fsdp8", {"fsdp": 8}, fsdp, (P("fsdp"), P("fsdp")), P("fsdp"), lambda w, x: jnp.tanh(x @ w),
         (R(D, F, scale=0.2), R(16, D)), [("gather-axis1", ["wrong-shard-dim"]), ("reshape-order", ["layout-mismatch"])])

# 8. row-parallel matmul finished by reduce-scatter
def rs(bug):
    def f(x, w):
        return lax.psum_scatter(x @ w, "tp", scatter_dimension=0 if bug == "scatter-dim0" else 1, tiled=True)
    return f
variants("s.reduce_scatter", "tp4", {"tp": 4}, rs, (P(None, "tp"), P("tp", None)), P(None, "tp"), lambda x, w: x @ w,
         (R(16, D), R(D, 16, scale=0.2)), [("scatter-dim0", ["wrong-shard-dim"])])

# 9. Ulysses sequence parallel attention (all_to_all seq <-> heads)
def attn(q, k, v):
    s = jnp.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(q.shape[-1])
    return jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(s, -1), v)
def ulysses(bug):
    sa = 3 if bug == "split-head-dim" else 2
    def f(q, k, v):
        q, k, v = (lax.all_to_all(t, "sp", sa, 1, tiled=True) for t in (q, k, v))
        return lax.all_to_all(attn(q, k, v), "sp", 1, sa, tiled=True)
    return f
variants("s.ulysses_attn", "sp4", {"sp": 4}, ulysses, (P(None, "sp"),) * 3, P(None, "sp"), attn,
         (R(2, 16, 8, 8), R(2, 16, 8, 8), R(2, 16, 8, 8)), [("split-head-dim", ["wrong-shard-dim"])])

# 10. causal width-2 conv over a sequence-sharded dim: halo exchange by ppermute
def halo(bug):
    def f(x, w):
        n = 4
        perm = [(i + 1, i) for i in range(n - 1)] if bug == "permute-direction" else [(i, i + 1) for i in range(n - 1)]
        prev = lax.ppermute(x[:, -1:], "sp", perm)
        xp = jnp.concatenate([prev, x[:, :-1]], 1)
        return x * w[0] + xp * w[1]
    return f
variants("s.halo_conv", "sp4", {"sp": 4}, halo, (P(None, "sp"), P()), P(None, "sp"),
         lambda x, w: x * w[0] + jnp.pad(x, ((0, 0), (1, 0), (0, 0)))[:, :-1] * w[1], (R(2, 16, 4), R(2, 4)),
         [("permute-direction", ["wrong-collective-group"])])

# 11. roll by one shard = ring ppermute
def roll(bug):
    def f(x):
        perm = [(i, (i - 1) % 4) for i in range(4)] if bug == "ring-direction" else [(i, (i + 1) % 4) for i in range(4)]
        return lax.ppermute(x, "sp", perm)
    return f
variants("s.ring_roll", "sp4", {"sp": 4}, roll, (P("sp"),), P("sp"), lambda x: jnp.roll(x, 4, 0), (R(16, 8),),
         [("ring-direction", ["wrong-collective-group"])])

# 12. ZeRO-3 style: gather params, reduce-scatter grads, global-norm clip, Adam on shards
def zero_adam(bug):
    def f(w, m, v, x, y):
        wf = lax.all_gather(w, "dp", axis=0, tiled=True)
        g = lax.psum_scatter(jax.grad(lin_loss)(wf, x, y), "dp", scatter_dimension=0, tiled=True) / 4
        sq = jnp.sum(g * g)
        gn = jnp.sqrt(sq if bug == "local-norm" else psum(sq, "dp"))
        g = g * jnp.minimum(1.0, 0.5 / (gn + 1e-6))
        m = 0.9 * m + 0.1 * g; v = 0.99 * v + 0.01 * g * g
        return w - 0.01 * m / (jnp.sqrt(v) + 1e-8), m, v
    return f
def zero_adam_base(w, m, v, x, y):
    g = jax.grad(lin_loss)(w, x, y); gn = jnp.sqrt(jnp.sum(g * g))
    g = g * jnp.minimum(1.0, 0.5 / (gn + 1e-6))
    m = 0.9 * m + 0.1 * g; v = 0.99 * v + 0.01 * g * g
    return w - 0.01 * m / (jnp.sqrt(v) + 1e-8), m, v
variants("s.zero_adam_clip", "dp4", {"dp": 4}, zero_adam, (P("dp"), P("dp"), P("dp"), P("dp"), P("dp")), (P("dp"),) * 3,
         zero_adam_base, (R(D, 8, scale=0.2), R(D, 8, scale=0.1), np.abs(R(D, 8, scale=0.1)), R(16, D), R(16, 8)),
         [("local-norm", ["missing-all-reduce"])])

# 13. ZeRO-1 style: each device updates its slice of replicated params
def zero1(bug):
    def f(w, g):
        n = w.shape[0] // 4
        o = idx("dp") * n + (1 if bug == "off-by-one" else 0)
        return lax.dynamic_slice_in_dim(w, o, n, 0) - 0.1 * lax.dynamic_slice_in_dim(g, o, n, 0)
    return f
variants("s.zero1_slice", "dp4", {"dp": 4}, zero1, (P(), P()), P("dp"), lambda w, g: w - 0.1 * g, (R(D, 8), R(D, 8)),
         [("off-by-one", ["wrong-shard-dim"])])

# 14. expert parallel: all_to_all tokens to experts and back
def ep(bug):
    def f(x, w):
        h = lax.all_to_all(x, "ep", 0, 1, tiled=True)          # [1, C, D]
        y = jnp.einsum("ecd,edf->ecf", h, w)
        return lax.all_to_all(y, "ep", 1, 0, tiled=True)
    return f
variants("s.ep_a2a", "ep4", {"ep": 4}, ep, (P(None, "ep"), P("ep")), P(None, "ep"),
         lambda x, w: jnp.einsum("ecd,edf->ecf", x, w), (R(4, 16, 8), R(4, 8, 8, scale=0.3)), [])

# 15. histogram of int tokens
def hist(bug):
    def f(t):
        h = jnp.sum(jax.nn.one_hot(t, 16, dtype=jnp.int32), 0)
        return (pmax if bug == "pmax-not-psum" else psum)(h, "dp")
    return f
variants("s.histogram", "dp8", {"dp": 8}, hist, (P("dp"),), P(), lambda t: jnp.sum(jax.nn.one_hot(t, 16, dtype=jnp.int32), 0),
         (I(0, 16, 64),), [("pmax-not-psum", ["wrong-reduction"])])

# 16. bf16 Megatron MLP, f32 accumulation across devices
def bf16_mlp(bug):
    def f(w1, w2, x):
        h = jnp.dot(x.astype(jnp.bfloat16), w1.astype(jnp.bfloat16), preferred_element_type=jnp.float32)
        o = jnp.dot(jax.nn.relu(h).astype(jnp.bfloat16), w2.astype(jnp.bfloat16), preferred_element_type=jnp.float32)
        if bug == "f16-allreduce": return psum(o.astype(jnp.float16), "tp").astype(jnp.float32)
        return psum(o, "tp")
    return f
def bf16_base(w1, w2, x):
    h = jnp.dot(x.astype(jnp.bfloat16), w1.astype(jnp.bfloat16), preferred_element_type=jnp.float32)
    return jnp.dot(jax.nn.relu(h).astype(jnp.bfloat16), w2.astype(jnp.bfloat16), preferred_element_type=jnp.float32)
variants("s.bf16_mlp", "tp4", {"tp": 4}, bf16_mlp, (P(None, "tp"), P("tp", None), P()), P(), bf16_base,
         (R(D, F, scale=0.2), R(F, D, scale=0.2), R(B, D)), [("f16-allreduce", ["dtype-mismatch"])])

# 17. top-k over a sharded vocab: local top-k, gather candidates, top-k again
def topk(bug):
    def f(x):
        v, i = lax.top_k(x, 4); i = i + idx("tp") * x.shape[1]
        gv = lax.all_gather(v, "tp", axis=1, tiled=True); gi = lax.all_gather(i, "tp", axis=1, tiled=True)
        v2, j = lax.top_k(gv, 4)
        return v2, jnp.take_along_axis(gi, j, 1)
    return f
variants("s.topk_vocab", "tp4", {"tp": 4}, topk, (P(None, "tp"),), (P(), P()), lambda x: tuple(lax.top_k(x, 4)), (R(8, 64),), [])

# 18. scan over layers, Megatron MLP per layer
def scan_tp(bug):
    def f(w1, w2, x):
        body = lambda h, w: (h + psum(jax.nn.relu(h @ w[0]) @ w[1], "tp"), None)
        return lax.scan(body, x, (w1, w2))[0]
    return f
variants("s.scan_tp", "tp4", {"tp": 4}, scan_tp, (P(None, None, "tp"), P(None, "tp", None), P()), P(),
         lambda w1, w2, x: lax.scan(lambda h, w: (h + jax.nn.relu(h @ w[0]) @ w[1], None), x, (w1, w2))[0],
         (R(3, D, F, scale=0.2), R(3, F, D, scale=0.2), R(B, D)), [])

# 19. fori_loop with pmean inside
def fori(bug):
    def f(x, w):
        mu = pmean(jnp.mean(x, 0), "dp")
        return lax.fori_loop(0, 4, lambda i, c: jnp.tanh(mu + c @ w), jnp.zeros_like(mu))
    return f
variants("s.fori_pmean", "dp8", {"dp": 8}, fori, (P("dp"), P()), P(),
         lambda x, w: lax.fori_loop(0, 4, lambda i, c: jnp.tanh(x.mean(0) + c @ w), jnp.zeros(x.shape[1])),
         (R(32, 16), R(16, 16, scale=0.3)), [])

# 20. 2-D mesh with axis names in unusual order: row sums and global mean
def swapped(bug):
    def f(x):
        return psum(x.sum(1), "y"), pmean(x.mean(), ("x", "y"))
    return f
variants("s.mesh_y4x2", "rows", {"y": 4, "x": 2}, swapped, (P("x", "y"),), (P("x"), P()),
         lambda x: (x.sum(1), x.mean()), (R(8, 32),), [])

# 21. context-parallel causal attention with all-gathered K/V and an offset mask
def cp_attn(bug):
    def f(q, k, v):
        sl = q.shape[1]
        kf = lax.all_gather(k, "cp", axis=1, tiled=True); vf = lax.all_gather(v, "cp", axis=1, tiled=True)
        qpos = idx("cp") * sl + jnp.arange(sl) + (1 if bug == "mask-off-by-one" else 0)
        s = jnp.einsum("bqd,bkd->bqk", q, kf) / np.sqrt(q.shape[-1])
        s = jnp.where(qpos[:, None] >= jnp.arange(kf.shape[1])[None, :], s, -1e30)
        return jax.nn.softmax(s, -1) @ vf
    return f
def cp_base(q, k, v):
    s = jnp.einsum("bqd,bkd->bqk", q, k) / np.sqrt(q.shape[-1]); n = q.shape[1]
    s = jnp.where(jnp.arange(n)[:, None] >= jnp.arange(n)[None, :], s, -1e30)
    return jax.nn.softmax(s, -1) @ v
variants("s.cp_gather_attn", "cp4", {"cp": 4}, cp_attn, (P(None, "cp"),) * 3, P(None, "cp"), cp_base,
         (R(2, 16, 8), R(2, 16, 8), R(2, 16, 8)), [("mask-off-by-one", ["constant-mismatch"])])

# 22. sequence-parallel layer norm + projection (no collectives needed)
def sp_ln(bug):
    def f(x, g, w):
        return layernorm(x, g, 0.0) @ w
    return f
variants("s.sp_layernorm_proj", "sp8", {"sp": 8}, sp_ln, (P(None, "sp"), P(), P()), P(None, "sp"),
         lambda x, g, w: layernorm(x, g, 0.0) @ w, (R(2, 16, D), R(D), R(D, 16, scale=0.2)), [])

# 23. column-parallel output on a 2x2 mesh; bug: declares the output sharded along the wrong mesh axis
def colpar(bug):
    def f(x, w):
        return x @ w
    return f
variants("s.colpar_out", "dp2xtp2", {"dp": 2, "tp": 2}, colpar, (P(), P(None, "tp")),
         lambda b: P(None, "dp") if b else P(None, "tp"), lambda x, w: x @ w, (R(8, 16), R(16, 16)),
         [("out-spec-wrong-axis", ["wrong-shard-dim"])])

# 24. 2-D dp x tp training step (grad through psum, check_vma=False needs manual grad reduction)
def tp_train(bug):
    def f(w1, w2, x, y):
        h = jax.nn.relu(x @ w1); out = psum(h @ w2, "tp")
        d = 2 * (out - y) / y.size / 2          # dL/dout for the global mean (global batch = 2 local batches)
        g2 = pmean(h.T @ d, "dp") * 2
        dh = (d @ w2.T) * (h > 0)
        g1 = pmean(x.T @ dh, "dp") * 2
        return w1 - 0.1 * g1, w2 - 0.1 * g2
    return f
def tp_train_base(w1, w2, x, y):
    g1, g2 = jax.grad(lambda a, b: jnp.mean((jax.nn.relu(x @ a) @ b - y) ** 2), argnums=(0, 1))(w1, w2)
    return w1 - 0.1 * g1, w2 - 0.1 * g2
variants("s.tp_train_manual", "dp2xtp4", {"dp": 2, "tp": 4}, tp_train, (P(None, "tp"), P("tp", None), P("dp"), P("dp")),
         (P(None, "tp"), P("tp", None)), tp_train_base, (R(D, F, scale=0.2), R(F, 8, scale=0.2), R(B, D), R(B, 8)), [])
