// One HTTP exchange with the controller, with the retry rules of the SDK
// surface: GET/HEAD are retried on connection failures, 502/503/504 and 429
// rate_limited; POST/DELETE only when they carry an Idempotency-Key (the same
// key on every attempt, so the server answers a retry with the first
// attempt's result); any request whose body can be sent again on 429
// rate_limited (the API guarantees it did nothing). Backoff is exponential with jitter; a Retry-After the
// server sent is honoured (never waited less).

import { errorFor, SandboxConnectionError, SandboxError } from "./errors.js";
import { abortReason, sleep } from "./util.js";

export type FetchLike = (input: string, init: RequestInit & { duplex?: "half" }) => Promise<Response>;

export type Query = Record<string, string | number | boolean | undefined | null>;

export type RequestBody = string | Uint8Array | Blob | ReadableStream<Uint8Array>;

export interface RequestOptions {
  method: string;
  path: string;
  query?: Query;
  /** A JSON body (sent with Content-Type: application/json). */
  json?: unknown;
  /** A raw body; a ReadableStream is sent chunked (or with `headers["content-length"]`) and never retried. */
  body?: RequestBody;
  headers?: Record<string, string>;
  /** Sent as Idempotency-Key, which makes a POST/DELETE retryable. */
  idempotencyKey?: string;
  signal?: AbortSignal;
  /** Seconds until the answer's head (and, for JSON, its body) must have come; null: no limit. */
  timeout?: number | null;
}

export interface TransportOptions {
  url: string;
  token?: string;
  timeout: number;
  retries: number;
  fetch: FetchLike;
}

const RETRY_STATUS = new Set([502, 503, 504]);
const BACKOFF_START_MS = 250;
const BACKOFF_MAX_MS = 8000;

// The code for an error answer that is not the API's JSON shape (a proxy's
// page, a cut answer): the API's code for that status.
const STATUS_CODES: Record<number, string> = {
  400: "invalid_argument",
  401: "unauthorized",
  403: "forbidden",
  404: "not_found",
  405: "method_not_allowed",
  408: "request_timeout",
  409: "conflict",
  413: "payload_too_large",
  422: "policy_denied",
  429: "rate_limited",
  431: "headers_too_large",
  500: "internal",
  502: "bad_gateway",
  503: "unavailable",
  504: "unavailable",
};

/** Retry-After as seconds: a whole number, or an HTTP date. */
function parseRetryAfter(v: string | null): number | undefined {
  if (!v) return undefined;
  if (/^\s*\d+\s*$/.test(v)) return parseInt(v, 10);
  const t = Date.parse(v);
  return Number.isNaN(t) ? undefined : Math.max(0, Math.ceil((t - Date.now()) / 1000));
}

export class Transport {
  readonly url: string;
  readonly token?: string;
  readonly timeout: number;
  readonly retries: number;
  private readonly fetchFn: FetchLike;

  constructor(o: TransportOptions) {
    this.url = o.url.replace(/\/+$/, "");
    this.token = o.token;
    this.timeout = o.timeout;
    this.retries = o.retries;
    this.fetchFn = o.fetch;
  }

  /** The call's JSON answer (an object); throws the error class of an error answer. */
  async json<T = Record<string, unknown>>(o: RequestOptions): Promise<T> {
    const { response, done } = await this.send(o);
    try {
      const text = await response.text();
      try {
        return (text ? JSON.parse(text) : {}) as T;
      } catch {
        throw new SandboxError({
          code: "bad_response",
          message: `${o.method} ${o.path} answered ${response.status} without JSON: ${text.slice(0, 200)}`,
          status: response.status,
          requestId: response.headers.get("x-request-id") ?? undefined,
        });
      }
    } catch (e) {
      throw this.wrap(e, o);
    } finally {
      done();
    }
  }

  /** The answer itself, its body unread (a stream): the timeout stops at its head. */
  async stream(o: RequestOptions): Promise<Response> {
    const { response, done } = await this.send(o);
    done();
    return response;
  }

  /** The full URL of a path and query. */
  urlFor(path: string, query?: Query): string {
    let u = this.url + path;
    if (query) {
      const q = new URLSearchParams();
      for (const [k, v] of Object.entries(query)) if (v !== undefined && v !== null) q.set(k, String(v));
      const s = q.toString();
      if (s) u += "?" + s;
    }
    return u;
  }

  private retryable(o: RequestOptions): boolean {
    if (this.retries <= 0 || o.body instanceof ReadableStream) return false;
    const m = o.method.toUpperCase();
    return m === "GET" || m === "HEAD" || ((m === "POST" || m === "DELETE") && !!o.idempotencyKey);
  }

  private wrap(e: unknown, o: RequestOptions): unknown {
    if (e instanceof SandboxError) return e;
    if (o.signal?.aborted) return abortReason(o.signal);
    const why = e instanceof Error ? (e.cause instanceof Error ? e.cause.message : e.message) : String(e);
    return new SandboxConnectionError({
      code: "connection_error",
      message: `${o.method} ${this.url}${o.path} failed: ${why}`,
      cause: e,
    });
  }

  /**
   * Sends with retries. Returns the successful answer and `done`, which ends
   * the attempt's timer (after the body was read, or at once for a stream).
   */
  private async send(o: RequestOptions): Promise<{ response: Response; done: () => void }> {
    const retryable = this.retryable(o);
    const headers: Record<string, string> = { accept: "application/json", ...(o.headers ?? {}) };
    if (this.token) headers.authorization = `Bearer ${this.token}`;
    if (o.idempotencyKey) headers["idempotency-key"] = o.idempotencyKey;
    let body: RequestBody | undefined = o.body;
    if (o.json !== undefined) {
      body = JSON.stringify(o.json);
      headers["content-type"] = "application/json";
    }
    const url = this.urlFor(o.path, o.query);
    const timeout = o.timeout === undefined ? this.timeout : o.timeout;
    let backoff = BACKOFF_START_MS;
    for (let attempt = 0; ; attempt++) {
      if (o.signal?.aborted) throw abortReason(o.signal);
      const ac = new AbortController();
      let timedOut = false;
      const onAbort = () => ac.abort(abortReason(o.signal!));
      o.signal?.addEventListener("abort", onAbort, { once: true });
      const timer =
        timeout === null
          ? undefined
          : setTimeout(() => {
              timedOut = true;
              ac.abort(new DOMException("timed out", "TimeoutError"));
            }, timeout * 1000);
      const done = () => {
        if (timer !== undefined) clearTimeout(timer);
        o.signal?.removeEventListener("abort", onAbort);
      };
      const more = retryable && attempt < this.retries;
      let failure: SandboxError;
      try {
        const init: RequestInit & { duplex?: "half" } = {
          method: o.method,
          headers,
          body: body as BodyInit | undefined,
          signal: ac.signal,
        };
        if (body instanceof ReadableStream) init.duplex = "half";
        const response = await this.fetchFn(url, init);
        // the caller reads the body under the same timer, or ends it at once for a stream
        if (response.ok) return { response, done };
        const text = await response.text().catch(() => "");
        done();
        failure = this.errorFrom(response, text, o);
        // rate_limited means the request did nothing: any body that can be
        // sent again is retried on it, as in the Python SDK
        const rateLimited = response.status === 429 && failure.code === "rate_limited";
        const again =
          (more && RETRY_STATUS.has(response.status)) ||
          (rateLimited && attempt < this.retries && !(o.body instanceof ReadableStream));
        if (!again) throw failure;
      } catch (e) {
        done();
        if (e instanceof SandboxError) throw e;
        if (o.signal?.aborted) throw abortReason(o.signal);
        failure = timedOut
          ? new SandboxConnectionError({
              code: "connection_error",
              message: `${o.method} ${url} had no answer within ${timeout} s`,
              cause: e,
            })
          : (this.wrap(e, o) as SandboxError);
        if (!more) throw failure;
      }
      // exponential backoff with jitter, never shorter than Retry-After
      const jittered = backoff / 2 + Math.random() * (backoff / 2);
      const ra = failure.retryAfter;
      await sleep(ra !== undefined ? Math.max(ra * 1000 + Math.random() * 250, jittered) : jittered, o.signal);
      backoff = Math.min(backoff * 2, BACKOFF_MAX_MS);
    }
  }

  private errorFrom(response: Response, text: string, o: RequestOptions): SandboxError {
    const requestId = response.headers.get("x-request-id") ?? undefined;
    const retryAfter = parseRetryAfter(response.headers.get("retry-after"));
    let code: string | undefined;
    let message: string | undefined;
    try {
      const doc = JSON.parse(text) as { error?: { code?: unknown; message?: unknown } };
      if (doc && typeof doc.error?.code === "string") {
        code = doc.error.code;
        message = typeof doc.error.message === "string" ? doc.error.message : "";
      }
    } catch {
      // not the API's shape: named by its status below
    }
    if (code === undefined) {
      code = STATUS_CODES[response.status] ?? `http_${response.status}`;
      message = `${o.method} ${o.path} answered HTTP ${response.status}${text ? ": " + text.slice(0, 200) : ""}`;
    }
    return errorFor({ code, message: message ?? "", status: response.status, requestId, retryAfter });
  }
}
