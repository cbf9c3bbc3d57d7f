"""Are two versions of a benchmark the same test? (`fastmmeval compare`)

The API: `consistency(runs_a, runs_b, tasks, out)` compares the scores of the models evaluated on
both versions of a task (Pearson r, Spearman rho, Kendall tau, pairwise orderings kept, bootstrap
CIs over docs and the per-model x category rank shift), read from our run folders."""

from fastmmeval.util import lazy_exports

__all__ = ["ConsistencyReport", "consistency"]
# Every `fastmmeval` command imports `compare.cli`, and with it this package: its modules load on first use.
__getattr__ = lazy_exports(__name__, {"ConsistencyReport": "consistency", "consistency": "consistency"})
