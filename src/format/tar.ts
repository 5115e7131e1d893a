/**
 * The subset of tar (POSIX ustar) that carries a model folder in one HTTP body: the regular files
 * of one folder, each named FOLDER/NAME (as `tar -cf - FOLDER` names them; the folder's name is
 * the model's name), a 512-byte header, its bytes and zero padding to 512, then two zero blocks.
 * The writer makes what `tar --format=ustar` makes for such files (sizes of 8 GiB and more in
 * GNU's base-256 form, as GNU tar writes them); the reader takes exactly that (and the folder's
 * own directory entry) and refuses the rest — links, devices, subfolders, pax or GNU long names,
 * other folders, names starting with a dot — because the members become files of a job's
 * directory.
 *
 * The reader is incremental: bytes are pushed as they arrive and it reports each member's
 * start, data and end, so a folder of any size streams to disk in bounded memory.
 */
import { QuantdError } from '../errors/index.js';

export const TAR_BLOCK = 512;
/** Members of one archive at most: more files than any model folder holds. */
export const TAR_MEMBER_LIMIT = 4096;
const NAME_BYTES = 100;
/** Largest size in the 11 octal digits of ustar: 8 GiB - 1. */
const OCTAL_SIZE_LIMIT = 8 ** 11 - 1;

const ascii = new TextEncoder();
const utf8 = new TextDecoder('utf-8', { fatal: true });

function invalid(detail: string): QuantdError {
  return new QuantdError('ARCHIVE_INVALID', { detail });
}

/**
 * Characters no member name may hold: C0 controls (newline, ESC, which opens ANSI escape
 * sequences), DEL and C1 controls (CSI among them), and the Unicode bidirectional formatting
 * characters (embeddings and overrides U+202A–U+202E, isolates U+2066–U+2069, the marks U+200E,
 * U+200F and U+061C). A member name becomes a result file's name, which logs, terminals, the
 * console and `Content-Disposition` show: a newline forges log lines, an escape sequence rewrites
 * a terminal, an override makes `model\u202Efig.json` read as another name.
 */
function unshowable(code: number): boolean {
  return (
    code < 0x20 ||
    (code >= 0x7f && code <= 0x9f) ||
    code === 0x061c ||
    code === 0x200e ||
    code === 0x200f ||
    (code >= 0x202a && code <= 0x202e) ||
    (code >= 0x2066 && code <= 0x2069)
  );
}

const hasUnshowable = (name: string): boolean => [...name].some((c) => unshowable(c.charCodeAt(0)));

/**
 * A name quoted for a message, every unshowable character written as its \uXXXX escape (JSON
 * escapes only the C0 controls): the message must not do what the name was refused for.
 */
export function shownName(name: string): string {
  return [...JSON.stringify(name)]
    .map((c) => (unshowable(c.charCodeAt(0)) ? `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}` : c))
    .join('');
}

/** Why `name` cannot be a member (a file of a job's directory), or null when it can. */
export function memberNameProblem(name: string): string | null {
  if (name === '' || name.startsWith('.')) return 'an empty name or one starting with a dot';
  if (name.includes('/') || name.includes('\\') || name.includes('\0')) return 'a path, not a file name';
  if (hasUnshowable(name)) {
    return 'a name with a control character, an escape sequence or a bidirectional-text override';
  }
  if (ascii.encode(name).length >= NAME_BYTES) return `a name of ${NAME_BYTES} bytes or more`;
  return null;
}

/** Bytes a member takes in the archive: header, data, padding. */
export const memberBytes = (size: number): number => TAR_BLOCK + Math.ceil(size / TAR_BLOCK) * TAR_BLOCK;

/** The two zero blocks that end an archive. */
export const TAR_END = new Uint8Array(2 * TAR_BLOCK);

function putOctal(header: Uint8Array, at: number, width: number, value: number): void {
  header.set(ascii.encode(value.toString(8).padStart(width - 1, '0')), at);
}

/** Why FOLDER/NAME cannot be a member, or null when it can. */
export function memberPathProblem(folder: string, name: string): string | null {
  const problem = memberNameProblem(folder) ?? memberNameProblem(name);
  if (problem !== null) return problem;
  if (ascii.encode(`${folder}/${name}`).length >= NAME_BYTES) return `a path of ${NAME_BYTES} bytes or more`;
  return null;
}

/** The header of the regular file FOLDER/NAME of `size` bytes. */
export function tarHeader(folder: string, name: string, size: number, mtimeSeconds = 0): Uint8Array {
  const problem = memberPathProblem(folder, name);
  if (problem !== null) throw invalid(`${shownName(`${folder}/${name}`)} is ${problem}`);
  const header = new Uint8Array(TAR_BLOCK);
  header.set(ascii.encode(`${folder}/${name}`), 0);
  putOctal(header, 100, 8, 0o644);
  putOctal(header, 108, 8, 0);
  putOctal(header, 116, 8, 0);
  if (size <= OCTAL_SIZE_LIMIT) {
    putOctal(header, 124, 12, size);
  } else {
    header[124] = 0x80; // GNU base-256: big-endian in the remaining 11 bytes
    let rest = BigInt(size);
    for (let i = 135; i > 124; i--, rest >>= 8n) header[i] = Number(rest & 0xffn);
  }
  putOctal(header, 136, 12, Math.max(0, Math.floor(mtimeSeconds)));
  header[156] = 0x30; // '0': a regular file
  header.set(ascii.encode('ustar\u000000'), 257);
  header.fill(0x20, 148, 156); // the checksum is summed with its own field as spaces
  const sum = header.reduce((a, b) => a + b, 0);
  header.set(ascii.encode(`${sum.toString(8).padStart(6, '0')}\u0000 `), 148);
  return header;
}

function readOctal(header: Uint8Array, at: number, width: number, what: string): number {
  if (what === 'size' && (header[at]! & 0x80) !== 0) {
    let value = 0n;
    for (let i = at + 1; i < at + width; i++) value = (value << 8n) | BigInt(header[i]!);
    if ((header[at]! & 0x7f) !== 0 || value > BigInt(Number.MAX_SAFE_INTEGER))
      throw invalid(`a ${what} out of range`);
    return Number(value);
  }
  const text = String.fromCharCode(...header.subarray(at, at + width))
    .replace(/\0.*$/s, '')
    .trim();
  if (!/^[0-7]+$/.test(text)) throw invalid(`a header whose ${what} is not an octal number`);
  return parseInt(text, 8);
}

/** What the reader found: a member starting (FOLDER/NAME), its bytes, its end. */
export interface TarEvents {
  start(folder: string, name: string, size: number): Promise<void> | void;
  data(bytes: Uint8Array): Promise<void> | void;
  end(): Promise<void> | void;
}

/** Reads an archive pushed in pieces; `finish()` checks that it ended where an archive ends. */
export class TarReader {
  private pending = new Uint8Array(0);
  /** Bytes of the current member's data still to come, then its padding. */
  private dataLeft = 0;
  private padLeft = 0;
  private inMember = false;
  private zeroBlocks = 0;
  private members = 0;
  private folder: string | null = null;
  private readonly names = new Set<string>();

  constructor(private readonly events: TarEvents) {}

  async push(chunk: Uint8Array): Promise<void> {
    let at = 0;
    while (at < chunk.length) {
      if (this.zeroBlocks === 2) {
        if (chunk.subarray(at).some((b) => b !== 0)) throw invalid('data after the end of the archive');
        return;
      }
      if (this.inMember && this.dataLeft > 0) {
        const n = Math.min(this.dataLeft, chunk.length - at);
        await this.events.data(chunk.subarray(at, at + n));
        this.dataLeft -= n;
        at += n;
        if (this.dataLeft === 0 && this.padLeft === 0) await this.endMember();
        continue;
      }
      if (this.inMember && this.padLeft > 0) {
        const n = Math.min(this.padLeft, chunk.length - at);
        this.padLeft -= n;
        at += n;
        if (this.padLeft === 0) await this.endMember();
        continue;
      }
      // a header block, possibly split across chunks
      const need = TAR_BLOCK - this.pending.length;
      const take = chunk.subarray(at, at + need);
      at += take.length;
      const block = new Uint8Array(this.pending.length + take.length);
      block.set(this.pending);
      block.set(take, this.pending.length);
      if (block.length < TAR_BLOCK) {
        this.pending = block;
        return;
      }
      this.pending = new Uint8Array(0);
      await this.header(block);
    }
  }

  private async endMember(): Promise<void> {
    this.inMember = false;
    await this.events.end();
  }

  private async header(block: Uint8Array): Promise<void> {
    if (block.every((b) => b === 0)) {
      this.zeroBlocks++;
      return;
    }
    if (this.zeroBlocks > 0) throw invalid('a member after an end-of-archive block');
    const stored = readOctal(block, 148, 8, 'checksum');
    const sum = block.reduce((a, b, i) => a + (i >= 148 && i < 156 ? 0x20 : b), 0);
    if (stored !== sum) throw invalid('a header whose checksum does not match (not a tar archive?)');
    if (String.fromCharCode(...block.subarray(257, 262)) !== 'ustar') {
      throw invalid('a header that is not POSIX ustar');
    }
    const type = String.fromCharCode(block[156]!);
    let path: string;
    try {
      path = utf8.decode(block.subarray(0, NAME_BYTES)).replace(/\0.*$/s, '');
    } catch {
      throw invalid('a member name that is not UTF-8');
    }
    if (block[345] !== 0) throw invalid(`member ${shownName(path)} has a long path (ustar prefix)`);
    const slash = path.indexOf('/');
    const folder = slash < 0 ? '' : path.slice(0, slash);
    const name = slash < 0 ? path : path.slice(slash + 1);
    if (this.folder !== null && folder !== this.folder) {
      throw invalid(`member ${shownName(path)} is not in the folder ${shownName(this.folder)}`);
    }
    if (type === '5' && name === '') {
      // the folder's own entry, as tar writes it first
      const problem = memberNameProblem(folder);
      if (problem !== null) throw invalid(`folder ${shownName(folder)} is ${problem}`);
      this.folder = folder;
      return;
    }
    if (type !== '0' && type !== '\0') {
      throw invalid(`member ${shownName(path)} is not a regular file (type ${shownName(type)})`);
    }
    if (slash < 0) throw invalid(`member ${shownName(path)} is not in a folder (FOLDER/NAME)`);
    const problem = memberPathProblem(folder, name);
    if (problem !== null) throw invalid(`member ${shownName(path)} is ${problem}`);
    this.folder = folder;
    if (this.names.has(name)) throw invalid(`member ${shownName(path)} appears twice`);
    if (++this.members > TAR_MEMBER_LIMIT) throw invalid(`more than ${TAR_MEMBER_LIMIT} members`);
    this.names.add(name);
    const size = readOctal(block, 124, 12, 'size');
    this.inMember = true;
    this.dataLeft = size;
    this.padLeft = memberBytes(size) - TAR_BLOCK - size;
    await this.events.start(folder, name, size);
    if (size === 0) await this.endMember();
  }

  /** Throws unless the archive ended with its two zero blocks after a whole member. */
  finish(): void {
    if (this.inMember || this.pending.length > 0 || this.zeroBlocks < 2) {
      throw invalid('the archive ended before its end-of-archive blocks');
    }
    if (this.members === 0) throw invalid('the archive holds no file');
  }
}
