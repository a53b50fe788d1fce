#!/usr/bin/env bash
# Builds and installs the client side of Sandbox on a workstation: the
# `sandbox` CLI, the `sandbox-mcp` MCP server and the sandbox-platform agent
# skill; prints (or merges into the clients' files) the MCP configuration of
# Claude Code, Codex CLI, Gemini CLI and Cursor. Run tools/install-client.sh
# --help for the flags and exit codes; docs/client-setup.md for the rest.
set -euo pipefail

src=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=tools/lib.sh disable=SC1091
. "$src/tools/lib.sh"

# What building the two clients needs on Debian/Ubuntu (meson -Dserver=false
# -Dtests=false): no PostgreSQL, libevent, NATS, Docker or Check.
SBX_PACKAGES=(
  build-essential meson ninja-build pkg-config
  libjson-c-dev libcurl4-openssl-dev libsodium-dev
)

EXIT_OK=0
EXIT_FAILED=1
EXIT_USAGE=2
EXIT_CONFIG=3

usage() {
  cat <<'EOF'
usage: tools/install-client.sh [--user | --system] [--prefix DIR] [--skills-dir DIR]...
                               [--build-dir DIR] [--no-packages]
                               [--url URL] [--token-file FILE]
                               [--write-config CLIENT]... [--config-path FILE]
                               [--dry-run] [-h | --help]

Builds sandbox and sandbox-mcp (meson, -Dserver=false: only json-c, libcurl and
libsodium are needed; missing Debian packages are installed with apt-get) and
installs them with the sandbox-platform agent skill. Then prints the MCP
configuration for Claude Code, Codex CLI, Gemini CLI and Cursor, pointing at the
installed sandbox-mcp; with --write-config it merges it into the client's file.
Running it again changes nothing that is already in place.

Where things go:
  --user      (default unless root)  ~/.local/bin/{sandbox,sandbox-mcp};
              the skill into ~/.claude/skills/sandbox-platform/ (Claude Code) and
              ~/.agents/skills/sandbox-platform/ (Codex CLI, Gemini CLI, Cursor)
  --system    (default as root)      /usr/local/bin/{sandbox,sandbox-mcp};
              the skill into /etc/codex/skills/sandbox-platform/ (Codex's admin
              scope); copy it from /usr/local/share/sandbox/skills/ for others
  Either way a reference copy of the skill goes to PREFIX/share/sandbox/skills/.
  --prefix DIR        install into DIR/bin and DIR/share/sandbox instead
                      (default ~/.local, or /usr/local with --system)
  --skills-dir DIR    put the skill into DIR/sandbox-platform/ instead of the
                      agents' folders above (repeatable)

Building:
  --build-dir DIR     meson build directory (default: build-client in the source
                      tree, configured -Dserver=false -Dtests=false); an already
                      configured directory, such as build/, is only compiled
  --no-packages       do not check or install Debian packages

MCP configuration (server name "sandbox"):
  --url URL           SANDBOX_URL for sandbox-mcp (default: $SANDBOX_URL, else
                      http://127.0.0.1:8080)
  --token-file FILE   a file holding the member token for the agent (first line).
                      It goes only into files written with --write-config (mode
                      600); printed configurations show a placeholder. Without
                      it the configuration takes SANDBOX_TOKEN from the client's
                      environment (Claude Code, Gemini CLI, Codex CLI) or
                      sandbox-mcp reads ~/.config/sandbox/config (all clients).
  --write-config CLIENT
                      merge the configuration into CLIENT's file instead of
                      printing it (repeatable): claude (~/.claude.json, user
                      scope), codex ($CODEX_HOME/config.toml, else
                      ~/.codex/config.toml), gemini (~/.gemini/settings.json),
                      cursor (~/.cursor/mcp.json), or all. Only the "sandbox"
                      server entry is replaced (a token already in it is kept
                      unless --token-file is given); every other key stays; the
                      previous file is kept as FILE.bak.YYYYmmddHHMMSS.
  --config-path FILE  with one --write-config: write to FILE instead (e.g. a
                      project's .mcp.json or .cursor/mcp.json)

  --dry-run           print what would be done; build, install and write nothing
  -h, --help          show this help

Exit codes: 0 done (or nothing to do); 1 a step failed (packages, build, install,
a file that cannot be written); 2 usage error (unknown flag, bad value, unreadable
or malformed --token-file); 3 an existing client configuration cannot be parsed or
merged (it is left untouched).
EOF
}

die_usage() {
  printf 'install-client: %s\nsee tools/install-client.sh --help\n' "$*" >&2
  exit "$EXIT_USAGE"
}
die() {
  printf 'install-client: %s\n' "$*" >&2
  exit "$EXIT_FAILED"
}
say() { printf '==> %s\n' "$*" >&2; }

# ---------------------------------------------------------------- arguments

scope=
prefix=
skills_dirs=()
build_dir=
packages=1
url=${SANDBOX_URL:-http://127.0.0.1:8080}
token_file=
clients=()
config_path=
dry_run=0

# need_value FLAG ARGC: the flag's value must follow it.
need_value() {
  [ "$2" -ge 2 ] || die_usage "$1 needs a value"
}

while [ $# -gt 0 ]; do
  arg=$1
  case "$arg" in
    --user=* | --system=* | --no-packages=* | --dry-run=* | --help=*) die_usage "${arg%%=*} takes no value" ;;
    --*=*) set -- "${arg%%=*}" "${arg#*=}" "${@:2}"; arg=$1 ;;
  esac
  case "$arg" in
    -h | --help) usage; exit "$EXIT_OK" ;;
    --user | --system)
      [ -z "$scope" ] || [ "$scope" = "${arg#--}" ] || die_usage "--user and --system exclude each other"
      scope=${arg#--}; shift ;;
    --prefix) need_value "$arg" $#; prefix=$2; shift 2 ;;
    --skills-dir) need_value "$arg" $#; skills_dirs+=("$2"); shift 2 ;;
    --build-dir) need_value "$arg" $#; build_dir=$2; shift 2 ;;
    --no-packages) packages=0; shift ;;
    --url) need_value "$arg" $#; url=$2; shift 2 ;;
    --token-file) need_value "$arg" $#; token_file=$2; shift 2 ;;
    --write-config) need_value "$arg" $#; clients+=("$2"); shift 2 ;;
    --config-path) need_value "$arg" $#; config_path=$2; shift 2 ;;
    --dry-run) dry_run=1; shift ;;
    *) die_usage "unknown argument '$arg'" ;;
  esac
done

if [ -z "$scope" ]; then
  if [ "$(id -u)" -eq 0 ]; then scope=system; else scope=user; fi
fi
[ -n "${HOME:-}" ] || die_usage "HOME is not set"

for v in "$prefix" "${skills_dirs[@]}" "$build_dir" "$config_path"; do
  case "$v" in
    *$'\n'*) die_usage "a path with a newline: '$v'" ;;
  esac
done
abs() { case "$1" in /*) printf '%s\n' "$1" ;; *) printf '%s/%s\n' "$PWD" "$1" ;; esac; }
[ -z "$prefix" ] || prefix=$(abs "$prefix")
[ -z "$config_path" ] || config_path=$(abs "$config_path")
for i in "${!skills_dirs[@]}"; do skills_dirs[i]=$(abs "${skills_dirs[i]}"); done

case "$url" in
  http://?* | https://?*) ;;
  *) die_usage "--url: '$url' is not an http:// or https:// URL" ;;
esac
case "$url" in
  *[[:space:]\"\\]*) die_usage "--url: '$url' has a space, a quote or a backslash" ;;
esac

# Clients, normalised, each once.
want_clients=()
for c in "${clients[@]}"; do
  case "$c" in
    claude | claude-code) c=claude ;;
    codex | codex-cli) c=codex ;;
    gemini | gemini-cli) c=gemini ;;
    cursor) ;;
    all) want_clients=(claude codex gemini cursor); continue ;;
    *) die_usage "--write-config: '$c' is not one of claude, codex, gemini, cursor, all" ;;
  esac
  case " ${want_clients[*]} " in *" $c "*) ;; *) want_clients+=("$c") ;; esac
done
if [ -n "$config_path" ] && [ "${#want_clients[@]}" -ne 1 ]; then
  die_usage "--config-path goes with exactly one --write-config CLIENT"
fi

token=
if [ -n "$token_file" ]; then
  { [ -r "$token_file" ] && [ -f "$token_file" ]; } || die_usage "--token-file: cannot read '$token_file'"
  IFS= read -r token <"$token_file" || true
  token=${token%$'\r'}
  token=${token#"${token%%[![:space:]]*}"}
  token=${token%"${token##*[![:space:]]}"}
  [ -n "$token" ] || die_usage "--token-file: '$token_file' is empty"
  [[ $token =~ ^sbt_[A-Za-z0-9_-]{8,500}$ ]] \
    || die_usage "--token-file: the first line of '$token_file' is not a Sandbox API token (sbt_...)"
  perm=$(stat -c %a "$token_file" 2>/dev/null || echo 600)
  if [ $((8#$perm & 077)) -ne 0 ]; then
    say "warning: $token_file is readable by others (mode $perm): chmod 600 it"
  fi
fi

# ---------------------------------------------------------------- where

if [ "$scope" = system ]; then
  prefix=${prefix:-/usr/local}
  [ "${#skills_dirs[@]}" -gt 0 ] || skills_dirs=(/etc/codex/skills)
else
  prefix=${prefix:-$HOME/.local}
  [ "${#skills_dirs[@]}" -gt 0 ] || skills_dirs=("$HOME/.claude/skills" "$HOME/.agents/skills")
fi
bindir=$prefix/bin
sharedir=$prefix/share/sandbox
skill_src=$src/examples/skills/sandbox-platform
[ -f "$skill_src/SKILL.md" ] || die "$skill_src/SKILL.md is missing: run this from a Sandbox source tree"
skill_targets=("$sharedir/skills/sandbox-platform")
for d in "${skills_dirs[@]}"; do skill_targets+=("$d/sandbox-platform"); done

if [ -z "$build_dir" ]; then build_dir=$src/build-client; else build_dir=$(abs "$build_dir"); fi
mcp_bin=$bindir/sandbox-mcp

# ---------------------------------------------------------------- build

if [ "$packages" -eq 1 ]; then
  missing=()
  for p in "${SBX_PACKAGES[@]}"; do
    if [ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)" != "install ok installed" ]; then
      missing+=("$p")
    fi
  done
  if [ "${#missing[@]}" -gt 0 ]; then
    if [ "$dry_run" -eq 1 ]; then
      say "would install the missing packages: ${missing[*]}"
    else
      (sbx_install_packages) || die "installing packages failed (${missing[*]})"
    fi
  fi
fi

if [ "$dry_run" -eq 1 ]; then
  if [ -f "$build_dir/meson-private/coredata.dat" ]; then
    say "would run meson compile -C $build_dir"
  else
    say "would run meson setup $build_dir -Dserver=false -Dtests=false, then meson compile -C $build_dir"
  fi
else
  (cd "$src" && sbx_build "$build_dir" -Dserver=false -Dtests=false) >&2 \
    || die "build failed (meson in $build_dir; see the output above)"
  for b in sandbox sandbox-mcp; do
    [ -x "$build_dir/tools/$b" ] || die "the build made no $build_dir/tools/$b"
  done
fi

# ---------------------------------------------------------------- install

# install_file SRC DEST MODE: copies unless DEST already has the same bytes.
install_file() {
  local from=$1 to=$2 mode=$3
  if [ -f "$to" ] && cmp -s "$from" "$to"; then
    if [ "$dry_run" -eq 0 ]; then chmod "$mode" "$to" || die "cannot chmod $to"; fi
    say "unchanged: $to"
    return 0
  fi
  if [ "$dry_run" -eq 1 ]; then
    say "would install $to"
    return 0
  fi
  mkdir -p "$(dirname "$to")" 2>/dev/null \
    || die "cannot create $(dirname "$to")$([ "$scope" = system ] && echo ': run as root, or use --user')"
  # A new file moved into place: a running sandbox-mcp keeps its old inode.
  local tmp
  tmp=$(mktemp "$(dirname "$to")/.install.XXXXXX" 2>/dev/null) \
    || die "cannot write into $(dirname "$to")$([ "$scope" = system ] && echo ': run as root, or use --user')"
  if ! cp "$from" "$tmp" || ! chmod "$mode" "$tmp" || ! mv -f "$tmp" "$to"; then
    rm -f "$tmp"
    die "cannot install $to"
  fi
  say "installed: $to"
}

for b in sandbox sandbox-mcp; do
  if [ "$dry_run" -eq 1 ] && [ ! -x "$build_dir/tools/$b" ]; then
    say "would install $bindir/$b"
  else
    install_file "$build_dir/tools/$b" "$bindir/$b" 755
  fi
done
for t in "${skill_targets[@]}"; do
  for f in "$skill_src"/*; do
    [ -f "$f" ] && install_file "$f" "$t/$(basename "$f")" 644
  done
done

if [ "$dry_run" -eq 0 ]; then
  "$bindir/sandbox" --version >/dev/null 2>&1 || die "$bindir/sandbox --version failed: the installed binary does not run"
  "$mcp_bin" --version >/dev/null 2>&1 || die "$mcp_bin --version failed: the installed binary does not run"
  say "$("$bindir/sandbox" --version) and $("$mcp_bin" --version) in $bindir"
fi
case ":${PATH:-}:" in
  *":$bindir:"*) ;;
  *) say "note: $bindir is not on PATH; add it (export PATH=\"$bindir:\$PATH\" in ~/.profile)" ;;
esac

# ---------------------------------------------------------------- MCP configuration

# The MCP configuration work is tools/mcp_config.py (json and tomllib are in
# the standard library; meson needs python3 anyway): MODE print, merge or
# check; settings from SBX_BIN, SBX_URL, SBX_TOKEN.
config_py="$src/tools/mcp_config.py"

config_run() { # config_run MODE CLIENT FILE
  SBX_BIN=$mcp_bin SBX_URL=$url SBX_TOKEN=$token python3 "$config_py" "$@"
}

config_file_of() {
  case "$1" in
    claude) echo "$HOME/.claude.json" ;;
    codex) echo "${CODEX_HOME:-$HOME/.codex}/config.toml" ;;
    gemini) echo "$HOME/.gemini/settings.json" ;;
    cursor) echo "$HOME/.cursor/mcp.json" ;;
  esac
}

client_name() {
  case "$1" in
    claude) echo "Claude Code" ;;
    codex) echo "Codex CLI" ;;
    gemini) echo "Gemini CLI" ;;
    cursor) echo "Cursor" ;;
  esac
}

# write_config CLIENT FILE: merges our entry into FILE (backup, atomic
# replace, mode 600 when it holds a token).
write_config() {
  local client=$1 file=$2 merged rc=0 tmp mode has_token=0
  merged=$(config_run merge "$client" "$file") || rc=$?
  if [ "$rc" -ne 0 ]; then
    [ "$rc" -eq "$EXIT_CONFIG" ] || die "merging the $(client_name "$client") configuration into $file failed"
    printf 'install-client: %s was left as it is\n' "$file" >&2
    exit "$EXIT_CONFIG"
  fi
  # the first line says whether our entry holds a literal token
  [ "${merged%%$'\n'*}" != token=1 ] || has_token=1
  merged=${merged#*$'\n'}
  if [ -L "$file" ]; then
    file=$(readlink -f "$file") || die "cannot resolve the symbolic link $2"
  fi
  if [ -f "$file" ] && [ "$merged" = "$(cat "$file")" ]; then
    if [ "$has_token" -eq 1 ] && [ "$dry_run" -eq 0 ]; then chmod 600 "$file" || die "cannot chmod $file"; fi
    say "unchanged: $file ($(client_name "$client"))"
    return 0
  fi
  if [ "$dry_run" -eq 1 ]; then
    say "would write $file ($(client_name "$client")): the \"sandbox\" MCP server -> $mcp_bin$([ -f "$file" ] && echo ", merged, the old file backed up")"
    return 0
  fi
  mkdir -p "$(dirname "$file")" || die "cannot create $(dirname "$file")"
  tmp=$(mktemp "$(dirname "$file")/.sandbox-config.XXXXXX") || die "cannot write into $(dirname "$file")"
  if [ -f "$file" ]; then
    mode=$(stat -c %a "$file")
    cp -p "$file" "$file.bak.$(date +%Y%m%d%H%M%S)" || { rm -f "$tmp"; die "cannot back up $file"; }
  else
    mode=644
  fi
  if [ "$has_token" -eq 1 ]; then mode=600; fi
  if ! chmod "$mode" "$tmp" || ! printf '%s\n' "$merged" >"$tmp" || ! mv -f "$tmp" "$file"; then
    rm -f "$tmp"
    die "cannot write $file"
  fi
  config_run check "$client" "$file" || die "$file does not hold the sandbox entry after writing it"
  say "wrote $file ($(client_name "$client")): the \"sandbox\" MCP server runs $mcp_bin$([ "$has_token" -eq 1 ] && echo ' (holds the token: mode 600)')"
}

if [ "${#want_clients[@]}" -gt 0 ]; then
  if [ "$(id -u)" -eq 0 ] && [ -n "${SUDO_USER:-}" ] && [ "$SUDO_USER" != root ]; then
    say "note: writing the configuration of root ($HOME), not of $SUDO_USER: run --write-config without sudo for yours"
  fi
  for c in "${want_clients[@]}"; do
    write_config "$c" "${config_path:-$(config_file_of "$c")}"
  done
  if [ -z "$token" ]; then
    say "the token: export SANDBOX_TOKEN=<member token> where the client starts, or put 'token = ...' in ~/.config/sandbox/config (chmod 600), or run again with --token-file FILE"
  fi
  exit "$EXIT_OK"
fi

# Print every client's configuration. The token is never printed.
tok_note="SANDBOX_TOKEN: a member token (docs/mcp.md#the-member-token)"
[ -z "$token" ] || tok_note="--token-file $token_file: its token goes in with --write-config; shown here as a placeholder"
printf '\n# MCP configuration for the installed %s (%s)\n' "$mcp_bin" "$tok_note"
for c in claude codex gemini cursor; do
  printf '\n# %s: %s  (or: tools/install-client.sh --write-config %s)\n' \
    "$(client_name "$c")" "$(config_file_of "$c")" "$c"
  SBX_BIN=$mcp_bin SBX_URL=$url SBX_TOKEN='' python3 "$config_py" print "$c" - \
    || die "cannot print the $(client_name "$c") configuration"
done
exit "$EXIT_OK"
