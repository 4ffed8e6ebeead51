// The pieces of the WebAssembly binary format that the package's build scripts read and write
// (scripts/order-names.mjs, scripts/short-imports.mjs).

/** An unsigned LEB128 number at `at`: [value, the offset after it]. */
export function leb(buf, at) {
  let value = 0, shift = 0, byte;
  do {
    byte = buf[at++];
    value += (byte & 0x7f) * 2 ** shift;
    shift += 7;
  } while (byte & 0x80);
  return [value, at];
}

/** `n` as unsigned LEB128. */
export function uleb(n) {
  const out = [];
  do {
    let byte = n & 0x7f;
    n = Math.floor(n / 128);
    if (n) byte |= 0x80;
    out.push(byte);
  } while (n);
  return Buffer.from(out);
}

/** A name as the format writes it: its UTF-8 length, then its bytes. */
export const str = (s) => Buffer.concat([uleb(Buffer.byteLength(s)), Buffer.from(s)]);

/** The name at `at`: [name, the offset after it]. */
export function readName(buf, at) {
  const [len, p] = leb(buf, at);
  return [buf.toString("utf8", p, p + len), p + len];
}

/** An import's description at `at` (after its module and name): [kind, the offset after it]. */
export function skipImportDesc(buf, at) {
  let p = at;
  const kind = buf[p++];
  if (kind === 0) [, p] = leb(buf, p); // function: type index
  else if (kind === 1 || kind === 2) {
    if (kind === 1) p++; // table: element type
    const flags = buf[p++];
    [, p] = leb(buf, p);
    if (flags & 1) [, p] = leb(buf, p);
  } else if (kind === 3) p += 2; // global: value type, mutability
  else if (kind === 4) [, p] = leb(buf, p + 1); // tag: attribute, type index
  else throw new Error(`unknown import kind ${kind}`);
  return [kind, p];
}
