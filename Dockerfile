# segpredict's container image: `just image [VARIANT]` builds it
# (docs/src/container.md). Two targets:
#
#   cuda (the default, last stage): the binary, the torch wheel's libtorch
#        and the CUDA libraries it loads (the wheel's nvidia-* packages);
#   cpu  (`--target cpu`): the binary built without libtorch_cuda, and
#        libtorch's CPU libraries only; no CUDA at all.
#
# Each build stage compiles the binary against the pinned torch wheel's
# libtorch (LIBTORCH_USE_PYTORCH); each run stage holds only the binary and
# the shared libraries it loads, at the paths it was linked against (its
# rpath), so no LD_LIBRARY_PATH. No Python, pip or compiler in a run stage.
#
# The base images are build arguments: the defaults are the public ones;
# where no registry is reachable, `just image-base` makes equivalents from
# Debian's packages (mmdebstrap) and `just image` passes them.
ARG BUILD_IMAGE=docker.io/library/rust:1.95-bookworm
ARG RUN_IMAGE=docker.io/library/debian:bookworm-slim

# --- build: a venv for the torch wheel, and the tools the build needs ---
FROM ${BUILD_IMAGE} AS build-base

# The distribution is pinned by the base image's tag; these are the
# versions bookworm ships, so they are not repeated here. patchelf is for
# the CPU variant's libtorch.so (below).
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3-venv patchelf \
    && rm -rf /var/lib/apt/lists/*

ENV VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:$PATH
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
COPY tools/requirements.txt /tmp/requirements.txt
RUN python3 -m venv /opt/venv
WORKDIR /src

# --- build-cuda: torch as tools/requirements.txt pins it, with its CUDA ---
FROM build-base AS build-cuda
ENV LIBTORCH_USE_PYTORCH=1
RUN pip install --no-cache-dir "$(grep '^torch==' /tmp/requirements.txt)" \
    && site=/opt/venv/lib/python3.11/site-packages \
    && find "$site/nvidia" -type d -name include -prune -exec rm -rf {} +
# The whole context (.dockerignore keeps it to what the build needs), so a
# new crate or directory in the workspace needs no change here.
COPY . .
RUN cargo build --release --locked --bin segpredict \
    && cp target/release/segpredict /usr/local/bin/segpredict \
    && rm -rf target
# What the binary never loads, out of what the run stage copies: the Python
# extension's libraries (torch._C's) and static archives.
RUN site=/opt/venv/lib/python3.11/site-packages \
    && rm -rf "$site"/torch/lib/libtorch_python.so "$site"/torch/lib/libtorch_global_deps.so \
        "$site"/torch/lib/libshm.so "$site"/torch/lib/libshm \
    && find "$site/nvidia" -name '*.a' -delete

# --- build-cpu: the same wheel without its CUDA dependencies ---
# The wheel alone (--no-deps: none of the nvidia-* packages), then its CUDA
# libraries removed, so neither torch-sys nor the build scripts (build.rs,
# crates/worker/build.rs) link libtorch_cuda: they link it only where
# libtorch_cuda.so exists. Two CUDA libraries stay:
# the wheel's libtorch_cpu is linked against the CUDA runtime and CUPTI (the
# profiler's), which load without a GPU or driver; they come from the
# cuda-toolkit extras at the version torch's metadata pins, and nothing else
# of CUDA. The wheel's libtorch.so is a stub that loads libtorch_cpu and
# libtorch_cuda: it is relinked to need libtorch_cpu only, as the CPU wheels'
# libtorch.so does. torch without its Python dependencies cannot be
# imported, so torch-sys is given the wheel's libtorch directory (lib/,
# include/) rather than asking Python.
FROM build-base AS build-cpu
ENV LIBTORCH=/opt/venv/lib/python3.11/site-packages/torch
# cuda-toolkit is pinned, at the version torch's metadata names.
# hadolint ignore=DL3013
RUN pip install --no-cache-dir --no-deps "$(grep '^torch==' /tmp/requirements.txt)" \
    && site=/opt/venv/lib/python3.11/site-packages \
    && toolkit="$(sed -n 's/^Requires-Dist: cuda-toolkit\[[^]]*\]\(==[^;]*\);.*/cuda-toolkit[cudart,cupti]\1/p' \
        "$site"/torch-*.dist-info/METADATA)" \
    && pip install --no-cache-dir "${toolkit:?torch names no cuda-toolkit}" \
    && find "$site/nvidia/cu13/lib" -mindepth 1 ! -name libcudart.so.13 ! -name libcupti.so.13 -delete \
    && rm -rf "$site/nvidia/cu13/include" \
    && lib="$site/torch/lib" \
    && rm -rf "$lib"/libtorch_cuda*.so "$lib"/libc10_cuda.so "$lib"/libcaffe2_nvrtc.so \
        "$lib"/libtorch_nvshmem.so "$lib"/libtorch_python.so "$lib"/libtorch_global_deps.so \
        "$lib"/libshm.so "$lib"/libshm \
    && patchelf --remove-needed libtorch_cuda.so "$lib/libtorch.so"
COPY . .
RUN cargo build --release --locked --bin segpredict \
    && cp target/release/segpredict /usr/local/bin/segpredict \
    && rm -rf target \
    && readelf -d /usr/local/bin/segpredict > /tmp/dynamic \
    && if grep -i cuda /tmp/dynamic; then echo "the CPU binary needs CUDA" >&2; exit 1; fi

# --- certs: Debian's CA bundle (Mozilla's roots) for the run stages ---
# object_store's HTTP client loads the system's CA certificates when it is
# built, and without any it cannot be built at all, not even for an http://
# endpoint: without this bundle no s3://, gs:// or az:// location works in
# the image (tests/image/pods.sh). Extracted, not installed: the build's RUN
# steps have the host's bundle bind-mounted at its path (build.sh), which
# the package's postinst would replace.
FROM ${RUN_IMAGE} AS certs
# hadolint ignore=DL3008,DL3003
RUN apt-get update \
    && cd /tmp && apt-get download ca-certificates \
    && dpkg-deb -x ca-certificates_*.deb /tmp/ca \
    && cat /tmp/ca/usr/share/ca-certificates/mozilla/*.crt > /tmp/ca-certificates.crt \
    && test -s /tmp/ca-certificates.crt \
    && rm -rf /var/lib/apt/lists/*

# --- run: what every variant's run stage has ---
FROM ${RUN_IMAGE} AS run-base
COPY --from=certs /tmp/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
ARG VERSION=0.1.0
ARG SOURCE=https://git.example.internal/segpredict
LABEL org.opencontainers.image.title="segpredict" \
      org.opencontainers.image.description="Offline batch prediction for PyTorch models with variable-size inputs" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.source="${SOURCE}" \
      org.opencontainers.image.licenses="MIT OR Apache-2.0" \
      org.opencontainers.image.base.name="debian:bookworm-slim"
# uid 10001, no home, no shell login: the manifests run it as non-root with
# a read-only root file system; it writes to its output volume and /tmp.
RUN useradd --uid 10001 --user-group --no-create-home \
        --home-dir /nonexistent --shell /usr/sbin/nologin segpredict
ENV HOME=/tmp
ENTRYPOINT ["/usr/local/bin/segpredict"]
CMD ["--help"]

# --- cpu: the binary, libtorch's CPU libraries, the CUDA runtime and CUPTI ---
FROM run-base AS cpu
ARG SITE=/opt/venv/lib/python3.11/site-packages
COPY --from=build-cpu ${SITE}/torch/lib ${SITE}/torch/lib
# libtorch_cpu's rpath ($ORIGIN/../../nvidia/cu13/lib) finds them here.
COPY --from=build-cpu ${SITE}/nvidia/cu13/lib ${SITE}/nvidia/cu13/lib
COPY --from=build-cpu /usr/local/bin/segpredict /usr/local/bin/segpredict
USER 10001:10001

# --- cuda (default): the binary, libtorch and the CUDA libraries ---
FROM run-base AS cuda
ARG SITE=/opt/venv/lib/python3.11/site-packages
# libtorch, libc10 and their CUDA parts; the binary's rpath points here.
COPY --from=build-cuda ${SITE}/torch/lib ${SITE}/torch/lib
# The CUDA libraries libtorch_cuda loads through its rpath ($ORIGIN/../../nvidia/*/lib).
COPY --from=build-cuda ${SITE}/nvidia ${SITE}/nvidia
COPY --from=build-cuda /usr/local/bin/segpredict /usr/local/bin/segpredict
USER 10001:10001
