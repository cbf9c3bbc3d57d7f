"""The evolve tools and solution plans (`fastmmeval.evolve.tools`, `fastmmeval.evolve.solution`): what each
tool reads off the annotated drawn scenes against their truth, the plan's check (every reason a plan is
refused), "@k" chaining, the plan schema filled by a backend, and the weighted tools (detect, depth) over
tiny random-weight models saved as a user would give them."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from evolve_images import COLOURS, SHAPES, SIZE, drawn_scene
from PIL import Image

from fastmmeval.errors import ConfigError
from fastmmeval.evolve.records import Step
from fastmmeval.evolve.solution import PlanError, check_plan, plan_schema, run_plan
from fastmmeval.evolve.toolbox import default_tools
from fastmmeval.evolve.tools import Param, Tool, ToolBox
from fastmmeval.models import MODELS
from fastmmeval.models.base import Model
from fastmmeval.models.schema_subset import check_schema
from fastmmeval.models.structured import answer_structured
from fastmmeval.protocol import GenerationSettings, Message, Request, Response, TextPart
from fastmmeval.testing.echo_model import NoArgs

SCENES = range(20)


@pytest.fixture(scope="module")
def tools() -> ToolBox:
    """The offline tools; the OCR reader and the tagger load on first use, once for the module."""
    return default_tools()


def steps(*plan: tuple[str, dict[str, str]]) -> list[dict[str, Any]]:
    """A plan as a generator writes it: inputs as name/value pairs."""
    return [{"tool": tool, "inputs": [{"name": k, "value": v} for k, v in inputs.items()], "purpose": ""}
            for tool, inputs in plan]


def run(tools: ToolBox, image: Image.Image, *plan: tuple[str, dict[str, str]]) -> list[str]:
    return run_plan(check_plan(steps(*plan), tools), image, tools)


def box_region(box: list[int]) -> str:
    """An annotation's pixel box (inclusive) as a region input: fractions of the image."""
    x0, y0, x1, y1 = box
    return f"{x0 / SIZE[0]:.3f},{y0 / SIZE[1]:.3f},{(x1 + 1) / SIZE[0]:.3f},{(y1 + 1) / SIZE[1]:.3f}"


def test_ocr_reads_the_printed_word(tools: ToolBox) -> None:
    for i in range(3):
        scene = drawn_scene(i)
        [whole] = run(tools, scene.image, ("ocr", {}))
        assert re.fullmatch(rf'1 text line\(s\) read in the whole image \(320x240 px\), in reading order: '
                            rf'"{scene.word}" \(confidence [01]\.\d\d\)', whole), whole
    [top, bottom] = run(tools, drawn_scene(0).image, ("ocr", {"region": "top"}), ("ocr", {"region": "bottom"}))
    assert top.startswith("1 text line(s) read in the top region (x 0-319, y 0-119 px)")
    assert f'"{drawn_scene(0).word}"' in top
    assert bottom == "no text read in the bottom region (x 0-319, y 120-239 px)"


def test_count_gives_the_true_count_per_colour_and_per_shape(tools: ToolBox) -> None:
    for i in SCENES:
        truth = drawn_scene(i).annotation()
        image = drawn_scene(i).image
        by_colour = run(tools, image, *[("count", {"colour": c}) for c in COLOURS])
        *by_shape, every = run(tools, image, *[("count", {"shape": s}) for s in SHAPES], ("count", {}))
        for colour, text in zip(COLOURS, by_colour, strict=True):
            n = truth["counts"].get(colour, 0)
            assert text.startswith(f"{n} {colour} object{'s' if n != 1 else ''} in the whole image"), (i, text)
        for shape, text in zip(SHAPES, by_shape, strict=True):
            assert text.startswith(f"{truth['kinds'].get(shape, 0)} {shape}"), (i, text)
        # The printed word's letters are not objects: every object is one of the drawn shapes.
        assert every.startswith(f"{len(truth['shapes'])} objects in the whole image"), (i, every)


def test_count_splits_by_what_it_was_not_asked_to_filter(tools: ToolBox) -> None:
    [everything, red, left] = run(tools, drawn_scene(3).image, ("count", {}), ("count", {"colour": "red"}),
                                  ("count", {"region": "left"}))
    assert everything == "3 objects in the whole image (320x240 px); by colour: blue 2, red 1; by shape: square 2, " \
                         "triangle 1"
    assert red == "1 red object in the whole image (320x240 px); by shape: square 1"
    assert left == "1 object in the left region (x 0-159, y 0-239 px); by colour: red 1; by shape: square 1"


def test_region_colour_names_the_colour_of_each_shape(tools: ToolBox) -> None:
    for i in range(8):
        scene = drawn_scene(i)
        shapes = scene.annotation()["shapes"]
        outputs = run(tools, scene.image, *[("region_colour", {"region": box_region(s["box"])}) for s in shapes])
        for shape, text in zip(shapes, outputs, strict=True):
            assert text.startswith(f"{shape['colour']} is the dominant colour of the non-background pixels"), text
            assert "(background white)" in text


def test_region_colour_of_background_only_says_so(tools: ToolBox) -> None:
    # Scene 3's top-right corner above its shapes is bare background.
    [text] = run(tools, drawn_scene(3).image, ("region_colour", {"region": "0.8,0.25,1,0.3"}))
    assert text.startswith("white (the background) is the only colour in the box 0.8,0.25,1,0.3 (x 256-319, y 60-71")


def test_locate_gives_each_objects_colour_shape_side_and_order(tools: ToolBox) -> None:
    for i in SCENES:
        scene = drawn_scene(i)
        [text] = run(tools, scene.image, ("locate", {}))
        found = re.findall(r"\d+\. (\w+) (\w+) at (?:top|bottom)-(left|right)[^(]*\(box [\d.,]+; x (\d+)-(\d+)",
                           text)
        truth = [(s["colour"], s["kind"], s["side"]) for s in scene.annotation()["shapes"]]
        assert sorted(f[:3] for f in found) == sorted(truth), (i, text)
        centres = [int(f[3]) + int(f[4]) for f in found]
        assert centres == sorted(centres)  # left to right


def test_a_large_image_is_analysed_shrunk_and_told_in_its_own_pixels(tools: ToolBox) -> None:
    scene = drawn_scene(3)
    [small, large] = [run(tools, image, ("locate", {}))[0] for image in (
        scene.image, scene.image.resize((SIZE[0] * 8, SIZE[1] * 8), Image.Resampling.NEAREST))]
    assert large.startswith("3 objects in the whole image (2560x1920 px), left to right: 1. red square")
    boxes = [[int(v) for v in re.findall(r"x (\d+)-(\d+), y (\d+)-(\d+)", text)[0]] for text in (small, large)]
    assert all(abs(a * 8 - b) <= 8 for a, b in zip(*boxes, strict=True)), boxes


def test_image_info_and_tags(tools: ToolBox) -> None:
    [info, tags] = run(tools, drawn_scene(0).image, ("image_info", {}), ("tags", {"k": "3"}))
    assert info.startswith("320x240 px, aspect 1.33 (landscape); mean brightness")
    assert "; background white;" in info
    assert re.fullmatch(r"top 3 ImageNet labels for the whole image \(320x240 px\): [^,]+ 0\.\d\d(, [^,]+ 0\.\d\d){2}",
                        tags)


def test_outputs_chain_through_at_k_references(tools: ToolBox) -> None:
    scene = drawn_scene(3)  # a red square (left) and two blue shapes (right)
    first = scene.annotation()["shapes"][0]  # the blue square
    colour, same, where = run(tools, scene.image, ("region_colour", {"region": box_region(first["box"])}),
                              ("count", {"colour": "@1"}), ("locate", {"colour": "@1", "shape": "triangle"}))
    assert colour.startswith("blue is the dominant colour")
    assert same.startswith("2 blue objects")
    # A region input takes the first box of the output it names.
    [located, leftmost] = run(tools, scene.image, ("locate", {}), ("region_colour", {"region": "@1"}))
    assert located.startswith("3 objects in the whole image (320x240 px), left to right: 1. red square")
    assert leftmost.startswith("red is the dominant colour")
    assert where.startswith("1 blue triangle in the whole image (320x240 px), left to right: 1. blue triangle")


def test_a_reference_to_an_output_without_a_value_of_its_kind_fails_the_step(tools: ToolBox) -> None:
    plan = check_plan(steps(("count", {}), ("region_colour", {"region": "@1"})), tools)
    with pytest.raises(PlanError, match=r"^step 2: region: the output of step 1 holds no region \('3 objects"):
        run_plan(plan, drawn_scene(3).image, tools)


def test_a_tool_failing_at_run_time_fails_its_step() -> None:
    def broken(image: Image.Image, args: dict[str, Any], earlier: list[str]) -> str:
        raise RuntimeError("no memory left")

    box = ToolBox([Tool("broken", "Fails.", "nothing.", {}, broken)])
    with pytest.raises(PlanError, match=r"^step 1 \(broken\) failed: RuntimeError: no memory left$"):
        run_plan([Step("broken", {})], drawn_scene(0).image, box)


def test_steps_get_the_outputs_before_them() -> None:
    seen: list[list[str]] = []

    def echo(image: Image.Image, args: dict[str, Any], earlier: list[str]) -> str:
        seen.append(earlier)
        return f"{args['note']} after {len(earlier)}"

    box = ToolBox([Tool("echo", "Echoes.", "its note.", {"note": Param("text", "what to say", required=True)}, echo)])
    outputs = run(box, drawn_scene(0).image, ("echo", {"note": "a"}), ("echo", {"note": "@1"}))
    assert outputs == ["a after 0", "a after 0 after 1"] and seen == [[], ["a after 0"]]


def test_labels_are_written_out_never_taken_from_an_earlier_output() -> None:
    def find(image: Image.Image, args: dict[str, Any], earlier: list[str]) -> str:
        return ", ".join(args["labels"])

    box = ToolBox([Tool("find", "Finds.", "the labels.", {"labels": Param("labels", "what", required=True)}, find)])
    assert run(box, drawn_scene(0).image, ("find", {"labels": " Cat,dog , cat"})) == ["cat, dog"]
    with pytest.raises(PlanError, match=r"^step 2: labels: a labels input is written out, never taken from an "
                                        r"earlier step \(@1\)$"):
        check_plan(steps(("find", {"labels": "cat"}), ("find", {"labels": "@1"})), box)


@pytest.mark.parametrize(("plan", "reason"), [
    ([{"tool": "zoom", "inputs": []}],
     "step 1: tool 'zoom' is not registered (known: ocr, tags, region_colour, count, locate, image_info)"),
    ([{"tool": "detect", "inputs": [{"name": "labels", "value": "cat"}]}],
     "step 1: tool 'detect' is not registered: it needs model weights: give a local folder with --tool_weights "
     "detect=DIR (an open-vocabulary detector such as OWLv2, OWL-ViT or Grounding DINO, a transformers "
     "zero-shot-object-detection model)"),
    (steps(("ocr", {"colour": "red"})), "step 1: tool 'ocr' has no input 'colour' (its inputs: region)"),
    (steps(("image_info", {"region": "left"})), "step 1: tool 'image_info' has no input 'region' (it takes no inputs)"),
    (steps(("region_colour", {"region": "upper-middle-ish"})),
     "step 1: region: 'upper-middle-ish' is not a region (a named region: whole, left, right, top, bottom, center, "
     "top-left, top-right, bottom-left, bottom-right; or a box x0,y0,x1,y1 in fractions of the image (0-1), "
     "e.g. 0.1,0.5,0.4,0.9)"),
    (steps(("count", {"region": "0.5,0.5,1.2,0.9"})),
     "step 1: region: '0.5,0.5,1.2,0.9' is not a box inside the image: x0,y0,x1,y1 are fractions of its width and "
     "height (0-1) with x0 < x1 and y0 < y1"),
    (steps(("count", {"colour": "mauve"})), "step 1: colour: 'mauve' is not a colour (a colour: red, orange, "
     "yellow, green, cyan, blue, purple, pink, brown, black, white, gray; or any)"),
    (steps(("count", {"shape": "star"})), "step 1: shape: 'star' is not a shape"),
    (steps(("tags", {"k": "50"})), "step 1: k: '50' is not a whole number from 1 to 20"),
    (steps(("region_colour", {})), "step 1: tool 'region_colour' needs input 'region' (the part of the image to look "
     "at)"),
    (steps(("ocr", {}), ("count", {"colour": "@3"}), ("ocr", {})), "step 2: colour: input @3 names a later step"),
    (steps(("ocr", {}), ("count", {"colour": "@2"})), "step 2: colour: input @2 names the step itself"),
    (steps(("count", {"colour": "@0"})), "step 1: colour: input @0 is not a step (steps are numbered from 1)"),
    (steps(("count", {"colour": "@first"})), "step 1: colour: '@first' is not a reference to an earlier step"),
    ([], "the plan has 0 steps: it needs 1 to 6"),
    (steps(*[("ocr", {})] * 7), "the plan has 7 steps: it needs 1 to 6"),
    ({"tool": "ocr"}, "the plan must be a list of steps, got dict"),
    (["ocr"], "step 1: a step must be an object with tool, inputs, purpose, got str"),
    ([{"tool": "ocr", "inputs": [], "why": "x"}], "step 1: unknown key 'why' (a step has tool, inputs, purpose)"),
    ([{"inputs": []}], "step 1: no tool named (tool must be one of: ocr, tags,"),
    ([{"tool": "ocr", "inputs": [{"name": "region", "value": "left"}, {"name": "region", "value": "top"}]}],
     "step 1: input 'region' is given twice"),
    ([{"tool": "ocr", "inputs": [{"name": "region"}]}], "step 1: inputs must be a list of {name, value} pairs"),
    ([{"tool": "tags", "inputs": {"k": 3}}], "step 1: an input's name and value must be text, got 'k': 3"),
])
def test_check_plan_refuses_with_the_step_and_the_reason(tools: ToolBox, plan: Any, reason: str) -> None:
    with pytest.raises(PlanError) as refused:
        check_plan(plan, tools)
    assert str(refused.value).startswith(reason)


def test_check_plan_takes_either_form_and_gives_steps(tools: ToolBox) -> None:
    written = [{"tool": "locate", "inputs": [{"name": "colour", "value": " Red "}],
                "purpose": " where the red ones are"},
               {"tool": "region_colour", "inputs": [{"name": "region", "value": "@1"}], "purpose": "its colour"}]
    checked = check_plan(written, tools)
    assert checked == [Step("locate", {"colour": "Red"}, "where the red ones are"),
                       Step("region_colour", {"region": "@1"}, "its colour")]
    assert check_plan([step.record() for step in checked], tools) == checked  # as a cache holds them


def test_catalog_lists_every_tool_its_inputs_and_the_references(tools: ToolBox) -> None:
    catalog = tools.catalog()
    for name in tools.names:
        assert f"\n- {name}: " in f"\n{catalog}"
    assert "    region (region, required): the part of the image to look at" in catalog
    assert "- colour: a colour: red, orange," in catalog
    assert 'An input value "@k" is the output of the earlier step k' in catalog


def test_fingerprint_names_tools_versions_and_weights(tools: ToolBox) -> None:
    fingerprint = tools.fingerprint()["tools"]
    assert list(fingerprint) == list(tools.names)
    assert fingerprint["count"] == {"version": 1}
    assert fingerprint["ocr"]["model"]["ocr"] == "rapidocr-onnxruntime"
    assert fingerprint["tags"]["model"]["tagger"] == "efficientnet-lite0"


def test_the_plan_schema_is_in_the_subset_every_backend_fills(tools: ToolBox) -> None:
    schema = plan_schema(tools)
    check_schema(schema)
    step = schema["items"]["properties"]
    assert step["tool"]["enum"] == list(tools.names)
    assert step["inputs"]["maxItems"] == 3
    assert step["inputs"]["items"]["properties"]["name"]["enum"] == ["region", "k", "colour", "shape"]


def _field(request: Request) -> str:
    return re.search(r'(?:field|list) "([^"]+)"', request.messages[-1].text).group(1)


class Planner(Model):
    """Writes a given plan through models.structured: each value request is answered from the plan at the
    field it names."""

    name = "planner"
    Args = NoArgs

    def __init__(self, plan: list[dict[str, Any]]) -> None:
        self.plan = plan

    def _at(self, path: str) -> Any:
        value: Any = self.plan
        for index, key in re.findall(r"\[(\d+)\]|\.(\w+)", path.removeprefix("reply")):
            value = value[int(index)] if index else value[key]
        return value

    def generate(self, requests: list[Request]) -> list[Response]:
        return [Response(r.id, text=str(self._at(_field(r)))) for r in requests]

    def loglikelihood(self, requests: list[Request]) -> list[Response]:
        out = []
        for r in requests:
            value, options = self._at(_field(r)), [c.removesuffix("\n") for c in r.continuations]
            if options == ["another", "done"]:
                so_far = int(re.search(r"has (\d+) item", r.messages[-1].text).group(1))
                value = "another" if so_far < len(value) else "done"
            out.append(Response(r.id, logprobs=[0.0 if o == value else -1.0 for o in options]))
        return out

    def fingerprint(self) -> dict[str, Any]:
        return {"model": self.name}


def _ask_plan(tools: ToolBox) -> Request:
    chat = (Message("user", (TextPart("Write the solution plan.\n" + tools.catalog()),)),)
    return Request("plan", "generate", chat, GenerationSettings(max_new_tokens=32),
                   json_schema=json.dumps(plan_schema(tools)))


def test_a_backend_writes_a_plan_in_the_schema_that_checks_and_runs(tools: ToolBox) -> None:
    plan = steps(("locate", {"shape": "triangle"}), ("region_colour", {"region": "@1"}),
                 ("count", {"colour": "@2", "region": "right"}))
    reply = answer_structured(Planner(plan), _ask_plan(tools))
    assert json.loads(reply.text) == plan
    outputs = run_plan(check_plan(json.loads(reply.text), tools), drawn_scene(3).image, tools)
    assert outputs[1].startswith("blue is the dominant colour") and outputs[2].startswith("2 blue objects")


def test_a_tiny_models_plan_is_valid_json_that_checks_or_is_refused(tools: ToolBox, tiny_lm_dir: Path) -> None:
    model = MODELS.get("hf").from_args({"pretrained": str(tiny_lm_dir), "max_batch_size": "8"})
    reply = answer_structured(model, _ask_plan(tools))
    written = json.loads(reply.text)
    jsonschema.validate(written, plan_schema(tools))
    try:
        check_plan(written, tools)
    except PlanError as e:
        assert re.match(r"step \d: ", str(e))


# The weighted tools, over tiny random-weight models saved as `save_pretrained` writes them.

@pytest.fixture(scope="module")
def weights(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    import torch
    from transformers import (
        CLIPTokenizer,
        DPTConfig,
        DPTForDepthEstimation,
        DPTImageProcessor,
        OwlViTConfig,
        OwlViTForObjectDetection,
        OwlViTImageProcessor,
        OwlViTProcessor,
    )

    root = tmp_path_factory.mktemp("tool_weights")
    torch.manual_seed(0)
    letters = "abcdefghijklmnopqrstuvwxyz"
    vocab = {token: i for i, token in enumerate([*letters, *(c + "</w>" for c in letters)])}
    vocab |= {"<|startoftext|>": len(vocab), "<|endoftext|>": len(vocab) + 1}
    text = {"vocab_size": len(vocab), "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1,
            "num_attention_heads": 2, "max_position_embeddings": 16, "bos_token_id": len(vocab) - 2,
            "eos_token_id": len(vocab) - 1, "pad_token_id": len(vocab) - 1}
    vision = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2,
              "image_size": 64, "patch_size": 16}
    OwlViTForObjectDetection(OwlViTConfig(text_config=text, vision_config=vision, projection_dim=32)) \
        .save_pretrained(root / "detect")
    square = {"height": 64, "width": 64}
    OwlViTProcessor(image_processor=OwlViTImageProcessor(size=square, crop_size=square),
                    tokenizer=CLIPTokenizer(vocab=vocab, merges=[])).save_pretrained(root / "detect")
    DPTForDepthEstimation(DPTConfig(hidden_size=32, num_hidden_layers=4, num_attention_heads=2, intermediate_size=64,
                                    image_size=64, patch_size=16, backbone_out_indices=[0, 1, 2, 3],
                                    neck_hidden_sizes=[8, 16, 16, 16], fusion_hidden_size=16)) \
        .save_pretrained(root / "depth")
    DPTImageProcessor(size=square).save_pretrained(root / "depth")
    return {"detect": root / "detect", "depth": root / "depth"}


def test_detect_and_depth_run_from_the_weights_given(weights: dict[str, Path]) -> None:
    box = default_tools(weights)
    assert box.names[-2:] == ("detect", "depth") and not box.unavailable
    [found, near] = run(box, drawn_scene(0).image, ("detect", {"labels": "circle, square", "min_score": "0"}),
                        ("depth", {"region": "bottom"}))
    # Random weights: what is found is noise, but in the tool's form.
    assert re.match(r"\d+ detection\(s\) of circle, square in the whole image \(320x240 px\) \(score at least 0\.00\); "
                    r"by label: circle \d+, square \d+", found), found
    assert re.fullmatch(r"mean nearness of the bottom region \(x 0-319, y 120-239 px\): [01]\.\d\d \(0 = the farthest "
                        r"point of the image, 1 = the nearest; whole image [01]\.\d\d\); nearest part: [\w-]+, "
                        r"farthest: [\w-]+; by part: top-left [01]\.\d\d(, [\w-]+ [01]\.\d\d){8}", near), near
    fingerprint = box.fingerprint()["tools"]
    assert fingerprint["detect"]["model"]["model_type"] == "owlvit"
    assert set(fingerprint["depth"]["model"]["files"]) >= {"config.json", "model.safetensors"}
    assert "region (region, default whole): the part of the image to look in" in box.catalog()


def test_weights_that_cannot_be_used_are_named(tmp_path: Path, weights: dict[str, Path]) -> None:
    with pytest.raises(ConfigError, match=r"^--tool_weights: no tool named 'zoom' takes weights \(those that do: "
                                          r"detect, depth\)$"):
        default_tools({"zoom": tmp_path})
    with pytest.raises(ConfigError, match=r"depth=.*missing: no such folder \(it needs model weights"):
        default_tools({"depth": tmp_path / "missing"})
    with pytest.raises(ConfigError, match=r"detect=.*: no config.json in it"):
        default_tools({"detect": tmp_path})
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    with pytest.raises(ConfigError, match=r"model type 'llama' is not a zero-shot-object-detection model \("
                                          r"transformers knows: .*owlv2"):
        default_tools({"detect": tmp_path})
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "owlvit"}))
    with pytest.raises(ConfigError, match=r"no weights in it \(\*\.safetensors or \*\.bin\)"):
        default_tools({"detect": tmp_path})
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "chmv2"}))
    (tmp_path / "model.safetensors").write_bytes(b"not weights")
    with pytest.raises(ConfigError, match=r"does not know whether 'chmv2''s output grows nearer or farther"):
        default_tools({"depth": tmp_path})
    # A folder that checks but does not load fails when the tool is first run, not the plan.
    (tmp_path / "config.json").write_text((weights["depth"] / "config.json").read_text())
    box = default_tools({"depth": tmp_path})
    with pytest.raises(ConfigError, match=r"transformers cannot load it as a depth-estimation model"):
        run(box, drawn_scene(0).image, ("depth", {}))
