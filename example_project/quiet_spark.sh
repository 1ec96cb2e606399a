#!/usr/bin/env bash
# Run a command that starts Spark (quiet_spark.sh CMD ARGS...) as the demo does: Spark's
# log at ERROR from example_project/spark-conf, and without the one line the JVM prints
# at start that no configuration silences ("WARNING: Using incubator modules:
# jdk.incubator.vector": Spark's launcher always adds that module). The command's stderr
# joins its stdout; everything else passes through, in order; its exit status is kept.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
export SPARK_CONF_DIR="$here/spark-conf"
export PYTHONUNBUFFERED=1  # the job's lines as they come, not when the pipe's buffer fills
"$@" 2>&1 | sed -u '/^WARNING: Using incubator modules: jdk\.incubator\.vector$/d'
