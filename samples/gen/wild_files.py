"""File helpers of the samples/wild/ exporters (no JAX or torch imports): writing
HLO files, picking modules out of an XLA pass dump, merging manifest.json."""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dumpfiles  # noqa: E402  (samples/gen/dumpfiles.py)

OUT = "samples/wild"


def put(rel, data):
    """Write bytes under samples/wild/ (dumpfiles.put: gzipped when large);
    returns the path relative to samples/wild/."""
    return dumpfiles.put(OUT, rel, data)


def put_pair(rel_base, text, pb):
    return {"hlo": put(rel_base + ".hlo", text.encode()), "pb": put(rel_base + ".hlo.pb", pb)}


def from_dump(d, stage, prefix=""):
    """(text, proto bytes) of the one module in dump folder d whose file names hold
    `stage` (e.g. "after_spmd-partitioning", "before_optimizations") and start with
    `prefix`."""
    picked = {}
    for f in sorted(os.listdir(d)):
        if stage in f and f.startswith(prefix):
            for ext in (".txt", ".hlo.pb"):
                if f.endswith(ext):
                    assert ext not in picked, (stage, prefix, os.listdir(d))
                    picked[ext] = os.path.join(d, f)
    assert len(picked) == 2, (stage, prefix, os.listdir(d))
    with open(picked[".txt"]) as f:
        text = f.read()
    with open(picked[".hlo.pb"], "rb") as f:
        pb = f.read()
    return text, pb


def write_manifest(entries, done, only, libs, script="samples/gen/run_wild.sh"):
    """Merge `entries` into samples/wild/manifest.json: pairs of families (`config`)
    in `done` are replaced unless `only` (a partial run) is set, other families' kept."""
    mpath = os.path.join(OUT, "manifest.json")
    old = {"pairs": [], "generator": {}}
    if os.path.exists(mpath):
        with open(mpath) as f:
            old = json.load(f)
    names = {e["name"] for e in entries}
    keep = [e for e in old["pairs"] if e["name"] not in names and (only or e["config"] not in done)]
    pairs = sorted(keep + entries, key=lambda e: e["name"])
    gen = {k: v for k, v in old["generator"].items() if k != "script"}
    gen.update(libs)
    for e in pairs:
        gen[e["library"]["name"]] = e["library"]["version"]
    doc = {"scalify_manifest": 1, "generator": dict(sorted(gen.items()), script=script),
           "pairs": pairs}
    with open(mpath, "w") as f:
        f.write(json.dumps(doc, indent=1) + "\n")
    return len(pairs)
