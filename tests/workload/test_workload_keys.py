"""The keys of what a stage runs and reaches, rule by rule, with the words a user reads:
mounts, ports, entrypoint, output_dir, [map], share_gpu, env templates, the Docker minimums,
the keys of other tools, and the problem cap."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest

from nodus_cli.errors import Problem
from nodus_cli.workload import (
    MAX_MAP_ITEMS,
    MapSpec,
    Mount,
    Port,
    Result,
    Workload,
    from_json,
    load_file,
    load_text,
    normalize,
    to_toml,
)
from nodus_cli.workload.report import MAX_PROBLEMS
from nodus_cli.workload.rules.fanout import MAX_OVER_BYTES
from nodus_cli.workload.rules.mounts import WORK_DIR

IMAGE = 'image = "img:1"\n'


def check(text: str, base: Path | None = None) -> Result:
    return load_text(textwrap.dedent(text), "w.toml", base_dir=base)


def problem(result: Result, loc: str, severity: str = "error") -> Problem:
    found = [p for p in result.problems if p.loc == loc and p.severity == severity]
    assert len(found) == 1, f"expected one {severity} at {loc!r}, got {result.problems}"
    return found[0]


def error(
    text: str, loc: str, *words: str, line: int | None = None, base: Path | None = None
) -> Problem:
    result = check(text, base)
    assert not result.valid
    found = problem(result, loc)
    for word in words:
        assert word in found.message, f"{word!r} not in {found.message!r}"
    if line is not None:
        assert found.line == line, (found, line)
    return found


def warning(text: str, loc: str, *words: str, line: int | None = None) -> Problem:
    result = check(text)
    assert result.valid, result.problems
    found = problem(result, loc, "warning")
    for word in words:
        assert word in found.message, f"{word!r} not in {found.message!r}"
    if line is not None:
        assert found.line == line, (found, line)
    return found


def workload(text: str, base: Path | None = None) -> Workload:
    result = check(text, base)
    assert result.valid, result.problems
    assert result.workload is not None
    return result.workload


def again(w: Workload) -> Workload:
    """to_toml, then normalized again: must be the same workload."""
    rendered = to_toml(w)
    result = load_text(rendered, "again.toml", base_dir=Path("/elsewhere"))
    assert result.valid, (rendered, result.problems)
    assert result.workload == w, rendered
    assert to_toml(result.workload) == rendered
    return result.workload


# -- mounts -----------------------------------------------------------------------------------


def test_mounts_host_paths_resolve_against_the_workload_folder(tmp_path: Path) -> None:
    home = str(Path.home())
    w = workload(
        f"""\
        {IMAGE}
        mounts = ["./data:/data:ro", "../x:/x:rw", "data/sub:/sub", "/abs/p:/p", "~/c:/c",
                  "hf-cache:/root/.cache/huggingface", ".:/here"]
        """,
        base=tmp_path,
    )
    mounts = w.stages[0].mounts
    assert [(m.source, m.target, m.read_only, m.type) for m in mounts] == [
        (str(tmp_path / "data"), "/data", True, "bind"),
        (str(tmp_path.parent / "x"), "/x", False, "bind"),
        (str(tmp_path / "data" / "sub"), "/sub", False, "bind"),
        ("/abs/p", "/p", False, "bind"),
        (os.path.join(home, "c"), "/c", False, "bind"),
        ("hf-cache", "/root/.cache/huggingface", False, "volume"),
        (str(tmp_path), "/here", False, "bind"),
    ]
    assert mounts[0].written == "./data:/data:ro"
    assert mounts[0].where == "w.toml:3: mounts[0]"  # line 2 is blank
    assert mounts[5].where == "w.toml:4: mounts[5]"  # each entry has its own line


def test_mounts_are_not_checked_for_existence_at_validation(tmp_path: Path) -> None:
    # CI validates workloads without their data: the run checks.
    w = workload(f'{IMAGE}mounts = ["./missing:/data"]\n', base=tmp_path)
    assert w.stages[0].mounts[0].source == str(tmp_path / "missing")
    assert not (tmp_path / "missing").exists()


def test_a_workload_file_resolves_mounts_against_its_own_folder(tmp_path: Path) -> None:
    folder = tmp_path / "workloads"
    folder.mkdir()
    path = folder / "train.toml"
    path.write_text(f'{IMAGE}mounts = ["./data:/data"]\n[map]\nover = "in.txt"\n')
    (folder / "in.txt").write_text("a\n")
    result = load_file(path)
    assert result.workload is not None, result.problems
    stage = result.workload.stages[0]
    assert stage.mounts[0].source == str(folder.resolve() / "data")
    assert stage.mounts[0].where == f"{path}:2: mounts[0]"
    assert stage.map is not None and stage.map.items == ("a",)


def test_a_stage_adds_its_mounts_to_the_workloads() -> None:
    w = workload(
        f"""\
        {IMAGE}
        mounts = ["cache:/cache"]
        [[stages]]
        name = "a"
        [[stages]]
        name = "b"
        mounts = ["/data:/data:ro"]
        """
    )
    assert [m.target for m in w.stages[0].mounts] == ["/cache"]
    assert [m.target for m in w.stages[1].mounts] == ["/cache", "/data"]
    assert w.stages[1].mounts[1].where == "w.toml:8: stages[1].mounts[0]"


@pytest.mark.parametrize(
    ("entry", "words"),
    [
        ('"data:/data:z"', ['the mode "z" is not supported', "SELinux", ":ro (read-only)"]),
        ('"data:/data:Z"', ['the mode "Z" is not supported']),
        ('"data:/data:cached"', ['the mode "cached" is not supported', "macOS"]),
        ('"data:/data:ro,z"', ['the mode "ro,z" is not supported', "write :ro"]),
        ('"data:/data:RO"', ["write :ro (lowercase)"]),
        ('"data:/data:"', ['ends with ":": write :ro for a read-only mount, or nothing']),
        ('"/data"', ["anonymous volume is not supported", '"cache:/data"']),
        ('"data"', ['"data" names no container path', '"data:/data"']),
        ('"a:b:c:d"', ["has 3 colons", "SOURCE:TARGET[:ro]"]),
        ('":/data"', ['names no source before ":"', '"./data:/data"', '"cache:/data"']),
        ('"data:"', ['names no container path after ":"', '"data:/data"']),
        ('"data:data"', ['the container path "data" is not absolute: write "/data"']),
        ('"data:/"', ["cannot mount over the container's root folder /"]),
        ('"data:/x/.."', ["cannot mount over the container's root folder /"]),
        ('"data:/nodus/work"', ["is nodus's own work directory", "$NODUS_WORK_DIR"]),
        ('"data:/nodus/work/in"', ["is inside nodus's own work directory"]),
        ('"my vol:/v"', ['"my vol" is not a volume name', 'write "./my vol:/v"']),
        ('"-x:/v"', ['"-x" is not a volume name']),
        ('"~nosuchuser123/x:/v"', ["unknown user's ~: write the full path"]),
        ('""', ['is empty: write "SOURCE:TARGET[:ro]"']),
        ('"  "', ["is empty"]),
        ("3", ['must be one string "SOURCE:TARGET[:ro]"']),
        ("true", ['must be one string "SOURCE:TARGET[:ro]"']),
        (
            '{ source = "./d", target = "/d", read_only = true }',
            ['write it as one string SOURCE:TARGET[:ro]: "./d:/d:ro"'],
        ),
        ('{ type = "bind" }', ['write it as one string "SOURCE:TARGET[:ro]"']),
        ('"a\\u0000b:/x"', ["NUL"]),
    ],
)
def test_bad_mounts_say_what_to_write(entry: str, words: list[str]) -> None:
    error(f"{IMAGE}mounts = [{entry}]\n", "mounts[0]", *words, line=2)


def test_mounts_must_be_a_list() -> None:
    error(f'{IMAGE}mounts = "./d:/d"\n', "mounts", 'must be a list: write mounts = ["./d:/d"]')
    error(
        f'{IMAGE}[mounts]\nsource = "./d"\ntarget = "/d"\n',
        "mounts",
        'write it as one string SOURCE:TARGET[:ro]: "./d:/d"',
        line=2,
    )
    error(f"{IMAGE}mounts = 3\n", "mounts", 'must be a list of "SOURCE:TARGET[:ro]" strings')


def test_the_work_directory_is_the_one_containers_get() -> None:
    from nodus_cli.targets.docker.containers import WORK_DIR_IN_CONTAINER

    assert WORK_DIR == WORK_DIR_IN_CONTAINER


def test_duplicate_targets_name_the_other_entry_and_its_line() -> None:
    found = error(
        f'{IMAGE}mounts = [\n  "a:/data",\n  "/b:/data/",\n]\n',
        "mounts[1]",
        "/data is already the target of mounts[0] (line 3): a container path takes one mount",
        line=4,
    )
    assert found.severity == "error"
    error(
        f'{IMAGE}mounts = ["a:/data"]\n[[stages]]\nname = "s"\nmounts = ["b:/data"]\n',
        "stages[0].mounts[0]",
        "/data is already the target of mounts[0] (line 2)",
        line=5,
    )


def test_two_stages_may_mount_the_same_target() -> None:
    w = workload(
        f'{IMAGE}[[stages]]\nname = "a"\nmounts = ["x:/d"]\n[[stages]]\nname = "b"\n'
        'mounts = ["y:/d"]\n'
    )
    assert [s.mounts[0].source for s in w.stages] == ["x", "y"]


def test_a_mount_in_requirements_belongs_at_the_top_level() -> None:
    error(
        f'{IMAGE}[requirements]\nmounts = ["a:/b"]\n',
        "requirements.mounts",
        "`mounts` belongs at the top level of the file, not in [requirements]",
        line=3,
    )
    error(
        f'{IMAGE}[[stages]]\nname = "s"\n[stages.requirements]\nmounts = ["a:/b"]\n',
        "stages[0].requirements.mounts",
        "belongs in the [[stages]] table itself, not in [stages.requirements]",
    )


# -- ports ------------------------------------------------------------------------------------


def test_ports_in_every_form() -> None:
    w = workload(
        f'{IMAGE}ports = [8000, "8080:80", "9000", "127.0.0.1:9090:90/udp", "[::1]:7000:70/tcp",'
        ' "53:53/udp"]\n'
    )
    assert w.stages[0].ports == (
        Port(8000, 8000),
        Port(80, 8080),
        Port(9000, 9000),
        Port(90, 9090, "udp", "127.0.0.1"),
        Port(70, 7000, "tcp", "::1"),
        Port(53, 53, "udp"),
    )


@pytest.mark.parametrize(
    ("entry", "words"),
    [
        ("0", ["0 is not a port: ports are numbered from 1 to 65535"]),
        ("65536", ["65536 is not a port"]),
        ("-1", ["-1 is not a port"]),
        ('"0:80"', ["0 is not a port"]),
        ('"8080:70000"', ["70000 is not a port"]),
        ("true", ["not true"]),
        ("8000.0", ["must be an integer: write 8000"]),
        ("80.5", ["must be a whole port number from 1 to 65535, not 80.5"]),
        ("inf", ["must be a whole port number from 1 to 65535, not inf"]),
        ('"8000-8010:8000-8010"', ["is a range: port ranges cannot be published", "[8000, 8001]"]),
        ('"8000-8010"', ["is a range"]),
        ('"127.0.0.1::80"', ["names no host port", '"127.0.0.1:80:80"', "never a random one"]),
        ('":80"', ["names no host port", '"80:80"']),
        ('"x:80"', ['"x" is not a port number', '"8080:80"']),
        ('"80/sctp"', ['"/sctp" is not a protocol nodus publishes: write /tcp', "or /udp"]),
        ('"80/TCP"', ["write /tcp (lowercase)"]),
        ('"1.2.3:80:80"', ['"1.2.3" is not an IP address', '"127.0.0.1:8080:80"']),
        ('"::1:80:80"', ["an IPv6 address goes in brackets"]),
        ('"[::1:80:80"', ['write "[IPv6]:HOST:CONTAINER"']),
        ('"[nope]:80:80"', ['"nope" is not an IP address']),
        ("[80]", ['must be a port number, e.g. 8000, or a string "HOST:CONTAINER"']),
    ],
)
def test_bad_ports_say_what_to_write(entry: str, words: list[str]) -> None:
    error(f"{IMAGE}ports = [{entry}]\n", "ports[0]", *words, line=2)


def test_ports_must_be_a_list() -> None:
    error(f"{IMAGE}ports = 8000\n", "ports", "must be a list: write ports = [8000]")
    error(f'{IMAGE}ports = "8080:80"\n', "ports", 'must be a list: write ports = ["8080:80"]')
    error(
        f"{IMAGE}ports = {{ a = 1 }}\n", "ports", 'must be a list, e.g. ports = [8000, "8080:80"]'
    )


def test_a_host_port_is_published_once_per_protocol() -> None:
    error(
        f'{IMAGE}ports = [8000, "8000:80"]\n',
        "ports[1]",
        "host port 8000/tcp is already published by ports[0] (line 2): a host port takes one",
    )
    error(
        f'{IMAGE}ports = [8000]\n[[stages]]\nname = "s"\nports = ["127.0.0.1:8000:81"]\n',
        "stages[0].ports[0]",
        "host port 8000/tcp is already published by ports[0] (line 2)",
        line=5,
    )
    w = workload(f'{IMAGE}ports = [53, "53:53/udp"]\n')
    assert [p.protocol for p in w.stages[0].ports] == ["tcp", "udp"]


def test_a_stage_adds_its_ports_to_the_workloads() -> None:
    w = workload(f'{IMAGE}ports = [80]\n[[stages]]\nname = "s"\nports = [81]\n')
    assert [p.host for p in w.stages[0].ports] == [80, 81]


def test_ports_with_map_are_refused() -> None:
    error(
        f'{IMAGE}ports = [80]\n[map]\nitems = ["a"]\n',
        "ports",
        "a stage with [map] cannot publish ports",
        "every one would need the same host port",
        line=2,
    )
    error(
        f'{IMAGE}[[stages]]\nname = "s"\nports = [80]\n[stages.map]\nitems = ["a"]\n',
        "stages[0].ports",
        "a stage with [map] cannot publish ports",
        line=4,
    )
    error(
        f'{IMAGE}ports = [80]\n[[stages]]\nname = "s"\n[stages.map]\nitems = ["a"]\n',
        "stages[0].map",
        "this stage takes the workload's ports (line 2), but a stage with [map] cannot "
        "publish ports",
        "move ports into the stages that serve them",
        line=5,
    )
    # A stage without [map] may publish them, next to one that fans out.
    w = workload(
        f'{IMAGE}[[stages]]\nname = "serve"\nports = [80]\n[[stages]]\nname = "fan"\n'
        '[stages.map]\nitems = ["a"]\n'
    )
    assert w.stages[0].ports and not w.stages[1].ports


# -- entrypoint and command -------------------------------------------------------------------


def test_entrypoint_lists() -> None:
    w = workload(f'{IMAGE}entrypoint = ["python", "-u"]\ncommand = ["train.py"]\n')
    stage = w.stages[0]
    assert (stage.entrypoint, stage.command, stage.shell) == (["python", "-u"], ["train.py"], False)
    cleared = workload(f"{IMAGE}entrypoint = []\n").stages[0]
    assert cleared.entrypoint == [] and cleared.command is None
    assert workload(IMAGE).stages[0].entrypoint is None


def test_entrypoint_must_be_a_list() -> None:
    error(
        f'{IMAGE}entrypoint = "python -u"\n',
        "entrypoint",
        'must be a list of strings, not one string: write entrypoint = ["python", "-u"]',
        "[] clears it",
        line=2,
    )
    error(f"{IMAGE}entrypoint = 3\n", "entrypoint", 'e.g. entrypoint = ["python"], or [] to clear')
    error(f'{IMAGE}entrypoint = ["python", 3]\n', "entrypoint[1]", 'must be a string: write "3"')


def test_a_command_string_runs_via_the_shell() -> None:
    stage = workload(f'{IMAGE}command = "python train.py && echo done"\n').stages[0]
    assert stage.command == ["/bin/sh", "-c", "python train.py && echo done"]
    assert stage.shell is True
    assert workload(f'{IMAGE}command = ["python"]\n').stages[0].shell is False


def test_a_command_string_with_an_entrypoint_is_refused() -> None:
    found = error(
        f'{IMAGE}entrypoint = ["python"]\ncommand = "train.py --epochs 3"\n',
        "command",
        "a command string runs via /bin/sh -c, which replaces the entrypoint: write command as "
        "a list to pass it to the entrypoint",
        'e.g. command = ["train.py", "--epochs", "3"]',
        "(entrypoint: line 2)",
        line=3,
    )
    assert found.severity == "error"
    error(
        f'{IMAGE}entrypoint = []\ncommand = "echo hi"\n',
        "command",
        "a command string already runs via /bin/sh -c, without the image's ENTRYPOINT",
        'write command as a list, e.g. command = ["echo", "hi"], or remove entrypoint = []',
    )


def test_stages_inherit_command_shell_and_entrypoint() -> None:
    w = workload(
        f"""\
        {IMAGE}
        command = "echo top"
        [[stages]]
        name = "a"
        [[stages]]
        name = "b"
        entrypoint = ["python"]
        command = ["b.py"]
        [[stages]]
        name = "c"
        command = ["c"]
        """
    )
    a, b, c = w.stages
    assert (a.command, a.shell, a.entrypoint) == (["/bin/sh", "-c", "echo top"], True, None)
    assert (b.command, b.shell, b.entrypoint) == (["b.py"], False, ["python"])
    assert (c.command, c.shell) == (["c"], False)
    inherits = workload(
        f'{IMAGE}entrypoint = ["python"]\ncommand = ["x.py"]\n[[stages]]\nname = "a"\n'
    )
    assert inherits.stages[0].entrypoint == ["python"]
    assert inherits.stages[0].command == ["x.py"]


def test_a_stage_entrypoint_with_the_inherited_command_string() -> None:
    error(
        f'{IMAGE}command = "echo hi"\n[[stages]]\nname = "a"\nentrypoint = ["python"]\n',
        "stages[0].entrypoint",
        "a command string runs via /bin/sh -c, which replaces the entrypoint",
        "(the command string: line 2)",
        line=5,
    )
    error(
        f'{IMAGE}entrypoint = ["python"]\ncommand = ["x"]\n[[stages]]\nname = "a"\n'
        'command = "echo hi"\n',
        "stages[0].command",
        "(entrypoint: line 2)",
        line=6,
    )
    # A conflict at the top level is reported there, once, not again for each stage.
    result = check(
        f'{IMAGE}entrypoint = ["python"]\ncommand = "x"\n[[stages]]\nname = "a"\n'
        '[[stages]]\nname = "b"\n'
    )
    assert [p.loc for p in result.errors] == ["command"]


# -- output_dir -------------------------------------------------------------------------------


def test_output_dir_is_absolute_and_relative_to_the_file(tmp_path: Path) -> None:
    assert workload(f'{IMAGE}output_dir = "out"\n', tmp_path).output_dir == str(tmp_path / "out")
    assert workload(f'{IMAGE}output_dir = "/x/y/../z"\n').output_dir == "/x/z"
    home = workload(f'{IMAGE}output_dir = "~/runs"\n').output_dir
    assert home == os.path.join(str(Path.home()), "runs")
    assert workload(IMAGE).output_dir is None


def test_output_dir_errors(tmp_path: Path) -> None:
    (tmp_path / "taken").write_text("x")
    error(
        f'{IMAGE}output_dir = "taken"\n',
        "output_dir",
        f'"taken" is a file ({tmp_path / "taken"}): output_dir names a folder',
        line=2,
        base=tmp_path,
    )
    error(
        f'{IMAGE}output_dir = ""\n',
        "output_dir",
        'is empty: write a folder, e.g. output_dir = "out"',
    )
    error(f"{IMAGE}output_dir = 3\n", "output_dir", "must be a folder path in quotes")
    error(
        f'{IMAGE}[[stages]]\nname = "a"\noutput_dir = "out"\n',
        "stages[0].output_dir",
        "`output_dir` applies to the whole workload: set it at the top level of the file",
        line=4,
    )
    error(
        f'{IMAGE}[requirements]\noutput_dir = "out"\n',
        "requirements.output_dir",
        "belongs at the top level of the file, not in [requirements]: move it above",
    )


# -- [map] ------------------------------------------------------------------------------------


def test_map_items_inline() -> None:
    w = workload(f'{IMAGE}[map]\nitems = ["shard-0.jsonl", "shard-1.jsonl", 7]\nparallel = 16\n')
    assert w.stages[0].map == MapSpec(("shard-0.jsonl", "shard-1.jsonl", "7"), None, 16)
    assert workload(f'{IMAGE}map = {{ items = ["a"] }}\n').stages[0].map == MapSpec(("a",))


def test_map_over_a_file_of_lines(tmp_path: Path) -> None:
    (tmp_path / "inputs.txt").write_text("\ufeffa\n\n  b  \r\nc\n\n")
    w = workload(f'{IMAGE}[map]\nover = "inputs.txt"\n', tmp_path)
    spec = w.stages[0].map
    assert spec is not None
    assert (spec.items, spec.over, spec.parallel) == (("a", "b", "c"), "inputs.txt", None)


def test_map_over_problems_name_the_resolved_path(tmp_path: Path) -> None:
    missing = tmp_path / "nope.txt"
    error(
        f'{IMAGE}[map]\nover = "nope.txt"\n',
        "map.over",
        f'cannot read "nope.txt" ({missing}): no such file or directory',
        line=3,
        base=tmp_path,
    )
    (tmp_path / "empty.txt").write_text("\n  \n")
    error(
        f'{IMAGE}[map]\nover = "empty.txt"\n',
        "map.over",
        f'"empty.txt" ({tmp_path / "empty.txt"}) holds no items: every line is empty',
        base=tmp_path,
    )
    (tmp_path / "dir").mkdir()
    error(f'{IMAGE}[map]\nover = "dir"\n', "map.over", "is not a file", base=tmp_path)
    (tmp_path / "bin.txt").write_bytes(b"a\n\xff\n")
    error(
        f'{IMAGE}[map]\nover = "bin.txt"\n', "map.over", "is not UTF-8 text (line 2)", base=tmp_path
    )
    (tmp_path / "nul.txt").write_text("a\nb\x00\n")
    error(f'{IMAGE}[map]\nover = "nul.txt"\n', "map.over", "NUL character on line 2", base=tmp_path)
    big = tmp_path / "big.txt"
    with big.open("wb") as handle:
        handle.truncate(MAX_OVER_BYTES + 1)
    error(
        f'{IMAGE}[map]\nover = "big.txt"\n',
        "map.over",
        "an over file holds at most 16 MiB",
        base=tmp_path,
    )
    error(
        f"{IMAGE}[map]\nover = 3\n",
        "map.over",
        'must be a file path in quotes, e.g. over = "inputs.txt"',
    )


def test_map_item_limit_names_the_count(tmp_path: Path) -> None:
    (tmp_path / "many.txt").write_text("x\n" * (MAX_MAP_ITEMS + 1))
    error(
        f'{IMAGE}[map]\nover = "many.txt"\n',
        "map.over",
        "holds 100,001 items; a [map] runs at most 100,000",
        base=tmp_path,
    )
    (tmp_path / "exact.txt").write_text("x\n" * MAX_MAP_ITEMS)
    spec = workload(f'{IMAGE}[map]\nover = "exact.txt"\n', tmp_path).stages[0].map
    assert spec is not None and len(spec.items) == MAX_MAP_ITEMS
    items = ", ".join(['"a"'] * (MAX_MAP_ITEMS + 1))
    error(f"{IMAGE}[map]\nitems = [{items}]\n", "map.items", "has 100,001 items")


@pytest.mark.parametrize(
    ("body", "loc", "words"),
    [
        ("items = []", "map.items", ["is empty: list at least one item, or remove [map]"]),
        ('items = "a"', "map.items", ['must be a list of strings, e.g. items = ["shard-0"']),
        ('items = ["a", true]', "map.items[1]", ['must be a string or an integer: write "true"']),
        ('items = ["a", 1.5]', "map.items[1]", ['write "1.5"']),
        ('items = ["a", ""]', "map.items[1]", ["is empty: remove it"]),
        ('items = [["a"]]', "map.items[0]", ["must be a string or an integer"]),
        (
            'items = ["a"]\nover = "x"',
            "map.over",
            ["has both items (line 3) and over: keep exactly one"],
        ),
        ("parallel = 2", "map", ['needs its inputs: items = ["a", "b"] or over = "inputs.txt"']),
        (
            'items = ["a"]\nparallel = 0',
            "map.parallel",
            ["must be at least 1, not 0", "omit parallel"],
        ),
        ('items = ["a"]\nparallel = -3', "map.parallel", ["must be at least 1, not -3"]),
        ('items = ["a"]\nparallel = true', "map.parallel", ["not true"]),
        (
            'items = ["a"]\nparallel = 4.0',
            "map.parallel",
            ["must be an integer: write parallel = 4"],
        ),
        ('items = ["a"]\nparallel = 2.5', "map.parallel", ["not 2.5"]),
        ('items = ["a"]\nparallel = nan', "map.parallel", ["not nan"]),
        ('items = ["a"]\nparallel = "4"', "map.parallel", ["without quotes: write parallel = 4"]),
        ('item = ["a"]', "map.item", ["did you mean `items` (the inputs, one task each)?"]),
        ('inputs = ["a"]', "map.inputs", ["did you mean `items`"]),
        ('file = "x"', "map.file", ["did you mean `over` (a file of inputs, one per line)?"]),
        ('from = "x"', "map.from", ["did you mean `over`"]),
        ('items = ["a"]\nconcurrency = 2', "map.concurrency", ["did you mean `parallel`"]),
        ('items = ["a"]\nmax_parallel = 2', "map.max_parallel", ["did you mean `parallel`"]),
        ('items = ["a"]\nworkers = 2', "map.workers", ["did you mean `parallel`"]),
        ('items = ["a"]\nItems = ["b"]', "map.Items", ["did you mean `items`? Keys are lowercase"]),
        ('items = ["a"]\nzz = 1', "map.zz", ["unknown key (allowed here: items, over, parallel)"]),
        ('inputs_file = "x"', "map.inputs_file", ["did you mean `over`"]),
        ('items = ["a"]\nretries = 2', "map.retries", ["unknown key: retries are an option"]),
    ],
)
def test_map_rules(body: str, loc: str, words: list[str]) -> None:
    error(f"{IMAGE}[map]\n{body}\n", loc, *words)


def test_map_must_be_a_table() -> None:
    error(f'{IMAGE}map = ["a"]\n', "map", 'must be a table: write [map] with items = ["a", "b"]')
    error(
        f'{IMAGE}[[stages]]\nname = "s"\nmap = 1\n',
        "stages[0].map",
        "must be a table: write [stages.map] with",
    )


def test_map_at_the_top_level_with_stages_belongs_in_a_stage() -> None:
    error(
        f'{IMAGE}[map]\nitems = ["a"]\n[[stages]]\nname = "s"\n',
        "map",
        "with [[stages]], [map] belongs in the stage that fans out: move it into that stage "
        "as [stages.map]",
        line=2,
    )


def test_a_stage_fans_out_with_stages_map() -> None:
    w = workload(
        f'{IMAGE}[[stages]]\nname = "prep"\n[[stages]]\nname = "fan"\n[stages.map]\n'
        'items = ["a", "b"]\nparallel = 2\n'
    )
    assert w.stages[0].map is None
    assert w.stages[1].map == MapSpec(("a", "b"), None, 2)
    error(
        f'{IMAGE}[[stages]]\nname = "s"\n[stages.map]\nitem = ["a"]\n',
        "stages[0].map.item",
        "did you mean `items`",
        line=5,
    )


def test_map_in_requirements_is_a_table_of_its_own() -> None:
    error(
        f'{IMAGE}[requirements]\nmap = {{ items = ["a"] }}\n',
        "requirements.map",
        "`map` belongs at the top level of the file, not in [requirements]: write it as its "
        "own [map] table",
    )
    error(
        f'{IMAGE}[[stages]]\nname = "s"\n[stages.requirements]\nmap = {{ items = ["a"] }}\n',
        "stages[0].requirements.map",
        "write it as [stages.map] after this stage's keys",
    )


# -- share_gpu --------------------------------------------------------------------------------


@pytest.mark.parametrize("where", ["flat", "nested"])
def test_share_gpu_is_one_gpu_sized_by_memory(where: str) -> None:
    keys = "share_gpu = true\npeak_memory_gb = 20\n"
    text = IMAGE + (keys if where == "flat" else "[requirements]\n" + keys)
    reqs = workload(text).requirements
    assert (reqs.share_gpu, reqs.gpu_count, reqs.peak_memory_gb) == (True, 1, 20.0)
    assert workload(f'{IMAGE}share_gpu = true\npeak_memory_gb = 8\ngpu_count = 1\ngpu = "L4"\n')
    off = workload(f"{IMAGE}share_gpu = false\n").requirements
    assert (off.share_gpu, off.gpu_count) == (False, 0)


def test_share_gpu_needs_peak_memory_and_says_why() -> None:
    found = error(
        f"{IMAGE}share_gpu = true\n",
        "share_gpu",
        "share_gpu = true needs peak_memory_gb, the GPU memory each task uses",
        "a GPU of D GB runs at most floor(D / peak_memory_gb) tasks at once",
        "four tasks of 20 GB on a 24 GB card would run out of memory",
        "add peak_memory_gb = <GB each task needs>",
        line=2,
    )
    assert found.severity == "error"
    error(
        f'{IMAGE}[[stages]]\nname = "s"\n[stages.requirements]\nshare_gpu = true\n',
        "stages[0].requirements.share_gpu",
        "needs peak_memory_gb",
        line=5,
    )


@pytest.mark.parametrize("count", [2, 4, 8])
def test_share_gpu_shares_one_gpu(count: int) -> None:
    error(
        f"{IMAGE}share_gpu = true\npeak_memory_gb = 20\ngpu_count = {count}\n",
        "gpu_count",
        f"share_gpu = true shares ONE GPU between tasks, not {count}: write gpu_count = 1 or omit",
        line=4,
    )


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ('"true"', "must be true or false without quotes: write share_gpu = true"),
        ('"False"', "write share_gpu = false"),
        ("1", "must be true or false, e.g. share_gpu = true, not 1"),
        ('"yes"', "must be true or false"),
    ],
)
def test_share_gpu_is_a_boolean(value: str, words: str) -> None:
    error(f"{IMAGE}share_gpu = {value}\npeak_memory_gb = 8\n", "share_gpu", words, line=2)


@pytest.mark.parametrize("value", ["0.25", "0.5", "0.125"])
def test_a_fraction_of_a_gpu_points_to_share_gpu(value: str) -> None:
    error(
        f"{IMAGE}gpu_count = {value}\n",
        "gpu_count",
        "of a GPU cannot be requested as a count",
        "write share_gpu = true with peak_memory_gb = <memory each task needs>",
    )


def test_share_gpu_is_never_inherited_and_set_twice_is_an_error() -> None:
    result = check(f'{IMAGE}share_gpu = true\npeak_memory_gb = 8\n[[stages]]\nname = "s"\n')
    assert result.workload is not None
    assert result.workload.stages[0].requirements.share_gpu is False
    found = problem(result, "share_gpu", "warning")
    assert found.message.startswith("share_gpu = true at the top level reaches no stage")
    error(
        f"{IMAGE}share_gpu = true\n[requirements]\nshare_gpu = true\n",
        "share_gpu",
        "set both at the top level and in [requirements] (line 4)",
    )


# -- the minimums the engine enforces ---------------------------------------------------------


def test_cpu_below_docker_s_smallest_share() -> None:
    error(
        f"{IMAGE}[requirements]\ncpu = 0.005\n",
        "requirements.cpu",
        "0.005 is below 0.01 CPU, the smallest CPU share Docker accepts: write cpu = 0.01 or more",
        line=3,
    )
    assert workload(f"{IMAGE}[requirements]\ncpu = 0.01\n").requirements.cpu == 0.01
    assert workload(f"{IMAGE}[requirements]\ncpu = 0\n").requirements.cpu == 1.0


def test_memory_below_docker_s_minimum() -> None:
    error(
        f"{IMAGE}[requirements]\nmemory_gb = 0.005\n",
        "requirements.memory_gb",
        "0.005 GB is below Docker's smallest memory limit, 6 MB: write memory_gb = 0.006",
        line=3,
    )
    assert workload(f"{IMAGE}[requirements]\nmemory_gb = 0.006\n").requirements.memory_gb == 0.006
    assert workload(f"{IMAGE}[requirements]\nmemory_gb = 0\n").requirements.memory_gb is None


def test_the_smallest_cpu_gets_more_than_docker_s_memory_minimum() -> None:
    # Without memory_gb a container gets 2 GiB per CPU: the smallest accepted cpu gives
    # 20 MiB, above Docker's 6 MB, so no cpu that validates can fall below it.
    from nodus_cli.workload.rules.requirements import MIN_CPU, MIN_MEMORY_GB

    assert MIN_CPU * 2 * 1024**3 > MIN_MEMORY_GB * 1000**3


# -- env templates and secrets ----------------------------------------------------------------


def test_env_templates_are_kept_as_written() -> None:
    w = workload(
        f'{IMAGE}env = {{ HF_TOKEN = "${{HF_TOKEN}}", URL = "http://${{HOST:-localhost}}:80", '
        'PRICE = "$$5", RAW = "a$b" }\n'
    )
    assert w.env == {
        "HF_TOKEN": "${HF_TOKEN}",
        "URL": "http://${HOST:-localhost}:80",
        "PRICE": "$$5",
        "RAW": "a$b",
    }


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ('"${HF_TOKEN"', ['"${HF_TOKEN" starts a template that never ends', 'close it with "}"']),
        ('"${1X}"', ['"${1X}" does not name a variable', "${HF_TOKEN:-default}"]),
        ('"${}"', ['"${}" does not name a variable']),
        ('"${A-x}"', ['"${A-x}" is not a template nodus understands: write ${A} or ${A:-default}']),
        ('"${A:?x}"', ["write ${A} or ${A:-default}"]),
        ('"${A:-${B}}"', ['"${A:-${B}}": a default cannot hold another template']),
        ('"x ${A:-${B:-${C}}} y"', ['"${A:-${B:-${C}}}": a default cannot hold another']),
    ],
)
def test_env_template_syntax_errors(value: str, words: list[str]) -> None:
    error(f"{IMAGE}env = {{ X = {value} }}\n", "env.X", *words, line=2)


@pytest.mark.parametrize("key", ["HF_TOKEN", "api_key", "AWS_SECRET_ACCESS_KEY", "DB_PASSWORD"])
def test_a_literal_secret_is_a_warning_with_the_fix(key: str) -> None:
    warning(
        f'{IMAGE}[env]\n{key} = "hunter2"\n',
        f"env.{key}",
        f'write {key} = "${{{key}}}" to take it from the environment when the run starts '
        "(a literal is stored in the file and in run records)",
        line=3,
    )


def test_secrets_from_the_environment_or_empty_do_not_warn() -> None:
    for value in ('"${HF_TOKEN}"', '"${HF_TOKEN:-}"', '""', '"Bearer ${TOKEN}"'):
        result = check(f"{IMAGE}env = {{ HF_TOKEN = {value} }}\n")
        assert result.valid and result.problems == [], (value, result.problems)
    stage = check(f'{IMAGE}[[stages]]\nname = "s"\nenv = {{ MY_TOKEN = "x" }}\n')
    assert problem(stage, "stages[0].env.MY_TOKEN", "warning").line == 4


def test_a_bare_dollar_name_is_passed_as_written_and_says_so() -> None:
    warning(
        f'{IMAGE}env = {{ CACHE = "$HOME/cache" }}\n',
        "env.CACHE",
        "$HOME is passed as written",
        "write ${HOME} to take HOME from the environment when the run starts",
        "or $$HOME to keep the $",
    )
    assert check(f'{IMAGE}env = {{ CACHE = "$$HOME/cache", P = "5$" }}\n').problems == []


def test_reserved_names_are_refused() -> None:
    for name in ("NODUS_WORK_DIR", "NODUS_ITEM", "NODUS_ITEM_INDEX", "NODUS_ITEM_COUNT"):
        error(f'{IMAGE}env = {{ {name} = "x" }}\n', f"env.{name}", "is set by nodus")


# -- keys of other tools ----------------------------------------------------------------------


UNSUPPORTED = [
    (
        "setup",
        '"pip install x"',
        ["nodus has no setup step", "build it into the image", "[[stages]]"],
    ),
    ("num_nodes", "2", ["ONE machine", "multi-node jobs are not supported", "[map]"]),
    ("nodes", "2", ["ONE machine", "[map]"]),
    ("use_spot", "true", ["spot instances are not supported: nodus ranks on-demand prices"]),
    ("spot", "true", ["spot instances are not supported"]),
    (
        "workdir",
        '"/app"',
        ["no working-directory key", "the image's WORKDIR applies", "$NODUS_WORK_DIR"],
    ),
    ("working_dir", '"/app"', ["the image's WORKDIR applies"]),
    ("idle_duration", "60", ["not supported: a run ends when its command ends"]),
    ("idle_timeout", "60", ["not supported"]),
    ("retry", "3", ["nodus run --retries N", "(here: nodus run --retries 3)"]),
    ("retries", "2", ["(here: nodus run --retries 2)"]),
    ("max_retries", "true", ["nodus run --retries N"]),
]
FOREIGN = [
    ("resources", "{ cpu = 1 }", ["did you mean [requirements]?", "cpu, memory_gb, gpu"]),
    ("file_mounts", '["a:/b"]', ["did you mean `mounts`?", 'mounts = ["./data:/data:ro"]']),
    ("volumes", '["a:/b"]', ["did you mean `mounts`?"]),
    ("outputs", '"out"', ["did you mean `output_dir`?", "receives the work directory's contents"]),
    ("output", '"out"', ["did you mean `output_dir`?"]),
    ("concurrency", "4", ["did you mean [map]?", "parallel", "(here: parallel = 4)"]),
    ("parallelism", "4", ["did you mean [map]?", "(here: parallel = 4)"]),
    ("replicas", "3", ["did you mean [map]?", "each item runs as its own task"]),
]
MISLEADING = ["`model`", "`mounts`", "`name`", "`stages`", "`image`", "`env`", "`ports`", "`map`"]


@pytest.mark.parametrize(("key", "value", "words"), UNSUPPORTED + FOREIGN)
def test_keys_of_other_tools_say_what_nodus_offers(key: str, value: str, words: list[str]) -> None:
    found = error(f"{IMAGE}{key} = {value}\n", key, *words, line=2)
    # Never a "did you mean" that points elsewhere (nodes is not `model`, spot not `stages`).
    if key in {k for k, _, _ in UNSUPPORTED}:
        assert found.message.startswith("unknown key: ")
        assert not any(m in found.message for m in MISLEADING), found.message
    assert "allowed here" not in found.message


@pytest.mark.parametrize(("key", "value", "words"), UNSUPPORTED + FOREIGN)
def test_keys_of_other_tools_in_a_stage(key: str, value: str, words: list[str]) -> None:
    found = error(f'{IMAGE}[[stages]]\nname = "s"\n{key} = {value}\n', f"stages[0].{key}", line=4)
    assert found.message.startswith("unknown key")
    assert "allowed here" not in found.message
    if key == "resources":
        assert "[stages.requirements]" in found.message
    if key in ("concurrency", "replicas"):
        assert "[stages.map]" in found.message
    if key == "outputs":
        assert "`output_dir` at the top level of the file" in found.message


def test_entrypoint_is_a_real_key_now() -> None:
    assert workload(f'{IMAGE}entrypoint = ["x"]\n').stages[0].entrypoint == ["x"]


@pytest.mark.parametrize(
    ("line", "loc", "hint"),
    [
        ('mount = ["a:/b"]', "mount", "did you mean `mounts`?"),
        ("port = [80]", "port", "did you mean `ports`?"),
        ('entry_point = ["x"]', "entry_point", "did you mean `entrypoint`?"),
        ('output_directory = "x"', "output_directory", "did you mean `output_dir`?"),
        ("shared_gpu = true", "shared_gpu", "did you mean `share_gpu`?"),
        ('Mounts = ["a:/b"]', "Mounts", "did you mean `mounts`? Keys are lowercase"),
    ],
)
def test_misspelled_new_keys_get_a_hint(line: str, loc: str, hint: str) -> None:
    error(f"{IMAGE}{line}\n", loc, hint, line=2)


# -- the problem cap --------------------------------------------------------------------------


def test_a_file_reports_at_most_max_problems_and_counts_the_rest() -> None:
    count = MAX_PROBLEMS + 250
    text = IMAGE + "".join(f"unknown_{i} = 1\n" for i in range(count))
    result = check(text)
    assert not result.valid
    assert len(result.problems) == MAX_PROBLEMS + 1
    last = result.problems[-1]
    assert (last.loc, last.line, last.severity) == ("", None, "error")
    assert last.message == (
        "250 more errors not shown: nodus reports the first 1,000 errors and 1,000 warnings "
        "of a file; fix these and validate again"
    )
    assert [p.line for p in result.problems[:3]] == [2, 3, 4]


def test_warnings_past_the_cap_keep_the_file_valid() -> None:
    text = IMAGE + "[env]\n" + "".join(f'TOKEN_{i} = "x"\n' for i in range(MAX_PROBLEMS + 5))
    result = check(text)
    assert result.valid and result.workload is not None
    assert len(result.workload.env) == MAX_PROBLEMS + 5
    assert result.problems[-1].severity == "warning"
    assert result.problems[-1].message.startswith("5 more warnings not shown")


def test_errors_and_warnings_are_capped_apart() -> None:
    # A thousand warnings never hide an error.
    secrets = "[env]\n" + "".join(f'TOKEN_{i} = "x"\n' for i in range(MAX_PROBLEMS + 3))
    result = check(f"{IMAGE}[requirements]\ncpu = -1\nmemory_gb = -1\n{secrets}")
    assert not result.valid
    assert [p.loc for p in result.errors[:2]] == ["requirements.cpu", "requirements.memory_gb"]
    assert len(result.warnings) == MAX_PROBLEMS + 1
    assert result.problems[-1].severity == "warning"
    assert result.problems[-1].message.startswith("3 more warnings not shown")
    errors = "".join(f"bad_{i} = 1\n" for i in range(MAX_PROBLEMS + 2))
    both = check(f"{IMAGE}{errors}{secrets}")
    counted = [(p.severity, p.count, p.message.split(":")[0]) for p in both.problems[-2:]]
    assert counted == [
        ("error", 2, "2 more errors not shown"),
        ("warning", 3, "3 more warnings not shown"),
    ]


def test_a_huge_array_of_wrong_arguments_is_cheap() -> None:
    import time

    text = IMAGE + "command = [" + ", ".join(["1"] * 200_000) + "]\n"
    start = time.perf_counter()
    result = check(text)
    assert time.perf_counter() - start < 10
    assert len(result.errors) == MAX_PROBLEMS + 1
    assert result.errors[0].loc == "command[0]" and result.errors[0].line == 2


# -- the Python API goes through the same rules -----------------------------------------------


def test_python_api_documents_follow_the_same_rules(tmp_path: Path) -> None:
    result = normalize(
        {
            "image": "i",
            "mounts": ["./data:/data:ro"],
            "entrypoint": ["python"],
            "command": ["x.py"],
            "map": {"items": ["a", "b"], "parallel": 2},
            "output_dir": "out",
            "env": {"HF_TOKEN": "${HF_TOKEN}"},
        },
        base_dir=tmp_path,
    )
    assert result.workload is not None, result.problems
    assert result.errors == [] and result.warnings == []
    stage = result.workload.stages[0]
    assert stage.mounts[0].source == str(tmp_path / "data")
    assert stage.mounts[0].where == "<workload>: mounts[0]"
    assert result.workload.output_dir == str(tmp_path / "out")
    bad = normalize({"image": "i", "share_gpu": True, "requirements": {"share_gpu": True}})
    assert [p.loc for p in bad.errors] == ["share_gpu"]
    wins = normalize(
        {
            "image": "i",
            "share_gpu": False,
            "requirements": {"share_gpu": True, "peak_memory_gb": 4},
        },
        mapping_wins=True,
    )
    assert wins.workload is not None and wins.workload.requirements.share_gpu is True
    huge = normalize({"image": "i", "map": {"items": ["a"], "parallel": 2**63}})
    assert "is too large" in problem(huge, "map.parallel").message
    served = normalize({"image": "i", "ports": [8000, "127.0.0.1:9000:90"]})
    assert served.workload is not None
    assert [p.host for p in served.workload.stages[0].ports] == [8000, 9000]


# -- written again: to_toml and from_json -----------------------------------------------------


def test_every_new_key_survives_to_toml(tmp_path: Path) -> None:
    (tmp_path / "in.txt").write_text("x\ny\n")
    w = workload(
        f"""\
        {IMAGE}
        command = "echo $NODUS_ITEM"
        mounts = ["./data:/data:ro", "vol:/vol"]
        output_dir = "out"
        share_gpu = true
        peak_memory_gb = 10
        [map]
        over = "in.txt"
        parallel = 3
        """,
        tmp_path,
    )
    assert w.stages[0].shell
    back = again(w)
    assert back.stages[0].mounts[0].source == str(tmp_path / "data")
    assert back.stages[0].map is not None and back.stages[0].map.over is None  # written inline
    assert back.output_dir == str(tmp_path / "out")


def test_stages_with_every_new_key_survive_to_toml() -> None:
    w = workload(
        f"""\
        {IMAGE}
        command = "echo top"
        mounts = ["cache:/cache"]
        [[stages]]
        name = "serve"
        command = ["serve"]
        ports = ["127.0.0.1:8080:81/udp", "[::1]:9000:90", 8000]
        [[stages]]
        name = "fan"
        entrypoint = ["python"]
        command = ["x.py"]
        mounts = ["/d:/d:ro"]
        share_gpu = true
        peak_memory_gb = 4
        [stages.map]
        items = ["a", "b"]
        [[stages]]
        name = "shell"
        """
    )
    back = again(w)
    assert back.stages[2].shell and back.stages[2].command == ["/bin/sh", "-c", "echo top"]
    assert back.stages[1].requirements.share_gpu


def test_mount_and_map_provenance_is_not_meaning() -> None:
    a = Mount("/d", "/d", True, "./d:/d:ro", "a.toml:3: mounts[0]")
    b = Mount("/d", "/d", True, "/d:/d:ro", None)
    assert a == b and hash(a) == hash(b)
    assert MapSpec(("x",), "in.txt", 2) == MapSpec(("x",), None, 2)
    assert Mount("/d", "/d", True) != Mount("/d", "/d", False)


def test_from_json_round_trips_the_new_keys(tmp_path: Path) -> None:
    (tmp_path / "in.txt").write_text("a\n")
    w = workload(
        f'{IMAGE}entrypoint = ["python"]\ncommand = ["x"]\nmounts = ["./d:/d"]\n'
        f'output_dir = "o"\n[[stages]]\nname = "serve"\nports = ["127.0.0.1:1:2/udp"]\n'
        '[[stages]]\nname = "fan"\n[stages.map]\nover = "in.txt"\n',
        tmp_path,
    )
    doc = w.as_json()
    rebuilt = from_json(doc)
    assert rebuilt == w
    assert rebuilt.as_json() == doc
    assert doc["stages"][0]["mounts"][0]["where"] == "w.toml:4: mounts[0]"
    assert doc["stages"][1]["map"]["over"] == "in.txt"
    assert doc["stages"][0]["ports"] == [
        {"container": 2, "host": 1, "protocol": "udp", "host_ip": "127.0.0.1"}
    ]


def test_a_nodus_toml_file_is_named_without_both_suffixes(tmp_path: Path) -> None:
    path = tmp_path / "train.nodus.toml"
    path.write_text(IMAGE)
    result = load_file(path)
    assert result.workload is not None and result.workload.name == "train"


def test_a_function_stage_round_trips_and_only_it_carries_the_key() -> None:
    from nodus_cli.structs import replace
    from nodus_cli.workload import FunctionCall

    w = workload(IMAGE, Path("."))
    assert "function" not in w.as_json()["stages"][0]
    stage = replace(w.stages[0], command=None, function=FunctionCall("mod.f", "abc", "3.11"))
    called = replace(w, name="mod.f", stages=[stage])
    doc = called.as_json()
    assert doc["stages"][0]["function"] == {"name": "mod.f", "call": "abc", "python": "3.11"}
    assert from_json(doc) == called
