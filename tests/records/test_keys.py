"""What runtime measurements are keyed by: the workload fingerprint."""

from __future__ import annotations

import json

from records_support import TWO_STAGES, make_workload

from nodus_cli import records
from nodus_cli.workload import from_json


def test_the_fingerprint_ignores_money_and_place_but_not_what_runs() -> None:
    w = make_workload()
    limits = make_workload(
        TWO_STAGES.replace("budget = 5.0", "budget = 99.0").replace(
            "cpu = 4", 'cpu = 4\nlocation = "eu"\nmax_price_per_hour = 50.0'
        )
    )
    assert records.fingerprint(limits) == records.fingerprint(w)
    other_command = make_workload(TWO_STAGES.replace("echo", "echo -n", 1))
    assert records.fingerprint(other_command) != records.fingerprint(w)


def test_the_fingerprint_ignores_the_name_and_survives_a_round_trip() -> None:
    w = make_workload()
    renamed = make_workload(TWO_STAGES.replace('name = "rec"', 'name = "other"'))
    assert records.fingerprint(w) == records.fingerprint(renamed)
    again = from_json(json.loads(json.dumps(w.as_json())))
    assert again.as_json() == w.as_json()
    assert records.fingerprint(again) == records.fingerprint(w)
