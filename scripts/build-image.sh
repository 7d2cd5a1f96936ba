#!/usr/bin/env bash
# `make image`: one OCI image with every docflow binary (release, stripped), libpdfium,
# libonnxruntime, the OCR and embedding models, and only the system libraries the binaries
# and those two libraries link (each with its Debian package's copyright file), built with no
# daemon and no registry:
#   1. a root filesystem under $CACHE/image/rootfs (every mtime at the last commit's time);
#   2. one layer and the image's config with umoci (Debian's package), into an OCI layout;
#   3. skopeo (Debian's package) writes it as an oci-archive and a docker-archive.
# Out, in dist/ (DOCFLOW_IMAGE_OUT): docflow-VERSION.oci.tar, docflow-VERSION.docker.tar,
# docflow-VERSION.sbom.json (Debian packages, crates of Cargo.lock, the wheels the models
# and libraries came from, with their SHA-256) and docflow-VERSION.digest. docs/image.md
# says how to load, push and run it.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
CACHE="${DOCFLOW_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/docflow}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$CACHE/target}"
OUT="${DOCFLOW_IMAGE_OUT:-$ROOT/dist}"
WORK="$CACHE/image"
VERSION="$(sed -n '/^\[workspace.package\]/,/^\[/s/^version = "\(.*\)"/\1/p' "$ROOT/Cargo.toml")"
TAG="$VERSION"
NAME="docflow"
BINS=(docflow docflow-ingest docflow-registry docflow-thumbnails docflow-ocr-embeddings
    docflow-analytics-rollup docflow-replay)
PACKAGES=(-p docflow-cli -p docflow-ingest -p docflow-registry -p docflow-thumbnails
    -p docflow-ocr-embeddings -p docflow-analytics-rollup -p docflow-replay)
start=$(date +%s)

need() {
    local missing=()
    for tool in "$@"; do command -v "$tool" >/dev/null || missing+=("$tool"); done
    [ ${#missing[@]} = 0 ] && return 0
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        echo "==> installing ${missing[*]} from Debian's packages"
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq umoci skopeo >/dev/null
    else
        echo "make image needs ${missing[*]} (Debian: apt-get install umoci skopeo)" >&2
        exit 1
    fi
}
need umoci skopeo
[ "$(id -u)" = 0 ] || {
    echo "make image runs as root (umoci records the files' owners as they are on disk)" >&2
    exit 1
}
for f in .tools/lib/libpdfium.so .tools/lib/libonnxruntime.so .tools/models/ppocr .tools/models/minilm; do
    [ -e "$ROOT/$f" ] || { echo "$f missing: run make tools first" >&2; exit 1; }
done

echo "==> release build of ${BINS[*]} (cargo's progress below; shares make bench's target)"
(cd "$ROOT" && cargo build --release --quiet "${PACKAGES[@]}" $(printf -- '--bin %s ' "${BINS[@]}"))

# The image's revision and every file's time are those of the last commit that changed what
# goes into it (code, the lock file, these scripts, the installers): a commit of docs or of
# infra/plan.yaml alone leaves the image, and its digest, as they were.
INPUTS=(Cargo.toml Cargo.lock crates services tools replay scripts/build-image.sh
    scripts/image-sbom.py scripts/install-models.sh scripts/install-pdfium.sh)
EPOCH="$(git -C "$ROOT" log -1 --format=%ct -- "${INPUTS[@]}" 2>/dev/null || echo 0)"
EPOCH="${EPOCH:-0}"
CREATED="$(date -u -d "@$EPOCH" +%Y-%m-%dT%H:%M:%SZ)"
REVISION="$(git -C "$ROOT" log -1 --format=%H -- "${INPUTS[@]}" 2>/dev/null || echo unknown)"
if [ -n "$(git -C "$ROOT" status --porcelain -- "${INPUTS[@]}" 2>/dev/null)" ]; then
    REVISION="$REVISION-modified"
fi

echo "==> root filesystem"
FS="$WORK/rootfs"
rm -rf "$FS"
mkdir -p "$FS"/{usr/local/bin,usr/lib/x86_64-linux-gnu,usr/lib64,usr/share/doc,etc/ssl/certs} \
    "$FS"/opt/docflow/{lib,models/ocr,models/minilm} "$FS"/var/lib/docflow "$FS"/{proc,dev,tmp}
# Debian's merged /usr: /lib and /lib64 are links into it (the binaries' loader is
# /lib64/ld-linux-x86-64.so.2).
ln -s usr/lib "$FS/lib"
ln -s usr/lib64 "$FS/lib64"
ln -s usr/bin "$FS/bin"
mkdir -p "$FS/usr/bin"
chmod 1777 "$FS/tmp"

for bin in "${BINS[@]}"; do
    install -m 0755 "$CARGO_TARGET_DIR/release/$bin" "$FS/usr/local/bin/$bin"
    strip --strip-debug "$FS/usr/local/bin/$bin"
done
install -m 0644 "$(readlink -f "$ROOT/.tools/lib/libpdfium.so")" "$FS/opt/docflow/lib/libpdfium.so"
install -m 0644 "$(readlink -f "$ROOT/.tools/lib/libonnxruntime.so")" "$FS/opt/docflow/lib/libonnxruntime.so"
for f in PP-OCRv6_det_small.onnx PP-OCRv6_rec_small.onnx ch_ppocr_mobile_v2.0_cls_mobile.onnx; do
    install -m 0644 "$(readlink -f "$ROOT/.tools/models/ppocr/$f")" "$FS/opt/docflow/models/ocr/$f"
done
for f in model.safetensors tokenizer.json config.json; do
    install -m 0644 "$(readlink -f "$ROOT/.tools/models/minilm/$f")" "$FS/opt/docflow/models/minilm/$f"
done

# The shared libraries every binary and library links, as ldd resolves them here, each
# under its own name, and the Debian package it came from (for the SBOM and its copyright).
declare -A PKGS=()
package_of() {
    local path="$1" real
    real="$(readlink -f "$path")"
    for p in "$path" "$real" "/usr$path" "/usr$real" "${path#/usr}" "${real#/usr}"; do
        dpkg-query -S "$p" 2>/dev/null | head -1 | cut -d: -f1 && return 0
    done
    return 1
}
while read -r lib path; do
    [ -n "$path" ] || continue
    install -m 0644 "$(readlink -f "$path")" "$FS/usr/lib/x86_64-linux-gnu/$lib"
    pkg="$(package_of "$path")" || { echo "no Debian package owns $path" >&2; exit 1; }
    PKGS[$pkg]=1
done < <(for f in "$FS"/usr/local/bin/* "$FS"/opt/docflow/lib/*.so; do ldd "$f"; done |
    awk '$2 == "=>" && $3 ~ /^\// { print $1, $3 }' | sort -u)
loader="$(readlink -f /lib64/ld-linux-x86-64.so.2)"
install -m 0755 "$loader" "$FS/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2"
ln -s ../lib/x86_64-linux-gnu/ld-linux-x86-64.so.2 "$FS/usr/lib64/ld-linux-x86-64.so.2"
PKGS[$(package_of /lib64/ld-linux-x86-64.so.2)]=1
# The CA bundle, for TLS to brokers and databases with public certificates.
install -m 0644 /etc/ssl/certs/ca-certificates.crt "$FS/etc/ssl/certs/ca-certificates.crt"
PKGS[ca-certificates]=1
for pkg in "${!PKGS[@]}"; do
    base="${pkg%%:*}"
    mkdir -p "$FS/usr/share/doc/$base"
    install -m 0644 "/usr/share/doc/$base/copyright" "$FS/usr/share/doc/$base/copyright"
done

cat >"$FS/etc/passwd" <<'EOF'
root:x:0:0:root:/root:/usr/sbin/nologin
docflow:x:10001:10001:docflow:/var/lib/docflow:/usr/sbin/nologin
EOF
cat >"$FS/etc/group" <<'EOF'
root:x:0:
docflow:x:10001:
EOF
printf 'hosts: files dns\n' >"$FS/etc/nsswitch.conf"
# Empty: the runtime mounts its own over them (without them a chroot resolves no names).
: >"$FS/etc/hosts"
: >"$FS/etc/resolv.conf"
chown 10001:10001 "$FS/var/lib/docflow"
find "$FS" -exec touch -h -d "@$EPOCH" {} +

echo "==> SBOM"
mkdir -p "$OUT"
SBOM="$OUT/$NAME-$VERSION.sbom.json"
python3 "$ROOT/scripts/image-sbom.py" --rootfs "$FS" --lock "$ROOT/Cargo.lock" \
    --image "$NAME:$TAG" --revision "$REVISION" --created "$CREATED" \
    --packages "${!PKGS[@]}" >"$SBOM"
install -m 0644 "$SBOM" "$FS/usr/share/doc/docflow-sbom.json"
# Every time, directories' included (adding a file just changed its directory's).
find "$FS" -exec touch -h -d "@$EPOCH" {} +

echo "==> OCI image (umoci)"
LAYOUT="$WORK/oci"
BUNDLE="$WORK/bundle"
rm -rf "$LAYOUT" "$BUNDLE"
umoci init --layout "$LAYOUT"
umoci new --image "$LAYOUT:$TAG"
umoci unpack --image "$LAYOUT:$TAG" "$BUNDLE" >/dev/null
cp -a "$FS/." "$BUNDLE/rootfs/"
touch -h -d "@$EPOCH" "$BUNDLE/rootfs"
# The layer before the volume is declared: repack leaves a declared volume's path out.
umoci repack --image "$LAYOUT:$TAG" --history.created "$CREATED" \
    --history.created_by "scripts/build-image.sh: root filesystem" "$BUNDLE"
rm -rf "$BUNDLE"
umoci config --image "$LAYOUT:$TAG" --created "$CREATED" --history.created "$CREATED" \
    --history.created_by "scripts/build-image.sh: config" \
    --author "docflow" --architecture amd64 --os linux \
    --config.user 10001:10001 --config.workingdir /var/lib/docflow \
    --config.env PATH=/usr/local/bin:/usr/bin \
    --config.env DOCFLOW_PDFIUM_LIB=/opt/docflow/lib/libpdfium.so \
    --config.env DOCFLOW_ONNXRUNTIME_LIB=/opt/docflow/lib/libonnxruntime.so \
    --config.env DOCFLOW_OCR_MODELS=/opt/docflow/models/ocr \
    --config.env DOCFLOW_EMBED_MODEL_DIR=/opt/docflow/models/minilm \
    --config.env DOCFLOW_OBJECT_DIR=/var/lib/docflow/objects \
    --config.volume /var/lib/docflow \
    --config.exposedports 8080/tcp --config.exposedports 8081/tcp --config.exposedports 9090/tcp \
    --config.cmd docflow --config.cmd --help \
    --config.label "org.opencontainers.image.title=docflow" \
    --config.label "org.opencontainers.image.version=$VERSION" \
    --config.label "org.opencontainers.image.revision=$REVISION" \
    --config.label "org.opencontainers.image.created=$CREATED" \
    --config.label "org.opencontainers.image.licenses=Apache-2.0" \
    --config.label "org.opencontainers.image.description=docflow: documents in, text, embeddings, thumbnails and analytics out, over Kafka. One image, every service: run docflow-ingest, docflow-registry, docflow-thumbnails, docflow-ocr-embeddings, docflow-analytics-rollup or docflow"
umoci gc --layout "$LAYOUT"

echo "==> archives"
OCI_TAR="$OUT/$NAME-$VERSION.oci.tar"
DOCKER_TAR="$OUT/$NAME-$VERSION.docker.tar"
rm -f "$OCI_TAR" "$DOCKER_TAR"
# An oci-archive is the layout as a tar; written by tar with fixed order, owners and times it
# is the same file for the same sources (skopeo's own oci-archive is not).
tar --sort=name --mtime="@$EPOCH" --owner=0 --group=0 --numeric-owner --mode=u+rw,go+r \
    --format=posix --pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime \
    -C "$LAYOUT" -cf "$OCI_TAR" .
skopeo copy --quiet "oci:$LAYOUT:$TAG" "docker-archive:$DOCKER_TAR:$NAME:$TAG"
# The manifest's digest is what a registry shows after a push (`skopeo copy` keeps it); the
# config's is the image ID `docker load` prints.
DIGEST="$(skopeo inspect --format '{{.Digest}}' "oci:$LAYOUT:$TAG")"
IMAGE_ID="$(skopeo inspect --raw "oci:$LAYOUT:$TAG" | python3 -c 'import json,sys; print(json.load(sys.stdin)["config"]["digest"])')"
printf '%s\n' "$DIGEST" >"$OUT/$NAME-$VERSION.digest"
unpacked="$(du -sb "$FS" | cut -f1)"
layer="$(find "$LAYOUT/blobs" -type f -size +1M -printf '%s\n' | sort -n | tail -1)"
echo "image $NAME:$TAG"
echo "  manifest digest $DIGEST (docker load's image ID: $IMAGE_ID)"
echo "  root filesystem $((unpacked / 1048576)) MiB unpacked; layer $((layer / 1048576)) MiB gzip; docker-archive $(($(stat -c %s "$DOCKER_TAR") / 1048576)) MiB"
echo "  $OCI_TAR"
echo "  $DOCKER_TAR (docker load -i)"
echo "  $SBOM"
echo "  built in $(($(date +%s) - start)) s"
