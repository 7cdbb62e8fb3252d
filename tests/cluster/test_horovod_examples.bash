# SPDX-License-Identifier: Apache-2.0
# Copyright The Slipway authors
# Horovod's own PyTorch examples, not one character changed, under LIBTRAIN_HOROVOD=1 (issue 26):
# pytorch_mnist.py trains one epoch and pytorch_synthetic_benchmark.py runs ResNet-18 (with and
# without --fp16-allreduce), on 4 nodes x 2 tasks through the plugin, on PyTorch 1.13 (`torch`)
# and 2.6 (`torch-trixie`). We do not ship Horovod's code: point SLIPWAY_HOROVOD_EXAMPLES at a
# Horovod checkout's examples/pytorch (or any directory holding those two files); without it each
# test is reported skipped. There is no network here, so MNIST is stood in for by Fashion-MNIST
# (Debian's dataset-fashion-mnist: the same file format, 60000 + 10000 28x28 images, 10 classes),
# laid out where torchvision's MNIST looks first, so download=True finds it and downloads nothing.

readonly EIGHT="-N4 --ntasks-per-node=2"
readonly FASHION=/usr/share/datasets/fashion-mnist

examples_dir() { printf '%s' "${SLIPWAY_HOROVOD_EXAMPLES:-}"; }

have_examples() {
    local dir
    dir=$(examples_dir)
    [[ -n $dir && -f $dir/pytorch_mnist.py && -f $dir/pytorch_synthetic_benchmark.py ]]
}

setup_file() {
    have_examples || return 0
    require_sandbox
    require_plugin
    "$SANDBOX" images torch torch-trixie >/dev/null 2>&1 || fail "slipway-sandbox images torch torch-trixie failed"
    [[ -f $FASHION/train-images-idx3-ubyte.gz ]] || fail "no $FASHION (apt-get install dataset-fashion-mnist)"
    WORK=$(job_user_home)/horovod-examples
    rm -rf "$WORK"
    install -d -m 0755 -o slwuser "$WORK" "$WORK/data/MNIST/raw"
    install -m 0644 -o slwuser "$(examples_dir)/pytorch_mnist.py" "$(examples_dir)/pytorch_synthetic_benchmark.py" "$WORK/"
    local f
    for f in train-images-idx3-ubyte train-labels-idx1-ubyte t10k-images-idx3-ubyte t10k-labels-idx1-ubyte; do
        gunzip -c "$FASHION/$f.gz" >"$WORK/data/MNIST/raw/$f"
    done
    chown -R slwuser "$WORK/data"
    export SLIPWAY_INSECURE_REGISTRIES=$SANDBOX_NET.1:5000
    JOB_TIMEOUT=300  # the first start imports the image on every node
    local image
    for image in torch torch-trixie; do
        run_job srun -N4 --ntasks-per-node=1 -K --container-image="$(image_ref "$image")" true
        ((status == 0)) || fail "the $image image does not start: $output"
    done
}

teardown_file() {
    have_examples || return 0
    rm -rf "$WORK" "$(job_user_home)/.horovod_lock"
}

setup() { have_examples || skip "SLIPWAY_HOROVOD_EXAMPLES is not a directory with Horovod's pytorch_mnist.py and pytorch_synthetic_benchmark.py"; }

# run_example IMAGE SCRIPT ARGS...: SCRIPT from Horovod, unchanged, on 8 ranks in IMAGE.
run_example() {
    local image=$1 script=$2
    shift 2
    cmp -s "$(examples_dir)/$script" "$WORK/$script" || fail "$script differs from Horovod's"
    JOB_TIMEOUT=300
    run_job env LIBTRAIN_HOROVOD=1 LIBTRAIN_TIMEOUT=60 srun --mpi=pmix $EIGHT -K \
        --container-image="$(image_ref "$image")" --container-mounts="$WORK:/hvd" --container-workdir=/hvd \
        python3 "/hvd/$script" "$@"
    assert_success
    assert_output_not_contains "LIBTRAIN_HOROVOD=1 ignored"
}

# One epoch, then Horovod's test pass: the accuracy rank 0 prints, averaged over the 8 ranks.
mnist_trains() {
    run_example "$1" pytorch_mnist.py --epochs 1 --data-dir /hvd/data --no-cuda
    local accuracy
    accuracy=$(sed -n 's/^Test set: Average loss: [0-9.]*, Accuracy: \([0-9.]*\)%.*/\1/p' <<<"$output")
    [[ -n $accuracy ]] || fail "no 'Test set: ... Accuracy' line"
    assert_equal 1 "$(grep -c '^Test set:' <<<"$output")" "test lines (rank 0 prints it)"
    awk -v a="$accuracy" 'BEGIN { exit !(a >= 60) }' || fail "accuracy $accuracy% after one epoch, want >= 60%"
    assert_output_not_contains "Downloading"
}

synthetic_runs() {
    local image=$1
    shift
    run_example "$image" pytorch_synthetic_benchmark.py --model resnet18 --batch-size 2 --no-cuda \
        --num-warmup-batches 1 --num-batches-per-iter 1 --num-iters 2 "$@"
    assert_output_contains "Number of CPUs: 8"
    assert_output_matches "Total img/sec on 8 CPU\(s\): [0-9.]+ \+-[0-9.]+"
}

test_pytorch_mnist_unchanged_on_pytorch_1_13() { mnist_trains torch; }
test_pytorch_mnist_unchanged_on_pytorch_2_6() { mnist_trains torch-trixie; }
test_synthetic_benchmark_unchanged_on_pytorch_1_13() { synthetic_runs torch --fp16-allreduce; }
test_synthetic_benchmark_unchanged_on_pytorch_2_6() { synthetic_runs torch-trixie; }
