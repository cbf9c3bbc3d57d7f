"""`compare distribution`: FID and PCA-KL against their closed forms and against the standard computation
(numpy covariances, scipy's sqrtm, scikit-learn's PCA), the encoders, the label distribution through a
scripted labeler, and the flow on the demo photos against a crop of them and against digits."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import scipy.linalg
from aiohttp import web
from api_fixtures import FakeAPI
from live_llm import chat_reply, user_text
from PIL import Image
from sklearn.decomposition import PCA

from fastmmeval.cli import main
from fastmmeval.compare.alignment import (
    Gaussian,
    alignment,
    fid,
    fit_gaussian,
    frechet_distance,
    gaussian_kl,
    pca_kl,
    trial_draws,
)
from fastmmeval.compare.distribution import distribution
from fastmmeval.compare.encoders import image_encoder
from fastmmeval.compare.labels import label_distribution, normal_label
from fastmmeval.errors import ConfigError
from fastmmeval.live.roles import Role, RoleSpec, build_roles
from fastmmeval.live.store import StageCache
from fastmmeval.tasks import resolve

KEY_ENV = "FMM_COMPARE_TEST_KEY"


def random_cov(rng: np.random.Generator, d: int, scale: float = 1.0) -> np.ndarray:
    """A well-conditioned random SPD matrix (random eigenvectors, eigenvalues in [0.2, 2] times `scale`)."""
    q, _ = np.linalg.qr(rng.standard_normal((d, d)))
    return scale * (q * rng.uniform(0.2, 2.0, d)) @ q.T


def closed_form_fid(mu_a: np.ndarray, cov_a: np.ndarray, mu_b: np.ndarray, cov_b: np.ndarray) -> float:
    """The Fréchet distance of two Gaussians by its definition (scipy's principal matrix square root)."""
    root = scipy.linalg.sqrtm(cov_a @ cov_b).real
    return float((mu_a - mu_b) @ (mu_a - mu_b) + np.trace(cov_a) + np.trace(cov_b) - 2 * np.trace(root))


def closed_form_kl(mu_p: np.ndarray, cov_p: np.ndarray, mu_q: np.ndarray, cov_q: np.ndarray) -> float:
    """KL(N(mu_p, cov_p) || N(mu_q, cov_q)) by its textbook formula (inverse and log-determinants)."""
    inv_q, diff = np.linalg.inv(cov_q), mu_q - mu_p
    logdet = np.linalg.slogdet(cov_q)[1] - np.linalg.slogdet(cov_p)[1]
    return float(0.5 * (np.trace(inv_q @ cov_p) + diff @ inv_q @ diff - len(mu_p) + logdet))


def pytorch_fid_distance(x: np.ndarray, y: np.ndarray) -> float:
    """pytorch-fid's calculate_frechet_distance on numpy's mean and covariance of the two samples."""
    mu1, mu2 = x.mean(axis=0), y.mean(axis=0)
    s1, s2 = np.cov(x, rowvar=False), np.cov(y, rowvar=False)
    covmean = scipy.linalg.sqrtm(s1.dot(s2))
    if not np.isfinite(covmean).all():
        offset = np.eye(s1.shape[0]) * 1e-6
        covmean = scipy.linalg.sqrtm((s1 + offset).dot(s2 + offset))
    covmean = covmean.real
    diff = mu1 - mu2
    return float(diff.dot(diff) + np.trace(s1) + np.trace(s2) - 2 * np.trace(covmean))


def sklearn_pca_kl(x: np.ndarray, y: np.ndarray, dim: int, ridge: float) -> tuple[float, float]:
    """KL both ways after scikit-learn's exact PCA on the stacked samples, the same ridge on both fits."""
    pca = PCA(n_components=dim, svd_solver="full").fit(np.vstack([x, y]))
    offset = ridge * pca.explained_variance_.mean() * np.eye(dim)
    px, py = pca.transform(x), pca.transform(y)
    fits = [(p.mean(axis=0), np.cov(p, rowvar=False) + offset) for p in (px, py)]
    return closed_form_kl(*fits[0], *fits[1]), closed_form_kl(*fits[1], *fits[0])


def test_fid_of_large_samples_is_the_closed_form_of_their_gaussians() -> None:
    rng = np.random.default_rng(0)
    d = 6
    mu_a, mu_b = rng.standard_normal(d), rng.standard_normal(d) * 0.5
    cov_a, cov_b = random_cov(rng, d), random_cov(rng, d, 0.5)
    a = rng.multivariate_normal(mu_a, cov_a, size=200_000)
    b = rng.multivariate_normal(mu_b, cov_b, size=200_000)
    truth = closed_form_fid(mu_a, cov_a, mu_b, cov_b)
    assert fid(a, b, trials=1).mean == pytest.approx(truth, rel=0.02)
    same = fid(a[:100_000], a[100_000:], trials=1).mean
    assert abs(same) < 1e-3  # two samples of one Gaussian


def test_fid_equals_pytorch_fids_computation_on_the_same_samples_also_when_singular() -> None:
    rng = np.random.default_rng(1)
    for n, d in ((500, 20), (12, 20)):  # the second: fewer rows than dimensions, singular covariances
        x = rng.standard_normal((n, d))
        y = rng.standard_normal((n, d)) @ random_cov(rng, d) + 0.3
        ours = frechet_distance(fit_gaussian(x), fit_gaussian(y))
        assert ours == pytest.approx(pytorch_fid_distance(x, y), rel=1e-9 if n > d else 1e-6)


def test_kl_of_large_samples_is_the_closed_form_of_their_gaussians_both_ways() -> None:
    rng = np.random.default_rng(2)
    d = 5
    mu_a, mu_b = rng.standard_normal(d) * 0.3, np.zeros(d)
    cov_a, cov_b = random_cov(rng, d, 0.5), random_cov(rng, d)
    a = rng.multivariate_normal(mu_a, cov_a, size=200_000)
    b = rng.multivariate_normal(mu_b, cov_b, size=200_000)
    result = pca_kl(a, b, dim=d, trials=1, ridge=0.0)  # all d components: PCA only rotates, KL is unchanged
    ab, ba = closed_form_kl(mu_a, cov_a, mu_b, cov_b), closed_form_kl(mu_b, cov_b, mu_a, cov_a)
    assert result.kl_ab.mean == pytest.approx(ab, rel=0.02)
    assert result.kl_ba.mean == pytest.approx(ba, rel=0.02)
    assert result.delta_kl.mean == pytest.approx(ab - ba, abs=0.02 * (ab + ba))
    assert result.fid is None and result.pca["dim_used"] == d


def test_kl_in_the_pca_subspace_is_the_kl_of_the_marginals_there() -> None:
    rng = np.random.default_rng(3)
    k, d, n = 3, 8, 100_000
    spread = np.r_[np.full(k, 3.0), np.full(d - k, 0.05)]  # the union's variance lies in the first k coordinates
    mu_a = np.r_[0.4, -0.2, 0.1, np.zeros(d - k)]
    scale_b = np.r_[1.0, 0.6, 1.3, np.ones(d - k)]
    a = mu_a + rng.standard_normal((n, d)) * spread
    b = rng.standard_normal((n, d)) * spread * scale_b
    result = pca_kl(a, b, dim=k, trials=1, ridge=0.0)
    cov_a, cov_b = np.diag(spread[:k] ** 2), np.diag((spread * scale_b)[:k] ** 2)
    assert result.kl_ab.mean == pytest.approx(closed_form_kl(mu_a[:k], cov_a, np.zeros(k), cov_b), rel=0.03)
    assert result.kl_ba.mean == pytest.approx(closed_form_kl(np.zeros(k), cov_b, mu_a[:k], cov_a), rel=0.03)


def test_a_compact_set_inside_a_broad_one_has_negative_delta_kl() -> None:
    """What the sign says under Gaussian fits: KL(A||B) is small when A sits inside B, KL(B||A) large."""
    rng = np.random.default_rng(4)
    compact, broad = rng.standard_normal((5000, 10)) * 0.3, rng.standard_normal((5000, 10))
    result = pca_kl(compact, broad, dim=10, trials=1)
    assert result.kl_ab.mean < result.kl_ba.mean and result.delta_kl.mean < 0


def test_each_trial_compares_a_draw_of_the_larger_set_with_the_whole_smaller_one() -> None:
    rng = np.random.default_rng(5)
    a = rng.standard_normal((300, 12))
    b = rng.standard_normal((700, 12)) @ random_cov(rng, 12) + 0.2
    result = alignment(a, b, trials=4, seed=7, dim=5)
    assert (result.n_a, result.n_b, result.n_per_trial, result.subsampled) == (300, 700, 300, "b")
    for t, keep in enumerate(trial_draws(700, 300, 4, seed=7)):
        assert result.fid.values[t] == pytest.approx(pytorch_fid_distance(a, b[keep]), rel=1e-9)
        ab, ba = sklearn_pca_kl(a, b[keep], dim=5, ridge=1e-3)
        assert (result.kl_ab.values[t], result.kl_ba.values[t]) == pytest.approx((ab, ba), rel=1e-8)
    assert result.fid.std == pytest.approx(np.std(result.fid.values, ddof=1)) and result.fid.std > 0
    assert alignment(b, a, trials=4, seed=7, dim=5).subsampled == "a"
    again = alignment(a, b, trials=4, seed=7, dim=5)
    assert again.fid.values == result.fid.values  # seeded
    same_size = alignment(a, b[:300], trials=3, dim=5)
    assert same_size.subsampled is None and same_size.fid.std == pytest.approx(0.0, abs=1e-12)


def test_kl_of_fewer_rows_than_dimensions_needs_the_ridge() -> None:
    rng = np.random.default_rng(6)
    a, b = rng.standard_normal((10, 30)), rng.standard_normal((10, 30)) + 1
    result = pca_kl(a, b, dim=256, trials=2)
    assert result.pca["dim_used"] == 19  # the union's 20 rows span 19 dimensions around their mean
    assert np.isfinite(result.kl_ab.mean) and np.isfinite(result.kl_ba.mean)
    with pytest.raises(ConfigError, match="singular"):
        pca_kl(a, b, dim=256, trials=1, ridge=0.0)
    singular = Gaussian(np.zeros(2), np.zeros((2, 2)), 3)
    with pytest.raises(ConfigError, match="positive ridge"):
        gaussian_kl(singular, singular)


def test_bad_embeddings_are_refused() -> None:
    with pytest.raises(ConfigError, match="differ in width"):
        fid(np.zeros((5, 3)), np.zeros((5, 4)))
    with pytest.raises(ConfigError, match="at least 2 rows"):
        fid(np.zeros((1, 3)), np.zeros((5, 3)))
    with pytest.raises(ConfigError, match="NaN"):
        fid(np.full((3, 3), np.nan), np.zeros((5, 3)))


def tiny_clip(folder: Path) -> Any:
    """A random-weight CLIPModel checkpoint in the layout of openai/clip-vit-large-patch14-336 (the vision
    config carries the projection size), with its image processor; returns the model."""
    import torch
    from transformers import CLIPConfig, CLIPImageProcessor, CLIPModel

    torch.manual_seed(0)
    small = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2}
    config = CLIPConfig(projection_dim=16, vision_config={**small, "projection_dim": 16, "image_size": 32,
                                                          "patch_size": 8},
                        text_config={**small, "projection_dim": 16, "vocab_size": 99, "max_position_embeddings": 16,
                                     "bos_token_id": 0, "eos_token_id": 1, "pad_token_id": 1})
    model = CLIPModel(config).eval()
    model.save_pretrained(folder)
    CLIPImageProcessor(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32}).save_pretrained(folder)
    return model


def test_clip_encoder_gives_the_checkpoints_image_features(tmp_path: Path) -> None:
    import torch
    from transformers import CLIPImageProcessor

    model = tiny_clip(tmp_path / "clip")
    images = [Image.new("RGB", (40, 30), (i * 60, 20, 200 - i * 50)) for i in range(3)]
    ours = image_encoder(f"clip={tmp_path / 'clip'}").encode(images)
    pixels = CLIPImageProcessor.from_pretrained(tmp_path / "clip")(images=images, return_tensors="pt")["pixel_values"]
    with torch.inference_mode():
        features = model.get_image_features(pixel_values=pixels)
    expected = (features if torch.is_tensor(features) else features.pooler_output).numpy()
    np.testing.assert_allclose(ours, expected, rtol=1e-5, atol=1e-6)


def test_an_incomplete_clip_folder_is_named_with_what_it_lacks(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no such folder"):
        image_encoder(f"clip={tmp_path / 'nowhere'}")
    (tmp_path / "clip").mkdir()
    (tmp_path / "clip" / "config.json").write_text("{}")
    with pytest.raises(ConfigError, match=r"lacks preprocessor_config.json, the weights \(model.safetensors"):
        image_encoder(f"clip={tmp_path / 'clip'}")
    with pytest.raises(ConfigError, match=r"'clip': expected efficientnet-lite0 .* or clip=DIR"):
        image_encoder("clip")


CROP_YAML = """
task: demo_objects_crop
dataset: {data_files: {test: objects.jsonl}}
split: test
doc_id: id
doc_to_messages:
  - role: user
    content:
      - image: image
      - text: "{question}\\n{options}\\nAnswer with the option's letter from the given choices directly."
output_type: multiple_choice
choices: choices
target: answer
metrics: [accuracy]
"""


@pytest.fixture(scope="module")
def crop_tasks(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder with `demo_objects_crop` (demo_objects' questions on the central 70% of each photo) and
    `colors_b` (colour questions whose answers differ from demo_objects')."""
    folder = tmp_path_factory.mktemp("crop")
    (folder / "images").mkdir()
    task = resolve(["demo_objects"])[0]
    rows = []
    for ref in task.doc_refs():
        doc = task.doc(ref)
        image = task.request(doc, seed=0).images[0]
        w, h = image.size
        box = (int(0.15 * w), int(0.15 * h), int(0.85 * w), int(0.85 * h))
        image.crop(box).save(folder / "images" / f"{ref.id}.png")
        rows.append({**{k: doc.fields[k] for k in ("id", "question", "choices", "answer", "category")},
                     "image": f"images/{ref.id}.png"})
    (folder / "objects.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (folder / "crop.yaml").write_text(CROP_YAML)
    colours = ["Orange", "Orange", "Green", "Purple", "Red", "Red"]
    rows = [{"id": f"c{i}", "image": f"images/{rows[i]['id']}.png", "question": "What colour is it?",
             "choices": [c, "Grey", "White", "Brown"], "answer": "A", "category": "color"}
            for i, c in enumerate(colours)]
    (folder / "colors.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (folder / "colors.yaml").write_text(CROP_YAML.replace("demo_objects_crop", "colors_b")
                                        .replace("objects.jsonl", "colors.jsonl"))
    return folder


def test_the_crop_of_the_demo_photos_is_closer_to_them_than_the_digits(crop_tasks: Path, tmp_path: Path,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    crop = distribution("demo_objects", "demo_objects_crop", "efficientnet-lite0", tmp_path / "crop", trials=10,
                        pca_dim=256, include_paths=[crop_tasks], progress=False)
    assert main(["compare", "distribution", "--tasks", "demo_objects,demo_digits", "--out", str(tmp_path / "digits"),
                 "--no_progress"]) == 0
    assert "FID" in capsys.readouterr().out
    digits = json.loads((tmp_path / "digits" / "distribution.json").read_text())
    photos = crop.images[0]
    assert (photos.docs, photos.images, photos.skipped) == (31, 19, 0)  # 19 photos, some asked about twice
    assert crop.alignment.subsampled is None and digits["alignment"]["subsampled"] == "b"
    assert digits["alignment"]["n_per_trial"] == 19 and digits["alignment"]["fid"]["std"] > 0
    assert crop.alignment.fid.mean < 0.5 * digits["alignment"]["fid"]["mean"]
    assert crop.alignment.pca["dim_used"] == 37 and digits["alignment"]["pca"]["ridge"] == 1e-3
    assert crop.encoder["encoder"] == digits["encoder"]["encoder"] == "efficientnet-lite0" and crop.normalized
    written = json.loads((tmp_path / "crop" / "distribution.json").read_text())
    assert written["alignment"]["fid"]["values"] == crop.alignment.fid.values
    assert (tmp_path / "crop" / "distribution.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def labeler_server(fail_on: str) -> FakeAPI:
    """A scripted labeler: the correct answer's option text, shouted with a full stop (so the labels are
    normalized); an HTTP 500 for questions whose answer is `fail_on`."""

    def script(_: int, body: dict[str, Any]) -> web.Response:
        answer = re.search(r"Correct answer: [A-D]\. (.+)", user_text(body)).group(1).strip()
        if answer == fail_on:
            return web.Response(status=500, text="down")
        return chat_reply(json.dumps({"label": f" {answer.upper()}."}))

    return FakeAPI(script)


def labeler(server: FakeAPI) -> Role:
    args = {"base_url": server.url, "model": "scripted", "api_key_env": KEY_ENV, "cache_dir": "off",
            "max_retries": "0", "backoff": "0.01", "timeout": "10"}
    return build_roles([RoleSpec("labeler", "openai", args, max_new_tokens=64)])["labeler"]


def test_label_distributions_of_one_category_their_tops_and_overlap(crop_tasks: Path, tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, "unused")
    a, b = resolve(["demo_objects", "colors_b"], [crop_tasks])
    cache = StageCache(tmp_path / "cache.sqlite")
    with labeler_server(fail_on="Black") as server:
        report = label_distribution(a, b, "color", labeler(server), cache, workers=4, progress=False)
        assert len(server.calls) == 5 + 4  # colors_b asks two questions twice each: the second ask is cached
        assert report.a.counts == {"orange": 2, "blue": 1, "red": 1}  # horse_color (Black) failed
        assert (report.a.questions, report.a.labelled, report.a.failed) == (5, 4, 1)
        assert report.a.failures[0]["doc"] == "horse_color" and "500" in report.a.failures[0]["reason"]
        assert report.b.counts == {"orange": 2, "red": 2, "green": 1, "purple": 1}
        assert (report.a.vocabulary, report.b.vocabulary) == (3, 4)
        assert report.a.top[0] == ["orange", 2, 0.5] and [t[0] for t in report.b.top] == ["orange", "red", "green",
                                                                                          "purple"]
        assert report.top_shared == ["orange", "red"] and report.shared_labels == 2
        assert report.vocabulary_jaccard == pytest.approx(2 / 5)
        again = label_distribution(a, b, "color", labeler(server), cache, workers=4, progress=False)
        assert len(server.calls) == 5 + 4 + 1  # only the failed call is asked again
        assert again.to_json() == report.to_json()
    cache.close()
    with pytest.raises(ConfigError, match="no doc has category 'colour'"):
        label_distribution(a, b, "colour", labeler(server), StageCache(tmp_path / "c2.sqlite"), progress=False)
    assert normal_label("  North-West  Of.\n") == "north-west of"


def test_the_cli_adds_the_label_distribution_to_the_report(crop_tasks: Path, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, "unused")
    with labeler_server(fail_on="none") as server:
        args = (f"base_url={server.url},model=scripted,api_key_env={KEY_ENV},cache_dir=off,max_retries=0,"
                "backoff=0.01,timeout=10")
        assert main(["compare", "distribution", "--tasks", "demo_objects,colors_b", "--include_path", str(crop_tasks),
                     "--trials", "2", "--pca_dim", "8", "--labels_category", "color", "--labeler", "openai",
                     "--labeler_args", args, "--out", str(tmp_path), "--no_progress"]) == 0
    report = json.loads((tmp_path / "distribution.json").read_text())
    assert report["labels"]["a"]["counts"] == {"orange": 2, "black": 1, "blue": 1, "red": 1}
    assert report["labels"]["prompt"] == "label@1"
    assert report["alignment"]["pca"]["dim_used"] == 5  # colors_b shows 3 photos: 3 + 3 rows span 5 dimensions
    assert (tmp_path / "labels_cache.sqlite").is_file()
    assert main(["compare", "distribution", "--tasks", "demo_objects,colors_b", "--labels_category", "color",
                 "--out", str(tmp_path)]) == 1
