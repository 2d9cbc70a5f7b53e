"""The places of admissions in progress and the bytes of body they hold (service/slots.py)."""

from __future__ import annotations

import pytest

from attachstore.config import Admission, Config
from attachstore.errors import ServerBusy
from attachstore.metrics import Metrics
from attachstore.service.slots import Slots


def slots(places: int = 2, budget: int = 100) -> Slots:
    config = Config(admission=Admission(max_concurrent=places, max_buffered_bytes=budget))
    return Slots(config, Metrics())


def test_past_the_places_the_next_is_busy_and_a_released_place_is_free_again() -> None:
    s = slots(places=2)
    with s.take(), s.take(), pytest.raises(ServerBusy, match="2 admissions are in progress"), s.take():
        pass
    with s.take():
        assert s.taken == 1
    assert s.taken == 0


def test_the_budget_is_shared_and_one_admission_alone_may_pass_it() -> None:
    s = slots(budget=100)
    with s.take() as first:
        first.hold(150)  # alone: a whole body, whatever the budget
        first.hold(120)  # a body only grows; telling it less changes nothing
        assert s.held == 150
        with s.take() as second:
            with pytest.raises(ServerBusy, match="hold 150 bytes"):
                second.hold(1)
            assert s.held == 150
    assert s.held == 0
    with s.take() as first, s.take() as second:
        first.hold(60)
        second.hold(40)
        with pytest.raises(ServerBusy):
            second.hold(41)
        assert (s.held, second.held) == (100, 40)
    assert s.held == 0


def test_busy_answers_are_counted_by_source() -> None:
    s = slots(places=2)
    with s.take(), s.take(), pytest.raises(ServerBusy), s.take("tool"):
        pass
    with s.take() as one, s.take() as two:  # at the edge, before the body says what source it is
        one.hold(100)
        with pytest.raises(ServerBusy):
            two.hold(1)

    def busy(source: str) -> float | None:
        labels = {"source": source, "result": "SERVER_BUSY"}
        return s.metrics.registry.get_sample_value("attachstore_admissions_total", labels)

    assert (busy("tool"), busy("")) == (1, 1)
