"""keras-hub causal LMs (Keras 3 on JAX) built from tiny configs (random weights, no
presets): Llama and Gemma with their own get_layout_map (keras.distribution
ModelParallel on a batch x model mesh), Llama under DataParallel, and Mixtral with a
LayoutMap that places its experts on the model axis (expert parallelism). Forward
pass (model.stateless_call) and a stateless training step (stateless_call, optax
adamw) jitted with the variables' own shardings."""
import contextlib
import functools

import jax
import keras
import keras_hub
import numpy as np
import optax
from jax.sharding import NamedSharding, PartitionSpec as P

LIB = ("keras-hub", version("keras-hub"))
NOTE = f"keras {version('keras')}, backend jax"
VOCAB, BATCH, SEQ = 128, 8, 16
TX = optax.adamw(1e-3, weight_decay=0.1)

CONFIGS = {
    "llama": (keras_hub.models.LlamaBackbone, keras_hub.models.LlamaCausalLM,
              dict(vocabulary_size=VOCAB, num_layers=2, num_query_heads=8, num_key_value_heads=4,
                   hidden_dim=64, intermediate_dim=128)),
    "gemma": (keras_hub.models.GemmaBackbone, keras_hub.models.GemmaCausalLM,
              dict(vocabulary_size=VOCAB, num_layers=2, num_query_heads=4, num_key_value_heads=4,
                   hidden_dim=64, intermediate_dim=256, head_dim=16)),
    "mixtral": (keras_hub.models.MixtralBackbone, keras_hub.models.MixtralCausalLM,
                dict(vocabulary_size=VOCAB, num_layers=2, num_query_heads=8, num_key_value_heads=4,
                     hidden_dim=64, intermediate_dim=64, num_experts=4, top_k=2)),
}


def mixtral_layout_map(mesh, model="model", data="batch"):
    """Attention as in LlamaBackbone.get_layout_map; each expert's weights on one
    slice of the model axis (experts dimension first)."""
    lm = keras.distribution.LayoutMap(mesh)
    lm["token_embedding/embeddings"] = (model, None)
    lm["token_embedding/reverse_embeddings"] = (None, model)
    lm["transformer_layer.*self_attention.*(query|key|value).kernel"] = (None, model, None)
    lm["transformer_layer.*attention_output.kernel"] = (model, None, None)
    lm["transformer_layer.*experts/expert_feedforward.*"] = (model, None, None)
    return lm


def distribution(kind, arch, jmesh):
    """The keras.distribution for a jax mesh (axes 'batch' and, for ModelParallel,
    'model')."""
    dmesh = keras.distribution.DeviceMesh(jmesh.devices.shape, jmesh.axis_names,
                                          devices=list(jmesh.devices.flat))
    if kind == "dp":
        return keras.distribution.DataParallel(device_mesh=dmesh)
    if arch == "mixtral":
        layout = mixtral_layout_map(dmesh)
    else:
        layout = CONFIGS[arch][0].get_layout_map(dmesh, model_parallel_dim_name="model",
                                                  data_parallel_dim_name="batch")
    return keras.distribution.ModelParallel(layout_map=layout, batch_dim_name="batch")


def build(arch, dist):
    backbone_cls, lm_cls, cfg = CONFIGS[arch]
    keras.utils.set_random_seed(0)
    with dist.scope():
        return lm_cls(backbone=backbone_cls(**cfg), preprocessor=None)


def inputs(arch, kind, mesh_axes, train):
    model = build(arch, distribution(kind, arch, mesh_of(mesh_axes, unit=True)))
    tv = [np.asarray(v.value) for v in model.trainable_variables]
    ntv = [np.asarray(v.value) for v in model.non_trainable_variables]
    rng = np.random.default_rng(0)
    x = {"token_ids": rng.integers(0, VOCAB, (BATCH, SEQ), dtype=np.int32),
         "padding_mask": np.ones((BATCH, SEQ), np.int32)}
    if not train:
        return (tv, ntv, x)
    opt = jax.tree.map(np.asarray, TX.init(tv))
    return (tv, ntv, opt, x, rng.integers(0, VOCAB, (BATCH, SEQ), dtype=np.int32))


def maker(arch, kind, train):
    def make(mesh):
        dist = distribution(kind, arch, mesh)
        model = build(arch, dist)
        shs = [v.value.sharding for v in model.variables]
        # keras's own jax mesh (a one-device mesh leaves variables on a single device)
        kmesh = next((s.mesh for s in shs if isinstance(s, NamedSharding)), mesh)
        named = lambda spec: NamedSharding(kmesh, spec)
        of = lambda vs: [v.value.sharding if isinstance(v.value.sharding, NamedSharding)
                         else named(P()) for v in vs]
        tv_sh, ntv_sh = of(model.trainable_variables), of(model.non_trainable_variables)
        data_sh = named(P("batch", None))
        x_sh = {"token_ids": data_sh, "padding_mask": data_sh}
        logits_sh = named(P("batch", None, None))

        @contextlib.contextmanager
        def ctx():
            with dist.scope():
                yield

        def forward(tv, ntv, x):
            logits, _ = model.stateless_call(tv, ntv, x)
            return logits

        def train_step(tv, ntv, opt, x, targets):
            def loss_fn(tv):
                logits, _ = model.stateless_call(tv, ntv, x)
                return optax.softmax_cross_entropy_with_integer_labels(logits, targets).mean()
            loss, grads = jax.value_and_grad(loss_fn)(tv)
            updates, opt = TX.update(grads, opt, tv)
            return optax.apply_updates(tv, updates), opt, loss

        if not train:
            return forward, (tv_sh, ntv_sh, x_sh), logits_sh, ctx
        opt_abs = jax.eval_shape(TX.init, [jax.ShapeDtypeStruct(v.shape, v.dtype)
                                          for v in model.trainable_variables])
        opt_sh = _mirror(opt_abs, tv_sh, named(P()))
        return (train_step, (tv_sh, ntv_sh, opt_sh, x_sh, data_sh),
                (tv_sh, opt_sh, named(P())), ctx)
    return make


def _mirror(opt_abs, param_sh, scalar_sh):
    """Shardings for an optax state: every list shaped like the parameters takes the
    parameters' shardings, other leaves are replicated."""
    n = len(param_sh)

    def walk(node):
        if isinstance(node, list) and len(node) == n:
            return list(param_sh)
        if isinstance(node, tuple) and hasattr(node, "_fields"):
            return type(node)(*[walk(c) for c in node])
        if isinstance(node, (tuple, list)):
            return type(node)(walk(c) for c in node)
        return scalar_sh
    return walk(opt_abs)


def programs():
    out = []
    for arch, kind, mesh in (("llama", "mp", {"batch": 2, "model": 4}),
                             ("llama", "dp", {"batch": 8}),
                             ("gemma", "mp", {"batch": 2, "model": 4}),
                             ("mixtral", "mp", {"batch": 2, "model": 4})):
        tag = "x".join(f"{a}{n}" for a, n in mesh.items())
        par = {"mp": "ep" if arch == "mixtral" else "layoutmap", "dp": "dp"}[kind]
        for train in (False, True):
            name = f"keras.{arch}.{'train' if train else 'fwd'}.{par}.{tag}"
            out.append(Prog(name, LIB, mesh, functools.partial(inputs, arch, kind, mesh, train),
                            maker(arch, kind, train), note=NOTE))
    return out


PROGRAMS = programs()
