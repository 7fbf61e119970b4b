"""The fault suite's honesty rule (e2e/faults/invariants.py) on readings made up here."""

from __future__ import annotations

from e2e.faults.invariants import Sample, honesty_problems


def _ready(at: float, *unready: str) -> Sample:
    return Sample(at, readable=True, ready="True", unready=unready)


def test_a_ready_xr_with_a_resource_unready_in_one_reading_only_is_not_flagged() -> None:
    # The resource turned unready between the reading's two reads; the next reading has
    # Crossplane's verdict on it.
    samples = [_ready(1.0), _ready(2.0, "irsa-bucket"), Sample(3.0, readable=True, ready="False", ready_message="Unready resources: irsa-bucket")]
    assert honesty_problems(samples, ready_from=0.0) == []


def test_a_ready_xr_with_a_resource_unready_in_two_readings_in_a_row_is_flagged() -> None:
    samples = [_ready(1.0), _ready(2.0, "irsa-bucket"), _ready(3.0, "irsa-bucket", "ebs-role")]
    assert honesty_problems(samples, ready_from=0.0) == ["3.0: Ready while irsa-bucket not ready (since 2.0)"]


def test_ready_before_it_may_be_and_silence_while_not_ready_are_flagged() -> None:
    samples = [_ready(1.0), Sample(2.0, readable=True, ready="False")]
    assert honesty_problems(samples, ready_from=5.0) == [
        "1.0: Ready while a part was down or the XR was not done",
        "2.0: not Ready (Ready='False') and said nothing of why",
    ]
    assert honesty_problems([Sample(1.0, readable=False)], ready_from=None) == ["no reading of the XR at all during the fault"]
