# nineteenth batch: linear ops on partial sums before their psum — the psum
# moved past ops that commute with a sum (as a program that delays its
# all-reduce writes them): cumsum, zero padding, concatenation of two partial
# sums, reverse, a dynamic_slice at a data index, a select between a partial
# sum and zeros, a gather at token ids, a scatter-add of partial updates, a
# dot with a complete weight, an fft, a mean-pooling reduce_window, an
# einsum over a batch dim, a complex multiply, an average with weights every
# device holds. Bug variants: a square taken before the psum, a max pool
# before the psum.
D19 = 16

def lin_case(name, op, base_op, extra_specs=(), extra_args=(), bugs=()):
    """x @ w partial over tp, op(y, *extra) before the psum; baseline op(x @ w, *extra)."""
    def make(bug):
        def f(x, w, *e):
            y = x @ w
            return psum(op(y, *e) if bug is None else dict(bugs)[bug][0](y, *e), "tp")
        return f
    variants(name, "tp4", {"tp": 4}, make, (P(None, "tp"), P("tp")) + tuple(extra_specs), P(),
             lambda x, w, *e: base_op(x @ w, *e), (R(8, D19), R(D19, 12)) + tuple(extra_args),
             [(b, kinds) for b, (_, kinds) in bugs])

lin_case("s.partial_cumsum", lambda y: jnp.cumsum(y, 0), lambda y: jnp.cumsum(y, 0),
         bugs=[("square-first", (lambda y: jnp.cumsum(y * y, 0), ["missing-all-reduce"]))])
lin_case("s.partial_pad", lambda y: jnp.pad(y, ((1, 2), (0, 3))), lambda y: jnp.pad(y, ((1, 2), (0, 3))))
lin_case("s.partial_concat_two", lambda y: jnp.concatenate([y, 2 * y[:, :4]], 1),
         lambda y: jnp.concatenate([y, 2 * y[:, :4]], 1))
lin_case("s.partial_reverse", lambda y: y[::-1, ::-1], lambda y: y[::-1, ::-1])
lin_case("s.partial_dynamic_slice", lambda y, i: lax.dynamic_slice(y, (i[0], 0), (4, 12)),
         lambda y, i: lax.dynamic_slice(y, (i[0], 0), (4, 12)), (P(),), (I(0, 4, 1),))
lin_case("s.partial_select_zero", lambda y, m: jnp.where(m, y, 0.0), lambda y, m: jnp.where(m, y, 0.0),
         (P(),), (rng.random((8, 12)) > 0.5,))
lin_case("s.partial_gather_rows", lambda y, t: y[t], lambda y, t: y[t], (P(),), (I(0, 8, 6),))
lin_case("s.partial_scatter_add", lambda y, t: jnp.zeros((5, 12), y.dtype).at[t].add(y),
         lambda y, t: jnp.zeros((5, 12), y.dtype).at[t].add(y), (P(),), (I(0, 5, 8),))
lin_case("s.partial_dot_complete", lambda y, v: jnp.tanh(v) @ y.T, lambda y, v: jnp.tanh(v) @ y.T, (P(),), (R(3, 12),))
lin_case("s.partial_fft", lambda y: jnp.fft.fft(y, axis=1).real, lambda y: jnp.fft.fft(y, axis=1).real)
lin_case("s.partial_avg_pool", lambda y: lax.reduce_window(y, 0.0, lax.add, (2, 3), (2, 3), "VALID") / 6,
         lambda y: lax.reduce_window(y, 0.0, lax.add, (2, 3), (2, 3), "VALID") / 6,
         bugs=[("max-pool", (lambda y: lax.reduce_window(y, -jnp.inf, lax.max, (2, 3), (2, 3), "VALID"), ["missing-all-reduce"]))])
lin_case("s.partial_weighted_avg", lambda y, a: (y * a[:, None]).sum(0) / a.sum(), lambda y, a: (y * a[:, None]).sum(0) / a.sum(),
         (P(),), (np.abs(R(8)) + 0.1,))
lin_case("s.partial_complex_rotate", lambda y: (y.astype(jnp.complex64) * jnp.exp(1j * 0.3)).imag,
         lambda y: (y.astype(jnp.complex64) * jnp.exp(1j * 0.3)).imag)
lin_case("s.partial_transpose_reshape", lambda y: y.T.reshape(6, 16), lambda y: y.T.reshape(6, 16))

# an einsum over a batch dim with a complete operand, the psum after it
def bein(bug):
    def f(x, w, v):
        y = jnp.einsum("bsd,df->bsf", x, w)                       # partial over tp
        return psum(jnp.einsum("bsf,bf->bs", y, v), "tp")
    return f
variants("s.partial_batched_einsum", "tp4", {"tp": 4}, bein, (P(None, None, "tp"), P("tp"), P()), P(),
         lambda x, w, v: jnp.einsum("bsf,bf->bs", jnp.einsum("bsd,df->bsf", x, w), v), (R(2, 4, D19), R(D19, 8), R(2, 8)), [])
