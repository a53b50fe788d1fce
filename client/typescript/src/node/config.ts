// Where the client points, resolved as the CLI does (common/clientcfg.c):
// explicit options, then SANDBOX_URL / SANDBOX_TOKEN / SANDBOX_CA_FILE, then
// the CLI's config file. A context named by the `context` option or
// SANDBOX_CONTEXT is the whole answer (its URL with its own token, never the
// environment's); explicit url/token still win one by one. The file's own
// `context = NAME` line is used only when nothing outside the file named a
// URL or a token, so a context's token never goes to another URL.

import { readFileSync } from "node:fs";
import { homedir } from "node:os";
import { join } from "node:path";

import { DEFAULT_URL } from "../client.js";

export interface ConfigInput {
  url?: string;
  token?: string;
  caFile?: string;
  /** A context of the config file (as `sandbox --context`). */
  context?: string;
}

export interface ResolvedConfig {
  url: string;
  token?: string;
  caFile?: string;
  /** The context the answer came from, when one. */
  context?: string;
  /** The config file looked at (it may not exist). */
  path?: string;
}

interface Block {
  url?: string;
  token?: string;
  ca_file?: string;
}

const CONTEXT_NAME = /^[A-Za-z0-9._-]{1,64}$/;

/** $XDG_CONFIG_HOME/sandbox/config (when that is an absolute path), else ~/.config/sandbox/config: the CLI's. */
export function configPath(env: NodeJS.ProcessEnv = process.env): string | undefined {
  const xdg = env.XDG_CONFIG_HOME;
  if (xdg && xdg.startsWith("/")) return join(xdg, "sandbox", "config");
  const home = env.HOME ?? homedir();
  return home ? join(home, ".config", "sandbox", "config") : undefined;
}

function unquote(s: string): string {
  s = s.trim();
  if (s.length >= 2 && ((s[0] === '"' && s.endsWith('"')) || (s[0] === "'" && s.endsWith("'")))) return s.slice(1, -1);
  return s;
}

/** The file's top block, its contexts and its `context =` line; nothing when it does not exist. */
export function readConfigFile(path: string): { top: Block; contexts: Map<string, Block>; current?: string } {
  const out = { top: {} as Block, contexts: new Map<string, Block>(), current: undefined as string | undefined };
  let text: string;
  try {
    text = readFileSync(path, "utf8");
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === "ENOENT") return out;
    throw e;
  }
  let cur = out.top;
  text.split("\n").forEach((raw, i) => {
    const line = raw.replace(/\r$/, "").trim();
    if (!line || line.startsWith("#") || line.startsWith(";")) return;
    if (line.startsWith("[")) {
      const m = /^\[\s*context\s+([^\]]*?)\s*\]/.exec(line);
      if (!m || !CONTEXT_NAME.test(m[1])) {
        throw new Error(`${path}:${i + 1}: expected '[context NAME]' (NAME: letters, digits, '.', '_', '-')`);
      }
      if (out.contexts.has(m[1])) throw new Error(`${path}:${i + 1}: context '${m[1]}' is defined twice`);
      cur = {};
      out.contexts.set(m[1], cur);
      return;
    }
    const eq = line.indexOf("=");
    if (eq < 0) throw new Error(`${path}:${i + 1}: expected 'key = value'`);
    const key = unquote(line.slice(0, eq));
    const val = unquote(line.slice(eq + 1));
    if (key === "url" || key === "token" || key === "ca_file") cur[key] = val;
    else if (key === "context" && cur === out.top) out.current = val;
    // other keys: the CLI warns and ignores them; so does the SDK (silently)
  });
  return out;
}

export function resolveConfig(input: ConfigInput = {}, env: NodeJS.ProcessEnv = process.env): ResolvedConfig {
  const named = input.context ?? (env.SANDBOX_CONTEXT || undefined);
  let url = input.url || undefined;
  let token = input.token || undefined;
  let caFile = input.caFile || undefined;
  if (!named) {
    url ??= env.SANDBOX_URL || undefined;
    token ??= env.SANDBOX_TOKEN || undefined;
    caFile ??= env.SANDBOX_CA_FILE || undefined;
  }
  if (named && !CONTEXT_NAME.test(named)) {
    throw new Error(`'${named}' is not a context name (letters, digits, '.', '_', '-')`);
  }
  const path = configPath(env);
  let context: string | undefined;
  if ((!url || !token || !caFile || named) && path) {
    const f = readConfigFile(path);
    const want = named ?? (!url && !token ? f.current : undefined);
    let b = f.top;
    if (want) {
      const found = f.contexts.get(want);
      if (!found) {
        const names = [...f.contexts.keys()].join(", ");
        const by = named ? (input.context ? "named by the context option" : "named by SANDBOX_CONTEXT") : "named by its 'context = ' line";
        throw new Error(`no context '${want}' in ${path}: ${names ? "it has " + names : "it has none"} (${by})`);
      }
      b = found;
      context = want;
    }
    url ??= b.url || undefined;
    token ??= b.token || undefined;
    caFile ??= b.ca_file || undefined;
  } else if (named) {
    throw new Error(`no context '${named}': there is no config file (neither XDG_CONFIG_HOME nor HOME is set)`);
  }
  return { url: url ?? DEFAULT_URL, token, caFile, context, path };
}
