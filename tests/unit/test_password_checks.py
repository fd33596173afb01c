"""The password checks' pool: bounded queues, addresses served in turn, callers that went away
dropped unrun."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable

import pytest

from kcoord.broker.security.sasl.password_checks import ChecksBusy, PasswordChecks


class _Recorder:
    """Checks that record the order they ran in; the first one holds the (single) thread until
    released, so that the others queue up behind it."""

    def __init__(self) -> None:
        self.ran: list[str] = []
        self.release = threading.Event()

    def check(self, name: str, hold: bool = False) -> Callable[[], bool]:
        def run() -> bool:
            if hold:
                self.release.wait(10)
            self.ran.append(name)
            return name.endswith("ok")

        return run


async def _started() -> None:
    """Let the tasks just made queue their checks."""
    for _ in range(3):
        await asyncio.sleep(0)


def test_addresses_take_turns_and_the_answers_come_back() -> None:
    async def main() -> None:
        checks = PasswordChecks(workers=1, per_address=10, waiting=100)
        r = _Recorder()
        first = asyncio.ensure_future(checks.check("a", r.check("a0", hold=True)))
        flood = [asyncio.ensure_future(checks.check("a", r.check(f"a{i}"))) for i in range(1, 6)]
        other = asyncio.ensure_future(checks.check("b", r.check("b-ok")))
        await _started()
        assert checks.waiting == 6
        r.release.set()
        assert await other is True
        assert await asyncio.gather(first, *flood) == [False] * 6
        # The flooding address's first waiting check, then the other address's, then the rest.
        assert r.ran == ["a0", "a1", "b-ok", "a2", "a3", "a4", "a5"]
        checks.close()

    asyncio.run(main())


@pytest.mark.parametrize(("per_address", "waiting"), [(3, 100), (100, 3)])
def test_too_many_waiting_checks_are_refused_at_once(per_address: int, waiting: int) -> None:
    async def main() -> None:
        checks = PasswordChecks(workers=1, per_address=per_address, waiting=waiting)
        r = _Recorder()
        running = asyncio.ensure_future(checks.check("a", r.check("a0", hold=True)))
        queued = [asyncio.ensure_future(checks.check("a", r.check(f"a{i}"))) for i in range(3)]
        await _started()
        with pytest.raises(ChecksBusy):
            await checks.check("a", r.check("a-too-many"))
        if per_address < waiting:  # another address still has room
            queued.append(asyncio.ensure_future(checks.check("b", r.check("b-ok"))))
            await _started()
            assert checks.waiting == 4
        r.release.set()
        await asyncio.gather(running, *queued)
        assert "a-too-many" not in r.ran
        checks.close()

    asyncio.run(main())


def test_a_check_whose_caller_went_away_is_not_run() -> None:
    async def main() -> None:
        checks = PasswordChecks(workers=1)
        r = _Recorder()
        running = asyncio.ensure_future(checks.check("a", r.check("a0", hold=True)))
        gone = asyncio.ensure_future(checks.check("a", r.check("a-gone")))
        await _started()
        gone.cancel()
        r.release.set()
        await running
        assert await checks.check("a", r.check("a-ok")) is True
        assert r.ran == ["a0", "a-ok"]
        checks.close()

    asyncio.run(main())
