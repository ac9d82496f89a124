"""Reading what Slurm's commands print: text captured from the harness's real cluster
(Slurm 22.05.8), with one node drained, one job running and one pending."""

from __future__ import annotations

from nodus_cli.targets.base import PendingKind, TaskState
from nodus_cli.targets.slurm import parse
from nodus_cli.targets.slurm.target import task_end
from nodus_cli.targets.slurm.waiting import ahead, pending_kind, pending_words

SCONTROL = (
    "NodeName=gpu-a Arch=x86_64 CoresPerSocket=1  CPUAlloc=1 CPUEfctv=2 CPUTot=2 CPULoad=1.85 "
    "AvailableFeatures=(null) ActiveFeatures=(null) Gres=gpu:h100:2 NodeAddr=10.214.1.2 "
    "NodeHostName=gpu-a Version=22.05.8 OS=Linux 6.18.44-fc-v1252 #1 SMP PREEMPT_DYNAMIC @0  "
    "RealMemory=1000 AllocMem=0 FreeMem=19392 Sockets=2 Boards=1 State=MIXED ThreadsPerCore=1 "
    "TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A Partitions=gpu  BootTime=2026-12-04T22:03:25 "
    "SlurmdStartTime=2026-12-04T22:50:16 LastBusyTime=2026-12-04T22:54:36 "
    "CfgTRES=cpu=2,mem=1000M,billing=2,gres/gpu=2,gres/gpu:h100=2 "
    "AllocTRES=cpu=1,gres/gpu=2,gres/gpu:h100=2 CapWatts=n/a CurrentWatts=0 AveWatts=0 "
    "ExtSensorsJoules=n/s ExtSensorsWatts=0 ExtSensorsTemp=n/s\n"
    "NodeName=gpu-b Arch=x86_64 CoresPerSocket=1  CPUAlloc=0 CPUEfctv=2 CPUTot=2 CPULoad=1.76 "
    "AvailableFeatures=(null) ActiveFeatures=(null) Gres=gpu:a100:2 NodeAddr=10.214.2.2 "
    "NodeHostName=gpu-b Version=22.05.8 OS=Linux 6.18.44-fc-v1252 #1 SMP PREEMPT_DYNAMIC @0  "
    "RealMemory=1000 AllocMem=0 FreeMem=19307 Sockets=2 Boards=1 State=IDLE+DRAIN "
    "ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A Partitions=gpu  "
    "BootTime=2026-12-04T22:03:25 SlurmdStartTime=2026-12-04T22:50:16 "
    "LastBusyTime=2026-12-04T22:56:13 CfgTRES=cpu=2,mem=1000M,billing=2,gres/gpu=2,"
    "gres/gpu:a100=2 AllocTRES= CapWatts=n/a CurrentWatts=0 AveWatts=0 ExtSensorsJoules=n/s "
    "ExtSensorsWatts=0 ExtSensorsTemp=n/s Reason=fan broken [root@2026-12-04T22:58:09]\n"
)

SQUEUE = "5|PENDING|Resources||wrap\n4|RUNNING|None|gpu-a|wrap\n"

SACCT = (
    "1|j.sh|FAILED|3:0|0|gpu-a\n"
    "2|nodus-20261204-225436-0f6e1a-main|COMPLETED|0:0|0|gpu-a\n"
    "4|wrap|CANCELLED by 0|0:0|2|gpu-a\n"
    "5|wrap|CANCELLED by 0|0:0|0|None assigned\n"
)


def test_nodes_read_with_their_model_from_the_gres_type_and_their_state() -> None:
    a, b = parse.nodes_of(SCONTROL)
    assert (a.name, a.state, a.usable, a.cpus, a.cpus_used, a.memory_mb) == (
        "gpu-a",
        "MIXED",
        True,
        2,
        1,
        1000,
    )
    assert a.gres == parse.Gres("h100", "H100", 80.0, 2)
    assert a.gpus_used == 2 and a.partitions == ("gpu",) and a.reason is None
    assert b.gres is not None and b.gres.model == "A100" and b.gpus_used == 0
    assert not b.usable
    assert b.words == "idle+drain (fan broken [root@2026-12-04T22:58:09])"


def test_a_gres_type_no_model_has_is_kept_as_written_and_never_guessed() -> None:
    assert parse.gres_of("gpu:tesla9000:4") == parse.Gres("tesla9000", None, None, 4)
    assert parse.gres_of("gpu:4") == parse.Gres(None, None, None, 4)
    assert parse.gres_of("(null)") is None
    assert parse.gres_of("gpu:a100_80gb:8(S:0-1)") == parse.Gres("a100_80gb", "A100", 80.0, 8)


def test_queue_and_accounting_lines() -> None:
    pending, running = parse.queued_jobs(SQUEUE)
    assert (pending.job_id, pending.state, pending.reason) == ("5", "PENDING", "Resources")
    assert (running.state, running.nodes) == ("RUNNING", "gpu-a")
    ended = {j.job_id: j for j in parse.ended_jobs(SACCT)}
    assert (ended["1"].state, ended["1"].exit_code) == ("FAILED", 3)
    assert ended["4"].state == "CANCELLED" and ended["4"].elapsed_seconds == 2
    assert all(j.finished for j in ended.values())


def test_end_states_read_in_words_and_kinds() -> None:
    ended = {j.job_id: j for j in parse.ended_jobs(SACCT)}
    assert task_end(ended["1"]).state == TaskState.EXITED
    assert task_end(ended["1"]).exit_code == 3
    assert task_end(ended["2"]).exit_code == 0
    cancelled = task_end(ended["4"])
    assert cancelled.state == TaskState.KILLED and "cancelled outside nodus" in str(
        cancelled.message
    )
    timeout = parse.Ended("9", "x", "TIMEOUT", 0, 15, 60, "gpu-a")
    assert task_end(timeout).state == TaskState.KILLED
    assert "time limit (TIMEOUT)" in str(task_end(timeout).message)
    oom = parse.Ended("9", "x", "OUT_OF_MEMORY", 0, 9, 6, "gpu-a")
    assert task_end(oom).state == TaskState.OUT_OF_MEMORY
    for state in ("NODE_FAIL", "PREEMPTED"):
        end = task_end(parse.Ended("9", "x", state, 0, 9, 6, "gpu-a"))
        assert end.state == TaskState.INFRASTRUCTURE and state in str(end.message)


def test_the_containers_own_exit_code_wins_over_sacct_above_128() -> None:
    # Slurm 22.05 keeps a batch script's `exit 137` as 9:0 (the harness's cluster did).
    killed = parse.Ended("9", "x", "FAILED", 9, 0, 6, "gpu-a")
    assert task_end(killed).exit_code == 9
    end = task_end(killed, 137)
    assert (end.state, end.exit_code, end.message) == (TaskState.EXITED, 137, "killed (exit 137)")
    assert task_end(parse.Ended("9", "x", "FAILED", 2, 0, 6, "gpu-a"), 130).exit_code == 130


def test_pending_reasons_in_words() -> None:
    assert "other jobs" in pending_words("Resources")
    assert "higher priority" in pending_words("Priority")
    assert "limit of its QOS" in pending_words("QOSMaxGRESPerUser")
    assert "limit of its account" in pending_words("AssocGrpGRES")
    assert "drained or down" in pending_words("ReqNodeNotAvail")


def test_pending_reasons_by_kind() -> None:
    assert pending_kind("Resources") == PendingKind.RESOURCES
    assert pending_kind("Priority") == PendingKind.PRIORITY
    assert pending_kind("QOSMaxGRESPerUser") == PendingKind.LIMIT
    assert pending_kind("AssocGrpGRES") == PendingKind.LIMIT
    assert pending_kind("ReqNodeNotAvail") == PendingKind.NODE_UNAVAILABLE
    assert pending_kind("JobHeldUser") == PendingKind.HELD
    assert pending_kind("None") == PendingKind.SCHEDULING
    assert pending_kind("Dependency") == PendingKind.OTHER


#: ``squeue -h -t PD -o WAITING_FORMAT``: an array's pending tasks are one line.
WAITING = """\
41_[2-9]|4294901720|bob|sweep|gpu
44|4294897695|root|nodus-20261205-main|gpu
42|4294901719|alice|train|gpu
43|4294901719|carol|eval|gpu
45|4294901800|dave|other|cpu
"""


def test_who_is_ahead_of_a_job_in_its_partition_first_first() -> None:
    jobs = parse.waiting_jobs(WAITING)
    assert [j.job_id for j in ahead(jobs, "44")] == ["41_[2-9]", "42", "43"]
    # The same priority: the job submitted first is ahead; an array task is its array.
    assert [j.job_id for j in ahead(jobs, "43")] == ["41_[2-9]", "42"]
    assert ahead(jobs, "41_3") == []
    assert ahead(jobs, "99") == []  # it left the queue meanwhile


def test_a_job_behind_others_names_them_and_a_waiting_one_who_holds_its_gpus() -> None:
    ahead_of_it = ("job 42 (train) by alice", "job 43 (eval) by carol")
    assert pending_words("Priority", ahead_of_it) == (
        "waiting behind 2 jobs of higher priority in Slurm's queue (Priority): "
        "job 42 (train) by alice, job 43 (eval) by carol"
    )
    assert pending_words("Resources", ("job 7 (wrap) on gpu-a",)).endswith(
        "(Resources); held by job 7 (wrap) on gpu-a"
    )
    many = tuple(f"job {i} (x) by u" for i in range(8))
    assert pending_words("Priority", many).endswith("job 4 (x) by u and 3 more")
