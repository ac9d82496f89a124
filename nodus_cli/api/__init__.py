"""The Python API: :class:`~nodus_cli.api.client.Client` and what it returns.

Everything a program (and the command line, which is one) can do with nodus goes
through here: load and check workloads, plan them, run them, look at runs and spending.
The public names are re-exported by ``nodus_cli`` itself (its ``__all__``); import them
from there. This package also names the types the command line renders (a run's log
lines, the stop results, the spend report, the sink a foreground run shows through), so
the command line needs nothing below it: the catalog it shows (``Catalog``, ``Offer``,
``Market``, the update's ``Source`` and ``UpdateResult``) and the plan it prints (``Plan``,
``StagePlan``, ``Candidate``). They are imported on first use, so importing
this package costs nothing until a name is used. Everything under ``nodus_cli`` other than the
names in ``nodus_cli.__all__`` is internal and may change between releases.

Imports inside methods: the modules of this package are loaded by every command,
``nodus validate`` included, so the run layer, the records, the targets and the catalog are
imported by the methods that use them, not at the top of the module
(``benchmarks/startup.py`` measures the start this keeps short; docs/architecture.md,
"Imports").
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from nodus_cli.lazy import exports

if TYPE_CHECKING:
    from nodus_cli.api.arguments import Requirements
    from nodus_cli.api.calls import Call, CallResult, Calls
    from nodus_cli.api.catalogs import CatalogInUse
    from nodus_cli.api.client import Client, Executed
    from nodus_cli.api.functions import Function, function
    from nodus_cli.api.plans import image_cuda
    from nodus_cli.api.runs import ItemResult, LogView, Run, RunResult, StageResult
    from nodus_cli.api.session import Prepared
    from nodus_cli.api.targets import CATALOG, target_names
    from nodus_cli.catalog import Catalog, CatalogKind, Offer
    from nodus_cli.catalog.market import Market
    from nodus_cli.catalog.sources import Source, SourceError
    from nodus_cli.catalog.update import UpdateResult
    from nodus_cli.errors import CallFailed
    from nodus_cli.functions.outcome import RemoteError
    from nodus_cli.planning.filters import CHECKS
    from nodus_cli.planning.plan import Plan, StagePlan
    from nodus_cli.planning.ranking import BASIS_RUNTIME, Candidate
    from nodus_cli.records.gpu_samples import MAX_GPU_SAMPLES, GpuSample
    from nodus_cli.records.logs import LogLine, Stream
    from nodus_cli.records.model import RunStatus, StageStatus
    from nodus_cli.run.reconcile import Stopped, StopResult
    from nodus_cli.run.sink import Progress, Sink
    from nodus_cli.run.spending import GroupSpend, PeriodSpend, Report

__all__ = [
    "BASIS_RUNTIME",
    "CATALOG",
    "CHECKS",
    "MAX_GPU_SAMPLES",
    "Call",
    "CallFailed",
    "CallResult",
    "Calls",
    "Candidate",
    "Catalog",
    "CatalogInUse",
    "CatalogKind",
    "Client",
    "Executed",
    "Function",
    "GpuSample",
    "GroupSpend",
    "ItemResult",
    "LogLine",
    "LogView",
    "Market",
    "Offer",
    "PeriodSpend",
    "Plan",
    "Prepared",
    "Progress",
    "RemoteError",
    "Report",
    "Requirements",
    "Run",
    "RunResult",
    "RunStatus",
    "Sink",
    "Source",
    "SourceError",
    "StagePlan",
    "StageResult",
    "StageStatus",
    "StopResult",
    "Stopped",
    "Stream",
    "UpdateResult",
    "function",
    "image_cuda",
    "target_names",
]

_WHERE = {
    "BASIS_RUNTIME": "nodus_cli.planning.ranking",
    "CHECKS": "nodus_cli.planning.filters",
    "Candidate": "nodus_cli.planning.ranking",
    "Plan": "nodus_cli.planning.plan",
    "StagePlan": "nodus_cli.planning.plan",
    "Catalog": "nodus_cli.catalog",
    "CatalogKind": "nodus_cli.catalog",
    "Offer": "nodus_cli.catalog",
    "Market": "nodus_cli.catalog.market",
    "Source": "nodus_cli.catalog.sources",
    "SourceError": "nodus_cli.catalog.sources",
    "UpdateResult": "nodus_cli.catalog.update",
    "CatalogInUse": "nodus_cli.api.catalogs",
    "image_cuda": "nodus_cli.api.plans",
    "Function": "nodus_cli.api.functions",
    "function": "nodus_cli.api.functions",
    "CATALOG": "nodus_cli.api.targets",
    "Call": "nodus_cli.api.calls",
    "CallFailed": "nodus_cli.errors",
    "CallResult": "nodus_cli.api.calls",
    "Calls": "nodus_cli.api.calls",
    "RemoteError": "nodus_cli.functions.outcome",
    "Client": "nodus_cli.api.client",
    "Executed": "nodus_cli.api.client",
    "GpuSample": "nodus_cli.records.gpu_samples",
    "MAX_GPU_SAMPLES": "nodus_cli.records.gpu_samples",
    "GroupSpend": "nodus_cli.run.spending",
    "ItemResult": "nodus_cli.api.runs",
    "LogLine": "nodus_cli.records.logs",
    "LogView": "nodus_cli.api.runs",
    "PeriodSpend": "nodus_cli.run.spending",
    "Prepared": "nodus_cli.api.session",
    "Progress": "nodus_cli.run.sink",
    "Report": "nodus_cli.run.spending",
    "Requirements": "nodus_cli.api.arguments",
    "Run": "nodus_cli.api.runs",
    "RunResult": "nodus_cli.api.runs",
    "RunStatus": "nodus_cli.records.model",
    "Sink": "nodus_cli.run.sink",
    "StageResult": "nodus_cli.api.runs",
    "StageStatus": "nodus_cli.records.model",
    "StopResult": "nodus_cli.run.reconcile",
    "Stopped": "nodus_cli.run.reconcile",
    "Stream": "nodus_cli.records.logs",
    "target_names": "nodus_cli.api.targets",
}


__getattr__, __dir__ = exports(__name__, _WHERE)
