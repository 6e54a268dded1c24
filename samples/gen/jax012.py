"""Writes tests/cases/jax012/: small programs exported with a current JAX (the
version is recorded in tests/cases/jax012/VERSIONS), each as a baseline and a
distributed module, both in text and protobuf form, for the reader tests.

    bash samples/gen/jax012.sh      (from the repository root)

Programs (all small):
  smap_sgd      shard_map data-parallel SGD step, gradients averaged by
                jax.lax.pmean (the partitioned text refers to tuple results
                as %name#N); smap_sgd.relations.json says how its inputs and
                outputs relate to the baseline's
  smap_sgd_x4   the naive port of that step to jax 0.12 (pmean of gradients
                that are already summed): a real bug, updates 4x too large;
                its baseline is smap_sgd.baseline
  gspmd_adamw   jit train step of a 2-layer MLP with optax.adamw and named
                shardings on a {data:2, model:4} mesh
  gspmd_scan    jit of a lax.scan over 3 stacked layers on {data:2, model:4}
  gspmd_scan_prop  the same with the output sharding left to the partitioner
  mesh_d4m1     the MLP forward on a mesh with a size-1 axis {data:4, model:1}
  mesh_b1m4     the same on {batch:1, model:4}
"""
import importlib.metadata
import json
import os
import sys

assert "--xla_force_host_platform_device_count=8" in os.environ.get("XLA_FLAGS", ""), \
    "set XLA_FLAGS=--xla_force_host_platform_device_count=8 before running"

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import NamedSharding, PartitionSpec as P
# The pass dump, the mesh and the relations document: python/scalify_jax (on
# jax012.sh's path).
from scalify_jax import (after_partitioning, before_partitioning, make_mesh,
                        relations_doc)

jax.config.update("jax_enable_compilation_cache", False)
# Source locations name this script only, not the installed optax files.
from jax._src import source_info_util  # noqa: E402
source_info_util.register_exclusion(os.path.dirname(optax.__file__))

OUT = "tests/cases/jax012"


def write(name, data):
    with open(os.path.join(OUT, name), "wb") as f:
        f.write(data)


def hlo_files(text_pb):
    """(text, pb) with the text as bytes, as save() writes them."""
    text, pb = text_pb
    return text.encode(), pb


def lowered_hlo(lo):
    return hlo_files(before_partitioning(lo))


def partitioned(lo):
    """The module right after the SPMD partitioner, from a pass dump."""
    return hlo_files(after_partitioning(lo))


def save(name, base, dist):
    if base is not None:
        write(name + ".baseline.hlo", base[0])
        write(name + ".baseline.hlo.pb", base[1])
    write(name + ".dist.hlo", dist[0])
    write(name + ".dist.hlo.pb", dist[1])
    print("==", name, flush=True)


def mesh(shape, names):
    return make_mesh(dict(zip(names, shape)))


def sds(shape, m=None, spec=None, dtype=jnp.float32):
    sh = NamedSharding(m, spec) if m is not None else None
    return jax.ShapeDtypeStruct(shape, dtype, sharding=sh)


def mlp(params, x):
    h = jax.nn.relu(x @ params["w1"] + params["b1"])
    return h @ params["w2"] + params["b2"]


def loss(params, x, y):
    return jnp.mean((mlp(params, x) - y) ** 2)


PSHAPES = {"w1": (16, 32), "b1": (32,), "w2": (32, 8), "b2": (8,)}


def smap_sgd():
    """Two shard_map versions of one SGD step. In jax 0.12 the gradient of a
    replicated (invariant) parameter is already summed over the devices, so
    smap_sgd casts the parameters to varying before differentiating and then
    averages with pmean; smap_sgd_x4 is the naive port, whose update is 4
    times the baseline's (pmean of an already-summed gradient)."""
    m = mesh((4,), ("data",))

    def step(params, x, y):
        g = jax.grad(loss)(params, x, y)
        return jax.tree.map(lambda p, d: p - 0.1 * d, params, g)

    def local(params, x, y):
        g = jax.grad(loss)(jax.lax.pcast(params, "data", to="varying"), x, y)
        g = jax.lax.pmean(g, "data")
        return jax.tree.map(lambda p, d: p - 0.1 * d, params, g)

    def local_x4(params, x, y):
        g = jax.grad(loss)(params, x, y)
        g = jax.lax.pmean(g, "data")
        return jax.tree.map(lambda p, d: p - 0.1 * d, params, g)

    params = {k: sds(s) for k, s in PSHAPES.items()}
    base = lowered_hlo(jax.jit(step).lower(params, sds((32, 16)), sds((32, 8))))
    pspec = {k: P() for k in PSHAPES}
    dparams = {k: sds(s, m, P()) for k, s in PSHAPES.items()}
    names = sorted(PSHAPES) + ["x", "y"]
    views = ["dup"] * len(PSHAPES) + ["shard(0,data)"] * 2
    rel = relations_doc({"data": 4}, names, views, sorted(PSHAPES), ["dup"] * len(PSHAPES))
    for name, fn in (("smap_sgd", local), ("smap_sgd_x4", local_x4)):
        dstep = jax.shard_map(fn, mesh=m, in_specs=(pspec, P("data"), P("data")), out_specs=pspec)
        lo = jax.jit(dstep).lower(dparams, sds((32, 16), m, P("data")), sds((32, 8), m, P("data")))
        save(name, base if name == "smap_sgd" else None, partitioned(lo))
        with open(os.path.join(OUT, name + ".relations.json"), "w") as f:
            f.write(json.dumps(rel, indent=1) + "\n")


def gspmd_adamw():
    m = mesh((2, 4), ("data", "model"))
    specs = {"w1": P(None, "model"), "b1": P("model"), "w2": P("model", None), "b2": P()}
    opt = optax.adamw(1e-3)

    def step(params, state, x, y):
        g = jax.grad(loss)(params, x, y)
        upd, state = opt.update(g, state, params)
        return optax.apply_updates(params, upd), state

    params = {k: sds(s, m, specs[k]) for k, s in PSHAPES.items()}
    state = jax.eval_shape(opt.init, params)
    sspec = jax.tree.map(lambda s: P() if s.ndim == 0 else None, state)
    state = jax.tree.map(lambda s: sds(s.shape, m, P(), s.dtype), state)
    state = (state[0]._replace(mu={k: sds(s, m, specs[k]) for k, s in PSHAPES.items()},
                               nu={k: sds(s, m, specs[k]) for k, s in PSHAPES.items()}),) + \
        tuple(state[1:])
    del sspec
    # Outputs keep the inputs' shardings (left to propagation, the partitioned
    # program would choose its own).
    outs = jax.tree.map(lambda a: a.sharding, (params, state))
    lo = jax.jit(step, out_shardings=outs).lower(params, state, sds((32, 16), m, P("data")),
                                                 sds((32, 8), m, P("data")))
    save("gspmd_adamw", lowered_hlo(lo), partitioned(lo))


def gspmd_scan():
    m = mesh((2, 4), ("data", "model"))

    def f(ws, x):
        def layer(h, w):
            return jnp.tanh(h @ w), None
        h, _ = jax.lax.scan(layer, x, ws)
        return h

    args = (sds((3, 16, 16), m, P(None, None, "model")), sds((8, 16), m, P("data")))
    lo = jax.jit(f, out_shardings=NamedSharding(m, P("data"))).lower(*args)
    save("gspmd_scan", lowered_hlo(lo), partitioned(lo))
    # The same without out_shardings: the partitioner keeps the result sharded
    # over both axes (allow_spmd_sharding_propagation_to_output), and the
    # baseline says nothing about the output's sharding.
    lo = jax.jit(f).lower(*args)
    save("gspmd_scan_prop", lowered_hlo(lo), partitioned(lo))


def mesh_size1(name, shape, names, xspec, wspec):
    m = mesh(shape, names)
    params = {"w1": sds((16, 32), m, wspec), "b1": sds((32,), m, P(wspec[1])),
              "w2": sds((32, 8), m, P(wspec[1], None)), "b2": sds((8,), m, P())}
    lo = jax.jit(mlp, out_shardings=NamedSharding(m, xspec)).lower(
        params, sds((16, 16), m, xspec))
    save(name, lowered_hlo(lo), partitioned(lo))


def main():
    os.makedirs(OUT, exist_ok=True)
    smap_sgd()
    gspmd_adamw()
    gspmd_scan()
    mesh_size1("mesh_d4m1", (4, 1), ("data", "model"), P("data"), P(None, "model"))
    mesh_size1("mesh_b1m4", (1, 4), ("batch", "model"), P("batch"), P(None, "model"))
    with open(os.path.join(OUT, "VERSIONS"), "w") as f:
        f.write("written by samples/gen/jax012.py with\n")
        for p in ("jax", "jaxlib", "optax"):
            f.write(f"{p} {importlib.metadata.version(p)}\n")
        f.write(f"python {sys.version.split()[0]}\n")


if __name__ == "__main__":
    main()
