"""Request assembly: refs to provider-ready payloads (SPEC section 10).

Hosts that embed the store call `render(store, RenderRequest(...))`; the daemon serves it at POST /v1/render.
"""

from .assemble import Rendered, Summary, render
from .neutral import ImageBlock, MessageIn, RenderRequest, TextBlock, ToolCallIn

__all__ = [
    "ImageBlock",
    "MessageIn",
    "RenderRequest",
    "Rendered",
    "Summary",
    "TextBlock",
    "ToolCallIn",
    "render",
]
