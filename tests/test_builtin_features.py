"""Built-in image features (issue 42): colour, texture and shape statistics of each image, a fixed column set,
offered at ``proxima create --builtin-features``, ``proxima features STUDY --builtin``, ``add-items`` and the New
study form (a worker computes them, then the learners are rebuilt from them); the study records that they are
built-in and the dashboard and the CLI say they are weak."""
from __future__ import annotations

import io
import json

import numpy as np
import pytest
from helpers import run_worker, upload_study, zip_of
from PIL import Image, ImageDraw

from engine.features import feature_neighbors, feature_space
from engine.image_features import COLUMNS, ImageFeatureError, image_feature_matrix, image_features
from workers.jobs.learners import fresh_learners
from workers.store import keys
from workers.store.studies import features_version, get_items, get_study

RED, BLUE = (200, 30, 40), (30, 60, 200)


def picture(colour: tuple[int, int, int], elongated: bool, size: int = 90, fmt: str = "PNG",
            stripes: bool = False, seed: int = 0) -> bytes:
    """A shape of ``colour`` on a light ground: a wide ellipse or a disc, plain or striped, a little noise."""
    image = Image.new("RGB", (size, size), (235, 235, 230))
    draw = ImageDraw.Draw(image)
    box = (10, 35, 80, 55) if elongated else (20, 20, 70, 70)
    draw.ellipse(box, fill=colour)
    if stripes:
        for x in range(0, size, 6):
            draw.line([(x, 0), (x, size)], fill=(20, 20, 20), width=2)
    pixels = np.asarray(image, np.float64) + np.random.default_rng(seed).normal(0, 3, (size, size, 3))
    out = io.BytesIO()
    Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8)).save(out, fmt)
    return out.getvalue()


def _set() -> list[bytes]:
    """Twelve pictures: items 0-5 red, 6-11 blue; even items discs, odd items wide ellipses."""
    return [picture(RED if i < 6 else BLUE, elongated=bool(i % 2), seed=i) for i in range(12)]


def test_the_columns_are_fixed_and_each_image_gives_one_finite_row():
    X = image_feature_matrix(_set())
    assert X.shape == (12, len(COLUMNS)) == (12, 49)
    assert np.isfinite(X).all()
    assert len(set(COLUMNS)) == len(COLUMNS)
    assert np.array_equal(image_feature_matrix(_set()), X)  # the same pixels, the same numbers


def test_colour_and_shape_columns_say_what_they_name():
    X = image_feature_matrix(_set())
    col = {name: X[:, c] for c, name in enumerate(COLUMNS)}
    # red lies at larger a* and b* than blue, shape for shape (items i and i + 6); blue's b* is negative
    assert (col["colour_a_mean"][:6] > col["colour_a_mean"][6:]).all()
    assert (col["colour_b_mean"][6:] < 0).all() and (col["colour_b_mean"][:6] > 0).all()
    # the wide ellipses (odd items) are elongated and lie along x (cos 2 theta > 0); the discs are not
    assert (col["shape_elongation"][1::2] > 0.5).all() and (col["shape_elongation"][::2] < 0.1).all()
    assert (col["shape_orientation_cos"][1::2] > 0.5).all()
    assert (np.abs(col["shape_centre_x"] - 0.5) < 0.05).all()
    striped = image_features(picture(RED, False, stripes=True))
    plain = image_features(picture(RED, False))
    assert striped[COLUMNS.index("shape_edge_density")] > plain[COLUMNS.index("shape_edge_density")]
    assert striped[COLUMNS.index("texture_orientation_0")] > 0.8  # vertical stripes: horizontal gradients


def test_each_picture_is_nearest_a_picture_of_its_colour_and_shape():
    X = image_feature_matrix(_set())
    near = feature_neighbors(feature_space(X, 12), 1)[:, 0]
    for i, j in enumerate(near.tolist()):
        assert (i < 6) == (j < 6) and i % 2 == j % 2, (i, j)


def test_a_jpeg_a_transparent_png_and_a_sliver_are_read_and_bytes_that_are_no_image_are_refused():
    assert np.isfinite(image_features(picture(RED, True, fmt="JPEG"))).all()
    clear = Image.new("RGBA", (40, 40), (0, 0, 0, 0))
    ImageDraw.Draw(clear).rectangle([5, 10, 20, 30], fill=(0, 200, 0, 255))
    out = io.BytesIO()
    clear.save(out, "PNG")
    row = image_features(out.getvalue())
    assert abs(row[COLUMNS.index("shape_foreground")] - 16 * 21 / 1600) < 0.02  # the opaque part, not the frame
    out = io.BytesIO()
    Image.new("RGB", (200, 2), (9, 9, 9)).save(out, "PNG")
    assert np.isfinite(image_features(out.getvalue())).all()
    with pytest.raises(ImageFeatureError, match="image 1: not a readable image"):
        image_feature_matrix([picture(RED, True), b"not an image"])


@pytest.fixture
def pictures(tmp_path):
    folder = tmp_path / "pictures"
    folder.mkdir()
    for i, data in enumerate(_set()):
        (folder / f"p{i:02d}.png").write_bytes(data)
    (tmp_path / "study.yaml").write_text("name: Pictures\npool_size: 5\n")
    return tmp_path


def test_create_with_builtin_features_records_them_as_builtin_and_weak(cli, conn, pictures):
    result = cli("create", str(pictures / "study.yaml"), "--items", str(pictures / "pictures"), "--id", "pics",
                 "--builtin-features")
    assert result.exit_code == 0, result.output
    assert "49 built-in feature(s) on 12 items" in result.output and "weak" in result.output
    items = get_items(conn, "pics")
    assert sorted(items[0].features) == sorted(COLUMNS)
    assert features_version(conn, "pics")[0] == "builtin-v1"
    learner = next(iter(fresh_learners(conn, get_study(conn, "pics")).values()))
    assert learner.planner.prior_ is not None  # the default learner starts from them
    listing = cli("studies")
    assert "features: built-in image statistics (weak)" in listing.output


def test_features_builtin_replaces_a_file_and_is_refused_with_a_file_or_for_texts(cli, conn, pictures, tmp_path):
    assert cli("create", str(pictures / "study.yaml"), "--items", str(pictures / "pictures"),
               "--id", "pics").exit_code == 0
    result = cli("features", "pics", "--builtin")
    assert result.exit_code == 0, result.output
    assert features_version(conn, "pics")[0] == "builtin-v1"
    (tmp_path / "f.csv").write_text("id,x\n" + "".join(f"p{i:02d},{i}\n" for i in range(12)))
    both = cli("features", "pics", str(tmp_path / "f.csv"), "--builtin")
    assert both.exit_code != 0 and "not both" in both.output
    assert cli("features", "pics").exit_code != 0
    (tmp_path / "texts.csv").write_text("id,text\n" + "".join(f"s{i},Sentence {i}.\n" for i in range(5)))
    texts = cli("create", str(pictures / "study.yaml"), "--items", str(tmp_path / "texts.csv"), "--builtin-features")
    assert texts.exit_code != 0
    assert "built-in features are computed from images, and 5 item(s) are not images" in texts.output


def test_added_images_get_builtin_features_of_the_same_columns(cli, conn, pictures, tmp_path):
    assert cli("create", str(pictures / "study.yaml"), "--items", str(pictures / "pictures"), "--id", "pics",
               "--builtin-features").exit_code == 0
    more = tmp_path / "more"
    more.mkdir()
    (more / "new.png").write_bytes(picture(BLUE, True, seed=99))
    result = cli("add-items", "pics", "--items", str(more), "--builtin-features")
    assert result.exit_code == 0, result.output
    assert sorted(get_items(conn, "pics")[-1].features) == sorted(COLUMNS)


def test_the_form_computes_builtin_features_in_a_worker_and_the_dashboard_says_they_are_weak(researcher_client,
                                                                                             conn):
    archive = zip_of({f"p{i:02d}.png": data for i, data in enumerate(_set())})
    response = upload_study(researcher_client, archive, "pictures.zip", name="Form pictures", algorithm="duels",
                            builtin_features="1")
    assert response.status_code == 302, response.get_data(as_text=True)
    sid = response.headers["Location"].rstrip("/").split("/")[-1]
    assert get_items(conn, sid)[0].features is None  # not in the request: a worker computes them
    waiting = researcher_client.get(f"/api/studies/{sid}/stats").get_json()
    assert "being computed" in waiting["features"]["sentence"]
    run_worker(conn)  # the first update pass, then the features job (which rebuilds the learners itself)
    assert sorted(get_items(conn, sid)[0].features) == sorted(COLUMNS)
    assert features_version(conn, sid)[0] == "builtin-v1"
    assert json.loads(conn.hget(keys.engine_stats(sid), keys.FEATURES_JOB_FIELD))["state"] == "finished"
    from workers.jobs.learner_cache import load_learners  # noqa: PLC0415 - numpy-heavy, only here

    learner = next(iter(load_learners(conn, get_study(conn, sid)).values()))
    assert learner.planner.prior_ is not None  # rebuilt from the features
    stats = researcher_client.get(f"/api/studies/{sid}/stats").get_json()
    assert "built-in image statistics" in stats["features"]["sentence"]
    assert "weak" in stats["features"]["sentence"]
    assert stats["rebuild"] is None  # no "rebuild excluding raters" on the Raters tab
    page = researcher_client.get(f"/studies/{sid}?tab=learning").get_data(as_text=True)
    assert "Proxima&#39;s built-in image statistics" in page or "Proxima's built-in image statistics" in page


def test_the_form_refuses_builtin_features_for_texts_in_words(researcher_client, conn):
    rows = "id,text\n" + "".join(f"s{i},Sentence {i}.\n" for i in range(5))
    page = upload_study(researcher_client, rows.encode(), "items.csv", builtin_features="1")
    assert page.status_code == 400
    assert "built-in features are computed from images" in page.get_data(as_text=True)
    assert not conn.smembers(keys.studies())
