# twenty-first batch: GSPMD programs with library calls users reach for —
# lax.ragged_dot (grouped expert matmul) with the groups' weights sharded,
# jnp.any / jnp.all over a sharded dim, lax.top_k over a sharded vocab,
# jnp.median over a sharded dim, jnp.bincount of data-parallel ids, optax's
# integer-label cross-entropy over a sharded vocab, jax.nn.dot_product_attention
# with heads sharded, a logical-not and a bitwise mask over sharded flags.
import optax
D21 = 16

def ragged(x, w, gs):
    return jax.nn.relu(lax.ragged_dot(x, w, gs))
gspmd("g.ragged_dot_experts_ep4", {"ep": 4}, (P(), P(None, None, "ep"), P()), P(), ragged,
      (R(12, D21), R(4, D21, 8, scale=0.3), np.array([3, 4, 2, 3], np.int32)))

gspmd("g.any_all_sharded_dp2xtp4", {"dp": 2, "tp": 4}, (P("dp", "tp"),), (P("dp"), P()),
      lambda x: (jnp.any(x > 1.5, -1), jnp.all(jnp.abs(x) < 3.0)), (R(8, 16),))

gspmd("g.top_k_vocab_tp4", {"tp": 4}, (P(None, "tp"),), [P(), P()], lambda x: lax.top_k(x, 3), (R(8, 32),))

gspmd("g.median_sharded_tp4", {"tp": 4}, (P(None, "tp"),), P(), lambda x: jnp.median(x, -1), (R(8, 32),))

gspmd("g.bincount_dp4", {"dp": 4}, (P("dp"),), P(), lambda t: jnp.bincount(t, length=10), (I(0, 10, 32),))

def int_ce(z, y):
    return optax.softmax_cross_entropy_with_integer_labels(z, y).mean()
gspmd("g.optax_int_ce_vocab_dp2xtp4", {"dp": 2, "tp": 4}, (P("dp", "tp"), P("dp")), P(), int_ce, (R(8, 32), I(0, 32, 8)))

def dpa(q, k, v):
    return jax.nn.dot_product_attention(q, k, v, is_causal=True)
gspmd("g.dot_product_attention_heads_tp4", {"tp": 4}, (P(None, None, "tp"), P(None, None, "tp"), P(None, None, "tp")),
      P(None, None, "tp"), dpa, (R(2, 8, 4, 8), R(2, 8, 4, 8), R(2, 8, 4, 8)))

gspmd("g.flag_logic_sp4", {"sp": 4}, (P("sp"), P("sp")), P("sp"),
      lambda a, b: jnp.where(~(a > 0) ^ (b > 0.5), a * 2, b), (R(16, 4), R(16, 4)))
