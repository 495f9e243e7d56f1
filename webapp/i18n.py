"""The rater pages in the study's language: the templates' ``t``/``tn`` and the page's catalogue for
rater.js (``workers.store.translations``), and the study's default texts (prompts, instructions, scale
labels, the skip button) in that language unless the study words them itself.

A page speaks its study's language, not the browser's: the consent, instructions and items a study shows are
in one language, and the page around them should not be in another.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from jinja2 import pass_context
from markupsafe import Markup, escape

from engine.kinds import KINDS
from workers.store.config import SKIP_LABEL
from workers.store.translations import DEFAULT_LANGUAGE, PLACEHOLDER, RaterTexts

if TYPE_CHECKING:
    from flask import Flask
    from jinja2.runtime import Context

    from engine.kinds import QuestionKind
    from workers.store.config import StudyConfig


def rater_texts(config: StudyConfig | None) -> RaterTexts:
    """The texts of a study's rater pages (the default language's for a page without a study)."""
    if config is None:
        return RaterTexts(DEFAULT_LANGUAGE)
    return RaterTexts(config.language, config.rater_texts)


def _kind_values(config: StudyConfig, kind: QuestionKind) -> tuple[int, dict]:
    """(the count a kind's texts are plural on, their placeholders' values): a rank screen's n and k."""
    settings = config.settings_of(kind)
    k = int(settings.get("n_select", 1))
    return k, {"n": settings.get("n_reference", ""), "k": k}


def _kind_text(texts: RaterTexts, config: StudyConfig, kind: QuestionKind, what: str) -> str:
    key = f"{what}_{kind.name}"
    count, values = _kind_values(config, kind)
    if key in texts:
        return texts.get(key, **values)
    if f"{key}.other" in texts:
        return texts.plural(key, count, **values)
    # a kind the catalogues do not know yet (added as the development docs say: a table entry and a
    # widget): its own words, in the language it was written in, until its texts join the catalogues
    prompt, instructions = kind.texts(config.settings_of(kind))
    return prompt if what == "prompt" else instructions


def rater_prompt(config: StudyConfig, kind: QuestionKind) -> str:
    """A kind's question as the rater reads it: the study's own prompt, else the catalogue's."""
    prompt = config.texts(kind)[0]
    if prompt != kind.texts(config.settings_of(kind))[0]:
        return prompt  # the study's own words (``question``, ``rating.prompt``)
    return _kind_text(rater_texts(config), config, kind, "prompt")


def rater_instructions(config: StudyConfig) -> str:
    """The study's instructions (Markdown): its own, else each of its kinds' from the catalogue."""
    kinds = [kind for kind in KINDS.values() if kind.name in {a.question_kind for a in config.algorithms}]
    default = "\n\n".join(config.texts(kind)[1] for kind in kinds)
    if config.instructions != default:
        return config.instructions or ""
    texts = rater_texts(config)
    return "\n\n".join(_kind_text(texts, config, kind, "instructions") for kind in kinds)


def rater_scale(config: StudyConfig, kind: QuestionKind) -> dict:
    """The scale the page draws for a kind rated on one (``on_scale``), the study's settings of it: the study's
    labels (and prompt), else the catalogue's."""
    scale = dict(config.settings_of(kind))
    default = kind.check_settings(None)
    texts = rater_texts(config)
    for field, key in (("low_label", "scale_low"), ("high_label", "scale_high"), ("prompt", f"prompt_{kind.name}")):
        if scale[field] == default[field]:
            scale[field] = texts[key]
    return scale


def skip_label(config: StudyConfig) -> str:
    """The can't-decide button: the study's ``skip_label``, else the catalogue's."""
    return rater_texts(config)["skip"] if config.skip_label == SKIP_LABEL else config.skip_label


def _study_config(context: Context) -> StudyConfig | None:
    study = context.get("study")
    return getattr(study, "config", None)


def _markup(text: str, values: dict) -> Markup:
    """``text`` escaped, its placeholders filled with escaped values (Markup values as they are), in one
    pass: a value that reads like a placeholder is left as it is."""
    return Markup(PLACEHOLDER.sub(lambda m: escape(values[m[1]]) if m[1] in values else m[0], escape(text)))


def init_app(app: Flask) -> None:
    @app.template_global()
    @pass_context
    def t(context: Context, key: str, **values: object) -> Markup:
        """A text of the page's study in its language (values fill its ``{placeholders}``, escaped)."""
        return _markup(rater_texts(_study_config(context))[key], values)

    @app.template_global()
    @pass_context
    def tn(context: Context, key: str, count: int, **values: object) -> Markup:
        """The plural text ``key`` for ``count`` (``{n}``)."""
        return _markup(rater_texts(_study_config(context)).plural(key, count), values)

    @app.template_global()
    @pass_context
    def rater_html_attributes(context: Context) -> Markup:
        """``lang`` and ``dir`` of a rater page's ``<html>``."""
        texts = rater_texts(_study_config(context))
        return Markup('lang="{}" dir="{}"').format(texts.language, texts.direction)

    @app.template_global()
    @pass_context
    def rater_catalogue(context: Context) -> dict:
        """The page's texts for rater.js (rendered as a JSON block: the page runs no inline script)."""
        texts = rater_texts(_study_config(context))
        return {"language": texts.language, "direction": texts.direction, "texts": texts.catalogue()}

    app.add_template_global(skip_label, "rater_skip_label")
