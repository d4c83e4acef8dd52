# The two commands of the README. Each one sets up what it needs first (idempotent).
.PHONY: setup setup-dev demo test lint clean

setup:
	@bash jobs/setup/bootstrap.sh

setup-dev:
	@bash jobs/setup/bootstrap.sh dev

demo: setup
	@.venv/bin/seedance demo

# a failed run ends with the failed tests' names, so that a log's last lines say which failed
test: setup-dev
	@.venv/bin/ruff check .
	@.venv/bin/mypy
	@.venv/bin/python -m pytest || { rc=$$?; .venv/bin/python -c 'import json; \
	  print("failed:", *json.load(open(".pytest_cache/v/cache/lastfailed")), sep="\n  ")' \
	  2>/dev/null; exit $$rc; }

lint: setup-dev
	@.venv/bin/ruff check .
	@.venv/bin/mypy
	@.venv/bin/ruff format --check .

clean:
	rm -rf .venv .cache .seedance
