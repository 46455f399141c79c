"""This file contains the check of libkbandit's boundary (issue 15 item 3): the shared
library exports exactly the functions kbandit.h declares with KB_API, nothing of
internal.h (kb__*) and no engine vtable. It reads the library built beside the daemon."""
import re
import subprocess

from conftest import REPO, daemon_binary


def declared_api():
    text = (REPO / "core" / "include" / "kbandit.h").read_text()
    return set(re.findall(r"^KB_API [^;]*?\b(kb_\w+)\(", text, re.M))


def exported():
    lib = daemon_binary().parent / "libkbandit.so"
    assert lib.is_file(), f"{lib} is not built"
    out = subprocess.run(["nm", "-D", "--defined-only", str(lib)], capture_output=True,
                         text=True, check=True).stdout
    return {line.split()[-1] for line in out.splitlines() if line.split()[1] in "TtDdBbRr"}


def test_shared_library_exports_exactly_the_public_api():
    api = declared_api()
    assert len(api) >= 40, sorted(api)  # the header parse found the declarations
    assert exported() == api
