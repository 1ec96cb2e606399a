#!/usr/bin/env bash
# Run the interactive demo of redisq_django against the example project.
# Placeholder: the `redisq_demo` management command is provided by the package.
# REDISQ_TEST_REDIS_SERVER (exported by `make demo`) names the redis-server binary.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
exec .venv/bin/python example_project/manage.py redisq_demo "$@"
