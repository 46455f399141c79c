"""This file contains the tests of docker/: static checks of its files, and the image built
for real with buildah and run.

Static: the Dockerfile has a bookworm build stage with the -dev packages and a runtime
stage without them; the runtime stage runs as a non-root USER, declares VOLUME /data,
EXPOSE 8080, a HEALTHCHECK running docker/healthcheck, its defaults (0.0.0.0:8080, a
database on /data, the token secret) as KB_* variables and an empty CMD, so that
arguments add to them; every path the build COPYs exists; every shared library the
built daemon links directly comes from a package the runtime stage installs; compose.yaml
parses and builds that Dockerfile with /data on a volume; the build stage replayed here
builds the daemon without a warning; the entrypoint (run here in the image's layout, with
a stand-in daemon and with the real one) sets OPENBLAS_CORETYPE as scripts/openblas-coretype
says and OPENBLAS_NUM_THREADS=1 unless given, passes its arguments on and execs the daemon
(SIGTERM reaches it); the health check finds the daemon's listening socket on any address;
the no-auth variant (empty KB_TOKEN_FILE, KB_INSECURE=1) starts and a missing token file
does not.
Real (scripts/docker-build-local: buildah, chroot isolation, a debootstrap base, no
registry): the image builds without a warning and keeps its HEALTHCHECK; its user is
kbandit 10001:10001 with no login shell; run as `docker run` would run it (its entrypoint,
environment and user, a host directory as /data, the token as the secret, a network
namespace of its own), it answers /healthz, refuses requests without the token, passes its
health check (also with another --listen, which its health check follows, and with
`--log-level debug`, which keeps the defaults), serves without auth in the no-auth variant,
and a study with a told trial survives a restart in a new container on the same volume.
These need root and buildah; they fail, never skip, when they cannot build or run.
"""
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from conftest import REPO, SANITIZED, Daemon, daemon_binary, shutdown_and_check

DOCKER = REPO / "docker"
IMAGE_ENTRYPOINT = "/usr/local/lib/kbandit/entrypoint"
IMAGE_HEALTHCHECK = "/usr/local/lib/kbandit/healthcheck"
BASE_PACKAGES = {"libc6", "libgcc-s1", "libstdc++6"}  # in every Debian base image


def instructions(path):
    """(INSTRUCTION, argument text) pairs, continuation lines joined, comments dropped."""
    out, cur = [], ""
    for line in path.read_text().splitlines():
        s = line.strip()
        if not cur and (not s or s.startswith("#")):
            continue
        if s.startswith("#"):
            continue
        cur += " " + s[:-1] if s.endswith("\\") else " " + s
        if not s.endswith("\\"):
            word, _, rest = cur.strip().partition(" ")
            out.append((word.upper(), rest.strip()))
            cur = ""
    return out


def stages(path):
    result = []
    for ins, arg in instructions(path):
        if ins == "FROM":
            result.append({"from": arg, "ins": []})
        else:
            assert result, "instruction before FROM"
            result[-1]["ins"].append((ins, arg))
    return result


def apt_packages(stage):
    pkgs = set()
    for ins, arg in stage["ins"]:
        if ins == "RUN" and "apt-get install" in arg:
            for cmd in arg.split("&&"):
                if "apt-get install" in cmd:
                    pkgs |= {w for w in shlex.split(cmd) if not w.startswith("-")} - {
                        "apt-get", "install"}
    return pkgs


def exec_form(arg):
    return json.loads(arg) if arg.startswith("[") else shlex.split(arg)


@pytest.fixture(scope="module")
def dockerfile():
    return stages(DOCKER / "Dockerfile")




def test_multistage_bookworm(dockerfile):
    assert len(dockerfile) >= 2
    build, runtime = dockerfile[0], dockerfile[-1]
    assert re.match(r"debian:bookworm\S*\s+AS\s+\w+", build["from"], re.I), build["from"]
    assert runtime["from"].startswith("debian:bookworm"), runtime["from"]
    dev = apt_packages(build)
    for p in ("libmicrohttpd-dev", "libjansson-dev", "libsqlite3-dev", "libopenblas-dev",
              "liblapacke-dev", "build-essential", "pkg-config"):
        assert p in dev, f"build stage lacks {p}"
    rt = apt_packages(runtime)
    assert not [p for p in rt if p.endswith("-dev")], f"-dev packages in the runtime stage: {rt}"
    assert "build-essential" not in rt and "curl" in rt
    assert "sqlite3" in rt  # the README's backup runs in the container (docker exec)
    stage_name = build["from"].split()[-1]
    copies = [a for i, a in runtime["ins"] if i == "COPY"]
    assert any(a.startswith(f"--from={stage_name} ") and "kbanditd" in a for a in copies), copies


def env_of(values):
    """The variables of ENV instructions (KEY=VALUE form)."""
    env = {}
    for v in values:
        env.update(w.split("=", 1) for w in shlex.split(v))
    return env


def test_runtime_stage_contract(dockerfile):
    runtime = dockerfile[-1]
    ins = {}
    for i, a in runtime["ins"]:
        ins.setdefault(i, []).append(a)
    user = ins["USER"][-1].split(":")[0]
    assert user not in ("root", "0", ""), "the runtime stage must not run as root"
    assert any("/data" in exec_form(v) or v.strip() == "/data" for v in ins["VOLUME"])
    assert any("8080" in v.split() or "8080/tcp" in v.split() for v in ins["EXPOSE"])
    (hc,) = ins["HEALTHCHECK"]
    options, _, command = hc.partition("CMD")
    assert exec_form(command.strip()) == [IMAGE_HEALTHCHECK], hc
    assert 'exec kbanditd "$@"' in (DOCKER / "entrypoint").read_text()
    for script in ("docker/entrypoint", "docker/healthcheck", "scripts/openblas-coretype"):
        assert any(script in exec_form(a)[:-1] and exec_form(a)[-1] == "/usr/local/lib/kbandit/"
                   for a in ins["COPY"]), (script, ins["COPY"])
    # The defaults are variables and CMD is empty: `docker run IMAGE --log-level debug`
    # must not drop them (a CMD's arguments are replaced by any argument).
    assert exec_form(ins["ENTRYPOINT"][-1]) == [IMAGE_ENTRYPOINT]
    assert exec_form(ins["CMD"][-1]) == [], ins["CMD"]
    env = env_of(ins["ENV"])
    assert env["KB_LISTEN"] == "0.0.0.0:8080", env
    assert env["KB_DB"].startswith("/data/"), env
    assert env["KB_TOKEN_FILE"] == "/run/secrets/kbandit_token", env
    assert "KB_INSECURE" not in env, "auth must be on by default"


def test_copied_paths_exist(dockerfile):
    missing = [s for stage in dockerfile for ins, arg in stage["ins"]
               if ins == "COPY" and not arg.startswith("--from")
               for s in exec_form(arg)[:-1] if not (REPO / s).exists()]
    assert not missing, f"COPY sources that do not exist: {missing}"


@pytest.mark.skipif(SANITIZED, reason="an ASan daemon links the sanitizer runtimes")
def test_runtime_packages_cover_linked_libraries(dockerfile):
    binary = daemon_binary()
    assert binary.is_file() and binary.read_bytes()[:4] == b"\x7fELF", \
        f"{binary} is not a built ELF binary"
    dump = subprocess.run(["objdump", "-p", str(binary)], capture_output=True, text=True, check=True)
    needed = re.findall(r"NEEDED\s+(\S+)", dump.stdout)
    ldd = subprocess.run(["ldd", str(binary)], capture_output=True, text=True, check=True).stdout
    paths = dict(re.findall(r"^\s*(\S+) => (\S+)", ldd, re.M))
    # The dynamic loader has no "=>" (a thread-local variable of a -fPIC object makes it
    # NEEDED: __tls_get_addr): "/lib64/ld-linux-x86-64.so.2 (0x...)".
    paths.update((os.path.basename(p), p) for p in re.findall(r"^\s*(/\S+) \(0x", ldd, re.M))
    runtime = apt_packages(dockerfile[-1])
    missing = []
    for lib in needed:
        real = subprocess.run(["realpath", paths[lib]], capture_output=True, text=True).stdout.strip()
        pkg = None
        # merged /usr: dpkg may know the file under /lib rather than /usr/lib
        for candidate in (real, real.removeprefix("/usr")):
            owner = subprocess.run(["dpkg", "-S", candidate], capture_output=True, text=True)
            if owner.returncode == 0:
                pkg = owner.stdout.split(":")[0]
                break
        if pkg not in runtime | BASE_PACKAGES:
            missing.append((lib, real, pkg))
    assert not missing, f"libraries the runtime stage does not install: {missing}"


def test_compose_file():
    doc = yaml.safe_load((DOCKER / "compose.yaml").read_text())
    (svc,) = doc["services"].values()
    ctx = (DOCKER / svc["build"]["context"]).resolve()
    assert ctx == REPO.resolve()
    assert (ctx / svc["build"]["dockerfile"]).resolve() == (DOCKER / "Dockerfile").resolve()
    assert any(v.split(":")[1] == "/data" for v in svc["volumes"]), svc["volumes"]
    named = {v.split(":")[0] for v in svc["volumes"]}
    assert named <= set(doc.get("volumes", {})), "volume not declared at top level"
    assert any(str(p).endswith(":8080") for p in svc["ports"])
    for s in svc.get("secrets", []):
        assert s in doc["secrets"], s
    assert "kbandit_token" in svc.get("secrets", []), "the token reaches the container as a secret"
    assert (DOCKER / "Dockerfile.dockerignore").is_file()


def test_build_stage_sources_suffice(dockerfile, tmp_path):
    """Replays the build stage without Docker: only what it COPYs, then its make command.
    Catches a source missing from the COPY list, also one make only warns about (the
    scripts/openblas-coretype it runs when it reads the Makefile)."""
    build = dockerfile[0]
    for ins, arg in build["ins"]:
        if ins == "COPY" and not arg.startswith("--from"):
            *srcs, dst = exec_form(arg)
            for s in srcs:
                src = REPO / s
                assert src.exists(), f"COPY source {s} is not in this tree"
                if src.is_dir():
                    shutil.copytree(src, tmp_path / dst.rstrip("/"), dirs_exist_ok=True)
                else:
                    to = tmp_path / dst / src.name if dst.endswith("/") else tmp_path / dst
                    to.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(src, to)
    runs = [a for i, a in build["ins"] if i == "RUN" and "make" in a]
    assert runs, "the build stage runs no make"
    cmd = runs[-1].split("&&")[0].replace('"$(nproc)"', "2")
    r = subprocess.run(cmd, shell=True, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    assert r.stderr == "", r.stderr[-3000:]
    assert (tmp_path / "build" / "kbanditd").is_file()


def image_layout(tmp_path):
    """The entrypoint and openblas-coretype side by side, as COPY puts them in the image."""
    lib = tmp_path / "lib"
    lib.mkdir()
    for src in (DOCKER / "entrypoint", REPO / "scripts" / "openblas-coretype"):
        assert os.access(src, os.X_OK), f"{src} is not executable"
        shutil.copy2(src, lib / src.name)
    return lib / "entrypoint"


def expected_coretype():
    return subprocess.run([REPO / "scripts" / "openblas-coretype"], capture_output=True, text=True,
                          check=True).stdout.strip()


@pytest.mark.parametrize("given, want_core, want_threads", [
    ({}, None, "1"),
    ({"OPENBLAS_CORETYPE": ""}, None, "1"),
    ({"OPENBLAS_CORETYPE": "Sandybridge", "OPENBLAS_NUM_THREADS": "3"}, "Sandybridge", "3"),
])
def test_entrypoint_environment_and_arguments(tmp_path, given, want_core, want_threads):
    entry = image_layout(tmp_path)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "kbanditd"  # prints what it was started with
    fake.write_text(f"#!{sys.executable}\nimport json, os, sys\n"
                    "print(json.dumps({'args': sys.argv[1:], 'env': dict(os.environ)}))\n")
    fake.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENBLAS_")}
    env.update(given, PATH=f"{bin_dir}:/usr/bin:/bin")
    args = ["--listen", "0.0.0.0:8080", "--db", "/data/a b.db", ""]
    r = subprocess.run(["/bin/sh", str(entry), *args], env=env, capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    seen = json.loads(r.stdout)
    assert seen["args"] == args
    core = want_core or expected_coretype() or None
    assert seen["env"].get("OPENBLAS_CORETYPE") == core, seen["env"].get("OPENBLAS_CORETYPE")
    assert seen["env"]["OPENBLAS_NUM_THREADS"] == want_threads


def test_entrypoint_starts_the_daemon(tmp_path):
    """The real daemon through the entrypoint: it logs the kernel family OpenBLAS chose,
    and SIGTERM stops it cleanly (the entrypoint exec'd, no shell in between)."""
    binary = daemon_binary()
    assert binary.is_file(), f"{binary} is not built"
    entry = image_layout(tmp_path)

    class ViaEntrypoint(Daemon):
        def command(self):
            return ["/bin/sh", str(entry)] + super().command()[1:]

    # Daemon.start layers env over the suite's environment; an empty OPENBLAS_CORETYPE
    # counts as unset for the entrypoint, which then decides (and never exports it empty).
    env = {"OPENBLAS_CORETYPE": "", "PATH": f"{binary.parent}:{os.environ.get('PATH', '/usr/bin:/bin')}"}
    d = ViaEntrypoint(tmp_path / "d", env=env, args=["--insecure"])
    d.start()
    try:
        line = d._listening_line(d.logs[-1])
        want = expected_coretype()
        if want:
            assert line["blas_core"] == want, line
        else:
            assert line["blas_core"], line
        assert d.client().get("/healthz").status_code == 200
    finally:
        shutdown_and_check([d])
    assert d.exit_codes == [0], d.exit_codes


def run_healthcheck(pid):
    return subprocess.run(["/bin/sh", str(DOCKER / "healthcheck"), str(pid)], capture_output=True,
                          text=True, timeout=30)


@pytest.mark.parametrize("listen", ["127.0.0.1:0", "0.0.0.0:0", "[::]:0", "[::1]:0", "localhost:0"])
def test_healthcheck_follows_the_listening_socket(daemons, listen):
    """docker/healthcheck, given the daemon's pid, asks /healthz where it listens: the
    address of its listening socket, loopback for a wildcard."""
    d = daemons(listen=listen, args=["--insecure"])
    r = run_healthcheck(d.proc.pid)
    assert r.returncode == 0, r.stderr


def test_healthcheck_fails_without_an_answer(daemons):
    d = daemons()
    # It really asks /healthz: a stopped daemon holds its socket but does not answer.
    os.kill(d.proc.pid, signal.SIGSTOP)
    try:
        r = run_healthcheck(d.proc.pid)
    finally:
        os.kill(d.proc.pid, signal.SIGCONT)
    assert r.returncode == 1 and "healthz" in r.stderr, r.stderr
    pid = d.proc.pid
    d.stop()
    r = run_healthcheck(pid)
    assert r.returncode == 1 and "no listening socket" in r.stderr, r.stderr


def test_no_auth_variant(daemons, tmp_path):
    """The image's no-auth run (README, Dockerfile): KB_TOKEN_FILE empty means no token
    file, KB_INSECURE=1 allows the open address. Without KB_INSECURE it is refused, and
    --insecure with the image's token file absent fails rather than opening up."""
    d = daemons(listen="0.0.0.0:0", env={"KB_TOKEN_FILE": "", "KB_INSECURE": "1"})
    assert d._listening_line(d.logs[-1])["auth"] is False
    assert d.client().get("/v1/studies").status_code == 200
    refused = daemons(listen="0.0.0.0:0", env={"KB_TOKEN_FILE": ""}, start=False)
    refused.start(expect_fail=True)
    assert refused.exit_codes[-1] != 0 and "--insecure" in refused.stderr(), refused.stderr()
    missing = daemons(listen="0.0.0.0:0", args=["--insecure"], start=False,
                      env={"KB_TOKEN_FILE": str(tmp_path / "kbandit_token")})
    missing.start(expect_fail=True)
    assert missing.exit_codes[-1] != 0 and "cannot read token file" in missing.stderr(), \
        missing.stderr()


# ------------------------------------------------------- the image, built and run for real

BUILD_SCRIPT = REPO / "scripts" / "docker-build-local"
# Not the script's default, which a user may keep, and one per run: test runs of other
# checkouts may share the image store.
IMAGE_TAG = f"kbandit/kbanditd:pytest-{os.getpid()}"
CACHE = Path(os.environ.get("KB_DOCKER_CACHE", "/var/cache/kbandit-docker"))
BUILD_NOISE = re.compile(r"warning|no such file|not found|debconf: unable", re.I)
KB_UID = 10001
TOKEN = "docker-test-token-0123456789abcdef"


def buildah(*args, check=True):
    """buildah on the image store of scripts/docker-build-local."""
    env = dict(os.environ, CONTAINERS_STORAGE_CONF=str(CACHE / "storage.conf"))
    r = subprocess.run(["buildah", *args], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0 or not check, f"buildah {args}: {r.stderr}"
    return r


@pytest.fixture(scope="module")
def image():
    """Builds the image with scripts/docker-build-local and returns its Docker config;
    removes it at the end (the next build reuses only the base). Never skipped: a machine
    that cannot build the image fails here."""
    if SANITIZED:  # the image compiles its own daemon: building it again adds nothing here
        pytest.skip("the real image is built and run by make test, not under sanitizers")
    assert os.geteuid() == 0, "buildah with chroot isolation and no user namespace needs root"
    r = subprocess.run([str(BUILD_SCRIPT), IMAGE_TAG], capture_output=True, text=True,
                       timeout=1800)
    log = r.stdout + r.stderr
    assert r.returncode == 0, log[-6000:]
    noise = [line for line in log.splitlines() if BUILD_NOISE.search(line)]
    assert not noise, noise
    info = json.loads(buildah("inspect", "--type", "image", IMAGE_TAG).stdout)
    manifest = json.loads(info["Manifest"])
    # The OCI format has no HEALTHCHECK; the script must build the Docker one.
    assert manifest["mediaType"] == "application/vnd.docker.distribution.manifest.v2+json"
    yield info["Docker"]["config"]
    buildah("rmi", IMAGE_TAG)


@pytest.fixture
def netns():
    """A network namespace with loopback up, as a container has: the daemon's defaults
    (0.0.0.0:8080) cannot collide with the host's ports (chroot isolation has no network
    namespace of its own)."""
    name = f"kbandit-test-{os.getpid()}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        subprocess.run(["ip", "-n", name, "link", "set", "lo", "up"], check=True)
        yield name
    finally:
        subprocess.run(["ip", "netns", "delete", name], check=True)


class Container:
    """A working container of the image run as `docker run` runs it: the image's
    ENTRYPOINT and CMD plus the arguments, its ENV, USER and WORKDIR (buildah run applies
    them), `volume` as /data, the token file as the secret, in the network namespace."""

    def __init__(self, config, netns, volume, token_file=None, env=None):
        self.config, self.netns, self.volume = config, netns, volume
        self.token_file, self.env = token_file, env or {}
        self.name = buildah("from", "--pull=never", IMAGE_TAG).stdout.strip()
        self.proc = self.log = None

    def buildah_run(self, *argv, **popen):
        cmd = ["ip", "netns", "exec", self.netns, "buildah", "run", "--isolation", "chroot",
               "-v", f"{self.volume}:/data"]
        if self.token_file:
            cmd += ["-v", f"{self.token_file}:/run/secrets/kbandit_token:ro"]
        for k, v in self.env.items():
            cmd += ["-e", f"{k}={v}"]
        env = dict(os.environ, CONTAINERS_STORAGE_CONF=str(CACHE / "storage.conf"))
        return subprocess.Popen(cmd + [self.name, "--", *argv], env=env, **popen)

    def exec(self, *argv):
        """A command in the running container (as `docker exec`)."""
        p = self.buildah_run(*argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        out, err = p.communicate(timeout=60)
        return p.returncode, out, err

    def start(self, *args, expect_fail=False):
        self.log = self.volume.parent / f"{self.name}.log"
        argv = self.config["Entrypoint"] + (self.config["Cmd"] or []) + list(args)
        with open(self.log, "w") as log:
            self.proc = self.buildah_run(*argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            line = Daemon._listening_line(self.log)
            if line is not None:
                return line
            if self.proc.poll() is not None:
                assert expect_fail, f"the container exited ({self.proc.returncode}):\n" + \
                    self.log.read_text()
                return None
            time.sleep(0.1)
        pytest.fail("the daemon did not start in the container:\n" + self.log.read_text())

    def daemon_pids(self):
        """The kbanditd processes in the network namespace (host pids)."""
        found = []
        for pid in subprocess.run(["ip", "netns", "pids", self.netns], capture_output=True,
                                  text=True, check=True).stdout.split():
            try:
                if Path(f"/proc/{pid}/comm").read_text().strip() == "kbanditd":
                    found.append(int(pid))
            except FileNotFoundError:  # exited meanwhile
                pass
        return found

    def daemon_pid(self):
        found = self.daemon_pids()
        assert len(found) == 1, found
        return found[0]

    def stop(self):
        """As `docker stop`: the STOPSIGNAL to the daemon; it must exit cleanly."""
        os.kill(self.daemon_pid(), signal.Signals[self.config["StopSignal"]])
        assert self.proc.wait(30) == 0, self.log.read_text()
        assert '"msg":"stopped"' in self.log.read_text()

    def healthcheck(self):
        """The image's HEALTHCHECK, run as Docker runs it."""
        kind, *argv = self.config["Healthcheck"]["Test"]
        assert kind in ("CMD", "CMD-SHELL"), kind
        return self.exec(*argv) if kind == "CMD" else self.exec("/bin/sh", "-c", *argv)

    def remove(self):
        """Kills what still runs (the daemon first: killing buildah run would orphan it)
        and deletes the working container."""
        if self.proc is not None and self.proc.poll() is None:
            for pid in self.daemon_pids():
                os.kill(pid, signal.SIGKILL)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        buildah("rm", self.name, check=False)


def http(netns, method, path, token=None, body=None, port=8080):
    """(status, JSON body) of a request to the container's loopback, with the host's curl."""
    cmd = ["ip", "netns", "exec", netns, "curl", "-sS", "--max-time", "20", "-X", method,
           "-w", "\n%{http_code}", f"http://127.0.0.1:{port}{path}"]
    if token:
        cmd += ["-H", f"Authorization: Bearer {token}"]
    if body is not None:
        cmd += ["-H", "Content-Type: application/json", "--data-binary", json.dumps(body)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    text, _, status = r.stdout.rpartition("\n")
    return int(status), json.loads(text) if text else None


@pytest.fixture
def run(image, netns, tmp_path):
    """Factory of containers on one volume (a host directory owned by the image's user)
    with the token secret; removes them at the end."""
    volume = tmp_path / "data"
    volume.mkdir()
    os.chown(volume, KB_UID, KB_UID)
    token_file = tmp_path / "kbandit_token"
    token_file.write_text(TOKEN + "\n")
    os.chown(token_file, KB_UID, KB_UID)
    token_file.chmod(0o600)
    made = []

    def make(*args, secret=True, env=None, expect_fail=False):
        c = Container(image, netns, volume, token_file if secret else None, env)
        made.append(c)
        c.started = c.start(*args, expect_fail=expect_fail)
        return c

    yield make
    for c in made:
        c.remove()


def test_image_user_and_config(image, run):
    assert image["Cmd"] in ([], None) and image["Entrypoint"] == [IMAGE_ENTRYPOINT], image
    assert image["Healthcheck"]["Test"] == ["CMD", IMAGE_HEALTHCHECK], image["Healthcheck"]
    c = run()
    rc, out, err = c.exec("sh", "-c", "id -u; id -g; getent passwd kbandit; getent group kbandit")
    assert rc == 0, err
    uid, gid, passwd, group = out.splitlines()
    assert (uid, gid) == (str(KB_UID), str(KB_UID)), out
    assert passwd == f"kbandit:x:{KB_UID}:{KB_UID}::/data:/usr/sbin/nologin", passwd
    assert group == f"kbandit:x:{KB_UID}:", group


def test_container_serves_with_auth_and_keeps_its_study(run, netns):
    c = run()
    assert c.started["listen"] == "0.0.0.0:8080" and c.started["auth"] is True, c.started
    assert c.started["db"] == "/data/kbandit.db", c.started
    assert http(netns, "GET", "/healthz")[0] == 200
    assert http(netns, "GET", "/v1/studies")[0] == 401
    status, study = http(netns, "POST", "/v1/studies", TOKEN, {
        "name": "in-docker", "engine": {"name": "random", "settings": {}},
        "space": {"type": "candidates", "candidates": [[0.0], [0.5], [1.0]]}})
    assert status == 201, study
    sid = study["id"]
    status, asked = http(netns, "POST", f"/v1/studies/{sid}/ask", TOKEN, {"worker": "w", "count": 1})
    assert status == 200, asked
    tid = asked["trials"][0]["id"]
    assert http(netns, "POST", f"/v1/studies/{sid}/trials/{tid}/tell", TOKEN, {"value": 0.25})[0] == 200
    rc, _, err = c.healthcheck()
    assert rc == 0, err
    c.stop()
    rc, _, err = c.healthcheck()
    assert rc == 1 and "no kbanditd process" in err, err

    again = run()  # a new container on the same volume
    status, trial = http(netns, "GET", f"/v1/studies/{sid}/trials/{tid}", TOKEN)
    assert status == 200 and trial["state"] == "completed" and trial["value"] == 0.25, trial
    again.stop()


def test_arguments_add_to_the_defaults(run, netns):
    """`docker run IMAGE --log-level debug` keeps 0.0.0.0:8080, the database and auth."""
    c = run("--log-level", "debug")
    assert c.started["listen"] == "0.0.0.0:8080" and c.started["auth"] is True, c.started
    assert http(netns, "GET", "/v1/studies")[0] == 401
    assert c.healthcheck()[0] == 0
    c.stop()


def test_healthcheck_follows_another_listen(run, netns):
    c = run("--listen=[::]:9090")
    assert c.started["port"] == 9090, c.started
    rc, _, err = c.healthcheck()
    assert rc == 0, err
    with pytest.raises(AssertionError, match="Failed to connect"):  # the check did follow
        http(netns, "GET", "/healthz")
    c.stop()


def test_no_auth_variant_in_the_container(run, netns):
    c = run(secret=False, env={"KB_TOKEN_FILE": "", "KB_INSECURE": "1"})
    assert c.started["auth"] is False, c.started
    assert http(netns, "GET", "/v1/studies")[0] == 200
    c.stop()
    # --insecure alone keeps the token file setting: with no secret mounted, no start.
    c = run("--insecure", secret=False, expect_fail=True)
    assert c.proc.returncode != 0 and "cannot read token file" in c.log.read_text()
