"""This file contains the tests of GET /v1/studies: pages by cursor, and the ?name= filter
that finds a study by its exact name (issue 14 item 3; worker.py used to page through
every study for it). The ?state= filter is tested with the states, in test_study_state.py.
"""
from conftest import ask, create_study, error_of


def names_of(page):
    return [s["name"] for s in page["studies"]]


def list_studies(api, **params):
    r = api.get("/v1/studies", params=params)
    assert r.status_code == 200, r.text
    return r.json()


def test_name_finds_exactly_that_study(api):
    ids = {n: create_study(api, n)["id"] for n in ["alpha", "alpha-2", "Alpha", "a b+c,d", "ünï"]}
    for n, sid in ids.items():
        page = list_studies(api, name=n)  # requests encodes spaces as '+', '+' as %2B
        assert [s["id"] for s in page["studies"]] == [sid], (n, page)
        assert page["studies"][0]["name"] == n
        assert page["next_cursor"] is None
    assert list_studies(api, name="alph") == {"studies": [], "next_cursor": None}
    assert list_studies(api, name="ALPHA") == {"studies": [], "next_cursor": None}


def test_name_after_delete_and_recreate(api):
    old = create_study(api, "again")["id"]
    assert api.delete(f"/v1/studies/{old}").status_code == 204
    assert list_studies(api, name="again")["studies"] == []
    new = create_study(api, "again")["id"]
    assert new != old
    assert [s["id"] for s in list_studies(api, name="again")["studies"]] == [new]


def test_name_with_cursor_and_limit(api):
    sid = create_study(api, "target")["id"]
    for i in range(3):
        create_study(api, f"other-{i}")
    assert names_of(list_studies(api, name="target", limit=1)) == ["target"]
    assert list_studies(api, name="target", cursor=str(sid)) == {"studies": [], "next_cursor": None}
    assert names_of(list_studies(api, name="target", cursor=str(sid - 1))) == ["target"]


def test_bad_name_is_400(api):
    create_study(api, "x" * 200)
    assert names_of(list_studies(api, name="x" * 200)) == ["x" * 200]
    for bad in ["", "x" * 201]:
        r = api.get("/v1/studies", params={"name": bad})
        assert r.status_code == 400, r.text
        err = error_of(r)
        assert (err["code"], err["field"]) == ("invalid", "name")


def test_length_limits_count_characters(api):
    """Length limits count characters, as openapi's maxLength does: 200 CJK characters
    (600 bytes) make a name, a worker and a candidate column, in JSON, CSV and ?name=;
    201 do not (67 of them, 201 bytes, used to be refused as over 200 characters)."""
    name = "日" * 200
    sid = create_study(api, name)["id"]
    assert names_of(list_studies(api, name=name)) == [name]
    assert ask(api, sid, worker=name)["trials"][0]["worker"] == name
    r = api.post("/v1/candidate-sets", data=(",".join([name, "b"]) + "\n1,2\n").encode(),
                 headers={"Content-Type": "text/csv"})
    assert r.status_code == 201 and r.json()["names"] == [name, "b"], r.text
    too_long = "日" * 201
    assert api.get("/v1/studies", params={"name": too_long}).status_code == 400
    r = api.post(f"/v1/studies/{sid}/ask", json={"worker": too_long})
    assert r.status_code == 400 and error_of(r)["field"] == "worker", r.text
    r = api.post("/v1/candidate-sets", json={"rows": [[1]], "names": [too_long]})
    assert r.status_code == 400 and error_of(r)["field"] == "names[0]", r.text


def test_pages_end_with_a_null_cursor(api):
    made = [create_study(api, f"s{i}")["id"] for i in range(4)]
    assert api.delete(f"/v1/studies/{made[1]}").status_code == 204
    live = [made[0], made[2], made[3]]
    seen, cursor, pages = [], None, 0
    while True:
        page = list_studies(api, limit=2, **({"cursor": cursor} if cursor else {}))
        seen += [s["id"] for s in page["studies"]]
        pages += 1
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == live
    assert pages == 2  # no trailing empty page
    # A page that ends exactly at the last study says so.
    page = list_studies(api, limit=3)
    assert [s["id"] for s in page["studies"]] == live and page["next_cursor"] is None
