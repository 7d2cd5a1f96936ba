#!/usr/bin/env bash
# `make image-test`: builds the image (scripts/build-image.sh), checks both archives with
# skopeo and the layout with umoci, unpacks the oci-archive into a bundle and runs the test
# that starts every service from it (tools/testbed/tests/chaos/image.rs) against the stack's
# broker and the database outside it. Root only (mount namespaces, read-only binds).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
CACHE="${DOCFLOW_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/docflow}"
OUT="${DOCFLOW_IMAGE_OUT:-$ROOT/dist}"
VERSION="$(sed -n '/^\[workspace.package\]/,/^\[/s/^version = "\(.*\)"/\1/p' "$ROOT/Cargo.toml")"

"$ROOT/scripts/build-image.sh"

OCI_TAR="$OUT/docflow-$VERSION.oci.tar"
DOCKER_TAR="$OUT/docflow-$VERSION.docker.tar"
want="$(cat "$OUT/docflow-$VERSION.digest")"
echo "==> checking the archives"
got="$(skopeo inspect --format '{{.Digest}}' "oci-archive:$OCI_TAR")"
[ "$got" = "$want" ] || { echo "oci-archive digest $got, not $want" >&2; exit 1; }
user="$(skopeo inspect --config --format '{{.Config.User}}' "docker-archive:$DOCKER_TAR")"
[ "$user" = "10001:10001" ] || { echo "docker-archive user $user" >&2; exit 1; }
echo "    oci-archive $got; docker-archive user $user"

echo "==> infra/compose.yaml (docker-compose config, Debian's docker-compose: no daemon needed)"
command -v docker-compose >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker-compose >/dev/null
KAFKA_BOOTSTRAP_SERVERS=kafka:9092 DATABASE_URL=postgres://docflow@db/docflow DOCFLOW_INGEST_TOKENS=t=acme \
    docker-compose -f "$ROOT/infra/compose.yaml" config -q
echo "    valid"

TEST="$CACHE/image/test"
rm -rf "$TEST"
mkdir -p "$TEST"
skopeo copy --quiet "oci-archive:$OCI_TAR" "oci:$TEST/layout:$VERSION"
umoci stat --image "$TEST/layout:$VERSION" >/dev/null
umoci unpack --image "$TEST/layout:$VERSION" "$TEST/bundle" >/dev/null
echo "==> the services from the image (tools/testbed/tests/chaos/image.rs)"
cd "$ROOT"
export DOCFLOW_IMAGE_BUNDLE="$TEST/bundle"
if cargo nextest --version >/dev/null 2>&1; then
    # The whole workspace's test build (what make test built), filtered: a build of this
    # package alone would compile its dependencies again with other features.
    cargo nextest run --workspace --run-ignored only -E 'binary(chaos) & test(the_image_runs)' --no-fail-fast
else
    cargo test --workspace --test chaos -- --ignored the_image_runs
fi
