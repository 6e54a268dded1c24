"""samples/fresh38: a 38th batch of programs as a user writes them, on the
theme of stateful training loops and loop-carried state under sharding in
JAX / optax (several optimizer steps inside one jit, accumulators, running
statistics, counters and schedules carried by lax.fori_loop / lax.scan /
lax.while_loop), none of them an idiom of samples/fresh .. fresh37, probe,
train or wild.
shard_map families:
 1. five optax.adamw steps of a 2-layer MLP in one lax.fori_loop, the
    step's batch picked from a stack of per-step batches by the loop index
    (batch over dp8); gradients and loss pmean'd; an EMA of the loss
    (initialised with jnp.zeros) carried and returned with the parameters.
    Bugs: the EMA fed the local loss (never reduced), gradients not
    reduced, the EMA initialised with jnp.ones. (A first draft's bug
    "gradients psum'd instead of pmean'd" changes Adam's update only
    through eps, 7e-6 at the end: replaced.)
 2. a linear warmup + cosine learning rate computed from a carried int32
    count of samples seen, SGD with hand-written momentum buffers
    (jnp.zeros_like the local shards), lax.scan over per-step batches; a
    column-parallel linear layer (outputs and bias over tp4), batch over
    dp2; the loss normalised by the global element count and psum'd over
    (dp, tp). Bugs: the counter advanced by the local batch (the schedule
    runs at half speed), the weight gradient psum'd over tp as well, the
    counter initialised with axis_index("tp") (offset on some shards).
 3. early stopping in a lax.while_loop: full-batch optax.sgd steps on a
    least-squares problem (batch over dp4) until 40 steps or 3 steps in a
    row without improving the best (pmean'd, global) loss by TOL3; best
    starts at jnp.full((), inf); the trip count and a count of samples
    seen returned. The loop's condition only reads replicated values in
    every variant (a device-varying trip count is not a shard_map
    program). Bugs: samples counted with the local batch, the loss psum'd
    (stops at another step), best initialised with zeros (stops after 3).
 4. Welford / Chan running mean and variance of features over steps
    (observation normalisation), lax.scan over per-step batches, batch
    over dp4: each step's count psum'd, mean pmean'd (equal shards), M2 as
    psum of local M2 + n_local (mean_local - mean)^2, merged into the
    carried (n, mean, M2); the running mean after each step, the final
    mean and unbiased variance. Bugs: the merge with the local count, the
    M2 without the between-device term.
 5. dynamic loss scaling: a lax.fori_loop of 8 SGD steps of an MLP, the
    loss multiplied by a carried scale starting at 2**127 so the first
    steps overflow (inputs drawn large), the loss normalised by the global
    batch so the per-example cotangents equal the baseline's, gradients
    psum'd over dp8 and unscaled; a step is applied only if all reduced
    gradients are finite, else skipped with the scale halved; two good
    steps in a row double it. Returns parameters, scale, good-step
    counter and skip count. Bugs: finiteness decided on the local
    (unreduced) gradients (known_miss: only inputs that overflow show
    it), the local mean loss psum'd (gradients 8x, so every step
    overflows). The correct pair is correct up to the order of the
    gradient sums: at a scale where a sum lands within rounding of the
    f32 maximum the baseline and the distributed program can decide
    differently (a first draft with a sum loss on unit-scale inputs did,
    for one seed in six); the generator's inputs and scales stay clear.
 6. Polyak (EMA) averaging of FSDP-sharded parameters: an MLP whose
    matrices are sharded over fsdp4 on their first dim and all_gather'd
    in the forward pass, batch over (data2, fsdp4), the loss pmean'd
    inside the differentiated function (check_vma=True: jax.grad
    reduce-scatters through the gathers); optax.sgd with momentum on the
    shards in a lax.scan of 4 steps; optax.incremental_update into an
    average starting at zeros_like, debiased by 1 - 0.8**t from a carried
    step counter. Bugs: the average initialised with ones_like, the loss
    pmean'd over fsdp only (gradients summed over data).
 7. gradient accumulation nested in a multi-step loop on a tensor-parallel
    MLP (w1 columns and b1 over tp4, w2 rows over tp4, output psum'd),
    batch over dp2, check_vma=True: an outer lax.fori_loop of 3
    optax.sgd (momentum, Nesterov) steps, each a lax.scan over 2 micro-batches summing
    gradients into jnp.zeros_like accumulators of the local shapes,
    divided by the micro-batch count. Bugs: accumulators initialised with
    ones_like, the tp-sharded gradients pmean'd over tp, no division by
    the micro-batch count. (A first draft used optax.adam, under which
    the last bug is invisible: Adam is invariant to a gradient's scale.)
 8. BatchNorm with running statistics carried across training steps
    (lax.scan, optax.rmsprop, check_vma=True): batch mean and variance
    over the global batch (pmean'd, batch over dp4, shards drawn with
    different offsets), running mean from zeros, running variance from
    ones taking the unbiased variance (global n / (n - 1)); the
    statistics leave the differentiated loss as aux. Bugs: the running
    variance fed each device's local variance (pmean'd only when
    returned), the unbiased correction with the local n.
 9. annealed gradient noise: the noise of step t drawn from
    jax.random.fold_in(key, t) at the full weight's shape, its standard
    deviation sqrt(eta / (1 + t)**0.55) from a carried step counter; the
    weight's output columns over tp4, each device slicing its columns of
    the full noise at axis_index * width; batch over dp2; SGD, 4 steps
    of lax.scan. Bugs: the slice at offset 0, a key folded with the tp
    index (independent noise per shard).
10. optax.contrib.reduce_on_plateau chained after optax.adam, 8 steps in
    a lax.fori_loop, the step's loss passed as value=; batch over dp8;
    gradients and loss pmean'd; the losses written into a jnp.zeros
    buffer by .at[i].set. Bugs: the plateau fed the local loss, the local
    loss logged into the buffer. (A first draft's "gradients psum'd" is
    invisible under Adam: replaced.)
11. a data cursor carried by the loop: the dataset passed replicated,
    each device reading its rows at cursor + axis_index * local_batch by
    dynamic_slice; logistic regression with optax.lion, 5 steps of
    lax.scan with no xs; the cursor advanced by the global batch and
    wrapped; int32 counts of correct predictions (psum'd) and of examples
    seen give a running accuracy. Bugs: the cursor advanced by the local
    batch, no shard offset (every device reads the same rows).
GSPMD pairs (jax.jit with in/out shardings): 12. the adamw fori_loop of 1.
(per-step batches over dp8); 13. the warmup-cosine scan of 2. (weight
columns over tp4, batch over dp2); 14. the early-stopping while_loop of 3.
(batch over dp4); 15. the Polyak-averaged training of 6. (matrices over
fsdp4, batch over (data2, fsdp4)); 16. the nested accumulation of 7.
(tensor-parallel parameter shardings, batch over dp2).
Numerics: every correct pair agrees with its baseline at rounding level
(f32); every bug variant differs clearly (see "numerics"). The loss-scale
family's inputs are drawn large (x * 10, y * 30) so that the first steps
overflow at scale 2**127; the learning rate is small (0.02) so that the
rounding of the gradient sums is not amplified.
Exported with scalify_jax.export_pair; every pair is also run by JAX on
seeded inputs and its manifest entry records the largest difference from
the single-device run ("numerics").
Run from the repository root: bash samples/gen/run_fresh38.sh [SUBSTR...]
(only the pairs whose name contains a SUBSTR; the others keep their entries).
"""
import sys
import numpy as np
import jax, jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec as P
import optax
sys.path.insert(0, "samples/gen")  # run from the repository root (run_fresh38.sh)
from fresh_lib import Corpus, seeded, state_specs  # noqa: E402,F401

SCRIPT = "samples/gen/fresh38.py"
C = Corpus("samples/fresh38", SCRIPT, "samples/gen/run_fresh38.sh", sys.argv[1:])
rng, R, I = seeded(3838)
psum, pmax, pmin, pmean, idx = lax.psum, lax.pmax, lax.pmin, lax.pmean, lax.axis_index
f32 = jnp.float32


def mlp(p, x):
    return jnp.tanh(x @ p["w1"] + p["b1"]) @ p["w2"] + p["b2"]


def mlp_params(d, h, o, s=0.4):
    return {"w1": R(d, h, scale=s), "b1": R(h, scale=0.1), "w2": R(h, o, scale=s), "b2": R(o, scale=0.1)}


# ---------------------------------------------------------------------------
# 1. five optax.adamw steps of a small MLP in one lax.fori_loop, the step's
#    batch picked from a stack of per-step batches by the loop index, batch
#    over dp8; gradients and loss pmean'd; an EMA of the loss carried
#    (initialised with jnp.zeros) and returned with the parameters.
S1, B1, D1, H1, O1 = 5, 16, 8, 16, 4
OPT1 = optax.adamw(3e-2, b1=0.8, weight_decay=1e-2)


def train1(p, xs, ys):
    def loss(p, x, y):
        return jnp.mean(jnp.square(mlp(p, x) - y))

    def step(i, c):
        p, s, ema = c
        l, g = jax.value_and_grad(loss)(p, xs[i], ys[i])
        u, s = OPT1.update(g, s, p)
        return optax.apply_updates(p, u), s, 0.9 * ema + 0.1 * l
    p, s, ema = lax.fori_loop(0, S1, step, (p, OPT1.init(p), jnp.zeros(())))
    return p, ema


def train1_dp(bug):
    def f(p, xs, ys):
        def loss(p, x, y):
            return jnp.mean(jnp.square(mlp(p, x) - y))

        def step(i, c):
            p, s, ema = c
            l, g = jax.value_and_grad(loss)(p, xs[i], ys[i])
            if bug != "grads-not-reduced":
                g = pmean(g, "dp")
            if bug != "ema-from-local-loss":
                l = pmean(l, "dp")
            u, s = OPT1.update(g, s, p)
            return optax.apply_updates(p, u), s, 0.9 * ema + 0.1 * l
        ema0 = jnp.ones(()) if bug == "ema-init-ones" else jnp.zeros(())
        p, s, ema = lax.fori_loop(0, S1, step, (p, OPT1.init(p), ema0))
        return p, ema
    return f


P1 = mlp_params(D1, H1, O1)
A1 = (P1, R(S1, B1, D1), R(S1, B1, O1))
C.smap("s.fori_adamw_steps_loss_ema.dp8", {"dp": 8}, train1_dp, (P(), P(None, "dp"), P(None, "dp")), (P(), P()),
       train1, A1,
       bugs=[("ema-from-local-loss", ["missing-collective"]), ("grads-not-reduced", ["missing-collective"]),
             ("ema-init-ones", ["wrong-init"])])

# ---------------------------------------------------------------------------
# 2. linear warmup + cosine learning rate computed from a carried count of
#    samples seen (int32), SGD with a hand-written momentum buffer
#    (jnp.zeros_like the local shard), lax.scan over per-step batches; a
#    column-parallel linear layer (outputs over tp), batch over dp; the loss
#    normalised by the global element count, its sum psum'd.
S2, B2, D2, O2 = 6, 8, 8, 16
WARM2, TOTAL2, PEAK2, END2 = 16.0, 48.0, 0.2, 0.02


def sched2(seen):
    seen = seen.astype(f32)
    prog = jnp.clip((seen - WARM2) / (TOTAL2 - WARM2), 0.0, 1.0)
    cos = END2 + 0.5 * (PEAK2 - END2) * (1.0 + jnp.cos(jnp.pi * prog))
    return jnp.where(seen < WARM2, PEAK2 * seen / WARM2, cos)


def train2(w, b, xs, ys):
    def step(c, xy):
        w, b, mw, mb, seen = c
        x, y = xy

        def loss(w, b):
            return jnp.mean(jnp.square(x @ w + b - y))
        l, (gw, gb) = jax.value_and_grad(loss, (0, 1))(w, b)
        seen = seen + x.shape[0]
        lr = sched2(seen)
        mw, mb = 0.9 * mw + gw, 0.9 * mb + gb
        return (w - lr * mw, b - lr * mb, mw, mb, seen), (l, lr)
    init = (w, b, jnp.zeros_like(w), jnp.zeros_like(b), jnp.zeros((), jnp.int32))
    (w, b, _, _, seen), (ls, lrs) = lax.scan(step, init, (xs, ys))
    return w, b, ls, lrs, seen


def train2_tp(bug):
    def f(w, b, xs, ys):
        n_el = xs.shape[1] * 2 * w.shape[1] * 4

        def step(c, xy):
            w, b, mw, mb, seen = c
            x, y = xy

            def loss(w, b):
                return jnp.sum(jnp.square(x @ w + b - y)) / n_el
            l, (gw, gb) = jax.value_and_grad(loss, (0, 1))(w, b)
            gw = psum(gw, ("dp", "tp")) if bug == "weight-grad-psum-over-tp" else psum(gw, "dp")
            gb = psum(gb, "dp")
            l = psum(l, ("dp", "tp"))
            seen = seen + (x.shape[0] if bug == "seen-local-batch" else psum(x.shape[0], "dp"))
            lr = sched2(seen)
            mw, mb = 0.9 * mw + gw, 0.9 * mb + gb
            return (w - lr * mw, b - lr * mb, mw, mb, seen), (l, lr)
        seen0 = idx("tp") if bug == "counter-init-axis-index" else jnp.zeros((), jnp.int32)
        init = (w, b, jnp.zeros_like(w), jnp.zeros_like(b), seen0)
        (w, b, _, _, seen), (ls, lrs) = lax.scan(step, init, (xs, ys))
        return w, b, ls, lrs, seen
    return f


C.smap("s.scan_warmup_cosine_samples_seen.dp2xtp4", {"dp": 2, "tp": 4}, train2_tp,
       (P(None, "tp"), P("tp"), P(None, "dp"), P(None, "dp", "tp")), (P(None, "tp"), P("tp"), P(), P(), P()),
       train2, (R(D2, O2, scale=0.3), R(O2, scale=0.1), R(S2, B2, D2), R(S2, B2, O2)),
       bugs=[("seen-local-batch", ["wrong-scale"]), ("weight-grad-psum-over-tp", ["wrong-axis"]),
             ("counter-init-axis-index", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 3. early stopping in a lax.while_loop: full-batch optax.sgd steps on a
#    least-squares problem, batch over dp4, until 40 steps or 3 steps in a
#    row without an improvement of the (pmean'd, global) loss by TOL3 over
#    the best so far; the best loss starts at jnp.full((), inf); a count of
#    samples seen carried and returned with the trip count.
B3, D3, O3, TOL3 = 16, 6, 3, 2e-3
OPT3 = optax.sgd(0.08)


def train3(w, x, y):
    def loss(w):
        return jnp.mean(jnp.square(x @ w - y))

    def cond(c):
        return (c[0] < 40) & (c[4] < 3)

    def body(c):
        i, w, s, best, bad, seen = c
        l, g = jax.value_and_grad(loss)(w)
        u, s = OPT3.update(g, s)
        better = l < best - TOL3
        return (i + 1, optax.apply_updates(w, u), s, jnp.where(better, l, best), jnp.where(better, 0, bad + 1),
                seen + x.shape[0])
    init = (jnp.int32(0), w, OPT3.init(w), jnp.full((), jnp.inf), jnp.int32(0), jnp.int32(0))
    i, w, _, best, bad, seen = lax.while_loop(cond, body, init)
    return w, best, i, seen


def train3_dp(bug):
    def f(w, x, y):
        def loss(w):
            return jnp.mean(jnp.square(x @ w - y))

        def cond(c):
            return (c[0] < 40) & (c[4] < 3)

        def body(c):
            i, w, s, best, bad, seen = c
            l, g = jax.value_and_grad(loss)(w)
            g = pmean(g, "dp")
            l = psum(l, "dp") if bug == "loss-psum" else pmean(l, "dp")
            u, s = OPT3.update(g, s)
            better = l < best - TOL3
            nb = x.shape[0] if bug == "seen-local-count" else x.shape[0] * lax.axis_size("dp")
            return (i + 1, optax.apply_updates(w, u), s, jnp.where(better, l, best), jnp.where(better, 0, bad + 1),
                    seen + nb)
        best0 = jnp.zeros(()) if bug == "best-init-zeros" else jnp.full((), jnp.inf)
        init = (jnp.int32(0), w, OPT3.init(w), best0, jnp.int32(0), jnp.int32(0))
        i, w, _, best, bad, seen = lax.while_loop(cond, body, init)
        return w, best, i, seen
    return f


W3 = R(D3, O3)
X3 = R(B3, D3)
Y3 = X3 @ R(D3, O3) + R(B3, O3, scale=0.3)
C.smap("s.while_early_stop_patience_global_loss.dp4", {"dp": 4}, train3_dp, (P(), P("dp"), P("dp")),
       (P(), P(), P(), P()), train3, (W3, X3, Y3),
       bugs=[("seen-local-count", ["wrong-scale"]), ("loss-psum", ["wrong-collective-op"]),
             ("best-init-zeros", ["wrong-init"])])

# ---------------------------------------------------------------------------
# 4. Welford / Chan running mean and variance of features over steps
#    (observation normalisation), lax.scan over per-step batches with the
#    batch over dp4: each step's batch statistics from the shards (count
#    psum'd, mean pmean'd over equal shards, M2 as the psum of the local M2
#    plus n_local (mean_local - mean)^2), merged into the carried (n, mean,
#    M2); the running mean after every step, the final mean and unbiased
#    variance returned.
S4, B4, F4 = 5, 8, 6


def welford(xs):
    def step(c, x):
        n, mean, m2 = c
        nb = jnp.asarray(x.shape[0], f32)
        mb = jnp.mean(x, 0)
        m2b = jnp.sum(jnp.square(x - mb), 0)
        tot = n + nb
        d = mb - mean
        return (tot, mean + d * nb / tot, m2 + m2b + jnp.square(d) * n * nb / tot), mean + d * nb / tot
    (n, mean, m2), traj = lax.scan(step, (jnp.zeros(()), jnp.zeros(xs.shape[-1]), jnp.zeros(xs.shape[-1])), xs)
    return mean, m2 / (n - 1), traj


def welford_dp(bug):
    def f(xs):
        def step(c, x):
            n, mean, m2 = c
            nl = jnp.asarray(x.shape[0], f32)
            ml = jnp.mean(x, 0)
            m2l = jnp.sum(jnp.square(x - ml), 0)
            nb = nl if bug == "merge-local-count" else psum(nl, "dp")
            mb = pmean(ml, "dp")
            if bug == "m2-no-between-term":
                m2b = psum(m2l, "dp")
            else:
                m2b = psum(m2l + nl * jnp.square(ml - mb), "dp")
            tot = n + nb
            d = mb - mean
            return (tot, mean + d * nb / tot, m2 + m2b + jnp.square(d) * n * nb / tot), mean + d * nb / tot
        (n, mean, m2), traj = lax.scan(step, (jnp.zeros(()), jnp.zeros(xs.shape[-1]), jnp.zeros(xs.shape[-1])), xs)
        return mean, m2 / (n - 1), traj
    return f


# per-step shifts so the running mean moves and the shards differ
XS4 = R(S4, B4, F4) + np.arange(S4, dtype=np.float32)[:, None, None] * 0.5 + R(1, B4, 1, scale=2.0)
C.smap("s.welford_chan_merge_over_steps.dp4", {"dp": 4}, welford_dp, (P(None, "dp"),), (P(), P(), P()),
       welford, (XS4,),
       bugs=[("merge-local-count", ["wrong-scale"]), ("m2-no-between-term", ["missing-term"])])

# ---------------------------------------------------------------------------
# 5. dynamic loss scaling: a lax.fori_loop of 6 SGD steps of an MLP, the
#    loss multiplied by a carried scale that starts at 2**126 so the first
#    steps overflow; the loss normalised by the global batch so the
#    per-example cotangents equal the baseline's, gradients psum'd over dp8
#    and unscaled; a step is applied only if every gradient is finite
#    (decided on the reduced gradients), otherwise skipped with the scale
#    halved; after 2 good steps in a row the scale doubles. Returns the
#    parameters, the scale, the good-step counter and the skip count.
S5, B5, D5, H5, O5 = 8, 16, 8, 8, 2


def train5(p, x, y):
    def loss(p, scale):
        return scale * jnp.mean(jnp.square(mlp(p, x) - y))

    def step(i, c):
        p, scale, good, skipped = c
        g = jax.tree.map(lambda a: a / scale, jax.grad(loss)(p, scale))
        fin = jnp.all(jnp.stack([jnp.all(jnp.isfinite(a)) for a in jax.tree.leaves(g)]))
        p = jax.tree.map(lambda a, b: jnp.where(fin, a - 0.02 * b, a), p, g)
        good = jnp.where(fin, good + 1, 0)
        grow = good >= 2
        scale = jnp.where(fin, jnp.where(grow, scale * 2.0, scale), scale * 0.5)
        return p, scale, jnp.where(grow, 0, good), skipped + (~fin).astype(jnp.int32)
    return lax.fori_loop(0, S5, step, (p, jnp.float32(2.0 ** 127), jnp.int32(0), jnp.int32(0)))


def train5_dp(bug):
    def f(p, x, y):
        nglob = x.shape[0] * lax.axis_size("dp")

        def loss(p, scale):
            if bug == "local-mean-then-psum":
                return scale * jnp.mean(jnp.square(mlp(p, x) - y))
            return scale * jnp.sum(jnp.square(mlp(p, x) - y)) / (nglob * y.shape[1])

        def step(i, c):
            p, scale, good, skipped = c
            g = jax.grad(loss)(p, scale)
            gl = jax.tree.map(lambda a: a / scale, g)
            g = jax.tree.map(lambda a: psum(a, "dp") / scale, g)
            chk = gl if bug == "finite-from-local-grads" else g
            fin = jnp.all(jnp.stack([jnp.all(jnp.isfinite(a)) for a in jax.tree.leaves(chk)]))
            p = jax.tree.map(lambda a, b: jnp.where(fin, a - 0.02 * b, a), p, g)
            good = jnp.where(fin, good + 1, 0)
            grow = good >= 2
            scale = jnp.where(fin, jnp.where(grow, scale * 2.0, scale), scale * 0.5)
            return p, scale, jnp.where(grow, 0, good), skipped + (~fin).astype(jnp.int32)
        return lax.fori_loop(0, S5, step, (p, jnp.float32(2.0 ** 127), jnp.int32(0), jnp.int32(0)))
    return f


P5 = mlp_params(D5, H5, O5, s=1.0)
A5 = (P5, R(B5, D5, scale=10.0), R(B5, O5, scale=30.0))
C.smap("s.dynamic_loss_scale_global_finite.dp8", {"dp": 8}, train5_dp, (P(), P("dp"), P("dp")),
       (P(), P(), P(), P()), train5, A5,
       bugs=[("finite-from-local-grads", ["missing-collective"]), ("local-mean-then-psum", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 6. Polyak (EMA) averaging of FSDP-sharded parameters: a 2-layer MLP whose
#    matrices are sharded over fsdp4 on their first dim and all_gather'd in
#    the forward pass; batch over (data2, fsdp4); the loss pmean'd inside
#    the differentiated function (check_vma=True, so jax.grad
#    reduce-scatters through the gathers); optax.sgd with momentum on the
#    shards for 4 steps of a lax.scan; the average starts at zeros_like and
#    is debiased by 1 - 0.8**t (carried step counter) when returned.
S6, B6, D6, H6, O6 = 4, 16, 8, 16, 4
OPT6 = optax.sgd(0.1, momentum=0.9)


def fwd6(p, x):
    return jnp.tanh(x @ p["w1"]) @ p["w2"]


def train6(p, xs, ys):
    def loss(p, x, y):
        return jnp.mean(jnp.square(fwd6(p, x) - y))

    def step(c, xy):
        p, s, avg, t = c
        l, g = jax.value_and_grad(loss)(p, *xy)
        u, s = OPT6.update(g, s, p)
        p = optax.apply_updates(p, u)
        avg = optax.incremental_update(p, avg, 0.2)
        return (p, s, avg, t + 1), l
    init = (p, OPT6.init(p), jax.tree.map(jnp.zeros_like, p), jnp.int32(0))
    (p, s, avg, t), ls = lax.scan(step, init, (xs, ys))
    avg = jax.tree.map(lambda a: a / (1.0 - 0.8 ** t.astype(f32)), avg)
    return p, avg, ls


def train6_fsdp(bug):
    def f(p, xs, ys):
        def loss(p, x, y):
            full = {k: lax.all_gather(v, "fsdp", axis=0, tiled=True) for k, v in p.items()}
            l = jnp.mean(jnp.square(fwd6(full, x) - y))
            return pmean(l, "fsdp") if bug == "loss-pmean-fsdp-only" else pmean(l, ("data", "fsdp"))

        def step(c, xy):
            p, s, avg, t = c
            l, g = jax.value_and_grad(loss)(p, *xy)
            u, s = OPT6.update(g, s, p)
            p = optax.apply_updates(p, u)
            avg = optax.incremental_update(p, avg, 0.2)
            return (p, s, avg, t + 1), l
        avg0 = jax.tree.map(jnp.ones_like if bug == "avg-init-ones" else jnp.zeros_like, p)
        init = (p, OPT6.init(p), avg0, jnp.int32(0))
        (p, s, avg, t), ls = lax.scan(step, init, (xs, ys))
        avg = jax.tree.map(lambda a: a / (1.0 - 0.8 ** t.astype(f32)), avg)
        if bug == "loss-pmean-fsdp-only":
            ls = pmean(ls, "data")
        return p, avg, ls
    return f


SP6 = {"w1": P("fsdp"), "w2": P("fsdp")}
P6 = {"w1": R(D6, H6, scale=0.4), "w2": R(H6, O6, scale=0.4)}
C.smap("s.polyak_avg_fsdp_gathered_mlp.data2xfsdp4", {"data": 2, "fsdp": 4}, train6_fsdp,
       (SP6, P(None, ("data", "fsdp")), P(None, ("data", "fsdp"))), (SP6, SP6, P()), train6,
       (P6, R(S6, B6, D6), R(S6, B6, O6)),
       bugs=[("avg-init-ones", ["wrong-init"]), ("loss-pmean-fsdp-only", ["wrong-axis"])], check_vma=True)

# ---------------------------------------------------------------------------
# 7. gradient accumulation nested in a multi-step loop on a tensor-parallel
#    MLP (w1 columns and b1 over tp4, w2 rows over tp4, the output psum'd),
#    batch over dp2, check_vma=True: an outer lax.fori_loop of 3 optax.sgd (Nesterov)
#    steps, each a lax.scan over 2 micro-batches summing gradients into
#    accumulators initialised with jnp.zeros_like at the local shapes, then
#    divided by the micro-batch count.
S7, M7, B7, D7, H7, O7 = 3, 2, 4, 6, 16, 3
OPT7 = optax.sgd(0.05, momentum=0.9, nesterov=True)


def train7(p, xs, ys):
    def loss(p, x, y):
        return jnp.mean(jnp.square(mlp(p, x) - y))

    def step(i, c):
        p, s = c

        def micro(acc, xy):
            l, g = jax.value_and_grad(loss)(p, *xy)
            return jax.tree.map(jnp.add, acc, g), l
        acc, ls = lax.scan(micro, jax.tree.map(jnp.zeros_like, p), (xs[i], ys[i]))
        u, s = OPT7.update(jax.tree.map(lambda a: a / M7, acc), s, p)
        return optax.apply_updates(p, u), s
    p, s = lax.fori_loop(0, S7, step, (p, OPT7.init(p)))
    return p


def train7_tp(bug):
    def f(p, xs, ys):
        def loss(p, x, y):
            h = jnp.tanh(x @ p["w1"] + p["b1"])
            out = psum(h @ p["w2"], "tp") + p["b2"]
            return pmean(jnp.mean(jnp.square(out - y)), "dp")

        def step(i, c):
            p, s = c

            def micro(acc, xy):
                l, g = jax.value_and_grad(loss)(p, *xy)
                return jax.tree.map(jnp.add, acc, g), l
            acc0 = jax.tree.map(jnp.ones_like if bug == "accum-init-ones" else jnp.zeros_like, p)
            acc, ls = lax.scan(micro, acc0, (xs[i], ys[i]))
            if bug == "grads-pmean-tp":
                acc = {k: (pmean(v, "tp") if k in ("w1", "b1", "w2") else v) for k, v in acc.items()}
            div = 1 if bug == "no-microbatch-divide" else M7
            u, s = OPT7.update(jax.tree.map(lambda a: a / div, acc), s, p)
            return optax.apply_updates(p, u), s
        p, s = lax.fori_loop(0, S7, step, (p, OPT7.init(p)))
        return p
    return f


SP7 = {"w1": P(None, "tp"), "b1": P("tp"), "w2": P("tp"), "b2": P()}
C.smap("s.nested_accum_fori_adam_tp_mlp.dp2xtp4", {"dp": 2, "tp": 4}, train7_tp,
       (SP7, P(None, None, "dp"), P(None, None, "dp")), SP7, train7,
       (mlp_params(D7, H7, O7), R(S7, M7, B7, D7), R(S7, M7, B7, O7)),
       bugs=[("accum-init-ones", ["wrong-init"]), ("grads-pmean-tp", ["wrong-collective-op"]),
             ("no-microbatch-divide", ["wrong-scale"])], check_vma=True)

# ---------------------------------------------------------------------------
# 8. training with BatchNorm and its running statistics carried across
#    steps (lax.scan): the batch mean and variance over the global batch
#    (pmean of local moments, batch over dp4, check_vma=True); the running
#    mean starts at zeros, the running variance at ones and takes the
#    unbiased variance (global n / (n - 1)); optax.rmsprop on the
#    parameters; the statistics leave the differentiated function as aux.
S8, B8, D8, F8 = 4, 16, 6, 8
OPT8 = optax.rmsprop(1e-2)


def bn_fwd(p, x, mu, var):
    z = x @ p["w"]
    zn = (z - mu) * lax.rsqrt(var + 1e-5) * p["g"] + p["beta"]
    return jnp.maximum(zn, 0.0) @ p["v"]


def train8(p, xs, ys):
    def loss(p, x, y):
        z = x @ p["w"]
        mu = jnp.mean(z, 0)
        var = jnp.mean(jnp.square(z - mu), 0)
        return jnp.mean(jnp.square(bn_fwd(p, x, mu, var) - y)), (mu, var)

    def step(c, xy):
        p, s, rm, rv = c
        (l, (mu, var)), g = jax.value_and_grad(loss, has_aux=True)(p, *xy)
        n = xy[0].shape[0]
        rm, rv = 0.9 * rm + 0.1 * mu, 0.9 * rv + 0.1 * var * n / (n - 1)
        u, s = OPT8.update(g, s, p)
        return (optax.apply_updates(p, u), s, rm, rv), l
    init = (p, OPT8.init(p), jnp.zeros(F8), jnp.ones(F8))
    (p, s, rm, rv), ls = lax.scan(step, init, (xs, ys))
    return p, rm, rv, ls


def train8_dp(bug):
    def f(p, xs, ys):
        def loss(p, x, y):
            z = x @ p["w"]
            mu = pmean(jnp.mean(z, 0), "dp")
            var = pmean(jnp.mean(jnp.square(z - mu), 0), "dp")
            lvar = jnp.mean(jnp.square(z - jnp.mean(z, 0)), 0)
            l = pmean(jnp.mean(jnp.square(bn_fwd(p, x, mu, var) - y)), "dp")
            return l, (mu, lvar if bug == "running-var-local" else var)

        def step(c, xy):
            p, s, rm, rv = c
            (l, (mu, var)), g = jax.value_and_grad(loss, has_aux=True)(p, *xy)
            n = xy[0].shape[0] if bug == "unbiased-local-n" else xy[0].shape[0] * lax.axis_size("dp")
            rm, rv = 0.9 * rm + 0.1 * mu, 0.9 * rv + 0.1 * var * n / (n - 1)
            u, s = OPT8.update(g, s, p)
            return (optax.apply_updates(p, u), s, rm, rv), l
        rv0 = jnp.ones(F8)
        if bug == "running-var-local":
            rv0 = lax.pcast(rv0, "dp", to="varying")
        init = (p, OPT8.init(p), jnp.zeros(F8), rv0)
        (p, s, rm, rv), ls = lax.scan(step, init, (xs, ys))
        if bug == "running-var-local":
            rv = pmean(rv, "dp")
        return p, rm, rv, ls
    return f


P8 = {"w": R(D8, F8, scale=0.5), "g": 1.0 + R(F8, scale=0.1), "beta": R(F8, scale=0.1), "v": R(F8, 2, scale=0.4)}
XS8 = R(S8, B8, D8) + R(1, B8, 1, scale=1.5)  # shards with different offsets
C.smap("s.batchnorm_running_stats_train_scan.dp4", {"dp": 4}, train8_dp, (P(), P(None, "dp"), P(None, "dp")),
       (P(), P(), P(), P()), train8, (P8, XS8, R(S8, B8, 2)),
       bugs=[("running-var-local", ["missing-collective"]), ("unbiased-local-n", ["wrong-scale"])], check_vma=True)

# ---------------------------------------------------------------------------
# 9. annealed gradient noise (Neelakantan et al.): the noise of step t drawn
#    from jax.random.fold_in(key, t) at the full weight's shape, its
#    standard deviation sqrt(eta / (1 + t)**0.55) from the carried step
#    counter; the weight's output columns over tp4, so each device slices
#    its columns of the full noise at axis_index * width; batch over dp2;
#    SGD for 4 steps in a lax.scan.
S9, B9, D9, O9 = 4, 8, 6, 8
ETA9 = 0.05


def noise9(t, shape):
    k = jax.random.fold_in(jax.random.key(9), t)
    return jax.random.normal(k, shape) * jnp.sqrt(ETA9 / (1.0 + t.astype(f32)) ** 0.55)


def train9(w, xs, ys):
    def step(c, xy):
        w, t = c
        x, y = xy
        l, g = jax.value_and_grad(lambda w: jnp.mean(jnp.square(jnp.tanh(x @ w) - y)))(w)
        g = g + noise9(t, w.shape)
        return (w - 0.2 * g, t + 1), l
    (w, t), ls = lax.scan(step, (w, jnp.int32(0)), (xs, ys))
    return w, ls


def train9_tp(bug):
    def f(w, xs, ys):
        ol = w.shape[1]
        n_el = xs.shape[1] * 2 * ol * 4

        def step(c, xy):
            w, t = c
            x, y = xy
            l, g = jax.value_and_grad(lambda w: jnp.sum(jnp.square(jnp.tanh(x @ w) - y)) / n_el)(w)
            g = psum(g, "dp")
            l = psum(l, ("dp", "tp"))
            if bug == "noise-key-per-shard":
                k = jax.random.fold_in(jax.random.fold_in(jax.random.key(9), t), idx("tp"))
                nz = jax.random.normal(k, w.shape) * jnp.sqrt(ETA9 / (1.0 + t.astype(f32)) ** 0.55)
            else:
                full = noise9(t, (w.shape[0], ol * 4))
                off = 0 if bug == "noise-slice-offset-0" else idx("tp") * ol
                nz = lax.dynamic_slice_in_dim(full, off, ol, 1)
            return (w - 0.2 * (g + nz), t + 1), l
        (w, t), ls = lax.scan(step, (w, jnp.int32(0)), (xs, ys))
        return w, ls
    return f


C.smap("s.annealed_grad_noise_sliced_columns.dp2xtp4", {"dp": 2, "tp": 4}, train9_tp,
       (P(None, "tp"), P(None, "dp"), P(None, "dp", "tp")), (P(None, "tp"), P()), train9,
       (R(D9, O9, scale=0.4), R(S9, B9, D9), R(S9, B9, O9, scale=0.5)),
       bugs=[("noise-slice-offset-0", ["wrong-offset"]), ("noise-key-per-shard", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 10. optax.contrib.reduce_on_plateau chained after optax.adam: 8 steps in a
#     lax.fori_loop, the plateau state fed the loss of the step (value=);
#     batch over dp8, gradients and the loss pmean'd before the update.
S10, B10, D10, O10 = 8, 16, 6, 2
OPT10 = optax.chain(optax.adam(0.3),
                    optax.contrib.reduce_on_plateau(factor=0.5, patience=1, rtol=1e-3, atol=0.0, cooldown=0))


def train10(w, x, y):
    def loss(w):
        return jnp.mean(jnp.square(jnp.tanh(x @ w) - y))

    def step(i, c):
        w, s, ls = c
        l, g = jax.value_and_grad(loss)(w)
        u, s = OPT10.update(g, s, w, value=l)
        return optax.apply_updates(w, u), s, ls.at[i].set(l)
    w, s, ls = lax.fori_loop(0, S10, step, (w, OPT10.init(w), jnp.zeros(S10)))
    return w, s[1].scale, ls


def train10_dp(bug):
    def f(w, x, y):
        def loss(w):
            return jnp.mean(jnp.square(jnp.tanh(x @ w) - y))

        def step(i, c):
            w, s, ls = c
            l, g = jax.value_and_grad(loss)(w)
            g = pmean(g, "dp")
            lg = pmean(l, "dp")
            u, s = OPT10.update(g, s, w, value=l if bug == "plateau-on-local-loss" else lg)
            return optax.apply_updates(w, u), s, ls.at[i].set(l if bug == "logged-local-loss" else lg)
        w, s, ls = lax.fori_loop(0, S10, step, (w, OPT10.init(w), jnp.zeros(S10)))
        return w, s[1].scale, ls
    return f


X10 = R(B10, D10)
Y10 = np.tanh(X10 @ R(D10, O10)) * 0.8 + R(B10, O10, scale=0.3) + R(B10, 1, scale=1.0)
C.smap("s.reduce_on_plateau_fori_adam.dp8", {"dp": 8}, train10_dp, (P(), P("dp"), P("dp")), (P(), P(), P()),
       train10, (R(D10, O10, scale=0.5), X10, Y10),
       bugs=[("plateau-on-local-loss", ["missing-collective"]), ("logged-local-loss", ["missing-collective"])])

# ---------------------------------------------------------------------------
# 11. a data cursor carried by the training loop: the dataset is passed
#     replicated, each step reads the global batch at the cursor (each device
#     its rows at cursor + axis_index * local_batch with dynamic_slice),
#     logistic regression with optax.lion for 5 steps of lax.scan, the cursor
#     advanced by the global batch and wrapped; running counts of correct
#     predictions and of examples (int32, psum'd) give the running accuracy.
N11, S11, BL11, D11 = 48, 5, 3, 6
OPT11 = optax.lion(2e-2)


def train11(w, X, Y):
    bg = BL11 * 4

    def step(c, _):
        w, s, cur, correct, seen = c
        x = lax.dynamic_slice_in_dim(X, cur, bg, 0)
        y = lax.dynamic_slice_in_dim(Y, cur, bg, 0)
        l, g = jax.value_and_grad(lambda w: jnp.mean(optax.sigmoid_binary_cross_entropy(x @ w, y)))(w)
        u, s = OPT11.update(g, s, w)
        correct = correct + jnp.sum(((x @ w) > 0) == (y > 0.5)).astype(jnp.int32)
        seen = seen + bg
        return (optax.apply_updates(w, u), s, (cur + bg) % (N11 - bg), correct, seen), (l, correct / seen)
    init = (w, OPT11.init(w), jnp.int32(0), jnp.int32(0), jnp.int32(0))
    (w, s, cur, correct, seen), (ls, acc) = lax.scan(step, init, None, length=S11)
    return w, cur, ls, acc


def train11_dp(bug):
    def f(w, X, Y):
        bl = BL11
        bg = bl * lax.axis_size("dp")

        def step(c, _):
            w, s, cur, correct, seen = c
            start = cur if bug == "no-shard-offset" else cur + idx("dp") * bl
            x = lax.dynamic_slice_in_dim(X, start, bl, 0)
            y = lax.dynamic_slice_in_dim(Y, start, bl, 0)
            l, g = jax.value_and_grad(lambda w: jnp.mean(optax.sigmoid_binary_cross_entropy(x @ w, y)))(w)
            g, l = pmean(g, "dp"), pmean(l, "dp")
            u, s = OPT11.update(g, s, w)
            correct = correct + psum(jnp.sum(((x @ w) > 0) == (y > 0.5)).astype(jnp.int32), "dp")
            seen = seen + bg
            step_b = bl if bug == "cursor-advance-local" else bg
            return (optax.apply_updates(w, u), s, (cur + step_b) % (N11 - bg), correct, seen), (l, correct / seen)
        init = (w, OPT11.init(w), jnp.int32(0), jnp.int32(0), jnp.int32(0))
        (w, s, cur, correct, seen), (ls, acc) = lax.scan(step, init, None, length=S11)
        return w, cur, ls, acc
    return f


X11 = R(N11, D11)
Y11 = (X11 @ R(D11) + R(N11, scale=0.5) > 0).astype(np.float32)
C.smap("s.data_cursor_lion_running_accuracy.dp4", {"dp": 4}, train11_dp, (P(), P(), P()), (P(), P(), P(), P()),
       train11, (R(D11, scale=0.3), X11, Y11),
       bugs=[("cursor-advance-local", ["wrong-offset"]), ("no-shard-offset", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# GSPMD pairs (jax.jit with in/out shardings).
# 12. the adamw fori_loop of 1. with the per-step batches over dp8.
C.gspmd("g.fori_adamw_steps_loss_ema.dp8", {"dp": 8}, (P(), P(None, "dp"), P(None, "dp")), (P(), P()), train1, A1)

# 13. the warmup-cosine scan of 2. with the weight's columns over tp4 and
#     the batch over dp2.
C.gspmd("g.scan_warmup_cosine_samples_seen.dp2xtp4", {"dp": 2, "tp": 4},
        (P(None, "tp"), P("tp"), P(None, "dp"), P(None, "dp", "tp")), (P(None, "tp"), P("tp"), P(), P(), P()),
        train2, (R(D2, O2, scale=0.3), R(O2, scale=0.1), R(S2, B2, D2), R(S2, B2, O2)))

# 14. the early-stopping while_loop of 3. with the batch over dp4.
C.gspmd("g.while_early_stop_patience.dp4", {"dp": 4}, (P(), P("dp"), P("dp")), (P(), P(), P(), P()), train3,
        (W3, X3, Y3))

# 15. the Polyak-averaged training of 6. with the matrices over fsdp4 on
#     their first dim and the batch over (data2, fsdp4).
C.gspmd("g.polyak_avg_fsdp_mlp.data2xfsdp4", {"data": 2, "fsdp": 4},
        (SP6, P(None, ("data", "fsdp")), P(None, ("data", "fsdp"))), (SP6, SP6, P()), train6,
        (P6, R(S6, B6, D6), R(S6, B6, O6)))

# 16. the nested accumulation of 7. with its tensor-parallel parameter
#     shardings and the micro-batches' batch over dp2.
C.gspmd("g.nested_accum_fori_adam_tp_mlp.dp2xtp4", {"dp": 2, "tp": 4}, (SP7, P(None, None, "dp"), P(None, None, "dp")),
        SP7, train7, (mlp_params(D7, H7, O7), R(S7, M7, B7, D7), R(S7, M7, B7, O7)))

C.known_miss("s.dynamic_loss_scale_global_finite.dp8.bug.finite-from-local-grads",
             "the local and the global finite checks disagree only when the local gradients are finite and their "
             "psum overflows; the generator's inputs (x * 10, y * 30) reach that at one step, random inputs of the "
             "usual scale never overflow at 2**127, so every step is applied on both sides and the outputs agree")
C.finish()
