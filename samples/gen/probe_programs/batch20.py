# twentieth batch: shard_map training steps as the current JAX writes them,
# with check_vma=True (its default): autodiff inserts the psum of gradients
# of device-invariant parameters itself (the transpose of the implicit
# pvary), so a data-parallel step takes the gradient of the pmean'd loss; a
# Megatron MLP step, a vocab-parallel cross-entropy step and an FSDP step
# with all_gather'd parameters; a pmean of gradients autodiff already made
# invariant (a no-op). Bug variants: the loss psum'd instead of pmean'd, a
# psum of a sharded weight's gradient. (Leaving the output's psum out is a
# type error under check_vma: JAX refuses to export it.)
D20 = 16

# 1. data-parallel SGD: gradient of the pmean'd loss (and the same step with a
#    pmean of the gradients, which autodiff already made device-invariant)
def vdp(bug, pmean_again=False):
    def f(w, x, y):
        def loss(w):
            l = jnp.mean((jnp.tanh(x @ w) - y) ** 2)
            return (psum if bug == "psum-loss" else pmean)(l, "dp")
        l, g = jax.value_and_grad(loss)(w)
        if pmean_again: g = pmean(g, "dp")   # a no-op: g is already the same on every device
        return l, w - 0.1 * g
    return f
def vdp_base(w, x, y):
    l, g = jax.value_and_grad(lambda w: jnp.mean((jnp.tanh(x @ w) - y) ** 2))(w)
    return l, w - 0.1 * g
variants("s.vma_dp_sgd", "dp4", {"dp": 4}, vdp, (P(), P("dp"), P("dp")), (P(), P()), vdp_base,
         (R(D20, 8, scale=0.3), R(16, D20), R(16, 8)), [("psum-loss", ["wrong-reduction"])], vma=True)
variants("s.vma_dp_sgd_pmean_grads", "dp4", {"dp": 4}, lambda bug: vdp(bug, True), (P(), P("dp"), P("dp")), (P(), P()),
         vdp_base, (R(D20, 8, scale=0.3), R(16, D20), R(16, 8)), [], vma=True)

# 2. Megatron MLP step: column- then row-parallel, psum of the output
def vmlp(bug):
    def f(w1, w2, x, y):
        def loss(w1, w2):
            h = jax.nn.gelu(x @ w1)
            o = h @ w2
            o = psum(o, "tp")
            return jnp.mean((o - y) ** 2)
        l, (g1, g2) = jax.value_and_grad(loss, (0, 1))(w1, w2)
        if bug == "psum-shard-grad": g2 = psum(g2, "tp")   # sums the shards' gradients
        return l, w1 - 0.1 * g1, w2 - 0.1 * g2
    return f
def vmlp_base(w1, w2, x, y):
    def loss(w1, w2): return jnp.mean((jax.nn.gelu(x @ w1) @ w2 - y) ** 2)
    l, (g1, g2) = jax.value_and_grad(loss, (0, 1))(w1, w2)
    return l, w1 - 0.1 * g1, w2 - 0.1 * g2
variants("s.vma_megatron_step", "tp4", {"tp": 4}, vmlp, (P(None, "tp"), P("tp"), P(), P()), (P(), P(None, "tp"), P("tp")),
         vmlp_base, (R(D20, 32, scale=0.3), R(32, D20, scale=0.3), R(8, D20), R(8, D20)), [("psum-shard-grad", ["wrong-collective-group", "wrong-reduction"])],
         vma=True)

# 3. vocab-parallel cross-entropy step (batch17's loss, the stabiliser under
#    stop_gradient; autodiff's psums are right here, nothing to rescale)
def vce(bug):
    def f(h, w, y):
        l, g = jax.value_and_grad(vce_loss)(w, h, y)
        return l, w - 0.1 * g
    return f
variants("s.vma_vocab_ce_step", "tp4", {"tp": 4}, vce, (P(), P(None, "tp"), P()), (P(), P(None, "tp")), vce_base,
         (R(8, D20), R(D20, 32, scale=0.3), I(0, 32, 8)), [], vma=True)

# 4. FSDP step: parameters all_gather'd for the forward, gradients come back
#    reduce-scattered by autodiff (the transpose of all_gather)
def vfsdp(bug):
    def f(w, x, y):
        def loss(w):
            wf = lax.all_gather(w, "fsdp", axis=0, tiled=True)
            return pmean(jnp.mean((jnp.tanh(x @ wf) - y) ** 2), "fsdp")
        l, g = jax.value_and_grad(loss)(w)
        return l, w - 0.1 * g
    return f
variants("s.vma_fsdp_step", "fsdp4", {"fsdp": 4}, vfsdp, (P("fsdp"), P("fsdp"), P("fsdp")), (P(), P("fsdp")), vdp_base,
         (R(D20, 8, scale=0.3), R(16, D20), R(16, 8)), [], vma=True)
