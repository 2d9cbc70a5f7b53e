// The official MCP TypeScript SDK's client (@modelcontextprotocol/sdk, what TypeScript hosts build on) against
// two real MCP servers from npm, unmodified: each once bare, and once behind `attachstore mcp wrap`. Run by
// test_wrap_servers.py:
//   node dist/client.js everything|filesystem --out DIR [--dir DIR]
//        [--wrap ATTACHSTORE --config FILE --route MODEL [--session ID]]
// Without --wrap it reports only what the bare server answers. Each call is reported as one line of JSON:
// what came back (images and blobs with their type, size and digest, each saved in --out by its digest; the
// text blocks; the refs they name), and, wrapped, how the answer compares with the bare server's. The test
// reads the lines and decides. A call that fails (an error answer, or a result the SDK itself rejects) is
// reported as such; only a server that cannot be reached ends the client.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import {
  ListRootsRequestSchema,
  type CallToolResult,
  type ContentBlock,
  type ReadResourceResult,
} from "@modelcontextprotocol/sdk/types.js";
import { createHash } from "node:crypto";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { isDeepStrictEqual, parseArgs } from "node:util";

const { positionals, values } = parseArgs({
  allowPositionals: true,
  options: {
    out: { type: "string" },
    dir: { type: "string" },
    wrap: { type: "string" },
    config: { type: "string" },
    route: { type: "string" },
    session: { type: "string" },
  },
});
const [server] = positionals;
const out = values.out;
if ((server !== "everything" && server !== "filesystem") || out === undefined) {
  throw new Error("usage: node dist/client.js everything|filesystem --out DIR [--dir DIR] [--wrap CMD ...]");
}
if (server === "filesystem" && values.dir === undefined) {
  throw new Error("the filesystem server needs --dir, the directory it may read");
}

const REF = /sha256:[0-9a-f]{64}/g;
const ROOT = { uri: "file:///interop-root", name: "interop" }; // what roots/list answers (server-everything)

// The server's command, from its package's `bin` (as npx would run it).
function bin(pkg: string): string {
  const where = fileURLToPath(new URL(`../node_modules/${pkg}/`, import.meta.url));
  const manifest = JSON.parse(readFileSync(join(where, "package.json"), "utf8")) as { bin: Record<string, string> };
  const [path] = Object.values(manifest.bin);
  if (path === undefined) throw new Error(`${pkg} names no command`);
  return join(where, path);
}

const bare: string[] =
  server === "everything"
    ? [process.execPath, bin("@modelcontextprotocol/server-everything"), "stdio"]
    : [process.execPath, bin("@modelcontextprotocol/server-filesystem"), values.dir!];

function wrapped(): string[] {
  const { wrap, config, route, session } = values;
  if (wrap === undefined || config === undefined || route === undefined) {
    throw new Error("--wrap needs --config and --route");
  }
  const chosen = session === undefined ? [] : ["--session", session];
  return [wrap, "mcp", "wrap", "--config", config, "--route", route, ...chosen, "--", ...bare];
}

async function connect(command: string[]): Promise<Client> {
  const [program, ...args] = command;
  const transport = new StdioClientTransport({
    command: program!,
    args,
    // The test's environment (its $XDG_CONFIG_HOME among it), not only the SDK's default few variables;
    // warnings are errors in attachstore, as in every test (the servers ignore the variable).
    env: { ...(process.env as Record<string, string>), PYTHONUNBUFFERED: "1", PYTHONWARNINGS: "error" },
    stderr: "inherit",
  });
  // server-everything asks for the roots (a request from the server to the client, through the wrapper);
  // server-filesystem would take them in place of its directory, so it is not offered them.
  const roots = server === "everything";
  const client = new Client(
    { name: "attachstore-interop", version: "1.0.0" },
    { capabilities: roots ? { roots: { listChanged: true } } : {} },
  );
  if (roots) client.setRequestHandler(ListRootsRequestSchema, async () => ({ roots: [ROOT] }));
  await client.connect(transport);
  return client;
}

// What came back, as the test checks it.

interface Media {
  block: string; // "image", or "resource" for an embedded resource's blob
  mimeType: string | null;
  bytes: number;
  sha256: string;
}

interface Facts {
  isError: boolean;
  images: Media[]; // image blocks, and embedded resources whose mimeType is image/*
  blobs: Media[]; // the other embedded resources with a blob
  texts: string[]; // the text blocks, in order
  refs: string[]; // every ref the text blocks name
  structured: boolean; // whether it has structuredContent
}

function saved(data: string, block: string, mimeType: string | null): Media {
  const bytes = Buffer.from(data, "base64");
  const sha256 = createHash("sha256").update(bytes).digest("hex");
  writeFileSync(join(out!, sha256), bytes);
  return { block, mimeType, bytes: bytes.length, sha256 };
}

function media(block: ContentBlock): Media | null {
  if (block.type === "image") return saved(block.data, "image", block.mimeType);
  if (block.type === "resource" && "blob" in block.resource) {
    return saved(block.resource.blob, "resource", block.resource.mimeType ?? null);
  }
  return null;
}

const isImage = (m: Media): boolean => m.block === "image" || (m.mimeType ?? "").startsWith("image/");

function facts(result: CallToolResult): Facts {
  const found = result.content.map(media).filter((m): m is Media => m !== null);
  const texts = result.content.flatMap((b) => (b.type === "text" ? [b.text] : []));
  return {
    isError: result.isError === true,
    images: found.filter(isImage),
    blobs: found.filter((m) => !isImage(m)),
    texts,
    refs: texts.flatMap((t) => t.match(REF) ?? []),
    structured: result.structuredContent !== undefined,
  };
}

// The base64 of every image and blob of a result, as it came.
function payloads(result: CallToolResult): string[] {
  return result.content.flatMap((b) =>
    b.type === "image" ? [b.data] : b.type === "resource" && "blob" in b.resource ? [b.resource.blob] : [],
  );
}

// How a wrapped answer compares with the bare one: every block of the bare answer that is no image or blob is
// there, unchanged and in order, once the texts the wrapper added are set aside; every other field of the
// result is the same (isError and structuredContent are reported on their own).
function compare(bareResult: CallToolResult, wrappedResult: CallToolResult): Record<string, unknown> {
  const kept = (b: ContentBlock): boolean => media(b) === null;
  const before = bareResult.content.filter(kept);
  const after = wrappedResult.content.filter(kept);
  const added = after.filter((b) => !before.some((x) => isDeepStrictEqual(x, b)));
  const { content: _a, isError: _b, structuredContent: bareStructured, ...bareRest } = bareResult;
  const { content: _c, isError: _d, structuredContent: wrappedStructured, ...wrappedRest } = wrappedResult;
  const raw = JSON.stringify(wrappedResult);
  return {
    same_rest: isDeepStrictEqual(
      after.filter((b) => !added.includes(b)),
      before,
    ),
    same_fields: isDeepStrictEqual(bareRest, wrappedRest),
    added: added.map((b) => (b.type === "text" ? b.text : JSON.stringify(b))),
    same_structured: isDeepStrictEqual(bareStructured, wrappedStructured),
    // any image or blob of the bare answer found anywhere in the wrapped one, structuredContent included
    raw: payloads(bareResult).some((data) => raw.includes(data)),
  };
}

// A resources/read answer, its blobs decoded to text when they are text (a timestamp masked: the
// server-everything blob resources are made afresh on every read).
function contents(result: ReadResourceResult): unknown[] {
  return result.contents.map((c) => {
    if ("text" in c) return { uri: c.uri, mimeType: c.mimeType, text: c.text };
    const blob = Buffer.from(c.blob, "base64");
    const text = (c.mimeType ?? "").startsWith("text/") ? blob.toString("utf8") : null;
    return { uri: c.uri, mimeType: c.mimeType, bytes: blob.length, text: text?.replace(/ at .*$/, " at <time>") };
  });
}

// The calls, each with its arguments: the same on both connections.
interface Case {
  name: string;
  tool: string;
  arguments: Record<string, unknown>;
}

const cases: Case[] =
  server === "everything"
    ? [
        { name: "tiny", tool: "get-tiny-image", arguments: {} },
        { name: "annotated", tool: "get-annotated-message", arguments: { messageType: "success", includeImage: true } },
        { name: "no-image", tool: "get-annotated-message", arguments: { messageType: "error" } },
        { name: "blob", tool: "get-resource-reference", arguments: { resourceType: "Blob", resourceId: 1 } },
        { name: "roots", tool: "get-roots-list", arguments: {} },
        { name: "sum", tool: "get-sum", arguments: { a: 2, b: 3 } },
      ]
    : [
        ...["large.png", "photo.heic", "truncated.png", "notes.png"].map((file) => ({
          name: file,
          tool: "read_media_file",
          arguments: { path: join(values.dir!, file) },
        })),
        { name: "text", tool: "read_text_file", arguments: { path: join(values.dir!, "readme.txt") } },
        { name: "dirs", tool: "list_allowed_directories", arguments: {} },
      ];

const resources =
  server === "everything" ? ["demo://resource/static/document/features.md", "demo://resource/dynamic/blob/1"] : [];

interface Session {
  client: Client;
  tools: unknown;
  results: Map<string, CallToolResult | Error>; // an Error: the call failed (an error, or the SDK's own check)
  reads: Map<string, ReadResourceResult | Error>;
}

async function attempt<T>(call: () => Promise<T>): Promise<T | Error> {
  try {
    return await call();
  } catch (e) {
    return e instanceof Error ? e : new Error(String(e));
  }
}

async function session(command: string[]): Promise<Session> {
  const client = await connect(command);
  // Hosts list the tools first, and so the SDK checks each result's structuredContent against the tool's
  // outputSchema (server-filesystem declares one for read_media_file).
  const tools = (await client.listTools()).tools;
  const results = new Map<string, CallToolResult | Error>();
  for (const c of cases) {
    const call = () => client.callTool({ name: c.tool, arguments: c.arguments }) as Promise<CallToolResult>;
    results.set(c.name, await attempt(call));
  }
  const reads = new Map<string, ReadResourceResult | Error>();
  for (const uri of resources) reads.set(uri, await attempt(() => client.readResource({ uri })));
  return { client, tools, results, reads };
}

function report(line: Record<string, unknown>): void {
  console.log(JSON.stringify(line));
}

const first = await session(bare);
const handshake = (c: Client): unknown => ({
  server: c.getServerVersion(),
  capabilities: c.getServerCapabilities(),
  instructions: c.getInstructions(),
});
const second = values.wrap === undefined ? null : await session(wrapped());

report({
  call: "initialize",
  server: first.client.getServerVersion()?.name,
  same: second === null ? null : isDeepStrictEqual(handshake(first.client), handshake(second.client)),
});
report({
  call: "tools/list",
  names: (first.tools as { name: string }[]).map((t) => t.name),
  same: second === null ? null : isDeepStrictEqual(first.tools, second.tools),
});
for (const c of cases) {
  const before = first.results.get(c.name)!;
  const after = second?.results.get(c.name);
  const line = { call: "tools/call", case: c.name, tool: c.tool };
  if (before instanceof Error) report({ ...line, error: `bare: ${before.message}` });
  else if (after instanceof Error) report({ ...line, bare: facts(before), error: `wrapped: ${after.message}` });
  else {
    report({
      ...line,
      bare: facts(before),
      ...(after === undefined ? {} : { wrapped: facts(after), ...compare(before, after) }),
    });
  }
}
for (const uri of resources) {
  const before = first.reads.get(uri)!;
  const after = second?.reads.get(uri);
  const line = { call: "resources/read", uri };
  if (before instanceof Error) report({ ...line, error: `bare: ${before.message}` });
  else if (after instanceof Error) report({ ...line, error: `wrapped: ${after.message}` });
  else {
    const same = after === undefined ? null : isDeepStrictEqual(contents(before), contents(after));
    report({ ...line, bare: contents(before), same });
  }
}
await first.client.close();
await second?.client.close();
report({ call: "done" });
