"""The workspace roots read_image may read under (docs/mcp.md, "Workspace roots"). The client's roots are
asked as its protocol version allows, never through the SDK's deprecated helpers (they warn)."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import mcp.types as types
from mcp.server import ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp.shared.message import ServerMessageMetadata
from mcp_types.version import is_version_at_least

from .files import file_roots

log = logging.getLogger(__name__)

MODERN = "2026-07-28"
ROOTS_ASKED = "roots"  # the key of the input request, and of its answer on the retried call
ROOTS_TIMEOUT = 10.0  # seconds a client has to answer roots/list


def fallback(env: Mapping[str, str]) -> list[Path]:
    project = env.get("CLAUDE_PROJECT_DIR")
    if project and Path(project).is_dir():
        return [Path(os.path.realpath(project))]
    return [Path(os.path.realpath(os.getcwd()))]


class Roots:
    """The roots of one server process. `fixed` (from `--workspace`) wins; otherwise the client's roots are
    asked for, and kept until the client says they changed when `cache` is true (stdio: one client per
    process), or asked again on every call (HTTP, where several clients share the process)."""

    def __init__(
        self,
        fixed: Sequence[Path],
        cache: bool,
        env: Mapping[str, str] | None = None,
        confined: bool = False,
    ) -> None:
        self.fixed = list(fixed)
        self.cache = cache
        self.default = fallback(os.environ if env is None else env)
        # Over HTTP any local process may connect and answer roots/list: its roots then only narrow the
        # workspace the server was started with, never widen it.
        self.confined = confined
        self._known: list[Path] | None = None

    def changed(self) -> None:
        self._known = None

    async def of(
        self, ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> list[Path] | types.InputRequiredResult:
        if self.fixed:
            return self.fixed
        capabilities = ctx.session.client_capabilities
        if capabilities is None or capabilities.roots is None:
            return self.default
        if is_version_at_least(ctx.protocol_version, MODERN):
            answer = (params.input_responses or {}).get(ROOTS_ASKED)
            if isinstance(answer, types.ListRootsResult):
                return self._from(answer)
            return types.InputRequiredResult(
                input_requests={ROOTS_ASKED: types.ListRootsRequest()}, request_state="roots"
            )
        if self.cache and self._known is not None:
            return self._known
        try:
            answer = await ctx.session.send_request(
                types.ListRootsRequest(),
                types.ListRootsResult,
                request_read_timeout_seconds=ROOTS_TIMEOUT,
                # On the tool call's own stream: over HTTP a client need not keep the standalone one open.
                metadata=ServerMessageMetadata(related_request_id=ctx.request_id),
            )
        except (MCPError, TimeoutError, ValueError) as e:  # ValueError: pydantic's, for a malformed answer
            log.warning("the client did not list its roots (%s); using %s", e, self.default[0])
            return self.default
        roots = self._from(answer)
        if self.cache:
            self._known = roots
        return roots

    def _from(self, answer: types.ListRootsResult) -> list[Path]:
        roots = file_roots([str(root.uri) for root in answer.roots])
        if self.confined:
            roots = narrowed(roots, self.default)
        return roots or self.default


def narrowed(roots: Sequence[Path], workspace: Sequence[Path]) -> list[Path]:
    """What of the client's roots lies in the workspace: a root inside it, or the workspace itself where a
    root holds it (`file:///` holds everything). A root beside it gives nothing."""
    kept: list[Path] = []
    for root in roots:
        for w in workspace:
            inner = root if root.is_relative_to(w) else w if w.is_relative_to(root) else None
            if inner is not None and inner not in kept:
                kept.append(inner)
    if roots and not kept:
        log.warning("the client's roots are all outside the workspace; using %s", workspace[0])
    return kept
