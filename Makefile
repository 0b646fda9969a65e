# The two set-up commands of the README. Both create or reuse .venv, install everything, then run.
.PHONY: quickstart test lint setup

setup:
	bash scripts/setup.sh

# Installs everything and runs the main job on the embedded default.
quickstart: setup
	.venv/bin/inhabit quickstart

# Installs everything (with Ray, whose placement tests are part of the suite and whose whole-run
# and fault tests are slow, and, as root with apt, Chromium for the browser tests of `inhabit
# view`) and runs lint and the test suite: what CI runs first (.ci/run adds slow tests that fit).
# Slow tests: make test PYTEST_ARGS="-m slow".
PYTEST_ARGS ?= -m "not slow and not gpu"
test: export INHABIT_EXTRAS = ray
test: export INHABIT_BROWSER = 1
test: setup
	.venv/bin/ruff check src tests bench
	.venv/bin/python -m pytest $(PYTEST_ARGS)

lint: setup
	.venv/bin/ruff check src tests bench
	.venv/bin/ruff format --check src tests bench
