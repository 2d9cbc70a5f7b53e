// Small valid PNGs made in the process: no image files in the repository, no dependencies, and nothing
// newer than Node 18 (zlib.crc32 came in Node 20.15).
import { deflateSync } from "node:zlib";

const CRC_TABLE = Array.from({ length: 256 }, (_, n) => {
  let c = n;
  for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
  return c >>> 0;
});

function crc32(data: Uint8Array): number {
  let c = 0xffffffff;
  for (const byte of data) c = (CRC_TABLE[(c ^ byte) & 0xff] ?? 0) ^ (c >>> 8);
  return (c ^ 0xffffffff) >>> 0;
}

function chunk(type: string, data: Buffer): Buffer {
  const length = Buffer.alloc(4);
  length.writeUInt32BE(data.length);
  const body = Buffer.concat([Buffer.from(type, "latin1"), data]);
  const crc = Buffer.alloc(4);
  crc.writeUInt32BE(crc32(body));
  return Buffer.concat([length, body, crc]);
}

/** A width x height RGB PNG: one colour, or with `stripes`, bands of it and of black (different sizes and
 * colours give different refs). */
export function png(width: number, height: number, rgb: [number, number, number], stripes = 0): Uint8Array {
  const header = Buffer.alloc(13);
  header.writeUInt32BE(width, 0);
  header.writeUInt32BE(height, 4);
  header.set([8, 2, 0, 0, 0], 8); // 8 bits, truecolour, deflate, no filter, no interlace
  const rows = Array.from({ length: height }, (_, y) => {
    const colour = stripes && Math.floor(y / stripes) % 2 ? [0, 0, 0] : rgb;
    return Buffer.from([0, ...Array.from({ length: width }, () => colour).flat()]);
  });
  return Buffer.concat([
    Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]),
    chunk("IHDR", header),
    chunk("IDAT", deflateSync(Buffer.concat(rows))),
    chunk("IEND", Buffer.alloc(0)),
  ]);
}

/** The width and height a PNG's IHDR says. */
export function pngSize(data: Uint8Array): [number, number] {
  const view = Buffer.from(data);
  if (view.subarray(12, 16).toString("latin1") !== "IHDR") throw new Error("not a PNG");
  return [view.readUInt32BE(16), view.readUInt32BE(20)];
}
