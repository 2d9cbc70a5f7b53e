// The official MCP TypeScript SDK's client (@modelcontextprotocol/sdk, what TypeScript hosts build on)
// against `attachstore mcp` over stdio. Run by test_mcp_typescript.py:
//   node dist/client.js PYTHON CONFIG WORKSPACE
// Each check that fails throws; the last line is "OK" when every one passed.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport, getDefaultEnvironment } from "@modelcontextprotocol/sdk/client/stdio.js";
import {
  ListRootsRequestSchema,
  McpError,
  type BlobResourceContents,
  type CallToolResult,
  type ContentBlock,
} from "@modelcontextprotocol/sdk/types.js";
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const [python, config, workspace] = process.argv.slice(2);
if (python === undefined || config === undefined || workspace === undefined) {
  throw new Error("usage: node dist/client.js PYTHON CONFIG WORKSPACE");
}
const shot = readFileSync(join(workspace, "shot.png"));
const ref = "sha256:" + createHash("sha256").update(shot).digest("hex");

interface Options {
  name?: string; // clientInfo.name: the server leaves structuredContent out for some hosts
  args?: string[];
  roots?: () => string[]; // declare the roots capability and answer roots/list with these directories
}

async function connect(options: Options): Promise<{ client: Client; asked: () => number }> {
  const transport = new StdioClientTransport({
    command: python!,
    args: ["-W", "error", "-m", "attachstore", "mcp", "--config", config!, ...(options.args ?? [])],
    cwd: tmpdir(),
    env: { ...getDefaultEnvironment(), PYTHONUNBUFFERED: "1" },
    stderr: "inherit",
  });
  const roots = options.roots;
  const client = new Client(
    { name: options.name ?? "attachstore-interop", version: "1.0.0" },
    { capabilities: roots ? { roots: { listChanged: true } } : {} },
  );
  let asked = 0;
  if (roots) {
    client.setRequestHandler(ListRootsRequestSchema, async () => {
      asked++;
      return { roots: roots().map((dir) => ({ uri: pathToFileURL(dir).href, name: dir })) };
    });
  }
  await client.connect(transport);
  return { client, asked: () => asked };
}

function text(block: ContentBlock | undefined): string {
  assert.ok(block !== undefined && block.type === "text", `a text block, not ${JSON.stringify(block)}`);
  return block.text;
}

function refusal(result: CallToolResult): string {
  assert.equal(result.isError, true, JSON.stringify(result));
  assert.equal(result.structuredContent, undefined);
  assert.equal(result.content.length, 1);
  return text(result.content[0]);
}

async function call(client: Client, name: string, args: Record<string, unknown>): Promise<CallToolResult> {
  return (await client.callTool({ name, arguments: args })) as CallToolResult;
}

function imageOf(result: CallToolResult): Buffer {
  assert.notEqual(result.isError, true, JSON.stringify(result));
  const [image, caption] = result.content;
  assert.ok(image !== undefined && image.type === "image");
  assert.equal(image.mimeType, "image/png");
  assert.ok(text(caption).startsWith(ref));
  return Buffer.from(image.data, "base64");
}

// 1. The tour, with --workspace: tools, an image and its metadata, refusals, resources.
{
  const { client } = await connect({ args: ["--workspace", workspace, "--route", "vision", "--session", "ts-1"] });
  const info = client.getServerVersion();
  assert.equal(info?.name, "attachstore");
  assert.ok(client.getServerCapabilities()?.tools && client.getServerCapabilities()?.resources);
  const tools = (await client.listTools()).tools;
  assert.deepEqual(
    tools.map((t) => t.name),
    ["read_image", "read_attachment"],
  );
  assert.ok(tools[0]?.outputSchema, "read_image declares its structuredContent");

  // The SDK checks structuredContent against the outputSchema: this call passing is that check.
  const result = await call(client, "read_image", { path: "shot.png" });
  assert.deepEqual(imageOf(result), shot);
  assert.deepEqual(result.structuredContent, {
    ref,
    media_type: "image/png",
    bytes: shot.length,
    width: 40,
    height: 30,
    path: join(workspace, "shot.png"),
  });
  assert.ok(!result.content.some((b) => b.type === "resource_link"));

  assert.match(refusal(await call(client, "read_image", { path: "notes.txt" })), /\(UNSUPPORTED_IMAGE_TYPE\)/);
  assert.match(refusal(await call(client, "read_image", { path: "../secret.png" })), /outside the workspace/);
  assert.match(refusal(await call(client, "read_image", { path: "missing.png" })), /does not exist/);
  assert.match(refusal(await call(client, "read_image", { path: 42 })), /takes one argument/);
  assert.match(refusal(await call(client, "read_attachment", { ref: "nope" })), /is not a reference/);

  assert.deepEqual(imageOf(await call(client, "read_attachment", { ref })), shot);

  const [template] = (await client.listResourceTemplates()).resourceTemplates;
  assert.equal(template?.uriTemplate, "attachstore://{alg}/{hex}");
  const resources = (await client.listResources()).resources;
  assert.deepEqual(
    resources.map((r) => [r.uri, r.mimeType, r.size]),
    [[`attachstore://sha256/${ref.slice(7)}`, "image/png", shot.length]],
  );
  const [blob] = (await client.readResource({ uri: resources[0]!.uri })).contents as BlobResourceContents[];
  assert.equal(blob?.mimeType, "image/png");
  assert.deepEqual(Buffer.from(blob!.blob, "base64"), shot);
  await assert.rejects(
    client.readResource({ uri: "attachstore://sha256/" + "0".repeat(64) }),
    (e: unknown) => e instanceof McpError && e.code === -32602,
  );
  await client.close();
  console.log("tour: ok");
}

// 2. No --workspace: the client's roots are the workspace, asked again after roots/list_changed.
{
  const empty = mkdtempSync(join(tmpdir(), "roots-"));
  let current = [empty];
  const { client, asked } = await connect({ args: ["--route", "vision"], roots: () => current });
  assert.match(refusal(await call(client, "read_image", { path: "shot.png" })), /does not exist in the workspace/);
  current = [empty, workspace];
  await client.sendRootsListChanged();
  assert.deepEqual(imageOf(await call(client, "read_image", { path: "shot.png" })), shot);
  assert.equal(asked(), 2);
  await client.close();
  console.log("roots: ok");
}

// 3. Hosts that drop the image when a result has structuredContent (Claude Code, Codex) get none, and no
// outputSchema that would make their SDK ask for it; the text block carries the metadata instead.
for (const name of ["claude-code", "codex-mcp-client"]) {
  const { client } = await connect({ name, args: ["--workspace", workspace, "--route", "vision"] });
  const [readImage] = (await client.listTools()).tools;
  assert.equal(readImage?.outputSchema, undefined);
  const result = await call(client, "read_image", { path: "shot.png" });
  assert.deepEqual(imageOf(result), shot);
  assert.equal(result.structuredContent, undefined);
  assert.equal(JSON.parse(text(result.content[1]).split("\n")[1] ?? "").ref, ref);
  await client.close();
  console.log(`${name}: ok`);
}

console.log("OK");
