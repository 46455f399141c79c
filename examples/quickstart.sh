#!/usr/bin/env bash
# This file walks through the kbandit REST API with curl: find or create a study, ask for
# points, tell their values, read the best trial. Run it against a live daemon (again and
# again: a second run finds the study by name and adds trials):
#   make run &                       # kbanditd on 127.0.0.1:8080
#   examples/quickstart.sh
# Environment: KB_URL (default http://127.0.0.1:8080), KB_TOKEN (bearer token, when the
# daemon runs with --token-file), KB_STUDY (study name, default "quickstart").
# Needs curl and jq.
set -euo pipefail
URL=${KB_URL:-http://127.0.0.1:8080}
NAME=${KB_STUDY:-quickstart}
AUTH=()
[ -n "${KB_TOKEN:-}" ] && AUTH=(-H "Authorization: Bearer $KB_TOKEN")

# api METHOD PATH [JSON BODY]: prints the response body. On an HTTP error it prints the
# method, path, status and the daemon's error body ({"error": {"code", "message",
# "field"}}) on stderr and exits 1; curl alone would only say "error: 409".
api() {
  local out status
  out=$(curl -sS -X "$1" "${AUTH[@]}" -H 'Content-Type: application/json' \
    ${3:+--data "$3"} -w '\n%{http_code}' "$URL$2") || exit 1
  status=${out##*$'\n'}
  out=${out%$'\n'*}
  if [ "$status" -ge 400 ]; then
    echo "quickstart.sh: $1 $2 -> HTTP $status: $out" >&2
    exit 1
  fi
  printf '%s\n' "$out"
}

curl -sS --fail "$URL/healthz"; echo

# 1. The study named $NAME: found by name when it exists (so the script can be run
#    again: each run adds two trials), else created over a box of a log-scale float,
#    an int and a categorical parameter.
sid=$(api GET "/v1/studies?name=$(jq -rn --arg n "$NAME" '$n | @uri')" | jq -r '.studies[0].id // empty')
if [ -n "$sid" ]; then
  echo "study $sid (exists: adding trials to it)"
else
  study=$(api POST /v1/studies '{
    "name": '"$(jq -n --arg n "$NAME" '$n')"',
    "direction": "maximize",
    "space": {"type": "box", "params": [
      {"name": "lr",     "type": "float", "low": 1e-5, "high": 1, "log": true},
      {"name": "layers", "type": "int",   "low": 1,    "high": 8},
      {"name": "opt",    "type": "categorical", "choices": ["adam", "sgd"]}]},
    "engine": {"name": "random", "settings": {"seed": 1}},
    "lease_seconds": 600
  }')
  sid=$(jq -r .id <<<"$study")
  echo "study $sid (created)"
fi

# 2. Ask for two points (a worker name identifies who holds each trial).
asked=$(api POST "/v1/studies/$sid/ask" '{"worker": "quickstart", "count": 2}')
jq -c '.trials[] | {id, params}' <<<"$asked"

# 3. Evaluate and tell each value (here a made-up score from the parameters).
for tid in $(jq -r '.trials[].id' <<<"$asked"); do
  value=$(jq -r --argjson t "$tid" \
    '.trials[] | select(.id == $t) | .params | (-(((.lr | log10) + 3) * ((.lr | log10) + 3)) - (.layers - 4) * (.layers - 4) / 10)' \
    <<<"$asked")
  api POST "/v1/studies/$sid/trials/$tid/tell" "{\"value\": $value}" | jq -c '{id, state, value}'
done

# 4. The best trial so far, and the study's progress.
api GET "/v1/studies/$sid/best" | jq -c '{id, value, params}'
api GET "/v1/studies/$sid" | jq -c '.progress.trials'
