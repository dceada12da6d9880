"""Benchmark: what TLS costs, the official client on one broker's plain and pulsar+ssl:// ports.

Makes a CA and a server certificate (trustme, a dev dependency) in a temporary directory, starts
one Magnetar broker serving both ports, and runs the bench's scenarios (``bench.scenarios``:
produce and consume at once, every message checked) alternately over ``pulsar://`` and
``pulsar+ssl://`` (trusting the CA, as ``tls_trust_certs_file_path``), ``--repeat`` times each.
Prints one JSON object: each run's rates and the broker's CPU per message, by scenario and port.

    .venv/bin/python -m bench.tls_cost                     # 100B-batched, 1KB-sync, 1MB; 3 repeats
    .venv/bin/python -m bench.tls_cost --repeat 1 --duration 2
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

import trustme

from bench.machine import describe
from bench.scenarios import SCENARIOS, Limits, _measure, failures
from bench.workload import log_client_to
from magnetar.broker_process import BrokerProcess

DEFAULT_SCENARIOS = ("100B-batched", "1KB-sync", "1MB")
FIGURES = ("produce_msg_s", "produce_mb_s", "consume_msg_s", "consume_mb_s", "cpu_us_per_msg")


def _certificates(directory: Path) -> dict[str, str]:
    ca = trustme.CA()
    server = ca.issue_cert("127.0.0.1", "localhost")
    paths = {name: directory / f"{name}.pem" for name in ("ca", "cert", "key")}
    ca.cert_pem.write_to_path(str(paths["ca"]))
    paths["cert"].write_bytes(b"".join(blob.bytes() for blob in server.cert_chain_pems))
    server.private_key_pem.write_to_path(str(paths["key"]))
    return {name: str(path) for name, path in paths.items()}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.tls_cost", description=__doc__.split("\n")[0])
    p.add_argument("--scenarios", default=",".join(DEFAULT_SCENARIOS), help=f"from {', '.join(SCENARIOS)}")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--duration", type=float, default=4.0, help="seconds each run produces for")
    args = p.parse_args(argv)
    names = [n.strip() for n in args.scenarios.split(",") if n.strip()]
    with tempfile.TemporaryDirectory(prefix="magnetar-tls-cost-") as tmp:
        work = Path(tmp)
        log_client_to(work / "client.log")
        certs = _certificates(work)
        settings = {
            "broker_service_port_tls": 0,
            "tls_certificate_file_path": certs["cert"],
            "tls_key_file_path": certs["key"],
        }
        broker = BrokerProcess(work, settings).start()
        ports = {
            "plain": (broker.service_url, {}),
            "tls": (broker.service_url_tls, {"tls_trust_certs_file_path": certs["ca"]}),
        }
        runs: list[dict[str, object]] = []
        try:
            for _ in range(args.repeat):
                for name in names:
                    for port, (url, options) in ports.items():
                        limits = Limits(args.duration)
                        figures = _measure(
                            url, broker.proc.pid, SCENARIOS[name], "concurrent", limits, **options
                        )
                        runs.append(
                            {"scenario": name, "port": port, **figures, "failures": failures(figures)}
                        )
        finally:
            broker.stop()
    summary = {
        name: {
            port: {
                key: statistics.median(r[key] for r in runs if r["scenario"] == name and r["port"] == port)
                for key in FIGURES
            }
            for port in ports
        }
        for name in names
    }
    json.dump({"machine": describe(), "median": summary, "runs": runs}, sys.stdout, indent=1, default=str)
    print()
    return 1 if any(r["failures"] for r in runs) else 0


if __name__ == "__main__":
    sys.exit(main())
