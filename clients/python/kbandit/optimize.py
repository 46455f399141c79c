"""This file contains the engine room of Study.optimize(): n_workers threads or processes,
each running ask -> fn -> tell, until exactly n_trials trials were told.

Exactness: a shared budget (a multiprocessing.Value, which threads share as well) counts
the trials still to be told. A worker takes one unit before it asks and gives it back
when its trial does not end in a tell (the lease expired first, the study ran out of
trials, optimize is stopping), so no more than n_trials are ever in flight and exactly
n_trials are told unless the study ends first or fn raises.
"""
import multiprocessing
import threading
import traceback

from .errors import Conflict, NoTrialAvailable
from .trial import TrialScope, _Stopped


def run(study, fn, n_trials, n_workers, processes, worker):
    if n_trials < 1 or n_workers < 1:
        raise ValueError("n_trials and n_workers must be at least 1")
    ctx = multiprocessing.get_context()
    budget = ctx.Value("q", n_trials)
    stop = ctx.Event()
    names = [f"{worker or study.client.worker}-{i}" for i in range(min(n_workers, n_trials))]
    if processes:
        _run_processes(ctx, study, fn, budget, stop, names)
    else:
        _run_threads(study, fn, budget, stop, names)


def _run_threads(study, fn, budget, stop, names):
    errors = []

    def target(name):
        try:
            _loop(study, fn, budget, stop, name)
        except BaseException as e:  # noqa: BLE001 - handed to the caller below
            errors.append(e)
            stop.set()

    threads = [threading.Thread(target=target, args=(n,), name=n) for n in names]
    _start_and_join(threads, stop)
    if errors:
        raise errors[0]


def _run_processes(ctx, study, fn, budget, stop, names):
    # SimpleQueue writes synchronously: nothing is left in a feeder thread at join.
    errors = ctx.SimpleQueue()
    config = study.client.config()
    procs = [ctx.Process(target=_process_main, name=n,
                         args=(config, study.id, fn, budget, stop, errors, n)) for n in names]
    _start_and_join(procs, stop)
    messages = []
    while not errors.empty():
        messages.append(errors.get())
    crashed = [p.name for p in procs if p.exitcode != 0]
    if messages or crashed:
        raise RuntimeError("optimize: worker failed:\n" + ("\n".join(messages) or
                           f"processes {crashed} exited abnormally"))


def _start_and_join(workers, stop):
    for w in workers:
        w.start()
    try:
        for w in workers:
            w.join()
    except BaseException:
        stop.set()  # e.g. Ctrl-C: workers finish (or fail) their current trial and stop
        raise


def _process_main(config, study_id, fn, budget, stop, errors, name):
    """A worker process: its own Client (connections are never shared across fork)."""
    from .client import Client
    try:
        _loop(Client(**config).get_study(study_id), fn, budget, stop, name)
    except BaseException:  # noqa: BLE001 - reported to the parent, which raises
        errors.put(f"[{name}] " + traceback.format_exc())
        stop.set()


def _loop(study, fn, budget, stop, name):
    while not stop.is_set() and _take(budget):
        told = False
        try:
            told = _one(study, fn, stop, name)
        except NoTrialAvailable:
            stop.set()
        finally:
            if not told:
                _give_back(budget)


def _one(study, fn, stop, name):
    """Runs fn on one trial; True when its value was told."""
    try:
        with TrialScope(study, None, name, stop) as trial:
            value = fn(trial)
            try:
                trial.tell(value)
            except Conflict:
                trial.refresh()  # its lease expired before the tell: no longer ours
                return False
    except _Stopped:
        return False
    return True


def _take(budget):
    with budget.get_lock():
        if budget.value <= 0:
            return False
        budget.value -= 1
        return True


def _give_back(budget):
    with budget.get_lock():
        budget.value += 1
