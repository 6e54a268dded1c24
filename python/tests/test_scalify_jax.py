"""Exports tiny pairs with scalify_jax and checks them with the scalify binary.

Runs only where JAX is installed (skipped with the reason otherwise), and
needs the built binary (env SCALIFY, default build/scalify):

    make test-jax JAX_PYTHON=/path/to/venv/bin/python
    # or: SCALIFY=build/scalify python -m unittest discover -s python/tests -v
"""
import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "python"))

DEVICES = 4
if "jax" not in sys.modules:  # the CPU device count is fixed when jax is imported
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                               " --xla_force_host_platform_device_count=%d" % DEVICES).strip()
    os.environ.setdefault("JAX_PLATFORMS", "cpu")

try:
    import jax
    import jax.numpy as jnp
    from jax.sharding import PartitionSpec as P
    JAX_MISSING = None
except ImportError as e:  # pragma: no cover - depends on the machine
    JAX_MISSING = "JAX is not installed in %s (%s): the exporter tests need it" % (sys.executable, e)

SCALIFY = os.environ.get("SCALIFY") or os.path.join(REPO, "build", "scalify")


def mlp(x, p):
    return jnp.tanh(x @ p["w1"]) @ p["w2"]


def mlp_tp(x, p):
    """Per device: w1 column-parallel, w2 row-parallel, one all-reduce."""
    return jax.lax.psum(jnp.tanh(x @ p["w1"]) @ p["w2"], "tp")


def mlp_tp_no_psum(x, p):
    """The same with the all-reduce forgotten: each device holds a partial sum."""
    return jnp.tanh(x @ p["w1"]) @ p["w2"]


def tiny_args():
    f = jnp.float32
    return (jax.ShapeDtypeStruct((8, 16), f),
            {"w1": jax.ShapeDtypeStruct((16, 32), f), "w2": jax.ShapeDtypeStruct((32, 16), f)})


SPECS = None if JAX_MISSING else (P(), {"w1": P(None, "tp"), "w2": P("tp", None)})


@unittest.skipIf(JAX_MISSING, JAX_MISSING or "")
@unittest.skipUnless(os.access(SCALIFY, os.X_OK), "no scalify binary at %s (make, or set SCALIFY)" % SCALIFY)
class ExportTest(unittest.TestCase):
    def setUp(self):
        import scalify_jax
        self.sj = scalify_jax
        self.tmp = tempfile.TemporaryDirectory(prefix="scalify-jax-test-")
        self.out = self.tmp.name

    def tearDown(self):
        self.tmp.cleanup()

    def scalify(self, *args):
        r = subprocess.run([SCALIFY] + list(args), capture_output=True, text=True)
        return r.returncode, r.stdout + r.stderr

    def check_manifest(self):
        traces = os.path.join(self.out, "traces")
        code, log = self.scalify("check", "--manifest", os.path.join(self.out, "manifest.json"),
                                 "--out-dir", traces)
        with open(os.path.join(traces, "index.json")) as f:
            verdicts = {p["name"]: p["verdict"] for p in json.load(f)["pairs"]}
        return code, verdicts, log

    def export_smap(self, name, body):
        return self.sj.export_pair(mlp, tiny_args(), mesh={"tp": DEVICES}, name=name, out_dir=self.out,
                                   distributed_fn=body, in_specs=SPECS, out_specs=P())

    def test_gspmd_pair_verified(self):
        e = self.sj.export_pair(mlp, tiny_args(), mesh={"tp": DEVICES}, name="mlp.gspmd", out_dir=self.out,
                                in_shardings=SPECS, out_shardings=P())
        self.assertEqual(e["kind"], "gspmd")
        self.assertEqual(e["relations"], "auto")
        with open(os.path.join(self.out, e["distributed"]["hlo"])) as f:
            self.assertIn("num_partitions=%d" % DEVICES, f.readline())
        code, verdicts, log = self.check_manifest()
        self.assertEqual((code, verdicts), (0, {"mlp.gspmd": "verified"}), log)

    def test_shard_map_pairs(self):
        self.export_smap("mlp.tp", mlp_tp)
        self.export_smap("mlp.tp.bug.no-psum", mlp_tp_no_psum)
        with open(os.path.join(self.out, "mlp.tp.relations.json")) as f:
            rel = json.load(f)
        # parameter numbers in JAX's flattened order, names from the pytree paths
        self.assertEqual(rel["mesh"], {"tp": DEVICES})
        self.assertEqual([(i["param"], i["name"], i["view"]) for i in rel["inputs"]],
                         [(0, "x", "dup"), (1, "p.w1", "shard(1,tp)"), (2, "p.w2", "shard(0,tp)")])
        self.assertEqual(rel["outputs"], [{"output": 0, "name": "result", "view": "dup"}])
        with open(os.path.join(self.out, "manifest.json")) as f:
            man = json.load(f)
        self.assertEqual([p["name"] for p in man["pairs"]], ["mlp.tp", "mlp.tp.bug.no-psum"])
        self.assertEqual(man["generator"]["jax"], jax.__version__)
        code, verdicts, log = self.check_manifest()
        self.assertEqual(verdicts["mlp.tp"], "verified", log)
        self.assertNotEqual(verdicts["mlp.tp.bug.no-psum"], "verified", log)
        self.assertEqual(code, 1, log)
        # the same verdicts with relations read from the distributed program
        for name, want in (("mlp.tp", 0), ("mlp.tp.bug.no-psum", 1)):
            code, log = self.scalify("check", "--baseline", os.path.join(self.out, name + ".baseline.hlo.pb"),
                                     "--distributed", os.path.join(self.out, name + ".dist.hlo.pb"),
                                     "--auto-relations", "-o", os.path.join(self.out, name + ".auto.json"))
            self.assertEqual(code, want, log)
        # and the report renders
        code, log = self.scalify("report", os.path.join(self.out, "traces", "mlp.tp.trace.json"),
                                 os.path.join(self.out, "traces", "mlp.tp.bug.no-psum.trace.json"),
                                 "-o", os.path.join(self.out, "site"))
        self.assertEqual(code, 0, log)
        self.assertTrue(os.path.exists(os.path.join(self.out, "site", "index.html")))

    def test_cli(self):
        src = os.path.join(self.out, "mine.py")
        with open(src, "w") as f:
            f.write("import jax, jax.numpy as jnp\n"
                    "from jax.sharding import PartitionSpec as P\n\n"
                    "def f(x, w):\n    return jnp.sin(x @ w)\n\n"
                    "def pair():\n"
                    "    s = jax.ShapeDtypeStruct\n"
                    "    return dict(fn=f, args=(s((8, 4), jnp.float32), s((4, 6), jnp.float32)), mesh={'dp': 2},\n"
                    "                in_shardings=(P('dp'), P()), out_shardings=P('dp'))\n")
        env = dict(os.environ, PYTHONPATH=os.path.join(REPO, "python"))
        env.pop("XLA_FLAGS", None)
        r = subprocess.run([sys.executable, "-m", "scalify_jax", "--devices", "2", src + ":pair",
                            "--name", "cli", "--out-dir", self.out], capture_output=True, text=True, env=env)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("cli: gspmd pair written to", r.stdout)
        code, verdicts, log = self.check_manifest()
        self.assertEqual((code, verdicts), (0, {"cli": "verified"}), log)
        r = subprocess.run([sys.executable, "-m", "scalify_jax", "--devices", "2", src + ":nothing"],
                           capture_output=True, text=True, env=env)
        self.assertEqual(r.returncode, 2)
        self.assertIn("has no function nothing", r.stderr)

    def test_warm_compilation_cache(self):
        """A persistent cache that already holds the program (MaxText turns one
        on) would skip every pass and dump nothing; the export turns it off."""
        from jax.sharding import NamedSharding
        keys = ("jax_compilation_cache_dir", "jax_persistent_cache_min_compile_time_secs",
                "jax_persistent_cache_min_entry_size_bytes")
        old = {k: getattr(jax.config, k) for k in keys}
        cache = os.path.join(self.out, "cache")
        try:
            for k, v in zip(keys, (cache, 0, 0)):
                jax.config.update(k, v)
            self.sj._export._reset_cache()
            m = self.sj._export.make_mesh({"tp": DEVICES})
            sh = jax.tree_util.tree_map(lambda s: NamedSharding(m, s), SPECS)
            jax.jit(mlp, in_shardings=sh, out_shardings=NamedSharding(m, P())).lower(*tiny_args()).compile()
            self.assertTrue(os.listdir(cache), "the cache was not written: nothing to test")
            self.sj.export_pair(mlp, tiny_args(), mesh=m, name="cached", out_dir=self.out,
                                in_shardings=SPECS, out_shardings=P())
            self.assertTrue(os.path.exists(os.path.join(self.out, "cached.dist.hlo.pb")))
        finally:
            for k, v in old.items():
                jax.config.update(k, v)
            self.sj._export._reset_cache()

    def test_compilation_cache_restored(self):
        name = "jax_enable_compilation_cache"
        before = getattr(jax.config, name)
        with self.sj._export.no_compilation_cache():
            self.assertFalse(getattr(jax.config, name))
        self.assertEqual(getattr(jax.config, name), before)

    def test_pieces_for_own_exporters(self):
        """The public pieces a generator writing its own files uses give what
        export_pair writes: the same relations document, and modules before
        and after partitioning that check as a pair."""
        from jax.sharding import NamedSharding
        m = self.sj.make_mesh({"tp": DEVICES})
        self.assertEqual(list(m.devices.flat), jax.devices()[:DEVICES])
        self.assertEqual(dict(m.shape), {"tp": DEVICES})
        names = self.sj.leaf_names(mlp, tiny_args())
        self.assertEqual(names, ["x", "p.w1", "p.w2"])
        specs = jax.tree_util.tree_leaves(SPECS, is_leaf=lambda x: isinstance(x, P))
        doc = self.sj.relations_doc({"tp": DEVICES}, names, [self.sj.spec_view(s) for s in specs],
                                    ["result"], [self.sj.spec_view(P())])
        self.export_smap("mlp.tp", mlp_tp)
        with open(os.path.join(self.out, "mlp.tp.relations.json")) as f:
            self.assertEqual(doc, json.load(f))
        sh = jax.tree_util.tree_map(lambda s: NamedSharding(m, s), SPECS)
        lo = jax.jit(mlp, in_shardings=sh, out_shardings=NamedSharding(m, P())).lower(*tiny_args())
        base = self.sj.before_partitioning(lo)
        dist = self.sj.after_partitioning(lo)
        self.assertTrue(base[0].startswith("HloModule"), base[0][:80])
        self.assertIn("num_partitions=%d" % DEVICES, dist[0].splitlines()[0])
        paths = []
        for side, (text, pb) in (("baseline", base), ("dist", dist)):
            for ext, data in (("hlo", text.encode()), ("hlo.pb", pb)):
                with open(os.path.join(self.out, "own.%s.%s" % (side, ext)), "wb") as f:
                    f.write(data)
            paths.append(os.path.join(self.out, "own.%s.hlo.pb" % side))
        code, log = self.scalify("check", "--baseline", paths[0], "--distributed", paths[1],
                                 "--auto-relations", "-o", os.path.join(self.out, "own.json"))
        self.assertEqual(code, 0, log)

    def test_bad_requests_say_why(self):
        with self.assertRaisesRegex(self.sj.ExportError, "not both or neither"):
            self.sj.export_pair(mlp, tiny_args(), mesh={"tp": DEVICES}, name="x", out_dir=self.out)
        with self.assertRaisesRegex(self.sj.ExportError, "does not divide into 3 parts"):
            self.sj.spec_view(P("tp"), (8,), {"tp": 3})
        with self.assertRaisesRegex(self.sj.ExportError, "needs 64 devices"):
            self.sj.export_pair(mlp, tiny_args(), mesh={"tp": 64}, name="x", out_dir=self.out,
                                in_shardings=SPECS)


if __name__ == "__main__":
    unittest.main()
