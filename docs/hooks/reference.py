"""MkDocs hook: the reference pages written from the code at build time.

A page holding one of the markers below gets it replaced by Markdown made from its source:
``<!-- reference:config -->`` (the study config's JSON schema, ``workers.store.config.SCHEMA``, with the
defaults of a validated config and the descriptions of ``docs/reference/config-fields.yml``),
``<!-- reference:params -->`` (every algorithm's parameters, ``engine.registry``, described by its planner's
numpydoc docstring), ``<!-- reference:openapi -->`` (``docs/openapi.yaml``) and ``<!-- include:PATH -->`` (a
Markdown file of the repository outside docs/, e.g. benchmarks/README.md, its links to other repository files
made plain text). A config field or parameter without a description, or a description of one the code no
longer has, is a warning, so ``mkdocs build --strict`` fails until the reference says what the code does.
Imports no Flask.
"""
from __future__ import annotations

import inspect
import json
import logging
import re
from pathlib import Path

import yaml

log = logging.getLogger("mkdocs.hooks.reference")

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
#: The section of config-fields.yml describing algorithm parameters no planner docstring describes.
PARAM_NOTES = "algorithm parameters"
MARKER = re.compile(r"<!-- (reference:[a-z]+|include:[\w./-]+) -->")


def on_page_markdown(markdown: str, page, config, files) -> str:
    def replace(match: re.Match) -> str:
        what = match.group(1)
        if what == "reference:config":
            return config_reference()
        if what == "reference:params":
            return params_reference()
        if what == "reference:openapi":
            return openapi_reference(DOCS / "openapi.yaml")
        if what.startswith("include:"):
            return include(ROOT / what.removeprefix("include:"))
        log.warning("%s: unknown reference marker %r", page.file.src_uri, what)
        return match.group(0)

    return MARKER.sub(replace, markdown)


# ---------------------------------------------------------------- the study config


def schema_fields(schema: dict, prefix: str = "") -> list[tuple[str, dict]]:
    """Every field of a JSON schema as (dotted path, its schema); array items as ``name[].field``, the
    alternatives of a ``oneOf`` of objects merged (a practice question of any kind)."""
    out: list[tuple[str, dict]] = []
    for name, sub in schema.get("properties", {}).items():
        path = f"{prefix}{name}"
        out.append((path, sub))
        if "properties" in sub:
            out.extend(schema_fields(sub, path + "."))
        items = sub.get("items", {})
        if "properties" in items:
            out.extend(schema_fields(items, path + "[]."))
        elif "oneOf" in items:
            merged: dict[str, dict] = {}
            for alternative in items["oneOf"]:
                for field, fs in alternative.get("properties", {}).items():
                    merged.setdefault(field, {"anyOf": []})["anyOf"].append(fs)
            out.extend(schema_fields({"properties": merged}, path + "[]."))
    return out


def type_of(schema: dict) -> str:
    """A short human name of what a schema allows: ``integer ≥ 1 or null``, ``"a" | "b"``."""
    if "anyOf" in schema or "oneOf" in schema:
        names = [type_of(s) for s in schema.get("anyOf", schema.get("oneOf"))]
        return " or ".join(dict.fromkeys(names))
    if "const" in schema:
        return f"`{json.dumps(schema['const'])}`"
    if "enum" in schema:
        return " \\| ".join(f"`{json.dumps(v)}`" for v in schema["enum"])
    kinds = schema.get("type", "any")
    kinds = [kinds] if isinstance(kinds, str) else list(kinds)
    bounds = []
    for key, sign in (("minimum", "≥"), ("exclusiveMinimum", ">"), ("maximum", "≤"), ("exclusiveMaximum", "<")):
        if key in schema:
            bounds.append(f"{sign} {schema[key]:,}" if isinstance(schema[key], int) else f"{sign} {schema[key]}")
    if schema.get("minLength") == 1:
        bounds.append("not empty")
    for key, word in (("maxLength", "at most {:,} characters"), ("minItems", "at least {} entries"),
                      ("maxItems", "at most {} entries")):
        if key in schema:
            bounds.append(word.format(schema[key]))
    if "items" in schema and "array" in kinds:
        inner = schema["items"]
        inner_name = "objects" if "properties" in inner or "oneOf" in inner else f"{inner.get('type', 'value')}s"
        kinds = [f"array of {inner_name}" if k == "array" else k for k in kinds]
    main = [k for k in kinds if k != "null"]
    text = " or ".join(main) + (" " + ", ".join(bounds) if bounds else "")
    return text + (" or null" if "null" in kinds else "")


def config_defaults() -> dict:
    """The values a config of only a name gets (a validated StudyConfig), as one flat dict of dotted paths."""
    from engine.kinds import get_kind
    from workers.store.config import KIND_SETTINGS_SCHEMAS, StudyConfig

    flat: dict[str, object] = {}

    def walk(value: object, prefix: str) -> None:
        if isinstance(value, dict) and value:
            for key, sub in value.items():
                walk(sub, f"{prefix}{key}.")
        flat[prefix.rstrip(".")] = value

    data = StudyConfig.from_dict({"name": "A study"}).to_dict()
    for key, value in data.items():
        walk(value, f"{key}.")
    for kind in KIND_SETTINGS_SCHEMAS:  # every kind's settings, asked by this study or not
        for key, value in get_kind(kind).check_settings(None).items():
            flat[f"{kind}.{key}"] = value
    return flat


def shown(value: object) -> str:
    if isinstance(value, str) and "\n" in value:
        return "(a text)"
    text = json.dumps(value, ensure_ascii=False)
    return f"`{text}`" if len(text) <= 60 else "(see description)"


def config_reference() -> str:
    from workers.store.config import SCHEMA

    described = yaml.safe_load((DOCS / "reference" / "config-fields.yml").read_text(encoding="utf-8"))
    defaults = config_defaults()
    fields = schema_fields(SCHEMA)
    paths = {path for path, _ in fields}
    for stale in sorted(set(described) - paths - {PARAM_NOTES}):
        log.warning("docs/reference/config-fields.yml describes '%s', which the config schema does not have",
                    stale)
    required = set(SCHEMA.get("required", ()))
    rows = ["| field | type | default | description |", "|---|---|---|---|"]
    for path, sub in fields:
        entry = described.get(path)
        if not entry or not entry.get("description"):
            log.warning("the config field '%s' has no description in docs/reference/config-fields.yml", path)
            entry = {"description": ""}
        if "default" in entry:
            default = entry["default"]
        elif path in required:
            default = "required"
        elif path in defaults:
            default = shown(defaults[path])
        else:
            default = "—"
        description = " ".join(str(entry["description"]).split()).replace("|", "\\|")
        rows.append(f"| <code id=\"{path.replace('[]', '').replace('.', '-')}\">{path}</code> | {type_of(sub)} "
                    f"| {default} | {description} |")
    return "\n".join(rows) + "\n"


def rst_to_markdown(text: str) -> str:
    """A docstring's reStructuredText inline markup as Markdown: ``:func:`~a.b``` as `b`, double backticks as one."""
    text = re.sub(r":\w+:`~?([\w.]+)`", lambda m: f"`{m.group(1).rsplit('.', 1)[-1]}`"
                  if m.group(0).split("`")[1].startswith("~") else f"`{m.group(1)}`", text)
    return re.sub(r"``([^`]+)``", r"`\1`", text)


def documented_parameters(cls: type) -> dict[str, str]:
    """Parameter name -> its description, from the numpydoc ``Parameters`` sections of a planner class and its
    bases (the nearest class that describes a parameter wins). ``name : type`` followed by indented lines is
    described by those lines; ``name : text`` alone (``a, b : text`` for several) by its text."""
    found: dict[str, str] = {}
    for klass in cls.__mro__:
        doc = inspect.cleandoc(klass.__doc__ or "")
        section = re.search(r"^Parameters\n-{3,}\n(.*?)(?=^\S[^\n]*\n-{3,}\n|\Z)", doc, re.M | re.S)
        if not section:
            continue
        entries = re.findall(r"^([\w, ]+?) :([^\n]*)(?:\n|\Z)((?:[ \t]+[^\n]*\n?)*)", section.group(1), re.M)
        for names, head, body in entries:
            text = rst_to_markdown(" ".join(body.split()) or head.strip())
            for name in names.split(","):
                found.setdefault(name.strip(), text)
    return found


def parameter_descriptions(name: str, notes: dict) -> dict[str, str]:
    """An algorithm's parameters described: by its planner's docstring, else by another planner's that documents
    the same parameter with the same schema (the pair planners refer to ANNTri's), else by
    ``docs/reference/config-fields.yml``'s ``algorithm parameters`` section."""
    from engine.registry import ALGORITHMS

    entry = ALGORITHMS[name]
    out = dict(notes.get(name, {}))
    for other in ALGORITHMS.values():
        for param, text in documented_parameters(other.planner_class()).items():
            if param in entry.params and other.params.get(param) == entry.params[param] and other is not entry:
                out.setdefault(param, text)
    out.update(documented_parameters(entry.planner_class()))
    return {param: text for param, text in out.items() if param in entry.params}


def params_reference() -> str:
    from engine.registry import ALGORITHMS

    described_fields = yaml.safe_load((DOCS / "reference" / "config-fields.yml").read_text(encoding="utf-8"))
    notes = described_fields.get(PARAM_NOTES, {})
    for name, params in notes.items():
        stale = set(params) - set(ALGORITHMS.get(name, type("", (), {"params": {}})).params)
        if stale:
            log.warning("docs/reference/config-fields.yml describes parameters %s of '%s', which it does not have",
                        sorted(stale), name)
    out = []
    for name, entry in ALGORITHMS.items():
        out.append(f"### `{name}`\n\n{entry.description}\n")
        kinds = ", ".join(f"`{k}`" for k in entry.question_kinds)
        out.append(f"Asks {kinds} questions (first: the default); learns a {entry.learns}.\n")
        if not entry.params:
            out.append("No parameters.\n")
            continue
        described = parameter_descriptions(name, notes)
        out.append("| parameter | type | default | description |\n|---|---|---|---|")
        for param, sub in entry.params.items():
            default = shown(sub["default"]) if "default" in sub else "—"
            plain = {k: v for k, v in sub.items() if k != "default"}
            if not described.get(param):
                log.warning("the parameter '%s' of '%s' is described neither by its planner's docstring nor in "
                            "docs/reference/config-fields.yml", param, name)
            out.append(f"| `{param}` | {type_of(plain)} | {default} | {one_line(described.get(param, ''))} |")
        out.append("")
    return "\n".join(out)


# ---------------------------------------------------------------- the HTTP API


def resolve(spec: dict, node: object) -> object:
    """Follow a local ``$ref`` (``#/components/...``) until the node is not one."""
    seen = 0
    while isinstance(node, dict) and "$ref" in node and seen < 20:
        target: object = spec
        for part in node["$ref"].removeprefix("#/").split("/"):
            target = target[part]
        node, seen = target, seen + 1
    return node


def schema_name(spec: dict, node: dict) -> str:
    if "$ref" in node:
        return f"[`{node['$ref'].rsplit('/', 1)[-1]}`](#schema-{node['$ref'].rsplit('/', 1)[-1].lower()})"
    node = resolve(spec, node)
    if node.get("type") == "array":
        return "array of " + schema_name(spec, node.get("items", {}))
    if node.get("properties"):
        return "object with " + ", ".join(f"`{k}`" for k in node["properties"])
    return type_of(node)


def one_line(text: object) -> str:
    return " ".join(str(text or "").split()).replace("|", "\\|")


def openapi_reference(path: Path) -> str:
    spec = yaml.safe_load(path.read_text(encoding="utf-8"))
    out = [str(spec.get("info", {}).get("description", "")).strip(), ""]
    schemes = spec.get("components", {}).get("securitySchemes", {})
    if schemes:
        out.append("| auth | what |\n|---|---|")
        out += [f"| `{name}` | {one_line(scheme.get('description'))} |" for name, scheme in schemes.items()]
        out.append("")
    for route, item in spec.get("paths", {}).items():
        shared = item.get("parameters", [])
        for method in ("get", "put", "post", "patch", "delete"):
            if method not in item:
                continue
            op = item[method]
            out.append(f"### `{method.upper()} {route}`\n")
            out.append(one_line(op.get("summary")) + "\n")
            if op.get("description"):
                out.append(str(op["description"]).strip() + "\n")
            facts = []
            if op.get("tags"):
                facts.append("for: " + ", ".join(op["tags"]))
            if "security" in op:
                facts.append("auth: " + (" or ".join(k for s in op["security"] for k in s) or "none"))
            if op.get("operationId"):
                facts.append(f"operation id `{op['operationId']}`")
            if facts:
                out.append("*" + "; ".join(facts) + "*\n")
            params = [resolve(spec, p) for p in (*shared, *op.get("parameters", []))]
            if params:
                out.append("| parameter | in | type | description |\n|---|---|---|---|")
                for p in params:
                    out.append(f"| `{p['name']}` | {p.get('in', '')} | {schema_name(spec, p.get('schema', {}))} "
                               f"| {one_line(p.get('description'))} |")
                out.append("")
            body = resolve(spec, op.get("requestBody", {}))
            for media, content in (body or {}).get("content", {}).items():
                out.append(f"Request body ({media}): {schema_name(spec, content.get('schema', {}))}\n")
            out.append("| status | meaning | body |\n|---|---|---|")
            for status, response in op.get("responses", {}).items():
                resp = resolve(spec, response)
                bodies = [schema_name(spec, c.get("schema", {})) for c in resp.get("content", {}).values()
                          if c.get("schema")]
                out.append(f"| {status} | {one_line(resp.get('description'))} | {', '.join(bodies)} |")
            out.append("")
    schemas = spec.get("components", {}).get("schemas", {})
    if schemas:
        out.append("## Schemas\n")
        for name, node in schemas.items():
            out.append(f"### `{name}` {{#schema-{name.lower()}}}\n")
            if node.get("description"):
                out.append(one_line(node["description"]) + "\n")
            props = node.get("properties", {})
            if props:
                required = set(node.get("required", ()))
                out.append("| field | type | required | description |\n|---|---|---|---|")
                for field, sub in props.items():
                    out.append(f"| `{field}` | {schema_name(spec, sub)} | {'yes' if field in required else ''} "
                               f"| {one_line(resolve(spec, sub).get('description'))} |")
                out.append("")
            else:
                out.append(f"{schema_name(spec, node)}\n")
    return "\n".join(out)


# ---------------------------------------------------------------- files outside docs/

LINK = re.compile(r"(?<!!)\[([^\]]+)\]\(([^)\s]+)\)")


def include(path: Path) -> str:
    """A Markdown file of the repository, its first heading dropped (the page has its own) and its links to
    other repository files made plain text (the site holds only docs/), and so are in-page links to no heading
    of the file (a file the site does not own must not break its build); web links kept."""
    from markdown.extensions.toc import slugify

    text = path.read_text(encoding="utf-8")
    text = re.sub(r"\A# .*\n", "", text)
    headings = re.findall(r"^#{1,6} (.+?)\s*$", text, re.M)
    anchors = {slugify(re.sub(r"[`*]", "", h), "-") for h in headings}

    def plain(match: re.Match) -> str:
        target = match.group(2)
        if target.startswith("#") and target[1:] not in anchors:
            log.info("%s: the link to %s finds no heading on the page; shown as text", path.name, target)
            return match.group(1)
        if target.startswith(("#", "http://", "https://", "mailto:")):
            return match.group(0)
        dest = (path.parent / target.split("#")[0]).resolve()
        return f"{match.group(1)} (`{dest.relative_to(ROOT)}`)" if dest.is_relative_to(ROOT) else match.group(1)

    return LINK.sub(plain, text)
