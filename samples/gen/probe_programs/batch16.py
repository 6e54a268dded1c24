# sixteenth batch: explicit-mode meshes (AxisType.Explicit, sharding in
# types), as the current JAX recommends: a training step with optax AdamW,
# einsums with out_sharding, reshard between layers, a lookup with
# out_sharding, attention with heads resharded to sequence, auto_axes inside
# an explicit program.
import optax
D16 = 16

def ex_loss(p, x, y):
    h = jnp.tanh(jnp.matmul(x, p["w1"], out_sharding=P("dp", "tp")))
    o = jnp.matmul(h, p["w2"], out_sharding=P("dp"))
    return jnp.mean((o - y) ** 2)
ex_opt = optax.adamw(1e-2)
def ex_step(w1, w2, x, y):
    p = {"w1": w1, "w2": w2}
    st = ex_opt.init(p)
    l, g = jax.value_and_grad(ex_loss)(p, x, y)
    u, _ = ex_opt.update(g, st, p)
    p = optax.apply_updates(p, u)
    return l, p["w1"], p["w2"]
gspmd_explicit("g.explicit.adamw_step_dp2xtp4", {"dp": 2, "tp": 4}, (P(None, "tp"), P("tp", None), P("dp"), P("dp")), ex_step,
               (R(D16, 32, scale=0.3), R(32, D16, scale=0.3), R(8, D16), R(8, D16)))

def ex_einsum(x, w, v):
    h = jnp.einsum("bsd,df->bsf", x, w, out_sharding=P("dp", None, "tp"))
    h = jax.nn.gelu(h)
    h = jax.sharding.reshard(h, P("dp", "tp", None))
    return jnp.einsum("bsf,fd->bsd", h, v, out_sharding=P("dp", "tp", None))
gspmd_explicit("g.explicit.einsum_reshard_dp2xtp4", {"dp": 2, "tp": 4}, (P("dp"), P(None, "tp"), P()), ex_einsum,
               (R(4, 8, D16), R(D16, 32, scale=0.3), R(32, D16, scale=0.3)))

def ex_take(table, ids, w):
    e = table.at[ids].get(out_sharding=P("dp", None, None))
    return jnp.matmul(e, w, out_sharding=P("dp", None, "tp"))
gspmd_explicit("g.explicit.take_out_sharding_dp2xtp4", {"dp": 2, "tp": 4}, (P(None, "tp"), P("dp"), P(None, "tp")), ex_take,
               (R(32, D16), I(0, 32, 4, 8), R(D16, 16)))

def ex_attn(q, k, v):
    s = jnp.einsum("bqhd,bkhd->bhqk", q, k, out_sharding=P("dp", "tp"))
    p = jax.nn.softmax(s, -1)
    o = jnp.einsum("bhqk,bkhd->bqhd", p, v, out_sharding=P("dp", None, "tp"))
    return jax.sharding.reshard(o, P("dp", "tp"))
gspmd_explicit("g.explicit.attn_heads_to_seq_dp2xtp4", {"dp": 2, "tp": 4}, (P("dp", None, "tp"), P("dp", None, "tp"), P("dp", None, "tp")),
               ex_attn, (R(2, 8, 4, 4), R(2, 8, 4, 4), R(2, 8, 4, 4)))

def ex_auto(x, w):
    h = jnp.matmul(x, w, out_sharding=P("dp", "tp"))
    @jax.sharding.auto_axes(out_sharding=P("dp", None))
    def norm(h):
        return h / jnp.linalg.norm(h, axis=-1, keepdims=True)
    return norm(h)
gspmd_explicit("g.explicit.auto_axes_norm_dp2xtp4", {"dp": 2, "tp": 4}, (P("dp"), P(None, "tp")), ex_auto, (R(8, D16), R(D16, 32)))
