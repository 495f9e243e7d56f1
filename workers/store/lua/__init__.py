"""Proxima's Lua scripts, one ``.lua`` file each, and ``Script``, which runs one by named keys and arguments.

A script file starts with comment lines naming its keys and arguments in the order Redis gets them::

    -- KEYS: used_token issued ...
    -- ARGV: question_id used_ttl rater ...

A trailing ``...`` means more follow by position (a list whose length varies, such as one pool per
algorithm). A line ``--#include issue.lua`` is replaced by that file: the shared functions
(``issue.lua``, ``next_question.lua``) are written once. Must never import Flask or the engine.
"""
from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from importlib.resources import files
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from typing import Any

    from redis import Redis


INCLUDE = re.compile(r"^--#include ([a-z_]+\.lua)$", re.MULTILINE)
HEADER = re.compile(r"^-- (KEYS|ARGV):(.*)$", re.MULTILINE)
MORE = "..."


def source(name: str) -> str:
    """The text of ``name`` (a file in this folder) with its includes expanded (each file once)."""
    text = files(__name__).joinpath(name).read_text(encoding="utf-8")
    return INCLUDE.sub(lambda m: source(m.group(1)).rstrip("\n"), text)


def _header(text: str, which: str) -> tuple[tuple[str, ...], bool]:
    """The names a script's own header gives its KEYS or ARGV, and whether more follow by position."""
    lines = [m.group(2).split() for m in HEADER.finditer(text) if m.group(1) == which]
    if len(lines) != 1:
        raise ValueError(f"a script needs exactly one '-- {which}:' header line")
    names = lines[0]
    more = bool(names) and names[-1] == MORE
    return tuple(names[:-1] if more else names), more


class Script:
    """One Lua file, read and hashed once per process; ``script(conn, keys={...}, args={...})`` runs it.

    It runs with EVALSHA on the client (or pipeline) it is given; redis-py's Script, made on the first
    call, loads the script when Redis answers NOSCRIPT (after a restart or SCRIPT FLUSH), and may run
    on any client, whichever registered it. Keys and arguments are passed by the names of the file's
    header, so a call missing one or naming an unknown one fails before Redis sees it.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        own = files(__name__).joinpath(name).read_text(encoding="utf-8")
        self.key_names, self.more_keys = _header(own, "KEYS")
        self.arg_names, self.more_args = _header(own, "ARGV")
        self.text = source(name)
        self._script = None

    @property
    def sha(self) -> str:
        """The SHA1 Redis knows the script by (EVALSHA)."""
        return hashlib.sha1(self.text.encode()).hexdigest()

    def ordered(self, keys: Mapping[str, object] | None = None, args: Mapping[str, object] | None = None,
                more_keys: Sequence = (), more_args: Sequence = ()) -> tuple[list, list]:
        """KEYS and ARGV in the header's order, from names (``more_*``: what follows by position)."""
        return (self._in_order("key", keys or {}, self.key_names, more_keys, self.more_keys),
                self._in_order("argument", args or {}, self.arg_names, more_args, self.more_args))

    def _in_order(self, what: str, given: Mapping, names: tuple[str, ...], more: Sequence, more_allowed: bool) -> list:
        if given.keys() != set(names):
            missing = [n for n in names if n not in given]
            unknown = sorted(set(given) - set(names))
            raise TypeError(f"{self.name}: {what}s missing {missing}, unknown {unknown}")
        if more and not more_allowed:
            raise TypeError(f"{self.name} takes no {what}s beyond {list(names)}")
        return [given[n] for n in names] + list(more)

    def __call__(self, conn: Redis, keys: Mapping[str, object] | None = None, args: Mapping[str, object] | None = None,
                 more_keys: Sequence = (), more_args: Sequence = ()) -> Any:
        key_list, arg_list = self.ordered(keys, args, more_keys, more_args)
        return self.run(conn, key_list, arg_list)

    def run(self, conn: Redis, key_list: Sequence, arg_list: Sequence) -> Any:
        """Run with KEYS and ARGV already in order (``ordered``)."""
        script = self._script
        if script is None:
            # redis-py's Script: the SHA is computed once; a concurrent first call makes a second one, harmless
            script = self._script = conn.register_script(self.text)
        return script(keys=key_list, args=arg_list, client=conn)
