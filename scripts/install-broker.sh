#!/usr/bin/env bash
# Installs the embedded broker (Nisshi, Kafka-API compatible) once into a cache outside the
# clone and links it as .tools/bin/nisshi. The build takes ~35 minutes on 2 cores (beside
# the workspace's, as `make run` starts it), so it is reused whenever the cached binary
# reports the pinned version.
#
# Fallback: if Nisshi does not build, the same broker before its rename (`tansu` 0.6.0) is
# installed instead and linked under the same name; both take the same `broker` flags.
set -euo pipefail

NISSHI_VERSION="${NISSHI_VERSION:-0.8.1}"
TANSU_VERSION="${TANSU_VERSION:-0.6.0}"
CACHE="${DOCFLOW_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/docflow}"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
LINK="$ROOT/.tools/bin/nisshi"

mkdir -p "$ROOT/.tools/bin" "$CACHE/logs"

have() { # $1 binary, $2 expected version
    [ -x "$1" ] && "$1" --version 2>/dev/null | grep -q " $2\$"
}

nisshi_bin="$CACHE/nisshi-$NISSHI_VERSION/bin/nisshi"
tansu_bin="$CACHE/tansu-$TANSU_VERSION/bin/tansu"

if have "$nisshi_bin" "$NISSHI_VERSION"; then
    bin="$nisshi_bin"
elif have "$tansu_bin" "$TANSU_VERSION"; then
    bin="$tansu_bin"
else
    log="$CACHE/logs/nisshi-$NISSHI_VERSION-install.log"
    echo "==> building nisshi $NISSHI_VERSION into $CACHE (once; ~35 min on 2 cores; log: $log)"
    # rama 0.4 declares rustc 1.96 but compiles on 1.95, hence --ignore-rust-version.
    if cargo install nisshi --version "$NISSHI_VERSION" --locked --ignore-rust-version \
        --root "$CACHE/nisshi-$NISSHI_VERSION" >"$log" 2>&1; then
        bin="$nisshi_bin"
    else
        tail -n 30 "$log" >&2
        log="$CACHE/logs/tansu-$TANSU_VERSION-install.log"
        echo "==> nisshi failed to build; falling back to tansu $TANSU_VERSION (log: $log)" >&2
        cargo install tansu --version "$TANSU_VERSION" --locked \
            --root "$CACHE/tansu-$TANSU_VERSION" >"$log" 2>&1 || { tail -n 30 "$log" >&2; exit 1; }
        bin="$tansu_bin"
    fi
fi

ln -sfn "$bin" "$LINK"
echo "broker: $("$LINK" --version) at $LINK -> $bin"
