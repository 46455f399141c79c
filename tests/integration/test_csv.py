"""This file contains the tests of RFC 4180 CSV through the daemon (issue 14 item 3):
candidate-set uploads with quoted fields (a quoted header `"a,b",c` is two names, ""
escapes, CRLF, fields spanning lines), 400 answers naming the line of a malformed quote,
and an export whose quoted names, workers and categorical values read back intact with
Python's csv module.
"""
import csv
import io

import pytest

from conftest import ask, create_study, error_of, tell


def post_csv(api, text):
    return api.post("/v1/candidate-sets", data=text.encode(), headers={"Content-Type": "text/csv"})


def upload(api, text):
    r = post_csv(api, text)
    assert r.status_code == 201, r.text
    return r.json()


def test_quoted_header_is_two_names(api):
    cs = upload(api, '"a,b",c\r\n1,2\r\n3,4\r\n')
    assert (cs["names"], cs["rows"], cs["dim"]) == (["a,b", "c"], 2, 2)


def test_quotes_escapes_and_line_breaks(api):
    cs = upload(api, '"say ""hi""", " x " ,"two\nlines"\n"1.5",2,3\r\n4,"5",6')
    assert cs["names"] == ['say "hi"', " x ", "two\nlines"]
    assert (cs["rows"], cs["dim"]) == (2, 3)
    study = create_study(api, "quoted-set", space={"type": "candidates", "candidate_set": cs["id"]},
                         settings={"repeats": "no_pending"})
    xs = {tuple(ask(api, study["id"])["trials"][0]["x"]) for _ in range(2)}
    assert xs == {(1.5, 2, 3), (4, 5, 6)}


def test_python_csv_writer_output_is_accepted(api):
    names = ["lr,initial", 'mom "beta"', "plain"]
    rows = [[0.1, 0.9, 1], [0.01, 0.99, 2]]
    out = io.StringIO()
    w = csv.writer(out, quoting=csv.QUOTE_NONNUMERIC)  # CRLF line ends, names quoted
    w.writerow(names)
    w.writerows(rows)
    cs = upload(api, out.getvalue())
    assert (cs["names"], cs["rows"], cs["dim"]) == (names, 2, 3)


@pytest.mark.parametrize("text,message", [
    ('a,b\n1,2\n3,"4\n', "line 3: the quote that opens column 2 is never closed"),
    ('"x\ny",b\n1,2\n"3",4"\n', "line 4 column 2: a quote inside an unquoted field"),
    ('a,b\n1,2\n"3"x,4\n', "line 3 column 1: text after the closing quote"),
])
def test_malformed_quotes_are_400_naming_the_line(api, text, message):
    r = post_csv(api, text)
    assert r.status_code == 400, r.text
    err = error_of(r)
    assert (err["code"], err["field"]) == ("invalid", None)
    assert err["message"].startswith(message), err["message"]


def test_export_quotes_what_needs_it(api):
    params = [{"name": "lr,initial", "type": "float", "low": 0.001, "high": 1},
              {"name": 'opt "kind"', "type": "categorical", "choices": ["a,b", 'say "x"', "plain"]}]
    study = create_study(api, "export-quoting", space={"type": "box", "params": params})
    sid = study["id"]
    worker = 'w,"1"'
    told = {}
    for _ in range(6):
        t = ask(api, sid, worker=worker)["trials"][0]
        tell(api, sid, t["id"], 0.25)
        told[t["id"]] = t["params"]
    r = api.get(f"/v1/studies/{sid}/export", params={"format": "csv"})
    assert r.status_code == 200
    rows = list(csv.reader(io.StringIO(r.text, newline="")))
    assert rows[0] == ["id", "state", "worker", "value", "lr,initial", 'opt "kind"']
    assert len(rows) == 1 + len(told)
    for row in rows[1:]:
        p = told[int(row[0])]
        assert row[1:4] == ["completed", worker, "0.25"]
        assert float(row[4]) == p["lr,initial"] and row[5] == p['opt "kind"']


def test_export_of_a_named_set_has_its_column_names(daemons):
    """A study over a candidate set with a header exports its columns under those names
    (quoted as needed), after a restart too; a set without names keeps x0, x1, ..."""
    d = daemons()
    api = d.client()
    named = upload(api, 'depth,"lr, init"\n1,0.5\n2,0.25\n3,0.125\n')
    plain = upload(api, "1,0.5\n2,0.25\n")
    sids = []
    for cs in (named, plain):
        sid = create_study(api, f"set-{cs['id']}", space={"type": "candidates",
                                                         "candidate_set": cs["id"]})["id"]
        t = ask(api, sid)["trials"][0]
        tell(api, sid, t["id"], 1.0)
        sids.append(sid)
    for restarted in (False, True):
        if restarted:
            assert d.stop() == 0
            d.start()
            api = d.client()
        headers = [next(csv.reader(io.StringIO(api.get(f"/v1/studies/{sid}/export",
                                                       params={"format": "csv"}).text)))
                   for sid in sids]
        assert headers == [["id", "state", "worker", "value", "depth", "lr, init"],
                           ["id", "state", "worker", "value", "x0", "x1"]], headers
