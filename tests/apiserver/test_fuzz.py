"""The embedded API server fuzzed with malformed and hostile requests (issue 36, item 3).

Each example starts a server (``listen=False``, under ``MockClock``: waits cost no wall time),
sends 12 hostile requests through the memory transport (real HTTP/1.1 bytes parsed
by the server) and, after each, a well-formed create, get, list, patch and delete whose
answers are checked. A client's error must be a 4xx ``Status`` (see :func:`hostile.judge`),
nothing may crash the server or hang, and the well-formed requests keep being answered.
The wire-level cases are in ``test_fuzz_wire.py``; the volume run is ``bench/apiserver_fuzz.py``.
"""

from __future__ import annotations

import random

import httpx
import trio
import trio.testing
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from engine.apiserver import ApiServer

from .fuzzing import seed_objects, send, well_formed
from .hostile import hostile_request, judge

REQUESTS_PER_EXAMPLE = 12


async def _run(rnd: random.Random) -> list[str]:
    problems: list[str] = []
    async with ApiServer(seed=1, listen=False) as api:
        async with httpx.AsyncClient(transport=api.memory_transport(), base_url=api.url, timeout=None) as client:
            await seed_objects(client)
            for serial in range(REQUESTS_PER_EXAMPLE):
                request = hostile_request(rnd, huge_share=0.3)
                try:
                    status, body, ctype = await send(client, request, admin_token=None)
                except trio.TooSlowError:
                    problems.append(f"no answer within 60 s to {request}")
                    continue
                problem = judge(request, status, body, ctype, socket=False)
                if problem is not None:
                    problems.append(f"{problem}; request: {request}")
                problems += await well_formed(client, serial)
    return problems


@settings(derandomize=True, max_examples=20, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow], phases=[Phase.explicit, Phase.generate])
@given(st.integers(min_value=0, max_value=2**32))
def test_hostile_requests_are_answered_as_client_errors(seed: int) -> None:
    problems = trio.run(_run, random.Random(seed), clock=trio.testing.MockClock(autojump_threshold=0))
    assert not problems, "\n".join(problems)
