# SPDX-License-Identifier: Apache-2.0
# Copyright The Slipway authors
# The import runs outside slurmstepd's identity window (spank/import_child.h): while a node imports
# an image in user_init, slurmstepd itself stays root (its PMIx thread authenticates peers through
# munge; as the job user it is refused and a fence elsewhere can hang). The job user's child does
# the import.

setup_file() {
    require_sandbox
    require_plugin
    require_images debian-python
    IMAGE=$(image_ref debian-python)
    CACHE=$SANDBOX_DIR/nodes/node2/var-tmp/slipway-$(id -u slwuser)
}

importing() { pgrep -P "$pid" -x slipway-import >/dev/null; }

# The Uid line of slurmstepd for a running step on node2: "real effective saved fs".
stepd_uids() {
    local pid
    for pid in $(sandbox_pids slurmstepd); do
        [[ $(ip netns identify "$pid" 2>/dev/null) == "${SANDBOX_NETNS_PREFIX}2" ]] || continue
        grep -q '\[[0-9]*\.0\]' "/proc/$pid/cmdline" 2>/dev/null || continue
        # The import child (named by spank/import_child.cc) is looked for before and after the
        # threads are read: only when it is there both times were they read during the import.
        # Slurm forks the tasks as the user right after user_init; those children are not it.
        local before=no
        importing && before=yes
        # One line per thread: the PMIx server is one of them, and must not be the user.
        cat /proc/"$pid"/task/*/status 2>/dev/null | awk '/^Uid:/ {print $2, $3}' | sort -u | tr '\n' ';'
        echo
        [[ $before == yes ]] && importing && echo importing
    done
    return 0
}

test_slurmstepd_stays_root_while_a_node_imports() {
    local digest samples=0 user_samples=0 out
    digest=$(skopeo inspect --tls-verify=false --format '{{.Digest}}' "docker://$IMAGE")
    rm -rf "$CACHE/images/${digest#sha256:}"   # the blobs stay: the import unpacks again
    "$SANDBOX" exec -- timeout 120 srun -N1 -w node2 -K --container-image="$IMAGE" true \
        >/dev/null 2>&1 &
    local job=$! deadline=$((SECONDS + 100))
    while kill -0 "$job" 2>/dev/null && ((SECONDS < deadline)); do
        out=$(stepd_uids)
        if [[ $out == *importing* ]]; then
            samples=$((samples + 1))
            [[ $(head -n1 <<<"$out") == "0 0;" ]] || user_samples=$((user_samples + 1))
        fi
        sleep 0.05
    done
    wait "$job" || fail "the step failed"
    ((samples >= 3)) || skip "the import was too quick to observe ($samples samples)"
    assert_equal 0 "$user_samples" "samples (of $samples) where a slurmstepd thread was not root during the import"
}
