"""Host memory stays bounded as the input grows: peak RSS of segpredict on
the sample (1x) and on an input 20x its size (new ids), in one run.

    python benches/host/memory.py [--reps 3] [--bin target/release/segpredict] [--out benches/host]
    python benches/host/memory.py --carry [--wide 50] [--times 10] [--reps 3] [--out benches/host]

With --carry: `[writers] carry = "all"` on a wide table (the sample --times
over with --wide extra columns: strings, float64s, int64s and lists of
int32 in turn) against the same run carrying nothing; writes
carry-results.json and carry-results.md, with each run's carried bytes (the
output's carried columns, uncompressed) and the bound they are held under
(`[bucketing] max_held_mib`, default 4096 MiB, counting each held row's
segments and carried values).

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


def make_wide(times: int, wide: int, out: Path) -> int:
    """The sample --times over (fresh ids) with `wide` extra columns."""
    table = pq.read_table(SAMPLE)
    parts = []
    for k in range(times):
        ids = pa.array([f"w{k:02d}-{i}" for i in table.column("id").to_pylist()])
        parts.append(table.set_column(0, "id", ids))
    t = pa.concat_tables(parts).combine_chunks()
    n = t.num_rows
    for c in range(wide):
        kind = c % 4
        if kind == 0:
            col = pa.array([f"value-{c}-{i % 997}-{'x' * (i % 23)}" for i in range(n)])
        elif kind == 1:
            col = pa.array([i * 0.5 + c for i in range(n)], pa.float64())
        elif kind == 2:
            col = pa.array([i * 7 + c for i in range(n)], pa.int64())
        else:
            col = pa.array([list(range((i + c) % 5)) for i in range(n)], pa.list_(pa.int32()))
        t = t.append_column(f"extra_{c:02d}", col)
    pq.write_table(t, out, row_group_size=500, compression="zstd")
    return n


def pipeline_file(tmp: Path, carry: str | None) -> Path:
    """pipelines/sample.toml with absolute paths, carrying `carry`."""
    text = (ROOT / "pipelines" / "sample.toml").read_text().replace('"../', f'"{ROOT}/')
    if carry is not None:
        text = text.replace("[writers]\n", f"[writers]\ncarry = {carry}\n")
    path = tmp / f"pipeline-{'carry' if carry else 'plain'}.toml"
    path.write_text(text)
    return path


def carried_mib(out_dir: Path) -> float:
    """The output's carried columns, uncompressed (Arrow's own sizes)."""
    own = {"id", "label", "label_id", "score", "source_file", "source_row"}
    total = 0
    for part in sorted(out_dir.glob("part-*.parquet")):
        t = pq.read_table(part)
        total += sum(t.column(n).nbytes for n in t.column_names if n not in own)
    return total / 2**20


def run(bin_path: Path, input_path: Path, out_dir: Path, pipeline: Path | None = None) -> dict:
    subprocess.run(
        [str(bin_path), "run", str(pipeline or ROOT / "pipelines" / "sample.toml"), "--input", str(input_path),
         "--output", str(out_dir), "--overwrite", "--device", "cpu"],
        check=True, stdout=subprocess.DEVNULL,
    )
    report = json.loads((out_dir / "_report.json").read_text())
    assert report["rows_out"] + report["rows_rejected"] == report["rows_in"]
    return {"rows": report["rows_in"], "peak_rss_mib": report["peak_rss_bytes"] / 2**20, "wall_s": report["wall_s"]}


def carry_main(args) -> None:
    prov = provenance(args.bin)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        wide = tmp / "wide.parquet"
        rows = make_wide(args.times, args.wide, wide)
        arms = {"no carry": pipeline_file(tmp, None), 'carry = "all"': pipeline_file(tmp, '"all"')}
        runs = {k: [] for k in arms}
        for _ in range(args.reps):  # interleaved, so drift hits both arms alike
            for name, pipeline in arms.items():
                out = tmp / f"out-{len(runs[name])}-{'carry' if 'all' in name else 'plain'}"
                result = run(args.bin, wide, out, pipeline)
                result["carried_mib"] = round(carried_mib(out), 1)
                runs[name].append(result)
    median = {k: statistics.median(r["peak_rss_mib"] for r in v) for k, v in runs.items()}
    extra = median['carry = "all"'] - median["no carry"]
    result = {
        "provenance": prov,
        "machine": f"{platform.machine()}, {subprocess.run(['nproc'], capture_output=True, text=True).stdout.strip()} cores",
        "pipeline": "pipelines/sample.toml (digits-small, CPU, max_held_rows 16384, max_held_mib 4096)",
        "input": f"the sample x{args.times} ({rows} rows) with {args.wide} extra columns",
        "runs": runs,
        "median_peak_rss_mib": median,
        "carry_extra_rss_mib": round(extra, 1),
        "bound_mib": 4096,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "carry-results.json").write_text(json.dumps(result, indent=2) + "\n")
    md = (
        provenance_line(prov) + "\n\n" + result["input"] + ", " + result["pipeline"] + ".\n\n"
        + "| arm | median peak RSS (MiB) | runs (MiB) | carried, uncompressed (MiB) |\n|---|---|---|---|\n"
        + "\n".join(
            f"| {k} | {median[k]:.1f} | " + ", ".join(f"{r['peak_rss_mib']:.1f}" for r in v) + f" | {v[0]['carried_mib']} |"
            for k, v in runs.items()
        )
        + f"\n\nCarrying every column cost **{extra:.1f} MiB** of peak RSS (medians), "
        + f"under the {result['bound_mib']} MiB bound on held rows (`max_held_mib`).\n"
    )
    (args.out / "carry-results.md").write_text(md)
    print(md)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--bin", type=Path, default=ROOT / "target" / "release" / "segpredict")
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent)
    ap.add_argument("--carry", action="store_true", help='carry = "all" on a wide table against no carry')
    ap.add_argument("--wide", type=int, default=50, help="--carry: extra columns")
    ap.add_argument("--times", type=int, default=10, help="--carry: copies of the sample")
    args = ap.parse_args()
    if args.carry:
        carry_main(args)
        return
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
