# SPDX-License-Identifier: Apache-2.0
# Copyright The Slipway authors
# The Debian packages (contrib/make-debs.sh) as a site runs them: installed with apt, the sandbox
# brought up from them (plugin loaded from /usr/lib/x86_64-linux-gnu/slurm-wlm), a containerized
# step, `slipway run` from PATH, the packaged Python module and man pages; then purged, leaving no
# file behind. The sandbox goes back to the build's plugin afterwards, even when a test fails.
# SLIPWAY_DEBS_DIR: packages built already (contrib/run-tests.sh); otherwise they are built here.

readonly PACKAGES=(slipway slurm-spank-slipway libtrain0 libtrain-dev python3-libtrain)
readonly DEB_PLUGIN=/usr/lib/x86_64-linux-gnu/slurm-wlm/spank_slipway.so

# Idempotent: purge whatever of ours is installed, bring the sandbox back to the build's plugin
# ($SLIPWAY_PLUGIN, else <build>/spank/spank_slipway.so), remove what setup_file made.
restore_host() {
    purge_ours || echo "# dpkg --purge of the slipway packages failed" >&2
    SLIPWAY_PLUGIN=${SLIPWAY_PLUGIN:-$BUILD/spank/spank_slipway.so} "$SANDBOX" up >/dev/null 2>&1 \
        || echo "# slipway-sandbox up (build plugin) failed; see $SANDBOX_DIR/log" >&2
    [[ -z ${OWN_DEBS:-} ]] || rm -rf "$OWN_DEBS"
    rm -rf "${LISTS:-/nonexistent}"
}

# Purges those of PACKAGES that are installed, in one dpkg call (they depend on each other).
purge_ours() {
    local -a installed=()
    local p
    for p in "${PACKAGES[@]}"; do is_installed "$p" && installed+=("$p"); done
    ((${#installed[@]} == 0)) || dpkg --purge "${installed[@]}" >/dev/null 2>&1
}

is_installed() { [[ $(dpkg-query -W -f='${Status}' "$1" 2>/dev/null) == "install ok installed" ]]; }

setup_file() {
    BUILD=${SLIPWAY_BUILD_DIR:-$REPO_DIR/build}
    VERSION=$(sed -n 's/^CMAKE_PROJECT_VERSION:STATIC=//p' "$BUILD/CMakeCache.txt" 2>/dev/null)
    [[ -n $VERSION ]] || fail "no CMake build in $BUILD (set SLIPWAY_BUILD_DIR)"
    # The packages' version: VERSION-1~deb12 (the Debian release they are for).
    DEB_VERSION=$(sed -n 's/^SLIPWAY_DEB_VERSION:INTERNAL=//p' "$BUILD/CMakeCache.txt")
    [[ $DEB_VERSION == "$VERSION-1~deb"* ]] || fail "$BUILD's package version is '$DEB_VERSION'; reconfigure it"
    # From here on, every way out of this file restores the host (teardown_file does it too).
    trap restore_host EXIT
    DEBS=${SLIPWAY_DEBS_DIR:-}
    if [[ -z $DEBS ]]; then
        OWN_DEBS=$(mktemp -d /tmp/slipway-test-debs.XXXXXX)
        DEBS=$OWN_DEBS
        SLIPWAY_BUILD_DIR=$BUILD "$REPO_DIR/contrib/make-debs.sh" "$DEBS" >/dev/null 2>&1 \
            || fail "contrib/make-debs.sh $DEBS failed (run it to see why)"
    fi
    # Leftovers of an earlier run would hide what these packages install.
    purge_ours || fail "dpkg --purge ${PACKAGES[*]} (left by an earlier run) failed"
    # A fresh start: slurmd logs the version of the plugin it loads once, at start; the tests
    # read each node's log from where it ends now.
    "$SANDBOX" down >/dev/null 2>&1 || true
    local i
    LOG_START=()
    for i in 1 2 3 4; do LOG_START[i]=$(stat -c %s "$SANDBOX_DIR/log/slurmd-node$i.log" 2>/dev/null || echo 0); done
    "$SANDBOX" up --from-debs "$DEBS" >"$SANDBOX_DIR/log/up-from-debs.log" 2>&1 \
        || fail "slipway-sandbox up --from-debs $DEBS failed; see $SANDBOX_DIR/log/up-from-debs.log"
    require_images busybox
    BUSYBOX=$(image_ref busybox)
    export SLIPWAY_INSECURE_REGISTRIES=$SANDBOX_NET.1:5000
    # What each package installed, kept for the purge test (dpkg -L forgets it on purge).
    LISTS=$(mktemp -d /tmp/slipway-test-dpkg-lists.XXXXXX)
    local p
    for p in "${PACKAGES[@]}"; do dpkg -L "$p" >"$LISTS/$p"; done
}

teardown_file() {
    restore_host
    trap - EXIT
}

test_every_package_is_installed_at_the_project_version() {
    local p
    for p in "${PACKAGES[@]}"; do
        run_host dpkg-query -W -f='${Status} ${Version}' "$p"
        assert_output "install ok installed $DEB_VERSION"
    done
}

test_slurmd_loads_the_plugin_from_its_installed_path() {
    assert_equal "required $DEB_PLUGIN insecure_registries=$SANDBOX_NET.1:5000" \
        "$(grep '^required' "$SANDBOX_DIR/etc/plugstack.conf")" "plugstack.conf"
    local i
    for i in 1 2 3 4; do
        run_host tail -c +$((LOG_START[i] + 1)) "$SANDBOX_DIR/log/slurmd-node$i.log"
        assert_output_contains "slipway: spank_slipway $VERSION loaded"
    done
}

test_the_conffile_is_installed_and_commented_out() {
    run_host dpkg-query -W -f='${Conffiles}' slurm-spank-slipway
    assert_output_contains "/etc/slurm/plugstack.conf.d/slipway.conf"
    run_host grep -vE '^[[:space:]]*(#|$)' /etc/slurm/plugstack.conf.d/slipway.conf
    assert_failure 1
}

test_containerized_step_through_the_packaged_plugin() {
    run_job srun -N2 -K --container-image="$BUSYBOX" --container-workdir=/ cat /etc/slipway-image
    assert_success
    assert_equal 2 "$(grep -cx busybox <<<"$output")" "tasks inside busybox"
}

test_slipway_run_from_path_under_srun() {
    run_job srun -N2 -K sh -c "command -v slipway; slipway --version;
        slipway run --container-image=$BUSYBOX -- cat /etc/slipway-image"
    assert_success
    assert_equal 2 "$(grep -cx /usr/bin/slipway <<<"$output")" "slipway found on PATH"
    assert_equal 2 "$(grep -cx "slipway $VERSION" <<<"$output")" "slipway --version"
    assert_equal 2 "$(grep -cx busybox <<<"$output")" "slipway run inside busybox"
}

# The demo image carries libtrain built from source (contrib/images/demo/build), so the packaged
# module is checked where the package put it: on the nodes (the host's /usr), over PMIx.
test_packaged_python_module_on_the_nodes() {
    run_job srun -N2 -n2 -K /usr/bin/python3 -c \
        'import libtrain; libtrain.init(); print(libtrain.__file__, libtrain.rank(), libtrain.size())'
    assert_success
    assert_equal 2 "$(grep -c '^/usr/lib/python3/dist-packages/libtrain/__init__.py [01] 2$' <<<"$output")" \
        "ranks importing the packaged module"
}

test_man_pages_are_found() {
    local page section name
    for page in "1 slipway" "8 spank_slipway" "3 libtrain" "7 libtrain"; do
        read -r section name <<<"$page"
        run_host man -w "$section" "$name"
        assert_success
        assert_output "/usr/share/man/man$section/$name.$section.gz"
    done
}

test_module_file_puts_slipway_on_path() {
    [[ -r /usr/share/modules/init/bash ]] || skip "environment-modules is not installed"
    run_host bash -c 'source /usr/share/modules/init/bash; module load slipway && command -v slipway && echo "$MANPATH"'
    assert_success
    assert_equal /usr/bin/slipway "${lines[0]}" "slipway after module load"
    assert_output_contains /usr/share/man
}

# Last: removes the packages. Every file dpkg listed is gone; a directory may stay only where
# another package owns it too.
test_purge_leaves_no_file_behind() {
    run_host dpkg --purge "${PACKAGES[@]}"
    assert_success
    local p path left=()
    for p in "${PACKAGES[@]}"; do
        while IFS= read -r path; do
            [[ $path == /. || ! -e $path && ! -L $path ]] && continue
            if [[ -d $path && ! -L $path ]] && dpkg-query -S "$path" >/dev/null 2>&1; then continue; fi
            left+=("$path ($p)")
        done <"$LISTS/$p"
        is_installed "$p" && left+=("package $p")
    done
    ((${#left[@]} == 0)) || fail "left behind after dpkg --purge: ${left[*]}"
    assert_no_file /etc/slurm/plugstack.conf.d/slipway.conf
    assert_no_file "$DEB_PLUGIN"
}
