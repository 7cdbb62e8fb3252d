# SPDX-License-Identifier: Apache-2.0
# Copyright The Slipway authors
# Image import on the sandbox (issue 3): one manifest request per job and each blob once per node
# (counted in the registry's access log), nothing fetched by a second job, the OCI whiteout rules
# (the node's cached rootfs compared file by file with the expected tree), recovery from kill -9
# mid-import, Basic-auth and token-auth registries, and local archives read as the job user.
#
# The auth tests start two more registries on $SANDBOX_NET.1 (ports 5001, 5002) and a token
# server of ours (5003); setup_file lists them in the plugin's insecure_registries (one more
# `up`, restored by teardown_file) and teardown_file stops them.

readonly AUTH_USER=alice AUTH_PASSWORD=s3cret

setup_file() {
    require_sandbox
    require_plugin
    require_images busybox debian-python layers
    BUSYBOX=$(image_ref busybox)
    DEBIAN_PYTHON=$(image_ref debian-python)
    LAYERS=$(image_ref layers)
    JOB_UID=$(id -u slwuser)
    ACCESS_LOG=$SANDBOX_DIR/log/registry-access.log
    WORK=$SANDBOX_DIR/test-import
    rm -rf "$WORK" && mkdir -p "$WORK"
    # The `slipway` command next to the plugin under test, copied where the nodes can run it.
    local build
    build=$(dirname "$(dirname "${SLIPWAY_PLUGIN:-$REPO_DIR/build/spank/spank_slipway.so}")")
    SLIPWAY_BIN=$(job_user_home)/.slipway-test-bin/slipway
    if [[ -x $build/launcher/slipway ]]; then
        install -D -m 0755 -o slwuser "$build/launcher/slipway" "$SLIPWAY_BIN"
    fi
    SLIPWAY_PLUGIN_ARGS="insecure_registries=$SANDBOX_NET.1:5000,$SANDBOX_NET.1:5001,$SANDBOX_NET.1:5002" \
        "$SANDBOX" up >/dev/null 2>&1 || fail "slipway-sandbox up with the auth registries failed"
    CREDS=$(job_user_home)/.config/slipway/credentials
    [[ ! -e $CREDS ]] || cp -p "$CREDS" "$WORK/credentials.saved"
}

teardown_file() {
    local f
    for f in "$WORK"/*.pid; do
        [[ -e $f ]] && kill "$(cat "$f")" 2>/dev/null
    done
    if [[ -e $WORK/credentials.saved ]]; then cp -p "$WORK/credentials.saved" "$CREDS"; else rm -f "$CREDS"; fi
    rm -rf "$(dirname "$SLIPWAY_BIN")" "$WORK" "$(job_user_home)"/slipway-test-*
    "$SANDBOX" up >/dev/null 2>&1
}

# ---------------------------------------------------------------- helpers --

node_cache() { echo "$SANDBOX_DIR/nodes/$1/var-tmp/slipway-$JOB_UID"; }
clear_caches() { rm -rf "$SANDBOX_DIR"/nodes/node*/var-tmp/slipway-"$JOB_UID"; }

# Lines of the registry access log: the count now, and the lines after a count.
log_mark() { wc -l <"$ACCESS_LOG"; }
log_since() { tail -n +"$(($1 + 1))" "$ACCESS_LOG"; }

# "ADDRESS PATH" of every GET of REPO's blobs after MARK.
blob_gets() { log_since "$1" | sed -n "s|^\([0-9.]*\) .*\"GET \(/v2/slipway/$2/blobs/[^ ]*\) .*|\1 \2|p"; }
manifest_gets() { log_since "$1" | grep -c "\"GET /v2/slipway/$2/manifests/" || true; }
manifest_heads() { log_since "$1" | grep -c "\"HEAD /v2/slipway/$2/manifests/" || true; }
# GETs and HEADs: srun's HEAD replaces the GET once its host's cache remembers the tag.
manifest_requests() { echo $(($(manifest_gets "$@") + $(manifest_heads "$@"))); }

# The blobs (config and layers) of the image cached on node1 under digest hex HEX.
image_blob_count() { jq '.layers | length + 1' "$(node_cache node1)/images/$1/manifest.json"; }

# tree-manifest of DIR with the modes an unprivileged unpack gives (layer.h): setuid/setgid
# dropped, u+rw on files and FIFOs, u+rwx on directories; device nodes and sockets skipped.
normalised_tree() {
    "$REPO_DIR/contrib/images/tree-manifest" "$1" | python3 -c '
import sys
for line in sys.stdin:
    kind, mode, digest, path = line.rstrip("\n").split(" ", 3)
    if kind in "cbs":
        continue
    m = int(mode, 8)
    if kind != "l":
        m = (m & ~0o6000) | (0o700 if kind == "d" else 0o600)
    print(f"{kind} {m:04o} {digest} {path}")'
}

# The expected tree of test image NAME: its OCI layout unpacked by umoci (as root), normalised.
# Kept beside the cached layout (same recipe hash), as umoci takes a while for debian-python.
expected_tree() {
    local layout out tree
    layout=$("$REPO_DIR/contrib/images/build-image" "$1" | cut -d' ' -f2)
    tree=$layout.umoci-tree
    if [[ ! -s $tree ]]; then
        out=$WORK/expected-$1
        rm -rf "$out" && umoci unpack --image "$layout:latest" "$out" >/dev/null
        normalised_tree "$out/rootfs" >"$tree.$$" && mv -f "$tree.$$" "$tree"
        rm -rf "$out"
    fi
    cat "$tree"
}

# The only published image in NODE's cache (its hex digest); fails if there are more or none.
only_image() {
    local dir=$(node_cache "$1")/images
    local n=$(find "$dir" -mindepth 1 -maxdepth 1 | wc -l)
    ((n == 1)) || fail "$n images in $dir, expected 1: $(ls "$dir")"
    basename "$(find "$dir" -mindepth 1 -maxdepth 1)"
}

require_slipway_bin() { [[ -x $SLIPWAY_BIN ]] || skip "the slipway command is not built next to the plugin"; }

# Netns of sandbox node I (slipway-sandbox's naming).
node_netns() {
    local i=${SLIPWAY_SANDBOX_INSTANCE:-0}
    ((i == 0)) && echo "slw-node$1" || echo "slw$i-node$1"
}

# ---------------------------------------------------------- one per job --

test_32_tasks_on_4_nodes_one_manifest_request_each_blob_once_per_node() {
    local mark fetched
    clear_caches
    mark=$(log_mark)
    run_job srun -N4 --ntasks-per-node=8 -K --container-image="$DEBIAN_PYTHON" cat /etc/slipway-image
    assert_success
    assert_equal 32 "$(grep -cx debian-python <<<"$output")" "tasks inside debian-python"
    assert_equal 1 "$(manifest_requests "$mark" debian-python)" "manifest requests for the job"
    fetched=$(blob_gets "$mark" debian-python)
    assert_equal "" "$(sort <<<"$fetched" | uniq -d)" "blobs fetched twice by one node"
    local blobs=$(image_blob_count "$(only_image node1)")
    local node
    for node in 1 2 3 4; do
        assert_equal "$blobs" "$(grep -c "^$SANDBOX_NET.1$node " <<<"$fetched")" "blobs fetched by node$node"
    done
    # A second job: the tag is resolved again with one HEAD (not a pull: image/tag_memo.h), and
    # nothing else is asked.
    mark=$(log_mark)
    run_job srun -N4 --ntasks-per-node=8 -K --container-image="$DEBIAN_PYTHON" true
    assert_success
    assert_equal 0 "$(manifest_gets "$mark" debian-python)" "manifest GETs of the second job"
    assert_equal 1 "$(manifest_heads "$mark" debian-python)" "manifest HEADs of the second job"
    assert_equal "" "$(blob_gets "$mark" debian-python)" "blobs fetched by the second job"
}

test_batch_steps_share_one_manifest_request() {
    local mark script
    script=$(job_user_home)/slipway-test-batch-$$.sh
    cat >"$script" <<EOS
#!/bin/sh
#SBATCH --container-image=$BUSYBOX
#SBATCH -N2 --time=2
srun -K -N2 cat /etc/slipway-image
srun -K -N2 cat /etc/slipway-image
EOS
    chown slwuser "$script"
    mark=$(log_mark)
    run_batch "$script"
    assert_success
    assert_equal 4 "$(grep -cx busybox <<<"$output")" "tasks inside busybox"
    assert_equal 1 "$(manifest_requests "$mark" busybox)" "manifest requests of the batch job"
}

# ------------------------------------------------------------ whiteouts --

test_layers_unpacks_to_layers_expected() {
    clear_caches
    run_job srun -N1 -w node1 -K --container-image="$LAYERS" cat /a/reborn.txt
    assert_success
    assert_output "layer 3 version"
    run_host "$REPO_DIR/contrib/images/tree-manifest" "$(node_cache node1)/images/$(only_image node1)/rootfs"
    assert_success
    diff <(printf '%s\n' "$output") "$REPO_DIR/contrib/images/layers.expected" >&2 \
        || fail "the layers image unpacked to a different tree (diff above)"
}

test_busybox_and_debian_python_match_umoci() {
    local name ref hex
    for name in busybox debian-python; do
        clear_caches
        ref=$(image_ref "$name")
        run_job srun -N1 -w node2 -K --container-image="$ref" true
        assert_success
        hex=$(only_image node2)
        diff <(normalised_tree "$(node_cache node2)/images/$hex/rootfs") <(expected_tree "$name") >&2 \
            || fail "$name unpacked differently from umoci (diff above)"
    done
}

# ---------------------------------------------------------------- kill -9 --

# Starts `slipway import REF` on node1 as the job user, kills it with SIGKILL once its work
# directory matches GLOB (relative to the cache), and waits for srun to end.
kill_import_when() {
    local ref=$1 glob=$2 cache pid
    cache=$(node_cache node1)
    SLIPWAY_INSECURE_REGISTRIES=$SANDBOX_NET.1:5000 "$SANDBOX" exec -- \
        timeout 60 srun -N1 -w node1 -K "$SLIPWAY_BIN" import "$ref" >"$WORK/killed.out" 2>&1 &
    local srun_pid=$!
    local deadline=$((SECONDS + 50))
    while ((SECONDS < deadline)) && kill -0 "$srun_pid" 2>/dev/null; do
        compgen -G "$cache/$glob" >/dev/null && break
        sleep 0.01
    done
    compgen -G "$cache/$glob" >/dev/null || fail "the import never reached $glob: $(cat "$WORK/killed.out")"
    for pid in $(ip netns pids "$(node_netns 1)"); do
        [[ $(cat "/proc/$pid/comm" 2>/dev/null) == slipway ]] && kill -9 "$pid"
    done
    wait "$srun_pid" || true
}

test_kill_9_mid_import_then_rerun_gives_a_correct_image() {
    require_slipway_bin
    local cache hex
    cache=$(node_cache node1)
    # Killed while unpacking (the rootfs under tmp/ is half written) ...
    clear_caches
    kill_import_when "$DEBIAN_PYTHON" 'tmp/[0-9a-f]*.*/rootfs/usr/lib/python3*'
    assert_equal "" "$(ls "$cache/images")" "published images after the kill"
    [[ -n $(ls "$cache/tmp") ]] || fail "the killed import left nothing in tmp/: it was not mid-way"
    SLIPWAY_INSECURE_REGISTRIES=$SANDBOX_NET.1:5000 run_job srun -N1 -w node1 -K "$SLIPWAY_BIN" import "$DEBIAN_PYTHON"
    assert_success
    hex=$(only_image node1)
    assert_output_contains "sha256:$hex"
    assert_equal "" "$(ls "$cache/tmp")" "leftovers in tmp/ after the rerun"
    diff <(normalised_tree "$cache/images/$hex/rootfs") <(expected_tree debian-python) >&2 \
        || fail "the image imported after a kill differs from umoci's (diff above)"
    # ... and killed while downloading (a blob is half written), then a step imports it.
    clear_caches
    kill_import_when "$DEBIAN_PYTHON" 'tmp/blob-*'
    assert_equal "" "$(ls "$cache/images")" "published images after the kill"
    run_job srun -N1 -w node1 -K --container-image="$DEBIAN_PYTHON" python3 -c 'print(6 * 7)'
    assert_success
    assert_equal 42 "${lines[-1]}" "the step's output"   # after progress lines, if any
    assert_equal "" "$(ls "$cache/tmp")" "leftovers in tmp/ after the rerun"
    assert_equal "$hex" "$(only_image node1)" "image digest"
}

# -------------------------------------------------------------- auth --

# A copy of the sandbox registry's storage (hard links: nothing is pushed) served on PORT with
# the auth section in FILE. Records the pid for teardown_file.
start_auth_registry() {
    local port=$1 auth=$2 dir=$WORK/registry-$1
    mkdir -p "$dir"
    [[ -d $dir/storage ]] || cp -al "$SANDBOX_DIR/registry" "$dir/storage"
    registry_config "$SANDBOX_NET.1:$port" "$dir/storage" "$(cat "$auth")" >"$dir/config.yml"
    setsid /usr/bin/docker-registry serve "$dir/config.yml" </dev/null >"$dir/log" 2>&1 &
    echo $! >"$WORK/registry-$port.pid"
    wait_listening "$port" || fail "registry on port $port did not start: $(tail -n 5 "$dir/log")"
}

wait_listening() {
    local i
    for ((i = 0; i < 100; i++)); do
        [[ -n $(ss -Hltn "src $SANDBOX_NET.1 and sport = :$1") ]] && return 0
        sleep 0.05
    done
    return 1
}

write_credentials() {
    install -d -o slwuser -g slwuser -m 0755 "$(dirname "$(dirname "$CREDS")")"
    install -d -o slwuser -m 0700 "$(dirname "$CREDS")"
    printf '%s\n' "$@" >"$CREDS"
    chown slwuser "$CREDS" && chmod 0600 "$CREDS"
}

# Runs busybox from registry HOST as the job user, once without and once with credentials.
check_auth_registry() {
    local host=$1 ref=$1/slipway/busybox:latest
    rm -f "$CREDS"
    clear_caches
    run_job srun -N2 -K --container-image="$ref" cat /etc/slipway-image
    assert_failure
    assert_equal 1 "$(grep -c 'slipway:' <<<"$output")" "slipway error lines"
    assert_output_contains "slipway: failed to import docker image: $ref: image '$ref' not found on registry $host or it needs credentials (HTTP 401); check the name or add 'machine $host login USER password PASS' to ~/.config/slipway/credentials"
    write_credentials "machine $host login $AUTH_USER password wrong"
    run_job srun -N2 -K --container-image="$ref" cat /etc/slipway-image
    assert_failure
    assert_output_contains "slipway: failed to import docker image: $ref: registry $host refused credentials for 'slipway/busybox' (HTTP 401); check $CREDS"
    write_credentials "machine $host login $AUTH_USER password $AUTH_PASSWORD"
    run_job srun -N2 -K --container-image="$ref" cat /etc/slipway-image
    assert_success
    assert_output "$(printf 'busybox\nbusybox')"
}

test_basic_auth_registry_with_and_without_credentials() {
    htpasswd -Bbn "$AUTH_USER" "$AUTH_PASSWORD" >"$WORK/htpasswd" 2>/dev/null || skip "htpasswd (apache2-utils) is missing"
    printf 'auth:\n  htpasswd:\n    realm: slipway-test\n    path: %s\n' "$WORK/htpasswd" >"$WORK/basic.yml"
    start_auth_registry 5001 "$WORK/basic.yml"
    check_auth_registry "$SANDBOX_NET.1:5001"
}

# A token server (https://distribution.github.io/distribution/spec/auth/token/): Basic auth
# against one user, RS256 JWTs with the signing certificate in x5c, pull access only.
write_token_server() {
    cat >"$WORK/token_server.py" <<'EOF'
import base64, json, subprocess, sys, time
from http.server import BaseHTTPRequestHandler, HTTPServer
from urllib.parse import parse_qs, urlparse

addr, port, user, password, key, cert_der_b64, service, issuer = sys.argv[1:9]

def b64url(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()

class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        query = parse_qs(urlparse(self.path).query)
        auth = self.headers.get("Authorization", "")
        given = base64.b64decode(auth[6:]).decode() if auth.startswith("Basic ") else ""
        if given != user + ":" + password:
            self.send_response(401)
            self.send_header("WWW-Authenticate", 'Basic realm="slipway-token"')
            self.end_headers()
            return
        access = []
        for scope in query.get("scope", []):
            kind, name, actions = scope.split(":")
            access.append({"type": kind, "name": name, "actions": ["pull"] if "pull" in actions.split(",") else []})
        now = int(time.time())
        header = {"alg": "RS256", "typ": "JWT", "x5c": [cert_der_b64]}
        claims = {"iss": issuer, "sub": user, "aud": service, "exp": now + 300, "nbf": now - 10,
                  "iat": now, "jti": str(time.time_ns()), "access": access}
        signing_input = b64url(json.dumps(header).encode()) + "." + b64url(json.dumps(claims).encode())
        sig = subprocess.run(["openssl", "dgst", "-sha256", "-sign", key], input=signing_input.encode(),
                             capture_output=True, check=True).stdout
        body = json.dumps({"token": signing_input + "." + b64url(sig)}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass

HTTPServer((addr, int(port)), Handler).serve_forever()
EOF
}

test_token_auth_registry_with_and_without_credentials() {
    local dir=$WORK/token
    mkdir -p "$dir"
    openssl req -x509 -newkey rsa:2048 -nodes -keyout "$dir/key.pem" -out "$dir/cert.pem" \
        -days 2 -subj /CN=slipway-test-token >/dev/null 2>&1 || fail "openssl could not make the token key"
    write_token_server
    setsid python3 "$WORK/token_server.py" "$SANDBOX_NET.1" 5003 "$AUTH_USER" "$AUTH_PASSWORD" \
        "$dir/key.pem" "$(openssl x509 -in "$dir/cert.pem" -outform der | base64 -w0)" \
        slipway-test slipway-test-issuer </dev/null >"$dir/server.log" 2>&1 &
    echo $! >"$WORK/token-5003.pid"
    wait_listening 5003 || fail "token server did not start: $(cat "$dir/server.log")"
    cat >"$WORK/token.yml" <<EOF
auth:
  token:
    realm: http://$SANDBOX_NET.1:5003/token
    service: slipway-test
    issuer: slipway-test-issuer
    rootcertbundle: $dir/cert.pem
EOF
    start_auth_registry 5002 "$WORK/token.yml"
    check_auth_registry "$SANDBOX_NET.1:5002"
}

# ---------------------------------------------------------------- local --

# FILE as the job user's own 0600 file in its home.
give_to_job_user() { chown -R slwuser "$1" && chmod -R go-rwx "$1"; }

test_local_archives_and_layouts_import_as_the_job_user() {
    local layout home kind path
    layout=$("$REPO_DIR/contrib/images/build-image" busybox | cut -d' ' -f2)
    home=$(job_user_home)
    clear_caches
    for kind in docker-archive oci-archive oci; do
        path=$home/slipway-test-$$-$kind
        [[ $kind == oci ]] || path+=.tar
        skopeo copy -q "oci:$layout:latest" "$kind:$path" || fail "skopeo copy to $kind failed"
        give_to_job_user "$path"
        run_job srun -N2 -w node[1-2] -K --container-image="$path" cat /etc/slipway-image
        assert_success
        assert_output "$(printf 'busybox\nbusybox')"
    done
    # OCI archive and layout are the same image (the manifest digest), the docker-archive another.
    assert_equal 2 "$(ls "$(node_cache node1)/images" | wc -l)" "images from three local sources"
    # Read as the job user, never as root: a root-only archive fails, with the reason and fix.
    path=$home/slipway-test-$$-root.tar
    skopeo copy -q "oci:$layout:latest" "docker-archive:$path" && chmod 0600 "$path"
    run_job srun -N1 -K --container-image="$path" true
    assert_failure
    assert_output_contains "slipway: failed to import docker image: $path: cannot open image '$path': Permission denied; the job's user (uid $JOB_UID) must be able to read it"
}

# ------------------------------------------------------------ commands --

# `slipway ARGS...` on node3, as the job user (-Q: no "job queued" lines).
on_node3() { run_job srun -Q -N1 -w node3 -K "$SLIPWAY_BIN" "$@"; }

# `slipway images`, `gc` and `rm` on node3 while a step uses one of its two images.
test_images_gc_and_rm_never_touch_what_a_step_uses() {
    require_slipway_bin
    local i
    clear_caches
    run_job srun -N1 -w node3 -K --container-image="$LAYERS" cat /etc/slipway-image
    assert_success
    "$SANDBOX" exec -- timeout 60 srun -N1 -w node3 -K -J slipway-test-hold \
        --container-image="$BUSYBOX" sleep 30 >/dev/null 2>&1 &
    for ((i = 0; i < 100; i++)); do
        on_node3 images
        [[ $output == *" yes "*"$BUSYBOX"* ]] && break
        sleep 0.2
    done
    assert_line_count 3
    assert_output_matches "sha256:[0-9a-f]{12} +[0-9.]+ (KiB|MiB) +[0-9-]+ [0-9:]+ +yes +$BUSYBOX"
    assert_output_matches "sha256:[0-9a-f]{12} +[0-9.]+ (KiB|MiB) +[0-9-]+ [0-9:]+ +no +$LAYERS"
    on_node3 gc --keep 0
    assert_success
    assert_output_matches "^removed 1 image \\(.*\\), kept .* \\(the rest is in use by running steps\\)$"
    on_node3 rm "$BUSYBOX"
    assert_failure 1
    assert_output_contains "is in use by a running step; retry when it ends"
    "$SANDBOX" exec -- scancel -u slwuser -n slipway-test-hold
    wait
    on_node3 rm "$BUSYBOX"
    assert_success
    assert_output_matches "^removed sha256:[0-9a-f]{64}$"
    on_node3 images
    assert_line_count 1
    assert_equal "" "$(ls "$(node_cache node3)/blobs/sha256")" "blobs left after rm"
}

test_progress_comes_from_the_first_node_only() {
    local progress t0 secs
    clear_caches
    t0=$(now)
    run_job srun -N4 -K --container-image="$DEBIAN_PYTHON" true
    assert_success
    secs=$(elapsed "$t0")
    progress=$(grep -c '^slipway: \(fetching\|unpacking\) layer' <<<"$output" || true)
    ((progress >= 1)) || fail "no progress lines from the import: $output"
    # At most one a second, from one node: four nodes would print at least four lines a second.
    assert_less "$progress" "$(awk -v s="$secs" 'BEGIN { print s + 2 }')" "progress lines"
}

# One squashfs file for a shared filesystem (issue 15): `slipway import IMAGE --squashfs PATH`
# writes it in one rename, root-owned inside, readable by others; every node then starts from it.
test_import_to_a_squashfs_file_for_a_shared_filesystem() {
    local out=$WORK/shared/python.sqsh
    mkdir -p "$WORK/shared" "$WORK/cli-cache" && chown slwuser "$WORK/shared" "$WORK/cli-cache"
    chmod 0755 "$WORK" "$WORK/shared"
    run_job env SLIPWAY_INSECURE_REGISTRIES="$SANDBOX_NET.1:5000" SLIPWAY_CACHE_DIR="$WORK/cli-cache" \
        "$SLIPWAY_BIN" import "$DEBIAN_PYTHON" --squashfs "$out"
    assert_success
    assert_output_matches "^sha256:[0-9a-f]{64} $out\$"
    assert_equal "-rw-r--r--" "$(stat -c %A "$out")" "mode of the squashfs file"
    [[ -z $(ls "$WORK/shared" | grep -v '^python.sqsh$') ]] || fail "a temporary file was left: $(ls "$WORK/shared")"
    run_host unsquashfs -lln "$out" /usr/bin/python3
    assert_output_contains "0/0"
    run_job srun -N2 -K --container-image="$out" python3 -c 'print("from-sqsh")'
    assert_success
    assert_equal 2 "$(grep -cx from-sqsh <<<"$output")" "tasks started from the file"
    run_job "$SLIPWAY_BIN" import "$DEBIAN_PYTHON" --squashfs "$WORK/shared/"
    assert_failure
    assert_output_contains "slipway: import: --squashfs='$WORK/shared/' is a directory"
}

# Bounds a site sets (issue 16): max_image_size= in plugstack.conf fails the step's import with a
# line naming the bound; SLIPWAY_MAX_IMAGE_SIZE does the same for `slipway import`, and a malformed
# bound is refused, never ignored. Nothing is published.
test_site_bounds_on_imports() {
    require_slipway_bin
    local registries="insecure_registries=$SANDBOX_NET.1:5000,$SANDBOX_NET.1:5001,$SANDBOX_NET.1:5002"
    mkdir -p "$WORK/bounds-cache" && chown slwuser "$WORK/bounds-cache"
    run_job env SLIPWAY_INSECURE_REGISTRIES="$SANDBOX_NET.1:5000" SLIPWAY_CACHE_DIR="$WORK/bounds-cache" \
        SLIPWAY_MAX_IMAGE_SIZE=100K "$SLIPWAY_BIN" import "$DEBIAN_PYTHON"
    assert_failure
    # Refused from the manifest's declared sizes, before a blob is fetched (issue 30).
    assert_output_contains "MiB of blobs, more than it may unpack to (max_image_size=100.0 KiB, SLIPWAY_MAX_IMAGE_SIZE)"
    assert_equal "" "$(ls "$WORK/bounds-cache/blobs/sha256")" "blobs fetched over the bound"
    assert_equal "" "$(ls "$WORK/bounds-cache/images")" "images published over the bound"
    run_job env SLIPWAY_MAX_LAYER_RATIO=lots "$SLIPWAY_BIN" import "$BUSYBOX"
    assert_failure 2
    assert_output_contains "SLIPWAY_MAX_LAYER_RATIO: max_layer_ratio='lots' is not a ratio"
    clear_caches
    SLIPWAY_PLUGIN_ARGS="$registries max_image_size=100K" "$SANDBOX" up >/dev/null 2>&1 \
        || fail "sandbox up with max_image_size=100K"
    trap '"$SANDBOX" up >/dev/null 2>&1 || echo "# could not restore the sandbox" >&2' EXIT
    run_job srun -N1 -K --container-image="$DEBIAN_PYTHON" true
    assert_failure
    assert_output_contains "failed to import docker image: $DEBIAN_PYTHON"
    assert_output_contains "(max_image_size=100.0 KiB, SLIPWAY_MAX_IMAGE_SIZE)"
    SLIPWAY_PLUGIN_ARGS="$registries" "$SANDBOX" up >/dev/null 2>&1 || fail "could not restore the sandbox"
    trap - EXIT
    run_job srun -N1 -K --container-image="$DEBIAN_PYTHON" true
    assert_success
}

# `slipway images`, `gc`, `check` and `rm` on a cache the user cannot read fail and say why (they
# used to list nothing and exit 0); a cache that does not exist yet is an empty listing.
test_cache_commands_on_a_cache_that_is_not_yours() {
    require_slipway_bin
    install -d -m 0700 -o root "$WORK/roots-cache"
    local cmd
    for cmd in images "gc --keep 0" check "rm $BUSYBOX"; do
        # shellcheck disable=SC2086 # the command's words
        run_job env SLIPWAY_CACHE_DIR="$WORK/roots-cache" "$SLIPWAY_BIN" $cmd
        assert_failure 1
        assert_output_contains "cache directory $WORK/roots-cache belongs to uid 0, not to you"
    done
    run_job env SLIPWAY_CACHE_DIR="$WORK/not-made-yet" "$SLIPWAY_BIN" images
    assert_success
    assert_line_count 1
}
