"""The pieces of TOML's syntax that the two scanners of a workload file share, as regular
expressions: strings of the four kinds, a key part, a dotted key.

Contract: each pattern steps over one whole piece of TOML (a string with its escapes, a
key with its quoted parts), never less; the possessive quantifiers (``++``, ``*+``) keep a
match from backtracking, so no file makes a scan slower than linear. :mod:`.keydepth` (the
depth pre-scan before ``tomllib`` parses) and :mod:`.lineindex` (the line of a key, after)
read the same text, so they read it with the same grammar: one definition, not two that
could drift.
"""

from __future__ import annotations

import re

__all__ = ["DOTTED_KEY", "KEY_PART", "QUOTED_PART", "STRING"]

_ML_BASIC = r'"""(?:[^"\\]++|\\[\s\S]|"(?!""))*+"""(?:"{0,2})'
_ML_LITERAL = r"'''[\s\S]*?'''(?:'{0,2})"
_BASIC = r'"(?:[^"\\\n]++|\\.)*+"'
_LITERAL = r"'[^'\n]*+'"
#: A string of any of the four kinds (basic, literal, and their multi-line forms).
STRING = f"{_ML_BASIC}|{_ML_LITERAL}|{_BASIC}|{_LITERAL}"
_KEY_PART_TEXT = rf"(?:[A-Za-z0-9_-]++|{_BASIC}|{_LITERAL})"
#: A key of one or more parts joined by dots.
DOTTED_KEY = re.compile(rf"{_KEY_PART_TEXT}(?:[ \t]*+\.[ \t]*+{_KEY_PART_TEXT})*+")
#: A quoted key part (its dots are not separators).
QUOTED_PART = re.compile(f"{_BASIC}|{_LITERAL}")
#: One part of a key: bare, or quoted.
KEY_PART = re.compile(_KEY_PART_TEXT)
