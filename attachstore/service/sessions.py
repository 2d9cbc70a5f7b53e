"""Sessions and holds (SPEC section 7), the service side; sessions are scoped to a tenant."""

from __future__ import annotations

import re
import time
from collections.abc import Sequence

from ..config import Config
from ..errors import InvalidRequest, SessionNotFound
from ..index import Hold, Index, SessionKey, SessionRow
from ..refs import Ref
from ..vocabulary import SESSION_ID_PATTERN
from . import policy
from .policy import RouteTable

_SESSION_ID = re.compile(SESSION_ID_PATTERN)
MAX_HOLDS_PER_REQUEST = 1000


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

    async def create(self, key: SessionKey, route: str | None) -> tuple[SessionRow, bool]:
        """The same request again is a no-op (False); another route is a conflict."""
        check_session_id(key[1])
        return await self.index.create_session(key, route, time.time())

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
