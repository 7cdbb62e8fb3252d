# SPDX-License-Identifier: Apache-2.0
# Copyright The Slipway authors
# libtrain's Python unit suites (tests/unit/libtrain/*.py, which CTest runs on the host's PyTorch
# 1.13) on every other PyTorch the test images carry (issue 26): each suite runs as one task
# through the plugin in `torch-trixie` (Debian 13, PyTorch 2.6) and `torch-forky` (Debian testing,
# the newest), starting its own ranks on that one node as it does under CTest. A forky failure
# listed in FORKY_KNOWN is reported as a skip with its reason, only while the same suite passes
# on 2.6 in this run; listed and passing, it fails, so the list cannot go stale.

readonly SUITES="test_python.py test_env.py test_torch_backend.py test_torch_hvd.py"
# The reason of each suite known to fail on forky's PyTorch, by suite.
declare -A FORKY_KNOWN=()

setup_file() {
    require_sandbox
    require_plugin
    "$SANDBOX" images torch-trixie torch-forky >/dev/null 2>&1 \
        || fail "slipway-sandbox images torch-trixie torch-forky failed (run it to see why)"
    # The nodes see the job user's home, not this checkout (it may be unreadable to that user).
    SUITE_DIR=$(job_user_home)/torch-suites
    install -d -m 0755 -o slwuser "$SUITE_DIR"
    local suite
    for suite in $SUITES forked_ranks.py; do  # forked_ranks.py: the suites' rank starter
        install -m 0644 -o slwuser "$REPO_DIR/tests/unit/libtrain/$suite" "$SUITE_DIR/"
    done
    PASSED_ON_2_6=$(mktemp)
    chmod 0644 "$PASSED_ON_2_6"
    # The first start imports the image (1.5 GiB) on the node: done here, so that the tests'
    # own time limits measure the suites, not the pull.
    JOB_TIMEOUT=300
    local image
    for image in torch-trixie torch-forky; do
        run_job srun -N1 -n1 -K --container-image="$(image_ref "$image")" true
        ((status == 0)) || fail "the $image image does not start: $output"
    done
}

teardown_file() { rm -rf "$SUITE_DIR" "$PASSED_ON_2_6"; }

# The suites give their ranks RANK, WORLD_SIZE and MASTER_* themselves: the step's own variables
# (Slurm's, PMIx's, and those the plugin sets for torch.distributed) must not reach libtrain's
# bootstrap. The image's Env (USE_LIBUV=0 in these) stays, as in any container.
# shellcheck disable=SC2016  # expanded by the container's shell
readonly WITHOUT_STEP_ENV='for v in $(env | sed -n "s/^\(SLURM[A-Z_]*\|SRUN[A-Z_]*\|PMIX[A-Z_]*\|PMI_[A-Z_]*\)=.*/\1/p"); do
    unset "$v"
done
unset RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE NODE_RANK MASTER_ADDR MASTER_PORT
exec python3 "$@"'

# run_suite IMAGE SUITE: SUITE in IMAGE on one node; sets $status and $output.
run_suite() {
    JOB_TIMEOUT=330  # test_torch_hvd.py's own limit under CTest is 300 s
    run_job srun -N1 -n1 --mpi=none -K --container-image="$(image_ref "$1")" \
        --container-mounts="$SUITE_DIR:/suites:ro" sh -c "$WITHOUT_STEP_ENV" sh "/suites/$2"
}

# suite_on_2_6 SUITE: passes on PyTorch 2.6; remembered for forky's known failures.
suite_on_2_6() {
    run_suite torch-trixie "$1"
    assert_success
    echo "$1" >>"$PASSED_ON_2_6"
}

# suite_on_forky SUITE: passes on forky's PyTorch, or fails as FORKY_KNOWN says while 2.6 passes.
suite_on_forky() {
    local known=${FORKY_KNOWN[$1]:-}
    run_suite torch-forky "$1"
    if [[ -z $known ]]; then
        assert_success
    elif ((status == 0)); then
        fail "$1 passes on forky now: remove it from FORKY_KNOWN"
    elif grep -qx "$1" "$PASSED_ON_2_6"; then
        echo "$output" >&2
        skip "known failure on forky's PyTorch: $known"
    else
        fail "$1 fails on forky and did not pass on 2.6 in this run:"$'\n'"$output"
    fi
}

test_python_suite_on_pytorch_2_6() { suite_on_2_6 test_python.py; }
test_env_suite_on_pytorch_2_6() { suite_on_2_6 test_env.py; }
test_torch_backend_suite_on_pytorch_2_6() { suite_on_2_6 test_torch_backend.py; }
test_torch_hvd_suite_on_pytorch_2_6() { suite_on_2_6 test_torch_hvd.py; }
test_python_suite_on_forky() { suite_on_forky test_python.py; }
test_env_suite_on_forky() { suite_on_forky test_env.py; }
test_torch_backend_suite_on_forky() { suite_on_forky test_torch_backend.py; }
test_torch_hvd_suite_on_forky() { suite_on_forky test_torch_hvd.py; }
