# tenth batch: loop carries holding partial values
def c10(name, f, ins, base, args):
    variants(name, "tp4", {"tp": 4}, lambda bug: f, ins, P(), base, args, [])
X10 = R(3, 8, D); W10 = R(D, 8, scale=0.3)
c10("s.loop_carry_starts_partial", lambda xs, w: psum(lax.fori_loop(1, 3, lambda i, a: a + xs[i] @ w, xs[0] @ w), "tp"),
    (P(None, None, "tp"), P("tp", None)), lambda xs, w: lax.fori_loop(1, 3, lambda i, a: a + xs[i] @ w, xs[0] @ w), (X10, W10))
c10("s.scan_partial_ys_psum_after", lambda xs, w: psum(lax.scan(lambda c, x: (c, x @ w), 0.0, xs)[1], "tp"),
    (P(None, None, "tp"), P("tp", None)), lambda xs, w: lax.scan(lambda c, x: (c, x @ w), 0.0, xs)[1], (X10, W10))
c10("s.loop_decay_partial", lambda xs, w: psum(lax.fori_loop(0, 3, lambda i, a: 0.5 * a + xs[i] @ w, jnp.zeros((8, 8))), "tp"),
    (P(None, None, "tp"), P("tp", None)), lambda xs, w: lax.fori_loop(0, 3, lambda i, a: 0.5 * a + xs[i] @ w, jnp.zeros((8, 8))), (X10, W10))
c10("s.loop_psum_inside_each_step", lambda xs, w: lax.fori_loop(0, 3, lambda i, a: jnp.tanh(a + psum(xs[i] @ w, "tp")), jnp.zeros((8, 8))),
    (P(None, None, "tp"), P("tp", None)), lambda xs, w: lax.fori_loop(0, 3, lambda i, a: jnp.tanh(a + xs[i] @ w), jnp.zeros((8, 8))), (X10, W10))
