"""This file contains the float round-trip test of issue 14: doubles told to the daemon
come back bit-identical and at their shortest decimal form in JSON responses, the JSON
export and the CSV export (the daemon used to print every real with 17 digits, so 0.93
read back as 0.93000000000000005)."""
import csv
import io
import json
import random
import struct

from conftest import ask, create_study, grid, tell


def random_double(rng):
    """A finite double over many magnitudes, sign and mantissa uniform."""
    return rng.choice((-1.0, 1.0)) * rng.random() * 10.0 ** rng.randint(-300, 300)


def bits(x):
    return struct.pack("<d", x)


def significant_digits(token):
    """Significant digits of a decimal rendering ("0.00930" -> 2, "1.5e+300" -> 2)."""
    mantissa = token.lower().split("e")[0].lstrip("-").replace(".", "")
    return len(mantissa.strip("0")) or 1


def assert_shortest(token, value):
    """token reads back as value bit for bit, with no more digits than Python's repr
    (the shortest round-trip form)."""
    assert bits(float(token)) == bits(value), (token, value)
    assert significant_digits(token) == significant_digits(repr(value)), (token, repr(value))


def raw_values(text):
    """Each trial's "value" token as the daemon wrote it (json with floats kept as text)."""
    doc = json.loads(text, parse_float=str)
    return {t["id"]: t["value"] for t in doc["trials"]}


def test_thousand_doubles_round_trip_shortest(api):
    rng = random.Random(14)
    sid = create_study(api, "floats", space={"type": "candidates", "candidates": grid(1000, 2)})["id"]
    told = {}
    for _ in range(10):
        for t in ask(api, sid, count=100)["trials"]:
            told[t["id"]] = random_double(rng)
            tell(api, sid, t["id"], told[t["id"]])
    assert len(told) == 1000

    listed = api.get(f"/v1/studies/{sid}/trials", params={"state": "completed", "limit": 1000})
    exported = api.get(f"/v1/studies/{sid}/export", params={"format": "json"})
    for r in (listed, exported):
        tokens = raw_values(r.text)
        assert tokens.keys() == told.keys()
        for tid, tok in tokens.items():
            assert_shortest(tok, told[tid])

    rows = list(csv.reader(io.StringIO(api.get(f"/v1/studies/{sid}/export",
                                                params={"format": "csv"}).text)))
    assert rows[0][:4] == ["id", "state", "worker", "value"]
    csv_values = {int(row[0]): row[3] for row in rows[1:]}
    assert csv_values.keys() == told.keys()
    for tid, tok in csv_values.items():
        assert_shortest(tok, told[tid])


def test_issue_examples_print_as_typed(api):
    space = {"type": "box", "params": [{"name": "lr", "type": "float", "low": 1e-5, "high": 0.93}]}
    sid = create_study(api, "typed", space=space)["id"]
    text = api.get(f"/v1/studies/{sid}").text
    assert '"low":1e-05' in text.replace(" ", "") and '"high":0.93' in text.replace(" ", ""), text
    tid = ask(api, sid)["trials"][0]["id"]
    tell(api, sid, tid, 0.93)
    assert raw_values(api.get(f"/v1/studies/{sid}/export").text)[tid] == "0.93"
    csv_rows = api.get(f"/v1/studies/{sid}/export", params={"format": "csv"}).text.splitlines()
    assert csv_rows[1].split(",")[3] == "0.93"
