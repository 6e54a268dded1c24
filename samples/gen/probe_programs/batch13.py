# thirteenth batch: user-style programs of idioms not covered before: packed
# sequences (segment-id masks), ALiBi, length masks, a KV-cache write at a
# data index, rope at data positions, tied embeddings trained vocab-parallel,
# jax.image.resize and a transposed convolution under spatial / batch
# sharding, batched cholesky solves (lapack custom calls with
# num_batch_dims), exact gelu with reduce_precision, AdamW on a
# warmup-cosine schedule, a timestep embedding, cross attention, group norm
# over a sharded spatial dim, a data-dependent while loop, an fft, and a
# clipped data-parallel step (pmean'd gradients; the bug psums them).
import optax
D13, H13, S13, B13, V13 = 16, 4, 8, 4, 32
def attn(q, k, v, mask):
    s = jnp.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(q.shape[-1])
    s = jnp.where(mask, s, -1e9)
    return jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(s, -1), v)

# 1. packed sequences: segment-id equality mask + causal, batch dp, heads tp
def packed(x, seg, wq, wk, wv):
    q = jnp.einsum("bsd,dhe->bshe", x, wq); k = jnp.einsum("bsd,dhe->bshe", x, wk); v = jnp.einsum("bsd,dhe->bshe", x, wv)
    m = (seg[:, None, :, None] == seg[:, None, None, :]) & (jnp.arange(S13)[:, None] >= jnp.arange(S13)[None, :])
    return attn(q, k, v, m).sum(-1)
gspmd("g.packed_segments.dp2xtp4", {"dp": 2, "tp": 4}, (P("dp"), P("dp"), P(None, "tp"), P(None, "tp"), P(None, "tp")), P("dp", None, "tp"),
        packed, (R(B13, S13, D13), I(0, 3, B13, S13), R(D13, H13, 4), R(D13, H13, 4), R(D13, H13, 4)))

# 2. ALiBi: per-head slope bias, heads sharded
def alibi(x, wq, wk, wv):
    q = jnp.einsum("bsd,dhe->bshe", x, wq); k = jnp.einsum("bsd,dhe->bshe", x, wk); v = jnp.einsum("bsd,dhe->bshe", x, wv)
    slopes = 2.0 ** (-8.0 * (jnp.arange(H13) + 1) / H13)
    rel = jnp.arange(S13)[None, :] - jnp.arange(S13)[:, None]
    s = jnp.einsum("bqhd,bkhd->bhqk", q, k) + slopes[None, :, None, None] * rel[None, None]
    s = jnp.where(rel[None, None] <= 0, s, -1e9)
    return jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(s, -1), v)
gspmd("g.alibi_heads.dp2xtp4", {"dp": 2, "tp": 4}, (P("dp"), P(None, "tp"), P(None, "tp"), P(None, "tp")), P("dp", None, "tp"),
        alibi, (R(B13, S13, D13), R(D13, H13, 4), R(D13, H13, 4), R(D13, H13, 4)))

# 3. padding from lengths: iota < length mask, mean pooling, batch sharded
def lenpool(x, lens, w):
    m = (jnp.arange(S13)[None, :] < lens[:, None]).astype(x.dtype)
    h = jnp.tanh(x @ w)
    return (h * m[..., None]).sum(1) / jnp.maximum(m.sum(1, keepdims=True), 1.0)
gspmd("g.length_mask_pool.dp4", {"dp": 4}, (P("dp"), P("dp"), P()), P("dp"), lenpool, (R(B13, S13, D13), I(1, S13 + 1, B13), R(D13, D13)))

# 4. KV-cache decode step: write at a data-dependent index, heads tp
def decode(cache_k, cache_v, xq, xk, xv, pos):
    ck = lax.dynamic_update_slice_in_dim(cache_k, xk[:, None], pos, axis=1)
    cv = lax.dynamic_update_slice_in_dim(cache_v, xv[:, None], pos, axis=1)
    s = jnp.einsum("bhd,bshd->bhs", xq, ck)
    s = jnp.where(jnp.arange(S13)[None, None] <= pos, s, -1e9)
    o = jnp.einsum("bhs,bshd->bhd", jax.nn.softmax(s, -1), cv)
    return o, ck, cv
gspmd("g.kv_decode_dataidx.dp2xtp4", {"dp": 2, "tp": 4}, (P("dp", None, "tp"), P("dp", None, "tp"), P("dp", "tp"), P("dp", "tp"), P("dp", "tp"), P()),
        (P("dp", "tp"), P("dp", None, "tp"), P("dp", None, "tp")), decode,
        (R(B13, S13, H13, 4), R(B13, S13, H13, 4), R(B13, H13, 4), R(B13, H13, 4), R(B13, H13, 4), np.int32(5)))

# 5. rope with position ids gathered from a table (data-dependent positions)
def rope_pos(x, pos_ids, w):
    inv = 1.0 / (10000 ** (jnp.arange(0, D13, 2) / D13))
    ang = pos_ids[..., None].astype(jnp.float32) * inv
    c, s = jnp.cos(ang), jnp.sin(ang)
    x1, x2 = x[..., ::2], x[..., 1::2]
    y = jnp.concatenate([x1 * c - x2 * s, x1 * s + x2 * c], -1)
    return y @ w
gspmd("g.rope_posids.dp2xtp4", {"dp": 2, "tp": 4}, (P("dp"), P("dp"), P(None, "tp")), P("dp", None, "tp"), rope_pos,
        (R(B13, S13, D13), I(0, 64, B13, S13), R(D13, D13)))

# 6. tied embeddings, vocab-parallel, training step with SGD
def tied_loss(E, ids, lbl):
    h = jnp.tanh(E[ids])
    logits = h @ E.T
    return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), lbl[..., None], -1))
def tied_step(E, ids, lbl):
    l, g = jax.value_and_grad(tied_loss)(E, ids, lbl)
    return l, E - 0.1 * g
gspmd("g.tied_embed_train.dp2xtp4", {"dp": 2, "tp": 4}, (P("tp"), P("dp"), P("dp")), (P(), P("tp")), tied_step,
        (R(V13, D13), I(0, V13, B13, S13), I(0, V13, B13, S13)))

# 7. bilinear resize (jax.image.resize) with spatial sharding
def resize(x, w):
    y = jax.image.resize(x, (x.shape[0], 16, 16, x.shape[3]), "bilinear")
    return y @ w
gspmd("g.image_resize.dp2xsp4", {"dp": 2, "sp": 4}, (P("dp", "sp"), P()), P("dp", "sp"), resize, (R(2, 8, 8, 4), R(4, 4)))

# 8. batched cholesky solve (not modelled ops) batch sharded
def chol(a, b):
    m = a @ jnp.swapaxes(a, -1, -2) + 4 * jnp.eye(a.shape[-1])
    L = jnp.linalg.cholesky(m)
    return jax.scipy.linalg.cho_solve((L, True), b)
gspmd("g.cholesky_batch.dp4", {"dp": 4}, (P("dp"), P("dp")), P("dp"), chol, (R(8, 4, 4), R(8, 4, 2)))

# 9. exact gelu (erf) + reduce_precision, hidden tp
def gelu_mlp(x, w1, w2):
    h = jax.nn.gelu(x @ w1, approximate=False)
    h = lax.reduce_precision(h, exponent_bits=8, mantissa_bits=7)
    return h @ w2
gspmd("g.gelu_erf_rp.dp2xtp4", {"dp": 2, "tp": 4}, (P("dp"), P(None, "tp"), P("tp")), P("dp"), gelu_mlp, (R(8, D13), R(D13, 32), R(32, D13)))

# 10. AdamW with warmup-cosine schedule and step counter, fsdp
sched = optax.warmup_cosine_decay_schedule(0.0, 1e-2, 3, 10)
opt = optax.adamw(sched, weight_decay=0.1)
def wc_step(w, st_mu, st_nu, count, x, y):
    st = (optax.ScaleByAdamState(count=count, mu=st_mu, nu=st_nu), optax.EmptyState(), optax.ScaleByScheduleState(count=count))
    l, g = jax.value_and_grad(lambda w: jnp.mean((jnp.tanh(x @ w) - y) ** 2))(w)
    u, st2 = opt.update(g, st, w)
    return l, optax.apply_updates(w, u), st2[0].mu, st2[0].nu, st2[0].count
gspmd("g.adamw_warmup_cosine.fsdp4", {"fsdp": 4}, (P("fsdp"), P("fsdp"), P("fsdp"), P(), P("fsdp"), P("fsdp")),
      (P(), P("fsdp"), P("fsdp"), P("fsdp"), P()), wc_step,
      (R(D13, D13), R(D13, D13, scale=0.01), np.abs(R(D13, D13, scale=0.01)), np.int32(4), R(8, D13), R(8, D13)))

# 11. transposed conv (upsampling), batch dp
def deconv(x, k):
    return lax.conv_transpose(x, k, (2, 2), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))
gspmd("g.conv_transpose.dp4", {"dp": 4}, (P("dp"), P()), P("dp"), deconv, (R(4, 4, 4, 3), R(3, 3, 3, 5)))

# 12. diffusion timestep embedding from data times, dp
def temb(t, x, w):
    half = 8
    f = jnp.exp(-np.log(10000) * jnp.arange(half) / half)
    e = jnp.concatenate([jnp.sin(t[:, None] * f), jnp.cos(t[:, None] * f)], -1)
    return jax.nn.silu(e @ w) + x
gspmd("g.timestep_embed.dp4", {"dp": 4}, (P("dp"), P("dp"), P()), P("dp"), temb, (np.abs(R(8)) * 100, R(8, D13), R(D13, D13)))

# 13. cross attention, encoder longer, heads tp
def xattn(xd, xe, wq, wk, wv):
    q = jnp.einsum("bsd,dhe->bshe", xd, wq); k = jnp.einsum("bsd,dhe->bshe", xe, wk); v = jnp.einsum("bsd,dhe->bshe", xe, wv)
    s = jnp.einsum("bqhd,bkhd->bhqk", q, k)
    return jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(s, -1), v)
gspmd("g.cross_attn.dp2xtp4", {"dp": 2, "tp": 4}, (P("dp"), P("dp"), P(None, "tp"), P(None, "tp"), P(None, "tp")), P("dp", None, "tp"),
        xattn, (R(B13, 4, D13), R(B13, 12, D13), R(D13, H13, 4), R(D13, H13, 4), R(D13, H13, 4)))

# 14. groupnorm with spatial sharding
def gn(x, g, b):
    n, h, w, c = x.shape
    xr = x.reshape(n, h, w, 4, c // 4)
    mu = xr.mean((1, 2, 4), keepdims=True); var = xr.var((1, 2, 4), keepdims=True)
    return ((xr - mu) / jnp.sqrt(var + 1e-5)).reshape(x.shape) * g + b
gspmd("g.groupnorm.dp2xsp4", {"dp": 2, "sp": 4}, (P("dp", "sp"), P(), P()), P("dp", "sp"), gn, (R(2, 8, 4, 8), R(8), R(8)))

# 15. data-dependent while (iterate until converged), dp
def fixpoint(x, w):
    def cond(c): return (c[1] < 20) & (jnp.max(jnp.abs(c[2])) > 1e-3)
    def body(c):
        y = jnp.tanh(c[0] @ w) * 0.5
        return y, c[1] + 1, y - c[0]
    return lax.while_loop(cond, body, (x, 0, x))[0]
gspmd("g.while_converge.dp4", {"dp": 4}, (P("dp"), P()), P("dp"), fixpoint, (R(8, D13), R(D13, D13, scale=0.3)))

# 16. fft along unsharded dim, batch dp
def fftmix(x):
    return jnp.real(jnp.fft.ifft(jnp.fft.fft(x, axis=-1) * 0.5, axis=-1))
gspmd("g.fft_mix.dp4", {"dp": 4}, (P("dp"),), P("dp"), fftmix, (R(8, D13),))

# 17. shard_map: dp step with pmean'd grads and a global-norm clip by psum of squares
def loss(w, x, y): return jnp.mean((jnp.tanh(x @ w) - y) ** 2)
def clip_step_base(w, x, y):
    g = jax.grad(loss)(w, x, y)
    n = jnp.sqrt(jnp.sum(g * g)); g = g * jnp.minimum(1.0, 1.0 / (n + 1e-6))
    return w - 0.1 * g
def clip_step(bug):
    def f(w, x, y):
        g = jax.grad(loss)(w, x, y)
        g = lax.pmean(g, "dp") if bug != "psum" else lax.psum(g, "dp")
        n = jnp.sqrt(jnp.sum(g * g)); g = g * jnp.minimum(1.0, 1.0 / (n + 1e-6))
        return w - 0.1 * g
    return f
variants("s.clip_pmean_step", "dp4", {"dp": 4}, clip_step, (P(), P("dp"), P("dp")), P(), clip_step_base,
         (R(D13, D13), R(8, D13), R(8, D13)), [("psum", ["wrong-reduction"])])
