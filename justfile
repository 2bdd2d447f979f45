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

# What the tests need beyond the venv's tools: the Pushgateway the metrics
# test pushes to (Debian's prometheus-pushgateway; installed only when the
# binary is missing, as root or with sudo), and tools/requirements-test.txt
# (moto's S3 server for the object-storage tests) into the venv, stamped like
# `setup`, and Azurite (npm, pinned: tools/azure/) for the Azure tests.
# `just test` runs this itself.
test-deps: setup
    #!/usr/bin/env bash
    set -euo pipefail
    stamp="{{venv}}/.segpredict-test-deps"
    want="$(sha256sum tools/requirements-test.txt | cut -d' ' -f1)"
    if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
        "{{python}}" -m pip install --quiet --disable-pip-version-check -r tools/requirements-test.txt
        echo "$want" > "$stamp"
    fi
    # Azurite (Azure Blob emulator), pinned in tools/azure/package-lock.json.
    azstamp=tools/azure/node_modules/.segpredict-test-deps
    azwant="$(sha256sum tools/azure/package-lock.json | cut -d' ' -f1)"
    if [ ! -f "$azstamp" ] || [ "$(cat "$azstamp")" != "$azwant" ]; then
        if ! command -v npm >/dev/null; then
            sudo=""; if [ "$(id -u)" != 0 ]; then sudo="sudo"; fi
            echo "installing npm (Debian) for Azurite, the Azure tests' emulator" >&2
            $sudo apt-get update -qq
            DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends npm
        fi
        echo "installing Azurite (npm ci in tools/azure) for the Azure tests" >&2
        (cd tools/azure && npm ci --no-audit --no-fund --loglevel=error)
        echo "$azwant" > "$azstamp"
    fi
    if command -v prometheus-pushgateway >/dev/null; then exit 0; fi
    sudo=""; if [ "$(id -u)" != 0 ]; then sudo="sudo"; fi
    echo "installing prometheus-pushgateway (Debian) for the metrics test" >&2
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends prometheus-pushgateway

mdbook_version := "0.5.4"

# cargo install, when mdbook is missing or another version, like test-deps.
# mdbook, which builds the docs book (docs/).
docs-deps:
    #!/usr/bin/env bash
    set -euo pipefail
    if [ "$(mdbook --version 2>/dev/null)" = "mdbook v{{mdbook_version}}" ]; then exit 0; fi
    echo "installing mdbook {{mdbook_version}} (cargo install) for the docs" >&2
    cargo install mdbook --locked --version {{mdbook_version}} --no-default-features --features search

# The docs book (docs/) into target/book/; open target/book/index.html.
docs: docs-deps
    mdbook build docs

# Installs what the tests need first (`test-deps`) and builds the docs book
# (`docs`; tests/docs.rs checks its links and the commands it quotes).
# The test suite of every crate (CPU only; the GPU tests are listed as ignored).
test: setup test-deps docs
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

# podman runs with runc (crun fails on these hosts' cgroups); mmdebstrap makes base images.
# Debian packages for the container image: podman, runc, mmdebstrap, uidmap; root or sudo.
setup-image:
    #!/usr/bin/env bash
    set -euo pipefail
    if command -v podman >/dev/null && command -v runc >/dev/null && command -v mmdebstrap >/dev/null; then exit 0; fi
    sudo=""; if [ "$(id -u)" != 0 ]; then sudo="sudo"; fi
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends podman runc mmdebstrap uidmap

# bookworm minbase as debian:bookworm-slim, and with gcc, g++ and this machine's Rust toolchain
# as rust:1.95-bookworm (docs/src/container.md). Kept once made; `force=1` remakes them.
# Local base images from Debian's packages (mmdebstrap), for where no registry is reachable.
image-base force="": setup-image
    bash tests/image/base.sh {{force}}

# SEGPREDICT_IMAGE_BASE=public|local|auto (auto: the public bases where the registry answers).
# The container image: `just image` (CUDA) or `just image cpu`; tag segpredict:VERSION[-cpu].
image variant="cuda" tag="": setup-image
    bash tests/image/build.sh {{variant}} {{tag}}

# IMAGE_VARIANT=cuda tests the CUDA image instead (on CPU); KEEP_IMAGE=1 keeps it afterwards.
# The image test: the CPU image predicts the sample (no network, non-root, read-only) as the binary.
test-image: build setup-image
    bash tests/image/test.sh

# tests/image/pods.sh, also part of test-image; uses segpredict:VERSION-cpu
# if built (KEEP_IMAGE=1 just test-image, or just image cpu), else builds it.
# The sharded Job as 3 pods of the CPU image, one killed, one paused past its lease, on S3 and Azurite.
test-pods: build setup-image test-deps
    #!/usr/bin/env bash
    set -euo pipefail
    . tests/image/common.sh
    tag="segpredict:$(crate_version)-cpu"
    if ! podman image exists "$tag"; then bash tests/image/build.sh cpu "$tag"; fi
    bash tests/image/pods.sh "$tag"

# fmt, clippy, tests: what CI runs.
check: lint test

# Rebuild the sample Parquet file from scikit-learn's digits (byte-identical).
sample: setup
    {{python}} sample_data/make_sample.py

# Rebuild the image sample (the sample's digits as PNG, 32x32 JPEG, datasets layout).
sample-images: setup
    {{python}} sample_data/make_image_samples.py

# Train digits-small and write digits-seed (TorchScript) under models/.
models: setup
    {{python}} tools/make_models.py

# The package is compiled for this CPU's instruction set; the tests use it. About 45 s on
# 2 cores. CUDA packages (on a GPU machine): tools/make_models.py --aoti --device cuda.
# Export digits-small and compile it with AOTInductor: models/digits-small.pt2 (committed).
models-aoti: setup
    {{python}} tools/make_models.py --aoti --only digits-small

# Arguments go to the script (`--reps 5`, `--out DIR`); benches/README.md lists every benchmark.
# Host memory: peak RSS on the sample and on 20x the sample (benches/host/results.md).
bench-host-memory *args: build
    {{python}} benches/host/memory.py {{args}}

# Arguments go to the script, e.g. `just bench-gpu --rows 100000 --work /scratch/bench`.
# The GPU benchmark: run on a GPU machine with models/digits-seed.pt (see benches/gpu/RESULTS.md).
bench-gpu *args: build
    bash benches/gpu/run.sh --segpredict target/release/segpredict --out out/gpu {{args}}

# segpredict against the plain-PyTorch CPU pipeline on 5x the sample (benches/cpu/RESULTS.md).
bench-cpu *args: build
    {{python}} benches/cpu/compare.py {{args}}

# Image decode + resize per core: segpredict vs Pillow, torchvision and the image crate
# (benches/images/RESULTS.md). torchvision goes into target/bench-python, not the venv.
bench-images *args: build
    cargo build --release --workspace --examples
    {{python}} -m pip install --quiet --disable-pip-version-check --no-deps --target target/bench-python torchvision==0.26.0
    {{python}} benches/images/compare.py {{args}}

# Arguments go to the script, e.g. `just bench-s3 --server-only` or `--rounds 3`.
# segpredict reading from a local S3 server (moto) against local disk, and the server's limit (benches/cpu/results/s3.md).
bench-s3 *args: build test-deps
    {{python}} benches/cpu/s3.py {{args}}

# Credentials: any; with AWS_ENDPOINT_URL=http://127.0.0.1:PORT and AWS_ALLOW_HTTP=true.
# moto's S3 server on loopback, for trying s3:// by hand.
s3-server port="9000": test-deps
    {{python}} -m moto.server -H 127.0.0.1 -p {{port}}

# Arguments go to the script, e.g. `just bench-gpu-gap --rows 2000000 --backends aoti`.
# The gap to the model's own ceiling, on a GPU machine with models/digits-seed.pt (benches/gpu/RESULTS.md).
bench-gpu-gap *args: build
    bash benches/gpu/gap.sh --segpredict target/release/segpredict --model models/digits-seed.pt --out out/gap {{args}}
