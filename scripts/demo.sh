#!/usr/bin/env bash
# Runs the example project end to end against a private redis-server (free loopback
# port, temporary directory), which is stopped afterwards. Called by `make demo`.
set -euo pipefail
cd "$(dirname "$0")/.."

server="${REDISQ_TEST_REDIS_SERVER:-$(command -v redis-server || true)}"
if [ -z "$server" ]; then
  echo "demo: no redis-server found; run it with 'make demo', which installs one." >&2
  exit 1
fi
port="$(.venv/bin/python -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
workdir="$(mktemp -d)"
"$server" --port "$port" --bind 127.0.0.1 --dir "$workdir" --save "" --daemonize no \
  --logfile "$workdir/redis.log" &
redis_pid=$!
trap 'kill "$redis_pid" 2>/dev/null; wait "$redis_pid" 2>/dev/null; rm -rf "$workdir"' EXIT
for _ in $(seq 50); do
  .venv/bin/python -c "import redis, sys; redis.Redis(port=$port).ping()" 2>/dev/null && break
  sleep 0.1
done

export REDISQ_URL="redis://127.0.0.1:$port/0"
export EXAMPLE_DB="$workdir/db.sqlite3"
echo "== redis-server on 127.0.0.1:$port, database $EXAMPLE_DB"
cd example_project
../.venv/bin/python manage.py migrate --verbosity 0
../.venv/bin/python manage.py redisq_demo
