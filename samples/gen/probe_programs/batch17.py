# seventeenth batch: correct programs that look wrong op by op — a softmax
# or logsumexp shifted by some other value every device shares (pmin, pmean
# of the local maxima: the shift cancels), a bias split over the devices
# before the psum, a one-hot pick of non-negative probabilities reduced with
# pmax, a mean through psum(1), collectives that undo each other (ppermute
# there and back, a full ring, psum_scatter then all_gather, all_to_all there
# and back), pmax/pmin of a value every device holds, a max through -pmin(-x),
# a relu of a masked embedding lookup before its psum, a broadcast from device
# 0 by a mask and psum, an online softmax over blocks. Bug variants beside
# them: a full bias on every device, a relu of a real partial sum, a shift
# applied twice, a gradient through psum not divided by the devices, a pick
# reduced with pmin, an online softmax not rescaled (or rescaled the wrong
# way, or its sum left unrescaled).
D17 = 16

# 1. softmax over a sharded vocab, shifted by pmin of the local maxima
def sm_pmin(bug):
    def f(x):
        m = pmin_(x.max(-1, keepdims=True), "tp")
        e = jnp.exp(x - m)
        return e / psum(e.sum(-1, keepdims=True), "tp")
    return f
pmin_ = lax.pmin
variants("s.softmax_pmin_shift", "tp4", {"tp": 4}, sm_pmin, (P(None, "tp"),), P(None, "tp"), lambda x: jax.nn.softmax(x, -1),
         (R(8, 32, scale=0.5),), [])

# 2. logsumexp shifted by the pmean of the local maxima
def lse_mean(bug):
    def f(x):
        m = pmean(x.max(-1, keepdims=True), "tp")
        return (m + jnp.log(psum(jnp.exp(x - m).sum(-1, keepdims=True), "tp")))[:, 0]
    return f
variants("s.logsumexp_pmean_shift", "tp4", {"tp": 4}, lse_mean, (P(None, "tp"),), P(), lambda x: jax.nn.logsumexp(x, -1),
         (R(8, 32, scale=0.5),), [])

# 3. row-parallel linear whose bias each device adds a quarter of before the psum
def bias_split(bug):
    def f(x, w, b):
        y = x @ w
        y = y + (b if bug == "full-bias" else b / 4)
        return psum(y, "tp")
    return f
variants("s.bias_split_psum", "tp4", {"tp": 4}, bias_split, (P(None, "tp"), P("tp"), P()), P(), lambda x, w, b: x @ w + b,
         (R(8, D17), R(D17, 8), R(8)), [("full-bias", ["wrong-reduction"])])

# 4. probabilities of the labels from a vocab-sharded softmax, picked by a
#    one-hot product and reduced with pmax (each row is non-zero on one
#    device, and a probability is never negative)
def pick_pmax(bug):
    def f(x, y):
        v = x.shape[1]
        e = jnp.exp(x - lax.pmax(x.max(-1, keepdims=True), "tp"))
        p = e / psum(e.sum(-1, keepdims=True), "tp")
        oh = jax.nn.one_hot(y - idx("tp") * v, v, dtype=p.dtype)
        return (lax.pmin if bug == "pmin" else lax.pmax)((p * oh).sum(-1), "tp")
    return f
def pick_base(x, y): return jnp.take_along_axis(jax.nn.softmax(x, -1), y[:, None], 1)[:, 0]
variants("s.label_prob_pmax", "tp4", {"tp": 4}, pick_pmax, (P(None, "tp"), P()), P(), pick_base,
         (R(8, 32), I(0, 32, 8)), [("pmin", ["wrong-reduction"])])

# 5. a mean over data-parallel devices written psum(x) / psum(1)
def mean_ones(bug):
    def f(x, w):
        g = (x @ w).sum(0)
        return psum(g, "dp") / psum(1, "dp") / x.shape[0]
    return f
variants("s.mean_by_psum_one", "dp4", {"dp": 4}, mean_ones, (P("dp"), P()), P(), lambda x, w: (x @ w).mean(0),
         (R(16, D17), R(D17, 8)), [])

# 6. ppermute forward then back: the identity
def pp_back(bug):
    def f(x):
        n = 4
        y = lax.ppermute(jnp.tanh(x), "sp", [(j, (j + 1) % n) for j in range(n)])
        back = -1 if bug != "shift-twice" else 1
        return lax.ppermute(y, "sp", [(j, (j + back) % n) for j in range(n)])
    return f
variants("s.ppermute_there_and_back", "sp4", {"sp": 4}, pp_back, (P("sp"),), P("sp"), jnp.tanh,
         (R(16, 4),), [("shift-twice", ["wrong-shard-dim"])])

# 7. a full ring of four ppermutes by one block: the identity
def ring4(bug):
    def f(x):
        n = 4
        for _ in range(n): x = lax.ppermute(x, "sp", [(j, (j + 1) % n) for j in range(n)])
        return x * 3
    return f
variants("s.ppermute_full_ring", "sp4", {"sp": 4}, ring4, (P("sp"),), P("sp"), lambda x: x * 3, (R(16, 4),), [])

# 8. psum_scatter then all_gather: a psum
def rs_ag(bug):
    def f(x, w):
        y = lax.psum_scatter(x @ w, "tp", scatter_dimension=0, tiled=True)
        return lax.all_gather(jnp.sin(y), "tp", axis=0, tiled=True)
    return f
variants("s.scatter_gather_is_psum", "tp4", {"tp": 4}, rs_ag, (P(None, "tp"), P("tp")), P(), lambda x, w: jnp.sin(x @ w),
         (R(8, D17), R(D17, 8)), [])

# 9. all_to_all there and back
def a2a_back(bug):
    def f(x):
        y = lax.all_to_all(x, "sp", split_axis=1, concat_axis=0, tiled=True)
        y = jnp.exp(y * 0.1)
        return lax.all_to_all(y, "sp", split_axis=0, concat_axis=1, tiled=True)
    return f
variants("s.all_to_all_there_and_back", "sp4", {"sp": 4}, a2a_back, (P("sp"),), P("sp"), lambda x: jnp.exp(x * 0.1),
         (R(8, 8),), [])

# 10. pmax and pmin of a value every device already holds
def pmax_dup(bug):
    def f(x, w):
        h = psum(x @ w, "tp")
        return lax.pmax(h, "tp") - lax.pmin(jnp.tanh(h), "tp")
    return f
variants("s.pmax_of_complete", "tp4", {"tp": 4}, pmax_dup, (P(None, "tp"), P("tp")), P(), lambda x, w: x @ w - jnp.tanh(x @ w),
         (R(8, D17), R(D17, 8)), [])

# 11. the max over a sharded dim written -pmin(-max)
def negmin(bug):
    def f(x):
        return -lax.pmin(-x.max(-1), "tp")
    return f
variants("s.max_by_neg_pmin", "tp4", {"tp": 4}, negmin, (P(None, "tp"),), P(), lambda x: x.max(-1), (R(8, 32),), [])

# 12. vocab-parallel embedding lookup, relu'd before its psum (the rows of
#     other devices are zeros, and relu(0) = 0)
def emb_relu(bug):
    def f(t, ids, w):
        v = t.shape[0]
        loc = ids - idx("tp") * v
        ok = (loc >= 0) & (loc < v)
        e = jnp.where(ok[:, None], t[jnp.clip(loc, 0, v - 1)], 0.0)
        if bug == "relu-of-sum": e = e + 0.1
        return psum(jax.nn.relu(e), "tp") @ w
    return f
def emb_relu_base(t, ids, w): return jax.nn.relu(t[ids]) @ w
variants("s.embed_relu_before_psum", "tp4", {"tp": 4}, emb_relu, (P("tp"), P(), P()), P(), emb_relu_base,
         (R(32, 8), I(0, 32, 12), R(8, 4)), [("relu-of-sum", ["missing-all-reduce"])])

# 13. device 0's copy sent to all by a mask and a psum (a value every device holds)
def bcast0(bug):
    def f(x, w):
        h = jnp.tanh(x @ w)
        return psum(jnp.where(idx("dp") == 0, h, jnp.zeros_like(h)), "dp")
    return f
variants("s.broadcast_from_device0", "dp4", {"dp": 4}, bcast0, (P(), P()), P(), lambda x, w: jnp.tanh(x @ w),
         (R(8, D17), R(D17, 8)), [])

# 14. online softmax over sequence blocks: local max and sum, rescaled to the
#     pmax before the psum (flash attention's combination across devices)
def online(bug):
    def f(s, v):
        m = s.max(-1, keepdims=True)
        l = jnp.exp(s - m).sum(-1, keepdims=True)
        o = jnp.exp(s - m) @ v
        gm = lax.pmax(m, "sp")
        c = jnp.exp(m - gm) if bug != "rescale-inverted" else jnp.exp(gm - m)
        if bug == "no-rescale": return psum(o, "sp") / psum(l, "sp")
        if bug == "sum-not-rescaled": return psum(o * c, "sp") / psum(l, "sp")
        return psum(o * c, "sp") / psum(l * c, "sp")
    return f
variants("s.online_softmax_blocks", "sp4", {"sp": 4}, online, (P(None, "sp"), P("sp")), P(),
         lambda s, v: jax.nn.softmax(s, -1) @ v, (R(8, 32), R(32, 4)),
         [("no-rescale", ["missing-all-reduce"]), ("rescale-inverted", ["missing-all-reduce"]),
          ("sum-not-rescaled", ["missing-all-reduce"])])

# 14b. the same combination with the rescaling applied to the probabilities
#      before the dot (and their sum), over [batch, heads, 1, keys] scores
#      as split-KV decoding has them (einsum with batch dims)
def online_probs(bug):
    def f(s, v):
        m = s.max(-1, keepdims=True)
        gm = lax.pmax(m, "sp")
        p = jnp.exp(s - m) * (jnp.exp(m - gm) if bug != "rescale-inverted" else jnp.exp(gm - m))
        o = jnp.einsum("bhqk,bhkd->bhqd", p, v)
        return psum(o, "sp") / psum(p.sum(-1, keepdims=True), "sp")
    return f
variants("s.online_softmax_probs_decode", "sp4", {"sp": 4}, online_probs, (P(None, None, None, "sp"), P(None, None, "sp")),
         P(), lambda s, v: jnp.einsum("bhqk,bhkd->bhqd", jax.nn.softmax(s, -1), v), (R(2, 3, 1, 32), R(2, 3, 32, 4)),
         [("rescale-inverted", ["missing-all-reduce"])])

# 15. variance over a sharded feature dim, E[x^2] - E[x]^2 with two psums
def var2(bug):
    def f(x):
        n = x.shape[-1] * 4
        mu = psum(x.sum(-1), "tp") / n
        return psum((x * x).sum(-1), "tp") / n - mu * mu
    return f
variants("s.variance_two_psums", "tp4", {"tp": 4}, var2, (P(None, "tp"),), P(), lambda x: x.var(-1), (R(8, 32),), [])

# 16. cross-entropy training step over a vocab-sharded head, the stabiliser
#     under stop_gradient (Megatron's vocab-parallel loss); bug: the gradient
#     psum's transpose made four times too large, not divided back
def vce_loss(w, h, y):   # one device's vocab block of w (batch20 uses it too)
    z = h @ w
    v = z.shape[1]
    m = lax.pmax(lax.stop_gradient(z.max(-1, keepdims=True)), "tp")
    lse = jnp.log(psum(jnp.exp(z - m).sum(-1), "tp")) + m[:, 0]
    oh = jax.nn.one_hot(y - idx("tp") * v, v, dtype=z.dtype)
    return (lse - psum((z * oh).sum(-1), "tp")).mean()
def vce_step(bug):
    def f(h, w, y):
        l, g = jax.value_and_grad(vce_loss)(w, h, y)
        # without check_vma the transpose of psum is a psum: every gradient
        # comes out summed over the four devices' equal cotangents
        return l, w - 0.1 * (g if bug == "grad-not-rescaled" else g / 4)
    return f
def vce_base(h, w, y):
    def loss(w):
        z = h @ w
        return (jax.nn.logsumexp(z, -1) - jnp.take_along_axis(z, y[:, None], 1)[:, 0]).mean()
    l, g = jax.value_and_grad(loss)(w)
    return l, w - 0.1 * g
variants("s.vocab_ce_stopgrad_step", "tp4", {"tp": 4}, vce_step, (P(), P(None, "tp"), P()), (P(), P(None, "tp")), vce_base,
         (R(8, D17), R(D17, 32, scale=0.3), I(0, 32, 8)), [("grad-not-rescaled", ["wrong-reduction"])])

# 17. GSPMD: logsumexp and a softmax over a sharded vocab, as jax.nn writes them
gspmd("g.lse_softmax_vocab_tp4", {"tp": 4}, (P(None, "tp"),), (P(), P(None, "tp")),
      lambda x: (jax.nn.logsumexp(x, -1), jax.nn.softmax(x * 2, -1)), (R(8, 32),))
