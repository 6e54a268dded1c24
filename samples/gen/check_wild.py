"""Runs `scalify check --auto-relations` on every pair of samples/wild/manifest.json,
text and protobuf forms, with --witness, and prints a Markdown table: the verdict of
each form and the first finding (kind: message) or the unverified reason, or the
first line of a bad-input / internal error. Needs only python3 and build/scalify.

    python3 samples/gen/check_wild.py [--only SUBSTR] [--timeout SECONDS] > table.md
"""
import json
import os
import subprocess
import sys
import tempfile

ROOT = "samples/wild"
SCALIFY = os.environ.get("SCALIFY", "build/scalify")
ARGS = sys.argv[1:]
ONLY = [ARGS[i + 1] for i, a in enumerate(ARGS) if a == "--only"]
TIMEOUT = next((int(ARGS[i + 1]) for i, a in enumerate(ARGS) if a == "--timeout"), 600)
VERDICT = {0: "verified", 1: "mismatch/unverified", 2: "bad input", 3: "internal error"}


def first_line(text):
    return next((ln.strip() for ln in text.splitlines() if ln.strip()), "")


def one(pair, form):
    b = os.path.join(ROOT, pair["baseline"][form])
    d = os.path.join(ROOT, pair["distributed"][form])
    with tempfile.TemporaryDirectory() as tmp:
        trace = os.path.join(tmp, "trace.json")
        cmd = [SCALIFY, "check", "--baseline", b, "--distributed", d, "--auto-relations",
               "--witness", "-j", "1", "-o", trace]
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            return "timeout", f"no answer in {TIMEOUT} s"
        if not os.path.exists(trace) or p.returncode >= 2:
            return VERDICT.get(p.returncode, f"exit {p.returncode}"), \
                first_line(p.stderr) or first_line(p.stdout)
        t = json.load(open(trace))
    verdict = t.get("verdict", "?")
    if t.get("findings"):
        f = t["findings"][0]
        return verdict, f"{f.get('kind')}: {f.get('message')}"
    reasons = [s.get("reason") for s in t.get("segments", []) if s.get("reason")]
    return verdict, (reasons[0] if reasons else "")


def main():
    man = json.load(open(os.path.join(ROOT, "manifest.json")))
    print("| pair | text | pb | first finding / reason (text; pb when different) |")
    print("|---|---|---|---|")
    for pair in man["pairs"]:
        if ONLY and not any(o in pair["name"] for o in ONLY):
            continue
        vt, wt = one(pair, "hlo")
        vp, wp = one(pair, "pb")
        why = wt if wt == wp else f"text: {wt} / pb: {wp}"
        print(f"| {pair['name']} | {vt} | {vp} | {why.replace('|', '/')} |", flush=True)


main()
