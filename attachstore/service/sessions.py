"""Sessions and holds (SPEC section 7), the service side; sessions are scoped to a tenant."""

from __future__ import annotations

import re
import time
from collections.abc import Sequence

from ..config import Config
from ..errors import InvalidRequest, SessionNotFound
from ..index import Hold, Index, SessionKey, SessionRow
from ..refs import Ref
from ..vocabulary import MAX_SESSION_TTL, SESSION_ID_PATTERN
from . import policy
from .policy import RouteTable

_SESSION_ID = re.compile(SESSION_ID_PATTERN)
MAX_HOLDS_PER_REQUEST = 1000
# A render renews the session it names at most this often (seconds): a render only reads otherwise, and a
# conversation renders on every turn. A session with a lifetime may so expire up to this much early.
RENDER_RENEWAL = 60.0


def check_ttl(ttl: int | None) -> int | None:
    if ttl is not None and (isinstance(ttl, bool) or not 0 < ttl <= MAX_SESSION_TTL):
        raise InvalidRequest(
            f"ttl: not a lifetime: {ttl!r}",
            hint=f"a session's ttl is whole seconds, 1 to {MAX_SESSION_TTL} (10 years)",
        )
    return ttl


def check_session_id(text: str) -> str:
    if not _SESSION_ID.fullmatch(text):
        raise InvalidRequest(
            f"not a session id: {text[:140]!r}",
            hint="a session id is 1 to 128 characters of letters, digits and . _ : -, and not . or ..",
        )
    return text


class Sessions:
    def __init__(self, config: Config, index: Index, routes: RouteTable) -> None:
        self.config = config
        self.index = index
        self.routes = routes

    async def get(self, key: SessionKey) -> SessionRow:
        found = await self.index.get_session((key[0], check_session_id(key[1])))
        if found is None:
            raise SessionNotFound(f"no session {key[1]!r}", hint="create it with PUT /v1/sessions/{id}")
        return found

    async def create(
        self, key: SessionKey, route: str | None, ttl: int | None = None
    ) -> tuple[SessionRow, bool]:
        """The same request again is a no-op (False); another route is a conflict. A `ttl` (seconds) is the
        session's idle lifetime: given to an existing session, it replaces its own, renewed from now."""
        check_session_id(key[1])
        return await self.index.create_session(key, route, time.time(), check_ttl(ttl))

    async def named(self, key: SessionKey, now: float | None = None) -> SessionRow:
        """The session a render names: read, and renewed if it was last used more than `RENDER_RENEWAL`
        seconds ago (the only write a render makes)."""
        session = await self.get(key)
        at = time.time() if now is None else now
        if at - session.used_at >= RENDER_RENEWAL:
            await self.index.touch_session(key, at, at - RENDER_RENEWAL)
        return session

    async def expired(self, now: float | None = None) -> list[SessionRow]:
        """Every tenant's sessions whose lifetime has run out, without their holds."""
        return await self.index.expired_sessions(time.time() if now is None else now)

    async def release_expired(self, now: float | None = None) -> list[tuple[SessionRow, int]]:
        """Release them: each with the holds it released. One renewed meanwhile stays, and is left out."""
        at = time.time() if now is None else now
        released = []
        for session in await self.index.expired_sessions(at):
            holds = await self.index.release_expired((session.tenant, session.id), at)
            if holds is not None:
                released.append((session, holds))
        return released

    async def switch_route(self, key: SessionKey, route: str | None) -> SessionRow:
        check_session_id(key[1])

        def guard(session: SessionRow) -> None:
            policy.check_switch(self.routes, session.id, len(session.holds), route)

        return await self.index.set_route(key, route, guard)

    async def fork(self, key: SessionKey, new_id: str) -> SessionRow:
        check_session_id(key[1])
        return await self.index.fork(key, (key[0], check_session_id(new_id)), time.time())

    def guard_images(self, session: SessionRow) -> None:
        """Run under the index write lock before images are held."""
        policy.check_session(self.routes, session.id, session.route)

    async def hold(self, key: SessionKey, refs: Sequence[str]) -> SessionRow:
        check_session_id(key[1])
        if len(refs) > MAX_HOLDS_PER_REQUEST:
            raise InvalidRequest(f"refs: at most {MAX_HOLDS_PER_REQUEST} refs per request")
        parsed = list(dict.fromkeys(str(Ref.parse(r)) for r in refs))
        hold = Hold(key, self.guard_images, everything=self.config.is_open)
        return await self.index.add_holds(hold, parsed, time.time())

    async def delete(self, key: SessionKey) -> int:
        check_session_id(key[1])
        return await self.index.delete_session(key, time.time())
