"""Host memory stays bounded as the input grows: peak RSS of segpredict on
the sample (1x) and on an input 20x its size (new ids), in one run.

    python benches/host/memory.py [--reps 3] [--bin target/release/segpredict] [--out benches/host]

The 20x input is the sample repeated with fresh ids, written with the
sample's row-group size. Each size runs --reps times; the report's
peak_rss_bytes (VmHWM) is read back and the medians compared. Writes
results.json and results.md into --out (default benches/host), with the
commit and machine.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from provenance import markdown as provenance_line, provenance  # noqa: E402

SAMPLE = ROOT / "sample_data" / "digits.parquet"


def make_scaled(times: int, out: Path) -> int:
    table = pq.read_table(SAMPLE)
    parts = []
    for k in range(times):
        ids = pa.array([f"x{k:02d}-{i}" for i in table.column("id").to_pylist()])
        parts.append(table.set_column(0, "id", ids))
    scaled = pa.concat_tables(parts)
    pq.write_table(scaled, out, row_group_size=500, compression="zstd")
    return scaled.num_rows


def run(bin_path: Path, input_path: Path, out_dir: Path) -> dict:
    subprocess.run(
        [str(bin_path), "run", str(ROOT / "pipelines" / "sample.toml"), "--input", str(input_path),
         "--output", str(out_dir), "--overwrite", "--device", "cpu"],
        check=True, stdout=subprocess.DEVNULL,
    )
    report = json.loads((out_dir / "_report.json").read_text())
    assert report["rows_out"] + report["rows_rejected"] == report["rows_in"]
    return {"rows": report["rows_in"], "peak_rss_mib": report["peak_rss_bytes"] / 2**20, "wall_s": report["wall_s"]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--bin", type=Path, default=ROOT / "target" / "release" / "segpredict")
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent)
    args = ap.parse_args()
    prov = provenance(args.bin)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        big = tmp / "sample-20x.parquet"
        make_scaled(20, big)
        runs = {"1x": [], "20x": []}
        for _ in range(args.reps):  # interleaved, so drift hits both sizes alike
            runs["1x"].append(run(args.bin, SAMPLE, tmp / "out-1x"))
            runs["20x"].append(run(args.bin, big, tmp / "out-20x"))
    median = {k: statistics.median(r["peak_rss_mib"] for r in v) for k, v in runs.items()}
    result = {
        "provenance": prov,
        "machine": f"{platform.machine()}, {subprocess.run(['nproc'], capture_output=True, text=True).stdout.strip()} cores",
        "pipeline": "pipelines/sample.toml (digits-small, CPU, max_held_rows 16384)",
        "runs": runs,
        "median_peak_rss_mib": median,
        "ratio_20x_over_1x": round(median["20x"] / median["1x"], 3),
    }
    here = args.out
    here.mkdir(parents=True, exist_ok=True)
    (here / "results.json").write_text(json.dumps(result, indent=2) + "\n")
    md = (
        provenance_line(prov) + "\n\n"
        + "| input | rows | median peak RSS (MiB) | runs (MiB) |\n|---|---|---|---|\n"
        + "\n".join(
            f"| {k} | {v[0]['rows']} | {median[k]:.1f} | " + ", ".join(f"{r['peak_rss_mib']:.1f}" for r in v) + " |"
            for k, v in runs.items()
        )
        + f"\n\nPeak RSS ratio 20x / 1x (medians): **{result['ratio_20x_over_1x']}** (bound: 1.5)\n"
    )
    (here / "results.md").write_text(md)
    print(md)


if __name__ == "__main__":
    main()
