#!/usr/bin/env bash
# One-time (and idempotent) set-up of a fresh machine: the virtual environment with the
# pinned Python packages, and the JVM jars (Kafka broker, Flink and Spark Kafka connectors) from
# Maven Central. Each step is skipped when its inputs have not changed since the last run,
# so a rerun downloads nothing. Caches: pip's and Maven's own (~/.cache/pip, ~/.m2).
set -euo pipefail
# usage: bootstrap.sh [dev]   -- "dev" adds the test tools (pytest, ruff, peer packages)
extras=${1:-}
cd "$(dirname "$0")/../.."
root=$(pwd)
venv="$root/.venv"
jars="$root/.cache/jars"
stamp_dir="$root/.cache/stamps"
mkdir -p "$stamp_dir"

need() { command -v "$1" >/dev/null 2>&1 || { echo "error: '$1' not found. $2" >&2; exit 1; }; }
need python3.11 "Install Python 3.11 (the pinned apache-flink 2.2.0 supports 3.9-3.12; this project pins 3.11)." 2>/dev/null || need python3 "Install Python 3.11."
need java "Install a Java 17 runtime (Debian: apt-get install openjdk-17-jre-headless)."
need mvn "Install Maven (Debian: apt-get install maven); it fetches the Kafka and Flink jars."

# The integration tests start a private PostgreSQL server (pipelines/stack/postgres.py):
# the dev set-up needs its binaries. Debian keeps them in /usr/lib/postgresql/<v>/bin.
has_postgres() {
  local dir
  dir=$(pg_config --bindir 2>/dev/null || true)
  if [ -n "$dir" ] && [ -x "$dir/initdb" ] && [ -x "$dir/postgres" ]; then return 0; fi
  for dir in /usr/lib/postgresql/*/bin; do
    if [ -x "$dir/initdb" ] && [ -x "$dir/postgres" ]; then return 0; fi
  done
  return 1
}
if [ "$extras" = "dev" ] && ! has_postgres; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
     [ ! -e "$stamp_dir/postgresql" ]; then
    echo "==> PostgreSQL server (Debian package postgresql) for the warehouse tests"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends postgresql \
      >/dev/null
    touch "$stamp_dir/postgresql"
  fi
  has_postgres || { echo "error: the PostgreSQL server (initdb, postgres) is not installed;" \
    "the tests start one. Install it (Debian: sudo apt-get install postgresql)." >&2; exit 1; }
fi

# The dashboard's browser test drives headless Chromium through chromedriver (Debian
# packages chromium and chromium-driver; nothing downloads a browser of its own).
if [ "$extras" = "dev" ] && { [ ! -x /usr/bin/chromium ] || [ ! -x /usr/bin/chromedriver ]; }; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
     [ ! -e "$stamp_dir/chromium" ]; then
    echo "==> Chromium and chromedriver (Debian packages) for the dashboard's browser test"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium \
      chromium-driver fonts-dejavu-core >/dev/null
    touch "$stamp_dir/chromium"
  fi
  [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ] || { echo "error: headless" \
    "Chromium is not installed; the browser test needs it. Install it (Debian: sudo" \
    "apt-get install chromium chromium-driver)." >&2; exit 1; }
fi

py=$(command -v python3.11 || command -v python3)
if ! "$py" -c 'import sys; sys.exit(0 if sys.version_info[:2] == (3, 11) else 1)'; then
  echo "error: $py is not Python 3.11; install 3.11 or put it first on PATH." >&2
  exit 1
fi

hash_of() { cat "$@" | sha256sum | cut -c1-16; }

# the package's C extension (the OTLP scanner) is rebuilt when its source changes
package_files="pyproject.toml setup.py pipelines/codec/otlp_scan.c"
py_hash="$(hash_of $package_files)-${extras:-core}"
# a dev environment also serves the demo: only rebuild when it lacks what is asked for
have=$(cat "$stamp_dir/venv" 2>/dev/null || true)
if [ ! -x "$venv/bin/python" ] || { [ "$have" != "$py_hash" ] && \
     [ "$have" != "$(hash_of $package_files)-dev" ]; }; then
  echo "==> Python environment (.venv): installing pinned packages${extras:+ (with $extras tools)}"
  [ -x "$venv/bin/python" ] || "$py" -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet --upgrade pip
  "$venv/bin/python" -m pip install --quiet --progress-bar off -e ".${extras:+[$extras]}"
  echo "$py_hash" > "$stamp_dir/venv"
  if ! "$venv/bin/python" -c 'from pipelines.codec import _otlp_scan' 2>/dev/null; then
    echo "warning: the C scanner (pipelines/codec/otlp_scan.c) was not built: no C compiler or" \
         "Python headers (gcc, python3.11-dev)? Decoding falls back to pure Python," \
         "several times slower." >&2
  fi
fi

jar_hash=$(hash_of jobs/setup/jars.pom.xml)
if [ ! -d "$jars/kafka" ] || [ ! -d "$jars/flink" ] || [ ! -d "$jars/spark" ] || \
   [ "$(cat "$stamp_dir/jars" 2>/dev/null)" != "$jar_hash" ]; then
  echo "==> JVM jars (.cache/jars): Kafka broker, Flink and Spark Kafka connectors from Maven Central"
  rm -rf "$jars"
  mvn --batch-mode --quiet -f jobs/setup/jars.pom.xml -Dout="$jars" package
  rm -rf jobs/setup/target
  echo "$jar_hash" > "$stamp_dir/jars"
fi

# The job's own JVM classes (pipelines/jvm: the Kafka record framing and event-time stamping
# the streaming source needs, in Java because a source's watermarks are made in the JVM);
# rebuilt when its POM or a source file changes.
jvm_files="pipelines/jvm/pom.xml $(find pipelines/jvm/src -name '*.java' | sort | tr '\n' ' ')"
jvm_hash=$(hash_of $jvm_files)
if [ ! -f "$jars/flink/seedance-flink.jar" ] || [ "$(cat "$stamp_dir/jvm" 2>/dev/null)" != "$jvm_hash" ]; then
  echo "==> Job JVM classes (pipelines/jvm -> .cache/jars/flink/seedance-flink.jar)"
  mvn --batch-mode --quiet -f pipelines/jvm/pom.xml -Dout="$jars/flink" package
  echo "$jvm_hash" > "$stamp_dir/jvm"
fi

# The dev set-up also installs Apache Airflow with the apache-spark provider, in an
# environment of its own (.cache/airflow-venv: Airflow pins many packages):
# tests/integration/test_airflow.py runs the DAGs of jobs/schedules/ under it. Rebuilt when
# its requirements or constraints change; pip's cache serves a rebuild.
airflow_venv="$root/.cache/airflow-venv"
if [ "$extras" = "dev" ]; then
  airflow_files="jobs/setup/airflow-requirements.txt jobs/setup/airflow-constraints.txt"
  airflow_hash=$(hash_of $airflow_files)
  if [ ! -x "$airflow_venv/bin/airflow" ] || \
     [ "$(cat "$stamp_dir/airflow" 2>/dev/null)" != "$airflow_hash" ]; then
    echo "==> Apache Airflow for the schedule tests (.cache/airflow-venv)"
    rm -rf "$airflow_venv"
    "$py" -m venv "$airflow_venv"
    "$airflow_venv/bin/python" -m pip install --quiet --upgrade pip
    "$airflow_venv/bin/python" -m pip install --quiet --progress-bar off \
      -r jobs/setup/airflow-requirements.txt -c jobs/setup/airflow-constraints.txt
    "$airflow_venv/bin/airflow" version >/dev/null
    echo "$airflow_hash" > "$stamp_dir/airflow"
  fi
fi

# The dev set-up also installs a shop's web app stack (Flask and OpenTelemetry's
# auto-instrumentation) in an environment of its own (.cache/webapp-venv: the
# instrumentation pins an API release other than the project's SDK):
# tests/integration/test_web_app.py runs tests/web_app.py under it. Rebuilt when its
# requirements or constraints change.
webapp_venv="$root/.cache/webapp-venv"
if [ "$extras" = "dev" ]; then
  webapp_files="jobs/setup/webapp-requirements.txt jobs/setup/webapp-constraints.txt"
  webapp_hash=$(hash_of $webapp_files)
  if [ ! -x "$webapp_venv/bin/python" ] || \
     [ "$(cat "$stamp_dir/webapp" 2>/dev/null)" != "$webapp_hash" ]; then
    echo "==> a Flask app with OpenTelemetry auto-instrumentation (.cache/webapp-venv)"
    rm -rf "$webapp_venv"
    "$py" -m venv "$webapp_venv"
    "$webapp_venv/bin/python" -m pip install --quiet --progress-bar off \
      -r jobs/setup/webapp-requirements.txt -c jobs/setup/webapp-constraints.txt
    "$webapp_venv/bin/python" -c "import flask, opentelemetry.instrumentation.flask"
    echo "$webapp_hash" > "$stamp_dir/webapp"
  fi
fi

# The dev set-up also builds an OpenTelemetry Collector (receiver otlp, processor batch,
# contrib kafka exporter/receiver) with the Collector's builder, where a Go toolchain is
# found: tests/integration/test_collector.py runs the documented Collector configuration in
# front of the job. Go modules are cached in Go's own module cache; rebuilt when
# otelcol-builder.yaml changes.
otelcol_dir="$root/.cache/otelcol"
if [ "$extras" = "dev" ]; then
  otelcol_hash=$(hash_of jobs/setup/otelcol-builder.yaml)
  if [ ! -x "$otelcol_dir/dist/otelcol-seedance" ] || \
     [ "$(cat "$stamp_dir/otelcol" 2>/dev/null)" != "$otelcol_hash" ]; then
    if command -v go >/dev/null 2>&1; then
      echo "==> OpenTelemetry Collector (.cache/otelcol, built with Go; a few minutes the first time)"
      mkdir -p "$otelcol_dir"
      cp jobs/setup/otelcol-builder.yaml "$otelcol_dir/builder.yaml"
      if (cd "$otelcol_dir" && GOFLAGS=-mod=mod go run \
            go.opentelemetry.io/collector/cmd/builder@v0.165.0 --config builder.yaml \
            > build.log 2>&1); then
        echo "$otelcol_hash" > "$stamp_dir/otelcol"
      else
        echo "warning: building the OpenTelemetry Collector failed (see $otelcol_dir/build.log);" \
             "its integration test will say so" >&2
      fi
    else
      echo "note: no Go toolchain: the OpenTelemetry Collector is not built and its" \
           "integration test is skipped (install Go to run it)" >&2
    fi
  fi
fi

# The dev set-up also builds kubeconform (a Go module, pinned; the Go module proxy serves it)
# into .cache/bin: tests/unit/test_k8s_manifests.py validates deploy/k8s/ with it against the
# schemas vendored in tests/fixtures/k8s/ (no network at test time). Go's own module and build
# caches (GOMODCACHE, GOCACHE) serve a rebuild; the stamp makes a rerun instant. Without Go
# it is not built and that test fails saying so.
kubeconform_version=v0.8.0
kubeconform_bin="$root/.cache/bin/kubeconform"
if [ "$extras" = "dev" ] && { [ ! -x "$kubeconform_bin" ] || \
     [ "$(cat "$stamp_dir/kubeconform" 2>/dev/null)" != "$kubeconform_version" ]; }; then
  if command -v go >/dev/null 2>&1; then
    echo "==> kubeconform $kubeconform_version (.cache/bin, built with Go) for the Kubernetes manifests' test"
    mkdir -p "$root/.cache/bin"
    if GOBIN="$root/.cache/bin" GOFLAGS=-mod=mod \
         go install "github.com/yannh/kubeconform/cmd/kubeconform@$kubeconform_version" \
         > "$root/.cache/kubeconform-build.log" 2>&1; then
      echo "$kubeconform_version" > "$stamp_dir/kubeconform"
    else
      echo "warning: building kubeconform failed (see .cache/kubeconform-build.log);" \
           "tests/unit/test_k8s_manifests.py will fail" >&2
    fi
  else
    echo "note: no Go toolchain: kubeconform is not built and tests/unit/test_k8s_manifests.py" \
         "fails (install Go, then make setup-dev)" >&2
  fi
fi
