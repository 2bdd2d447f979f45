"""Which commit and machine a benchmark ran on, for its results files.

    python benches/provenance.py [--binary target/release/segpredict]

prints one Markdown line (the shell benchmarks write it to
$OUT/provenance.md); `provenance()` gives the same as a dict for a results
JSON, and `markdown(p)` the line. The commit is `git describe`'s of the
checkout (with `-dirty` when it has changes); where the benchmark runs from a
copy without `.git` (a lent GPU machine), set BENCH_COMMIT to the commit the
binary was built from.
"""

import argparse
import os
import platform
import subprocess
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _run(*cmd):
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=30, cwd=ROOT)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return out.stdout.strip() if out.returncode == 0 else ""


def commit():
    given = os.environ.get("BENCH_COMMIT")
    if given:
        return given
    found = _run("git", "describe", "--always", "--dirty", "--abbrev=7")
    return found or "unknown (no git checkout here: set BENCH_COMMIT)"


def cpu_model():
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def provenance(binary=None):
    gpus = [g for g in _run("nvidia-smi", "--query-gpu=name,memory.total,driver_version",
                            "--format=csv,noheader").splitlines() if g]
    p = {
        "commit": commit(),
        "date_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "gpus": gpus,
        "platform": platform.platform(),
        "load_average": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
    }
    if binary:
        p["binary"] = _run(str(binary), "--version") or str(binary)
    return p


def markdown(p):
    gpu = "; GPU: " + ", ".join(p["gpus"]) if p.get("gpus") else "; no GPU"
    binary = f", binary `{p['binary']}`" if p.get("binary") else ""
    return (f"Commit {p['commit']}{binary}, {p['date_utc']} UTC. Machine: {p['cpu']}, "
            f"{p['cores']} cores{gpu}; {p['platform']}; load average {p['load_average']:.1f} at the start.")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--binary", help="the segpredict binary measured (its --version is recorded)")
    print(markdown(provenance(ap.parse_args().binary)))
