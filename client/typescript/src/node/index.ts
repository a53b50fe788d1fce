// @sandbox/client/node: the client for Node (>= 18). Same classes as the
// browser entry, plus what needs Node: the CLI's configuration (SANDBOX_URL,
// SANDBOX_TOKEN, SANDBOX_CA_FILE, SANDBOX_CONTEXT and its config file), a
// private CA (a transport on node:https), and upload()/download() of local
// directories as tar streams. Plain `import … from "@sandbox/client"` in Node
// resolves here too (the package's "node" export condition).

import { randomUUID } from "node:crypto";

import { Client as CoreClient, type ClientOptions } from "../client.js";
import { resolveConfig } from "./config.js";
import { caFetch } from "./https.js";
import { packDir, unpackInto } from "./tar.js";

export * from "../index.js";
export { configPath, readConfigFile, resolveConfig } from "./config.js";
export type { ConfigInput, ResolvedConfig } from "./config.js";
export { caFetch } from "./https.js";
export { packDir, TarError, unpackInto } from "./tar.js";

export interface NodeClientOptions extends ClientOptions {
  /** A context of the CLI's config file (as `sandbox --context NAME`); default SANDBOX_CONTEXT. */
  context?: string;
  /** The environment to read SANDBOX_* from (default process.env). */
  env?: NodeJS.ProcessEnv;
}

export class Client extends CoreClient {
  /** The CA file in use, when the controller's certificate is checked against a private CA. */
  readonly caFile?: string;
  /** The config file's context the settings came from, when one. */
  readonly context?: string;

  constructor(o: NodeClientOptions = {}) {
    const cfg = resolveConfig(o, o.env ?? process.env);
    const fetch = o.fetch ?? (cfg.caFile && cfg.url.startsWith("https:") ? caFetch(cfg.caFile) : undefined);
    super({ ...o, url: cfg.url, token: cfg.token, caFile: undefined, fetch }, { packDir, unpackInto }, randomUUID);
    this.caFile = cfg.caFile;
    this.context = cfg.context;
  }
}
