"""Files of the GSPMD exporters: deterministic gzip of large files. bigtrain.py
uses it (the module after XLA's spmd-partitioning pass comes from
python/scalify_jax, after_partitioning)."""
import gzip
import io
import os

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

