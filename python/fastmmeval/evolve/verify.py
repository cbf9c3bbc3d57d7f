"""Stage 7, executable reasoning verification (MMBench-Live Eqs. 6-9): run the instance's solution plan
step by step with the registered tools (z_k = T(o_k | x, z_<k), each a text), then a vision-blind
verifier role, shown only the question, its options and the tools' texts, picks an option a-hat; the
instance is kept iff a-hat equals its answer. A plan that cannot run rejects the instance with the
tool's reason, without a verifier call."""

from __future__ import annotations

import io

from PIL import Image

from fastmmeval.evolve.ask import ask
from fastmmeval.evolve.records import Failure, Generated, Step, Verified
from fastmmeval.evolve.replies import letters, verify_schema
from fastmmeval.evolve.solution import PlanError, check_plan, run_plan
from fastmmeval.evolve.tools import ToolBox
from fastmmeval.live.roles import Role
from fastmmeval.live.store import Blobs, StageCache, content_key


def observe(generated: Generated, suffix: str, tools: ToolBox, blobs: Blobs, cache: StageCache) -> list[str]:
    """The tools' outputs z_1..z_K for the instance's plan on its image (cached: tools are pure); a
    PlanError when a step cannot run."""
    key = content_key("tools", tools.fingerprint(), generated.sha, generated.plan)
    hit = cache.get(key)
    if hit is not None:
        return list(hit)
    steps = check_plan(generated.plan, tools)
    with Image.open(io.BytesIO(blobs.get(generated.sha, suffix))) as image:
        outputs = run_plan(steps, image.convert("RGB"), tools)
    cache.put(key, "tools", outputs)
    return outputs


def verify_item(generated: Generated, suffix: str, verifier: Role, tools: ToolBox, blobs: Blobs,
                cache: StageCache) -> Verified | Failure:
    """The verification of `generated` (its image a blob with `suffix`)."""
    try:
        observations = observe(generated, suffix, tools, blobs, cache)
    except PlanError as e:
        return Verified(generated.record(), [], "", False, verifier.name, f"plan: {e}")
    steps = [Step.from_record(s) for s in generated.plan]
    shown = "\n".join(f"{k}. {s.tool} ({s.purpose or 'no purpose given'}): {z}"
                      for k, (s, z) in enumerate(zip(steps, observations, strict=True), start=1))
    n = len(generated.options)
    values = {"question": generated.question, "hint": f"Hint: {generated.hint}" if generated.hint else "",
              "options": "\n".join(f"{ch}. {o}" for ch, o in zip(letters(n), generated.options, strict=True)),
              "observations": shown or "(no tool output)"}
    subject = f"{generated.atomic}/{generated.sha[:12]}"
    got = ask(verifier, "verify", values, [], blobs, cache, verify_schema(n), subject, lambda r: r)
    if isinstance(got, Failure):
        return got
    accepted = got["answer"] == generated.answer
    reason = "" if accepted else f"the verifier answered {got['answer']}, the generator {generated.answer}"
    return Verified(generated.record(), observations, got["answer"], accepted, verifier.name, reason)
