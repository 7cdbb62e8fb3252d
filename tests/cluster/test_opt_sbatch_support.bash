# SPDX-License-Identifier: Apache-2.0
# Copyright The Slipway authors
# plugstack key sbatch_support (issue 4): with 1, `#SBATCH --container-image` runs the batch
# script itself in the container, as pyxis does; with 0 (the default) it runs on the node and only
# its srun steps are containerized (that case: test_container_image.bash).

setup_file() {
    require_sandbox
    require_plugin
    require_images busybox
    BUSYBOX=$(image_ref busybox)
    SLIPWAY_PLUGIN_ARGS=sbatch_support=1 "$SANDBOX" up >/dev/null 2>&1 || fail "up with sbatch_support=1"
}

teardown_file() { "$SANDBOX" up >/dev/null 2>&1; }

test_batch_script_runs_in_the_container() {
    local script
    script=$(job_user_home)/sbatch-support-$$.sh
    printf '#!/bin/sh\n#SBATCH --container-image=%s\n#SBATCH -N1 --time=2\necho "script in $(cat /etc/slipway-image)"\n[ -e /usr/sbin/slurmd ] && echo "host slurmd visible"\nexit 0\n' \
        "$BUSYBOX" >"$script"
    run_batch "$script"
    rm -f "$script"
    assert_success
    assert_output_contains "script in busybox"
    assert_output_not_contains "host slurmd visible"
}
