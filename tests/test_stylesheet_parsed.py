"""A study's stylesheet is parsed, not pattern-matched (issue 26, item 6): CSS escapes are decoded as a
browser decodes them before the allow-lists of at-rules, properties and functions apply."""
from __future__ import annotations

import pytest

from workers.store.studies import StudyError, check_stylesheet


@pytest.mark.parametrize("css,what", [
    (r'@\69mport "https://example.org/x.css";', "@import"),
    (r'@\000069MPORT url(x.css);', "@import"),
    (r'@IMPORT "x.css";', "@import"),
    (r"p { background: u\72l(https://example.org/t) }", "url()"),
    (r"p { background: \75 rl(/api/studies) }", "url()"),
    ("p { background: URL( 'https://example.org/t' ) }", "url()"),
    ("p { background-image: image-set(\"/media/s/1\" 1x) }", "image-set()"),
    (r"p { background-image: image-s\65t('/media/s/1' 1x) }", "image-set()"),
    ("p { background-image: -webkit-image-set(url(a.png) 1x) }", "-webkit-image-set()"),
    ("p { background: cross-fade(url(a.png), red) }", "cross-fade()"),
    ("p { list-style: image('a.png') }", "image()"),
    ("@font-face { font-family: x; src: local(Arial) }", "@font-face"),
    ("p { --look: url(https://example.org/t) }", "url()"),
    ("p:not(.x) { behavior: url(x.htc) }", "script in CSS"),
    ("p { -moz-binding: none }", "script in CSS"),
    ("p { width: expr\\65ssion(alert(1)) }", "script in CSS"),
    ("p { mask: none }", "property 'mask'"),
    ("@media screen { p { color: red; } .x { background: url(//evil.example/x) } }", "url()"),
])
def test_a_stylesheet_that_could_fetch_or_run_anything_is_refused_in_any_spelling(css, what):
    with pytest.raises(StudyError) as refused:
        check_stylesheet("look.css", css)
    message = str(refused.value)
    assert what in message and message.startswith("look.css, line 1, column ")


def test_the_refusal_says_where():
    css = ".a { color: red }\n.b {\n  background: u\\72l(https://example.org/t);\n}\n"
    with pytest.raises(StudyError, match=r"look\.css, line 3, column 15: .*url\(\)"):
        check_stylesheet("look.css", css)


@pytest.mark.parametrize("css", [
    ".verse { font-family: serif; color: #402010; }\n.html-item th { text-align: left; }\n",
    "p { background: url(data:image/png;base64,iVBO) }",
    "p { background: linear-gradient(to right, rgb(0 0 0 / 50%), hsl(10 20% 30%)); width: calc(100% - 2em) }",
    "@media (max-width: 600px) { .html-item { font-size: 1.2rem; padding: 0 } }",
    "@keyframes pulse { from { opacity: 1 } to { opacity: .5; transform: scale(1.1) } }",
    ".html-item tr:nth-child(2n+1):not(.x) { -webkit-text-stroke: 1px; border-top-left-radius: 4px }",
    ":root { --accent: #336699 } .a { color: var(--accent) !important }",
])
def test_ordinary_styling_is_kept(css):
    assert check_stylesheet("look.css", css) == css
