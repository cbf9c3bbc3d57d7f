"""FID and PCA-KL of `compare distribution` against the standard computation on the same embeddings and the
same matched-sample draws.

Data: two seeded sets of embedding-like rows (`--n` x `--d` and `--n_b` x `--d`, float32 like an encoder's
output; a power-law spectrum in random directions, B shifted and rescaled), compared over `--trials` trials
that each draw `--n` rows of B without replacement (so the trials differ) against all of A.

- ours: `fastmmeval.compare.alignment.alignment` (both statistics in one pass), and `fid` / `pca_kl` alone.
- peer FID: what pytorch-fid's `calculate_frechet_distance` does, per trial: numpy's mean and covariance of
  the draw (A's once, as it is the same every trial), `scipy.linalg.sqrtm` of the covariance product (with
  pytorch-fid's offset retry and imaginary-part check), then the formula.
- peer KL: per trial, scikit-learn's PCA fitted exactly on the stacked samples (`svd_solver="covariance_eigh"`,
  its fastest exact solver for tall data), both samples transformed, numpy covariances plus the same ridge
  (times the mean explained variance), and the textbook Gaussian KL (inverse, slogdet) both ways.

Agreement: the largest relative difference over every trial's FID, KL(A||B) and KL(B||A) at most 1e-6.
Ratios (peer seconds / ours: `ratio` for both statistics, `fid_ratio`, `kl_ratio`) are taken within each
round and their median reported, with each round's.
BLAS threads are capped at `--threads` for both sides (on a shared machine, more threads than free cores
make LAPACK's eigen-solvers many times slower). Each of `--rounds` rounds times every contender once; each
one's median seconds and spread ((max - min) / median) are reported.
Prints one JSON line last: {"bench": "compare", "ours_s", "peer", "peer_s", "ratio", "agree", ...}.
Usage: .venv/bin/python bench/bench_compare.py --n 20000 --n_b 25000 --d 1280 --trials 10 --rounds 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections.abc import Callable
from importlib.metadata import version
from typing import Any

import numpy as np
import scipy.linalg
from sklearn.decomposition import PCA
from threadpoolctl import threadpool_limits

from fastmmeval.compare.alignment import alignment, fid, pca_kl, trial_draws


def embeddings(n: int, n_b: int, d: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """A (n, d) and B (n_b, d): Gaussian rows with eigenvalues falling as i^-1.2 along random directions;
    B's spectrum rescaled (0.8-1.25 per direction) and its mean shifted by half a standard deviation along
    each direction."""
    rng = np.random.default_rng(seed)
    q, _ = np.linalg.qr(rng.standard_normal((d, d)))
    scale = (np.arange(1, d + 1) ** -0.6 / np.sqrt(d)).astype(np.float32)
    a = (rng.standard_normal((n, d), dtype=np.float32) * scale) @ q.astype(np.float32)
    tilt = rng.uniform(0.8, 1.25, d).astype(np.float32)
    shift = (rng.standard_normal(d).astype(np.float32) * scale * np.float32(0.5)) @ q.astype(np.float32)
    b = (rng.standard_normal((n_b, d), dtype=np.float32) * scale * tilt) @ q.astype(np.float32) + shift
    return a, b


def calculate_frechet_distance(mu1: np.ndarray, sigma1: np.ndarray, mu2: np.ndarray, sigma2: np.ndarray,
                               eps: float = 1e-6) -> float:
    """pytorch-fid 0.3.0's calculate_frechet_distance (scipy >= 1.16's sqrtm returns the root alone)."""
    diff = mu1 - mu2
    covmean = scipy.linalg.sqrtm(sigma1.dot(sigma2))
    if not np.isfinite(covmean).all():
        offset = np.eye(sigma1.shape[0]) * eps
        covmean = scipy.linalg.sqrtm((sigma1 + offset).dot(sigma2 + offset))
    if np.iscomplexobj(covmean):
        if not np.allclose(np.diagonal(covmean).imag, 0, atol=1e-3):
            raise ValueError(f"Imaginary component {np.max(np.abs(covmean.imag))}")
        covmean = covmean.real
    return float(diff.dot(diff) + np.trace(sigma1) + np.trace(sigma2) - 2 * np.trace(covmean))


def peer_fid(a: np.ndarray, b: np.ndarray, keeps: list[np.ndarray]) -> list[float]:
    """FID per trial, the pytorch-fid way on float64 features."""
    a64 = a.astype(np.float64)
    mu1, sigma1 = np.mean(a64, axis=0), np.cov(a64, rowvar=False)
    out = []
    for keep in keeps:
        drawn = b[keep].astype(np.float64)
        out.append(calculate_frechet_distance(mu1, sigma1, np.mean(drawn, axis=0), np.cov(drawn, rowvar=False)))
    return out


def gaussian_kl(mu_p: np.ndarray, cov_p: np.ndarray, mu_q: np.ndarray, cov_q: np.ndarray) -> float:
    """KL(N(mu_p, cov_p) || N(mu_q, cov_q)), textbook formula."""
    inv_q, diff = np.linalg.inv(cov_q), mu_q - mu_p
    logdet = np.linalg.slogdet(cov_q)[1] - np.linalg.slogdet(cov_p)[1]
    return float(0.5 * (np.trace(inv_q @ cov_p) + diff @ inv_q @ diff - len(mu_p) + logdet))


def peer_kl(a: np.ndarray, b: np.ndarray, keeps: list[np.ndarray], dim: int, ridge: float) -> list[tuple[float,
                                                                                                         float]]:
    """(KL(A||B), KL(B||A)) per trial after scikit-learn's exact PCA on the stacked samples."""
    a64 = a.astype(np.float64)
    out = []
    for keep in keeps:
        drawn = b[keep].astype(np.float64)
        pca = PCA(n_components=dim, svd_solver="covariance_eigh").fit(np.vstack([a64, drawn]))
        offset = ridge * pca.explained_variance_.mean() * np.eye(dim)
        fits = [(p.mean(axis=0), np.cov(p, rowvar=False) + offset) for p in (pca.transform(a64), pca.transform(drawn))]
        out.append((gaussian_kl(*fits[0], *fits[1]), gaussian_kl(*fits[1], *fits[0])))
    return out


def timed(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[Any, float]:
    start = time.perf_counter()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - start


def relative(x: list[float], y: list[float]) -> float:
    """The largest |x - y| / |y| over paired values."""
    return float(max(abs(p - q) / abs(q) for p, q in zip(x, y, strict=True)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=20_000, help="rows of A, and of each trial's draw of B")
    parser.add_argument("--n_b", type=int, default=25_000, help="rows of B (more than --n: the trials differ)")
    parser.add_argument("--d", type=int, default=1280)
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument("--dim", type=int, default=256, help="PCA dimensions of the KL")
    parser.add_argument("--ridge", type=float, default=1e-3)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1, help="BLAS threads of both sides")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    a, b = embeddings(args.n, args.n_b, args.d, args.seed)
    keeps = trial_draws(args.n_b, args.n, args.trials, args.seed)
    result: dict[str, Any] = {"bench": "compare", "n": args.n, "n_b": args.n_b, "d": args.d, "trials": args.trials,
                              "dim": args.dim, "ridge": args.ridge, "threads": args.threads, "cpus": os.cpu_count(),
                              "load_avg_start": round(os.getloadavg()[0], 1)}
    seconds: dict[str, list[float]] = {k: [] for k in ("ours", "ours_fid", "ours_kl", "peer_fid", "peer_kl")}
    with threadpool_limits(args.threads):
        for r in range(args.rounds):
            ours, s = timed(alignment, a, b, args.trials, args.seed, dim=args.dim, ridge=args.ridge)
            seconds["ours"].append(s)
            ours_fid, s = timed(fid, a, b, args.trials, args.seed)
            seconds["ours_fid"].append(s)
            ours_kl, s = timed(pca_kl, a, b, args.dim, args.trials, args.seed, args.ridge)
            seconds["ours_kl"].append(s)
            fids, s = timed(peer_fid, a, b, keeps)
            seconds["peer_fid"].append(s)
            kls, s = timed(peer_kl, a, b, keeps, args.dim, args.ridge)
            seconds["peer_kl"].append(s)
            print(f"round {r + 1}: " + ", ".join(f"{k} {v[-1]:.2f} s" for k, v in seconds.items()), flush=True)
    median = {k: statistics.median(v) for k, v in seconds.items()}
    peer_s = median["peer_fid"] + median["peer_kl"]
    # Ratios within a round (the machine's load drifts between rounds), then their median.
    per = {k: np.asarray(v) for k, v in seconds.items()}
    rounds = {"ratio": (per["peer_fid"] + per["peer_kl"]) / per["ours"], "fid_ratio": per["peer_fid"] / per["ours_fid"],
              "kl_ratio": per["peer_kl"] / per["ours_kl"]}
    peer_ab, peer_ba = [x for x, _ in kls], [y for _, y in kls]
    rel = {"fid": relative(ours.fid.values, fids), "kl_ab": relative(ours.kl_ab.values, peer_ab),
           "kl_ba": relative(ours.kl_ba.values, peer_ba), "fid_alone": relative(ours_fid.values, fids),
           "kl_ab_alone": relative(ours_kl.kl_ab.values, peer_ab),
           "kl_ba_alone": relative(ours_kl.kl_ba.values, peer_ba)}
    result.update(
        ours="fastmmeval.compare alignment (FID + PCA-KL in one pass, float64, eigh-based)",
        ours_s=round(median["ours"], 3),
        peer=f"numpy {version('numpy')} cov + scipy {version('scipy')} sqrtm (pytorch-fid's formula); "
             f"scikit-learn {version('scikit-learn')} PCA covariance_eigh + textbook KL",
        peer_s=round(peer_s, 3), **{k: round(float(np.median(v)), 1) for k, v in rounds.items()},
        ratio_rounds={k: [round(float(x), 2) for x in v] for k, v in rounds.items()},
        seconds_median={k: round(v, 3) for k, v in median.items()},
        seconds_spread={k: round((max(v) - min(v)) / statistics.median(v), 3) for k, v in seconds.items()},
        seconds_rounds={k: [round(x, 3) for x in v] for k, v in seconds.items()},
        fid_mean=ours.fid.mean, fid_std=ours.fid.std, kl_ab_mean=ours.kl_ab.mean, kl_ba_mean=ours.kl_ba.mean,
        delta_kl_mean=ours.delta_kl.mean, max_rel_diff={k: float(f"{v:.2e}") for k, v in rel.items()},
        agree=bool(max(rel.values()) <= 1e-6), load_avg_end=round(os.getloadavg()[0], 1),
    )
    print(json.dumps(result))


if __name__ == "__main__":
    main()
