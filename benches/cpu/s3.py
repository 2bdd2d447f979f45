"""segpredict reading its input from a local S3 server against reading it
from local disk, on this machine's CPU (issue 24: ">= 0.8x local disk,
with the server's own limit beside it").

    python benches/cpu/s3.py [--times 25] [--rounds 5] [--bin target/release/segpredict]
    python benches/cpu/s3.py --server-only      # the server's limit and the upload alone

About 70 s a run at 25x on a quiet 2-core machine (the sample predicts at
~700 rows/s there): 5 rounds of two runs, plus the counted run, ~13 min.

What it does, all on loopback:
1. The input: the sample repeated --times times with fresh ids (25x: 50,000
   rows), zstd, --row-group-rows rows a row group (500, as compare.py).
2. moto's S3 server (the venv's, tools/requirements-test.txt) on a free
   port; the input uploaded to s3://segpredict-bench/in/.
3. The server's own limit, no segpredict: every row group's byte range
   (from the footer) fetched with plain signed range GETs (boto3) at each
   --concurrency, timed; as MB/s and as the input rows/s it would carry.
4. segpredict `run` on the same pipeline and output kind (a local
   directory, emptied before each run), --input the local file or the
   s3:// prefix, alternating, --rounds each: medians of rows/s by the run's
   own clock (_report.json's wall_s) and by process wall time, their ratio,
   and the median of the per-round ratios (the machine is shared).
5. One more S3 run through tools/s3/fault_proxy.py (no faults; with
   --proxy-latency-ms, that much delay a request, as a network's round
   trip) with its request log: requests and bytes, attributed to row groups
   by their byte ranges (footer reads apart), so the reader's amplification
   is on record.
6. The labels of an S3 run against a local run's, id for id.

Writes benches/cpu/results/s3.json and s3.md. The load average is recorded
around every run: on a shared machine the numbers are only as quiet as it
was.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import boto3
import pyarrow.dataset as ds
import pyarrow.parquet as pq
from botocore.config import Config

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compare import ROOT, make_scaled, provenance, provenance_line  # noqa: E402  (the same scaled input as the CPU comparison)

BUCKET = "segpredict-bench"
PREFIX = "in/"
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench", "AWS_REGION": "us-east-1"}


class Child:
    """A loopback server (moto, or the fault proxy) whose port is read from
    its output; its output drained on a thread so it never blocks."""

    def __init__(self, what: str, cmd: list[str], port_pattern: str, timeout_s: float = 60):
        self.what = what
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        self.tail: list[str] = []
        found = threading.Event()
        self.port = None

        def drain():
            for raw in self.proc.stdout:
                line = raw.decode(errors="replace").rstrip()
                self.tail = (self.tail + [line])[-50:]
                m = re.search(port_pattern, line)
                if m and self.port is None:
                    self.port = int(m.group(1))
                    found.set()
            found.set()

        threading.Thread(target=drain, daemon=True).start()
        if not found.wait(timeout_s) or self.port is None:
            self.stop()
            sys.exit(f"{what} did not start:\n" + "\n".join(self.tail))

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()


def s3_env(endpoint: str) -> dict:
    env = {**os.environ, **CREDENTIALS, "AWS_ENDPOINT_URL": endpoint, "AWS_ALLOW_HTTP": "true",
           "AWS_EC2_METADATA_DISABLED": "true", "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"}
    for var in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "HTTP_PROXY", "http_proxy"):
        env.pop(var, None)
    return env


def client(endpoint: str, pool: int = 10):
    return boto3.client("s3", endpoint_url=endpoint, aws_access_key_id=CREDENTIALS["AWS_ACCESS_KEY_ID"],
                        aws_secret_access_key=CREDENTIALS["AWS_SECRET_ACCESS_KEY"], region_name=CREDENTIALS["AWS_REGION"],
                        config=Config(max_pool_connections=max(pool, 10), retries={"max_attempts": 1}))


def row_group_ranges(path: Path) -> tuple[list[tuple[int, int, int]], int]:
    """(start, end exclusive, rows) of each row group's column chunks, and
    where the footer starts (the footer length sits in the last 8 bytes)."""
    meta = pq.ParquetFile(path).metadata
    groups = []
    for g in range(meta.num_row_groups):
        rg = meta.row_group(g)
        starts, ends = [], []
        for c in range(rg.num_columns):
            col = rg.column(c)
            start = col.dictionary_page_offset if col.has_dictionary_page and col.dictionary_page_offset else col.data_page_offset
            starts.append(start)
            ends.append(start + col.total_compressed_size)
        groups.append((min(starts), max(ends), rg.num_rows))
    size = path.stat().st_size
    with open(path, "rb") as f:
        f.seek(size - 8)
        footer_len = int.from_bytes(f.read(4), "little")
    return groups, size - 8 - footer_len


def server_limit(endpoint: str, key: str, groups, concurrency: int, repeats: int = 3) -> dict:
    """The best of `repeats` passes fetching every row group's range at
    `concurrency`: what the server alone delivers."""
    s3 = client(endpoint, concurrency)

    def fetch(g):
        body = s3.get_object(Bucket=BUCKET, Key=key, Range=f"bytes={g[0]}-{g[1] - 1}")["Body"].read()
        assert len(body) == g[1] - g[0]
        return len(body)

    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        with ThreadPoolExecutor(concurrency) as pool:
            total = sum(pool.map(fetch, groups))
        times.append(time.perf_counter() - t0)
    best = min(times)
    rows = sum(g[2] for g in groups)
    return {"concurrency": concurrency, "seconds_best": best, "seconds_all": times, "bytes": total,
            "mb_per_s": total / best / 1e6, "row_groups_per_s": len(groups) / best, "rows_per_s": rows / best}


def timed_run(cmd: list[str], env: dict, out: Path) -> dict:
    shutil.rmtree(out, ignore_errors=True)  # a finished output makes the next run a no-op
    load_before = os.getloadavg()[0]
    t0 = time.perf_counter()
    done = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wall = time.perf_counter() - t0
    if done.returncode != 0:
        sys.exit(f"{' '.join(cmd)} exited {done.returncode}:\n{done.stderr[-3000:]}")
    report = json.loads((out / "_report.json").read_text())
    assert report["rows_out"] + report["rows_rejected"] == report["rows_in"], report
    return {"process_wall_s": wall, "wall_s": report["wall_s"], "rows": report["rows_in"],
            "rows_per_s": report["rows_in"] / report["wall_s"], "rows_per_s_process": report["rows_in"] / wall,
            "load": (load_before, os.getloadavg()[0])}


def labels_of(path: Path) -> dict:
    t = ds.dataset(path, format="parquet").to_table(columns=["id", "label"])
    return dict(zip(t.column("id").to_pylist(), t.column("label").to_pylist()))


def requests_per_row_group(log: Path, groups, footer_start: int, size: int) -> dict:
    """The proxy's request log, attributed: each ranged GET to the row
    groups its range overlaps, or to the footer."""
    entries = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    per_group = [{"requests": 0, "bytes": 0} for _ in groups]
    footer = {"requests": 0, "bytes": 0}
    kinds: dict[str, int] = {}
    for e in entries:
        kind = e["method"] + (" range" if e["range"] else "")
        kinds[kind] = kinds.get(kind, 0) + 1
        m = re.fullmatch(r"bytes=(\d+)-(\d*)", e["range"] or "")
        if e["method"] != "GET" or not m:
            continue
        start = int(m.group(1))
        end = int(m.group(2)) + 1 if m.group(2) else size
        if start >= footer_start:
            footer["requests"] += 1
            footer["bytes"] += e["bytes_out"]
            continue
        for g, (a, b, _) in enumerate(groups):
            overlap = min(b, end) - max(a, start)
            if overlap > 0:
                per_group[g]["requests"] += 1
                per_group[g]["bytes"] += overlap
    reqs = [p["requests"] for p in per_group]
    ratio = [p["bytes"] / (g[1] - g[0]) for p, g in zip(per_group, groups)]
    return {"requests_total": len(entries), "by_kind": kinds,
            "bytes_out_total": sum(e["bytes_out"] or 0 for e in entries),
            "footer": footer, "row_group_requests_median": statistics.median(reqs), "row_group_requests_max": max(reqs),
            "row_group_requests_min": min(reqs), "row_group_bytes_read_over_size_median": statistics.median(ratio),
            "row_groups": len(groups)}


def compare_runs(args, tmp: Path, big: Path, moto: Child, groups, footer_start: int) -> dict:
    base = [str(args.bin), "run", str(args.pipeline), "--device", "cpu", "--overwrite"]
    outs = {"local": tmp / "out-local", "s3": tmp / "out-s3"}
    inputs = {"local": str(big), "s3": f"s3://{BUCKET}/{PREFIX}"}
    envs = {"local": dict(os.environ), "s3": s3_env(moto.endpoint)}
    runs: dict[str, list] = {"local": [], "s3": []}
    for r in range(args.rounds):
        # Alternate which goes first: neither always meets the other's leftovers.
        for name in ("local", "s3") if r % 2 == 0 else ("s3", "local"):
            cmd = [*base, "--input", inputs[name], "--output", str(outs[name])]
            res = timed_run(cmd, envs[name], outs[name])
            res["round"] = r + 1
            runs[name].append(res)
            print(f"round {r + 1} {name}: {res['rows_per_s']:,.0f} rows/s (run clock), {res['process_wall_s']:.1f} s process, "
                  f"load {res['load'][0]:.1f} -> {res['load'][1]:.1f}", flush=True)
    local_labels, s3_labels = labels_of(outs["local"]), labels_of(outs["s3"])
    same = sum(local_labels[k] == s3_labels.get(k) for k in local_labels)
    log = tmp / "proxy.log"
    proxy = Child("the fault proxy", [sys.executable, str(ROOT / "tools/s3/fault_proxy.py"), f"--target=127.0.0.1:{moto.port}",
                                      "--listen-port=0", f"--log={log}", f"--latency-seconds={args.proxy_latency_ms / 1000}"],
                  r"^(\d+)$")
    try:
        cmd = [*base, "--input", inputs["s3"], "--output", str(tmp / "out-proxy")]
        proxied = timed_run(cmd, s3_env(proxy.endpoint), tmp / "out-proxy")
    finally:
        proxy.stop()
    summary = {name: {"rows_per_s_median": statistics.median(x["rows_per_s"] for x in rs),
                      "rows_per_s_process_median": statistics.median(x["rows_per_s_process"] for x in rs)} for name, rs in runs.items()}
    ratios = {
        "s3/local (run clock medians)": summary["s3"]["rows_per_s_median"] / summary["local"]["rows_per_s_median"],
        "s3/local (process wall medians)": summary["s3"]["rows_per_s_process_median"] / summary["local"]["rows_per_s_process_median"],
        "s3/local (median of per-round ratios, run clock)": statistics.median(
            s["rows_per_s"] / loc["rows_per_s"] for s, loc in zip(runs["s3"], runs["local"])),
    }
    return {"runs": runs, "summary": summary, "ratios": {k: round(v, 3) for k, v in ratios.items()},
            "labels": {"rows": len(local_labels), "s3_rows": len(s3_labels), "same_label": same},
            "through_proxy": {"run": proxied, "latency_ms": args.proxy_latency_ms, "requests": requests_per_row_group(log, groups, footer_start, big.stat().st_size)}}


def markdown(r: dict) -> str:
    m = r["machine"]
    lines = [
        "# segpredict reading from a local S3 server against local disk (CPU)", "",
        provenance_line(r["provenance"]), "",
        f"{r['rows']:,} rows ({r['times']}x the sample, {r['row_groups']} row groups, {r['input_bytes'] / 1e6:.1f} MB zstd), "
        f"{m['cores']} cores, {m['date_utc']} UTC, load average {m['load_at_start']:.1f} at the start and {m['load_at_end']:.1f} at the end, "
        f"`benches/cpu/s3.py` (moto {r['moto']} on loopback, uploaded in {r['upload_s']:.2f} s).", "",
    ]
    if "summary" in r:
        loads = [x for rs in r["runs"].values() for run in rs for x in run["load"]]
        lines += [f"{r['rounds']} rounds, alternating; load average {min(loads):.1f}-{max(loads):.1f}.", "",
                  "| input | rows/s, median (run clock) | rows/s, median (process wall) | rounds (run clock) |", "|---|---|---|---|"]
        for name, label in (("local", "local disk"), ("s3", f"s3://{BUCKET}/{PREFIX} (moto)")):
            s, each = r["summary"][name], ", ".join(f"{x['rows_per_s']:,.0f}" for x in r["runs"][name])
            lines.append(f"| {label} | {s['rows_per_s_median']:,.0f} | {s['rows_per_s_process_median']:,.0f} | {each} |")
        lines.append("")
        lines += [f"- {k}: {v}x" for k, v in r["ratios"].items()]
        lab = r["labels"]
        lines += [f"- labels, S3 run vs local run: {lab['same_label']:,} of {lab['rows']:,} identical ({lab['s3_rows']:,} rows in the S3 run)", ""]
    lines += ["## The server's own limit (no segpredict)", "",
              "Every row group's byte range fetched with plain signed range GETs (boto3), best of 3 passes:", "",
              "| concurrency | seconds | MB/s | row groups/s | input rows/s carried |", "|---|---|---|---|---|"]
    for x in r["server_limit"]:
        lines.append(f"| {x['concurrency']} | {x['seconds_best']:.2f} | {x['mb_per_s']:.1f} | {x['row_groups_per_s']:,.0f} | {x['rows_per_s']:,.0f} |")
    if "through_proxy" in r:
        p, run = r["through_proxy"]["requests"], r["through_proxy"]["run"]
        latency = r["through_proxy"]["latency_ms"]
        lines += ["", f"## Requests and bytes (one S3 run through tools/s3/fault_proxy.py, no faults, {latency:g} ms added a request)", "",
                  f"- {p['requests_total']} requests ({', '.join(f'{k} {v}' for k, v in sorted(p['by_kind'].items()))}), "
                  f"{p['bytes_out_total'] / 1e6:.1f} MB served for a {r['input_bytes'] / 1e6:.1f} MB input",
                  f"- per row group ({p['row_groups']}): median {p['row_group_requests_median']} ranged GETs "
                  f"(min {p['row_group_requests_min']}, max {p['row_group_requests_max']}); "
                  f"bytes read / row group size, median {p['row_group_bytes_read_over_size_median']:.2f}",
                  f"- footer: {p['footer']['requests']} requests, {p['footer']['bytes']:,} bytes",
                  f"- that run: {run['rows_per_s']:,.0f} rows/s (run clock), {run['process_wall_s']:.1f} s process (the proxy is Python)"]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--times", type=int, default=25, help="the sample repeated this many times (25: 50,000 rows)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--bin", type=Path, default=ROOT / "target" / "release" / "segpredict")
    ap.add_argument("--pipeline", type=Path, default=ROOT / "pipelines" / "sample.toml")
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 16])
    ap.add_argument("--proxy-latency-ms", type=float, default=0.0,
                    help="a delay the proxy adds to each request of the counted run (a network's round trip)")
    ap.add_argument("--server-only", action="store_true", help="the input, the upload and the server's limit; no segpredict")
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results")
    args = ap.parse_args()
    from importlib.metadata import version

    with tempfile.TemporaryDirectory(prefix="segpredict-bench-s3-") as tmp:
        tmp = Path(tmp)
        big = tmp / f"sample-{args.times}x.parquet"
        rows = make_scaled(args.times, big)
        groups, footer_start = row_group_ranges(big)
        moto = Child("moto's S3 server", [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", "0"],
                     r"Running on http://127\.0\.0\.1:(\d+)")
        try:
            s3 = client(moto.endpoint)
            s3.create_bucket(Bucket=BUCKET)
            t0 = time.perf_counter()
            s3.upload_file(str(big), BUCKET, PREFIX + big.name)
            result = {"provenance": provenance(args.bin), "machine": {"cores": os.cpu_count(), "platform": platform.platform(),
                                  "date_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
                                  "load_at_start": os.getloadavg()[0]},
                      "rows": rows, "times": args.times, "rounds": args.rounds, "row_groups": len(groups),
                      "input_bytes": big.stat().st_size, "upload_s": time.perf_counter() - t0, "moto": version("moto")}
            result["server_limit"] = [server_limit(moto.endpoint, PREFIX + big.name, groups, c) for c in args.concurrency]
            for x in result["server_limit"]:
                print(f"server limit, concurrency {x['concurrency']}: {x['mb_per_s']:.1f} MB/s, {x['rows_per_s']:,.0f} rows/s", flush=True)
            if not args.server_only:
                result.update(compare_runs(args, tmp, big, moto, groups, footer_start))
        finally:
            moto.stop()
    result["machine"]["load_at_end"] = os.getloadavg()[0]
    args.out.mkdir(parents=True, exist_ok=True)
    stem = "s3-server-only" if args.server_only else "s3"
    (args.out / f"{stem}.json").write_text(json.dumps(result, indent=1))
    md = markdown(result)
    (args.out / f"{stem}.md").write_text(md)
    print(md)


if __name__ == "__main__":
    main()
