/**
 * Small typed arrays for the kernels of this thread, carved from one off-heap slab.
 *
 * A small tensor's op passes a few tiny arrays to the kernels (per-unit minima and maxima, scales,
 * zero points, a kilobyte of codes). Fresh, each costs more than the kernel's work: V8 keeps
 * typed arrays of up to 64 bytes inside its heap, and a native call must move one out before it
 * can take it (an allocation per argument, ~0.7 µs), while a larger one is an off-heap
 * allocation of its own (~0.9 µs). A per_tensor quantize of a 4 KiB tensor made nine of them,
 * half of its 13 µs (`node --cpu-prof`). Views of one slab cost neither: the slab is allocated
 * once per SLAB_BYTES, and freed by the collector when no view of it is left (as Node's
 * Buffer pool does). Views start zeroed, like fresh arrays: slab bytes are never handed out twice.
 *
 * Only for arrays that stay in this thread: posting a view to another thread copies its whole
 * slab. Executors that run tasks elsewhere use `freshArrays`.
 */

export type ArrayConstructor<T> = {
  new (buffer: ArrayBufferLike, byteOffset: number, length: number): T;
  new (length: number): T;
  readonly BYTES_PER_ELEMENT: number;
};

/** Makes a zeroed typed array of `length` elements. */
export type ArrayMaker = <T extends ArrayBufferView>(ctor: ArrayConstructor<T>, length: number) => T;

export const freshArrays: ArrayMaker = (ctor, length) => new ctor(length);

const SLAB_BYTES = 64 * 1024;
/** Larger arrays are allocated on their own (a slab would hold few). */
export const SMALL_ARRAY_BYTES = 4 * 1024;

let slab = new ArrayBuffer(0);
let used = 0;

/** Arrays of up to SMALL_ARRAY_BYTES from this thread's slab, larger ones fresh. */
export const slabArrays: ArrayMaker = (ctor, length) => {
  const bytes = length * ctor.BYTES_PER_ELEMENT;
  if (bytes > SMALL_ARRAY_BYTES) return new ctor(length);
  const at = Math.ceil(used / 8) * 8; // every element type stays aligned
  if (at + bytes > slab.byteLength) {
    slab = new ArrayBuffer(SLAB_BYTES);
    used = 0;
    return slabArrays(ctor, length);
  }
  used = at + bytes;
  return new ctor(slab, at, length);
};
