# Shell functions for the device scripts that run `sluice serve` and load it
# with `sluice bench serve`. Source it after setting $out (the output folder),
# $bin (the sluice binary), $model (the model folder) and $mode (cuda or sim).
#
#   start_log                  $out/logs.txt as $log; say MSG... logs with the time.
#   ensure_model MAX_POSITION  makes $model if it is missing: the Llama-3-8B
#                              shape in bf16 (cuda), or a 1-layer model with the
#                              8B's vocabulary for the simulator (sim), which
#                              prices it as Llama-3-8B through --sim-profile.
#   start_server LOG ARGS...   starts "$bin" ARGS... in the background, output
#                              to LOG; waits (up to 5 min) until it listens.
#                              Sets server_pid; returns 1 if it exited.
#   stop_server                SIGTERM, then SIGKILL after 30 s.

start_log() {
  mkdir -p "$out"
  log="$out/logs.txt"
  : >"$log"
  t0=$(date +%s)
}
say() { echo "[$(($(date +%s) - t0)) s] $*" | tee -a "$log"; }

ensure_model() {
  local max_position=$1
  if [ ! -x "$bin" ]; then echo "no sluice binary at $bin" >&2; return 1; fi
  [ -f "$model/config.json" ] && return 0
  say "making the model in $model ($mode)"
  if [ "$mode" = cuda ]; then
    "$bin" make-model --arch llama --layers 32 --hidden 4096 --heads 32 --kv-heads 8 --intermediate 14336 \
      --vocab 128256 --max-position "$max_position" --dtype bf16 --seed 1 --out "$model" >>"$log" 2>&1
  else
    "$bin" make-model --arch llama --layers 1 --hidden 64 --heads 4 --kv-heads 2 --intermediate 128 \
      --vocab 128256 --max-position "$max_position" --seed 1 --out "$model" >>"$log" 2>&1
  fi
}

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
