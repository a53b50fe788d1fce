// A fetch over node:https that trusts a private CA. Node's own fetch (undici)
// takes no CA option without the undici package, and NODE_EXTRA_CA_CERTS only
// works when set before the process starts; this transport needs neither. It
// is used only when a CA file is given, and answers with a standard Response
// whose body is a web ReadableStream, so the rest of the SDK is the same.

import { readFileSync } from "node:fs";
import { Agent, request } from "node:https";
import { Readable } from "node:stream";

import type { FetchLike } from "../transport.js";

const NULL_BODY_STATUS = new Set([101, 204, 205, 304]);

export function caFetch(caFile: string): FetchLike {
  let ca: Buffer;
  try {
    ca = readFileSync(caFile);
  } catch (e) {
    throw new Error(`cannot read the CA file ${caFile}: ${(e as Error).message}`);
  }
  // keep-alive as fetch does; the server may close an idle connection (docs/api.md, Connections)
  const agent = new Agent({ ca, keepAlive: true });
  const fallback = globalThis.fetch.bind(globalThis);

  return async (url, init) => {
    if (!url.startsWith("https:")) return fallback(url, init);
    const headers: Record<string, string> = {};
    new Headers(init.headers).forEach((v, k) => (headers[k] = v));
    const body = init.body as string | Uint8Array | Blob | ReadableStream<Uint8Array> | null | undefined;
    if (body instanceof Blob && headers["content-length"] === undefined) headers["content-length"] = String(body.size);
    if ((typeof body === "string" || body instanceof Uint8Array) && headers["content-length"] === undefined) {
      headers["content-length"] = String(Buffer.byteLength(body));
    }
    return new Promise<Response>((resolve, reject) => {
      const req = request(url, { method: init.method ?? "GET", headers, agent, signal: init.signal ?? undefined }, (res) => {
        const h = new Headers();
        for (const [k, v] of Object.entries(res.headers)) {
          if (v === undefined) continue;
          for (const one of Array.isArray(v) ? v : [v]) h.append(k, one);
        }
        const status = res.statusCode ?? 0;
        const stream = NULL_BODY_STATUS.has(status) ? null : (Readable.toWeb(res) as unknown as ReadableStream<Uint8Array>);
        if (!stream) res.resume();
        resolve(new Response(stream, { status, statusText: res.statusMessage, headers: h }));
      });
      req.on("error", reject);
      if (body === undefined || body === null) req.end();
      else if (typeof body === "string" || body instanceof Uint8Array) req.end(body);
      else {
        const src = body instanceof Blob ? body.stream() : body;
        const node = Readable.fromWeb(src as import("node:stream/web").ReadableStream<Uint8Array>);
        node.on("error", (e) => req.destroy(e));
        node.pipe(req);
      }
    });
  };
}
