"""Are two versions of a benchmark the same test? (`fastmmeval compare`)

The API: `consistency(runs_a, runs_b, tasks, out)` compares the scores of the models evaluated on
both versions of a task (Pearson r, Spearman rho, Kendall tau, pairwise orderings kept, bootstrap
CIs over docs and the per-model x category rank shift), read from our run folders;
`pacost(model_spec, tasks, paraphraser_spec, out)` tests whether a model is more confident on a task's
questions than on paraphrases of them (PaCoST's paired t-test, Cohen's d, per task and category)."""

# Imported at once, not lazily: the function shares its module's name, and a lazy export would leave
# the module in its place once anything imported `fastmmeval.compare.consistency` first. Its heavy
# imports (scipy, matplotlib) wait inside its functions.
from fastmmeval.compare.consistency import ConsistencyReport, consistency
from fastmmeval.compare.pacost import PacostReport, pacost

__all__ = ["ConsistencyReport", "PacostReport", "consistency", "pacost"]
