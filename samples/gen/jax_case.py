"""What the interpreter's JAX-computed cases (tests/cases/interp/NAME.*) are
made of: NAME.hlo and NAME.hlo.pb (the jitted function lowered), NAME.io.stf
(in.<k> the arguments, out.<k> JAX's outputs; the tensor file format of
samples/README.md) and NAME.VERSIONS. Used by topk_case.py and
linalg_case.py (export.py writes the format too, but importing it re-exports
the corpus).
"""
import importlib.metadata
import os
import struct

import jax
import numpy as np

OUT = "tests/cases/interp"
DTYPE_CODE = {"int32": 4, "float32": 11, "bfloat16": 16}


def stf_bytes(tensors):
    out = [b"STF1", struct.pack("<I", len(tensors))]
    for name, a in tensors:
        nb = name.encode()
        out.append(struct.pack("<I", len(nb)) + nb + struct.pack("<II", DTYPE_CODE[str(a.dtype)], a.ndim))
        out.append(struct.pack("<%dq" % a.ndim, *a.shape))
        raw = np.ascontiguousarray(a).tobytes()
        out.append(struct.pack("<Q", len(raw)) + raw)
    return b"".join(out)


def write_case(name, fn, args):
    """Lowers and runs jax.jit(fn) on args; writes the case NAME."""
    lowered = jax.jit(fn).lower(*args)
    text = lowered.as_text(dialect="hlo", debug_info=False)
    pb = lowered.compiler_ir("hlo").as_serialized_hlo_module_proto()
    outs = jax.jit(fn)(*args)
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, name + ".hlo"), "w") as f:
        f.write(text)
    with open(os.path.join(OUT, name + ".hlo.pb"), "wb") as f:
        f.write(pb)
    tensors = [("in.%d" % k, np.asarray(a)) for k, a in enumerate(args)]
    tensors += [("out.%d" % k, np.asarray(o)) for k, o in enumerate(outs)]
    with open(os.path.join(OUT, name + ".io.stf"), "wb") as f:
        f.write(stf_bytes(tensors))
    with open(os.path.join(OUT, name + ".VERSIONS"), "w") as f:
        f.write("jax %s\njaxlib %s\n" % (importlib.metadata.version("jax"), importlib.metadata.version("jaxlib")))
    return len(outs)
