"""The report's decode-pool CPU against the kernel's accounting, on one run.

Runs `segpredict run PIPELINE --input INPUT --device cpu` under
/usr/bin/time (the process's user and system time), samples every
`decode-N` thread's utime + stime from /proc while it runs (the decode
pool's threads, by their names), and prints one JSON object: the report's
`busy_s.decode` and `decode_us_per_segment` (each decode thread's
CLOCK_THREAD_CPUTIME_ID, summed), the decode threads' /proc time, the
process's user and system time, and the ratios between them.

Usage:
  python benches/images/decode_cpu.py --segpredict target/release/segpredict \
      --pipeline pipelines/sample-jpeg.toml --input sample_data/digits-jpeg.parquet \
      --out /tmp/decode-cpu
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import time
from pathlib import Path


def decode_thread_seconds(pid: int, seen: dict[str, float]) -> None:
    """Updates `seen` (thread id -> CPU seconds) with `pid`'s decode threads."""
    ticks = os.sysconf("SC_CLK_TCK")
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return
    for task in tasks:
        try:
            name = (task / "comm").read_text().strip()
            stat = (task / "stat").read_text()
        except OSError:
            continue
        if name.startswith("decode-"):
            fields = stat.rsplit(")", 1)[1].split()
            seen[task.name] = (int(fields[11]) + int(fields[12])) / ticks


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--segpredict", required=True)
    ap.add_argument("--pipeline", required=True)
    ap.add_argument("--input", required=True)
    ap.add_argument("--out", required=True, type=Path)
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    timing = a.out / "time.txt"
    command = ["/usr/bin/time", "-f", "%U %S %e", "-o", str(timing), a.segpredict, "run", a.pipeline,
               "--input", a.input, "--output", str(a.out / "run"), "--device", "cpu"]
    with open(a.out / "run.log", "w") as log:
        timed = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        threads: dict[str, float] = {}
        while timed.poll() is None:
            children = Path(f"/proc/{timed.pid}/task/{timed.pid}/children")
            for child in children.read_text().split() if children.exists() else []:
                decode_thread_seconds(int(child), threads)
            time.sleep(0.01)
    assert timed.returncode == 0, (a.out / "run.log").read_text()
    user, system, wall = (float(v) for v in timing.read_text().split()[-3:])
    report = json.loads((a.out / "run" / "_report.json").read_text())
    decode = report["busy_s"]["decode"]
    proc = sum(threads.values())
    result = {
        "report_decode_s": decode,
        "report_decode_us_per_segment": report["decode_us_per_segment"],
        "segments": report["segments"],
        "decode_threads": len(threads),
        "decode_threads_proc_s": proc,
        "process_user_s": user,
        "process_sys_s": system,
        "wall_s": wall,
        "report_over_process_user": decode / user,
        "report_over_decode_threads_proc": decode / proc if proc else None,
    }
    print(json.dumps(result, indent=1))
    (a.out / "decode_cpu.json").write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
