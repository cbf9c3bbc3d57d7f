"""The dRank heatmap (MMBench-Live's Figure 2): one row per model, one column per category."""

from __future__ import annotations

from typing import IO


def delta_rank_png(table: dict[str, dict[str, int | None]], columns: list[str], title: str, out: IO[bytes]) -> None:
    """Draw `table` (model -> column -> dRank, None where a model is not ranked) as a PNG into `out`:
    red where a model falls behind on the new version, blue where it moves ahead, each cell labelled."""
    import matplotlib
    import matplotlib.ticker

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    models = list(table)
    grid = np.array([[np.nan if table[m][c] is None else table[m][c] for c in columns] for m in models], dtype=float)
    span = max(1.0, float(np.nanmax(np.abs(grid))) if np.isfinite(grid).any() else 1.0)
    fig, ax = plt.subplots(figsize=(max(4.0, 0.6 * len(columns) + 3.0), max(2.5, 0.45 * len(models) + 1.5)))
    try:
        image = ax.imshow(np.ma.masked_invalid(grid), cmap="RdBu_r", vmin=-span, vmax=span, aspect="auto")
        ax.set_xticks(range(len(columns)), columns, rotation=45, ha="right")
        ax.set_yticks(range(len(models)), models)
        for (row, col), value in np.ndenumerate(grid):
            text = "–" if np.isnan(value) else f"{value:+.0f}" if value else "0"
            dark = not np.isnan(value) and abs(value) > span / 2
            ax.text(col, row, text, ha="center", va="center", fontsize=8, color="white" if dark else "black")
        bar = fig.colorbar(image, ax=ax, label="ΔRank (+: falls behind)")
        bar.locator = matplotlib.ticker.MaxNLocator(integer=True)
        bar.update_ticks()
        ax.set_title(title, fontsize=10)
        fig.tight_layout()
        fig.savefig(out, format="png", dpi=120)
    finally:
        plt.close(fig)
