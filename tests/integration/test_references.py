"""This file contains the check of issue 15 item 6: the comments and docstrings of the
source files name only documents that are in the repository. Every `*.md` path a source
file mentions must exist (from the repository root, or from the file's own folder), and
no source names the documents the project started from outside it (a "PREAMBLE", a brief,
the seeds' or data's folders): what they said lives in docs/ (docs/REFERENCES.md,
docs/ARCHITECTURE.md). Pure Python; reads the files git tracks."""
import re
import subprocess

from conftest import REPO

SOURCE = re.compile(r"\.(c|h|py|sh)$|(^|/)(Makefile|run-all|install-deps)$")
MD_PATH = re.compile(r"(?<![\w./-])((?:\.\./)*[\w./-]*\w\.md)\b")
OUTSIDE = re.compile(r"PREAMBLE|\bbrief\.md|shared/(docs|seeds)/|shared/data/README")


def sources():
    out = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True,
                         check=True).stdout.split()
    this = "tests/integration/test_references.py"  # names the patterns it looks for
    return [p for p in out if SOURCE.search(p) and p != this and (REPO / p).is_file()]


def in_repo(p):
    p = p.resolve()
    return p.is_relative_to(REPO.resolve()) and p.is_file()


def missing_references():
    bad = []
    for path in sources():
        for n, line in enumerate((REPO / path).read_text(errors="replace").splitlines(), 1):
            if OUTSIDE.search(line):
                bad.append(f"{path}:{n}: {line.strip()}")
            for ref in MD_PATH.findall(line):
                if not any(in_repo(base / ref) for base in (REPO, (REPO / path).parent)):
                    bad.append(f"{path}:{n}: {ref}")
    return bad


def test_sources_reference_only_documents_in_the_repository():
    assert len(sources()) > 50  # the listing found the tree
    bad = missing_references()
    assert not bad, "\n".join(bad)
