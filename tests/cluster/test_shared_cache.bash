# SPDX-License-Identifier: Apache-2.0
# Copyright The Slipway authors
# One cache directory that every node sees (issue 15: the plugin's cache_dir= on a site's NFS or
# Lustre scratch, SLIPWAY_CACHE_DIR for `slipway run`): here a directory of the host outside the
# nodes' own /tmp and /var/tmp, so the sandbox's nodes share it as real nodes share a network
# filesystem (their flock(2) is coherent, as NFS's and Lustre's -o flock are). Concurrent cold
# imports of one digest from every node download each blob once (counted in the registry's access
# log) and publish once; a start from a published image takes no lock, so it never waits for an
# import, a stuck importer or a blob sweep; kill -9 of the importer on one node leaves the others
# to finish, a cache `slipway check` passes and an empty tmp/; gc on one node leaves another
# node's removal in progress alone (judged by its lock, not its pid); and a shared cache that another
# user could write to is refused in one line that names the directory, the cause and the fix.
# SLIPWAY_SHARED_CACHE_NODES=16 runs the same on 16 nodes (`up --nodes 16`, restored after).

setup_file() {
    require_sandbox
    require_plugin
    require_images busybox debian-python
    NODES=${SLIPWAY_SHARED_CACHE_NODES:-4}
    PYTHON=$(image_ref debian-python)
    BUSYBOX=$(image_ref busybox)
    JOB_UID=$(id -u slwuser)
    ACCESS_LOG=$SANDBOX_DIR/log/registry-access.log
    SHARED=$SANDBOX_DIR/shared-cache   # the site's cache_dir: root's, 1777, like /tmp
    CACHE=$SHARED/$JOB_UID             # the job user's cache in it
    rm -rf "$SHARED" && install -d -m 1777 "$SHARED"
    local build=${SLIPWAY_BUILD_DIR:-$REPO_DIR/build}
    SLIPWAY_BIN=$(job_user_home)/.slipway-shared-test/slipway
    install -D -m 0755 -o slwuser "$build/launcher/slipway" "$SLIPWAY_BIN"
    shared_up
}

teardown_file() {
    rm -rf "$SHARED" "$(dirname "$SLIPWAY_BIN")"
    "$SANDBOX" up >/dev/null 2>&1
}

# The sandbox with the plugin's cache_dir= on the shared directory (and NODES nodes).
shared_up() {
    SLIPWAY_PLUGIN_ARGS="cache_dir=$SHARED" "$SANDBOX" up --nodes "$NODES" >/dev/null 2>&1 ||
        fail "slipway-sandbox up --nodes $NODES with cache_dir=$SHARED failed"
}

clear_cache() { rm -rf "$CACHE"; }
log_mark() { wc -l <"$ACCESS_LOG"; }
# "COUNT PATH" of each blob of REPO fetched after MARK.
blob_fetches() { tail -n +"$(($1 + 1))" "$ACCESS_LOG" | sed -n "s|.*\"GET \(/v2/slipway/$2/blobs/[^ ]*\) .*|\1|p" | sort | uniq -c; }
# Each of REPO's 3 blobs (config, two layers) fetched exactly once since MARK, whatever the nodes.
assert_each_blob_once() {
    local fetches
    fetches=$(blob_fetches "$1" "$2")
    assert_equal 3 "$(grep -c . <<<"$fetches")" "blobs fetched (config and layers): $fetches"
    assert_equal "" "$(awk '$1 != 1' <<<"$fetches")" "blobs fetched more than once"
}
# `slipway CMD...` on the host as the job user, on the shared cache.
slipway_on_cache() { run_job env SLIPWAY_CACHE_DIR="$CACHE" "$SLIPWAY_BIN" "$@"; }
# One image published, a cache `slipway check` passes, and nothing left in tmp/.
assert_cache_sound() {
    assert_equal 1 "$(find "$CACHE/images" -mindepth 1 -maxdepth 1 | wc -l)" "published images"
    assert_equal "" "$(ls "$CACHE/tmp")" "leftovers in tmp/"
    slipway_on_cache check
    assert_success
}
# Hex digest of the one image in the cache.
only_hex() { basename "$(find "$CACHE/images" -mindepth 1 -maxdepth 1)"; }
# Holds flock MODE (-x, -s) on the cache's existing lock file FILE in the background; prints its pid.
hold_lock() {
    [[ -e $CACHE/locks/$2 ]] || fail "no lock file $2"
    # One process holds it (`flock FILE CMD` would leave CMD holding it once flock is killed).
    (exec 9<>"$CACHE/locks/$2" && flock "$1" 9 && exec sleep 120) </dev/null >/dev/null 2>&1 &
    echo $!
}
# A measured figure, for the log of the run (and the test's output if it fails).
note() { echo "# $*" | tee -a "$SANDBOX_DIR/log/test_shared_cache.figures" >&2; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }'; }

test_every_node_imports_one_digest_at_once_each_blob_downloaded_once() {
    clear_cache
    local mark t0
    mark=$(log_mark) t0=$(now)
    run_job srun -N"$NODES" --ntasks-per-node=1 -K --container-image="$PYTHON" cat /etc/slipway-image
    assert_success
    note "cold srun -N$NODES of debian-python on the shared cache: $(elapsed "$t0") s"
    assert_equal "$NODES" "$(grep -cx debian-python <<<"$output")" "tasks in the image"
    assert_each_blob_once "$mark" debian-python
    assert_cache_sound
    # Two jobs at once on every node, the image published: no blob fetched at all.
    mark=$(log_mark)
    "$SANDBOX" exec -- timeout "$JOB_TIMEOUT" srun -N"$NODES" -K --container-image="$PYTHON" true &
    run_job srun -N"$NODES" -K --container-image="$PYTHON" cat /etc/slipway-image
    wait $! || fail "the concurrent job failed"
    assert_success
    assert_equal "" "$(blob_fetches "$mark" debian-python)" "blobs fetched for a published image"
}

test_two_concurrent_cold_jobs_on_every_node_download_each_blob_once() {
    clear_cache
    local mark
    mark=$(log_mark)
    "$SANDBOX" exec -- timeout "$JOB_TIMEOUT" srun -N"$NODES" --ntasks-per-node=1 -K \
        --container-image="$PYTHON" true &
    local other=$!
    run_job srun -N"$NODES" --ntasks-per-node=1 -K --container-image="$PYTHON" cat /etc/slipway-image
    wait "$other" || fail "the other cold job failed"
    assert_success
    assert_equal "$NODES" "$(grep -cx debian-python <<<"$output")" "tasks in the image"
    assert_each_blob_once "$mark" debian-python
    assert_cache_sound
}

test_slipway_run_under_srun_on_every_node_downloads_each_blob_once() {
    clear_cache
    local mark
    mark=$(log_mark)
    run_job env SLIPWAY_CACHE_DIR="$CACHE" SLIPWAY_INSECURE_REGISTRIES="$SANDBOX_NET.1:5000" \
        srun -N"$NODES" --ntasks-per-node=2 -K "$SLIPWAY_BIN" run --container-image="$PYTHON" -- \
        cat /etc/slipway-image
    assert_success
    assert_equal "$((2 * NODES))" "$(grep -cx debian-python <<<"$output")" "tasks in the image"
    assert_each_blob_once "$mark" debian-python
    assert_cache_sound
}

# A start from published image Y while digest X is imported on another node, and while Y's image
# lock and the blob-sweep lock are held (a stuck importer, a gc): it takes none of them. Then a
# start from X, once published, while X's lock is held.
test_a_start_from_a_published_image_waits_for_no_import_and_no_lock() {
    clear_cache
    run_job srun -N"$NODES" -K --container-image="$BUSYBOX" true
    assert_success
    local y t0 base busy importer holders=()
    y=$(only_hex)
    t0=$(now)
    run_job srun -N"$NODES" -K --container-image="$BUSYBOX" true
    assert_success
    base=$(elapsed "$t0")
    # X (debian-python) imported on node1 meanwhile.
    "$SANDBOX" exec -- timeout "$JOB_TIMEOUT" srun -N1 -w node1 -K --container-image="$PYTHON" true &
    importer=$!
    local deadline=$((SECONDS + 30))
    until compgen -G "$CACHE/tmp/[0-9a-f]*.*/rootfs" >/dev/null || ((SECONDS > deadline)); do sleep 0.02; done
    compgen -G "$CACHE/tmp/[0-9a-f]*.*/rootfs" >/dev/null || fail "the import of debian-python never started"
    holders+=("$(hold_lock -x "$y.lock")" "$(hold_lock -x blobs.lock)")
    t0=$(now)
    run_job timeout 20 srun -N"$NODES" -K --container-image="$BUSYBOX" cat /etc/slipway-image
    busy=$(elapsed "$t0")
    local in_flight=0
    compgen -G "$CACHE/tmp/[0-9a-f]*.*/rootfs" >/dev/null && in_flight=1
    kill "${holders[@]}"
    assert_success
    note "start of busybox on $NODES nodes: ${base} s alone, ${busy} s during an import of debian-python with its locks held"
    assert_equal 1 "$in_flight" "the import of debian-python still running when busybox had started"
    wait "$importer" || fail "the import of debian-python failed"
    # X published: a start from it while its lock is held (a waiter stuck on a dead node).
    local x=""
    for x in $(ls "$CACHE/images"); do [[ $x != "$y" ]] && break; done
    holders=("$(hold_lock -x "$x.lock")")
    run_job timeout 20 srun -N"$NODES" -K --container-image="$PYTHON" cat /etc/slipway-image
    kill "${holders[@]}"
    assert_success
    assert_equal "$NODES" "$(grep -cx debian-python <<<"$output")" "tasks in the image"
}

# kill -9 of the importer on one node mid-import (it holds the image's lock, the other nodes wait
# on it): the others take over and finish, the cache checks and tmp/ is empty.
test_kill_9_of_the_importer_on_one_node_leaves_the_others_to_finish() {
    clear_cache
    local out=$SANDBOX_DIR/shared-kill.out entry pid
    "$SANDBOX" exec -- timeout "$JOB_TIMEOUT" srun -N"$NODES" --ntasks-per-node=1 \
        --container-image="$PYTHON" cat /etc/slipway-image >"$out" 2>&1 &
    local job=$!
    local deadline=$((SECONDS + 40))
    until compgen -G "$CACHE/tmp/[0-9a-f]*.*/rootfs/usr/lib/python3*" >/dev/null || ((SECONDS > deadline)); do
        sleep 0.01
    done
    entry=$(compgen -G "$CACHE/tmp/[0-9a-f]*.*/rootfs" | head -n 1) || fail "the import never reached the unpack"
    pid=$(basename "$(dirname "$entry")" | cut -d. -f2)   # <hex>.<pid>.<random> (one pid space here)
    kill -9 "$pid"
    wait "$job" || true
    _run cat "$out"
    rm -f "$out"
    assert_equal "$((NODES - 1))" "$(grep -cx debian-python <<<"$output")" "tasks that ran after the kill"
    assert_output_contains "failed to import docker image"
    assert_cache_sound
}

# gc on one node while another node removes an image: the remover's tmp/rm-<hex>.<pid>.* names a
# pid this node may not see (here: one that does not exist), and the remover holds the image's
# lock; gc leaves it. Once the lock is free it is a leftover, and gc removes it.
test_gc_on_one_node_spares_another_nodes_removal_in_progress() {
    clear_cache
    run_job srun -N1 -w node1 -K --container-image="$BUSYBOX" true
    assert_success
    local hex entry holder
    hex=$(only_hex)
    entry=$CACHE/tmp/rm-$hex.999999999.0123456789abcdef
    install -d -m 0700 -o slwuser "$entry" "$entry/rootfs"
    holder=$(hold_lock -x "$hex.lock")
    run_job env SLIPWAY_CACHE_DIR="$CACHE" srun -N1 -w node2 -K "$SLIPWAY_BIN" gc --keep 1T
    kill "$holder"
    assert_success
    assert_file_exists "$entry"
    slipway_on_cache gc --keep 1T
    assert_success
    assert_no_file "$entry"
}

# The site's cache_dir (or the user's cache in it) writable by another user: refused in one line
# naming the directory, the cause and the fix; no image written, nothing left running or mounted.
test_a_shared_cache_another_user_could_write_is_refused_in_one_line() {
    clear_cache
    chmod 0777 "$SHARED"   # no sticky bit: anyone may rename the user's cache away
    trap 'chmod 1777 "$SHARED"' EXIT
    run_job srun -N2 -K --container-image="$BUSYBOX" true
    assert_failure
    local why="cache directory $CACHE is inside $SHARED, which others may write without the sticky bit (mode 0777: they could replace the cache); chmod +t $SHARED (as /tmp is) or choose another cache directory"
    # One line per node, and no other line of ours.
    assert_equal 2 "$(grep -cF "slipway: failed to import docker image: $BUSYBOX: $why" <<<"$output")" "refusals"
    assert_equal 2 "$(grep -c 'slipway: ' <<<"$output")" "lines of slipway's"
    assert_no_file "$CACHE/images"
    assert_equal "" "$(sandbox_pids slipway; pgrep -u slwuser -x sleep || true)" "processes left"
    assert_equal "" "$(grep " $SHARED" /proc/self/mountinfo || true)" "mounts left"
    # slipway images says the same of a cache that exists there (srun created none).
    install -d -m 0700 -o slwuser "$CACHE"
    slipway_on_cache images
    assert_failure
    assert_output_contains "$why"
    chmod 1777 "$SHARED"
    # The user's own cache group-writable, or someone else's.
    rm -rf "$CACHE" && install -d -m 0770 -o slwuser "$CACHE"
    run_job srun -N1 -K --container-image="$BUSYBOX" true
    assert_failure
    assert_output_contains "cache directory $CACHE is writable by others (mode 0770); chmod 700 $CACHE"
    assert_no_file "$CACHE/images"
    rm -rf "$CACHE" && install -d -m 0700 -o root "$CACHE"
    run_job env SLIPWAY_CACHE_DIR="$CACHE" SLIPWAY_INSECURE_REGISTRIES="$SANDBOX_NET.1:5000" \
        "$SLIPWAY_BIN" run --container-image="$BUSYBOX" -- true
    assert_failure
    assert_output_contains "cache directory $CACHE belongs to uid 0, not to you (uid $JOB_UID); choose another cache directory"
    rm -rf "$CACHE"
}

# A shared cache_dir= does not make containers shared: a named container on each node has its
# own writable layer (node-local, under the default cache), never another node's.
test_named_containers_stay_per_node_on_a_shared_cache() {
    run_job salloc -N2 --time=2 sh -c "srun -N2 -K --container-image=$BUSYBOX --container-name=pernode \
        --container-writable sh -c 'touch /marker.\$(hostname)' && \
        srun -N2 -K --container-name=pernode sh -c 'echo \$(hostname): \$(ls / | grep -c ^marker)'"
    assert_success
    assert_equal 2 "$(grep -c '^node[0-9]*: 1$' <<<"$output")" "nodes whose container holds its own marker alone"
    [[ ! -d $CACHE/containers ]] || fail "containers under the shared cache: $(ls "$CACHE/containers")"
}

# The same for `slipway run` with SLIPWAY_CACHE_DIR on the shared directory.
test_slipway_run_named_containers_stay_per_node_on_a_shared_cache() {
    local run="env SLIPWAY_CACHE_DIR=$CACHE SLIPWAY_INSECURE_REGISTRIES=$SANDBOX_NET.1:5000 $SLIPWAY_BIN run"
    run_job salloc -N2 --time=2 sh -c "srun -N2 -K $run --container-image=$BUSYBOX --container-name=pernode-run \
        -- sh -c 'touch /marker.\$(hostname)' && \
        srun -N2 -K $run --container-name=pernode-run -- sh -c 'echo \$(hostname): \$(ls / | grep -c ^marker)'"
    assert_success
    assert_equal 2 "$(grep -c '^node[0-9]*: 1$' <<<"$output")" "nodes whose container holds its own marker alone"
    [[ ! -d $CACHE/containers ]] || fail "containers under the shared cache: $(ls "$CACHE/containers")"
    rm -rf "$SANDBOX_DIR"/nodes/node*/var-tmp/slipway-"$JOB_UID"/containers/global/pernode-run*
}
