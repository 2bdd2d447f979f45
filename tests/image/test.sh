#!/usr/bin/env bash
# The image test (`just test-image`, run by .ci/run): builds the image from
# the Dockerfile (IMAGE_VARIANT=cpu by default, or cuda), then runs it as
# the manifests do (non-root, read-only root file system, all capabilities
# dropped, no new privileges, a tmpfs /tmp) with no network, and checks:
#
#   - what is in it: the binary, libtorch (and for cuda the CUDA libraries),
#     no Python or pip; every library the binary needs resolves (ldd);
#     the CPU variant has no CUDA library and its binary needs none;
#   - `segpredict --version` inside is the crate's and the binary's outside;
#   - `segpredict inspect` inside prints what it prints outside;
#   - `segpredict run` on the sample inside, into a mounted directory,
#     gives the binary's outside labels row for row;
#   - the manifests' image, the Dockerfile's OCI labels and the docs'
#     container chapter (docs/src/container.md) name the same image, version and source;
#   - (cpu) the sharded Job as three pods of the image, on moto's S3 server
#     and on Azurite, one killed, one paused past its lease:
#     tests/image/pods.sh.
#
# Needs target/release/segpredict (`just build`) and the venv's pyarrow.
# Skips (exit 0, saying so) only where podman cannot be installed. Removes
# the image it built and the build's intermediate layers afterwards
# (KEEP_IMAGE=1 keeps them); in CI also the local base images.
set -uo pipefail
cd "$(dirname "$0")/../.."
repo="$PWD"
. tests/image/common.sh

variant="${IMAGE_VARIANT:-cpu}"
host_bin="$repo/target/release/segpredict"
python="${VIRTUAL_ENV:-$repo/.venv}/bin/python"
finish() {
    echo "image test ($variant): $passed passed, $failed failed"
    echo "$passed passed, $failed failed"
    [ "$failed" = 0 ]
    exit $?
}

# --- the engine: installed here if it can be, skipped only if it cannot ---
if ! command -v podman >/dev/null || ! command -v runc >/dev/null || ! command -v mmdebstrap >/dev/null; then
    sudo=""
    if [ "$(id -u)" != 0 ]; then sudo="sudo"; fi
    { $sudo apt-get update -qq \
        && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
            podman runc mmdebstrap uidmap; } >&2 || true
fi
if ! command -v podman >/dev/null || ! command -v runc >/dev/null; then
    echo "SKIPPED: the image test needs podman and runc, and neither could be installed here (apt-get install podman runc failed); the image was not built or tested"
    echo "0 passed, 0 failed, 1 skipped"
    exit 0
fi
if ! podman info >/dev/null 2>&1; then
    # Installed but not running is a failure, not a skip: it is what the
    # operator would meet.
    podman info >&2
    fail "podman runs here (podman info)"
    finish
fi
if [ ! -x "$host_bin" ]; then
    fail "the binary to compare with is built ($host_bin; \`just build\`)"
    finish
fi

version="$(crate_version)"
tag="segpredict:$version"
if [ "$variant" = cpu ]; then tag="$tag-cpu"; fi
work="$(mktemp -d /var/tmp/segpredict-image-test.XXXXXX)"
cleanup() {
    if [ -n "${KEEP_IMAGE:-}" ]; then
        echo "kept $tag and its build layers (KEEP_IMAGE)"
    else
        podman image unmount "$tag" >/dev/null 2>&1 || true
        podman rmi --force "$tag" >/dev/null 2>&1 || true
        # The build's intermediate layers (the torch wheel, the compiled
        # stages): gigabytes that nothing else uses.
        podman image prune --force >/dev/null 2>&1 || true
        podman image prune --force >/dev/null 2>&1 || true
        if [ "${CI:-}" = true ]; then
            podman rmi --force "$LOCAL_RUN_BASE" "$LOCAL_BUILD_BASE" >/dev/null 2>&1 || true
        fi
    fi
    rm -rf "$work"
}
trap cleanup EXIT

# --- build ---
t0=$SECONDS
if ! bash tests/image/build.sh "$variant" "$tag" > "$work/build.log" 2>&1; then
    tail -n 60 "$work/build.log" >&2
    fail "the image builds (tests/image/build.sh $variant)"
    finish
fi
build_s=$((SECONDS - t0))
grep '^\[image' "$work/build.log" >&2 || true
pass "the image builds from the Dockerfile ($tag, ${build_s} s)"

# The image as the manifests run it: non-root (the image's own USER), a
# read-only root file system, no capabilities, no privilege gain, a tmpfs
# /tmp (the manifests' emptyDir), and no network.
run() {
    podman run --rm --network none "${PODMAN_LIMITS[@]}" \
        --read-only --cap-drop ALL --security-opt no-new-privileges \
        --tmpfs /tmp:rw,size=256m,mode=1777 "$@"
}

# --- what is in it ---
user="$(podman image inspect --format '{{.Config.User}}' "$tag")"
check "the image runs as uid 10001, not root (USER $user)" test "$user" = 10001:10001
check "the container's user is uid 10001" test "$(run --entrypoint /usr/bin/id "$tag" -u)" = 10001

mnt="$(podman image mount "$tag")"
site="$mnt/opt/venv/lib/python3.11/site-packages"
{
    echo "image $tag: $(podman image inspect --format '{{.Size}}' "$tag") bytes; what takes the space (MiB):"
    cd "$mnt"
    for path in . usr/local/bin/segpredict opt/venv/lib/python3.11/site-packages/torch/lib \
        opt/venv/lib/python3.11/site-packages/torch/lib/* opt/venv/lib/python3.11/site-packages/nvidia \
        opt/venv/lib/python3.11/site-packages/nvidia/*/lib/*; do
        if [ -e "$path" ]; then printf '  %8s  /%s\n' "$(du -s --block-size=1M --apparent-size "$path" | cut -f1)" "${path#./}"; fi
    done | sort -k2 | awk '$1 >= 1 || $2 == "/."'
    cd "$repo"
} > "$work/sizes.txt"
cat "$work/sizes.txt"
python_files="$(find "$mnt" -xdev \( -name 'python3*' -o -name 'pip' -o -name 'pip3' \) \( -type f -o -type l \) | sed "s|^$mnt||")"
check "no Python interpreter or pip in the image" test -z "$python_files"
[ -z "$python_files" ] || echo "$python_files" >&2
readelf -d "$mnt/usr/local/bin/segpredict" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' > "$work/needed.txt"
echo "the binary needs: $(tr '\n' ' ' < "$work/needed.txt")"
check "the binary needs libtorch (linked for AOTInductor packages)" grep -qx libtorch.so "$work/needed.txt"
if [ "$variant" = cpu ]; then
    check "the CPU binary needs no CUDA library" bash -c "! grep -i cuda '$work/needed.txt'"
    # libtorch_cpu is linked against the CUDA runtime and CUPTI (which load
    # without a GPU): those two, and no other CUDA library.
    cuda_files="$(find "$mnt" -xdev \( -iname '*cuda*' -o -iname '*cudnn*' -o -iname '*cublas*' -o -iname '*nccl*' \
        -o -iname '*cufft*' -o -iname '*cusparse*' -o -iname '*nvrtc*' -o -iname '*nvshmem*' -o -iname '*cupti*' \) \
        ! -path '*/nvidia/cu13/lib/libcudart.so.13' ! -path '*/nvidia/cu13/lib/libcupti.so.13' | sed "s|^$mnt||")"
    check "no CUDA library in the CPU image but the runtime and CUPTI that libtorch_cpu needs" test -z "$cuda_files"
    [ -z "$cuda_files" ] || echo "$cuda_files" >&2
    check "libtorch.so needs libtorch_cpu only" bash -c "! readelf -d '$site/torch/lib/libtorch.so' | grep -q libtorch_cuda"
else
    check "the CUDA binary needs libtorch_cuda (linked so CUDA is found)" grep -qx libtorch_cuda.so "$work/needed.txt"
    check "the CUDA libraries are in the image" test -d "$site/nvidia/cudnn/lib"
fi
podman image unmount "$tag" >/dev/null

if run --entrypoint /usr/bin/ldd "$tag" /usr/local/bin/segpredict > "$work/ldd.txt" 2>&1; then
    # The CUDA driver (libcuda.so.1) is the node's, mounted by the NVIDIA
    # container runtime: the only library the image may lack.
    check "every library the binary needs resolves in the image (ldd)" \
        bash -c "! grep 'not found' '$work/ldd.txt' | grep -v '^[[:space:]]*libcuda\.so\.1 '"
else
    cat "$work/ldd.txt" >&2
    fail "ldd runs on the binary in the image"
fi
grep 'not found' "$work/ldd.txt" >&2 || true

# --- the same binary inside as outside ---
inside="$(run "$tag" --version 2>&1)"
outside="$("$host_bin" --version 2>&1)"
echo "--version inside: $inside; outside: $outside"
check "segpredict --version inside is the crate's ($version)" grep -qw "$version" <<<"$inside"
check "segpredict --version inside equals the binary's outside" test "$inside" = "$outside"
check "the CronJob's shell and date are in the image" \
    test "$(run --entrypoint /bin/sh "$tag" -c 'date -u -d "@$((29447490 * 60))" +%F')" = "$(date -u -d @1766849400 +%F)"

# --- the sample, inside and outside ---
# The repository's pipeline, models and data, mounted read-only at the same
# layout (the pipeline's paths are relative to it), and an output directory
# owned by the image's user: the only place it may write besides /tmp.
mounts=(
    -v "$repo/pipelines:/job/pipelines:ro"
    -v "$repo/models:/job/models:ro"
    -v "$repo/sample_data:/job/sample_data:ro"
)
mkdir -p "$work/inside" "$work/outside"
chown 10001:10001 "$work/inside"

"$host_bin" inspect sample_data/digits.parquet --pipeline pipelines/sample.toml > "$work/inspect-outside.txt" 2>&1
# Input paths are canonical (absolute, links resolved): the checkout here
# is /job inside.
sed -i "s#$(pwd -P)/#/job/#g" "$work/inspect-outside.txt"
if run "${mounts[@]}" -w /job "$tag" inspect sample_data/digits.parquet --pipeline pipelines/sample.toml \
    > "$work/inspect-inside.txt" 2>&1; then
    pass "segpredict inspect runs inside"
else
    cat "$work/inspect-inside.txt" >&2
    fail "segpredict inspect runs inside"
fi
check "segpredict inspect prints inside what it prints outside" \
    diff -u "$work/inspect-outside.txt" "$work/inspect-inside.txt"

t0=$SECONDS
"$host_bin" run pipelines/sample.toml --output "$work/outside" > "$work/run-outside.txt" 2>&1
check "the sample runs outside" test $? = 0
host_s=$((SECONDS - t0))
t0=$SECONDS
if run "${mounts[@]}" -v "$work/inside:/out" "$tag" run /job/pipelines/sample.toml --output /out \
    > "$work/run-inside.txt" 2>&1; then
    pass "segpredict run on the sample inside (no network, non-root, read-only root) ($((SECONDS - t0)) s; outside ${host_s} s)"
else
    cat "$work/run-inside.txt" >&2
    fail "segpredict run on the sample inside (no network, non-root, read-only root)"
fi
check "the output inside is written by uid 10001" \
    test -n "$(find "$work/inside" -name 'part-*.parquet' -uid 10001)" -a -z "$(find "$work/inside" ! -uid 10001 | head -n 1)"
check "the sample's labels inside equal the binary's outside, row for row" \
    "$python" - "$work/outside" "$work/inside" <<'EOF'
import glob, os, sys
import pyarrow.parquet as pq

def rows(d):
    parts = sorted(glob.glob(os.path.join(d, "part-*.parquet")))
    t = pq.read_table(parts).sort_by([("source_row", "ascending")])
    return t, parts

(a, pa_), (b, pb_) = rows(sys.argv[1]), rows(sys.argv[2])
print(f"outside {a.num_rows} rows in {len(pa_)} files; inside {b.num_rows} rows in {len(pb_)} files")
ok = a.num_rows == b.num_rows and a.num_rows > 0
for col in ("id", "label", "label_id", "source_row"):
    same = a.column(col).to_pylist() == b.column(col).to_pylist()
    print(f"  {col}: {'same' if same else 'DIFFERENT'}")
    ok = ok and same
names = {os.path.basename(p) for p in a.column("source_file").to_pylist()} == \
        {os.path.basename(p) for p in b.column("source_file").to_pylist()}
print(f"  source_file (name): {'same' if names else 'DIFFERENT'}")
sa, sb = a.column("score").to_pylist(), b.column("score").to_pylist()
diff = max((abs(x - y) for x, y in zip(sa, sb)), default=float("inf"))
print(f"  score: largest difference {diff:.3g}")
sys.exit(0 if ok and names and diff <= 1e-4 else 1)
EOF
check "the run inside committed the run (_SUCCESS)" test -e "$work/inside/_SUCCESS"

# --- the image, the manifests, the Dockerfile and the README agree ---
ref="registry.example.internal/segpredict:$version"
label() { podman image inspect --format "{{index .Labels \"org.opencontainers.image.$1\"}}" "$tag"; }
source_label="$(label source)"
for manifest in pipelines/deploy/job.yaml pipelines/deploy/cronjob.yaml; do
    refs="$(sed -n 's/^ *image: *//p' "$manifest" | sort -u)"
    check "$manifest names the image $ref" test "$refs" = "$ref"
    check "$manifest runs it non-root with a read-only root and no capabilities" \
        "$python" - "$manifest" <<'EOF'
import sys, yaml
doc = yaml.safe_load(open(sys.argv[1]))
spec = doc["spec"]
if doc["kind"] == "CronJob":
    spec = spec["jobTemplate"]["spec"]
pod = spec["template"]["spec"]
c = pod["containers"][0]
sc = c["securityContext"]
ok = (
    pod["securityContext"]["runAsNonRoot"] is True
    and pod["securityContext"]["runAsUser"] == 10001
    and sc["readOnlyRootFilesystem"] is True
    and sc["allowPrivilegeEscalation"] is False
    and sc["capabilities"]["drop"] == ["ALL"]
    and {"mountPath": "/tmp", "name": "tmp"} in c["volumeMounts"]
    and any(v["name"] == "tmp" and "emptyDir" in v for v in pod["volumes"])
)
sys.exit(0 if ok else 1)
EOF
done
check "the image's version label is the crate's ($(label version))" test "$(label version)" = "$version"
check "the Dockerfile's default version label is the crate's" \
    grep -qx "ARG VERSION=$version" Dockerfile
check "the image's source label is the Dockerfile's ($source_label)" \
    grep -qx "ARG SOURCE=$source_label" Dockerfile
readme="$(cat docs/src/container.md)"
check "docs/src/container.md names $ref" grep -qF "$ref" <<<"$readme"
check "docs/src/container.md names the source $source_label" grep -qF "$source_label" <<<"$readme"

# --- the sharded Job as pods (tests/image/pods.sh): killed, paused, fenced ---
if [ "$variant" = cpu ]; then
    t0=$SECONDS
    bash tests/image/pods.sh "$tag" 2>&1 | tee "$work/pods.txt"
    pods_ok=${PIPESTATUS[0]}
    check "the sharded Job as three pods, on S3 and Azure, equals one process ($((SECONDS - t0)) s)" \
        test "$pods_ok" = 0
fi

finish
