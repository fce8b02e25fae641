#!/usr/bin/env python
"""Run the codec benchmarks against the peers and print one comparison table.

Usage (normally through ``./dev bench [options]``)::

    .venv/bin/python benchmarks/run.py [--passes N] [--quick] [--max-time S]
                                       [--min-rounds N] [-k EXPR]
                                       [--json FILE] [--markdown FILE]

It runs the pytest-benchmark suite in benchmarks/bench_codec.py ``--passes``
times. Inside a case the contenders are interleaved round by round (see
bench_codec.py), and the contender order is reversed on every other pass. The
per-call samples of all passes are pooled and the table shows, for every case,
the median of each contender and the ratio peer/ours (how many times faster we
are; > 1 means we win).
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from collections import defaultdict

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SUITE = os.path.join(HERE, "bench_codec.py")

# column order of the table: (contender name as in contenders.py, heading)
COLUMNS = [
    ("ours", None, None),
    ("aiokafka", None, "x aio"),
    ("kafka-python", None, "x kp"),
    ("crc32c", "crc32c pkg", "x pkg"),
]

# cases reported as a sentence under the table rather than as a row
NOTE_CASES = ("encode-none-call_floor",)

# issue acceptance targets: (case, peer, minimum ratio peer/ours)
RATIO_TARGETS = [("encode-none", "aiokafka", 5.0), ("decode-none", "aiokafka", 2.5)]
CRC_TARGET_GBPS = 10.0

# CPU time of the benchmark process by default: on a shared machine other processes take
# the CPU away mid-round, which wall-clock time would count against whoever was running.
TIMERS = {"cpu": "time.process_time", "wall": "time.perf_counter"}

PACKAGES = [
    "aiokafka", "kafka-python", "crc32c", "lz4", "zstandard", "python-snappy", "cramjam",
    "Cython", "pytest-benchmark", "confluent-kafka",
]


def _machine():
    model = "?"
    flags = set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name") and model == "?":
                    model = line.split(":", 1)[1].strip()
                elif line.startswith("flags") and not flags:
                    flags = set(line.split(":", 1)[1].split())
    except OSError:
        model = platform.processor() or "?"
    simd = [f for f in ("sse4_2", "pclmulqdq", "avx2", "avx512f", "vpclmulqdq") if f in flags]
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        usable = os.cpu_count()
    try:
        load = " ".join("%.2f" % x for x in os.getloadavg())
    except OSError:  # pragma: no cover
        load = "?"
    return {
        "cpu": model,
        "logical_cpus": os.cpu_count(),
        "usable_cpus": usable,
        "cpu_flags": simd,
        "loadavg_at_start": load,
        "os": "%s %s" % (platform.system(), platform.release()),
        "python": "%s %s (%s)" % (platform.python_implementation(), platform.python_version(),
                                  sys.executable),
    }


def _versions():
    from importlib import metadata

    out = {}
    sys.path.insert(0, ROOT)
    try:
        import kafka_proto

        ours = getattr(kafka_proto, "__version__", "?")
    except Exception as exc:  # pragma: no cover
        ours = "unimportable (%r)" % (exc,)
    try:
        rev = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                             capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True).stdout.strip()
        rev += "+dirty" if dirty else ""
    except Exception:  # pragma: no cover
        rev = "?"
    out["kafka_proto (ours)"] = "%s (git %s)" % (ours, rev)
    for p in PACKAGES:
        try:
            out[p] = metadata.version(p)
        except metadata.PackageNotFoundError:
            out[p] = "not installed"
    return out


def _implementations():
    """Which code each contender really runs (Cython or pure Python), from the
    classes the benchmark imports."""
    sys.path.insert(0, HERE)
    sys.path.insert(0, ROOT)
    import contenders as C

    lines = []
    for name, c in C.load().items():
        if not c.available:
            lines.append("%s: UNAVAILABLE (%s)" % (name, c.reason))
            continue
        lines.extend(c.notes)
        if c.reason:
            lines.append("%s: partly unavailable: %s" % (name, c.reason))
    try:
        import kafka_proto.records as r

        lines.append("ours: records from %s" % (getattr(r, "__file__", "?"),))
        lines.append("ours: RecordBatchBuilder is %s.%s" % (
            r.RecordBatchBuilder.__module__, r.RecordBatchBuilder.__qualname__))
    except Exception:
        pass
    try:
        from kafka_proto import crc

        lines.append("ours: crc32c() from %s, path in use: %s (compiled paths: %s)" % (
            crc.crc32c.__module__, crc.IMPLEMENTATION, ", ".join(crc.IMPLEMENTATIONS)))
    except Exception:
        pass
    return lines


def _run_pass(idx, args, json_path):
    env = dict(os.environ)
    env["BENCH_REVERSE"] = "1" if idx % 2 else "0"
    env["BENCH_OUR_LEVELS"] = args.our_levels
    env["PYTHONPATH"] = os.pathsep.join(p for p in (ROOT, HERE, env.get("PYTHONPATH")) if p)
    cmd = [
        sys.executable, "-m", "pytest", SUITE,
        "-p", "no:cacheprovider", "-q", "-W", "ignore::DeprecationWarning",
        "--rootdir", HERE,  # do not pick up the project's pytest settings (testpaths, timeout)
        "--benchmark-only",
        "--benchmark-json", json_path,
        "--benchmark-warmup", "on",
        "--benchmark-warmup-iterations", str(args.warmup),
        "--benchmark-min-rounds", str(args.min_rounds),
        "--benchmark-max-time", str(args.max_time),
        "--benchmark-timer", TIMERS[args.timer],
    ]
    if args.k:
        cmd += ["-k", args.k]
    order = "reversed" if idx % 2 else "forward"
    print("pass %d/%d (contender order %s) ..." % (idx + 1, args.passes, order), flush=True)
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    tail = [l for l in proc.stdout.splitlines() if l.strip()][-1:]
    print("  " + (tail[0] if tail else "(no output)"), flush=True)
    if proc.returncode not in (0, 5):
        sys.stdout.write(proc.stdout[-20000:])
        sys.stderr.write(proc.stderr[-5000:])
        raise SystemExit("benchmark pass %d failed (pytest exit %d)" % (idx + 1, proc.returncode))
    with open(json_path) as f:
        return json.load(f)


def _pool(results):
    """case -> contender -> dict(median=seconds, pass_medians=[...], rounds=n, info)."""
    pooled = defaultdict(lambda: defaultdict(lambda: {"data": [], "pass_medians": [], "info": {}}))
    for res in results:
        for b in res["benchmarks"]:
            info = b["extra_info"]
            for name, samples in info.get("samples", {}).items():
                if not samples:
                    continue
                slot = pooled[info["case"]][name]
                slot["data"].extend(samples)
                slot["pass_medians"].append(statistics.median(samples))
                slot["info"] = {k: v for k, v in info.items() if k != "samples"}
                slot["info"]["label"] = info.get("labels", {}).get(name, name)
                if isinstance(info.get("bytes"), dict):
                    slot["info"]["bytes"] = info["bytes"].get(name)
    out = {}
    for case, per in pooled.items():
        out[case] = {}
        for name, slot in per.items():
            out[case][name] = {
                "median": statistics.median(slot["data"]),
                "min": min(slot["data"]),
                "quartiles": (statistics.quantiles(slot["data"], n=4)
                              if len(slot["data"]) > 1 else []),
                "pass_medians": slot["pass_medians"],
                "rounds": len(slot["data"]),
                "info": slot["info"],
            }
    return out


def _case_order(case):
    kinds = ["encode", "decode", "varint-encode", "varint-decode"]
    if case == "crc32c-1MiB":
        return (4, 0)
    if case.startswith("crc32c-1MiB-"):
        return (5, case)
    codecs = ["none", "none-append_many", "gzip", "snappy", "lz4", "zstd"]
    for i, k in enumerate(kinds):
        if case == k:
            return (i, 0)
        if case.startswith(k + "-"):
            rest = case[len(k) + 1:]
            return (i, codecs.index(rest) if rest in codecs else 99)
    return (99, 0)


def _fmt_value(entry):
    info = entry["info"]
    if info["unit"] == "GB/s":
        return "%.2f GB/s" % (info["nbytes"] / entry["median"] / 1e9)
    v = entry["median"] * 1e9 / info["per"]
    return "%.0f" % v if v >= 100 else "%.1f" % v


def _table(pooled):
    present = {name for per in pooled.values() for name in per}
    cols = [(n, h, x) for n, h, x in COLUMNS if n in present]
    labels = {}
    for per in pooled.values():
        for name, e in per.items():
            labels.setdefault(name, e["info"].get("label", name))
    head = ["case", "unit"]
    for name, heading, ratio in cols:
        head.append(heading or labels.get(name, name))
        if ratio:
            head.append(ratio)  # ratio peer/ours
    rows = [head]
    noisy = []
    for case in sorted(pooled, key=_case_order):
        if case in NOTE_CASES:
            continue
        per = pooled[case]
        any_e = next(iter(per.values()))
        unit = any_e["info"]["unit"]
        row = [case, unit]
        ours = per.get("ours")
        for name, _, ratio in cols:
            e = per.get(name)
            row.append(_fmt_value(e) if e else "-")
            if ratio:
                row.append("%.2f" % (e["median"] / ours["median"]) if (e and ours) else "-")
            if e and ours and name != "ours" and len(e["pass_medians"]) > 1:
                # what matters is whether the ratio holds from pass to pass
                rs = [p / o for p, o in zip(e["pass_medians"], ours["pass_medians"])]
                if max(rs) > 1.15 * min(rs):
                    noisy.append("%s: %s/ours ratio ranged %.2f-%.2f across passes"
                                 % (case, name, min(rs), max(rs)))
        rows.append(row)
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    lines = []
    for j, r in enumerate(rows):
        cells = [c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))]
        lines.append("| " + " | ".join(cells) + " |")
        if j == 0:
            lines.append("|" + "|".join("-" * (w + 2) if i < 2 else "-" * (w + 1) + ":"
                                        for i, w in enumerate(widths)) + "|")
    return lines, noisy


def _peer_levels_note():
    import contenders as C

    return C.PEER_LEVELS_NOTE


def _sizes(pooled):
    lines = []
    for case in sorted(pooled, key=_case_order):
        if not case.startswith("encode-"):
            continue
        per = pooled[case]
        cells = ["%s %s" % (n, per[n]["info"]["bytes"]) for n, _, _ in COLUMNS
                 if n in per and per[n]["info"].get("bytes") is not None]
        if cells:
            lines.append("%s: %s" % (case[len("encode-"):], ", ".join(cells)))
    return lines


def _targets(pooled):
    lines = []
    for case, peer, want in RATIO_TARGETS:
        per = pooled.get(case, {})
        if "ours" not in per or peer not in per:
            lines.append("NOT MEASURED  %s: ours vs %s (target >= %.1fx)" % (case, peer, want))
            continue
        r = per[peer]["median"] / per["ours"]["median"]
        ok = r >= want
        lines.append("%s  %s: %.2fx faster than %s (target >= %.1fx)"
                     % ("PASS" if ok else "!!! MISS !!!", case, r, peer, want))
    e = pooled.get("crc32c-1MiB", {}).get("ours")
    if e is None:
        lines.append("NOT MEASURED  crc32c-1MiB (target >= %.0f GB/s)" % CRC_TARGET_GBPS)
    else:
        gbps = e["info"]["nbytes"] / e["median"] / 1e9
        ok = gbps >= CRC_TARGET_GBPS
        lines.append("%s  crc32c-1MiB: %.2f GB/s (target >= %.0f GB/s)"
                     % ("PASS" if ok else "!!! MISS !!!", gbps, CRC_TARGET_GBPS))
    return lines


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--passes", type=int, default=2,
                    help="suite runs, alternating contender order (default 2)")
    ap.add_argument("--min-rounds", type=int, default=25, help="minimum rounds per case and pass")
    ap.add_argument("--max-time", type=float, default=1.0,
                    help="target seconds per case and pass (pytest-benchmark --benchmark-max-time)")
    ap.add_argument("--timer", choices=sorted(TIMERS), default="cpu",
                    help="cpu: process CPU time (default, robust on a busy machine); "
                         "wall: perf_counter")
    ap.add_argument("--warmup", type=int, default=20, help="max warm-up iterations per case")
    ap.add_argument("--quick", action="store_true",
                    help="smoke run: 1 pass, 5 rounds, 0.2 s per case (numbers are rough)")
    ap.add_argument("--our-levels", choices=("peer", "default"), default="peer",
                    help="our compression levels: aiokafka's (peer, default) or our library "
                         "defaults")
    ap.add_argument("-k", default=None, help="pytest -k expression to select cases")
    ap.add_argument("--json", default=None, help="also write the pooled results as JSON here")
    ap.add_argument("--markdown", default=None, help="also write the report as Markdown here")
    args = ap.parse_args(argv)
    if args.quick:
        args.passes, args.min_rounds, args.max_time, args.warmup = 1, 5, 0.2, 5

    started = _dt.datetime.now(_dt.timezone.utc)
    machine = _machine()
    versions = _versions()
    os.environ["BENCH_OUR_LEVELS"] = args.our_levels
    impls = _implementations()

    results = []
    with tempfile.TemporaryDirectory(prefix="kbench-") as tmp:
        for i in range(args.passes):
            results.append(_run_pass(i, args, os.path.join(tmp, "pass%d.json" % i)))
    pooled = _pool(results)
    if not pooled:
        raise SystemExit("no benchmark ran")
    table, noisy = _table(pooled)
    targets = _targets(pooled)

    out = []
    out.append("## Codec benchmarks, %s" % started.strftime("%Y-%m-%d %H:%M UTC"))
    out.append("")
    out.append("Medians over all rounds of %d pass(es) (min %d rounds, ~%.1f s per case and pass, "
               "warm-up on; contenders interleaved round by round; timer: %s). Batch cases: %s "
               "records of 8-byte key + 100-byte value, time per record; varint cases: "
               "%s mixed-size signed varints, time per varint; CRC-32C: throughput on 1 MiB. "
               "x = peer median / our median (how many times faster we are)."
               % (args.passes, args.min_rounds, args.max_time,
                  "process CPU time" if args.timer == "cpu" else "wall clock", "1,000", "1,000"))
    out.append("")
    out.extend(table)
    out.append("")
    if "encode-none-append_many" in pooled:
        out.append("encode-none-append_many is informational: ours through "
                   "RecordBatchBuilder.append_many() (one call for lists of values and keys "
                   "prepared beforehand), the peers "
                   "appending one by one as in encode-none (they have no bulk API).")
        out.append("")
    floor = pooled.get("encode-none-call_floor", {})
    if "floor" in floor and "ours" in floor:
        f_ns = floor["floor"]["median"] * 1e9 / floor["floor"]["info"]["per"]
        o_ns = floor["ours"]["median"] * 1e9 / floor["ours"]["info"]["per"]
        line = ("Call floor (encode-none loop with a do-nothing Cython append of the same "
                "signature, interleaved with ours): %.1f ns/record, ours %.1f ns/record"
                % (f_ns, o_ns))
        if "aiokafka" in floor:
            a_ns = floor["aiokafka"]["median"] * 1e9 / floor["aiokafka"]["info"]["per"]
            line += ("; aiokafka %.0f ns/record, so even a zero-cost append() would be at most "
                     "%.1fx faster than aiokafka with one Python call per record"
                     % (a_ns, a_ns / f_ns))
        out.append(line + ".")
        out.append("")
    out.append("Targets (issue acceptance):")
    out.extend("    " + t for t in targets)
    if noisy:
        out.append("")
        out.append("Unstable ratios (machine busy? re-run with more --passes):")
        out.extend("    " + n for n in noisy)
    out.append("")
    out.append("Machine: %s, %s logical CPUs (%s usable), SIMD: %s, load avg at start: %s; %s"
               % (machine["cpu"], machine["logical_cpus"], machine["usable_cpus"],
                  ",".join(machine["cpu_flags"]) or "-", machine["loadavg_at_start"],
                  machine["os"]))
    out.append("Python: %s" % machine["python"])
    out.append("Versions: " + ", ".join("%s %s" % kv for kv in versions.items()))
    out.append("Implementations:")
    out.extend("    " + l for l in impls)
    out.append("    " + _peer_levels_note())
    sizes = _sizes(pooled)
    if sizes:
        out.append("Encoded batch sizes in bytes (same 1,000 records):")
        out.extend("    " + l for l in sizes)
    text = "\n".join(out)
    print()
    print(text)

    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(text.replace("\n    ", "\n- ") + "\n")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"started": started.isoformat(), "machine": machine, "versions": versions,
                       "implementations": impls, "args": vars(args),
                       "results": pooled, "targets": targets}, f, indent=2, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
