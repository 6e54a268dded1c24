"""python -m scalify_jax [--devices N] [--name NAME] [--out-dir DIR] FILE.py:FUNCTION

Calls FUNCTION() from FILE.py, which returns the keyword arguments of
scalify_jax.export_pair (fn, args, mesh, in_shardings or in_specs, ...), and
exports that pair. --devices N gives JAX N CPU devices (XLA_FLAGS is set
before jax is imported); --name and --out-dir fill in or override what the
function returns (default name: FUNCTION, default folder: scalify-out).
"""
import argparse
import os
import sys
import types


def _load(path):
    """Runs FILE.py as a module whose code file name is the path as given, so
    the HLO's source locations read as the user wrote them."""
    mod = types.ModuleType(os.path.splitext(os.path.basename(path))[0])
    mod.__file__ = path
    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
    with open(path) as f:
        code = compile(f.read(), path, "exec")
    exec(code, mod.__dict__)
    return mod


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m scalify_jax", description=__doc__.split("\n\n")[1],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("target", metavar="FILE.py:FUNCTION", nargs="?")
    ap.add_argument("--devices", type=int, help="number of CPU devices to give JAX (sets XLA_FLAGS)")
    ap.add_argument("--name", help="pair name (file names, manifest entry)")
    ap.add_argument("--out-dir", default=None, help="folder for the files and manifest.json (scalify-out)")
    ap.add_argument("--version", action="store_true", help="print this package's and JAX's versions")
    a = ap.parse_args(argv)
    if a.devices:
        if "jax" in sys.modules:
            ap.error("--devices must take effect before jax is imported")
        flags = os.environ.get("XLA_FLAGS", "")
        os.environ["XLA_FLAGS"] = (flags + " --xla_force_host_platform_device_count=%d" % a.devices).strip()
        os.environ.setdefault("JAX_PLATFORMS", "cpu")
    from . import __version__
    from ._export import ExportError, export_pair, versions
    if a.version:
        v = versions()
        print("scalify_jax %s (jax %s, jaxlib %s)" % (__version__, v["jax"], v["jaxlib"]))
        return 0
    path, sep, func = (a.target or "").rpartition(":")
    if not sep or not path.endswith(".py"):
        ap.error("the target is FILE.py:FUNCTION")
    mod = _load(path)
    factory = getattr(mod, func, None)
    if not callable(factory):
        ap.error("%s has no function %s" % (path, func))
    kw = dict(factory())
    if a.name:
        kw["name"] = a.name
    kw.setdefault("name", func)
    if a.out_dir:
        kw["out_dir"] = a.out_dir
    kw.setdefault("out_dir", "scalify-out")
    fn = kw.pop("fn")
    args = kw.pop("args")
    try:
        entry = export_pair(fn, args, **kw)
    except ExportError as e:
        print("scalify_jax: %s" % e, file=sys.stderr)
        return 2
    out = kw["out_dir"]
    v = versions()
    print("%s: %s pair written to %s (jax %s, jaxlib %s)" % (entry["name"], entry["kind"], out, v["jax"], v["jaxlib"]))
    print("next: scalify check --manifest %s --out-dir %s" % (os.path.join(out, "manifest.json"),
                                                            os.path.join(out, "traces")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
