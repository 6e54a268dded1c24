"""Shared by the generators of samples/fresh and samples/fresh2 (fresh.py,
fresh2.py): export pairs with scalify_jax.export_pair, run each under JAX on
the generator's seeded inputs, and write what the manifest records beyond the
export (numerics, bug id, kinds and source lines, notes)."""
import inspect, json, os, re
import numpy as np
import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec as P
from scalify_jax import export_pair
from scalify_jax._export import make_mesh, _json_lines
from wild import max_abs_diff

jax.config.update("jax_enable_compilation_cache", False)
# Source paths in the dumps: relative to site-packages (as wild.py has them)
# or to the repository (the current directory), never where it was checked out.
jax.config.update("jax_hlo_source_file_canonicalization_regex",
                  r"^.*/site-packages/|^" + re.escape(os.getcwd().rstrip("/") + "/"))


def seeded(seed):
    """A generator's inputs: its rng, R(*shape) normal (times scale, of dtype
    dt) and I(lo, hi, *shape) int32 drawn from it in call order."""
    rng = np.random.default_rng(seed)

    def R(*s, scale=1.0, dt=np.float32):
        return (rng.standard_normal(s) * scale).astype(dt)

    def I(lo, hi, *s):
        return rng.integers(lo, hi, s).astype(np.int32)
    return rng, R, I


def mse(a, b):
    return jnp.mean(jnp.square(a - b))


def np_tree(t):
    return jax.tree.map(np.asarray, t)


def state_specs(state, pspecs):
    """A leaf of an optimizer state under the dict keys of a parameter gets
    that parameter's spec (when it has as many dims), any other leaf P()."""
    flat = {tuple(k.key for k in path): sp for path, sp in
            jax.tree_util.tree_flatten_with_path(pspecs, is_leaf=lambda x: isinstance(x, P))[0]}

    def spec(path, leaf):
        keys = tuple(k.key for k in path if isinstance(k, jax.tree_util.DictKey))
        for n in range(len(keys)):
            if keys[n:] in flat and np.ndim(leaf) >= len(flat[keys[n:]]):
                return flat[keys[n:]]
        return P()
    return jax.tree_util.tree_map_with_path(spec, state)


def is_spec(s):
    return s is None or isinstance(s, P)


def shardings(m, specs):
    return jax.tree.map(lambda s: NamedSharding(m, s), specs, is_leaf=is_spec)


def put(m, args, specs):
    return jax.tree.map(lambda s, a: jax.tree.map(lambda x: jax.device_put(x, NamedSharding(m, s)), a),
                        tuple(specs), tuple(args), is_leaf=is_spec)


def bug_lines(make, bug, script):
    """The lines of make that test for bug and, when such a line opens a
    block (ends in ':'), the line after it, as locations in script."""
    lines, first = inspect.getsourcelines(make)
    at = set()
    for i, text in enumerate(lines):
        if '"%s"' % bug in text:
            at.add(i)
            if text.rstrip().endswith(":"):
                at.add(i + 1)
    return [{"file": script, "line": first + i} for i in sorted(at)]


class Corpus:
    """Pairs exported into out (a folder with manifest.json) by script, whose
    run script is run_script; only: name substrings to export (all if empty)."""

    def __init__(self, out, script, run_script, only):
        self.out, self.script, self.run_script, self.only = out, script, run_script, list(only)
        self.extra = {}  # name -> manifest fields added after export

    def wanted(self, name):
        return not self.only or any(o in name for o in self.only)

    def record(self, name, fn, args, run, note):
        ref = jax.jit(fn)(*args)
        got = run()
        # the largest finite magnitude (an output may hold -inf, e.g. a masked
        # log_softmax; strict JSON has no Infinity)
        fin = [np.abs(np.asarray(x, np.float64)) for x in jax.tree.leaves(ref) if np.size(x)]
        big = [float(np.max(a[np.isfinite(a)])) for a in fin if np.isfinite(a).any()]
        self.extra[name] = {"numerics": {"max_abs_diff": max_abs_diff(ref, got), "max_abs_ref": max(big + [0.0])}}
        if note:
            self.extra[name]["note"] = note

    def gspmd(self, name, mesh, in_sh, out_sh, fn, args, note=None, expected="verified"):
        """A GSPMD pair: fn under jax.jit with in/out shardings (PartitionSpecs); correct unless the
        partitioner's output is not (expected="mismatch", said in note, shown by numerics)."""
        if not self.wanted(name):
            return
        print("==", name, flush=True)
        export_pair(fn, args, mesh=mesh, name=name, out_dir=self.out, in_shardings=in_sh, out_shardings=out_sh,
                    expected=expected)
        m = make_mesh(mesh)
        j = jax.jit(fn, in_shardings=shardings(m, tuple(in_sh)), out_shardings=shardings(m, out_sh))
        self.record(name, fn, args, lambda: j(*put(m, args, in_sh)), note)

    def smap(self, family, mesh, make, in_specs, out_specs, fn, args, bugs=(), check_vma=False, note=None):
        """A shard_map family: make(None) is the correct per-device body of the
        single-device program fn, make(b) the body with bug b; bugs lists
        (b, kinds)."""
        for bug, kinds in [(None, None)] + list(bugs):
            name = family + (".bug." + bug if bug else "")
            if not self.wanted(name):
                continue
            print("==", name, flush=True)
            body = make(bug)
            export_pair(fn, args, mesh=mesh, name=name, out_dir=self.out, in_specs=in_specs, out_specs=out_specs,
                        distributed_fn=body, check_vma=check_vma, expected="mismatch" if bug else "verified")
            m = make_mesh(mesh)
            d = jax.jit(jax.shard_map(body, mesh=m, in_specs=tuple(in_specs), out_specs=out_specs, check_vma=check_vma),
                        out_shardings=shardings(m, out_specs))
            self.record(name, fn, args, lambda: d(*put(m, args, in_specs)), note)
            if bug:
                self.extra[name]["bug"] = {"id": bug, "kinds": kinds, "locations": bug_lines(make, bug, self.script)}

    def known_miss(self, name, why):
        """Marks bug variant name as one execution does not show yet (why):
        the corpus test asserts it stays unverified and prints it as open."""
        if name in self.extra:
            self.extra[name]["known_miss"] = {"with_witness": why}

    def known_false_alarm(self, name, why):
        """Marks correct pair name as one the rules alone still report a
        mismatch on (why, an open defect of the checker): the corpus test
        asserts it stays one without --witness and prints it as open."""
        if name in self.extra:
            self.extra[name]["known_false_alarm"] = {"without_witness": why}

    def finish(self):
        """Adds the recorded fields to the manifest export_pair wrote."""
        path = os.path.join(self.out, "manifest.json")
        doc = json.load(open(path))
        for e in doc["pairs"]:
            e.pop("generator", None)
            e.update(self.extra.get(e["name"], {}))
        doc["generator"]["script"] = self.run_script
        open(path, "w").write(_json_lines(doc))
        print(len(self.extra), "exported;", len(doc["pairs"]), "in manifest")
