// Operations: every mutation of a sandbox is one (create, delete, exec, share,
// unshare, extend, snapshot). wait() long-polls GET /v1/operations/{id}?wait=S and
// throws the error class of a failed operation; output() follows an exec's
// live output (GET /v1/operations/{id}/output?offset=N&wait=S).

import { errorFor, OperationTimeout } from "./errors.js";
import type { Transport } from "./transport.js";
import type { OperationData } from "./types.js";
import { decodeText, encodeText, fromBase64 } from "./util.js";

const TERMINAL = new Set(["succeeded", "failed", "cancelled"]);
/** Longest wait= a long-poll asks for (the API allows 60; 30 keeps proxies in front from timing out). */
export const POLL_WAIT_SECONDS = 30;
/** Time beyond a long-poll's wait= before its answer counts as lost. */
const POLL_SLACK_SECONDS = 15;

export interface WaitOptions {
  /** Seconds to wait at most (default: no limit); past it OperationTimeout is thrown. */
  timeout?: number;
  signal?: AbortSignal;
}

export interface OutputOptions {
  /** Long-poll until the exec ends (default true); false: what is stored now. */
  follow?: boolean;
  /** The combined byte offset to start at (default 0). */
  offset?: number;
  signal?: AbortSignal;
}

/** A piece of an exec's live output. `offset` is its first byte's place in both streams together. */
export class OutputChunk {
  constructor(
    readonly stream: "stdout" | "stderr",
    readonly data: Uint8Array,
    readonly offset: number,
  ) {}
  /** The bytes as UTF-8 (a chunk may end inside a character). */
  get text(): string {
    return decodeText(this.data);
  }
}

/** One page of GET …/output as the API sends it. */
interface OutputPage {
  chunks: { stream: "stdout" | "stderr"; offset: number; data: string; data_b64?: string }[];
  next_offset: number;
  end_offset: number;
  skipped_bytes: number;
  done: boolean;
  state: string;
}

/** The async iterable output() returns: its position and what was skipped stay readable. */
export class OutputStream implements AsyncIterable<OutputChunk> {
  /** The offset to read on from (next_offset of the last page). */
  offset: number;
  /** Bytes dropped by the server's bounds before they were read (skipped_bytes, summed). */
  skippedBytes = 0;
  /** True once the operation ended and everything kept was read. */
  done = false;

  constructor(
    private readonly op: Operation,
    private readonly o: OutputOptions,
  ) {
    this.offset = o.offset ?? 0;
  }

  async *[Symbol.asyncIterator](): AsyncGenerator<OutputChunk> {
    const follow = this.o.follow ?? true;
    const t = this.op.transport;
    for (;;) {
      const wait = follow ? POLL_WAIT_SECONDS : 0;
      const page = await t.json<OutputPage>({
        method: "GET",
        path: `/v1/operations/${encodeURIComponent(this.op.id)}/output`,
        query: { offset: this.offset, wait },
        signal: this.o.signal,
        timeout: wait + POLL_SLACK_SECONDS,
      });
      this.skippedBytes += page.skipped_bytes ?? 0;
      for (const c of page.chunks ?? []) {
        yield new OutputChunk(c.stream, c.data_b64 !== undefined ? fromBase64(c.data_b64) : encodeText(c.data), c.offset);
      }
      this.offset = page.next_offset;
      this.done = page.done;
      if (page.done) return;
      // without follow: read on only while more is stored than was sent
      if (!follow && page.next_offset >= page.end_offset) return;
    }
  }
}

export class Operation {
  data: OperationData;

  constructor(
    readonly transport: Transport,
    data: OperationData,
  ) {
    this.data = data;
  }

  get id(): string {
    return this.data.id;
  }
  get kind(): string {
    return this.data.kind;
  }
  get state(): string {
    return this.data.state;
  }
  get error(): { code: string; message: string } | null {
    return this.data.error ?? null;
  }
  get result(): Record<string, unknown> | null {
    return this.data.result ?? null;
  }
  get sandboxId(): string | null {
    return (this.data.sandbox_id as string | null | undefined) ?? null;
  }
  /** True once succeeded, failed or cancelled. */
  get terminal(): boolean {
    return TERMINAL.has(this.data.state);
  }

  async refresh(o: { signal?: AbortSignal } = {}): Promise<this> {
    const r = await this.transport.json<{ operation: OperationData }>({
      method: "GET",
      path: `/v1/operations/${encodeURIComponent(this.id)}`,
      signal: o.signal,
    });
    this.data = r.operation;
    return this;
  }

  /**
   * Long-polls until the operation is terminal. Returns it when it succeeded;
   * throws the class of its error code (`.operation` set) when it failed or
   * was cancelled, and OperationTimeout when `timeout` seconds pass first.
   */
  async wait(o: WaitOptions = {}): Promise<this> {
    const deadline = o.timeout === undefined ? Infinity : Date.now() + o.timeout * 1000;
    while (!this.terminal) {
      const left = (deadline - Date.now()) / 1000;
      if (left <= 0) {
        throw new OperationTimeout({
          code: "timeout",
          message: `operation ${this.id} (${this.kind}) is still ${this.state} after ${o.timeout} s of waiting`,
          operation: this.data,
        });
      }
      const wait = Math.max(0, Math.min(POLL_WAIT_SECONDS, Math.floor(left)));
      const r = await this.transport.json<{ operation: OperationData }>({
        method: "GET",
        path: `/v1/operations/${encodeURIComponent(this.id)}`,
        query: { wait },
        signal: o.signal,
        timeout: wait + POLL_SLACK_SECONDS,
      });
      this.data = r.operation;
      if (wait === 0 && !this.terminal) {
        // a deadline under a second: poll briefly rather than spin
        await new Promise((res) => setTimeout(res, 200));
      }
    }
    this.raiseIfFailed();
    return this;
  }

  /** Throws the error of a failed or cancelled operation. */
  raiseIfFailed(): void {
    if (this.state === "succeeded" || !this.terminal) return;
    const err = this.error ?? { code: this.state === "cancelled" ? "cancelled" : "internal", message: "" };
    throw errorFor({
      code: err.code,
      message: err.message || `operation ${this.id} (${this.kind}) ${this.state}`,
      operation: this.data,
    });
  }

  /** Cancels an exec (202): not yet running, it ends cancelled at once; running, its worker kills it. */
  async cancel(o: { signal?: AbortSignal } = {}): Promise<this> {
    const r = await this.transport.json<{ operation: OperationData }>({
      method: "POST",
      path: `/v1/operations/${encodeURIComponent(this.id)}/cancel`,
      signal: o.signal,
    });
    this.data = r.operation;
    return this;
  }

  /** An exec's output chunks as they come (follow: until it ends). */
  output(o: OutputOptions = {}): OutputStream {
    return new OutputStream(this, o);
  }
}

export class Operations {
  constructor(private readonly transport: Transport) {}

  async get(id: string, o: { signal?: AbortSignal } = {}): Promise<Operation> {
    return new Operation(this.transport, { id } as OperationData).refresh(o);
  }

  async wait(id: string, o: WaitOptions = {}): Promise<Operation> {
    const op = new Operation(this.transport, { id, kind: "?", state: "unknown", error: null, result: null });
    return op.wait(o);
  }

  async cancel(id: string, o: { signal?: AbortSignal } = {}): Promise<Operation> {
    return new Operation(this.transport, { id } as OperationData).cancel(o);
  }
}
