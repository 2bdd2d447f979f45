# segpredict tasks. `just run` and `just test` are the quick start.

set shell := ["bash", "-euo", "pipefail", "-c"]

venv := justfile_directory() / ".venv"
python := venv / "bin/python"
export LIBTORCH_USE_PYTORCH := "1"
export VIRTUAL_ENV := venv
export PATH := venv / "bin" + ":" + env_var("PATH")

default: run

# Create the venv with torch 2.11.0 (libtorch for tch) and the Python tools' packages. Idempotent.
setup:
    #!/usr/bin/env bash
    set -euo pipefail
    stamp="{{venv}}/.segpredict-setup"
    want="$(sha256sum tools/requirements.txt | cut -d' ' -f1)"
    if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then exit 0; fi
    if [ ! -x "{{python}}" ]; then python3 -m venv "{{venv}}"; fi
    "{{python}}" -m pip install --quiet --disable-pip-version-check -r tools/requirements.txt
    echo "$want" > "$stamp"

# Build the release binary.
build: setup
    cargo build --release

# Set up, build, and predict the sample; prints where the output went.
run: build
    ./target/release/segpredict run pipelines/sample.toml

# What the tests need beyond the venv: the Pushgateway the metrics test
# pushes to (Debian's prometheus-pushgateway). `just test` runs this itself;
# it installs only when the binary is missing (root, or sudo).
test-deps:
    #!/usr/bin/env bash
    set -euo pipefail
    if command -v prometheus-pushgateway >/dev/null; then exit 0; fi
    sudo=""; if [ "$(id -u)" != 0 ]; then sudo="sudo"; fi
    echo "installing prometheus-pushgateway (Debian) for the metrics test" >&2
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends prometheus-pushgateway

# The test suite of every crate (CPU only; the GPU tests are listed as
# ignored). Installs what the tests need first (`test-deps`).
test: setup test-deps
    cargo test --release --workspace

# The core crate's tests alone: they build and run without libtorch.
test-core:
    cargo test --release -p segpredict-core -p segpredict-bucketing

# The GPU tests, on a CUDA machine (they fail without one).
test-gpu: setup
    cargo test --release --test integration gpu -- --ignored

# Formatting, clippy (warnings as errors) and the Dockerfile (hadolint).
lint: setup
    cargo fmt --all --check
    cargo clippy --release --workspace --all-targets -- -D warnings
    hadolint Dockerfile

# The container image (Dockerfile), with docker or podman where one runs here.
image tag=("segpredict:" + `grep -m1 '^version' Cargo.toml | cut -d'"' -f2`):
    #!/usr/bin/env bash
    set -euo pipefail
    for engine in docker podman; do
        if command -v "$engine" >/dev/null && "$engine" info >/dev/null 2>&1; then
            exec "$engine" build --tag "{{tag}}" .
        fi
    done
    echo "no container engine runs here (docker or podman with its daemon); the image was not built" >&2
    exit 1

# fmt, clippy, tests: what CI runs.
check: lint test

# Rebuild the sample Parquet file from scikit-learn's digits (byte-identical).
sample: setup
    {{python}} sample_data/make_sample.py

# Train digits-small and write digits-seed (TorchScript) under models/.
models: setup
    {{python}} tools/make_models.py

# The package is compiled for this CPU's instruction set; the tests use it. About 45 s on
# 2 cores. CUDA packages (on a GPU machine): tools/make_models.py --aoti --device cuda.
# Export digits-small and compile it with AOTInductor: models/digits-small.pt2 (committed).
models-aoti: setup
    {{python}} tools/make_models.py --aoti --only digits-small

# Host memory: peak RSS on the sample and on 20x the sample (benches/host/results.md).
bench-host-memory: build
    {{python}} benches/host/memory.py

# The GPU benchmark: run on a GPU machine with models/digits-seed.pt (see benches/gpu/RESULTS.md).
bench-gpu: build
    SEGPREDICT=target/release/segpredict bash benches/gpu/run.sh

# segpredict against the plain-PyTorch CPU pipeline on 5x the sample (benches/cpu/RESULTS.md).
bench-cpu: build
    {{python}} benches/cpu/compare.py

# The gap to the model's own ceiling, on a GPU machine with models/digits-seed.pt (benches/gpu/RESULTS.md).
bench-gpu-gap: build
    SEGPREDICT=target/release/segpredict bash benches/gpu/gap.sh
