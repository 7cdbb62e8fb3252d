# SPDX-License-Identifier: Apache-2.0
# Copyright The Slipway authors
# GPUs in containers as pyxis+enroot users expect them (issue 27), end to end without a GPU: stand-in
# GPUs, driver libraries and nvidia-smi on node1 and node2 (gpu_standin.bash), a probe inside the
# container that loads libcuda.so.1 and libnvidia-ml.so.1 with dlopen (no LD_LIBRARY_PATH) and
# calls them. Through srun, #SBATCH, salloc and `slipway run`: the image's or the job's
# NVIDIA_VISIBLE_DEVICES / NVIDIA_DRIVER_CAPABILITIES / NVIDIA_REQUIRE_* decide which devices,
# libraries and tools appear; --dl-gpus splits by local rank or turns them off; CUDA forward
# compatibility; the one-line errors for a missing nvidia-uvm or driver library.

source "$REPO_DIR/tests/cluster/gpu_standin.bash"

setup_file() {
    require_sandbox
    require_plugin
    gpu_standin_build
    CUDA_IMG=$GPU_DIR/img-cuda PLAIN_IMG=$GPU_DIR/img-plain
    local bin=${SLIPWAY_BUILD_DIR:-$REPO_DIR/build}/launcher/slipway
    [[ -x $bin ]] || fail "slipway is not built ($bin)"
    install -m 0755 -o slwuser "$bin" "$(job_user_home)/slipway"
    gpu_standin_install 1 2
}

teardown_file() {
    local i
    for i in 1 2 3 4; do gpu_standin_remove "$i"; done
    rm -rf "$GPU_DIR" "$(job_user_home)/slipway"
}

# What the two stand-in GPUs of node1 look like from inside, with the driver's compute + utility.
readonly ALL2='devices nvidia-caps,nvidia-uvm,nvidia-uvm-tools,nvidia0,nvidia1,nvidiactl'
readonly LIBCUDA="cuda /usr/lib/x86_64-linux-gnu/libcuda.so.1 node 12020"
readonly LIBNVML="nvml /usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1 $GPU_DRIVER"

# The output without srun's own lines (a job may wait a moment for the previous one to finish).
task_output() { printf '%s\n' "${lines[@]}" | grep -v '^srun: ' || true; }

# probe [SRUN ARGS...]: the probe under `env -u LD_LIBRARY_PATH` in one task on node1.
probe() { run_job srun -N1 -w node1 -K "$@" env -u LD_LIBRARY_PATH gpu-probe; }

test_image_env_gives_the_step_gpus_driver_and_tools() {
    probe --container-image="$CUDA_IMG"
    assert_success
    assert_equal "$ALL2
$LIBCUDA 2
$LIBNVML 2
env CUDA_VISIBLE_DEVICES=0,1
env NVIDIA_VISIBLE_DEVICES=GPU-standin-0,GPU-standin-1
env LD_LIBRARY_PATH=<unset>" "$(task_output)"
    # The image's LD_LIBRARY_PATH (NGC's /usr/local/nvidia/lib64) stays and does not get in the way.
    run_job srun -N1 -w node1 -K --container-image="$CUDA_IMG" sh -c 'echo "$LD_LIBRARY_PATH"; gpu-probe | grep ^cuda; nvidia-smi -L'
    assert_success
    assert_equal "/usr/local/nvidia/lib:/usr/local/nvidia/lib64
$LIBCUDA 2
GPU 0: Stand-in GPU (UUID: GPU-standin-0)
GPU 1: Stand-in GPU (UUID: GPU-standin-1)" "$(task_output)"
}

test_dl_explain_says_why() {
    run_job srun -N1 -w node1 -K --container-image="$CUDA_IMG" --dl-explain true
    assert_success
    assert_output_contains "slipway-explain: task 0: gpus 0,1 of all 2 GPUs of the node (no GRES)"
    assert_output_contains "slipway-explain: task 0: driver $GPU_DRIVER (CUDA 12.2), capabilities compute,utility, libraries in /usr/lib/x86_64-linux-gnu"
    assert_output_contains "slipway-explain: task 0: bind $GPU_DIR/driver/lib/libcuda.so.1 -> /usr/lib/x86_64-linux-gnu/libcuda.so.1 (ro): NVIDIA driver library"
    run_job srun -N1 -w node1 -K --container-image="$PLAIN_IMG" --dl-explain true
    assert_success
    assert_output_contains "slipway-explain: task 0: gpus: NVIDIA_VISIBLE_DEVICES is unset or void: no GPU (as with pyxis+enroot)"
}

test_job_environment_decides_for_a_plain_image() {
    probe --container-image="$PLAIN_IMG"
    assert_success
    assert_output_contains "devices none"
    assert_output_contains "cuda missing: libcuda.so.1: cannot open shared object file"
    # The job's NVIDIA_VISIBLE_DEVICES, as with pyxis; the default capability is utility only.
    run_job env NVIDIA_VISIBLE_DEVICES=all srun -N1 -w node1 -K --container-image="$PLAIN_IMG" gpu-probe
    assert_success
    assert_output_contains "$ALL2"
    assert_output_contains "cuda missing: libcuda.so.1"
    assert_output_contains "$LIBNVML 2"
    # The job's value wins over the image's: void turns the image's 'all' off.
    run_job env NVIDIA_VISIBLE_DEVICES=void srun -N1 -w node1 -K --container-image="$CUDA_IMG" gpu-probe
    assert_success
    assert_output_contains "devices none"
    assert_output_contains "cuda missing"
}

test_visible_devices_lists_none_and_capabilities() {
    run_job env NVIDIA_VISIBLE_DEVICES=GPU-standin-1 srun -N1 -w node1 -K --container-image="$CUDA_IMG" gpu-probe
    assert_success
    assert_output_contains "devices nvidia-caps,nvidia-uvm,nvidia-uvm-tools,nvidia1,nvidiactl"
    assert_output_contains "$LIBCUDA 1"
    assert_output_contains "env CUDA_VISIBLE_DEVICES=0"
    run_job env NVIDIA_VISIBLE_DEVICES=none srun -N1 -w node1 -K --container-image="$CUDA_IMG" gpu-probe
    assert_success
    assert_output_contains "devices nvidia-caps,nvidia-uvm,nvidia-uvm-tools,nvidiactl"
    assert_output_contains "$LIBCUDA 0"
    run_job env NVIDIA_DRIVER_CAPABILITIES=utility srun -N1 -w node1 -K --container-image="$CUDA_IMG" \
        sh -c 'gpu-probe; nvidia-smi -L | wc -l'
    assert_success
    assert_output_contains "cuda missing"
    assert_output_contains "$LIBNVML 2"
    assert_equal 2 "${lines[-1]}" "nvidia-smi -L lines"
    run_job env NVIDIA_DRIVER_CAPABILITIES=compute,cuda srun -N1 -w node1 -K --container-image="$CUDA_IMG" true
    assert_failure
    assert_output_contains "image '$CUDA_IMG': NVIDIA_DRIVER_CAPABILITIES='compute,cuda' names unknown capability 'cuda'"
    run_job env NVIDIA_VISIBLE_DEVICES=3 srun -N1 -w node1 -K --container-image="$CUDA_IMG" true
    assert_failure
    assert_output_contains "NVIDIA_VISIBLE_DEVICES=3 (the job's environment) names GPU 3, which node1 does not have (the step's GPUs: all 2 GPUs of the node (no GRES))"
}

test_requirements_and_forward_compatibility() {
    probe --container-image="$GPU_DIR/img-newer"
    assert_failure
    assert_output_contains "image '$GPU_DIR/img-newer' requires NVIDIA_REQUIRE_CUDA=cuda>=12.4 brand=tesla,driver>=470,driver<471, but node node1's NVIDIA driver is $GPU_DRIVER (CUDA 12.2); use an image built for this driver's CUDA"
    run_job env NVIDIA_DISABLE_REQUIRE=1 srun -N1 -w node1 -K --container-image="$GPU_DIR/img-newer" gpu-probe
    assert_success
    assert_output_contains "$LIBCUDA 2"
    # An image whose own ld.so cache names a stub libcuda.so.1 still gets the node's driver.
    probe --container-image="$GPU_DIR/img-stub"
    assert_success
    assert_output_contains "cuda /usr/local/cuda/lib64/stubs/libcuda.so.1 node 12020 2"
    # The image's cuda-compat libcuda (driver 550, CUDA 12.4) replaces the node's older one.
    probe --container-image="$GPU_DIR/img-compat"
    assert_success
    assert_output_contains "cuda /usr/lib/x86_64-linux-gnu/libcuda.so.1 compat 12040 2"
    assert_output_contains "$LIBNVML 2"
}

test_dl_gpus_splits_by_local_rank_and_none_turns_off() {
    run_job srun -N1 -w node1 -n2 -K --container-image="$PLAIN_IMG" --dl-gpus=1 \
        sh -c 'echo "$SLURM_LOCALID $(gpu-probe | grep -e ^devices -e ^cuda -e CUDA_VISIBLE | tr "\n" " ")"'
    assert_success
    assert_equal "0 devices nvidia-caps,nvidia-uvm,nvidia-uvm-tools,nvidia0,nvidiactl $LIBCUDA 1 env CUDA_VISIBLE_DEVICES=0 
1 devices nvidia-caps,nvidia-uvm,nvidia-uvm-tools,nvidia1,nvidiactl $LIBCUDA 1 env CUDA_VISIBLE_DEVICES=0 " \
        "$(printf '%s\n' "${lines[@]}" | grep devices | sort)"
    probe --container-image="$CUDA_IMG" --dl-gpus=none
    assert_success
    assert_output_contains "devices none"
    assert_output_contains "cuda missing"
    run_job srun -N1 -w node1 -n3 -K --container-image="$CUDA_IMG" --dl-gpus=1 true
    assert_failure
    assert_output_contains "--dl-gpus=1: 3 tasks need 3 GPUs, but there are 2 in the step's GPUs on node1"
}

# Mounts made in a running container reach the steps attached to it (test_opt_name.bash), but
# each task's GPUs stay its own: the two tasks of a named container see one GPU each, and a step
# that attaches meanwhile sees neither (nor an empty mount point left by them).
test_attaching_step_sees_no_other_tasks_gpus() {
    local script w='w() { i=0; while [ ! -e "$1" ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done; }'
    local show='$(ls /dev | grep -x "nvidia[0-9]*" | tr "\n" " ")'
    script=$(job_user_home)/gpu-attach-$$.sh
    cat >"$script" <<EOS
#!/bin/sh
srun -K -n2 --container-image=$PLAIN_IMG --container-name=gpus --dl-gpus=1 sh -c '$w
    w /done; echo "task \$SLURM_LOCALID $show"' &
sleep 2
srun --overlap -K -n1 --container-name=gpus sh -c 'echo "attached $show"; touch /done'
wait
EOS
    chown slwuser "$script"
    run_job salloc -N1 -n2 -w node1 --time=2 sh "$script"
    rm -f "$script"
    assert_success
    assert_equal "attached 
task 0 nvidia0 
task 1 nvidia1 " "$(grep -E '^(attached|task [01])' <<<"$output" | sort)"
}

test_sbatch_and_salloc() {
    local script
    script=$(job_user_home)/gpu-batch-$$.sh
    printf '#!/bin/bash\n#SBATCH -N1 -w node1\n#SBATCH --container-image=%s\nsrun -K env -u LD_LIBRARY_PATH gpu-probe\n' \
        "$CUDA_IMG" >"$script"
    chmod a+r "$script"
    run_batch "$script"
    rm -f "$script"
    assert_success
    assert_output_contains "$ALL2"
    assert_output_contains "$LIBCUDA 2"
    run_job salloc -N1 -n2 -w node1 --time=2 --container-image="$CUDA_IMG" srun -K -n2 --dl-gpus=1 \
        sh -c 'gpu-probe | grep ^cuda'
    assert_success
    assert_equal "$LIBCUDA 1
$LIBCUDA 1" "$(printf '%s\n' "${lines[@]}" | grep ^cuda)"
}

test_slipway_run_without_the_plugin() {
    run_job srun -N1 -w node1 -K ./slipway run --container-image="$CUDA_IMG" -- env -u LD_LIBRARY_PATH gpu-probe
    assert_success
    assert_output_contains "$ALL2"
    assert_output_contains "$LIBCUDA 2"
    assert_output_contains "$LIBNVML 2"
    run_job srun -N1 -w node1 -n2 -K ./slipway run --container-image="$PLAIN_IMG" --dl-gpus=1 -- \
        sh -c 'echo "$SLURM_LOCALID $(gpu-probe | grep ^devices)"'
    assert_success
    assert_equal "0 devices nvidia-caps,nvidia-uvm,nvidia-uvm-tools,nvidia0,nvidiactl
1 devices nvidia-caps,nvidia-uvm,nvidia-uvm-tools,nvidia1,nvidiactl" "$(printf '%s\n' "${lines[@]}" | grep devices | sort)"
    run_job srun -N1 -w node1 -K ./slipway run --container-image="$GPU_DIR/img-newer" -- true
    assert_failure
    assert_output_contains "requires NVIDIA_REQUIRE_CUDA=cuda>=12.4"
}

test_missing_uvm_and_driver_are_one_line_with_the_fix() {
    gpu_standin_install 2 1 no-uvm
    run_job srun -N1 -w node2 -K --container-image="$CUDA_IMG" true
    assert_failure
    assert_output_contains "node node2 has no /dev/nvidia-uvm, without which CUDA cannot start: an admin loads it with 'nvidia-modprobe -u -c=0'"
    run_job srun -N1 -w node2 -K ./slipway doctor
    assert_output_contains "FAIL  gpus: 1 GPU(s): /dev/nvidia0, but /dev/nvidia-uvm is missing"
    gpu_standin_remove 2
    gpu_standin_install 2 1 no-driver
    run_job srun -N1 -w node2 -K --container-image="$CUDA_IMG" true
    assert_failure
    assert_output_contains "node node2 has NVIDIA GPUs but no libcuda.so.1 in its ld.so cache: install the NVIDIA driver's user-space libraries and run ldconfig"
    gpu_standin_remove 2
    run_job srun -N1 -w node1 -K ./slipway doctor
    assert_output_contains "ok    gpus: 2 GPU(s): /dev/nvidia0-1, driver $GPU_DRIVER (CUDA 12.2), libcuda.so.1 -> $GPU_DIR/driver/lib/libcuda.so.1"
}

# Last: restarts the sandbox's Slurm twice (the nodes' stand-ins go with their slurmd).
test_site_default_dl_gpus_none() {
    local args=${SLIPWAY_PLUGIN_ARGS:-}
    SLIPWAY_PLUGIN_ARGS="${args:+$args }dl_gpus=none" require_sandbox
    gpu_standin_install 1 2
    probe --container-image="$CUDA_IMG"
    assert_success
    assert_output_contains "devices none"
    probe --container-image="$CUDA_IMG" --dl-gpus=1
    assert_success
    assert_output_contains "devices nvidia-caps,nvidia-uvm,nvidia-uvm-tools,nvidia0,nvidiactl"
    SLIPWAY_PLUGIN_ARGS=$args require_sandbox
    gpu_standin_install 1 2
}
