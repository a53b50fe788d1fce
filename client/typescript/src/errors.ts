// Error classes: one per code of the API's error table (docs/api.md), all
// subclasses of SandboxError, so `catch (e) { if (e instanceof NotFound) … }`
// works and an unknown code still is a SandboxError.

import type { OperationData } from "./types.js";

export interface SandboxErrorInit {
  code: string;
  message: string;
  status?: number;
  requestId?: string;
  retryAfter?: number;
  operation?: OperationData;
  cause?: unknown;
}

export class SandboxError extends Error {
  /** The API's error code (`not_found`, `rate_limited`, …). */
  readonly code: string;
  /** The HTTP status of the answer; undefined for an operation's error or a connection failure. */
  readonly status?: number;
  /** The answer's X-Request-Id: the controller's log lines for the request carry it. */
  readonly requestId?: string;
  /** Seconds the server asked to wait (Retry-After), when it said. */
  readonly retryAfter?: number;
  /** The failed operation, for an error raised by Operation.wait() and the calls that wait. */
  readonly operation?: OperationData;

  constructor(init: SandboxErrorInit) {
    super(init.message, init.cause === undefined ? undefined : { cause: init.cause });
    this.name = new.target.name;
    this.code = init.code;
    this.status = init.status;
    this.requestId = init.requestId;
    this.retryAfter = init.retryAfter;
    this.operation = init.operation;
  }
}

/** The controller could not be reached, the connection broke, or no answer came in time. */
export class SandboxConnectionError extends SandboxError {}

export class InvalidArgument extends SandboxError {}
export class InvalidJson extends SandboxError {}
export class Unauthorized extends SandboxError {}
export class Forbidden extends SandboxError {}
export class NotFound extends SandboxError {}
export class MethodNotAllowed extends SandboxError {}
export class Conflict extends SandboxError {}
export class StaleLease extends SandboxError {}
export class PayloadTooLarge extends SandboxError {}
export class PolicyDenied extends SandboxError {}
export class IsolationUnavailable extends SandboxError {}
/** A tenant quota (429 quota_exceeded); retrying does not help until something is deleted. */
export class QuotaExceeded extends SandboxError {}
export class Unavailable extends SandboxError {}
export class InternalError extends SandboxError {}
export class ImageUnavailable extends SandboxError {}
export class SandboxRuntimeError extends SandboxError {}
/** An operation's `timeout` (not placed before its deadline), or a wait that ran out of time. */
export class OperationTimeout extends SandboxError {}
export class WorkerLost extends SandboxError {}
export class Cancelled extends SandboxError {}
export class BadGateway extends SandboxError {}
export class HeadersTooLarge extends SandboxError {}
export class SandboxExited extends SandboxError {}
/** 429 rate_limited: `retryAfter` says when to come back. */
export class RateLimited extends SandboxError {}
export class RequestTimeout extends SandboxError {}

/** The API's codes and their classes (docs/api.md, the error table and the operation errors). */
export const ERROR_CLASSES: Readonly<Record<string, typeof SandboxError>> = Object.freeze({
  invalid_argument: InvalidArgument,
  invalid_json: InvalidJson,
  unauthorized: Unauthorized,
  forbidden: Forbidden,
  not_found: NotFound,
  method_not_allowed: MethodNotAllowed,
  conflict: Conflict,
  stale_lease: StaleLease,
  payload_too_large: PayloadTooLarge,
  policy_denied: PolicyDenied,
  isolation_unavailable: IsolationUnavailable,
  quota_exceeded: QuotaExceeded,
  unavailable: Unavailable,
  internal: InternalError,
  image_unavailable: ImageUnavailable,
  runtime_error: SandboxRuntimeError,
  timeout: OperationTimeout,
  worker_lost: WorkerLost,
  cancelled: Cancelled,
  bad_gateway: BadGateway,
  headers_too_large: HeadersTooLarge,
  sandbox_exited: SandboxExited,
  rate_limited: RateLimited,
  request_timeout: RequestTimeout,
});

/** The error object for an API code; an unknown code is a plain SandboxError. */
export function errorFor(init: SandboxErrorInit): SandboxError {
  const cls = Object.prototype.hasOwnProperty.call(ERROR_CLASSES, init.code)
    ? ERROR_CLASSES[init.code]
    : SandboxError;
  return new cls(init);
}
