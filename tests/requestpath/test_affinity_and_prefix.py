"""Session affinity (consistent hashing with bounded load) and prefix-cache affinity."""

from __future__ import annotations

from collections.abc import Callable

from tests.gateway.world import US_IP
from tests.requestpath.conftest import ask, plan
from trafficmgr.requestpath import Outcome
from trafficmgr.requestpath.affinity import Ring, bounded_choice


def test_a_session_keeps_its_endpoint(make_core: Callable) -> None:
    core, _ = make_core()
    seen: dict[str, set[str]] = {}
    for i in range(60):
        session = f"s{i % 6}"
        got = plan(core.decide(ask(client_ip=US_IP, session_id=session)))
        seen.setdefault(session, set()).add(got.targets[0].name)
        assert "session affinity" in got.reason
        core.finished(got.handle, None, Outcome.OK)
    assert all(len(names) == 1 for names in seen.values())
    assert len({n for names in seen.values() for n in names}) == 2  # spread over both


def test_affinity_yields_to_ejection_and_to_drain(make_core: Callable) -> None:
    core, _ = make_core()
    home = plan(core.decide(ask(client_ip=US_IP, session_id="alice")))
    core.finished(home.handle, None, Outcome.OK)
    core.drain(home.targets[0].name)
    moved = plan(core.decide(ask(client_ip=US_IP, session_id="alice")))
    assert moved.targets[0].name != home.targets[0].name
    assert "ring neighbour" in moved.reason
    core.finished(moved.handle, None, Outcome.OK)


def test_bounded_load_sends_overflow_to_the_ring_neighbour() -> None:
    ring = Ring(["a", "b", "c", "d"])
    own = next(ring.walk("k"))
    load = {"a": 0, "b": 0, "c": 0, "d": 0}
    placed = []
    for _ in range(20):
        name, _ = bounded_choice(ring, "k", list(load), load.__getitem__, 1.25)  # type: ignore[misc]
        load[name] += 1
        placed.append(name)
    assert placed[0] == own
    assert max(load.values()) <= 7  # ceil(1.25 x 21 / 4)
    assert len(set(placed)) > 1


def test_the_ring_is_the_same_in_every_process() -> None:
    assert next(Ring(["x", "y", "z"]).walk("session-1")) == next(
        Ring(["z", "y", "x"]).walk("session-1")
    )


def test_a_repeated_long_prompt_returns_to_the_endpoint_holding_its_prefix(
    make_core: Callable,
) -> None:
    core, _ = make_core()
    prompt = " ".join(f"w{i}" for i in range(3000))
    first = plan(core.decide(ask(client_ip=US_IP, prompt=prompt, max_output_tokens=8)))
    core.finished(first.handle, None, Outcome.OK)
    for _ in range(5):  # load the other endpoint's rival with short requests
        filler = plan(core.decide(ask(client_ip=US_IP, prompt="short one")))
        core.finished(filler.handle, None, Outcome.OK)
    again = plan(core.decide(ask(client_ip=US_IP, prompt=prompt + " more", max_output_tokens=8)))
    assert again.targets[0].name == first.targets[0].name
    assert "cached" in again.reason
