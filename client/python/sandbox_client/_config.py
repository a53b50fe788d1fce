"""Where the URL, token and CA file come from: the same order as the CLI
(common/clientcfg.c, docs/client-setup.md), so a program and `sandbox` on
the same machine reach the same controller with the same token.

1. the arguments given to :class:`Client`;
2. ``SANDBOX_URL``, ``SANDBOX_TOKEN``, ``SANDBOX_CA_FILE`` (an empty variable
   counts as unset), unless a context is named (``context=`` or
   ``SANDBOX_CONTEXT``): a named context is the whole answer, so its token
   only ever goes to its own URL;
3. the CLI's config file, ``$XDG_CONFIG_HOME/sandbox/config`` (when that
   variable is an absolute path) or ``~/.config/sandbox/config``: the named
   context's section, else the one its top ``context = NAME`` line names
   when nothing above gave a URL or a token, else its top ``url``,
   ``token`` and ``ca_file`` lines;
4. the URL ``http://127.0.0.1:8080``.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

DEFAULT_URL = "http://127.0.0.1:8080"
_CONTEXT_NAME = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
_MAX_LINES = 1000


@dataclass
class ResolvedConfig:
    url: str
    token: Optional[str]
    ca_file: Optional[str]
    context: Optional[str]
    path: Optional[str]


class ConfigError(ValueError):
    """The configuration cannot be used (a bad config file, an unknown
    context, a URL that is not http(s)://, no token anywhere)."""


def config_path() -> Optional[str]:
    xdg = os.environ.get("XDG_CONFIG_HOME", "")
    if xdg.startswith("/"):
        return os.path.join(xdg, "sandbox", "config")
    home = os.environ.get("HOME", "")
    if not home:
        return None
    return os.path.join(home, ".config", "sandbox", "config")


def _unquote(s: str) -> str:
    s = s.strip(" \t\r\n")
    if len(s) >= 2 and s[0] == s[-1] and s[0] in "\"'":
        return s[1:-1]
    return s


class _Block:
    def __init__(self, name: Optional[str]) -> None:
        self.name = name
        self.values: Dict[str, str] = {}


def _read_file(path: str) -> Tuple[_Block, Dict[str, _Block], Optional[str]]:
    """(top block, {context name: block}, top's context line) of the file;
    empty when it does not exist."""
    top = _Block(None)
    contexts: Dict[str, _Block] = {}
    default_context: Optional[str] = None
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            lines: List[str] = f.readlines()
    except FileNotFoundError:
        return top, contexts, None
    except OSError:
        # the CLI warns and goes on without the file
        return top, contexts, None
    cur = top
    for lineno, line in enumerate(lines, 1):
        if lineno > _MAX_LINES or len(line) >= 4095:
            raise ConfigError(f"{path}:{lineno}: line too long or file too large")
        p = line.lstrip(" \t")
        if not p or p[0] in "#;\r\n":
            continue
        if p[0] == "[":
            close = p.find("]")
            inner = _unquote(p[1:close]) if close >= 0 else ""
            name = inner[8:].lstrip(" \t") if inner[:7] == "context" and inner[7:8] in (" ", "\t") else ""
            if not _CONTEXT_NAME.match(name):
                raise ConfigError(
                    f"{path}:{lineno}: expected '[context NAME]' (NAME: letters, digits, '.', '_', '-')"
                )
            if name in contexts:
                raise ConfigError(f"{path}:{lineno}: context '{name}' is defined twice")
            cur = contexts[name] = _Block(name)
            continue
        if "=" not in p:
            raise ConfigError(f"{path}:{lineno}: expected 'key = value'")
        key, val = p.split("=", 1)
        key, val = _unquote(key), _unquote(val)
        if key in ("url", "token", "ca_file"):
            cur.values[key] = val
        elif key == "context" and cur is top:
            default_context = val
        # other keys are ignored, as the CLI does (newer files, older clients)
    return top, contexts, default_context


def resolve(
    url: Optional[str] = None,
    token: Optional[str] = None,
    ca_file: Optional[str] = None,
    context: Optional[str] = None,
) -> ResolvedConfig:
    env = os.environ
    env_context = env.get("SANDBOX_CONTEXT") or None
    named = context or env_context
    if not named:
        url = url or env.get("SANDBOX_URL") or None
        token = token or env.get("SANDBOX_TOKEN") or None
        ca_file = ca_file or env.get("SANDBOX_CA_FILE") or None
    if named and not _CONTEXT_NAME.match(named):
        raise ConfigError(f"'{named[:64]}' is not a context name (letters, digits, '.', '_', '-')")
    path = config_path()
    used_context: Optional[str] = None
    if (named or not url or not token or not ca_file) and path:
        top, contexts, default_context = _read_file(path)
        want = named if named else (default_context if not url and not token else None)
        block = top
        if want:
            if want not in contexts:
                have = ", ".join(contexts) if contexts else ""
                where = (
                    "named by context=" if context else "named by SANDBOX_CONTEXT"
                ) if named else "named by its 'context = ' line"
                raise ConfigError(
                    f"no context '{want}' in {path}"
                    + (f": it has {have}" if have else ": it has none")
                    + f" ({where})"
                )
            block = contexts[want]
            used_context = want
        url = url or block.values.get("url") or None
        token = token or block.values.get("token") or None
        ca_file = ca_file or block.values.get("ca_file") or None
    elif named:
        raise ConfigError(f"no context '{named}': there is no config file (neither XDG_CONFIG_HOME nor HOME is set)")
    url = url or DEFAULT_URL
    if not re.match(r"^https?://[^\s\x00-\x1f\x7f]+$", url):
        raise ConfigError(f"'{url[:200]}' is not an http:// or https:// URL")
    if token is not None and re.search(r"[\s\x00-\x1f\x7f]", token):
        raise ConfigError("the API token contains spaces or control characters")
    return ResolvedConfig(url=url.rstrip("/"), token=token, ca_file=ca_file, context=used_context, path=path)
