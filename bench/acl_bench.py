"""Per-request cost of authorization: ``AclAuthorizer.authorize()`` with 0, 100 and 10,000 ACLs.

The ACLs are spread over many topics (literal and prefixed, several principals, one literal wildcard), as
a multi-tenant cluster has them; each check is of a topic that has ACLs of its own, so the indexed lookup,
not an early return, is measured. Also the cost of the ``authz is None`` path handlers take without an
authorizer. Run: ``.venv/bin/python bench/acl_bench.py``.
"""

from __future__ import annotations

import timeit

from tidelog.server.security.acl import AclBinding, AclOperation, AclPermissionType, PatternType, ResourceType
from tidelog.server.security.authorizer import AclAuthorizer

_OPS = (AclOperation.READ, AclOperation.WRITE, AclOperation.DESCRIBE)


def _acls(count: int) -> list[AclBinding]:
    acls = []
    for i in range(count):
        pattern = PatternType.PREFIXED if i % 4 == 0 else PatternType.LITERAL
        name = f"team{i % 50}-" if pattern == PatternType.PREFIXED else f"team{i % 50}-topic{i}"
        acls.append(
            AclBinding(
                ResourceType.TOPIC,
                name,
                pattern,
                f"User:app{i % 200}",
                "*",
                _OPS[i % 3],
                AclPermissionType.DENY if i % 17 == 0 else AclPermissionType.ALLOW,
            )
        )
    if count:
        acls.append(
            AclBinding(
                ResourceType.TOPIC,
                "*",
                PatternType.LITERAL,
                "User:ops",
                "*",
                AclOperation.DESCRIBE,
                AclPermissionType.ALLOW,
            )
        )
    return acls


def main() -> None:
    number = 200_000
    for count in (0, 100, 10_000):
        authorizer = AclAuthorizer()
        authorizer.add(_acls(count))
        topic = "team7-topic57" if count else "orders"

        def check(authorizer: AclAuthorizer = authorizer, topic: str = topic) -> bool:
            return authorizer.authorize(
                "User:app57", "10.0.0.1", AclOperation.READ, ResourceType.TOPIC, topic
            )

        best = min(timeit.repeat(check, number=number, repeat=5)) / number
        print(f"{count:>6} ACLs: authorize() {best * 1e6:.2f} us  (allowed={check()})")
    authz: AclAuthorizer | None = None

    def unauthorized() -> bool:
        return authz is None or authz.authorize("User:app57", "", AclOperation.READ, ResourceType.TOPIC, "t")

    best = min(timeit.repeat(unauthorized, number=number, repeat=5)) / number
    print(f"no authorizer: the handlers' check {best * 1e9:.0f} ns")


if __name__ == "__main__":
    main()
