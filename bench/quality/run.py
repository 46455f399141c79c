#!/usr/bin/python3
"""This file is the quality suite of issue 12 (make bench-quality): kbandit's engines and
Optuna's samplers on the same box functions, budgets and parallelism, through the real
daemon over HTTP, as the quality protocol (docs/REFERENCES.md) prescribes.

    bench/quality/run.py [--functions branin,hartmann6] [--engines default,gp-ucb,optuna-tpe]
                         [--seeds 1,2,3 | --set tuning|tuning2|tuning3|held-out|held-out2
                                            |held-out3|held-out4]
                         [--budgets 4x50,8x125]
                         [--out results.json] [--settings '{"beta_scale": 0.5}']
                         [--eval-ms 20 | --lockstep] [--noise 0.1] [--warm 20]

Engine "default" is a study created with nothing but its space (the daemon's default engine
and settings); other names create that engine with its defaults plus --settings. For each
run: W worker threads each ask -> evaluate -> tell over keep-alive HTTP until the budget is
told (no trial is evaluated twice; a worker claims a slot before it asks). Optuna runs W
processes sharing one SQLite storage (TPESampler(constant_liar=True) / RandomSampler). Per
run it records simple regret (best value - known minimum), regret ratio (cumulative regret
/ (T (mean f - min f)), mean f over 20,000 uniform points: 1 = random search), recommended
regret (the regret at the trial the tool recommends: the best told value, kbandit's GET
/best and Optuna's best_trial; under --noise that is what a user gets, where simple regret
needs the noiseless f), kbandit's model-recommended regret (GET /best?by=model: the told
trial with the best posterior mean), wall time and trials/s; the summary gives median and worst over
seeds per function, budget and engine. --eval-ms M makes every evaluation take an
exponentially distributed time of mean M ms (seeded per worker; instant by default), as
real objectives do: the pending trials then overlap, and kbandit's runs also record the
fraction of worker time spent waiting in ask (idle_fraction: an engine that holds workers
back until feedback arrives shows it here). --lockstep instead plays kbandit's W workers in
turn from one thread (W trials always pending, the oldest told first): the daemon sees the
same calls on every run, so builds can be compared seed by seed; Optuna runs are unchanged
by it. Nothing is tuned here: functions.py says which functions and seeds are for tuning
and which are held out (--set held-out2 is the fresh held-out set of session 13, seeds
201-210; like tuning2 and tuning3, the mixed spaces of session 18, it is run only when
named, as are held-out3 and held-out4, mixed spaces of session 38, seeds 301-310 and
401-410). --noise L tells every engine f(x) + e, e ~ N(0, (L gap)^2) with gap = mean f -
min f (so L is scale-free: 0.1 is a tenth of random search's mean regret), seeded per run
(per worker when threaded), as a validation score carries noise; simple regret and regret
ratio stay those of the noiseless f at the points told (the best true value among them),
for kbandit and Optuna alike. --warm N gives every run of a seed the same N uniform points
before its first ask (kbandit: POST .../observations; Optuna: study.add_trials), told with
the run's noise, as a user starts from earlier evaluations; the budget counts the run's own
trials, simple regret is over them and the warm points together, regret ratio and the
recommended regret over the run's own trials.
"""
import argparse
import http.client
import json
import math
import multiprocessing as mp
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from functions import FUNCTIONS, HELD_OUT, SETS, TUNING  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


# ------------------------------------------------------------------ the daemon

class Daemon:
    def __init__(self, binary):
        self.dir = tempfile.TemporaryDirectory(prefix="kb-quality-")
        self.log = open(Path(self.dir.name) / "stderr.log", "wb")
        self.proc = subprocess.Popen(
            [binary, "--listen", "127.0.0.1:0", "--db", str(Path(self.dir.name) / "q.db"),
             "--log-level", "warn"], stdin=subprocess.DEVNULL, stdout=self.log,
            stderr=self.log)
        self.port = self._wait_port()

    def _wait_port(self):
        deadline = time.monotonic() + 20
        path = Path(self.dir.name) / "stderr.log"
        while time.monotonic() < deadline:
            for line in path.read_text(errors="replace").splitlines():
                try:
                    msg = json.loads(line)
                except ValueError:
                    continue
                if msg.get("msg") == "listening":
                    return int(msg["port"])
            if self.proc.poll() is not None:
                raise RuntimeError("kbanditd exited: " + path.read_text(errors="replace"))
            time.sleep(0.05)
        raise RuntimeError("kbanditd did not start")

    def close(self):
        self.proc.terminate()
        self.proc.wait(30)
        self.log.close()
        self.dir.cleanup()


class Http:
    def __init__(self, port):
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)

    def call(self, method, path, body=None):
        data = json.dumps(body).encode() if body is not None else None
        self.conn.request(method, path, body=data,
                          headers={"Content-Type": "application/json"} if data else {})
        r = self.conn.getresponse()
        payload = r.read()
        doc = json.loads(payload) if payload else None
        if r.status >= 300:
            raise RuntimeError(f"{method} {path}: {r.status} {payload[:300]!r}")
        return doc


# ------------------------------------------------------------------ runs

def mean_f(fn, n=20000):
    """Mean of f over uniform points of the box (the regret ratio's random baseline)."""
    rng = random.Random(0)
    total = 0.0
    for _ in range(n):
        total += fn["f"](uniform_point(fn["params"], rng))
    return total / n


def uniform_point(params, rng):
    """A point drawn as random search draws it: log parameters uniform in log scale."""
    p = {}
    for q in params:
        if q.get("log"):
            x = math.exp(rng.uniform(math.log(q["low"]), math.log(q["high"])))
            p[q["name"]] = (x if q["type"] == "float"
                            else min(q["high"], max(q["low"], round(x))))
        elif q["type"] == "float":
            p[q["name"]] = rng.uniform(q["low"], q["high"])
        elif q["type"] == "int":
            p[q["name"]] = rng.randint(q["low"], q["high"])
        else:
            p[q["name"]] = rng.choice(q["choices"])
    return p


def summarize_values(values, fn, fmean, warm=()):
    """Simple regret over the run's trials and the warm start's points (the best point the
    user has); regret ratio over the run's trials."""
    best = min([*values, *(f for _, _, f in warm)])
    gap = fmean - fn["fmin"]
    cum = sum(v - fn["fmin"] for v in values)
    return {"simple_regret": best - fn["fmin"],
            "regret_ratio": cum / (len(values) * gap) if gap > 0 else None}


def warm_start(fn, seed, n, noise_sd):
    """n (params, told value, noiseless value) at uniform points, drawn from the seed alone
    so that every engine and sampler of a seed gets the same ones."""
    rng = random.Random(seed * 104729 + 31)
    out = []
    for _ in range(n):
        p = uniform_point(fn["params"], rng)
        v = fn["f"](p)
        out.append((p, told(v, noise_sd, rng), v))
    return out


def told(v, noise_sd, rng):
    """The value an engine is told for a noiseless v: v + N(0, noise_sd^2)."""
    return v + noise_sd * rng.gauss(0.0, 1.0) if noise_sd > 0 else v


def evaluate(fn, params, delay_rng, eval_ms):
    if eval_ms > 0:
        time.sleep(delay_rng.expovariate(1.0 / eval_ms) / 1000.0)
    return fn["f"](params)


def create_study(api, fname, engine, settings, seed, workers, budget, warm=()):
    """The study, given the warm-start observations (params, told value) before any ask."""
    doc = {"name": f"{fname}-{engine}-{seed}-{workers}x{budget}-{time.monotonic_ns()}",
           "direction": "minimize", "space": {"type": "box", "params": FUNCTIONS[fname]["params"]}}
    if engine != "default":
        doc["engine"] = {"name": engine, "settings": dict(settings, seed=seed)}
    else:
        doc["engine"] = {"settings": {"seed": seed}}
    sid = api.call("POST", "/v1/studies", doc)["id"]
    if warm:
        api.call("POST", f"/v1/studies/{sid}/observations",
                 {"observations": [{"params": p, "value": v} for p, v, _ in warm]})
    return sid


def finish_study(port, sid, fmin, noiseless):
    """The study's progress, with the regret of the trial it recommends (GET /best: the
    best told value) and of the one its model recommends (GET /best?by=model: the best
    posterior mean), read from `noiseless` ({trial id: noiseless f}: f is not evaluated
    again)."""
    api = Http(port)  # a fresh connection: an earlier one may have sat idle past the timeout
    info = api.call("GET", f"/v1/studies/{sid}")
    best = api.call("GET", f"/v1/studies/{sid}/best")["id"]
    model = api.call("GET", f"/v1/studies/{sid}/best?by=model")["id"]
    api.call("DELETE", f"/v1/studies/{sid}")
    return dict(info.get("progress", {}), recommended_regret=noiseless[best] - fmin,
                model_recommended_regret=noiseless[model] - fmin)


def run_lockstep(port, fname, engine, settings, seed, workers, budget, noise_sd=0.0, warm=()):
    """W workers played in turn by one thread, evaluations instant: keep W trials pending,
    tell the oldest, and let its worker ask next. The daemon then sees the same call
    sequence on every run, so a run is a function of (engine, settings, seed) and two
    builds can be compared seed by seed (threads racing for the daemon make runs whose
    engine counts pending trials, e.g. bbkb's batch floor, differ run to run). An ask the
    engine answers empty (waiting for feedback) is counted and the oldest trial told."""
    fn = FUNCTIONS[fname]
    api = Http(port)
    sid = create_study(api, fname, engine, settings, seed, workers, budget, warm)
    pending, values, claimed, empty = [], {}, 0, 0
    free = list(range(workers))  # workers without a trial, in the order they ask
    noise_rng = random.Random(seed * 7919 + 17)
    t0 = time.monotonic()
    while len(values) < budget:
        if claimed < budget and free:
            res = api.call("POST", f"/v1/studies/{sid}/ask",
                           {"worker": f"w{free[0]}", "count": 1, "wait_ms": 0})
            if res["trials"]:
                pending.append((free.pop(0), res["trials"][0]))
                claimed += 1
                continue
            empty += 1
            if not pending:
                raise RuntimeError(f"{fname} {engine} seed {seed}: empty ask, nothing pending")
        w, t = pending.pop(0)
        v = fn["f"](t["params"])
        api.call("POST", f"/v1/studies/{sid}/trials/{t['id']}/tell",
                 {"value": told(v, noise_sd, noise_rng)})
        values[t["id"]] = v
        free.append(w)
    wall = time.monotonic() - t0
    progress = dict(finish_study(port, sid, fn["fmin"], values), idle_fraction=None,
                    empty_asks=empty)
    return list(values.values()), wall, progress


def run_kbandit(port, fname, engine, settings, seed, workers, budget, eval_ms=0.0,
                noise_sd=0.0, warm=()):
    fn = FUNCTIONS[fname]
    sid = create_study(Http(port), fname, engine, settings, seed, workers, budget, warm)
    lock = threading.Lock()
    state = {"claimed": 0, "values": {}, "error": None, "ask_s": 0.0}

    def worker(w):
        http_ = Http(port)
        delay_rng = random.Random(seed * 1000 + w)
        noise_rng = random.Random(seed * 1000 + w + 7919)
        try:
            while True:
                with lock:
                    if state["claimed"] >= budget or state["error"]:
                        return
                    state["claimed"] += 1
                t_ask = time.monotonic()
                while True:
                    res = http_.call("POST", f"/v1/studies/{sid}/ask",
                                     {"worker": f"w{w}", "count": 1, "wait_ms": 5000})
                    if res["trials"]:
                        break
                with lock:
                    state["ask_s"] += time.monotonic() - t_ask
                t = res["trials"][0]
                v = evaluate(fn, t["params"], delay_rng, eval_ms)
                http_.call("POST", f"/v1/studies/{sid}/trials/{t['id']}/tell",
                           {"value": told(v, noise_sd, noise_rng)})
                with lock:
                    state["values"][t["id"]] = v
        except Exception as exc:  # reported with the run, never hidden
            with lock:
                state["error"] = repr(exc)

    t0 = time.monotonic()
    threads = [threading.Thread(target=worker, args=(w,)) for w in range(workers)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    wall = time.monotonic() - t0
    if state["error"]:
        raise RuntimeError(f"{fname} {engine} seed {seed}: {state['error']}")
    progress = dict(finish_study(port, sid, fn["fmin"], state["values"]),
                    idle_fraction=state["ask_s"] / (workers * wall))
    return list(state["values"].values()), wall, progress


def optuna_suggest(trial, params):
    p = {}
    for q in params:
        if q["type"] == "float":
            p[q["name"]] = trial.suggest_float(q["name"], q["low"], q["high"],
                                               log=q.get("log", False))
        elif q["type"] == "int":
            p[q["name"]] = trial.suggest_int(q["name"], q["low"], q["high"],
                                             log=q.get("log", False))
        else:
            p[q["name"]] = trial.suggest_categorical(q["name"], q["choices"])
    return p


def optuna_distributions(params):
    """The distributions optuna_suggest samples from, for trials added as warm starts."""
    import optuna.distributions as od
    return {q["name"]: (od.FloatDistribution(q["low"], q["high"], log=q.get("log", False))
                        if q["type"] == "float" else
                        od.IntDistribution(q["low"], q["high"], log=q.get("log", False))
                        if q["type"] == "int" else od.CategoricalDistribution(q["choices"]))
            for q in params}


def optuna_storage(url):
    """The shared SQLite storage, waiting up to 120 s for its lock: with SQLite's default 5 s
    a worker of a run on a loaded machine (load average 10 on 2 cores) died with "database
    is locked" and took its run with it."""
    import optuna
    return optuna.storages.RDBStorage(url, engine_kwargs={"connect_args": {"timeout": 120}})


def optuna_worker(url, name, fname, sampler, seed, n_trials, eval_ms, noise_sd):
    import optuna
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    fn = FUNCTIONS[fname]
    s = (optuna.samplers.TPESampler(constant_liar=True, seed=seed) if sampler == "tpe"
         else optuna.samplers.RandomSampler(seed=seed))
    study = optuna.load_study(study_name=name, storage=optuna_storage(url), sampler=s)
    delay_rng, noise_rng = random.Random(seed), random.Random(seed + 7919)
    study.optimize(lambda t: told(evaluate(fn, optuna_suggest(t, fn["params"]), delay_rng,
                                           eval_ms), noise_sd, noise_rng),
                   n_trials=n_trials)


def run_optuna(fname, sampler, seed, workers, budget, eval_ms=0.0, noise_sd=0.0, warm=()):
    import optuna
    with tempfile.TemporaryDirectory(prefix="kb-optuna-") as tmp:
        url = f"sqlite:///{tmp}/o.db"
        name = f"{fname}-{seed}"
        study = optuna.create_study(study_name=name, storage=optuna_storage(url),
                                    direction="minimize")
        fn = FUNCTIONS[fname]
        study.add_trials([optuna.trial.create_trial(params=p, value=v,
                                                    distributions=optuna_distributions(fn["params"]))
                          for p, v, _ in warm])
        per = [budget // workers + (1 if w < budget % workers else 0) for w in range(workers)]
        t0 = time.monotonic()
        procs = [mp.Process(target=optuna_worker,
                            args=(url, name, fname, sampler, seed * 1000 + w, per[w], eval_ms,
                                  noise_sd))
                 for w in range(workers)]
        for p in procs:
            p.start()
        for p in procs:
            p.join()
        wall = time.monotonic() - t0
        if any(p.exitcode for p in procs):
            raise RuntimeError(f"optuna worker failed on {fname} seed {seed}")
        study = optuna.load_study(study_name=name, storage=optuna_storage(url))
        # The noiseless f at each told point (equal to t.value without --noise); the warm
        # trials come first and are not the run's.
        noiseless = {t.number: fn["f"](t.params) for t in study.trials[len(warm):]
                     if t.value is not None}
        # The best told value's trial among the run's own (best_trial, warm trials left out
        # as kbandit's GET /best leaves out observations).
        own = [t for t in study.trials[len(warm):] if t.value is not None]
        rec = noiseless[min(own, key=lambda t: t.value).number] - fn["fmin"]
    return list(noiseless.values()), wall, rec


# ------------------------------------------------------------------ main

def parse_budgets(text):
    out = []
    for b in text.split(","):
        w, n = b.lower().split("x")
        out.append((int(w), int(w) * int(n)))
    return out


def plan(functions, set_name, seeds):
    """(function, its set, seeds) for each function to run. The functions are --functions
    or, by default, those of --set ("both": tuning and held-out; the other sets run only
    when named); --set filters them even when --seeds replaces the set's seeds."""
    names = functions.split(",") if functions else (
        TUNING + HELD_OUT if set_name == "both" else SETS[set_name][0])
    out = []
    for fname in names:
        if fname not in FUNCTIONS:
            raise SystemExit(f"unknown function {fname!r}; known: {', '.join(FUNCTIONS)}")
        group = next(g for g, (members, _) in SETS.items() if fname in members)
        if set_name in ("both", group):
            out.append((fname, group,
                        [int(s) for s in seeds.split(",")] if seeds else SETS[group][1]))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--functions", default=None,
                    help="comma-separated; default: the functions of --set (sets other "
                         "than tuning and held-out only when named)")
    ap.add_argument("--engines", default="default,gp-ucb,optuna-tpe,optuna-random")
    ap.add_argument("--seeds", default=None, help="comma-separated; default: per --set")
    ap.add_argument("--set", choices=[*SETS, "both"], default="both")
    ap.add_argument("--budgets", default="4x50,8x125", help="WORKERSxTRIALS_PER_WORKER,...")
    ap.add_argument("--settings", default="{}", help="JSON engine settings (not 'default')")
    ap.add_argument("--daemon", default=str(ROOT / "build" / "kbanditd"))
    ap.add_argument("--out", default=None, help="append one JSON line per run here")
    ap.add_argument("--eval-ms", type=float, default=0.0,
                    help="mean evaluation time (exponential), ms; 0 = instant")
    ap.add_argument("--lockstep", action="store_true",
                    help="kbandit runs: one thread plays the W workers in turn (instant "
                         "evaluations; reproducible seed by seed)")
    ap.add_argument("--noise", type=float, default=0.0,
                    help="noise sd of told values, in units of mean f - min f; 0 = none")
    ap.add_argument("--warm", type=int, default=0,
                    help="warm start: this many uniform points (the same per seed for every "
                         "engine, told with the run's noise) given before the first ask")
    args = ap.parse_args()
    if args.lockstep and args.eval_ms > 0:
        ap.error("--lockstep evaluates instantly; it cannot be combined with --eval-ms")
    if not args.noise >= 0:
        ap.error("--noise must be >= 0")
    if args.warm < 0:
        ap.error("--warm must be >= 0")
    settings = json.loads(args.settings)
    daemon = None
    rows = []
    try:
        for fname, group, seeds in plan(args.functions, args.set, args.seeds):
            fn = FUNCTIONS[fname]
            fmean = mean_f(fn)
            noise_sd = args.noise * (fmean - fn["fmin"])
            for workers, budget in parse_budgets(args.budgets):
                for engine in args.engines.split(","):
                    for seed in seeds:
                        progress = {}
                        warm = warm_start(fn, seed, args.warm, noise_sd)
                        if engine.startswith("optuna-"):
                            values, wall, rec = run_optuna(fname, engine[7:], seed, workers,
                                                           budget, args.eval_ms, noise_sd, warm)
                            progress = {"recommended_regret": rec}
                        else:
                            daemon = daemon or Daemon(args.daemon)
                            if args.lockstep:
                                values, wall, progress = run_lockstep(
                                    daemon.port, fname, engine, settings, seed, workers, budget,
                                    noise_sd, warm)
                            else:
                                values, wall, progress = run_kbandit(
                                    daemon.port, fname, engine, settings, seed, workers, budget,
                                    args.eval_ms, noise_sd, warm)
                        row = dict(function=fname, group=group, engine=engine, seed=seed,
                                   workers=workers, budget=budget, trials=len(values),
                                   wall_s=round(wall, 3),
                                   trials_per_s=round(len(values) / wall, 2),
                                   settings=settings if engine != "default" else {},
                                   hyperparameters=progress.get("hyperparameters"),
                                   epochs=progress.get("epoch"),
                                   dictionary_size=progress.get("dictionary_size"),
                                   model_rows=progress.get("model_rows"),
                                   choice_floor_pools=progress.get("choice_floor_pools"),
                                   climb_pools=progress.get("climb_pools"),
                                   eval_ms=args.eval_ms, noise=args.noise, warm=args.warm,
                                   idle_fraction=progress.get("idle_fraction"),
                                   lockstep=args.lockstep and not engine.startswith("optuna-"),
                                   empty_asks=progress.get("empty_asks"),
                                   recommended_regret=progress["recommended_regret"],
                                   model_recommended_regret=progress.get(
                                       "model_recommended_regret"),
                                   **summarize_values(values, fn, fmean, warm))
                        rows.append(row)
                        print(json.dumps(row), flush=True)
                        if args.out:
                            with open(args.out, "a") as f:
                                f.write(json.dumps(row) + "\n")
    finally:
        if daemon:
            daemon.close()
    print_table(rows)


def print_table(rows):
    keys = sorted({(r["function"], r["workers"], r["budget"], r["engine"]) for r in rows},
                  key=lambda k: (k[0], k[2], k[3]))
    print("\n| function | budget | engine | median simple regret | worst | median recommended "
          "regret | median regret ratio | trials/s | idle | seeds |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for f, w, b, e in keys:
        rs = [r for r in rows if (r["function"], r["workers"], r["budget"], r["engine"]) ==
              (f, w, b, e)]
        sr = [r["simple_regret"] for r in rs]
        rec = statistics.median(r["recommended_regret"] for r in rs)
        rr = [r["regret_ratio"] for r in rs if r["regret_ratio"] is not None]
        tps = statistics.median(r["trials_per_s"] for r in rs)
        idle = [r["idle_fraction"] for r in rs if r.get("idle_fraction") is not None]
        idle_s = f"{statistics.median(idle):.2f}" if idle else "-"
        print(f"| {f} | {w}x{b // w} | {e} | {statistics.median(sr):.4g} | {max(sr):.4g} | "
              f"{rec:.4g} | {statistics.median(rr) if rr else math.nan:.3f} | {tps:.0f} | "
              f"{idle_s} | {len(rs)} |")


if __name__ == "__main__":
    main()
