#!/usr/bin/env bash
# Make sure PostgreSQL's initdb and pg_ctl are available for the tests that run
# against PostgreSQL (tests/support/postgres_server.py starts a private cluster).
#
# Looks in $REDISQ_TEST_PG_BIN, /usr/lib/postgresql/*/bin and PATH; when none has
# them and we are root with apt-get, installs Debian's postgresql package (and stops
# the service it starts: the tests never use it). Otherwise only warns: the tests
# that need PostgreSQL then fail with a message saying so.
set -euo pipefail

log() { printf 'ensure-postgres: %s\n' "$*" >&2; }

has_tools() { [ -x "$1/initdb" ] && [ -x "$1/pg_ctl" ]; }

find_bin() {
    if [ -n "${REDISQ_TEST_PG_BIN:-}" ]; then
        has_tools "$REDISQ_TEST_PG_BIN" && { printf '%s\n' "$REDISQ_TEST_PG_BIN"; return 0; }
        log "REDISQ_TEST_PG_BIN=$REDISQ_TEST_PG_BIN has no initdb/pg_ctl; ignoring it"
    fi
    local dir
    for dir in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do
        has_tools "$dir" && { printf '%s\n' "$dir"; return 0; }
    done
    if command -v initdb >/dev/null 2>&1; then
        dir="$(dirname "$(readlink -f "$(command -v initdb)")")"
        has_tools "$dir" && { printf '%s\n' "$dir"; return 0; }
    fi
    return 1
}

if bin="$(find_bin)"; then
    printf '%s\n' "$bin"
    exit 0
fi

if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
    log "initdb not found; installing Debian package postgresql"
    if apt-get update >&2 \
        && DEBIAN_FRONTEND=noninteractive apt-get install -y postgresql >&2; then
        # The package may start a cluster on 5432; the tests never use it.
        service postgresql stop >/dev/null 2>&1 || true
        if bin="$(find_bin)"; then
            printf '%s\n' "$bin"
            exit 0
        fi
    fi
    log "apt-get install of postgresql failed"
fi

log "no PostgreSQL initdb/pg_ctl available: the PostgreSQL tests will fail" \
    "(install Debian's postgresql package or set REDISQ_TEST_PG_BIN)"
