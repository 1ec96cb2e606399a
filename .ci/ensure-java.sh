#!/usr/bin/env bash
# Make sure a Java 17+ runtime is available for PySpark (tests/pipeline, make
# bench-pipeline). Cheap when it is there: one `java -version`.
#
# Looks at $JAVA_HOME/bin/java, then java on PATH; when neither is 17 or newer and we
# are root with apt-get, installs Debian's openjdk-17-jre-headless. Otherwise only
# warns: the Spark tests then fail with PySpark's "Java gateway process exited" error.
# Prints the java binary used.
set -euo pipefail

log() { printf 'ensure-java: %s\n' "$*" >&2; }

# Major version of a java binary ("17.0.15" -> 17, "1.8.0_392" -> 8), or nothing.
major() {
    "$1" -version 2>&1 | sed -n 's/.*version "\([0-9][0-9.]*\).*/\1/p' | head -n 1 |
        awk -F. '{ print ($1 == 1 ? $2 : $1) }'
}

find_java() {
    local candidate version
    for candidate in "${JAVA_HOME:+$JAVA_HOME/bin/java}" "$(command -v java || true)"; do
        [ -n "$candidate" ] && [ -x "$candidate" ] || continue
        version="$(major "$candidate")"
        if [ -n "$version" ] && [ "$version" -ge 17 ]; then
            printf '%s\n' "$candidate"
            return 0
        fi
        log "$candidate is Java ${version:-?}; PySpark 4 needs 17 or newer"
    done
    return 1
}

if java="$(find_java)"; then
    printf '%s\n' "$java"
    exit 0
fi

if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
    log "no Java 17+ found; installing Debian package openjdk-17-jre-headless"
    if apt-get update >&2 \
        && DEBIAN_FRONTEND=noninteractive apt-get install -y openjdk-17-jre-headless >&2 \
        && java="$(find_java)"; then
        printf '%s\n' "$java"
        exit 0
    fi
    log "apt-get install of openjdk-17-jre-headless failed"
fi

log "no Java 17+ available: the Spark tests will fail" \
    "(install openjdk-17-jre-headless or set JAVA_HOME)"
