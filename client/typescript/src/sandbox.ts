// Sandboxes: create/get/list, and what a running one offers (exec, files,
// logs, routes, extend, snapshot, delete).

import { errorFor, NotFound, SandboxConnectionError, SandboxError, SandboxExited } from "./errors.js";
import { Operation, OutputChunk, type WaitOptions } from "./operations.js";
import type { RequestBody, Transport } from "./transport.js";
import type { FileEntry, LogLine, OperationData, Route, SandboxData, SnapshotData } from "./types.js";
import { decodeText, encodeText, fromBase64, lines, readAll, snake, toBase64 } from "./util.js";

/** What only the Node entry can do: turn a local directory into a tar stream and back. */
export interface LocalFiles {
  /** A tar stream of `dir`'s contents, each member's name under `prefix` ("" for none). */
  packDir(dir: string, prefix: string): ReadableStream<Uint8Array>;
  /** Unpacks a tar stream into `dir`, refusing members that would land outside it. */
  unpackInto(tar: ReadableStream<Uint8Array>, dir: string, signal?: AbortSignal): Promise<void>;
}

export interface ClientContext {
  transport: Transport;
  local?: LocalFiles;
  newId(): string;
}

export interface Trust {
  untrustedRepo?: boolean;
  generatedCode?: boolean;
  hostile?: boolean;
}

/** A volume a create mounts (docs/volumes.md). */
export interface VolumeMount {
  /** The volume's id (vol_…) or name. */
  volume: string;
  /** An absolute path, not `/` nor under /proc, /sys or /dev. */
  path: string;
  /** Read-only mounts are shared; a read-write one is one live sandbox's (default false). */
  readOnly?: boolean;
}

export interface CreateOptions {
  /** The image (left out with `from`: the snapshot's is used). */
  image?: string;
  /** A snapshot (id or name, `ready`) to start from: the new sandbox has its files. */
  from?: string;
  name?: string;
  tenant?: string;
  cpuMillis?: number;
  memoryMib?: number;
  diskMib?: number;
  ttlSeconds?: number;
  network?: "none" | "restricted" | "open";
  trust?: Trust;
  env?: Record<string, string>;
  labels?: Record<string, string>;
  isolation?: "container" | "gvisor" | "microvm";
  selector?: Record<string, string>;
  readOnlyRoot?: boolean;
  hardened?: boolean;
  /** Volumes to mount, at most 8. */
  volumes?: VolumeMount[];
  /** Wait until it runs (default true) and return a Sandbox; false returns the create Operation. */
  wait?: boolean;
  /** Seconds to wait for it to run (default 300). */
  timeout?: number;
  /** The Idempotency-Key (default: a new random UUID, the same on every retry of this call). */
  idempotencyKey?: string;
  signal?: AbortSignal;
}

export interface ListOptions {
  labels?: Record<string, string>;
  phase?: string | string[];
  all?: boolean;
  tenant?: string;
  /** Page size (1–1000; default the server's, 100). */
  limit?: number;
  signal?: AbortSignal;
}

export interface ExecOptions {
  /** The command's stdin (at most 512 KiB; bytes go as stdin_b64). */
  stdin?: string | Uint8Array;
  env?: Record<string, string>;
  cwd?: string;
  /** The command's own limit in seconds (the server kills it past it; default 600). */
  timeout?: number;
  maxOutputBytes?: number;
  /** The Idempotency-Key (default: a new random UUID, the same on every retry of this call, so a retried exec runs once). */
  idempotencyKey?: string;
  signal?: AbortSignal;
}

/** What a finished exec gave: the exit code and the output kept (bytes, exactly). */
export class ExecResult {
  readonly exitCode: number;
  readonly stdout: Uint8Array;
  readonly stderr: Uint8Array;
  readonly signal: number;
  readonly timedOut: boolean;
  readonly durationMs: number;
  readonly stdoutTruncated: boolean;
  readonly stderrTruncated: boolean;
  /** What the command wrote in all (the kept output is at most max_output_bytes). */
  readonly stdoutBytes: number;
  readonly stderrBytes: number;
  /** The operation's result as the API sent it. */
  readonly data: Record<string, unknown>;

  constructor(data: Record<string, unknown>) {
    this.data = data;
    const bytes = (k: string) =>
      typeof data[k + "_b64"] === "string"
        ? fromBase64(data[k + "_b64"] as string)
        : encodeText((data[k] as string | undefined) ?? "");
    this.exitCode = (data.exit_code as number) ?? -1;
    this.stdout = bytes("stdout");
    this.stderr = bytes("stderr");
    this.signal = (data.signal as number) ?? 0;
    this.timedOut = !!data.timed_out;
    this.durationMs = (data.duration_ms as number) ?? 0;
    this.stdoutTruncated = !!data.stdout_truncated;
    this.stderrTruncated = !!data.stderr_truncated;
    this.stdoutBytes = (data.stdout_bytes as number) ?? this.stdout.length;
    this.stderrBytes = (data.stderr_bytes as number) ?? this.stderr.length;
  }

  get stdoutText(): string {
    return decodeText(this.stdout);
  }
  get stderrText(): string {
    return decodeText(this.stderr);
  }
  /** True when the command exited 0. */
  get ok(): boolean {
    return this.exitCode === 0;
  }
}

/**
 * exec(…, {stream: true}): the chunks as they come; `result` once the
 * iteration ended (or call wait()).
 */
export class ExecStream implements AsyncIterable<OutputChunk> {
  result?: ExecResult;
  /** Output the server's bounds dropped before it was read. */
  skippedBytes = 0;

  constructor(
    readonly operation: Operation,
    private readonly signal?: AbortSignal,
  ) {}

  async *[Symbol.asyncIterator](): AsyncGenerator<OutputChunk> {
    const out = this.operation.output({ follow: true, signal: this.signal });
    for await (const c of out) {
      this.skippedBytes = out.skippedBytes;
      yield c;
    }
    this.skippedBytes = out.skippedBytes;
    await this.wait();
  }

  /** Waits for the exec to end and returns its result (throws as exec() does). */
  async wait(): Promise<ExecResult> {
    if (!this.result) {
      await this.operation.wait({ signal: this.signal });
      this.result = new ExecResult(this.operation.result ?? {});
    }
    return this.result;
  }
}

/** A paged list as an async iterable (`for await`), with toArray(). */
export class Paged<T> implements AsyncIterable<T> {
  constructor(private readonly gen: () => AsyncGenerator<T>) {}
  [Symbol.asyncIterator](): AsyncGenerator<T> {
    return this.gen();
  }
  async toArray(): Promise<T[]> {
    const out: T[] = [];
    for await (const x of this) out.push(x);
    return out;
  }
}

function isTerminalPhase(p: string): boolean {
  return p === "failed" || p === "lost" || p === "deleted";
}

export class Files {
  constructor(private readonly sbx: Sandbox) {}

  private get path(): string {
    return `/v1/sandboxes/${encodeURIComponent(this.sbx.id)}/files`;
  }

  /**
   * Writes one file (format raw). `data`: text, bytes, a Blob, or a
   * ReadableStream — with `size` it streams (Node; the API needs the length
   * up front), without it is read into a Blob first.
   */
  async write(
    path: string,
    data: string | Uint8Array | Blob | ReadableStream<Uint8Array>,
    o: { mode?: number; parents?: boolean; size?: number; signal?: AbortSignal; timeout?: number } = {},
  ): Promise<{ sandbox_id: string; path: string; format: string; bytes: number }> {
    let body: RequestBody = typeof data === "string" ? encodeText(data) : data;
    const headers: Record<string, string> = { "content-type": "application/octet-stream" };
    if (body instanceof ReadableStream) {
      if (o.size !== undefined) headers["content-length"] = String(o.size);
      else body = new Blob([(await readAll(body)) as BlobPart]);
    }
    return this.sbx.transport.json({
      method: "PUT",
      path: this.path,
      query: {
        path,
        format: "raw",
        mode: (o.mode ?? 0o644).toString(8),
        parents: o.parents ? "true" : undefined,
      },
      body,
      headers,
      signal: o.signal,
      timeout: o.timeout ?? null,
    });
  }

  /** A file's bytes (format raw); with `{stream: true}` a ReadableStream of them. */
  read(path: string, o?: { stream?: false; signal?: AbortSignal; timeout?: number }): Promise<Uint8Array>;
  read(path: string, o: { stream: true; signal?: AbortSignal; timeout?: number }): Promise<ReadableStream<Uint8Array>>;
  async read(
    path: string,
    o: { stream?: boolean; signal?: AbortSignal; timeout?: number } = {},
  ): Promise<Uint8Array | ReadableStream<Uint8Array>> {
    const r = await this.sbx.transport.stream({
      method: "GET",
      path: this.path,
      query: { path, format: "raw" },
      headers: { accept: "application/octet-stream" },
      signal: o.signal,
      timeout: o.timeout,
    });
    const body = r.body ?? new ReadableStream<Uint8Array>({ start: (c) => c.close() });
    if (o.stream) return body;
    let bytes: Uint8Array;
    try {
      bytes = await readAll(body);
    } catch (e) {
      if (o.signal?.aborted) throw e;
      throw new SandboxConnectionError({
        code: "connection_error",
        message: `the download of ${path} ended early: ${(e as Error).message}`,
        cause: e,
      });
    }
    // a cut answer is incomplete: the stat header says how long the file is
    const stat = r.headers.get("x-sandbox-stat");
    if (stat) {
      const size = (JSON.parse(decodeText(fromBase64(stat))) as { size?: number }).size;
      if (typeof size === "number" && size !== bytes.length) {
        throw new SandboxConnectionError({
          code: "connection_error",
          message: `the download of ${path} ended early: ${bytes.length} of ${size} bytes`,
        });
      }
    }
    return bytes;
  }

  /** A directory's direct children (the API lists at most 10,000). */
  async list(path: string, o: { signal?: AbortSignal } = {}): Promise<FileEntry[]> {
    const r = await this.sbx.transport.json<{ entries: FileEntry[] }>({
      method: "GET",
      path: this.path,
      query: { path, format: "list" },
      signal: o.signal,
    });
    return r.entries;
  }

  async stat(path: string, o: { signal?: AbortSignal } = {}): Promise<FileEntry> {
    const r = await this.sbx.transport.json<{ stat: FileEntry }>({
      method: "GET",
      path: this.path,
      query: { path, format: "stat" },
      signal: o.signal,
    });
    return r.stat;
  }

  /** Unpacks a tar archive into the existing directory `dir` (PUT format=tar). */
  async writeTar(
    dir: string,
    tar: Uint8Array | Blob | ReadableStream<Uint8Array>,
    o: { signal?: AbortSignal; timeout?: number } = {},
  ): Promise<{ sandbox_id: string; path: string; format: string; bytes: number }> {
    return this.sbx.transport.json({
      method: "PUT",
      path: this.path,
      query: { path: dir, format: "tar" },
      body: tar,
      headers: { "content-type": "application/x-tar" },
      signal: o.signal,
      timeout: o.timeout ?? null,
    });
  }

  /** A tar of `path` (a file or a whole directory, named by its last component), as a stream. */
  async readTar(path: string, o: { signal?: AbortSignal; timeout?: number } = {}): Promise<ReadableStream<Uint8Array>> {
    const r = await this.sbx.transport.stream({
      method: "GET",
      path: this.path,
      query: { path, format: "tar" },
      headers: { accept: "application/x-tar" },
      signal: o.signal,
      timeout: o.timeout,
    });
    return r.body ?? new ReadableStream<Uint8Array>({ start: (c) => c.close() });
  }
}

export class Sandbox {
  data: SandboxData;
  /** Its latest operations, newest first, as the last get() or refresh() answered. */
  operations: OperationData[] = [];
  readonly files: Files;

  constructor(
    private readonly ctx: ClientContext,
    data: SandboxData,
  ) {
    this.data = data;
    this.files = new Files(this);
  }

  get transport(): Transport {
    return this.ctx.transport;
  }
  get id(): string {
    return this.data.id;
  }
  get name(): string | undefined {
    return this.data.name;
  }
  get phase(): string {
    return this.data.phase;
  }
  /** The snapshot (snp_…) it was created from, when one. */
  get from(): string | undefined {
    return this.data.from;
  }
  /** The volumes it mounts (by volume id), [] when none. */
  get volumes(): NonNullable<SandboxData["volumes"]> {
    return this.data.volumes ?? [];
  }
  private get path(): string {
    return `/v1/sandboxes/${encodeURIComponent(this.id)}`;
  }

  async refresh(o: { signal?: AbortSignal } = {}): Promise<this> {
    const r = await this.transport.json<{ sandbox: SandboxData; operations?: OperationData[] }>({
      method: "GET",
      path: this.path,
      signal: o.signal,
    });
    this.data = r.sandbox;
    this.operations = r.operations ?? [];
    return this;
  }

  private execBody(argv: string[], o: ExecOptions): Record<string, unknown> {
    const body: Record<string, unknown> = {
      argv,
      env: o.env,
      cwd: o.cwd,
      timeout_seconds: o.timeout,
      max_output_bytes: o.maxOutputBytes,
    };
    if (typeof o.stdin === "string") body.stdin = o.stdin;
    else if (o.stdin !== undefined) body.stdin_b64 = toBase64(o.stdin);
    for (const k of Object.keys(body)) if (body[k] === undefined) delete body[k];
    return body;
  }

  /** Starts a command and returns its operation at once (wait(), output(), cancel() on it). */
  async execDetached(argv: string[], o: ExecOptions = {}): Promise<Operation> {
    const r = await this.transport.json<{ operation: OperationData }>({
      method: "POST",
      path: `${this.path}/exec`,
      json: this.execBody(argv, o),
      idempotencyKey: o.idempotencyKey ?? this.ctx.newId(),
      signal: o.signal,
    });
    return new Operation(this.transport, r.operation);
  }

  /**
   * Runs a command (never through a shell) and returns its ExecResult; a
   * non-zero exit is a result, not an error. With `stream: true` returns an
   * ExecStream of its output as it comes. Aborting `signal` also cancels
   * the command in the sandbox.
   */
  exec(argv: string[], o?: ExecOptions & { stream?: false }): Promise<ExecResult>;
  exec(argv: string[], o: ExecOptions & { stream: true }): Promise<ExecStream>;
  async exec(argv: string[], o: ExecOptions & { stream?: boolean } = {}): Promise<ExecResult | ExecStream> {
    const op = await this.execDetached(argv, o);
    // best effort: the command should not outlive the caller's interest
    const onAbort = () => {
      if (!op.terminal) op.cancel().catch(() => undefined);
    };
    o.signal?.addEventListener("abort", onAbort, { once: true });
    if (o.stream) return new ExecStream(op, o.signal);
    try {
      await op.wait({ signal: o.signal });
    } finally {
      o.signal?.removeEventListener("abort", onAbort);
    }
    return new ExecResult(op.result ?? {});
  }

  /** The main process's output (NDJSON lines); follow: until the container stops. */
  logs(o: { follow?: boolean; tail?: number | "all"; signal?: AbortSignal } = {}): AsyncIterable<LogLine> {
    const t = this.transport;
    const path = `${this.path}/logs`;
    return {
      async *[Symbol.asyncIterator]() {
        const r = await t.stream({
          method: "GET",
          path,
          query: { follow: o.follow ? "true" : "false", tail: o.tail },
          headers: { accept: "application/x-ndjson" },
          signal: o.signal,
        });
        if (!r.body) return;
        for await (const line of lines(r.body)) {
          const doc = JSON.parse(line) as {
            stream?: string;
            data?: string;
            truncated?: boolean;
            limit_bytes?: number;
            error?: { code: string; message: string };
          };
          if (doc.error) {
            throw errorFor({ code: doc.error.code, message: doc.error.message });
          }
          if (doc.truncated) yield { stream: "truncated", data: "", limitBytes: doc.limit_bytes };
          else yield { stream: doc.stream ?? "stdout", data: doc.data ?? "" };
        }
      },
    };
  }

  /** Shares a port of the sandbox on the route listener; a `token` route's access token is in the answer. */
  async share(
    port: number,
    o: { auth?: "token" | "public"; ttlSeconds?: number; signal?: AbortSignal } = {},
  ): Promise<Route> {
    const r = await this.transport.json<{ operation: OperationData; route: Route; access_token?: string }>({
      method: "POST",
      path: `${this.path}/routes`,
      json: snake({ port, auth: o.auth, ttlSeconds: o.ttlSeconds }),
      signal: o.signal,
    });
    // the controller completes a share itself; wait so the route is active
    const op = await new Operation(this.transport, r.operation).wait({ signal: o.signal });
    const route: Route = { ...r.route, state: op.state === "succeeded" ? "active" : r.route.state };
    if (r.access_token) route.accessToken = r.access_token;
    return route;
  }

  async routes(o: { all?: boolean; signal?: AbortSignal } = {}): Promise<Route[]> {
    const r = await this.transport.json<{ routes: Route[] }>({
      method: "GET",
      path: `${this.path}/routes`,
      query: { all: o.all ? "true" : undefined },
      signal: o.signal,
    });
    return r.routes;
  }

  async unshare(routeId: string, o: { signal?: AbortSignal } = {}): Promise<Operation> {
    const r = await this.transport.json<{ operation: OperationData }>({
      method: "DELETE",
      path: `${this.path}/routes/${encodeURIComponent(routeId)}`,
      signal: o.signal,
    });
    return new Operation(this.transport, r.operation).wait({ signal: o.signal });
  }

  /** Sets it to expire ttlSeconds from now; the operation's result has the old and new expires_at. */
  async extend(ttlSeconds: number, o: { idempotencyKey?: string; signal?: AbortSignal } = {}): Promise<Operation> {
    const r = await this.transport.json<{ operation: OperationData }>({
      method: "POST",
      path: `${this.path}/extend`,
      json: { ttl_seconds: ttlSeconds },
      idempotencyKey: o.idempotencyKey ?? this.ctx.newId(),
      signal: o.signal,
    });
    const op = new Operation(this.transport, r.operation);
    const exp = op.result?.expires_at;
    if (exp !== undefined) this.data.expires_at = exp as string | null;
    return op;
  }

  /**
   * Saves its files as a snapshot (docs/snapshots.md) that
   * `sandboxes.create({ from })` starts new sandboxes from; the sandbox goes
   * on running. With wait (default) returns the snapshot once `ready`, or
   * throws the snapshot operation's error class (OperationTimeout when
   * `timeout` seconds pass first); with `wait: false` the `pending` snapshot
   * at once (`operations.wait(snapshot.operation_id)` waits for it).
   */
  async snapshot(
    o: { name?: string; wait?: boolean; timeout?: number; idempotencyKey?: string; signal?: AbortSignal } = {},
  ): Promise<SnapshotData> {
    const r = await this.transport.json<{ operation: OperationData; snapshot: SnapshotData }>({
      method: "POST",
      path: `${this.path}/snapshots`,
      json: o.name !== undefined ? { name: o.name } : {},
      idempotencyKey: o.idempotencyKey ?? this.ctx.newId(),
      signal: o.signal,
    });
    if (o.wait === false) return r.snapshot;
    await new Operation(this.transport, r.operation).wait({ timeout: o.timeout, signal: o.signal });
    const got = await this.transport.json<{ snapshot: SnapshotData }>({
      method: "GET",
      path: `/v1/snapshots/${encodeURIComponent(r.snapshot.id)}`,
      signal: o.signal,
    });
    return got.snapshot;
  }

  /** Deletes it; with wait (default) until the delete operation ended. */
  async delete(o: { wait?: boolean; timeout?: number; idempotencyKey?: string; signal?: AbortSignal } = {}): Promise<Operation> {
    const r = await this.transport.json<{ operation: OperationData }>({
      method: "DELETE",
      path: this.path,
      idempotencyKey: o.idempotencyKey ?? this.ctx.newId(),
      signal: o.signal,
    });
    const op = new Operation(this.transport, r.operation);
    if (o.wait ?? true) await op.wait({ timeout: o.timeout ?? 300, signal: o.signal });
    return op;
  }

  /**
   * Node entry only: copies the contents of the local directory `localDir`
   * into `remoteDir` (made, with its missing parents, when absent) as one
   * tar stream, packed while it is sent. Modes, mtimes and symlinks are kept.
   */
  async upload(
    localDir: string,
    remoteDir: string,
    o: { signal?: AbortSignal } = {},
  ): Promise<{ sandbox_id: string; path: string; format: string; bytes: number }> {
    const local = this.needLocal("upload");
    if (!remoteDir.startsWith("/")) {
      throw new TypeError(`upload: the sandbox path must be absolute (got ${remoteDir})`);
    }
    // the nearest existing ancestor receives the tar; the missing levels are its members' prefix
    const parts = remoteDir.split("/").filter((p) => p && p !== ".");
    if (parts.includes("..")) throw new TypeError(`upload: the sandbox path must not contain '..' (got ${remoteDir})`);
    let have = parts.length;
    for (;;) {
      const base = "/" + parts.slice(0, have).join("/");
      try {
        const st = await this.files.stat(base, o);
        if (st.type !== "dir") {
          throw new SandboxError({ code: "not_a_directory", message: `${base} in the sandbox is a ${st.type}, not a directory` });
        }
        return this.files.writeTar(base, local.packDir(localDir, parts.slice(have).join("/")), o);
      } catch (e) {
        if (!(e instanceof NotFound) || have === 0) throw e;
        have--;
      }
    }
  }

  /**
   * Node entry only: unpacks a tar of `remotePath` into the local directory
   * `localDir` (made when missing): `localDir/<last component of remotePath>`.
   * Members outside localDir, absolute names, `..`, devices and FIFOs are refused.
   */
  async download(remotePath: string, localDir: string, o: { signal?: AbortSignal } = {}): Promise<void> {
    const local = this.needLocal("download");
    const tar = await this.files.readTar(remotePath, o);
    await local.unpackInto(tar, localDir, o.signal);
  }

  private needLocal(what: string): LocalFiles {
    if (!this.ctx.local) {
      throw new TypeError(
        `${what}() reads and writes local directories, which needs the Node entry: ` +
          `import { Client } from "@sandbox/client/node". In a browser use files.writeTar()/files.readTar().`,
      );
    }
    return this.ctx.local;
  }

  /** `await using sbx = await client.sandboxes.create(…)` deletes it at the end of the block. */
  async [Symbol.asyncDispose](): Promise<void> {
    try {
      await this.delete({ wait: true });
    } catch (e) {
      if (!(e instanceof SandboxError && e.code === "not_found")) throw e;
    }
  }
}

export class Sandboxes {
  constructor(private readonly ctx: ClientContext) {}

  /**
   * Creates a sandbox. With wait (default) returns it once running, or throws
   * the create operation's error class (IsolationUnavailable, ImageUnavailable,
   * SandboxExited, …); with `wait: false` returns the create Operation.
   */
  create(o?: CreateOptions & { wait?: true }): Promise<Sandbox>;
  create(o: CreateOptions & { wait: false }): Promise<Operation>;
  async create(o: CreateOptions = {}): Promise<Sandbox | Operation> {
    const { wait, timeout, idempotencyKey, signal, trust, volumes, ...spec } = o;
    const body = snake(spec as Record<string, unknown>);
    if (trust) body.trust = snake(trust as Record<string, unknown>);
    if (volumes) body.volumes = volumes.map((v) => snake(v as unknown as Record<string, unknown>));
    const t = this.ctx.transport;
    const r = await t.json<{ sandbox: SandboxData; operation: OperationData }>({
      method: "POST",
      path: "/v1/sandboxes",
      json: body,
      idempotencyKey: idempotencyKey ?? this.ctx.newId(),
      signal,
    });
    const op = new Operation(t, r.operation);
    if (wait === false) return op;
    const waitOpts: WaitOptions = { timeout: timeout ?? 300, signal };
    await op.wait(waitOpts);
    const sbx = new Sandbox(this.ctx, r.sandbox);
    await sbx.refresh({ signal });
    if (sbx.phase !== "running" && isTerminalPhase(sbx.phase)) {
      throw new SandboxExited({
        code: "sandbox_exited",
        message: `sandbox ${sbx.id} is ${sbx.phase}${sbx.data.failure ? ": " + sbx.data.failure.message : ""}`,
        operation: op.data,
      });
    }
    return sbx;
  }

  /** A sandbox by id or name. */
  async get(idOrName: string, o: { signal?: AbortSignal } = {}): Promise<Sandbox> {
    return new Sandbox(this.ctx, { id: idOrName } as SandboxData).refresh(o);
  }

  /** Every matching sandbox, newest first, page after page. */
  list(o: ListOptions = {}): Paged<Sandbox> {
    const ctx = this.ctx;
    return new Paged(async function* () {
      let after: string | undefined;
      const label = o.labels
        ? Object.entries(o.labels)
            .map(([k, v]) => `${k}=${v}`)
            .join(",")
        : undefined;
      const phase = Array.isArray(o.phase) ? o.phase.join(",") : o.phase;
      for (;;) {
        const r = await ctx.transport.json<{ sandboxes: SandboxData[]; next: string | null }>({
          method: "GET",
          path: "/v1/sandboxes",
          query: { tenant: o.tenant, label, phase, all: o.all ? "true" : undefined, limit: o.limit, after },
          signal: o.signal,
        });
        for (const s of r.sandboxes) yield new Sandbox(ctx, s);
        if (!r.next) return;
        after = r.next;
      }
    });
  }
}
