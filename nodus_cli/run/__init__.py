"""Running: the policy that every target shares.

:mod:`.launcher` checks a run and records it, then drives it here or starts a
background supervisor; :mod:`.driver` is the one run loop (stages, fan-out, retries,
budget, signals, records) over the :class:`~nodus_cli.targets.base.Target` interface,
with its mechanisms beside it (:mod:`.events`, :mod:`.budget`, :mod:`.signals`,
:mod:`.stage`, :mod:`.recorder`, :mod:`.sink`);
:mod:`.reconcile` notices runs whose supervisor died and cleans up after them;
:mod:`.limits` and :mod:`.spending` are the spending limits across runs and what has
been spent. Targets never import this package: they are handed a context.
"""
