"""Planning: inventory x requirements -> ranked configurations, with the reasons for
every exclusion (:mod:`.planner`, composing :mod:`.filters`, :mod:`.ranking`,
:mod:`.fanout` and :mod:`.exclusions`; what it returns is :mod:`.plan`), and the
inventories a plan is made against (:mod:`.inventory`).

Planning is pure: it is handed the offers and the runtime history (measurements from
the run records, as a lookup function) and never opens the run store or a target
itself. Above it: the records (which measure runtimes), the targets (which offer what
they hold now), the run driver and the API.
"""
