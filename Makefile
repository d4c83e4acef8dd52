# The two commands of the README. Each one sets up what it needs first (idempotent).
.PHONY: setup setup-dev demo test lint clean

setup:
	@bash jobs/setup/bootstrap.sh

setup-dev:
	@bash jobs/setup/bootstrap.sh dev

demo: setup
	@.venv/bin/seedance demo

# a failed run ends with the failed tests' names and reasons (tests/conftest.py), so that a
# log's last lines say which failed and why
test: setup-dev
	@.venv/bin/ruff check .
	@.venv/bin/mypy
	@.venv/bin/python -m pytest || { rc=$$?; echo "failed:"; \
	  sed 's/^/  /' .pytest_cache/failure-reasons.txt 2>/dev/null; exit $$rc; }

lint: setup-dev
	@.venv/bin/ruff check .
	@.venv/bin/mypy
	@.venv/bin/ruff format --check .

clean:
	rm -rf .venv .cache .seedance
