# registry_mirrors=REGISTRY=MIRROR (plugstack.conf) and SLIPWAY_REGISTRY_MIRRORS (slipway): a
# pull-through docker-registry in front of the sandbox registry serves the nodes' manifests and
# blobs, digests verified as always; once it holds an image, a 4-node job costs the origin no blob
# download; a mirror that fails is dropped with a warning line and the origin serves the job.
# (docker-registry's proxy does not merge concurrent first fetches of one blob: a cold 4-node job
# makes it fetch a blob from the origin up to once per node; measured, see docs/performance.md.)

setup_file() {
    require_sandbox
    require_plugin
    require_images busybox debian-python
    PYTHON=$(image_ref debian-python)
    BUSYBOX=$(image_ref busybox)
    ORIGIN=$SANDBOX_NET.1:5000
    MIRROR=$SANDBOX_NET.1:5003
    ORIGIN_LOG=$SANDBOX_DIR/log/registry-access.log
    WORK=$SANDBOX_DIR/test-mirrors
    rm -rf "$WORK" && mkdir -p "$WORK/storage"
    registry_config "$MIRROR" "$WORK/storage" "proxy:
  remoteurl: http://$ORIGIN" >"$WORK/config.yml"
    setsid /usr/bin/docker-registry serve "$WORK/config.yml" </dev/null >"$WORK/log" 2>&1 &
    echo $! >"$WORK/mirror.pid"
    local i
    for ((i = 0; i < 100; i++)); do
        [[ -n $(ss -Hltn "src $SANDBOX_NET.1 and sport = :5003") ]] && break
        sleep 0.05
    done
    mirror_up "$MIRROR"
}

teardown_file() {
    [[ -e $WORK/mirror.pid ]] && kill "$(cat "$WORK/mirror.pid")" 2>/dev/null
    rm -rf "$WORK"
    "$SANDBOX" up >/dev/null 2>&1
}

# The sandbox with MIRROR as the origin's mirror.
mirror_up() {
    SLIPWAY_PLUGIN_ARGS="insecure_registries=$ORIGIN,$1 registry_mirrors=$ORIGIN=$1" "$SANDBOX" up >/dev/null 2>&1 ||
        fail "slipway-sandbox up with registry_mirrors failed"
}

clear_caches() { rm -rf "$SANDBOX_DIR"/nodes/node*/var-tmp/slipway-"$(id -u slwuser)"; }
mark() { wc -l <"$1"; }
# GETs of REPO's blobs in LOG after MARK.
blob_gets() { tail -n +"$(($2 + 1))" "$1" | grep -c "\"GET /v2/slipway/$3/blobs/" || true; }

test_nodes_pull_through_the_mirror_and_a_warm_mirror_spares_the_origin() {
    clear_caches
    local o m
    o=$(mark "$ORIGIN_LOG") m=$(mark "$WORK/log")
    run_job srun -N4 -K --container-image="$PYTHON" cat /etc/slipway-image
    assert_success
    assert_equal 4 "$(grep -cx debian-python <<<"$output")" "tasks in the image"
    # Three blobs (config, two layers), asked of the mirror by each of the 4 nodes.
    assert_equal 12 "$(blob_gets "$WORK/log" "$m" debian-python)" "blob GETs at the mirror"
    [[ $(blob_gets "$ORIGIN_LOG" "$o" debian-python) -ge 3 ]] || fail "the mirror fetched nothing from the origin"
    clear_caches
    o=$(mark "$ORIGIN_LOG") m=$(mark "$WORK/log")
    run_job salloc -N4 --time=2 srun -K --ntasks-per-node=1 --container-image="$PYTHON" cat /etc/slipway-image
    assert_success
    assert_equal 0 "$(blob_gets "$ORIGIN_LOG" "$o" debian-python)" "blob downloads from the origin"
    assert_equal 12 "$(blob_gets "$WORK/log" "$m" debian-python)" "blob GETs at the mirror"
}

test_a_failing_mirror_falls_back_to_the_origin_with_a_warning() {
    mirror_up "$SANDBOX_NET.1:5009"   # nothing listens there
    trap 'mirror_up "$MIRROR"' EXIT
    clear_caches
    local o
    o=$(mark "$ORIGIN_LOG")
    run_job srun -N2 -K --container-image="$BUSYBOX" cat /etc/slipway-image
    assert_success
    assert_equal 2 "$(grep -cx busybox <<<"$output")" "tasks in the image"
    assert_output_contains "slipway: warning: registry mirror $SANDBOX_NET.1:5009 failed for '$ORIGIN/slipway/busybox"
    assert_output_contains "using $ORIGIN itself"
    [[ $(blob_gets "$ORIGIN_LOG" "$o" busybox) -ge 1 ]] || fail "the origin served no blob"
    clear_caches
    run_job salloc -N1 --time=2 srun -K --container-image="$BUSYBOX" cat /etc/slipway-image
    assert_success
    assert_output_contains "busybox"
    assert_output_contains "slipway: warning: registry mirror $SANDBOX_NET.1:5009 failed"
}

test_slipway_import_uses_the_mirror() {
    local build bin m
    build=$(dirname "$(dirname "${SLIPWAY_PLUGIN:-$REPO_DIR/build/spank/spank_slipway.so}")")
    bin=$(job_user_home)/.slipway-mirror-test/slipway
    install -d -o slwuser "$(dirname "$bin")"
    install -m 0755 -o slwuser "$build/launcher/slipway" "$bin"
    m=$(mark "$WORK/log")
    run_job env SLIPWAY_CACHE_DIR="$(job_user_home)/.slipway-mirror-test/cache" \
        SLIPWAY_INSECURE_REGISTRIES="$ORIGIN,$MIRROR" SLIPWAY_REGISTRY_MIRRORS="$ORIGIN=$MIRROR" \
        "$bin" import "$BUSYBOX"
    assert_success
    [[ $(blob_gets "$WORK/log" "$m" busybox) -ge 1 ]] || fail "slipway import asked the mirror for no blob"
    run_job env SLIPWAY_REGISTRY_MIRRORS="$ORIGIN" "$bin" import "$BUSYBOX"
    assert_failure
    assert_output_contains "SLIPWAY_REGISTRY_MIRRORS: registry mirror '$ORIGIN' is malformed; use REGISTRY=MIRROR"
    rm -rf "$(dirname "$bin")"
}

test_a_malformed_mirror_key_is_refused() {
    SLIPWAY_PLUGIN_ARGS="registry_mirrors=docker.io" "$SANDBOX" up >/dev/null 2>&1 || true
    trap 'mirror_up "$MIRROR"' EXIT
    run_job srun -N1 -K true
    assert_failure
    assert_output_contains "slipway: plugstack.conf: registry_mirrors: registry mirror 'docker.io' is malformed"
}
