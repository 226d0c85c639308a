// Placeholder: the segment allocator issue adds `next <tag>` and `tag add|list|set-step`.
import type { Command } from 'commander';

export function registerSegmentCommands(_program: Command): void {}
