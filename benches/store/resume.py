"""What a resume reads over >= 100 committed parts on an S3 server: requests and bytes, before and after the commit log.

    python benches/store/resume.py --arm before:OLD_BINARY --arm after:target/release/segpredict
        [--rows-per-file 16 --kill-at 110 --rounds 3 --latency-ms 10 --out benches/store/results]

For each arm and round (the arms alternate): moto's S3 server (the venv's) behind
tools/s3/fault_proxy.py (no faults, LATENCY ms added to each request, as a
network's round trip would), the sample uploaded, a run writing to
s3://BUCKET/ARM-ROUND/ with ROWS_PER_FILE rows a part, killed (SIGKILL) once
KILL_AT parts are listed under the prefix. Then, through the proxy's request
log:

  check   `segpredict check`: the output's verdict alone, which is what a
          resume reads before it predicts (the committed parts, the ids they
          hold);
  rerun   the resumed run to its end, split at its first part upload into
          the resume's reads and the rest;

and the finished output is checked: every sample id once, `_SUCCESS`.
"before" is a binary built from the commit before the log (cd3b141^), whose
resume lists the prefix and reads each committed part's ids; "after" reads
the shard's log records. Writes resume.json and resume.md under --out.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow.dataset as ds

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "cpu"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from s3 import Child, client, s3_env  # noqa: E402
from provenance import markdown as provenance_line, provenance  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
BUCKET = "segpredict-resume"
SAMPLE = ROOT / "sample_data" / "digits.parquet"
LEASE_S = 2.0


def pipeline(out_prefix: str, rows_per_file: int) -> str:
    text = (ROOT / "pipelines" / "sample.toml").read_text()
    text = text.replace('path = "../sample_data/digits.parquet"', f'path = "s3://{BUCKET}/in/digits.parquet"')
    text = text.replace('path = "../models/digits-small.pt"', f'path = "{ROOT}/models/digits-small.pt"')
    text = text.replace('labels = "../models/digits-small.labels.txt"', f'labels = "{ROOT}/models/digits-small.labels.txt"')
    text = text.replace("batch_rows = 1024", "batch_rows = 16")
    text = text.replace("max_rows = 1024", "max_rows = 16\nmax_segments = 64")
    text = text.replace('dir = "../out/sample"', f'dir = "s3://{BUCKET}/{out_prefix}/"\nrows_per_file = {rows_per_file}\ncommit_every_s = 0.05')
    # A short lease, so that the killed run's lease has expired when `check` and the rerun
    # come (both binaries read [storage] lock_lease_s).
    return text.replace("overwrite = true", "overwrite = false") + f"\n[storage]\nlock_lease_s = {LEASE_S:g}\n"


def parts_listed(s3, prefix: str) -> int:
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=f"{prefix}/part-")
    return sum(len(p.get("Contents", [])) for p in pages)


def run_killed(binary: Path, toml: Path, env: dict, s3, prefix: str, kill_at: int) -> dict:
    child = subprocess.Popen([str(binary), "run", str(toml)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    listed = 0
    while child.poll() is None:
        listed = parts_listed(s3, prefix)
        if listed >= kill_at:
            child.send_signal(signal.SIGKILL)
            break
        time.sleep(0.02)
    child.wait()
    listed = parts_listed(s3, prefix)
    if child.returncode != -signal.SIGKILL:
        sys.exit(f"the run to kill ended by itself (exit {child.returncode}) with {listed} parts; lower --kill-at")
    return {"parts_listed_at_kill": listed}


def logged(log: Path) -> list[dict]:
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()] if log.exists() else []


def reads_input(r: dict) -> bool:
    return "/in/digits.parquet" in r["path"] or "prefix=in" in r["path"]


def account(requests: list[dict]) -> dict:
    """Requests and bytes, all and those on the output (not the input object)."""
    output = [r for r in requests if not reads_input(r)]
    return {**totals(requests), "output": totals(output)}


def kind(r: dict) -> str:
    """What a request is for, from its path: METHOD and the kind of object."""
    path = r["path"]
    what = ("list" if "list-type" in path or "prefix=" in path else "log record" if "/_progress/log/" in path
            else "lock" if "/_progress/lock" in path else "attempt" if "/_progress/attempt" in path
            else "part" if "/part-" in path else "other _progress" if "/_progress/" in path
            else "input" if reads_input(r) else path.rsplit("/", 1)[-1].split("?")[0] or "bucket")
    return f"{r['method']} {what}"


def totals(requests: list[dict]) -> dict:
    by_method: dict[str, int] = {}
    by_kind: dict[str, int] = {}
    for r in requests:
        by_method[r["method"]] = by_method.get(r["method"], 0) + 1
        by_kind[kind(r)] = by_kind.get(kind(r), 0) + 1
    return {"by_kind": by_kind, "requests": len(requests), "bytes_down": sum(r.get("bytes_out", 0) for r in requests),
            "bytes_up": sum(r.get("bytes_in", 0) for r in requests), "by_method": by_method}


def first_part_upload(requests: list[dict], prefix: str) -> int:
    for i, r in enumerate(requests):
        if r["method"] in ("PUT", "POST") and f"/{prefix}/" in r["path"] and ("part-" in r["path"]):
            return i
    return len(requests)


def timed(cmd: list[str], env: dict) -> tuple[int, float, str]:
    t0 = time.perf_counter()
    p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    return p.returncode, time.perf_counter() - t0, p.stderr[-2000:]


def one_round(arm: str, binary: Path, rnd: int, args, tmp: Path, moto: Child, s3) -> dict:
    prefix = f"{arm}-{rnd}"
    log = tmp / f"proxy-{prefix}.jsonl"
    proxy = Child("the fault proxy", [sys.executable, str(ROOT / "tools/s3/fault_proxy.py"), f"--target=127.0.0.1:{moto.port}",
                                      "--listen-port=0", f"--latency-seconds={args.latency_ms / 1000}", f"--log={log}"],
                  r"^(\d+)$")
    try:
        env = s3_env(proxy.endpoint)
        toml = tmp / f"{prefix}.toml"
        toml.write_text(pipeline(prefix, args.rows_per_file))
        result = {"arm": arm, "round": rnd, **run_killed(binary, toml, env, s3, prefix, args.kill_at)}
        time.sleep(LEASE_S + 1.5)  # past the killed run's lease
        mark = len(logged(log))
        rc, wall, err = timed([str(binary), "check", str(toml)], env)
        result["check"] = {"exit": rc, "wall_s": wall, **account(logged(log)[mark:])}
        if rc != 0:
            result["check"]["stderr"] = err
        mark = len(logged(log))
        rc, wall, err = timed([str(binary), "run", str(toml)], env)
        reqs = logged(log)[mark:]
        split = first_part_upload(reqs, prefix)
        result["rerun"] = {"exit": rc, "wall_s": wall, **account(reqs), "resume": account(reqs[:split]),
                           "after_first_part": account(reqs[split:])}
        if rc != 0:
            result["rerun"]["stderr"] = err
        result["output"] = check_output(s3, prefix, tmp)
        return result
    finally:
        proxy.stop()


def check_output(s3, prefix: str, tmp: Path) -> dict:
    local = tmp / "download" / prefix
    keys = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=f"{prefix}/"):
        keys += [o["Key"] for o in page.get("Contents", [])]
    for key in keys:
        dest = local / key[len(prefix) + 1:]
        dest.parent.mkdir(parents=True, exist_ok=True)
        s3.download_file(BUCKET, key, str(dest))
    parts = sorted(str(p) for p in local.glob("part-*.parquet"))
    ids = ds.dataset(parts, format="parquet").to_table(columns=["id"]).column("id").to_pylist() if parts else []
    want = ds.dataset(str(SAMPLE), format="parquet").to_table(columns=["id"]).column("id").to_pylist()
    return {"success": (local / "_SUCCESS").exists(), "parts": len(parts), "rows": len(ids),
            "ids_exact": sorted(ids) == sorted(want)}


def summary(results: list[dict], arms: list[str]) -> dict:
    out = {}
    for arm in arms:
        rs = [r for r in results if r["arm"] == arm]
        med = lambda f: statistics.median(f(r) for r in rs)  # noqa: E731
        out[arm] = {"parts_at_kill": med(lambda r: r["parts_listed_at_kill"]),
                    "check_requests": med(lambda r: r["check"]["requests"]), "check_bytes": med(lambda r: r["check"]["bytes_down"]),
                    "check_out_requests": med(lambda r: r["check"]["output"]["requests"]),
                    "check_out_bytes": med(lambda r: r["check"]["output"]["bytes_down"]),
                    "resume_out_requests": med(lambda r: r["rerun"]["resume"]["output"]["requests"]),
                    "resume_out_bytes": med(lambda r: r["rerun"]["resume"]["output"]["bytes_down"]),
                    "check_s": med(lambda r: r["check"]["wall_s"]),
                    "resume_requests": med(lambda r: r["rerun"]["resume"]["requests"]),
                    "resume_bytes": med(lambda r: r["rerun"]["resume"]["bytes_down"]),
                    "rerun_requests": med(lambda r: r["rerun"]["requests"]), "rerun_s": med(lambda r: r["rerun"]["wall_s"]),
                    "exact": all(r["output"]["ids_exact"] and r["output"]["success"] and r["rerun"]["exit"] == 0 for r in rs)}
    return out


def markdown(res: dict) -> str:
    s, arms = res["summary"], res["arms"]
    lines = ["# Resume over >= 100 committed parts on S3: requests and bytes", "", provenance_line(res["provenance"]), "",
             f"`benches/store/resume.py`: the sample (2,000 rows) from and to moto's S3 server behind tools/s3/fault_proxy.py "
             f"({res['latency_ms']:g} ms added a request), {res['rows_per_file']} rows a part, killed with SIGKILL once "
             f"{res['kill_at']} parts were listed; {res['rounds']} rounds, arms alternating; medians.", "",
             "| | " + " | ".join(arms) + " |", "|---|" + "---|" * len(arms)]
    rows = [("parts listed at the kill", "parts_at_kill", "{:.0f}"),
            ("`check` (the verdict a resume reads): requests on the output", "check_out_requests", "{:.0f}"),
            ("`check`: bytes read from the output", "check_out_bytes", "{:,.0f}"),
            ("`check`: requests in all (the input's footer too)", "check_requests", "{:.0f}"),
            ("`check`: seconds", "check_s", "{:.2f}"),
            ("rerun up to its first part upload: requests on the output", "resume_out_requests", "{:.0f}"),
            ("rerun up to its first part upload: bytes read from the output", "resume_out_bytes", "{:,.0f}"),
            ("rerun up to its first part upload: requests in all", "resume_requests", "{:.0f}"),
            ("whole rerun: requests", "rerun_requests", "{:.0f}"), ("whole rerun: seconds", "rerun_s", "{:.2f}"),
            ("every id once and `_SUCCESS` (all rounds)", "exact", "{}")]
    for label, key, fmt in rows:
        lines.append(f"| {label} | " + " | ".join(fmt.format(s[a][key]) for a in arms) + " |")
    lines += ["", "Each round's numbers, requests by method and the arms' binaries are in `resume.json`."]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--arm", action="append", required=True, help="NAME:BINARY (repeat; e.g. before:... after:...)")
    ap.add_argument("--rows-per-file", type=int, default=16)
    ap.add_argument("--kill-at", type=int, default=110, help="kill the first run once this many parts are listed")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--latency-ms", type=float, default=10.0)
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results")
    args = ap.parse_args()
    arms = [a.split(":", 1) for a in args.arm]
    res = {"provenance": provenance(Path(arms[-1][1])), "arms": [a for a, _ in arms],
           "binaries": {a: str(Path(b).resolve()) for a, b in arms}, "rows_per_file": args.rows_per_file,
           "kill_at": args.kill_at, "rounds": args.rounds, "latency_ms": args.latency_ms, "results": []}
    with tempfile.TemporaryDirectory(prefix="segpredict-bench-resume-") as tmp:
        tmp = Path(tmp)
        moto = Child("moto's S3 server", [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", "0"],
                     r"Running on http://127\.0\.0\.1:(\d+)")
        try:
            s3 = client(moto.endpoint)
            s3.create_bucket(Bucket=BUCKET)
            s3.upload_file(str(SAMPLE), BUCKET, "in/digits.parquet")
            for rnd in range(1, args.rounds + 1):
                for arm, binary in arms:
                    r = one_round(arm, Path(binary), rnd, args, tmp, moto, s3)
                    res["results"].append(r)
                    print(json.dumps({k: r[k] for k in ("arm", "round", "parts_listed_at_kill")}),
                          "check on output", r["check"]["output"]["requests"], "resume on output", r["rerun"]["resume"]["output"]["requests"],
                          "exact", r["output"]["ids_exact"], flush=True)
        finally:
            moto.stop()
    res["summary"] = summary(res["results"], res["arms"])
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "resume.json").write_text(json.dumps(res, indent=1))
    md = markdown(res)
    (args.out / "resume.md").write_text(md)
    print(md)


if __name__ == "__main__":
    main()
