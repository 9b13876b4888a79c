#!/usr/bin/env python3
"""Renders bench/results/*.json into docs/benchmarks.md and PNG charts
(gnuplot) in docs/benchmarks/. Standard library only.

Every figure in the tables is a median over the repeats of one `make bench`
run, and every ratio is against a baseline measured in that same run: the
store's own limit (curl, 16 parallel GETs) for cold figures, local disk for
warm ones (for Cistern's warm large files, a direct read of its cached
bytes too), and the peers for Cistern's targets.
Usage: report.py [--results DIR] [--out docs/benchmarks.md] [--notes FILE]
"""
import argparse
import datetime
import glob
import json
import os
import platform
import re
import shutil
import subprocess
import sys

ORDER = ["local", "copyfirst", "s3fs", "rclone", "cistern", "cistern+load"]
LABEL = {
    "local": "local disk (baseline)",
    "copyfirst": "copy first (rclone copy, 16 transfers)",
    "s3fs": "s3fs (use_cache, 16 parallel)",
    "rclone": "rclone mount (vfs full)",
    "cistern": "Cistern",
    "cistern+load": "Cistern + `cistern load`",
}
CATEGORY = {
    "local": "baseline",
    "copyfirst": "duplicate to local storage first",
    "s3fs": "access the store directly",
    "rclone": "access the store directly",
    "cistern": "orchestrate with Cistern",
    "cistern+load": "orchestrate with Cistern",
}
UNIT = {"seq": "MB/s", "small": "files/s", "meta": "stats/s"}
TITLE = {
    "large": "1. Large sequential files",
    "small": "2. Small files",
    "meta": "3. Metadata: find + stat",
    "train-files": "4a. Training simulation, small files (ImageNet-like)",
    "train-shards": "4b. Training simulation, large shards (WebDataset-like)",
    "master-ls": "5. Master: ls -R against a plain ListObjectsV2 walk",
    "ns-scale": "6. Master namespace scale: lookups over a 10-million-inode LMDB",
    "worker": "7. Worker: remote read of cached blocks, cold fetch",
    "fuse-warm": "8. FUSE: warm and hot sequential reads, warm stat",
    "preload": "9. Preload: cistern load into 3 workers",
    "gpu-train": "10. GPU training through the mount (PyTorch, bench/gpu-train.sh)",
}


def sh(cmd):
    try:
        return subprocess.run(cmd, shell=True, capture_output=True, text=True,
                              timeout=20).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return ""


def builds_measured(src, results):
    """The Cistern commits the run measured, as bench/run-all.sh recorded them
    in builds.txt (several when BENCH_KEEP=1 added to an earlier run); the
    source tree's HEAD, so marked, for results no run-all.sh recorded."""
    try:
        with open(os.path.join(results, "builds.txt")) as f:
            seen = [line.strip() for line in f if line.strip()]
        if seen:
            return ", ".join(seen)
    except OSError:
        pass
    head = sh(f"git -C {src} rev-parse --short HEAD") or "unknown"
    return f"{head} (HEAD when rendered; the run recorded no build)"


def machine(src, results):
    cpu = sh("lscpu | sed -n 's/^Model name: *//p' | head -1") or platform.processor()
    mem = sh("free -g | awk '/^Mem:/ {print $2}'")
    disk = sh(f"df -h {src} | awk 'NR==2 {{print $1\" (\"$2\")\"}}'")
    s3rver = ""
    try:
        with open(os.path.join(src, "tests/node/package.json")) as f:
            s3rver = json.load(f)["dependencies"].get("s3rver", "")
    except (OSError, ValueError, KeyError):
        pass
    return [
        ("CPU", f"{cpu}, {os.cpu_count()} cores"),
        ("memory", f"{mem} GiB"),
        ("disk", disk),
        ("kernel", platform.release()),
        ("Cistern", builds_measured(src, results)),
        ("s3rver", s3rver),
        ("s3fs", sh("s3fs --version 2>&1 | head -1 | sed 's/Amazon Simple Storage Service File System //'")),
        ("rclone", sh("rclone version 2>/dev/null | head -1")),
        ("curl", sh("curl --version | head -1 | cut -d' ' -f1-2")),
        ("node", sh("node --version")),
        ("python", platform.python_version()),
    ]


def fmt(v, digits=None):
    if v is None:
        return "—"
    if digits is not None:
        return f"{v:.{digits}f}"
    if abs(v) >= 100:
        return f"{v:,.0f}"
    if abs(v) >= 10:
        return f"{v:.1f}"
    return f"{v:.2f}"


def slug(s):
    return re.sub(r"[^a-z0-9]+", "-", s.lower()).strip("-")


def ratio(a, b):
    if a is None or b in (None, 0):
        return None
    return a / b


def verdict(r, goal, op="ge"):
    if r is None:
        return "not measured"
    return "met" if (r >= goal if op == "ge" else r <= goal) else "not met"


def chart(path, title, ylabel, rows, series):
    """Clustered bars: rows [(label, [values per series])]."""
    if not shutil.which("gnuplot") or not rows:
        return False
    data = path + ".dat"
    with open(data, "w") as f:
        f.write("system " + " ".join(f'"{s}"' for s in series) + "\n")
        for label, vals in rows:
            f.write(f'"{label}" ' + " ".join("NaN" if v is None else f"{v:.6g}"
                                              for v in vals) + "\n")
    plot = ", ".join(
        f"'{data}' using {i + 2}:xtic(1) title columnhead" for i in range(len(series)))
    script = f"""
set terminal pngcairo size 900,420 font ',10'
set output '{path}'
set title '{title}'
set ylabel '{ylabel}'
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set boxwidth 0.9
set grid ytics
set yrange [0:*]
set key above
set xtics rotate by -20
plot {plot}
"""
    r = subprocess.run(["gnuplot"], input=script, text=True, capture_output=True)
    os.unlink(data)
    return r.returncode == 0


def table_rate(d, kind, md, charts_dir, rel):
    unit = UNIT[kind]
    lim = d.get("limit")
    limv = None
    if lim:
        limv = lim["MBps"] if kind == "seq" else lim["files_per_s"]
    s = d["systems"]
    local = s.get("local", {}).get("cold")
    md.append(f"| system | cold ({unit}) | cold ÷ store limit | warm ({unit}) | warm ÷ local disk |")
    md.append("|---|---:|---:|---:|---:|")
    if lim:
        md.append(f"| store limit (curl --parallel-max 16) | {fmt(limv)} | 1.00 | — | — |")
    rows = []
    for name in ORDER:
        e = s.get(name)
        if not e:
            continue
        md.append(f"| {LABEL[name]} | {fmt(e['cold'])} | {fmt(ratio(e['cold'], limv), 2)} | "
                  f"{fmt(e.get('warm'))} | {fmt(ratio(e.get('warm'), local), 2)} |")
        rows.append((name, [e["cold"], e.get("warm")]))
    cis = s.get("cistern") or {}
    if cis.get("cached_direct"):
        md.append("")
        md.append(f"Cistern's cached bytes read directly (its block files, page cache dropped, "
                  f"just before and just after its warm pass in each repeat): "
                  f"{fmt(cis['cached_direct'])} {unit}; Cistern warm ÷ that, median of the "
                  f"repeats: {fmt(cis['warm_vs_cached_direct'], 2)}.")
    if lim:
        rows.insert(0, ("store limit", [limv, None]))
    png = f"{d['benchmark']}-{slug(d['store'])}.png"
    if chart(os.path.join(charts_dir, png), f"{TITLE.get(d['benchmark'], d['benchmark'])} "
             f"({d['store']} store)", unit, rows, ["cold", "warm"]):
        md.append("")
        md.append(f"![{d['benchmark']} {d['store']}]({rel}/{png})")
    return limv


def warm_large_target(s):
    """Warm large files against a direct read of the cached bytes (the
    issue's baseline), where the run measured it; else against local disk."""
    cis = s.get("cistern") or {}
    if cis.get("warm_vs_cached_direct") is not None:
        return ("warm ≥ 0.85 × direct read of the cached bytes", cis["warm_vs_cached_direct"], 0.85)
    local = (s.get("local") or {}).get("cold")
    return ("warm ≥ 0.85 × local disk", ratio(cis.get("warm"), local), 0.85)


def targets_rate(d, kind, limv, md):
    s = d["systems"]
    g = lambda n, k: (s.get(n) or {}).get(k)
    out = []
    c = g("cistern", "cold")
    if d["benchmark"] == "large":
        out += [(twice_peer_name(peer, g(peer, "cold"), limv), ratio(c, g(peer, "cold")), 2)
                for peer in ("s3fs", "rclone")]
        out += [("cold ≥ 0.8 × store limit", ratio(c, limv), 0.8), warm_large_target(s)]
    elif d["benchmark"] == "small":
        out += [("cold ≥ 0.8 × store limit", ratio(c, limv), 0.8),
                ("warm ≥ 0.7 × local disk", ratio(g("cistern", "warm"), g("local", "cold")), 0.7)]
    elif d["benchmark"] == "meta":
        out += [("warm ≥ 10 × s3fs warm", ratio(g("cistern", "warm"), g("s3fs", "warm")), 10)]
    return out


def twice_peer_name(peer, peer_v, limv):
    """The target "cold ≥ 2 × PEER", marked out of reach when twice the
    peer's figure is above the store's limit: nothing reads a store faster
    than the store serves."""
    name = f"cold ≥ 2 × {peer}"
    if peer_v and limv and 2 * peer_v > limv:
        name += (f" (out of reach in this run: 2 × {peer}'s {fmt(peer_v)} MB/s is above "
                 f"the store's limit of {fmt(limv)})")
    return name


def table_train(d, md, charts_dir, rel):
    s = d["systems"]
    lim = d.get("limit")
    limfps = lim["files_per_s"] if lim else None
    if d["benchmark"] == "train-shards" and lim:
        # Samples are 128 KiB pieces of the shards: the limit in samples/s.
        kib = d["params"].get("sample_kib", 128)
        limfps = lim["MBps"] * 1e6 / (kib * 1024)
    n_ep = max((len(e["cold"]["au"]) for e in s.values()), default=0)
    head = "| approach | system | time to first batch (s) | " + " | ".join(
        f"AU epoch {i + 1}" for i in range(n_ep)) + " | epoch 1 samples/s | ÷ store limit | total (s) |"
    md.append(head)
    md.append("|---|---|---:|" + "---:|" * n_ep + "---:|---:|---:|")
    rows = []
    for name in ORDER:
        e = s.get(name)
        # A run whose `cistern load` failed is not a "with load" run.
        if not e or d.get("errors", {}).get(name, "").startswith("cistern load:"):
            continue
        c = e["cold"]
        sps = c["samples_per_s"][0] if c["samples_per_s"] else None
        md.append(f"| {CATEGORY[name]} | {LABEL[name]} | {fmt(c['time_to_first_batch'])} | "
                  + " | ".join(fmt(a, 3) for a in c["au"]) +
                  f" | {fmt(sps)} | {fmt(ratio(sps, limfps), 2)} | {fmt(c['total_seconds'])} |")
        rows.append((name, c["au"]))
    if lim:
        md.append(f"\nStore limit in the same run: {fmt(limfps)} samples/s "
                  f"({fmt(lim['MBps'])} MB/s, curl --parallel-max 16).")
    png = f"{d['benchmark']}-{slug(d['store'])}.png"
    if chart(os.path.join(charts_dir, png), f"{TITLE.get(d['benchmark'])} ({d['store']} store)",
             "accelerator utilization", rows, [f"epoch {i + 1}" for i in range(n_ep)]):
        md.append("")
        md.append(f"![{d['benchmark']} {d['store']}]({rel}/{png})")
    return limfps


def targets_train(d, limfps):
    s = d["systems"]
    out = []
    loc = s.get("local")
    if loc:
        out.append(("local disk AU ≥ 0.98 (calibration)", min(loc["cold"]["au"]), 0.98))
    cl = s.get("cistern+load")
    if cl and d.get("errors", {}).get("cistern+load", "").startswith("cistern load:"):
        cl = None
    if cl:
        c = cl["cold"]
        name = "epoch 1 with load: samples/s ≥ 0.8 × store limit"
        reach = ratio(loc["cold"]["samples_per_s"][0], limfps) if loc else None
        if reach is not None and reach < 0.8:
            # Compute sized for local disk's AU 0.98 bounds the epoch below
            # the store's pace: no system can reach this one.
            name += (f" (out of reach in this run: local disk's epoch reaches "
                     f"{fmt(reach, 2)} of it, bound by the compute per batch)")
        out.append((name, ratio(c["samples_per_s"][0], limfps), 0.8))
        for peer in ("copyfirst", "s3fs", "rclone"):
            if peer in s:
                peer_au = s[peer]["cold"]["au"][0]
                name = f"epoch 1 with load: AU ≥ 2 × {peer}"
                if peer_au and 2 * peer_au > 1:
                    name += f" (out of reach: 2 × {fmt(peer_au, 2)} is above AU 1)"
                out.append((name, ratio(c["au"][0], peer_au), 2))
        if len(c["au"]) > 1:
            out.append(("epoch 2+ AU ≥ 0.97", min(c["au"][1:]), 0.97))
    else:
        out.append(("Cistern + load targets", None, 1))
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__)
    here = os.path.dirname(os.path.abspath(__file__))
    src = os.path.dirname(here)
    p.add_argument("--results", default=os.path.join(here, "results"))
    p.add_argument("--out", default=os.path.join(src, "docs", "benchmarks.md"))
    p.add_argument("--notes", default=None, help="markdown appended under 'This run'")
    a = p.parse_args()
    charts_dir = os.path.join(os.path.dirname(a.out), "benchmarks")
    os.makedirs(charts_dir, exist_ok=True)
    rel = "benchmarks"
    results = []
    for f in sorted(glob.glob(os.path.join(a.results, "*.json"))):
        try:
            with open(f) as fh:
                d = json.load(fh)
            if "benchmark" in d and ("systems" in d or "table" in d):
                results.append(d)
        except (OSError, ValueError) as e:
            print(f"report: {f}: {e}", file=sys.stderr)
    order = list(TITLE)
    results.sort(key=lambda d: (order.index(d["benchmark"]) if d["benchmark"] in order else 99,
                                d["store"] != "plain", d["store"]))

    md = ["# Benchmarks", "",
          "Generated by `make bench` (`bench/run-all.sh`, rendered by `bench/report.py`) on "
          f"{datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}. "
          "Every figure is the median of the repeats of one run; every ratio is against a "
          "baseline measured in the same run (the store's own limit for cold figures, local "
          "disk for warm ones, and for Cistern's warm large files also a direct read of its "
          "cached bytes). Cold: a fresh mount with an empty cache and the page cache "
          "dropped; warm: the same mount again, page cache dropped again, so that warm "
          "measures each system's own cache. Copy-first's cold figure includes the download.",
          "", "## Machine", "", "| | |", "|---|---|"]
    md += [f"| {k} | {v} |" for k, v in machine(src, a.results)]
    md += ["", "## The store", "",
           "s3rver on loopback, its objects in memory (/dev/shm): a remote store never "
           "reads from the disk the systems under test cache on, and on one shared disk "
           "their cache writes would slow the store's own reads while the curl baseline "
           "writes nothing. *plain*: s3rver directly. *shaped*: through "
           "`bench/shape-proxy.js`, which emulates cloud object storage with a first-byte "
           "latency per request and per-connection and aggregate bandwidth caps (values per "
           "run below). The store's limit is one `curl --parallel --parallel-max 16` process "
           "fetching the same objects (16 MiB ranges of the large ones).", ""]
    if a.notes and os.path.exists(a.notes):
        md += ["## This run", "", open(a.notes).read().strip(), ""]

    summary = []
    for d in results:
        b = d["benchmark"]
        md += [f"## {TITLE.get(b, b)} — {d['store']} store", ""]
        if "table" in d or "workload" not in d:
            # A benchmark with its own table (bench/master_ls.py and the like).
            params = ", ".join(f"{k} {v}" for k, v in d.get("params", {}).items())
            md.append(f"Parameters: {params}; {d.get('repeats', 1)} repeats.")
            if d.get("kept"):
                md.append(f"**Not run with the rest**: the kept result (bench/kept/), {d['kept']}.")
            md.append("")
            t = d.get("table")
            if t and t["rows"]:
                md.append("| " + " | ".join(t["columns"]) + " |")
                md.append("|---|" + "---:|" * (len(t["columns"]) - 1))
                md += ["| " + " | ".join(str(c) for c in r) + " |" for r in t["rows"]]
            if d.get("extra"):
                md += ["", d["extra"]]
            if d.get("errors"):
                md += ["", "Not measured in this run:", ""]
                md += [f"- {k}: `{v}`" for k, v in d["errors"].items()]
            md.append("")
            for t in d.get("targets", []):
                summary.append((f"{TITLE.get(b, b)} ({d['store']})", *t))
            continue
        kind = d["workload"][0]
        params = ", ".join(f"{k} {v}" for k, v in d["params"].items())
        md.append(f"Parameters: {params}; {d['repeats']} repeats; page cache dropped: "
                  f"{'yes' if d.get('page_cache_dropped') else 'no (not root)'}.")
        md.append("")
        if kind == "train":
            limv = table_train(d, md, charts_dir, rel)
            tg = targets_train(d, limv)
        else:
            limv = table_rate(d, kind, md, charts_dir, rel)
            tg = targets_rate(d, kind, limv, md)
        if d.get("errors"):
            md += ["", "Not measured in this run:", ""]
            md += [f"- {LABEL.get(k, k)}: `{v}`" for k, v in d["errors"].items()]
        md.append("")
        for name, r, goal in tg:
            summary.append((f"{TITLE.get(b, b)} ({d['store']})", name, r, goal))

    md += ["## Targets", "",
           "Goals, not tests. A ratio is Cistern's figure over the baseline named.", "",
           "| benchmark | target | ratio | |", "|---|---|---:|---|"]
    for bench, name, r, goal, *op in summary:
        md.append(f"| {bench} | {name} | {fmt(r, 2)} | {verdict(r, goal, *op)} |")
    if not summary:
        md.append("| — | no results | — | not measured |")
    md.append("")
    present = {d["benchmark"] for d in results}
    missing = [TITLE[b] for b in TITLE if b not in present]
    md += ["## Not measured", "",
           "Benchmarks of the suite with no result in this run (see the run notes above for "
           "why):", ""]
    md += [f"- {m}" for m in missing] or ["- none"]
    asked = [("ns-scale", "a 10-million-inode namespace: master RSS (< 512 MiB), bytes per "
                           "inode on disk, lookup p50/p99 from 8 threads"),
             ("worker", "worker remote read of cached blocks over loopback against a direct "
                        "file read (≥ 0.8), and cold fetch against the best of 1/4/8/16 "
                        "parallel curl ranged GETs (≥ 0.8)"),
             ("fuse-warm", "FUSE warm sequential against a direct read of the block files "
                           "(≥ 0.85), hot re-read against the local page cache (≥ 0.8), stat "
                           "of 100,000 files warm (≥ 100,000 stats/s)"),
             ("preload", "preload into 3 workers against the best parallel curl, and the time "
                         "until a concurrent reader stops stalling")]
    left = [t for b, t in asked if b not in present]
    if left:
        md += ["", "Asked for by earlier issues and with no figures in this report:", ""]
        md += [f"- {t};" for t in left]
    md.append("")
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "w") as f:
        f.write("\n".join(md) + "\n")
    print(f"report: wrote {a.out} ({len(results)} result sets)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
