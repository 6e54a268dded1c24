# third batch: minimal repros for the wrong-reduction alarm, dtype, layout, offsets
def m3(name, tag, mesh, f, ins, out, base, args):
    variants(name, tag, mesh, lambda bug: f, ins, out, base, args, [])
m3("m.psum_dup_div_n", "tp4", {"tp": 4}, lambda b: psum(b / 4, "tp"), (P(),), P(), lambda b: b, (R(16),))
m3("m.psum_dup_times_quarter", "tp4", {"tp": 4}, lambda b: psum(b * 0.25, "tp"), (P(),), P(), lambda b: b, (R(16),))
m3("m.psum_partial_plus_dup_div_n", "tp4", {"tp": 4}, lambda x, b: psum(x.sum(0) + b / 4, "tp"), (P("tp"), P()), P(),
   lambda x, b: x.sum(0) + b, (R(16, 8), R(8)))
m3("m.pmean_dup", "tp4", {"tp": 4}, lambda b: pmean(b, "tp"), (P(),), P(), lambda b: b, (R(16),))
m3("m.psum_partial_plus_dup_minus", "tp4", {"tp": 4}, lambda x, b: psum(x.sum(0) + b, "tp") - 3 * b, (P("tp"), P()), P(),
   lambda x, b: x.sum(0) + b, (R(16, 8), R(8)))
m3("m.gather_dup_is_tile", "tp4", {"tp": 4}, lambda b: lax.all_gather(b, "tp", axis=0, tiled=True), (P(),), P(),
   lambda b: jnp.tile(b, 4), (R(8),))
# dtype: baseline itself in bf16 (bf16 matmul output), distributed psum in bf16 as GSPMD would do
m3("s.bf16_pure_rowpar", "tp4", {"tp": 4}, lambda x, w: psum(x @ w, "tp"), (P(None, "tp"), P("tp", None)), P(),
   lambda x, w: x @ w, (R(8, D).astype(jnp.bfloat16), R(D, 16, scale=0.2).astype(jnp.bfloat16)))
gspmd("g.bf16_pure_rowpar.tp4", {"tp": 4}, (P(None, "tp"), P("tp", None)), P(), lambda x, w: x @ w,
      (R(8, D).astype(jnp.bfloat16), R(D, 16, scale=0.2).astype(jnp.bfloat16)))
m3("s.f16_grad_pmean", "dp4", {"dp": 4}, lambda w, x: pmean(jax.grad(lambda w: jnp.mean(jnp.tanh(x @ w)))(w), "dp"),
   (P(), P("dp")), P(), lambda w, x: jax.grad(lambda w: jnp.mean(jnp.tanh(x @ w)))(w),
   (R(16, 8, scale=0.2).astype(np.float16), R(16, 16).astype(np.float16)))
# layout: untiled gather + reshape in the right order; Ulysses with merged heads
m3("s.gather_untiled_reshape", "fsdp4", {"fsdp": 4}, lambda w, x: x @ lax.all_gather(w, "fsdp", axis=0).reshape(D, 16),
   (P("fsdp"), P()), P(), lambda w, x: x @ w, (R(D, 16), R(8, D)))
def ulysses_merged(q, k, v):
    b, sl, hh = q.shape; H = 8
    q, k, v = (lax.all_to_all(t.reshape(b, sl, H, hh // H), "sp", 2, 1, tiled=True) for t in (q, k, v))
    o = attn(q, k, v)
    return lax.all_to_all(o, "sp", 1, 2, tiled=True).reshape(b, sl, hh)
m3("s.ulysses_merged_heads", "sp4", {"sp": 4}, ulysses_merged, (P(None, "sp"),) * 3, P(None, "sp"),
   lambda q, k, v: attn(*(t.reshape(2, 16, 8, 4) for t in (q, k, v))).reshape(2, 16, 32), (R(2, 16, 32), R(2, 16, 32), R(2, 16, 32)))
# offsets: rope positions under sequence parallelism; bug: positions restart at 0 on each device
def sp_rope(bug):
    def f(x):
        sl = x.shape[1]
        pos = jnp.arange(sl)[None, :] + (0 if bug == "pos-no-offset" else idx("sp") * sl)
        return rope(x, jnp.broadcast_to(pos, x.shape[:2]))
    return f
variants("s.sp_rope", "sp4", {"sp": 4}, sp_rope, (P(None, "sp"),), P(None, "sp"),
         lambda x: rope(x, jnp.broadcast_to(jnp.arange(x.shape[1])[None], x.shape[:2])), (R(2, 16, 4, 8),),
         [("pos-no-offset", ["wrong-shard-dim"])])
# SAME conv width 3 with halos both ways
def halo2(x, w):
    left = lax.ppermute(x[:, -1:], "sp", [(i, i + 1) for i in range(3)])
    right = lax.ppermute(x[:, :1], "sp", [(i + 1, i) for i in range(3)])
    xp = jnp.concatenate([left, x, right], 1)
    return xp[:, :-2] * w[0] + xp[:, 1:-1] * w[1] + xp[:, 2:] * w[2]
m3("s.halo_same_conv3", "sp4", {"sp": 4}, halo2, (P(None, "sp"), P()), P(None, "sp"),
   lambda x, w: (lambda xp: xp[:, :-2] * w[0] + xp[:, 1:-1] * w[1] + xp[:, 2:] * w[2])(jnp.pad(x, ((0, 0), (1, 1), (0, 0)))),
   (R(2, 16, 4), R(3, 4)))
# transpose then gather along the other dim
m3("s.transpose_gather", "sp4", {"sp": 4}, lambda x: lax.all_gather(x.T, "sp", axis=1, tiled=True), (P("sp"),), P(),
   lambda x: x.T, (R(16, 8),))
# psum over both axes of a 2-D mesh (value partial over both)
m3("s.psum_both_axes", "dp2xtp4", {"dp": 2, "tp": 4}, lambda x: psum(x.sum(), ("dp", "tp")), (P("dp", "tp"),), P(),
   lambda x: x.sum(), (R(8, 32),))
# GSPMD third batch
def rnn(w, x):
    return lax.scan(lambda h, xt: (jnp.tanh(h @ w + xt), None), jnp.zeros((x.shape[0], w.shape[0])), x.transpose(1, 0, 2))[0]
gspmd("g.rnn_scan_seq_sharded.sp4", {"sp": 4}, (P(), P(None, "sp")), P(), rnn, (R(16, 16, scale=0.3), R(4, 16, 16)))
gspmd("g.rnn_scan_batch.dp4", {"dp": 4}, (P(), P("dp")), P("dp"), rnn, (R(16, 16, scale=0.3), R(8, 16, 16)))
gspmd("g.while_halving.dp4", {"dp": 4}, (P("dp"),), P("dp"),
      lambda x: lax.while_loop(lambda c: jnp.max(jnp.abs(c)) > 1.0, lambda c: c * 0.5, x), (R(8, 8, scale=5),))
gspmd("g.embed_lookup.dp2xtp4", {"dp": 2, "tp": 4}, (P("tp", None), P("dp")), P("dp"), lambda e, t: e[t], (R(V, 16), I(0, V, 8, 4)))
gspmd("g.attn_bf16_f32softmax.tp4", {"tp": 4}, (MHA, P()), P(),
      lambda p, x: mha(jax.tree.map(lambda a: a.astype(jnp.bfloat16), p), x.astype(jnp.bfloat16)).astype(jnp.float32), (mha_p(), R(2, 8, D)))
gspmd("g.hand_adam_grad_mlp.dp2xtp4", {"dp": 2, "tp": 4}, (OP, OP, OP, P("dp"), P("dp")), (OP, OP, OP),
      lambda p, m, v, x, y: adamw_clip(p, m, v, jax.grad(lambda p: jnp.mean((jnp.tanh(x @ p["w1"]) @ p["w2"] + p["b"] - y) ** 2))(p), 2.0),
      (op_p(), op_p(), jax.tree.map(jnp.abs, op_p()), R(16, D), R(16, D)))
