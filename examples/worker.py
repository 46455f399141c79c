#!/usr/bin/env python3
"""This file contains a kbandit worker loop using only the Python standard library.

It optimizes a toy function (a shifted 2-D Branin-like bowl over a box) against a running
kbanditd: ask -> evaluate -> tell, until the study has --trials completed trials.
Several copies can run at once on the same study (they create it if missing, by name).

    examples/worker.py --url http://127.0.0.1:8080 --study toy --trials 40 [--token T]

The token may also come from $KB_TOKEN. Transient HTTP failures (connection refused,
503 while the daemon restarts) are retried; a tell is safe to retry because the daemon
answers a repeated tell with the same value with the same trial (exactly-once tell).
"""
import argparse
import json
import math
import os
import socket
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

SPACE = {"type": "box", "params": [
    {"name": "x", "type": "float", "low": -5.0, "high": 10.0},
    {"name": "y", "type": "float", "low": 0.0, "high": 15.0},
]}


def objective(p):
    """Negated Branin function (maximum -0.397887 at three points): the study maximizes."""
    x, y = p["x"], p["y"]
    b, c, t = 5.1 / (4 * math.pi ** 2), 5 / math.pi, 1 / (8 * math.pi)
    return -((y - b * x * x + c * x - 6) ** 2 + 10 * (1 - t) * math.cos(x) + 10)


class Client:
    def __init__(self, url, token):
        self.url = url.rstrip("/")
        self.token = token

    def call(self, method, path, body=None, retries=20):
        """One request; returns (status, decoded JSON or None). Retries transport errors
        and 503 with a short backoff; other HTTP errors are returned to the caller."""
        data = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": "application/json"} if data is not None else {}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        for attempt in range(retries):
            req = urllib.request.Request(self.url + path, data=data, method=method, headers=headers)
            try:
                with urllib.request.urlopen(req, timeout=70) as r:
                    raw = r.read()
                    return r.status, (json.loads(raw) if raw else None)
            except urllib.error.HTTPError as e:
                raw = e.read()
                if e.code != 503:
                    return e.code, (json.loads(raw) if raw else None)
            except (urllib.error.URLError, ConnectionError, socket.timeout):
                pass
            time.sleep(min(2.0, 0.05 * 2 ** attempt))
        raise RuntimeError(f"{method} {path}: daemon unreachable")


def find_or_create(client, name, engine):
    status, page = client.call("GET", "/v1/studies?name=" + urllib.parse.quote(name, safe=""))
    if status != 200:
        raise RuntimeError(f"find study: {status} {page}")
    if page["studies"]:
        return page["studies"][0]
    status, s = client.call("POST", "/v1/studies", {
        "name": name, "direction": "maximize", "space": SPACE,
        "engine": {"name": engine, "settings": {"seed": 1}}})
    if status == 409:  # another worker created it first
        return find_or_create(client, name, engine)
    if status != 201:
        raise RuntimeError(f"create study: {status} {s}")
    return s


def completed(client, sid):
    status, s = client.call("GET", f"/v1/studies/{sid}")
    return s["progress"]["trials"]["completed"]


def run(client, sid, worker, trials):
    """The worker loop. Returns the number of trials this worker told."""
    told = 0
    while completed(client, sid) < trials:
        status, res = client.call("POST", f"/v1/studies/{sid}/ask",
                                  {"worker": worker, "count": 1, "wait_ms": 1000})
        if status != 200:
            raise RuntimeError(f"ask: {status} {res}")
        if not res["trials"]:
            if res["status"] in ("exhausted", "max_trials_reached", "study_completed"):
                break
            time.sleep((res.get("retry_after_ms") or 200) / 1000)
            continue
        for t in res["trials"]:
            try:
                value = objective(t["params"])
            except Exception as e:  # noqa: BLE001 - the evaluation failed: say so
                client.call("POST", f"/v1/studies/{sid}/trials/{t['id']}/fail", {"reason": repr(e)})
                continue
            status, body = client.call("POST", f"/v1/studies/{sid}/trials/{t['id']}/tell",
                                       {"value": value})
            if status == 200:
                told += 1
            elif status != 409:  # 409: the lease expired meanwhile; the point was reissued
                raise RuntimeError(f"tell: {status} {body}")
    return told


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--url", default=os.environ.get("KB_URL", "http://127.0.0.1:8080"))
    ap.add_argument("--token", default=os.environ.get("KB_TOKEN"))
    ap.add_argument("--study", default="toy-branin")
    ap.add_argument("--engine", default="bbkb")
    ap.add_argument("--trials", type=int, default=40)
    ap.add_argument("--worker", default=f"{socket.gethostname()}-{os.getpid()}")
    args = ap.parse_args()
    client = Client(args.url, args.token)
    try:
        study = find_or_create(client, args.study, args.engine)
        told = run(client, study["id"], args.worker, args.trials)
    except RuntimeError as e:
        print(f"worker: {e}", file=sys.stderr)
        return 1
    status, best = client.call("GET", f"/v1/studies/{study['id']}/best")
    print(json.dumps({"study": study["id"], "told": told,
                      "best": best if status == 200 else None}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
