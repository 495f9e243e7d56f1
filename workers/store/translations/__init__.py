"""The rater pages' texts in every language Proxima speaks: one gettext catalogue (``<language>.po``)
per language beside this file, read with Babel when first imported (nothing to compile). A message id is
the text's key, which a study's ``rater_texts:`` overrides by name. The study config validates its
``language`` and ``rater_texts`` against these tables; ``webapp.i18n`` puts them on the pages.
"""
from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType

from babel import Locale
from babel.messages.pofile import read_po

#: Every study speaks this language unless its config names another; its catalogue is the source (every
#: other catalogue translates its keys).
DEFAULT_LANGUAGE = "en"
#: Languages written right to left: their pages get ``dir="rtl"``.
RTL_LANGUAGES = frozenset({"ar", "fa", "he", "ur", "yi"})
#: ``{name}`` in a text: filled in by the page (the server's templates or rater.js).
PLACEHOLDER = re.compile(r"\{(\w+)\}")
#: The flag (``#, page-script``) of a default-language entry the page's script writes: the page embeds those.
SCRIPT_FLAG = "page-script"

_FOLDER = Path(__file__).resolve().parent


def _read(path: Path) -> list:
    with path.open("rb") as fh:
        # an untranslated (empty) or fuzzy entry is left out: the default language's text is shown instead
        return [m for m in read_po(fh, abort_invalid=True) if m.id and m.string and not m.fuzzy]


_ENTRIES = {path.stem: _read(path) for path in sorted(_FOLDER.glob("*.po"))}
#: language -> key -> text, for every ``<language>.po`` here.
CATALOGUES: Mapping[str, Mapping[str, str]] = MappingProxyType({
    language: MappingProxyType({m.id: m.string for m in entries}) for language, entries in _ENTRIES.items()})
#: The languages a study may name: the default first.
LANGUAGES: tuple[str, ...] = (DEFAULT_LANGUAGE, *sorted(set(CATALOGUES) - {DEFAULT_LANGUAGE}))
#: Every rater-facing text's key (those of the default catalogue, in its order).
TEXT_KEYS: tuple[str, ...] = tuple(CATALOGUES[DEFAULT_LANGUAGE])
#: The texts the page's script writes (a plural text's key without its category: ``ordinal``).
SCRIPT_TEXTS: frozenset[str] = frozenset(m.id.split(".")[0] for m in _ENTRIES[DEFAULT_LANGUAGE]
                                         if SCRIPT_FLAG in m.flags)


def placeholders(text: str) -> set[str]:
    return set(PLACEHOLDER.findall(text))


def fill(text: str, values: Mapping[str, object]) -> str:
    """``text`` with each ``{name}`` of ``values`` replaced (other braces are left as they are)."""
    return PLACEHOLDER.sub(lambda m: str(values[m[1]]) if m[1] in values else m[0], text)


def direction(language: str) -> str:
    return "rtl" if language.split("-")[0] in RTL_LANGUAGES else "ltr"


def check_texts(texts: Mapping[str, str]) -> str | None:
    """What is wrong with a study's ``rater_texts:`` overrides, or None: each key is one of TEXT_KEYS, and
    an override uses only the placeholders its key's text in the default language has."""
    unknown_keys = sorted(set(texts) - set(TEXT_KEYS))
    if unknown_keys:
        return (f"unknown text(s) {', '.join(unknown_keys)} in 'rater_texts'; the texts a study may word itself: "
                f"{', '.join(TEXT_KEYS)}")
    for key, text in texts.items():
        allowed = placeholders(CATALOGUES[DEFAULT_LANGUAGE][key])
        unknown = placeholders(text) - allowed
        if unknown:
            known = ", ".join("{" + p + "}" for p in sorted(allowed)) or "none"
            return (f"field 'rater_texts.{key}' uses {', '.join('{' + p + '}' for p in sorted(unknown))}, which this "
                    f"text does not fill in; its placeholders: {known}")
    return None


class RaterTexts:
    """A study's rater-facing texts: its language's catalogue (the default's for a missing key) under the
    study's own ``rater_texts:`` overrides."""

    def __init__(self, language: str = DEFAULT_LANGUAGE, overrides: Mapping[str, str] | None = None) -> None:
        self.language = language
        self.overrides = dict(overrides or {})

    @property
    def direction(self) -> str:
        return direction(self.language)

    def __getitem__(self, key: str) -> str:
        if key in self.overrides:
            return self.overrides[key]
        own = CATALOGUES.get(self.language, {})
        return own[key] if key in own else CATALOGUES[DEFAULT_LANGUAGE][key]

    def __contains__(self, key: str) -> bool:
        return key in self.overrides or key in CATALOGUES[DEFAULT_LANGUAGE]

    def get(self, key: str, **values: object) -> str:
        return fill(self[key], values)

    def plural(self, key: str, count: int, **values: object) -> str:
        """The text of ``key`` for ``count`` (the language's CLDR plural category), ``{n}`` is ``count``."""
        category = Locale.parse(self.language).plural_form(count)
        chosen = f"{key}.{category}" if f"{key}.{category}" in self else f"{key}.other"
        return fill(self[chosen], {"n": count, **values})

    def catalogue(self) -> dict[str, str]:
        """The texts the page's script writes (rater.js reads them from the page), each plural's variants
        of the default language and of this one."""
        keys = dict.fromkeys([*TEXT_KEYS, *CATALOGUES.get(self.language, {})])
        return {key: self[key] for key in keys if key.split(".")[0] in SCRIPT_TEXTS}
