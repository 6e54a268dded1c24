"""scalify_jax: export a JAX program as a pair that `scalify check` reads.

    from scalify_jax import export_pair
    export_pair(fn, args, mesh={"tp": 4}, in_shardings=..., name="mine", out_dir="out")

writes the single-device baseline and the per-device program right after SPMD
partitioning (HLO text and protobuf), a relations file for shard_map pairs,
and an entry of out_dir/manifest.json for `scalify check --manifest`.
The only dependency is JAX.
"""
__all__ = ["export_pair", "after_partitioning", "spec_view", "ExportError", "versions"]
__version__ = "0.1.0"


def __getattr__(name):
    # jax is imported on first use, so `python -m scalify_jax --devices N`
    # can set XLA_FLAGS before it is.
    if name in __all__:
        from . import _export
        return getattr(_export, name)
    raise AttributeError(name)
