#!/usr/bin/env bash
# Entry point of the seedance-roi image (Dockerfile, docker-compose.yml).
#   jobmanager | taskmanager   a Flink cluster process in the foreground; FLINK_PROPERTIES
#                              ("key: value" lines) become -D dynamic properties
#   anything else              run as given: flink run ..., seedance load|dashboard|reconcile
# Secrets come as files (Docker secrets): for each NAME_FILE below, NAME is exported with
# the file's content. Nothing here prints a value.
set -euo pipefail

for name in PGPASSWORD SEEDANCE_WEBHOOK_SECRET KAFKA_SASL_PASSWORD; do
  file_var="${name}_FILE"
  if [ -n "${!file_var:-}" ]; then
    [ -r "${!file_var}" ] || { echo "error: $file_var names an unreadable file" >&2; exit 2; }
    value=$(cat "${!file_var}")
    export "$name=$value"
    unset "$file_var" value
  fi
done

dynamic_properties() {
  local line key value
  while IFS= read -r line; do
    [[ "$line" =~ ^[[:space:]]*([^:#[:space:]][^:]*):[[:space:]]*(.*)$ ]] || continue
    key="${BASH_REMATCH[1]}"
    value="${BASH_REMATCH[2]}"
    # trailing blanks are YAML padding, not part of the value
    printf -- '-D\n%s=%s\n' "${key%"${key##*[![:space:]]}"}" "${value%"${value##*[![:space:]]}"}"
  done <<< "${FLINK_PROPERTIES:-}"
}

case "${1:-}" in
  jobmanager|taskmanager)
    role=$1
    mapfile -t props < <(dynamic_properties)
    # listen on every interface of the container; advertise the container's own name
    exec "$FLINK_HOME/bin/$role.sh" start-foreground \
      -D jobmanager.bind-host=0.0.0.0 -D rest.bind-address=0.0.0.0 \
      -D taskmanager.bind-host=0.0.0.0 -D "taskmanager.host=$(hostname)" "${props[@]}"
    ;;
  *)
    exec "$@"
    ;;
esac
