"""Why does the CUDA AOTInductor package of digits-seed predict other labels than eager?

Inductor compiles the sync-free digits-seed (tools/make_models.py) with torch.compile, dynamic
shapes, its kernels tuned on the 3-row smoke example as AOTInductor tunes them on the export
example, then runs it on a benchmark-sized batch (~400 rows, ~16k segments) and compares with
eager. One variant per process (`--variant`), each changing one thing about how inductor
compiles the model:

    default          as packages were built before session 4 (inductor's own kernels throughout)
    no-persistent    triton.persistent_reductions=False
    aten-cumsum      cumsum as a call to ATen's kernel (make_models.py --aten cumsum)
    aten-searchsorted, aten-index_put, aten-all   likewise

Each prints one JSON line: for the parts of the model (row_of_each, the pooling, the whole
model), whether the compiled result equals eager (exactly for the integer row ids) and how far
the logits are, and each one's argmax agreement with eager f32 (the reference) beside eager
bf16's own agreement with it.

    python benches/gpu/aoti_diag.py --make-models tools/make_models.py [--variants ...] --json out.json
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import time

VARIANTS = {
    "default": ({}, []),
    "no-persistent": ({"triton.persistent_reductions": False}, []),
    "aten-cumsum": ({}, ["cumsum"]),
    "aten-searchsorted": ({}, ["searchsorted"]),
    "aten-index_put": ({}, ["index_put"]),
    "aten-all": ({}, ["cumsum", "searchsorted", "index_put"]),
}


def load_make_models(path: str):
    spec = importlib.util.spec_from_file_location("make_models", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def agreement(logits, reference) -> float:
    return (logits.float().argmax(1) == reference.argmax(1)).float().mean().item()


def run_variant(args) -> dict:
    import torch

    mm = load_make_models(args.make_models)
    configs, aten = VARIANTS[args.variant]
    mm.compile_as_aten(aten)
    for key, value in configs.items():
        torch._inductor.config.patch({key: value}).__enter__()
    torch.manual_seed(0)
    dev, bf16 = args.device, torch.bfloat16
    sync_free, original = mm.eager_models("digits-seed", dev, bf16)
    reference, _ = mm.eager_models("digits-seed", dev, torch.float32)
    smoke = [t.to(dev) for t in mm.smoke_inputs()]
    smoke[0] = smoke[0].to(bf16)
    batch = mm.batch_like_the_benchmark(dev, bf16)
    if dev == "cpu":  # a check of this script on a CPU machine: 20 rows, not ~400
        counts, tcounts = batch[1][:20], batch[3][:20]
        batch = (batch[0][: int(counts.sum())], counts, batch[2][: int(tcounts.sum())], tcounts)
    out: dict = {"variant": args.variant, "configs": configs, "aten": aten,
                 "batch_rows": int(batch[1].numel()), "batch_segments": int(batch[0].size(0))}

    # The row ids alone: integers, so compiled must equal eager exactly.
    rows_fn = torch.compile(mm.row_of_each, dynamic=True)
    with torch.inference_mode():
        rows_fn(smoke[1], smoke[0].size(0))
        got, want = rows_fn(batch[1], batch[0].size(0)), mm.row_of_each(batch[1], batch[0].size(0))
        out["row_of_each_equal"] = bool(torch.equal(got, want))
        out["row_of_each_wrong"] = int((got != want).sum())

    # The whole model, compiled, first called on the smoke example (the export's sizes).
    t0 = time.perf_counter()
    model = torch.compile(sync_free, dynamic=True)
    with torch.inference_mode():
        model(*smoke)
        got = model(*batch).float()
        want_bf16 = sync_free(*batch).float()
        want_orig = original(*batch).float()
        ref = reference(*[t.float() if t.is_floating_point() else t for t in batch]).float()
    out["compile_s"] = round(time.perf_counter() - t0, 1)
    scale = ref.abs().max().item()
    out["largest_logit"] = round(scale, 4)
    out["compiled_vs_eager_bf16_max_abs"] = round((got - want_bf16).abs().max().item(), 4)
    out["agree_with_f32"] = {"compiled_bf16": agreement(got, ref), "eager_sync_free_bf16": agreement(want_bf16, ref),
                             "eager_torchscript_class_bf16": agreement(want_orig, ref)}
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--make-models", required=True)
    ap.add_argument("--variant", choices=list(VARIANTS))
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--variants", nargs="+", default=list(VARIANTS))
    ap.add_argument("--json")
    args = ap.parse_args()
    if args.variant:
        print(json.dumps(run_variant(args)), flush=True)
        return
    children = {}
    for v in args.variants:
        env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=f"/tmp/inductor-{v}")
        children[v] = subprocess.Popen([sys.executable, __file__, "--make-models", args.make_models, "--variant", v,
                                        "--device", args.device],
                                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    results = []
    for v, child in children.items():
        try:
            stdout, stderr = child.communicate(timeout=240)
        except subprocess.TimeoutExpired:
            child.kill()
            stdout, stderr = child.communicate()
        line = next((x for x in reversed(stdout.splitlines()) if x.startswith("{")), None)
        result = json.loads(line) if line else {"variant": v, "failed": stderr.strip().splitlines()[-6:]}
        print(json.dumps(result), flush=True)
        results.append(result)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
