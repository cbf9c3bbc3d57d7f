"""Exact prefill savings applied to a loaded transformers model: work whose result is never read
is skipped, and each saving is kept only after a check at load shows the outputs unchanged.

- `prune_vision_tower`: a LLaVA-style model reads the vision tower's hidden state at
  `vision_feature_layer` (an int, or a list of them), so the encoder layers after the deepest one
  read are never needed; they are dropped (as vLLM builds LLaVA's tower only up to that layer).
- `install_last_position_prefill` / `last_position_only`: in a generation prefill that keeps the
  logits of the last position only (`logits_to_keep=1`, left-padded rows), the final decoder
  layer's query projection, attention output projection and MLP matter at the last position only
  (its keys and values, which go into the cache, come from the key and value projections, which
  run on every position); inside `last_position_only` they run on that position alone (as
  llama.cpp does with `inp_out_ids`). Only the engine's prefill turns it on:
  log-likelihood scoring reads every position's logits.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import torch
from torch import nn

from fastmmeval.engine import probe
from fastmmeval.engine.tensors import cache_of

logger = logging.getLogger(__name__)

_ACTIVE: ContextVar[Any] = ContextVar("fastmmeval_last_position_active", default=None)
_FULL_LENGTH: ContextVar[int] = ContextVar("fastmmeval_last_position_length", default=0)
_HOOKS_ATTR = "_fastmmeval_last_position"
_UNPRUNED_ATTR = "_fastmmeval_unpruned_config"
_DESCRIBED = {"mlp": "MLP", "self_attn.o_proj": "attention output projection", "self_attn.q_proj": "query projection"}


# ----- vision tower ----------------------------------------------------------------------------


def prune_vision_tower(model: Any) -> int:
    """Drop the vision encoder layers after the deepest one whose hidden state the model reads
    (`config.vision_feature_layer`, an int or a list), and rewrite those indices as non-negative
    ones that select the same hidden states from the shorter tower. Kept only if the image features
    (`get_image_features(...).pooler_output`) of a random image are exactly equal with the full and
    the truncated tower; otherwise, or for a model without `vision_feature_layer` or an encoder
    whose layers cannot be found, the model is left untouched. Returns the number of layers dropped."""
    config = getattr(model, "config", None)
    selection = getattr(config, "vision_feature_layer", None)
    if isinstance(selection, bool) or not (isinstance(selection, int) or _all_ints(selection)):
        return 0
    tower = _vision_tower(model)
    vision_config = getattr(tower, "config", None)
    num_layers = getattr(vision_config, "num_hidden_layers", None)
    if tower is None or not isinstance(num_layers, int) or not hasattr(model, "get_image_features"):
        return 0
    found = _layer_list(tower, num_layers)
    if found is None:
        return 0
    parent, name, layers = found
    try:
        pixels = _random_pixels(tower, vision_config)
        with torch.inference_mode():
            num_states = len(tower(pixel_values=pixels, output_hidden_states=True).hidden_states)
            reference = _image_features(model, pixels)
    except Exception:  # a tower this check cannot drive: leave it whole
        return 0
    if num_states != num_layers + 1 or reference is None:
        return 0
    indices = [selection] if isinstance(selection, int) else list(selection)
    if any(not -num_states <= i < num_states for i in indices):
        return 0
    resolved = [i % num_states for i in indices]
    keep = max(resolved)  # hidden state k is the output of layer k - 1: layers [0, k) are needed
    if keep >= num_layers:
        return 0
    new_selection: int | list[int] = resolved[0] if isinstance(selection, int) else resolved
    parent._modules[name] = nn.ModuleList(list(layers)[:keep])
    config.vision_feature_layer = new_selection
    vision_config.num_hidden_layers = keep
    try:
        with torch.inference_mode():
            pruned = _image_features(model, pixels)
        equal = pruned is not None and len(pruned) == len(reference) and all(
            a.shape == b.shape and torch.equal(a, b) for a, b in zip(pruned, reference, strict=True))
    except Exception:
        equal = False
    if not equal:
        parent._modules[name] = layers
        config.vision_feature_layer = selection
        vision_config.num_hidden_layers = num_layers
        return 0
    unpruned = getattr(model, _UNPRUNED_ATTR, None) or {"vision_feature_layer": selection,
                                                         "vision_num_hidden_layers": num_layers}
    setattr(model, _UNPRUNED_ATTR, unpruned)
    return num_layers - keep


def unpruned_config_dict(model: Any) -> dict[str, Any]:
    """`model.config.to_dict()` as it was before `prune_vision_tower` rewrote it (pruning does not
    change outputs, so it must not change what a fingerprint of the config says)."""
    config = model.config.to_dict()
    unpruned = getattr(model, _UNPRUNED_ATTR, None)
    if unpruned:
        config["vision_feature_layer"] = unpruned["vision_feature_layer"]
        if isinstance(config.get("vision_config"), dict):
            config["vision_config"]["num_hidden_layers"] = unpruned["vision_num_hidden_layers"]
    return config


def _all_ints(value: Any) -> bool:
    return isinstance(value, list | tuple) and bool(value) and all(
        isinstance(v, int) and not isinstance(v, bool) for v in value)


def _vision_tower(model: Any) -> nn.Module | None:
    """The model's vision tower: `vision_tower` on the model or its inner `model`."""
    for owner in (model, getattr(model, "model", None)):
        tower = getattr(owner, "vision_tower", None)
        if isinstance(tower, nn.Module):
            return tower
    return None


def _layer_list(tower: nn.Module, num_layers: int) -> tuple[nn.Module, str, nn.ModuleList] | None:
    """(parent, attribute name, list) of the tower's encoder layers: the one ModuleList named
    `layers` (or `layer`) holding `num_layers` modules; None unless exactly one is found."""
    found = []
    for module in tower.modules():
        for name, child in module.named_children():
            if name in ("layers", "layer") and isinstance(child, nn.ModuleList) and len(child) == num_layers:
                found.append((module, name, child))
    return found[0] if len(found) == 1 else None


def _random_pixels(tower: nn.Module, vision_config: Any) -> torch.Tensor:
    """One seeded random image at the tower's input size, dtype and device."""
    size = vision_config.image_size
    height, width = (size, size) if isinstance(size, int) else tuple(size)
    channels = getattr(vision_config, "num_channels", 3)
    parameter = next(tower.parameters())
    generator = torch.Generator().manual_seed(0)
    pixels = torch.randn(1, channels, height, width, generator=generator)
    return pixels.to(device=parameter.device, dtype=parameter.dtype)


def _image_features(model: Any, pixels: torch.Tensor) -> list[torch.Tensor] | None:
    """What the model's forward puts in place of image tokens: `get_image_features`' pooler output."""
    out = model.get_image_features(pixel_values=pixels)
    features = getattr(out, "pooler_output", None) if not isinstance(out, torch.Tensor) else out
    if isinstance(features, torch.Tensor):
        return [features.clone()]
    if isinstance(features, list | tuple) and features and all(isinstance(f, torch.Tensor) for f in features):
        return [f.clone() for f in features]
    return None


# ----- final decoder layer on the last position ------------------------------------------------


class _LastPositionHooks:
    """Forward hooks on final decoder layer submodules (`self_attn.q_proj`, `self_attn.o_proj`,
    `mlp`): while this object is the active one (`last_position_only`), each runs on the last
    position of its [batch, length, dim] input and its output is broadcast back over `length` (the
    other positions are never read)."""

    def __init__(self, modules: dict[str, nn.Module]) -> None:
        self.names = sorted(modules)
        self.sliced = 0  # inputs cut to their last position so far
        self.handles = []
        for module in modules.values():
            self.handles.append(module.register_forward_pre_hook(self._pre))
            self.handles.append(module.register_forward_hook(self._post))

    def remove(self) -> None:
        """Take the hooks off their modules."""
        for handle in self.handles:
            handle.remove()
        self.handles = []

    def __deepcopy__(self, memo: dict[int, Any]) -> _LastPositionHooks:
        # A deep copy of the model keeps its hooks bound to this same (stateless) object.
        return self

    def _pre(self, module: nn.Module, args: tuple[Any, ...]) -> tuple[Any, ...] | None:
        if _ACTIVE.get() is not self or not args:
            return None
        x = args[0]
        if not isinstance(x, torch.Tensor) or x.dim() != 3 or x.shape[1] <= 1:
            return None
        _FULL_LENGTH.set(x.shape[1])
        self.sliced += 1
        return (x[:, -1:], *args[1:])

    def _post(self, module: nn.Module, args: tuple[Any, ...], output: Any) -> torch.Tensor | None:
        length = _FULL_LENGTH.get()
        if _ACTIVE.get() is not self or not length:
            return None
        _FULL_LENGTH.set(0)
        if not isinstance(output, torch.Tensor) or output.dim() != 3 or output.shape[1] != 1:
            raise RuntimeError(f"{type(module).__name__} on the last position gave {type(output).__name__} "
                               "rather than one [batch, 1, dim] tensor")
        return output.expand(-1, length, -1)


def decoder_layers(model: Any) -> nn.ModuleList | None:
    """The language model's decoder layers: `get_decoder().layers` (a plain causal LM, or the text
    model of a vision-language one), else `model.layers`."""
    decoder = None
    get_decoder = getattr(model, "get_decoder", None)
    if callable(get_decoder):
        try:
            decoder = get_decoder()
        except Exception:
            decoder = None
    for owner in (decoder, model):
        layers = getattr(owner, "layers", None)
        if isinstance(layers, nn.ModuleList) and len(layers) > 0:
            return layers
    return None


def install_last_position_prefill(model: Any, prompts: list[list[int]], pad_id: int) -> list[str]:
    """Hook the final decoder layer's `self_attn.q_proj`, `self_attn.o_proj` and `mlp` so that
    inside `last_position_only(model)` they run on the last position only (a query at any other
    position only feeds an attention output that the sliced `o_proj` never reads). Each is kept
    only if, on a probe prefill of `prompts` (plain text token ids, left-padded with `pad_id`), it
    takes one [batch, length, dim] tensor and returns one of the same batch and length; and then
    only if the hooked prefill ran each of them on the last position once, its last-position logits
    equal the plain one's within `probe.LOGITS_RTOL` (relative to the largest) and its KV cache is
    exactly equal.
    Returns the names of the hooked submodules (`["mlp", "self_attn.o_proj", "self_attn.q_proj"]`),
    empty when nothing was hooked. The query projection is hooked only together with `o_proj`."""
    remove_last_position_prefill(model)
    layers = decoder_layers(model)
    if layers is None or not prompts or not all(prompts):
        return []
    last = layers[-1]
    candidates: dict[str, nn.Module] = {}
    mlp = getattr(last, "mlp", None)
    attention = getattr(last, "self_attn", None)
    o_proj, q_proj = getattr(attention, "o_proj", None), getattr(attention, "q_proj", None)
    if isinstance(mlp, nn.Module):
        candidates["mlp"] = mlp
    if isinstance(o_proj, nn.Module):
        candidates["self_attn.o_proj"] = o_proj
        if isinstance(q_proj, nn.Module):
            candidates["self_attn.q_proj"] = q_proj
    if not candidates:
        return []
    inputs = probe.probe_inputs(model, prompts, pad_id)
    shapes_ok = {name: True for name in candidates}

    def check_shapes(name: str) -> Any:
        def hook(module: nn.Module, args: tuple[Any, ...], output: Any) -> None:
            x = args[0] if args else None
            shapes_ok[name] = shapes_ok[name] and (
                isinstance(x, torch.Tensor) and x.dim() == 3 and isinstance(output, torch.Tensor)
                and output.dim() == 3 and output.shape[:2] == x.shape[:2])
        return hook

    probes = [module.register_forward_hook(check_shapes(name)) for name, module in candidates.items()]
    try:
        with torch.inference_mode():
            reference = model(**inputs, use_cache=True, logits_to_keep=1)
    except Exception:
        return []
    finally:
        for handle in probes:
            handle.remove()
    chosen = {name: module for name, module in candidates.items() if shapes_ok[name]}
    if "self_attn.o_proj" not in chosen:  # other positions' queries feed outputs that are read
        chosen.pop("self_attn.q_proj", None)
    if not chosen:
        return []
    hooks = _LastPositionHooks(chosen)
    setattr(model, _HOOKS_ATTR, hooks)
    try:
        with torch.inference_mode(), last_position_only(model):
            hooked = model(**inputs, use_cache=True, logits_to_keep=1)
        equal = hooks.sliced == len(chosen) and _same_prefill(reference, hooked)
    except Exception:
        equal = False
    if not equal:
        remove_last_position_prefill(model)
        return []
    return hooks.names


def remove_last_position_prefill(model: Any) -> None:
    """Undo `install_last_position_prefill` (no-op when it was not installed)."""
    hooks = getattr(model, _HOOKS_ATTR, None)
    if isinstance(hooks, _LastPositionHooks):
        hooks.remove()
    if hasattr(model, _HOOKS_ATTR):
        delattr(model, _HOOKS_ATTR)


@contextmanager
def last_position_only(model: Any, enabled: bool = True) -> Iterator[None]:
    """Within this context (in this thread or task), the model's hooked final-layer submodules
    (see `install_last_position_prefill`) run on the last position only, so every output position
    but the last is wrong: use it only around a prefill that keeps the last position's logits
    (`logits_to_keep=1`) of left-padded rows. A no-op when not `enabled` or for a model without
    the hooks."""
    hooks = getattr(model, _HOOKS_ATTR, None)
    if not enabled or not isinstance(hooks, _LastPositionHooks):
        yield
        return
    token = _ACTIVE.set(hooks)
    try:
        yield
    finally:
        _ACTIVE.reset(token)
        _FULL_LENGTH.set(0)


def _same_prefill(reference: Any, hooked: Any) -> bool:
    """Whether two prefill outputs agree: last-position logits within `probe.LOGITS_RTOL` of the
    largest logit, and every cache layer's keys and values exactly equal."""
    a, b = reference.logits[:, -1].float(), hooked.logits[:, -1].float()
    if a.shape != b.shape or not torch.isfinite(b).all():
        return False
    if (a - b).abs().max() > probe.LOGITS_RTOL * a.abs().max():
        return False
    caches = [cache_of(reference), cache_of(hooked)]
    layers = [getattr(c, "layers", None) for c in caches]
    if layers[0] is None or layers[1] is None or len(layers[0]) != len(layers[1]):
        return False
    for x, y in zip(*layers, strict=True):
        for name in ("keys", "values"):
            s, t = getattr(x, name, None), getattr(y, name, None)
            if not (isinstance(s, torch.Tensor) and isinstance(t, torch.Tensor) and s.shape == t.shape
                    and torch.equal(s, t)):
                return False
    return True


# ----- both ------------------------------------------------------------------------------------


def prune_for_inference(model: Any, prompts: list[list[int]], pad_id: int) -> tuple[int, list[str]]:
    """Apply both savings to a freshly loaded model (each only where its load-time check passes)
    and log what was done: (vision layers dropped, final-layer submodules run on the last position
    in generation prefills)."""
    tower = _vision_tower(model)
    total = getattr(getattr(tower, "config", None), "num_hidden_layers", None)
    dropped = prune_vision_tower(model)
    hooked = install_last_position_prefill(model, prompts, pad_id)
    done = []
    if dropped:
        done.append(f"dropped {dropped} of {total} vision layers (their output is never read)")
    if hooked:
        names = ", ".join(_DESCRIBED[n] for n in hooked)
        done.append(f"final decoder layer's {names} on the last position in generation prefills")
    logger.info("pruning %s: %s", type(model).__name__, "; ".join(done) if done else "nothing to prune")
    return dropped, hooked
