"""Rater pages in the study's language: every catalogue complete, no English left on a German study's
pages, the scripts' keys in every language, a study's own words for any text, right-to-left pages, and
a clear refusal of an unknown language or text key."""
from __future__ import annotations

import json
import re
from html import unescape
from html.parser import HTMLParser

import pytest
from flask import render_template
from helpers import NO_CHECKS, answer, colour_items, csrf_token_of, fetch_question

from engine.kinds import KINDS
from webapp import ROOT
from webapp.i18n import rater_instructions, rater_prompt, rater_texts
from workers.store.config import ConfigError, StudyConfig
from workers.store.studies import create_study, get_study, set_status
from workers.store.translations import (
    CATALOGUES,
    DEFAULT_LANGUAGE,
    LANGUAGES,
    SCRIPT_TEXTS,
    TEXT_KEYS,
    RaterTexts,
    placeholders,
)

OTHER_LANGUAGES = [lang for lang in LANGUAGES if lang != DEFAULT_LANGUAGE]
ENGLISH = CATALOGUES[DEFAULT_LANGUAGE]
#: A plural text's variants for counts other than "other" may spell the number out (Arabic's "one" does).
SPELLED_OUT = (".zero", ".one", ".two")


def german_study(conn, study_id="de", **fields):
    config = StudyConfig.from_dict({
        "name": "Farben im Vergleich", "algorithm": "random_triplets", "pool_size": 8, "language": "de",
        "consent": "**Einwilligung.** Wir speichern Ihre Antworten.", "allow_skip": True,
        "practice": [{"head": "c0", "candidates": ["c1", "c2"], "answer": "c1", "explanation": "c1 ist näher."}],
        "limits": {"max_questions_per_rater": 10}, **NO_CHECKS, **fields})
    create_study(conn, config, colour_items(), study_id=study_id)
    return get_study(conn, study_id)


def decide(client, study_id: str, decision: str):
    """Agree to (or decline) a study's consent, as its page's form does."""
    token = csrf_token_of(client.get(f"/s/{study_id}").get_data(as_text=True))
    return client.post(f"/s/{study_id}/consent", data={"decision": decision, "csrf_token": token})


class _Shown(HTMLParser):
    """What a person reads on a page: its text, its accessible names and titles, and the strings of its
    data blocks (the texts catalogue and the practice questions the script shows)."""

    ATTRIBUTES = ("aria-label", "title", "alt", "placeholder")

    def __init__(self) -> None:
        super().__init__()
        self.parts: list[str] = []
        self._script: str | None = None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        self.parts += [attrs[a] for a in self.ATTRIBUTES if attrs.get(a)]
        if "data-practice" in attrs:
            self.parts += _strings(json.loads(attrs["data-practice"]))
        self._script = tag if tag in ("script", "style") else None

    def handle_endtag(self, tag):
        self._script = None

    def handle_data(self, data):
        if self._script == "script" and data.strip().startswith("{"):
            self.parts += _strings(json.loads(data))
        elif self._script is None:
            self.parts.append(data)


def _strings(value) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


def shown_text(html: str) -> str:
    parser = _Shown()
    parser.feed(html)
    return "\n".join(parser.parts)


def english_left(text: str, language: str) -> list[str]:
    """Every English text of the catalogue (its pieces between placeholders) found in ``text``, for the keys
    ``language`` words differently."""
    text = re.sub(r"\{\w+\}", " ", text)  # a catalogue's placeholders are names, not words a rater reads
    found = []
    for key, english in ENGLISH.items():
        if CATALOGUES[language].get(key) == english:
            continue
        for piece in re.split(r"\{\w+\}", english):
            piece = piece.strip(" .,;:")
            if len(re.sub(r"\W", "", piece)) >= 3 and re.search(rf"(?<!\w){re.escape(piece)}(?!\w)", text):
                found.append(f"{key}: {piece!r}")
    return found


# ------------------------------------------------------------------------------------------ catalogues

@pytest.mark.parametrize("language", OTHER_LANGUAGES)
def test_every_language_words_every_text_with_its_placeholders(language):
    catalogue = CATALOGUES[language]
    assert set(catalogue) == set(ENGLISH), f"{language}.po: missing {sorted(set(ENGLISH) - set(catalogue))}, " \
                                           f"unknown {sorted(set(catalogue) - set(ENGLISH))}"
    for key, text in catalogue.items():
        wanted = placeholders(ENGLISH[key])
        if key.endswith(SPELLED_OUT):
            assert placeholders(text) <= wanted, (language, key, text)
        else:
            assert placeholders(text) == wanted, (language, key, text)


@pytest.mark.parametrize("language", OTHER_LANGUAGES)
def test_a_second_language_is_a_translation_not_a_copy(language):
    same = [k for k in TEXT_KEYS if CATALOGUES[language][k] == ENGLISH[k]]
    assert same == [], same


def script_keys() -> set[str]:
    """Every text key the rater page's scripts use: the string literals of their t(...) and tn(...) calls
    (a plural's ``.other``) and of their table of refusals."""
    keys = set()
    for path in [ROOT / "static/js/rater.js", *sorted((ROOT / "static/js/widgets").glob("*.js"))]:
        source = path.read_text()
        for call in re.finditer(r"\b(tn?)\(", source):
            depth, end = 1, call.end()
            while depth:
                depth += {"(": 1, ")": -1}.get(source[end], 0)
                end += 1
            # a literal compared with (``item.kind === "audio" ? ...``) is not a key
            args = source[call.end():end]
            literals = [m[1] for m in re.finditer(r'"([^"]*)"', args) if not args[:m.start()].endswith(("== ", "= "))]
            keys |= {f"{k}.other" if call[1] == "tn" else k for k in literals[:1 if call[1] == "tn" else None]}
        table = re.search(r"ERROR_TEXTS = \{(.*?)\};", source, re.S)
        if table:
            keys |= set(re.findall(r':\s*"(\w+)"', table[1]))
    return keys


def test_every_text_the_scripts_use_is_in_every_language_and_on_the_page():
    used = script_keys()
    not_embedded = sorted(k for k in used if k.split(".")[0] not in SCRIPT_TEXTS)
    assert not_embedded == [], f"flag these texts '#, page-script' in en.po: {not_embedded}"
    assert {"loading", "error_session_replaced", "grid_picked", "ordinal.other", "rating_hint_slider",
            "item_label"} <= used  # the scan finds the calls
    assert len(used) >= 25
    for language in LANGUAGES:
        missing = sorted(used - set(CATALOGUES[language]))
        assert missing == [], f"{language}.po lacks texts the page's scripts use: {missing}"


def test_the_page_embeds_its_scripts_texts_with_the_studys_own(client, conn):
    german_study(conn, rater_texts={"loading": "Gleich geht's weiter"})
    client.get("/s/de?PROLIFIC_PID=p-1")
    decide(client, "de", "agree")
    html = client.get("/s/de").get_data(as_text=True)
    block = re.search(r"<section id=\"study\"[^>]*data-texts='([^']*)'", html, re.S)[1]
    embedded = json.loads(unescape(block))
    assert embedded["language"] == "de" and embedded["direction"] == "ltr"
    wanted = {k: v for k, v in CATALOGUES["de"].items() if k.split(".")[0] in SCRIPT_TEXTS}
    assert embedded["texts"] == {**wanted, "loading": "Gleich geht's weiter"}
    assert "ordinal.other" in embedded["texts"] and "consent_agree" not in embedded["texts"]


def test_english_texts_are_the_kinds_own_words():
    # an English study's page reads as before: the catalogue's prompts and instructions are the kinds' own
    for kind in KINDS.values():
        config = StudyConfig.from_dict({"name": "x", "question_kind": kind.name})
        assert rater_prompt(config, kind) == kind.texts(config.settings_of(kind))[0]
        assert rater_instructions(config) == config.instructions


# ------------------------------------------------------------------------------------------ pages

def test_a_german_study_shows_no_english_anywhere_a_rater_looks(app, client, conn):
    study = german_study(conn, completion={"debrief_question": "War etwas unklar?", "partial_code": True,
                                           "prolific_redirect_url": "https://app.prolific.com/submissions/"
                                                                    "complete?cc={code}"})
    pages = [client.get("/s/de?PROLIFIC_PID=p-de").get_data(as_text=True)]  # consent
    assert "Ich stimme zu" in pages[0]
    pages.append(decide(client, "de", "decline").get_data(as_text=True))
    decide(client, "de", "agree")
    pages.append(client.get("/s/de").get_data(as_text=True))  # instructions, practice, every widget
    question = fetch_question(client, "de")
    pages.append("\n".join(_strings(question)))
    assert question["prompt"] == CATALOGUES["de"]["prompt_triplet"]
    answer(client, question, study_id="de")
    set_status(conn, "de", "closed")  # ended after one answer: a partial code, and why
    pages.append(client.get("/s/de/done").get_data(as_text=True))
    assert "1 der 10 Antworten" in pages[-1]
    with app.test_request_context("/"):
        # every branch of the notices and the finish page, as the views fill them in
        texts = rater_texts(study.config)
        for flags in ({"busy": True}, {"forgotten": True}, {"full": True}, {}):
            pages.append(render_template("raters/closed.html", study=study, **flags))
        pages.append(render_template("raters/checking.html", study=study))
        finish = {"study": study, "code": "ABC123", "redirect_seconds": 5, "message": "", "debrief": "Unklar?"}
        for flags in ({"stopped": True, "shortfall": texts["shortfall_filled"], "next_step": "next_step_prolific"},
                      {"stopped": True, "stopped_message": texts["stopped_message"], "next_step": "next_step_mturk"},
                      {"stopped": True, "next_step": "next_step_other"},
                      {"partial": True, "shortfall": texts.get("shortfall_needed", answers=1, needed=10)},
                      {"redirect_url": "https://example.org/?cc=ABC123", "auto_redirect": True, "thanked": True},
                      {}):
            pages.append(render_template("raters/finish.html", **finish, **flags))
    for html in pages:
        assert english_left(shown_text(html), "de") == [], re.sub(r"\s+", " ", shown_text(html))
    # the walk can fail: an English page has its English texts
    create_study(conn, StudyConfig.from_dict({"name": "x"}), colour_items(), study_id="en")
    with app.test_request_context("/"):
        english = render_template("raters/closed.html", study=get_study(conn, "en"), full=True)
    assert english_left(shown_text(english), "de") == ["closed_full: " + repr(ENGLISH["closed_full"].strip(" ."))]


@pytest.mark.parametrize("language", OTHER_LANGUAGES)
def test_every_kinds_question_speaks_the_study_language(client, conn, language):
    for kind in KINDS.values():
        study_id = f"{language}-" + kind.name.replace("_", "-")
        config = StudyConfig.from_dict({"name": "Arten", "question_kind": kind.name, "language": language,
                                        "pool_size": 8, **NO_CHECKS})
        create_study(conn, config, colour_items(12), study_id=study_id)
        client.get(f"/s/{study_id}?PROLIFIC_PID=p-{study_id}")
        page = client.get(f"/s/{study_id}").get_data(as_text=True)
        question = fetch_question(client, study_id)
        assert english_left(shown_text(page) + "\n".join(_strings(question)), language) == [], kind.name
        assert rater_instructions(config) in page
        assert question["prompt"] == rater_prompt(config, kind) != kind.texts(config.settings_of(kind))[0]
        if "scale" in question:
            catalogue = CATALOGUES[language]
            assert (question["scale"]["low_label"], question["scale"]["high_label"]) == (catalogue["scale_low"],
                                                                                         catalogue["scale_high"])


def test_a_studys_own_words_win_over_the_catalogue(client, conn):
    german_study(conn, question="Welches passt besser zum oberen?", skip_label="Weiß nicht",
                 instructions="Bitte *sorgfältig* antworten.",
                 rater_texts={"consent_agree": "Los geht's", "offline": "Keine Verbindung!"})
    consent = client.get("/s/de?PROLIFIC_PID=p-own").get_data(as_text=True)
    assert "Los geht&#39;s" in consent and CATALOGUES["de"]["consent_agree"] not in consent
    decide(client, "de", "agree")
    page = client.get("/s/de").get_data(as_text=True)
    assert "Keine Verbindung!" in page and "Weiß nicht" in page and "<em>sorgfältig</em>" in page
    assert CATALOGUES["de"]["instructions_triplet"] not in page
    assert fetch_question(client, "de")["prompt"] == "Welches passt besser zum oberen?"


def test_an_override_fills_in_its_placeholders(client, conn):
    german_study(conn, consent=None, rater_texts={"progress_of_total": "Schon {answered} (von {total})!"})
    client.get("/s/de?PROLIFIC_PID=p-ph")
    page = client.get("/s/de").get_data(as_text=True)
    assert 'Schon <span id="answered">0</span> (von <span id="total">10</span>)!' in page


def test_a_right_to_left_language_sets_the_pages_direction(client, conn):
    german_study(conn, study_id="ar", language="ar", consent=None)
    page = client.get("/s/ar?PROLIFIC_PID=p-ar").get_data(as_text=True)
    assert '<html lang="ar" dir="rtl">' in page
    assert CATALOGUES["ar"]["start_practice.one"] in page
    assert RaterTexts("ar").direction == "rtl" and RaterTexts("de").direction == "ltr"


def test_a_dashboard_page_stays_in_english(researcher_client, conn):
    german_study(conn)
    page = researcher_client.get("/studies/de").get_data(as_text=True)
    assert '<html lang="en">' in page


# ------------------------------------------------------------------------------------------ config

def test_an_unknown_language_is_refused_naming_the_ones_there_are():
    with pytest.raises(ConfigError) as error:
        StudyConfig.from_dict({"name": "x", "language": "xx"})
    assert "'language'" in str(error.value) and all(lang in str(error.value) for lang in LANGUAGES)


def test_an_unknown_text_key_is_refused_naming_the_known_ones():
    with pytest.raises(ConfigError) as error:
        StudyConfig.from_dict({"name": "x", "rater_texts": {"start_buton": "Go"}})
    message = str(error.value)
    assert "start_buton" in message and "rater_texts" in message and "start, " in message
    assert all(key in message for key in TEXT_KEYS)


def test_an_override_with_a_placeholder_its_text_lacks_is_refused():
    with pytest.raises(ConfigError, match=r"rater_texts\.progress.*\{total\}.*\{answered\}"):
        StudyConfig.from_dict({"name": "x", "rater_texts": {"progress": "{answered} von {total}"}})
    StudyConfig.from_dict({"name": "x", "rater_texts": {"progress_of_total": "{answered} von {total}"}})


def test_language_and_texts_survive_storage(conn):
    study = german_study(conn, rater_texts={"start": "Los"})
    assert (study.config.language, study.config.rater_texts) == ("de", {"start": "Los"})
    assert StudyConfig.from_stored(json.loads(study.config.to_json())).rater_texts == {"start": "Los"}


def test_a_stored_study_with_a_text_since_renamed_still_loads():
    stored = {**StudyConfig.from_dict({"name": "x", "language": "de"}).to_dict(), "rater_texts": {"gone": "Weg"}}
    config = StudyConfig.from_stored(stored)
    assert rater_texts(config)["start"] == CATALOGUES["de"]["start"]


def test_a_filled_in_value_is_escaped_and_never_filled_in_again(app, conn):
    study = german_study(conn, name="<b>Farben</b>")
    with app.test_request_context("/"):
        title = render_template("raters/consent.html", study=study, consent="")
        template = app.jinja_env.from_string('{{ t("progress_of_total", answered="<i>{total}</i>", total=4) }}')
        progress = template.render(study=study)
    assert "&lt;b&gt;Farben&lt;/b&gt; — Einwilligung" in title
    assert progress == "&lt;i&gt;{total}&lt;/i&gt; von 4 beantwortet"
