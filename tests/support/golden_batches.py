"""Golden record batches captured from real producers, stored as hex under tests/data/records/.

File format (``<client>-<codec>.hex``): ``#`` lines are comments (who wrote the batches, how); the
batches follow as hex, 32 bytes a line, one blank line between batches. Regenerate with
``.venv/bin/python -m tests.support.golden_batches`` (runs the real producers against a capture broker).
"""

from __future__ import annotations

import binascii
from pathlib import Path

from tidelog.protocol.records import Compression

GOLDEN_DIR = Path(__file__).resolve().parent.parent / "data" / "records"


def golden_path(client: str, codec: Compression) -> Path:
    return GOLDEN_DIR / f"{client}-{codec.name.lower()}.hex"


def format_batches(batches: list[bytes], comments: list[str]) -> str:
    lines = [f"# {c}" for c in comments]
    for batch in batches:
        lines.append("")
        lines.extend(batch[i : i + 32].hex() for i in range(0, len(batch), 32))
    return "\n".join(lines) + "\n"


def load_batches(path: Path) -> list[bytes]:
    """The batches of a golden file, each as its own bytes."""
    batches: list[bytes] = []
    current: list[str] = []
    for line in [*path.read_text().splitlines(), ""]:
        if line.startswith("#"):
            continue
        if line.strip():
            current.append(line.strip())
        elif current:
            batches.append(binascii.unhexlify("".join(current)))
            current = []
    return batches


def main() -> None:
    from tests.support.capture_broker import CaptureBroker
    from tests.support.client_producers import CLIENTS, CODECS, PRODUCERS, client_version, interop_records

    GOLDEN_DIR.mkdir(parents=True, exist_ok=True)
    with CaptureBroker() as broker:
        for client in CLIENTS:
            for codec in CODECS:
                topic = f"golden-{client}-{codec.name.lower()}"
                records = interop_records(client)
                PRODUCERS[client](broker.bootstrap, topic, records, codec)
                batches = broker.wait_for_records(topic, len(records))
                versions = sorted({c.api_version for c in broker.captured if c.topic == topic})
                comments = [
                    f"written by {client_version(client)}, compression {codec.name.lower()}",
                    f"Produce v{versions}, records: tests/support/client_producers.py interop_records({client!r})",
                    "regenerate: .venv/bin/python -m tests.support.golden_batches",
                ]
                golden_path(client, codec).write_text(format_batches(batches, comments))
                print(f"{golden_path(client, codec).name}: {len(batches)} batches")


if __name__ == "__main__":
    main()
