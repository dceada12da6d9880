"""``python -m bench``: every scenario on every broker, interleaved; a JSON report and a markdown one.

    python -m bench                       # the full run (~10 minutes on 2 cores), docs/benchmarks.{json,md}
    python -m bench --smoke               # tiny sizes, one repeat, under a minute; reports in a temp dir
    python -m bench --magnetar-ref HEAD   # Magnetar from a snapshot of a commit, not the working tree
    python -m bench --brokers magnetar-fsync --profile /tmp/prof   # py-spy on Magnetar during each run

The exit status is 1 when any run lost, duplicated, reordered or corrupted a message, or failed; 0 otherwise.
"""

from __future__ import annotations

import argparse
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

from bench import report
from bench.brokers import PEER, SPECS, MagnetarSource, peer_installed
from bench.scenarios import MODES, SCENARIOS, Limits, failures, run_once, with_overrides
from bench.workload import log_client_to

REPO_ROOT = Path(__file__).resolve().parent.parent
SMOKE_SIZES = {"20MB-chunked": 6 * 1024 * 1024}
SMOKE_CAPS = {"100B-batched": 5_000, "1KB-sync": 200, "1MB": 20, "20MB-chunked": 2}
SMOKE_DURATION_S = 0.3
SMOKE_IDLE_TIMEOUT_S = 5.0


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n")[0])
    p.add_argument("--smoke", action="store_true", help="tiny sizes, one repeat, reports in a temp dir")
    p.add_argument("--repeat", type=int, help="runs of each measurement (default 3; smoke 1)")
    p.add_argument("--duration", type=float, help="seconds each run produces for (default 4; smoke 0.3)")
    p.add_argument("--brokers", help=f"comma list from {', '.join(SPECS)} (default: all installed)")
    p.add_argument("--scenarios", help=f"comma list from {', '.join(SCENARIOS)} (default: all)")
    p.add_argument("--modes", default=",".join(MODES), help="comma list from concurrent, backlog")
    p.add_argument("--size", action="append", default=[], metavar="SCENARIO=BYTES", help="payload size")
    p.add_argument("--messages", action="append", default=[], metavar="SCENARIO=N", help="cap per run")
    p.add_argument("--idle-timeout", type=float, help="give up on receipts or messages after (15 s; smoke 5)")
    p.add_argument(
        "--magnetar-ref", help="run Magnetar from a snapshot of this git ref (default: working tree)"
    )
    p.add_argument("--profile", type=Path, metavar="DIR", help="record py-spy profiles of Magnetar into DIR")
    p.add_argument("--profile-native", action="store_true", help="py-spy --native: C frames too")
    p.add_argument("--workdir", type=Path, help="brokers' data and logs (default: a temp dir, removed)")
    p.add_argument("--out-json", type=Path, help="default docs/benchmarks.json (smoke: in the temp dir)")
    p.add_argument("--out-md", type=Path, help="default docs/benchmarks.md (smoke: in the temp dir)")
    return p


def _pairs(items: list[str], what: str) -> dict[str, int]:
    pairs = {}
    for item in items:
        name, _, value = item.partition("=")
        if name not in SCENARIOS or not value.isdigit():
            raise SystemExit(
                f"{what} wants SCENARIO=NUMBER with a scenario from {', '.join(SCENARIOS)}: {item}"
            )
        pairs[name] = int(value)
    return pairs


def _choose(text: str | None, known, what: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()] if text else list(known)
    unknown = [n for n in names if n not in known]
    if unknown:
        raise SystemExit(f"unknown {what}: {', '.join(unknown)} (known: {', '.join(known)})")
    return names


def _brokers(text: str | None) -> tuple[list[str], str | None]:
    """The brokers to run, and a note when the peer is wanted by default but not installed."""
    if text:
        names = _choose(text, SPECS, "broker")
        if PEER in names and not peer_installed():
            raise SystemExit("pulsar-lite is not installed: pip install -e '.[bench]'")
        return names, None
    if peer_installed():
        return list(SPECS), None
    note = "pulsar-lite is not installed (it comes with the bench extra): Magnetar alone, no ratios"
    return [n for n in SPECS if n != PEER], note


def _interrupt(signum: int, _frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; SIGTERM and SIGINT stop it cleanly (the running broker is stopped by PID)."""
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        return _main(argv)
    except KeyboardInterrupt:
        print("interrupted: the running broker was stopped, no report written", file=sys.stderr)
        return 130


def _main(argv: list[str] | None) -> int:
    args = _parser().parse_args(argv)
    brokers, note = _brokers(args.brokers)
    sizes = {**(SMOKE_SIZES if args.smoke else {}), **_pairs(args.size, "--size")}
    caps = {**(SMOKE_CAPS if args.smoke else {}), **_pairs(args.messages, "--messages")}
    table = with_overrides(sizes, caps)
    scenarios = [table[n] for n in _choose(args.scenarios, SCENARIOS, "scenario")]
    modes = _choose(args.modes, MODES, "mode")
    repeat = args.repeat or (1 if args.smoke else 3)
    limits = Limits(
        args.duration or (SMOKE_DURATION_S if args.smoke else 4.0),
        args.idle_timeout or (SMOKE_IDLE_TIMEOUT_S if args.smoke else 15.0),
    )
    if note:
        print(f"note: {note}", file=sys.stderr)

    own_workdir = args.workdir is None
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="magnetar-bench-"))
    out_json = args.out_json or (
        workdir / "benchmarks.json" if args.smoke else REPO_ROOT / "docs/benchmarks.json"
    )
    out_md = args.out_md or (workdir / "benchmarks.md" if args.smoke else REPO_ROOT / "docs/benchmarks.md")
    if args.smoke and own_workdir:
        own_workdir = False  # the reports live there; say where
    workdir.mkdir(parents=True, exist_ok=True)
    log_client_to(workdir / "client.log")
    print(f"brokers' logs and the client's warnings in {workdir}", file=sys.stderr)
    try:
        source = (
            MagnetarSource.snapshot(args.magnetar_ref, workdir / "magnetar-src")
            if args.magnetar_ref
            else MagnetarSource.working_tree()
        )
        started = time.time()
        profile = (args.profile, args.profile_native) if args.profile else None
        runs = _run_all(brokers, scenarios, modes, repeat, limits, source, workdir, profile)
        context = report.Context(
            brokers=brokers,
            scenarios=scenarios,
            modes=modes,
            repeat=repeat,
            limits=limits,
            source=source,
            workdir=workdir,
            command=" ".join(["python -m bench", *(argv if argv is not None else sys.argv[1:])]),
            started=started,
            elapsed_s=time.time() - started,
            note=note,
        )
        document = report.build(context, runs)
        report.write_json(document, out_json)
        report.write_markdown(document, out_md)
    finally:
        if own_workdir:
            shutil.rmtree(workdir, ignore_errors=True)
    bad = document["failures"]
    print(f"wrote {out_json} and {out_md}", file=sys.stderr)
    for line in bad:
        print(f"FAILED: {line}", file=sys.stderr)
    return 1 if bad else 0


def _run_all(brokers, scenarios, modes, repeat, limits, source, workdir, profile) -> list[dict]:
    """Every (scenario, mode) on every broker, the brokers' order rotated each repeat."""
    runs = []
    total = repeat * len(scenarios) * len(modes) * len(brokers)
    for r in range(repeat):
        order = brokers[r % len(brokers) :] + brokers[: r % len(brokers)]
        for scenario in scenarios:
            for mode in modes:
                for name in order:
                    run_dir = workdir / f"run-{len(runs):03d}-{name}"
                    out, native = None, False
                    if profile:
                        out, native = profile[0] / f"{name}-{scenario.name}-{mode}-{r}.txt", profile[1]
                    result = run_once(SPECS[name], scenario, mode, limits, source, run_dir, out, native)
                    result["repeat"] = r
                    runs.append(result)
                    print(f"[{len(runs)}/{total}] {_progress(result)}", file=sys.stderr, flush=True)
    return runs


def _progress(result: dict) -> str:
    head = f"{result['broker']:<17} {result['scenario']:<13} {result['mode']:<10} r{result.get('repeat', 0)}"
    if "produce_msg_s" not in result:
        return f"{head} FAILED {result.get('error')}"
    problems = failures(result)
    return (
        f"{head} produce {result['produce_msg_s']:>10,.0f} msg/s {result['produce_mb_s']:>8.1f} MB/s"
        f"  consume {result['consume_msg_s']:>10,.0f} msg/s  cpu {result['broker_cpu_s']:.2f}s"
        f"  rss {result['peak_rss_mib']:.0f} MiB  {'; '.join(problems) if problems else 'ok'}"
    )
