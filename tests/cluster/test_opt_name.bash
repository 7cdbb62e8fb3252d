# SPDX-License-Identifier: Apache-2.0
# Copyright The Slipway authors
# --container-name=NAME[:create|exec|no_exec|auto] on the sandbox, with pyxis's meanings: auto
# joins the running container (srun --overlap) or starts it; exec joins a running one and fails
# without one; no_exec starts a new instance of the same root; create fails if NAME exists; an
# unnamed container is reachable as <jobid>.<stepid>; many steps share one name at once; separate
# names, the default writability of a named container, scope=global across jobs; mounts made in a
# running container reach the steps attached to it, while each step's own binds stay its own.
# (Persistence across steps and the epilog's clean-up: test_lifecycle.bash.)

setup_file() {
    require_sandbox
    require_plugin
    require_images busybox
    BUSYBOX=$(image_ref busybox)
}

# in_alloc NODES SCRIPT: run SCRIPT (sh) in a fresh allocation of NODES nodes, as the job user;
# $output and $lines without salloc's and srun's progress lines.
in_alloc() {
    run_job salloc -N"$1" --time=2 sh -c "$2"
    drop_progress_lines
}

drop_progress_lines() {
    output=$(grep -Ev '^(salloc: |srun: job [0-9]+ (queued|has been allocated))' <<<"$output" || true)
    mapfile -t lines <<<"$output"
}

test_auto_creates_then_reuses_without_an_image() {
    in_alloc 2 "
        srun -K -N2 --container-image=$BUSYBOX --container-name=reuse sh -c 'echo \$SLURM_JOB_ID >/state' &&
        srun -K -N2 --container-name=reuse sh -c 'echo got \$(cat /state) \$(cat /etc/slipway-image)'"
    assert_success
    assert_equal 2 "$(grep -Ec '^got [0-9]+ busybox$' <<<"$output")" "tasks seeing the first step's file"
}

test_create_fails_if_it_exists() {
    in_alloc 1 "
        srun -K --container-image=$BUSYBOX --container-name=fresh:create sh -c 'echo old >/state' &&
        srun -K --container-image=$BUSYBOX --container-name=fresh:create true; echo second=\$?
        srun -K --container-name=fresh cat /state"
    assert_output_contains "second=1"
    # (salloc -N1 picks any free node: the message names the one it got.)
    assert_output_matches "slipway: container 'fresh' already exists on node[0-9]+; use --container-name=fresh to use it, or another name"
    assert_equal old "${lines[-1]}" "the container after the refused create"
}

test_exec_needs_a_running_container() {
    in_alloc 1 "srun -K --container-image=$BUSYBOX --container-name=absent:exec true"
    assert_failure
    assert_output_matches "slipway: container 'absent' is not running on node[0-9]+ [(]exec attaches to a running container[)]"
    in_alloc 1 "
        srun -K --container-image=$BUSYBOX --container-name=there sh -c 'echo kept >/state' &&
        srun -K --container-name=there:exec cat /state"
    assert_failure
    assert_output_matches "container 'there' is not running on node[0-9]+"
}

# What users debug with: a second step attaches to the running container, sees its files and
# its processes' mounts, and its changes are the container's.
test_overlap_step_joins_the_running_container() {
    in_alloc 1 "
        srun -K --container-image=$BUSYBOX --container-name=dev sh -c 'echo first >/state; sleep 4; cat /from-second' &
        sleep 2
        srun --overlap -K --container-name=dev sh -c 'echo joined \$(cat /state); echo second >/from-second' &&
        srun --overlap -K --container-name=dev:exec sh -c 'echo exec \$(cat /state)'
        wait"
    assert_success
    assert_output_contains "joined first"
    assert_output_contains "exec first"
    assert_equal second "${lines[-1]}" "what the first step saw of the second's write"
}

test_no_exec_starts_a_new_instance_of_the_same_root() {
    in_alloc 1 "
        srun -K --container-image=$BUSYBOX --container-name=inst --container-mounts=/etc:/site-etc:ro sh -c 'echo one >/state; sleep 4; cat /state2' &
        sleep 2
        srun --overlap -K --container-name=inst:no_exec sh -c 'cat /state; [ -e /site-etc/passwd ] && echo has-site-etc || echo no-site-etc; echo two >/state2'
        wait
        srun -K --container-name=inst:no_exec cat /state"
    assert_success
    assert_output_contains "no-site-etc"
    assert_equal 2 "$(grep -cx one <<<"$output")" "instances that saw the first one's file"
    assert_output_contains "two"
}

# pyxis: an unnamed container is reachable by other steps of its job as <jobid>.<stepid>.
test_unnamed_container_is_reachable_as_job_dot_step() {
    in_alloc 1 "
        srun -K --container-image=$BUSYBOX --container-writable sh -c 'echo unnamed >/state; sleep 4' &
        sleep 2
        srun --overlap -K --container-name=\$SLURM_JOB_ID.0:exec cat /state
        wait"
    assert_success
    assert_output "unnamed"
}

# 50 concurrent steps on 5 names: every step runs, each name's instances share one root.
test_many_steps_share_names_at_once() {
    in_alloc 1 "
        for i in \$(seq 0 49); do
            srun --overlap -K --container-image=$BUSYBOX --container-name=c\$((i%5)):no_exec \
                sh -c \"echo \$i >>/log; sleep 0.\$((i%7)); echo done\" &
        done
        wait
        for n in 0 1 2 3 4; do srun -K --container-name=c\$n sh -c 'echo lines \$(wc -l </log)'; done"
    assert_success
    assert_equal 50 "$(grep -cx done <<<"$output")" "steps that ran"
    assert_equal 5 "$(grep -cx 'lines 10' <<<"$output")" "names whose ten steps all wrote to one root"
}

test_names_are_separate() {
    in_alloc 1 "
        srun -K --container-image=$BUSYBOX --container-name=one sh -c 'echo one >/state' &&
        srun -K --container-image=$BUSYBOX --container-name=two sh -c 'cat /state 2>&1; echo two >/state' &&
        srun -K --container-name=one cat /state"
    assert_success
    assert_output_contains "No such file or directory"
    assert_equal one "${lines[-1]}" "container one's file"
}

test_named_is_writable_unless_readonly() {
    in_alloc 1 "
        srun -K --container-image=$BUSYBOX --container-name=ro sh -c 'echo w >/state && echo wrote' &&
        srun -K --container-name=ro --container-readonly sh -c 'cat /state; (echo x >/other) 2>&1; echo end'"
    assert_success
    assert_equal wrote "${lines[0]}" "first step"
    assert_output_contains "Read-only file system"
    assert_equal end "${lines[-1]}" "last line"
    [[ $output == *$'\nw\n'* ]] || fail "the read-only step does not see /state:"$'\n'"$output"
}

# With root remapped, a new instance must remap it too: its files were made by root inside.
test_no_exec_instance_keeps_remap_root() {
    in_alloc 1 "
        srun -K --container-image=$BUSYBOX --container-name=rr --container-remap-root sleep 3 &
        sleep 1.5
        srun --overlap -K --container-name=rr:no_exec true; echo plain=\$?
        srun --overlap -K --container-name=rr:no_exec --container-remap-root id -u
        srun --overlap -K --container-name=rr id -u
        wait"
    assert_output_contains "plain=1"
    assert_output_matches "slipway: container 'rr' runs with --container-remap-root on node[0-9]+; a new instance of it must too"
    assert_equal 2 "$(grep -cx 0 <<<"$output")" "steps that are root inside"
}

test_sbatch_named_container() {
    local script
    script=$(job_user_home)/slipway-test${SLIPWAY_SANDBOX_INSTANCE:-0}-name-$$.sh
    cat >"$script" <<EOS
#!/bin/sh
#SBATCH --container-image=$BUSYBOX
#SBATCH --container-name=batch
#SBATCH -N2 --ntasks-per-node=1 --time=2
srun -K sh -c 'hostname >/state; sleep 3' &
sleep 1.5
srun --overlap -K sh -c 'echo "step \$SLURM_PROCID saw \$(cat /state)"'
wait
EOS
    run_batch "$script"
    echo "$output" >&2
    rm -f "$script"
    assert_success
    assert_equal 2 "$(grep -Ec '^step ([01]) saw node[0-9]+$' <<<"$output")" "steps seeing the first step's file"
}

# container_scope=global (a second `up`, then restored): a container outlives its job.
test_global_scope_outlives_the_job() {
    SLIPWAY_PLUGIN_ARGS="container_scope=global" "$SANDBOX" up >/dev/null 2>&1 || fail "up with container_scope=global failed"
    trap '"$SANDBOX" up >/dev/null 2>&1 || echo "# could not restore the sandbox" >&2' EXIT
    local cache
    cache=$SANDBOX_DIR/nodes/node2/var-tmp/slipway-$(id -u slwuser)
    run_job srun -N1 -w node2 -K --container-image="$BUSYBOX" --container-name=global-$$:create \
        sh -c 'echo $SLURM_JOB_ID >/state'
    assert_success
    run_job srun -N1 -w node2 -K --container-name=global-$$ cat /state
    drop_progress_lines
    assert_success
    assert_output_matches '^[0-9]+$'
    [[ -d $cache/containers/global/global-$$ ]] || fail "no $cache/containers/global/global-$$"
    rm -rf "$cache/containers/global/global-$$" "$cache/containers/global/global-$$".{lock,run}
}

# name_script NAME: a path for a job script in the job user's home (salloc and sbatch read it on
# the host), removed by the caller.
name_script() { echo "$(job_user_home)/slipway-test${SLIPWAY_SANDBOX_INSTANCE:-0}-name-$1-$$.sh"; }

# Inside the container: w FILE waits up to 10 s for FILE (another step's or task's signal).
readonly WAIT_FOR='w() { i=0; while [ ! -e "$1" ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done; }'

# pyxis (its "attach to running container" test): a task of a running named container mounts a
# tmpfs at /mymnt, and `srun --overlap --container-name=NAME findmnt /mymnt` finds it, since
# pyxis's steps join the container's mount namespace. Here: the task's sibling sees it at once,
# the attaching step sees the mount and its file, a mount the attaching step makes reaches the
# running tasks, and a new instance (:no_exec) sees none of it (pyxis's no_exec test).
test_attaching_step_sees_the_mounts_the_containers_tasks_made() {
    local script
    script=$(name_script mymnt)
    cat >"$script" <<EOS
#!/bin/sh
srun -K -n1 --container-image=$BUSYBOX --container-name=mnt mkdir /mymnt /back || exit 1
srun -K -n2 --container-name=mnt --container-remap-root sh -c '$WAIT_FOR
    if [ "\$SLURM_LOCALID" = 0 ]; then
        mount -t tmpfs none /mymnt && echo made >/mymnt/f && touch /ready
    else
        w /ready; echo "sibling \$(cat /mymnt/f 2>&1)"
    fi
    w /ready2; echo "task \$SLURM_LOCALID back \$(cat /back/f 2>&1)"' &
sleep 2
srun --overlap -K -n1 --container-name=mnt --container-remap-root sh -c '$WAIT_FOR
    w /ready; echo "attached \$(cat /mymnt/f 2>&1) \$(grep -c " /mymnt " /proc/self/mountinfo)"
    mount -t tmpfs none /back && echo back >/back/f && touch /ready2'
srun --overlap -K -n1 --container-name=mnt:no_exec --container-remap-root \
    sh -c 'echo "instance \$(ls /mymnt | wc -l) \$(grep -c " /mymnt " /proc/self/mountinfo)"'
wait
EOS
    chown slwuser "$script"
    run_job salloc -N1 -n2 --time=2 sh "$script"
    rm -f "$script"
    assert_success
    assert_output_contains "sibling made"
    assert_output_contains "attached made 1"
    assert_equal 2 "$(grep -Ec '^task [01] back back$' <<<"$output")" "running tasks that saw the attaching step's mount"
    assert_output_contains "instance 0 0"
}

test_sbatch_attaching_step_sees_the_mounts_the_containers_tasks_made() {
    local script
    script=$(name_script bmymnt)
    cat >"$script" <<EOS
#!/bin/sh
#SBATCH --container-image=$BUSYBOX
#SBATCH --container-name=bmnt
#SBATCH --container-remap-root
#SBATCH -N1 --time=2
srun -K sh -c 'mkdir -p /mymnt && mount -t tmpfs none /mymnt && echo made >/mymnt/f && touch /ready; sleep 4' &
sleep 1
srun --overlap -K sh -c '$WAIT_FOR
    w /ready; echo "attached \$(cat /mymnt/f 2>&1)"'
wait
EOS
    run_batch "$script"
    rm -f "$script"
    assert_success
    assert_output_contains "attached made"
}

# While mounts are shared, each step's own binds stay its own: the PMIx server's directory of the
# running step (both tasks) and of an attaching step is each mounted once, in its own step only.
test_each_steps_pmix_directory_stays_its_own() {
    local script
    script=$(name_script pmix)
    local show='echo "$SLURM_STEP_ID [$(cut -d" " -f5 /proc/self/mountinfo | grep pmix | tr "\n" " ")] [$PMIX_SERVER_TMPDIR]"'
    cat >"$script" <<EOS
#!/bin/sh
srun --mpi=pmix -K -n2 --container-image=$BUSYBOX --container-name=pmx sh -c '$WAIT_FOR
    w /done; $show' &
sleep 2
srun --mpi=pmix --overlap -K -n1 --container-name=pmx sh -c '$show; touch /done'
wait
EOS
    chown slwuser "$script"
    run_job salloc -N1 -n2 --time=2 sh "$script"
    rm -f "$script"
    assert_success
    # "STEP [DIR ] [DIR/]": the one PMIx mount is the step's own directory.
    assert_equal 3 "$(grep -Ec '^[0-9]+ \[([^ ]+pmix[^ ]+) \] \[\1/\]$' <<<"$output")" "tasks that see only their own step's PMIx directory"
    assert_equal 2 "$(grep -E '^[0-9]+ \[' <<<"$output" | cut -d' ' -f1 | sort -u | wc -l)" "steps"
}

# pyxis leaves a running container's mounts as they are and says so: "ignoring --container-mounts
# when attaching to a running container".
test_attaching_step_ignores_its_container_mounts() {
    in_alloc 1 "
        srun -K --container-image=$BUSYBOX --container-name=mnts sleep 6 &
        sleep 2
        srun --overlap -K --container-name=mnts --container-mounts=/etc:/mnt/attach_test \
            sh -c '[ -e /mnt/attach_test/passwd ] && echo mounted || echo not-mounted'
        srun --overlap -K --container-name=mnts true
        wait"
    assert_success
    assert_output_matches "slipway: ignoring --container-mounts when attaching to a running container \('mnts' on node[0-9]+\)"
    assert_equal 1 "$(grep -c 'ignoring --container-mounts' <<<"$output")" "notices (none without the option)"
    assert_output_contains "not-mounted"
}

test_sbatch_attaching_step_ignores_its_container_mounts() {
    local script
    script=$(job_user_home)/slipway-test${SLIPWAY_SANDBOX_INSTANCE:-0}-name-mounts-$$.sh
    cat >"$script" <<EOS
#!/bin/sh
#SBATCH --container-image=$BUSYBOX
#SBATCH --container-name=bmnts
#SBATCH -N1 --time=2
srun -K sleep 5 &
sleep 2
srun --overlap -K --container-mounts=/etc:/mnt/attach_test sh -c '[ -e /mnt/attach_test/passwd ] && echo mounted || echo not-mounted'
wait
EOS
    run_batch "$script"
    rm -f "$script"
    echo "$output" >&2
    assert_success
    assert_output_contains "slipway: ignoring --container-mounts when attaching to a running container ('bmnts' on node"
    assert_output_contains "not-mounted"
}
