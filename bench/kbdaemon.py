"""This file contains what the Python benchmarks share to run a real kbanditd: spawning it
on a database with --listen 127.0.0.1:0 (stderr into a log file, never a pipe, which would
block a chatty daemon) and reading its port back from the start-up log line
{"msg":"listening","port":N}. Python 3 standard library only."""
import json
import subprocess
import sys
import time
from pathlib import Path


def spawn(binary, db, log, extra=()):
    """Starts kbanditd on db; returns (process, port) once it listens, or exits."""
    t0 = time.monotonic()
    with open(log, "wb") as out:
        proc = subprocess.Popen([str(binary), "--listen", "127.0.0.1:0", "--db", str(db), *extra],
                                stdin=subprocess.DEVNULL, stdout=out, stderr=out)
    while time.monotonic() - t0 < 60:
        for raw in Path(log).read_text(errors="replace").splitlines():
            try:
                m = json.loads(raw)
            except ValueError:
                continue
            if isinstance(m, dict) and m.get("msg") == "listening":
                return proc, m["port"]
        if proc.poll() is not None:
            sys.exit(f"kbanditd exited ({proc.returncode}):\n{Path(log).read_text(errors='replace')}")
        time.sleep(0.001)
    proc.kill()
    sys.exit("kbanditd did not log its listening line within 60 s")
