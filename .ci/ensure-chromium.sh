#!/usr/bin/env bash
# Make sure Debian's chromium is installed for the browser tests (tests/browser).
#
# Playwright cannot download its own browser build here, so the tests drive
# /usr/bin/chromium (see tests/browser/conftest.py). When it is missing and we are
# root with apt-get, install the `chromium` package; otherwise say so and go on
# (the browser tests then fail with a message naming this script).
#
# Environment:
#   REDISQ_CHROMIUM   the chromium binary to check (default: /usr/bin/chromium).
set -euo pipefail

chromium="${REDISQ_CHROMIUM:-/usr/bin/chromium}"

log() { printf 'ensure-chromium: %s\n' "$*" >&2; }

if [ -x "$chromium" ]; then
    exit 0
fi

if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
    log "$chromium not found; installing the Debian package chromium (apt-get update && apt-get install -y chromium)"
    if apt-get update >&2 \
        && DEBIAN_FRONTEND=noninteractive apt-get install -y chromium >&2 \
        && [ -x "$chromium" ]; then
        log "installed: $("$chromium" --version 2>/dev/null)"
        exit 0
    fi
    log "apt-get install of chromium failed; the browser tests (tests/browser) will fail"
    exit 0
fi

log "$chromium not found and cannot install it (needs root with apt-get);" \
    "the browser tests (tests/browser) will fail: install Debian's chromium package"
exit 0
