"""scalify_jax: export a JAX program as a pair that `scalify check` reads.

    from scalify_jax import export_pair
    export_pair(fn, args, mesh={"tp": 4}, in_shardings=..., name="mine", out_dir="out")

writes the single-device baseline and the per-device program right after SPMD
partitioning (HLO text and protobuf), a relations file for shard_map pairs,
and an entry of out_dir/manifest.json for `scalify check --manifest`.
The pieces it is made of are public too, for exporters that write their own
files: before_partitioning / after_partitioning (the modules as text and
protobuf), make_mesh, spec_view, leaf_names, relations_doc and
no_compilation_cache. The only dependency is JAX.
"""
__all__ = ["export_pair", "after_partitioning", "before_partitioning", "make_mesh",
           "spec_view", "leaf_names", "relations_doc", "no_compilation_cache",
           "ExportError", "versions"]
__version__ = "0.1.0"


def __getattr__(name):
    # jax is imported on first use, so `python -m scalify_jax --devices N`
    # can set XLA_FLAGS before it is.
    if name in __all__:
        from . import _export
        return getattr(_export, name)
    raise AttributeError(name)
