/** Running kernel tasks in this thread: for small tensors, the CLI, and as the pool's reference. */
import type { KernelModule } from './module.js';
import { slabArrays } from './small-arrays.js';
import { runKernelTask, type KernelTask, type TaskResult } from './tasks.js';
import type { Executor } from './tensor-ops.js';

export class InlineExecutor implements Executor {
  readonly parallelism = 1;
  readonly shared = false;

  constructor(private readonly module: KernelModule) {}

  async run(tasks: readonly KernelTask[]): Promise<TaskResult[]> {
    return tasks.map((task) => runKernelTask(this.module, task, slabArrays));
  }
}
