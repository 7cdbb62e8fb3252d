# SPDX-License-Identifier: Apache-2.0
# Copyright The Slipway authors
# --container-remap-root / --no-container-remap-root on the sandbox: uid and gid 0 inside (the job
# user outside), and the calls only a real root may make (chown family, set*id, setgroups, mknod of
# devices) succeed without effect through the seccomp filter (in every container, as pyxis);
# FIFOs are still made for real.
# srun, #SBATCH, salloc.

setup_file() {
    require_sandbox
    require_plugin
    require_images busybox debian-python
    BUSYBOX=$(image_ref busybox)
    PYTHON=$(image_ref debian-python)
    DIR=$(job_user_home)/slipway-test${SLIPWAY_SANDBOX_INSTANCE:-0}-remap
    rm -rf "$DIR"
    mkdir -p "$DIR"
    chown slwuser: "$DIR"
}

teardown_file() { rm -rf "$DIR"; }

test_root_inside_the_job_user_outside() {
    run_job srun -N4 -K --container-image="$BUSYBOX" --container-remap-root --container-mounts="$DIR" \
        sh -c 'echo "ids $(id -u):$(id -g)"; touch '"$DIR"'/made-$SLURM_PROCID'
    assert_success
    assert_equal 4 "$(grep -cx 'ids 0:0' <<<"$output")" "tasks that are root inside"
    local i
    for i in 0 1 2 3; do
        assert_equal slwuser:slwuser "$(stat -c %U:%G "$DIR/made-$i")" "owner on the host of a file made by root inside"
    done
}

test_chown_succeeds_without_effect() {
    run_job srun -N2 -K --container-image="$BUSYBOX" --container-remap-root sh -c '
        f=/tmp/slipway-chown-$SLURM_JOB_ID-$SLURM_PROCID; touch $f
        chown 123:456 $f && echo "chown ok $(stat -c %u:%g $f)"; chgrp 789 $f && echo chgrp ok; rm -f $f'
    assert_success
    assert_equal 2 "$(grep -cx 'chown ok 0:0' <<<"$output")" "no-op chowns"
    assert_equal 2 "$(grep -cx 'chgrp ok' <<<"$output")" "no-op chgrps"
}

test_setuid_family_succeeds_without_effect() {
    run_job srun -N2 -K --container-image="$PYTHON" --container-remap-root python3 -c '
import os
os.setgroups([100]); os.setresgid(100, 100, 100); os.setresuid(100, 100, 100)
os.setgid(200); os.setuid(200); os.setreuid(300, 300)
print("setid ok", os.getuid(), os.getgid())'
    assert_success
    assert_equal 2 "$(grep -cx 'setid ok 0 0' <<<"$output")" "no-op set*id calls"
}

test_mknod_of_a_device_is_a_no_op_fifo_is_real() {
    run_job srun -N1 -K --container-image="$BUSYBOX" --container-remap-root --container-writable sh -c '
        mknod /dev-null-copy c 1 3 && echo "mknod c ok"
        [ -e /dev-null-copy ] && echo "device exists" || echo "no device"
        mknod /fifo p && [ -p /fifo ] && echo "fifo made"'
    assert_success
    assert_output_contains "mknod c ok"
    assert_output_contains "no device"
    assert_output_contains "fifo made"
}

# What remap-root is for: a package manager installs a package whose files belong to another user
# (dpkg chowns each file to its owner in the archive, here daemon, uid 1) and whose maintainer
# script changes owners too. Without the filter's no-op chown the install fails: uid 1 has no
# mapping in the container.
test_dpkg_installs_a_package_as_root_inside() {
    local pkg=$DIR/pkgroot
    rm -rf "$pkg"
    mkdir -p "$pkg/DEBIAN" "$pkg/opt/slipway-test"
    printf 'Package: slipway-remap-test\nVersion: 1.0\nArchitecture: all\nMaintainer: Slipway <t@example.org>\nDescription: test package\n' \
        >"$pkg/DEBIAN/control"
    printf '#!/bin/sh\nset -e\nchown daemon:daemon /opt/slipway-test/data\necho "postinst ran as $(id -u)"\n' >"$pkg/DEBIAN/postinst"
    chmod 0755 "$pkg/DEBIAN/postinst"
    echo payload >"$pkg/opt/slipway-test/data"
    chown -R 1:1 "$pkg/opt"
    run_host dpkg-deb --build "$pkg" "$DIR/test.deb"
    assert_success
    chmod 0644 "$DIR/test.deb"
    run_job srun -N1 -K --container-image="$PYTHON" --container-remap-root --container-writable \
        --container-mounts="$DIR" sh -c "dpkg -i $DIR/test.deb && cat /opt/slipway-test/data && dpkg-query -W -f='\${Status}\n' slipway-remap-test"
    assert_success
    assert_output_contains "postinst ran as 0"
    assert_output_contains "payload"
    assert_output_contains "install ok installed"
}

# Without remap-root the filter is there too, as pyxis has it: chown succeeds without effect.
test_without_remap_root_the_job_user_and_the_filter() {
    run_job srun -N2 -K --container-image="$BUSYBOX" --no-container-remap-root sh -c '
        echo "ids $(id -u):$(id -g)"; f=/tmp/slipway-chown-$SLURM_JOB_ID-$SLURM_PROCID; touch $f
        chown 123 $f 2>/dev/null && echo "chown ok $(stat -c %u $f)" || echo "chown refused"; rm -f $f'
    assert_success
    assert_equal 2 "$(grep -cx "ids $(id -u slwuser):$(id -g slwuser)" <<<"$output")" "tasks as the job user"
    assert_equal 2 "$(grep -cx "chown ok $(id -u slwuser)" <<<"$output")" "no-op chowns"
}

test_sbatch_remap_root() {
    local script=$DIR/job.sh
    cat >"$script" <<EOS
#!/bin/sh
#SBATCH --container-image=$BUSYBOX
#SBATCH --container-remap-root
#SBATCH -N2 --ntasks-per-node=1 --time=2
srun -K sh -c 'echo "step \$SLURM_PROCID \$(id -u)"'
EOS
    run_batch "$script"
    echo "$output" >&2
    assert_success
    assert_equal 2 "$(grep -c '^step [01] 0$' <<<"$output")" "steps as root inside"
}

test_salloc_remap_root() {
    run_job salloc -N2 --time=2 --container-image="$BUSYBOX" --container-remap-root srun -K -n2 id -u
    assert_success
    assert_equal 2 "$(grep -cx 0 <<<"$output")" "steps as root inside"
}
