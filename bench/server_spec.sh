# Sourced by the bench scripts that compare servers given as
# LABEL=SERVER[:FLAGS] (flags separated by spaces).
#   start_server SPEC LOG
# starts SERVER with FLAGS on LISTEN (127.0.0.1:50051 unless set; port 0
# takes a free one), no metrics listener, its output in LOG, waits until it
# listens (at most 60 s, and not past its exit), and sets `label`,
# `server_bin` and `flags` to LABEL, SERVER and FLAGS, `server` to its pid
# and `target` to the address it serves on (empty if it never listened).
# With SERVER_CPUS set (a taskset list such as 0-7) the server runs on
# those cores only, so that a load test kept to the others (CLIENT_CPUS,
# where a script supports it) does not share cores with it.
#   row_line LOG ROW LOAD
# prints the line of row ROW (a variant or baseline name) at LOAD (c=64)
# in a load test's LOG without its placement column ("[tensor]"), so that
# its fields sit where an inline row's do; nothing where it has none.
#   row_rate LOG ROW LOAD
# prints that row's req/s.
start_server() {
  local spec=$1 log=$2
  label=${spec%%=*}
  local rest=${spec#*=}
  server_bin=${rest%%:*}
  flags=()
  [ "$rest" != "$server_bin" ] && read -r -a flags <<< "${rest#*:}"
  local pin=()
  [ -n "${SERVER_CPUS:-}" ] && pin=(taskset -c "$SERVER_CPUS")
  "${pin[@]}" "$server_bin" --listen="${LISTEN:-127.0.0.1:50051}" --metrics_listen= "${flags[@]}" \
    > "$log" 2>&1 &
  server=$!
  for _ in $(seq 1 120); do
    grep -qs "listening on" "$log" && break
    kill -0 "$server" 2> /dev/null || break  # it exited (a bad flag)
    sleep 0.5
  done
  target=$(sed -n 's/.*listening on \([^ ]*\).*/\1/p' "$log" | head -n 1)
}

row_line() {
  awk -v r="$2" -v c="$3" '$1 == r && ($2 == c || $3 == c) {
    if ($2 == "[tensor]") { $2 = ""; $0 = $0 }
    print; exit }' "$1"
}

row_rate() {
  row_line "$@" | awk '{ print $4 }'
}
