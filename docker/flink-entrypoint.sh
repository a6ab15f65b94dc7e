#!/bin/sh
# Writes Flink's config.yaml from FLINK_PROPERTIES (one "key: value" a line, as the official
# Flink images read it), then runs the command: jobmanager.sh / taskmanager.sh
# start-foreground, or `worx flink submit ...`.
set -eu
export FLINK_CONF_DIR="${FLINK_CONF_DIR:-/tmp/flink-conf}"
mkdir -p "$FLINK_CONF_DIR"
{
  echo "jobmanager.memory.process.size: 1600m"
  echo "taskmanager.memory.process.size: 2048m"
  echo "rest.bind-address: 0.0.0.0"
  echo "jobmanager.bind-host: 0.0.0.0"
  echo "taskmanager.bind-host: 0.0.0.0"
  echo "taskmanager.host: $(hostname)"
  echo "python.executable: /usr/local/bin/python"
  printf '%s\n' "${FLINK_PROPERTIES:-}"
} > "$FLINK_CONF_DIR/config.yaml"
exec "$@"
