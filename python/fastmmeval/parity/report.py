"""A parity report as lines for a terminal."""

from __future__ import annotations

from collections import Counter

from fastmmeval.parity.harness import ParityReport


def report_lines(report: ParityReport, examples: int = 3) -> list[str]:
    """A summary (cases, mismatches by explaining difference), a few examples of each, then what
    is unexplained or unshown."""
    lines = [
        f"{report.task} vs lmms-eval {report.lmms_task}: {report.docs} docs, {report.cases} responses, "
        f"{len(report.mismatches)} mismatches, {len(report.unexplained)} unexplained"
    ]
    causes = [", ".join(m.explained_by) or "UNEXPLAINED" for m in report.mismatches]
    for cause, count in sorted(Counter(causes).items()):
        text = report.listed.get(cause, "no listed difference accounts for these")
        lines.append(f"  {count:4d} x {cause}: {text}")
        shown = [m for m, c in zip(report.mismatches, causes, strict=True) if c == cause][:examples]
        lines += [f"         {m.describe()}" for m in shown]
    if report.unshown:
        lines.append(f"  listed but not seen on these docs: {', '.join(report.unshown)}")
    return lines
