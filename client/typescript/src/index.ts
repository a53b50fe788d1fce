// @sandbox/client: the browser-safe entry (global fetch, web streams,
// AbortSignal; no Node module). Node gets ./node.js through the package's
// "node" export condition, which adds the environment, the CLI's config file,
// a private CA and local directories.

export { Client, DEFAULT_URL, EventStream } from "./client.js";
export type { ClientOptions, EventsOptions } from "./client.js";
export * from "./errors.js";
export { Operation, Operations, OutputChunk, OutputStream } from "./operations.js";
export type { OutputOptions, WaitOptions } from "./operations.js";
export { ExecResult, ExecStream, Files, Paged, Sandbox, Sandboxes } from "./sandbox.js";
export type { CreateOptions, ExecOptions, ListOptions, LocalFiles, Trust, VolumeMount } from "./sandbox.js";
export type { FetchLike, RequestBody } from "./transport.js";
export type * from "./types.js";
