"""Does the model alone take longer on real segments than on made-up ones?

`segpredict speed` and model_ceiling.py time the model on synthetic inputs (a
byte pattern, uniform random bytes); the pipeline runs it on the benchmark's
real digits. This times one shape (16,384 segments in 400 even rows, the
budget's) with each kind of data, interleaved in rounds so drift hits each
kind alike, then real data for --sustain batches back to back (the length of
a run), reporting the device time per block of 100 batches, so the drift of
a long run shows. The TorchScript model (channels-last bf16, as segpredict
runs it) and, with --aoti, a CUDA package through torch's own loader.

    python benches/gpu/ceiling_data.py --model models/digits-seed.pt --input input.parquet [--aoti p.pt2] --json out.json
"""

from __future__ import annotations

import argparse
import json
import statistics

import numpy as np
import pyarrow.parquet as pq
import torch

SEGMENTS, ROWS = 16384, 400


def real_segments(path: str, n: int) -> torch.Tensor:
    """The first n segments of the input (8x8 u8 segments as fixed-size binary, the benchmark's
    layout), as uint8 [n, 1, 8, 8]."""
    pf = pq.ParquetFile(path)
    chunks, have = [], 0
    for i in range(pf.num_row_groups):
        values = pf.read_row_group(i, columns=["segments"]).column("segments").combine_chunks().values
        raw = np.frombuffer(values.buffers()[1], dtype=np.uint8)[values.offset * 64:(values.offset + len(values)) * 64]
        chunks.append(raw.reshape(-1, 64))
        have += len(chunks[-1])
        if have >= n:
            break
    if have == 0:
        raise SystemExit(f"{path}: no segments")
    segments = np.concatenate(chunks)
    # An input with fewer than n segments is repeated.
    return torch.from_numpy(segments[np.arange(n) % len(segments)].copy()).reshape(n, 1, 8, 8)


def data_kinds(path: str) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return {
        "pattern (i % 251, segpredict speed)": (torch.arange(SEGMENTS * 64) % 251).to(torch.uint8).reshape(SEGMENTS, 1, 8, 8),
        "random bytes (model_ceiling.py)": torch.randint(0, 256, (SEGMENTS, 1, 8, 8), generator=g, dtype=torch.uint8),
        "real digits (the run's input)": real_segments(path, SEGMENTS),
        "zeros": torch.zeros(SEGMENTS, 1, 8, 8, dtype=torch.uint8),
    }


def batch(segments_u8: torch.Tensor):
    dev = torch.device("cuda")
    counts = torch.full((ROWS,), SEGMENTS // ROWS, dtype=torch.int64)
    counts[-1] += SEGMENTS - int(counts.sum())
    tag_counts = torch.full((ROWS,), 2, dtype=torch.int64)
    return (segments_u8.to(dev).to(torch.bfloat16), counts.to(dev), torch.zeros(2 * ROWS, dtype=torch.int64, device=dev),
            tag_counts.to(dev))


def time_batches(model, inputs, n: int) -> list[float]:
    events = []
    for _ in range(n):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        model(*inputs)
        end.record()
        events.append((start, end))
    torch.cuda.synchronize()
    return [a.elapsed_time(b) for a, b in events]


def measure(name: str, model, kinds: dict, rounds: int, per_round: int, sustain: int) -> dict:
    inputs = {k: batch(v) for k, v in kinds.items()}
    for v in inputs.values():
        time_batches(model, v, 5)
    times: dict[str, list[float]] = {k: [] for k in kinds}
    for _ in range(rounds):
        for k, v in inputs.items():
            times[k] += time_batches(model, v, per_round)
    result = {"model": name, "segments": SEGMENTS, "rows": ROWS, "by_data": {}}
    for k, t in times.items():
        med = statistics.median(t)
        result["by_data"][k] = {"device_ms_median": round(med, 3), "device_ms_p90": round(sorted(t)[int(0.9 * len(t))], 3),
                                "segments_per_s": round(SEGMENTS / med * 1e3)}
        print(f"{name}: {k}: {med:.3f} ms median", flush=True)
    if sustain:
        t = time_batches(model, inputs["real digits (the run's input)"], sustain)
        blocks = [round(statistics.median(t[i:i + 100]), 3) for i in range(0, len(t), 100)]
        result["sustained_real_ms_per_100"] = blocks
        print(f"{name}: real digits, {sustain} batches back to back, median ms per 100: {blocks}", flush=True)
    return result


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--input", required=True)
    ap.add_argument("--aoti")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--per-round", type=int, default=60)
    ap.add_argument("--sustain", type=int, default=2500)
    ap.add_argument("--json")
    args = ap.parse_args()
    kinds = data_kinds(args.input)
    results = []
    with torch.inference_mode():
        ts = torch.jit.load(args.model, map_location="cuda").to(torch.bfloat16).eval().to(memory_format=torch.channels_last)
        results.append(measure("torchscript", ts, kinds, args.rounds, args.per_round, args.sustain))
        if args.aoti:
            package = torch._inductor.aoti_load_package(args.aoti, device_index=torch.cuda.current_device())
            results.append(measure("aoti", package, kinds, args.rounds, args.per_round, args.sustain))
    if args.json:
        json.dump(results, open(args.json, "w"), indent=1)


if __name__ == "__main__":
    main()
