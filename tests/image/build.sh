#!/usr/bin/env bash
# Builds the image from the Dockerfile: `build.sh [cuda|cpu] [TAG]`, tag
# segpredict:VERSION (cuda) or segpredict:VERSION-cpu by default.
# SEGPREDICT_IMAGE_BASE selects the base images: `public` (the Dockerfile's
# defaults, from the registry), `local` (tests/image/base.sh's, from
# Debian's packages), or `auto` (the default: public where the registry
# answers a pull, local otherwise).
set -euo pipefail
cd "$(dirname "$0")/../.."
. tests/image/common.sh

variant="${1:-cuda}"
case "$variant" in cuda|cpu) ;; *) echo "variant: cuda or cpu, not '$variant'" >&2; exit 2 ;; esac
version="$(crate_version)"
tag="${2:-}"
if [ -z "$tag" ]; then
    tag="segpredict:$version"
    if [ "$variant" = cpu ]; then tag="$tag-cpu"; fi
fi

base="${SEGPREDICT_IMAGE_BASE:-auto}"
if [ "$base" = auto ]; then
    base=local
    build_image="$(sed -n 's/^ARG BUILD_IMAGE=//p' Dockerfile)"
    run_image="$(sed -n 's/^ARG RUN_IMAGE=//p' Dockerfile)"
    if podman pull --quiet "$run_image" >/dev/null 2>&1 && podman pull --quiet "$build_image" >/dev/null 2>&1; then
        base=public
    else
        log "no registry answers for $run_image: building on local base images"
    fi
fi
args=()
case "$base" in
    public) ;;
    local)
        bash tests/image/base.sh
        args+=(--build-arg "BUILD_IMAGE=$LOCAL_BUILD_BASE" --build-arg "RUN_IMAGE=$LOCAL_RUN_BASE")
        ;;
    *) echo "SEGPREDICT_IMAGE_BASE: public, local or auto, not '$base'" >&2; exit 2 ;;
esac

# The host's CA bundle over the build's, for the RUN steps only (a bind
# mount: not in any layer): where the network reaches PyPI and crates.io
# through a TLS-inspecting proxy, its CA is trusted here and only here.
# (The mount point leaves an empty /etc/ssl/certs in images without one.)
# SEGPREDICT_IMAGE_CA=none leaves it out.
ca="${SEGPREDICT_IMAGE_CA:-${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}}"
if [ "$ca" != none ] && [ -f "$ca" ]; then
    args+=(--volume "$(readlink -f "$ca"):/etc/ssl/certs/ca-certificates.crt:ro")
fi

log "building $tag (target $variant, $base base images, version $version)"
t0=$SECONDS
# --network host: the build stages' RUN steps reach Debian's packages, PyPI
# and crates.io; the image itself runs without a network.
podman build --network host "${PODMAN_LIMITS[@]}" \
    --target "$variant" --build-arg "VERSION=$version" "${args[@]}" \
    --tag "$tag" .
log "built $tag in $((SECONDS - t0)) s: $(podman image inspect --format '{{.Size}}' "$tag") bytes"
