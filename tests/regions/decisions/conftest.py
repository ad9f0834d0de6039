"""Fixtures shared with the control-loop tests: a fresh hot state, plain HTTP, the loop world."""

from tests.regions.loop.conftest import (  # noqa: F401
    agent_api,
    agent_tokens,
    feed,
    fresh_hot_state,
    loop_world,
    plain_http,
    redis_store,
    set_all_down,
)
