"""Hand-written per-device (shard_map) programs and their bug variants.

Each `make_*` returns a Program: the shard_map'ed function (same signature and
parameter order as the baseline: tokens, params), in/out PartitionSpecs, and the
mesh. `bug` selects one realistic mistake; every mistake is on a line tagged
`# BUG(<id>)` so the exporter can record its file:line.
"""
import math

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

import models as M


def axis_size(mesh, axes):
    if isinstance(axes, str):
        axes = (axes,)
    n = 1
    for a in axes:
        n *= mesh.shape[a]
    return n


def baseline_forward(cfg):
    def forward(tokens, params):
        return M.forward(cfg, params, tokens)
    return forward


class Program:
    def __init__(self, fn, in_specs, out_specs, mesh, baseline):
        self.fn = fn
        self.in_specs = in_specs
        self.out_specs = out_specs
        self.mesh = mesh
        self.baseline = baseline  # plain single-device function (tokens, params)

    def smap(self):
        return jax.shard_map(self.fn, mesh=self.mesh, in_specs=self.in_specs,
                             out_specs=self.out_specs, check_vma=False)


def vocab_parallel_embed(table, tokens, TP):
    """Megatron VocabParallelEmbedding: rows [r*Vl, (r+1)*Vl) live on rank r;
    out-of-range tokens look up row 0 and are zeroed; the partial sums meet in
    an all-reduce (left to the caller)."""
    Vl = table.shape[0]
    start = jax.lax.axis_index(TP) * Vl
    idx = tokens - start
    ok = (idx >= 0) & (idx < Vl)
    e = jnp.take(table, jnp.where(ok, idx, 0), axis=0)
    return jnp.where(ok[..., None], e, jnp.zeros_like(e))


def attention_sbh(q, k, v, scale):
    """Like models.causal_attention but returns the context as [S, B, nq, hd]
    (the sequence-major layout transformers-neuronx uses)."""
    rep = q.shape[2] // k.shape[2]
    k = jnp.repeat(k, rep, axis=2)
    v = jnp.repeat(v, rep, axis=2)
    s = jnp.einsum("bqhd,bkhd->bhqk", q, k).astype(jnp.float32) * scale
    S = q.shape[1]
    mask = jnp.tril(jnp.ones((S, S), dtype=bool))
    s = jnp.where(mask[None, None], s, jnp.float32(-1e30))
    p = jax.nn.softmax(s, axis=-1).astype(v.dtype)
    return jnp.einsum("bhqk,bkhd->qbhd", p, v)


# --------------------------------------------------------------------------
# Megatron tensor parallelism for the Llama / Mixtral decoder.
# --------------------------------------------------------------------------

def llama_tp_specs(cfg, TP, DP=None):
    spec = {"embed": P(TP, None), "final_norm": P(), "lm_head": P(None, TP)}
    for i in range(cfg.layers):
        p = f"layers.{i}."
        spec.update({p + "attn_norm": P(), p + "mlp_norm": P(),
                     p + "wq": P(None, TP), p + "wk": P(None, TP),
                     p + "wv": P(None, TP), p + "wo": P(TP, None)})
        if cfg.qk_norm:
            spec[p + "q_norm"] = P(TP)
        if cfg.model == "moe":
            spec.update({p + "router": P(), p + "w_gate": P(None, None, TP),
                         p + "w_up": P(None, None, TP), p + "w_down": P(None, TP, None)})
        else:
            spec.update({p + "w_gate": P(None, TP), p + "w_up": P(None, TP),
                         p + "w_down": P(TP, None)})
    if cfg.scan:  # stacked weights: the layer dimension comes first, unsharded
        spec = M.stack_layers(cfg, spec, lambda sp: P(None, *sp))
    return (P(DP, None), spec), P(DP, None, TP)


def make_llama_tp(cfg, mesh, bug=None, TP="tp", DP=None, sbh=False):
    """Megatron TP: column-parallel q/k/v/gate/up, row-parallel o/down with an
    all-reduce, vocab-parallel embedding (all-reduce) and LM head (output stays
    sharded on the vocabulary). Scanned configs run the layer under jax.lax.scan
    over the stacked (per-device) weights."""
    tp = axis_size(mesh, TP)
    nh, nkv, hd = cfg.heads // tp, cfg.kv_heads // tp, cfg.head_dim

    def allreduce(y, i, where):
        if bug == "missing-allreduce" and where == "attn" and i == 1:
            return y                                            # BUG(missing-allreduce)
        if bug == "scan-missing-allreduce" and where == "attn":
            return y                                            # BUG(scan-missing-allreduce)
        if bug == "wrong-mesh-axis" and where == "attn":
            return jax.lax.psum(y, DP)                          # BUG(wrong-mesh-axis)
        if bug == "wrong-replica-groups" and where == "attn":
            return jax.lax.psum(y, "tpb")                       # BUG(wrong-replica-groups)
        if bug == "fp16-allreduce":
            return jax.lax.psum(y.astype(jnp.float16), TP).astype(y.dtype)  # BUG(fp16-allreduce)
        if bug == "duplicated-allreduce" and where == "mlp" and i == 0:
            y = jax.lax.psum(y, TP)                             # BUG(duplicated-allreduce)
        if bug == "pmean-allreduce" and where == "mlp":
            return jax.lax.pmean(y, TP)                         # BUG(pmean-allreduce)
        return jax.lax.psum(y, TP)

    def layer(x, p, pre, i, cos, sin):
        """layer i (None inside a scan), weights p[pre + "wq"], ..."""
        B, S = x.shape[:2]
        with jax.named_scope("attn"):
            h = M.rms_norm(x, p[pre + "attn_norm"], cfg.eps)
            q = h @ p[pre + "wq"]
            if cfg.qk_norm:
                qf = q.astype(jnp.float32)
                ss = jnp.sum(qf * qf, axis=-1, keepdims=True)
                if bug == "qnorm-sharded-dim":
                    var = ss / q.shape[-1]                      # BUG(qnorm-sharded-dim)
                else:
                    var = jax.lax.psum(ss, TP) / (cfg.heads * hd)
                q = (qf * jax.lax.rsqrt(var + cfg.eps)).astype(q.dtype) * p[pre + "q_norm"]
            q = q.reshape(B, S, nh, hd)
            k = (h @ p[pre + "wk"]).reshape(B, S, nkv, hd)
            v = (h @ p[pre + "wv"]).reshape(B, S, nkv, hd)
            q = M.apply_rope(q, cos, sin)
            k = M.apply_rope(k, cos, sin)
            if bug == "attn-scale-per-shard":
                scale = 1.0 / math.sqrt(p[pre + "wq"].shape[1] // cfg.heads)  # BUG(attn-scale-per-shard)
            else:
                scale = 1.0 / math.sqrt(hd)
            if sbh:
                o = attention_sbh(q, k, v, scale)               # [S, B, nh, hd]
                if bug == "sbh-as-bsh":
                    o = o.reshape(B, S, nh * hd)                # BUG(sbh-as-bsh)
                else:
                    o = o.transpose(1, 0, 2, 3).reshape(B, S, nh * hd)
            else:
                o = M.causal_attention(q, k, v, scale).reshape(B, S, nh * hd)
            x = x + allreduce(o @ p[pre + "wo"], i, "attn")
        with jax.named_scope("mlp"):
            h = M.rms_norm(x, p[pre + "mlp_norm"], cfg.eps)
            if cfg.model == "moe":
                y = M.moe_dense(h.reshape(B * S, -1), p[pre + "router"],
                                p[pre + "w_gate"], p[pre + "w_up"],
                                p[pre + "w_down"]).reshape(B, S, -1)
            else:
                y = M.swiglu(h, p[pre + "w_gate"], p[pre + "w_up"], p[pre + "w_down"])
            x = x + allreduce(y, i, "mlp")
        return x

    def body(tokens, p):
        B, S = tokens.shape
        with jax.named_scope("embed"):
            x = vocab_parallel_embed(p["embed"], tokens, TP)
            if bug != "embed-missing-allreduce":
                x = jax.lax.psum(x, TP)                         # BUG(embed-missing-allreduce)
        cos, sin = M.rope_tables(S, hd, cfg.rope_theta)
        if cfg.scan:
            stacked = {k: v for k, v in p.items() if k.startswith("layers.")}

            def step(x, lp):
                return layer(x, lp, "layers.", None, cos, sin), None
            with jax.named_scope("layers"):
                x, _ = jax.lax.scan(step, x, stacked)
        else:
            for i in range(cfg.layers):
                with jax.named_scope(f"layers.{i}"):
                    x = layer(x, p, f"layers.{i}.", i, cos, sin)
        with jax.named_scope("final_norm"):
            x = M.rms_norm(x, p["final_norm"], cfg.eps)
        with jax.named_scope("lm_head"):
            return x @ p["lm_head"]

    in_specs, out_specs = llama_tp_specs(cfg, TP, DP)
    return Program(body, in_specs, out_specs, mesh,
                   baseline_forward(cfg))


# --------------------------------------------------------------------------
# Megatron sequence parallelism: the residual stream is sharded on the sequence;
# all-gather before the column-parallel linears, reduce-scatter after the
# row-parallel ones.
# --------------------------------------------------------------------------

def make_llama_sp(cfg, mesh, bug=None, TP="tp"):
    tp = axis_size(mesh, TP)
    nh, nkv, hd = cfg.heads // tp, cfg.kv_heads // tp, cfg.head_dim

    def gather_seq(h):
        if bug == "allgather-wrong-dim":
            g = jax.lax.all_gather(h, TP, axis=0, tiled=True)   # BUG(allgather-wrong-dim)
            return g.reshape(h.shape[0], h.shape[1] * tp, h.shape[2])
        return jax.lax.all_gather(h, TP, axis=1, tiled=True)

    def body(tokens, p):
        B, S = tokens.shape
        with jax.named_scope("embed"):
            x = vocab_parallel_embed(p["embed"], tokens, TP)
            x = jax.lax.psum_scatter(x, TP, scatter_dimension=1, tiled=True)  # [B, S/tp, H]
        cos, sin = M.rope_tables(S, hd, cfg.rope_theta)
        for i in range(cfg.layers):
            pre = f"layers.{i}."
            with jax.named_scope(f"layers.{i}"):
                with jax.named_scope("attn"):
                    h = gather_seq(M.rms_norm(x, p[pre + "attn_norm"], cfg.eps))
                    q = (h @ p[pre + "wq"]).reshape(B, S, nh, hd)
                    k = (h @ p[pre + "wk"]).reshape(B, S, nkv, hd)
                    v = (h @ p[pre + "wv"]).reshape(B, S, nkv, hd)
                    q = M.apply_rope(q, cos, sin)
                    k = M.apply_rope(k, cos, sin)
                    o = M.causal_attention(q, k, v, 1.0 / math.sqrt(hd)).reshape(B, S, nh * hd)
                    x = x + jax.lax.psum_scatter(o @ p[pre + "wo"], TP, scatter_dimension=1, tiled=True)
                with jax.named_scope("mlp"):
                    h = gather_seq(M.rms_norm(x, p[pre + "mlp_norm"], cfg.eps))
                    y = M.swiglu(h, p[pre + "w_gate"], p[pre + "w_up"], p[pre + "w_down"])
                    x = x + jax.lax.psum_scatter(y, TP, scatter_dimension=1, tiled=True)
        with jax.named_scope("final_norm"):
            x = M.rms_norm(x, p["final_norm"], cfg.eps)
            if bug != "reducescatter-no-allgather":
                x = jax.lax.all_gather(x, TP, axis=1, tiled=True)  # BUG(reducescatter-no-allgather)
        with jax.named_scope("lm_head"):
            return x @ p["lm_head"]

    in_specs, out_specs = llama_tp_specs(cfg, TP)
    return Program(body, in_specs, out_specs, mesh,
                   baseline_forward(cfg))


# --------------------------------------------------------------------------
# DeepSpeed-Ulysses: sequence sharded everywhere, weights replicated; around the
# attention core an all-to-all trades the sequence shard for a head shard.
# --------------------------------------------------------------------------

def make_llama_ulysses(cfg, mesh, bug=None, SP="sp", rope_local=False):
    """rope_local: apply RoPE before the all-to-all, on the local sequence shard,
    with positions offset by rank * S/sp (as DeepSpeed-Ulysses integrations do)."""
    sp = axis_size(mesh, SP)
    hd = cfg.head_dim

    def seq_to_heads(t):
        """[B, S/sp, n, hd] -> [B, S, n/sp, hd]"""
        if bug == "ulysses-batch1-only":
            # flattens batch into the sequence before the exchange: right only for B == 1
            b, sl, n, d = t.shape
            u = t.reshape(b * sl, n, d)                         # BUG(ulysses-batch1-only)
            u = jax.lax.all_to_all(u, SP, 1, 0, tiled=True)    # [sp*b*sl, n/sp, d]
            return u.reshape(b, sl * sp, n // sp, d)
        return jax.lax.all_to_all(t, SP, 2, 1, tiled=True)

    def heads_to_seq(t):
        """[B, S, n/sp, hd] -> [B, S/sp, n, hd]"""
        return jax.lax.all_to_all(t, SP, 1, 2, tiled=True)

    def body(tokens, p):
        B, Sl = tokens.shape
        S = Sl * sp
        with jax.named_scope("embed"):
            x = jnp.take(p["embed"], tokens, axis=0)           # [B, S/sp, H]
        cos, sin = M.rope_tables(S, hd, cfg.rope_theta)
        for i in range(cfg.layers):
            pre = f"layers.{i}."
            with jax.named_scope(f"layers.{i}"):
                with jax.named_scope("attn"):
                    h = M.rms_norm(x, p[pre + "attn_norm"], cfg.eps)
                    q = (h @ p[pre + "wq"]).reshape(B, Sl, cfg.heads, hd)
                    k = (h @ p[pre + "wk"]).reshape(B, Sl, cfg.kv_heads, hd)
                    v = (h @ p[pre + "wv"]).reshape(B, Sl, cfg.kv_heads, hd)
                    if rope_local:
                        if bug == "rope-no-offset":
                            start = 0                                   # BUG(rope-no-offset)
                        else:
                            start = jax.lax.axis_index(SP) * Sl
                        lcos, lsin = M.rope_tables(Sl, hd, cfg.rope_theta, offset=start)
                        q = M.apply_rope(q, lcos, lsin)
                        k = M.apply_rope(k, lcos, lsin)
                    q, k, v = seq_to_heads(q), seq_to_heads(k), seq_to_heads(v)
                    if not rope_local:
                        q = M.apply_rope(q, cos, sin)
                        k = M.apply_rope(k, cos, sin)
                    o = heads_to_seq(M.causal_attention(q, k, v, 1.0 / math.sqrt(hd)))
                    x = x + o.reshape(B, Sl, cfg.heads * hd) @ p[pre + "wo"]
                with jax.named_scope("mlp"):
                    h = M.rms_norm(x, p[pre + "mlp_norm"], cfg.eps)
                    x = x + M.swiglu(h, p[pre + "w_gate"], p[pre + "w_up"], p[pre + "w_down"])
        with jax.named_scope("final_norm"):
            x = M.rms_norm(x, p["final_norm"], cfg.eps)
        with jax.named_scope("lm_head"):
            return x @ p["lm_head"]

    spec = {k: P() for k in M.param_shapes(cfg)}
    return Program(body, (P(None, SP), spec), P(None, SP, None), mesh,
                   baseline_forward(cfg))


# --------------------------------------------------------------------------
# Expert parallelism for the Mixtral decoder: attention replicated, each rank
# routes its slice of the tokens; an all-to-all sends every (expert, token) row
# to the rank owning the expert (experts blocked: rank r owns experts
# [r*El, (r+1)*El)), a second all-to-all brings the results back.
# --------------------------------------------------------------------------

def make_moe_ep(cfg, mesh, bug=None, EP="ep"):
    ep = axis_size(mesh, EP)
    E, El = cfg.experts, cfg.experts // ep

    def moe(h, p, pre):
        T, H = h.shape
        Tl = T // ep
        r = jax.lax.axis_index(EP)
        xt = jax.lax.dynamic_slice_in_dim(h, r * Tl, Tl, axis=0)   # my tokens [Tl, H]
        wts = M.top2_weights(xt @ p[pre + "router"])               # [Tl, E]
        # row e goes to expert e; tokens not routed to e are sent as zeros
        disp = jnp.where((wts.T > 0)[:, :, None], xt[None], jnp.zeros((), xt.dtype))
        if bug == "expert-order":
            # experts numbered round-robin (e = j*ep + r) while the weights are blocked; one expert per rank: reversed
            disp = disp.reshape(El, ep, Tl, H).transpose(1, 0, 2, 3).reshape(E, Tl, H) if El > 1 else disp[::-1]  # BUG(expert-order)
        # dispatch: [E, Tl, H] -> [El, ep*Tl, H] (all tokens for my experts)
        xin = jax.lax.all_to_all(disp, EP, 0, 1, tiled=True)
        g = jnp.einsum("eth,ehf->etf", xin, p[pre + "w_gate"])
        u = jnp.einsum("eth,ehf->etf", xin, p[pre + "w_up"])
        y = jnp.einsum("etf,efh->eth", jax.nn.silu(g) * u, p[pre + "w_down"])
        # combine: [El, ep*Tl, H] -> [E, Tl, H]
        yb = jax.lax.all_to_all(y, EP, 1, 0, tiled=True)
        out = jnp.einsum("te,eth->th", wts, yb)                     # [Tl, H]
        return jax.lax.all_gather(out, EP, axis=0, tiled=True)      # [T, H]

    def body(tokens, p):
        B, S = tokens.shape
        hd = cfg.head_dim
        with jax.named_scope("embed"):
            x = jnp.take(p["embed"], tokens, axis=0)
        cos, sin = M.rope_tables(S, hd, cfg.rope_theta)
        for i in range(cfg.layers):
            pre = f"layers.{i}."
            with jax.named_scope(f"layers.{i}"):
                with jax.named_scope("attn"):
                    h = M.rms_norm(x, p[pre + "attn_norm"], cfg.eps)
                    q = (h @ p[pre + "wq"]).reshape(B, S, cfg.heads, hd)
                    k = (h @ p[pre + "wk"]).reshape(B, S, cfg.kv_heads, hd)
                    v = (h @ p[pre + "wv"]).reshape(B, S, cfg.kv_heads, hd)
                    q = M.apply_rope(q, cos, sin)
                    k = M.apply_rope(k, cos, sin)
                    o = M.causal_attention(q, k, v, 1.0 / math.sqrt(hd))
                    x = x + o.reshape(B, S, -1) @ p[pre + "wo"]
                with jax.named_scope("mlp"):
                    h = M.rms_norm(x, p[pre + "mlp_norm"], cfg.eps)
                    x = x + moe(h.reshape(B * S, -1), p, pre).reshape(B, S, -1)
        with jax.named_scope("final_norm"):
            x = M.rms_norm(x, p["final_norm"], cfg.eps)
        with jax.named_scope("lm_head"):
            return x @ p["lm_head"]

    spec = {k: P() for k in M.param_shapes(cfg)}
    for i in range(cfg.layers):
        for w in ("w_gate", "w_up", "w_down"):
            spec[f"layers.{i}.{w}"] = P(EP, None, None)
    return Program(body, (P(), spec), P(), mesh, baseline_forward(cfg))


# --------------------------------------------------------------------------
# Router gradient under sequence parallelism (Megatron-LM #599): the router
# weight is replicated across the tensor-parallel group but each rank sees only
# its sequence shard, so its gradient must be all-reduced over tp.
# Program: (x [T, H], router, w_gate, w_up, w_down, dy [T, H]) -> updated router.
# --------------------------------------------------------------------------

def router_step_baseline(x, router, w_gate, w_up, w_down, dy):
    def loss(r):
        with jax.named_scope("layers.0"):
            with jax.named_scope("mlp"):
                return jnp.sum(M.moe_dense(x, r, w_gate, w_up, w_down) * dy)
    with jax.named_scope("optimizer"):
        return router - 0.1 * jax.grad(loss)(router)


def make_router_step(cfg, mesh, bug=None, TP="tp"):
    def body(x, router, w_gate, w_up, w_down, dy):
        def loss(r):
            with jax.named_scope("layers.0"):
                with jax.named_scope("mlp"):
                    return jnp.sum(M.moe_dense(x, r, w_gate, w_up, w_down) * dy)
        g = jax.grad(loss)(router)                  # partial: my tokens only
        with jax.named_scope("optimizer"):
            if bug != "router-unsynced":
                g = jax.lax.psum(g, TP)             # BUG(router-unsynced)
            return router - 0.1 * g

    in_specs = (P(TP, None), P(), P(), P(), P(), P(TP, None))
    return Program(body, in_specs, P(), mesh, router_step_baseline)


def router_step_inputs(cfg):
    T, H, E, F = cfg.batch * cfg.seq, cfg.hidden, cfg.experts, cfg.ffn
    return [("x", (T, H)), ("router", (H, E)), ("w_gate", (E, H, F)),
            ("w_up", (E, H, F)), ("w_down", (E, F, H)), ("dy", (T, H))]


# --------------------------------------------------------------------------
# GPT-2 tensor parallelism: fused c_attn [H, 3H] = (q | k | v) given replicated,
# each rank slices the q, k and v columns of its heads; vocab-parallel token
# embedding and position-parallel positional embedding, both reduced.
# --------------------------------------------------------------------------

def make_gpt2_tp(cfg, mesh, bug=None, TP="tp"):
    tp = axis_size(mesh, TP)
    H, hd = cfg.hidden, cfg.head_dim
    nh, Hl = cfg.heads // tp, cfg.hidden // tp

    def my_qkv_cols(w, r):
        """columns of q, k and v for my heads out of the fused (q | k | v) weight"""
        if bug == "fused-qkv-layout":
            # the fused weight split as if it were laid out per rank (q_r | k_r | v_r)
            blk = jax.lax.dynamic_slice_in_dim(w, r * 3 * Hl, 3 * Hl, axis=-1)  # BUG(fused-qkv-layout)
            return jnp.split(blk, 3, axis=-1)
        return [jax.lax.dynamic_slice_in_dim(w, j * H + r * Hl, Hl, axis=-1) for j in range(3)]

    def body(tokens, p):
        B, S = tokens.shape
        r = jax.lax.axis_index(TP)
        with jax.named_scope("embed"):
            x = vocab_parallel_embed(p["embed"], tokens, TP)
            pos = jnp.broadcast_to(jnp.arange(S, dtype=jnp.int32)[None], (B, S))
            pe = vocab_parallel_embed(p["pos_embed"], pos, TP)
            if bug == "posemb-unreduced":
                x = jax.lax.psum(x, TP) + pe                     # BUG(posemb-unreduced)
            else:
                x = jax.lax.psum(x + pe, TP)
        for i in range(cfg.layers):
            pre = f"layers.{i}."
            with jax.named_scope(f"layers.{i}"):
                with jax.named_scope("attn"):
                    h = M.layer_norm(x, p[pre + "ln1"], p[pre + "ln1_b"], cfg.eps)
                    wq, wk, wv = my_qkv_cols(p[pre + "c_attn"], r)
                    bq, bk, bv = my_qkv_cols(p[pre + "c_attn_b"], r)
                    q = (h @ wq + bq).reshape(B, S, nh, hd)
                    k = (h @ wk + bk).reshape(B, S, nh, hd)
                    v = (h @ wv + bv).reshape(B, S, nh, hd)
                    o = M.causal_attention(q, k, v, 1.0 / math.sqrt(hd)).reshape(B, S, Hl)
                    if bug == "bias-before-allreduce":
                        x = x + jax.lax.psum(o @ p[pre + "c_proj"] + p[pre + "c_proj_b"], TP)  # BUG(bias-before-allreduce)
                    else:
                        x = x + jax.lax.psum(o @ p[pre + "c_proj"], TP) + p[pre + "c_proj_b"]
                with jax.named_scope("mlp"):
                    h = M.layer_norm(x, p[pre + "ln2"], p[pre + "ln2_b"], cfg.eps)
                    h = jax.nn.gelu(h @ p[pre + "c_fc"] + p[pre + "c_fc_b"], approximate=True)
                    x = x + jax.lax.psum(h @ p[pre + "c_mlp_proj"], TP) + p[pre + "c_mlp_proj_b"]
        with jax.named_scope("final_norm"):
            x = M.layer_norm(x, p["final_norm"], p["final_norm_b"], cfg.eps)
        with jax.named_scope("lm_head"):
            return x @ p["lm_head"]

    spec = {k: P() for k in M.param_shapes(cfg)}
    spec.update({"embed": P(TP, None), "pos_embed": P(TP, None), "lm_head": P(None, TP)})
    for i in range(cfg.layers):
        pre = f"layers.{i}."
        spec.update({pre + "c_proj": P(TP, None), pre + "c_fc": P(None, TP),
                     pre + "c_fc_b": P(TP), pre + "c_mlp_proj": P(TP, None)})
    return Program(body, (P(), spec), P(None, None, TP), mesh,
                   baseline_forward(cfg))


# --------------------------------------------------------------------------
# One decode step with a KV cache (tensor parallel): the cache is replicated and
# every rank slices the kv heads it owns (transformers-neuronx style).
# Inputs: token [B, 1], params, cache_k / cache_v [L, B, Sc, nkv, hd].
# --------------------------------------------------------------------------

def decode_baseline(cfg):
    def decode(tokens, params, cache_k, cache_v):
        B = tokens.shape[0]
        Sc = cache_k.shape[2]
        hd = cfg.head_dim
        with jax.named_scope("embed"):
            x = jnp.take(params["embed"], tokens, axis=0)       # [B, 1, H]
        cos, sin = M.rope_tables(1, hd, cfg.rope_theta, offset=Sc)
        for i in range(cfg.layers):
            pre = f"layers.{i}."
            with jax.named_scope(f"layers.{i}"):
                with jax.named_scope("attn"):
                    h = M.rms_norm(x, params[pre + "attn_norm"], cfg.eps)
                    q = M.apply_rope((h @ params[pre + "wq"]).reshape(B, 1, cfg.heads, hd), cos, sin)
                    k = M.apply_rope((h @ params[pre + "wk"]).reshape(B, 1, cfg.kv_heads, hd), cos, sin)
                    v = (h @ params[pre + "wv"]).reshape(B, 1, cfg.kv_heads, hd)
                    k = jnp.concatenate([cache_k[i], k], axis=1)
                    v = jnp.concatenate([cache_v[i], v], axis=1)
                    o = decode_attention(q, k, v, 1.0 / math.sqrt(hd))
                    x = x + o.reshape(B, 1, -1) @ params[pre + "wo"]
                with jax.named_scope("mlp"):
                    h = M.rms_norm(x, params[pre + "mlp_norm"], cfg.eps)
                    x = x + M.swiglu(h, params[pre + "w_gate"], params[pre + "w_up"], params[pre + "w_down"])
        with jax.named_scope("final_norm"):
            x = M.rms_norm(x, params["final_norm"], cfg.eps)
        with jax.named_scope("lm_head"):
            return x @ params["lm_head"]
    return decode


def decode_attention(q, k, v, scale):
    """q: [B, 1, nq, hd]; k, v: [B, Sk, nkv, hd]: the new token sees everything."""
    rep = q.shape[2] // k.shape[2]
    k = jnp.repeat(k, rep, axis=2)
    v = jnp.repeat(v, rep, axis=2)
    s = jnp.einsum("bqhd,bkhd->bhqk", q, k).astype(jnp.float32) * scale
    pr = jax.nn.softmax(s, axis=-1).astype(v.dtype)
    return jnp.einsum("bhqk,bkhd->bqhd", pr, v)


def make_decode_tp(cfg, mesh, bug=None, TP="tp"):
    tp = axis_size(mesh, TP)
    nh, nkv, hd = cfg.heads // tp, cfg.kv_heads // tp, cfg.head_dim

    def my_cache(c, r):
        if bug == "kv-cache-offset":
            return jax.lax.dynamic_slice_in_dim(c, r * nh, nkv, axis=2)   # BUG(kv-cache-offset)
        return jax.lax.dynamic_slice_in_dim(c, r * nkv, nkv, axis=2)

    def body(tokens, p, cache_k, cache_v):
        B = tokens.shape[0]
        Sc = cache_k.shape[2]
        r = jax.lax.axis_index(TP)
        with jax.named_scope("embed"):
            x = jax.lax.psum(vocab_parallel_embed(p["embed"], tokens, TP), TP)
        cos, sin = M.rope_tables(1, hd, cfg.rope_theta, offset=Sc)
        for i in range(cfg.layers):
            pre = f"layers.{i}."
            with jax.named_scope(f"layers.{i}"):
                with jax.named_scope("attn"):
                    h = M.rms_norm(x, p[pre + "attn_norm"], cfg.eps)
                    q = M.apply_rope((h @ p[pre + "wq"]).reshape(B, 1, nh, hd), cos, sin)
                    k = M.apply_rope((h @ p[pre + "wk"]).reshape(B, 1, nkv, hd), cos, sin)
                    v = (h @ p[pre + "wv"]).reshape(B, 1, nkv, hd)
                    k = jnp.concatenate([my_cache(cache_k[i], r), k], axis=1)
                    v = jnp.concatenate([my_cache(cache_v[i], r), v], axis=1)
                    o = decode_attention(q, k, v, 1.0 / math.sqrt(hd))
                    x = x + jax.lax.psum(o.reshape(B, 1, -1) @ p[pre + "wo"], TP)
                with jax.named_scope("mlp"):
                    h = M.rms_norm(x, p[pre + "mlp_norm"], cfg.eps)
                    y = M.swiglu(h, p[pre + "w_gate"], p[pre + "w_up"], p[pre + "w_down"])
                    x = x + jax.lax.psum(y, TP)
        with jax.named_scope("final_norm"):
            x = M.rms_norm(x, p["final_norm"], cfg.eps)
        with jax.named_scope("lm_head"):
            return x @ p["lm_head"]

    (_, spec), out = llama_tp_specs(cfg, TP)
    return Program(body, (P(), spec, P(), P()), out, mesh, decode_baseline(cfg))
