# GSPMD programs: jax.jit with in/out shardings.  gspmd(name, mesh, in_specs, out_spec, fn, args)
B, S, D, F, V = 8, 16, 32, 64, 64
dn2 = ("NHWC", "HWIO", "NHWC")

# --- convolutions
def conv2d(w, b, x):
    y = lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=dn2)
    return jax.nn.relu(y + b)
gspmd("g.conv2d.dp4", {"dp": 4}, (P(), P(), P("dp")), P("dp"), conv2d,
      (R(3, 3, 8, 16, scale=0.2), R(16), R(8, 12, 12, 8)))
gspmd("g.conv2d.cout_tp4", {"tp": 4}, (P(None, None, None, "tp"), P("tp"), P()), P(None, None, None, "tp"), conv2d,
      (R(3, 3, 8, 16, scale=0.2), R(16), R(4, 10, 10, 8)))
def conv1d_cin(w, x):
    return lax.conv_general_dilated(x, w, (2,), [(1, 1)], dimension_numbers=("NWC", "WIO", "NWC"))
gspmd("g.conv1d.cin_tp4.stride2", {"tp": 4}, (P(None, "tp"), P(None, None, "tp")), P(), conv1d_cin,
      (R(3, 16, 8, scale=0.3), R(4, 24, 16)))
def conv_grad(w, x, y):
    return jax.grad(lambda w: jnp.mean((lax.conv_general_dilated(x, w, (1, 1), "VALID", dimension_numbers=dn2) - y) ** 2))(w)
gspmd("g.conv2d_wgrad.dp8", {"dp": 8}, (P(), P("dp"), P("dp")), P(), conv_grad,
      (R(3, 3, 4, 8, scale=0.2), R(16, 8, 8, 4), R(16, 6, 6, 8)))
def maxpool(x):
    return lax.reduce_window(x, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")
gspmd("g.maxpool.hw_sp2x4", {"h": 2, "w": 4}, (P(None, "h", "w"),), P(None, "h", "w"), maxpool, (R(2, 8, 16, 4),))

# --- scans / cumulative
gspmd("g.cumsum.unsharded_dim.dp8", {"dp": 8}, (P("dp"),), P("dp"), lambda x: jnp.cumsum(x, axis=1), (R(16, 24),))
gspmd("g.cumprod.sharded_dim.sp4", {"sp": 4}, (P(None, "sp"),), P(None, "sp"),
      lambda x: jnp.cumprod(1.0 + 0.05 * x, axis=1), (R(4, 32),))
gspmd("g.cumsum_rev_int.sp8", {"sp": 8}, (P("sp"),), P("sp"),
      lambda x: jnp.cumsum(x[::-1])[::-1], (I(0, 5, 64),))
gspmd("g.cummax.sharded.sp4", {"sp": 4}, (P(None, "sp"),), P(None, "sp"), lambda x: lax.cummax(x, axis=1), (R(4, 32),))

# --- sort / top_k / argmax
gspmd("g.sort.rows_dp4", {"dp": 4}, (P("dp"),), P("dp"), lambda x: jnp.sort(x, axis=-1), (R(8, 24),))
gspmd("g.argsort.sharded_sp4", {"sp": 4}, (P(None, "sp"),), P(), lambda x: jnp.argsort(x, axis=1), (R(4, 32),))
gspmd("g.topk.vocab_tp4", {"tp": 4}, (P(None, "tp"), P()), P(),
      lambda w, h: lax.top_k(h @ w, 4), (R(D, V, scale=0.2), R(B, D)))
gspmd("g.argmin.vocab_dp2xtp4", {"dp": 2, "tp": 4}, (P("dp", "tp"),), P("dp"), lambda x: jnp.argmin(x, axis=-1), (R(8, 64),))
gspmd("g.greedy_acc.tp8", {"tp": 8}, (P(None, "tp"), P()), P(),
      lambda logits, lab: jnp.mean((jnp.argmax(logits, -1) == lab).astype(jnp.float32)), (R(16, 64), I(0, 64, 16)))

# --- one_hot / segment / integer
gspmd("g.onehot_matmul.tp4", {"tp": 4}, (P(), P("tp", None)), P(),
      lambda ids, e: jax.nn.one_hot(ids, V) @ e, (I(0, V, 8, 4), R(V, D)))
gspmd("g.segment_sum.dp4", {"dp": 4}, (P("dp"), P("dp")), P(),
      lambda x, seg: jax.ops.segment_sum(x, seg, num_segments=6), (R(32, 8), I(0, 6, 32)))
gspmd("g.bincount.dp8", {"dp": 8}, (P("dp"),), P(), lambda t: jnp.bincount(t, length=16), (I(0, 16, 64),))
gspmd("g.intops.dp8", {"dp": 8}, (P("dp"), P("dp")), P("dp"),
      lambda a, b: jnp.clip((a * 7 + b) % 13 - (a // 3), -4, 9) ^ (b & 5), (I(-50, 50, 16, 4), I(1, 50, 16, 4)))

# --- masks / where
gspmd("g.where_datamask.dp2xtp4", {"dp": 2, "tp": 4}, (P("dp", "tp"), P("dp")), P("dp", "tp"),
      lambda x, thr: jnp.where(x > thr[:, None], x, thr[:, None] * 0.5), (R(8, 32), R(8)))
def padmask_softmax(x, lens):
    m = jnp.arange(x.shape[1])[None, :] < lens[:, None]
    return jax.nn.softmax(jnp.where(m, x, -jnp.inf), axis=-1)
gspmd("g.padmask_softmax.seq_tp4", {"tp": 4}, (P(None, "tp"), P()), P(None, "tp"), padmask_softmax, (R(8, 32), I(1, 32, 8)))

# --- norms / softmax
def rmsnorm(x, g):
    return x * lax.rsqrt(jnp.mean(x * x, -1, keepdims=True) + 1e-6) * g
gspmd("g.rmsnorm.hidden_tp4", {"tp": 4}, (P(None, None, "tp"), P("tp")), P(None, None, "tp"), rmsnorm, (R(2, 8, 32), R(32)))
def layernorm(x, g, b):
    m = x.mean(-1, keepdims=True); v = x.var(-1, keepdims=True)
    return (x - m) / jnp.sqrt(v + 1e-5) * g + b
gspmd("g.layernorm_grad.hidden_tp4", {"tp": 4}, (P(None, "tp"), P("tp"), P("tp")), (P("tp"), P("tp")),
      lambda x, g, b: jax.grad(lambda g, b: jnp.sum(layernorm(x, g, b) ** 3), argnums=(0, 1))(g, b), (R(8, 32), R(32), R(32)))
gspmd("g.softmax.sharded_tp8", {"tp": 8}, (P(None, "tp"),), P(None, "tp"), lambda x: jax.nn.softmax(x, -1), (R(4, 64),))
gspmd("g.logsumexp.2d_dp2xtp4", {"dp": 2, "tp": 4}, (P("dp", "tp"),), P(),
      lambda x: jax.nn.logsumexp(x), (R(8, 32),))

# --- attention family
def mha(p, x, nh=4):
    b, s, d = x.shape; hd = d // nh
    q = (x @ p["q"]).reshape(b, s, nh, hd); k = (x @ p["k"]).reshape(b, s, nh, hd); v = (x @ p["v"]).reshape(b, s, nh, hd)
    i = lax.broadcasted_iota(jnp.int32, (s, s), 0); j = lax.broadcasted_iota(jnp.int32, (s, s), 1)
    sc = jnp.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(hd)
    sc = jnp.where(i >= j, sc, jnp.finfo(jnp.float32).min)
    o = jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(sc, -1), v).reshape(b, s, d)
    return o @ p["o"]
MHA = {"q": P(None, "tp"), "k": P(None, "tp"), "v": P(None, "tp"), "o": P("tp", None)}
mha_p = lambda: {k: R(D, D, scale=0.2) for k in "qkvo"}
gspmd("g.causal_mha.heads_tp4", {"tp": 4}, (MHA, P()), P(), mha, (mha_p(), R(2, 8, D)))
gspmd("g.causal_mha.dp2xtp4", {"dp": 2, "tp": 4}, (MHA, P("dp")), P("dp"), mha, (mha_p(), R(4, 8, D)))

def rope(x, pos):
    hd = x.shape[-1]; inv = 1.0 / (10000 ** (jnp.arange(0, hd, 2) / hd))
    ang = pos[:, :, None].astype(jnp.float32) * inv
    c, s = jnp.cos(ang)[:, :, None, :], jnp.sin(ang)[:, :, None, :]
    x1, x2 = jnp.split(x, 2, axis=-1)
    return jnp.concatenate([x1 * c - x2 * s, x2 * c + x1 * s], -1)
def gqa_rope(p, x, pos, nh=8, nkv=2, hd=8):
    b, s, _ = x.shape
    q = rope((x @ p["q"]).reshape(b, s, nh, hd), pos)
    k = rope((x @ p["k"]).reshape(b, s, nkv, hd), pos); v = (x @ p["v"]).reshape(b, s, nkv, hd)
    k = jnp.repeat(k, nh // nkv, 2); v = jnp.repeat(v, nh // nkv, 2)
    sc = jnp.einsum("bqhd,bkhd->bhqk", q, k) * hd ** -0.5
    sc = jnp.where(jnp.tril(jnp.ones((s, s), bool)), sc, -1e30)
    return jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(sc), v).reshape(b, s, nh * hd) @ p["o"]
gqa_p = lambda: {"q": R(D, 64, scale=0.2), "k": R(D, 16, scale=0.2), "v": R(D, 16, scale=0.2), "o": R(64, D, scale=0.2)}
gspmd("g.gqa_rope.kvheads_tp2", {"tp": 2}, ({"q": P(None, "tp"), "k": P(None, "tp"), "v": P(None, "tp"), "o": P("tp")}, P(), P()), P(),
      gqa_rope, (gqa_p(), R(2, 8, D), jnp.tile(jnp.arange(8, dtype=jnp.int32)[None], (2, 1))))
gspmd("g.gqa_rope.seq_sp4", {"sp": 4}, ({"q": P(), "k": P(), "v": P(), "o": P()}, P(None, "sp"), P(None, "sp")), P(None, "sp"),
      gqa_rope, (gqa_p(), R(2, 16, D), jnp.tile(jnp.arange(16, dtype=jnp.int32)[None], (2, 1))))

# --- MoE
def moe(p, x, K=2):
    E = p["router"].shape[1]
    logits = x @ p["router"]; val, idx = lax.top_k(logits, K)
    gates = jax.nn.softmax(val, -1)
    disp = jax.nn.one_hot(idx, E)                       # T K E
    comb = jnp.einsum("tke,tk->te", disp, gates)
    xe = jnp.einsum("te,td->etd", (comb > 0).astype(x.dtype), x)
    h = jax.nn.silu(jnp.einsum("etd,edf->etf", xe, p["w1"]))
    return jnp.einsum("etf,efd,te->td", h, p["w2"], comb)
gspmd("g.moe_top2_dispatch.ep4", {"ep": 4}, ({"router": P(), "w1": P("ep"), "w2": P("ep")}, P()), P(), moe,
      ({"router": R(D, 4, scale=0.3), "w1": R(4, D, 16, scale=0.2), "w2": R(4, 16, D, scale=0.2)}, R(16, D)))
gspmd("g.moe_top2_dispatch.tok_dp2xep4", {"dp": 2, "ep": 4}, ({"router": P(), "w1": P("ep"), "w2": P("ep")}, P("dp")), P("dp"), moe,
      ({"router": R(D, 4, scale=0.3), "w1": R(4, D, 16, scale=0.2), "w2": R(4, 16, D, scale=0.2)}, R(16, D)))

# --- loops / remat / custom_vjp
def fori_mlp(w, x):
    return lax.fori_loop(0, 3, lambda i, h: jnp.tanh(h @ w) + 0.1 * i, x)
gspmd("g.fori_loop.tp4", {"tp": 4}, (P(None, "tp"), P()), P(), fori_mlp, (R(D, D, scale=0.2), R(B, D)))
def scan_remat_train(p, x, y):
    def layer(h, w):
        return jax.checkpoint(lambda h, w: h + jnp.tanh(h @ w["a"]) @ w["b"])(h, w), None
    loss = lambda p: jnp.mean((lax.scan(layer, x, p)[0] - y) ** 2)
    g = jax.grad(loss)(p)
    return jax.tree.map(lambda a, b: a - 0.1 * b, p, g)
SCP = {"a": P(None, None, "tp"), "b": P(None, "tp", None)}
gspmd("g.scan_remat_train.dp2xtp4", {"dp": 2, "tp": 4}, (SCP, P("dp"), P("dp")), SCP, scan_remat_train,
      ({"a": R(3, D, F, scale=0.2), "b": R(3, F, D, scale=0.2)}, R(B, D), R(B, D)))

@jax.custom_vjp
def clip_grad(x): return x
clip_grad.defvjp(lambda x: (x, None), lambda _, g: (jnp.clip(g, -0.01, 0.01),))
def cvjp(w, x, y):
    return jax.grad(lambda w: jnp.mean((clip_grad(x @ w) - y) ** 2))(w)
gspmd("g.custom_vjp_clip.dp8", {"dp": 8}, (P(), P("dp"), P("dp")), P(), cvjp, (R(D, 8, scale=0.2), R(16, D), R(16, 8)))

# --- optimizers
def adamw_clip(p, m, v, g, t):
    gn = jnp.sqrt(sum(jnp.sum(x * x) for x in jax.tree.leaves(g)))
    g = jax.tree.map(lambda x: x * jnp.minimum(1.0, 1.0 / (gn + 1e-6)), g)
    m = jax.tree.map(lambda m, g: 0.9 * m + 0.1 * g, m, g)
    v = jax.tree.map(lambda v, g: 0.999 * v + 0.001 * g * g, v, g)
    mh = jax.tree.map(lambda m: m / (1 - 0.9 ** t), m); vh = jax.tree.map(lambda v: v / (1 - 0.999 ** t), v)
    p = jax.tree.map(lambda p, a, b: p - 1e-2 * (a / (jnp.sqrt(b) + 1e-8) + 0.01 * p), p, mh, vh)
    return p, m, v
OP = {"w1": P(None, "tp"), "w2": P("tp", None), "b": P()}
op_p = lambda: {"w1": R(D, F, scale=0.2), "w2": R(F, D, scale=0.2), "b": R(D)}
gspmd("g.adamw_clip.dp2xtp4", {"dp": 2, "tp": 4}, (OP, OP, OP, OP, P()), (OP, OP, OP), adamw_clip,
      (op_p(), op_p(), jax.tree.map(jnp.abs, op_p()), op_p(), np.float32(3.0)))
gspmd("g.adamw_clip.fsdp8", {"fsdp": 8}, (*[{"w1": P("fsdp"), "w2": P("fsdp"), "b": P("fsdp")}] * 4, P()),
      ({"w1": P("fsdp"), "w2": P("fsdp"), "b": P("fsdp")},) * 3, adamw_clip,
      (op_p(), op_p(), jax.tree.map(jnp.abs, op_p()), op_p(), np.float32(3.0)))

# --- reductions / layout
gspmd("g.reduce_keepdims.mesh_b4xa2", {"b": 4, "a": 2}, (P("a", "b"),), P("a"),
      lambda x: (x - x.max(1, keepdims=True)).sum(1, keepdims=True) / x.std(1, keepdims=True), (R(8, 32),))
gspmd("g.mean_var.swapped_axes", {"x": 2, "y": 4}, (P("y", "x"),), P(),
      lambda a: jnp.stack([a.mean(), a.var(), a.min(), a.max()]), (R(16, 8),))
gspmd("g.pad_concat_rev.sp4", {"sp": 4}, (P("sp"), P("sp")), P("sp"),
      lambda a, b: jnp.concatenate([jnp.pad(a, ((0, 0), (2, 1))), b[:, ::-1]], axis=1), (R(16, 5), R(16, 8)))
gspmd("g.pad_seq_shift.sp4", {"sp": 4}, (P("sp"),), P("sp"),
      lambda a: a - jnp.pad(a, ((1, 0), (0, 0)))[:-1], (R(32, 4),))
gspmd("g.reshape_transpose.2x4", {"dp": 2, "tp": 4}, (P("dp", "tp"),), P(None, "tp"),
      lambda x: x.reshape(8, 4, 8).transpose(1, 0, 2).reshape(4, 64) * 2.0, (R(8, 32),))
gspmd("g.uneven_looking.24x40.dp2xtp4", {"dp": 2, "tp": 4}, (P("dp", None), P(None, "tp")), P("dp", "tp"),
      lambda a, w: jnp.tanh(a @ w) + 1.0, (R(24, 40), R(40, 56, scale=0.2)))

# --- dynamic slice / gather / scatter
gspmd("g.dynamic_slice.data_offset.dp4", {"dp": 4}, (P("dp"), P()), P("dp"),
      lambda x, o: lax.dynamic_slice_in_dim(x, o[0], 8, axis=1), (R(8, 32), np.array([5], np.int32)))
gspmd("g.dynamic_update_slice.kvcache_tp4", {"tp": 4}, (P(None, None, "tp"), P(None, None, "tp"), P()), P(None, None, "tp"),
      lambda cache, new, pos: lax.dynamic_update_slice(cache, new, (0, pos, 0)), (R(2, 16, 32), R(2, 1, 32), np.int32(6)))
gspmd("g.scatter_add.rows_tp4", {"tp": 4}, (P(None, "tp"), P(), P(None, "tp")), P(None, "tp"),
      lambda x, idx, v: x.at[idx].add(v), (R(16, 32), I(0, 16, 10), R(10, 32)))
gspmd("g.scatter_add.sharded_rows_dp4", {"dp": 4}, (P("dp"), P(), P()), P("dp"),
      lambda x, idx, v: x.at[idx].add(v), (R(16, 8), I(0, 16, 10), R(10, 8)))
gspmd("g.take_along_axis.dp4", {"dp": 4}, (P("dp"), P("dp")), P("dp"),
      lambda x, i: jnp.take_along_axis(x, i, axis=1), (R(8, 32), I(0, 32, 8, 5)))
gspmd("g.embed_grad.vocab_tp4", {"tp": 4}, (P("tp"), P(), P()), P("tp"),
      lambda e, t, y: jax.grad(lambda e: jnp.mean((e[t].mean(1) - y) ** 2))(e), (R(V, 16), I(0, V, 8, 6), R(8, 16)))

# --- mixed precision
gspmd("g.bf16_matmul_f32acc.tp4", {"tp": 4}, (P(None, "tp"), P("tp", None), P()), P(),
      lambda w1, w2, x: jnp.dot(jax.nn.gelu(jnp.dot(x.astype(jnp.bfloat16), w1.astype(jnp.bfloat16), preferred_element_type=jnp.float32)).astype(jnp.bfloat16),
                                w2.astype(jnp.bfloat16), preferred_element_type=jnp.float32),
      (R(D, F, scale=0.2), R(F, D, scale=0.2), R(B, D)))
gspmd("g.f16_loss_scale_grad.dp4", {"dp": 4}, (P(), P("dp"), P("dp")), P(),
      lambda w, x, y: jax.grad(lambda w: 128.0 * jnp.mean(((x.astype(jnp.float16) @ w.astype(jnp.float16)).astype(jnp.float32) - y) ** 2))(w) / 128.0,
      (R(D, 8, scale=0.2), R(16, D), R(16, 8)))
