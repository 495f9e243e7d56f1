"""What a study's own stylesheet may say: parsed by a real CSS tokenizer (tinycss2), which decodes
escapes as a browser does (``@\\69mport`` is ``@import``, ``u\\72l(`` is ``url(``), then checked
against allow-lists of at-rules, properties and functions, so nothing is fetched and nothing runs.
Used by ``studies.check_stylesheet``. Must never import Flask or the engine.
"""
from __future__ import annotations

import tinycss2
from tinycss2 import ast

#: At-rules a study's stylesheet may hold (their blocks are checked like the rest). Not @import,
#: @font-face (fonts load from a URL), @namespace, @property or anything else.
AT_RULES = frozenset({"media", "supports", "keyframes", "-webkit-keyframes", "layer", "container"})

#: Properties a stylesheet may set (vendor prefixes -webkit-, -moz-, -ms- stripped first), as exact
#: names or families (``border`` allows ``border-top-left-radius``). Custom properties (``--x``) are
#: allowed: their values are checked like any other.
PROPERTIES = frozenset("""
    color opacity visibility display box-sizing float clear overflow overflow-x overflow-y
    width height min-width min-height max-width max-height aspect-ratio object-fit object-position
    position top right bottom left inset z-index vertical-align
    line-height letter-spacing word-spacing white-space word-break word-wrap overflow-wrap hyphens
    direction unicode-bidi writing-mode tab-size quotes content counter-reset counter-increment
    box-shadow cursor pointer-events user-select filter backdrop-filter mix-blend-mode isolation
    transform transform-origin transform-style perspective perspective-origin backface-visibility
    gap row-gap column-gap order align-items align-content align-self justify-items justify-content
    justify-self place-items place-content place-self accent-color caret-color appearance resize
    table-layout border-collapse border-spacing caption-side empty-cells image-rendering
    will-change contain scroll-behavior
""".split())
PROPERTY_FAMILIES = ("background", "border", "margin", "padding", "font", "text", "outline", "list-style",
                     "grid", "flex", "column", "transition", "animation", "scroll-margin", "scroll-padding",
                     "inset")
VENDOR_PREFIXES = ("-webkit-", "-moz-", "-ms-")

#: Functions a value or selector may use: colours, maths, gradients, transforms, filters, shapes,
#: timing, and the selectors' pseudo-classes. Nothing that fetches (url, image-set, image, cross-fade,
#: element, src) or runs (expression); ``url()`` is allowed only around a ``data:image/`` URL.
FUNCTIONS = frozenset("""
    rgb rgba hsl hsla hwb lab lch oklab oklch color color-mix light-dark
    calc min max clamp var env round mod rem abs sign
    linear-gradient radial-gradient conic-gradient
    repeating-linear-gradient repeating-radial-gradient repeating-conic-gradient
    translate translatex translatey translatez translate3d rotate rotatex rotatey rotatez rotate3d
    scale scalex scaley scalez scale3d skew skewx skewy matrix matrix3d perspective
    blur brightness contrast drop-shadow grayscale hue-rotate invert opacity saturate sepia
    cubic-bezier steps linear repeat minmax fit-content counter counters
    inset circle ellipse polygon rect xywh
    not is where has nth-child nth-last-child nth-of-type nth-last-of-type lang dir
""".split())
#: The one kind of url() a stylesheet may hold: an inline image, which loads nothing.
DATA_IMAGE = "data:image/"


class CssRefused(ValueError):
    """A stylesheet that may not be used: ``line`` and ``column`` say where, the message what."""

    def __init__(self, line: int, column: int, what: str) -> None:
        super().__init__(what)
        self.line, self.column, self.what = line, column, what


def check_css(css: str) -> None:
    """Raise CssRefused at the first thing a study's stylesheet may not hold."""
    _check_rules(tinycss2.parse_stylesheet(css, skip_comments=True, skip_whitespace=True))


def _property_allowed(name: str) -> bool:
    if name.startswith("--"):
        return True
    for prefix in VENDOR_PREFIXES:
        if name.startswith(prefix):
            name = name[len(prefix):]
            break
    return name in PROPERTIES or any(name == f or name.startswith(f + "-") for f in PROPERTY_FAMILIES)


def _refuse(node, what: str) -> None:
    raise CssRefused(node.source_line, node.source_column, what)


def _check_rules(rules) -> None:
    for rule in rules:
        if rule.type == "error":
            _refuse(rule, f"CSS that does not parse ({rule.message})")
        elif rule.type == "at-rule":
            name = rule.lower_at_keyword
            if name == "import":
                _refuse(rule, "@import (put every rule in this one file)")
            if name not in AT_RULES:
                _refuse(rule, f"the at-rule @{name} (allowed: {', '.join('@' + a for a in sorted(AT_RULES))})")
            _check_tokens(rule.prelude)
            if rule.content is not None:
                _check_rules(tinycss2.parse_blocks_contents(rule.content, skip_comments=True, skip_whitespace=True))
        elif rule.type == "qualified-rule":
            _check_tokens(rule.prelude)
            _check_rules(tinycss2.parse_blocks_contents(rule.content, skip_comments=True, skip_whitespace=True))
        elif rule.type == "declaration":
            if not _property_allowed(rule.lower_name):
                what = ("script in CSS" if rule.lower_name in ("behavior", "-moz-binding")
                        else f"the property '{rule.name}' (not on the list of properties a study may set)")
                _refuse(rule, what)
            _check_tokens(rule.value)


def _check_tokens(tokens) -> None:
    for token in tokens or ():
        kind = token.type
        if kind == "error":
            _refuse(token, f"CSS that does not parse ({token.message})")
        elif kind == "url":
            _check_url(token, token.value)
        elif kind == "function":
            name = token.lower_name
            if name == "url":
                args = [t for t in token.arguments if t.type not in ("whitespace", "comment")]
                _check_url(token, args[0].value if len(args) == 1 and args[0].type == "string" else "")
            elif name == "expression":
                _refuse(token, "script in CSS (expression())")
            elif name not in FUNCTIONS:
                _refuse(token, f"the function {token.name}() (it may load something from elsewhere; allowed: "
                               "colours, calc(), var(), gradients, transforms, filters)")
            else:
                _check_tokens(token.arguments)
        elif isinstance(token, (ast.ParenthesesBlock, ast.SquareBracketsBlock, ast.CurlyBracketsBlock)):
            _check_tokens(token.content)


def _check_url(token, url: str) -> None:
    if not url.strip().lower().startswith(DATA_IMAGE):
        _refuse(token, "url() other than a data:image/ URL (images of the study are its items; nothing is "
                       "loaded from elsewhere)")
