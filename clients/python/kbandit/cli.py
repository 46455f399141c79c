"""This file contains the `kbandit` command line (also `python3 -m kbandit`): argument
parsing, one function per subcommand, and the mapping of failures to exit statuses."""
import argparse
import json
import math
import sys
import time

from . import render
from .client import Client
from .errors import ConnectionFailed, KbanditError, NotFound
from .space import finite, read_csv, read_observations
from .study import Study

EXIT_OK, EXIT_API, EXIT_USAGE, EXIT_CONNECTION, EXIT_NO_TRIAL = 0, 1, 2, 3, 4
STUDY_STATES = ("active", "paused", "completed")
STATE_COMMANDS = {  # command: (the study state it sets, help)
    "pause": ("paused", "pause a study: asks hand out nothing until resumed (tells are "
                        "still taken)"),
    "resume": ("active", "make a paused study active again"),
    "complete": ("completed", "complete a study for good: asks hand out nothing (tells "
                              "are still taken)"),
}

EPILOG = """\
STUDY is a study id or name (a name made only of digits must be given by its id).
--url and --token default to $KB_URL and $KB_TOKEN (then http://127.0.0.1:8080).
--json prints the daemon's JSON (the schemas of openapi.yaml) instead of tables.

exit status:
  0  success
  1  the daemon answered an error (its message on stderr)
  2  usage error (bad arguments, unreadable file)
  3  the daemon could not be reached (after retries)
  4  ask: no trial was handed out (the ask status on stderr)

examples:
  kbandit engines bbkb
  kbandit create svc --param C=float:0.001:1000:log --param kernel=cat:rbf,poly
  kbandit --json ask svc | jq .trials[0].id
  kbandit tell svc 1 0.93
  kbandit export old -o old.csv; kbandit observe svc old.csv   # warm start
  kbandit pause svc; kbandit studies --state paused; kbandit resume svc
  kbandit watch svc --interval 2
"""


class UsageError(Exception):
    """A mistake in the command's arguments or files (exit status 2)."""


def main(argv=None):
    """Runs the command line; returns the exit status."""
    args = build_parser().parse_args(argv)
    try:
        # a command answers within seconds when the daemon is down (worker loops keep the
        # library's longer default, which outlasts a restart)
        client = Client(args.url, args.token, timeout=args.timeout, retries=5)
    except ValueError as e:  # a malformed --url
        return _fail(EXIT_USAGE, e)
    try:
        return args.run(client, args) or EXIT_OK
    except UsageError as e:
        return _fail(EXIT_USAGE, e)
    except ConnectionFailed as e:
        return _fail(EXIT_CONNECTION, e)
    except KbanditError as e:
        return _fail(EXIT_API, e)
    except BrokenPipeError:  # e.g. `kbandit trials s | head`
        return EXIT_OK


def _fail(status, error):
    print(f"kbandit: {error}", file=sys.stderr)
    return status


# ---------------------------------------------------------------------- parser

def build_parser():
    parser = argparse.ArgumentParser(
        prog="kbandit", description="Command line of the kbandit optimization server.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    _global_options(parser, defaults=True)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    common = argparse.ArgumentParser(add_help=False)
    _global_options(common, defaults=False)  # also accepted after the subcommand

    def command(name, run, help_text):
        p = sub.add_parser(name, parents=[common], help=help_text, description=help_text)
        p.set_defaults(run=run)
        return p

    p = command("engines", cmd_engines, "the engines, or one engine's settings")
    p.add_argument("engine", nargs="?", metavar="ENGINE",
                   help="list this engine's settings: type, default, range, description")
    p = command("studies", cmd_studies, "list the live studies")
    p.add_argument("--state", choices=STUDY_STATES, help="only the studies in this state")
    _create_options(command("create", cmd_create, "create a study (from flags or --spec FILE)"))
    _study_arg(command("show", cmd_show, "a study's settings and progress"))
    _ask_options(_study_arg(command("ask", cmd_ask, "ask for trials")))
    p = _study_arg(command("tell", cmd_tell, "tell a trial's value"))
    p.add_argument("trial", type=int, help="trial id")
    p.add_argument("value", type=number(), help="the measured value, in the study's direction")
    p = _study_arg(command("observe", cmd_observe,
                           "warm start: add results evaluated outside the study from a CSV "
                           "file (a header with the parameters' names and 'value'; a "
                           "study's CSV export reads as is)"))
    p.add_argument("file", metavar="CSV", help="the results")
    p = _study_arg(command("fail", cmd_fail, "mark a trial failed"))
    p.add_argument("trial", type=int, help="trial id")
    p.add_argument("--reason", help="why the evaluation failed")
    p = _study_arg(command("best", cmd_best, "the best completed trial"))
    p.add_argument("--by", choices=["value", "model"], default="value",
                   help="value: the best told value (default); model: the best posterior mean "
                        "among the values within two noise sds of it, for noisy objectives")
    p = _study_arg(command("trials", cmd_trials, "a study's trials"))
    p.add_argument("--state", choices=["pending", "completed", "failed", "expired"])
    p = _study_arg(command("export", cmd_export, "all trials as CSV or JSON"))
    p.add_argument("--format", choices=["csv", "json"], default="csv", help="default: csv")
    p.add_argument("-o", "--output", help="write to this file instead of stdout")
    _study_arg(command("delete", cmd_delete, "delete a study and all its data"))
    for name, (_, help_text) in STATE_COMMANDS.items():
        _study_arg(command(name, cmd_set_state, help_text))
    _watch_options(_study_arg(command("watch", cmd_watch, "live progress of a study")))
    return parser


def _global_options(parser, defaults):
    def opt(*names, **kw):
        if not defaults:
            kw["default"] = argparse.SUPPRESS
        parser.add_argument(*names, **kw)

    opt("--url", default=None, help="daemon URL (default $KB_URL, else http://127.0.0.1:8080)")
    opt("--token", default=None, help="bearer token (default $KB_TOKEN)")
    opt("--json", action="store_true", default=False, help="print JSON, not tables")
    opt("--timeout", type=number(above=0), default=30.0, help="seconds per request (default 30)")


def _study_arg(p):
    p.add_argument("study", metavar="STUDY", help="study id or name")
    return p


def _create_options(p):
    p.add_argument("name", nargs="?", help="study name (optional with --spec)")
    p.add_argument("--spec", help="JSON or YAML file holding the API's study body (StudyCreate)")
    p.add_argument("--param", action="append", type=parse_param, default=[], metavar="SPEC",
                   help="box parameter: NAME=float:LOW:HIGH[:log], NAME=int:LOW:HIGH[:log] or "
                        "NAME=cat:A,B,... (repeat for each parameter)")
    p.add_argument("--candidates", metavar="CSV", help="candidate set: a CSV file of numbers")
    p.add_argument("--candidate-set", type=int, metavar="ID", help="an uploaded candidate set")
    p.add_argument("--direction", choices=["maximize", "minimize"],
                   help="default: maximize")
    p.add_argument("--engine", help="engine name (daemon default: bbkb)")
    p.add_argument("--set", action="append", type=parse_setting, default=[], metavar="KEY=VALUE",
                   dest="settings", help="engine setting (VALUE read as JSON, else as text)")
    p.add_argument("--lease-seconds", type=int)
    p.add_argument("--max-trials", type=int)
    p.add_argument("--exist-ok", action="store_true",
                   help="print the live study of that name instead of failing with 409")


def _ask_options(p):
    p.add_argument("--count", type=int, default=1, help="trials to ask for (default 1)")
    p.add_argument("--wait", type=number(at_least=0), default=0.0,
                   help="seconds to wait for a trial (default 0: answer at once)")
    p.add_argument("--worker", help="worker name (default host-pid)")


def _watch_options(p):
    p.add_argument("--interval", type=number(at_least=0), default=2.0,
                   help="seconds between refreshes (default 2)")
    p.add_argument("--once", action="store_true", help="print one summary and exit")


def parse_param(text):
    """NAME=float:LOW:HIGH[:log] | NAME=int:LOW:HIGH[:log] | NAME=cat:A,B,... -> a Param."""
    name, _, rest = text.partition("=")
    kind, _, spec = rest.partition(":")
    if not name or not spec:
        raise argparse.ArgumentTypeError(f"{text!r}: expected NAME=TYPE:...")
    if kind in ("cat", "categorical"):
        choices = [_scalar(c) for c in spec.split(",")]
        return {"name": name, "type": "categorical", "choices": choices}
    parts = spec.split(":")
    if kind not in ("float", "int") or len(parts) not in (2, 3) or parts[2:] not in ([], ["log"]):
        raise argparse.ArgumentTypeError(f"{text!r}: expected NAME=float:LOW:HIGH[:log], "
                                         "NAME=int:LOW:HIGH[:log] or NAME=cat:A,B,...")
    convert = finite if kind == "float" else int
    try:
        param = {"name": name, "type": kind, "low": convert(parts[0]), "high": convert(parts[1])}
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"{text!r}: {e}") from None
    if parts[2:]:
        param["log"] = True
    return param


def parse_setting(text):
    key, sep, value = text.partition("=")
    if not key or not sep:
        raise argparse.ArgumentTypeError(f"{text!r}: expected KEY=VALUE")
    return key, _scalar(value)


def _scalar(text):
    """A JSON value when the text is one (1, 0.5, [1, 2], true), else the text itself;
    NaN, Infinity and numbers beyond a double (1e400) are refused: JSON cannot carry them."""
    try:
        value = json.loads(text)
    except ValueError:
        return text
    if not _all_finite(value):
        raise argparse.ArgumentTypeError(f"{text!r}: not a finite number")
    return value


def _all_finite(value):
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, list):
        return all(_all_finite(v) for v in value)
    if isinstance(value, dict):
        return all(_all_finite(v) for v in value.values())
    return True


def number(above=None, at_least=None):
    """An argparse type: a finite float, > above / >= at_least when given."""
    def parse(text):
        try:
            v = finite(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r}: not a finite number") from None
        if (above is not None and not v > above) or (at_least is not None and not v >= at_least):
            bound = f"> {above:g}" if above is not None else f">= {at_least:g}"
            raise argparse.ArgumentTypeError(f"{text!r}: must be {bound}")
        return v
    return parse


# ---------------------------------------------------------------------- commands

def cmd_engines(client, args):
    catalogue = client.engines()
    names = [e["name"] for e in catalogue["engines"]]
    if args.engine is not None and args.engine not in names:
        raise UsageError(f"engines: unknown engine '{args.engine}' (known: {', '.join(names)})")
    if args.json:
        return _print_json(catalogue)
    print(render.engines_text(catalogue, args.engine))


def cmd_studies(client, args):
    studies = client.studies(state=args.state)
    if args.json:
        return _print_json({"studies": [s.data for s in studies], "next_cursor": None})
    print(render.studies_table(studies))


def cmd_create(client, args):
    if args.spec:
        given = [flag for flag, v in (("--param", args.param), ("--candidates", args.candidates),
                                      ("--candidate-set", args.candidate_set),
                                      ("--direction", args.direction), ("--engine", args.engine),
                                      ("--set", args.settings),
                                      ("--lease-seconds", args.lease_seconds),
                                      ("--max-trials", args.max_trials))
                 if v not in (None, [])]
        if given:  # they used to be dropped without a word
            raise UsageError(f"create: --spec holds the whole study; {', '.join(given)} "
                             "cannot be combined with it (put them in the file)")
        study = _create(client, args, spec=load_spec(args.spec))
    else:
        if not args.name:
            raise UsageError("create: a NAME, or --spec FILE, is required")
        study = _create(client, args, **_space_kwargs(client, args),
                        direction=args.direction or "maximize",
                        engine=args.engine, settings=dict(args.settings),
                        lease_seconds=args.lease_seconds, max_trials=args.max_trials)
    _print_object(study, args)


def _create(client, args, **kw):
    name = args.name or kw.get("spec", {}).get("name")
    if args.exist_ok and name:
        found = client.find_study(name)
        if found is not None:
            return found
    return client.create_study(args.name, **kw)


def _space_kwargs(client, args):
    given = [bool(args.param), bool(args.candidates), args.candidate_set is not None]
    if sum(given) != 1:
        raise UsageError("create: give exactly one of --param, --candidates, --candidate-set")
    if args.param:
        return {"params": args.param}
    if args.candidates:
        try:
            rows, names = read_csv(args.candidates)
        except (OSError, ValueError) as e:
            raise UsageError(f"--candidates: {e}") from None
        return {"candidate_set": client.upload_candidates(rows, names)["id"]}
    return {"candidate_set": args.candidate_set}


def load_spec(path):
    """A study body from a JSON file, or a YAML one (.yaml/.yml; needs PyYAML)."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise UsageError(f"--spec: {e}") from None
    if path.endswith((".yaml", ".yml")):
        try:
            import yaml
        except ImportError:
            raise UsageError(f"--spec {path}: reading YAML needs PyYAML (pip install "
                             "PyYAML, or apt install python3-yaml); or give a JSON file") from None
        try:
            spec = yaml.safe_load(text)
        except yaml.YAMLError as e:
            raise UsageError(f"--spec {path}: {e}") from None
    else:
        try:
            spec = json.loads(text)
        except ValueError as e:
            raise UsageError(f"--spec {path}: not JSON: {e}") from None
    if not isinstance(spec, dict):
        raise UsageError(f"--spec {path}: expected an object (the API's study body)")
    return spec


def cmd_show(client, args):
    _print_object(resolve(client, args.study), args)


def _print_object(obj, args):
    """A study or a trial: its JSON with --json, its human rendering otherwise."""
    if args.json:
        return _print_json(obj.data)
    print(render.study_text(obj) if isinstance(obj, Study) else render.trial_text(obj))


def cmd_ask(client, args):
    study = resolve(client, args.study)
    result = study.ask(args.count, args.wait, args.worker)
    if args.json:
        _print_json(result.data)
    elif result:
        print(render.trials_table(study, result, ("ID", "WORKER")))
    if result:
        return EXIT_OK
    retry = f", retry after {render.num(result.retry_after)} s" if result.retry_after else ""
    print(f"kbandit: no trial handed out: {result.status}{retry}", file=sys.stderr)
    return EXIT_NO_TRIAL


def cmd_tell(client, args):
    _print_object(resolve(client, args.study).tell(args.trial, args.value), args)


def cmd_observe(client, args):
    study = resolve(client, args.study)
    try:
        observations = read_observations(args.file, study.data["space"])
    except (OSError, ValueError) as e:
        raise UsageError(f"observe: {e}") from None
    if not observations:
        raise UsageError(f"observe: {args.file}: no completed rows")
    added = study.add_observations(observations)
    if args.json:
        return _print_json({"added": added})
    print(f"study {study.id} {study.name!r}: {added} observations added")


def cmd_fail(client, args):
    _print_object(resolve(client, args.study).fail(args.trial, args.reason), args)


def cmd_best(client, args):
    study = resolve(client, args.study)
    best = study.best(by=args.by)
    if best is None:
        raise NotFound(404, "not_found", f"study {study.id} has no completed trial yet")
    _print_object(best, args)


def cmd_trials(client, args):
    study = resolve(client, args.study)
    trials = study.trials(args.state)
    if args.json:
        return _print_json({"trials": [t.data for t in trials], "next_cursor": None})
    print(render.trials_table(study, trials))


def cmd_export(client, args):
    study = resolve(client, args.study)
    text = study.export_csv() if args.format == "csv" else \
        json.dumps(study.export(), indent=2) + "\n"
    if not args.output:
        sys.stdout.write(text)
        return
    try:
        with open(args.output, "w", encoding="utf-8", newline="") as f:
            f.write(text)
    except OSError as e:
        raise UsageError(f"--output: {e}") from None


def cmd_delete(client, args):
    study = resolve(client, args.study)
    study.delete()
    if not args.json:
        print(f"deleted study {study.id} {study.name!r}")


def cmd_set_state(client, args):
    study = resolve(client, args.study)
    study.set_state(STATE_COMMANDS[args.command][0])
    if args.json:
        return _print_json(study.data)
    print(f"study {study.id} {study.name!r}: {study.state}")


def cmd_watch(client, args):
    """Refreshes the summary every --interval seconds, in place on a terminal, until
    Ctrl-C or the study is finished (max_trials handed out, or completed, and none
    pending)."""
    study = resolve(client, args.study)
    in_place = sys.stdout.isatty() and not args.json
    before = None
    try:
        while True:
            now = (time.monotonic(), _told(study))
            _watch_frame(study, args, _rate(before, now), in_place)
            if args.once or _finished(study):
                return
            before = now
            time.sleep(args.interval)
            study.refresh()
    except KeyboardInterrupt:
        print()


def _watch_frame(study, args, rate, in_place):
    if args.json:
        print(json.dumps(study.data), flush=True)  # one study per line
        return
    clear = "\x1b[H\x1b[2J" if in_place else ""
    footer = "" if args.once else \
        f"{time.strftime('%H:%M:%S')}  every {render.num(args.interval)} s, Ctrl-C to stop\n"
    sys.stdout.write(f"{clear}{render.study_text(study, rate)}\n{footer}\n")
    sys.stdout.flush()


def _rate(before, now):
    """Trials told per minute between two (time, told) samples; None for the first."""
    if before is None:
        return None
    return 60.0 * (now[1] - before[1]) / max(1e-9, now[0] - before[0])


def _told(study):
    return study.progress["trials"]["completed"]


def _finished(study):
    counts = study.progress["trials"]
    ended = study.state == "completed" or \
        (bool(study.max_trials) and sum(counts.values()) >= study.max_trials)
    return ended and counts["pending"] == 0


# ---------------------------------------------------------------------- helpers

def resolve(client, ref):
    """STUDY: an id when all digits, else a name."""
    is_id = ref.isascii() and ref.isdigit()  # "١٧" is a name, not study 17
    return client.get_study(int(ref)) if is_id else client.study(ref)


def _print_json(obj):
    print(json.dumps(obj, indent=2))
