#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Copyright The Slipway authors
# Runs the whole Slipway test suite on a Debian 12 machine, as root: installs what it needs, builds,
# runs the unit tests (CTest labels unit, userns, gpu, gpu-standin), runs each fuzz target for 10 s
# (tests/fuzz, clang; skipped without it), runs the unit tests again under ASan+UBSan and
# libtrain's under TSan (tests/sanitizers), builds the Debian 12 and 13 packages and the EL9
# RPMs and lints each, runs the integration tests on the local Slurm sandbox (tests/cluster) on
# Debian 12's Slurm 22.05 and again on Debian 13's Slurm 24.11 (contrib/release-root), checks the
# plugin against forky's Slurm 26.05, brings the sandbox down, and exits non-zero on any failure.
# Ends with each step's time, the time spent waiting for release roots and images, and the 20
# slowest tests. Safe to run twice. Environment: SLIPWAY_BUILD_DIR (default <repo>/build).
#
#   run-tests.sh [--only STEP[,STEP...]]
#
# --only runs the installation, the build and the steps named: unit, fuzz, sanitize, packages,
# cluster (Slurm 22.05), 24.11, 26.05; and waits only for the release roots and images they need.
set -uo pipefail

readonly ALL_STEPS="unit fuzz sanitize packages cluster 24.11 26.05"
only="" only_given=false
while (($# > 0)); do
  case $1 in
    --only) only=${2:-} only_given=true; shift; (($# == 0)) || shift ;;
    --only=*) only=${1#--only=} only_given=true; shift ;;
    -h | --help) sed -n '4,17s/^# \{0,1\}//p' "$0"; exit 0 ;;
    *) echo "run-tests.sh: unknown argument '$1' (usage: run-tests.sh [--only STEP[,STEP...]])" >&2; exit 2 ;;
  esac
done
for s in ${only//,/ }; do
  [[ " $ALL_STEPS " == *" $s "* ]] \
    || { echo "run-tests.sh: --only: no step '$s' (the steps: ${ALL_STEPS// /, })" >&2; exit 2; }
done
! $only_given || [[ -n ${only//,/} ]] || { echo "run-tests.sh: --only needs a step (the steps: ${ALL_STEPS// /, })" >&2; exit 2; }
# want STEP: true when STEP is to run.
want() { [[ -z $only || ",$only," == *",$1,"* ]]; }

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${SLIPWAY_BUILD_DIR:-$repo/build}
sandbox="$repo/contrib/sandbox/slipway-sandbox"
passed=0 failed=0 skipped=0

# step TITLE: starts a step; each step's wall time is listed at the end (CI shows only the tail).
step_names=() step_secs=() step_t0=$SECONDS
step_done() {
  ((${#step_names[@]} == 0)) || step_secs+=($((SECONDS - step_t0)))
  step_t0=$SECONDS
}
step() {
  step_done
  step_names+=("$*")
  printf '\n=== %s\n' "$*"
}

# Adds the counts from one runner's output: CTest's per-test lines, or a closing
# "N passed, N failed[, N skipped]" line from tests/cluster/run.bash.
count_ctest() {
  local log=$1
  passed=$((passed + $(grep -cE 'Test +#[0-9]+: .* Passed' "$log")))
  skipped=$((skipped + $(grep -cE 'Test +#[0-9]+: .*\*\*\*(Skipped|Not Run \(Disabled\))' "$log")))
  failed=$((failed + $(grep -E 'Test +#[0-9]+: ' "$log" | grep -vE ' Passed|\*\*\*Skipped|Not Run \(Disabled\)' -c)))
}
count_cluster() {
  local line
  line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$1" | tail -n 1)
  if [[ -z $line ]]; then failed=$((failed + 1)); return; fi
  read -r p _ f _ s _ <<<"${line//,/}"
  passed=$((passed + p)) failed=$((failed + f)) skipped=$((skipped + ${s:-0}))
}

# Seconds spent waiting for release roots and images (the rest of a step is testing).
waited=0
# waiting COMMAND...: runs COMMAND, its time counted in $waited.
waiting() {
  local t0=$SECONDS rc=0
  "$@" || rc=$?
  waited=$((waited + SECONDS - t0))
  return $rc
}

step "installing packages"
"$repo/contrib/install-deps.sh" || exit 1

# What the steps chosen need: the test images (the cluster steps) are built in the Debian 13 and
# forky roots too (torch-trixie, torch-forky), the Debian 13 packages and 24.11 need trixie's root,
# 26.05 forky's.
need_images=false need_trixie=false need_forky=false
if want cluster || want 24.11; then need_images=true need_trixie=true need_forky=true; fi
if want packages; then need_trixie=true; fi
if want 26.05; then need_trixie=true need_forky=true; fi  # 26.05 checks 24.11 refuses 22.05's plugin

# The Debian 13 and forky roots (contrib/release-root; cached) install from Debian's archive while
# the host builds and tests: mostly downloads and dpkg. Each later step waits for its own.
release_root="$repo/contrib/release-root"
roots_log=$(mktemp -d)
for release in trixie forky; do
  need=need_$release
  ${!need} || continue
  "$release_root" path "$release" >"$roots_log/$release" 2>&1 &
  eval "root_pid_$release=$!"
done
# wait_root RELEASE: true once RELEASE's root is installed; its log otherwise. The first call
# waits for the installation and keeps its status.
wait_root() {
  local pid_var=root_pid_$1 status_var=root_status_$1
  if [[ -z ${!status_var:-} ]]; then
    waiting wait "${!pid_var}"
    printf -v "$status_var" '%s' $?
  fi
  ((${!status_var} == 0)) && return 0
  cat "$roots_log/$1"
  return 1
}

# The test images (contrib/images, each cached by its recipe) build in the background from here
# on, while the build, unit, fuzz, sanitizer and package steps run: 25-35 minutes cold on 2
# cores, mostly debootstrap, apt and compression, and the cluster steps wait for them (on a
# fresh machine they were the longest path to the cluster step, so they start first). They
# start once both release roots are in (release-root path waits for an installation in
# progress): the roots and the Debian 13 and forky images share each release's download folder.
# `slipway-sandbox images` then only pushes, and builds (and reports) whatever failed here. The
# unit tests run beside them, as the sanitizers' always did: their timeouts allow for it
# (cmake/SlipwayTesting.cmake).
images_log=$roots_log/images
if $need_images; then
  mapfile -t image_names < <(cd "$repo/contrib/images" && ls -d -- */build | cut -d/ -f1)
  (
    "$release_root" path trixie >/dev/null; "$release_root" path forky >/dev/null
    "$repo/contrib/images/build-image" "${image_names[@]}"
  ) >"$images_log" 2>&1 &
  images_pid=$!
fi

# Every build below (this one, the fuzz, ASan and TSan trees, the packages) goes through ccache:
# a second run on the same machine, CI's included, compiles only what changed. Paths are hashed
# relative to the checkout, so a clone in another folder hits the same objects.
if command -v ccache >/dev/null; then
  export CMAKE_C_COMPILER_LAUNCHER=ccache CMAKE_CXX_COMPILER_LAUNCHER=ccache
  export CCACHE_BASEDIR=$repo CCACHE_NOHASHDIR=1
fi

step "building in $build"
cmake -S "$repo" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null || exit 1
cmake --build "$build" -j"$(nproc)" || exit 1

# Each runner's log stays in $roots_log until the end, for the list of the slowest tests.
unit_log=$roots_log/unit.log
if want unit; then
  step "unit tests"
  ctest --test-dir "$build" --output-on-failure --timeout 300 -j"$(nproc)" 2>&1 | tee "$unit_log"
  count_ctest "$unit_log"
fi

# Each libFuzzer target for 10 s (tests/fuzz/run.sh, its own clang build in BUILD-fuzz): one
# "ok"/"FAIL" line per target, each counted; exit 3 means clang or libFuzzer is missing.
if want fuzz; then
  step "fuzz targets, 10 s each"
  fuzz_log=$(mktemp)
  SLIPWAY_FUZZ_BUILD_DIR="$build-fuzz" "$repo/tests/fuzz/run.sh" 10 2>&1 | tee "$fuzz_log"
  fuzz_rc=${PIPESTATUS[0]}
  if ((fuzz_rc == 3)); then
    skipped=$((skipped + 1))
  else
    passed=$((passed + $(grep -c '^ok   fuzz_' "$fuzz_log")))
    failed=$((failed + $(grep -c '^FAIL fuzz_' "$fuzz_log")))
    if ((fuzz_rc != 0)) && ! grep -q '^FAIL fuzz_' "$fuzz_log"; then
      echo "FAIL tests/fuzz/run.sh (exit $fuzz_rc: build failed)"; failed=$((failed + 1))
    fi
  fi
  rm -f "$fuzz_log"
fi

# The Check unit tests again under ASan+UBSan (in the fuzz step's tree, whose libraries have
# them: only the tests are compiled) and libtrain's under TSan (tests/sanitizers/run.sh): one
# "ok"/"FAIL" line per sanitizer, each counted. A sanitizer report fails its test.
if want sanitize; then
  step "unit tests under ASan+UBSan and TSan"
  san_log=$(mktemp)
  SLIPWAY_FUZZ_BUILD_DIR="$build-fuzz" SLIPWAY_ASAN_BUILD_DIR="$build-asan" \
    SLIPWAY_TSAN_BUILD_DIR="$build-tsan" "$repo/tests/sanitizers/run.sh" 2>&1 | tee "$san_log"
  san_rc=${PIPESTATUS[0]}
  passed=$((passed + $(grep -c '^ok   sanitize ' "$san_log")))
  failed=$((failed + $(grep -c '^FAIL sanitize ' "$san_log")))
  if ((san_rc != 0)) && ! grep -q '^FAIL sanitize ' "$san_log"; then
    echo "FAIL tests/sanitizers/run.sh (exit $san_rc)"; failed=$((failed + 1))
  fi
  rm -f "$san_log"
fi

# One test per package: contrib/make-debs.sh builds the Debian 12 packages here and the Debian 13
# ones against Debian 13's Slurm inside contrib/release-root's trixie root (in BUILD-trixie,
# without the tests, with ccache); each release's lintian must report no error (E:) on any of its
# packages. tests/cluster/test_packages.bash installs the Debian 12 files (SLIPWAY_DEBS_DIR).
# lint_debs LABEL DIR [COMMAND PREFIX...]: one lintian run over DIR's packages, a result for each.
lint_debs() {
  local label=$1 dir=$2 deb name lint
  shift 2
  lint=$("$@" lintian "$dir"/*.deb 2>&1 | grep -v 'running with root privileges')
  [[ -z $lint ]] || printf '%s\n' "$lint"
  for deb in "$dir"/*.deb; do
    name=$(basename "$deb")
    if grep -q "^E: ${name%%_*}[: ]" <<<"$lint"; then
      echo "FAIL lintian $label $name"; failed=$((failed + 1))
    else
      echo "ok   lintian $label $name"; passed=$((passed + 1))
    fi
  done
}
debs_dir="" debs_log=""  # the Debian 12 packages, for test_packages (it builds its own without them)
if want packages; then
  step "Debian packages (12 and 13) and lintian"
  debs_dir=$(mktemp -d /tmp/slipway-debs.XXXXXX)
  debs13_dir=$(mktemp -d /tmp/slipway-debs13.XXXXXX)
  debs_log=$(mktemp)
  if SLIPWAY_BUILD_DIR="$build" "$repo/contrib/make-debs.sh" "$debs_dir" >/dev/null 2>"$debs_log"; then
    grep '^make-debs:' "$debs_log"
    lint_debs "Debian 12" "$debs_dir"
  else
    tail -n 40 "$debs_log"
    echo "FAIL contrib/make-debs.sh $debs_dir"
    failed=$((failed + 1))
  fi
  if wait_root trixie && SLIPWAY_BUILD_DIR="$build-trixie" "$repo/contrib/make-debs.sh" --release trixie "$debs13_dir" >/dev/null 2>"$debs_log"; then
    grep '^make-debs:' "$debs_log"
    lint_debs "Debian 13" "$debs13_dir" "$repo/contrib/release-root" enter trixie
  else
    tail -n 40 "$debs_log"
    echo "FAIL contrib/make-debs.sh --release trixie $debs13_dir"
    failed=$((failed + 1))
  fi

  # The EL9 RPMs of contrib/rpm/slipway.spec, built on Debian (contrib/make-rpms.sh
  # --check-on-debian: no EL9 system here) and linted: rpmlint must report no error on the spec or
  # any package. A spec that does not parse, build, or list every installed file fails here.
  step "EL9 RPMs from contrib/rpm/slipway.spec, and rpmlint"
  rpms_dir=$(mktemp -d /tmp/slipway-rpms.XXXXXX)
  if "$repo/contrib/make-rpms.sh" --check-on-debian "$rpms_dir" >/dev/null 2>"$debs_log"; then
    echo "ok   rpmbuild -ba contrib/rpm/slipway.spec"; passed=$((passed + 1))
    # One rpmlint run (it takes seconds to start) over the spec and the RPMs; exit status 64: errors.
    if lint=$(rpmlint -c "$repo/contrib/rpm/rpmlint.toml" "$repo/contrib/rpm/slipway.spec" "$rpms_dir"/*.rpm 2>&1); then
      grep -E '^[^ ]+: [EW]: ' <<<"$lint"
      echo "ok   rpmlint slipway.spec and $(find "$rpms_dir" -name '*.rpm' | wc -l) RPMs"; passed=$((passed + 1))
    else
      printf '%s\n' "$lint"
      echo "FAIL rpmlint slipway.spec and its RPMs"; failed=$((failed + 1))
    fi
  else
    tail -n 40 "$debs_log"
    echo "FAIL contrib/make-rpms.sh --check-on-debian $rpms_dir"
    failed=$((failed + 1))
  fi
  rm -rf "$rpms_dir" "$debs13_dir"
fi

# test_torch's PyTorch 2.6 tests (the torch-trixie image: Debian 13's PyTorch) run once: on Slurm
# 24.11, Debian 13's own, when that step runs; here otherwise. What they check is the image's
# PyTorch through the plugin, the same on either Slurm; the 1.13 tests run here on both paths.
readonly TESTS_NOT_ON_22_05='^test_torch\.bash:.*_on_pytorch_2_6$'

if want cluster; then
  step "integration tests on the sandbox cluster"
  not_here=()
  ! want 24.11 || not_here=(-x "$TESTS_NOT_ON_22_05")
  trap '"$sandbox" down >/dev/null 2>&1' EXIT
  cluster_log=$roots_log/cluster.log
  waiting wait "$images_pid" || echo "note: building the images ahead failed; slipway-sandbox images builds them now"
  if SLIPWAY_PLUGIN="$build/spank/spank_slipway.so" "$sandbox" up && waiting "$sandbox" images; then
    SLIPWAY_BUILD_DIR="$build" SLIPWAY_REQUIRE_PLUGIN=1 SLIPWAY_DEBS_DIR="$debs_dir" "$repo/tests/cluster/run.bash" "${not_here[@]}" "$repo"/tests/cluster/test_*.bash 2>&1 |
      tee "$cluster_log"
    count_cluster "$cluster_log"
  else
    echo "sandbox: could not start; see $("$sandbox" logs-dir 2>/dev/null || echo /var/lib/slipway-sandbox/log)"
    failed=$((failed + 1))
  fi
  "$sandbox" down
  trap - EXIT
fi

# The cluster suite again on Debian 13's Slurm 24.11, PMIx 5 and OpenMPI 5 (contrib/release-root):
# the plugin and slipway built against them in $build-trixie, the sandbox started with --release
# trixie, and the tests themselves run in that release's userland, as on a Debian 13 machine.
# Every file but those of the image and cache layer, whose work does not involve Slurm beyond
# starting the tasks (imports, layers, mirrors, shared and stressed caches, squashfs), the
# PyTorch suites and Horovod's examples (the same on every Slurm) and test_packages (it installs
# Debian 12's packages): every option, the PMIx and PMI2 paths, named containers, saves, MPI,
# GPUs, fabrics, host libraries, libtrain and torch run on both releases (docs/platform.md).
# In test_torch, only the PyTorch 2.6 tests (Debian 13's own PyTorch) run on 24.11, and only
# there: the same tests on 1.13, through the plugin and through slipway run, run on 22.05.
readonly NOT_ON_24_11='/test_(cache_stress|import|import_identity|registry_mirrors|shared_cache|squashfs_mount|torch_suites|horovod_examples|packages)\.bash$'
readonly TESTS_NOT_ON_24_11='^test_torch\.bash:.*_through_(the_plugin|slipway_run)$'

if want 24.11; then
  step "integration tests on Slurm 24.11 (Debian 13)"
  trixie_build=$build-trixie
  if $need_images && ! want cluster; then
    waiting wait "$images_pid" || echo "note: building the images ahead failed; slipway-sandbox images builds them now"
  fi
  trap 'SLIPWAY_SANDBOX_RELEASE=trixie "$sandbox" down >/dev/null 2>&1' EXIT
  if wait_root trixie &&
      "$release_root" enter trixie bash -c 'cmake -S "$1" -B "$2" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null &&
          cmake --build "$2" -j"$(nproc)" --target spank_slipway slipway' build "$repo" "$trixie_build" &&
      SLIPWAY_PLUGIN="$trixie_build/spank/spank_slipway.so" "$sandbox" up --release trixie && waiting "$sandbox" images; then
    trixie_tests=()
    for f in "$repo"/tests/cluster/test_*.bash; do [[ $f =~ $NOT_ON_24_11 ]] || trixie_tests+=("$f"); done
    SLIPWAY_SANDBOX_RELEASE=trixie SLIPWAY_PLUGIN="$trixie_build/spank/spank_slipway.so" \
      SLIPWAY_BUILD_DIR="$trixie_build" SLIPWAY_REQUIRE_PLUGIN=1 \
      "$release_root" enter trixie "$repo/tests/cluster/run.bash" -x "$TESTS_NOT_ON_24_11" "${trixie_tests[@]}" 2>&1 |
      tee "$roots_log/cluster-24.11.log"
    count_cluster "$roots_log/cluster-24.11.log"
  else
    echo "FAIL the Debian 13 build or sandbox (Slurm 24.11) did not come up"
    failed=$((failed + 1))
  fi
  "$sandbox" down
  trap - EXIT
fi

# Slurm 26.05 (Debian forky, testing): the plugin builds against it and loads into its srun. And the
# check can fail: 24.11's srun refuses the plugin built for 22.05 ("Incompatible plugin version").
if want 26.05; then
  step "the plugin on Slurm 26.05 (Debian forky) and the release check"
  if ! "$repo/tests/releases/plugin_loads.sh" "$build/spank/spank_slipway.so" >/dev/null 2>&1 ||
      "$release_root" enter trixie "$repo/tests/releases/plugin_loads.sh" "$build/spank/spank_slipway.so" >/dev/null 2>&1; then
    echo "FAIL 22.05's plugin did not load in 22.05, or loaded in 24.11"; failed=$((failed + 1))
  else
    echo "ok   22.05's plugin loads in 22.05 and is refused by 24.11"; passed=$((passed + 1))
  fi
  if ! wait_root forky; then
    echo "skip forky: its root could not be installed from Debian's archive (see above)"; skipped=$((skipped + 1))
  elif "$release_root" enter forky bash -c 'cmake -S "$1" -B "$2" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null &&
      cmake --build "$2" -j"$(nproc)" --target spank_slipway' build "$repo" "$build-forky" >"$roots_log/forky.log" 2>&1; then
    if "$release_root" enter forky "$repo/tests/releases/plugin_loads.sh" "$build-forky/spank/spank_slipway.so"; then
      passed=$((passed + 1))
    else
      failed=$((failed + 1))
    fi
  else
    tail -n 30 "$roots_log/forky.log"
    echo "FAIL the plugin does not build against forky's Slurm (cmake --build $build-forky --target spank_slipway)"
    failed=$((failed + 1))
  fi
fi

step_done
echo
for i in "${!step_names[@]}"; do
  printf '%5d s  %s\n' "${step_secs[i]}" "${step_names[i]}"
done
printf '%5d s  in all, %d s of it waiting for release roots and images\n' "$SECONDS" "$waited"
# The 20 slowest tests: CTest's lines ("Test #N: NAME ... Passed  1.23 sec") and tests/cluster/run.bash's
# ("ok   NAME (1.2s)", "setup FILE (1.2s)"), named by file and release for the cluster.
echo "the 20 slowest tests:"
{
  [[ ! -f $unit_log ]] || sed -nE 's/^ *[0-9]+\/[0-9]+ Test +#[0-9]+: ([^ ]+) .* ([0-9.]+) sec$/\2 unit \1/p' "$unit_log"
  for log in "$roots_log"/cluster.log "$roots_log"/cluster-24.11.log; do
    [[ -f $log ]] || continue
    release=22.05; [[ $log == *24.11* ]] && release=24.11
    awk -v r="$release" '/^# test_.*\.bash$/ { file = $2 }
      /^(ok|FAIL|skip|setup) / && match($0, /\(([0-9.]+)s\)$/) {
        print substr($0, RSTART + 1, RLENGTH - 3), r, file ":" ($1 == "setup" ? "setup_file" : $2) }' "$log"
  done
} | sort -rn | head -n 20 | awk '{ printf "%7.1f s  %s %s\n", $1, $2, $3 }'
rm -rf "$roots_log"
rm -rf "$debs_dir" "$debs_log"
echo "total: $passed passed, $failed failed, $skipped skipped"
((failed == 0))
