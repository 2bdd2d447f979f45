# segpredict's container image: `just image [TAG]` builds it (README,
# "Container image"). Two stages: the first builds the binary against the
# pinned torch wheel's libtorch; the second holds only the binary and the
# shared libraries it loads from that wheel.

# --- build: Rust, and the torch wheel for libtorch (LIBTORCH_USE_PYTORCH) ---
FROM rust:1.95-bookworm AS build

# The distribution is pinned by the base image's tag; its python3-venv is
# the one bookworm ships, so the version is not repeated here.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3-venv \
    && rm -rf /var/lib/apt/lists/*

ENV VIRTUAL_ENV=/opt/venv \
    LIBTORCH_USE_PYTORCH=1 \
    PATH=/opt/venv/bin:$PATH

# torch at the version tools/requirements.txt pins, and nothing else.
COPY tools/requirements.txt /tmp/requirements.txt
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
RUN python3 -m venv /opt/venv \
    && pip install --no-cache-dir "$(grep '^torch==' /tmp/requirements.txt)" \
    && site=/opt/venv/lib/python3.11/site-packages \
    && find "$site/nvidia" -type d -name include -prune -exec rm -rf {} +

WORKDIR /src
COPY Cargo.toml Cargo.lock build.rs ./
COPY csrc csrc
COPY src src
COPY tests tests
RUN cargo build --release --locked --bin segpredict

# --- run: the binary and the wheel's libraries, at the paths it was linked against ---
FROM debian:bookworm-slim

ARG SITE=/opt/venv/lib/python3.11/site-packages
# libtorch, libc10 and their CUDA parts; the binary's rpath points here.
COPY --from=build ${SITE}/torch/lib ${SITE}/torch/lib
# The CUDA libraries libtorch_cuda loads through its rpath ($ORIGIN/../../nvidia/*/lib).
COPY --from=build ${SITE}/nvidia ${SITE}/nvidia
COPY --from=build /src/target/release/segpredict /usr/local/bin/segpredict

RUN useradd --system --uid 10001 --no-create-home segpredict
USER 10001
ENTRYPOINT ["/usr/local/bin/segpredict"]
CMD ["--help"]
