# Running one step of a CI script with a time limit that nothing of it outlives.
# Sourced by .ci/gpu (and by tests/test_ci_scripts.py, which checks the kill).

# kill_tree PID: SIGKILL the process, every process below it, and every process of their
# sessions (a worker that made a process group of its own is still in its session).
kill_tree() {
  local all=() todo=("$1") next child sessions
  while [ "${#todo[@]}" -gt 0 ]; do
    next=${todo[0]}; todo=("${todo[@]:1}"); all+=("$next")
    for child in $(ps -o pid= --ppid "$next" 2>/dev/null); do todo+=("$child"); done
  done
  kill -STOP "${all[@]}" 2>/dev/null
  sessions=$(ps -o sid= -p "$(IFS=,; echo "${all[*]}")" 2>/dev/null | sort -u)
  for session in $sessions; do
    # Never this script's own session: the step's setsid made one of its own.
    [ "$session" = "$(ps -o sid= -p $$ | tr -d ' ')" ] || pkill -KILL -s "$session" 2>/dev/null
  done
  kill -KILL "${all[@]}" 2>/dev/null
  return 0
}

# run_step COMMAND LIMIT LOG: run the shell COMMAND in a session of its own with its
# output in LOG; past LIMIT seconds, kill it whole and return 124, else its exit status.
run_step() {
  local command=$1 limit=$2 log=$3 start=$SECONDS pid
  setsid -w bash -c "$command" >"$log" 2>&1 &
  pid=$!
  while kill -0 "$pid" 2>/dev/null && [ $(( SECONDS - start )) -lt "$limit" ]; do sleep 1; done
  if kill -0 "$pid" 2>/dev/null; then
    kill_tree "$pid"
    wait "$pid" 2>/dev/null
    return 124
  fi
  wait "$pid"
}
