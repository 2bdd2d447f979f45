"""report_with_batches.py DIR OUT: copies segpredict's DIR/_report.json to OUT
with `batch_records` filled in from the report's `batches_file`
(DIR/_segpredict/batches.parquet; DIR/_batches.parquet before manifest
format 4), where segpredict writes them since the records are streamed, not held in the report), so the
summaries read one JSON per run as before; null fields are left out, as the
report used to leave them out."""

import json
import sys
from pathlib import Path

import pyarrow.parquet as pq


def without_nulls(value):
    if isinstance(value, dict):
        return {k: without_nulls(v) for k, v in value.items() if v is not None}
    return value


def main() -> None:
    run_dir, out = Path(sys.argv[1]), Path(sys.argv[2])
    report = json.loads((run_dir / "_report.json").read_text())
    batches = run_dir / report.get("batches_file", "_segpredict/batches.parquet")
    if "batch_records" not in report and batches.exists():
        report["batch_records"] = [without_nulls(r) for r in pq.read_table(batches).to_pylist()]
    out.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
