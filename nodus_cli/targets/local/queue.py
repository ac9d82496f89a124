"""Who holds this machine's GPUs and who waits for them, as every user of the engine sees it.

**The truth is the engine's.** Every live container with a device request holds the GPUs
it names, whoever started it and with whichever ``NODUS_HOME``: nodus's own containers say
which in a label (``nodus.gpus``, and for a shared GPU the memory the task takes there);
any other container's ``HostConfig.DeviceRequests`` (``docker run --gpus device=UUID``,
``--gpus 2``, ``--gpus all``) or its NVIDIA runtime's ``NVIDIA_VISIBLE_DEVICES`` are read
once and remembered (they never change after the container is created).

**A task that must wait says so to everyone.** Its queue entry is a container that is
created and never started: it holds nothing, and its labels carry the task's place
(``priority``, higher first, then the moment it began to wait), the GPUs it can use and
how many it needs, and who made it (host, pid and process start time, ``NODUS_HOME``).
Every nodus process reads the same entries, so all agree on the order:

- a waiting task takes GPUs only when no task ahead of it in line could use any of them
  (a large request is never starved by a stream of small ones), and a new request is
  behind every entry of its priority or higher;
- a task that needs only GPUs nobody ahead of it can use may start at once.

**The engine makes the hand-out atomic, across processes and users.** A task's container,
created with its GPUs, is its reservation. Right after creating it nodus reads the
engine again: when another live container holds one of those GPUs (two creations raced),
it withdraws its own and tries again after a random pause. Of two creations that race,
the later one always sees the earlier (each reads after its own creation is done), so two
never both keep a GPU. There is no shared lock file to replace with a link, and a
reservation or an entry whose owner died is an ordinary container: anyone who sees that
its owner is gone (on this host: the pid is not alive, or is another process now) removes
it, whichever ``NODUS_HOME`` it came from.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from nodus_cli.structs import field, struct
from nodus_cli.targets.docker.containers import (
    LABEL_GPU_SHARE,
    LABEL_GPUS,
    LABEL_HOME,
    LABEL_NEED,
    LABEL_OWNER,
    LABEL_PRIORITY,
    LABEL_QUEUE,
    LABEL_QUEUED_AT,
    LABEL_RUN,
    LABEL_WANTS,
)
from nodus_cli.targets.local.owner import Owner, me
from nodus_cli.text import plural

if TYPE_CHECKING:
    from nodus_cli.hardware.smi import LocalGpu
    from nodus_cli.targets.docker import engine

__all__ = [
    "LIVE",
    "Holder",
    "Ledger",
    "Owner",
    "Picture",
    "Request",
    "Use",
    "Waiter",
    "me",
]

#: The states in which a container holds what it was created with.
LIVE = ["created", "running", "restarting", "paused"]


@struct(frozen=True)
class Holder:
    """A live container that holds GPUs."""

    id: str
    name: str
    #: The nodus run it belongs to (None: a container nodus did not start).
    run: str | None
    home: str | None
    owner: Owner | None
    #: GPU memory it takes on a shared GPU (GB); None: it holds the whole GPU.
    share_gb: float | None
    #: When it was created (seconds since the epoch).
    created: float

    def words(self, home: str | None = None) -> str:
        """``run RUN_ID`` or ``warm worker NAME`` (with its NODUS_HOME when not ``home``), or
        ``container NAME, not started by nodus,`` (its closing comma ready for the
        ``since`` that follows)."""
        if self.run is None and self.home is None:
            return f"container {self.name}, not started by nodus,"
        # nodus's container of no run: a warm worker of single calls, between runs
        text = f"run {self.run}" if self.run is not None else f"warm worker {self.name}"
        if self.home and home and self.home != home:
            text += f" of NODUS_HOME {self.home}"
        return text


@struct
class Use:
    """Who holds one GPU now."""

    whole: list[Holder] = field(default_factory=list)
    shared: list[Holder] = field(default_factory=list)

    @property
    def shared_gb(self) -> float:
        return sum(h.share_gb or 0.0 for h in self.shared)

    @property
    def holders(self) -> list[Holder]:
        return [*self.whole, *self.shared]


@struct(frozen=True)
class Request:
    """What a task asks of this machine's GPUs: ``count`` whole GPUs among ``candidates``
    (in the order to prefer them), or ``share_gb`` of one of them."""

    candidates: tuple[str, ...]
    count: int
    share_gb: float | None = None
    #: Devices an earlier attempt held: kept when they are free.
    prefer: tuple[str, ...] = ()

    @property
    def need(self) -> str:
        return f"share:{self.share_gb:g}" if self.share_gb is not None else str(self.count)


@struct(frozen=True)
class Waiter:
    """A queue entry: a task waiting for GPUs, and its place."""

    id: str
    name: str
    run: str
    task: str
    priority: int
    queued_at: int  # nanoseconds since the epoch
    wants: frozenset[str]
    need: str
    home: str | None
    owner: Owner | None

    @property
    def key(self) -> tuple[int, int, str]:
        """Its place: higher priority first, then first come, first served."""
        return (-self.priority, self.queued_at, self.id)


@struct
class Picture:
    """This machine's GPUs as the engine shows them at one moment."""

    uses: dict[str, Use]
    #: Every queue entry, first in line first.
    waiters: list[Waiter]
    #: Containers (and entries) whose owner is gone: anyone may remove them.
    orphans: list[str] = field(default_factory=list)

    def use(self, uuid: str) -> Use:
        return self.uses.get(uuid) or Use()

    def ahead(self, key: tuple[int, int, str] | None, priority: int) -> list[Waiter]:
        """The entries ahead of a place in line (``key``), or of a newcomer of ``priority``."""
        if key is None:
            return [w for w in self.waiters if w.priority >= priority]
        return [w for w in self.waiters if w.key < key]

    def ahead_for(self, request: Request, priority: int) -> list[Waiter]:
        """The entries a newcomer of ``priority`` would wait behind for ``request``."""
        wanted = set(request.candidates)
        return [w for w in self.ahead(None, priority) if w.wants & wanted]

    def choose(
        self,
        request: Request,
        memory_gb: Mapping[str, float],
        key: tuple[int, int, str] | None,
        priority: int,
    ) -> tuple[str, ...] | None:
        """The GPUs ``request`` may take now, or None when it must wait."""
        blocked: set[str] = set()
        for w in self.ahead(key, priority):
            blocked |= w.wants
        usable = [g for g in request.candidates if g not in blocked]
        if request.share_gb is not None:
            room = {
                g: memory_gb.get(g, 0.0) - self.use(g).shared_gb
                for g in usable
                if not self.use(g).whole
            }
            fits = [g for g, free in room.items() if free >= request.share_gb]
            if not fits:
                return None
            if request.prefer and request.prefer[0] in fits:
                return request.prefer[:1]
            # Spread: the device with the most room first, then in the candidates' order.
            order = {g: i for i, g in enumerate(request.candidates)}
            return (max(fits, key=lambda g: (room[g], -order[g])),)
        free = [g for g in usable if not self.use(g).holders]
        if len(free) < request.count:
            return None
        if len(request.prefer) == request.count and all(g in free for g in request.prefer):
            return request.prefer  # a retry keeps its GPUs when they are still free
        return tuple(free[: request.count])

    def conflicts(
        self, mine: str, gpus: Sequence[str], share_gb: float | None, memory_gb: Mapping[str, float]
    ) -> list[Holder]:
        """Other holders that make container ``mine``'s claim on ``gpus`` too many."""
        found: list[Holder] = []
        for g in gpus:
            use = self.use(g)
            others_whole = [h for h in use.whole if h.id != mine]
            others_shared = [h for h in use.shared if h.id != mine]
            if share_gb is None:
                found += others_whole + others_shared
            elif others_whole:
                found += others_whole
            elif sum(h.share_gb or 0.0 for h in others_shared) + share_gb > memory_gb.get(g, 0.0):
                found += others_shared
        return found

    def holders_of(self, gpus: Iterable[str]) -> list[Holder]:
        seen: dict[str, Holder] = {}
        for g in gpus:
            for h in self.use(g).holders:
                seen.setdefault(h.id, h)
        return sorted(seen.values(), key=lambda h: h.created)

    def place(self, entry: Waiter) -> int:
        """1 for the first in line among the entries that want any of the same GPUs."""
        return 1 + sum(1 for w in self.waiters if w.key < entry.key and w.wants & entry.wants)


def since(seconds: float) -> str:
    """A moment, as the queue's words give it: ``12:01:02 UTC`` (with the date when it
    was not today)."""
    moment = datetime.fromtimestamp(seconds, UTC)
    now = datetime.now(UTC)
    shown = moment.strftime("%H:%M:%S UTC")
    return shown if moment.date() == now.date() else moment.strftime("%Y-%m-%d ") + shown


def holder_words(holders: Sequence[Holder], home: str | None) -> str:
    """``held by run A since 12:01:02 UTC and container x, not started by nodus, since
    12:03:04 UTC``: no parentheses, since the words often stand inside a pair already."""
    if not holders:
        return "held by no one now"
    parts = [f"{h.words(home)} since {since(h.created)}" for h in holders[:3]]
    if len(holders) > 3:
        parts.append(plural(len(holders) - 3, "more holder"))
    listed = parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]
    return "held by " + listed


class Ledger:
    """Reads the picture from the engine; remembers what other containers hold."""

    def __init__(self, eng: engine.Engine, gpus: Sequence[LocalGpu]) -> None:
        self.engine = eng
        self.gpus = list(gpus)
        self._by_index = {str(g.index): g.uuid for g in self.gpus}
        self._known = {g.uuid for g in self.gpus}
        #: Containers nodus did not start: id -> the GPUs they hold (read once each).
        self._foreign: dict[str, tuple[str, ...]] = {}

    @property
    def memory_gb(self) -> dict[str, float]:
        return {g.uuid: g.nominal_memory_gb for g in self.gpus}

    def read(self) -> Picture:
        """Who holds what and who waits, now (EngineFailure when the engine fails)."""
        live = self.engine.containers({"status": LIVE})
        uses: dict[str, Use] = {}
        waiters: list[Waiter] = []
        orphans: list[str] = []
        seen: set[str] = set()
        for c in live:
            cid = str(c.get("Id") or "")
            seen.add(cid)
            labels: dict[str, str] = c.get("Labels") or {}
            name = ",".join(n.lstrip("/") for n in c.get("Names") or []) or cid[:12]
            owner = Owner.parse(labels.get(LABEL_OWNER))
            if owner is not None and (LABEL_QUEUE in labels or LABEL_GPUS in labels) and owner.gone:
                orphans.append(cid)
                continue
            if LABEL_QUEUE in labels:
                waiter = _waiter(cid, name, labels, owner)
                if waiter is not None:
                    waiters.append(waiter)
                continue
            if LABEL_GPUS in labels:
                held = tuple(u for u in labels[LABEL_GPUS].split(",") if u)
                share = _float(labels.get(LABEL_GPU_SHARE))
                run = labels.get(LABEL_RUN)
                home = labels.get(LABEL_HOME)
            else:
                held = self._foreign_gpus(cid)
                share, run, home = None, None, None
            if not held:
                continue
            holder = Holder(cid, name, run, home, owner, share, float(c.get("Created") or 0))
            for uuid in held:
                use = uses.setdefault(uuid, Use())
                (use.whole if share is None else use.shared).append(holder)
        for gone in set(self._foreign) - seen:
            del self._foreign[gone]
        waiters.sort(key=lambda w: w.key)
        return Picture(uses, waiters, orphans)

    def _foreign_gpus(self, cid: str) -> tuple[str, ...]:
        if cid not in self._foreign:
            from nodus_cli.targets.docker import engine

            try:
                info = self.engine.inspect(cid)
            except engine.EngineError:
                return ()  # removed meanwhile
            self._foreign[cid] = self.devices_of(info)
        return self._foreign[cid]

    def devices_of(self, info: Mapping[str, Any]) -> tuple[str, ...]:
        """This machine's GPUs a container was created with (its device requests, or the
        NVIDIA runtime's variable), in index order."""
        host = info.get("HostConfig") or {}
        wanted: set[str] = set()
        every = False
        for request in host.get("DeviceRequests") or []:
            capabilities = {c for group in request.get("Capabilities") or [] for c in group}
            if request.get("Driver") not in (None, "", "nvidia") and "gpu" not in capabilities:
                continue
            ids = request.get("DeviceIDs") or []
            count = int(request.get("Count") or 0)
            if count < 0:
                every = True
            elif count > 0 and not ids:
                wanted |= {g.uuid for g in sorted(self.gpus, key=lambda g: g.index)[:count]}
            wanted |= {u for u in (self._uuid(i) for i in ids) if u is not None}
        if host.get("Runtime") == "nvidia":
            env = (info.get("Config") or {}).get("Env") or []
            for item in env:
                name, _, value = str(item).partition("=")
                if name != "NVIDIA_VISIBLE_DEVICES" or value in ("", "void", "none"):
                    continue
                if value == "all":
                    every = True
                else:
                    wanted |= {u for u in (self._uuid(i) for i in value.split(",")) if u}
        if every:
            wanted = set(self._known)
        order = {g.uuid: g.index for g in self.gpus}
        return tuple(sorted(wanted, key=lambda u: order.get(u, 0)))

    def _uuid(self, text: str) -> str | None:
        text = text.strip()
        if text in self._known:
            return text
        return self._by_index.get(text)

    def reclaim(self, picture: Picture) -> None:
        """Remove what dead owners left holding or waiting (anyone may)."""
        from nodus_cli.targets.docker import engine

        for cid in picture.orphans:
            with contextlib.suppress(engine.EngineFailure):
                self.engine.remove(cid)


def _waiter(cid: str, name: str, labels: Mapping[str, str], owner: Owner | None) -> Waiter | None:
    try:
        return Waiter(
            id=cid,
            name=name,
            run=labels.get(LABEL_RUN, "?"),
            task=labels.get(LABEL_QUEUE, "?"),
            priority=int(labels.get(LABEL_PRIORITY, "50")),
            queued_at=int(labels.get(LABEL_QUEUED_AT, "0")),
            wants=frozenset(u for u in labels.get(LABEL_WANTS, "").split(",") if u),
            need=labels.get(LABEL_NEED, "1"),
            home=labels.get(LABEL_HOME),
            owner=owner,
        )
    except ValueError:
        return None  # not an entry nodus wrote: it holds nothing and orders nothing


def _float(text: str | None) -> float | None:
    try:
        return float(text) if text else None
    except ValueError:
        return None


def now_ns() -> int:
    return time.time_ns()
