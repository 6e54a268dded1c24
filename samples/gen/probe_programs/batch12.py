# twelfth batch: collective matmuls written with ppermute rings (an all-gather
# matmul unrolled and in a fori_loop, jax's docs contracting form), an
# all-gather by a ring of dynamic-update-slices, GShard expert groups (one group
# per device, the baseline vmapped over groups: once a false alarm), gradient
# accumulation over microbatches split from the local batch, grouped-query
# attention with more tp ranks than kv heads.
def cm_ring(bug, rolled=False):
    def f(x, w):
        n = 4; i0 = idx("tp"); m = x.shape[0]
        def step(s, carry):
            out, blk = carry
            src = (i0 + s) % n if bug != "wrong-offset" else (i0 - s) % n
            out = lax.dynamic_update_slice(out, blk @ w, (src * m, 0))
            return out, lax.ppermute(blk, "tp", [(j, (j - 1) % n) for j in range(n)])
        carry = (jnp.zeros((m * n, w.shape[1]), x.dtype), x)
        if rolled:
            return lax.fori_loop(0, n, step, carry)[0]
        for s in range(n):
            carry = step(s, carry)
        return carry[0]
    return f
variants("s.cm_allgather_ring", "tp4", {"tp": 4}, cm_ring, (P("tp"), P(None, "tp")), P(None, "tp"), lambda x, w: x @ w,
         (R(16, 8), R(8, 16)), [("wrong-offset", ["wrong-shard-dim"])])
variants("s.cm_allgather_fori", "tp4", {"tp": 4}, lambda b: cm_ring(b, True), (P("tp"), P(None, "tp")), P(None, "tp"),
         lambda x, w: x @ w, (R(16, 8), R(8, 16)), [])

def cm_contracting(bug):
    def f(lhs, rhs):
        n = 4; i0 = idx("i"); ch = lhs.shape[1]
        def body(i, carry):
            acc, l = carry
            k = (i0 + i) % n if bug != "wrong-chunk" else (i0 - i) % n
            r = lax.dynamic_slice_in_dim(rhs, k * ch, ch)
            return acc + l @ r, lax.ppermute(l, "i", [(j, (j - 1) % n) for j in range(n)])
        acc = jnp.zeros((lhs.shape[0], rhs.shape[1]), lhs.dtype)
        acc, l = lax.fori_loop(0, n - 1, body, (acc, lhs), unroll=True)
        k = (i0 + n - 1) % n if bug != "wrong-chunk" else (i0 - n + 1) % n
        return acc + l @ lax.dynamic_slice_in_dim(rhs, k * ch, ch)
    return f
variants("s.cm_docs_contracting", "i4", {"i": 4}, cm_contracting, (P(None, "i"), P(None, "i")), P(None, "i"),
         lambda a, b: a @ b, (R(8, 16), R(16, 8)), [("wrong-chunk", ["wrong-shard-dim"])])

def ag_ring(bug):
    def f(x, w):
        n = 4; i0 = idx("dp"); m = x.shape[0]
        buf = jnp.zeros((m * n, x.shape[1]), x.dtype); blk = x
        for s in range(n):
            buf = lax.dynamic_update_slice(buf, blk, (((i0 + s) % n) * m, 0))
            blk = lax.ppermute(blk, "dp", [(j, (j - 1) % n) for j in range(n)])
        return jnp.tanh(buf @ w)
    return f
variants("s.allgather_ring_dus", "dp4", {"dp": 4}, ag_ring, (P("dp"), P()), P(), lambda x, w: jnp.tanh(x @ w),
         (R(16, 8), R(8, 8)), [])

G_E, G_CAP = 4, 3
def gshard_group(x, wg, we):
    p = jax.nn.softmax(x @ wg, -1)
    oh = jax.nn.one_hot(jnp.argmax(p, -1), G_E)
    pos = jnp.cumsum(oh, 0) * oh
    disp = (oh * (pos <= G_CAP))[:, :, None] * jax.nn.one_hot(pos - 1, G_CAP)
    eo = jnp.tanh(jnp.einsum("ecd,edf->ecf", jnp.einsum("tec,td->ecd", disp, x), we))
    return jnp.einsum("tec,ecf->tf", disp * jnp.max(p, -1)[:, None, None], eo)
variants("s.gshard_groups", "dp4", {"dp": 4}, lambda b: gshard_group, (P("dp"), P(), P()), P("dp"),
         lambda x, wg, we: jax.vmap(gshard_group, (0, None, None))(x.reshape(4, -1, x.shape[1]), wg, we).reshape(-1, x.shape[1]),
         (R(16, D), R(D, G_E), R(G_E, D, D, scale=0.3)), [])

acc_loss = lambda w, x, y: jnp.mean((jnp.tanh(x @ w) - y) ** 2)
def acc_scan(w, xs, ys):
    g, _ = lax.scan(lambda g, xy: (g + jax.grad(acc_loss)(w, *xy), None), jnp.zeros_like(w), (xs, ys))
    return w - 0.1 * g / xs.shape[0]
def acc_local(bug):
    def f(w, x, y):
        xs, ys = x.reshape(2, -1, x.shape[1]), y.reshape(2, -1, y.shape[1])
        g, _ = lax.scan(lambda g, xy: (g + jax.grad(acc_loss)(w, *xy), None), jnp.zeros_like(w), (xs, ys))
        if bug != "no-pmean":
            g = pmean(g, "dp")
        return w - 0.1 * g / 2
    return f
variants("s.gradacc_local_split", "dp4", {"dp": 4}, acc_local, (P(), P("dp"), P("dp")), P(),
         lambda w, x, y: acc_scan(w, x.reshape(2, -1, x.shape[1]), y.reshape(2, -1, y.shape[1])),
         (R(8, 16, scale=0.3), R(16, 8), R(16, 16)), [("no-pmean", ["missing-all-reduce"])])

GQ_H, GQ_KV, GQ_HD = 4, 2, 4
def gqa_base(x, wq, wk, wv, wo):
    q = jnp.einsum("btd,dhk->bthk", x, wq)
    k = jnp.repeat(jnp.einsum("btd,dgk->btgk", x, wk), GQ_H // GQ_KV, axis=2)
    v = jnp.repeat(jnp.einsum("btd,dgk->btgk", x, wv), GQ_H // GQ_KV, axis=2)
    o = jnp.einsum("bhts,bshk->bthk", jax.nn.softmax(jnp.einsum("bthk,bshk->bhts", q, k) / 2.0, -1), v)
    return jnp.einsum("bthk,hkd->btd", o, wo)
def gqa_tp(bug):
    def f(x, wq, wk, wv, wo):
        g = idx("tp") // (GQ_H // GQ_KV) if bug != "wrong-kv" else idx("tp") % GQ_KV
        k = jnp.einsum("btd,dgk->btgk", x, lax.dynamic_slice_in_dim(wk, g, 1, axis=1))
        v = jnp.einsum("btd,dgk->btgk", x, lax.dynamic_slice_in_dim(wv, g, 1, axis=1))
        q = jnp.einsum("btd,dhk->bthk", x, wq)
        o = jnp.einsum("bhts,bshk->bthk", jax.nn.softmax(jnp.einsum("bthk,bshk->bhts", q, k) / 2.0, -1), v)
        return psum(jnp.einsum("bthk,hkd->btd", o, wo), "tp")
    return f
variants("s.gqa_tp_over_kv", "tp4", {"tp": 4}, gqa_tp, (P(), P(None, "tp"), P(), P(), P("tp")), P(), gqa_base,
         (R(2, 4, D), R(D, GQ_H, GQ_HD, scale=0.3), R(D, GQ_KV, GQ_HD, scale=0.3), R(D, GQ_KV, GQ_HD, scale=0.3),
          R(GQ_H, GQ_HD, D, scale=0.3)), [("wrong-kv", ["wrong-shard-dim"])])

# Per-device groups of a baseline vmapped over the devices' blocks (each once
# a false alarm by the rules: a share of a sum used before any all-reduce is
# the baseline's group value here): per-device losses stacked, local SGD
# steps then averaged weights, ghost batch norm, attention within each block,
# an ensemble trained one member per device.
pg_loss = lambda w, x, y: jnp.mean((jnp.tanh(x @ w) - y) ** 2)
def pg_local_sgd(w, x, y):
    for _ in range(2):
        w = w - 0.1 * jax.grad(pg_loss)(w, x, y)
    return w
def pg_gbn(x):
    return (x - jnp.mean(x, 0)) / jnp.sqrt(jnp.var(x, 0) + 1e-5)
def pg_attn(q, k, v):
    return jax.nn.softmax(q @ k.T / 2.0, -1) @ v
pg_groups = lambda a: a.reshape(4, -1, a.shape[-1])
variants("s.per_device_losses", "dp4", {"dp": 4}, lambda b: (lambda w, x, y: pg_loss(w, x, y)[None]),
         (P(), P("dp"), P("dp")), P("dp"), lambda w, x, y: jax.vmap(pg_loss, (None, 0, 0))(w, pg_groups(x), pg_groups(y)),
         (R(8, 8), R(16, 8), R(16, 8)), [])
variants("s.local_sgd_avg", "dp4", {"dp": 4}, lambda b: (lambda w, x, y: pmean(pg_local_sgd(w, x, y), "dp")),
         (P(), P("dp"), P("dp")), P(),
         lambda w, x, y: jnp.mean(jax.vmap(pg_local_sgd, (None, 0, 0))(w, pg_groups(x), pg_groups(y)), 0),
         (R(8, 8, scale=0.3), R(16, 8), R(16, 8)), [])
variants("s.ghost_batchnorm", "dp4", {"dp": 4}, lambda b: pg_gbn, (P("dp"),), P("dp"),
         lambda x: jax.vmap(pg_gbn)(pg_groups(x)).reshape(-1, x.shape[-1]), (R(32, 8),), [])
variants("s.block_local_attn", "sp4", {"sp": 4}, lambda b: pg_attn, (P("sp"), P("sp"), P("sp")), P("sp"),
         lambda q, k, v: jax.vmap(pg_attn)(pg_groups(q), pg_groups(k), pg_groups(v)).reshape(-1, q.shape[-1]),
         (R(16, 8), R(16, 8), R(16, 8)), [])
pg_step = lambda w, x, y: w - 0.1 * jax.grad(pg_loss)(w, x, y)
variants("s.ensemble_members", "ens4", {"ens": 4}, lambda b: (lambda w, x, y: pg_step(w[0], x[0], y[0])[None]),
         (P("ens"), P("ens"), P("ens")), P("ens"), jax.vmap(pg_step), (R(4, 8, 8, scale=0.3), R(4, 6, 8), R(4, 6, 8)), [])

# lax.cond on axis_index: device 0 computes a metric, the others zeros, then a
# psum; wrong: two devices compute it (twice the value).
def cond_dev0(bug):
    def f(x):
        s = psum(jnp.sum(x ** 2), "dp")
        first = idx("dp") == 0 if bug != "two-devices" else idx("dp") < 2
        return psum(lax.cond(first, lambda: s, lambda: jnp.zeros_like(s)), "dp")
    return f
variants("s.cond_on_device0", "dp4", {"dp": 4}, cond_dev0, (P("dp"),), P(), lambda x: jnp.sum(x ** 2), (R(16, 8),),
         [("two-devices", ["constant-mismatch"])])

# A SAME convolution over a sequence-sharded dim under GSPMD: halos by
# collective-permute, GSPMD's mask of the rows outside the array, then a
# VALID convolution of the local rows and halos.
gspmd("g.conv1d_spatial.sp4", {"sp": 4}, (P(None, "sp", None), P()), P(None, "sp", None),
      lambda x, k: lax.conv_general_dilated(x, k, (1,), "SAME", dimension_numbers=("NWC", "WIO", "NWC")),
      (R(2, 16, 3), R(3, 3, 4)))
