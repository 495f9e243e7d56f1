"""HTML items and a study's own stylesheet (issue 18): checked by the one function ``proxima create``
and the dashboard upload share, sanitised (nh3) so no study can put script into raters' pages, and
the pages' Content-Security-Policy unchanged."""
from __future__ import annotations

import io

import pytest
from helpers import index_of, run_worker, zip_folder

from workers.store.studies import Item, StudyError, check_stylesheet, get_items, get_stylesheet
from workers.store.uploads import items_from_zip

GOOD_HTML = {
    "poem": "<p class='verse'>Roses are <em>red</em>,<br>violets are <strong>blue</strong>.</p>",
    "table": "<table><tr><th>Price</th><td>3 &euro;</td></tr></table>",
    "list": "<html><head><title>x</title></head><body><ul><li>one</li><li>two</li></ul></body></html>",
}
CSS = ".verse { font-family: serif; color: #402010; }\n.html-item th { text-align: left; }\n"


@pytest.fixture
def folder(tmp_path):
    items = tmp_path / "items"
    items.mkdir()
    for name, html in GOOD_HTML.items():
        (items / f"{name}.html").write_text(html)
    (tmp_path / "study.yaml").write_text("name: Poems\nlimits: {max_questions_per_rater: 5}\n")
    (tmp_path / "look.css").write_text(CSS)
    return tmp_path


def test_create_makes_html_items_and_serves_the_stylesheet_on_rater_pages(cli, conn, app, folder):
    result = cli("create", folder / "study.yaml", "--items", folder / "items", "--id", "poems",
                 "--stylesheet", folder / "look.css")
    assert result.exit_code == 0, result.output
    items = {item.id: item for item in get_items(conn, "poems")}
    assert {i.kind for i in items.values()} == {"html"}
    assert items["poem"].html == '<p class="verse">Roses are <em>red</em>,<br>violets are <strong>blue</strong>.</p>'
    assert items["list"].html == "<ul><li>one</li><li>two</li></ul>"  # the document's body only
    assert get_stylesheet(conn, "poems") == CSS
    run_worker(conn)
    client = app.test_client()
    page = client.get("/s/poems")
    assert '/s/poems/style.css"' in page.get_data(as_text=True)
    csp = page.headers["Content-Security-Policy"]
    assert "script-src 'self'" in csp and "unsafe-inline" not in csp and "style-src 'self'" in csp
    css = client.get("/s/poems/style.css")
    assert css.status_code == 200 and css.mimetype == "text/css" and css.get_data(as_text=True) == CSS
    question = client.get("/api/studies/poems/questions/next").get_json()["question"]
    shown = [question["head"], *question["candidates"]]
    ids = list(items)  # stored in this order
    assert all(item["kind"] == "html" and item["html"] == items[ids[index_of(item)]].html for item in shown)
    assert not any("id" in item or "index" in item for item in shown)
    assert client.get("/s/nope/style.css").status_code == 404


@pytest.mark.parametrize("html,named", [
    ("<p>Hi</p><script>fetch('/api')</script>", "<script>"),
    ('<p onmouseover="steal()">Hi</p>', "'onmouseover'"),
    ('<a href="https://example.org/phish">click</a>', "<a>"),
    ('<p style="position:fixed">Hi</p>', "'style'"),
    ('<img src="x" onerror="alert(1)">', "<img>"),
    ('<iframe src="/dashboard"></iframe><p>x</p>', "<iframe>"),
    ("<p> &nbsp; </p>", "shows no text"),
])
def test_create_and_the_upload_refuse_an_unsafe_html_item_alike_naming_it(cli, researcher_client, conn, folder,
                                                                        html, named):
    (folder / "items" / "evil.html").write_text(html)
    result = cli("create", folder / "study.yaml", "--items", folder / "items")
    assert result.exit_code != 0 and "evil.html" in result.output and named in result.output
    assert "Traceback" not in result.output
    with pytest.raises(StudyError, match="evil.html"):
        items_from_zip(zip_folder(folder / "items"))
    response = researcher_client.post("/studies/new", data={
        "name": "Upload", "items": (io.BytesIO(zip_folder(folder / "items")), "items.zip")},
        content_type="multipart/form-data")
    assert response.status_code == 400 and "evil.html" in response.get_data(as_text=True)
    assert not conn.smembers("proxima:studies")


def test_an_item_made_in_code_is_sanitised_too():
    item = Item(id="x", kind="html", html='<p>ok<script>alert(1)</script><b onclick="x()">b</b></p>')
    assert item.html == "<p>ok<b>b</b></p>"
    assert Item.from_dict(item.to_dict()).html == item.html
    with pytest.raises(StudyError, match="no HTML"):
        Item(id="y", kind="html", html="  ")


@pytest.mark.parametrize("css,message", [
    ("@import url(https://example.org/x.css);", "@import"),
    ("p { background: url(https://example.org/track?x) }", "url()"),
    ("p { background: url('/api/studies') }", "url()"),
    ("p { width: expression(alert(1)) }", "script in CSS"),
    ("</style><script>alert(1)</script>", "'</'"),
    ("p { color: red", "braces"),
])
def test_a_stylesheet_that_loads_or_runs_anything_is_refused_by_cli_and_upload(cli, researcher_client, conn,
                                                                               folder, css, message):
    (folder / "look.css").write_text(css)
    result = cli("create", folder / "study.yaml", "--items", folder / "items", "--stylesheet", folder / "look.css")
    assert result.exit_code != 0 and message in result.output and "look.css" in result.output
    response = researcher_client.post("/studies/new", data={
        "name": "Upload", "items": (io.BytesIO(zip_folder(folder / "items")), "items.zip"),
        "stylesheet": (io.BytesIO(css.encode()), "look.css")}, content_type="multipart/form-data")
    assert response.status_code == 400 and "look.css" in response.get_data(as_text=True)
    assert not conn.smembers("proxima:studies")


def test_the_upload_form_takes_a_stylesheet(researcher_client, conn, folder):
    response = researcher_client.post("/studies/new", data={
        "name": "Upload", "items": (io.BytesIO(zip_folder(folder / "items")), "items.zip"),
        "stylesheet": (io.BytesIO(CSS.encode()), "look.css")}, content_type="multipart/form-data")
    assert response.status_code == 302, response.get_data(as_text=True)[:500]
    (study_id,) = [s.decode() for s in conn.smembers("proxima:studies")]
    assert get_stylesheet(conn, study_id) == CSS
    assert check_stylesheet("x.css", "p { background: url(data:image/png;base64,iVBO) }")


@pytest.mark.browser
def test_html_items_render_styled_in_chromium_and_run_no_script(browser, conn, start_serve):
    """In a real browser: the study's stylesheet applies to an HTML item, and an item stored with a script
    (as an old or tampered study might hold it) shows its text without running anything."""
    import json

    from workers.store import keys
    from workers.store.config import StudyConfig
    from workers.store.studies import create_study

    items = [Item(id=name, kind="html", html=html) for name, html in GOOD_HTML.items()]
    create_study(conn, StudyConfig.from_dict({"name": "Styled", "pool_size": 5}), items, study_id="styled",
                 stylesheet=CSS)
    # bypass every check, as a hand-edited Redis would: the page must still run no script
    tampered = {"id": "poem", "kind": "html",
                "html": '<p class="verse">Roses<img src=x onerror="document.title=\'pwned\'"></p><script>'
                        "document.title='pwned'</script>"}
    conn.lset(keys.items("styled"), 0, json.dumps(tampered))
    run_worker(conn)
    base = start_serve()
    page = browser.new_page()
    errors = []
    page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
    page.goto(f"{base}/s/styled")
    page.click("#start")
    page.wait_for_selector("#question:not([hidden]) .html-item")
    for _ in range(6):  # until the tampered item is on screen
        if page.locator(".verse").count():
            break
        page.click("#left")
        page.wait_for_timeout(400)
    assert page.locator(".verse").count() >= 1
    colour = page.evaluate("() => getComputedStyle(document.querySelector('.verse')).color")
    assert colour == "rgb(64, 32, 16)"  # the study's stylesheet applied
    assert page.title() != "pwned"
    assert any("Content Security Policy" in e for e in errors) or not page.locator(".verse img").count()
