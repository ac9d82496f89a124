"""What a place a plan is made for can and cannot do, declared rather than asked by name.

The planner words some notes by what the place can do (a cluster gives each machine its
own work folder; a market of quotes runs nothing). A target declares its
:class:`Capabilities` as a class attribute; the catalog's are :data:`MARKET`. A new
target with a new limit adds a field here and a note in the planner, never an
``if target == ...``.
"""

from __future__ import annotations

from nodus_cli.structs import struct

__all__ = ["MARKET", "ONE_MACHINE", "Capabilities"]


@struct(frozen=True)
class Capabilities:
    """What a place a plan is made for can and cannot do, as far as the plan must say it.

    A target declares its own (``Target.capabilities``); the defaults are those of one
    machine that runs what it is given.
    """

    #: It runs workloads; False for a market of quotes (the catalog), whose plans point
    #: at ``nodus gpus`` when no offer has the GPU asked for.
    runs: bool = True
    #: Stages placed on different machines still see one ``NODUS_WORK_DIR``; False where
    #: each machine has its own (a cluster), which the plan must say.
    shared_work_dir: bool = True


#: The catalog: quotes, not a place to run.
MARKET = Capabilities(runs=False)
#: One machine (the local engine, or a place that behaves like one).
ONE_MACHINE = Capabilities()
