#!/usr/bin/env bash
# The sharded Job as pods (`pods.sh IMAGE`, called by tests/image/test.sh
# with the image it built, or by `just test-pods`): the image run as three
# containers, JOB_COMPLETION_INDEX 0..2 and `--shards 3`, as the Indexed
# Job's pods are: each with its own hostname (a private UTS namespace) and
# PID namespace, non-root, a read-only root, no capabilities, a tmpfs /tmp,
# on the host's network to reach the store on the host's loopback. Twice:
# input and output on moto's S3 server, then on Azurite. In each:
#
#   - shard 1's container is killed (`podman kill -s KILL`) once it has
#     committed a part, and started again with its index (a retried pod);
#   - shard 2's container is paused (`podman pause`: the cgroup freezer, as
#     a stalled node) past its lease (3 s here), a new container for index 2
#     takes the lease over, and the paused one, unpaused, is fenced: it
#     exits 1 and lands no row that counts;
#   - the merged output equals one process's run of the same pipeline on
#     local disk: every id once, the same labels, `_SUCCESS`.
#
# About half a minute on two cores (29 s in a fresh clone's CI at e9c69ef:
# the reference run 2 s, each store's scenario 11-13 s, 1,200 rows), on top
# of the image's build (541 s there).
# Needs the image, the venv (moto, boto3, pyarrow) and Azurite
# (`just test-deps`). Removes its containers and servers afterwards.
set -uo pipefail
cd "$(dirname "$0")/../.."
repo="$PWD"
. tests/image/common.sh

tag="${1:?usage: tests/image/pods.sh IMAGE}"
# Extra `podman run` arguments for every pod (mounts for a stand-in image
# while debugging this script), split on spaces.
read -r -a extra <<<"${PODS_RUN_ARGS:-}"
python="${VIRTUAL_ENV:-$repo/.venv}/bin/python"
host_bin="$repo/target/release/segpredict"
azurite="$repo/tools/azure/node_modules/.bin/azurite-blob"

work="$(mktemp -d /var/tmp/segpredict-pods.XXXXXX)"
chmod 755 "$work"
names="segpredict-pods-$$"
server_pids=()
cleanup() {
    for c in $(podman ps -a --format '{{.Names}}' | grep "^$names-"); do
        podman rm --force "$c" >/dev/null 2>&1 || true
    done
    for pid in "${server_pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    rm -rf "$work"
}
trap cleanup EXIT
t_start=$SECONDS

# --- the stores, on the host's loopback ---
# start_server LOG PATTERN COMMAND...: runs COMMAND in the background; the
# port is the number after PATTERN in its output.
start_server() {
    local logfile="$1" pattern="$2"
    shift 2
    "$@" > "$logfile" 2>&1 &
    server_pids+=($!)
    for _ in $(seq 600); do
        port="$(grep -o "${pattern}[0-9]*" "$logfile" | head -n 1 | sed "s#${pattern}##")"
        if [ -n "$port" ]; then echo "$port"; return 0; fi
        sleep 0.1
    done
    cat "$logfile" >&2
    return 1
}
s3_port="$(start_server "$work/moto.log" 'Running on http://127.0.0.1:' \
    "$python" -m moto.server -H 127.0.0.1 -p 0)" || { fail "moto's S3 server starts"; }
mkdir -p "$work/azurite"
az_port="$(start_server "$work/azurite.log" 'listens on http://127.0.0.1:' \
    "$azurite" --blobHost 127.0.0.1 --blobPort 0 --location "$work/azurite" --skipApiVersionCheck)" \
    || { fail "Azurite starts ($azurite; just test-deps installs it)"; }

# --- the input, the pipeline and one process's run of it ---
mkdir -p "$work/job" "$work/job/in"
cp models/digits-small.pt models/digits-small.labels.txt "$work/job/"
# 1200 rows of the sample in row groups of 20: 20 row groups a shard.
"$python" - "$work/job/in/input.parquet" <<'EOF'
import sys
import pyarrow.parquet as pq
t = pq.read_table("sample_data/digits.parquet").slice(0, 1200)
pq.write_table(t, sys.argv[1], row_group_size=20)
EOF
# pipeline INPUT OUTPUT: the tests' slowed pipeline (tiny batches, a commit
# every 0.2 s, so a kill or a pause lands mid-run), 3 s leases.
pipeline() {
    cat <<EOF
[readers]
path = "$1"
threads = 0
batch_rows = 16
[readers.columns]
id = "id"
segments = { name = "segments", dtype = "u8", shape = [1, 8, 8] }
extras = [{ name = "tags", kind = "ragged" }]
[bucketing]
max_segments = 64
max_rows = 16
max_held_rows = 16384
pad_to_size_classes = true
[model]
path = "/job/digits-small.pt"
labels = "/job/digits-small.labels.txt"
device = "cpu"
dtype = "f32"
[writers]
dir = "$2"
threads = 2
rows_per_file = 60
overwrite = false
commit_every_s = 0.2
[storage]
lock_lease_s = 3
EOF
}
pipeline "$work/job/in/input.parquet" "$work/reference" | sed "s#/job/digits#$work/job/digits#" > "$work/reference.toml"
t0=$SECONDS
check "one process's run on local disk (the reference)" \
    bash -c "'$host_bin' run '$work/reference.toml' > '$work/reference.log' 2>&1"
one_s=$((SECONDS - t0))

# pod STORE_ENV_FILE NAME INDEX [ARGS...]: starts the image as the Job's pod
# of index INDEX, detached.
pod() {
    local envfile="$1" name="$2" index="$3"
    shift 3
    podman run -d --name "$names-$name" --network host --uts private --hostname "night-$name" \
        --pid private "${PODMAN_LIMITS[@]}" --read-only --cap-drop ALL \
        --security-opt no-new-privileges --tmpfs /tmp:rw,size=256m,mode=1777 \
        -v "$work/job:/job:ro" --env-file "$envfile" -e "JOB_COMPLETION_INDEX=$index" "${extra[@]}" \
        "$tag" run /job/pipeline.toml --shards 3 "$@" >/dev/null
}
# exit_code NAME: waits for the container and prints its exit code.
exit_code() { podman wait "$names-$1" 2>/dev/null | tail -n 1; }
# wait_for SECONDS COMMAND...: polls COMMAND until it succeeds or SECONDS
# pass.
wait_for() {
    local deadline=$((SECONDS + $1))
    shift
    while [ "$SECONDS" -lt "$deadline" ]; do
        if "$@" >/dev/null 2>&1; then return 0; fi
        sleep 0.2
    done
    return 1
}
quietly() { "$@" >/dev/null; }
# pause NAME: freezes the container, trying up to 5 times a second apart:
# runc gives up ("unable to freeze") when a task of a busy cgroup does not
# reach the frozen state in its short wait (seen once in CI on this host);
# what is tested is the fencing after a stall, not the freezer.
pause() {
    local try
    for try in 1 2 3 4 5; do
        podman pause "$1" >/dev/null 2>&1 && return 0
        [ "$(podman inspect --format '{{.State.Status}}' "$1")" = paused ] && return 0
        echo "  podman pause $1: try $try failed" >&2
        sleep 1
    done
    return 1
}
# show_pods STORE: every pod's state and last lines, for a failure.
show_pods() {
    for c in $(podman ps -a --format '{{.Names}}' | grep "^$names-$1-"); do
        echo "--- $c: $(podman inspect --format '{{.State.Status}} {{.State.ExitCode}}' "$c")" >&2
        podman logs "$c" 2>&1 | tail -n 15 >&2
    done
}

# Whether shards 1 and 2 have each committed a part (the caller's `hands`
# and `bucket`).
shards_1_and_2_committed() {
    "${hands[@]}" committed "$bucket" out part-s001of003- \
        && "${hands[@]}" committed "$bucket" out part-s002of003-
}

# shards STORE ENDPOINT SCHEME ENVFILE: the whole scenario on one store.
shards() {
    local store="$1" endpoint="$2" scheme="$3" envfile="$4"
    local hands=("$python" tests/image/pods_store.py "$store" "$endpoint")
    local bucket="pods-$store"
    local out="$work/out-$store"
    local t0=$SECONDS
    "${hands[@]}" make "$bucket" && "${hands[@]}" put "$bucket" in/input.parquet "$work/job/in/input.parquet" \
        || { fail "$store: the input is uploaded"; return; }
    pipeline "$scheme://$bucket/in/" "$scheme://$bucket/out/" > "$work/job/pipeline.toml"
    for i in 0 1 2; do pod "$envfile" "$store-$i" "$i"; done
    # Both shards commit a part; then shard 1 is killed and shard 2 paused.
    if wait_for 180 shards_1_and_2_committed; then
        pass "$store: shards 1 and 2 commit a part"
    else
        fail "$store: shards 1 and 2 commit a part"
        show_pods "$store"
        return
    fi
    podman kill -s KILL "$names-$store-1" >/dev/null
    check "$store: shard 2's container pauses (the cgroup freezer)" pause "$names-$store-2"
    check "$store: shard 1's container, killed (SIGKILL), ends 137" test "$(exit_code "$store-1")" = 137
    pod "$envfile" "$store-1-again" 1 --wait-for-lock=60s
    sleep 5 # past shard 2's 3 s lease
    pod "$envfile" "$store-2-again" 2 --wait-for-lock=60s
    check "$store: shard 2's new pod takes the expired lease and commits" \
        wait_for 120 "${hands[@]}" committed "$bucket" out part-s002of003-a002-
    podman unpause "$names-$store-2" >/dev/null
    local stale
    stale="$(exit_code "$store-2")"
    podman logs "$names-$store-2" > "$work/$store-2.log" 2>&1
    check "$store: the paused pod, unpaused, is fenced and exits 1 (exit $stale)" test "$stale" = 1
    check "$store: it says it lost the lease or was superseded" \
        grep -qE "lost the shard's lock|superseded by attempt" "$work/$store-2.log"
    check "$store: no false rejects or libtorch asserts in the fenced pod" \
        bash -c "! grep -q 'INTERNAL ASSERT' '$work/$store-2.log'"
    for name in 0 1-again 2-again; do
        local code
        code="$(exit_code "$store-$name")"
        if [ "$code" != 0 ]; then podman logs "$names-$store-$name" 2>&1 | tail -n 20 >&2; fi
        check "$store: pod $name exits 0 (exit $code)" test "$code" = 0
    done
    "${hands[@]}" fetch "$bucket" out/ "$out"
    check "$store: _SUCCESS" test -f "$out/_SUCCESS"
    check "$store: the pods' output equals one process's run, every id once" \
        "$python" - "$work/reference" "$out" "$work/job/in/input.parquet" <<'EOF'
import glob, os, sys
import pyarrow.parquet as pq
def rows(d):
    t = pq.read_table(sorted(glob.glob(os.path.join(d, "part-*.parquet"))))
    return {i: (l, s) for i, l, s in zip(t.column("id").to_pylist(), t.column("label_id").to_pylist(),
                                         t.column("score").to_pylist())}, t.num_rows
(ref, n_ref), (got, n_got) = rows(sys.argv[1]), rows(sys.argv[2])
ids = pq.read_table(sys.argv[3], columns=["id"]).column("id").to_pylist()
print(f"  input {len(ids)} ids; one process {n_ref} rows; pods {n_got} rows, {len(got)} distinct ids")
ok = n_got == len(got) == len(ids) == n_ref and set(got) == set(ids)
ok = ok and all(got[i][0] == ref[i][0] and abs(got[i][1] - ref[i][1]) <= 1e-4 for i in ids)
sys.exit(0 if ok else 1)
EOF
    echo "$store: the scenario took $((SECONDS - t0)) s (one process: ${one_s} s)"
}

printf '%s\n' AWS_ENDPOINT_URL="http://127.0.0.1:$s3_port" AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test \
    AWS_REGION=us-east-1 AWS_ALLOW_HTTP=true AWS_EC2_METADATA_DISABLED=true SEGPREDICT_LOG=info > "$work/s3.env"
printf '%s\n' AZURE_STORAGE_USE_EMULATOR=true AZURITE_BLOB_STORAGE_URL="http://127.0.0.1:$az_port" \
    AZURE_ALLOW_HTTP=true SEGPREDICT_LOG=info > "$work/azure.env"
check "each pod has its own hostname and PID namespace, non-root, read-only root" \
    test "$(podman run --rm --network host --uts private --hostname night-x --pid private "${PODMAN_LIMITS[@]}" \
        --read-only --entrypoint /bin/sh "$tag" -c 'echo "$(hostname) $$ $(id -u) $(touch /x 2>/dev/null && echo rw || echo ro)"')" \
        = "night-x 1 10001 ro"
[ -n "${s3_port:-}" ] && shards s3 "http://127.0.0.1:$s3_port" s3 "$work/s3.env"
[ -n "${az_port:-}" ] && shards azure "http://127.0.0.1:$az_port" az "$work/azure.env"

echo "pods test: $passed passed, $failed failed in $((SECONDS - t_start)) s"
[ "$failed" = 0 ]
