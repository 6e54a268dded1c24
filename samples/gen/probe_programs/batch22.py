# twenty-second batch: a bias added on every device before the psum and
# taken back after it in the forms a user may write: minus 3·b, minus
# psum(b) plus b, minus (psum(1) - 1)·b, and a bias added once by the
# device at index 0 (a where on axis_index). Bug variant: the bias taken
# back once too often.
D22 = 16
def bias_back(bug):
    def f(x, w, b):
        y = psum(x @ w + b, "tp")
        if bug == "taken-back-4": return y - 4 * b
        return y - 3 * b
    return f
variants("s.bias_back_minus3", "tp4", {"tp": 4}, bias_back, (P(None, "tp"), P("tp"), P()), P(), lambda x, w, b: x @ w + b,
         (R(8, D22), R(D22, 8), R(8)), [("taken-back-4", ["wrong-reduction"])])
def bias_back_psum(bug):
    def f(x, w, b):
        return psum(x @ w + b, "tp") - psum(b, "tp") + b
    return f
variants("s.bias_back_psum", "tp4", {"tp": 4}, bias_back_psum, (P(None, "tp"), P("tp"), P()), P(), lambda x, w, b: x @ w + b,
         (R(8, D22), R(D22, 8), R(8)), [])
def bias_back_count(bug):
    def f(x, w, b):
        n = psum(1, "tp")
        return jnp.tanh(psum(x @ w + b, "tp") - (n - 1) * b)
    return f
variants("s.bias_back_count", "tp4", {"tp": 4}, bias_back_count, (P(None, "tp"), P("tp"), P()), P(), lambda x, w, b: jnp.tanh(x @ w + b),
         (R(8, D22), R(D22, 8), R(8)), [])
def bias_dev0(bug):
    def f(x, w, b):
        return jnp.tanh(psum(x @ w + jnp.where(idx("tp") == 0, b, 0.0), "tp"))
    return f
variants("s.bias_on_device0", "tp4", {"tp": 4}, bias_dev0, (P(None, "tp"), P("tp"), P()), P(), lambda x, w, b: jnp.tanh(x @ w + b),
         (R(8, D22), R(D22, 8), R(8)), [])
