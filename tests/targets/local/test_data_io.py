# ruff: noqa: F811 - the fixtures imported from docker_support are test parameters here
"""Data in and out, and the host's environment, on the real engine: mounts (a read-only
bind, a named volume kept across runs), outputs copied on success and failure or the work
folder kept, published ports answering from the host, ENTRYPOINT handling, and ``${NAME}``
taken from the host when the run starts and stored nowhere."""

from __future__ import annotations

import http.client
import json
import socket
import sqlite3
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from docker_support import (  # noqa: F401 - fixtures
    IMAGE,
    Nodus,
    docker_client,
    engine_clean,
    nodus_env,
    read_until,
)

pytestmark = pytest.mark.docker

ENTRY_IMAGE = "nodus-test/entrypoint:1"


def lines(stdout: str, stage: str = "main") -> list[str]:
    return [ln.split(" | ", 1)[1] for ln in stdout.splitlines() if ln.startswith(f"{stage} | ")]


# -- mounts -------------------------------------------------------------------------------


def test_a_relative_bind_mount_read_only(nodus_env: Nodus) -> None:
    data = nodus_env.root / "data"
    data.mkdir()
    (data / "input.txt").write_text("from the host\n")
    path = nodus_env.write(
        f'image = "{IMAGE}"\n'
        'command = "cat /data/input.txt; '
        'touch /data/x 2>/dev/null && echo writable || echo read-only"\n'
        'mounts = ["./data:/data:ro"]\n'
    )
    done = nodus_env.run("run", path)
    assert done.returncode == 0, done.stderr
    assert lines(done.stdout) == ["from the host", "read-only"]
    assert not (data / "x").exists()


def test_a_missing_host_path_is_refused_naming_the_line(nodus_env: Nodus) -> None:
    path = nodus_env.write(f'image = "{IMAGE}"\ncommand = "true"\n\nmounts = ["./nowhere:/data"]\n')
    done = nodus_env.run("run", path)
    assert done.returncode == 1
    assert f"{path}:4: mounts[0]: ./nowhere:/data" in done.stderr
    assert "does not exist" in done.stderr and "Traceback" not in done.stderr
    assert nodus_env.runs() == []  # refused before anything was recorded


@pytest.fixture
def volume(docker_client: Any) -> Iterator[str]:
    name = f"nodus-test-cache-{time.time_ns()}"
    yield name
    docker_client.volumes.get(name).remove(force=True)


def test_a_named_volume_is_created_and_kept_across_runs(
    nodus_env: Nodus, docker_client: Any, volume: str
) -> None:
    write = nodus_env.write(
        f'image = "{IMAGE}"\ncommand = "echo cached > /cache/v"\nmounts = ["{volume}:/cache"]\n',
        "write.toml",
    )
    read = nodus_env.write(
        f'image = "{IMAGE}"\ncommand = "cat /cache/v"\nmounts = ["{volume}:/cache"]\n',
        "read.toml",
    )
    assert nodus_env.run("run", write).returncode == 0
    assert docker_client.volumes.get(volume) is not None  # kept after the run
    done = nodus_env.run("run", read)
    assert done.returncode == 0 and lines(done.stdout) == ["cached"]


# -- outputs ---------------------------------------------------------------------------------

WRITES = "echo result-of-$NODUS_STAGE > $NODUS_WORK_DIR/result.txt; exit {code}"


@pytest.mark.parametrize("code", [0, 3])
def test_output_dir_gets_the_work_folder_success_or_not(nodus_env: Nodus, code: int) -> None:
    path = nodus_env.write(
        f'image = "{IMAGE}"\ncommand = {json.dumps(WRITES.format(code=code))}\noutput_dir = "out"\n'
    )
    done = nodus_env.run("run", path)
    assert done.returncode == code, done.stderr
    run = nodus_env.runs()[0]
    copied = nodus_env.root / "out" / run["id"] / "result.txt"
    assert copied.read_text() == "result-of-main\n"
    assert run["output"] == {"kind": "copied", "path": str(copied.parent), "note": None}
    assert f"outputs copied to {copied.parent}" in done.stderr
    assert not (nodus_env.home / "work" / run["id"]).exists()


def test_output_flag_overrides_and_without_it_a_failure_keeps_the_folder(
    nodus_env: Nodus, tmp_path: Path
) -> None:
    ok = nodus_env.write(f'image = "{IMAGE}"\ncommand = {json.dumps(WRITES.format(code=0))}\n')
    elsewhere = tmp_path / "elsewhere"
    assert nodus_env.run("run", "--output", str(elsewhere), ok).returncode == 0
    (run,) = nodus_env.runs()
    assert (elsewhere / run["id"] / "result.txt").exists()
    assert nodus_env.run("run", ok).returncode == 0  # success, no output_dir: removed
    assert nodus_env.runs()[0]["output"] == {"kind": "removed", "path": None, "note": None}
    failing = nodus_env.write(
        f'image = "{IMAGE}"\ncommand = {json.dumps(WRITES.format(code=2))}\n', "fail.toml"
    )
    done = nodus_env.run("run", failing)
    assert done.returncode == 2
    run = nodus_env.runs()[0]
    kept = nodus_env.home / "work" / run["id"]
    assert run["output"]["kind"] == "kept" and run["output"]["path"] == str(kept)
    assert f"work directory kept: {kept}" in done.stderr
    assert (kept / "result.txt").read_text() == "result-of-main\n"
    shown = nodus_env.run("runs", run["id"]).stdout
    assert f"work directory: kept {kept}\n" in shown


def test_a_failure_that_wrote_nothing_leaves_no_work_folder(nodus_env: Nodus) -> None:
    failing = nodus_env.write(f'image = "{IMAGE}"\ncommand = "exit 2"\n')
    done = nodus_env.run("run", failing)
    assert done.returncode == 2
    run = nodus_env.runs()[0]
    assert run["output"] == {"kind": "removed", "path": None, "note": "it was empty"}
    assert not (nodus_env.home / "work" / run["id"]).exists()
    assert "work directory kept" not in done.stderr
    shown = nodus_env.run("runs", run["id"]).stdout
    assert "work directory: removed (it was empty)\n" in shown


# -- ports ---------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_published_port_answers_from_the_host(nodus_env: Nodus) -> None:
    port = _free_port()
    serve = (
        "echo serving; while true; do "
        "printf 'HTTP/1.0 200 OK\\r\\n\\r\\nhello from nodus' | nc -l -p 80; done"
    )
    path = nodus_env.write(
        f'image = "{IMAGE}"\ncommand = {json.dumps(serve)}\nports = ["{port}:80"]\n'
    )
    proc = nodus_env.popen("run", path)
    try:
        read_until(proc, "main | serving")
        deadline = time.monotonic() + 60
        body: bytes | str = "no answer"
        while body != b"hello from nodus":
            # The engine's proxy accepts before nc listens again: a cut or garbled answer
            # is a retry, not a failure.
            assert time.monotonic() < deadline, f"the port never answered right: {body!r}"
            try:
                body = urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=2).read()
            except (OSError, http.client.HTTPException) as exc:
                body = repr(exc)
                time.sleep(0.2)
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
    assert f"port 80/tcp answers at http://127.0.0.1:{port}" in err


# -- ENTRYPOINT ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def entry_image(docker_client: Any) -> Iterator[str]:
    """The test image with ENTRYPOINT ["echo", "EP:"] (built by docker import --change)."""
    source = docker_client.images.get(IMAGE)
    exported = b"".join(docker_client.api.export(docker_client.containers.create(IMAGE).id))
    del source
    subprocess.run(
        ["docker", "import", "--change", 'ENTRYPOINT ["echo", "EP:"]', "-", ENTRY_IMAGE],
        input=exported,
        check=True,
        capture_output=True,
    )
    for c in docker_client.containers.list(
        all=True, filters={"ancestor": IMAGE, "status": "created"}
    ):
        c.remove(force=True)
    yield ENTRY_IMAGE
    docker_client.images.remove(ENTRY_IMAGE, force=True)


def test_a_command_string_runs_by_sh_whatever_the_entrypoint(
    nodus_env: Nodus, entry_image: str
) -> None:
    path = nodus_env.write(f'image = "{entry_image}"\ncommand = "echo via-sh $((1+1))"\n')
    done = nodus_env.run("run", path)
    assert done.returncode == 0, done.stderr
    assert lines(done.stdout) == ["via-sh 2"]


def test_a_command_list_goes_to_the_entrypoint(nodus_env: Nodus, entry_image: str) -> None:
    path = nodus_env.write(f'image = "{entry_image}"\ncommand = ["hello", "there"]\n')
    done = nodus_env.run("run", path)
    assert lines(done.stdout) == ["EP: hello there"]


def test_entrypoint_replaces_or_clears_the_images(nodus_env: Nodus, entry_image: str) -> None:
    replaced = nodus_env.write(
        f'image = "{entry_image}"\nentrypoint = ["printf", "%s|"]\ncommand = ["a", "b"]\n'
    )
    done = nodus_env.run("run", replaced)
    assert lines(done.stdout) == ["a|b|"]
    cleared = nodus_env.write(
        f'image = "{entry_image}"\nentrypoint = []\ncommand = ["echo", "no entrypoint"]\n',
        "cleared.toml",
    )
    done = nodus_env.run("run", cleared)
    assert done.returncode == 0, done.stderr
    assert lines(done.stdout) == ["no entrypoint"]


# -- the host's environment ------------------------------------------------------------------


def test_env_templates_take_the_hosts_values_and_store_none(nodus_env: Nodus) -> None:
    secret = "hf_s3cr3t_value_9f8e7d"
    path = nodus_env.write(
        f'image = "{IMAGE}"\n'
        'command = "echo token=$HF_TOKEN region=$REGION price=$PRICE extra=$EXTRA"\n'
        'env = { HF_TOKEN = "${HF_TOKEN}", REGION = "${REGION:-eu}", PRICE = "$$5" }\n'
    )
    done = nodus_env.run("run", "--env", "EXTRA", path, HF_TOKEN=secret, EXTRA="from-flag")
    assert done.returncode == 0, done.stderr
    assert lines(done.stdout) == [f"token={secret} region=eu price=$5 extra=from-flag"]
    # Nothing under NODUS_HOME holds the values taken from the host.
    for file in nodus_env.home.rglob("*"):
        if file.is_file():
            data = file.read_bytes()
            assert secret.encode() not in data, file
            assert b"from-flag" not in data, file
    run = nodus_env.runs()[0]
    # The log keeps the workload's output with the host's values masked as their template.
    log = nodus_env.run("logs", run["id"]).stdout
    assert "main | token=${HF_TOKEN} region=eu price=$5 extra=${EXTRA}" in log
    with sqlite3.connect(nodus_env.home / "runs.sqlite3") as db:
        (stored,) = db.execute("SELECT workload_json FROM runs").fetchone()
    assert json.loads(stored)["stages"][0]["env"]["HF_TOKEN"] == "${HF_TOKEN}"
    # rerun resolves the template again, from the environment it runs in
    again = nodus_env.run("rerun", run["id"], HF_TOKEN="another", EXTRA="x")
    assert again.returncode == 0, again.stderr
    assert lines(again.stdout) == ["token=another region=eu price=$5 extra=x"]


def test_a_missing_variable_is_refused_before_anything_starts(nodus_env: Nodus) -> None:
    path = nodus_env.write(
        f'image = "{IMAGE}"\ncommand = "true"\nenv = {{ A = "${{NOPE_A}}", B = "${{NOPE_B}}" }}\n'
    )
    done = nodus_env.run("run", path, NOPE_A=None, NOPE_B=None)
    assert done.returncode == 1
    assert "env.A takes ${NOPE_A}" in done.stderr and "env.B takes ${NOPE_B}" in done.stderr
    assert nodus_env.runs() == []
