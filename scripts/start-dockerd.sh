#!/usr/bin/env bash
# Start a Docker engine in the background unless one already answers, then wait until it does.
# Idempotent: safe to run repeatedly. Needs root. Log: $DOCKERD_LOG (default /var/log/dockerd.log).
set -euo pipefail

timeout_s="${DOCKERD_TIMEOUT:-120}"
log="${DOCKERD_LOG:-/var/log/dockerd.log}"

if docker info >/dev/null 2>&1; then
    echo "start-dockerd: engine already running"
    exit 0
fi

if ! command -v dockerd >/dev/null 2>&1; then
    echo "start-dockerd: dockerd not installed (apt-get install -y docker.io)" >&2
    exit 1
fi

pidfile=/var/run/docker.pid
started=""
if [[ -s "$pidfile" ]] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then
    echo "start-dockerd: dockerd (pid $(cat "$pidfile")) is starting; waiting for it"
else
    rm -f "$pidfile"  # a stale pid file from a dead engine stops a new one from starting
    echo "start-dockerd: starting dockerd (log: $log)"
    nohup dockerd >"$log" 2>&1 </dev/null &
    started=$!
fi

deadline=$((SECONDS + timeout_s))
until docker info >/dev/null 2>&1; do
    if [[ -n "$started" ]] && ! kill -0 "$started" 2>/dev/null; then
        echo "start-dockerd: dockerd exited during start-up; last lines of $log:" >&2
        tail -n 20 "$log" >&2 || true
        exit 1
    fi
    if ((SECONDS >= deadline)); then
        echo "start-dockerd: engine did not answer within ${timeout_s}s; last lines of $log:" >&2
        tail -n 20 "$log" >&2 || true
        exit 1
    fi
    sleep 1
done
echo "start-dockerd: engine ready after ${SECONDS}s"
