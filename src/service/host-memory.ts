/**
 * The memory this process may use: the machine's, or less where a control group caps it (a
 * container's limit is what the kernel enforces, and os.totalmem() reports the whole host).
 * Budgets derived from it (calibration state: src/service/calibration/limits.ts) then fit the
 * container they run in instead of the machine under it.
 */
import { readFileSync } from 'node:fs';
import { totalmem } from 'node:os';

/** cgroup v2, then v1: the first that holds a number (v2 writes "max" when there is no cap). */
const CGROUP_LIMITS = ['/sys/fs/cgroup/memory.max', '/sys/fs/cgroup/memory/memory.limit_in_bytes'];

/** The limit a cgroup file states, or null where it states none (absent, "max", not a number). */
export function cgroupLimit(read: (path: string) => string = (p) => readFileSync(p, 'utf8')): number | null {
  for (const path of CGROUP_LIMITS) {
    let text: string;
    try {
      text = read(path).trim();
    } catch {
      continue;
    }
    // cgroup v1 says "no limit" with a huge page-rounded number: take it as none
    if (/^\d+$/.test(text)) {
      const value = Number(text);
      if (Number.isSafeInteger(value) && value > 0 && value < 2 ** 60) return value;
    }
  }
  return null;
}

/** The bytes of memory this process may use: the machine's, or its control group's cap if lower. */
export function hostMemoryBytes(): number {
  const cap = cgroupLimit();
  const total = totalmem();
  return cap === null ? total : Math.min(total, cap);
}
