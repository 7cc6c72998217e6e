"""Replication: the pure state machines of a replicated partition (empty until cluster mode lands).

What will live here, beside ``coordinator`` and below ``server``: leader election (the first live replica
in assignment order that is in the ISR; no unclean election by default), the ISR (shrinking and expanding
it as conditional writes at the partition epoch), and the high watermark (the minimum log end offset over
the ISR, never decreasing; a follower keeps min(leader's high watermark, its own log end offset)), with
leader epochs and follower truncation (KIP-101, KIP-279). As ``coordinator``: (state, input, now_ms) ->
(output, records); no asyncio, no sockets, no wall clock (the import contracts in pyproject.toml hold it).
"""
