"""This file contains the conversions from plain Python search spaces to the API's
study "space" object: box parameters from dicts, tuples and lists; candidate sets from
lists of rows, numpy arrays, or CSV files (read here, so quoted header fields and the
column names survive; uploaded as JSON)."""
import csv
import math
import numbers
import os


def box_space(params):
    """{"type": "box", "params": [...]} from either the API's list of parameter dicts, or
    a dict {name: spec} where spec is a dict without the name ({"type": "float", "low":
    1e-5, "high": 1, "log": True}), a tuple (low, high) or (low, high, "log") -- an int
    parameter when low and high are both ints, else a float one -- or a list of
    categorical choices."""
    if isinstance(params, dict):
        params = [_param(name, spec) for name, spec in params.items()]
    return {"type": "box", "params": list(params)}


def _param(name, spec):
    if isinstance(spec, dict):
        return {"name": name, **spec}
    if isinstance(spec, list):
        return {"name": name, "type": "categorical", "choices": spec}
    if isinstance(spec, tuple) and len(spec) in (2, 3):
        low, high = spec[0], spec[1]
        integral = all(isinstance(v, int) and not isinstance(v, bool) for v in (low, high))
        out = {"name": name, "type": "int" if integral else "float", "low": low, "high": high}
        if len(spec) == 3:
            if spec[2] != "log":
                raise ValueError(f"parameter {name!r}: the third item may only be 'log'")
            out["log"] = True
        return out
    raise TypeError(f"parameter {name!r}: expected a dict, a (low, high) tuple or a list "
                    f"of choices, got {type(spec).__name__}")


def candidate_rows(candidates):
    """Rows (lists of floats) from a list of rows, a list of numbers (one column), or a
    numpy array (1-D: one column; 2-D: rows)."""
    if hasattr(candidates, "tolist"):  # numpy arrays, without importing numpy
        candidates = candidates.tolist()
    rows = [list(r) if isinstance(r, (list, tuple)) else [r] for r in candidates]
    for i, row in enumerate(rows):
        for j, v in enumerate(row):
            if not isinstance(v, numbers.Real) or isinstance(v, bool):
                raise TypeError(f"candidates[{i}][{j}] is not a number: {v!r}")
    return rows


def is_path(candidates):
    """Whether candidates names a file (a CSV file to read) rather than holding rows."""
    return isinstance(candidates, (str, os.PathLike))


def read_csv(path):
    """(rows, names) of a CSV file of numbers. The first line is a header when one of
    its fields is not a number (names is None otherwise); blank lines are skipped."""
    with open(path, newline="", encoding="utf-8") as f:
        lines = [r for r in csv.reader(f) if r and any(field.strip() for field in r)]
    if not lines:
        raise ValueError(f"{path}: no rows")
    names = None
    if not all(_is_number(field) for field in lines[0]):
        names, lines = [field.strip() for field in lines[0]], lines[1:]
    rows = []
    for n, line in enumerate(lines, start=1):
        try:
            rows.append([float(field) for field in line])
        except ValueError as e:
            raise ValueError(f"{path}: data row {n}: {e}") from None
    if not rows:
        raise ValueError(f"{path}: a header and no rows")
    return rows, names


def _is_number(text):
    try:
        float(text)
    except ValueError:
        return False
    return True


EXPORT_COLUMNS = ("id", "state", "worker", "value")  # an export's columns besides the point's


def read_observations(path, space):
    """(point, value) pairs from a CSV file with a header and a `value` column, for
    Study.add_observations: a box's points as {name: value} from the columns named after
    its parameters (ints and floats parsed, a categorical value matched to its choice by
    its text), a candidate set's as the other columns in order. A study's CSV export
    reads as is: a `state` column keeps the completed rows only."""
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    if not rows or "value" not in rows[0]:
        raise ValueError(f"{path}: expected a header with a 'value' column and rows")
    if "state" in rows[0]:
        rows = [r for r in rows if r["state"] == "completed"]
    columns = [c for c in rows[0] if c not in EXPORT_COLUMNS] if rows else []
    out = []
    for n, row in enumerate(rows, start=2):  # line numbers, the header being line 1
        try:
            point = (_box_point(row, space["params"]) if space["type"] == "box"
                     else [finite(row[c]) for c in columns])
            out.append((point, finite(row["value"])))
        except (KeyError, ValueError) as e:
            raise ValueError(f"{path}: line {n}: {e}") from None
    return out


def finite(text):
    """A finite float from text (float() also reads nan and inf, which JSON cannot carry)."""
    v = float(text)
    if not math.isfinite(v):
        raise ValueError(f"{text!r} is not a finite number")
    return v


def choice_is(choice, text):
    """Whether a CSV field is this categorical choice as the daemon's export writes it:
    true / false for a boolean, a number by value (1 for 1.0), a string as is."""
    if isinstance(choice, bool):
        return text == ("true" if choice else "false")
    if isinstance(choice, (int, float)):
        try:
            return (int(text) == choice if isinstance(choice, int) and text.strip().lstrip("+-").isdigit()
                    else float(text) == choice)
        except ValueError:
            return False
    return text == choice


def _box_point(row, params):
    point = {}
    for p in params:
        if p["name"] not in row:
            raise KeyError(f"no column for parameter {p['name']!r}")
        text = row[p["name"]]
        if p["type"] == "float":
            point[p["name"]] = finite(text)
        elif p["type"] == "int":
            point[p["name"]] = int(text) if text.strip().lstrip("+-").isdigit() else int(finite(text))
        else:
            match = [c for c in p["choices"] if choice_is(c, text)]
            if not match:
                raise ValueError(f"{p['name']}: {text!r} is not one of its choices")
            point[p["name"]] = match[0]
    return point
