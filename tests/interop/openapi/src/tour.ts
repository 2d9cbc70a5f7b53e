// The README's tour of the attachstore HTTP API, through a client generated from the daemon's /openapi.json
// (openapi-typescript types, openapi-fetch calls), as a TypeScript host would write it.
// Usage: node build/src/tour.js http://127.0.0.1:PORT   (the daemon declares a route "vision" with images)
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import createClient from "openapi-fetch";
import type { components, paths } from "../gen/schema.js";
import { png, pngSize } from "./png.js";

type Attachment = components["schemas"]["Attachment"];
type Block = components["schemas"]["ImageBlock"] | components["schemas"]["TextBlock"];

const baseUrl = process.argv[2];
assert.ok(baseUrl, "usage: node build/src/tour.js http://127.0.0.1:PORT");
const api = createClient<paths>({ baseUrl });
const sha256 = (bytes: Uint8Array) => "sha256:" + createHash("sha256").update(bytes).digest("hex");
const base64 = (bytes: Uint8Array) => Buffer.from(bytes).toString("base64");
let steps = 0;
const step = (name: string) => {
  steps += 1;
  console.log(`${steps}. ${name}`);
};

// 1. Admit as JSON: base64 in the body.
step("admit as JSON");
const red = png(4, 3, [255, 0, 0]);
const admitted = await api.POST("/v1/attachments", {
  body: { source: "user", images: [{ data: base64(red), media_type: "image/png", name: "red.png" }] },
});
assert.equal(admitted.response.status, 201, JSON.stringify(admitted.error));
const first: Attachment | undefined = admitted.data?.attachments[0];
assert.ok(first);
assert.equal(first.ref, sha256(red));
assert.deepEqual([first.media_type, first.width, first.height, first.frames, first.name], ["image/png", 4, 3, 1, "red.png"]);

// 2. Admit as multipart/form-data: raw bytes in file parts named "image", typed as Blob by the document.
step("admit as multipart");
const filenames = new Map<Blob, string>();
const file = (bytes: Uint8Array, name: string, type = "") => {
  const blob = new Blob([bytes], { type });
  filenames.set(blob, name);
  return blob;
};
// openapi-fetch sends a FormData as it is (fetch writes the boundary); the body's type comes from the document.
function toForm(body: Record<string, unknown>): FormData {
  const form = new FormData();
  for (const [name, value] of Object.entries(body)) {
    for (const v of Array.isArray(value) ? value : [value]) {
      if (v instanceof Blob) form.append(name, v, filenames.get(v) ?? "upload");
      else if (v !== undefined && v !== null) form.append(name, String(v));
    }
  }
  return form;
}
const green = png(2, 2, [0, 255, 0]);
const blue = png(5, 1, [0, 0, 255]);
const multi = await api.POST("/v1/attachments", {
  body: { source: "user", image: [file(green, "green.png", "image/png"), file(blue, "blue.png")] },
  bodySerializer: toForm,
});
assert.equal(multi.response.status, 201, JSON.stringify(multi.error));
const parts = multi.data?.attachments ?? [];
assert.deepEqual(parts.map((a) => [a.name, a.width, a.height]), [["green.png", 2, 2], ["blue.png", 5, 1]]);
// A tool's image for no route that takes images: a soft rejection, 200 and nothing stored.
const soft = await api.POST("/v1/attachments", {
  body: { source: "tool", image: [file(green, "green.png", "image/png")] },
  bodySerializer: toForm,
});
assert.equal(soft.response.status, 200);
assert.equal(soft.data?.degraded, true);
assert.equal(soft.data?.diagnostics?.[0]?.code, "MODALITY_UNSUPPORTED");

// 3. Read the verified bytes back: their sha256 is the ref.
step("read and check the sha256");
const got = await api.GET("/v1/attachments/{ref}", { params: { path: { ref: first.ref } }, parseAs: "arrayBuffer" });
assert.equal(got.response.status, 200);
assert.ok(got.data);
assert.equal(sha256(new Uint8Array(got.data)), first.ref);
assert.equal(got.response.headers.get("content-type"), "image/png");
assert.equal(got.response.headers.get("cache-control"), "private, max-age=31536000, immutable");
const etag = got.response.headers.get("etag");
assert.equal(etag, `"${first.ref}"`);
// HEAD, and a conditional GET: 304 without the bytes.
const head = await api.HEAD("/v1/attachments/{ref}", { params: { path: { ref: first.ref } } });
assert.equal(head.response.headers.get("content-length"), String(red.length));
const again = await api.GET("/v1/attachments/{ref}", {
  params: { path: { ref: first.ref }, header: { "If-None-Match": etag } },
  parseAs: "arrayBuffer",
});
assert.equal(again.response.status, 304);

// 4. Metadata: the attachment, as admitted.
step("meta");
const meta = await api.GET("/v1/attachments/{ref}/meta", { params: { path: { ref: first.ref } } });
assert.deepEqual(meta.data, first);

// 5. A session with holds: create, hold, fork, show, release.
step("a session with a hold");
const sid = `ts-tour-${process.pid}`;
const created = await api.PUT("/v1/sessions/{id}", { params: { path: { id: sid } }, body: { route: "vision" } });
assert.equal(created.response.status, 201, JSON.stringify(created.error));
const held = await api.POST("/v1/sessions/{id}/holds", {
  params: { path: { id: sid } },
  body: { refs: [first.ref, ...parts.map((a) => a.ref)] },
});
assert.deepEqual(new Set(held.data?.holds), new Set([first.ref, ...parts.map((a) => a.ref)]));
const forked = await api.POST("/v1/sessions/{id}/fork", { params: { path: { id: sid } }, body: { session: `${sid}-b` } });
assert.equal(forked.response.status, 201);
assert.equal(forked.data?.holds.length, 3);
const shown = await api.GET("/v1/sessions/{id}", { params: { path: { id: `${sid}-b` } } });
assert.deepEqual(shown.data?.holds, forked.data?.holds);
assert.equal(shown.data?.route, "vision");
await api.DELETE("/v1/sessions/{id}", { params: { path: { id: `${sid}-b` } } });

// 6. Render: refs to an Anthropic request body with the verified base64.
step("render");
const rendered = await api.POST("/v1/render", {
  body: {
    provider: "anthropic",
    session: sid,
    messages: [
      { role: "system", content: "You review screenshots." },
      { role: "user", content: [{ type: "text", text: "What colour?" }, { type: "image", ref: first.ref }] },
      { role: "assistant", content: "", tool_calls: [{ id: "call_1", name: "read_image", arguments: { path: "b.png" } }] },
      { role: "tool", tool_call_id: "call_1", name: "read_image", content: [{ type: "image", ref: parts[1]?.ref ?? "", path: "b.png" }] },
    ],
  },
});
assert.equal(rendered.response.status, 200, JSON.stringify(rendered.error));
assert.ok(rendered.data);
assert.equal(rendered.data.provider, "anthropic");
assert.equal(rendered.data.summary.included, 2);
assert.equal(rendered.data.summary.resized, 0);
const messages = rendered.data.body["messages"];
assert.ok(Array.isArray(messages) && messages.length === 3);
assert.ok(JSON.stringify(rendered.data.body).includes(base64(red)));

// 7. A preview for a UI: a still image whose longer side is at most the size asked, verified.
step("a preview");
const wide = png(300, 120, [250, 200, 0], 10);
const big = await api.POST("/v1/attachments", { body: { source: "user", images: [{ data: base64(wide) }] } });
const bigRef = big.data?.attachments[0]?.ref;
assert.ok(bigRef);
const preview = await api.GET("/v1/attachments/{ref}/preview", {
  params: { path: { ref: bigRef }, query: { size: 64 } },
  parseAs: "arrayBuffer",
});
assert.equal(preview.response.status, 200, JSON.stringify(preview.error));
assert.ok(preview.data);
const small = new Uint8Array(preview.data);
assert.equal(preview.response.headers.get("content-type"), "image/png"); // a PNG source stays a PNG
assert.deepEqual(pngSize(small), [64, 26]);
const previewEtag = preview.response.headers.get("etag");
assert.equal(previewEtag, `"${sha256(small)}"`); // the preview's own ref
const unchanged = await api.GET("/v1/attachments/{ref}/preview", {
  params: { path: { ref: bigRef }, query: { size: 64 }, header: { "If-None-Match": previewEtag ?? "" } },
  parseAs: "arrayBuffer",
});
assert.equal(unchanged.response.status, 304);

// 8. An MCP tool result: its images admitted in one call, answered as refs, ready for the log and render.
step("an MCP tool result");
const shot = png(6, 6, [10, 20, 30]);
const lines = base64(shot).replace(/.{1,76}/g, "$&\r\n"); // as MIME servers send it
const result = await api.POST("/v1/mcp/results", {
  body: {
    route: "vision",
    session: sid,
    result: {
      content: [{ type: "text", text: "the screenshot" }, { type: "image", data: lines, mimeType: "image/png" }],
      structuredContent: { width: 6 },
      isError: false,
    },
  },
});
assert.equal(result.response.status, 201, JSON.stringify(result.error));
assert.ok(result.data);
assert.deepEqual(result.data.result.content[1], { type: "image", ref: sha256(shot) });
assert.deepEqual(result.data.result["structuredContent"], { width: 6 });
assert.deepEqual(result.data.attachments.map((a) => a.ref), [sha256(shot)]);
const blocks = result.data.result.content.filter((b): b is Block => b.type === "text" || b.type === "image");
const fromTool = await api.POST("/v1/render", {
  body: {
    provider: "anthropic",
    session: sid,
    messages: [
      { role: "assistant", content: "", tool_calls: [{ id: "call_2", name: "screenshot" }] },
      { role: "tool", tool_call_id: "call_2", name: "screenshot", content: blocks },
    ],
  },
});
assert.equal(fromTool.data?.summary.included, 1, JSON.stringify(fromTool.error));
const session = await api.GET("/v1/sessions/{id}", { params: { path: { id: sid } } });
assert.ok(session.data?.holds.includes(sha256(shot))); // admitted into the session
const released = await api.DELETE("/v1/sessions/{id}", { params: { path: { id: sid } } });
assert.deepEqual(released.data, { session: sid, released: 4 });

// 9. Errors: the envelope and its stable code, typed by the 4xx answers.
step("errors with their codes");
const missing = await api.GET("/v1/attachments/{ref}/meta", { params: { path: { ref: "sha256:" + "0".repeat(64) } } });
assert.equal(missing.response.status, 404);
assert.equal(missing.error?.error.code, "ATTACHMENT_NOT_FOUND");
const bad = await api.GET("/v1/attachments/{ref}/meta", { params: { path: { ref: "not-a-ref" } } });
assert.equal(bad.response.status, 400);
assert.equal(bad.error?.error.code, "INVALID_ATTACHMENT_REF");
const nosession = await api.POST("/v1/mcp/results", {
  params: { query: { session: "no-such-session" } },
  body: { content: [{ type: "image", data: base64(shot), mimeType: "image/png" }] },
});
assert.equal(nosession.response.status, 404);
assert.equal(nosession.error?.error.code, "SESSION_NOT_FOUND");

console.log(`tour ok: ${steps} steps`);
