/**
 * ONNX model files on disk, with every initializer's data in one external data file beside the
 * model (`MODEL.onnx` + `MODEL.onnx.data`, ONNX's external-data convention: `data_location =
 * EXTERNAL`, `location` relative to the model's directory, `offset` and `length` in bytes).
 *
 * Why always external: the ModelProto then holds only names, shapes and offsets (kilobytes), so it
 * is known before any tensor is computed and never approaches protobuf's 2 GiB message limit,
 * and the tensors stream to the data file one at a time (memory bounded by the largest tensor).
 * Offsets are aligned to 4096 bytes (a page: ONNX Runtime can map such tensors) for tensors of
 * 64 KiB or more, to 16 bytes otherwise; gaps read as zeros.
 *
 * The writer is atomic like the other writers: both files are written under hidden temporary
 * names beside their targets, fsynced, and renamed — the data file first, the model last — so the
 * model file never names data that is not complete. The reader takes inline `raw_data` as well as
 * external data, and refuses external locations that leave the model's directory.
 */
import { open, realpath, stat, type FileHandle } from 'node:fs/promises';
import { basename, dirname, isAbsolute, join } from 'node:path';

import { QuantdError } from '../errors/index.js';
import {
  decodeModel,
  encodeModel,
  onnxDTypeName,
  onnxElementBytes,
  OnnxFormatError,
  type OnnxInitializer,
  type OnnxModel,
} from './onnx.js';
import {
  forgetTemp,
  readFully,
  removeTemp,
  renameTemp,
  syncDirectory,
  tempPathFor,
  writeError,
  writeFully,
} from './file-io.js';

/** Largest model file (ModelProto) read: protobuf's own message limit. */
export const ONNX_MODEL_LIMIT = 2 ** 31 - 1;
const PAGE = 4096;
const PAGE_ALIGNED_FROM = 64 * 1024;
const SMALL_ALIGNMENT = 16;

export interface OnnxTensorPlan {
  readonly name: string;
  readonly dataType: number;
  readonly dims: readonly number[];
  /** The tensor's byte length. */
  readonly bytes: number;
}

/** Everything of the model but the initializers' data locations (the writer lays those out). */
export type OnnxModelPlan = Omit<OnnxModel, 'initializers'>;

/** The data file beside a model file: `MODEL.onnx.data`. */
export function onnxDataPath(modelPath: string): string {
  return `${modelPath}.data`;
}

const errorCode = (err: unknown): string | undefined => (err as NodeJS.ErrnoException | null)?.code;
const errorDetail = (err: unknown): string => (err instanceof Error ? err.message : String(err));

/** The file a rename into `path` replaces (through a symlink); a directory is refused. */
async function renameTarget(path: string): Promise<string> {
  let target: string;
  try {
    target = await realpath(path);
  } catch (err) {
    if (errorCode(err) === 'ENOENT') return path;
    throw new QuantdError('OUTPUT_UNWRITABLE', { path, detail: errorDetail(err) });
  }
  const info = await stat(target);
  if (!info.isFile()) {
    throw new QuantdError('OUTPUT_UNWRITABLE', {
      path,
      detail: info.isDirectory() ? 'it is a directory' : 'it exists and is not a regular file',
    });
  }
  return target;
}

export class OnnxFileWriter {
  private next = 0;
  private state: 'open' | 'committed' | 'aborted' = 'open';

  private constructor(
    private readonly handle: FileHandle,
    readonly path: string,
    readonly dataPath: string,
    private readonly dataTemp: string,
    private readonly dataTarget: string,
    private readonly modelTarget: string,
    private readonly model: OnnxModel,
    private readonly plan: readonly OnnxTensorPlan[],
    /** Offsets of the plan's tensors in the data file. */
    private readonly offsets: readonly number[],
  ) {}

  /** Lays the data file out and creates its temporary file; tensors follow with write(). */
  static async create(
    path: string,
    model: OnnxModelPlan,
    tensors: readonly OnnxTensorPlan[],
    /** Small tensors held in the model file itself (constants of a graph). */
    inline: readonly OnnxInitializer[] = [],
  ): Promise<OnnxFileWriter> {
    const dataPath = onnxDataPath(path);
    const location = basename(dataPath);
    const offsets: number[] = [];
    let end = 0;
    const initializers: OnnxInitializer[] = tensors.map((t) => {
      const align = t.bytes >= PAGE_ALIGNED_FROM ? PAGE : SMALL_ALIGNMENT;
      const offset = Math.ceil(end / align) * align;
      offsets.push(offset);
      end = offset + t.bytes;
      return {
        name: t.name,
        dataType: t.dataType,
        dims: t.dims,
        data: { kind: 'external', location, offset, length: t.bytes },
      };
    });
    const modelTarget = await renameTarget(path);
    const dataTarget = await renameTarget(dataPath);
    const dataTemp = tempPathFor(dataTarget);
    let fh: FileHandle;
    try {
      fh = await open(dataTemp, 'wx');
    } catch (err) {
      forgetTemp(dataTemp); // not ours: a signal must not remove it
      throw writeError(dataPath, err);
    }
    return new OnnxFileWriter(
      fh,
      path,
      dataPath,
      dataTemp,
      dataTarget,
      modelTarget,
      { ...model, initializers: [...inline, ...initializers] },
      tensors,
      offsets,
    );
  }

  /** The files a commit puts in place: the model and its data file. */
  get files(): readonly [string, string] {
    return [this.path, this.dataPath];
  }

  /** Writes the next planned tensor (exactly its planned bytes) into the data file. */
  async write(name: string, data: Uint8Array): Promise<void> {
    if (this.state !== 'open') throw this.internal(`write on an ONNX writer that was ${this.state}`);
    const t = this.plan[this.next];
    if (t === undefined || t.name !== name || data.length !== t.bytes) {
      await this.abort();
      throw this.internal(
        t === undefined
          ? `ONNX tensor ${JSON.stringify(name)} written after all planned tensors`
          : t.name !== name
            ? `ONNX tensors must be written in plan order: expected ${JSON.stringify(t.name)}, got ${JSON.stringify(name)}`
            : `ONNX tensor ${JSON.stringify(name)} has ${data.length} bytes, its plan needs ${t.bytes}`,
      );
    }
    const offset = this.offsets[this.next]!;
    this.next++;
    try {
      await writeFully(this.handle, data, offset);
    } catch (err) {
      await this.abort();
      throw writeError(this.dataPath, err);
    }
  }

  /** Writes the model file, fsyncs both, and renames the data file, then the model, into place. */
  async commit(): Promise<void> {
    if (this.state !== 'open') throw this.internal(`commit on an ONNX writer that was ${this.state}`);
    const missing = this.plan[this.next];
    if (missing !== undefined) {
      await this.abort();
      throw this.internal(`commit before ONNX tensor ${JSON.stringify(missing.name)} was written`);
    }
    const modelTemp = tempPathFor(this.modelTarget);
    try {
      const last = this.plan.length - 1;
      // a file whose last tensors are empty still has its full length
      await this.handle.truncate(last < 0 ? 0 : this.offsets[last]! + this.plan[last]!.bytes);
      await this.handle.sync();
      await this.handle.close();
    } catch (err) {
      await this.abort();
      throw writeError(this.dataPath, err);
    }
    try {
      const fh = await open(modelTemp, 'wx');
      try {
        await writeFully(fh, encodeModel(this.model), 0);
        await fh.sync();
      } finally {
        await fh.close();
      }
      await renameTemp(this.dataTemp, this.dataTarget);
      await renameTemp(modelTemp, this.modelTarget);
      this.state = 'committed';
    } catch (err) {
      this.state = 'aborted';
      await removeTemp(modelTemp);
      await removeTemp(this.dataTemp);
      throw writeError(this.path, err);
    }
    await syncDirectory(dirname(this.modelTarget));
    if (dirname(this.dataTarget) !== dirname(this.modelTarget)) await syncDirectory(dirname(this.dataTarget));
  }

  /** Discards the temporary files; the targets are left as they were. */
  async abort(): Promise<void> {
    if (this.state !== 'open') return;
    this.state = 'aborted';
    await this.handle.close().catch(() => undefined);
    await removeTemp(this.dataTemp);
  }

  private internal(detail: string): QuantdError {
    return new QuantdError('INTERNAL', { detail });
  }
}

// --- reading -----------------------------------------------------------------------------------

/** A malformed ONNX file as a catalogue error (LAYOUT_INVALID naming the file and the message). */
export function onnxInvalid(source: string, where: string, detail: string): QuantdError {
  return new QuantdError('LAYOUT_INVALID', { source, tensor: where, detail });
}

/**
 * The path of external data `location` of tensor `tensor` of the model at `modelPath`: a relative
 * path inside the model's directory, as ONNX specifies, or LAYOUT_INVALID (no absolute path, no
 * `..`, no NUL), so that a model file never makes quantd open a file elsewhere.
 */
export function externalDataPath(modelPath: string, location: string, tensor: string): string {
  const parts = location.split(/[\\/]/);
  if (location === '' || isAbsolute(location) || location.includes('\0') || parts.includes('..')) {
    throw onnxInvalid(
      modelPath,
      tensor,
      `external data location ${JSON.stringify(location)} is not a path inside the model's directory`,
    );
  }
  return join(dirname(modelPath), location);
}

export class OnnxFileReader {
  /**
   * Each external data file's opening, by location: the promise is kept, not the handle, so that
   * tensors read at once from one file share one handle (two openings raced before, and the
   * handle the map lost was left to the garbage collector).
   */
  private readonly handles = new Map<string, Promise<{ fh: FileHandle; size: number }>>();

  private constructor(
    readonly path: string,
    readonly model: OnnxModel,
  ) {}

  /** Reads and parses the model file (its external data is read on demand). */
  static async open(path: string): Promise<OnnxFileReader> {
    let bytes: Uint8Array;
    try {
      const info = await stat(path);
      if (!info.isFile()) {
        throw new QuantdError('FILE_UNREADABLE', {
          path,
          detail: info.isDirectory() ? 'is a directory' : 'not a regular file',
        });
      }
      if (info.size > ONNX_MODEL_LIMIT) {
        throw onnxInvalid(path, 'ModelProto', `is ${info.size} bytes, more than protobuf's 2 GiB limit`);
      }
      const fh = await open(path, 'r');
      try {
        bytes = new Uint8Array(await fh.readFile());
      } finally {
        await fh.close();
      }
    } catch (err) {
      if (err instanceof QuantdError) throw err;
      const code = errorCode(err);
      if (code === 'ENOENT' || code === 'ENOTDIR') throw new QuantdError('FILE_NOT_FOUND', { path });
      throw new QuantdError('FILE_UNREADABLE', { path, detail: errorDetail(err) });
    }
    try {
      return new OnnxFileReader(path, decodeModel(bytes));
    } catch (err) {
      if (err instanceof OnnxFormatError) throw onnxInvalid(path, err.where, err.detail);
      throw err;
    }
  }

  /** The byte length of an initializer's data (its dtype's size × its elements). */
  tensorBytes(t: OnnxInitializer): number {
    const size = onnxElementBytes(t.dataType);
    if (size === undefined) {
      throw new QuantdError('FEATURE_UNSUPPORTED', {
        detail: `${this.path}: tensor ${JSON.stringify(t.name)} is ${onnxDTypeName(t.dataType)}, which has no safetensors dtype`,
      });
    }
    return t.dims.reduce((a, d) => a * d, 1) * size;
  }

  /** The bytes of an initializer, checked against its dtype and dims. */
  async read(t: OnnxInitializer): Promise<Uint8Array> {
    const bytes = this.tensorBytes(t);
    if (t.data.kind === 'raw') {
      if (t.data.bytes.length !== bytes) {
        throw onnxInvalid(
          this.path,
          t.name,
          `raw_data holds ${t.data.bytes.length} bytes, its dims need ${bytes}`,
        );
      }
      return t.data.bytes;
    }
    const { location, offset, length } = t.data;
    if (length !== null && length !== bytes) {
      throw onnxInvalid(
        this.path,
        t.name,
        `external data length ${length} differs from the ${bytes} bytes its dims need`,
      );
    }
    const file = await this.dataFile(location, t.name);
    if (offset + bytes > file.size) {
      throw onnxInvalid(
        this.path,
        t.name,
        `external data ${location} holds ${file.size} bytes; the tensor needs bytes ${offset} to ${offset + bytes}`,
      );
    }
    return readFully(file.fh, new Uint8Array(bytes), offset, location, () =>
      onnxInvalid(this.path, t.name, `external data ${location} ended early`),
    );
  }

  private dataFile(location: string, tensor: string): Promise<{ fh: FileHandle; size: number }> {
    let opening = this.handles.get(location);
    if (!opening) {
      opening = this.openDataFile(location, tensor);
      this.handles.set(location, opening);
    }
    return opening;
  }

  private async openDataFile(location: string, tensor: string): Promise<{ fh: FileHandle; size: number }> {
    const path = externalDataPath(this.path, location, tensor);
    let fh: FileHandle;
    try {
      fh = await open(path, 'r');
    } catch (err) {
      const code = errorCode(err);
      if (code === 'ENOENT' || code === 'ENOTDIR') throw new QuantdError('FILE_NOT_FOUND', { path });
      throw new QuantdError('FILE_UNREADABLE', { path, detail: errorDetail(err) });
    }
    try {
      return { fh, size: (await fh.stat()).size };
    } catch (err) {
      await fh.close();
      throw new QuantdError('FILE_UNREADABLE', { path, detail: errorDetail(err) });
    }
  }

  async close(): Promise<void> {
    for (const opening of this.handles.values()) {
      const file = await opening.catch(() => null); // a failed opening holds no handle
      await file?.fh.close().catch(() => undefined);
    }
    this.handles.clear();
  }
}
