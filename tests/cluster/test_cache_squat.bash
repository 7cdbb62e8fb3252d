# SPDX-License-Identifier: Apache-2.0
# Copyright The Slipway authors
# Cache squatting (issue 30, item 4): another unprivileged user (nobody) makes the job user's
# default cache /var/tmp/slipway-<uid> on a node first, world-writable with a file planted in it.
# The plugin, as root, moves the squatter's entry aside (nothing in it is read or removed) and makes
# the user's own 0700 cache, so srun --container-image works and the admin's log says what it
# moved; `slipway run` on that node falls back to a private /var/tmp/slipway-<uid>.XXXXXX and
# says where in one line. The job user's real cache on node1 is set aside for the file, then put
# back, so no later test imports its images again.

setup_file() {
    require_sandbox
    require_plugin
    require_images busybox
    BUSYBOX=$(image_ref busybox)
    JOB_UID=$(id -u slwuser)
    VARTMP=$SANDBOX_DIR/nodes/node1/var-tmp   # node1's /var/tmp, seen from the host
    CACHE=$VARTMP/slipway-$JOB_UID
    KEPT=$VARTMP/.slipway-$JOB_UID.kept-by-test-cache-squat
    [[ -e $KEPT ]] || { [[ ! -e $CACHE ]] || mv "$CACHE" "$KEPT"; }
    local bin=${SLIPWAY_BUILD_DIR:-$REPO_DIR/build}/launcher/slipway
    [[ -x $bin ]] || fail "slipway is not built ($bin)"
    SLIPWAY_BIN=$(job_user_home)/.slipway-squat-test/slipway
    install -D -m 0755 -o slwuser "$bin" "$SLIPWAY_BIN"
    export SLIPWAY_INSECURE_REGISTRIES=$SANDBOX_NET.1:5000
}

teardown_file() {
    clear_squat
    [[ ! -e $KEPT ]] || mv "$KEPT" "$CACHE"
    rm -rf "$(dirname "$SLIPWAY_BIN")"
}

# Everything this file made in node1's /var/tmp for the job user (not the kept cache).
clear_squat() { rm -rf "$CACHE" "$CACHE".squatted-* "$CACHE".??????; }

# nobody makes node1's /var/tmp/slipway-<job uid>, mode 0777, with a file in it.
squat() {
    clear_squat
    run_host setpriv --reuid=nobody --regid=nogroup --clear-groups \
        sh -c "mkdir '$CACHE' && chmod 0777 '$CACHE' && echo planted >'$CACHE/planted'"
    assert_success
    assert_equal "$(id -u nobody) 777" "$(stat -c '%u %a' "$CACHE")" "the squatter's directory"
}

setup() { squat; }

test_plugin_moves_the_squatters_entry_aside() {
    local log=$SANDBOX_DIR/log/slurmd-node1.log mark
    mark=$(wc -l <"$log" 2>/dev/null || echo 0)
    run_job srun -N1 -w node1 -K --container-image="$BUSYBOX" cat /etc/slipway-image
    assert_success
    assert_output "busybox"
    # The user's own cache now, the squatter's entry aside with its file untouched.
    assert_equal "$JOB_UID 700" "$(stat -c '%u %a' "$CACHE")" "the job user's cache"
    local aside
    aside=$(compgen -G "$CACHE.squatted-*") || fail "nothing was moved aside: $(ls -la "$VARTMP")"
    assert_equal "$(id -u nobody) planted" "$(stat -c %u "$aside") $(cat "$aside/planted")" "the moved entry"
    [[ -d $CACHE/images ]] || fail "the image was not imported into $CACHE"
    # The admin sees what was moved (the node's log), the user's terminal nothing of it.
    assert_output_not_contains "squatted"
    local mine=/var/tmp/slipway-$JOB_UID  # as the node sees it
    tail -n +"$((mark + 1))" "$log" | grep -qF "slipway: $mine was made by uid $(id -u nobody) (mode 0777), not for uid $JOB_UID: moved aside to $mine.squatted-${aside##*.squatted-}" ||
        fail "node1's log does not say what was moved aside"
}

test_slipway_run_falls_back_and_says_where() {
    run_job srun -N1 -w node1 -K "$SLIPWAY_BIN" run --container-image="$BUSYBOX" -- cat /etc/slipway-image
    assert_success
    assert_equal "busybox" "${lines[-1]}" "the command's output"
    local fallback
    fallback=$(compgen -G "$CACHE.??????") || fail "no private cache was made: $(ls -la "$VARTMP")"
    assert_output_contains "slipway: warning: /var/tmp/slipway-$JOB_UID belongs to uid $(id -u nobody), not you: using /var/tmp/$(basename "$fallback") instead"
    assert_equal 1 "$(grep -c 'slipway: warning:' <<<"$output")" "warning lines"
    assert_equal "$JOB_UID 700" "$(stat -c '%u %a' "$fallback")" "the private cache"
    [[ -d $fallback/images ]] || fail "the image was not imported into $fallback"
    # The squatter's directory is left as it was: slipway, as the user, cannot move it.
    assert_equal "$(id -u nobody) 777 planted" "$(stat -c '%u %a' "$CACHE") $(cat "$CACHE/planted")" "the squatter's directory"
    # A second run reuses the same private cache and says so again.
    run_job srun -N1 -w node1 -K "$SLIPWAY_BIN" run --container-image="$BUSYBOX" -- true
    assert_success
    assert_output_contains "using /var/tmp/$(basename "$fallback") instead"
    assert_equal "$fallback" "$(compgen -G "$CACHE.??????")" "private caches"
}
