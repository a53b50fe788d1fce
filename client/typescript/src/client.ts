// The client: where the controller is, the token, and the resources. This is
// the browser-safe core (web APIs only); @sandbox/client/node adds the
// environment and the CLI's config file, a private CA, and local directories.

import { Operations, POLL_WAIT_SECONDS } from "./operations.js";
import { type ClientContext, type LocalFiles, Sandboxes } from "./sandbox.js";
import { type FetchLike, Transport } from "./transport.js";
import type { JsonObject, SandboxEvent, SnapshotData, VolumeData } from "./types.js";
import { randomUUID, snake } from "./util.js";

/** Where the CLI's default points: a controller on this machine. */
export const DEFAULT_URL = "http://127.0.0.1:8080";

export interface ClientOptions {
  /** The controller's URL (default http://127.0.0.1:8080; Node: SANDBOX_URL, the config file). */
  url?: string;
  /** An API token (sbt_…). */
  token?: string;
  /** Node only: a PEM file of the CA that signed the controller's certificate. */
  caFile?: string;
  /** Seconds a request waits for its answer (default 30; long-polls add their wait). */
  timeout?: number;
  /** Retries of a retryable request (default 3; 0 disables). */
  retries?: number;
  /** A fetch of your own (tests, proxies, a custom agent). */
  fetch?: FetchLike;
}

export interface EventsOptions {
  /** The cursor: events after this id (default 0, the oldest retained). */
  after?: number;
  sandbox?: string;
  operation?: string;
  /** A kind (`sandbox.running`) or a prefix (`operation.*`). */
  kind?: string;
  /** Long-poll for new events forever (until the caller stops or aborts). */
  follow?: boolean;
  /** Seconds one long-poll waits (default 30, at most 60). */
  wait?: number;
  /** Events per page (1–1000). */
  limit?: number;
  signal?: AbortSignal;
}

/** The events as an async iterable; `cursor` is next_after of the last page read. */
export class EventStream implements AsyncIterable<SandboxEvent> {
  cursor: number;

  constructor(
    private readonly transport: Transport,
    private readonly o: EventsOptions,
  ) {
    this.cursor = o.after ?? 0;
  }

  async *[Symbol.asyncIterator](): AsyncGenerator<SandboxEvent> {
    const wait = Math.min(this.o.wait ?? POLL_WAIT_SECONDS, 60);
    for (;;) {
      const r = await this.transport.json<{ events: SandboxEvent[]; next_after: number }>({
        method: "GET",
        path: "/v1/events",
        query: {
          after: this.cursor,
          sandbox: this.o.sandbox,
          operation: this.o.operation,
          kind: this.o.kind,
          limit: this.o.limit,
          wait: this.o.follow ? wait : undefined,
        },
        signal: this.o.signal,
        timeout: this.o.follow ? wait + 15 : undefined,
      });
      for (const ev of r.events) {
        // the cursor moves past each event as it is handed out, so a
        // consumer that stops mid-page resumes after the last one it saw
        this.cursor = ev.id;
        yield ev;
      }
      this.cursor = r.next_after;
      if (!this.o.follow && r.events.length === 0) return;
    }
  }
}

type Sig = { signal?: AbortSignal };

class Tenants {
  constructor(private readonly t: Transport) {}
  async create(name: string, o: Sig = {}): Promise<JsonObject> {
    return (await this.t.json<{ tenant: JsonObject }>({ method: "POST", path: "/v1/tenants", json: { name }, ...o })).tenant;
  }
  async list(o: Sig = {}): Promise<JsonObject[]> {
    return (await this.t.json<{ tenants: JsonObject[] }>({ method: "GET", path: "/v1/tenants", ...o })).tenants;
  }
  async get(name: string, o: Sig = {}): Promise<JsonObject> {
    return (await this.t.json<{ tenant: JsonObject }>({ method: "GET", path: `/v1/tenants/${encodeURIComponent(name)}`, ...o }))
      .tenant;
  }
  async delete(name: string, o: Sig = {}): Promise<JsonObject> {
    return (
      await this.t.json<{ tenant: JsonObject }>({ method: "DELETE", path: `/v1/tenants/${encodeURIComponent(name)}`, ...o })
    ).tenant;
  }
  /** Replaces the tenant's policy (fields as the API's: max_cpu_millis, images, …). */
  async setPolicy(name: string, policy: JsonObject, o: Sig = {}): Promise<JsonObject> {
    return (
      await this.t.json<{ tenant: JsonObject }>({
        method: "PUT",
        path: `/v1/tenants/${encodeURIComponent(name)}/policy`,
        json: policy,
        ...o,
      })
    ).tenant;
  }
}

class Tokens {
  constructor(private readonly t: Transport) {}
  /** A new token; `secret` (sbt_…) is shown only here. */
  async create(
    o: { tenant: string; role: "admin" | "member" | "worker"; name?: string; ttlSeconds?: number; worker?: string } & Sig,
  ): Promise<{ token: JsonObject; secret: string }> {
    const { signal, ...body } = o;
    return this.t.json({ method: "POST", path: "/v1/tokens", json: snake(body), signal });
  }
  async list(o: { tenant?: string } & Sig = {}): Promise<JsonObject[]> {
    return (await this.t.json<{ tokens: JsonObject[] }>({ method: "GET", path: "/v1/tokens", query: { tenant: o.tenant }, signal: o.signal }))
      .tokens;
  }
  async revoke(id: string, o: Sig = {}): Promise<JsonObject> {
    return (await this.t.json<{ token: JsonObject }>({ method: "DELETE", path: `/v1/tokens/${encodeURIComponent(id)}`, ...o })).token;
  }
}

class Pools {
  constructor(private readonly t: Transport) {}
  /** Declares a warm pool: {name, size, tenant?, image?, cpuMillis?, memoryMib?, …}. */
  async create(o: { name: string; size: number; [field: string]: unknown } & Sig): Promise<JsonObject> {
    const { signal, trust, ...body } = o;
    const json = snake(body);
    if (trust) json.trust = snake(trust as Record<string, unknown>);
    return (await this.t.json<{ pool: JsonObject }>({ method: "POST", path: "/v1/pools", json, signal })).pool;
  }
  async list(o: Sig = {}): Promise<JsonObject[]> {
    return (await this.t.json<{ pools: JsonObject[] }>({ method: "GET", path: "/v1/pools", ...o })).pools;
  }
  async get(name: string, o: Sig = {}): Promise<JsonObject> {
    return (await this.t.json<{ pool: JsonObject }>({ method: "GET", path: `/v1/pools/${encodeURIComponent(name)}`, ...o })).pool;
  }
  async delete(name: string, o: Sig = {}): Promise<JsonObject> {
    return (await this.t.json<{ pool: JsonObject }>({ method: "DELETE", path: `/v1/pools/${encodeURIComponent(name)}`, ...o })).pool;
  }
}

/** Saved files of sandboxes (docs/snapshots.md): `sandbox.snapshot()` makes one, `sandboxes.create({ from })` starts from one. */
class Snapshots {
  constructor(private readonly t: Transport) {}
  /** The tenant's snapshots not deleted (an admin: every tenant's), newest first; `sandbox` (id or name): only those made of it. */
  async list(o: { sandbox?: string } & Sig = {}): Promise<SnapshotData[]> {
    return (
      await this.t.json<{ snapshots: SnapshotData[] }>({
        method: "GET",
        path: "/v1/snapshots",
        query: { sandbox: o.sandbox },
        signal: o.signal,
      })
    ).snapshots;
  }
  /** A snapshot by id (snp_…) or name; another tenant's is NotFound. */
  async get(ref: string, o: Sig = {}): Promise<SnapshotData> {
    return (
      await this.t.json<{ snapshot: SnapshotData }>({ method: "GET", path: `/v1/snapshots/${encodeURIComponent(ref)}`, ...o })
    ).snapshot;
  }
  /** Deletes it at once (`state` `deleted`, its name free again); its worker removes the bytes once no sandbox runs from it. */
  async delete(ref: string, o: Sig = {}): Promise<SnapshotData> {
    return (
      await this.t.json<{ snapshot: SnapshotData }>({ method: "DELETE", path: `/v1/snapshots/${encodeURIComponent(ref)}`, ...o })
    ).snapshot;
  }
}

/** A tenant's file systems that outlive sandboxes (docs/volumes.md): `sandboxes.create({ volumes })` mounts one. */
class Volumes {
  constructor(private readonly t: Transport) {}
  /** A new volume of `sizeMib` MiB (8 to 16777216), `unplaced` until a sandbox first mounts it. */
  async create(o: { name: string; sizeMib: number; tenant?: string } & Sig): Promise<VolumeData> {
    const { signal, ...body } = o;
    return (await this.t.json<{ volume: VolumeData }>({ method: "POST", path: "/v1/volumes", json: snake(body), signal })).volume;
  }
  /** The tenant's volumes not deleted (an admin: every tenant's), newest first. */
  async list(o: Sig = {}): Promise<VolumeData[]> {
    return (await this.t.json<{ volumes: VolumeData[] }>({ method: "GET", path: "/v1/volumes", ...o })).volumes;
  }
  /** A volume by id (vol_…) or name; another tenant's is NotFound. */
  async get(ref: string, o: Sig = {}): Promise<VolumeData> {
    return (await this.t.json<{ volume: VolumeData }>({ method: "GET", path: `/v1/volumes/${encodeURIComponent(ref)}`, ...o }))
      .volume;
  }
  /** Deletes it at once (`state` `deleted`, its name free again); Conflict while a live sandbox mounts it. */
  async delete(ref: string, o: Sig = {}): Promise<VolumeData> {
    return (
      await this.t.json<{ volume: VolumeData }>({ method: "DELETE", path: `/v1/volumes/${encodeURIComponent(ref)}`, ...o })
    ).volume;
  }
}

class Workers {
  constructor(private readonly t: Transport) {}
  async list(o: Sig = {}): Promise<JsonObject[]> {
    return (await this.t.json<{ workers: JsonObject[] }>({ method: "GET", path: "/v1/workers", ...o })).workers;
  }
  async drain(name: string, o: Sig = {}): Promise<JsonObject> {
    return (
      await this.t.json<{ worker: JsonObject }>({ method: "POST", path: `/v1/workers/${encodeURIComponent(name)}/drain`, ...o })
    ).worker;
  }
  async resume(name: string, o: Sig = {}): Promise<JsonObject> {
    return (
      await this.t.json<{ worker: JsonObject }>({ method: "POST", path: `/v1/workers/${encodeURIComponent(name)}/resume`, ...o })
    ).worker;
  }
}

export class Client {
  readonly url: string;
  readonly transport: Transport;
  readonly sandboxes: Sandboxes;
  readonly snapshots: Snapshots;
  readonly volumes: Volumes;
  readonly operations: Operations;
  readonly tenants: Tenants;
  readonly tokens: Tokens;
  readonly pools: Pools;
  readonly workers: Workers;

  constructor(o: ClientOptions = {}, local?: LocalFiles, newId: () => string = randomUUID) {
    if (o.caFile !== undefined && !o.fetch) {
      throw new TypeError(
        'caFile needs Node: import { Client } from "@sandbox/client/node" (a browser trusts the CAs of its system)',
      );
    }
    const url = o.url ?? DEFAULT_URL;
    if (!/^https?:\/\/[^\s]+$/.test(url)) throw new TypeError(`'${url}' is not an http:// or https:// URL`);
    const fetchFn = o.fetch ?? (globalThis.fetch?.bind(globalThis) as FetchLike | undefined);
    if (!fetchFn) throw new TypeError("no global fetch (Node >= 18 or a browser has one): pass options.fetch");
    if (o.token !== undefined && /[\s\x00-\x1f\x7f]/.test(o.token)) {
      throw new TypeError("the API token contains spaces or control characters");
    }
    this.url = url;
    this.transport = new Transport({
      url,
      token: o.token || undefined,
      timeout: o.timeout ?? 30,
      retries: o.retries ?? 3,
      fetch: fetchFn,
    });
    const ctx: ClientContext = { transport: this.transport, local, newId };
    this.sandboxes = new Sandboxes(ctx);
    this.snapshots = new Snapshots(this.transport);
    this.volumes = new Volumes(this.transport);
    this.operations = new Operations(this.transport);
    this.tenants = new Tenants(this.transport);
    this.tokens = new Tokens(this.transport);
    this.pools = new Pools(this.transport);
    this.workers = new Workers(this.transport);
  }

  /** The events after a cursor; with follow, long-polls for new ones forever. */
  events(o: EventsOptions = {}): EventStream {
    return new EventStream(this.transport, o);
  }

  /** The images ready workers have (GET /v1/images). */
  async images(o: { tenant?: string } & Sig = {}): Promise<JsonObject> {
    return this.transport.json({ method: "GET", path: "/v1/images", query: { tenant: o.tenant }, signal: o.signal });
  }

  /** The controller's version, API and schema, and the workers' versions. */
  async version(o: Sig = {}): Promise<JsonObject> {
    return this.transport.json({ method: "GET", path: "/v1/version", ...o });
  }
}
