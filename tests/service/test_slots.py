"""The places of admissions in progress and the bytes of body they hold (service/slots.py)."""

from __future__ import annotations

import pytest

from attachstore.config import Admission, Config, Tenant
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
    with s.take(), s.take(), pytest.raises(ServerBusy), s.take(source="tool"):
        pass
    with s.take() as one, s.take() as two:  # at the edge, before the body says what source it is
        one.hold(100)
        with pytest.raises(ServerBusy):
            two.hold(1)

    def busy(source: str) -> float | None:
        labels = {"source": source, "result": "SERVER_BUSY"}
        return s.metrics.registry.get_sample_value("attachstore_admissions_total", labels)

    assert (busy("tool"), busy("")) == (1, 1)


def tenant_slots(places: int = 4, budget: int = 100, tenants: int = 2, per_tenant: int = 0) -> Slots:
    config = Config(
        admission=Admission(
            max_concurrent=places, max_buffered_bytes=budget, max_concurrent_per_tenant=per_tenant
        ),
        tenants=[Tenant(name=f"t{i}", token_sha256=f"{i:064x}") for i in range(tenants)],
    )
    return Slots(config, Metrics())


def test_one_tenant_holds_at_most_its_share_of_the_places_and_the_rest_stay_for_others() -> None:
    s = tenant_slots(places=4)  # two tenants: one may hold three of the four places
    with s.take("m"), s.take("m"), s.take("m"):
        with pytest.raises(ServerBusy, match="3 admissions of this tenant"), s.take("m"):
            pass
        with s.take("a"):
            assert s.taken == 4
    with s.take("m"), s.take("m"), s.take("m"):  # the places it left are its own again
        pass
    assert tenant_slots(places=4, tenants=1).tenant_places == 4  # one tenant (or open mode): all of them
    assert tenant_slots(places=4, per_tenant=1).tenant_places == 1


def test_one_tenant_holds_at_most_its_share_of_the_bytes_and_alone_may_pass_it() -> None:
    s = tenant_slots(places=4, budget=100)  # a tenant's share: 75 bytes
    with s.take("m") as one, s.take("m") as two:
        one.hold(90)  # its only body so far: a whole body, whatever the share
        with pytest.raises(ServerBusy, match="this tenant's other requests in progress hold 90 bytes"):
            two.hold(1)
        with s.body("a") as other:
            other.hold(10)  # another tenant still has room
            assert (s.held, other.held) == (100, 10)
    assert s.held == 0


def test_a_body_without_a_place_counts_against_the_bytes_but_takes_no_place() -> None:
    s = slots(places=1, budget=100)
    with s.body() as render, s.take() as admission:
        render.hold(80)
        assert s.taken == 1
        with pytest.raises(ServerBusy, match="hold 80 bytes"):
            admission.hold(30)
    assert (s.taken, s.held) == (0, 0)
