# SPDX-License-Identifier: Apache-2.0
# Copyright The Slipway authors
# pyxis behaviours job scripts rely on (pyxis's README and wiki as the reference), through srun,
# #SBATCH and salloc: terminals inside the container, the seccomp filter in every container, apt
# under --container-remap-root from a local repository, home at /root with remap-root, relative
# paths resolved where srun ran, --container-env of a variable the job lacks, the entrypoint's
# environment, --container-unshare=ipc, the mount flags and tmpfs options pyxis takes, a relative
# --container-workdir, the site's `writable` default and pyxis's error phrases.

setup_file() {
    require_sandbox
    require_plugin
    require_images busybox busybox-env debian-python dnf
    BUSYBOX=$(image_ref busybox)
    ENVIMG=$(image_ref busybox-env)
    PYTHON=$(image_ref debian-python)
    DNF=$(image_ref dnf)
    DIR=$(job_user_home)/slipway-test${SLIPWAY_SANDBOX_INSTANCE:-0}-compat
    rm -rf "$DIR"
    mkdir -p "$DIR/sub"
    chown -R slwuser: "$DIR"
}

teardown_file() { rm -rf "$DIR"; }

in_alloc() {
    run_job salloc -N"$1" --time=2 sh -c "$2"
    output=$(grep -Ev '^salloc: ' <<<"$output" || true)
}

# openpty(3) inside: the node's devpts has ptmxmode=000, which used to make every pty fail.
test_terminals_work_in_the_container() {
    run_job srun -N2 -K --container-image="$PYTHON" python3 -c '
import os, pty
m, s = os.openpty(); print("pty", os.ttyname(s).startswith("/dev/pts/"))
pid, fd = pty.fork()
if pid == 0:
    os.execvp("sh", ["sh", "-c", "test -t 0 && echo child-has-a-tty"])
out = b""
while True:
    try:
        b = os.read(fd, 100)
    except OSError:
        break
    if not b:
        break
    out += b
os.waitpid(pid, 0); print(out.decode().strip())'
    assert_success
    assert_equal 2 "$(grep -cx 'pty True' <<<"$output")" "tasks that opened a pty"
    assert_equal 2 "$(grep -cx 'child-has-a-tty' <<<"$output")" "children on a pty"
    # srun --pty needs a terminal of its own: script(1) gives it one.
    run_job script -qec "srun -K --pty --container-image=$BUSYBOX sh -c 'test -t 0 && echo stdin-is-a-tty'" /dev/null
    assert_success
    assert_output_contains "stdin-is-a-tty"
}

test_terminals_work_in_sbatch_and_salloc() {
    local script=$DIR/pty.sh
    printf '#!/bin/sh\n#SBATCH --container-image=%s\n#SBATCH -N1 --time=2\nsrun -K script -qc "echo in-script" /dev/null\n' \
        "$PYTHON" >"$script"
    run_batch "$script"
    assert_success
    assert_output_contains "in-script"
    in_alloc 1 "srun -K --container-image=$PYTHON script -qc 'echo salloc-script' /dev/null"
    assert_success
    assert_output_contains "salloc-script"
}

# pyxis installs its seccomp filter in every container: chown and set*id succeed as no-ops, as
# unpacking archives with owners needs.
test_seccomp_filter_without_remap_root() {
    run_job env OUTSIDE_UID="$(id -u slwuser)" srun -N2 -K --container-image="$PYTHON" --no-container-remap-root python3 -c '
import os
f = "/tmp/slipway-compat-%s-%s" % (os.environ["SLURM_JOB_ID"], os.environ["SLURM_PROCID"])
open(f, "w").close(); os.chown(f, 123, 456); os.setgid(789); os.setuid(321)
print("noop", os.stat(f).st_uid == os.getuid(), os.getuid() == int(os.environ["OUTSIDE_UID"])); os.unlink(f)'
    assert_success
    assert_equal 2 "$(grep -cx 'noop True True' <<<"$output")" "tasks whose chown/setuid were no-ops"
}

# A local repository (file:), one package, as a site mirror would serve it: apt-get update and
# install as root inside, which apt's own drop to _apt defeated ("Could not switch group").
make_local_repo() {
    local pkg=$DIR/pkgroot repo=$DIR/repo
    rm -rf "$pkg" "$repo"
    mkdir -p "$pkg/DEBIAN" "$pkg/opt/slipway-apt" "$repo"
    printf 'Package: slipway-apt-test\nVersion: 1.0\nArchitecture: all\nMaintainer: Slipway <t@example.org>\nDescription: test package\n' \
        >"$pkg/DEBIAN/control"
    echo from-the-repo >"$pkg/opt/slipway-apt/data"
    chown -R 1:1 "$pkg/opt"
    dpkg-deb --build "$pkg" "$repo/slipway-apt-test_1.0_all.deb" >/dev/null
    {
        dpkg-deb -f "$repo/slipway-apt-test_1.0_all.deb"
        echo "Filename: ./slipway-apt-test_1.0_all.deb"
        echo "Size: $(stat -c %s "$repo/slipway-apt-test_1.0_all.deb")"
        echo "SHA256: $(sha256sum "$repo/slipway-apt-test_1.0_all.deb" | cut -d' ' -f1)"
        echo
    } >"$repo/Packages"
    chown -R slwuser: "$repo"
}

test_apt_get_update_and_install_under_remap_root() {
    make_local_repo
    local src="deb [trusted=yes] file:$DIR/repo ./"
    run_job srun -N2 -K --container-image="$PYTHON" --container-remap-root --container-writable \
        --container-mounts="$DIR" sh -c "
        echo '$src' >/etc/apt/sources.list && rm -f /etc/apt/sources.list.d/* &&
        apt-get update -q 2>&1 && apt-get install -y -q slipway-apt-test >/dev/null 2>&1 &&
        echo \"installed \$(cat /opt/slipway-apt/data)\""
    assert_success
    assert_output_not_contains "Could not switch group"
    assert_equal 2 "$(grep -cx 'installed from-the-repo' <<<"$output")" "nodes that installed the package"
    local script=$DIR/apt.sh
    cat >"$script" <<EOS
#!/bin/sh
#SBATCH --container-image=$PYTHON
#SBATCH --container-remap-root
#SBATCH --container-writable
#SBATCH --container-mounts=$DIR
#SBATCH -N1 --time=2
srun -K sh -c "echo '$src' >/etc/apt/sources.list && apt-get update -q >/dev/null 2>&1 && apt-get install -y -q slipway-apt-test >/dev/null 2>&1 && cat /opt/slipway-apt/data"
EOS
    run_batch "$script"
    assert_success
    assert_output_contains "from-the-repo"
}

# The same for dnf: an RPM whose file belongs to another user (rpm chowns it) from a local
# repository made with rpmbuild and createrepo_c. (contrib/images/dnf: Debian's dnf and rpm.)
make_rpm_repo() {
    local top=$DIR/rpmbuild
    rm -rf "$top" "$DIR/rpmrepo"
    mkdir -p "$top" "$DIR/rpmrepo"
    cat >"$top/test.spec" <<'EOS'
Name: slipway-dnf-test
Version: 1.0
Release: 1
Summary: Slipway test package
License: MIT
BuildArch: noarch
AutoReqProv: no
%description
A file owned by another user, as real packages have: rpm chowns it on install.
%install
mkdir -p %{buildroot}/opt/slipway-dnf
echo from-the-rpm > %{buildroot}/opt/slipway-dnf/data
%files
%attr(0644,daemon,daemon) /opt/slipway-dnf/data
EOS
    rpmbuild -bb --quiet --define "_topdir $top" "$top/test.spec" >/dev/null
    cp "$top"/RPMS/noarch/*.rpm "$DIR/rpmrepo/"
    createrepo_c -q "$DIR/rpmrepo"
    chown -R slwuser: "$DIR/rpmrepo"
}

test_dnf_install_under_remap_root() {
    make_rpm_repo
    local install=$DIR/dnf-install.sh
    cat >"$install" <<EOS
printf '[local]\nname=local\nbaseurl=file://$DIR/rpmrepo\ngpgcheck=0\n' >/etc/yum.repos.d/local.repo
dnf -y -q --releasever=12 install slipway-dnf-test >/dev/null 2>&1 && echo "installed \$(cat /opt/slipway-dnf/data)"
EOS
    chown slwuser "$install"
    run_job srun -N2 -K --container-image="$DNF" --container-remap-root --container-writable \
        --container-mounts="$DIR" sh "$install"
    assert_success
    assert_equal 2 "$(grep -cx 'installed from-the-rpm' <<<"$output")" "nodes that installed the RPM"
    in_alloc 1 "srun -K --container-image=$DNF --container-remap-root --container-writable --container-mounts=$DIR sh $install"
    assert_success
    assert_output_contains "installed from-the-rpm"
}

test_home_is_root_s_under_remap_root() {
    local home
    home=$(job_user_home)
    echo mine >"$DIR/marker"
    chown slwuser "$DIR/marker"
    run_job srun -K --container-image="$BUSYBOX" --container-mount-home --container-remap-root \
        sh -c 'echo "HOME=$HOME"; cat /root/'"${DIR#"$home"/}"'/marker'
    assert_success
    assert_output_contains "HOME=/root"
    assert_output_contains "mine"
    in_alloc 1 "srun -K --container-image=$BUSYBOX --container-mount-home sh -c 'echo HOME=\$HOME'"
    assert_success
    assert_output_contains "HOME=$home"
}

# cd into a subdirectory inside salloc (or a batch script) and give relative paths: they are the
# subdirectory's, as srun checked them, not the allocation's submission directory's.
test_relative_paths_resolve_where_srun_ran() {
    echo in-sub >"$DIR/sub/data"
    chown slwuser "$DIR/sub/data"
    run_job sh -c "cd '$DIR' && salloc -N1 --time=2 sh -c 'cd sub && srun -K --container-image=$BUSYBOX --container-mounts=./data:/data cat /data'"
    assert_success
    assert_output_contains "in-sub"
    local script=$DIR/rel.sh
    printf '#!/bin/sh\n#SBATCH -N1 --time=2\ncd sub && srun -K --container-image=%s --container-mounts=data:/data cat /data\n' \
        "$BUSYBOX" >"$script"
    chown slwuser "$script"
    run_job sh -c "cd '$DIR' && sbatch --wait -o '$DIR/rel.out' '$script' >/dev/null; cat '$DIR/rel.out'"
    assert_success
    assert_output_contains "in-sub"
    # A relative --container-save and --container-image: the same directory.
    rm -f "$DIR/sub/rel.sqsh"
    run_job sh -c "cd '$DIR' && salloc -N1 --time=2 sh -c 'cd sub && srun -K --container-image=$BUSYBOX --container-writable --container-save=./rel.sqsh sh -c \"echo relative >/etc/slipway-image\" && srun -K --container-image=./rel.sqsh cat /etc/slipway-image'"
    assert_success
    assert_output_contains "relative"
    assert_file_exists "$DIR/sub/rel.sqsh"
}

# busybox-env's Env sets FOO=image (contrib/images/busybox-env): a --container-env name the job
# does not have keeps the image's value; one the job has keeps the job's.
test_container_env_of_an_unset_variable_keeps_the_image_value() {
    run_job env -u FOO srun -K --container-image="$ENVIMG" --container-env=FOO sh -c 'echo "v=$FOO"'
    assert_success
    assert_output_contains "v=image"
    run_job env FOO=from-job srun -K --container-image="$ENVIMG" --container-env=FOO sh -c 'echo "v=$FOO"'
    assert_success
    assert_output_contains "v=from-job"
    in_alloc 1 "unset FOO; srun -K --container-image=$ENVIMG --container-env=FOO sh -c 'echo v=\$FOO'"
    assert_success
    assert_output_contains "v=image"
}

test_unshare_ipc_gives_private_shm_and_mqueue() {
    rm -f /dev/shm/slipway-compat-*
    run_job srun -N1 -n2 -K --container-image="$PYTHON" --container-unshare=ipc sh -c '
        echo host >/dev/shm/slipway-compat-$SLURM_PROCID; sleep 1; ls /dev/shm | sort | tr "\n" " "; echo
        findmnt -n -o FSTYPE /dev/mqueue 2>/dev/null || grep " /dev/mqueue " /proc/self/mounts | cut -d" " -f3'
    assert_success
    # The node's container is one per node: its tasks share the private /dev/shm.
    assert_output_contains "slipway-compat-0 slipway-compat-1"
    assert_output_contains "mqueue"
    [[ ! -e /dev/shm/slipway-compat-0 ]] || fail "a file in the container's /dev/shm reached the node's"
    in_alloc 1 "srun -K --container-image=$BUSYBOX --container-unshare=ipc sh -c 'grep -c \" /dev/shm tmpfs\" /proc/self/mounts'"
    assert_success
}

test_mount_flags_and_tmpfs_options_pyxis_takes() {
    run_job srun -K --container-image="$BUSYBOX" \
        --container-mounts="$DIR:/d:ro+unbindable,tmpfs:/scratch:size=2m+mode=0700+nr_inodes=100" sh -c '
        grep " /d " /proc/self/mountinfo | grep -q unbindable && echo d-unbindable
        stat -c "mode %a" /scratch; df -k /scratch | tail -n1 | awk "{print \"kb\", \$2}"'
    assert_success
    assert_output_contains "d-unbindable"
    assert_output_contains "mode 700"
    assert_output_contains "kb 2048"
    run_job srun -K --container-image="$BUSYBOX" --container-mounts=tmpfs:/s:size=lots true
    assert_failure
    assert_output_contains "slipway: --container-mounts='tmpfs:/s:size=lots' has a bad tmpfs option 'size=lots'"
}

test_relative_workdir_is_inside_the_container() {
    run_job srun -K --container-image="$BUSYBOX" --container-workdir=../../etc pwd
    assert_success
    assert_output "/etc"
    in_alloc 1 "srun -K --container-image=$BUSYBOX --container-workdir=usr/./bin pwd"
    assert_success
    assert_output_contains "/usr/bin"
}

test_pyxis_error_phrases() {
    run_job srun -K --container-image="$BUSYBOX" --container-unshare=pid true
    assert_failure
    assert_output_contains "unknown namespace"
    run_job srun -K --container-image="$BUSYBOX" --container-mounts="$DIR/absent:/x" true
    assert_failure
    assert_output_contains "source path does not exist: '$DIR/absent'"
    run_job srun -K --container-image=127.0.0.1:9/no/such:tag true
    assert_failure
    assert_output_contains "failed to import docker image: 127.0.0.1:9/no/such:tag"
    # pyxis: "couldn't chdir to PATH: No such file or directory"; enroot: a mount destination out
    # of the root is "Cross-device link".
    run_job srun -K --container-image="$BUSYBOX" --container-workdir=/no/such/dir true
    assert_failure
    assert_output_contains "/no/such/dir: No such file or directory"
    local how
    for how in srun sbatch salloc; do
        case $how in
            srun) run_job srun -K --container-image="$BUSYBOX" --container-mounts=/tmp:../home true ;;
            sbatch) run_job sbatch -N1 --container-image="$BUSYBOX" --container-mounts=/tmp:../home --wrap true ;;
            salloc) run_job salloc -N1 --container-image="$BUSYBOX" --container-mounts=/tmp:../home true ;;
        esac
        assert_failure
        assert_output_contains "Cross-device link"
    done
    run_job srun -K --container-image="$DIR/absent.sqsh" true
    assert_failure
    assert_output_contains "$DIR/absent.sqsh"
    assert_output_contains "No such file or directory"
}

# plugstack.conf `writable=1`, the site default enroot sites set with ENROOT_ROOTFS_WRITABLE: an
# unnamed container's root is writable unless --container-readonly.
test_site_default_writable() {
    SLIPWAY_PLUGIN_ARGS="writable=1" "$SANDBOX" up >/dev/null 2>&1 || fail "sandbox up with writable=1"
    trap '"$SANDBOX" up >/dev/null 2>&1 || echo "# could not restore the sandbox" >&2' EXIT
    grep -q ' writable=1' "$SANDBOX_DIR/etc/plugstack.conf" || fail "plugstack.conf was not rewritten"
    run_job srun -K --container-image="$BUSYBOX" sh -c 'echo x >/made && echo wrote'
    assert_success
    assert_output "wrote"
    run_job srun -K --container-image="$BUSYBOX" --container-readonly sh -c 'echo x >/made 2>&1 || echo refused'
    assert_output_contains "refused"
    in_alloc 1 "srun -K --container-image=$BUSYBOX sh -c 'echo x >/made && echo salloc-wrote'"
    assert_output_contains "salloc-wrote"
    "$SANDBOX" up >/dev/null 2>&1 || fail "could not restore the sandbox"
    trap - EXIT
    run_job srun -K --container-image="$BUSYBOX" sh -c '(echo x >/made) 2>/dev/null || echo read-only-again'
    assert_output "read-only-again"
}

# enroot's schemes, which pyxis passes on: podman://NAME from the user's rootless Podman store on
# the node (the sandbox's nodes share this machine's homes), dockerd://NAME from a Docker daemon.
test_podman_and_dockerd_images() {
    run_job podman pull -q --tls-verify=false "$BUSYBOX"
    assert_success
    run_job srun -N2 -K --container-image="podman://$BUSYBOX" sh -c 'echo "$(hostname) $(cat /etc/slipway-image)"'
    assert_success
    assert_equal 2 "$(grep -Ecx 'node[0-9]+ busybox' <<<"$output")" "tasks in the image from podman"
    local script=$DIR/podman.sh
    printf '#!/bin/sh\n#SBATCH --container-image=podman://%s\n#SBATCH -N1 --time=2\nsrun -K cat /etc/slipway-image\n' \
        "$BUSYBOX" >"$script"
    run_batch "$script"
    assert_success
    assert_output_contains "busybox"
    in_alloc 1 "srun -K --container-image=podman://$BUSYBOX cat /etc/slipway-image"
    assert_success
    assert_output_contains "busybox"
    run_job srun -K --container-image=podman://no/such:image true
    assert_failure
    assert_output_contains "failed to import docker image: podman://no/such:image: cannot export 'podman://no/such:image' from podman"
    run_job srun -K --container-image=podman://--help true
    assert_failure
    assert_output_contains "give the image's name after podman://"
    # No Docker daemon runs on the sandbox: the error says which daemon could not be asked.
    run_job srun -K --container-image=dockerd://busybox true
    assert_failure
    assert_output_contains "cannot export 'dockerd://busybox' from docker"
    run_job podman rmi -f "$BUSYBOX"
}

# The same behaviours as #SBATCH directives reach the script's steps: one batch job, several
# steps, each checking one of them.
test_sbatch_steps_get_the_same_behaviours() {
    local script=$DIR/compat-batch.sh
    cat >"$script" <<EOS
#!/bin/sh
#SBATCH --container-image=$PYTHON
#SBATCH --container-unshare=ipc
#SBATCH --container-mounts=tmpfs:/scratch:size=1m+mode=0700
#SBATCH --container-workdir=../../tmp
#SBATCH -N1 --time=2
srun -K python3 -c 'import os; m, s = os.openpty(); print("pty", os.ttyname(s).startswith("/dev/pts/"))'
srun -K sh -c 'f=/tmp/slipway-compat-\$SLURM_JOB_ID; touch \$f; chown 123 \$f && echo chown-noop; rm -f \$f'
srun -K sh -c 'grep -q " /dev/shm tmpfs " /proc/self/mounts && grep -q " /dev/mqueue mqueue " /proc/self/mounts && echo private-ipc'
srun -K sh -c 'echo "scratch \$(stat -c %a /scratch) \$(df -k /scratch | tail -n1 | awk "{print \\\$2}")"; pwd'
srun -K --container-remap-root --container-mount-home sh -c 'echo "HOME=\$HOME"'
EOS
    run_batch "$script"
    assert_success
    assert_output_contains "pty True"
    assert_output_contains "chown-noop"
    assert_output_contains "private-ipc"
    assert_output_contains "scratch 700 1024"
    assert_output_contains "HOME=/root"
    [[ $output == *$'\n/tmp\n'* || $output == *$'\n/tmp' ]] || fail "working directory is not /tmp:"$'\n'"$output"
}
