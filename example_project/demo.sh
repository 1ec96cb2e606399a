#!/usr/bin/env bash
# `make demo`: the orders example end to end. Starts a private redis-server for the
# demo (free loopback port, data in example_project/.demo/), creates a staff user and
# orders, runs the consumers until the queue is drained, prints what happened, archives
# the history to Parquet with Spark and reads it back, and leaves Redis running so you
# can look at the dead letters in the admin (and, after an incident step and a few minutes
# of background traffic during the Spark steps, a console worth looking at). Also enqueues a Django task, runs it with
# `runconsumer --tasks --burst` and prints its result. Spark's steps print their own lines
# only (quiet_spark.sh). Ends with the line that opens the admin on the demo's Redis.
#
# DEMO_PYTHON: the interpreter (make demo passes .venv-demo's, where the package is
# installed with its pipeline extra).
set -euo pipefail
cd "$(dirname "$0")/.."  # the repository root
PY="${DEMO_PYTHON:-$PWD/.venv-demo/bin/python}"
demo="$PWD/example_project/.demo"

server="${REDISQ_TEST_REDIS_SERVER:-$(command -v redis-server || true)}"
if [ -z "$server" ]; then
  echo "demo: no redis-server found; run 'make demo', which installs one." >&2
  exit 1
fi
if [ -f "$demo/redis.pid" ]; then  # a previous demo's Redis
  kill "$(cat "$demo/redis.pid")" 2>/dev/null || true
  sleep 0.3
fi
rm -rf "$demo" && mkdir -p "$demo"
port="$("$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
"$server" --port "$port" --bind 127.0.0.1 --dir "$demo" --save "" --appendonly yes \
  --daemonize yes --pidfile "$demo/redis.pid" --logfile "$demo/redis.log"
for _ in $(seq 50); do
  "$PY" -c "import redis; redis.Redis(port=$port).ping()" 2>/dev/null && break
  sleep 0.1
done

export REDISQ_URL="redis://127.0.0.1:$port/0"
export EXAMPLE_DB="$demo/db.sqlite3"
export EXAMPLE_ARCHIVE="$demo/archive"
# Spark: Python workers on the demo's interpreter, bound to loopback, logging errors only.
export PYSPARK_PYTHON="$PY" SPARK_LOCAL_IP=127.0.0.1
export SPARK_CONF_DIR="$PWD/example_project/spark-conf"
# What another terminal needs to work on the demo: its Redis, database and archive, Spark's
# settings, and its interpreter first on PATH (so `python` is the demo's).
cat > "$demo/env" <<ENV
export REDISQ_URL=$REDISQ_URL
export EXAMPLE_DB=$EXAMPLE_DB
export EXAMPLE_ARCHIVE=$EXAMPLE_ARCHIVE
export PYSPARK_PYTHON=$PYSPARK_PYTHON
export SPARK_LOCAL_IP=$SPARK_LOCAL_IP
export SPARK_CONF_DIR=$SPARK_CONF_DIR
export PATH="$(dirname "$PY"):\$PATH"
ENV
cd example_project
echo "== Redis for the demo on 127.0.0.1:$port; database $EXAMPLE_DB"
"$PY" manage.py migrate --verbosity 0
# Register the consumers before any order exists, so they see every order.
"$PY" manage.py shell --verbosity 0 -c "
from redisq_django.connection import get_broker
for name in ('billing', 'email', 'fraud-check'):
    get_broker().ensure_consumer('orders', name)
get_broker().ensure_consumer('ledger', 'postings')
"
echo "== creating orders"
"$PY" manage.py shop_demo setup
echo "== running the consumers of 'orders' until drained (runconsumer orders --burst)"
"$PY" manage.py runconsumer orders --burst --stats-interval 0
echo "== what happened"
"$PY" manage.py shop_demo report
echo "== a Django task: enqueue shop.tasks.order_summary, run it (runconsumer --tasks --burst)"
task_id="$("$PY" manage.py shell --verbosity 0 -c "
from shop.tasks import order_summary
print(order_summary.enqueue(currency='EUR').id)")"
"$PY" manage.py runconsumer --tasks --burst --stats-interval 0
"$PY" manage.py shell --verbosity 0 -c "
from shop.tasks import order_summary
result = order_summary.get_result('$task_id')
print(f'task {result.id}: {result.status}, attempts {result.attempts}, returned {result.return_value}')"
echo "== a periodic schedule (shop/schedules.py: every 2 s to queue 'stock'), no beat process:"
echo "   three runconsumer processes evaluate it for 8 s; each tick is published once"
pids=()
for n in 1 2 3; do
  "$PY" manage.py runconsumer stock --stats-interval 0 >"$demo/schedule-worker-$n.log" 2>&1 &
  pids+=("$!")
done
# Each prints its banner once started (a loaded machine can take seconds to set Django
# up); a SIGTERM before that would kill it with 143 instead of stopping it warm.
for n in 1 2 3; do
  for _ in $(seq 600); do
    [ -s "$demo/schedule-worker-$n.log" ] && break
    sleep 0.1
  done
done
sleep 8
kill -TERM "${pids[@]}"  # a warm stop: each exits 0
wait "${pids[@]}"
"$PY" manage.py shop_demo schedule
echo "== an incident for the console: messages for deleted orders, a malformed one, two delayed,"
echo "   and a refund the ledger cannot book, holding back its customer's next postings"
"$PY" manage.py shop_demo incident
# Its worker also consumes 'stock': every worker fires the schedule's ticks, and a queue
# with ticks and no worker would read "backlog, no instance alive" in the console.
"$PY" manage.py runconsumer orders stock --burst --stats-interval 0 >"$demo/incident-worker.log" 2>&1
"$PY" manage.py shop_demo report | sed -n '/^dead letters/,$p'
# Spark's steps take a few minutes: meanwhile, an order every 3 s and a worker on 'orders'
# and 'stock', so the console's trends span those minutes. Both stop before the demo ends.
echo "== in the background while Spark works: an order every 3 s and a worker (runconsumer orders stock ledger)"
"$PY" manage.py shop_demo traffic --every 3 >"$demo/traffic.log" 2>&1 &
traffic=$!
"$PY" manage.py runconsumer orders stock ledger --stats-interval 0 >"$demo/worker.log" 2>&1 &
worker=$!
trap 'kill -TERM "$traffic" "$worker" 2>/dev/null || true' EXIT
# History is on in this project: every settle above was recorded as a lifecycle event.
echo "== archiving the history to Parquet with Spark (manage.py redisq_pipeline archive --once)"
./quiet_spark.sh "$PY" manage.py redisq_pipeline archive --once --master 'local[2]'
echo "== read back from the archive ($EXAMPLE_ARCHIVE) with Spark"
./quiet_spark.sh "$PY" manage.py shop_demo history
echo "== the history report (manage.py redisq_pipeline report)"
./quiet_spark.sh "$PY" manage.py redisq_pipeline report \
  --since "$(date -u +%Y-%m-%dT00:00:00)" --master 'local[2]'
kill -TERM "$traffic" 2>/dev/null || true
wait "$traffic" || true  # SIGTERM ends it (143)
kill -TERM "$worker"  # a warm stop: it finishes what it holds and exits 0
wait "$worker"
trap - EXIT
"$PY" manage.py shell --verbosity 0 -c "
from redisq_django.deadletters.sinking import sink_all
from redisq_django.models import DeadLetter
from shop.models import Order
from redisq_django.connection import get_broker
sink_all()
dead = DeadLetter.objects.filter(status=DeadLetter.Status.DEAD).count()
print(f'{Order.objects.count()} orders in all; {dead} dead letters to look at')
stats = get_broker().stats('ledger')
postings = next(c for c in stats.consumers if c.name == 'postings')
print(f'ledger ({len(stats.partitions)} partitions): {postings.waiting_retry} posting retrying, '
      f'{postings.held_back} held back behind it')"
cat <<TXT

== the history report: example_project/.demo/archive/reports/latest/report.html (any
   browser opens it; the admin's "Overview (live)" page links to it)
== the demo's Redis keeps running; stop it with: kill \$(cat example_project/.demo/redis.pid)
== the admin and a worker on the demo's Redis, from this directory, each in a terminal:
source example_project/.demo/env && python example_project/manage.py runserver  # http://127.0.0.1:8000/admin/ (admin/admin); a worker: the same with runconsumer orders stock ledger
== in the console: problems first on the Overview, trends over the last minutes, dead letters
   with three different errors (Dead letters by error), two delayed reminders, the schedule
   stock-check, the ledger's 4 partitions side by side, and its consumer "postings" with a
   held key: the refund retrying, two postings waiting behind it (End it from its page)
TXT
