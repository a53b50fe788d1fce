#!/bin/sh
# Sandbox's client installer, served by a controller at URL/setup.sh with
# the values below filled in (controller/client_files.c; the template is
# tools/client-setup.sh; docs/client-setup.md):
#   curl -fsSL URL/setup.sh | sh                    install or upgrade
#   curl -fsSL URL/setup.sh | sh -s -- --uninstall  remove what it installed
#   curl -fsSL URL/setup.sh | sh -s -- --help
# For the current user, without root: sandbox and sandbox-mcp into
# ~/.local/bin, the sandbox-platform agent skill where Claude Code
# (~/.claude/skills) and Codex CLI, Gemini CLI and Cursor (~/.agents/skills)
# look for it, the "sandbox" MCP server in their configurations (with
# python3; a "sandbox" entry of your own is kept), and the controller's URL
# in ~/.config/sandbox/config (never a token). Every file is checked against
# the SHA-256 sum the controller gives before anything is installed. Exit:
# 0 done, 1 failed (nothing installed when a download or a sum failed),
# 2 usage, 3 unsupported machine.
set -eu

SBX_URL='@SBX_URL@'
SBX_VERSION='@SBX_VERSION@'
SBX_ARCH='@SBX_ARCH@'
# SHA-256, mode, name (under URL/client/) of each file
SBX_FILES='@SBX_FILES@'

say() { printf 'sandbox setup: %s\n' "$*"; }
die() { printf 'sandbox setup: %s\n' "$1" >&2; exit "${2:-1}"; }

usage() {
  cat <<EOF
Installs the Sandbox clients of $SBX_URL (version $SBX_VERSION) for you.
  curl -fsSL $SBX_URL/setup.sh | sh -s -- [--ca-file FILE] [--no-mcp-config]
  curl -fsSL $SBX_URL/setup.sh | sh -s -- --uninstall

  --ca-file FILE     the PEM CA of an https:// controller (fetch this script
                     with curl --cacert FILE); written into the CLI's config
  --no-mcp-config    leave the agents' MCP configurations alone
  --uninstall        put back what this installer changed (a file changed
                     since is kept, and named)

Into ~/.local/bin: sandbox, sandbox-mcp; the skill into ~/.claude/skills and
~/.agents/skills; the MCP server "sandbox" into ~/.claude.json,
~/.codex/config.toml, ~/.gemini/settings.json and ~/.cursor/mcp.json (with
python3; an entry "sandbox" of your own is kept); the URL into
~/.config/sandbox/config. Exit 0 done, 1 failed, 2 usage, 3 unsupported.
EOF
}

uninstall=0 ca_file='' mcp=1
while [ $# -gt 0 ]; do
  case "$1" in
    --uninstall) uninstall=1; shift ;;
    --ca-file)
      [ $# -ge 2 ] || die "--ca-file needs a file" 2
      ca_file=$2; shift 2 ;;
    --no-mcp-config) mcp=0; shift ;;
    -h | --help) usage; exit 0 ;;
    *) die "unknown argument: $1 (see --help)" 2 ;;
  esac
done

if [ -z "${HOME:-}" ] || [ ! -d "$HOME" ]; then die "no home directory (HOME)"; fi
bindir=$HOME/.local/bin
share=$HOME/.local/share/sandbox
manifest=$share/installed
cfgdir=${XDG_CONFIG_HOME:-$HOME/.config}/sandbox
mcp_bin=$bindir/sandbox-mcp

sum_of() { sha256sum "$1" 2>/dev/null | cut -d' ' -f1; }

# The manifest: a line "KIND SUM PATH" per thing this installer made or
# changed. dir: a directory it made (removed when empty); new: a file it
# made (removed when still as written); changed: a file that was there
# before (its former bytes kept under $share/orig, put back when the file is
# still as written). An agent's MCP file changed since has only the sandbox
# server taken out of it.
kind_of() { awk -v p="$1" '{ k = $1; sub(/^[^ ]+ [^ ]+ /, ""); if ($0 == p) { print k; exit } }' "$manifest"; }
sum_noted() { awk -v p="$1" '{ s = $2; sub(/^[^ ]+ [^ ]+ /, ""); if ($0 == p) { print s; exit } }' "$manifest"; }
note() { # note KIND SUM PATH: PATH's line, replaced
  awk -v p="$3" '{ l = $0; sub(/^[^ ]+ [^ ]+ /, ""); if ($0 != p) print l }' "$manifest" >"$manifest.tmp"
  printf '%s %s %s\n' "$1" "$2" "$3" >>"$manifest.tmp"
  mv -f "$manifest.tmp" "$manifest"
}
orig_of() { printf '%s/orig/%s' "$share" "$(printf '%s' "$1" | sha256sum | cut -c1-16)"; }
# mkdirs DIR: DIR and its missing parents, each one made noted
mkdirs() {
  [ -d "$1" ] && return 0
  mkdirs "$(dirname "$1")"
  mkdir "$1" || die "cannot create $1"
  note dir - "$1"
}
mcp_run() { # mcp_run MODE CLIENT FILE
  SBX_BIN=$mcp_bin SBX_URL=$SBX_URL SBX_TOKEN='' python3 "$share/mcp_config.py" "$@"
}
agent_file() {
  case "$1" in
    claude) echo "$HOME/.claude.json" ;;
    codex) echo "${CODEX_HOME:-$HOME/.codex}/config.toml" ;;
    gemini) echo "$HOME/.gemini/settings.json" ;;
    cursor) echo "$HOME/.cursor/mcp.json" ;;
  esac
}
agent_of() { for c in claude codex gemini cursor; do [ "$(agent_file "$c")" != "$1" ] || echo "$c"; done; }

# ---------------------------------------------------------------- uninstall
if [ "$uninstall" -eq 1 ]; then
  [ -f "$manifest" ] || die "nothing to uninstall: no $manifest (this installer did not install here)"
  kept=0
  while read -r kind sum path; do
    case "$kind" in new | changed) ;; *) continue ;; esac
    [ -e "$path" ] || continue
    orig=$(orig_of "$path")
    if [ "$(sum_of "$path")" = "$sum" ] && { [ "$kind" = new ] || [ -f "$orig" ]; }; then
      if [ "$kind" = new ]; then rm -f "$path"; else cat "$orig" >"$path"; fi
      say "$([ "$kind" = new ] && echo removed || echo 'put back') $path"
      continue
    fi
    client=$(agent_of "$path")
    if [ -n "$client" ] && command -v python3 >/dev/null 2>&1 && out=$(mcp_run remove "$client" "$path"); then
      printf '%s\n' "$out" >"$path"
      say "took the MCP server \"sandbox\" out of $path (changed since: the rest kept)"
    else
      kept=1
      say "kept $path: it changed since it was installed"
    fi
  done <"$manifest"
  dirs=$(awk '$1 == "dir" { sub(/^[^ ]+ [^ ]+ /, ""); print }' "$manifest" | sort -r)
  rm -rf "$share/orig" "$share/mcp_config.py" "$manifest"
  while IFS= read -r d; do
    [ -z "$d" ] || rmdir "$d" 2>/dev/null || true
  done <<EOF
$dirs
EOF
  say "uninstalled$([ "$kept" -eq 0 ] || echo '; files changed since were kept')"
  exit 0
fi

# ---------------------------------------------------------------- the machine
os=$(uname -s) arch=$(uname -m)
if [ "$os" != Linux ] || [ "$arch" != "$SBX_ARCH" ]; then
  die "this machine ($os $arch) is not supported: the controller serves clients for Linux $SBX_ARCH (built on Debian 12). Build them from source instead: https://github.com/ (git clone the project, then tools/install-client.sh; docs/client-setup.md)" 3
fi
if command -v curl >/dev/null 2>&1; then
  fetch() { curl -fsS --proto '=http,https' ${ca_file:+--cacert "$ca_file"} -o "$2" "$SBX_URL/client/$1"; }
elif command -v wget >/dev/null 2>&1; then
  fetch() { wget -q ${ca_file:+--ca-certificate="$ca_file"} -O "$2" "$SBX_URL/client/$1"; }
else
  die "neither curl nor wget is installed" 3
fi
command -v sha256sum >/dev/null 2>&1 || die "sha256sum is not installed (coreutils)" 3
[ -z "$ca_file" ] || [ -r "$ca_file" ] || die "--ca-file $ca_file: cannot read it" 2
case "$ca_file" in '' | /*) ;; *) ca_file=$(pwd)/$ca_file ;; esac

# ---------------------------------------------------------------- download, check
tmp=$(mktemp -d "${TMPDIR:-/tmp}/sandbox-setup.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
while read -r sum mode name; do
  [ -n "$name" ] || continue
  fetch "$name" "$tmp/$name" || die "cannot download $SBX_URL/client/$name: nothing was installed"
  got=$(sum_of "$tmp/$name")
  [ "$got" = "$sum" ] || die "$name does not match its SHA-256 sum (expected $sum, got $got): nothing was installed"
  chmod "$mode" "$tmp/$name"
done <<EOF
$SBX_FILES
EOF

# the binaries run here, or the libraries they lack (Debian's packages)
if ! "$tmp/sandbox" --version >/dev/null 2>&1 || ! "$tmp/sandbox-mcp" --version >/dev/null 2>&1; then
  missing=$(ldd "$tmp/sandbox" "$tmp/sandbox-mcp" 2>/dev/null | awk '/not found/ { print $1 }' | sort -u)
  pkgs=''
  for lib in $missing; do
    case "$lib" in
      libjson-c.so.5) pkgs="$pkgs libjson-c5" ;;
      libcurl.so.4) pkgs="$pkgs libcurl4" ;;
      libsodium.so.23) pkgs="$pkgs libsodium23" ;;
      *) die "the clients need $lib, which this machine lacks: build them from source instead (tools/install-client.sh; docs/client-setup.md)" 3 ;;
    esac
  done
  [ -n "$pkgs" ] || die "the clients do not run on this machine ($("$tmp/sandbox" --version 2>&1 | head -n 1)): build them from source instead (tools/install-client.sh; docs/client-setup.md)" 3
  if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
    say "installing the shared libraries the clients need:$pkgs (apt-get)"
    # shellcheck disable=SC2086 # a list of package names
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q $pkgs >/dev/null || die "apt-get install$pkgs failed"
  else
    die "the clients need the shared libraries of$pkgs: as root, apt-get install$pkgs (or run this installer as root, which installs them), then run it again" 3
  fi
  "$tmp/sandbox" --version >/dev/null 2>&1 || die "the clients still do not run here: build them from source instead (docs/client-setup.md)" 3
fi

# ---------------------------------------------------------------- install
if [ ! -f "$manifest" ]; then
  made='' d=$share
  while [ ! -d "$d" ]; do made="$d $made"; d=$(dirname "$d"); done
  mkdir -p "$share" || die "cannot create $share"
  : >"$manifest"
  for d in $made; do note dir - "$d"; done
fi
# keep PATH: what this installer is about to write over: new (nothing was
# there), changed (the former bytes kept, the first time), or as noted
keep() {
  k=$(kind_of "$1")
  if [ -n "$k" ]; then echo "$k"; return; fi
  [ -e "$1" ] || { echo new; return; }
  mkdirs "$share/orig"
  cat "$1" >"$(orig_of "$1")" || die "cannot keep a copy of $1"
  echo changed
}
# put SRC DEST MODE: DEST gets SRC's bytes (a new file moved into place)
put() {
  if [ -f "$2" ] && cmp -s "$1" "$2"; then
    say "unchanged: $2"
    return 0
  fi
  mkdirs "$(dirname "$2")"
  k=$(keep "$2")
  [ "$k" != changed ] || [ -n "$(sum_noted "$2")" ] || say "replacing $2 (kept, to be put back by --uninstall)"
  { cp "$1" "$2.sbx-new" && chmod "$3" "$2.sbx-new" && mv -f "$2.sbx-new" "$2"; } || die "cannot install $2"
  note "$k" "$(sum_of "$2")" "$2"
  say "installed: $2"
}
put "$tmp/sandbox" "$bindir/sandbox" 755
put "$tmp/sandbox-mcp" "$bindir/sandbox-mcp" 755
put "$tmp/SKILL.md" "$HOME/.claude/skills/sandbox-platform/SKILL.md" 644
put "$tmp/SKILL.md" "$HOME/.agents/skills/sandbox-platform/SKILL.md" 644
cp "$tmp/mcp_config.py" "$share/mcp_config.py" || die "cannot write $share/mcp_config.py"

# the CLI's config: the controller's URL (and CA), never a token
cfg=$cfgdir/config
if [ ! -f "$cfg" ]; then
  mkdirs "$cfgdir"
  umask_was=$(umask)
  umask 077
  { printf '# Sandbox CLI (written by %s/setup.sh)\nurl = %s\n' "$SBX_URL" "$SBX_URL"
    [ -z "$ca_file" ] || printf 'ca_file = %s\n' "$ca_file"; } >"$cfg" || die "cannot write $cfg"
  umask "$umask_was"
  note new "$(sum_of "$cfg")" "$cfg"
  say "wrote $cfg (url = $SBX_URL)"
elif [ "$(sed -n "s/^[[:space:]]*url[[:space:]]*=[[:space:]]*//p" "$cfg" | head -n 1 | tr -d "\"' ")" = "$SBX_URL" ]; then
  say "unchanged: $cfg"
else
  say "kept $cfg as it is: it names another controller (set url = $SBX_URL there, or SANDBOX_URL)"
fi

# the agents' MCP configurations
if [ "$mcp" -eq 1 ] && ! command -v python3 >/dev/null 2>&1; then
  say "no python3 here: add the MCP server \"sandbox\" (command $mcp_bin, env SANDBOX_URL=$SBX_URL) to your agents' configurations by hand (docs/mcp.md)"
elif [ "$mcp" -eq 1 ]; then
  for client in claude codex gemini cursor; do
    f=$(agent_file "$client")
    rc=0
    out=$(mcp_run add "$client" "$f") || rc=$?
    if [ "$rc" -eq 4 ]; then
      say "kept your own \"sandbox\" MCP server in $f"
      continue
    elif [ "$rc" -ne 0 ]; then
      say "left $f alone: it cannot be merged (see above)"
      continue
    fi
    out=${out#*
}
    if [ -f "$f" ] && [ "$(cat "$f")" = "$out" ]; then
      say "unchanged: $f"
      continue
    fi
    [ -f "$f" ] || mkdirs "$(dirname "$f")"
    k=$(keep "$f")
    mode=600
    [ ! -f "$f" ] || mode=$(stat -c %a "$f")
    { printf '%s\n' "$out" >"$f.sbx-new" && chmod "$mode" "$f.sbx-new" && mv -f "$f.sbx-new" "$f"; } ||
      die "cannot write $f"
    note "$k" "$(sum_of "$f")" "$f"
    say "the MCP server \"sandbox\" in $f"
  done
fi

"$bindir/sandbox" --version >/dev/null 2>&1 || die "$bindir/sandbox does not run"
say "$("$bindir/sandbox" --version) and $("$bindir/sandbox-mcp" --version) are in $bindir"
case ":${PATH:-}:" in
  *":$bindir:"*) ;;
  *) say "note: $bindir is not on your PATH: export PATH=\"$bindir:\$PATH\" (in ~/.profile)" ;;
esac
say "next: export SANDBOX_TOKEN=sbt_... (a token from your operator; or token = ... in $cfg), then: sandbox create --wait"
