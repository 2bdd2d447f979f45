"""What CUDA's own start-up costs on this machine, step by step: the floor under
segpredict's time to first batch (benches/gpu/RESULTS.md, the start-up term).

Prints one JSON object: seconds for torch's import (not part of segpredict's run
clock, which starts after libtorch is linked), the CUDA context, the first
cuDNN convolution and the first cuBLAS matrix product at the benchmark's shapes
(bf16, channels-last), then each again (warm), so the first-call costs show.

Usage: python benches/gpu/startup_floor.py [--device cuda:0]
"""

from __future__ import annotations

import argparse
import json
import time


def timed(step, results, name):
    started = time.perf_counter()
    step()
    results[name] = round(time.perf_counter() - started, 4)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda:0")
    args = ap.parse_args()
    results: dict[str, float] = {}
    started = time.perf_counter()
    import torch

    results["import_torch_s"] = round(time.perf_counter() - started, 4)
    device = torch.device(args.device)

    def context():
        torch.cuda.init()
        torch.zeros(1, device=device)
        torch.cuda.synchronize(device)

    timed(context, results, "cuda_context_s")
    x = torch.zeros(64, 512, 7, 7, device=device, dtype=torch.bfloat16).to(memory_format=torch.channels_last)
    w = torch.zeros(512, 512, 3, 3, device=device, dtype=torch.bfloat16).to(memory_format=torch.channels_last)
    a = torch.zeros(256, 256, device=device, dtype=torch.bfloat16)

    def conv():
        torch.nn.functional.conv2d(x, w, padding=1)
        torch.cuda.synchronize(device)

    def matmul():
        a @ a
        torch.cuda.synchronize(device)

    timed(conv, results, "first_conv_s")
    timed(matmul, results, "first_matmul_s")
    timed(conv, results, "second_conv_s")
    timed(matmul, results, "second_matmul_s")
    print(json.dumps(results))


if __name__ == "__main__":
    main()
