"""Large studies as a researcher meets them: items from a .zip on the command line with progress, and a
Learning tab that pages and searches the items instead of listing 50,000 rows."""
from __future__ import annotations

import io
import re
import subprocess
import sys
import zipfile
from pathlib import Path

from PIL import Image

from webapp.dashboard import ITEMS_PER_PAGE
from workers.store.config import StudyConfig
from workers.store.studies import Item, create_study


def test_the_learning_tab_pages_and_searches_the_items(conn, researcher_client):
    n = 2 * ITEMS_PER_PAGE + 17
    items = [Item(id=f"w{i}", kind="text", text=f"word {i}", label="odd" if i % 2 else "even") for i in range(n)]
    create_study(conn, StudyConfig.from_dict({"name": "Words", "question_kind": "triplet"}), items, study_id="words")
    page = researcher_client.get("/studies/words?tab=learning").get_data(as_text=True)
    rows = re.findall(r'<tr data-index="(\d+)">', page)
    assert rows == [str(i) for i in range(ITEMS_PER_PAGE)]
    assert "page 1 of 3" in page and "Next</a>" in page and "Previous</a>" not in page
    last = researcher_client.get("/studies/words?tab=learning&page=3").get_data(as_text=True)
    assert re.findall(r'<tr data-index="(\d+)">', last) == [str(i) for i in range(2 * ITEMS_PER_PAGE, n)]
    # a search finds by id, text or label, in any case, and keeps each item's own index
    found = researcher_client.get("/studies/words?tab=learning&q=WORD 41").get_data(as_text=True)
    indices = re.findall(r'<tr data-index="(\d+)">', found)
    assert indices == ["41"] + [str(i) for i in range(410, n)]
    assert "8 of 417 items" in found
    odd = researcher_client.get("/studies/words?tab=learning&q=odd")
    assert len(re.findall(r"<tr data-index=", odd.get_data(as_text=True))) == ITEMS_PER_PAGE
    # every id, for naming neighbours that are not on the page
    ids = researcher_client.get("/studies/words/items.json").get_json()["ids"]
    assert ids == [f"w{i}" for i in range(n)]
    # pages that do not exist say so
    assert researcher_client.get("/studies/words?tab=learning&page=4").status_code == 404
    assert researcher_client.get("/studies/words?tab=learning&page=two").status_code == 400


def test_proxima_create_takes_a_zip_and_says_what_it_read(tmp_path, redis_url):
    buf = io.BytesIO()
    Image.new("RGB", (8, 8), (200, 10, 10)).save(buf, "PNG")
    with zipfile.ZipFile(tmp_path / "items.zip", "w") as archive:
        for i in range(5000):
            archive.writestr(f"img{i:05}.png", buf.getvalue())
    (tmp_path / "study.yaml").write_text("name: zipped\nquestion_kind: triplet\n")
    proxima = Path(sys.executable).parent / "proxima"
    out = subprocess.run([str(proxima), "create", str(tmp_path / "study.yaml"), "--items", str(tmp_path / "items.zip"),
                          "--id", "zipped"], capture_output=True, text=True, timeout=300,
                         env={"PATH": "/usr/bin:/bin", "REDIS_URL": redis_url})
    assert out.returncode == 0, out.stderr
    assert "Read 5,000 items from" in out.stderr and "storing them" in out.stderr and "Stored 5,000 items" in out.stderr
    assert "Created study zipped with 5000 items" in out.stdout
