#!/usr/bin/env bash
# Installs the official Confluent Python client (confluent-kafka with its Schema Registry
# client and Avro serdes) once into a virtualenv in a cache outside the clone and links it as
# .tools/venv-confluent. services/registry/tests/python/confluent_interop.py runs with it to
# prove that stock Confluent clients work against our registry and our broker.
#
# Every package is pinned (the client and all of its dependencies), so the interop check runs
# the same code everywhere. The wheel of confluent-kafka bundles librdkafka; nothing is
# compiled. The venv is reused while its marker matches the pins and the client imports.
set -euo pipefail

CONFLUENT_KAFKA_VERSION="2.16.1"
# confluent-kafka[avro,schemaregistry]==2.16.1 and its whole dependency closure on
# CPython >= 3.10 (below 3.10 the client wants httpx instead of httpx2).
PINS=(
    "confluent-kafka[avro,schemaregistry]==$CONFLUENT_KAFKA_VERSION"
    "anyio==4.16.0"
    "attrs==26.1.0"
    "Authlib==1.9.10"
    "avro==1.12.2"
    "cachetools==8.0.2"
    "certifi==2026.10.19.post1"
    "cffi==2.1.1"
    "charset-normalizer==3.5.3"
    "cryptography==50.0.2"
    "fastavro==1.13.1"
    "h11==0.16.0"
    "httpcore2==2.16.2"
    "httpx2==2.16.2"
    "idna==3.20"
    "joserfc==1.8.0"
    "pycparser==3.12"
    "requests==2.34.2"
    "truststore==0.10.5"
    "typing_extensions==4.16.0"
    "urllib3==2.8.0"
)
CACHE="${DOCFLOW_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/docflow}"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
DEST="$CACHE/venv-confluent-$CONFLUENT_KAFKA_VERSION"
LINK="$ROOT/.tools/venv-confluent"
MARKER="$DEST/.docflow-pins"
WANT="$(printf '%s\n' "${PINS[@]}")"

usable() { # the venv was finished with these pins and its interpreter still runs the client
    [ -f "$MARKER" ] && [ "$(cat "$MARKER")" = "$WANT" ] &&
        "$DEST/bin/python" -c "import confluent_kafka, fastavro, sys
from confluent_kafka.schema_registry.avro import AvroSerializer
sys.exit(confluent_kafka.__version__ != '$CONFLUENT_KAFKA_VERSION')" 2>/dev/null
}

mkdir -p "$ROOT/.tools" "$CACHE"
if ! usable; then
    PYTHON="$(command -v python3 || command -v python)"
    if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 10))'; then
        echo "install-python-clients: $PYTHON is $("$PYTHON" -V 2>&1); Python >= 3.10 is required" >&2
        exit 1
    fi
    echo "==> creating $DEST with confluent-kafka $CONFLUENT_KAFKA_VERSION ($("$PYTHON" -V 2>&1))"
    rm -rf "$DEST"
    "$PYTHON" -m venv "$DEST"
    "$DEST/bin/python" -m pip install --quiet --disable-pip-version-check --no-input \
        --only-binary :all: "${PINS[@]}"
    printf '%s\n' "$WANT" >"$MARKER.partial"
    mv "$MARKER.partial" "$MARKER"
    usable || { echo "install-python-clients: $DEST does not import confluent_kafka $CONFLUENT_KAFKA_VERSION" >&2; exit 1; }
fi
ln -sfn "$DEST" "$LINK"
echo "python clients: confluent-kafka $CONFLUENT_KAFKA_VERSION at $LINK -> $DEST"
