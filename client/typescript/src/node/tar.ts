// A minimal tar writer and reader (POSIX ustar with PAX records for long
// names and large sizes), enough for upload() and download() of directory
// trees. The reader treats an archive as data, never instructions: it writes
// only below its destination, refuses absolute names, `..`, devices, FIFOs
// and sparse members, follows no symlink below the destination (neither one
// that was there nor one the archive made), never writes through an existing
// file or link, and makes hard links only to files it wrote itself.

import { constants, createReadStream } from "node:fs";
import { link, lstat, mkdir, open, readdir, readlink, chmod, rm, symlink, utimes } from "node:fs/promises";
import { join, resolve } from "node:path";

import { SandboxConnectionError } from "../errors.js";

const BLOCK = 512;
const enc = new TextEncoder();
const dec = new TextDecoder();

/** A member the reader refuses (it stopped there; what came before stays written). */
export class TarError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "TarError";
  }
}

// ---------------------------------------------------------------- writer

function octal(buf: Uint8Array, at: number, len: number, value: number): void {
  const s = value.toString(8).padStart(len - 1, "0");
  buf.set(enc.encode(s.slice(-(len - 1))), at);
  buf[at + len - 1] = 0;
}

function paxRecord(key: string, value: string): string {
  const body = ` ${key}=${value}\n`;
  let n = enc.encode(body).length + 1;
  while (String(n).length + enc.encode(body).length !== n) n++;
  return n + body;
}

interface Member {
  name: string;
  type: "0" | "2" | "5";
  mode: number;
  mtime: number;
  size: number;
  linkname?: string;
}

function header(m: Member): Uint8Array {
  const name = enc.encode(m.name);
  const linkname = enc.encode(m.linkname ?? "");
  const records: string[] = [];
  if (name.length > 100) records.push(paxRecord("path", m.name));
  if (linkname.length > 100) records.push(paxRecord("linkpath", m.linkname!));
  if (m.size > 0o77777777777) records.push(paxRecord("size", String(m.size)));
  const parts: Uint8Array[] = [];
  if (records.length) {
    const data = enc.encode(records.join(""));
    parts.push(rawHeader({ name: "PaxHeader", type: "x" as "0", mode: 0o644, mtime: m.mtime, size: data.length }, data.length));
    parts.push(pad(data));
  }
  parts.push(rawHeader(m, m.size > 0o77777777777 ? 0 : m.size));
  return concat(parts);
}

function rawHeader(m: Member, size: number): Uint8Array {
  const h = new Uint8Array(BLOCK);
  h.set(enc.encode(m.name).subarray(0, 100), 0);
  octal(h, 100, 8, m.mode & 0o7777);
  octal(h, 108, 8, 0);
  octal(h, 116, 8, 0);
  octal(h, 124, 12, size);
  octal(h, 136, 12, Math.max(0, Math.floor(m.mtime)));
  h.fill(0x20, 148, 156);
  h[156] = m.type.charCodeAt(0);
  if (m.linkname) h.set(enc.encode(m.linkname).subarray(0, 100), 157);
  h.set(enc.encode("ustar\u000000"), 257);
  let sum = 0;
  for (const b of h) sum += b;
  octal(h, 148, 7, sum);
  h[155] = 0x20;
  return h;
}

function pad(data: Uint8Array): Uint8Array {
  const n = Math.ceil(data.length / BLOCK) * BLOCK;
  if (n === data.length) return data;
  const out = new Uint8Array(n);
  out.set(data);
  return out;
}

function concat(parts: Uint8Array[]): Uint8Array {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}

async function* packGen(dir: string, prefix: string): AsyncGenerator<Uint8Array> {
  const root = resolve(dir);
  const st = await lstat(root);
  if (!st.isDirectory()) throw new TarError(`${dir} is not a directory`);
  const nameOf = (rel: string) => [prefix, rel].filter((x) => x).join("/");
  // each directory of the prefix is made (the last one with dir's mode)
  const levels = prefix.split("/").filter((x) => x);
  for (let i = 1; i <= levels.length; i++) {
    const mode = i === levels.length ? st.mode : 0o755;
    yield header({ name: levels.slice(0, i).join("/") + "/", type: "5", mode, mtime: st.mtimeMs / 1000, size: 0 });
  }
  async function* walk(rel: string): AsyncGenerator<Uint8Array> {
    const entries = (await readdir(join(root, rel))).sort();
    for (const e of entries) {
      const r = rel ? `${rel}/${e}` : e;
      const full = join(root, r);
      const s = await lstat(full);
      const mtime = s.mtimeMs / 1000;
      if (s.isDirectory()) {
        yield header({ name: nameOf(r) + "/", type: "5", mode: s.mode, mtime, size: 0 });
        yield* walk(r);
      } else if (s.isSymbolicLink()) {
        yield header({ name: nameOf(r), type: "2", mode: s.mode, mtime, size: 0, linkname: await readlink(full) });
      } else if (s.isFile()) {
        yield header({ name: nameOf(r), type: "0", mode: s.mode, mtime, size: s.size });
        let sent = 0;
        for await (const chunk of createReadStream(full)) {
          const b = chunk as Buffer;
          const take = Math.min(b.length, s.size - sent);
          if (take > 0) yield new Uint8Array(b.buffer, b.byteOffset, take);
          sent += take;
          if (sent >= s.size) break;
        }
        if (sent < s.size) throw new TarError(`${full} shrank while it was being sent (${sent} of ${s.size} bytes)`);
        if (s.size % BLOCK) yield new Uint8Array(BLOCK - (s.size % BLOCK));
      } else {
        throw new TarError(`${full} is a socket, FIFO or device: upload() sends only files, directories and symlinks`);
      }
    }
  }
  yield* walk("");
  yield new Uint8Array(BLOCK * 2);
}

/** A tar stream of dir's contents, each name under prefix ("a/b", or "" for none), packed as it is read. */
export function packDir(dir: string, prefix: string): ReadableStream<Uint8Array> {
  const gen = packGen(dir, prefix);
  return new ReadableStream<Uint8Array>({
    async pull(c) {
      const { done, value } = await gen.next();
      if (done) c.close();
      else c.enqueue(value);
    },
    async cancel() {
      await gen.return(undefined);
    },
  });
}

// ---------------------------------------------------------------- reader

/** Reads exact byte counts from a web stream. */
class BlockReader {
  private buf: Uint8Array = new Uint8Array(0);
  private readonly reader: ReadableStreamDefaultReader<Uint8Array>;
  constructor(stream: ReadableStream<Uint8Array>) {
    this.reader = stream.getReader();
  }
  private async fill(n: number): Promise<boolean> {
    while (this.buf.length < n) {
      let r: ReadableStreamReadResult<Uint8Array>;
      try {
        r = await this.reader.read();
      } catch (e) {
        throw new SandboxConnectionError({
          code: "connection_error",
          message: `the download ended early (${(e as Error).message}); what was written is incomplete`,
          cause: e,
        });
      }
      if (r.done) return false;
      this.buf = this.buf.length ? concat([this.buf, r.value]) : r.value;
    }
    return true;
  }
  /** Exactly n bytes; throws when the stream ends first. */
  async exact(n: number): Promise<Uint8Array> {
    if (!(await this.fill(n))) {
      throw new SandboxConnectionError({
        code: "connection_error",
        message: "the download ended early (the archive stopped mid-member); what was written is incomplete",
      });
    }
    const out = this.buf.subarray(0, n);
    this.buf = this.buf.subarray(n);
    return out;
  }
  /** Up to n bytes (at least one), for copying contents in pieces. */
  async some(n: number): Promise<Uint8Array> {
    if (!this.buf.length) await this.exact(1).then((b) => (this.buf = concat([b, this.buf])));
    const take = Math.min(n, this.buf.length);
    const out = this.buf.subarray(0, take);
    this.buf = this.buf.subarray(take);
    return out;
  }
  async cancel(): Promise<void> {
    await this.reader.cancel().catch(() => undefined);
  }
}

function str(h: Uint8Array, at: number, len: number): string {
  const b = h.subarray(at, at + len);
  const z = b.indexOf(0);
  return dec.decode(z >= 0 ? b.subarray(0, z) : b);
}

function num(h: Uint8Array, at: number, len: number): number {
  if (h[at] & 0x80) {
    // base-256 (GNU), for sizes past 8 GiB
    let v = h[at] & 0x7f;
    for (let i = 1; i < len; i++) v = v * 256 + h[at + i];
    return v;
  }
  const s = str(h, at, len).trim();
  return s ? parseInt(s, 8) : 0;
}

function parsePax(data: Uint8Array): Map<string, string> {
  const out = new Map<string, string>();
  const text = dec.decode(data);
  let at = 0;
  while (at < text.length) {
    const sp = text.indexOf(" ", at);
    if (sp < 0) break;
    const len = parseInt(text.slice(at, sp), 10);
    if (!(len > 0)) throw new TarError("the archive has a malformed PAX header");
    // lengths count bytes: measure the record on the bytes
    const recBytes = enc.encode(text.slice(at)).subarray(0, len);
    const rec = dec.decode(recBytes);
    const eq = rec.indexOf("=");
    if (eq > 0) out.set(rec.slice(rec.indexOf(" ") + 1, eq), rec.slice(eq + 1).replace(/\n$/, ""));
    at += rec.length;
  }
  return out;
}

/** The member's path components below the destination; refuses absolute names and `..`. */
function safeParts(name: string): string[] {
  if (name.startsWith("/")) throw new TarError(`refused member ${name}: an absolute name`);
  const parts = name.split("/").filter((p) => p && p !== ".");
  if (parts.includes("..")) throw new TarError(`refused member ${name}: it has '..' (it would land outside the destination)`);
  return parts;
}

/**
 * Makes (or checks) every directory above `parts` below dest, never through a
 * symlink: each component is looked at without following it.
 */
async function parentDirs(dest: string, parts: string[], name: string): Promise<string> {
  let cur = dest;
  for (const p of parts.slice(0, -1)) {
    cur = join(cur, p);
    const st = await lstat(cur).catch(() => null);
    if (!st) await mkdir(cur, { mode: 0o755 });
    else if (st.isSymbolicLink()) {
      throw new TarError(`refused member ${name}: it would go through the symlink ${p}, which is not followed`);
    } else if (!st.isDirectory()) throw new TarError(`refused member ${name}: ${p} is not a directory`);
  }
  return join(cur, parts[parts.length - 1]);
}

/** Removes what is in the way of a file or symlink (never writing through it); keeps a directory for a directory. */
async function clear(path: string, forDir: boolean): Promise<boolean> {
  const st = await lstat(path).catch(() => null);
  if (!st) return false;
  if (forDir && st.isDirectory()) return true;
  await rm(path, { recursive: true, force: true });
  return false;
}

export async function unpackInto(tar: ReadableStream<Uint8Array>, dir: string, signal?: AbortSignal): Promise<void> {
  const dest = resolve(dir);
  await mkdir(dest, { recursive: true });
  const r = new BlockReader(tar);
  const written = new Set<string>();
  const dirModes: [string, number, number][] = [];
  let pax = new Map<string, string>();
  let longName: string | undefined;
  let longLink: string | undefined;
  try {
    for (;;) {
      if (signal?.aborted) throw signal.reason;
      const h = await r.exact(BLOCK);
      if (h.every((b) => b === 0)) break; // end of archive
      let sum = 0;
      for (let i = 0; i < BLOCK; i++) sum += i >= 148 && i < 156 ? 0x20 : h[i];
      if (sum !== num(h, 148, 8)) throw new TarError("the archive is damaged (a header's checksum does not match)");
      const type = String.fromCharCode(h[156] || 0x30);
      let size = num(h, 124, 12);
      const ustarPrefix = str(h, 257, 6) === "ustar" ? str(h, 345, 155) : "";
      let name = longName ?? pax.get("path") ?? (ustarPrefix ? `${ustarPrefix}/${str(h, 0, 100)}` : str(h, 0, 100));
      const linkname = longLink ?? pax.get("linkpath") ?? str(h, 157, 100);
      if (pax.has("size")) size = parseInt(pax.get("size")!, 10);
      const mode = num(h, 100, 8) & 0o777;
      const mtime = Number(pax.get("mtime") ?? num(h, 136, 12));
      const isMeta = type === "x" || type === "g" || type === "L" || type === "K";
      if (!isMeta) {
        pax = new Map();
        longName = longLink = undefined;
      }
      const dataBlocks = Math.ceil(size / BLOCK) * BLOCK;
      if (isMeta) {
        const data = (await r.exact(dataBlocks)).slice(0, size);
        if (type === "x") pax = parsePax(data);
        else if (type === "L") longName = dec.decode(data).replace(/\0.*$/s, "");
        else if (type === "K") longLink = dec.decode(data).replace(/\0.*$/s, "");
        continue;
      }
      if (type === "3" || type === "4") throw new TarError(`refused member ${name}: a device (tar type '${type}')`);
      if (type === "6") throw new TarError(`refused member ${name}: a FIFO`);
      if (type === "S" || pax.has("GNU.sparse.map") || pax.has("GNU.sparse.major")) {
        throw new TarError(`refused member ${name}: a sparse file`);
      }
      const parts = safeParts(name);
      name = parts.join("/");
      if (!parts.length) {
        // the destination itself ("./"): nothing to make
        await r.exact(dataBlocks);
        continue;
      }
      const path = await parentDirs(dest, parts, name);
      if (type === "5") {
        if (size) throw new TarError(`refused member ${name}: a directory with content`);
        if (!(await clear(path, true))) await mkdir(path, { mode: 0o700 });
        dirModes.push([path, mode, mtime]);
      } else if (type === "2") {
        await clear(path, false);
        await symlink(linkname, path);
        await r.exact(dataBlocks);
      } else if (type === "1") {
        const target = safeParts(linkname).join("/");
        if (!written.has(target)) {
          throw new TarError(`refused member ${name}: a hard link to ${linkname}, which this copy did not write`);
        }
        await clear(path, false);
        await link(join(dest, target), path);
        await r.exact(dataBlocks);
      } else if (type === "0" || type === "7") {
        await clear(path, false);
        const fh = await open(path, constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW, 0o600);
        try {
          let left = size;
          while (left > 0) {
            const b = await r.some(Math.min(left, 1 << 20));
            await fh.write(b);
            left -= b.length;
          }
        } finally {
          await fh.close();
        }
        await r.exact(dataBlocks - size);
        await chmod(path, mode);
        await utimes(path, mtime, mtime);
        written.add(name);
      } else {
        throw new TarError(`refused member ${name}: tar type '${type}' is not a file, directory or link`);
      }
    }
    // directories get their modes after their contents (a 0555 one still got its files)
    for (const [path, mode, mtime] of dirModes.reverse()) {
      await chmod(path, mode);
      await utimes(path, mtime, mtime);
    }
  } finally {
    await r.cancel();
  }
}
