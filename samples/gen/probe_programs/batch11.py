# eleventh batch: GSPMD versions of the shard_map false-alarm idioms (does the partitioner produce them?)
gspmd("g.masked_rowpar.tp4", {"tp": 4}, (P(None, None, "tp"), P("tp", None), P()), P(),
      lambda x, w, lens: jnp.where(jnp.arange(x.shape[1])[None, :, None] < lens[:, None, None], x @ w, 0.0),
      (R(2, 8, D), R(D, 8, scale=0.3), np.array([5, 8], np.int32)))
gspmd("g.rowpar_bias.tp4", {"tp": 4}, (P(None, "tp"), P("tp", None), P()), P(), lambda x, w, b: x @ w + b, (R(8, D), R(D, 16, scale=0.2), R(16)))
gspmd("g.argmax_vocab_sharded.tp4", {"tp": 4}, (P(None, "tp"),), P(), lambda x: jnp.argmax(x, 1), (R(8, 64),))
gspmd("g.max_vocab_sharded.tp4", {"tp": 4}, (P(None, "tp"),), P(), lambda x: jnp.max(x, 1), (R(8, 64),))
gspmd("g.moe_tp_capacity_mask.tp4", {"tp": 4}, (P(), P(None, None, "tp"), P(None, "tp", None), P()), P(), moe_tp_base,
      (R(8, 16), R(4, 16, 32, scale=0.3), R(4, 32, 16, scale=0.3), jax.nn.softmax(R(8, 4), -1)))
gspmd("g.zero3_replicated_batch.dp4", {"dp": 4}, (P("dp"), P(), P()), P("dp"),
      lambda w, x, y: w - 0.1 * jax.grad(lin_loss)(w, x, y), (R(16, 8, scale=0.2), R(8, 16), R(8, 8)))
