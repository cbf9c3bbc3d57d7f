"""The tools a run's solution plans may name: the offline ones, and the model tools whose weights the user
gives (`--tool_weights detect=DIR`)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from fastmmeval.errors import ConfigError
from fastmmeval.evolve import model_tools
from fastmmeval.evolve.tools import PIXEL_TOOLS, Lazy, ToolBox, ocr_tool, tags_tool


def default_tools(weights: Mapping[str, Path] | None = None) -> ToolBox:
    """The offline tools (OCR, ImageNet tags, colours, counting, geometry, image info; their models load on
    first use), plus the model tools `weights` names a local folder for (detect, depth)."""
    from fastmmeval.models.socratic.ocr import TextReader
    from fastmmeval.models.socratic.vision_tags import ImageTagger

    reader, tagger = Lazy(TextReader), Lazy(ImageTagger)
    tools = [ocr_tool(reader), tags_tool(tagger), *PIXEL_TOOLS]
    given = dict(weights or {})
    if unknown := sorted(set(given) - set(model_tools.WEIGHTED)):
        raise ConfigError(f"--tool_weights: no tool named {', '.join(map(repr, unknown))} takes weights "
                          f"(those that do: {', '.join(model_tools.WEIGHTED)})")
    tools += [model_tools.weighted_tool(name, Path(folder)) for name, folder in given.items()]
    return ToolBox(tools, {name: model_tools.weights_hint(name) for name in model_tools.WEIGHTED if name not in given})
