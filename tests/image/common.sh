# Shared by tests/image/*.sh: podman as it runs on these machines
# (../shared/CONTAINERS.md): runc rather than crun (which fails on the hybrid
# cgroups here), cgroupfs, and rlimits no higher than the host's.
# shellcheck shell=bash

podman() {
    command podman --runtime runc --cgroup-manager=cgroupfs "$@"
}
PODMAN_LIMITS=(--ulimit nofile=1024:1024 --ulimit nproc=1024:1024)

# The local base images (tests/image/base.sh), named after the public ones
# they stand in for.
LOCAL_RUN_BASE=localhost/segpredict-base:bookworm-slim
LOCAL_BUILD_BASE=localhost/segpredict-base:rust-bookworm

# The crate's version, from Cargo's own reading of the manifest (a
# workspace's root package or member alike).
crate_version() {
    cargo metadata --no-deps --offline --format-version 1 \
        | python3 -c 'import json, sys; print(next(p["version"] for p in json.load(sys.stdin)["packages"] if p["name"] == "segpredict"))'
}

log() { printf '[image %s] %s\n' "$(date -u +%T)" "$*" >&2; }

# The checks a script counts: `pass NAME`, `fail NAME`, and
# `check NAME COMMAND...`, which passes when COMMAND exits 0.
passed=0
failed=0
pass() { passed=$((passed + 1)); echo "ok   - $1"; }
fail() { failed=$((failed + 1)); echo "FAIL - $1" >&2; }
check() {
    local name="$1"
    shift
    if "$@"; then pass "$name"; else fail "$name"; fi
}
