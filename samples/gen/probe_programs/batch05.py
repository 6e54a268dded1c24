# fifth batch: GSPMD with genuinely uneven (padded) shapes, reshapes of sharded dims, explicit-mode meshes
gspmd("g.uneven.rowsum_30_over4", {"dp": 4}, (P("dp"),), P(), lambda x: x.sum(0), (R(30, 8),))
gspmd("g.uneven.matmul_k30_over4", {"tp": 4}, (P(None, "tp"), P("tp", None)), P(), lambda x, w: x @ w, (R(8, 30), R(30, 8)))
gspmd("g.uneven.softmax_30_over4", {"tp": 4}, (P(None, "tp"),), P(None, "tp"), lambda x: jax.nn.softmax(x, -1), (R(8, 30),))
gspmd("g.uneven.mlp_batch10_over4", {"dp": 4}, (P(), P("dp")), P("dp"), lambda w, x: jnp.tanh(x @ w), (R(16, 16), R(10, 16)))
M24 = make_mesh({"dp": 2, "tp": 4})
def wsc(a, *spec): return jax.lax.with_sharding_constraint(a, NamedSharding(M24, P(*spec)))
gspmd("g.uneven_internal.slice30_softmax.dp2xtp4", {"dp": 2, "tp": 4}, (P(None, "tp"),), P(),
      lambda x: jax.nn.softmax(wsc(x[:, :30] * 2.0, None, "tp"), -1).sum(0), (R(8, 32),))
gspmd("g.uneven_internal.slice6_rows_mean.dp2xtp4", {"dp": 2, "tp": 4}, (P("tp"),), P(),
      lambda x: wsc(jnp.tanh(x[:6]), "tp").mean(0), (R(8, 16),))
gspmd("g.uneven_internal.matmul_k30.dp2xtp4", {"dp": 2, "tp": 4}, (P(), P()), P(),
      lambda x, w: wsc(x[:, :30], None, "tp") @ wsc(w[:30], "tp", None), (R(8, 32), R(32, 8)))
gspmd("g.reshape_merge_sharded.tp4", {"tp": 4}, (P("tp", None),), P("tp"), lambda x: jnp.tanh(x.reshape(-1)), (R(8, 32),))
gspmd("g.reshape_split_sharded.tp4", {"tp": 4}, (P("tp"),), P("tp", None), lambda x: x.reshape(16, 16) + 1.0, (R(256),))
gspmd("g.contract_two_axes.dp2xtp4", {"dp": 2, "tp": 4}, (P("dp", "tp"), P("dp", "tp")), P(),
      lambda a, b: jnp.einsum("ij,ij->", a, b), (R(8, 32), R(8, 32)))
gspmd("g.matmul_conflicting.dp2xtp4", {"dp": 2, "tp": 4}, (P("tp", "dp"), P("tp", None)), P("dp"), lambda x, w: x @ w, (R(16, 32), R(32, 8)))

def gspmd_explicit(name, axes, specs_in, fn, args):
    if not want(name): return
    print("==", name, flush=True)
    try:
        from jax.sharding import AxisType
        shape = tuple(axes.values()); n = int(np.prod(shape))
        mesh = Mesh(np.array(jax.devices()[:n]).reshape(shape), tuple(axes), axis_types=(AxisType.Explicit,) * len(shape))
        ins = tuple(jax.tree.map(lambda p: NamedSharding(mesh, p), s, is_leaf=is_p) for s in specs_in)
        with jax.set_mesh(mesh):
            args_p = jax.tree.map(lambda a, s: jax.device_put(a, s), tuple(args), ins)
            j = jax.jit(fn)
            lo = j.lower(*args_p)
            base = save(name + ".baseline", *before_partitioning(lo))
            dist = save(name + ".dist", *after_partitioning(lo))
            got = j(*args_p)
            ref = jax.jit(fn)(*args)
        MANIFEST.append({"name": name, "kind": "gspmd", "config": name, "mesh": axes, "baseline": base, "distributed": dist,
                         "relations": "auto", "expected": "verified", "note": "explicit-mode mesh (AxisType.Explicit)",
                         "numerics": {"max_abs_diff": diff_of(ref, got), "max_abs_ref": scale_of(ref)}})
    except Exception as ex:
        print("!! export failed", name, type(ex).__name__, str(ex)[:400], flush=True)
gspmd_explicit("g.explicit.mlp_dp2xtp4", {"dp": 2, "tp": 4}, (P("dp"), P(None, "tp"), P("tp", None)),
               lambda x, w1, w2: jnp.matmul(jax.nn.relu(x @ w1), w2, out_sharding=P("dp")), (R(8, D), R(D, F, scale=0.2), R(F, D, scale=0.2)))
gspmd_explicit("g.explicit.reshard_dp8", {"dp": 8}, (P("dp"),),
               lambda x: jax.sharding.reshard(jnp.tanh(x), P(None, "dp")).sum(0), (R(16, 16),))
