#!/usr/bin/env bash
# Load benchmark of `evident serve` over the dev benchmark corpus with the embedded models:
# starts a server on DATA_DIR (ingesting ../shared/bench/docs there first when it is empty),
# runs `evident bench http` at 1, 4 and 32 clients, then stops the server gracefully.
#
#   bash scripts/bench-http.sh [DATA_DIR] [bench http flags...]
#   bash scripts/bench-http.sh /tmp/evall --seconds 60
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
DATA=${1:-.evident/bench-data}
shift || true
bash scripts/setup.sh >/dev/null
cargo build --release --locked -p evident
bash scripts/build-plugins.sh >/dev/null
EVIDENT=${CARGO_TARGET_DIR:-target}/release/evident
if [ -z "$("$EVIDENT" --data-dir "$DATA" docs --json 2>/dev/null | tr -d '[:space:][]')" ]; then
  "$EVIDENT" --data-dir "$DATA" ingest ../shared/bench/docs
fi
TOKEN=bench-$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')
LOG=$(mktemp)
"$EVIDENT" --data-dir "$DATA" serve --addr 127.0.0.1:0 --read-token "$TOKEN" >"$LOG" 2>&1 &
SERVER=$!
trap 'kill -TERM $SERVER 2>/dev/null || true; wait $SERVER 2>/dev/null || true; rm -f "$LOG"' EXIT
for _ in $(seq 1 600); do
  URL=$(grep -o 'listening on http://[0-9.:]*' "$LOG" | sed 's/listening on //' || true)
  [ -n "$URL" ] && break
  kill -0 $SERVER 2>/dev/null || { cat "$LOG"; exit 1; }
  sleep 0.5
done
echo "server at $URL (data: $DATA)"
"$EVIDENT" bench http --url "$URL" --token "$TOKEN" --questions "${QUESTIONS:-../shared/bench/questions.jsonl}" "$@"
