# Ports for `make demo` (sourced by scripts/demo.sh; tests/it/process.rs runs it too).
#
# The demo plays real HTTP traffic against the processes it starts. A port another
# program already holds would take that traffic instead (the demo then "fails" against a
# stranger), so every port is checked before it is used and again once our process is up:
#   choose_port OUT VAR DEFAULT  sets OUT to the port to use: $VAR if set (refused when
#                             taken, naming who holds it), else DEFAULT, else the next free
#                             one (said on stderr); never one an earlier call chose
#   port_holder PORT          "<program> (pid N)" of the listener on PORT, if one is seen
#   port_owner_is PORT PID    whether PID (or a child of it) is the one listening on PORT
# Linux only: listeners are read from /proc/net/tcp{,6} and /proc/<pid>/fd.

# The socket inodes listening on 127.0.0.1, 0.0.0.0 or any IPv6 address at PORT.
_listening_inodes() {
  local hex
  hex=$(printf '%04X' "$1")
  # Column 2 is local address:port in hex, 4 the state (0A = LISTEN), 10 the inode.
  awk -v port=":$hex" '$4 == "0A" && substr($2, length($2) - 4) == port { print $10 }' \
    /proc/net/tcp /proc/net/tcp6 2>/dev/null
}

# Pids whose open files include one of the socket inodes given (one `find`, not a
# process per file descriptor).
_pids_of_inodes() {
  local inode args=()
  [ $# -gt 0 ] || return 0
  for inode in "$@"; do
    [ ${#args[@]} -eq 0 ] || args+=(-o)
    args+=(-lname "socket:\\[$inode\\]")
  done
  find /proc/[0-9]*/fd -maxdepth 1 \( "${args[@]}" \) -printf '%h\n' 2>/dev/null \
    | sed -e 's#^/proc/##' -e 's#/fd$##' | sort -u
}

# Whether anything accepts connections on 127.0.0.1:PORT, or listens on it at all.
port_taken() {
  [ -n "$(_listening_inodes "$1")" ] && return 0
  (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

port_holder() {
  local pids pid name out=""
  # shellcheck disable=SC2046
  pids=$(_pids_of_inodes $(_listening_inodes "$1"))
  for pid in $pids; do
    name=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | cut -c1-80 | sed 's/ *$//')
    out="${out:+$out, }${name:-?} (pid $pid)"
  done
  echo "${out:-another program (its pid is not visible to this user)}"
}

port_owner_is() {
  local port=$1 want=$2 pid
  # shellcheck disable=SC2046
  for pid in $(_pids_of_inodes $(_listening_inodes "$port")); do
    [ "$pid" = "$want" ] && return 0
  done
  return 1
}

choose_port() {
  local out=$1 var=$2 default=$3 port
  if [ -n "${!var:-}" ]; then
    port=${!var}
    if port_taken "$port" || [[ " ${_DEMO_CHOSEN:-} " == *" $port "* ]]; then
      echo "port $port ($var) is taken by $(port_holder "$port"): stop it or set $var to a free port" >&2
      return 1
    fi
  else
    port=$default
    while port_taken "$port" || [[ " ${_DEMO_CHOSEN:-} " == *" $port "* ]]; do
      if [ "$port" -ge $((default + 200)) ]; then
        echo "no free port in $default-$port for $var: set $var to a free port" >&2
        return 1
      fi
      if [ "$port" = "$default" ] && port_taken "$port"; then
        echo "port $default is taken by $(port_holder "$default"); looking for a free one ($var)" >&2
      fi
      port=$((port + 1))
    done
    [ "$port" = "$default" ] || echo "== $var: using port $port instead of $default" >&2
  fi
  _DEMO_CHOSEN="${_DEMO_CHOSEN:-} $port"
  printf -v "$out" '%s' "$port"
}
