"""The partition log on disk: segments, indexes, checkpoints, recovery, retention. Blocking file I/O, no asyncio."""
