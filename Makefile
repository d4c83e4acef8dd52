# The two commands of the README. Each one sets up what it needs first (idempotent).
.PHONY: setup demo test lint clean

setup:
	@bash jobs/setup/bootstrap.sh

demo: setup
	@.venv/bin/seedance demo

test: setup
	@.venv/bin/ruff check .
	@.venv/bin/python -m pytest

lint: setup
	@.venv/bin/ruff check .
	@.venv/bin/ruff format --check .

clean:
	rm -rf .venv .cache .seedance
