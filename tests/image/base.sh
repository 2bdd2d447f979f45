#!/usr/bin/env bash
# Makes the local base images `just image` uses where no registry is
# reachable, from Debian's packages (mmdebstrap), then `podman import`:
#
#   localhost/segpredict-base:bookworm-slim  bookworm minbase without docs,
#       man pages or locales: what debian:bookworm-slim is.
#   localhost/segpredict-base:rust-bookworm  the same plus gcc, g++, make,
#       ca-certificates and git, and this machine's Rust toolchain (rustc's
#       sysroot, bin/ and lib/) under /usr/local/rust: what rust:1.95-bookworm
#       is for the Dockerfile's build stages. No toolchain can be downloaded
#       here and bookworm's rustc is older than Cargo.lock needs.
#
# Kept once made (`podman image exists`); `base.sh force` remakes them.
set -euo pipefail
cd "$(dirname "$0")/../.."
. tests/image/common.sh

force="${1:-}"
if [ -z "$force" ] && podman image exists "$LOCAL_RUN_BASE" && podman image exists "$LOCAL_BUILD_BASE"; then
    log "local base images present: $LOCAL_RUN_BASE, $LOCAL_BUILD_BASE"
    exit 0
fi

sysroot="$(rustc --print sysroot)"
rust_version="$(rustc --version)"
log "Rust toolchain for the build base: $rust_version ($sysroot)"

work="$(mktemp -d /var/tmp/segpredict-base.XXXXXX)"
trap 'rm -rf "$work"' EXIT

# bookworm with its updates and security suites, as the public images have.
sources=(
    "deb http://deb.debian.org/debian bookworm main"
    "deb http://deb.debian.org/debian bookworm-updates main"
    "deb http://deb.debian.org/debian-security bookworm-security main"
)
# debian:bookworm-slim's dpkg filter: no docs (but copyrights), man pages, locales.
slim=(
    --dpkgopt='path-exclude=/usr/share/doc/*'
    --dpkgopt='path-include=/usr/share/doc/*/copyright'
    --dpkgopt='path-exclude=/usr/share/man/*'
    --dpkgopt='path-exclude=/usr/share/info/*'
    --dpkgopt='path-exclude=/usr/share/locale/*'
    --dpkgopt='path-include=/usr/share/locale/locale.alias'
    --aptopt='APT::Install-Recommends "false"'
    --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*.bin'
)
path=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

t0=$SECONDS
mmdebstrap --quiet --variant=minbase "${slim[@]}" bookworm "$work/run.tar" "${sources[@]}"
podman import --quiet \
    --change "ENV PATH=$path" --change 'CMD ["bash"]' \
    --message "bookworm minbase (mmdebstrap), as debian:bookworm-slim" \
    "$work/run.tar" "$LOCAL_RUN_BASE" >/dev/null
rm -f "$work/run.tar"
log "made $LOCAL_RUN_BASE in $((SECONDS - t0)) s"

t0=$SECONDS
mmdebstrap --quiet --variant=minbase "${slim[@]}" \
    --include=ca-certificates,gcc,g++,libc6-dev,make,pkg-config,git,xz-utils \
    --customize-hook="mkdir -p \"\$1/usr/local/rust\" && cp -a '$sysroot/bin' '$sysroot/lib' \"\$1/usr/local/rust/\"" \
    bookworm "$work/build.tar" "${sources[@]}"
podman import --quiet \
    --change "ENV PATH=/usr/local/cargo/bin:/usr/local/rust/bin:$path" \
    --change "ENV CARGO_HOME=/usr/local/cargo" \
    --change 'CMD ["bash"]' \
    --message "bookworm minbase (mmdebstrap) with gcc, g++ and $rust_version, as rust:1.95-bookworm" \
    "$work/build.tar" "$LOCAL_BUILD_BASE" >/dev/null
log "made $LOCAL_BUILD_BASE ($rust_version) in $((SECONDS - t0)) s"
podman image ls --format '{{.Repository}}:{{.Tag}} {{.Size}}' | grep segpredict-base >&2
