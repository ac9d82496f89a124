"""Shell completion for bash, zsh and fish: ``nodus --show-completion`` prints the script
for the shell it runs in, ``--install-completion`` installs it, and what a script asks
nodus for completes commands and option values.

The shell is found from the process that runs nodus (as Typer does, with shellingham).
This machine has bash; zsh and fish are stood in for by a copy of bash under their name,
which is all the detection looks at, and their scripts' requests are made as the scripts
make them (the variables they set)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from nodus_cli.targets import REGISTRY

BASH = shutil.which("bash")
pytestmark = pytest.mark.skipif(BASH is None, reason="no bash here")


@pytest.fixture
def bin_dir(tmp_path: Path) -> Path:
    """A folder with ``nodus`` (this checkout's) and shells named bash, zsh and fish."""
    folder = tmp_path / "bin"
    folder.mkdir()
    nodus = folder / "nodus"
    nodus.write_text(f'#!/bin/sh\nexec {sys.executable} -m nodus_cli "$@"\n')
    nodus.chmod(0o755)
    assert BASH is not None
    for shell in ("bash", "zsh", "fish"):
        shutil.copy(BASH, folder / shell)
    return folder


def in_shell(
    bin_dir: Path, shell: str, script: str, **env: str
) -> subprocess.CompletedProcess[str]:
    home = bin_dir.parent / "home"
    home.mkdir(exist_ok=True)
    full = {
        "PATH": f"{bin_dir}{os.pathsep}/usr/bin:/bin",
        "HOME": str(home),
        "NO_COLOR": "1",
        **env,
    }
    return subprocess.run(
        # A command after it: a shell execs a lone last command, and nodus would not run
        # under the shell at all.
        [str(bin_dir / shell), "-c", f"{script}\nexit $?"],
        capture_output=True,
        text=True,
        env=full,
        timeout=60,
        check=False,
    )


def test_bash_completes_commands_and_option_values_from_the_script(bin_dir: Path) -> None:
    script = in_shell(bin_dir, "bash", "nodus --show-completion")
    assert script.returncode == 0, script.stderr
    assert "complete -o default -F _nodus_completion nodus" in script.stdout
    complete = (
        'eval "$(nodus --show-completion)"; COMP_WORDS=({words}); COMP_CWORD={at}; '
        '_nodus_completion nodus; printf "%s\\n" "${{COMPREPLY[@]}}"'
    )
    done = in_shell(bin_dir, "bash", complete.format(words="nodus va", at=1))
    assert done.stdout.split() == ["validate"], done.stderr
    done = in_shell(bin_dir, "bash", complete.format(words="nodus run --target ''", at=3))
    assert done.stdout.split() == ["catalog", *REGISTRY], done.stderr


@pytest.mark.parametrize(
    ("shell", "line", "asked"),
    [
        ("zsh", "compdef _nodus_completion nodus", {"_NODUS_COMPLETE": "complete_zsh"}),
        (
            "fish",
            "complete --command nodus --no-files",
            {"_NODUS_COMPLETE": "complete_fish", "_TYPER_COMPLETE_FISH_ACTION": "get-args"},
        ),
    ],
)
def test_zsh_and_fish_get_their_own_script_and_completions(
    bin_dir: Path, shell: str, line: str, asked: dict[str, str]
) -> None:
    script = in_shell(bin_dir, shell, "nodus --show-completion")
    assert script.returncode == 0, script.stderr
    assert line in script.stdout and "_nodus_completion() {\n    local IFS" not in script.stdout
    for name, value in asked.items():
        assert f"{name}={value}" in script.stdout  # what the script sets to ask nodus
    done = in_shell(bin_dir, shell, "nodus", _TYPER_COMPLETE_ARGS="nodus sto", **asked)
    assert done.returncode == 0, done.stderr
    assert "stop" in done.stdout and "validate" not in done.stdout


def test_install_completion_writes_the_script_where_the_shell_reads_it(bin_dir: Path) -> None:
    done = in_shell(bin_dir, "bash", "nodus --install-completion")
    assert done.returncode == 0, done.stderr
    assert "bash completion installed in" in done.stdout
    home = bin_dir.parent / "home"
    installed = (home / ".bash_completions" / "nodus.sh").read_text()
    assert "_NODUS_COMPLETE=complete_bash" in installed
    assert "source" in (home / ".bashrc").read_text()


def test_help_offers_completion() -> None:
    shown = subprocess.run(
        [sys.executable, "-m", "nodus_cli", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, "NO_COLOR": "1"},
    )
    assert "--install-completion" in shown.stdout and "--show-completion" in shown.stdout
