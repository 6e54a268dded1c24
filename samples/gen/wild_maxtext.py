"""MaxText (pip package `maxtext`) decoder LM from a tiny config (llama2 decoder
block, random init, synthetic batch): MaxText's own NNX train state, logical axis
rules and train_step / eval_step, assembled the way its AOT compiler
(maxtext.trainers.pre_train.train_compile) does, on a CPU mesh instead of a TPU
topology. Exported in its own virtualenv (see run_wild.sh)."""
import contextlib
import functools
import os

import jax
import numpy as np
from flax import nnx
from flax.core.spmd import logical_axis_rules
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec as P

import maxtext
from maxtext.common import train_state_nnx
from maxtext.configs import pyconfig
from maxtext.optimizers import optimizers
from maxtext.trainers.pre_train import train
from maxtext.utils import maxtext_utils, model_creation_utils, sharding

LIB = ("maxtext", version("maxtext"))
BASE = os.path.join(os.path.dirname(maxtext.__file__), "configs", "base.yml")
MODEL = ["base_emb_dim=64", "base_num_query_heads=8", "base_num_kv_heads=4", "base_mlp_dim=128",
         "base_num_decoder_layers=2", "head_dim=8", "vocab_size=128", "max_target_length=16",
         "dtype=float32", "weight_dtype=float32", "attention=dot_product", "decoder_block=llama2",
         "dropout_rate=0.0", "init_weights_seed=0", "learning_rate=1e-3",
         "warmup_steps_fraction=0.0"]
RUN = ["hardware=cpu", "skip_jax_distributed_system=True", "enable_checkpointing=False",
       "run_name=wild", "dataset_type=synthetic", "enable_tensorboard=False",
       "enable_goodput_recording=False", "monitor_goodput=False", "opt_type=adamw"]
AXES = ("data", "fsdp", "tensor")


def config_for(par, scan, unit):
    """par: ici parallelism per axis, e.g. {"fsdp": 2, "tensor": 4}; unit: one device
    with the same global batch (8)."""
    ici = [f"ici_{a}_parallelism={1 if unit else par.get(a, 1)}" for a in AXES]
    n = 1 if unit else int(np.prod(list(par.values())))
    return pyconfig.initialize([None, BASE] + RUN + MODEL + ici + [
        f"per_device_batch_size={8 // n}", f"scan_layers={scan}",
        f"base_output_directory={os.path.abspath('samples/gen/.dump-wild/maxtext-out')}"])


def setup(par, scan, unit):
    config = config_for(par, scan, unit)
    devices = jax.devices()[:1] if unit else jax.devices()[:int(np.prod(list(par.values())))]
    mesh = Mesh(maxtext_utils.create_device_mesh(config, devices), config.mesh_axes,
                axis_types=(AxisType.Auto,) * len(config.mesh_axes))
    create_model, abs_model = model_creation_utils.create_nnx_abstract_model(config, mesh)
    tx = optimizers.get_optimizer(config, maxtext_utils.create_learning_rate_schedule(config),
                                  abs_model, mesh=mesh)

    def init_state():
        model = create_model()
        return train_state_nnx.TrainStateNNX(model, nnx.Optimizer(model, tx, wrt=nnx.Param))
    abstract, _, state_sh = maxtext_utils.get_abstract_state(config, mesh, init_state, True)
    with logical_axis_rules(config.logical_axis_rules):
        graphdef, _ = nnx.split(nnx.eval_shape(init_state))
    return config, mesh, init_state, abstract, state_sh, graphdef


def batch(config):
    rng = np.random.default_rng(0)
    shape = (8, config.max_target_length)
    pos = np.broadcast_to(np.arange(shape[1], dtype=np.int32), shape).copy()
    one = np.ones(shape, np.int32)
    toks = rng.integers(0, config.vocab_size, shape, dtype=np.int32)
    tgts = rng.integers(0, config.vocab_size, shape, dtype=np.int32)
    b = {"inputs": toks, "inputs_position": pos, "inputs_segmentation": one,
         "targets": tgts, "targets_position": pos, "targets_segmentation": one}
    shaped = maxtext_utils.get_shaped_batch(config)
    return {k: b[k] for k in shaped}


def inputs(par, scan):
    config, mesh, init_state, _, state_sh, _ = setup(par, scan, True)
    with jax.set_mesh(mesh), logical_axis_rules(config.logical_axis_rules):
        state = jax.jit(lambda: nnx.state(init_state()), out_shardings=state_sh)()
    host = lambda a: a if jax.dtypes.issubdtype(a.dtype, jax.dtypes.prng_key) else np.asarray(a)
    return (jax.tree.map(host, state), batch(config))


def maker(par, scan, train_step):
    def make(mesh):
        unit = mesh.devices.size == 1
        config, mt_mesh, _, _, state_sh, graphdef = setup(par, scan, unit)
        assert list(mt_mesh.devices.flat) == list(mesh.devices.flat), "mesh is not in iota order"
        data_sh = sharding.get_input_data_sharding(config, mt_mesh)
        if train_step:
            params_sh, state_sh = sharding.maybe_update_params_sharding_with_opt(config, state_sh)
            in_state_sh = sharding.build_zero1_input_state_mesh_shardings(config, state_sh, params_sh)
            fn, ins, outs, _, _ = maxtext_utils.get_functional_train_with_signature(
                train.train_step, data_sh, in_state_sh, graphdef, config, params_sh)
        else:
            fn, ins, outs, _, _ = maxtext_utils.get_functional_eval_with_signature(
                train.eval_step, data_sh, state_sh, graphdef, config)
        # metrics (None: left to the partitioner) are replicated scalars here
        rep = NamedSharding(mt_mesh, P())
        outs = (outs[0], rep) if train_step else rep
        ins = (ins[0], {k: ins[1] for k in maxtext_utils.get_shaped_batch(config)})

        @contextlib.contextmanager
        def ctx():
            with jax.set_mesh(mt_mesh), logical_axis_rules(config.logical_axis_rules):
                yield
        return fn, ins, outs, ctx
    return make


def mesh_axes(par):
    """The full MaxText mesh (every axis of base.yml's mesh_axes, major to minor)."""
    names = ["diloco", "data", "stage", "fsdp", "fsdp_transpose", "context", "context_usp_ulysses",
             "context_autoregressive", "tensor", "tensor_sequence", "expert", "autoregressive"]
    return {a: par.get(a, 1) for a in names}


def programs():
    out = []
    for tag, par, scan in (("fsdp8", {"fsdp": 8}, True),
                           ("fsdp2xtensor4", {"fsdp": 2, "tensor": 4}, True),
                           ("data2xtensor4", {"data": 2, "tensor": 4}, True),
                           ("fsdp2xtensor4", {"fsdp": 2, "tensor": 4}, False)):
        for step in (False, True):
            name = f"maxtext.llama2{'-scan' if scan else ''}.{'train' if step else 'eval'}.{tag}"
            out.append(Prog(name, LIB, mesh_axes(par), functools.partial(inputs, par, scan),
                            maker(par, scan, step),
                            note="MaxText mesh: every base.yml axis, size 1 unless named"))
    return out


PROGRAMS = programs()
