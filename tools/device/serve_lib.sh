# Shell functions for the device scripts that run `sluice serve` and load it
# with `sluice bench serve`. Source it; `say` and $log come from the caller.
#
#   start_server LOG ARGS...   starts "$bin" ARGS... in the background, output
#                              to LOG; waits (up to 5 min) until it listens.
#                              Sets server_pid; returns 1 if it exited.
#   stop_server                SIGTERM, then SIGKILL after 30 s.

start_server() {
  local server_log=$1
  shift
  "$bin" "$@" >"$server_log" 2>&1 &
  server_pid=$!
  # "listening on" comes before the weights are loaded; bench waits for /health.
  for _ in $(seq 1 300); do
    grep -q "listening on" "$server_log" && break
    kill -0 "$server_pid" 2>/dev/null || break
    sleep 1
  done
  kill -0 "$server_pid" 2>/dev/null
}

stop_server() {
  kill -TERM "$server_pid" 2>/dev/null
  for _ in $(seq 1 60); do kill -0 "$server_pid" 2>/dev/null || break; sleep 0.5; done
  kill -KILL "$server_pid" 2>/dev/null
  wait "$server_pid" 2>/dev/null
}
