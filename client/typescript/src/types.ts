// The API's objects as the SDK passes them on (docs/api.md, "Objects"). Field
// names are the API's own (snake_case): these are the raw answers, kept whole
// in `.data` so a field the controller adds later is never lost.

export interface ApiErrorBody {
  code: string;
  message: string;
}

export interface SandboxData {
  id: string;
  name?: string;
  tenant: string;
  image: string;
  phase: string;
  desired_state?: string;
  worker?: string | null;
  isolation?: string;
  network?: string;
  labels?: Record<string, string>;
  expires_at?: string | null;
  failure?: { reason: string; exit_code?: number; at: string; message: string } | null;
  /** The snapshot (snp_…) it was created from, when one. */
  from?: string;
  /** The volumes it mounts, by volume id (vol_…), when any. */
  volumes?: { volume: string; path: string; read_only: boolean; size_mib?: number }[];
  [field: string]: unknown;
}

/** A snapshot: a sandbox's files saved on its worker (docs/snapshots.md). */
export interface SnapshotData {
  id: string;
  name?: string;
  tenant: string;
  /** `pending`, `ready`, `failed` or `deleted`. */
  state: string;
  sandbox_id: string;
  image: string;
  isolation?: string;
  worker?: string | null;
  /** What the snapshot adds to its image; null until it is ready. */
  size_bytes: number | null;
  /** The whole filesystem; null until it is ready. */
  image_bytes: number | null;
  operation_id: string;
  /** Only when failed: the snapshot operation's error. */
  error?: ApiErrorBody;
  created_at: string;
  ready_at: string | null;
  deleted_at?: string;
  [field: string]: unknown;
}

/** A volume: a tenant's file system that outlives its sandboxes, on one worker (docs/volumes.md). */
export interface VolumeData {
  id: string;
  name: string;
  tenant: string;
  /** `unplaced` (until a sandbox first mounts it), `ready` or `deleted`. */
  state: string;
  size_mib: number;
  /** The worker it lives on, once placed. */
  worker?: string | null;
  /** The live sandboxes that mount it. */
  mounted_by: { sandbox: string; path: string; read_only: boolean }[];
  created_at: string;
  placed_at?: string | null;
  deleted_at?: string | null;
  [field: string]: unknown;
}

export interface OperationData {
  id: string;
  kind: string;
  state: string;
  sandbox_id?: string | null;
  error: ApiErrorBody | null;
  result: Record<string, unknown> | null;
  [field: string]: unknown;
}

export interface FileEntry {
  name: string;
  type: "file" | "dir" | "symlink" | "other";
  size: number;
  mode: number;
  mtime: string | number;
  link_target?: string | null;
  [field: string]: unknown;
}

export interface Route {
  id: string;
  name?: string;
  url: string;
  port: number;
  auth: string;
  state?: string;
  /** The route's access token, only in share()'s answer of a `token` route (shown once). */
  accessToken?: string;
  [field: string]: unknown;
}

export interface SandboxEvent {
  id: number;
  ts: string;
  tenant: string | null;
  kind: string;
  sandbox_id: string | null;
  operation_id: string | null;
  data: Record<string, unknown>;
}

export interface LogLine {
  /** `stdout`, `stderr`, `output` (the kept tail of a gone container) or `truncated`. */
  stream: string;
  data: string;
  /** On the `truncated` line: the bound a read without follow reached. */
  limitBytes?: number;
}

export type JsonObject = Record<string, unknown>;
