"""This file contains the human output of the `kbandit` command line: aligned tables,
numbers at six significant digits (--json gives the exact values), and the study
summary that `show` prints and `watch` refreshes."""
from .trial import Trial


def num(v):
    """A value for people: 6 significant digits, "-" for none."""
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:.6g}"
    return str(v)


def table(headers, rows):
    """Rows under headers, columns separated by two spaces, numbers right-aligned."""
    cells = [[num(c) for c in row] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    right = [all(isinstance(row[i], (int, float)) or row[i] is None for row in rows)
             for i in range(len(headers))]

    def line(items):
        return "  ".join(c.rjust(w) if r else c.ljust(w)
                         for c, w, r in zip(items, widths, right)).rstrip()

    return "\n".join([line(headers)] + [line(r) for r in cells])


def engines_text(catalogue, name=None):
    """The engines (NAME, MAX DIM, SUMMARY), or one engine's settings: the common ones with
    the engine's own entries replacing theirs, then the engine's, each with its type,
    default, accepted values and description."""
    if name is None:
        rows = [[e["name"] + (" (default)" if e["name"] == catalogue["default"] else ""),
                 e["max_dim"], e["summary"]] for e in catalogue["engines"]]
        return table(["NAME", "MAX DIM", "SUMMARY"], rows)
    engine = next(e for e in catalogue["engines"] if e["name"] == name)
    options = {o["name"]: o for o in catalogue["common_options"] + engine["options"]}
    rows = [[o["name"], o["type"], _option_default(o), _accepted(o), o["description"]]
            for o in options.values()]
    return f"{name}: {engine['summary']}\n\n" + table(
        ["SETTING", "TYPE", "DEFAULT", "ACCEPTS", "DESCRIPTION"], rows)


def _option_default(o):
    return "-" if o["default"] is None else num(o["default"])


def _accepted(o):
    if o["choices"]:
        return "|".join(o["choices"])
    if o["type"] == "string":
        return "text"
    lo, hi = o["minimum"], o["maximum"]
    left = "any" if lo is None else ("> " if o["exclusive_minimum"] else ">= ") + num(lo)
    return left if hi is None else f"{left}, <= {num(hi)}"


def params_text(params):
    return " ".join(f"{k}={num(v)}" for k, v in params.items())


def studies_table(studies):
    rows = []
    for s in studies:
        head = [s.id, s.name, s.state, s.direction, s.engine["name"]]
        if s.progress is None:  # listed while the daemon still restores it after a start
            rows.append(head + ["restoring"] * 5)
            continue
        counts, best = s.progress["trials"], s.progress["best"]
        rows.append(head + [counts["pending"], counts["completed"], counts["failed"],
                            counts["expired"], best["value"] if best else None])
    return table(["ID", "NAME", "STATE", "DIRECTION", "ENGINE", "PENDING", "COMPLETED",
                  "FAILED", "EXPIRED", "BEST"], rows)


def trials_table(study, trials, columns=("ID", "STATE", "WORKER", "VALUE")):
    names = study.param_names()
    fields = {"ID": "id", "STATE": "state", "WORKER": "worker", "VALUE": "value"}
    rows = [[t.data[fields[c]] for c in columns] + [t.params.get(n) for n in names]
            for t in trials]
    return table(list(columns) + names, rows)


def trial_text(trial):
    """One trial: its id, state, value (or failure reason) and parameters."""
    head = f"trial {trial.id}: {trial.state}"
    if trial.value is not None:
        head += f", value {num(trial.value)}"
    if trial.reason:
        head += f" ({trial.reason})"
    return head + "\n  " + params_text(trial.params)


def study_text(study, rate=None):
    """The summary of `show` and `watch`: identity, the study's state, space, trials by
    state, warm-start observations (when any), the best trial, and the engine's state (the
    fields the study's JSON has)."""
    d, p = study.data, study.progress
    lines = [f"study {d['id']} {d['name']!r}: {d['direction']}, engine {d['engine']['name']}"
             + _settings(d["engine"].get("settings")),
             f"state     {study.state}",
             f"space     {_space(d['space'])}",
             f"trials    {_counts(p['trials'], d['max_trials'])}"]
    if p.get("observations"):
        lines.append(f"observed  {p['observations']} warm-start observations")
    if rate is not None:
        lines.append(f"rate      {rate:.1f} told/min")
    lines.append(_best_line(study, p.get("best")))
    lines += _engine_lines(p)
    lines.append(f"lease     {d['lease_seconds']} s; created {d['created_at']}")
    return "\n".join(lines)


def _best_line(study, best):
    if not best:
        return "best      - (no completed trial yet)"
    params = params_text(Trial(study, best).params)
    return f"best      {num(best['value'])} (trial {best['id']}) {params}"


def _settings(settings):
    if not settings:
        return ""
    return " (" + ", ".join(f"{k}={v}" for k, v in settings.items()) + ")"


def _space(space):
    if space["type"] == "box":
        return "box: " + ", ".join(_param(p) for p in space["params"])
    where = f", candidate set {space['candidate_set']}" if space.get("candidate_set") else ""
    return f"candidates: {space['rows']} rows x {space['dim']}{where}"


def _param(p):
    if p["type"] == "categorical":
        return f"{p['name']} in {{{', '.join(map(str, p['choices']))}}}"
    log = " log" if p.get("log") else ""
    return f"{p['name']} {p['type']} [{num(p['low'])}, {num(p['high'])}]{log}"


def _counts(counts, max_trials):
    total = sum(counts.values())
    text = "  ".join(f"{k} {counts[k]}" for k in ("pending", "completed", "failed", "expired"))
    return f"{text}  (total {total}" + (f" of max {max_trials})" if max_trials else ")")


def _engine_lines(p):
    keys = [("epoch", "epoch"), ("epoch_asks", "epoch asks"), ("last_batch", "last batch"),
            ("dictionary_size", "dictionary size"), ("model_rows", "model rows"),
            ("init_phase", "init phase")]
    shown = [f"{label} {num(p[k])}" for k, label in keys if k in p]
    lines = ["engine    " + "  ".join(shown)] if shown else []
    h = p.get("hyperparameters")
    if h:
        ls = " ".join(num(v) for v in h["lengthscales"])
        lines.append(f"kernel    fitted {num(h['fitted'])} ({h['fits']} fits), lengthscales {ls}, "
                     f"variance {num(h['kernel_variance'])}, noise {num(h['noise'])}"
                     + (f", categorical mix {num(h['categorical_mix'])}"
                        if h.get("categorical_mix") else "")
                     + (f", interior prior {num(h['interior_prior'])}"
                        if h.get("interior_prior") else ""))
    return lines
