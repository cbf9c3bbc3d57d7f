"""Are two versions of a benchmark the same test? (`fastmmeval compare`)

The API: `consistency(runs_a, runs_b, tasks, out)` compares the scores of the models evaluated on
both versions of a task (Pearson r, Spearman rho, Kendall tau, pairwise orderings kept, bootstrap
CIs over docs and the per-model x category rank shift), read from our run folders."""

# Imported at once, not lazily: the function shares its module's name, and a lazy export would leave
# the module in its place once anything imported `fastmmeval.compare.consistency` first. Its heavy
# imports (scipy, matplotlib) wait inside its functions.
from fastmmeval.compare.consistency import ConsistencyReport, consistency

__all__ = ["ConsistencyReport", "consistency"]
