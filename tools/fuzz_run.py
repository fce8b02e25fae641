"""Run one fuzz harness for a long time, with atheris (libFuzzer) when installed.

    nice -n 19 .venv/bin/python tools/fuzz_run.py records --seconds 600
    .venv/bin/python tools/fuzz_run.py --list
    .venv/bin/python tools/fuzz_run.py responses -- -runs=1000  # extra libFuzzer flags

The harnesses are the plain functions of tests/fuzz/fuzz_harnesses.py. The committed seed
corpus (tests/fuzz/corpus/<harness>) is copied to a work directory (``--workdir``,
default /tmp/kafka-fuzz/<harness>) where libFuzzer keeps the inputs it finds, so the
repository is never written to. Crashes land in ``<workdir>/crashes/``.

The Python code of kafka_proto, kafka_client and the harnesses is instrumented for
coverage feedback (atheris.instrument_imports); the Cython modules give feedback only when
built with ``KAFKA_PROTO_COVERAGE=1`` (see docs/fuzzing.md), which this script picks up
through ``--tree`` (a separate checkout holding such a build).

Without atheris the same command runs the built-in mutator of tests/fuzz/fuzz_driver.py
for ``--seconds`` (no coverage feedback).
"""
from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _prepare_path(tree: Path) -> None:
    sys.path.insert(0, str(ROOT / "tests" / "fuzz"))
    sys.path.insert(0, str(tree))


def _import_targets() -> None:
    """Import every module a harness reaches, so instrumentation covers them."""
    import importlib

    import kafka_client._cluster.calls  # noqa: F401
    import kafka_client._cluster.metadata  # noqa: F401
    import kafka_client._testing.blocking  # noqa: F401
    import kafka_client._testing.simple  # noqa: F401
    import kafka_client.admin._operations  # noqa: F401
    import kafka_client.config  # noqa: F401
    import kafka_client.consumer.consumer  # noqa: F401
    import kafka_client.consumer.fetcher  # noqa: F401
    import kafka_client.consumer.group  # noqa: F401
    import kafka_client.consumer.share_fetcher  # noqa: F401
    import kafka_client.consumer.share_group  # noqa: F401
    import kafka_client.producer.accumulator  # noqa: F401
    import kafka_client.producer.idempotence  # noqa: F401
    import kafka_client.producer.sender  # noqa: F401
    import kafka_client.producer.transactions  # noqa: F401
    import kafka_client.testing._acls  # noqa: F401
    import kafka_client.testing._downconvert  # noqa: F401
    import kafka_proto.compression  # noqa: F401
    import kafka_proto.framing  # noqa: F401
    import kafka_proto.records  # noqa: F401
    import kafka_proto.versions  # noqa: F401
    from kafka_proto.messages import CLASS_MODULES

    for module in sorted(set(CLASS_MODULES.values())):
        importlib.import_module("kafka_proto.messages._generated." + module)


LIBFUZZER_SO = "libfuzzer_no_main.so"


def _preload_libfuzzer(tree: Path) -> bool:
    """Load ``<tree>/libfuzzer_no_main.so`` (made by ``--setup-tree``) with RTLD_GLOBAL, as
    LD_PRELOAD would: the Cython modules of a KAFKA_PROTO_COVERAGE build resolve their
    coverage callbacks against it, and atheris drives it ("Using preloaded libfuzzer").
    Atheris' own bundled copy cannot serve: it is loaded late and privately."""
    import ctypes

    lib = tree / LIBFUZZER_SO
    if not lib.exists():
        return False
    ctypes.CDLL(str(lib), mode=os.RTLD_GLOBAL | os.RTLD_NOW)
    return True


def setup_tree(tree: Path) -> None:
    """Clone this checkout's HEAD into ``tree`` and build it for coverage-guided fuzzing:
    Cython modules with -fsanitize=fuzzer-no-link (clang), and a shared libFuzzer made from
    the static runtime that ships with atheris. The shared checkout's .so files are never
    touched."""
    import subprocess

    import atheris

    if not tree.exists():
        subprocess.run(["git", "clone", "-q", str(ROOT), str(tree)], check=True)
    env = dict(os.environ, CC="clang", LDSHARED="clang -shared", KAFKA_PROTO_COVERAGE="1",
               # libFuzzer's stack-depth feature needs a TLS variable atheris does not export
               CFLAGS="-fno-sanitize-coverage=stack-depth")
    subprocess.run(["nice", "-n", "19", sys.executable, "setup.py", "-q", "build_ext",
                    "--inplace", "-j", "2"], cwd=tree, env=env, check=True)
    site = Path(atheris.__file__).resolve().parent.parent
    archive = next(iter(site.glob("libclang_rt.fuzzer_no_main*.a")), None)
    if archive is None:
        archive = Path(subprocess.run(
            ["clang", "--print-file-name=libclang_rt.fuzzer_no_main-x86_64.a"],
            capture_output=True, text=True, check=True).stdout.strip())
    subprocess.run(["clang++", "-shared", "-fPIC", "-o", str(tree / LIBFUZZER_SO),
                    "-Wl,--whole-archive", str(archive), "-Wl,--no-whole-archive",
                    "-lpthread"], check=True)
    print(f"coverage build ready in {tree}; run with --tree {tree}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("harness", nargs="?")
    ap.add_argument("--list", action="store_true", help="list the harnesses")
    ap.add_argument("--seconds", type=int, default=600)
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--tree", default=str(ROOT),
                    help="checkout whose kafka_proto is imported (a coverage build)")
    ap.add_argument("--setup-tree", metavar="DIR",
                    help="clone and build DIR for Cython coverage, then exit")
    ap.add_argument("--rss-limit-mb", type=int, default=2048)
    ap.add_argument("--timeout", type=int, default=10, help="seconds per input")
    ap.add_argument("--no-instrument", action="store_true",
                    help="skip Python coverage instrumentation (faster, blind)")
    ap.add_argument("--builtin", action="store_true", help="use the built-in mutator")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("libfuzzer_args", nargs="*", help="after --: passed to libFuzzer")
    args = ap.parse_args(argv)

    if args.setup_tree:
        setup_tree(Path(args.setup_tree).resolve())
        return 0
    tree = Path(args.tree).resolve()
    _prepare_path(tree)
    if args.list or not args.harness:
        import fuzz_harnesses

        print("\n".join(sorted(fuzz_harnesses.HARNESSES)))
        return 0

    try:
        if args.builtin:
            raise ImportError
        flags = sys.getdlopenflags()
        sys.setdlopenflags(flags | os.RTLD_GLOBAL)
        import atheris
    except ImportError:
        atheris = None

    if atheris is None:
        import fuzz_driver
        import fuzz_harnesses

        check = fuzz_harnesses.HARNESSES[args.harness]
        try:
            stats = fuzz_driver.run(args.harness, check, args.seconds, seed=args.seed,
                                    input_seconds=args.timeout,
                                    rss_limit_mb=args.rss_limit_mb)
        except fuzz_driver.FuzzFailure as failure:
            # Kept as libFuzzer keeps its crashes, for the regression test to load.
            crashes = Path(args.workdir or f"/tmp/kafka-fuzz/{args.harness}") / "crashes"
            crashes.mkdir(parents=True, exist_ok=True)
            path = crashes / f"crash-{hashlib.sha1(failure.data).hexdigest()}"
            path.write_bytes(failure.data)
            print(f"{failure}\ninput written to {path}", file=sys.stderr)
            return 1
        print(f"{stats.harness}: {stats.inputs} inputs in {stats.seconds:.0f}s "
              f"({stats.inputs / stats.seconds:.0f}/s), slowest {stats.slowest:.3f}s "
              "(built-in mutator, no coverage feedback)")
        return 0

    import fuzz_harnesses

    work = Path(args.workdir or f"/tmp/kafka-fuzz/{args.harness}")
    corpus = work / "corpus"
    crashes = work / "crashes"
    corpus.mkdir(parents=True, exist_ok=True)
    crashes.mkdir(parents=True, exist_ok=True)
    for seed in (ROOT / "tests" / "fuzz" / "corpus" / args.harness).iterdir():
        shutil.copy(seed, corpus / seed.name)
    fuzzer_argv = [
        sys.argv[0],
        str(corpus),
        f"-max_total_time={args.seconds}",
        f"-rss_limit_mb={args.rss_limit_mb}",
        f"-timeout={args.timeout}",
        f"-seed={args.seed}",
        f"-artifact_prefix={crashes}/",
        "-max_len=65536",
        "-print_final_stats=1",
        *args.libfuzzer_args,
    ]
    harness = args.harness

    def check(data: bytes) -> None:
        fuzz_harnesses.HARNESSES[harness](data)

    # libFuzzer first, global: the Cython modules of a coverage build, imported next,
    # need its sanitizer-coverage callbacks.
    native_coverage = _preload_libfuzzer(tree)
    atheris.Setup(fuzzer_argv, check)
    sys.setdlopenflags(flags)
    print(f"kafka_proto from {tree}: Cython coverage "
          f"{'on' if native_coverage else 'off (no ' + LIBFUZZER_SO + ')'}", file=sys.stderr)
    if args.no_instrument:
        _import_targets()
    else:
        with atheris.instrument_imports(include=["kafka_proto", "kafka_client"]):
            _import_targets()
    atheris.Fuzz()
    return 0


if __name__ == "__main__":
    sys.exit(main())
