# The two commands of the README. Each one sets up what it needs first (idempotent).
.PHONY: setup setup-dev demo test lint clean

setup:
	@bash jobs/setup/bootstrap.sh

setup-dev:
	@bash jobs/setup/bootstrap.sh dev

demo: setup
	@.venv/bin/seedance demo

test: setup-dev
	@.venv/bin/ruff check .
	@.venv/bin/mypy
	@.venv/bin/python -m pytest

lint: setup-dev
	@.venv/bin/ruff check .
	@.venv/bin/mypy
	@.venv/bin/ruff format --check .

clean:
	rm -rf .venv .cache .seedance
