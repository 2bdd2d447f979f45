"""How many row groups the reader must fetch ahead to hide a store's latency
(issue 24: "a default that keeps the GPU fed on a real network: measure it
against an injected per-request latency").

    python benches/cpu/s3_concurrency.py [--times 25] [--latency-ms 50] [--concurrency 1 2 4 8 16] [--rounds 3]

The readers alone (crates/reader/examples/read_rate.rs: plan, prefetch,
decode, no model), so the number is what the reader can feed a consumer as
fast as the H200, not the CPU model's pace. Input: the sample scaled as in
s3.py, in moto's S3 server behind tools/s3/fault_proxy.py adding
--latency-ms to every request (a cloud store's first-byte latency). Each
fetch_concurrency is run --rounds times, interleaved; medians. Also the
same with no added latency and from local disk, in the same run.

Writes benches/cpu/results/s3-concurrency.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compare import ROOT, make_scaled, provenance, provenance_line  # noqa: E402
from s3 import BUCKET, PREFIX, Child, client, s3_env  # noqa: E402

READ_RATE = ROOT / "target" / "release" / "examples" / "read_rate"


def read_rate(input_: str, concurrency: int, env: dict) -> dict:
    out = subprocess.run([str(READ_RATE), input_, str(concurrency)], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--times", type=int, default=25)
    ap.add_argument("--latency-ms", type=float, default=50.0)
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 2, 4, 8, 16])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="segpredict-bench-s3c-") as tmp:
        big = Path(tmp) / f"sample-{args.times}x.parquet"
        rows = make_scaled(args.times, big)
        moto = Child("moto's S3 server", [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", "0"],
                     r"Running on http://127\.0\.0\.1:(\d+)")
        proxy = Child("the fault proxy", [sys.executable, str(ROOT / "tools/s3/fault_proxy.py"), f"--target=127.0.0.1:{moto.port}",
                                          "--listen-port=0", f"--latency-seconds={args.latency_ms / 1000}"], r"^(\d+)$")
        try:
            s3 = client(moto.endpoint)
            s3.create_bucket(Bucket=BUCKET)
            s3.upload_file(str(big), BUCKET, PREFIX + big.name)
            url = f"s3://{BUCKET}/{PREFIX}"
            runs: dict[str, list[dict]] = {}
            for r in range(args.rounds):
                runs.setdefault("local", []).append(read_rate(str(big), 1, dict(os.environ)))
                runs.setdefault("s3, no added latency, 8", []).append(read_rate(url, 8, s3_env(moto.endpoint)))
                for c in args.concurrency:
                    x = read_rate(url, c, s3_env(proxy.endpoint))
                    runs.setdefault(f"s3 + {args.latency_ms:g} ms, {c}", []).append(x)
                    print(f"round {r + 1}: concurrency {c}: {x['rows_per_s']:,.0f} rows/s", flush=True)
        finally:
            proxy.stop()
            moto.stop()
    result = {"provenance": provenance(), "rows": rows, "times": args.times, "latency_ms": args.latency_ms, "rounds": args.rounds,
              "cores": os.cpu_count(), "date_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
              "load": os.getloadavg()[0], "runs": runs,
              "median_rows_per_s": {k: statistics.median(x["rows_per_s"] for x in v) for k, v in runs.items()}}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "s3-concurrency.json").write_text(json.dumps(result, indent=1))
    lines = [f"# The reader alone against a store's latency ({args.latency_ms:g} ms a request)", "",
             provenance_line(result["provenance"]), "",
             f"{rows:,} rows, {args.rounds} rounds interleaved, {os.cpu_count()} cores, {result['date_utc']} UTC, "
             f"load {result['load']:.1f}; `benches/cpu/s3_concurrency.py` (readers only: `crates/reader/examples/read_rate.rs`, "
             "2 reader threads, no model; moto behind `tools/s3/fault_proxy.py --latency-seconds`).", "",
             "| input, fetch_concurrency | rows/s, median | requests |", "|---|---|---|"]
    for k, v in runs.items():
        lines.append(f"| {k} | {result['median_rows_per_s'][k]:,.0f} | {v[0]['requests']} |")
    (args.out / "s3-concurrency.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
