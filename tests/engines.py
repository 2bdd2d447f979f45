"""engines.py OUT: reads segpredict's output directory OUT the way the next
job would, with every engine the tests have, and prints one JSON object:
what each engine saw of `out/*.parquet` (or of `out/` as a dataset), and
the run files at their documented paths. tests/engines.rs asserts on it."""

import json
import sys
from pathlib import Path

import duckdb
import pandas as pd
import polars as pl
import pyarrow.dataset as ds
import pyarrow.parquet as pq


def main() -> None:
    out = Path(sys.argv[1])
    glob = str(out / "*.parquet")
    seen = {}
    # The first query anyone types (issue 36).
    by_label = duckdb.sql(f"select label, count(*) from '{glob}' group by 1").fetchall()
    seen["duckdb"] = {"rows": sum(n for _, n in by_label), "labels": dict(by_label)}
    frame = pl.scan_parquet(glob).group_by("label").len().collect()
    seen["polars"] = {
        "rows": int(frame["len"].sum()),
        "labels": dict(zip(frame["label"].to_list(), frame["len"].to_list())),
    }
    dataset = ds.dataset(out, format="parquet")
    seen["pyarrow_dataset"] = {
        "rows": dataset.count_rows(),
        "columns": dataset.schema.names,
    }
    table = pd.read_parquet(out)
    seen["pandas"] = {"rows": len(table), "columns": list(table.columns)}
    seen["rejects_rows"] = pq.read_table(out / "_rejects/rejects.parquet").num_rows
    seen["batches_rows"] = pq.read_table(out / "_segpredict/batches.parquet").num_rows
    print(json.dumps(seen))


if __name__ == "__main__":
    main()
