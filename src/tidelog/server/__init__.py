"""The asyncio broker: listener, dispatch, handlers, purgatory. The only package that uses asyncio."""
