"""FID and PCA-KL between two sets of embeddings (MMBench-Live Section 4.7), over seeded trials with
matched sample sizes, in float64.

Matched samples: each trial draws, without replacement, as many rows of the larger set as the smaller set
has, and compares that draw with the whole smaller set (sets of equal size: every trial uses every row, so
the trials agree and their spread is 0). Both statistics are computed on each trial's pair; a statistic is
reported as its mean and sample standard deviation (ddof 1) over the trials.

FID: the Fréchet distance between the Gaussian fits (mean, covariance with ddof 1 as `numpy.cov`),
`|mu_a - mu_b|^2 + tr(S_a) + tr(S_b) - 2 tr sqrt(S_a S_b)`. The eigenvalues of `S_a S_b` are those of the
symmetric PSD matrix `L^T S_b L` for any factor `L L^T = S_a` (the Cholesky factor of `S_a`; for a singular
`S_a`, `V diag(sqrt(w))` from its eigen-decomposition `V diag(w) V^T`), so `tr sqrt(S_a S_b)` is the sum of the
square roots of the eigenvalues of `L^T S_b L`: a symmetric eigen-decomposition (backward stable, real), where
`scipy.linalg.sqrtm` (what pytorch-fid's `calculate_frechet_distance` calls) runs a Schur decomposition of a
non-symmetric product and can return complex rounding noise. Eigenvalues below zero are rounding of zero
(both matrices are PSD) and are clipped to 0, so singular covariances (fewer rows than dimensions) need no
offset. The smaller set's factor `L` is computed once for all trials.

PCA-KL: per trial, a PCA fitted on the union of the two matched samples (they weigh equally; the paper does
not say which data its PCA is fitted on), its `dim` leading components (at most the data's dimension and
the union's rows less one), Gaussian fits of both samples in that subspace, and the closed-form
`KL(A||B) = (tr(S_b^-1 S_a) + d^T S_b^-1 d - k + ln det S_b - ln det S_a) / 2` (`d = mu_b - mu_a`, `k` the
subspace's dimension) both ways, with `delta_kl =
KL(A||B) - KL(B||A)`. Both projected covariances get the same ridge `ridge * mean eigenvalue of the union's
projected covariance` added to their diagonal (default 1e-3), so a sample with fewer rows than `dim` (a
singular fit) still has a finite KL; with `ridge=0` such a sample is refused.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import scipy.linalg
from scipy.linalg.blas import dtrmm

from fastmmeval.errors import ConfigError

TRIALS = 10
PCA_DIM = 256
RIDGE = 1e-3
PCA_FIT = "union of the two matched samples, refitted each trial"
RIDGE_SCALE = "mean eigenvalue of the union's covariance in the subspace"


@dataclass(frozen=True)
class Gaussian:
    """A Gaussian fit of `n` rows: their mean and covariance (ddof 1), float64."""

    mean: np.ndarray
    cov: np.ndarray
    n: int


@dataclass(frozen=True)
class Spread:
    """A statistic over trials: mean, sample standard deviation (0 with one trial) and every trial's value."""

    mean: float
    std: float
    values: list[float]

    @classmethod
    def of(cls, values: list[float]) -> Spread:
        """The spread of `values` (one per trial)."""
        array = np.asarray(values, np.float64)
        std = float(array.std(ddof=1)) if len(array) > 1 else 0.0
        return cls(float(array.mean()), std, [float(v) for v in array])


@dataclass(frozen=True)
class Alignment:
    """FID and PCA-KL of sets A and B: their sizes, the rows each trial compares (`n_per_trial`), which set
    was subsampled ('a', 'b', or None when they are the same size) and the statistics with their settings."""

    n_a: int
    n_b: int
    n_per_trial: int
    subsampled: str | None
    trials: int
    seed: int
    fid: Spread | None = None
    kl_ab: Spread | None = None
    kl_ba: Spread | None = None
    delta_kl: Spread | None = None
    pca: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """A JSON-able dict of every field."""
        return asdict(self)


def _rows(x: Any, name: str) -> np.ndarray:
    """`x` as a new float64 (rows, dims) array (the callers centre it in place)."""
    array = np.array(x, dtype=np.float64)
    if array.ndim != 2 or array.shape[0] < 2 or array.shape[1] < 1:
        raise ConfigError(f"embeddings {name}: expected a (rows, dims) array with at least 2 rows, got {array.shape}")
    if not np.isfinite(array).all():
        raise ConfigError(f"embeddings {name}: holds NaN or infinite values")
    return array


def _symmetric(m: np.ndarray) -> np.ndarray:
    return (m + m.T) / 2


def fit_gaussian(x: Any) -> Gaussian:
    """The Gaussian fit of the rows of `x` (mean and covariance with ddof 1, as numpy.cov)."""
    return _Scatter(_rows(x, "x")).fit()


def psd_root(cov: np.ndarray) -> np.ndarray:
    """A factor `L` with `L L^T = cov` for a PSD `cov`: its Cholesky factor (lower triangular) when `cov` is
    positive definite, else its eigenvectors scaled by the square roots of its eigenvalues (negative ones,
    rounding of zero, clipped to 0)."""
    try:
        return np.linalg.cholesky(cov)
    except np.linalg.LinAlgError:
        w, v = np.linalg.eigh(cov)
        return v * np.sqrt(np.clip(w, 0.0, None))


def _congruence(root: np.ndarray, cov: np.ndarray) -> np.ndarray:
    """`root^T cov root`, with two triangular products when `root` is lower triangular (half a general one's work)."""
    if np.triu(root, 1).any():
        return root.T @ cov @ root
    return dtrmm(1.0, root, dtrmm(1.0, root, cov, side=1, lower=1), lower=1, trans_a=1)


def trace_sqrt_product(root_a: np.ndarray, cov_b: np.ndarray) -> float:
    """`tr sqrt(S_a S_b)` from `root_a` (`L` with `L L^T = S_a`, see `psd_root`): the sum of the square roots
    of the eigenvalues of `L^T S_b L`, which are those of `S_a S_b` (clipped at 0)."""
    w = np.linalg.eigvalsh(_symmetric(_congruence(root_a, cov_b)))
    return float(np.sqrt(np.clip(w, 0.0, None)).sum())


def frechet_distance(a: Gaussian, b: Gaussian, root_a: np.ndarray | None = None) -> float:
    """The Fréchet distance between two Gaussians: `|mu_a - mu_b|^2 + tr S_a + tr S_b - 2 tr sqrt(S_a S_b)`;
    `root_a` is `psd_root(a.cov)` when the caller has it."""
    diff = a.mean - b.mean
    root = psd_root(a.cov) if root_a is None else root_a
    return float(diff @ diff + np.trace(a.cov) + np.trace(b.cov) - 2.0 * trace_sqrt_product(root, b.cov))


def gaussian_kl(p: Gaussian, q: Gaussian) -> float:
    """`KL(p || q)` of two Gaussians with positive-definite covariances, in closed form (Cholesky factors)."""
    try:
        lp = np.linalg.cholesky(p.cov)
        lq = np.linalg.cholesky(q.cov)
    except np.linalg.LinAlgError:
        raise ConfigError("a covariance is singular: KL needs a positive ridge (or more rows than dimensions)") \
            from None
    whitened = scipy.linalg.solve_triangular(lq, lp, lower=True)  # Lq^-1 Lp: its squared norm is tr(Sq^-1 Sp)
    shift = scipy.linalg.solve_triangular(lq, q.mean - p.mean, lower=True)
    logdet_q, logdet_p = 2.0 * np.log(np.diag(lq)).sum(), 2.0 * np.log(np.diag(lp)).sum()
    return float(0.5 * ((whitened**2).sum() + shift @ shift - len(p.mean) + logdet_q - logdet_p))


class _Scatter:
    """One set's rows centred (in place) and their scatter matrix, formed once, from which the fit of the set
    or of any subset of its rows follows without refitting: a subset keeping more than half of the rows
    has the scatter less that of the rows it leaves out (fewer rows to multiply)."""

    def __init__(self, rows: np.ndarray) -> None:
        self.mean = rows.mean(axis=0)
        rows -= self.mean
        self.centred = rows
        self.scatter = rows.T @ rows
        self.total = rows.sum(axis=0)

    def fit(self, keep: np.ndarray | None = None) -> Gaussian:
        """The fit of the rows where the boolean mask `keep` is set (all rows without one)."""
        if keep is None:
            k, scatter, total = len(self.centred), self.scatter, self.total
        elif 2 * keep.sum() > len(keep):
            k, left = int(keep.sum()), self.centred[~keep]
            scatter, total = self.scatter - left.T @ left, self.total - left.sum(axis=0)
        else:
            k, kept = int(keep.sum()), self.centred[keep]
            scatter, total = kept.T @ kept, kept.sum(axis=0)
        cov = _symmetric(scatter - np.outer(total, total) / k) / (k - 1)
        return Gaussian(self.mean + total / k, cov, k)


def trial_draws(n_large: int, n_small: int, trials: int, seed: int) -> list[np.ndarray]:
    """Each matched-sample trial's rows of the larger set (a boolean mask): `n_small` of `n_large` drawn
    without replacement, seeded."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(trials):
        keep = np.zeros(n_large, bool)
        keep[rng.choice(n_large, n_small, replace=False)] = True
        out.append(keep)
    return out


class Matched:
    """Matched-sample trials of sets A and B: their sizes, which one is subsampled ('a', 'b', or None when
    they are the same size) and each trial's pair of fits."""

    def __init__(self, rows_a: np.ndarray, rows_b: np.ndarray, trials: int, seed: int) -> None:
        self.n_a, self.n_b, self.trials, self.seed = len(rows_a), len(rows_b), trials, seed
        self.subsampled = None if self.n_a == self.n_b else "a" if self.n_a > self.n_b else "b"
        large, small = (rows_a, rows_b) if self.subsampled == "a" else (rows_b, rows_a)
        self._large, self._small = _Scatter(large), _Scatter(small).fit()

    def pairs(self) -> Iterator[tuple[Gaussian, Gaussian]]:
        """Each trial's (fit of A's rows, fit of B's rows): a seeded draw without replacement of the larger
        set the size of the smaller one, against all of the smaller (the same Gaussian object every trial)."""
        for keep in trial_draws(max(self.n_a, self.n_b), min(self.n_a, self.n_b), self.trials, self.seed):
            drawn = self._large.fit(keep)
            yield (drawn, self._small) if self.subsampled == "a" else (self._small, drawn)


def matched(a: Any, b: Any, trials: int = TRIALS, seed: int = 0) -> Matched:
    """The matched-sample trials of the embedding sets `a` and `b` ((rows, dims) arrays of the same width)."""
    rows_a, rows_b = _rows(a, "A"), _rows(b, "B")
    if rows_a.shape[1] != rows_b.shape[1]:
        raise ConfigError(f"embeddings A and B differ in width: {rows_a.shape[1]} vs {rows_b.shape[1]}")
    if trials < 1:
        raise ConfigError(f"trials must be at least 1, got {trials}")
    return Matched(rows_a, rows_b, trials, seed)


def _union(a: Gaussian, b: Gaussian) -> Gaussian:
    """The fit of the two samples' rows together, from their fits (pooled scatter plus the between-means term)."""
    n = a.n + b.n
    diff = a.mean - b.mean
    scatter = (a.n - 1) * a.cov + (b.n - 1) * b.cov + (a.n * b.n / n) * np.outer(diff, diff)
    return Gaussian((a.n * a.mean + b.n * b.mean) / n, scatter / (n - 1), n)


def pca_kl_pair(a: Gaussian, b: Gaussian, dim: int = PCA_DIM, ridge: float = RIDGE) -> tuple[float, float, int]:
    """(KL(A||B), KL(B||A), the subspace's dimension) in the leading `dim` principal components of the union
    of the two samples, each projected covariance plus `ridge` times the union's mean projected eigenvalue."""
    width = len(a.mean)
    k = min(dim, width, a.n + b.n - 1)
    union = _union(a, b)
    eigenvalues, basis = scipy.linalg.eigh(union.cov, subset_by_index=[width - k, width - 1])
    offset = ridge * float(eigenvalues.mean()) * np.eye(k)

    def project(g: Gaussian) -> Gaussian:
        return Gaussian(basis.T @ (g.mean - union.mean), _symmetric(basis.T @ g.cov @ basis) + offset, g.n)

    pa, pb = project(a), project(b)
    return gaussian_kl(pa, pb), gaussian_kl(pb, pa), k


def alignment(a: Any, b: Any, trials: int = TRIALS, seed: int = 0, *, fid: bool = True, kl: bool = True,
              dim: int = PCA_DIM, ridge: float = RIDGE) -> Alignment:
    """FID (with `fid`) and PCA-KL (with `kl`) between the embedding sets `a` and `b` ((rows, dims) arrays)
    over `trials` seeded matched-sample trials (see the module docstring)."""
    if dim < 1:
        raise ConfigError(f"the PCA dimension must be at least 1, got {dim}")
    if ridge < 0:
        raise ConfigError(f"the covariance ridge must not be negative, got {ridge}")
    trial = matched(a, b, trials, seed)
    fids: list[float] = []
    kls: list[tuple[float, float]] = []
    root: np.ndarray | None = None
    used = 0
    for ga, gb in trial.pairs():
        if fid:
            fixed, drawn = (gb, ga) if trial.subsampled == "a" else (ga, gb)
            root = psd_root(fixed.cov) if root is None else root
            fids.append(frechet_distance(fixed, drawn, root))
        if kl:
            ab, ba, used = pca_kl_pair(ga, gb, dim, ridge)
            kls.append((ab, ba))
    n_a, n_b = trial.n_a, trial.n_b
    stats: dict[str, Any] = {"fid": Spread.of(fids)} if fid else {}
    if kl:
        stats.update(kl_ab=Spread.of([x for x, _ in kls]), kl_ba=Spread.of([y for _, y in kls]),
                     delta_kl=Spread.of([x - y for x, y in kls]),
                     pca={"fit": PCA_FIT, "dim": dim, "dim_used": used, "ridge": ridge, "ridge_scale": RIDGE_SCALE})
    return Alignment(n_a, n_b, min(n_a, n_b), trial.subsampled, trials, seed, **stats)


def fid(a: Any, b: Any, trials: int = TRIALS, seed: int = 0) -> Spread:
    """FID between the embedding sets `a` and `b`, mean and spread over `trials` matched-sample trials."""
    result = alignment(a, b, trials, seed, kl=False).fid
    assert result is not None
    return result


def pca_kl(a: Any, b: Any, dim: int = PCA_DIM, trials: int = TRIALS, seed: int = 0,
           ridge: float = RIDGE) -> Alignment:
    """KL(A||B), KL(B||A) and their difference in a `dim`-dimensional PCA subspace over `trials`
    matched-sample trials (the Alignment without FID)."""
    return alignment(a, b, trials, seed, fid=False, dim=dim, ridge=ridge)
