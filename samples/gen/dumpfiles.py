"""Files of the GSPMD exporters: deterministic gzip of large files, and the module
right after XLA's spmd-partitioning pass. bigtrain.py uses it; wild.py still has
its own copies, since moving them would shift the wild.py line numbers that the
stack frames of every committed samples/wild dump record (do it at the next
regeneration of that corpus)."""
import gzip
import io
import os
import shutil

GZIP_OVER = 200 * 1024


def put(out_dir, rel, data):
    """Write bytes under out_dir, gzipped without name or mtime when larger than
    GZIP_OVER; returns the path relative to out_dir."""
    if len(data) > GZIP_OVER:
        buf = io.BytesIO()
        with gzip.GzipFile(filename="", mode="wb", fileobj=buf, compresslevel=9, mtime=0) as g:
            g.write(data)
        data, rel = buf.getvalue(), rel + ".gz"
    path = os.path.join(out_dir, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)
    return rel


def after_partitioner(lowered, dump_dir):
    """(text, HloProto bytes) of the module right after the spmd-partitioning pass;
    compiles `lowered` with its dump in dump_dir (removed afterwards)."""
    shutil.rmtree(dump_dir, ignore_errors=True)
    lowered.compile(compiler_options={
        "xla_dump_to": dump_dir, "xla_dump_hlo_pass_re": "spmd-partitioning",
        "xla_dump_hlo_as_text": True, "xla_dump_hlo_as_proto": True})
    picked = {}
    for f in os.listdir(dump_dir):
        if "after_spmd-partitioning" in f:
            for ext in (".txt", ".hlo.pb"):
                if f.endswith(ext):
                    assert ext not in picked, os.listdir(dump_dir)
                    picked[ext] = os.path.join(dump_dir, f)
    assert len(picked) == 2, os.listdir(dump_dir)
    with open(picked[".txt"]) as f:
        text = f.read()
    with open(picked[".hlo.pb"], "rb") as f:
        pb = f.read()
    shutil.rmtree(dump_dir, ignore_errors=True)
    return text, pb
