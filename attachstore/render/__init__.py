"""Request assembly: refs to provider-ready payloads (SPEC section 10).

Also the face of hosts that embed the store (docs/render.md, "Embedding it in Python"): besides what the
daemon uses, they build `TextBlock`s and `ToolCallIn`s and read a `Summary`, so those stay exported.
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
