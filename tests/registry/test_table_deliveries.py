"""Webhook deliveries in the registry, on SQLite and PostgreSQL (the ``registry`` fixture): a try is claimed by one
sender only — however stale the read it claims from, never before it is due, never while another's claim holds,
again once that claim ran out — and its outcome is stored only while the claim is still its sender's, so a sender
paused past its claim overwrites nothing of the try another replica made since."""

from __future__ import annotations

from service.registry import Delivery, Registry

from _tables import ACME, together


def _queued(registry: Registry, n: int = 1, *, due: float = 10.0) -> list[Delivery]:
    registry.runs.create(id=ACME[0], tenant="acme", ask="a", options={}, repo="")
    for i in range(n):
        assert registry.deliveries.add(Delivery(id=f"d{i}", tenant="acme", run=ACME[0], event="run.ended",
                                                body=b"{}", created=1.0 + i, next_try=due))
    return registry.deliveries.list(oldest_first=True)


def _row(registry: Registry, delivery_id: str) -> Delivery:
    return next(d for d in registry.deliveries.list() if d.id == delivery_id)


def test_of_two_stale_reads_of_one_delivery_only_the_first_claim_wins(registry: Registry):
    first, = _queued(registry)
    second = registry.deliveries.list()[0]  # another replica read the same row before the first claimed it
    assert registry.deliveries.claim(first, now=11.0, until=41.0)
    assert not registry.deliveries.claim(second, now=12.0, until=42.0), "its read is stale: the try is the first's"
    assert _row(registry, "d0").next_try == 41.0


def test_two_replicas_claiming_one_delivery_at_once_claim_it_once(registry: Registry):
    for d in _queued(registry, 6):
        won = together(2, lambda i, d=d: registry.deliveries.claim(d, now=11.0 + i, until=41.0 + i))
        assert sorted(won) == [False, True], (d.id, won)  # type: ignore[type-var]


def test_a_claim_before_the_delivery_is_due_loses(registry: Registry):
    d, = _queued(registry, due=10.0)
    assert not registry.deliveries.claim(d, now=9.5, until=39.5)
    assert _row(registry, "d0").next_try == 10.0, "the row is left as it was"
    assert registry.deliveries.claim(d, now=10.0, until=40.0), "due at next_try itself"


def test_a_claim_loses_while_anothers_holds_and_wins_once_it_ran_out(registry: Registry):
    d, = _queued(registry)
    assert registry.deliveries.claim(d, now=11.0, until=41.0)
    fresh = _row(registry, "d0")  # read after the claim: pending, next try at the claim's end
    assert (fresh.state, fresh.attempts, fresh.next_try) == ("pending", 0, 41.0)
    assert not registry.deliveries.claim(fresh, now=40.9, until=70.9), "the first claim holds until 41"
    assert registry.deliveries.claim(fresh, now=41.5, until=71.5), "its sender died mid-try: the try is due again"
    assert not registry.deliveries.claim(fresh, now=41.6, until=71.6), "and claimed once again"


def test_a_senders_outcome_is_stored_only_while_its_claim_is_the_deliverys(registry: Registry):
    """A replica paused past its claim wakes with its try's outcome: another replica claimed and tried it since."""
    paused, = _queued(registry)
    other = registry.deliveries.list()[0]
    assert registry.deliveries.claim(paused, now=11.0, until=41.0)
    fresh = _row(registry, "d0")
    assert registry.deliveries.claim(fresh, now=42.0, until=72.0)
    other.attempts, other.state, other.last_status, other.ended, other.next_try = 1, "delivered", 200, 43.0, None
    assert registry.deliveries.tried(other, claim=72.0)
    paused.attempts, paused.last_status, paused.last_error, paused.next_try = 1, None, "no answer", 80.0
    assert not registry.deliveries.tried(paused, claim=41.0), "its claim is gone: nothing of it is stored"
    assert _row(registry, "d0") == other
    assert not registry.deliveries.tried(other, claim=72.0), "an outcome is stored once"


def test_an_outcome_stored_after_the_claim_ran_out_unclaimed_is_kept_and_ends_the_claim(
        registry: Registry):
    d, = _queued(registry)
    assert registry.deliveries.claim(d, now=11.0, until=41.0)
    d.attempts, d.last_status, d.last_error, d.next_try = 1, 503, "the webhook answered 503", 60.0
    assert registry.deliveries.tried(d, claim=41.0), "no one claimed it since: the try was this sender's alone"
    assert _row(registry, "d0") == d
    stale = Delivery(**{**{f: getattr(d, f) for f in d.__struct_fields__}, "attempts": 0})
    assert not registry.deliveries.claim(stale, now=61.0, until=91.0), "a read from before that try is stale"
    assert registry.deliveries.claim(d, now=61.0, until=91.0)


def test_a_delivery_is_added_once_and_its_tries_are_kept(registry: Registry):
    d = Delivery(id="d1", tenant="acme", run=ACME[0], event="run.finished", body=b"\x00{\"a\": 1}\xff",
                 created=10.0, next_try=10.0)
    registry.runs.create(id=ACME[0], tenant="acme", ask="a", options={}, repo="")
    assert registry.deliveries.add(d) and not registry.deliveries.add(d), "an event read twice is sent once"
    registry.deliveries.add(Delivery(id="d2", tenant="acme", run=ACME[0], event="run.started", body=b"{}",
                                     created=11.0))
    assert registry.deliveries.claim(d, now=10.0, until=40.0)
    d.state, d.attempts, d.last_status, d.last_error, d.ended, d.next_try = "delivered", 1, 204, None, 12.0, None
    assert registry.deliveries.tried(d, claim=40.0)
    assert [x.id for x in registry.deliveries.list(oldest_first=True)] == ["d1", "d2"]
    assert [x.id for x in registry.deliveries.list()] == ["d2", "d1"]
    assert registry.deliveries.list(state="delivered") == [d] and registry.deliveries.list(tenant="beta") == []
    assert [x.id for x in registry.deliveries.list(state="pending", limit=5)] == ["d2"]
