# Sourced by infra/callgrind.sh and infra/callgrind_push.sh: a release `sluice serve`
# (SLUICE_BIN, or built) under callgrind with counting off, on a free loopback port and a
# fresh data directory, stopped and removed on exit. Sets `n` (the first argument, default
# 200), `work`, `port` and `server`, once the server answers.
n=${1:-200}
command -v valgrind >/dev/null || { echo "callgrind: valgrind is not installed (apt-get install valgrind)"; exit 1; }
if [ -z "${SLUICE_BIN:-}" ]; then cargo build --release --quiet -p sluice; fi
bin=${SLUICE_BIN:-${CARGO_TARGET_DIR:-target}/release/sluice}
work=$(mktemp -d)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$work/cg.%p" \
    "$bin" serve --addr "127.0.0.1:$port" --data-dir "$work/data" >"$work/serve.log" 2>&1 &
server=$!
trap 'kill $server 2>/dev/null; wait $server 2>/dev/null; rm -rf "$work"' EXIT
until curl -sf "http://127.0.0.1:$port/v1/topics" >/dev/null; do sleep 0.5; done
