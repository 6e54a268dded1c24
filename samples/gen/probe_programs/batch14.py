# fourteenth batch: fp8 delayed scaling with a pmax'd amax, metrics pmean'd
# over data (argmax == label), Megatron's f/g operators (custom_vjp) in a
# tensor-parallel step, a fused QKV projection split by reshape, an
# einops-style patch embedding, a 3-D convolution over a sharded depth,
# scanned layers under a checkpoint policy (fsdp x tp: an all-to-all whose
# chunk dim is itself sharded), mixture-of-depths routing (top-k, scatter-add
# of the routed tokens), cross entropy with ignored labels, GQA with remat in
# shard_map, a tied autoencoder with SGD momentum, and a causal depthwise
# convolution whose halo comes from an all_gather of block tails.
import optax
D14 = 16
# 1. fp8 delayed scaling: amax by pmax, scale, cast to f8, matmul, shard_map sp
def fp8_base(x, w):
    amax = jnp.max(jnp.abs(x)); s = 448.0 / jnp.maximum(amax, 1e-6)
    xq = (x * s).astype(jnp.float8_e4m3fn).astype(jnp.float32) / s
    return xq @ w
def fp8_local(bug):
    def f(x, w):
        amax = jnp.max(jnp.abs(x))
        if bug != "local-amax": amax = lax.pmax(amax, "sp")
        s = 448.0 / jnp.maximum(amax, 1e-6)
        xq = (x * s).astype(jnp.float8_e4m3fn).astype(jnp.float32) / s
        return xq @ w
    return f
variants("s.fp8_amax", "sp4", {"sp": 4}, fp8_local, (P("sp"), P()), P("sp"), fp8_base, (R(16, D14), R(D14, D14)),
       [("local-amax", ["missing-all-reduce"])])

# 2. accuracy and loss metrics pmean'd (int/bool paths), dp
def metrics_base(logits, y):
    acc = jnp.mean((jnp.argmax(logits, -1) == y).astype(jnp.float32))
    l = -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), y[:, None], -1))
    return acc, l
def metrics_local(bug):
    def f(logits, y):
        acc = jnp.mean((jnp.argmax(logits, -1) == y).astype(jnp.float32))
        l = -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), y[:, None], -1))
        if bug == "acc-psum": return lax.psum(acc, "dp"), lax.pmean(l, "dp")
        return lax.pmean(acc, "dp"), lax.pmean(l, "dp")
    return f
variants("s.metrics_pmean", "dp4", {"dp": 4}, metrics_local, (P("dp"), P("dp")), (P(), P()), metrics_base, (R(16, 10), I(0, 10, 16)),
       [("acc-psum", ["wrong-reduction"])])

# 3. Megatron f/g operators (custom_vjp) in a TP MLP training step
def mk_fg(ax):
    @jax.custom_vjp
    def f_op(x): return x
    f_op.defvjp(lambda x: (x, None), lambda _, g: (lax.psum(g, ax),))
    @jax.custom_vjp
    def g_op(x): return lax.psum(x, ax)
    g_op.defvjp(lambda x: (lax.psum(x, ax), None), lambda _, g: (g,))
    return f_op, g_op
def mlp_loss_base(w1, w2, x, y): return jnp.mean((jnp.tanh(x @ w1) @ w2 - y) ** 2)
def tp_step_base(w1, w2, x, y):
    g1, g2 = jax.grad(mlp_loss_base, (0, 1))(w1, w2, x, y)
    return w1 - 0.1 * g1, w2 - 0.1 * g2
def tp_step(bug):
    f_op, g_op = mk_fg("tp")
    def loss(w1, w2, x, y):
        h = jnp.tanh(f_op(x) @ w1)
        o = g_op(h @ w2) if bug != "no-g" else h @ w2
        return jnp.mean((o - y) ** 2)
    def step(w1, w2, x, y):
        g1, g2 = jax.grad(loss, (0, 1))(w1, w2, x, y)
        return w1 - 0.1 * g1, w2 - 0.1 * g2
    return step
variants("s.megatron_fg_step", "tp4", {"tp": 4}, tp_step, (P(None, "tp"), P("tp"), P(), P()), (P(None, "tp"), P("tp")), tp_step_base,
       (R(D14, 32, scale=0.3), R(32, D14, scale=0.3), R(8, D14), R(8, D14)), [("no-g", ["missing-all-reduce"])])

# 4. fused QKV projection split by reshape, tp on heads of the fused weight
def fused_qkv(x, w):
    qkv = (x @ w).reshape(x.shape[0], x.shape[1], 3, 4, 4)
    q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
    s = jnp.einsum("bqhd,bkhd->bhqk", q, k)
    return jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(s, -1), v)
gspmd("g.fused_qkv.dp2xtp4", {"dp": 2, "tp": 4}, (P("dp"), P(None, "tp")), P("dp", None, "tp"), fused_qkv, (R(4, 8, D14), R(D14, 48)))

# 5. patch embedding (einops-style reshape/transpose) then tp matmul
def patchify(img, w):
    b, h, wd, c = img.shape
    p = img.reshape(b, h // 4, 4, wd // 4, 4, c).transpose(0, 1, 3, 2, 4, 5).reshape(b, (h // 4) * (wd // 4), 16 * c)
    return p @ w
gspmd("g.patch_embed.dp2xtp4", {"dp": 2, "tp": 4}, (P("dp"), P(None, "tp")), P("dp", None, "tp"), patchify, (R(4, 8, 8, 3), R(48, 16)))

# 6. conv3d, batch dp and depth sp
def conv3d(x, k):
    return lax.conv_general_dilated(x, k, (1, 1, 1), "SAME", dimension_numbers=("NDHWC", "DHWIO", "NDHWC"))
gspmd("g.conv3d.dp2xsp4", {"dp": 2, "sp": 4}, (P("dp", "sp"), P()), P("dp", "sp"), conv3d, (R(2, 8, 4, 4, 3), R(3, 3, 3, 3, 4)))

# 7. scanned layers with a checkpoint policy, training step, fsdp x tp
def layer(h, w):
    return jnp.tanh(h @ w[0]) @ w[1], None
def scan_loss(ws, x, y):
    f = jax.checkpoint(layer, policy=jax.checkpoint_policies.dots_with_no_batch_dims_saveable)
    h, _ = lax.scan(f, x, ws)
    return jnp.mean((h - y) ** 2)
def scan_step(ws, x, y):
    l, g = jax.value_and_grad(scan_loss)(ws, x, y)
    return l, ws - 0.05 * g
gspmd("g.scan_ckpt_policy.fsdp2xtp4", {"fsdp": 2, "tp": 4}, (P(None, None, "fsdp", "tp"), P("fsdp"), P("fsdp")), (P(), P(None, None, "fsdp", "tp")),
        scan_step, (R(3, 2, D14, D14, scale=0.3), R(8, D14), R(8, D14)))

# 8. mixture-of-depths: top-k tokens routed through a block, the rest skip
def mod(x, wr, w):
    scores = x @ wr
    _, idx = lax.top_k(scores[..., 0], 4)
    sel = jnp.take_along_axis(x, idx[..., None], 1)
    out = jnp.tanh(sel @ w) * jax.nn.sigmoid(jnp.take_along_axis(scores, idx[..., None], 1))
    return x.at[jnp.arange(x.shape[0])[:, None], idx].add(out)
gspmd("g.mixture_of_depths.dp4", {"dp": 4}, (P("dp"), P(), P()), P("dp"), mod, (R(8, 8, D14), R(D14, 1), R(D14, D14)))

# 9. cross entropy with ignore_index labels (-100), dp x tp vocab sharded
def ce_ignore(h, w, y):
    logits = h @ w
    valid = y != -100
    ys = jnp.where(valid, y, 0)
    nll = -jnp.take_along_axis(jax.nn.log_softmax(logits), ys[..., None], -1)[..., 0]
    return jnp.sum(nll * valid) / jnp.maximum(jnp.sum(valid), 1)
y9 = I(0, 32, 4, 8); y9[0, :3] = -100; y9[2, 5] = -100
gspmd("g.ce_ignore_index.dp2xtp4", {"dp": 2, "tp": 4}, (P("dp"), P(None, "tp"), P("dp")), P(), ce_ignore, (R(4, 8, D14), R(D14, 32), y9))

# 10. shard_map: attention heads over tp with GQA repeat and remat
def gqa_base(x, wq, wk, wv, wo):
    q = jnp.einsum("bsd,dhe->bshe", x, wq); k = jnp.einsum("bsd,dhe->bshe", x, wk); v = jnp.einsum("bsd,dhe->bshe", x, wv)
    k = jnp.repeat(k, 2, axis=2); v = jnp.repeat(v, 2, axis=2)
    s = jnp.einsum("bqhd,bkhd->bhqk", q, k)
    o = jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(s, -1), v)
    return jnp.einsum("bqhd,hde->bqe", o, wo)
def gqa_local(bug):
    def f(x, wq, wk, wv, wo):
        y = jax.checkpoint(gqa_base)(x, wq, wk, wv, wo)
        return lax.psum(y, "tp") if bug != "pmean" else lax.pmean(y, "tp")
    return f
variants("s.gqa_remat", "tp2", {"tp": 2}, gqa_local, (P(), P(None, "tp"), P(None, "tp"), P(None, "tp"), P("tp")), P(), gqa_base,
       (R(2, 8, D14), R(D14, 8, 4), R(D14, 4, 4), R(D14, 4, 4), R(8, 4, D14)), [("pmean", ["wrong-reduction"])])

# 11. weight-tied autoencoder with bias, dp, SGD step via optax.sgd with momentum
opt11 = optax.sgd(0.1, momentum=0.9)
def ae_step(w, b, mom_w, mom_b, x):
    loss = lambda p: jnp.mean((jnp.tanh(x @ p[0] + p[1]) @ p[0].T - x) ** 2)
    g = jax.grad(loss)((w, b))
    u, st = opt11.update(g, (optax.TraceState(trace=(mom_w, mom_b)), optax.EmptyState()))
    p = optax.apply_updates((w, b), u)
    return p[0], p[1], st[0].trace[0], st[0].trace[1]
gspmd("g.tied_ae_momentum.dp2xtp4", {"dp": 2, "tp": 4}, (P(None, "tp"), P("tp"), P(None, "tp"), P("tp"), P("dp")),
        (P(None, "tp"), P("tp"), P(None, "tp"), P("tp")), ae_step, (R(D14, 32, scale=0.3), R(32, scale=0.1), R(D14, 32, scale=0.01), R(32, scale=0.01), R(8, D14)))

# 12. shard_map: sequence-sharded causal depthwise conv via all_gather of the previous block tail
K12 = 3
def dwconv_base(x, k):
    xp = jnp.pad(x, ((0, 0), (K12 - 1, 0), (0, 0)))
    return sum(xp[:, i:i + x.shape[1]] * k[i] for i in range(K12))
def dwconv_local(bug):
    def f(x, k):
        n = 4; r = lax.axis_index("sp")
        tails = lax.all_gather(x[:, -(K12 - 1):], "sp", axis=0)
        prev = tails[(r - 1) % n] if bug != "own-tail" else tails[r]
        prev = jnp.where(r == 0, jnp.zeros_like(prev), prev)
        xp = jnp.concatenate([prev, x], 1)
        return sum(xp[:, i:i + x.shape[1]] * k[i] for i in range(K12))
    return f
variants("s.dwconv_gather_tail", "sp4", {"sp": 4}, dwconv_local, (P(None, "sp"), P()), P(None, "sp"), dwconv_base, (R(2, 16, D14), R(K12, D14)),
       [("own-tail", ["wrong-shard-dim"])])
