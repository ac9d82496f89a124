"""``${NAME}`` templates in env values: parsing, resolving from the host, secrets."""

from __future__ import annotations

import subprocess
import sys

import pytest

from nodus_cli.workload.environment import (
    MissingVariables,
    Template,
    TemplateError,
    bare_references,
    is_literal,
    looks_secret,
    names,
    parse,
    resolve,
)

# -- parse ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "parts"),
    [
        ("", ()),
        ("plain", ("plain",)),
        ("${A}", (Template("A"),)),
        ("${A:-x}", (Template("A", "x"),)),
        ("${A:-}", (Template("A", ""),)),
        ("a${B}c", ("a", Template("B"), "c")),
        ("${A}${B}", (Template("A"), Template("B"))),
        ("$$", ("$",)),
        ("$${A}", ("${A}",)),
        ("a$$${B}", ("a$", Template("B"))),
        ("a$$$${B}", ("a$${B}",)),
        ("$HOME", ("$HOME",)),
        ("5$", ("5$",)),
        ("$", ("$",)),
        ("${A:-x$$y}", (Template("A", "x$y"),)),
        ("${A:-a:-b}", (Template("A", "a:-b"),)),
        ("${A:-with space}", (Template("A", "with space"),)),
        ("${_X1}", (Template("_X1"),)),
    ],
)
def test_parse(value: str, parts: tuple[object, ...]) -> None:
    assert parse(value) == parts


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ("${A", ['"${A" starts a template that never ends', 'close it with "}"', "$$"]),
        ("x ${", ["starts a template that never ends"]),
        ("${}", ['"${}" does not name a variable']),
        ("${1A}", ['"${1A}" does not name a variable', "not starting with a digit"]),
        ("${A B}", ["is not a template nodus understands: write ${A}"]),
        ("${A-x}", ["is not a template nodus understands: write ${A} or ${A:-default}"]),
        ("${A:=x}", ["write ${A} or ${A:-default}"]),
        ("${A:?msg}", ["write ${A} or ${A:-default}"]),
        ("${A:-${B}}", ["a default cannot hold another template"]),
        ("${" + "x" * 100, ["..."]),
    ],
)
def test_parse_errors_say_what_to_write(value: str, words: list[str]) -> None:
    with pytest.raises(TemplateError) as info:
        parse(value)
    for word in words:
        assert word in str(info.value), str(info.value)
    assert isinstance(info.value, ValueError)


def test_names_and_literals() -> None:
    assert names("${A}/${B:-x}/${A}") == ["A", "B"]
    assert names("$$ $HOME plain") == []
    assert is_literal("plain $HOME $$") and is_literal("")
    assert not is_literal("${A}")
    assert is_literal("$${A}")  # an escaped template is text


def test_bare_references() -> None:
    assert bare_references("$HOME/x") == ["HOME"]
    assert bare_references("x$A$B") == ["A", "B"]
    assert bare_references("$$HOME") == []
    assert bare_references("$$$HOME") == ["HOME"]
    assert bare_references("${HOME} $1 5$") == []


# -- resolve --------------------------------------------------------------------------------


def test_resolve_takes_values_from_the_host() -> None:
    env = {"TOKEN": "${HF_TOKEN}", "PLAIN": "x", "NUM": "4"}
    assert resolve(env, {"HF_TOKEN": "s3cret"}) == {"TOKEN": "s3cret", "PLAIN": "x", "NUM": "4"}


def test_resolve_defaults() -> None:
    env = {"A": "${A:-one}", "B": "${B:-two}", "C": "${C:-}", "D": "${D:-x}"}
    host = {"A": "set", "D": ""}
    # An unset or empty variable takes the default, as in the shell.
    assert resolve(env, host) == {"A": "set", "B": "two", "C": "", "D": "x"}


def test_resolve_an_empty_variable_without_default_is_set() -> None:
    assert resolve({"A": "<${A}>"}, {"A": ""}) == {"A": "<>"}


def test_resolve_dollars() -> None:
    env = {"PRICE": "$$5", "RAW": "$HOME", "MIX": "$$${A}$$", "ESC": "$${A}"}
    assert resolve(env, {"A": "v", "HOME": "/root"}) == {
        "PRICE": "$5",
        "RAW": "$HOME",  # never expanded
        "MIX": "$v$",
        "ESC": "${A}",
    }


def test_resolve_in_nested_text() -> None:
    env = {"URL": "https://${USER}:${PASS}@${HOST:-localhost}:${PORT:-5432}/db"}
    host = {"USER": "u", "PASS": "p", "PORT": "6543"}
    assert resolve(env, host) == {"URL": "https://u:p@localhost:6543/db"}


def test_resolve_values_are_not_resolved_twice() -> None:
    assert resolve({"A": "${X}"}, {"X": "${Y}", "Y": "no"}) == {"A": "${Y}"}


def test_resolve_reports_every_missing_variable() -> None:
    env = {
        "HF_TOKEN": "${HF_TOKEN}",
        "URL": "${USER}@${HOST}",
        "OK": "${HOME:-/}",
        "T2": "${HF_TOKEN}",
    }
    with pytest.raises(MissingVariables) as info:
        resolve(env, {"HOST": "h"})
    assert info.value.missing == [("HF_TOKEN", "HF_TOKEN"), ("URL", "USER"), ("T2", "HF_TOKEN")]
    message = str(info.value)
    assert (
        "env.HF_TOKEN takes ${HF_TOKEN} from the environment, which is not set: export HF_TOKEN "
        "before running, or write ${HF_TOKEN:-default}"
    ) in message
    assert "env.URL takes ${USER} from the environment" in message
    assert "env.T2 takes ${HF_TOKEN}" in message
    assert isinstance(info.value, ValueError)


def test_resolve_names_a_variable_once_per_value() -> None:
    with pytest.raises(MissingVariables) as info:
        resolve({"A": "${X}-${X}"}, {})
    assert info.value.missing == [("A", "X")]


def test_resolve_refuses_an_invalid_template() -> None:
    with pytest.raises(TemplateError):
        resolve({"A": "${"}, {})


def test_resolve_leaves_the_input_alone() -> None:
    env = {"A": "${A}"}
    assert resolve(env, {"A": "x"}) == {"A": "x"}
    assert env == {"A": "${A}"}


# -- secrets --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "secret"),
    [
        ("HF_TOKEN", True),
        ("token", True),
        ("API_KEY", True),
        ("ssh_key_path", True),
        ("AWS_SECRET_ACCESS_KEY", True),
        ("DB_PASSWORD", True),
        ("Password", True),
        ("HF_HOME", False),
        ("WORKERS", False),
        ("PASS", False),
    ],
)
def test_looks_secret(key: str, secret: bool) -> None:
    assert looks_secret(key) is secret


def test_the_module_is_cheap_to_import() -> None:
    code = (
        "import sys; import nodus_cli.workload.environment; "
        "print(sorted(m for m in ('pydantic', 'docker', 'httpx', 'rich') if m in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert done.stdout.strip() == "[]"
