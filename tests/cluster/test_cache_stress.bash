# SPDX-License-Identifier: Apache-2.0
# Copyright The Slipway authors
# Cache upkeep never races an import (issue 16, item 1), under load: for a bounded time, the 8
# tasks of an srun -N4 loop over slipway import, run, rm and gc --keep 0 on three images in one
# cache directory that all four nodes share (the user's home), so every kind of operation meets
# every other, on one node and across nodes. No import and no run may fail (an rm or gc may refuse
# an image in use: that is their job); afterwards `slipway check` passes on every image left and
# nothing is left in tmp/.

setup_file() {
    require_sandbox
    require_images busybox busybox-env entrypoint
    IMAGES="$(image_ref busybox) $(image_ref busybox-env) $(image_ref entrypoint)"
    local bin=${SLIPWAY_BUILD_DIR:-$REPO_DIR/build}/launcher/slipway
    [[ -x $bin ]] || fail "slipway is not built ($bin)"
    DIR=$(job_user_home)/slipway-test${SLIPWAY_SANDBOX_INSTANCE:-0}-stress
    rm -rf "$DIR" && mkdir -p "$DIR"
    install -m 0755 "$bin" "$DIR/slipway"
    chown -R slwuser: "$DIR"
    export SLIPWAY_INSECURE_REGISTRIES=$SANDBOX_NET.1:5000
}

teardown_file() { rm -rf "$DIR"; }

# The loop each task runs for SECONDS: one operation at a time, chosen at random; a failed import
# or run prints "FAILED <op>: <its output>".
write_loop() {
    cat >"$DIR/loop.sh" <<'EOF'
#!/bin/bash
dir=$1 seconds=$2; shift 2
images=("$@")
export SLIPWAY_CACHE_DIR=$dir/cache
end=$((SECONDS + seconds)) n=0
while ((SECONDS < end)); do
    img=${images[RANDOM % ${#images[@]}]}
    case $((RANDOM % 6)) in
        0 | 1) op="import $img"; out=$("$dir/slipway" import "$img" 2>&1) || echo "FAILED $op: $out" ;;
        # Each run a container of its own (standalone): under the srun's step, the runs of a
        # node would be the step's tasks, which share one container and so one image.
        2 | 3) op="run $img"; out=$(env -u SLURM_STEP_ID "$dir/slipway" run --container-image="$img" -- cat /etc/slipway-image 2>&1) ||
                   echo "FAILED $op: $out" ;;
        4) "$dir/slipway" rm "$img" >/dev/null 2>&1 ;;
        5) "$dir/slipway" gc --keep 0 >/dev/null 2>&1 ;;
    esac
    n=$((n + 1))
done
echo "ops $n"
EOF
    chmod 0755 "$DIR/loop.sh"
    chown slwuser: "$DIR/loop.sh"
}

test_import_run_rm_and_gc_from_eight_tasks_on_four_nodes_keep_the_cache_whole() {
    write_loop
    # shellcheck disable=SC2086
    JOB_TIMEOUT=120 run_job srun -N4 --ntasks-per-node=2 -K "$DIR/loop.sh" "$DIR" 25 $IMAGES
    assert_success
    assert_equal 0 "$(grep -c '^FAILED' <<<"$output")" "failed imports and runs: $(grep '^FAILED' <<<"$output" | head -n3)"
    local ops
    ops=$(awk '/^ops / { s += $2 } END { print s + 0 }' <<<"$output")
    [[ $ops -ge 40 ]] || fail "only $ops operations in 25 s from 8 tasks"
    echo "# $ops operations from 8 tasks on 4 nodes" >&2
    run_job env SLIPWAY_CACHE_DIR="$DIR/cache" "$DIR/slipway" check
    assert_success
    assert_equal "" "$(ls -A "$DIR/cache/tmp")" "entries left in tmp/"
    # What is left is usable: each image imports (cached or again) and runs.
    local img
    for img in $IMAGES; do
        run_job env SLIPWAY_CACHE_DIR="$DIR/cache" "$DIR/slipway" run --container-image="$img" -- true
        assert_success
    done
}
